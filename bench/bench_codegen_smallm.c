/*
 * bench_codegen_smallm.c — the generated GEMM at few rows against the hand
 * GEMM (sh_gemm, B packed once), one thread, thread CPU time, paired
 * alternating rounds in one process (which side goes first alternates);
 * the ratio is the median over rounds of t(sh_gemm) / t(generated) of the
 * same round (at or above 1: the generated kernel is as fast). The
 * generated side is a prepared call (sheaf_kernel_plan, one per M, all on
 * one kernel: the packed weight shared, docs/CODEGEN.md "Few rows") of
 * `C(m, n) +=! A(m, k) * B(k, n)` with B a weight of version 1. Outputs
 * checked against each other (a mismatch above 1e-4 relative fails).
 * The kernel picks its few-rows variant by the plan's row count
 * (kernel_fewrows.c); the column "dflt" times the same plans on a kernel
 * compiled without it (sh_kernel_opts.no_few_rows: the default tile at
 * every M) in the same rounds, its ratio to sh_gemm likewise.
 *
 *   bench_codegen_smallm [ROUNDS] [M,M,...]     (default 15; 1,2,3,4,6,8,16,64)
 *
 * Shapes (N, K): (1280, 512) and (768, 256).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "codegen/kernel_api.h"

static const char MM[] = "kernel mm(A: f32[M, K], B: f32[K, N]) -> f32[M, N] {\n  C(m, n) +=! A(m, k) * B(k, n)\n}\n";

static void die(sheaf_ctx *ctx, const char *what) {
  fprintf(stderr, "bench_codegen_smallm: %s: %s\n", what, ctx ? sheaf_ctx_last_error(ctx) : "");
  exit(1);
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int64_t ms[32] = {1, 2, 3, 4, 6, 8, 16, 64};
  int nm = 8, rounds;
  if (!exb_rounds_rows(argc, argv, &rounds, ms, &nm)) return 2;
  sheaf_ctx *ctx;
  if (sheaf_ctx_create(&(sheaf_ctx_options){.threads = 1}, &ctx, NULL, 0) != SHEAF_OK) return 1;
  sheaf_kernel *k, *kd;
  if (sheaf_kernel_compile(ctx, MM, strlen(MM), "mm", &k)) die(ctx, "compile");
  if (sh_kernel_compile_opts(ctx, MM, strlen(MM), "mm", &(sh_kernel_opts){.no_few_rows = true}, &kd))
    die(ctx, "compile (no few-rows variant)");
  sh_gemm_ws *ws;
  if (sh_gemm_ws_create(ctx, &ws)) die(ctx, "workspace");
  sheaf_isa isa = sheaf_cpu_isa();
  printf("# generated GEMM (plans, isa %s) vs sh_gemm: 1 thread, thread CPU time, %d paired rounds\n",
         sheaf_isa_name(isa), rounds);
  printf("%5s %5s %5s %10s %10s %10s %8s %8s %8s %8s\n", "M", "K", "N", "gen us", "dflt us", "hand us", "ratio",
         "r min", "r max", "dflt r");
  static const int64_t shapes[2][2] = {{512, 1280}, {256, 768}};
  uint64_t seed = 7;
  for (int s = 0; s < 2; s++) {
    int64_t K = shapes[s][0], N = shapes[s][1];
    float *B = exb_frand_xs(K * N, &seed);
    sh_gemm_packed_b *pb;
    if (sh_gemm_pack_b(ctx, B, N, K, N, 0, &pb)) die(ctx, "pack");
    sheaf_kernel_set_weight_version(k, 1, (uint64_t)s + 1);
    sheaf_kernel_set_weight_version(kd, 1, (uint64_t)s + 1);
    for (int mi = 0; mi < nm; mi++) {
      int64_t M = ms[mi];
      if (M < 1) continue;
      float *A = exb_frand_xs(M * K, &seed), *Cg = NULL, *Ch = NULL, *Cd = NULL;
      if (posix_memalign((void **)&Cg, 64, sizeof(float) * (size_t)(M * N)) ||
          posix_memalign((void **)&Cd, 64, sizeof(float) * (size_t)(M * N)) ||
          posix_memalign((void **)&Ch, 64, sizeof(float) * (size_t)(M * N)))
        die(NULL, "out of memory");
      int64_t sa[] = {M, K}, sb[] = {K, N};
      sheaf_kernel_arg ad[] = {{SHEAF_KERNEL_F32, A, (size_t)(M * K), 2, sa},
                               {SHEAF_KERNEL_F32, B, (size_t)(K * N), 2, sb},
                               {SHEAF_KERNEL_F32, Cg, (size_t)(M * N), 0, NULL}};
      sheaf_kernel_plan *p, *pd;
      if (sheaf_kernel_plan_make(k, ad, 3, &p)) die(ctx, "plan");
      if (sheaf_kernel_plan_make(kd, ad, 3, &pd)) die(ctx, "plan");
      void *data[] = {A, B, Cg}, *datad[] = {A, B, Cd};
      sh_gemm_args ga = exb_gemm_plain(A, M, K, pb, Ch, N, ws);
      if (sheaf_kernel_plan_run(p, data, 3) || sheaf_kernel_plan_run(pd, datad, 3)) die(ctx, "run");
      sh_gemm(ctx, isa, 1, &ga);
      double err = 0;
      for (int64_t i = 0; i < M * N; i++) {
        double d = fabs((double)Cg[i] - Ch[i]) / (1 + fabs((double)Ch[i]));
        double e = fabs((double)Cd[i] - Ch[i]) / (1 + fabs((double)Ch[i]));
        if (d > err) err = d;
        if (e > err) err = e;
      }
      if (err > 1e-4) {
        fprintf(stderr, "bench_codegen_smallm: M %lld K %lld N %lld: outputs differ (%g)\n", (long long)M,
                (long long)K, (long long)N, err);
        return 1;
      }
      int reps = (int)(1e8 / (2.0 * (double)(M * N * K))) + 1;
      double tg[200], td[200], th[200], r[200], rd[200];
      for (int q = 0; q < rounds; q++) {
        for (int side = 0; side < 3; side++) {
          int who = (side + q) % 3; /* 0 generated, 1 generated without few rows, 2 sh_gemm */
          double t0 = exb_now_s(true);
          for (int i = 0; i < reps; i++)
            if (who == 0) sheaf_kernel_plan_run(p, data, 3);
            else if (who == 1) sheaf_kernel_plan_run(pd, datad, 3);
            else sh_gemm(ctx, isa, 1, &ga);
          double t = (exb_now_s(true) - t0) / reps;
          if (who == 0) tg[q] = t;
          else if (who == 1) td[q] = t;
          else th[q] = t;
        }
        r[q] = th[q] / tg[q];
        rd[q] = th[q] / td[q];
      }
      qsort(tg, (size_t)rounds, sizeof(double), cmp_d);
      qsort(td, (size_t)rounds, sizeof(double), cmp_d);
      qsort(th, (size_t)rounds, sizeof(double), cmp_d);
      qsort(r, (size_t)rounds, sizeof(double), cmp_d);
      qsort(rd, (size_t)rounds, sizeof(double), cmp_d);
      printf("%5lld %5lld %5lld %10.2f %10.2f %10.2f %8.3f %8.3f %8.3f %8.3f\n", (long long)M, (long long)K,
             (long long)N, tg[rounds / 2] * 1e6, td[rounds / 2] * 1e6, th[rounds / 2] * 1e6, r[rounds / 2], r[0],
             r[rounds - 1], rd[rounds / 2]);
      fflush(stdout);
      sheaf_kernel_plan_free(p);
      sheaf_kernel_plan_free(pd);
      free(A), free(Cg), free(Cd), free(Ch);
    }
    sh_gemm_packed_b_free(ctx, pb);
    free(B);
  }
  sh_gemm_ws_free(ctx, ws);
  sheaf_kernel_free(k);
  sheaf_kernel_free(kd);
  sheaf_ctx_free(ctx);
  return 0;
}
