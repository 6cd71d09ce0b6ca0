/*
 * rows_scalar.c — reference level of the row kernels (rows_kernels.h):
 * plain C, libm expf, four accumulators for sums (the same summation shape
 * as the vector levels, so the same error bounds hold). Compiled on every
 * architecture; AArch64 runs only this level.
 */
#include "kernels/rows_kernels.h"

#include <math.h>

static float sum4(int64_t n, const float *x) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += x[i];
    s1 += x[i + 1];
    s2 += x[i + 2];
    s3 += x[i + 3];
  }
  for (; i < n; i++) s0 += x[i];
  return (s0 + s1) + (s2 + s3);
}

float sh_f32_rsum_ukernel__scalar(int64_t n, const float *x) { return sum4(n, x); }

float sh_f32_rmax_ukernel__scalar(int64_t n, const float *x) {
  float m = -INFINITY;
  for (int64_t i = 0; i < n; i++) {
    float v = x[i];
    if (v > m || v != v) m = v;
    if (m != m) break; /* NaN is final */
  }
  return m;
}

void sh_f32_softmax_ukernel__scalar(int64_t n, float scale, const float *x, float *y) {
  /* the extreme x that maximizes scale*x (max for scale >= 0, min below),
   * then exp(scale * (x - m)): every argument is <= 0 and the extreme
   * element gives exactly exp(0), with no a*b - c for a compiler to fuse */
  float m = x[0];
  if (scale >= 0) {
    for (int64_t i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
  } else {
    for (int64_t i = 1; i < n; i++) m = x[i] < m ? x[i] : m;
  }
  float s = 0;
  for (int64_t i = 0; i < n; i++) {
    float e = expf(scale * (x[i] - m));
    y[i] = e;
    s += e;
  }
  float inv = 1.0f / s;
  for (int64_t i = 0; i < n; i++) y[i] *= inv;
}

void sh_f32_log_softmax_ukernel__scalar(int64_t n, const float *x, float *y) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += expf(x[i] - mx);
  float ls = (float)log(s);
  for (int64_t i = 0; i < n; i++) y[i] = (x[i] - mx) - ls;
}

void sh_f32_moments_f64(int64_t n, const float *v, float eps, float *mean, float *rstd) {
  double s = 0, q = 0;
  for (int64_t i = 0; i < n; i++) s += v[i];
  double m = s / (double)n;
  for (int64_t i = 0; i < n; i++) q += (v[i] - m) * (v[i] - m);
  *mean = (float)m;
  *rstd = (float)(1.0 / sqrt(q / (double)n + (double)eps));
}

void sh_f32_layernorm_ukernel__scalar(int64_t n, const float *x, const float *r,
                                      const float *gamma, const float *beta, float eps,
                                      float *y) {
  const float *v = x;
  if (r) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] + r[i];
    v = y;
  }
  /* corrected two-pass: mean, then sum of deviations (corrects the mean's
   * rounding) and of their squares */
  float fn = (float)n;
  float mean = sum4(n, v) / fn;
  float sd = 0, sq = 0;
  for (int64_t i = 0; i < n; i++) {
    float d = v[i] - mean;
    sd += d;
    sq += d * d;
  }
  float var = (sq - sd * (sd / fn)) / fn;
  mean += sd / fn;
  if (var < 0) var = 0;
  float rstd = 1.0f / sqrtf(var + eps);
  if (!(sq < INFINITY)) sh_f32_moments_f64(n, v, eps, &mean, &rstd); /* overflow (or NaN) */
  for (int64_t i = 0; i < n; i++) {
    float g = gamma ? gamma[i] * rstd : rstd;
    float o = (v[i] - mean) * g;
    y[i] = beta ? o + beta[i] : o;
  }
}

void sh_f32_vbinary_ukernel__scalar(sh_ew_op op, int64_t n, const float *a, const float *b,
                                    float *y) {
  switch (op) {
#define CASE(OP)                                                             \
  case OP:                                                                   \
    for (int64_t i = 0; i < n; i++) y[i] = sh_ew_op_scalar(OP, a[i], b[i]); \
    break;
    CASE(SH_EW_ADD) CASE(SH_EW_SUB) CASE(SH_EW_MUL) CASE(SH_EW_DIV) CASE(SH_EW_MAX)
    CASE(SH_EW_MIN)
#undef CASE
  }
}

void sh_f32_vbinaryc_ukernel__scalar(sh_ew_op op, bool reversed, int64_t n, const float *a,
                                     float c, float *y) {
  if (reversed)
    for (int64_t i = 0; i < n; i++) y[i] = sh_ew_op_scalar(op, c, a[i]);
  else
    for (int64_t i = 0; i < n; i++) y[i] = sh_ew_op_scalar(op, a[i], c);
}

void sh_f32_vrelu_ukernel__scalar(int64_t n, const float *x, float *y) {
  for (int64_t i = 0; i < n; i++) y[i] = 0.0f > x[i] ? 0.0f : x[i]; /* NaN and -0 pass */
}
