/*
 * fiber_run.h — a runner's batch with each instance on a fiber
 * (sheaf_runner_opts.fibers; fiber_run.c): an instance's sheaf_value on a
 * node not yet computed suspends it, and when every live instance of the
 * batch is suspended (or done) the graph is flushed once, batched across
 * all of them, and they resume.
 */
#ifndef SH_RUNTIME_FIBER_RUN_H
#define SH_RUNTIME_FIBER_RUN_H

#include <stdint.h>

#include "sheaf.h"
#include "sheaf_graph.h"

/* A worker's scheduler: its stack pool and counters, kept across batches. */
typedef struct sh_fiber_sched sh_fiber_sched;

/* stack: bytes per fiber stack (0: SH_FIBER_STACK). NULL when out of memory. */
sh_fiber_sched *sh_fiber_sched_create(sheaf_ctx *ctx, size_t stack);
void sh_fiber_sched_free(sh_fiber_sched *s);

/* Runs build(g, i, worker, user) for i in [i0, i1), each on a fiber, until
 * every one has returned; what they leave pending is flushed by the
 * caller. On failure returns the status and sets *fail_instance to the
 * instance whose failure was met first (its error is g's, or the status
 * the callback returned); the other live instances are resumed with
 * sheaf_value failing, so that they return and free what they hold. */
sheaf_status sh_fiber_batch(sh_fiber_sched *s, sheaf_graph *g, int64_t i0, int64_t i1, int worker,
                            sheaf_instance_fn build, void *user, int64_t *fail_instance);

/* Counters since creation: instances run, waits (suspensions), flushes the
 * scheduler made. */
void sh_fiber_sched_counts(const sh_fiber_sched *s, uint64_t *instances, uint64_t *waits,
                           uint64_t *flushes);

/* sheaf_value's hook for a node not yet computed: on a fiber of a batch of
 * `g`, suspends until the scheduler has flushed g and returns the flush's
 * status; anywhere else flushes g itself. */
sheaf_status sh_fiber_wait(sheaf_graph *g);

#endif
