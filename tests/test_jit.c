/*
 * test_jit.c — the JIT and its on-disk cache (src/codegen/jit.h): SipHash
 * against the reference vectors; miss then hit (a hit never runs the
 * compiler: a wrapper script counts the compiler's runs); what the key
 * covers; corrupt entries rebuilt, never loaded; compile errors, a missing
 * compiler and unusable cache directories as clear errors; two processes
 * missing the same key at once; every allocation failure on the load path.
 *
 * Each test has its own cache directory (sh_jit_options.cache_dir under
 * th_tmp_path). Tests that compile SKIP (a note, then pass) when no C
 * compiler is found.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/file.h"
#include "codegen/jit.h"
#include "codegen/jit_int.h"
#include "harness.h"

static const char ADD_SRC[] = "int sheaf_test_add(int a, int b) { return a + b + 1; }\n";
typedef int (*add_fn)(int, int);

/* ------------------------------------------------------------ helpers */

static char g_cc[SH_JIT_PATH];

/* The compiler a default sh_jit would run, or NULL after printing a note. */
static const char *have_cc(const char *test) {
  if (g_cc[0]) return g_cc;
  sheaf_ctx *ctx = th_ctx();
  sh_jit *jit = NULL;
  sh_jit_options o = {.cache_dir = th_tmp_path("probe-cache")};
  if (sh_jit_create(ctx, &o, &jit) != SHEAF_OK) return NULL;
  const char *cc = sh_jit_compiler(jit);
  if (cc) snprintf(g_cc, sizeof g_cc, "%s", cc);
  else printf("note: %s skipped: %s\n", test, sheaf_ctx_last_error(ctx));
  sh_jit_free(jit);
  sheaf_ctx_clear_error(ctx);
  return cc ? g_cc : NULL;
}

/* A compiler wrapper that appends its arguments to `log` then runs the real
 * compiler: counts the compiler's runs. Returns its path (static slot). */
static const char *make_wrapper(const char *name, const char *log) {
  static char path[4][SH_JIT_PATH];
  static int slot;
  char *p = path[slot++ % 4];
  snprintf(p, SH_JIT_PATH, "%s", th_tmp_path(name));
  FILE *f = fopen(p, "w");
  if (!f) return NULL;
  fprintf(f, "#!/bin/sh\nprintf '%%s\\n' \"$*\" >> '%s'\nexec '%s' \"$@\"\n", log, g_cc);
  fclose(f);
  chmod(p, 0755);
  return p;
}

/* Compiles (not --version runs) recorded in a wrapper's log. */
static int compiles_in(const char *log) {
  FILE *f = fopen(log, "r");
  if (!f) return 0;
  char line[8192];
  int n = 0;
  while (fgets(line, sizeof line, f))
    if (strstr(line, " -shared ")) n++;
  fclose(f);
  return n;
}

static sh_jit *new_jit(sheaf_ctx *ctx, const char *dir, const char *cc) {
  sh_jit_options o = {.cache_dir = dir, .cc = cc};
  sh_jit *jit = NULL;
  CHECK_OK(ctx, sh_jit_create(ctx, &o, &jit));
  return jit;
}

static sh_jit_request add_request(void) {
  static const char *const flags[] = {"-O2"};
  return (sh_jit_request){.name = "test add", .source = ADD_SRC, .source_size = strlen(ADD_SRC),
                          .flags = flags, .n_flags = 1, .isa = "test"};
}

static char *dup_path(const char *p) {
  static char buf[8][SH_JIT_PATH];
  static int slot;
  char *b = buf[slot++ % 8];
  snprintf(b, SH_JIT_PATH, "%s", p);
  return b;
}

static bool file_exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

/* dup_path's copies live until 8 more are made. */

/* Builds req's entry in a child process (its own context and sh_jit), so
 * this process never maps the library the test then corrupts in place.
 * Returns the key (static), or NULL. */
static const char *build_in_child(const char *dir, const char *cc, const sh_jit_request *req) {
  static char key[33];
  int fds[2];
  if (pipe(fds) != 0) return NULL;
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    sheaf_ctx_options co = {.threads = 1};
    sheaf_ctx *ctx = NULL;
    sh_jit *jit = NULL;
    sh_jit_lib *lib = NULL;
    sh_jit_options o = {.cache_dir = dir, .cc = cc};
    int rc = 1;
    if (sheaf_ctx_create(&co, &ctx, NULL, 0) == SHEAF_OK && sh_jit_create(ctx, &o, &jit) == SHEAF_OK &&
        sh_jit_load(jit, req, &lib, NULL) == SHEAF_OK &&
        write(fds[1], sh_jit_lib_key(lib), 32) == 32)
      rc = 0;
    else if (ctx)
      fprintf(stderr, "build_in_child: %s\n", sheaf_ctx_last_error(ctx));
    sh_jit_free(jit);
    sheaf_ctx_free(ctx);
    _exit(rc);
  }
  close(fds[1]);
  ssize_t n = pid > 0 ? read(fds[0], key, 32) : -1;
  close(fds[0]);
  int status = 0;
  if (pid > 0) waitpid(pid, &status, 0);
  if (n != 32 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return NULL;
  key[32] = '\0';
  return key;
}

/* ---------------------------------------------------------------- hash */

