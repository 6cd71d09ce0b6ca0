/*
 * exec_tree_lstm.c — a batch of tree-LSTM cells (sheaf_tree_lstm_cell):
 * ONE GEMM z = [h_l ; h_r]·W + b over every row of the batch (the concat's
 * pieces read through row pointers, no copy), the gates' activations in its
 * epilogue (sigmoid over i, f_l, f_r, o; tanh over u), and the rest of the
 * cell in its row hook, on rows still hot in cache:
 *   c = i·u + f_l·c_l + f_r·c_r;  h = o·tanh(c)     (leaf: c = i·u)
 * The gates land in a block of (gates + 1)·hidden floats a row, tanh(c)
 * after them; a training graph keeps it for the backward (sh_saved,
 * src/train/grad_tree_lstm.c), an inference one takes it from scratch.
 * On two threads or more a large batch runs as two halves of its rows, one
 * pool task each (halves(): one dispatch, the tail in the same pass), when
 * W is small or the batch long (each half reads all of W).
 */
#include "base/pool.h"
#include "kernels/vmath.h"
#include "runtime/runtime.h"

typedef struct cell_tail {
  sheaf_isa isa;
  int64_t hid, ld; /* ld: (gates + 1)·hid, the gate block's row */
  bool leaf;
  float *gates;     /* [m, ld] */
  const float *const *cl, *const *cr; /* children's c rows (binary) */
  float *c, *h;     /* [m, hid] */
  sheaf_status st;  /* halves(): the first failure */
} cell_tail;

/* c = i·u (+ f_l·c_l + f_r·c_r), the terms added in that order. */
static void c_row(int64_t n, const float *restrict i, const float *restrict u, float *restrict c) {
  for (int64_t j = 0; j < n; j++) c[j] = i[j] * u[j];
}

static void c_row2(int64_t n, const float *restrict i, const float *restrict u,
                   const float *restrict fl, const float *restrict cl, const float *restrict fr,
                   const float *restrict cr, float *restrict c) {
  for (int64_t j = 0; j < n; j++) c[j] = i[j] * u[j] + fl[j] * cl[j] + fr[j] * cr[j];
}

static void h_row(int64_t n, const float *restrict o, const float *restrict tc, float *restrict h) {
  for (int64_t j = 0; j < n; j++) h[j] = o[j] * tc[j];
}

/* The GEMM's row hook: rows [m0, m0 + rows) have their activated gates. */
static void tail_rows(void *arg, int64_t m0, int64_t rows, int tid) {
  (void)tid;
  const cell_tail *t = arg;
  const int64_t H = t->hid;
  for (int64_t r = m0; r < m0 + rows; r++) {
    float *gr = t->gates + r * t->ld, *c = t->c + r * H, *h = t->h + r * H;
    const float *ig = gr, *o, *u;
    float *tc;
    if (t->leaf) { /* i o u */
      o = gr + H, u = gr + 2 * H, tc = gr + 3 * H;
      c_row(H, ig, u, c);
    } else { /* i f_l f_r o u */
      o = gr + 3 * H, u = gr + 4 * H, tc = gr + 5 * H;
      c_row2(H, ig, u, gr + H, t->cl[r], gr + 2 * H, t->cr[r], c);
    }
    sh_vmath_f32(t->isa, SH_VMATH_TANH, H, c, tc);
    h_row(H, o, tc, h);
  }
}

/* Two halves of the batch's rows, each one GEMM and its tail on one
 * thread with a workspace of its own, as two pool tasks: one dispatch, no
 * second pass for the tail (an N split over threads runs the tail after the
 * whole product), no A packed twice. The GEMM has epilogues, so it sums
 * the whole K in one pass whatever its rows: the same bits as one GEMM. */
typedef struct half_job {
  sheaf_graph *g;
  sh_gemm_args a[2];
  cell_tail t[2];
  sheaf_status st[2];
} half_job;

static sh_gemm_in in_rows(sh_gemm_in x, int64_t r0) {
  if (x.rows) x.rows += r0;
  else x.base += r0 * x.ld;
  return x;
}

static void half_task(void *arg, int64_t task, int tid) {
  (void)tid;
  half_job *j = arg;
  j->st[task] = sh_gemm(j->g->ctx, j->g->isa, 1, &j->a[task]);
}

/* Runs a (on the whole batch, tail t) as halves when the graph has threads
 * and the batch is worth two tasks; false: not run (the caller runs it).
 * Afterwards t->st holds the first failure and a->rows_done is cleared. */
