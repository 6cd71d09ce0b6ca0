/*
 * test_kernel_weights.c — weights of generated kernels (src/codegen/lower.c's
 * inference, kernel_api.c's packing): an input read only as W(r, f) in a
 * GEMM-like statement is read packed in panels; the run path packs it on
 * every run (version 0) or once per (pointer, shape, version) set by
 * sheaf_kernel_set_weight_version. Results against double-precision
 * references at sizes below, at, above and at multiples of the register
 * tiles (AVX2 6 x 16 in blocks of 96 rows, scalar 4 x 4); a new version,
 * pointer or shape repacks; two threads sharing one kernel with different
 * weights; the ahead-of-time contract (the emitted C's entry reads W packed
 * by the emitted sheafk_NAME_pack_W). Skipped with a note when no C
 * compiler exists.
 */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/jit.h"
#include "codegen/kernel_api.h"
#include "codegen/lower.h"
#include "harness.h"
#include "lang/parser.h"
#include "lir_cc.h"

static const char SRC[] =
    "kernel mm(A: f32[M, K], B: f32[K, N]) -> f32[M, N] { C(m, n) +=! A(m, k) * B(k, n) }\n"
    "kernel gated(x: f32[N, D], Wg: f32[D, F], Wh: f32[D, F]) -> f32[N, F] {\n"
    "  g(n, f) +=! x(n, d) * Wg(d, f)\n  h(n, f) +=! x(n, d) * Wh(d, f)\n"
    "  out(n, f) = sigmoid(g(n, f)) * tanh(h(n, f)) }\n"
    "kernel tmm(A: f32[M, K], B: f32[N, K]) -> f32[M, N] { C(m, n) +=! A(m, k) * B(n, k) }\n";

/* AVX2 where the host runs it (the tile sizes named above), else scalar. */
static sheaf_isa avx2_or_scalar(void) {
  sheaf_isa h = sheaf_cpu_isa();
  return h == SHEAF_ISA_AVX2 || h == SHEAF_ISA_AVX512 ? SHEAF_ISA_AVX2 : SHEAF_ISA_SCALAR;
}

static sheaf_kernel *compile(sheaf_ctx *ctx, const char *name, sheaf_isa isa) {
  sheaf_kernel *k = NULL;
  /* eager: th_cache_dir (harness.h) */
  sh_kernel_opts o = {.isa_set = true, .isa = isa, .eager = true, .cache_dir = th_cache_dir("weights")};
  CHECK_OK(ctx, sh_kernel_compile_opts(ctx, SRC, strlen(SRC), name, &o, &k));
  return k;
}

static void fill(float *p, int64_t n, int seed) {
  for (int64_t i = 0; i < n; i++) p[i] = (float)(((i * 7 + seed * 13) % 29) - 14) / 14.0f;
}

/* C = A · B (B [K, N]) through the kernel; the largest relative error. */
static double run_mm(sheaf_ctx *ctx, sheaf_kernel *k, const float *A, const float *B, int64_t M, int64_t K,
                     int64_t N) {
  float *C = malloc(sizeof(float) * (size_t)(M * N));
  int64_t sa[] = {M, K}, sb[] = {K, N};
  sheaf_kernel_arg a[] = {{SHEAF_KERNEL_F32, (void *)(uintptr_t)A, (size_t)(M * K), 2, sa},
                          {SHEAF_KERNEL_F32, (void *)(uintptr_t)B, (size_t)(K * N), 2, sb},
                          {SHEAF_KERNEL_F32, C, (size_t)(M * N), 0, NULL}};
  double worst = 1e30;
  if (C && CHECK_OK(ctx, sheaf_kernel_run(k, a, 3))) {
    worst = 0;
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 0; n < N; n++) {
        double r = 0;
        for (int64_t q = 0; q < K; q++) r += (double)A[m * K + q] * B[q * N + n];
        double e = fabs(C[m * N + n] - r) / fmax(1.0, fabs(r));
        if (!(e <= worst)) worst = e;
      }
  }
  free(C);
  return worst;
}

