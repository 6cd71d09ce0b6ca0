/*
 * bench_util.c — helpers of the model benchmarks (see bench_util.h):
 * throughput windows, the GEMM ceiling, peer subprocesses, temp files, JSON,
 * and the flags, setup, peer runs and tables the model benchmarks share.
 */
#include "bench_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/fiber.h"
#include "kernels/gemm.h"

/* Best instances/s over `rounds` windows of at least min_s seconds, each
 * made of whole passes of step(arg), after two whole warm-up passes (a
 * graph's arenas grow to their steady size over the first flushes, with
 * first-touch page faults a long run pays once; the windows measure the
 * steady state). reset(arg), when given, runs between warm-up and timing.
 * Returns -1 on error. */
static double windows(sheaf_status (*step)(void *), void (*reset)(void *), void *arg, int32_t count,
                      double min_s, int rounds, long *passes_out) {
  for (int w = 0; w < 2; w++)
    if (step(arg) != SHEAF_OK) return -1;
  if (reset) reset(arg);
  double best = 0;
  long total_passes = 0;
  for (int r = 0; r < rounds; r++) {
    long passes = 0;
    double t0 = exb_now_s(exb_cpu_time), dt;
    do {
      if (step(arg) != SHEAF_OK) return -1;
      passes++;
      dt = exb_now_s(exb_cpu_time) - t0;
    } while (dt < min_s);
    total_passes += passes;
    double rate = (double)passes * count / dt;
    if (rate > best) best = rate;
  }
  if (passes_out) *passes_out = total_passes;
  return best;
}

typedef struct graph_step {
  exb_pass_fn pass;
  void *arg;
  sheaf_graph *g;
  int32_t count, batch;
} graph_step;

static sheaf_status graph_step_run(void *a) {
  graph_step *s = a;
  return s->pass(s->arg, s->g, s->count, s->batch);
}
static void graph_step_reset(void *a) { sheaf_graph_stats_reset(((graph_step *)a)->g); }

double exb_rate(sheaf_model *model, exb_pass_fn pass, void *arg, sheaf_policy policy,
                int threads, int32_t batch, int32_t count, double min_s, int rounds,
                sheaf_graph_stats *delta, long *passes_out) {
  sheaf_graph_opts go = {policy, threads, NULL};
  graph_step s = {pass, arg, NULL, count, batch};
  if (sheaf_graph_create(model, &go, &s.g) != SHEAF_OK) return -1;
  double best = windows(graph_step_run, graph_step_reset, &s, count, min_s, rounds, passes_out);
  if (best > 0 && delta) sheaf_graph_get_stats(s.g, delta);
  sheaf_graph_free(s.g);
  return best;
}

typedef struct runner_step {
  const sh_net *net;
  sheaf_runner *r;
  int32_t count;
} runner_step;

static sheaf_status runner_step_run(void *a) {
  runner_step *s = a;
  return sh_net_run_runner(s->net, s->r, 0, s->count, NULL);
}
static void runner_step_reset(void *a) { sheaf_runner_stats_reset(((runner_step *)a)->r); }

double exb_runner_rate(const sh_net *net, sheaf_policy policy, int threads, sheaf_parallel par,
                       int32_t batch, int32_t count, double min_s, int rounds,
                       sheaf_graph_stats *delta, long *passes_out) {
  sheaf_runner_opts ro = {batch, threads, policy, par, NULL};
  runner_step s = {net, NULL, count};
  double best = -1;
  if (sheaf_runner_create(net->model, &ro, &s.r) == SHEAF_OK)
    best = windows(runner_step_run, runner_step_reset, &s, count, min_s, rounds, passes_out);
  if (best > 0 && delta) sheaf_runner_get_stats(s.r, delta);
  if (best <= 0)
    fprintf(stderr, "bench: %s runner (policy %s, %d threads): %s\n", sh_net_kind_name(net->kind),
            sheaf_policy_name(policy), threads, sheaf_ctx_last_error(net->data->ctx));
  sheaf_runner_free(s.r);
  return best;
}

double exb_sheaf_rate(const sh_net *net, sheaf_policy policy, int threads, int32_t batch,
                      int32_t count, double min_s, int rounds, sheaf_graph_stats *delta,
                      long *passes_out) {
  return exb_runner_rate(net, policy, threads, SHEAF_PARALLEL_AUTO, batch, count, min_s, rounds,
                         delta, passes_out);
}

