/*
 * bench_codegen.c — kernels written in the `kernel` notation and compiled
 * through the whole pipeline (sheaf_kernel_compile: lower, default
 * schedule, C, JIT cache; sheaf_kernel_run: argument binding included)
 * against Sheaf's hand kernels, in the same run, 1 thread, thread CPU
 * time, best of rounds that alternate the two:
 *   GEMM (M = 64 and 1600; K, N = 256, 1280 and 512, 2048) vs sh_gemm with
 *     B packed once; the generated kernel's B is an inferred weight, packed
 *     once per version (sheaf_kernel_set_weight_version) — and, column
 *     "v0", packed on every run (version 0);
 *   the cost of one sheaf_kernel_run call (a 1-element kernel);
 *   softmax and layernorm rows (M x N: 64 x 768, 1 x 256, 784 x 256,
 *     64 x 1024, 64 x 256, 7 x 25) vs sh_softmax_rows / sh_layernorm_rows,
 *     through sheaf_kernel_run and through a plan (sheaf_kernel_plan_run),
 *     with the generated body timed alone (the API's per-call cost apart);
 *   ragged attention, one head of 64 and 4 heads of 64, over the first 64
 *     sequence lengths of the bundled WikiText-2 test set
 *     (data/wikitext2_lengths) vs sh_ragged_attention at the same shape (the
 *     generated kernel stores the scores; the hand one fuses softmax per
 *     row block);
 *   cold compile (empty cache) and a cache hit (a new sheaf_kernel).
 *
 *   make bench-codegen [BENCH_ARGS='--quick [--only mm|rows|attn]']
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "codegen/jit.h"
#include "codegen/kernel_api.h"
#include "bench_util.h"
#include "kernels/gemm.h"
#include "kernels/rows.h"
#include "ragged/ops.h"

static const char MM[] = "kernel mm(A: f32[M, K], B: f32[K, N]) -> f32[M, N] { C(m, n) +=! A(m, k) * B(k, n) }\n";
static const char SM[] = "kernel sm(x: f32[N, C]) -> f32[N, C] {\n"
                         "  m(n) max=! x(n, c)\n  e(n, c) = exp(x(n, c) - m(n))\n"
                         "  s(n) +=! e(n, c)\n  out(n, c) = e(n, c) / s(n)\n}\n";
static const char LN[] = "kernel ln(x: f32[N, D], g: f32[D], b: f32[D]) -> f32[N, D] {\n"
                         "  mu(n) +=! x(n, d) / D\n  c(n, d) = x(n, d) - mu(n)\n"
                         "  var(n) +=! c(n, d) * c(n, d) / D\n"
                         "  out(n, d) = c(n, d) * rsqrt(var(n) + 1e-5) * g(d) + b(d)\n}\n";
static const char AT[] = "kernel attn(L: i32[B], q: f32[B, L(b), D], k: f32[B, L(b), D], v: f32[B, L(b), D])\n"
                         "    -> f32[B, L(b), D] {\n"
                         "  s(b, i, j) +=! q(b, i, d) * k(b, j, d) / sqrt(D)\n"
                         "  m(b, i) max=! s(b, i, j)\n  e(b, i, j) = exp(s(b, i, j) - m(b, i))\n"
                         "  z(b, i) +=! e(b, i, j)\n  o(b, i, d) +=! e(b, i, j) * v(b, j, d)\n"
                         "  out(b, i, d) = o(b, i, d) / z(b, i)\n}\n";

/* H heads of 64 in each token's row (the encoder's layout). */
static const char MHA[] = "kernel mha(L: i32[B], q: f32[B, L(b), H, D], k: f32[B, L(b), H, D], v: f32[B, L(b), H, D])\n"
                          "    -> f32[B, L(b), H, D] {\n"
                          "  s(b, h, i, j) +=! q(b, i, h, d) * k(b, j, h, d) / sqrt(D)\n"
                          "  m(b, h, i) max=! s(b, h, i, j)\n  e(b, h, i, j) = exp(s(b, h, i, j) - m(b, h, i))\n"
                          "  z(b, h, i) +=! e(b, h, i, j)\n  o(b, h, i, d) +=! e(b, h, i, j) * v(b, j, h, d)\n"
                          "  out(b, i, h, d) = o(b, h, i, d) / z(b, h, i)\n}\n";

