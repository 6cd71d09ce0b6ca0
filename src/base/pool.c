/*
 * pool.c — persistent thread pool (see pool.h).
 *
 * Dispatch protocol. A job is (fn, arg, n_tasks, job_threads) plus a 64-bit
 * claim word: job id in the high 32 bits, next task index in the low 32.
 * The caller first closes the claim word (new job id, index CLOSED), then
 * writes the job fields (release), opens the claim word at index 0
 * (release), bumps `generation` and wakes sleepers if there may be any. A
 * thread reads the claim word, then the fields (acquire), then claims a task
 * by CAS from the value it read. If it saw any field of a newer job, the
 * close happened-before its CAS, so the CAS fails: a worker that wakes late
 * never runs a task with another job's fields or task count. The caller returns when `done` reaches
 * n_tasks: it never waits for a worker that slept through the job (it simply
 * runs those tasks itself), so a dispatch after idle costs no wake-up.
 *
 * Sleeping: a worker spins (pause) for spin_us, then increments `sleepers`
 * (seq_cst) and re-reads `generation` under the mutex before waiting; the
 * caller stores `generation` (seq_cst) then reads `sleepers`, and only takes
 * the mutex to broadcast when someone may sleep.
 */
#include "pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "stack.h"

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
  sh_stack stack; /* SH_BIG_STACK: user recursion (the interpreter) runs on workers */
  int tid;
} worker;

struct sh_pool {
  sheaf_ctx *ctx;
  int threads; /* including the caller */
  worker *workers;
  int n_workers;
  uint32_t job_id;

  /* job fields: atomics (relaxed) because a late worker may read them while
   * the caller writes the next job; only a successful claim uses them */
  _Atomic(sh_task_fn) fn;
  _Atomic(void *) arg;
  atomic_int_fast64_t n_tasks;
  atomic_int job_threads; /* threads with tid < job_threads take part */

  _Alignas(64) atomic_uint_fast64_t claim; /* job id << 32 | next task */
  _Alignas(64) atomic_int_fast64_t done;   /* tasks finished in this job */
  _Alignas(64) atomic_uint_fast64_t generation;
  _Alignas(64) atomic_int sleepers;
  atomic_bool stop;
  atomic_flag in_run; /* set while a run is in progress */
  atomic_int spin_us;
  atomic_bool accounting;       /* sh_pool_set_accounting */
  atomic_uint_fast64_t par_ns;  /* wall time of dispatched runs, while accounting */
  atomic_uint_fast64_t par_runs;

  pthread_mutex_t mu;
  pthread_cond_t cv;
};

static _Thread_local int tl_in_task;

#define CLAIM_CLOSED UINT32_MAX /* task index of a job being set up */

/* Claims and runs tasks of the job seen in the claim word until the job is
 * exhausted or replaced. */
static void run_tasks(sh_pool *p, int tid) {
  uint64_t c = atomic_load_explicit(&p->claim, memory_order_acquire);
  uint32_t job = (uint32_t)(c >> 32);
  if ((uint32_t)c == CLAIM_CLOSED) return;
  if (tid >= atomic_load_explicit(&p->job_threads, memory_order_acquire)) return;
  sh_task_fn fn = atomic_load_explicit(&p->fn, memory_order_acquire);
  void *arg = atomic_load_explicit(&p->arg, memory_order_acquire);
  int64_t n = atomic_load_explicit(&p->n_tasks, memory_order_acquire);
  int saved = tl_in_task;
  tl_in_task = 1;
  for (;;) {
    if ((uint32_t)(c >> 32) != job || (int64_t)(uint32_t)c >= n) break;
    if (!atomic_compare_exchange_weak_explicit(&p->claim, &c, c + 1, memory_order_acq_rel,
                                               memory_order_acquire))
      continue; /* c reloaded */
    fn(arg, (int64_t)(uint32_t)c, tid);
    atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
    c = atomic_load_explicit(&p->claim, memory_order_acquire);
  }
  tl_in_task = saved;
}

