/*
 * test_rows.c — the row kernels (src/kernels/rows.h) against double-
 * precision references with normalized bounds, for every ISA level the host
 * supports, at every n from 1 to 70 and at 127..129, 255..257, 768, 1023..
 * 1025 (below / at / above / multiples of the 8- and 16-lane vectors and of
 * the 2- and 4-vector unrolls), with rows given as row pointers (one exact-
 * size malloc each, so ASan sees any over-read) and as base + ld with
 * ld > n, in place and out of place, every broadcast combination, and
 * special values (huge, ±inf, NaN, constant rows).
 * SHEAF_ROWS_REPORT=1 prints the largest error / bound ratio per kernel.
 */
#include <stdlib.h>

#include "harness.h"
#include "kernels/rows.h"
#include "kernels/rows_kernels.h"

/* ------------------------------------------------------------ helpers */

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static float frand(void) { return th_frand(&g_rng); } /* uniform in [-1, 1) */
static unsigned urand(unsigned n) { return (unsigned)((frand() + 1.0f) * 0.5f * (float)n) % n; }

static const int64_t g_sizes[] = {1,   2,   3,   4,   5,   6,   7,   8,   9,   10,  11,  12,  13,
                                  14,  15,  16,  17,  18,  19,  20,  21,  22,  23,  24,  25,  26,
                                  27,  28,  29,  30,  31,  32,  33,  34,  35,  36,  37,  38,  39,
                                  40,  41,  42,  43,  44,  45,  46,  47,  48,  49,  50,  51,  52,
                                  53,  54,  55,  56,  57,  58,  59,  60,  61,  62,  63,  64,  65,
                                  66,  67,  68,  69,  70,  127, 128, 129, 255, 256, 257, 768, 1023,
                                  1024, 1025};
#define N_SIZES ((int)SH_ARRAY_LEN(g_sizes))

static const char *isa_names[] = {"scalar", "avx2", "avx512"};
static int n_isas(void) { return (int)sheaf_cpu_isa_host() + 1; }

static const double EPS = 1.0 / (1 << 23);

/* A matrix of m rows of `cols` floats: one exact-size malloc per row
 * (row-pointer mode) or one block with ld = cols + 3. */
typedef struct mat {
  int64_t m, cols, ld;
  bool rows_mode;
  float *block;
  float **rows;
} mat;

static mat mat_new(int64_t m, int64_t cols, bool rows_mode) {
  mat x = {m, cols, cols + 3, rows_mode, NULL, NULL};
  if (rows_mode) {
    x.rows = malloc((size_t)m * sizeof *x.rows);
    for (int64_t i = 0; i < m; i++) x.rows[i] = malloc((size_t)cols * sizeof(float));
  } else {
    x.block = malloc((size_t)((m - 1) * x.ld + cols) * sizeof(float));
  }
  return x;
}
static float *mat_row(const mat *x, int64_t i) {
  return x->rows_mode ? x->rows[i] : x->block + i * x->ld;
}
static void mat_fill(mat *x, float lo, float hi) {
  for (int64_t i = 0; i < x->m; i++)
    for (int64_t j = 0; j < x->cols; j++)
      mat_row(x, i)[j] = lo + (hi - lo) * 0.5f * (frand() + 1.0f);
}
static void mat_free(mat *x) {
  if (x->rows_mode)
    for (int64_t i = 0; i < x->m; i++) free(x->rows[i]);
  free(x->rows);
  free(x->block);
}
static sh_gemm_in mat_in(const mat *x) {
  return (sh_gemm_in){(const float *const *)x->rows, x->block, x->ld};
}
static sh_gemm_out mat_out(const mat *x) { return (sh_gemm_out){x->rows, x->block, x->ld}; }
/* A dense copy (m × cols) of a matrix's values. */
static float *mat_copy(const mat *x) {
  float *c = malloc((size_t)(x->m * x->cols) * sizeof(float));
  for (int64_t i = 0; i < x->m; i++)
    memcpy(c + i * x->cols, mat_row(x, i), (size_t)x->cols * sizeof(float));
  return c;
}

/* Largest error/bound ratio seen per kernel and level (SHEAF_ROWS_REPORT). */
enum { R_SOFTMAX, R_LOG_SOFTMAX, R_LAYERNORM, R_SUM, R_ACT, R_COUNT };
static const char *r_names[] = {"softmax", "log_softmax", "layernorm", "sum/mean", "act(vmath)"};
static double g_worst[R_COUNT][3];
static void note(int kind, int isa, double err, double bound) {
  double r = bound > 0 ? err / bound : 0;
  if (r > g_worst[kind][isa]) g_worst[kind][isa] = r;
}
static void report(int kind) {
  if (!getenv("SHEAF_ROWS_REPORT")) return;
  for (int isa = 0; isa < n_isas(); isa++)
    printf("  %-10s %-7s max error / bound = %.4f\n", r_names[kind], isa_names[isa],
           g_worst[kind][isa]);
}

static bool same_float(float a, float b) {
  return (a != a && b != b) || memcmp(&a, &b, sizeof a) == 0;
}

/* ------------------------------------------------------------ dispatch */

