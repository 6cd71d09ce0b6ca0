/*
 * exec_gemm.c — batches that run on the GEMM: affine (weights packed once
 * per model; the pieces of a concat input are K-split sources read through
 * row pointers, so [h_l ; h_r] costs no copy; bias and a fused activation in
 * the epilogue; the pointwise programs that read its rows in the GEMM's row
 * hook, see pw_exec.c), the LSTM cell (gate-interleaved weights, the whole cell
 * tail in the GEMM's store) and matmul between two expressions (one small
 * product per node, nodes spread over the pool).
 */
#include <string.h>

#include "base/pool.h"
#include "kernels/rows.h"
#include "runtime/runtime.h"

/* Prefetches the batch's affine nodes, their side entries, their input ids
 * and first inputs: built long before (the GEMMs since have streamed
 * megabytes of weights), they come from L3; asking for all of them at once
 * overlaps the misses. */
static void prefetch_inputs(const sheaf_graph *g, const uint32_t *ids, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) __builtin_prefetch(&g->store.nodes[ids[i]]);
  for (uint32_t i = 0; i < n; i++) {
    __builtin_prefetch(sh_affine_of(g, ids[i]));
    __builtin_prefetch(g->store.ins + g->store.nodes[ids[i]].in);
  }
  for (uint32_t i = 0; i < n; i++)
    __builtin_prefetch(&g->store.nodes[g->store.ins[g->store.nodes[ids[i]].in]]);
  for (uint32_t i = 0; i < n; i++) { /* the pieces of a concat input */
    const sh_node *x = &g->store.nodes[g->store.ins[g->store.nodes[ids[i]].in]];
    if (x->op != SH_OP_CONCAT) continue;
    for (uint32_t k = 0; k < x->n_in && k < SH_GEMM_MAX_KSRC; k++)
      __builtin_prefetch(&g->store.nodes[g->store.ins[x->in + k]]);
  }
}

/* The K-split sources of a batch: inputs [0, n_x) of each node, split into
 * their concat pieces as the signature says (or read whole). */
sheaf_status sh_exec_gemm_sources(sheaf_graph *g, const sh_sig_key *k, const uint32_t *ids,
                                  uint32_t n, int n_x, int64_t m, sh_gemm_args *a) {
  int ns = k->n_w;
  const float **rp[SH_GEMM_MAX_KSRC];
  for (int s = 0; s < ns; s++) {
    rp[s] = sh_arena_alloc(&g->work.scratch, (size_t)m * sizeof *rp[s]);
    if (!rp[s]) return SHEAF_ERR_NOMEM;
  }
  int64_t j = 0;
  for (uint32_t i = 0; i < n; i++) {
    const sh_node *nd = &g->store.nodes[ids[i]];
    uint32_t pc[SH_GEMM_MAX_KSRC];
    int np = 0;
    for (int x = 0; x < n_x; x++) {
      uint32_t xid = g->store.ins[nd->in + x];
      if (k->mat)
        pc[np++] = xid;
      else
        np = sh_pieces(g, xid, pc, np, SH_GEMM_MAX_KSRC);
    }
    if (np != ns)
      return sh_fail(g->ctx, SHEAF_ERR_INTERNAL, "internal error: %d pieces, signature has %d", np,
                     ns);
    int32_t rows = nd->rows;
    for (int s = 0; s < ns; s++) {
      const float *v = sh_graph_val(g, pc[s]);
      if (!v) return g->status ? g->status : SHEAF_ERR_INTERNAL;
      int64_t ld = g->store.nodes[pc[s]].ld;
      for (int32_t r = 0; r < rows; r++) rp[s][j + r] = v + r * ld;
    }
    j += rows;
  }
  a->n_src = ns;
  for (int s = 0; s < ns; s++) {
    a->src[s].k = k->w[s];
    a->src[s].in = sh_exec_operand(g, rp[s], m, k->w[s], NULL);
  }
  return SHEAF_OK;
}

static sheaf_status gemm(sheaf_graph *g, const sh_gemm_args *a) {
  uint64_t t0 = sheaf_time_ns();
  sheaf_status st = sh_gemm(g->ctx, g->isa, g->threads, a);
  g->instr.stats.ns_kernels += sheaf_time_ns() - t0;
  return st;
}

