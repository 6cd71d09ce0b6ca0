/*
 * test_kernel_plan.c — prepared calls (sheaf_kernel_plan_*, include/
 * sheaf_kernel.h; src/codegen/kernel_plan.c): softmax and layernorm at every
 * shape of rows 1 .. 65 x widths 1 .. 256 through a plan against double
 * references (planned with and without data pointers, run on other buffers
 * than planned); a GEMM whose weight the kernel reads packed, across
 * weight versions, pointers and version 0 (never a stale result; packs
 * counted); a plan on a tuned kernel runs the record's variant, and a plan
 * made before the records were loaded still runs right; a tuned row
 * kernel's record counts every run (plans and the kept-signature path); ragged attention
 * with lengths 0 and 1 (new data, same lengths elsewhere; other lengths
 * refused; a ragged input's element count checked, by sheaf_kernel_run
 * too); every argument error of make and run; every allocation of a
 * make failing in turn; two threads each with its own plan on one kernel
 * beside sheaf_kernel_run. Skipped with a note when no C compiler exists.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/jit.h"
#include "codegen/kernel_api.h"
#include "codegen/tune.h"
#include "harness.h"
#include "lang/kernel_ref.h"
#include "lir_ref.h"

static const char SRC[] =
    "kernel sm(x: f32[N, C]) -> f32[N, C] {\n"
    "  m(n) max=! x(n, c)\n  e(n, c) = exp(x(n, c) - m(n))\n"
    "  s(n) +=! e(n, c)\n  out(n, c) = e(n, c) / s(n)\n}\n"
    "kernel ln(x: f32[N, D], g: f32[D], b: f32[D]) -> f32[N, D] {\n"
    "  mu(n) +=! x(n, d) / D\n  c(n, d) = x(n, d) - mu(n)\n"
    "  var(n) +=! c(n, d) * c(n, d) / D\n"
    "  out(n, d) = c(n, d) * rsqrt(var(n) + 1e-5) * g(d) + b(d)\n}\n"
    "kernel mm(A: f32[M, K], B: f32[K, N]) -> f32[M, N] { C(m, n) +=! A(m, k) * B(k, n) }\n"
    "kernel attn(L: i32[B], q: f32[B, L(b), D], k: f32[B, L(b), D], v: f32[B, L(b), D])\n"
    "    -> f32[B, L(b), D] {\n"
    "  s(b, i, j) +=! q(b, i, d) * k(b, j, d) / sqrt(D)\n"
    "  m(b, i) max=! s(b, i, j)\n  e(b, i, j) = exp(s(b, i, j) - m(b, i))\n"
    "  z(b, i) +=! e(b, i, j)\n  o(b, i, d) +=! e(b, i, j) * v(b, j, d)\n"
    "  out(b, i, d) = o(b, i, d) / z(b, i)\n}\n";

static sheaf_kernel *compile(sheaf_ctx *ctx, const char *name) {
  sheaf_kernel *k = NULL;
  /* eager: th_cache_dir (harness.h) */
  sh_kernel_opts o = {.eager = true, .cache_dir = th_cache_dir("plan")};
  CHECK_OK(ctx, sh_kernel_compile_opts(ctx, SRC, strlen(SRC), name, &o, &k));
  return k;
}

static void fill(float *p, int64_t n, uint64_t seed) {
  for (int64_t i = 0; i < n; i++) p[i] = th_frand(&seed) * 3.0f;
}

enum { MAXM = 65, MAXN = 256 };

/* Two sets of row buffers (x, g, b, y), filled differently. */
typedef struct rowbufs {
  float *x[2], *g[2], *b[2], *y[2];
} rowbufs;

static void rowbufs_init(rowbufs *B) {
  for (int s = 0; s < 2; s++) {
    B->x[s] = malloc(sizeof(float) * MAXM * MAXN), B->y[s] = malloc(sizeof(float) * MAXM * MAXN);
    B->g[s] = malloc(sizeof(float) * MAXN), B->b[s] = malloc(sizeof(float) * MAXN);
    fill(B->x[s], MAXM * MAXN, 11 + (uint64_t)s), fill(B->g[s], MAXN, 21 + (uint64_t)s);
    fill(B->b[s], MAXN, 31 + (uint64_t)s);
  }
}

static void rowbufs_free(rowbufs *B) {
  for (int s = 0; s < 2; s++) free(B->x[s]), free(B->y[s]), free(B->g[s]), free(B->b[s]);
}

/* The planned arguments of sm (ln false) or ln at M x N, data from set s
 * (s < 0: no data pointers); the count. */
