/*
 * bench_fiber.c — fibers (src/base/fiber.h, sheaf_runner_run_fibers):
 *   switch     ns per context switch (a resume/yield round trip is two)
 *   early exit the early-exit model of tests/test_runner_fibers.c at a
 *              realistic width: 64 instances, each h = tanh(W h + b) until
 *              max(h) passes its threshold or 24 steps, 1 thread; instances/s
 *              fiber-batched (one batch of 64) vs one instance at a time
 *              (sheaf_runner_run, batch 1: each sheaf_value a flush), batches
 *              per flush, and the share of time in context switches
 *              (switches x switch cost / run time).
 * Flags: --hidden N (256), --quick.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/fiber.h"
#include "bench_util.h"
#include "sheaf.h"

typedef struct early {
  sheaf_param W, b;
  int64_t n, hidden;
  int max_steps;
  float *x, *thr;
  int *steps;
} early;

static sheaf_status early_build(sheaf_graph *g, int64_t i, int worker, void *user) {
  early *e = user;
  sheaf_expr h = sheaf_input_vector(g, e->hidden, e->x + i * e->hidden);
  int t = 0;
  while (t < e->max_steps) {
    h = sheaf_tanh(g, sheaf_affine(g, e->W, h, e->b));
    t++;
    sheaf_value_view v;
    sheaf_status st = sheaf_value(g, sheaf_max(g, h), &v);
    if (st) return st;
    if (v.data[0] > e->thr[i]) break;
  }
  e->steps[i] = t;
  return SHEAF_OK;
}

/* Runs until min_s has passed; instances per second. */
static double run_rate(sheaf_runner *r, early *e, bool fibers, double min_s, sheaf_status *st) {
  uint64_t t0 = sheaf_time_ns(), t;
  long runs = 0;
  do {
    *st = fibers ? sheaf_runner_run_fibers(r, 0, e->n, early_build, NULL, e)
                 : sheaf_runner_run(r, 0, e->n, early_build, NULL, e);
    if (*st) return 0;
    runs++;
    t = sheaf_time_ns();
  } while ((double)(t - t0) < min_s * 1e9);
  return (double)(runs * e->n) / ((double)(t - t0) / 1e9);
}

int main(int argc, char **argv) {
  int64_t hidden = 256;
  bool quick = false;
  for (int a = 1; a < argc; a++) {
    if (!strcmp(argv[a], "--quick")) quick = true;
    else if (!strcmp(argv[a], "--hidden") && a + 1 < argc) hidden = atoll(argv[++a]);
    else {
      fprintf(stderr, "usage: bench_fiber [--hidden N] [--quick]\n");
      return 2;
    }
  }
  if (!sh_fiber_supported()) {
    printf("bench_fiber: fibers are unsupported on this architecture\n");
    return 0;
  }
  double sw = exb_fiber_switch_ns(quick ? 200000 : 2000000, 3, false);
  printf("context switch: %.1f ns (resume + yield round trip %.1f ns)\n", sw, 2 * sw);

  sheaf_ctx_options co = {0};
  co.threads = 1;
  sheaf_ctx *ctx = NULL;
  char err[256];
  if (sheaf_ctx_create(&co, &ctx, err, sizeof err)) {
    fprintf(stderr, "bench_fiber: %s\n", err);
    return 1;
  }
  sheaf_model *m = NULL;
  early e = {0};
  e.n = 64;
  e.hidden = hidden;
  e.max_steps = 24;
  int64_t ws[2] = {hidden, hidden};
  if (sheaf_model_create(ctx, &m) || sheaf_model_param(m, "W", 2, ws, SHEAF_INIT_GLOROT, &e.W) ||
      sheaf_model_param(m, "b", 1, ws, SHEAF_INIT_GLOROT, &e.b) || sheaf_model_seed(m, 3)) {
    fprintf(stderr, "bench_fiber: %s\n", sheaf_ctx_last_error(ctx));
    return 1;
  }
  e.x = malloc((size_t)(e.n * hidden) * sizeof(float));
  e.thr = malloc((size_t)e.n * sizeof(float));
  e.steps = calloc((size_t)e.n, sizeof(int));
  uint64_t s = 88172645463325252ull;
  for (int64_t k = 0; k < e.n * hidden; k++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    e.x[k] = (float)((double)(s >> 11) / (double)(1ull << 53) * 2 - 1);
  }
  for (int64_t i = 0; i < e.n; i++) e.thr[i] = 0.90f + 0.099f * (float)i / (float)e.n;

  sheaf_runner_opts one = {1, 1, SHEAF_POLICY_SHEAF, SHEAF_PARALLEL_AUTO, NULL};
  sheaf_runner_opts all = {64, 1, SHEAF_POLICY_SHEAF, SHEAF_PARALLEL_AUTO, NULL};
  sheaf_runner *r1 = NULL, *rf = NULL;
  if (sheaf_runner_create(m, &one, &r1) || sheaf_runner_create(m, &all, &rf)) {
    fprintf(stderr, "bench_fiber: %s\n", sheaf_ctx_last_error(ctx));
    return 1;
  }
  double min_s = quick ? 0.2 : 1.0;
  sheaf_status st;
  double rate1 = run_rate(r1, &e, false, min_s, &st);
  if (st) goto fail;
  int sum = 0, maxs = 0;
  for (int64_t i = 0; i < e.n; i++) sum += e.steps[i], maxs = e.steps[i] > maxs ? e.steps[i] : maxs;
  sheaf_runner_stats_reset(r1);
  sheaf_runner_stats_reset(rf);
  double ratef = run_rate(rf, &e, true, min_s, &st);
  if (st) goto fail;
  sheaf_graph_stats gs;
  sheaf_runner_get_stats(rf, &gs);
  uint64_t inst, waits, fl;
  sheaf_runner_fiber_counts(rf, &inst, &waits, &fl);
  /* each instance: resumed once to start, once per wait; each resume a round trip */
  double switches_per_inst = 2.0 * (double)(inst + waits) / (double)inst;
  double frac = switches_per_inst * sw * 1e-9 * ratef;
  printf("early-exit model, hidden %lld, 64 instances, 1 thread, steps: mean %.1f, max %d\n",
         (long long)hidden, (double)sum / (double)e.n, maxs);
  printf("  one instance at a time   %10.0f instances/s\n", rate1);
  printf("  fibers, batch 64         %10.0f instances/s  (%.2fx)\n", ratef, ratef / rate1);
  printf("  flushes per batch of 64  %10.1f   kernel batches per flush %.1f\n",
         (double)gs.flushes * 64.0 / (double)inst, (double)gs.batches / (double)gs.flushes);
  printf("  context switches         %10.1f per instance, %.3f%% of the time\n", switches_per_inst,
         100 * frac);
  sheaf_runner_free(r1);
  sheaf_runner_free(rf);
  sheaf_model_free(m);
  sheaf_ctx_free(ctx);
  free(e.x);
  free(e.thr);
  free(e.steps);
  return 0;
fail:
  fprintf(stderr, "bench_fiber: %s\n", sheaf_ctx_last_error(ctx));
  return 1;
}
