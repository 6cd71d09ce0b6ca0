/*
 * lanes.c — the GEMM buckets of one depth of a backward pass, side by side
 * on the pool (sh_bw_gemm_depth): each bucket (or each half of a lone
 * bucket) is a lane, a pool task that runs the bucket's rule whole on one
 * thread — its gates' gradient, its dX GEMM, its adds — with an arena and
 * a GEMM workspace of its own. A bucket with most of a depth's work is
 * itself two halves, and so is the smallest lane when their count is odd
 * (two threads: each takes a half), when its W is small or its rows many
 * (splittable()). One dispatch and one barrier a depth, where
 * a bucket run alone dispatches its gates' gradient, its GEMM (each task
 * packing its own A) and its sums one after another, each with a barrier,
 * and does its bookkeeping on the caller alone. The BiLSTM's two
 * directions are two such buckets at every depth; a TreeLSTM level is one,
 * split in two by rows when it holds 512 rows or more (its W_node, 640 KB
 * at hidden 128, is otherwise read more by two halves than it saves).
 *
 * When lanes may run: every bucket an affine or a cell whose gates the
 * forward kept (no recompute: its GEMM would read the model's packing
 * cache), and no node written by one lane is touched by another (the
 * nodes, their cell states and their inputs claimed lane by lane; a shared
 * input sends the depth down the serial path). The caller reads first
 * every value the rules will read (sh_bw_val resolves views, which writes
 * the graph) and packs the W^T they use; a lane that would read anything
 * else fails with an internal error rather than race. What a rule appends
 * to the pass (its rows of dW and of the bias sums, deferred to the end of
 * the pass) is recorded by the lane and appended after the join, in bucket
 * order: the dW and bias sums see their rows in the order of a serial run.
 *
 * Determinism: a lane's work is a serial run of its bucket; lanes write
 * disjoint nodes. Whole buckets as lanes give the bits of one thread; the
 * halves of a bucket run their dX GEMMs over fewer rows, which may block K
 * otherwise (the GEMM's choice for short M): equal to one thread within
 * rounding, and the same bits on every run with the same thread count.
 */
#include <string.h>

#include "base/pool.h"
#include "train/train.h"

/* Below this many multiply-adds (the depth's dX GEMMs) the buckets run one
 * after another (each may still use the pool inside): about 2 us of work,
 * under which a dispatch costs what it saves. */
#define LANE_MIN_MACS 131072.0

typedef struct lane {
  const uint32_t *ids;
  uint32_t n;
  double macs; /* its dX multiply-adds: the larger lanes are claimed first */
  sh_bw b; /* the pass, with the lane's arena, workspace, one thread and record */
  sh_bw_rec rec;
  sheaf_status st;
} lane;

static void lane_task(void *arg, int64_t task, int tid) {
  (void)tid;
  lane *l = ((lane **)arg)[task];
  l->st = sh_bw_rules[l->b.g->store.nodes[l->ids[0]].op](&l->b, l->ids, l->n);
}

/* Whether a bucket may run in a lane (above), and its dX multiply-adds. */
static bool lane_op(const sh_bw *b, const uint32_t *ids, uint32_t n, double *macs);

/* Whether a bucket of `n` nodes and `rows` rows may be split in two halves:
 * each half's dX GEMM reads all of W^T (packed), so the split reads it
 * twice where the GEMM's own split over N reads it once; that costs little
 * when W is small (256 KB: one L2's share) or the halves are long (256
 * rows and more: the re-read is a few percent of the work). */
static bool splittable(const sh_bw *b, const uint32_t *ids, uint32_t n) {
  if (n < 2) return false;
  int64_t rows = 0;
  for (uint32_t i = 0; i < n; i++) rows += b->g->store.nodes[ids[i]].rows;
  uint32_t wid[SH_GEMM_MAX_KSRC];
  int nx = sh_bw_weights(b, ids[0], wid);
  double bytes = 0;
  for (int k = 0; k < nx; k++) {
    const sh_param *w = &b->g->model->params[wid[k] - 1];
    bytes += 4.0 * (double)w->shape[0] * (double)w->shape[1];
  }
  return bytes <= 262144.0 || rows >= 512;
}

