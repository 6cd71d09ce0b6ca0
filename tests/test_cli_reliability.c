/*
 * test_cli_reliability.c — what the `sheaf` tool does with the files it is
 * given (issues 19 and 20): outputs pointed at a device, a FIFO or a folder
 * (never replaced; errors are exit 1), outputs kept whole when a command
 * fails, standard output errors, outputs that are inputs (exit 2), '-',
 * pipes, FIFOs and /dev/stdin as inputs (read once, never a hang), the
 * input limit (SHEAF_MAX_INPUT), usage errors (exit 2), and a property
 * test: over a set of commands that succeed and fail, nothing in the
 * folder changes but the outputs asked for, and nothing at all on a
 * failure. Also sh_out (base/file.h) through the API.
 *
 * A device: a node made with mknod (char 1,7, i.e. /dev/full) in the test's
 * folder when allowed (root), else /dev/full itself.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "base/file.h"
#include "harness.h"

#define SMALL "tests/data/small.conllu"
#define EWT "data/ud_english_ewt/en_ewt-ud-test.conllu"
/* a model from source that runs fast on SMALL */
#define TREELSTM_SF "examples/treelstm.sf --seed 1 --size E=4 --size H=4 --size C=3"
#define TREELSTM "treelstm --hidden 8 --embed 8"

static char g_out[1 << 16];

#define NEED_BIN() \
  do {             \
    if (!th_sheaf_bin()) return; /* runner started without SHEAF_BIN */ \
  } while (0)

/* Runs a shell command, "$S" standing for the sheaf binary; exit status,
 * output (stdout + stderr) in g_out. */
static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
  char line[3000], cmd[4000];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof cmd, "export S='%s'; %s", th_sheaf_bin(), line);
  return th_run(cmd, g_out, sizeof g_out);
}

/* tmpl with every "{key}" replaced by its value (kv: key, value, ...,
 * NULL). */
static const char *expand(const char *tmpl, const char *const *kv) {
  static char buf[4000];
  size_t n = 0;
  for (const char *t = tmpl; *t && n + 1 < sizeof buf;) {
    const char *const *k = kv;
    if (*t == '{')
      for (; *k; k += 2)
        if (!strncmp(t + 1, k[0], strlen(k[0])) && t[1 + strlen(k[0])] == '}') break;
    if (*t == '{' && *k) {
      n += (size_t)snprintf(buf + n, sizeof buf - n, "%s", k[1]);
      t += strlen(k[0]) + 2;
    } else {
      buf[n++] = *t++;
    }
  }
  buf[n < sizeof buf ? n : sizeof buf - 1] = '\0';
  return buf;
}

/* A new empty folder under the test's temporary folder (static copy). */
static const char *new_dir(const char *name) {
  static char paths[4][600];
  static int slot;
  char *p = paths[slot++ % 4];
  snprintf(p, sizeof paths[0], "%s", th_tmp_path(name));
  if (mkdir(p, 0755) != 0 && errno != EEXIST) th_fail(__FILE__, __LINE__, "mkdir %s: %s", p, strerror(errno));
  return p;
}

/* dir/full as a copy of /dev/full's node when mknod is allowed; else
 * /dev/full. */
static const char *device(const char *dir, char *buf, size_t cap) {
  snprintf(buf, cap, "%s/full", dir);
  if (mknod(buf, S_IFCHR | 0666, makedev(1, 7)) == 0) return buf;
  snprintf(buf, cap, "/dev/full");
  return buf;
}

static bool is_char_device(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 7);
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  if (!f || fputs(text, f) < 0 || fclose(f) != 0) th_fail(__FILE__, __LINE__, "cannot write %s", path);
}

/* The contents of a file, malloc'd (NUL-terminated; NULL when unreadable). */
static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, len = 0;
  char *b = malloc(cap);
  for (size_t r; b && (r = fread(b + len, 1, cap - len - 1, f)) > 0;) {
    len += r;
    if (cap - len < 2) b = realloc(b, cap *= 2);
  }
  fclose(f);
  if (b) b[len] = '\0';
  if (n) *n = len;
  return b;
}

static bool file_is(const char *path, const char *text) {
  size_t n;
  char *s = slurp(path, &n);
  bool same = s && n == strlen(text) && !memcmp(s, text, n);
  free(s);
  return same;
}

static bool same_bytes(const char *a, const char *b) {
  size_t na, nb;
  char *x = slurp(a, &na), *y = slurp(b, &nb);
  bool same = x && y && na == nb && !memcmp(x, y, na);
  free(x);
  free(y);
  return same;
}

/* Unblocks a reader left waiting on a FIFO (its writer never came): opens
 * the write end without waiting and closes it (the reader sees the end). */
static void release_fifo(const char *path) {
  int fd = open(path, O_WRONLY | O_NONBLOCK);
  if (fd >= 0) close(fd);
}

/* ------------------------------------------------------------ sh_out, API */

TEST(file_out_regular_replaced_only_at_commit) {
  sheaf_ctx *ctx = th_ctx();
  const char *d = new_dir("out-api");
  char path[700], link[700];
  snprintf(path, sizeof path, "%s/a.txt", d);
  write_file(path, "old\n");
  chmod(path, 0640);
  sh_out o;
  REQUIRE_OK(ctx, sh_out_open(ctx, path, 0, &o));
  CHECK(o.tmp != NULL);
  fputs("new contents\n", o.f);
  fflush(o.f);
  CHECK(file_is(path, "old\n")); /* nothing reaches the file before commit */
  sh_out_abort(&o);
  CHECK(file_is(path, "old\n"));
  REQUIRE_OK(ctx, sh_out_open(ctx, path, 0, &o));
  char tmp[800];
  snprintf(tmp, sizeof tmp, "%s", o.tmp);
  fputs("new contents\n", o.f);
  REQUIRE_OK(ctx, sh_out_commit(&o));
  CHECK(file_is(path, "new contents\n"));
  CHECK(access(tmp, F_OK) != 0); /* the temporary file became the file */
  struct stat st;
  REQUIRE(stat(path, &st) == 0);
  CHECK_EQ_INT(st.st_mode & 0777, 0640); /* its permissions are kept */
  /* through a symbolic link, the file it points to is replaced; the link stays */
  snprintf(link, sizeof link, "%s/link.txt", d);
  REQUIRE(symlink(path, link) == 0);
  REQUIRE_OK(ctx, sh_file_write_atomic(ctx, link, "via link\n", 9));
  struct stat lst;
  CHECK(lstat(link, &lst) == 0 && S_ISLNK(lst.st_mode));
  CHECK(file_is(path, "via link\n"));
  /* a folder, a missing folder: errors naming the path, nothing created */
  CHECK_STATUS(ctx, sh_out_open(ctx, d, 0, &o), SHEAF_ERR_IO);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "is a directory");
  snprintf(path, sizeof path, "%s/no/such/file", d);
  CHECK_STATUS(ctx, sh_out_open(ctx, path, 0, &o), SHEAF_ERR_IO);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), path);
  sh_out_abort(&o); /* safe after a failed open */
}

