/*
 * bench_codegen_rowblock.c — the default schedule's row-block fusion
 * (src/codegen/sched_rowblock.c) measured by its knob: the same kernel
 * compiled with sh_sched_opts.row_block = -1 (not fused: the GEMM whole,
 * then the row nest over its N x F product), 12 (the default), 24, 48 and
 * 96 rows per block, and the generated GEMM alone (`mm`) for scale; one
 * thread, thread CPU time per call, best of rounds that alternate the
 * variants; outputs compared with the unfused variant's.
 *   log-softmax    out = log_softmax(x·W + b)
 *   cross-entropy  loss(n) = logsumexp_f(x·W + b)(n) - (x·W + b)(n, lab(n))
 *
 *   build/release/bench/bench_codegen_rowblock [--rounds R] [--only lsm|xent]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "codegen/kernel_api.h"
#include "codegen/lir_sched.h"

static const char LSM[] = "kernel lsm(x: f32[N, D], W: f32[D, F], b: f32[F]) -> f32[N, F] {\n"
                          "  y(n, f) +=! x(n, d) * W(d, f)\n  z(n, f) = y(n, f) + b(f)\n"
                          "  m(n) max=! z(n, f)\n  s(n) +=! exp(z(n, f) - m(n))\n"
                          "  out(n, f) = z(n, f) - m(n) - log(s(n))\n}\n";
static const char XENT[] = "kernel xent(x: f32[N, D], W: f32[D, F], b: f32[F], lab: f32[N]) -> f32[N] {\n"
                           "  y(n, f) +=! x(n, d) * W(d, f)\n  z(n, f) = y(n, f) + b(f)\n"
                           "  m(n) max=! z(n, f)\n  s(n) +=! exp(z(n, f) - m(n))\n"
                           "  p(n) +=! where(float(f) == lab(n), z(n, f), 0)\n"
                           "  out(n) = m(n) + log(s(n)) - p(n)\n}\n";
static const char MM[] = "kernel mm(A: f32[M, K], B: f32[K, N]) -> f32[M, N] { C(m, n) +=! A(m, k) * B(k, n) }\n";

enum { NV = 5 };
static const int ROW_BLOCK[NV] = {-1, 12, 24, 48, 96};

static int fail(sheaf_ctx *ctx, const char *what) {
  fprintf(stderr, "bench_codegen_rowblock: %s: %s\n", what, sheaf_ctx_last_error(ctx));
  return 1;
}

int main(int argc, char **argv) {
  int rounds = 9, only = -1;
  for (int i = 1; i + 1 < argc; i++) {
    if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--only")) only = !strcmp(argv[i + 1], "lsm") ? 0 : !strcmp(argv[i + 1], "xent") ? 1 : 2;
  }
  if (rounds < 1 || rounds > 1000 || only == 2) {
    fprintf(stderr, "usage: bench_codegen_rowblock [--rounds 1..1000] [--only lsm|xent]\n");
    return 2;
  }
  sheaf_ctx *ctx;
  if (sheaf_ctx_create(&(sheaf_ctx_options){.threads = 1}, &ctx, NULL, 0) != SHEAF_OK) return 1;
  char dir[] = "/tmp/sheaf-bench-rowblock-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  printf("# isa %s, 1 thread, thread CPU time per call (ms), best of %d alternating rounds\n",
         sheaf_isa_name(sheaf_cpu_isa()), rounds);
  printf("%-5s %5s %5s %5s", "op", "N", "D", "F");
  for (int v = 0; v < NV; v++) printf("   rb %3d", ROW_BLOCK[v]);
  printf(" %9s %8s\n", "gemm", "-1/12");
  static const int64_t shapes[][3] = {{64, 64, 256}, {64, 256, 1024}, {1600, 64, 256}, {1600, 256, 1024}};
  sh_kernel_opts mo = {.cache_dir = dir};
  sheaf_kernel *km;
  if (sh_kernel_compile_opts(ctx, MM, strlen(MM), NULL, &mo, &km)) return fail(ctx, "compiling mm");
  uint64_t seed = 3, ver = 0;
  int rc = 0;
  for (int op = 0; op < 2 && !rc; op++) {
    if (only >= 0 && op != only) continue;
    const char *src = op ? XENT : LSM;
    sheaf_kernel *k[NV] = {NULL};
    sh_sched_opts so[NV];
    for (int v = 0; v < NV; v++) {
      memset(&so[v], 0, sizeof so[v]);
      so[v].row_block = ROW_BLOCK[v];
      sh_kernel_opts ko = {.cache_dir = dir, .sched = &so[v]};
      if (sh_kernel_compile_opts(ctx, src, strlen(src), NULL, &ko, &k[v])) return fail(ctx, "compiling");
    }
    for (size_t si = 0; si < SH_ARRAY_LEN(shapes) && !rc; si++) {
      int64_t N = shapes[si][0], D = shapes[si][1], F = shapes[si][2], osz = op ? N : N * F;
      float *x = exb_frand_xs(N * D, &seed), *W = exb_frand_xs(D * F, &seed), *b = exb_frand_xs(F, &seed);
      float *lab = malloc(sizeof(float) * (size_t)N), *o = malloc(sizeof(float) * (size_t)(N * F)),
            *ref = malloc(sizeof(float) * (size_t)(N * F));
      for (int64_t n = 0; n < N; n++) lab[n] = (float)((n * 7919 + 13) % F);
      int64_t sx[] = {N, D}, sw[] = {D, F}, sb[] = {F}, sl[] = {N};
      sheaf_kernel_arg a[5] = {{SHEAF_KERNEL_F32, x, (size_t)(N * D), 2, sx},
                               {SHEAF_KERNEL_F32, W, (size_t)(D * F), 2, sw},
                               {SHEAF_KERNEL_F32, b, (size_t)F, 1, sb}};
      int na = 3;
      if (op) a[na++] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, lab, (size_t)N, 1, sl};
      a[na++] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, o, (size_t)osz, 0, NULL};
      sheaf_kernel_arg am[3] = {a[0], a[1], {SHEAF_KERNEL_F32, o, (size_t)(N * F), 0, NULL}};
      ver++;
      for (int v = 0; v < NV; v++) sheaf_kernel_set_weight_version(k[v], 1, ver);
      sheaf_kernel_set_weight_version(km, 1, ver);
      int reps = (int)(1e8 / (2.0 * (double)N * (double)D * (double)F)) + 1;
      double best[NV + 1];
      for (int v = 0; v <= NV; v++) best[v] = 1e30;
      if (sheaf_kernel_run(k[0], a, na)) rc = fail(ctx, "run");
      memcpy(ref, o, sizeof(float) * (size_t)osz);
      for (int r = 0; r < rounds && !rc; r++)
        for (int v = 0; v <= NV && !rc; v++) {
          double t0 = exb_now_s(true);
          for (int i = 0; i < reps && !rc; i++)
            if (v < NV ? sheaf_kernel_run(k[v], a, na) : sheaf_kernel_run(km, am, 3)) rc = fail(ctx, "run");
          double t = (exb_now_s(true) - t0) / reps;
          if (t < best[v]) best[v] = t;
          if (v == NV) continue;
          for (int64_t q = 0; q < osz && !rc; q++)
            if (!(fabs((double)o[q] - ref[q]) <= 1e-4 * fmax(1.0, fabs((double)ref[q])))) {
              fprintf(stderr, "bench_codegen_rowblock: row_block %d differs at %lld\n", ROW_BLOCK[v], (long long)q);
              rc = 1;
            }
        }
      if (!rc) {
        printf("%-5s %5lld %5lld %5lld", op ? "xent" : "lsm", (long long)N, (long long)D, (long long)F);
        for (int v = 0; v < NV; v++) printf(" %8.4f", best[v] * 1e3);
        printf(" %9.4f %7.2fx\n", best[NV] * 1e3, best[0] / best[1]);
      }
      free(x), free(W), free(b), free(lab), free(o), free(ref);
    }
    for (int v = 0; v < NV; v++) sheaf_kernel_free(k[v]);
  }
  sheaf_kernel_free(km);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "bench_codegen_rowblock: could not remove %s\n", dir);
  sheaf_ctx_free(ctx);
  return rc;
}
