/*
 * test_kernel_fewrows.c — the few-rows variants of a GEMM kernel
 * (src/codegen/kernel_fewrows.c, picked per call in kernel_api.c): which
 * knobs each row count gets, that plans and sheaf_kernel_run at 1 and 2
 * rows run the variant and at more rows the kernel itself, and the values
 * at every M from 1 to 3·mr + 1 at odd N, scalar and the host's vector
 * levels, 1 and 2 threads, for a plain GEMM and a GEMM with a pointwise
 * epilogue in its tile (bias + tanh), against a double reference; weight
 * versions changing under a variant (never a stale packed copy).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/kernel_api.h"
#include "harness.h"

static const char MM[] = "kernel mm(A: f32[M, K], B: f32[K, N]) -> f32[M, N] {\n  C(m, n) +=! A(m, k) * B(k, n)\n}\n";
static const char EP[] = "kernel ep(A: f32[M, K], B: f32[K, N], b: f32[N]) -> f32[M, N] {\n"
                         "  C(m, n) +=! A(m, k) * B(k, n)\n  Y(m, n) = tanh(C(m, n) + b(n))\n}\n";

enum { K = 37, MAXM = 19, MAXN = 67 };

static void fill(float *p, int64_t n, uint64_t seed) {
  for (int64_t i = 0; i < n; i++) p[i] = th_frand(&seed);
}

/* Largest error of Y against A·B (then tanh(· + b) when b), relative to
 * the sum of the products' magnitudes. */
static double err_of(const float *A, const float *B, const float *b, const float *Y, int64_t M, int64_t N) {
  double worst = 0;
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double s = 0, a = 0;
      for (int64_t q = 0; q < K; q++) s += (double)A[i * K + q] * B[q * N + j], a += fabs((double)A[i * K + q] * B[q * N + j]);
      if (b) s = tanh(s + b[j]);
      double e = fabs(s - Y[i * N + j]) / (1 + a);
      if (!(e <= worst)) worst = e; /* NaN too */
    }
  return worst;
}

TEST(kernel_fewrows_opts) {
  sh_sched_opts o;
  CHECK(!sh_kernel_few_rows_opts(SHEAF_ISA_AVX2, 0, &o));
  CHECK(!sh_kernel_few_rows_opts(SHEAF_ISA_AVX2, 3, &o));
  CHECK(!sh_kernel_few_rows_opts(SHEAF_ISA_AVX2, 64, &o));
  REQUIRE(sh_kernel_few_rows_opts(SHEAF_ISA_AVX2, 1, &o));
  CHECK_EQ_INT(o.mr, 1);
  CHECK_EQ_INT(o.nr, 64);
  REQUIRE(sh_kernel_few_rows_opts(SHEAF_ISA_AVX2, 2, &o));
  CHECK_EQ_INT(o.mr, 2);
  CHECK_EQ_INT(o.nr, 32);
  REQUIRE(sh_kernel_few_rows_opts(SHEAF_ISA_AVX512, 1, &o));
  CHECK_EQ_INT(o.nr, 128);
  REQUIRE(sh_kernel_few_rows_opts(SHEAF_ISA_SCALAR, 2, &o));
  CHECK_EQ_INT(o.mr, 2);
  CHECK_EQ_INT(o.nr, 4);
}

/* Every M of 1 .. 3·mr + 1 at N = 1, 17, 67 through a plan per M and
 * sheaf_kernel_run, kernel `src` (ep: with the bias) at `isa` on
 * `threads` threads; M <= 2 runs a variant, M > 2 the kernel itself. */
