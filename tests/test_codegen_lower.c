/*
 * test_codegen_lower.c — checked kernels through the whole pipeline (lower,
 * default schedule, C emission, JIT, the public sheaf_kernel_* API) against
 * the scalar reference evaluator (src/lang/kernel_ref.h): every kernel of
 * the front end's test set, at sizes below, at, above and at multiples of
 * the tiles (1, 7, 8, 9, 16, 17, 63, 64, 65: all sizes equal, then mixed),
 * ragged lengths 0, 1 and 17, at the scalar and AVX2 levels (AVX2 where the
 * host has it). Also: a second compile is a cache hit (no compiler run),
 * API errors, and `sheaf compile --emit-c` output compiling with `cc -c`.
 * Skipped with a note when no C compiler exists.
 *
 * Tolerance: 2e-5 · max(1, |ref|) (f32 against the double reference; the
 * vector exp / tanh / GELU are a few ulp from libm).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/jit.h"
#include "codegen/kernel_api.h"
#include "codegen/lir_emit.h"
#include "codegen/lower.h"
#include "harness.h"
#include "lang/kernel_ref.h"
#include "lang/parser.h"

static const char *const KERNELS[] = {
    "kernel ffn(x: f32[N, D], W: f32[D, F], b: f32[F]) -> f32[N, F] {\n"
    "  y(n, f) +=! x(n, d) * W(d, f)\n"
    "  out(n, f) = gelu(y(n, f) + b(f))\n"
    "}\n",
    "kernel matmul(A: f32[M, K], B: f32[K, N]) -> f32[M, N] {\n"
    "  C(m, n) +=! A(m, k) * B(k, n)\n"
    "}\n",
    "kernel row_softmax(x: f32[N, C]) -> f32[N, C] {\n"
    "  m(n) max=! x(n, c)\n"
    "  e(n, c) = exp(x(n, c) - m(n))\n"
    "  s(n) +=! e(n, c)\n"
    "  out(n, c) = e(n, c) / s(n)\n"
    "}\n",
    "kernel layernorm(x: f32[N, D], g: f32[D], b: f32[D]) -> f32[N, D] {\n"
    "  mu(n) +=! x(n, d) / D\n"
    "  c(n, d) = x(n, d) - mu(n)\n"
    "  var(n) +=! c(n, d) * c(n, d) / D\n"
    "  out(n, d) = c(n, d) * rsqrt(var(n) + 1e-5) * g(d) + b(d)\n"
    "}\n",
    "kernel gated(x: f32[N, D], Wg: f32[D, H], Wh: f32[D, H]) -> f32[N, H] {\n"
    "  g(n, h) +=! x(n, d) * Wg(d, h); t(n, h) +=! x(n, d) * Wh(d, h)\n"
    "  out(n, h) = sigmoid(g(n, h)) * tanh(t(n, h))\n"
    "}\n",
    "kernel attn(L: i32[B], q: f32[B, L(b), D], k: f32[B, L(b), D], v: f32[B, L(b), D])\n"
    "    -> f32[B, L(b), D] {\n"
    "  s(b, i, j) +=! q(b, i, d) * k(b, j, d) / sqrt(D)\n"
    "  m(b, i) max=! s(b, i, j)\n"
    "  e(b, i, j) = exp(s(b, i, j) - m(b, i))\n"
    "  z(b, i) +=! e(b, i, j)\n"
    "  o(b, i, d) +=! e(b, i, j) * v(b, j, d)\n"
    "  out(b, i, d) = o(b, i, d) / z(b, i)\n"
    "}\n",
    "kernel misc(L: i32[B], x: f32[N], r: f32[B, L(b)]) -> (d: f32[N - 1], c: f32[N, N], mean: f32[B]) {\n"
    "  d(i) = x(i + 1) - x(i) where i in 0..N - 1\n"
    "  c(i, j) = where(j <= i, x(i) * x(0), -1e30)\n"
    "  c(i, j) += i + 0.5 * j\n"
    "  t(b) +=! r(b, l)\n"
    "  mean(b) = t(b) / max(float(L(b)), 1)\n"
    "}\n",
    "kernel total(L: i32[B], x: f32[B, L(b), D]) -> f32[D] {\n"
    "  t(d) +=! x(b, l, d)\n"
    "}\n",
    "size D = 4\n"
    "kernel proj(x: f32[N, D], w: f32[D]) -> f32[N] { y(n) +=! x(n, d) * w(d) / D }\n",
    "kernel d2(x: f32[N]) -> f32[N - 2] { y(i) = x(i + 2) - x(i) where i in 0..N - 2 }\n",
    "kernel ops(x: f32[N], y: f32[N]) -> f32[N] {\n"
    "  o(i) = -x(i) + log(abs(x(i)) + 1) + relu(x(i)) + sqrt(abs(y(i))) + softplus(x(i)) + erf(y(i))\n"
    "  o(i) += pow(abs(x(i)) + 0.5, y(i)) + min(x(i), y(i)) * (x(i) < y(i)) + (x(i) >= y(i))\n"
    "  o(i) *= 1 + (x(i) != y(i)) + (x(i) == x(i)) + (x(i) > 0) + (y(i) <= 0)\n"
    "  p(i) min=! x(j) * y(i)\n"
    "  q(i) *=! 1 + 0.01 * x(j) + 0 * y(i)\n"
    "  out(i) = o(i) + p(i) + q(i) + i + N\n"
    "}\n",
    "kernel dot(x: f32[N], y: f32[N]) -> f32[] { s() +=! x(i) * y(i) }\n",
    /* a GEMM whose B is read elsewhere (not a weight: not packed, its
     * column tail guarded lane by lane) and one with A read transposed (the
     * guarded tile's clamped row index is A's second) */
    "kernel nbw(A: f32[M, K], B: f32[K, N]) -> (C: f32[M, N], S: f32[K, N]) {\n"
    "  C(m, n) +=! A(m, k) * B(k, n)\n"
    "  S(k, n) = B(k, n) * 2.0\n"
    "}\n",
    "kernel mmt(A: f32[K, M], B: f32[K, N]) -> f32[M, N] { C(m, n) +=! A(k, m) * B(k, n) }\n",
    "kernel scale(a: f32[], x: f32[N]) -> f32[N] { o(i) = a() * x(i) }\n",
};

