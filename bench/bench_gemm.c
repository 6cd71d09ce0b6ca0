/*
 * bench_gemm.c — Sheaf's f32 GEMM against OpenBLAS sgemm, side by side in
 * one run on the same inputs, 1 and 2 threads.
 *
 *   plain    C = A·B, B pre-packed by Sheaf (packing is load-time work),
 *            OpenBLAS gets row-major A, B (cblas_sgemm).
 *   gather   A's rows scattered (a row-pointer array in shuffled order):
 *            Sheaf packs straight from the pointers; OpenBLAS first
 *            memcpy-gathers the rows into a contiguous block (timed).
 *   lstm     a whole LSTM cell (gates GEMM + fused pointwise tail, N = 4H,
 *            K = D + H)
 *            vs Sheaf's bare GEMM of the same shape: the record's
 *            epilogue_overhead is fused/bare − 1; ratio is vs OpenBLAS sgemm.
 *   unpacked activations × activations: Sheaf packs B per call.
 *   ep       the binary TreeLSTM's gate GEMMs with the generic epilogue
 *            (bias on every column, sigmoid on [0, N − H), tanh on
 *            [N − H, N), H = 256): internal nodes N = 5H, K = 2H; leaves
 *            N = 3H, K = E = 256. epilogue_overhead is fused/bare − 1.
 *
 * OpenBLAS is loaded at run time (dlopen "libopenblas.so.0"), so neither the
 * library nor this binary depends on it; without it only Sheaf is timed.
 * GFLOP/s = 2MNK / best time over several rounds (rounds alternate between
 * the implementations so background load hits both alike; the lstm and ep
 * rows use six times as many rounds, each a fifth as long, for a steadier
 * epilogue_overhead). The first line
 * also gives the core's measured FMA peak (12 independent FMA chains), the
 * ceiling every ratio lives under.
 *
 * --cpu-time times 1-thread rows with the thread's CPU clock instead of the
 * wall clock: on a shared machine the wall clock also counts the time the
 * thread waited for a core (2-thread rows always use the wall clock).
 *
 *   bench_gemm [--quick] [--threads 1|2|12] [--shape NAME] [--json FILE] [--isa L] [--cpu-time]
 */
#include <dlfcn.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/gemm.h"

/* ------------------------------------------------------------ OpenBLAS */

enum { CblasRowMajor = 101, CblasNoTrans = 111 };
typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *,
                         int, float, float *, int);
static sgemm_fn cblas_sgemm_p;
static void (*openblas_set_threads_p)(int);
static char *(*openblas_config_p)(void);

static void load_openblas(void) {
  const char *names[] = {"libopenblas.so.0", "libopenblas.so"};
  for (size_t i = 0; i < SH_ARRAY_LEN(names); i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) continue;
    *(void **)&cblas_sgemm_p = dlsym(h, "cblas_sgemm");
    *(void **)&openblas_set_threads_p = dlsym(h, "openblas_set_num_threads");
    *(void **)&openblas_config_p = dlsym(h, "openblas_get_config");
    if (cblas_sgemm_p) return;
  }
}

/* ---------------------------------------------------------------- clock */

static bool g_cpu_clock; /* --cpu-time, for the row being timed */

