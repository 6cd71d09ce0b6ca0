/*
 * jit.c — sh_jit: the key of a request, the in-process libraries, the
 * disk cache's hit path (verify, then dlopen), and the miss path (per-key
 * lock, recheck, compile, publish .c, .so, then .meta, dlopen). See jit.h
 * and docs/CODEGEN.md.
 */
#include "jit_int.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The first lines of the compiler's output in the error message. */
#define DIAG_LINES 12
#define DIAG_BYTES 1200

/* -------------------------------------------------------------- create */

static bool set_path(char *dst, const char *a, const char *b) {
  return (size_t)snprintf(dst, SH_JIT_PATH, "%s%s", a, b) < SH_JIT_PATH;
}

/* Longest cache directory: room for "/v1/build/KEY.PID.N.tmp.log" and the like. */
#define DIR_MAX (SH_JIT_PATH - 160)

/* vdir/KEY.ext (always fits: the directory is at most DIR_MAX). */
static void entry_path(const sh_jit *jit, const char *key, const char *ext, char *out) {
  sh_jit_fmt(out, SH_JIT_PATH, "%s/%s%s", jit->vdir, key, ext);
}

sheaf_status sh_jit_create(sheaf_ctx *ctx, const sh_jit_options *opts, sh_jit **out) {
  if (!ctx) return SHEAF_ERR_INVALID_ARG;
  if (!out) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sh_jit_create: out is NULL");
  *out = NULL;
  sh_jit_options o = {0};
  if (opts) o = *opts;
  sh_jit *jit = sh_calloc(ctx, 1, sizeof *jit);
  if (!jit) return SHEAF_ERR_NOMEM;
  jit->ctx = ctx;

  const char *env, *base = NULL, *suffix = "";
  if (o.cache_dir && *o.cache_dir) base = o.cache_dir, jit->dir_from = "sh_jit_options.cache_dir";
  else if ((env = getenv("SHEAF_CACHE_DIR")) && *env) base = env, jit->dir_from = "SHEAF_CACHE_DIR";
  else if ((env = getenv("XDG_CACHE_HOME")) && env[0] == '/')
    base = env, suffix = "/sheaf", jit->dir_from = "XDG_CACHE_HOME";
  else if ((env = getenv("HOME")) && *env)
    base = env, suffix = "/.cache/sheaf", jit->dir_from = "HOME";
  sheaf_status st = SHEAF_OK;
  if (!base) {
    st = sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                 "JIT cache: no cache directory: set SHEAF_CACHE_DIR (or XDG_CACHE_HOME or HOME)");
  } else {
    char cwd[SH_JIT_PATH], joined[SH_JIT_PATH];
    size_t nb = strlen(base);
    while (nb > 1 && base[nb - 1] == '/') nb--; /* "/x/" + "/sheaf" */
    bool ok = nb < SH_JIT_PATH && (size_t)snprintf(joined, sizeof joined, "%.*s%s", (int)nb, base,
                                                   suffix) < sizeof joined;
    if (ok && joined[0] != '/') { /* absolute: a later chdir must not move the cache */
      char rel[SH_JIT_PATH];
      memcpy(rel, joined, sizeof rel);
      ok = getcwd(cwd, sizeof cwd) && (size_t)snprintf(joined, sizeof joined, "%s/%s", cwd, rel) <
                                          sizeof joined;
    }
    size_t n = strlen(joined);
    while (n > 1 && joined[n - 1] == '/') joined[--n] = '\0';
    if (ok) ok = strlen(joined) <= DIR_MAX && set_path(jit->dir, joined, "") &&
                 set_path(jit->vdir, joined, "/v1");
    if (!ok)
      st = sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "JIT cache: the cache directory %s%s (from %s) "
                   "is too long or cannot be made absolute", base, suffix, jit->dir_from);
  }
  if (st == SHEAF_OK) {
    const char *cc = "cc";
    jit->cc_from = "the default";
    if (o.cc && *o.cc) cc = o.cc, jit->cc_from = "sh_jit_options.cc";
    else if ((env = getenv("SHEAF_CC")) && *env) cc = env, jit->cc_from = "SHEAF_CC";
    if (!set_path(jit->cc_want, cc, ""))
      st = sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "JIT: the compiler path (from %s) is too long",
                   jit->cc_from);
  }
  if (st != SHEAF_OK) {
    sh_free(ctx, jit, sizeof *jit);
    return st;
  }
  *out = jit;
  return SHEAF_OK;
}

