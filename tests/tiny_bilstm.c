/*
 * tiny_bilstm.c — the small BiLSTM tagger of the training tests
 * (tiny_bilstm.h).
 */
#include "tiny_bilstm.h"

#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "runtime/runtime.h"

bool tb_create(sheaf_ctx *ctx, tb_model *md, int64_t vocab, int64_t embed, int64_t hidden, int64_t tags,
               uint64_t seed) {
  memset(md, 0, sizeof *md);
  md->hidden = hidden;
  if (!CHECK_OK(ctx, sheaf_model_create(ctx, &md->m))) return false;
  md->p[0] = th_param(ctx, md->m, "emb", 2, vocab, embed);
  md->p[1] = th_param(ctx, md->m, "Wf", 2, embed + hidden, 4 * hidden);
  md->p[2] = th_param(ctx, md->m, "bf", 1, 4 * hidden, 0);
  md->p[3] = th_param(ctx, md->m, "Wb", 2, embed + hidden, 4 * hidden);
  md->p[4] = th_param(ctx, md->m, "bb", 1, 4 * hidden, 0);
  md->p[5] = th_param(ctx, md->m, "Wt", 2, 2 * hidden, tags);
  md->p[6] = th_param(ctx, md->m, "bt", 1, tags, 0);
  return CHECK_OK(ctx, sheaf_model_seed(md->m, seed));
}

sheaf_status tb_sentence(sheaf_graph *g, const tb_model *md, int len, const int *word, const int *tag,
                         sheaf_expr *loss, int *k) {
  const int64_t zs[1] = {md->hidden};
  sheaf_expr hf[TB_MAX_TOKENS], hb[TB_MAX_TOKENS];
  if (len < 0 || len > TB_MAX_TOKENS) return SHEAF_ERR_INVALID_ARG;
  sheaf_expr h = sheaf_zeros(g, 1, zs), c = {0, 0, 0};
  for (int t = 0; t < len; t++) {
    sheaf_expr xh[2] = {sheaf_lookup(g, md->p[0], word[t]), h};
    sheaf_lstm_cell(g, md->p[1], md->p[2], sheaf_concat(g, 2, xh), c, &h, &c);
    hf[t] = h;
  }
  h = sheaf_zeros(g, 1, zs);
  c = (sheaf_expr){0, 0, 0};
  for (int t = len - 1; t >= 0; t--) {
    sheaf_expr xh[2] = {sheaf_lookup(g, md->p[0], word[t]), h};
    sheaf_lstm_cell(g, md->p[3], md->p[4], sheaf_concat(g, 2, xh), c, &h, &c);
    hb[t] = h;
  }
  for (int t = 0; t < len; t++) {
    sheaf_expr two[2] = {hf[t], hb[t]};
    loss[(*k)++] = sheaf_nll(g, sheaf_affine(g, md->p[5], sheaf_concat(g, 2, two), md->p[6]), tag[t]);
  }
  return sheaf_graph_status(g);
}

size_t tb_numel(sheaf_model *m, sheaf_param p) {
  int rank;
  const int64_t *shape;
  sheaf_model_param_data(m, p, &rank, &shape);
  return (size_t)(rank == 2 ? shape[0] * shape[1] : shape[0]);
}

float *tb_collect(const tb_model *md, tb_what what, size_t *n) {
  size_t total = 0;
  for (int q = 0; q < 7; q++) total += tb_numel(md->m, md->p[q]);
  float *w = malloc(total * sizeof *w), *o = w;
  for (int q = 0; q < 7 && w; q++) {
    size_t c = tb_numel(md->m, md->p[q]);
    const float *src = what == TB_VALUES ? sheaf_model_param_data(md->m, md->p[q], NULL, NULL)
                       : what == TB_GRADS ? sheaf_param_grad(md->m, md->p[q])
                                          : md->m->params[md->p[q].id - 1].grad;
    if (src) {
      memcpy(o, src, c * sizeof(float));
    } else if (what == TB_GRAD_BUFFERS) {
      memset(o, 0, c * sizeof(float));
    } else {
      free(w);
      return NULL;
    }
    o += c;
  }
  *n = total;
  return w;
}