static int row_args(bool ln, const rowbufs *B, int s, int64_t M, int64_t N, int64_t *sx, int64_t *sv,
                    sheaf_kernel_arg *a) {
  sx[0] = M, sx[1] = N, sv[0] = N;
  a[0] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, s < 0 ? NULL : B->x[s], (size_t)(M * N), 2, sx};
  int na = ln ? 4 : 2;
  if (ln) {
    a[1] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, s < 0 ? NULL : B->g[s], (size_t)N, 1, sv};
    a[2] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, s < 0 ? NULL : B->b[s], (size_t)N, 1, sv};
  }
  a[na - 1] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, s < 0 ? NULL : B->y[s], (size_t)(M * N), 0, NULL};
  return na;
}

/* Runs plan p (of sm or ln at M x N) on buffer set s; the error against
 * ref (set s's reference at width N: rows of every M are its first M
 * rows), 1e30 when the run fails. */
static double plan_rows(sheaf_ctx *ctx, sheaf_kernel_plan *p, bool ln, const rowbufs *B, int s, int64_t M,
                        int64_t N, const double *ref) {
  void *d[4] = {B->x[s]};
  int na = ln ? 4 : 2;
  if (ln) d[1] = B->g[s], d[2] = B->b[s];
  d[na - 1] = B->y[s];
  memset(B->y[s], 0xff, sizeof(float) * (size_t)(M * N)); /* NaN: a row not written fails */
  if (!CHECK_OK(ctx, sheaf_kernel_plan_run(p, d, na))) return 1e30;
  return lr_max_rel_err(B->y[s], ref, M * N);
}

TEST(kernel_plan_rows_every_shape) {
  if (!th_have_jit_cc("kernel_plan_rows_every_shape")) return;
  sheaf_ctx *ctx = th_ctx();
  rowbufs B;
  rowbufs_init(&B);
  for (int ln = 0; ln < 2; ln++) {
    sheaf_kernel *k = compile(ctx, ln ? "ln" : "sm");
    REQUIRE(k != NULL);
    double worst = 0, *ref[2];
    int bad = 0;
    for (int s = 0; s < 2; s++) ref[s] = malloc(sizeof(double) * MAXM * MAXN);
    for (int64_t N = 1; N <= MAXN; N++) {
      for (int s = 0; s < 2; s++) lr_rows_ref(ln, B.x[s], B.g[s], B.b[s], ref[s], MAXM, N);
      for (int64_t M = 1; M <= MAXM; M++) {
        int64_t sx[2], sv[1];
        sheaf_kernel_arg a[4];
        int shape = (int)(M * MAXN + N);
        int na = row_args(ln, &B, shape % 2 ? 0 : -1, M, N, sx, sv, a); /* every other plan without data */
        sheaf_kernel_plan *p = NULL;
        if (!CHECK_OK(ctx, sheaf_kernel_plan_make(k, a, na, &p))) return;
        double e = plan_rows(ctx, p, ln, &B, 1, M, N, ref[1]); /* other buffers than planned */
        if (shape % 5 == 0) e = fmax(e, plan_rows(ctx, p, ln, &B, 0, M, N, ref[0])); /* and back */
        if (!(e < 2e-5) && bad++ < 5) fprintf(stderr, "  %s %lld x %lld: error %g\n", ln ? "ln" : "sm",
                                               (long long)M, (long long)N, e);
        if (!(e <= worst)) worst = e;
        sheaf_kernel_plan_free(p);
      }
    }
    CHECK(worst < 2e-5);
    free(ref[0]), free(ref[1]);
    sheaf_kernel_free(k);
  }
  rowbufs_free(&B);
}

/* The largest relative error of C = A B (M x K, K x N) against double. */
static double mm_err(const float *A, const float *Bm, const float *C, int M, int K, int N) {
  double worst = 0;
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      double ref = 0;
      for (int j = 0; j < K; j++) ref += (double)A[m * K + j] * Bm[j * N + n];
      double d = fabs(C[m * N + n] - ref) / fmax(1.0, fabs(ref));
      if (!(d <= worst)) worst = d;
    }
  return worst;
}