TEST(file_out_device_written_into_never_replaced) {
  sheaf_ctx *ctx = th_ctx();
  const char *d = new_dir("out-api-dev");
  char dev[700];
  device(d, dev, sizeof dev);
  sh_out o;
  REQUIRE_OK(ctx, sh_out_open(ctx, dev, 0, &o));
  CHECK(o.tmp == NULL && sh_out_is_direct(&o));
  fputs("x", o.f);
  CHECK_STATUS(ctx, sh_out_commit(&o), SHEAF_ERR_IO);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "No space left on device");
  CHECK(is_char_device(dev));
  CHECK_STATUS(ctx, sh_file_write_atomic(ctx, dev, "abc", 3), SHEAF_ERR_IO);
  CHECK(is_char_device(dev));
  /* staged: a temporary file elsewhere, copied into the device at commit */
  REQUIRE_OK(ctx, sh_out_open(ctx, dev, SH_OUT_STAGE, &o));
  CHECK(o.tmp != NULL && o.copy);
  char tmp[800];
  snprintf(tmp, sizeof tmp, "%s", o.tmp);
  fputs("staged", o.f);
  CHECK_STATUS(ctx, sh_out_commit(&o), SHEAF_ERR_IO);
  CHECK(is_char_device(dev));
  CHECK(access(tmp, F_OK) != 0);
  /* /dev/null takes everything */
  REQUIRE_OK(ctx, sh_file_write_atomic(ctx, "/dev/null", "abc", 3));
  struct stat st;
  CHECK(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode));
}

TEST(file_input_limit_and_streams) {
  sheaf_ctx *ctx = th_ctx();
  setenv("SHEAF_MAX_INPUT", "4K", 1);
  size_t lim = 0;
  CHECK_OK(ctx, sh_file_input_limit(ctx, &lim));
  CHECK_EQ_SIZE(lim, 4096);
  sh_mapping m;
  CHECK_STATUS(ctx, sh_file_map(ctx, "/dev/zero", &m), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "/dev/zero: reading stopped: more than the input limit of 4096 bytes");
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "SHEAF_MAX_INPUT");
  char *data;
  size_t n;
  CHECK_STATUS(ctx, sh_file_read(ctx, EWT, &data, &n), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), EWT ": larger than the input limit of 4096 bytes");
  /* binary inputs (weights) from a regular file are mapped whatever their size */
  CHECK_OK(ctx, sh_file_map_binary(ctx, EWT, &m));
  CHECK(m.size > 4096 && m.map_base != NULL);
  sh_file_unmap(&m);
  setenv("SHEAF_MAX_INPUT", "12x", 1);
  CHECK_STATUS(ctx, sh_file_map(ctx, SMALL, &m), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "SHEAF_MAX_INPUT='12x'");
  unsetenv("SHEAF_MAX_INPUT");
  CHECK_OK(ctx, sh_file_input_limit(ctx, &lim));
  CHECK_EQ_SIZE(lim, SH_FILE_MAX_INPUT_DEFAULT);
  /* a held FIFO: read once, then served by name any number of times */
  const char *d = new_dir("held-api");
  char fifo[700], cmd[1600];
  snprintf(fifo, sizeof fifo, "%s/fifo", d);
  REQUIRE(mkfifo(fifo, 0600) == 0);
  snprintf(cmd, sizeof cmd, "timeout 60 sh -c 'cat " SMALL " > %s' &", fifo);
  REQUIRE(system(cmd) == 0);
  bool held = false;
  REQUIRE_OK(ctx, sh_file_hold(ctx, fifo, NULL, &held));
  CHECK(held);
  for (int k = 0; k < 3; k++) { /* a second open of the FIFO would wait forever */
    REQUIRE_OK(ctx, sh_file_map(ctx, fifo, &m));
    CHECK(m.size > 100 && !memcmp(m.data, "# sent_id = small-1", 19));
    sh_file_unmap(&m);
  }
  REQUIRE_OK(ctx, sh_file_hold(ctx, SMALL, NULL, &held));
  CHECK(!held); /* a regular file is opened where it is read */
  sh_file_release_all();
}

/* The library's writers by path (the trace, safetensors): a device is
 * written into and never replaced, a failure is an error naming it, and an
 * existing file is replaced only by a complete one. */
TEST(file_out_library_writers_trace_and_safetensors) {
  sheaf_ctx *ctx = th_ctx();
  const char *d = new_dir("out-lib");
  char dev[700], trace[700], w[700];
  device(d, dev, sizeof dev);
  snprintf(trace, sizeof trace, "%s/t.json", d);
  snprintf(w, sizeof w, "%s/w.safetensors", d);
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  sheaf_param W;
  REQUIRE_OK(ctx, sheaf_model_param(m, "W", 2, (int64_t[]){4, 4}, SHEAF_INIT_GLOROT, &W));
  sheaf_graph_opts o = {SHEAF_POLICY_SHEAF, 1, trace};
  sheaf_graph *g;
  REQUIRE_OK(ctx, sheaf_graph_create(m, &o, &g));
  float x[4] = {1, 2, 3, 4};
  sheaf_expr h = sheaf_input_vector(g, 4, x);
  for (int t = 0; t < 3; t++) h = sheaf_tanh(g, sheaf_affine(g, W, h, SHEAF_NO_PARAM));
  CHECK_OK(ctx, sheaf_graph_flush(g));
  CHECK_STATUS(ctx, sheaf_graph_write_trace(g, dev), SHEAF_ERR_IO);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "error writing the trace to '");
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "No space left on device");
  CHECK(is_char_device(dev));
  CHECK_OK(ctx, sheaf_graph_write_trace(g, "/dev/null"));
  CHECK_OK(ctx, sheaf_graph_write_trace(g, trace));
  sheaf_graph_free(g); /* writes the trace again, whole */
  size_t n;
  char *text = slurp(trace, &n);
  CHECK(text && !strncmp(text, "{\"displayTimeUnit\"", 18) && n > 2 && !strcmp(text + n - 3, "]}\n"));
  free(text);
  CHECK_STATUS(ctx, sheaf_model_save(m, dev), SHEAF_ERR_IO);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "No space left on device");
  CHECK(is_char_device(dev));
  write_file(w, "old\n");
  CHECK_OK(ctx, sheaf_model_save(m, w));
  sheaf_st_file *f;
  REQUIRE_OK(ctx, sheaf_st_open(ctx, w, &f));
  CHECK_EQ_SIZE(sheaf_st_count(f), 1);
  sheaf_st_close(f);
  CHECK_OK(ctx, sheaf_model_save(m, "/dev/null"));
  sheaf_model_free(m);
  DIR *dd = opendir(d); /* no temporary file left */
  int entries = 0;
  for (struct dirent *de; dd && (de = readdir(dd));) entries += de->d_name[0] != '.';
  if (dd) closedir(dd);
  CHECK_EQ_INT(entries, strcmp(dev, "/dev/full") ? 3 : 2);
}

