/*
 * test_runtime_fusion.c — pointwise fusion (src/runtime/pointwise.c): chains
 * of elementwise ops with scalar broadcasts, row lengths around the chunk
 * and vector widths, rank-2 values and sum_n of many inputs give the values
 * of a double reference under every policy (policy sheaf fuses them, none
 * runs one op at a time); a producer read again after being absorbed (by a
 * reader at the same depth: a side output; deeper: recomputed; after the
 * flush: computed on demand); graph reuse after reset; allocation failures
 * at every step; phase-relative depth (one classifier batch for trees of
 * different heights).
 */
#include <math.h>
#include <stdlib.h>

#include "harness.h"

static uint64_t g_rng = 0x853c49e6748fea9bull;
static float frand(void) { return th_frand(&g_rng); } /* uniform in [-1, 1) */

static const sheaf_policy k_pols[] = {SHEAF_POLICY_SHEAF, SHEAF_POLICY_NONE, SHEAF_POLICY_DEPTH,
                                      SHEAF_POLICY_AGENDA};

static double sigm(double x) { return 1 / (1 + exp(-x)); }
static double gelu(double x) { return 0.5 * x * erfc(-x / sqrt(2.0)); }
static double relu(double x) { return x > 0 ? x : 0; }


/* ------------------------------------------------------------------ chains */

enum { NI = 7, NOUT = 5 };

typedef struct chain_in {
  int rank, rows, cols;
  float *a, *b, *c, *d, *e, s, s2;
} chain_in;

/* y0 = tanh(a*b + c*d) * sigmoid(e)
 * y1 = 0.5*exp(a - s) / (relu(b) + s2)
 * y2 = sum_n(a, b, c, d, e, tanh(a), sigmoid(b), gelu(c), log(relu(d) + s2), a*b, s*e)
 * y3 = s - tanh(a)*s                                    (s, s2: [1] scalars)
 * y4 = sum_n of 20 inputs (a, b, c, d, e four times: more than one program reads) */
static void chain_build(sheaf_graph *g, const chain_in *x, sheaf_expr *y) {
  int64_t shape[2] = {x->rows, x->cols};
  const int64_t *sh = x->rank == 2 ? shape : shape + 1;
  sheaf_expr a = sheaf_input(g, x->rank, sh, x->a), b = sheaf_input(g, x->rank, sh, x->b),
             c = sheaf_input(g, x->rank, sh, x->c), d = sheaf_input(g, x->rank, sh, x->d),
             e = sheaf_input(g, x->rank, sh, x->e), s = sheaf_input_vector(g, 1, &x->s),
             s2 = sheaf_input_vector(g, 1, &x->s2);
  y[0] = sheaf_mul(g, sheaf_tanh(g, sheaf_add(g, sheaf_mul(g, a, b), sheaf_mul(g, c, d))),
                   sheaf_sigmoid(g, e));
  y[1] = sheaf_div(g, sheaf_scale(g, sheaf_exp(g, sheaf_sub(g, a, s)), 0.5f),
                   sheaf_add(g, sheaf_relu(g, b), s2));
  sheaf_expr t[11] = {a, b, c, d, e, sheaf_tanh(g, a), sheaf_sigmoid(g, b), sheaf_gelu(g, c),
                      sheaf_ln(g, sheaf_add(g, sheaf_relu(g, d), s2)), sheaf_mul(g, a, b),
                      sheaf_mul(g, s, e)};
  y[2] = sheaf_sum_n(g, 11, t);
  y[3] = sheaf_sub(g, s, sheaf_mul(g, sheaf_tanh(g, a), s));
  sheaf_expr u[20];
  for (int i = 0; i < 20; i++) u[i] = i % 5 == 0 ? a : i % 5 == 1 ? b : i % 5 == 2 ? c : i % 5 == 3 ? d : e;
  y[4] = sheaf_sum_n(g, 20, u);
}

static void chain_ref(const chain_in *x, double *y[NOUT]) {
  int64_t n = (int64_t)x->rows * x->cols;
  for (int64_t i = 0; i < n; i++) {
    double a = x->a[i], b = x->b[i], c = x->c[i], d = x->d[i], e = x->e[i], s = x->s, s2 = x->s2;
    y[0][i] = tanh(a * b + c * d) * sigm(e);
    y[1][i] = 0.5 * exp(a - s) / (relu(b) + s2);
    y[2][i] = a + b + c + d + e + tanh(a) + sigm(b) + gelu(c) + log(relu(d) + s2) + a * b + s * e;
    y[3][i] = s - tanh(a) * s;
    y[4][i] = 4 * (a + b + c + d + e);
  }
}