TEST(kernel_plan_weight_versions) {
  if (!th_have_jit_cc("kernel_plan_weight_versions")) return;
  sheaf_ctx *ctx = th_ctx();
  sheaf_kernel *k = compile(ctx, "mm");
  REQUIRE(k != NULL);
  enum { M = 13, K = 33, N = 40 };
  static float A[M * K], B1[K * N], B2[K * N], C[M * N];
  fill(A, M * K, 1);
  int64_t sa[] = {M, K}, sb[] = {K, N};
  sheaf_kernel_arg a[] = {{SHEAF_KERNEL_F32, A, M * K, 2, sa}, {SHEAF_KERNEL_F32, NULL, K * N, 2, sb},
                          {SHEAF_KERNEL_F32, NULL, M * N, 0, NULL}};
  bool packed = sh_kernel_input_packed(k, 1);
  sheaf_isa isa = sheaf_cpu_isa();
  if (isa == SHEAF_ISA_AVX2 || isa == SHEAF_ISA_AVX512) CHECK(packed); /* the default schedule packs B there */
  sheaf_kernel_plan *p, *q;
  REQUIRE_OK(ctx, sheaf_kernel_plan_make(k, a, 3, &p));
  REQUIRE_OK(ctx, sheaf_kernel_plan_make(k, a, 3, &q)); /* a second plan on the same kernel and weight */
  void *d[] = {A, B1, C}, *d2[] = {A, B2, C};
  long want = 0; /* p's packs so far */
  /* version 0 (the default): packed on every run, so writing to B needs nothing */
  for (int rep = 0; rep < 3; rep++) {
    fill(B1, K * N, 100 + (uint64_t)rep);
    REQUIRE_OK(ctx, sheaf_kernel_plan_run(p, d, 3));
    CHECK(mm_err(A, B1, C, M, K, N) < 2e-5);
    want++;
  }
  if (packed) CHECK_EQ_INT((int)sh_kernel_plan_packs(p, 1), (int)want);
  for (int v = 1; v <= 3; v++) {
    fill(B1, K * N, 10 * (uint64_t)v); /* new contents under a new version */
    REQUIRE_OK(ctx, sheaf_kernel_set_weight_version(k, 1, (uint64_t)v));
    for (int rep = 0; rep < 3; rep++) {
      memset(C, 0, sizeof C);
      REQUIRE_OK(ctx, sheaf_kernel_plan_run(p, d, 3));
      CHECK(mm_err(A, B1, C, M, K, N) < 2e-5);
    }
    want++; /* once per version */
    memset(C, 0, sizeof C);
    REQUIRE_OK(ctx, sheaf_kernel_plan_run(q, d, 3)); /* the other plan sees the version too */
    CHECK(mm_err(A, B1, C, M, K, N) < 2e-5);
    REQUIRE_OK(ctx, sheaf_kernel_run(k, (sheaf_kernel_arg[]){a[0], {SHEAF_KERNEL_F32, B1, K * N, 2, sb},
                                                             {SHEAF_KERNEL_F32, C, M * N, 0, NULL}}, 3));
    CHECK(mm_err(A, B1, C, M, K, N) < 2e-5); /* and sheaf_kernel_run beside it */
  }
  /* another weight pointer under the same version: repacked (the key is the pointer too) */
  fill(B2, K * N, 77);
  REQUIRE_OK(ctx, sheaf_kernel_plan_run(p, d2, 3));
  CHECK(mm_err(A, B2, C, M, K, N) < 2e-5);
  REQUIRE_OK(ctx, sheaf_kernel_plan_run(p, d, 3)); /* and back: B1 again, */
  CHECK(mm_err(A, B1, C, M, K, N) < 2e-5);
  want += 1; /* whose copy the kernel still keeps (its plans share a few kept copies): not repacked */
  if (packed) CHECK_EQ_INT((int)sh_kernel_plan_packs(p, 1), (int)want);
  /* back to version 0: every run packs again */
  REQUIRE_OK(ctx, sheaf_kernel_set_weight_version(k, 1, 0));
  fill(B1, K * N, 5);
  REQUIRE_OK(ctx, sheaf_kernel_plan_run(p, d, 3));
  CHECK(mm_err(A, B1, C, M, K, N) < 2e-5);
  fill(B1, K * N, 6);
  REQUIRE_OK(ctx, sheaf_kernel_plan_run(p, d, 3));
  CHECK(mm_err(A, B1, C, M, K, N) < 2e-5);
  want += 2;
  if (packed) CHECK_EQ_INT((int)sh_kernel_plan_packs(p, 1), (int)want);
  sheaf_kernel_plan_free(p);
  sheaf_kernel_plan_free(q);
  sheaf_kernel_free(k);
}

/* A record for kernel k at sizes vals with knobs o, keyed for k, isa and
 * the compiler (as the tuner writes one). */
static sh_tune_rec rec_for(sheaf_ctx *ctx, sheaf_kernel *k, sheaf_isa isa, const int64_t *vals, const sh_sched_opts *o) {
  sh_tune_rec r;
  memset(&r, 0, sizeof r);
  const sh_kernel *kk = sh_kernel_of(k);
  snprintf(r.kernel, sizeof r.kernel, "%s", kk->name);
  snprintf(r.isa, sizeof r.isa, "%s", sheaf_isa_name(isa));
  sh_tune_kernel_hash(ctx, sh_kernel_of(k), r.ir);
  sh_jit *jit;
  if (sh_jit_create(ctx, &(sh_jit_options){0}, &jit) == SHEAF_OK) {
    sh_tune_compiler_id(ctx, sh_jit_compiler(jit), r.cc);
    sh_jit_free(jit);
  }
  r.n_sizes = kk->n_sizes;
  for (int i = 0; i < kk->n_sizes; i++) {
    snprintf(r.size_names[i], SH_TUNE_NAME_MAX, "%s", kk->sizes[i].name);
    r.sizes[i] = vals[i];
    r.cls[i] = sh_tune_bucket(vals[i]);
  }
  r.opts = *o;
  return r;
}