void sh_jit_free(sh_jit *jit) {
  if (!jit) return;
  sheaf_ctx *ctx = jit->ctx;
  for (sh_jit_lib *l = jit->libs, *next; l; l = next) {
    next = l->next;
    dlclose(l->handle);
    sh_free(ctx, l->source, l->source_size + 1);
    sh_free(ctx, l, sizeof *l);
  }
  sh_free(ctx, jit, sizeof *jit);
}

/* ------------------------------------------------------------ queries */

void *sh_jit_sym(const sh_jit_lib *lib, const char *name) {
  return lib && name ? dlsym(lib->handle, name) : NULL;
}
const char *sh_jit_lib_path(const sh_jit_lib *lib) { return lib ? lib->path : NULL; }
const char *sh_jit_lib_key(const sh_jit_lib *lib) { return lib ? lib->key : NULL; }
uint64_t sh_jit_lib_compile_ns(const sh_jit_lib *lib) { return lib ? lib->compile_ns : 0; }
uint64_t sh_jit_lib_load_ns(const sh_jit_lib *lib) { return lib ? lib->load_ns : 0; }
const char *sh_jit_cache_dir(const sh_jit *jit) { return jit ? jit->dir : NULL; }

const char *sh_jit_compiler(sh_jit *jit) {
  return jit && sh_jit_cc_resolve(jit) == SHEAF_OK ? jit->cc : NULL;
}

void sh_jit_get_stats(const sh_jit *jit, sh_jit_stats *out) {
  if (!out) return;
  if (jit) *out = jit->stats;
  else memset(out, 0, sizeof *out);
}

/* ------------------------------------------------------------- the key */

/* A value on one metadata line: bytes below 0x20, 0x7f and '\' as \xHH. */
static void put_escaped(sh_buf *b, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c < 0x20 || c == 0x7f || c == '\\') sh_buf_printf(b, "\\x%02x", c);
    else sh_buf_putc(b, (char)c);
  }
}

static void put_line(sh_buf *b, const char *field, const char *value) {
  sh_buf_puts(b, field);
  sh_buf_putc(b, ' ');
  put_escaped(b, value, strlen(value));
  sh_buf_putc(b, '\n');
}

static bool header_name_ok(const char *s) {
  if (!s || !*s || *s == '.' || strlen(s) > 128) return false;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
          *s == '_' || *s == '-' || *s == '.'))
      return false;
  return true;
}

static sheaf_status check_request(sh_jit *jit, const sh_jit_request *r) {
  sheaf_ctx *ctx = jit->ctx;
  if (!r->source && r->source_size) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sh_jit_load: source is NULL");
  if (r->n_flags && !r->flags) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sh_jit_load: flags is NULL");
  for (size_t i = 0; i < r->n_flags; i++)
    if (!r->flags[i]) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sh_jit_load: flags[%zu] is NULL", i);
  if (r->n_headers && !r->headers)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sh_jit_load: headers is NULL");
  for (size_t i = 0; i < r->n_headers; i++) {
    const sh_jit_header *h = &r->headers[i];
    if (!header_name_ok(h->name))
      return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                     "sh_jit_load: support header %zu: name '%s' is not a plain file name "
                     "(letters, digits, '_', '-', '.'; not starting with '.')",
                     i, h->name ? h->name : "(null)");
    if (!h->text && h->size)
      return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sh_jit_load: support header %s: text is NULL", h->name);
    for (size_t k = 0; k < i; k++)
      if (!strcmp(r->headers[k].name, h->name))
        return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sh_jit_load: support header %s given twice", h->name);
  }
  return SHEAF_OK;
}

/* The key material, one field a line (what the metadata repeats and the
 * key hashes): the entry format and the fixed arguments, the ISA, the
 * compiler's identity, the flags, each support header's name, size and
 * hash, the source's size and hash. *hhex: the header set's hash (its
 * include folder). */