static int cmp_f64(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

void exb_sort_f64(double *v, size_t n) { qsort(v, n, sizeof *v, cmp_f64); }

double exb_now_s(bool cpu) {
  struct timespec t;
  clock_gettime(cpu ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void spin_fn(void *arg) {
  long n = *(long *)arg;
  for (long i = 0; i < n; i++) sh_fiber_yield();
}

double exb_fiber_switch_ns(long iters, int reps, bool cpu) {
  sh_fiber_stacks pool;
  sh_fiber_stacks_init(&pool, 0);
  sh_fiber f;
  double best = -1;
  for (int rep = 0; rep < reps; rep++) {
    if (!sh_fiber_init(&f, &pool, spin_fn, &iters)) break;
    double t0 = exb_now_s(cpu);
    while (!f.done) sh_fiber_resume(&f);
    double ns = (exb_now_s(cpu) - t0) * 1e9 / (2.0 * (double)(iters + 1));
    best = best < 0 || ns < best ? ns : best;
    sh_fiber_release(&f, &pool);
  }
  sh_fiber_stacks_free(&pool);
  return best;
}

float *exb_frand_xs(int64_t n, uint64_t *s) {
  /* 64-byte aligned, as the runtime's buffers and the peers' (TVM's) are */
  float *p = NULL;
  if (posix_memalign((void **)&p, 64, sizeof(float) * (size_t)(n + 16))) return NULL;
  for (int64_t i = 0; p && i < n; i++) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    p[i] = (float)((double)(*s >> 11) / 9007199254740992.0 * 2 - 1);
  }
  return p;
}

static float *frand(int64_t n, uint64_t seed) {
  float *p = NULL;
  if (posix_memalign((void **)&p, 64, (size_t)(n > 0 ? n : 1) * sizeof(float))) return NULL;
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = (float)((double)(seed >> 40) / (double)(1ull << 24)) - 0.5f;
  }
  return p;
}

#define LIST_MAXB 8 /* distinct weight shapes of exb_gemm_list_gflops */

/* One pass over the calls; false if one fails. */
static bool gemm_pass(sheaf_ctx *ctx, int threads, const sh_gemm_args *args, int count) {
  for (int i = 0; i < count; i++)
    if (sh_gemm(ctx, sheaf_cpu_isa(), threads, &args[i]) != SHEAF_OK) return false;
  return true;
}

/* The packed B of shape (k, n) in pb[0, *npb), packed (from b) if new;
 * NULL when there are LIST_MAXB already or packing fails. */
static const sh_gemm_packed_b *list_packed_b(sheaf_ctx *ctx, const float *b, int64_t k,
                                             int64_t n, sh_gemm_packed_b **pb, int *npb) {
  for (int j = 0; j < *npb; j++)
    if (pb[j]->k == k && pb[j]->n == n) return pb[j];
  if (*npb == LIST_MAXB || sh_gemm_pack_b(ctx, b, n, k, n, 0, &pb[*npb]) != SHEAF_OK)
    return NULL;
  return pb[(*npb)++];
}

double exb_gemm_list_gflops(sheaf_ctx *ctx, int threads, const exb_mnk *shapes, int count,
                            double min_s) {
  int64_t max_a = 1, max_b = 1, max_c = 1;
  double flops = 0;
  for (int i = 0; i < count; i++) {
    exb_mnk s = shapes[i];
    max_a = s.m * s.k > max_a ? s.m * s.k : max_a;
    max_b = s.k * s.n > max_b ? s.k * s.n : max_b;
    max_c = s.m * s.n > max_c ? s.m * s.n : max_c;
    flops += 2.0 * (double)s.m * (double)s.n * (double)s.k;
  }
  float *a = frand(max_a, 1), *b = frand(max_b, 2), *c = frand(max_c, 3);
  sh_gemm_args *args = calloc((size_t)(count > 0 ? count : 1), sizeof *args);
  sh_gemm_packed_b *pb[LIST_MAXB];
  int npb = 0;
  sh_gemm_ws *ws = NULL;
  double best = 0;
  if (!a || !b || !c || !args || count <= 0 || sh_gemm_ws_create(ctx, &ws) != SHEAF_OK) goto done;
  for (int i = 0; i < count; i++) {
    exb_mnk s = shapes[i];
    const sh_gemm_packed_b *p = list_packed_b(ctx, b, s.k, s.n, pb, &npb);
    if (!p) goto done;
    args[i] = (sh_gemm_args){.m = s.m, .n_src = 1, .src = {{s.k, {NULL, a, s.k}}},
                             .b_packed = p, .c = {NULL, c, s.n}, .ws = ws};
  }
  if (!gemm_pass(ctx, threads, args, count)) goto done; /* warm-up */
  for (int r = 0; r < 3; r++) {
    long passes = 0;
    double t0 = exb_now_s(exb_cpu_time), dt;
    do {
      if (!gemm_pass(ctx, threads, args, count)) goto done;
      passes++;
      dt = exb_now_s(exb_cpu_time) - t0;
    } while (dt < min_s);
    double g = flops * (double)passes / dt * 1e-9;
    if (g > best) best = g;
  }
done:
  sh_gemm_ws_free(ctx, ws);
  for (int j = 0; j < npb; j++) sh_gemm_packed_b_free(ctx, pb[j]);
  free(args);
  free(a);
  free(b);
  free(c);
  return best;
}

double exb_gemm_gflops(sheaf_ctx *ctx, int threads, int64_t m, int64_t n, int64_t k,
                       double min_s) {
  const exb_mnk one = {m, n, k};
  return exb_gemm_list_gflops(ctx, threads, &one, 1, min_s);
}

/* ------------------------------------------------------------ temp files */

static char g_tmpdir[256];
static char **g_paths; /* every name handed out (removed by exb_tmp_cleanup) */
static int g_npaths, g_cap;

const char *exb_tmp_path(const char *name) {
  if (!g_tmpdir[0]) {
    const char *base = getenv("TMPDIR");
    snprintf(g_tmpdir, sizeof g_tmpdir, "%s/sheaf-bench-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(g_tmpdir)) {
      perror("bench: mkdtemp");
      exit(1);
    }
  }
  for (int i = 0; i < g_npaths; i++)
    if (!strcmp(g_paths[i] + strlen(g_tmpdir) + 1, name)) return g_paths[i];
  if (g_npaths == g_cap) {
    int cap = g_cap ? 2 * g_cap : 16;
    char **p = realloc(g_paths, (size_t)cap * sizeof *p);
    if (!p) {
      fprintf(stderr, "bench: out of memory for temporary file names\n");
      exit(1);
    }
    g_paths = p;
    g_cap = cap;
  }
  size_t len = strlen(g_tmpdir) + 1 + strlen(name) + 1;
  char *path = malloc(len);
  if (!path) {
    fprintf(stderr, "bench: out of memory for temporary file names\n");
    exit(1);
  }
  snprintf(path, len, "%s/%s", g_tmpdir, name);
  return g_paths[g_npaths++] = path;
}

void exb_tmp_cleanup(void) {
  for (int i = 0; i < g_npaths; i++) remove(g_paths[i]), free(g_paths[i]);
  if (g_tmpdir[0]) rmdir(g_tmpdir);
  free(g_paths);
  g_paths = NULL;
  g_npaths = g_cap = 0;
  g_tmpdir[0] = '\0';
}

/* ------------------------------------------------------------------ peers */

/* The number after "KEY": in a JSON line, or the string value. */
static bool json_num(const char *line, const char *key, double *out) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(line, pat);
  if (!p) return false;
  char *end;
  *out = strtod(p + strlen(pat), &end);
  return end != p + strlen(pat);
}

