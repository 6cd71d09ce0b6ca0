/*
 * test_runner.c — sheaf_runner: every example model gives the outputs of a
 * plain graph run (batches in parallel on 2 threads, one batch at a time,
 * 1 thread, odd batch sizes, a range not starting at 0); the mode AUTO
 * picks; the first failing instance is the one reported, whichever thread
 * fails first; the callbacks' worker slots; argument errors. The names start with "runner" so that the
 * TSan build runs them (.ci/run: TEST_ARGS=pool,runner).
 */
#include <stdatomic.h>
#include <stdlib.h>

#include "harness.h"
#include "models/models.h"

#define EWT_TEST "data/ud_english_ewt/en_ewt-ud-test.conllu"

static void runner_matches(sh_net_kind kind, int64_t hidden, int32_t first, int32_t count) {
  sheaf_ctx *ctx = th_ctx();
  sh_dataset d;
  if (!CHECK_OK(ctx, sh_dataset_load(ctx, EWT_TEST, sh_net_data_kind(kind), &d))) return;
  sh_net net;
  if (!CHECK_OK(ctx, sh_net_create(ctx, kind, &d, hidden, hidden, &net))) {
    sh_dataset_free(&d);
    return;
  }
  CHECK_OK(ctx, sh_net_seed(&net, 3));
  sh_net_outputs ref;
  if (CHECK_OK(ctx, sh_net_run_fresh(&net, SHEAF_POLICY_SHEAF, 1, first, count, 7, &ref))) {
    static const struct {
      int threads;
      sheaf_parallel par;
      int64_t batch;
    } cfg[] = {{2, SHEAF_PARALLEL_BATCHES, 7}, {2, SHEAF_PARALLEL_BATCHES, 1},
               {2, SHEAF_PARALLEL_KERNELS, 7}, {1, SHEAF_PARALLEL_AUTO, 7},
               {2, SHEAF_PARALLEL_AUTO, 5}};
    for (size_t c = 0; c < SH_ARRAY_LEN(cfg); c++) {
      sheaf_runner_opts ro = {cfg[c].batch, cfg[c].threads, SHEAF_POLICY_SHEAF, cfg[c].par, NULL};
      sheaf_runner *r = NULL;
      sh_net_outputs got;
      if (!CHECK_OK(ctx, sheaf_runner_create(net.model, &ro, &r))) continue;
      if (CHECK_OK(ctx, sh_net_outputs_init(&got, &net, first, count))) {
        /* twice: the second run reuses the runner's warm graphs */
        for (int rep = 0; rep < 2; rep++) {
          memset(got.values, 0, (size_t)(got.rows * got.dim) * sizeof(float));
          if (!CHECK_OK(ctx, sh_net_run_runner(&net, r, first, count, &got))) break;
          double err = sh_max_rel_err(got.values, ref.values, ref.rows, ref.dim);
          if (!(err <= 1e-5))
            th_fail(__FILE__, __LINE__, "%s, runner config %zu, run %d: max relative error %.3g",
                    sh_net_kind_name(kind), c, rep, err);
        }
        sheaf_graph_stats st;
        sheaf_runner_get_stats(r, &st);
        CHECK(st.nodes > 0);
        CHECK_EQ_INT(st.flushes, 2 * ((count + cfg[c].batch - 1) / cfg[c].batch));
        sh_net_outputs_free(&got);
      }
      sheaf_runner_free(r);
    }
    sh_net_outputs_free(&ref);
  }
  sh_net_free(&net);
  sh_dataset_free(&d);
}

TEST(runner_treelstm_matches_graph_run) { runner_matches(SH_NET_TREELSTM, 16, 0, 61); }
TEST(runner_childsum_matches_graph_run) { runner_matches(SH_NET_CHILDSUM, 16, 100, 45); }
TEST(runner_bilstm_matches_graph_run) { runner_matches(SH_NET_BILSTM, 16, 1000, 50); }
TEST(runner_mvrnn_matches_graph_run) { runner_matches(SH_NET_MVRNN, 8, 3, 40); }

