/*
 * test_autodiff_models.c — gradients of model-shaped graphs: a binary
 * TreeLSTM (lookup leaves, affine_n over both children, gates as column
 * slices, a classifier on the root) and an LSTM tagger (lstm_cell over
 * [x_t ; h_prev] as a concat, a tag classifier per token), each with the
 * negative log-likelihood loss. Every parameter's gradient against
 * central finite differences of the same model written in double (its
 * loss checked equal to the graph's first; 1e-3 relative, floor 1e-2), and the
 * gradients of 64 instances of different tree shapes / sequence lengths
 * in one graph (batched: one GEMM per bucket) equal to the per-instance
 * gradients summed within 1e-5 (relative, floor 1), under policies sheaf,
 * none and agenda; and the backward's GEMM buckets are the forward's.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "sheaf_train.h"
#include "train/train.h"

enum { V = 11, D = 4, H = 4, C = 3, MAXN = 16 };

typedef struct tm_inst {
  int n;              /* tree: nodes in post-order (leaves: left = -1); sequence: length */
  int left[MAXN], right[MAXN], word[MAXN], label[MAXN];
} tm_inst;

typedef struct tm_model {
  sheaf_model *m;
  sheaf_param E, Wleaf, bleaf, Ul, Ur, bn, Wout, bout, Wl, bl;
} tm_model;

static uint64_t g_rng = 0x51ed2701f3a5c2b9ull;
static int irand(int n) { return (int)((th_frand(&g_rng) + 1.0f) * 0.5f * (float)n) % n; }

/* A random binary tree of `leaves` leaves, post-order. */
static int tree_build(tm_inst *t, int leaves) {
  int id;
  if (leaves == 1) {
    id = t->n++;
    t->left[id] = t->right[id] = -1;
  } else {
    int l = 1 + irand(leaves - 1);
    int a = tree_build(t, l), b = tree_build(t, leaves - l);
    id = t->n++;
    t->left[id] = a;
    t->right[id] = b;
  }
  t->word[id] = irand(V);
  t->label[id] = irand(C);
  return id;
}

static void seq_make(tm_inst *t, int len) {
  t->n = len;
  for (int i = 0; i < len; i++) {
    t->word[i] = irand(V);
    t->label[i] = irand(C);
  }
}

static sheaf_expr gate(sheaf_graph *g, sheaf_expr z, int k, bool tanh_gate) {
  sheaf_expr s = sheaf_slice(g, z, k * H, (k + 1) * H);
  return tanh_gate ? sheaf_tanh(g, s) : sheaf_sigmoid(g, s);
}

/* TreeLSTM loss of one tree: the root's label. */
static sheaf_expr tree_loss(sheaf_graph *g, const tm_model *md, const tm_inst *t) {
  sheaf_expr h[MAXN], c[MAXN];
  for (int i = 0; i < t->n; i++) {
    if (t->left[i] < 0) {
      sheaf_expr z = sheaf_affine(g, md->Wleaf, sheaf_lookup(g, md->E, t->word[i]), md->bleaf);
      c[i] = sheaf_mul(g, gate(g, z, 0, false), gate(g, z, 2, true));
      h[i] = sheaf_mul(g, gate(g, z, 1, false), sheaf_tanh(g, c[i]));
    } else {
      sheaf_param W[2] = {md->Ul, md->Ur};
      sheaf_expr x[2] = {h[t->left[i]], h[t->right[i]]};
      sheaf_expr z = sheaf_affine_n(g, 2, W, x, md->bn);
      sheaf_expr s[3] = {sheaf_mul(g, gate(g, z, 0, false), gate(g, z, 4, true)),
                         sheaf_mul(g, gate(g, z, 1, false), c[t->left[i]]),
                         sheaf_mul(g, gate(g, z, 2, false), c[t->right[i]])};
      c[i] = sheaf_sum_n(g, 3, s);
      h[i] = sheaf_mul(g, gate(g, z, 3, false), sheaf_tanh(g, c[i]));
    }
  }
  int root = t->n - 1;
  return sheaf_nll(g, sheaf_affine(g, md->Wout, h[root], md->bout), t->label[root]);
}

/* LSTM tagger loss of one sentence: Σ over tokens. */
static sheaf_expr seq_loss(sheaf_graph *g, const tm_model *md, const tm_inst *t) {
  sheaf_expr h = sheaf_zeros(g, 1, (const int64_t[]){H}), c = {0, 0, 0}, l[MAXN];
  for (int i = 0; i < t->n; i++) {
    sheaf_expr xh[2] = {sheaf_lookup(g, md->E, t->word[i]), h};
    sheaf_lstm_cell(g, md->Wl, md->bl, sheaf_concat(g, 2, xh), c, &h, &c);
    l[i] = sheaf_nll(g, sheaf_affine(g, md->Wout, h, md->bout), t->label[i]);
  }
  return sheaf_sum_n(g, t->n, l);
}