TEST(jit_siphash_reference_vectors) {
  /* SipHash-2-4, key 00..0f, message 00 01 02 .. (len-1): the reference
   * implementation's vectors (64-bit tags as little-endian words). */
  static const uint64_t v64[64] = {
      0x726fdb47dd0e0e31ull, 0x74f839c593dc67fdull, 0x0d6c8009d9a94f5aull, 0x85676696d7fb7e2dull,
      0xcf2794e0277187b7ull, 0x18765564cd99a68dull, 0xcbc9466e58fee3ceull, 0xab0200f58b01d137ull,
      0x93f5f5799a932462ull, 0x9e0082df0ba9e4b0ull, 0x7a5dbbc594ddb9f3ull, 0xf4b32f46226bada7ull,
      0x751e8fbc860ee5fbull, 0x14ea5627c0843d90ull, 0xf723ca908e7af2eeull, 0xa129ca6149be45e5ull,
      0x3f2acc7f57c29bdbull, 0x699ae9f52cbe4794ull, 0x4bc1b3f0968dd39cull, 0xbb6dc91da77961bdull,
      0xbed65cf21aa2ee98ull, 0xd0f2cbb02e3b67c7ull, 0x93536795e3a33e88ull, 0xa80c038ccd5ccec8ull,
      0xb8ad50c6f649af94ull, 0xbce192de8a85b8eaull, 0x17d835b85bbb15f3ull, 0x2f2e6163076bcfadull,
      0xde4daaaca71dc9a5ull, 0xa6a2506687956571ull, 0xad87a3535c49ef28ull, 0x32d892fad841c342ull,
      0x7127512f72f27cceull, 0xa7f32346f95978e3ull, 0x12e0b01abb051238ull, 0x15e034d40fa197aeull,
      0x314dffbe0815a3b4ull, 0x027990f029623981ull, 0xcadcd4e59ef40c4dull, 0x9abfd8766a33735cull,
      0x0e3ea96b5304a7d0ull, 0xad0c42d6fc585992ull, 0x187306c89bc215a9ull, 0xd4a60abcf3792b95ull,
      0xf935451de4f21df2ull, 0xa9538f0419755787ull, 0xdb9acddff56ca510ull, 0xd06c98cd5c0975ebull,
      0xe612a3cb9ecba951ull, 0xc766e62cfcadaf96ull, 0xee64435a9752fe72ull, 0xa192d576b245165aull,
      0x0a8787bf8ecb74b2ull, 0x81b3e73d20b49b6full, 0x7fa8220ba3b2eceaull, 0x245731c13ca42499ull,
      0xb78dbfaf3a8d83bdull, 0xea1ad565322a1a0bull, 0x60e61c23a3795013ull, 0x6606d7e446282b93ull,
      0x6ca4ecb15c5f91e1ull, 0x9f626da15c9625f3ull, 0xe51b38608ef25f57ull, 0x958a324ceb064572ull};
  static const uint8_t v128[3][16] = {
      {0xa3, 0x81, 0x7f, 0x04, 0xba, 0x25, 0xa8, 0xe6, 0x6d, 0xf6, 0x72, 0x14, 0xc7, 0x55, 0x02, 0x93},
      {0xda, 0x87, 0xc1, 0xd8, 0x6b, 0x99, 0xaf, 0x44, 0x34, 0x76, 0x59, 0x11, 0x9b, 0x22, 0xfc, 0x45},
      {0x81, 0x77, 0x22, 0x8d, 0xa4, 0xa4, 0x5d, 0xc7, 0xfc, 0xa3, 0x8b, 0xde, 0xf6, 0x0a, 0xff, 0xe4}};
  uint8_t key[16], msg[64], out[16];
  for (int i = 0; i < 16; i++) key[i] = (uint8_t)i;
  for (int i = 0; i < 64; i++) msg[i] = (uint8_t)i;
  for (int len = 0; len < 64; len++) {
    sh_jit_hash h;
    sh_jit_hash_init(&h, key, 8);
    sh_jit_hash_update(&h, msg, (size_t)len);
    sh_jit_hash_final(&h, out);
    uint64_t got = 0;
    for (int b = 7; b >= 0; b--) got = (got << 8) | out[b];
    if (!CHECK(got == v64[len])) printf("  64-bit tag, length %d\n", len);
    /* the same bytes fed in pieces of 1, 2, 3, ... */
    sh_jit_hash_init(&h, key, 8);
    for (int at = 0, step = 1; at < len; at += step, step++)
      sh_jit_hash_update(&h, msg + at, (size_t)(at + step <= len ? step : len - at));
    sh_jit_hash_final(&h, out);
    got = 0;
    for (int b = 7; b >= 0; b--) got = (got << 8) | out[b];
    CHECK(got == v64[len]);
  }
  for (int len = 0; len < 3; len++) {
    sh_jit_hash h;
    sh_jit_hash_init(&h, key, 16);
    sh_jit_hash_update(&h, msg, (size_t)len);
    sh_jit_hash_final(&h, out);
    CHECK(memcmp(out, v128[len], 16) == 0);
  }
  char a[33], b[33];
  sh_jit_hash_hex("abc", 3, a);
  sh_jit_hash_hex("abd", 3, b);
  CHECK_EQ_SIZE(strlen(a), 32);
  CHECK(strcmp(a, b) != 0);
}

/* ------------------------------------------------------- miss then hit */

TEST(jit_miss_then_hit_does_not_compile) {
  if (!have_cc("jit_miss_then_hit_does_not_compile")) return;
  sheaf_ctx *ctx = th_ctx();
  const char *dir = dup_path(th_tmp_path("cache"));
  const char *log = dup_path(th_tmp_path("cc.log"));
  const char *cc = make_wrapper("cc-wrap", log);
  REQUIRE(cc != NULL);
  sh_jit_request req = add_request();

  sh_jit *jit = new_jit(ctx, dir, cc);
  REQUIRE(jit != NULL);
  sh_jit_lib *lib = NULL;
  bool hit = true;
  REQUIRE_OK(ctx, sh_jit_load(jit, &req, &lib, &hit));
  CHECK(!hit);
  CHECK_EQ_INT(compiles_in(log), 1);
  add_fn add = (add_fn)sh_jit_sym(lib, "sheaf_test_add");
  REQUIRE(add != NULL);
  CHECK_EQ_INT(add(2, 3), 6);
  CHECK(sh_jit_sym(lib, "no_such_symbol") == NULL);
  CHECK(sh_jit_lib_compile_ns(lib) > 0);
  sh_jit_stats s;
  sh_jit_get_stats(jit, &s);
  CHECK_EQ_INT(s.compiles, 1);
  CHECK_EQ_INT(s.loads, 1);
  CHECK_EQ_INT(s.disk_hits, 0);

  /* the entry: KEY.so, KEY.c (the source, byte for byte), KEY.meta */
  const char *so = dup_path(sh_jit_lib_path(lib));
  char key[33], path[SH_JIT_PATH];
  snprintf(key, sizeof key, "%s", sh_jit_lib_key(lib));
  CHECK(strstr(so, "/v1/") != NULL);
  snprintf(path, sizeof path, "%s/v1/%s.c", dir, key);
  CHECK(sh_jit_file_equals(path, ADD_SRC, strlen(ADD_SRC)));
  snprintf(path, sizeof path, "%s/v1/%s.meta", dir, key);
  char *meta = NULL;
  size_t meta_n = 0;
  REQUIRE_OK(ctx, sh_file_read(ctx, path, &meta, &meta_n));
  CHECK(strncmp(meta, "sheaf-jit-entry 1\n", 18) == 0);
  CHECK_CONTAINS(meta, "\nflag -O2\n");
  CHECK_CONTAINS(meta, "\nisa test\n");
  CHECK_CONTAINS(meta, "\ncompiler-version ");
  CHECK_CONTAINS(meta, "\nname test add\n");
  CHECK_CONTAINS(meta, "\nend\n");
  sh_free(ctx, meta, meta_n + 1);
  struct stat st0, st1;
  REQUIRE(stat(so, &st0) == 0);

  /* the same sh_jit: the library it holds */
  sh_jit_lib *again = NULL;
  REQUIRE_OK(ctx, sh_jit_load(jit, &req, &again, &hit));
  CHECK(hit);
  CHECK(again == lib);
  sh_jit_get_stats(jit, &s);
  CHECK_EQ_INT(s.memo_hits, 1);
  sh_jit_free(jit);

  /* a new sh_jit (a new run): the cache entry, no compiler run, nothing rewritten */
  jit = new_jit(ctx, dir, cc);
  REQUIRE(jit != NULL);
  REQUIRE_OK(ctx, sh_jit_load(jit, &req, &lib, &hit));
  CHECK(hit);
  CHECK_EQ_INT(compiles_in(log), 1);
  CHECK_EQ_STR(sh_jit_lib_key(lib), key);
  CHECK_EQ_INT(sh_jit_lib_compile_ns(lib), 0);
  CHECK(sh_jit_lib_load_ns(lib) > 0);
  add = (add_fn)sh_jit_sym(lib, "sheaf_test_add");
  REQUIRE(add != NULL);
  CHECK_EQ_INT(add(40, 1), 42);
  sh_jit_get_stats(jit, &s);
  CHECK_EQ_INT(s.compiles, 0);
  CHECK_EQ_INT(s.disk_hits, 1);
  CHECK(s.hit_ns > 0);
  REQUIRE(stat(so, &st1) == 0);
  CHECK(st0.st_ino == st1.st_ino && st0.st_mtim.tv_sec == st1.st_mtim.tv_sec &&
        st0.st_mtim.tv_nsec == st1.st_mtim.tv_nsec);
  sh_jit_free(jit);
}