TEST(runner_auto_mode) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m = NULL;
  if (!CHECK_OK(ctx, sheaf_model_create(ctx, &m))) return;
  sheaf_runner *r = NULL;
  sheaf_runner_opts ro = {10, 2, SHEAF_POLICY_SHEAF, SHEAF_PARALLEL_AUTO, NULL};
  if (CHECK_OK(ctx, sheaf_runner_create(m, &ro, &r))) {
    CHECK_EQ_INT(sheaf_runner_mode(r, 40), SHEAF_PARALLEL_BATCHES); /* 4 batches, 2 threads */
    CHECK_EQ_INT(sheaf_runner_mode(r, 31), SHEAF_PARALLEL_BATCHES); /* 4, the last short */
    CHECK_EQ_INT(sheaf_runner_mode(r, 30), SHEAF_PARALLEL_KERNELS); /* 3: fewer than 2 a thread */
    sheaf_runner_free(r);
  }
  ro.threads = 1;
  if (CHECK_OK(ctx, sheaf_runner_create(m, &ro, &r))) {
    CHECK_EQ_INT(sheaf_runner_mode(r, 1000), SHEAF_PARALLEL_KERNELS); /* nothing to split */
    sheaf_runner_free(r);
  }
  ro.threads = 2;
  ro.parallel = SHEAF_PARALLEL_BATCHES;
  if (CHECK_OK(ctx, sheaf_runner_create(m, &ro, &r))) {
    CHECK_EQ_INT(sheaf_runner_mode(r, 5), SHEAF_PARALLEL_BATCHES); /* as asked */
    sheaf_runner_free(r);
  }
  sheaf_model_free(m);
}

/* Instances 13 and 40 build a shape mismatch; the others a small sum. */
typedef struct fail_job {
  int fail_a, fail_b;
  atomic_int built[400];
  atomic_int read_failing; /* reads of the failing batch's instances (never: it did not flush) */
  int batch;
} fail_job;

static sheaf_status fail_build(sheaf_graph *g, int64_t i, int worker, void *user) {
  fail_job *j = user;
  atomic_fetch_add(&j->built[i], 1);
  float v[8] = {1, 2, 3, 4, 5, 6, 7, (float)i};
  sheaf_expr a = sheaf_input_vector(g, 8, v);
  sheaf_expr b = sheaf_input_vector(g, i == j->fail_a || i == j->fail_b ? 4 : 8, v);
  sheaf_add(g, sheaf_tanh(g, a), b);
  return sheaf_graph_status(g);
}

static sheaf_status fail_read(sheaf_graph *g, int64_t i, int worker, void *user) {
  fail_job *j = user;
  (void)g;
  if (i / j->batch == j->fail_a / j->batch) atomic_fetch_add(&j->read_failing, 1);
  return SHEAF_OK;
}

TEST(runner_reports_first_failing_instance) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m = NULL;
  if (!CHECK_OK(ctx, sheaf_model_create(ctx, &m))) return;
  static const sheaf_parallel modes[] = {SHEAF_PARALLEL_BATCHES, SHEAF_PARALLEL_KERNELS};
  for (int k = 0; k < 2; k++)
    for (int rep = 0; rep < 20; rep++) { /* whichever thread fails first */
      sheaf_runner_opts ro = {4, 2, SHEAF_POLICY_SHEAF, modes[k], NULL};
      sheaf_runner *r = NULL;
      if (!CHECK_OK(ctx, sheaf_runner_create(m, &ro, &r))) break;
      fail_job *j = calloc(1, sizeof *j);
      j->fail_a = 13;
      j->fail_b = rep % 2 ? 40 : 17; /* a later batch, or the next one */
      j->batch = 4;
      sheaf_status st = sheaf_runner_run(r, 0, 400, fail_build, fail_read, j);
      CHECK_EQ_INT(st, SHEAF_ERR_SHAPE);
      CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "instance 13: sheaf_add: shapes [8] and [4] differ");
      for (int i = 0; i < 13; i++) CHECK_EQ_INT(atomic_load(&j->built[i]), 1);
      CHECK_EQ_INT(atomic_load(&j->read_failing), 0);
      if (modes[k] == SHEAF_PARALLEL_KERNELS) /* one batch at a time: nothing after it */
        for (int i = 16; i < 400; i++) CHECK_EQ_INT(atomic_load(&j->built[i]), 0);
      free(j);
      sheaf_runner_free(r);
      sheaf_ctx_clear_error(ctx);
    }
  sheaf_model_free(m);
}

/* Which worker slot built and read each instance, and whether two calls
 * ever held one slot at once. */
typedef struct slot_job {
  int threads;
  atomic_int busy[4];
  atomic_int overlap, out_of_range;
  int built_by[200], read_by[200];
} slot_job;

static bool slot_enter(slot_job *j, int worker) {
  if (worker < 0 || worker >= j->threads) {
    atomic_fetch_add(&j->out_of_range, 1);
    return false;
  }
  if (atomic_exchange(&j->busy[worker], 1)) atomic_fetch_add(&j->overlap, 1);
  return true;
}

static sheaf_status slot_build(sheaf_graph *g, int64_t i, int worker, void *user) {
  slot_job *j = user;
  if (!slot_enter(j, worker)) return SHEAF_ERR_INTERNAL;
  j->built_by[i] = worker;
  float v = (float)i;
  sheaf_tanh(g, sheaf_input_vector(g, 1, &v));
  atomic_store(&j->busy[worker], 0);
  return sheaf_graph_status(g);
}