static void every_m(const char *src, const char *name, bool ep, sheaf_isa isa, int threads) {
  sheaf_ctx *ctx;
  REQUIRE(sheaf_ctx_create(&(sheaf_ctx_options){.threads = threads}, &ctx, NULL, 0) == SHEAF_OK);
  sheaf_kernel *k = NULL;
  /* eager: th_cache_dir (harness.h) */
  sh_kernel_opts ko = {.isa_set = true, .isa = isa, .eager = true, .cache_dir = th_cache_dir("fewrows")};
  if (!CHECK_OK(ctx, sh_kernel_compile_opts(ctx, src, strlen(src), name, &ko, &k))) {
    sheaf_ctx_free(ctx);
    return;
  }
  int mr = isa == SHEAF_ISA_AVX512 ? 12 : isa == SHEAF_ISA_AVX2 ? 6 : 4, maxm = 3 * mr + 1;
  if (maxm > MAXM) maxm = MAXM;
  static float A[MAXM * K], B[K * MAXN], b[MAXN], Y[MAXM * MAXN];
  static const int64_t Ns[] = {1, 17, 67};
  for (size_t n = 0; n < SH_ARRAY_LEN(Ns); n++) {
    int64_t N = Ns[n];
    fill(B, K * N, 40 + n);
    fill(b, N, 90 + n);
    REQUIRE_OK(ctx, sheaf_kernel_set_weight_version(k, 1, n + 1));
    for (int64_t M = 1; M <= maxm; M++) {
      fill(A, M * K, (uint64_t)(M * 13 + n));
      int64_t sa[] = {M, K}, sb[] = {K, N}, sv[] = {N};
      sheaf_kernel_arg a[] = {{SHEAF_KERNEL_F32, A, (size_t)(M * K), 2, sa},
                              {SHEAF_KERNEL_F32, B, (size_t)(K * N), 2, sb},
                              {SHEAF_KERNEL_F32, b, (size_t)N, 1, sv},
                              {SHEAF_KERNEL_F32, Y, (size_t)(M * N), 0, NULL}};
      int na = ep ? 4 : 3;
      if (!ep) a[2] = a[3];
      sheaf_kernel_plan *p = NULL;
      REQUIRE_OK(ctx, sheaf_kernel_plan_make(k, a, na, &p));
      bool var = sh_kernel_plan_kernel(p) != k;
      if (!CHECK_EQ_INT(var, M <= 2 && sh_kernel_input_packed(k, 1)))
        printf("  %s %s: M %lld runs %s\n", name, sheaf_isa_name(isa), (long long)M, var ? "a variant" : "the kernel");
      void *d[] = {A, B, ep ? (void *)b : (void *)Y, Y};
      for (int rep = 0; rep < 2; rep++) {
        for (int64_t i = 0; i < M * N; i++) Y[i] = NAN;
        if (!CHECK_OK(ctx, sheaf_kernel_plan_run(p, d, na))) break;
        double e = err_of(A, B, ep ? b : NULL, Y, M, N);
        if (!CHECK(e < 2e-6))
          printf("  %s %s, %d threads, M %lld N %lld (plan): %g\n", name, sheaf_isa_name(isa), threads,
                 (long long)M, (long long)N, e);
      }
      sheaf_kernel_plan_free(p);
      for (int64_t i = 0; i < M * N; i++) Y[i] = NAN;
      REQUIRE_OK(ctx, sheaf_kernel_run(k, a, na));
      double e = err_of(A, B, ep ? b : NULL, Y, M, N);
      if (!CHECK(e < 2e-6))
        printf("  %s %s, %d threads, M %lld N %lld (run): %g\n", name, sheaf_isa_name(isa), threads, (long long)M,
               (long long)N, e);
    }
  }
  sheaf_kernel_free(k);
  sheaf_ctx_free(ctx);
}

static void every_isa(const char *src, const char *name, bool ep) {
  sheaf_isa host = sheaf_cpu_isa();
  for (int threads = 1; threads <= 2; threads++) {
    every_m(src, name, ep, SHEAF_ISA_SCALAR, threads);
    if (host != SHEAF_ISA_SCALAR) every_m(src, name, ep, SHEAF_ISA_AVX2, threads);
    if (host == SHEAF_ISA_AVX512) every_m(src, name, ep, SHEAF_ISA_AVX512, threads);
  }
}

TEST(kernel_fewrows_gemm_every_m) {
  if (!th_have_jit_cc("kernel_fewrows_gemm_every_m")) return;
  every_isa(MM, "mm", false);
}

