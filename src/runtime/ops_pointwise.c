/*
 * ops_pointwise.c — the elementwise builders (generated from ops.def:
 * binary ops with scalar broadcast, activations and the other unary math;
 * by hand: sum_n, scale), reductions, softmax and pick, the shape views (concat, slice, reshape), and the build-time fusion
 * of an activation into the affine (or the column slice of one) it reads.
 */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "runtime/runtime.h"
#include "tensor/tensor.h"

/* ------------------------------------------------------------ elementwise */

/* The shape two elementwise operands make: equal shapes, a one-element
 * side (a scalar broadcast), or one row ([c] or [1, c]) against a matrix
 * of as many columns (the row repeats); the larger operand, or NULL. */
static const sh_node *ew_shape(const sh_node *an, const sh_node *bn) {
  bool as = an->rows == 1 && an->cols == 1, bs = bn->rows == 1 && bn->cols == 1;
  bool same = an->rows == bn->rows && an->cols == bn->cols && an->rank == bn->rank;
  bool rows_bc = !as && !bs && an->cols == bn->cols && (an->rows == 1 || bn->rows == 1);
  if (!same && !as && !bs && !rows_bc) return NULL;
  return (as && !bs) || (rows_bc && !same && an->rows == 1 && (bn->rows > 1 || bn->rank == 2)) ? bn : an;
}

/* The count and array of an n-ary builder: n >= 1, xs not NULL, n <= max
 * (a node's input count is 16 bits: SH_MAX_NODE_INS). */
static bool n_inputs_ok(sheaf_graph *g, const char *op, int nx, const sheaf_expr *xs, int max) {
  if (nx < 1)
    sh_graph_fail(g, SHEAF_ERR_INVALID_ARG, "%s: %d inputs (at least 1)", op, nx);
  else if (!xs)
    sh_graph_fail(g, SHEAF_ERR_INVALID_ARG, "%s: xs is NULL (%d inputs)", op, nx);
  else if (nx > max)
    sh_graph_fail(g, SHEAF_ERR_INVALID_ARG,
                  "%s: %d inputs; at most %d (a node's input count is 16 bits)", op, nx, max);
  else
    return true;
  return false;
}

static sheaf_expr binary(sheaf_graph *g, int opc, const char *op, sheaf_expr a, sheaf_expr b) {
  if (!sh_build_enter(g) || sh_build_check(g, a, op, 1) || sh_build_check(g, b, op, 2)) return SH_NULL_EXPR;
  const sh_node *an = &g->store.nodes[a.node], *bn = &g->store.nodes[b.node], *big = ew_shape(an, bn);
  if (!big) {
    char s1[64], s2[64];
    sh_graph_fail(g, SHEAF_ERR_SHAPE, "%s: shapes %s and %s differ", op, sh_node_shape_str(an, s1, sizeof s1),
                  sh_node_shape_str(bn, s2, sizeof s2));
    return SH_NULL_EXPR;
  }
  uint32_t ids[2] = {a.node, b.node};
  return sh_pw_build(g, opc, ids, 2, big->rank, big->rows, big->cols, 0.0f);
}

sheaf_expr sheaf_where(sheaf_graph *g, sheaf_expr c, sheaf_expr a, sheaf_expr b) {
  static const char op[] = "sheaf_where";
  if (!sh_build_enter(g) || sh_build_check(g, c, op, 1) || sh_build_check(g, a, op, 2) ||
      sh_build_check(g, b, op, 3))
    return SH_NULL_EXPR;
  const sh_node *cn = &g->store.nodes[c.node], *an = &g->store.nodes[a.node], *bn = &g->store.nodes[b.node];
  const sh_node *ab = ew_shape(an, bn), *big = ab ? ew_shape(ab, cn) : NULL;
  if (!big) {
    char s1[64], s2[64], s3[64];
    sh_graph_fail(g, SHEAF_ERR_SHAPE, "%s: shapes %s (c), %s (a) and %s (b) do not broadcast", op,
                  sh_node_shape_str(cn, s1, sizeof s1), sh_node_shape_str(an, s2, sizeof s2),
                  sh_node_shape_str(bn, s3, sizeof s3));
    return SH_NULL_EXPR;
  }
  uint32_t ids[3] = {c.node, a.node, b.node};
  return sh_pw_build(g, SH_OP_WHERE, ids, 3, big->rank, big->rows, big->cols, 0.0f);
}

