/*
 * gemm_avx512.c — AVX-512 level of the GEMM: the micro-kernel (up to 14 rows
 * × 32 columns: 28 zmm accumulators, 2 B vectors per k, A broadcast from
 * memory; one instantiation per row count so a short micro-panel wastes no
 * FMAs; masked column tails), the A packer (16×16 register transposes),
 * the fused LSTM tail (table-driven 2^x, three reciprocals per five
 * nonlinearities, one row of a 16-unit gate group per zmm), the GRU tail
 * (fast sigmoid) and the generic epilogue (one pass over the tile, whole op
 * list in registers, table-based sigmoid / tanh). Zen 4 runs a 512-bit FMA
 * as two 256-bit halves, so the gain over AVX2 is the 32 registers (fewer
 * loads per FMA), not the width.
 */
#include "kernels/gemm.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "kernels/vmath_avx2.h"
#include "kernels/vmath_avx512.h"

#define AVX512_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#define UKR_C_PREFETCH_K 24 /* k steps (~24 x 28 FMAs) before the end of a tile */

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
  /* Two legs: C's lines are fetched for writing UKR_C_PREFETCH_K steps
   * before the end, so that the stores do not wait for them (a fresh C
   * block comes from L3), yet late enough that the B panel streaming
   * through L1 does not evict them first. */
  for (int leg = 0; leg < 2; leg++) {
    const int64_t k_end = leg == 0 ? kc - UKR_C_PREFETCH_K : kc;
    if (leg == 1)
      _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++) {
        _mm_prefetch((const char *)c[r], _MM_HINT_ET0);
        _mm_prefetch((const char *)c[r] + 64, _MM_HINT_ET0);
      }
    for (; k < k_end; k++) {
      __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
      _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++) {
        __m512 av = _mm512_set1_ps(a[r]);
        acc0[r] = _mm512_fmadd_ps(av, b0, acc0[r]);
        acc1[r] = _mm512_fmadd_ps(av, b1, acc1[r]);
      }
      a += MR;
      b += ldb;
    }
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

/* The fused cell tails use fast nonlinearities (absolute error ~4e-7 on c
 * and h, see lstm_tail; far below what an RNN notices); the generic epilogue
 * (below) has its own sigmoid / tanh (the LSTM tail's table-driven exp, then
 * one division; a few ulp).
 * GRU: every nonlinearity is one fast sigmoid on zmm — tanh(x) = 2σ(2x) − 1
 * — with exp through 2^t = scalef(p(t − round t), round t) (degree-5
 * minimax, rel. error 7.5e-8) and 1/(1+e) by rcp14 + one Newton step. */
