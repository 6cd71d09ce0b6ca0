/*
 * ops.c — the expression builders' core: handle checks (null, foreign,
 * stale), node creation (O(1): nodes and input ids appended to growable
 * arrays; inline depth and phase from the inputs; raw-value reads of fused
 * affines), the hand-off to the policy (bucket append for sheaf, eager run
 * for none); leaves (inputs, parameters, lookups) and linear algebra
 * (affine, affine_n, LSTM cell, tree-LSTM cell, matmul) with their shape
 * checks.
 * ops_pointwise.c has the elementwise, reduction and shape ops.
 */
#include <string.h>

#include "runtime/runtime.h"
#include "tensor/tensor.h"

const char *sh_node_shape_str(const sh_node *n, char *buf, size_t size) {
  int64_t s[2] = {n->rank == 2 ? n->rows : n->cols, n->cols};
  return sh_shape_str(n->rank, s, buf, size);
}

/* sh_build_check's slow path: the whole check again, with the messages. */
int sh_build_check_slow(sheaf_graph *g, sheaf_expr e, const char *op, int argno) {
  if (e.graph == g->handle) {
    if (SH_UNLIKELY(e.node >= g->store.n_nodes || g->store.nodes[e.node].depth != e.depth)) {
      sh_graph_fail(g, SHEAF_ERR_INVALID_ARG, "%s: argument %d is not a valid expression", op,
                    argno);
      return 2;
    }
    return 0;
  }
  if (e.graph == 0) return 1;
  if ((uint32_t)(e.graph >> 32) == g->tag)
    sh_graph_fail(g, SHEAF_ERR_INVALID_ARG,
                  "%s: argument %d was built before sheaf_graph_reset (a stale handle)", op, argno);
  else
    sh_graph_fail(g, SHEAF_ERR_INVALID_ARG,
                  "%s: argument %d belongs to another graph (or was built before "
                  "sheaf_graph_reset)",
                  op, argno);
  return 2;
}

static sh_param *param_arg(sheaf_graph *g, sheaf_param p, const char *op, const char *what,
                           bool optional) {
  if (optional && p.id == 0 && p.model == 0) return NULL;
  const sheaf_model *m = g->model;
  sh_param *q = p.model == m->tag && p.id && p.id <= m->n_params ? &m->params[p.id - 1] : NULL;
  if (!q) {
    if (p.id == 0)
      sh_graph_fail(g, SHEAF_ERR_NOT_FOUND, "%s: %s is not a parameter (SHEAF_NO_PARAM)", op, what);
    else if (p.model != m->tag)
      sh_graph_fail(g, SHEAF_ERR_INVALID_ARG, "%s: %s belongs to another model", op, what);
    else
      sh_graph_fail(g, SHEAF_ERR_NOT_FOUND, "%s: %s: no parameter %u in the model", op, what, p.id);
  }
  return q;
}

