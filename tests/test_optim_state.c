/*
 * test_optim_state.c — sheaf_optimizer_save / sheaf_optimizer_load: for
 * SGD with momentum, AdaGrad and Adam (weight decay, clipping), N updates,
 * save, a fresh model and optimizer loaded from the weights and the state,
 * M more updates give the weights of N + M uninterrupted updates bit for
 * bit; a wrong kind, another model's state and a file that is no state are
 * errors that change nothing; and `sheaf train` resumes Adam exactly.
 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>

#include "harness.h"
#include "sheaf_train.h"

enum { NA = 6, NB = 3 };

/* A model of two parameters a [2, 3] and b [NB] seeded 5. */
static sheaf_model *make_model(sheaf_ctx *ctx, int64_t nb) {
  sheaf_model *m = NULL;
  if (!CHECK_OK(ctx, sheaf_model_create(ctx, &m))) return NULL;
  th_param(ctx, m, "a", 2, 2, 3);
  th_param(ctx, m, "b", 1, nb, 0);
  CHECK_OK(ctx, sheaf_model_seed(m, 5));
  return m;
}

/* Update k: gradient g = sin(k + j) scaled per parameter (deterministic). */
static bool steps(sheaf_ctx *ctx, sheaf_model *m, sheaf_optimizer *o, int from, int to) {
  for (int k = from; k < to; k++) {
    for (size_t p = 0; p < sheaf_model_param_count(m); p++) {
      sheaf_param h;
      if (!CHECK_OK(ctx, sheaf_model_find(m, p ? "b" : "a", &h))) return false;
      float *g = sheaf_param_grad(m, h);
      int n = p ? NB : NA;
      for (int j = 0; j < n; j++) g[j] = (float)sin(0.7 * k + j + 3.0 * (double)p) * (1 + k % 3);
    }
    if (!CHECK_OK(ctx, sheaf_optimizer_step(o, NULL))) return false;
  }
  return true;
}

static bool same_weights(sheaf_model *x, sheaf_model *y) {
  const char *names[2] = {"a", "b"};
  for (int i = 0; i < 2; i++) {
    sheaf_param px, py;
    sheaf_model_find(x, names[i], &px);
    sheaf_model_find(y, names[i], &py);
    int rank;
    const int64_t *shape;
    const float *a = sheaf_model_param_data(x, px, &rank, &shape),
                *b = sheaf_model_param_data(y, py, &rank, &shape);
    if (memcmp(a, b, (size_t)(i ? NB : NA) * sizeof(float))) return false;
  }
  return true;
}

TEST(optimizer_state_resume_is_exact) {
  sheaf_ctx *ctx = th_ctx();
  const sheaf_optimizer_opts kinds[3] = {
      {SHEAF_OPTIM_SGD, 0.05f, 0.9f, 0, 0, 0, 0.01f, 0},
      {SHEAF_OPTIM_ADAGRAD, 0.05f, 0, 0, 0, 0, 0.01f, 2.0f},
      {SHEAF_OPTIM_ADAM, 0.01f, 0, 0.8f, 0.99f, 0, 0.01f, 1.5f},
  };
  const char *w = th_tmp_path("os-w.safetensors"), *s = th_tmp_path("os-s.safetensors");
  for (int k = 0; k < 3; k++) {
    sheaf_model *whole = make_model(ctx, NB), *part = make_model(ctx, NB), *resumed = make_model(ctx, NB);
    sheaf_optimizer *ow = NULL, *op = NULL, *orz = NULL;
    REQUIRE(whole && part && resumed);
    REQUIRE(CHECK_OK(ctx, sheaf_optimizer_create(whole, &kinds[k], &ow)));
    REQUIRE(CHECK_OK(ctx, sheaf_optimizer_create(part, &kinds[k], &op)));
    REQUIRE(CHECK_OK(ctx, sheaf_optimizer_create(resumed, &kinds[k], &orz)));
    CHECK(steps(ctx, whole, ow, 0, 12));
    CHECK(steps(ctx, part, op, 0, 5));
    CHECK_OK(ctx, sheaf_model_save(part, w));
    CHECK_OK(ctx, sheaf_optimizer_save(op, s));
    CHECK_OK(ctx, sheaf_model_load(resumed, w));
    CHECK_OK(ctx, sheaf_optimizer_load(orz, s));
    CHECK_EQ_INT(sheaf_optimizer_steps(orz), 5);
    CHECK(steps(ctx, resumed, orz, 5, 12));
    CHECK(same_weights(whole, resumed));
    /* without the state the run differs (the moments matter) */
    sheaf_optimizer *fresh = NULL;
    sheaf_model *again = make_model(ctx, NB);
    CHECK_OK(ctx, sheaf_model_load(again, w));
    CHECK_OK(ctx, sheaf_optimizer_create(again, &kinds[k], &fresh));
    CHECK(steps(ctx, again, fresh, 5, 12));
    CHECK(!same_weights(whole, again));
    sheaf_optimizer_free(fresh);
    sheaf_model_free(again);
    sheaf_optimizer_free(ow);
    sheaf_optimizer_free(op);
    sheaf_optimizer_free(orz);
    sheaf_model_free(whole);
    sheaf_model_free(part);
    sheaf_model_free(resumed);
  }
}

