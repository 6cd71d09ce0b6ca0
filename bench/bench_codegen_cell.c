/*
 * bench_codegen_cell.c — the linearized TreeLSTM's node kernel alone
 * (hidden 256: z = [h_l; h_r]·W + b, 5 gates, c and h; the kernel
 * `sheaf run examples/treelstm.sf --emit-kernels` prints as tree_arm1)
 * at few and many rows, one thread, thread CPU time, paired rounds in one
 * process (the order rotating per round). Sides:
 *   gen     the kernel as compiled now (the gates run per row block of the
 *           GEMM, the product kept for one block; 1-2 rows: the few-rows
 *           variant: docs/CODEGEN.md, "Few rows" and "Fused ops")
 *   before  the same source with sh_sched_opts.row_block = -1 (the gates
 *           a pass of their own after the whole GEMM, as before) and no
 *           few-rows variant
 *   hand    sh_gemm (B packed once) into z, then per row the bias, the
 *           gates (sh_vmath sigmoid over 4H, tanh over H), c and h
 * Ratios: the median over rounds of t(hand) / t(side) (above 1: faster
 * than the hand pair). Outputs checked against the hand side (1e-4).
 *
 *   bench_codegen_cell [ROUNDS] [M,M,...]      (default 15; 1,2,4,8,16,64)
 *   CELL_RB=R: the gen side compiled with sh_sched_opts.row_block = R (and
 *   so without the few-rows variant)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "codegen/kernel_api.h"
#include "kernels/vmath.h"

static const char CELL[] =
    "kernel cell(x0: f32[N, 256], x1: f32[N, 256], x2: f32[N, 512], p3: f32[512, 1280], p4: f32[1280])\n"
    "    -> (o0: f32[N, 256], o1: f32[N, 256]) {\n"
    "  t7(n, i) +=! x2(n, r) * p3(r, i) where i in 0..1280, r in 0..512\n"
    "  t8(n, i) = t7(n, i) + p4(i) where i in 0..1280\n"
    "  t10(n, i) = sigmoid(t8(n, i)) where i in 0..256\n"
    "  t12(n, i) = sigmoid(t8(n, i + 256)) where i in 0..256\n"
    "  t14(n, i) = sigmoid(t8(n, i + 512)) where i in 0..256\n"
    "  t16(n, i) = sigmoid(t8(n, i + 768)) where i in 0..256\n"
    "  t18(n, i) = tanh(t8(n, i + 1024)) where i in 0..256\n"
    "  t23(n, i) = t10(n, i) * t18(n, i) + t12(n, i) * x0(n, i) + t14(n, i) * x1(n, i) where i in 0..256\n"
    "  o0(n, i) = t16(n, i) * tanh(t23(n, i)) where i in 0..256\n"
    "  o1(n, i) = t23(n, i) where i in 0..256\n}\n";

enum { H = 256, KK = 2 * H, NN = 5 * H, SIDES = 3 };

static void die(sheaf_ctx *ctx, const char *what) {
  fprintf(stderr, "bench_codegen_cell: %s: %s\n", what, ctx ? sheaf_ctx_last_error(ctx) : "");
  exit(1);
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

typedef struct hand {
  sheaf_ctx *ctx;
  sheaf_isa isa;
  sh_gemm_args ga;
  float *z, *tc;
  const float *x0, *x1, *b;
  float *h, *c;
  int64_t M;
} hand;

static void run_hand(hand *s) {
  sh_gemm(s->ctx, s->isa, 1, &s->ga);
  for (int64_t r = 0; r < s->M; r++) {
    float *z = s->z + r * NN, *c = s->c + r * H, *h = s->h + r * H;
    const float *cl = s->x0 + r * H, *cr = s->x1 + r * H;
    for (int j = 0; j < NN; j++) z[j] += s->b[j];
    sh_vmath_f32(s->isa, SH_VMATH_SIGMOID, 4 * H, z, z);
    sh_vmath_f32(s->isa, SH_VMATH_TANH, H, z + 4 * H, z + 4 * H);
    for (int j = 0; j < H; j++) c[j] = z[j] * z[4 * H + j] + z[H + j] * cl[j] + z[2 * H + j] * cr[j];
    sh_vmath_f32(s->isa, SH_VMATH_TANH, H, c, s->tc);
    for (int j = 0; j < H; j++) h[j] = z[3 * H + j] * s->tc[j];
  }
}

int main(int argc, char **argv) {
  int64_t ms[32] = {1, 2, 4, 8, 16, 64};
  int nm = 6, rounds;
  if (!exb_rounds_rows(argc, argv, &rounds, ms, &nm)) return 2;
  sheaf_ctx *ctx;
  if (sheaf_ctx_create(&(sheaf_ctx_options){.threads = 1}, &ctx, NULL, 0) != SHEAF_OK) return 1;
  sheaf_kernel *k[2];
  sh_sched_opts before = {.row_block = -1};
  const char *rbs = getenv("CELL_RB"); /* the gen side with sh_sched_opts.row_block = CELL_RB */
  sh_sched_opts rb = {.row_block = rbs ? atoi(rbs) : 0};
  if (sh_kernel_compile_opts(ctx, CELL, strlen(CELL), "cell", &(sh_kernel_opts){.sched = rbs ? &rb : NULL}, &k[0]))
    die(ctx, "compile");
  if (sh_kernel_compile_opts(ctx, CELL, strlen(CELL), "cell", &(sh_kernel_opts){.sched = &before}, &k[1]))
    die(ctx, "compile (before)");
  sh_gemm_ws *ws;
  if (sh_gemm_ws_create(ctx, &ws)) die(ctx, "workspace");
  sheaf_isa isa = sheaf_cpu_isa();
  uint64_t seed = 11;
  float *W = exb_frand_xs(KK * NN, &seed), *b = exb_frand_xs(NN, &seed);
  for (int64_t i = 0; i < KK * NN; i++) W[i] *= 0.1f;
  sh_gemm_packed_b *pb;
  if (sh_gemm_pack_b(ctx, W, NN, KK, NN, 0, &pb)) die(ctx, "pack");
  for (int s = 0; s < 2; s++) sheaf_kernel_set_weight_version(k[s], 3, 1);
  printf("# TreeLSTM 256 node kernel (plans, isa %s): 1 thread, thread CPU time, %d paired rounds;\n"
         "# ratio = median of t(sh_gemm + hand gates) / t(side)\n",
         sheaf_isa_name(isa), rounds);
  printf("%5s %10s %10s %10s %8s %8s %8s %8s\n", "M", "gen us", "before us", "hand us", "gen", "g min", "g max",
         "before");
  for (int mi = 0; mi < nm; mi++) {
    int64_t M = ms[mi];
    if (M < 1) continue;
    float *x0 = exb_frand_xs(M * H, &seed), *x1 = exb_frand_xs(M * H, &seed), *x2 = exb_frand_xs(M * KK, &seed);
    float *o[2][2], *hh = malloc(sizeof(float) * (size_t)(M * H)), *hc = malloc(sizeof(float) * (size_t)(M * H));
    float *z = NULL, *tc = malloc(sizeof(float) * H);
    if (posix_memalign((void **)&z, 64, sizeof(float) * (size_t)(M * NN)) || !hh || !hc || !tc)
      die(NULL, "out of memory");
    int64_t s0[] = {M, H}, s2[] = {M, KK}, sw[] = {KK, NN}, sb[] = {NN};
    sheaf_kernel_plan *p[2];
    void *data[2][7];
    for (int s = 0; s < 2; s++) {
      o[s][0] = malloc(sizeof(float) * (size_t)(M * H));
      o[s][1] = malloc(sizeof(float) * (size_t)(M * H));
      if (!o[s][0] || !o[s][1]) die(NULL, "out of memory");
      sheaf_kernel_arg ad[] = {{SHEAF_KERNEL_F32, x0, (size_t)(M * H), 2, s0},
                               {SHEAF_KERNEL_F32, x1, (size_t)(M * H), 2, s0},
                               {SHEAF_KERNEL_F32, x2, (size_t)(M * KK), 2, s2},
                               {SHEAF_KERNEL_F32, W, KK * NN, 2, sw},
                               {SHEAF_KERNEL_F32, b, NN, 1, sb},
                               {SHEAF_KERNEL_F32, o[s][0], (size_t)(M * H), 0, NULL},
                               {SHEAF_KERNEL_F32, o[s][1], (size_t)(M * H), 0, NULL}};
      if (sheaf_kernel_plan_make(k[s], ad, 7, &p[s])) die(ctx, "plan");
      void *d[] = {x0, x1, x2, W, b, o[s][0], o[s][1]};
      memcpy(data[s], d, sizeof d);
      if (sheaf_kernel_plan_run(p[s], data[s], 7)) die(ctx, "run");
    }
    hand hd = {ctx, isa, exb_gemm_plain(x2, M, KK, pb, z, NN, ws), z, tc, x0, x1, b, hh, hc, M};
    run_hand(&hd);
    double err = 0;
    for (int s = 0; s < 2; s++)
      for (int64_t i = 0; i < M * H; i++) {
        double e0 = fabs((double)o[s][0][i] - hh[i]) / (1 + fabs((double)hh[i]));
        double e1 = fabs((double)o[s][1][i] - hc[i]) / (1 + fabs((double)hc[i]));
        if (!(e0 <= err)) err = e0;
        if (!(e1 <= err)) err = e1;
      }
    if (!(err <= 1e-4)) {
      fprintf(stderr, "bench_codegen_cell: M %lld: outputs differ (%g)\n", (long long)M, err);
      return 1;
    }
    int reps = (int)(5e7 / (2.0 * (double)(M * KK * NN))) + 1;
    double t[SIDES][200], r[2][200];
    for (int q = 0; q < rounds; q++) {
      for (int side = 0; side < SIDES; side++) {
        int who = (side + q) % SIDES; /* 0 gen, 1 before, 2 hand */
        double t0 = exb_now_s(true);
        for (int i = 0; i < reps; i++)
          if (who < 2) sheaf_kernel_plan_run(p[who], data[who], 7);
          else run_hand(&hd);
        t[who][q] = (exb_now_s(true) - t0) / reps;
      }
      r[0][q] = t[2][q] / t[0][q];
      r[1][q] = t[2][q] / t[1][q];
    }
    for (int s = 0; s < SIDES; s++) qsort(t[s], (size_t)rounds, sizeof(double), cmp_d);
    for (int s = 0; s < 2; s++) qsort(r[s], (size_t)rounds, sizeof(double), cmp_d);
    printf("%5lld %10.2f %10.2f %10.2f %8.3f %8.3f %8.3f %8.3f\n", (long long)M, t[0][rounds / 2] * 1e6,
           t[1][rounds / 2] * 1e6, t[2][rounds / 2] * 1e6, r[0][rounds / 2], r[0][0], r[0][rounds - 1],
           r[1][rounds / 2]);
    fflush(stdout);
    for (int s = 0; s < 2; s++) {
      sheaf_kernel_plan_free(p[s]);
      free(o[s][0]), free(o[s][1]);
    }
    free(x0), free(x1), free(x2), free(z), free(tc), free(hh), free(hc);
  }
  sh_gemm_packed_b_free(ctx, pb);
  sh_gemm_ws_free(ctx, ws);
  free(W), free(b);
  for (int s = 0; s < 2; s++) sheaf_kernel_free(k[s]);
  sheaf_ctx_free(ctx);
  return 0;
}