static void mm_sizes(sheaf_isa isa, uint64_t version) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_kernel *k = compile(ctx, "mm", isa);
  if (!k) return;
  CHECK(sh_kernel_input_packed(k, 1));
  CHECK(!sh_kernel_input_packed(k, 0));
  CHECK_OK(ctx, sheaf_kernel_set_weight_version(k, 1, version));
  static const int64_t Ms[] = {1, 5, 6, 7, 12, 13, 95, 96, 97, 193};
  static const int64_t Ns[] = {1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 65};
  static const int64_t Ks[] = {1, 3, 17, 64};
  float *A = malloc(sizeof(float) * 193 * 64), *B = malloc(sizeof(float) * 64 * 65);
  REQUIRE(A && B);
  fill(A, 193 * 64, 1);
  fill(B, 64 * 65, 2);
  double worst = 0;
  long runs = 0;
  for (size_t kk = 0; kk < SH_ARRAY_LEN(Ks); kk++)
    for (size_t ni = 0; ni < SH_ARRAY_LEN(Ns); ni++)
      for (size_t mi = 0; mi < SH_ARRAY_LEN(Ms); mi++) {
        double e = run_mm(ctx, k, A, B, Ms[mi], Ks[kk], Ns[ni]);
        if (!(e <= worst)) worst = e;
        runs++;
      }
  CHECK(worst < 1e-5);
  /* M varies fastest: packed once per (K, N) with a version, every run
   * without; by the kernel and by the few-rows variant its 1-row runs take
   * (kernel_fewrows.c: its own layout, its own kept copy) */
  long packs = sh_kernel_pack_count(k, 1);
  int layouts = 1 + sh_kernel_n_variants(k);
  for (int v = 0; v < sh_kernel_n_variants(k); v++) packs += sh_kernel_pack_count(sh_kernel_variant(k, v), 1);
  if (version) CHECK_EQ_INT(packs, (long)(layouts * SH_ARRAY_LEN(Ks) * SH_ARRAY_LEN(Ns)));
  else CHECK_EQ_INT(packs, runs);
  free(A);
  free(B);
  sheaf_kernel_free(k);
}

TEST(kernel_weights_mm_sizes_avx2) {
  if (!th_have_jit_cc("kernel_weights_mm_sizes_avx2")) return;
  mm_sizes(avx2_or_scalar(), 0);
}

TEST(kernel_weights_mm_sizes_scalar_versioned) {
  if (!th_have_jit_cc("kernel_weights_mm_sizes_scalar_versioned")) return;
  mm_sizes(SHEAF_ISA_SCALAR, 7);
}

/* A version is kept across runs; a new version, another pointer or another
 * shape repacks; version 0 repacks every time. */
TEST(kernel_weights_packed_once_per_version) {
  if (!th_have_jit_cc("kernel_weights_packed_once_per_version")) return;
  sheaf_ctx *ctx = th_ctx();
  sheaf_kernel *k = compile(ctx, "mm", avx2_or_scalar());
  if (!k) return;
  enum { M = 37, K = 29, N = 45 };
  static float A[M * K], B[K * N], B2[K * N];
  fill(A, M * K, 3);
  fill(B, K * N, 4);
  fill(B2, K * N, 5);
  REQUIRE_OK(ctx, sheaf_kernel_set_weight_version(k, 1, 1));
  CHECK(run_mm(ctx, k, A, B, M, K, N) < 1e-5);
  CHECK(run_mm(ctx, k, A, B, M, K, N) < 1e-5);
  CHECK(run_mm(ctx, k, A, B, 5, K, N) < 1e-5); /* another M: same packed B */
  CHECK_EQ_INT(sh_kernel_pack_count(k, 1), 1);
  fill(B, K * N, 6); /* written: a new version */
  REQUIRE_OK(ctx, sheaf_kernel_set_weight_version(k, 1, 2));
  CHECK(run_mm(ctx, k, A, B, M, K, N) < 1e-5);
  CHECK_EQ_INT(sh_kernel_pack_count(k, 1), 2);
  CHECK(run_mm(ctx, k, A, B2, M, K, N) < 1e-5); /* another pointer */
  CHECK_EQ_INT(sh_kernel_pack_count(k, 1), 3);
  CHECK(run_mm(ctx, k, A, B2, M, 9, 3 * N) < 1e-5); /* another shape, same pointer */
  CHECK_EQ_INT(sh_kernel_pack_count(k, 1), 4);
  CHECK(run_mm(ctx, k, A, B2, M, K, N) < 1e-5);
  CHECK_EQ_INT(sh_kernel_pack_count(k, 1), 5);
  REQUIRE_OK(ctx, sheaf_kernel_set_weight_version(k, 1, 0));
  CHECK(run_mm(ctx, k, A, B2, M, K, N) < 1e-5);
  CHECK(run_mm(ctx, k, A, B2, M, K, N) < 1e-5);
  CHECK_EQ_INT(sh_kernel_pack_count(k, 1), 7);
  CHECK_STATUS(ctx, sheaf_kernel_set_weight_version(k, 2, 1), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "no input 2");
  CHECK_STATUS(ctx, sheaf_kernel_set_weight_version(k, -1, 1), SHEAF_ERR_INVALID_ARG);
  CHECK_STATUS(ctx, sheaf_kernel_set_weight_version(NULL, 0, 1), SHEAF_ERR_INVALID_ARG);
  sheaf_ctx_clear_error(ctx);
  sheaf_kernel_free(k);
}

