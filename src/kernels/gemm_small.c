/*
 * gemm_small.c — the runtime's per-node matrix products, too small or too
 * narrow for sh_gemm's packing (an attention's scores, rows of a memory
 * times a query vector, and its context, a weight row times the memory):
 * y[r] = a[r, :]·x and y[r, :] = a[r, :]·B. A scalar level (the runtime's
 * former loops: 16 partial sums per dot, axpy rows) and an AVX2+FMA level
 * (4 rows share each load of x; a row's 64-column block of y stays in 8
 * accumulators over all of k, masked tails so nothing is over-read).
 */
#include "kernels/gemm.h"

#include <string.h>

/* ------------------------------------------------------------------ scalar */

static float dot_scalar(int64_t k, const float *a, const float *b) {
  float acc[16] = {0};
  int64_t kk = 0;
  for (; kk + 16 <= k; kk += 16)
    for (int j = 0; j < 16; j++) acc[j] += a[kk + j] * b[kk + j];
  for (int j = 0; kk + j < k; j++) acc[j] += a[kk + j] * b[kk + j];
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; j++) acc[j] += acc[j + w];
  return acc[0];
}

static void mv_scalar(int64_t r, int64_t k, const float *a, int64_t lda, const float *x, float *y) {
  for (int64_t i = 0; i < r; i++) y[i] = dot_scalar(k, a + i * lda, x);
}

static void mm_scalar(int64_t r, int64_t k, int64_t c, const float *a, int64_t lda, const float *b,
                      int64_t ldb, float *y) {
  for (int64_t i = 0; i < r; i++) {
    const float *ai = a + i * lda;
    float *yi = y + i * c;
    memset(yi, 0, (size_t)c * sizeof(float));
    for (int64_t kk = 0; kk < k; kk++) {
      const float s = ai[kk], *bk = b + kk * ldb;
      for (int64_t j = 0; j < c; j++) yi[j] += s * bk[j];
    }
  }
}

/* -------------------------------------------------------------------- AVX2 */

#if defined(__x86_64__)
#include <immintrin.h>

#define SMALL_AVX2_FN __attribute__((target("avx2,fma")))

static inline SMALL_AVX2_FN __m256i tail_mask(int64_t n) { /* lanes j < n (0 < n < 8) */
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline SMALL_AVX2_FN float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* ROWS (1 or 4) rows of a times x: two accumulators per row. */
#define MV_ROWS(ROWS)                                                                              \
  static SMALL_AVX2_FN void mv##ROWS##_avx2(int64_t k, const float *a, int64_t lda, const float *x, \
                                            float *y) {                                            \
    __m256 s0[ROWS], s1[ROWS];                                                                     \
    for (int q = 0; q < ROWS; q++) s0[q] = s1[q] = _mm256_setzero_ps();                             \
    int64_t kk = 0;                                                                                \
    for (; kk + 16 <= k; kk += 16) {                                                               \
      __m256 x0 = _mm256_loadu_ps(x + kk), x1 = _mm256_loadu_ps(x + kk + 8);                       \
      for (int q = 0; q < ROWS; q++) {                                                             \
        s0[q] = _mm256_fmadd_ps(_mm256_loadu_ps(a + q * lda + kk), x0, s0[q]);                     \
        s1[q] = _mm256_fmadd_ps(_mm256_loadu_ps(a + q * lda + kk + 8), x1, s1[q]);                 \
      }                                                                                            \
    }                                                                                              \
    for (; kk < k; kk += 8) {                                                                      \
      __m256i m = tail_mask(k - kk < 8 ? k - kk : 8);                                              \
      __m256 x0 = _mm256_maskload_ps(x + kk, m);                                                   \
      for (int q = 0; q < ROWS; q++)                                                               \
        s0[q] = _mm256_fmadd_ps(_mm256_maskload_ps(a + q * lda + kk, m), x0, s0[q]);               \
    }                                                                                              \
    for (int q = 0; q < ROWS; q++) y[q] = hsum(_mm256_add_ps(s0[q], s1[q]));                       \
  }
