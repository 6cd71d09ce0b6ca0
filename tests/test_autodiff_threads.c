/*
 * test_autodiff_threads.c — training a BiLSTM tagger at a size where the
 * backward's column-split helpers (bias sums, dX adds, dW transposes), the
 * GEMMs, the gates' gradient, the packing and the optimizer all run on the
 * pool: 48 sentences of 4-23 tokens, embedding 32, hidden 128 each way,
 * [x ; h] concats gathered piece by piece for dW. Four Adam updates on a
 * 2-thread context, twice from one seed, give bit-identical weights; one
 * thread gives the same training up to summation order; and the gradients
 * of one backward on 2 threads equal those on 1 within 1e-5 (relative to
 * the gradient's scale).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "sheaf_train.h"
#include "tiny_bilstm.h"

enum { TV = 97, TE = 32, TH = 128, TC = 17, TN = 48, TMAXN = 23 };

typedef tb_model tt_model;

typedef struct tt_data {
  int len[TN], word[TN][TMAXN], tag[TN][TMAXN];
} tt_data;

static bool tt_create(sheaf_ctx *ctx, tt_model *md) { return tb_create(ctx, md, TV, TE, TH, TC, 5); }

static void tt_data_make(tt_data *d) {
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < TN; i++) {
    d->len[i] = 4 + (int)((th_frand(&s) + 1.0f) * 0.5f * (TMAXN - 3)) % (TMAXN - 3);
    for (int t = 0; t < d->len[i]; t++) {
      d->word[i][t] = (int)((th_frand(&s) + 1.0f) * 0.5f * TV) % TV;
      d->tag[i][t] = (int)((th_frand(&s) + 1.0f) * 0.5f * TC) % TC;
    }
  }
}

/* The batch's losses (one per token) on a reset graph; returns their count. */
static int tt_build(sheaf_graph *g, const tt_model *md, const tt_data *d, sheaf_expr *loss) {
  if (sheaf_graph_reset(g)) return 0;
  int k = 0;
  for (int i = 0; i < TN; i++) tb_sentence(g, md, d->len[i], d->word[i], d->tag[i], loss, &k);
  return k;
}

/* Every parameter's values (grads false) or gradients (true), in order. */
static float *tt_collect(const tt_model *md, bool grads, size_t *n) {
  return tb_collect(md, grads ? TB_GRADS : TB_VALUES, n);
}

/* `updates` Adam updates on a context of `threads` (0: one backward, no
 * step); the weights after them (or the gradients of the backward). */
static float *tt_train(int threads, int updates, size_t *n) {
  *n = 0;
  sheaf_ctx_options co = {0};
  co.threads = threads;
  sheaf_ctx *ctx = NULL;
  if (!CHECK(sheaf_ctx_create(&co, &ctx, NULL, 0) == SHEAF_OK)) return NULL;
  tt_model md;
  sheaf_graph *g = NULL;
  sheaf_optimizer *opt = NULL;
  float *w = NULL;
  static tt_data d;
  tt_data_make(&d);
  static sheaf_expr loss[TN * TMAXN];
  sheaf_optimizer_opts oo = {SHEAF_OPTIM_ADAM, 1e-2f, 0, 0, 0, 0, 1e-4f, 5.0f};
  if (!tt_create(ctx, &md) || !CHECK_OK(ctx, sheaf_graph_create(md.m, NULL, &g)) ||
      !CHECK_OK(ctx, sheaf_optimizer_create(md.m, &oo, &opt)))
    goto done;
  for (int step = 0; step < (updates ? updates : 1); step++) {
    int k = tt_build(g, &md, &d, loss);
    sheaf_backward_opts bo = {1.0f / (float)k, 0, NULL, NULL};
    if (!CHECK(k > 0) || !CHECK_OK(ctx, sheaf_model_zero_grad(md.m)) ||
        !CHECK_OK(ctx, sheaf_backward(g, k, loss, &bo)))
      goto done;
    if (updates && !CHECK_OK(ctx, sheaf_optimizer_step(opt, NULL))) goto done;
  }
  w = tt_collect(&md, updates == 0, n);
  CHECK(w != NULL);
done:
  sheaf_optimizer_free(opt);
  sheaf_graph_free(g);
  sheaf_model_free(md.m);
  sheaf_ctx_free(ctx);
  return w;
}

TEST(bilstm_training_on_two_threads_is_bit_identical_across_runs) {
  size_t n1 = 0, n2 = 0, n3 = 0;
  float *a = tt_train(2, 4, &n1), *b = tt_train(2, 4, &n2), *one = tt_train(1, 4, &n3);
  if (CHECK(a && b && one && n1 == n2 && n1 == n3)) {
    CHECK(memcmp(a, b, n1 * sizeof(float)) == 0);
    double worst = 0;
    for (size_t i = 0; i < n1; i++) worst = fmax(worst, fabs((double)a[i] - one[i]));
    CHECK(worst < 1e-3);
  }
  free(a);
  free(b);
  free(one);
}

TEST(bilstm_gradients_on_two_threads_equal_one_thread) {
  size_t n1 = 0, n2 = 0;
  float *two = tt_train(2, 0, &n1), *one = tt_train(1, 0, &n2);
  if (CHECK(two && one && n1 == n2)) {
    double scale = 0, worst = 0;
    for (size_t i = 0; i < n1; i++) scale = fmax(scale, fabs((double)one[i]));
    for (size_t i = 0; i < n1; i++) worst = fmax(worst, fabs((double)two[i] - one[i]));
    CHECK(scale > 0);
    CHECK(worst <= 1e-5 * scale);
  }
  free(two);
  free(one);
}
