/*
 * test_codegen_sched.c — the schedule primitives (src/codegen/lir_sched.h):
 * each one alone and combined, the printed IR against golden text for a
 * few cases, the interpreter's results before and after (a primitive must
 * not change what a kernel computes), the default schedule of every
 * kernel at every ISA level through the interpreter, and every primitive's
 * errors on bad uses (the kernel stays unchanged and usable). K blocking
 * also through generated C at every level (tests/lir_cc.h).
 */
#include <stdlib.h>

#include "codegen/lir_int.h"
#include "codegen/lir_sched.h"
#include "codegen/lir_emit.h"
#include "harness.h"
#include "lir_build.h"
#include "lir_cc.h"
#include "lir_check.h"
#include "lir_ref.h"

static char *text(sheaf_ctx *ctx, const sh_lir_kernel *k) {
  static char t[32768];
  sh_buf b;
  sh_buf_init(&b, ctx);
  sh_lir_print(k, &b);
  snprintf(t, sizeof t, "%s", sh_buf_cstr(&b));
  sh_buf_free(&b);
  return t;
}

/* The kernel's body only (after the buffer lines). */
static const char *body(sheaf_ctx *ctx, const sh_lir_kernel *k) {
  const char *t = text(ctx, k), *p = t;
  while (*p && (strncmp(p, "kernel ", 7) == 0 || strncmp(p, "buffer ", 7) == 0)) p = strchr(p, '\n') + 1;
  return p;
}

/* Packs B [K, N] into panels of P columns (zero-padded), as the emitted
 * packer does. */
static float *pack_panels(const float *B, int64_t K, int64_t N, int64_t P) {
  int64_t np = (N + P - 1) / P;
  float *d = calloc((size_t)(np * P * K + 1), sizeof(float));
  for (int64_t p = 0; p < np; p++)
    for (int64_t k = 0; k < K; k++)
      for (int64_t c = 0; c < P && p * P + c < N; c++) d[(p * K + k) * P + c] = B[k * N + p * P + c];
  return d;
}

/* Runs a matmul-shaped kernel (mm or mm+gelu) on the interpreter. */
static bool run_mm(sheaf_ctx *ctx, sh_lir_kernel *k, bool ep, int64_t M, int64_t N, int64_t K, float *out) {
  uint64_t seed = (uint64_t)(M * 1000003 + N * 1009 + K);
  float *A = th_frand_fill(&seed, M * K), *B = th_frand_fill(&seed, K * N), *bias = th_frand_fill(&seed, N);
  sh_lir_buf Bb = sh_lir_find_buffer(k, "B");
  float *Bp = k->bufs[Bb].layout == SH_LIR_LAYOUT_PANELS ? pack_panels(B, K, N, k->bufs[Bb].panel) : B;
  int64_t sizes[3] = {M, N, K};
  sh_lir_arg args[4] = {{.data = A}, {.data = Bp}, {.data = ep ? (void *)bias : (void *)out}, {.data = out}};
  sheaf_status st = sh_lir_run(k, sizes, args);
  if (Bp != B) free(Bp);
  free(A), free(B), free(bias);
  return CHECK_OK(ctx, st);
}

/* The scheduled matmul computes what the reference does on these shapes
 * ({M, N, K} each). */
static void same_mm_at(sheaf_ctx *ctx, sh_lir_kernel *k, bool ep, double tol, const int64_t (*sh)[3], size_t n) {
  for (size_t s = 0; s < n; s++) {
    int64_t M = sh[s][0], N = sh[s][1], K = sh[s][2];
    float *got = calloc((size_t)(M * N), sizeof(float)), *want = malloc(sizeof(float) * (size_t)(M * N));
    uint64_t seed = (uint64_t)(M * 1000003 + N * 1009 + K);
    float *A = th_frand_fill(&seed, M * K), *B = th_frand_fill(&seed, K * N), *bias = th_frand_fill(&seed, N);
    lr_matmul(M, N, K, A, B, ep ? bias : NULL, ep, want);
    char what[64];
    snprintf(what, sizeof what, "%s %lldx%lldx%lld", k->name, (long long)M, (long long)N, (long long)K);
    bool ok = run_mm(ctx, k, ep, M, N, K, got) && lr_close(what, got, want, M * N, tol);
    free(A), free(B), free(bias), free(got), free(want);
    if (!ok) return;
  }
}

static void same_mm(sheaf_ctx *ctx, sh_lir_kernel *k, bool ep, double tol) {
  static const int64_t sh[][3] = {{1, 1, 1}, {3, 5, 2}, {4, 8, 3}, {5, 9, 4}, {7, 17, 5}, {13, 33, 2}};
  same_mm_at(ctx, k, ep, tol, sh, SH_ARRAY_LEN(sh));
}

/* ---------------------------------------------------------------- split */

TEST(codegen_sched_split_guard) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k = lb_matmul(ctx, "mm", false);
  REQUIRE(k);
  sh_lir_stmt o, i, t;
  REQUIRE_OK(ctx, sh_sched_split(k, sh_lir_find_loop(k, "i"), 4, SH_SCHED_TAIL_GUARD, &o, &i, &t));
  CHECK_EQ_INT(t, SH_LIR_NONE);
  CHECK_EQ_INT(o, sh_lir_find_loop(k, "i_o"));
  CHECK_EQ_INT(i, sh_lir_find_loop(k, "i_i"));
  CHECK_EQ_STR(body(ctx, k),
               "for i_o in 0..(M + 3) / 4:\n"
               "  for i_i in 0..4:\n"
               "    for j in 0..N:\n"
               "      if i_o * 4 + i_i < M:\n"
               "        C[i_o * 4 + i_i, j] = 0.0\n"
               "      for k in 0..K:\n"
               "        if i_o * 4 + i_i < M:\n"
               "          C[i_o * 4 + i_i, j] += A[i_o * 4 + i_i, k] * B[k, j]\n");
  same_mm(ctx, k, false, 1e-5);
  sh_lir_free(k);
  /* a constant extent that divides needs no guard */
  REQUIRE_OK(ctx, sh_lir_create(ctx, "c", &k));
  sh_lir_buf y = sh_lir_buffer(k, "y", SH_LIR_F32, SH_LIR_OUT, 1, (sh_lir_expr[]){sh_lir_int(k, 12)});
  sh_lir_stmt l = sh_lir_loop(k, sh_lir_root(k), "i", sh_lir_int(k, 12));
  sh_lir_store1(k, l, y, sh_lir_lv(k, l), sh_lir_cast(k, sh_lir_lv(k, l)), SH_LIR_COMBINE_NONE);
  REQUIRE_OK(ctx, sh_sched_split(k, l, 4, SH_SCHED_TAIL_GUARD, NULL, NULL, NULL));
  CHECK_EQ_STR(body(ctx, k), "for i_o in 0..3:\n  for i_i in 0..4:\n    y[i_o * 4 + i_i] = float(i_o * 4 + i_i)\n");
  sh_lir_free(k);
}

