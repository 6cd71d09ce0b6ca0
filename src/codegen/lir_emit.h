/*
 * lir_emit.h — C emission of a scheduled loop-IR kernel: one self-contained
 * C11 file that includes only "sheaf_kernel_abi.h" (the header text is in
 * the library: sh_lir_abi_header) and defines
 *
 *   int NAME(const sk_abi *abi, const int64_t *sizes, const sk_arg *args);
 *
 * plus, for every input in the panel layout B,
 *
 *   int64_t NAME_packed_size_B(const int64_t *sizes);          (floats)
 *   void NAME_pack_B(const int64_t *sizes, const float *src, int64_t ld,
 *                    int trans, float *dst);
 *
 * (src row-major [K, N] with row stride ld, or [N, K] when trans; dst
 * holds NAME_packed_size_B floats, zero-padded to whole panels). Vector
 * loops become GCC-vector code, unrolled loops are replicated, locals
 * indexed only by constants and vector lanes become registers, parallel
 * loops are outlined into tasks run through abi->parallel. Emission is
 * deterministic: the same IR gives the same bytes (the JIT cache keys on
 * them) and it leaves the kernel unchanged.
 */
#ifndef SH_CODEGEN_LIR_EMIT_H
#define SH_CODEGEN_LIR_EMIT_H

#include "codegen/lir.h"
#define SK_ABI_TYPES_ONLY
#include "codegen/sheaf_kernel_abi.h"
#undef SK_ABI_TYPES_ONLY

/* Appends the C source of kernel k to out. Verifies k first; a kernel the
 * emitter cannot express fails with SHEAF_ERR_UNSUPPORTED and a message. */
sheaf_status sh_lir_emit_c(sh_lir_kernel *k, sh_buf *out);

/* The text of sheaf_kernel_abi.h (NUL-terminated) and its length. */
const char *sh_lir_abi_header(size_t *len);

/* Fills an ABI for a call on ctx's pool with up to `threads` threads
 * (<= 0: all of the pool's; 1: no parallelism) and the context's allocator
 * for temporaries. */
void sh_lir_abi_init(sheaf_ctx *ctx, int threads, sk_abi *abi);

#endif