sheaf_expr sheaf_sum_n(sheaf_graph *g, int nx, const sheaf_expr *xs) {
  static const char op[] = "sheaf_sum_n";
  if (!sh_build_enter(g)) return SH_NULL_EXPR;
  if (!n_inputs_ok(g, op, nx, xs, INT_MAX)) return SH_NULL_EXPR; /* any n: summed in groups */
  for (int i = 0; i < nx; i++) {
    if (sh_build_check(g, xs[i], op, i + 1)) return SH_NULL_EXPR;
    const sh_node *a = &g->store.nodes[xs[0].node], *b = &g->store.nodes[xs[i].node];
    if (a->rows != b->rows || a->cols != b->cols || a->rank != b->rank) {
      char s1[64], s2[64];
      sh_graph_fail(g, SHEAF_ERR_SHAPE, "%s: argument %d has shape %s but argument 1 has %s", op,
                    i + 1, sh_node_shape_str(b, s2, sizeof s2), sh_node_shape_str(a, s1, sizeof s1));
      return SH_NULL_EXPR;
    }
  }
  if (nx == 1) return xs[0];
  const sh_node *a = &g->store.nodes[xs[0].node];
  int rank = a->rank;
  int32_t rows = a->rows, cols = a->cols;
  /* a program reads at most SH_PW_MAX_LEAVES values: sum groups of them first */
  sheaf_expr part[SH_PW_MAX_LEAVES];
  int np = 0;
  for (int i = 0; i < nx; i += SH_PW_MAX_LEAVES) {
    uint32_t ids[SH_PW_MAX_LEAVES];
    int k = 0;
    for (; k < SH_PW_MAX_LEAVES && i + k < nx; k++) ids[k] = xs[i + k].node;
    if (nx <= SH_PW_MAX_LEAVES) return sh_pw_build(g, SH_OP_SUM_N, ids, k, rank, rows, cols, 0.0f);
    part[np] = k == 1 ? xs[i] : sh_pw_build(g, SH_OP_SUM_N, ids, k, rank, rows, cols, 0.0f);
    if (sheaf_expr_is_null(part[np])) return SH_NULL_EXPR;
    if (++np == SH_PW_MAX_LEAVES) { /* fold the partial sums so far into one */
      part[0] = sheaf_sum_n(g, np, part);
      if (sheaf_expr_is_null(part[0])) return SH_NULL_EXPR;
      np = 1;
    }
  }
  return sheaf_sum_n(g, np, part);
}