static const int SIZES[] = {1, 7, 8, 9, 16, 17, 63, 64, 65};
static const int LENS[] = {0, 1, 17};

/* Whether a compiler exists (prints a note once when not). */
static const char *kernel_name(const char *src) {
  static char name[64];
  const char *p = strstr(src, "kernel ") + 7;
  size_t n = strcspn(p, "(");
  snprintf(name, sizeof name, "%.*s", (int)n, p);
  return name;
}

/* Inputs of k for the given sizes: shapes, lengths (cycling LENS from
 * `phase`), random values. Returns false when the inputs cannot be made
 * (a dimension below 0). */
typedef struct case_data {
  int n;
  sheaf_kernel_arg a[16];
  int64_t shapes[16][8];
  void *data[16];
} case_data;

static bool make_case(const sh_kernel *k, const int64_t *sizes, int phase, uint64_t *rng, case_data *c) {
  memset(c, 0, sizeof *c);
  c->n = k->n_inputs;
  const void *in_data[16] = {0};
  /* length tensors first: every i32 input is [B]-shaped here */
  for (int i = 0; i < k->n_inputs; i++) {
    const sh_ktensor *t = &k->tensors[i];
    int64_t numel = 1;
    for (int d = 0; d < t->rank; d++) {
      int64_t e = t->dims[d].kind == SH_KEXT_AFFINE ? sh_lower_aff(&t->dims[d].aff, sizes) : -1;
      c->shapes[i][d] = e;
      if (e >= 0) numel *= e;
    }
    if (t->dtype != SH_KDTYPE_I32) continue;
    int32_t *L = malloc(sizeof(int32_t) * (size_t)(numel + 1));
    for (int64_t j = 0; j < numel; j++) L[j] = LENS[(j + phase) % 3];
    c->data[i] = L, in_data[i] = L;
    c->a[i] = (sheaf_kernel_arg){SHEAF_KERNEL_I32, L, (size_t)numel, t->rank, c->shapes[i]};
  }
  for (int i = 0; i < k->n_inputs; i++) {
    const sh_ktensor *t = &k->tensors[i];
    if (t->dtype == SH_KDTYPE_I32) continue;
    for (int d = 0; d < t->rank; d++)
      if (t->dims[d].kind == SH_KEXT_AFFINE && c->shapes[i][d] < 0) return false;
    size_t numel;
    if (sh_lower_numel(th_ctx(), k, i, sizes, in_data, &numel)) return false;
    float *x = th_frand_fill(rng, (int64_t)numel);
    c->data[i] = x;
    c->a[i] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, x, numel, t->rank, c->shapes[i]};
  }
  return true;
}