static sheaf_kernel *compile_in(sheaf_ctx *ctx, const char *name, sheaf_isa isa, const char *dir) {
  sheaf_kernel *k = NULL;
  sh_kernel_opts o = {.isa_set = true, .isa = isa, .cache_dir = dir};
  CHECK_OK(ctx, sh_kernel_compile_opts(ctx, SRC, strlen(SRC), name, &o, &k));
  return k;
}

/* Saves record r to a file and loads it into ctx. */
static bool load_rec(sheaf_ctx *ctx, const sh_tune_rec *r, const char *file) {
  sh_tune_set s;
  sh_tune_set_init(&s, ctx);
  const char *path = th_tmp_path(file);
  bool ok = CHECK_OK(ctx, sh_tune_set_add(&s, r)) && CHECK_OK(ctx, sh_tune_set_save(&s, path));
  sh_tune_set_free(&s);
  return ok && CHECK_OK(ctx, sheaf_kernel_load_tuning(ctx, path));
}

TEST(kernel_plan_tuned_variant) {
  if (!th_have_jit_cc("kernel_plan_tuned_variant")) return;
  sheaf_ctx *ctx = th_ctx();
  sheaf_isa h = sheaf_cpu_isa();
  sheaf_isa isa = h == SHEAF_ISA_AVX2 || h == SHEAF_ISA_AVX512 ? SHEAF_ISA_AVX2 : SHEAF_ISA_SCALAR;
  const char *dir = th_tmp_path("plan-tune"); /* its own cache: no records but this test's */
  enum { M = 64, K = 32, N = 40 };
  static float A[M * K], B[K * N], C[M * N];
  fill(A, M * K, 3), fill(B, K * N, 4);
  int64_t sa[] = {M, K}, sb[] = {K, N};
  sheaf_kernel_arg a[] = {{SHEAF_KERNEL_F32, A, M * K, 2, sa}, {SHEAF_KERNEL_F32, B, K * N, 2, sb},
                          {SHEAF_KERNEL_F32, C, M * N, 0, NULL}};
  void *d[] = {A, B, C};
  /* a plan made before any record: the default schedule */
  sheaf_kernel *k0 = compile_in(ctx, "mm", isa, dir);
  REQUIRE(k0);
  sheaf_kernel_plan *p0;
  REQUIRE_OK(ctx, sheaf_kernel_plan_make(k0, a, 3, &p0));
  CHECK(sh_kernel_plan_kernel(p0) == k0);
  /* records loaded: kernels compiled from then on run mr = 5 at this class */
  sh_sched_opts o = {.mr = 5, .nr = isa == SHEAF_ISA_AVX2 ? 16 : 4};
  sh_tune_rec r = rec_for(ctx, k0, isa, (int64_t[]){M, K, N}, &o);
  REQUIRE(load_rec(ctx, &r, "plan.tune"));
  sheaf_kernel *k1 = compile_in(ctx, "mm", isa, dir);
  REQUIRE(k1);
  CHECK_EQ_INT(sh_kernel_n_variants(k1), 0);
  sheaf_kernel_plan *p1;
  REQUIRE_OK(ctx, sheaf_kernel_plan_make(k1, a, 3, &p1)); /* compiles the variant */
  REQUIRE_EQ_INT(sh_kernel_n_variants(k1), 1);
  CHECK(sh_kernel_plan_kernel(p1) == sh_kernel_variant(k1, 0));
  for (int rep = 0; rep < 3; rep++) {
    fill(B, K * N, 40 + (uint64_t)rep);
    memset(C, 0, sizeof C);
    REQUIRE_OK(ctx, sheaf_kernel_plan_run(p1, d, 3));
    CHECK(mm_err(A, B, C, M, K, N) < 2e-5);
    memset(C, 0, sizeof C);
    REQUIRE_OK(ctx, sheaf_kernel_plan_run(p0, d, 3)); /* the older plan: still the default, still right */
    CHECK(mm_err(A, B, C, M, K, N) < 2e-5);
  }
  /* sheaf_kernel_run at the class runs the same variant (no second one) */
  REQUIRE_OK(ctx, sheaf_kernel_run(k1, a, 3));
  CHECK(mm_err(A, B, C, M, K, N) < 2e-5);
  CHECK_EQ_INT(sh_kernel_n_variants(k1), 1);
  /* the record counts the plan's runs and the call's */
  sheaf_kernel_tuning_use u[2];
  REQUIRE_EQ_INT((int)sheaf_kernel_tuning_stats(ctx, 2, u), 1);
  CHECK_EQ_INT((int)u[0].runs, 4);
  /* a size outside the class: k1 itself */
  int64_t sa2[] = {3, 5}, sb2[] = {5, 2};
  sheaf_kernel_arg a2[] = {{SHEAF_KERNEL_F32, A, 15, 2, sa2}, {SHEAF_KERNEL_F32, B, 10, 2, sb2},
                           {SHEAF_KERNEL_F32, C, 6, 0, NULL}};
  sheaf_kernel_plan *p2;
  REQUIRE_OK(ctx, sheaf_kernel_plan_make(k1, a2, 3, &p2));
  CHECK(sh_kernel_plan_kernel(p2) == k1);
  REQUIRE_OK(ctx, sheaf_kernel_plan_run(p2, d, 3));
  CHECK(mm_err(A, B, C, 3, 5, 2) < 2e-5);
  sheaf_kernel_plan_free(p2);
  sheaf_kernel_plan_free(p1);
  sheaf_kernel_plan_free(p0);
  sheaf_kernel_free(k1);
  sheaf_kernel_free(k0);
}