/* ------------------------------------------------------------- devices */

TEST(cli_rel_device_outputs_never_replaced) {
  NEED_BIN();
  const char *d = new_dir("dev-out");
  char dev[700];
  device(d, dev, sizeof dev);
  const char *cases[] = {
      "data binarize " SMALL " -o {dev}",
      "run " TREELSTM_SF " --data " SMALL " --out {dev}",
      "run " TREELSTM_SF " --data " SMALL " --out /dev/null --trace {dev}",
      "run " TREELSTM_SF " --data " SMALL " --out /dev/null --save-weights {dev}",
      "run " TREELSTM " --data " SMALL " --out {dev}",
      "run " TREELSTM " --data " SMALL " --trace {dev}",
      "run " TREELSTM " --data " SMALL " --save-weights {dev}",
      "run " TREELSTM_SF " --data " SMALL " --format npy --out {dev}",
  };
  const char *kv[] = {"dev", dev, NULL};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char args[1500];
    snprintf(args, sizeof args, "%s", expand(cases[i], kv));
    int rc = sh("$S %s", args);
    if (!CHECK_EQ_INT(rc, 1)) fprintf(stderr, "  sheaf %s:\n%s\n", args, g_out);
    CHECK_CONTAINS(g_out, "sheaf: error: ");
    CHECK_CONTAINS(g_out, dev);
    CHECK(is_char_device(dev));
  }
  /* a path that names a descriptor is written through it, never renamed
   * over (the shell's append stays an append) */
  char log[700];
  snprintf(log, sizeof log, "%s/log.txt", d);
  write_file(log, "first line\n");
  struct stat st0, st1;
  REQUIRE(stat(log, &st0) == 0);
  CHECK_EQ_INT(sh("$S data binarize " SMALL " -o /dev/stdout >> %s", log), 0);
  CHECK_EQ_INT(sh("$S run " TREELSTM " --data " SMALL " --trace /dev/fd/1 >> %s", log), 0);
  char *text = slurp(log, NULL);
  CHECK(text && !strncmp(text, "first line\n(nsubj (det (DET The)", strlen("first line\n(nsubj (det (DET The)")));
  CHECK(text && strstr(text, "\n{\"displayTimeUnit\"") && strstr(text, "treelstm: 3 trees"));
  free(text);
  REQUIRE(stat(log, &st1) == 0);
  CHECK(st0.st_ino == st1.st_ino);
  /* the same targets through the API writers, via /dev/null: written, kept */
  CHECK_EQ_INT(sh("$S data binarize " SMALL " -o /dev/null && $S run " TREELSTM
                  " --data " SMALL " --trace /dev/null --save-weights /dev/null --out /dev/null"),
               0);
  struct stat st;
  CHECK(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode));
}

TEST(cli_rel_stdout_errors_exit_1) {
  NEED_BIN();
  const char *d = new_dir("stdout-err");
  char dev[700];
  device(d, dev, sizeof dev);
  const char *cmds[] = {
      "--help",
      "--version",
      "check examples/treelstm.sf",
      "check --help",
      "data stats " SMALL,
      "data binarize " SMALL,
      "data binarize " SMALL " -o -",
      "data stats --help",
      "run --help",
      "run examples/treelstm.sf --help",
      "run " TREELSTM_SF " --data " SMALL,
      "run " TREELSTM " --data " SMALL,
      "run " TREELSTM " --data " SMALL " --out -",
      "bench " TREELSTM " --data " SMALL " --repeat 1 --policy sheaf",
  };
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    int rc = sh("$S %s > %s", cmds[i], dev);
    if (!CHECK_EQ_INT(rc, 1)) fprintf(stderr, "  sheaf %s > %s:\n%s\n", cmds[i], dev, g_out);
    CHECK_CONTAINS(g_out, "standard output");
    CHECK_CONTAINS(g_out, "No space left on device");
  }
  /* a closed standard output: fine when nothing is written, an error otherwise */
  CHECK_EQ_INT(sh("$S check -q examples/treelstm.sf >&-"), 0);
  CHECK_EQ_INT(sh("$S --help >&-"), 1);
  CHECK_CONTAINS(g_out, "writing to standard output failed");
  /* a usage error keeps its exit status */
  CHECK_EQ_INT(sh("$S data stats --bogus > %s", dev), 2);
}

/* ------------------------------------------------- failures keep outputs */

/* A model that fails at one instance: sentence 14 is long (14 words: row
 * 14000 of a 2000-row table), the others have one word; --batch 1 writes
 * instances 0..13 before it fails. */
static const char *oob_model(const char *dir, char *data, size_t cap) {
  static char model[700];
  snprintf(model, sizeof model, "%s/oob.sf", dir);
  write_file(model, "param emb: f32[V, H]\n"
                    "fn main(ws: list[i32]) -> f32[H] {\n"
                    "  emb[len(ws) * 1000]\n"
                    "}\n");
  snprintf(data, cap, "%s/oob.txt", dir);
  write_file(data, "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\nl\nm\nn\no o o o o o o o o o o o o o\np\nq\n");
  return model;
}

