/*
 * pw_avx2.c — AVX2+FMA level of the pointwise interpreter (pw.h): the
 * template pw_interp.h over 8-float vectors, with the AVX2 column of
 * pw_ops.h (vmath_avx2.h's inline functions).
 */
#if defined(__x86_64__)
#include <immintrin.h>

#define PW_FN sh_f32_pw_ukernel__avx2
#define PW_ATTR __attribute__((target("avx2,fma")))
#define PW_V 8
#define PW_VEC __m256
#define PW_LOADU _mm256_loadu_ps
#define PW_STOREU _mm256_storeu_ps
#define PW_STORE _mm256_store_ps
#define PW_SET1 _mm256_set1_ps
#define PW_BODY(scalar, avx2, avx512) (avx2)
#define PW_PREFETCH 1
#include "kernels/pw_interp.h"
#endif
