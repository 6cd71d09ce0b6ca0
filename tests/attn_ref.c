/*
 * attn_ref.c — the reference attention of the generated-attention tests
 * (attn_ref.h).
 */
#include "attn_ref.h"

#include <math.h>
#include <stdlib.h>

#include "harness.h"

void ar_mha(const int32_t *lens, int nb, int64_t H, int64_t D, const float *q, const float *k, const float *v,
            float *out) {
  int64_t t0 = 0, row = H * D, maxl = 1;
  for (int b = 0; b < nb; b++) maxl = lens[b] > maxl ? lens[b] : maxl;
  double *p = malloc(sizeof(double) * (size_t)maxl);
  if (!p) {
    th_fail(__FILE__, __LINE__, "ar_mha: out of memory");
    return;
  }
  for (int b = 0; b < nb; b++) {
    int64_t L = lens[b];
    for (int64_t h = 0; h < H; h++)
      for (int64_t i = 0; i < L; i++) {
        double mx = -INFINITY, z = 0;
        for (int64_t j = 0; j < L; j++) {
          double s = 0;
          for (int64_t d = 0; d < D; d++) s += (double)q[(t0 + i) * row + h * D + d] * k[(t0 + j) * row + h * D + d];
          p[j] = s / sqrt((double)D);
          mx = fmax(mx, p[j]);
        }
        for (int64_t j = 0; j < L; j++) z += p[j] = exp(p[j] - mx);
        for (int64_t d = 0; d < D; d++) {
          double o = 0;
          for (int64_t j = 0; j < L; j++) o += p[j] * v[(t0 + j) * row + h * D + d];
          out[(t0 + i) * row + h * D + d] = (float)(o / z);
        }
      }
    t0 += L;
  }
  free(p);
}

bool ar_close(const float *got, const float *want, int64_t n, const char *what) {
  for (int64_t i = 0; i < n; i++)
    if (!(fabs((double)got[i] - want[i]) <= 2e-5 * fmax(1.0, fabs((double)want[i]))))
      return th_fail(__FILE__, __LINE__, "%s: element %lld is %.9g, want %.9g", what, (long long)i, got[i],
                     want[i]);
  return true;
}