/* Only B(k, n) shapes are weights: a transposed operand and the left one
 * are read as given. The gated unit packs both of its weights. */
TEST(kernel_weights_inference) {
  if (!th_have_jit_cc("kernel_weights_inference")) return;
  sheaf_ctx *ctx = th_ctx();
  sheaf_kernel *t = compile(ctx, "tmm", avx2_or_scalar()), *g = compile(ctx, "gated", avx2_or_scalar());
  if (t) CHECK(!sh_kernel_input_packed(t, 0) && !sh_kernel_input_packed(t, 1));
  if (g) CHECK(!sh_kernel_input_packed(g, 0) && sh_kernel_input_packed(g, 1) && sh_kernel_input_packed(g, 2));
  if (g) {
    enum { N = 23, D = 19, F = 37 };
    static float x[N * D], Wg[D * F], Wh[D * F], out[N * F];
    fill(x, N * D, 7);
    fill(Wg, D * F, 8);
    fill(Wh, D * F, 9);
    int64_t sx[] = {N, D}, sw[] = {D, F};
    sheaf_kernel_arg a[] = {{SHEAF_KERNEL_F32, x, N * D, 2, sx}, {SHEAF_KERNEL_F32, Wg, D * F, 2, sw},
                            {SHEAF_KERNEL_F32, Wh, D * F, 2, sw}, {SHEAF_KERNEL_F32, out, N * F, 0, NULL}};
    CHECK_OK(ctx, sheaf_kernel_set_weight_version(g, 1, 3));
    CHECK_OK(ctx, sheaf_kernel_set_weight_version(g, 2, 3));
    double worst = 0;
    for (int rep = 0; rep < 2; rep++) {
      if (!CHECK_OK(ctx, sheaf_kernel_run(g, a, 4))) break;
      for (int n = 0; n < N; n++)
        for (int f = 0; f < F; f++) {
          double sg = 0, sh = 0;
          for (int d = 0; d < D; d++) sg += (double)x[n * D + d] * Wg[d * F + f], sh += (double)x[n * D + d] * Wh[d * F + f];
          double r = 1 / (1 + exp(-sg)) * tanh(sh), e = fabs(out[n * F + f] - r) / fmax(1.0, fabs(r));
          if (!(e <= worst)) worst = e;
        }
    }
    CHECK(worst < 2e-5);
    CHECK_EQ_INT(sh_kernel_pack_count(g, 1), 1);
    CHECK_EQ_INT(sh_kernel_pack_count(g, 2), 1);
  }
  sheaf_kernel_free(t);
  sheaf_kernel_free(g);
}

typedef struct thr {
  sheaf_ctx *ctx;
  sheaf_kernel *k;
  const float *A, *B;
  double worst;
} thr;

static void *thr_main(void *p) {
  thr *t = p;
  for (int i = 0; i < 40; i++) {
    double e = run_mm(t->ctx, t->k, t->A, t->B, 31, 24, 50);
    if (!(e <= t->worst)) t->worst = e;
  }
  return NULL;
}

/* Two threads run one kernel with different weights (same version): each
 * gets its own weight's product, whether it finds the kernel's packed copy
 * free, its own or the other's. */
