/*
 * test_autodiff_threads_lanes.c — the backward's lanes (src/train/lanes.c):
 * a depth's GEMM buckets run side by side on the pool, each on one thread.
 * A TreeLSTM of fused cells (hidden 64: every level one bucket, split in
 * two halves by rows) and a two-direction LSTM (two buckets a depth) run
 * their second pass (the forward kept the gates) as lanes on 2 threads:
 * the parameters' gradients equal one thread's within 1e-5 of their scale,
 * and two 2-thread runs give the same bits; the LSTM's two dW GEMMs (and
 * the bias sums) at the end of the pass run side by side too. Two affines of different
 * weights reading the same inputs at one depth share a node: the depth
 * runs serially (no lanes), with the same gradients as one thread; over
 * their own inputs, one with 32x the other's work, the large one runs as
 * two halves beside the small one (itself in halves: four lanes). The
 * TreeLSTM's forward on 2 threads (a large level: two halves of its rows,
 * src/runtime/exec_tree_lstm.c) gives one thread's values bit for bit, on
 * an inference graph and on a training one (gates kept).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "sheaf_train.h"
#include "train/train.h"

enum { LV = 40, LE = 16, LH = 64, LC = 5, LN = 40, LMAXL = 16, LP = 8 };

typedef struct ln_model {
  sheaf_model *m;
  sheaf_param p[LP];
  int np;
} ln_model;

static uint64_t ln_rng;
static int ln_irand(int n) { return (int)((th_frand(&ln_rng) + 1.0f) * 0.5f * (float)n) % n; }

/* The gradients of every parameter, in order (malloc'd; *n floats). */
static float *ln_grads(const ln_model *md, size_t *n) {
  size_t total = 0;
  for (int q = 0; q < md->np; q++) {
    int rank;
    const int64_t *shape;
    sheaf_model_param_data(md->m, md->p[q], &rank, &shape);
    total += (size_t)(rank == 2 ? shape[0] * shape[1] : shape[0]);
  }
  float *w = malloc(total * sizeof *w), *o = w;
  for (int q = 0; q < md->np && w; q++) {
    int rank;
    const int64_t *shape;
    sheaf_model_param_data(md->m, md->p[q], &rank, &shape);
    size_t c = (size_t)(rank == 2 ? shape[0] * shape[1] : shape[0]);
    memcpy(o, sheaf_param_grad(md->m, md->p[q]), c * sizeof(float));
    o += c;
  }
  *n = total;
  return w;
}

typedef struct ln_state {
  sheaf_expr h, c;
} ln_state;

/* A random binary tree of `leaves` words: the root's state. */
static ln_state ln_tree(sheaf_graph *g, const ln_model *md, int leaves) {
  ln_state s = {{0}, {0}};
  if (leaves == 1) {
    sheaf_expr x = sheaf_lookup(g, md->p[0], ln_irand(LV));
    sheaf_tree_lstm_cell(g, md->p[1], md->p[2], x, (sheaf_expr){0}, (sheaf_expr){0}, &s.h, &s.c);
    return s;
  }
  int left = 1 + ln_irand(leaves - 1);
  ln_state l = ln_tree(g, md, left), r = ln_tree(g, md, leaves - left);
  sheaf_expr hh[2] = {l.h, r.h};
  sheaf_tree_lstm_cell(g, md->p[3], md->p[4], sheaf_concat(g, 2, hh), l.c, r.c, &s.h, &s.c);
  return s;
}

/* model 0: TreeLSTM; 1: two LSTM directions over sequences; 2: two affines
 * of different weights over the same inputs at one depth; 3: the same over
 * their own inputs, one with 32x the other's work. Builds the
 * batch's losses; returns their count. */