static uint64_t now_ns(void) {
  if (!g_cpu_clock) return sheaf_time_ns();
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* ----------------------------------------------------------------- peak */

#if defined(__x86_64__)
#include <immintrin.h>
/* GFLOP/s of one thread running 12 independent FMA chains (zmm, or ymm
 * without AVX-512) for ~50 ms; the clock is read every 240,000 FMAs (the
 * CPU clock is a system call). */
__attribute__((target("avx512f,fma"))) static double peak_avx512(void) {
  __m512 acc[12], m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f);
  for (int i = 0; i < 12; i++) acc[i] = _mm512_set1_ps((float)i);
  uint64_t iters = 0, t0 = now_ns(), t1;
  do {
    for (int r = 0; r < 20000; r++)
      for (int i = 0; i < 12; i++) acc[i] = _mm512_fmadd_ps(acc[i], m, a);
    iters += 20000;
    t1 = now_ns();
  } while (t1 - t0 < 50000000ull);
  float sink = 0;
  for (int i = 0; i < 12; i++) sink += _mm512_reduce_add_ps(acc[i]);
  if (sink == 12345.0f) puts("");
  return 2.0 * 16 * 12 * (double)iters / (double)(t1 - t0);
}
__attribute__((target("avx2,fma"))) static double peak_avx2(void) {
  __m256 acc[12], m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
  for (int i = 0; i < 12; i++) acc[i] = _mm256_set1_ps((float)i);
  uint64_t iters = 0, t0 = now_ns(), t1;
  do {
    for (int r = 0; r < 20000; r++)
      for (int i = 0; i < 12; i++) acc[i] = _mm256_fmadd_ps(acc[i], m, a);
    iters += 20000;
    t1 = now_ns();
  } while (t1 - t0 < 50000000ull);
  float v[8], sink = 0;
  for (int i = 0; i < 12; i++) {
    _mm256_storeu_ps(v, acc[i]);
    sink += v[0];
  }
  if (sink == 12345.0f) puts("");
  return 2.0 * 8 * 12 * (double)iters / (double)(t1 - t0);
}
#endif

static double fma_peak(void) {
  double best = 0;
#if defined(__x86_64__)
  for (int i = 0; i < 5; i++) {
    double g = sheaf_cpu_isa_host() >= SHEAF_ISA_AVX512 ? peak_avx512()
               : sheaf_cpu_isa_host() >= SHEAF_ISA_AVX2 ? peak_avx2() : 0;
    if (g > best) best = g;
  }
#endif
  return best;
}

/* --------------------------------------------------------------- shapes */

typedef enum { K_PLAIN, K_GATHER, K_LSTM, K_UNPACKED, K_EP } kind;
typedef struct shape {
  const char *name;
  int64_t m, n, k;
  kind kind;
  bool quick; /* part of --quick */
} shape;

static const shape shapes[] = {
    {"sq1024", 1024, 1024, 1024, K_PLAIN, true},
    {"sq512", 512, 512, 512, K_PLAIN, true},
    {"tok1600", 1600, 768, 256, K_PLAIN, true},
    {"skinny64x1024x256", 64, 1024, 256, K_PLAIN, true},
    {"skinny64x1280x512", 64, 1280, 512, K_PLAIN, true},
    {"gemv1x1280x512", 1, 1280, 512, K_PLAIN, true},
    {"skinny10x1280x512", 10, 1280, 512, K_PLAIN, true},
    {"gather256x1280x512", 256, 1280, 512, K_GATHER, true},
    {"lstm64x1024x256", 64, 1024, 256, K_LSTM, true},
    {"lstm64x1024x512", 64, 1024, 512, K_LSTM, true}, /* H = 256, A = [x ; h] */
    {"lstm64x2048x512", 64, 2048, 512, K_LSTM, false},
    {"unpacked256x256x64", 256, 256, 64, K_UNPACKED, false},
    {"ep64x1280x512", 64, 1280, 512, K_EP, true}, /* TreeLSTM node: 5 gates */
    {"ep256x1280x512", 256, 1280, 512, K_EP, true},
    {"ep64x768x256", 64, 768, 256, K_EP, true}, /* TreeLSTM leaf: 3 gates */
    {"ep256x768x256", 256, 768, 256, K_EP, true},
};

static float *frand_block(int64_t n, uint64_t seed) {
  float *p = NULL;
  if (posix_memalign((void **)&p, 64, (size_t)(n > 0 ? n : 1) * sizeof(float))) abort();
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = (float)((double)(seed >> 40) / (double)(1ull << 24)) - 0.5f;
  }
  return p;
}

