/*
 * test_codegen_rows.c — the primitives that make row kernels fast
 * (src/codegen/sched_hoist.c, sched_dist.c) and the default schedule's
 * uses of them: hoist (loop-invariant costly values and reciprocals),
 * share (a temporary in its consumer's storage, in place), distribute
 * (a reduction loop moved outside a stride-1 spatial loop). Golden IR
 * fragments, the interpreter against plain C before and after, sizes
 * below, at, above and at multiples of the vector tiles (8, 16, 32), and
 * errors on bad uses (the kernel unchanged).
 */
#include <math.h>
#include <stdlib.h>

#include "codegen/lir_int.h"
#include "codegen/lir_sched.h"
#include "harness.h"
#include "lir_build.h"
#include "lir_ref.h"

static const int64_t SIZES[] = {1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 65};

static const char *body_of(sheaf_ctx *ctx, const sh_lir_kernel *k) {
  static char t[32768];
  sh_buf b;
  sh_buf_init(&b, ctx);
  sh_lir_print(k, &b);
  const char *p = sh_buf_cstr(&b);
  while (*p && (strncmp(p, "kernel ", 7) == 0 || strncmp(p, "buffer ", 7) == 0)) p = strchr(p, '\n') + 1;
  snprintf(t, sizeof t, "%s", p);
  sh_buf_free(&b);
  return t;
}

/* softmax with its exp in a temporary e read twice (as lowering makes it):
 * for i: mx = max x; e = exp(x - mx); sm = sum e; y = e / sm; and when
 * `late`, z = e after y (so e cannot live in y). */
static sh_lir_kernel *softmax_temp(sheaf_ctx *ctx, bool late) {
  sh_lir_kernel *k;
  if (sh_lir_create(ctx, "smt", &k)) return NULL;
  sh_lir_expr M = sh_lir_sz(k, sh_lir_size(k, "M")), N = sh_lir_sz(k, sh_lir_size(k, "N"));
  sh_lir_buf x = sh_lir_buffer(k, "x", SH_LIR_F32, SH_LIR_IN, 2, (sh_lir_expr[]){M, N});
  sh_lir_buf y = sh_lir_buffer(k, "y", SH_LIR_F32, SH_LIR_OUT, 2, (sh_lir_expr[]){M, N});
  sh_lir_buf z = late ? sh_lir_buffer(k, "z", SH_LIR_F32, SH_LIR_OUT, 2, (sh_lir_expr[]){M, N}) : SH_LIR_NONE;
  sh_lir_buf e = sh_lir_buffer(k, "e", SH_LIR_F32, SH_LIR_TEMP, 2, (sh_lir_expr[]){M, N});
  sh_lir_buf mx = sh_lir_buffer(k, "mx", SH_LIR_F32, SH_LIR_TEMP, 1, &M);
  sh_lir_buf sm = sh_lir_buffer(k, "sm", SH_LIR_F32, SH_LIR_TEMP, 1, &M);
  sh_lir_stmt i = sh_lir_loop(k, sh_lir_root(k), "i", M);
  sh_lir_expr vi = sh_lir_lv(k, i);
  sh_lir_store1(k, i, mx, vi, sh_lir_flt(k, -INFINITY), SH_LIR_COMBINE_NONE);
  sh_lir_stmt j1 = sh_lir_loop(k, i, "j", N);
  sh_lir_store1(k, j1, mx, vi, sh_lir_load2(k, x, vi, sh_lir_lv(k, j1)), SH_LIR_COMBINE_MAX);
  sh_lir_stmt j2 = sh_lir_loop(k, i, "j", N);
  sh_lir_expr vj = sh_lir_lv(k, j2);
  sh_lir_store2(k, j2, e, vi, vj,
                sh_lir_un(k, SH_LIR_FN_EXP, sh_lir_sub(k, sh_lir_load2(k, x, vi, vj), sh_lir_load1(k, mx, vi))),
                SH_LIR_COMBINE_NONE);
  sh_lir_store1(k, i, sm, vi, sh_lir_flt(k, 0), SH_LIR_COMBINE_NONE);
  sh_lir_stmt j3 = sh_lir_loop(k, i, "j", N);
  sh_lir_store1(k, j3, sm, vi, sh_lir_load2(k, e, vi, sh_lir_lv(k, j3)), SH_LIR_COMBINE_ADD);
  sh_lir_stmt j4 = sh_lir_loop(k, i, "j", N);
  vj = sh_lir_lv(k, j4);
  sh_lir_store2(k, j4, y, vi, vj, sh_lir_bin(k, SH_LIR_OP_DIV, sh_lir_load2(k, e, vi, vj), sh_lir_load1(k, sm, vi)),
                SH_LIR_COMBINE_NONE);
  if (late) {
    sh_lir_stmt j5 = sh_lir_loop(k, i, "j", N);
    vj = sh_lir_lv(k, j5);
    sh_lir_store2(k, j5, z, vi, vj, sh_lir_load2(k, e, vi, vj), SH_LIR_COMBINE_NONE);
  }
  return lb_done(k);
}