static int ln_build(sheaf_graph *g, const ln_model *md, int model, sheaf_expr *loss) {
  if (sheaf_graph_reset(g)) return 0;
  ln_rng = 0x13198a2e03707344ull;
  int k = 0;
  for (int i = 0; i < LN; i++) {
    if (model == 0) {
      ln_state s = ln_tree(g, md, 1 + ln_irand(LMAXL));
      loss[k++] = sheaf_nll(g, sheaf_affine(g, md->p[5], s.h, md->p[6]), ln_irand(LC));
    } else if (model == 1) {
      int len = 2 + ln_irand(LMAXL);
      const int64_t zs[1] = {LH};
      sheaf_expr hd[2];
      for (int d = 0; d < 2; d++) {
        sheaf_expr h = sheaf_zeros(g, 1, zs), c = {0, 0, 0};
        for (int t = 0; t < len; t++) {
          sheaf_expr xh[2] = {sheaf_lookup(g, md->p[0], (i * 7 + (d ? len - 1 - t : t)) % LV), h};
          sheaf_lstm_cell(g, md->p[1 + 2 * d], md->p[2 + 2 * d], sheaf_concat(g, 2, xh), c, &h, &c);
        }
        hd[d] = h;
      }
      loss[k++] = sheaf_nll(g, sheaf_affine(g, md->p[5], sheaf_concat(g, 2, hd), md->p[6]), ln_irand(LC));
    } else { /* 2: both read x; 3: each its own, W2 far smaller */
      sheaf_expr x = sheaf_lookup(g, md->p[0], ln_irand(LV));
      sheaf_expr x2 = model == 2 ? x : sheaf_lookup(g, md->p[0], ln_irand(LV));
      sheaf_expr y[2] = {sheaf_tanh(g, sheaf_affine(g, md->p[1], x, md->p[2])),
                         sheaf_tanh(g, sheaf_affine(g, md->p[3], x2, md->p[4]))};
      loss[k++] = sheaf_nll(g, sheaf_affine(g, md->p[5], sheaf_concat(g, 2, y), md->p[6]), ln_irand(LC));
    }
  }
  return k;
}

/* Two backward passes of `model` on `threads` (the second after the
 * forward kept the gates); the second's gradients and stats. */
static float *ln_run(int model, int threads, size_t *n, sh_bw_stats *stats) {
  *n = 0;
  sheaf_ctx_options co = {0};
  co.threads = threads;
  co.allocator = th_allocator();
  sheaf_ctx *ctx = NULL;
  if (!CHECK(sheaf_ctx_create(&co, &ctx, NULL, 0) == SHEAF_OK)) return NULL;
  ln_model md = {0};
  sheaf_graph *g = NULL;
  float *w = NULL;
  static sheaf_expr loss[LN];
  if (!CHECK_OK(ctx, sheaf_model_create(ctx, &md.m))) goto done;
  /* W1 [in, out], W2 [in2, out2], Wo [top, LC] by model */
  int64_t in = model == 1 ? LE + LH : LE, out = model == 0 ? 3 * LH : 4 * LH;
  int64_t in2 = model == 0 ? 2 * LH : in, out2 = model == 0 ? 5 * LH : model == 3 ? 8 : out;
  int64_t top = model == 0 ? LH : model == 1 ? 2 * LH : out + out2;
  md.p[0] = th_param(ctx, md.m, "emb", 2, LV, LE);
  md.p[1] = th_param(ctx, md.m, "W1", 2, in, out);
  md.p[2] = th_param(ctx, md.m, "b1", 1, out, 0);
  md.p[3] = th_param(ctx, md.m, "W2", 2, in2, out2);
  md.p[4] = th_param(ctx, md.m, "b2", 1, out2, 0);
  md.p[5] = th_param(ctx, md.m, "Wo", 2, top, LC);
  md.p[6] = th_param(ctx, md.m, "bo", 1, LC, 0);
  md.np = 7;
  if (!CHECK_OK(ctx, sheaf_model_seed(md.m, 11)) || !CHECK_OK(ctx, sheaf_graph_create(md.m, NULL, &g))) goto done;
  for (int pass = 0; pass < 2; pass++) {
    int k = ln_build(g, &md, model, loss);
    sheaf_backward_opts bo = {1.0f / (float)k, 0, NULL, NULL};
    if (!CHECK(k == LN) || !CHECK_OK(ctx, sheaf_model_zero_grad(md.m)) ||
        !CHECK_OK(ctx, sh_backward_stats(g, k, loss, &bo, stats)))
      goto done;
  }
  w = ln_grads(&md, n);
  CHECK(w != NULL);
done:
  sheaf_graph_free(g);
  sheaf_model_free(md.m);
  sheaf_ctx_free(ctx);
  return w;
}

/* Runs `model` on 1 thread and twice on 2; checks the lanes ran (or not)
 * and the gradients; *out (may be NULL): the 2-thread pass's stats. */