typedef struct runner {
  sheaf_ctx *ctx;
  sheaf_isa isa;
  int threads;
  const shape *s;
  sh_gemm_args sheaf, bare;
  float *a, *a_gather, *b, *c, *c2, *h, *cprev;
  const float **rows;
  int64_t lda;
} runner;

static void run_sheaf(runner *r, bool bare) {
  sheaf_status st = sh_gemm(r->ctx, r->isa, r->threads, bare ? &r->bare : &r->sheaf);
  if (st) {
    fprintf(stderr, "bench_gemm: %s\n", sheaf_ctx_last_error(r->ctx));
    exit(1);
  }
}

static void run_openblas(runner *r) {
  const shape *s = r->s;
  const float *a = r->a;
  int lda = (int)s->k;
  if (s->kind == K_GATHER) { /* what a BLAS user must do with scattered rows */
    for (int64_t i = 0; i < s->m; i++)
      memcpy(r->a_gather + i * s->k, r->rows[i], (size_t)s->k * sizeof(float));
    a = r->a_gather;
  }
  cblas_sgemm_p(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)s->m, (int)s->n, (int)s->k, 1.0f,
                a, lda, r->b, (int)s->n, 0.0f, r->c2, (int)s->n);
}

/* Best seconds per call of `which` (0 sheaf, 1 sheaf bare, 2 openblas). */
static double time_one(runner *r, int which, double min_s) {
  int iters = 1;
  for (;;) {
    uint64_t t0 = now_ns();
    for (int i = 0; i < iters; i++) {
      if (which == 2) run_openblas(r);
      else run_sheaf(r, which == 1);
    }
    double dt = (double)(now_ns() - t0) * 1e-9;
    if (dt >= min_s) return dt / iters;
    iters = dt <= 0 ? iters * 10 : (int)(iters * (min_s * 1.2 / dt)) + 1;
  }
}

