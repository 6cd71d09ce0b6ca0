/*
 * test_autodiff.c — reverse-mode gradients (src/train, include/sheaf_train.h)
 * against central finite differences: every op of sheaf_graph.h on small
 * random inputs (the inputs' gradients through opts.wrt, the parameters'
 * through sheaf_param_grad: parameter, lookup, affine, affine_n, LSTM
 * cells, tree-LSTM cells, layer_norm's gamma and beta), each under policies sheaf (fused
 * activations and pointwise programs) and none. The loss is Σ w·y with
 * fixed random w; the reference is Richardson-extrapolated central
 * differences of the float forward, summed in double; the bound is 1e-3
 * relative (floor 1e-2 on the magnitude); dropout (through a seeded mask)
 * too, and its mask's rate and reproducibility. Two-input cases draw their
 * inputs on grids 1/8 apart, so no finite difference crosses a kink.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "sheaf_train.h"

#define GC_MAX_IN 4

typedef struct gc_case gc_case;
typedef sheaf_expr (*gc_build)(sheaf_graph *g, const sheaf_expr *x, const gc_case *c);

struct gc_case {
  const char *name;
  int n_in;
  int rank[GC_MAX_IN];
  int64_t shape[GC_MAX_IN][2];
  float lo, hi;        /* the inputs' range */
  gc_build build;
  sheaf_param p[4];    /* the case's parameters (set by the test) */
};

typedef struct gc_env {
  sheaf_ctx *ctx;
  sheaf_model *m;
  sheaf_graph *g;
  float *x[GC_MAX_IN];
  int64_t nx[GC_MAX_IN];
  float *w;            /* loss weights */
  int64_t nw;
} gc_env;

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float urand(float lo, float hi) { return lo + (hi - lo) * 0.5f * (th_frand(&g_rng) + 1.0f); }

/* Builds the case on a reset graph; *y its output. */
static bool gc_forward(gc_env *e, const gc_case *c, sheaf_expr *xs, sheaf_expr *y) {
  if (sheaf_graph_reset(e->g)) return false;
  for (int k = 0; k < c->n_in; k++) xs[k] = sheaf_input(e->g, c->rank[k], c->shape[k], e->x[k]);
  *y = c->build(e->g, xs, c);
  return !sheaf_expr_is_null(*y) && sheaf_graph_flush(e->g) == SHEAF_OK;
}

/* Σ w·y in double. */
static bool gc_loss(gc_env *e, const gc_case *c, double *out) {
  sheaf_expr xs[GC_MAX_IN], y;
  if (!gc_forward(e, c, xs, &y)) return false;
  sheaf_value_view v;
  if (sheaf_value(e->g, y, &v)) return false;
  int64_t n = v.rank == 2 ? v.shape[0] * v.shape[1] : v.shape[0];
  if (!e->w) {
    e->nw = n;
    e->w = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) e->w[i] = urand(-1.0f, 1.0f);
  }
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += (double)e->w[i] * v.data[i];
  *out = s;
  return true;
}

/* d loss / d *slot by Richardson-extrapolated central differences. */
static bool gc_fd(gc_env *e, const gc_case *c, float *slot, sheaf_param p, double *out) {
  float x0 = *slot;
  double h = 1e-2 * (fabs((double)x0) > 1 ? fabs((double)x0) : 1), d[2];
  for (int s = 0; s < 2; s++) {
    double hs = s ? h / 2 : h, lp, lm;
    *slot = (float)(x0 + hs);
    double hp = (double)*slot - x0;
    if (p.id) sheaf_model_param_update(e->m, p);
    if (!gc_loss(e, c, &lp)) return false;
    *slot = (float)(x0 - hs);
    double hm = x0 - (double)*slot;
    if (p.id) sheaf_model_param_update(e->m, p);
    if (!gc_loss(e, c, &lm)) return false;
    d[s] = (lp - lm) / (hp + hm);
  }
  *slot = x0;
  if (p.id) sheaf_model_param_update(e->m, p);
  *out = (4 * d[1] - d[0]) / 3;
  return true;
}

