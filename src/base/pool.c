/*
 * pool.c — persistent thread pool (see pool.h).
 *
 * Dispatch protocol: the caller publishes (fn, arg, n_tasks), resets the task
 * counter and bumps `generation`. Workers wait for a new generation by
 * spinning (pause) for spin_us, then sleeping on a condition variable. A
 * worker announces it is about to sleep by incrementing `sleepers` (seq_cst)
 * and re-reading `generation`; the caller stores `generation` (seq_cst) and
 * then reads `sleepers`, and only takes the mutex to broadcast when someone
 * may sleep, so a busy pool never touches the mutex.
 */
#include "pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ volatile("yield")
#else
#define CPU_RELAX() ((void)0)
#endif

typedef struct worker {
  sh_pool *pool;
  pthread_t thread;
  int tid;
} worker;

struct sh_pool {
  sheaf_ctx *ctx;
  int threads; /* including the caller */
  worker *workers;
  int n_workers;

  /* job, written by the caller before generation is bumped */
  sh_task_fn fn;
  void *arg;
  int64_t n_tasks;
  int job_threads; /* workers with tid < job_threads take part */

  _Alignas(64) atomic_uint_fast64_t generation;
  _Alignas(64) atomic_int_fast64_t next_task;
  _Alignas(64) atomic_int busy; /* workers still inside the current job */
  _Alignas(64) atomic_int sleepers;
  atomic_bool stop;
  atomic_flag in_run; /* set while a run is in progress */
  int spin_us;

  pthread_mutex_t mu;
  pthread_cond_t cv;
};

static _Thread_local int tl_in_task;

static void run_tasks(sh_pool *p, int tid) {
  sh_task_fn fn = p->fn;
  void *arg = p->arg;
  int64_t n = p->n_tasks;
  tl_in_task = 1;
  for (;;) {
    int64_t t = atomic_fetch_add_explicit(&p->next_task, 1, memory_order_relaxed);
    if (t >= n) break;
    fn(arg, t, tid);
  }
  tl_in_task = 0;
}

static uint64_t wait_generation(sh_pool *p, uint64_t seen) {
  uint64_t g;
  uint64_t deadline = sheaf_time_ns() + (uint64_t)p->spin_us * 1000u;
  for (unsigned i = 0;; i++) {
    g = atomic_load_explicit(&p->generation, memory_order_acquire);
    if (g != seen) return g;
    if ((i & 63) == 63 && sheaf_time_ns() > deadline) break;
    CPU_RELAX();
  }
  pthread_mutex_lock(&p->mu);
  atomic_fetch_add(&p->sleepers, 1);
  while ((g = atomic_load(&p->generation)) == seen) pthread_cond_wait(&p->cv, &p->mu);
  atomic_fetch_sub(&p->sleepers, 1);
  pthread_mutex_unlock(&p->mu);
  return g;
}

static void *worker_main(void *vw) {
  worker *w = vw;
  sh_pool *p = w->pool;
  uint64_t seen = 0;
  for (;;) {
    seen = wait_generation(p, seen);
    if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
    if (w->tid < p->job_threads) run_tasks(p, w->tid);
    atomic_fetch_sub_explicit(&p->busy, 1, memory_order_release);
  }
  return NULL;
}

static void publish(sh_pool *p) {
  atomic_fetch_add(&p->generation, 1); /* seq_cst: pairs with sleepers */
  if (atomic_load(&p->sleepers) > 0) {
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
  }
}

sheaf_status sh_pool_create(sheaf_ctx *ctx, int threads, sh_pool **out) {
  *out = NULL;
  if (threads < 1) threads = 1;
  if (threads > 1024)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "threads = %d: at most 1024", threads);
  sh_pool *p = sh_alloc(ctx, sizeof *p, 64);
  if (!p) return SHEAF_ERR_NOMEM;
  memset(p, 0, sizeof *p);
  p->ctx = ctx;
  p->threads = threads;
  p->spin_us = 50;
  const char *env = getenv("SHEAF_SPIN_US");
  if (env && *env) {
    char *end;
    long v = strtol(env, &end, 10);
    if (*end == '\0' && v >= 0 && v <= 1000000) p->spin_us = (int)v;
  }
  atomic_init(&p->generation, 0);
  atomic_init(&p->next_task, 0);
  atomic_init(&p->busy, 0);
  atomic_init(&p->sleepers, 0);
  atomic_init(&p->stop, false);
  atomic_flag_clear(&p->in_run);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  int nw = threads - 1;
  if (nw > 0) {
    p->workers = sh_calloc(ctx, (size_t)nw, sizeof *p->workers);
    if (!p->workers) {
      sh_pool_free(p);
      return SHEAF_ERR_NOMEM;
    }
  }
  for (int i = 0; i < nw; i++) {
    p->workers[i].pool = p;
    p->workers[i].tid = i + 1;
    int rc = pthread_create(&p->workers[i].thread, NULL, worker_main, &p->workers[i]);
    if (rc != 0) {
      sh_pool_free(p);
      return sh_fail(ctx, SHEAF_ERR_INTERNAL, "cannot start worker thread %d of %d: %s", i + 1,
                     nw, strerror(rc));
    }
    p->n_workers++;
  }
  *out = p;
  return SHEAF_OK;
}

void sh_pool_free(sh_pool *p) {
  if (!p) return;
  if (p->n_workers > 0) {
    atomic_store(&p->busy, p->n_workers);
    atomic_store_explicit(&p->stop, true, memory_order_release);
    publish(p);
    for (int i = 0; i < p->n_workers; i++) pthread_join(p->workers[i].thread, NULL);
  }
  if (p->workers) sh_free(p->ctx, p->workers, (size_t)(p->threads - 1) * sizeof *p->workers);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  sh_free(p->ctx, p, sizeof *p);
}

int sh_pool_threads(const sh_pool *p) { return p ? p->threads : 1; }

void sh_pool_set_spin_us(sh_pool *p, int us) { p->spin_us = us < 0 ? 0 : us; }

static void run_serial(int64_t n, sh_task_fn fn, void *arg) {
  for (int64_t t = 0; t < n; t++) fn(arg, t, 0);
}

void sh_pool_run(sh_pool *p, int64_t n_tasks, sh_task_fn fn, void *arg, int max_threads) {
  if (n_tasks <= 0) return;
  int use = p ? p->threads : 1;
  if (max_threads > 0 && max_threads < use) use = max_threads;
  if ((int64_t)use > n_tasks) use = (int)n_tasks;
  if (use <= 1 || tl_in_task || atomic_flag_test_and_set(&p->in_run)) {
    int saved = tl_in_task;
    tl_in_task = 1;
    run_serial(n_tasks, fn, arg);
    tl_in_task = saved;
    return;
  }
  p->fn = fn;
  p->arg = arg;
  p->n_tasks = n_tasks;
  p->job_threads = use;
  atomic_store_explicit(&p->next_task, 0, memory_order_relaxed);
  atomic_store_explicit(&p->busy, p->n_workers, memory_order_relaxed);
  publish(p);
  run_tasks(p, 0);
  while (atomic_load_explicit(&p->busy, memory_order_acquire) > 0) CPU_RELAX();
  atomic_flag_clear(&p->in_run);
}