/* ------------------------------------------------------------- the key */

TEST(jit_key_covers_flags_isa_headers_compiler_source) {
  if (!have_cc("jit_key_covers_flags_isa_headers_compiler_source")) return;
  sheaf_ctx *ctx = th_ctx();
  const char *dir = dup_path(th_tmp_path("cache"));
  const char *log = dup_path(th_tmp_path("cc.log"));
  const char *log2 = dup_path(th_tmp_path("cc2.log"));
  const char *cc = make_wrapper("cc-wrap", log);
  const char *cc2 = make_wrapper("cc-wrap2", log2);
  REQUIRE(cc && cc2);
  static const char src[] = "#include \"k.h\"\nint sheaf_test_k(void) { return K; }\n";
  static const char src2[] = "#include \"k.h\"\nint sheaf_test_k(void) { return K + 10; }\n";
  static const char h1[] = "#define K 1\n", h2[] = "#define K 2\n";
  const char *o1[] = {"-O1"}, *o2[] = {"-O2"};
  sh_jit_header hd1 = {"k.h", h1, strlen(h1)}, hd2 = {"k.h", h2, strlen(h2)};
  sh_jit_request base = {.source = src, .source_size = strlen(src), .flags = o1, .n_flags = 1,
                         .headers = &hd1, .n_headers = 1, .isa = "avx2"};
  struct {
    const char *what;
    sh_jit_request r;
    bool other_cc;
    int want;
  } cases[] = {
      {"base", base, false, 1},
      {"flags", base, false, 1},
      {"isa", base, false, 1},
      {"header", base, false, 2},
      {"source", base, false, 11},
      {"compiler", base, true, 1},
  };
  cases[1].r.flags = o2;
  cases[2].r.isa = "avx512";
  cases[3].r.headers = &hd2;
  cases[4].r.source = src2;
  cases[4].r.source_size = strlen(src2);
  sh_jit *jit = new_jit(ctx, dir, cc), *jit2 = new_jit(ctx, dir, cc2);
  REQUIRE(jit && jit2);
  char keys[6][33];
  for (int i = 0; i < 6; i++) {
    sh_jit_lib *lib = NULL;
    bool hit = true;
    if (!CHECK_OK(ctx, sh_jit_load(cases[i].other_cc ? jit2 : jit, &cases[i].r, &lib, &hit))) {
      printf("  case %s\n", cases[i].what);
      continue;
    }
    CHECK(!hit);
    snprintf(keys[i], 33, "%s", sh_jit_lib_key(lib));
    for (int k = 0; k < i; k++)
      if (!CHECK(strcmp(keys[k], keys[i]) != 0)) printf("  case %s has the key of %s\n", cases[i].what, cases[k].what);
    int (*fn)(void) = (int (*)(void))sh_jit_sym(lib, "sheaf_test_k");
    if (CHECK(fn != NULL)) CHECK_EQ_INT(fn(), cases[i].want);
  }
  CHECK_EQ_INT(compiles_in(log), 5);
  CHECK_EQ_INT(compiles_in(log2), 1);
  CHECK_EQ_SIZE(th_count_suffix(dup_path(th_tmp_path("cache/v1")), ".meta"), 6);
  sh_jit_free(jit);
  sh_jit_free(jit2);

  /* a support header changed in the cache is written again before the next
   * compile that needs it (the include folder is content-addressed) */
  char inc[SH_JIT_PATH];
  snprintf(inc, sizeof inc, "%s/v1/inc", dir);
  CHECK_EQ_SIZE(th_count_suffix(inc, "") - 2, 2); /* two header sets (and . and ..) */
  DIR *d = opendir(inc);
  REQUIRE(d != NULL);
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char p[SH_JIT_PATH + 300];
    snprintf(p, sizeof p, "%s/%s/k.h", inc, e->d_name);
    FILE *f = fopen(p, "w");
    if (f) fputs("#define K 99\n", f), fclose(f);
  }
  closedir(d);
  static const char src3[] = "#include \"k.h\"\nint sheaf_test_k(void) { return K + 100; }\n";
  sh_jit_request r3 = base;
  r3.source = src3;
  r3.source_size = strlen(src3);
  jit = new_jit(ctx, dir, cc);
  REQUIRE(jit != NULL);
  sh_jit_lib *lib = NULL;
  bool hit = true;
  REQUIRE_OK(ctx, sh_jit_load(jit, &r3, &lib, &hit));
  CHECK(!hit);
  int (*fn)(void) = (int (*)(void))sh_jit_sym(lib, "sheaf_test_k");
  if (CHECK(fn != NULL)) CHECK_EQ_INT(fn(), 101);
  /* and the earlier entries still hit */
  REQUIRE_OK(ctx, sh_jit_load(jit, &cases[1].r, &lib, &hit));
  CHECK(hit);
  CHECK_EQ_INT(compiles_in(log), 6);
  sh_jit_free(jit);
}

/* --------------------------------------------------------- corruption */

typedef struct log_rec {
  int warns;
  char last[512];
} log_rec;

