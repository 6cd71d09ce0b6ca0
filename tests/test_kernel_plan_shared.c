/*
 * test_kernel_plan_shared.c — the generated GEMM at few rows (a partial row
 * tile at its real size: sched_default.c, remainder_tiles) and plans of one
 * kernel sharing its packed weights (kernel_plan.c, kernel_api.c:
 * sh_kernel_plan_weight): every M from 1 to 3·mr + 1 at odd N, scalar and
 * the host's vector level, 1 and 2 threads, against a double-precision
 * reference; plans of different row counts and sheaf_kernel_run
 * interleaved across weight versions (never a stale copy, one pack per
 * version); plans on two threads; allocation failures in a run.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/kernel_api.h"
#include "harness.h"

static const char MM[] = "kernel mm(A: f32[M, K], B: f32[K, N]) -> f32[M, N] {\n  C(m, n) +=! A(m, k) * B(k, n)\n}\n";

static sheaf_kernel *compile_at(sheaf_ctx *ctx, sheaf_isa isa) {
  sheaf_kernel *k = NULL;
  /* eager: th_cache_dir (harness.h) */
  sh_kernel_opts o = {.isa_set = true, .isa = isa, .eager = true, .cache_dir = th_cache_dir("plan_shared")};
  CHECK_OK(ctx, sh_kernel_compile_opts(ctx, MM, strlen(MM), "mm", &o, &k));
  return k;
}

static void fill(float *p, int64_t n, uint64_t seed) {
  for (int64_t i = 0; i < n; i++) p[i] = th_frand(&seed) * 2.0f;
}

/* Largest relative error of C against A·B in double. */
static double mm_err(const float *A, const float *B, const float *C, int64_t M, int64_t K, int64_t N) {
  double worst = 0;
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double s = 0, a = 0;
      for (int64_t k = 0; k < K; k++) s += (double)A[i * K + k] * B[k * N + j], a += fabs((double)A[i * K + k] * B[k * N + j]);
      double e = fabs(s - C[i * N + j]) / (1 + a);
      if (e > worst) worst = e;
    }
  return worst;
}

enum { MAXM = 19, K = 37, MAXN = 33 };

/* Every M of 1 .. 19 (AVX2 3·6 + 1, scalar past 3·4 + 1) at N = 1, 17, 33,
 * through a plan per M (B of version 1: one pack per N, shared by every
 * plan) and through sheaf_kernel_run, at `isa`, on `threads` threads. */
static void few_rows(sheaf_isa isa, int threads) {
  sheaf_ctx *ctx;
  REQUIRE(sheaf_ctx_create(&(sheaf_ctx_options){.threads = threads}, &ctx, NULL, 0) == SHEAF_OK);
  sheaf_kernel *k = compile_at(ctx, isa);
  if (!k) {
    sheaf_ctx_free(ctx);
    return;
  }
  static float A[MAXM * K], B[K * MAXN], C[MAXM * MAXN];
  static const int64_t Ns[] = {1, 17, 33};
  sheaf_kernel_plan *plans[MAXM + 1] = {0};
  for (size_t n = 0; n < SH_ARRAY_LEN(Ns); n++) {
    int64_t N = Ns[n];
    fill(B, K * N, 50 + n);
    REQUIRE_OK(ctx, sheaf_kernel_set_weight_version(k, 1, n + 1));
    long packs = 0;
    for (int64_t M = 1; M <= MAXM; M++) {
      fill(A, M * K, (uint64_t)(M * 7 + n));
      int64_t sa[] = {M, K}, sb[] = {K, N};
      sheaf_kernel_arg a[] = {{SHEAF_KERNEL_F32, A, (size_t)(M * K), 2, sa},
                              {SHEAF_KERNEL_F32, B, (size_t)(K * N), 2, sb},
                              {SHEAF_KERNEL_F32, C, (size_t)(M * N), 0, NULL}};
      REQUIRE_OK(ctx, sheaf_kernel_plan_make(k, a, 3, &plans[M]));
      void *d[] = {A, B, C};
      for (int rep = 0; rep < 2; rep++) {
        for (int64_t i = 0; i < M * N; i++) C[i] = NAN;
        REQUIRE_OK(ctx, sheaf_kernel_plan_run(plans[M], d, 3));
        double e = mm_err(A, B, C, M, K, N);
        if (!CHECK(e < 2e-6))
          printf("  %s, %d threads, M %lld N %lld (plan): %g\n", sheaf_isa_name(isa), threads, (long long)M,
                 (long long)N, e);
      }
      packs += sh_kernel_plan_packs(plans[M], 1);
      for (int64_t i = 0; i < M * N; i++) C[i] = NAN;
      REQUIRE_OK(ctx, sheaf_kernel_run(k, a, 3));
      CHECK(mm_err(A, B, C, M, K, N) < 2e-6);
    }
    /* one copy per weight layout for every row count: the kernel's, and
     * one per few-rows variant the plans run (kernel_fewrows.c: its tile
     * packs B in panels of its own width) */
    int layouts = 0;
    for (int64_t M = 1; M <= MAXM; M++) {
      bool seen = false;
      for (int64_t q = 1; q < M; q++) seen |= sh_kernel_plan_kernel(plans[q]) == sh_kernel_plan_kernel(plans[M]);
      layouts += !seen;
    }
    if (sh_kernel_input_packed(k, 1)) CHECK_EQ_INT((int)packs, layouts);
    for (int64_t M = 1; M <= MAXM; M++) sheaf_kernel_plan_free(plans[M]), plans[M] = NULL;
  }
  sheaf_kernel_free(k);
  sheaf_ctx_free(ctx);
}