static sheaf_kernel *build(sheaf_ctx *ctx, const char *src, const char *dir, sheaf_isa isa, double *secs) {
  sh_kernel_opts o = {.isa_set = true, .isa = isa, .cache_dir = dir};
  sheaf_kernel *k = NULL;
  double t0 = exb_now_s(false);
  if (sh_kernel_compile_opts(ctx, src, strlen(src), NULL, &o, &k)) {
    fprintf(stderr, "bench_codegen: %s\n", sheaf_ctx_last_error(ctx));
    exit(1);
  }
  if (secs) *secs = exb_now_s(false) - t0;
  return k;
}

static double maxdiff(const float *a, const float *b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]) / fmax(1.0, fabs((double)b[i]));
    if (d > m) m = d;
  }
  return m;
}

/* A 64-byte aligned copy of p's n floats (p freed; NULL: zeros). */
static float *aligned_copy(float *p, int64_t n) {
  size_t bytes = ((size_t)n * sizeof(float) + 63) / 64 * 64;
  float *q = aligned_alloc(64, bytes);
  if (!q) exit(1);
  memset(q, 0, bytes);
  if (p) memcpy(q, p, (size_t)n * sizeof(float));
  free(p);
  return q;
}

/* Ragged attention over the first 64 WikiText-2 test lengths, `heads`
 * heads of 64 (1: kernel attn, rank-3 operands; else mha, rank 4), against
 * sh_ragged_attention on the same data (q, k, v interleaved per token as
 * the in-projection's output), alternating, best of rounds. */