/* Appends a node reading `ins`; depth and phase follow the inputs. */
uint32_t sh_node_new(sheaf_graph *g, int op, const uint32_t *ins, int n_in) {
  if (SH_UNLIKELY(g->store.n_nodes + 1 > g->store.cap_nodes) &&
      sh_grow(g->ctx, (void **)&g->store.nodes, &g->store.cap_nodes, g->store.n_nodes + 1,
              sizeof *g->store.nodes)) {
    sh_graph_fail(g, SHEAF_ERR_NOMEM, "%s: out of memory", sh_op_name(op));
    return SH_NONE;
  }
  if (SH_UNLIKELY(g->store.n_ins + (uint32_t)n_in > g->store.cap_ins) &&
      sh_grow(g->ctx, (void **)&g->store.ins, &g->store.cap_ins, g->store.n_ins + (uint32_t)n_in,
              sizeof *g->store.ins)) {
    sh_graph_fail(g, SHEAF_ERR_NOMEM, "%s: out of memory", sh_op_name(op));
    return SH_NONE;
  }
  uint32_t depth = 0, phase = (uint32_t)g->store.phase;
  for (int i = 0; i < n_in; i++) {
    const sh_node *x = &g->store.nodes[ins[i]];
    if (x->phase > phase) phase = x->phase;
    /* (an absorbed node has been read, by its absorber: a first reader skips the side entry) */
    if (SH_UNLIKELY(x->uses && sh_pw_absorbed(g, ins[i])) && sh_pw_need(g, ins[i]))
      return SH_NONE; /* a second reader of a value fused into its reader */
    uint32_t r = ins[i];
    while (g->store.nodes[r].op == SH_OP_SLICE) r = g->store.ins[g->store.nodes[r].in];
    if (SH_UNLIKELY(r < g->store.first_pending && g->store.nodes[r].op == SH_OP_AFFINE &&
                    sh_affine_of(g, r)->val_is_act) &&
        sh_graph_raw_guard(g, ins[i]))
      return SH_NONE; /* an earlier flush fused activations into this value */
  }
  uint32_t id = g->store.n_nodes++;
  uint32_t first_in = g->store.n_ins; /* (an index: ins is NULL until a node has inputs) */
  bool reads_raw = op != SH_OP_ALIAS; /* a fused activation reads through its epilogue */
  for (int i = 0; i < n_in; i++) {
    uint32_t xi = ins[i];
    sh_node *x = &g->store.nodes[xi];
    g->store.ins[first_in + i] = xi;
    /* depth counts within a phase and within the pending nodes: an earlier
     * phase's value is ready when this one starts, an earlier flush's now
     * (so instances whose histories differ still meet at the same depths) */
    if (x->depth > depth && x->phase == phase && xi >= g->store.first_pending) depth = x->depth;
    x->uses++;
    /* a read of an affine's raw value: directly, or through slices (making a
     * slice is not a read) */
    if (!reads_raw || (x->op != SH_OP_AFFINE && x->op != SH_OP_SLICE)) continue;
    if (x->op == SH_OP_AFFINE) {
      if (op != SH_OP_SLICE) sh_affine_of(g, xi)->raw_used = true;
      continue;
    }
    uint32_t r = xi;
    while (g->store.nodes[r].op == SH_OP_SLICE) r = g->store.ins[g->store.nodes[r].in];
    if (g->store.nodes[r].op == SH_OP_AFFINE) sh_affine_of(g, r)->raw_used = true;
  }
  g->store.nodes[id] = (sh_node){.op = (uint8_t)op,
                                 .rank = 1,
                                 .n_in = (uint16_t)n_in,
                                 .phase = (uint16_t)phase,
                                 .in = first_in,
                                 .depth = depth + sh_op_is_kernel(op),
                                 .rows = 1};
  g->store.n_ins += (uint32_t)n_in;
  if (phase > g->store.max_phase) g->store.max_phase = phase;
  g->instr.stats.nodes++;
  return id;
}

/* Hands a finished node to the policy; returns its expression. */
sheaf_expr sh_build_finish(sheaf_graph *g, uint32_t id) {
  sh_node *n = &g->store.nodes[id];
  if (!sh_op_is_kernel(n->op) || g->policy == SHEAF_POLICY_DEPTH ||
      g->policy == SHEAF_POLICY_AGENDA)
    return sh_expr_of(g, id);
  sheaf_status st;
  uint32_t sig = SH_NONE;
  if (sh_op_is_pw(n->op) && g->policy == SHEAF_POLICY_SHEAF) {
    /* bucketed at flush, unless a later pointwise node absorbs it */
    st = sh_pw_list_add(g, id);
    if (!st) return sh_expr_of(g, id);
  } else if (sh_op_is_pw(n->op)) {
    st = sh_pw_finalize(g, id, true);
    sig = g->pw.node[id].sig;
  } else {
    sh_sig_key k;
    sh_sig_key_of(g, n, &k);
    st = sh_sig_find_fast(g, &k, &sig);
  }
  if (!st)
    st = g->policy == SHEAF_POLICY_SHEAF ? sh_sched_sheaf_add(g, id, sig)
                                         : sh_sched_none_add(g, id, sig);
  if (st) {
    char e[SH_ERR_MAX];
    sh_graph_fail(g, st, "%s: %s", sh_op_name(g->store.nodes[id].op),
                  sh_last_error_copy(g->ctx, e, sizeof e));
    return SH_NULL_EXPR;
  }
  return sh_expr_of(g, id);
}

