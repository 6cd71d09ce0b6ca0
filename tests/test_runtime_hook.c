/*
 * test_runtime_hook.c — pointwise programs run in the row hook of the GEMM
 * whose rows they read (src/runtime/pw_exec.c): Tai TreeLSTM cells over
 * random trees at row lengths around the vector widths, every interpreter
 * level (scalar, AVX2, AVX-512 as the host allows), 1 and 2 threads (the
 * GEMM split over rows: the hook runs concurrently; split over columns:
 * the programs run after it, rows split over the pool), against a double
 * reference, fused under policy sheaf and not under the others; and the
 * cases where it must not fuse (another leaf at the GEMM's depth, the
 * affine's raw value read by another op) or fuses only partly (a second
 * root of the same program on one affine), each with correct values.
 */
#include <math.h>
#include <stdlib.h>

#include "harness.h"
#include "runtime/runtime.h"

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static float frand(void) { return th_frand(&g_rng); } /* uniform in [-1, 1) */

static uint32_t irand(uint32_t n) { /* [0, n) */
  frand();
  return (uint32_t)(g_rng >> 35) % n;
}

static const sheaf_policy k_pols[] = {SHEAF_POLICY_SHEAF, SHEAF_POLICY_NONE, SHEAF_POLICY_DEPTH,
                                      SHEAF_POLICY_AGENDA};

static double sigm(double x) { return 1 / (1 + exp(-x)); }


/* y[j] = b[j] + sum_k x[k] W[k][j] */
static void affine_ref(const float *W, const float *b, const double *x, int K, int N, double *y) {
  for (int j = 0; j < N; j++) {
    double s = b ? b[j] : 0;
    for (int k = 0; k < K; k++) s += x[k] * W[(int64_t)k * N + j];
    y[j] = s;
  }
}

/* ------------------------------------------------------------ Tai cells */

enum { E = 24, MAXT = 40, MAXN = 2 * 9 };

typedef struct cells {
  int H;
  sheaf_param Wl, bl, Wn, bn;
  const float *wl, *pbl, *wn, *pbn;
  float x[MAXN][E];
} cells;

/* A random full binary tree of `leaves` leaves: kid[v][0..1] (-1: a leaf). */
typedef struct tree {
  int n, root, kid[MAXN][2];
} tree;

static int tree_grow(tree *t, int leaves) {
  int v = t->n++;
  if (leaves == 1) {
    t->kid[v][0] = t->kid[v][1] = -1;
    return v;
  }
  int l = 1 + (int)irand((uint32_t)leaves - 1);
  t->kid[v][0] = tree_grow(t, l);
  t->kid[v][1] = tree_grow(t, leaves - l);
  return v;
}

static void cell_build(sheaf_graph *g, const cells *P, const tree *t, int v, sheaf_expr *h,
                       sheaf_expr *c) {
  int64_t H = P->H;
  if (t->kid[v][0] < 0) {
    sheaf_expr x = sheaf_input_vector(g, E, P->x[v]);
    sheaf_expr z = sheaf_affine(g, P->Wl, x, P->bl); /* [i o u] */
    sheaf_expr io = sheaf_sigmoid(g, sheaf_slice(g, z, 0, 2 * H));
    sheaf_expr u = sheaf_tanh(g, sheaf_slice(g, z, 2 * H, 3 * H));
    *c = sheaf_mul(g, sheaf_slice(g, io, 0, H), u);
    *h = sheaf_mul(g, sheaf_slice(g, io, H, 2 * H), sheaf_tanh(g, *c));
    return;
  }
  sheaf_expr hl, cl, hr, cr;
  cell_build(g, P, t, t->kid[v][0], &hl, &cl);
  cell_build(g, P, t, t->kid[v][1], &hr, &cr);
  sheaf_expr hh[2] = {hl, hr};
  sheaf_expr z = sheaf_affine(g, P->Wn, sheaf_concat(g, 2, hh), P->bn); /* [i fl fr o u] */
  sheaf_expr gates = sheaf_sigmoid(g, sheaf_slice(g, z, 0, 4 * H));
  sheaf_expr u = sheaf_tanh(g, sheaf_slice(g, z, 4 * H, 5 * H));
  sheaf_expr terms[3] = {
      sheaf_mul(g, sheaf_slice(g, gates, 0, H), u),
      sheaf_mul(g, sheaf_slice(g, gates, H, 2 * H), cl),
      sheaf_mul(g, sheaf_slice(g, gates, 2 * H, 3 * H), cr),
  };
  *c = sheaf_sum_n(g, 3, terms);
  *h = sheaf_mul(g, sheaf_slice(g, gates, 3 * H, 4 * H), sheaf_tanh(g, *c));
}

