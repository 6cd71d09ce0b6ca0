/*
 * test_train_shards.c — data-parallel training within one update
 * (src/train/shards.c, sheaf_trainer's split instances): a small BiLSTM
 * tagger whose batch is split into shards, each built and differentiated
 * on its own thread with its own graph and gradient shard, then reduced
 * in shard order. Checked against one graph of the whole batch on one
 * thread (gradients and SGD weights within 1e-5 of scale, the lookup
 * table's row marks identical), bitwise across two runs, through the
 * trainer (shards of one instance, a batch smaller than the threads, a
 * shard without losses), errors naming the shard and the instance, and
 * every allocation of an update failing in turn.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "runtime/runtime.h"
#include "sheaf_train.h"
#include "tiny_bilstm.h"

enum { SV = 53, SE = 8, SH = 16, SC = 5, SN = 24, SMAXN = 9, SMAXT = 4 };

typedef tb_model ss_model;

typedef struct ss_data {
  int len[SN], word[SN][SMAXN], tag[SN][SMAXN];
} ss_data;

static void ss_data_make(ss_data *d) {
  uint64_t s = 0x51ed2701u;
  for (int i = 0; i < SN; i++) {
    d->len[i] = 2 + (int)((th_frand(&s) + 1.0f) * 0.5f * (SMAXN - 2)) % (SMAXN - 1);
    for (int t = 0; t < d->len[i]; t++) {
      d->word[i][t] = (int)((th_frand(&s) + 1.0f) * 0.5f * SV) % SV;
      d->tag[i][t] = (int)((th_frand(&s) + 1.0f) * 0.5f * SC) % SC;
    }
  }
}

static bool ss_create(sheaf_ctx *ctx, ss_model *md) { return tb_create(ctx, md, SV, SE, SH, SC, 11); }

/* Sentence i's token losses appended to loss[*k ..]. */
static sheaf_status ss_sentence(sheaf_graph *g, const ss_model *md, const ss_data *d, int i, sheaf_expr *loss,
                                int *k) {
  return tb_sentence(g, md, d->len[i], d->word[i], d->tag[i], loss, k);
}

/* Every parameter's values or gradient buffers (none: zeros), in order (malloc'd). */
static float *ss_collect(const ss_model *md, bool grads, size_t *n) {
  return tb_collect(md, grads ? TB_GRAD_BUFFERS : TB_VALUES, n);
}

/* ----------------------------------------------- the lower-level API */

typedef struct ss_run {
  const ss_model *md;
  const ss_data *d;
  sheaf_graph *g[SMAXT];
  sheaf_expr loss[SMAXT][SN * SMAXN];
  int k[SMAXT];
  float scale;
} ss_run;

static sheaf_status ss_shard(int s, int n, void *user) {
  ss_run *r = user;
  r->k[s] = 0;
  sheaf_status st = sheaf_graph_reset(r->g[s]);
  for (int i = SN * s / n; i < SN * (s + 1) / n && !st; i++) st = ss_sentence(r->g[s], r->md, r->d, i, r->loss[s], &r->k[s]);
  sheaf_backward_opts bo = {r->scale, 0, NULL, NULL};
  if (!st) st = sheaf_backward(r->g[s], r->k[s], r->loss[s], &bo);
  return st;
}

/* `updates` updates (0: one backward, no step; `adam`: Adam with lazy
 * rows, else SGD with momentum) on a context of `threads`, over `shards`
 * shards (0: one graph of the whole batch); the weights (or the
 * gradients) after them, and the table's row marks (rows: SV bytes, may
 * be NULL). */
