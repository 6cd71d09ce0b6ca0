/*
 * gemm_scalar.c — the portable reference level of the GEMM: a 4x32
 * micro-kernel in plain C and the scalar epilogue (bias, activations,
 * elementwise ops, LSTM cell tail). Every other level is tested against the
 * same results.
 */
#include <math.h>

#include "kernels/gemm.h"
#include "kernels/vmath.h"

void sh_f32_gemm_ukernel_4x32__scalar(int64_t rows, int64_t cols, int64_t kc, const float *a,
                                      const float *b, int64_t ldb, float *const *c,
                                      bool accumulate) {
  float acc[4][SH_GEMM_NR];
  for (int64_t r = 0; r < 4; r++)
    for (int64_t j = 0; j < SH_GEMM_NR; j++) acc[r][j] = 0.0f;
  for (int64_t k = 0; k < kc; k++) {
    const float *bk = b + k * ldb;
    for (int64_t r = 0; r < rows; r++) {
      float av = a[k * rows + r];
      for (int64_t j = 0; j < SH_GEMM_NR; j++) acc[r][j] += av * bk[j];
    }
  }
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < cols; j++) c[r][j] = accumulate ? c[r][j] + acc[r][j] : acc[r][j];
}

void sh_f32_gemm_pack_a__scalar(int64_t rows, int64_t len, const float *const *src, float *dst) {
  for (int64_t r = 0; r < rows; r++) {
    const float *s = src[r];
    float *d = dst + r;
    for (int64_t k = 0; k < len; k++) d[k * rows] = s[k];
  }
}

static inline const float *in_row(const sh_gemm_in *in, int64_t m) {
  return in->rows ? in->rows[m] : in->base + m * in->ld;
}
static inline float *out_row(const sh_gemm_out *o, int64_t m) {
  return o->rows ? o->rows[m] : o->base + m * o->ld;
}

static float act_scalar(sh_gemm_act act, float x) {
  switch (act) {
  case SH_GEMM_ACT_RELU: return x > 0.0f ? x : 0.0f;
  case SH_GEMM_ACT_SIGMOID: return sh_sigmoid_ref(x);
  case SH_GEMM_ACT_TANH: return tanhf(x);
  case SH_GEMM_ACT_GELU_TANH: return sh_gelu_tanh_ref(x);
  case SH_GEMM_ACT_GELU_ERF: return sh_gelu_erf_ref(x);
  }
  return x;
}

void sh_gemm_epilogue__scalar(const sh_gemm_ep_ctx *e, float *t, int64_t m0, int64_t rows,
                              int64_t col0, int64_t cols) {
  const sh_gemm_args *a = e->args;
  if (a->lstm) {
    const sh_gemm_lstm *l = a->lstm;
    int64_t H = e->hidden, h0 = col0 / SH_GEMM_LSTM_W * SH_GEMM_LSTM_G;
    int64_t hv = H - h0 < SH_GEMM_LSTM_G ? H - h0 : SH_GEMM_LSTM_G;
    const sh_gemm_out *gso = &a->lstm_gates; /* a training forward's gates */
    bool has_prev = l->c_prev.rows || l->c_prev.base, save = gso->rows || gso->base;
    for (int64_t r = 0; r < rows; r++) {
      const float *tr = t + r * SH_GEMM_LSTM_W;
      const float *cp = has_prev ? in_row(&l->c_prev, m0 + r) + h0 : NULL;
      float *co = out_row(&l->c_out, m0 + r) + h0, *ho = out_row(&l->h_out, m0 + r) + h0;
      float *so = save ? out_row(gso, m0 + r) + h0 : NULL;
      for (int64_t j = 0; j < hv; j++) {
        float z[4];
        for (int g = 0; g < 4; g++)
          z[g] = tr[g * SH_GEMM_LSTM_G + j] + (l->bias ? l->bias[g * H + h0 + j] : 0.0f);
        float i = sh_sigmoid_ref(z[l->gate_i]), f = sh_sigmoid_ref(z[l->gate_f]);
        float o = sh_sigmoid_ref(z[l->gate_o]), u = tanhf(z[l->gate_u]);
        float c = i * u + (cp ? f * cp[j] : 0.0f);
        float tc = tanhf(c);
        co[j] = c;
        ho[j] = o * tc;
        if (so) so[j] = i, so[H + j] = f, so[2 * H + j] = u, so[3 * H + j] = o, so[4 * H + j] = tc;
      }
    }
    return;
  }
  if (a->gru) {
    const sh_gemm_gru *g = a->gru;
    int64_t H = e->hidden, h0 = col0 / SH_GEMM_LSTM_W * SH_GEMM_LSTM_G;
    int64_t hv = H - h0 < SH_GEMM_LSTM_G ? H - h0 : SH_GEMM_LSTM_G;
    bool has_prev = g->h_prev.rows || g->h_prev.base;
    for (int64_t r = 0; r < rows; r++) {
      const float *tr = t + r * SH_GEMM_LSTM_W;
      const float *hp = has_prev ? in_row(&g->h_prev, m0 + r) + h0 : NULL;
      float *ho = out_row(&g->h_out, m0 + r) + h0;
      for (int64_t j = 0; j < hv; j++) {
        float z[4];
        for (int q = 0; q < 4; q++)
          z[q] = tr[q * SH_GEMM_LSTM_G + j] + (g->bias ? g->bias[q * H + h0 + j] : 0.0f);
        float rg = sh_sigmoid_ref(z[g->gate_r]), u = sh_sigmoid_ref(z[g->gate_z]);
        float n = tanhf(z[g->gate_nx] + rg * z[g->gate_nh]);
        ho[j] = (1.0f - u) * n + (hp ? u * hp[j] : 0.0f);
      }
    }
    return;
  }
  if (a->accumulate)
    for (int64_t r = 0; r < rows; r++) {
      const float *cr = out_row(&a->c, m0 + r) + col0;
      for (int64_t j = 0; j < cols; j++) t[r * SH_GEMM_NR + j] += cr[j];
    }
  for (int i = 0; i < a->n_ep; i++) {
    const sh_gemm_ep *op = &a->ep[i];
    int64_t n1 = op->n1 <= 0 ? e->n : op->n1;
    int64_t lo = op->n0 > col0 ? op->n0 : col0, hi = n1 < col0 + cols ? n1 : col0 + cols;
    if (lo >= hi) continue;
    for (int64_t r = 0; r < rows; r++) {
      float *tr = t + r * SH_GEMM_NR - col0;
      const float *o = (op->kind == SH_GEMM_EP_ADD || op->kind == SH_GEMM_EP_MUL)
                           ? in_row(&op->other, m0 + r)
                           : NULL;
      for (int64_t j = lo; j < hi; j++) {
        switch (op->kind) {
        case SH_GEMM_EP_BIAS: tr[j] += op->vec[j]; break;
        case SH_GEMM_EP_ACT: tr[j] = act_scalar(op->act, tr[j]); break;
        case SH_GEMM_EP_ADD: tr[j] += o[j]; break;
        case SH_GEMM_EP_MUL: tr[j] *= o[j]; break;
        }
      }
    }
  }
  for (int64_t r = 0; r < rows; r++) {
    float *cr = out_row(&a->c, m0 + r) + col0;
    for (int64_t j = 0; j < cols; j++) cr[j] = t[r * SH_GEMM_NR + j];
  }
}
