/*
 * test_runtime_policies.c — batched equals unbatched: small recursive models
 * written inline against the API (a TreeLSTM-like cell with a gate and a
 * classifier, an RNN over token chains) give, under policies sheaf, depth
 * and agenda, the outputs of policy none (eager, one node at a time) within
 * a relative 1e-5, on random trees, a single-node tree, a chain 200 levels
 * deep and 1000 instances in one graph; 1 and 2 threads; graph reuse after
 * reset; batching actually happens and the tree model gathers without copies.
 */
#include <stdlib.h>

#include "harness.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t urand(uint32_t n) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (uint32_t)((g_rng >> 33) % n);
}

enum { E = 8, H = 12, C = 5, V = 50 };

typedef struct tree {
  int n;
  int left[4096], right[4096], word[4096]; /* left < 0: leaf */
} tree;

static int tree_add(tree *t, int l, int r) {
  int i = t->n++;
  t->left[i] = l;
  t->right[i] = r;
  t->word[i] = (int)urand(V);
  return i;
}
static int tree_random(tree *t, int leaves) {
  if (leaves == 1) return tree_add(t, -1, -1);
  int k = 1 + (int)urand((uint32_t)leaves - 1);
  int l = tree_random(t, k), r = tree_random(t, leaves - k);
  return tree_add(t, l, r);
}
static int tree_chain(tree *t, int levels) {
  int cur = tree_add(t, -1, -1);
  for (int i = 0; i < levels; i++) cur = tree_add(t, cur, tree_add(t, -1, -1));
  return cur;
}

typedef struct params {
  sheaf_param emb, Wl, bl, Wn, bn, U, bu, Wo, bo, Wx, Wh, b;
} params;

static void make_params(sheaf_ctx *ctx, sheaf_model *m, params *p) {
  struct {
    const char *name;
    int rank;
    int64_t a, b;
    sheaf_param *out;
  } d[] = {{"emb", 2, V, E, &p->emb},       {"W_leaf", 2, E, 4 * H, &p->Wl},
           {"b_leaf", 1, 4 * H, 0, &p->bl}, {"W_node", 2, 2 * H, 4 * H, &p->Wn},
           {"b_node", 1, 4 * H, 0, &p->bn}, {"U", 2, 2 * H, H, &p->U},
           {"b_u", 1, H, 0, &p->bu},        {"W_out", 2, H, C, &p->Wo},
           {"b_out", 1, C, 0, &p->bo},      {"W_x", 2, E, H, &p->Wx},
           {"W_h", 2, H, H, &p->Wh},        {"b", 1, H, 0, &p->b}};
  for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) {
    int64_t s[2] = {d[i].a, d[i].b};
    CHECK_OK(ctx,
             sheaf_model_param(m, d[i].name, d[i].rank, s,
                               d[i].rank == 1 ? SHEAF_INIT_NORMAL : SHEAF_INIT_GLOROT, d[i].out));
  }
  CHECK_OK(ctx, sheaf_model_seed(m, 7));
}

static void tnode(sheaf_graph *g, const params *p, const tree *t, int n, sheaf_expr *h,
                  sheaf_expr *c) {
  if (t->left[n] < 0) {
    sheaf_lstm_cell(g, p->Wl, p->bl, sheaf_lookup(g, p->emb, t->word[n]), (sheaf_expr){0, 0, 0}, h,
                    c);
    return;
  }
  sheaf_expr hl, cl, hr, cr;
  tnode(g, p, t, t->left[n], &hl, &cl);
  tnode(g, p, t, t->right[n], &hr, &cr);
  sheaf_expr hh[2] = {hl, hr};
  sheaf_expr x = sheaf_concat(g, 2, hh);
  sheaf_expr h1;
  sheaf_lstm_cell(g, p->Wn, p->bn, x, sheaf_scale(g, sheaf_add(g, cl, cr), 0.5f), &h1, c);
  *h = sheaf_mul(g, h1, sheaf_sigmoid(g, sheaf_affine(g, p->U, x, p->bu)));
}

