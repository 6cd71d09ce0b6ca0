/*
 * fiber_run.c — a runner's batch with each instance on a fiber (see
 * fiber_run.h). Instances start in order on the worker thread; one that
 * returns without waiting gives its stack back at once (the next instance
 * reuses it: an instance that never waits costs two switches, no flush).
 * One that waits stays suspended on its stack. When every live instance is
 * suspended, the graph is flushed once and they resume in instance order,
 * so the nodes are built in the same order in every run.
 */
#include "runtime/fiber_run.h"

#include "base/fiber.h"
#include "runtime/runtime.h"

typedef struct inst {
  sh_fiber f; /* first: the running fiber is the instance */
  struct sh_fiber_sched *sched;
  int64_t i;
  sheaf_status st;
  struct inst *next_free;
} inst;

struct sh_fiber_sched {
  sheaf_ctx *ctx;
  sh_fiber_stacks stacks;
  inst *free_insts;
  inst **blocked, **run; /* suspended instances; those resumed this round */
  uint32_t n_blocked, cap_blocked, cap_run;
  /* the batch in progress */
  sheaf_graph *g;
  sheaf_instance_fn build;
  void *user;
  int worker;
  sheaf_status flush_st;  /* of the last flush, given to the waiters */
  int64_t stop_instance;  /* a failure was met: waits fail (INT64_MAX: none) */
  uint64_t n_instances, n_waits, n_flushes;
};

/* The scheduler whose batch runs on this thread (NULL: none). */
static _Thread_local sh_fiber_sched *tl_sched;

sh_fiber_sched *sh_fiber_sched_create(sheaf_ctx *ctx, size_t stack) {
  sh_fiber_sched *s = sh_calloc(ctx, 1, sizeof *s);
  if (!s) return NULL;
  s->ctx = ctx;
  sh_fiber_stacks_init(&s->stacks, stack);
  return s;
}

void sh_fiber_sched_free(sh_fiber_sched *s) {
  if (!s) return;
  while (s->free_insts) {
    inst *n = s->free_insts->next_free;
    sh_free(s->ctx, s->free_insts, sizeof *s->free_insts);
    s->free_insts = n;
  }
  sh_fiber_stacks_free(&s->stacks);
  sh_free(s->ctx, s->blocked, (size_t)s->cap_blocked * sizeof *s->blocked);
  sh_free(s->ctx, s->run, (size_t)s->cap_run * sizeof *s->run);
  sh_free(s->ctx, s, sizeof *s);
}

void sh_fiber_sched_counts(const sh_fiber_sched *s, uint64_t *instances, uint64_t *waits,
                           uint64_t *flushes) {
  if (instances) *instances = s ? s->n_instances : 0;
  if (waits) *waits = s ? s->n_waits : 0;
  if (flushes) *flushes = s ? s->n_flushes : 0;
}

static void inst_main(void *arg) {
  inst *in = arg;
  sh_fiber_sched *s = in->sched;
  sheaf_status st = s->build(s->g, in->i, s->worker, s->user);
  if (!st) st = sheaf_graph_status(s->g);
  in->st = st;
}

sheaf_status sh_fiber_wait(sheaf_graph *g) {
  sh_fiber_sched *s = tl_sched;
  sh_fiber *f = sh_fiber_current();
  if (!s || s->g != g || !f || f->fn != inst_main || ((inst *)f)->sched != s)
    return sheaf_graph_flush(g);
  inst *in = (inst *)f;
  if (s->stop_instance != INT64_MAX) /* the run stops: no more waiting */
    return sheaf_graph_status(g) ? sheaf_graph_flush(g)
                                 : sh_fail(g->ctx, SHEAF_ERR_INVALID_ARG,
                                           "sheaf_value: the run stopped (instance %lld failed)",
                                           (long long)s->stop_instance);
  if (s->n_blocked == s->cap_blocked &&
      sh_grow(s->ctx, (void **)&s->blocked, &s->cap_blocked, s->n_blocked + 1, sizeof *s->blocked))
    return sheaf_graph_flush(g); /* cannot queue it: flush alone (correct, less batched) */
  s->blocked[s->n_blocked++] = in;
  s->n_waits++;
  sh_fiber_yield();
  if (s->stop_instance != INT64_MAX && !s->flush_st)
    return sh_fail(g->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_value: the run stopped (instance %lld failed)",
                   (long long)s->stop_instance);
  return s->flush_st ? sheaf_graph_flush(g) /* the sticky error, as the context's last */
                     : SHEAF_OK;
}

