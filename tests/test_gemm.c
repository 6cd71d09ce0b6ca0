/*
 * test_gemm.c — the f32 GEMM (src/kernels/gemm.h) against a double-
 * accumulation reference with a normalized bound |c - ref| <= tol·Σ|a||b|,
 * for every ISA level the host supports (explicit isa argument), at sizes
 * below / at / above / multiples of the tiles in M, N and K, across operand
 * modes (row pointers or strided A, K-split sources, packed / transposed /
 * unpacked B, C rows or block, accumulate, 1 or 2 threads), epilogues and
 * the fused LSTM and GRU cells; argument errors and allocation failures.
 * Caller arrays are allocated to their exact size so ASan sees any over-read.
 */
#include <stdlib.h>

#include "harness.h"
#include "kernels/gemm.h"

/* ------------------------------------------------------------ helpers */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static float *fill(int64_t n) { return th_frand_fill(&g_rng, n); }

/* Levels up to SHEAF_ISA (default: the host). */
static int n_isas(void) { return (int)sheaf_cpu_isa() + 1; }

/* A matrix given to the GEMM: M rows of `cols` floats, either one exact-size
 * block with leading dimension ld, or one malloc per row (shuffled order). */
typedef struct mat {
  int64_t m, cols, ld;
  bool rows_mode;
  float *block;
  float **rows;
} mat;

static mat mat_new(int64_t m, int64_t cols, bool rows_mode) {
  mat x = {m, cols, cols + (rows_mode ? 0 : 3), rows_mode, NULL, NULL};
  if (rows_mode) {
    x.rows = malloc((size_t)(m > 0 ? m : 1) * sizeof *x.rows);
    for (int64_t i = 0; i < m; i++) x.rows[i] = fill(cols);
  } else {
    x.block = fill(m > 0 ? (m - 1) * x.ld + cols : 0);
  }
  return x;
}
static float *mat_row(const mat *x, int64_t i) {
  return x->rows_mode ? x->rows[i] : x->block + i * x->ld;
}
static void mat_free(mat *x) {
  if (x->rows_mode)
    for (int64_t i = 0; i < x->m; i++) free(x->rows[i]);
  free(x->rows);
  free(x->block);
}
static sh_gemm_in mat_in(const mat *x) {
  return (sh_gemm_in){(const float *const *)x->rows, x->block, x->ld};
}
static sh_gemm_out mat_out(const mat *x) {
  return (sh_gemm_out){x->rows, x->block, x->ld};
}

static const char *isa_names[] = {"scalar", "avx2", "avx512"};

/* ------------------------------------------------------- general case */

typedef struct gcase {
  int64_t m, n, k;
  int nsrc;            /* K-split sources */
  bool a_rows, c_rows; /* row-pointer operands */
  int bmode;           /* 0 packed, 1 packed from B^T, 2 unpacked, 3 unpacked B^T */
  bool acc;
  int threads;
  int n_ep;
  sh_gemm_ep ep[4]; /* vec / other filled by run_case */
  int ep_other_rows;
} gcase;

static double act_ref(sh_gemm_act a, double x, double *lip) {
  switch (a) {
  case SH_GEMM_ACT_RELU: *lip = 1; return x > 0 ? x : 0;
  case SH_GEMM_ACT_SIGMOID: *lip = 0.25; return 1.0 / (1.0 + exp(-x));
  case SH_GEMM_ACT_TANH: *lip = 1; return tanh(x);
  case SH_GEMM_ACT_GELU_TANH:
    *lip = 1.2;
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
  case SH_GEMM_ACT_GELU_ERF: *lip = 1.2; return 0.5 * x * erfc(-x * 0.7071067811865476);
  }
  *lip = 1;
  return x;
}