static float *ss_train(int threads, int shards, int updates, bool adam, size_t *n, uint8_t *rows) {
  *n = 0;
  sheaf_ctx_options co = {0};
  co.threads = threads;
  sheaf_ctx *ctx = NULL;
  if (!CHECK(sheaf_ctx_create(&co, &ctx, NULL, 0) == SHEAF_OK)) return NULL;
  ss_model md;
  static ss_data d;
  ss_data_make(&d);
  static ss_run r;
  memset(&r, 0, sizeof r);
  r.md = &md;
  r.d = &d;
  int tokens = 0;
  for (int i = 0; i < SN; i++) tokens += d.len[i];
  r.scale = 1.0f / (float)tokens;
  sheaf_optimizer *opt = NULL;
  float *w = NULL;
  sheaf_optimizer_opts oo = {adam ? SHEAF_OPTIM_ADAM : SHEAF_OPTIM_SGD, adam ? 1e-2f : 0.5f, adam ? 0 : 0.9f, 0, 0, 0,
                             0, 0};
  if (!ss_create(ctx, &md) || !CHECK_OK(ctx, sheaf_optimizer_create(md.m, &oo, &opt)) ||
      !CHECK_OK(ctx, sheaf_optimizer_lazy_rows(opt, adam)))
    goto done;
  for (int s = 0; s < (shards ? shards : 1); s++) {
    sheaf_graph_opts go = {SHEAF_POLICY_SHEAF, shards ? 1 : 0, NULL};
    if (!CHECK_OK(ctx, sheaf_graph_create(md.m, &go, &r.g[s])) || !CHECK_OK(ctx, sheaf_graph_grad_shard(r.g[s], s)))
      goto done;
  }
  for (int step = 0; step < (updates ? updates : 1); step++) {
    if (!CHECK_OK(ctx, sheaf_model_zero_grad(md.m))) goto done;
    if (shards) {
      if (!CHECK_OK(ctx, sheaf_run_shards(ctx, shards, ss_shard, &r)) || !CHECK_OK(ctx, sheaf_model_reduce_grads(md.m)))
        goto done;
    } else if (!CHECK_OK(ctx, ss_shard(0, 1, &r))) {
      goto done;
    }
    if (updates && !CHECK_OK(ctx, sheaf_optimizer_step(opt, NULL))) goto done;
  }
  if (rows) {
    const sh_param *q = &md.m->params[md.p[0].id - 1];
    CHECK(!q->grad_whole && q->grad_rows);
    if (q->grad_rows) memcpy(rows, q->grad_rows, SV);
  }
  w = ss_collect(&md, updates == 0, n);
done:
  sheaf_optimizer_free(opt);
  for (int s = 0; s < SMAXT; s++) sheaf_graph_free(r.g[s]);
  sheaf_model_free(md.m);
  sheaf_ctx_free(ctx);
  return w;
}

static double ss_worst(const float *a, const float *b, size_t n, double *scale) {
  double worst = 0;
  *scale = 0;
  for (size_t i = 0; i < n; i++) {
    *scale = fmax(*scale, fabs((double)b[i]));
    worst = fmax(worst, fabs((double)a[i] - b[i]));
  }
  return worst;
}

TEST(data_parallel_gradients_equal_one_graph_and_merge_the_row_marks) {
  size_t n1 = 0, n2 = 0, n3 = 0;
  uint8_t r1[SV], r2[SV], r3[SV];
  float *one = ss_train(1, 0, 0, false, &n1, r1), *two = ss_train(2, 2, 0, false, &n2, r2),
        *four = ss_train(2, 4, 0, false, &n3, r3); /* 4 shards on 2 threads: claimed in turn */
  if (CHECK(one && two && four && n1 == n2 && n1 == n3)) {
    double scale, w2 = ss_worst(two, one, n1, &scale), w4 = ss_worst(four, one, n1, &scale);
    CHECK(scale > 0);
    CHECK(w2 <= 1e-5 * scale);
    CHECK(w4 <= 1e-5 * scale);
    CHECK(memcmp(r1, r2, SV) == 0);
    CHECK(memcmp(r1, r3, SV) == 0);
  }
  free(one);
  free(two);
  free(four);
}