MV_ROWS(1)
MV_ROWS(4)
#undef MV_ROWS

static SMALL_AVX2_FN void mv_avx2(int64_t r, int64_t k, const float *a, int64_t lda, const float *x,
                                  float *y) {
  int64_t i = 0;
  for (; i + 4 <= r; i += 4) mv4_avx2(k, a + i * lda, lda, x, y + i);
  for (; i < r; i++) mv1_avx2(k, a + i * lda, lda, x, y + i);
}

/* y[0, j0 .. j0 + 8·NV) = a[0, :]·B for NV full vectors of columns. */
#define MM_COLS(NV)                                                                                \
  static SMALL_AVX2_FN void mm##NV##_avx2(int64_t k, const float *a, const float *b, int64_t ldb,  \
                                          float *y) {                                              \
    __m256 acc[NV];                                                                                \
    for (int v = 0; v < NV; v++) acc[v] = _mm256_setzero_ps();                                      \
    for (int64_t kk = 0; kk < k; kk++) {                                                           \
      __m256 s = _mm256_broadcast_ss(a + kk);                                                      \
      const float *bk = b + kk * ldb;                                                              \
      for (int v = 0; v < NV; v++) acc[v] = _mm256_fmadd_ps(s, _mm256_loadu_ps(bk + 8 * v), acc[v]); \
    }                                                                                              \
    for (int v = 0; v < NV; v++) _mm256_storeu_ps(y + 8 * v, acc[v]);                              \
  }
MM_COLS(8)
MM_COLS(1)
#undef MM_COLS

static SMALL_AVX2_FN void mm_tail_avx2(int64_t k, const float *a, const float *b, int64_t ldb,
                                       int64_t n, float *y) { /* 0 < n < 8 columns */
  __m256i m = tail_mask(n);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t kk = 0; kk < k; kk++)
    acc = _mm256_fmadd_ps(_mm256_broadcast_ss(a + kk), _mm256_maskload_ps(b + kk * ldb, m), acc);
  _mm256_maskstore_ps(y, m, acc);
}

static SMALL_AVX2_FN void mm_avx2(int64_t r, int64_t k, int64_t c, const float *a, int64_t lda,
                                  const float *b, int64_t ldb, float *y) {
  for (int64_t i = 0; i < r; i++) {
    const float *ai = a + i * lda;
    float *yi = y + i * c;
    int64_t j = 0;
    for (; j + 64 <= c; j += 64) mm8_avx2(k, ai, b + j, ldb, yi + j);
    for (; j + 8 <= c; j += 8) mm1_avx2(k, ai, b + j, ldb, yi + j);
    if (j < c) mm_tail_avx2(k, ai, b + j, ldb, c - j, yi + j);
  }
}
#endif

/* ---------------------------------------------------------------- dispatch */

#if defined(__x86_64__)
static bool use_avx2(sheaf_isa isa) {
  sheaf_isa host = sheaf_cpu_isa_host();
  return (int)isa >= (int)SHEAF_ISA_AVX2 && (int)host >= (int)SHEAF_ISA_AVX2;
}
#endif

void sh_f32_small_mv(sheaf_isa isa, int64_t r, int64_t k, const float *a, int64_t lda, const float *x,
                     float *y) {
  if (r <= 0) return;
  if (k <= 0) {
    memset(y, 0, (size_t)r * sizeof(float));
    return;
  }
#if defined(__x86_64__)
  if (use_avx2(isa)) {
    mv_avx2(r, k, a, lda, x, y);
    return;
  }
#endif
  mv_scalar(r, k, a, lda, x, y);
}

void sh_f32_small_mm(sheaf_isa isa, int64_t r, int64_t k, int64_t c, const float *a, int64_t lda,
                     const float *b, int64_t ldb, float *y) {
  if (r <= 0 || c <= 0) return;
#if defined(__x86_64__)
  if (use_avx2(isa)) {
    mm_avx2(r, k, c, a, lda, b, ldb, y);
    return;
  }
#endif
  mm_scalar(r, k, c, a, lda, b, ldb, y);
}
