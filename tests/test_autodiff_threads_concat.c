/*
 * test_autodiff_threads_concat.c — the backward of a bucket of concats
 * and of the lookups they read, each split over the pool by columns
 * (rules.c, bw_CONCAT and bw_LOOKUP; grouped in autodiff.c): 320
 * losses nll(concat of looked-up rows) at one depth, rows shared between
 * nodes and within one (concat(x, x)), some concats nested (not grouped
 * with their readers). The embedding's gradient is checked against a
 * double reference (softmax minus one-hot, scattered by hand), and is
 * bit-identical on 1 and 2 threads and across 2-thread runs: each
 * gradient element gets its adds in the same order on any thread count.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "sheaf_train.h"

enum { CV = 7, CE = 48, CN = 320 };

/* node i: its rows (kind 0: a, b; kind 1: a, a; kind 2: concat(a, b), c);
 * the nested ones last (each ends a bucket: 200 first ones make one) */
static void cc_rows(int i, int *kind, int r[3]) {
  *kind = i < 200 ? i % 2 : 2;
  r[0] = (i * 5 + 1) % CV;
  r[1] = *kind == 1 ? r[0] : (i * 3 + 2) % CV;
  r[2] = (i + 4) % CV;
}

static int cc_label(int i, int width) { return (i * 11) % width; }

/* The embedding's gradient after one backward on `threads`; *ref: the
 * double reference from the same weights (NULL: not wanted). */
static float *cc_grad(int threads, double *ref) {
  sheaf_ctx_options co = {0};
  co.threads = threads;
  sheaf_ctx *ctx = NULL;
  if (!CHECK(sheaf_ctx_create(&co, &ctx, NULL, 0) == SHEAF_OK)) return NULL;
  sheaf_model *m = NULL;
  sheaf_graph *g = NULL;
  float *out = NULL;
  static sheaf_expr loss[CN];
  if (!CHECK_OK(ctx, sheaf_model_create(ctx, &m))) goto done;
  sheaf_param emb = th_param(ctx, m, "emb", 2, CV, CE);
  if (!CHECK_OK(ctx, sheaf_model_seed(m, 3)) || !CHECK_OK(ctx, sheaf_graph_create(m, NULL, &g))) goto done;
  for (int i = 0; i < CN; i++) {
    int kind, r[3];
    cc_rows(i, &kind, r);
    sheaf_expr two[2] = {sheaf_lookup(g, emb, r[0]), sheaf_lookup(g, emb, r[1])};
    sheaf_expr x = sheaf_concat(g, 2, two);
    if (kind == 2) {
      sheaf_expr nest[2] = {x, sheaf_lookup(g, emb, r[2])};
      x = sheaf_concat(g, 2, nest);
    }
    loss[i] = sheaf_nll(g, x, cc_label(i, kind == 2 ? 3 * CE : 2 * CE));
  }
  sheaf_backward_opts bo = {1.0f / CN, 0, NULL, NULL};
  if (!CHECK_OK(ctx, sheaf_graph_flush(g)) || !CHECK_OK(ctx, sheaf_model_zero_grad(m)) ||
      !CHECK_OK(ctx, sheaf_backward(g, CN, loss, &bo)))
    goto done;
  const float *gr = sheaf_param_grad(m, emb), *w = sheaf_model_param_data(m, emb, NULL, NULL);
  if (!CHECK(gr && w)) goto done;
  out = malloc(CV * CE * sizeof *out);
  if (!CHECK(out)) goto done;
  memcpy(out, gr, CV * CE * sizeof *out);
  if (ref) {
    memset(ref, 0, CV * CE * sizeof *ref);
    for (int i = 0; i < CN; i++) {
      int kind, r[3];
      cc_rows(i, &kind, r);
      int pieces = kind == 2 ? 3 : 2, width = pieces * CE, y = cc_label(i, width);
      double z[3 * CE], mx = -1e300, sum = 0;
      for (int j = 0; j < width; j++) {
        z[j] = w[r[j / CE] * CE + j % CE];
        mx = fmax(mx, z[j]);
      }
      for (int j = 0; j < width; j++) sum += exp(z[j] - mx);
      for (int j = 0; j < width; j++)
        ref[r[j / CE] * CE + j % CE] += (exp(z[j] - mx) / sum - (j == y)) / CN;
    }
  }
done:
  sheaf_graph_free(g);
  sheaf_model_free(m);
  sheaf_ctx_free(ctx);
  return out;
}

TEST(concat_and_lookup_buckets_on_two_threads_match_reference_and_one_thread_bitwise) {
  static double ref[CV * CE];
  float *two = cc_grad(2, ref), *again = cc_grad(2, NULL), *one = cc_grad(1, NULL);
  if (CHECK(two && again && one)) {
    double scale = 0, worst = 0; /* (comparisons: an fmax reduction crashes AArch64 gcc 12) */
    for (int i = 0; i < CV * CE; i++) {
      double m = fabs(ref[i]), d = fabs(two[i] - ref[i]);
      if (m > scale) scale = m;
      if (d > worst) worst = d;
    }
    CHECK(scale > 0);
    CHECK(worst <= 1e-5 * scale);
    CHECK(memcmp(two, again, CV * CE * sizeof(float)) == 0);
    CHECK(memcmp(two, one, CV * CE * sizeof(float)) == 0);
  }
  free(two);
  free(again);
  free(one);
}
