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
 *      affines and LSTM and tree-LSTM cells, the caller's wrt expressions, and anything
 *      reading one), forward in one pass; the comparisons pass none.
 *   2. reach: the nodes a gradient arrives at, backward in one pass from
 *      the losses.
 *   3. buckets: the active nodes sorted by the forward's (phase, flush,
 *      depth) descending — every reader before what it reads —, then op,
 *      weight, bias and id — a deterministic order —, and each run of one
 *      (phase, flush, depth, op, weight)
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
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool.h"
#include "kernels/vmath.h"
#include "train/train.h"

/* ------------------------------------------------------------- helpers */

void *sh_bw_alloc(sh_bw *b, size_t bytes) {
  void *p = sh_arena_alloc(b->mem, bytes ? bytes : 1);
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

float *sh_bw_grad_fresh(sh_bw *b, uint32_t id, bool *fresh) {
  *fresh = false;
  if (b->grad[id]) return b->grad[id];
  const sh_node *n = &b->g->store.nodes[id];
  float *p = sh_bw_alloc(b, (size_t)n->rows * (size_t)n->cols * sizeof(float));
  *fresh = p != NULL;
  return b->grad[id] = p;
}

/* An elementwise op's value at one element (the forward's formulas, in
 * double). */
static double ew_value(int op, const double *v, int n_in, double s) {
  double a = n_in > 0 ? v[0] : 0.0, c = n_in > 1 ? v[1] : 0.0;
  switch (op) {
  case SH_OP_ADD: return a + c;
  case SH_OP_SUB: return a - c;
  case SH_OP_MUL: return a * c;
  case SH_OP_DIV: return a / c;
  case SH_OP_POW: return pow(a, c);
  case SH_OP_MINIMUM: return a != a ? a : c != c ? c : a < c ? a : c;
  case SH_OP_MAXIMUM: return a != a ? a : c != c ? c : a > c ? a : c;
  case SH_OP_GT: return a > c;
  case SH_OP_GE: return a >= c;
  case SH_OP_EQ: return a == c;
  case SH_OP_NE: return a != c;
  case SH_OP_WHERE: return a != 0 ? c : n_in > 2 ? v[2] : 0.0;
  case SH_OP_SUM_N: {
    double t = 0;
    for (int k = 0; k < n_in; k++) t += v[k];
    return t;
  }
  case SH_OP_SCALE: return s * a;
  case SH_OP_TANH: return tanhf((float)a);
  case SH_OP_SIGMOID: return 1.0f / (1.0f + expf((float)-a));
  case SH_OP_RELU: return a > 0 ? a : 0;
  case SH_OP_GELU: return 0.5 * a * (1.0 + erf(a / sqrt(2.0)));
  case SH_OP_EXP: return exp(a);
  case SH_OP_LN: return log(a);
  case SH_OP_SQRT: return sqrt(a);
  case SH_OP_RSQRT: return 1.0 / sqrt(a);
  case SH_OP_ABS: return fabs(a);
  case SH_OP_SOFTPLUS: return a > 20 ? a : log1p(exp(a));
  case SH_OP_ERF: return erf(a);
  case SH_OP_SILU: return a / (1.0 + exp(-a));
  default: return 0.0;
  }
}

/* The value of an elementwise node fused into its reader's program (the
 * flush never stored it): computed here from its inputs, rather than by
 * the runtime one node at a time. */
static const float *absorbed_val(sh_bw *b, uint32_t id) {
  const sh_node *n = &b->g->store.nodes[id];
  enum { MAX_IN = 64 };
  int n_in = n->n_in;
  if (n_in > MAX_IN) return NULL;
  const float *xv[MAX_IN];
  const sh_node *xn[MAX_IN];
  for (int k = 0; k < n_in; k++) {
    uint32_t x = sh_bw_in(b, id, k);
    xn[k] = &b->g->store.nodes[x];
    if (!(xv[k] = sh_bw_val(b, x))) return NULL;
  }
  float *out = sh_bw_alloc(b, (size_t)n->rows * (size_t)n->cols * sizeof(float));
  if (!out) return NULL;
  /* the common activations over a whole operand: the vmath kernels of the
   * graph's ISA (what the forward's pointwise programs evaluate) */
  if (n_in == 1 && xn[0]->rows == n->rows && xn[0]->cols == n->cols &&
      (n->op == SH_OP_TANH || n->op == SH_OP_SIGMOID || n->op == SH_OP_EXP)) {
    sh_vmath_fn fn = n->op == SH_OP_TANH ? SH_VMATH_TANH : n->op == SH_OP_SIGMOID ? SH_VMATH_SIGMOID : SH_VMATH_EXP;
    sh_vmath_f32(b->g->isa, fn, (int64_t)n->rows * n->cols, xv[0], out);
    return b->vals[id] = out;
  }
  for (int32_t r = 0; r < n->rows; r++)
    for (int32_t c = 0; c < n->cols; c++) {
      double v[MAX_IN];
      for (int k = 0; k < n_in; k++)
        v[k] = xv[k][(size_t)(xn[k]->rows == 1 ? 0 : r) * (size_t)xn[k]->cols + (size_t)(xn[k]->cols == 1 ? 0 : c)];
      out[(size_t)r * n->cols + c] = (float)ew_value(n->op, v, n_in, n->op == SH_OP_SCALE ? n->scale : 0.0);
    }
  return b->vals[id] = out;
}

const float *sh_bw_val(sh_bw *b, uint32_t id) {
  if (b->vals[id]) return b->vals[id];
  if (b->rec) { /* a lane reads only what the caller read for it (lanes.c): resolving writes the graph */
    sh_fail(b->ctx, SHEAF_ERR_INTERNAL, "sheaf_backward: internal error: node %u's value not read before its lane", id);
    return NULL;
  }
  const sh_node *n = &b->g->store.nodes[id];
  /* a stored, contiguous value that sheaf_value would hand out as is (not
   * pending, no raw affine value to recompute, not fused away): read it
   * without the API's checks */
  if (n->val && id < b->g->store.first_pending && n->op != SH_OP_AFFINE && n->op != SH_OP_SLICE &&
      !sh_pw_absorbed(b->g, id) && !(n->rank == 2 && n->rows > 1 && n->ld != n->cols))
    return b->vals[id] = n->val;
  if (sh_pw_absorbed(b->g, id) && !(n->done && n->val) && n->n_in <= 64) return absorbed_val(b, id);
  sheaf_value_view v;
  if (sheaf_value(b->g, sh_expr_of(b->g, id), &v)) return NULL;
  return b->vals[id] = v.data; /* kept for the pass: a value is read by each of its readers' rules */
}

/* Parameter q's gradient in the buffer r points to (the model's own or a
 * shard's: sh_grad_ref), allocated zeroed on first use. */
static float *param_grad(sheaf_model *m, const sh_param *q, sh_gref r) {
  if (!*r.grad) {
    *r.grad = sh_alloc(m->ctx, (q->numel ? q->numel : 1) * sizeof(float), 64);
    if (*r.grad) memset(*r.grad, 0, q->numel * sizeof(float));
  }
  return *r.grad;
}

float *sh_bw_param_grad(sh_bw *b, uint32_t pid) {
  sheaf_model *m = b->g->model;
  sh_gref r = pid && pid <= m->n_params ? sh_grad_ref(m, b->g->grad_shard, pid - 1) : (sh_gref){0};
  float *p = r.grad ? param_grad(m, &m->params[pid - 1], r) : NULL;
  if (!p) sh_fail(b->ctx, SHEAF_ERR_NOMEM, "sheaf_backward: out of memory for a gradient");
  else *r.whole = true;
  return p;
}

float *sh_bw_param_grad_row(sh_bw *b, uint32_t pid, int64_t row) {
  sheaf_model *m = b->g->model;
  sh_param *q = pid && pid <= m->n_params ? &m->params[pid - 1] : NULL;
  sh_gref r = q ? sh_grad_ref(m, b->g->grad_shard, pid - 1) : (sh_gref){0};
  float *p = q ? param_grad(m, q, r) : NULL;
  if (!p) {
    sh_fail(b->ctx, SHEAF_ERR_NOMEM, "sheaf_backward: out of memory for a gradient");
    return NULL;
  }
  if (q->rank != 2 || row < 0 || row >= q->shape[0]) { /* not a table's row: the whole tensor */
    *r.whole = true;
  } else if (!*r.whole) {
    if (!*r.rows && (*r.rows = sh_alloc(m->ctx, sh_grad_nrows(q), 64))) memset(*r.rows, 0, sh_grad_nrows(q));
    if (*r.rows) (*r.rows)[row] = 1;
    else *r.whole = true; /* no room for the marks: treated as whole (zeroed whole) */
  }
  return p;
}

float *sheaf_param_grad(sheaf_model *m, sheaf_param p) {
  sh_param *q = sh_model_param_get(m, p);
  if (!q) {
    if (m) sh_fail(m->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_param_grad: invalid parameter");
    return NULL;
  }
  float *gr = param_grad(m, q, sh_grad_ref(m, 0, p.id - 1));
  if (!gr) sh_fail(m->ctx, SHEAF_ERR_NOMEM, "sheaf_param_grad: out of memory");
  else q->grad_whole = true; /* the caller may write any element */
  return gr;
}

/* Zeroing the gradients: chunks of ZG_CHUNK floats of every parameter
 * whose whole gradient was written, over the pool (an embedding table's
 * gradient is megabytes); a table only looked up has only its marked rows
 * zeroed (the others are zero already), on the caller. */
#define ZG_CHUNK 16384
typedef struct zg_job {
  sheaf_model *m;
  const uint32_t *first; /* by parameter: its first chunk's index (n_params + 1 entries) */
} zg_job;

static void zg_task(void *arg, int64_t task, int tid) {
  (void)tid;
  const zg_job *j = arg;
  uint32_t lo = 0, hi = j->m->n_params; /* the parameter whose chunks hold `task` */
  while (hi - lo > 1) {
    uint32_t mid = (lo + hi) / 2;
    if (j->first[mid] <= (uint64_t)task) lo = mid;
    else hi = mid;
  }
  const sh_param *q = &j->m->params[lo];
  size_t a = ((size_t)task - j->first[lo]) * ZG_CHUNK, e = a + ZG_CHUNK < q->numel ? a + ZG_CHUNK : q->numel;
  memset(q->grad + a, 0, (e - a) * sizeof(float));
}

/* Every gradient zero now: nothing written since. */
static void zg_clear(sheaf_model *m) {
  for (uint32_t i = 0; i < m->n_params; i++) m->params[i].grad_whole = false;
}

sheaf_status sheaf_model_zero_grad(sheaf_model *m) {
  if (!m) return SHEAF_ERR_INVALID_ARG;
  sh_grad_shards_zero(m); /* zero already after sheaf_model_reduce_grads: nothing to do */
  for (uint32_t i = 0; i < m->n_params; i++) { /* the tables only looked up: their rows */
    sh_param *q = &m->params[i];
    if (!q->grad || q->grad_whole || !q->grad_rows) continue;
    size_t n = sh_grad_nrows(q), w = (size_t)q->shape[1];
    for (size_t r = 0; r < n; r++)
      if (q->grad_rows[r]) memset(q->grad + r * w, 0, w * sizeof(float));
    memset(q->grad_rows, 0, n);
  }
  uint32_t *first = m->n_params ? sh_alloc(m->ctx, ((size_t)m->n_params + 1) * sizeof *first, 64) : NULL;
  uint64_t c = 0;
  for (uint32_t i = 0; first && i < m->n_params; i++) {
    first[i] = (uint32_t)c;
    if (m->params[i].grad && m->params[i].grad_whole) c += (m->params[i].numel + ZG_CHUNK - 1) / ZG_CHUNK;
  }
  if (!first || c >= UINT32_MAX) { /* serially (no room for the index, or no parameter) */
    if (first) sh_free(m->ctx, first, ((size_t)m->n_params + 1) * sizeof *first);
    for (uint32_t i = 0; i < m->n_params; i++)
      if (m->params[i].grad && m->params[i].grad_whole) memset(m->params[i].grad, 0, m->params[i].numel * sizeof(float));
    zg_clear(m);
    return SHEAF_OK;
  }
  first[m->n_params] = (uint32_t)c;
  zg_job j = {m, first};
  sh_pool_run(m->ctx->pool, (int64_t)c, zg_task, &j, 0);
  sh_free(m->ctx, first, ((size_t)m->n_params + 1) * sizeof *first);
  zg_clear(m);
  return SHEAF_OK;
}

/* ------------------------------------------------------------ the pass */

/* A node's place in the backward order. */
typedef struct bw_item {
  uint32_t phase, epoch, depth, gemm, op, k1, k2, k3, id;
} bw_item;

/* Phases, flushes and depths descending (readers before what they read:
 * a reader's phase and flush are at least its inputs', and within one
 * flush its depth too; a later flush's reader of a computed value may sit
 * at a lower depth than the value, sheaf_graph.h's depth rule); within
 * one, the other nodes first, by id descending (a reader at the same depth
 * — a view, a pointwise node absorbing its input — has the higher id),
 * then the GEMM nodes, grouped by weight: they read only lower depths. */
static int item_cmp(const void *pa, const void *pb) {
  const bw_item *a = pa, *b = pb;
#define CMP_DESC(f) \
  if (a->f != b->f) return a->f > b->f ? -1 : 1;
#define CMP_ASC(f) \
  if (a->f != b->f) return a->f < b->f ? -1 : 1;
  CMP_DESC(phase) CMP_DESC(epoch) CMP_DESC(depth) CMP_ASC(gemm)
  if (!a->gemm) {
    CMP_DESC(id)
    return 0;
  }
  CMP_ASC(op) CMP_ASC(k1) CMP_ASC(k2) CMP_ASC(k3) CMP_ASC(id)
#undef CMP_DESC
#undef CMP_ASC
  return 0;
}

/* Sorts items (built in id order) into item_cmp's order: a stable radix
 * sort, a byte at a time, on (phase, epoch, depth descending, GEMM last)
 * packed in 64 bits, of the items in id-descending order, which leaves
 * the other nodes by id descending; then each run of GEMM nodes of one
 * depth is sorted by item_cmp (one comparison sort of the whole list
 * instead when the fields do not fit the key). The same total order as
 * qsort(item_cmp), in a fraction of its time. false: out of memory. */
static bool sort_items(sh_bw *b, bw_item *it, uint32_t c) {
  uint32_t mp = 0, me = 0, md = 0;
  for (uint32_t i = 0; i < c; i++) {
    if (it[i].phase > mp) mp = it[i].phase;
    if (it[i].epoch > me) me = it[i].epoch;
    if (it[i].depth > md) md = it[i].depth;
  }
  int bp = 0, be = 0, bd = 0;
  while (bp < 33 && (uint64_t)mp >> bp) bp++;
  while (be < 33 && (uint64_t)me >> be) be++;
  while (bd < 33 && (uint64_t)md >> bd) bd++;
  if (c < 64 || bp + be + bd + 1 > 63) {
    qsort(it, c, sizeof *it, item_cmp);
    return true;
  }
  uint64_t *key = sh_bw_alloc(b, 2 * (size_t)c * sizeof *key);
  bw_item *tmp = sh_bw_alloc(b, (size_t)c * sizeof *tmp);
  if (!key || !tmp) return false;
  uint64_t *key2 = key + c, diff = 0;
  for (uint32_t i = 0; i < c; i++) { /* id descending: the list reversed */
    const bw_item *e = &it[c - 1 - i];
    tmp[i] = *e;
    key[i] = ((uint64_t)(mp - e->phase) << (be + bd + 1)) | ((uint64_t)(me - e->epoch) << (bd + 1)) |
             ((uint64_t)(md - e->depth) << 1) | (e->gemm ? 1u : 0u);
    diff |= key[i] ^ key[0];
  }
  bw_item *src = tmp, *dst = it;
  for (int sh = 0; sh < 64; sh += 8) {
    if (!((diff >> sh) & 0xff)) continue; /* a byte every key shares */
    uint32_t cnt[257] = {0};
    for (uint32_t i = 0; i < c; i++) cnt[((key[i] >> sh) & 0xff) + 1]++;
    for (int d = 0; d < 256; d++) cnt[d + 1] += cnt[d];
    for (uint32_t i = 0; i < c; i++) {
      uint32_t at = cnt[(key[i] >> sh) & 0xff]++;
      dst[at] = src[i];
      key2[at] = key[i];
    }
    bw_item *t = src;
    src = dst, dst = t;
    uint64_t *tk = key;
    key = key2, key2 = tk;
  }
  if (src != it) memcpy(it, src, (size_t)c * sizeof *it);
  for (uint32_t i = 0; i < c;) { /* the GEMM runs, by weight */
    uint32_t j = i + 1;
    while (j < c && key[j] == key[i]) j++;
    if ((key[i] & 1) && j - i > 1) qsort(it + i, j - i, sizeof *it, item_cmp);
    i = j;
  }
  return true;
}

/* Ops that never pass a gradient (piecewise constant). */
static bool op_blocks(int op) {
  return op == SH_OP_GT || op == SH_OP_GE || op == SH_OP_EQ || op == SH_OP_NE;
}

/* The ops with a second output, their cell state (the LSTM_C node after
 * them): a gradient reaching either is the cell's to pass on. */
static bool is_cell(int op) { return op == SH_OP_LSTM || op == SH_OP_TREE_LSTM; }

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

/* Whether node id reads a concat at depth d. */
static bool reads_concat_at(const sheaf_graph *g, uint32_t id, uint32_t d) {
  const sh_node *nd = &g->store.nodes[id];
  for (uint32_t k = 0; k < nd->n_in; k++) {
    const sh_node *x = &g->store.nodes[g->store.ins[nd->in + k]];
    if (x->op == SH_OP_CONCAT && x->depth == d) return true;
  }
  return false;
}

/* A bucket of concats for rules.c to split over the pool. Concats are
 * views: they share their depth with their inputs (lookups, other views),
 * so in the order one concat is followed by its inputs, then the next
 * concat. it[i] is a concat; the run of items after it with the same
 * phase, flush and depth, not GEMMs, is partitioned in place (stably) into
 * the concats, then the others, up to the first item that reads a concat
 * at that depth (a concat that did would read a member of the bucket; so
 * would another reader). A member then has its gradient complete when the
 * bucket runs (its readers are earlier in the order, or in an earlier
 * depth), and an item moved after the bucket only runs later (its own
 * readers have run; a concat never writes into it: its inputs have lower
 * ids). Two members adding into one input do so in the order; an item
 * moved after them that adds into it too now adds after them: the same
 * order on any thread count. Returns the end of the concats; tmp: room for
 * the run. */
static uint32_t concat_bucket(const sheaf_graph *g, bw_item *it, uint32_t i, uint32_t c, bw_item *tmp) {
  const bw_item *f = &it[i];
  if (reads_concat_at(g, f->id, f->depth)) return i + 1;
  uint32_t k = i + 1, nc = 1, no = 0;
  for (; k < c; k++) {
    const bw_item *e = &it[k];
    if (e->gemm || e->phase != f->phase || e->epoch != f->epoch || e->depth != f->depth ||
        reads_concat_at(g, e->id, f->depth))
      break;
    if (e->op == SH_OP_CONCAT) it[i + nc++] = *e; /* i + nc <= k: not yet read back */
    else tmp[no++] = *e;
  }
  memcpy(&it[i + nc], tmp, (size_t)no * sizeof *tmp);
  return i + nc;
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
    if (nd->op == SH_OP_PARAM || nd->op == SH_OP_LOOKUP || nd->op == SH_OP_AFFINE || is_cell(nd->op))
      b->req[id] = 1;
    for (uint32_t k = 0; k < nd->n_in && !b->req[id]; k++) b->req[id] = b->req[g->store.ins[nd->in + k]];
  }
  /* 2. the nodes a gradient reaches, backward (bit 1 of req) */
  uint32_t top = 0;
  for (int i = 0; i < n_loss; i++) {
    uint32_t id = loss[i].node;
    if (!b->req[id]) continue; /* depends on no parameter: nothing to do */
    b->req[id] |= 2;
    float *gr = sh_bw_grad(b, id);
    if (!gr) return SHEAF_ERR_NOMEM;
    size_t k = (size_t)nodes[id].rows * (size_t)nodes[id].cols;
    for (size_t j = 0; j < k; j++) gr[j] += scale;
    if (id + 1 > top) top = id + 1;
  }
  uint32_t n_act = 0;
  for (uint32_t id = top; id-- > 0;) {
    if (!(b->req[id] & 2)) continue;
    n_act++;
    const sh_node *nd = &nodes[id];
    for (uint32_t k = 0; k < nd->n_in; k++) {
      uint32_t x = g->store.ins[nd->in + k];
      if (b->req[x]) b->req[x] |= 2;
    }
  }
  /* 3. the order, and the GEMM buckets */
  bw_item *it = sh_bw_alloc(b, (size_t)(n_act ? n_act : 1) * sizeof *it);
  uint32_t *ids = sh_bw_alloc(b, (size_t)(n_act ? n_act : 1) * sizeof *ids);
  bw_item *tmp = sh_bw_alloc(b, (size_t)(n_act ? n_act : 1) * sizeof *tmp);
  uint32_t *off = sh_bw_alloc(b, ((size_t)n_act + 1) * sizeof *off); /* a depth's GEMM buckets in ids */
  if (!it || !ids || !tmp || !off) return SHEAF_ERR_NOMEM;
  off[0] = 0;
  uint32_t c = 0, epoch = 0;
  for (uint32_t id = 0; id < top; id++) {
    /* the flush that computed it (a later one's nodes may sit at lower depths) */
    while (epoch < g->store.n_epoch && g->store.epoch_start[epoch] <= id) epoch++;
    if (!(b->req[id] & 2)) continue;
    const sh_node *nd = &nodes[id];
    if (nd->op == SH_OP_LSTM_C || nd->op == SH_OP_INPUT) continue; /* no rule to run: the cell reads
                                                                      its c's gradient; an input's is the caller's */
    bw_item e = {nd->phase, epoch, nd->depth, 0, nd->op, 0, 0, 0, id};
    if (nd->op == SH_OP_AFFINE || is_cell(nd->op)) {
      e.gemm = 1;
      e.k1 = nd->lin.w;
      e.k2 = nd->lin.b;
      e.k3 = (uint32_t)nd->n_in << 16 | (nd->rank == 2);
    }
    it[c++] = e;
  }
  if (!sort_items(b, it, c)) return SHEAF_ERR_NOMEM;
  for (uint32_t i = 0; i < c;) {
    uint32_t j = i + 1;
    if (it[i].gemm) { /* the depth's GEMM buckets (adjacent, at its end): lanes.c */
      uint32_t m = 0, nb = 0;
      for (uint32_t k = i; k < c && it[k].gemm && it[k].phase == it[i].phase &&
                           it[k].epoch == it[i].epoch && it[k].depth == it[i].depth; k++, j = k) {
        if (k > i && (it[k].op != it[k - 1].op || it[k].k1 != it[k - 1].k1 || it[k].k2 != it[k - 1].k2 ||
                      it[k].k3 != it[k - 1].k3) && m > off[nb])
          off[++nb] = m; /* a new bucket */
        if (b->grad[it[k].id] || (is_cell(it[k].op) && b->grad[sh_lstm_cell(it[k].id)]))
          ids[m++] = it[k].id; /* no gradient arrived: nothing to pass on */
      }
      if (m > off[nb]) off[++nb] = m;
      sheaf_status st = nb ? sh_bw_gemm_depth(b, ids, off, nb) : SHEAF_OK;
      if (st) return st;
      b->gemm_buckets += nb;
      off[0] = 0;
      i = j;
      continue;
    }
    if (it[i].op == SH_OP_CONCAT && !it[i].gemm) j = concat_bucket(g, it, i, c, tmp);
    if (it[i].op == SH_OP_LOOKUP && !it[i].gemm) /* a bucket of lookups (they read only a table) */
      while (j < c && !it[j].gemm && it[j].op == SH_OP_LOOKUP && it[j].phase == it[i].phase &&
             it[j].epoch == it[i].epoch && it[j].depth == it[i].depth)
        j++;
    uint32_t m = 0;
    for (uint32_t k = i; k < j; k++)
      if (b->grad[it[k].id] || (is_cell(it[k].op) && b->grad[sh_lstm_cell(it[k].id)]))
        ids[m++] = it[k].id; /* no gradient arrived: nothing to pass on */
    if (m) {
      sheaf_status st = sh_bw_rules[it[i].op](b, ids, m);
      if (st) return st;
      b->gemm_buckets += it[i].gemm;
    }
    i = j;
  }
  sheaf_status st = sh_bw_dw_flush(b); /* the weights' gradients, one GEMM per set */
  if (st) return st;
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
  return sh_backward_stats(g, n_loss, loss, opts, NULL);
}

sheaf_status sh_backward(sheaf_graph *g, int n_loss, const sheaf_expr *loss, const sheaf_backward_opts *opts,
                         uint64_t *gemm_buckets) {
  sh_bw_stats s;
  sheaf_status st = sh_backward_stats(g, n_loss, loss, opts, &s);
  if (gemm_buckets) *gemm_buckets = s.gemm_buckets;
  return st;
}

sheaf_status sh_backward_stats(sheaf_graph *g, int n_loss, const sheaf_expr *loss,
                               const sheaf_backward_opts *opts, sh_bw_stats *stats) {
  if (stats) memset(stats, 0, sizeof *stats);
  if (!g) return SHEAF_ERR_INVALID_ARG;
  if (n_loss < 0 || (n_loss > 0 && !loss))
    return sh_fail(g->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_backward: %s",
                   n_loss < 0 ? "n_loss is negative" : "loss is NULL");
  if (opts && opts->n_wrt && (opts->n_wrt < 0 || !opts->wrt || !opts->wrt_grad))
    return sh_fail(g->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_backward: opts.%s",
                   opts->n_wrt < 0 ? "n_wrt is negative" : !opts->wrt ? "wrt is NULL" : "wrt_grad is NULL");
  sheaf_status st = sheaf_graph_flush(g);
  if (st) return st;
  if ((st = sh_grad_shard_reserve(g->model, g->grad_shard))) return st;
  g->saved.keep = true; /* this graph trains: its next flushes keep what the backward reads */
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
  b.mem = &g->train;
  b.threads = g->threads;
  b.ws = g->work.gemm_ws[0];
  b.grad = sh_bw_alloc(&b, (size_t)(b.n ? b.n : 1) * sizeof *b.grad);
  b.req = sh_bw_alloc(&b, b.n ? b.n : 1);
  b.vals = sh_bw_alloc(&b, (size_t)(b.n ? b.n : 1) * sizeof *b.vals);
  if (!b.grad || !b.req || !b.vals) {
    st = SHEAF_ERR_NOMEM;
  } else {
    memset(b.grad, 0, (size_t)b.n * sizeof *b.grad);
    memset(b.req, 0, b.n);
    memset(b.vals, 0, (size_t)b.n * sizeof *b.vals);
    st = run_pass(&b, n_loss, loss, scale, opts);
    if (stats) *stats = (sh_bw_stats){b.gemm_buckets, b.lane_depths, b.lanes, b.dw_lanes};
  }
  /* next time, one chunk holds what this pass needed */
  sh_arena *a = &g->train;
  if (a->used_total > a->chunk_size) a->chunk_size = sh_align_up(a->used_total + a->used_total / 8, SH_ARENA_ALIGN);
  sh_arena_reset(a);
  for (int i = 0; i < SH_TRAIN_LANES; i++) {
    a = &g->train_lane[i];
    if (a->used_total > a->chunk_size) a->chunk_size = sh_align_up(a->used_total + a->used_total / 8, SH_ARENA_ALIGN);
    sh_arena_reset(a);
  }
  return st;
}