int main(int argc, char **argv) {
  bool quick = false, cpu_time = false;
  int thread_sel = 12; /* 1, 2, or 12 = both */
  const char *json = NULL, *only = NULL;
  int isa_arg = -1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = true;
    else if (!strcmp(argv[i], "--cpu-time")) cpu_time = true;
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) thread_sel = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!strcmp(argv[i], "--shape") && i + 1 < argc) only = argv[++i];
    else if (!strcmp(argv[i], "--isa") && i + 1 < argc) {
      const char *v = argv[++i];
      isa_arg = !strcmp(v, "scalar") ? 0 : !strcmp(v, "avx2") ? 1 : !strcmp(v, "avx512") ? 2 : -2;
      if (isa_arg == -2) {
        fprintf(stderr, "bench_gemm: --isa scalar|avx2|avx512\n");
        return 2;
      }
    } else {
      fprintf(stderr, "usage: bench_gemm [--quick] [--threads 1|2|12] [--shape NAME] "
                      "[--json FILE] [--isa scalar|avx2|avx512] [--cpu-time]\n");
      return 2;
    }
  }
  load_openblas();
  sheaf_ctx_options o = {.threads = 2};
  sheaf_ctx *ctx;
  char err[256];
  if (sheaf_ctx_create(&o, &ctx, err, sizeof err) != SHEAF_OK) {
    fprintf(stderr, "bench_gemm: %s\n", err);
    return 1;
  }
  sheaf_isa isa = isa_arg >= 0 ? (sheaf_isa)isa_arg : sheaf_cpu_isa();
  FILE *jf = json ? fopen(json, "w") : NULL;
  if (json && !jf) {
    fprintf(stderr, "bench_gemm: cannot write %s\n", json);
    return 1;
  }
  printf("sheaf %s (%s) vs %s\n", sh_gemm_kernel_get(isa)->name, sheaf_isa_name(isa),
         cblas_sgemm_p ? (openblas_config_p ? openblas_config_p() : "OpenBLAS")
                       : "OpenBLAS: not available (libopenblas.so.0 not found; "
                         "apt-get install -y libopenblas-dev): its columns are '-'");
  g_cpu_clock = cpu_time;
  double peak = fma_peak();
  if (peak > 0)
    printf("measured FMA peak: %.1f GFLOP/s per core (12 independent chains, %s clock)\n", peak,
           cpu_time ? "thread CPU" : "wall");
  printf("%-22s %5s %5s %5s %3s %10s %10s %7s %s\n", "shape", "M", "N", "K", "thr", "sheaf", "openblas",
         "ratio", "(GFLOP/s)");
  if (jf) fprintf(jf, "[\n");
  bool first_rec = true;
  sh_gemm_ws *ws = NULL;
  if (sh_gemm_ws_create(ctx, &ws)) return 1;

  for (size_t si = 0; si < SH_ARRAY_LEN(shapes); si++) {
    const shape *s = &shapes[si];
    if (quick && !s->quick) continue;
    if (only && strcmp(only, s->name)) continue;
    runner r = {.ctx = ctx, .isa = isa, .s = s};
    int64_t M = s->m, N = s->n, K = s->k, H = N / 4;
    r.a = frand_block(M * K, 1);
    r.b = frand_block(K * N, 2);
    r.c = frand_block(M * N, 3);
    r.c2 = frand_block(M * N, 4);
    r.h = frand_block(M * H, 5);
    r.cprev = frand_block(M * H, 6);
    r.a_gather = frand_block(M * K, 7);
    /* scattered rows: a shuffled permutation of a bigger pool */
    int64_t pool_rows = 2 * M;
    float *pool = frand_block(pool_rows * K, 8);
    r.rows = malloc((size_t)M * sizeof *r.rows);
    int64_t *perm = malloc((size_t)pool_rows * sizeof *perm);
    for (int64_t i = 0; i < pool_rows; i++) perm[i] = i;
    uint64_t seed = 42;
    for (int64_t i = pool_rows - 1; i > 0; i--) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      int64_t j = (int64_t)((seed >> 33) % (uint64_t)(i + 1)), t = perm[i];
      perm[i] = perm[j];
      perm[j] = t;
    }
    for (int64_t i = 0; i < M; i++) r.rows[i] = pool + perm[i] * K;

    sh_gemm_packed_b *pb = NULL, *pb_lstm = NULL;
    if (s->kind != K_UNPACKED && sh_gemm_pack_b(ctx, r.b, N, K, N, 0, &pb)) return 1;
    if (s->kind == K_LSTM && sh_gemm_pack_b(ctx, r.b, N, K, N, SH_GEMM_PACK_GATES, &pb_lstm))
      return 1;
    sh_gemm_lstm lstm = {0, 1, 2, 3, r.c2, {NULL, r.cprev, H}, {NULL, r.c, H}, {NULL, r.h, H}};
    sh_gemm_args base = {.m = M, .n_src = 1, .src = {{K, {NULL, r.a, K}}}, .b_packed = pb,
                         .c = {NULL, r.c, N}, .ws = ws};
    r.sheaf = base;
    if (s->kind == K_GATHER) r.sheaf.src[0].in = (sh_gemm_in){r.rows, NULL, 0};
    if (s->kind == K_UNPACKED) {
      r.sheaf.b = (sh_gemm_in){NULL, r.b, N};
      r.sheaf.n = N;
    }
    if (s->kind == K_LSTM) {
      r.sheaf.b_packed = pb_lstm;
      r.sheaf.lstm = &lstm;
    }
    if (s->kind == K_EP) { /* bias, sigmoid on the gates, tanh on the candidate */
      r.sheaf.n_ep = 3;
      r.sheaf.ep[0] = (sh_gemm_ep){.kind = SH_GEMM_EP_BIAS, .vec = r.c2};
      r.sheaf.ep[1] = (sh_gemm_ep){.kind = SH_GEMM_EP_ACT, .n0 = 0, .n1 = N - 256,
                                   .act = SH_GEMM_ACT_SIGMOID};
      r.sheaf.ep[2] = (sh_gemm_ep){.kind = SH_GEMM_EP_ACT, .n0 = N - 256, .n1 = N,
                                   .act = SH_GEMM_ACT_TANH};
    }
    r.bare = base;

    for (int t = 1; t <= 2; t++) {
      if (thread_sel != 12 && thread_sel != t) continue;
      r.threads = t;
      g_cpu_clock = cpu_time && t == 1;
      if (openblas_set_threads_p) openblas_set_threads_p(t);
      double min_s = quick ? 0.02 : 0.1;
      int rounds = quick ? 3 : 5;
      if (s->kind == K_LSTM || s->kind == K_EP) {
        /* the overhead is a difference of a few %: many short alternating
         * slices, so that both minima see the machine in the same state */
        min_s /= 5;
        rounds *= 6;
      }
      double best_s = 1e30, best_o = 1e30, best_b = 1e30;
      run_sheaf(&r, false); /* warm up (workspace growth) */
      if (cblas_sgemm_p) run_openblas(&r);
      for (int round = 0; round < rounds; round++) {
        double ts = time_one(&r, 0, min_s);
        if (ts < best_s) best_s = ts;
        if (s->kind == K_LSTM || s->kind == K_EP) {
          double tb = time_one(&r, 1, min_s);
          if (tb < best_b) best_b = tb;
        }
        if (cblas_sgemm_p) {
          double to = time_one(&r, 2, min_s);
          if (to < best_o) best_o = to;
        }
      }
      double flops = 2.0 * (double)M * (double)N * (double)K;
      double gs = flops / best_s * 1e-9, go = cblas_sgemm_p ? flops / best_o * 1e-9 : 0;
      double ratio = go > 0 ? gs / go : 0;
      if (cblas_sgemm_p)
        printf("%-22s %5lld %5lld %5lld %3d %10.1f %10.1f %7.3f", s->name, (long long)M,
               (long long)N, (long long)K, t, gs, go, ratio);
      else /* the OpenBLAS columns are missing, not zero */
        printf("%-22s %5lld %5lld %5lld %3d %10.1f %10s %7s", s->name, (long long)M,
               (long long)N, (long long)K, t, gs, "-", "-");
      double overhead = 0;
      if (s->kind == K_LSTM || s->kind == K_EP) {
        overhead = best_s / best_b - 1.0;
        printf("  bare %.1f, fused epilogue overhead %+.1f%%", flops / best_b * 1e-9,
               100 * overhead);
      }
      printf("\n");
      fflush(stdout);
      if (jf) {
        fprintf(jf,
                "%s  {\"name\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"threads\": %d, "
                "\"sheaf_gflops\": %.2f",
                first_rec ? "" : ",\n", s->name, (long long)M, (long long)N, (long long)K, t, gs);
        if (cblas_sgemm_p) fprintf(jf, ", \"openblas_gflops\": %.2f, \"ratio\": %.4f", go, ratio);
        else fprintf(jf, ", \"openblas_gflops\": null, \"ratio\": null");
        if (s->kind == K_LSTM || s->kind == K_EP)
          fprintf(jf, ", \"sheaf_bare_gflops\": %.2f, \"epilogue_overhead\": %.4f",
                  flops / best_b * 1e-9, overhead);
        fprintf(jf, ", \"isa\": \"%s\", \"clock\": \"%s\"}", sheaf_isa_name(isa),
                g_cpu_clock ? "thread_cpu" : "wall");
        first_rec = false;
      }
    }
    sh_gemm_packed_b_free(ctx, pb);
    sh_gemm_packed_b_free(ctx, pb_lstm);
    free(r.a);
    free(r.b);
    free(r.c);
    free(r.c2);
    free(r.h);
    free(r.cprev);
    free(r.a_gather);
    free(pool);
    free(perm);
    free(r.rows);
  }
  if (jf) {
    fprintf(jf, "\n]\n");
    fclose(jf);
  }
  sh_gemm_ws_free(ctx, ws);
  sheaf_ctx_free(ctx);
  return 0;
}