static bool json_str(const char *line, const char *key, char *out, size_t cap) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\": \"", key);
  const char *p = strstr(line, pat);
  if (!p) return false;
  p += strlen(pat);
  const char *q = strchr(p, '"');
  if (!q || (size_t)(q - p) >= cap) return false;
  memcpy(out, p, (size_t)(q - p));
  out[q - p] = '\0';
  return true;
}

int exb_run_peer(const char *cmd, const char *key, exb_peer_rec *recs, int max, int *n) {
  *n = 0;
  fflush(stdout);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  char line[4096];
  while (fgets(line, sizeof line, p)) {
    if (line[0] == '#') {
      printf("  %s", line);
      fflush(stdout);
      continue;
    }
    if (line[0] != '{' || *n >= max) continue;
    exb_peer_rec r = {{0}, 0, 0};
    double b;
    if (json_str(line, "system", r.system, sizeof r.system) && json_num(line, "batch", &b) &&
        json_num(line, key, &r.rate)) {
      r.batch = (int)b;
      recs[(*n)++] = r;
    }
  }
  int st = pclose(p);
  return st == -1 ? -1 : (WIFEXITED(st) ? WEXITSTATUS(st) : 128);
}

bool exb_have_torch(const char *python) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "%s -c 'import torch, numpy' >/dev/null 2>&1", python);
  return system(cmd) == 0;
}

float *exb_read_f32(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  float *v = size > 0 ? malloc((size_t)size) : NULL;
  if (v && fread(v, 1, (size_t)size, f) != (size_t)size) {
    free(v);
    v = NULL;
  }
  fclose(f);
  *n = v ? (size_t)size / sizeof(float) : 0;
  return v;
}

/* ------------------------------------------------------------------ JSON */

static FILE *g_json;
static bool g_json_first;

bool exb_json_open(const char *path) {
  if (!path) return true;
  g_json = fopen(path, "w");
  if (!g_json) return false;
  fputs("[\n", g_json);
  g_json_first = true;
  return true;
}

void exb_json_rec(const char *fmt, ...) {
  if (!g_json) return;
  fputs(g_json_first ? "  {" : ",\n  {", g_json);
  g_json_first = false;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(g_json, fmt, ap);
  va_end(ap);
  fputc('}', g_json);
}

void exb_json_close(void) {
  if (!g_json) return;
  fputs("\n]\n", g_json);
  fclose(g_json);
  g_json = NULL;
}

bool exb_parse_list(const char *s, int *out, int max, int *n) {
  *n = 0;
  while (*s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || v <= 0 || v > 1000000 || *n >= max) return false;
    out[(*n)++] = (int)v;
    s = end;
    if (*s == ',') s++;
    else if (*s) return false;
  }
  return *n > 0;
}

bool exb_rounds_rows(int argc, char **argv, int *rounds, int64_t *ms, int *nm) {
  *rounds = argc > 1 ? atoi(argv[1]) : 15;
  if (*rounds < 1 || *rounds > 200) *rounds = 15;
  if (argc <= 2) return true;
  int v[32];
  if (!exb_parse_list(argv[2], v, 32, nm)) {
    fprintf(stderr, "%s: bad row counts '%s' (expected a comma list of positive integers)\n", argv[0], argv[2]);
    return false;
  }
  for (int i = 0; i < *nm; i++) ms[i] = v[i];
  return true;
}