static inline AVX512_FN __attribute__((always_inline)) __m512 sig_fast(__m512 x, float scale) {
  /* sigmoid(scale·x / 2 · 2) with t = −scale·x·log2 e */
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

/* 2^(t/32) for the LSTM tail, as S·p: |t| clamped to 1920 (2^±60, so
 * products of two (1 + e) stay finite), n = round(t) (vcvtps2dq) and
 * f = t − n (vreduceps, exact), S = 2^(n/32) = 2^(n>>5) · T[n & 31] built in the integer domain: one
 * vpermt2ps picks the bits of T[j] − (j << 18) from a 32-entry table in two
 * zmm and one vpaddd adds n << 18 = ((n>>5) << 23) + (j << 18) — the
 * exponent and, cancelling, the index bits (no mask); p = 2^(f/32) for
 * |f| <= 1/2 by a degree-2 minimax polynomial (rel. error 5e-8). The
 * caller forms e = S·p, 1 + e = fma(S, p, 1) or 1 − e in one op. Mostly
 * add-pipe and integer work: Zen 4's two FMA pipes are the tail's
 * bottleneck. */
static const uint32_t k_exp2_32[32] = { /* bits of f32(2^(j/32)) − (j << 18) */
    0x3f800000u, 0x3f7ecd87u, 0x3f7daac3u, 0x3f7c980fu, 0x3f7b95c2u, 0x3f7aa43au, 0x3f79c3d3u,
    0x3f78f4f0u, 0x3f7837f0u, 0x3f778d3au, 0x3f76f532u, 0x3f767043u, 0x3f75fed7u, 0x3f75a15bu,
    0x3f75583fu, 0x3f7523f6u, 0x3f7504f3u, 0x3f74fbafu, 0x3f7508a4u, 0x3f752c4du, 0x3f75672au,
    0x3f75b9beu, 0x3f76248cu, 0x3f76a81eu, 0x3f7744fdu, 0x3f77fbb8u, 0x3f78ccdfu, 0x3f79b907u,
    0x3f7ac0c7u, 0x3f7be4bau, 0x3f7d257du, 0x3f7e83b3u};

typedef struct exp2_tab {
  __m512 lo, hi;
} exp2_tab;

static inline AVX512_FN __attribute__((always_inline)) __m512 exp2_32_sp(__m512 t, exp2_tab tab,
                                                                          __m512 *p_out) {
  t = _mm512_range_ps(t, _mm512_set1_ps(1920.0f), 0x02); /* min |.|, sign of t */
  __m512i n = _mm512_cvt_roundps_epi32(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 f = _mm512_reduce_ps(t, _MM_FROUND_TO_NEAREST_INT); /* t − round(t), exact */
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(0.00023459672f), f, _mm512_set1_ps(0.021661166f));
  *p_out = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  __m512i tv = _mm512_castps_si512(_mm512_permutex2var_ps(tab.lo, n, tab.hi));
  return _mm512_castsi512_ps(_mm512_add_epi32(tv, _mm512_slli_epi32(n, 18)));
}

/* 1 + 2^(t/32) */
static inline AVX512_FN __attribute__((always_inline)) __m512 exp2_32_p1(__m512 t, exp2_tab tab) {
  __m512 p, sc = exp2_32_sp(t, tab, &p);
  return _mm512_fmadd_ps(sc, p, _mm512_set1_ps(1.0f));
}

static inline AVX512_FN __attribute__((always_inline)) exp2_tab exp2_tab_load(void) {
  return (exp2_tab){_mm512_castsi512_ps(_mm512_loadu_si512(k_exp2_32)),
                    _mm512_castsi512_ps(_mm512_loadu_si512(k_exp2_32 + 16))};
}

/* 1/d: rcp14 and one Newton step. */
static inline AVX512_FN __attribute__((always_inline)) __m512 rcp_nr(__m512 d) {
  __m512 r = _mm512_rcp14_ps(d);
  return _mm512_fmadd_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(1.0f)), r);
}

static inline const float *in_row(const sh_gemm_in *in, int64_t m) {
  return in->rows ? in->rows[m] : in->base + m * in->ld;
}
static inline float *out_row(const sh_gemm_out *o, int64_t m) {
  return o->rows ? o->rows[m] : o->base + m * o->ld;
}

/* The LSTM tail over a gate group's tile t[rows][64]: per row, gates i, f,
 * o, u of 16 hidden units, one zmm each (a partial group masked). With
 * e_g = exp(−z_g), e_u = exp(−2 z_u) and e_c = exp(−2c):
 *   sigmoid(z_i)·tanh(z_u) = (1 − e_u) / ((1 + e_i)(1 + e_u))
 *   c = that + c_prev / (1 + e_f),   h = (1 − e_c) / ((1 + e_o)(1 + e_c))
 * (three reciprocals for five nonlinearities). Two passes through an L1
 * buffer (the four independent gate exponentials of every row, then the
 * c → tanh(c) → h chains), so that the scheduler overlaps rows. */