TEST(codegen_sched_split_peel_and_top) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k = lb_matmul(ctx, "mm", false);
  REQUIRE(k);
  sh_lir_stmt o, i, t;
  REQUIRE_OK(ctx, sh_sched_split(k, sh_lir_find_loop(k, "j"), 4, SH_SCHED_TAIL_PEEL, &o, &i, &t));
  CHECK(t >= 0);
  CHECK_EQ_STR(body(ctx, k),
               "for i in 0..M:\n"
               "  for j_o in 0..N / 4:\n"
               "    for j_i in 0..4:\n"
               "      C[i, j_o * 4 + j_i] = 0.0\n"
               "      for k in 0..K:\n"
               "        C[i, j_o * 4 + j_i] += A[i, k] * B[k, j_o * 4 + j_i]\n"
               "  for j_t in 0..N - N / 4 * 4:\n"
               "    C[i, N / 4 * 4 + j_t] = 0.0\n"
               "    for k_t in 0..K:\n"
               "      C[i, N / 4 * 4 + j_t] += A[i, k_t] * B[k_t, N / 4 * 4 + j_t]\n");
  same_mm(ctx, k, false, 1e-5);
  sh_lir_free(k);
  k = lb_matmul(ctx, "mm", false);
  REQUIRE_OK(ctx, sh_sched_split(k, sh_lir_find_loop(k, "i"), 3, SH_SCHED_TAIL_GUARD_TOP, &o, &i, &t));
  CHECK_EQ_STR(body(ctx, k),
               "for i_o in 0..(M + 2) / 3:\n"
               "  for i_i in 0..3:\n"
               "    if i_o * 3 + i_i < M:\n"
               "      for j in 0..N:\n"
               "        C[i_o * 3 + i_i, j] = 0.0\n"
               "        for k in 0..K:\n"
               "          C[i_o * 3 + i_i, j] += A[i_o * 3 + i_i, k] * B[k, j]\n");
  same_mm(ctx, k, false, 1e-5);
  sh_lir_free(k);
}

TEST(codegen_sched_split_errors) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k = lb_matmul(ctx, "mm", false);
  REQUIRE(k);
  char *before = strdup(text(ctx, k));
  sh_lir_stmt j = sh_lir_find_loop(k, "j");
  CHECK_STATUS(ctx, sh_sched_split(k, j, 0, SH_SCHED_TAIL_GUARD, NULL, NULL, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "kernel mm: split of loop j: factor 0");
  CHECK_STATUS(ctx, sh_sched_split(k, sh_lir_root(k), 2, SH_SCHED_TAIL_GUARD, NULL, NULL, NULL),
               SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "is not a loop");
  /* padding: C is not padded */
  CHECK_STATUS(ctx, sh_sched_split(k, j, 8, SH_SCHED_TAIL_PAD, NULL, NULL, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "dimension 1 of C is not padded to a multiple of 8");
  /* padding a reduction loop would add the padding in */
  CHECK_STATUS(ctx, sh_sched_split(k, sh_lir_find_loop(k, "k"), 8, SH_SCHED_TAIL_PAD, NULL, NULL, NULL),
               SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "the store to C does not depend on it");
  CHECK_EQ_STR(text(ctx, k), before); /* unchanged */
  CHECK_OK(ctx, sh_lir_status(k));
  free(before);
  sh_lir_free(k);
}

/* ------------------------------------------------------ reorder, fuse */

TEST(codegen_sched_reorder) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k = lb_matmul(ctx, "mm", false);
  REQUIRE(k);
  sh_lir_stmt i = sh_lir_find_loop(k, "i"), j = sh_lir_find_loop(k, "j");
  REQUIRE_OK(ctx, sh_sched_reorder(k, 2, (sh_lir_stmt[]){j, i}));
  CHECK_EQ_STR(body(ctx, k),
               "for j in 0..N:\n"
               "  for i in 0..M:\n"
               "    C[i, j] = 0.0\n"
               "    for k in 0..K:\n"
               "      C[i, j] += A[i, k] * B[k, j]\n");
  CHECK_EQ_INT(sh_lir_find_loop(k, "i"), i); /* statements keep their loops */
  same_mm(ctx, k, false, 1e-5);
  /* j's body holds the init and the k loop: no perfect band */
  CHECK_STATUS(ctx, sh_sched_reorder(k, 2, (sh_lir_stmt[]){sh_lir_find_loop(k, "k"), i}),
               SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "are not a perfectly nested band");
  CHECK_STATUS(ctx, sh_sched_reorder(k, 2, (sh_lir_stmt[]){j, j}), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "given twice");
  sh_lir_free(k);
  /* a ragged extent cannot move outside the loop it depends on */
  k = lb_ragged_scores(ctx, "rs", 1.0f);
  REQUIRE(k);
  CHECK_STATUS(ctx, sh_sched_reorder(k, 2, (sh_lir_stmt[]){sh_lir_find_loop(k, "i"), sh_lir_find_loop(k, "b")}),
               SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "the extent of loop i depends on loop b");
  sh_lir_free(k);
}

TEST(codegen_sched_fuse) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k = lb_matmul(ctx, "mm", false);
  REQUIRE(k);
  sh_lir_stmt f;
  REQUIRE_OK(ctx, sh_sched_fuse(k, sh_lir_find_loop(k, "i"), sh_lir_find_loop(k, "j"), &f));
  CHECK_EQ_STR(body(ctx, k),
               "for i_j in 0..M * N:\n"
               "  C[i_j / N, i_j % N] = 0.0\n"
               "  for k in 0..K:\n"
               "    C[i_j / N, i_j % N] += A[i_j / N, k] * B[k, i_j % N]\n");
  same_mm(ctx, k, false, 1e-5);
  CHECK_STATUS(ctx, sh_sched_fuse(k, f, sh_lir_find_loop(k, "k"), NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "fuse: loop k is not the only statement of loop i_j");
  sh_lir_free(k);
}

/* ---------------------------------------- unroll, vectorize, parallel */

