/*
 * test_tree_lstm_cell.c — the fused tree-LSTM cell (sheaf_tree_lstm_cell,
 * leaf and binary forms) against the same cell written with primitive ops
 * (affine, slices, sigmoid, tanh, mul, sum_n): forward values within 1e-5
 * under every policy; gradients of a batch of 48 random binary trees equal
 * to the primitive composition's and to the per-instance ones within 1e-5
 * (of the gradient's scale); Adam training on 2 threads bit-identical
 * across runs (hidden 64: the gates' gradient runs on the pool) and close
 * to 1 thread; argument errors. Its finite-difference check is in
 * test_autodiff.c's table (case tree_lstm_cell).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "sheaf_train.h"

enum { CV = 50, CE = 16, CH = 64, CC = 5, CN = 48, CMAXL = 12 };

typedef struct ct_model {
  sheaf_model *m;
  sheaf_param p[7]; /* emb, W_leaf, b_leaf, W_node, b_node, W_out, b_out */
} ct_model;

/* A binary tree in post-order: node k's children l[k], r[k] (-1: a leaf
 * with word w[k]); the root is the last node. */
typedef struct ct_tree {
  int n, label;
  int l[2 * CMAXL], r[2 * CMAXL], w[2 * CMAXL];
} ct_tree;

static uint64_t ct_rng;
static int ct_irand(int n) { return (int)((th_frand(&ct_rng) + 1.0f) * 0.5f * (float)n) % n; }

/* A random bracketing of `leaves` words, appended in post-order. */
static int ct_grow(ct_tree *t, int leaves) {
  if (leaves == 1) {
    t->l[t->n] = t->r[t->n] = -1;
    t->w[t->n] = ct_irand(CV);
    return t->n++;
  }
  int left = 1 + ct_irand(leaves - 1);
  int a = ct_grow(t, left), b = ct_grow(t, leaves - left);
  t->l[t->n] = a, t->r[t->n] = b, t->w[t->n] = -1;
  return t->n++;
}

static void ct_data(ct_tree *trees) {
  ct_rng = 0x243f6a8885a308d3ull;
  for (int i = 0; i < CN; i++) {
    trees[i].n = 0;
    ct_grow(&trees[i], 1 + ct_irand(CMAXL));
    trees[i].label = ct_irand(CC);
  }
}

static bool ct_create(sheaf_ctx *ctx, ct_model *md) {
  memset(md, 0, sizeof *md);
  if (!CHECK_OK(ctx, sheaf_model_create(ctx, &md->m))) return false;
  md->p[0] = th_param(ctx, md->m, "emb", 2, CV, CE);
  md->p[1] = th_param(ctx, md->m, "W_leaf", 2, CE, 3 * CH);
  md->p[2] = th_param(ctx, md->m, "b_leaf", 1, 3 * CH, 0);
  md->p[3] = th_param(ctx, md->m, "W_node", 2, 2 * CH, 5 * CH);
  md->p[4] = th_param(ctx, md->m, "b_node", 1, 5 * CH, 0);
  md->p[5] = th_param(ctx, md->m, "W_out", 2, CH, CC);
  md->p[6] = th_param(ctx, md->m, "b_out", 1, CC, 0);
  if (!CHECK_OK(ctx, sheaf_model_seed(md->m, 7))) return false;
  /* non-zero biases: every gate's bias term is exercised */
  for (int q = 2; q <= 4; q += 2) {
    int rank;
    const int64_t *shape;
    float *b = sheaf_model_param_data(md->m, md->p[q], &rank, &shape);
    for (int64_t j = 0; j < shape[0]; j++) b[j] = 0.3f * sinf((float)j);
    sheaf_model_param_update(md->m, md->p[q]);
  }
  return true;
}

typedef struct ct_state {
  sheaf_expr h, c;
} ct_state;

/* The cell from primitive ops (the TreeLSTM's former formulation). */
static ct_state ct_leaf_prim(sheaf_graph *g, const ct_model *md, sheaf_expr x) {
  sheaf_expr z = sheaf_affine(g, md->p[1], x, md->p[2]);
  sheaf_expr io = sheaf_sigmoid(g, sheaf_slice(g, z, 0, 2 * CH));
  sheaf_expr u = sheaf_tanh(g, sheaf_slice(g, z, 2 * CH, 3 * CH));
  ct_state s;
  s.c = sheaf_mul(g, sheaf_slice(g, io, 0, CH), u);
  s.h = sheaf_mul(g, sheaf_slice(g, io, CH, 2 * CH), sheaf_tanh(g, s.c));
  return s;
}

