/*
 * test_runtime.c — every builder of the define-by-run API (sheaf_graph.h)
 * against a scalar double-precision reference, under every policy, with
 * several instances per graph so batches hold more than one node: affine
 * (bias, matrices, concat K-split, affine_n, fused activations and the raw
 * value of a fused affine), LSTM cell, matmul, elementwise ops with scalar
 * broadcast, reductions, softmax, pick, concat / slice / reshape views,
 * lookups and parameters; phases; incremental flushes; statistics.
 */
#include <math.h>
#include <stdlib.h>

#include "harness.h"

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static float frand(void) { return th_frand(&g_rng); } /* uniform in [-1, 1) */
static void fill(float *p, int64_t n) {
  for (int64_t i = 0; i < n; i++) p[i] = frand();
}

static const sheaf_policy k_policies[] = {SHEAF_POLICY_SHEAF, SHEAF_POLICY_NONE, SHEAF_POLICY_DEPTH,
                                          SHEAF_POLICY_AGENDA};

/* |got - want| <= tol * max(1, |want|) for n values. */
static bool near_all(const float *got, const double *want, int64_t n, double tol, const char *what,
                     int line) {
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - want[i]), s = fabs(want[i]) > 1 ? fabs(want[i]) : 1;
    if (!(d <= tol * s))
      return th_fail(__FILE__, line, "%s: element %lld: got %.9g, want %.9g", what, (long long)i,
                     (double)got[i], want[i]);
  }
  return true;
}

/* Reads e and compares it with want (shape checked). */
static bool expect(sheaf_graph *g, sheaf_expr e, int rank, int64_t r, int64_t c, const double *want,
                   double tol, const char *what, int line) {
  sheaf_value_view v;
  sheaf_status st = sheaf_value(g, e, &v);
  if (st != SHEAF_OK)
    return th_fail(__FILE__, line, "%s: sheaf_value: %s", what, sheaf_status_str(st));
  int64_t n0 = rank == 2 ? r : c;
  if (v.rank != rank || v.shape[0] != n0 || (rank == 2 && v.shape[1] != c))
    return th_fail(__FILE__, line, "%s: shape rank %d [%lld, %lld]", what, v.rank,
                   (long long)v.shape[0], (long long)v.shape[1]);
  return near_all(v.data, want, rank == 2 ? r * c : c, tol, what, line);
}
#define EXPECT(g, e, rank, r, c, want, tol) expect(g, e, rank, r, c, want, tol, #e, __LINE__)

/* ------------------------------------------------------------- references */

/* y[r][n] = sum_k x[r][k] W[k][n] (+ b[n]) */
static void ref_affine(const float *x, int64_t r, int64_t k, const float *W, int64_t n,
                       const float *b, double *y) {
  for (int64_t i = 0; i < r; i++)
    for (int64_t j = 0; j < n; j++) {
      double s = b ? b[j] : 0;
      for (int64_t kk = 0; kk < k; kk++) s += (double)x[i * k + kk] * W[kk * n + j];
      y[i * n + j] = s;
    }
}
static double sigm(double x) { return 1 / (1 + exp(-x)); }

typedef struct fixture {
  sheaf_ctx *ctx;
  sheaf_model *m;
} fixture;

static bool fx_init(fixture *f) {
  f->ctx = th_ctx();
  return f->ctx && sheaf_model_create(f->ctx, &f->m) == SHEAF_OK;
}

static sheaf_param param(fixture *f, const char *name, int rank, int64_t a, int64_t b) {
  int64_t s[2] = {a, b};
  sheaf_param p = SHEAF_NO_PARAM;
  CHECK_OK(f->ctx, sheaf_model_param(f->m, name, rank, s, SHEAF_INIT_GLOROT, &p));
  float *d = sheaf_model_param_data(f->m, p, NULL, NULL);
  if (d) fill(d, rank == 2 ? a * b : a);
  return p;
}
static float *pdata(fixture *f, sheaf_param p) {
  return sheaf_model_param_data(f->m, p, NULL, NULL);
}

