/*
 * grad_gemm.c — the backward of the GEMM ops, a bucket at a time: an
 * affine bucket (same W, b, inputs) runs dX_k = dY·W_k^T as one GEMM over
 * every row of every node, and dW_k += X_k^T·dY as ONE GEMM for all the
 * bucket's rows and all its weights (A = [X_1 | .. | X_n]^T gathered once,
 * C the weights' gradient rows); an LSTM bucket reads the gates its
 * forward kept (sh_saved; recomputed with one GEMM when it kept none),
 * turns dh and dc into the gates' gradient, then does the same.
 * matmul (activations times activations) runs node by node. The dW GEMMs
 * and the bias sums are recorded and run at the end of the pass
 * (sh_bw_dw_flush: one job per set of weights and per bias, side by side
 * on the pool when balanced); a rule run in a lane (lanes.c) records its
 * rows for the caller to append.
 */
#include <math.h>
#include <string.h>

#include "base/pool.h"
#include "kernels/vmath.h"
#include "train/train.h"

/* Columns [off, off + w) of X = [X_1 | .. | X_nx] over a bucket's rows:
 * row pointers (values of the graph or of the pass, which stay until its
 * end). An input that is a concat without a value gives one piece per
 * operand, gathered from them (never materialized for dW). */
typedef struct bw_piece {
  int64_t off, w;
  const float *const *xr;
} bw_piece;

/* One GEMM bucket's rows of a deferred weight gradient: X's pieces and
 * dY's row pointers (gradients of the pass: they stay). */
struct sh_bw_seg {
  int64_t m;
  int np;
  const bw_piece *p;
  const float *const *dyr;
  sh_bw_seg *next;
};

/* Whether input k of the bucket's nodes is read piece by piece: every
 * node's is a concat without a value, of the same operand widths. */
static int concat_pieces(const sh_bw *b, const uint32_t *ids, uint32_t n, int k) {
  const sh_node *nodes = b->g->store.nodes;
  const sh_node *x0 = &nodes[sh_bw_in(b, ids[0], k)];
  if (x0->op != SH_OP_CONCAT || x0->val || x0->n_in < 2 || x0->n_in > 16) return 0;
  for (uint32_t i = 0; i < n; i++) {
    const sh_node *x = &nodes[sh_bw_in(b, ids[i], k)];
    if (x->op != SH_OP_CONCAT || x->val || x->n_in != x0->n_in) return 0;
    for (uint32_t q = 0; q < x->n_in; q++) { /* operands side by side, of the same widths */
      const sh_node *p = &nodes[b->g->store.ins[x->in + q]];
      if (p->rows != x->rows || p->cols != nodes[b->g->store.ins[x0->in + q]].cols) return 0;
    }
  }
  return (int)x0->n_in;
}

/* Below this many floats touched, a helper loop runs on the caller: a pool
 * dispatch costs more than it saves. */
#define BW_PAR_MIN SH_BW_PAR_MIN

/* Columns [j0, j1) of a column-split job (bias sums, dX adds, transposes):
 * each task owns whole columns and walks the rows in order, so the sums are
 * the same on any thread count. */
static void col_range(int64_t task, int64_t cols, int64_t total, int64_t *j0, int64_t *j1) {
  *j0 = task * cols;
  *j1 = *j0 + cols < total ? *j0 + cols : total;
}

/* db[j] += sum over rows of dy[r][j], rows in order. */
typedef struct bias_job {
  float *db;
  const float *const *dyr;
  int64_t m, out, cols;
} bias_job;

static void bias_task(void *arg, int64_t task, int tid) {
  (void)tid;
  const bias_job *j = arg;
  int64_t j0, j1;
  col_range(task, j->cols, j->out, &j0, &j1);
  float *restrict db = j->db;
  for (int64_t r = 0; r < j->m; r++) {
    const float *restrict y = j->dyr[r];
    for (int64_t c = j0; c < j1; c++) db[c] += y[c];
  }
}

/* gx_i += dx rows of node i, nodes in bucket order (two nodes of one input
 * add in that order, whatever the threads). */
typedef struct dxadd_job {
  float *const *gx;     /* by node: its input's gradient (NULL: none wanted) */
  const int64_t *rows;  /* by node */
  uint32_t n;
  const float *dx;
  int64_t in, cols;
} dxadd_job;

static void dxadd_task(void *arg, int64_t task, int tid) {
  (void)tid;
  const dxadd_job *j = arg;
  int64_t j0, j1, r0 = 0;
  col_range(task, j->cols, j->in, &j0, &j1);
  for (uint32_t i = 0; i < j->n; i++) {
    if (j->gx[i])
      for (int64_t r = 0; r < j->rows[i]; r++) {
        float *restrict d = j->gx[i] + r * j->in;
        const float *restrict s = j->dx + (r0 + r) * j->in;
        for (int64_t c = j0; c < j1; c++) d[c] += s[c];
      }
    r0 += j->rows[i];
  }
}

