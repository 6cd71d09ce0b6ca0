/*
 * test_gemm_small.c — the per-node small products (kernels/gemm_small.c:
 * sh_f32_small_mv, sh_f32_small_mm) against a double-accumulation
 * reference with a normalized bound, at every ISA level up to SHEAF_ISA, at
 * sizes below / at / above the AVX2 tiles (16 k per step and 4 rows in mv;
 * 64-, 8- and masked column blocks in mm), strided operands, operands
 * allocated to their exact size (ASan sees any over-read), and y guarded
 * against writes past its end.
 */
#include <math.h>
#include <stdlib.h>

#include "harness.h"
#include "kernels/gemm.h"

static uint64_t g_rng = 0x51ab5eedull;

static const char *isa_name(int isa) { return isa == 0 ? "scalar" : isa == 1 ? "avx2" : "avx512"; }

/* Checks y (r × c, contiguous) against a·b; bx = NULL: b is a vector. */
static bool check(int isa, const char *what, int64_t r, int64_t k, int64_t c, const float *a,
                  int64_t lda, const float *b, int64_t ldb, const float *y) {
  const double eps = 1.0 / (1 << 23);
  for (int64_t i = 0; i < r; i++)
    for (int64_t j = 0; j < c; j++) {
      double ref = 0, mag = 0;
      for (int64_t kk = 0; kk < k; kk++) {
        double t = (double)a[i * lda + kk] * b[kk * ldb + j];
        ref += t;
        mag += fabs(t);
      }
      double tol = ((double)k + 2) * eps * mag + 1e-30;
      if (!(fabs(y[i * c + j] - ref) <= tol))
        return th_fail(__FILE__, __LINE__, "%s %s r=%lld k=%lld c=%lld: y[%lld][%lld] %.9g vs %.9g",
                       what, isa_name(isa), (long long)r, (long long)k, (long long)c, (long long)i,
                       (long long)j, y[i * c + j], ref);
    }
  return true;
}

/* y with 8 guard floats after it, set to a sentinel */
static float *y_new(int64_t n) {
  float *y = malloc((size_t)(n + 8) * sizeof *y);
  for (int64_t i = 0; i < n + 8; i++) y[i] = -7.25f;
  return y;
}
static bool guard_ok(const float *y, int64_t n) {
  for (int64_t i = n; i < n + 8; i++)
    if (y[i] != -7.25f) return th_fail(__FILE__, __LINE__, "write past y's end (%lld floats)", (long long)n);
  return true;
}

TEST(gemm_small_mv_sizes) {
  static const int64_t rs[] = {1, 2, 3, 4, 5, 7, 8, 9, 33};
  static const int64_t ks[] = {0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 257, 512};
  for (int isa = 0; isa <= (int)sheaf_cpu_isa(); isa++)
    for (size_t ir = 0; ir < SH_ARRAY_LEN(rs); ir++)
      for (size_t ik = 0; ik < SH_ARRAY_LEN(ks); ik++) {
        int64_t r = rs[ir], k = ks[ik], lda = k + (ir & 1) * 3;
        float *a = th_frand_fill(&g_rng, (r - 1) * lda + k), *x = th_frand_fill(&g_rng, k);
        float *y = y_new(r);
        sh_f32_small_mv((sheaf_isa)isa, r, k, a, lda, x, y);
        bool ok = check(isa, "mv", r, k, 1, a, lda, x, 1, y) && guard_ok(y, r);
        free(a), free(x), free(y);
        if (!ok) return;
      }
}

TEST(gemm_small_mm_sizes) {
  static const int64_t rs[] = {1, 2, 3};
  static const int64_t ks[] = {0, 1, 2, 5, 17, 81};
  static const int64_t cs[] = {1, 3, 7, 8, 9, 15, 16, 63, 64, 65, 71, 72, 73, 128, 129, 512};
  for (int isa = 0; isa <= (int)sheaf_cpu_isa(); isa++)
    for (size_t ir = 0; ir < SH_ARRAY_LEN(rs); ir++)
      for (size_t ik = 0; ik < SH_ARRAY_LEN(ks); ik++)
        for (size_t ic = 0; ic < SH_ARRAY_LEN(cs); ic++) {
          int64_t r = rs[ir], k = ks[ik], c = cs[ic], lda = k + (ic & 1), ldb = c + (ik & 1) * 5;
          float *a = th_frand_fill(&g_rng, (r - 1) * lda + k);
          float *b = th_frand_fill(&g_rng, k > 0 ? (k - 1) * ldb + c : 0);
          float *y = y_new(r * c);
          sh_f32_small_mm((sheaf_isa)isa, r, k, c, a, lda, b, ldb, y);
          bool ok = check(isa, "mm", r, k, c, a, lda, b, ldb, y) && guard_ok(y, r * c);
          free(a), free(b), free(y);
          if (!ok) return;
        }
}

/* The attention's shapes in the decoder (memory [n, 2H] times a query, a
 * weight row times the memory) at hidden 256, the level the host runs. */
TEST(gemm_small_attention_shapes) {
  const int isa = (int)sheaf_cpu_isa();
  for (int64_t n = 1; n <= 81; n += 16) {
    const int64_t H2 = 512;
    float *m = th_frand_fill(&g_rng, n * H2), *q = th_frand_fill(&g_rng, H2),
          *w = th_frand_fill(&g_rng, n);
    float *s = y_new(n), *ctx = y_new(H2);
    sh_f32_small_mv((sheaf_isa)isa, n, H2, m, H2, q, s);
    sh_f32_small_mm((sheaf_isa)isa, 1, n, H2, w, n, m, H2, ctx);
    bool ok = check(isa, "scores", n, H2, 1, m, H2, q, 1, s) && guard_ok(s, n) &&
              check(isa, "context", 1, n, H2, w, n, m, H2, ctx) && guard_ok(ctx, H2);
    free(m), free(q), free(w), free(s), free(ctx);
    if (!ok) return;
  }
}
