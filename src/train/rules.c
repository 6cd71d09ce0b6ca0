/*
 * rules.c — the derivative rule of every op, keyed by op: the table
 * sh_bw_rules is generated from kernels/ops.def, each entry the function
 * bw_<ID> (an op added to ops.def without its rule here does not compile).
 * Views, elementwise ops and row kernels are here; the GEMM ops call
 * grad_gemm.c. Every rule adds into the gradients of its node's inputs
 * that need one (b->req), in node order.
 */
#include <math.h>
#include <string.h>

#include "base/pool.h"
#include "train/train.h"

#define BW_FAIL(b) ((b)->g->status ? (b)->g->status : sheaf_ctx_last_status((b)->ctx))
#define NEED(b, x) ((b)->req[x])

static inline const sh_node *node(const sh_bw *b, uint32_t id) { return &b->g->store.nodes[id]; }
static inline size_t numel(const sh_node *n) { return (size_t)n->rows * (size_t)n->cols; }

/* ------------------------------------------------------------------ views */

static sheaf_status bw_INPUT(sh_bw *b, const uint32_t *ids, uint32_t n) {
  (void)b, (void)ids, (void)n; /* a leaf: its gradient is read by the caller (wrt) */
  return SHEAF_OK;
}

static sheaf_status bw_PARAM(sh_bw *b, const uint32_t *ids, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    const sh_node *nd = node(b, ids[i]);
    float *pg = sh_bw_param_grad(b, nd->param.id);
    if (!pg) return SHEAF_ERR_NOMEM;
    const float *dy = b->grad[ids[i]];
    for (size_t j = 0, k = numel(nd); j < k; j++) pg[j] += dy[j];
  }
  return SHEAF_OK;
}

/* A bucket of lookups split over the pool by the tables' columns: task t
 * of T adds columns [c*t/T, c*(t+1)/T) of each looked-up row (c: its
 * table's columns), nodes in order, so an element of a table's gradient is
 * always written by one task, its adds in the serial order. */
typedef struct lookup_job {
  const sh_bw *b;
  const uint32_t *ids;
  uint32_t n;
  float *const *row; /* by node: its row of the table's gradient */
  int64_t parts;
} lookup_job;

static void lookup_task(void *arg, int64_t task, int tid) {
  (void)tid;
  const lookup_job *j = arg;
  for (uint32_t i = 0; i < j->n; i++) {
    int64_t c = node(j->b, j->ids[i])->cols, c0 = c * task / j->parts, c1 = c * (task + 1) / j->parts;
    float *restrict d = j->row[i];
    const float *restrict y = j->b->grad[j->ids[i]];
    for (int64_t k = c0; k < c1; k++) d[k] += y[k];
  }
}

/* scatter-add into the looked-up rows of the table */
static sheaf_status bw_LOOKUP(sh_bw *b, const uint32_t *ids, uint32_t n) {
  if (n > 1 && b->threads > 1 && (size_t)n * (size_t)node(b, ids[0])->cols >= SH_BW_PAR_MIN) {
    float **row = sh_bw_alloc(b, (size_t)n * sizeof *row);
    if (!row) return SHEAF_ERR_NOMEM;
    for (uint32_t i = 0; i < n; i++) { /* the rows marked first (on the caller) */
      const sh_node *nd = node(b, ids[i]);
      float *pg = sh_bw_param_grad_row(b, nd->param.id, nd->param.row);
      if (!pg) return SHEAF_ERR_NOMEM;
      row[i] = pg + (size_t)nd->param.row * (size_t)nd->cols;
    }
    lookup_job j = {b, ids, n, row, b->threads};
    sh_pool_run(b->ctx->pool, j.parts, lookup_task, &j, b->threads);
    return SHEAF_OK;
  }
  for (uint32_t i = 0; i < n; i++) {
    const sh_node *nd = node(b, ids[i]);
    float *pg = sh_bw_param_grad_row(b, nd->param.id, nd->param.row);
    if (!pg) return SHEAF_ERR_NOMEM;
    pg += (size_t)nd->param.row * (size_t)nd->cols;
    const float *dy = b->grad[ids[i]];
    for (int32_t j = 0; j < nd->cols; j++) pg[j] += dy[j];
  }
  return SHEAF_OK;
}