static void rec_log(void *user, sheaf_log_level level, const char *msg) {
  log_rec *r = user;
  if (level == SHEAF_LOG_WARN) {
    r->warns++;
    snprintf(r->last, sizeof r->last, "%s", msg);
  }
}

static void flip_byte(const char *path, long at) {
  int fd = open(path, O_RDWR);
  if (fd < 0) return;
  unsigned char c;
  if (pread(fd, &c, 1, at) == 1) {
    c ^= 0x5a;
    if (pwrite(fd, &c, 1, at) != 1) th_fail(__FILE__, __LINE__, "pwrite %s", path);
  }
  close(fd);
}

static void write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, n, f) != n) th_fail(__FILE__, __LINE__, "cannot write %s", path);
  if (f) fclose(f);
}

static void copy_file(const char *from, const char *to) {
  char *data = NULL;
  size_t n = 0;
  FILE *f = fopen(from, "rb");
  if (f) {
    fseek(f, 0, SEEK_END);
    n = (size_t)ftell(f);
    rewind(f);
    data = malloc(n ? n : 1);
    if (data && fread(data, 1, n, f) != n) n = 0;
    fclose(f);
  }
  if (data) write_file(to, data, n);
  free(data);
}

TEST(jit_corrupt_entries_are_rebuilt_never_loaded) {
  if (!have_cc("jit_corrupt_entries_are_rebuilt_never_loaded")) return;
  const char *log = dup_path(th_tmp_path("cc.log"));
  const char *cc = make_wrapper("cc-wrap", log);
  const char *marker = dup_path(th_tmp_path("marker"));
  REQUIRE(cc != NULL);
  sh_jit_request req = add_request();

  /* an impostor: a valid library whose constructor leaves a marker file
   * when it is loaded, built into a cache of its own */
  char evil_src[SH_JIT_PATH + 256];
  snprintf(evil_src, sizeof evil_src,
           "#include <stdio.h>\n"
           "__attribute__((constructor)) static void mark(void) {\n"
           "  FILE *f = fopen(\"%s\", \"w\"); if (f) fclose(f);\n}\n"
           "int sheaf_test_add(int a, int b) { return -1000; }\n",
           marker);
  sh_jit_request evil = {.source = evil_src, .source_size = strlen(evil_src)};
  const char *evil_dir = dup_path(th_tmp_path("evil-cache"));
  const char *evil_key = build_in_child(evil_dir, cc, &evil);
  REQUIRE(evil_key != NULL);
  char evil_so[SH_JIT_PATH];
  snprintf(evil_so, sizeof evil_so, "%s/v1/%s.so", evil_dir, evil_key);
  CHECK(file_exists(marker)); /* the child loaded it: the marker works */
  unlink(marker);

  enum { TRUNC_SO, FLIP_SO, IMPOSTOR_SO, MISSING_SO, GARBAGE_META, TRUNC_META, OTHER_SOURCE, N_KINDS };
  static const char *const kinds[N_KINDS] = {"truncated .so", "flipped byte in .so", "impostor .so",
                                             "missing .so",   "garbage .meta",       "truncated .meta",
                                             "other source"};
  static const char *const reasons[N_KINDS] = {"truncated",       "corrupt",   "the metadata says",
                                               "missing",         "does not start", "truncated",
                                               "differs from the requested source"};
  for (int k = 0; k < N_KINDS; k++) {
    char dname[32];
    snprintf(dname, sizeof dname, "cache-%d", k);
    char dir[SH_JIT_PATH];
    snprintf(dir, sizeof dir, "%s", th_tmp_path(dname));
    const char *key = build_in_child(dir, cc, &req);
    if (!CHECK(key != NULL)) continue;
    char so[SH_JIT_PATH], meta[SH_JIT_PATH], csrc[SH_JIT_PATH];
    sh_jit_fmt(so, sizeof so, "%s/v1/%s.so", dir, key);
    sh_jit_fmt(meta, sizeof meta, "%s/v1/%s.meta", dir, key);
    sh_jit_fmt(csrc, sizeof csrc, "%s/v1/%s.c", dir, key);
    struct stat st;
    REQUIRE(stat(so, &st) == 0);
    switch (k) {
    case TRUNC_SO: CHECK(truncate(so, st.st_size / 2) == 0); break;
    case FLIP_SO: flip_byte(so, (long)st.st_size / 2); break;
    case IMPOSTOR_SO: copy_file(evil_so, so); break;
    case MISSING_SO: CHECK(unlink(so) == 0); break;
    case GARBAGE_META: {
      unsigned char junk[300];
      uint64_t s = 7;
      for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)(th_frand(&s) * 127 + 128);
      write_file(meta, junk, sizeof junk);
      break;
    }
    case TRUNC_META: {
      struct stat ms;
      REQUIRE(stat(meta, &ms) == 0);
      CHECK(truncate(meta, ms.st_size - 3) == 0);
      break;
    }
    case OTHER_SOURCE: {
      /* same length, same name, different bytes */
      char other[sizeof ADD_SRC];
      memcpy(other, ADD_SRC, sizeof other);
      other[strlen(other) - 5] = '2';
      write_file(csrc, other, strlen(other));
      break;
    }
    }
    int before = compiles_in(log);
    log_rec rec = {0};
    sheaf_ctx_options co = {.allocator = th_allocator(), .threads = 1, .log = rec_log,
                            .log_user = &rec, .log_level = SHEAF_LOG_WARN};
    sheaf_ctx *ctx = NULL;
    REQUIRE_OK(NULL, sheaf_ctx_create(&co, &ctx, NULL, 0));
    sh_jit *jit = new_jit(ctx, dir, cc);
    sh_jit_lib *lib = NULL;
    bool hit = true;
    if (jit && CHECK_OK(ctx, sh_jit_load(jit, &req, &lib, &hit))) {
      CHECK(!hit);
      add_fn add = (add_fn)sh_jit_sym(lib, "sheaf_test_add");
      if (CHECK(add != NULL)) CHECK_EQ_INT(add(1, 1), 3);
      sh_jit_stats s;
      sh_jit_get_stats(jit, &s);
      CHECK_EQ_INT(s.rejected, 1);
      CHECK_EQ_INT(s.compiles, 1);
      if (!CHECK(strstr(s.last_reject, reasons[k]) != NULL))
        printf("  %s: rejected because: %s\n", kinds[k], s.last_reject);
      CHECK_EQ_INT(rec.warns, 1);
      CHECK_CONTAINS(rec.last, "rebuilding");
    } else {
      printf("  %s\n", kinds[k]);
    }
    CHECK_EQ_INT(compiles_in(log), before + 1);
    if (!CHECK(!file_exists(marker))) printf("  %s: the impostor was loaded\n", kinds[k]);
    sh_jit_free(jit);
    /* repaired: the next run hits */
    jit = new_jit(ctx, dir, cc);
    if (jit && CHECK_OK(ctx, sh_jit_load(jit, &req, &lib, &hit))) CHECK(hit);
    CHECK_EQ_INT(compiles_in(log), before + 1);
    sh_jit_free(jit);
    sheaf_ctx_free(ctx);
  }
}