static void ln_check_stats(int model, bool want_lanes, sh_bw_stats *out) {
  size_t n1 = 0, n2 = 0, n3 = 0;
  sh_bw_stats s1, s2, s3;
  if (!out) out = &s2;
  float *one = ln_run(model, 1, &n1, &s1), *two = ln_run(model, 2, &n2, &s2), *again = ln_run(model, 2, &n3, &s3);
  if (CHECK(one && two && again && n1 == n2 && n1 == n3)) {
    CHECK_EQ_INT(s1.lane_depths, 0); /* one thread: never */
    if (want_lanes) CHECK(s2.lane_depths > (model == 3 ? 0u : 3u) && s2.lanes >= 2 * s2.lane_depths);
    else CHECK_EQ_INT(s2.lane_depths, 0);
    CHECK_EQ_INT(s1.dw_lanes, 0);
    CHECK_EQ_INT(s2.dw_lanes, model == 1); /* two directions: two equal dW GEMMs */
    CHECK_EQ_INT(s1.gemm_buckets, s2.gemm_buckets);
    double scale = 0, worst = 0;
    for (size_t i = 0; i < n1; i++) scale = fmax(scale, fabs((double)one[i]));
    for (size_t i = 0; i < n1; i++) {
      double d = fabs((double)two[i] - one[i]);
      if (d > worst) worst = d;
    }
    CHECK(scale > 0);
    CHECK(worst <= 1e-5 * scale);
    CHECK(memcmp(two, again, n1 * sizeof(float)) == 0);
  }
  *out = s2;
  free(one);
  free(two);
  free(again);
}

static void ln_check(int model, bool want_lanes) { ln_check_stats(model, want_lanes, NULL); }

TEST(tree_lstm_levels_run_as_two_lanes_equal_to_one_thread) { ln_check(0, true); }

TEST(lstm_directions_run_side_by_side_equal_to_one_thread) { ln_check(1, true); }

TEST(buckets_sharing_an_input_do_not_run_as_lanes) { ln_check(2, false); }

/* The large bucket runs as two halves beside the small one, which, the
 * odd one out, is two halves too: four lanes, two a thread. */
TEST(a_bucket_with_most_of_a_depths_work_is_split_beside_the_others) {
  sh_bw_stats s;
  memset(&s, 0, sizeof s);
  ln_check_stats(3, true, &s);
  CHECK_EQ_INT(s.lane_depths, 1);
  CHECK_EQ_INT(s.lanes, 4);
}

/* Every tree's root h and c after a flush on `threads` (malloc'd), on a
 * graph that trained once (train) or never. */
static float *ln_forward(int threads, bool train, size_t *n) {
  *n = 0;
  sheaf_ctx_options co = {0};
  co.threads = threads;
  co.allocator = th_allocator();
  sheaf_ctx *ctx = NULL;
  if (!CHECK(sheaf_ctx_create(&co, &ctx, NULL, 0) == SHEAF_OK)) return NULL;
  ln_model md = {0};
  sheaf_graph *g = NULL;
  float *out = NULL;
  static sheaf_expr loss[LN];
  if (!CHECK_OK(ctx, sheaf_model_create(ctx, &md.m))) goto done;
  md.p[0] = th_param(ctx, md.m, "emb", 2, LV, LE);
  md.p[1] = th_param(ctx, md.m, "W_leaf", 2, LE, 3 * LH);
  md.p[2] = th_param(ctx, md.m, "b_leaf", 1, 3 * LH, 0);
  md.p[3] = th_param(ctx, md.m, "W_node", 2, 2 * LH, 5 * LH);
  md.p[4] = th_param(ctx, md.m, "b_node", 1, 5 * LH, 0);
  md.p[5] = th_param(ctx, md.m, "Wo", 2, LH, LC);
  md.p[6] = th_param(ctx, md.m, "bo", 1, LC, 0);
  md.np = 7;
  if (!CHECK_OK(ctx, sheaf_model_seed(md.m, 3)) || !CHECK_OK(ctx, sheaf_graph_create(md.m, NULL, &g))) goto done;
  if (train) {
    int k = ln_build(g, &md, 0, loss);
    if (!CHECK(k == LN) || !CHECK_OK(ctx, sheaf_backward(g, k, loss, NULL))) goto done;
  }
  if (!CHECK_OK(ctx, sheaf_graph_reset(g))) goto done;
  ln_rng = 0x452821e638d01377ull;
  sheaf_expr hc[2 * LN];
  for (int i = 0; i < LN; i++) {
    ln_state s = ln_tree(g, &md, 1 + ln_irand(2 * LMAXL));
    hc[2 * i] = s.h, hc[2 * i + 1] = s.c;
  }
  if (!CHECK_OK(ctx, sheaf_graph_flush(g))) goto done;
  out = malloc(2 * LN * LH * sizeof *out);
  for (int i = 0; out && i < 2 * LN; i++) {
    sheaf_value_view v;
    if (!CHECK_OK(ctx, sheaf_value(g, hc[i], &v))) {
      free(out);
      out = NULL;
      break;
    }
    memcpy(out + (size_t)i * LH, v.data, LH * sizeof *out);
  }
  if (out) *n = 2 * LN * LH;
done:
  sheaf_graph_free(g);
  sheaf_model_free(md.m);
  sheaf_ctx_free(ctx);
  return out;
}

