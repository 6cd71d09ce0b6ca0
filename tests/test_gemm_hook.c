/*
 * test_gemm_hook.c — the GEMM's row-completion hook (sh_gemm_args.rows_done):
 * every row of C is reported exactly once, tid is a valid pool thread, and
 * a reported row is final — the callback checks it against a double
 * reference (normalized bound) and takes a snapshot that must equal C after
 * the call. Packed / unpacked B, with and without epilogue, accumulate,
 * several K passes, several MC blocks, M or N split, LSTM and GRU cells,
 * 1 and 2 threads, odd M, every ISA level.
 */
#include <stdlib.h>

#include "harness.h"
#include "kernels/gemm.h"

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static float *fill(int64_t n) { return th_frand_fill(&g_rng, n); }

/* What the callback checks: up to two outputs of `cols` columns (C; or the
 * LSTM's c_out and h_out; or the GRU's h_out), base + m*cols. */
typedef struct hook_state {
  int64_t m, cols;
  int n_out, threads;
  const float *out[2];
  const double *ref[2], *tol; /* m × cols */
  float *snap[2];             /* m × cols, copied at report */
  int *count;                 /* per row */
  int bad;                    /* rows not final / out of range / bad tid */
} hook_state;

static void on_rows(void *arg, int64_t m0, int64_t rows, int tid) {
  hook_state *h = arg;
  if (m0 < 0 || rows < 1 || m0 + rows > h->m || tid < 0 || tid >= h->threads) {
    __atomic_fetch_add(&h->bad, 1, __ATOMIC_RELAXED);
    return;
  }
  for (int64_t r = m0; r < m0 + rows; r++) {
    __atomic_fetch_add(&h->count[r], 1, __ATOMIC_RELAXED);
    for (int o = 0; o < h->n_out; o++)
      for (int64_t j = 0; j < h->cols; j++) {
        float v = h->out[o][r * h->cols + j];
        h->snap[o][r * h->cols + j] = v;
        if (!(fabs(v - h->ref[o][r * h->cols + j]) <= h->tol[r * h->cols + j]))
          __atomic_fetch_add(&h->bad, 1, __ATOMIC_RELAXED);
      }
  }
}

/* Checks the counts and snapshots after the call. */
static bool hook_verify(const hook_state *h, const char *what, int isa, int64_t M, int64_t N,
                        int64_t K, int threads) {
  bool ok = true;
  if (h->bad)
    ok = th_fail(__FILE__, __LINE__, "%s isa=%d M=%lld N=%lld K=%lld thr=%d: %d bad reports",
                 what, isa, (long long)M, (long long)N, (long long)K, threads, h->bad);
  for (int64_t r = 0; ok && r < h->m; r++) {
    if (h->count[r] != 1)
      ok = th_fail(__FILE__, __LINE__, "%s isa=%d M=%lld N=%lld K=%lld thr=%d: row %lld reported %d times",
                   what, isa, (long long)M, (long long)N, (long long)K, threads, (long long)r,
                   h->count[r]);
    for (int o = 0; ok && o < h->n_out; o++)
      if (memcmp(h->snap[o] + r * h->cols, h->out[o] + r * h->cols, (size_t)h->cols * sizeof(float)))
        ok = th_fail(__FILE__, __LINE__, "%s isa=%d M=%lld N=%lld: row %lld changed after its report",
                     what, isa, (long long)M, (long long)N, (long long)r);
  }
  return ok;
}

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

