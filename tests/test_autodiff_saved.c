/*
 * test_autodiff_saved.c — what a training forward keeps for the backward
 * (sh_saved: the LSTM cells' gates and tanh(c)) and the determinism of
 * training on two threads. An LSTM tagger (lstm_cell over [x ; h], hidden
 * 21: a whole gate group of 16 and a partial one) over 24 sentences of
 * 1-9 tokens: a graph's first backward (gates recomputed) and its second
 * (gates read from the forward) give the same gradients (1e-3 relative,
 * floor 1e-2: the forward's fast activations against the vmath ones, as
 * the finite-difference bound); a graph that never trained keeps nothing;
 * and six Adam updates on a 2-thread context, twice from one seed, give
 * bit-identical weights.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "sheaf_train.h"
#include "train/train.h"

enum { SV = 13, SE = 6, SH = 21, SC = 3, SN = 24, SMAXN = 9 };

typedef struct sv_model {
  sheaf_model *m;
  sheaf_param E, W, b, Wo, bo;
} sv_model;

static size_t sv_numel(sheaf_model *m, sheaf_param p) {
  int rank;
  const int64_t *shape;
  sheaf_model_param_data(m, p, &rank, &shape);
  return (size_t)(rank == 2 ? shape[0] * shape[1] : shape[0]);
}

typedef struct sv_data {
  int len[SN], word[SN][SMAXN], tag[SN][SMAXN];
} sv_data;

static bool sv_create(sheaf_ctx *ctx, sv_model *md) {
  memset(md, 0, sizeof *md);
  if (!CHECK_OK(ctx, sheaf_model_create(ctx, &md->m))) return false;
  md->E = th_param(ctx, md->m, "E", 2, SV, SE);
  md->W = th_param(ctx, md->m, "W", 2, SE + SH, 4 * SH);
  md->b = th_param(ctx, md->m, "b", 1, 4 * SH, 0);
  md->Wo = th_param(ctx, md->m, "Wo", 2, SH, SC);
  md->bo = th_param(ctx, md->m, "bo", 1, SC, 0);
  return CHECK_OK(ctx, sheaf_model_seed(md->m, 11));
}

static void sv_data_make(sv_data *d) {
  uint64_t s = 0x2545f4914f6cdd1dull;
  for (int i = 0; i < SN; i++) {
    d->len[i] = 1 + (int)((th_frand(&s) + 1.0f) * 0.5f * SMAXN) % SMAXN;
    for (int t = 0; t < d->len[i]; t++) {
      d->word[i][t] = (int)((th_frand(&s) + 1.0f) * 0.5f * SV) % SV;
      d->tag[i][t] = (int)((th_frand(&s) + 1.0f) * 0.5f * SC) % SC;
    }
  }
}

/* The batch's losses (one per token) on a reset graph; returns their count. */
static int sv_build(sheaf_graph *g, const sv_model *md, const sv_data *d, sheaf_expr *loss) {
  if (sheaf_graph_reset(g)) return 0;
  int k = 0;
  for (int i = 0; i < SN; i++) {
    sheaf_expr h = sheaf_zeros(g, 1, (const int64_t[]){SH}), c = {0, 0, 0};
    for (int t = 0; t < d->len[i]; t++) {
      sheaf_expr xh[2] = {sheaf_lookup(g, md->E, d->word[i][t]), h};
      sheaf_lstm_cell(g, md->W, md->b, sheaf_concat(g, 2, xh), c, &h, &c);
      loss[k++] = sheaf_nll(g, sheaf_affine(g, md->Wo, h, md->bo), d->tag[i][t]);
    }
  }
  return k;
}

/* Every parameter's gradient, in declaration order (n floats). */
static float *sv_grads(const sv_model *md, size_t *n) {
  const sheaf_param ps[5] = {md->E, md->W, md->b, md->Wo, md->bo};
  size_t total = 0;
  for (int q = 0; q < 5; q++) total += sv_numel(md->m, ps[q]);
  float *out = malloc(total * sizeof *out), *o = out;
  for (int q = 0; q < 5 && out; q++) {
    size_t c = sv_numel(md->m, ps[q]);
    memcpy(o, sheaf_param_grad(md->m, ps[q]), c * sizeof(float));
    o += c;
  }
  *n = total;
  return out;
}