static AVX512_FN void lstm_tail(const sh_gemm_ep_ctx *e, const float *t, int64_t m0,
                                int64_t rows, int64_t col0) {
  const sh_gemm_lstm *l = e->args->lstm;
  int64_t H = e->hidden, h0 = col0 / SH_GEMM_LSTM_W * SH_GEMM_LSTM_G;
  int64_t hv = H - h0 < SH_GEMM_LSTM_G ? H - h0 : SH_GEMM_LSTM_G;
  bool has_prev = l->c_prev.rows || l->c_prev.base, full = hv == SH_GEMM_LSTM_G;
  __mmask16 mask = (__mmask16)((1u << hv) - 1);
  /* t = z·k + bias·k, k = −log2(e)·32 (sigmoid gates) or twice that (tanh) */
  const float k1 = -32.0f * 1.44269504088896341f;
  const __m512 ks = _mm512_set1_ps(k1), kt = _mm512_set1_ps(2.0f * k1);
  const __m512 two = _mm512_set1_ps(2.0f);
  __m512 bi = _mm512_setzero_ps(), bf = bi, bo = bi, bu = bi;
  if (l->bias) {
#define BIAS(g, k) _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, l->bias + (g) * H + h0), k)
    bi = BIAS(l->gate_i, ks);
    bf = BIAS(l->gate_f, ks);
    bo = BIAS(l->gate_o, ks);
    bu = BIAS(l->gate_u, kt);
#undef BIAS
  }
  const exp2_tab tab = exp2_tab_load();
  const float *ti = t + l->gate_i * SH_GEMM_LSTM_G, *tf = t + l->gate_f * SH_GEMM_LSTM_G;
  const float *to = t + l->gate_o * SH_GEMM_LSTM_G, *tu = t + l->gate_u * SH_GEMM_LSTM_G;
  _Alignas(64) float st[16][4][16];
  for (int64_t r = 0; r < rows; r++) { /* 1: the four gate exponentials */
    int64_t o = r * SH_GEMM_LSTM_W;
    __m512 ai = exp2_32_p1(_mm512_fmadd_ps(_mm512_load_ps(ti + o), ks, bi), tab);
    __m512 au = exp2_32_p1(_mm512_fmadd_ps(_mm512_load_ps(tu + o), kt, bu), tab);
    __m512 af = exp2_32_p1(_mm512_fmadd_ps(_mm512_load_ps(tf + o), ks, bf), tab);
    __m512 ao = exp2_32_p1(_mm512_fmadd_ps(_mm512_load_ps(to + o), ks, bo), tab);
    _mm512_store_ps(st[r][0], _mm512_sub_ps(two, au)); /* 1 − e_u */
    _mm512_store_ps(st[r][1], _mm512_mul_ps(ai, au));
    _mm512_store_ps(st[r][2], af);
    _mm512_store_ps(st[r][3], ao);
  }
  for (int64_t r = 0; r < rows; r++) { /* 2: c, h, and the stores */
    __m512 c = _mm512_mul_ps(_mm512_load_ps(st[r][0]), rcp_nr(_mm512_load_ps(st[r][1])));
    if (has_prev) {
      const float *cpr = in_row(&l->c_prev, m0 + r) + h0;
      __m512 cp = full ? _mm512_loadu_ps(cpr) : _mm512_maskz_loadu_ps(mask, cpr);
      c = _mm512_fmadd_ps(cp, rcp_nr(_mm512_load_ps(st[r][2])), c);
    }
    __m512 ac = exp2_32_p1(_mm512_mul_ps(c, kt), tab);
    __m512 h = _mm512_mul_ps(_mm512_sub_ps(two, ac), rcp_nr(_mm512_mul_ps(_mm512_load_ps(st[r][3]), ac)));
    float *co = out_row(&l->c_out, m0 + r) + h0, *ho = out_row(&l->h_out, m0 + r) + h0;
    if (full) {
      _mm512_storeu_ps(co, c);
      _mm512_storeu_ps(ho, h);
    } else {
      _mm512_mask_storeu_ps(co, mask, c);
      _mm512_mask_storeu_ps(ho, mask, h);
    }
  }
}

/* lstm_tail for a training forward (lstm_gates set): the same exponentials,
 * each gate's activation formed on its own, stored with tanh(c) for the
 * backward pass (see sh_gemm_args.lstm_gates). */