TEST(kernel_fewrows_epilogue_every_m) {
  if (!th_have_jit_cc("kernel_fewrows_epilogue_every_m")) return;
  every_isa(EP, "ep", true);
}

/* The variant at 1 row with the weight's contents and version changed
 * between runs (plan and sheaf_kernel_run), then version 0; and a kernel
 * compiled with no_few_rows runs itself at 1 row. */
TEST(kernel_fewrows_versions) {
  if (!th_have_jit_cc("kernel_fewrows_versions")) return;
  sheaf_ctx *ctx = th_ctx();
  sheaf_kernel *k = NULL, *kd = NULL;
  /* eager: th_cache_dir (harness.h) */
  sh_kernel_opts ko = {.eager = true, .cache_dir = th_cache_dir("fewrows")};
  REQUIRE_OK(ctx, sh_kernel_compile_opts(ctx, MM, strlen(MM), "mm", &ko, &k));
  ko.no_few_rows = true;
  REQUIRE_OK(ctx, sh_kernel_compile_opts(ctx, MM, strlen(MM), "mm", &ko, &kd));
  enum { N = 67 };
  static float A[K], B[K * N], Y[N];
  fill(A, K, 5);
  int64_t sa[] = {1, K}, sb[] = {K, N};
  sheaf_kernel_arg a[] = {{SHEAF_KERNEL_F32, A, K, 2, sa}, {SHEAF_KERNEL_F32, B, K * N, 2, sb},
                          {SHEAF_KERNEL_F32, Y, N, 0, NULL}};
  sheaf_kernel_plan *p, *pd;
  REQUIRE_OK(ctx, sheaf_kernel_plan_make(k, a, 3, &p));
  REQUIRE_OK(ctx, sheaf_kernel_plan_make(kd, a, 3, &pd));
  CHECK(sh_kernel_plan_kernel(pd) == kd);
  if (sheaf_cpu_isa() != SHEAF_ISA_SCALAR) CHECK(sh_kernel_plan_kernel(p) != k);
  void *d[] = {A, B, Y};
  for (uint64_t v = 1; v <= 3; v++) {
    fill(B, K * N, 200 + v);
    REQUIRE_OK(ctx, sheaf_kernel_set_weight_version(k, 1, v));
    REQUIRE_OK(ctx, sheaf_kernel_set_weight_version(kd, 1, v));
    for (int rep = 0; rep < 2; rep++) {
      memset(Y, 0, sizeof Y);
      REQUIRE_OK(ctx, sheaf_kernel_plan_run(p, d, 3));
      CHECK(err_of(A, B, NULL, Y, 1, N) < 2e-6);
      memset(Y, 0, sizeof Y);
      REQUIRE_OK(ctx, sheaf_kernel_run(k, a, 3));
      CHECK(err_of(A, B, NULL, Y, 1, N) < 2e-6);
      memset(Y, 0, sizeof Y);
      REQUIRE_OK(ctx, sheaf_kernel_plan_run(pd, d, 3));
      CHECK(err_of(A, B, NULL, Y, 1, N) < 2e-6);
    }
  }
  REQUIRE_OK(ctx, sheaf_kernel_set_weight_version(k, 1, 0));
  for (uint64_t s = 0; s < 2; s++) {
    fill(B, K * N, 300 + s); /* version 0: packed on every run */
    memset(Y, 0, sizeof Y);
    REQUIRE_OK(ctx, sheaf_kernel_run(k, a, 3));
    CHECK(err_of(A, B, NULL, Y, 1, N) < 2e-6);
    memset(Y, 0, sizeof Y);
    REQUIRE_OK(ctx, sheaf_kernel_plan_run(p, d, 3));
    CHECK(err_of(A, B, NULL, Y, 1, N) < 2e-6);
  }
  sheaf_kernel_plan_free(p);
  sheaf_kernel_plan_free(pd);
  sheaf_kernel_free(k);
  sheaf_kernel_free(kd);
}