/* ---------------------------------------------------------------- leaves */

/* An input (data copied; need_data: data must not be NULL) or zeros. */
static sheaf_expr leaf(sheaf_graph *g, const char *op, int rank, const int64_t *shape,
                       const float *data, bool need_data) {
  if (!sh_build_enter(g)) return SH_NULL_EXPR;
  if (rank < 1 || rank > 2) {
    sh_graph_fail(g, SHEAF_ERR_INVALID_ARG, "%s: rank %d (1 or 2)", op, rank);
    return SH_NULL_EXPR;
  }
  if (!shape) {
    sh_graph_fail(g, SHEAF_ERR_INVALID_ARG, "%s: shape is NULL", op);
    return SH_NULL_EXPR;
  }
  if (need_data && !data) {
    sh_graph_fail(g, SHEAF_ERR_INVALID_ARG, "%s: data is NULL", op);
    return SH_NULL_EXPR;
  }
  for (int i = 0; i < rank; i++)
    if (shape[i] < 1 || shape[i] > INT32_MAX) {
      char b[64];
      sh_graph_fail(g, SHEAF_ERR_SHAPE, "%s: invalid shape %s", op,
                    sh_shape_str(rank, shape, b, sizeof b));
      return SH_NULL_EXPR;
    }
  int64_t rows = rank == 2 ? shape[0] : 1, cols = shape[rank - 1];
  size_t bytes = (size_t)rows * (size_t)cols * sizeof(float);
  float *v = sh_arena_alloc(&g->store.data, bytes);
  if (!v) {
    sh_graph_fail(g, SHEAF_ERR_NOMEM, "%s: out of memory (%zu bytes)", op, bytes);
    return SH_NULL_EXPR;
  }
  if (data)
    memcpy(v, data, bytes);
  else
    memset(v, 0, bytes);
  uint32_t id = sh_node_new(g, SH_OP_INPUT, NULL, 0);
  if (id == SH_NONE) return SH_NULL_EXPR;
  sh_node *n = &g->store.nodes[id];
  n->rank = (uint8_t)rank;
  n->rows = (int32_t)rows;
  n->cols = (int32_t)cols;
  n->ld = (int32_t)cols;
  n->val = v;
  n->done = true;
  return sh_expr_of(g, id);
}

sheaf_expr sheaf_input(sheaf_graph *g, int rank, const int64_t *shape, const float *data) {
  return leaf(g, "sheaf_input", rank, shape, data, true);
}

sheaf_expr sheaf_input_vector(sheaf_graph *g, int64_t n, const float *data) {
  return leaf(g, "sheaf_input_vector", 1, &n, data, true);
}

sheaf_expr sheaf_zeros(sheaf_graph *g, int rank, const int64_t *shape) {
  return leaf(g, "sheaf_zeros", rank, shape, NULL, false);
}

sheaf_expr sheaf_parameter(sheaf_graph *g, sheaf_param p) {
  if (!sh_build_enter(g)) return SH_NULL_EXPR;
  sh_param *q = param_arg(g, p, "sheaf_parameter", "the parameter", false);
  if (!q) return SH_NULL_EXPR;
  uint32_t id = sh_node_new(g, SH_OP_PARAM, NULL, 0);
  if (id == SH_NONE) return SH_NULL_EXPR;
  sh_node *n = &g->store.nodes[id];
  n->rank = (uint8_t)q->rank;
  n->rows = (int32_t)(q->rank == 2 ? q->shape[0] : 1);
  n->cols = (int32_t)(q->rank == 2 ? q->shape[1] : q->shape[0]);
  n->ld = n->cols;
  n->param.id = p.id;
  n->val = q->data;
  n->done = true;
  return sh_expr_of(g, id);
}