/* A bucket of concats split over the pool by the columns of each input:
 * task t of T adds columns [w*t/T, w*(t+1)/T) of every piece of width w,
 * nodes and pieces in order, so a gradient element is always written by
 * the same task, its adds in the serial order (the same bits on any
 * thread count), even when one input feeds several pieces. A gradient the
 * bucket creates is written by its first piece (a copy: 0 + s is s, no
 * zeroing first) and added to by the later ones, on every path. */
typedef struct concat_job {
  const sh_bw *b;
  const uint32_t *ids;
  uint32_t n;
  float *const *dx; /* by (node, piece) in order: the input's gradient or NULL */
  const uint8_t *set; /* by (node, piece): 1 where the gradient is new (written, not added to) */
  int64_t parts;
} concat_job;

static void concat_task(void *arg, int64_t task, int tid) {
  (void)tid;
  const concat_job *j = arg;
  size_t q = 0;
  for (uint32_t i = 0; i < j->n; i++) {
    const sh_node *nd = node(j->b, j->ids[i]);
    const float *dy = j->b->grad[j->ids[i]];
    int32_t off = 0;
    for (uint32_t k = 0; k < nd->n_in; k++, q++) {
      int32_t w = node(j->b, sh_bw_in(j->b, j->ids[i], (int)k))->cols;
      float *dx = j->dx[q];
      int64_t c0 = (int64_t)w * task / j->parts, c1 = (int64_t)w * (task + 1) / j->parts;
      if (dx)
        for (int32_t r = 0; r < nd->rows; r++) {
          float *restrict d = dx + (size_t)r * w;
          const float *restrict y = dy + (size_t)r * nd->cols + off;
          if (j->set[q]) memcpy(d + c0, y + c0, (size_t)(c1 - c0) * sizeof(float));
          else
            for (int64_t c = c0; c < c1; c++) d[c] += y[c];
        }
      off += w;
    }
  }
}

static sheaf_status bw_CONCAT(sh_bw *b, const uint32_t *ids, uint32_t n) {
  size_t pieces = 0, total = 0;
  for (uint32_t i = 0; i < n; i++) {
    pieces += node(b, ids[i])->n_in;
    total += numel(node(b, ids[i]));
  }
  if (n > 1 && b->threads > 1 && total >= SH_BW_PAR_MIN) {
    float **dx = sh_bw_alloc(b, pieces * sizeof *dx);
    uint8_t *set = sh_bw_alloc(b, pieces);
    if (!dx || !set) return SHEAF_ERR_NOMEM;
    size_t q = 0;
    for (uint32_t i = 0; i < n; i++) /* the gradients first (the arena is the caller's) */
      for (uint32_t k = 0; k < node(b, ids[i])->n_in; k++, q++) {
        uint32_t x = sh_bw_in(b, ids[i], (int)k);
        bool fresh = false;
        dx[q] = NULL;
        if (NEED(b, x) && !(dx[q] = sh_bw_grad_fresh(b, x, &fresh))) return SHEAF_ERR_NOMEM;
        set[q] = fresh; /* the first piece into it writes (0 + s is s), the later ones add */
      }
    concat_job j = {b, ids, n, dx, set, b->threads};
    sh_pool_run(b->ctx->pool, j.parts, concat_task, &j, b->threads);
    return SHEAF_OK;
  }
  for (uint32_t i = 0; i < n; i++) {
    const sh_node *nd = node(b, ids[i]);
    const float *dy = b->grad[ids[i]];
    int32_t off = 0;
    for (uint32_t k = 0; k < nd->n_in; k++) {
      uint32_t x = sh_bw_in(b, ids[i], (int)k);
      int32_t w = node(b, x)->cols;
      if (NEED(b, x)) {
        bool fresh;
        float *dx = sh_bw_grad_fresh(b, x, &fresh);
        if (!dx) return SHEAF_ERR_NOMEM;
        for (int32_t r = 0; r < nd->rows; r++) {
          float *restrict d = dx + (size_t)r * w;
          const float *restrict y = dy + (size_t)r * nd->cols + off;
          if (fresh) memcpy(d, y, (size_t)w * sizeof(float)); /* a new gradient: 0 + s is s */
          else
            for (int32_t j = 0; j < w; j++) d[j] += y[j];
        }
      }
      off += w;
    }
  }
  return SHEAF_OK;
}