TEST(data_parallel_training_equals_one_thread_and_is_bitwise_across_runs) {
  size_t n1 = 0, n2 = 0, n3 = 0;
  float *one = ss_train(1, 0, 3, false, &n1, NULL), *a = ss_train(2, 2, 3, false, &n2, NULL),
        *b = ss_train(2, 2, 3, false, &n3, NULL);
  if (CHECK(one && a && b && n1 == n2 && n1 == n3)) {
    double scale, worst = ss_worst(a, one, n1, &scale);
    CHECK(worst <= 1e-5 * scale);
    CHECK(memcmp(a, b, n1 * sizeof(float)) == 0);
  }
  free(one);
  free(a);
  free(b);
  /* Adam with lazy rows: the merged marks decide the rows updated */
  a = ss_train(2, 2, 3, true, &n2, NULL);
  b = ss_train(2, 2, 3, true, &n3, NULL);
  if (CHECK(a && b && n2 == n3)) CHECK(memcmp(a, b, n2 * sizeof(float)) == 0);
  free(a);
  free(b);
}

TEST(grad_shard_and_run_shards_argument_errors) {
  sheaf_ctx *ctx = th_ctx();
  ss_model md;
  REQUIRE(ss_create(ctx, &md));
  sheaf_graph *g = NULL;
  REQUIRE(CHECK_OK(ctx, sheaf_graph_create(md.m, NULL, &g)));
  CHECK_STATUS(ctx, sheaf_graph_grad_shard(g, -1), SHEAF_ERR_INVALID_ARG);
  CHECK(strstr(sheaf_ctx_last_error(ctx), "shard -1") != NULL);
  CHECK_STATUS(ctx, sheaf_graph_grad_shard(g, 64), SHEAF_ERR_INVALID_ARG);
  CHECK_STATUS(ctx, sheaf_run_shards(ctx, 0, ss_shard, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_STATUS(ctx, sheaf_run_shards(ctx, 2, NULL, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK(strstr(sheaf_ctx_last_error(ctx), "fn") != NULL);
  CHECK_OK(ctx, sheaf_model_reduce_grads(md.m)); /* no shard written: nothing to do */
  sheaf_graph_free(g);
  sheaf_model_free(md.m);
}

/* ------------------------------------------------------ the trainer */

typedef struct tr_user {
  const ss_model *md;
  const ss_data *d;
  int fail_at;      /* instance whose build fails (-1: none) */
  bool odd_no_loss; /* odd instances add no loss */
} tr_user;

static sheaf_status tr_build(sheaf_trainer *t, sheaf_graph *g, int64_t i, void *user) {
  tr_user *u = user;
  if (i == u->fail_at) return sheaf_graph_status(g) ? sheaf_graph_status(g) : SHEAF_ERR_INVALID_ARG;
  sheaf_expr loss[SMAXN];
  int k = 0;
  sheaf_status st = ss_sentence(g, u->md, u->d, (int)i, loss, &k);
  if (u->odd_no_loss && i % 2) return st;
  for (int j = 0; j < k && !st; j++) st = sheaf_trainer_loss(t, loss[j]);
  return st;
}

/* Two epochs of SGD through sheaf_trainer (batch `batch`, `threads`,
 * split); the weights. */
static float *tr_train(int threads, sheaf_train_split split, int64_t batch, bool odd_no_loss, size_t *n) {
  *n = 0;
  sheaf_ctx_options co = {0};
  co.threads = threads;
  sheaf_ctx *ctx = NULL;
  if (!CHECK(sheaf_ctx_create(&co, &ctx, NULL, 0) == SHEAF_OK)) return NULL;
  ss_model md;
  static ss_data d;
  ss_data_make(&d);
  tr_user u = {&md, &d, -1, odd_no_loss};
  sheaf_trainer *t = NULL;
  float *w = NULL;
  sheaf_trainer_opts to = {{SHEAF_OPTIM_SGD, 0.3f, 0.9f, 0, 0, 0, 0, 0}, batch, 1, 3, SHEAF_POLICY_SHEAF, 0, split};
  if (ss_create(ctx, &md) && CHECK_OK(ctx, sheaf_trainer_create(md.m, SN, &to, tr_build, &u, &t))) {
    bool ok = true;
    for (int e = 0; e < 2 && ok; e++) {
      sheaf_trainer_info in;
      ok = CHECK_OK(ctx, sheaf_trainer_epoch(t, NULL, NULL, &in)) && CHECK(in.done == SN) && CHECK(in.loss > 0);
    }
    if (ok) w = ss_collect(&md, false, n);
  }
  sheaf_trainer_free(t);
  sheaf_model_free(md.m);
  sheaf_ctx_free(ctx);
  return w;
}

TEST(trainer_split_instances_equals_one_thread_and_is_bitwise_across_runs) {
  /* batch 8 on 2 threads (shards of 4), batch 3 on 4 threads (shards of
   * one instance), batch 1 on 2 threads (smaller than the threads: one
   * shard), batch 2 with odd instances adding no loss (a shard without) */
  struct {
    int threads;
    int64_t batch;
    bool odd;
  } c[4] = {{2, 8, false}, {4, 3, false}, {2, 1, false}, {2, 2, true}};
  for (int k = 0; k < 4; k++) {
    size_t n1 = 0, n2 = 0, n3 = 0, n4 = 0;
    float *one = tr_train(1, SHEAF_SPLIT_AUTO, c[k].batch, c[k].odd, &n1),
          *a = tr_train(c[k].threads, SHEAF_SPLIT_AUTO, c[k].batch, c[k].odd, &n2),
          *b = tr_train(c[k].threads, SHEAF_SPLIT_INSTANCES, c[k].batch, c[k].odd, &n3),
          *ops = tr_train(c[k].threads, SHEAF_SPLIT_OPS, c[k].batch, c[k].odd, &n4);
    if (CHECK(one && a && b && ops && n1 == n2 && n1 == n3 && n1 == n4)) {
      double scale, worst = ss_worst(a, one, n1, &scale), wops = ss_worst(ops, one, n1, &scale);
      if (!CHECK(worst <= 1e-5 * scale)) th_fail(__FILE__, __LINE__, "case %d: %g of %g", k, worst, scale);
      CHECK(wops <= 1e-5 * scale);
      CHECK(memcmp(a, b, n1 * sizeof(float)) == 0);
      if (c[k].batch == 1) CHECK(memcmp(a, one, n1 * sizeof(float)) == 0); /* one shard: one graph's pass */
    }
    free(one);
    free(a);
    free(b);
    free(ops);
  }
}

TEST(trainer_split_errors_name_the_shard_and_the_instance) {
  sheaf_ctx_options co = {0};
  co.threads = 2;
  sheaf_ctx *ctx = NULL;
  REQUIRE(sheaf_ctx_create(&co, &ctx, NULL, 0) == SHEAF_OK);
  ss_model md;
  static ss_data d;
  ss_data_make(&d);
  tr_user u = {&md, &d, 6, false};
  sheaf_trainer *t = NULL;
  sheaf_trainer_opts to = {{SHEAF_OPTIM_SGD, 0.3f, 0, 0, 0, 0, 0, 0}, 8, 0, 0, SHEAF_POLICY_SHEAF, 0,
                           SHEAF_SPLIT_INSTANCES};
  if (ss_create(ctx, &md) && CHECK_OK(ctx, sheaf_trainer_create(md.m, SN, &to, tr_build, &u, &t))) {
    CHECK_STATUS(ctx, sheaf_trainer_epoch(t, NULL, NULL, NULL), SHEAF_ERR_INVALID_ARG);
    const char *e = sheaf_ctx_last_error(ctx); /* instances 0..7 in order: 6 is in shard 1 */
    if (!CHECK(strstr(e, "shard 1 of 2") && strstr(e, "instance 6"))) th_fail(__FILE__, __LINE__, "error: %s", e);
    to.split = (sheaf_train_split)7;
    sheaf_trainer *bad = NULL;
    CHECK_STATUS(ctx, sheaf_trainer_create(md.m, SN, &to, tr_build, &u, &bad), SHEAF_ERR_INVALID_ARG);
    CHECK(strstr(sheaf_ctx_last_error(ctx), "split") != NULL);
  }
  sheaf_trainer_free(t);
  sheaf_model_free(md.m);
  sheaf_ctx_free(ctx);
}

/* Every allocation of a data-parallel update (the shards' passes, the
 * reduction, the step) failing in turn: an error, no crash, no hang, no
 * leak, until one succeeds. */
TEST(data_parallel_update_out_of_memory_is_an_error) {
  sheaf_ctx_options co = {0};
  co.threads = 2;
  co.allocator = th_allocator();
  sheaf_ctx *ctx = NULL;
  REQUIRE(sheaf_ctx_create(&co, &ctx, NULL, 0) == SHEAF_OK);
  static ss_data d;
  ss_data_make(&d);
  bool succeeded = false;
  long failed = 0;
  for (long n = 1; n < 3000 && !succeeded; n++) {
    ss_model md;
    sheaf_trainer *t = NULL;
    tr_user u = {&md, &d, -1, false};
    sheaf_trainer_opts to = {{SHEAF_OPTIM_ADAM, 1e-2f, 0, 0, 0, 0, 0, 0}, SN, 0, 0, SHEAF_POLICY_SHEAF, 0,
                             SHEAF_SPLIT_INSTANCES};
    if (!ss_create(ctx, &md)) break;
    th_fail_alloc_at(n);
    sheaf_status st = sheaf_trainer_create(md.m, SN, &to, tr_build, &u, &t);
    if (!st) st = sheaf_trainer_epoch(t, NULL, NULL, NULL);
    th_fail_alloc_at(0);
    if (st == SHEAF_OK) succeeded = true;
    else failed += CHECK_EQ_INT(st, SHEAF_ERR_NOMEM);
    sheaf_trainer_free(t);
    sheaf_model_free(md.m);
  }
  CHECK(succeeded);
  CHECK(failed > 10);
  sheaf_ctx_free(ctx);
}

/* Two shards failing one after the other (shard 0 first, then shard 1
 * while shard 0 is still running): the error names shard 0 with shard 0's
 * own message, not the one shard 1 wrote to the context after it. */
typedef struct fail_order {
  sheaf_ctx *ctx;
  _Atomic int zero_failed, one_failed;
} fail_order;

static void fo_wait(_Atomic int *flag) { /* up to ~2 s: the pool may run the shards one after the other */
  for (int i = 0; i < 2000 && !atomic_load(flag); i++) nanosleep(&(struct timespec){0, 1000000}, NULL);
}

static sheaf_status fo_shard(int shard, int n, void *user) {
  (void)n;
  fail_order *f = user;
  sheaf_status st;
  if (shard == 0) {
    st = sheaf_run_shards(f->ctx, 0, fo_shard, NULL); /* "n_shards 0 is not in 1 .. 64" */
    atomic_store(&f->zero_failed, 1);
    fo_wait(&f->one_failed);
  } else {
    fo_wait(&f->zero_failed);
    st = sheaf_run_shards(f->ctx, 2, NULL, NULL); /* "fn is NULL" */
    atomic_store(&f->one_failed, 1);
  }
  return st;
}

TEST(run_shards_error_is_the_failing_shards_own) {
  sheaf_ctx_options co = {0};
  co.threads = 2;
  sheaf_ctx *ctx = NULL;
  REQUIRE(sheaf_ctx_create(&co, &ctx, NULL, 0) == SHEAF_OK);
  fail_order f = {ctx, 0, 0};
  CHECK_STATUS(ctx, sheaf_run_shards(ctx, 2, fo_shard, &f), SHEAF_ERR_INVALID_ARG);
  const char *e = sheaf_ctx_last_error(ctx);
  CHECK(strstr(e, "shard 0 of 2: ") == e);
  CHECK(strstr(e, "n_shards 0") != NULL);
  CHECK(strstr(e, "fn is NULL") == NULL);
  sheaf_ctx_free(ctx);
}
