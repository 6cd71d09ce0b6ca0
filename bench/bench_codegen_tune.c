/*
 * bench_codegen_tune.c — a measurement (not a test) of the tuner
 * (docs/CODEGEN.md, "Tuner"): the generated matmul through the kernel API
 * with the default schedule, with the schedule the tuner records for the
 * shape's class, and Sheaf's hand GEMM (sh_gemm, B packed once), on the
 * issue's shapes M = 64 and 1600, (K, N) = (256, 1280) and (512, 2048);
 * 1 thread, thread CPU time, best of rounds that alternate the three.
 * The generated kernels get B as a weight (version 1: packed once). Then
 * the ragged attention (kernel mha: 4 heads of 64 over the first 64
 * WikiText-2 test lengths, data/wikitext2_lengths), tuned at those lengths,
 * default against tuned in alternating rounds.
 *
 *   bench_codegen_tune [--quick] [--budget S] [--records FILE] [--isa L] [--only mm|attn]
 *
 * --budget: seconds of search per shape (default 40; --quick 15);
 * --records FILE: use these records (sheaf tune --out) instead of tuning.
 * Also printed: the first run of the tuned kernel in a fresh sheaf_kernel
 * (its variant loaded from the cache: the "cache hit" of a tuned class).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "codegen/kernel_api.h"
#include "codegen/tune.h"
#include "kernels/gemm.h"

static const char SRC[] =
    "kernel mm(A: f32[M, K], B: f32[K, N]) -> f32[M, N] { C(m, n) +=! A(m, k) * B(k, n) }\n";

/* 4 heads of 64 in each token's row (bench_codegen.c's mha). */
static const char MHA[] = "kernel mha(L: i32[B], q: f32[B, L(b), H, D], k: f32[B, L(b), H, D], v: f32[B, L(b), H, D])\n"
                          "    -> f32[B, L(b), H, D] {\n"
                          "  s(b, h, i, j) +=! q(b, i, h, d) * k(b, j, h, d) / sqrt(D)\n"
                          "  m(b, h, i) max=! s(b, h, i, j)\n  e(b, h, i, j) = exp(s(b, h, i, j) - m(b, h, i))\n"
                          "  z(b, h, i) +=! e(b, h, i, j)\n  o(b, h, i, d) +=! e(b, h, i, j) * v(b, j, h, d)\n"
                          "  out(b, i, h, d) = o(b, h, i, d) / z(b, h, i)\n}\n";
enum { NB = 64, NH = 4, DH = 64 };

static void progress(void *user, const char *line) {
  (void)user;
  fprintf(stderr, "  %s\n", line);
}

static double run_reps(sheaf_kernel *k, sheaf_kernel_arg *a, int reps) {
  double t0 = exb_now_s(true);
  for (int i = 0; i < reps; i++)
    if (sheaf_kernel_run(k, a, 3)) return 1e30;
  return (exb_now_s(true) - t0) / reps;
}

/* The ragged attention, default schedule against the tuned one (the
 * records loaded into ctx), alternating rounds, thread CPU time. */
