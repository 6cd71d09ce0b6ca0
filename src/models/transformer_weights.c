/*
 * transformer_weights.c — see transformer_weights.h.
 */
#include "models/transformer_weights.h"

#include <math.h>
#include <stdlib.h>

static float *rnd(int64_t n, uint64_t *s, float center, float scale) {
  float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
  for (int64_t i = 0; p && i < n; i++) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    p[i] = center + scale * (float)((double)(*s >> 40) / (double)(1ull << 23) - 1.0);
  }
  return p;
}

/* dst [in, out] = rows row0 .. row0 + out of src [., in], transposed. */
static float *transposed(const float *src, int64_t row0, int64_t out, int64_t in) {
  float *t = malloc((size_t)(in * out) * sizeof *t);
  for (int64_t o = 0; t && o < out; o++)
    for (int64_t i = 0; i < in; i++) t[i * out + o] = src[(row0 + o) * in + i];
  return t;
}

static sheaf_status write_st(sheaf_ctx *ctx, const char *path, int n, const char *const *names,
                             float *const *data, const int64_t (*shapes)[2], const char *const *meta,
                             size_t n_meta) {
  sheaf_tensor *ts[32];
  sheaf_status st = SHEAF_OK;
  int k = 0;
  for (; k < n && !st; k++)
    st = data[k] ? sheaf_tensor_wrap(ctx, SHEAF_F32, shapes[k][1] ? 2 : 1, shapes[k], NULL, data[k], NULL, NULL, &ts[k])
                 : SHEAF_ERR_NOMEM;
  if (st) k--;
  if (!st) st = sheaf_st_write(ctx, path, (size_t)n, names, (const sheaf_tensor *const *)ts, n_meta, meta);
  for (int i = 0; i < k; i++) sheaf_tensor_free(ts[i]);
  return st;
}

sheaf_status sh_transformer_weights(sheaf_ctx *ctx, int64_t V, int D, int F, uint64_t seed,
                                    const char *enc_path, const char *sf_path, float **emb) {
  uint64_t s = seed | 1;
  float sd = 1.0f / sqrtf((float)D);
  float *in_w = rnd(3 * D * D, &s, 0, sd), *in_b = rnd(3 * D, &s, 0, 0.1f), *out_w = rnd(D * D, &s, 0, sd);
  float *out_b = rnd(D, &s, 0, 0.1f), *l1_w = rnd((int64_t)F * D, &s, 0, sd), *l1_b = rnd(F, &s, 0, 0.1f);
  float *l2_w = rnd((int64_t)D * F, &s, 0, 1.0f / sqrtf((float)F)), *l2_b = rnd(D, &s, 0, 0.1f);
  float *n1_w = rnd(D, &s, 1, 0.2f), *n1_b = rnd(D, &s, 0, 0.1f), *n2_w = rnd(D, &s, 1, 0.2f);
  float *n2_b = rnd(D, &s, 0, 0.1f);
  *emb = rnd(V * D, &s, 0, 1.0f);
  const char *enames[] = {"layers.0.self_attn.in_proj_weight", "layers.0.self_attn.in_proj_bias",
                          "layers.0.self_attn.out_proj.weight", "layers.0.self_attn.out_proj.bias",
                          "layers.0.linear1.weight", "layers.0.linear1.bias", "layers.0.linear2.weight",
                          "layers.0.linear2.bias", "layers.0.norm1.weight", "layers.0.norm1.bias",
                          "layers.0.norm2.weight", "layers.0.norm2.bias"};
  float *edata[] = {in_w, in_b, out_w, out_b, l1_w, l1_b, l2_w, l2_b, n1_w, n1_b, n2_w, n2_b};
  const int64_t eshapes[][2] = {{3 * D, D}, {3 * D, 0}, {D, D}, {D, 0}, {F, D}, {F, 0},
                                {D, F},     {D, 0},     {D, 0}, {D, 0}, {D, 0}, {D, 0}};
  const char *meta[] = {"nhead", "4", "activation", "relu", "layer_norm_eps", "1e-05"};
  sheaf_status st = write_st(ctx, enc_path, 12, enames, edata, eshapes, meta, 3);
  float *wq = transposed(in_w, 0, D, D), *wk = transposed(in_w, D, D, D), *wv = transposed(in_w, 2 * D, D, D);
  float *wo = transposed(out_w, 0, D, D), *w1 = transposed(l1_w, 0, F, D), *w2 = transposed(l2_w, 0, D, F);
  const char *snames[] = {"emb", "W_q", "b_q", "W_k", "b_k", "W_v", "b_v", "W_o", "b_o",
                          "W_1", "b_1", "W_2", "b_2", "g1",  "be1", "g2",  "be2"};
  float *sdata[] = {*emb, wq, in_b, wk, in_b + D, wv, in_b + 2 * D, wo, out_b,
                    w1,   l1_b, w2, l2_b, n1_w, n1_b, n2_w, n2_b};
  const int64_t sshapes[][2] = {{V, D}, {D, D}, {D, 0}, {D, D}, {D, 0}, {D, D}, {D, 0}, {D, D}, {D, 0},
                                {D, F}, {F, 0}, {F, D}, {D, 0}, {D, 0}, {D, 0}, {D, 0}, {D, 0}};
  if (!st) st = write_st(ctx, sf_path, 17, snames, sdata, sshapes, NULL, 0);
  float *all[] = {in_w, in_b, out_w, out_b, l1_w, l1_b, l2_w, l2_b, n1_w, n1_b, n2_w, n2_b, wq, wk, wv, wo, w1, w2};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
  return st;
}