static sheaf_status bw_SLICE(sh_bw *b, const uint32_t *ids, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    const sh_node *nd = node(b, ids[i]);
    uint32_t x = sh_bw_in(b, ids[i], 0);
    if (!NEED(b, x)) continue;
    float *dx = sh_bw_grad(b, x);
    if (!dx) return SHEAF_ERR_NOMEM;
    const float *dy = b->grad[ids[i]];
    int32_t w = node(b, x)->cols;
    for (int32_t r = 0; r < nd->rows; r++)
      for (int32_t j = 0; j < nd->cols; j++) dx[(size_t)r * w + nd->offset + j] += dy[(size_t)r * nd->cols + j];
  }
  return SHEAF_OK;
}

/* act(columns [c0, c1) of an affine), run in the GEMM's epilogue */
static sheaf_status bw_ALIAS(sh_bw *b, const uint32_t *ids, uint32_t n) {
  sheaf_graph *g = b->g;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t id = ids[i], src = sh_bw_in(b, id, 0);
    const sh_fuse *f = NULL;
    for (uint32_t r = sh_affine_of(g, src)->act; r != SH_NONE; r = g->affine.range[r].next)
      if (g->affine.range[r].alias == id) f = &g->affine.range[r];
    if (!f) return sh_fail(b->ctx, SHEAF_ERR_INTERNAL, "sheaf_backward: alias %u has no range", id);
    int act = f->act;
    int32_t c0 = f->c0;
    const float *y = sh_bw_val(b, id);
    if (!y) return BW_FAIL(b);
    const float *z = NULL; /* GELU: the raw value */
    if (act == SH_GEMM_ACT_GELU_ERF || act == SH_GEMM_ACT_GELU_TANH) {
      if (!(z = sh_bw_val(b, src))) return BW_FAIL(b);
    }
    float *dx = sh_bw_grad(b, src);
    if (!dx) return SHEAF_ERR_NOMEM;
    const sh_node *nd = node(b, id);
    int32_t w = node(b, src)->cols, cols = nd->cols;
    const float *dy = b->grad[id];
    for (int32_t r = 0; r < nd->rows; r++) {
      const float *yr = y + (size_t)r * cols, *dr = dy + (size_t)r * cols;
      float *d = dx + (size_t)r * w + c0;
      switch (act) {
      case SH_GEMM_ACT_RELU:
        for (int32_t j = 0; j < cols; j++) d[j] += yr[j] > 0.0f ? dr[j] : 0.0f;
        break;
      case SH_GEMM_ACT_SIGMOID:
        for (int32_t j = 0; j < cols; j++) d[j] += dr[j] * yr[j] * (1.0f - yr[j]);
        break;
      case SH_GEMM_ACT_TANH:
        for (int32_t j = 0; j < cols; j++) d[j] += dr[j] * (1.0f - yr[j] * yr[j]);
        break;
      case SH_GEMM_ACT_GELU_ERF:
        for (int32_t j = 0; j < cols; j++) {
          double x = z[(size_t)r * w + c0 + j];
          d[j] += dr[j] * (float)(0.5 * (1.0 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2.0 * M_PI));
        }
        break;
      default: /* GELU, tanh form */
        for (int32_t j = 0; j < cols; j++) {
          double x = z[(size_t)r * w + c0 + j], k = sqrt(2.0 / M_PI), u = k * (x + 0.044715 * x * x * x);
          double t = tanh(u);
          d[j] += dr[j] * (float)(0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x));
        }
        break;
      }
    }
  }
  return SHEAF_OK;
}

/* the cell state of an LSTM or tree-LSTM node: its gradient is read by
 * the cell's rule */
static sheaf_status bw_LSTM_C(sh_bw *b, const uint32_t *ids, uint32_t n) {
  (void)b, (void)ids, (void)n;
  return SHEAF_OK;
}