static void chain_case(int rank, int rows, int cols) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  int64_t n = (int64_t)rows * cols;
  chain_in in[NI];
  double *want = malloc((size_t)(NI * NOUT * n) * sizeof *want);
  for (int i = 0; i < NI; i++) {
    chain_in *x = &in[i];
    x->rank = rank;
    x->rows = rows;
    x->cols = cols;
    float **p[5] = {&x->a, &x->b, &x->c, &x->d, &x->e};
    for (int k = 0; k < 5; k++) {
      *p[k] = malloc((size_t)n * sizeof(float));
      for (int64_t j = 0; j < n; j++) (*p[k])[j] = 2 * frand();
    }
    x->s = frand();
    x->s2 = 1.5f + frand();
    double *y[NOUT];
    for (int o = 0; o < NOUT; o++) y[o] = want + ((int64_t)i * NOUT + o) * n;
    chain_ref(x, y);
  }
  uint64_t batches[4] = {0};
  for (int pi = 0; pi < 4; pi++) {
    sheaf_graph_opts o = {k_pols[pi], pi == 0 ? 2 : 1, NULL};
    sheaf_graph *g;
    REQUIRE_OK(ctx, sheaf_graph_create(m, &o, &g));
    for (int round = 0; round < 2; round++) { /* the second round reuses the reset graph */
      sheaf_expr y[NI][NOUT];
      for (int i = 0; i < NI; i++) chain_build(g, &in[i], y[i]);
      CHECK_OK(ctx, sheaf_graph_flush(g));
      sheaf_graph_stats st;
      sheaf_graph_get_stats(g, &st);
      if (round == 0) batches[pi] = st.batches;
      for (int i = 0; i < NI; i++)
        for (int q = 0; q < NOUT; q++)
          if (!TH_VALUE_CLOSE(g, y[i][q], want + ((int64_t)i * NOUT + q) * n, n, sheaf_policy_name(k_pols[pi]), i * 10 + q))
            th_fail(__FILE__, __LINE__, "rank %d, %d x %d, output y%d, round %d", rank, rows, cols, q,
                    round);
      CHECK_OK(ctx, sheaf_graph_reset(g));
    }
    sheaf_graph_free(g);
  }
  /* fused: y0 .. y3 one program each; y4 two (16 values, then the rest and that sum) */
  CHECK(batches[0] <= 6);
  CHECK(batches[1] >= 20 * NI);
  CHECK(batches[2] > 2 * batches[0]); /* depth batches across instances, unfused */
  for (int i = 0; i < NI; i++) {
    free(in[i].a), free(in[i].b), free(in[i].c), free(in[i].d), free(in[i].e);
  }
  free(want);
  sheaf_model_free(m);
}

TEST(runtime_fusion_chains) {
  static const int cols[] = {1, 5, 8, 37, 64, 130};
  for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) chain_case(1, 1, cols[i]);
  chain_case(2, 3, 37);
  chain_case(2, 4, 64);
  chain_case(2, 64, 130); /* large enough to split rows over 2 threads */
}

/* -------------------------------------------------- producers read again */

