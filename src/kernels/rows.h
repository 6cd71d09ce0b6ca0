/*
 * rows.h — row kernels: operations along the last axis of an [M, N] f32
 * matrix, and elementwise ops with broadcast. Same ISA dispatch as the GEMM
 * (the `isa` argument, lowered to what the host supports); single-threaded:
 * callers split rows across the pool.
 *
 * Operands use the GEMM's convention (gemm.h): a matrix of M rows is either
 * rows[m] (row pointers: scattered inputs, no gather copy) or base + m*ld.
 *
 *   softmax     y = softmax(scale * x) per row, numerically stable (max
 *               subtracted first).
 *   log_softmax y = x - max - log(sum(exp(x - max))) per row.
 *   layernorm   y = (x [+ r] - mean) / sqrt(var + eps) * gamma + beta, with an
 *               optional residual r added first (post-LN transformer).
 *   reduce      sum / max / mean of each row into out[m].
 *   embedding   y[m] = table[idx[m]] (rows of width d), indices checked.
 *   elementwise out = a (op) b, where a and b broadcast over rows ([1, N]),
 *               columns ([M, 1]) or both ([1, 1]); unary activations.
 */
#ifndef SH_KERNELS_ROWS_H
#define SH_KERNELS_ROWS_H

#include "kernels/gemm.h"

/* softmax(scale * x[m, :]) into y[m, :] for m < M, n columns (n >= 1).
 * x == y allowed (same rows). Rows whose max is -inf (all -inf) produce
 * NaN, as in PyTorch; NaN inputs propagate; -inf entries give exactly 0;
 * any finite input (1e30 included) gives a finite row. Computed as
 * exp(scale * (x - x_max)) / sum (x_min when scale < 0). */
void sh_softmax_rows(sheaf_isa isa, int64_t m, int64_t n, float scale, sh_gemm_in x,
                     sh_gemm_out y);

/* log_softmax(x[m, :]) into y[m, :] for m < M, n columns: t = x - max,
 * y = t - log(sum exp(t)), the sum in double, log in double rounded once.
 * x == y allowed. A NaN or +inf entry, or a row of -inf, makes the row NaN;
 * -inf entries of other rows give -inf. Each level uses its exp of vmath
 * (libm's expf at the scalar level). */
void sh_log_softmax_rows(sheaf_isa isa, int64_t m, int64_t n, sh_gemm_in x, sh_gemm_out y);

/* y[m, :] = ((x[m, :] + r[m, :]) - mean) * rsqrt(var + eps) * gamma + beta.
 * r with no rows and no base: no residual. gamma/beta NULL: 1 / 0.
 * Variance is the biased (population) one, as in PyTorch, by the corrected
 * two-pass method in f32 (double when the squares overflow f32); a constant
 * row gives exactly beta. x == y and r == y allowed. */
void sh_layernorm_rows(sheaf_isa isa, int64_t m, int64_t n, sh_gemm_in x, sh_gemm_in r,
                       const float *gamma, const float *beta, float eps, sh_gemm_out y);

typedef enum sh_reduce_op { SH_REDUCE_SUM = 0, SH_REDUCE_MAX, SH_REDUCE_MEAN } sh_reduce_op;

/* out[m] = op over x[m, 0..n). n == 0: sum 0, mean NaN, max -inf. A NaN
 * element makes every op NaN. */
void sh_reduce_rows(sheaf_isa isa, sh_reduce_op op, int64_t m, int64_t n, sh_gemm_in x,
                    float *out);

/* y[i, :] = table[idx[i], :] for i < m, d columns; table has `rows` rows of
 * stride ld_table. An index outside [0, rows) fails with SHEAF_ERR_INVALID_ARG
 * naming the position and the value (ctx may be NULL: status only); every
 * index is checked first, so y is then untouched. A row copy is memcpy on
 * every ISA level. */
sheaf_status sh_embedding_rows(sheaf_ctx *ctx, sheaf_isa isa, int64_t m, int64_t d,
                               const float *table, int64_t rows, int64_t ld_table,
                               const int32_t *idx, sh_gemm_out y);

typedef enum sh_ew_op {
  SH_EW_ADD = 0,
  SH_EW_SUB,
  SH_EW_MUL,
  SH_EW_DIV,
  SH_EW_MAX,
  SH_EW_MIN
} sh_ew_op;

/* An elementwise operand of logical shape [m, n] with m in {1, M} and n in
 * {1, N}: a size-1 dimension broadcasts. */
typedef struct sh_ew_operand {
  sh_gemm_in in;
  int64_t m, n;
} sh_ew_operand;

/* out[M, N] = a (op) b with broadcast. out may alias a or b when that operand
 * is [M, N] with the same layout. Results are the IEEE f32 op, bit for bit
 * on every level; max/min return NaN when either input is NaN (as
 * torch.maximum / torch.minimum). */
void sh_ew_binary(sheaf_isa isa, sh_ew_op op, int64_t m, int64_t n, sh_ew_operand a,
                  sh_ew_operand b, sh_gemm_out out);

/* out[M, N] = act(x) (the GEMM's activations: relu, sigmoid, tanh, GELU;
 * all but relu through sh_vmath_f32). x == out allowed. relu keeps NaN. */
void sh_ew_act(sheaf_isa isa, sh_gemm_act act, int64_t m, int64_t n, sh_gemm_in x,
               sh_gemm_out out);

#endif
