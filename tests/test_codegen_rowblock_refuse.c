/*
 * test_codegen_rowblock_refuse.c — what the row-block primitives
 * (compute_at, shrink: src/codegen/sched_rowblock.c) must refuse or get
 * right: a row-block loop inside another loop (compute_at would run the
 * consumer once per iteration of the outer loop, on a product whose other
 * columns are not there yet; shrink would let one run's block be
 * overwritten before the next run reads it) and a scoped temporary
 * (its alloc sizes one copy, where a shrunk temporary has one per
 * thread). Each is refused (the kernel unchanged) or gives the
 * reference's values on the interpreter.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/lir_int.h"
#include "codegen/lir_sched.h"
#include "harness.h"

/* C = A·B (a temporary: for i: for j: C[i, j] = 0; for k: C[i, j] += ..);
 * tot[0] = 0; for r: for c: tot[0] += C[r, c]; out[r, c] = 2 C[r, c]
 * (the consumer: its own rows, and a total over every row). */
static sh_lir_kernel *gemm_total(sheaf_ctx *ctx) {
  sh_lir_kernel *k;
  if (sh_lir_create(ctx, "gtot", &k)) return NULL;
  sh_lir_expr M = sh_lir_sz(k, sh_lir_size(k, "M")), N = sh_lir_sz(k, sh_lir_size(k, "N")),
              K = sh_lir_sz(k, sh_lir_size(k, "K")), one = sh_lir_int(k, 1);
  sh_lir_buf A = sh_lir_buffer(k, "A", SH_LIR_F32, SH_LIR_IN, 2, (sh_lir_expr[]){M, K});
  sh_lir_buf B = sh_lir_buffer(k, "B", SH_LIR_F32, SH_LIR_IN, 2, (sh_lir_expr[]){K, N});
  sh_lir_buf out = sh_lir_buffer(k, "out", SH_LIR_F32, SH_LIR_OUT, 2, (sh_lir_expr[]){M, N});
  sh_lir_buf tot = sh_lir_buffer(k, "tot", SH_LIR_F32, SH_LIR_OUT, 1, &one);
  sh_lir_buf C = sh_lir_buffer(k, "C", SH_LIR_F32, SH_LIR_TEMP, 2, (sh_lir_expr[]){M, N});
  sh_lir_store1(k, sh_lir_root(k), tot, sh_lir_int(k, 0), sh_lir_flt(k, 0), SH_LIR_COMBINE_NONE);
  sh_lir_stmt i = sh_lir_loop(k, sh_lir_root(k), "i", M);
  sh_lir_stmt j = sh_lir_loop(k, i, "j", N);
  sh_lir_store2(k, j, C, sh_lir_lv(k, i), sh_lir_lv(k, j), sh_lir_flt(k, 0), SH_LIR_COMBINE_NONE);
  sh_lir_stmt kk = sh_lir_loop(k, j, "k", K);
  sh_lir_store2(k, kk, C, sh_lir_lv(k, i), sh_lir_lv(k, j),
                sh_lir_mul(k, sh_lir_load2(k, A, sh_lir_lv(k, i), sh_lir_lv(k, kk)),
                           sh_lir_load2(k, B, sh_lir_lv(k, kk), sh_lir_lv(k, j))),
                SH_LIR_COMBINE_ADD);
  sh_lir_stmt r = sh_lir_loop(k, sh_lir_root(k), "r", M);
  sh_lir_stmt c = sh_lir_loop(k, r, "c", N);
  sh_lir_expr Crc = sh_lir_load2(k, C, sh_lir_lv(k, r), sh_lir_lv(k, c));
  sh_lir_store1(k, c, tot, sh_lir_int(k, 0), Crc, SH_LIR_COMBINE_ADD);
  sh_lir_store2(k, c, out, sh_lir_lv(k, r), sh_lir_lv(k, c), sh_lir_mul(k, sh_lir_flt(k, 2), Crc),
                SH_LIR_COMBINE_NONE);
  if (sh_lir_status(k)) {
    sh_lir_free(k);
    return NULL;
  }
  return k;
}

static double urand(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*s >> 11) / 9007199254740992.0 - 0.5;
}

/* The interpreter at M x N x K (M, N up to 16, K up to 4) against double
 * math. */