static uint64_t wait_generation(sh_pool *p, uint64_t seen) {
  uint64_t g;
  uint64_t deadline =
      sheaf_time_ns() + (uint64_t)atomic_load_explicit(&p->spin_us, memory_order_relaxed) * 1000u;
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
    run_tasks(p, w->tid);
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
  atomic_init(&p->fn, NULL);
  atomic_init(&p->arg, NULL);
  atomic_init(&p->n_tasks, 0);
  atomic_init(&p->job_threads, 0);
  atomic_init(&p->claim, 0);
  atomic_init(&p->done, 0);
  atomic_init(&p->sleepers, 0);
  atomic_init(&p->stop, false);
  atomic_init(&p->accounting, false);
  atomic_init(&p->par_ns, 0);
  atomic_init(&p->par_runs, 0);
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
    int rc = sh_thread_start(&p->workers[i].thread, &p->workers[i].stack, SH_BIG_STACK, worker_main,
                             &p->workers[i]);
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
    atomic_store_explicit(&p->stop, true, memory_order_release);
    publish(p);
    for (int i = 0; i < p->n_workers; i++) {
      pthread_join(p->workers[i].thread, NULL);
      sh_stack_free(&p->workers[i].stack);
    }
  }
  if (p->workers) sh_free(p->ctx, p->workers, (size_t)(p->threads - 1) * sizeof *p->workers);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  sh_free(p->ctx, p, sizeof *p);
}

int sh_pool_threads(const sh_pool *p) { return p ? p->threads : 1; }

void sh_pool_set_spin_us(sh_pool *p, int us) {
  atomic_store_explicit(&p->spin_us, us < 0 ? 0 : us, memory_order_relaxed);
}

static void run_serial(int64_t n, sh_task_fn fn, void *arg) {
  for (int64_t t = 0; t < n; t++) fn(arg, t, 0);
}

void sh_pool_run(sh_pool *p, int64_t n_tasks, sh_task_fn fn, void *arg, int max_threads) {
  if (n_tasks <= 0) return;
  int use = p ? p->threads : 1;
  if (max_threads > 0 && max_threads < use) use = max_threads;
  if ((int64_t)use > n_tasks) use = (int)n_tasks;
  if (use <= 1 || n_tasks >= (int64_t)CLAIM_CLOSED || tl_in_task ||
      atomic_flag_test_and_set(&p->in_run)) {
    int saved = tl_in_task;
    tl_in_task = 1;
    run_serial(n_tasks, fn, arg);
    tl_in_task = saved;
    return;
  }
  uint64_t t_start =
      atomic_load_explicit(&p->accounting, memory_order_relaxed) ? sheaf_time_ns() : 0;
  p->job_id++;
  uint64_t job = (uint64_t)p->job_id << 32;
  atomic_store_explicit(&p->claim, job | CLAIM_CLOSED, memory_order_relaxed);
  atomic_store_explicit(&p->fn, fn, memory_order_release);
  atomic_store_explicit(&p->arg, arg, memory_order_release);
  atomic_store_explicit(&p->n_tasks, n_tasks, memory_order_release);
  atomic_store_explicit(&p->job_threads, use, memory_order_release);
  atomic_store_explicit(&p->done, 0, memory_order_relaxed);
  atomic_store_explicit(&p->claim, job, memory_order_release);
  publish(p);
  run_tasks(p, 0);
  while (atomic_load_explicit(&p->done, memory_order_acquire) < n_tasks) CPU_RELAX();
  if (t_start) {
    atomic_fetch_add_explicit(&p->par_ns, sheaf_time_ns() - t_start, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->par_runs, 1, memory_order_relaxed);
  }
  atomic_flag_clear(&p->in_run);
}

void sh_pool_set_accounting(sh_pool *p, int on) {
  if (p) atomic_store_explicit(&p->accounting, on != 0, memory_order_relaxed);
}

uint64_t sh_pool_parallel_ns(const sh_pool *p) {
  return p ? atomic_load_explicit(&p->par_ns, memory_order_relaxed) : 0;
}

uint64_t sh_pool_parallel_runs(const sh_pool *p) {
  return p ? atomic_load_explicit(&p->par_runs, memory_order_relaxed) : 0;
}
