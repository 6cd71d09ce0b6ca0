/*
 * test_runner_fibers.c — sheaf_runner_run_fibers on an "early exit" model:
 * each instance computes h = tanh(W h + b) until max(h), read mid-way with
 * sheaf_value, passes its threshold or after max_steps. Fiber-batched runs
 * (every policy, 1 and 2 threads, one batch and several) give the outputs
 * and step counts of one-instance-at-a-time runs, with one flush per step
 * instead of one per instance-step; a build that fails (its status, an
 * error on the graph, its stack room exhausted) is reported with its
 * instance; builds that never wait flush as sheaf_runner_run does; one that
 * waits 500 times. The names start with "runner_fibers" (TSan: "runner").
 */
#include <stdlib.h>

#include "base/fiber.h"
#include "base/stack.h"
#include "harness.h"

enum { H = 16 };

typedef struct early {
  sheaf_param W, b;
  int64_t n;
  int max_steps;
  float *x;      /* n x H inputs */
  float *thr;    /* per-instance threshold on max(h) */
  sheaf_expr *h; /* per-instance final h */
  float *out;    /* n x H */
  int *steps;
  /* failure injection */
  int64_t fail_instance;
  int fail_after; /* waits before failing */
  int fail_how;   /* 0 graph error, 1 status only, 2 stack recursion */
  int64_t long_instance; /* waits max_steps times whatever its values */
} early;

static int recurse(sheaf_graph *g, int level) {
  volatile char frame[512];
  frame[0] = (char)level;
  if (sh_stack_room() < (16 << 10)) {
    sheaf_graph_fail(g, SHEAF_ERR_UNSUPPORTED, "stack room exhausted at depth %d", level);
    return -1;
  }
  return recurse(g, level + 1) + frame[0] - (char)level;
}

static sheaf_status early_build(sheaf_graph *g, int64_t i, int worker, void *user) {
  early *e = user;
  sheaf_expr h = sheaf_input_vector(g, H, e->x + i * H);
  int t = 0;
  while (t < e->max_steps) {
    h = sheaf_tanh(g, sheaf_affine(g, e->W, h, e->b));
    t++;
    sheaf_value_view v;
    sheaf_status st = sheaf_value(g, sheaf_max(g, h), &v);
    if (st) return st;
    if (i == e->fail_instance && t == e->fail_after) {
      if (e->fail_how == 0) return sheaf_graph_fail(g, SHEAF_ERR_SHAPE, "instance check failed at step %d", t);
      if (e->fail_how == 1) return SHEAF_ERR_NOT_FOUND;
      if (recurse(g, 0) < 0) return sheaf_graph_status(g);
    }
    if (v.data[0] > e->thr[i] && i != e->long_instance) break;
  }
  e->h[i] = h;
  e->steps[i] = t;
  return SHEAF_OK;
}

static sheaf_status early_read(sheaf_graph *g, int64_t i, int worker, void *user) {
  early *e = user;
  sheaf_value_view v;
  sheaf_status st = sheaf_value(g, e->h[i], &v);
  if (st) return st;
  memcpy(e->out + i * H, v.data, H * sizeof(float));
  return SHEAF_OK;
}

static bool early_init(early *e, sheaf_ctx *ctx, sheaf_model *m, int64_t n, int max_steps) {
  memset(e, 0, sizeof *e);
  e->n = n;
  e->max_steps = max_steps;
  e->fail_instance = e->long_instance = -1;
  e->W = th_param(ctx, m, "W", 2, H, H);
  e->b = th_param(ctx, m, "b", 1, H, 0);
  uint64_t seed = 42;
  e->x = th_frand_fill(&seed, n * H);
  e->thr = th_frand_fill(&seed, n);
  for (int64_t i = 0; i < n; i++) e->thr[i] = 0.3f + 0.6f * (e->thr[i] + 1) / 2; /* [0.3, 0.9) */
  e->h = calloc((size_t)n, sizeof *e->h);
  e->out = calloc((size_t)(n * H), sizeof *e->out);
  e->steps = calloc((size_t)n, sizeof *e->steps);
  return e->h && e->out && e->steps;
}

static void early_free(early *e) {
  free(e->x);
  free(e->thr);
  free(e->h);
  free(e->out);
  free(e->steps);
}

