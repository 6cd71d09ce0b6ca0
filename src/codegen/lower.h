/*
 * lower.h — checked kernels (src/lang/kernel.h) to the loop IR (lir.h), and
 * the pipeline above it: lower, default schedule, emit C, JIT (docs/CODEGEN.md,
 * "Lowering and the kernel API").
 *
 * Lowering. Each statement `T(i, j) op expr` becomes the loop nest over its
 * free indices (in left-hand-side order) with, for `op=!`, the store of the
 * identity, then the loops of its reduction indices around the combining
 * store (`T[i, j] op= expr`); `=` is a plain store, `op=` without `!` a
 * combining store without the identity. Extents are the checker's: affine
 * ones over the size symbols, ragged ones a load of the length tensor at the
 * outer loop's variable. Expressions map one to one (sizes and index values
 * become float(int)); f32 math, where the reference is double.
 *
 * Arguments of the lowered kernel (its IR buffers in creation order):
 *   1. the kernel's inputs, in parameter order (i32 ones stay i32);
 *   2. its outputs, in result order;
 *   3. its ragged temporaries (the caller allocates them: sh_lower_info);
 *   4. one i32 offsets array per ragged tensor of 1..3, in that order:
 *      offsets[t] = prefix(t) of kernel_ref.h's packed layout.
 * Dense temporaries are the kernel's own (TEMP). Size symbols are the
 * kernel's sizes, in order. A ragged tensor must depend on its dimension
 * 0 through one length tensor (the IR's ragged layout); others are
 * SHEAF_ERR_UNSUPPORTED.
 */
#ifndef SH_CODEGEN_LOWER_H
#define SH_CODEGEN_LOWER_H

#include "codegen/lir.h"
#include "lang/kernel.h"

/* What the caller must pass beyond the inputs and outputs. */
typedef struct sh_lower_info {
  int n_scratch;  /* ragged temporaries (argument group 3) */
  int *scratch;   /* their tensor indices in k */
  int n_ragged;   /* ragged tensors (argument group 4), in argument order */
  int *ragged;    /* their tensor indices in k */
  int n_args;     /* all IR arguments */
  int cap;        /* (allocation size of scratch and ragged) */
} sh_lower_info;

/* Lowers k into a new IR kernel named `name` (a C identifier). info (may be
 * NULL) is allocated with ctx's allocator: free with sh_lower_info_free. */
sheaf_status sh_lower_kernel(sheaf_ctx *ctx, const sh_kernel *k, const char *name, sh_lir_kernel **out,
                             sh_lower_info *info);
void sh_lower_info_free(sheaf_ctx *ctx, sh_lower_info *info);

/* Element count of tensor t of k for bound sizes and lengths (the packed
 * layout; ragged extents read from the length inputs at in_data). */
sheaf_status sh_lower_numel(sheaf_ctx *ctx, const sh_kernel *k, int t, const int64_t *sizes,
                            const void *const *in_data, size_t *numel);
/* The offsets array of ragged tensor t (dims[0] entries, prefix sums). */
sheaf_status sh_lower_offsets(sheaf_ctx *ctx, const sh_kernel *k, int t, const int64_t *sizes,
                              const void *const *in_data, int32_t *offsets);
/* The value of an affine extent. */
int64_t sh_lower_aff(const sh_kaff *a, const int64_t *sizes);

/* Lower + default schedule for isa + emit: the C source (appended to c,
 * may be NULL) and the scheduled IR (*lir, may be NULL: then freed). */
sheaf_status sh_lower_generate(sheaf_ctx *ctx, const sh_kernel *k, sheaf_isa isa, sh_buf *c,
                               sh_lir_kernel **lir, sh_lower_info *info);
/* The entry symbol of kernel k's generated code ("sheafk_" + its name). */
void sh_lower_entry_name(const sh_kernel *k, char *out, size_t cap);

#endif
