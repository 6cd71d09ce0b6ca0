/*
 * encoder.h — internals of the ragged transformer encoder (public API in
 * sheaf.h: sheaf_encoder_*): per-layer packed weights, the activation
 * workspace, and the cost model the benchmark reports.
 *
 * One post-LN layer over the N packed tokens of a batch (d = d_model):
 *   qkv = x·W_inᵀ + b_in                        [N, 3d]  one GEMM, bias fused
 *   ctx = attention(qkv) per sequence and head  [N, d]   ragged, fused softmax
 *   x1  = LN1(ctx·W_oᵀ + b_o + x)               [N, d]   GEMM + residual fused, LN
 *   h   = act(x1·W_1ᵀ + b_1)                    [N, ff]  GEMM, bias + act fused
 *   y   = LN2(h·W_2ᵀ + b_2 + x1)                [N, d]   GEMM + residual fused, LN
 */
#ifndef SH_RAGGED_ENCODER_H
#define SH_RAGGED_ENCODER_H

#include "ragged/ops.h"

typedef struct sh_enc_layer {
  sh_gemm_packed_b *w_in, *w_out, *w_1, *w_2;
  float *b_in, *b_out, *b_1, *b_2; /* 3d, d, ff, d */
  float *g1, *be1, *g2, *be2;      /* layernorm weights and biases, d each */
} sh_enc_layer;

struct sheaf_encoder {
  sheaf_ctx *ctx;
  int d, heads, ff, n_layers;
  sheaf_encoder_act act;
  float eps;
  sh_enc_layer *layers;
  float *vecs; /* every bias / layernorm vector, one block */
  size_t vecs_bytes;
  /* workspace, grown to the largest batch seen */
  float *act_buf; /* [N, max(3d, ff)] + 3 × [N, d] */
  size_t act_bytes;
  int64_t *offs; /* batch + 1 token offsets */
  size_t offs_bytes;
  float **rows; /* token row pointers of x (then y) when storage-padded */
  size_t rows_bytes;
  sh_rlin_ws gws;
  sh_attn_ws *aws;
};

/* Work and memory of one forward pass over `batch` sequences of the given
 * lengths: multiply-adds of the useful math (dense per sequence), of what
 * Sheaf executes (attention key panels padded to SH_GEMM_NR), and of a
 * padded batch (every sequence at the longest length, as PyTorch's padded
 * path runs); activation bytes Sheaf holds at its peak and the same tensors
 * for the padded batch (including its [B, heads, T, T] attention scores and
 * probabilities). */
typedef struct sh_enc_cost {
  double macs_useful, macs_sheaf, macs_padded;
  double act_bytes_sheaf, act_bytes_padded;
} sh_enc_cost;
void sh_encoder_cost(const sheaf_encoder *enc, int64_t batch, const int64_t *lens, int threads,
                     sh_enc_cost *out);

#endif