static bool check_softmax(sheaf_ctx *ctx, sh_lir_kernel *k, const char *what) {
  uint64_t seed = 5;
  bool ok = true;
  for (size_t s = 0; s < SH_ARRAY_LEN(SIZES); s++) {
    int64_t M = 3, N = SIZES[s], sizes[2] = {M, N};
    float *x = th_frand_fill(&seed, M * N), *y = malloc(sizeof(float) * (size_t)(M * N)),
          *r = malloc(sizeof(float) * (size_t)(M * N));
    ok &= sh_lir_run(k, sizes, (sh_lir_arg[]){{.data = x}, {.data = y}}) == SHEAF_OK;
    lr_softmax(M, N, x, r);
    ok &= lr_close(what, y, r, M * N, 1e-5);
    free(x), free(y), free(r);
  }
  (void)ctx;
  return ok;
}

TEST(codegen_rows_hoist) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k = lb_softmax(ctx, "sm");
  REQUIRE(k);
  int n;
  REQUIRE_OK(ctx, sh_sched_hoist(k, sh_lir_root(k), &n));
  CHECK_EQ_INT(n, 2); /* mx[i] crossing j2 (a plain load, a serial loop), 1 / sm[i] */
  CHECK_CONTAINS(body_of(ctx, k), "  alloc h0[1]:\n"
                                  "    h0[0] = mx[i]\n"
                                  "    for j2 in 0..N:\n"
                                  "      y[i, j2] = exp(x[i, j2] - h0[0])\n");
  CHECK_CONTAINS(body_of(ctx, k), "  alloc h1[1]:\n"
                                  "    h1[0] = 1.0 / sm[i]\n"
                                  "    for j3 in 0..N:\n"
                                  "      y[i, j3] = y[i, j3] * h1[0]\n");
  CHECK(check_softmax(ctx, k, "hoisted softmax"));
  sh_lir_free(k);
  /* across split and vectorized loops; the peeled tail gets its own */
  k = lb_softmax(ctx, "sm");
  REQUIRE(k);
  sh_lir_stmt o, in, vo, vl;
  REQUIRE_OK(ctx, sh_sched_split(k, sh_lir_find_loop(k, "j3"), 16, SH_SCHED_TAIL_PEEL, &o, &in, NULL));
  REQUIRE_OK(ctx, sh_sched_split(k, in, 8, SH_SCHED_TAIL_GUARD, &vo, &vl, NULL));
  REQUIRE_OK(ctx, sh_sched_unroll(k, vo));
  REQUIRE_OK(ctx, sh_sched_vectorize(k, vl, 8));
  REQUIRE_OK(ctx, sh_sched_hoist(k, sh_lir_root(k), &n));
  CHECK_EQ_INT(n, 3);
  CHECK_CONTAINS(body_of(ctx, k), "  alloc h1[1]:\n    h1[0] = 1.0 / sm[i]\n    for j3_o in 0..N / 16:\n");
  CHECK_CONTAINS(body_of(ctx, k), "  alloc h2[1]:\n    h2[0] = 1.0 / sm[i]\n    for j3_t in 0..N - N / 16 * 16:\n");
  CHECK(check_softmax(ctx, k, "hoisted vector softmax"));
  sh_lir_free(k);
  /* layernorm: 1 / float(N) leaves the row loop; rsqrt(rs[i] / N + eps)
   * stays inside it (rs is stored there) */
  k = lb_layernorm(ctx, "ln", 1e-5f);
  REQUIRE(k);
  REQUIRE_OK(ctx, sh_sched_hoist(k, sh_lir_root(k), &n));
  const char *t = body_of(ctx, k);
  CHECK_CONTAINS(t, "alloc h0[1]:\n  h0[0] = 1.0 / float(N)\n  alloc h");
  CHECK_CONTAINS(t, "[0] = 1.0 / float(N)\n    for i in 0..M:\n");
  CHECK_CONTAINS(t, "mu[i] = mu[i] * h0[0]\n");
  CHECK_CONTAINS(t, "rs[i] = rsqrt(rs[i] * h");
  uint64_t seed = 3;
  for (size_t s = 0; s < SH_ARRAY_LEN(SIZES); s++) {
    int64_t M = 2, N = SIZES[s], sizes[2] = {M, N};
    float *x = th_frand_fill(&seed, M * N), *g = th_frand_fill(&seed, N), *b = th_frand_fill(&seed, N),
          *y = malloc(sizeof(float) * (size_t)(M * N)), *r = malloc(sizeof(float) * (size_t)(M * N));
    CHECK_OK(ctx, sh_lir_run(k, sizes, (sh_lir_arg[]){{.data = x}, {.data = g}, {.data = b}, {.data = y}}));
    lr_layernorm(M, N, x, g, b, 1e-5f, r);
    CHECK(lr_close("hoisted layernorm", y, r, M * N, 1e-5));
    free(x), free(g), free(b), free(y), free(r);
  }
  /* nothing to do a second time; never across a parallel loop */
  REQUIRE_OK(ctx, sh_sched_hoist(k, sh_lir_root(k), &n));
  CHECK_EQ_INT(n, 0);
  sh_lir_free(k);
  k = lb_layernorm(ctx, "ln", 1e-5f);
  REQUIRE(k);
  REQUIRE_OK(ctx, sh_sched_parallel(k, sh_lir_find_loop(k, "i")));
  REQUIRE_OK(ctx, sh_sched_hoist(k, sh_lir_root(k), &n));
  CHECK(strstr(body_of(ctx, k), "alloc h0[1]:\n  h0[0] = 1.0 / float(N)\n") == NULL);
  CHECK_CONTAINS(body_of(ctx, k), "for i in 0..M parallel:\n");
  CHECK_STATUS(ctx, sh_sched_hoist(k, 100000, &n), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "hoist: statement 100000 is not in the kernel");
  sh_lir_free(k);
}

