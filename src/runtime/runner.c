/*
 * runner.c — a runner drives a per-instance program over many instances:
 * per batch, reset a graph, call the user's build for each instance, flush,
 * call the user's read for each. With several threads it runs whole batches
 * in parallel (SHEAF_PARALLEL_BATCHES): each pool thread owns a graph of one
 * thread and a worker slot (its index, passed to the callbacks so that they
 * keep per-thread state without a lock) and claims the next batch, so
 * building, scheduling and kernels all scale, not only the kernels; with
 * few batches it runs one at a time on a graph whose kernels use every
 * thread (SHEAF_PARALLEL_KERNELS), slot 0.
 *
 * Errors: a batch after the first failing one does not start (it may already
 * run); every batch before it runs, so the error reported, the smallest
 * failing instance's, is the one a sequential run would report.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "base/pool.h"
#include "runtime/fiber_run.h"
#include "runtime/runtime.h"

struct sheaf_runner {
  sheaf_model *model;
  sheaf_ctx *ctx;
  sheaf_runner_opts o; /* o.trace_path is `trace` */
  char *trace;
  int threads;
  sheaf_graph **per_thread; /* batches mode: graph of thread tid (threads = 1), created lazily */
  sheaf_graph *shared;      /* kernels mode: one graph over every thread */
  sh_fiber_sched **fibers;  /* worker slot's fiber scheduler, created lazily */
  size_t fiber_stack;       /* bytes per fiber stack (0: the default) */

  /* the run in progress */
  int64_t first, count;
  sheaf_instance_fn build, read;
  void *user;
  bool on_fibers; /* sheaf_runner_run_fibers */
  atomic_int_fast64_t stop_batch; /* first failing batch: later ones do not start */
  pthread_mutex_t mu;
  int64_t err_instance; /* first failing instance (INT64_MAX: none) */
  sheaf_status err_status;
  char err[512];
};

sheaf_status sheaf_runner_create(sheaf_model *m, const sheaf_runner_opts *opts, sheaf_runner **out) {
  if (!out)
    return m ? sh_fail(m->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_runner_create: out is NULL")
             : SHEAF_ERR_INVALID_ARG;
  *out = NULL;
  if (!m) return SHEAF_ERR_INVALID_ARG;
  sheaf_ctx *ctx = m->ctx;
  sheaf_runner_opts o = {0};
  if (opts) o = *opts;
  if ((unsigned)o.policy > SHEAF_POLICY_AGENDA)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_runner_create: unknown policy %d", (int)o.policy);
  if ((unsigned)o.parallel > SHEAF_PARALLEL_KERNELS)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_runner_create: unknown parallel mode %d",
                   (int)o.parallel);
  if (o.trace_path) {
    sheaf_status st = sh_trace_path_check(ctx, "sheaf_runner_create", o.trace_path);
    if (st) return st;
  }
  if (o.batch <= 0) o.batch = 64;
  int pt = sheaf_ctx_threads(ctx);
  sheaf_runner *r = sh_calloc(ctx, 1, sizeof *r);
  if (!r) return SHEAF_ERR_NOMEM;
  r->model = m;
  r->ctx = ctx;
  r->threads = o.threads <= 0 || o.threads > pt ? pt : o.threads;
  o.threads = r->threads;
  r->o = o;
  r->per_thread = sh_calloc(ctx, (size_t)r->threads, sizeof *r->per_thread);
  r->fibers = sh_calloc(ctx, (size_t)r->threads, sizeof *r->fibers);
  r->trace = o.trace_path ? sh_strdup(ctx, o.trace_path) : NULL;
  r->o.trace_path = r->trace;
  if (!r->per_thread || !r->fibers || (o.trace_path && !r->trace)) {
    sh_free(ctx, r->per_thread, (size_t)r->threads * sizeof *r->per_thread);
    sh_free(ctx, r->fibers, (size_t)r->threads * sizeof *r->fibers);
    if (r->trace) sh_strfree(ctx, r->trace);
    sh_free(ctx, r, sizeof *r);
    return SHEAF_ERR_NOMEM;
  }
  pthread_mutex_init(&r->mu, NULL);
  atomic_init(&r->stop_batch, INT64_MAX);
  *out = r;
  return SHEAF_OK;
}

void sheaf_runner_free(sheaf_runner *r) {
  if (!r) return;
  for (int t = 0; t < r->threads; t++) {
    sheaf_graph_free(r->per_thread[t]);
    sh_fiber_sched_free(r->fibers[t]);
  }
  sh_free(r->ctx, r->fibers, (size_t)r->threads * sizeof *r->fibers);
  sheaf_graph_free(r->shared);
  pthread_mutex_destroy(&r->mu);
  if (r->trace) sh_strfree(r->ctx, r->trace);
  sh_free(r->ctx, r->per_thread, (size_t)r->threads * sizeof *r->per_thread);
  sh_free(r->ctx, r, sizeof *r);
}

/* ceil(count / batch) without overflow (batch may be INT64_MAX). */
static int64_t n_batches(int64_t count, int64_t batch) {
  return count / batch + (count % batch != 0);
}

