/*
 * linear_reduce.c — the linearized mode's per-sentence reductions over a map
 * bound in main (cnn.sf's max(fs), mean(fs); sum; attnpool.sf's attention
 * softmax(scores) @ stack(hs)): a map's rows of one
 * sentence are contiguous (its tokens in order), so row r of main's group
 * reduces the map's rows calls[call][r] .. calls[call_end][r] - 1,
 * elementwise, in the order the dynamic runtime uses (mean: the sum times
 * 1 / n). The executor copies the result into the kernel's input (fill_row).
 */
#include <math.h>
#include <string.h>

#include "compile/linear_int.h"

sheaf_status sh_lin_reduce_rows(sh_lin *L, const sh_lin_arm *a, const sh_lin_grp *g, const sh_lin_seg *sg, int32_t r,
                                float *dst) {
  const sh_lin_call *c = &a->calls[sg->call];
  int32_t first = g->calls[sg->call][r], end = g->calls[sg->call_end][r];
  size_t w = (size_t)sg->width;
  const float *src = L->state[c->fn][sg->comp];
  if (end <= first) {
    if (sg->reduce != SH_BI_SUM)
      return sh_fail(L->ctx, SHEAF_ERR_INVALID_ARG, "linear run: %s of an empty list (a sentence of no words)",
                     sh_builtin_name(sg->reduce));
    memset(dst, 0, w * sizeof(float));
    return SHEAF_OK;
  }
  if (sg->reduce == SH_BI_SOFTMAX) { /* softmax(s) @ stack(h): a_k = exp(s_k - max s) / sum, then sum a_k h_k */
    const float *sc = L->state[a->calls[sg->weights].fn][0] + (g->calls[sg->weights][r] - first);
    float m = sc[first];
    for (int32_t k = first + 1; k < end; k++) m = sc[k] > m ? sc[k] : m;
    float z = 0;
    for (int32_t k = first; k < end; k++) z += expf(sc[k] - m);
    memset(dst, 0, w * sizeof(float));
    for (int32_t k = first; k < end; k++) {
      float ak = expf(sc[k] - m) / z;
      const float *x = src + (size_t)k * w;
      for (size_t j = 0; j < w; j++) dst[j] += ak * x[j];
    }
    return SHEAF_OK;
  }
  memcpy(dst, src + (size_t)first * w, w * sizeof(float));
  for (int32_t k = first + 1; k < end; k++) {
    const float *x = src + (size_t)k * w;
    if (sg->reduce == SH_BI_MAX)
      for (size_t j = 0; j < w; j++) dst[j] = x[j] > dst[j] ? x[j] : dst[j];
    else
      for (size_t j = 0; j < w; j++) dst[j] += x[j];
  }
  if (sg->reduce == SH_BI_MEAN) {
    float s = 1.0f / (float)(end - first);
    for (size_t j = 0; j < w; j++) dst[j] *= s;
  }
  return SHEAF_OK;
}