/* Runs a column-split job: on the pool when it is large enough to pay. */
static void col_run(sh_bw *b, int64_t total, int64_t cols, int64_t work, sh_task_fn fn, void *arg) {
  int64_t tasks = (total + cols - 1) / cols;
  if (b->threads > 1 && tasks > 1 && work >= BW_PAR_MIN) {
    sh_pool_run(b->ctx->pool, tasks, fn, arg, b->threads);
  } else {
    for (int64_t t = 0; t < tasks; t++) fn(arg, t, 0);
  }
}

#define BW_FAIL(b) ((b)->g->status ? (b)->g->status : sheaf_ctx_last_status((b)->ctx))

sheaf_status sh_bw_packed_wt(sh_bw *b, uint32_t pid, const sh_gemm_packed_b **out) {
  sheaf_model *m = b->g->model;
  if (!b->wt) {
    b->n_wt = m->n_params;
    b->wt = sh_bw_alloc(b, (size_t)b->n_wt * sizeof *b->wt);
    if (!b->wt) return SHEAF_ERR_NOMEM;
    memset(b->wt, 0, (size_t)b->n_wt * sizeof *b->wt);
  }
  if (!b->wt[pid - 1]) { /* the model's, shared by the graphs of data-parallel shards */
    sheaf_status st = sh_model_packed_t(m, pid, &b->wt[pid - 1]);
    if (st) return st;
  }
  *out = b->wt[pid - 1];
  return SHEAF_OK;
}

static sheaf_status gemm(sh_bw *b, const sh_gemm_args *a) {
  return sh_gemm(b->ctx, b->g->isa, b->threads, a);
}

/* dX and dW of a linear map over a bucket: nodes ids[0..n), each of rows
 * rows[i] (summing to m), dY given by row pointers dyr[m] of `out`
 * columns, nx inputs (input k of node i is its input k) through weights
 * wid[k] ([in_k, out]), bias `bias` (0: none). */
sheaf_status sh_bw_lin_grads(sh_bw *b, const uint32_t *ids, uint32_t n, int64_t m, int nx,
                             const uint32_t *wid, uint32_t bias, int64_t out,
                             const float *const *dyr) {
  sheaf_graph *g = b->g;
  sheaf_model *md = g->model;
  int64_t sum_in = 0, in[SH_GEMM_MAX_KSRC];
  for (int k = 0; k < nx; k++) {
    in[k] = md->params[wid[k] - 1].shape[0];
    sum_in += in[k];
  }
  sh_gemm_ws *ws = b->ws;
  /* dX_k = dY · W_k^T, into a block, then added to each input's gradient */
  for (int k = 0; k < nx; k++) {
    bool any = false;
    for (uint32_t i = 0; i < n && !any; i++) any = b->req[sh_bw_in(b, ids[i], k)];
    if (!any) continue;
    float *dx = sh_bw_alloc(b, (size_t)m * (size_t)in[k] * sizeof(float));
    if (!dx) return SHEAF_ERR_NOMEM;
    const sh_gemm_packed_b *wt;
    sheaf_status st = sh_bw_packed_wt(b, wid[k], &wt);
    if (st) return st;
    sh_gemm_args a = {0};
    a.m = m;
    a.n_src = 1;
    a.src[0] = (sh_gemm_src){out, {dyr, NULL, 0}};
    a.b_packed = wt; /* W_k^T, the model's (packed once per version) */
    a.c = (sh_gemm_out){NULL, dx, in[k]};
    a.ws = ws;
    if ((st = gemm(b, &a))) return st;
    float **gx = sh_bw_alloc(b, (size_t)n * sizeof *gx);
    int64_t *rows = sh_bw_alloc(b, (size_t)n * sizeof *rows);
    if (!gx || !rows) return SHEAF_ERR_NOMEM;
    int64_t r0 = 0;
    for (uint32_t i = 0; i < n; i++) {
      uint32_t x = sh_bw_in(b, ids[i], k);
      rows[i] = g->store.nodes[ids[i]].rows;
      gx[i] = NULL;
      if (b->req[x]) {
        /* an input with no gradient yet takes its rows of the block as it
         * (0 + s is s: the same bits as adding into zeros, no memset, no
         * add); a later reader adds into them */
        if (!b->grad[x]) b->grad[x] = dx + r0 * in[k];
        else gx[i] = b->grad[x];
      }
      r0 += rows[i];
    }
    dxadd_job aj = {gx, rows, n, dx, in[k], 32};
    col_run(b, in[k], aj.cols, m * in[k], dxadd_task, &aj);
  }
  /* dW = [X_1 | .. | X_nx]^T · dY: the bucket's X rows (row pointers
   * into values that stay until the end of the pass) and dY rows
   * recorded; one GEMM per set of weights at the end of the pass
   * (sh_bw_dw_flush), and the bias's column sums there too */
  int npk[SH_GEMM_MAX_KSRC], np = 0;
  for (int k = 0; k < nx; k++) {
    npk[k] = concat_pieces(b, ids, n, k);
    np += npk[k] ? npk[k] : 1;
  }
  sh_bw_seg *sg = sh_bw_alloc(b, sizeof *sg);
  bw_piece *pc = sh_bw_alloc(b, (size_t)np * sizeof *pc);
  if (!sg || !pc) return SHEAF_ERR_NOMEM;
  *sg = (sh_bw_seg){m, np, pc, dyr, NULL};
  int64_t off = 0;
  for (int k = 0, q = 0; k < nx; k++) {
    for (int e = 0; e < (npk[k] ? npk[k] : 1); e++, q++) {
      const float **xr = sh_bw_alloc(b, (size_t)m * sizeof *xr);
      if (!xr) return SHEAF_ERR_NOMEM;
      int64_t r0 = 0, w = 0;
      for (uint32_t i = 0; i < n; i++) {
        int64_t rows = g->store.nodes[ids[i]].rows;
        uint32_t x = sh_bw_in(b, ids[i], k);
        if (npk[k]) x = g->store.ins[g->store.nodes[x].in + (uint32_t)e];
        w = g->store.nodes[x].cols;
        const float *xv = sh_bw_val(b, x);
        if (!xv) return BW_FAIL(b);
        for (int64_t r = 0; r < rows; r++) xr[r0 + r] = xv + r * w;
        r0 += rows;
      }
      pc[q] = (bw_piece){off, w, xr};
      off += w;
    }
  }
  sh_bw_seg *bsg = NULL;
  if (bias) {
    if (!(bsg = sh_bw_alloc(b, sizeof *bsg))) return SHEAF_ERR_NOMEM;
    *bsg = (sh_bw_seg){m, 0, NULL, dyr, NULL};
  }
  sh_bw_rec r = {true, {0}, nx, out, sum_in, bias, sg, bsg};
  memcpy(r.wid, wid, (size_t)nx * sizeof *wid);
  if (!b->rec) return sh_bw_rec_commit(b, &r);
  if (b->rec->used) /* a lane runs one linear map (lanes.c) */
    return sh_fail(b->ctx, SHEAF_ERR_INTERNAL, "sheaf_backward: internal error: two linear maps in one lane");
  *b->rec = r;
  return SHEAF_OK;
}