sheaf_parallel sheaf_runner_mode(const sheaf_runner *r, int64_t count) {
  if (!r) return SHEAF_PARALLEL_KERNELS;
  if (r->threads <= 1 || r->o.trace_path) return SHEAF_PARALLEL_KERNELS;
  if (r->o.parallel != SHEAF_PARALLEL_AUTO) return r->o.parallel;
  int64_t batches = n_batches(count, r->o.batch);
  return batches >= 2 * (int64_t)r->threads ? SHEAF_PARALLEL_BATCHES : SHEAF_PARALLEL_KERNELS;
}

int sheaf_runner_threads(const sheaf_runner *r) { return r ? r->threads : 1; }

static sheaf_status graph_of(sheaf_runner *r, bool shared, int tid, sheaf_graph **out) {
  sheaf_graph **slot = shared ? &r->shared : &r->per_thread[tid];
  if (!*slot) {
    sheaf_graph_opts go = {r->o.policy, shared ? r->threads : 1, shared ? r->o.trace_path : NULL};
    sheaf_status st = sheaf_graph_create(r->model, &go, slot);
    if (st) return st;
  }
  *out = *slot;
  return SHEAF_OK;
}

/* Records the failure of `instance` (kept if it is the first so far). */
static void record(sheaf_runner *r, sheaf_graph *g, int64_t instance, sheaf_status st,
                   const char *what) {
  int64_t b = (instance - r->first) / r->o.batch;
  int_fast64_t cur = atomic_load(&r->stop_batch);
  while (b < cur && !atomic_compare_exchange_weak(&r->stop_batch, &cur, b)) {
  }
  pthread_mutex_lock(&r->mu);
  if (instance < r->err_instance) {
    r->err_instance = instance;
    r->err_status = st;
    if (g && sheaf_graph_status(g) != SHEAF_OK)
      snprintf(r->err, sizeof r->err, "%s", g->err);
    else
      snprintf(r->err, sizeof r->err, "%s returned %s", what, sheaf_status_str(st));
  }
  pthread_mutex_unlock(&r->mu);
}

/* Batch b < n_batches(count, batch): b * batch < count, no overflow. Its
 * callbacks get worker slot `worker`. */
static void run_batch(sheaf_runner *r, sheaf_graph *g, int64_t b, int worker) {
  int64_t i0 = r->first + b * r->o.batch, n = r->count - b * r->o.batch;
  int64_t i1 = i0 + (n < r->o.batch ? n : r->o.batch);
  sheaf_status st = sheaf_graph_reset(g);
  if (st) {
    record(r, g, i0, st, "sheaf_graph_reset");
    return;
  }
  if (r->on_fibers) { /* each instance on a fiber; waits flush once for all */
    if (!r->fibers[worker] && !(r->fibers[worker] = sh_fiber_sched_create(r->ctx, r->fiber_stack))) {
      record(r, g, i0, SHEAF_ERR_NOMEM, "the fiber scheduler");
      return;
    }
    int64_t fail;
    st = sh_fiber_batch(r->fibers[worker], g, i0, i1, worker, r->build, r->user, &fail);
    if (st) {
      record(r, g, fail, st, "build");
      return;
    }
  }
  for (int64_t i = i0; !r->on_fibers && i < i1; i++) {
    st = r->build(g, i, worker, r->user);
    if (!st) st = sheaf_graph_status(g);
    if (st) {
      record(r, g, i, st, "build");
      return;
    }
  }
  st = sheaf_graph_flush(g);
  if (st) {
    record(r, g, i0, st, "sheaf_graph_flush");
    return;
  }
  for (int64_t i = i0; r->read && i < i1; i++) {
    st = r->read(g, i, worker, r->user);
    if (st) {
      record(r, g, i, st, "read");
      return;
    }
  }
}

static void batch_task(void *arg, int64_t b, int tid) {
  sheaf_runner *r = arg;
  if (b > atomic_load_explicit(&r->stop_batch, memory_order_relaxed)) return;
  sheaf_graph *g;
  sheaf_status st = graph_of(r, false, tid, &g);
  if (st) {
    record(r, NULL, r->first + b * r->o.batch, st, "sheaf_graph_create");
    return;
  }
  run_batch(r, g, b, tid);
}

static sheaf_status run(sheaf_runner *r, const char *fn, bool fibers, int64_t first, int64_t count,
                        sheaf_instance_fn build, sheaf_instance_fn read, void *user) {
  if (!r) return SHEAF_ERR_INVALID_ARG;
  if (!build) return sh_fail(r->ctx, SHEAF_ERR_INVALID_ARG, "%s: build is NULL", fn);
  if (first < 0 || count < 0 || count > INT64_MAX - first)
    return sh_fail(r->ctx, SHEAF_ERR_INVALID_ARG, "%s: instances [%lld, %lld + %lld) out of range",
                   fn, (long long)first, (long long)first, (long long)count);
  r->on_fibers = fibers;
  if (count == 0) return SHEAF_OK;
  r->first = first;
  r->count = count;
  r->build = build;
  r->read = read;
  r->user = user;
  r->err_instance = INT64_MAX;
  r->err_status = SHEAF_OK;
  r->err[0] = '\0';
  atomic_store(&r->stop_batch, INT64_MAX);
  int64_t batches = n_batches(count, r->o.batch);
  if (sheaf_runner_mode(r, count) == SHEAF_PARALLEL_BATCHES) {
    sh_pool_run(r->ctx->pool, batches, batch_task, r, r->threads);
  } else {
    sheaf_graph *g;
    sheaf_status st = graph_of(r, true, 0, &g);
    if (st) return st;
    for (int64_t b = 0; b < batches && b <= atomic_load(&r->stop_batch); b++) run_batch(r, g, b, 0);
  }
  if (r->err_status)
    return sh_fail(r->ctx, r->err_status, "instance %lld: %s", (long long)r->err_instance, r->err);
  return SHEAF_OK;
}

