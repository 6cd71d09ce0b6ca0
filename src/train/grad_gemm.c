/*
 * grad_gemm.c — the backward of the GEMM ops, a bucket at a time: an
 * affine bucket (same W, b, inputs) runs dX_k = dY·W_k^T as one GEMM over
 * every row of every node, and dW_k += X_k^T·dY as ONE GEMM for all the
 * bucket's rows and all its weights (A = [X_1 | .. | X_n]^T gathered once,
 * C the weights' gradient rows); an LSTM bucket recomputes its gates with
 * one GEMM, turns dh and dc into the gates' gradient, then does the same.
 * matmul (activations times activations) runs node by node.
 */
#include <math.h>
#include <string.h>

#include "kernels/vmath.h"
#include "train/train.h"

#define BW_FAIL(b) ((b)->g->status ? (b)->g->status : sheaf_ctx_last_status((b)->ctx))

sheaf_status sh_bw_packed_wt(sh_bw *b, uint32_t pid, const sh_gemm_packed_b **out) {
  sheaf_model *m = b->g->model;
  if (!b->wt) {
    b->n_wt = m->n_params;
    b->wt = sh_bw_alloc(b, (size_t)b->n_wt * sizeof *b->wt);
    if (!b->wt) return SHEAF_ERR_NOMEM;
    memset(b->wt, 0, (size_t)b->n_wt * sizeof *b->wt);
  }
  if (!b->wt[pid - 1]) {
    const sh_param *w = &m->params[pid - 1];
    /* B = W^T [out, in]; its transpose is W itself: element (k, n) at W[n * out + k] */
    sheaf_status st = sh_gemm_pack_b(b->ctx, w->data, w->shape[1], w->shape[1], w->shape[0],
                                     SH_GEMM_PACK_TRANS, &b->wt[pid - 1]);
    if (st) return st;
  }
  *out = b->wt[pid - 1];
  return SHEAF_OK;
}

static sheaf_status gemm(sh_bw *b, const sh_gemm_args *a) {
  return sh_gemm(b->ctx, b->g->isa, b->g->threads, a);
}

/* dX and dW of a linear map over a bucket: nodes ids[0..n), each of rows
 * rows[i] (summing to m), dY given by row pointers dyr[m] of `out`
 * columns, nx inputs (input k of node i is its input k) through weights
 * wid[k] ([in_k, out]), bias `bias` (0: none). */
