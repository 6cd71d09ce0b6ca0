/*
 * autodiff.c — reverse-mode automatic differentiation over a flushed graph
 * (sheaf_backward), and the parameters' gradients (sheaf_param_grad,
 * sheaf_model_zero_grad). docs/TRAINING.md has the user's view.
 *
 * Design. The forward graph is already a tape: nodes are appended in
 * topological order (an input's id is below its reader's), each knows its
 * op, shape, inputs and operands, and after a flush every value is
 * readable (views and fused values resolved on demand, as sheaf_value
 * does). So the backward pass walks that tape in reverse with its own
 * batching instead of appending backward nodes to the graph:
 *
 *   1. req: which nodes a gradient must reach (parameters, lookups,
 *      affines and LSTM cells, the caller's wrt expressions, and anything
 *      reading one), forward in one pass; the comparisons pass none.
 *   2. level: the distance from the losses, backward in one pass (a node's
 *      level is one more than its deepest reader's), so every reader of a
 *      node has run before it: the forward's depth levels in reverse.
 *   3. buckets: the active nodes sorted by (level, op, weight, bias, id) —
 *      a deterministic order —, and each run of one (level, op, weight)
 *      handed to the op's rule (rules.c, keyed by op from ops.def). The
 *      GEMM rules run a whole bucket as one GEMM per product: dW += X^T·dY
 *      over every row of every node of the bucket, dX = dY·W^T likewise
 *      (grad_gemm.c); the other rules loop over the bucket's nodes.
 *
 * Why a tape and not backward nodes appended to the graph: the backward
 * ops (transposed products, weight-gradient accumulation across a bucket,
 * scatter-adds into parameter rows, row-kernel backwards) are not forward
 * ops, so appending them would add a dozen kernels, signatures and
 * executor paths to the runtime, and make every policy and fusion handle
 * accumulation into shared buffers; the reverse walk needs none of that,
 * reads the runtime's node store as the executor does, and batches the
 * part that matters (the GEMMs: one per bucket, the forward's batching
 * mirrored level by level). What it gives up — fusing the elementwise
 * backward into pointwise programs — is left for later (TRAINING.md).
 *
 * Gradients of nodes live in an arena of the pass (freed at its end);
 * those of parameters in the model (sh_param.grad), accumulated across
 * passes until sheaf_model_zero_grad. Sums run in a fixed order (node
 * order within a bucket, buckets in sort order), so a pass is
 * deterministic for a given graph and thread count.
 */
#include <stdlib.h>
#include <string.h>

#include "train/train.h"

/* ------------------------------------------------------------- helpers */

void *sh_bw_alloc(sh_bw *b, size_t bytes) {
  void *p = sh_arena_alloc(&b->mem, bytes ? bytes : 1);
  if (!p) sh_fail(b->ctx, SHEAF_ERR_NOMEM, "sheaf_backward: out of memory (%zu bytes)", bytes);
  return p;
}

float *sh_bw_grad(sh_bw *b, uint32_t id) {
  if (b->grad[id]) return b->grad[id];
  const sh_node *n = &b->g->store.nodes[id];
  size_t k = (size_t)n->rows * (size_t)n->cols;
  float *p = sh_bw_alloc(b, k * sizeof(float));
  if (p) memset(p, 0, k * sizeof(float));
  return b->grad[id] = p;
}

const float *sh_bw_val(sh_bw *b, uint32_t id) {
  sheaf_value_view v;
  if (sheaf_value(b->g, sh_expr_of(b->g, id), &v)) return NULL;
  return v.data;
}

static float *param_grad(sheaf_model *m, sh_param *q) {
  if (!q->grad) {
    q->grad = sh_alloc(m->ctx, (q->numel ? q->numel : 1) * sizeof(float), 64);
    if (q->grad) memset(q->grad, 0, q->numel * sizeof(float));
  }
  return q->grad;
}

float *sh_bw_param_grad(sh_bw *b, uint32_t pid) {
  sheaf_model *m = b->g->model;
  float *p = pid && pid <= m->n_params ? param_grad(m, &m->params[pid - 1]) : NULL;
  if (!p) sh_fail(b->ctx, SHEAF_ERR_NOMEM, "sheaf_backward: out of memory for a gradient");
  return p;
}

