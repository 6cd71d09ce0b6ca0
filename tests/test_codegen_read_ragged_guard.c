/*
 * test_codegen_read_ragged_guard.c — cache_read_ragged and
 * contract_ragged (src/codegen/sched_read_ragged.c) where the accesses
 * lie under a condition on the loop's own iteration that keeps a computed
 * fixed index in bounds (for b: if b + 1 < B: x[b + 1, j]): the copy and
 * the block's size, made on every iteration, would read x and the lengths
 * at b + 1 = B. Refused, the kernel unchanged and its interpreter run
 * still in bounds and right.
 */
#include <stdlib.h>
#include <string.h>

#include "codegen/lir_int.h"
#include "codegen/lir_sched.h"
#include "harness.h"

static char *text(sheaf_ctx *ctx, const sh_lir_kernel *k) {
  sh_buf b;
  sh_buf_init(&b, ctx);
  sh_lir_print(k, &b);
  char *t = strdup(sh_buf_cstr(&b));
  sh_buf_free(&b);
  return t;
}

/* for b: out[b] = 0; if b + 1 < B: for j in 0..Ls[b + 1]: (y[b + 1, b, j] =
 * 2 x[b + 1, j];) out[b] += (y[b + 1, b, j] | x[b + 1, j]) */
static sh_lir_kernel *next_seq(sheaf_ctx *ctx, bool scratch) {
  sh_lir_kernel *k;
  if (!CHECK_OK(ctx, sh_lir_create(ctx, scratch ? "nsy" : "nsx", &k))) return NULL;
  sh_lir_expr B = sh_lir_sz(k, sh_lir_size(k, "B"));
  sh_lir_buf Ls = sh_lir_buffer(k, "Ls", SH_LIR_I32, SH_LIR_IN, 1, &B);
  sh_lir_buf x = sh_lir_buffer(k, "x", SH_LIR_F32, SH_LIR_IN, 2, (sh_lir_expr[]){B, B});
  sh_lir_buf out = sh_lir_buffer(k, "out", SH_LIR_F32, SH_LIR_OUT, 1, &B);
  sh_lir_buf xo = sh_lir_buffer(k, "x_off", SH_LIR_I32, SH_LIR_IN, 1, &B);
  sh_lir_buffer_ragged(k, x, 2u, Ls, xo);
  sh_lir_buf y = SH_LIR_NONE;
  if (scratch) {
    y = sh_lir_buffer(k, "y", SH_LIR_F32, SH_LIR_OUT, 3, (sh_lir_expr[]){B, B, B});
    sh_lir_buf yo = sh_lir_buffer(k, "y_off", SH_LIR_I32, SH_LIR_IN, 1, &B);
    sh_lir_buffer_ragged(k, y, 4u, Ls, yo);
    k->bufs[y].scratch = true;
  }
  sh_lir_stmt b = sh_lir_loop(k, sh_lir_root(k), "b", B);
  sh_lir_expr vb = sh_lir_lv(k, b), nb = sh_lir_add(k, vb, sh_lir_int(k, 1));
  sh_lir_store1(k, b, out, vb, sh_lir_flt(k, 0), SH_LIR_COMBINE_NONE);
  sh_lir_stmt g = sh_lir_if(k, b, sh_lir_bin(k, SH_LIR_OP_LT, nb, B));
  sh_lir_stmt j = sh_lir_loop(k, g, "j", sh_lir_load1(k, Ls, nb));
  sh_lir_expr xj = sh_lir_load2(k, x, nb, sh_lir_lv(k, j));
  if (scratch) {
    sh_lir_expr yi[3] = {nb, vb, sh_lir_lv(k, j)};
    sh_lir_store(k, j, y, 3, yi, sh_lir_mul(k, sh_lir_flt(k, 2), xj), SH_LIR_COMBINE_NONE);
    xj = sh_lir_load(k, y, 3, yi);
  }
  sh_lir_store1(k, j, out, vb, xj, SH_LIR_COMBINE_ADD);
  if (!CHECK_OK(ctx, sh_lir_status(k)) || !CHECK_OK(ctx, sh_lir_verify(k))) {
    sh_lir_free(k);
    return NULL;
  }
  return k;
}

/* B = 4, lengths 3, 0, 1, 5: out = (sum of x[1], x[2], x[3], 0) times 1 or 2 */
static bool run_ok(sheaf_ctx *ctx, sh_lir_kernel *k, float scale, const char *what) {
  int32_t L[] = {3, 0, 1, 5}, off[] = {0, 3, 3, 4};
  float xs[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, o[4], y[27];
  for (int q = 0; q < 27; q++) y[q] = NAN;
  int64_t sizes[] = {4};
  sh_lir_arg args[] = {{.data = L}, {.data = xs}, {.data = o}, {.data = off}, {.data = y}, {.data = off}};
  if (!CHECK_OK(ctx, sh_lir_run(k, sizes, args))) return false;
  const float want[4] = {0, 4, 35, 0};
  for (int b = 0; b < 4; b++)
    if (!(o[b] == scale * want[b]))
      return th_fail(__FILE__, __LINE__, "%s: out[%d] = %g, want %g", what, b, (double)o[b], (double)(scale * want[b]));
  return true;
}

TEST(codegen_read_ragged_guarded_index) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k = next_seq(ctx, false);
  REQUIRE(k);
  REQUIRE(run_ok(ctx, k, 1, "cache_read_ragged, before"));
  char *t0 = text(ctx, k);
  CHECK_STATUS(ctx, sh_sched_cache_read_ragged(k, sh_lir_find_buffer(k, "x"), sh_lir_find_loop(k, "b"), NULL),
               SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "cache_read_ragged of x at loop b: a load of it at a computed index under a condition");
  char *t1 = text(ctx, k);
  CHECK_EQ_STR(t1, t0);
  free(t0), free(t1);
  run_ok(ctx, k, 1, "cache_read_ragged, after");
  sh_lir_free(k);

  k = next_seq(ctx, true);
  REQUIRE(k);
  REQUIRE(run_ok(ctx, k, 2, "contract_ragged, before"));
  t0 = text(ctx, k);
  CHECK_STATUS(ctx, sh_sched_contract_ragged(k, sh_lir_find_buffer(k, "y"), sh_lir_find_loop(k, "b")),
               SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "contract_ragged of y at loop b: an access at a computed index under a condition");
  t1 = text(ctx, k);
  CHECK_EQ_STR(t1, t0);
  free(t0), free(t1);
  run_ok(ctx, k, 2, "contract_ragged, after");
  sh_lir_free(k);
}
