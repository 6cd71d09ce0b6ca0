/*
 * rows.c — the row-kernel API (rows.h): ISA dispatch to the one-row
 * micro-kernels of rows_kernels.h, operand addressing (row pointers or
 * base + ld), broadcast resolution for the elementwise ops, the embedding
 * gather (a bounds check, then one memcpy per row: no ISA can beat libc's
 * copy) and the activations (relu per ISA, the others through sh_vmath_f32).
 */
#include "kernels/rows.h"

#include <inttypes.h>
#include <string.h>

#include "kernels/rows_kernels.h"
#include "kernels/vmath.h"

static const sh_rows_kernels k_scalar = {
    "scalar",
    sh_f32_softmax_ukernel__scalar,
    sh_f32_log_softmax_ukernel__scalar,
    sh_f32_layernorm_ukernel__scalar,
    sh_f32_rsum_ukernel__scalar,
    sh_f32_rmax_ukernel__scalar,
    sh_f32_vbinary_ukernel__scalar,
    sh_f32_vbinaryc_ukernel__scalar,
    sh_f32_vrelu_ukernel__scalar,
};

#if defined(__x86_64__)
static const sh_rows_kernels k_avx2 = {
    "avx2",
    sh_f32_softmax_ukernel__avx2,
    sh_f32_log_softmax_ukernel__avx2,
    sh_f32_layernorm_ukernel__avx2,
    sh_f32_rsum_ukernel__avx2,
    sh_f32_rmax_ukernel__avx2,
    sh_f32_vbinary_ukernel__avx2,
    sh_f32_vbinaryc_ukernel__avx2,
    sh_f32_vrelu_ukernel__avx2,
};
static const sh_rows_kernels k_avx512 = {
    "avx512",
    sh_f32_softmax_ukernel__avx512,
    sh_f32_log_softmax_ukernel__avx512,
    sh_f32_layernorm_ukernel__avx512,
    sh_f32_rsum_ukernel__avx512,
    sh_f32_rmax_ukernel__avx512,
    sh_f32_vbinary_ukernel__avx512,
    sh_f32_vbinaryc_ukernel__avx512,
    sh_f32_vrelu_ukernel__avx512,
};
#endif

const sh_rows_kernels *sh_rows_kernels_get(sheaf_isa isa) {
  sheaf_isa host = sheaf_cpu_isa_host();
  if ((int)isa > (int)host) isa = host;
#if defined(__x86_64__)
  if (isa == SHEAF_ISA_AVX512) return &k_avx512;
  if (isa == SHEAF_ISA_AVX2) return &k_avx2;
#endif
  return &k_scalar;
}

static inline const float *in_row(sh_gemm_in x, int64_t i) {
  return x.rows ? x.rows[i] : x.base + i * x.ld;
}
static inline float *out_row(sh_gemm_out y, int64_t i) {
  return y.rows ? y.rows[i] : y.base + i * y.ld;
}

void sh_softmax_rows(sheaf_isa isa, int64_t m, int64_t n, float scale, sh_gemm_in x,
                     sh_gemm_out y) {
  if (n <= 0) return;
  const sh_rows_kernels *k = sh_rows_kernels_get(isa);
  for (int64_t i = 0; i < m; i++) k->softmax(n, scale, in_row(x, i), out_row(y, i));
}

void sh_log_softmax_rows(sheaf_isa isa, int64_t m, int64_t n, sh_gemm_in x, sh_gemm_out y) {
  if (n <= 0) return;
  const sh_rows_kernels *k = sh_rows_kernels_get(isa);
  for (int64_t i = 0; i < m; i++) k->log_softmax(n, in_row(x, i), out_row(y, i));
}

void sh_layernorm_rows(sheaf_isa isa, int64_t m, int64_t n, sh_gemm_in x, sh_gemm_in r,
                       const float *gamma, const float *beta, float eps, sh_gemm_out y) {
  if (n <= 0) return;
  const sh_rows_kernels *k = sh_rows_kernels_get(isa);
  bool res = r.rows || r.base;
  for (int64_t i = 0; i < m; i++)
    k->layernorm(n, in_row(x, i), res ? in_row(r, i) : NULL, gamma, beta, eps, out_row(y, i));
}