static sheaf_expr tree_model(sheaf_graph *g, const params *p, const tree *t, int root) {
  sheaf_expr h, c;
  tnode(g, p, t, root, &h, &c);
  sheaf_graph_phase(g, 1);
  sheaf_expr out = sheaf_log_softmax(g, sheaf_affine(g, p->Wo, h, p->bo));
  sheaf_graph_phase(g, 0);
  return out;
}

static sheaf_expr chain_model(sheaf_graph *g, const params *p, const tree *t, int len) {
  int64_t hs = H;
  sheaf_expr h = sheaf_zeros(g, 1, &hs);
  sheaf_param w[2] = {p->Wx, p->Wh};
  for (int i = 0; i < len; i++) {
    sheaf_expr xs[2] = {sheaf_lookup(g, p->emb, t->word[i]), h};
    h = sheaf_tanh(g, sheaf_affine_n(g, 2, w, xs, p->b));
  }
  return sheaf_softmax(g, sheaf_affine(g, p->Wo, h, p->bo));
}

typedef struct workload {
  int n;
  tree *trees;
  int *roots;
  bool chain;
} workload;

/* Runs the workload under a policy; returns n*C outputs (malloc). */
static float *run(sheaf_ctx *ctx, sheaf_model *m, const params *p, const workload *w,
                  sheaf_policy pol, int threads, sheaf_graph_stats *stats) {
  sheaf_graph_opts o = {pol, threads, NULL};
  sheaf_graph *g = NULL;
  if (!CHECK_OK(ctx, sheaf_graph_create(m, &o, &g))) return NULL;
  float *out = calloc((size_t)w->n * C, sizeof *out);
  sheaf_expr *e = calloc((size_t)w->n, sizeof *e);
  for (int rep = 0; rep < 2; rep++) { /* the second round reuses the reset graph */
    for (int i = 0; i < w->n; i++)
      e[i] = w->chain ? chain_model(g, p, &w->trees[i], w->roots[i])
                      : tree_model(g, p, &w->trees[i], w->roots[i]);
    CHECK_OK(ctx, sheaf_graph_status(g));
    CHECK_OK(ctx, sheaf_graph_flush(g));
    for (int i = 0; i < w->n; i++) {
      sheaf_value_view v;
      if (!CHECK_OK(ctx, sheaf_value(g, e[i], &v))) break;
      CHECK_EQ_INT(v.shape[0], C);
      for (int j = 0; j < C; j++) out[i * C + j] = v.data[j];
    }
    if (stats) sheaf_graph_get_stats(g, stats);
    if (rep == 0) CHECK_OK(ctx, sheaf_graph_reset(g));
  }
  free(e);
  sheaf_graph_free(g);
  return out;
}

static void compare_policies(workload *w, const char *what) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  params p;
  make_params(ctx, m, &p);
  float *ref = run(ctx, m, &p, w, SHEAF_POLICY_NONE, 1, NULL);
  REQUIRE(ref);
  const sheaf_policy pols[] = {SHEAF_POLICY_SHEAF, SHEAF_POLICY_DEPTH, SHEAF_POLICY_AGENDA};
  for (int pi = 0; pi < 3; pi++)
    for (int threads = 1; threads <= 2; threads++) {
      sheaf_graph_stats st;
      float *got = run(ctx, m, &p, w, pols[pi], threads, &st);
      if (!got) continue;
      double worst = 0;
      for (int i = 0; i < w->n * C; i++) {
        double d = fabs((double)got[i] - ref[i]) / (fabs(ref[i]) > 1 ? fabs(ref[i]) : 1);
        if (d > worst) worst = d;
      }
      if (!(worst <= 1e-5))
        th_fail(__FILE__, __LINE__, "%s: policy %s, %d threads: max rel err %.3g", what,
                sheaf_policy_name(pols[pi]), threads, worst);
      if (w->n >= 10) CHECK(st.batches * 4 < st.nodes); /* it batched */
      if (!w->chain) CHECK_EQ_SIZE(st.bytes_copied, 0); /* concat -> K-split, no copy */
      free(got);
    }
  free(ref);
  sheaf_model_free(m);
}