TEST(codegen_sched_unroll_vectorize_parallel) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k = lb_matmul(ctx, "mm", false);
  REQUIRE(k);
  CHECK_STATUS(ctx, sh_sched_unroll(k, sh_lir_find_loop(k, "j")), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "unroll of loop j: the extent is not a constant up to 256");
  sh_lir_stmt jo, ji;
  REQUIRE_OK(ctx, sh_sched_split(k, sh_lir_find_loop(k, "j"), 8, SH_SCHED_TAIL_GUARD, &jo, &ji, NULL));
  /* j_i holds the k loop: not innermost */
  CHECK_STATUS(ctx, sh_sched_vectorize(k, ji, 8), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "vectorize of loop j_i: not an innermost loop");
  CHECK_STATUS(ctx, sh_sched_vectorize(k, ji, 16), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "its extent must be 16");
  CHECK_STATUS(ctx, sh_sched_vectorize(k, ji, 4), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "width 4 (8 or 16");
  REQUIRE_OK(ctx, sh_sched_unroll(k, ji));
  CHECK_OK(ctx, sh_sched_vectorize(k, ji, 1)); /* width 1: nothing to do */
  /* k: every iteration updates the same C[i, j] */
  CHECK_STATUS(ctx, sh_sched_parallel(k, sh_lir_find_loop(k, "k")), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "parallel loop k: iterations would race on C");
  REQUIRE_OK(ctx, sh_sched_parallel(k, sh_lir_find_loop(k, "i")));
  CHECK_STATUS(ctx, sh_sched_parallel(k, jo), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "nested in or holding another parallel");
  CHECK_CONTAINS(text(ctx, k), "for i in 0..M parallel:\n  for j_o in 0..(N + 7) / 8:\n    for j_i in 0..8 unroll:\n");
  same_mm(ctx, k, false, 1e-5);
  sh_lir_free(k);

  /* the softmax's last loop vectorizes after a split; a transposed store does not */
  k = lb_softmax(ctx, "sm");
  REQUIRE(k);
  sh_lir_stmt o, in;
  REQUIRE_OK(ctx, sh_sched_split(k, sh_lir_find_loop(k, "j3"), 8, SH_SCHED_TAIL_PEEL, &o, &in, NULL));
  REQUIRE_OK(ctx, sh_sched_vectorize(k, in, 8));
  CHECK_CONTAINS(text(ctx, k), "    for j3_i in 0..8 vector(8):\n      y[i, j3_o * 8 + j3_i] = y[i, j3_o * 8 + j3_i] / sm[i]\n");
  CHECK_STATUS(ctx, sh_sched_split(k, in, 2, SH_SCHED_TAIL_GUARD, NULL, NULL, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "the loop is vectorized");
  sh_lir_free(k);
  REQUIRE_OK(ctx, sh_lir_create(ctx, "tr", &k));
  sh_lir_expr M = sh_lir_sz(k, sh_lir_size(k, "M"));
  sh_lir_buf x = sh_lir_buffer(k, "x", SH_LIR_F32, SH_LIR_IN, 2, (sh_lir_expr[]){M, M});
  sh_lir_buf y = sh_lir_buffer(k, "y", SH_LIR_F32, SH_LIR_OUT, 2, (sh_lir_expr[]){M, M});
  sh_lir_stmt a = sh_lir_loop(k, sh_lir_root(k), "a", M), b = sh_lir_loop(k, a, "b", sh_lir_int(k, 8));
  sh_lir_store2(k, b, y, sh_lir_lv(k, b), sh_lir_lv(k, a), sh_lir_load2(k, x, sh_lir_lv(k, a), sh_lir_lv(k, b)),
                SH_LIR_COMBINE_NONE);
  CHECK_STATUS(ctx, sh_sched_vectorize(k, b, 8), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "vectorize of loop b: the store to y is not stride-1 in b");
  sh_lir_free(k);
}

/* ---------------------------------------------- cache_write, unswitch */

static sh_lir_kernel *tiled_mm(sheaf_ctx *ctx, const char *name, bool ep, sh_sched_cache *c) {
  sh_lir_kernel *k = lb_matmul(ctx, name, ep);
  if (!k) return NULL;
  sh_lir_stmt io, ii, jo, ji;
  if (sh_sched_split(k, sh_lir_find_loop(k, "i"), 2, SH_SCHED_TAIL_GUARD, &io, &ii, NULL) ||
      sh_sched_split(k, sh_lir_find_loop(k, "j"), 8, SH_SCHED_TAIL_GUARD, &jo, &ji, NULL) ||
      sh_sched_reorder(k, 4, (sh_lir_stmt[]){io, jo, ii, ji}) || sh_sched_cache_write(k, ii, c)) {
    sh_lir_free(k);
    return NULL;
  }
  return k;
}

TEST(codegen_sched_cache_write) {
  sheaf_ctx *ctx = th_ctx();
  sh_sched_cache c;
  sh_lir_kernel *k = tiled_mm(ctx, "mm", false, &c);
  REQUIRE(k);
  CHECK_EQ_INT(c.n, 2);
  REQUIRE_OK(ctx, sh_sched_unroll(k, c.band[0]));
  REQUIRE_OK(ctx, sh_sched_vectorize(k, c.band[1], 8));
  CHECK_EQ_STR(body(ctx, k),
               "for i_o in 0..(M + 1) / 2:\n"
               "  for j_o in 0..(N + 7) / 8:\n"
               "    alloc C_acc[2, 8]:\n"
               "      for i_i_ini in 0..2:\n"
               "        for j_i_ini in 0..8:\n"
               "          C_acc[i_i_ini, j_i_ini] = 0.0\n"
               "      for k in 0..K:\n"
               "        for i_i in 0..2 unroll:\n"
               "          for j_i in 0..8 vector(8):\n"
               "            if j_o * 8 + j_i < N && i_o * 2 + i_i < M:\n"
               "              C_acc[i_i, j_i] += A[i_o * 2 + i_i, k] * B[k, j_o * 8 + j_i]\n"
               "      for i_i_wb in 0..2:\n"
               "        for j_i_wb in 0..8:\n"
               "          if j_o * 8 + j_i_wb < N && i_o * 2 + i_i_wb < M:\n"
               "            C[i_o * 2 + i_i_wb, j_o * 8 + j_i_wb] = C_acc[i_i_wb, j_i_wb]\n");
  same_mm(ctx, k, false, 1e-5);
  /* unswitch: whole tiles without guards, partial ones with, empty ones skipped */
  REQUIRE_OK(ctx, sh_sched_unswitch(k, c.alloc));
  const char *t = body(ctx, k);
  CHECK_CONTAINS(t, "    if j_o * 8 + 7 < N && i_o * 2 + 1 < M:\n      alloc C_acc[2, 8]:\n");
  CHECK_CONTAINS(t, "            for j_i in 0..8 vector(8):\n              C_acc[i_i, j_i] += A[");
  CHECK_CONTAINS(t, "    else:\n      if j_o * 8 < N && i_o * 2 < M:\n        alloc C_acc[2, 8]:\n");
  same_mm(ctx, k, false, 1e-5);
  CHECK_OK(ctx, sh_lir_verify(k));
  sh_lir_free(k);
}

