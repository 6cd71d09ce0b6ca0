/*
 * bench_codegen_peers.c — Sheaf's generated kernels (the `kernel` notation
 * through sheaf_kernel_compile, with the default schedule and with the
 * schedule the tuner finds for the shape's class) and its hand kernels next
 * to TVM and Halide on the shapes of bench_codegen: GEMM (M = 64 and 1600;
 * K, N = 256, 1280 and 512, 2048), softmax and layernorm rows (64 × 768).
 *
 * Paired: each peer runs in its own Python process (bench/codegen_tvm.py,
 * bench/codegen_halide.py with --serve; protocol in bench/codegen_serve.py)
 * driven over pipes, which builds its kernels once and then times REPS
 * calls on request; each round times every side once on the same shape,
 * in turn (default, tuned, hand, then TVM and Halide), so load swings on
 * this shared machine land on all sides alike (which side goes first
 * rotates from round to round; each sample starts with one untimed call).
 * Reported: min and median per side, and the peer / Sheaf ratios as the
 * median of the per-round ratios
 * (above 1: Sheaf is faster). Every side: one thread, thread CPU time;
 * every output checked against a double-precision reference after the
 * rounds (a mismatch fails the bench). A peer that is missing or fails is
 * named, never shown as 0.
 *
 *   make bench-codegen-peers [BENCH_ARGS='--quick']
 *   bench_codegen_peers [--quick] [--python PY] [--rounds R] [--budget S] [--records FILE]
 *
 * --python: default build/peers/venv/bin/python, else python3 (PEERS_PYTHON
 * overrides); --budget: the tuner's seconds per GEMM shape (default 20,
 * --quick 6; its JIT cache is a temporary directory); --records: tuning
 * records (sheaf tune --out) used instead of tuning.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "codegen/kernel_api.h"
#include "codegen/tune.h"
#include "kernels/gemm.h"
#include "kernels/rows.h"

static const char MM[] = "kernel mm(A: f32[M, K], B: f32[K, N]) -> f32[M, N] { C(m, n) +=! A(m, k) * B(k, n) }\n";
static const char SM[] = "kernel sm(x: f32[N, C]) -> f32[N, C] {\n"
                         "  m(n) max=! x(n, c)\n  e(n, c) = exp(x(n, c) - m(n))\n"
                         "  s(n) +=! e(n, c)\n  out(n, c) = e(n, c) / s(n)\n}\n";
static const char LN[] = "kernel ln(x: f32[N, D], g: f32[D], b: f32[D]) -> f32[N, D] {\n"
                         "  mu(n) +=! x(n, d) / D\n  c(n, d) = x(n, d) - mu(n)\n"
                         "  var(n) +=! c(n, d) * c(n, d) / D\n"
                         "  out(n, d) = c(n, d) * rsqrt(var(n) + 1e-5) * g(d) + b(d)\n}\n";

enum { N_JOBS = 6, N_PEERS = 2, MAX_ROUNDS = 64 };
enum { S_DEF, S_TUN, S_HAND, S_TVM, S_HAL, N_SIDES };
static const char *const SIDE[N_SIDES] = {"default", "tuned", "hand", "tvm", "halide"};

typedef struct peer {
  const char *name;
  pid_t pid;
  FILE *to, *from;
  bool up;        /* serving */
  char why[200];  /* why it is not up */
} peer;

typedef struct job {
  const char *op;
  int64_t M, K, N;
  int n[N_SIDES];                /* samples */
  double t[N_SIDES][MAX_ROUNDS]; /* seconds per call, one per round */
  double err[N_SIDES];           /* max rel error after the rounds (-1: not run) */
  bool ready[N_PEERS];
  char note[N_PEERS][200];       /* the peer's schedule, or why it has no number */
  char tuned[160];               /* the tuned record's knobs */
} job;

static job JOBS[N_JOBS] = {
    {.op = "gemm", .M = 64, .K = 256, .N = 1280},   {.op = "gemm", .M = 64, .K = 512, .N = 2048},
    {.op = "gemm", .M = 1600, .K = 256, .N = 1280}, {.op = "gemm", .M = 1600, .K = 512, .N = 2048},
    {.op = "softmax", .M = 64, .K = 0, .N = 768},   {.op = "layernorm", .M = 64, .K = 0, .N = 768}};
static peer PEERS[N_PEERS] = {{.name = "tvm"}, {.name = "halide"}};