static void free_case(case_data *c) {
  for (int i = 0; i < 16; i++) free(c->data[i]);
}

/* Runs kernel K (compiled) and the reference on one case; compares. */
static void check_case(sheaf_ctx *ctx, sheaf_kernel *K, const sh_kernel *k, case_data *c, const char *what) {
  int n_in = k->n_inputs, n_out = k->n_outputs;
  sh_kref_arg in[16];
  for (int i = 0; i < n_in; i++)
    in[i] = (sh_kref_arg){c->a[i].data, c->a[i].numel, c->a[i].rank, c->a[i].shape};
  sh_kref_out ro[8] = {{0}};
  sheaf_kernel_arg args[24];
  memcpy(args, c->a, sizeof(sheaf_kernel_arg) * (size_t)n_in);
  float *got[8] = {0}, *want[8] = {0};
  size_t numel[8] = {0};
  sheaf_status rst = SHEAF_OK;
  for (int r = 0; r < n_out && !rst; r++) {
    rst = sheaf_kernel_output_numel(K, c->a, n_in, r, &numel[r]);
    if (rst) break;
    got[r] = malloc(sizeof(float) * (numel[r] + 1));
    want[r] = malloc(sizeof(float) * (numel[r] + 1));
    for (size_t j = 0; j < numel[r]; j++) got[r][j] = NAN;
    ro[r] = (sh_kref_out){want[r], numel[r]};
    args[n_in + r] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, got[r], numel[r], 0, NULL};
  }
  if (!rst) rst = sh_kernel_ref_run(ctx, k, in, n_in, ro, n_out);
  if (rst) {
    /* the reference refuses these inputs: so must the generated kernel */
    if (n_out && got[0]) CHECK(sheaf_kernel_run(K, args, n_in + n_out) != SHEAF_OK);
  } else if (CHECK_OK(ctx, sheaf_kernel_run(K, args, n_in + n_out))) {
    for (int r = 0; r < n_out; r++) {
      int bad = 0;
      for (size_t j = 0; j < numel[r] && bad < 3; j++) {
        double w = want[r][j], g = got[r][j];
        double tol = 2e-5 * fmax(1.0, fabs(w));
        if (!(fabs(g - w) <= tol) && !(isnan(w) && isnan(g)) && !(isinf(w) && g == w)) {
          th_fail(__FILE__, __LINE__, "%s: output %d [%zu] = %.9g, reference %.9g", what, r, j, g, w);
          bad++;
        }
      }
    }
  }
  for (int r = 0; r < n_out; r++) free(got[r]), free(want[r]);
  sheaf_ctx_clear_error(ctx);
}