static AVX512_FN void lstm_tail_save(const sh_gemm_ep_ctx *e, const float *t, int64_t m0,
                                     int64_t rows, int64_t col0) {
  const sh_gemm_lstm *l = e->args->lstm;
  int64_t H = e->hidden, h0 = col0 / SH_GEMM_LSTM_W * SH_GEMM_LSTM_G;
  int64_t hv = H - h0 < SH_GEMM_LSTM_G ? H - h0 : SH_GEMM_LSTM_G;
  bool has_prev = l->c_prev.rows || l->c_prev.base;
  __mmask16 mask = (__mmask16)((1u << hv) - 1);
  const float k1 = -32.0f * 1.44269504088896341f;
  const __m512 ks = _mm512_set1_ps(k1), kt = _mm512_set1_ps(2.0f * k1);
  const __m512 two = _mm512_set1_ps(2.0f);
  __m512 bi = _mm512_setzero_ps(), bf = bi, bo = bi, bu = bi;
  if (l->bias) {
#define BIAS(g, k) _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, l->bias + (g) * H + h0), k)
    bi = BIAS(l->gate_i, ks);
    bf = BIAS(l->gate_f, ks);
    bo = BIAS(l->gate_o, ks);
    bu = BIAS(l->gate_u, kt);
#undef BIAS
  }
  const exp2_tab tab = exp2_tab_load();
  const float *ti = t + l->gate_i * SH_GEMM_LSTM_G, *tf = t + l->gate_f * SH_GEMM_LSTM_G;
  const float *to = t + l->gate_o * SH_GEMM_LSTM_G, *tu = t + l->gate_u * SH_GEMM_LSTM_G;
  for (int64_t r = 0; r < rows; r++) {
    int64_t o = r * SH_GEMM_LSTM_W;
    __m512 ai = exp2_32_p1(_mm512_fmadd_ps(_mm512_load_ps(ti + o), ks, bi), tab);
    __m512 au = exp2_32_p1(_mm512_fmadd_ps(_mm512_load_ps(tu + o), kt, bu), tab);
    __m512 af = exp2_32_p1(_mm512_fmadd_ps(_mm512_load_ps(tf + o), ks, bf), tab);
    __m512 ao = exp2_32_p1(_mm512_fmadd_ps(_mm512_load_ps(to + o), ks, bo), tab);
    __m512 ig = rcp_nr(ai), fg = rcp_nr(af), og = rcp_nr(ao);
    __m512 ug = _mm512_mul_ps(_mm512_sub_ps(two, au), rcp_nr(au));
    __m512 c = _mm512_mul_ps(ig, ug);
    if (has_prev)
      c = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, in_row(&l->c_prev, m0 + r) + h0), fg, c);
    __m512 ac = exp2_32_p1(_mm512_mul_ps(c, kt), tab);
    __m512 tc = _mm512_mul_ps(_mm512_sub_ps(two, ac), rcp_nr(ac));
    _mm512_mask_storeu_ps(out_row(&l->c_out, m0 + r) + h0, mask, c);
    _mm512_mask_storeu_ps(out_row(&l->h_out, m0 + r) + h0, mask, _mm512_mul_ps(og, tc));
    float *gs = out_row(&e->args->lstm_gates, m0 + r) + h0;
    _mm512_mask_storeu_ps(gs, mask, ig);
    _mm512_mask_storeu_ps(gs + H, mask, fg);
    _mm512_mask_storeu_ps(gs + 2 * H, mask, ug);
    _mm512_mask_storeu_ps(gs + 3 * H, mask, og);
    _mm512_mask_storeu_ps(gs + 4 * H, mask, tc);
  }
}

