/*
 * rows_kernels.h — the per-ISA table behind rows.h: one-row micro-kernels
 * (rows_scalar.c, rows_avx2.c, rows_avx512.c), chosen by rows.c from the
 * `isa` argument. Private to src/kernels (and the tests/benchmarks).
 *
 * Every kernel works on one contiguous row of n >= 1 floats and reads and
 * writes exactly its n elements (tails are masked, never over-read). y may
 * be the same pointer as x (or a / b); partial overlap is not allowed.
 */
#ifndef SH_KERNELS_ROWS_KERNELS_H
#define SH_KERNELS_ROWS_KERNELS_H

#include "kernels/rows.h"

typedef struct sh_rows_kernels {
  const char *name;
  /* y = softmax(scale * x) */
  void (*softmax)(int64_t n, float scale, const float *x, float *y);
  /* y = x - max - log(sum exp(x - max)) */
  void (*log_softmax)(int64_t n, const float *x, float *y);
  /* y = (x [+ r] - mean) * rsqrt(var + eps) [* gamma] [+ beta]; r, gamma,
   * beta may be NULL. With r, x + r is stored to y first (so y may alias
   * x or r). */
  void (*layernorm)(int64_t n, const float *x, const float *r, const float *gamma,
                    const float *beta, float eps, float *y);
  float (*sum)(int64_t n, const float *x);
  float (*max)(int64_t n, const float *x); /* NaN if any element is NaN */
  /* y = a (op) b, elementwise */
  void (*vbinary)(sh_ew_op op, int64_t n, const float *a, const float *b, float *y);
  /* y = a (op) c, or c (op) a when `reversed` */
  void (*vbinaryc)(sh_ew_op op, bool reversed, int64_t n, const float *a, float c, float *y);
  void (*relu)(int64_t n, const float *x, float *y);
} sh_rows_kernels;

/* Mean and 1/sqrt(biased variance + eps) of v[0..n) in double precision:
 * the layernorm kernels' fallback when the f32 squares overflow (deviations
 * beyond ~1e19; the variance itself may exceed FLT_MAX). */
void sh_f32_moments_f64(int64_t n, const float *v, float eps, float *mean, float *rstd);

/* The table for `isa` (lowered to what the host supports). */
const sh_rows_kernels *sh_rows_kernels_get(sheaf_isa isa);

/* The scalar op every level matches bit for bit: IEEE add/sub/mul/div;
 * max/min return NaN when either input is NaN (a's when both are, like
 * torch.maximum) and b when a == b (so max(-0, +0) is +0 only as b). */
static inline float sh_ew_op_scalar(sh_ew_op op, float a, float b) {
  switch (op) {
  case SH_EW_ADD: return a + b;
  case SH_EW_SUB: return a - b;
  case SH_EW_MUL: return a * b;
  case SH_EW_DIV: return a / b;
  case SH_EW_MAX: return a != a ? a : (b != b ? b : (a > b ? a : b));
  case SH_EW_MIN: return a != a ? a : (b != b ? b : (a < b ? a : b));
  }
  return a;
}

#define SH_ROWS_DECLARE(isa)                                                                  \
  void sh_f32_softmax_ukernel__##isa(int64_t n, float scale, const float *x, float *y);      \
  void sh_f32_log_softmax_ukernel__##isa(int64_t n, const float *x, float *y);               \
  void sh_f32_layernorm_ukernel__##isa(int64_t n, const float *x, const float *r,            \
                                       const float *gamma, const float *beta, float eps,     \
                                       float *y);                                            \
  float sh_f32_rsum_ukernel__##isa(int64_t n, const float *x);                               \
  float sh_f32_rmax_ukernel__##isa(int64_t n, const float *x);                               \
  void sh_f32_vbinary_ukernel__##isa(sh_ew_op op, int64_t n, const float *a, const float *b, \
                                     float *y);                                              \
  void sh_f32_vbinaryc_ukernel__##isa(sh_ew_op op, bool reversed, int64_t n, const float *a, \
                                      float c, float *y);                                    \
  void sh_f32_vrelu_ukernel__##isa(int64_t n, const float *x, float *y);

SH_ROWS_DECLARE(scalar)
SH_ROWS_DECLARE(avx2)
SH_ROWS_DECLARE(avx512)

#endif