static bool gc_close(const char *what, const char *name, int64_t i, double got, double want) {
  double mag = fabs(want) > fabs(got) ? fabs(want) : fabs(got);
  if (mag < 1e-2) mag = 1e-2;
  if (fabs(got - want) <= 1e-3 * mag) return true;
  return th_fail(__FILE__, __LINE__, "%s: d/d %s[%lld]: backward %.7g, finite differences %.7g", name, what,
                 (long long)i, got, want);
}

/* The whole check of one case under one policy. */
static void gc_run(sheaf_model *m, gc_case *c, sheaf_policy pol) {
  sheaf_ctx *ctx = sheaf_model_ctx(m);
  gc_env e = {0};
  e.ctx = ctx;
  e.m = m;
  sheaf_graph_opts go = {pol, 1, NULL};
  if (!CHECK_OK(ctx, sheaf_graph_create(m, &go, &e.g))) return;
  float *gx[GC_MAX_IN] = {0}, *gx0[GC_MAX_IN] = {0}, *gp0[4] = {0}, *gp1[4] = {0};
  for (int k = 0; k < c->n_in; k++) {
    e.nx[k] = c->rank[k] == 2 ? c->shape[k][0] * c->shape[k][1] : c->shape[k][0];
    e.x[k] = malloc((size_t)e.nx[k] * sizeof(float));
    gx[k] = malloc((size_t)e.nx[k] * sizeof(float));
    for (int64_t i = 0; i < e.nx[k]; i++) {
      e.x[k][i] = urand(c->lo, c->hi);
      /* two inputs: on grids 1/8 apart (k/4 + 1/8 and k/4), so no comparison of
       * one with the other (minimum, maximum, where) sits on its kink */
      if (c->n_in == 2 && k < 2) {
        float q = floorf(e.x[k][i] * 4.0f) / 4.0f + (k == 0 ? 0.125f : 0.0f);
        e.x[k][i] = q < c->lo ? q + 0.25f : q;
      }
    }
  }
  double l0;
  if (!CHECK(gc_loss(&e, c, &l0))) goto done;
  /* the backward twice: loss = sum(reshape(y * w)); the first pass of a
   * graph recomputes what its forward did not keep (LSTM gates), the second
   * reads what the forward of a training graph keeps (sh_saved): both
   * against the finite differences */
  bool ok = true;
  for (int pass = 0; pass < 2 && ok; pass++) {
    sheaf_expr xs[GC_MAX_IN], y;
    if (!CHECK(gc_forward(&e, c, xs, &y))) goto done;
    int64_t nw = e.nw;
    sheaf_expr wl = sheaf_input(e.g, 1, &nw, e.w);
    sheaf_expr loss = sheaf_sum(e.g, sheaf_mul(e.g, sheaf_reshape(e.g, y, 1, &nw), wl));
    sheaf_model_zero_grad(m);
    sheaf_backward_opts bo = {0};
    bo.n_wrt = c->n_in;
    bo.wrt = xs;
    bo.wrt_grad = gx;
    if (!CHECK_OK(ctx, sheaf_backward(e.g, 1, &loss, &bo))) goto done;
    if (pass == 0)
      for (int k = 0; k < c->n_in; k++) {
        gx0[k] = malloc((size_t)e.nx[k] * sizeof(float));
        memcpy(gx0[k], gx[k], (size_t)e.nx[k] * sizeof(float));
      }
    for (int q = 0; q < 4 && c->p[q].id; q++) {
      int rank;
      const int64_t *shape;
      sheaf_model_param_data(m, c->p[q], &rank, &shape);
      int64_t n = rank == 2 ? shape[0] * shape[1] : shape[0];
      float **dst = pass == 0 ? &gp0[q] : &gp1[q];
      *dst = malloc((size_t)n * sizeof(float));
      memcpy(*dst, sheaf_param_grad(m, c->p[q]), (size_t)n * sizeof(float));
    }
  }
  for (int k = 0; k < c->n_in && ok; k++)
    for (int64_t i = 0; i < e.nx[k] && ok; i++) {
      double fd = 0;
      if (!CHECK(gc_fd(&e, c, &e.x[k][i], SHEAF_NO_PARAM, &fd))) goto done;
      char what[16] = "x0";
      what[1] = (char)('0' + k);
      ok = gc_close(what, c->name, i, gx0[k][i], fd) && gc_close(what, c->name, i, gx[k][i], fd);
    }
  for (int q = 0; q < 4 && ok && c->p[q].id; q++) {
    int rank;
    const int64_t *shape;
    float *d = sheaf_model_param_data(m, c->p[q], &rank, &shape);
    int64_t n = rank == 2 ? shape[0] * shape[1] : shape[0];
    for (int64_t i = 0; i < n && ok; i++) {
      double fd = 0;
      if (!CHECK(gc_fd(&e, c, &d[i], c->p[q], &fd))) break;
      const char *pn = sheaf_model_param_name(m, c->p[q]);
      ok = gc_close(pn, c->name, i, gp0[q][i], fd) && gc_close(pn, c->name, i, gp1[q][i], fd);
    }
  }
done:
  for (int k = 0; k < c->n_in; k++) {
    free(e.x[k]);
    free(gx[k]);
    free(gx0[k]);
  }
  for (int q = 0; q < 4; q++) {
    free(gp0[q]);
    free(gp1[q]);
  }
  free(e.w);
  sheaf_graph_free(e.g);
}

