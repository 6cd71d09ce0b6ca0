/*
 * coarsen_mat.c — matrices per sentence in a sequence model's main
 * (transformer.sf): a sentence's matrix `stack(for w in words { ... })`
 * (N x D, N its length) is, row by row, a per-token vector of main's
 * per-token activations, so the per-token products, biases, layer norms
 * and residuals translate as per-row code (coarsen.c). What mixes a
 * sentence's rows — `q @ transpose(k)` (the N x N scores), a constant scale
 * of them, `softmax` of their rows, and the product of those weights with
 * the sentence's rows `p @ v` — becomes SCORE / SMAX / ATT nodes here,
 * which linear_mat.c runs as ragged kernels. Anything else done with a
 * sentence's N x N matrix is refused with its position and the reason.
 */
#include <math.h>
#include <string.h>

#include "compile/linear_int.h"

int sh_lin_mat_node(sh_lin *L, sh_lin_arm *a, sh_span at, sh_lin_op op, int rank, int64_t d0, int64_t d1,
                    bool batched) {
  if (a->n_nodes == SH_LIN_MAX_NODES) {
    sh_lin_refuse(L, at, "the arm has more than %d tensor operations", SH_LIN_MAX_NODES);
    return -1;
  }
  sh_lin_node *n = &a->nodes[a->n_nodes];
  memset(n, 0, sizeof *n);
  n->op = op, n->rank = rank, n->d[0] = d0, n->d[1] = rank == 2 ? d1 : 1, n->batched = batched;
  n->a = n->b = -1;
  return a->n_nodes++;
}

static bool is_sentence_op(const sh_lin_node *n) {
  return n->op == SH_LIN_TRANS || n->op == SH_LIN_SCORE || n->op == SH_LIN_SMAX;
}

/* A per-token row of a sentence's matrix (or a vector computed per token). */
static bool is_row(const sh_lin_node *n) {
  return n->batched && n->rank == 1 && !is_sentence_op(n) && n->op != SH_LIN_CAT;
}

/* The value of a constant f32[1] expression (literals, float(size), unary math, + - * /). */
static bool const_value(const sh_lin_arm *a, int k, double *out) {
  if (k < 0) return false;
  const sh_lin_node *n = &a->nodes[k];
  if (n->batched || n->rank != 1 || n->d[0] != 1) return false;
  double x, y;
  switch (n->op) {
  case SH_LIN_CONST: *out = n->c; return true;
  case SH_LIN_UN:
    if (!const_value(a, n->a, &x)) return false;
    switch (n->fn) {
    case SH_BI_NONE: *out = -x; return true;
    case SH_BI_RSQRT: *out = (double)(1.0f / sqrtf((float)x)); return true;
    case SH_BI_SQRT: *out = (double)sqrtf((float)x); return true;
    case SH_BI_EXP: *out = (double)expf((float)x); return true;
    case SH_BI_LN: *out = (double)logf((float)x); return true;
    default: return false;
    }
  case SH_LIN_BIN:
    if (!const_value(a, n->a, &x) || !const_value(a, n->b, &y)) return false;
    *out = n->fn == SH_TK_PLUS ? x + y : n->fn == SH_TK_MINUS ? x - y : n->fn == SH_TK_STAR ? x * y : x / y;
    *out = (double)(float)*out;
    return true;
  default: return false;
  }
}

static const char *const sentence_what =
    "a sentence's N x N scores (q @ transpose(k)) are translated only scaled by a constant, through softmax of "
    "their rows, and times the sentence's rows (softmax(...) @ v)";