static AVX512_FN void gru_tail(const sh_gemm_ep_ctx *e, const float *t, int64_t m0,
                               int64_t rows, int64_t col0) {
  const sh_gemm_gru *g = e->args->gru;
  int64_t H = e->hidden, h0 = col0 / SH_GEMM_LSTM_W * SH_GEMM_LSTM_G;
  int64_t hv = H - h0 < SH_GEMM_LSTM_G ? H - h0 : SH_GEMM_LSTM_G;
  bool has_prev = g->h_prev.rows || g->h_prev.base;
  __mmask16 mask = (__mmask16)((1u << hv) - 1);
  __m512 b[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  if (g->bias)
    for (int q = 0; q < 4; q++) b[q] = _mm512_maskz_loadu_ps(mask, g->bias + q * H + h0);
  const __m512 one = _mm512_set1_ps(1.0f), two = _mm512_set1_ps(2.0f);
  for (int64_t r = 0; r < rows; r++) {
    const float *tr = t + r * SH_GEMM_LSTM_W;
    __m512 z[4];
    for (int q = 0; q < 4; q++) z[q] = _mm512_add_ps(_mm512_load_ps(tr + q * SH_GEMM_LSTM_G), b[q]);
    __m512 rg = sig_fast(z[g->gate_r], 1.0f), u = sig_fast(z[g->gate_z], 1.0f);
    __m512 n = _mm512_fmsub_ps(sig_fast(_mm512_fmadd_ps(rg, z[g->gate_nh], z[g->gate_nx]), 2.0f),
                               two, one);
    __m512 h = _mm512_fnmadd_ps(u, n, n);
    if (has_prev)
      h = _mm512_fmadd_ps(u, _mm512_maskz_loadu_ps(mask, in_row(&g->h_prev, m0 + r) + h0), h);
    _mm512_mask_storeu_ps(out_row(&g->h_out, m0 + r) + h0, mask, h);
  }
}

/* ---------------------------------------------------- generic epilogue */

/* exp(x) = S·p for x in [−87.3, 0] (callers clamp; e^−87.3 is the
 * smallest normal): the LSTM tail's 2^(t/32) table with t = x·32·log2(e)
 * rounded to n (vcvtps2dq) and the remainder f = x·32·log2(e) − n from
 * two FMAs with a two-part constant (t itself rounds too coarsely for
 * large |x|). */
static AVX512_FN SH_GEMM_SPECIALISE __m512 exp_neg(__m512 x, exp2_tab tab,
                                                                       __m512 *p_out) {
  const __m512 k = _mm512_set1_ps(46.166241308446828f); /* 32·log2(e), high part */
  __m512i n = _mm512_cvt_roundps_epi32(_mm512_mul_ps(x, k), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 f = _mm512_fmsub_ps(x, k, _mm512_cvtepi32_ps(n));
  f = _mm512_fmadd_ps(x, _mm512_set1_ps(6.1630817e-7f), f); /* low part */
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(0.00023459672f), f, _mm512_set1_ps(0.021661166f));
  *p_out = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  __m512i tv = _mm512_castps_si512(_mm512_permutex2var_ps(tab.lo, n, tab.hi));
  return _mm512_castsi512_ps(_mm512_add_epi32(tv, _mm512_slli_epi32(n, 18)));
}

/* sigmoid: e = exp(−|x|) in (0, 1]; x >= 0: 1/(1+e), else e/(1+e) (no
 * cancellation). x < −87.3 (results below 2^−126, and −inf) gives 0; NaN
 * propagates. ~2 ulp. On Zen 4 the division is cheaper here than rcp14 +
 * a Newton step: the FMA pipes are the bottleneck, the divider is not. */
static AVX512_FN SH_GEMM_SPECIALISE __m512 sigmoid_ep(__m512 x, exp2_tab tab) {
  __m512 nx = _mm512_max_ps(_mm512_set1_ps(-87.3f), _mm512_or_ps(x, _mm512_set1_ps(-0.0f)));
  __m512 p, sc = exp_neg(nx, tab, &p);
  __mmask16 neg = _mm512_movepi32_mask(_mm512_castps_si512(x));
  __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_NLT_UQ);
  __m512 num = _mm512_mask_mul_ps(_mm512_set1_ps(1.0f), neg, sc, p);
  return _mm512_maskz_div_ps(live, num, _mm512_fmadd_ps(sc, p, _mm512_set1_ps(1.0f)));
}

/* tanh: |x| < 0.625: Cephes odd polynomial; else sign(x)(1 − e)/(1 + e)
 * with e = exp(−2|x|) (−2|x| clamped at −20, where the result is 1 in
 * f32). ~1 ulp; NaN propagates, tanh(±inf) = ±1. */
static AVX512_FN SH_GEMM_SPECIALISE __m512 tanh_ep(__m512 x, exp2_tab tab) {
  const __m512 sign = _mm512_set1_ps(-0.0f), one = _mm512_set1_ps(1.0f);
  __m512 ax = _mm512_andnot_ps(sign, x);
  __m512 small = sh_tanh_small_avx512(x, ax);
  __m512 m2 = _mm512_max_ps(_mm512_set1_ps(-20.0f), _mm512_mul_ps(ax, _mm512_set1_ps(-2.0f)));
  __m512 q, sc = exp_neg(m2, tab, &q);
  __m512 big = _mm512_div_ps(_mm512_fnmadd_ps(sc, q, one), _mm512_fmadd_ps(sc, q, one));
  __mmask16 is_small = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.625f), _CMP_LT_OQ);
  return _mm512_or_ps(_mm512_mask_blend_ps(is_small, big, small), _mm512_and_ps(x, sign));
}

static AVX512_FN SH_GEMM_SPECIALISE __m512 act_ep(sh_gemm_act act, __m512 x,
                                                                      exp2_tab tab) {
  switch (act) {
  case SH_GEMM_ACT_RELU: return _mm512_max_ps(x, _mm512_setzero_ps());
  case SH_GEMM_ACT_SIGMOID: return sigmoid_ep(x, tab);
  case SH_GEMM_ACT_TANH: return tanh_ep(x, tab);
  case SH_GEMM_ACT_GELU_TANH:
    return _mm512_insertf32x8(_mm512_castps256_ps512(sh_gelu_tanh_avx2(_mm512_castps512_ps256(x))),
                              sh_gelu_tanh_avx2(_mm512_extractf32x8_ps(x, 1)), 1);
  case SH_GEMM_ACT_GELU_ERF:
    return _mm512_insertf32x8(_mm512_castps256_ps512(sh_gelu_erf_avx2(_mm512_castps512_ps256(x))),
                              sh_gelu_erf_avx2(_mm512_extractf32x8_ps(x, 1)), 1);
  }
  return x;
}