TEST(tree_lstm_forward_halves_equal_one_thread_bitwise) {
  for (int train = 0; train < 2; train++) {
    size_t n1 = 0, n2 = 0;
    float *one = ln_forward(1, train, &n1), *two = ln_forward(2, train, &n2);
    if (CHECK(one && two && n1 == n2 && n1 > 0)) {
      double scale = 0;
      for (size_t i = 0; i < n1; i++) scale = fmax(scale, fabs((double)one[i]));
      CHECK(scale > 0.01);
      CHECK(memcmp(one, two, n1 * sizeof(float)) == 0);
    }
    free(one);
    free(two);
  }
}

/* Every allocation of a 2-thread pass with lanes failing in turn (the
 * lanes' arenas and workspaces are new in that pass): SHEAF_ERR_NOMEM, no
 * crash, no leak, until the pass succeeds. */
TEST(lanes_out_of_memory_is_an_error) {
  sheaf_ctx_options co = {0};
  co.threads = 2;
  co.allocator = th_allocator();
  sheaf_ctx *ctx = NULL;
  REQUIRE(sheaf_ctx_create(&co, &ctx, NULL, 0) == SHEAF_OK);
  ln_model md = {0};
  static sheaf_expr loss[LN];
  bool succeeded = false;
  long failed = 0;
  if (CHECK_OK(ctx, sheaf_model_create(ctx, &md.m))) {
    md.p[0] = th_param(ctx, md.m, "emb", 2, LV, LE);
    md.p[1] = th_param(ctx, md.m, "W1", 2, LE + LH, 4 * LH);
    md.p[2] = th_param(ctx, md.m, "b1", 1, 4 * LH, 0);
    md.p[3] = th_param(ctx, md.m, "W2", 2, LE + LH, 4 * LH);
    md.p[4] = th_param(ctx, md.m, "b2", 1, 4 * LH, 0);
    md.p[5] = th_param(ctx, md.m, "Wo", 2, 2 * LH, LC);
    md.p[6] = th_param(ctx, md.m, "bo", 1, LC, 0);
    md.np = 7;
    CHECK_OK(ctx, sheaf_model_seed(md.m, 5));
    for (long n = 1; n < 2000 && !succeeded; n++) {
      sheaf_graph *g = NULL;
      if (!CHECK_OK(ctx, sheaf_graph_create(md.m, NULL, &g))) break;
      int k = ln_build(g, &md, 1, loss); /* the first pass keeps nothing: no lanes */
      bool ok = CHECK(k == LN) && CHECK_OK(ctx, sheaf_backward(g, k, loss, NULL)) &&
                CHECK(ln_build(g, &md, 1, loss) == k) && CHECK_OK(ctx, sheaf_graph_flush(g)) &&
                CHECK_OK(ctx, sheaf_model_zero_grad(md.m));
      if (ok) {
        sh_bw_stats s;
        th_fail_alloc_at(n);
        sheaf_status st = sh_backward_stats(g, k, loss, NULL, &s);
        th_fail_alloc_at(0);
        if (st == SHEAF_OK) succeeded = CHECK(s.lane_depths > 0 && s.dw_lanes == 1);
        else failed += CHECK_EQ_INT(st, SHEAF_ERR_NOMEM);
      }
      sheaf_graph_free(g);
      if (!ok) break;
    }
  }
  CHECK(succeeded);
  CHECK(failed > 4); /* the pass allocates: the lanes' arenas and workspaces among them */
  sheaf_model_free(md.m);
  sheaf_ctx_free(ctx);
}
