/*
 * linear_value.c — main's result of one instance of a linearized run as a
 * language value (sh_value) whose tensors are graph inputs holding the
 * linear outputs: the shape the dynamic runtime's result has, so the CLI's
 * formatters (cli/run_lang_linear.c) and sheaf_program's copy-out
 * (program.c) read a linear run as they read a dynamic one.
 */
#include <stdlib.h>
#include <string.h>

#include "compile/linear.h"

/* Instance i's row `row` (a per-token map's element, else 0) of type t,
 * from component *comp on; aggregates are appended to aggs. */
static sheaf_status result_of(sheaf_graph *g, const sh_lin *L, int32_t i, int32_t row, const sh_type *t, int *comp,
                              sh_value *out, sh_agg **aggs, int *n_aggs) {
  if (t && (t->kind == SH_TY_LIST || t->kind == SH_TY_TUPLE)) {
    bool list = t->kind == SH_TY_LIST; /* a per-token map: one row of main's state per token */
    int32_t n = list ? sh_lin_output_rows(L, i) : t->n;
    sh_agg *a = *n_aggs < SH_LIN_MAX_AGGS ? calloc(1, sizeof *a + (size_t)n * sizeof(sh_value)) : NULL;
    if (!a) return SHEAF_ERR_NOMEM;
    aggs[(*n_aggs)++] = a;
    a->tag = -1, a->n = n;
    for (int32_t k = 0; k < n; k++) {
      int c = *comp; /* a list's rows all start at the same component */
      sheaf_status st = list ? result_of(g, L, i, k, t->elems[0], &c, &a->items[k], aggs, n_aggs)
                             : result_of(g, L, i, row, t->elems[k], comp, &a->items[k], aggs, n_aggs);
      if (st) return st;
    }
    memset(out, 0, sizeof *out);
    out->kind = list ? SH_V_LIST : SH_V_TUPLE, out->agg = a;
    return SHEAF_OK;
  }
  int rank;
  int64_t dims[2];
  sh_lin_output_shape(L, *comp, &rank, dims);
  memset(out, 0, sizeof *out);
  out->kind = SH_V_TENSOR;
  out->t = sheaf_input(g, rank, dims, sh_lin_output_row(L, i, row, (*comp)++));
  return sheaf_expr_is_null(out->t) ? sheaf_graph_status(g) ? sheaf_graph_status(g) : SHEAF_ERR_NOMEM : SHEAF_OK;
}

sheaf_status sh_lin_result(sheaf_graph *g, const sh_lin *L, int32_t i, const sh_type *ret, sh_value *out,
                           sh_agg **aggs, int *n_aggs) {
  int comp = 0;
  *n_aggs = 0;
  return result_of(g, L, i, 0, ret, &comp, out, aggs, n_aggs);
}
