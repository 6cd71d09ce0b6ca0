/*
 * ops.h — ragged operators over token matrices: the N = sum(len) tokens of
 * a batch are N rows (sh_gemm_in/out: base + ld, or row pointers when the
 * storage is padded per sequence), never padded to the longest sequence.
 *
 *   linear      y = act(x·Wᵀ + bias) [+ residual]: one GEMM over all tokens
 *               (padding only inside the GEMM's row micro-tiles).
 *   attention   per sequence b and head h, over len[b] only:
 *               out_bh = softmax(scale · Q_bh·K_bhᵀ) · V_bh, fused per block
 *               of query rows (scores live in an L1-sized scratch; the
 *               len×len matrix is never stored). Tasks (sequence, head,
 *               row block) run longest-first over the pool.
 *   layernorm   y = LN(x [+ r]) over rows, split across the pool.
 */
#ifndef SH_RAGGED_OPS_H
#define SH_RAGGED_OPS_H

#include "base/pool.h"
#include "ragged/ragged.h"

/* Query rows per attention task (longer sequences are split into blocks of
 * this many rows so that one long sequence does not serialize the batch). */
#define SH_ATTN_ROW_BLOCK 128

/* ------------------------------------------------------------- linear */

/* One GEMM workspace per pool thread (the row chunks of a linear layer run
 * as separate single-threaded GEMMs, claimed dynamically). */
typedef struct sh_rlin_ws {
  sh_gemm_ws *ws[SH_MAX_THREADS];
} sh_rlin_ws;
void sh_rlin_ws_free(sheaf_ctx *ctx, sh_rlin_ws *ws); /* frees the members only */

/* act < 0: no activation. residual with no rows and no base: none. ws may
 * be NULL (allocated for this call). With several threads and enough rows
 * the N rows are cut into equal chunks of about the GEMM's row block (MC),
 * 2..16 per thread, each a single-threaded GEMM, claimed dynamically (a
 * stalled thread does not hold up half of the layer). */
sheaf_status sh_ragged_linear(sheaf_ctx *ctx, sheaf_isa isa, int threads, int64_t n,
                              sh_gemm_in x, const sh_gemm_packed_b *w, const float *bias,
                              int act, sh_gemm_in residual, sh_gemm_out y, sh_rlin_ws *ws);

/* ---------------------------------------------------------- layernorm */

sheaf_status sh_ragged_layernorm(sheaf_ctx *ctx, sheaf_isa isa, int threads, int64_t n,
                                 int64_t d, sh_gemm_in x, sh_gemm_in r, const float *gamma,
                                 const float *beta, float eps, sh_gemm_out y);

/* ---------------------------------------------------------- attention */

/* Per-thread scratch and the task list, grown on the calling thread only
 * (never inside pool tasks). */
typedef struct sh_attn_ws sh_attn_ws;
sheaf_status sh_attn_ws_create(sheaf_ctx *ctx, sh_attn_ws **out);
void sh_attn_ws_free(sheaf_ctx *ctx, sh_attn_ws *ws);
size_t sh_attn_ws_bytes(const sh_attn_ws *ws);

/* qkv: N rows of [Q | K | V] (each heads*dh wide; row stride ld_qkv), the
 * in-projection's output; out: N rows, head h in columns [h*dh, (h+1)*dh).
 * Sequences of length 0 are skipped. */
sheaf_status sh_ragged_attention(sheaf_ctx *ctx, sheaf_isa isa, int threads, const sh_rseq *s,
                                 int heads, int64_t dh, float scale, const float *qkv,
                                 int64_t ld_qkv, float *out, int64_t ld_out, sh_attn_ws *ws);

/* Multiply-adds the attention kernels execute for one sequence of length L
 * and one head (key columns are computed in panels of SH_GEMM_NR). */
static inline double sh_attn_macs_executed(int64_t L, int64_t dh) {
  int64_t lpad = (L + SH_GEMM_NR - 1) / SH_GEMM_NR * SH_GEMM_NR;
  int64_t dpad = (dh + SH_GEMM_NR - 1) / SH_GEMM_NR * SH_GEMM_NR;
  return (double)L * (double)lpad * (double)dh + (double)L * (double)L * (double)dpad;
}

#endif
