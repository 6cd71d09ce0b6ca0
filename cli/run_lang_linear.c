/*
 * run_lang_linear.c — `sheaf run MODEL.sf --mode linear|auto`: runs a model
 * that linearizes (src/compile/linear.h) batch by batch and writes every
 * instance's outputs, in instance order, through the same formatters as
 * the dynamic run (run_lang_out.h: main's result rebuilt as a value of
 * graph inputs, so text, jsonl and npy read the same).
 */
#include <stdlib.h>
#include <string.h>

#include "run_lang_linear.h"

/* main's result of instance i as a value: tensors (graph inputs holding
 * the linear outputs) in the shape of type t. */
static sheaf_status result_value(sheaf_graph *g, const sh_lin *L, int32_t i, const sh_type *t, int *comp,
                                 sh_value *out, sh_agg **aggs, int *n_aggs) {
  if (t && t->kind == SH_TY_TUPLE) {
    sh_agg *a = calloc(1, sizeof *a + (size_t)t->n * sizeof(sh_value));
    if (!a) return SHEAF_ERR_NOMEM;
    aggs[(*n_aggs)++] = a;
    a->tag = -1, a->n = t->n;
    for (int k = 0; k < t->n; k++) {
      sheaf_status st = result_value(g, L, i, t->elems[k], comp, &a->items[k], aggs, n_aggs);
      if (st) return st;
    }
    memset(out, 0, sizeof *out);
    out->kind = SH_V_TUPLE, out->agg = a;
    return SHEAF_OK;
  }
  int rank;
  int64_t dims[2];
  sh_lin_output_shape(L, *comp, &rank, dims);
  memset(out, 0, sizeof *out);
  out->kind = SH_V_TENSOR;
  out->t = sheaf_input(g, rank, dims, sh_lin_output(L, i, (*comp)++));
  return sheaf_expr_is_null(out->t) ? sheaf_graph_status(g) ? sheaf_graph_status(g) : SHEAF_ERR_NOMEM : SHEAF_OK;
}

#define MAX_AGGS 64

sheaf_status lang_run_linear(sh_lin *L, sheaf_model *model, const sh_module *m, const sh_dataset *d,
                             sh_word_ids ids, int32_t n, int32_t batch, lang_format format, FILE *out,
                             int64_t *npy_rows, int64_t *npy_cols, char *npy_why, size_t why_cap,
                             int32_t *failed_at) {
  sheaf_ctx *ctx = m->ctx;
  sheaf_graph *g = NULL;
  sheaf_status st = sheaf_graph_create(model, NULL, &g);
  sh_agg *aggs[MAX_AGGS];
  for (int32_t first = 0; !st && first < n; first += batch) {
    int32_t cnt = first + batch <= n ? batch : n - first;
    if ((st = sh_lin_run(L, &d->tb, first, cnt, ids))) {
      *failed_at = first;
      break;
    }
    for (int32_t t = 0; !st && t < cnt; t++) {
      int32_t i = first + t;
      int comp = 0, n_aggs = 0;
      sh_value v;
      st = result_value(g, L, t, m->main->ret_type, &comp, &v, aggs, &n_aggs);
      int bad = 0;
      if (!st && format == LANG_FORMAT_TEXT) {
        char prefix[16];
        snprintf(prefix, sizeof prefix, "%d", (int)i);
        bad = lang_out_text(out, g, prefix, v);
      } else if (!st && format == LANG_FORMAT_JSONL) {
        bad = lang_out_json(out, g, m, i, v, NULL, NULL, 0);
      } else if (!st) {
        int64_t rows = 0, cols = 0;
        char why[256] = "";
        bad = lang_out_npy_rows(out, g, v, &rows, &cols, why, sizeof why);
        if (bad && why[0]) st = sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s", why);
        npy_rows[i] = rows;
        if (*npy_cols == 0) *npy_cols = cols;
        if (rows > 0 && cols != *npy_cols && !npy_why[0])
          snprintf(npy_why, why_cap,
                   "--format npy writes one matrix: instance %d has rows of %lld columns, others %lld "
                   "(use --format jsonl)", (int)i, (long long)cols, (long long)*npy_cols);
      }
      for (int k = 0; k < n_aggs; k++) free(aggs[k]);
      if (!st && bad) st = sh_fail(ctx, SHEAF_ERR_IO, "writing the outputs of instance %d", (int)i);
      if (st) *failed_at = i;
    }
    if (!st) st = sheaf_graph_reset(g);
  }
  sheaf_graph_free(g);
  return st;
}