/* ------------------------------------------------------------- the cases */

#define B1(fn) \
  static sheaf_expr b_##fn(sheaf_graph *g, const sheaf_expr *x, const gc_case *c) { (void)c; return sheaf_##fn(g, x[0]); }
#define B2(fn) \
  static sheaf_expr b_##fn(sheaf_graph *g, const sheaf_expr *x, const gc_case *c) { (void)c; return sheaf_##fn(g, x[0], x[1]); }
B1(tanh) B1(sigmoid) B1(relu) B1(gelu) B1(exp) B1(ln) B1(sqrt) B1(rsqrt) B1(abs) B1(softplus) B1(erf) B1(silu)
B1(sum) B1(mean) B1(max) B1(softmax) B1(log_softmax) B1(transpose)
B2(add) B2(sub) B2(mul) B2(div) B2(pow) B2(minimum) B2(maximum) B2(matmul)
#undef B1
#undef B2

static sheaf_expr b_scale(sheaf_graph *g, const sheaf_expr *x, const gc_case *c) { (void)c; return sheaf_scale(g, x[0], -1.5f); }
static sheaf_expr b_sum_n(sheaf_graph *g, const sheaf_expr *x, const gc_case *c) {
  (void)c;
  sheaf_expr v[4] = {x[0], x[1], x[0], sheaf_tanh(g, x[1])};
  return sheaf_sum_n(g, 4, v);
}
/* comparisons pass nothing; where passes through the selected branch */
static sheaf_expr b_cmp(sheaf_graph *g, const sheaf_expr *x, const gc_case *c) {
  (void)c;
  sheaf_expr s = sheaf_add(g, sheaf_gt(g, x[0], x[1]), sheaf_ge(g, x[1], x[0]));
  s = sheaf_add(g, s, sheaf_add(g, sheaf_eq(g, x[0], x[1]), sheaf_ne(g, x[0], x[1])));
  return sheaf_mul(g, s, x[0]);
}
static sheaf_expr b_where(sheaf_graph *g, const sheaf_expr *x, const gc_case *c) {
  (void)c;
  return sheaf_where(g, sheaf_gt(g, x[0], x[1]), sheaf_mul(g, x[0], x[0]), sheaf_exp(g, x[1]));
}
static sheaf_expr b_pick(sheaf_graph *g, const sheaf_expr *x, const gc_case *c) { (void)c; return sheaf_pick(g, x[0], 2); }
static sheaf_expr b_nll(sheaf_graph *g, const sheaf_expr *x, const gc_case *c) { (void)c; return sheaf_nll(g, x[0], 3); }
static sheaf_expr b_row(sheaf_graph *g, const sheaf_expr *x, const gc_case *c) { (void)c; return sheaf_row(g, x[0], 1); }
static sheaf_expr b_stack(sheaf_graph *g, const sheaf_expr *x, const gc_case *c) {
  (void)c;
  sheaf_expr v[3] = {x[0], x[1], x[0]};
  return sheaf_stack(g, 3, v);
}
static sheaf_expr b_concat_slice(sheaf_graph *g, const sheaf_expr *x, const gc_case *c) {
  (void)c;
  sheaf_expr v[2] = {x[0], x[1]};
  sheaf_expr cc = sheaf_concat(g, 2, v);
  return sheaf_mul(g, sheaf_slice(g, cc, 2, 6), sheaf_slice(g, cc, 1, 5));
}
static sheaf_expr b_reshape(sheaf_graph *g, const sheaf_expr *x, const gc_case *c) {
  (void)c;
  int64_t s[2] = {3, 4};
  return sheaf_tanh(g, sheaf_reshape(g, x[0], 2, s));
}
static sheaf_expr b_dropout(sheaf_graph *g, const sheaf_expr *x, const gc_case *c) {
  (void)c;
  return sheaf_dropout(g, sheaf_tanh(g, x[0]), 0.3f, 42);
}
static sheaf_expr b_layer_norm(sheaf_graph *g, const sheaf_expr *x, const gc_case *c) {
  return sheaf_layer_norm(g, x[0], sheaf_parameter(g, c->p[0]), sheaf_parameter(g, c->p[1]), 1e-5f);
}
static sheaf_expr b_affine_act(sheaf_graph *g, const sheaf_expr *x, const gc_case *c) {
  /* tanh fused into the GEMM's epilogue; sigmoid and GELU over column slices */
  sheaf_expr z = sheaf_affine(g, c->p[0], x[0], c->p[1]);
  sheaf_expr v[3] = {sheaf_sigmoid(g, sheaf_slice(g, z, 0, 2)), sheaf_gelu(g, sheaf_slice(g, z, 2, 4)),
                     sheaf_relu(g, sheaf_slice(g, z, 4, 6))};
  sheaf_expr t = sheaf_tanh(g, sheaf_affine(g, c->p[0], x[0], SHEAF_NO_PARAM));
  return sheaf_add(g, sheaf_concat(g, 3, v), t);
}
static sheaf_expr b_affine_n(sheaf_graph *g, const sheaf_expr *x, const gc_case *c) {
  sheaf_param W[2] = {c->p[0], c->p[1]};
  sheaf_expr xs[2] = {x[0], sheaf_lookup(g, c->p[3], 2)};
  sheaf_expr h = sheaf_affine_n(g, 2, W, xs, c->p[2]);
  return sheaf_mul(g, h, sheaf_lookup(g, c->p[3], 0)); /* the table read twice */
}
static sheaf_expr b_lstm(sheaf_graph *g, const sheaf_expr *x, const gc_case *c) {
  sheaf_expr h, cs, h2, c2;
  sheaf_lstm_cell(g, c->p[0], c->p[1], x[0], sheaf_tanh(g, x[1]), &h, &cs);
  sheaf_lstm_cell(g, c->p[0], c->p[1], sheaf_tanh(g, x[0]), cs, &h2, &c2);
  return sheaf_add(g, sheaf_mul(g, h2, c2), h);
}

