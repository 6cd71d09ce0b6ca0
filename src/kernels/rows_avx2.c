/*
 * rows_avx2.c — AVX2+FMA level of the row kernels (rows_kernels.h): 8
 * floats per ymm, vmaskmovps for the tail (no over-read, no scalar loop),
 * 2–8 independent accumulators per reduction. Softmax has its own exp for
 * arguments <= 0 (degree-5 polynomial, 2^n through the exponent bits);
 * arguments below -87.34 (where 2^n would leave the normal range) give 0
 * instead of a denormal (an error < 1.2e-38 of the row's max term).
 * Log-softmax uses vmath's exp (sh_exp_avx2: the values sh_vmath_f32 gives)
 * and sums in double.
 */
#include "kernels/rows_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>

#include "kernels/vmath_avx2.h"

#define AVX2_FN __attribute__((target("avx2,fma")))
#define AVX2_INLINE static inline __attribute__((target("avx2,fma"), always_inline))

static const int32_t mask_table[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

/* lanes 0..rem-1 set, rem in 1..7 */
AVX2_INLINE __m256i tail_mask(int64_t rem) {
  return _mm256_loadu_si256((const __m256i *)(mask_table + 8 - rem));
}

AVX2_INLINE float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

AVX2_INLINE float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* exp(t) for t <= 0 (or NaN): one-constant range reduction, a degree-5
 * polynomial and 2^n built by a magic-bias add and a shift (the rr1-p5
 * scheme of XNNPACK's softmax kernels); <= 4.8 ulp on [-87.3, 0], 0 below
 * -87.34 (where 2^n would leave the normal range), NaN kept. 12 ops. */
AVX2_INLINE __m256 exp_nonpos(__m256 t) {
  const __m256 magic = _mm256_set1_ps(0x1.8000FEp23f); /* 1.5·2^23 + 127 */
  __m256 n = _mm256_fmadd_ps(t, _mm256_set1_ps(0x1.715476p+0f), magic);
  __m256 s = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(n), 23)); /* 2^n */
  n = _mm256_sub_ps(n, magic);
  __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0x1.62E430p-1f), t);
  __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(0x1.0F9F9Cp-7f), r, _mm256_set1_ps(0x1.573A1Ap-5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0x1.555A80p-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0x1.FFFDC6p-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0x1.FFFFF6p-1f));
  __m256 f = _mm256_fmadd_ps(_mm256_mul_ps(r, s), p, s); /* s·(1 + r·p) */
  /* t < -87.34 (and -inf): 0; NaN compares false and stays */
  return _mm256_andnot_ps(_mm256_cmp_ps(t, _mm256_set1_ps(-0x1.5D589Ep6f), _CMP_LT_OS), f);
}

/* ---------------------------------------------------------- reductions */

AVX2_INLINE float rsum(int64_t n, const float *x) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm256_add_ps(s0, _mm256_loadu_ps(x + i));
    s1 = _mm256_add_ps(s1, _mm256_loadu_ps(x + i + 8));
    s2 = _mm256_add_ps(s2, _mm256_loadu_ps(x + i + 16));
    s3 = _mm256_add_ps(s3, _mm256_loadu_ps(x + i + 24));
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_add_ps(s0, _mm256_loadu_ps(x + i));
  if (i < n) s1 = _mm256_add_ps(s1, _mm256_maskload_ps(x + i, tail_mask(n - i)));
  return hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
}

AVX2_FN float sh_f32_rsum_ukernel__avx2(int64_t n, const float *x) { return rsum(n, x); }