/* Runs one case at one ISA level; returns false (after reporting) on a mismatch. */
static bool run_case(sheaf_ctx *ctx, sheaf_isa isa, const gcase *gc, sh_gemm_ws *ws) {
  int64_t M = gc->m, N = gc->n, K = gc->k;
  int ns = gc->nsrc;
  int64_t ks[SH_GEMM_MAX_KSRC], k_off[SH_GEMM_MAX_KSRC + 1];
  k_off[0] = 0;
  for (int s = 0; s < ns; s++) {
    ks[s] = K * (s + 1) / ns - K * s / ns;
    k_off[s + 1] = k_off[s] + ks[s];
  }
  mat asrc[SH_GEMM_MAX_KSRC];
  for (int s = 0; s < ns; s++) asrc[s] = mat_new(M, ks[s], gc->a_rows);
  bool bt = gc->bmode == 1 || gc->bmode == 3;
  int64_t ldb = bt ? K + 1 : N + 2;
  float *b = fill(bt ? N * ldb : K * ldb);
  mat c = mat_new(M, N, gc->c_rows);
  float *c0 = malloc((size_t)(M * N + 1) * sizeof(float));
  for (int64_t i = 0; i < M; i++) memcpy(c0 + i * N, mat_row(&c, i), (size_t)N * sizeof(float));
  float *vec = fill(N);
  mat other = mat_new(M, N, gc->ep_other_rows);

  sh_gemm_packed_b *pb = NULL;
  bool ok = true;
  if (gc->bmode < 2)
    ok = CHECK_OK(ctx, sh_gemm_pack_b(ctx, b, ldb, K, N, gc->bmode == 1 ? SH_GEMM_PACK_TRANS : 0,
                                      &pb));
  sh_gemm_args args = {0};
  args.m = M;
  args.n_src = ns;
  for (int s = 0; s < ns; s++) args.src[s] = (sh_gemm_src){ks[s], mat_in(&asrc[s])};
  args.b_packed = pb;
  if (gc->bmode >= 2) {
    args.b = (sh_gemm_in){NULL, b, ldb};
    args.b_trans = gc->bmode == 3;
    args.n = N;
  }
  args.c = mat_out(&c);
  args.accumulate = gc->acc;
  args.n_ep = gc->n_ep;
  for (int i = 0; i < gc->n_ep; i++) {
    args.ep[i] = gc->ep[i];
    args.ep[i].vec = vec;
    args.ep[i].other = mat_in(&other);
  }
  args.ws = ws;
  if (ok) ok = CHECK_OK(ctx, sh_gemm(ctx, isa, gc->threads, &args));

  const double eps = 1.0 / (1 << 23);
  for (int64_t i = 0; ok && i < M; i++) {
    const float *cr = mat_row(&c, i);
    for (int64_t j = 0; ok && j < N; j++) {
      double ref = 0, mag = 0;
      for (int s = 0; s < ns; s++) {
        const float *ar = mat_row(&asrc[s], i);
        for (int64_t kk = 0; kk < ks[s]; kk++) {
          int64_t kg = k_off[s] + kk;
          double bv = bt ? b[j * ldb + kg] : b[kg * ldb + j];
          ref += (double)ar[kk] * bv;
          mag += fabs((double)ar[kk] * bv);
        }
      }
      double bound = (2.0 * (double)K + 4.0) * eps * mag + 1e-30;
      if (gc->acc) {
        ref += c0[i * N + j];
        bound += eps * (fabs(c0[i * N + j]) + mag);
      }
      for (int e = 0; e < gc->n_ep; e++) {
        const sh_gemm_ep *op = &gc->ep[e];
        int64_t n1 = op->n1 <= 0 ? N : op->n1;
        if (j < op->n0 || j >= n1) continue;
        double lip, o = mat_row(&other, i)[j];
        switch (op->kind) {
        case SH_GEMM_EP_BIAS: ref += vec[j]; bound += eps * (fabs(ref) + fabs(vec[j])); break;
        case SH_GEMM_EP_ACT:
          ref = act_ref(op->act, ref, &lip);
          bound = bound * lip + 8 * eps * (fabs(ref) + 1e-3);
          break;
        case SH_GEMM_EP_ADD: ref += o; bound += eps * (fabs(ref) + fabs(o)); break;
        case SH_GEMM_EP_MUL: ref *= o; bound = bound * fabs(o) + eps * fabs(ref); break;
        }
      }
      if (!(fabs(cr[j] - ref) <= bound))
        ok = th_fail(__FILE__, __LINE__,
                     "gemm %s M=%lld N=%lld K=%lld nsrc=%d a_rows=%d c_rows=%d bmode=%d acc=%d "
                     "thr=%d n_ep=%d: C[%lld][%lld] = %.9g, ref %.9g (bound %.3g)",
                     isa_names[isa], (long long)M, (long long)N, (long long)K, ns, gc->a_rows,
                     gc->c_rows, gc->bmode, gc->acc, gc->threads, gc->n_ep, (long long)i,
                     (long long)j, cr[j], ref, bound);
    }
  }
  sh_gemm_packed_b_free(ctx, pb);
  for (int s = 0; s < ns; s++) mat_free(&asrc[s]);
  mat_free(&c);
  mat_free(&other);
  free(b);
  free(c0);
  free(vec);
  return ok;
}

/* Sizes below / at / above / multiples of the tiles: MR = 4 (scalar),
 * 6 (avx2), 14 (avx512); NR = 16 (avx2 half panel), 32; K unrolled by 1. */