static sheaf_status lin_grads(sh_bw *b, const uint32_t *ids, uint32_t n, int64_t m, int nx,
                              const uint32_t *wid, uint32_t bias, int64_t out,
                              const float *const *dyr) {
  sheaf_graph *g = b->g;
  sheaf_model *md = g->model;
  if (bias) {
    float *db = sh_bw_param_grad(b, bias);
    if (!db) return SHEAF_ERR_NOMEM;
    for (int64_t r = 0; r < m; r++)
      for (int64_t j = 0; j < out; j++) db[j] += dyr[r][j];
  }
  int64_t sum_in = 0, in[SH_GEMM_MAX_KSRC], off[SH_GEMM_MAX_KSRC];
  for (int k = 0; k < nx; k++) {
    in[k] = md->params[wid[k] - 1].shape[0];
    off[k] = sum_in;
    sum_in += in[k];
  }
  sh_gemm_ws *ws = g->work.gemm_ws[0];
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
    a.b_packed = wt; /* W_k^T, packed once per pass */
    a.c = (sh_gemm_out){NULL, dx, in[k]};
    a.ws = ws;
    if ((st = gemm(b, &a))) return st;
    int64_t r0 = 0;
    for (uint32_t i = 0; i < n; i++) {
      uint32_t x = sh_bw_in(b, ids[i], k);
      int64_t rows = g->store.nodes[ids[i]].rows;
      if (b->req[x]) {
        float *gx = sh_bw_grad(b, x);
        if (!gx) return SHEAF_ERR_NOMEM;
        const float *s = dx + r0 * in[k];
        for (int64_t j = 0, e = rows * in[k]; j < e; j++) gx[j] += s[j];
      }
      r0 += rows;
    }
  }
  /* dW = [X_1 | .. | X_nx]^T · dY: one GEMM, C = the weights' gradient rows */
  float *t = sh_bw_alloc(b, (size_t)sum_in * (size_t)m * sizeof(float));
  float **crow = sh_bw_alloc(b, (size_t)sum_in * sizeof *crow);
  if (!t || !crow) return SHEAF_ERR_NOMEM;
  for (int k = 0; k < nx; k++) {
    float *dw = sh_bw_param_grad(b, wid[k]);
    if (!dw) return SHEAF_ERR_NOMEM;
    for (int64_t i = 0; i < in[k]; i++) crow[off[k] + i] = dw + i * out;
  }
  int64_t r0 = 0;
  for (uint32_t i = 0; i < n; i++) {
    int64_t rows = g->store.nodes[ids[i]].rows;
    for (int k = 0; k < nx; k++) {
      const float *xv = sh_bw_val(b, sh_bw_in(b, ids[i], k));
      if (!xv) return BW_FAIL(b);
      for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < in[k]; c++) t[(off[k] + c) * m + r0 + r] = xv[r * in[k] + c];
    }
    r0 += rows;
  }
  sh_gemm_args a = {0};
  a.m = sum_in;
  a.n_src = 1;
  a.src[0] = (sh_gemm_src){m, {NULL, t, m}};
  a.b = (sh_gemm_in){dyr, NULL, 0};
  a.n = out;
  a.c = (sh_gemm_out){crow, NULL, 0};
  a.accumulate = true;
  a.ws = ws;
  return gemm(b, &a);
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
  int nx = n0->n_in;
  uint32_t wid[SH_GEMM_MAX_KSRC];
  if (nx == 1) wid[0] = n0->lin.w;
  else memcpy(wid, g->model->stacks[n0->lin.w - 1].ids, (size_t)nx * sizeof *wid);
  int64_t m = 0;
  float **grads = sh_bw_alloc(b, (size_t)n * sizeof *grads);
  if (!grads) return SHEAF_ERR_NOMEM;
  for (uint32_t i = 0; i < n; i++) {
    m += g->store.nodes[ids[i]].rows;
    grads[i] = b->grad[ids[i]]; /* set: the pass hands over nodes with a gradient */
  }
  const float **dyr = dy_rows(b, ids, n, m, n0->cols, grads);
  if (!dyr) return SHEAF_ERR_NOMEM;
  return lin_grads(b, ids, n, m, nx, wid, n0->lin.b, n0->cols, dyr);
}

