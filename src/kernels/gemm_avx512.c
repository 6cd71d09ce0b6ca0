/*
 * gemm_avx512.c — AVX-512 level of the GEMM: the micro-kernel (up to 14 rows
 * × 32 columns: 28 zmm accumulators, 2 B vectors per k, A broadcast from
 * memory; one instantiation per row count so a short micro-panel wastes no
 * FMAs; masked column tails), the A packer (16×16 register transposes) and
 * the fused LSTM / GRU tails (fast sigmoid on AVX-512VL). Zen 4 runs a
 * 512-bit FMA as two 256-bit halves, so the gain over AVX2 is the 32
 * registers (fewer loads per FMA), not the width.
 */
#include "kernels/gemm.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define AVX512_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))

static inline AVX512_FN __attribute__((always_inline)) void ukr(const int MR, int64_t cols,
                                                                int64_t kc, const float *a,
                                                                const float *b, int64_t ldb,
                                                                float *const *c, bool accumulate) {
  __m512 acc0[14], acc1[14];
  _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++) acc0[r] = acc1[r] = _mm512_setzero_ps();
  int64_t k = 0;
  if (MR == 1) { /* GEMV-like: two chains per column half hide the FMA latency */
    __m512 e0 = _mm512_setzero_ps(), e1 = e0;
    for (; k + 2 <= kc; k += 2) {
      acc0[0] = _mm512_fmadd_ps(_mm512_set1_ps(a[0]), _mm512_load_ps(b), acc0[0]);
      acc1[0] = _mm512_fmadd_ps(_mm512_set1_ps(a[0]), _mm512_load_ps(b + 16), acc1[0]);
      e0 = _mm512_fmadd_ps(_mm512_set1_ps(a[1]), _mm512_load_ps(b + ldb), e0);
      e1 = _mm512_fmadd_ps(_mm512_set1_ps(a[1]), _mm512_load_ps(b + ldb + 16), e1);
      a += 2;
      b += 2 * ldb;
    }
    acc0[0] = _mm512_add_ps(acc0[0], e0);
    acc1[0] = _mm512_add_ps(acc1[0], e1);
  }
  for (; k < kc; k++) {
    __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
    _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++) {
      __m512 av = _mm512_set1_ps(a[r]);
      acc0[r] = _mm512_fmadd_ps(av, b0, acc0[r]);
      acc1[r] = _mm512_fmadd_ps(av, b1, acc1[r]);
    }
    a += MR;
    b += ldb;
  }
  if (cols == SH_GEMM_NR) {
    _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++) {
      float *cr = c[r];
      if (accumulate) {
        acc0[r] = _mm512_add_ps(acc0[r], _mm512_loadu_ps(cr));
        acc1[r] = _mm512_add_ps(acc1[r], _mm512_loadu_ps(cr + 16));
      }
      _mm512_storeu_ps(cr, acc0[r]);
      _mm512_storeu_ps(cr + 16, acc1[r]);
    }
  } else {
    __mmask16 m0 = cols >= 16 ? 0xffff : (__mmask16)((1u << cols) - 1);
    __mmask16 m1 = cols <= 16 ? 0 : (__mmask16)((1u << (cols - 16)) - 1);
    _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++) {
      float *cr = c[r];
      if (accumulate) {
        acc0[r] = _mm512_add_ps(acc0[r], _mm512_maskz_loadu_ps(m0, cr));
        acc1[r] = _mm512_add_ps(acc1[r], _mm512_maskz_loadu_ps(m1, cr + 16));
      }
      _mm512_mask_storeu_ps(cr, m0, acc0[r]);
      _mm512_mask_storeu_ps(cr + 16, m1, acc1[r]);
    }
  }
}

#define UKR_CASE(n) \
  case n: ukr(n, cols, kc, a, b, ldb, c, accumulate); break;

AVX512_FN void sh_f32_gemm_ukernel_14x32__avx512(int64_t rows, int64_t cols, int64_t kc,
                                                 const float *a, const float *b, int64_t ldb,
                                                 float *const *c, bool accumulate) {
  switch (rows) {
    UKR_CASE(1) UKR_CASE(2) UKR_CASE(3) UKR_CASE(4) UKR_CASE(5) UKR_CASE(6) UKR_CASE(7)
    UKR_CASE(8) UKR_CASE(9) UKR_CASE(10) UKR_CASE(11) UKR_CASE(12) UKR_CASE(13) UKR_CASE(14)
  default: break;
  }
}

