/*
 * train.h — internals of the training module (public API: include/sheaf_train.h):
 * the state of one backward pass (autodiff.c), the derivative rules keyed by
 * op (rules.c: the table generated from kernels/ops.def, so an op without a
 * rule does not compile), and the batched GEMM rules of affines, LSTM cells
 * and matmuls (grad_gemm.c).
 */
#ifndef SH_TRAIN_H
#define SH_TRAIN_H

#include "runtime/runtime.h"
#include "sheaf_train.h"

/* The weight gradients of the pass's GEMM buckets, run at its end as ONE
 * GEMM per set of weights (grad_gemm.c): dW += X^T·dY with K = every row
 * of every bucket of those weights, instead of one small-K GEMM per
 * bucket, each reading and writing all of dW. */
typedef struct sh_bw_seg sh_bw_seg;
typedef struct sh_bw_dw {
  uint32_t wid[SH_GEMM_MAX_KSRC]; /* the weights (parameter ids), nx of them */
  int nx;
  int64_t out, sum_in;            /* dY's columns; the weights' rows together */
  int64_t m;                      /* rows recorded */
  sh_bw_seg *head, *tail;         /* the buckets' rows, in bucket order */
} sh_bw_dw;

/* A bias's deferred gradient: db += the rows of dY of every bucket of the
 * pass that has that bias, in bucket order, one column-split job at the
 * end of the pass (sh_bw_dw_flush): the same sums, in the same order, as
 * adding each bucket's rows when it ran. */
typedef struct sh_bw_bias {
  uint32_t pid;
  int64_t out;
  sh_bw_seg *head, *tail; /* the buckets' dY rows (segments without pieces) */
} sh_bw_bias;

/* What a rule run in a lane (lanes.c) would have appended to the pass's
 * deferred dW and bias lists: kept until the lanes have joined, then
 * appended in bucket order (sh_bw_rec_commit). One linear map a rule. */
typedef struct sh_bw_rec {
  bool used;
  uint32_t wid[SH_GEMM_MAX_KSRC];
  int nx;
  int64_t out, sum_in;
  uint32_t bias;
  sh_bw_seg *seg;   /* the dW rows */
  sh_bw_seg *bseg;  /* the bias rows (bias != 0) */
} sh_bw_rec;

/* Below this many floats a split job (bias sums, dX adds, transposes,
 * concat buckets) runs on the caller: a dispatch costs more than it saves. */
#define SH_BW_PAR_MIN 16384

/* One backward pass over a flushed graph. */
typedef struct sh_bw {
  sheaf_graph *g;
  sheaf_ctx *ctx;
  sh_arena *mem;   /* node gradients and temporaries (g->train: reset at the end of the pass) */
  float **grad;    /* by node id: its gradient (rows * cols floats, row-major) or NULL */
  const float **vals; /* by node id: values read so far (sh_bw_val), those the pass computed itself included */
  uint8_t *req;    /* by node id: bit 0, a gradient must flow into it (it leads to a parameter
                      or a wrt); bit 1, one does (it leads to a loss too) */
  uint32_t n;      /* nodes of the graph */
  uint64_t gemm_buckets; /* GEMM buckets run (each one GEMM for dW, one per input for dX) */
  uint64_t lane_depths, lanes; /* lanes.c: depths run as lanes, and their lanes */
  uint64_t dw_lanes; /* sh_bw_dw_flush ran its jobs side by side */
  const sh_gemm_packed_b **wt; /* by parameter id - 1: W^T packed for dX = dY·W^T, the model's
                                  (sh_model_packed_t; n_wt entries, NULL until used this pass) */
  uint32_t n_wt;
  sh_bw_dw *dw;    /* deferred weight gradients (n_dw, room for cap_dw) */
  uint32_t n_dw, cap_dw;
  sh_bw_bias *bias; /* deferred bias gradients (n_bias, room for cap_bias) */
  uint32_t n_bias, cap_bias;
  int threads;     /* threads the rules may use (the graph's; 1 in a lane) */
  sh_gemm_ws *ws;  /* the rules' GEMM workspace (the graph's first; a lane's own) */
  sh_bw_rec *rec;  /* in a lane: where sh_bw_lin_grads records its rows (NULL: appended) */
  uint32_t *owner; /* lanes.c: by node id, the check and lane that last claimed it */
  uint32_t owner_gen;
} sh_bw;

/* A rule runs the backward of a bucket: n nodes of one op (and, for the
 * GEMM ops, one weight), every one's gradient complete. It adds into the
 * gradients of the nodes' inputs (those with req set) and of parameters. */
typedef sheaf_status (*sh_bw_rule)(sh_bw *b, const uint32_t *ids, uint32_t n);
extern const sh_bw_rule sh_bw_rules[SH_OP_COUNT];

/* Node id's gradient, created zeroed on first use (NULL: out of memory, error set). */
float *sh_bw_grad(sh_bw *b, uint32_t id);
/* The same, except that a gradient created by this call is not zeroed
 * (*fresh: true): the caller writes every element of it (= instead of +=;
 * 0 + s is s, the same value). */
float *sh_bw_grad_fresh(sh_bw *b, uint32_t id, bool *fresh);
/* Node id's forward value, rows * cols contiguous floats (NULL: error set). */
const float *sh_bw_val(sh_bw *b, uint32_t id);
/* The gradient of parameter `pid` (1-based), created zeroed on first use. */
float *sh_bw_param_grad(sh_bw *b, uint32_t pid);
/* Table pid's gradient (as sh_bw_param_grad) for an add into row `row`
 * only: the row is marked
 * (sh_param.grad_rows) so that zeroing and the optimizer can skip the
 * others; NULL: out of memory (error set). */