TEST(rows_dispatch_levels) {
  CHECK_EQ_STR(sh_rows_kernels_get(SHEAF_ISA_SCALAR)->name, "scalar");
  for (int isa = 0; isa < n_isas(); isa++)
    CHECK_EQ_STR(sh_rows_kernels_get((sheaf_isa)isa)->name, isa_names[isa]);
  /* a level above the host is lowered to it */
  CHECK_EQ_STR(sh_rows_kernels_get(SHEAF_ISA_AVX512)->name, isa_names[n_isas() - 1]);
}

/* ------------------------------------------------------------- softmax */

/* Checks row y (n floats) against softmax(scale * x) in double. The f32
 * exponent t = scale·(x - max) carries a relative error ~2 eps, i.e. an
 * absolute error 2 eps·|t| (a relative one in exp(t)); the sum adds up to
 * ~n/8 eps (positive terms); exp and the final scaling a few ulp. */
static bool check_softmax_row(int isa, int64_t n, float scale, const float *x, const float *y,
                              const char *what) {
  double mx = -INFINITY, sum = 0;
  for (int64_t j = 0; j < n; j++)
    if ((double)scale * x[j] > mx) mx = (double)scale * x[j];
  for (int64_t j = 0; j < n; j++) sum += exp((double)scale * x[j] - mx);
  for (int64_t j = 0; j < n; j++) {
    double ref = exp((double)scale * x[j] - mx) / sum;
    double t = fabs((double)scale * x[j] - mx); /* the exponent's error is eps·|t| */
    if (!isfinite(t)) t = 0;                     /* -inf entries: ref 0 */
    double bound = ref * EPS * (16.0 + (double)n / 8.0 + 2.0 * t) + 1e-37;
    double err = fabs((double)y[j] - ref);
    note(R_SOFTMAX, isa, err, bound);
    if (!(err <= bound))
      return th_fail(__FILE__, __LINE__,
                     "softmax %s %s n=%lld scale=%g: y[%lld] = %.9g, ref %.9g (x %.9g, bound %.3g)",
                     isa_names[isa], what, (long long)n, scale, (long long)j, y[j], ref, x[j],
                     bound);
  }
  return true;
}

TEST(rows_softmax_sizes_modes) {
  static const float scales[] = {1.0f, 0.125f, -0.7f, 3.0f};
  const int64_t M = 3;
  for (int isa = 0; isa < n_isas(); isa++)
    for (int si = 0; si < N_SIZES; si++)
      for (int mode = 0; mode < 4; mode++) { /* bit 0: row pointers, bit 1: in place */
        int64_t n = g_sizes[si];
        bool rows = mode & 1, inplace = mode & 2;
        float scale = scales[(si + mode) % 4];
        mat x = mat_new(M, n, rows), y = inplace ? x : mat_new(M, n, !rows);
        mat_fill(&x, -8, 8);
        float *x0 = mat_copy(&x);
        sh_softmax_rows((sheaf_isa)isa, M, n, scale, mat_in(&x), mat_out(&y));
        bool ok = true;
        for (int64_t i = 0; ok && i < M; i++)
          ok = check_softmax_row(isa, n, scale, x0 + i * n, mat_row(&y, i),
                                 inplace ? "in place" : rows ? "rows" : "block");
        if (!inplace) { /* x untouched */
          float *x1 = mat_copy(&x);
          ok = ok && CHECK(memcmp(x0, x1, (size_t)(M * n) * sizeof(float)) == 0);
          free(x1);
          mat_free(&y);
        }
        free(x0);
        mat_free(&x);
        if (!ok) return;
      }
  report(R_SOFTMAX);
}

TEST(rows_softmax_special_values) {
  static const int64_t ns[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 64, 65, 100, 768};
  for (int isa = 0; isa < n_isas(); isa++)
    for (size_t si = 0; si < SH_ARRAY_LEN(ns); si++) {
      int64_t n = ns[si];
      float *x = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)n * sizeof(float));
      sh_gemm_in in = {NULL, x, n};
      sh_gemm_out out = {NULL, y, n};
      sheaf_isa L = (sheaf_isa)isa;

      /* huge inputs (and a scale whose products round): finite, sums to 1 */
      static const float huge_scales[] = {1.0f, 0.1f, -3.3f};
      for (int s = 0; s < 3; s++) {
        for (int64_t j = 0; j < n; j++) x[j] = 1e30f * frand();
        sh_softmax_rows(L, 1, n, huge_scales[s], in, out);
        double sum = 0;
        bool fin = true;
        for (int64_t j = 0; j < n; j++) {
          fin = fin && isfinite(y[j]) && y[j] >= 0;
          sum += y[j];
        }
        CHECK(fin);
        CHECK_NEAR(sum, 1.0, 1e-5);
        check_softmax_row(isa, n, huge_scales[s], x, y, "huge");
      }

      /* a spread row: terms down to exp(-200) underflow to 0 */
      for (int64_t j = 0; j < n; j++) x[j] = -200.0f * (float)j / (float)n;
      sh_softmax_rows(L, 1, n, 1.0f, in, out);
      check_softmax_row(isa, n, 1.0f, x, y, "spread");

      /* -inf entries (masked attention) give exactly 0 */
      for (int64_t j = 0; j < n; j++) x[j] = (j % 3 == 1) ? -INFINITY : frand();
      sh_softmax_rows(L, 1, n, 0.5f, in, out);
      for (int64_t j = 0; j < n; j++)
        if (j % 3 == 1) CHECK(y[j] == 0.0f);
      check_softmax_row(isa, n, 0.5f, x, y, "-inf entries");

      /* all -inf: NaN (as PyTorch) */
      for (int64_t j = 0; j < n; j++) x[j] = -INFINITY;
      sh_softmax_rows(L, 1, n, 1.0f, in, out);
      for (int64_t j = 0; j < n; j++) CHECK(isnan(y[j]));

      /* a NaN anywhere makes the whole row NaN */
      for (int64_t pos = 0; pos < n; pos += (n > 20 ? n / 5 : 1)) {
        for (int64_t j = 0; j < n; j++) x[j] = frand();
        x[pos] = NAN;
        sh_softmax_rows(L, 1, n, 1.0f, in, out);
        bool all = true;
        for (int64_t j = 0; j < n; j++) all = all && isnan(y[j]);
        if (!CHECK(all)) break;
      }

      /* a constant row: exactly uniform up to rounding */
      for (int64_t j = 0; j < n; j++) x[j] = 42.5f;
      sh_softmax_rows(L, 1, n, 1.0f, in, out);
      for (int64_t j = 0; j < n; j++) CHECK_NEAR(y[j], 1.0 / (double)n, 4 * EPS / (double)n);
      if (n == 1) CHECK(y[0] == 1.0f);
      free(x);
      free(y);
    }
}