static sheaf_status run_cfg(sheaf_model *m, early *e, sheaf_policy pol, int threads, int64_t batch,
                            bool fibers, sheaf_graph_stats *st, uint64_t *waits, uint64_t *fflushes) {
  sheaf_runner_opts ro = {batch, threads, pol, SHEAF_PARALLEL_AUTO, NULL};
  sheaf_runner *r = NULL;
  sheaf_status s = sheaf_runner_create(m, &ro, &r);
  if (s) return s;
  memset(e->out, 0, (size_t)(e->n * H) * sizeof(float));
  memset(e->steps, 0, (size_t)e->n * sizeof(int));
  s = fibers ? sheaf_runner_run_fibers(r, 0, e->n, early_build, early_read, e)
             : sheaf_runner_run(r, 0, e->n, early_build, early_read, e);
  if (st) sheaf_runner_get_stats(r, st);
  sheaf_runner_fiber_counts(r, NULL, waits, fflushes);
  sheaf_runner_free(r);
  return s;
}

TEST(runner_fibers_early_exit_matches_one_at_a_time) {
  if (!sh_fiber_supported()) return;
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m = NULL;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  enum { N = 64, STEPS = 12 };
  early e;
  REQUIRE(early_init(&e, ctx, m, N, STEPS));
  /* the reference: one instance per graph, each sheaf_value a flush */
  sheaf_graph_stats ref_st;
  float *ref = malloc(N * H * sizeof(float));
  int ref_steps[N];
  if (CHECK(ref) && CHECK_OK(ctx, run_cfg(m, &e, SHEAF_POLICY_SHEAF, 1, 1, false, &ref_st, NULL, NULL))) {
    memcpy(ref, e.out, N * H * sizeof(float));
    memcpy(ref_steps, e.steps, sizeof ref_steps);
    int max_steps = 0, sum_steps = 0, hist[STEPS + 1] = {0};
    for (int i = 0; i < N; i++) {
      max_steps = ref_steps[i] > max_steps ? ref_steps[i] : max_steps;
      sum_steps += ref_steps[i];
      hist[ref_steps[i]]++;
    }
    CHECK_EQ_INT(ref_st.flushes, sum_steps);
    int distinct = 0;
    for (int k = 0; k <= STEPS; k++) distinct += hist[k] > 0;
    CHECK(distinct >= 3); /* the instances exit at different steps */
    static const sheaf_policy pols[] = {SHEAF_POLICY_SHEAF, SHEAF_POLICY_DEPTH, SHEAF_POLICY_AGENDA,
                                        SHEAF_POLICY_NONE};
    static const struct {
      int threads;
      int64_t batch;
    } cfg[] = {{1, 64}, {2, 64}, {1, 7}, {2, 7}, {2, 1}};
    for (size_t p = 0; p < sizeof pols / sizeof pols[0]; p++)
      for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        sheaf_graph_stats st;
        uint64_t waits = 0, fflushes = 0;
        if (!CHECK_OK(ctx, run_cfg(m, &e, pols[p], cfg[c].threads, cfg[c].batch, true, &st, &waits,
                                   &fflushes)))
          continue;
        double err = 0;
        int step_diff = 0;
        for (int i = 0; i < N; i++) {
          step_diff += e.steps[i] != ref_steps[i];
          for (int k = 0; k < H; k++) {
            double d = fabs((double)e.out[i * H + k] - ref[i * H + k]);
            err = d > err ? d : err;
          }
        }
        if (!(err <= 1e-5) || step_diff)
          th_fail(__FILE__, __LINE__, "policy %d, threads %d, batch %lld: max error %.3g, %d step counts differ",
                  (int)pols[p], cfg[c].threads, (long long)cfg[c].batch, err, step_diff);
        if (pols[p] == SHEAF_POLICY_NONE) continue; /* eager: nothing ever waits */
        CHECK_EQ_INT(waits, sum_steps);
        if (cfg[c].batch == 64) { /* one flush per step of the longest instance */
          CHECK_EQ_INT(fflushes, max_steps);
          CHECK_EQ_INT(st.flushes, max_steps);
          CHECK(st.batches * 4 < ref_st.batches); /* batched across the instances */
        }
      }
  }
  free(ref);
  early_free(&e);
  sheaf_model_free(m);
}

