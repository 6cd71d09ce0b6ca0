/*
 * pool.h — the persistent thread pool. Threads are created once with the
 * context; a parallel-for hands out task indices through an atomic counter,
 * the caller works too, and idle workers spin briefly before sleeping so that
 * back-to-back batched kernels dispatch in about a microsecond.
 */
#ifndef SH_POOL_H
#define SH_POOL_H

#include "base.h"

typedef struct sh_pool sh_pool;

/* Runs task `task` (0 <= task < n_tasks) on thread `tid` (0 = caller). */
typedef void (*sh_task_fn)(void *arg, int64_t task, int tid);

/* The most threads one kernel job is split over: the per-thread workspaces
 * of the GEMM, the ragged linear layers and attention are arrays of this
 * size, and a pool with more threads runs such a job on the first
 * SH_MAX_THREADS of them (the only thread cap in Sheaf). */
#define SH_MAX_THREADS 64

/* threads counts the caller: threads == 1 creates no worker. */
sheaf_status sh_pool_create(sheaf_ctx *ctx, int threads, sh_pool **out);
void sh_pool_free(sh_pool *pool);
int sh_pool_threads(const sh_pool *pool);

/* Runs every task once and returns when all are done. Tasks are claimed
 * dynamically (an idle thread takes the next index). Called from inside a
 * task, or from a second thread while a run is in progress, it runs the
 * tasks serially on the calling thread. At most `max_threads` threads take
 * part (0 = all). */
void sh_pool_run(sh_pool *pool, int64_t n_tasks, sh_task_fn fn, void *arg, int max_threads);

/* How long idle workers spin before sleeping, in microseconds (default 50,
 * or SHEAF_SPIN_US from the environment). */
void sh_pool_set_spin_us(sh_pool *pool, int us);

/* Opt-in accounting of parallel time (off by default; off, a dispatch pays
 * one relaxed load). On, every sh_pool_run that dispatches to two or more
 * threads adds its wall time, as the caller sees it (dispatch and waiting
 * included), to a counter; runs that fall back to the caller (one task, one
 * thread, nested) are not counted: they are serial time. The caller's time
 * outside these runs is the serial part of its work (Amdahl). */
void sh_pool_set_accounting(sh_pool *pool, int on);
uint64_t sh_pool_parallel_ns(const sh_pool *pool); /* 0 for NULL */
uint64_t sh_pool_parallel_runs(const sh_pool *pool);

#endif