/* sched: the default schedule's knobs (NULL: the defaults). */
static void run_kernel_at(const char *src, sheaf_isa isa, const sh_sched_opts *sched) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_kernel *K = NULL;
  const char *name = kernel_name(src);
  sh_kernel_opts o = {.isa_set = true, .isa = isa, .eager = true, .cache_dir = th_cache_dir("lower-cache"),
                     /* eager: th_cache_dir (harness.h) */
                     .sched = sched};
  if (!CHECK_OK(ctx, sh_kernel_compile_opts(ctx, src, strlen(src), name, &o, &K))) {
    printf("  %s at %s\n", name, sheaf_isa_name(isa));
    return;
  }
  const sh_kernel *k = sh_kernel_of(K);
  uint64_t rng = 17;
  int n_sz = k->n_sizes;
  for (int mode = 0; mode < 2; mode++)
    for (size_t t = 0; t < SH_ARRAY_LEN(SIZES); t++) {
      int64_t sizes[16];
      for (int i = 0; i < n_sz; i++)
        sizes[i] = mode == 0 ? SIZES[t] : SIZES[(t + 3 * (size_t)i + 1) % SH_ARRAY_LEN(SIZES)];
      case_data c;
      char what[200];
      snprintf(what, sizeof what, "%s at %s, sizes %s #%zu, prefetch %d", name, sheaf_isa_name(isa),
               mode ? "mixed" : "equal", t, sched ? (sched->no_prefetch ? -1 : sched->prefetch) : 0);
      if (make_case(k, sizes, (int)t, &rng, &c)) check_case(ctx, K, k, &c, what);
      free_case(&c);
    }
  sheaf_kernel_free(K);
}

static void run_all_at(sheaf_isa isa, const char *test) {
  if (!th_have_jit_cc(test)) return;
  if (isa > sheaf_cpu_isa_host()) {
    printf("note: %s skipped: the host has no %s\n", test, sheaf_isa_name(isa));
    return;
  }
  for (size_t i = 0; i < SH_ARRAY_LEN(KERNELS); i++) run_kernel_at(KERNELS[i], isa, NULL);
}

TEST(codegen_lower_kernels_scalar) { run_all_at(SHEAF_ISA_SCALAR, "codegen_lower_kernels_scalar"); }
TEST(codegen_lower_kernels_avx2) { run_all_at(SHEAF_ISA_AVX2, "codegen_lower_kernels_avx2"); }

/* The GEMM-like kernels (ffn, matmul, gated: one tile and two sharing one)
 * with the B prefetch off (no_prefetch) and at distances 1, 5 and 64 (the gated unit's
 * shared tile has none by default), at the scalar level and the host's
 * vector level, against the reference. */
TEST(codegen_lower_kernels_prefetch) {
  if (!th_have_jit_cc("codegen_lower_kernels_prefetch")) return;
  static const int dists[] = {-1, 1, 5, 64};
  static const int gemms[] = {0, 1, 4};
  sheaf_isa isas[2] = {SHEAF_ISA_SCALAR, sheaf_cpu_isa_host() >= SHEAF_ISA_AVX2 ? SHEAF_ISA_AVX2 : SHEAF_ISA_SCALAR};
  for (int l = 0; l < 2; l++)
    for (size_t d = 0; d < SH_ARRAY_LEN(dists); d++)
      for (size_t i = 0; i < SH_ARRAY_LEN(gemms); i++)
        run_kernel_at(KERNELS[gemms[i]], isas[l],
                      &(sh_sched_opts){.prefetch = dists[d] > 0 ? dists[d] : 0, .no_prefetch = dists[d] < 0});
}

/* The same kernels with the remainder row tile asked for (rem_rows 2: the
 * gated unit's shared tile has none by default) and turned off (-1), at the
 * scalar level and the host's vector level, against the reference. */