TEST(codegen_sched_cache_write_errors) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k = lb_matmul(ctx, "mm", false);
  REQUIRE(k);
  sh_sched_cache c;
  CHECK_STATUS(ctx, sh_sched_cache_write(k, sh_lir_find_loop(k, "k"), &c), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "cache_write at loop k: the loop does not index C");
  CHECK_STATUS(ctx, sh_sched_cache_write(k, sh_lir_find_loop(k, "j"), &c), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "loop j has no constant extent (split it)");
  CHECK_STATUS(ctx, sh_sched_unswitch(k, sh_lir_find_loop(k, "i")), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "unswitch of loop i: no guard");
  sh_lir_free(k);
  /* softmax's j loop reduces into mx[i] but holds no band of spatial loops */
  k = lb_softmax(ctx, "sm");
  REQUIRE(k);
  CHECK_STATUS(ctx, sh_sched_cache_write(k, sh_lir_find_loop(k, "j2"), &c), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "cache_write at loop j2: the loop does not index sm");
  CHECK_OK(ctx, sh_lir_status(k));
  sh_lir_free(k);
}

/* ---------------------------------------------------------- rfactor */

TEST(codegen_sched_rfactor) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k = lb_softmax(ctx, "sm");
  REQUIRE(k);
  sh_lir_stmt o, in;
  sh_sched_cache c;
  REQUIRE_OK(ctx, sh_sched_split(k, sh_lir_find_loop(k, "j"), 8, SH_SCHED_TAIL_PEEL, &o, &in, NULL));
  REQUIRE_OK(ctx, sh_sched_rfactor(k, in, SH_LIR_NONE, &c));
  REQUIRE_OK(ctx, sh_sched_vectorize(k, in, 8));
  REQUIRE_OK(ctx, sh_sched_vectorize(k, c.final[0], 8)); /* the horizontal reduction */
  CHECK_CONTAINS(body(ctx, k),
                 "for i in 0..M:\n"
                 "  mx[i] = -inf\n"
                 "  alloc mx_acc[8]:\n"
                 "    for j_i_ini in 0..8:\n"
                 "      mx_acc[j_i_ini] = -inf\n"
                 "    for j_o in 0..N / 8:\n"
                 "      for j_i in 0..8 vector(8):\n"
                 "        mx_acc[j_i] max= x[i, j_o * 8 + j_i]\n"
                 "    for j_i_fin in 0..8 vector(8):\n"
                 "      mx[i] max= mx_acc[j_i_fin]\n"
                 "  for j_t in 0..N - N / 8 * 8:\n"
                 "    mx[i] max= x[i, N / 8 * 8 + j_t]\n");
  uint64_t seed = 1;
  for (int64_t N = 1; N <= 40; N += 13) {
    int64_t M = 2, sizes[2] = {M, N};
    float *x = th_frand_fill(&seed, M * N), *y = malloc(sizeof(float) * (size_t)(M * N)),
          *r = malloc(sizeof(float) * (size_t)(M * N));
    CHECK_OK(ctx, sh_lir_run(k, sizes, (sh_lir_arg[]){{.data = x}, {.data = y}}));
    lr_softmax(M, N, x, r);
    CHECK(lr_close("rfactor softmax", y, r, M * N, 1e-5));
    free(x), free(y), free(r);
  }
  /* the j2 loop's spatial store is not a reduction */
  sh_lir_stmt j2 = sh_lir_find_loop(k, "j2"), j2i;
  CHECK_STATUS(ctx, sh_sched_rfactor(k, j2, SH_LIR_NONE, &c), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "rfactor at loop j2: loop j2 has no constant extent");
  REQUIRE_OK(ctx, sh_sched_split(k, j2, 8, SH_SCHED_TAIL_PEEL, NULL, &j2i, NULL));
  CHECK_STATUS(ctx, sh_sched_rfactor(k, j2i, sh_lir_find_store(k, sh_lir_find_buffer(k, "y"), 0), &c),
               SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "rfactor at loop j2_i: the store to y is not a reduction over the band");
  sh_lir_free(k);
}

/* ------------------------------------------------------------ inlining */

TEST(codegen_sched_inline) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k = lb_matmul(ctx, "mmg", true);
  REQUIRE(k);
  sh_lir_buf Z = sh_lir_find_buffer(k, "Z"), C = sh_lir_find_buffer(k, "C"), Y = sh_lir_find_buffer(k, "Y");
  /* C has two stores (init and reduction): not pointwise */
  CHECK_STATUS(ctx, sh_sched_compute_inline(k, sh_lir_find_store(k, C, 0)), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "compute_inline of C: not a pointwise producer");
  CHECK_STATUS(ctx, sh_sched_compute_inline(k, sh_lir_find_store(k, Y, 0)), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "compute_inline of Y: only a dense temporary");
  REQUIRE_OK(ctx, sh_sched_compute_inline(k, sh_lir_find_store(k, Z, 0)));
  CHECK(k->bufs[Z].inlined);
  CHECK_CONTAINS(text(ctx, k), "buffer Z f32[M, N] temp inlined\n");
  CHECK_CONTAINS(body(ctx, k), "for i3 in 0..M:\n  for j3 in 0..N:\n    Y[i3, j3] = gelu(C[i3, j3] + bias[j3])\n");
  same_mm(ctx, k, true, 1e-5);
  /* the consumer cannot go into C before C has a single plain store */
  sh_lir_stmt ys = sh_lir_find_store(k, Y, 0);
  CHECK_STATUS(ctx, sh_sched_reverse_inline(k, ys), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "reverse_inline of C into Y: C has no single plain store");
  sh_lir_free(k);
  /* after cache_write it goes into the tile's store: a fused epilogue */
  sh_sched_cache c;
  k = tiled_mm(ctx, "mmg", true, &c);
  REQUIRE(k);
  Z = sh_lir_find_buffer(k, "Z");
  Y = sh_lir_find_buffer(k, "Y");
  REQUIRE_OK(ctx, sh_sched_compute_inline(k, sh_lir_find_store(k, Z, 0)));
  REQUIRE_OK(ctx, sh_sched_reverse_inline(k, sh_lir_find_store(k, Y, 0)));
  CHECK_EQ_INT(sh_lir_body_len(k, sh_lir_root(k)), 1);
  CHECK_CONTAINS(body(ctx, k), "            Y[i_o * 2 + i_i_wb, j_o * 8 + j_i_wb] = gelu(C_acc[i_i_wb, j_i_wb] + "
                               "bias[j_o * 8 + j_i_wb])\n");
  same_mm(ctx, k, true, 1e-5);
  sh_lir_free(k);
}