static sheaf_status key_material(sh_jit *jit, const sh_jit_request *r, sh_buf *m, char *hhex) {
  char hex[33];
  sh_buf_puts(m, "format cc FLAGS [-I<headers>] -shared -fPIC -o KEY.so KEY.c\n");
  put_line(m, "isa", r->isa ? r->isa : "");
  put_line(m, "compiler", jit->cc_id);
  sh_buf_printf(m, "flags %zu\n", r->n_flags);
  for (size_t i = 0; i < r->n_flags; i++) put_line(m, "flag", r->flags[i]);
  sh_jit_hash hs;
  sh_jit_hash_begin(&hs);
  sh_buf_printf(m, "headers %zu\n", r->n_headers);
  for (size_t i = 0; i < r->n_headers; i++) {
    const sh_jit_header *h = &r->headers[i];
    sh_jit_hash_hex(h->text, h->size, hex);
    sh_buf_printf(m, "header %s %zu %s\n", h->name, h->size, hex);
    uint64_t lens[2] = {strlen(h->name), h->size};
    sh_jit_hash_update(&hs, lens, sizeof lens);
    sh_jit_hash_update(&hs, h->name, lens[0]);
    sh_jit_hash_update(&hs, h->text, h->size);
  }
  uint8_t tag[16];
  sh_jit_hash_final(&hs, tag);
  sh_jit_hex(tag, 16, hhex);
  sh_jit_hash_hex(r->source, r->source_size, hex);
  sh_buf_printf(m, "%s %zu %s\n", r->gen ? "spec" : "source", r->source_size, hex);
  return sh_buf_status(m);
}

/* ------------------------------------------------------------- loading */

/* dlopen of the entry's .so into a new library of jit. */
static sheaf_status open_lib(sh_jit *jit, const sh_jit_request *r, const char *name,
                             const char *key, sh_jit_lib **out) {
  sheaf_ctx *ctx = jit->ctx;
  sh_jit_lib *lib = sh_calloc(ctx, 1, sizeof *lib);
  if (!lib) return SHEAF_ERR_NOMEM;
  lib->source = sh_malloc(ctx, r->source_size + 1);
  if (!lib->source) {
    sh_free(ctx, lib, sizeof *lib);
    return SHEAF_ERR_NOMEM;
  }
  if (r->source_size) memcpy(lib->source, r->source, r->source_size);
  lib->source[r->source_size] = '\0';
  lib->source_size = r->source_size;
  memcpy(lib->key, key, sizeof lib->key);
  entry_path(jit, key, ".so", lib->path);
  dlerror();
  lib->handle = dlopen(lib->path, RTLD_NOW | RTLD_LOCAL);
  if (!lib->handle) {
    const char *e = dlerror();
    sheaf_status st = sh_fail(ctx, SHEAF_ERR_FORMAT, "%s: cannot load %s: %s", name, lib->path,
                              e ? e : "dlopen failed");
    sh_free(ctx, lib->source, lib->source_size + 1);
    sh_free(ctx, lib, sizeof *lib);
    return st;
  }
  lib->next = jit->libs;
  jit->libs = lib;
  *out = lib;
  return SHEAF_OK;
}

/* The first lines of the compiler's output (at most DIAG_LINES lines and
 * DIAG_BYTES bytes, an ellipsis when cut). */
static void first_lines(const char *log, char *out, size_t cap) {
  out[0] = '\0';
  FILE *f = fopen(log, "r");
  if (!f) return;
  char buf[DIAG_BYTES + 1];
  size_t n = fread(buf, 1, DIAG_BYTES, f);
  bool more = fgetc(f) != EOF;
  fclose(f);
  buf[n] = '\0';
  size_t cut = 0;
  int lines = 0;
  while (cut < n && lines < DIAG_LINES) {
    char *nl = memchr(buf + cut, '\n', n - cut);
    cut = nl ? (size_t)(nl - buf) + 1 : n;
    lines++;
  }
  if (cut < n) more = true;
  while (cut && (buf[cut - 1] == '\n' || buf[cut - 1] == '\r')) cut--;
  snprintf(out, cap, "%.*s%s", (int)cut, buf, more ? "\n..." : "");
}