TEST(codegen_lower_kernels_remainder) {
  if (!th_have_jit_cc("codegen_lower_kernels_remainder")) return;
  static const int rems[] = {-1, 2};
  static const int gemms[] = {0, 1, 4};
  sheaf_isa isas[2] = {SHEAF_ISA_SCALAR, sheaf_cpu_isa_host() >= SHEAF_ISA_AVX2 ? SHEAF_ISA_AVX2 : SHEAF_ISA_SCALAR};
  for (int l = 0; l < 2; l++)
    for (size_t r = 0; r < SH_ARRAY_LEN(rems); r++)
      for (size_t i = 0; i < SH_ARRAY_LEN(gemms); i++)
        run_kernel_at(KERNELS[gemms[i]], isas[l], &(sh_sched_opts){.rem_rows = rems[r]});
}

/* A second compile of the same kernel (a new sheaf_kernel, so a new JIT)
 * loads the cache entry: the compiler does not run. */
TEST(codegen_lower_cache_hit) {
  if (!th_have_jit_cc("codegen_lower_cache_hit")) return;
  sheaf_ctx *ctx = th_ctx();
  const char *src = KERNELS[1];
  sh_kernel_opts o = {.cache_dir = th_tmp_path("lower-cache-hit")};
  sheaf_kernel *a = NULL, *b = NULL;
  REQUIRE_OK(ctx, sh_kernel_compile_opts(ctx, src, strlen(src), "matmul", &o, &a));
  sh_jit_stats s;
  sh_kernel_jit_stats(a, &s);
  CHECK_EQ_INT((int)s.compiles, 1);
  CHECK_OK(ctx, sh_kernel_compile_opts(ctx, src, strlen(src), "matmul", &o, &b));
  sh_kernel_jit_stats(b, &s);
  CHECK_EQ_INT((int)s.compiles, 0);
  CHECK_EQ_INT((int)s.disk_hits, 1);
  sheaf_kernel_free(a);
  sheaf_kernel_free(b);
}