static int bench_attn(sheaf_ctx *ctx, sheaf_isa isa, const int64_t *lens, bool quick) {
  sheaf_kernel *kd, *kt;
  if (sh_kernel_compile_opts(ctx, MHA, strlen(MHA), "mha", &(sh_kernel_opts){.isa_set = true, .isa = isa,
                                                                             .no_tuning = true}, &kd) ||
      sh_kernel_compile_opts(ctx, MHA, strlen(MHA), "mha", &(sh_kernel_opts){.isa_set = true, .isa = isa}, &kt)) {
    fprintf(stderr, "bench_codegen_tune: %s\n", sheaf_ctx_last_error(ctx));
    return 1;
  }
  int32_t L[NB];
  int64_t T = 0, maxl = 0;
  for (int b = 0; b < NB; b++) L[b] = (int32_t)lens[b], T += lens[b], maxl = lens[b] > maxl ? lens[b] : maxl;
  size_t n = (size_t)(T * NH * DH);
  uint64_t seed = 7;
  float *q = exb_frand_xs((int64_t)n, &seed), *k = exb_frand_xs((int64_t)n, &seed), *v = exb_frand_xs((int64_t)n, &seed);
  float *od = malloc(sizeof(float) * n), *ot = malloc(sizeof(float) * n);
  int64_t sl[] = {NB}, sq[] = {NB, -1, NH, DH};
  sheaf_kernel_arg a[] = {{SHEAF_KERNEL_I32, L, NB, 1, sl}, {SHEAF_KERNEL_F32, q, n, 4, sq},
                          {SHEAF_KERNEL_F32, k, n, 4, sq}, {SHEAF_KERNEL_F32, v, n, 4, sq},
                          {SHEAF_KERNEL_F32, od, n, 0, NULL}};
  sheaf_kernel_arg b[5];
  memcpy(b, a, sizeof b);
  b[4].data = ot;
  if (sheaf_kernel_run(kd, a, 5) || sheaf_kernel_run(kt, b, 5)) {
    fprintf(stderr, "bench_codegen_tune: %s\n", sheaf_ctx_last_error(ctx));
    return 1;
  }
  double maxd = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)od[i] - ot[i]) / fmax(1.0, fabs((double)od[i]));
    if (d > maxd) maxd = d;
  }
  int rounds = quick ? 5 : 15, reps = 3;
  double bd = 1e30, bt = 1e30;
  for (int r = 0; r < rounds; r++) {
    double t0 = exb_now_s(true);
    for (int i = 0; i < reps; i++) sheaf_kernel_run(kd, a, 5);
    double t1 = exb_now_s(true);
    for (int i = 0; i < reps; i++) sheaf_kernel_run(kt, b, 5);
    double t2 = exb_now_s(true);
    bd = fmin(bd, (t1 - t0) / reps), bt = fmin(bt, (t2 - t1) / reps);
  }
  sheaf_kernel_tuning_use u[8];
  size_t nu = sheaf_kernel_tuning_stats(ctx, 8, u);
  const char *knobs = "default (no record)";
  for (size_t i = 0; i < nu && i < 8; i++)
    if (!strcmp(u[i].kernel, "mha")) knobs = u[i].knobs;
  printf("attention  %d sequences (WikiText-2 test, %lld tokens, longest %lld), %d heads of %d: default %.3f ms, "
         "tuned %.3f ms, tuned/default speed %.2f; schedule %s%s\n",
         NB, (long long)T, (long long)maxl, NH, DH, bd * 1e3, bt * 1e3, bd / bt, knobs,
         maxd > 1e-4 ? "  (results differ!)" : "");
  free(q), free(k), free(v), free(od), free(ot);
  sheaf_kernel_free(kd);
  sheaf_kernel_free(kt);
  return 0;
}

