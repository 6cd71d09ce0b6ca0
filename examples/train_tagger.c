/*
 * train_tagger.c — training on the public C API (sheaf.h and
 * sheaf_train.h only; `make examples` builds it to
 * build/<variant>/examples/train_tagger). An LSTM tagger learns a
 * synthetic task that needs context: the tag of word t is
 * (w_t + w_{t-1}) mod 3. Each batch of 32 sentences of 3..15 words is one
 * graph: every token's loss is built, sheaf_backward runs the batched
 * backward pass, Adam updates the weights. Prints the loss and accuracy of
 * each epoch and the training rate; the same seed gives the same numbers.
 *
 *   x_t = emb[w_t]   (h_t, c_t) = LSTM([x_t ; h_{t-1}], c_{t-1})   tag_t = argmax(h_t·W_out + b_out)
 */
#include <sheaf.h>
#include <sheaf_train.h>
#include <stdio.h>
#include <stdlib.h>

enum { V = 40, E = 16, H = 32, T = 3, N = 512, MAXLEN = 15, BATCH = 32, EPOCHS = 12 };

typedef struct data {
  int len[N];
  int word[N][MAXLEN], tag[N][MAXLEN];
} data;

static uint64_t rng = 0x853c49e6748fea9bull;
static int irand(int n) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (int)(rng % (uint64_t)n);
}

static int fail(sheaf_ctx *ctx, const char *what) {
  fprintf(stderr, "train_tagger: %s: %s\n", what, sheaf_ctx_last_error(ctx));
  return 1;
}

int main(void) {
  sheaf_ctx *ctx = NULL;
  char err[256];
  if (sheaf_ctx_create(NULL, &ctx, err, sizeof err)) {
    fprintf(stderr, "train_tagger: %s\n", err);
    return 1;
  }
  data *d = malloc(sizeof *d);
  if (!d) return 1;
  for (int i = 0; i < N; i++) {
    d->len[i] = 3 + irand(MAXLEN - 2);
    for (int t = 0; t < d->len[i]; t++) {
      d->word[i][t] = irand(V);
      d->tag[i][t] = (d->word[i][t] + (t ? d->word[i][t - 1] : 0)) % T;
    }
  }
  sheaf_model *m = NULL;
  sheaf_graph *g = NULL;
  sheaf_optimizer *opt = NULL;
  sheaf_param emb, W, b, Wo, bo;
  const int64_t s_emb[2] = {V, E}, s_w[2] = {E + H, 4 * H}, s_b[1] = {4 * H}, s_wo[2] = {H, T}, s_bo[1] = {T};
  sheaf_optimizer_opts oo = {SHEAF_OPTIM_ADAM, 0.02f, 0, 0, 0, 0, 0, 5.0f};
  int rc = 1;
  if (sheaf_model_create(ctx, &m) || sheaf_model_param(m, "emb", 2, s_emb, SHEAF_INIT_NORMAL, &emb) ||
      sheaf_model_param(m, "W", 2, s_w, SHEAF_INIT_GLOROT, &W) ||
      sheaf_model_param(m, "b", 1, s_b, SHEAF_INIT_ZERO, &b) ||
      sheaf_model_param(m, "W_out", 2, s_wo, SHEAF_INIT_GLOROT, &Wo) ||
      sheaf_model_param(m, "b_out", 1, s_bo, SHEAF_INIT_ZERO, &bo) || sheaf_model_seed(m, 1) ||
      sheaf_graph_create(m, NULL, &g) || sheaf_optimizer_create(m, &oo, &opt)) {
    rc = fail(ctx, "setup");
    goto done;
  }
  const int64_t zero_shape[1] = {H};
  static sheaf_expr logits[BATCH * MAXLEN], loss[BATCH * MAXLEN];
  uint64_t t0 = sheaf_time_ns();
  for (int ep = 0; ep < EPOCHS; ep++) {
    double sum = 0;
    long tokens = 0, right = 0;
    for (int i0 = 0; i0 < N; i0 += BATCH) {
      sheaf_graph_reset(g);
      int k = 0;
      for (int i = i0; i < i0 + BATCH; i++) {
        sheaf_expr h = sheaf_zeros(g, 1, zero_shape), c = {0, 0, 0};
        for (int t = 0; t < d->len[i]; t++, k++) {
          sheaf_expr xh[2] = {sheaf_lookup(g, emb, d->word[i][t]), h};
          sheaf_lstm_cell(g, W, b, sheaf_concat(g, 2, xh), c, &h, &c);
          logits[k] = sheaf_affine(g, Wo, h, bo);
          loss[k] = sheaf_nll(g, logits[k], d->tag[i][t]);
        }
      }
      sheaf_model_zero_grad(m);
      sheaf_backward_opts bo2 = {1.0f / (float)k, 0, NULL, NULL};
      if (sheaf_backward(g, k, loss, &bo2) || sheaf_optimizer_step(opt, NULL)) {
        rc = fail(ctx, "training");
        goto done;
      }
      k = 0;
      for (int i = i0; i < i0 + BATCH; i++)
        for (int t = 0; t < d->len[i]; t++, k++) {
          sheaf_value_view lv, zv;
          if (sheaf_value(g, loss[k], &lv) || sheaf_value(g, logits[k], &zv)) {
            rc = fail(ctx, "reading");
            goto done;
          }
          int best = 0;
          for (int j = 1; j < T; j++)
            if (zv.data[j] > zv.data[best]) best = j;
          sum += lv.data[0];
          right += best == d->tag[i][t];
          tokens++;
        }
    }
    printf("epoch %2d: loss %.4f, accuracy %.3f (while training)\n", ep + 1, sum / (double)tokens,
           (double)right / (double)tokens);
  }
  double s = (double)(sheaf_time_ns() - t0) * 1e-9;
  printf("%d sentences x %d epochs in %.2f s: %.0f sentences/s\n", N, EPOCHS, s, N * EPOCHS / s);
  rc = 0;
done:
  sheaf_optimizer_free(opt);
  sheaf_graph_free(g);
  sheaf_model_free(m);
  sheaf_ctx_free(ctx);
  free(d);
  return rc;
}
