/*
 * test_codegen_rowfuse_gates.c — pointwise consumers of a GEMM that the
 * tile's store cannot hold (they read the product at other columns than
 * they store, or from two statements: the TreeLSTM cell's gates
 * z(n, i), z(n, i + H), ...) run per row block of the GEMM, the product
 * kept for one block per thread (sched_rowblock.c: sh_sched_row_consumer,
 * sched_default.c). Checked: the TreeLSTM cell (hidden 8) and seeded random
 * pointwise chains after a GEMM, every M of 1 .. 3·mr + 1 (and 40),
 * scalar and the host's vector level, 1 and 2 threads, against the
 * reference evaluator (kernel_ref.h); and that the default schedule does
 * fuse them (the product a per-task block) where it should.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/kernel_api.h"
#include "codegen/lir_int.h"
#include "codegen/lir_sched.h"
#include "codegen/lower.h"
#include "harness.h"
#include "lang/kernel_ref.h"

/* the linearized TreeLSTM's node (sheaf run --emit-kernels), hidden 8 */
static const char CELL[] =
    "kernel cell(x0: f32[N, 8], x1: f32[N, 8], x2: f32[N, 16], p3: f32[16, 40], p4: f32[40])\n"
    "    -> (o0: f32[N, 8], o1: f32[N, 8]) {\n"
    "  t7(n, i) +=! x2(n, r) * p3(r, i) where i in 0..40, r in 0..16\n"
    "  t8(n, i) = t7(n, i) + p4(i) where i in 0..40\n"
    "  t10(n, i) = sigmoid(t8(n, i)) where i in 0..8\n"
    "  t12(n, i) = sigmoid(t8(n, i + 8)) where i in 0..8\n"
    "  t14(n, i) = sigmoid(t8(n, i + 16)) where i in 0..8\n"
    "  t16(n, i) = sigmoid(t8(n, i + 24)) where i in 0..8\n"
    "  t18(n, i) = tanh(t8(n, i + 32)) where i in 0..8\n"
    "  t23(n, i) = t10(n, i) * t18(n, i) + t12(n, i) * x0(n, i) + t14(n, i) * x1(n, i) where i in 0..8\n"
    "  o0(n, i) = t16(n, i) * tanh(t23(n, i)) where i in 0..8\n"
    "  o1(n, i) = t23(n, i) where i in 0..8\n}\n";

/* Whether the default schedule at isa makes the product `prod` of k a
 * per-task block (the consumer fused per row block). */
static bool fused(sheaf_ctx *ctx, const sh_kernel *k, sheaf_isa isa, const char *prod) {
  sh_lir_kernel *L = NULL;
  sh_lower_info info;
  memset(&info, 0, sizeof info);
  bool r = false;
  if (CHECK_OK(ctx, sh_lower_kernel(ctx, k, "fk", &L, &info)) && CHECK_OK(ctx, sh_sched_default(L, isa))) {
    sh_lir_buf b = sh_lir_find_buffer(L, prod);
    r = b >= 0 && L->bufs[b].per_task;
  }
  sh_lir_free(L);
  sh_lower_info_free(ctx, &info);
  return r;
}

/* Runs K at M rows (inputs with dimension 0 = the kernel's N get M rows;
 * the others their declared extents) and compares every output with the
 * reference; seeded inputs in [-1, 1). */