sheaf_expr sheaf_lookup(sheaf_graph *g, sheaf_param table, int64_t row) {
  if (!sh_build_enter(g)) return SH_NULL_EXPR;
  sh_param *q = param_arg(g, table, "sheaf_lookup", "the table", false);
  if (!q) return SH_NULL_EXPR;
  int64_t nrows = q->rank == 2 ? q->shape[0] : q->shape[0];
  if (row < 0 || row >= nrows) {
    char b[64];
    sh_graph_fail(g, SHEAF_ERR_INVALID_ARG, "sheaf_lookup: row %lld is outside table '%s' %s",
                  (long long)row, q->name, sh_shape_str(q->rank, q->shape, b, sizeof b));
    return SH_NULL_EXPR;
  }
  uint32_t id = sh_node_new(g, SH_OP_LOOKUP, NULL, 0);
  if (id == SH_NONE) return SH_NULL_EXPR;
  sh_node *n = &g->store.nodes[id];
  n->cols = (int32_t)(q->rank == 2 ? q->shape[1] : 1);
  n->ld = n->cols;
  n->param.id = table.id;
  n->param.row = (uint32_t)row;
  n->val = q->data + row * n->cols;
  n->done = true;
  return sh_expr_of(g, id);
}

/* -------------------------------------------------------- linear algebra */

/* Checks x_i (cols) against W_i [in_i, out]; fills ids. */
static bool affine_args(sheaf_graph *g, const char *op, int nx, const sheaf_param *W,
                        const sheaf_expr *x, uint32_t *ids, sh_param **wp, int64_t out_cols) {
  for (int i = 0; i < nx; i++) {
    int c = sh_build_check(g, x[i], op, i + 1);
    if (c) return false;
    ids[i] = x[i].node;
  }
  int32_t rows = g->store.nodes[ids[0]].rows;
  for (int i = 0; i < nx; i++) {
    const sh_node *xn = &g->store.nodes[ids[i]];
    char a[64], b[64];
    if (wp[i]->rank != 2 || xn->cols != wp[i]->shape[0] || wp[i]->shape[1] != out_cols) {
      sh_graph_fail(g, SHEAF_ERR_SHAPE, "%s: x%s has shape %s but W '%s' has shape %s%s", op,
                    nx > 1 ? (i == 0   ? "_1"
                              : i == 1 ? "_2"
                              : i == 2 ? "_3"
                                       : "_4")
                           : "",
                    sh_node_shape_str(xn, a, sizeof a), wp[i]->name,
                    sh_shape_str(wp[i]->rank, wp[i]->shape, b, sizeof b),
                    wp[i]->rank != 2              ? " (a matrix [in, out] is expected)"
                    : wp[i]->shape[1] != out_cols ? " (the weights' output widths differ)"
                                                  : "");
      return false;
    }
    if (xn->rows != rows) {
      sh_graph_fail(g, SHEAF_ERR_SHAPE, "%s: inputs have %d and %d rows", op, rows, xn->rows);
      return false;
    }
  }
  return true;
}

static bool bias_ok(sheaf_graph *g, const char *op, const sh_param *b, int64_t cols) {
  if (!b || b->numel == (size_t)cols) return true;
  char s[64];
  sh_graph_fail(g, SHEAF_ERR_SHAPE, "%s: bias '%s' has shape %s but the output has %lld columns",
                op, b->name, sh_shape_str(b->rank, b->shape, s, sizeof s), (long long)cols);
  return false;
}