TEST(optimizer_state_errors_change_nothing) {
  sheaf_ctx *ctx = th_ctx();
  const char *s = th_tmp_path("ose-s.safetensors"), *w = th_tmp_path("ose-w.safetensors");
  sheaf_model *m = make_model(ctx, NB), *other = make_model(ctx, NB + 1);
  REQUIRE(m && other);
  sheaf_optimizer_opts adam = {SHEAF_OPTIM_ADAM, 0.01f, 0, 0, 0, 0, 0, 0};
  sheaf_optimizer_opts sgd = {SHEAF_OPTIM_SGD, 0.01f, 0.5f, 0, 0, 0, 0, 0};
  sheaf_optimizer *o = NULL, *os = NULL, *oo = NULL;
  REQUIRE(CHECK_OK(ctx, sheaf_optimizer_create(m, &adam, &o)));
  REQUIRE(CHECK_OK(ctx, sheaf_optimizer_create(m, &sgd, &os)));
  REQUIRE(CHECK_OK(ctx, sheaf_optimizer_create(other, &adam, &oo)));
  CHECK(steps(ctx, m, o, 0, 3));
  CHECK_OK(ctx, sheaf_optimizer_save(o, s));
  CHECK_STATUS(ctx, sheaf_optimizer_load(os, s), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "the state of a adam optimizer, this one is sgd");
  CHECK_EQ_INT(sheaf_optimizer_steps(os), 0);
  CHECK_STATUS(ctx, sheaf_optimizer_load(oo, s), SHEAF_ERR_SHAPE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "optimizer state 'm.b' is not F32 of the shape of parameter 'b'");
  CHECK_EQ_INT(sheaf_optimizer_steps(oo), 0);
  CHECK_OK(ctx, sheaf_model_save(m, w));
  CHECK_STATUS(ctx, sheaf_optimizer_load(o, w), SHEAF_ERR_FORMAT);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "not an optimizer state");
  CHECK_EQ_INT(sheaf_optimizer_steps(o), 3);
  CHECK_STATUS(ctx, sheaf_optimizer_load(o, th_tmp_path("ose-missing")), SHEAF_ERR_IO);
  CHECK_STATUS(ctx, sheaf_optimizer_load(NULL, s), SHEAF_ERR_INVALID_ARG);
  CHECK_STATUS(ctx, sheaf_optimizer_save(o, NULL), SHEAF_ERR_INVALID_ARG);
  sheaf_optimizer_free(o);
  sheaf_optimizer_free(os);
  sheaf_optimizer_free(oo);
  sheaf_model_free(m);
  sheaf_model_free(other);
}

static char g_out[1 << 15];

#define sheaf(...) th_sheaf(g_out, sizeof g_out, __VA_ARGS__)

static bool same_file(const char *a, const char *b) {
  char cmd[4096], out[256];
  snprintf(cmd, sizeof cmd, "cmp %s %s && echo same", a, b);
  return th_run(cmd, out, sizeof out) == 0 && !strcmp(out, "same\n");
}

/* Adam: 3 epochs = 1 epoch, then 2 resumed (the tagger and the TreeLSTM). */
TEST(train_cli_adam_resume_is_exact) {
  if (!th_sheaf_bin()) return;
  static const char *const args[2] = {
      "train bilstm --data tests/data/small.conllu --hidden 8 --embed 8 --min-count 1 --threads 1 --batch 2",
      "train treelstm --data tests/data/sst_tiny.ptb --hidden 8 --embed 8 --min-count 1 --threads 1 --batch 4"};
  for (int k = 0; k < 2; k++) {
    const char *a = th_tmp_path(k ? "ar-t3.safetensors" : "ar-b3.safetensors"),
               *b = th_tmp_path(k ? "ar-t1.safetensors" : "ar-b1.safetensors"),
               *c = th_tmp_path(k ? "ar-t12.safetensors" : "ar-b12.safetensors");
    CHECK_EQ_INT(sheaf("%s --epochs 3 --out %s", args[k], a), 0);
    CHECK_EQ_INT(sheaf("%s --epochs 1 --out %s", args[k], b), 0);
    CHECK(!same_file(a, b));
    CHECK_EQ_INT(sheaf("%s --epochs 2 --resume %s --out %s", args[k], b, c), 0);
    CHECK_CONTAINS(g_out, "epoch 3: loss ");
    CHECK(same_file(a, c));
    /* the optimizer state beside them too */
    char sa[1024], sc[1024];
    snprintf(sa, sizeof sa, "%.*s.optim.safetensors", (int)(strlen(a) - 12), a);
    snprintf(sc, sizeof sc, "%.*s.optim.safetensors", (int)(strlen(c) - 12), c);
    CHECK(same_file(sa, sc));
    /* another optimizer cannot take the state */
    CHECK_EQ_INT(sheaf("%s --optimizer adagrad --epochs 1 --resume %s --out %s", args[k], b, c), 1);
    CHECK_CONTAINS(g_out, "the state of a adam optimizer, this one is adagrad");
  }
}
