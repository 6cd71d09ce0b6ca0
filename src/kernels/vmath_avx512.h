/*
 * vmath_avx512.h — inline AVX-512 versions of the vector math where 512-bit
 * instructions do the job in fewer operations than vmath_avx2.h (on Zen 4 a
 * zmm op costs two ymm ops' execution slots but one decode/schedule slot,
 * and vgetexpps/vgetmantps replace the exponent-field bit manipulation):
 * log. Same algorithm and special values as sh_log_avx2. Include only from
 * x86-64 files; callers need target("avx512f,avx512dq,fma") or a superset.
 */
#ifndef SH_KERNELS_VMATH_AVX512_H
#define SH_KERNELS_VMATH_AVX512_H

#if defined(__x86_64__)
#include <immintrin.h>

#define SH_AVX512_FN static inline __attribute__((target("avx512f,avx512dq,fma"), always_inline))

/* log: x = m·2^e with m in [sqrt(1/2), sqrt 2) from getmant/getexp (which
 * also normalize denormals), then Cephes logf's degree-8 polynomial in
 * m − 1 (Estrin) and e·ln 2 in two parts. Rare lanes (x <= 0, inf, NaN)
 * get log(±0) = −inf, log(x < 0) = NaN, log(+inf) = +inf, NaN. */
SH_AVX512_FN __m512 sh_log_avx512(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 m = _mm512_getmant_ps(x, _MM_MANT_NORM_1_2, _MM_MANT_SIGN_src);
  __m512 e = _mm512_getexp_ps(x);
  __mmask16 hi = _mm512_cmp_ps_mask(m, _mm512_set1_ps(1.41421356237309505f), _CMP_GT_OQ);
  m = _mm512_mask_mul_ps(m, hi, m, _mm512_set1_ps(0.5f));
  e = _mm512_mask_add_ps(e, hi, e, one);
  m = _mm512_sub_ps(m, one);
  __m512 z = _mm512_mul_ps(m, m), z2 = _mm512_mul_ps(z, z);
  __m512 q01 = _mm512_fmadd_ps(_mm512_set1_ps(-2.4999993993E-1f), m, _mm512_set1_ps(3.3333331174E-1f));
  __m512 q23 = _mm512_fmadd_ps(_mm512_set1_ps(-1.6668057665E-1f), m, _mm512_set1_ps(2.0000714765E-1f));
  __m512 q45 = _mm512_fmadd_ps(_mm512_set1_ps(-1.2420140846E-1f), m, _mm512_set1_ps(1.4249322787E-1f));
  __m512 q67 = _mm512_fmadd_ps(_mm512_set1_ps(-1.1514610310E-1f), m, _mm512_set1_ps(1.1676998740E-1f));
  __m512 q03 = _mm512_fmadd_ps(q23, z, q01);
  __m512 q48 = _mm512_fmadd_ps(_mm512_set1_ps(7.0376836292E-2f), z2, _mm512_fmadd_ps(q67, z, q45));
  __m512 p = _mm512_fmadd_ps(q48, z2, q03);
  __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, m), z);
  y = _mm512_fmadd_ps(e, _mm512_set1_ps(-2.12194440e-4f), y);
  y = _mm512_fmadd_ps(z, _mm512_set1_ps(-0.5f), y);
  __m512 r = _mm512_fmadd_ps(e, _mm512_set1_ps(0.693359375f), _mm512_add_ps(m, y));
  /* x > 0 and finite (denormals included) for every lane: done */
  __mmask16 ok = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ) &
                 _mm512_cmp_ps_mask(x, _mm512_set1_ps(__builtin_inff()), _CMP_LT_OQ);
  if (__builtin_expect(ok == 0xffff, 1)) return r;
  r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_EQ_OQ),
                         _mm512_set1_ps(-__builtin_inff()));
  r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x, _mm512_set1_ps(__builtin_inff()), _CMP_EQ_OQ),
                         _mm512_set1_ps(__builtin_inff()));
  return _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_NGE_UQ),
                            _mm512_set1_ps(__builtin_nanf("")));
}

#undef SH_AVX512_FN
#endif
#endif