static sheaf_expr b_tree_lstm(sheaf_graph *g, const sheaf_expr *x, const gc_case *c) {
  /* two leaves, then a binary cell over them; h and c both reach the output */
  sheaf_expr hl, cl, hr, cr, h, cs, none = {0, 0, 0};
  sheaf_tree_lstm_cell(g, c->p[0], c->p[1], x[0], none, none, &hl, &cl);
  sheaf_tree_lstm_cell(g, c->p[0], c->p[1], sheaf_tanh(g, x[1]), none, none, &hr, &cr);
  sheaf_expr hh[2] = {hl, hr};
  sheaf_tree_lstm_cell(g, c->p[2], c->p[3], sheaf_concat(g, 2, hh), cl, cr, &h, &cs);
  return sheaf_add(g, sheaf_mul(g, h, cs), hl);
}

TEST(autodiff_every_op_against_finite_differences) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m = NULL;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  sheaf_param ln_g = th_param(ctx, m, "ln_g", 1, 5, 0), ln_b = th_param(ctx, m, "ln_b", 1, 5, 0);
  sheaf_param aw = th_param(ctx, m, "aw", 2, 4, 6), ab = th_param(ctx, m, "ab", 1, 6, 0);
  sheaf_param nw1 = th_param(ctx, m, "nw1", 2, 3, 5), nw2 = th_param(ctx, m, "nw2", 2, 5, 5);
  sheaf_param nb = th_param(ctx, m, "nb", 1, 5, 0), tab = th_param(ctx, m, "tab", 2, 4, 5);
  sheaf_param lw = th_param(ctx, m, "lw", 2, 3, 12), lb = th_param(ctx, m, "lb", 1, 12, 0);
  sheaf_param tlw = th_param(ctx, m, "tlw", 2, 3, 9), tlb = th_param(ctx, m, "tlb", 1, 9, 0);
  sheaf_param tnw = th_param(ctx, m, "tnw", 2, 6, 15), tnb = th_param(ctx, m, "tnb", 1, 15, 0);
  /* non-trivial gamma/beta/bias (initialized as glorot vectors: fine) */