/* --------------------------------------------------------- log_softmax */

/* Checks row y against (x - max) - log(sum exp(x - max)) in double. The f32
 * t = x - max carries eps/2·|t|; each exp term a relative error of a few
 * ulp plus eps/2·|t_j| (from t_j), so log(sum) an absolute one below
 * eps·w, w = sum e_j (4 + |t_j|) / sum e_j; rounding log(sum) and the
 * final difference add eps/2 of each. -inf entries must give -inf. */
static bool check_log_softmax_row(int isa, int64_t n, const float *x, const float *y,
                                  const char *what) {
  double mx = -INFINITY, sum = 0, w = 0;
  for (int64_t j = 0; j < n; j++)
    if (x[j] > mx) mx = x[j];
  for (int64_t j = 0; j < n; j++) {
    double t = (double)x[j] - mx, e = exp(t);
    sum += e;
    if (e > 0) w += e * (4.0 + fabs(t));
  }
  double ls = log(sum);
  w /= sum;
  for (int64_t j = 0; j < n; j++) {
    double t = (double)x[j] - mx, ref = t - ls;
    double bound = isinf(t) ? 0 : EPS * (fabs(t) + fabs(ref) + ls + w) + 1e-37;
    double err = isinf(t) ? (y[j] == -INFINITY ? 0 : INFINITY) : fabs((double)y[j] - ref);
    note(R_LOG_SOFTMAX, isa, err, bound);
    if (!(err <= bound))
      return th_fail(__FILE__, __LINE__,
                     "log_softmax %s %s n=%lld: y[%lld] = %.9g, ref %.9g (x %.9g, bound %.3g)",
                     isa_names[isa], what, (long long)n, (long long)j, y[j], ref, x[j], bound);
  }
  return true;
}

TEST(rows_log_softmax_sizes_modes) {
  const int64_t M = 3;
  for (int isa = 0; isa < n_isas(); isa++)
    for (int si = 0; si < N_SIZES; si++)
      for (int mode = 0; mode < 4; mode++) { /* bit 0: row pointers, bit 1: in place */
        int64_t n = g_sizes[si];
        bool rows = mode & 1, inplace = mode & 2;
        mat x = mat_new(M, n, rows), y = inplace ? x : mat_new(M, n, !rows);
        mat_fill(&x, -8, 8);
        float *x0 = mat_copy(&x);
        sh_log_softmax_rows((sheaf_isa)isa, M, n, mat_in(&x), mat_out(&y));
        bool ok = true;
        for (int64_t i = 0; ok && i < M; i++)
          ok = check_log_softmax_row(isa, n, x0 + i * n, mat_row(&y, i),
                                     inplace ? "in place" : rows ? "rows" : "block");
        if (!inplace) { /* x untouched */
          float *x1 = mat_copy(&x);
          ok = ok && CHECK(memcmp(x0, x1, (size_t)(M * n) * sizeof(float)) == 0);
          free(x1);
          mat_free(&y);
        }
        free(x0);
        mat_free(&x);
        if (!ok) return;
      }
  report(R_LOG_SOFTMAX);
}

