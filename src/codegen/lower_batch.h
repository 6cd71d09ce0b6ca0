/*
 * lower_batch.h — the batched entry point of a generated kernel (C text
 * appended to the kernel's own: lower_batch.c; the ABI is sk_barg /
 * sk_batch_fn in sheaf_kernel_abi.h, docs/CODEGEN.md "Batched use").
 */
#ifndef SH_CODEGEN_LOWER_BATCH_H
#define SH_CODEGEN_LOWER_BATCH_H

#include "codegen/lower.h"

/* Appends `ENTRY_batch` (ENTRY = sh_lower_entry_name(k)) to c: the batch
 * loop around ENTRY, over instances, parallel over the pool when the batch
 * has at least two instances per thread (each instance then runs with one
 * thread), else serial with the pool left to the instance's own loops.
 * n_args: the lowered kernel's arguments (sh_lower_info.n_args). */
sheaf_status sh_lower_emit_batch(const sh_kernel *k, int n_args, sh_buf *c);
/* The batched entry's symbol ("sheafk_NAME_batch"). */
void sh_lower_batch_name(const sh_kernel *k, char *out, size_t cap);

#endif
