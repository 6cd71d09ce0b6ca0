/*
 * pw_ops.h — the body of every elementwise op of ops.def, in one place: the
 * scalar reference and the AVX2 and AVX-512 vector bodies side by side. The
 * row interpreter (pw_interp.h) includes this file twice: first for the
 * helpers (guarded), then inside its opcode switch with the PW_* macros
 * below defined, where each level takes its own column (PW_BODY). A new op
 * is one line of the list at the bottom (and its line in ops.def; pw.c
 * fails to compile while an elementwise op has no body).
 *
 *   PW_OP1(ID, scalar, avx2, avx512)   unary: expressions of x
 *   PW_OP2(ID, scalar, avx2, avx512)   binary: of x (a) and y (b)
 *   PW_OP3(ID, scalar, avx2, avx512)   ternary: of x, y, z
 *   PW_OP1K(ID, scalar, avx2, avx512)  unary with the program's constant k
 *   PW_LANES1(ID, scalar)              no vector body: the scalar one on
 *   PW_LANES2(ID, scalar)                every lane at every level
 *   PW_LOWERED(ID)                     no opcode of its own (pointwise.c
 *                                        writes it with other ops)
 *
 * In the scalar column x, y, z, k are floats; in the AVX2 column __m256
 * (target avx2,fma), in the AVX-512 column __m512 (target avx512f,
 * avx512dq,avx2,fma: the AVX2 helpers inline there too). A vector body sees
 * whole vectors: the interpreter pads a row's last partial vector with
 * zeros and never stores the padding lanes. The levels need not agree bit
 * for bit (vmath's error bounds hold; the AVX-512 sigmoid and tanh are the
 * division-free ones: the values stream through memory here).
 */
#ifndef SH_KERNELS_PW_OPS_H
#define SH_KERNELS_PW_OPS_H

#include <math.h>

#include "kernels/vmath.h"

/* minimum/maximum: NaN if either is (a's when both are), else the IEEE op */
static inline float pw_min_scalar(float a, float b) {
  return a != a ? a : (b != b ? b : (a < b ? a : b));
}
static inline float pw_max_scalar(float a, float b) {
  return a != a ? a : (b != b ? b : (a > b ? a : b));
}
/* log(1 + exp(x)), linear above 20 as PyTorch's Softplus */
static inline float pw_softplus_scalar(float x) {
  return x > 20.0f ? x : (float)log1p(exp((double)x));
}

#if defined(__x86_64__)
#include "kernels/vmath_avx2.h"
#include "kernels/vmath_avx512.h"

#define PW_AVX2_INLINE static inline __attribute__((target("avx2,fma")))
#define PW_AVX512_INLINE static inline __attribute__((target("avx512f,avx512dq,avx2,fma")))

/* min_ps/max_ps return b when either is NaN: a where a is NaN */
PW_AVX2_INLINE __m256 pw_min_avx2(__m256 a, __m256 b) {
  return _mm256_blendv_ps(_mm256_min_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}
PW_AVX2_INLINE __m256 pw_max_avx2(__m256 a, __m256 b) {
  return _mm256_blendv_ps(_mm256_max_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}
PW_AVX512_INLINE __m512 pw_min_avx512(__m512 a, __m512 b) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), _mm512_min_ps(a, b), a);
}
PW_AVX512_INLINE __m512 pw_max_avx512(__m512 a, __m512 b) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), _mm512_max_ps(a, b), a);
}
/* comparisons as 1 / 0 (ordered: NaN false; not-equal unordered: NaN true) */
PW_AVX2_INLINE __m256 pw_cmp_avx2(__m256 m) { return _mm256_and_ps(m, _mm256_set1_ps(1.0f)); }
PW_AVX512_INLINE __m512 pw_cmp_avx512(__mmask16 m) {
  return _mm512_maskz_mov_ps(m, _mm512_set1_ps(1.0f));
}
/* GELU through the AVX2 function on each half (no AVX-512 version: same
 * values at every vector level) */