static bool check_rows(sheaf_ctx *ctx, sheaf_kernel *K, int64_t M, const char *what) {
  const sh_kernel *k = sh_kernel_of(K);
  int n_in = k->n_inputs, n_out = k->n_outputs;
  sheaf_kernel_arg a[16];
  sh_kref_arg in[16];
  int64_t shapes[16][2];
  float *bufs[16] = {0}, *want[8] = {0};
  sh_kref_out ro[8];
  uint64_t seed = 1000 + (uint64_t)M;
  bool ok = true;
  for (int i = 0; i < n_in; i++) {
    const sh_ktensor *t = &k->tensors[i];
    int64_t n = 1;
    for (int d = 0; d < t->rank; d++) {
      const sh_kaff *f = &t->dims[d].aff;
      shapes[i][d] = f->n == 0 ? f->c : M; /* a constant extent, else the row size */
      n *= shapes[i][d];
    }
    bufs[i] = malloc(sizeof(float) * (size_t)n);
    for (int64_t q = 0; q < n; q++) bufs[i][q] = th_frand(&seed);
    a[i] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, bufs[i], (size_t)n, t->rank, shapes[i]};
    in[i] = (sh_kref_arg){bufs[i], (size_t)n, t->rank, shapes[i]};
  }
  for (int r = 0; r < n_out && ok; r++) {
    size_t n;
    ok = CHECK_OK(ctx, sheaf_kernel_output_numel(K, a, n_in, r, &n));
    bufs[n_in + r] = malloc(sizeof(float) * (n + 1));
    want[r] = malloc(sizeof(float) * (n + 1));
    for (size_t q = 0; q < n; q++) bufs[n_in + r][q] = NAN;
    a[n_in + r] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, bufs[n_in + r], n, 0, NULL};
    ro[r] = (sh_kref_out){want[r], n};
  }
  if (ok) ok = CHECK_OK(ctx, sh_kernel_ref_run(ctx, k, in, n_in, ro, n_out));
  if (ok) ok = CHECK_OK(ctx, sheaf_kernel_run(K, a, n_in + n_out));
  for (int r = 0; r < n_out && ok; r++)
    for (size_t q = 0; q < ro[r].numel; q++) {
      float g = bufs[n_in + r][q], w = want[r][q];
      if (!(fabsf(g - w) <= 1e-5f * (1 + fabsf(w)))) {
        ok = th_fail(__FILE__, __LINE__, "%s: M %lld output %d element %zu: %g, want %g", what, (long long)M, r, q,
                     (double)g, (double)w);
        break;
      }
    }
  for (int i = 0; i < n_in + n_out; i++) free(bufs[i]);
  for (int r = 0; r < n_out; r++) free(want[r]);
  return ok;
}

/* src at every M of 1 .. 3·mr + 1 and 40, each ISA up to the host's, 1 and
 * 2 threads; *was_fused: the vector level fused the product `prod`. */
static void every_isa(const char *src, const char *name, const char *prod, bool *was_fused) {
  sheaf_isa host = sheaf_cpu_isa();
  sheaf_isa isas[3] = {SHEAF_ISA_SCALAR, SHEAF_ISA_AVX2, SHEAF_ISA_AVX512};
  int n_isa = host == SHEAF_ISA_AVX512 ? 3 : host == SHEAF_ISA_AVX2 ? 2 : 1;
  *was_fused = false;
  for (int threads = 1; threads <= 2; threads++)
    for (int v = 0; v < n_isa; v++) {
      sheaf_ctx *ctx;
      REQUIRE(sheaf_ctx_create(&(sheaf_ctx_options){.threads = threads}, &ctx, NULL, 0) == SHEAF_OK);
      sheaf_kernel *K = NULL;
      /* eager: th_cache_dir (harness.h) */
      sh_kernel_opts o = {.isa_set = true, .isa = isas[v], .eager = true,
                          .cache_dir = th_cache_dir("rowfuse_gates")};
      if (CHECK_OK(ctx, sh_kernel_compile_opts(ctx, src, strlen(src), name, &o, &K))) {
        if (threads == 1 && isas[v] != SHEAF_ISA_SCALAR) *was_fused |= fused(ctx, sh_kernel_of(K), isas[v], prod);
        int mr = isas[v] == SHEAF_ISA_AVX512 ? 12 : isas[v] == SHEAF_ISA_AVX2 ? 6 : 4;
        char what[200];
        snprintf(what, sizeof what, "%s at %s, %d threads", name, sheaf_isa_name(isas[v]), threads);
        for (int64_t M = 1; M <= 3 * mr + 1; M++)
          if (!check_rows(ctx, K, M, what)) break;
        check_rows(ctx, K, 40, what);
      } else {
        printf("%s\n", src);
      }
      sheaf_kernel_free(K);
      sheaf_ctx_free(ctx);
    }
}