static int bench_attn(sheaf_ctx *ctx, sheaf_isa isa, sheaf_kernel *kat, int heads, bool quick, int rounds,
                      uint64_t *seed) {
  enum { NB = 64, DH = 64 };
  int32_t L[NB];
  int64_t len[NB], off[NB + 1];
  FILE *f = fopen("data/wikitext2_lengths/wiki.test.lengths", "r");
  int nb = 0;
  long v;
  while (f && nb < NB && fscanf(f, "%ld", &v) == 1) L[nb++] = (int32_t)v;
  if (f) fclose(f);
  if (nb < NB) {
    fprintf(stderr, "bench_codegen: data/wikitext2_lengths/wiki.test.lengths not readable (run from the repository root)\n");
    return 1;
  }
  off[0] = 0;
  int64_t maxl = 0, HD = (int64_t)heads * DH;
  for (int b = 0; b < NB; b++) len[b] = L[b], off[b + 1] = off[b] + L[b], maxl = L[b] > maxl ? L[b] : maxl;
  int64_t T = off[NB];
  /* 64-byte aligned, as the runtime's buffers are */
  float *q = aligned_copy(exb_frand_xs(T * HD, seed), T * HD), *kk = aligned_copy(exb_frand_xs(T * HD, seed), T * HD);
  float *vv = aligned_copy(exb_frand_xs(T * HD, seed), T * HD), *qkv = aligned_copy(NULL, T * 3 * HD);
  for (int64_t t = 0; t < T; t++) {
    memcpy(qkv + t * 3 * HD, q + t * HD, sizeof(float) * (size_t)HD);
    memcpy(qkv + t * 3 * HD + HD, kk + t * HD, sizeof(float) * (size_t)HD);
    memcpy(qkv + t * 3 * HD + 2 * HD, vv + t * HD, sizeof(float) * (size_t)HD);
  }
  float *og = aligned_copy(NULL, T * HD), *oh = aligned_copy(NULL, T * HD);
  sh_rseq rs = {.batch = NB, .len = len, .off = off, .n = T, .max_len = maxl};
  sh_attn_ws *aws;
  if (sh_attn_ws_create(ctx, &aws)) return 1;
  int64_t sL[] = {NB}, s3[] = {NB, -1, DH}, s4[] = {NB, -1, heads, DH};
  int rank = heads == 1 ? 3 : 4;
  const int64_t *sq = heads == 1 ? s3 : s4;
  size_t n = (size_t)(T * HD);
  sheaf_kernel_arg aa[] = {{SHEAF_KERNEL_I32, L, NB, 1, sL}, {SHEAF_KERNEL_F32, q, n, rank, sq},
                           {SHEAF_KERNEL_F32, kk, n, rank, sq}, {SHEAF_KERNEL_F32, vv, n, rank, sq},
                           {SHEAF_KERNEL_F32, og, n, 0, NULL}};
  sheaf_kernel_plan *plan;
  if (sheaf_kernel_plan_make(kat, aa, 5, &plan)) {
    fprintf(stderr, "bench_codegen: %s\n", sheaf_ctx_last_error(ctx));
    return 1;
  }
  void *pdata[] = {L, q, kk, vv, og};
  double bg = 1e30, bp = 1e30, bh = 1e30;
  int reps = quick ? 2 : 5;
  for (int r = 0; r < rounds * 3; r++) {
    double t0 = exb_now_s(true);
    for (int i = 0; i < reps; i++) sheaf_kernel_run(kat, aa, 5);
    double t1 = exb_now_s(true);
    for (int i = 0; i < reps; i++) sheaf_kernel_plan_run(plan, pdata, 5);
    double t2 = exb_now_s(true);
    for (int i = 0; i < reps; i++)
      sh_ragged_attention(ctx, isa, 1, &rs, heads, DH, 1.0f / sqrtf(DH), qkv, 3 * HD, oh, HD, aws);
    double t3 = exb_now_s(true);
    bg = fmin(bg, (t1 - t0) / reps), bp = fmin(bp, (t2 - t1) / reps), bh = fmin(bh, (t3 - t2) / reps);
  }
  double d = maxdiff(og, oh, n);
  memset(og, 0, sizeof(float) * n);
  if (sheaf_kernel_run(kat, aa, 5)) d = 1e30;
  d = fmax(d, maxdiff(og, oh, n));
  sheaf_kernel_plan_free(plan);
  printf("attention  %d sequences (WikiText-2 test, %lld tokens, longest %lld), %d head%s of 64: run %.3f ms, "
         "plan %.3f ms, hand %.3f ms, g/h %.2f, p/h %.2f%s\n",
         NB, (long long)T, (long long)maxl, heads, heads > 1 ? "s" : "", bg * 1e3, bp * 1e3, bh * 1e3, bh / bg,
         bh / bp, d > 1e-4 ? "  (results differ!)" : "");
  sh_attn_ws_free(ctx, aws);
  free(q), free(kk), free(vv), free(qkv), free(og), free(oh);
  return 0;
}

/* One row kernel (softmax: which 0; layernorm: 1) at M x N, four ways
 * alternating each round: sheaf_kernel_run (what a user calls), a plan
 * made once (sheaf_kernel_plan_run: the prepared call), the generated
 * entry called directly with the sizes bound once (the body: the
 * differences are the API's per-call costs), and the hand kernel. Each
 * sample runs ~50 us; min and median over `rounds`. */