PW_AVX512_INLINE __m512 pw_gelu_avx512(__m512 x) {
  __m256 lo = sh_gelu_erf_avx2(_mm512_castps512_ps256(x));
  __m256 hi = sh_gelu_erf_avx2(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
  return _mm512_castpd_ps(
      _mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
}
#endif /* __x86_64__ */
#endif /* SH_KERNELS_PW_OPS_H */

/* ---------------------------------------------- the bodies, in ops.def order */
#ifdef PW_OP1
PW_OP2(ADD, x + y, _mm256_add_ps(x, y), _mm512_add_ps(x, y))
PW_OP2(SUB, x - y, _mm256_sub_ps(x, y), _mm512_sub_ps(x, y))
PW_OP2(MUL, x * y, _mm256_mul_ps(x, y), _mm512_mul_ps(x, y))
PW_OP2(DIV, x / y, _mm256_div_ps(x, y), _mm512_div_ps(x, y))
PW_LANES2(POW, powf(x, y))
PW_OP2(MINIMUM, pw_min_scalar(x, y), pw_min_avx2(x, y), pw_min_avx512(x, y))
PW_OP2(MAXIMUM, pw_max_scalar(x, y), pw_max_avx2(x, y), pw_max_avx512(x, y))
PW_OP2(GT, x > y ? 1.0f : 0.0f, pw_cmp_avx2(_mm256_cmp_ps(x, y, _CMP_GT_OQ)),
       pw_cmp_avx512(_mm512_cmp_ps_mask(x, y, _CMP_GT_OQ)))
PW_OP2(GE, x >= y ? 1.0f : 0.0f, pw_cmp_avx2(_mm256_cmp_ps(x, y, _CMP_GE_OQ)),
       pw_cmp_avx512(_mm512_cmp_ps_mask(x, y, _CMP_GE_OQ)))
PW_OP2(EQ, x == y ? 1.0f : 0.0f, pw_cmp_avx2(_mm256_cmp_ps(x, y, _CMP_EQ_OQ)),
       pw_cmp_avx512(_mm512_cmp_ps_mask(x, y, _CMP_EQ_OQ)))
PW_OP2(NE, x != y ? 1.0f : 0.0f, pw_cmp_avx2(_mm256_cmp_ps(x, y, _CMP_NEQ_UQ)),
       pw_cmp_avx512(_mm512_cmp_ps_mask(x, y, _CMP_NEQ_UQ)))
PW_OP3(WHERE, x != 0 ? y : z,
       _mm256_blendv_ps(z, y, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_NEQ_UQ)),
       _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_NEQ_UQ), z, y))
PW_LOWERED(SUM_N) /* a chain of adds */
PW_OP1K(SCALE, x * k, _mm256_mul_ps(x, k), _mm512_mul_ps(x, k))
PW_OP1(TANH, tanhf(x), sh_tanh_avx2(x), sh_tanh_fast_avx512(x))
PW_OP1(SIGMOID, sh_sigmoid_ref(x), sh_sigmoid_avx2(x), sh_sigmoid_fast_avx512(x))
PW_OP1(RELU, 0.0f > x ? 0.0f : x, /* NaN and -0 pass */
       _mm256_max_ps(_mm256_setzero_ps(), x), _mm512_max_ps(_mm512_setzero_ps(), x))
PW_OP1(GELU, sh_gelu_erf_ref(x), sh_gelu_erf_avx2(x), pw_gelu_avx512(x))
PW_OP1(EXP, expf(x), sh_exp_avx2(x), sh_exp_avx512(x))
PW_OP1(LN, logf(x), sh_log_avx2(x), sh_log_avx512(x))
PW_OP1(SQRT, sqrtf(x), _mm256_sqrt_ps(x), _mm512_sqrt_ps(x))
PW_OP1(RSQRT, 1.0f / sqrtf(x), _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_sqrt_ps(x)),
       _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_sqrt_ps(x)))
PW_OP1(ABS, fabsf(x), _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x), _mm512_abs_ps(x))
PW_LANES1(SOFTPLUS, pw_softplus_scalar(x))
PW_LANES1(ERF, erff(x))
PW_OP1(SILU, x * sh_sigmoid_ref(x), _mm256_mul_ps(x, sh_sigmoid_avx2(x)),
       _mm512_mul_ps(x, sh_sigmoid_fast_avx512(x)))
#undef PW_OP1
#undef PW_OP2
#undef PW_OP3
#undef PW_OP1K
#undef PW_LANES1
#undef PW_LANES2
#undef PW_LOWERED
#endif