static bool halves(sheaf_graph *g, sh_gemm_args *a, cell_tail *t, int64_t m, int64_t macs_per_row) {
  /* each half reads all of the packed W (an N split reads it once): only
   * when W is small (256 KB) or the halves long (256 rows) */
  double wbytes = 4.0 * (double)a->b_packed->k * (double)a->b_packed->n;
  if (g->threads < 2 || m < 8 || (double)m * (double)macs_per_row < 524288.0 || (wbytes > 262144.0 && m < 512))
    return false;
  while (g->work.n_gemm_ws < 2) { /* half 1's workspace */
    if (sh_gemm_ws_create(g->ctx, &g->work.gemm_ws[g->work.n_gemm_ws])) return false;
    g->work.n_gemm_ws++;
  }
  half_job j;
  j.g = g;
  int64_t h0 = m / 2;
  for (int k = 0; k < 2; k++) {
    int64_t r0 = k ? h0 : 0, rows = k ? m - h0 : h0;
    j.a[k] = *a;
    j.a[k].m = rows;
    for (int s = 0; s < a->n_src; s++) j.a[k].src[s].in = in_rows(a->src[s].in, r0);
    j.a[k].c = (sh_gemm_out){NULL, a->c.base + r0 * a->c.ld, a->c.ld};
    j.a[k].ws = g->work.gemm_ws[k];
    j.t[k] = *t;
    j.t[k].gates += r0 * t->ld;
    j.t[k].c += r0 * t->hid;
    j.t[k].h += r0 * t->hid;
    if (!t->leaf) j.t[k].cl += r0, j.t[k].cr += r0;
    j.a[k].rows_done_arg = &j.t[k];
    j.st[k] = SHEAF_OK;
  }
  sh_pool_run(g->ctx->pool, 2, half_task, &j, 2);
  t->st = j.st[0] ? j.st[0] : j.st[1];
  a->rows_done = NULL;
  return true;
}

sheaf_status sh_exec_tree_lstm(sheaf_graph *g, uint32_t sig, const uint32_t *ids, uint32_t n,
                               int64_t m) {
  const sh_node *n0 = &g->store.nodes[ids[0]];
  const sh_gemm_packed_b *pb;
  sheaf_status st = sh_model_packed(g->model, n0->lin.w, false, &pb);
  if (st) return st;
  const int64_t hid = n0->cols;
  const bool leaf = n0->n_in == 1;
  const int64_t ng = leaf ? 3 : 5, ld = (ng + 1) * hid;
  sh_gemm_args a = {0};
  a.m = m;
  a.b_packed = pb;
  a.ws = g->work.gemm_ws[0];
  st = sh_exec_gemm_sources(g, &g->sigs.at[sig].key, ids, n, 1, m, &a);
  if (st) return st;
  if (n0->lin.b)
    a.ep[a.n_ep++] = (sh_gemm_ep){SH_GEMM_EP_BIAS, 0, 0, 0, g->model->params[n0->lin.b - 1].data, {0}};
  a.ep[a.n_ep++] = (sh_gemm_ep){SH_GEMM_EP_ACT, 0, (ng - 1) * hid, SH_GEMM_ACT_SIGMOID, NULL, {0}};
  a.ep[a.n_ep++] = (sh_gemm_ep){SH_GEMM_EP_ACT, (ng - 1) * hid, ng * hid, SH_GEMM_ACT_TANH, NULL, {0}};
  cell_tail t = {g->isa, hid, ld, leaf, NULL, NULL, NULL, NULL, NULL, SHEAF_OK};
  if (!leaf && (!(t.cl = sh_exec_gather(g, ids, n, 1, m, false)) ||
                !(t.cr = sh_exec_gather(g, ids, n, 2, m, false))))
    return g->status ? g->status : SHEAF_ERR_NOMEM;
  /* the gates: kept in the node store for a training graph, else scratch */
  bool keep = g->saved.keep;
  size_t gbytes = (size_t)m * (size_t)ld * sizeof(float);
  t.gates = sh_arena_alloc(keep ? &g->store.data : &g->work.scratch, gbytes);
  t.h = sh_exec_out_block(g, ids, n, m, hid);
  t.c = sh_arena_alloc(&g->store.data, (size_t)m * (size_t)hid * sizeof(float));
  if (!t.gates || !t.h || !t.c) return SHEAF_ERR_NOMEM;
  int64_t off = 0;
  for (uint32_t i = 0; i < n; i++) {
    sh_node *cn = &g->store.nodes[sh_lstm_cell(ids[i])];
    cn->val = t.c + off * hid;
    cn->ld = (int32_t)hid;
    cn->done = true;
    off += g->store.nodes[ids[i]].rows;
  }
  if (keep || g->saved.cap) { /* the gates' entries (NULL: not kept) */
    sh_saved *sv = &g->saved;
    uint32_t top = 0;
    for (uint32_t i = 0; i < n; i++) top = ids[i] > top ? ids[i] : top;
    if ((st = sh_side_reserve(g->ctx, (void **)&sv->lstm_gates, &sv->cap, top, sizeof(float *))))
      return st;
    off = 0;
    for (uint32_t i = 0; i < n; i++) {
      sv->lstm_gates[ids[i]] = keep ? t.gates + off * ld : NULL;
      off += g->store.nodes[ids[i]].rows;
    }
  }
  a.c = (sh_gemm_out){NULL, t.gates, ld};
  a.rows_done = tail_rows;
  a.rows_done_arg = &t;
  uint64_t t0 = sheaf_time_ns();
  st = halves(g, &a, &t, m, (int64_t)pb->k * ng * hid) ? SHEAF_OK : sh_gemm(g->ctx, g->isa, g->threads, &a);
  if (st == SHEAF_OK && a.rows_done == NULL) st = t.st; /* the halves ran: their status */
  g->instr.stats.ns_kernels += sheaf_time_ns() - t0;
  g->instr.stats.flops += 2 * (uint64_t)m * (uint64_t)pb->k * (uint64_t)(ng * hid) +
                          (uint64_t)((leaf ? 4 : 8) * m * hid);
  return st;
}