static sheaf_status bw_RESHAPE(sh_bw *b, const uint32_t *ids, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    uint32_t x = sh_bw_in(b, ids[i], 0);
    if (!NEED(b, x)) continue;
    float *dx = sh_bw_grad(b, x);
    if (!dx) return SHEAF_ERR_NOMEM;
    const float *dy = b->grad[ids[i]];
    for (size_t j = 0, k = numel(node(b, ids[i])); j < k; j++) dx[j] += dy[j];
  }
  return SHEAF_OK;
}

/* ------------------------------------------------------------------ GEMMs */

static sheaf_status bw_AFFINE(sh_bw *b, const uint32_t *ids, uint32_t n) { return sh_bw_affine(b, ids, n); }
static sheaf_status bw_LSTM(sh_bw *b, const uint32_t *ids, uint32_t n) { return sh_bw_lstm(b, ids, n); }
static sheaf_status bw_TREE_LSTM(sh_bw *b, const uint32_t *ids, uint32_t n) { return sh_bw_tree_lstm(b, ids, n); }
static sheaf_status bw_MATMUL(sh_bw *b, const uint32_t *ids, uint32_t n) { return sh_bw_matmul(b, ids, n); }

/* ------------------------------------------------------------ elementwise */

/* Element (r, c) of an operand of shape (ri, ci) broadcast to the node's
 * shape: equal shapes, a scalar, or one row repeated. */
static inline size_t bidx(const sh_node *x, int32_t r, int32_t c) {
  return (size_t)(x->rows == 1 ? 0 : r) * (size_t)x->cols + (size_t)(x->cols == 1 ? 0 : c);
}

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

/* d out / d in_k at one element, for the ops of one to three inputs. */
static void ew_partials(int op, const double *v, double y, double s, double *d) {
  double a = v[0], bb = v[1];
  d[0] = d[1] = d[2] = 0.0;
  switch (op) {
  case SH_OP_ADD: d[0] = 1, d[1] = 1; break;
  case SH_OP_SUB: d[0] = 1, d[1] = -1; break;
  case SH_OP_MUL: d[0] = bb, d[1] = a; break;
  case SH_OP_DIV: d[0] = 1 / bb, d[1] = -a / (bb * bb); break;
  case SH_OP_POW:
    d[0] = bb == 0 ? 0 : bb * pow(a, bb - 1);
    d[1] = a > 0 ? y * log(a) : 0;
    break;
  case SH_OP_MINIMUM: d[0] = a < bb ? 1 : a == bb ? 0.5 : 0, d[1] = 1 - d[0]; break;
  case SH_OP_MAXIMUM: d[0] = a > bb ? 1 : a == bb ? 0.5 : 0, d[1] = 1 - d[0]; break;
  case SH_OP_WHERE: d[1] = a != 0, d[2] = a == 0; break; /* inputs c, a, b */
  case SH_OP_SCALE: d[0] = s; break;
  case SH_OP_TANH: d[0] = 1 - y * y; break;
  case SH_OP_SIGMOID: d[0] = y * (1 - y); break;
  case SH_OP_RELU: d[0] = a > 0; break;
  case SH_OP_GELU: d[0] = 0.5 * (1 + erf(a / sqrt(2.0))) + a * exp(-0.5 * a * a) / sqrt(2 * M_PI); break;
  case SH_OP_EXP: d[0] = y; break;
  case SH_OP_LN: d[0] = 1 / a; break;
  case SH_OP_SQRT: d[0] = 0.5 / y; break;
  case SH_OP_RSQRT: d[0] = -0.5 * y / a; break;
  case SH_OP_ABS: d[0] = a > 0 ? 1 : a < 0 ? -1 : 0; break;
  case SH_OP_SOFTPLUS: d[0] = a > 20 ? 1 : sigm(a); break;
  case SH_OP_ERF: d[0] = 2 / sqrt(M_PI) * exp(-a * a); break;
  case SH_OP_SILU: {
    double sg = sigm(a);
    d[0] = sg + a * sg * (1 - sg);
    break;
  }
  default: break; /* comparisons: none */
  }
}

/* The common ops on operands of the node's own shape, in float: no
 * broadcast, no per-element switch, and tanh and sigmoid from their input
 * when the flush did not store their value (fused into their reader). */