TEST(codegen_rows_share) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k = softmax_temp(ctx, false);
  REQUIRE(k);
  sh_lir_buf e = sh_lir_find_buffer(k, "e"), y = sh_lir_find_buffer(k, "y"), x = sh_lir_find_buffer(k, "x");
  CHECK(check_softmax(ctx, k, "softmax with a temporary"));
  CHECK_STATUS(ctx, sh_sched_share(k, y, e), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "share of y: only a dense temporary");
  CHECK_STATUS(ctx, sh_sched_share(k, e, x), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "x is not a dense written buffer");
  REQUIRE_OK(ctx, sh_sched_share(k, e, y));
  CHECK(k->bufs[e].inlined);
  const char *t = body_of(ctx, k);
  CHECK_CONTAINS(t, "y[i, j2] = exp(x[i, j2] - mx[i])\n");
  CHECK_CONTAINS(t, "sm[i] += y[i, j3]\n");
  CHECK_CONTAINS(t, "y[i, j4] = y[i, j4] / sm[i]\n");
  CHECK(check_softmax(ctx, k, "shared softmax"));
  sh_lir_free(k);
  /* e read after y's store: refused, kernel unchanged */
  k = softmax_temp(ctx, true);
  REQUIRE(k);
  e = sh_lir_find_buffer(k, "e"), y = sh_lir_find_buffer(k, "y");
  CHECK_STATUS(ctx, sh_sched_share(k, e, y), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "share of e in y: e is read after the store");
  CHECK(!k->bufs[e].inlined);
  CHECK_OK(ctx, sh_lir_verify(k));
  sh_lir_free(k);
  /* the default schedule shares it at every level (one exp per element) */
  static const sheaf_isa levels[] = {SHEAF_ISA_SCALAR, SHEAF_ISA_AVX2, SHEAF_ISA_AVX512};
  for (size_t l = 0; l < SH_ARRAY_LEN(levels); l++) {
    k = softmax_temp(ctx, false);
    REQUIRE(k);
    REQUIRE_OK(ctx, sh_sched_default(k, levels[l]));
    t = body_of(ctx, k);
    const char *p = strstr(t, "exp_nonpos(");
    CHECK(p != NULL);
    if (levels[l] == SHEAF_ISA_SCALAR) CHECK(p && strstr(p + 1, "exp_nonpos(") == NULL);
    CHECK(check_softmax(ctx, k, "default softmax with a temporary"));
    sh_lir_free(k);
  }
}