/* A row kernel (dense, nothing bound but its arguments) with a tuning
 * record: sheaf_kernel_run's repeated calls (the kept signature) and a
 * plan both run the record's variant, and the record counts every run. */
TEST(kernel_plan_tuned_rows_counted) {
  if (!th_have_jit_cc("kernel_plan_tuned_rows_counted")) return;
  sheaf_ctx *ctx = th_ctx();
  sheaf_isa h = sheaf_cpu_isa();
  sheaf_isa isa = h == SHEAF_ISA_AVX2 || h == SHEAF_ISA_AVX512 ? SHEAF_ISA_AVX2 : SHEAF_ISA_SCALAR;
  const char *dir = th_tmp_path("plan-tune-rows");
  enum { M = 8, N = 72 };
  sheaf_kernel *k0 = compile_in(ctx, "ln", isa, dir);
  REQUIRE(k0);
  sh_sched_opts o = {.row_unroll = 2};
  sh_tune_rec r = rec_for(ctx, k0, isa, (int64_t[]){M, N}, &o);
  sheaf_kernel_free(k0);
  REQUIRE(load_rec(ctx, &r, "rows.tune"));
  sheaf_kernel *k = compile_in(ctx, "ln", isa, dir);
  REQUIRE(k);
  rowbufs B;
  rowbufs_init(&B);
  int64_t sx[2], sv[1];
  sheaf_kernel_arg a[4];
  row_args(true, &B, 0, M, N, sx, sv, a);
  for (int rep = 0; rep < 3; rep++) {
    CHECK(sh_kernel_fast_match(k, a, 4) == (rep > 0)); /* the second call on: the kept signature */
    memset(B.y[0], 0xff, sizeof(float) * M * N);
    REQUIRE_OK(ctx, sheaf_kernel_run(k, a, 4));
    CHECK(lr_rows_err(true, B.x[0], B.g[0], B.b[0], B.y[0], M, N) < 2e-5);
  }
  REQUIRE_EQ_INT(sh_kernel_n_variants(k), 1);
  sheaf_kernel_plan *p;
  REQUIRE_OK(ctx, sheaf_kernel_plan_make(k, a, 4, &p));
  CHECK(sh_kernel_plan_kernel(p) == sh_kernel_variant(k, 0));
  for (int rep = 0; rep < 2; rep++) {
    void *d[] = {B.x[1], B.g[1], B.b[1], B.y[1]};
    memset(B.y[1], 0xff, sizeof(float) * M * N);
    REQUIRE_OK(ctx, sheaf_kernel_plan_run(p, d, 4));
    CHECK(lr_rows_err(true, B.x[1], B.g[1], B.b[1], B.y[1], M, N) < 2e-5);
  }
  sheaf_kernel_tuning_use u[2];
  REQUIRE_EQ_INT((int)sheaf_kernel_tuning_stats(ctx, 2, u), 1);
  CHECK_EQ_INT((int)u[0].runs, 5); /* 3 calls (2 on the kept signature) and 2 plan runs */
  sheaf_kernel_plan_free(p);
  rowbufs_free(&B);
  sheaf_kernel_free(k);
}

/* The attention through the reference evaluator: its output for these
 * lengths and data. */