/* -------------------------------------------------------------- errors */

TEST(jit_compile_error_names_file_line_and_keeps_source) {
  if (!have_cc("jit_compile_error_names_file_line_and_keeps_source")) return;
  sheaf_ctx *ctx = th_ctx();
  const char *dir = dup_path(th_tmp_path("cache"));
  static const char bad[] = "int sheaf_test_bad(void) {\n  int x = 1;\n  return x + undeclared_y;\n}\n";
  sh_jit_request req = {.name = "kernel bad", .source = bad, .source_size = strlen(bad)};
  sh_jit *jit = new_jit(ctx, dir, NULL);
  REQUIRE(jit != NULL);
  /* nothing may reach this process's stdout or stderr */
  const char *out_path = dup_path(th_tmp_path("stdio"));
  fflush(stdout);
  fflush(stderr);
  int saved1 = dup(1), saved2 = dup(2);
  int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  REQUIRE(fd >= 0 && saved1 >= 0 && saved2 >= 0);
  dup2(fd, 1);
  dup2(fd, 2);
  sh_jit_lib *lib = (sh_jit_lib *)&lib;
  sheaf_status st = sh_jit_load(jit, &req, &lib, NULL);
  fflush(stdout);
  fflush(stderr);
  dup2(saved1, 1);
  dup2(saved2, 2);
  close(saved1);
  close(saved2);
  close(fd);
  struct stat os;
  CHECK(stat(out_path, &os) == 0 && os.st_size == 0);
  CHECK_EQ_INT(st, SHEAF_ERR_PARSE);
  CHECK(lib == NULL);
  const char *msg = sheaf_ctx_last_error(ctx);
  CHECK_CONTAINS(msg, "kernel bad: the C compiler ");
  CHECK_CONTAINS(msg, "exit status");
  CHECK_CONTAINS(msg, ".c:3:"); /* file:line of the diagnostic */
  CHECK_CONTAINS(msg, "undeclared_y");
  CHECK_CONTAINS(msg, "error");
  /* the source is kept where the diagnostics point, with the full output */
  const char *at = strstr(msg, "the source is kept at ");
  REQUIRE(at != NULL);
  char kept[SH_JIT_PATH];
  snprintf(kept, sizeof kept, "%s", at + strlen("the source is kept at "));
  char *comma = strchr(kept, ',');
  REQUIRE(comma != NULL);
  *comma = '\0';
  CHECK(sh_jit_file_equals(kept, bad, strlen(bad)));
  char needle[SH_JIT_PATH + 8];
  snprintf(needle, sizeof needle, "%s:3:", kept);
  CHECK_CONTAINS(msg, needle);
  const char *full = strstr(msg, "full output at ");
  REQUIRE(full != NULL);
  char log[SH_JIT_PATH];
  snprintf(log, sizeof log, "%s", full + strlen("full output at "));
  log[strcspn(log, ")")] = '\0';
  CHECK(file_exists(log));
  /* nothing published */
  char v1[SH_JIT_PATH];
  snprintf(v1, sizeof v1, "%s/v1", dir);
  CHECK_EQ_SIZE(th_count_suffix(v1, ".meta"), 0);
  CHECK_EQ_SIZE(th_count_suffix(v1, ".so"), 0);
  sh_jit_stats s;
  sh_jit_get_stats(jit, &s);
  CHECK_EQ_INT(s.compiles, 1);
  CHECK_EQ_INT(s.loads, 0);
  sh_jit_free(jit);
}

TEST(jit_missing_compiler_is_a_clear_error) {
  sheaf_ctx *ctx = th_ctx();
  const char *dir = dup_path(th_tmp_path("cache"));
  sh_jit_request req = add_request();
  sh_jit *jit = new_jit(ctx, dir, "/nonexistent/cc");
  REQUIRE(jit != NULL);
  sh_jit_lib *lib = NULL;
  CHECK_STATUS(ctx, sh_jit_load(jit, &req, &lib, NULL), SHEAF_ERR_NOT_FOUND);
  CHECK(lib == NULL);
  const char *msg = sheaf_ctx_last_error(ctx);
  CHECK_CONTAINS(msg, "test add: no C compiler");
  CHECK_CONTAINS(msg, "/nonexistent/cc");
  CHECK_CONTAINS(msg, "sh_jit_options.cc");
  CHECK_CONTAINS(msg, "SHEAF_CC");
  CHECK_CONTAINS(msg, "apt-get install -y gcc");
  CHECK(sh_jit_compiler(jit) == NULL);
  CHECK(!file_exists(dir)); /* nothing created */
  sh_jit_free(jit);

  /* a name not on PATH */
  jit = new_jit(ctx, dir, "sheaf-no-such-compiler");
  REQUIRE(jit != NULL);
  CHECK_STATUS(ctx, sh_jit_load(jit, &req, &lib, NULL), SHEAF_ERR_NOT_FOUND);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "'sheaf-no-such-compiler' (sh_jit_options.cc) is not on PATH");
  sh_jit_free(jit);

  /* not an executable */
  const char *plain = th_write_tmp("not-exec", "x", 1);
  jit = new_jit(ctx, dir, plain);
  REQUIRE(jit != NULL);
  CHECK_STATUS(ctx, sh_jit_load(jit, &req, &lib, NULL), SHEAF_ERR_NOT_FOUND);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "is not an executable file");
  sh_jit_free(jit);
}