/* k: the batch's signature key (its K-split pieces). */
static sheaf_status affine_run(sheaf_graph *g, const sh_sig_key *k, const uint32_t *ids, uint32_t n,
                               int64_t m, bool raw_only) {
  const sh_node *n0 = &g->store.nodes[ids[0]];
  const sh_affine_node *a0 = sh_affine_of(g, ids[0]);
  const sh_gemm_packed_b *pb;
  sheaf_status st = n0->n_in == 1 ? sh_model_packed(g->model, n0->lin.w, false, &pb)
                                  : sh_model_stack_packed(g->model, n0->lin.w, &pb);
  if (st) return st;
  sh_gemm_args a = {0};
  a.m = m;
  a.b_packed = pb;
  a.ws = g->work.gemm_ws[0];
  prefetch_inputs(g, ids, n);
  st = sh_exec_gemm_sources(g, k, ids, n, n0->n_in, m, &a);
  if (st) return st;
  int64_t cols = n0->cols;
  if (n0->lin.b) {
    a.ep[a.n_ep++] = (sh_gemm_ep){SH_GEMM_EP_BIAS, 0, 0, 0, g->model->params[n0->lin.b - 1].data, {0}};
  }
  /* fused activation ranges: in the epilogue when every node has the same
   * ones and none needs its raw value; else applied after, into blocks */
  const sh_fuse *fz = g->affine.range;
  bool uniform = !raw_only && a0->n_act;
  for (uint32_t i = 0; i < n && uniform; i++) {
    /* ahead: the side entries, then their first ranges (old nodes: misses) */
    if (i + 8 < n) __builtin_prefetch(sh_affine_of(g, ids[i + 8]));
    if (i + 4 < n && sh_affine_of(g, ids[i + 4])->act != SH_NONE)
      __builtin_prefetch(&fz[sh_affine_of(g, ids[i + 4])->act]);
    const sh_affine_node *ai = sh_affine_of(g, ids[i]);
    if (ai->n_act != a0->n_act || ai->raw_used) uniform = false;
    for (uint32_t r = ai->act, r0 = a0->act; uniform && r != SH_NONE; r = fz[r].next, r0 = fz[r0].next)
      uniform = fz[r].c0 == fz[r0].c0 && fz[r].c1 == fz[r0].c1 && fz[r].act == fz[r0].act;
  }
  for (uint32_t r = a0->act; uniform && r != SH_NONE; r = fz[r].next)
    a.ep[a.n_ep++] = (sh_gemm_ep){SH_GEMM_EP_ACT, fz[r].c0, fz[r].c1, (sh_gemm_act)fz[r].act, NULL, {0}};
  float *blk = sh_exec_out_block(g, ids, n, m, cols);
  if (!blk) return SHEAF_ERR_NOMEM;
  a.c = (sh_gemm_out){NULL, blk, cols};
  /* activations in the epilogue: their aliases are views of the block */
  bool post = false; /* activations applied after the GEMM */
  for (uint32_t i = 0; i < n && !raw_only; i++) {
    const sh_node *nd = &g->store.nodes[ids[i]];
    sh_affine_node *ai = sh_affine_of(g, ids[i]);
    if (!ai->n_act) continue;
    post |= !uniform;
    if (uniform) ai->val_is_act = true;
    for (uint32_t r = ai->act; uniform && r != SH_NONE; r = fz[r].next) {
      sh_node *al = &g->store.nodes[fz[r].alias];
      al->val = nd->val + fz[r].c0;
      al->ld = nd->ld;
    }
  }
  /* pointwise roots reading these rows run in the GEMM's row hook */
  /* (sh_gemm calls the hook as rows become final, or, when it splits N
   * over the threads, after the product in row blocks over the same threads) */
  sh_pw_hook *hook = NULL;
  if (g->policy == SHEAF_POLICY_SHEAF && !raw_only && !post) {
    st = sh_pw_hook_plan(g, ids, n, m, &hook);
    if (st) return st;
    if (hook) {
      a.rows_done = sh_pw_hook_rows;
      a.rows_done_arg = hook;
    }
  }
  st = gemm(g, &a);
  if (st) return st;
  g->instr.stats.flops += 2 * (uint64_t)m * (uint64_t)pb->k * (uint64_t)cols;
  if (hook) sh_pw_hook_done(g, hook);
  if (raw_only) {
    sh_affine_of(g, ids[0])->val_is_act = false;
    return SHEAF_OK;
  }
  if (!post) return SHEAF_OK;
  uint64_t t0 = sheaf_time_ns();
  for (uint32_t i = 0; i < n; i++) {
    const sh_node *nd = &g->store.nodes[ids[i]];
    for (uint32_t r = sh_affine_of(g, ids[i])->act; r != SH_NONE; r = fz[r].next) {
      sh_node *al = &g->store.nodes[fz[r].alias];
      int64_t w = fz[r].c1 - fz[r].c0;
      float *out = sh_arena_alloc(&g->store.data, (size_t)nd->rows * (size_t)w * sizeof(float));
      if (!out) return SHEAF_ERR_NOMEM;
      sh_ew_act(g->isa, (sh_gemm_act)fz[r].act, nd->rows, w,
                (sh_gemm_in){NULL, nd->val + fz[r].c0, nd->ld}, (sh_gemm_out){NULL, out, w});
      al->val = out;
      al->ld = (int32_t)w;
    }
  }
  g->instr.stats.ns_kernels += sheaf_time_ns() - t0;
  return SHEAF_OK;
}