/* ------------------------------------------------------- model benchmarks */

const sheaf_policy exb_policies[4] = {SHEAF_POLICY_SHEAF, SHEAF_POLICY_NONE, SHEAF_POLICY_DEPTH,
                                      SHEAF_POLICY_AGENDA};

static void parse_args(int argc, char **argv, const char *count_flag, const char *usage,
                       exb_opts *o) {
  *o = (exb_opts){.data = "data/ud_english_ewt/en_ewt-ud-test.conllu",
                  .python = "python3",
                  .hidden = {256, 512}, .nh = 2, .batch = {1, 10, 64}, .nb = 3,
                  .threads = {1, 2}, .nt = 2, .dynet_dir = "build/peers/dynet"};
  bool ok = true;
  for (int i = 1; i < argc && ok; i++) {
    const char *a = argv[i];
    bool has = i + 1 < argc;
    if (!strcmp(a, "--quick")) o->quick = true;
    else if (!strcmp(a, "--no-torch")) o->no_torch = true;
    else if (!strcmp(a, "--no-dynet")) o->no_dynet = true;
    else if (!strcmp(a, "--dynet-dir") && has) o->dynet_dir = argv[++i];
    else if (!strcmp(a, "--json") && has) o->json = argv[++i];
    else if (!strcmp(a, "--data") && has) o->data = argv[++i];
    else if (!strcmp(a, "--python") && has) o->python = argv[++i];
    else if (!strcmp(a, count_flag) && has) o->count = strtol(argv[++i], NULL, 10);
    else if (!strcmp(a, "--hidden") && has)
      ok = exb_parse_list(argv[++i], o->hidden, EXB_MAXL, &o->nh);
    else if (!strcmp(a, "--batch") && has)
      ok = exb_parse_list(argv[++i], o->batch, EXB_MAXL, &o->nb);
    else if (!strcmp(a, "--threads") && has)
      ok = exb_parse_list(argv[++i], o->threads, EXB_MAXL, &o->nt);
    else ok = false;
  }
  if (!ok) {
    fputs(usage, stderr);
    exit(2);
  }
}

int exb_ctx_min_threads = 1;
bool exb_cpu_time;

bool exb_setup(const char *prog, const exb_opts *o, sh_dataset_kind kind, int32_t quick_n,
               exb_env *e) {
  memset(e, 0, sizeof *e);
  e->prog = prog;
  int max_threads = exb_ctx_min_threads > 1 ? exb_ctx_min_threads : 1;
  for (int i = 0; i < o->nt; i++)
    if (o->threads[i] > max_threads) max_threads = o->threads[i];
  sheaf_ctx_options co = {.threads = max_threads};
  char err[512];
  if (sheaf_ctx_create(&co, &e->ctx, err, sizeof err) != SHEAF_OK) {
    fprintf(stderr, "%s: %s\n", prog, err);
    return false;
  }
  if (sh_dataset_load(e->ctx, o->data, kind, &e->d) != SHEAF_OK) {
    fprintf(stderr, "%s: %s\n", prog, sheaf_ctx_last_error(e->ctx));
    return false;
  }
  e->n = sh_dataset_count(&e->d);
  if (o->quick && e->n > quick_n) e->n = quick_n;
  if (o->count > 0 && o->count < e->n) e->n = (int32_t)o->count;
  e->min_s = o->quick ? 0.2 : 1.0;
  e->rounds = o->quick ? 1 : 3;
  e->torch = !o->no_torch && exb_have_torch(o->python);
  if (!exb_json_open(o->json)) {
    fprintf(stderr, "%s: cannot write %s\n", prog, o->json);
    return false;
  }
  return true;
}

bool exb_start(int argc, char **argv, const char *prog, const char *count_flag,
               const char *usage, sh_dataset_kind kind, int32_t quick_n, const char *file,
               bool (*write)(const sh_dataset *d, int32_t n, const char *path), exb_opts *o,
               exb_env *e) {
  parse_args(argc, argv, count_flag, usage, o);
  if (!exb_setup(prog, o, kind, quick_n, e)) return false;
  e->data_file = exb_tmp_path(file);
  if (!write(&e->d, e->n, e->data_file)) {
    fprintf(stderr, "%s: cannot write %s\n", prog, e->data_file);
    return false;
  }
  return true;
}

void exb_note_torch(const exb_opts *o, const exb_env *e) {
  if (!e->torch)
    printf("note: PyTorch peers skipped: %s\n",
           o->no_torch ? "--no-torch"
                       : "'import torch, numpy' failed (scripts/install_torch.sh installs them)");
}

void exb_finish(exb_env *e) {
  exb_json_close();
  exb_tmp_cleanup();
  sh_dataset_free(&e->d);
  sheaf_ctx_free(e->ctx);
}