static sheaf_expr inst_loss(sheaf_graph *g, const tm_model *md, const tm_inst *t, bool tree) {
  return tree ? tree_loss(g, md, t) : seq_loss(g, md, t);
}

static bool tm_create(sheaf_ctx *ctx, tm_model *md) {
  memset(md, 0, sizeof *md);
  if (!CHECK_OK(ctx, sheaf_model_create(ctx, &md->m))) return false;
  sheaf_model *m = md->m;
  md->E = th_param(ctx, m, "E", 2, V, D);
  md->Wleaf = th_param(ctx, m, "Wleaf", 2, D, 3 * H);
  md->bleaf = th_param(ctx, m, "bleaf", 1, 3 * H, 0);
  md->Ul = th_param(ctx, m, "Ul", 2, H, 5 * H);
  md->Ur = th_param(ctx, m, "Ur", 2, H, 5 * H);
  md->bn = th_param(ctx, m, "bn", 1, 5 * H, 0);
  md->Wout = th_param(ctx, m, "Wout", 2, H, C);
  md->bout = th_param(ctx, m, "bout", 1, C, 0);
  md->Wl = th_param(ctx, m, "Wl", 2, D + H, 4 * H);
  md->bl = th_param(ctx, m, "bl", 1, 4 * H, 0);
  return CHECK_OK(ctx, sheaf_model_seed(m, 7));
}


/* ---- the same models in double (the finite differences' reference: the
 * runtime's fused LSTM and GEMM epilogues use fast sigmoid/tanh, whose
 * float values are too rough to difference) ---- */

static const float *P(const tm_model *md, sheaf_param p) {
  return sheaf_model_param_data(md->m, p, NULL, NULL);
}
static double dsig(double x) { return 1.0 / (1.0 + exp(-x)); }
/* out[j] = Σ_k x[k]·W[k][j] (+ b[j]) for W [n, cols] */
static void dlin(const double *x, int n, const float *W, int cols, const float *b, double *out, bool add) {
  for (int j = 0; j < cols; j++) {
    double s = add ? out[j] : (b ? b[j] : 0.0);
    for (int k = 0; k < n; k++) s += x[k] * (double)W[k * cols + j];
    out[j] = s;
  }
}
static double dnll(const tm_model *md, const double *h, int label) {
  double z[C], mx = -1e300, se = 0;
  dlin(h, H, P(md, md->Wout), C, P(md, md->bout), z, false);
  for (int j = 0; j < C; j++) mx = z[j] > mx ? z[j] : mx;
  for (int j = 0; j < C; j++) se += exp(z[j] - mx);
  return -(z[label] - mx - log(se));
}
static double ref_loss1(const tm_model *md, const tm_inst *t, bool tree) {
  double h[MAXN][H], c[MAXN][H], x[D + H], z[5 * H], loss = 0;
  if (tree) {
    for (int i = 0; i < t->n; i++) {
      if (t->left[i] < 0) {
        for (int k = 0; k < D; k++) x[k] = P(md, md->E)[t->word[i] * D + k];
        dlin(x, D, P(md, md->Wleaf), 3 * H, P(md, md->bleaf), z, false);
        for (int j = 0; j < H; j++) {
          c[i][j] = dsig(z[j]) * tanh(z[2 * H + j]);
          h[i][j] = dsig(z[H + j]) * tanh(c[i][j]);
        }
      } else {
        int a = t->left[i], b = t->right[i];
        dlin(h[a], H, P(md, md->Ul), 5 * H, P(md, md->bn), z, false);
        dlin(h[b], H, P(md, md->Ur), 5 * H, NULL, z, true);
        for (int j = 0; j < H; j++) {
          c[i][j] = dsig(z[j]) * tanh(z[4 * H + j]) + dsig(z[H + j]) * c[a][j] + dsig(z[2 * H + j]) * c[b][j];
          h[i][j] = dsig(z[3 * H + j]) * tanh(c[i][j]);
        }
      }
    }
    return dnll(md, h[t->n - 1], t->label[t->n - 1]);
  }
  double hp[H] = {0}, cp[H] = {0};
  for (int i = 0; i < t->n; i++) {
    for (int k = 0; k < D; k++) x[k] = P(md, md->E)[t->word[i] * D + k];
    for (int k = 0; k < H; k++) x[D + k] = hp[k];
    dlin(x, D + H, P(md, md->Wl), 4 * H, P(md, md->bl), z, false);
    for (int j = 0; j < H; j++) {
      cp[j] = dsig(z[H + j]) * cp[j] + dsig(z[j]) * tanh(z[2 * H + j]);
      hp[j] = dsig(z[3 * H + j]) * tanh(cp[j]);
    }
    loss += dnll(md, hp, t->label[i]);
  }
  return loss;
}