void sh_reduce_rows(sheaf_isa isa, sh_reduce_op op, int64_t m, int64_t n, sh_gemm_in x,
                    float *out) {
  const sh_rows_kernels *k = sh_rows_kernels_get(isa);
  for (int64_t i = 0; i < m; i++) {
    if (n <= 0) {
      out[i] = op == SH_REDUCE_SUM ? 0.0f : op == SH_REDUCE_MAX ? -INFINITY : NAN;
      continue;
    }
    const float *row = in_row(x, i);
    switch (op) {
    case SH_REDUCE_SUM: out[i] = k->sum(n, row); break;
    case SH_REDUCE_MAX: out[i] = k->max(n, row); break;
    case SH_REDUCE_MEAN: out[i] = k->sum(n, row) / (float)n; break;
    }
  }
}

sheaf_status sh_embedding_rows(sheaf_ctx *ctx, sheaf_isa isa, int64_t m, int64_t d,
                               const float *table, int64_t rows, int64_t ld_table,
                               const int32_t *idx, sh_gemm_out y) {
  (void)isa; /* a row copy: memcpy is already the best kernel on every level */
  /* check every index before writing anything: on failure y is untouched */
  for (int64_t i = 0; i < m; i++)
    if (idx[i] < 0 || idx[i] >= rows)
      return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                     "embedding: index %" PRId32 " at position %" PRId64
                     " is outside the table's %" PRId64 " rows",
                     idx[i], i, rows);
  if (d <= 0) return SHEAF_OK;
  for (int64_t i = 0; i < m; i++)
    memcpy(out_row(y, i), table + (int64_t)idx[i] * ld_table, (size_t)d * sizeof(float));
  return SHEAF_OK;
}

void sh_ew_binary(sheaf_isa isa, sh_ew_op op, int64_t m, int64_t n, sh_ew_operand a,
                  sh_ew_operand b, sh_gemm_out out) {
  if (m <= 0 || n <= 0) return;
  const sh_rows_kernels *k = sh_rows_kernels_get(isa);
  /* a size-1 column dimension broadcasts; with n == 1 both readings agree */
  bool a_vec = a.n == n, b_vec = b.n == n;
  for (int64_t i = 0; i < m; i++) {
    const float *ar = in_row(a.in, a.m == 1 ? 0 : i);
    const float *br = in_row(b.in, b.m == 1 ? 0 : i);
    float *yr = out_row(out, i);
    if (a_vec && b_vec) {
      k->vbinary(op, n, ar, br, yr);
    } else if (a_vec) {
      k->vbinaryc(op, false, n, ar, br[0], yr);
    } else if (b_vec) {
      k->vbinaryc(op, true, n, br, ar[0], yr);
    } else {
      float c = sh_ew_op_scalar(op, ar[0], br[0]);
      for (int64_t j = 0; j < n; j++) yr[j] = c;
    }
  }
}

void sh_ew_act(sheaf_isa isa, sh_gemm_act act, int64_t m, int64_t n, sh_gemm_in x,
               sh_gemm_out out) {
  if (n <= 0) return;
  sh_vmath_fn fn = SH_VMATH_SIGMOID;
  switch (act) {
  case SH_GEMM_ACT_RELU: {
    const sh_rows_kernels *k = sh_rows_kernels_get(isa);
    for (int64_t i = 0; i < m; i++) k->relu(n, in_row(x, i), out_row(out, i));
    return;
  }
  case SH_GEMM_ACT_SIGMOID: fn = SH_VMATH_SIGMOID; break;
  case SH_GEMM_ACT_TANH: fn = SH_VMATH_TANH; break;
  case SH_GEMM_ACT_GELU_TANH: fn = SH_VMATH_GELU_TANH; break;
  case SH_GEMM_ACT_GELU_ERF: fn = SH_VMATH_GELU_ERF; break;
  }
  for (int64_t i = 0; i < m; i++) sh_vmath_f32(isa, fn, n, in_row(x, i), out_row(out, i));
}