static void cell_ref(const cells *P, const tree *t, int v, double *h, double *c) {
  int H = P->H;
  double z[5 * 64], xd[2 * 64];
  if (t->kid[v][0] < 0) {
    for (int k = 0; k < E; k++) xd[k] = P->x[v][k];
    affine_ref(P->wl, P->pbl, xd, E, 3 * H, z);
    for (int j = 0; j < H; j++) {
      c[j] = sigm(z[j]) * tanh(z[2 * H + j]);
      h[j] = sigm(z[H + j]) * tanh(c[j]);
    }
    return;
  }
  double cl[64], cr[64];
  cell_ref(P, t, t->kid[v][0], xd, cl);
  cell_ref(P, t, t->kid[v][1], xd + H, cr);
  affine_ref(P->wn, P->pbn, xd, 2 * H, 5 * H, z);
  for (int j = 0; j < H; j++) {
    c[j] = sigm(z[j]) * tanh(z[4 * H + j]) + sigm(z[H + j]) * cl[j] + sigm(z[2 * H + j]) * cr[j];
    h[j] = sigm(z[3 * H + j]) * tanh(c[j]);
  }
}

static void cells_case(int H, int threads, int n_trees, int min_leaves, int max_leaves) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  cells P = {.H = H};
  int64_t wl[2] = {E, 3 * H}, bl[1] = {3 * H}, wn[2] = {2 * H, 5 * H}, bn[1] = {5 * H};
  REQUIRE_OK(ctx, sheaf_model_param(m, "W_leaf", 2, wl, SHEAF_INIT_GLOROT, &P.Wl));
  REQUIRE_OK(ctx, sheaf_model_param(m, "b_leaf", 1, bl, SHEAF_INIT_NORMAL, &P.bl));
  REQUIRE_OK(ctx, sheaf_model_param(m, "W_node", 2, wn, SHEAF_INIT_GLOROT, &P.Wn));
  REQUIRE_OK(ctx, sheaf_model_param(m, "b_node", 1, bn, SHEAF_INIT_NORMAL, &P.bn));
  P.wl = sheaf_model_param_data(m, P.Wl, NULL, NULL);
  P.pbl = sheaf_model_param_data(m, P.bl, NULL, NULL);
  P.wn = sheaf_model_param_data(m, P.Wn, NULL, NULL);
  P.pbn = sheaf_model_param_data(m, P.bn, NULL, NULL);
  for (int v = 0; v < MAXN; v++)
    for (int k = 0; k < E; k++) P.x[v][k] = frand();
  tree *t = calloc((size_t)n_trees, sizeof *t);
  double(*wh)[64] = calloc((size_t)n_trees, sizeof *wh), (*wc)[64] = calloc((size_t)n_trees, sizeof *wc);
  int n_cells = 0;
  for (int i = 0; i < n_trees; i++) {
    t[i].root = tree_grow(&t[i], min_leaves + (int)irand((uint32_t)(max_leaves - min_leaves + 1)));
    n_cells += t[i].n;
    cell_ref(&P, &t[i], t[i].root, wh[i], wc[i]);
  }
  sheaf_isa host = sheaf_cpu_isa_host();
  for (int pi = 0; pi < 4; pi++)
    for (int isa = SHEAF_ISA_SCALAR; isa <= (int)host; isa++) {
      sheaf_graph_opts o = {k_pols[pi], threads, NULL};
      sheaf_graph *g;
      REQUIRE_OK(ctx, sheaf_graph_create(m, &o, &g));
      g->isa = (sheaf_isa)isa; /* every interpreter level */
      for (int round = 0; round < 2; round++) {
        sheaf_expr h[MAXT], c[MAXT];
        for (int i = 0; i < n_trees; i++) cell_build(g, &P, &t[i], t[i].root, &h[i], &c[i]);
        uint64_t before = g->instr.pw_hooked;
        CHECK_OK(ctx, sheaf_graph_flush(g));
        /* policy sheaf: every cell's program ran in its GEMM's hook */
        CHECK_EQ_INT(g->instr.pw_hooked - before, k_pols[pi] == SHEAF_POLICY_SHEAF ? n_cells : 0);
        char what[64];
        snprintf(what, sizeof what, "%s H=%d isa %d threads %d", sheaf_policy_name(k_pols[pi]), H,
                 isa, threads);
        for (int i = 0; i < n_trees; i++) {
          CHECK(TH_VALUE_CLOSE(g, h[i], wh[i], H, what, 2 * i));
          CHECK(TH_VALUE_CLOSE(g, c[i], wc[i], H, what, 2 * i + 1));
        }
        CHECK_OK(ctx, sheaf_graph_reset(g));
      }
      sheaf_graph_free(g);
    }
  free(t);
  free(wh);
  free(wc);
  sheaf_model_free(m);
}