TEST(cli_rel_failed_run_keeps_existing_outputs) {
  NEED_BIN();
  const char *d = new_dir("fail-keep");
  char data[700], out[700], w[700], t[700];
  const char *model = oob_model(d, data, sizeof data);
  snprintf(out, sizeof out, "%s/out.txt", d);
  snprintf(w, sizeof w, "%s/w.safetensors", d);
  snprintf(t, sizeof t, "%s/t.json", d);
  write_file(out, "old output\n");
  write_file(w, "old weights\n");
  write_file(t, "old trace\n");
  int rc = sh("$S run %s --data %s --seed 1 --size H=4 --size V=2000 --batch 1 --threads 1 --out %s "
              "--save-weights %s --trace %s",
              model, data, out, w, t);
  CHECK_EQ_INT(rc, 1);
  CHECK_CONTAINS(g_out, "while running sentence 14 of ");
  CHECK(file_is(out, "old output\n"));
  CHECK(file_is(w, "old weights\n"));
  CHECK(file_is(t, "old trace\n"));
  /* the same run on the first 14 sentences succeeds and replaces all three */
  rc = sh("$S run %s --data %s --seed 1 --size H=4 --size V=2000 --batch 1 --threads 1 --limit 14 "
          "--out %s --save-weights %s --trace %s",
          model, data, out, w, t);
  CHECK_EQ_INT(rc, 0);
  CHECK(!file_is(out, "old output\n") && !file_is(w, "old weights\n") && !file_is(t, "old trace\n"));
  size_t n;
  char *o = slurp(out, &n);
  CHECK(o && !strncmp(o, "0 ", 2) && strstr(o, "\n13 "));
  free(o);
  /* the built-in models: bad data, then a device that fails last */
  write_file(out, "old output\n");
  write_file(w, "old weights\n");
  CHECK_EQ_INT(sh("$S run " TREELSTM " --data tests/data/bad_head.conllu --out %s --save-weights %s", out, w), 1);
  CHECK(file_is(out, "old output\n"));
  CHECK(file_is(w, "old weights\n"));
  char dev[700];
  device(d, dev, sizeof dev);
  CHECK_EQ_INT(sh("$S run " TREELSTM " --data " SMALL " --out %s --save-weights %s --trace %s", out, w, dev), 1);
  CHECK(file_is(out, "old output\n"));
  CHECK(file_is(w, "old weights\n"));
  /* binarize of a bad file */
  CHECK_EQ_INT(sh("$S data binarize tests/data/bad_head.conllu -o %s", out), 1);
  CHECK(file_is(out, "old output\n"));
}

/* ------------------------------------------------------ output = input */