sheaf_expr sheaf_affine_n(sheaf_graph *g, int nx, const sheaf_param *W, const sheaf_expr *x,
                          sheaf_param b) {
  const char *op = nx == 1 ? "sheaf_affine" : "sheaf_affine_n";
  if (!sh_build_enter(g)) return SH_NULL_EXPR;
  if (nx < 1 || nx > SH_GEMM_MAX_KSRC) {
    sh_graph_fail(g, SHEAF_ERR_INVALID_ARG, "%s: %d inputs (1..%d)", op, nx, SH_GEMM_MAX_KSRC);
    return SH_NULL_EXPR;
  }
  if (!W || !x) {
    sh_graph_fail(g, SHEAF_ERR_INVALID_ARG, "%s: %s is NULL", op, !W ? "W" : "x");
    return SH_NULL_EXPR;
  }
  sh_param *wp[SH_GEMM_MAX_KSRC];
  for (int i = 0; i < nx; i++)
    if (!(wp[i] = param_arg(g, W[i], op, "W", false))) return SH_NULL_EXPR;
  sh_param *bp = param_arg(g, b, op, "b", true);
  if (g->status) return SH_NULL_EXPR;
  uint32_t ids[SH_GEMM_MAX_KSRC];
  int64_t out = wp[0]->rank == 2 ? wp[0]->shape[1] : 0;
  if (!affine_args(g, op, nx, W, x, ids, wp, out) || !bias_ok(g, op, bp, out)) return SH_NULL_EXPR;
  uint32_t p0 = W[0].id;
  if (nx > 1) {
    uint32_t wid[SH_GEMM_MAX_KSRC];
    for (int i = 0; i < nx; i++) wid[i] = W[i].id;
    if (sh_model_stack_id(g->model, nx, wid, &p0)) {
      sh_graph_fail(g, SHEAF_ERR_NOMEM, "%s: out of memory", op);
      return SH_NULL_EXPR;
    }
  }
  /* its side entry first: a failure leaves no half-built node */
  if (sh_side_reserve(g->ctx, (void **)&g->affine.node, &g->affine.cap_node, g->affine.n_node,
                      sizeof *g->affine.node)) {
    sh_graph_fail(g, SHEAF_ERR_NOMEM, "%s: out of memory", op);
    return SH_NULL_EXPR;
  }
  uint32_t id = sh_node_new(g, SH_OP_AFFINE, ids, nx);
  if (id == SH_NONE) return SH_NULL_EXPR;
  sh_node *n = &g->store.nodes[id];
  const sh_node *x0 = &g->store.nodes[ids[0]];
  n->rank = x0->rank;
  n->rows = x0->rows;
  n->cols = (int32_t)out;
  n->lin.w = p0;
  n->lin.b = b.id;
  n->lin.aff = g->affine.n_node++;
  g->affine.node[n->lin.aff] = (sh_affine_node){SH_NONE, SH_NONE, 0, false, false};
  return sh_build_finish(g, id);
}

sheaf_expr sheaf_affine(sheaf_graph *g, sheaf_param W, sheaf_expr x, sheaf_param b) {
  return sheaf_affine_n(g, 1, &W, &x, b);
}

/* A cell node (LSTM, TREE_LSTM) over inputs ids[0..nin) and its cell
 * state, the LSTM_C node right after it; *h and *c their expressions. */
static sheaf_status cell_nodes(sheaf_graph *g, const char *op, int cell_op, sheaf_param W,
                               sheaf_param b, const uint32_t *ids, int nin, int64_t hid,
                               sheaf_expr *h, sheaf_expr *c) {
  uint32_t id = sh_node_new(g, cell_op, ids, nin);
  if (id == SH_NONE) return g->status;
  sh_node *n = &g->store.nodes[id];
  const sh_node *xn = &g->store.nodes[ids[0]];
  n->rank = xn->rank;
  n->rows = xn->rows;
  n->cols = (int32_t)hid;
  n->lin.w = W.id;
  n->lin.b = b.id;
  uint32_t cid = sh_node_new(g, SH_OP_LSTM_C, &id, 1);
  if (cid == SH_NONE) return g->status;
  g->store.nodes[id].uses--; /* the cell state is the node's own output */
  g->store.nodes[cid].rank = g->store.nodes[id].rank;
  g->store.nodes[cid].rows = g->store.nodes[id].rows;
  g->store.nodes[cid].cols = (int32_t)hid;
  if (cid != sh_lstm_cell(id)) return sh_graph_fail(g, SHEAF_ERR_INTERNAL, "%s: cell state not after it", op);
  sheaf_expr he = sh_build_finish(g, id);
  if (sheaf_expr_is_null(he)) return g->status;
  *h = he;
  *c = sh_expr_of(g, cid);
  return SHEAF_OK;
}