static void seg_append(sh_bw_seg **head, sh_bw_seg **tail, sh_bw_seg *sg) {
  if (*tail) (*tail)->next = sg;
  else *head = sg;
  *tail = sg;
}

/* An array of the pass's arena twice as large (16 entries at first) with
 * arr's n entries, *cap updated; NULL when out of memory (arr and *cap stay). */
static void *grow(sh_bw *b, const void *arr, uint32_t n, uint32_t *cap, size_t elem) {
  uint32_t c = *cap ? 2 * *cap : 16;
  void *p = sh_bw_alloc(b, (size_t)c * elem);
  if (!p) return NULL;
  if (n) memcpy(p, arr, (size_t)n * elem);
  *cap = c;
  return p;
}

sheaf_status sh_bw_rec_commit(sh_bw *b, const sh_bw_rec *r) {
  sh_bw_dw *d = NULL;
  for (uint32_t i = 0; i < b->n_dw && !d; i++) {
    sh_bw_dw *e = &b->dw[i];
    if (e->nx == r->nx && e->out == r->out && !memcmp(e->wid, r->wid, (size_t)r->nx * sizeof *r->wid)) d = e;
  }
  if (!d) {
    if (b->n_dw == b->cap_dw) {
      sh_bw_dw *nd = grow(b, b->dw, b->n_dw, &b->cap_dw, sizeof *nd);
      if (!nd) return SHEAF_ERR_NOMEM;
      b->dw = nd;
    }
    d = &b->dw[b->n_dw++];
    memset(d, 0, sizeof *d);
    memcpy(d->wid, r->wid, (size_t)r->nx * sizeof *r->wid);
    d->nx = r->nx;
    d->out = r->out;
    d->sum_in = r->sum_in;
  }
  r->seg->next = NULL;
  seg_append(&d->head, &d->tail, r->seg);
  d->m += r->seg->m;
  if (!r->bias) return SHEAF_OK;
  sh_bw_bias *e = NULL;
  for (uint32_t i = 0; i < b->n_bias && !e; i++)
    if (b->bias[i].pid == r->bias && b->bias[i].out == r->out) e = &b->bias[i];
  if (!e) {
    if (b->n_bias == b->cap_bias) {
      sh_bw_bias *nb = grow(b, b->bias, b->n_bias, &b->cap_bias, sizeof *nb);
      if (!nb) return SHEAF_ERR_NOMEM;
      b->bias = nb;
    }
    e = &b->bias[b->n_bias++];
    *e = (sh_bw_bias){r->bias, r->out, NULL, NULL};
  }
  r->bseg->next = NULL;
  seg_append(&e->head, &e->tail, r->bseg);
  return SHEAF_OK;
}