#define M35 {{3, 5}}
#define V5 {{5, 0}}
  gc_case cases[] = {
      {"tanh", 1, {2}, M35, -2, 2, b_tanh, {{0, 0}}},
      {"sigmoid", 1, {2}, M35, -3, 3, b_sigmoid, {{0, 0}}},
      {"relu", 1, {2}, M35, 0.2f, 2, b_relu, {{0, 0}}},
      {"relu-", 1, {2}, M35, -2, -0.2f, b_relu, {{0, 0}}},
      {"gelu", 1, {2}, M35, -2, 2, b_gelu, {{0, 0}}},
      {"exp", 1, {2}, M35, -2, 2, b_exp, {{0, 0}}},
      {"ln", 1, {2}, M35, 0.5f, 3, b_ln, {{0, 0}}},
      {"sqrt", 1, {2}, M35, 0.5f, 3, b_sqrt, {{0, 0}}},
      {"rsqrt", 1, {2}, M35, 0.5f, 3, b_rsqrt, {{0, 0}}},
      {"abs", 1, {2}, M35, 0.2f, 2, b_abs, {{0, 0}}},
      {"abs-", 1, {2}, M35, -2, -0.2f, b_abs, {{0, 0}}},
      {"softplus", 1, {2}, M35, -3, 3, b_softplus, {{0, 0}}},
      {"erf", 1, {2}, M35, -2, 2, b_erf, {{0, 0}}},
      {"silu", 1, {2}, M35, -3, 3, b_silu, {{0, 0}}},
      {"scale", 1, {2}, M35, -2, 2, b_scale, {{0, 0}}},
      {"add", 2, {2, 2}, {{3, 5}, {3, 5}}, -2, 2, b_add, {{0, 0}}},
      {"add_row", 2, {2, 1}, {{3, 5}, {5, 0}}, -2, 2, b_add, {{0, 0}}},
      {"sub_scalar", 2, {2, 1}, {{3, 5}, {1, 0}}, -2, 2, b_sub, {{0, 0}}},
      {"mul_row", 2, {1, 2}, {{5, 0}, {3, 5}}, -2, 2, b_mul, {{0, 0}}},
      {"div", 2, {2, 2}, {{3, 5}, {3, 5}}, 0.5f, 2, b_div, {{0, 0}}},
      {"pow", 2, {1, 1}, {{5, 0}, {5, 0}}, 0.5f, 2, b_pow, {{0, 0}}},
      {"minimum", 2, {2, 2}, {{3, 5}, {3, 5}}, -2, 2, b_minimum, {{0, 0}}},
      {"maximum_scalar", 2, {2, 1}, {{3, 5}, {1, 0}}, -2, 2, b_maximum, {{0, 0}}},
      {"comparisons", 2, {2, 2}, {{3, 5}, {3, 5}}, -2, 2, b_cmp, {{0, 0}}},
      {"where", 2, {2, 2}, {{3, 5}, {3, 5}}, -2, 2, b_where, {{0, 0}}},
      {"sum_n", 2, {2, 2}, {{3, 5}, {3, 5}}, -2, 2, b_sum_n, {{0, 0}}},
      {"sum", 1, {2}, M35, -2, 2, b_sum, {{0, 0}}},
      {"mean", 1, {1}, V5, -2, 2, b_mean, {{0, 0}}},
      {"max", 1, {2}, M35, -2, 2, b_max, {{0, 0}}},
      {"softmax", 1, {2}, M35, -2, 2, b_softmax, {{0, 0}}},
      {"log_softmax", 1, {2}, M35, -2, 2, b_log_softmax, {{0, 0}}},
      {"pick", 1, {2}, M35, -2, 2, b_pick, {{0, 0}}},
      {"nll", 1, {1}, V5, -2, 2, b_nll, {{0, 0}}},
      {"dropout", 1, {2}, M35, -2, 2, b_dropout, {{0, 0}}},
      {"layer_norm", 1, {2}, M35, -2, 2, b_layer_norm, {ln_g, ln_b}},
      {"stack", 2, {1, 1}, {{5, 0}, {5, 0}}, -2, 2, b_stack, {{0, 0}}},
      {"transpose", 1, {2}, M35, -2, 2, b_transpose, {{0, 0}}},
      {"row", 1, {2}, M35, -2, 2, b_row, {{0, 0}}},
      {"concat_slice", 2, {1, 1}, {{4, 0}, {3, 0}}, -2, 2, b_concat_slice, {{0, 0}}},
      {"reshape", 1, {2}, {{2, 6}}, -2, 2, b_reshape, {{0, 0}}},
      {"matmul", 2, {2, 2}, {{3, 4}, {4, 2}}, -2, 2, b_matmul, {{0, 0}}},
      {"matmul_vec", 2, {2, 1}, {{3, 4}, {4, 0}}, -2, 2, b_matmul, {{0, 0}}},
      {"matmul_dot", 2, {1, 1}, {{4, 0}, {4, 0}}, -2, 2, b_matmul, {{0, 0}}},
      {"affine_act", 1, {2}, {{2, 4}}, -1, 1, b_affine_act, {aw, ab}},
      {"affine_n_lookup", 1, {1}, {{3, 0}}, -1, 1, b_affine_n, {nw1, nw2, nb, tab}},
      {"lstm_cell", 2, {2, 2}, {{2, 3}, {2, 3}}, -1, 1, b_lstm, {lw, lb}},
      {"tree_lstm_cell", 2, {2, 2}, {{2, 3}, {2, 3}}, -1, 1, b_tree_lstm, {tlw, tlb, tnw, tnb}},
  };
