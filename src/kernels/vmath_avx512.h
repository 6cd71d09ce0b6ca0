/*
 * vmath_avx512.h — inline AVX-512 versions of the vector math where 512-bit
 * instructions do the job in fewer operations than vmath_avx2.h (on Zen 4 a
 * zmm op costs two ymm ops' execution slots but one decode/schedule slot,
 * vscalefps applies 2^n with overflow and gradual underflow in one rounded
 * op, and vgetexpps/vgetmantps replace the exponent-field bit manipulation):
 * exp, sigmoid, tanh, log. Same algorithms, error bounds and special values
 * as the vmath_avx2.h versions; plus division-free sigmoid and tanh.
 * Include only from x86-64 files; callers need
 * target("avx512f,avx512dq,fma") or a superset.
 */
#ifndef SH_KERNELS_VMATH_AVX512_H
#define SH_KERNELS_VMATH_AVX512_H

#if defined(__x86_64__)
#include <immintrin.h>

#define SH_AVX512_FN static inline __attribute__((target("avx512f,avx512dq,fma"), always_inline))

/* exp: Cephes expf as sh_exp_avx2, input clamped to [-104, 89] (beyond:
 * 0 and +inf anyway; NaN passes through min/max as the second operand),
 * 2^n by vscalefps (one rounding, also into the denormals or to +inf). */
SH_AVX512_FN __m512 sh_exp_avx512(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), _mm512_min_ps(_mm512_set1_ps(89.0f), x));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500E-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

/* sigmoid: e = exp(-|x|); x >= 0: 1/(1+e), else e/(1+e). */
SH_AVX512_FN __m512 sh_sigmoid_avx512(__m512 x) {
  __m512 e = sh_exp_avx512(_mm512_or_ps(x, _mm512_set1_ps(-0.0f)));
  __mmask16 neg = _mm512_movepi32_mask(_mm512_castps_si512(x)); /* sign bits */
  __m512 num = _mm512_mask_blend_ps(neg, _mm512_set1_ps(1.0f), e);
  return _mm512_div_ps(num, _mm512_add_ps(e, _mm512_set1_ps(1.0f)));
}

/* tanh for |x| < 0.625 (ax = |x|): Cephes odd polynomial. */
SH_AVX512_FN __m512 sh_tanh_small_avx512(__m512 x, __m512 ax) {
  __m512 s = _mm512_mul_ps(x, x);
  __m512 p = _mm512_set1_ps(-5.70498872745E-3f);
  p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(2.06390887954E-2f));
  p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(-5.37397155531E-2f));
  p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(1.33314422036E-1f));
  p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(-3.33332819422E-1f));
  return _mm512_fmadd_ps(_mm512_mul_ps(p, s), ax, ax);
}

/* tanh: |x| < 0.625: Cephes odd polynomial; else sign(x)(1 − 2/(exp(2|x|)+1)). */
SH_AVX512_FN __m512 sh_tanh_avx512(__m512 x) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  __m512 ax = _mm512_andnot_ps(sign, x);
  __m512 small = sh_tanh_small_avx512(x, ax);
  __m512 e = sh_exp_avx512(_mm512_add_ps(ax, ax));
  __m512 big = _mm512_sub_ps(_mm512_set1_ps(1.0f),
                             _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
  __mmask16 is_small = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.625f), _CMP_LT_OQ);
  return _mm512_or_ps(_mm512_mask_blend_ps(is_small, big, small), _mm512_and_ps(x, sign));
}

/* Division-free variants (vdivps zmm costs ~20 cycles a vector on Zen 4):
 * the reciprocal 1/d for d >= 1 finite is rcp14 (relative error < 2^-14)
 * then one Newton step r + r(1 − dr), which squares the error (below 2^-28
 * before rounding). Faster where many values stream through memory (the
 * runtime's pointwise programs); in the GEMM epilogues, which are bound by
 * other ports, the division forms above measured faster. Error bounds as
 * the division forms (test_gemm_vmath.c measures both over the whole f32
 * range): sigmoid ~2.4 ulp, tanh ~1.2 ulp; same special values. */
SH_AVX512_FN __m512 sh_rcp_nr_avx512(__m512 d) {
  __m512 r = _mm512_rcp14_ps(d);
  return _mm512_fmadd_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(1.0f)), r);
}

SH_AVX512_FN __m512 sh_sigmoid_fast_avx512(__m512 x) {
  __m512 e = sh_exp_avx512(_mm512_or_ps(x, _mm512_set1_ps(-0.0f)));
  __mmask16 neg = _mm512_movepi32_mask(_mm512_castps_si512(x)); /* sign bits */
  __m512 num = _mm512_mask_blend_ps(neg, _mm512_set1_ps(1.0f), e);
  return _mm512_mul_ps(num, sh_rcp_nr_avx512(_mm512_add_ps(e, _mm512_set1_ps(1.0f))));
}

/* |x| clamped to 9.1 for the exp (keeps exp(2|x|) + 1 finite for the
 * Newton step; 1 − 2/(exp(18.2) + 1) still rounds to 1, as tanh does from
 * 9.01 on; min(9.1, NaN) is NaN). */
SH_AVX512_FN __m512 sh_tanh_fast_avx512(__m512 x) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  __m512 ax = _mm512_andnot_ps(sign, x);
  __m512 small = sh_tanh_small_avx512(x, ax);
  __m512 cx = _mm512_min_ps(_mm512_set1_ps(9.1f), ax);
  __m512 e = sh_exp_avx512(_mm512_add_ps(cx, cx));
  __m512 r = sh_rcp_nr_avx512(_mm512_add_ps(e, _mm512_set1_ps(1.0f)));
  __m512 big = _mm512_fnmadd_ps(_mm512_set1_ps(2.0f), r, _mm512_set1_ps(1.0f));
  __mmask16 is_small = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.625f), _CMP_LT_OQ);
  return _mm512_or_ps(_mm512_mask_blend_ps(is_small, big, small), _mm512_and_ps(x, sign));
}

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