static sheaf_graph *graph(fixture *f, sheaf_policy pol) {
  sheaf_graph_opts o = {pol, 0, NULL};
  sheaf_graph *g = NULL;
  CHECK_OK(f->ctx, sheaf_graph_create(f->m, &o, &g));
  return g;
}

/* ----------------------------------------------------------------- tests */

#define NI 5 /* instances per graph */

TEST(runtime_affine_all_policies) {
  fixture f;
  REQUIRE(fx_init(&f));
  enum { K1 = 7, K2 = 13, N = 37 };
  sheaf_param W = param(&f, "W", 2, K1 + K2, N), b = param(&f, "b", 1, N, 0);
  sheaf_param W1 = param(&f, "W1", 2, K1, N), W2 = param(&f, "W2", 2, K2, N);
  for (int pi = 0; pi < 4; pi++) {
    sheaf_graph *g = graph(&f, k_policies[pi]);
    REQUIRE(g);
    float x1[NI][3 * K1], x2[NI][3 * K2], xc[NI][K1 + K2];
    sheaf_expr e_cat[NI], e_plain[NI], e_n[NI], e_mat[NI], e_tanh[NI], e_sig_raw[NI], e_sig[NI];
    for (int i = 0; i < NI; i++) {
      fill(x1[i], 3 * K1);
      fill(x2[i], 3 * K2);
      for (int k = 0; k < K1; k++) xc[i][k] = x1[i][k];
      for (int k = 0; k < K2; k++) xc[i][K1 + k] = x2[i][k];
      sheaf_expr a = sheaf_input_vector(g, K1, x1[i]), c = sheaf_input_vector(g, K2, x2[i]);
      sheaf_expr parts[2] = {a, c};
      e_cat[i] = sheaf_affine(g, W, sheaf_concat(g, 2, parts), b); /* K-split */
      e_plain[i] = sheaf_affine(g, W, sheaf_input_vector(g, K1 + K2, xc[i]), SHEAF_NO_PARAM);
      sheaf_param ws[2] = {W1, W2};
      e_n[i] = sheaf_affine_n(g, 2, ws, parts, b); /* stacked */
      int64_t s1[2] = {3, K1};
      e_mat[i] = sheaf_affine(g, W1, sheaf_input(g, 2, s1, x1[i]), b); /* [3, K1] */
      e_tanh[i] = sheaf_tanh(g, sheaf_affine(g, W1, a, b));            /* fused */
      e_sig_raw[i] = sheaf_affine(g, W2, c, b);
      e_sig[i] = sheaf_sigmoid(g, e_sig_raw[i]); /* fused, raw read after flush */
    }
    CHECK_OK(f.ctx, sheaf_graph_flush(g));
    for (int i = 0; i < NI; i++) {
      double want[3 * 37], t[3 * 37];
      ref_affine(xc[i], 1, K1 + K2, pdata(&f, W), N, pdata(&f, b), want);
      CHECK(EXPECT(g, e_cat[i], 1, 1, N, want, 1e-5));
      ref_affine(xc[i], 1, K1 + K2, pdata(&f, W), N, NULL, want);
      CHECK(EXPECT(g, e_plain[i], 1, 1, N, want, 1e-5));
      ref_affine(x1[i], 1, K1, pdata(&f, W1), N, pdata(&f, b), want);
      ref_affine(x2[i], 1, K2, pdata(&f, W2), N, NULL, t);
      for (int j = 0; j < N; j++) want[j] += t[j];
      CHECK(EXPECT(g, e_n[i], 1, 1, N, want, 1e-5));
      ref_affine(x1[i], 3, K1, pdata(&f, W1), N, pdata(&f, b), want);
      CHECK(EXPECT(g, e_mat[i], 2, 3, N, want, 1e-5));
      ref_affine(x1[i], 1, K1, pdata(&f, W1), N, pdata(&f, b), want);
      for (int j = 0; j < N; j++) want[j] = tanh(want[j]);
      CHECK(EXPECT(g, e_tanh[i], 1, 1, N, want, 1e-5));
      ref_affine(x2[i], 1, K2, pdata(&f, W2), N, pdata(&f, b), want);
      for (int j = 0; j < N; j++) t[j] = sigm(want[j]);
      CHECK(EXPECT(g, e_sig[i], 1, 1, N, t, 1e-5));
      CHECK(EXPECT(g, e_sig_raw[i], 1, 1, N, want, 1e-5));
      CHECK(EXPECT(g, e_sig[i], 1, 1, N, t, 1e-5));
    }
    sheaf_graph_free(g);
  }
  sheaf_model_free(f.m);
}