/* o[i, d] = sum_j e[i, j] · v[j, d] (the attention's second product). */
static sh_lir_kernel *ev_kernel(sheaf_ctx *ctx, bool bad) {
  sh_lir_kernel *k;
  if (sh_lir_create(ctx, "ev", &k)) return NULL;
  sh_lir_expr M = sh_lir_sz(k, sh_lir_size(k, "M")), J = sh_lir_sz(k, sh_lir_size(k, "J")),
              D = sh_lir_sz(k, sh_lir_size(k, "D"));
  sh_lir_buf e = sh_lir_buffer(k, "e", SH_LIR_F32, SH_LIR_IN, 2, (sh_lir_expr[]){M, J});
  sh_lir_buf v = sh_lir_buffer(k, "v", SH_LIR_F32, SH_LIR_IN, 2, (sh_lir_expr[]){J, D});
  sh_lir_buf o = sh_lir_buffer(k, "o", SH_LIR_F32, SH_LIR_OUT, 2, (sh_lir_expr[]){M, D});
  sh_lir_stmt i = sh_lir_loop(k, sh_lir_root(k), "i", M);
  sh_lir_stmt d = sh_lir_loop(k, i, "d", D);
  sh_lir_expr vi = sh_lir_lv(k, i), vd = sh_lir_lv(k, d);
  /* bad: the init writes o[i, 0], which the reduction does not index alike */
  sh_lir_store2(k, d, o, vi, bad ? sh_lir_int(k, 0) : vd, sh_lir_flt(k, 0), SH_LIR_COMBINE_NONE);
  sh_lir_stmt j = sh_lir_loop(k, d, "j", J);
  sh_lir_expr vj = sh_lir_lv(k, j);
  sh_lir_store2(k, j, o, vi, vd, sh_lir_mul(k, sh_lir_load2(k, e, vi, vj), sh_lir_load2(k, v, vj, vd)),
                SH_LIR_COMBINE_ADD);
  return lb_done(k);
}

static bool check_ev(sheaf_ctx *ctx, sh_lir_kernel *k, const char *what) {
  uint64_t seed = 9;
  bool ok = true;
  static const int64_t js[] = {0, 1, 17};
  for (size_t s = 0; s < SH_ARRAY_LEN(SIZES); s++)
    for (size_t q = 0; q < SH_ARRAY_LEN(js); q++) {
      int64_t M = 2, J = js[q], D = SIZES[s], sizes[3] = {M, J, D};
      float *e = th_frand_fill(&seed, M * J), *v = th_frand_fill(&seed, J * D);
      float *o = malloc(sizeof(float) * (size_t)(M * D)), *r = malloc(sizeof(float) * (size_t)(M * D));
      for (int64_t i = 0; i < M; i++)
        for (int64_t d = 0; d < D; d++) {
          double a = 0;
          for (int64_t j = 0; j < J; j++) a += (double)e[i * J + j] * v[j * D + d];
          r[i * D + d] = (float)a;
        }
      ok &= sh_lir_run(k, sizes, (sh_lir_arg[]){{.data = e}, {.data = v}, {.data = o}}) == SHEAF_OK;
      ok &= lr_close(what, o, r, M * D, 1e-5);
      free(e), free(v), free(o), free(r);
    }
  (void)ctx;
  return ok;
}

