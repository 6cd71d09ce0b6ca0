/*
 * bench_codegen_prefetch_fused.c — the fused kernels of
 * bench_codegen_fused (FFN + GELU, the gated unit, log-softmax after a
 * GEMM) through the kernel API with the B prefetch off (no_prefetch)
 * against a distance (0: the default schedule's), weights packed once;
 * one thread, thread CPU time, alternating rounds, the ratio the median
 * over rounds of t(off) / t(on) of the same round. docs/CODEGEN.md, "The
 * default schedule". PF_REM=1: instead the remainder row tile's before /
 * after (rem_rows -1 against the default, both at the distance DIST).
 *
 *   bench_codegen_prefetch_fused [ROUNDS [DIST]]     (default 9, 0)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "codegen/kernel_api.h"
#include "codegen/lir_sched.h"

static const char *SRC[] = {
    "kernel ffn(x: f32[N, D], W: f32[D, F], b: f32[F]) -> f32[N, F] {\n"
    "  y(n, f) +=! x(n, d) * W(d, f)\n  out(n, f) = gelu(y(n, f) + b(f))\n}\n",
    "kernel gated(x: f32[N, D], Wg: f32[D, F], Wh: f32[D, F]) -> f32[N, F] {\n"
    "  g(n, f) +=! x(n, d) * Wg(d, f); h(n, f) +=! x(n, d) * Wh(d, f)\n"
    "  out(n, f) = sigmoid(g(n, f)) * tanh(h(n, f))\n}\n",
    "kernel lsm(x: f32[N, D], W: f32[D, F], b: f32[F]) -> f32[N, F] {\n"
    "  y(n, f) +=! x(n, d) * W(d, f)\n  z(n, f) = y(n, f) + b(f)\n"
    "  m(n) max=! z(n, f)\n  s(n) +=! exp(z(n, f) - m(n))\n"
    "  out(n, f) = z(n, f) - m(n) - log(s(n))\n}\n"};
static const char *NAMES[] = {"ffn", "gated", "lsm"};

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 9;
  if (rounds < 1 || rounds > 64) rounds = 9;
  int pf = argc > 2 ? atoi(argv[2]) : 0;
  sheaf_ctx *ctx;
  if (sheaf_ctx_create(&(sheaf_ctx_options){.threads = 1}, &ctx, NULL, 0) != SHEAF_OK) return 1;
  char dir[] = "/tmp/sheaf-bench-pff-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  sh_sched_opts off = {.no_prefetch = 1}, on = {.prefetch = pf};
  if (getenv("PF_REM")) off = (sh_sched_opts){.prefetch = pf, .rem_rows = -1};
  sheaf_kernel *k[3][2];
  for (int o = 0; o < 3; o++)
    for (int v = 0; v < 2; v++) {
      sh_kernel_opts ko = {.isa_set = true, .isa = sheaf_cpu_isa(), .cache_dir = dir, .sched = v ? &on : &off};
      if (sh_kernel_compile_opts(ctx, SRC[o], strlen(SRC[o]), NULL, &ko, &k[o][v])) {
        fprintf(stderr, "%s\n", sheaf_ctx_last_error(ctx));
        return 1;
      }
    }
  static const int64_t shapes[][3] = {{64, 256, 1024}, {1600, 256, 1024}, {64, 64, 256}, {64, 128, 512}, {64, 512, 2048}};
  uint64_t seed = 7, ver = 0;
  printf("# paired %d rounds; ratio = median t(off)/t(pf %d)\n", rounds, pf);
  for (int o = 0; o < 3; o++)
    for (int s = 0; s < 5; s++) {
      int64_t N = shapes[s][0], D = shapes[s][1], F = shapes[s][2], sx[] = {N, D}, sw[] = {D, F}, sb[] = {F};
      float *x = exb_frand_xs(N * D, &seed), *W = exb_frand_xs(D * F, &seed), *W2 = exb_frand_xs(D * F, &seed),
            *b = exb_frand_xs(F, &seed);
      float *out[2] = {malloc(sizeof(float) * (size_t)(N * F)), malloc(sizeof(float) * (size_t)(N * F))};
      ver++;
      for (int v = 0; v < 2; v++) {
        sheaf_kernel_set_weight_version(k[o][v], 1, ver);
        if (o == 1) sheaf_kernel_set_weight_version(k[o][v], 2, ver);
      }
      double flops = 2.0 * N * D * F * (o == 1 ? 2 : 1), t[64][2], best[2] = {1e30, 1e30};
      int reps = (int)(1e8 / flops) + 1;
      for (int r = 0; r < rounds; r++)
        for (int q = 0; q < 2; q++) {
          int v = (q + r) % 2;
          sheaf_kernel_arg a[] = {{SHEAF_KERNEL_F32, x, (size_t)(N * D), 2, sx},
                                  {SHEAF_KERNEL_F32, W, (size_t)(D * F), 2, sw},
                                  {SHEAF_KERNEL_F32, o == 1 ? (void *)W2 : (void *)b, o == 1 ? (size_t)(D * F) : (size_t)F,
                                   o == 1 ? 2 : 1, o == 1 ? sw : sb},
                                  {SHEAF_KERNEL_F32, out[v], (size_t)(N * F), 0, NULL}};
          if (sheaf_kernel_run(k[o][v], a, 4)) {
            fprintf(stderr, "%s\n", sheaf_ctx_last_error(ctx));
            return 1;
          }
          double t0 = exb_now_s(true);
          for (int i = 0; i < reps; i++) sheaf_kernel_run(k[o][v], a, 4);
          t[r][v] = (exb_now_s(true) - t0) / reps;
          if (t[r][v] < best[v]) best[v] = t[r][v];
        }
      double rr[64], maxd = 0;
      for (int r = 0; r < rounds; r++) rr[r] = t[r][0] / t[r][1];
      exb_sort_f64(rr, (size_t)rounds);
      for (int64_t i = 0; i < N * F; i++) {
        double d = out[0][i] - out[1][i];
        if (d < 0) d = -d;
        if (d > maxd) maxd = d;
      }
      printf("%-6s %5lld %4lld %5lld  off %.3f ms  pf %.3f ms  x%.3f%s\n", NAMES[o], (long long)N, (long long)D,
             (long long)F, best[0] * 1e3, best[1] * 1e3, rr[rounds / 2], maxd > 1e-4 ? " DIFFER" : "");
      fflush(stdout);
      free(x), free(W), free(W2), free(b), free(out[0]), free(out[1]);
    }
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  sheaf_ctx_free(ctx);
  return 0;
}
