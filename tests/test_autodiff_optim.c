/*
 * test_autodiff_optim.c — the optimizers (sheaf_optimizer_*) against
 * hand-computed updates (SGD with momentum, AdaGrad, Adam with decoupled
 * weight decay, clipping by the global norm), and training end to end: a
 * small MLP classifier learns a toy task (its loss falls below a third of
 * the start), and the same seed gives bit-identical weights.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "sheaf_train.h"

/* A model with one parameter w [2] = w0 and gradient g. */
static bool one_param(sheaf_ctx *ctx, sheaf_model **m, sheaf_param *w, const float *w0, const float *g) {
  if (!CHECK_OK(ctx, sheaf_model_create(ctx, m))) return false;
  *w = th_param(ctx, *m, "w", 1, 2, 0);
  if (!CHECK_OK(ctx, sheaf_model_param_set(*m, *w, w0, 2))) return false;
  float *gr = sheaf_param_grad(*m, *w);
  if (!CHECK(gr)) return false;
  memcpy(gr, g, 2 * sizeof(float));
  return true;
}

TEST(optimizer_steps_match_hand_computed_values) {
  sheaf_ctx *ctx = th_ctx();
  const float w0[2] = {1.0f, -2.0f}, g[2] = {0.5f, 1.0f};
  sheaf_model *m = NULL;
  sheaf_param w;
  sheaf_optimizer *o = NULL;
  /* SGD, momentum 0.9: v1 = g, w1 = w0 - lr g; v2 = 0.9 g + g, w2 = w1 - lr v2 */
  if (one_param(ctx, &m, &w, w0, g)) {
    sheaf_optimizer_opts oo = {SHEAF_OPTIM_SGD, 0.1f, 0.9f, 0, 0, 0, 0, 0};
    if (CHECK_OK(ctx, sheaf_optimizer_create(m, &oo, &o)) && CHECK_OK(ctx, sheaf_optimizer_step(o, NULL)) &&
        CHECK_OK(ctx, sheaf_optimizer_step(o, NULL))) {
      const float *d = sheaf_model_param_data(m, w, NULL, NULL);
      for (int i = 0; i < 2; i++) {
        float w1 = w0[i] - 0.1f * g[i], v2 = 0.9f * g[i] + g[i];
        CHECK(d[i] == w1 - 0.1f * v2);
      }
      CHECK_EQ_INT(sheaf_optimizer_steps(o), 2);
    }
    sheaf_optimizer_free(o);
    sheaf_model_free(m);
  }
  /* Adam, decoupled weight decay 0.1, one step: m̂ = g, v̂ = g² */
  o = NULL;
  if (one_param(ctx, &m, &w, w0, g)) {
    sheaf_optimizer_opts oo = {SHEAF_OPTIM_ADAM, 0.01f, 0, 0, 0, 0, 0.1f, 0};
    if (CHECK_OK(ctx, sheaf_optimizer_create(m, &oo, &o)) && CHECK_OK(ctx, sheaf_optimizer_step(o, NULL))) {
      const float *d = sheaf_model_param_data(m, w, NULL, NULL);
      for (int i = 0; i < 2; i++) {
        double want = w0[i] - 0.01 * (g[i] / (fabs(g[i]) + 1e-8) + 0.1 * w0[i]);
        CHECK_NEAR(d[i], want, 1e-6);
      }
    }
    sheaf_optimizer_free(o);
    sheaf_model_free(m);
  }
  /* AdaGrad, two steps: s = g², then 2g² */
  o = NULL;
  if (one_param(ctx, &m, &w, w0, g)) {
    sheaf_optimizer_opts oo = {SHEAF_OPTIM_ADAGRAD, 0.5f, 0, 0, 0, 0, 0, 0};
    if (CHECK_OK(ctx, sheaf_optimizer_create(m, &oo, &o)) && CHECK_OK(ctx, sheaf_optimizer_step(o, NULL)) &&
        CHECK_OK(ctx, sheaf_optimizer_step(o, NULL))) {
      const float *d = sheaf_model_param_data(m, w, NULL, NULL);
      for (int i = 0; i < 2; i++) {
        double a = fabs(g[i]);
        double want = w0[i] - 0.5 * g[i] / (a + 1e-8) - 0.5 * g[i] / (sqrt(2.0) * a + 1e-8);
        CHECK_NEAR(d[i], want, 1e-6);
      }
    }
    sheaf_optimizer_free(o);
    sheaf_model_free(m);
  }
  /* clipping: g = (3, 4), norm 5, clipped to 1 */
  o = NULL;
  const float g34[2] = {3.0f, 4.0f};
  if (one_param(ctx, &m, &w, w0, g34)) {
    sheaf_optimizer_opts oo = {SHEAF_OPTIM_SGD, 1.0f, 0, 0, 0, 0, 0, 1.0f};
    double norm = 0;
    if (CHECK_OK(ctx, sheaf_optimizer_create(m, &oo, &o)) && CHECK_OK(ctx, sheaf_optimizer_step(o, &norm))) {
      const float *d = sheaf_model_param_data(m, w, NULL, NULL);
      CHECK_NEAR(norm, 5.0, 1e-12);
      CHECK_NEAR(d[0], 1.0 - 0.6, 1e-6);
      CHECK_NEAR(d[1], -2.0 - 0.8, 1e-6);
    }
    sheaf_optimizer_free(o);
    sheaf_model_free(m);
  }
  /* misuse */
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  sheaf_optimizer_opts bad = {SHEAF_OPTIM_ADAM, 0.0f, 0, 0, 0, 0, 0, 0};
  CHECK_STATUS(ctx, sheaf_optimizer_create(m, &bad, &o), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "lr");
  bad.lr = 0.1f;
  bad.momentum = 1.5f;
  CHECK_STATUS(ctx, sheaf_optimizer_create(m, &bad, &o), SHEAF_ERR_INVALID_ARG);
  CHECK_STATUS(ctx, sheaf_optimizer_create(m, NULL, &o), SHEAF_ERR_INVALID_ARG);
  sheaf_model_free(m);
}