TEST(jit_unusable_cache_dir_is_a_clear_error) {
  sheaf_ctx *ctx = th_ctx();
  sh_jit_request req = add_request();
  /* /bin/sh stands in for the compiler: every case fails before a compile */
  const char *file = dup_path(th_write_tmp("a-file", "x", 1));
  char under[SH_JIT_PATH];
  snprintf(under, sizeof under, "%s/sub", file);
  const char *dirs[] = {file, under};
  for (int i = 0; i < 2; i++) {
    sh_jit *jit = new_jit(ctx, dirs[i], "/bin/sh");
    REQUIRE(jit != NULL);
    sh_jit_lib *lib = NULL;
    CHECK_STATUS(ctx, sh_jit_load(jit, &req, &lib, NULL), SHEAF_ERR_IO);
    const char *msg = sheaf_ctx_last_error(ctx);
    CHECK_CONTAINS(msg, "JIT cache: cannot create the folder");
    CHECK_CONTAINS(msg, file);
    CHECK_CONTAINS(msg, "it exists and is not a directory");
    CHECK_CONTAINS(msg, "SHEAF_CACHE_DIR");
    sh_jit_free(jit);
  }
  if (geteuid() == 0) {
    printf("note: jit_unusable_cache_dir_is_a_clear_error: running as root, the read-only "
           "directory case is skipped (root may write anywhere)\n");
    return;
  }
  /* a directory this user cannot write; then a cache whose v1 is read-only */
  const char *ro = dup_path(th_tmp_path("read-only"));
  REQUIRE(mkdir(ro, 0555) == 0);
  char sub[SH_JIT_PATH], v1[SH_JIT_PATH];
  snprintf(sub, sizeof sub, "%s/cache", ro);
  sh_jit *jit = new_jit(ctx, sub, "/bin/sh");
  sh_jit_lib *lib = NULL;
  CHECK_STATUS(ctx, sh_jit_load(jit, &req, &lib, NULL), SHEAF_ERR_IO);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "Permission denied");
  sh_jit_free(jit);
  const char *cache = dup_path(th_tmp_path("cache-ro-v1"));
  snprintf(v1, sizeof v1, "%s/v1", cache);
  REQUIRE(mkdir(cache, 0700) == 0 && mkdir(v1, 0555) == 0);
  jit = new_jit(ctx, cache, have_cc("jit_unusable_cache_dir_is_a_clear_error") ? g_cc : "/bin/sh");
  CHECK_STATUS(ctx, sh_jit_load(jit, &req, &lib, NULL), SHEAF_ERR_IO);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "Permission denied");
  sh_jit_free(jit);
  chmod(ro, 0700);
  chmod(v1, 0700);
}

TEST(jit_invalid_requests) {
  sheaf_ctx *ctx = th_ctx();
  sh_jit *jit = new_jit(ctx, th_tmp_path("cache"), "/nonexistent/cc");
  REQUIRE(jit != NULL);
  sh_jit_lib *lib = NULL;
  CHECK_STATUS(ctx, sh_jit_load(jit, NULL, &lib, NULL), SHEAF_ERR_INVALID_ARG);
  sh_jit_request r = add_request();
  CHECK_STATUS(ctx, sh_jit_load(jit, &r, NULL, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_STATUS(ctx, sh_jit_load(NULL, &r, &lib, NULL), SHEAF_ERR_INVALID_ARG);
  r.source = NULL;
  CHECK_STATUS(ctx, sh_jit_load(jit, &r, &lib, NULL), SHEAF_ERR_INVALID_ARG);
  r = add_request();
  r.flags = NULL;
  CHECK_STATUS(ctx, sh_jit_load(jit, &r, &lib, NULL), SHEAF_ERR_INVALID_ARG);
  const char *null_flag[] = {NULL};
  r.flags = null_flag;
  CHECK_STATUS(ctx, sh_jit_load(jit, &r, &lib, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "flags[0] is NULL");
  static const char *const bad_names[] = {"../x.h", ".hidden.h", "a/b.h", "", "a b.h"};
  for (size_t i = 0; i < SH_ARRAY_LEN(bad_names); i++) {
    r = add_request();
    sh_jit_header h = {bad_names[i], "x", 1};
    r.headers = &h;
    r.n_headers = 1;
    CHECK_STATUS(ctx, sh_jit_load(jit, &r, &lib, NULL), SHEAF_ERR_INVALID_ARG);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "is not a plain file name");
  }
  sh_jit_header twice[2] = {{"a.h", "", 0}, {"a.h", "", 0}};
  r = add_request();
  r.headers = twice;
  r.n_headers = 2;
  CHECK_STATUS(ctx, sh_jit_load(jit, &r, &lib, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "given twice");
  CHECK(lib == NULL);
  CHECK(sh_jit_sym(NULL, "x") == NULL);
  CHECK(sh_jit_lib_path(NULL) == NULL);
  sh_jit_free(jit);
  sh_jit_free(NULL);
}

/* --------------------------------------------------- the environment */

static void restore_env(const char *name, const char *saved) {
  if (saved) setenv(name, saved, 1);
  else unsetenv(name);
}

TEST(jit_cache_dir_and_compiler_from_the_environment) {
  sheaf_ctx *ctx = th_ctx();
  const char *names[] = {"SHEAF_CACHE_DIR", "XDG_CACHE_HOME", "HOME", "SHEAF_CC"};
  char *saved[4];
  for (int i = 0; i < 4; i++) {
    const char *v = getenv(names[i]);
    saved[i] = v ? strdup(v) : NULL;
    unsetenv(names[i]);
  }
  sh_jit *jit = NULL;
  setenv("HOME", "/home/someone", 1);
  if (CHECK_OK(ctx, sh_jit_create(ctx, NULL, &jit))) CHECK_EQ_STR(sh_jit_cache_dir(jit), "/home/someone/.cache/sheaf");
  sh_jit_free(jit);
  setenv("XDG_CACHE_HOME", "relative/is/ignored", 1);
  if (CHECK_OK(ctx, sh_jit_create(ctx, NULL, &jit))) CHECK_EQ_STR(sh_jit_cache_dir(jit), "/home/someone/.cache/sheaf");
  sh_jit_free(jit);
  setenv("XDG_CACHE_HOME", "/xdg/cache/", 1);
  if (CHECK_OK(ctx, sh_jit_create(ctx, NULL, &jit))) CHECK_EQ_STR(sh_jit_cache_dir(jit), "/xdg/cache/sheaf");
  sh_jit_free(jit);
  setenv("SHEAF_CACHE_DIR", "/explicit/dir//", 1);
  if (CHECK_OK(ctx, sh_jit_create(ctx, NULL, &jit))) CHECK_EQ_STR(sh_jit_cache_dir(jit), "/explicit/dir");
  sh_jit_free(jit);
  sh_jit_options o = {.cache_dir = "rel-cache"};
  char cwd[SH_JIT_PATH], want[SH_JIT_PATH + 16];
  REQUIRE(getcwd(cwd, sizeof cwd) != NULL);
  snprintf(want, sizeof want, "%s/rel-cache", cwd);
  if (CHECK_OK(ctx, sh_jit_create(ctx, &o, &jit))) CHECK_EQ_STR(sh_jit_cache_dir(jit), want);
  sh_jit_free(jit);
  /* SHEAF_CC names the compiler when the options do not */
  setenv("SHEAF_CC", "/nonexistent/sheaf-cc", 1);
  if (CHECK_OK(ctx, sh_jit_create(ctx, NULL, &jit))) {
    CHECK(sh_jit_compiler(jit) == NULL);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "/nonexistent/sheaf-cc (from SHEAF_CC)");
  }
  sh_jit_free(jit);
  setenv("SHEAF_CC", "gcc -m32", 1);
  if (CHECK_OK(ctx, sh_jit_create(ctx, NULL, &jit))) {
    CHECK(sh_jit_compiler(jit) == NULL);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "names one program");
  }
  sh_jit_free(jit);
  /* nothing to name a directory with */
  unsetenv("SHEAF_CACHE_DIR");
  unsetenv("XDG_CACHE_HOME");
  unsetenv("HOME");
  jit = (sh_jit *)&jit;
  CHECK_STATUS(ctx, sh_jit_create(ctx, NULL, &jit), SHEAF_ERR_INVALID_ARG);
  CHECK(jit == NULL);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "set SHEAF_CACHE_DIR");
  for (int i = 0; i < 4; i++) {
    restore_env(names[i], saved[i]);
    free(saved[i]);
  }
}