static bool check_total(sh_lir_kernel *k, int64_t M, int64_t N, int64_t K, const char *what) {
  uint64_t seed = 3;
  float A[64], B[64], o[256], tot[1] = {NAN};
  for (int64_t q = 0; q < M * K; q++) A[q] = (float)urand(&seed);
  for (int64_t q = 0; q < K * N; q++) B[q] = (float)urand(&seed);
  for (int64_t q = 0; q < M * N; q++) o[q] = NAN;
  int64_t sizes[3] = {M, N, K};
  if (!CHECK_OK(k->ctx, sh_lir_run(k, sizes, (sh_lir_arg[]){{.data = A}, {.data = B}, {.data = o}, {.data = tot}})))
    return false;
  double want_tot = 0;
  bool ok = true;
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double s = 0;
      for (int64_t q = 0; q < K; q++) s += (double)A[i * K + q] * B[q * N + j];
      want_tot += s;
      if (ok && !(fabs(o[i * N + j] - 2 * s) <= 1e-5))
        ok = th_fail(__FILE__, __LINE__, "%s: M=%lld N=%lld out[%lld, %lld] = %g, want %g", what, (long long)M,
                     (long long)N, (long long)i, (long long)j, (double)o[i * N + j], 2 * s);
    }
  if (!(fabs(tot[0] - want_tot) <= 1e-4))
    ok = th_fail(__FILE__, __LINE__, "%s: M=%lld N=%lld tot = %g, want %g", what, (long long)M, (long long)N,
                 (double)tot[0], want_tot);
  return ok;
}

static const char *text_of(const sh_lir_kernel *k, char *t, size_t cap) {
  sh_buf b;
  sh_buf_init(&b, k->ctx);
  sh_lir_print(k, &b);
  snprintf(t, cap, "%s", sh_buf_cstr(&b));
  sh_buf_free(&b);
  return t;
}

/* i in blocks of 4 rows, j in blocks of 2 columns, the column blocks
 * outermost: for j_o: for i_o: for i_i: for j_i: ...; *io gets i_o. */
static bool column_blocks_outside(sh_lir_kernel *k, sh_lir_stmt *io) {
  sh_lir_stmt ii, jo, ji;
  if (sh_sched_split(k, sh_lir_find_loop(k, "i"), 4, SH_SCHED_TAIL_GUARD, io, &ii, NULL) ||
      sh_sched_split(k, sh_lir_find_loop(k, "j"), 2, SH_SCHED_TAIL_GUARD, &jo, &ji, NULL))
    return false;
  return sh_sched_reorder(k, 4, (sh_lir_stmt[]){jo, *io, ii, ji}) == SHEAF_OK && sh_lir_verify(k) == SHEAF_OK;
}

static const int64_t SHAPES[][3] = {{1, 1, 1}, {4, 2, 3}, {5, 3, 2}, {8, 4, 1}, {13, 7, 4}, {16, 16, 2}};

TEST(codegen_rowblock_compute_at_inside_column_loop) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k = gemm_total(ctx);
  REQUIRE(k);
  for (size_t s = 0; s < SH_ARRAY_LEN(SHAPES); s++)
    REQUIRE(check_total(k, SHAPES[s][0], SHAPES[s][1], SHAPES[s][2], "unscheduled"));
  sh_lir_stmt io;
  REQUIRE(column_blocks_outside(k, &io));
  for (size_t s = 0; s < SH_ARRAY_LEN(SHAPES); s++)
    REQUIRE(check_total(k, SHAPES[s][0], SHAPES[s][1], SHAPES[s][2], "column blocks outside"));
  static char before[65536], after[65536];
  text_of(k, before, sizeof before);
  /* the consumer inside i_o would run once per column block j_o */
  sheaf_status st = sh_sched_compute_at(k, sh_lir_find_loop(k, "r"), io, 4, NULL);
  if (st == SHEAF_OK) {
    CHECK_OK(ctx, sh_lir_verify(k));
    for (size_t s = 0; s < SH_ARRAY_LEN(SHAPES); s++)
      check_total(k, SHAPES[s][0], SHAPES[s][1], SHAPES[s][2], "compute_at inside the column blocks");
  } else {
    CHECK_EQ_INT(st, SHEAF_ERR_INVALID_ARG);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "inside loop j_o");
    CHECK_EQ_STR(text_of(k, after, sizeof after), before);
    CHECK_OK(ctx, sh_lir_status(k));
  }
  sh_lir_free(k);
}

/* shrink at a row-block loop inside another loop: the block's storage
 * must not carry values from one run of the row-block loop to the next.
 * for t in 0..2: for io: for in in 0..4: (t == 0: T[row] = 3 x[row]; else
 * y[row] = T[row]): every row of T is written by run t = 0 and read by
 * run t = 1, after every block of t = 0 has reused the one block. */
