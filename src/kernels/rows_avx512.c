/*
 * rows_avx512.c — AVX-512 level of the row kernels (rows_kernels.h): 16
 * floats per zmm, masked loads/stores for the tail (no over-read, no scalar
 * loop), 2–8 independent accumulators per reduction. Softmax has its own
 * exp for arguments <= 0 (degree-5 polynomial, the 2^n scaling done by
 * vscalefps, which underflows gracefully: exp(-inf) = 0, NaN stays NaN).
 * Log-softmax uses vmath's exp (sh_exp_avx512: the values sh_vmath_f32
 * gives) and sums in double.
 */
#include "kernels/rows_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>

#include "kernels/vmath_avx512.h"

#define AVX512_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#define AVX512_INLINE \
  static inline __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma"), always_inline))

AVX512_INLINE __mmask16 tail_mask(int64_t rem) { return (__mmask16)((1u << rem) - 1); }

/* exp(t) for t <= 0 (or NaN): one-constant range reduction and a degree-5
 * polynomial (the rr1-p5 scheme of XNNPACK's softmax kernels), <= 4.8 ulp
 * on [-87.3, 0] (most of it from the reduction at large |t|; near 0 ~1.5);
 * below -104 the result is 0 in f32. 12 ops per vector. */
AVX512_INLINE __m512 exp_nonpos(__m512 t) {
  t = _mm512_max_ps(_mm512_set1_ps(-104.0f), t); /* NaN t is returned as is */
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(t, _mm512_set1_ps(0x1.715476p+0f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0x1.62E430p-1f), t);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(0x1.0F9F9Cp-7f), r, _mm512_set1_ps(0x1.573A1Ap-5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0x1.555A80p-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0x1.FFFDC6p-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0x1.FFFFF6p-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n); /* p·2^n, rounding gracefully into denormals and 0 */
}

/* ---------------------------------------------------------- reductions */

AVX512_INLINE float rsum(int64_t n, const float *x) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    s0 = _mm512_add_ps(s0, _mm512_loadu_ps(x + i));
    s1 = _mm512_add_ps(s1, _mm512_loadu_ps(x + i + 16));
    s2 = _mm512_add_ps(s2, _mm512_loadu_ps(x + i + 32));
    s3 = _mm512_add_ps(s3, _mm512_loadu_ps(x + i + 48));
  }
  for (; i + 16 <= n; i += 16) s0 = _mm512_add_ps(s0, _mm512_loadu_ps(x + i));
  if (i < n) s1 = _mm512_add_ps(s1, _mm512_maskz_loadu_ps(tail_mask(n - i), x + i));
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

AVX512_FN float sh_f32_rsum_ukernel__avx512(int64_t n, const float *x) { return rsum(n, x); }

AVX512_FN float sh_f32_rmax_ukernel__avx512(int64_t n, const float *x) {
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  __m512 m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf;
  __mmask16 nan = 0; /* max_ps drops NaN: track it on the side */
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
    __m512 v2 = _mm512_loadu_ps(x + i + 32), v3 = _mm512_loadu_ps(x + i + 48);
    m0 = _mm512_max_ps(m0, v0);
    m1 = _mm512_max_ps(m1, v1);
    m2 = _mm512_max_ps(m2, v2);
    m3 = _mm512_max_ps(m3, v3);
    nan |= _mm512_cmp_ps_mask(v0, v1, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(v2, v3, _CMP_UNORD_Q);
  }
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_loadu_ps(x + i);
    m0 = _mm512_max_ps(m0, v);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  }
  if (i < n) {
    __m512 v = _mm512_mask_loadu_ps(ninf, tail_mask(n - i), x + i);
    m1 = _mm512_max_ps(m1, v);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  }
  if (nan) return NAN;
  return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
}

/* ------------------------------------------------------------- softmax */

/* max (or, NEG, min) of x[0..n) */
AVX512_INLINE float rextreme(const bool NEG, int64_t n, const float *x) {
#define EXT(a, b) (NEG ? _mm512_min_ps((a), (b)) : _mm512_max_ps((a), (b)))
  const __m512 init = _mm512_set1_ps(NEG ? INFINITY : -INFINITY);
  __m512 m0 = init, m1 = init, m2 = init, m3 = init;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    m0 = EXT(m0, _mm512_loadu_ps(x + i));
    m1 = EXT(m1, _mm512_loadu_ps(x + i + 16));
    m2 = EXT(m2, _mm512_loadu_ps(x + i + 32));
    m3 = EXT(m3, _mm512_loadu_ps(x + i + 48));
  }
  for (; i + 16 <= n; i += 16) m0 = EXT(m0, _mm512_loadu_ps(x + i));
  if (i < n) m1 = EXT(m1, _mm512_mask_loadu_ps(init, tail_mask(n - i), x + i));
  __m512 m = EXT(EXT(m0, m1), EXT(m2, m3));