TEST(codegen_lower_api_errors) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_kernel *K = NULL;
  const char *src = KERNELS[1];
  CHECK_STATUS(ctx, sheaf_kernel_compile(ctx, NULL, 3, "matmul", &K), SHEAF_ERR_INVALID_ARG);
  CHECK_STATUS(ctx, sheaf_kernel_compile(ctx, src, strlen(src), "matmul", NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_STATUS(ctx, sheaf_kernel_compile(NULL, src, strlen(src), "matmul", &K), SHEAF_ERR_INVALID_ARG);
  const char *bad = "kernel f(x: f32[N]) -> f32[N] {\n  y(i) = x(j)\n}\n";
  CHECK(sheaf_kernel_compile(ctx, bad, strlen(bad), "f", &K) != SHEAF_OK);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "kernel:2:");
  CHECK(K == NULL);
  CHECK_EQ_INT(sheaf_kernel_run(NULL, NULL, 0), SHEAF_ERR_INVALID_ARG);
  sheaf_kernel_free(NULL);
  CHECK_EQ_INT(sheaf_kernel_n_inputs(NULL), 0);
  /* a missing compiler is a clear error, whatever the host has */
  sh_kernel_opts nocc = {.cache_dir = th_tmp_path("lower-nocc"), .cc = "/nonexistent/sheaf-no-cc"};
  CHECK_STATUS(ctx, sh_kernel_compile_opts(ctx, src, strlen(src), "matmul", &nocc, &K), SHEAF_ERR_NOT_FOUND);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "/nonexistent/sheaf-no-cc");
  CHECK(K == NULL);
  /* a kernel the code generator cannot express yet */
  const char *r1 = "kernel r1(L: i32[A], x: f32[B, A, L(a)]) -> f32[B] { y(b) +=! x(b, a, l) }\n";
  CHECK_STATUS(ctx, sh_kernel_compile_opts(ctx, r1, strlen(r1), "r1", &nocc, &K), SHEAF_ERR_UNSUPPORTED);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "ragged dimensions of dimension 0 only");
  if (!th_have_jit_cc("codegen_lower_api_errors (run)")) return;
  /* eager: th_cache_dir (harness.h) */
  sh_kernel_opts o = {.eager = true, .cache_dir = th_cache_dir("lower-cache")};
  CHECK_STATUS(ctx, sh_kernel_compile_opts(ctx, src, strlen(src), "nope", &o, &K), SHEAF_ERR_NOT_FOUND);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "no kernel 'nope'");
  REQUIRE_OK(ctx, sh_kernel_compile_opts(ctx, src, strlen(src), NULL, &o, &K));
  CHECK_EQ_INT(sheaf_kernel_n_inputs(K), 2);
  CHECK_EQ_INT(sheaf_kernel_n_outputs(K), 1);
  float A[6] = {1, 2, 3, 4, 5, 6}, B[3] = {1, 1, 1}, C[2];
  int64_t sa[] = {2, 3}, sb[] = {3, 1}, sbad[] = {2, 1};
  sheaf_kernel_arg args[] = {{SHEAF_KERNEL_F32, A, 6, 2, sa}, {SHEAF_KERNEL_F32, B, 3, 2, sb},
                             {SHEAF_KERNEL_F32, C, 2, 0, NULL}};
  CHECK_STATUS(ctx, sheaf_kernel_run(K, args, 2), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "kernel 'matmul' takes 3 arguments (2 inputs, then 1 output), not 2");
  CHECK_STATUS(ctx, sheaf_kernel_run(K, NULL, 3), SHEAF_ERR_INVALID_ARG);
  args[1].shape = sbad;
  CHECK_STATUS(ctx, sheaf_kernel_run(K, args, 3), SHEAF_ERR_SHAPE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "dimension 0 of input 'B' is 2, but it is declared K = 3");
  args[1].shape = sb;
  args[2].numel = 3;
  CHECK_STATUS(ctx, sheaf_kernel_run(K, args, 3), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "output 'C' (argument 2) has 3 elements, but these inputs make 2");
  args[2].numel = 2;
  args[0].dtype = SHEAF_KERNEL_I32;
  CHECK_STATUS(ctx, sheaf_kernel_run(K, args, 3), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "argument 0 ('A') is i32, but the kernel declares f32");
  args[0].dtype = SHEAF_KERNEL_F32;
  args[0].data = NULL;
  CHECK_STATUS(ctx, sheaf_kernel_run(K, args, 3), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "NULL data pointer");
  args[0].data = A;
  if (CHECK_OK(ctx, sheaf_kernel_run(K, args, 3))) {
    CHECK_NEAR(C[0], 6, 1e-6);
    CHECK_NEAR(C[1], 15, 1e-6);
  }
  sheaf_kernel_free(K);
}