sheaf_status sh_exec_affine(sheaf_graph *g, uint32_t sig, const uint32_t *ids, uint32_t n,
                            int64_t m) {
  return affine_run(g, &g->sigs.at[sig].key, ids, n, m, false);
}

sheaf_status sh_exec_affine_raw(sheaf_graph *g, uint32_t id) {
  sh_sig_key k; /* the key its batch had (the same inputs, the same pieces) */
  sh_sig_key_of(g, &g->store.nodes[id], &k);
  sh_arena_mark mark = sh_arena_get_mark(&g->work.scratch);
  sheaf_status st = affine_run(g, &k, &id, 1, g->store.nodes[id].rows, true);
  sh_arena_rewind(&g->work.scratch, mark);
  if (st) {
    char e[SH_ERR_MAX];
    return sh_graph_fail(g, st, "sheaf_value: %s", sh_last_error_copy(g->ctx, e, sizeof e));
  }
  return SHEAF_OK;
}

/* ------------------------------------------------------------ LSTM cell */

const float *sh_exec_zero_row(sheaf_graph *g, int64_t n) {
  if (g->work.n_zeros < n) {
    float *z = sh_calloc(g->ctx, (size_t)n, sizeof(float));
    if (!z) return NULL;
    sh_free(g->ctx, g->work.zeros, (size_t)g->work.n_zeros * sizeof(float));
    g->work.zeros = z;
    g->work.n_zeros = n;
  }
  return g->work.zeros;
}

sheaf_status sh_exec_lstm(sheaf_graph *g, uint32_t sig, const uint32_t *ids, uint32_t n,
                          int64_t m) {
  const sh_node *n0 = &g->store.nodes[ids[0]];
  const sh_gemm_packed_b *pb;
  sheaf_status st = sh_model_packed(g->model, n0->lin.w, true, &pb);
  if (st) return st;
  int64_t hid = n0->cols;
  sh_gemm_args a = {0};
  a.m = m;
  a.b_packed = pb;
  a.ws = g->work.gemm_ws[0];
  st = sh_exec_gemm_sources(g, &g->sigs.at[sig].key, ids, n, 1, m, &a);
  if (st) return st;
  sh_gemm_lstm l = {0};
  l.gate_i = 0, l.gate_f = 1, l.gate_u = 2, l.gate_o = 3; /* PyTorch order i, f, g, o */
  l.bias = n0->lin.b ? g->model->params[n0->lin.b - 1].data : NULL;
  uint32_t with_c = 0;
  for (uint32_t i = 0; i < n; i++) with_c += g->store.nodes[ids[i]].n_in == 2;
  if (with_c) {
    const float **rp = sh_arena_alloc(&g->work.scratch, (size_t)m * sizeof *rp);
    const float *z = with_c < n ? sh_exec_zero_row(g, hid) : NULL;
    if (!rp || (with_c < n && !z)) return SHEAF_ERR_NOMEM;
    int64_t j = 0;
    for (uint32_t i = 0; i < n; i++) {
      const sh_node *nd = &g->store.nodes[ids[i]];
      const float *v = z;
      int64_t ld = 0;
      if (nd->n_in == 2) {
        uint32_t c = g->store.ins[nd->in + 1];
        if (!(v = sh_graph_val(g, c))) return g->status ? g->status : SHEAF_ERR_INTERNAL;
        ld = g->store.nodes[c].ld;
      }
      for (int32_t r = 0; r < nd->rows; r++) rp[j++] = v + r * ld;
    }
    l.c_prev = sh_exec_operand(g, rp, m, hid, NULL);
  }
  float *h = sh_exec_out_block(g, ids, n, m, hid);
  float *c = sh_arena_alloc(&g->store.data, (size_t)m * (size_t)hid * sizeof(float));
  if (!h || !c) return SHEAF_ERR_NOMEM;
  int64_t off = 0;
  for (uint32_t i = 0; i < n; i++) {
    const sh_node *nd = &g->store.nodes[ids[i]];
    sh_node *cn = &g->store.nodes[sh_lstm_cell(ids[i])];
    cn->val = c + off * hid;
    cn->ld = (int32_t)hid;
    cn->done = true;
    off += nd->rows;
  }
  l.c_out = (sh_gemm_out){NULL, c, hid};
  l.h_out = (sh_gemm_out){NULL, h, hid};
  if (g->saved.keep || g->saved.cap) { /* training: the gates for the backward */
    sh_saved *sv = &g->saved;
    uint32_t top = 0;
    for (uint32_t i = 0; i < n; i++) top = ids[i] > top ? ids[i] : top;
    if ((st = sh_side_reserve(g->ctx, (void **)&sv->lstm_gates, &sv->cap, top, sizeof(float *))))
      return st;
    float *gs = NULL;
    if (sv->keep) {
      if (!(gs = sh_arena_alloc(&g->store.data, (size_t)m * 5 * (size_t)hid * sizeof(float))))
        return SHEAF_ERR_NOMEM;
      a.lstm_gates = (sh_gemm_out){NULL, gs, 5 * hid};
    }
    off = 0;
    for (uint32_t i = 0; i < n; i++) {
      sv->lstm_gates[ids[i]] = gs ? gs + off * 5 * hid : NULL;
      off += g->store.nodes[ids[i]].rows;
    }
  }
  a.lstm = &l;
  st = gemm(g, &a);
  g->instr.stats.flops +=
      2 * (uint64_t)m * (uint64_t)pb->k * (uint64_t)(4 * hid) + 10 * (uint64_t)(m * hid);
  return st;
}