static void die(sheaf_ctx *ctx, const char *what) {
  fprintf(stderr, "bench_codegen_peers: %s: %s\n", what, ctx ? sheaf_ctx_last_error(ctx) : "failed");
  exit(1);
}

static sheaf_kernel *build(sheaf_ctx *ctx, const char *src, const char *dir, bool tuned) {
  sh_kernel_opts o = {.cache_dir = dir, .no_tuning = !tuned};
  sheaf_kernel *k = NULL;
  if (sh_kernel_compile_opts(ctx, src, strlen(src), NULL, &o, &k)) die(ctx, "compile");
  return k;
}

/* ------------------------------------------------------------ the peers */

static void peer_note_all(peer *p, int pi, const char *why) {
  snprintf(p->why, sizeof p->why, "%s", why);
  for (int j = 0; j < N_JOBS; j++)
    if (!JOBS[j].ready[pi]) snprintf(JOBS[j].note[pi], sizeof JOBS[j].note[pi], "%s", why);
}

static job *find_job(const char *op, long long M, long long K, long long N) {
  for (int j = 0; j < N_JOBS; j++)
    if (!strcmp(JOBS[j].op, op) && JOBS[j].M == M && JOBS[j].K == K && JOBS[j].N == N) return &JOBS[j];
  return NULL;
}

/* Starts peer pi's script with --serve and reads its lines up to
 * `serving` (its kernels built and checked). */
static void peer_start(int pi, const char *python, bool quick) {
  peer *p = &PEERS[pi];
  char script[64];
  snprintf(script, sizeof script, "bench/codegen_%s.py", p->name);
  int in[2], out[2];
  if (pipe(in) || pipe(out)) return peer_note_all(p, pi, "could not run (pipe)");
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) return peer_note_all(p, pi, "could not run (fork)");
  if (pid == 0) {
    dup2(in[0], 0), dup2(out[1], 1);
    close(in[0]), close(in[1]), close(out[0]), close(out[1]);
    execlp(python, python, script, "--serve", quick ? "--quick" : (char *)NULL, (char *)NULL);
    printf("peer-missing %s could not run %s\n", p->name, python);
    fflush(stdout);
    _exit(0);
  }
  close(in[0]), close(out[1]);
  p->pid = pid, p->to = fdopen(in[1], "w"), p->from = fdopen(out[0], "r");
  char line[2048];
  peer_note_all(p, pi, "no result (the peer ended before serving)");
  while (fgets(line, sizeof line, p->from)) {
    line[strcspn(line, "\n")] = '\0';
    char sys[32], op[32];
    long long M, K, N;
    double err;
    int used = 0;
    if (!strcmp(line, "serving")) {
      p->up = true;
      return;
    }
    if (sscanf(line, "ready %31s %31s %lld %lld %lld %lf %n", sys, op, &M, &K, &N, &err, &used) == 6) {
      job *b = find_job(op, M, K, N);
      if (b) b->ready[pi] = true, snprintf(b->note[pi], sizeof b->note[pi], "%s", line + used);
    } else if (sscanf(line, "peer-failed %31s %31s %lld %lld %lld %n", sys, op, &M, &K, &N, &used) == 5) {
      job *b = find_job(op, M, K, N);
      printf("  %s\n", line);
      if (b) snprintf(b->note[pi], sizeof b->note[pi], "failed: %s", line + used);
    } else if (!strncmp(line, "peer-missing ", 13)) {
      printf("  %s\n", line);
      peer_note_all(p, pi, "not installed");
    } else if (line[0]) {
      printf("  %s\n", line);
    }
  }
}

/* One request, one reply line; false (and the peer down) when it ended. */
static bool peer_ask(int pi, const char *req, char *reply, size_t cap) {
  peer *p = &PEERS[pi];
  if (!p->up) return false;
  if (fputs(req, p->to) < 0 || fflush(p->to) || !fgets(reply, (int)cap, p->from)) {
    p->up = false;
    peer_note_all(p, pi, "the peer ended while timing");
    return false;
  }
  return true;
}

static void peer_stop(int pi) {
  peer *p = &PEERS[pi];
  if (p->to) fputs("quit\n", p->to), fclose(p->to);
  if (p->from) fclose(p->from);
  if (p->pid > 0) waitpid(p->pid, NULL, 0);
}

/* --------------------------------------------------------- measurement */

static double rel_err(const float *got, const double *ref, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - ref[i]) / fmax(1.0, fabs(ref[i]));
    if (!(d <= m)) m = d; /* NaN wins */
  }
  return m;
}