int sh_bw_weights(const sh_bw *b, uint32_t id, uint32_t *wid) {
  const sh_node *n0 = &b->g->store.nodes[id];
  if (n0->op != SH_OP_AFFINE) {
    wid[0] = n0->lin.w;
    return 1;
  }
  int nx = n0->n_in;
  if (nx == 1) wid[0] = n0->lin.w;
  else memcpy(wid, b->g->model->stacks[n0->lin.w - 1].ids, (size_t)nx * sizeof *wid);
  return nx;
}

sheaf_status sh_bw_lin_prefetch(sh_bw *b, const uint32_t *ids, uint32_t n, int nx, const uint32_t *wid) {
  const sheaf_graph *g = b->g;
  for (int k = 0; k < nx; k++) {
    bool any = false; /* sh_bw_lin_grads: dX_k only when some input k wants a gradient */
    for (uint32_t i = 0; i < n && !any; i++) any = b->req[sh_bw_in(b, ids[i], k)];
    const sh_gemm_packed_b *wt;
    sheaf_status st = any ? sh_bw_packed_wt(b, wid[k], &wt) : SHEAF_OK;
    if (st) return st;
    int np = concat_pieces(b, ids, n, k);
    for (uint32_t i = 0; i < n; i++) {
      uint32_t x = sh_bw_in(b, ids[i], k);
      for (int e = 0; e < (np ? np : 1); e++)
        if (!sh_bw_val(b, np ? g->store.ins[g->store.nodes[x].in + (uint32_t)e] : x)) return BW_FAIL(b);
    }
  }
  return SHEAF_OK;
}

/* Rows [c0, c1) of A = X^T from the segments' row pointers: row c of A is
 * column c of [X_1 | .. | X_nx], 16 x 16 tiles (a pure copy: any split). */
typedef struct tr_job {
  const sh_bw_dw *d;
  float *t;
  int64_t m, cols;
} tr_job;

static void tr_task(void *arg, int64_t task, int tid) {
  (void)tid;
  const tr_job *j = arg;
  int64_t c0, c1, r0 = 0;
  col_range(task, j->cols, j->d->sum_in, &c0, &c1);
  for (const sh_bw_seg *sg = j->d->head; sg; sg = sg->next) {
    for (int q = 0; q < sg->np; q++) {
      const bw_piece *p = &sg->p[q];
      int64_t a = c0 > p->off ? c0 : p->off, e = p->off + p->w;
      if (c1 < e) e = c1;
      for (int64_t rb = 0; rb < sg->m && a < e; rb += 16) {
        int64_t re = rb + 16 < sg->m ? rb + 16 : sg->m;
        const float *rp[16]; /* the tile's rows, from column a */
        for (int64_t r = rb; r < re; r++) rp[r - rb] = p->xr[r] + (a - p->off);
        for (int64_t c = 0; c < e - a; c++) {
          float *restrict dst = j->t + (a + c) * j->m + r0 + rb;
          for (int64_t r = 0; r < re - rb; r++) dst[r] = rp[r][c];
        }
      }
    }
    r0 += sg->m;
  }
}

/* One job of the end of the pass: a bias's sums (d NULL) or a set of
 * weights' dW GEMM (its transpose first). */
typedef struct dw_job {
  sh_bw *b;
  const sh_bw_bias *e;
  const sh_bw_dw *d;
  float *db, *t;
  float **crow;
  const float **dyr;
  int64_t m;
  double cost; /* multiply-adds (and adds) */
  sh_gemm_ws *ws;
  sheaf_status st;
} dw_job;

/* Runs a job on `threads` (1: whole on the calling thread; the same sums
 * in the same order either way: the splits are by columns, the GEMM's by
 * rows or columns of C, never K). */
static sheaf_status dw_run(dw_job *j, int threads) {
  sh_bw *b = j->b;
  if (!j->d) {
    bias_job bj = {j->db, j->dyr, j->m, j->e->out, threads > 1 ? 64 : j->e->out};
    if (threads > 1) col_run(b, j->e->out, bj.cols, j->m * j->e->out, bias_task, &bj);
    else bias_task(&bj, 0, 0);
    return SHEAF_OK;
  }
  const sh_bw_dw *d = j->d;
  tr_job tj = {d, j->t, j->m, threads > 1 ? 16 : d->sum_in};
  if (threads > 1) col_run(b, d->sum_in, tj.cols, j->m * d->sum_in, tr_task, &tj);
  else tr_task(&tj, 0, 0);
  sh_gemm_args a = {0};
  a.m = d->sum_in;
  a.n_src = 1;
  a.src[0] = (sh_gemm_src){j->m, {NULL, j->t, j->m}};
  a.b = (sh_gemm_in){j->dyr, NULL, 0};
  a.n = d->out;
  a.c = (sh_gemm_out){j->crow, NULL, 0};
  a.accumulate = true;
  a.ws = j->ws;
  return sh_gemm(b->ctx, b->g->isa, threads, &a);
}

