/*
 * test_runtime_ew.c — the elementwise ops of the op table (src/kernels/ops.def)
 * that are not covered by the fusion tests: sqrt, rsqrt, abs, softplus, erf, silu,
 * pow, minimum, maximum, the comparisons gt/ge/eq/ne and where. Each runs alone (policy none: a one-op program) and
 * inside a fused chain (policy sheaf), at row widths below, at and above
 * the vector widths and the interpreter's 128-float chunk, on every
 * instruction-set level the host has (the graph's level is lowered
 * directly), against a double reference within 1e-5 relative (floor 1);
 * NaN propagation of minimum/maximum; the language's builtins for them.
 */
#include <math.h>
#include <stdlib.h>

#include "harness.h"
#include "runtime/runtime.h"

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static float urand(float lo, float hi) { return lo + (hi - lo) * 0.5f * (th_frand(&g_rng) + 1.0f); }

typedef enum {
  EW_SQRT, EW_RSQRT, EW_ABS, EW_SOFTPLUS, EW_ERF, EW_SILU, EW_POW, EW_MIN, EW_MAX, EW_GT, EW_GE, EW_EQ, EW_NE, EW_WHERE, EW_N
} ew_op;
static const char *const k_names[EW_N] = {"sqrt", "rsqrt", "abs", "softplus", "erf", "silu", "pow", "minimum",
                                          "maximum", "gt", "ge", "eq", "ne", "where"};

static sheaf_expr ew_build(sheaf_graph *g, ew_op op, sheaf_expr a, sheaf_expr b) {
  switch (op) {
  case EW_SQRT: return sheaf_sqrt(g, a);
  case EW_RSQRT: return sheaf_rsqrt(g, a);
  case EW_ABS: return sheaf_abs(g, a);
  case EW_SOFTPLUS: return sheaf_softplus(g, a);
  case EW_ERF: return sheaf_erf(g, a);
  case EW_SILU: return sheaf_silu(g, a);
  case EW_POW: return sheaf_pow(g, a, b);
  case EW_MIN: return sheaf_minimum(g, a, b);
  case EW_MAX: return sheaf_maximum(g, a, b);
  case EW_GT: return sheaf_gt(g, a, b);
  case EW_GE: return sheaf_ge(g, a, b);
  case EW_EQ: return sheaf_eq(g, a, b);
  case EW_NE: return sheaf_ne(g, a, b);
  default: return sheaf_where(g, a, b, sheaf_sub(g, b, a)); /* a != 0 ? b : b - a */
  }
}

static double ew_ref(ew_op op, double a, double b) {
  switch (op) {
  case EW_SQRT: return sqrt(a);
  case EW_RSQRT: return 1 / sqrt(a);
  case EW_ABS: return fabs(a);
  case EW_SOFTPLUS: return a > 20 ? a : log1p(exp(a));
  case EW_ERF: return erf(a);
  case EW_SILU: return a / (1 + exp(-a));
  case EW_POW: return pow(a, b);
  case EW_MIN: return a < b ? a : b;
  case EW_MAX: return a > b ? a : b;
  case EW_GT: return a > b;
  case EW_GE: return a >= b;
  case EW_EQ: return a == b;
  case EW_NE: return a != b;
  default: return a != 0 ? b : b - a;
  }
}

/* Inputs in the op's domain: positive for the roots and pow's base. */
static void ew_inputs(ew_op op, int n, float *a, float *b) {
  for (int i = 0; i < n; i++) {
    bool pos = op == EW_SQRT || op == EW_RSQRT || op == EW_POW;
    a[i] = pos ? urand(0.25f, 4.0f) : op == EW_SOFTPLUS || op == EW_SILU ? urand(-30.0f, 30.0f) : urand(-3.0f, 3.0f);
    b[i] = op == EW_POW ? urand(-2.0f, 2.0f) : urand(-3.0f, 3.0f);
  }
  for (int i = 1; i < n; i += 3) b[i] = a[i]; /* ties (minimum, maximum, comparisons) */
  for (int i = 2; op == EW_WHERE && i < n; i += 4) a[i] = 0; /* where's false side */
}

/* The interpreters are chosen per level like the other kernels: one per
 * level the host has, a level above it lowered to it. */
TEST(runtime_ew_pw_kernels_per_isa) {
  static const char *names[] = {"scalar", "avx2", "avx512"};
  sheaf_isa host = sheaf_cpu_isa_host();
  for (int isa = SHEAF_ISA_SCALAR; isa <= (int)host; isa++)
    CHECK_EQ_STR(sh_pw_kernels_get((sheaf_isa)isa)->name, names[isa]);
  CHECK_EQ_STR(sh_pw_kernels_get(SHEAF_ISA_AVX512)->name, names[host]);
}