float *sheaf_param_grad(sheaf_model *m, sheaf_param p) {
  sh_param *q = sh_model_param_get(m, p);
  if (!q) {
    if (m) sh_fail(m->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_param_grad: invalid parameter");
    return NULL;
  }
  float *gr = param_grad(m, q);
  if (!gr) sh_fail(m->ctx, SHEAF_ERR_NOMEM, "sheaf_param_grad: out of memory");
  return gr;
}

sheaf_status sheaf_model_zero_grad(sheaf_model *m) {
  if (!m) return SHEAF_ERR_INVALID_ARG;
  for (uint32_t i = 0; i < m->n_params; i++)
    if (m->params[i].grad) memset(m->params[i].grad, 0, m->params[i].numel * sizeof(float));
  return SHEAF_OK;
}

/* ------------------------------------------------------------ the pass */

/* A node's place in the backward order. */
typedef struct bw_item {
  uint32_t level, op, k1, k2, k3, id;
} bw_item;

static int item_cmp(const void *pa, const void *pb) {
  const bw_item *a = pa, *b = pb;
#define CMP_FIELD(f) \
  if (a->f != b->f) return a->f < b->f ? -1 : 1;
  CMP_FIELD(level) CMP_FIELD(op) CMP_FIELD(k1) CMP_FIELD(k2) CMP_FIELD(k3) CMP_FIELD(id)
#undef CMP_FIELD
  return 0;
}

/* Ops that never pass a gradient (piecewise constant). */
static bool op_blocks(int op) {
  return op == SH_OP_GT || op == SH_OP_GE || op == SH_OP_EQ || op == SH_OP_NE;
}

/* The checks of an expression handed to sheaf_backward. */
static sheaf_status check_expr(sheaf_graph *g, sheaf_expr e, const char *what, int i) {
  if (sheaf_expr_is_null(e))
    return sh_fail(g->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_backward: %s %d is a null expression", what, i);
  if (e.graph != g->handle || e.node >= g->store.n_nodes || g->store.nodes[e.node].depth != e.depth)
    return sh_fail(g->ctx, SHEAF_ERR_INVALID_ARG,
                   "sheaf_backward: %s %d belongs to another graph (or was built before sheaf_graph_reset)",
                   what, i);
  return SHEAF_OK;
}

static sheaf_status run_pass(sh_bw *b, int n_loss, const sheaf_expr *loss, float scale,
                             const sheaf_backward_opts *o) {
  sheaf_graph *g = b->g;
  const sh_node *nodes = g->store.nodes;
  uint32_t n = b->n;
  /* 1. req, forward */
  for (int i = 0; o && i < o->n_wrt; i++) b->req[o->wrt[i].node] = 1;
  for (uint32_t id = 0; id < n; id++) {
    const sh_node *nd = &nodes[id];
    if (op_blocks(nd->op)) {
      b->req[id] = 0;
      continue;
    }
    if (nd->op == SH_OP_PARAM || nd->op == SH_OP_LOOKUP || nd->op == SH_OP_AFFINE || nd->op == SH_OP_LSTM)
      b->req[id] = 1;
    for (uint32_t k = 0; k < nd->n_in && !b->req[id]; k++) b->req[id] = b->req[g->store.ins[nd->in + k]];
  }
  /* 2. levels, backward */
  uint32_t *level = sh_bw_alloc(b, (size_t)n * sizeof *level);
  if (!level) return SHEAF_ERR_NOMEM;
  memset(level, 0xff, (size_t)n * sizeof *level);
  uint32_t top = 0;
  for (int i = 0; i < n_loss; i++) {
    uint32_t id = loss[i].node;
    if (!b->req[id]) continue; /* depends on no parameter: nothing to do */
    level[id] = 0;
    float *gr = sh_bw_grad(b, id);
    if (!gr) return SHEAF_ERR_NOMEM;
    size_t k = (size_t)nodes[id].rows * (size_t)nodes[id].cols;
    for (size_t j = 0; j < k; j++) gr[j] += scale;
    if (id + 1 > top) top = id + 1;
  }
  uint32_t n_act = 0;
  for (uint32_t id = top; id-- > 0;) {
    if (level[id] == UINT32_MAX) continue;
    n_act++;
    const sh_node *nd = &nodes[id];
    for (uint32_t k = 0; k < nd->n_in; k++) {
      uint32_t x = g->store.ins[nd->in + k];
      if (!b->req[x]) continue;
      if (level[x] == UINT32_MAX || level[x] < level[id] + 1) level[x] = level[id] + 1;
    }
  }
  /* 3. buckets in a fixed order */
  bw_item *it = sh_bw_alloc(b, (size_t)(n_act ? n_act : 1) * sizeof *it);
  uint32_t *ids = sh_bw_alloc(b, (size_t)(n_act ? n_act : 1) * sizeof *ids);
  if (!it || !ids) return SHEAF_ERR_NOMEM;
  uint32_t c = 0;
  for (uint32_t id = 0; id < top; id++) {
    if (level[id] == UINT32_MAX) continue;
    const sh_node *nd = &nodes[id];
    bw_item e = {level[id], nd->op, 0, 0, 0, id};
    if (nd->op == SH_OP_AFFINE || nd->op == SH_OP_LSTM) {
      e.k1 = nd->lin.w;
      e.k2 = nd->lin.b;
      e.k3 = (uint32_t)nd->n_in << 16 | (nd->rank == 2);
    }
    it[c++] = e;
  }
  qsort(it, c, sizeof *it, item_cmp);
  for (uint32_t i = 0; i < c;) {
    uint32_t j = i;
    while (j < c && it[j].level == it[i].level && it[j].op == it[i].op && it[j].k1 == it[i].k1 &&
           it[j].k2 == it[i].k2 && it[j].k3 == it[i].k3)
      j++;
    uint32_t m = 0;
    for (uint32_t k = i; k < j; k++)
      if (b->grad[it[k].id] || (it[k].op == SH_OP_LSTM && b->grad[nodes[it[k].id].lin.cell]))
        ids[m++] = it[k].id; /* no gradient arrived: nothing to pass on */
    if (m) {
      sheaf_status st = sh_bw_rules[it[i].op](b, ids, m);
      if (st) return st;
    }
    i = j;
  }
  /* the caller's wrt gradients */
  for (int i = 0; o && i < o->n_wrt; i++) {
    uint32_t id = o->wrt[i].node;
    size_t k = (size_t)nodes[id].rows * (size_t)nodes[id].cols;
    if (b->grad[id]) memcpy(o->wrt_grad[i], b->grad[id], k * sizeof(float));
    else memset(o->wrt_grad[i], 0, k * sizeof(float));
  }
  return SHEAF_OK;
}

sheaf_status sheaf_backward(sheaf_graph *g, int n_loss, const sheaf_expr *loss,
                            const sheaf_backward_opts *opts) {
  if (!g) return SHEAF_ERR_INVALID_ARG;
  if (n_loss < 0 || (n_loss > 0 && !loss))
    return sh_fail(g->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_backward: %s",
                   n_loss < 0 ? "n_loss is negative" : "loss is NULL");
  if (opts && opts->n_wrt && (opts->n_wrt < 0 || !opts->wrt || !opts->wrt_grad))
    return sh_fail(g->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_backward: opts.%s",
                   opts->n_wrt < 0 ? "n_wrt is negative" : !opts->wrt ? "wrt is NULL" : "wrt_grad is NULL");
  sheaf_status st = sheaf_graph_flush(g);
  if (st) return st;
  for (int i = 0; i < n_loss; i++)
    if ((st = check_expr(g, loss[i], "loss", i))) return st;
  for (int i = 0; opts && i < opts->n_wrt; i++) {
    if ((st = check_expr(g, opts->wrt[i], "wrt", i))) return st;
    if (!opts->wrt_grad[i])
      return sh_fail(g->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_backward: opts.wrt_grad[%d] is NULL", i);
  }
  float scale = opts && opts->scale != 0.0f ? opts->scale : 1.0f;
  sh_bw b = {0};
  b.g = g;
  b.ctx = g->ctx;
  b.n = g->store.n_nodes;
  sh_arena_init(&b.mem, g->ctx, 1u << 20);
  b.grad = sh_calloc(g->ctx, b.n ? b.n : 1, sizeof *b.grad);
  b.req = sh_calloc(g->ctx, b.n ? b.n : 1, 1);
  if (!b.grad || !b.req) st = sh_fail(g->ctx, SHEAF_ERR_NOMEM, "sheaf_backward: out of memory");
  else st = run_pass(&b, n_loss, loss, scale, opts);
  sh_free(g->ctx, b.grad, (size_t)(b.n ? b.n : 1) * sizeof *b.grad);
  sh_free(g->ctx, b.req, b.n ? b.n : 1);
  sh_arena_destroy(&b.mem);
  return st;
}
