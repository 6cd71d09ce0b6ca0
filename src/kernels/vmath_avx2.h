/*
 * vmath_avx2.h — inline AVX2+FMA exp / sigmoid / tanh / log / GELU (tanh
 * and erf forms) on __m256, correct over the whole f32 range: NaN
 * propagates, ±inf and ±0 give the limits, exp overflows to +inf above
 * 88.72 and underflows gradually (denormals) down to 0 below -103.97.
 * Include only from x86-64 files; every function carries its target
 * attribute, so callers need target("avx2,fma") too (or a superset).
 * Measured errors: docs/KERNELS.md (bench/bench_vmath.c sweeps all 2^32
 * inputs).
 *
 * exp: Cephes expf — n = round(x·log2 e), r = x − n·ln2 (two-part ln2),
 * degree-7 polynomial, then 2^n applied as two exponent-field factors
 * 2^(n/2)·2^(n − n/2), so overflow and gradual underflow round once.
 */
#ifndef SH_KERNELS_VMATH_AVX2_H
#define SH_KERNELS_VMATH_AVX2_H

#if defined(__x86_64__)
#include <immintrin.h>

#define SH_AVX2_FN static inline __attribute__((target("avx2,fma"), always_inline))

/* exp(r) for x = n·ln2 + r, |r| <= ln2/2; *t_out = n + 1.5·2^23, whose low
 * bits hold n. */
SH_AVX2_FN __m256 sh_exp_core_avx2(__m256 x, __m256 *t_out) {
  const __m256 magic = _mm256_set1_ps(12582912.0f); /* 1.5·2^23: round to nearest */
  __m256 t = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), magic);
  __m256 n = _mm256_sub_ps(t, magic);
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
  *t_out = t;
  return p;
}

SH_AVX2_FN __m256 sh_exp_avx2(__m256 x) {
  __m256 t, p = sh_exp_core_avx2(x, &t);
  /* 2^n by an integer add to the exponent field (bits(t) << 23 = n << 23
   * mod 2^32): right when the result is normal, x in [-87, 88] */
  __m256 y = _mm256_castsi256_ps(
      _mm256_add_epi32(_mm256_castps_si256(p), _mm256_slli_epi32(_mm256_castps_si256(t), 23)));
  __m256 ok = _mm256_and_ps(_mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ),
                            _mm256_cmp_ps(x, _mm256_set1_ps(88.0f), _CMP_LE_OQ));
  if (__builtin_expect(_mm256_movemask_ps(ok) == 0xff, 1)) return y;
  /* Rare lanes (overflow, denormal or zero results, inf, NaN): clamp to
   * [-104, 89] (beyond: 0 and +inf anyway; NaN passes through min/max as
   * the second operand) and apply 2^n as 2^(n>>1)·2^(n - (n>>1)), two
   * normal factors, so overflow and gradual underflow round once. */
  __m256 xc = _mm256_max_ps(_mm256_set1_ps(-104.0f), _mm256_min_ps(_mm256_set1_ps(89.0f), x));
  p = sh_exp_core_avx2(xc, &t);
  __m256i ni = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(0x4b400000));
  __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_blendv_ps(_mm256_mul_ps(_mm256_mul_ps(p, s1), s2), y, ok);
}

/* sigmoid: e = exp(-|x|); x >= 0: 1/(1+e), else e/(1+e) (no cancellation,
 * gradual underflow for x < -87.3). */
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

/* log(m·2^e) for x = m·2^e normal and positive (m from the mantissa bits). */
SH_AVX2_FN __m256 sh_log_core_avx2(__m256 x, __m256 e_adj) {
  const __m256 one = _mm256_set1_ps(1.0f);
  __m256i bits = _mm256_castps_si256(x);
  __m256 e = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(126)));
  e = _mm256_sub_ps(e, e_adj);
  __m256 m = _mm256_castsi256_ps(_mm256_or_si256(
      _mm256_and_si256(bits, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x3f000000)));
  /* m in [0.5, 1): below sqrt(1/2) use 2m − 1 and e − 1, else m − 1 */
  __m256 lo = _mm256_cmp_ps(m, _mm256_set1_ps(0.707106781186547524f), _CMP_LT_OQ);
  e = _mm256_sub_ps(e, _mm256_and_ps(lo, one));
  m = _mm256_add_ps(_mm256_sub_ps(m, one), _mm256_and_ps(lo, m));
  __m256 z = _mm256_mul_ps(m, m);
  /* degree-8 polynomial by Estrin's scheme (short dependency chains) */
  __m256 z2 = _mm256_mul_ps(z, z);
  __m256 q01 = _mm256_fmadd_ps(_mm256_set1_ps(-2.4999993993E-1f), m, _mm256_set1_ps(3.3333331174E-1f));
  __m256 q23 = _mm256_fmadd_ps(_mm256_set1_ps(-1.6668057665E-1f), m, _mm256_set1_ps(2.0000714765E-1f));
  __m256 q45 = _mm256_fmadd_ps(_mm256_set1_ps(-1.2420140846E-1f), m, _mm256_set1_ps(1.4249322787E-1f));
  __m256 q67 = _mm256_fmadd_ps(_mm256_set1_ps(-1.1514610310E-1f), m, _mm256_set1_ps(1.1676998740E-1f));
  __m256 q03 = _mm256_fmadd_ps(q23, z, q01);
  __m256 q47 = _mm256_fmadd_ps(q67, z, q45);
  __m256 q48 = _mm256_fmadd_ps(_mm256_set1_ps(7.0376836292E-2f), z2, q47);
  __m256 p = _mm256_fmadd_ps(q48, z2, q03);
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, m), z);
  y = _mm256_fmadd_ps(e, _mm256_set1_ps(-2.12194440e-4f), y);
  y = _mm256_fmadd_ps(z, _mm256_set1_ps(-0.5f), y);
  return _mm256_fmadd_ps(e, _mm256_set1_ps(0.693359375f), _mm256_add_ps(m, y));
}

