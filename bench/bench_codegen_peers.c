/*
 * bench_codegen_peers.c — Sheaf's generated kernels (the `kernel` notation
 * through sheaf_kernel_compile, default schedule) and its hand kernels next
 * to TVM and Halide on the shapes of bench_codegen, in one run: GEMM (M = 64
 * and 1600; K, N = 256, 1280 and 512, 2048), softmax and layernorm rows
 * (64 × 768). Sheaf is timed here; the peers by bench/codegen_tvm.py and
 * bench/codegen_halide.py, run right after (their "peer ..." lines are
 * parsed; a peer that is missing or fails is named, never shown as 0).
 * Every side: one thread, thread CPU time, best of rounds. Ratios are
 * peer time / Sheaf generated time (above 1: Sheaf is faster).
 *
 *   make bench-codegen-peers [BENCH_ARGS=--quick]
 *   bench_codegen_peers [--quick] [--python PY]   (default: build/peers/venv/bin/python,
 *                                                  else python3; PEERS_PYTHON overrides)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "codegen/kernel_api.h"
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

enum { N_JOBS = 6, N_PEERS = 2 };
static const char *const PEERS[N_PEERS] = {"tvm", "halide"};

typedef struct job {
  const char *op;
  int64_t M, K, N;
  double gen, hand;              /* seconds per call */
  double peer[N_PEERS];          /* 0: no number */
  char peer_note[N_PEERS][160];  /* the schedule, or why there is no number */
} job;

static job JOBS[N_JOBS] = {
    {.op = "gemm", .M = 64, .K = 256, .N = 1280},   {.op = "gemm", .M = 64, .K = 512, .N = 2048},
    {.op = "gemm", .M = 1600, .K = 256, .N = 1280}, {.op = "gemm", .M = 1600, .K = 512, .N = 2048},
    {.op = "softmax", .M = 64, .K = 0, .N = 768},   {.op = "layernorm", .M = 64, .K = 0, .N = 768}};

static sheaf_kernel *build(sheaf_ctx *ctx, const char *src, const char *dir) {
  sh_kernel_opts o = {.cache_dir = dir};
  sheaf_kernel *k = NULL;
  if (sh_kernel_compile_opts(ctx, src, strlen(src), NULL, &o, &k)) {
    fprintf(stderr, "bench_codegen_peers: %s\n", sheaf_ctx_last_error(ctx));
    exit(1);
  }
  return k;
}

/* Best seconds per call of the two sides, alternating rounds. */
#define TIME2(rounds, reps, A, B, ta, tb)                    \
  do {                                                       \
    ta = tb = 1e30;                                          \
    for (int r_ = 0; r_ < (rounds); r_++) {                  \
      double t0_ = exb_now_s(true);                          \
      for (int i_ = 0; i_ < (reps); i_++) A;                 \
      double t1_ = exb_now_s(true);                          \
      for (int i_ = 0; i_ < (reps); i_++) B;                 \
      double t2_ = exb_now_s(true);                          \
      ta = fmin(ta, (t1_ - t0_) / (reps));                   \
      tb = fmin(tb, (t2_ - t1_) / (reps));                   \
    }                                                        \
  } while (0)