/* `sheaf compile FILE --emit-c DIR` writes C that compiles on its own. */
TEST(codegen_lower_cli_emit_c) {
  const char *bin = th_sheaf_bin();
  if (!bin) {
    printf("note: codegen_lower_cli_emit_c skipped: SHEAF_BIN not set\n");
    return;
  }
  if (!th_have_jit_cc("codegen_lower_cli_emit_c")) return;
  sh_buf all;
  sh_buf_init(&all, th_ctx());
  for (size_t i = 0; i < SH_ARRAY_LEN(KERNELS); i++)
    if (!strstr(KERNELS[i], "size D")) sh_buf_puts(&all, KERNELS[i]);
  const char *file = th_write_tmp("lib.sf", sh_buf_cstr(&all), all.len);
  sh_buf_free(&all);
  const char *dir = th_tmp_path("emit-c");
  char cmd[2048], out[65536]; /* --emit-ir prints every kernel (a GEMM: one tile copy per row count) */
  snprintf(cmd, sizeof cmd, "%s compile '%s' --emit-c '%s'", bin, file, dir); /* bin may be "qemu-... sheaf" */
  REQUIRE_EQ_INT(th_run(cmd, out, sizeof out), 0);
  CHECK_CONTAINS(out, "attn.c");
  static const char *const names[] = {"ffn", "matmul", "row_softmax", "layernorm", "gated", "attn", "misc"};
  for (size_t i = 0; i < SH_ARRAY_LEN(names); i++) {
    snprintf(cmd, sizeof cmd, "cd '%s' && cc -std=c11 -O2 -Wall -Werror -Wno-psabi -c %s.c -o %s.o", dir,
             names[i], names[i]);
    int rc = th_run(cmd, out, sizeof out);
    if (!CHECK_EQ_INT(rc, 0)) printf("%s\n", out);
  }
  snprintf(cmd, sizeof cmd, "%s compile '%s' --emit-ir", bin, file);
  REQUIRE_EQ_INT(th_run(cmd, out, sizeof out), 0);
  CHECK_CONTAINS(out, "kernel sheafk_matmul(M, K, N)");
  snprintf(cmd, sizeof cmd, "%s compile '%s' 2>&1", bin, th_write_tmp("bad.sf", "kernel f(x: f32[N]) -> f32[N] { y(i) = z(i) }\n", 46));
  CHECK(th_run(cmd, out, sizeof out) != 0);
  CHECK_CONTAINS(out, "bad.sf:1:");
}

/* Row fusion: the softmax's three statements share one row loop (one
 * parallel nest); the GEMM-like statement of the FFN stays alone (its own
 * register-tiled nest, the GELU consumer fused into its store); the
 * attention is lowered to one nest per statement (its reductions over two
 * free indices count as GEMM-like), which the default schedule fuses over
 * their sequence loop (fuse_siblings): one parallel nest. */
TEST(codegen_lower_row_fusion) {
  sheaf_ctx *ctx = th_ctx();
  static const struct {
    int src, parallel;
  } cases[] = {{2, 1}, {3, 1}, {0, 1}, {5, 1}};
  for (size_t i = 0; i < SH_ARRAY_LEN(cases); i++) {
    const char *src = KERNELS[cases[i].src];
    sh_module m;
    if (CHECK_OK(ctx, sh_kernel_source_compile(&m, ctx, "k.sf", src, strlen(src)))) {
      const sh_kernel *const *ks;
      REQUIRE(sh_module_kernels(&m, &ks) == 1);
      sh_lir_kernel *L = NULL;
      if (CHECK_OK(ctx, sh_lower_generate(ctx, ks[0], SHEAF_ISA_AVX2, NULL, &L, NULL))) {
        sh_buf b;
        sh_buf_init(&b, ctx);
        sh_lir_print(L, &b);
        int n = 0;
        for (const char *p = sh_buf_cstr(&b); (p = strstr(p, " parallel:")) != NULL; p++) n++;
        if (!CHECK_EQ_INT(n, cases[i].parallel)) printf("%s\n", sh_buf_cstr(&b));
        sh_buf_free(&b);
        sh_lir_free(L);
      }
    }
    sh_module_free(&m);
  }
}

/* The gated unit's two GEMMs share one register tile (half the single
 * tile's rows, both products per k: x's element loaded once), and g, read
 * only by the fused epilogue, lives in registers (never stored). Its
 * results against the reference: codegen_lower_kernels_*. */