int main(int argc, char **argv) {
  bool quick = false;
  double budget = 0;
  const char *records = NULL, *only = NULL;
  sheaf_isa isa = sheaf_cpu_isa();
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = true;
    else if (!strcmp(argv[i], "--budget") && i + 1 < argc) budget = atof(argv[++i]);
    else if (!strcmp(argv[i], "--records") && i + 1 < argc) records = argv[++i];
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!strcmp(argv[i], "--isa") && i + 1 < argc) {
      const char *v = argv[++i];
      isa = !strcmp(v, "scalar") ? SHEAF_ISA_SCALAR : !strcmp(v, "avx512") ? SHEAF_ISA_AVX512 : SHEAF_ISA_AVX2;
    } else {
      fprintf(stderr, "usage: bench_codegen_tune [--quick] [--budget S] [--records FILE] [--isa L] [--only mm|attn]\n");
      return 2;
    }
  }
  if (budget <= 0) budget = quick ? 15 : 40;
  sheaf_ctx *ctx;
  char err[256];
  sheaf_ctx_options o = {0};
  o.threads = 1;
  if (sheaf_ctx_create(&o, &ctx, err, sizeof err)) {
    fprintf(stderr, "bench_codegen_tune: %s\n", err);
    return 1;
  }
  static const int64_t shapes[][3] = {{64, 256, 1280}, {64, 512, 2048}, {1600, 256, 1280}, {1600, 512, 2048}};
  int NS = only && strcmp(only, "mm") ? 0 : 4;
  bool do_attn = !only || !strcmp(only, "attn");
  int64_t lens[NB];
  FILE *lf = fopen("data/wikitext2_lengths/wiki.test.lengths", "r");
  int nl = 0;
  long lv;
  while (lf && nl < NB && fscanf(lf, "%ld", &lv) == 1) lens[nl++] = lv;
  if (lf) fclose(lf);
  if (do_attn && nl < NB) {
    fprintf(stderr, "bench_codegen_tune: data/wikitext2_lengths/wiki.test.lengths not readable (run from the "
                    "repository root)\n");
    return 1;
  }
  /* the records: searched here (one shape at a time), or given */
  char tmp[] = "/tmp/sheaf-bench-tune-XXXXXX";
  if (!mkdtemp(tmp)) return 1;
  char path[512];
  snprintf(path, sizeof path, "%s/bench.tune", tmp);
  if (!records) {
    sh_tune_set s;
    sh_tune_set_init(&s, ctx);
    for (int i = 0; i < NS; i++) {
      int64_t sz[3] = {shapes[i][0], shapes[i][1], shapes[i][2]}; /* M, K, N: declaration order */
      sh_tune_request q = {.source = SRC, .len = strlen(SRC), .kernel = "mm", .isa_set = true, .isa = isa,
                           .sizes = sz, .n_sizes = 3, .budget_s = budget, .progress = progress};
      sh_tune_rec r;
      sh_tune_stats ts;
      q.stats = &ts;
      if (sh_tune_kernel(ctx, &q, &r) || sh_tune_set_add(&s, &r)) {
        fprintf(stderr, "bench_codegen_tune: %s\n", sheaf_ctx_last_error(ctx));
        return 1;
      }
      printf("# search M=%lld K=%lld N=%lld: %d candidates compiled (%d joint tile x kc), passes %d, %.0f s%s\n",
             (long long)sz[0], (long long)sz[1], (long long)sz[2], ts.compiled, ts.joint, ts.passes, ts.seconds,
             ts.budget_stop ? ", stopped at the budget" : "");
    }
    if (do_attn) { /* the attention at the WikiText-2 lengths */
      sh_tune_request q = {.source = MHA, .len = strlen(MHA), .kernel = "mha", .isa_set = true, .isa = isa,
                           .sizes = (int64_t[]){NB, NH, DH}, .n_sizes = 3, .lengths = lens, .n_lengths = NB,
                           .budget_s = budget, .progress = progress};
      sh_tune_rec r;
      sh_tune_stats ts;
      q.stats = &ts;
      if (sh_tune_kernel(ctx, &q, &r) || sh_tune_set_add(&s, &r)) {
        fprintf(stderr, "bench_codegen_tune: %s\n", sheaf_ctx_last_error(ctx));
        return 1;
      }
      printf("# search mha B=%d H=%d D=%d: %d candidates compiled, passes %d, %.0f s%s\n", NB, NH, DH, ts.compiled,
             ts.passes, ts.seconds, ts.budget_stop ? ", stopped at the budget" : "");
    }
    if (sh_tune_set_save(&s, path)) return 1;
    sh_tune_set_free(&s);
    records = path;
  }
  if (sheaf_kernel_load_tuning(ctx, records)) {
    fprintf(stderr, "bench_codegen_tune: %s\n", sheaf_ctx_last_error(ctx));
    return 1;
  }
  sh_kernel_opts dopt = {.isa_set = true, .isa = isa, .no_tuning = true};
  sheaf_kernel *kd, *kt;
  if (sh_kernel_compile_opts(ctx, SRC, strlen(SRC), "mm", &dopt, &kd) ||
      sh_kernel_compile_opts(ctx, SRC, strlen(SRC), "mm", &(sh_kernel_opts){.isa_set = true, .isa = isa}, &kt)) {
    fprintf(stderr, "bench_codegen_tune: %s\n", sheaf_ctx_last_error(ctx));
    return 1;
  }
  sheaf_kernel_set_weight_version(kd, 1, 1);
  sheaf_kernel_set_weight_version(kt, 1, 1);
  sh_gemm_ws *ws;
  if (sh_gemm_ws_create(ctx, &ws)) return 1;
  printf("# isa %s, 1 thread, thread CPU time, GFLOP/s = 2MNK / best time; records %s (%d apply)\n",
         sheaf_isa_name(isa), records, sh_kernel_n_tuned(kt));
  printf("%5s %5s %5s %8s %8s %8s %7s %7s %7s  %s\n", "M", "K", "N", "default", "tuned", "hand", "def/h", "tun/h",
         "tun/def", "tuned schedule");
  uint64_t seed = 42;
  for (int s = 0; s < NS; s++) {
    int64_t M = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
    float *A = exb_frand_xs(M * K, &seed), *B = exb_frand_xs(K * N, &seed);
    float *Cd = malloc(sizeof(float) * (size_t)(M * N)), *Ct = malloc(sizeof(float) * (size_t)(M * N));
    float *Ch = malloc(sizeof(float) * (size_t)(M * N));
    int64_t sa[] = {M, K}, sb[] = {K, N};
    sheaf_kernel_arg ad[] = {{SHEAF_KERNEL_F32, A, (size_t)(M * K), 2, sa},
                             {SHEAF_KERNEL_F32, B, (size_t)(K * N), 2, sb},
                             {SHEAF_KERNEL_F32, Cd, (size_t)(M * N), 0, NULL}};
    sheaf_kernel_arg at[3];
    memcpy(at, ad, sizeof at);
    at[2].data = Ct;
    sh_gemm_packed_b *pb;
    if (sh_gemm_pack_b(ctx, B, N, K, N, 0, &pb)) return 1;
    sh_gemm_args ga = exb_gemm_plain(A, M, K, pb, Ch, N, ws);
    if (sheaf_kernel_run(kd, ad, 3) || sheaf_kernel_run(kt, at, 3)) { /* packs; the variant loads */
      fprintf(stderr, "bench_codegen_tune: %s\n", sheaf_ctx_last_error(ctx));
      return 1;
    }
    sh_gemm(ctx, isa, 1, &ga);
    double maxd = 0;
    for (int64_t i = 0; i < M * N; i++) {
      double a = Ch[i] < 0 ? -Ch[i] : Ch[i], d = (Ct[i] - Ch[i]) / (a > 1 ? a : 1);
      if (d < 0) d = -d;
      if (d > maxd) maxd = d;
    }
    double flops = 2.0 * (double)M * (double)N * (double)K;
    int reps = (int)(2e8 / flops) + 1, rounds = quick ? 3 : 7;
    double bd = 1e30, bt = 1e30, bh = 1e30;
    for (int r = 0; r < rounds; r++) {
      double t = run_reps(kd, ad, reps);
      if (t < bd) bd = t;
      t = run_reps(kt, at, reps);
      if (t < bt) bt = t;
      double t0 = exb_now_s(true);
      for (int i = 0; i < reps; i++) sh_gemm(ctx, isa, 1, &ga);
      t = (exb_now_s(true) - t0) / reps;
      if (t < bh) bh = t;
    }
    sheaf_kernel *V;
    int64_t sizes[3] = {M, K, N};
    sh_kernel_pick(kt, sizes, &V);
    sh_buf d;
    sh_buf_init(&d, ctx);
    if (V == kt) sh_buf_puts(&d, "default");
    if (V != kt) { /* the record that picked it */
      sh_tune_set ts;
      sh_tune_set_init(&ts, ctx);
      if (!sh_tune_set_load(&ts, records, false))
        for (int i = 0; i < ts.n; i++)
          if (sh_tune_matches(&ts.r[i], sizes, 3) && !strcmp(ts.r[i].isa, sheaf_isa_name(isa))) {
            int nf;
            const sh_tune_field *f = sh_tune_fields(&nf);
            for (int j = 0; j < nf; j++)
              if (sh_tune_field_get(&ts.r[i].opts, &f[j]))
                sh_buf_printf(&d, "%s=%d ", f[j].name, sh_tune_field_get(&ts.r[i].opts, &f[j]));
            break;
          }
      sh_tune_set_free(&ts);
    }
    printf("%5lld %5lld %5lld %8.1f %8.1f %8.1f %7.2f %7.2f %7.2f  %s%s\n", (long long)M, (long long)K,
           (long long)N, flops / bd * 1e-9, flops / bt * 1e-9, flops / bh * 1e-9, bh / bd, bh / bt, bd / bt,
           sh_buf_cstr(&d), maxd > 1e-4 ? "  (results differ!)" : "");
    fflush(stdout);
    sh_buf_free(&d);
    sh_gemm_packed_b_free(ctx, pb);
    free(A), free(B), free(Cd), free(Ct), free(Ch);
  }
  /* a tuned class in a fresh kernel: compile (a hit) + the first run, whose
   * variant comes from the cache */
  int hs = -1; /* a shape whose class has non-default knobs */
  for (int s = 0; s < NS && hs < 0; s++) {
    sheaf_kernel *V;
    if (!sh_kernel_pick(kt, (int64_t[]){shapes[s][0], shapes[s][1], shapes[s][2]}, &V) && V != kt) hs = s;
  }
  if (hs < 0 && NS) printf("# every class kept the default schedule: no variant to load\n");
  for (int rep = 0; hs >= 0 && rep < 3; rep++) {
    /* another size of the same class: M + M / 4 */
    int64_t M = shapes[hs][0] + shapes[hs][0] / 4, K = shapes[hs][1], N = shapes[hs][2];
    float *A = calloc((size_t)(M * K), sizeof(float)), *B = calloc((size_t)(K * N), sizeof(float));
    float *C = malloc(sizeof(float) * (size_t)(M * N));
    int64_t sa[] = {M, K}, sb[] = {K, N};
    sheaf_kernel_arg a[] = {{SHEAF_KERNEL_F32, A, (size_t)(M * K), 2, sa},
                            {SHEAF_KERNEL_F32, B, (size_t)(K * N), 2, sb},
                            {SHEAF_KERNEL_F32, C, (size_t)(M * N), 0, NULL}};
    sheaf_kernel *k;
    double t0 = exb_now_s(false);
    if (sh_kernel_compile_opts(ctx, SRC, strlen(SRC), "mm", &(sh_kernel_opts){.isa_set = true, .isa = isa}, &k))
      return 1;
    double t1 = exb_now_s(false);
    if (sheaf_kernel_run(k, a, 3)) return 1;
    double t2 = exb_now_s(false);
    if (sheaf_kernel_run(k, a, 3)) return 1;
    double t3 = exb_now_s(false);
    sh_jit_stats st;
    memset(&st, 0, sizeof st);
    if (sh_kernel_n_variants(k)) sh_kernel_jit_stats(sh_kernel_variant(k, 0), &st);
    printf("# fresh kernel, M = %lld K = %lld N = %lld (a tuned class): compile %.3f ms, first run %.3f ms "
           "(variant: %llu compiles, %llu disk hits, load %.3f ms), second run %.3f ms\n",
           (long long)M, (long long)K, (long long)N, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (unsigned long long)st.compiles, (unsigned long long)st.disk_hits,
           (double)st.last_load_ns / 1e6, (t3 - t2) * 1e3);
    sheaf_kernel_free(k);
    free(A), free(B), free(C);
  }
  if (do_attn && bench_attn(ctx, isa, lens, quick)) return 1;
  sheaf_kernel_free(kd);
  sheaf_kernel_free(kt);
  sh_gemm_ws_free(ctx, ws);
  remove(path);
  rmdir(tmp);
  sheaf_ctx_free(ctx);
  return 0;
}
