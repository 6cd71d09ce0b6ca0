/*
 * grad_tree_lstm.c — the backward of a bucket of tree-LSTM cells
 * (sheaf_tree_lstm_cell): the gates the forward kept (sh_saved; recomputed
 * with one GEMM when it kept none) and dh, dc give the gates' gradient dz of
 * every row in one vectorised pass split by columns over the pool, with
 * dc_l, dc_r added into the children's cell states; then dX = dz·W^T and
 * dW += X^T·dz over the whole bucket (sh_bw_lin_grads). With
 * dct = dc + dh·o·(1 - tanh²c):
 *   dz_i = dct·u·i(1-i)   dz_fl = dct·c_l·f_l(1-f_l)   dz_fr = dct·c_r·f_r(1-f_r)
 *   dz_o = dh·tanh(c)·o(1-o)   dz_u = dct·i·(1-u²)   dc_l += dct·f_l, dc_r += dct·f_r
 * (a leaf: gates i, o, u only).
 */
#include <string.h>

#include "base/pool.h"
#include "kernels/vmath.h"
#include "train/train.h"

#define BW_FAIL(b) ((b)->g->status ? (b)->g->status : sheaf_ctx_last_status((b)->ctx))

/* The bucket's gates, recomputed (the forward kept none): z = x·W + b by one
 * GEMM with the activations in its epilogue, then tanh(c) from the cells'
 * values, into s [m, (ng + 1)·hid] (the forward's layout). */
static sheaf_status recompute(sh_bw *b, const uint32_t *ids, uint32_t n, int64_t m, int64_t ng,
                              float *s) {
  sheaf_graph *g = b->g;
  int64_t hid = g->store.nodes[ids[0]].cols, ld = (ng + 1) * hid;
  const sh_gemm_ep ep[2] = {{SH_GEMM_EP_ACT, 0, (ng - 1) * hid, SH_GEMM_ACT_SIGMOID, NULL, {0}},
                            {SH_GEMM_EP_ACT, (ng - 1) * hid, ng * hid, SH_GEMM_ACT_TANH, NULL, {0}}};
  sheaf_status st = sh_bw_cell_gemm(b, ids, n, m, s, ld, ep, 2);
  if (st) return st;
  int64_t r0 = 0;
  for (uint32_t i = 0; i < n; i++) {
    const float *cv = sh_bw_val(b, sh_lstm_cell(ids[i]));
    if (!cv) return BW_FAIL(b);
    for (int64_t r = 0; r < g->store.nodes[ids[i]].rows; r++)
      sh_vmath_f32(g->isa, SH_VMATH_TANH, hid, cv + r * hid, s + (r0 + r) * ld + ng * hid);
    r0 += g->store.nodes[ids[i]].rows;
  }
  return SHEAF_OK;
}

/* One node's operands of the gates' gradient. */
typedef struct cell_part {
  int64_t rows;
  const float *s;              /* its gates, (ng + 1)·hid a row */
  const float *dh, *dc;        /* NULL: zeros */
  const float *cl, *cr;        /* the children's c (binary) */
  float *dcl, *dcr;            /* their gradients (NULL: none wanted) */
  float *dz;                   /* ng·hid a row */
} cell_part;

typedef struct cell_job {
  const cell_part *p;
  uint32_t n;
  int64_t hid, cols; /* columns of a task */
  bool leaf;
  const float *zeros; /* hid zeros */
} cell_job;

/* One row's columns [0, n) (pointers at the first), restrict for the
 * vectoriser. Binary: s = i f_l f_r o u tanh(c), dz = i f_l f_r o u. */
static void dz_row2(int64_t n, int64_t hid, const float *restrict s, const float *restrict dh,
                    const float *restrict dc, const float *restrict cl, const float *restrict cr,
                    float *restrict dz) {
  for (int64_t j = 0; j < n; j++) {
    float ig = s[j], fl = s[hid + j], fr = s[2 * hid + j], og = s[3 * hid + j], ug = s[4 * hid + j];
    float tc = s[5 * hid + j];
    float dct = dc[j] + dh[j] * og * (1.0f - tc * tc);
    dz[j] = dct * ug * ig * (1.0f - ig);
    dz[hid + j] = dct * cl[j] * fl * (1.0f - fl);
    dz[2 * hid + j] = dct * cr[j] * fr * (1.0f - fr);
    dz[3 * hid + j] = dh[j] * tc * og * (1.0f - og);
    dz[4 * hid + j] = dct * ig * (1.0f - ug * ug);
  }
}

/* d += dct·f over one row's columns [0, n) (f at s + f_off). */
static void dchild_row(int64_t n, int64_t hid, const float *restrict s, int64_t f_off,
                       const float *restrict dh, const float *restrict dc, float *restrict d) {
  for (int64_t j = 0; j < n; j++) {
    float og = s[3 * hid + j], tc = s[5 * hid + j];
    d[j] += (dc[j] + dh[j] * og * (1.0f - tc * tc)) * s[f_off + j];
  }
}

/* Leaf: s = i o u tanh(c), dz = i o u. */
static void dz_row0(int64_t n, int64_t hid, const float *restrict s, const float *restrict dh,
                    const float *restrict dc, float *restrict dz) {
  for (int64_t j = 0; j < n; j++) {
    float ig = s[j], og = s[hid + j], ug = s[2 * hid + j], tc = s[3 * hid + j];
    float dct = dc[j] + dh[j] * og * (1.0f - tc * tc);
    dz[j] = dct * ug * ig * (1.0f - ig);
    dz[hid + j] = dh[j] * tc * og * (1.0f - og);
    dz[2 * hid + j] = dct * ig * (1.0f - ug * ug);
  }
}

