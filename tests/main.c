/*
 * main.c — the test runner: fork per test, failure reporting, the leak- and
 * fault-injecting allocator, temporary files. Ends with `N passed, N failed`.
 *
 *   sheaf-tests [-v] [-jN] [--no-fork] [--times[=N]] [--list] [FILTER...]
 *                                                    FILTER: substrings of test names
 *
 * A FILTER starting with '^' matches the names that start with the rest
 * (`^kernel_` runs the kernel_* tests, not codegen_lower_kernels_*); one
 * ending in '$' matches the names that end with the rest; both: the exact
 * name. Otherwise a FILTER matches every name that contains it.
 *
 * -jN runs N tests at once (each in its own child, its output printed whole
 * when it ends); the default is one at a time, output streamed.
 * --times[=N] (or SHEAF_TEST_TIMES=N) lists the N slowest tests (default 20)
 * before the summary, each with its wall time and the CPU time (user+sys) of
 * its child and everything the child ran (compilers, the CLI), and the total.
 *
 * With SHEAF_CACHE_DIR set, a full run (no FILTER) writes each test's wall
 * time to $SHEAF_CACHE_DIR/sheaf-tests.times, and a later parallel run
 * starts its tests longest first by those times (tests it does not know
 * first of all), so no slot idles while one long test ends the run (CI:
 * the release build's run orders the other builds'). Results and output
 * are the same in any order.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "codegen/jit_int.h"
#include "harness.h"

typedef struct th_test {
  const char *name, *file;
  th_test_fn fn;
} th_test;

static th_test *g_tests;
static size_t g_n, g_cap;
static int g_failed_checks;
static sheaf_ctx *g_ctx;
static char g_tmpdir[256];

void th_register(const char *name, const char *file, th_test_fn fn) {
  if (g_n == g_cap) {
    g_cap = g_cap ? 2 * g_cap : 64;
    g_tests = realloc(g_tests, g_cap * sizeof *g_tests);
    if (!g_tests) abort();
  }
  g_tests[g_n++] = (th_test){name, file, fn};
}

bool th_fail(const char *file, int line, const char *fmt, ...) {
  g_failed_checks++;
  fprintf(stderr, "%s:%d: ", file, line);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  return false;
}

float th_frand(uint64_t *state) {
  uint64_t x = *state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  *state = x;
  return (float)((double)(x >> 40) / (double)(1ull << 23) - 1.0);
}

float *th_frand_fill(uint64_t *state, int64_t n) {
  float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  for (int64_t i = 0; p && i < n; i++) p[i] = th_frand(state);
  return p;
}

bool th_value_close_at(const char *file, int line, sheaf_graph *g, sheaf_expr e,
                       const double *want, int64_t n, const char *what, int inst) {
  sheaf_value_view v;
  sheaf_status st = sheaf_value(g, e, &v);
  if (st != SHEAF_OK) return th_fail(file, line, "%s[%d]: %s", what, inst, sheaf_status_str(st));
  int64_t got_n = v.rank == 2 ? v.shape[0] * v.shape[1] : v.shape[0];
  if (got_n != n)
    return th_fail(file, line, "%s[%d]: %lld values, want %lld", what, inst, (long long)got_n,
                   (long long)n);
  for (int64_t i = 0; i < n; i++) {
    double d = fabs(v.data[i] - want[i]), s = fabs(want[i]) > 1 ? fabs(want[i]) : 1;
    if (!(d <= 1e-5 * s))
      return th_fail(file, line, "%s[%d]: element %lld: got %.9g, want %.9g", what, inst,
                     (long long)i, (double)v.data[i], want[i]);
  }
  return true;
}

double th_compare_outputs(const char *a, const char *b, int keys, long *lines, long *agree) {
  FILE *fa = fopen(a, "r"), *fb = fopen(b, "r");
  double worst = fa && fb ? 0 : -1;
  static char la[1 << 16], lb[1 << 16];
  *lines = 0;
  if (agree) *agree = 0;
  while (worst >= 0) {
    char *ra = fgets(la, sizeof la, fa), *rb = fgets(lb, sizeof lb, fb);
    if (!ra || !rb) {
      if (ra || rb) worst = -1;
      break;
    }
    ++*lines;
    char *pa = la, *pb = lb;
    for (int k = 0; k < keys; k++)
      if (strtol(pa, &pa, 10) != strtol(pb, &pb, 10)) worst = -1;
    double ma = -INFINITY, mb = -INFINITY;
    int ia = -1, ib = -1;
    for (int j = 0;; j++) {
      char *ea, *eb;
      double x = strtod(pa, &ea), y = strtod(pb, &eb);
      if (ea == pa || eb == pb) {
        if ((ea == pa) != (eb == pb)) worst = -1;
        break;
      }
      pa = ea, pb = eb;
      double e = fabs(x - y) / (fabs(x) > 1 ? fabs(x) : 1);
      if (worst >= 0 && !(e <= worst)) worst = e;
      if (x > ma) ma = x, ia = j;
      if (y > mb) mb = y, ib = j;
    }
    if (agree) *agree += ia == ib;
  }
  if (fa) fclose(fa);
  if (fb) fclose(fb);
  return worst;
}

/* ---- leak-checking, fault-injecting allocator ---- */