/* An affine read both raw and through an activation in the same flush. */
TEST(runtime_affine_fused_and_raw) {
  fixture f;
  REQUIRE(fx_init(&f));
  sheaf_param W = param(&f, "W", 2, 5, 9);
  for (int pi = 0; pi < 4; pi++) {
    sheaf_graph *g = graph(&f, k_policies[pi]);
    REQUIRE(g);
    float x[NI][5];
    sheaf_expr act[NI], sum[NI];
    for (int i = 0; i < NI; i++) {
      fill(x[i], 5);
      sheaf_expr a = sheaf_affine(g, W, sheaf_input_vector(g, 5, x[i]), SHEAF_NO_PARAM);
      act[i] = sheaf_relu(g, a);
      sum[i] = i % 2 ? sheaf_add(g, a, act[i]) : act[i]; /* odd instances read a raw */
    }
    for (int i = 0; i < NI; i++) {
      double z[9], want[9];
      ref_affine(x[i], 1, 5, pdata(&f, W), 9, NULL, z);
      for (int j = 0; j < 9; j++) want[j] = (z[j] > 0 ? z[j] : 0) + (i % 2 ? z[j] : 0);
      CHECK(EXPECT(g, sum[i], 1, 1, 9, want, 1e-5));
    }
    sheaf_graph_free(g);
  }
  sheaf_model_free(f.m);
}

TEST(runtime_lstm_cell) {
  fixture f;
  REQUIRE(fx_init(&f));
  enum { X = 6, H = 11 };
  sheaf_param W = param(&f, "W", 2, X + H, 4 * H), b = param(&f, "b", 1, 4 * H, 0);
  for (int pi = 0; pi < 4; pi++) {
    sheaf_graph *g = graph(&f, k_policies[pi]);
    REQUIRE(g);
    float xv[NI][X + H], cp[NI][H];
    sheaf_expr h[NI], c[NI];
    for (int i = 0; i < NI; i++) {
      fill(xv[i], X + H);
      fill(cp[i], H);
      sheaf_expr parts[2] = {sheaf_input_vector(g, X, xv[i]), sheaf_input_vector(g, H, xv[i] + X)};
      sheaf_expr cprev = i % 2 ? sheaf_input_vector(g, H, cp[i]) : (sheaf_expr){0, 0, 0};
      CHECK_OK(f.ctx, sheaf_lstm_cell(g, W, b, sheaf_concat(g, 2, parts), cprev, &h[i], &c[i]));
    }
    for (int i = 0; i < NI; i++) {
      double z[4 * 11], wh[11], wc[11];
      ref_affine(xv[i], 1, X + H, pdata(&f, W), 4 * H, pdata(&f, b), z);
      for (int j = 0; j < H; j++) {
        double cprev = i % 2 ? cp[i][j] : 0;
        wc[j] = sigm(z[H + j]) * cprev + sigm(z[j]) * tanh(z[2 * H + j]);
        wh[j] = sigm(z[3 * H + j]) * tanh(wc[j]);
      }
      CHECK(EXPECT(g, h[i], 1, 1, H, wh, 1e-5));
      CHECK(EXPECT(g, c[i], 1, 1, H, wc, 1e-5));
    }
    sheaf_graph_free(g);
  }
  sheaf_model_free(f.m);
}