/* ---- a toy task: 3 classes of points in 4-d by a fixed linear teacher ---- */

enum { TD = 4, TH = 8, TC = 3, TN = 128 };

typedef struct toy {
  float x[TN][TD];
  int y[TN];
} toy;

static void toy_make(toy *t) {
  uint64_t s = 12345;
  static const float teach[TC][TD] = {{1, -1, 0.5f, 0}, {-0.5f, 1, 1, -1}, {0, 0.3f, -1, 1}};
  for (int i = 0; i < TN; i++) {
    float best = -1e30f;
    for (int k = 0; k < TD; k++) t->x[i][k] = th_frand(&s);
    for (int c = 0; c < TC; c++) {
      float v = 0;
      for (int k = 0; k < TD; k++) v += teach[c][k] * t->x[i][k];
      if (v > best) best = v, t->y[i] = c;
    }
  }
}

/* Trains `epochs` passes of batches of 32 with Adam; first and last epoch's mean loss. */
static bool toy_train(sheaf_ctx *ctx, const toy *t, int epochs, float *weights, double *l_first, double *l_last) {
  sheaf_model *m = NULL;
  sheaf_graph *gr = NULL;
  sheaf_optimizer *o = NULL;
  bool ok = false;
  if (!CHECK_OK(ctx, sheaf_model_create(ctx, &m))) return false;
  sheaf_param W1 = th_param(ctx, m, "W1", 2, TD, TH), b1 = th_param(ctx, m, "b1", 1, TH, 0);
  sheaf_param W2 = th_param(ctx, m, "W2", 2, TH, TC), b2 = th_param(ctx, m, "b2", 1, TC, 0);
  sheaf_optimizer_opts oo = {SHEAF_OPTIM_ADAM, 0.05f, 0, 0, 0, 0, 1e-4f, 5.0f};
  if (!CHECK_OK(ctx, sheaf_model_seed(m, 3)) || !CHECK_OK(ctx, sheaf_graph_create(m, NULL, &gr)) ||
      !CHECK_OK(ctx, sheaf_optimizer_create(m, &oo, &o)))
    goto done;
  for (int ep = 0; ep < epochs; ep++) {
    double sum = 0;
    for (int b0 = 0; b0 < TN; b0 += 32) {
      sheaf_graph_reset(gr);
      sheaf_expr l[32];
      for (int i = 0; i < 32; i++) {
        sheaf_expr x = sheaf_input_vector(gr, TD, t->x[b0 + i]);
        sheaf_expr h = sheaf_tanh(gr, sheaf_affine(gr, W1, x, b1));
        l[i] = sheaf_nll(gr, sheaf_affine(gr, W2, h, b2), t->y[b0 + i]);
      }
      sheaf_model_zero_grad(m);
      sheaf_backward_opts bo = {1.0f / 32, 0, NULL, NULL};
      if (!CHECK_OK(ctx, sheaf_backward(gr, 32, l, &bo))) goto done;
      for (int i = 0; i < 32; i++) {
        sheaf_value_view v;
        if (!CHECK_OK(ctx, sheaf_value(gr, l[i], &v))) goto done;
        sum += v.data[0];
      }
      if (!CHECK_OK(ctx, sheaf_optimizer_step(o, NULL))) goto done;
    }
    if (ep == 0) *l_first = sum / TN;
    *l_last = sum / TN;
  }
  const sheaf_param ps[4] = {W1, b1, W2, b2};
  size_t off = 0;
  for (int k = 0; k < 4; k++) {
    int rank;
    const int64_t *shape;
    const float *d = sheaf_model_param_data(m, ps[k], &rank, &shape);
    size_t n = (size_t)(rank == 2 ? shape[0] * shape[1] : shape[0]);
    memcpy(weights + off, d, n * sizeof(float));
    off += n;
  }
  ok = true;
done:
  sheaf_optimizer_free(o);
  sheaf_graph_free(gr);
  sheaf_model_free(m);
  return ok;
}

TEST(training_lowers_the_loss_deterministically) {
  sheaf_ctx *ctx = th_ctx();
  toy *t = malloc(sizeof *t);
  toy_make(t);
  enum { NW = TD * TH + TH + TH * TC + TC };
  float w1[NW], w2[NW];
  double f1 = 0, l1 = 0, f2 = 0, l2 = 0;
  if (CHECK(toy_train(ctx, t, 30, w1, &f1, &l1)) && CHECK(toy_train(ctx, t, 30, w2, &f2, &l2))) {
    if (!CHECK(l1 < f1 / 3)) th_fail(__FILE__, __LINE__, "loss %g -> %g", f1, l1);
    CHECK(memcmp(w1, w2, sizeof w1) == 0); /* same seed: bit-identical weights */
    CHECK(l1 == l2);
  }
  free(t);
}