/* --------------------------------------------------------- pad, pack */

TEST(codegen_sched_pad_pack) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k = lb_matmul(ctx, "mm", false);
  REQUIRE(k);
  sh_lir_buf A = sh_lir_find_buffer(k, "A"), B = sh_lir_find_buffer(k, "B"), C = sh_lir_find_buffer(k, "C");
  CHECK_STATUS(ctx, sh_sched_pad(k, A, 2, 8), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "pad of A: dimension 2, tile 8");
  CHECK_STATUS(ctx, sh_sched_pack(k, C, 16), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "pack of C: only a dense f32 input of rank 2");
  REQUIRE_OK(ctx, sh_sched_pack(k, B, 16));
  CHECK_CONTAINS(text(ctx, k), "buffer B f32[K, N] in weight panels(16)\n");
  same_mm(ctx, k, false, 1e-5);
  /* C's rows padded to 8: then j can run over whole tiles of 8 */
  REQUIRE_OK(ctx, sh_sched_pad(k, C, 1, 8));
  sh_lir_stmt jo, ji;
  CHECK_STATUS(ctx, sh_sched_split(k, sh_lir_find_loop(k, "j"), 16, SH_SCHED_TAIL_PAD, NULL, NULL, NULL),
               SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "dimension 1 of C is not padded to a multiple of 16");
  REQUIRE_OK(ctx, sh_sched_split(k, sh_lir_find_loop(k, "j"), 8, SH_SCHED_TAIL_PAD, &jo, &ji, NULL));
  CHECK_CONTAINS(text(ctx, k), "buffer C f32[M, N] out pad(1, 8)\n");
  CHECK_CONTAINS(body(ctx, k), "  for j_o in 0..(N + 7) / 8:\n    for j_i in 0..8:\n      C[i, j_o * 8 + j_i] = 0.0\n");
  /* the interpreter checks the padded accesses stay in the storage */
  int64_t M = 3, N = 5, K = 4, sizes[3] = {M, N, K};
  uint64_t seed = 2;
  float *a = th_frand_fill(&seed, M * K), *b = th_frand_fill(&seed, K * N), *bp = pack_panels(b, K, N, 16),
        *c = calloc((size_t)(M * 8), sizeof(float)), *r = malloc(sizeof(float) * (size_t)(M * N)),
        *cd = malloc(sizeof(float) * (size_t)(M * N));
  CHECK_OK(ctx, sh_lir_run(k, sizes, (sh_lir_arg[]){{.data = a}, {.data = bp}, {.data = c}}));
  lr_matmul(M, N, K, a, b, NULL, false, r);
  for (int64_t i = 0; i < M; i++) memcpy(cd + i * N, c + i * 8, sizeof(float) * (size_t)N);
  CHECK(lr_close("padded rows", cd, r, M * N, 1e-5));
  free(a), free(b), free(bp), free(c), free(r), free(cd);
  sh_lir_free(k);
}

/* ---------------------------------------------------- default schedule */

TEST(codegen_sched_default_interp) {
  sheaf_ctx *ctx = th_ctx();
  static const sheaf_isa levels[] = {SHEAF_ISA_SCALAR, SHEAF_ISA_AVX2, SHEAF_ISA_AVX512};
  for (size_t l = 0; l < SH_ARRAY_LEN(levels); l++) {
    sh_lir_kernel *mm = lb_matmul(ctx, "mm", false), *mg = lb_matmul(ctx, "mmg", true);
    sh_lir_kernel *sm = lb_softmax(ctx, "sm"), *ln = lb_layernorm(ctx, "ln", 1e-5f);
    sh_lir_kernel *rs = lb_ragged_scores(ctx, "rs", 0.25f), *ru = lb_ragged_sums(ctx, "ru");
    REQUIRE(mm && mg && sm && ln && rs && ru);
    sh_lir_kernel *all[] = {mm, mg, sm, ln, rs, ru};
    for (size_t i = 0; i < SH_ARRAY_LEN(all); i++) CHECK_OK(ctx, sh_sched_default(all[i], levels[l]));
    same_mm(ctx, mm, false, 1e-5);
    same_mm(ctx, mg, true, 1e-5);
    uint64_t seed = 8;
    for (int64_t N = 1; N <= 70; N += 23) {
      int64_t M = 5, sizes[2] = {M, N};
      float *x = th_frand_fill(&seed, M * N), *g = th_frand_fill(&seed, N), *b = th_frand_fill(&seed, N),
            *y = malloc(sizeof(float) * (size_t)(M * N)), *r = malloc(sizeof(float) * (size_t)(M * N));
      CHECK_OK(ctx, sh_lir_run(sm, sizes, (sh_lir_arg[]){{.data = x}, {.data = y}}));
      lr_softmax(M, N, x, r);
      CHECK(lr_close("default softmax", y, r, M * N, 1e-5));
      CHECK_OK(ctx, sh_lir_run(ln, sizes, (sh_lir_arg[]){{.data = x}, {.data = g}, {.data = b}, {.data = y}}));
      lr_layernorm(M, N, x, g, b, 1e-5f, r);
      CHECK(lr_close("default layernorm", y, r, M * N, 1e-5));
      free(x), free(g), free(b), free(y), free(r);
    }
    static const int32_t lens[] = {0, 1, 17, 64};
    lr_ragged rg;
    REQUIRE(lr_ragged_make(&rg, lens, 4, 19, 1, 3));
    int64_t sizes[2] = {rg.batch, rg.d};
    CHECK_OK(ctx, sh_lir_run(rs, sizes, (sh_lir_arg[]){{.data = rg.len}, {.data = rg.qoff}, {.data = rg.soff},
                                                     {.data = rg.q}, {.data = rg.k}, {.data = rg.s}}));
    lr_ragged_scores(&rg, 0.25f, rg.sref);
    CHECK(lr_close("default ragged scores", rg.s, rg.sref, rg.s_elems, 1e-5));
    CHECK_OK(ctx, sh_lir_run(ru, sizes, (sh_lir_arg[]){{.data = rg.len}, {.data = rg.qoff}, {.data = rg.q},
                                                     {.data = rg.sums}}));
    lr_ragged_sums(&rg, rg.sumsref);
    CHECK(lr_close("default ragged sums", rg.sums, rg.sumsref, rg.batch * rg.d, 1e-5));
    lr_ragged_free(&rg);
    for (size_t i = 0; i < SH_ARRAY_LEN(all); i++) sh_lir_free(all[i]);
  }
}

