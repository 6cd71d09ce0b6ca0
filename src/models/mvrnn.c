/*
 * mvrnn.c — the MV-RNN (see mvrnn.h): parameters, the identity
 * initialization of the word matrices, and the per-tree builder (one pass
 * over the nodes in post-order, no recursion).
 */
#include "models/mvrnn.h"
#include "models/params.h"

#include "models/tree_walk.h"

sheaf_status sh_mvrnn_declare(sheaf_model *m, int64_t H, int64_t V, int64_t Vm, sh_mvrnn *p) {
  p->hidden = H;
  p->vocab = V;
  p->words = sh_word_ids_of_rows(V);
  p->mat_vocab = Vm;
  const sh_model_param_decl decl[] = {
      {"emb", 2, V, H, SHEAF_INIT_NORMAL, &p->emb},
      {"emb_mat", 2, Vm, H * H, SHEAF_INIT_NORMAL, &p->emb_mat},
      {"W", 2, 2 * H, H, SHEAF_INIT_GLOROT, &p->W},
      {"bias", 1, H, 0, SHEAF_INIT_ZERO, &p->bias},
      {"W_1", 2, H, H, SHEAF_INIT_GLOROT, &p->W_1},
      {"W_2", 2, H, H, SHEAF_INIT_GLOROT, &p->W_2},
  };
  return sh_params_declare(m, decl, sizeof decl / sizeof decl[0]);
}

void sh_mvrnn_init_identity(sheaf_model *m, const sh_mvrnn *p) {
  int rank;
  const int64_t *shape;
  float *d = sheaf_model_param_data(m, p->emb_mat, &rank, &shape);
  if (!d) return;
  int64_t H = p->hidden;
  for (int64_t r = 0; r < shape[0]; r++)
    for (int64_t i = 0; i < H; i++) d[r * H * H + i * H + i] += 1.0f;
}

typedef struct state {
  sheaf_expr a, A;
} state;

/* The state of node n (its children's states in st, by node - first); the
 * matrix only when a parent needs it. */
static state node(sheaf_graph *g, const sh_mvrnn *p, const sh_treebank *tb, int32_t n,
                  const int32_t *mat_row, bool need_matrix, const state *st, int32_t first) {
  int64_t H = p->hidden;
  int32_t nc = tb->n_children[n];
  state s = {{0}, {0}};
  if (nc == 0) {
    int32_t w = sh_word_id(p->words, tb->word[n]);
    bool known = w < p->words.n_ids;
    s.a = sheaf_lookup(g, p->emb, w);
    if (need_matrix) {
      int64_t shape[2] = {H, H};
      s.A = sheaf_reshape(g, sheaf_lookup(g, p->emb_mat, known ? mat_row[w] : p->mat_vocab - 1),
                          2, shape);
    }
    return s;
  }
  if (nc == 1) return st[sh_tb_child(tb, n, 0) - first];
  state l = st[sh_tb_child(tb, n, 0) - first], r = st[sh_tb_child(tb, n, 1) - first];
  sheaf_expr ba_ab[2] = {sheaf_matmul(g, r.A, l.a), sheaf_matmul(g, l.A, r.a)};
  s.a = sheaf_tanh(g, sheaf_affine(g, p->W, sheaf_concat(g, 2, ba_ab), p->bias));
  if (need_matrix) {
    sheaf_param w12[2] = {p->W_1, p->W_2};
    sheaf_expr AB[2] = {l.A, r.A};
    s.A = sheaf_affine_n(g, 2, w12, AB, SHEAF_NO_PARAM);
  }
  return s;
}

sheaf_expr sh_mvrnn_build(sheaf_graph *g, const sh_mvrnn *p, const sh_treebank *tb, int32_t t,
                          const int32_t *mat_row) {
  int32_t first = tb->tree_first[t], root = tb->tree_root[t];
  state *st = sh_tree_scratch(g, tb, t, sizeof *st); /* by node - first */
  if (!st) return (sheaf_expr){0};
  /* Every node's matrix feeds its parent, except on the root's chain of
   * unary nodes (their state is the root's). */
  int32_t top = root; /* the deepest node of that chain */
  while (tb->n_children[top] == 1) top = sh_tb_child(tb, top, 0);
  for (int32_t n = first; n < first + tb->tree_size[t]; n++) /* post-order: children first */
    st[n - first] = node(g, p, tb, n, mat_row, n != top, st, first);
  sheaf_expr a = st[root - first].a;
  free(st);
  return a;
}
