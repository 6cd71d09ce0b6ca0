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


sheaf_status lang_run_linear(sh_lin *L, sheaf_model *model, const sh_module *m, const sh_dataset *d,
                             sh_word_ids ids, const int32_t *form_ids, int32_t n, int32_t batch, lang_format format, FILE *out,
                             int64_t *npy_rows, int64_t *npy_cols, char *npy_why, size_t why_cap,
                             int32_t *failed_at) {
  sheaf_ctx *ctx = m->ctx;
  sheaf_graph *g = NULL;
  sheaf_status st = sheaf_graph_create(model, NULL, &g);
  sh_agg **aggs = calloc(SH_LIN_MAX_AGGS, sizeof *aggs);
  if (!aggs && !st) st = sh_fail(ctx, SHEAF_ERR_NOMEM, "out of memory");
  /* token records: the CoNLL-U columns as the dynamic run reads them, each token's text (chars) */
  sh_lin_records rec = {0};
  const char **forms = NULL;
  size_t *form_lens = NULL;
  if (!st && sh_lin_takes_records(L)) {
    bool conllu = d->sent_xpos != NULL; /* token lines have words only */
    rec.upos = conllu ? d->sent_tags : NULL, rec.xpos = d->sent_xpos;
    rec.deprel = d->sent_deprel, rec.head = d->sent_head;
    int32_t nt = d->sent_off[d->n_sents];
    if (form_ids) {
      forms = malloc(((size_t)nt + 1) * sizeof *forms), form_lens = malloc(((size_t)nt + 1) * sizeof *form_lens);
      if (!forms || !form_lens) st = sh_fail(ctx, SHEAF_ERR_NOMEM, "out of memory: the tokens' texts");
      for (int32_t k = 0; !st && k < nt; k++) {
        forms[k] = sh_vocab_str(&d->words, form_ids[k]);
        form_lens[k] = sh_vocab_len(&d->words, form_ids[k]);
      }
      rec.form = forms, rec.form_len = form_lens;
    }
  }
  for (int32_t first = 0; !st && first < n; first += batch) {
    int32_t cnt = first + batch <= n ? batch : n - first;
    st = sh_lin_takes_records(L) ? sh_lin_run_rec(L, d->sent_off, d->sent_words, &rec, first, cnt, ids)
       : d->kind == SH_DATASET_SENTS ? sh_lin_run_seq(L, d->sent_off, d->sent_words, first, cnt, ids)
                                     : sh_lin_run(L, &d->tb, first, cnt, ids);
    if (st) {
      *failed_at = first;
      break;
    }
    for (int32_t t = 0; !st && t < cnt; t++) {
      int32_t i = first + t;
      int n_aggs = 0;
      sh_value v;
      st = sh_lin_result(g, L, t, m->main->ret_type, &v, aggs, &n_aggs);
      int bad = 0;
      if (!st && format == LANG_FORMAT_TEXT) {
        char prefix[16];
        snprintf(prefix, sizeof prefix, "%d", (int)i);
        bad = lang_out_text(out, g, prefix, v);
      } else if (!st && format == LANG_FORMAT_JSONL) {
        /* a sentence's words, as the dynamic run writes them (form_ids: their texts) */
        int32_t off = d->kind == SH_DATASET_SENTS ? d->sent_off[i] : 0;
        int32_t nt = form_ids && d->kind == SH_DATASET_SENTS ? d->sent_off[i + 1] - off : 0;
        const char **form = nt ? malloc((size_t)nt * sizeof *form) : NULL;
        size_t *form_len = nt ? malloc((size_t)nt * sizeof *form_len) : NULL;
        if (nt && (!form || !form_len)) st = sh_fail(ctx, SHEAF_ERR_NOMEM, "out of memory: a sentence's words");
        for (int32_t k = 0; !st && k < nt; k++) {
          form[k] = sh_vocab_str(&d->words, form_ids[off + k]);
          form_len[k] = sh_vocab_len(&d->words, form_ids[off + k]);
        }
        if (!st) bad = lang_out_json(out, g, m, i, v, nt ? form : NULL, form_len, nt);
        free(form), free(form_len);
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
  free(aggs);
  free(forms), free(form_lens);
  return st;
}