TEST(runtime_fusion_producer_read_again) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  enum { C = 19 };
  sheaf_param W;
  int64_t ws[2] = {C, C};
  REQUIRE_OK(ctx, sheaf_model_param(m, "W", 2, ws, SHEAF_INIT_GLOROT, &W));
  const float *Wd = sheaf_model_param_data(m, W, NULL, NULL);
  float a[C], b[C], d[C], x[C], s = 0.75f;
  for (int j = 0; j < C; j++) a[j] = frand(), b[j] = frand(), d[j] = frand(), x[j] = frand();
  double z[C];
  for (int j = 0; j < C; j++) {
    z[j] = 0;
    for (int k = 0; k < C; k++) z[j] += (double)x[k] * Wd[k * C + j];
  }
  for (int pi = 0; pi < 4; pi++) {
    sheaf_graph_opts o = {k_pols[pi], 1, NULL};
    sheaf_graph *g;
    REQUIRE_OK(ctx, sheaf_graph_create(m, &o, &g));
    for (int round = 0; round < 2; round++) {
      enum { N = 3 };
      sheaf_expr c[N], h[N], e[N], c2[N], h2[N], e2[N], c3[N], t3[N], h3[N];
      for (int i = 0; i < N; i++) {
        sheaf_expr av = sheaf_input_vector(g, C, a), bv = sheaf_input_vector(g, C, b),
                   dv = sheaf_input_vector(g, C, d), xv = sheaf_input_vector(g, C, x),
                   sv = sheaf_input_vector(g, 1, &s);
        /* same depth as its absorber: stored by the absorber's program */
        c[i] = sheaf_mul(g, av, bv);
        h[i] = sheaf_mul(g, sheaf_tanh(g, c[i]), dv);
        e[i] = sheaf_add(g, c[i], sv);
        /* the absorber is deeper (it also reads a GEMM's output): recomputed */
        c2[i] = sheaf_mul(g, av, bv);
        h2[i] = sheaf_mul(g, c2[i], sheaf_tanh(g, sheaf_affine(g, W, xv, SHEAF_NO_PARAM)));
        e2[i] = sheaf_exp(g, c2[i]);
        /* read only after the flush */
        c3[i] = sheaf_sub(g, av, bv);
        t3[i] = sheaf_sigmoid(g, c3[i]);
        h3[i] = sheaf_mul(g, t3[i], dv);
      }
      CHECK_OK(ctx, sheaf_graph_flush(g));
      sheaf_expr f3[N];
      for (int i = 0; i < N; i++) f3[i] = sheaf_scale(g, c3[i], 2.0f); /* reads an absorbed value */
      double wc[C], wh[C], we[C], wh2[C], we2[C], wc3[C], wt3[C], wh3[C], wf3[C];
      for (int j = 0; j < C; j++) {
        double cc = (double)a[j] * b[j];
        wc[j] = cc;
        wh[j] = tanh(cc) * d[j];
        we[j] = cc + s;
        wh2[j] = cc * tanh(z[j]);
        we2[j] = exp(cc);
        wc3[j] = (double)a[j] - b[j];
        wt3[j] = sigm(wc3[j]);
        wh3[j] = wt3[j] * d[j];
        wf3[j] = 2 * wc3[j];
      }
      const char *pn = sheaf_policy_name(k_pols[pi]);
      for (int i = 0; i < N; i++) {
        CHECK(TH_VALUE_CLOSE(g, h3[i], wh3, C, pn, 0));
        CHECK(TH_VALUE_CLOSE(g, f3[i], wf3, C, pn, 1));
        CHECK(TH_VALUE_CLOSE(g, t3[i], wt3, C, pn, 2));
        CHECK(TH_VALUE_CLOSE(g, c3[i], wc3, C, pn, 3));
        CHECK(TH_VALUE_CLOSE(g, h[i], wh, C, pn, 4));
        CHECK(TH_VALUE_CLOSE(g, e[i], we, C, pn, 5));
        CHECK(TH_VALUE_CLOSE(g, c[i], wc, C, pn, 6));
        CHECK(TH_VALUE_CLOSE(g, h2[i], wh2, C, pn, 7));
        CHECK(TH_VALUE_CLOSE(g, e2[i], we2, C, pn, 8));
        CHECK(TH_VALUE_CLOSE(g, c2[i], wc, C, pn, 9));
      }
      CHECK_OK(ctx, sheaf_graph_reset(g));
    }
    if (k_pols[pi] == SHEAF_POLICY_SHEAF) { /* h stores c: its program has a side output */
      size_t nk = sheaf_graph_kernel_stats(g, 0, NULL, NULL, NULL);
      const char *names[32];
      uint64_t nb[32], nn[32];
      REQUIRE(nk <= 32);
      sheaf_graph_kernel_stats(g, nk, names, nb, nn);
      bool side = false;
      for (size_t k = 0; k < nk; k++) side |= strstr(names[k], "tanh({x0*x1})") != NULL;
      CHECK(side);
    }
    sheaf_graph_free(g);
  }
  sheaf_model_free(m);
}

/* A reader of a value that was absorbed into a chain which the reader
 * itself could absorb: a = f(x); a / (a + f(y)) (hand-written softmax),
 * a * (a + y), (a + f(y)) * a, and the .sf softmax a / (a + b) with
 * b = exp(y) (issue: "node N (exp) has no value" under policy sheaf). Every
 * policy, one and two threads, several instances, against double. */
typedef enum { RA_DIV_SUM, RA_MUL_SUM, RA_SUM_MUL, RA_SOFTMAX2, RA_DEEP, RA_N } ra_pattern;