/* Σ of the instances' losses, built on a reset graph and read in double. */
static bool total_loss(sheaf_graph *g, const tm_model *md, const tm_inst *t, int n, bool tree, double *out) {
  if (sheaf_graph_reset(g)) return false;
  sheaf_expr l[64];
  for (int i = 0; i < n; i++) l[i] = inst_loss(g, md, &t[i], tree);
  double s = 0;
  for (int i = 0; i < n; i++) {
    sheaf_value_view v;
    if (sheaf_value(g, l[i], &v)) return false;
    s += v.data[0];
  }
  *out = s;
  return true;
}

static void check_fd(bool tree) {
  sheaf_ctx *ctx = th_ctx();
  tm_model md;
  if (!tm_create(ctx, &md)) return;
  sheaf_graph *g = NULL;
  if (!CHECK_OK(ctx, sheaf_graph_create(md.m, NULL, &g))) goto done;
  tm_inst t[2];
  memset(t, 0, sizeof t);
  if (tree) {
    tree_build(&t[0], 4);
    tree_build(&t[1], 3);
  } else {
    seq_make(&t[0], 4);
    seq_make(&t[1], 2);
  }
  REQUIRE(g);
  sheaf_model_zero_grad(md.m);
  sheaf_expr l[2];
  REQUIRE_OK(ctx, sheaf_graph_reset(g));
  for (int i = 0; i < 2; i++) l[i] = inst_loss(g, &md, &t[i], tree);
  if (!CHECK_OK(ctx, sheaf_backward(g, 2, l, NULL))) goto done;
  double lg = 0, lr = ref_loss1(&md, &t[0], tree) + ref_loss1(&md, &t[1], tree);
  if (!CHECK(total_loss(g, &md, t, 2, tree, &lg)) || !CHECK_NEAR(lg, lr, 1e-4 * fabs(lr))) goto done;
  size_t np = sheaf_model_param_count(md.m);
  int checked = 0;
  for (uint32_t pi = 1; pi <= np; pi++) {
    sheaf_param p;
    const char *names[] = {"E", "Wleaf", "bleaf", "Ul", "Ur", "bn", "Wout", "bout", "Wl", "bl"};
    if (!CHECK_OK(ctx, sheaf_model_find(md.m, names[pi - 1], &p))) goto done;
    int rank;
    const int64_t *shape;
    float *d = sheaf_model_param_data(md.m, p, &rank, &shape);
    const float *gp = sheaf_param_grad(md.m, p);
    int64_t n = rank == 2 ? shape[0] * shape[1] : shape[0];
    for (int64_t i = 0; i < n; i++) {
      float x0 = d[i];
      double h = 1e-2, dd[2];
      for (int s = 0; s < 2; s++) {
        double hs = s ? h / 2 : h, lp = 0, lm = 0;
        d[i] = (float)(x0 + hs);
        double hp = (double)d[i] - x0;
        sheaf_model_param_update(md.m, p);
        lp = ref_loss1(&md, &t[0], tree) + ref_loss1(&md, &t[1], tree);
        d[i] = (float)(x0 - hs);
        double hm = x0 - (double)d[i];
        sheaf_model_param_update(md.m, p);
        lm = ref_loss1(&md, &t[0], tree) + ref_loss1(&md, &t[1], tree);
        dd[s] = (lp - lm) / (hp + hm);
      }
      d[i] = x0;
      sheaf_model_param_update(md.m, p);
      double fd = (4 * dd[1] - dd[0]) / 3, got = gp[i];
      double mag = fabs(fd) > fabs(got) ? fabs(fd) : fabs(got);
      if (mag < 1e-2) mag = 1e-2;
      if (fabs(got - fd) > 1e-3 * mag) {
        th_fail(__FILE__, __LINE__, "%s: d/d %s[%lld]: backward %.7g, finite differences %.7g",
                tree ? "treelstm" : "lstm", names[pi - 1], (long long)i, got, fd);
        goto done;
      }
      checked += got != 0.0;
    }
  }
  CHECK(checked > 100); /* the gradients are not all zero */
done:
  sheaf_graph_free(g);
  sheaf_model_free(md.m);
}