#undef EXT
  return NEG ? _mm512_reduce_min_ps(m) : _mm512_reduce_max_ps(m);
}

AVX512_FN void sh_f32_softmax_ukernel__avx512(int64_t n, float scale, const float *x,
                                              float *y) {
  /* 1. the x that maximizes scale*x (max for scale >= 0, min below); then
   *    t = scale * (x - m) is <= 0 everywhere and exactly 0 at the extreme
   *    element, and there is no a*b - c a compiler could fuse */
  const __m512 vs = _mm512_set1_ps(scale);
  const __m512 vm = _mm512_set1_ps(scale >= 0 ? rextreme(false, n, x) : rextreme(true, n, x));
#define T(p) _mm512_mul_ps(vs, _mm512_sub_ps((p), vm))

  /* 2. y = exp(t), summed on the way (a NaN anywhere, or an extreme of
   *    -inf, makes the sum and so the whole row NaN) */
  __m512 s0 = _mm512_setzero_ps(), s1 = s0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512 e0 = exp_nonpos(T(_mm512_loadu_ps(x + i)));
    __m512 e1 = exp_nonpos(T(_mm512_loadu_ps(x + i + 16)));
    _mm512_storeu_ps(y + i, e0);
    _mm512_storeu_ps(y + i + 16, e1);
    s0 = _mm512_add_ps(s0, e0);
    s1 = _mm512_add_ps(s1, e1);
  }
  for (; i + 16 <= n; i += 16) {
    __m512 e = exp_nonpos(T(_mm512_loadu_ps(x + i)));
    _mm512_storeu_ps(y + i, e);
    s0 = _mm512_add_ps(s0, e);
  }
  if (i < n) {
    __mmask16 k = tail_mask(n - i);
    __m512 e = exp_nonpos(T(_mm512_maskz_loadu_ps(k, x + i)));
    _mm512_mask_storeu_ps(y + i, k, e);
    s1 = _mm512_mask_add_ps(s1, k, s1, e);
  }
#undef T
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(_mm512_add_ps(s0, s1)));

  /* 3. normalize */
  for (i = 0; i + 32 <= n; i += 32) {
    _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(y + i), inv));
    _mm512_storeu_ps(y + i + 16, _mm512_mul_ps(_mm512_loadu_ps(y + i + 16), inv));
  }
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(y + i), inv));
  if (i < n) {
    __mmask16 k = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, y + i), inv));
  }
}

/* --------------------------------------------------------- log_softmax */

/* s0 + s1 += the 16 lanes of e, in double */
AVX512_INLINE void add_f64(__m512 e, __m512d *s0, __m512d *s1) {
  *s0 = _mm512_add_pd(*s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
  __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1));
  *s1 = _mm512_add_pd(*s1, _mm512_cvtps_pd(hi));
}

AVX512_FN void sh_f32_log_softmax_ukernel__avx512(int64_t n, const float *x, float *y) {
  /* t = x - max <= 0; sum exp(t) in double; y = t - log(sum) */
  const __m512 vm = _mm512_set1_ps(rextreme(false, n, x));
  __m512d s0 = _mm512_setzero_pd(), s1 = s0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    add_f64(sh_exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm)), &s0, &s1);
  if (i < n) {
    __mmask16 k = tail_mask(n - i);
    __m512 e = sh_exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm));
    add_f64(_mm512_maskz_mov_ps(k, e), &s0, &s1);
  }
  const __m512 ls = _mm512_set1_ps((float)log(_mm512_reduce_add_pd(_mm512_add_pd(s0, s1))));
  for (i = 0; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_sub_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm), ls));
  if (i < n) {
    __mmask16 k = tail_mask(n - i);
    __m512 t = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm);
    _mm512_mask_storeu_ps(y + i, k, _mm512_sub_ps(t, ls));
  }
}

/* ----------------------------------------------------------- layernorm */