TEST(rows_log_softmax_special_values) {
  static const int64_t ns[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 64, 65, 100, 768};
  for (int isa = 0; isa < n_isas(); isa++)
    for (size_t si = 0; si < SH_ARRAY_LEN(ns); si++) {
      int64_t n = ns[si];
      float *x = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)n * sizeof(float));
      sh_gemm_in in = {NULL, x, n};
      sh_gemm_out out = {NULL, y, n};
      sheaf_isa L = (sheaf_isa)isa;

      /* huge inputs: every term but the max underflows */
      for (int64_t j = 0; j < n; j++) x[j] = 1e30f * frand();
      sh_log_softmax_rows(L, 1, n, in, out);
      check_log_softmax_row(isa, n, x, y, "huge");

      /* a spread row: terms down to exp(-200) underflow to 0 */
      for (int64_t j = 0; j < n; j++) x[j] = -200.0f * (float)j / (float)n;
      sh_log_softmax_rows(L, 1, n, in, out);
      check_log_softmax_row(isa, n, x, y, "spread");

      /* -inf entries give -inf */
      for (int64_t j = 0; j < n; j++) x[j] = (j % 3 == 1) ? -INFINITY : frand();
      sh_log_softmax_rows(L, 1, n, in, out);
      check_log_softmax_row(isa, n, x, y, "-inf entries");

      /* all -inf, a NaN or a +inf anywhere: the whole row NaN */
      for (int64_t j = 0; j < n; j++) x[j] = -INFINITY;
      sh_log_softmax_rows(L, 1, n, in, out);
      for (int64_t j = 0; j < n; j++) CHECK(isnan(y[j]));
      for (int64_t pos = 0; pos < n; pos += (n > 20 ? n / 5 : 1))
        for (int k = 0; k < 2; k++) {
          for (int64_t j = 0; j < n; j++) x[j] = frand();
          x[pos] = k ? INFINITY : NAN;
          sh_log_softmax_rows(L, 1, n, in, out);
          bool all = true;
          for (int64_t j = 0; j < n; j++) all = all && isnan(y[j]);
          CHECK(all);
        }

      /* a constant row: -log(n) */
      for (int64_t j = 0; j < n; j++) x[j] = 42.5f;
      sh_log_softmax_rows(L, 1, n, in, out);
      for (int64_t j = 0; j < n; j++)
        CHECK_NEAR(y[j], -log((double)n), 4 * EPS * (1 + log((double)n)));
      if (n == 1) CHECK(y[0] == 0.0f);
      free(x);
      free(y);
    }
}

/* ----------------------------------------------------------- layernorm */

/* Checks row y against ((x + r) - mean) / sqrt(var + eps) * gamma + beta in
 * double. The f32 sum x + r and the f32 mean each carry ~eps·|value|, which
 * the normalization divides by the deviation; the variance's sums add up to
 * ~n/8 eps relative; gamma, beta and the final fma a few ulp. */
static bool check_ln_row(int isa, int64_t n, const float *x, const float *r, const float *gamma,
                         const float *beta, float eps, const float *y, const char *what) {
  double *v = malloc((size_t)n * sizeof(double));
  double mean = 0, var = 0;
  for (int64_t j = 0; j < n; j++) {
    v[j] = (double)x[j] + (r ? (double)r[j] : 0.0);
    mean += v[j];
  }
  mean /= (double)n;
  for (int64_t j = 0; j < n; j++) var += (v[j] - mean) * (v[j] - mean);
  var /= (double)n;
  double rstd = 1.0 / sqrt(var + (double)eps);
  bool ok = true;
  for (int64_t j = 0; ok && j < n; j++) {
    double g = gamma ? gamma[j] : 1.0, b = beta ? beta[j] : 0.0;
    double o = (v[j] - mean) * rstd * g;
    double ref = o + b;
    double bound = EPS * ((16.0 + (double)n / 8.0) * fabs(o) +
                          8.0 * fabs(g) * rstd * (fabs(v[j]) + fabs(mean) + sqrt(var)) +
                          2.0 * fabs(b)) +
                   1e-30;
    double err = fabs((double)y[j] - ref);
    note(R_LAYERNORM, isa, err, bound);
    if (!(err <= bound))
      ok = th_fail(__FILE__, __LINE__,
                   "layernorm %s %s n=%lld: y[%lld] = %.9g, ref %.9g (bound %.3g, mean %.6g, "
                   "var %.6g)",
                   isa_names[isa], what, (long long)n, (long long)j, y[j], ref, bound, mean, var);
  }
  free(v);
  return ok;
}

TEST(rows_layernorm_sizes_modes) {
  const int64_t M = 3;
  static const float offsets[] = {0.0f, 3.0f, -100.0f, 1e4f};
  for (int isa = 0; isa < n_isas(); isa++)
    for (int si = 0; si < N_SIZES; si++)
      for (int mode = 0; mode < 16; mode++) {
        /* bit 0: row pointers; bit 1: residual; bit 2: gamma/beta
         * present (alternating which); bit 3: in place (y = x, or y = r
         * with a residual) */
        int64_t n = g_sizes[si];
        bool rows = mode & 1, res = mode & 2, inplace = mode & 8;
        int gb = (mode & 4) ? 1 + (si + mode) % 3 : (si % 4 == 0 ? 3 : 0);
        float off = offsets[(si + mode) % 4], eps = (si & 1) ? 1e-5f : 1e-12f;
        mat x = mat_new(M, n, rows), r = mat_new(M, n, !rows);
        mat_fill(&x, off - 1.5f, off + 2.5f);
        mat_fill(&r, -0.5f, 0.5f);
        float *gamma = malloc((size_t)n * sizeof(float)), *beta = malloc((size_t)n * sizeof(float));
        for (int64_t j = 0; j < n; j++) {
          gamma[j] = 1.0f + 0.5f * frand();
          beta[j] = 0.3f * frand();
        }
        float *x0 = mat_copy(&x), *r0 = mat_copy(&r);
        mat y = inplace ? (res && (mode & 1) ? r : x) : mat_new(M, n, rows);
        sh_gemm_in rin = res ? mat_in(&r) : (sh_gemm_in){0};
        const float *g = (gb & 1) ? gamma : NULL, *b = (gb & 2) ? beta : NULL;
        sh_layernorm_rows((sheaf_isa)isa, M, n, mat_in(&x), rin, g, b, eps, mat_out(&y));
        bool ok = true;
        char what[64];
        snprintf(what, sizeof what, "mode %d gamma %d beta %d off %g", mode, g != NULL,
                 b != NULL, off);
        for (int64_t i = 0; ok && i < M; i++)
          ok = check_ln_row(isa, n, x0 + i * n, res ? r0 + i * n : NULL, g, b, eps,
                            mat_row(&y, i), what);
        if (!inplace) mat_free(&y);
        mat_free(&x);
        mat_free(&r);
        free(x0);
        free(r0);
        free(gamma);
        free(beta);
        if (!ok) return;
      }
  report(R_LAYERNORM);
}

