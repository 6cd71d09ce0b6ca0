/*
 * test_kernel_fast.c — the fast path of repeated sheaf_kernel_run calls
 * (src/codegen/kernel_api.c, "Repeated calls"): a call with the argument
 * signature of the last checked call skips the checks and the binding.
 * Softmax and layernorm rows at widths below, at, above and at multiples of
 * the vector tiles (8 lanes, 4-vector blocks), rows 1 .. 65, against double
 * references, each shape run twice (the second on the fast path) and
 * revisited after others (the kept signature replaced); every argument
 * error still reported on a kept shape (element counts, NULL data, dtype,
 * rank, a shape change inside the same element count); a kernel with a
 * packed weight never takes it and a new weight version and its data are
 * honoured; two threads alternating shapes on one kernel. Skipped with a
 * note when no C compiler exists.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/kernel_api.h"
#include "harness.h"
#include "lir_ref.h"

static const char SRC[] =
    "kernel sm(x: f32[N, C]) -> f32[N, C] {\n"
    "  m(n) max=! x(n, c)\n  e(n, c) = exp(x(n, c) - m(n))\n"
    "  s(n) +=! e(n, c)\n  out(n, c) = e(n, c) / s(n)\n}\n"
    "kernel ln(x: f32[N, D], g: f32[D], b: f32[D]) -> f32[N, D] {\n"
    "  mu(n) +=! x(n, d) / D\n  c(n, d) = x(n, d) - mu(n)\n"
    "  var(n) +=! c(n, d) * c(n, d) / D\n"
    "  out(n, d) = c(n, d) * rsqrt(var(n) + 1e-5) * g(d) + b(d)\n}\n"
    "kernel mm(A: f32[M, K], B: f32[K, N]) -> f32[M, N] { C(m, n) +=! A(m, k) * B(k, n) }\n";

static sheaf_kernel *compile(sheaf_ctx *ctx, const char *name) {
  sheaf_kernel *k = NULL;
  /* eager: th_cache_dir (harness.h) */
  sh_kernel_opts o = {.eager = true, .cache_dir = th_cache_dir("fast")};
  CHECK_OK(ctx, sh_kernel_compile_opts(ctx, SRC, strlen(SRC), name, &o, &k));
  return k;
}

static void fill(float *p, int64_t n, int seed) {
  for (int64_t i = 0; i < n; i++) p[i] = (float)(((i * 7 + seed * 13) % 29) - 14) / 7.0f;
}

/* Runs k (sm or ln) on M x N rows; the error against the reference, 1e30
 * when the run fails. *fast: whether the call matched the kept signature. */
static double run_rows(sheaf_ctx *ctx, sheaf_kernel *k, bool ln, int64_t M, int64_t N, int seed, bool *fast) {
  float *x = malloc(sizeof(float) * (size_t)(M * N)), *y = malloc(sizeof(float) * (size_t)(M * N));
  float *g = malloc(sizeof(float) * (size_t)N), *b = malloc(sizeof(float) * (size_t)N);
  fill(x, M * N, seed), fill(g, N, seed + 1), fill(b, N, seed + 2);
  memset(y, 0xff, sizeof(float) * (size_t)(M * N));
  int64_t sx[] = {M, N}, sv[] = {N};
  sheaf_kernel_arg a[4] = {{SHEAF_KERNEL_F32, x, (size_t)(M * N), 2, sx}};
  int na = ln ? 4 : 2;
  if (ln) {
    a[1] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, g, (size_t)N, 1, sv};
    a[2] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, b, (size_t)N, 1, sv};
  }
  a[na - 1] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, y, (size_t)(M * N), 2, sx};
  if (fast) *fast = sh_kernel_fast_match(k, a, na);
  double err = sheaf_kernel_run(k, a, na) == SHEAF_OK ? lr_rows_err(ln, x, g, b, y, M, N) : 1e30;
  free(x), free(y), free(g), free(b);
  return err;
}