TEST(cli_rel_output_that_is_an_input_is_refused) {
  NEED_BIN();
  const char *d = new_dir("out-is-in");
  char x[700], hard[700], soft[700], w[700], m[700], v[700], f[700];
  snprintf(x, sizeof x, "%s/x.conllu", d);
  snprintf(hard, sizeof hard, "%s/hard.conllu", d);
  snprintf(soft, sizeof soft, "%s/soft.conllu", d);
  snprintf(w, sizeof w, "%s/w.safetensors", d);
  snprintf(m, sizeof m, "%s/m.sf", d);
  snprintf(v, sizeof v, "%s/vocab.txt", d);
  snprintf(f, sizeof f, "%s/f.txt", d);
  REQUIRE_EQ_INT(sh("cp " SMALL " %s && ln %s %s && ln -s %s %s && cp examples/treelstm.sf %s && "
                    "cp tests/data/vocab.txt %s",
                    x, x, hard, x, soft, m, v),
                 0);
  REQUIRE_EQ_INT(sh("$S run " TREELSTM_SF " --data %s --save-weights %s --out /dev/null", x, w), 0);
  char *w0 = slurp(w, NULL);
  const char *kv[] = {"x", x, "hard", hard, "soft", soft, "w", w, "m", m, "v", v, "f", f, NULL};
  struct {
    const char *tmpl, *want;
  } cases[] = {
      {"$S run " TREELSTM_SF " --data {x} --out {x}", "--out {x} is the same file as --data {x}"},
      {"$S run " TREELSTM_SF " --data {x} --out {hard}", "--out {hard} is the same file as --data {x}"},
      {"$S run " TREELSTM_SF " --data {x} --out {soft}", "is the same file as --data"},
      {"$S run " TREELSTM_SF " --data {x} --trace {x}", "--trace {x} is the same file as --data"},
      {"$S run examples/treelstm.sf --data {x} --weights {w} --save-weights {w}", "--save-weights {w} is the same file as --weights"},
      {"$S run {m} --seed 1 --size E=4 --size H=4 --size C=3 --data {x} --trace {m}", "as MODEL.sf {m}"},
      {"$S run " TREELSTM_SF " --data {x} --vocab {v} --out {v}", "the same file as --vocab"},
      {"$S run " TREELSTM " --data {x} --out {x}", "--out {x} is the same file as --data"},
      {"$S run " TREELSTM " --data {x} --save-weights {hard}", "--save-weights {hard} is the same file as --data"},
      {"$S data binarize {x} -o {soft}", "-o {soft} is the same file as FILE {x}"},
      {"$S run " TREELSTM_SF " --data {x} >> {x}", "(standard output) is the same file as --data"},
      {"$S data binarize {x} >> {hard}", "(standard output) is the same file as FILE"},
      /* two outputs, one file (existing or new) */
      {"$S run " TREELSTM_SF " --data {x} --out {f} --trace {f}", "are the same file"},
      {"$S run " TREELSTM_SF " --data {x} --out {f}.new --save-weights {f}.new", "are the same file"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char cmd[2000], want[2000];
    snprintf(cmd, sizeof cmd, "%s", expand(cases[i].tmpl, kv));
    snprintf(want, sizeof want, "%s", expand(cases[i].want, kv));
    int rc = sh("%s", cmd);
    if (!CHECK_EQ_INT(rc, 2)) fprintf(stderr, "  %s:\n%s\n", cmd, g_out);
    CHECK_CONTAINS(g_out, want);
    CHECK_CONTAINS(g_out, "sheaf: error: ");
    CHECK(same_bytes(x, SMALL));
    CHECK(same_bytes(m, "examples/treelstm.sf"));
    CHECK(same_bytes(v, "tests/data/vocab.txt"));
    char *w1 = slurp(w, NULL);
    CHECK(w0 && w1 && !strcmp(w0, w1));
    free(w1);
    CHECK(access(f, F_OK) != 0);
  }
  free(w0);
  /* /dev/null is input and output at once: nothing is overwritten */
  CHECK_EQ_INT(sh("$S check -q examples/treelstm.sf && $S run " TREELSTM_SF " --data " SMALL " --out /dev/null"), 0);
}

/* ------------------------------------------------ '-', pipes and FIFOs */

TEST(cli_rel_data_from_stdin_pipes_and_fifos) {
  NEED_BIN();
  const char *d = new_dir("stdin-data");
  char ref[700], got[700], fifo[700];
  snprintf(ref, sizeof ref, "%s/ref.txt", d);
  snprintf(got, sizeof got, "%s/got.txt", d);
  snprintf(fifo, sizeof fifo, "%s/fifo", d);
  REQUIRE(mkfifo(fifo, 0600) == 0);
  REQUIRE_EQ_INT(sh("$S run " TREELSTM_SF " --data " SMALL " --out %s", ref), 0);
  /* cat data.conllu | sheaf run ... --data -: CoNLL-U recognized by content */
  CHECK_EQ_INT(sh("cat " SMALL " | $S run " TREELSTM_SF " --data - > %s", got), 0);
  CHECK(same_bytes(ref, got));
  CHECK_EQ_INT(sh("$S run " TREELSTM_SF " --data - --out %s < " SMALL, got), 0);
  CHECK(same_bytes(ref, got));
  CHECK_CONTAINS(g_out, "from <stdin>.conllu");
  /* a FIFO without an extension, its writer in the background */
  CHECK_EQ_INT(sh("timeout 60 sh -c 'cat " SMALL " > %s' & timeout 60 $S run " TREELSTM_SF " --data %s --out %s; r=$?; wait; exit $r",
                  fifo, fifo, got),
               0);
  CHECK(same_bytes(ref, got));
  /* a built-in model, a PTB file and token lines through standard input */
  REQUIRE_EQ_INT(sh("$S run " TREELSTM " --data " SMALL " --out %s", ref), 0);
  CHECK_EQ_INT(sh("cat " SMALL " | $S run " TREELSTM " --data - --out %s", got), 0);
  CHECK(same_bytes(ref, got));
  REQUIRE_EQ_INT(sh("$S run childsum --hidden 8 --embed 8 --data tests/data/sst_sample.ptb --out %s", ref), 0);
  CHECK_EQ_INT(sh("cat tests/data/sst_sample.ptb | $S run childsum --hidden 8 --embed 8 --data - --out %s", got), 0);
  CHECK(same_bytes(ref, got));
  REQUIRE_EQ_INT(sh("$S run bilstm --hidden 8 --embed 8 --data tests/data/tokens_words.txt --out %s", ref), 0);
  CHECK_EQ_INT(sh("$S run bilstm --hidden 8 --embed 8 --data - --out %s < tests/data/tokens_words.txt", got), 0);
  CHECK(same_bytes(ref, got));
  /* data stats and binarize read '-'; errors name <stdin> */
  CHECK_EQ_INT(sh("cat " SMALL " | $S data stats -"), 0);
  CHECK_CONTAINS(g_out, "format                conllu");
  CHECK_CONTAINS(g_out, "sentences             3\n");
  CHECK_EQ_INT(sh("$S data stats - < tests/data/sst_sample.ptb"), 0);
  CHECK_CONTAINS(g_out, "format                ptb");
  CHECK_EQ_INT(sh("$S data stats - < tests/data/tokens_ids.txt"), 0);
  CHECK_CONTAINS(g_out, "format                tokens");
  CHECK_EQ_INT(sh("$S data binarize " SMALL " > %s && cat " SMALL " | $S data binarize - -o %s", ref, got), 0);
  CHECK(same_bytes(ref, got));
  CHECK_EQ_INT(sh("cat tests/data/bad_head.conllu | $S data binarize -"), 1);
  CHECK_CONTAINS(g_out, "sheaf: error: <stdin>:");
  CHECK_EQ_INT(sh("$S check - < examples/treelstm.sf"), 0);
  CHECK_EQ_INT(sh("timeout 60 $S data stats %s & timeout 60 sh -c 'cat " SMALL " > %s'; wait", fifo, fifo), 0);
  CHECK_CONTAINS(g_out, "format                conllu");
  /* one standard input only */
  CHECK_EQ_INT(sh("$S run " TREELSTM_SF " --data - --vocab - < " SMALL), 2);
  CHECK_CONTAINS(g_out, "cannot both be standard input");
  release_fifo(fifo);
}

TEST(cli_rel_weights_from_fifo_stdin_and_pipes) {
  NEED_BIN();
  const char *d = new_dir("stdin-weights");
  char w[700], ref[700], got[700], fifo[700];
  snprintf(w, sizeof w, "%s/w.safetensors", d);
  snprintf(ref, sizeof ref, "%s/ref.txt", d);
  snprintf(got, sizeof got, "%s/got.txt", d);
  snprintf(fifo, sizeof fifo, "%s/wfifo", d);
  REQUIRE(mkfifo(fifo, 0600) == 0);
  REQUIRE_EQ_INT(sh("$S run " TREELSTM_SF " --data " SMALL " --save-weights %s --out /dev/null", w), 0);
  REQUIRE_EQ_INT(sh("$S run examples/treelstm.sf --weights %s --data " SMALL " --out %s", w, ref), 0);
  const char *kv[] = {"w", w, "got", got, "fifo", fifo, NULL};
  const char *ways[] = {
      /* a FIFO, its writer done before the second open: never a hang */
      "timeout 60 sh -c 'cat {w} > {fifo}' & timeout 60 $S run examples/treelstm.sf --weights {fifo} --data " SMALL
      " --out {got}; r=$?; wait; exit $r",
      "timeout 60 $S run examples/treelstm.sf --weights /dev/stdin --data " SMALL " --out {got} < {w}",
      "cat {w} | timeout 60 $S run examples/treelstm.sf --weights /dev/stdin --data " SMALL " --out {got}",
      "timeout 60 $S run examples/treelstm.sf --weights - --data " SMALL " --out {got} < {w}",
      "cat {w} | timeout 60 $S run examples/treelstm.sf --weights - --data " SMALL " --out {got}",
      "cat {w} | timeout 60 $S data stats --format safetensors - > {got}.stats",
      "cat {w} | timeout 60 $S data stats - | grep -q 'sheaf.vocab'",
  };
  for (size_t i = 0; i < sizeof ways / sizeof ways[0]; i++) {
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "%s", expand(ways[i], kv));
    remove(got);
    int rc = sh("%s", cmd);
    if (!CHECK_EQ_INT(rc, 0)) fprintf(stderr, "  %s:\n%s\n", cmd, g_out);
    if (!strstr(ways[i], "stats")) CHECK(same_bytes(ref, got));
  }
  /* the built-in models too */
  REQUIRE_EQ_INT(sh("$S run " TREELSTM " --data " SMALL " --save-weights %s --out %s", w, ref), 0);
  CHECK_EQ_INT(sh("timeout 60 sh -c 'cat %s > %s' & timeout 60 $S run treelstm --hidden 8 --embed 8 --weights %s --data " SMALL
                  " --out %s; r=$?; wait; exit $r",
                  w, fifo, fifo, got),
               0);
  CHECK(same_bytes(ref, got));
  /* process substitution (bash): /dev/fd/N, a pipe */
  if (sh("command -v bash") == 0) {
    CHECK_EQ_INT(sh("bash -c 'timeout 60 $S run treelstm --hidden 8 --embed 8 --weights <(cat %s) --data " SMALL
                    " --out %s'",
                    w, got),
                 0);
    CHECK(same_bytes(ref, got));
  }
  /* an empty pipe is 0 bytes, truly */
  CHECK_EQ_INT(sh("timeout 60 $S run examples/treelstm.sf --weights - --data " SMALL " < /dev/null"), 1);
  CHECK_CONTAINS(g_out, "sheaf: error: <stdin>");
  release_fifo(fifo);
}