/* The default GEMM schedule's shape at AVX2: 6 x 16 tile in registers,
 * B packed in panels of 16 and its panel row prefetched 64 k steps ahead,
 * tails unswitched, tiles over the pool; K blocks when sh_sched_opts.kc
 * asks. */
TEST(codegen_sched_default_gemm_shape) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k = lb_matmul(ctx, "mm", false);
  REQUIRE(k);
  REQUIRE_OK(ctx, sh_sched_default(k, SHEAF_ISA_AVX2));
  const char *t = text(ctx, k);
  CHECK_CONTAINS(t, "buffer B f32[K, N] in weight panels(16)\n");
  CHECK_CONTAINS(t, "buffer C_acc f32[6, 2, 8] local\n");
  CHECK_CONTAINS(t, "for i_o_j_o in 0..(M + 95) / 96 * ((N + 15) / 16) parallel:\n  for i_i_o in 0..16:\n");
  CHECK_CONTAINS(t, "        for k in 0..K:\n"
                    "          prefetch B[k + 64, i_o_j_o % ((N + 15) / 16) * 16]\n"
                    "          for i_i_i in 0..6 unroll:\n"
                    "            for j_i_o in 0..2 unroll:\n"
                    "              for j_i_i in 0..8 vector(8):\n"
                    "                C_acc[i_i_i, j_i_o, j_i_i] += A[");
  sh_lir_free(k);
  /* K blocks of 256 (sh_sched_opts.kc): around the row block's tiles;
   * later blocks add the partial sums at the write-back */
  k = lb_matmul(ctx, "mm", false);
  REQUIRE(k);
  REQUIRE_OK(ctx, sh_sched_default_opts(k, SHEAF_ISA_AVX2, &(sh_sched_opts){.kc = 256}));
  t = text(ctx, k);
  CHECK_CONTAINS(t, "for i_o_j_o in 0..(M + 95) / 96 * ((N + 15) / 16) parallel:\n"
                    "  for k_blk in 0..(K + 255) / 256:\n    for i_i_o in 0..16:\n");
  CHECK_CONTAINS(t, "          for k in 0..min(256, K - k_blk * 256):\n"
                    "            prefetch B[k_blk * 256 + k + 64, i_o_j_o % ((N + 15) / 16) * 16]\n"
                    "            for i_i_i in 0..6 unroll:\n"
                    "              for j_i_o in 0..2 unroll:\n"
                    "                for j_i_i in 0..8 vector(8):\n"
                    "                  C_acc[i_i_i, j_i_o, j_i_i] += A[");
  CHECK_CONTAINS(t, "          if k_blk != 0:\n");
  CHECK_CONTAINS(t, "= C_acc[i_i_i_wb_kb, j_i_o_wb_kb, j_i_i_wb_kb] + C[");
  sh_lir_free(k);
}

/* ---------------------------------------------------------- K blocking */

/* Shapes around a K block of 4: K below, at, above and at multiples of it;
 * M and N with whole and partial tiles at every level. */
static const int64_t kb_shapes[][3] = {{1, 1, 1}, {7, 17, 3}, {7, 17, 4}, {7, 17, 5}, {13, 5, 8},
                                       {13, 33, 9}, {1, 9, 12}, {25, 40, 13}, {6, 16, 16}};

/* The default schedule with K blocks of 4 (kc in sh_sched_opts), with and
 * without the fused epilogue, at every level, through the interpreter
 * (which checks every index: later blocks read the partial sums back only
 * inside the output). */
TEST(codegen_sched_kblock_interp) {
  sheaf_ctx *ctx = th_ctx();
  static const sheaf_isa levels[] = {SHEAF_ISA_SCALAR, SHEAF_ISA_AVX2, SHEAF_ISA_AVX512};
  for (size_t l = 0; l < SH_ARRAY_LEN(levels); l++)
    for (int ep = 0; ep < 2; ep++) {
      sh_lir_kernel *k = lb_matmul(ctx, ep ? "mmg" : "mm", ep);
      REQUIRE(k);
      sh_sched_opts o = {.kc = 4};
      REQUIRE_OK(ctx, sh_sched_default_opts(k, levels[l], &o));
      const char *t = body(ctx, k);
      CHECK_CONTAINS(t, "for k_blk in 0..(K + 3) / 4:\n");
      CHECK_CONTAINS(t, "for k in 0..min(4, K - k_blk * 4):\n");
      CHECK_CONTAINS(t, ep ? "if k_blk != 0 && k_blk * 4 + 4 >= K:\n" : "if k_blk != 0:\n");
      same_mm_at(ctx, k, ep, 1e-5, kb_shapes, SH_ARRAY_LEN(kb_shapes));
      sh_lir_free(k);
    }
  /* kc <= 0 (the default): no blocking */
  sh_lir_kernel *k = lb_matmul(ctx, "mm", false);
  REQUIRE(k);
  REQUIRE_OK(ctx, sh_sched_default_opts(k, SHEAF_ISA_AVX2, &(sh_sched_opts){.kc = -1}));
  CHECK(!strstr(body(ctx, k), "k_blk"));
  sh_lir_free(k);
  k = lb_matmul(ctx, "mm", false);
  REQUIRE(k);
  REQUIRE_OK(ctx, sh_sched_default(k, SHEAF_ISA_AVX2));
  CHECK(!strstr(body(ctx, k), "k_blk"));
  sh_lir_free(k);
}

/* The primitive's refusals leave the kernel unchanged. */
TEST(codegen_sched_kblock_errors) {
  sheaf_ctx *ctx = th_ctx();
  sh_sched_cache c;
  sh_lir_kernel *k = tiled_mm(ctx, "mm", false, &c);
  REQUIRE(k);
  char *before = strdup(text(ctx, k));
  sh_lir_stmt kl = sh_lir_find_loop(k, "k"), jo = sh_lir_find_loop(k, "j_o"), io = sh_lir_find_loop(k, "i_o");
  CHECK_STATUS(ctx, sh_sched_kblock(k, &c, kl, jo, 0), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "kblock: block of 0 steps");
  CHECK_STATUS(ctx, sh_sched_kblock(k, &c, jo, jo, 4), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "is not the tile's serial reduction loop");
  CHECK_STATUS(ctx, sh_sched_kblock(k, &c, kl, kl, 4), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "is not a loop around the tile");
  REQUIRE_OK(ctx, sh_sched_parallel(k, jo));
  CHECK_STATUS(ctx, sh_sched_kblock(k, &c, kl, io, 4), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "loop j_o between the tile and the block loop");
  k->st[jo].annot = SH_LIR_SERIAL;
  CHECK_EQ_STR(text(ctx, k), before);
  /* around j_o: each block's partial sums, one panel after another */
  REQUIRE_OK(ctx, sh_sched_kblock(k, &c, kl, jo, 3));
  CHECK_CONTAINS(body(ctx, k), "for i_o in 0..(M + 1) / 2:\n  for k_blk in 0..(K + 2) / 3:\n    for j_o in");
  same_mm_at(ctx, k, false, 1e-5, kb_shapes, SH_ARRAY_LEN(kb_shapes));
  CHECK_OK(ctx, sh_lir_verify(k));
  sh_lir_free(k);
  /* a tile that does not start at the identity is refused */
  k = tiled_mm(ctx, "mm", false, &c);
  REQUIRE(k);
  sh_lir_stmt init = sh_lir_find_store(k, c.local, 0);
  k->st[init].val = sh_lir_flt(k, 1.0f);
  CHECK_STATUS(ctx, sh_sched_kblock(k, &c, sh_lir_find_loop(k, "k"), sh_lir_find_loop(k, "j_o"), 4),
               SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "does not start at the identity");
  free(before);
  sh_lir_free(k);
}

