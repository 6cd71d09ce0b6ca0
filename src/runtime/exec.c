/*
 * exec.c — the batched executor shared by every policy: one call runs a
 * batch (kernel nodes with one signature) as one kernel call. Arguments are
 * built as row-pointer arrays straight from the inputs' values (no gather
 * copy); evenly spaced pointers become base + ld (contiguous), identical ones
 * a broadcast row (a parameter used by every node: reuse). Each batch writes
 * ONE contiguous output block, so the next level's inputs are usually
 * contiguous. Row kernels split their rows over the pool when the batch is
 * large; stack, transpose and row copy values, layer_norm runs the row kernel over
 * the batch. GEMM-based ops (affine, LSTM cell, matmul) are in exec_gemm.c, the
 * tree-LSTM cell in exec_tree_lstm.c.
 */
#include <string.h>

#include "base/pool.h"
#include "kernels/rows.h"
#include "runtime/runtime.h"

/* ------------------------------------------------------------- operands */

sh_gemm_in sh_exec_operand(sheaf_graph *g, const float **rp, int64_t m, int64_t w, bool *same) {
  if (same) *same = false;
  if (m == 1) return (sh_gemm_in){NULL, rp[0], w};
  ptrdiff_t ld = rp[1] - rp[0];
  bool even = true;
  for (int64_t i = 2; i < m && even; i++) even = rp[i] - rp[i - 1] == ld;
  if (even && ld >= w) return (sh_gemm_in){NULL, rp[0], (int64_t)ld};
  if (even && ld == 0 && same) {
    *same = true; /* every row is the same vector */
    return (sh_gemm_in){NULL, rp[0], w};
  }
  g->instr.stats.rows_gathered += (uint64_t)m;
  return (sh_gemm_in){rp, NULL, 0};
}

/* Row pointers of input k of each node. A node contributes its own rows
 * (in_rows: its input's rows); a scalar input of a larger node repeats. */
const float **sh_exec_gather(sheaf_graph *g, const uint32_t *ids, uint32_t n, int k, int64_t m,
                             bool in_rows) {
  const float **rp = sh_arena_alloc(&g->work.scratch, (size_t)m * sizeof *rp);
  if (!rp) return NULL;
  int64_t j = 0;
  for (uint32_t i = 0; i < n; i++) {
    const sh_node *nd = &g->store.nodes[ids[i]];
    uint32_t x = g->store.ins[nd->in + k];
    const float *v = sh_graph_val(g, x);
    if (!v) return NULL;
    const sh_node *xn = &g->store.nodes[x];
    int32_t rows = in_rows ? xn->rows : nd->rows;
    if (!in_rows && xn->rows * xn->cols == 1 && nd->rows * nd->cols > 1)
      for (int32_t r = 0; r < rows; r++) rp[j++] = v;
    else
      for (int32_t r = 0; r < rows; r++) rp[j++] = v + (int64_t)r * xn->ld;
  }
  return rp;
}

float *sh_exec_out_block(sheaf_graph *g, const uint32_t *ids, uint32_t n, int64_t m, int64_t cols) {
  size_t bytes = (size_t)m * (size_t)cols * sizeof(float);
  float *blk = sh_arena_alloc(&g->store.data, bytes);
  if (!blk) return NULL;
  int64_t off = 0;
  for (uint32_t i = 0; i < n; i++) {
    sh_node *nd = &g->store.nodes[ids[i]];
    nd->val = blk + off * cols;
    nd->ld = (int32_t)cols;
    off += nd->rows;
  }
  return blk;
}

/* --------------------------------------------------------- row kernels */

enum { RJ_REDUCE, RJ_SOFTMAX, RJ_LOG_SOFTMAX, RJ_PICK };

typedef struct rowjob {
  sheaf_isa isa;
  int kind, op; /* op: sh_reduce_op */
  int64_t m, n;
  sh_gemm_in x;
  sh_gemm_out y;
  float *out1;        /* RJ_REDUCE / RJ_PICK: one float per row */
  const int32_t *idx; /* RJ_PICK */
  int64_t tasks;
} rowjob;