TEST(runtime_ew_ops_every_isa) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  static const int widths[] = {1, 7, 8, 15, 16, 17, 33, 128, 130, 300};
  enum { NI = 3, MAXW = 300 };
  float *a = malloc(NI * MAXW * sizeof *a), *b = malloc(NI * MAXW * sizeof *b);
  double *want = malloc(MAXW * sizeof *want), *want2 = malloc(MAXW * sizeof *want2);
  REQUIRE(a && b && want && want2);
  for (int isa = SHEAF_ISA_SCALAR; isa <= (int)sheaf_cpu_isa(); isa++)
    for (int pol = 0; pol < 2; pol++) {
      sheaf_graph_opts o = {pol ? SHEAF_POLICY_SHEAF : SHEAF_POLICY_NONE, 1, NULL};
      sheaf_graph *g;
      REQUIRE_OK(ctx, sheaf_graph_create(m, &o, &g));
      g->isa = (sheaf_isa)isa;
      for (int op = 0; op < EW_N; op++)
        for (size_t wi = 0; wi < sizeof widths / sizeof *widths; wi++) {
          int n = widths[wi];
          sheaf_expr y[NI], z[NI];
          for (int i = 0; i < NI; i++) {
            ew_inputs((ew_op)op, n, a + i * MAXW, b + i * MAXW);
            sheaf_expr x = sheaf_input_vector(g, n, a + i * MAXW), w = sheaf_input_vector(g, n, b + i * MAXW);
            y[i] = ew_build(g, (ew_op)op, x, w);
            z[i] = sheaf_add(g, sheaf_mul(g, ew_build(g, (ew_op)op, x, w), w), x); /* fused under sheaf */
          }
          CHECK_OK(ctx, sheaf_graph_flush(g));
          for (int i = 0; i < NI; i++) {
            for (int k = 0; k < n; k++) {
              double r = ew_ref((ew_op)op, a[i * MAXW + k], b[i * MAXW + k]);
              want[k] = r;
              want2[k] = r * b[i * MAXW + k] + a[i * MAXW + k];
            }
            if (!TH_VALUE_CLOSE(g, y[i], want, n, k_names[op], i) ||
                !TH_VALUE_CLOSE(g, z[i], want2, n, k_names[op], 10 + i))
              th_fail(__FILE__, __LINE__, "%s, width %d, ISA %s, policy %s", k_names[op], n,
                      sheaf_isa_name((sheaf_isa)isa), sheaf_policy_name(o.policy));
          }
          CHECK_OK(ctx, sheaf_graph_reset(g));
        }
      sheaf_graph_free(g);
    }
  free(a), free(b), free(want), free(want2);
  sheaf_model_free(m);
}

TEST(runtime_ew_min_max_propagate_nan) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  enum { N = 37 };
  float a[N], b[N];
  for (int i = 0; i < N; i++) a[i] = (float)i, b[i] = (float)(N - i);
  a[3] = NAN, b[20] = NAN, a[36] = NAN, b[36] = NAN;
  for (int isa = SHEAF_ISA_SCALAR; isa <= (int)sheaf_cpu_isa(); isa++) {
    sheaf_graph *g;
    REQUIRE_OK(ctx, sheaf_graph_create(m, NULL, &g));
    g->isa = (sheaf_isa)isa;
    sheaf_expr x = sheaf_input_vector(g, N, a), y = sheaf_input_vector(g, N, b);
    sheaf_expr lo = sheaf_minimum(g, x, y), hi = sheaf_maximum(g, x, y);
    sheaf_value_view vl, vh;
    REQUIRE_OK(ctx, sheaf_value(g, lo, &vl));
    REQUIRE_OK(ctx, sheaf_value(g, hi, &vh));
    for (int i = 0; i < N; i++) {
      bool nan = isnan(a[i]) || isnan(b[i]);
      if (nan) {
        CHECK(isnan(vl.data[i]) && isnan(vh.data[i]));
      } else {
        CHECK(vl.data[i] == fminf(a[i], b[i]));
        CHECK(vh.data[i] == fmaxf(a[i], b[i]));
      }
    }
    sheaf_graph_free(g);
  }
  sheaf_model_free(m);
}

/* stack, transpose and layer_norm against double, several instances in one
 * batch (shared and per-instance gamma/beta, two eps values), every policy. */
