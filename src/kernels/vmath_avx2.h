/*
 * vmath_avx2.h — inline AVX2+FMA exp / sigmoid / tanh / GELU on __m256.
 * Include only from x86-64 files; every function carries its target
 * attribute, so callers need target("avx2,fma") too (or a superset).
 *
 * exp: Cephes expf — n = round(x·log2 e), r = x − n·ln2 (two-part ln2),
 * degree-7 polynomial, scale by 2^n through the exponent bits.
 */
#ifndef SH_KERNELS_VMATH_AVX2_H
#define SH_KERNELS_VMATH_AVX2_H

#if defined(__x86_64__)
#include <immintrin.h>

#define SH_AVX2_FN static inline __attribute__((target("avx2,fma"), always_inline))

SH_AVX2_FN __m256 sh_exp_avx2(__m256 x) {
  /* clamp (NaN passes through min/max with x second) */
  x = _mm256_max_ps(_mm256_set1_ps(-87.33654f), _mm256_min_ps(_mm256_set1_ps(88.0f), x));
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500E-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
  __m256 r2 = _mm256_mul_ps(r, r);
  p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* sigmoid: e = exp(-|x|); x >= 0: 1/(1+e), else e/(1+e). */
SH_AVX2_FN __m256 sh_sigmoid_avx2(__m256 x) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 e = sh_exp_avx2(_mm256_or_ps(x, sign));
  __m256 d = _mm256_add_ps(e, _mm256_set1_ps(1.0f));
  __m256 num = _mm256_blendv_ps(_mm256_set1_ps(1.0f), e, x); /* sign bit of x selects e */
  return _mm256_div_ps(num, d);
}

/* tanh: |x| < 0.625: Cephes odd polynomial; else sign(x)(1 − 2/(exp(2|x|)+1)). */
SH_AVX2_FN __m256 sh_tanh_avx2(__m256 x) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 ax = _mm256_andnot_ps(sign, x);
  __m256 s = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(-5.70498872745E-3f);
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(2.06390887954E-2f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(-5.37397155531E-2f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(1.33314422036E-1f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(-3.33332819422E-1f));
  __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, s), ax, ax);
  __m256 e = sh_exp_avx2(_mm256_add_ps(ax, ax));
  __m256 big = _mm256_sub_ps(_mm256_set1_ps(1.0f),
                             _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
  __m256 is_small = _mm256_cmp_ps(ax, _mm256_set1_ps(0.625f), _CMP_LT_OQ);
  /* |tanh| then the sign of x (keeps tanh(-0) = -0) */
  return _mm256_or_ps(_mm256_blendv_ps(big, small, is_small), _mm256_and_ps(x, sign));
}

/* gelu_tanh(x) = x · sigmoid(2·sqrt(2/pi)·(x + 0.044715 x^3)). */
SH_AVX2_FN __m256 sh_gelu_tanh_avx2(__m256 x) {
  __m256 x2 = _mm256_mul_ps(x, x);
  __m256 u = _mm256_mul_ps(x, _mm256_fmadd_ps(x2, _mm256_set1_ps(2.0f * 0.7978845608028654f * 0.044715f),
                                              _mm256_set1_ps(2.0f * 0.7978845608028654f)));
  return _mm256_mul_ps(x, sh_sigmoid_avx2(u));
}

#undef SH_AVX2_FN
#endif
#endif