/* Compiles req into the entry `key` and publishes it: the source goes to
 * build/KEY.c (kept there when the compile fails, so the diagnostics'
 * file:line point at it; a unique name when the key's lock could not be
 * taken), the library to a unique temporary; then KEY.c, KEY.so and last
 * KEY.meta are renamed into place. A reader verifies all three against
 * each other, so a half-published entry is never loaded. */
static sheaf_status compile(sh_jit *jit, const sh_jit_request *r, const char *name, const char *key,
                            const sh_buf *material, const char *hhex, bool locked,
                            uint64_t *compile_ns) {
  sheaf_ctx *ctx = jit->ctx;
  uint64_t t0 = sheaf_time_ns();
  char build[SH_JIT_PATH], src[SH_JIT_PATH], so_tmp[SH_JIT_PATH], log[SH_JIT_PATH],
      stem[SH_JIT_PATH], inc[SH_JIT_PATH] = "";
  char kc[48];
  snprintf(kc, sizeof kc, "%s.c", key);
  if (!sh_jit_join(jit, build, jit->vdir, "build") || !sh_jit_join(jit, src, build, kc) ||
      !sh_jit_join(jit, stem, build, key))
    return sheaf_ctx_last_status(ctx);
  if (!locked) sh_jit_tmp_name(src, sizeof src, stem, ".c"); /* others may compile it too */
  sheaf_status st = sh_jit_mkdirs(jit, build);
  if (st == SHEAF_OK && r->n_headers) st = sh_jit_headers_put(jit, r, hhex, inc);
  /* the C: the source itself, or (lazy) what gen makes of the spec */
  sh_buf cgen;
  sh_buf_init(&cgen, ctx);
  const char *csrc = r->source;
  size_t csize = r->source_size;
  if (st == SHEAF_OK && r->gen) {
    st = r->gen(r->gen_user, &cgen);
    if (st == SHEAF_OK) st = sh_buf_status(&cgen);
    csrc = (const char *)cgen.data, csize = cgen.len;
  }
  if (st == SHEAF_OK) st = sh_jit_write_atomic(jit, src, csrc, csize);
  if (st != SHEAF_OK) {
    sh_buf_free(&cgen);
    return st;
  }
  sh_jit_cc_version(jit);
  sh_jit_tmp_name(so_tmp, sizeof so_tmp, stem, ".so");
  sh_jit_tmp_name(log, sizeof log, stem, ".log");

  size_t argc = 0, cap = r->n_flags + 8;
  char **argv = sh_calloc(ctx, cap, sizeof *argv);
  if (!argv) {
    sh_buf_free(&cgen);
    return SHEAF_ERR_NOMEM;
  }
  char inc_flag[SH_JIT_PATH + 3];
  argv[argc++] = jit->cc;
  for (size_t i = 0; i < r->n_flags; i++) argv[argc++] = (char *)(uintptr_t)r->flags[i];
  if (r->n_headers) {
    snprintf(inc_flag, sizeof inc_flag, "-I%s", inc);
    argv[argc++] = inc_flag;
  }
  argv[argc++] = (char *)"-shared";
  argv[argc++] = (char *)"-fPIC";
  argv[argc++] = (char *)"-o";
  argv[argc++] = so_tmp;
  argv[argc++] = src;
  argv[argc] = NULL;
  int ws = 0;
  jit->stats.compiles++;
  st = sh_jit_cc_run(jit, argv, log, &ws);
  sh_free(ctx, argv, cap * sizeof *argv);
  if (st != SHEAF_OK) {
    sh_buf_free(&cgen);
    unlink(log);
    unlink(so_tmp);
    return st;
  }
  if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
    char kept_log[SH_JIT_PATH], how[64], diag[DIAG_BYTES + 8];
    sh_jit_fmt(kept_log, sizeof kept_log, "%s.log", stem);
    if (rename(log, kept_log) != 0) memcpy(kept_log, log, sizeof kept_log);
    unlink(so_tmp);
    if (WIFEXITED(ws)) snprintf(how, sizeof how, "exit status %d", WEXITSTATUS(ws));
    else snprintf(how, sizeof how, "killed by signal %d", WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
    first_lines(kept_log, diag, sizeof diag);
    sh_buf_free(&cgen);
    jit->stats.compile_ns += sheaf_time_ns() - t0;
    return sh_fail(ctx, SHEAF_ERR_PARSE,
                   "%s: the C compiler %s failed (%s):\n%s\n(the source is kept at %s, the "
                   "compiler's full output at %s)",
                   name, jit->cc, how, diag[0] ? diag : "(no output)", src, kept_log);
  }
  unlink(log);

  uint64_t so_size;
  char so_sum[33];
  if (!sh_jit_file_sum(so_tmp, &so_size, so_sum) || so_size == 0) {
    sh_buf_free(&cgen);
    unlink(so_tmp);
    return sh_fail(ctx, SHEAF_ERR_IO, "%s: the C compiler %s succeeded but wrote no library %s",
                   name, jit->cc, so_tmp);
  }
  char dst[SH_JIT_PATH];
  entry_path(jit, key, ".c", dst);
  if (rename(src, dst) != 0) st = sh_jit_write_atomic(jit, dst, csrc, csize);
  sh_buf_free(&cgen);
  if (st == SHEAF_OK && r->gen) { /* the spec, which a hit compares */
    entry_path(jit, key, ".spec", dst);
    st = sh_jit_write_atomic(jit, dst, r->source, r->source_size);
  }
  entry_path(jit, key, ".so", dst);
  if (st == SHEAF_OK && rename(so_tmp, dst) != 0)
    st = sh_fail(ctx, SHEAF_ERR_IO, "JIT cache: cannot rename %s to %s: %s", so_tmp, dst,
                 strerror(errno));
  if (st != SHEAF_OK) {
    unlink(so_tmp);
    return st;
  }
  uint64_t dt = sheaf_time_ns() - t0;
  sh_buf meta;
  sh_buf_init(&meta, ctx);
  sh_buf_puts(&meta, SH_JIT_FORMAT "\n");
  sh_buf_put(&meta, material->data, material->len);
  sh_buf_printf(&meta, "key %s\n", key);
  put_line(&meta, "name", name);
  put_line(&meta, "compiler-version", jit->cc_version);
  put_line(&meta, "include", inc[0] ? inc : "-");
  sh_buf_printf(&meta, "compile-ms %.1f\ncreated %lld\nso %llu %s\nend\n", (double)dt / 1e6,
                (long long)time(NULL), (unsigned long long)so_size, so_sum);
  entry_path(jit, key, ".meta", dst);
  st = sh_buf_status(&meta);
  if (st == SHEAF_OK) st = sh_jit_write_atomic(jit, dst, meta.data, meta.len);
  sh_buf_free(&meta);
  *compile_ns = sheaf_time_ns() - t0;
  jit->stats.compile_ns += *compile_ns;
  if (st == SHEAF_OK)
    sh_log(ctx, SHEAF_LOG_INFO, "JIT: compiled %s in %.0f ms (%s/%s.so)", name,
           (double)*compile_ns / 1e6, jit->vdir, key);
  return st;
}