TEST(codegen_lower_gated_one_tile) {
  sheaf_ctx *ctx = th_ctx();
  static const struct {
    sheaf_isa isa;
    const char *g, *h;
  } lv[] = {{SHEAF_ISA_AVX2, "alloc g_acc[3, 2, 8]:\n", "alloc t_acc[3, 2, 8]:\n"},
            {SHEAF_ISA_AVX512, "alloc g_acc[6, 2, 16]:\n", "alloc t_acc[6, 2, 16]:\n"},
            {SHEAF_ISA_SCALAR, "alloc g_acc[2, 4]:\n", "alloc t_acc[2, 4]:\n"}};
  const char *src = KERNELS[4];
  sh_module m;
  REQUIRE_OK(ctx, sh_kernel_source_compile(&m, ctx, "k.sf", src, strlen(src)));
  const sh_kernel *const *ks;
  REQUIRE(sh_module_kernels(&m, &ks) == 1);
  for (size_t i = 0; i < SH_ARRAY_LEN(lv); i++) {
    sh_lir_kernel *L = NULL;
    if (!CHECK_OK(ctx, sh_lower_generate(ctx, ks[0], lv[i].isa, NULL, &L, NULL))) continue;
    sh_buf b;
    sh_buf_init(&b, ctx);
    sh_lir_print(L, &b);
    const char *t = sh_buf_cstr(&b);
    CHECK_CONTAINS(t, lv[i].g);
    CHECK_CONTAINS(t, lv[i].h);
    CHECK_CONTAINS(t, "buffer g f32[N, H] temp inlined\n");
    CHECK_CONTAINS(t, "= sigmoid(g_acc[");
    int n = 0;
    for (const char *p = t; (p = strstr(p, " parallel:")) != NULL; p++) n++;
    CHECK_EQ_INT(n, 1);
    /* the shared tile (AVX2: 12 accumulators + 4 panel vectors + a
     * broadcast > 16 registers) keeps plain loads and a rolled k loop
     * (emit_c.c: unrolled, it ran at half speed); a single GEMM gets both */
    sh_buf c;
    sh_buf_init(&c, ctx);
    if (i == 0 && CHECK_OK(ctx, sh_lir_emit_c(L, &c))) {
      CHECK(strstr(sh_buf_cstr(&c), "sk_ldp") == NULL);
      CHECK(strstr(sh_buf_cstr(&c), "#pragma GCC unroll") == NULL);
      CHECK(strstr(sh_buf_cstr(&c), "sk_madd8(") != NULL);
    }
    sh_buf_free(&c);
    sh_buf_free(&b);
    sh_lir_free(L);
  }
  sh_module_free(&m);
}

/* The slow copy of an unswitched tile (the else of the whole-tile test)
 * calls the out-of-line vector math (sk_gelu_cold8, ...: docs/CODEGEN.md,
 * "C emission"); the whole tile keeps it inline. Results at sizes off the
 * tile are checked against the reference above. */
TEST(codegen_lower_slow_tile_math_out_of_line) {
  sheaf_ctx *ctx = th_ctx();
  static const struct {
    int src;
    const char *inl, *cold;
  } cases[] = {{0, "sk_gelu8(", "sk_gelu_cold8("}, {4, "sk_tanh8(", "sk_tanh_cold8("}};
  for (size_t i = 0; i < SH_ARRAY_LEN(cases); i++) {
    const char *src = KERNELS[cases[i].src];
    sh_module m;
    if (CHECK_OK(ctx, sh_kernel_source_compile(&m, ctx, "k.sf", src, strlen(src)))) {
      const sh_kernel *const *ks;
      REQUIRE(sh_module_kernels(&m, &ks) == 1);
      sh_buf c;
      sh_buf_init(&c, ctx);
      if (CHECK_OK(ctx, sh_lower_generate(ctx, ks[0], SHEAF_ISA_AVX2, &c, NULL, NULL))) {
        const char *t = sh_buf_cstr(&c), *els = strstr(t, "} else {");
        const char *inl = strstr(t, cases[i].inl), *cold = strstr(t, cases[i].cold);
        CHECK(els && inl && cold);
        if (els && inl && cold) {
          CHECK(inl < els);  /* the whole tile: inline */
          CHECK(cold > els); /* the slow copy: out of line */
        }
      }
      sh_buf_free(&c);
    }
    sh_module_free(&m);
  }
}