typedef struct blk { void *p; size_t size; } blk;
static blk *g_blocks;
static size_t g_nblocks, g_capblocks;
static long g_alloc_count, g_fail_at;

static void *th_alloc_fn(void *user, size_t size, size_t align) {
  (void)user;
  g_alloc_count++;
  if (g_fail_at > 0 && g_alloc_count == g_fail_at) return NULL;
  if (align < sizeof(void *)) align = sizeof(void *);
  void *p = NULL;
  if (posix_memalign(&p, align, size ? size : 1) != 0) return NULL;
  if (g_nblocks == g_capblocks) {
    g_capblocks = g_capblocks ? 2 * g_capblocks : 1024;
    g_blocks = realloc(g_blocks, g_capblocks * sizeof *g_blocks);
    if (!g_blocks) abort();
  }
  g_blocks[g_nblocks++] = (blk){p, size};
  return p;
}

static void th_free_fn(void *user, void *ptr, size_t size) {
  (void)user;
  for (size_t i = g_nblocks; i-- > 0;) {
    if (g_blocks[i].p == ptr) {
      if (g_blocks[i].size != size)
        th_fail(__FILE__, __LINE__, "allocator: block %p freed with size %zu, allocated %zu",
                ptr, size, g_blocks[i].size);
      g_blocks[i] = g_blocks[--g_nblocks];
      free(ptr);
      return;
    }
  }
  th_fail(__FILE__, __LINE__, "allocator: free of unknown block %p (size %zu)", ptr, size);
}

/* The allocator may be called from pool workers: serialise it. */
static pthread_mutex_t g_alloc_mu = PTHREAD_MUTEX_INITIALIZER;
static void *th_alloc_locked(void *u, size_t s, size_t a) {
  pthread_mutex_lock(&g_alloc_mu);
  void *p = th_alloc_fn(u, s, a);
  pthread_mutex_unlock(&g_alloc_mu);
  return p;
}
static void th_free_locked(void *u, void *p, size_t s) {
  pthread_mutex_lock(&g_alloc_mu);
  th_free_fn(u, p, s);
  pthread_mutex_unlock(&g_alloc_mu);
}
static const sheaf_allocator g_th_allocator = {th_alloc_locked, th_free_locked, NULL};

const sheaf_allocator *th_allocator(void) { return &g_th_allocator; }

long th_fail_alloc_at(long n) {
  pthread_mutex_lock(&g_alloc_mu);
  long count = g_alloc_count;
  g_fail_at = n > 0 ? g_alloc_count + n : 0;
  pthread_mutex_unlock(&g_alloc_mu);
  return count;
}

