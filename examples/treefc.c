/*
 * treefc.c — TreeFC (see treefc.h): parameters and the per-tree recursive
 * builder.
 */
#include "treefc.h"

sheaf_status ex_treefc_declare(sheaf_model *m, int64_t H, int64_t V, ex_treefc *p) {
  p->hidden = H;
  p->vocab = V;
  int64_t s_emb[2] = {V, H}, s_W[2] = {2 * H, H}, s_b[1] = {H};
  sheaf_status st = sheaf_model_param(m, "emb", 2, s_emb, SHEAF_INIT_NORMAL, &p->emb);
  if (st == SHEAF_OK) st = sheaf_model_param(m, "W", 2, s_W, SHEAF_INIT_GLOROT, &p->W);
  if (st == SHEAF_OK) st = sheaf_model_param(m, "b", 1, s_b, SHEAF_INIT_ZERO, &p->b);
  return st;
}

static sheaf_expr node(sheaf_graph *g, const ex_treefc *p, const sh_treebank *tb, int32_t n,
                       int32_t unk_row) {
  int32_t nc = tb->n_children[n];
  if (nc == 0) {
    int32_t w = tb->word[n];
    return sheaf_lookup(g, p->emb, w >= 0 && w < p->vocab - 1 ? w : unk_row);
  }
  if (nc == 1) return node(g, p, tb, sh_tb_child(tb, n, 0), unk_row);
  sheaf_expr lr[2] = {node(g, p, tb, sh_tb_child(tb, n, 0), unk_row),
                      node(g, p, tb, sh_tb_child(tb, n, 1), unk_row)};
  return sheaf_tanh(g, sheaf_affine(g, p->W, sheaf_concat(g, 2, lr), p->b));
}

sheaf_expr ex_treefc_build(sheaf_graph *g, const ex_treefc *p, const sh_treebank *tb, int32_t t,
                           int32_t unk_row) {
  return node(g, p, tb, tb->tree_root[t], unk_row);
}