static void dw_task(void *arg, int64_t task, int tid) {
  (void)tid;
  dw_job *const *order = arg;
  order[task]->st = dw_run(order[task], 1);
}

/* Whether the jobs may run side by side, one per task: two or more, the
 * largest at most 60% of the work (else one thread would carry it while
 * the other idles: the GEMMs split over the pool instead), enough work,
 * every parameter written by one job only, at most a workspace a GEMM. */
static bool dw_lanes(const sh_bw *b, dw_job *j, uint32_t nj) {
  if (b->threads < 2 || nj < 2) return false;
  double total = 0, big = 0;
  uint32_t gemms = 0;
  for (uint32_t q = 0; q < nj; q++) {
    total += j[q].cost;
    if (j[q].cost > big) big = j[q].cost;
    gemms += j[q].d != NULL;
  }
  if (gemms > SH_TRAIN_LANES || big > 0.6 * total || total < 1048576.0) return false;
  for (uint32_t q = 0; q < nj; q++) /* the parameters: disjoint */
    for (uint32_t r = 0; r < q; r++)
      for (int x = 0; x < (j[q].d ? j[q].d->nx : 1); x++)
        for (int y = 0; y < (j[r].d ? j[r].d->nx : 1); y++)
          if ((j[q].d ? j[q].d->wid[x] : j[q].e->pid) == (j[r].d ? j[r].d->wid[y] : j[r].e->pid)) return false;
  return true;
}

sheaf_status sh_bw_dw_flush(sh_bw *b) {
  sheaf_graph *g = b->g;
  sheaf_model *md = g->model;
  uint32_t nj = 0;
  dw_job *j = sh_bw_alloc(b, ((size_t)b->n_bias + b->n_dw + 1) * sizeof *j);
  dw_job **order = sh_bw_alloc(b, ((size_t)b->n_bias + b->n_dw + 1) * sizeof *order);
  if (!j || !order) return SHEAF_ERR_NOMEM;
  for (uint32_t q = 0; q < b->n_bias; q++) { /* db += every recorded row of dY, in order */
    const sh_bw_bias *e = &b->bias[q];
    int64_t m = 0;
    for (const sh_bw_seg *sg = e->head; sg; sg = sg->next) m += sg->m;
    float *db = sh_bw_param_grad(b, e->pid);
    const float **dyr = sh_bw_alloc(b, (size_t)(m ? m : 1) * sizeof *dyr);
    if (!db || !dyr) return SHEAF_ERR_NOMEM;
    int64_t r0 = 0;
    for (const sh_bw_seg *sg = e->head; sg; sg = sg->next) {
      memcpy(dyr + r0, sg->dyr, (size_t)sg->m * sizeof *dyr);
      r0 += sg->m;
    }
    j[nj++] = (dw_job){b, e, NULL, db, NULL, NULL, dyr, m, (double)m * (double)e->out, b->ws, SHEAF_OK};
  }
  for (uint32_t q = 0; q < b->n_dw; q++) {
    const sh_bw_dw *d = &b->dw[q];
    int64_t m = d->m, sum_in = d->sum_in, out = d->out;
    if (!m) continue;
    /* A = [X_1 | .. | X_nx]^T [sum_in, m]: the segments' rows transposed,
     * gathered from their row pointers (16 columns of A's rows per task
     * when split) */
    float *t = sh_bw_alloc(b, (size_t)sum_in * (size_t)m * sizeof(float));
    float **crow = sh_bw_alloc(b, (size_t)sum_in * sizeof *crow);
    const float **dyr = sh_bw_alloc(b, (size_t)m * sizeof *dyr);
    if (!t || !crow || !dyr) return SHEAF_ERR_NOMEM;
    int64_t r0 = 0;
    for (const sh_bw_seg *sg = d->head; sg; sg = sg->next) {
      memcpy(dyr + r0, sg->dyr, (size_t)sg->m * sizeof *dyr);
      r0 += sg->m;
    }
    int64_t o = 0;
    for (int k = 0; k < d->nx; k++) {
      float *dw = sh_bw_param_grad(b, d->wid[k]);
      if (!dw) return SHEAF_ERR_NOMEM;
      int64_t in = md->params[d->wid[k] - 1].shape[0];
      for (int64_t i = 0; i < in; i++) crow[o + i] = dw + i * out;
      o += in;
    }
    double cost = (double)m * (double)sum_in * (double)(out + 1);
    j[nj++] = (dw_job){b, NULL, d, NULL, t, crow, dyr, m, cost, b->ws, SHEAF_OK};
  }
  if (dw_lanes(b, j, nj)) { /* side by side: the largest first, a GEMM's workspace each */
    sheaf_status st;
    uint32_t w = 0;
    for (uint32_t q = 0; q < nj; q++) {
      order[q] = &j[q];
      if (!j[q].d) continue;
      while ((uint32_t)g->work.n_gemm_ws <= w) {
        if ((st = sh_gemm_ws_create(b->ctx, &g->work.gemm_ws[g->work.n_gemm_ws]))) return st;
        g->work.n_gemm_ws++;
      }
      j[q].ws = g->work.gemm_ws[w++];
    }
    for (uint32_t q = 1; q < nj; q++) /* by cost, descending (insertion: a handful) */
      for (uint32_t r = q; r > 0 && order[r]->cost > order[r - 1]->cost; r--) {
        dw_job *x = order[r];
        order[r] = order[r - 1], order[r - 1] = x;
      }
    sh_pool_run(b->ctx->pool, nj, dw_task, order, b->threads);
    b->dw_lanes = 1;
    for (uint32_t q = 0; q < nj; q++)
      if (j[q].st) return j[q].st;
    return SHEAF_OK;
  }
  for (uint32_t q = 0; q < nj; q++) {
    sheaf_status st = dw_run(&j[q], b->threads);
    if (st) return st;
  }
  return SHEAF_OK;
}