static ct_state ct_node_prim(sheaf_graph *g, const ct_model *md, ct_state l, ct_state r) {
  sheaf_expr hh[2] = {l.h, r.h};
  sheaf_expr z = sheaf_affine(g, md->p[3], sheaf_concat(g, 2, hh), md->p[4]);
  sheaf_expr gates = sheaf_sigmoid(g, sheaf_slice(g, z, 0, 4 * CH));
  sheaf_expr u = sheaf_tanh(g, sheaf_slice(g, z, 4 * CH, 5 * CH));
  sheaf_expr terms[3] = {sheaf_mul(g, sheaf_slice(g, gates, 0, CH), u),
                         sheaf_mul(g, sheaf_slice(g, gates, CH, 2 * CH), l.c),
                         sheaf_mul(g, sheaf_slice(g, gates, 2 * CH, 3 * CH), r.c)};
  ct_state s;
  s.c = sheaf_sum_n(g, 3, terms);
  s.h = sheaf_mul(g, sheaf_slice(g, gates, 3 * CH, 4 * CH), sheaf_tanh(g, s.c));
  return s;
}

/* Tree t's root state (fused cells or primitive ones) and its loss. */
static sheaf_expr ct_build(sheaf_graph *g, const ct_model *md, const ct_tree *t, bool fused,
                           ct_state *root) {
  ct_state st[2 * CMAXL];
  const sheaf_expr none = {0, 0, 0};
  for (int k = 0; k < t->n; k++) {
    if (t->l[k] < 0) {
      sheaf_expr x = sheaf_lookup(g, md->p[0], t->w[k]);
      if (fused) sheaf_tree_lstm_cell(g, md->p[1], md->p[2], x, none, none, &st[k].h, &st[k].c);
      else st[k] = ct_leaf_prim(g, md, x);
    } else if (fused) {
      sheaf_expr hh[2] = {st[t->l[k]].h, st[t->r[k]].h};
      sheaf_tree_lstm_cell(g, md->p[3], md->p[4], sheaf_concat(g, 2, hh), st[t->l[k]].c, st[t->r[k]].c,
                           &st[k].h, &st[k].c);
    } else {
      st[k] = ct_node_prim(g, md, st[t->l[k]], st[t->r[k]]);
    }
  }
  if (root) *root = st[t->n - 1];
  /* h and c both reach the loss (the root's c through a product) */
  sheaf_expr hc = sheaf_add(g, st[t->n - 1].h, sheaf_mul(g, st[t->n - 1].c, st[t->n - 1].h));
  return sheaf_nll(g, sheaf_affine(g, md->p[5], hc, md->p[6]), t->label);
}

static size_t ct_numel(sheaf_model *m, sheaf_param p) {
  int rank;
  const int64_t *shape;
  sheaf_model_param_data(m, p, &rank, &shape);
  return (size_t)(rank == 2 ? shape[0] * shape[1] : shape[0]);
}

/* Every parameter's values (grads false) or gradients, in order. */
static float *ct_collect(const ct_model *md, bool grads, size_t *n) {
  size_t total = 0;
  for (int q = 0; q < 7; q++) total += ct_numel(md->m, md->p[q]);
  float *w = calloc(total, sizeof *w), *o = w;
  for (int q = 0; q < 7 && w; q++) {
    size_t c = ct_numel(md->m, md->p[q]);
    const float *src = grads ? sheaf_param_grad(md->m, md->p[q]) : sheaf_model_param_data(md->m, md->p[q], NULL, NULL);
    if (src) memcpy(o, src, c * sizeof(float));
    o += c;
  }
  *n = total;
  return w;
}

/* max |a - b| / max(1, max |a|) */
static double ct_err(const float *a, const float *b, size_t n) {
  /* (comparisons, not fmax: an fmax reduction here crashed the AArch64
   * gcc 12 vectorizer, an internal compiler error in vect_transform_reduction) */
  double worst = 0, scale = 1;
  for (size_t i = 0; i < n; i++) {
    double m = fabs((double)a[i]), d = fabs((double)a[i] - b[i]);
    if (m > scale) scale = m;
    if (d > worst) worst = d;
  }
  return worst / scale;
}