float *sh_bw_param_grad_row(sh_bw *b, uint32_t pid, int64_t row);
/* Rows of a parameter's grad_rows marks. */
static inline size_t sh_grad_nrows(const sh_param *q) {
  return q->rank == 2 && q->shape[0] > 0 ? (size_t)q->shape[0] : 1;
}
/* Scratch from the pass's arena (NULL: out of memory, error set). */
void *sh_bw_alloc(sh_bw *b, size_t bytes);

/* grad_gemm.c: the GEMM ops' rules (one GEMM per bucket for dW and for dX). */
sheaf_status sh_bw_affine(sh_bw *b, const uint32_t *ids, uint32_t n);
sheaf_status sh_bw_lstm(sh_bw *b, const uint32_t *ids, uint32_t n);
sheaf_status sh_bw_matmul(sh_bw *b, const uint32_t *ids, uint32_t n);
/* dX = dY·W^T (into the inputs' gradients) and dW += X^T·dY (deferred to
 * sh_bw_dw_flush) of a linear map over a bucket: nodes ids[0..n) of rows
 * summing to m, dY as row pointers dyr[m] of `out` columns, inputs
 * 0..nx-1 through weights wid[k], bias `bias` (0: none) gets db += Σ dY. */
sheaf_status sh_bw_lin_grads(sh_bw *b, const uint32_t *ids, uint32_t n, int64_t m, int nx,
                             const uint32_t *wid, uint32_t bias, int64_t out,
                             const float *const *dyr);
/* A cell bucket's pre-activations recomputed (the forward kept no gates):
 * z = x·W + b over the rows of input 0 of nodes ids[0..n) (m in all), by
 * one GEMM with W packed as the forward uses it, into s with row stride
 * ld; ep[0..n_ep) are epilogues after the bias. Shared by the LSTM and
 * tree-LSTM cells' rules. */
sheaf_status sh_bw_cell_gemm(sh_bw *b, const uint32_t *ids, uint32_t n, int64_t m, float *s,
                             int64_t ld, const sh_gemm_ep *ep, int n_ep);
/* grad_tree_lstm.c: the tree-LSTM cell's rule. */
sheaf_status sh_bw_tree_lstm(sh_bw *b, const uint32_t *ids, uint32_t n);

/* What a pass ran (tests): GEMM buckets, the depths whose GEMM buckets ran
 * as lanes (lanes.c) and those lanes, and whether the dW and bias jobs at
 * its end ran side by side. */
typedef struct sh_bw_stats {
  uint64_t gemm_buckets, lane_depths, lanes;
  uint64_t dw_lanes; /* the end of the pass's jobs run side by side (0 or 1) */
} sh_bw_stats;
/* sheaf_backward, also giving the count of GEMM buckets it ran (tests). */
sheaf_status sh_backward(sheaf_graph *g, int n_loss, const sheaf_expr *loss, const sheaf_backward_opts *opts,
                         uint64_t *gemm_buckets);
/* sheaf_backward, also giving its sh_bw_stats (stats may be NULL). */
sheaf_status sh_backward_stats(sheaf_graph *g, int n_loss, const sheaf_expr *loss,
                               const sheaf_backward_opts *opts, sh_bw_stats *stats);

/* Appends a lane's recorded rows to the pass's deferred lists (in the
 * order the lanes' buckets had in the pass). */
sheaf_status sh_bw_rec_commit(sh_bw *b, const sh_bw_rec *r);
/* Reads, on the caller, every value sh_bw_lin_grads will read for the
 * bucket (so that a lane finds them cached in b->vals) and packs the W^T
 * its dX GEMMs use. */
sheaf_status sh_bw_lin_prefetch(sh_bw *b, const uint32_t *ids, uint32_t n, int nx, const uint32_t *wid);
/* A bucket's weights: nx of them into wid (an affine over a stack, or one). */
int sh_bw_weights(const sh_bw *b, uint32_t id, uint32_t *wid);

/* lanes.c: one depth's GEMM buckets (ids[off[k] .. off[k + 1]) is bucket
 * k, nb of them, in the pass's order), side by side on the pool when they
 * are independent and large enough, else one after another. */
sheaf_status sh_bw_gemm_depth(sh_bw *b, const uint32_t *ids, const uint32_t *off, uint32_t nb);

/* Runs the deferred weight-gradient GEMMs (one per set of weights, in the
 * order the sets first appeared). */
sheaf_status sh_bw_dw_flush(sh_bw *b);

/* W^T of parameter `pid` (1-based) packed as a GEMM's B, cached for the pass. */
sheaf_status sh_bw_packed_wt(sh_bw *b, uint32_t pid, const sh_gemm_packed_b **out);

/* shards.c: where a backward bound to gradient shard `shard` writes
 * parameter i's (0-based) gradient: the model's own (shard 0) or the
 * shard's part, reserved first (sh_grad_shard_reserve: room for every
 * parameter; an error recorded when out of memory). */
typedef struct sh_gref {
  float **grad;
  uint8_t **rows;
  bool *whole;
} sh_gref;
sheaf_status sh_grad_shard_reserve(sheaf_model *m, int shard);
sh_gref sh_grad_ref(sheaf_model *m, int shard, uint32_t i);
/* Every extra shard's gradient zeroed and unmarked (sheaf_model_zero_grad). */
void sh_grad_shards_zero(sheaf_model *m);

/* Node i's input k. */
static inline uint32_t sh_bw_in(const sh_bw *b, uint32_t id, int k) {
  return b->g->store.ins[b->g->store.nodes[id].in + (uint32_t)k];
}

#endif
