/*
 * childsum.c — the child-sum TreeLSTM (see childsum.h): parameters and the
 * per-tree builder (one pass over the nodes in post-order, no recursion).
 */
#include "models/childsum.h"
#include "models/params.h"

#include "models/tree_walk.h"

sheaf_status sh_childsum_lstm_declare(sheaf_model *m, int64_t H, int64_t E, int64_t V,
                                      sh_childsum_lstm *p) {
  p->hidden = H;
  p->embed = E;
  p->vocab = V;
  p->words = sh_word_ids_of_rows(V);
  const sh_model_param_decl decl[] = {
      {"emb", 2, V, E, SHEAF_INIT_NORMAL, &p->emb},
      {"W_iou", 2, E, 3 * H, SHEAF_INIT_GLOROT, &p->W_iou},
      {"U_iou", 2, H, 3 * H, SHEAF_INIT_GLOROT, &p->U_iou},
      {"b_iou", 1, 3 * H, 0, SHEAF_INIT_ZERO, &p->b_iou},
      {"W_f", 2, E, H, SHEAF_INIT_GLOROT, &p->W_f},
      {"U_f", 2, H, H, SHEAF_INIT_GLOROT, &p->U_f},
      {"b_f", 1, H, 0, SHEAF_INIT_ZERO, &p->b_f},
  };
  return sh_params_declare(m, decl, sizeof decl / sizeof decl[0]);
}

typedef struct state {
  sheaf_expr h, c;
} state;

/* Children are visited in a loop; up to this many are kept on the stack,
 * more go through a second pass (rare: EWT's widest node has 18). */
#define MAX_STACK_KIDS 32

/* The state of node n from its children's (st, indexed by node - first). */
static state node(sheaf_graph *g, const sh_childsum_lstm *p, const sh_treebank *tb, int32_t n,
                  const state *st, int32_t first) {
  int64_t H = p->hidden;
  sheaf_expr x = sheaf_lookup(g, p->emb, sh_word_id(p->words, tb->word[n]));
  int32_t nc = tb->n_children[n];
  sheaf_expr iou;
  sheaf_expr fc[MAX_STACK_KIDS + 1]; /* f_k ⊙ c_k, then σ(i)⊙tanh(u) */
  sheaf_expr hs[MAX_STACK_KIDS];
  sheaf_expr h_sum = {0}, fc_sum = {0};
  int kept = 0;
  for (int32_t k = 0; k < nc; k++) {
    state ch = st[sh_tb_child(tb, n, k) - first];
    sheaf_param wf[2] = {p->W_f, p->U_f};
    sheaf_expr xf[2] = {x, ch.h};
    sheaf_expr f = sheaf_sigmoid(g, sheaf_affine_n(g, 2, wf, xf, p->b_f));
    hs[kept] = ch.h;
    fc[kept] = sheaf_mul(g, f, ch.c);
    if (++kept == MAX_STACK_KIDS) { /* fold what we have into running sums */
      sheaf_expr hp = sheaf_sum_n(g, kept, hs), fp = sheaf_sum_n(g, kept, fc);
      h_sum = sheaf_expr_is_null(h_sum) ? hp : sheaf_add(g, h_sum, hp);
      fc_sum = sheaf_expr_is_null(fc_sum) ? fp : sheaf_add(g, fc_sum, fp);
      kept = 0;
    }
  }
  if (!sheaf_expr_is_null(h_sum)) { /* > MAX_STACK_KIDS children */
    hs[kept] = h_sum;
    fc[kept] = fc_sum;
    kept++;
  }
  if (nc == 0) {
    iou = sheaf_affine(g, p->W_iou, x, p->b_iou);
  } else {
    sheaf_param wi[2] = {p->W_iou, p->U_iou};
    sheaf_expr xi[2] = {x, kept == 1 ? hs[0] : sheaf_sum_n(g, kept, hs)};
    iou = sheaf_affine_n(g, 2, wi, xi, p->b_iou);
  }
  sheaf_expr io = sheaf_sigmoid(g, sheaf_slice(g, iou, 0, 2 * H));
  sheaf_expr u = sheaf_tanh(g, sheaf_slice(g, iou, 2 * H, 3 * H));
  fc[kept] = sheaf_mul(g, sheaf_slice(g, io, 0, H), u);
  state s;
  s.c = kept == 0 ? fc[0] : sheaf_sum_n(g, kept + 1, fc);
  s.h = sheaf_mul(g, sheaf_slice(g, io, H, 2 * H), sheaf_tanh(g, s.c));
  return s;
}

sheaf_expr sh_childsum_lstm_build(sheaf_graph *g, const sh_childsum_lstm *p, const sh_treebank *tb,
                                  int32_t t) {
  int32_t first = tb->tree_first[t];
  state *st = sh_tree_scratch(g, tb, t, sizeof *st); /* by node - first */
  if (!st) return (sheaf_expr){0};
  for (int32_t n = first; n < first + tb->tree_size[t]; n++) /* post-order: children first */
    st[n - first] = node(g, p, tb, n, st, first);
  sheaf_expr h = st[tb->tree_root[t] - first].h;
  free(st);
  return h;
}
