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

enum { TV = 97, TE = 32, TH = 128, TC = 17, TN = 48, TMAXN = 23 };

typedef struct tt_model {
  sheaf_model *m;
  sheaf_param p[7]; /* emb, W_fwd, b_fwd, W_bwd, b_bwd, W_tag, b_tag */
} tt_model;

typedef struct tt_data {
  int len[TN], word[TN][TMAXN], tag[TN][TMAXN];
} tt_data;

static size_t tt_numel(sheaf_model *m, sheaf_param p) {
  int rank;
  const int64_t *shape;
  sheaf_model_param_data(m, p, &rank, &shape);
  return (size_t)(rank == 2 ? shape[0] * shape[1] : shape[0]);
}

static bool tt_create(sheaf_ctx *ctx, tt_model *md) {
  memset(md, 0, sizeof *md);
  if (!CHECK_OK(ctx, sheaf_model_create(ctx, &md->m))) return false;
  md->p[0] = th_param(ctx, md->m, "emb", 2, TV, TE);
  md->p[1] = th_param(ctx, md->m, "Wf", 2, TE + TH, 4 * TH);
  md->p[2] = th_param(ctx, md->m, "bf", 1, 4 * TH, 0);
  md->p[3] = th_param(ctx, md->m, "Wb", 2, TE + TH, 4 * TH);
  md->p[4] = th_param(ctx, md->m, "bb", 1, 4 * TH, 0);
  md->p[5] = th_param(ctx, md->m, "Wt", 2, 2 * TH, TC);
  md->p[6] = th_param(ctx, md->m, "bt", 1, TC, 0);
  return CHECK_OK(ctx, sheaf_model_seed(md->m, 5));
}

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
  const int64_t zs[1] = {TH};
  int k = 0;
  for (int i = 0; i < TN; i++) {
    sheaf_expr hf[TMAXN], hb[TMAXN];
    sheaf_expr h = sheaf_zeros(g, 1, zs), c = {0, 0, 0};
    for (int t = 0; t < d->len[i]; t++) {
      sheaf_expr xh[2] = {sheaf_lookup(g, md->p[0], d->word[i][t]), h};
      sheaf_lstm_cell(g, md->p[1], md->p[2], sheaf_concat(g, 2, xh), c, &h, &c);
      hf[t] = h;
    }
    h = sheaf_zeros(g, 1, zs);
    c = (sheaf_expr){0, 0, 0};
    for (int t = d->len[i] - 1; t >= 0; t--) {
      sheaf_expr xh[2] = {sheaf_lookup(g, md->p[0], d->word[i][t]), h};
      sheaf_lstm_cell(g, md->p[3], md->p[4], sheaf_concat(g, 2, xh), c, &h, &c);
      hb[t] = h;
    }
    for (int t = 0; t < d->len[i]; t++) {
      sheaf_expr two[2] = {hf[t], hb[t]};
      loss[k++] = sheaf_nll(g, sheaf_affine(g, md->p[5], sheaf_concat(g, 2, two), md->p[6]), d->tag[i][t]);
    }
  }
  return k;
}

/* Every parameter's values (grads false) or gradients (true), in order. */
static float *tt_collect(const tt_model *md, bool grads, size_t *n) {
  size_t total = 0;
  for (int q = 0; q < 7; q++) total += tt_numel(md->m, md->p[q]);
  float *w = malloc(total * sizeof *w), *o = w;
  for (int q = 0; q < 7 && w; q++) {
    size_t c = tt_numel(md->m, md->p[q]);
    const float *src = grads ? sheaf_param_grad(md->m, md->p[q]) : sheaf_model_param_data(md->m, md->p[q], NULL, NULL);
    if (!src) {
      free(w);
      return NULL;
    }
    memcpy(o, src, c * sizeof(float));
    o += c;
  }
  *n = total;
  return w;
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