TEST(rows_layernorm_constant_row_gives_beta) {
  static const float consts[] = {0.0f, 0.1f, 3.7f, -1e4f, 1e-3f, 12345.678f, 1e30f, -3e38f};
  static const int64_t ns[] = {1, 5, 8, 16, 17, 33, 64, 100, 768, 1025};
  for (int isa = 0; isa < n_isas(); isa++)
    for (size_t ci = 0; ci < SH_ARRAY_LEN(consts); ci++)
      for (size_t si = 0; si < SH_ARRAY_LEN(ns); si++)
        for (int res = 0; res < 2; res++) {
          int64_t n = ns[si];
          float *x = malloc((size_t)n * sizeof(float)), *r = malloc((size_t)n * sizeof(float));
          float *y = malloc((size_t)n * sizeof(float)), *g = malloc((size_t)n * sizeof(float));
          float *b = malloc((size_t)n * sizeof(float));
          for (int64_t j = 0; j < n; j++) {
            x[j] = res ? consts[ci] * 0.5f : consts[ci];
            r[j] = x[j];
            g[j] = 2.0f * frand();
            b[j] = frand();
          }
          sh_layernorm_rows((sheaf_isa)isa, 1, n, (sh_gemm_in){NULL, x, n},
                            res ? (sh_gemm_in){NULL, r, n} : (sh_gemm_in){0}, g, b, 1e-5f,
                            (sh_gemm_out){NULL, y, n});
          bool ok = true;
          for (int64_t j = 0; ok && j < n; j++)
            if (y[j] != b[j])
              ok = th_fail(__FILE__, __LINE__,
                           "layernorm %s n=%lld const %g res %d: y[%lld] = %.9g, beta %.9g",
                           isa_names[isa], (long long)n, consts[ci], res, (long long)j, y[j],
                           b[j]);
          /* no gamma / beta: 0 */
          sh_layernorm_rows((sheaf_isa)isa, 1, n, (sh_gemm_in){NULL, x, n}, (sh_gemm_in){0},
                            NULL, NULL, 1e-5f, (sh_gemm_out){NULL, y, n});
          for (int64_t j = 0; ok && j < n; j++) ok = CHECK(y[j] == 0.0f);
          free(x);
          free(r);
          free(y);
          free(g);
          free(b);
          if (!ok) return;
        }
}

/* Squares of deviations beyond ~1e19 overflow f32: the double fallback. */
TEST(rows_layernorm_huge_values) {
  static const int64_t ns[] = {1, 7, 16, 17, 100, 768};
  static const float mags[] = {1e20f, 3e37f};
  for (int isa = 0; isa < n_isas(); isa++)
    for (size_t si = 0; si < SH_ARRAY_LEN(ns); si++)
      for (int k = 0; k < 2; k++) {
        int64_t n = ns[si];
        float *x = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)n * sizeof(float));
        for (int64_t j = 0; j < n; j++) x[j] = mags[k] * frand();
        sh_layernorm_rows((sheaf_isa)isa, 1, n, (sh_gemm_in){NULL, x, n}, (sh_gemm_in){0}, NULL,
                          NULL, 1e-5f, (sh_gemm_out){NULL, y, n});
        bool ok = check_ln_row(isa, n, x, NULL, NULL, NULL, 1e-5f, y, "huge");
        free(x);
        free(y);
        if (!ok) return;
      }
}

TEST(rows_layernorm_nan_propagates) {
  for (int isa = 0; isa < n_isas(); isa++) {
    float x[37], y[37];
    for (int j = 0; j < 37; j++) x[j] = frand();
    x[20] = NAN;
    sh_layernorm_rows((sheaf_isa)isa, 1, 37, (sh_gemm_in){NULL, x, 37}, (sh_gemm_in){0}, NULL,
                      NULL, 1e-5f, (sh_gemm_out){NULL, y, 37});
    for (int j = 0; j < 37; j++) CHECK(isnan(y[j]));
  }
}

/* ----------------------------------------------------------- reductions */