AVX2_FN float sh_f32_rmax_ukernel__avx2(int64_t n, const float *x) {
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  __m256 m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf;
  __m256 nan = _mm256_setzero_ps(); /* max_ps drops NaN: track it on the side */
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
    __m256 v2 = _mm256_loadu_ps(x + i + 16), v3 = _mm256_loadu_ps(x + i + 24);
    m0 = _mm256_max_ps(m0, v0);
    m1 = _mm256_max_ps(m1, v1);
    m2 = _mm256_max_ps(m2, v2);
    m3 = _mm256_max_ps(m3, v3);
    nan = _mm256_or_ps(nan, _mm256_or_ps(_mm256_cmp_ps(v0, v1, _CMP_UNORD_Q),
                                         _mm256_cmp_ps(v2, v3, _CMP_UNORD_Q)));
  }
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    m0 = _mm256_max_ps(m0, v);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  if (i < n) {
    __m256i k = tail_mask(n - i);
    __m256 v = _mm256_blendv_ps(ninf, _mm256_maskload_ps(x + i, k), _mm256_castsi256_ps(k));
    m1 = _mm256_max_ps(m1, v);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  if (_mm256_movemask_ps(nan)) return NAN;
  return hmax(_mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
}

/* ------------------------------------------------------------- softmax */

/* max (or, NEG, min) of x[0..n) */
AVX2_INLINE float rextreme(const bool NEG, int64_t n, const float *x) {
#define EXT(a, b) (NEG ? _mm256_min_ps((a), (b)) : _mm256_max_ps((a), (b)))
  const __m256 init = _mm256_set1_ps(NEG ? INFINITY : -INFINITY);
  __m256 m0 = init, m1 = init, m2 = init, m3 = init;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = EXT(m0, _mm256_loadu_ps(x + i));
    m1 = EXT(m1, _mm256_loadu_ps(x + i + 8));
    m2 = EXT(m2, _mm256_loadu_ps(x + i + 16));
    m3 = EXT(m3, _mm256_loadu_ps(x + i + 24));
  }
  for (; i + 8 <= n; i += 8) m0 = EXT(m0, _mm256_loadu_ps(x + i));
  if (i < n) {
    __m256i k = tail_mask(n - i);
    m1 = EXT(m1, _mm256_blendv_ps(init, _mm256_maskload_ps(x + i, k), _mm256_castsi256_ps(k)));
  }
  __m256 m = EXT(EXT(m0, m1), EXT(m2, m3));
  __m128 h = NEG ? _mm_min_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1))
                 : _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = NEG ? _mm_min_ps(h, _mm_movehl_ps(h, h)) : _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = NEG ? _mm_min_ss(h, _mm_movehdup_ps(h)) : _mm_max_ss(h, _mm_movehdup_ps(h));
#undef EXT
  return _mm_cvtss_f32(h);
}

AVX2_FN void sh_f32_softmax_ukernel__avx2(int64_t n, float scale, const float *x, float *y) {
  /* 1. the x that maximizes scale*x (max for scale >= 0, min below); then
   *    t = scale * (x - m) is <= 0 everywhere and exactly 0 at the extreme
   *    element, and there is no a*b - c a compiler could fuse */
  const __m256 vs = _mm256_set1_ps(scale);
  const __m256 vm = _mm256_set1_ps(scale >= 0 ? rextreme(false, n, x) : rextreme(true, n, x));
#define T(p) _mm256_mul_ps(vs, _mm256_sub_ps((p), vm))

  /* 2. y = exp(t), summed on the way */
  __m256 s0 = _mm256_setzero_ps(), s1 = s0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 e0 = exp_nonpos(T(_mm256_loadu_ps(x + i)));
    __m256 e1 = exp_nonpos(T(_mm256_loadu_ps(x + i + 8)));
    _mm256_storeu_ps(y + i, e0);
    _mm256_storeu_ps(y + i + 8, e1);
    s0 = _mm256_add_ps(s0, e0);
    s1 = _mm256_add_ps(s1, e1);
  }
  for (; i + 8 <= n; i += 8) {
    __m256 e = exp_nonpos(T(_mm256_loadu_ps(x + i)));
    _mm256_storeu_ps(y + i, e);
    s0 = _mm256_add_ps(s0, e);
  }
  if (i < n) {
    __m256i k = tail_mask(n - i);
    __m256 e = _mm256_and_ps(exp_nonpos(T(_mm256_maskload_ps(x + i, k))), _mm256_castsi256_ps(k));
    _mm256_maskstore_ps(y + i, k, e);
    s1 = _mm256_add_ps(s1, e);
  }