static inline sh_gemm_in in_at(sh_gemm_in in, int64_t r) {
  if (in.rows)
    in.rows += r;
  else
    in.base += r * in.ld;
  return in;
}
static inline sh_gemm_out out_at(sh_gemm_out o, int64_t r) {
  if (o.rows)
    o.rows += r;
  else
    o.base += r * o.ld;
  return o;
}
static inline const float *in_row(const sh_gemm_in *in, int64_t r) {
  return in->rows ? in->rows[r] : in->base + r * in->ld;
}

static void rowjob_range(const rowjob *j, int64_t r0, int64_t r1) {
  int64_t m = r1 - r0;
  switch (j->kind) {
  case RJ_REDUCE:
    sh_reduce_rows(j->isa, (sh_reduce_op)j->op, m, j->n, in_at(j->x, r0), j->out1 + r0);
    break;
  case RJ_SOFTMAX: sh_softmax_rows(j->isa, m, j->n, 1.0f, in_at(j->x, r0), out_at(j->y, r0)); break;
  case RJ_LOG_SOFTMAX:
    sh_log_softmax_rows(j->isa, m, j->n, in_at(j->x, r0), out_at(j->y, r0));
    break;
  case RJ_PICK:
    for (int64_t r = r0; r < r1; r++) j->out1[r] = in_row(&j->x, r)[j->idx[r]];
    break;
  }
}

static void rowjob_task(void *arg, int64_t task, int tid) {
  const rowjob *j = arg;
  (void)tid;
  int64_t r0 = j->m * task / j->tasks, r1 = j->m * (task + 1) / j->tasks;
  if (r0 < r1) rowjob_range(j, r0, r1);
}

/* Runs a row job, split over the pool when it is large enough to pay. */
static void run_rows(sheaf_graph *g, rowjob *j) {
  uint64_t t0 = sheaf_time_ns();
  j->isa = g->isa;
  if (g->threads > 1 && j->m >= 2 && j->m * j->n >= 32768) {
    j->tasks = j->m < 4 * g->threads ? j->m : 4 * g->threads;
    sh_pool_run(g->ctx->pool, j->tasks, rowjob_task, j, g->threads);
  } else {
    rowjob_range(j, 0, j->m);
  }
  g->instr.stats.ns_kernels += sheaf_time_ns() - t0;
}

/* ------------------------------------------------- stack, transpose, LN */

/* stack, transpose and row: each node's value is a copy of its inputs'
 * values (stack: one row each; row: row `index` of a matrix), into one block. */
static sheaf_status exec_copy(sheaf_graph *g, int op, const uint32_t *ids, uint32_t n, int64_t m) {
  int64_t cols = g->store.nodes[ids[0]].cols;
  float *out = sh_exec_out_block(g, ids, n, m, cols);
  if (!out) return SHEAF_ERR_NOMEM;
  uint64_t t0 = sheaf_time_ns();
  for (uint32_t i = 0; i < n; i++) {
    for (uint32_t k = 0; k < g->store.nodes[ids[i]].n_in; k++) {
      uint32_t x = g->store.ins[g->store.nodes[ids[i]].in + k];
      const float *v = sh_graph_val(g, x);
      if (!v) return g->status ? g->status : SHEAF_ERR_INTERNAL;
      const sh_node *nd = &g->store.nodes[ids[i]], *xn = &g->store.nodes[x];
      if (op == SH_OP_STACK)
        memcpy(nd->val + (int64_t)k * cols, v, (size_t)cols * sizeof(float));
      else if (op == SH_OP_ROW)
        memcpy(nd->val, v + (int64_t)nd->index * xn->ld, (size_t)cols * sizeof(float));
      else /* transpose */
        for (int32_t r = 0; r < xn->rows; r++)
          for (int32_t c = 0; c < xn->cols; c++) nd->val[(int64_t)c * cols + r] = v[(int64_t)r * xn->ld + c];
    }
  }
  g->instr.stats.bytes_copied += (uint64_t)m * (uint64_t)cols * sizeof(float);
  g->instr.stats.ns_kernels += sheaf_time_ns() - t0;
  return SHEAF_OK;
}