TEST(codegen_rows_distribute) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k = ev_kernel(ctx, false);
  REQUIRE(k);
  CHECK(check_ev(ctx, k, "e·v"));
  sh_lir_stmt loops[4];
  int n;
  REQUIRE_OK(ctx, sh_sched_distribute(k, sh_lir_find_loop(k, "d"), loops, 4, &n));
  CHECK_EQ_INT(n, 2);
  CHECK_CONTAINS(body_of(ctx, k), "for i in 0..M:\n"
                                  "  for d in 0..D:\n"
                                  "    o[i, d] = 0.0\n"
                                  "  for d2 in 0..D:\n"
                                  "    for j2 in 0..J:\n"
                                  "      o[i, d2] += e[i, j2] * v[j2, d2]\n");
  CHECK(check_ev(ctx, k, "distributed e·v"));
  REQUIRE_OK(ctx, sh_sched_reorder(k, 2, (sh_lir_stmt[]){k->st[loops[1]].body, loops[1]}));
  CHECK_CONTAINS(body_of(ctx, k), "  for j2 in 0..J:\n    for d2 in 0..D:\n      o[i, d2] += e[i, j2] * v[j2, d2]\n");
  CHECK(check_ev(ctx, k, "interchanged e·v"));
  CHECK_STATUS(ctx, sh_sched_distribute(k, loops[0], NULL, 0, &n), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "distribute of loop d: its body has one statement");
  sh_lir_free(k);
  k = ev_kernel(ctx, true);
  REQUIRE(k);
  CHECK_STATUS(ctx, sh_sched_distribute(k, sh_lir_find_loop(k, "d"), NULL, 0, &n), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "distribute of loop d: o is accessed at different indices");
  CHECK_OK(ctx, sh_lir_verify(k));
  sh_lir_free(k);
  /* the default schedule moves j outside d and vectorizes d, every level */
  static const sheaf_isa levels[] = {SHEAF_ISA_SCALAR, SHEAF_ISA_AVX2, SHEAF_ISA_AVX512};
  for (size_t l = 0; l < SH_ARRAY_LEN(levels); l++) {
    k = ev_kernel(ctx, false);
    REQUIRE(k);
    REQUIRE_OK(ctx, sh_sched_default(k, levels[l]));
    if (levels[l] != SHEAF_ISA_SCALAR) CHECK_CONTAINS(body_of(ctx, k), " vector(");
    CHECK(check_ev(ctx, k, "default e·v"));
    sh_lir_free(k);
  }
}

/* The combined accumulators of the default schedule's row reductions:
 * max and sum over every size around the 4 × 8 and 4 × 16 tiles. */
TEST(codegen_rows_default_reductions) {
  sheaf_ctx *ctx = th_ctx();
  static const sheaf_isa levels[] = {SHEAF_ISA_SCALAR, SHEAF_ISA_AVX2, SHEAF_ISA_AVX512};
  for (size_t l = 0; l < SH_ARRAY_LEN(levels); l++) {
    sh_lir_kernel *k = lb_softmax(ctx, "sm");
    REQUIRE(k);
    REQUIRE_OK(ctx, sh_sched_default(k, levels[l]));
    if (levels[l] == SHEAF_ISA_AVX2) {
      const char *t = body_of(ctx, k);
      CHECK_CONTAINS(t, "for u_cmb in 0..3 unroll:\n");
      CHECK_CONTAINS(t, "mx_r_acc[0, l_cmb] max= mx_r_acc[u_cmb + 1, l_cmb]\n");
      CHECK_CONTAINS(t, "= 1.0 / sm_r[0]\n");
    }
    CHECK(check_softmax(ctx, k, "default softmax"));
    sh_lir_free(k);
  }
}