/* Row pointers into each node's gradient (zeros for a node without one). */
static const float **dy_rows(sh_bw *b, const uint32_t *ids, uint32_t n, int64_t m, int64_t cols,
                             float *const *grads) {
  const float **p = sh_bw_alloc(b, (size_t)m * sizeof *p);
  if (!p) return NULL;
  int64_t r0 = 0;
  for (uint32_t i = 0; i < n; i++) {
    int64_t rows = b->g->store.nodes[ids[i]].rows;
    for (int64_t r = 0; r < rows; r++) p[r0 + r] = grads[i] + r * cols;
    r0 += rows;
  }
  return p;
}

sheaf_status sh_bw_affine(sh_bw *b, const uint32_t *ids, uint32_t n) {
  sheaf_graph *g = b->g;
  const sh_node *n0 = &g->store.nodes[ids[0]];
  uint32_t wid[SH_GEMM_MAX_KSRC];
  int nx = sh_bw_weights(b, ids[0], wid);
  int64_t m = 0;
  float **grads = sh_bw_alloc(b, (size_t)n * sizeof *grads);
  if (!grads) return SHEAF_ERR_NOMEM;
  for (uint32_t i = 0; i < n; i++) {
    m += g->store.nodes[ids[i]].rows;
    grads[i] = b->grad[ids[i]]; /* set: the pass hands over nodes with a gradient */
  }
  const float **dyr = dy_rows(b, ids, n, m, n0->cols, grads);
  if (!dyr) return SHEAF_ERR_NOMEM;
  return sh_bw_lin_grads(b, ids, n, m, nx, wid, n0->lin.b, n0->cols, dyr);
}

sheaf_status sh_bw_cell_gemm(sh_bw *b, const uint32_t *ids, uint32_t n, int64_t m, float *s,
                             int64_t ld, const sh_gemm_ep *ep, int n_ep) {
  sheaf_graph *g = b->g;
  const sh_node *n0 = &g->store.nodes[ids[0]];
  int64_t in = g->model->params[n0->lin.w - 1].shape[0];
  const float **xr = sh_bw_alloc(b, (size_t)m * sizeof *xr);
  if (!xr) return SHEAF_ERR_NOMEM;
  int64_t r0 = 0;
  for (uint32_t i = 0; i < n; i++) {
    const float *xv = sh_bw_val(b, sh_bw_in(b, ids[i], 0));
    if (!xv) return BW_FAIL(b);
    for (int64_t r = 0; r < g->store.nodes[ids[i]].rows; r++) xr[r0 + r] = xv + r * in;
    r0 += g->store.nodes[ids[i]].rows;
  }
  const sh_gemm_packed_b *pw; /* W packed as the forward uses it (kept by the model) */
  sheaf_status st = sh_model_packed(g->model, n0->lin.w, false, &pw);
  if (st) return st;
  sh_gemm_args a = {0};
  a.m = m;
  a.n_src = 1;
  a.src[0] = (sh_gemm_src){in, {xr, NULL, 0}};
  a.b_packed = pw;
  a.c = (sh_gemm_out){NULL, s, ld};
  a.ws = b->ws;
  if (n0->lin.b)
    a.ep[a.n_ep++] = (sh_gemm_ep){SH_GEMM_EP_BIAS, 0, 0, 0, g->model->params[n0->lin.b - 1].data, {0}};
  for (int e = 0; e < n_ep; e++) a.ep[a.n_ep++] = ep[e];
  return sh_gemm(b->ctx, g->isa, b->threads, &a);
}