static const int64_t Ms[] = {1, 2, 3, 4, 5, 6, 7, 12, 13, 14, 15, 28, 29, 43};
static const int64_t Ns[] = {1, 7, 8, 15, 16, 17, 31, 32, 33, 64, 65};
static const int64_t Ks[] = {0, 1, 2, 7, 16, 33};

TEST(gemm_sizes_all_isas) {
  sheaf_ctx *ctx = th_ctx();
  for (int isa = 0; isa < n_isas(); isa++)
    for (size_t im = 0; im < SH_ARRAY_LEN(Ms); im++)
      for (size_t in = 0; in < SH_ARRAY_LEN(Ns); in++)
        for (size_t ik = 0; ik < SH_ARRAY_LEN(Ks); ik++) {
          size_t h = im * 7 + in * 3 + ik;
          gcase gc = {Ms[im], Ns[in], Ks[ik], 1, h % 2 == 0, h % 3 == 0, (int)(h % 4),
                      false, 1, 0, {{0}}, 0};
          if (!run_case(ctx, (sheaf_isa)isa, &gc, NULL)) return;
        }
}

/* Every operand-mode combination at sizes straddling the AVX-512 tile (the
 * last size is large enough for sh_gemm to use the second thread). */
TEST(gemm_modes_all_combinations) {
  sheaf_ctx *ctx = th_ctx();
  sh_gemm_ws *ws = NULL;
  REQUIRE_OK(ctx, sh_gemm_ws_create(ctx, &ws));
  static const int64_t sz[][3] = {{13, 31, 17}, {14, 32, 64}, {15, 33, 65}, {29, 70, 40}, {43, 130, 70}};
  for (int isa = 0; isa < n_isas(); isa++)
    for (size_t s = 0; s < SH_ARRAY_LEN(sz); s++)
      for (int ns = 1; ns <= 3; ns++)
        for (int mode = 0; mode < 64; mode++) {
          gcase gc = {sz[s][0], sz[s][1], sz[s][2], ns, mode & 1, (mode >> 1) & 1,
                      (mode >> 2) % 4, (mode / 16) & 1, 1 + (mode / 32), 0, {{0}}, 0};
          if (!run_case(ctx, (sheaf_isa)isa, &gc, mode % 5 ? ws : NULL)) goto out;
        }
out:
  sh_gemm_ws_free(ctx, ws);
}

/* Large K / M / N to cross the cache blocks (KC, MC, NC), default and tiny. */
TEST(gemm_blocking_paths) {
  sheaf_ctx *ctx = th_ctx();
  int64_t kc, mc, nc, sm;
  sh_gemm_get_blocking(&kc, &mc, &nc, &sm);
  static const int64_t sz[][3] = {{1, 300, 800}, {100, 100, 385}, {64, 1030, 70}, {350, 40, 20}};
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1) sh_gemm_set_blocking(24, 20, 2, 30);
    for (int isa = 0; isa < n_isas(); isa++)
      for (size_t s = 0; s < SH_ARRAY_LEN(sz); s++)
        for (int mode = 0; mode < 6; mode++) {
          gcase gc = {sz[s][0], sz[s][1], sz[s][2], 1 + mode % 2, mode & 1, mode >= 3, mode % 4,
                      mode == 4, 1 + (mode & 1), 0, {{0}}, 0};
          if (!run_case(ctx, (sheaf_isa)isa, &gc, NULL)) goto out;
        }
  }
out:
  sh_gemm_set_blocking(kc, mc, nc, sm);
}

TEST(gemm_epilogues) {
  sheaf_ctx *ctx = th_ctx();
  static const int64_t sz[][3] = {{1, 5, 3}, {7, 45, 20}, {14, 64, 32}, {20, 100, 9}, {70, 200, 40}};
  for (int isa = 0; isa < n_isas(); isa++)
    for (size_t s = 0; s < SH_ARRAY_LEN(sz); s++)
      for (int v = 0; v < 12; v++) {
        int64_t N = sz[s][1];
        gcase gc = {sz[s][0], N, sz[s][2], 1 + v % 2, v & 1, (v >> 1) & 1, v % 4, v == 5,
                    1 + (v & 1), 0, {{0}}, (v >> 2) & 1};
        /* bias everywhere, then activations by column range (e.g. gates) */
        gc.ep[gc.n_ep++] = (sh_gemm_ep){.kind = SH_GEMM_EP_BIAS};
        int act = v % 5;
        gc.ep[gc.n_ep++] = (sh_gemm_ep){.kind = SH_GEMM_EP_ACT, .n0 = 0, .n1 = N / 3 + 1,
                                        .act = (sh_gemm_act)act};
        gc.ep[gc.n_ep++] = (sh_gemm_ep){.kind = SH_GEMM_EP_ACT, .n0 = N / 3 + 1, .n1 = 0,
                                        .act = (sh_gemm_act)((act + 1) % 5)};
        gc.ep[gc.n_ep++] = (sh_gemm_ep){.kind = v < 6 ? SH_GEMM_EP_MUL : SH_GEMM_EP_ADD,
                                        .n0 = N / 5, .n1 = N - N / 7};
        if (!run_case(ctx, (sheaf_isa)isa, &gc, NULL)) return;
      }
}