TEST(autodiff_lstm_training_forward_keeps_its_gates) {
  sheaf_ctx *ctx = th_ctx();
  sv_model md;
  if (!sv_create(ctx, &md)) return;
  sv_data d;
  sv_data_make(&d);
  sheaf_graph *g = NULL;
  float *g0 = NULL, *g1 = NULL;
  sheaf_expr loss[SN * SMAXN];
  if (!CHECK_OK(ctx, sheaf_graph_create(md.m, NULL, &g))) goto done;
  /* inference (never trained): nothing kept */
  int k = sv_build(g, &md, &d, loss);
  REQUIRE(k > SN);
  if (!CHECK_OK(ctx, sheaf_graph_flush(g))) goto done;
  CHECK(!g->saved.keep && g->saved.cap == 0);
  size_t n0 = 0, n1 = 0;
  for (int pass = 0; pass < 2; pass++) {
    k = sv_build(g, &md, &d, loss);
    sheaf_model_zero_grad(md.m);
    sheaf_backward_opts bo = {1.0f / (float)k, 0, NULL, NULL};
    if (!CHECK_OK(ctx, sheaf_backward(g, k, loss, &bo))) goto done;
    uint32_t lstm = 0, kept = 0;
    for (uint32_t id = 0; id < g->store.n_nodes; id++)
      if (g->store.nodes[id].op == SH_OP_LSTM) {
        lstm++;
        kept += id < g->saved.cap && g->saved.lstm_gates[id] != NULL;
      }
    CHECK(lstm > SN);
    CHECK_EQ_INT(kept, pass == 0 ? 0 : lstm); /* the first forward ran before the graph trained */
    if (pass == 0) g0 = sv_grads(&md, &n0);
    else g1 = sv_grads(&md, &n1);
  }
  REQUIRE(g0 && g1 && n0 == n1);
  int nonzero = 0;
  for (size_t i = 0; i < n0; i++) {
    double mag = fabs(g0[i]) > fabs(g1[i]) ? fabs(g0[i]) : fabs(g1[i]);
    nonzero += g1[i] != 0.0f;
    if (fabs((double)g0[i] - g1[i]) > 1e-3 * (mag > 1e-2 ? mag : 1e-2)) {
      th_fail(__FILE__, __LINE__, "gradient %zu: gates recomputed %.7g, gates kept %.7g", i, g0[i], g1[i]);
      break;
    }
  }
  CHECK(nonzero > 1000);
done:
  free(g0);
  free(g1);
  sheaf_graph_free(g);
  sheaf_model_free(md.m);
}

/* Six Adam updates on a context of `threads`; the weights after them. */
static float *sv_train(int threads, size_t *n) {
  *n = 0;
  sheaf_ctx_options co = {0};
  co.threads = threads;
  sheaf_ctx *ctx = NULL;
  if (!CHECK(sheaf_ctx_create(&co, &ctx, NULL, 0) == SHEAF_OK)) return NULL;
  sv_model md;
  sheaf_graph *g = NULL;
  sheaf_optimizer *opt = NULL;
  float *w = NULL;
  sv_data d;
  sv_data_make(&d);
  static sheaf_expr loss[SN * SMAXN];
  sheaf_optimizer_opts oo = {SHEAF_OPTIM_ADAM, 1e-2f, 0, 0, 0, 0, 1e-4f, 5.0f};
  if (!sv_create(ctx, &md) || !CHECK_OK(ctx, sheaf_graph_create(md.m, NULL, &g)) ||
      !CHECK_OK(ctx, sheaf_optimizer_create(md.m, &oo, &opt)))
    goto done;
  for (int step = 0; step < 6; step++) {
    int k = sv_build(g, &md, &d, loss);
    sheaf_backward_opts bo = {1.0f / (float)k, 0, NULL, NULL};
    if (!CHECK_OK(ctx, sheaf_model_zero_grad(md.m)) || !CHECK_OK(ctx, sheaf_backward(g, k, loss, &bo)) ||
        !CHECK_OK(ctx, sheaf_optimizer_step(opt, NULL)))
      goto done;
  }
  const sheaf_param ps[5] = {md.E, md.W, md.b, md.Wo, md.bo};
  size_t total = 0;
  for (int q = 0; q < 5; q++) total += sv_numel(md.m, ps[q]);
  w = malloc(total * sizeof *w);
  float *o = w;
  for (int q = 0; q < 5 && w; q++) {
    size_t c = sv_numel(md.m, ps[q]);
    memcpy(o, sheaf_model_param_data(md.m, ps[q], NULL, NULL), c * sizeof(float));
    o += c;
  }
  *n = total;
done:
  sheaf_optimizer_free(opt);
  sheaf_graph_free(g);
  sheaf_model_free(md.m);
  sheaf_ctx_free(ctx);
  return w;
}

TEST(training_on_two_threads_is_bit_identical_across_runs) {
  size_t n1, n2, n3;
  float *a = sv_train(2, &n1), *b = sv_train(2, &n2), *one = sv_train(1, &n3);
  if (CHECK(a && b && one && n1 == n2 && n1 == n3)) {
    CHECK(memcmp(a, b, n1 * sizeof(float)) == 0);
    /* one thread and two: the same training up to summation order */
    double worst = 0;
    for (size_t i = 0; i < n1; i++) worst = fmax(worst, fabs((double)a[i] - one[i]));
    CHECK(worst < 1e-3);
  }
  free(a);
  free(b);
  free(one);
}