/* exp(x - max x) is proven nonpositive; exp of anything else is not */
TEST(codegen_rows_exp_ranges) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k = softmax_temp(ctx, false);
  REQUIRE(k);
  int n;
  REQUIRE_OK(ctx, sh_sched_exp_ranges(k, &n));
  CHECK_EQ_INT(n, 1);
  CHECK_CONTAINS(body_of(ctx, k), "e[i, j2] = exp_nonpos(x[i, j2] - mx[i])\n");
  CHECK(check_softmax(ctx, k, "softmax with exp_nonpos"));
  REQUIRE_OK(ctx, sh_sched_exp_ranges(k, &n));
  CHECK_EQ_INT(n, 0);
  sh_lir_free(k);
  /* the sum's exp(x - sm) is no max: unchanged; nor exp(mx - x) */
  k = lb_softmax(ctx, "sm");
  REQUIRE(k);
  sh_lir_buf x = sh_lir_find_buffer(k, "x"), y = sh_lir_find_buffer(k, "y"), mx = sh_lir_find_buffer(k, "mx");
  sh_lir_buf sm = sh_lir_find_buffer(k, "sm");
  sh_lir_stmt i = sh_lir_find_loop(k, "i");
  sh_lir_stmt j = sh_lir_loop(k, i, "j", sh_lir_sz(k, 1));
  sh_lir_expr vi = sh_lir_lv(k, i), vj = sh_lir_lv(k, j);
  sh_lir_store2(k, j, y, vi, vj,
                sh_lir_un(k, SH_LIR_FN_EXP, sh_lir_sub(k, sh_lir_load1(k, mx, vi), sh_lir_load2(k, x, vi, vj))),
                SH_LIR_COMBINE_NONE);
  sh_lir_store2(k, j, y, vi, vj,
                sh_lir_un(k, SH_LIR_FN_EXP, sh_lir_sub(k, sh_lir_load2(k, x, vi, vj), sh_lir_load1(k, sm, vi))),
                SH_LIR_COMBINE_NONE);
  REQUIRE_OK(ctx, sh_lir_status(k));
  REQUIRE_OK(ctx, sh_sched_exp_ranges(k, &n));
  CHECK_EQ_INT(n, 1); /* lb_softmax's own exp(x - mx) only */
  CHECK_CONTAINS(body_of(ctx, k), "y[i, j4] = exp(mx[i] - x[i, j4])\n");
  CHECK_CONTAINS(body_of(ctx, k), "y[i, j4] = exp(x[i, j4] - sm[i])\n");
  sh_lir_free(k);
}