static void bench_row(sheaf_ctx *ctx, sheaf_isa isa, sheaf_kernel *K, int which, int64_t M, int64_t N, int rounds,
                      uint64_t *seed) {
  /* 64-byte aligned, as the runtime's buffers are (malloc's 16 bytes slow
   * both kernels, unequally when the two outputs differ in alignment) */
  float *x = aligned_copy(exb_frand_xs(M * N, seed), M * N), *gam = aligned_copy(exb_frand_xs(N, seed), N);
  float *be = aligned_copy(exb_frand_xs(N, seed), N), *yg = aligned_copy(NULL, M * N), *yh = aligned_copy(NULL, M * N);
  sh_gemm_in xin = {.base = x, .ld = N}, none = {0};
  sh_gemm_out yout = {.base = yh, .ld = N};
  int64_t sx[] = {M, N}, sv[] = {N};
  sheaf_kernel_arg a[4] = {{SHEAF_KERNEL_F32, x, (size_t)(M * N), 2, sx}};
  if (which) {
    a[1] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, gam, (size_t)N, 1, sv};
    a[2] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, be, (size_t)N, 1, sv};
  }
  int na = which ? 4 : 2;
  a[na - 1] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, yg, (size_t)(M * N), 0, NULL};
  /* the body: both kernels have sizes (rows, width) and no temporaries */
  const int64_t sizes[2] = {M, N};
  sk_arg ir[4];
  for (int i = 0; i < na; i++) ir[i].data = a[i].data;
  sk_abi abi;
  sh_lir_abi_init(ctx, 0, &abi);
  sk_entry_fn fn = sh_kernel_entry_fn(K);
  sheaf_kernel_plan *plan;
  if (sheaf_kernel_plan_make(K, a, na, &plan)) {
    fprintf(stderr, "bench_codegen: %s\n", sheaf_ctx_last_error(ctx));
    exit(1);
  }
  void *pdata[4];
  for (int i = 0; i < na; i++) pdata[i] = a[i].data;
  int reps = (int)(50000 / (M * N / 4 + 20));
  if (reps < 1) reps = 1;
  double *tg = malloc(sizeof(double) * (size_t)rounds * 4), *tp = tg + rounds, *tb = tp + rounds, *th = tb + rounds;
  for (int r = 0; r < rounds; r++) {
    double t0 = exb_now_s(true);
    for (int i = 0; i < reps; i++) sheaf_kernel_run(K, a, na);
    double t1 = exb_now_s(true);
    for (int i = 0; i < reps; i++) sheaf_kernel_plan_run(plan, pdata, na);
    double t2 = exb_now_s(true);
    for (int i = 0; i < reps; i++) fn(&abi, sizes, ir);
    double t3 = exb_now_s(true);
    for (int i = 0; i < reps; i++) {
      if (which) sh_layernorm_rows(isa, M, N, xin, none, gam, be, 1e-5f, yout);
      else sh_softmax_rows(isa, M, N, 1.0f, xin, yout);
    }
    double t4 = exb_now_s(true);
    tg[r] = (t1 - t0) / reps, tp[r] = (t2 - t1) / reps, tb[r] = (t3 - t2) / reps, th[r] = (t4 - t3) / reps;
  }
  double d = maxdiff(yg, yh, (size_t)(M * N));
  memset(yg, 0, sizeof(float) * (size_t)(M * N));
  sheaf_kernel_run(K, a, na);
  d = fmax(d, maxdiff(yg, yh, (size_t)(M * N)));
  memset(yg, 0, sizeof(float) * (size_t)(M * N));
  if (sheaf_kernel_plan_run(plan, pdata, na)) d = 1e30;
  d = fmax(d, maxdiff(yg, yh, (size_t)(M * N)));
  sheaf_kernel_plan_free(plan);
  double mg = tg[0], mp = tp[0], mb = tb[0], mh = th[0];
  for (int r = 1; r < rounds; r++)
    mg = fmin(mg, tg[r]), mp = fmin(mp, tp[r]), mb = fmin(mb, tb[r]), mh = fmin(mh, th[r]);
  exb_sort_f64(tg, (size_t)rounds);
  exb_sort_f64(tp, (size_t)rounds);
  exb_sort_f64(th, (size_t)rounds);
  double medg = tg[rounds / 2], medp = tp[rounds / 2], medh = th[rounds / 2];
  printf("%-10s %5lld %5lld %9.1f %9.1f %9.1f %9.1f %6.2f %6.2f %6.2f %6.2f %6.2f %7.0f %7.0f%s\n",
         which ? "layernorm" : "softmax", (long long)M, (long long)N, mg / (double)M * 1e9, mp / (double)M * 1e9,
         mb / (double)M * 1e9, mh / (double)M * 1e9, mh / mg, medh / medg, mh / mp, medh / medp, mh / mb,
         (mg - mb) * 1e9, (mp - mb) * 1e9, d > 1e-4 ? "  (results differ!)" : "");
  free(tg);
  free(x), free(gam), free(be), free(yg), free(yh);
}