/* One sample of side s: a call untimed (its data back in cache after the
 * other sides' calls), then reps calls timed. */
#define TIME_SIDE(b, s, reps, CALL)                                          \
  do {                                                                      \
    CALL;                                                                   \
    double t0_ = exb_now_s(true);                                           \
    for (int i_ = 0; i_ < (reps); i_++) CALL;                               \
    (b)->t[s][(b)->n[s]++] = (exb_now_s(true) - t0_) / (reps);              \
  } while (0)

static void time_peers(job *b, int reps) {
  for (int pi = 0; pi < N_PEERS; pi++) {
    if (!b->ready[pi]) continue;
    char req[160], reply[256];
    double t;
    snprintf(req, sizeof req, "time %s %lld %lld %lld %d\n", b->op, (long long)b->M, (long long)b->K,
             (long long)b->N, reps);
    if (!peer_ask(pi, req, reply, sizeof reply)) continue;
    if (sscanf(reply, "t %lf", &t) == 1 && t > 0) b->t[S_TVM + pi][b->n[S_TVM + pi]++] = t;
    else b->ready[pi] = false, snprintf(b->note[pi], sizeof b->note[pi], "bad reply: %.150s", reply);
  }
}

static void check_peers(job *b) {
  for (int pi = 0; pi < N_PEERS; pi++) {
    if (!b->ready[pi]) continue;
    char req[160], reply[256];
    snprintf(req, sizeof req, "check %s %lld %lld %lld\n", b->op, (long long)b->M, (long long)b->K,
             (long long)b->N);
    if (!peer_ask(pi, req, reply, sizeof reply) || sscanf(reply, "err %lf", &b->err[S_TVM + pi]) != 1)
      b->err[S_TVM + pi] = INFINITY;
  }
}

typedef struct sheaf_ks {
  sheaf_kernel *mm_def, *mm_tun, *sm, *ln;
} sheaf_ks;