static workload wl_new(int n, bool chain) {
  workload w = {n, calloc((size_t)n, sizeof(tree)), calloc((size_t)n, sizeof(int)), chain};
  return w;
}
static void wl_free(workload *w) {
  free(w->trees);
  free(w->roots);
}

TEST(runtime_policies_random_trees) {
  workload w = wl_new(40, false);
  for (int i = 0; i < w.n; i++) w.roots[i] = tree_random(&w.trees[i], 1 + (int)urand(30));
  compare_policies(&w, "random trees");
  wl_free(&w);
}

TEST(runtime_policies_single_node_tree) {
  workload w = wl_new(1, false);
  w.roots[0] = tree_random(&w.trees[0], 1);
  compare_policies(&w, "single node");
  wl_free(&w);
}

TEST(runtime_policies_deep_chain) {
  workload w = wl_new(3, false);
  for (int i = 0; i < w.n; i++) w.roots[i] = tree_chain(&w.trees[i], 200);
  compare_policies(&w, "chain of 200 levels");
  wl_free(&w);
}

TEST(runtime_policies_1000_instances) {
  workload w = wl_new(1000, false);
  for (int i = 0; i < w.n; i++) w.roots[i] = tree_random(&w.trees[i], 1 + (int)urand(12));
  compare_policies(&w, "1000 instances");
  wl_free(&w);
}

TEST(runtime_policies_rnn_chains) {
  workload w = wl_new(30, true);
  for (int i = 0; i < w.n; i++) {
    w.roots[i] = 1 + (int)urand(60); /* sequence length */
    for (int t = 0; t < w.roots[i]; t++) w.trees[i].word[t] = (int)urand(V);
  }
  compare_policies(&w, "RNN chains");
  wl_free(&w);
}

/* Steady state: after two rounds on a graph, a third round of the same
 * shape (build, flush, read, reset) allocates nothing, for every policy. */
TEST(runtime_steady_state_allocates_nothing) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  params p;
  make_params(ctx, m, &p);
  workload w = wl_new(20, false);
  for (int i = 0; i < w.n; i++) w.roots[i] = tree_random(&w.trees[i], 1 + (int)urand(20));
  const sheaf_policy pols[] = {SHEAF_POLICY_SHEAF, SHEAF_POLICY_NONE, SHEAF_POLICY_DEPTH,
                               SHEAF_POLICY_AGENDA};
  for (int pi = 0; pi < 4; pi++) {
    sheaf_graph_opts o = {pols[pi], 2, NULL};
    sheaf_graph *g = NULL;
    REQUIRE_OK(ctx, sheaf_graph_create(m, &o, &g));
    sheaf_expr e[20];
    for (int round = 0; round < 3; round++) {
      long before = th_live_blocks();
      if (round == 2) th_fail_alloc_at(1); /* any allocation now fails the round */
      for (int i = 0; i < w.n; i++) e[i] = tree_model(g, &p, &w.trees[i], w.roots[i]);
      sheaf_value_view v;
      if (!CHECK_OK(ctx, sheaf_graph_flush(g)) || !CHECK_OK(ctx, sheaf_value(g, e[0], &v)))
        th_fail(__FILE__, __LINE__, "policy %s, round %d", sheaf_policy_name(pols[pi]), round);
      CHECK_OK(ctx, sheaf_graph_reset(g));
      th_fail_alloc_at(0);
      if (round == 2) CHECK_EQ_INT(th_live_blocks(), before);
    }
    sheaf_graph_free(g);
  }
  wl_free(&w);
  sheaf_model_free(m);
}