/* y = (v - mean) * g + b over one vector, g = gamma*rstd (or rstd), b = beta (or 0) */
AVX512_INLINE void ln_store(const bool G, const bool B, float *y, const float *v,
                            const float *gamma, const float *beta, int64_t i, __mmask16 k,
                            __m512 vmean, __m512 vrstd) {
  __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, v + i), vmean);
  __m512 g = G ? _mm512_mul_ps(_mm512_maskz_loadu_ps(k, gamma + i), vrstd) : vrstd;
  __m512 o = B ? _mm512_fmadd_ps(d, g, _mm512_maskz_loadu_ps(k, beta + i)) : _mm512_mul_ps(d, g);
  _mm512_mask_storeu_ps(y + i, k, o);
}

AVX512_INLINE void ln_apply(const bool G, const bool B, int64_t n, const float *v,
                            const float *gamma, const float *beta, float mean, float rstd,
                            float *y) {
  const __m512 vmean = _mm512_set1_ps(mean), vrstd = _mm512_set1_ps(rstd);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    ln_store(G, B, y, v, gamma, beta, i, 0xffff, vmean, vrstd);
    ln_store(G, B, y, v, gamma, beta, i + 16, 0xffff, vmean, vrstd);
  }
  for (; i + 16 <= n; i += 16) ln_store(G, B, y, v, gamma, beta, i, 0xffff, vmean, vrstd);
  if (i < n) ln_store(G, B, y, v, gamma, beta, i, tail_mask(n - i), vmean, vrstd);
}

AVX512_FN void sh_f32_layernorm_ukernel__avx512(int64_t n, const float *x, const float *r,
                                                const float *gamma, const float *beta,
                                                float eps, float *y) {
  const float *v = x;
  float sum;
  if (r) { /* v = x + r, stored to y and summed in one pass */
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
      __m512 v0 = _mm512_add_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(r + i));
      __m512 v1 = _mm512_add_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(r + i + 16));
      __m512 v2 = _mm512_add_ps(_mm512_loadu_ps(x + i + 32), _mm512_loadu_ps(r + i + 32));
      __m512 v3 = _mm512_add_ps(_mm512_loadu_ps(x + i + 48), _mm512_loadu_ps(r + i + 48));
      _mm512_storeu_ps(y + i, v0);
      _mm512_storeu_ps(y + i + 16, v1);
      _mm512_storeu_ps(y + i + 32, v2);
      _mm512_storeu_ps(y + i + 48, v3);
      s0 = _mm512_add_ps(s0, v0);
      s1 = _mm512_add_ps(s1, v1);
      s2 = _mm512_add_ps(s2, v2);
      s3 = _mm512_add_ps(s3, v3);
    }
    for (; i + 16 <= n; i += 16) {
      __m512 v0 = _mm512_add_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(r + i));
      _mm512_storeu_ps(y + i, v0);
      s0 = _mm512_add_ps(s0, v0);
    }
    if (i < n) {
      __mmask16 k = tail_mask(n - i);
      __m512 v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(k, x + i), _mm512_maskz_loadu_ps(k, r + i));
      _mm512_mask_storeu_ps(y + i, k, v0);
      s1 = _mm512_add_ps(s1, v0);
    }
    sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
    v = y;
  } else {
    sum = rsum(n, x);
  }
  /* corrected two-pass variance: sum of deviations (fixes the mean's
   * rounding) and of their squares */
  const float fn = (float)n;
  float mean = sum / fn;
  const __m512 vmean = _mm512_set1_ps(mean);
  __m512 d0 = _mm512_setzero_ps(), d1 = d0, d2 = d0, d3 = d0, q0 = d0, q1 = d0, q2 = d0, q3 = d0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m512 a0 = _mm512_sub_ps(_mm512_loadu_ps(v + i), vmean);
    __m512 a1 = _mm512_sub_ps(_mm512_loadu_ps(v + i + 16), vmean);
    __m512 a2 = _mm512_sub_ps(_mm512_loadu_ps(v + i + 32), vmean);
    __m512 a3 = _mm512_sub_ps(_mm512_loadu_ps(v + i + 48), vmean);
    d0 = _mm512_add_ps(d0, a0);
    d1 = _mm512_add_ps(d1, a1);
    d2 = _mm512_add_ps(d2, a2);
    d3 = _mm512_add_ps(d3, a3);
    q0 = _mm512_fmadd_ps(a0, a0, q0);
    q1 = _mm512_fmadd_ps(a1, a1, q1);
    q2 = _mm512_fmadd_ps(a2, a2, q2);
    q3 = _mm512_fmadd_ps(a3, a3, q3);
  }
  for (; i + 16 <= n; i += 16) {
    __m512 a = _mm512_sub_ps(_mm512_loadu_ps(v + i), vmean);
    d0 = _mm512_add_ps(d0, a);
    q0 = _mm512_fmadd_ps(a, a, q0);
  }
  if (i < n) {
    __mmask16 k = tail_mask(n - i);
    __m512 a = _mm512_maskz_sub_ps(k, _mm512_maskz_loadu_ps(k, v + i), vmean);
    d1 = _mm512_add_ps(d1, a);
    q1 = _mm512_fmadd_ps(a, a, q1);
  }
  d0 = _mm512_add_ps(_mm512_add_ps(d0, d1), _mm512_add_ps(d2, d3));
  q0 = _mm512_add_ps(_mm512_add_ps(q0, q1), _mm512_add_ps(q2, q3));
  float sd = _mm512_reduce_add_ps(d0);
  float sq = _mm512_reduce_add_ps(q0);
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