#undef T
  const __m256 inv = _mm256_set1_ps(1.0f / hsum(_mm256_add_ps(s0, s1)));

  /* 3. normalize */
  for (i = 0; i + 16 <= n; i += 16) {
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), inv));
    _mm256_storeu_ps(y + i + 8, _mm256_mul_ps(_mm256_loadu_ps(y + i + 8), inv));
  }
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), inv));
  if (i < n) {
    __m256i k = tail_mask(n - i);
    _mm256_maskstore_ps(y + i, k, _mm256_mul_ps(_mm256_maskload_ps(y + i, k), inv));
  }
}

/* --------------------------------------------------------- log_softmax */

/* s0 + s1 += the 8 lanes of e, in double */
AVX2_INLINE void add_f64(__m256 e, __m256d *s0, __m256d *s1) {
  *s0 = _mm256_add_pd(*s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
  *s1 = _mm256_add_pd(*s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
}

AVX2_FN void sh_f32_log_softmax_ukernel__avx2(int64_t n, const float *x, float *y) {
  /* t = x - max <= 0; sum exp(t) in double; y = t - log(sum) */
  const __m256 vm = _mm256_set1_ps(rextreme(false, n, x));
  __m256d s0 = _mm256_setzero_pd(), s1 = s0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    add_f64(sh_exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm)), &s0, &s1);
  if (i < n) {
    __m256i k = tail_mask(n - i);
    __m256 e = sh_exp_avx2(_mm256_sub_ps(_mm256_maskload_ps(x + i, k), vm));
    add_f64(_mm256_and_ps(e, _mm256_castsi256_ps(k)), &s0, &s1);
  }
  __m256d s = _mm256_add_pd(s0, s1);
  __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
  h = _mm_add_sd(h, _mm_unpackhi_pd(h, h));
  const __m256 ls = _mm256_set1_ps((float)log(_mm_cvtsd_f64(h)));
  for (i = 0; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), ls));
  if (i < n) {
    __m256i k = tail_mask(n - i);
    __m256 t = _mm256_sub_ps(_mm256_maskload_ps(x + i, k), vm);
    _mm256_maskstore_ps(y + i, k, _mm256_sub_ps(t, ls));
  }
}

/* ----------------------------------------------------------- layernorm */

/* full vectors: k all ones; the tail: masked loads and store */
AVX2_INLINE void ln_store(const bool G, const bool B, const bool T, float *y, const float *v,
                          const float *gamma, const float *beta, int64_t i, __m256i k,
                          __m256 vmean, __m256 vrstd) {
#define LD(p) (T ? _mm256_maskload_ps((p) + i, k) : _mm256_loadu_ps((p) + i))
  __m256 d = _mm256_sub_ps(LD(v), vmean);
  __m256 g = G ? _mm256_mul_ps(LD(gamma), vrstd) : vrstd;
  __m256 o = B ? _mm256_fmadd_ps(d, g, LD(beta)) : _mm256_mul_ps(d, g);
  if (T) _mm256_maskstore_ps(y + i, k, o);
  else _mm256_storeu_ps(y + i, o);
#undef LD
}

AVX2_INLINE void ln_apply(const bool G, const bool B, int64_t n, const float *v,
                          const float *gamma, const float *beta, float mean, float rstd,
                          float *y) {
  const __m256 vmean = _mm256_set1_ps(mean), vrstd = _mm256_set1_ps(rstd);
  const __m256i all = _mm256_set1_epi32(-1);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    ln_store(G, B, false, y, v, gamma, beta, i, all, vmean, vrstd);
    ln_store(G, B, false, y, v, gamma, beta, i + 8, all, vmean, vrstd);
  }
  for (; i + 8 <= n; i += 8) ln_store(G, B, false, y, v, gamma, beta, i, all, vmean, vrstd);
  if (i < n) ln_store(G, B, true, y, v, gamma, beta, i, tail_mask(n - i), vmean, vrstd);
}