static void run_job(sheaf_ctx *ctx, sheaf_ks *ks, sh_gemm_ws *ws, job *b, int rounds, uint64_t *seed) {
  sheaf_isa isa = sheaf_cpu_isa();
  int64_t M = b->M, K = b->K, N = b->N;
  for (int s = 0; s < N_SIDES; s++) b->err[s] = -1;
  double *ref = malloc(sizeof(double) * (size_t)(M * N));
  float *out[3];
  for (int s = 0; s < 3; s++) { /* 64-byte aligned, as TVM's and Halide's buffers are */
    out[s] = NULL;
    if (posix_memalign((void **)&out[s], 64, sizeof(float) * (size_t)(M * N))) die(ctx, "out of memory");
    memset(out[s], 0, sizeof(float) * (size_t)(M * N));
  }
  if (!strcmp(b->op, "gemm")) {
    float *A = exb_frand_xs(M * K, seed), *B = exb_frand_xs(K * N, seed);
    for (int64_t i = 0; i < M * N; i++) ref[i] = 0;
    for (int64_t i = 0; i < M; i++)
      for (int64_t k = 0; k < K; k++) {
        double a = A[i * K + k];
        for (int64_t j = 0; j < N; j++) ref[i * N + j] += a * B[k * N + j];
      }
    sh_gemm_packed_b *pb;
    if (sh_gemm_pack_b(ctx, B, N, K, N, 0, &pb)) die(ctx, "pack");
    sh_gemm_args ga = exb_gemm_plain(A, M, K, pb, out[S_HAND], N, ws);
    int64_t sa[] = {M, K}, sb[] = {K, N};
    sheaf_kernel_arg ad[] = {{SHEAF_KERNEL_F32, A, (size_t)(M * K), 2, sa},
                             {SHEAF_KERNEL_F32, B, (size_t)(K * N), 2, sb},
                             {SHEAF_KERNEL_F32, out[S_DEF], (size_t)(M * N), 0, NULL}};
    sheaf_kernel_arg at[3];
    memcpy(at, ad, sizeof at);
    at[2].data = out[S_TUN];
    int reps = (int)(2e8 / (2.0 * (double)(M * N * K))) + 1;
    /* B is a weight: packed once per version (the first runs, outside the timing) */
    sheaf_kernel_set_weight_version(ks->mm_def, 1, (uint64_t)(b - JOBS) + 1);
    sheaf_kernel_set_weight_version(ks->mm_tun, 1, (uint64_t)(b - JOBS) + 1);
    if (sheaf_kernel_run(ks->mm_def, ad, 3) || sheaf_kernel_run(ks->mm_tun, at, 3)) die(ctx, "run");
    for (int r = 0; r < rounds; r++) /* the sides in turn, the first one rotating */
      for (int i = 0; i < 4; i++) switch ((r + i) % 4) {
          case 0: TIME_SIDE(b, S_DEF, reps, sheaf_kernel_run(ks->mm_def, ad, 3)); break;
          case 1: TIME_SIDE(b, S_TUN, reps, sheaf_kernel_run(ks->mm_tun, at, 3)); break;
          case 2: TIME_SIDE(b, S_HAND, reps, sh_gemm(ctx, isa, 1, &ga)); break;
          default: time_peers(b, reps);
        }
    sh_gemm_packed_b_free(ctx, pb);
    free(A), free(B);
  } else {
    bool ln = !strcmp(b->op, "layernorm");
    float *x = exb_frand_xs(M * N, seed), *g = exb_frand_xs(N, seed), *be = exb_frand_xs(N, seed);
    for (int64_t i = 0; i < M; i++) {
      const float *xr = x + i * N;
      double *rr = ref + i * N, a = 0, c = 0;
      if (ln) {
        for (int64_t j = 0; j < N; j++) a += xr[j];
        a /= (double)N;
        for (int64_t j = 0; j < N; j++) c += (xr[j] - a) * (xr[j] - a);
        c = 1 / sqrt(c / (double)N + 1e-5);
        for (int64_t j = 0; j < N; j++) rr[j] = (xr[j] - a) * c * g[j] + be[j];
      } else {
        a = -INFINITY;
        for (int64_t j = 0; j < N; j++) a = fmax(a, xr[j]);
        for (int64_t j = 0; j < N; j++) c += rr[j] = exp(xr[j] - a);
        for (int64_t j = 0; j < N; j++) rr[j] /= c;
      }
    }
    sh_gemm_in xin = {.base = x, .ld = N}, none = {0};
    sh_gemm_out yout = {.base = out[S_HAND], .ld = N};
    int64_t sx[] = {M, N}, sv[] = {N};
    sheaf_kernel_arg asm_[] = {{SHEAF_KERNEL_F32, x, (size_t)(M * N), 2, sx},
                               {SHEAF_KERNEL_F32, out[S_DEF], (size_t)(M * N), 0, NULL}};
    sheaf_kernel_arg aln[] = {{SHEAF_KERNEL_F32, x, (size_t)(M * N), 2, sx},
                              {SHEAF_KERNEL_F32, g, (size_t)N, 1, sv},
                              {SHEAF_KERNEL_F32, be, (size_t)N, 1, sv},
                              {SHEAF_KERNEL_F32, out[S_DEF], (size_t)(M * N), 0, NULL}};
    for (int r = 0; r < rounds; r++)
      for (int i = 0; i < 3; i++) switch ((r + i) % 3) {
          case 0:
            if (ln) TIME_SIDE(b, S_DEF, 200, sheaf_kernel_run(ks->ln, aln, 4));
            else TIME_SIDE(b, S_DEF, 200, sheaf_kernel_run(ks->sm, asm_, 2));
            break;
          case 1:
            if (ln) TIME_SIDE(b, S_HAND, 200, sh_layernorm_rows(isa, M, N, xin, none, g, be, 1e-5f, yout));
            else TIME_SIDE(b, S_HAND, 200, sh_softmax_rows(isa, M, N, 1.0f, xin, yout));
            break;
          default: time_peers(b, 200);
        }
    free(x), free(g), free(be);
  }
  for (int s = 0; s < 3; s++)
    if (b->n[s]) b->err[s] = rel_err(out[s], ref, M * N);
  check_peers(b);
  for (int s = 0; s < 3; s++) free(out[s]);
  free(ref);
}

/* ------------------------------------------------------------- tuning */

/* Tunes each GEMM shape (or loads `records`) into the context; the knobs
 * of each shape's record into its job. */