static sheaf_status slot_read(sheaf_graph *g, int64_t i, int worker, void *user) {
  slot_job *j = user;
  (void)g;
  if (!slot_enter(j, worker)) return SHEAF_ERR_INTERNAL;
  j->read_by[i] = worker;
  atomic_store(&j->busy[worker], 0);
  return SHEAF_OK;
}

/* Callbacks get the slot of the thread running their batch: in range, the
 * same for a batch's builds and reads, never held by two calls at once;
 * slot 0 only when batches run one at a time. */
TEST(runner_worker_slots) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m = NULL;
  if (!CHECK_OK(ctx, sheaf_model_create(ctx, &m))) return;
  CHECK_EQ_INT(sheaf_runner_threads(NULL), 1);
  static const sheaf_parallel modes[] = {SHEAF_PARALLEL_BATCHES, SHEAF_PARALLEL_KERNELS};
  for (int k = 0; k < 2; k++) {
    sheaf_runner_opts ro = {4, 2, SHEAF_POLICY_SHEAF, modes[k], NULL};
    sheaf_runner *r = NULL;
    if (!CHECK_OK(ctx, sheaf_runner_create(m, &ro, &r))) break;
    CHECK_EQ_INT(sheaf_runner_threads(r), 2);
    slot_job *j = calloc(1, sizeof *j);
    j->threads = sheaf_runner_threads(r);
    CHECK_OK(ctx, sheaf_runner_run(r, 0, 200, slot_build, slot_read, j));
    CHECK_EQ_INT(atomic_load(&j->out_of_range), 0);
    CHECK_EQ_INT(atomic_load(&j->overlap), 0);
    for (int i = 0; i < 200; i++) {
      CHECK_EQ_INT(j->read_by[i], j->built_by[i]);
      CHECK_EQ_INT(j->built_by[i], j->built_by[i / 4 * 4]); /* one slot per batch */
      if (modes[k] == SHEAF_PARALLEL_KERNELS) CHECK_EQ_INT(j->built_by[i], 0);
    }
    free(j);
    sheaf_runner_free(r);
  }
  sheaf_model_free(m);
}

static sheaf_status read_fails(sheaf_graph *g, int64_t i, int worker, void *user) {
  (void)g;
  (void)user;
  return i == 9 ? SHEAF_ERR_NOT_FOUND : SHEAF_OK;
}
static sheaf_status tiny_build(sheaf_graph *g, int64_t i, int worker, void *user) {
  (void)user;
  float v = (float)i;
  sheaf_tanh(g, sheaf_input_vector(g, 1, &v));
  return sheaf_graph_status(g);
}

TEST(runner_bad_arguments_and_callback_errors) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m = NULL;
  if (!CHECK_OK(ctx, sheaf_model_create(ctx, &m))) return;
  CHECK_EQ_INT(sheaf_runner_create(m, NULL, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_runner_create: out is NULL");
  sheaf_runner *r = NULL;
  sheaf_runner_opts bad = {8, 2, (sheaf_policy)9, SHEAF_PARALLEL_AUTO, NULL};
  CHECK_EQ_INT(sheaf_runner_create(m, &bad, &r), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "unknown policy 9");
  CHECK(r == NULL);
  bad.policy = SHEAF_POLICY_SHEAF;
  bad.parallel = (sheaf_parallel)7;
  CHECK_EQ_INT(sheaf_runner_create(m, &bad, &r), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "unknown parallel mode 7");
  if (CHECK_OK(ctx, sheaf_runner_create(m, NULL, &r))) {
    CHECK_EQ_INT(sheaf_runner_run(r, 0, 10, NULL, NULL, NULL), SHEAF_ERR_INVALID_ARG);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "build is NULL");
    CHECK_EQ_INT(sheaf_runner_run(r, -1, 10, tiny_build, NULL, NULL), SHEAF_ERR_INVALID_ARG);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "out of range");
    CHECK_OK(ctx, sheaf_runner_run(r, 0, 0, tiny_build, NULL, NULL)); /* nothing to do */
    CHECK_EQ_INT(sheaf_runner_run(r, 0, 300, tiny_build, read_fails, NULL), SHEAF_ERR_NOT_FOUND);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "instance 9: read returned not found");
    CHECK_OK(ctx, sheaf_runner_run(r, 0, 300, tiny_build, NULL, NULL)); /* usable again */
    sheaf_runner_free(r);
  }
  sheaf_runner_free(NULL);
  sheaf_ctx_clear_error(ctx);
  sheaf_model_free(m);
}