bool exb_net_open(exb_env *e, sh_net_kind kind, int H, int E, int32_t check, sh_net *net,
                  sh_net_outputs *ref, const char **wpath) {
  char wname[64];
  snprintf(wname, sizeof wname, "%s-h%d.safetensors", sh_net_kind_name(kind), H);
  *wpath = exb_tmp_path(wname);
  int32_t c = e->n < check ? e->n : check;
  bool ok = sh_net_create(e->ctx, kind, &e->d, H, E, net) == SHEAF_OK &&
            sh_net_seed(net, 1) == SHEAF_OK && sheaf_model_save(net->model, *wpath) == SHEAF_OK &&
            sh_net_run_fresh(net, SHEAF_POLICY_SHEAF, 0, 0, c, 64, ref) == SHEAF_OK;
  if (!ok) fprintf(stderr, "%s: %s\n", e->prog, sheaf_ctx_last_error(e->ctx));
  return ok;
}

int exb_run_peer_threads(const char *python, const char *script, int T, const char *args,
                         const char *args_procs, const char *key, exb_peer_rec *recs, int max) {
  int total = 0;
  for (int wp = 0; wp < (T > 1 ? 2 : 1); wp++) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "OMP_NUM_THREADS=%d MKL_NUM_THREADS=%d OPENBLAS_NUM_THREADS=%d %s %s %s %s", T, T,
             T, T > 1 && wp == 0 ? "OMP_WAIT_POLICY=PASSIVE" : "", python, script, args);
    int n = 0;
    int st = exb_run_peer(cmd, key, recs + total, max - total, &n);
    if (st != 0) printf("  note: the PyTorch peer exited with status %d\n", st);
    total += n;
  }
  if (T <= 1 || !args_procs || T > 8) return total;
  /* T processes of one thread at once, each over all the instances: the
   * throughput of the T together is the sum of theirs */
  char cmd[8192] = "(";
  for (int k = 0; k < T; k++)
    snprintf(cmd + strlen(cmd), sizeof cmd - strlen(cmd),
             "OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 %s %s %s | "
             "sed 's/^#/# process %d:/' & ",
             python, script, args_procs, k + 1);
  snprintf(cmd + strlen(cmd), sizeof cmd - strlen(cmd), "wait)");
  exb_peer_rec got[64];
  int n = 0, st = exb_run_peer(cmd, key, got, 64, &n);
  if (st != 0) printf("  note: the PyTorch peer processes exited with status %d\n", st);
  for (int i = 0; i < n; i++) {
    if (!got[i].batch) continue; /* summed already */
    exb_peer_rec sum = got[i];
    int copies = 1;
    for (int j = i + 1; j < n; j++)
      if (got[j].batch == sum.batch && !strcmp(got[j].system, sum.system)) {
        sum.rate += got[j].rate;
        got[j].batch = 0;
        copies++;
      }
    if (copies == T && total < max) recs[total++] = sum;
  }
  return total;
}

/* Reads a peer's check file (two blocks of `want` floats) and gives the
 * max |ref - block| of each; false when it is missing or the wrong size. */
static bool check_peer(const char *path, const float *ref, size_t want, double d[2]) {
  size_t nv = 0;
  float *v = exb_read_f32(path, &nv);
  bool ok = v && nv == 2 * want;
  d[0] = d[1] = 0;
  for (size_t k = 0; ok && k < want; k++)
    for (int s = 0; s < 2; s++) d[s] = fmax(d[s], fabs((double)ref[k] - v[s * want + k]));
  free(v);
  return ok;
}

double exb_peers(const exb_opts *o, const exb_env *e, const exb_peer *p, const char *weights,
                 int T, const sh_net_outputs *ref, exb_cell *cells) {
  char args[1024], blist[128], first[16];
  exb_list_str(o->batch, o->nb, blist, sizeof blist);
  snprintf(first, sizeof first, "%d", o->batch[0]);
  const char *check = exb_tmp_path("check.f32");
  remove(check);
  snprintf(args, sizeof args,
           "--weights %s %s %s --threads %d --batches %s --min-time %g --rounds %d%s%s "
           "--check-count %d %s %s",
           weights, p->data_flag, e->data_file, T, blist, e->min_s, e->rounds,
           ref ? " --check " : "", ref ? check : "", ref ? (int)ref->count : 64, p->slow_flag,
           o->quick ? first : blist);
  char procs[1024]; /* the T-process configuration: one thread each, no check file */
  snprintf(procs, sizeof procs, "--weights %s %s %s --threads 1 --batches %s --min-time %g --rounds %d %s %s",
           weights, p->data_flag, e->data_file, blist, e->min_s, e->rounds, p->slow_flag,
           o->quick ? first : blist);
  exb_peer_rec recs[64];
  char key[32];
  snprintf(key, sizeof key, "%ss_per_s", p->unit);
  int n = exb_run_peer_threads(o->python, p->script, T, args, procs, key, recs, 64);
  for (int bi = 0; bi < o->nb; bi++)
    for (int k = 0; k < 2; k++)
      for (int r = 0; r < n; r++)
        if (recs[r].batch == o->batch[bi] && !strcmp(recs[r].system, p->sys[k]))
          cells[bi].peer[k] = fmax(cells[bi].peer[k], recs[r].rate);
  if (!ref) return 0;
  double d[2];
  if (!check_peer(check, ref->values, (size_t)(ref->rows * ref->dim), d)) {
    printf("  check: no PyTorch outputs to compare\n");
    return 0;
  }
  char words[48] = ""; /* models with a row per word: how many */
  if (ref->rows != ref->count) snprintf(words, sizeof words, ", %lld words", (long long)ref->rows);
  printf("  check (first %d %s%s, same weights): max |sheaf - %s| = %.2g, max |sheaf - %s| = "
         "%.2g%s\n",
         (int)ref->count, strcmp(p->data_flag, "--sents") ? "trees" : "sentences", words,
         p->sys[0], d[0], p->sys[1], d[1], d[0] > 1e-4 || d[1] > 1e-4 ? "  ** MISMATCH **" : "");
  return fmax(d[0], d[1]);
}