static void time_sheaf(sheaf_ctx *ctx, const char *dir, int rounds) {
  sheaf_isa isa = sheaf_cpu_isa();
  sheaf_kernel *kmm = build(ctx, MM, dir), *ksm = build(ctx, SM, dir), *kln = build(ctx, LN, dir);
  sh_gemm_ws *ws;
  if (sh_gemm_ws_create(ctx, &ws)) exit(1);
  uint64_t seed = 42;
  for (int j = 0; j < N_JOBS; j++) {
    job *b = &JOBS[j];
    int64_t M = b->M, K = b->K, N = b->N;
    if (!strcmp(b->op, "gemm")) {
      float *A = exb_frand_xs(M * K, &seed), *B = exb_frand_xs(K * N, &seed);
      float *C = malloc(sizeof(float) * (size_t)(M * N)), *Ch = malloc(sizeof(float) * (size_t)(M * N));
      sh_gemm_packed_b *pb;
      if (sh_gemm_pack_b(ctx, B, N, K, N, 0, &pb)) exit(1);
      sh_gemm_args ga = exb_gemm_plain(A, M, K, pb, Ch, N, ws);
      int64_t sa[] = {M, K}, sb[] = {K, N};
      sheaf_kernel_arg args[] = {{SHEAF_KERNEL_F32, A, (size_t)(M * K), 2, sa},
                                 {SHEAF_KERNEL_F32, B, (size_t)(K * N), 2, sb},
                                 {SHEAF_KERNEL_F32, C, (size_t)(M * N), 0, NULL}};
      int reps = (int)(1e8 / (2.0 * (double)(M * N * K))) + 1;
      /* B is a weight: packed once per version (first run, outside the timing: sh_gemm_pack_b above) */
      sheaf_kernel_set_weight_version(kmm, 1, (uint64_t)j + 1);
      sheaf_kernel_run(kmm, args, 3);
      TIME2(rounds, reps, sheaf_kernel_run(kmm, args, 3), sh_gemm(ctx, isa, 1, &ga), b->gen, b->hand);
      sh_gemm_packed_b_free(ctx, pb);
      free(A), free(B), free(C), free(Ch);
    } else {
      bool ln = !strcmp(b->op, "layernorm");
      float *x = exb_frand_xs(M * N, &seed), *g = exb_frand_xs(N, &seed), *be = exb_frand_xs(N, &seed);
      float *y = malloc(sizeof(float) * (size_t)(M * N)), *yh = malloc(sizeof(float) * (size_t)(M * N));
      sh_gemm_in xin = {.base = x, .ld = N}, none = {0};
      sh_gemm_out yout = {.base = yh, .ld = N};
      int64_t sx[] = {M, N}, sv[] = {N};
      sheaf_kernel_arg asm_[] = {{SHEAF_KERNEL_F32, x, (size_t)(M * N), 2, sx},
                                 {SHEAF_KERNEL_F32, y, (size_t)(M * N), 0, NULL}};
      sheaf_kernel_arg aln[] = {{SHEAF_KERNEL_F32, x, (size_t)(M * N), 2, sx},
                                {SHEAF_KERNEL_F32, g, (size_t)N, 1, sv},
                                {SHEAF_KERNEL_F32, be, (size_t)N, 1, sv},
                                {SHEAF_KERNEL_F32, y, (size_t)(M * N), 0, NULL}};
      if (ln)
        TIME2(rounds, 200, sheaf_kernel_run(kln, aln, 4),
              sh_layernorm_rows(isa, M, N, xin, none, g, be, 1e-5f, yout), b->gen, b->hand);
      else
        TIME2(rounds, 200, sheaf_kernel_run(ksm, asm_, 2), sh_softmax_rows(isa, M, N, 1.0f, xin, yout), b->gen,
              b->hand);
      free(x), free(g), free(be), free(y), free(yh);
    }
  }
  sh_gemm_ws_free(ctx, ws);
  sheaf_kernel_free(kmm), sheaf_kernel_free(ksm), sheaf_kernel_free(kln);
}

/* Runs one peer script and files its lines; the peer's own notes go to
 * stdout indented. A peer that cannot be run is noted on every job. */