AVX2_FN void sh_f32_layernorm_ukernel__avx2(int64_t n, const float *x, const float *r,
                                            const float *gamma, const float *beta, float eps,
                                            float *y) {
  const float *v = x;
  float sum;
  if (r) { /* v = x + r, stored to y and summed in one pass */
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      __m256 v0 = _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(r + i));
      __m256 v1 = _mm256_add_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(r + i + 8));
      __m256 v2 = _mm256_add_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(r + i + 16));
      __m256 v3 = _mm256_add_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(r + i + 24));
      _mm256_storeu_ps(y + i, v0);
      _mm256_storeu_ps(y + i + 8, v1);
      _mm256_storeu_ps(y + i + 16, v2);
      _mm256_storeu_ps(y + i + 24, v3);
      s0 = _mm256_add_ps(s0, v0);
      s1 = _mm256_add_ps(s1, v1);
      s2 = _mm256_add_ps(s2, v2);
      s3 = _mm256_add_ps(s3, v3);
    }
    for (; i + 8 <= n; i += 8) {
      __m256 v0 = _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(r + i));
      _mm256_storeu_ps(y + i, v0);
      s0 = _mm256_add_ps(s0, v0);
    }
    if (i < n) {
      __m256i k = tail_mask(n - i);
      __m256 v0 = _mm256_add_ps(_mm256_maskload_ps(x + i, k), _mm256_maskload_ps(r + i, k));
      _mm256_maskstore_ps(y + i, k, v0);
      s1 = _mm256_add_ps(s1, v0);
    }
    sum = hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    v = y;
  } else {
    sum = rsum(n, x);
  }
  /* corrected two-pass variance */
  const float fn = (float)n;
  float mean = sum / fn;
  const __m256 vmean = _mm256_set1_ps(mean);
  __m256 d0 = _mm256_setzero_ps(), d1 = d0, d2 = d0, d3 = d0, q0 = d0, q1 = d0, q2 = d0, q3 = d0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256 a0 = _mm256_sub_ps(_mm256_loadu_ps(v + i), vmean);
    __m256 a1 = _mm256_sub_ps(_mm256_loadu_ps(v + i + 8), vmean);
    __m256 a2 = _mm256_sub_ps(_mm256_loadu_ps(v + i + 16), vmean);
    __m256 a3 = _mm256_sub_ps(_mm256_loadu_ps(v + i + 24), vmean);
    d0 = _mm256_add_ps(d0, a0);
    d1 = _mm256_add_ps(d1, a1);
    d2 = _mm256_add_ps(d2, a2);
    d3 = _mm256_add_ps(d3, a3);
    q0 = _mm256_fmadd_ps(a0, a0, q0);
    q1 = _mm256_fmadd_ps(a1, a1, q1);
    q2 = _mm256_fmadd_ps(a2, a2, q2);
    q3 = _mm256_fmadd_ps(a3, a3, q3);
  }
  for (; i + 8 <= n; i += 8) {
    __m256 a = _mm256_sub_ps(_mm256_loadu_ps(v + i), vmean);
    d0 = _mm256_add_ps(d0, a);
    q0 = _mm256_fmadd_ps(a, a, q0);
  }
  if (i < n) {
    __m256i k = tail_mask(n - i);
    __m256 a = _mm256_and_ps(_mm256_sub_ps(_mm256_maskload_ps(v + i, k), vmean),
                             _mm256_castsi256_ps(k));
    d1 = _mm256_add_ps(d1, a);
    q1 = _mm256_fmadd_ps(a, a, q1);
  }
  d0 = _mm256_add_ps(_mm256_add_ps(d0, d1), _mm256_add_ps(d2, d3));
  q0 = _mm256_add_ps(_mm256_add_ps(q0, q1), _mm256_add_ps(q2, q3));
  float sd = hsum(d0);
  float sq = hsum(q0);
  float var = (sq - sd * (sd / fn)) / fn;
  mean += sd / fn;
  if (var < 0) var = 0;
  float rstd = 1.0f / sqrtf(var + eps);
  if (!(sq < INFINITY)) sh_f32_moments_f64(n, v, eps, &mean, &rstd); /* overflow (or NaN) */
  if (gamma && beta) ln_apply(true, true, n, v, gamma, beta, mean, rstd, y);
  else if (gamma) ln_apply(true, false, n, v, gamma, beta, mean, rstd, y);
  else if (beta) ln_apply(false, true, n, v, gamma, beta, mean, rstd, y);
  else ln_apply(false, false, n, v, gamma, beta, mean, rstd, y);
}

/* -------------------------------------------------------- elementwise */