/* The bucket's gates, recomputed (the forward kept none: a graph's first
 * training pass, or one flushed before it trained): z = x·W + b with one
 * GEMM, activated, and tanh(c), into s [m, 5*hid] (sh_saved's layout). */
static sheaf_status lstm_gates(sh_bw *b, const uint32_t *ids, uint32_t n, int64_t m, float *s) {
  sheaf_graph *g = b->g;
  int64_t hid = g->store.nodes[ids[0]].cols, g5 = 5 * hid;
  sheaf_status st = sh_bw_cell_gemm(b, ids, n, m, s, g5, NULL, 0);
  if (st) return st;
  int64_t r0 = 0;
  for (uint32_t i = 0; i < n; i++) {
    const float *cv = sh_bw_val(b, sh_lstm_cell(ids[i]));
    if (!cv) return BW_FAIL(b);
    for (int64_t r = 0; r < g->store.nodes[ids[i]].rows; r++) {
      float *zr = s + (r0 + r) * g5;
      sh_vmath_f32(g->isa, SH_VMATH_SIGMOID, 2 * hid, zr, zr);
      sh_vmath_f32(g->isa, SH_VMATH_TANH, hid, zr + 2 * hid, zr + 2 * hid);
      sh_vmath_f32(g->isa, SH_VMATH_SIGMOID, hid, zr + 3 * hid, zr + 3 * hid);
      sh_vmath_f32(g->isa, SH_VMATH_TANH, hid, cv + r * hid, zr + 4 * hid);
    }
    r0 += g->store.nodes[ids[i]].rows;
  }
  return SHEAF_OK;
}

/* One node's operands of the gates' gradient. */
typedef struct lstm_part {
  int64_t rows;
  const float *s;  /* its gates (5*hid a row: i, f, u, o, tanh c) */
  const float *dh, *dc, *cp; /* dh, dc, c_prev (NULL: zeros) */
  float *dcp, *dz; /* c_prev's gradient (NULL: none wanted); dz (4*hid a row) */
} lstm_part;

typedef struct lstm_job {
  const lstm_part *p;
  uint32_t n;
  int64_t hid, cols; /* columns of a task */
  const float *zeros; /* hid zeros */
} lstm_job;

/* dz (gate order i, f, g, o) of columns [j0, j1) of every node, nodes in
 * order (dc_prev += dct·f: two nodes sharing a c_prev add in node order,
 * whatever the threads). */
/* One row's columns [0, n) (pointers at the first): restrict parameters,
 * so that the compiler vectorizes. */
static void dz_row(int64_t n, int64_t hid, const float *restrict sr, const float *restrict dh,
                   const float *restrict dc, const float *restrict cp, float *restrict zr) {
  for (int64_t j = 0; j < n; j++) {
    float ig = sr[j], fg = sr[hid + j], gg = sr[2 * hid + j], og = sr[3 * hid + j], tc = sr[4 * hid + j];
    float dct = dc[j] + dh[j] * og * (1.0f - tc * tc);
    zr[j] = dct * gg * ig * (1.0f - ig);
    zr[hid + j] = dct * cp[j] * fg * (1.0f - fg);
    zr[2 * hid + j] = dct * ig * (1.0f - gg * gg);
    zr[3 * hid + j] = dh[j] * tc * og * (1.0f - og);
  }
}

/* dc_prev += dct·f over one row's columns [0, n). */
static void dcp_row(int64_t n, int64_t hid, const float *restrict sr, const float *restrict dh,
                    const float *restrict dc, float *restrict dcp) {
  for (int64_t j = 0; j < n; j++) {
    float og = sr[3 * hid + j], tc = sr[4 * hid + j];
    dcp[j] += (dc[j] + dh[j] * og * (1.0f - tc * tc)) * sr[hid + j];
  }
}

static void lstm_dz_task(void *arg, int64_t task, int tid) {
  (void)tid;
  const lstm_job *jb = arg;
  const int64_t hid = jb->hid, j0 = task * jb->cols, j1 = j0 + jb->cols < hid ? j0 + jb->cols : hid;
  for (uint32_t i = 0; i < jb->n; i++) {
    const lstm_part *p = &jb->p[i];
    /* absent operands read a zero row (stride 0): a branch-free inner loop */
    int64_t sh = p->dh ? hid : 0, sc = p->dc ? hid : 0, sp = p->cp ? hid : 0;
    const float *dh = p->dh ? p->dh : jb->zeros, *dc = p->dc ? p->dc : jb->zeros;
    const float *cp = p->cp ? p->cp : jb->zeros;
    for (int64_t r = 0; r < p->rows; r++) {
      const float *sr = p->s + r * 5 * hid + j0;
      dz_row(j1 - j0, hid, sr, dh + r * sh + j0, dc + r * sc + j0, cp + r * sp + j0, p->dz + r * 4 * hid + j0);
      if (p->dcp) dcp_row(j1 - j0, hid, sr, dh + r * sh + j0, dc + r * sc + j0, p->dcp + r * hid + j0);
    }
  }
}