/* The small-M and narrow-N paths (AVX2: single-pass 1×32, 2×32, 3×32
 * kernels, a 4-row panel as two 2-row halves interleaved by blocks of 128
 * k, a last panel of at most 8 columns as one 8-column pass and of at most
 * 16 as one 16-column pass into the epilogue tile, the one-pass bias +
 * activation epilogue; B prefetched ahead): rows 1 to 13, N around 8, 16
 * and the half panel (the scorers' N = 3 and 5), K around the 4-row
 * kernel's 128-k blocks and long enough for the prefetch to pass the end of
 * B; plain, accumulated, bias + tanh (alone, accumulated, and on a column
 * range that leaves the one-pass epilogue). */
TEST(gemm_small_m_narrow_n) {
  sheaf_ctx *ctx = th_ctx();
  static const int64_t ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
  static const int64_t ns[] = {1, 3, 5, 7, 8, 9, 16, 17, 35, 48};
  static const int64_t ks[] = {1, 40, 127, 128, 129, 257, 300};
  for (int isa = 0; isa < n_isas(); isa++)
    for (size_t im = 0; im < SH_ARRAY_LEN(ms); im++)
      for (size_t in = 0; in < SH_ARRAY_LEN(ns); in++)
        for (size_t ik = 0; ik < SH_ARRAY_LEN(ks); ik++)
          for (int v = 0; v < 5; v++) {
            /* v 0: plain, 1: accumulate, 2: bias + tanh epilogue, 3: the
             * same accumulated, 4: bias on all columns, tanh on [1, N - 1) */
            bool acc = v == 1 || v == 3;
            gcase gc = {ms[im], ns[in], ks[ik], 1 + (int)(ik & 1), true, acc, 0, acc, 1,
                        0, {{0}}, 0};
            if (v >= 2) {
              gc.ep[gc.n_ep++] = (sh_gemm_ep){.kind = SH_GEMM_EP_BIAS};
              gc.ep[gc.n_ep++] = (sh_gemm_ep){.kind = SH_GEMM_EP_ACT, .act = SH_GEMM_ACT_TANH};
            }
            if (v == 4) {
              if (ns[in] < 3) continue;
              gc.ep[1].n0 = 1;
              gc.ep[1].n1 = ns[in] - 1;
            }
            if (!run_case(ctx, (sheaf_isa)isa, &gc, NULL)) return;
          }
}

/* ----------------------------------------------------------------- LSTM */

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