#undef M35
#undef V5
  static const sheaf_policy pols[2] = {SHEAF_POLICY_SHEAF, SHEAF_POLICY_NONE};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    for (int p = 0; p < 2; p++) gc_run(m, &cases[i], pols[p]);
  sheaf_model_free(m);
}

TEST(dropout_mask_is_seeded) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m = NULL;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  sheaf_graph *g = NULL;
  if (CHECK_OK(ctx, sheaf_graph_create(m, NULL, &g))) {
    enum { N = 10000 };
    float *ones = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) ones[i] = 1.0f;
    int64_t n = N;
    sheaf_expr x = sheaf_input(g, 1, &n, ones);
    sheaf_expr a = sheaf_dropout(g, x, 0.25f, 7), b = sheaf_dropout(g, x, 0.25f, 7), c = sheaf_dropout(g, x, 0.25f, 8);
    CHECK(sheaf_dropout(g, x, 0.0f, 7).node == x.node); /* inference: x itself */
    sheaf_value_view va, vb, vc;
    if (CHECK_OK(ctx, sheaf_value(g, a, &va)) && CHECK_OK(ctx, sheaf_value(g, b, &vb)) &&
        CHECK_OK(ctx, sheaf_value(g, c, &vc))) {
      int zeros = 0, same = 1, differ = 0;
      for (int i = 0; i < N; i++) {
        zeros += va.data[i] == 0.0f;
        same &= va.data[i] == vb.data[i];
        differ += va.data[i] != vc.data[i];
        if (va.data[i] != 0.0f) CHECK_NEAR(va.data[i], 1.0 / 0.75, 1e-6);
      }
      CHECK(same);
      CHECK(differ > 1000);
      CHECK(zeros > 2300 && zeros < 2700); /* 2500 expected, sd 43 */
    }
    sheaf_expr bad = sheaf_dropout(g, x, 1.0f, 7);
    CHECK(sheaf_expr_is_null(bad));
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_dropout: p 1 is outside [0, 1)");
    free(ones);
  }
  sheaf_graph_free(g);
  sheaf_model_free(m);
}