static bool lane_op(const sh_bw *b, const uint32_t *ids, uint32_t n, double *macs) {
  const sheaf_graph *g = b->g;
  int op = g->store.nodes[ids[0]].op;
  if (op != SH_OP_AFFINE && op != SH_OP_LSTM && op != SH_OP_TREE_LSTM) return false;
  int64_t rows = 0;
  for (uint32_t i = 0; i < n; i++) {
    rows += g->store.nodes[ids[i]].rows;
    if (op != SH_OP_AFFINE && !(ids[i] < g->saved.cap && g->saved.lstm_gates[ids[i]])) return false;
  }
  uint32_t wid[SH_GEMM_MAX_KSRC];
  int nx = sh_bw_weights(b, ids[0], wid);
  for (int k = 0; k < nx; k++) {
    const sh_param *w = &g->model->params[wid[k] - 1];
    *macs += (double)rows * (double)w->shape[0] * (double)w->shape[1];
  }
  return true;
}

/* Claims node x for lane l in this check; false: another lane has it. */
static bool claim(sh_bw *b, uint32_t x, uint32_t l) {
  uint32_t v = b->owner_gen << 3 | (l + 1), o = b->owner[x];
  if (o >> 3 == b->owner_gen && o != v) return false;
  b->owner[x] = v;
  return true;
}

/* Whether the lanes touch disjoint nodes: each lane's nodes, their cell
 * states and every input (the nodes whose gradients its rule writes). */
static bool independent(sh_bw *b, const lane *l, uint32_t nl, bool *nomem) {
  const sheaf_graph *g = b->g;
  if (!b->owner) {
    if (!(b->owner = sh_bw_alloc(b, (size_t)(b->n ? b->n : 1) * sizeof *b->owner))) {
      *nomem = true;
      return false;
    }
    memset(b->owner, 0, (size_t)b->n * sizeof *b->owner);
  }
  if (++b->owner_gen >= (1u << 29)) { /* the stamps wrap: start over */
    memset(b->owner, 0, (size_t)b->n * sizeof *b->owner);
    b->owner_gen = 1;
  }
  for (uint32_t k = 0; k < nl; k++)
    for (uint32_t i = 0; i < l[k].n; i++) {
      uint32_t id = l[k].ids[i];
      const sh_node *nd = &g->store.nodes[id];
      if (!claim(b, id, k) || (nd->op != SH_OP_AFFINE && !claim(b, sh_lstm_cell(id), k))) return false;
      for (uint32_t q = 0; q < nd->n_in; q++)
        if (!claim(b, g->store.ins[nd->in + q], k)) return false;
    }
  return true;
}

/* The caller's part before a lane runs: the values its rule reads, the
 * W^T its dX GEMMs use. */
static sheaf_status prefetch(sh_bw *b, const uint32_t *ids, uint32_t n) {
  const sheaf_graph *g = b->g;
  int op = g->store.nodes[ids[0]].op;
  if (op != SH_OP_AFFINE) /* the cells' c inputs: c_prev, or the children's c */
    for (uint32_t i = 0; i < n; i++)
      for (uint32_t q = 1; q < g->store.nodes[ids[i]].n_in; q++)
        if (!sh_bw_val(b, sh_bw_in(b, ids[i], (int)q)))
          return g->status ? g->status : sheaf_ctx_last_status(b->ctx);
  uint32_t wid[SH_GEMM_MAX_KSRC];
  int nx = sh_bw_weights(b, ids[0], wid);
  return sh_bw_lin_prefetch(b, ids, n, nx, wid);
}

static sheaf_status run_lanes(sh_bw *b, lane *l, uint32_t nl) {
  sheaf_graph *g = b->g;
  sheaf_status st;
  for (uint32_t k = 0; k < nl; k++)
    if ((st = prefetch(b, l[k].ids, l[k].n))) return st;
  while ((uint32_t)g->work.n_gemm_ws < nl) { /* lane k uses the graph's workspace k */
    if ((st = sh_gemm_ws_create(b->ctx, &g->work.gemm_ws[g->work.n_gemm_ws]))) return st;
    g->work.n_gemm_ws++;
  }
  for (uint32_t k = 0; k < nl; k++) { /* copies of the pass made after the prefetch (b->wt) */
    l[k].b = *b;
    l[k].b.mem = &g->train_lane[k];
    l[k].b.threads = 1;
    l[k].b.ws = g->work.gemm_ws[k];
    l[k].b.rec = &l[k].rec;
    l[k].rec.used = false;
    l[k].st = SHEAF_OK;
  }
  lane *order[SH_TRAIN_LANES]; /* the pool's tasks: largest first (insertion sort: a handful) */
  for (uint32_t k = 0; k < nl; k++) {
    uint32_t r = k;
    for (; r > 0 && order[r - 1]->macs < l[k].macs; r--) order[r] = order[r - 1];
    order[r] = &l[k];
  }
  sh_pool_run(b->ctx->pool, nl, lane_task, order, b->threads);
  b->lane_depths++;
  b->lanes += nl;
  for (uint32_t k = 0; k < nl; k++) {
    if (l[k].st) return l[k].st;
    if (l[k].rec.used && (st = sh_bw_rec_commit(b, &l[k].rec))) return st;
  }
  return SHEAF_OK;
}