int main(int argc, char **argv) {
  bool quick = false;
  const char *only = NULL;
  for (int a = 1; a < argc; a++) {
    if (!strcmp(argv[a], "--quick")) quick = true;
    else if (!strcmp(argv[a], "--only") && a + 1 < argc) only = argv[++a];
    else {
      fprintf(stderr, "usage: bench_codegen [--quick] [--only mm|rows|attn|call]\n");
      return 2;
    }
  }
  bool do_mm = !only || !strcmp(only, "mm"), do_rows = !only || !strcmp(only, "rows");
  bool do_attn = !only || !strcmp(only, "attn"), do_call = !only || !strcmp(only, "call");
  int rounds = quick ? 3 : 7;
  sheaf_ctx *ctx;
  if (sheaf_ctx_create(&(sheaf_ctx_options){.threads = 1}, &ctx, NULL, 0) != SHEAF_OK) return 1;
  sheaf_isa isa = sheaf_cpu_isa();
  char dir[] = "/tmp/sheaf-bench-codegen-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  double cold = 0, hit = 0;
  sheaf_kernel *kmm = do_mm ? build(ctx, MM, dir, isa, &cold) : NULL;
  if (do_mm) {
    sheaf_kernel *kmm2 = build(ctx, MM, dir, isa, &hit);
    sheaf_kernel_free(kmm2);
  }
  char load[64] = "?";
  FILE *lf = fopen("/proc/loadavg", "r");
  if (lf) {
    if (!fgets(load, sizeof load, lf)) snprintf(load, sizeof load, "?");
    fclose(lf);
    load[strcspn(load, "\n")] = '\0';
  }
  printf("# isa %s, 1 thread, thread CPU time; cold compile of mm %.0f ms, cache hit %.2f ms; load average %s\n",
         sheaf_isa_name(isa), cold * 1e3, hit * 1e3, load);
  sheaf_kernel *ksm = build(ctx, SM, dir, isa, NULL), *kln = build(ctx, LN, dir, isa, NULL);
  sheaf_kernel *kat = build(ctx, AT, dir, isa, NULL);
  sh_gemm_ws *ws;
  if (sh_gemm_ws_create(ctx, &ws)) return 1;
  uint64_t seed = 42;
  if (do_call) {
    static const char ID[] = "kernel id(x: f32[N]) -> f32[N] { y(i) = x(i) }\n";
    sheaf_kernel *kid = build(ctx, ID, dir, isa, NULL);
    float x1[1] = {1}, y1[1];
    int64_t s1[] = {1};
    sheaf_kernel_arg a1[] = {{SHEAF_KERNEL_F32, x1, 1, 1, s1}, {SHEAF_KERNEL_F32, y1, 1, 0, NULL}};
    double best = 1e30;
    for (int r = 0; r < rounds; r++) {
      double t0 = exb_now_s(true);
      for (int i = 0; i < 100000; i++) sheaf_kernel_run(kid, a1, 2);
      best = fmin(best, (exb_now_s(true) - t0) / 100000);
    }
    sheaf_kernel_plan *p1;
    if (sheaf_kernel_plan_make(kid, a1, 2, &p1)) return 1;
    void *d1[] = {x1, y1};
    double bestp = 1e30;
    for (int r = 0; r < rounds; r++) {
      double t0 = exb_now_s(true);
      for (int i = 0; i < 100000; i++) sheaf_kernel_plan_run(p1, d1, 2);
      bestp = fmin(bestp, (exb_now_s(true) - t0) / 100000);
    }
    sheaf_kernel_plan_free(p1);
    printf("a 1-element kernel: sheaf_kernel_run %.0f ns per call, sheaf_kernel_plan_run %.0f ns\n", best * 1e9,
           bestp * 1e9);
    sheaf_kernel_free(kid);
  }
  printf("%-10s %5s %5s %5s %10s %10s %10s %7s %7s\n", "kernel", "M", "K", "N", "gen GF/s", "v0 GF/s", "hand GF/s",
         "g/h", "v0/h");
  static const int64_t shapes[][3] = {{64, 256, 1280}, {64, 512, 2048}, {1600, 256, 1280}, {1600, 512, 2048}};
  for (size_t s = 0; s < (do_mm ? 4u : 0u); s++) {
    int64_t M = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
    float *A = exb_frand_xs(M * K, &seed), *B = exb_frand_xs(K * N, &seed);
    float *Cg = malloc(sizeof(float) * (size_t)(M * N)), *Ch = malloc(sizeof(float) * (size_t)(M * N));
    sh_gemm_packed_b *pb;
    if (sh_gemm_pack_b(ctx, B, N, K, N, 0, &pb)) return 1;
    sh_gemm_args ga = exb_gemm_plain(A, M, K, pb, Ch, N, ws);
    int64_t sa[] = {M, K}, sb[] = {K, N};
    sheaf_kernel_arg args[] = {{SHEAF_KERNEL_F32, A, (size_t)(M * K), 2, sa},
                               {SHEAF_KERNEL_F32, B, (size_t)(K * N), 2, sb},
                               {SHEAF_KERNEL_F32, Cg, (size_t)(M * N), 0, NULL}};
    double flops = 2.0 * (double)M * (double)N * (double)K, bg = 1e30, bh = 1e30, b0 = 1e30;
    int reps = (int)(2e8 / flops) + 1;
    double d = 0;
    sh_gemm(ctx, isa, 1, &ga);
    for (int r = 0; r < rounds; r++) {
      sheaf_kernel_set_weight_version(kmm, 1, 0);
      double t0 = exb_now_s(true);
      for (int i = 0; i < reps; i++) sheaf_kernel_run(kmm, args, 3);
      double t1 = exb_now_s(true);
      if (r == 0) d = maxdiff(Cg, Ch, (size_t)(M * N)); /* version 0's result */
      sheaf_kernel_set_weight_version(kmm, 1, (uint64_t)s + 1);
      sheaf_kernel_run(kmm, args, 3); /* packs this version (outside the timing, as sh_gemm_pack_b) */
      double t2 = exb_now_s(true);
      for (int i = 0; i < reps; i++) sheaf_kernel_run(kmm, args, 3);
      double t3 = exb_now_s(true);
      for (int i = 0; i < reps; i++) sh_gemm(ctx, isa, 1, &ga);
      double t4 = exb_now_s(true);
      b0 = fmin(b0, (t1 - t0) / reps), bg = fmin(bg, (t3 - t2) / reps), bh = fmin(bh, (t4 - t3) / reps);
    }
    d = fmax(d, maxdiff(Cg, Ch, (size_t)(M * N)));
    printf("%-10s %5lld %5lld %5lld %10.1f %10.1f %10.1f %7.2f %7.2f%s\n", "matmul", (long long)M, (long long)K,
           (long long)N, flops / bg * 1e-9, flops / b0 * 1e-9, flops / bh * 1e-9, bh / bg, bh / b0,
           d > 1e-4 ? "  (results differ!)" : "");
    sh_gemm_packed_b_free(ctx, pb);
    free(A), free(B), free(Cg), free(Ch);
  }
  if (do_rows) {
    static const int64_t rshape[][2] = {{64, 768}, {1, 256}, {784, 256}, {64, 1024}, {64, 256}, {7, 25}};
    printf("%-10s %5s %5s %9s %9s %9s %9s %6s %6s %6s %6s %6s %7s %7s   (ns per row; min / median of %d "
           "rounds)\n",
           "kernel", "M", "N", "run", "plan", "body", "hand", "g/h", "gmed/h", "p/h", "pmed/h", "body/h", "run ns",
           "plan ns", rounds * 3);
    for (size_t sh = 0; sh < SH_ARRAY_LEN(rshape); sh++)
      for (int which = 0; which < 2; which++)
        bench_row(ctx, isa, which ? kln : ksm, which, rshape[sh][0], rshape[sh][1], rounds * 3, &seed);
  }
  if (do_attn) {
    sheaf_kernel *kmh = build(ctx, MHA, dir, isa, NULL);
    for (int heads = 1; heads <= 4; heads *= 4)
      if (bench_attn(ctx, isa, heads == 1 ? kat : kmh, heads, quick, rounds, &seed)) return 1;
    sheaf_kernel_free(kmh);
  }
  sh_gemm_ws_free(ctx, ws);
  sheaf_kernel_free(kmm), sheaf_kernel_free(ksm), sheaf_kernel_free(kln), sheaf_kernel_free(kat);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "bench_codegen: could not remove %s\n", dir);
  sheaf_ctx_free(ctx);
  return 0;
}