TEST(runtime_matmul) {
  fixture f;
  REQUIRE(fx_init(&f));
  for (int pi = 0; pi < 4; pi++) {
    sheaf_graph *g = graph(&f, k_policies[pi]);
    REQUIRE(g);
    enum { R = 3, K = 5, C = 4 };
    float a[NI][R * K], bm[NI][K * C], v[NI][K];
    sheaf_expr mm[NI], vm[NI], mv[NI], vv[NI];
    for (int i = 0; i < NI; i++) {
      fill(a[i], R * K);
      fill(bm[i], K * C);
      fill(v[i], K);
      int64_t sa[2] = {R, K}, sb[2] = {K, C};
      sheaf_expr A = sheaf_input(g, 2, sa, a[i]), B = sheaf_input(g, 2, sb, bm[i]);
      sheaf_expr V = sheaf_input_vector(g, K, v[i]);
      mm[i] = sheaf_matmul(g, A, B);
      vm[i] = sheaf_matmul(g, V, B);
      mv[i] = sheaf_matmul(g, A, V);
      vv[i] = sheaf_matmul(g, V, V);
    }
    for (int i = 0; i < NI; i++) {
      double w[R * C], w2[C], w3[R], w4[1] = {0};
      for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
          double s = 0;
          for (int k = 0; k < K; k++) s += (double)a[i][r * K + k] * bm[i][k * C + c];
          w[r * C + c] = s;
        }
      for (int c = 0; c < C; c++) {
        double s = 0;
        for (int k = 0; k < K; k++) s += (double)v[i][k] * bm[i][k * C + c];
        w2[c] = s;
      }
      for (int r = 0; r < R; r++) {
        double s = 0;
        for (int k = 0; k < K; k++) s += (double)a[i][r * K + k] * v[i][k];
        w3[r] = s;
      }
      for (int k = 0; k < K; k++) w4[0] += (double)v[i][k] * v[i][k];
      CHECK(EXPECT(g, mm[i], 2, R, C, w, 1e-5));
      CHECK(EXPECT(g, vm[i], 1, 1, C, w2, 1e-5));
      CHECK(EXPECT(g, mv[i], 1, 1, R, w3, 1e-5));
      CHECK(EXPECT(g, vv[i], 1, 1, 1, w4, 1e-5));
    }
    sheaf_graph_free(g);
  }
  sheaf_model_free(f.m);
}

enum { EW_N = 19 };

static double ew_ref(int op, double a, double b) {
  switch (op) {
  case 0: return a + b;
  case 1: return a - b;
  case 2: return a * b;
  default: return a / b;
  }
}