static bool run_lstm(sheaf_ctx *ctx, sheaf_isa isa, int64_t M, int64_t H, int64_t K, int perm,
                     bool rows, bool prev, bool bias_on, int threads) {
  int gi, gf, go, gu;
  if (perm == 0) gi = 0, gf = 1, go = 2, gu = 3;   /* i, f, o, u */
  else gi = 0, gf = 1, gu = 2, go = 3;              /* PyTorch: i, f, g, o */
  int64_t N = 4 * H;
  mat a = mat_new(M, K, rows), cp = mat_new(M, H, rows), co = mat_new(M, H, rows),
      ho = mat_new(M, H, !rows);
  float *w = fill(K * N), *bias = fill(N);
  sh_gemm_packed_b *pb = NULL;
  bool ok = CHECK_OK(ctx, sh_gemm_pack_b(ctx, w, N, K, N, SH_GEMM_PACK_GATES, &pb));
  sh_gemm_lstm l = {gi, gf, go, gu, bias_on ? bias : NULL,
                    prev ? mat_in(&cp) : (sh_gemm_in){0}, mat_out(&co), mat_out(&ho)};
  sh_gemm_args args = {.m = M, .n_src = 1, .src = {{K, mat_in(&a)}}, .b_packed = pb, .lstm = &l};
  if (ok) ok = CHECK_OK(ctx, sh_gemm(ctx, isa, threads, &args));
  const double eps = 1.0 / (1 << 23);
  for (int64_t i = 0; ok && i < M; i++)
    for (int64_t j = 0; ok && j < H; j++) {
      double z[4], mag = 0;
      for (int g = 0; g < 4; g++) {
        z[g] = bias_on ? bias[g * H + j] : 0;
        for (int64_t k = 0; k < K; k++) {
          double t = (double)mat_row(&a, i)[k] * w[k * N + g * H + j];
          z[g] += t;
          mag += fabs(t);
        }
      }
      double c = sigm(z[gi]) * tanh(z[gu]) + (prev ? sigm(z[gf]) * mat_row(&cp, i)[j] : 0);
      double h = sigm(z[go]) * tanh(c);
      double tol = (2.0 * (double)K + 8) * eps * (mag + 1) + 16 * eps;
      float gc = mat_row(&co, i)[j], gh = mat_row(&ho, i)[j];
      if (!(fabs(gc - c) <= 2 * tol && fabs(gh - h) <= 3 * tol))
        ok = th_fail(__FILE__, __LINE__,
                     "lstm %s M=%lld H=%lld K=%lld perm=%d rows=%d prev=%d: [%lld][%lld] c %.9g "
                     "vs %.9g, h %.9g vs %.9g (tol %.3g)",
                     isa_names[isa], (long long)M, (long long)H, (long long)K, perm, rows, prev,
                     (long long)i, (long long)j, gc, c, gh, h, tol);
    }
  sh_gemm_packed_b_free(ctx, pb);
  mat_free(&a);
  mat_free(&cp);
  mat_free(&co);
  mat_free(&ho);
  free(w);
  free(bias);
  return ok;
}

TEST(gemm_lstm_cell_epilogue) {
  sheaf_ctx *ctx = th_ctx();
  /* around the gate group (16 hidden units over two panels): < 16, one
   * group, one and a bit, several with a partial last one */
  static const int64_t Hs[] = {1, 7, 8, 9, 15, 16, 17, 31, 33, 48, 65};
  static const int64_t Mk[][2] = {{1, 5}, {13, 40}, {15, 64}, {30, 17}, {40, 64}};
  for (int isa = 0; isa < n_isas(); isa++)
    for (size_t h = 0; h < SH_ARRAY_LEN(Hs); h++)
      for (size_t s = 0; s < SH_ARRAY_LEN(Mk); s++) {
        int v = (int)(h + s);
        if (!run_lstm(ctx, (sheaf_isa)isa, Mk[s][0], Hs[h], Mk[s][1], v % 2, (v >> 1) & 1,
                      v % 3 != 0, v % 4 != 1, 1 + v % 2))
          return;
      }
}

/* ------------------------------------------------------------------ GRU */

/* A = [x ; h_prev] as two K-sources; B's gate blocks r, z, nx = [W_n ; 0],
 * nh = [0 ; U_n] in block order given by perm. */