/* One sh_layernorm_rows call per run of nodes sharing gamma and beta (the
 * usual case: parameters; the whole batch is one run). */
static sheaf_status exec_layer_norm(sheaf_graph *g, const uint32_t *ids, uint32_t n, int64_t m) {
  const sh_node *n0 = &g->store.nodes[ids[0]];
  int64_t cols = n0->cols;
  float eps = n0->eps;
  const float **rx = sh_exec_gather(g, ids, n, 0, m, true);
  if (!rx) return g->status ? g->status : SHEAF_ERR_NOMEM;
  float *out = sh_exec_out_block(g, ids, n, m, cols);
  if (!out) return SHEAF_ERR_NOMEM;
  uint64_t t0 = sheaf_time_ns();
  int64_t r0 = 0;
  for (uint32_t i = 0; i < n;) {
    const sh_node *nd = &g->store.nodes[ids[i]];
    const float *ga = sh_graph_val(g, g->store.ins[nd->in + 1]),
                *be = sh_graph_val(g, g->store.ins[nd->in + 2]);
    if (!ga || !be) return g->status ? g->status : SHEAF_ERR_INTERNAL;
    int64_t rows = 0;
    uint32_t j = i;
    for (; j < n; j++) {
      const sh_node *q = &g->store.nodes[ids[j]];
      if (j > i && (sh_graph_val(g, g->store.ins[q->in + 1]) != ga ||
                    sh_graph_val(g, g->store.ins[q->in + 2]) != be))
        break;
      rows += g->store.nodes[ids[j]].rows;
    }
    sh_gemm_in x = sh_exec_operand(g, rx + r0, rows, cols, NULL), none = {NULL, NULL, 0};
    sh_layernorm_rows(g->isa, rows, cols, x, none, ga, be, eps, (sh_gemm_out){NULL, out + r0 * cols, cols});
    r0 += rows;
    i = j;
  }
  g->instr.stats.flops += (uint64_t)(8 * m * cols);
  g->instr.stats.ns_kernels += sheaf_time_ns() - t0;
  return SHEAF_OK;
}

/* -------------------------------------------------------------- batches */

static sheaf_status exec_rows(sheaf_graph *g, int op, const uint32_t *ids, uint32_t n, int64_t m) {
  switch (op) {
  case SH_OP_STACK:
  case SH_OP_TRANSPOSE:
  case SH_OP_ROW: return exec_copy(g, op, ids, n, m);
  case SH_OP_LAYER_NORM: return exec_layer_norm(g, ids, n, m);
  default: break;
  }
  const sh_node *n0 = &g->store.nodes[ids[0]];
  int64_t cols = n0->cols;
  rowjob j = {0};
  j.m = m;
  bool red = op == SH_OP_SUM || op == SH_OP_MEAN || op == SH_OP_MAX || op == SH_OP_PICK;
  const float **rx = sh_exec_gather(g, ids, n, 0, m, red);
  if (!rx) return SHEAF_ERR_NOMEM;
  int64_t w = g->store.nodes[g->store.ins[n0->in]].cols;
  j.n = w;
  j.x = sh_exec_operand(g, rx, m, w, NULL);
  if (red) {
    float *out = sh_arena_alloc(&g->store.data, (size_t)m * sizeof(float));
    int32_t *idx = op == SH_OP_PICK ? sh_arena_alloc(&g->work.scratch, (size_t)m * sizeof *idx) : NULL;
    if (!out || (op == SH_OP_PICK && !idx)) return SHEAF_ERR_NOMEM;
    int64_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
      sh_node *nd = &g->store.nodes[ids[i]];
      nd->val = out + off;
      nd->ld = nd->cols;
      int32_t r = g->store.nodes[g->store.ins[nd->in]].rows;
      for (int32_t k = 0; idx && k < r; k++) idx[off + k] = (int32_t)nd->index;
      off += r;
    }
    j.kind = op == SH_OP_PICK ? RJ_PICK : RJ_REDUCE;
    j.op = op == SH_OP_SUM ? SH_REDUCE_SUM : op == SH_OP_MEAN ? SH_REDUCE_MEAN : SH_REDUCE_MAX;
    j.out1 = out;
    j.idx = idx;
    run_rows(g, &j);
    g->instr.stats.flops += (uint64_t)(op == SH_OP_PICK ? m : m * w);
    return SHEAF_OK;
  }
  float *out = sh_exec_out_block(g, ids, n, m, cols);
  if (!out) return SHEAF_ERR_NOMEM;
  j.y = (sh_gemm_out){NULL, out, cols};
  switch (op) {
  case SH_OP_SOFTMAX: j.kind = RJ_SOFTMAX; break;
  case SH_OP_LOG_SOFTMAX: j.kind = RJ_LOG_SOFTMAX; break;
  default:
    return sh_fail(g->ctx, SHEAF_ERR_INTERNAL, "internal error: no kernel for op %s",
                   sh_op_name(op));
  }
  run_rows(g, &j);
  g->instr.stats.flops += (uint64_t)(m * cols);
  return SHEAF_OK;
}