TEST(runtime_elementwise_and_activations) {
  fixture f;
  REQUIRE(fx_init(&f));
  sheaf_param pv = param(&f, "pv", 1, EW_N, 0);
  for (int pi = 0; pi < 4; pi++) {
    sheaf_graph *g = graph(&f, k_policies[pi]);
    REQUIRE(g);
    float a[NI][EW_N], b[NI][EW_N], s[NI];
    sheaf_expr bin[NI][4], bc[NI][4], un[NI][8], sn[NI], sc[NI], wp[NI];
    typedef sheaf_expr (*binfn)(sheaf_graph *, sheaf_expr, sheaf_expr);
    typedef sheaf_expr (*unfn)(sheaf_graph *, sheaf_expr);
    binfn bf[4] = {sheaf_add, sheaf_sub, sheaf_mul, sheaf_div};
    unfn uf[6] = {sheaf_tanh, sheaf_sigmoid, sheaf_relu, sheaf_gelu, sheaf_exp, sheaf_ln};
    for (int i = 0; i < NI; i++) {
      fill(a[i], EW_N);
      fill(b[i], EW_N);
      s[i] = 0.5f + (float)i;
      sheaf_expr A = sheaf_input_vector(g, EW_N, a[i]), B = sheaf_input_vector(g, EW_N, b[i]);
      sheaf_expr S = sheaf_input_vector(g, 1, &s[i]);
      for (int o = 0; o < 4; o++) {
        bin[i][o] = bf[o](g, A, B);
        bc[i][o] = o % 2 ? bf[o](g, S, A) : bf[o](g, A, S); /* scalar broadcast, both sides */
      }
      for (int o = 0; o < 6; o++) un[i][o] = uf[o](g, o == 5 ? sheaf_exp(g, A) : A);
      sheaf_expr three[3] = {A, B, A};
      sn[i] = sheaf_sum_n(g, 3, three);
      sc[i] = sheaf_scale(g, A, -2.5f);
      wp[i] = sheaf_add(g, A, sheaf_parameter(g, pv)); /* a parameter in every row: reuse */
    }
    CHECK_OK(f.ctx, sheaf_graph_flush(g));
    for (int i = 0; i < NI; i++) {
      double w[EW_N];
      for (int o = 0; o < 4; o++) {
        for (int j = 0; j < EW_N; j++) w[j] = ew_ref(o, a[i][j], b[i][j]);
        CHECK(EXPECT(g, bin[i][o], 1, 1, EW_N, w, 1e-6));
        for (int j = 0; j < EW_N; j++)
          w[j] = o % 2 ? ew_ref(o, s[i], a[i][j]) : ew_ref(o, a[i][j], s[i]);
        CHECK(EXPECT(g, bc[i][o], 1, 1, EW_N, w, 1e-6));
      }
      for (int o = 0; o < 6; o++) {
        for (int j = 0; j < EW_N; j++) {
          double x = a[i][j];
          w[j] = o == 0   ? tanh(x)
                 : o == 1 ? sigm(x)
                 : o == 2 ? (x > 0 ? x : 0)
                 : o == 3 ? 0.5 * x * (1 + erf(x / sqrt(2.0)))
                 : o == 4 ? exp(x)
                          : x;
        }
        CHECK(EXPECT(g, un[i][o], 1, 1, EW_N, w, 2e-6));
      }
      for (int j = 0; j < EW_N; j++) w[j] = 2.0 * a[i][j] + b[i][j];
      CHECK(EXPECT(g, sn[i], 1, 1, EW_N, w, 1e-6));
      for (int j = 0; j < EW_N; j++) w[j] = -2.5 * a[i][j];
      CHECK(EXPECT(g, sc[i], 1, 1, EW_N, w, 1e-6));
      for (int j = 0; j < EW_N; j++) w[j] = (double)a[i][j] + pdata(&f, pv)[j];
      CHECK(EXPECT(g, wp[i], 1, 1, EW_N, w, 1e-6));
    }
    sheaf_graph_free(g);
  }
  sheaf_model_free(f.m);
}