static bool run_gru(sheaf_ctx *ctx, sheaf_isa isa, int64_t M, int64_t H, int64_t D, int perm,
                    bool rows, bool prev, bool bias_on, int threads) {
  int gr, gz, gnx, gnh;
  if (perm == 0) gr = 0, gz = 1, gnx = 2, gnh = 3;
  else gr = 2, gz = 0, gnx = 3, gnh = 1;
  int64_t N = 4 * H, K = D + H;
  mat x = mat_new(M, D, rows), hp = mat_new(M, H, !rows), ho = mat_new(M, H, rows);
  float *w = fill(K * N), *bias = fill(N);
  for (int64_t k = 0; k < K; k++)
    for (int64_t j = 0; j < H; j++) {
      if (k >= D) w[k * N + gnx * H + j] = 0;
      if (k < D) w[k * N + gnh * H + j] = 0;
    }
  sh_gemm_packed_b *pb = NULL;
  bool ok = CHECK_OK(ctx, sh_gemm_pack_b(ctx, w, N, K, N, SH_GEMM_PACK_GATES, &pb));
  sh_gemm_gru g = {gr, gz, gnx, gnh, bias_on ? bias : NULL, prev ? mat_in(&hp) : (sh_gemm_in){0},
                   mat_out(&ho)};
  /* without h_prev the h-part of A is still read: feed zeros through a zero block */
  mat hz = mat_new(M, H, rows);
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < H; j++) mat_row(&hz, i)[j] = prev ? mat_row(&hp, i)[j] : 0.0f;
  sh_gemm_args args = {.m = M, .n_src = 2, .src = {{D, mat_in(&x)}, {H, mat_in(&hz)}},
                       .b_packed = pb, .gru = &g};
  if (ok) ok = CHECK_OK(ctx, sh_gemm(ctx, isa, threads, &args));
  const double eps = 1.0 / (1 << 23);
  for (int64_t i = 0; ok && i < M; i++)
    for (int64_t j = 0; ok && j < H; j++) {
      double z[4], mag = 0;
      for (int q = 0; q < 4; q++) {
        z[q] = bias_on ? bias[q * H + j] : 0;
        for (int64_t k = 0; k < K; k++) {
          double a = k < D ? mat_row(&x, i)[k] : mat_row(&hz, i)[k - D];
          double t = a * w[k * N + q * H + j];
          z[q] += t;
          mag += fabs(t);
        }
      }
      double r = sigm(z[gr]), u = sigm(z[gz]);
      double n = tanh(z[gnx] + r * z[gnh]);
      double h = (1 - u) * n + (prev ? u * mat_row(&hp, i)[j] : 0);
      double tol = 3 * ((2.0 * (double)K + 8) * eps * (mag + 1) + 16 * eps);
      float gh = mat_row(&ho, i)[j];
      if (!(fabs(gh - h) <= tol))
        ok = th_fail(__FILE__, __LINE__,
                     "gru %s M=%lld H=%lld D=%lld perm=%d rows=%d prev=%d: [%lld][%lld] h %.9g vs "
                     "%.9g (tol %.3g)",
                     isa_names[isa], (long long)M, (long long)H, (long long)D, perm, rows, prev,
                     (long long)i, (long long)j, gh, h, tol);
    }
  sh_gemm_packed_b_free(ctx, pb);
  mat_free(&x);
  mat_free(&hp);
  mat_free(&ho);
  mat_free(&hz);
  free(w);
  free(bias);
  return ok;
}

TEST(gemm_gru_cell_epilogue) {
  sheaf_ctx *ctx = th_ctx();
  /* around the gate group (16 hidden units over two panels): < 16, one
   * group, one and a bit, several with a partial last one */
  static const int64_t Hs[] = {1, 7, 8, 9, 15, 16, 17, 31, 33, 48, 65};
  static const int64_t Md[][2] = {{1, 5}, {13, 40}, {15, 64}, {30, 17}, {40, 64}};
  for (int isa = 0; isa < n_isas(); isa++)
    for (size_t h = 0; h < SH_ARRAY_LEN(Hs); h++)
      for (size_t s = 0; s < SH_ARRAY_LEN(Md); s++) {
        int v = (int)(h + s);
        if (!run_gru(ctx, (sheaf_isa)isa, Md[s][0], Hs[h], Md[s][1], v % 2, (v >> 1) & 1,
                     v % 3 != 0, v % 4 != 1, 1 + v % 2))
          return;
      }
}

/* Cells under odd NC blocks (1 and 3 panels: a gate group spans two) and
 * an N split of gate groups over 2 threads (5 groups, tiny tasks). */
TEST(gemm_cell_group_blocking) {
  sheaf_ctx *ctx = th_ctx();
  int64_t kc, mc, nc, sm;
  sh_gemm_get_blocking(&kc, &mc, &nc, &sm);
  static const int64_t ncs[] = {1, 3, 2};
  static const int64_t Hs[] = {5, 17, 65, 80};
  for (size_t b = 0; b < SH_ARRAY_LEN(ncs); b++) {
    sh_gemm_set_blocking(24, 20, ncs[b], 1000);
    for (int isa = 0; isa < n_isas(); isa++)
      for (size_t h = 0; h < SH_ARRAY_LEN(Hs); h++)
        for (int v = 0; v < 2; v++)
          if (!run_lstm(ctx, (sheaf_isa)isa, 13 + 17 * v, Hs[h], 21, v, v, true, true, 2) ||
              !run_gru(ctx, (sheaf_isa)isa, 13 + 17 * v, Hs[h], 11, v, !v, true, true, 2))
            goto out;
  }
out:
  sh_gemm_set_blocking(kc, mc, nc, sm);
}

/* -------------------------------------------------------------- errors */