static sheaf_status ew_fast(sh_bw *b, uint32_t id, bool *done) {
  const sh_node *nd = node(b, id);
  int op = nd->op;
  *done = false;
  if (op != SH_OP_ADD && op != SH_OP_SUB && op != SH_OP_MUL && op != SH_OP_TANH && op != SH_OP_SIGMOID &&
      op != SH_OP_SCALE)
    return SHEAF_OK;
  uint32_t x[2] = {sh_bw_in(b, id, 0), nd->n_in > 1 ? sh_bw_in(b, id, 1) : SH_NONE};
  for (int k = 0; k < nd->n_in; k++)
    if (node(b, x[k])->rows != nd->rows || node(b, x[k])->cols != nd->cols) return SHEAF_OK;
  *done = true;
  size_t e = numel(nd);
  const float *dy = b->grad[id];
  /* An input's gradient that does not exist yet is written, not added to
   * (no memset, no read): d0 is done before d1 is asked for, so x · x
   * adds its second term to the first. */
  bool f0 = false, f1 = false;
  float *d0 = NEED(b, x[0]) ? sh_bw_grad_fresh(b, x[0], &f0) : NULL, *d1 = NULL;
  if (NEED(b, x[0]) && !d0) return SHEAF_ERR_NOMEM;
  switch (op) {
  case SH_OP_ADD:
  case SH_OP_SUB: {
    float s1 = op == SH_OP_ADD ? 1.0f : -1.0f;
    if (f0) memcpy(d0, dy, e * sizeof(float));
    else
      for (size_t j = 0; d0 && j < e; j++) d0[j] += dy[j];
    if (NEED(b, x[1]) && !(d1 = sh_bw_grad_fresh(b, x[1], &f1))) return SHEAF_ERR_NOMEM;
    if (f1)
      for (size_t j = 0; j < e; j++) d1[j] = s1 * dy[j];
    else
      for (size_t j = 0; d1 && j < e; j++) d1[j] += s1 * dy[j];
    return SHEAF_OK;
  }
  case SH_OP_SCALE:
    if (f0)
      for (size_t j = 0; j < e; j++) d0[j] = nd->scale * dy[j];
    else
      for (size_t j = 0; d0 && j < e; j++) d0[j] += nd->scale * dy[j];
    return SHEAF_OK;
  case SH_OP_MUL: {
    bool n1 = NEED(b, x[1]);
    const float *a = n1 ? sh_bw_val(b, x[0]) : NULL, *c = d0 ? sh_bw_val(b, x[1]) : NULL;
    if ((n1 && !a) || (d0 && !c)) return BW_FAIL(b);
    if (f0)
      for (size_t j = 0; j < e; j++) d0[j] = dy[j] * c[j];
    else
      for (size_t j = 0; d0 && j < e; j++) d0[j] += dy[j] * c[j];
    if (n1 && !(d1 = sh_bw_grad_fresh(b, x[1], &f1))) return SHEAF_ERR_NOMEM;
    if (f1)
      for (size_t j = 0; j < e; j++) d1[j] = dy[j] * a[j];
    else
      for (size_t j = 0; d1 && j < e; j++) d1[j] += dy[j] * a[j];
    return SHEAF_OK;
  }
  default: break; /* tanh, sigmoid */
  }
  if (!d0) return SHEAF_OK;
  const float *y = NULL, *xv = NULL;
  if (sh_pw_absorbed(b->g, id) && !(nd->done && nd->val) && !b->vals[id]) {
    if (!(xv = sh_bw_val(b, x[0]))) return BW_FAIL(b);
  } else if (!(y = sh_bw_val(b, id))) {
    return BW_FAIL(b);
  }
  for (size_t j = 0; j < e; j++) {
    float v = y ? y[j] : op == SH_OP_TANH ? tanhf(xv[j]) : 1.0f / (1.0f + expf(-xv[j]));
    float t = dy[j] * (op == SH_OP_TANH ? 1.0f - v * v : v * (1.0f - v));
    d0[j] = f0 ? t : d0[j] + t;
  }
  return SHEAF_OK;
}

