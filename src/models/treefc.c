/*
 * treefc.c — TreeFC (see treefc.h): parameters and the per-tree builder
 * (one pass over the nodes in post-order, no recursion).
 */
#include "models/treefc.h"

#include "models/tree_walk.h"

sheaf_status sh_treefc_declare(sheaf_model *m, int64_t H, int64_t V, sh_treefc *p) {
  p->hidden = H;
  p->vocab = V;
  p->words = sh_word_ids_of_rows(V);
  int64_t s_emb[2] = {V, H}, s_W[2] = {2 * H, H}, s_b[1] = {H};
  sheaf_status st = sheaf_model_param(m, "emb", 2, s_emb, SHEAF_INIT_NORMAL, &p->emb);
  if (st == SHEAF_OK) st = sheaf_model_param(m, "W", 2, s_W, SHEAF_INIT_GLOROT, &p->W);
  if (st == SHEAF_OK) st = sheaf_model_param(m, "b", 1, s_b, SHEAF_INIT_ZERO, &p->b);
  return st;
}

sheaf_expr sh_treefc_build(sheaf_graph *g, const sh_treefc *p, const sh_treebank *tb, int32_t t) {
  int32_t first = tb->tree_first[t];
  sheaf_expr *v = sh_tree_scratch(g, tb, t, sizeof *v); /* by node - first */
  if (!v) return (sheaf_expr){0};
  for (int32_t n = first; n < first + tb->tree_size[t]; n++) { /* post-order: children first */
    int32_t nc = tb->n_children[n];
    if (nc == 0) {
      v[n - first] = sheaf_lookup(g, p->emb, sh_word_id(p->words, tb->word[n]));
    } else if (nc == 1) {
      v[n - first] = v[sh_tb_child(tb, n, 0) - first];
    } else {
      sheaf_expr lr[2] = {v[sh_tb_child(tb, n, 0) - first], v[sh_tb_child(tb, n, 1) - first]};
      v[n - first] = sheaf_tanh(g, sheaf_affine(g, p->W, sheaf_concat(g, 2, lr), p->b));
    }
  }
  sheaf_expr root = v[tb->tree_root[t] - first];
  free(v);
  return root;
}