TEST(runtime_reductions_softmax_pick) {
  fixture f;
  REQUIRE(fx_init(&f));
  enum { R = 3, N = 10 };
  for (int pi = 0; pi < 4; pi++) {
    sheaf_graph *g = graph(&f, k_policies[pi]);
    REQUIRE(g);
    float x[NI][R * N];
    sheaf_expr red[NI][3], redm[NI][3], sm[NI], lsm[NI], smm[NI], pk[NI], pkm[NI];
    for (int i = 0; i < NI; i++) {
      fill(x[i], R * N);
      int64_t s[2] = {R, N};
      sheaf_expr v = sheaf_input_vector(g, N, x[i]), M = sheaf_input(g, 2, s, x[i]);
      red[i][0] = sheaf_sum(g, v), red[i][1] = sheaf_mean(g, v), red[i][2] = sheaf_max(g, v);
      redm[i][0] = sheaf_sum(g, M), redm[i][1] = sheaf_mean(g, M), redm[i][2] = sheaf_max(g, M);
      sm[i] = sheaf_softmax(g, v);
      lsm[i] = sheaf_log_softmax(g, v);
      smm[i] = sheaf_softmax(g, M);
      pk[i] = sheaf_pick(g, v, i % N);
      pkm[i] = sheaf_pick(g, M, 2);
    }
    for (int i = 0; i < NI; i++) {
      double w[R * N];
      for (int r = 0; r < R; r++) {
        double s = 0, mx = -INFINITY;
        for (int j = 0; j < N; j++) s += x[i][r * N + j], mx = fmax(mx, x[i][r * N + j]);
        double want[3] = {s, s / N, mx};
        double e = 0;
        for (int j = 0; j < N; j++) e += exp(x[i][r * N + j] - mx);
        for (int j = 0; j < N; j++) w[r * N + j] = exp(x[i][r * N + j] - mx) / e;
        if (r == 0) {
          for (int k = 0; k < 3; k++) CHECK(EXPECT(g, red[i][k], 1, 1, 1, &want[k], 1e-6));
          CHECK(EXPECT(g, sm[i], 1, 1, N, w, 1e-6));
          double l[N];
          for (int j = 0; j < N; j++) l[j] = x[i][j] - mx - log(e);
          CHECK(EXPECT(g, lsm[i], 1, 1, N, l, 1e-6));
          double p = x[i][i % N];
          CHECK(EXPECT(g, pk[i], 1, 1, 1, &p, 0));
        }
      }
      CHECK(EXPECT(g, smm[i], 2, R, N, w, 1e-6));
      for (int k = 0; k < 3; k++) {
        double want[R];
        for (int r = 0; r < R; r++) {
          double s = 0, mx = -INFINITY;
          for (int j = 0; j < N; j++) s += x[i][r * N + j], mx = fmax(mx, x[i][r * N + j]);
          want[r] = k == 0 ? s : k == 1 ? s / N : mx;
        }
        CHECK(EXPECT(g, redm[i][k], 1, 1, R, want, 1e-6));
      }
      double p3[R] = {x[i][2], x[i][N + 2], x[i][2 * N + 2]};
      CHECK(EXPECT(g, pkm[i], 1, 1, R, p3, 0));
    }
    sheaf_graph_free(g);
  }
  sheaf_model_free(f.m);
}

TEST(runtime_views_concat_slice_reshape_lookup) {
  fixture f;
  REQUIRE(fx_init(&f));
  sheaf_param emb = param(&f, "emb", 2, 10, 6);
  for (int pi = 0; pi < 4; pi++) {
    sheaf_graph *g = graph(&f, k_policies[pi]);
    REQUIRE(g);
    float a[NI][4], b[NI][5];
    sheaf_expr cat[NI], inside[NI], across[NI], rs[NI], lk[NI], z[NI], par[NI], cat2[NI];
    for (int i = 0; i < NI; i++) {
      fill(a[i], 4);
      fill(b[i], 5);
      sheaf_expr parts[2] = {sheaf_input_vector(g, 4, a[i]), sheaf_input_vector(g, 5, b[i])};
      sheaf_expr c = sheaf_concat(g, 2, parts);
      cat[i] = sheaf_scale(g, c, 1.0f);    /* a concat read whole: materialized */
      inside[i] = sheaf_slice(g, c, 5, 8); /* within piece 2: a view */
      across[i] = sheaf_slice(g, c, 2, 7); /* across pieces */
      int64_t s[2] = {3, 2};
      lk[i] = sheaf_lookup(g, emb, i);
      rs[i] = sheaf_tanh(g, sheaf_reshape(g, lk[i], 2, s));
      int64_t zs = 3;
      z[i] = sheaf_zeros(g, 1, &zs);
      par[i] = sheaf_parameter(g, emb);
      sheaf_expr p3[3] = {parts[1], c, parts[0]};
      cat2[i] = sheaf_concat(g, 3, p3); /* nested concat */
    }
    for (int i = 0; i < NI; i++) {
      double w[18];
      for (int j = 0; j < 4; j++) w[j] = a[i][j];
      for (int j = 0; j < 5; j++) w[4 + j] = b[i][j];
      CHECK(EXPECT(g, cat[i], 1, 1, 9, w, 0));
      CHECK(EXPECT(g, inside[i], 1, 1, 3, w + 5, 0));
      CHECK(EXPECT(g, across[i], 1, 1, 5, w + 2, 0));
      double w2[18];
      for (int j = 0; j < 5; j++) w2[j] = b[i][j];
      for (int j = 0; j < 9; j++) w2[5 + j] = w[j];
      for (int j = 0; j < 4; j++) w2[14 + j] = a[i][j];
      CHECK(EXPECT(g, cat2[i], 1, 1, 18, w2, 0));
      const float *e = pdata(&f, emb);
      double we[6], wt[6];
      for (int j = 0; j < 6; j++) we[j] = e[i * 6 + j], wt[j] = tanh(we[j]);
      CHECK(EXPECT(g, lk[i], 1, 1, 6, we, 0));
      CHECK(EXPECT(g, rs[i], 2, 3, 2, wt, 1e-6));
      double zz[3] = {0, 0, 0};
      CHECK(EXPECT(g, z[i], 1, 1, 3, zz, 0));
      double all[60];
      for (int j = 0; j < 60; j++) all[j] = e[j];
      CHECK(EXPECT(g, par[i], 2, 10, 6, all, 0));
    }
    sheaf_graph_free(g);
  }
  sheaf_model_free(f.m);
}