TEST(kernel_weights_two_threads) {
  if (!th_have_jit_cc("kernel_weights_two_threads")) return;
  sheaf_ctx *ctx = th_ctx();
  sheaf_kernel *k = compile(ctx, "mm", avx2_or_scalar());
  if (!k) return;
  static float A[31 * 24], B1[24 * 50], B2[24 * 50];
  fill(A, 31 * 24, 10);
  fill(B1, 24 * 50, 11);
  fill(B2, 24 * 50, 12);
  REQUIRE_OK(ctx, sheaf_kernel_set_weight_version(k, 1, 1));
  thr t1 = {ctx, k, A, B1, 0}, t2 = {ctx, k, A, B2, 0};
  pthread_t p1, p2;
  REQUIRE(pthread_create(&p1, NULL, thr_main, &t1) == 0);
  if (CHECK(pthread_create(&p2, NULL, thr_main, &t2) == 0)) pthread_join(p2, NULL);
  pthread_join(p1, NULL);
  CHECK(t1.worst < 1e-5);
  CHECK(t2.worst < 1e-5);
  sheaf_kernel_free(k);
}

/* `sheaf compile --emit-c`'s contract (docs/CODEGEN.md, "Weights"): the
 * emitted entry point reads an inferred weight packed by the emitted
 * packer, into sheafk_NAME_packed_size_W(sizes) floats. */
TEST(kernel_weights_emitted_c_packs_with_its_packer) {
  if (!th_have_jit_cc("kernel_weights_emitted_c_packs_with_its_packer")) return;
  sheaf_ctx *ctx = th_ctx();
  static const char MMS[] = "kernel mm(A: f32[M, K], B: f32[K, N]) -> f32[M, N] { C(m, n) +=! A(m, k) * B(k, n) }\n";
  sh_module m;
  if (!CHECK_OK(ctx, sh_kernel_source_compile(&m, ctx, "k.sf", MMS, strlen(MMS)))) return;
  const sh_kernel *const *ks;
  sh_buf c;
  sh_buf_init(&c, ctx);
  void *so = NULL;
  char err[4096];
  if (CHECK(sh_module_kernels(&m, &ks) == 1) && CHECK_OK(ctx, sh_lower_generate(ctx, ks[0], avx2_or_scalar(), &c, NULL, NULL))) {
    const char *src[1] = {sh_buf_cstr(&c)};
    if (!CHECK(lir_cc_build(th_tmp_path(""), "weights_aot", src, 1, avx2_or_scalar(), "-O2", 1, &so, err, sizeof err) == 0))
      printf("%s\n", err);
  }
  if (so) {
    sk_entry_fn fn;
    int64_t (*psize)(const int64_t *);
    void (*pack)(const int64_t *, const float *, int64_t, int, float *);
    void *p = dlsym(so, "sheafk_mm");
    memcpy(&fn, &p, sizeof p);
    p = dlsym(so, "sheafk_mm_packed_size_B");
    memcpy(&psize, &p, sizeof p);
    p = dlsym(so, "sheafk_mm_pack_B");
    memcpy(&pack, &p, sizeof p);
    CHECK(!dlsym(so, "sheafk_mm_pack_A"));
    if (CHECK(fn && psize && pack)) {
      enum { M = 13, K = 21, N = 37 };
      static float A[M * K], B[K * N], C[M * N];
      fill(A, M * K, 13);
      fill(B, K * N, 14);
      int64_t sizes[] = {M, K, N};
      size_t np = (size_t)psize(sizes);
      CHECK(np >= (size_t)K * N);
      float *Bp = malloc(sizeof(float) * np);
      sk_abi abi;
      sh_lir_abi_init(ctx, 1, &abi);
      if (CHECK(Bp)) {
        pack(sizes, B, N, 0, Bp);
        sk_arg args[3] = {{.data = A}, {.data = Bp}, {.data = C}};
        CHECK_EQ_INT(fn(&abi, sizes, args), 0);
        double worst = 0;
        for (int i = 0; i < M; i++)
          for (int j = 0; j < N; j++) {
            double r = 0;
            for (int q = 0; q < K; q++) r += (double)A[i * K + q] * B[q * N + j];
            double e = fabs(C[i * N + j] - r) / fmax(1.0, fabs(r));
            if (!(e <= worst)) worst = e;
          }
        CHECK(worst < 1e-5);
      }
      free(Bp);
    }
    dlclose(so);
  }
  sh_buf_free(&c);
  sh_module_free(&m);
}