/* --------------------------------------------------------- concurrency */

TEST(jit_two_processes_miss_the_same_key_at_once) {
  if (!have_cc("jit_two_processes_miss_the_same_key_at_once")) return;
  const char *dir = dup_path(th_tmp_path("cache"));
  const char *log = dup_path(th_tmp_path("cc.log"));
  const char *cc = make_wrapper("cc-wrap", log);
  REQUIRE(cc != NULL);
  sh_jit_request req = add_request();
  int go[2];
  REQUIRE(pipe(go) == 0);
  pid_t kids[2];
  fflush(stdout);
  fflush(stderr);
  for (int i = 0; i < 2; i++) {
    kids[i] = fork();
    if (kids[i] == 0) {
      close(go[1]);
      char c;
      if (read(go[0], &c, 1) != 0) _exit(3); /* wait for the start: the pipe's close */
      sheaf_ctx_options co = {.threads = 1};
      sheaf_ctx *ctx = NULL;
      sh_jit *jit = NULL;
      sh_jit_lib *lib = NULL;
      sh_jit_options o = {.cache_dir = dir, .cc = cc};
      int rc = 1;
      if (sheaf_ctx_create(&co, &ctx, NULL, 0) == SHEAF_OK && sh_jit_create(ctx, &o, &jit) == SHEAF_OK &&
          sh_jit_load(jit, &req, &lib, NULL) == SHEAF_OK) {
        add_fn add = (add_fn)sh_jit_sym(lib, "sheaf_test_add");
        rc = add && add(20, 21) == 42 ? 0 : 2;
      } else if (ctx) {
        fprintf(stderr, "child %d: %s\n", i, sheaf_ctx_last_error(ctx));
      }
      sh_jit_free(jit);
      sheaf_ctx_free(ctx);
      _exit(rc);
    }
    REQUIRE(kids[i] > 0);
  }
  close(go[0]);
  close(go[1]); /* both start now */
  for (int i = 0; i < 2; i++) {
    int status = 0;
    CHECK(waitpid(kids[i], &status, 0) == kids[i]);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  /* one compile (the per-key lock), one valid entry */
  CHECK_EQ_INT(compiles_in(log), 1);
  char v1[SH_JIT_PATH];
  snprintf(v1, sizeof v1, "%s/v1", dir);
  CHECK_EQ_SIZE(th_count_suffix(v1, ".meta"), 1);
  CHECK_EQ_SIZE(th_count_suffix(v1, ".so"), 1);
  CHECK_EQ_SIZE(th_count_suffix(v1, ".tmp"), 0);
  sheaf_ctx *ctx = th_ctx();
  sh_jit *jit = new_jit(ctx, dir, cc);
  REQUIRE(jit != NULL);
  sh_jit_lib *lib = NULL;
  bool hit = false;
  CHECK_OK(ctx, sh_jit_load(jit, &req, &lib, &hit));
  CHECK(hit);
  CHECK_EQ_INT(compiles_in(log), 1);
  sh_jit_free(jit);
}

/* ------------------------------------------------- allocation failures */

TEST(jit_load_survives_every_allocation_failure) {
  if (!have_cc("jit_load_survives_every_allocation_failure")) return;
  sheaf_ctx *ctx = th_ctx();
  sh_jit_request req = add_request();
  static const char hdr[] = "#define ONE 1\n";
  static const char src[] = "#include \"one.h\"\nint sheaf_test_one(void) { return ONE; }\n";
  sh_jit_header h = {"one.h", hdr, strlen(hdr)};
  sh_jit_request with_header = {.source = src, .source_size = strlen(src), .headers = &h, .n_headers = 1};
  /* the miss path (a fresh cache each time), then the hit path (a warm
   * cache, a new sh_jit each time), then a memo hit */
  const char *warm = dup_path(th_tmp_path("warm"));
  for (int mode = 0; mode < 3; mode++) {
    bool done = false;
    for (long n = 1; n < 200 && !done; n++) {
      char dname[48];
      snprintf(dname, sizeof dname, "miss-%d-%ld", mode, n);
      const char *dir = mode == 0 ? th_tmp_path(dname) : warm;
      sh_jit *jit = NULL;
      sh_jit_lib *lib = NULL;
      sh_jit_options o = {.cache_dir = dir};
      if (mode == 2) {
        REQUIRE_OK(ctx, sh_jit_create(ctx, &o, &jit));
        REQUIRE_OK(ctx, sh_jit_load(jit, &with_header, &lib, NULL));
        lib = NULL;
      }
      th_fail_alloc_at(n);
      sheaf_status st = jit ? SHEAF_OK : sh_jit_create(ctx, &o, &jit);
      if (st == SHEAF_OK) st = sh_jit_load(jit, mode == 1 ? &req : &with_header, &lib, NULL);
      th_fail_alloc_at(0);
      if (st == SHEAF_OK) {
        done = true;
        const char *sym = mode == 1 ? "sheaf_test_add" : "sheaf_test_one";
        CHECK(sh_jit_sym(lib, sym) != NULL);
      } else {
        CHECK_EQ_INT(st, SHEAF_ERR_NOMEM);
        CHECK(lib == NULL);
        CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "out of memory");
      }
      sh_jit_free(jit);
      if (mode == 0 && n == 1) { /* warm the hit path's cache */
        REQUIRE_OK(ctx, sh_jit_create(ctx, &(sh_jit_options){.cache_dir = warm}, &jit));
        REQUIRE_OK(ctx, sh_jit_load(jit, &req, &lib, NULL));
        REQUIRE_OK(ctx, sh_jit_load(jit, &with_header, &lib, NULL));
        sh_jit_free(jit);
      }
    }
    if (!CHECK(done)) printf("  mode %d never succeeded\n", mode);
  }
}

