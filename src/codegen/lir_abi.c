/*
 * lir_abi.c — sheaf_kernel_abi.h embedded in the library (the JIT writes it
 * next to each generated source), and the ABI filled for a context: its
 * pool as the parallel-for, its allocator for temporaries.
 *
 * The header is the one source of truth: the assembler copies its bytes
 * (.incbin, path relative to the repository root where make runs), and the
 * #include below makes the object depend on it, so editing the header
 * rebuilds this file. tests/test_codegen_abi.c compares the two.
 */
#include "codegen/lir_emit.h"

#include <string.h>

#include "base/pool.h"

__asm__(".section .rodata\n"
        ".globl sh_lir_abi_text\n"
        ".hidden sh_lir_abi_text\n"
        ".globl sh_lir_abi_text_end\n"
        ".hidden sh_lir_abi_text_end\n"
        ".balign 16\n"
        "sh_lir_abi_text:\n"
        ".incbin \"src/codegen/sheaf_kernel_abi.h\"\n"
        "sh_lir_abi_text_end:\n"
        ".byte 0\n"
        ".previous\n");

extern const char sh_lir_abi_text[] __attribute__((visibility("hidden")));
extern const char sh_lir_abi_text_end[] __attribute__((visibility("hidden")));

const char *sh_lir_abi_header(size_t *len) {
  if (len) *len = (size_t)(sh_lir_abi_text_end - sh_lir_abi_text);
  return sh_lir_abi_text;
}

static void pool_parallel(void *pool, int64_t n_tasks, sk_task_fn fn, void *arg, int max_threads) {
  sh_pool_run((sh_pool *)pool, n_tasks, fn, arg, max_threads);
}

static void *ctx_alloc(void *user, size_t bytes) { return sh_alloc((sheaf_ctx *)user, bytes, 64); }

static void ctx_free(void *user, void *p, size_t bytes) { sh_free((sheaf_ctx *)user, p, bytes); }

void sh_lir_abi_init(sheaf_ctx *ctx, int threads, sk_abi *abi) {
  memset(abi, 0, sizeof *abi);
  abi->version = SK_ABI_VERSION;
  int have = ctx->pool ? sh_pool_threads(ctx->pool) : 1;
  abi->threads = threads <= 0 || threads > have ? have : threads;
  abi->parallel = ctx->pool ? pool_parallel : NULL;
  abi->pool = ctx->pool;
  abi->alloc = ctx_alloc;
  abi->free = ctx_free;
  abi->alloc_user = ctx;
}