sheaf_status sh_bw_lstm(sh_bw *b, const uint32_t *ids, uint32_t n) {
  sheaf_graph *g = b->g;
  const sh_node *n0 = &g->store.nodes[ids[0]];
  int64_t hid = n0->cols, g4 = 4 * hid, g5 = 5 * hid, m = 0;
  bool kept = true; /* the forward kept every node's gates (sh_saved) */
  for (uint32_t i = 0; i < n; i++) {
    m += g->store.nodes[ids[i]].rows;
    kept = kept && ids[i] < g->saved.cap && g->saved.lstm_gates[ids[i]];
  }
  float *rec = NULL;
  if (!kept) {
    if (!(rec = sh_bw_alloc(b, (size_t)m * (size_t)g5 * sizeof(float)))) return SHEAF_ERR_NOMEM;
    sheaf_status st = lstm_gates(b, ids, n, m, rec);
    if (st) return st;
  }
  float *dz = sh_bw_alloc(b, (size_t)m * (size_t)g4 * sizeof(float));
  lstm_part *parts = sh_bw_alloc(b, (size_t)n * sizeof *parts);
  if (!dz || !parts) return SHEAF_ERR_NOMEM;
  int64_t r0 = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t id = ids[i], cell = sh_lstm_cell(id);
    int64_t rows = g->store.nodes[id].rows;
    bool has_prev = g->store.nodes[id].n_in > 1;
    uint32_t cp_id = has_prev ? sh_bw_in(b, id, 1) : SH_NONE;
    const float *cpv = has_prev ? sh_bw_val(b, cp_id) : NULL;
    if (has_prev && !cpv) return BW_FAIL(b);
    float *dcp = has_prev && b->req[cp_id] ? sh_bw_grad(b, cp_id) : NULL;
    if (has_prev && b->req[cp_id] && !dcp) return SHEAF_ERR_NOMEM;
    const float *s = kept ? g->saved.lstm_gates[id] : rec + r0 * g5;
    parts[i] = (lstm_part){rows, s, b->grad[id], b->grad[cell], cpv, dcp, dz + r0 * g4};
    r0 += rows;
  }
  /* column ranges of 32 over the pool: the same sums on any thread count */
  float *zeros = sh_bw_alloc(b, (size_t)hid * sizeof(float));
  if (!zeros) return SHEAF_ERR_NOMEM;
  memset(zeros, 0, (size_t)hid * sizeof(float));
  lstm_job jb = {parts, n, hid, 32, zeros};
  sh_pool_run(b->ctx->pool, (hid + jb.cols - 1) / jb.cols, lstm_dz_task, &jb, b->threads);
  const float **dzr = sh_bw_alloc(b, (size_t)m * sizeof *dzr);
  if (!dzr) return SHEAF_ERR_NOMEM;
  for (int64_t r = 0; r < m; r++) dzr[r] = dz + r * g4;
  uint32_t wid = n0->lin.w;
  return sh_bw_lin_grads(b, ids, n, m, 1, &wid, n0->lin.b, g4, dzr);
}

/* y = a·b with a [r, k] (or [k]) and b [k, c] (or [k]: a column) */
sheaf_status sh_bw_matmul(sh_bw *b, const uint32_t *ids, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    uint32_t id = ids[i], ia = sh_bw_in(b, id, 0), ib = sh_bw_in(b, id, 1);
    const sh_node *an = &b->g->store.nodes[ia], *bn = &b->g->store.nodes[ib];
    int64_t rows = an->rows, k = an->cols, cb = bn->rank == 2 ? bn->cols : 1;
    const float *av = sh_bw_val(b, ia), *bv = av ? sh_bw_val(b, ib) : NULL;
    if (!bv) return BW_FAIL(b);
    float *da = b->req[ia] ? sh_bw_grad(b, ia) : NULL, *db = b->req[ib] ? sh_bw_grad(b, ib) : NULL;
    if ((b->req[ia] && !da) || (b->req[ib] && !db)) return SHEAF_ERR_NOMEM;
    const float *dy = b->grad[id];
    for (int64_t r = 0; r < rows; r++)
      for (int64_t kk = 0; kk < k; kk++) {
        double s = 0;
        for (int64_t c = 0; c < cb; c++) {
          float d = dy[r * cb + c];
          s += (double)d * bv[kk * cb + c];
          if (db) db[kk * cb + c] += av[r * k + kk] * d;
        }
        if (da) da[r * k + kk] += (float)s;
      }
  }
  return SHEAF_OK;
}