/* --------------------------------------------------------------- matmul */

typedef struct mm_job {
  sheaf_graph *g;
  const uint32_t *ids;
} mm_job;

/* Dot product with 16 independent partial sums (the compiler vectorizes
 * it; a single running sum would serialize on the add latency). */
/* y = a·b for one node: a [r, k] (row stride lda), b [k, c] (stride ldb)
 * or a vector [k]; y contiguous (kernels/gemm_small.c). */
static void mm_node(sheaf_graph *g, uint32_t id) {
  const sh_node *nd = &g->store.nodes[id];
  const sh_node *an = &g->store.nodes[g->store.ins[nd->in]],
                *bn = &g->store.nodes[g->store.ins[nd->in + 1]];
  if (bn->rank == 1)
    sh_f32_small_mv(g->isa, an->rows, an->cols, an->val, an->ld, bn->val, nd->val);
  else
    sh_f32_small_mm(g->isa, an->rows, an->cols, bn->cols, an->val, an->ld, bn->val, bn->ld, nd->val);
}

static void mm_task(void *arg, int64_t task, int tid) {
  const mm_job *j = arg;
  (void)tid;
  mm_node(j->g, j->ids[task]);
}

sheaf_status sh_exec_matmul(sheaf_graph *g, const uint32_t *ids, uint32_t n) {
  size_t total = 0;
  uint64_t flops = 0;
  for (uint32_t i = 0; i < n; i++) {
    const sh_node *nd = &g->store.nodes[ids[i]];
    total += (size_t)nd->rows * (size_t)nd->cols;
    for (int k = 0; k < 2; k++)
      if (!sh_graph_val(g, g->store.ins[nd->in + k])) return g->status ? g->status : SHEAF_ERR_INTERNAL;
    flops += 2 * (uint64_t)nd->rows * (uint64_t)nd->cols *
             (uint64_t)g->store.nodes[g->store.ins[nd->in]].cols;
  }
  float *blk = sh_arena_alloc(&g->store.data, total * sizeof(float));
  if (!blk) return SHEAF_ERR_NOMEM;
  size_t off = 0;
  for (uint32_t i = 0; i < n; i++) {
    sh_node *nd = &g->store.nodes[ids[i]];
    nd->val = blk + off;
    nd->ld = nd->cols;
    off += (size_t)nd->rows * (size_t)nd->cols;
  }
  uint64_t t0 = sheaf_time_ns();
  mm_job j = {g, ids};
  if (n > 1 && g->threads > 1 && flops >= 65536)
    sh_pool_run(g->ctx->pool, n, mm_task, &j, g->threads);
  else
    for (uint32_t i = 0; i < n; i++) mm_node(g, ids[i]);
  g->instr.stats.ns_kernels += sheaf_time_ns() - t0;
  g->instr.stats.flops += flops;
  return SHEAF_OK;
}