bool exb_dynet_bin(const exb_opts *o, const exb_peer *p, char *bin, size_t cap, char *why,
                   size_t why_cap) {
  const char *dir = o->dynet_dir ? o->dynet_dir : "build/peers/dynet";
  snprintf(bin, cap, "%s/bin/%s", dir, p->dynet ? p->dynet : "?");
  if (o->no_dynet) {
    snprintf(why, why_cap, "--no-dynet");
    return false;
  }
  if (!p->dynet) {
    snprintf(why, why_cap, "no DyNet version of this model");
    return false;
  }
  if (access(bin, X_OK) == 0) return true;
  char failed[512];
  snprintf(failed, sizeof failed, "%s/FAILED", dir);
  FILE *f = fopen(failed, "r");
  if (f && fgets(why, (int)why_cap, f)) {
    why[strcspn(why, "\n")] = '\0';
  } else {
    snprintf(why, why_cap, "%s not built; scripts/install_dynet.sh builds it", bin);
  }
  if (f) fclose(f);
  return false;
}

void exb_note_dynet(const exb_opts *o, const exb_peer *p) {
  char bin[512], why[512];
  if (!exb_dynet_bin(o, p, bin, sizeof bin, why, sizeof why))
    printf("DyNet: not available (%s)\n", why);
}

double exb_dynet_best(const exb_cell *c, int *ab) {
  double best = 0;
  for (int k = 0; k < 3; k++)
    if (c->dynet[k] > best) {
      best = c->dynet[k];
      if (ab) *ab = k;
    }
  return best;
}

double exb_dynet(const exb_opts *o, const exb_env *e, const exb_peer *p, const char *weights,
                 const char *data_file, const int *batches, int n, const sh_net_outputs *ref,
                 exb_cell *cells) {
  char bin[512], why[512];
  if (!exb_dynet_bin(o, p, bin, sizeof bin, why, sizeof why)) return -1;
  char blist[128], key[32];
  exb_list_str(batches, n, blist, sizeof blist);
  snprintf(key, sizeof key, "%ss_per_s", p->unit);
  const char *err = exb_tmp_path("dynet.err");
  double worst = 0, diff[3] = {-1, -1, -1};
  for (int ab = 0; ab < 3; ab++) {
    char check[64], cmd[3072];
    snprintf(check, sizeof check, "dynet-ab%d.f32", ab);
    const char *cpath = exb_tmp_path(check);
    remove(cpath);
    /* enough memory: 1 GiB for the forward values (the pools also grow) */
    snprintf(cmd, sizeof cmd,
             "OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 %s --dynet-autobatch %d "
             "--dynet-mem 1024,16,512,512 --weights %s %s %s --batches %s --min-time %g --rounds %d"
             "%s%s --check-count %d 2>%s",
             bin, ab, weights, p->data_flag, data_file ? data_file : e->data_file, blist, e->min_s,
             e->rounds, ref ? " --check " : "", ref ? cpath : "", ref ? (int)ref->count : 64, err);
    exb_peer_rec recs[16];
    int got = 0, st = exb_run_peer(cmd, key, recs, 16, &got);
    if (st != 0) {
      printf("  note: DyNet (--dynet-autobatch %d) exited with status %d", ab, st);
      FILE *f = fopen(err, "r");
      char line[512];
      while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "dynet peer:", 11) || strstr(line, "rror")) printf("; %s", line);
      if (f) fclose(f);
      printf("\n");
    }
    for (int r = 0; r < got; r++)
      for (int bi = 0; bi < n; bi++)
        if (recs[r].batch == batches[bi]) cells[bi].dynet[ab] = recs[r].rate;
    if (!ref) continue;
    size_t nv = 0, want = (size_t)(ref->rows * ref->dim);
    float *v = exb_read_f32(cpath, &nv);
    if (v && nv == want) {
      diff[ab] = 0;
      for (size_t k = 0; k < want; k++) diff[ab] = fmax(diff[ab], fabs((double)ref->values[k] - v[k]));
      worst = fmax(worst, diff[ab]);
    }
    free(v);
  }
  if (ref) {
    char words[48] = "";
    if (ref->rows != ref->count) snprintf(words, sizeof words, ", %lld words", (long long)ref->rows);
    printf("  check (first %d %s%s, same weights):", (int)ref->count,
           strcmp(p->data_flag, "--sents") ? "trees" : "sentences", words);
    for (int ab = 0; ab < 3; ab++) {
      if (diff[ab] < 0) printf(" dynet-ab%d: no outputs%s", ab, ab < 2 ? "," : "");
      else printf(" max |sheaf - dynet-ab%d| = %.2g%s", ab, diff[ab], ab < 2 ? "," : "");
    }
    printf("%s\n", worst > 1e-4 ? "  ** MISMATCH **" : "");
  }
  return worst;
}