/* The generated C of K-blocked tiles (blocks of 8), with and without the
 * epilogue, compiled at every level (run where the host runs it). */
TEST(codegen_sched_kblock_c) {
  sheaf_ctx *ctx = th_ctx();
  if (!lir_cc_path()) {
    fprintf(stderr, "  skipped: no C compiler (cc) to build generated kernels\n");
    return;
  }
  static const int64_t Ms[] = {1, 5, 6, 7, 13, 97}, Ns[] = {1, 8, 15, 16, 17, 33},
                       Ks[] = {1, 7, 8, 9, 16, 17, 24, 27};
  static const sheaf_isa levels[] = {SHEAF_ISA_SCALAR, SHEAF_ISA_AVX2, SHEAF_ISA_AVX512};
  for (size_t l = 0; l < SH_ARRAY_LEN(levels); l++) {
#if !defined(__x86_64__)
    if (levels[l] != SHEAF_ISA_SCALAR) continue;
#endif
    bool run = levels[l] <= sheaf_cpu_isa_host();
    for (int ep = 0; ep < 2; ep++) {
      char name[32];
      snprintf(name, sizeof name, "kb%s_%s", ep ? "g" : "", sheaf_isa_name(levels[l]));
      sh_lir_kernel *k = lb_matmul(ctx, name, ep);
      REQUIRE(k);
      REQUIRE_OK(ctx, sh_sched_default_opts(k, levels[l], &(sh_sched_opts){.kc = 8}));
      sh_buf b;
      sh_buf_init(&b, ctx);
      REQUIRE_OK(ctx, sh_lir_emit_c(k, &b));
      lir_build_check_matmul(ctx, sh_buf_cstr(&b), name, levels[l], run, ep, 5, Ms, (int)SH_ARRAY_LEN(Ms), Ns,
                             (int)SH_ARRAY_LEN(Ns), Ks, (int)SH_ARRAY_LEN(Ks));
      sh_buf_free(&b);
      sh_lir_free(k);
    }
  }
}

/* ------------------------------------- rows of dot products (attention) */

/* y[i, j] += Σ_d x[i, d]·w[j, d] for j < 4, d < 8: rfactor of the band
 * j × d with j spatial (a named store): a [4, 8] tile of accumulators,
 * each row reduced into its own y[i, j]. */
TEST(codegen_sched_rfactor_spatial) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k;
  REQUIRE_OK(ctx, sh_lir_create(ctx, "dots", &k));
  sh_lir_expr M = sh_lir_sz(k, sh_lir_size(k, "M")), four = sh_lir_int(k, 4), eight = sh_lir_int(k, 8);
  sh_lir_buf x = sh_lir_buffer(k, "x", SH_LIR_F32, SH_LIR_IN, 2, (sh_lir_expr[]){M, eight});
  sh_lir_buf w = sh_lir_buffer(k, "w", SH_LIR_F32, SH_LIR_IN, 2, (sh_lir_expr[]){four, eight});
  sh_lir_buf y = sh_lir_buffer(k, "y", SH_LIR_F32, SH_LIR_OUT, 2, (sh_lir_expr[]){M, four});
  sh_lir_stmt i = sh_lir_loop(k, sh_lir_root(k), "i", M), j = sh_lir_loop(k, i, "j", four);
  sh_lir_stmt d = sh_lir_loop(k, j, "d", eight);
  sh_lir_expr vi = sh_lir_lv(k, i), vj = sh_lir_lv(k, j), vd = sh_lir_lv(k, d);
  sh_lir_stmt S = sh_lir_store2(k, d, y, vi, vj, sh_lir_mul(k, sh_lir_load2(k, x, vi, vd), sh_lir_load2(k, w, vj, vd)),
                                SH_LIR_COMBINE_ADD);
  REQUIRE_OK(ctx, sh_lir_status(k));
  sh_sched_cache c;
  /* unnamed, the band's spatial loop makes it no reduction over the band */
  CHECK_STATUS(ctx, sh_sched_rfactor(k, j, SH_LIR_NONE, &c), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "rfactor at loop j: no reduction over it below");
  /* named: j is a spatial loop of the band, d reduces over it */
  REQUIRE_OK(ctx, sh_sched_rfactor(k, j, S, &c));
  CHECK_EQ_INT(c.n, 2);
  REQUIRE_OK(ctx, sh_sched_vectorize(k, c.band[1], 8));
  REQUIRE_OK(ctx, sh_sched_vectorize(k, c.final[1], 8)); /* one horizontal reduction per j */
  CHECK_CONTAINS(body(ctx, k), "for i in 0..M:\n"
                               "  alloc y_acc[4, 8]:\n"
                               "    for j_ini in 0..4:\n"
                               "      for d_ini in 0..8:\n"
                               "        y_acc[j_ini, d_ini] = 0.0\n"
                               "    for j in 0..4:\n"
                               "      for d in 0..8 vector(8):\n"
                               "        y_acc[j, d] += x[i, d] * w[j, d]\n"
                               "    for j_fin in 0..4:\n"
                               "      for d_fin in 0..8 vector(8):\n"
                               "        y[i, j_fin] += y_acc[j_fin, d_fin]\n");
  uint64_t seed = 4;
  for (int64_t m = 0; m <= 3; m++) {
    int64_t sizes[1] = {m};
    float *xs = th_frand_fill(&seed, m * 8), *ws = th_frand_fill(&seed, 32), *ys = th_frand_fill(&seed, m * 4);
    float *want = malloc(sizeof(float) * (size_t)(m * 4 + 1));
    for (int64_t r = 0; r < m; r++)
      for (int64_t q = 0; q < 4; q++) {
        double s = ys[r * 4 + q];
        for (int64_t e = 0; e < 8; e++) s += (double)xs[r * 8 + e] * ws[q * 8 + e];
        want[r * 4 + q] = (float)s;
      }
    CHECK_OK(ctx, sh_lir_run(k, sizes, (sh_lir_arg[]){{.data = xs}, {.data = ws}, {.data = ys}}));
    CHECK(lr_close("rfactor spatial", ys, want, m * 4, 1e-5));
    free(xs), free(ws), free(ys), free(want);
  }
  sh_lir_free(k);
}