static void attn_ref(sheaf_ctx *ctx, sheaf_kernel *k, const int32_t *L, int B, const float *q, const float *kk,
                     const float *v, size_t n, int64_t D, float *out) {
  int64_t sL[] = {B}, s3[] = {B, -1, D};
  sh_kref_arg in[] = {{L, (size_t)B, 1, sL}, {q, n, 3, s3}, {kk, n, 3, s3}, {v, n, 3, s3}};
  sh_kref_out o = {out, n};
  CHECK_OK(ctx, sh_kernel_ref_run(ctx, sh_kernel_of(k), in, 4, &o, 1));
}

TEST(kernel_plan_ragged_attention) {
  if (!th_have_jit_cc("kernel_plan_ragged_attention")) return;
  sheaf_ctx *ctx = th_ctx();
  sheaf_kernel *k = compile(ctx, "attn");
  REQUIRE(k != NULL);
  enum { B = 6, D = 9 };
  int32_t L[B] = {3, 0, 1, 17, 8, 1}, L2[B], L3[B];
  int64_t T = 0;
  for (int b = 0; b < B; b++) T += L[b];
  memcpy(L2, L, sizeof L);
  memcpy(L3, L, sizeof L);
  L3[3] = 16, L3[4] = 9; /* the same total, other lengths */
  size_t n = (size_t)(T * D);
  float *q[2], *kk[2], *v[2], *o[2], *ref = malloc(sizeof(float) * n);
  for (int s = 0; s < 2; s++) {
    q[s] = malloc(sizeof(float) * n), kk[s] = malloc(sizeof(float) * n), v[s] = malloc(sizeof(float) * n);
    o[s] = malloc(sizeof(float) * n);
    fill(q[s], (int64_t)n, 1 + 10 * (uint64_t)s), fill(kk[s], (int64_t)n, 2 + 10 * (uint64_t)s);
    fill(v[s], (int64_t)n, 3 + 10 * (uint64_t)s);
  }
  int64_t sL[] = {B}, s3[] = {B, -1, D};
  sheaf_kernel_arg a[] = {{SHEAF_KERNEL_I32, L, B, 1, sL}, {SHEAF_KERNEL_F32, NULL, n, 3, s3},
                          {SHEAF_KERNEL_F32, NULL, n, 3, s3}, {SHEAF_KERNEL_F32, NULL, n, 3, s3},
                          {SHEAF_KERNEL_F32, NULL, n, 0, NULL}};
  sheaf_kernel_plan *p, *bad = (sheaf_kernel_plan *)1;
  REQUIRE_OK(ctx, sheaf_kernel_plan_make(k, a, 5, &p));
  for (int rep = 0; rep < 4; rep++) {
    int s = rep % 2;
    void *d[] = {rep < 2 ? L : L2, q[s], kk[s], v[s], o[s]}; /* the same lengths, maybe elsewhere */
    memset(o[s], 0xff, sizeof(float) * n);
    REQUIRE_OK(ctx, sheaf_kernel_plan_run(p, d, 5));
    attn_ref(ctx, k, L, B, q[s], kk[s], v[s], n, D, ref);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
      double e = fabs(o[s][i] - ref[i]) / fmax(1.0, fabs(ref[i]));
      if (!(e <= worst)) worst = e;
    }
    CHECK(worst < 2e-5);
  }
  /* other lengths are another shape: refused, naming the input */
  void *d3[] = {L3, q[0], kk[0], v[0], o[0]};
  CHECK_STATUS(ctx, sheaf_kernel_plan_run(p, d3, 5), SHEAF_ERR_SHAPE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "lengths input 'L'");
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "L[3] = 16");
  /* a ragged input's element count is checked against the lengths (make and run alike) */
  a[2].numel = n - 1;
  CHECK_STATUS(ctx, sheaf_kernel_plan_make(k, a, 5, &bad), SHEAF_ERR_SHAPE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "input 'k' has");
  sheaf_kernel_arg r[5];
  memcpy(r, a, sizeof r);
  r[1].data = q[0], r[2].data = kk[0], r[3].data = v[0], r[4].data = o[0];
  CHECK_STATUS(ctx, sheaf_kernel_run(k, r, 5), SHEAF_ERR_SHAPE);
  r[2].numel = n;
  CHECK_OK(ctx, sheaf_kernel_run(k, r, 5));
  a[2].numel = n;
  /* the lengths' data is needed at make (their values are the shape) */
  a[0].data = NULL;
  bad = (sheaf_kernel_plan *)1;
  CHECK_STATUS(ctx, sheaf_kernel_plan_make(k, a, 5, &bad), SHEAF_ERR_INVALID_ARG);
  CHECK(bad == NULL);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "'L'");
  sheaf_kernel_plan_free(p);
  for (int s = 0; s < 2; s++) free(q[s]), free(kk[s]), free(v[s]), free(o[s]);
  free(ref);
  sheaf_kernel_free(k);
}