static sheaf_expr unary(sheaf_graph *g, int opc, const char *op, sheaf_expr x, float f,
                        uint32_t index) {
  if (!sh_build_enter(g) || sh_build_check(g, x, op, 1)) return SH_NULL_EXPR;
  int act = sh_op_act(opc);
  /* act(affine) or act(slice of an affine), nothing else reading that value
   * yet: run the activation in the GEMM's store, on those columns */
  uint32_t src = x.node;
  int32_t c0 = 0, c1 = g->store.nodes[x.node].cols;
  const sh_node *xn = &g->store.nodes[x.node];
  if (act >= 0 && xn->op == SH_OP_SLICE && g->store.nodes[g->store.ins[xn->in]].op == SH_OP_AFFINE) {
    src = g->store.ins[xn->in];
    c0 = (int32_t)xn->offset;
    c1 = c0 + xn->cols;
  }
  const sh_node *an = &g->store.nodes[src];
  const sh_affine_node *aa = an->op == SH_OP_AFFINE ? sh_affine_of(g, src) : NULL;
  bool fuse = act >= 0 && aa && !xn->uses && !an->done && aa->n_act < SH_MAX_FUSE &&
              g->policy != SHEAF_POLICY_NONE && !(aa->raw_used && src == x.node);
  for (uint32_t k = fuse ? aa->act : SH_NONE; k != SH_NONE && fuse; k = g->affine.range[k].next)
    if (c0 < g->affine.range[k].c1 && g->affine.range[k].c0 < c1) fuse = false; /* overlaps a fused range */
  if (fuse && sh_grow(g->ctx, (void **)&g->affine.range, &g->affine.cap_range,
                      g->affine.n_range + 1, sizeof *g->affine.range)) {
    sh_graph_fail(g, SHEAF_ERR_NOMEM, "%s: out of memory", op);
    return SH_NULL_EXPR;
  }
  if (!fuse && sh_op_is_pw(opc)) {
    xn = &g->store.nodes[x.node];
    return sh_pw_build(g, opc, &x.node, 1, xn->rank, xn->rows, xn->cols, f);
  }
  uint32_t id = sh_node_new(g, fuse ? SH_OP_ALIAS : opc, fuse ? &src : &x.node, 1);
  if (id == SH_NONE) return SH_NULL_EXPR;
  sh_node *n = &g->store.nodes[id];
  xn = &g->store.nodes[x.node];
  n->rank = xn->rank;
  n->rows = xn->rows;
  n->cols = xn->cols;
  if (fuse) {
    sh_affine_node *a = sh_affine_of(g, src);
    uint32_t k = g->affine.n_range++;
    g->affine.range[k] = (sh_fuse){id, SH_NONE, c0, c1, act};
    if (a->act != SH_NONE) { /* append: ranges keep their creation order */
      uint32_t t = a->act;
      while (g->affine.range[t].next != SH_NONE) t = g->affine.range[t].next;
      g->affine.range[t].next = k;
    } else {
      a->act = k;
    }
    a->n_act++;
    return sh_expr_of(g, id);
  }
  if (opc == SH_OP_PICK) n->index = index;
  if (opc == SH_OP_SUM || opc == SH_OP_MEAN || opc == SH_OP_MAX || opc == SH_OP_PICK) {
    n->rank = 1;
    n->cols = xn->rank == 2 ? xn->rows : 1;
    n->rows = 1;
  }
  return sh_build_finish(g, id);
}

/* The builders of the ops of form x (unary) and ab (binary) in ops.def. */
#define SH_BUILD_x(ID, name)                                  \
  sheaf_expr sheaf_##name(sheaf_graph *g, sheaf_expr x) {     \
    return unary(g, SH_OP_##ID, "sheaf_" #name, x, 0.0f, 0); \
  }
#define SH_BUILD_ab(ID, name)                                           \
  sheaf_expr sheaf_##name(sheaf_graph *g, sheaf_expr a, sheaf_expr b) { \
    return binary(g, SH_OP_##ID, "sheaf_" #name, a, b);                 \
  }
#define SH_BUILD_own(ID, name)
#define SH_OP(ID, name, cls, arity, form, act) SH_BUILD_##form(ID, name)
#include "kernels/ops.def"
#undef SH_BUILD_x
#undef SH_BUILD_ab
#undef SH_BUILD_own

sheaf_expr sheaf_scale(sheaf_graph *g, sheaf_expr x, float s) {
  return unary(g, SH_OP_SCALE, "sheaf_scale", x, s, 0);
}

sheaf_expr sheaf_pick(sheaf_graph *g, sheaf_expr x, int64_t index) {
  if (!sh_build_enter(g) || sh_build_check(g, x, "sheaf_pick", 1)) return SH_NULL_EXPR;
  const sh_node *xn = &g->store.nodes[x.node];
  if (index < 0 || index >= xn->cols) {
    char s[64];
    sh_graph_fail(g, SHEAF_ERR_INVALID_ARG, "sheaf_pick: index %lld is outside [0, %d) of shape %s",
                  (long long)index, xn->cols, sh_node_shape_str(xn, s, sizeof s));
    return SH_NULL_EXPR;
  }
  return unary(g, SH_OP_PICK, "sheaf_pick", x, 0.0f, (uint32_t)index);
}