sheaf_status sheaf_lstm_cell(sheaf_graph *g, sheaf_param W, sheaf_param b, sheaf_expr x,
                             sheaf_expr c_prev, sheaf_expr *h, sheaf_expr *c) {
  static const char op[] = "sheaf_lstm_cell";
  if (h) *h = SH_NULL_EXPR;
  if (c) *c = SH_NULL_EXPR;
  if (!g) return SHEAF_ERR_INVALID_ARG;
  if (!h || !c) return sh_graph_fail(g, SHEAF_ERR_INVALID_ARG, "%s: %s is NULL", op, !h ? "h" : "c");
  if (!sh_build_enter(g)) return g->status;
  sh_param *wp = param_arg(g, W, op, "W", false);
  sh_param *bp = wp ? param_arg(g, b, op, "b", true) : NULL;
  if (g->status) return g->status;
  if (wp->rank != 2 || wp->shape[1] % 4 != 0) {
    char s[64];
    return sh_graph_fail(g, SHEAF_ERR_SHAPE,
                         "%s: W '%s' has shape %s; [in, 4*hidden] (gates i, f, g, o) expected", op,
                         wp->name, sh_shape_str(wp->rank, wp->shape, s, sizeof s));
  }
  int64_t hid = wp->shape[1] / 4;
  uint32_t ids[2];
  int cx = sh_build_check(g, x, op, 1);
  if (cx) return g->status;
  ids[0] = x.node;
  int nin = 1;
  if (!sheaf_expr_is_null(c_prev)) {
    if (sh_build_check(g, c_prev, op, 2)) return g->status;
    ids[1] = c_prev.node;
    nin = 2;
  }
  if (!affine_args(g, op, 1, &W, &x, ids, &wp, wp->shape[1]) || !bias_ok(g, op, bp, wp->shape[1]))
    return g->status;
  const sh_node *xn = &g->store.nodes[ids[0]];
  if (nin == 2) {
    const sh_node *cn = &g->store.nodes[ids[1]];
    if (cn->cols != hid || cn->rows != xn->rows) {
      char a[64];
      return sh_graph_fail(g, SHEAF_ERR_SHAPE, "%s: c_prev has shape %s but hidden is %lld", op,
                           sh_node_shape_str(cn, a, sizeof a), (long long)hid);
    }
  }
  return cell_nodes(g, op, SH_OP_LSTM, W, b, ids, nin, hid, h, c);
}

/* A binary tree-LSTM cell (leaf: no c_l, c_r): one TREE_LSTM node, its
 * cell state the LSTM_C node after it (as sheaf_lstm_cell). */