/* mean(x) = sum(x / N): the division leaves the sum */
TEST(codegen_rows_factor) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k;
  REQUIRE_OK(ctx, sh_lir_create(ctx, "mean", &k));
  sh_lir_expr M = sh_lir_sz(k, sh_lir_size(k, "M")), N = sh_lir_sz(k, sh_lir_size(k, "N"));
  sh_lir_buf x = sh_lir_buffer(k, "x", SH_LIR_F32, SH_LIR_IN, 2, (sh_lir_expr[]){M, N});
  sh_lir_buf mu = sh_lir_buffer(k, "mu", SH_LIR_F32, SH_LIR_OUT, 1, &M);
  sh_lir_buf sq = sh_lir_buffer(k, "sq", SH_LIR_F32, SH_LIR_OUT, 1, &M);
  sh_lir_stmt i = sh_lir_loop(k, sh_lir_root(k), "i", M);
  sh_lir_expr vi = sh_lir_lv(k, i);
  sh_lir_store1(k, i, mu, vi, sh_lir_flt(k, 0), SH_LIR_COMBINE_NONE);
  sh_lir_stmt j = sh_lir_loop(k, i, "j", N);
  sh_lir_store1(k, j, mu, vi, sh_lir_bin(k, SH_LIR_OP_DIV, sh_lir_load2(k, x, vi, sh_lir_lv(k, j)), sh_lir_cast(k, N)),
                SH_LIR_COMBINE_ADD);
  /* sq[i] starts at 1: not factored (the post-scale would scale the 1) */
  sh_lir_store1(k, i, sq, vi, sh_lir_flt(k, 1), SH_LIR_COMBINE_NONE);
  sh_lir_stmt j2 = sh_lir_loop(k, i, "j", N);
  sh_lir_store1(k, j2, sq, vi, sh_lir_mul(k, sh_lir_flt(k, 2), sh_lir_load2(k, x, vi, sh_lir_lv(k, j2))),
                SH_LIR_COMBINE_ADD);
  REQUIRE_OK(ctx, sh_lir_status(k));
  int n;
  REQUIRE_OK(ctx, sh_sched_factor(k, &n));
  CHECK_EQ_INT(n, 1);
  CHECK_CONTAINS(body_of(ctx, k), "  mu[i] = 0.0\n  for j in 0..N:\n    mu[i] += x[i, j]\n  mu[i] = mu[i] / float(N)\n");
  CHECK_CONTAINS(body_of(ctx, k), "    sq[i] += 2.0 * x[i, j2]\n");
  REQUIRE_OK(ctx, sh_sched_default(k, SHEAF_ISA_AVX2));
  uint64_t seed = 11;
  for (size_t s = 0; s < SH_ARRAY_LEN(SIZES); s++) {
    int64_t Mv = 3, Nv = SIZES[s], sizes[2] = {Mv, Nv};
    float *xv = th_frand_fill(&seed, Mv * Nv), got[6], want[6];
    CHECK_OK(ctx, sh_lir_run(k, sizes, (sh_lir_arg[]){{.data = xv}, {.data = got}, {.data = got + 3}}));
    for (int64_t r = 0; r < Mv; r++) {
      double a = 0, b = 1;
      for (int64_t c = 0; c < Nv; c++) a += xv[r * Nv + c], b += 2.0 * xv[r * Nv + c];
      want[r] = (float)(a / (double)Nv), want[3 + r] = (float)b;
    }
    CHECK(lr_close("factored mean", got, want, 6, 1e-5));
    free(xv);
  }
  sh_lir_free(k);
}

/* per-row scalars (rank-1 temporaries read at the row only) into registers */
TEST(codegen_rows_contract) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k = lb_softmax(ctx, "sm");
  REQUIRE(k);
  sh_lir_buf mx = sh_lir_find_buffer(k, "mx"), sm = sh_lir_find_buffer(k, "sm"), y = sh_lir_find_buffer(k, "y");
  CHECK_STATUS(ctx, sh_sched_contract(k, y), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "contract of y: not a dense f32 temporary of rank 1");
  REQUIRE_OK(ctx, sh_sched_contract(k, mx));
  REQUIRE_OK(ctx, sh_sched_contract(k, sm));
  const char *t = body_of(ctx, k);
  CHECK_CONTAINS(t, "for i in 0..M:\n  alloc sm_r[1]:\n    alloc mx_r[1]:\n      mx_r[0] = -inf\n");
  CHECK_CONTAINS(t, "        mx_r[0] max= x[i, j]\n");
  CHECK(k->bufs[mx].inlined && k->bufs[sm].inlined);
  CHECK_CONTAINS(t, "y[i, j3] = y[i, j3] / sm_r[0]\n");
  CHECK(check_softmax(ctx, k, "contracted softmax"));
  sh_lir_free(k);
  /* a temporary read at another row is refused */
  k = lb_softmax(ctx, "sm");
  REQUIRE(k);
  mx = sh_lir_find_buffer(k, "mx");
  sh_lir_buf out = sh_lir_find_buffer(k, "y");
  sh_lir_stmt i2 = sh_lir_loop(k, sh_lir_root(k), "i", sh_lir_sz(k, 0));
  sh_lir_store2(k, i2, out, sh_lir_lv(k, i2), sh_lir_int(k, 0), sh_lir_load1(k, mx, sh_lir_int(k, 0)),
                SH_LIR_COMBINE_NONE);
  REQUIRE_OK(ctx, sh_lir_status(k));
  CHECK_STATUS(ctx, sh_sched_contract(k, mx), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "contract of mx: not every access is mx[r]");
  CHECK(!k->bufs[mx].inlined);
  sh_lir_free(k);
}