AVX2_INLINE __m256 binop(const sh_ew_op op, __m256 a, __m256 b) {
  switch (op) {
  case SH_EW_ADD: return _mm256_add_ps(a, b);
  case SH_EW_SUB: return _mm256_sub_ps(a, b);
  case SH_EW_MUL: return _mm256_mul_ps(a, b);
  case SH_EW_DIV: return _mm256_div_ps(a, b);
  /* max_ps/min_ps return b when either is NaN: put a back where a is NaN */
  case SH_EW_MAX:
    return _mm256_blendv_ps(_mm256_max_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  case SH_EW_MIN:
    return _mm256_blendv_ps(_mm256_min_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  }
  return a;
}

AVX2_INLINE void vbin(const sh_ew_op op, int64_t n, const float *a, const float *b, float *y) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 o0 = binop(op, _mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
    __m256 o1 = binop(op, _mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8));
    _mm256_storeu_ps(y + i, o0);
    _mm256_storeu_ps(y + i + 8, o1);
  }
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, binop(op, _mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  if (i < n) {
    __m256i k = tail_mask(n - i);
    _mm256_maskstore_ps(y + i, k,
                        binop(op, _mm256_maskload_ps(a + i, k), _mm256_maskload_ps(b + i, k)));
  }
}

AVX2_INLINE void vbinc(const sh_ew_op op, const bool rev, int64_t n, const float *a, float c,
                       float *y) {
  const __m256 vc = _mm256_set1_ps(c);
#define OP(v) (rev ? binop(op, vc, (v)) : binop(op, (v), vc))
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 o0 = OP(_mm256_loadu_ps(a + i));
    __m256 o1 = OP(_mm256_loadu_ps(a + i + 8));
    _mm256_storeu_ps(y + i, o0);
    _mm256_storeu_ps(y + i + 8, o1);
  }
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, OP(_mm256_loadu_ps(a + i)));
  if (i < n) {
    __m256i k = tail_mask(n - i);
    _mm256_maskstore_ps(y + i, k, OP(_mm256_maskload_ps(a + i, k)));
  }
#undef OP
}

AVX2_FN void sh_f32_vbinary_ukernel__avx2(sh_ew_op op, int64_t n, const float *a,
                                          const float *b, float *y) {
  switch (op) {
  case SH_EW_ADD: vbin(SH_EW_ADD, n, a, b, y); break;
  case SH_EW_SUB: vbin(SH_EW_SUB, n, a, b, y); break;
  case SH_EW_MUL: vbin(SH_EW_MUL, n, a, b, y); break;
  case SH_EW_DIV: vbin(SH_EW_DIV, n, a, b, y); break;
  case SH_EW_MAX: vbin(SH_EW_MAX, n, a, b, y); break;
  case SH_EW_MIN: vbin(SH_EW_MIN, n, a, b, y); break;
  }
}

AVX2_FN void sh_f32_vbinaryc_ukernel__avx2(sh_ew_op op, bool reversed, int64_t n,
                                           const float *a, float c, float *y) {
#define CASE(OP)                               \
  case OP:                                     \
    if (reversed) vbinc(OP, true, n, a, c, y); \
    else vbinc(OP, false, n, a, c, y);         \
    break;
  switch (op) {
    CASE(SH_EW_ADD) CASE(SH_EW_SUB) CASE(SH_EW_MUL) CASE(SH_EW_DIV) CASE(SH_EW_MAX)
    CASE(SH_EW_MIN)
  }
#undef CASE
}

AVX2_FN void sh_f32_vrelu_ukernel__avx2(int64_t n, const float *x, float *y) {
  const __m256 z = _mm256_setzero_ps(); /* max_ps(0, x) returns x for NaN and -0 */
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 o0 = _mm256_max_ps(z, _mm256_loadu_ps(x + i));
    __m256 o1 = _mm256_max_ps(z, _mm256_loadu_ps(x + i + 8));
    _mm256_storeu_ps(y + i, o0);
    _mm256_storeu_ps(y + i + 8, o1);
  }
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_max_ps(z, _mm256_loadu_ps(x + i)));
  if (i < n) {
    __m256i k = tail_mask(n - i);
    _mm256_maskstore_ps(y + i, k, _mm256_max_ps(z, _mm256_maskload_ps(x + i, k)));
  }
}

#endif