TEST(codegen_rowfuse_gates_tree_lstm_cell) {
  if (!th_have_jit_cc("codegen_rowfuse_gates_tree_lstm_cell")) return;
  bool f;
  every_isa(CELL, "cell", "t7", &f);
  if (sheaf_cpu_isa() != SHEAF_ISA_SCALAR) CHECK(f); /* the gates per row block of the GEMM */
}

/* A random pointwise chain after t(n, i) +=! x(n, r)·W(r, i) over G groups
 * of F columns: each statement a unary or binary function of earlier
 * values, the product read at a random group (t(n, i + g·F)) or x2(n, i),
 * two or three outputs. */
static void gen_chain(uint64_t seed, char *src, size_t cap) {
  static const char *un[] = {"tanh", "sigmoid", "relu", "exp", "abs", ""};
  static const char *bin[] = {"+", "-", "*"};
  int G = 2 + (int)(seed % 3), F = 3 + (int)((seed >> 3) % 11), R = 5 + (int)((seed >> 7) % 7);
  int n_stmt = 3 + (int)((seed >> 11) % 4);
  size_t p = (size_t)snprintf(src, cap,
                              "kernel chain(x: f32[N, %d], x2: f32[N, %d], W: f32[%d, %d], b: f32[%d]) -> "
                              "(o0: f32[N, %d], o1: f32[N, %d]) {\n"
                              "  t(n, i) +=! x(n, r) * W(r, i) where i in 0..%d, r in 0..%d\n",
                              R, F, R, G * F, G * F, F, F, G * F, R);
  uint64_t s = seed * 2654435761u + 1;
  for (int q = 0; q < n_stmt && p < cap; q++) {
    char opd[2][64];
    for (int side = 0; side < 2; side++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      int pick = (int)((s >> 33) % (unsigned)(q + 2));
      int g = (int)((s >> 40) % (unsigned)G);
      if (pick == 0) snprintf(opd[side], sizeof opd[side], "(t(n, i + %d) + b(i + %d))", g * F, g * F);
      else if (pick == 1) snprintf(opd[side], sizeof opd[side], "x2(n, i)");
      else snprintf(opd[side], sizeof opd[side], "u%d(n, i)", pick - 2);
    }
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const char *f = un[(s >> 33) % SH_ARRAY_LEN(un)], *o = bin[(s >> 45) % SH_ARRAY_LEN(bin)];
    if (!strcmp(f, "exp")) f = "tanh"; /* bounded: a chain of exps overflows */
    p += (size_t)snprintf(src + p, cap - p, "  u%d(n, i) = %s(%s %s %s) where i in 0..%d\n", q, f, opd[0], o,
                          opd[1], F);
  }
  snprintf(src + p, cap - p,
           "  o0(n, i) = u%d(n, i) where i in 0..%d\n  o1(n, i) = u%d(n, i) * t(n, i + %d) where i in 0..%d\n}\n",
           n_stmt - 1, F, n_stmt / 2, (G - 1) * F, F);
}

TEST(codegen_rowfuse_gates_random_chains) {
  if (!th_have_jit_cc("codegen_rowfuse_gates_random_chains")) return;
  int n = getenv("SHEAF_ROWFUSE_SEEDS") ? atoi(getenv("SHEAF_ROWFUSE_SEEDS")) : 4, n_fused = 0;
  for (int s = 0; s < n; s++) {
    char src[4096];
    gen_chain((uint64_t)s + 1, src, sizeof src);
    bool f;
    every_isa(src, "chain", "t", &f);
    n_fused += f;
  }
  /* every chain reads t at another group than it stores (o1 at the last
   * group), so the vector levels fuse each one */
  if (sheaf_cpu_isa() != SHEAF_ISA_SCALAR) CHECK_EQ_INT(n_fused, n);
}