/* Columns [j0, j1) of every node, nodes and rows in order (two nodes adding
 * into one child's gradient add in node order, whatever the threads). */
static void dz_task(void *arg, int64_t task, int tid) {
  (void)tid;
  const cell_job *jb = arg;
  const int64_t hid = jb->hid, j0 = task * jb->cols, j1 = j0 + jb->cols < hid ? j0 + jb->cols : hid;
  const int64_t ng = jb->leaf ? 3 : 5, ld = (ng + 1) * hid, w = j1 - j0;
  for (uint32_t i = 0; i < jb->n; i++) {
    const cell_part *p = &jb->p[i];
    /* absent operands read a zero row (stride 0): a branch-free inner loop */
    int64_t sh = p->dh ? hid : 0, sc = p->dc ? hid : 0;
    const float *dh = p->dh ? p->dh : jb->zeros, *dc = p->dc ? p->dc : jb->zeros;
    for (int64_t r = 0; r < p->rows; r++) {
      const float *s = p->s + r * ld + j0, *dhr = dh + r * sh + j0, *dcr = dc + r * sc + j0;
      float *dz = p->dz + r * ng * hid + j0;
      if (jb->leaf) {
        dz_row0(w, hid, s, dhr, dcr, dz);
        continue;
      }
      dz_row2(w, hid, s, dhr, dcr, p->cl + r * hid + j0, p->cr + r * hid + j0, dz);
      if (p->dcl) dchild_row(w, hid, s, hid, dhr, dcr, p->dcl + r * hid + j0);
      if (p->dcr) dchild_row(w, hid, s, 2 * hid, dhr, dcr, p->dcr + r * hid + j0);
    }
  }
}

/* A child's c value (compact, as sh_bw_val gives) and, when it needs one,
 * its gradient. */
static sheaf_status child(sh_bw *b, uint32_t id, int k, const float **v, float **d) {
  uint32_t x = sh_bw_in(b, id, k);
  if (!(*v = sh_bw_val(b, x))) return BW_FAIL(b);
  *d = NULL;
  if (b->req[x] && !(*d = sh_bw_grad(b, x))) return SHEAF_ERR_NOMEM;
  return SHEAF_OK;
}

sheaf_status sh_bw_tree_lstm(sh_bw *b, const uint32_t *ids, uint32_t n) {
  sheaf_graph *g = b->g;
  const sh_node *n0 = &g->store.nodes[ids[0]];
  const bool leaf = n0->n_in == 1;
  const int64_t hid = n0->cols, ng = leaf ? 3 : 5, ld = (ng + 1) * hid;
  int64_t m = 0;
  bool kept = true; /* the forward kept every node's gates (sh_saved) */
  for (uint32_t i = 0; i < n; i++) {
    m += g->store.nodes[ids[i]].rows;
    kept = kept && ids[i] < g->saved.cap && g->saved.lstm_gates[ids[i]];
  }
  float *rec = NULL;
  if (!kept) {
    if (!(rec = sh_bw_alloc(b, (size_t)m * (size_t)ld * sizeof(float)))) return SHEAF_ERR_NOMEM;
    sheaf_status st = recompute(b, ids, n, m, ng, rec);
    if (st) return st;
  }
  float *dz = sh_bw_alloc(b, (size_t)m * (size_t)(ng * hid) * sizeof(float));
  cell_part *parts = sh_bw_alloc(b, (size_t)n * sizeof *parts);
  float *zeros = sh_bw_alloc(b, (size_t)hid * sizeof(float));
  if (!dz || !parts || !zeros) return SHEAF_ERR_NOMEM;
  memset(zeros, 0, (size_t)hid * sizeof(float));
  int64_t r0 = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t id = ids[i];
    int64_t rows = g->store.nodes[id].rows;
    cell_part p = {rows, kept ? g->saved.lstm_gates[id] : rec + r0 * ld, b->grad[id],
                   b->grad[sh_lstm_cell(id)], NULL, NULL, NULL, NULL, dz + r0 * ng * hid};
    sheaf_status st;
    if (!leaf && ((st = child(b, id, 1, &p.cl, &p.dcl)) || (st = child(b, id, 2, &p.cr, &p.dcr))))
      return st;
    parts[i] = p;
    r0 += rows;
  }
  /* column ranges of 32 over the pool, or every column on the caller (rows
   * read whole: the prefetcher follows); each element's sums are the same
   * either way */
  cell_job jb = {parts, n, hid, 32, leaf, zeros};
  int64_t tasks = (hid + jb.cols - 1) / jb.cols;
  if (b->threads > 1 && tasks > 1 && m * ng * hid >= 16384) {
    sh_pool_run(b->ctx->pool, tasks, dz_task, &jb, b->threads);
  } else {
    jb.cols = hid;
    dz_task(&jb, 0, 0);
  }
  const float **dzr = sh_bw_alloc(b, (size_t)m * sizeof *dzr);
  if (!dzr) return SHEAF_ERR_NOMEM;
  for (int64_t r = 0; r < m; r++) dzr[r] = dz + r * ng * hid;
  uint32_t wid = n0->lin.w;
  return sh_bw_lin_grads(b, ids, n, m, 1, &wid, n0->lin.b, ng * hid, dzr);
}
