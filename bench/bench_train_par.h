/*
 * bench_train_par.h — the serial fraction of a training step, for
 * bench_train and bench_train_tree (--threads 2 and more).
 *
 * The pool's opt-in accounting (sh_pool_set_accounting) sums the wall time
 * of every run dispatched to two or more threads; the bench marks the end
 * of each phase of an update (build, forward flush, zeroing, backward,
 * optimizer step) and charges each phase its wall time and its parallel
 * time, and counts the dispatches (runs/upd: each a barrier, where an idle
 * thread waits for the slowest). What is left, wall minus parallel, ran on the caller alone: the
 * serial part s of the step, and 1 / (s + (1 - s) / 2) is Amdahl's bound
 * for two threads. On a machine whose two vCPUs share one core's FMA units
 * a parallel region runs about as long as on one thread, so s measured at
 * 2 threads is close to the 1-thread share (docs/TRAINING.md, "Two
 * threads").
 */
#ifndef BENCH_TRAIN_PAR_H
#define BENCH_TRAIN_PAR_H

#include <stdio.h>
#include <time.h>

#include "base/base.h"
#include "base/pool.h"
#include "sheaf.h"

/* --split instances: build, flush and backward all in PAR_BACKWARD (the
 * shards), then PAR_REDUCE (the shards' gradients added in order). */
enum { PAR_BUILD, PAR_FLUSH, PAR_LOSS, PAR_ZERO, PAR_BACKWARD, PAR_REDUCE, PAR_STEP, PAR_PHASES };

typedef struct par_acct {
  sh_pool *pool; /* NULL: off */
  uint64_t t, p, r; /* wall clock, parallel time and dispatches at the last mark */
  uint64_t wall[PAR_PHASES], par[PAR_PHASES], runs[PAR_PHASES];
  int64_t updates;
  /* --split instances: the shards' thread CPU time per update, summed and
   * the slowest one's (par_shards) */
  uint64_t shard_sum, shard_max;
  int shards;
} par_acct;

/* Thread CPU ns (a shard's own work, whatever else runs on the machine). */
static inline uint64_t par_thread_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* One update's shards took ns[0..n) of thread CPU time each. */
static inline void par_shards(par_acct *a, const uint64_t *ns, int n) {
  uint64_t sum = 0, mx = 0;
  for (int k = 0; k < n; k++) sum += ns[k], mx = ns[k] > mx ? ns[k] : mx;
  a->shard_sum += sum;
  a->shard_max += mx;
  a->shards = n;
}

static const char *const par_phase_name[PAR_PHASES] = {"build", "forward flush", "loss read",
                                                        "zero grad", "backward", "reduce grads",
                                                        "optimizer step"};

/* Turns the accounting on when ctx has two threads or more. */
static inline void par_init(par_acct *a, sheaf_ctx *ctx) {
  *a = (par_acct){0};
  if (sheaf_ctx_threads(ctx) < 2) return;
  a->pool = ctx->pool;
  sh_pool_set_accounting(a->pool, 1);
}

static inline void par_begin(par_acct *a) {
  if (!a->pool) return;
  a->t = sheaf_time_ns();
  a->p = sh_pool_parallel_ns(a->pool);
  a->r = sh_pool_parallel_runs(a->pool);
}

/* Ends phase `ph` (it began at the previous mark or par_begin). */
static inline void par_mark(par_acct *a, int ph) {
  if (!a->pool) return;
  uint64_t t = sheaf_time_ns(), p = sh_pool_parallel_ns(a->pool), r = sh_pool_parallel_runs(a->pool);
  a->wall[ph] += t - a->t;
  a->par[ph] += p - a->p;
  a->runs[ph] += r - a->r;
  a->t = t;
  a->p = p;
  a->r = r;
}

/* Prints the per-phase table, s and the bound (loss read excluded: not
 * part of a step, the bench reads it once for its report). */
static inline void par_report(const par_acct *a) {
  if (!a->pool || a->updates < 1) return;
  double tw = 0, ts = 0, tr = 0;
  for (int i = 0; i < PAR_PHASES; i++)
    if (i != PAR_LOSS) tw += (double)a->wall[i], ts += (double)(a->wall[i] - a->par[i]), tr += (double)a->runs[i];
  double u = (double)a->updates * 1e6;
  printf("  serial part of a step (wall on the caller outside pool runs; %lld updates, %d threads):\n",
         (long long)a->updates, sh_pool_threads(a->pool));
  printf("    %-15s %9s %9s %9s %8s %9s\n", "phase", "ms/upd", "par ms", "serial ms", "s share", "runs/upd");
  for (int i = 0; i < PAR_PHASES; i++) {
    if (i == PAR_LOSS || a->wall[i] == 0) continue;
    printf("    %-15s %9.2f %9.2f %9.2f %7.1f%% %9.1f\n", par_phase_name[i], (double)a->wall[i] / u,
           (double)a->par[i] / u, (double)(a->wall[i] - a->par[i]) / u,
           100.0 * (double)(a->wall[i] - a->par[i]) / tw, (double)a->runs[i] / (double)a->updates);
  }
  double s = tw > 0 ? ts / tw : 1;
  printf("    %-15s %9.2f %9.2f %9.2f %7.1f%% %9.1f   Amdahl bound, 2 threads: %.2fx\n", "step",
         tw / u, (tw - ts) / u, ts / u, 100.0 * s, tr / (double)a->updates, 1.0 / (s + (1 - s) / 2));
  if (a->shards > 1 && a->shard_max)
    printf("    shards (thread CPU ms/upd): %d, together %.2f, the slowest %.2f: balance %.3f (1: even)\n", a->shards,
           (double)a->shard_sum / u, (double)a->shard_max / u,
           (double)a->shard_sum / ((double)a->shards * (double)a->shard_max));
  fflush(stdout);
}

#endif
