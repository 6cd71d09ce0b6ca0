/*
 * lir_ref.h — plain C references (in double) for the codegen tests, the
 * closeness check they share, and ragged test data (lengths, offsets,
 * packed Q / K values, optional storage padding of the ragged dimension).
 */
#ifndef SHEAF_TESTS_LIR_REF_H
#define SHEAF_TESTS_LIR_REF_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"

/* |got - want| <= tol · max(1, |want|) everywhere (NaN equal to NaN). */
static inline bool lr_close_at(const char *file, int line, const char *what, const float *got,
                               const float *want, int64_t n, double tol) {
  for (int64_t i = 0; i < n; i++) {
    double g = got[i], w = want[i];
    if (isnan(w) && isnan(g)) continue;
    if (!(fabs(g - w) <= tol * fmax(1.0, fabs(w))))
      return th_fail(file, line, "%s: element %lld is %.9g, want %.9g (tolerance %.1e)", what,
                     (long long)i, g, w, tol);
  }
  return true;
}
#define lr_close(what, got, want, n, tol) lr_close_at(__FILE__, __LINE__, what, got, want, n, tol)

static inline double lr_gelu(double x) { return 0.5 * x * erfc(-x * 0.70710678118654752); }

/* R = A·B (+ bias, gelu). */
static inline void lr_matmul(int64_t M, int64_t N, int64_t K, const float *A, const float *B,
                             const float *bias, bool gelu, float *R) {
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double s = 0;
      for (int64_t k = 0; k < K; k++) s += (double)A[i * K + k] * B[k * N + j];
      if (bias) s += bias[j];
      R[i * N + j] = (float)(gelu ? lr_gelu(s) : s);
    }
}

static inline void lr_softmax(int64_t M, int64_t N, const float *x, float *y) {
  for (int64_t i = 0; i < M; i++) {
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < N; j++) m = fmax(m, x[i * N + j]);
    for (int64_t j = 0; j < N; j++) s += exp(x[i * N + j] - m);
    for (int64_t j = 0; j < N; j++) y[i * N + j] = (float)(exp(x[i * N + j] - m) / s);
  }
}

static inline void lr_layernorm(int64_t M, int64_t N, const float *x, const float *g,
                                const float *b, float eps, float *y) {
  for (int64_t i = 0; i < M; i++) {
    double mu = 0, v = 0;
    for (int64_t j = 0; j < N; j++) mu += x[i * N + j];
    mu /= (double)N;
    for (int64_t j = 0; j < N; j++) v += (x[i * N + j] - mu) * (x[i * N + j] - mu);
    double rs = 1.0 / sqrt(v / (double)N + eps);
    for (int64_t j = 0; j < N; j++) y[i * N + j] = (float)((x[i * N + j] - mu) * rs * g[j] + b[j]);
  }
}

/* Softmax (ln false) or layernorm (gain g, bias b, eps 1e-5) of x's M rows
 * of N into ref, kept in double (the kernel API tests' references). */
static inline void lr_rows_ref(bool ln, const float *x, const float *g, const float *b, double *ref,
                               int64_t M, int64_t N) {
  for (int64_t r = 0; r < M; r++) {
    const float *xr = x + r * N;
    double a = 0, c = 0;
    if (ln) {
      for (int64_t i = 0; i < N; i++) a += xr[i];
      a /= (double)N;
      for (int64_t i = 0; i < N; i++) c += (xr[i] - a) * (xr[i] - a);
      c = 1.0 / sqrt(c / (double)N + 1e-5);
    } else {
      a = -INFINITY;
      for (int64_t i = 0; i < N; i++)
        if (xr[i] > a) a = xr[i];
      for (int64_t i = 0; i < N; i++) c += exp(xr[i] - a);
    }
    for (int64_t i = 0; i < N; i++) ref[r * N + i] = ln ? (xr[i] - a) * c * g[i] + b[i] : exp(xr[i] - a) / c;
  }
}