long th_live_blocks(void) {
  pthread_mutex_lock(&g_alloc_mu);
  long n = (long)g_nblocks;
  pthread_mutex_unlock(&g_alloc_mu);
  return n;
}

sheaf_ctx *th_ctx(void) {
  if (g_ctx) return g_ctx;
  sheaf_ctx_options o = {0};
  o.allocator = th_allocator();
  o.threads = 2;
  char err[256];
  if (sheaf_ctx_create(&o, &g_ctx, err, sizeof err) != SHEAF_OK) {
    th_fail(__FILE__, __LINE__, "th_ctx: %s", err);
    return NULL;
  }
  return g_ctx;
}

sheaf_param th_param(sheaf_ctx *ctx, sheaf_model *m, const char *name, int rank, int64_t a,
                     int64_t b) {
  int64_t s[2] = {a, b};
  sheaf_param p = SHEAF_NO_PARAM;
  CHECK_OK(ctx, sheaf_model_param(m, name, rank, s, SHEAF_INIT_GLOROT, &p));
  return p;
}

/* ---- temporary files and subprocesses ---- */

size_t th_count_suffix(const char *dir, const char *suffix) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  size_t n = 0, ns = strlen(suffix);
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (len >= ns && !strcmp(e->d_name + len - ns, suffix)) n++;
  }
  closedir(d);
  return n;
}

bool th_have_jit_cc(const char *test) {
  static int probed, ok;
  if (!probed) {
    probed = 1;
    sheaf_ctx *ctx = th_ctx();
    sh_jit *jit = NULL;
    if (sh_jit_create(ctx, &(sh_jit_options){.cache_dir = th_tmp_path("jit-probe")}, &jit) == SHEAF_OK)
      ok = sh_jit_compiler(jit) != NULL;
    sh_jit_free(jit);
    sheaf_ctx_clear_error(ctx);
  }
  if (!ok) printf("note: %s skipped: no C compiler\n", test);
  return ok;
}

const char *th_tmp_path(const char *name) {
  if (!g_tmpdir[0]) {
    const char *base = getenv("TMPDIR");
    snprintf(g_tmpdir, sizeof g_tmpdir, "%s/sheaf-test-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(g_tmpdir)) {
      th_fail(__FILE__, __LINE__, "mkdtemp: %s", strerror(errno));
      return NULL;
    }
  }
  static char path[8][512];
  static int slot;
  slot = (slot + 1) % 8;
  snprintf(path[slot], sizeof path[slot], "%s/%s", g_tmpdir, name);
  return path[slot];
}

const char *th_cache_dir(const char *name) {
  const char *shared = getenv("SHEAF_CACHE_DIR");
  return shared && *shared ? shared : th_tmp_path(name);
}

const char *th_write_tmp(const char *name, const void *data, size_t size) {
  const char *p = th_tmp_path(name);
  if (!p) return NULL;
  FILE *f = fopen(p, "wb");
  if (!f || fwrite(data, 1, size, f) != size) {
    th_fail(__FILE__, __LINE__, "cannot write %s", p);
    if (f) fclose(f);
    return NULL;
  }
  fclose(f);
  return p;
}

const char *th_read_file(const char *path, size_t *n) {
  static char *buf[4];
  static int slot;
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  slot = (slot + 1) % 4;
  free(buf[slot]);
  size_t cap = 1 << 16, len = 0;
  char *b = malloc(cap);
  for (size_t r; b && (r = fread(b + len, 1, cap - len - 1, f)) > 0;) {
    len += r;
    if (cap - len < 2) {
      char *bigger = realloc(b, cap *= 2);
      if (!bigger) free(b);
      b = bigger;
    }
  }
  fclose(f);
  buf[slot] = b;
  if (!b) return NULL;
  b[len] = '\0';
  if (n) *n = len;
  return b;
}