/* Phases run in order; building after a flush and flushing again works. */
TEST(runtime_phases_and_incremental_flush) {
  fixture f;
  REQUIRE(fx_init(&f));
  sheaf_param W = param(&f, "W", 2, 4, 4);
  for (int pi = 0; pi < 4; pi++) {
    sheaf_graph *g = graph(&f, k_policies[pi]);
    REQUIRE(g);
    float x[4] = {0.1f, -0.2f, 0.3f, 0.4f};
    sheaf_expr v = sheaf_input_vector(g, 4, x);
    sheaf_graph_phase(g, 2);
    sheaf_expr a = sheaf_tanh(g, sheaf_affine(g, W, v, SHEAF_NO_PARAM));
    sheaf_graph_phase(g, 0);
    sheaf_expr b = sheaf_tanh(g, sheaf_affine(g, W, a, SHEAF_NO_PARAM)); /* phase 2 by its input */
    CHECK_OK(f.ctx, sheaf_graph_flush(g));
    CHECK_OK(f.ctx, sheaf_graph_flush(g));                                 /* idempotent */
    sheaf_expr c = sheaf_add(g, b, sheaf_affine(g, W, a, SHEAF_NO_PARAM)); /* after the flush */
    double t[4], u[4], w[4];
    ref_affine(x, 1, 4, pdata(&f, W), 4, NULL, t);
    float ta[4];
    for (int j = 0; j < 4; j++) ta[j] = (float)tanh(t[j]);
    ref_affine(ta, 1, 4, pdata(&f, W), 4, NULL, u);
    for (int j = 0; j < 4; j++) w[j] = tanh(u[j]) + u[j];
    CHECK(EXPECT(g, c, 1, 1, 4, w, 1e-5));
    sheaf_graph_stats st;
    sheaf_graph_get_stats(g, &st);
    CHECK(st.nodes >= 7);
    CHECK(st.batches >= 4);
    CHECK(st.flushes >= 1);
    sheaf_graph_free(g);
  }
  sheaf_model_free(f.m);
}