/* One op of a 16-column vector's program: lanes `m` (already cut to the
 * tile's columns); BIAS ops before the first other op are folded into one
 * bias vector. */
typedef struct vop {
  sh_gemm_ep_kind kind;
  sh_gemm_act act;
  __mmask16 m;
  const float *vec;         /* BIAS */
  const sh_gemm_in *other;  /* ADD / MUL */
} vop;

/* Rows of one 16-column vector q of the tile: x = t (+ C) + bias, then
 * `act` on every lane (the common case: the whole program is bias + one
 * activation on full lanes), stored to C under `cm`. */
#define EP_FAST_LOOP(ACT)                                                               \
  for (int64_t r = 0; r < rows; r++) {                                                  \
    float *cr = out_row(&a->c, m0 + r) + col;                                           \
    __m512 x = _mm512_add_ps(_mm512_load_ps(t + r * SH_GEMM_NR + q * 16), bias);         \
    if (acc) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(cm, cr));                       \
    _mm512_mask_storeu_ps(cr, cm, ACT);                                                 \
  }

/* The program of the 16-column vector at column col: leading biases
 * folded into *bias, the other ops (lanes cut to the vector's columns) in
 * prog; returns their count. */
static inline AVX512_FN __attribute__((always_inline)) int vec_program(
    const sh_gemm_ep_ctx *e, int64_t col, int64_t vc, __m512 *bias, vop *prog) {
  const sh_gemm_args *a = e->args;
  int np = 0;
  *bias = _mm512_setzero_ps();
  for (int i = 0; i < a->n_ep; i++) {
    const sh_gemm_ep *op = &a->ep[i];
    int64_t n1 = op->n1 <= 0 ? e->n : op->n1;
    int64_t lo = op->n0 - col, hi = n1 - col;
    if (lo < 0) lo = 0;
    if (hi > vc) hi = vc;
    if (lo >= hi) continue;
    __mmask16 m = (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1));
    if (op->kind == SH_GEMM_EP_BIAS && np == 0) {
      *bias = _mm512_add_ps(*bias, _mm512_maskz_loadu_ps(m, op->vec + col));
      continue;
    }
    prog[np++] = (vop){op->kind, op->act, m, op->vec, &op->other};
  }
  return np;
}

/* Both vectors of a full 32-column tile with the same program "bias + act
 * on every lane": one loop over rows, two independent chains per row. */
#define EP_PAIR_LOOP(ACT)                                                                   \
  for (int64_t r = 0; r < rows; r++) {                                                      \
    float *cr = out_row(&a->c, m0 + r) + col0;                                              \
    __m512 x0 = _mm512_add_ps(_mm512_load_ps(t + r * SH_GEMM_NR), b0);                       \
    __m512 x1 = _mm512_add_ps(_mm512_load_ps(t + r * SH_GEMM_NR + 16), b1);                  \
    if (acc) {                                                                              \
      x0 = _mm512_add_ps(x0, _mm512_loadu_ps(cr));                                          \
      x1 = _mm512_add_ps(x1, _mm512_loadu_ps(cr + 16));                                     \
    }                                                                                       \
    { __m512 x = x0; x0 = ACT; }                                                            \
    { __m512 x = x1; x1 = ACT; }                                                            \
    _mm512_storeu_ps(cr, x0);                                                               \
    _mm512_storeu_ps(cr + 16, x1);                                                          \
  }