bool exb_row(const exb_env *e, const sh_net *net, const exb_peer *p, int T, int B, exb_cell *c,
             const exb_cell *first, char f[8][16]) {
  const char *model = sh_net_kind_name(net->kind);
  for (int k = 0; k < 4; k++) {
    c->sheaf[k] = exb_sheaf_rate(net, exb_policies[k], T, B, e->n, e->min_s, e->rounds, NULL, NULL);
    if (c->sheaf[k] <= 0) return false;
    exb_json_rec("\"system\": \"sheaf\", \"policy\": \"%s\", \"model\": \"%s\", "
                 "\"hidden\": %d, \"batch\": %d, \"threads\": %d, \"%ss_per_s\": %.2f",
                 sheaf_policy_name(exb_policies[k]), model, (int)net->hidden, B, T, p->unit,
                 c->sheaf[k]);
  }
  for (int k = 0; k < 2; k++)
    if (c->peer[k] > 0)
      exb_json_rec("\"system\": \"%s\", \"policy\": null, \"model\": \"%s\", "
                   "\"hidden\": %d, \"batch\": %d, \"threads\": %d, \"%ss_per_s\": %.2f",
                   p->sys[k], model, (int)net->hidden, B, T, p->unit, c->peer[k]);
  double slow = c->peer[0] > 0 ? c->peer[0] : first->peer[0];
  exb_fmt_num(f[0], c->peer[0], 1);
  if (c->peer[0] <= 0 && slow > 0) snprintf(f[0], 16, "(above)");
  exb_fmt_num(f[1], c->peer[1], 1);
  exb_fmt_num(f[2], c->peer[1] > 0 ? c->sheaf[0] / c->peer[1] : 0, 2);
  exb_fmt_num(f[3], slow > 0 ? c->sheaf[0] / slow : 0, 2);
  for (int k = 0; k < 3; k++) {
    exb_fmt_num(f[4 + k], c->dynet[k], 1);
    if (c->dynet[k] > 0)
      exb_json_rec("\"system\": \"dynet-ab%d\", \"policy\": null, \"model\": \"%s\", "
                   "\"hidden\": %d, \"batch\": %d, \"threads\": %d, \"%ss_per_s\": %.2f",
                   k, model, (int)net->hidden, B, T, p->unit, c->dynet[k]);
  }
  double dbest = exb_dynet_best(c, NULL);
  exb_fmt_num(f[7], dbest > 0 ? c->sheaf[0] / dbest : 0, 2);
  return true;
}

double exb_table(const exb_opts *o, const exb_env *e, const sh_net *net, const exb_peer *p,
                 const char *weights, int T, const sh_net_outputs *ref, exb_cell *cells,
                 double flops_per_instance, double ceiling) {
  if (T > 1)
    printf("  (%d threads: Sheaf as sheaf_runner's parallel auto: whole batches in parallel, a "
           "graph per thread, when there are at least 2 batches per thread, else one batch at a "
           "time with its kernels split; PyTorch: the best of %d intra-op threads and %d "
           "one-thread processes at once)\n",
           T, T, T);
  double check = e->torch ? exb_peers(o, e, p, weights, T, ref, cells) : 0;
  if (T == 1) { /* DyNet runs on one thread */
    double d = exb_dynet(o, e, p, weights, NULL, o->batch, o->nb, ref, cells);
    check = fmax(check, d);
  }
  /* the peer's systems by their short names: "pytorch-level" -> "level" */
  const char *s0 = strchr(p->sys[0], '-') ? strchr(p->sys[0], '-') + 1 : p->sys[0];
  const char *s1 = strchr(p->sys[1], '-') ? strchr(p->sys[1], '-') + 1 : p->sys[1];
  char h[4][24];
  snprintf(h[0], sizeof h[0], "pt-%s", s0);
  snprintf(h[1], sizeof h[1], "pt-%s", s1);
  snprintf(h[2], sizeof h[2], "vs %s", s1);
  snprintf(h[3], sizeof h[3], "vs %s", s0);
  printf("  %5s | %9s %9s %9s %9s | %9s %9s | %9s %9s | %9s %9s %9s %8s | %7s %7s\n", "batch",
         "sheaf", "none", "depth", "agenda", h[0], h[1], h[2], h[3], "dynet-ab0", "dynet-ab1",
         "dynet-ab2", "vs dynet", "GFLOP/s", "of ceil");
  for (int bi = 0; bi < o->nb; bi++) {
    exb_cell *c = &cells[bi];
    char f[8][16];
    if (!exb_row(e, net, p, T, o->batch[bi], c, &cells[0], f)) return -1;
    c->useful_gflops = c->sheaf[0] * flops_per_instance * 1e-9;
    printf("  %5d | %9.1f %9.1f %9.1f %9.1f | %9s %9s | %9s %9s | %9s %9s %9s %8s | %7.1f %6.1f%%\n",
           o->batch[bi], c->sheaf[0], c->sheaf[1], c->sheaf[2], c->sheaf[3], f[0], f[1], f[2],
           f[3], f[4], f[5], f[6], f[7], c->useful_gflops, 100 * c->useful_gflops / ceiling);
    fflush(stdout);
  }
  return check;
}