/* ------------------------------------------------------------- limits */

TEST(cli_rel_endless_inputs_stop_at_the_limit) {
  NEED_BIN();
  struct {
    const char *cmd, *want;
  } cases[] = {
      {"SHEAF_MAX_INPUT=64K timeout 60 $S data stats /dev/zero", "/dev/zero: reading stopped: more than the input limit of 65536 bytes"},
      {"head -c 200000 /dev/zero | SHEAF_MAX_INPUT=64K timeout 60 $S data stats -", "<stdin>: reading stopped: more than the input limit of 65536 bytes"},
      {"SHEAF_MAX_INPUT=64K timeout 60 $S data binarize /dev/zero", "/dev/zero: reading stopped"},
      {"SHEAF_MAX_INPUT=64K timeout 60 $S check /dev/zero", "/dev/zero: reading stopped"},
      {"SHEAF_MAX_INPUT=64K timeout 60 $S run " TREELSTM_SF " --data /dev/zero", "/dev/zero: reading stopped"},
      {"SHEAF_MAX_INPUT=64K timeout 60 $S run examples/treelstm.sf --data " SMALL " --weights /dev/zero", "/dev/zero: reading stopped"},
      {"SHEAF_MAX_INPUT=64K timeout 60 $S run " TREELSTM " --data /dev/zero", "/dev/zero: reading stopped"},
      {"SHEAF_MAX_INPUT=1K $S data stats " EWT, EWT ": larger than the input limit of 1024 bytes"},
      {"SHEAF_MAX_INPUT=1K $S run " TREELSTM " --data " EWT, "larger than the input limit of 1024 bytes"},
      {"SHEAF_MAX_INPUT=lots $S data stats " SMALL, "SHEAF_MAX_INPUT='lots': expected a positive number of bytes"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int rc = sh("%s", cases[i].cmd);
    if (!CHECK_EQ_INT(rc, 1)) fprintf(stderr, "  %s:\n%s\n", cases[i].cmd, g_out);
    CHECK_CONTAINS(g_out, cases[i].want);
    if (strstr(cases[i].cmd, "=64K") || strstr(cases[i].cmd, "=1K")) CHECK_CONTAINS(g_out, "set SHEAF_MAX_INPUT");
  }
  /* a limit that fits: the same files work */
  CHECK_EQ_INT(sh("SHEAF_MAX_INPUT=2M $S data stats " EWT), 0);
  CHECK_EQ_INT(sh("yes a | head -n 500 | SHEAF_MAX_INPUT=64K $S data stats -"), 0);
  CHECK_CONTAINS(g_out, "format                tokens");
}

/* --------------------------------------------------------- usage errors */

TEST(cli_rel_usage_errors_exit_2) {
  NEED_BIN();
  struct {
    const char *args, *want;
  } cases[] = {
      {"run " TREELSTM_SF " --data " SMALL " --policy bogus", "--policy: unknown policy 'bogus'"},
      {"run " TREELSTM " --data " SMALL " --policy bogus", "unknown policy 'bogus'"},
      {"bench " TREELSTM " --data " SMALL " --policy sheaf,bogus", "unknown policy 'bogus'"},
      {"run " TREELSTM_SF " --data " SMALL " --format xml", "--format: expected text, jsonl or npy"},
      {"run " TREELSTM_SF " --data " SMALL " --threads 0", "--threads: expected an integer"},
      {"run " TREELSTM_SF " --data " SMALL " --batch x", "--batch: expected an integer"},
      {"run " TREELSTM_SF " --data " SMALL " --limit -1", "--limit: expected an integer"},
      {"run " TREELSTM_SF " --data " SMALL " --seed -1", "--seed: expected a non-negative integer"},
      {"run " TREELSTM_SF " --data " SMALL " --parallel fast", "--parallel: unknown mode"},
      {"run " TREELSTM_SF " --data " SMALL " --size H", "expected NAME=VALUE"},
      {"run " TREELSTM_SF " --data " SMALL " --size H=0", "--size: expected an integer"},
      {"run " TREELSTM_SF " --data " SMALL " --bogus", "unknown option '--bogus'"},
      {"run " TREELSTM_SF " --data", "--data needs a value"},
      {"run " TREELSTM_SF " --data=", "--data needs a value"},
      {"run " TREELSTM_SF " --data " SMALL " --out", "--out needs a value"},
      {"run " TREELSTM_SF " --data " SMALL " --out ''", "--out needs a value"},
      {"run " TREELSTM_SF " --data " SMALL " --format npy", "--format npy needs --out FILE"},
      {"run " TREELSTM_SF, "need MODEL.sf and --data FILE"},
      {"run " TREELSTM " --data " SMALL " --hidden 0", "--hidden: expected an integer"},
      {"run " TREELSTM " --data " SMALL " --bogus", "unknown option '--bogus'"},
      {"run " TREELSTM " --data", "--data needs a value"},
      {"run " TREELSTM " --data " SMALL " --weights w --seed 1", "exclude each other"},
      {"run nosuchmodel --data " SMALL, "unknown model 'nosuchmodel'"},
      {"run --data " SMALL, "missing MODEL"},
      {"run " TREELSTM " --data - --weights -", "cannot both be standard input"},
      {"bench " TREELSTM " --data " SMALL " --repeat 0", "--repeat: expected an integer"},
      {"bench " TREELSTM " --data " SMALL " --out x", "unknown option '--out'"},
      {"data stats", "missing FILE"},
      {"data stats " SMALL " --bogus", "data stats: unknown option '--bogus' (see 'sheaf data stats --help')"},
      {"data stats " SMALL " --format xml", "data stats: --format: unknown format 'xml' (expected conllu, ptb, tokens or safetensors)"},
      {"data stats " SMALL " --format", "data stats: --format needs a value"},
      {"data stats " SMALL " --ids --words", "data stats: --ids and --words exclude each other"},
      {"data stats " SMALL " --ids", "--ids applies to token files only"},
      {"data stats - --vocab - < " SMALL, "cannot both be standard input"},
      {"data binarize", "missing FILE.conllu"},
      {"data binarize " SMALL " -o", "data binarize: -o needs a value"},
      {"data binarize " SMALL " -o ''", "data binarize: -o needs a value"},
      {"data binarize " SMALL " --output=", "data binarize: --output needs a value"},
      {"data binarize " SMALL " --bogus", "data binarize: unknown option '--bogus'"},
      {"data frobnicate", "data: unknown command 'frobnicate'"},
      {"check", "usage: sheaf check"},
      {"check --bogus examples/treelstm.sf", "unknown option '--bogus'"},
      {"frobnicate", "unknown command 'frobnicate'"},
      {"trace", "there is no 'trace' command"},
      {"", "usage: sheaf"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int rc = sh("$S %s", cases[i].args);
    if (!CHECK_EQ_INT(rc, 2)) fprintf(stderr, "  sheaf %s:\n%s\n", cases[i].args, g_out);
    CHECK_CONTAINS(g_out, cases[i].want);
  }
}

/* ------------------------------------------------------ property test */

/* A folder's entries: name, type, inode, device number, and the bytes of
 * regular files (one level; a sub-folder's entries are counted). */
typedef struct snap_entry {
  char name[256];
  mode_t type;
  ino_t ino;
  dev_t rdev;
  char *data;
  size_t size;
  int n_sub;
} snap_entry;

typedef struct snap {
  snap_entry e[48];
  int n;
} snap;

static void snap_free(snap *s) {
  for (int i = 0; i < s->n; i++) free(s->e[i].data);
  s->n = 0;
}

static void snap_take(const char *dir, snap *s) {
  s->n = 0;
  DIR *d = opendir(dir);
  if (!d) return;
  for (struct dirent *de; (de = readdir(d)) && s->n < 48;) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    snap_entry *e = &s->e[s->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", de->d_name);
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
    struct stat st;
    if (lstat(p, &st) != 0) continue;
    e->type = st.st_mode & S_IFMT;
    e->ino = st.st_ino;
    e->rdev = st.st_rdev;
    if (S_ISREG(st.st_mode)) e->data = slurp(p, &e->size);
    if (S_ISDIR(st.st_mode)) {
      DIR *sd = opendir(p);
      for (struct dirent *x; sd && (x = readdir(sd));) e->n_sub += strcmp(x->d_name, ".") && strcmp(x->d_name, "..");
      if (sd) closedir(sd);
    }
  }
  closedir(d);
}

static const snap_entry *snap_find(const snap *s, const char *name) {
  for (int i = 0; i < s->n; i++)
    if (!strcmp(s->e[i].name, name)) return &s->e[i];
  return NULL;
}

static bool in_list(const char *name, const char *const *list) {
  for (; list && *list; list++)
    if (!strcmp(name, *list)) return true;
  return false;
}

/* Everything in `before` but the names in `written` is in `after`,
 * unchanged (type, inode, device, bytes); nothing new appears but
 * `written` (no temporary file left behind). */
static bool snap_unchanged(const snap *before, const snap *after, const char *const *written, const char *what) {
  bool ok = true;
  for (int i = 0; i < before->n; i++) {
    const snap_entry *a = &before->e[i], *b = snap_find(after, a->name);
    if (in_list(a->name, written)) continue;
    if (!b || a->type != b->type || a->ino != b->ino || a->rdev != b->rdev || a->size != b->size ||
        a->n_sub != b->n_sub || (a->data && (!b->data || memcmp(a->data, b->data, a->size)))) {
      th_fail(__FILE__, __LINE__, "%s: '%s' changed (or was removed or replaced)", what, a->name);
      ok = false;
    }
  }
  for (int i = 0; i < after->n; i++)
    if (!snap_find(before, after->e[i].name) && !in_list(after->e[i].name, written)) {
      th_fail(__FILE__, __LINE__, "%s: '%s' appeared", what, after->e[i].name);
      ok = false;
    }
  return ok;
}

TEST(cli_rel_property_commands_touch_only_their_outputs) {
  NEED_BIN();
  const char *d = new_dir("prop");
  const char *side = new_dir("prop-side"); /* FIFO readers' sinks */
  char p[1200], dev[700];
  snprintf(p, sizeof p, "%s/keep.txt", d), write_file(p, "a sentinel: never written\n");
  snprintf(p, sizeof p, "%s/out.txt", d), write_file(p, "old output\n");
  snprintf(p, sizeof p, "%s/w.safetensors", d), write_file(p, "old weights\n");
  snprintf(p, sizeof p, "%s/t.json", d), write_file(p, "old trace\n");
  snprintf(p, sizeof p, "%s/bad.sf", d), write_file(p, "fn main(t: Tree) -> f32[H] = oops(\n");
  snprintf(p, sizeof p, "%s/fifo", d);
  REQUIRE(mkfifo(p, 0600) == 0);
  snprintf(p, sizeof p, "%s/tdir", d);
  REQUIRE(mkdir(p, 0755) == 0);
  bool own_device = strcmp(device(d, dev, sizeof dev), "/dev/full") != 0;
  char oob_data[700];
  oob_model(d, oob_data, sizeof oob_data); /* oob.sf, oob.txt */
  REQUIRE_EQ_INT(sh("cp " SMALL " %s/in.conllu && cp tests/data/bad_head.conllu %s/bad.conllu", d, d), 0);
  const char *D = d;

  /* {command ("{d}" the folder, "{dev}" the device, "{side}" the side folder),
   *  expected exit status, the files it may write (NULL-terminated)} */
  static const char *none[] = {NULL};
  static const char *outs[] = {"new.txt", "new.json", "new.st", NULL};
  static const char *out_txt[] = {"out.txt", NULL};
  static const char *bin_new[] = {"bin.ptb", NULL};
  static const char *npy[] = {"o.npy", NULL};
  struct {
    const char *cmd;
    int rc;
    const char *const *written;
  } cases[] = {
      /* failures: nothing changes */
      {"$S run {d}/bad.sf --data {d}/in.conllu --out {d}/out.txt --trace {d}/t.json --save-weights {d}/w.safetensors", 1, none},
      {"$S run {d}/oob.sf --data {d}/oob.txt --seed 1 --size H=4 --size V=2000 --batch 1 --out {d}/out.txt "
       "--trace {d}/t.json --save-weights {d}/w.safetensors", 1, none},
      {"$S run {d}/oob.sf --data {d}/oob.txt --seed 1 --size H=4 --size V=2000 --batch 1 --threads 2 "
       "--parallel batches --out {d}/new.txt", 1, none},
      {"$S data binarize {d}/bad.conllu -o {d}/out.txt", 1, none},
      {"$S data binarize {d}/bad.conllu -o {d}/new.txt", 1, none},
      {"$S data binarize {d}/in.conllu -o {dev}", 1, none},
      {"$S data binarize {d}/in.conllu -o {d}/tdir", 1, none},
      {"$S run " TREELSTM_SF " --data {d}/in.conllu --out {d}/out.txt --save-weights {dev}", 1, none},
      {"$S run " TREELSTM_SF " --data {d}/in.conllu --out {d}/out.txt --trace {dev}", 1, none},
      {"$S run " TREELSTM_SF " --data {d}/in.conllu --out {d}/out.txt --trace {d}/tdir", 1, none},
      {"$S run " TREELSTM_SF " --data {d}/in.conllu --out {d}/out.txt --trace {d}/nodir/t.json", 1, none},
      {"$S run examples/treelstm.sf --data {d}/in.conllu --out {d}/out.txt --weights {d}/w.safetensors", 1, none},
      {"$S run " TREELSTM_SF " --data {d}/in.conllu --format npy --out {dev}", 1, none},
      {"SHEAF_MAX_INPUT=100 $S run " TREELSTM_SF " --data {d}/in.conllu --out {d}/out.txt", 1, none},
      {"$S run " TREELSTM " --data {d}/bad.conllu --out {d}/out.txt --save-weights {d}/w.safetensors --trace {d}/t.json", 1, none},
      {"$S run " TREELSTM " --data {d}/in.conllu --out {d}/out.txt --save-weights {dev}", 1, none},
      {"$S run " TREELSTM " --data {d}/in.conllu --out {d}/out.txt --trace {dev}", 1, none},
      {"$S run " TREELSTM " --data {d}/in.conllu --out {d}/tdir --save-weights {d}/w.safetensors", 1, none},
      {"$S run " TREELSTM_SF " --data {d}/in.conllu --out {d}/in.conllu", 2, none},
      {"$S run " TREELSTM_SF " --data {d}/in.conllu --out {d}/out.txt --trace {d}/out.txt", 2, none},
      {"$S run " TREELSTM_SF " --data {d}/in.conllu --out {d}/out.txt --policy bogus", 2, none},
      {"$S check {d}/bad.sf", 1, none},
      {"$S --help > {dev}", 1, none},
      /* successes: only what was asked for */
      {"$S run " TREELSTM_SF " --data {d}/in.conllu --out {d}/new.txt --trace {d}/new.json --save-weights {d}/new.st", 0, outs},
      {"$S run " TREELSTM_SF " --data {d}/in.conllu --out {d}/out.txt", 0, out_txt},
      {"$S run " TREELSTM_SF " --data {d}/in.conllu --format npy --out {d}/o.npy", 0, npy},
      {"$S data binarize {d}/in.conllu -o {d}/bin.ptb", 0, bin_new},
      {"$S run " TREELSTM " --data {d}/in.conllu --out {d}/out.txt --save-weights /dev/null --trace /dev/null", 0, out_txt},
      /* a FIFO is written into, never replaced (a reader on the other end) */
      {"timeout 60 cat {d}/fifo > {side}/sink1 2>/dev/null & $S data binarize {d}/in.conllu -o {d}/fifo; r=$?; wait; exit $r", 0, none},
      {"timeout 60 cat {d}/fifo > {side}/sink2 2>/dev/null & $S run " TREELSTM_SF
       " --data {d}/in.conllu --out {d}/fifo; r=$?; wait; exit $r", 0, none},
      {"timeout 60 cat {d}/fifo > {side}/sink3 2>/dev/null & $S run " TREELSTM_SF
       " --data {d}/in.conllu --out /dev/null --trace {d}/fifo; r=$?; wait; exit $r", 0, none},
      {"timeout 60 cat {d}/fifo > {side}/sink4 2>/dev/null & $S run " TREELSTM
       " --data {d}/in.conllu --save-weights {d}/fifo; r=$?; wait; exit $r", 0, none},
  };
  int n_cases = (int)(sizeof cases / sizeof cases[0]);
  for (int i = 0; i < n_cases; i++) {
    snap before, after;
    snap_take(D, &before);
    char cmd[2400];
    const char *kv[] = {"d", D, "dev", dev, "side", side, NULL};
    snprintf(cmd, sizeof cmd, "%s", expand(cases[i].cmd, kv));
    int rc = sh("%s", cmd);
    snap_take(D, &after);
    char what[2600];
    snprintf(what, sizeof what, "case %d: %s", i, cmd);
    if (!CHECK_EQ_INT(rc, cases[i].rc)) fprintf(stderr, "  %s:\n%s\n", what, g_out);
    snap_unchanged(&before, &after, cases[i].written, what);
    for (const char *const *w = cases[i].written; *w; w++) { /* asked for: there, whole */
      const snap_entry *e = snap_find(&after, *w);
      if (!e || e->type != S_IFREG || e->size == 0) th_fail(__FILE__, __LINE__, "%s: '%s' not written", what, *w);
    }
    snap_free(&before);
    snap_free(&after);
    snprintf(p, sizeof p, "%s/fifo", D);
    release_fifo(p);
    if (own_device) CHECK(is_char_device(dev));
  }
  /* what went through the FIFO is what a file gets */
  snprintf(p, sizeof p, "%s/sink1", side);
  char bin[1200];
  snprintf(bin, sizeof bin, "%s/bin.ptb", D);
  CHECK(same_bytes(p, bin));
  snprintf(p, sizeof p, "%s/sink3", side);
  size_t n;
  char *tj = slurp(p, &n);
  CHECK(tj && !strncmp(tj, "{\"displayTimeUnit\"", 18));
  free(tj);
  snprintf(p, sizeof p, "%s/sink4", side);
  CHECK_EQ_INT(sh("$S data stats --format safetensors %s", p), 0);
  CHECK_CONTAINS(g_out, "sheaf.vocab");
}