/* ------------------------------------------------------ lazy requests */

typedef struct lazy_gen {
  int calls;
  sheaf_status fail; /* returned (with a message) instead of the C */
  sheaf_ctx *ctx;
} lazy_gen;

static sheaf_status lazy_add_c(void *user, sh_buf *c) {
  lazy_gen *g = user;
  g->calls++;
  if (g->fail) return sh_fail(g->ctx, g->fail, "test generator: cannot express this kernel");
  sh_buf_puts(c, ADD_SRC);
  return SHEAF_OK;
}

TEST(jit_lazy_request_generates_c_on_a_miss_only) {
  if (!have_cc("jit_lazy_request_generates_c_on_a_miss_only")) return;
  sheaf_ctx *ctx = th_ctx();
  const char *dir = dup_path(th_tmp_path("cache"));
  const char *log = dup_path(th_tmp_path("cc.log"));
  const char *cc = make_wrapper("cc-wrap", log);
  REQUIRE(cc != NULL);
  static const char spec[] = "spec: the add kernel, generator 1\n";
  lazy_gen g = {.ctx = ctx};
  sh_jit_request req = add_request();
  req.source = spec, req.source_size = strlen(spec), req.gen = lazy_add_c, req.gen_user = &g;

  /* miss: the generator runs once, the compiler once */
  sh_jit *jit = new_jit(ctx, dir, cc);
  REQUIRE(jit != NULL);
  sh_jit_lib *lib = NULL;
  bool hit = true;
  REQUIRE_OK(ctx, sh_jit_load(jit, &req, &lib, &hit));
  CHECK(!hit);
  CHECK_EQ_INT(g.calls, 1);
  CHECK_EQ_INT(compiles_in(log), 1);
  add_fn add = (add_fn)sh_jit_sym(lib, "sheaf_test_add");
  REQUIRE(add != NULL);
  CHECK_EQ_INT(add(1, 1), 3);
  char key[33], path[SH_JIT_PATH];
  snprintf(key, sizeof key, "%s", sh_jit_lib_key(lib));
  snprintf(path, sizeof path, "%s/v1/%s.spec", dir, key);
  CHECK(sh_jit_file_equals(path, spec, strlen(spec)));
  snprintf(path, sizeof path, "%s/v1/%s.c", dir, key);
  CHECK(sh_jit_file_equals(path, ADD_SRC, strlen(ADD_SRC)));
  sh_jit_free(jit);

  /* a new run: a verified hit, neither the generator nor the compiler runs */
  jit = new_jit(ctx, dir, cc);
  REQUIRE(jit != NULL);
  REQUIRE_OK(ctx, sh_jit_load(jit, &req, &lib, &hit));
  CHECK(hit);
  CHECK_EQ_INT(g.calls, 1);
  CHECK_EQ_INT(compiles_in(log), 1);
  CHECK_EQ_STR(sh_jit_lib_key(lib), key);
  sh_jit_free(jit);

  /* the same text as a plain (C) source is another entry */
  sh_jit_request plain = add_request();
  jit = new_jit(ctx, dir, cc);
  REQUIRE(jit != NULL);
  plain.source = spec, plain.source_size = strlen(spec);
  CHECK_EQ_INT(sh_jit_load(jit, &plain, &lib, &hit), SHEAF_ERR_PARSE); /* the spec is not C */
  sh_jit_free(jit);
  int compiles = compiles_in(log);

  /* a different stored spec (a collision, or tampering): rejected, rebuilt */
  snprintf(path, sizeof path, "%s/v1/%s.spec", dir, key);
  FILE *f = fopen(path, "w");
  REQUIRE(f != NULL);
  fputs("spec: something else\n", f);
  fclose(f);
  jit = new_jit(ctx, dir, cc);
  REQUIRE(jit != NULL);
  REQUIRE_OK(ctx, sh_jit_load(jit, &req, &lib, &hit));
  CHECK(!hit);
  CHECK_EQ_INT(g.calls, 2);
  CHECK_EQ_INT(compiles_in(log), compiles + 1);
  sh_jit_stats s;
  sh_jit_get_stats(jit, &s);
  CHECK_EQ_INT(s.rejected, 1);
  CHECK_CONTAINS(s.last_reject, "differs from the requested spec");
  CHECK(sh_jit_file_equals(path, spec, strlen(spec)));
  sh_jit_free(jit);

  /* the generator's failure is the load's, and publishes nothing */
  static const char spec2[] = "spec: a kernel the generator refuses\n";
  lazy_gen bad = {.ctx = ctx, .fail = SHEAF_ERR_UNSUPPORTED};
  req.source = spec2, req.source_size = strlen(spec2), req.gen_user = &bad;
  jit = new_jit(ctx, dir, cc);
  REQUIRE(jit != NULL);
  lib = NULL;
  CHECK_EQ_INT(sh_jit_load(jit, &req, &lib, &hit), SHEAF_ERR_UNSUPPORTED);
  CHECK(lib == NULL);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "cannot express this kernel");
  CHECK_EQ_INT(bad.calls, 1);
  CHECK_EQ_INT(compiles_in(log), compiles + 1);
  char vdir[SH_JIT_PATH];
  snprintf(vdir, sizeof vdir, "%s/v1", dir);
  CHECK_EQ_SIZE(th_count_suffix(vdir, ".meta"), 1); /* the lazy add only: neither the plain spec nor the refused one */
  sh_jit_free(jit);
  sheaf_ctx_clear_error(ctx);

  /* every allocation failing on the lazy miss path (a fresh cache each time) */
  bool done = false;
  for (int n = 1; n < 200 && !done; n++) {
    char dname[32];
    snprintf(dname, sizeof dname, "lazy-nomem-%d", n);
    sh_jit_options o = {.cache_dir = th_tmp_path(dname)};
    lazy_gen gn = {.ctx = ctx};
    req.source = spec, req.source_size = strlen(spec), req.gen_user = &gn;
    jit = NULL;
    lib = NULL;
    th_fail_alloc_at(n);
    sheaf_status st = sh_jit_create(ctx, &o, &jit);
    if (st == SHEAF_OK) st = sh_jit_load(jit, &req, &lib, NULL);
    th_fail_alloc_at(0);
    if (st == SHEAF_OK) {
      done = true;
      CHECK(sh_jit_sym(lib, "sheaf_test_add") != NULL);
    } else {
      CHECK_EQ_INT(st, SHEAF_ERR_NOMEM);
      CHECK(lib == NULL);
    }
    sh_jit_free(jit);
  }
  CHECK(done);
}