static void expect_failure(int how, sheaf_status want, const char *msg) {
  if (!sh_fiber_supported()) return;
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m = NULL;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  early e;
  REQUIRE(early_init(&e, ctx, m, 40, 10));
  e.fail_instance = 23;
  e.fail_after = 2;
  e.fail_how = how;
  e.long_instance = 5; /* others still wait when 23 fails */
  for (int threads = 1; threads <= 2; threads++) {
    sheaf_runner_opts ro = {threads == 1 ? 64 : 8, threads, SHEAF_POLICY_SHEAF, SHEAF_PARALLEL_AUTO, NULL};
    sheaf_runner *r = NULL;
    if (!CHECK_OK(ctx, sheaf_runner_create(m, &ro, &r))) break;
    if (how == 2) CHECK_OK(ctx, sheaf_runner_set_fiber_stack(r, 64 << 10));
    CHECK_STATUS(ctx, sheaf_runner_run_fibers(r, 0, e.n, early_build, early_read, &e), want);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "instance 23: ");
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), msg);
    /* the runner still works afterwards */
    e.fail_instance = -1;
    CHECK_OK(ctx, sheaf_runner_run_fibers(r, 0, e.n, early_build, early_read, &e));
    CHECK_EQ_INT(e.steps[5], 10);
    e.fail_instance = 23;
    sheaf_runner_free(r);
  }
  early_free(&e);
  sheaf_model_free(m);
}

TEST(runner_fibers_graph_error_names_instance) {
  expect_failure(0, SHEAF_ERR_SHAPE, "instance check failed at step 2");
}
TEST(runner_fibers_status_names_instance) { expect_failure(1, SHEAF_ERR_NOT_FOUND, "build returned"); }
TEST(runner_fibers_stack_room_names_instance) {
  expect_failure(2, SHEAF_ERR_UNSUPPORTED, "stack room exhausted at depth");
}

static sheaf_status never_waits(sheaf_graph *g, int64_t i, int worker, void *user) {
  early *e = user;
  sheaf_expr h = sheaf_input_vector(g, H, e->x + i * H);
  for (int t = 0; t < 3; t++) h = sheaf_tanh(g, sheaf_affine(g, e->W, h, e->b));
  e->h[i] = h;
  e->steps[i] = 3;
  return SHEAF_OK;
}

TEST(runner_fibers_never_wait_costs_no_flush) {
  if (!sh_fiber_supported()) return;
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m = NULL;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  early e;
  REQUIRE(early_init(&e, ctx, m, 50, 3));
  sheaf_runner_opts ro = {16, 1, SHEAF_POLICY_SHEAF, SHEAF_PARALLEL_AUTO, NULL};
  sheaf_runner *r = NULL;
  if (CHECK_OK(ctx, sheaf_runner_create(m, &ro, &r))) {
    CHECK_OK(ctx, sheaf_runner_run(r, 0, e.n, never_waits, early_read, &e));
    float *ref = malloc(50 * H * sizeof(float));
    if (CHECK(ref)) {
      memcpy(ref, e.out, 50 * H * sizeof(float));
      sheaf_graph_stats a, b;
      sheaf_runner_get_stats(r, &a);
      CHECK_OK(ctx, sheaf_runner_run_fibers(r, 0, e.n, never_waits, early_read, &e));
      sheaf_runner_get_stats(r, &b);
      CHECK_EQ_INT(b.flushes - a.flushes, a.flushes); /* 4 batches: 4 flushes either way */
      CHECK_EQ_INT(a.flushes, 4);
      uint64_t inst = 0, waits = 1;
      sheaf_runner_fiber_counts(r, &inst, &waits, NULL);
      CHECK_EQ_INT(inst, 50);
      CHECK_EQ_INT(waits, 0);
      CHECK(memcmp(ref, e.out, 50 * H * sizeof(float)) == 0);
      free(ref);
    }
    sheaf_runner_free(r);
  }
  early_free(&e);
  sheaf_model_free(m);
}

TEST(runner_fibers_one_waits_many_times) {
  if (!sh_fiber_supported()) return;
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m = NULL;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  early e;
  REQUIRE(early_init(&e, ctx, m, 20, 500));
  e.long_instance = 11;
  sheaf_graph_stats st;
  uint64_t waits = 0, fflushes = 0;
  if (CHECK_OK(ctx, run_cfg(m, &e, SHEAF_POLICY_SHEAF, 1, 64, true, &st, &waits, &fflushes))) {
    CHECK_EQ_INT(e.steps[11], 500);
    CHECK_EQ_INT(fflushes, 500);
    int64_t sum = 0;
    for (int i = 0; i < 20; i++) sum += e.steps[i];
    CHECK_EQ_INT(waits, sum);
    float last[H];
    memcpy(last, e.out + 11 * H, sizeof last);
    e.fail_instance = -1;
    /* the same instance alone, without fibers */
    if (CHECK_OK(ctx, run_cfg(m, &e, SHEAF_POLICY_SHEAF, 1, 1, false, NULL, NULL, NULL)))
      for (int k = 0; k < H; k++) CHECK_NEAR(e.out[11 * H + k], last[k], 1e-5);
  }
  early_free(&e);
  sheaf_model_free(m);
}