/* C = A·B (+ C0) [+ bias, sigmoid on [0, N/2), tanh on [N/2, N)]. */
static bool run_plain(sheaf_ctx *ctx, int isa, int64_t M, int64_t N, int64_t K, bool packed,
                      bool ep, bool acc, int threads) {
  float *a = fill(M * K), *b = fill(K * N), *c = fill(M * N), *bias = fill(N);
  double *ref = malloc((size_t)(M * N) * sizeof *ref), *tol = malloc((size_t)(M * N) * sizeof *tol);
  const double eps = 1.0 / (1 << 23);
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double s = acc ? c[i * N + j] : 0, mag = fabs(s);
      for (int64_t k = 0; k < K; k++) {
        s += (double)a[i * K + k] * b[k * N + j];
        mag += fabs((double)a[i * K + k] * b[k * N + j]);
      }
      if (ep) {
        s += bias[j];
        mag += fabs(bias[j]);
        s = j < N / 2 ? sigm(s) : tanh(s);
      }
      ref[i * N + j] = s;
      tol[i * N + j] = (2.0 * (double)K + 8) * eps * (mag + 1) + 16 * eps;
    }
  sh_gemm_packed_b *pb = NULL;
  bool ok = !packed || CHECK_OK(ctx, sh_gemm_pack_b(ctx, b, N, K, N, 0, &pb));
  int *count = calloc((size_t)M, sizeof *count);
  float *snap = malloc((size_t)(M * N) * sizeof *snap);
  hook_state h = {M, N, 1, threads, {c, NULL}, {ref, NULL}, tol, {snap, NULL}, count, 0};
  sh_gemm_args args = {.m = M, .n_src = 1, .src = {{K, {NULL, a, K}}}, .b_packed = pb,
                       .c = {NULL, c, N}, .accumulate = acc, .rows_done = on_rows,
                       .rows_done_arg = &h};
  if (!packed) {
    args.b = (sh_gemm_in){NULL, b, N};
    args.n = N;
  }
  if (ep) {
    args.n_ep = 3;
    args.ep[0] = (sh_gemm_ep){.kind = SH_GEMM_EP_BIAS, .vec = bias};
    args.ep[1] = (sh_gemm_ep){.kind = SH_GEMM_EP_ACT, .n0 = 0, .n1 = N / 2, .act = SH_GEMM_ACT_SIGMOID};
    args.ep[2] = (sh_gemm_ep){.kind = SH_GEMM_EP_ACT, .n0 = N / 2, .n1 = 0, .act = SH_GEMM_ACT_TANH};
  }
  if (ok) ok = CHECK_OK(ctx, sh_gemm(ctx, (sheaf_isa)isa, threads, &args));
  if (ok) ok = hook_verify(&h, ep ? "gemm+ep" : "gemm", isa, M, N, K, threads);
  sh_gemm_packed_b_free(ctx, pb);
  free(a);
  free(b);
  free(c);
  free(bias);
  free(ref);
  free(tol);
  free(count);
  free(snap);
  return ok;
}

