/*
 * test_trainer.c — sheaf_trainer (include/sheaf_train.h): a toy
 * classifier (embedding, tanh layer, 3 classes; class = word mod 3) learns
 * through it; its updates equal a hand-written loop of sheaf_backward and
 * sheaf_optimizer_step over the same shuffled batches, bit for bit; the
 * progress callback sees every batch and can stop an epoch; a resumed
 * trainer (weights, optimizer state, epoch count) continues exactly; and
 * misuse is an error naming the argument.
 */
#include <stdlib.h>

#include "harness.h"
#include "sheaf_train.h"

enum { N = 90, V = 30, E = 8, C = 3 };

typedef struct toy {
  sheaf_param emb, W, b, Wo, bo;
} toy;

static sheaf_model *toy_model(sheaf_ctx *ctx, toy *p) {
  sheaf_model *m = NULL;
  if (!CHECK_OK(ctx, sheaf_model_create(ctx, &m))) return NULL;
  p->emb = th_param(ctx, m, "emb", 2, V, E);
  p->W = th_param(ctx, m, "W", 2, E, E);
  p->b = th_param(ctx, m, "b", 1, E, 0);
  p->Wo = th_param(ctx, m, "Wo", 2, E, C);
  p->bo = th_param(ctx, m, "bo", 1, C, 0);
  CHECK_OK(ctx, sheaf_model_seed(m, 3));
  return m;
}

/* Instance i: word i mod V, class (i mod V) mod 3; two losses for even i
 * (the same NLL twice: weights that instance double). */
static sheaf_expr toy_loss(sheaf_graph *g, const toy *p, int64_t i) {
  sheaf_expr x = sheaf_lookup(g, p->emb, i % V);
  sheaf_expr h = sheaf_tanh(g, sheaf_affine(g, p->W, x, p->b));
  return sheaf_nll(g, sheaf_affine(g, p->Wo, h, p->bo), (i % V) % C);
}

static sheaf_status toy_build(sheaf_trainer *t, sheaf_graph *g, int64_t i, void *user) {
  const toy *p = user;
  sheaf_status st = sheaf_trainer_loss(t, toy_loss(g, p, i));
  if (!st && i % 2 == 0) st = sheaf_trainer_loss(t, toy_loss(g, p, i));
  return st;
}

typedef struct seen {
  int calls;
  int64_t last_done, stop_at;
} seen;

static int toy_progress(const sheaf_trainer_info *in, void *user) {
  seen *s = user;
  s->calls++;
  s->last_done = in->done;
  return s->stop_at && in->done >= s->stop_at;
}

static const sheaf_trainer_opts k_opts = {{SHEAF_OPTIM_ADAM, 0.05f, 0, 0, 0, 0, 0, 5.0f}, 16, 1, 7,
                                          SHEAF_POLICY_SHEAF, 1, SHEAF_SPLIT_AUTO};

static bool same_params(sheaf_model *a, sheaf_model *b) {
  static const char *const names[5] = {"emb", "W", "b", "Wo", "bo"};
  for (int i = 0; i < 5; i++) {
    sheaf_param pa, pb;
    if (sheaf_model_find(a, names[i], &pa) != SHEAF_OK || sheaf_model_find(b, names[i], &pb) != SHEAF_OK)
      return false;
    int ra, rb;
    const int64_t *sa, *sb;
    float *da = sheaf_model_param_data(a, pa, &ra, &sa), *db = sheaf_model_param_data(b, pb, &rb, &sb);
    int64_t n = sa[0] * (ra == 2 ? sa[1] : 1);
    if (memcmp(da, db, (size_t)n * sizeof(float))) return false;
  }
  return true;
}

TEST(trainer_learns_and_equals_a_hand_written_loop) {
  sheaf_ctx *ctx = th_ctx();
  toy p, q;
  sheaf_model *m = toy_model(ctx, &p), *ref = toy_model(ctx, &q);
  REQUIRE(m && ref);
  sheaf_trainer *t = NULL;
  REQUIRE(CHECK_OK(ctx, sheaf_trainer_create(m, N, &k_opts, toy_build, &p, &t)));
  CHECK(same_params(m, ref));
  seen s = {0, 0, 0};
  sheaf_trainer_info first, in;
  CHECK_OK(ctx, sheaf_trainer_epoch(t, toy_progress, &s, &first));
  CHECK_EQ_INT(s.calls, (N + 15) / 16);
  CHECK_EQ_INT(s.last_done, N);
  CHECK_EQ_INT(first.epoch, 1);
  CHECK_EQ_INT(first.losses, N + N / 2);
  for (int e = 0; e < 5; e++) CHECK_OK(ctx, sheaf_trainer_epoch(t, NULL, NULL, &in));
  CHECK_EQ_INT(in.epoch, 6);
  CHECK_EQ_INT(sheaf_trainer_epochs(t), 6);
  CHECK_EQ_INT(in.steps, 6 * ((N + 15) / 16));
  CHECK(in.loss < 0.25 * first.loss);
  CHECK(!same_params(m, ref));
  /* the same updates by hand: the epoch's shuffle (splitmix64 from seed
   * and epoch, Fisher-Yates), mean of the batch's losses */
  sheaf_graph_opts go = {SHEAF_POLICY_SHEAF, 1, NULL};
  sheaf_graph *g = NULL;
  sheaf_optimizer *o = NULL;
  REQUIRE(CHECK_OK(ctx, sheaf_graph_create(ref, &go, &g)));
  REQUIRE(CHECK_OK(ctx, sheaf_optimizer_create(ref, &k_opts.optim, &o)));
  int64_t order[N];
  sheaf_expr loss[2 * 16];
  for (int64_t epoch = 1; epoch <= 6; epoch++) {
    uint64_t rng = k_opts.seed * 0x9e3779b97f4a7c15ull + (uint64_t)epoch;
    for (int64_t i = 0; i < N; i++) order[i] = i;
    for (int64_t i = N - 1; i > 0; i--) {
      uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      int64_t j = (int64_t)(z % (uint64_t)(i + 1)), x = order[i];
      order[i] = order[j];
      order[j] = x;
    }
    for (int64_t b0 = 0; b0 < N; b0 += 16) {
      sheaf_graph_reset(g);
      int k = 0;
      for (int64_t i = b0; i < b0 + 16 && i < N; i++) {
        loss[k++] = toy_loss(g, &q, order[i]);
        if (order[i] % 2 == 0) loss[k++] = toy_loss(g, &q, order[i]);
      }
      sheaf_backward_opts bo = {1.0f / (float)k, 0, NULL, NULL};
      CHECK_OK(ctx, sheaf_model_zero_grad(ref));
      CHECK_OK(ctx, sheaf_backward(g, k, loss, &bo));
      CHECK_OK(ctx, sheaf_optimizer_step(o, NULL));
    }
  }
  CHECK(same_params(m, ref));
  sheaf_optimizer_free(o);
  sheaf_graph_free(g);
  sheaf_trainer_free(t);
  sheaf_model_free(m);
  sheaf_model_free(ref);
}