/* Loop distribution over a body whose statements write one buffer at
 * different columns but the same row i: legal (row i is the iteration's);
 * reading another row is not. */
TEST(codegen_sched_distribute_common_dim) {
  sheaf_ctx *ctx = th_ctx();
  for (int bad = 0; bad < 2; bad++) {
    sh_lir_kernel *k;
    REQUIRE_OK(ctx, sh_lir_create(ctx, "halves", &k));
    sh_lir_expr M = sh_lir_sz(k, sh_lir_size(k, "M")), N = sh_lir_sz(k, sh_lir_size(k, "N"));
    sh_lir_buf x = sh_lir_buffer(k, "x", SH_LIR_F32, SH_LIR_IN, 2, (sh_lir_expr[]){M, N});
    sh_lir_buf y = sh_lir_buffer(k, "y", SH_LIR_F32, SH_LIR_OUT, 2,
                                 (sh_lir_expr[]){M, sh_lir_mul(k, sh_lir_int(k, 2), N)});
    sh_lir_stmt i = sh_lir_loop(k, sh_lir_root(k), "i", M);
    sh_lir_stmt j1 = sh_lir_loop(k, i, "j1", N), j2 = sh_lir_loop(k, i, "j2", N);
    sh_lir_expr vi = sh_lir_lv(k, i), v1 = sh_lir_lv(k, j1), v2 = sh_lir_lv(k, j2);
    sh_lir_store2(k, j1, y, vi, v1, sh_lir_load2(k, x, vi, v1), SH_LIR_COMBINE_NONE);
    /* y[i, N + j] = 2 y[i, j] (bad: y[i - 1, N + j] = 2 y[i, j], another row) */
    sh_lir_expr row = bad ? sh_lir_sub(k, vi, sh_lir_int(k, 1)) : vi;
    sh_lir_stmt s2 = sh_lir_if(k, j2, bad ? sh_lir_bin(k, SH_LIR_OP_GT, vi, sh_lir_int(k, 0)) : sh_lir_int(k, 1));
    sh_lir_store2(k, s2, y, row, sh_lir_add(k, N, v2), sh_lir_mul(k, sh_lir_flt(k, 2), sh_lir_load2(k, y, vi, v2)),
                  SH_LIR_COMBINE_NONE);
    REQUIRE_OK(ctx, sh_lir_status(k));
    sh_lir_stmt loops[2];
    int n;
    if (bad) {
      CHECK_STATUS(ctx, sh_sched_distribute(k, i, loops, 2, &n), SHEAF_ERR_INVALID_ARG);
      CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "distribute of loop i: y is accessed at different indices");
      sh_lir_free(k);
      continue;
    }
    REQUIRE_OK(ctx, sh_sched_distribute(k, i, loops, 2, &n));
    CHECK_EQ_INT(n, 2);
    CHECK_CONTAINS(body(ctx, k), "for i in 0..M:\n  for j1 in 0..N:\n");
    uint64_t seed = 6;
    int64_t m = 3, nn = 5, sizes[2] = {m, nn};
    float *xs = th_frand_fill(&seed, m * nn), *ys = calloc((size_t)(m * nn * 2), sizeof(float));
    float *want = malloc(sizeof(float) * (size_t)(m * nn * 2));
    for (int64_t r = 0; r < m; r++)
      for (int64_t q = 0; q < nn; q++) want[r * 2 * nn + q] = xs[r * nn + q], want[r * 2 * nn + nn + q] = 2 * xs[r * nn + q];
    CHECK_OK(ctx, sh_lir_run(k, sizes, (sh_lir_arg[]){{.data = xs}, {.data = ys}}));
    CHECK(lr_close("distributed halves", ys, want, m * nn * 2, 1e-6));
    free(xs), free(ys), free(want);
    sh_lir_free(k);
  }
}

/* The default schedule's tile for rows of dot products (sched_dot.c): 3
 * query rows × 4 keys × W lanes of d in registers; lengths below, at,
 * above and at multiples of both tile sides (0 and 1 included), D below,
 * at, above and at multiples of W. Interpreter against the reference. */
TEST(codegen_sched_dot_tile) {
  sheaf_ctx *ctx = th_ctx();
  static const sheaf_isa levels[] = {SHEAF_ISA_AVX2, SHEAF_ISA_AVX512};
  static const int32_t lens[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13};
  static const int64_t dims[] = {1, 7, 8, 9, 16, 17, 33};
  for (size_t l = 0; l < SH_ARRAY_LEN(levels); l++) {
    int w = levels[l] == SHEAF_ISA_AVX512 ? 16 : 8;
    sh_lir_kernel *k = lb_ragged_scores(ctx, "rs", 0.25f);
    REQUIRE(k);
    REQUIRE_OK(ctx, sh_sched_default(k, levels[l]));
    char want[96];
    snprintf(want, sizeof want, " f32[4, 3, %d] local\n", w);
    CHECK_CONTAINS(text(ctx, k), want);
    CHECK_CONTAINS(text(ctx, k), "for i_o in 0..len[b] / 3:\n");
    CHECK_CONTAINS(text(ctx, k), "for j_o in 0..len[b] / 4:\n");
    for (size_t di = 0; di < SH_ARRAY_LEN(dims); di++) {
      lr_ragged rg;
      REQUIRE(lr_ragged_make(&rg, lens, (int64_t)SH_ARRAY_LEN(lens), dims[di], 1, 11 + di));
      int64_t sizes[2] = {rg.batch, rg.d};
      CHECK_OK(ctx, sh_lir_run(k, sizes, (sh_lir_arg[]){{.data = rg.len}, {.data = rg.qoff}, {.data = rg.soff},
                                                      {.data = rg.q}, {.data = rg.k}, {.data = rg.s}}));
      lr_ragged_scores(&rg, 0.25f, rg.sref);
      char what[64];
      snprintf(what, sizeof what, "dot tile W %d D %lld", w, (long long)dims[di]);
      CHECK(lr_close(what, rg.s, rg.sref, rg.s_elems, 1e-5));
      lr_ragged_free(&rg);
    }
    sh_lir_free(k);
  }
}