/* Where a bucket splits in two halves of its rows (1 .. n - 1). */
static uint32_t half_at(const sheaf_graph *g, const uint32_t *ids, uint32_t n) {
  int64_t rows = 0, half = 0;
  for (uint32_t i = 0; i < n; i++) rows += g->store.nodes[ids[i]].rows;
  uint32_t s = 0;
  while (s + 1 < n && 2 * (half + g->store.nodes[ids[s]].rows) <= rows) half += g->store.nodes[ids[s++]].rows;
  return s ? s : 1;
}

/* The lanes of a depth: each bucket one, except that a bucket with over
 * 60% of the work (a lone one always) is two halves of its rows, so that
 * no thread carries most of the depth alone; 0: none (too little work, an
 * op that cannot run in a lane, more lanes than SH_TRAIN_LANES, or a
 * heavy bucket of one node). */
static uint32_t plan(const sh_bw *b, const uint32_t *ids, const uint32_t *off, uint32_t nb, lane *l) {
  const sheaf_graph *g = b->g;
  if (b->threads < 2 || nb > SH_TRAIN_LANES || b->rec) return 0;
  double total = 0, big = -1;
  uint32_t kb = 0;
  for (uint32_t k = 0; k < nb; k++) {
    double m = 0;
    if (!lane_op(b, ids + off[k], off[k + 1] - off[k], &m)) return 0;
    total += m;
    if (m > big) big = m, kb = k;
  }
  bool split = big > 0.6 * total;
  if (total < LANE_MIN_MACS ||
      (split && (!splittable(b, ids + off[kb], off[kb + 1] - off[kb]) || nb + 1 > SH_TRAIN_LANES)))
    return 0;
  uint32_t nl = 0;
  for (uint32_t k = 0; k < nb; k++) {
    const uint32_t *bi = ids + off[k];
    uint32_t n = off[k + 1] - off[k], s = split && k == kb ? half_at(g, bi, n) : n;
    l[nl++] = (lane){.ids = bi, .n = s};
    if (s < n) l[nl++] = (lane){.ids = bi + s, .n = n - s};
  }
  for (uint32_t k = 0; k < nl; k++) lane_op(b, l[k].ids, l[k].n, &l[k].macs);
  if (nl % 2 && nl < SH_TRAIN_LANES) { /* an odd one out (the BiLSTM's two directions and the
                                          tagger's affine): its halves go one to each thread */
    uint32_t ks = 0;
    for (uint32_t k = 1; k < nl; k++)
      if (l[k].macs < l[ks].macs) ks = k;
    if (splittable(b, l[ks].ids, l[ks].n)) {
      uint32_t s = half_at(g, l[ks].ids, l[ks].n);
      memmove(&l[ks + 2], &l[ks + 1], (nl - ks - 1) * sizeof *l);
      l[ks + 1] = (lane){.ids = l[ks].ids + s, .n = l[ks].n - s};
      l[ks].n = s;
      l[ks].macs = 0;
      lane_op(b, l[ks].ids, l[ks].n, &l[ks].macs);
      lane_op(b, l[ks + 1].ids, l[ks + 1].n, &l[ks + 1].macs);
      nl++;
    }
  }
  return nl;
}

sheaf_status sh_bw_gemm_depth(sh_bw *b, const uint32_t *ids, const uint32_t *off, uint32_t nb) {
  const sheaf_graph *g = b->g;
  lane l[SH_TRAIN_LANES];
  uint32_t nl = plan(b, ids, off, nb, l);
  bool nomem = false;
  if (nl >= 2 && independent(b, l, nl, &nomem)) return run_lanes(b, l, nl);
  if (nomem) return SHEAF_ERR_NOMEM;
  for (uint32_t k = 0; k < nb; k++) {
    sheaf_status st = sh_bw_rules[g->store.nodes[ids[off[k]]].op](b, ids + off[k], off[k + 1] - off[k]);
    if (st) return st;
  }
  return SHEAF_OK;
}