/* LSTM cell (gru = false) or GRU cell over A = [x ; h] (D = K / 2). */
static bool run_cell(sheaf_ctx *ctx, int isa, int64_t M, int64_t H, int64_t K, bool gru,
                     int threads) {
  int64_t N = 4 * H;
  float *a = fill(M * K), *w = fill(K * N), *bias = fill(N), *cp = fill(M * H);
  float *co = fill(M * H), *ho = fill(M * H);
  double *rc = malloc((size_t)(M * H) * sizeof *rc), *rh = malloc((size_t)(M * H) * sizeof *rh);
  double *tol = malloc((size_t)(M * H) * sizeof *tol);
  const double eps = 1.0 / (1 << 23);
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < H; j++) {
      double z[4], mag = 0;
      for (int g = 0; g < 4; g++) {
        z[g] = bias[g * H + j];
        for (int64_t k = 0; k < K; k++) {
          double t = (double)a[i * K + k] * w[k * N + g * H + j];
          z[g] += t;
          mag += fabs(t);
        }
      }
      if (gru) { /* gates r, z, nx, nh in order; the test B has no zero blocks: fine for a check */
        double r = sigm(z[0]), u = sigm(z[1]), n = tanh(z[2] + r * z[3]);
        rh[i * H + j] = (1 - u) * n + u * cp[i * H + j];
      } else { /* i, f, o, u */
        double c = sigm(z[0]) * tanh(z[3]) + sigm(z[1]) * cp[i * H + j];
        rc[i * H + j] = c;
        rh[i * H + j] = sigm(z[2]) * tanh(c);
      }
      tol[i * H + j] = 4 * ((2.0 * (double)K + 8) * eps * (mag + 1) + 16 * eps);
    }
  sh_gemm_packed_b *pb = NULL;
  bool ok = CHECK_OK(ctx, sh_gemm_pack_b(ctx, w, N, K, N, SH_GEMM_PACK_GATES, &pb));
  int *count = calloc((size_t)M, sizeof *count);
  float *s0 = malloc((size_t)(M * H) * sizeof *s0), *s1 = malloc((size_t)(M * H) * sizeof *s1);
  hook_state h = {M, H, gru ? 1 : 2, threads, {ho, co}, {rh, rc}, tol, {s0, s1}, count, 0};
  sh_gemm_lstm l = {0, 1, 2, 3, bias, {NULL, cp, H}, {NULL, co, H}, {NULL, ho, H}};
  sh_gemm_gru g = {0, 1, 2, 3, bias, {NULL, cp, H}, {NULL, ho, H}};
  sh_gemm_args args = {.m = M, .n_src = 2, .src = {{K / 2, {NULL, a, K}}, {K - K / 2, {NULL, a + K / 2, K}}},
                       .b_packed = pb, .rows_done = on_rows, .rows_done_arg = &h};
  if (gru) args.gru = &g;
  else args.lstm = &l;
  if (ok) ok = CHECK_OK(ctx, sh_gemm(ctx, (sheaf_isa)isa, threads, &args));
  if (ok) ok = hook_verify(&h, gru ? "gru" : "lstm", isa, M, N, K, threads);
  sh_gemm_packed_b_free(ctx, pb);
  free(a);
  free(w);
  free(bias);
  free(cp);
  free(co);
  free(ho);
  free(rc);
  free(rh);
  free(tol);
  free(count);
  free(s0);
  free(s1);
  return ok;
}

TEST(gemm_rows_done_hook) {
  sheaf_ctx *ctx = th_ctx();
  int64_t kc, mc, nc, sm;
  sh_gemm_get_blocking(&kc, &mc, &nc, &sm);
  /* M (odd, several micro-panels / MC blocks), N (inside one NC block or
   * several), K (one pass, or several without an epilogue) */
  static const int64_t sz[][3] = {{1, 40, 9}, {13, 33, 20}, {29, 300, 64}, {77, 70, 130},
                                  {301, 96, 50}, {150, 520, 33}};
  for (int pass = 0; pass < 2; pass++) {
    /* pass 1: tiny blocks, so that K passes, MC blocks and an M split all occur */
    if (pass == 1) sh_gemm_set_blocking(24, 20, 2, 30);
    for (int isa = 0; isa < (int)sheaf_cpu_isa() + 1; isa++)
      for (size_t s = 0; s < SH_ARRAY_LEN(sz); s++)
        for (int v = 0; v < 8; v++) {
          int threads = 1 + (v & 1);
          if (!run_plain(ctx, isa, sz[s][0], sz[s][1], sz[s][2], (v >> 1) & 1, (v >> 2) & 1,
                         v == 1 || v == 6, threads))
            goto out;
        }
    static const int64_t cells[][3] = {{1, 8, 10}, {15, 9, 40}, {43, 33, 64}, {271, 16, 32}};
    for (int isa = 0; isa < (int)sheaf_cpu_isa() + 1; isa++)
      for (size_t s = 0; s < SH_ARRAY_LEN(cells); s++)
        for (int v = 0; v < 4; v++)
          if (!run_cell(ctx, isa, cells[s][0], cells[s][1], cells[s][2], v >= 2, 1 + (v & 1)))
            goto out;
  }
out:
  sh_gemm_set_blocking(kc, mc, nc, sm);
}
