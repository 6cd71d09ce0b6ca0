/*
 * bench_codegen_lir.c — a quick measurement (not a test): the matmul
 * generated from the loop IR with the default schedule, against Sheaf's
 * hand GEMM (sh_gemm, B packed once), on the TreeLSTM / encoder GEMM shapes
 * M = 64 and 1600 rows, (K, N) = (256, 1280) and (512, 2048), 1 thread.
 * Both get B packed ahead (a weight); time is the thread's CPU clock (the
 * machine is shared), best of rounds that alternate the two.
 *
 *   bench_codegen_lir [--quick] [--isa scalar|avx2|avx512] [--threads N] [--opt "-O3 -march=native"]
 *                     [--row-tiles T]   (tiles per row block of the sweep: sh_sched_opts.row_tiles)
 *                     [--kc KC]         (K block of the "KB" column: sh_sched_opts.kc, 256)
 *                     [--rounds R]      (alternating rounds; default 7, --quick 3)
 *
 * The kernel is compiled by tests/lir_cc.h (system cc), the stand-in for
 * the JIT. "tuned" is the best of a small sweep of the default schedule's
 * GEMM tile (sh_sched_opts: mr x nr) per shape — what a tuner would record.
 * Also prints the generated matmul + bias + GELU (default schedule)
 * against sh_gemm with a GELU epilogue, and the generated row softmax and
 * layernorm against the hand row kernels (src/kernels/rows.h), M = 64,
 * N = 768, in ns per row. "KB" is the default tile with K blocks of KC
 * (sh_sched_opts.kc; the default schedule does not block), timed in the
 * same alternating rounds: KB/def above 1 means blocking would pay.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../tests/lir_build.h"
#include "../tests/lir_cc.h"
#include "base/pool.h"
#include "codegen/lir_emit.h"
#include "codegen/lir_sched.h"
#include "bench_util.h"
#include "kernels/gemm.h"
#include "kernels/rows.h"

typedef struct gen {
  void *so;
  sk_entry_fn fn;
  void (*pack)(const int64_t *, const float *, int64_t, int, float *);
  int64_t (*psize)(const int64_t *);
} gen;

static bool gen_build(sheaf_ctx *ctx, const char *dir, const char *name, bool epilogue, sheaf_isa isa,
                      const char *opt, const sh_sched_opts *so, gen *g) {
  sh_lir_kernel *k = lb_matmul(ctx, name, epilogue);
  if (!k || sh_sched_default_opts(k, isa, so)) {
    fprintf(stderr, "bench_codegen_lir: %s\n", sheaf_ctx_last_error(ctx));
    return false;
  }
  sh_buf b;
  sh_buf_init(&b, ctx);
  if (sh_lir_emit_c(k, &b)) {
    fprintf(stderr, "bench_codegen_lir: %s\n", sheaf_ctx_last_error(ctx));
    return false;
  }
  char err[8192];
  const char *src = sh_buf_cstr(&b);
  double t0 = exb_now_s(false);
  int rc = lir_cc_build(dir, name, &src, 1, isa, opt, 1, &g->so, err, sizeof err);
  double t1 = exb_now_s(false);
  sh_buf_free(&b);
  sh_lir_free(k);
  if (rc) {
    fprintf(stderr, "bench_codegen_lir: compile failed: %s\n", err);
    return false;
  }
  printf("# compiled %s (tile %d x %d, kc %d) in %.2f s (%s %s)\n", name, so->mr, so->nr, so->kc, t1 - t0,
         lir_cc_path(), opt);
  char sym[64];
  void *p = dlsym(g->so, name);
  memcpy(&g->fn, &p, sizeof p);
  snprintf(sym, sizeof sym, "%s_pack_B", name);
  p = dlsym(g->so, sym);
  memcpy(&g->pack, &p, sizeof p);
  snprintf(sym, sizeof sym, "%s_packed_size_B", name);
  p = dlsym(g->so, sym);
  memcpy(&g->psize, &p, sizeof p);
  return g->fn && g->pack && g->psize;
}

int main(int argc, char **argv) {
  bool quick = false;
  sheaf_isa isa = sheaf_cpu_isa();
  int threads = 1;
  const char *opt = "-O3 -march=native";
  int row_tiles = 0, kc = 256, rounds_opt = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = true;
    else if (!strcmp(argv[i], "--isa") && i + 1 < argc) {
      const char *v = argv[++i];
      isa = !strcmp(v, "scalar") ? SHEAF_ISA_SCALAR : !strcmp(v, "avx512") ? SHEAF_ISA_AVX512 : SHEAF_ISA_AVX2;
    } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--opt") && i + 1 < argc) opt = argv[++i];
    else if (!strcmp(argv[i], "--row-tiles") && i + 1 < argc) row_tiles = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--kc") && i + 1 < argc) kc = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds_opt = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: bench_codegen_lir [--quick] [--isa L] [--threads N] [--opt FLAGS] [--row-tiles T] "
                      "[--kc KC] [--rounds R]\n");
      return 2;
    }
  }
  if (!lir_cc_path()) {
    printf("bench_codegen_lir: no C compiler; nothing to measure\n");
    return 0;
  }
  sheaf_ctx *ctx;
  char err[256];
  sheaf_ctx_options o = {0};
  o.threads = threads;
  if (sheaf_ctx_create(&o, &ctx, err, sizeof err)) {
    fprintf(stderr, "bench_codegen_lir: %s\n", err);
    return 1;
  }
  char dir[] = "/tmp/sheaf-bench-lir-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  int w = isa == SHEAF_ISA_AVX512 ? 16 : isa == SHEAF_ISA_AVX2 ? 8 : 1;
  /* the default tile first, then the sweep */
  static const int tiles8[][2] = {{6, 16}, {4, 24}, {5, 16}, {4, 16}, {8, 8}, {3, 32}};
  static const int tiles16[][2] = {{12, 32}, {14, 32}, {8, 32}, {6, 48}, {4, 64}, {16, 16}};
  static const int tiles1[][2] = {{4, 4}, {2, 8}, {8, 2}, {4, 8}, {6, 4}, {3, 3}};
  const int(*tiles)[2] = w == 16 ? tiles16 : w == 8 ? tiles8 : tiles1;
  int n_tiles = quick ? 3 : 6;
  gen g[10];
  for (int t = 0; t < n_tiles; t++) {
    sh_sched_opts so = {0};
    so.mr = tiles[t][0];
    so.nr = tiles[t][1];
    so.row_tiles = row_tiles;
    char name[32];
    snprintf(name, sizeof name, "bench_mm_%dx%d", so.mr, so.nr);
    if (!gen_build(ctx, dir, name, false, isa, opt, &so, &g[t])) return 1;
  }
  sh_sched_opts so0 = {0};
  so0.mr = tiles[0][0];
  so0.nr = tiles[0][1];
  so0.row_tiles = row_tiles;
  if (!gen_build(ctx, dir, "bench_mmg", true, isa, opt, &so0, &g[n_tiles])) return 1;
  so0.kc = kc; /* the default tile with K blocks */
  if (!gen_build(ctx, dir, "bench_mm_kb", false, isa, opt, &so0, &g[n_tiles + 1]) ||
      !gen_build(ctx, dir, "bench_mmg_kb", true, isa, opt, &so0, &g[n_tiles + 2]))
    return 1;
  sk_abi abi;
  sh_lir_abi_init(ctx, threads, &abi);
  sh_gemm_ws *ws;
  if (sh_gemm_ws_create(ctx, &ws)) return 1;
  printf("# isa %s, %d thread(s), time: %s clock, GFLOP/s = 2MNK / best time\n", sheaf_isa_name(isa),
         threads, threads == 1 ? "thread CPU" : "wall");
  printf("%-8s %5s %5s %5s %8s %8s %9s %8s %8s %7s %7s %8s\n", "kernel", "M", "K", "N", "default", "tuned",
         "(tile)", "KB", "hand", "def/h", "tun/h", "KB/def");
  static const int64_t shapes[][3] = {{64, 256, 1280}, {64, 512, 2048}, {1600, 256, 1280}, {1600, 512, 2048}};
  uint64_t seed = 42;
  for (int ep = 0; ep < 2; ep++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      int64_t M = shapes[s][0], K = shapes[s][1], N = shapes[s][2], sizes[3] = {M, N, K};
      float *A = exb_frand_xs(M * K, &seed), *B = exb_frand_xs(K * N, &seed), *bias = exb_frand_xs(N, &seed);
      float *Cg = malloc(sizeof(float) * (size_t)(M * N)), *Ch = malloc(sizeof(float) * (size_t)(M * N));
      sh_gemm_packed_b *pb;
      if (sh_gemm_pack_b(ctx, B, N, K, N, 0, &pb)) return 1;
      sh_gemm_args ga = exb_gemm_plain(A, M, K, pb, Ch, N, ws);
      if (ep) {
        ga.n_ep = 2;
        ga.ep[0].kind = SH_GEMM_EP_BIAS;
        ga.ep[0].vec = bias;
        ga.ep[1].kind = SH_GEMM_EP_ACT;
        ga.ep[1].act = SH_GEMM_ACT_GELU_ERF;
      }
      double flops = 2.0 * (double)M * (double)N * (double)K;
      int reps = (int)(2e8 / flops) + 1, rounds = rounds_opt > 0 ? rounds_opt : quick ? 3 : 7;
      /* variants: the sweep (mm) or the default (mm+gelu), then the default K-blocked */
      int nv = (ep ? 1 : n_tiles) + 1;
      gen *gvs[10];
      for (int v = 0; v + 1 < nv; v++) gvs[v] = &g[ep ? n_tiles : v];
      gvs[nv - 1] = &g[n_tiles + 1 + ep];
      double best[10], best_h = 1e30;
      float *Bp[10];
      for (int v = 0; v < nv; v++) {
        gen *gv = gvs[v];
        Bp[v] = malloc(sizeof(float) * (size_t)gv->psize(sizes));
        gv->pack(sizes, B, N, 0, Bp[v]);
        best[v] = 1e30;
      }
      double maxd = 0;
      for (int r = 0; r < rounds; r++) {
        for (int v = 0; v < nv; v++) {
          gen *gv = gvs[v];
          sk_arg args[4] = {{.data = A}, {.data = Bp[v]}, {.data = ep ? (void *)bias : (void *)Cg}, {.data = Cg}};
          double t0 = exb_now_s(threads == 1);
          for (int i = 0; i < reps; i++) gv->fn(&abi, sizes, args);
          double t1 = exb_now_s(threads == 1);
          if ((t1 - t0) / reps < best[v]) best[v] = (t1 - t0) / reps;
          if (r == 0) { /* check against the hand GEMM once */
            sh_gemm(ctx, isa, threads, &ga);
            for (int64_t i = 0; i < M * N; i++) {
              double a = Ch[i] < 0 ? -Ch[i] : Ch[i], d = (Cg[i] - Ch[i]) / (a > 1 ? a : 1);
              if (d < 0) d = -d;
              if (d > maxd) maxd = d;
            }
          }
        }
        double t0 = exb_now_s(threads == 1);
        for (int i = 0; i < reps; i++) sh_gemm(ctx, isa, threads, &ga);
        double t1 = exb_now_s(threads == 1);
        if ((t1 - t0) / reps < best_h) best_h = (t1 - t0) / reps;
      }
      int bt = 0;
      for (int v = 1; v + 1 < nv; v++)
        if (best[v] < best[bt]) bt = v;
      char tile[16];
      snprintf(tile, sizeof tile, "(%dx%d)", tiles[ep ? 0 : bt][0], tiles[ep ? 0 : bt][1]);
      printf("%-8s %5lld %5lld %5lld %8.1f %8.1f %9s %8.1f %8.1f %7.2f %7.2f %8.2f%s\n", ep ? "mm+gelu" : "matmul",
             (long long)M, (long long)K, (long long)N, flops / best[0] * 1e-9, flops / best[bt] * 1e-9,
             ep ? "" : tile, flops / best[nv - 1] * 1e-9, flops / best_h * 1e-9, best_h / best[0],
             best_h / best[bt], best[0] / best[nv - 1], maxd > 1e-4 ? "  (results differ!)" : "");
      for (int v = 0; v < nv; v++) free(Bp[v]);
      sh_gemm_packed_b_free(ctx, pb);
      free(A), free(B), free(bias), free(Cg), free(Ch);
    }
  /* row kernels */
  {
    sh_lir_kernel *ks[2] = {lb_softmax(ctx, "bench_sm"), lb_layernorm(ctx, "bench_ln", 1e-5f)};
    const char *src[2];
    sh_buf b[2];
    for (int i = 0; i < 2; i++) {
      sh_buf_init(&b[i], ctx);
      if (!ks[i] || sh_sched_default(ks[i], isa) || sh_lir_emit_c(ks[i], &b[i])) {
        fprintf(stderr, "bench_codegen_lir: %s\n", sheaf_ctx_last_error(ctx));
        return 1;
      }
      src[i] = sh_buf_cstr(&b[i]);
    }
    void *so;
    char cerr[8192];
    if (lir_cc_build(dir, "bench_rows", src, 2, isa, opt, 1, &so, cerr, sizeof cerr)) {
      fprintf(stderr, "bench_codegen_lir: %s\n", cerr);
      return 1;
    }
    sk_entry_fn fsm, fln;
    void *p = dlsym(so, "bench_sm");
    memcpy(&fsm, &p, sizeof p);
    p = dlsym(so, "bench_ln");
    memcpy(&fln, &p, sizeof p);
    int64_t M = 64, N = 768, sizes[2] = {M, N};
    float *x = exb_frand_xs(M * N, &seed), *gam = exb_frand_xs(N, &seed), *be = exb_frand_xs(N, &seed);
    float *yg = malloc(sizeof(float) * (size_t)(M * N)), *yh = malloc(sizeof(float) * (size_t)(M * N));
    sh_gemm_in xin = {.base = x, .ld = N}, none = {0};
    sh_gemm_out yout = {.base = yh, .ld = N};
    sk_arg asm_[2] = {{.data = x}, {.data = yg}}, aln[4] = {{.data = x}, {.data = gam}, {.data = be}, {.data = yg}};
    printf("%-8s %5s %5s %10s %10s %7s   (ns per row)\n", "kernel", "M", "N", "generated", "hand", "g/h");
    for (int which = 0; which < 2; which++) {
      int reps = 200, rounds = quick ? 3 : 7;
      double bg = 1e30, bh = 1e30;
      for (int r = 0; r < rounds; r++) {
        double t0 = exb_now_s(threads == 1);
        for (int i = 0; i < reps; i++) (which ? fln(&abi, sizes, aln) : fsm(&abi, sizes, asm_));
        double t1 = exb_now_s(threads == 1);
        for (int i = 0; i < reps; i++) {
          if (which) sh_layernorm_rows(isa, M, N, xin, none, gam, be, 1e-5f, yout);
          else sh_softmax_rows(isa, M, N, 1.0f, xin, yout);
        }
        double t2 = exb_now_s(threads == 1);
        if ((t1 - t0) / reps < bg) bg = (t1 - t0) / reps;
        if ((t2 - t1) / reps < bh) bh = (t2 - t1) / reps;
      }
      double maxd = 0;
      for (int64_t i = 0; i < M * N; i++) {
        double d = yg[i] - yh[i];
        if (d < 0) d = -d;
        if (d > maxd) maxd = d;
      }
      printf("%-8s %5lld %5lld %10.1f %10.1f %7.2f%s\n", which ? "layernorm" : "softmax", (long long)M,
             (long long)N, bg / (double)M * 1e9, bh / (double)M * 1e9, bh / bg,
             maxd > 1e-4 ? "  (results differ!)" : "");
    }
    free(x), free(gam), free(be), free(yg), free(yh);
    dlclose(so);
    for (int i = 0; i < 2; i++) {
      sh_buf_free(&b[i]);
      sh_lir_free(ks[i]);
    }
  }
  sh_gemm_ws_free(ctx, ws);
  for (int t = 0; t <= n_tiles + 2; t++) dlclose(g[t].so);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "bench_codegen_lir: could not remove %s\n", dir);
  sheaf_ctx_free(ctx);
  return 0;
}