TEST(rows_reduce_sum_max_mean) {
  const int64_t M = 3;
  for (int isa = 0; isa < n_isas(); isa++)
    for (int si = 0; si < N_SIZES; si++)
      for (int rows = 0; rows < 2; rows++) {
        int64_t n = g_sizes[si];
        mat x = mat_new(M, n, rows);
        mat_fill(&x, -2.0f, 3.0f);
        if (si % 3 == 0) /* the max somewhere in the tail sometimes */
          mat_row(&x, 1)[n - 1] = 7.0f;
        float out[3][3];
        for (int op = 0; op < 3; op++)
          sh_reduce_rows((sheaf_isa)isa, (sh_reduce_op)op, M, n, mat_in(&x), out[op]);
        bool ok = true;
        for (int64_t i = 0; ok && i < M; i++) {
          const float *row = mat_row(&x, i);
          double sum = 0, mag = 0;
          float mx = -INFINITY;
          for (int64_t j = 0; j < n; j++) {
            sum += row[j];
            mag += fabs(row[j]);
            if (row[j] > mx) mx = row[j];
          }
          double bound = ((double)n / 4.0 + 8.0) * EPS * mag;
          double err = fabs(out[SH_REDUCE_SUM][i] - sum);
          note(R_SUM, isa, err, bound);
          ok = ok && CHECK(err <= bound);
          double merr = fabs(out[SH_REDUCE_MEAN][i] - sum / (double)n);
          double mbound = bound / (double)n + EPS * fabs(sum / (double)n);
          note(R_SUM, isa, merr, mbound);
          ok = ok && CHECK(merr <= mbound);
          ok = ok && CHECK(out[SH_REDUCE_MAX][i] == mx);
          if (!ok)
            th_fail(__FILE__, __LINE__, "reduce %s n=%lld rows=%d row %lld", isa_names[isa],
                    (long long)n, rows, (long long)i);
        }
        mat_free(&x);
        if (!ok) return;
      }
  report(R_SUM);
}

TEST(rows_reduce_special_values) {
  for (int isa = 0; isa < n_isas(); isa++) {
    sheaf_isa L = (sheaf_isa)isa;
    float out[3], x[129];
    /* n == 0: sum 0, max -inf, mean NaN */
    sh_gemm_in in = {NULL, x, 0};
    sh_reduce_rows(L, SH_REDUCE_SUM, 1, 0, in, out);
    CHECK(out[0] == 0.0f);
    sh_reduce_rows(L, SH_REDUCE_MAX, 1, 0, in, out);
    CHECK(out[0] == -INFINITY);
    sh_reduce_rows(L, SH_REDUCE_MEAN, 1, 0, in, out);
    CHECK(isnan(out[0]));
    /* NaN anywhere: max and sum NaN */
    static const int64_t ns[] = {1, 7, 8, 9, 16, 17, 31, 32, 33, 63, 64, 65, 129};
    for (size_t si = 0; si < SH_ARRAY_LEN(ns); si++) {
      int64_t n = ns[si];
      in = (sh_gemm_in){NULL, x, n};
      for (int64_t pos = 0; pos < n; pos++) {
        for (int64_t j = 0; j < n; j++) x[j] = frand();
        x[pos] = NAN;
        sh_reduce_rows(L, SH_REDUCE_MAX, 1, n, in, &out[0]);
        sh_reduce_rows(L, SH_REDUCE_SUM, 1, n, in, &out[1]);
        if (!CHECK(isnan(out[0]) && isnan(out[1]))) {
          th_fail(__FILE__, __LINE__, "%s n=%lld NaN at %lld: max %g sum %g", isa_names[isa],
                  (long long)n, (long long)pos, out[0], out[1]);
          break;
        }
      }
      /* all -inf: max -inf; one +inf: max +inf */
      for (int64_t j = 0; j < n; j++) x[j] = -INFINITY;
      sh_reduce_rows(L, SH_REDUCE_MAX, 1, n, in, out);
      CHECK(out[0] == -INFINITY);
      x[n - 1] = INFINITY;
      sh_reduce_rows(L, SH_REDUCE_MAX, 1, n, in, out);
      CHECK(out[0] == INFINITY);
    }
  }
}

/* ----------------------------------------------------------- embedding */

TEST(rows_embedding_gather) {
  const int64_t rows = 50, m = 37;
  static const int64_t ds[] = {1, 3, 8, 15, 16, 17, 64, 65, 768};
  for (int isa = 0; isa < n_isas(); isa++)
    for (size_t di = 0; di < SH_ARRAY_LEN(ds); di++)
      for (int rmode = 0; rmode < 2; rmode++) {
        int64_t d = ds[di], ld = d + 5;
        float *table = malloc((size_t)((rows - 1) * ld + d) * sizeof(float));
        for (int64_t i = 0; i < (rows - 1) * ld + d; i++) table[i] = frand();
        int32_t idx[37];
        for (int64_t i = 0; i < m; i++) idx[i] = (int32_t)urand((unsigned)rows);
        idx[0] = 0;
        idx[1] = (int32_t)rows - 1;
        mat y = mat_new(m, d, rmode);
        REQUIRE_OK(th_ctx(), sh_embedding_rows(th_ctx(), (sheaf_isa)isa, m, d, table, rows, ld,
                                               idx, mat_out(&y)));
        for (int64_t i = 0; i < m; i++)
          CHECK(memcmp(mat_row(&y, i), table + idx[i] * ld, (size_t)d * sizeof(float)) == 0);
        mat_free(&y);
        free(table);
      }
}