TEST(gemm_argument_errors) {
  sheaf_ctx *ctx = th_ctx();
  float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4];
  sh_gemm_packed_b *pb = NULL;
  CHECK_STATUS(ctx, sh_gemm_pack_b(ctx, b, 1, 2, 2, 0, &pb), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "ldb");
  CHECK_STATUS(ctx, sh_gemm_pack_b(ctx, b, 3, 2, 3, SH_GEMM_PACK_GATES, &pb), SHEAF_ERR_SHAPE);
  CHECK_STATUS(ctx, sh_gemm_pack_b(ctx, b, 2, -1, 2, 0, &pb), SHEAF_ERR_INVALID_ARG);
  REQUIRE_OK(ctx, sh_gemm_pack_b(ctx, b, 2, 2, 2, 0, &pb));
  sh_gemm_args args = {.m = 2, .n_src = 1, .src = {{2, {NULL, a, 2}}}, .b_packed = pb,
                       .c = {NULL, c, 2}};
  CHECK_OK(ctx, sh_gemm(ctx, SHEAF_ISA_AVX512, 0, &args));
  CHECK_NEAR(c[0], 1, 0);
  CHECK_NEAR(c[3], 4, 0);
  sh_gemm_args bad = args;
  bad.src[0].k = 3;
  bad.src[0].in.ld = 3;
  CHECK_STATUS(ctx, sh_gemm(ctx, SHEAF_ISA_SCALAR, 1, &bad), SHEAF_ERR_SHAPE);
  bad = args;
  bad.n_src = 0;
  CHECK_STATUS(ctx, sh_gemm(ctx, SHEAF_ISA_SCALAR, 1, &bad), SHEAF_ERR_INVALID_ARG);
  bad = args;
  bad.c.ld = 1;
  CHECK_STATUS(ctx, sh_gemm(ctx, SHEAF_ISA_SCALAR, 1, &bad), SHEAF_ERR_INVALID_ARG);
  bad = args;
  bad.n_ep = 1;
  bad.ep[0] = (sh_gemm_ep){.kind = SH_GEMM_EP_BIAS};
  CHECK_STATUS(ctx, sh_gemm(ctx, SHEAF_ISA_SCALAR, 1, &bad), SHEAF_ERR_INVALID_ARG);
  bad.ep[0] = (sh_gemm_ep){.kind = SH_GEMM_EP_ACT, .n0 = 1, .n1 = 3};
  CHECK_STATUS(ctx, sh_gemm(ctx, SHEAF_ISA_SCALAR, 1, &bad), SHEAF_ERR_INVALID_ARG);
  sh_gemm_lstm l = {0, 1, 2, 2, NULL, {0}, {NULL, c, 1}, {NULL, c, 1}};
  bad = args;
  bad.lstm = &l;
  CHECK_STATUS(ctx, sh_gemm(ctx, SHEAF_ISA_SCALAR, 1, &bad), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "SH_GEMM_PACK_GATES");
  sh_gemm_gru gr = {0, 1, 2, 3, NULL, {0}, {NULL, c, 1}};
  bad.gru = &gr;
  CHECK_STATUS(ctx, sh_gemm(ctx, SHEAF_ISA_SCALAR, 1, &bad), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "both");
  bad.lstm = NULL;
  CHECK_STATUS(ctx, sh_gemm(ctx, SHEAF_ISA_SCALAR, 1, &bad), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "GRU");
  CHECK_STATUS(ctx, sh_gemm(ctx, SHEAF_ISA_SCALAR, 1, NULL), SHEAF_ERR_INVALID_ARG);
  /* M = 0 and N = 0 are no-ops */
  bad = args;
  bad.m = 0;
  CHECK_OK(ctx, sh_gemm(ctx, SHEAF_ISA_SCALAR, 1, &bad));
  sh_gemm_packed_b_free(ctx, pb);
}

TEST(gemm_allocation_failures) {
  sheaf_ctx *ctx = th_ctx();
  float *a = fill(20 * 30), *b = fill(30 * 40), *c = fill(20 * 40);
  for (long at = 1; at <= 6; at++) {
    sh_gemm_packed_b *pb = NULL;
    th_fail_alloc_at(at);
    sheaf_status st = sh_gemm_pack_b(ctx, b, 40, 30, 40, 0, &pb);
    if (st == SHEAF_OK) {
      sh_gemm_args args = {.m = 20, .n_src = 1, .src = {{30, {NULL, a, 30}}}, .b_packed = pb,
                           .c = {NULL, c, 40}};
      st = sh_gemm(ctx, SHEAF_ISA_AVX512, 2, &args);
      CHECK(st == SHEAF_OK || st == SHEAF_ERR_NOMEM);
      sh_gemm_packed_b_free(ctx, pb);
    } else {
      CHECK_EQ_INT(st, SHEAF_ERR_NOMEM);
      CHECK(pb == NULL);
    }
    th_fail_alloc_at(0);
  }
  free(a);
  free(b);
  free(c);
}