/* ---------------------------------------------------------- pack A */

/* dst[k*rows + r] = src[r][k] for r < rows (<= 16), k < len: 16 × 16 blocks
 * transposed in registers, written as `rows`-float masked rows. Reads only
 * src[r][0..len). */
AVX512_FN void sh_f32_gemm_pack_a__avx512(int64_t rows, int64_t len, const float *const *src,
                                          float *dst) {
  const __mmask16 wmask = (__mmask16)((1u << rows) - 1);
  for (int64_t k0 = 0; k0 < len; k0 += 16) {
    int64_t n = len - k0 < 16 ? len - k0 : 16;
    __mmask16 lmask = (__mmask16)((1u << n) - 1);
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++)
      r[i] = i < rows ? (n == 16 ? _mm512_loadu_ps(src[i] + k0)
                                 : _mm512_maskz_loadu_ps(lmask, src[i] + k0))
                      : _mm512_setzero_ps();
    for (int i = 0; i < 8; i++) {
      t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
      __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
      __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
      r[4 * i + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
      r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
      r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
      r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    /* r[4i + j], lane L: element 4L + j of rows 4i..4i+3 */
    for (int j = 0; j < 4; j++) {
      __m512 A = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
      __m512 B = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xdd);
      __m512 C = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
      __m512 D = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xdd);
      t[0 + j] = _mm512_shuffle_f32x4(A, C, 0x88);  /* element j */
      t[8 + j] = _mm512_shuffle_f32x4(A, C, 0xdd);  /* element 8 + j */
      t[4 + j] = _mm512_shuffle_f32x4(B, D, 0x88);  /* element 4 + j */
      t[12 + j] = _mm512_shuffle_f32x4(B, D, 0xdd); /* element 12 + j */
    }
    float *d = dst + k0 * rows;
    for (int e = 0; e < n; e++) _mm512_mask_storeu_ps(d + e * rows, wmask, t[e]);
  }
}

/* ------------------------------------------------------------ epilogue */

/* The LSTM tail with AVX-512VL on ymm (8 hidden units = one gate group):
 * every nonlinearity is one fast sigmoid — tanh(x) = 2σ(2x) − 1 — with
 * exp through 2^t = scalef(p(t − round t), round t) (degree-5 minimax,
 * rel. error 7.5e-8) and 1/(1+e) by rcp14 + one Newton step (~1e-7
 * absolute: far below what an LSTM notices). The general epilogue (with
 * the ulp-tested activations) is the AVX2 one. */
static inline AVX512_FN __attribute__((always_inline)) __m256 sig_fast(__m256 x, float scale) {
  /* sigmoid(scale·x / 2 · 2) with t = −scale·x·log2 e */
  __m256 t = _mm256_mul_ps(x, _mm256_set1_ps(-scale * 1.44269504088896341f));
  t = _mm256_min_ps(t, _mm256_set1_ps(126.0f));
  __m256 n = _mm256_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 f = _mm256_sub_ps(t, n);
  __m256 p = _mm256_set1_ps(1.327647196e-3f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.675541739e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550713277e-2f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402211972e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931469671e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.000000072f));
  __m256 d = _mm256_add_ps(_mm256_scalef_ps(p, n), _mm256_set1_ps(1.0f));
  __m256 r = _mm256_rcp14_ps(d);
  return _mm256_mul_ps(r, _mm256_fnmadd_ps(d, r, _mm256_set1_ps(2.0f)));
}

static inline AVX512_FN __attribute__((always_inline)) __m512 sig_fast16(__m512 x, float scale) {
  __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(-scale * 1.44269504088896341f));
  t = _mm512_min_ps(t, _mm512_set1_ps(126.0f));
  __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_set1_ps(1.327647196e-3f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.675541739e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550713277e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402211972e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931469671e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.000000072f));
  __m512 d = _mm512_add_ps(_mm512_scalef_ps(p, n), _mm512_set1_ps(1.0f));
  __m512 r = _mm512_rcp14_ps(d);
  return _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0f)));
}