/* log: Cephes logf — x = m·2^e with m in [sqrt(1/2), sqrt 2), log(m) by a
 * degree-8 polynomial in m − 1 (Estrin), e·ln 2 in two parts. Rare lanes: denormals
 * scaled by 2^23 first; log(±0) = −inf, log(x < 0) = NaN, log(+inf) = +inf. */
SH_AVX2_FN __m256 sh_log_avx2(__m256 x) {
  const __m256 inf = _mm256_set1_ps(__builtin_inff()), fmin = _mm256_set1_ps(1.17549435e-38f);
  __m256 ok = _mm256_and_ps(_mm256_cmp_ps(x, fmin, _CMP_GE_OQ), _mm256_cmp_ps(x, inf, _CMP_LT_OQ));
  if (__builtin_expect(_mm256_movemask_ps(ok) == 0xff, 1))
    return sh_log_core_avx2(x, _mm256_setzero_ps());
  __m256 tiny = _mm256_cmp_ps(x, fmin, _CMP_LT_OQ);
  __m256 xs = _mm256_blendv_ps(x, _mm256_mul_ps(x, _mm256_set1_ps(8388608.0f)), tiny);
  __m256 r = sh_log_core_avx2(xs, _mm256_and_ps(tiny, _mm256_set1_ps(23.0f)));
  r = _mm256_blendv_ps(r, _mm256_set1_ps(-__builtin_inff()),
                       _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_EQ_OQ));
  r = _mm256_blendv_ps(r, inf, _mm256_cmp_ps(x, inf, _CMP_EQ_OQ));
  return _mm256_blendv_ps(r, _mm256_set1_ps(__builtin_nanf("")),
                          _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_NGE_UQ));
}

/* gelu_tanh(x) = x · sigmoid(2·sqrt(2/pi)·(x + 0.044715 x^3)); x clamped
 * below at -20 (the result is -0 there already), so gelu(-inf) = -0. */
SH_AVX2_FN __m256 sh_gelu_tanh_avx2(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(-20.0f), x);
  __m256 x2 = _mm256_mul_ps(x, x);
  __m256 u = _mm256_mul_ps(x, _mm256_fmadd_ps(x2, _mm256_set1_ps(2.0f * 0.7978845608028654f * 0.044715f),
                                              _mm256_set1_ps(2.0f * 0.7978845608028654f)));
  return _mm256_mul_ps(x, sh_sigmoid_avx2(u));
}

/* gelu_erf(x) = x · Phi(x), Phi the normal CDF. With u = |x|:
 *   Phi(-u) = exp(-u²/2) · R(u),  R(u) = P(u)/Q(u) (degree 4/5 rational fit
 *   of Phi(-u)·exp(u²/2) on [0, 15], rel. error 4e-8), u² split exactly
 *   into hi + lo by an FMA so exp(-u²/2) keeps full precision;
 *   Phi(x) = Phi(-u) for x < 0, 1 − Phi(-u) for x >= 0 (no cancellation);
 *   for x < 0 the product is ordered (x·R)·exp so a denormal result rounds once. */
SH_AVX2_FN __m256 sh_gelu_erf_avx2(__m256 x) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 u = _mm256_min_ps(_mm256_set1_ps(20.0f), _mm256_andnot_ps(sign, x)); /* NaN stays */
  __m256 h = _mm256_mul_ps(u, u);
  __m256 l = _mm256_fmsub_ps(u, u, h); /* u² = h + l exactly */
  __m256 e = sh_exp_avx2(_mm256_mul_ps(h, _mm256_set1_ps(-0.5f)));
  e = _mm256_fnmadd_ps(e, _mm256_mul_ps(l, _mm256_set1_ps(0.5f)), e);
  __m256 p = _mm256_set1_ps(0.004153503105044365f);
  p = _mm256_fmadd_ps(p, u, _mm256_set1_ps(0.040883250534534454f));
  p = _mm256_fmadd_ps(p, u, _mm256_set1_ps(0.18397581577301025f));
  p = _mm256_fmadd_ps(p, u, _mm256_set1_ps(0.4392929673194885f));
  p = _mm256_fmadd_ps(p, u, _mm256_set1_ps(0.5f));
  __m256 q = _mm256_set1_ps(0.010411176830530167f);
  q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(0.10248523205518723f));
  q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(0.47142618894577026f));
  q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(1.2055768966674805f));
  q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(1.6764709949493408f));
  q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(1.0f));
  __m256 R = _mm256_div_ps(p, q);
  x = _mm256_max_ps(_mm256_set1_ps(-20.0f), x);
  /* x < 0: (x·R)·e rounds once into the denormals; else x·(1 − e·R) */
  __m256 neg = _mm256_mul_ps(_mm256_mul_ps(x, R), e);
  __m256 pos = _mm256_mul_ps(x, _mm256_fnmadd_ps(e, R, _mm256_set1_ps(1.0f)));
  return _mm256_blendv_ps(pos, neg, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
}

#undef SH_AVX2_FN
#endif
#endif
