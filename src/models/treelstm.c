/*
 * treelstm.c — the binary TreeLSTM (see treelstm.h): parameters and the
 * per-tree builder: one pass over the tree's nodes in post-order (children
 * first, no recursion) that builds expressions; Sheaf batches them across
 * trees and levels when the graph is flushed.
 */
#include "models/treelstm.h"
#include "models/params.h"

#include "models/tree_walk.h"

sheaf_status sh_treelstm_declare(sheaf_model *m, int64_t H, int64_t E, int64_t V,
                                 sh_treelstm *p) {
  p->hidden = H;
  p->embed = E;
  p->vocab = V;
  p->words = sh_word_ids_of_rows(V);
  const sh_model_param_decl decl[] = {
      {"emb", 2, V, E, SHEAF_INIT_NORMAL, &p->emb},
      {"W_leaf", 2, E, 3 * H, SHEAF_INIT_GLOROT, &p->W_leaf},
      {"b_leaf", 1, 3 * H, 0, SHEAF_INIT_ZERO, &p->b_leaf},
      {"W_node", 2, 2 * H, 5 * H, SHEAF_INIT_GLOROT, &p->W_node},
      {"b_node", 1, 5 * H, 0, SHEAF_INIT_ZERO, &p->b_node},
      {"W_out", 2, H, SH_TREELSTM_CLASSES, SHEAF_INIT_GLOROT, &p->W_out},
      {"b_out", 1, SH_TREELSTM_CLASSES, 0, SHEAF_INIT_ZERO, &p->b_out},
  };
  return sh_params_declare(m, decl, sizeof decl / sizeof decl[0]);
}

typedef struct state {
  sheaf_expr h, c;
} state;

/* The state of leaf n: the fused leaf cell (gates [i o u]). */
static state leaf(sheaf_graph *g, const sh_treelstm *p, const sh_treebank *tb, int32_t n) {
  sheaf_expr x = sheaf_lookup(g, p->emb, sh_word_id(p->words, tb->word[n]));
  state s = {(sheaf_expr){0}, (sheaf_expr){0}};
  sheaf_tree_lstm_cell(g, p->W_leaf, p->b_leaf, x, (sheaf_expr){0}, (sheaf_expr){0}, &s.h, &s.c);
  return s; /* a failure is the graph's error: null expressions */
}

/* The state of a node from its children's: the fused binary cell (gates
 * [i fl fr o u] over [h_l ; h_r]). */
static state cell(sheaf_graph *g, const sh_treelstm *p, state l, state r) {
  sheaf_expr hh[2] = {l.h, r.h};
  state s = {(sheaf_expr){0}, (sheaf_expr){0}};
  sheaf_tree_lstm_cell(g, p->W_node, p->b_node, sheaf_concat(g, 2, hh), l.c, r.c, &s.h, &s.c);
  return s;
}

sheaf_expr sh_treelstm_build(sheaf_graph *g, const sh_treelstm *p, const sh_treebank *tb,
                             int32_t t, sheaf_expr *root_h) {
  int32_t first = tb->tree_first[t];
  state *st = sh_tree_scratch(g, tb, t, sizeof *st); /* by node - first */
  if (!st) return (sheaf_expr){0};
  for (int32_t n = first; n < first + tb->tree_size[t]; n++) { /* post-order: children first */
    int32_t nc = tb->n_children[n];
    if (nc == 0) st[n - first] = leaf(g, p, tb, n);
    else if (nc == 1) st[n - first] = st[sh_tb_child(tb, n, 0) - first]; /* unary: pass through */
    else st[n - first] = cell(g, p, st[sh_tb_child(tb, n, 0) - first], st[sh_tb_child(tb, n, 1) - first]);
  }
  state s = st[tb->tree_root[t] - first];
  free(st);
  if (root_h) *root_h = s.h;
  sheaf_graph_phase(g, 1); /* every tree's classifier in one batch */
  sheaf_expr out = sheaf_log_softmax(g, sheaf_affine(g, p->W_out, s.h, p->b_out));
  sheaf_graph_phase(g, 0);
  return out;
}