sheaf_status sh_exec_batch(sheaf_graph *g, uint32_t sig, const uint32_t *ids, uint32_t n) {
  /* rewinding to a mark taken on an empty arena would free its chunk: keep one */
  if (SH_UNLIKELY(!g->work.scratch.head) && !sh_arena_alloc(&g->work.scratch, SH_ARENA_ALIGN))
    return SHEAF_ERR_NOMEM;
  sh_arena_mark mark = sh_arena_get_mark(&g->work.scratch);
  uint64_t t0 = g->instr.trace_path ? sheaf_time_ns() : 0;
  int op = g->store.nodes[ids[0]].op;
  bool red = op == SH_OP_SUM || op == SH_OP_MEAN || op == SH_OP_MAX || op == SH_OP_PICK;
  int64_t m = 0;
  for (uint32_t i = 0; i < n; i++) {
    const sh_node *nd = &g->store.nodes[ids[i]];
    m += red ? g->store.nodes[g->store.ins[nd->in]].rows : nd->rows;
  }
  sheaf_status st;
  switch (op) {
  case SH_OP_AFFINE: st = sh_exec_affine(g, sig, ids, n, m); break;
  case SH_OP_LSTM: st = sh_exec_lstm(g, sig, ids, n, m); break;
  case SH_OP_TREE_LSTM: st = sh_exec_tree_lstm(g, sig, ids, n, m); break;
  case SH_OP_MATMUL: st = sh_exec_matmul(g, ids, n); break;
  case SH_OP_KCALL: {
    const sh_kcall_desc *d = g->store.nodes[ids[0]].kcall;
    st = d->run(g, d, ids, n);
    break;
  }
  default: st = sh_op_is_pw(op) ? sh_exec_pw(g, ids, n, m) : exec_rows(g, op, ids, n, m); break;
  }
  sh_arena_rewind(&g->work.scratch, mark);
  if (st) {
    if (g->status) return g->status;
    if (st != SHEAF_ERR_NOMEM) return st;
    char why[256]; /* the allocator's message: out of memory, or over the budget */
    sh_last_error_copy(g->ctx, why, sizeof why);
    return sh_fail(g->ctx, st, "running a batch of %u '%s': %s", n, g->sigs.at[sig].name, why);
  }
  for (uint32_t i = 0; i < n; i++) g->store.nodes[ids[i]].done = true;
  g->instr.stats.batches++;
  g->sigs.at[sig].batches++;
  g->sigs.at[sig].nodes += n;
  if (g->instr.trace_path)
    sh_trace_record(g, sig, n, g->instr.cur_depth, g->instr.cur_phase, t0, sheaf_time_ns());
  return SHEAF_OK;
}