static sheaf_expr ra_f(sheaf_graph *g, int f, sheaf_expr x) {
  return f ? sheaf_exp(g, x) : sheaf_tanh(g, x);
}
static double ra_fd(int f, double x) { return f ? exp(x) : tanh(x); }

static sheaf_expr ra_build(sheaf_graph *g, ra_pattern p, int f, sheaf_expr x, sheaf_expr y) {
  sheaf_expr a = ra_f(g, f, x);
  switch (p) {
  case RA_DIV_SUM: return sheaf_div(g, a, sheaf_add(g, a, ra_f(g, f, y)));
  case RA_MUL_SUM: return sheaf_mul(g, a, sheaf_add(g, a, y));
  case RA_SUM_MUL: return sheaf_mul(g, sheaf_add(g, a, ra_f(g, f, y)), a);
  case RA_SOFTMAX2: {
    sheaf_expr b = sheaf_exp(g, y), z = sheaf_add(g, a, b);
    return sheaf_div(g, a, z);
  }
  default: /* the absorbed value two levels down: sigmoid(tanh(a + y)) * a - a */
    return sheaf_sub(g, sheaf_mul(g, sheaf_sigmoid(g, sheaf_tanh(g, sheaf_add(g, a, y))), a), a);
  }
}

static double ra_ref(ra_pattern p, int f, double x, double y) {
  double a = ra_fd(f, x);
  switch (p) {
  case RA_DIV_SUM: return a / (a + ra_fd(f, y));
  case RA_MUL_SUM: return a * (a + y);
  case RA_SUM_MUL: return (a + ra_fd(f, y)) * a;
  case RA_SOFTMAX2: return a / (a + exp(y));
  default: return sigm(tanh(a + y)) * a - a;
  }
}

TEST(runtime_fusion_reader_of_absorbed_chain) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  enum { C = 21, N = 4 };
  float x[N][C], y[N][C];
  for (int i = 0; i < N; i++)
    for (int j = 0; j < C; j++) /* positive: a / (a + tanh(y)) stays well conditioned */
      x[i][j] = 0.75f + 0.5f * frand(), y[i][j] = 0.75f + 0.5f * frand();
  for (int pi = 0; pi < 4; pi++)
    for (int threads = 1; threads <= 2; threads++) {
      sheaf_graph_opts o = {k_pols[pi], threads, NULL};
      sheaf_graph *g;
      REQUIRE_OK(ctx, sheaf_graph_create(m, &o, &g));
      for (int p = 0; p < RA_N; p++)
        for (int f = 0; f < 2; f++) {
          sheaf_expr out[N];
          for (int i = 0; i < N; i++)
            out[i] = ra_build(g, (ra_pattern)p, f, sheaf_input_vector(g, C, x[i]),
                              sheaf_input_vector(g, C, y[i]));
          CHECK_OK(ctx, sheaf_graph_flush(g));
          for (int i = 0; i < N; i++) {
            double want[C];
            for (int j = 0; j < C; j++) want[j] = ra_ref((ra_pattern)p, f, x[i][j], y[i][j]);
            if (!TH_VALUE_CLOSE(g, out[i], want, C, sheaf_policy_name(k_pols[pi]), i))
              th_fail(__FILE__, __LINE__, "pattern %d, f = %s, %d threads", p, f ? "exp" : "tanh",
                      threads);
          }
          CHECK_OK(ctx, sheaf_graph_reset(g));
        }
      sheaf_graph_free(g);
    }
  sheaf_model_free(m);
}

/* --------------------------------------------------------- fault injection */

static sheaf_status fused_run(sheaf_ctx *ctx, sheaf_policy pol, double *out) {
  sheaf_model *m;
  sheaf_status st = sheaf_model_create(ctx, &m);
  if (st) return st;
  sheaf_graph_opts o = {pol, 2, NULL};
  sheaf_graph *g = NULL;
  st = sheaf_graph_create(m, &o, &g);
  float a[300], b[300], s = 0.5f;
  for (int j = 0; j < 300; j++) a[j] = (float)j / 300, b[j] = 1 - (float)j / 150;
  for (int round = 0; round < 2 && !st; round++) {
    sheaf_expr y[4], c[4];
    for (int i = 0; i < 4; i++) {
      sheaf_expr av = sheaf_input_vector(g, 300, a), bv = sheaf_input_vector(g, 300, b),
                 sv = sheaf_input_vector(g, 1, &s);
      c[i] = sheaf_add(g, sheaf_mul(g, av, bv), sv);
      y[i] = sheaf_mul(g, sheaf_tanh(g, c[i]), sheaf_sigmoid(g, av));
      if (i & 1) y[i] = sheaf_sub(g, y[i], sheaf_scale(g, c[i], 0.25f)); /* c read again */
    }
    st = sheaf_graph_flush(g);
    sheaf_value_view v;
    for (int i = 0; i < 4 && !st; i++) {
      st = sheaf_value(g, y[i], &v);
      if (!st && out) out[i] = v.data[299];
    }
    if (!st) st = sheaf_value(g, c[0], &v); /* absorbed, never read: computed now */
    if (!st && out) out[4] = v.data[7];
    if (!st) st = sheaf_graph_reset(g);
  }
  sheaf_graph_free(g);
  sheaf_model_free(m);
  return st;
}

