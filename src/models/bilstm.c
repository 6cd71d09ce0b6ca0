/*
 * bilstm.c — the BiLSTM tagger (see bilstm.h): parameters and the
 * per-sentence builder.
 */
#include "models/bilstm.h"
#include "models/params.h"

#include <stdlib.h>

sheaf_status sh_bilstm_declare(sheaf_model *m, int64_t H, int64_t E, int64_t V, sh_bilstm *p) {
  p->hidden = H;
  p->embed = E;
  p->vocab = V;
  p->words = sh_word_ids_of_rows(V);
  const sh_model_param_decl decl[] = {
      {"emb", 2, V, E, SHEAF_INIT_NORMAL, &p->emb},
      {"W_fwd", 2, E + H, 4 * H, SHEAF_INIT_GLOROT, &p->W_fwd},
      {"b_fwd", 1, 4 * H, 0, SHEAF_INIT_ZERO, &p->b_fwd},
      {"W_bwd", 2, E + H, 4 * H, SHEAF_INIT_GLOROT, &p->W_bwd},
      {"b_bwd", 1, 4 * H, 0, SHEAF_INIT_ZERO, &p->b_bwd},
      {"W_tag", 2, 2 * H, SH_BILSTM_TAGS, SHEAF_INIT_GLOROT, &p->W_tag},
      {"b_tag", 1, SH_BILSTM_TAGS, 0, SHEAF_INIT_ZERO, &p->b_tag},
  };
  return sh_params_declare(m, decl, sizeof decl / sizeof decl[0]);
}

sheaf_status sh_bilstm_build(sheaf_graph *g, const sh_bilstm *p, const int32_t *words,
                             int32_t n, sheaf_expr *out) {
  if (n <= 0) return sheaf_graph_status(g);
  /* out[] holds the forward states, then [h_t ; h'_t], then the outputs */
  int64_t hshape[1] = {p->hidden};
  sheaf_expr zero = sheaf_zeros(g, 1, hshape);
  sheaf_expr h = zero, c = {0};
  for (int32_t t = 0; t < n; t++) {
    sheaf_expr xh[2] = {sheaf_lookup(g, p->emb, sh_word_id(p->words, words[t])), h};
    sheaf_lstm_cell(g, p->W_fwd, p->b_fwd, sheaf_concat(g, 2, xh), c, &h, &c);
    out[t] = h;
  }
  h = zero;
  c = (sheaf_expr){0};
  for (int32_t t = n - 1; t >= 0; t--) {
    /* the lookup is built again: a lookup is a view of the table's row */
    sheaf_expr xh[2] = {sheaf_lookup(g, p->emb, sh_word_id(p->words, words[t])), h};
    sheaf_lstm_cell(g, p->W_bwd, p->b_bwd, sheaf_concat(g, 2, xh), c, &h, &c);
    sheaf_expr both[2] = {out[t], h};
    out[t] = sheaf_concat(g, 2, both);
  }
  /* the classifier in phase 1: every token of every sentence in one batch */
  sheaf_graph_phase(g, 1);
  for (int32_t t = 0; t < n; t++)
    out[t] = sheaf_log_softmax(g, sheaf_affine(g, p->W_tag, out[t], p->b_tag));
  sheaf_graph_phase(g, 0);
  return sheaf_graph_status(g);
}