static AVX512_FN void generic_ep(const sh_gemm_ep_ctx *e, float *t, int64_t m0, int64_t rows,
                                 int64_t col0, int64_t cols) {
  const sh_gemm_args *a = e->args;
  const bool acc = a->accumulate;
  const exp2_tab tab = exp2_tab_load();
  /* C's lines for writing (a fresh C block comes from L3): they arrive
   * while the nonlinearities of the first rows are computed */
  for (int64_t r = 0; r < rows; r++) {
    const char *cr = (const char *)(out_row(&a->c, m0 + r) + col0);
    _mm_prefetch(cr, _MM_HINT_ET0);
    _mm_prefetch(cr + (cols - 1) * (int64_t)sizeof(float), _MM_HINT_ET0);
  }
  if (cols == SH_GEMM_NR) {
    __m512 b0, b1;
    vop p0[SH_GEMM_MAX_EP], p1[SH_GEMM_MAX_EP];
    int n0 = vec_program(e, col0, 16, &b0, p0), n1 = vec_program(e, col0 + 16, 16, &b1, p1);
    bool same = n0 == n1 && n0 <= 1 &&
                (n0 == 0 || (p0[0].kind == SH_GEMM_EP_ACT && p1[0].kind == SH_GEMM_EP_ACT &&
                             p0[0].act == p1[0].act && p0[0].m == 0xffff && p1[0].m == 0xffff));
    if (same) {
      switch (n0 == 0 ? -1 : (int)p0[0].act) {
      case -1: EP_PAIR_LOOP(x) break;
      case SH_GEMM_ACT_RELU: EP_PAIR_LOOP(_mm512_max_ps(x, _mm512_setzero_ps())) break;
      case SH_GEMM_ACT_SIGMOID: EP_PAIR_LOOP(sigmoid_ep(x, tab)) break;
      case SH_GEMM_ACT_TANH: EP_PAIR_LOOP(tanh_ep(x, tab)) break;
      default: EP_PAIR_LOOP(act_ep(p0[0].act, x, tab)) break;
      }
      return;
    }
  }
  for (int q = 0; q * 16 < cols; q++) {
    const int64_t col = col0 + q * 16, vc = cols - q * 16 < 16 ? cols - q * 16 : 16;
    const __mmask16 cm = (__mmask16)((1u << vc) - 1);
    __m512 bias;
    vop prog[SH_GEMM_MAX_EP];
    int np = vec_program(e, col, vc, &bias, prog);
    if (np == 0) {
      EP_FAST_LOOP(x)
    } else if (np == 1 && prog[0].kind == SH_GEMM_EP_ACT && prog[0].m == cm) {
      switch (prog[0].act) {
      case SH_GEMM_ACT_RELU: EP_FAST_LOOP(_mm512_max_ps(x, _mm512_setzero_ps())) break;
      case SH_GEMM_ACT_SIGMOID: EP_FAST_LOOP(sigmoid_ep(x, tab)) break;
      case SH_GEMM_ACT_TANH: EP_FAST_LOOP(tanh_ep(x, tab)) break;
      default: EP_FAST_LOOP(act_ep(prog[0].act, x, tab)) break;
      }
    } else {
      for (int64_t r = 0; r < rows; r++) {
        float *cr = out_row(&a->c, m0 + r) + col;
        __m512 x = _mm512_add_ps(_mm512_load_ps(t + r * SH_GEMM_NR + q * 16), bias);
        if (acc) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(cm, cr));
        for (int i = 0; i < np; i++) {
          const vop *v = &prog[i];
          switch (v->kind) {
          case SH_GEMM_EP_BIAS:
            x = _mm512_mask_add_ps(x, v->m, x, _mm512_maskz_loadu_ps(v->m, v->vec + col));
            break;
          case SH_GEMM_EP_ACT: x = _mm512_mask_mov_ps(x, v->m, act_ep(v->act, x, tab)); break;
          case SH_GEMM_EP_ADD:
            x = _mm512_mask_add_ps(x, v->m, x, _mm512_maskz_loadu_ps(v->m, in_row(v->other, m0 + r) + col));
            break;
          case SH_GEMM_EP_MUL:
            x = _mm512_mask_mul_ps(x, v->m, x, _mm512_maskz_loadu_ps(v->m, in_row(v->other, m0 + r) + col));
            break;
          }
        }
        _mm512_mask_storeu_ps(cr, cm, x);
      }
    }
  }
}
#undef EP_FAST_LOOP
#undef EP_PAIR_LOOP

AVX512_FN void sh_gemm_epilogue__avx512(const sh_gemm_ep_ctx *e, float *t, int64_t m0,
                                        int64_t rows, int64_t col0, int64_t cols) {
  if (e->args->lstm && (e->args->lstm_gates.rows || e->args->lstm_gates.base))
    lstm_tail_save(e, t, m0, rows, col0);
  else if (e->args->lstm)
    lstm_tail(e, t, m0, rows, col0);
  else if (e->args->gru)
    gru_tail(e, t, m0, rows, col0);
  else
    generic_ep(e, t, m0, rows, col0, cols);
}
#endif