TEST(codegen_rowblock_shrink_inside_column_loop) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k = NULL;
  REQUIRE_OK(ctx, sh_lir_create(ctx, "two_runs", &k));
  sh_lir_expr M = sh_lir_sz(k, sh_lir_size(k, "M"));
  sh_lir_buf x = sh_lir_buffer(k, "x", SH_LIR_F32, SH_LIR_IN, 1, &M);
  sh_lir_buf y = sh_lir_buffer(k, "y", SH_LIR_F32, SH_LIR_OUT, 1, &M);
  sh_lir_buf T = sh_lir_buffer(k, "T", SH_LIR_F32, SH_LIR_TEMP, 1, &M);
  sh_lir_stmt t = sh_lir_loop(k, sh_lir_root(k), "t", sh_lir_int(k, 2));
  sh_lir_stmt io2 = sh_lir_loop(k, t, "io", sh_lir_bin(k, SH_LIR_OP_DIV, sh_lir_add(k, M, sh_lir_int(k, 3)), sh_lir_int(k, 4)));
  sh_lir_stmt in = sh_lir_loop(k, io2, "in", sh_lir_int(k, 4));
  sh_lir_expr row = sh_lir_add(k, sh_lir_mul(k, sh_lir_lv(k, io2), sh_lir_int(k, 4)), sh_lir_lv(k, in));
  sh_lir_stmt g = sh_lir_if(k, in, sh_lir_bin(k, SH_LIR_OP_LT, row, M));
  sh_lir_stmt w = sh_lir_if(k, g, sh_lir_bin(k, SH_LIR_OP_EQ, sh_lir_lv(k, t), sh_lir_int(k, 0)));
  sh_lir_store1(k, w, T, row, sh_lir_mul(k, sh_lir_flt(k, 3), sh_lir_load1(k, x, row)), SH_LIR_COMBINE_NONE);
  sh_lir_stmt e = sh_lir_else(k, w);
  sh_lir_store1(k, e, y, row, sh_lir_load1(k, T, row), SH_LIR_COMBINE_NONE);
  REQUIRE_OK(ctx, sh_lir_status(k));
  REQUIRE_OK(ctx, sh_lir_verify(k));
  float xs[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, ys[9];
  int64_t sizes[] = {9};
  for (int q = 0; q < 9; q++) ys[q] = NAN;
  REQUIRE_OK(ctx, sh_lir_run(k, sizes, (sh_lir_arg[]){{.data = xs}, {.data = ys}}));
  for (int q = 0; q < 9; q++) CHECK(ys[q] == 3 * xs[q]);
  static char before[65536], after[65536];
  text_of(k, before, sizeof before);
  sheaf_status st = sh_sched_shrink(k, T, io2);
  if (st == SHEAF_OK) {
    for (int q = 0; q < 9; q++) ys[q] = NAN;
    if (CHECK_OK(ctx, sh_lir_run(k, sizes, (sh_lir_arg[]){{.data = xs}, {.data = ys}})))
      for (int q = 0; q < 9; q++)
        if (!(ys[q] == 3 * xs[q])) {
          th_fail(__FILE__, __LINE__, "shrink inside loop t: y[%d] = %g, want %g", q, (double)ys[q], 3.0 * xs[q]);
          break;
        }
  } else {
    CHECK_EQ_INT(st, SHEAF_ERR_INVALID_ARG);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "loop t");
    CHECK_EQ_STR(text_of(k, after, sizeof after), before);
  }
  sh_lir_free(k);
}

/* A scoped temporary (allocated by its alloc statement, one copy) is not
 * shrunk: per task, its threads' copies would lie past that allocation. */
TEST(codegen_rowblock_shrink_scoped) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k = NULL;
  REQUIRE_OK(ctx, sh_lir_create(ctx, "shs", &k));
  sh_lir_expr M = sh_lir_sz(k, sh_lir_size(k, "M"));
  sh_lir_buf x = sh_lir_buffer(k, "x", SH_LIR_F32, SH_LIR_IN, 1, &M);
  sh_lir_buf y = sh_lir_buffer(k, "y", SH_LIR_F32, SH_LIR_OUT, 1, &M);
  sh_lir_buf T = sh_lir_buffer(k, "T", SH_LIR_F32, SH_LIR_TEMP, 1, &M);
  REQUIRE_OK(ctx, sh_lir_buffer_scoped(k, T));
  sh_lir_stmt a = sh_lir_alloc(k, sh_lir_root(k), T);
  sh_lir_stmt io = sh_lir_loop(k, a, "io", sh_lir_bin(k, SH_LIR_OP_DIV, sh_lir_add(k, M, sh_lir_int(k, 63)), sh_lir_int(k, 64)));
  sh_lir_stmt in = sh_lir_loop(k, io, "in", sh_lir_int(k, 64));
  sh_lir_expr row = sh_lir_add(k, sh_lir_mul(k, sh_lir_lv(k, io), sh_lir_int(k, 64)), sh_lir_lv(k, in));
  sh_lir_stmt g = sh_lir_if(k, in, sh_lir_bin(k, SH_LIR_OP_LT, row, M));
  sh_lir_store1(k, g, T, row, sh_lir_mul(k, sh_lir_flt(k, 3), sh_lir_load1(k, x, row)), SH_LIR_COMBINE_NONE);
  sh_lir_store1(k, g, y, row, sh_lir_load1(k, T, row), SH_LIR_COMBINE_NONE);
  REQUIRE_OK(ctx, sh_lir_status(k));
  REQUIRE_OK(ctx, sh_lir_verify(k));
  static char before[65536], after[65536];
  text_of(k, before, sizeof before);
  CHECK_STATUS(ctx, sh_sched_shrink(k, T, io), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "shrink of T at io: a scoped temporary");
  CHECK_EQ_STR(text_of(k, after, sizeof after), before);
  sh_lir_free(k);
}