sheaf_expr sheaf_layer_norm(sheaf_graph *g, sheaf_expr x, sheaf_expr gamma, sheaf_expr beta,
                            float eps) {
  static const char op[] = "sheaf_layer_norm";
  if (!sh_build_enter(g) || sh_build_check(g, x, op, 1) || sh_build_check(g, gamma, op, 2) ||
      sh_build_check(g, beta, op, 3))
    return SH_NULL_EXPR;
  const sh_node *xn = &g->store.nodes[x.node];
  for (int i = 0; i < 2; i++) {
    const sh_node *v = &g->store.nodes[(i ? beta : gamma).node];
    if (v->rows != 1 || v->cols != xn->cols) {
      char s1[64], s2[64];
      sh_graph_fail(g, SHEAF_ERR_SHAPE, "%s: %s has shape %s but x has %s (one row of %d expected)", op,
                    i ? "beta" : "gamma", sh_node_shape_str(v, s1, sizeof s1),
                    sh_node_shape_str(xn, s2, sizeof s2), xn->cols);
      return SH_NULL_EXPR;
    }
  }
  if (!(eps > 0.0f) || !(eps < INFINITY)) {
    sh_graph_fail(g, SHEAF_ERR_INVALID_ARG, "%s: eps %g must be positive and finite", op, (double)eps);
    return SH_NULL_EXPR;
  }
  uint32_t ids[3] = {x.node, gamma.node, beta.node};
  uint32_t id = sh_node_new(g, SH_OP_LAYER_NORM, ids, 3);
  if (id == SH_NONE) return SH_NULL_EXPR;
  sh_node *n = &g->store.nodes[id];
  xn = &g->store.nodes[x.node];
  n->rank = xn->rank;
  n->rows = xn->rows;
  n->cols = xn->cols;
  n->eps = eps;
  return sh_build_finish(g, id);
}

/* ----------------------------------------------------------------- shape */

/* The node ids of xs (checked handles): buf when they fit, else scratch. */
static uint32_t *node_ids(sheaf_graph *g, const char *op, int nx, const sheaf_expr *xs, uint32_t buf[16]) {
  uint32_t *ids = nx > 16 ? sh_arena_alloc(&g->work.scratch, (size_t)nx * sizeof *ids) : buf;
  if (!ids) {
    sh_graph_fail(g, SHEAF_ERR_NOMEM, "%s: out of memory", op);
    return NULL;
  }
  for (int i = 0; i < nx; i++) ids[i] = xs[i].node;
  return ids;
}

sheaf_expr sheaf_stack(sheaf_graph *g, int nx, const sheaf_expr *xs) {
  static const char op[] = "sheaf_stack";
  if (!sh_build_enter(g)) return SH_NULL_EXPR;
  if (!n_inputs_ok(g, op, nx, xs, SH_MAX_NODE_INS)) return SH_NULL_EXPR;
  for (int i = 0; i < nx; i++) {
    if (sh_build_check(g, xs[i], op, i + 1)) return SH_NULL_EXPR;
    const sh_node *a = &g->store.nodes[xs[0].node], *b = &g->store.nodes[xs[i].node];
    if (b->rows != 1 || b->cols != a->cols) {
      char s1[64], s2[64];
      sh_graph_fail(g, SHEAF_ERR_SHAPE, "%s: argument %d has shape %s but argument 1 has %s (one row each)",
                    op, i + 1, sh_node_shape_str(b, s2, sizeof s2), sh_node_shape_str(a, s1, sizeof s1));
      return SH_NULL_EXPR;
    }
  }
  uint32_t buf[16], *ids = node_ids(g, op, nx, xs, buf);
  if (!ids) return SH_NULL_EXPR;
  uint32_t id = sh_node_new(g, SH_OP_STACK, ids, nx);
  if (id == SH_NONE) return SH_NULL_EXPR;
  sh_node *n = &g->store.nodes[id];
  n->rank = 2;
  n->rows = nx;
  n->cols = g->store.nodes[ids[0]].cols;
  return sh_build_finish(g, id);
}