TEST(runtime_stack_transpose_layer_norm) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  enum { NI = 5, D = 19, R = 3, MAXN = 6 };
  sheaf_param gp, bp;
  REQUIRE_OK(ctx, sheaf_model_param(m, "ln.g", 1, (int64_t[]){D}, SHEAF_INIT_GLOROT, &gp));
  REQUIRE_OK(ctx, sheaf_model_param(m, "ln.b", 1, (int64_t[]){D}, SHEAF_INIT_GLOROT, &bp));
  const float *gd = sheaf_model_param_data(m, gp, NULL, NULL), *bd = sheaf_model_param_data(m, bp, NULL, NULL);
  float rows[NI][MAXN][D], mat[NI][R][D], gam[NI][D], bet[NI][D];
  for (int i = 0; i < NI; i++) {
    for (int k = 0; k < MAXN; k++)
      for (int j = 0; j < D; j++) rows[i][k][j] = urand(-2, 2);
    for (int r = 0; r < R; r++)
      for (int j = 0; j < D; j++) mat[i][r][j] = urand(-2, 2) + (float)r;
    for (int j = 0; j < D; j++) gam[i][j] = urand(-1, 1), bet[i][j] = urand(-1, 1);
  }
  static const sheaf_policy pols[] = {SHEAF_POLICY_SHEAF, SHEAF_POLICY_NONE, SHEAF_POLICY_DEPTH,
                                      SHEAF_POLICY_AGENDA};
  for (int pi = 0; pi < 4; pi++) {
    sheaf_graph_opts o = {pols[pi], 2, NULL};
    sheaf_graph *g;
    REQUIRE_OK(ctx, sheaf_graph_create(m, &o, &g));
    sheaf_expr st[NI], tr[NI], ln[NI];
    for (int i = 0; i < NI; i++) {
      int n = 1 + i % MAXN;
      sheaf_expr xs[MAXN];
      for (int k = 0; k < n; k++) xs[k] = sheaf_input_vector(g, D, rows[i][k]);
      st[i] = sheaf_stack(g, n, xs);
      sheaf_expr x = sheaf_input(g, 2, (int64_t[]){R, D}, &mat[i][0][0]);
      tr[i] = sheaf_transpose(g, x);
      bool shared = i % 2 == 0;
      sheaf_expr ga = shared ? sheaf_parameter(g, gp) : sheaf_input_vector(g, D, gam[i]);
      sheaf_expr be = shared ? sheaf_parameter(g, bp) : sheaf_input_vector(g, D, bet[i]);
      ln[i] = sheaf_layer_norm(g, x, ga, be, i % 3 ? 1e-5f : 0.5f);
    }
    CHECK_OK(ctx, sheaf_graph_flush(g));
    for (int i = 0; i < NI; i++) {
      int n = 1 + i % MAXN;
      double want[MAXN * D];
      for (int k = 0; k < n; k++)
        for (int j = 0; j < D; j++) want[k * D + j] = rows[i][k][j];
      CHECK(TH_VALUE_CLOSE(g, st[i], want, n * D, sheaf_policy_name(pols[pi]), i));
      for (int r = 0; r < R; r++)
        for (int j = 0; j < D; j++) want[j * R + r] = mat[i][r][j];
      CHECK(TH_VALUE_CLOSE(g, tr[i], want, R * D, sheaf_policy_name(pols[pi]), i));
      bool shared = i % 2 == 0;
      double eps = i % 3 ? 1e-5 : 0.5;
      for (int r = 0; r < R; r++) {
        double mean = 0, var = 0;
        for (int j = 0; j < D; j++) mean += mat[i][r][j];
        mean /= D;
        for (int j = 0; j < D; j++) var += (mat[i][r][j] - mean) * (mat[i][r][j] - mean);
        var /= D;
        for (int j = 0; j < D; j++)
          want[r * D + j] = (mat[i][r][j] - mean) / sqrt(var + eps) * (shared ? gd[j] : gam[i][j]) +
                            (shared ? bd[j] : bet[i][j]);
      }
      CHECK(TH_VALUE_CLOSE(g, ln[i], want, R * D, sheaf_policy_name(pols[pi]), i));
    }
    /* misuse: named errors */
    sheaf_expr v = sheaf_input_vector(g, D, rows[0][0]);
    CHECK(sheaf_expr_is_null(sheaf_transpose(g, v)));
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_transpose: x has shape [19] (a matrix");
    sheaf_graph_free(g);
  }
  sheaf_model_free(m);
}