TEST(autodiff_treelstm_against_finite_differences) { check_fd(true); }
TEST(autodiff_lstm_tagger_against_finite_differences) { check_fd(false); }

/* Copies every parameter's gradient, in declaration order. */
static double *grads_copy(sheaf_model *m, size_t *total) {
  static const char *names[] = {"E", "Wleaf", "bleaf", "Ul", "Ur", "bn", "Wout", "bout", "Wl", "bl"};
  size_t n = 0, cap = 4096;
  double *out = malloc(cap * sizeof *out);
  for (int k = 0; k < 10; k++) {
    sheaf_param p;
    sheaf_model_find(m, names[k], &p);
    int rank;
    const int64_t *shape;
    sheaf_model_param_data(m, p, &rank, &shape);
    int64_t c = rank == 2 ? shape[0] * shape[1] : shape[0];
    const float *gp = sheaf_param_grad(m, p);
    for (int64_t i = 0; i < c && n < cap; i++) out[n++] = gp[i];
  }
  *total = n;
  return out;
}

static void check_batched(bool tree, sheaf_policy pol) {
  sheaf_ctx *ctx = th_ctx();
  tm_model md;
  if (!tm_create(ctx, &md)) return;
  sheaf_graph_opts go = {pol, 0, NULL};
  sheaf_graph *g = NULL;
  tm_inst *t = calloc(64, sizeof *t);
  double *per = NULL, *bat = NULL;
  if (!CHECK_OK(ctx, sheaf_graph_create(md.m, &go, &g))) goto done;
  for (int i = 0; i < 64; i++) {
    if (tree) tree_build(&t[i], 1 + irand(8));
    else seq_make(&t[i], 1 + irand(MAXN));
  }
  /* per instance, accumulated in the model */
  sheaf_model_zero_grad(md.m);
  for (int i = 0; i < 64; i++) {
    REQUIRE_OK(ctx, sheaf_graph_reset(g));
    sheaf_expr l = inst_loss(g, &md, &t[i], tree);
    if (!CHECK_OK(ctx, sheaf_backward(g, 1, &l, NULL))) goto done;
  }
  size_t n1, n2;
  per = grads_copy(md.m, &n1);
  /* all 64 in one graph */
  sheaf_model_zero_grad(md.m);
  REQUIRE_OK(ctx, sheaf_graph_reset(g));
  sheaf_expr l[64];
  for (int i = 0; i < 64; i++) l[i] = inst_loss(g, &md, &t[i], tree);
  if (!CHECK_OK(ctx, sheaf_backward(g, 64, l, NULL))) goto done;
  bat = grads_copy(md.m, &n2);
  REQUIRE(n1 == n2);
  int nonzero = 0;
  for (size_t i = 0; i < n1; i++) {
    double tol = 1e-5 * (fabs(per[i]) > 1 ? fabs(per[i]) : 1);
    nonzero += per[i] != 0.0;
    if (fabs(per[i] - bat[i]) > tol) {
      th_fail(__FILE__, __LINE__, "%s, policy %s: gradient %zu: batched %.9g, per instance %.9g",
              tree ? "treelstm" : "lstm", sheaf_policy_name(pol), i, bat[i], per[i]);
      break;
    }
  }
  CHECK(nonzero > 100);
done:
  free(per);
  free(bat);
  free(t);
  sheaf_graph_free(g);
  sheaf_model_free(md.m);
}

TEST(autodiff_batched_equals_per_instance) {
  check_batched(true, SHEAF_POLICY_SHEAF);
  check_batched(false, SHEAF_POLICY_SHEAF);
  check_batched(true, SHEAF_POLICY_NONE);
  check_batched(false, SHEAF_POLICY_AGENDA);
}

