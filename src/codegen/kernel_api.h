/*
 * kernel_api.h — internals of the public kernel API (include/sheaf_kernel.h,
 * kernel_api.c): compiling with explicit options (the tests pick the ISA,
 * the cache directory and the compiler) and what a compile did.
 */
#ifndef SH_CODEGEN_KERNEL_API_H
#define SH_CODEGEN_KERNEL_API_H

#include "codegen/jit.h"
#include "lang/kernel.h"

typedef struct sh_kernel_opts {
  bool isa_set;          /* false: sheaf_cpu_isa() */
  sheaf_isa isa;
  const char *cache_dir; /* NULL: the JIT's default */
  const char *cc;        /* NULL: the JIT's default */
  const char *file;      /* name in diagnostics; NULL: "kernel" */
  bool eager;            /* emit the C on every compile and key the cache on it
                            (the default keys on the source: kernel_api.c) */
} sh_kernel_opts;

sheaf_status sh_kernel_compile_opts(sheaf_ctx *ctx, const char *source, size_t len, const char *name,
                                    const sh_kernel_opts *opts, sheaf_kernel **out);
/* The checked kernel, and the JIT's statistics of its compile (the
 * compiler ran: stats.compiles == 1). */
const sh_kernel *sh_kernel_of(const sheaf_kernel *k);
void sh_kernel_jit_stats(const sheaf_kernel *k, sh_jit_stats *out);
/* Whether the generated code reads input i packed (a weight: kernel_api.c),
 * and how many times the run path has packed it. */
bool sh_kernel_input_packed(const sheaf_kernel *k, int i);
long sh_kernel_pack_count(const sheaf_kernel *k, int i);

#endif