static void run_peer(int p, const char *python, bool quick) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "'%s' bench/codegen_%s.py%s 2>&1", python, PEERS[p], quick ? " --quick" : "");
  for (int j = 0; j < N_JOBS; j++) snprintf(JOBS[j].peer_note[p], sizeof JOBS[j].peer_note[p], "no result");
  fflush(stdout);
  FILE *f = popen(cmd, "r");
  if (!f) {
    for (int j = 0; j < N_JOBS; j++) snprintf(JOBS[j].peer_note[p], sizeof JOBS[j].peer_note[p], "could not run");
    return;
  }
  char line[2048];
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    char sys[32], op[32];
    long long M, K, N;
    double secs, err;
    int used = 0;
    if (sscanf(line, "peer %31s %31s %lld %lld %lld %lf %lf %n", sys, op, &M, &K, &N, &secs, &err, &used) == 7) {
      for (int j = 0; j < N_JOBS; j++)
        if (!strcmp(JOBS[j].op, op) && JOBS[j].M == M && JOBS[j].K == K && JOBS[j].N == N) {
          JOBS[j].peer[p] = err < 1e-3 ? secs : 0;
          snprintf(JOBS[j].peer_note[p], sizeof JOBS[j].peer_note[p], "%s%s", line + used,
                   err < 1e-3 ? "" : " (wrong results: ignored)");
        }
    } else if (!strncmp(line, "peer-missing ", 13) || !strncmp(line, "peer-failed ", 12)) {
      bool miss = line[5] == 'm';
      printf("  %s\n", line);
      for (int j = 0; j < N_JOBS; j++)
        if (miss || strstr(line, JOBS[j].op))
          snprintf(JOBS[j].peer_note[p], sizeof JOBS[j].peer_note[p], "%s", miss ? "not installed" : "failed");
    } else if (line[0] == '#' || line[0]) {
      if (!strstr(line, "mcpu=native")) printf("  %s\n", line);
    }
  }
  int st = pclose(f);
  if (st != 0) printf("  %s exited with status %d\n", PEERS[p], st);
}

int main(int argc, char **argv) {
  bool quick = false;
  const char *python = getenv("PEERS_PYTHON");
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = true;
    else if (!strcmp(argv[i], "--python") && i + 1 < argc) python = argv[++i];
    else {
      fprintf(stderr, "usage: bench_codegen_peers [--quick] [--python PY]\n");
      return 2;
    }
  }
  if (!python || !*python) python = access("build/peers/venv/bin/python", X_OK) == 0 ? "build/peers/venv/bin/python" : "python3";
  if (access("bench/codegen_tvm.py", R_OK) != 0) {
    fprintf(stderr, "bench_codegen_peers: run from the repository root (bench/codegen_tvm.py not found)\n");
    return 1;
  }
  sheaf_ctx *ctx;
  if (sheaf_ctx_create(&(sheaf_ctx_options){.threads = 1}, &ctx, NULL, 0) != SHEAF_OK) return 1;
  char dir[] = "/tmp/sheaf-bench-peers-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  printf("# Sheaf (isa %s) vs TVM and Halide: 1 thread, thread CPU time, best of rounds; peers via %s\n",
         sheaf_isa_name(sheaf_cpu_isa()), python);
  time_sheaf(ctx, dir, quick ? 3 : 7);
  for (int p = 0; p < N_PEERS; p++) run_peer(p, python, quick);
  printf("\n%-9s %5s %5s %5s %10s %10s %10s %10s %9s %9s\n", "kernel", "M", "K", "N", "gen ms", "hand ms",
         "tvm ms", "halide ms", "tvm/gen", "hal/gen");
  for (int j = 0; j < N_JOBS; j++) {
    job *b = &JOBS[j];
    char cols[N_PEERS][2][24];
    for (int p = 0; p < N_PEERS; p++) {
      if (b->peer[p] > 0) {
        snprintf(cols[p][0], sizeof cols[p][0], "%.4f", b->peer[p] * 1e3);
        snprintf(cols[p][1], sizeof cols[p][1], "%.2f", b->peer[p] / b->gen);
      } else {
        snprintf(cols[p][0], sizeof cols[p][0], "%s", "-");
        snprintf(cols[p][1], sizeof cols[p][1], "%s", "-");
      }
    }
    printf("%-9s %5lld %5lld %5lld %10.4f %10.4f %10s %10s %9s %9s\n", b->op, (long long)b->M, (long long)b->K,
           (long long)b->N, b->gen * 1e3, b->hand * 1e3, cols[0][0], cols[1][0], cols[0][1], cols[1][1]);
  }
  printf("\nschedules / notes:\n");
  for (int j = 0; j < N_JOBS; j++)
    for (int p = 0; p < N_PEERS; p++)
      printf("  %-9s %5lld %5lld %5lld %-7s %s\n", JOBS[j].op, (long long)JOBS[j].M, (long long)JOBS[j].K,
             (long long)JOBS[j].N, PEERS[p], JOBS[j].peer_note[p]);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "bench_codegen_peers: could not remove %s\n", dir);
  sheaf_ctx_free(ctx);
  return 0;
}
