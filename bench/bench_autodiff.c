/*
 * bench_autodiff.c — the backward pass against the forward on two model
 * shapes (synthetic data, H = 128): a binary TreeLSTM (gates as column
 * slices of affine_n, 64 trees of 2..31 leaves per batch) and an LSTM
 * tagger (lstm_cell over [x ; h], a 17-tag classifier per token, 64
 * sentences of 5..39 tokens). Per batch: build + flush (forward), then
 * sheaf_backward; the minimum over the repetitions, and their ratio.
 *
 *   make bench-autodiff BENCH_ARGS='--threads 1 --reps 5'
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sheaf.h"
#include "sheaf_train.h"

enum { V = 1000, D = 128, H = 128, C = 5, TAGS = 17, MAXN = 64, MAXL = 40, B = 64, NB = 4 };

static uint64_t g_s = 88172645463325252ull;
static int irand(int n) {
  g_s ^= g_s << 13, g_s ^= g_s >> 7, g_s ^= g_s << 17;
  return (int)(g_s % (uint64_t)n);
}

typedef struct tree {
  int n, left[MAXN], right[MAXN], word[MAXN], label;
} tree;

static int tree_build(tree *t, int leaves) {
  int id;
  if (leaves == 1) {
    id = t->n++;
    t->left[id] = -1;
  } else {
    int l = 1 + irand(leaves - 1);
    int a = tree_build(t, l), b = tree_build(t, leaves - l);
    id = t->n++;
    t->left[id] = a;
    t->right[id] = b;
  }
  t->word[id] = irand(V);
  return id;
}

typedef struct net {
  sheaf_param E, Wleaf, bleaf, Ul, Ur, bn, Wo, bo, Wl, bl, Wt, bt;
} net;

static sheaf_expr gate(sheaf_graph *g, sheaf_expr z, int k, int th) {
  sheaf_expr x = sheaf_slice(g, z, k * H, (k + 1) * H);
  return th ? sheaf_tanh(g, x) : sheaf_sigmoid(g, x);
}

static sheaf_expr tree_loss(sheaf_graph *g, const net *p, const tree *t) {
  sheaf_expr h[MAXN], c[MAXN];
  for (int i = 0; i < t->n; i++) {
    if (t->left[i] < 0) {
      sheaf_expr z = sheaf_affine(g, p->Wleaf, sheaf_lookup(g, p->E, t->word[i]), p->bleaf);
      c[i] = sheaf_mul(g, gate(g, z, 0, 0), gate(g, z, 2, 1));
      h[i] = sheaf_mul(g, gate(g, z, 1, 0), sheaf_tanh(g, c[i]));
    } else {
      sheaf_param W[2] = {p->Ul, p->Ur};
      sheaf_expr x[2] = {h[t->left[i]], h[t->right[i]]};
      sheaf_expr z = sheaf_affine_n(g, 2, W, x, p->bn);
      sheaf_expr s3[3] = {sheaf_mul(g, gate(g, z, 0, 0), gate(g, z, 4, 1)),
                          sheaf_mul(g, gate(g, z, 1, 0), c[t->left[i]]),
                          sheaf_mul(g, gate(g, z, 2, 0), c[t->right[i]])};
      c[i] = sheaf_sum_n(g, 3, s3);
      h[i] = sheaf_mul(g, gate(g, z, 3, 0), sheaf_tanh(g, c[i]));
    }
  }
  return sheaf_nll(g, sheaf_affine(g, p->Wo, h[t->n - 1], p->bo), t->label);
}

static int fail(sheaf_ctx *ctx) {
  fprintf(stderr, "bench_autodiff: %s\n", sheaf_ctx_last_error(ctx));
  return 1;
}

int main(int argc, char **argv) {
  int threads = 1, reps = 5;
  for (int i = 1; i < argc; i++) {
    if (i + 1 < argc && strcmp(argv[i], "--threads") == 0) threads = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--reps") == 0) reps = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: bench_autodiff [--threads T] [--reps R]\n");
      return 2;
    }
  }
  sheaf_ctx_options co = {0};
  co.threads = threads;
  sheaf_ctx *ctx = NULL;
  char err[256];
  if (sheaf_ctx_create(&co, &ctx, err, sizeof err)) {
    fprintf(stderr, "bench_autodiff: %s\n", err);
    return 1;
  }
  sheaf_model *m = NULL;
  if (sheaf_model_create(ctx, &m)) return fail(ctx);
  net p;
  struct {
    sheaf_param *p;
    const char *name;
    int rank;
    int64_t a, b;
  } decl[] = {{&p.E, "E", 2, V, D},          {&p.Wleaf, "Wleaf", 2, D, 3 * H}, {&p.bleaf, "bleaf", 1, 3 * H, 0},
              {&p.Ul, "Ul", 2, H, 5 * H},    {&p.Ur, "Ur", 2, H, 5 * H},       {&p.bn, "bn", 1, 5 * H, 0},
              {&p.Wo, "Wo", 2, H, C},        {&p.bo, "bo", 1, C, 0},           {&p.Wl, "Wl", 2, D + H, 4 * H},
              {&p.bl, "bl", 1, 4 * H, 0},    {&p.Wt, "Wt", 2, H, TAGS},        {&p.bt, "bt", 1, TAGS, 0}};
  for (size_t i = 0; i < sizeof decl / sizeof *decl; i++) {
    int64_t s[2] = {decl[i].a, decl[i].b};
    if (sheaf_model_param(m, decl[i].name, decl[i].rank, s, SHEAF_INIT_GLOROT, decl[i].p)) return fail(ctx);
  }
  tree *trees = calloc(B * NB, sizeof *trees);
  static int len[B * NB], word[B * NB][MAXL], tag[B * NB][MAXL];
  static sheaf_expr loss[B * MAXL];
  for (int i = 0; i < B * NB; i++) {
    tree_build(&trees[i], 2 + irand(30));
    trees[i].label = irand(C);
    len[i] = 5 + irand(MAXL - 5);
    for (int t = 0; t < len[i]; t++) word[i][t] = irand(V), tag[i][t] = irand(TAGS);
  }
  sheaf_graph *g = NULL;
  if (sheaf_graph_create(m, NULL, &g)) return fail(ctx);
  printf("bench_autodiff: %d thread(s), min of %d x %d batches of %d, H = %d\n", threads, reps, NB, B, H);
  printf("%-12s %12s %12s %8s\n", "model", "forward ms", "backward ms", "bwd/fwd");
  const int64_t hs[1] = {H};
  for (int model = 0; model < 2; model++) {
    double best_f = 1e30, best_b = 1e30;
    for (int r = 0; r < reps; r++)
      for (int bt = 0; bt < NB; bt++) {
        sheaf_graph_reset(g);
        int k = 0;
        uint64_t t0 = sheaf_time_ns();
        for (int i = bt * B; i < bt * B + B; i++) {
          if (model == 0) {
            loss[k++] = tree_loss(g, &p, &trees[i]);
            continue;
          }
          sheaf_expr h = sheaf_zeros(g, 1, hs), c = {0, 0, 0};
          for (int t = 0; t < len[i]; t++) {
            sheaf_expr xh[2] = {sheaf_lookup(g, p.E, word[i][t]), h};
            sheaf_lstm_cell(g, p.Wl, p.bl, sheaf_concat(g, 2, xh), c, &h, &c);
            loss[k++] = sheaf_nll(g, sheaf_affine(g, p.Wt, h, p.bt), tag[i][t]);
          }
        }
        if (sheaf_graph_flush(g)) return fail(ctx);
        uint64_t t1 = sheaf_time_ns();
        sheaf_backward_opts bo = {1.0f / (float)k, 0, NULL, NULL};
        if (sheaf_model_zero_grad(m) || sheaf_backward(g, k, loss, &bo)) return fail(ctx);
        uint64_t t2 = sheaf_time_ns();
        double f = (double)(t1 - t0) * 1e-6, b = (double)(t2 - t1) * 1e-6;
        if (f < best_f) best_f = f;
        if (b < best_b) best_b = b;
      }
    printf("%-12s %12.2f %12.2f %8.2f\n", model == 0 ? "treelstm" : "lstm-tagger", best_f, best_b, best_b / best_f);
  }
  free(trees);
  sheaf_graph_free(g);
  sheaf_model_free(m);
  sheaf_ctx_free(ctx);
  return 0;
}