TEST(trainer_stops_and_resumes_exactly) {
  sheaf_ctx *ctx = th_ctx();
  toy p, q;
  sheaf_model *whole = toy_model(ctx, &p), *resumed = toy_model(ctx, &q);
  REQUIRE(whole && resumed);
  sheaf_trainer *a = NULL, *b = NULL;
  REQUIRE(CHECK_OK(ctx, sheaf_trainer_create(whole, N, &k_opts, toy_build, &p, &a)));
  for (int e = 0; e < 2; e++) CHECK_OK(ctx, sheaf_trainer_epoch(a, NULL, NULL, NULL));
  const char *w = th_tmp_path("trainer-w.safetensors"), *s = th_tmp_path("trainer-s.safetensors");
  CHECK_OK(ctx, sheaf_model_save(whole, w));
  CHECK_OK(ctx, sheaf_optimizer_save(sheaf_trainer_optimizer(a), s));
  for (int e = 0; e < 2; e++) CHECK_OK(ctx, sheaf_trainer_epoch(a, NULL, NULL, NULL));
  REQUIRE(CHECK_OK(ctx, sheaf_trainer_create(resumed, N, &k_opts, toy_build, &q, &b)));
  CHECK_OK(ctx, sheaf_model_load(resumed, w));
  CHECK_OK(ctx, sheaf_optimizer_load(sheaf_trainer_optimizer(b), s));
  sheaf_trainer_set_epochs(b, 2);
  for (int e = 0; e < 2; e++) CHECK_OK(ctx, sheaf_trainer_epoch(b, NULL, NULL, NULL));
  CHECK(same_params(whole, resumed));
  /* a progress callback stops the epoch: not counted as done */
  seen st = {0, 0, 40};
  sheaf_trainer_info in;
  CHECK_OK(ctx, sheaf_trainer_epoch(b, toy_progress, &st, &in));
  CHECK_EQ_INT(in.done, 48);
  CHECK_EQ_INT(st.calls, 3);
  CHECK_EQ_INT(sheaf_trainer_epochs(b), 4);
  CHECK(sheaf_trainer_graph(b) != NULL);
  sheaf_trainer_free(a);
  sheaf_trainer_free(b);
  sheaf_model_free(whole);
  sheaf_model_free(resumed);
}

static sheaf_status bad_build(sheaf_trainer *t, sheaf_graph *g, int64_t i, void *user) {
  (void)t, (void)g, (void)user;
  return i == 5 ? SHEAF_ERR_INVALID_ARG : SHEAF_OK;
}

TEST(trainer_errors) {
  sheaf_ctx *ctx = th_ctx();
  toy p;
  sheaf_model *m = toy_model(ctx, &p);
  REQUIRE(m);
  sheaf_trainer *t = NULL;
  CHECK_STATUS(ctx, sheaf_trainer_create(m, 0, &k_opts, toy_build, &p, &t), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "n 0 must be at least 1");
  sheaf_trainer_opts o = k_opts;
  o.batch = 0;
  CHECK_STATUS(ctx, sheaf_trainer_create(m, N, &o, toy_build, &p, &t), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "batch 0 must be at least 1");
  CHECK_STATUS(ctx, sheaf_trainer_create(m, N, &k_opts, NULL, &p, &t), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "build is NULL");
  o = k_opts;
  o.optim.lr = -1;
  CHECK_STATUS(ctx, sheaf_trainer_create(m, N, &o, toy_build, &p, &t), SHEAF_ERR_INVALID_ARG);
  CHECK(t == NULL);
  REQUIRE(CHECK_OK(ctx, sheaf_trainer_create(m, N, &k_opts, bad_build, &p, &t)));
  CHECK_STATUS(ctx, sheaf_trainer_loss(t, (sheaf_expr){0}), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "outside a build callback");
  /* the build's failure stops the epoch; no losses: no update */
  CHECK_STATUS(ctx, sheaf_trainer_epoch(t, NULL, NULL, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_EQ_INT(sheaf_optimizer_steps(sheaf_trainer_optimizer(t)), 0);
  CHECK_EQ_INT(sheaf_trainer_epochs(t), 0);
  sheaf_trainer_free(t);
  sheaf_trainer_free(NULL);
  sheaf_model_free(m);
}