const char *th_ewt_head(int n) {
  static char path[4][512];
  static int ns[4], used;
  for (int i = 0; i < used; i++)
    if (ns[i] == n) return path[i];
  if (used == 4 || n <= 0) {
    th_fail(__FILE__, __LINE__, "th_ewt_head(%d): at most 4 sizes a test, each > 0", n);
    return NULL;
  }
  char name[64]; /* the pid's: tests run at once in forked children, which share the directory */
  snprintf(name, sizeof name, "ewt_test_head_%d_%ld.conllu", n, (long)getpid());
  snprintf(path[used], sizeof path[used], "%s", th_tmp_path(name));
  FILE *in = fopen(TH_EWT_TEST, "r"), *out = in ? fopen(path[used], "w") : NULL;
  int sents = 0;
  char line[8192];
  while (out && sents < n && fgets(line, sizeof line, in)) {
    fputs(line, out);
    if (line[0] == '\n') sents++; /* the blank line ending a sentence */
  }
  bool ok = in && out && sents == n && !ferror(in);
  if (in) fclose(in);
  if (out && fclose(out)) ok = false;
  if (!ok) {
    th_fail(__FILE__, __LINE__, "th_ewt_head(%d): cannot copy %d sentences of %s to %s", n, n, TH_EWT_TEST,
            path[used]);
    return NULL;
  }
  ns[used] = n;
  return path[used++];
}

long th_flushes_of(const char *summary) {
  const char *p = strstr(summary, " flushes");
  if (!p) return -1;
  while (p > summary && p[-1] >= '0' && p[-1] <= '9') p--;
  return strtol(p, NULL, 10);
}

const char *th_sheaf_bin(void) {
  const char *b = getenv("SHEAF_BIN");
  return b && *b ? b : NULL;
}

int th_run(const char *cmd, char *out, size_t cap) {
  char full[4096];
  snprintf(full, sizeof full, "(%s) 2>&1", cmd);
  FILE *p = popen(full, "r");
  if (!p) return -1;
  size_t n = 0;
  if (cap) {
    while (n + 1 < cap) {
      size_t r = fread(out + n, 1, cap - 1 - n, p);
      if (r == 0) break;
      n += r;
    }
    out[n] = '\0';
  }
  char sink[4096];
  while (fread(sink, 1, sizeof sink, p) > 0) {}
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int th_sheaf(char *out, size_t cap, const char *fmt, ...) {
  char args[3072], cmd[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof cmd, "%s %s", th_sheaf_bin(), args); /* unquoted: SHEAF_BIN may be "qemu-aarch64 -L ... sheaf" */
  return th_run(cmd, out, cap);
}

int th_run_torch(const char *cmd, char *out, size_t cap) {
  int rc = th_run(cmd, out, cap);
  if (rc == 0) return 0;
  char probe[4096];
  if (th_run("python3 -c 'import torch, numpy'", probe, sizeof probe) != 0) {
    fprintf(stderr, "  skipped: PyTorch (python3 -c 'import torch, numpy'); scripts/install_torch.sh installs it\n");
    return TH_SKIP;
  }
  return rc;
}

static void remove_tmpdir(void) {
  if (!g_tmpdir[0]) return;
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", g_tmpdir);
  g_tmpdir[0] = '\0';
}

/* ---- running ---- */

static int run_one(const th_test *t) {
  g_failed_checks = 0;
  g_fail_at = 0;
  long live_before = th_live_blocks();
  t->fn();
  g_fail_at = 0;
  if (g_ctx) {
    sheaf_ctx_free(g_ctx);
    g_ctx = NULL;
  }
  long leaked = th_live_blocks() - live_before;
  if (leaked != 0)
    th_fail(t->file, 0, "test %s leaked %ld block(s) from the Sheaf allocator", t->name, leaked);
  remove_tmpdir();
  return g_failed_checks == 0 ? 0 : 1;
}

bool th_filter_matches(const char *name, const char *filter) {
  bool head = filter[0] == '^';
  const char *f = filter + head;
  size_t fn = strlen(f), nn = strlen(name);
  bool tail = fn > 0 && f[fn - 1] == '$';
  fn -= tail;
  if (fn > nn) return false;
  if (head && tail) return fn == nn && !memcmp(name, f, fn);
  if (head) return !memcmp(name, f, fn);
  if (tail) return !memcmp(name + nn - fn, f, fn);
  return strstr(name, f) != NULL;
}

static bool matches(const char *name, int nfilt, char **filt) {
  if (nfilt == 0) return true;
  for (int i = 0; i < nfilt; i++)
    if (th_filter_matches(name, filt[i])) return true;
  return false;
}

/* One test in a forked child (a crash or a hang fails that test only). With
 * `out`/`err` the child's stdout and stderr go to those files (parallel runs:
 * the parent prints them whole when the test ends, so outputs never mix). */
static pid_t spawn(const th_test *t, unsigned timeout, FILE *out, FILE *err) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    if (out && err) {
      dup2(fileno(out), STDOUT_FILENO);
      dup2(fileno(err), STDERR_FILENO);
    }
    alarm(timeout);
    int r = run_one(t);
    fflush(stdout);
    fflush(stderr);
    _exit(r);
  }
  return pid;
}

