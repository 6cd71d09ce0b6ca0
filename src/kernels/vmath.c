/*
 * vmath.c — array entry points of the vector math (vmath.h): the scalar
 * level through libm (double where a formula would cancel or lose its
 * argument's rounding), the AVX2 level through vmath_avx2.h, the AVX-512
 * level through vmath_avx512.h (exp, sigmoid, tanh, log) and vmath_avx2.h
 * (the GELUs).
 */
#include "kernels/vmath.h"

#include <string.h>

#include "kernels/vmath_avx2.h"
#include "kernels/vmath_avx512.h"

static float scalar_one(sh_vmath_fn fn, float x) {
  switch (fn) {
  case SH_VMATH_EXP: return expf(x);
  case SH_VMATH_SIGMOID: return sh_sigmoid_ref(x);
  case SH_VMATH_TANH: return tanhf(x);
  case SH_VMATH_GELU_TANH: return sh_gelu_tanh_ref(x);
  case SH_VMATH_GELU_ERF: return sh_gelu_erf_ref(x);
  case SH_VMATH_LOG: return logf(x);
  }
  return x;
}

#if defined(__x86_64__)
#define AVX2_FN __attribute__((target("avx2,fma")))

/* One loop per function (the switch stays out of the loop). */
#define VMATH_LOOP(name, f)                                                           \
  static AVX2_FN void name(int64_t n, const float *x, float *y) {                     \
    int64_t i = 0;                                                                    \
    for (; i + 16 <= n; i += 16) {                                                    \
      __m256 a = f(_mm256_loadu_ps(x + i)), b = f(_mm256_loadu_ps(x + i + 8));        \
      _mm256_storeu_ps(y + i, a);                                                     \
      _mm256_storeu_ps(y + i + 8, b);                                                 \
    }                                                                                 \
    for (; i < n; i += 8) {                                                           \
      if (n - i >= 8) {                                                               \
        _mm256_storeu_ps(y + i, f(_mm256_loadu_ps(x + i)));                           \
        continue;                                                                     \
      }                                                                               \
      float buf[8] = {0};                                                             \
      memcpy(buf, x + i, (size_t)(n - i) * sizeof(float));                            \
      _mm256_storeu_ps(buf, f(_mm256_loadu_ps(buf)));                                 \
      memcpy(y + i, buf, (size_t)(n - i) * sizeof(float));                            \
    }                                                                                 \
  }
VMATH_LOOP(vexp, sh_exp_avx2)
VMATH_LOOP(vsigmoid, sh_sigmoid_avx2)
VMATH_LOOP(vtanh, sh_tanh_avx2)
VMATH_LOOP(vgelu_tanh, sh_gelu_tanh_avx2)
VMATH_LOOP(vgelu_erf, sh_gelu_erf_avx2)
VMATH_LOOP(vlog, sh_log_avx2)

#define AVX512_FN __attribute__((target("avx512f,avx512dq,fma")))
#define VMATH_LOOP512(name, f)                                                        \
  static AVX512_FN void name(int64_t n, const float *x, float *y) {                   \
    int64_t i = 0;                                                                    \
    for (; i + 32 <= n; i += 32) {                                                    \
      __m512 a = f(_mm512_loadu_ps(x + i)), b = f(_mm512_loadu_ps(x + i + 16));       \
      _mm512_storeu_ps(y + i, a);                                                     \
      _mm512_storeu_ps(y + i + 16, b);                                                \
    }                                                                                 \
    for (; i < n; i += 16) { /* masked tail: touches only x[i..n), y[i..n) */        \
      __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);          \
      _mm512_mask_storeu_ps(y + i, k, f(_mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), k, x + i))); \
    }                                                                                 \
  }
VMATH_LOOP512(vexp512, sh_exp_avx512)
VMATH_LOOP512(vsigmoid512, sh_sigmoid_avx512)
VMATH_LOOP512(vtanh512, sh_tanh_avx512)
VMATH_LOOP512(vlog512, sh_log_avx512)
#endif

void sh_vmath_f32(sheaf_isa isa, sh_vmath_fn fn, int64_t n, const float *x, float *y) {
#if defined(__x86_64__)
  if (isa >= SHEAF_ISA_AVX512 && sheaf_cpu_isa_host() >= SHEAF_ISA_AVX512) {
    switch (fn) {
    case SH_VMATH_EXP: vexp512(n, x, y); return;
    case SH_VMATH_SIGMOID: vsigmoid512(n, x, y); return;
    case SH_VMATH_TANH: vtanh512(n, x, y); return;
    case SH_VMATH_LOG: vlog512(n, x, y); return;
    default: break; /* the GELUs: the AVX2 versions */
    }
  }
  if (isa != SHEAF_ISA_SCALAR && sheaf_cpu_isa_host() >= SHEAF_ISA_AVX2) {
    switch (fn) {
    case SH_VMATH_EXP: vexp(n, x, y); return;
    case SH_VMATH_SIGMOID: vsigmoid(n, x, y); return;
    case SH_VMATH_TANH: vtanh(n, x, y); return;
    case SH_VMATH_GELU_TANH: vgelu_tanh(n, x, y); return;
    case SH_VMATH_GELU_ERF: vgelu_erf(n, x, y); return;
    case SH_VMATH_LOG: vlog(n, x, y); return;
    }
  }
#endif
  for (int64_t i = 0; i < n; i++) y[i] = scalar_one(fn, x[i]);
}