/* The largest |y - ref| / max(1, |ref|) over n values (NaN in y: infinite). */
static inline double lr_max_rel_err(const float *y, const double *ref, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double e = fabs(y[i] - ref[i]) / (fabs(ref[i]) > 1.0 ? fabs(ref[i]) : 1.0);
    if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
  }
  return worst;
}

/* lr_max_rel_err of y against lr_rows_ref of x's M rows of N (1e30 when out of memory). */
static inline double lr_rows_err(bool ln, const float *x, const float *g, const float *b, const float *y,
                                 int64_t M, int64_t N) {
  double *ref = malloc(sizeof(double) * (size_t)(M * N > 0 ? M * N : 1));
  if (!ref) return 1e30;
  lr_rows_ref(ln, x, g, b, ref, M, N);
  double e = lr_max_rel_err(y, ref, M * N);
  free(ref);
  return e;
}

/* A batch of sequences: Q, K [len, d] per sequence (storage rows padded
 * to `pad`), scores S [len, len] (both dims padded). */
typedef struct lr_ragged {
  int64_t batch, d, pad;
  int32_t *len, *qoff, *soff;
  float *q, *k, *s, *sref, *sums, *sumsref;
  int64_t q_elems, s_elems;
} lr_ragged;

static inline int64_t lr_round(int64_t x, int64_t p) { return p > 1 ? (x + p - 1) / p * p : x; }

static inline bool lr_ragged_make(lr_ragged *r, const int32_t *lens, int64_t batch, int64_t d,
                                  int64_t pad, uint64_t seed) {
  r->batch = batch;
  r->d = d;
  r->pad = pad;
  r->len = malloc(sizeof(int32_t) * (size_t)batch);
  r->qoff = malloc(sizeof(int32_t) * (size_t)batch);
  r->soff = malloc(sizeof(int32_t) * (size_t)batch);
  int64_t qe = 0, se = 0;
  for (int64_t b = 0; b < batch; b++) {
    r->len[b] = lens[b];
    r->qoff[b] = (int32_t)qe;
    r->soff[b] = (int32_t)se;
    int64_t L = lr_round(lens[b], pad);
    qe += L * d;
    se += L * L;
  }
  r->q_elems = qe;
  r->s_elems = se;
  r->q = th_frand_fill(&seed, qe + 1);
  r->k = th_frand_fill(&seed, qe + 1);
  r->s = calloc((size_t)se + 1, sizeof(float));
  r->sref = calloc((size_t)se + 1, sizeof(float));
  r->sums = calloc((size_t)(batch * d) + 1, sizeof(float));
  r->sumsref = calloc((size_t)(batch * d) + 1, sizeof(float));
  return r->len && r->qoff && r->soff && r->q && r->k && r->s && r->sref && r->sums && r->sumsref;
}

static inline void lr_ragged_free(lr_ragged *r) {
  free(r->len), free(r->qoff), free(r->soff), free(r->q), free(r->k), free(r->s), free(r->sref),
      free(r->sums), free(r->sumsref);
}

/* Reference scores, in place of the logical elements (padding untouched). */
static inline void lr_ragged_scores(const lr_ragged *r, float scale, float *S) {
  for (int64_t b = 0; b < r->batch; b++) {
    int64_t L = r->len[b], Ls = lr_round(L, r->pad);
    for (int64_t i = 0; i < L; i++)
      for (int64_t j = 0; j < L; j++) {
        double s = 0;
        for (int64_t d = 0; d < r->d; d++)
          s += (double)r->q[r->qoff[b] + i * r->d + d] * r->k[r->qoff[b] + j * r->d + d];
        S[r->soff[b] + i * Ls + j] = (float)(s * scale);
      }
  }
}

static inline void lr_ragged_sums(const lr_ragged *r, float *out) {
  for (int64_t b = 0; b < r->batch; b++)
    for (int64_t d = 0; d < r->d; d++) {
      double s = 0;
      for (int64_t l = 0; l < r->len[b]; l++) s += r->q[r->qoff[b] + l * r->d + d];
      out[b * r->d + d] = (float)s;
    }
}

#endif