/* Ops whose derivative reads the node's own value. */
static bool ew_reads_y(int op) {
  return op == SH_OP_POW || op == SH_OP_TANH || op == SH_OP_SIGMOID || op == SH_OP_EXP || op == SH_OP_SQRT ||
         op == SH_OP_RSQRT;
}

static sheaf_status bw_ew(sh_bw *b, const uint32_t *ids, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    uint32_t id = ids[i];
    bool done;
    sheaf_status st = ew_fast(b, id, &done);
    if (st) return st;
    if (done) continue;
    const sh_node *nd = node(b, id);
    int op = nd->op, k_in = nd->n_in;
    const float *y = ew_reads_y(op) ? sh_bw_val(b, id) : NULL, *xv[3] = {NULL, NULL, NULL};
    if (ew_reads_y(op) && !y) return BW_FAIL(b);
    const sh_node *xn[3] = {NULL, NULL, NULL};
    float *dx[3] = {NULL, NULL, NULL};
    for (int k = 0; k < k_in; k++) {
      uint32_t x = sh_bw_in(b, id, k);
      xn[k] = node(b, x);
      if (!(xv[k] = sh_bw_val(b, x))) return BW_FAIL(b);
      if (NEED(b, x) && !(op == SH_OP_WHERE && k == 0) && !(dx[k] = sh_bw_grad(b, x))) return SHEAF_ERR_NOMEM;
    }
    const float *dy = b->grad[id];
    for (int32_t r = 0; r < nd->rows; r++)
      for (int32_t c = 0; c < nd->cols; c++) {
        size_t e = (size_t)r * nd->cols + c;
        double v[3] = {0, 0, 0}, d[3];
        for (int k = 0; k < k_in; k++) v[k] = xv[k][bidx(xn[k], r, c)];
        ew_partials(op, v, y ? y[e] : 0.0, nd->scale, d);
        for (int k = 0; k < k_in; k++)
          if (dx[k]) dx[k][bidx(xn[k], r, c)] += (float)(dy[e] * d[k]);
      }
  }
  return SHEAF_OK;
}

static sheaf_status bw_SUM_N(sh_bw *b, const uint32_t *ids, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    const sh_node *nd = node(b, ids[i]);
    const float *dy = b->grad[ids[i]];
    for (uint32_t k = 0; k < nd->n_in; k++) {
      uint32_t x = sh_bw_in(b, ids[i], (int)k);
      if (!NEED(b, x)) continue;
      float *dx = sh_bw_grad(b, x);
      if (!dx) return SHEAF_ERR_NOMEM;
      const sh_node *xn = node(b, x);
      for (int32_t r = 0; r < nd->rows; r++)
        for (int32_t c = 0; c < nd->cols; c++) dx[bidx(xn, r, c)] += dy[(size_t)r * nd->cols + c];
    }
  }
  return SHEAF_OK;
}

#define BW_EW(ID) \
  static sheaf_status bw_##ID(sh_bw *b, const uint32_t *ids, uint32_t n) { return bw_ew(b, ids, n); }
BW_EW(ADD) BW_EW(SUB) BW_EW(MUL) BW_EW(DIV) BW_EW(POW) BW_EW(MINIMUM) BW_EW(MAXIMUM)
BW_EW(WHERE) BW_EW(SCALE) BW_EW(TANH) BW_EW(SIGMOID) BW_EW(RELU) BW_EW(GELU) BW_EW(EXP)
BW_EW(LN) BW_EW(SQRT) BW_EW(RSQRT) BW_EW(ABS) BW_EW(SOFTPLUS) BW_EW(ERF) BW_EW(SILU)
/* piecewise constant: no gradient (sheaf_backward never reaches them: op_blocks) */
BW_EW(GT) BW_EW(GE) BW_EW(EQ) BW_EW(NE)
#undef BW_EW

/* ------------------------------------------------------------ row kernels */