TEST(runtime_hook_tree_cells) {
  cells_case(37, 1, 12, 1, 9); /* partial vectors at every level */
  cells_case(64, 1, 12, 1, 9);
  cells_case(16, 2, 12, 1, 9);
  cells_case(64, 2, 30, 4, 8); /* 2 threads, under 256 rows: run after the GEMM, split */
}

/* 2 threads and 320 leaves: the leaf GEMM splits its rows over the pool, so
 * the hook runs on both threads at once. */
TEST(runtime_hook_concurrent_rows) { cells_case(8, 2, 40, 8, 8); }

/* ---------------------------------------------------- when it must not fuse */

enum { K = 24, N = 21, NI = 5 };

TEST(runtime_hook_not_fused) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  sheaf_param W, b, W2;
  int64_t ws[2] = {K, 2 * N}, bs[1] = {2 * N}, w2[2] = {K, N};
  REQUIRE_OK(ctx, sheaf_model_param(m, "W", 2, ws, SHEAF_INIT_GLOROT, &W));
  REQUIRE_OK(ctx, sheaf_model_param(m, "b", 1, bs, SHEAF_INIT_NORMAL, &b));
  REQUIRE_OK(ctx, sheaf_model_param(m, "W2", 2, w2, SHEAF_INIT_GLOROT, &W2));
  const float *Wd = sheaf_model_param_data(m, W, NULL, NULL), *bd = sheaf_model_param_data(m, b, NULL, NULL),
              *W2d = sheaf_model_param_data(m, W2, NULL, NULL);
  float x[NI][K], a[NI][N];
  double z[NI][2 * N], z2[NI][N], ls[NI][2 * N], wq[NI][K];
  for (int i = 0; i < NI; i++) {
    double xd[K];
    for (int k = 0; k < K; k++) xd[k] = x[i][k] = frand();
    for (int j = 0; j < N; j++) a[i][j] = frand();
    affine_ref(Wd, bd, xd, K, 2 * N, z[i]);
    affine_ref(W2d, NULL, xd, K, N, z2[i]);
    double mx = -INFINITY, s = 0;
    for (int j = 0; j < 2 * N; j++) mx = z[i][j] > mx ? z[i][j] : mx;
    for (int j = 0; j < 2 * N; j++) s += exp(z[i][j] - mx);
    for (int j = 0; j < 2 * N; j++) ls[i][j] = z[i][j] - mx - log(s);
    mx = -INFINITY, s = 0;
    for (int k = 0; k < K; k++) mx = xd[k] > mx ? xd[k] : mx;
    for (int k = 0; k < K; k++) s += exp(xd[k] - mx);
    for (int k = 0; k < K; k++) wq[i][k] = xd[k] - mx - log(s);
  }
  for (int cs = 0; cs < 5; cs++)
    for (int pi = 0; pi < 4; pi++) {
      sheaf_graph_opts o = {k_pols[pi], 1, NULL};
      sheaf_graph *g;
      REQUIRE_OK(ctx, sheaf_graph_create(m, &o, &g));
      sheaf_expr y[NI], y2[NI];
      for (int i = 0; i < NI; i++) {
        sheaf_expr xv = sheaf_input_vector(g, K, x[i]), av = sheaf_input_vector(g, N, a[i]);
        sheaf_expr zz = sheaf_affine(g, W, xv, b);
        sheaf_expr s = sheaf_sigmoid(g, sheaf_slice(g, zz, 0, N));
        switch (cs) {
        case 0: /* another leaf at the GEMM's depth (a row kernel): not yet computed */
          y[i] = sheaf_mul(g, s, sheaf_slice(g, sheaf_log_softmax(g, xv), 0, N));
          y2[i] = sheaf_log_softmax(g, xv);
          break;
        case 1: /* two pending affines (another signature, same depth) */
          y[i] = sheaf_mul(g, s, sheaf_tanh(g, sheaf_affine(g, W2, xv, SHEAF_NO_PARAM)));
          y2[i] = av;
          break;
        case 2: /* the raw value read by another op: activations applied after the GEMM */
          y[i] = sheaf_mul(g, s, av);
          y2[i] = sheaf_log_softmax(g, zz);
          break;
        case 3: /* the activated value read by another op too: fused all the same */
          y[i] = sheaf_mul(g, s, av);
          y2[i] = sheaf_log_softmax(g, s);
          break;
        default: /* two roots of one program on one affine: the second runs after */
          y[i] = sheaf_mul(g, s, av);
          y2[i] = sheaf_mul(g, sheaf_tanh(g, sheaf_slice(g, zz, N, 2 * N)), av);
          break;
        }
      }
      CHECK_OK(ctx, sheaf_graph_flush(g));
      uint64_t want_hooked = k_pols[pi] != SHEAF_POLICY_SHEAF ? 0 : cs <= 2 ? 0 : NI;
      CHECK_EQ_INT(g->instr.pw_hooked, want_hooked);
      char what[48];
      snprintf(what, sizeof what, "case %d %s", cs, sheaf_policy_name(k_pols[pi]));
      for (int i = 0; i < NI; i++) {
        double wy[N], wy2[2 * N], sm[N];
        for (int j = 0; j < N; j++) sm[j] = sigm(z[i][j]);
        for (int j = 0; j < N; j++)
          wy[j] = sm[j] * (cs == 0 ? wq[i][j] : cs == 1 ? tanh(z2[i][j]) : a[i][j]);
        int n2 = N;
        if (cs == 0) {
          n2 = K;
          for (int k = 0; k < K; k++) wy2[k] = wq[i][k];
        } else if (cs == 1) {
          for (int j = 0; j < N; j++) wy2[j] = a[i][j];
        } else if (cs == 2) {
          n2 = 2 * N;
          for (int j = 0; j < 2 * N; j++) wy2[j] = ls[i][j];
        } else if (cs == 3) {
          double mx = -INFINITY, t = 0;
          for (int j = 0; j < N; j++) mx = sm[j] > mx ? sm[j] : mx;
          for (int j = 0; j < N; j++) t += exp(sm[j] - mx);
          for (int j = 0; j < N; j++) wy2[j] = sm[j] - mx - log(t);
        } else {
          for (int j = 0; j < N; j++) wy2[j] = tanh(z[i][N + j]) * a[i][j];
        }
        CHECK(TH_VALUE_CLOSE(g, y[i], wy, N, what, 2 * i));
        CHECK(TH_VALUE_CLOSE(g, y2[i], wy2, n2, what, 2 * i + 1));
      }
      sheaf_graph_free(g);
    }
  sheaf_model_free(m);
}