TEST(kernel_plan_argument_errors) {
  if (!th_have_jit_cc("kernel_plan_argument_errors")) return;
  sheaf_ctx *ctx = th_ctx();
  sheaf_kernel *k = compile(ctx, "ln");
  REQUIRE(k != NULL);
  enum { M = 6, N = 40 };
  static float x[M * N], g[N], b[N], y[M * N];
  fill(x, M * N, 1), fill(g, N, 2), fill(b, N, 3);
  int64_t sx[] = {M, N}, sv[] = {N}, sx2[] = {M * 2, N / 2}, sx3[] = {M, N, 1};
  sheaf_kernel_arg a[] = {{SHEAF_KERNEL_F32, x, M * N, 2, sx}, {SHEAF_KERNEL_F32, g, N, 1, sv},
                          {SHEAF_KERNEL_F32, b, N, 1, sv}, {SHEAF_KERNEL_F32, y, M * N, 0, NULL}};
  sheaf_kernel_plan *p = NULL;
  /* make: the checks of sheaf_kernel_run, with its statuses */
  CHECK_STATUS(ctx, sheaf_kernel_plan_make(NULL, a, 4, &p), SHEAF_ERR_INVALID_ARG);
  CHECK_STATUS(ctx, sheaf_kernel_plan_make(k, a, 4, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "out is NULL");
  CHECK_STATUS(ctx, sheaf_kernel_plan_make(k, NULL, 4, &p), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "args is NULL");
  CHECK_STATUS(ctx, sheaf_kernel_plan_make(k, a, 3, &p), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "takes 4 arguments");
  sheaf_kernel_arg e[4];
  memcpy(e, a, sizeof a);
  e[3].numel = M * N - 1;
  CHECK_STATUS(ctx, sheaf_kernel_plan_make(k, e, 4, &p), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "output 'out'");
  memcpy(e, a, sizeof a);
  e[0].dtype = SHEAF_KERNEL_I32;
  CHECK_STATUS(ctx, sheaf_kernel_plan_make(k, e, 4, &p), SHEAF_ERR_INVALID_ARG);
  memcpy(e, a, sizeof a);
  e[0].shape = sx2; /* D no longer matches g */
  CHECK_STATUS(ctx, sheaf_kernel_plan_make(k, e, 4, &p), SHEAF_ERR_SHAPE);
  memcpy(e, a, sizeof a);
  e[0].shape = sx3, e[0].rank = 3;
  CHECK_STATUS(ctx, sheaf_kernel_plan_make(k, e, 4, &p), SHEAF_ERR_SHAPE);
  memcpy(e, a, sizeof a);
  e[1].shape = NULL;
  CHECK_STATUS(ctx, sheaf_kernel_plan_make(k, e, 4, &p), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "NULL shape");
  memcpy(e, a, sizeof a);
  e[1].numel = N + 1;
  CHECK_STATUS(ctx, sheaf_kernel_plan_make(k, e, 4, &p), SHEAF_ERR_SHAPE);
  CHECK(p == NULL);
  /* run: the count, NULL pointers (naming the argument), a NULL plan */
  REQUIRE_OK(ctx, sheaf_kernel_plan_make(k, a, 4, &p));
  void *d[] = {x, g, b, y};
  CHECK_STATUS(ctx, sheaf_kernel_plan_run(NULL, d, 4), SHEAF_ERR_INVALID_ARG);
  CHECK_STATUS(ctx, sheaf_kernel_plan_run(p, NULL, 4), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "data is NULL");
  CHECK_STATUS(ctx, sheaf_kernel_plan_run(p, d, 3), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "planned with 4 arguments");
  CHECK_STATUS(ctx, sheaf_kernel_plan_run(p, d, 5), SHEAF_ERR_INVALID_ARG);
  static const char *const names[] = {"input 'x' (argument 0)", "input 'g' (argument 1)", "input 'b' (argument 2)",
                                      "output 'out' (argument 3)"};
  for (int i = 0; i < 4; i++) {
    void *dn[4];
    memcpy(dn, d, sizeof d);
    dn[i] = NULL;
    CHECK_STATUS(ctx, sheaf_kernel_plan_run(p, dn, 4), SHEAF_ERR_INVALID_ARG);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), names[i]);
  }
  /* and after every error the plan still runs, and right */
  memset(y, 0, sizeof y);
  REQUIRE_OK(ctx, sheaf_kernel_plan_run(p, d, 4));
  CHECK(lr_rows_err(true, x, g, b, y, M, N) < 2e-5);
  sheaf_kernel_plan_free(p);
  sheaf_kernel_plan_free(NULL);
  sheaf_kernel_free(k);
}

/* Every allocation of a make (ragged: lengths, scratch, offsets; and a
 * packed weight) failing in turn: SHEAF_ERR_NOMEM, nothing leaked (the
 * harness's allocator checks), then a make that works. */