TEST(runtime_fusion_allocation_failures) {
  sheaf_ctx *ctx = th_ctx();
  double ref[5], got[5];
  REQUIRE_OK(ctx, fused_run(ctx, SHEAF_POLICY_NONE, ref));
  REQUIRE_OK(ctx, fused_run(ctx, SHEAF_POLICY_SHEAF, got));
  for (int i = 0; i < 5; i++) CHECK_NEAR(got[i], ref[i], 1e-6);
  long c0 = th_fail_alloc_at(0);
  REQUIRE_OK(ctx, fused_run(ctx, SHEAF_POLICY_SHEAF, NULL));
  long total = th_fail_alloc_at(0) - c0;
  CHECK(total > 5);
  for (long at = 1; at <= total; at++) {
    th_fail_alloc_at(at);
    sheaf_status st = fused_run(ctx, SHEAF_POLICY_SHEAF, NULL);
    th_fail_alloc_at(0);
    if (st != SHEAF_OK && st != SHEAF_ERR_NOMEM)
      th_fail(__FILE__, __LINE__, "allocation %ld: %s (%s)", at, sheaf_status_str(st),
              sheaf_ctx_last_error(ctx));
  }
}

/* ------------------------------------------------------------------ phases */

/* Depth counts within a phase: chains of different lengths, each ending in
 * a phase-1 classifier, give one classifier batch. */
TEST(runtime_fusion_phase_relative_depth) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  sheaf_param W, Wo;
  int64_t ws[2] = {6, 6}, wo[2] = {6, 3};
  REQUIRE_OK(ctx, sheaf_model_param(m, "W", 2, ws, SHEAF_INIT_GLOROT, &W));
  REQUIRE_OK(ctx, sheaf_model_param(m, "W_out", 2, wo, SHEAF_INIT_GLOROT, &Wo));
  float x[6] = {1, -1, 0.5f, 0.25f, -0.5f, 2};
  double ref[10][3];
  for (int pi = 0; pi < 4; pi++) {
    sheaf_graph_opts o = {k_pols[pi], 1, NULL};
    sheaf_graph *g;
    REQUIRE_OK(ctx, sheaf_graph_create(m, &o, &g));
    sheaf_expr out[10];
    for (int i = 0; i < 10; i++) {
      sheaf_expr h = sheaf_input_vector(g, 6, x);
      for (int t = 0; t <= i; t++) h = sheaf_tanh(g, sheaf_affine(g, W, h, SHEAF_NO_PARAM));
      sheaf_graph_phase(g, 1);
      out[i] = sheaf_log_softmax(g, sheaf_affine(g, Wo, h, SHEAF_NO_PARAM));
      sheaf_graph_phase(g, 0);
    }
    CHECK_OK(ctx, sheaf_graph_flush(g));
    for (int i = 0; i < 10; i++) {
      sheaf_value_view v;
      if (!CHECK_OK(ctx, sheaf_value(g, out[i], &v))) break;
      for (int j = 0; j < 3; j++) {
        if (pi == 0) ref[i][j] = v.data[j];
        else CHECK_NEAR(v.data[j], ref[i][j], 1e-6);
      }
    }
    const char *names[8];
    uint64_t nb[8], nn[8];
    size_t nk = sheaf_graph_kernel_stats(g, 8, names, nb, nn);
    for (size_t k = 0; k < nk; k++)
      if (!strcmp(names[k], "affine W_out") && k_pols[pi] != SHEAF_POLICY_NONE)
        CHECK_EQ_SIZE(nb[k], 1);
    sheaf_graph_free(g);
  }
  sheaf_model_free(m);
}
