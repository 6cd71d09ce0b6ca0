/*
 * bench_pool.c — dispatch latency of the persistent thread pool.
 *
 * Measures the round trip of one parallel-for whose tasks do (almost)
 * nothing, i.e. the fixed cost every batched kernel pays to use the pool:
 *   sheaf spin   workers spinning between jobs (the default, back-to-back kernels)
 *   sheaf idle   first dispatch after 300 us idle: workers asleep on the
 *                condition variable (only the dispatch is timed)
 *   openmp       `#pragma omp parallel for` over the same tasks (when built with -fopenmp)
 *   spawn        pthread_create + join per call (what a pool avoids)
 * Prints ns per dispatch and the ratio to sheaf spin. Flags: --threads N,
 * --iters N, --quick.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "base/base.h"
#include "base/pool.h"

static atomic_long g_sink;

static void tiny_task(void *arg, int64_t t, int tid) {
  (void)arg;
  (void)tid;
  atomic_fetch_add_explicit(&g_sink, t, memory_order_relaxed);
}

static double bench_sheaf(sh_pool *p, int tasks, long iters) {
  for (int i = 0; i < 1000; i++) sh_pool_run(p, tasks, tiny_task, NULL, 0);
  uint64_t t0 = sheaf_time_ns();
  for (long i = 0; i < iters; i++) sh_pool_run(p, tasks, tiny_task, NULL, 0);
  return (double)(sheaf_time_ns() - t0) / (double)iters;
}

static double bench_sheaf_idle(sh_pool *p, int tasks, long iters) {
  uint64_t total = 0;
  for (long i = 0; i < iters; i++) {
    struct timespec gap = {0, 300000};
    nanosleep(&gap, NULL);
    uint64_t t0 = sheaf_time_ns();
    sh_pool_run(p, tasks, tiny_task, NULL, 0);
    total += sheaf_time_ns() - t0;
  }
  return (double)total / (double)iters;
}

#ifdef _OPENMP
static double bench_omp(int threads, int tasks, long iters) {
  omp_set_num_threads(threads);
  for (long i = 0; i < 1000 + iters; i++) {
    if (i == 1000) g_sink = 0;
#pragma omp parallel for schedule(dynamic, 1)
    for (int t = 0; t < tasks; t++) tiny_task(NULL, t, 0);
  }
  uint64_t t0 = sheaf_time_ns();
  for (long i = 0; i < iters; i++) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int t = 0; t < tasks; t++) tiny_task(NULL, t, 0);
  }
  return (double)(sheaf_time_ns() - t0) / (double)iters;
}
#endif

typedef struct spawn_arg { int tasks, first, stride; } spawn_arg;
static void *spawn_main(void *v) {
  spawn_arg *a = v;
  for (int t = a->first; t < a->tasks; t += a->stride) tiny_task(NULL, t, 0);
  return NULL;
}

static double bench_spawn(int threads, int tasks, long iters) {
  uint64_t t0 = sheaf_time_ns();
  for (long i = 0; i < iters; i++) {
    pthread_t th[64];
    spawn_arg args[64];
    int nw = threads - 1 < 64 ? threads - 1 : 64;
    for (int w = 0; w < nw; w++) {
      args[w] = (spawn_arg){tasks, w + 1, threads};
      pthread_create(&th[w], NULL, spawn_main, &args[w]);
    }
    spawn_arg self = {tasks, 0, threads};
    spawn_main(&self);
    for (int w = 0; w < nw; w++) pthread_join(th[w], NULL);
  }
  return (double)(sheaf_time_ns() - t0) / (double)iters;
}

int main(int argc, char **argv) {
  int threads = 2;
  long iters = 200000;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atol(argv[++i]);
    else if (!strcmp(argv[i], "--quick")) iters = 20000;
    else {
      fprintf(stderr, "usage: bench_pool [--threads N] [--iters N] [--quick]\n");
      return 2;
    }
  }
  if (threads < 1 || iters < 1) {
    fprintf(stderr, "bench_pool: --threads and --iters must be positive\n");
    return 2;
  }
  sheaf_ctx_options o = {.threads = threads};
  sheaf_ctx *ctx;
  char err[256];
  if (sheaf_ctx_create(&o, &ctx, err, sizeof err) != SHEAF_OK) {
    fprintf(stderr, "bench_pool: %s\n", err);
    return 1;
  }
  int tasks = threads;
  double spin = bench_sheaf(ctx->pool, tasks, iters);
  long idle_iters = iters / 100 > 0 ? iters / 100 : 1;
  double idle = bench_sheaf_idle(ctx->pool, tasks, idle_iters);
  printf("thread-pool dispatch latency: %d threads, %d tasks per call\n", threads, tasks);
  printf("%-14s %12s %10s\n", "system", "ns/dispatch", "vs spin");
  printf("%-14s %12.0f %10.2f\n", "sheaf spin", spin, 1.0);
  printf("%-14s %12.0f %10.2f\n", "sheaf idle", idle, idle / spin);
#ifdef _OPENMP
  double omp = bench_omp(threads, tasks, iters);
  printf("%-14s %12.0f %10.2f\n", "openmp", omp, omp / spin);
#else
  printf("%-14s %12s %10s\n", "openmp", "n/a", "(no -fopenmp)");
#endif
  double spawn = bench_spawn(threads, tasks, iters / 100 > 0 ? iters / 100 : 1);
  printf("%-14s %12.0f %10.2f\n", "spawn", spawn, spawn / spin);
  sheaf_ctx_free(ctx);
  return 0;
}