static void tune(sheaf_ctx *ctx, const char *dir, const char *records, double budget) {
  char path[512];
  snprintf(path, sizeof path, "%s/bench.tune", dir);
  sh_tune_set s;
  sh_tune_set_init(&s, ctx);
  if (records) {
    if (sh_tune_set_load(&s, records, false)) die(ctx, "records");
  } else {
    for (int j = 0; j < N_JOBS; j++) {
      job *b = &JOBS[j];
      if (strcmp(b->op, "gemm")) continue;
      int64_t sz[3] = {b->M, b->K, b->N}; /* M, K, N: declaration order */
      sh_tune_request q = {.source = MM, .len = strlen(MM), .kernel = "mm", .cache_dir = dir, .sizes = sz,
                           .n_sizes = 3, .budget_s = budget};
      sh_tune_rec r;
      double t0 = exb_now_s(false);
      if (sh_tune_kernel(ctx, &q, &r) || sh_tune_set_add(&s, &r)) die(ctx, "tune");
      printf("# tuned gemm %lld %lld %lld in %.1f s\n", (long long)b->M, (long long)b->K, (long long)b->N,
             exb_now_s(false) - t0);
      fflush(stdout);
    }
    if (sh_tune_set_save(&s, path)) die(ctx, "save records");
    records = path;
  }
  if (sheaf_kernel_load_tuning(ctx, records)) die(ctx, "load records");
  for (int j = 0; j < N_JOBS; j++) {
    job *b = &JOBS[j];
    snprintf(b->tuned, sizeof b->tuned, "%s", strcmp(b->op, "gemm") ? "-" : "default kept");
    int64_t sz[3] = {b->M, b->K, b->N};
    for (int i = 0; i < s.n; i++)
      if (!strcmp(s.r[i].kernel, "mm") && sh_tune_matches(&s.r[i], sz, 3) &&
          !strcmp(s.r[i].isa, sheaf_isa_name(sheaf_cpu_isa())) && !sh_tune_opts_is_default(&s.r[i].opts) &&
          !strcmp(b->op, "gemm")) {
        sh_buf d;
        sh_buf_init(&d, ctx);
        int nf;
        const sh_tune_field *f = sh_tune_fields(&nf);
        for (int k = 0; k < nf; k++)
          if (sh_tune_field_get(&s.r[i].opts, &f[k]))
            sh_buf_printf(&d, "%s=%d ", f[k].name, sh_tune_field_get(&s.r[i].opts, &f[k]));
        snprintf(b->tuned, sizeof b->tuned, "%s", sh_buf_cstr(&d));
        sh_buf_free(&d);
      }
  }
  sh_tune_set_free(&s);
}

/* --------------------------------------------------------------- report */

static double median(const double *v, int n) {
  double w[MAX_ROUNDS];
  memcpy(w, v, sizeof(double) * (size_t)n);
  exb_sort_f64(w, (size_t)n);
  return n % 2 ? w[n / 2] : 0.5 * (w[n / 2 - 1] + w[n / 2]);
}

static double minimum(const double *v, int n) {
  double m = INFINITY;
  for (int i = 0; i < n; i++) m = fmin(m, v[i]);
  return m;
}

/* The median over rounds of t[a] / t[b] (0: no pairs). */
static double paired(const job *j, int a, int b) {
  int n = j->n[a] < j->n[b] ? j->n[a] : j->n[b];
  double r[MAX_ROUNDS];
  for (int i = 0; i < n; i++) r[i] = j->t[a][i] / j->t[b][i];
  return n ? median(r, n) : 0;
}

static void cell(char *c, size_t cap, double v) {
  if (v > 0) snprintf(c, cap, "%.2f", v);
  else snprintf(c, cap, "-");
}