/* The lines of `in` a resume reads and writes. */
static inline void prefetch_inst(const inst *in) {
  __builtin_prefetch(in, 1, 3);
  __builtin_prefetch((const char *)in + 64, 1, 3);
}

/* Resumes `in` (new or suspended) until it waits or returns; a returned
 * instance is freed, a failure recorded. */
static void step(sh_fiber_sched *s, inst *in, sheaf_status *st, int64_t *fail) {
  sh_fiber_resume(&in->f);
  if (!in->f.done) return; /* it waits: in s->blocked */
  if (in->st && s->stop_instance == INT64_MAX) {
    s->stop_instance = in->i;
    *st = in->st;
    *fail = in->i;
  }
  sh_fiber_release(&in->f, &s->stacks);
  in->next_free = s->free_insts;
  s->free_insts = in;
}

sheaf_status sh_fiber_batch(sh_fiber_sched *s, sheaf_graph *g, int64_t i0, int64_t i1, int worker,
                            sheaf_instance_fn build, void *user, int64_t *fail_instance) {
  *fail_instance = i0;
  if (!sh_fiber_supported())
    return sh_graph_fail(g, SHEAF_ERR_UNSUPPORTED,
                         "sheaf_runner: fibers are unsupported on this architecture "
                         "(x86-64 and AArch64 only)");
  sh_fiber_sched *outer = tl_sched; /* a runner run inside another's fiber */
  tl_sched = s;
  s->g = g;
  s->build = build;
  s->user = user;
  s->worker = worker;
  s->flush_st = SHEAF_OK;
  s->stop_instance = INT64_MAX;
  s->n_blocked = 0;
  sheaf_status st = SHEAF_OK;
  int64_t fail = i0;
  for (int64_t i = i0; i < i1 && s->stop_instance == INT64_MAX; i++) {
    inst *in = s->free_insts;
    if (in)
      s->free_insts = in->next_free;
    else if (!(in = sh_calloc(s->ctx, 1, sizeof *in))) {
      st = sh_graph_fail(g, SHEAF_ERR_NOMEM, "out of memory: %zu bytes", sizeof *in);
      s->stop_instance = fail = i;
      break;
    }
    in->sched = s;
    in->i = i;
    in->st = SHEAF_OK;
    if (!sh_fiber_init(&in->f, &s->stacks, inst_main, in)) {
      in->next_free = s->free_insts;
      s->free_insts = in;
      st = sh_graph_fail(g, SHEAF_ERR_NOMEM,
                         "fibers: cannot map a stack of %zu bytes (%u instances waiting)",
                         s->stacks.size, (unsigned)s->n_blocked);
      s->stop_instance = fail = i;
      break;
    }
    s->n_instances++;
    step(s, in, &st, &fail);
  }
  while (s->n_blocked) { /* every live instance waits: one flush for all */
    if (s->stop_instance == INT64_MAX) {
      s->flush_st = sheaf_graph_flush(g);
      s->n_flushes++;
      if (s->flush_st) {
        st = s->flush_st;
        s->stop_instance = fail = s->blocked[0]->i;
      }
    }
    inst **run = s->blocked; /* this round's; the waits of the round go to the other array */
    uint32_t n = s->n_blocked;
    s->blocked = s->run;
    uint32_t cap = s->cap_blocked;
    s->cap_blocked = s->cap_run;
    s->cap_run = cap;
    s->run = run;
    s->n_blocked = 0;
    /* After the flush the instances' structs and stack tops are cold:
     * fetch them ahead (struct two resumes ahead, stack one ahead, so its
     * saved stack pointer is already in cache), overlapping the misses
     * with the running instance's graph building. */
    if (n) prefetch_inst(run[0]);
    if (n > 1) prefetch_inst(run[1]);
    if (n) sh_fiber_prefetch(&run[0]->f);
    for (uint32_t k = 0; k < n; k++) {
      if (k + 2 < n) prefetch_inst(run[k + 2]);
      if (k + 1 < n) sh_fiber_prefetch(&run[k + 1]->f);
      step(s, run[k], &st, &fail);
    }
  }
  s->g = NULL;
  tl_sched = outer;
  *fail_instance = fail;
  return st;
}