/* The rows of a reduction's input: x [r, w] (rank 1: one row) -> [r]. */
static sheaf_status bw_reduce(sh_bw *b, const uint32_t *ids, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    uint32_t id = ids[i], x = sh_bw_in(b, id, 0);
    if (!NEED(b, x)) continue;
    const sh_node *nd = node(b, id), *xn = node(b, x);
    const float *xv = NULL;
    if (nd->op == SH_OP_MAX && !(xv = sh_bw_val(b, x))) return BW_FAIL(b);
    float *dx = sh_bw_grad(b, x);
    if (!dx) return SHEAF_ERR_NOMEM;
    const float *dy = b->grad[id];
    int32_t w = xn->cols;
    for (int32_t r = 0; r < xn->rows; r++) {
      float *d = dx + (size_t)r * w;
      switch (nd->op) {
      case SH_OP_SUM:
        for (int32_t j = 0; j < w; j++) d[j] += dy[r];
        break;
      case SH_OP_MEAN:
        for (int32_t j = 0; j < w; j++) d[j] += dy[r] / (float)w;
        break;
      case SH_OP_MAX: { /* the first maximum */
        const float *v = xv + (size_t)r * w;
        int32_t best = 0;
        for (int32_t j = 1; j < w; j++)
          if (v[j] > v[best]) best = j;
        d[best] += dy[r];
        break;
      }
      default: /* PICK */
        d[nd->index] += dy[r];
        break;
      }
    }
  }
  return SHEAF_OK;
}
static sheaf_status bw_SUM(sh_bw *b, const uint32_t *ids, uint32_t n) { return bw_reduce(b, ids, n); }
static sheaf_status bw_MEAN(sh_bw *b, const uint32_t *ids, uint32_t n) { return bw_reduce(b, ids, n); }
static sheaf_status bw_MAX(sh_bw *b, const uint32_t *ids, uint32_t n) { return bw_reduce(b, ids, n); }
static sheaf_status bw_PICK(sh_bw *b, const uint32_t *ids, uint32_t n) { return bw_reduce(b, ids, n); }

/* softmax: dx = y (dy - Σ dy y); log_softmax: dx = dy - exp(y) Σ dy */
static sheaf_status bw_softmax(sh_bw *b, const uint32_t *ids, uint32_t n, bool log_form) {
  for (uint32_t i = 0; i < n; i++) {
    uint32_t id = ids[i], x = sh_bw_in(b, id, 0);
    if (!NEED(b, x)) continue;
    const sh_node *nd = node(b, id);
    const float *y = sh_bw_val(b, id);
    if (!y) return BW_FAIL(b);
    float *dx = sh_bw_grad(b, x);
    if (!dx) return SHEAF_ERR_NOMEM;
    const float *dy = b->grad[id];
    int32_t w = nd->cols;
    for (int32_t r = 0; r < nd->rows; r++) {
      const float *yr = y + (size_t)r * w, *dr = dy + (size_t)r * w;
      float *d = dx + (size_t)r * w;
      double s = 0;
      for (int32_t j = 0; j < w; j++) s += log_form ? dr[j] : (double)dr[j] * yr[j];
      for (int32_t j = 0; j < w; j++)
        d[j] += log_form ? (float)(dr[j] - exp((double)yr[j]) * s) : (float)(yr[j] * (dr[j] - s));
    }
  }
  return SHEAF_OK;
}
static sheaf_status bw_SOFTMAX(sh_bw *b, const uint32_t *ids, uint32_t n) { return bw_softmax(b, ids, n, false); }
static sheaf_status bw_LOG_SOFTMAX(sh_bw *b, const uint32_t *ids, uint32_t n) { return bw_softmax(b, ids, n, true); }