bool exb_overhead(const exb_env *e, sh_net_kind kind, const char *unit) {
  printf("\nruntime overhead at hidden 8, embed 8, batch 64, 1 thread, %d %s "
         "(ns per graph op: one builder call, views included)\n",
         (int)e->n, sh_net_instance_noun(kind));
  char rate_col[16], per_col[16];
  snprintf(rate_col, sizeof rate_col, "%ss/s", unit);
  snprintf(per_col, sizeof per_col, "ops/%s", unit);
  printf("  %-8s %10s %12s %12s %12s %12s\n", "policy", rate_col, per_col, "build ns/op",
         "sched ns/op", "wall ns/op");
  sh_net tiny;
  if (sh_net_create(e->ctx, kind, &e->d, 8, 8, &tiny) != SHEAF_OK) return false;
  for (int p = 0; p < 4; p++) {
    sheaf_graph_stats s;
    long passes = 0;
    double r = exb_sheaf_rate(&tiny, exb_policies[p], 1, 64, e->n, e->min_s, e->rounds, &s, &passes);
    if (r <= 0) {
      sh_net_free(&tiny);
      return false;
    }
    double ops = (double)s.nodes, per = ops / ((double)passes * e->n);
    printf("  %-8s %10.1f %12.1f %12.1f %12.1f %12.1f\n", sheaf_policy_name(exb_policies[p]), r,
           per, (double)s.ns_build / ops, (double)s.ns_schedule / ops, 1e9 / r / per);
    exb_json_rec("\"system\": \"sheaf-overhead\", \"policy\": \"%s\", \"model\": \"%s\", "
                 "\"hidden\": 8, \"batch\": 64, \"threads\": 1, \"%ss_per_s\": %.2f, "
                 "\"build_ns_per_op\": %.2f, \"schedule_ns_per_op\": %.2f",
                 sheaf_policy_name(exb_policies[p]), sh_net_kind_name(kind), unit, r,
                 (double)s.ns_build / ops, (double)s.ns_schedule / ops);
  }
  sh_net_free(&tiny);
  return true;
}

void exb_list_str(const int *v, int n, char *out, size_t cap) {
  out[0] = '\0';
  for (int i = 0; i < n; i++)
    snprintf(out + strlen(out), cap - strlen(out), "%s%d", i ? "," : "", v[i]);
}

void exb_fmt_num(char out[16], double v, int decimals) {
  if (v > 0) snprintf(out, 16, "%.*f", decimals, v);
  else snprintf(out, 16, "-");
}

void exb_json_ceiling(const char *model, int hidden, int threads, int64_t m, int64_t n, int64_t k,
                      double gflops) {
  exb_json_rec("\"system\": \"gemm-ceiling\", \"model\": \"%s\", \"hidden\": %d, "
               "\"threads\": %d, \"m\": %lld, \"n\": %lld, \"k\": %lld, \"gflops\": %.2f",
               model, hidden, threads, (long long)m, (long long)n, (long long)k, gflops);
}

sh_gemm_args exb_gemm_plain(const float *A, int64_t m, int64_t k, const sh_gemm_packed_b *b, float *C,
                            int64_t n, sh_gemm_ws *ws) {
  sh_gemm_args ga;
  memset(&ga, 0, sizeof ga);
  ga.m = m, ga.n_src = 1, ga.src[0].k = k, ga.src[0].in.base = A, ga.src[0].in.ld = k;
  ga.b_packed = b, ga.c.base = C, ga.c.ld = n, ga.ws = ws;
  return ga;
}

bool exb_write_trees(const sh_dataset *d, int32_t n, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return false;
  const sh_treebank *tb = &d->tb;
  fprintf(f, "trees %d\n", (int)n);
  for (int32_t t = 0; t < n; t++) {
    int32_t first = tb->tree_first[t], size = tb->tree_size[t];
    fprintf(f, "%d", (int)size);
    for (int32_t v = first; v < first + size; v++) {
      if (tb->n_children[v] == 0)
        fprintf(f, " %d -1 -1", (int)sh_word_id(d->ids, tb->word[v]));
      else
        fprintf(f, " -1 %d %d", (int)(sh_tb_child(tb, v, 0) - first), (int)(sh_tb_child(tb, v, 1) - first));
    }
    fputc('\n', f);
  }
  return fclose(f) == 0;
}