/* A workspace grows once and then serves calls without allocating. */
TEST(gemm_workspace_reuse) {
  sheaf_ctx *ctx = th_ctx();
  sh_gemm_ws *ws = NULL;
  REQUIRE_OK(ctx, sh_gemm_ws_create(ctx, &ws));
  float *a = fill(64 * 256), *b = fill(256 * 96), *c = fill(64 * 96);
  sh_gemm_args args = {.m = 64, .n_src = 1, .src = {{256, {NULL, a, 256}}},
                       .b = {NULL, b, 96}, .n = 96, .c = {NULL, c, 96}, .ws = ws};
  REQUIRE_OK(ctx, sh_gemm(ctx, SHEAF_ISA_AVX512, 2, &args));
  size_t bytes = sh_gemm_ws_bytes(ws);
  CHECK(bytes > 0);
  long live = th_live_blocks();
  th_fail_alloc_at(1); /* any allocation now would fail the call */
  for (int isa = 0; isa < n_isas(); isa++) CHECK_OK(ctx, sh_gemm(ctx, (sheaf_isa)isa, 2, &args));
  th_fail_alloc_at(0);
  CHECK_EQ_INT(th_live_blocks(), live);
  CHECK_EQ_SIZE(sh_gemm_ws_bytes(ws), bytes);
  sh_gemm_ws_free(ctx, ws);
  free(a);
  free(b);
  free(c);
}

/* ------------------------------------------------------- edge sweeps */

/* The small-M / narrow-N kernels and the one-pass epilogue across operand modes the older tests leave at packed B: every
 * B mode, C as rows or a strided block, 1 and 2 threads, K = 0 and K
 * around and far past the 4-row kernel's 128-k blocks (K = 1500 is two K
 * passes without an epilogue, the second accumulating), and epilogues that
 * take the one-pass path (bias, activation alone: RELU is 0, GELU) or
 * leave it (activation before bias, bias on a column range, two
 * activations), with and without accumulate. */
TEST(gemm_narrow_n_small_m_edges) {
  sheaf_ctx *ctx = th_ctx();
  static const int64_t ms[] = {1, 2, 3, 4, 5, 6, 7, 10};
  static const int64_t ns[] = {1, 2, 3, 5, 8, 9, 16, 17, 24, 32, 33, 40};
  static const int64_t ks[] = {0, 1, 127, 128, 129, 256, 257, 1500};
  int cnt = 0;
  for (int isa = 0; isa < n_isas(); isa++)
    for (size_t im = 0; im < SH_ARRAY_LEN(ms); im++)
      for (size_t in = 0; in < SH_ARRAY_LEN(ns); in++)
        for (size_t ik = 0; ik < SH_ARRAY_LEN(ks); ik++)
          for (int v = 0; v < 8; v++) {
            if (ks[ik] == 1500 && (v > 1 || in % 3)) continue;
            cnt++;
            int64_t N = ns[in];
            gcase gc = {ms[im], N, ks[ik], 1 + cnt % 2, cnt % 3 == 0, cnt % 5 < 2, cnt % 4,
                        (v & 1) != 0, 1 + (cnt % 7 == 0), 0, {{0}}, 0};
            switch (v / 2) {
            case 0: break;
            case 1: /* one pass: activation alone (RELU = 0), or bias + GELU */
              if (v & 1) gc.ep[gc.n_ep++] = (sh_gemm_ep){.kind = SH_GEMM_EP_BIAS};
              gc.ep[gc.n_ep++] = (sh_gemm_ep){.kind = SH_GEMM_EP_ACT,
                                              .act = (v & 1) ? SH_GEMM_ACT_GELU_ERF : SH_GEMM_ACT_RELU};
              break;
            case 2: /* general path: activation then bias */
              gc.ep[gc.n_ep++] = (sh_gemm_ep){.kind = SH_GEMM_EP_ACT, .act = SH_GEMM_ACT_SIGMOID};
              gc.ep[gc.n_ep++] = (sh_gemm_ep){.kind = SH_GEMM_EP_BIAS};
              break;
            default: /* general path: bias on a range, two activations */
              gc.ep[gc.n_ep++] = (sh_gemm_ep){.kind = SH_GEMM_EP_BIAS, .n0 = N / 2};
              gc.ep[gc.n_ep++] = (sh_gemm_ep){.kind = SH_GEMM_EP_ACT, .act = SH_GEMM_ACT_TANH};
              gc.ep[gc.n_ep++] = (sh_gemm_ep){.kind = SH_GEMM_EP_ACT, .n1 = (N + 1) / 2,
                                              .act = SH_GEMM_ACT_SIGMOID};
              break;
            }
            if (!run_case(ctx, (sheaf_isa)isa, &gc, NULL)) return;
          }
}
