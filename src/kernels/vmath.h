/*
 * vmath.h — vectorized f32 exp / sigmoid / tanh / GELU used by the GEMM
 * epilogues (and later by row kernels). Array entry points per ISA level;
 * the AVX2+FMA inline versions live in vmath_avx2.h (used for the AVX2 and
 * AVX-512 levels: on Zen 4 256-bit ops have the same per-element throughput).
 *
 * Accuracy (max ulp over a dense sample, tests/test_gemm_vmath.c):
 *   exp     on [-87.3, 88]   (saturates outside: no inf, no denormals)
 *   sigmoid on [-87, 88] and beyond (0 / 1 limits)
 *   tanh    everywhere
 * The scalar level calls libm (correctly rounded or close to it).
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

static inline float sh_sigmoid_ref(float x) { return 1.0f / (1.0f + expf(-x)); }
/* 0.5x(1 + tanh(v)) written as x·sigmoid(2v): no cancellation for x << 0. */
static inline float sh_gelu_tanh_ref(float x) {
  const float k = 2.0f * 0.7978845608028654f; /* 2 sqrt(2/pi) */
  return x * sh_sigmoid_ref(k * (x + 0.044715f * x * x * x));
}

/* 0.5x(1 + erf(x/sqrt 2)) written with erfc: no cancellation for x << 0. */
static inline float sh_gelu_erf_ref(float x) {
  return 0.5f * x * erfcf(-x * 0.70710678118654752f);
}

#endif