TEST(kernel_plan_make_out_of_memory) {
  if (!th_have_jit_cc("kernel_plan_make_out_of_memory")) return;
  sheaf_ctx *ctx = th_ctx();
  static const char *const kernels[] = {"attn", "mm"};
  for (int kk = 0; kk < 2; kk++) {
    sheaf_kernel *k = compile(ctx, kernels[kk]);
    REQUIRE(k != NULL);
    int32_t L[3] = {2, 0, 5};
    int64_t sL[] = {3}, s3[] = {3, -1, 4}, sa[] = {5, 7}, sb[] = {7, 9};
    sheaf_kernel_arg at[] = {{SHEAF_KERNEL_I32, L, 3, 1, sL}, {SHEAF_KERNEL_F32, NULL, 28, 3, s3},
                             {SHEAF_KERNEL_F32, NULL, 28, 3, s3}, {SHEAF_KERNEL_F32, NULL, 28, 3, s3},
                             {SHEAF_KERNEL_F32, NULL, 28, 0, NULL}};
    sheaf_kernel_arg am[] = {{SHEAF_KERNEL_F32, NULL, 35, 2, sa}, {SHEAF_KERNEL_F32, NULL, 63, 2, sb},
                             {SHEAF_KERNEL_F32, NULL, 45, 0, NULL}};
    sheaf_kernel_arg *a = kk ? am : at;
    int na = kk ? 3 : 5;
    bool done = false;
    for (long fail = 1; fail < 64 && !done; fail++) {
      sheaf_kernel_plan *p = NULL;
      th_fail_alloc_at(fail);
      sheaf_status st = sheaf_kernel_plan_make(k, a, na, &p);
      th_fail_alloc_at(0);
      if (st == SHEAF_OK) {
        done = true;
      } else {
        CHECK_EQ_INT(st, SHEAF_ERR_NOMEM);
        CHECK(p == NULL);
      }
      sheaf_kernel_plan_free(p);
    }
    CHECK(done);
    sheaf_kernel_free(k);
  }
}

typedef struct thr {
  sheaf_ctx *ctx;
  sheaf_kernel *k;
  int id;
  double worst;
  sheaf_status st;
} thr;

/* Thread id's plan (its own shape) run 200 times on fresh data, with
 * sheaf_kernel_run on the same kernel every 10th time. */
static void *own_plan(void *arg) {
  thr *t = arg;
  int64_t M = 2 + t->id * 5, N = 33 + t->id * 64;
  rowbufs B;
  rowbufs_init(&B);
  int64_t sx[2], sv[1];
  sheaf_kernel_arg a[4];
  row_args(true, &B, 0, M, N, sx, sv, a);
  sheaf_kernel_plan *p;
  if ((t->st = sheaf_kernel_plan_make(t->k, a, 4, &p))) {
    rowbufs_free(&B);
    return NULL;
  }
  for (int i = 0; i < 200 && !t->st; i++) {
    int s = i % 2;
    fill(B.x[s], M * N, (uint64_t)(i * 7 + t->id));
    void *d[] = {B.x[s], B.g[s], B.b[s], B.y[s]};
    if ((t->st = sheaf_kernel_plan_run(p, d, 4))) break;
    double e = lr_rows_err(true, B.x[s], B.g[s], B.b[s], B.y[s], M, N);
    if (!(e <= t->worst)) t->worst = e;
    if (i % 10 == 0) {
      row_args(true, &B, s, M + 1, N, sx, sv, a);
      if ((t->st = sheaf_kernel_run(t->k, a, 4))) break;
      e = lr_rows_err(true, B.x[s], B.g[s], B.b[s], B.y[s], M + 1, N);
      if (!(e <= t->worst)) t->worst = e;
    }
  }
  sheaf_kernel_plan_free(p);
  rowbufs_free(&B);
  return NULL;
}

TEST(kernel_plan_two_threads) {
  if (!th_have_jit_cc("kernel_plan_two_threads")) return;
  sheaf_ctx *ctx = th_ctx();
  sheaf_kernel *k = compile(ctx, "ln");
  REQUIRE(k != NULL);
  thr t[2] = {{ctx, k, 0, 0, SHEAF_OK}, {ctx, k, 1, 0, SHEAF_OK}};
  pthread_t h;
  REQUIRE(pthread_create(&h, NULL, own_plan, &t[1]) == 0);
  own_plan(&t[0]);
  pthread_join(h, NULL);
  CHECK_EQ_INT(t[0].st, SHEAF_OK);
  CHECK_EQ_INT(t[1].st, SHEAF_OK);
  CHECK(t[0].worst < 2e-5);
  CHECK(t[1].worst < 2e-5);
  sheaf_kernel_free(k);
}