TEST(kernel_plan_shared_few_rows_every_m) {
  if (!th_have_jit_cc("kernel_plan_shared_few_rows_every_m")) return;
  sheaf_isa host = sheaf_cpu_isa();
  for (int threads = 1; threads <= 2; threads++) {
    few_rows(SHEAF_ISA_SCALAR, threads);
    if (host != SHEAF_ISA_SCALAR) few_rows(SHEAF_ISA_AVX2, threads);
    if (host == SHEAF_ISA_AVX512) few_rows(SHEAF_ISA_AVX512, threads);
  }
}

/* Plans at M = 1 and 13 and sheaf_kernel_run interleaved, the weight's
 * contents and version changed between runs: every result is the current
 * weight's, and each version is packed once per kernel the plans run (the
 * 1-row plan runs the few-rows variant: its own layout). */
TEST(kernel_plan_shared_versions_interleaved) {
  if (!th_have_jit_cc("kernel_plan_shared_versions_interleaved")) return;
  sheaf_ctx *ctx = th_ctx();
  sheaf_kernel *k = compile_at(ctx, sheaf_cpu_isa());
  REQUIRE(k != NULL);
  enum { N = 33, M1 = 1, M2 = 13 };
  static float A[M2 * K], B[K * N], C[M2 * N];
  fill(A, M2 * K, 3);
  int64_t s1[] = {M1, K}, s2[] = {M2, K}, sb[] = {K, N};
  sheaf_kernel_arg a1[] = {{SHEAF_KERNEL_F32, A, M1 * K, 2, s1}, {SHEAF_KERNEL_F32, B, K * N, 2, sb},
                           {SHEAF_KERNEL_F32, C, M1 * N, 0, NULL}};
  sheaf_kernel_arg a2[] = {{SHEAF_KERNEL_F32, A, M2 * K, 2, s2}, {SHEAF_KERNEL_F32, B, K * N, 2, sb},
                           {SHEAF_KERNEL_F32, C, M2 * N, 0, NULL}};
  sheaf_kernel_plan *p, *q;
  REQUIRE_OK(ctx, sheaf_kernel_plan_make(k, a1, 3, &p));
  REQUIRE_OK(ctx, sheaf_kernel_plan_make(k, a2, 3, &q));
  void *d[] = {A, B, C};
  bool packed = sh_kernel_input_packed(k, 1);
  for (uint64_t v = 1; v <= 4; v++) {
    fill(B, K * N, 100 + v); /* new contents, new version */
    REQUIRE_OK(ctx, sheaf_kernel_set_weight_version(k, 1, v));
    for (int rep = 0; rep < 2; rep++) {
      memset(C, 0, sizeof C);
      REQUIRE_OK(ctx, sheaf_kernel_plan_run(p, d, 3));
      CHECK(mm_err(A, B, C, M1, K, N) < 2e-6);
      memset(C, 0, sizeof C);
      REQUIRE_OK(ctx, sheaf_kernel_run(k, a2, 3));
      CHECK(mm_err(A, B, C, M2, K, N) < 2e-6);
      memset(C, 0, sizeof C);
      REQUIRE_OK(ctx, sheaf_kernel_plan_run(q, d, 3));
      CHECK(mm_err(A, B, C, M2, K, N) < 2e-6);
    }
    /* once per version for both plans when they run one kernel; once per
     * version each when p (1 row) runs its few-rows variant */
    int layouts = sh_kernel_plan_kernel(p) == sh_kernel_plan_kernel(q) ? 1 : 2;
    if (packed) CHECK_EQ_INT((int)(sh_kernel_plan_packs(p, 1) + sh_kernel_plan_packs(q, 1)), (int)v * layouts);
  }
  /* version 0: packed on every run, each plan into its own buffer */
  REQUIRE_OK(ctx, sheaf_kernel_set_weight_version(k, 1, 0));
  fill(B, K * N, 7);
  REQUIRE_OK(ctx, sheaf_kernel_plan_run(q, d, 3));
  CHECK(mm_err(A, B, C, M2, K, N) < 2e-6);
  fill(B, K * N, 8);
  REQUIRE_OK(ctx, sheaf_kernel_plan_run(p, d, 3));
  CHECK(mm_err(A, B, C, M1, K, N) < 2e-6);
  sheaf_kernel_plan_free(p);
  sheaf_kernel_plan_free(q);
  sheaf_kernel_free(k);
}

typedef struct thr {
  sheaf_kernel *k;
  const float *B;
  int64_t M;
  double worst;
  sheaf_status st;
} thr;