sheaf_status sheaf_runner_run(sheaf_runner *r, int64_t first, int64_t count, sheaf_instance_fn build,
                              sheaf_instance_fn read, void *user) {
  return run(r, "sheaf_runner_run", false, first, count, build, read, user);
}

sheaf_status sheaf_runner_run_fibers(sheaf_runner *r, int64_t first, int64_t count,
                                     sheaf_instance_fn build, sheaf_instance_fn read, void *user) {
  return run(r, "sheaf_runner_run_fibers", true, first, count, build, read, user);
}

sheaf_status sheaf_runner_set_fiber_stack(sheaf_runner *r, size_t bytes) {
  if (!r) return SHEAF_ERR_INVALID_ARG;
  r->fiber_stack = bytes;
  for (int t = 0; t < r->threads; t++) { /* the pools of the old size go */
    sh_fiber_sched_free(r->fibers[t]);
    r->fibers[t] = NULL;
  }
  return SHEAF_OK;
}

static void add_stats(sheaf_graph_stats *a, const sheaf_graph_stats *b) {
  a->nodes += b->nodes;
  a->batches += b->batches;
  a->flushes += b->flushes;
  a->rows_gathered += b->rows_gathered;
  a->bytes_copied += b->bytes_copied;
  a->flops += b->flops;
  a->ns_build += b->ns_build;
  a->ns_schedule += b->ns_schedule;
  a->ns_kernels += b->ns_kernels;
}

size_t sheaf_runner_kernel_stats(const sheaf_runner *r, size_t max, const char **names,
                                 uint64_t *batches, uint64_t *nodes) {
  if (!r) return 0;
  size_t n = 0, kept = 0; /* kernels, of them in the arrays */
  if (!names) { /* an upper bound: the graphs' kernels, a kernel of several graphs counted in each */
    for (int t = -1; t < r->threads; t++) {
      const sheaf_graph *g = t < 0 ? r->shared : r->per_thread[t];
      for (uint32_t i = 0; g && i < g->sigs.n; i++) n += g->sigs.at[i].batches > 0;
    }
    return n;
  }
  for (int t = -1; t < r->threads; t++) {
    const sheaf_graph *g = t < 0 ? r->shared : r->per_thread[t];
    for (uint32_t i = 0; g && i < g->sigs.n; i++) {
      const sh_sig *sg = &g->sigs.at[i];
      if (!sg->batches) continue;
      size_t j = 0; /* the same kernel from another graph: summed */
      while (j < kept && strcmp(names[j], sg->name)) j++;
      if (j < kept) {
        if (batches) batches[j] += sg->batches;
        if (nodes) nodes[j] += sg->nodes;
        continue;
      }
      if (kept < max) {
        names[kept] = sg->name;
        if (batches) batches[kept] = sg->batches;
        if (nodes) nodes[kept] = sg->nodes;
        kept++;
      }
      n++;
    }
  }
  return n;
}

void sheaf_runner_get_stats(const sheaf_runner *r, sheaf_graph_stats *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (!r) return;
  sheaf_graph_stats s;
  for (int t = 0; t < r->threads; t++)
    if (r->per_thread[t]) {
      sheaf_graph_get_stats(r->per_thread[t], &s);
      add_stats(out, &s);
    }
  if (r->shared) {
    sheaf_graph_get_stats(r->shared, &s);
    add_stats(out, &s);
  }
}

sheaf_status sheaf_runner_stats_reset(sheaf_runner *r) {
  if (!r) return SHEAF_ERR_INVALID_ARG;
  for (int t = 0; t < r->threads; t++)
    if (r->per_thread[t]) sheaf_graph_stats_reset(r->per_thread[t]);
  if (r->shared) sheaf_graph_stats_reset(r->shared);
  return SHEAF_OK;
}

void sheaf_runner_fiber_counts(const sheaf_runner *r, uint64_t *instances, uint64_t *waits,
                               uint64_t *flushes) {
  uint64_t sum[3] = {0, 0, 0};
  for (int t = 0; r && t < r->threads; t++) {
    uint64_t c[3];
    sh_fiber_sched_counts(r->fibers[t], &c[0], &c[1], &c[2]);
    for (int k = 0; k < 3; k++) sum[k] += c[k];
  }
  if (instances) *instances = sum[0];
  if (waits) *waits = sum[1];
  if (flushes) *flushes = sum[2];
}