TEST(tree_lstm_cell_forward_equals_primitive_ops) {
  sheaf_ctx *ctx = th_ctx();
  ct_model md;
  if (!ct_create(ctx, &md)) return;
  static ct_tree trees[CN];
  ct_data(trees);
  static const sheaf_policy pols[] = {SHEAF_POLICY_SHEAF, SHEAF_POLICY_NONE, SHEAF_POLICY_DEPTH,
                                      SHEAF_POLICY_AGENDA};
  float *ref = malloc((size_t)CN * 2 * CH * sizeof(float)), *got = malloc((size_t)CN * 2 * CH * sizeof(float));
  for (size_t pi = 0; pi < sizeof pols / sizeof *pols; pi++) {
    for (int fused = 0; fused < 2; fused++) {
      sheaf_graph_opts go = {pols[pi], 0, NULL};
      sheaf_graph *g = NULL;
      if (!CHECK_OK(ctx, sheaf_graph_create(md.m, &go, &g))) break;
      ct_state root[CN];
      for (int i = 0; i < CN; i++) ct_build(g, &md, &trees[i], fused, &root[i]);
      float *dst = fused ? got : ref;
      for (int i = 0; i < CN; i++) {
        sheaf_value_view vh, vc;
        if (!CHECK_OK(ctx, sheaf_value(g, root[i].h, &vh)) || !CHECK_OK(ctx, sheaf_value(g, root[i].c, &vc)))
          break;
        memcpy(dst + (size_t)i * 2 * CH, vh.data, CH * sizeof(float));
        memcpy(dst + (size_t)i * 2 * CH + CH, vc.data, CH * sizeof(float));
      }
      sheaf_graph_free(g);
    }
    double e = ct_err(ref, got, (size_t)CN * 2 * CH);
    if (!CHECK(e <= 1e-5)) th_fail(__FILE__, __LINE__, "policy %s: fused h, c off by %g", sheaf_policy_name(pols[pi]), e);
  }
  free(ref);
  free(got);
  sheaf_model_free(md.m);
}

/* The gradients of one backward over every tree (batched: one graph;
 * else one graph per tree, accumulated). */
static float *ct_grads(sheaf_ctx *ctx, ct_model *md, const ct_tree *trees, bool fused, bool batched,
                       size_t *n) {
  sheaf_graph *g = NULL;
  float *w = NULL;
  if (!CHECK_OK(ctx, sheaf_graph_create(md->m, NULL, &g))) return NULL;
  sheaf_model_zero_grad(md->m);
  sheaf_expr loss[CN];
  if (batched) {
    for (int i = 0; i < CN; i++) loss[i] = ct_build(g, md, &trees[i], fused, NULL);
    if (!CHECK_OK(ctx, sheaf_backward(g, CN, loss, NULL))) goto done;
  } else {
    for (int i = 0; i < CN; i++) {
      if (!CHECK_OK(ctx, sheaf_graph_reset(g))) goto done;
      loss[0] = ct_build(g, md, &trees[i], fused, NULL);
      if (!CHECK_OK(ctx, sheaf_backward(g, 1, loss, NULL))) goto done;
    }
  }
  w = ct_collect(md, true, n);
done:
  sheaf_graph_free(g);
  return w;
}

TEST(tree_lstm_cell_gradients_equal_primitive_ops_and_per_instance) {
  sheaf_ctx *ctx = th_ctx();
  ct_model md;
  if (!ct_create(ctx, &md)) return;
  static ct_tree trees[CN];
  ct_data(trees);
  size_t n0 = 0, n1 = 0, n2 = 0;
  float *prim = ct_grads(ctx, &md, trees, false, true, &n0);
  float *bat = ct_grads(ctx, &md, trees, true, true, &n1);
  float *per = ct_grads(ctx, &md, trees, true, false, &n2);
  if (CHECK(prim && bat && per && n0 == n1 && n1 == n2)) {
    /* per parameter, against its own scale */
    size_t off = 0;
    for (int q = 0; q < 7; q++) {
      size_t c = ct_numel(md.m, md.p[q]);
      double e1 = ct_err(prim + off, bat + off, c), e2 = ct_err(per + off, bat + off, c);
      if (!CHECK(e1 <= 1e-5 && e2 <= 1e-5))
        th_fail(__FILE__, __LINE__, "%s: fused batched vs primitive %g, vs per instance %g",
                sheaf_model_param_name(md.m, md.p[q]), e1, e2);
      int nz = 0;
      for (size_t i = 0; i < c; i++) nz += bat[off + i] != 0.0f;
      CHECK(nz > 0);
      off += c;
    }
  }
  free(prim);
  free(bat);
  free(per);
  sheaf_model_free(md.m);
}