/* Rows r and r+1 of one gate group in one zmm (low half row r). */
static inline AVX512_FN __attribute__((always_inline)) __m512 ld2(const float *a, const float *b) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_load_ps(a)), _mm256_load_ps(b), 1);
}

static inline const float *in_row(const sh_gemm_in *in, int64_t m) {
  return in->rows ? in->rows[m] : in->base + m * in->ld;
}
static inline float *out_row(const sh_gemm_out *o, int64_t m) {
  return o->rows ? o->rows[m] : o->base + m * o->ld;
}

static AVX512_FN void lstm_tail(const sh_gemm_ep_ctx *e, const float *t, int64_t m0,
                                int64_t rows, int64_t col0) {
  const sh_gemm_lstm *l = e->args->lstm;
  int64_t H = e->hidden, h0 = col0 / SH_GEMM_NR * SH_GEMM_LSTM_G;
  int64_t hv = H - h0 < SH_GEMM_LSTM_G ? H - h0 : SH_GEMM_LSTM_G;
  bool has_prev = l->c_prev.rows || l->c_prev.base;
  __mmask8 mask = (__mmask8)((1u << hv) - 1);
  __m256 bi = _mm256_setzero_ps(), bf = bi, bo = bi, bu = bi;
  if (l->bias) {
    bi = _mm256_maskz_loadu_ps(mask, l->bias + l->gate_i * H + h0);
    bf = _mm256_maskz_loadu_ps(mask, l->bias + l->gate_f * H + h0);
    bo = _mm256_maskz_loadu_ps(mask, l->bias + l->gate_o * H + h0);
    bu = _mm256_maskz_loadu_ps(mask, l->bias + l->gate_u * H + h0);
  }
  const float *ti = t + l->gate_i * SH_GEMM_LSTM_G, *tf = t + l->gate_f * SH_GEMM_LSTM_G;
  const float *to = t + l->gate_o * SH_GEMM_LSTM_G, *tu = t + l->gate_u * SH_GEMM_LSTM_G;
  const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f);
  int64_t r = 0;
  if (hv == SH_GEMM_LSTM_G) {
    const __m512 bi2 = _mm512_insertf32x8(_mm512_castps256_ps512(bi), bi, 1);
    const __m512 bf2 = _mm512_insertf32x8(_mm512_castps256_ps512(bf), bf, 1);
    const __m512 bo2 = _mm512_insertf32x8(_mm512_castps256_ps512(bo), bo, 1);
    const __m512 bu2 = _mm512_insertf32x8(_mm512_castps256_ps512(bu), bu, 1);
    const __m512 one2 = _mm512_set1_ps(1.0f), two2 = _mm512_set1_ps(2.0f);
    /* Two passes so that each loop body holds independent chains (the
     * tail is latency-bound otherwise): pass 1 the four gate nonlinearities
     * of row pairs, pass 2 the cell update and tanh(c). */
    _Alignas(64) float st[8][3][16];
    int64_t pairs = rows / 2;
    for (int64_t p = 0; p < pairs; p++) {
      int64_t o = 2 * p * SH_GEMM_NR, o1 = o + SH_GEMM_NR;
      __m512 si = sig_fast16(_mm512_add_ps(ld2(ti + o, ti + o1), bi2), 1.0f);
      __m512 su = sig_fast16(_mm512_add_ps(ld2(tu + o, tu + o1), bu2), 2.0f);
      __m512 sf = sig_fast16(_mm512_add_ps(ld2(tf + o, tf + o1), bf2), 1.0f);
      __m512 so = sig_fast16(_mm512_add_ps(ld2(to + o, to + o1), bo2), 1.0f);
      _mm512_store_ps(st[p][0], _mm512_mul_ps(si, _mm512_fmsub_ps(su, two2, one2)));
      _mm512_store_ps(st[p][1], sf);
      _mm512_store_ps(st[p][2], so);
    }
    for (int64_t p = 0; p < pairs; p++, r += 2) {
      __m512 c = _mm512_load_ps(st[p][0]);
      if (has_prev) {
        __m512 cp = _mm512_insertf32x8(
            _mm512_castps256_ps512(_mm256_loadu_ps(in_row(&l->c_prev, m0 + r) + h0)),
            _mm256_loadu_ps(in_row(&l->c_prev, m0 + r + 1) + h0), 1);
        c = _mm512_fmadd_ps(_mm512_load_ps(st[p][1]), cp, c);
      }
      __m512 h = _mm512_mul_ps(_mm512_load_ps(st[p][2]),
                               _mm512_fmsub_ps(sig_fast16(c, 2.0f), two2, one2));
      _mm256_storeu_ps(out_row(&l->c_out, m0 + r) + h0, _mm512_castps512_ps256(c));
      _mm256_storeu_ps(out_row(&l->c_out, m0 + r + 1) + h0, _mm512_extractf32x8_ps(c, 1));
      _mm256_storeu_ps(out_row(&l->h_out, m0 + r) + h0, _mm512_castps512_ps256(h));
      _mm256_storeu_ps(out_row(&l->h_out, m0 + r + 1) + h0, _mm512_extractf32x8_ps(h, 1));
    }
  }
  for (; r < rows; r++) {
    int64_t o = r * SH_GEMM_NR;
    __m256 si = sig_fast(_mm256_add_ps(_mm256_load_ps(ti + o), bi), 1.0f);
    __m256 tanh_u = _mm256_fmsub_ps(sig_fast(_mm256_add_ps(_mm256_load_ps(tu + o), bu), 2.0f), two, one);
    __m256 c = _mm256_mul_ps(si, tanh_u);
    if (has_prev) {
      __m256 sf = sig_fast(_mm256_add_ps(_mm256_load_ps(tf + o), bf), 1.0f);
      c = _mm256_fmadd_ps(sf, _mm256_maskz_loadu_ps(mask, in_row(&l->c_prev, m0 + r) + h0), c);
    }
    __m256 so = sig_fast(_mm256_add_ps(_mm256_load_ps(to + o), bo), 1.0f);
    __m256 h = _mm256_mul_ps(so, _mm256_fmsub_ps(sig_fast(c, 2.0f), two, one));
    _mm256_mask_storeu_ps(out_row(&l->c_out, m0 + r) + h0, mask, c);
    _mm256_mask_storeu_ps(out_row(&l->h_out, m0 + r) + h0, mask, h);
  }
}

