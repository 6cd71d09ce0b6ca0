/*
 * pw_avx512.c — AVX-512 level of the pointwise interpreter (pw.h): the
 * template pw_interp.h over 16-float vectors (Zen 4 runs a zmm op in two
 * halves, but decodes and schedules it once), with the AVX-512 column of
 * pw_ops.h (vmath_avx512.h, its division-free sigmoid and tanh).
 */
#if defined(__x86_64__)
#include <immintrin.h>

#define PW_FN sh_f32_pw_ukernel__avx512
#define PW_ATTR __attribute__((target("avx512f,avx512dq,avx2,fma")))
#define PW_V 16
#define PW_VEC __m512
#define PW_LOADU _mm512_loadu_ps
#define PW_STOREU _mm512_storeu_ps
#define PW_STORE _mm512_store_ps
#define PW_SET1 _mm512_set1_ps
#define PW_BODY(scalar, avx2, avx512) (avx512)
#define PW_PREFETCH 1
#include "kernels/pw_interp.h"
#endif
