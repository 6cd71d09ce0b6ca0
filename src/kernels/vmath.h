/*
 * vmath.h — f32 exp / sigmoid / tanh / log / GELU (tanh and erf forms) used
 * by the GEMM epilogues and the row kernels. One array entry point per ISA
 * level; the AVX2+FMA inline versions live in vmath_avx2.h (the GEMM
 * epilogues use them at both vector levels), the AVX-512 ones of exp,
 * sigmoid, tanh and log in vmath_avx512.h (the array entry point's AVX-512
 * level; the GELUs stay AVX2 there). The scalar level is libm (sigmoid and
 * both GELUs evaluated in double, then rounded).
 *
 * Every level is defined on the whole f32 range with IEEE special values:
 * NaN propagates, ±inf give the limits (exp(-inf) = 0, sigmoid(±inf) = 1/0,
 * tanh(±inf) = ±1, log(+inf) = +inf, gelu(-inf) = -0), tanh(±0) = ±0,
 * log(±0) = -inf, log(x < 0) = NaN, exp overflows to +inf above 88.72 and
 * underflows through the denormals to 0 below -103.97.
 * Max ulp errors over all 2^32 inputs: `make bench-vmath`; bounds tested on
 * a dense sample in tests/test_gemm_vmath.c; figures in docs/KERNELS.md.
 */
#ifndef SH_KERNELS_VMATH_H
#define SH_KERNELS_VMATH_H

#include <math.h>

#include "base/base.h"

typedef enum sh_vmath_fn {
  SH_VMATH_EXP = 0,
  SH_VMATH_SIGMOID,
  SH_VMATH_TANH,
  SH_VMATH_GELU_TANH,
  SH_VMATH_GELU_ERF,
  SH_VMATH_LOG
} sh_vmath_fn;

/* y[i] = fn(x[i]) for i < n with the kernels of `isa` (x == y allowed). */
void sh_vmath_f32(sheaf_isa isa, sh_vmath_fn fn, int64_t n, const float *x, float *y);

/* Scalar references (the scalar level and the scalar GEMM epilogue),
 * evaluated in double and rounded once. */
static inline float sh_sigmoid_ref(float x) { return (float)(1.0 / (1.0 + exp(-(double)x))); }
/* 0.5x(1 + tanh(v)) written as x·sigmoid(2v): no cancellation for x << 0;
 * below -20 the result is -0 (so gelu(-inf) = -0, not NaN). */
static inline float sh_gelu_tanh_ref(float x) {
  double d = x < -20.0f ? -20.0 : x, k = 2.0 * 0.7978845608028654; /* 2 sqrt(2/pi) */
  return (float)(d / (1.0 + exp(-k * (d + 0.044715 * d * d * d))));
}

/* 0.5x(1 + erf(x/sqrt 2)) written with erfc: no cancellation for x << 0. */
static inline float sh_gelu_erf_ref(float x) {
  double d = x < -40.0f ? -40.0 : x; /* the result is -0 there; gelu(-inf) too */
  return (float)(0.5 * d * erfc(-d * 0.70710678118654752));
}

#endif