TEST(rows_embedding_bounds) {
  sheaf_ctx *ctx = th_ctx();
  float table[4 * 3];
  for (int i = 0; i < 12; i++) table[i] = (float)i;
  float y[5 * 3];
  for (int i = 0; i < 15; i++) y[i] = -7.0f;
  sh_gemm_out out = {NULL, y, 3};
  int32_t bad_neg[5] = {0, 1, 2, -1, 3};
  CHECK_STATUS(ctx, sh_embedding_rows(ctx, SHEAF_ISA_SCALAR, 5, 3, table, 4, 3, bad_neg, out),
               SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "position 3");
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "-1");
  for (int i = 0; i < 15; i++) CHECK(y[i] == -7.0f); /* nothing written */
  int32_t bad_hi[5] = {0, 4, 2, 1, 3};
  CHECK_STATUS(ctx, sh_embedding_rows(ctx, sheaf_cpu_isa_host(), 5, 3, table, 4, 3, bad_hi, out),
               SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "index 4 at position 1");
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "4 rows");
  /* no context: the status only */
  CHECK(sh_embedding_rows(NULL, SHEAF_ISA_SCALAR, 5, 3, table, 4, 3, bad_hi, out) ==
        SHEAF_ERR_INVALID_ARG);
  /* m == 0 and d == 0 are fine */
  CHECK_OK(ctx, sh_embedding_rows(ctx, SHEAF_ISA_SCALAR, 0, 3, table, 4, 3, bad_hi, out));
  int32_t good[5] = {3, 0, 1, 2, 3};
  CHECK_OK(ctx, sh_embedding_rows(ctx, SHEAF_ISA_SCALAR, 5, 0, table, 4, 3, good, out));
  CHECK_OK(ctx, sh_embedding_rows(ctx, SHEAF_ISA_SCALAR, 5, 3, table, 4, 3, good, out));
  CHECK(y[0] == 9.0f && y[14] == 11.0f);
}

/* --------------------------------------------------------- elementwise */

static float ew_ref(sh_ew_op op, float a, float b) {
  switch (op) {
  case SH_EW_ADD: return a + b;
  case SH_EW_SUB: return a - b;
  case SH_EW_MUL: return a * b;
  case SH_EW_DIV: return a / b;
  case SH_EW_MAX: return isnan(a) ? a : isnan(b) ? b : (a > b ? a : b);
  case SH_EW_MIN: return isnan(a) ? a : isnan(b) ? b : (a < b ? a : b);
  }
  return a;
}
static const char *ew_names[] = {"add", "sub", "mul", "div", "max", "min"};

/* Random values with some specials: ±0, ±inf, NaN, equal pairs. */
static void fill_special(mat *x) {
  static const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1.0f};
  for (int64_t i = 0; i < x->m; i++)
    for (int64_t j = 0; j < x->cols; j++) {
      unsigned u = urand(24);
      mat_row(x, i)[j] = u < SH_ARRAY_LEN(sp) ? sp[u] : 4.0f * frand();
    }
}

/* One case: a is [am, an], b is [bm, bn] (1 or M, 1 or N); alias: 0 none,
 * 1 out = a, 2 out = b. */
static bool ew_case(int isa, sh_ew_op op, int64_t M, int64_t N, int64_t am, int64_t an,
                    int64_t bm, int64_t bn, bool rows, int alias) {
  mat a = mat_new(am, an, rows), b = mat_new(bm, bn, !rows);
  fill_special(&a);
  fill_special(&b);
  float *a0 = mat_copy(&a), *b0 = mat_copy(&b);
  mat out = alias == 1 ? a : alias == 2 ? b : mat_new(M, N, rows);
  sh_ew_binary((sheaf_isa)isa, op, M, N, (sh_ew_operand){mat_in(&a), am, an},
               (sh_ew_operand){mat_in(&b), bm, bn}, mat_out(&out));
  bool ok = true;
  for (int64_t i = 0; ok && i < M; i++)
    for (int64_t j = 0; ok && j < N; j++) {
      float av = a0[(am == 1 ? 0 : i) * an + (an == 1 ? 0 : j)];
      float bv = b0[(bm == 1 ? 0 : i) * bn + (bn == 1 ? 0 : j)];
      float ref = ew_ref(op, av, bv), got = mat_row(&out, i)[j];
      if (!same_float(got, ref))
        ok = th_fail(__FILE__, __LINE__,
                     "ew %s %s M=%lld N=%lld a[%lld,%lld] b[%lld,%lld] rows=%d alias=%d: "
                     "out[%lld][%lld] = %g, ref %g (a %g, b %g)",
                     ew_names[op], isa_names[isa], (long long)M, (long long)N, (long long)am,
                     (long long)an, (long long)bm, (long long)bn, rows, alias, (long long)i,
                     (long long)j, got, ref, av, bv);
    }
  if (!alias) mat_free(&out);
  mat_free(&a);
  mat_free(&b);
  free(a0);
  free(b0);
  return ok;
}

TEST(rows_ew_binary_broadcast) {
  const int64_t M = 3;
  for (int isa = 0; isa < n_isas(); isa++)
    for (int op = 0; op < 6; op++)
      for (int si = 0; si < N_SIZES; si++) {
        int64_t N = g_sizes[si];
        for (int combo = 0; combo < 16; combo++) {
          int64_t am = (combo & 1) ? 1 : M, an = (combo & 2) ? 1 : N;
          int64_t bm = (combo & 4) ? 1 : M, bn = (combo & 8) ? 1 : N;
          if (!ew_case(isa, (sh_ew_op)op, M, N, am, an, bm, bn, (si + combo) & 1, 0)) return;
        }
        /* in place: out = a, out = b (both full) */
        if (!ew_case(isa, (sh_ew_op)op, M, N, M, N, M, N, si & 1, 1)) return;
        if (!ew_case(isa, (sh_ew_op)op, M, N, M, N, M, N, si & 1, 2)) return;
        if (!ew_case(isa, (sh_ew_op)op, M, N, M, N, 1, N, si & 1, 1)) return;
        if (!ew_case(isa, (sh_ew_op)op, M, N, M, 1, M, N, si & 1, 2)) return;
      }
}