TEST(autodiff_errors) {
  sheaf_ctx *ctx = th_ctx();
  tm_model md;
  if (!tm_create(ctx, &md)) return;
  sheaf_graph *g = NULL, *g2 = NULL;
  if (CHECK_OK(ctx, sheaf_graph_create(md.m, NULL, &g)) && CHECK_OK(ctx, sheaf_graph_create(md.m, NULL, &g2))) {
    sheaf_expr null = {0, 0, 0};
    CHECK_STATUS(ctx, sheaf_backward(g, 1, &null, NULL), SHEAF_ERR_INVALID_ARG);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "loss 0 is a null expression");
    sheaf_expr other = sheaf_lookup(g2, md.E, 0);
    CHECK_STATUS(ctx, sheaf_backward(g, 1, &other, NULL), SHEAF_ERR_INVALID_ARG);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "another graph");
    CHECK_STATUS(ctx, sheaf_backward(g, 1, NULL, NULL), SHEAF_ERR_INVALID_ARG);
    CHECK_STATUS(ctx, sheaf_backward(g, -1, &other, NULL), SHEAF_ERR_INVALID_ARG);
    CHECK(sheaf_param_grad(md.m, SHEAF_NO_PARAM) == NULL);
    /* a loss that reads no parameter: nothing to do, no error */
    sheaf_expr x = sheaf_input_vector(g, 3, (const float[]){1, 2, 3});
    sheaf_expr s = sheaf_sum(g, x);
    CHECK_OK(ctx, sheaf_backward(g, 1, &s, NULL));
  }
  sheaf_graph_free(g);
  sheaf_graph_free(g2);
  sheaf_model_free(md.m);
}

/* The backward's GEMM buckets are the forward's: every affine with one
 * weight at one depth, across the 64 trees, is one bucket (one GEMM for
 * dW, one for dX) — as many as the forward ran affine batches (14 for 580
 * affine nodes here). */
TEST(autodiff_gemm_buckets_are_the_forwards) {
  sheaf_ctx *ctx = th_ctx();
  tm_model md;
  if (!tm_create(ctx, &md)) return;
  sheaf_graph *g = NULL;
  tm_inst *t = calloc(64, sizeof *t);
  if (CHECK_OK(ctx, sheaf_graph_create(md.m, NULL, &g))) {
    for (int i = 0; i < 64; i++) tree_build(&t[i], 1 + irand(8));
    sheaf_expr l[64];
    for (int i = 0; i < 64; i++) l[i] = tree_loss(g, &md, &t[i]);
    uint64_t buckets = 0, fwd = 0, nodes = 0;
    if (CHECK_OK(ctx, sheaf_graph_flush(g)) && CHECK_OK(ctx, sh_backward(g, 64, l, NULL, &buckets))) {
      const char *names[64];
      uint64_t nb[64], nn[64];
      size_t k = sheaf_graph_kernel_stats(g, 64, names, nb, nn);
      for (size_t i = 0; i < k; i++)
        if (strncmp(names[i], "affine", 6) == 0) fwd += nb[i], nodes += nn[i];
      CHECK(fwd > 0 && nodes > 64 * 2);
      CHECK_EQ_INT(buckets, fwd);
    }
  }
  free(t);
  sheaf_graph_free(g);
  sheaf_model_free(md.m);
}

/* Every allocation of a backward pass and an optimizer step failing in
 * turn: a clean SHEAF_ERR_NOMEM (no crash, no leak), then success. */
TEST(autodiff_out_of_memory_is_an_error) {
  sheaf_ctx *ctx = th_ctx();
  tm_model md;
  if (!tm_create(ctx, &md)) return;
  tm_inst t[4];
  memset(t, 0, sizeof t);
  for (int i = 0; i < 2; i++) tree_build(&t[i], 3 + i);
  for (int i = 2; i < 4; i++) seq_make(&t[i], 3 + i);
  sheaf_optimizer *o = NULL;
  sheaf_optimizer_opts oo = {SHEAF_OPTIM_ADAM, 0.01f, 0, 0, 0, 0, 0, 1.0f};
  REQUIRE_OK(ctx, sheaf_optimizer_create(md.m, &oo, &o));
  bool succeeded = false;
  for (long n = 1; n < 400 && !succeeded; n++) {
    sheaf_graph *g = NULL;
    REQUIRE_OK(ctx, sheaf_graph_create(md.m, NULL, &g));
    sheaf_expr l[4];
    for (int i = 0; i < 4; i++) l[i] = inst_loss(g, &md, &t[i], i < 2);
    if (!CHECK_OK(ctx, sheaf_graph_flush(g))) {
      sheaf_graph_free(g);
      break;
    }
    sheaf_model_zero_grad(md.m);
    th_fail_alloc_at(n);
    sheaf_status st = sheaf_backward(g, 4, l, NULL);
    if (st == SHEAF_OK) st = sheaf_optimizer_step(o, NULL);
    th_fail_alloc_at(0);
    if (st == SHEAF_OK) succeeded = true;
    else CHECK_EQ_INT(st, SHEAF_ERR_NOMEM);
    sheaf_graph_free(g);
  }
  CHECK(succeeded);
  sheaf_optimizer_free(o);
  sheaf_model_free(md.m);
}