sheaf_status sheaf_tree_lstm_cell(sheaf_graph *g, sheaf_param W, sheaf_param b, sheaf_expr x,
                                  sheaf_expr c_l, sheaf_expr c_r, sheaf_expr *h, sheaf_expr *c) {
  static const char op[] = "sheaf_tree_lstm_cell";
  if (h) *h = SH_NULL_EXPR;
  if (c) *c = SH_NULL_EXPR;
  if (!g) return SHEAF_ERR_INVALID_ARG;
  if (!h || !c) return sh_graph_fail(g, SHEAF_ERR_INVALID_ARG, "%s: %s is NULL", op, !h ? "h" : "c");
  if (!sh_build_enter(g)) return g->status;
  bool leaf = sheaf_expr_is_null(c_l);
  if (leaf != sheaf_expr_is_null(c_r))
    return sh_graph_fail(g, SHEAF_ERR_INVALID_ARG, "%s: %s is null but %s is not (both null: a leaf)",
                         op, leaf ? "c_l" : "c_r", leaf ? "c_r" : "c_l");
  sh_param *wp = param_arg(g, W, op, "W", false);
  sh_param *bp = wp ? param_arg(g, b, op, "b", true) : NULL;
  if (g->status) return g->status;
  int gates = leaf ? 3 : 5;
  if (wp->rank != 2 || wp->shape[1] % gates != 0) {
    char s[64];
    return sh_graph_fail(g, SHEAF_ERR_SHAPE, "%s: W '%s' has shape %s; [in, %d*hidden] (gates %s) expected",
                         op, wp->name, sh_shape_str(wp->rank, wp->shape, s, sizeof s), gates,
                         leaf ? "i, o, u" : "i, f_l, f_r, o, u");
  }
  int64_t hid = wp->shape[1] / gates;
  uint32_t ids[3];
  if (sh_build_check(g, x, op, 1)) return g->status;
  ids[0] = x.node;
  int nin = 1;
  if (!leaf) {
    if (sh_build_check(g, c_l, op, 2) || sh_build_check(g, c_r, op, 3)) return g->status;
    ids[1] = c_l.node, ids[2] = c_r.node;
    nin = 3;
  }
  if (!affine_args(g, op, 1, &W, &x, ids, &wp, wp->shape[1]) || !bias_ok(g, op, bp, wp->shape[1]))
    return g->status;
  const sh_node *xn = &g->store.nodes[ids[0]];
  for (int k = 1; k < nin; k++) {
    const sh_node *cn = &g->store.nodes[ids[k]];
    if (cn->cols != hid || cn->rows != xn->rows) {
      char a[64];
      return sh_graph_fail(g, SHEAF_ERR_SHAPE, "%s: %s has shape %s but x has %d rows and hidden is %lld",
                           op, k == 1 ? "c_l" : "c_r", sh_node_shape_str(cn, a, sizeof a), xn->rows,
                           (long long)hid);
    }
  }
  return cell_nodes(g, op, SH_OP_TREE_LSTM, W, b, ids, nin, hid, h, c);
}

sheaf_expr sheaf_matmul(sheaf_graph *g, sheaf_expr a, sheaf_expr b) {
  static const char op[] = "sheaf_matmul";
  if (!sh_build_enter(g) || sh_build_check(g, a, op, 1) || sh_build_check(g, b, op, 2)) return SH_NULL_EXPR;
  const sh_node *an = &g->store.nodes[a.node], *bn = &g->store.nodes[b.node];
  int64_t k_b = bn->rank == 2 ? bn->rows : bn->cols;
  if (an->cols != k_b || (an->rank == 1 && bn->rank == 1 && an->cols != bn->cols)) {
    char s1[64], s2[64];
    sh_graph_fail(g, SHEAF_ERR_SHAPE, "%s: shapes %s and %s do not agree (%d != %lld)", op,
                  sh_node_shape_str(an, s1, sizeof s1), sh_node_shape_str(bn, s2, sizeof s2), an->cols, (long long)k_b);
    return SH_NULL_EXPR;
  }
  uint32_t ids[2] = {a.node, b.node};
  uint32_t id = sh_node_new(g, SH_OP_MATMUL, ids, 2);
  if (id == SH_NONE) return SH_NULL_EXPR;
  sh_node *n = &g->store.nodes[id];
  an = &g->store.nodes[a.node];
  bn = &g->store.nodes[b.node];
  if (bn->rank == 2) { /* [r,k]·[k,c] -> [r,c];  [k]·[k,c] -> [c] */
    n->rank = an->rank;
    n->rows = an->rows;
    n->cols = bn->cols;
  } else { /* [r,k]·[k] -> [r];  [k]·[k] -> [1] */
    n->cols = an->rank == 2 ? an->rows : 1;
  }
  return sh_build_finish(g, id);
}
