/*
 * test_codegen_beside.c — a GEMM beside a row reduction of another input
 * (the default schedule, sched_default.c; reverse_inline, sched_cache.c):
 * `t(n, i) +=! x0(n, r)·p(r, i)` and a log-softmax of x3 whose result a
 * consumer multiplies with t. The consumer reads the row's max and sum its
 * own nest computes (contracted to registers), so it must not move into the
 * GEMM's tile store (it did: "store to h1: reads a local outside its alloc:
 * t14_s_r" at the scalar level, the linearized mode's random models hit
 * it). Checked against a double reference at scalar and the host's vector
 * level, rows 1, 5, 13 (partial and whole tiles), 1 and 2 threads.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/kernel_api.h"
#include "harness.h"

/* h0 = t ⊙ log_softmax(x3) (one consumer of both); c0 = tanh(t) beside
 * log_softmax(x3) as an output of its own in the second kernel */
static const char PROD[] =
    "kernel prod(x0: f32[N, 32], x3: f32[N, 16], p1: f32[32, 16]) -> (h0: f32[N, 16]) {\n"
    "  t(n, i) +=! x0(n, r) * p1(r, i) where i in 0..16, r in 0..32\n"
    "  t14_m(n) max=! x3(n, i)\n"
    "  t14_s(n) +=! exp(x3(n, i) - t14_m(n))\n"
    "  t14(n, i) = x3(n, i) - t14_m(n) - log(t14_s(n)) where i in 0..16\n"
    "  h0(n, i) = t(n, i) * t14(n, i) where i in 0..16\n}\n";
static const char TWO[] =
    "kernel two(x0: f32[N, 32], x3: f32[N, 16], p1: f32[32, 16]) -> (h0: f32[N, 16], c0: f32[N, 16]) {\n"
    "  t(n, i) +=! x0(n, r) * p1(r, i) where i in 0..16, r in 0..32\n"
    "  c0(n, i) = tanh(t(n, i)) where i in 0..16\n"
    "  t14_m(n) max=! x3(n, i)\n"
    "  t14_s(n) +=! exp(x3(n, i) - t14_m(n))\n"
    "  h0(n, i) = x3(n, i) - t14_m(n) - log(t14_s(n)) where i in 0..16\n}\n";

enum { MAXN = 13, R = 32, I = 16 };

static void ref(const float *x0, const float *x3, const float *p, int64_t N, bool prod, double *h, double *c) {
  for (int64_t n = 0; n < N; n++) {
    double m = -INFINITY, s = 0;
    for (int i = 0; i < I; i++) m = fmax(m, x3[n * I + i]);
    for (int i = 0; i < I; i++) s += exp(x3[n * I + i] - m);
    for (int i = 0; i < I; i++) {
      double t = 0;
      for (int r = 0; r < R; r++) t += (double)x0[n * R + r] * p[r * I + i];
      double ls = x3[n * I + i] - m - log(s);
      h[n * I + i] = prod ? t * ls : ls;
      c[n * I + i] = tanh(t);
    }
  }
}

static void check_kernel(const char *src, const char *name, bool prod, sheaf_isa isa, int threads) {
  sheaf_ctx *ctx;
  REQUIRE(sheaf_ctx_create(&(sheaf_ctx_options){.threads = threads}, &ctx, NULL, 0) == SHEAF_OK);
  sheaf_kernel *k = NULL;
  sh_kernel_opts o = {.isa_set = true, .isa = isa, .eager = true, .cache_dir = th_cache_dir("beside")};
  if (!CHECK_OK(ctx, sh_kernel_compile_opts(ctx, src, strlen(src), name, &o, &k))) {
    printf("  %s at %s\n", name, sheaf_isa_name(isa));
    sheaf_ctx_free(ctx);
    return;
  }
  static float x0[MAXN * R], x3[MAXN * I], p[R * I], h[MAXN * I], c[MAXN * I];
  static double wh[MAXN * I], wc[MAXN * I];
  uint64_t seed = 17;
  for (int q = 0; q < R * I; q++) p[q] = th_frand(&seed);
  static const int64_t Ns[] = {1, 5, 13};
  for (size_t t = 0; t < SH_ARRAY_LEN(Ns); t++) {
    int64_t N = Ns[t];
    for (int64_t q = 0; q < N * R; q++) x0[q] = th_frand(&seed);
    for (int64_t q = 0; q < N * I; q++) x3[q] = 3 * th_frand(&seed);
    for (int64_t q = 0; q < N * I; q++) h[q] = c[q] = NAN;
    int64_t s0[] = {N, R}, s3[] = {N, I}, sp[] = {R, I};
    sheaf_kernel_arg a[] = {{SHEAF_KERNEL_F32, x0, (size_t)(N * R), 2, s0},
                            {SHEAF_KERNEL_F32, x3, (size_t)(N * I), 2, s3},
                            {SHEAF_KERNEL_F32, p, R * I, 2, sp},
                            {SHEAF_KERNEL_F32, h, (size_t)(N * I), 0, NULL},
                            {SHEAF_KERNEL_F32, c, (size_t)(N * I), 0, NULL}};
    if (!CHECK_OK(ctx, sheaf_kernel_run(k, a, prod ? 4 : 5))) break;
    ref(x0, x3, p, N, prod, wh, wc);
    for (int64_t q = 0; q < N * I; q++) {
      bool ok = fabs(h[q] - wh[q]) <= 1e-5 * (1 + fabs(wh[q])) &&
                (prod || fabs(c[q] - wc[q]) <= 1e-5 * (1 + fabs(wc[q])));
      if (!ok) {
        th_fail(__FILE__, __LINE__, "%s at %s, %d threads, N %lld: element %lld: h %g (want %g), c %g (want %g)",
                name, sheaf_isa_name(isa), threads, (long long)N, (long long)q, (double)h[q], wh[q],
                prod ? 0.0 : (double)c[q], prod ? 0.0 : wc[q]);
        break;
      }
    }
  }
  sheaf_kernel_free(k);
  sheaf_ctx_free(ctx);
}

TEST(codegen_gemm_beside_log_softmax) {
  if (!th_have_jit_cc("codegen_gemm_beside_log_softmax")) return;
  sheaf_isa host = sheaf_cpu_isa();
  for (int threads = 1; threads <= 2; threads++)
    for (int v = 0; v < 2; v++) {
      const char *src = v ? TWO : PROD, *name = v ? "two" : "prod";
      check_kernel(src, name, !v, SHEAF_ISA_SCALAR, threads);
      if (host != SHEAF_ISA_SCALAR) check_kernel(src, name, !v, SHEAF_ISA_AVX2, threads);
      if (host == SHEAF_ISA_AVX512) check_kernel(src, name, !v, SHEAF_ISA_AVX512, threads);
    }
}