/* The per-key lock (flock on KEY.lock): concurrent misses of one key
 * compile once. -1 when locks do not work here: then each compiles and the
 * last rename wins (every file is still whole; a mismatched pair is
 * rejected and rebuilt by the next reader). */
static int lock_key(sh_jit *jit, const char *key) {
  char path[SH_JIT_PATH];
  entry_path(jit, key, ".lock", path);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  int rc;
  while ((rc = flock(fd, LOCK_EX)) != 0 && errno == EINTR) {}
  if (rc != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static void finish(sh_jit *jit, sh_jit_lib *lib, uint64_t t0, uint64_t compile_ns) {
  uint64_t dt = sheaf_time_ns() - t0;
  lib->compile_ns = compile_ns;
  lib->load_ns = dt - compile_ns;
  jit->stats.loads++;
  jit->stats.last_load_ns = dt;
}

sheaf_status sh_jit_load(sh_jit *jit, const sh_jit_request *req, sh_jit_lib **out, bool *hit) {
  uint64_t t0 = sheaf_time_ns();
  if (!jit) return SHEAF_ERR_INVALID_ARG;
  sheaf_ctx *ctx = jit->ctx;
  if (hit) *hit = false;
  if (!out) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sh_jit_load: out is NULL");
  *out = NULL;
  if (!req) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sh_jit_load: req is NULL");
  sheaf_status st = check_request(jit, req);
  if (st != SHEAF_OK) return st;
  const char *name = req->name && *req->name ? req->name : "generated C";
  if ((st = sh_jit_cc_resolve(jit)) != SHEAF_OK) return sh_fail_prefix(ctx, "%s", name);

  sh_buf material;
  sh_buf_init(&material, ctx);
  char hhex[33], key[33];
  if ((st = key_material(jit, req, &material, hhex)) != SHEAF_OK) {
    sh_buf_free(&material);
    return st;
  }
  sh_jit_hash_hex(material.data, material.len, key);

  for (sh_jit_lib *l = jit->libs; l; l = l->next)
    if (!strcmp(l->key, key) && l->source_size == req->source_size &&
        (!l->source_size || !memcmp(l->source, req->source, l->source_size))) {
      sh_buf_free(&material);
      jit->stats.memo_hits++;
      jit->stats.loads++;
      jit->stats.last_load_ns = sheaf_time_ns() - t0;
      if (hit) *hit = true;
      *out = l;
      return SHEAF_OK;
    }

  if (!jit->dir_ok) {
    if ((st = sh_jit_mkdirs(jit, jit->vdir)) != SHEAF_OK) {
      sh_buf_free(&material);
      return st;
    }
    jit->dir_ok = true;
  }

  /* the hit path: no lock, nothing written */
  char why[sizeof jit->stats.last_reject - 64] = "";
  sh_jit_lib *lib = NULL;
  int v = sh_jit_entry_check(jit, key, &material, req->source, req->source_size, req->gen != NULL, why, sizeof why);
  if (v == SH_JIT_ENTRY_OK) {
    st = open_lib(jit, req, name, key, &lib);
    if (st == SHEAF_OK) {
      sh_buf_free(&material);
      finish(jit, lib, t0, 0);
      jit->stats.disk_hits++;
      jit->stats.hit_ns += lib->load_ns;
      if (hit) *hit = true;
      *out = lib;
      return SHEAF_OK;
    }
    if (st == SHEAF_ERR_NOMEM) {
      sh_buf_free(&material);
      return st;
    }
  }
  if (v == SH_JIT_ENTRY_ERR) {
    sh_buf_free(&material);
    return sheaf_ctx_last_status(ctx);
  }
  bool bad_load = v == SH_JIT_ENTRY_OK; /* verified, yet dlopen refused it */
  if (bad_load) sh_last_error_copy(ctx, why, sizeof why);

  /* the miss path: under the key's lock, check again (another process may
   * have published it meanwhile), else compile and publish */
  int lock = lock_key(jit, key);
  v = bad_load ? SH_JIT_ENTRY_BAD
               : sh_jit_entry_check(jit, key, &material, req->source, req->source_size, req->gen != NULL, why, sizeof why);
  uint64_t compile_ns = 0;
  bool compiled = false;
  if (v == SH_JIT_ENTRY_ERR) st = sheaf_ctx_last_status(ctx);
  else if (v == SH_JIT_ENTRY_OK) st = SHEAF_OK;
  else {
    if (v == SH_JIT_ENTRY_BAD) {
      jit->stats.rejected++;
      sh_jit_fmt(jit->stats.last_reject, sizeof jit->stats.last_reject, "%s/%s: %s", jit->vdir,
                 key, why);
      sh_log(ctx, SHEAF_LOG_WARN, "JIT cache: entry %s/%s rejected (%s); rebuilding it", jit->vdir,
             key, why);
    }
    st = compile(jit, req, name, key, &material, hhex, lock >= 0, &compile_ns);
    compiled = true;
  }
  if (st == SHEAF_OK) st = open_lib(jit, req, name, key, &lib);
  if (lock >= 0) close(lock);
  sh_buf_free(&material);
  if (st != SHEAF_OK) return st;
  finish(jit, lib, t0, compile_ns);
  if (!compiled) {
    jit->stats.disk_hits++;
    jit->stats.hit_ns += lib->load_ns;
  }
  if (hit) *hit = !compiled;
  *out = lib;
  return SHEAF_OK;
}