sheaf_status sh_bw_lstm(sh_bw *b, const uint32_t *ids, uint32_t n) {
  sheaf_graph *g = b->g;
  const sh_node *n0 = &g->store.nodes[ids[0]];
  const sh_param *W = &g->model->params[n0->lin.w - 1];
  int64_t hid = n0->cols, g4 = 4 * hid, in = W->shape[0], m = 0;
  for (uint32_t i = 0; i < n; i++) m += g->store.nodes[ids[i]].rows;
  float *z = sh_bw_alloc(b, (size_t)m * (size_t)g4 * sizeof(float));
  const float **xr = sh_bw_alloc(b, (size_t)m * sizeof *xr);
  if (!z || !xr) return SHEAF_ERR_NOMEM;
  int64_t r0 = 0;
  for (uint32_t i = 0; i < n; i++) {
    const float *xv = sh_bw_val(b, sh_bw_in(b, ids[i], 0));
    if (!xv) return BW_FAIL(b);
    for (int64_t r = 0; r < g->store.nodes[ids[i]].rows; r++) xr[r0 + r] = xv + r * in;
    r0 += g->store.nodes[ids[i]].rows;
  }
  /* the gates again: z = x·W + b, one GEMM */
  const sh_gemm_packed_b *pw; /* W packed as the forward uses it (kept by the model) */
  sheaf_status st = sh_model_packed(g->model, n0->lin.w, false, &pw);
  if (st) return st;
  sh_gemm_args a = {0};
  a.m = m;
  a.n_src = 1;
  a.src[0] = (sh_gemm_src){in, {xr, NULL, 0}};
  a.b_packed = pw;
  a.c = (sh_gemm_out){NULL, z, g4};
  a.ws = g->work.gemm_ws[0];
  if (n0->lin.b)
    a.ep[a.n_ep++] = (sh_gemm_ep){SH_GEMM_EP_BIAS, 0, 0, 0, g->model->params[n0->lin.b - 1].data, {0}};
  if ((st = sh_gemm(b->ctx, g->isa, g->threads, &a))) return st;
  /* the gates' activations, vectorized (the vmath kernels of the graph's ISA) */
  for (int64_t r = 0; r < m; r++) {
    float *zr = z + r * g4;
    sh_vmath_f32(g->isa, SH_VMATH_SIGMOID, 2 * hid, zr, zr);
    sh_vmath_f32(g->isa, SH_VMATH_TANH, hid, zr + 2 * hid, zr + 2 * hid);
    sh_vmath_f32(g->isa, SH_VMATH_SIGMOID, hid, zr + 3 * hid, zr + 3 * hid);
  }
  float *tcb = NULL;
  int64_t tcb_rows = 0;
  /* z becomes dz (gate order i, f, g, o) */
  r0 = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t id = ids[i], cell = sh_lstm_cell(id);
    int64_t rows = g->store.nodes[id].rows;
    bool has_prev = g->store.nodes[id].n_in > 1;
    uint32_t cp_id = has_prev ? sh_bw_in(b, id, 1) : SH_NONE;
    const float *cv = sh_bw_val(b, cell), *cpv = has_prev ? sh_bw_val(b, cp_id) : NULL;
    if (!cv || (has_prev && !cpv)) return BW_FAIL(b);
    const float *dh = b->grad[id], *dc = b->grad[cell];
    float *dcp = has_prev && b->req[cp_id] ? sh_bw_grad(b, cp_id) : NULL;
    if (has_prev && b->req[cp_id] && !dcp) return SHEAF_ERR_NOMEM;
    if (rows > tcb_rows) { /* tanh(c), reused across the bucket's nodes */
      if (!(tcb = sh_bw_alloc(b, (size_t)rows * (size_t)hid * sizeof(float)))) return SHEAF_ERR_NOMEM;
      tcb_rows = rows;
    }
    sh_vmath_f32(g->isa, SH_VMATH_TANH, rows * hid, cv, tcb);
    for (int64_t r = 0; r < rows; r++) {
      float *zr = z + (r0 + r) * g4;
      const float *tcr = tcb + r * hid;
      for (int64_t j = 0; j < hid; j++) {
        float ig = zr[j], fg = zr[hid + j], gg = zr[2 * hid + j], og = zr[3 * hid + j];
        float cp = cpv ? cpv[r * hid + j] : 0.0f, tc = tcr[j];
        float dhv = dh ? dh[r * hid + j] : 0.0f, dcv = dc ? dc[r * hid + j] : 0.0f;
        float dct = dcv + dhv * og * (1.0f - tc * tc);
        zr[j] = dct * gg * ig * (1.0f - ig);
        zr[hid + j] = dct * cp * fg * (1.0f - fg);
        zr[2 * hid + j] = dct * ig * (1.0f - gg * gg);
        zr[3 * hid + j] = dhv * tc * og * (1.0f - og);
        if (dcp) dcp[r * hid + j] += dct * fg;
      }
    }
    r0 += rows;
  }
  const float **dzr = sh_bw_alloc(b, (size_t)m * sizeof *dzr);
  if (!dzr) return SHEAF_ERR_NOMEM;
  for (int64_t r = 0; r < m; r++) dzr[r] = z + r * g4;
  uint32_t wid = n0->lin.w;
  return lin_grads(b, ids, n, m, 1, &wid, n0->lin.b, g4, dzr);
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