static void *plan_thread(void *arg) {
  thr *t = arg;
  enum { N = 33 };
  float *A = malloc(sizeof(float) * (size_t)(t->M * K)), *C = malloc(sizeof(float) * (size_t)(t->M * N));
  if (!A || !C) {
    t->st = SHEAF_ERR_NOMEM;
    free(A), free(C);
    return NULL;
  }
  int64_t sa[] = {t->M, K}, sb[] = {K, N};
  sheaf_kernel_arg a[] = {{SHEAF_KERNEL_F32, A, (size_t)(t->M * K), 2, sa},
                          {SHEAF_KERNEL_F32, (void *)(uintptr_t)t->B, K * N, 2, sb},
                          {SHEAF_KERNEL_F32, C, (size_t)(t->M * N), 0, NULL}};
  sheaf_kernel_plan *p = NULL;
  t->st = sheaf_kernel_plan_make(t->k, a, 3, &p);
  void *d[] = {A, (void *)(uintptr_t)t->B, C};
  for (int it = 0; it < 40 && !t->st; it++) {
    fill(A, t->M * K, (uint64_t)it + (uint64_t)t->M);
    if ((t->st = sheaf_kernel_plan_run(p, d, 3))) break;
    double e = mm_err(A, t->B, C, t->M, K, N);
    if (e > t->worst) t->worst = e;
  }
  sheaf_kernel_plan_free(p);
  free(A), free(C);
  return NULL;
}

/* Plans of one kernel at M = 1 and 7 on two threads, one weight of
 * version 1 shared (TSan: make BUILD=debug SAN=thread). */
TEST(kernel_plan_shared_two_threads) {
  if (!th_have_jit_cc("kernel_plan_shared_two_threads")) return;
  sheaf_ctx *ctx = th_ctx();
  sheaf_kernel *k = compile_at(ctx, sheaf_cpu_isa());
  REQUIRE(k != NULL);
  static float B[K * 33];
  fill(B, K * 33, 11);
  REQUIRE_OK(ctx, sheaf_kernel_set_weight_version(k, 1, 1));
  thr t[2] = {{k, B, 1, 0, SHEAF_OK}, {k, B, 7, 0, SHEAF_OK}};
  pthread_t h;
  REQUIRE(pthread_create(&h, NULL, plan_thread, &t[1]) == 0);
  plan_thread(&t[0]);
  pthread_join(h, NULL);
  CHECK_EQ_INT(t[0].st, SHEAF_OK);
  CHECK_EQ_INT(t[1].st, SHEAF_OK);
  CHECK(t[0].worst < 2e-6);
  CHECK(t[1].worst < 2e-6);
  sheaf_kernel_free(k);
}

/* An allocation failing in a plan's first run (the kernel's kept copy, the
 * plan's own buffer): the run packs elsewhere and is right, or fails with
 * SHEAF_ERR_NOMEM naming the weight; the next run is right. */
TEST(kernel_plan_shared_out_of_memory) {
  if (!th_have_jit_cc("kernel_plan_shared_out_of_memory")) return;
  sheaf_ctx *ctx = th_ctx();
  enum { M = 5, N = 17 };
  static float A[M * K], B[K * N], C[M * N];
  fill(A, M * K, 1), fill(B, K * N, 2);
  int64_t sa[] = {M, K}, sb[] = {K, N};
  sheaf_kernel_arg a[] = {{SHEAF_KERNEL_F32, A, M * K, 2, sa}, {SHEAF_KERNEL_F32, B, K * N, 2, sb},
                          {SHEAF_KERNEL_F32, C, M * N, 0, NULL}};
  void *d[] = {A, B, C};
  int failed = 0;
  for (long fail = 1; fail <= 4; fail++) {
    sheaf_kernel *k = compile_at(ctx, sheaf_cpu_isa()); /* a fresh kernel: no kept copy yet */
    REQUIRE(k != NULL);
    if (!sh_kernel_input_packed(k, 1)) {
      sheaf_kernel_free(k);
      return;
    }
    REQUIRE_OK(ctx, sheaf_kernel_set_weight_version(k, 1, fail));
    sheaf_kernel_plan *p = NULL;
    REQUIRE_OK(ctx, sheaf_kernel_plan_make(k, a, 3, &p));
    memset(C, 0, sizeof C);
    th_fail_alloc_at(fail);
    sheaf_status st = sheaf_kernel_plan_run(p, d, 3);
    th_fail_alloc_at(0);
    if (st) {
      failed++;
      CHECK_EQ_INT(st, SHEAF_ERR_NOMEM);
      CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "'B'");
    } else {
      CHECK(mm_err(A, B, C, M, K, N) < 2e-6);
    }
    memset(C, 0, sizeof C);
    REQUIRE_OK(ctx, sheaf_kernel_plan_run(p, d, 3));
    CHECK(mm_err(A, B, C, M, K, N) < 2e-6);
    sheaf_kernel_plan_free(p);
    sheaf_kernel_free(k);
  }
  (void)failed; /* fail = 1: the kept copy's allocation fails, the plan's own buffer serves the run */
}