static void copy_out(FILE *from, FILE *to) {
  if (!from) return;
  char buf[4096];
  size_t n;
  rewind(from);
  while ((n = fread(buf, 1, sizeof buf, from)) > 0) fwrite(buf, 1, n, to);
  fclose(from);
}

/* A child's exit status as the test's result (0 passed), saying why it died. */
static int child_result(const th_test *t, int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  fprintf(stderr, "%s: test %s %s (signal %d: %s)\n", t->file, t->name,
          sig == SIGALRM ? "timed out" : "crashed", sig, strsignal(sig));
  return 1;
}

/* A test's times, for --times. */
typedef struct th_time {
  const th_test *t;
  double wall_ms, cpu_ms;
} th_time;

static th_time *g_times;
static size_t g_ntimes;

static double tv_ms(struct timeval tv) { return tv.tv_sec * 1e3 + tv.tv_usec / 1e3; }
static double ru_cpu_ms(const struct rusage *ru) { return tv_ms(ru->ru_utime) + tv_ms(ru->ru_stime); }

/* this process's and its waited-for children's CPU time so far */
static double self_cpu_ms(void) {
  struct rusage s, c;
  getrusage(RUSAGE_SELF, &s);
  getrusage(RUSAGE_CHILDREN, &c);
  return ru_cpu_ms(&s) + ru_cpu_ms(&c);
}

static void record_time(const th_test *t, double wall_ms, double cpu_ms) {
  th_time *n = realloc(g_times, (g_ntimes + 1) * sizeof *g_times);
  if (!n) return;
  g_times = n;
  g_times[g_ntimes++] = (th_time){t, wall_ms, cpu_ms};
}

static int by_wall_desc(const void *a, const void *b) {
  double x = ((const th_time *)a)->wall_ms, y = ((const th_time *)b)->wall_ms;
  return (x < y) - (x > y);
}

static void print_times(size_t top, double wall_ms) {
  double cpu = 0, sum_wall = 0;
  for (size_t i = 0; i < g_ntimes; i++) cpu += g_times[i].cpu_ms, sum_wall += g_times[i].wall_ms;
  qsort(g_times, g_ntimes, sizeof *g_times, by_wall_desc);
  printf("---- slowest tests (wall ms, cpu ms = user+sys incl. subprocesses)\n");
  for (size_t i = 0; i < g_ntimes && i < top; i++)
    printf("%10.1f %10.1f  %s (%s)\n", g_times[i].wall_ms, g_times[i].cpu_ms, g_times[i].t->name,
           g_times[i].t->file);
  printf("---- %zu tests: %.1f s wall (%.1f s summed over tests), %.1f s cpu\n", g_ntimes,
         wall_ms / 1e3, sum_wall / 1e3, cpu / 1e3);
}