int sh_lin_mat_binary(sh_lin *L, sh_lin_arm *a, sh_span at, int op, int x, int y) {
  if (x < 0 || y < 0) return -2;
  const sh_lin_node *p = &a->nodes[x], *q = &a->nodes[y];
  if (!is_sentence_op(p) && !is_sentence_op(q)) return -2;
  if (op == SH_TK_AT && q->op == SH_LIN_TRANS) { /* q @ transpose(k): the scores */
    if (!is_row(p) || p->d[0] != q->d[0]) {
      sh_lin_refuse(L, at, "@ transpose(...): the linearized mode takes a sentence's matrix times the transpose of "
                           "one with as many columns (q @ transpose(k))");
      return -1;
    }
    int k = sh_lin_mat_node(L, a, at, SH_LIN_SCORE, 1, p->d[0], 1, true);
    if (k >= 0) a->nodes[k].a = x, a->nodes[k].b = q->a, a->nodes[k].c = 1.0, a->has_mat = true;
    return k;
  }
  if (op == SH_TK_AT && p->op == SH_LIN_SMAX) { /* softmax(scores) @ v: per-token rows again */
    if (!is_row(q)) {
      sh_lin_refuse(L, at, "softmax(scores) @ ...: the right operand must be a sentence's matrix (its rows)");
      return -1;
    }
    int k = sh_lin_mat_node(L, a, at, SH_LIN_ATT, 1, q->d[0], 1, true);
    if (k >= 0) a->nodes[k].a = x, a->nodes[k].b = y, a->has_mat = true;
    return k;
  }
  double c;
  if ((op == SH_TK_STAR || op == SH_TK_SLASH) && p->op == SH_LIN_SCORE && const_value(a, y, &c)) {
    int k = sh_lin_mat_node(L, a, at, SH_LIN_SCORE, 1, p->d[0], 1, true);
    if (k >= 0) {
      a->nodes[k] = a->nodes[x];
      a->nodes[k].c = (double)(float)(op == SH_TK_STAR ? p->c * c : p->c / c);
    }
    return k;
  }
  if (op == SH_TK_STAR && q->op == SH_LIN_SCORE && const_value(a, x, &c)) {
    int k = sh_lin_mat_node(L, a, at, SH_LIN_SCORE, 1, q->d[0], 1, true);
    if (k >= 0) a->nodes[k] = a->nodes[y], a->nodes[k].c = (double)(float)(q->c * c);
    return k;
  }
  sh_lin_refuse(L, at, "%s", sentence_what);
  return -1;
}

int sh_lin_mat_builtin(sh_lin *L, sh_lin_arm *a, sh_span at, int builtin, const int *args, int n) {
  if (n < 1 || args[0] < 0) return -2;
  const sh_lin_node *x = &a->nodes[args[0]];
  switch (builtin) {
  case SH_BI_TRANSPOSE: {
    if (!is_row(x)) {
      sh_lin_refuse(L, at, "transpose of other than a sentence's matrix (rows stacked over main's words): not "
                           "translated by the linearized mode");
      return -1;
    }
    int k = sh_lin_mat_node(L, a, at, SH_LIN_TRANS, 1, x->d[0], 1, true);
    if (k >= 0) a->nodes[k].a = args[0];
    return k;
  }
  case SH_BI_SOFTMAX: {
    if (!is_sentence_op(x)) return -2;
    if (x->op != SH_LIN_SCORE) {
      sh_lin_refuse(L, at, "%s", sentence_what);
      return -1;
    }
    int k = sh_lin_mat_node(L, a, at, SH_LIN_SMAX, 1, x->d[0], 1, true);
    if (k >= 0) a->nodes[k].a = args[0];
    return k;
  }
  case SH_BI_LAYER_NORM: {
    if (n != 3 || args[1] < 0 || args[2] < 0) return -1;
    const sh_lin_node *g = &a->nodes[args[1]], *b = &a->nodes[args[2]];
    if (x->rank != 1 || is_sentence_op(x) || x->op == SH_LIN_CAT || g->batched || b->batched || g->rank != 1 ||
        b->rank != 1 || g->d[0] != x->d[0] || b->d[0] != x->d[0]) {
      sh_lin_refuse(L, at, "layer_norm is translated for a vector or a sentence's matrix (by rows) with parameter "
                           "vectors gamma and beta of its width");
      return -1;
    }
    int k = sh_lin_mat_node(L, a, at, SH_LIN_LN, 1, x->d[0], 1, x->batched);
    if (k >= 0) {
      sh_lin_node *o = &a->nodes[k];
      o->a = args[0], o->n_items = 2, o->items[0] = args[1], o->items[1] = args[2];
    }
    return k;
  }
  default: break;
  }
  if (is_sentence_op(x)) {
    sh_lin_refuse(L, at, "%s", sentence_what);
    return -1;
  }
  return -2;
}

/* Rows of sentence matrices: flagged (stack's rows), or computed from them only. */
bool sh_lin_mat_rows_ok(const sh_lin_arm *a, int n_nodes) {
  bool tok[SH_LIN_MAX_NODES] = {0};
  for (int k = 0; k < n_nodes; k++) {
    const sh_lin_node *n = &a->nodes[k];
    if (!n->batched || n->init_only) continue; /* (init_only: a decoder's, linear_dec.c) */
    if (n->tok) {
      tok[k] = true;
      continue;
    }
    if (n->op == SH_LIN_IN) return false;
    bool any = false, all = true;
    int ops[2 + SH_LIN_MAX_SEGS], m = 0;
    ops[m++] = n->a, ops[m++] = n->b;
    for (int i = 0; (n->op == SH_LIN_CAT || n->op == SH_LIN_LN) && i < n->n_items; i++) ops[m++] = n->items[i];
    for (int i = 0; i < m; i++) {
      if (ops[i] < 0 || !a->nodes[ops[i]].batched) continue;
      any = true;
      all = all && tok[ops[i]];
    }
    if (!any || !all) return false;
    tok[k] = true;
  }
  return true;
}