int main(int argc, char **argv) {
  bool quick = false;
  int rounds = 0;
  double budget = 0;
  const char *python = getenv("PEERS_PYTHON"), *records = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = true;
    else if (!strcmp(argv[i], "--python") && i + 1 < argc) python = argv[++i];
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--budget") && i + 1 < argc) budget = atof(argv[++i]);
    else if (!strcmp(argv[i], "--records") && i + 1 < argc) records = argv[++i];
    else {
      fprintf(stderr, "usage: bench_codegen_peers [--quick] [--python PY] [--rounds R] [--budget S] "
                      "[--records FILE]\n");
      return 2;
    }
  }
  if (rounds <= 0) rounds = quick ? 3 : 15;
  if (rounds > MAX_ROUNDS) rounds = MAX_ROUNDS;
  if (budget <= 0) budget = quick ? 6 : 20;
  if (!python || !*python)
    python = access("build/peers/venv/bin/python", X_OK) == 0 ? "build/peers/venv/bin/python" : "python3";
  if (access("bench/codegen_tvm.py", R_OK) != 0) {
    fprintf(stderr, "bench_codegen_peers: run from the repository root (bench/codegen_tvm.py not found)\n");
    return 1;
  }
  signal(SIGPIPE, SIG_IGN); /* a peer that dies is noted, not fatal */
  sheaf_ctx *ctx;
  if (sheaf_ctx_create(&(sheaf_ctx_options){.threads = 1}, &ctx, NULL, 0) != SHEAF_OK) return 1;
  char dir[] = "/tmp/sheaf-bench-peers-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  printf("# Sheaf (isa %s) vs TVM and Halide: 1 thread, thread CPU time, %d paired rounds; peers via %s\n",
         sheaf_isa_name(sheaf_cpu_isa()), rounds, python);
  tune(ctx, dir, records, budget);
  sheaf_ks ks = {build(ctx, MM, dir, false), build(ctx, MM, dir, true), build(ctx, SM, dir, false),
                 build(ctx, LN, dir, false)};
  for (int p = 0; p < N_PEERS; p++) peer_start(p, python, quick);
  sh_gemm_ws *ws;
  if (sh_gemm_ws_create(ctx, &ws)) die(ctx, "workspace");
  uint64_t seed = 42;
  for (int j = 0; j < N_JOBS; j++) run_job(ctx, &ks, ws, &JOBS[j], rounds, &seed);
  for (int p = 0; p < N_PEERS; p++) peer_stop(p);
  double loads[3] = {0};
  FILE *la = fopen("/proc/loadavg", "r");
  if (la) {
    if (fscanf(la, "%lf %lf %lf", &loads[0], &loads[1], &loads[2]) != 3) loads[0] = -1;
    fclose(la);
  }

  printf("\nms per call, min / median of %d rounds; ratios: median over rounds of peer / Sheaf (paired)\n",
         rounds);
  printf("%-9s %5s %5s %5s %19s %19s %19s %19s %19s %7s %7s %7s %7s\n", "kernel", "M", "K", "N", "default",
         "tuned", "hand", "tvm", "halide", "tvm/def", "tvm/tun", "hal/def", "hal/tun");
  int bad = 0;
  for (int j = 0; j < N_JOBS; j++) {
    job *b = &JOBS[j];
    char c[N_SIDES][40], r[4][16];
    for (int s = 0; s < N_SIDES; s++) {
      if (b->n[s]) snprintf(c[s], sizeof c[s], "%.4f / %.4f", minimum(b->t[s], b->n[s]) * 1e3,
                            median(b->t[s], b->n[s]) * 1e3);
      else snprintf(c[s], sizeof c[s], "-");
      if (b->err[s] > 1e-3 || isnan(b->err[s])) {
        fprintf(stderr, "bench_codegen_peers: %s %lld %lld %lld: %s's output is wrong (max rel err %.2e)\n",
                b->op, (long long)b->M, (long long)b->K, (long long)b->N, SIDE[s], b->err[s]);
        bad++;
      }
    }
    cell(r[0], sizeof r[0], paired(b, S_TVM, S_DEF));
    cell(r[1], sizeof r[1], paired(b, S_TVM, S_TUN));
    cell(r[2], sizeof r[2], paired(b, S_HAL, S_DEF));
    cell(r[3], sizeof r[3], paired(b, S_HAL, S_TUN));
    printf("%-9s %5lld %5lld %5lld %19s %19s %19s %19s %19s %7s %7s %7s %7s\n", b->op, (long long)b->M,
           (long long)b->K, (long long)b->N, c[S_DEF], c[S_TUN], c[S_HAND], c[S_TVM], c[S_HAL], r[0], r[1], r[2],
           r[3]);
  }
  printf("\nschedules / notes (max rel err of each side against a double reference):\n");
  for (int j = 0; j < N_JOBS; j++) {
    job *b = &JOBS[j];
    printf("  %-9s %5lld %5lld %5lld err", b->op, (long long)b->M, (long long)b->K, (long long)b->N);
    for (int s = 0; s < N_SIDES; s++)
      if (b->err[s] >= 0) printf(" %s %.1e", SIDE[s], b->err[s]);
    printf("; tuned: %s\n", b->tuned);
    for (int p = 0; p < N_PEERS; p++) printf("      %-7s %s\n", PEERS[p].name, b->note[p]);
  }
  printf("# load average at the end: %.2f %.2f %.2f\n", loads[0], loads[1], loads[2]);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "bench_codegen_peers: could not remove %s\n", dir);
  sheaf_kernel_free(ks.mm_def), sheaf_kernel_free(ks.mm_tun), sheaf_kernel_free(ks.sm), sheaf_kernel_free(ks.ln);
  sh_gemm_ws_free(ctx, ws);
  sheaf_ctx_free(ctx);
  return bad ? 1 : 0;
}