TEST(kernel_fast_rows_repeat_and_change_shape) {
  if (!th_have_jit_cc("kernel_fast_rows_repeat_and_change_shape")) return;
  sheaf_ctx *ctx = th_ctx();
  static const int64_t Ms[] = {1, 3, 4, 5, 64, 65}, Ns[] = {1, 7, 8, 9, 25, 31, 32, 33, 64, 256};
  for (int ln = 0; ln < 2; ln++) {
    sheaf_kernel *k = compile(ctx, ln ? "ln" : "sm");
    REQUIRE(k != NULL);
    int s = 0;
    for (size_t i = 0; i < SH_ARRAY_LEN(Ms); i++)
      for (size_t j = 0; j < SH_ARRAY_LEN(Ns); j++, s++) {
        bool f1, f2;
        CHECK(run_rows(ctx, k, ln, Ms[i], Ns[j], s, &f1) < 2e-5);
        CHECK(!f1); /* a new shape: the full path */
        CHECK(run_rows(ctx, k, ln, Ms[i], Ns[j], s + 100, &f2) < 2e-5);
        CHECK(f2); /* the same shape again, other data: the fast path */
      }
    /* back to an earlier shape: the kept signature was replaced */
    bool f;
    CHECK(run_rows(ctx, k, ln, 5, 9, 7, &f) < 2e-5);
    CHECK(!f);
    CHECK(run_rows(ctx, k, ln, 5, 9, 8, &f) < 2e-5);
    CHECK(f);
    sheaf_kernel_free(k);
  }
}

TEST(kernel_fast_errors_on_a_kept_shape) {
  if (!th_have_jit_cc("kernel_fast_errors_on_a_kept_shape")) return;
  sheaf_ctx *ctx = th_ctx();
  sheaf_kernel *k = compile(ctx, "ln");
  REQUIRE(k != NULL);
  enum { M = 6, N = 40 };
  static float x[M * N], g[N], b[N], y[M * N];
  fill(x, M * N, 1), fill(g, N, 2), fill(b, N, 3);
  int64_t sx[] = {M, N}, sv[] = {N}, sx2[] = {M * 2, N / 2}, sx3[] = {M, N, 1};
  sheaf_kernel_arg a[] = {{SHEAF_KERNEL_F32, x, M * N, 2, sx}, {SHEAF_KERNEL_F32, g, N, 1, sv},
                          {SHEAF_KERNEL_F32, b, N, 1, sv}, {SHEAF_KERNEL_F32, y, M * N, 0, NULL}};
  REQUIRE_OK(ctx, sheaf_kernel_run(k, a, 4));
  REQUIRE(sh_kernel_fast_match(k, a, 4));
  sheaf_kernel_arg e[4];
  memcpy(e, a, sizeof a);
  e[3].numel = M * N - 1; /* the output's element count */
  CHECK(!sh_kernel_fast_match(k, e, 4));
  CHECK_STATUS(ctx, sheaf_kernel_run(k, e, 4), SHEAF_ERR_INVALID_ARG);
  CHECK(strstr(sheaf_ctx_last_error(ctx), "output 'out'") != NULL);
  memcpy(e, a, sizeof a);
  e[3].data = NULL; /* a NULL output */
  CHECK_STATUS(ctx, sheaf_kernel_run(k, e, 4), SHEAF_ERR_INVALID_ARG);
  memcpy(e, a, sizeof a);
  e[1].data = NULL; /* a NULL input */
  CHECK_STATUS(ctx, sheaf_kernel_run(k, e, 4), SHEAF_ERR_INVALID_ARG);
  memcpy(e, a, sizeof a);
  e[0].dtype = SHEAF_KERNEL_I32; /* the dtype */
  CHECK_STATUS(ctx, sheaf_kernel_run(k, e, 4), SHEAF_ERR_INVALID_ARG);
  memcpy(e, a, sizeof a);
  e[0].shape = sx2; /* the same element count, another shape: D no longer matches g */
  CHECK_STATUS(ctx, sheaf_kernel_run(k, e, 4), SHEAF_ERR_SHAPE);
  memcpy(e, a, sizeof a);
  e[0].shape = sx3, e[0].rank = 3; /* the rank */
  CHECK_STATUS(ctx, sheaf_kernel_run(k, e, 4), SHEAF_ERR_SHAPE);
  memcpy(e, a, sizeof a);
  e[0].shape = NULL; /* a NULL shape */
  CHECK_STATUS(ctx, sheaf_kernel_run(k, e, 4), SHEAF_ERR_INVALID_ARG);
  CHECK_STATUS(ctx, sheaf_kernel_run(k, a, 3), SHEAF_ERR_INVALID_ARG); /* the count */
  /* the kept shape still runs, and right */
  CHECK(sh_kernel_fast_match(k, a, 4));
  memset(y, 0, sizeof y);
  REQUIRE_OK(ctx, sheaf_kernel_run(k, a, 4));
  CHECK(lr_rows_err(true, x, g, b, y, M, N) < 2e-5);
  sheaf_kernel_free(k);
}

