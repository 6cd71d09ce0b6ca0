/*
 * bench_codegen_prefetch.c — the generated GEMM (and GEMM + bias + GELU)
 * of the default schedule at AVX2 with B-panel prefetch variants
 * (sh_sched_opts.prefetch; -1 on the command line: no_prefetch; 0: the
 * default), on the four GEMM shapes of bench_codegen_peers; one thread,
 * thread CPU time, alternating rounds (the first variant rotating), each
 * variant's ratio the median over rounds of t(first variant) / t(variant)
 * of the same round. PF_KC=N: the variants after the first also get K
 * blocks of N; PF_REM0=R: the first variant gets sh_sched_opts.rem_rows R
 * (-1: no remainder tile, the behaviour before it; the others keep the
 * default) — `PF_REM0=-1 bench_codegen_prefetch 31 64 64` is the remainder
 * tile's before / after; PF_CFLAGS: the C compiler's flags (-O3
 * -march=native); PF_DUMP=1: the emitted C on stderr. docs/CODEGEN.md,
 * "The default schedule".
 *
 *   bench_codegen_prefetch [ROUNDS [DIST...]]     (default 9; -1 8 16 32 64)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/lir_build.h"
#include "../tests/lir_cc.h"
#include "codegen/lir_emit.h"
#include "codegen/lir_sched.h"
#include "bench_util.h"

typedef struct gen {
  void *so;
  sk_entry_fn fn;
  void (*pack)(const int64_t *, const float *, int64_t, int, float *);
  int64_t (*psize)(const int64_t *);
} gen;

static int gen_build(sheaf_ctx *ctx, const char *dir, const char *name, bool ep, const sh_sched_opts *so, gen *g) {
  sh_lir_kernel *k = lb_matmul(ctx, name, ep);
  if (!k || sh_sched_default_opts(k, SHEAF_ISA_AVX2, so)) return 0;
  sh_buf b;
  sh_buf_init(&b, ctx);
  if (sh_lir_emit_c(k, &b)) return 0;
  char err[8192];
  const char *src = sh_buf_cstr(&b);
  if (getenv("PF_DUMP")) fputs(src, stderr);
  if (lir_cc_build(dir, name, &src, 1, SHEAF_ISA_AVX2, getenv("PF_CFLAGS") ? getenv("PF_CFLAGS") : "-O3 -march=native", 1, &g->so, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return 0;
  }
  char sym[64];
  void *p = dlsym(g->so, name);
  memcpy(&g->fn, &p, sizeof p);
  snprintf(sym, sizeof sym, "%s_pack_B", name);
  p = dlsym(g->so, sym);
  memcpy(&g->pack, &p, sizeof p);
  snprintf(sym, sizeof sym, "%s_packed_size_B", name);
  p = dlsym(g->so, sym);
  memcpy(&g->psize, &p, sizeof p);
  sh_buf_free(&b);
  sh_lir_free(k);
  return 1;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 9;
  if (rounds < 1 || rounds > 64) rounds = 9;

  int pfs[8] = {-1, 8, 16, 32, 64}, npf = 5;
  if (argc > 2) {
    npf = 0;
    for (int i = 2; i < argc && npf < 8; i++) pfs[npf++] = atoi(argv[i]);
  }
  int kc = getenv("PF_KC") ? atoi(getenv("PF_KC")) : 0;
  int rem0 = getenv("PF_REM0") ? atoi(getenv("PF_REM0")) : 0;
  sheaf_ctx *ctx;
  char err[256];
  sheaf_ctx_options o = {0};
  o.threads = 1;
  if (sheaf_ctx_create(&o, &ctx, err, sizeof err)) return 1;
  char dir[] = "/tmp/sheaf-bench-pf-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  gen g[2][8];
  for (int ep = 0; ep < 2; ep++)
    for (int v = 0; v < npf; v++) {
      sh_sched_opts so = {0};
      so.prefetch = pfs[v] > 0 ? pfs[v] : 0;
      so.no_prefetch = pfs[v] < 0;
      so.kc = v == 0 ? 0 : kc;
      so.rem_rows = v == 0 ? rem0 : 0;
      char name[32];
      snprintf(name, sizeof name, "pf%d_%d", ep, v);
      if (!gen_build(ctx, dir, name, ep, &so, &g[ep][v])) return 1;
    }
  sk_abi abi;
  sh_lir_abi_init(ctx, 1, &abi);
  static const int64_t shapes[][3] = {{64, 256, 1280}, {64, 512, 2048}, {1600, 256, 1280}, {1600, 512, 2048}};
  uint64_t seed = 42;
  printf("# paired rounds %d; GFLOP/s min-time; ratio = median over rounds of t(first)/t(variant); kc=%d rem_rows(first)=%d\n", rounds, kc, rem0);
  for (int ep = 0; ep < 2; ep++)
    for (int s = 0; s < 4; s++) {
      int64_t M = shapes[s][0], K = shapes[s][1], N = shapes[s][2], sizes[3] = {M, N, K};
      float *A = exb_frand_xs(M * K, &seed), *B = exb_frand_xs(K * N, &seed), *bias = exb_frand_xs(N, &seed);
      float *C[8], *Bp[8];
      for (int v = 0; v < npf; v++) {
        C[v] = malloc(sizeof(float) * (size_t)(M * N));
        Bp[v] = malloc(sizeof(float) * (size_t)g[ep][v].psize(sizes));
        g[ep][v].pack(sizes, B, N, 0, Bp[v]);
      }
      double flops = 2.0 * M * N * K;
      int reps = (int)(2e8 / flops) + 1;
      double t[64][8], best[8];
      for (int v = 0; v < npf; v++) best[v] = 1e30;
      for (int r = 0; r < rounds; r++)
        for (int q = 0; q < npf; q++) {
          int v = (q + r) % npf;
          sk_arg args[4] = {{.data = A}, {.data = Bp[v]}, {.data = ep ? (void *)bias : (void *)C[v]}, {.data = C[v]}};
          g[ep][v].fn(&abi, sizes, args);
          double t0 = exb_now_s(true);
          for (int i = 0; i < reps; i++) g[ep][v].fn(&abi, sizes, args);
          t[r][v] = (exb_now_s(true) - t0) / reps;
          if (t[r][v] < best[v]) best[v] = t[r][v];
        }
      double maxd = 0;
      for (int v = 1; v < npf; v++)
        for (int64_t i = 0; i < M * N; i++) {
          double d = C[v][i] - C[0][i];
          if (d < 0) d = -d;
          if (d > maxd) maxd = d;
        }
      printf("%s %4lld %4lld %4lld:", ep ? "mm+gelu" : "matmul ", (long long)M, (long long)K, (long long)N);
      for (int v = 0; v < npf; v++) {
        double rr[64];
        for (int r = 0; r < rounds; r++) rr[r] = t[r][0] / t[r][v];
        exb_sort_f64(rr, (size_t)rounds);
        printf("  pf%d %.1f GF x%.3f", pfs[v], flops / best[v] * 1e-9, rr[rounds / 2]);
      }
      printf("%s\n", maxd > 1e-3 ? " DIFFER" : "");
      fflush(stdout);
      for (int v = 0; v < npf; v++) free(C[v]), free(Bp[v]);
      free(A), free(B), free(bias);
    }
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  sheaf_ctx_free(ctx);
  return 0;
}