/* A test running in a child. */
typedef struct th_job {
  pid_t pid;
  const th_test *t;
  uint64_t t0;
  FILE *out, *err;
} th_job;

#define TH_MAX_JOBS 64

/* ---- longest first (SHEAF_CACHE_DIR/sheaf-tests.times) ---- */

static bool times_path(char *out, size_t cap) {
  const char *dir = getenv("SHEAF_CACHE_DIR");
  return dir && *dir && (size_t)snprintf(out, cap, "%s/sheaf-tests.times", dir) < cap;
}

static double *g_prev_ms; /* per registered test; -1 unknown */

static int by_prev_desc(const void *a, const void *b) {
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  double dx = g_prev_ms[x] < 0 ? 1e300 : g_prev_ms[x], dy = g_prev_ms[y] < 0 ? 1e300 : g_prev_ms[y];
  if (dx != dy) return (dx < dy) - (dx > dy);
  return (x > y) - (x < y); /* registration order among equals */
}

/* order[0..g_n): registration order, or longest first when a times file
 * from an earlier run is there (only for parallel runs). */
static void plan_order(size_t *order, int jobs) {
  for (size_t i = 0; i < g_n; i++) order[i] = i;
  char path[1024], line[512], name[400];
  FILE *f;
  if (jobs < 2 || !times_path(path, sizeof path) || !(f = fopen(path, "r"))) return;
  g_prev_ms = malloc((g_n ? g_n : 1) * sizeof *g_prev_ms);
  if (!g_prev_ms) {
    fclose(f);
    return;
  }
  for (size_t i = 0; i < g_n; i++) g_prev_ms[i] = -1;
  double ms;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "%lf %399s", &ms, name) == 2 && ms >= 0)
      for (size_t i = 0; i < g_n; i++)
        if (!strcmp(g_tests[i].name, name)) g_prev_ms[i] = ms;
  fclose(f);
  qsort(order, g_n, sizeof *order, by_prev_desc);
  free(g_prev_ms);
  g_prev_ms = NULL;
}

/* After a full run: every test's wall time, written to a temporary file
 * renamed into place (runs sharing the directory never see half a file). */
static void save_times(void) {
  char path[1024], tmp[1100];
  if (!times_path(path, sizeof path)) return;
  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f) return;
  for (size_t i = 0; i < g_ntimes; i++) fprintf(f, "%.1f %s\n", g_times[i].wall_ms, g_times[i].t->name);
  if (fclose(f) != 0 || rename(tmp, path) != 0) unlink(tmp);
}