/* y = xhat·gamma + beta, xhat = (x - mean)·rstd per row */
static sheaf_status bw_LAYER_NORM(sh_bw *b, const uint32_t *ids, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    uint32_t id = ids[i], x = sh_bw_in(b, id, 0), gm = sh_bw_in(b, id, 1), bt = sh_bw_in(b, id, 2);
    const sh_node *nd = node(b, id);
    const float *xv = sh_bw_val(b, x), *gv = xv ? sh_bw_val(b, gm) : NULL;
    if (!gv) return BW_FAIL(b);
    float *dx = NEED(b, x) ? sh_bw_grad(b, x) : NULL, *dg = NEED(b, gm) ? sh_bw_grad(b, gm) : NULL;
    float *db = NEED(b, bt) ? sh_bw_grad(b, bt) : NULL;
    if ((NEED(b, x) && !dx) || (NEED(b, gm) && !dg) || (NEED(b, bt) && !db)) return SHEAF_ERR_NOMEM;
    const float *dy = b->grad[id];
    int32_t w = nd->cols;
    for (int32_t r = 0; r < nd->rows; r++) {
      const float *xr = xv + (size_t)r * w, *dr = dy + (size_t)r * w;
      double mu = 0, var = 0;
      for (int32_t j = 0; j < w; j++) mu += xr[j];
      mu /= w;
      for (int32_t j = 0; j < w; j++) var += (xr[j] - mu) * (xr[j] - mu);
      var /= w;
      double rstd = 1.0 / sqrt(var + (double)nd->eps), m1 = 0, m2 = 0;
      for (int32_t j = 0; j < w; j++) {
        double xh = (xr[j] - mu) * rstd, g = dr[j] * (double)gv[j];
        m1 += g;
        m2 += g * xh;
        if (dg) dg[j] += (float)(dr[j] * xh);
        if (db) db[j] += dr[j];
      }
      m1 /= w;
      m2 /= w;
      for (int32_t j = 0; dx && j < w; j++) {
        double xh = (xr[j] - mu) * rstd;
        dx[(size_t)r * w + j] += (float)(rstd * (dr[j] * (double)gv[j] - m1 - xh * m2));
      }
    }
  }
  return SHEAF_OK;
}

static sheaf_status bw_STACK(sh_bw *b, const uint32_t *ids, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    const sh_node *nd = node(b, ids[i]);
    const float *dy = b->grad[ids[i]];
    for (uint32_t k = 0; k < nd->n_in; k++) {
      uint32_t x = sh_bw_in(b, ids[i], (int)k);
      if (!NEED(b, x)) continue;
      float *dx = sh_bw_grad(b, x);
      if (!dx) return SHEAF_ERR_NOMEM;
      for (int32_t j = 0; j < nd->cols; j++) dx[j] += dy[(size_t)k * nd->cols + j];
    }
  }
  return SHEAF_OK;
}

static sheaf_status bw_TRANSPOSE(sh_bw *b, const uint32_t *ids, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    uint32_t x = sh_bw_in(b, ids[i], 0);
    if (!NEED(b, x)) continue;
    const sh_node *nd = node(b, ids[i]);
    float *dx = sh_bw_grad(b, x);
    if (!dx) return SHEAF_ERR_NOMEM;
    const float *dy = b->grad[ids[i]];
    for (int32_t r = 0; r < nd->rows; r++)
      for (int32_t c = 0; c < nd->cols; c++) dx[(size_t)c * nd->rows + r] += dy[(size_t)r * nd->cols + c];
  }
  return SHEAF_OK;
}

static sheaf_status bw_ROW(sh_bw *b, const uint32_t *ids, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    uint32_t x = sh_bw_in(b, ids[i], 0);
    if (!NEED(b, x)) continue;
    const sh_node *nd = node(b, ids[i]);
    float *dx = sh_bw_grad(b, x);
    if (!dx) return SHEAF_ERR_NOMEM;
    const float *dy = b->grad[ids[i]];
    for (int32_t j = 0; j < nd->cols; j++) dx[(size_t)nd->index * nd->cols + j] += dy[j];
  }
  return SHEAF_OK;
}

static sheaf_status bw_KCALL(sh_bw *b, const uint32_t *ids, uint32_t n) {
  (void)n;
  return sh_fail(b->ctx, SHEAF_ERR_UNSUPPORTED,
                 "sheaf_backward: node %u calls a generated kernel, which has no derivative yet", ids[0]);
}

static sheaf_status bw_FUSED(sh_bw *b, const uint32_t *ids, uint32_t n) {
  (void)n;
  return sh_fail(b->ctx, SHEAF_ERR_INTERNAL, "sheaf_backward: node %u has the program op", ids[0]);
}

/* --------------------------------------------------------------- the table */

const sh_bw_rule sh_bw_rules[SH_OP_COUNT] = {
#define SH_OP(ID, name, cls, arity, form, act) [SH_OP_##ID] = bw_##ID,
#include "kernels/ops.def"
};
