/*
 * vmath.c — array entry points of the vector math (vmath.h): the scalar
 * level through libm, the AVX2 / AVX-512 levels through vmath_avx2.h.
 */
#include "kernels/vmath.h"

#include <string.h>

#include "kernels/vmath_avx2.h"

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
__attribute__((target("avx2,fma"))) static __m256 avx2_one(sh_vmath_fn fn, __m256 x) {
  switch (fn) {
  case SH_VMATH_EXP: return sh_exp_avx2(x);
  case SH_VMATH_SIGMOID: return sh_sigmoid_avx2(x);
  case SH_VMATH_TANH: return sh_tanh_avx2(x);
  case SH_VMATH_GELU_TANH: return sh_gelu_tanh_avx2(x);
  case SH_VMATH_GELU_ERF:
  case SH_VMATH_LOG: break; /* not reached: scalar path */
  }
  return x;
}

__attribute__((target("avx2,fma"))) static void vmath_avx2(sh_vmath_fn fn, int64_t n,
                                                           const float *x, float *y) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, avx2_one(fn, _mm256_loadu_ps(x + i)));
  if (i < n) {
    float buf[8] = {0};
    memcpy(buf, x + i, (size_t)(n - i) * sizeof(float));
    _mm256_storeu_ps(buf, avx2_one(fn, _mm256_loadu_ps(buf)));
    memcpy(y + i, buf, (size_t)(n - i) * sizeof(float));
  }
}
#endif

void sh_vmath_f32(sheaf_isa isa, sh_vmath_fn fn, int64_t n, const float *x, float *y) {
#if defined(__x86_64__)
  /* GELU (erf form) and log have no vector version yet: libm. */
  if (isa != SHEAF_ISA_SCALAR && sheaf_cpu_isa_host() >= SHEAF_ISA_AVX2 &&
      fn != SH_VMATH_GELU_ERF && fn != SH_VMATH_LOG) {
    vmath_avx2(fn, n, x, y);
    return;
  }
#endif
  for (int64_t i = 0; i < n; i++) y[i] = scalar_one(fn, x[i]);
}