int main(int argc, char **argv) {
  bool verbose = false, fork_each = true;
  int jobs = 1;
  long times = 0;
  const char *te = getenv("SHEAF_TEST_TIMES");
  if (te && *te) times = atol(te) > 0 ? atol(te) : 20;
  /* every name argument, none dropped: compacted in place into argv[1..]
   * (slot 1 + nfilt <= i, so an argument is read before its slot is reused) */
  char **filters = argv + 1;
  int nfilt = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-v") == 0) verbose = true;
    else if (strcmp(argv[i], "--no-fork") == 0) fork_each = false;
    else if (strcmp(argv[i], "--times") == 0) times = 20;
    else if (strncmp(argv[i], "--times=", 8) == 0) {
      char *end;
      times = strtol(argv[i] + 8, &end, 10);
      if (end == argv[i] + 8 || *end || times < 1) {
        fprintf(stderr, "sheaf-tests: %s: expected --times=N with N >= 1\n", argv[i]);
        return 2;
      }
    }
    else if (strncmp(argv[i], "-j", 2) == 0) {
      char *end;
      long j = strtol(argv[i] + 2, &end, 10);
      if (end == argv[i] + 2 || *end || j < 1 || j > TH_MAX_JOBS) {
        fprintf(stderr, "sheaf-tests: %s: expected -jN with N in 1..%d\n", argv[i], TH_MAX_JOBS);
        return 2;
      }
      jobs = (int)j;
    } else if (strcmp(argv[i], "--list") == 0) {
      for (size_t k = 0; k < g_n; k++) printf("%s\n", g_tests[k].name);
      return 0;
    } else filters[nfilt++] = argv[i];
  }
  if (!fork_each) jobs = 1;
  unsigned timeout = 300;
  const char *to = getenv("SHEAF_TEST_TIMEOUT");
  if (to && atoi(to) > 0) timeout = (unsigned)atoi(to);

  int passed = 0, failed = 0;
  uint64_t start_ns = sheaf_time_ns();
  th_job run[TH_MAX_JOBS];
  int n_run = 0;
  size_t k = 0;
  size_t *order = malloc((g_n ? g_n : 1) * sizeof *order);
  if (!order) {
    fprintf(stderr, "sheaf-tests: out of memory\n");
    return 2;
  }
  plan_order(order, jobs);
  for (;;) {
    /* start tests while there are free slots */
    while (n_run < jobs && k < g_n) {
      const th_test *t = &g_tests[order[k++]];
      if (!matches(t->name, nfilt, filters)) continue;
      th_job *j = &run[n_run];
      *j = (th_job){0, t, sheaf_time_ns(), NULL, NULL};
      if (!fork_each) {
        double cpu0 = self_cpu_ms();
        int rc = run_one(t);
        double ms = (double)(sheaf_time_ns() - j->t0) / 1e6;
        record_time(t, ms, self_cpu_ms() - cpu0);
        if (rc == 0) passed++;
        else failed++;
        if (rc != 0 || verbose) printf("%s %s (%.1f ms)\n", rc == 0 ? "PASS" : "FAIL", t->name, ms);
        continue;
      }
      if (jobs > 1) {
        j->out = tmpfile();
        j->err = tmpfile();
        if (!j->out || !j->err) {
          fprintf(stderr, "sheaf-tests: tmpfile: %s\n", strerror(errno));
          return 2;
        }
      }
      j->pid = spawn(t, timeout, j->out, j->err);
      if (j->pid < 0) {
        fprintf(stderr, "sheaf-tests: fork: %s\n", strerror(errno));
        return 2;
      }
      n_run++;
    }
    if (n_run == 0) break;
    /* wait for any of them */
    int status = 0;
    struct rusage ru;
    pid_t pid;
    while ((pid = wait4(-1, &status, 0, &ru)) < 0 && errno == EINTR) {}
    if (pid < 0) {
      fprintf(stderr, "sheaf-tests: waitpid: %s\n", strerror(errno));
      return 2;
    }
    int i = 0;
    while (i < n_run && run[i].pid != pid) i++;
    if (i == n_run) continue; /* not one of ours */
    th_job j = run[i];
    run[i] = run[--n_run];
    copy_out(j.out, stdout);
    fflush(stdout);
    copy_out(j.err, stderr);
    int rc = child_result(j.t, status);
    double ms = (double)(sheaf_time_ns() - j.t0) / 1e6;
    record_time(j.t, ms, ru_cpu_ms(&ru));
    if (rc == 0) passed++;
    else failed++;
    if (rc != 0 || verbose) printf("%s %s (%.1f ms)\n", rc == 0 ? "PASS" : "FAIL", j.t->name, ms);
  }
  free(order);
  if (nfilt == 0) save_times();
  if (times > 0) print_times((size_t)times, (double)(sheaf_time_ns() - start_ns) / 1e6);
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 && passed > 0 ? 0 : 1;
}
