/*
 * kernel_ref.h — the scalar reference evaluator of checked kernels
 * (kernel.h): the ground truth every generated kernel is tested against.
 *
 * It runs each statement in order as the naive loop nest over its index
 * variables (free indices outer, in left-hand-side order; then the
 * reduction indices), evaluating expressions in double precision: inputs
 * are widened to double, temporaries and outputs are held in double, and
 * the outputs are rounded to f32 once, at the end. Functions are the libm
 * ones in double (gelu: 0.5 x (1 + erf(x / sqrt 2)); sigmoid: 1 / (1 +
 * exp(-x)); softplus: x above 20, else log1p(exp(x))); min, max and the
 * max=/min= reductions give NaN when either side is NaN. Every access is
 * checked against its tensor's extents (the checker promises they hold;
 * a violation is SHEAF_ERR_INTERNAL).
 *
 * Arguments. Inputs in the kernel's parameter order; outputs in the order
 * of its results. Data is packed (no strides): f32 inputs as float, i32
 * inputs as int32_t, outputs as float. Sizes are bound from the input
 * shapes (sh_ksize: the input dimension that is exactly the size) and
 * must be at least 1; then every input dimension, rank and element count
 * is checked against them (an error names the argument, the dimension and
 * the size). Lengths (the values of an i32 input used as a ragged extent)
 * must be >= 0; a length of 0 is an empty row.
 *
 * Layout (dense and ragged, CoRa-style). A dense tensor is row-major. A
 * tensor with ragged dimensions, all depending on dimension j (its
 * ragged_outer), is row-major over the dimensions before j, and under each
 * of those the sub-tensors for t = 0, 1, ... of dimension j are packed one
 * after another, each row-major with its ragged extents taken at t:
 *
 *   S(t)      = product over dimensions m > j of (ragged ? L_m[t] : extent_m)
 *   prefix(t) = S(0) + ... + S(t - 1)          (offsets by prefix sums)
 *   offset(i) = rowmajor(i_0 .. i_{j-1}) * prefix(E_j) + prefix(i_j)
 *               + rowmajor(i_{j+1} .. ; extents at i_j)
 *   numel     = (product of extents before j) * prefix(E_j)
 *
 * So q: f32[B, L(b), D] is the sequences' rows one after another (row
 * prefix(b) / D starts sequence b), and s: f32[B, L(b), L(b)] the L[b] x
 * L[b] score matrices one after another.
 */
#ifndef SH_LANG_KERNEL_REF_H
#define SH_LANG_KERNEL_REF_H

#include "lang/kernel.h"

typedef struct sh_kref_arg {
  const void *data;     /* float (f32) or int32_t (i32) values, packed as above */
  size_t numel;         /* elements at data */
  int rank;
  const int64_t *shape; /* rank entries; the entry of a ragged dimension is not read */
} sh_kref_arg;

typedef struct sh_kref_out {
  float *data;
  size_t numel; /* must equal the output's element count (sh_kernel_ref_numel) */
} sh_kref_out;

/* Binds k's sizes from the inputs (sizes[k->n_sizes]) and checks every
 * input (rank, dimensions, element count, lengths >= 0). */
sheaf_status sh_kernel_ref_bind(sheaf_ctx *ctx, const sh_kernel *k, const sh_kref_arg *in, int n_in,
                                int64_t *sizes);
/* The element count of tensor `tensor` of k (an output: k->n_inputs + r;
 * or a ragged input: the element counts of ragged inputs are not checked
 * here, so a caller can size them from the lengths). */
sheaf_status sh_kernel_ref_numel(sheaf_ctx *ctx, const sh_kernel *k, const sh_kref_arg *in, int n_in,
                                 int tensor, size_t *numel);
/* Runs k on n_in inputs, writing its n_out outputs. */
sheaf_status sh_kernel_ref_run(sheaf_ctx *ctx, const sh_kernel *k, const sh_kref_arg *in, int n_in,
                               const sh_kref_out *out, int n_out);

#endif