/* Three Adam updates over the trees on a context of `threads`. */
static float *ct_train(int threads, size_t *n) {
  *n = 0;
  sheaf_ctx_options co = {0};
  co.threads = threads;
  sheaf_ctx *ctx = NULL;
  if (!CHECK(sheaf_ctx_create(&co, &ctx, NULL, 0) == SHEAF_OK)) return NULL;
  ct_model md;
  sheaf_graph *g = NULL;
  sheaf_optimizer *opt = NULL;
  float *w = NULL;
  static ct_tree trees[CN];
  ct_data(trees);
  sheaf_optimizer_opts oo = {SHEAF_OPTIM_ADAM, 1e-2f, 0, 0, 0, 0, 1e-4f, 5.0f};
  if (!ct_create(ctx, &md) || !CHECK_OK(ctx, sheaf_graph_create(md.m, NULL, &g)) ||
      !CHECK_OK(ctx, sheaf_optimizer_create(md.m, &oo, &opt)))
    goto done;
  for (int step = 0; step < 3; step++) {
    sheaf_expr loss[CN];
    if (!CHECK_OK(ctx, sheaf_graph_reset(g))) goto done;
    for (int i = 0; i < CN; i++) loss[i] = ct_build(g, &md, &trees[i], true, NULL);
    sheaf_backward_opts bo = {1.0f / CN, 0, NULL, NULL};
    if (!CHECK_OK(ctx, sheaf_model_zero_grad(md.m)) || !CHECK_OK(ctx, sheaf_backward(g, CN, loss, &bo)) ||
        !CHECK_OK(ctx, sheaf_optimizer_step(opt, NULL)))
      goto done;
  }
  w = ct_collect(&md, false, n);
done:
  sheaf_optimizer_free(opt);
  sheaf_graph_free(g);
  sheaf_model_free(md.m);
  sheaf_ctx_free(ctx);
  return w;
}

TEST(tree_lstm_cell_training_is_bit_identical_across_runs) {
  size_t n1, n2, n3;
  float *a = ct_train(2, &n1), *b = ct_train(2, &n2), *one = ct_train(1, &n3);
  if (CHECK(a && b && one && n1 == n2 && n1 == n3)) {
    CHECK(memcmp(a, b, n1 * sizeof(float)) == 0);
    double worst = 0; /* one thread and two: the same training up to summation order */
    for (size_t i = 0; i < n1; i++) worst = fmax(worst, fabs((double)a[i] - one[i]));
    CHECK(worst < 1e-3);
  }
  free(a);
  free(b);
  free(one);
}

TEST(tree_lstm_cell_errors) {
  sheaf_ctx *ctx = th_ctx();
  ct_model md;
  if (!ct_create(ctx, &md)) return;
  sheaf_graph *g = NULL;
  REQUIRE_OK(ctx, sheaf_graph_create(md.m, NULL, &g));
  const sheaf_expr none = {0, 0, 0};
  sheaf_expr x = sheaf_lookup(g, md.p[0], 1), h, c;
  /* one child's c without the other's */
  CHECK_STATUS(ctx, sheaf_tree_lstm_cell(g, md.p[1], md.p[2], x, x, none, &h, &c), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_tree_lstm_cell");
  CHECK(sheaf_expr_is_null(h) && sheaf_expr_is_null(c));
  REQUIRE_OK(ctx, sheaf_graph_reset(g));
  /* a leaf's W needs 3·hidden columns: W_node has 320 */
  x = sheaf_lookup(g, md.p[0], 1);
  CHECK_STATUS(ctx, sheaf_tree_lstm_cell(g, md.p[3], md.p[4], x, none, none, &h, &c), SHEAF_ERR_SHAPE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "W_node");
  REQUIRE_OK(ctx, sheaf_graph_reset(g));
  /* c of the wrong width */
  x = sheaf_lookup(g, md.p[0], 1);
  sheaf_expr l, lc;
  REQUIRE_OK(ctx, sheaf_tree_lstm_cell(g, md.p[1], md.p[2], x, none, none, &l, &lc));
  sheaf_expr hh[2] = {l, l};
  CHECK_STATUS(ctx, sheaf_tree_lstm_cell(g, md.p[3], md.p[4], sheaf_concat(g, 2, hh), lc, x, &h, &c),
               SHEAF_ERR_SHAPE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "c_r");
  REQUIRE_OK(ctx, sheaf_graph_reset(g));
  CHECK_STATUS(ctx, sheaf_tree_lstm_cell(g, md.p[1], md.p[2], x, none, none, NULL, &c), SHEAF_ERR_INVALID_ARG);
  sheaf_graph_free(g);
  sheaf_model_free(md.m);
}