sheaf_expr sheaf_row(sheaf_graph *g, sheaf_expr x, int64_t index) {
  static const char op[] = "sheaf_row";
  if (!sh_build_enter(g) || sh_build_check(g, x, op, 1)) return SH_NULL_EXPR;
  const sh_node *xn = &g->store.nodes[x.node];
  if (xn->rank != 2 || index < 0 || index >= xn->rows) {
    char s[64];
    sh_graph_fail(g, SHEAF_ERR_SHAPE, "%s: row %lld of shape %s%s", op, (long long)index,
                  sh_node_shape_str(xn, s, sizeof s),
                  xn->rank != 2 ? " (a matrix [r, c] is expected)" : " is out of range");
    return SH_NULL_EXPR;
  }
  uint32_t id = sh_node_new(g, SH_OP_ROW, &x.node, 1);
  if (id == SH_NONE) return SH_NULL_EXPR;
  sh_node *n = &g->store.nodes[id];
  n->rank = 1;
  n->rows = 1;
  n->cols = g->store.nodes[x.node].cols;
  n->index = (uint32_t)index;
  return sh_build_finish(g, id);
}

sheaf_expr sheaf_transpose(sheaf_graph *g, sheaf_expr x) {
  static const char op[] = "sheaf_transpose";
  if (!sh_build_enter(g) || sh_build_check(g, x, op, 1)) return SH_NULL_EXPR;
  const sh_node *xn = &g->store.nodes[x.node];
  if (xn->rank != 2) {
    char s[64];
    sh_graph_fail(g, SHEAF_ERR_SHAPE, "%s: x has shape %s (a matrix [r, c] is expected)", op,
                  sh_node_shape_str(xn, s, sizeof s));
    return SH_NULL_EXPR;
  }
  uint32_t id = sh_node_new(g, SH_OP_TRANSPOSE, &x.node, 1);
  if (id == SH_NONE) return SH_NULL_EXPR;
  sh_node *n = &g->store.nodes[id];
  xn = &g->store.nodes[x.node];
  n->rank = 2;
  n->rows = xn->cols;
  n->cols = xn->rows;
  return sh_build_finish(g, id);
}

sheaf_expr sheaf_concat(sheaf_graph *g, int nx, const sheaf_expr *xs) {
  static const char op[] = "sheaf_concat";
  if (!sh_build_enter(g)) return SH_NULL_EXPR;
  if (!n_inputs_ok(g, op, nx, xs, INT_MAX)) return SH_NULL_EXPR;
  int64_t cols = 0;
  for (int i = 0; i < nx; i++) {
    if (sh_build_check(g, xs[i], op, i + 1)) return SH_NULL_EXPR;
    const sh_node *a = &g->store.nodes[xs[0].node], *b = &g->store.nodes[xs[i].node];
    if (a->rank != b->rank || a->rows != b->rows) {
      char s1[64], s2[64];
      sh_graph_fail(g, SHEAF_ERR_SHAPE, "%s: argument %d has shape %s but argument 1 has %s", op,
                    i + 1, sh_node_shape_str(b, s2, sizeof s2), sh_node_shape_str(a, s1, sizeof s1));
      return SH_NULL_EXPR;
    }
    cols += b->cols;
  }
  if (cols > INT32_MAX) {
    sh_graph_fail(g, SHEAF_ERR_SHAPE, "%s: %lld columns", op, (long long)cols);
    return SH_NULL_EXPR;
  }
  if (nx == 1) return xs[0];
  if (nx > SH_MAX_NODE_INS) { /* more than a node holds: a concat of concats (same pieces) */
    int ng = (nx + SH_MAX_NODE_INS - 1) / SH_MAX_NODE_INS; /* <= 32769 */
    sheaf_expr *part = sh_arena_alloc(&g->work.scratch, (size_t)ng * sizeof *part);
    if (!part) {
      sh_graph_fail(g, SHEAF_ERR_NOMEM, "%s: out of memory", op);
      return SH_NULL_EXPR;
    }
    for (int k = 0; k < ng; k++) {
      int i0 = k * SH_MAX_NODE_INS, m = nx - i0 < SH_MAX_NODE_INS ? nx - i0 : SH_MAX_NODE_INS;
      part[k] = sheaf_concat(g, m, xs + i0);
      if (sheaf_expr_is_null(part[k])) return SH_NULL_EXPR;
    }
    return sheaf_concat(g, ng, part);
  }
  uint32_t buf[16], *ids = node_ids(g, op, nx, xs, buf);
  if (!ids) return SH_NULL_EXPR;
  uint32_t id = sh_node_new(g, SH_OP_CONCAT, ids, nx);
  if (id == SH_NONE) return SH_NULL_EXPR;
  sh_node *n = &g->store.nodes[id];
  n->rank = g->store.nodes[ids[0]].rank;
  n->rows = g->store.nodes[ids[0]].rows;
  n->cols = (int32_t)cols;
  return sh_expr_of(g, id);
}