static AVX512_FN void gru_tail(const sh_gemm_ep_ctx *e, const float *t, int64_t m0,
                               int64_t rows, int64_t col0) {
  const sh_gemm_gru *g = e->args->gru;
  int64_t H = e->hidden, h0 = col0 / SH_GEMM_NR * SH_GEMM_LSTM_G;
  int64_t hv = H - h0 < SH_GEMM_LSTM_G ? H - h0 : SH_GEMM_LSTM_G;
  bool has_prev = g->h_prev.rows || g->h_prev.base;
  __mmask8 mask = (__mmask8)((1u << hv) - 1);
  __m256 b[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  if (g->bias)
    for (int q = 0; q < 4; q++) b[q] = _mm256_maskz_loadu_ps(mask, g->bias + q * H + h0);
  const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f);
  for (int64_t r = 0; r < rows; r++) {
    const float *tr = t + r * SH_GEMM_NR;
    __m256 z[4];
    for (int q = 0; q < 4; q++) z[q] = _mm256_add_ps(_mm256_load_ps(tr + q * SH_GEMM_LSTM_G), b[q]);
    __m256 rg = sig_fast(z[g->gate_r], 1.0f), u = sig_fast(z[g->gate_z], 1.0f);
    __m256 n = _mm256_fmsub_ps(sig_fast(_mm256_fmadd_ps(rg, z[g->gate_nh], z[g->gate_nx]), 2.0f),
                               two, one);
    __m256 h = _mm256_fnmadd_ps(u, n, n);
    if (has_prev)
      h = _mm256_fmadd_ps(u, _mm256_maskz_loadu_ps(mask, in_row(&g->h_prev, m0 + r) + h0), h);
    _mm256_mask_storeu_ps(out_row(&g->h_out, m0 + r) + h0, mask, h);
  }
}

AVX512_FN void sh_gemm_epilogue__avx512(const sh_gemm_ep_ctx *e, float *t, int64_t m0,
                                        int64_t rows, int64_t col0, int64_t cols) {
  if (e->args->lstm)
    lstm_tail(e, t, m0, rows, col0);
  else if (e->args->gru)
    gru_tail(e, t, m0, rows, col0);
  else
    sh_gemm_epilogue__avx2(e, t, m0, rows, col0, cols);
}
#endif