TEST(kernel_fast_not_for_packed_weights) {
  if (!th_have_jit_cc("kernel_fast_not_for_packed_weights")) return;
  sheaf_ctx *ctx = th_ctx();
  sheaf_kernel *k = compile(ctx, "mm");
  REQUIRE(k != NULL);
  enum { M = 5, K = 9, N = 17 };
  static float A[M * K], B[K * N], C[M * N];
  fill(A, M * K, 1), fill(B, K * N, 2);
  int64_t sa[] = {M, K}, sb[] = {K, N};
  sheaf_kernel_arg a[] = {{SHEAF_KERNEL_F32, A, M * K, 2, sa}, {SHEAF_KERNEL_F32, B, K * N, 2, sb},
                          {SHEAF_KERNEL_F32, C, M * N, 0, NULL}};
  bool packed = sh_kernel_input_packed(k, 1);
  for (int v = 1; v <= 3; v++) {
    REQUIRE_OK(ctx, sheaf_kernel_set_weight_version(k, 1, (uint64_t)v));
    fill(B, K * N, 10 * v); /* new contents under a new version */
    for (int rep = 0; rep < 2; rep++) {
      REQUIRE_OK(ctx, sheaf_kernel_run(k, a, 3));
      CHECK(!packed || !sh_kernel_fast_match(k, a, 3));
      double worst = 0;
      for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
          double ref = 0;
          for (int j = 0; j < K; j++) ref += (double)A[m * K + j] * B[j * N + n];
          double d = fabs(C[m * N + n] - ref) / fmax(1.0, fabs(ref));
          if (!(d <= worst)) worst = d;
        }
      CHECK(worst < 2e-5);
    }
  }
  if (packed) CHECK_EQ_INT((int)sh_kernel_pack_count(k, 1), 3); /* once per version */
  sheaf_kernel_free(k);
}

typedef struct thr {
  sheaf_ctx *ctx;
  sheaf_kernel *k;
  int id;
  double worst;
} thr;

static void *alternate(void *p) {
  thr *t = p;
  for (int i = 0; i < 60; i++) {
    int64_t M = 1 + (i + t->id) % 3, N = t->id ? 33 + i % 2 : 8 + 17 * (i % 2);
    double e = run_rows(t->ctx, t->k, true, M, N, i + 31 * t->id, NULL);
    if (!(e <= t->worst)) t->worst = e;
  }
  return NULL;
}

TEST(kernel_fast_two_threads_alternating_shapes) {
  if (!th_have_jit_cc("kernel_fast_two_threads_alternating_shapes")) return;
  sheaf_ctx *ctx = th_ctx();
  sheaf_kernel *k = compile(ctx, "ln");
  REQUIRE(k != NULL);
  thr t[2] = {{ctx, k, 0, 0}, {ctx, k, 1, 0}};
  pthread_t h;
  REQUIRE(pthread_create(&h, NULL, alternate, &t[1]) == 0);
  alternate(&t[0]);
  pthread_join(h, NULL);
  CHECK(t[0].worst < 2e-5);
  CHECK(t[1].worst < 2e-5);
  sheaf_kernel_free(k);
}