sheaf_expr sheaf_slice(sheaf_graph *g, sheaf_expr x, int64_t begin, int64_t end) {
  static const char op[] = "sheaf_slice";
  if (!sh_build_enter(g) || sh_build_check(g, x, op, 1)) return SH_NULL_EXPR;
  const sh_node *xn = &g->store.nodes[x.node];
  if (begin < 0 || begin >= end || end > xn->cols) {
    char s[64];
    sh_graph_fail(g, SHEAF_ERR_SHAPE, "%s: [%lld, %lld) is not a non-empty range of shape %s", op,
                  (long long)begin, (long long)end, sh_node_shape_str(xn, s, sizeof s));
    return SH_NULL_EXPR;
  }
  if (begin == 0 && end == xn->cols) return x;
  /* a slice of a slice (of the same phase) is a slice of its source: no
   * chains of slices, which every later read would walk */
  uint32_t src = x.node;
  int64_t cols = end - begin;
  if (xn->op == SH_OP_SLICE && g->store.nodes[g->store.ins[xn->in]].phase == xn->phase) {
    begin += xn->offset;
    src = g->store.ins[xn->in];
  }
  uint32_t id = sh_node_new(g, SH_OP_SLICE, &src, 1);
  if (id == SH_NONE) return SH_NULL_EXPR;
  sh_node *n = &g->store.nodes[id];
  xn = &g->store.nodes[x.node];
  n->rank = xn->rank;
  n->rows = xn->rows;
  n->cols = (int32_t)cols;
  n->offset = (uint32_t)begin;
  return sh_expr_of(g, id);
}

sheaf_expr sheaf_reshape(sheaf_graph *g, sheaf_expr x, int rank, const int64_t *shape) {
  static const char op[] = "sheaf_reshape";
  if (!sh_build_enter(g) || sh_build_check(g, x, op, 1)) return SH_NULL_EXPR;
  if (!shape) {
    sh_graph_fail(g, SHEAF_ERR_INVALID_ARG, "%s: shape is NULL", op);
    return SH_NULL_EXPR;
  }
  const sh_node *xn = &g->store.nodes[x.node];
  int64_t numel = 1;
  bool ok = rank >= 1 && rank <= 2;
  for (int i = 0; ok && i < rank; i++) {
    ok = shape[i] >= 1 && shape[i] <= INT32_MAX;
    numel *= ok ? shape[i] : 1;
  }
  if (!ok || numel != (int64_t)xn->rows * xn->cols) {
    char s1[64], s2[64];
    sh_graph_fail(g, SHEAF_ERR_SHAPE, "%s: cannot view shape %s as %s", op, sh_node_shape_str(xn, s1, sizeof s1),
                  ok ? sh_shape_str(rank, shape, s2, sizeof s2) : "(invalid shape)");
    return SH_NULL_EXPR;
  }
  uint32_t id = sh_node_new(g, SH_OP_RESHAPE, &x.node, 1);
  if (id == SH_NONE) return SH_NULL_EXPR;
  sh_node *n = &g->store.nodes[id];
  n->rank = (uint8_t)rank;
  n->rows = rank == 2 ? (int32_t)shape[0] : 1;
  n->cols = (int32_t)shape[rank - 1];
  return sh_expr_of(g, id);
}