/* Parameter edits are seen by later flushes (packed weights are rebuilt). */
TEST(runtime_param_edit_repacks) {
  fixture f;
  REQUIRE(fx_init(&f));
  sheaf_param W = param(&f, "W", 2, 3, 2);
  sheaf_graph *g = graph(&f, SHEAF_POLICY_SHEAF);
  REQUIRE(g);
  float x[3] = {1, 2, 3};
  sheaf_expr y = sheaf_affine(g, W, sheaf_input_vector(g, 3, x), SHEAF_NO_PARAM);
  sheaf_value_view v;
  REQUIRE_OK(f.ctx, sheaf_value(g, y, &v));
  float *w = sheaf_model_param_data(f.m, W, NULL, NULL);
  for (int i = 0; i < 6; i++) w[i] = (float)i;
  CHECK_OK(f.ctx, sheaf_graph_reset(g));
  y = sheaf_affine(g, W, sheaf_input_vector(g, 3, x), SHEAF_NO_PARAM);
  REQUIRE_OK(f.ctx, sheaf_value(g, y, &v));
  CHECK_NEAR(v.data[0], 1 * 0 + 2 * 2 + 3 * 4, 1e-6);
  CHECK_NEAR(v.data[1], 1 * 1 + 2 * 3 + 3 * 5, 1e-6);
  sheaf_graph_free(g);
  sheaf_model_free(f.m);
}

/* Activations over column slices of an affine run in its epilogue; slices
 * also read raw (same flush, or after it) and the affine itself stay raw. */
TEST(runtime_affine_fused_slices) {
  fixture f;
  REQUIRE(fx_init(&f));
  enum { K = 6, HH = 5, N = 3 * HH };
  sheaf_param W = param(&f, "W", 2, K, N), b = param(&f, "b", 1, N, 0);
  for (int pi = 0; pi < 4; pi++) {
    sheaf_graph *g = graph(&f, k_policies[pi]);
    REQUIRE(g);
    float x[NI][K];
    sheaf_expr z[NI], io[NI], u[NI], c[NI], raw[NI], late[NI];
    for (int i = 0; i < NI; i++) {
      fill(x[i], K);
      z[i] = sheaf_affine(g, W, sheaf_input_vector(g, K, x[i]), b);
      io[i] = sheaf_sigmoid(g, sheaf_slice(g, z[i], 0, 2 * HH));
      u[i] = sheaf_tanh(g, sheaf_slice(g, z[i], 2 * HH, 3 * HH));
      c[i] = sheaf_mul(g, sheaf_slice(g, io[i], 0, HH), u[i]);
      /* instance 1 also reads a fused slice raw in the same flush */
      raw[i] = i == 1 ? sheaf_scale(g, sheaf_slice(g, z[i], 2 * HH, 3 * HH), 1.0f) : c[i];
    }
    CHECK_OK(f.ctx, sheaf_graph_flush(g));
    for (int i = 0; i < NI; i++) /* after the flush: read the fused columns raw */
      late[i] = sheaf_add(g, sheaf_slice(g, z[i], 2 * HH, 3 * HH), u[i]);
    for (int i = 0; i < NI; i++) {
      double zz[N], wc[HH], wio[2 * HH], wl[HH];
      ref_affine(x[i], 1, K, pdata(&f, W), N, pdata(&f, b), zz);
      for (int j = 0; j < 2 * HH; j++) wio[j] = sigm(zz[j]);
      for (int j = 0; j < HH; j++) {
        wc[j] = wio[j] * tanh(zz[2 * HH + j]);
        wl[j] = zz[2 * HH + j] + tanh(zz[2 * HH + j]);
      }
      CHECK(EXPECT(g, io[i], 1, 1, 2 * HH, wio, 1e-5));
      CHECK(EXPECT(g, c[i], 1, 1, HH, wc, 1e-5));
      if (i == 1) CHECK(EXPECT(g, raw[i], 1, 1, HH, zz + 2 * HH, 1e-5));
      CHECK(EXPECT(g, late[i], 1, 1, HH, wl, 1e-5));
      CHECK(EXPECT(g, z[i], 1, 1, N, zz, 1e-5));
      CHECK(EXPECT(g, io[i], 1, 1, 2 * HH, wio, 1e-5)); /* still activated */
    }
    sheaf_graph_free(g);
  }
  sheaf_model_free(f.m);
}