/* ---------------------------------------------------------- activations */

static double act_ref(sh_gemm_act a, double x, double *lip) {
  switch (a) {
  case SH_GEMM_ACT_RELU: *lip = 1; return x > 0 ? x : 0;
  case SH_GEMM_ACT_SIGMOID: *lip = 0.25; return 1.0 / (1.0 + exp(-x));
  case SH_GEMM_ACT_TANH: *lip = 1; return tanh(x);
  case SH_GEMM_ACT_GELU_TANH:
    *lip = 1.2;
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
  case SH_GEMM_ACT_GELU_ERF: *lip = 1.2; return 0.5 * x * erfc(-x * 0.7071067811865476);
  }
  *lip = 1;
  return x;
}

TEST(rows_ew_act) {
  const int64_t M = 2;
  for (int isa = 0; isa < n_isas(); isa++)
    for (int act = 0; act <= SH_GEMM_ACT_GELU_ERF; act++)
      for (int si = 0; si < N_SIZES; si++)
        for (int mode = 0; mode < 3; mode++) { /* 0 block, 1 rows, 2 in place */
          int64_t n = g_sizes[si];
          mat x = mat_new(M, n, mode == 1), y = mode == 2 ? x : mat_new(M, n, mode != 1);
          mat_fill(&x, -6.0f, 6.0f);
          if (n > 3) {
            mat_row(&x, 0)[1] = -0.0f;
            mat_row(&x, 1)[2] = 0.0f;
          }
          float *x0 = mat_copy(&x);
          sh_ew_act((sheaf_isa)isa, (sh_gemm_act)act, M, n, mat_in(&x), mat_out(&y));
          bool ok = true;
          for (int64_t i = 0; ok && i < M; i++)
            for (int64_t j = 0; ok && j < n; j++) {
              float xv = x0[i * n + j], got = mat_row(&y, i)[j];
              if (act == SH_GEMM_ACT_RELU) {
                float ref = 0.0f > xv ? 0.0f : xv;
                ok = CHECK(same_float(got, ref));
                continue;
              }
              double lip, ref = act_ref((sh_gemm_act)act, xv, &lip);
              /* a few ulp of the result plus the argument's rounding
               * through the slope (GELU for x < 0 is ill-conditioned) */
              double bound = EPS * (8.0 * fabs(ref) + 4.0 * lip * fabs(xv)) + 1e-30;
              double err = fabs(got - ref);
              note(R_ACT, isa, err, bound);
              if (!(err <= bound))
                ok = th_fail(__FILE__, __LINE__, "act %d %s n=%lld x=%.9g: %.9g vs %.9g", act,
                             isa_names[isa], (long long)n, xv, got, ref);
            }
          if (mode != 2) mat_free(&y);
          mat_free(&x);
          free(x0);
          if (!ok) return;
        }
  report(R_ACT);
}

TEST(rows_ew_act_relu_special) {
  static const float in[] = {NAN, -0.0f, 0.0f, -INFINITY, INFINITY, -1.0f, 2.0f, -1e-40f, 1e-40f};
  const int64_t n = (int64_t)SH_ARRAY_LEN(in);
  for (int isa = 0; isa < n_isas(); isa++) {
    float y[SH_ARRAY_LEN(in)];
    sh_ew_act((sheaf_isa)isa, SH_GEMM_ACT_RELU, 1, n, (sh_gemm_in){NULL, in, n},
              (sh_gemm_out){NULL, y, n});
    CHECK(isnan(y[0]));
    CHECK(y[1] == 0.0f && y[2] == 0.0f && y[3] == 0.0f);
    CHECK(y[4] == INFINITY && y[5] == 0.0f && y[6] == 2.0f && y[7] == 0.0f && y[8] == 1e-40f);
  }
}

/* Nothing is touched for m == 0 or n == 0. */
TEST(rows_empty_shapes) {
  float x[4] = {1, 2, 3, 4}, y[4] = {9, 9, 9, 9};
  sh_gemm_in in = {NULL, x, 4};
  sh_gemm_out out = {NULL, y, 4};
  for (int isa = 0; isa < n_isas(); isa++) {
    sheaf_isa L = (sheaf_isa)isa;
    sh_softmax_rows(L, 0, 4, 1.0f, in, out);
    sh_softmax_rows(L, 1, 0, 1.0f, in, out);
    sh_layernorm_rows(L, 0, 4, in, (sh_gemm_in){0}, NULL, NULL, 1e-5f, out);
    sh_layernorm_rows(L, 1, 0, in, (sh_gemm_in){0}, NULL, NULL, 1e-5f, out);
    sh_ew_binary(L, SH_EW_ADD, 0, 4, (sh_ew_operand){in, 1, 4}, (sh_ew_operand){in, 1, 4}, out);
    sh_ew_binary(L, SH_EW_ADD, 1, 0, (sh_ew_operand){in, 1, 1}, (sh_ew_operand){in, 1, 1}, out);
    sh_ew_act(L, SH_GEMM_ACT_TANH, 1, 0, in, out);
    sh_ew_act(L, SH_GEMM_ACT_RELU, 0, 4, in, out);
  }
  for (int i = 0; i < 4; i++) CHECK(y[i] == 9.0f);
}
