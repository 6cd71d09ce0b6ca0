/*
 * lir_sched_int.h — helpers shared by the schedule primitives (sched.c,
 * sched_cache.c, sched_default.c).
 */
#ifndef SH_CODEGEN_LIR_SCHED_INT_H
#define SH_CODEGEN_LIR_SCHED_INT_H

#include "codegen/lir_int.h"
#include "codegen/lir_sched.h"

/* Fails with SHEAF_ERR_INVALID_ARG, "kernel NAME: " + the message; the
 * kernel stays usable (the error is not sticky). */
sheaf_status sh_sched_err(sh_lir_kernel *k, const char *fmt, ...) SH_PRINTF(2, 3);
bool sh_sched_is_loop(const sh_lir_kernel *k, sh_lir_stmt s);
/* The stores in subtree s (all of them counted; at most cap written). */
int sh_sched_stores(const sh_lir_kernel *k, sh_lir_stmt s, sh_lir_stmt *out, int cap);
/* s holds a loop (below itself). */
bool sh_sched_contains_loop(const sh_lir_kernel *k, sh_lir_stmt s);
/* Wraps s in a new `if cond` where s was; returns the if. */
sh_lir_stmt sh_sched_wrap_if(sh_lir_kernel *k, sh_lir_stmt s, sh_lir_expr cond);
/* Padding rules for an access of b indexed by v at dimension d (see split). */
sheaf_status sh_sched_pad_access(sh_lir_kernel *k, sh_lir_buf b, int n, const int32_t *idx, int d,
                                 sh_lir_var v, sh_lir_expr E, int64_t f, const char *lv);
bool sh_sched_store_vectorizable(sh_lir_kernel *k, sh_lir_stmt s, sh_lir_var v);
/* The default schedule's register tile for a row of dot products under the
 * innermost loop R (sched_dot.c); false when R does not match (unchanged). */
bool sh_sched_dot_tile(sh_lir_kernel *k, sh_lir_stmt R, int w);

/* A per-task temporary (sh_sched_shrink) accessed inside s and also
 * outside it, NONE, or -2 when that could not be checked
 * (sched_rowblock.c). */
sh_lir_buf sh_sched_per_task_escapes(const sh_lir_kernel *k, sh_lir_stmt s);
/* The default schedule's row-block fusion: `next` (a dense row nest right
 * after the GEMM nest `prod`, of its rows' extent, holding a reduction or
 * reading C at another element than its store's or from two stores: not a
 * pointwise epilogue the tile's store holds) reads the GEMM's product C,
 * which nothing else outside prod accesses. */
bool sh_sched_row_consumer(const sh_lir_kernel *k, sh_lir_stmt prod, sh_lir_buf C, sh_lir_stmt next);
/* cons computed at the row-block loop `at` (blocks of `rows`), C shrunk to
 * one block per thread where it can be, at over the pool; false (the
 * kernel unchanged) when compute_at does not apply. */
bool sh_sched_row_fuse(sh_lir_kernel *k, sh_lir_buf C, sh_lir_stmt at, sh_lir_stmt cons, int64_t rows);
#endif