AVX512_INLINE __m512 binop(const sh_ew_op op, __m512 a, __m512 b) {
  switch (op) {
  case SH_EW_ADD: return _mm512_add_ps(a, b);
  case SH_EW_SUB: return _mm512_sub_ps(a, b);
  case SH_EW_MUL: return _mm512_mul_ps(a, b);
  case SH_EW_DIV: return _mm512_div_ps(a, b);
  /* max_ps/min_ps return b when either is NaN: put a back where a is NaN */
  case SH_EW_MAX:
    return _mm512_mask_mov_ps(_mm512_max_ps(a, b), _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a);
  case SH_EW_MIN:
    return _mm512_mask_mov_ps(_mm512_min_ps(a, b), _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a);
  }
  return a;
}

AVX512_INLINE void vbin(const sh_ew_op op, int64_t n, const float *a, const float *b, float *y) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512 o0 = binop(op, _mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i));
    __m512 o1 = binop(op, _mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16));
    _mm512_storeu_ps(y + i, o0);
    _mm512_storeu_ps(y + i + 16, o1);
  }
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, binop(op, _mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
  if (i < n) {
    __mmask16 k = tail_mask(n - i);
    _mm512_mask_storeu_ps(
        y + i, k, binop(op, _mm512_maskz_loadu_ps(k, a + i), _mm512_maskz_loadu_ps(k, b + i)));
  }
}

AVX512_INLINE void vbinc(const sh_ew_op op, const bool rev, int64_t n, const float *a, float c,
                         float *y) {
  const __m512 vc = _mm512_set1_ps(c);
#define OP(v) (rev ? binop(op, vc, (v)) : binop(op, (v), vc))
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512 o0 = OP(_mm512_loadu_ps(a + i));
    __m512 o1 = OP(_mm512_loadu_ps(a + i + 16));
    _mm512_storeu_ps(y + i, o0);
    _mm512_storeu_ps(y + i + 16, o1);
  }
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, OP(_mm512_loadu_ps(a + i)));
  if (i < n) {
    __mmask16 k = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, k, OP(_mm512_maskz_loadu_ps(k, a + i)));
  }
#undef OP
}

AVX512_FN void sh_f32_vbinary_ukernel__avx512(sh_ew_op op, int64_t n, const float *a,
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

AVX512_FN void sh_f32_vbinaryc_ukernel__avx512(sh_ew_op op, bool reversed, int64_t n,
                                               const float *a, float c, float *y) {
#define CASE(OP)                                   \
  case OP:                                         \
    if (reversed) vbinc(OP, true, n, a, c, y);     \
    else vbinc(OP, false, n, a, c, y);             \
    break;
  switch (op) {
    CASE(SH_EW_ADD) CASE(SH_EW_SUB) CASE(SH_EW_MUL) CASE(SH_EW_DIV) CASE(SH_EW_MAX)
    CASE(SH_EW_MIN)
  }
#undef CASE
}

AVX512_FN void sh_f32_vrelu_ukernel__avx512(int64_t n, const float *x, float *y) {
  const __m512 z = _mm512_setzero_ps(); /* max_ps(0, x) returns x for NaN and -0 */
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512 o0 = _mm512_max_ps(z, _mm512_loadu_ps(x + i));
    __m512 o1 = _mm512_max_ps(z, _mm512_loadu_ps(x + i + 16));
    _mm512_storeu_ps(y + i, o0);
    _mm512_storeu_ps(y + i + 16, o1);
  }
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_max_ps(z, _mm512_loadu_ps(x + i)));
  if (i < n) {
    __mmask16 k = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, k, _mm512_max_ps(z, _mm512_maskz_loadu_ps(k, x + i)));
  }
}

#endif
