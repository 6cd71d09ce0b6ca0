/*
 * test_codegen_rowblock.c — row-block fusion (src/codegen/sched_rowblock.c):
 * compute_at (a row nest moved into a producer's row-block loop) and
 * shrink (a temporary kept for one block, one copy per thread), on the
 * interpreter before and after against a double reference, at sizes below,
 * at, above and at multiples of the block and of the tile inside it; their
 * errors (the kernel unchanged); the parallel check on a per-task
 * temporary; and the default schedule's use of them in generated C
 * (log-softmax, layernorm and cross-entropy after a GEMM, several row
 * blocks, on 2 threads) against double references.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/kernel_api.h"
#include "codegen/lir_int.h"
#include "codegen/lir_sched.h"
#include "codegen/lower.h"
#include "harness.h"
#include "lang/ast.h"
#include "lang/kernel.h"
#include "lang/parser.h"

/* C = A·B (temporary); mx[i] = max_j C[i, j]; out[i, j] = C[i, j] - mx[i].
 * `cross`: the consumer reads C at row M - 1 - i (not its own row). */
static sh_lir_kernel *gemm_rowmax(sheaf_ctx *ctx, bool cross) {
  sh_lir_kernel *k;
  if (sh_lir_create(ctx, "grm", &k)) return NULL;
  sh_lir_expr M = sh_lir_sz(k, sh_lir_size(k, "M")), N = sh_lir_sz(k, sh_lir_size(k, "N")),
              K = sh_lir_sz(k, sh_lir_size(k, "K"));
  sh_lir_buf A = sh_lir_buffer(k, "A", SH_LIR_F32, SH_LIR_IN, 2, (sh_lir_expr[]){M, K});
  sh_lir_buf B = sh_lir_buffer(k, "B", SH_LIR_F32, SH_LIR_IN, 2, (sh_lir_expr[]){K, N});
  sh_lir_buf out = sh_lir_buffer(k, "out", SH_LIR_F32, SH_LIR_OUT, 2, (sh_lir_expr[]){M, N});
  sh_lir_buf C = sh_lir_buffer(k, "C", SH_LIR_F32, SH_LIR_TEMP, 2, (sh_lir_expr[]){M, N});
  sh_lir_buf mx = sh_lir_buffer(k, "mx", SH_LIR_F32, SH_LIR_TEMP, 1, &M);
  sh_lir_stmt i = sh_lir_loop(k, sh_lir_root(k), "i", M);
  sh_lir_stmt j = sh_lir_loop(k, i, "j", N);
  sh_lir_store2(k, j, C, sh_lir_lv(k, i), sh_lir_lv(k, j), sh_lir_flt(k, 0), SH_LIR_COMBINE_NONE);
  sh_lir_stmt kk = sh_lir_loop(k, j, "k", K);
  sh_lir_store2(k, kk, C, sh_lir_lv(k, i), sh_lir_lv(k, j),
                sh_lir_mul(k, sh_lir_load2(k, A, sh_lir_lv(k, i), sh_lir_lv(k, kk)),
                           sh_lir_load2(k, B, sh_lir_lv(k, kk), sh_lir_lv(k, j))),
                SH_LIR_COMBINE_ADD);
  sh_lir_stmt r = sh_lir_loop(k, sh_lir_root(k), "r", M);
  sh_lir_expr vr = sh_lir_lv(k, r);
  sh_lir_expr row = cross ? sh_lir_sub(k, sh_lir_sub(k, M, sh_lir_int(k, 1)), vr) : vr;
  sh_lir_store1(k, r, mx, vr, sh_lir_flt(k, -INFINITY), SH_LIR_COMBINE_NONE);
  sh_lir_stmt c1 = sh_lir_loop(k, r, "c", N);
  sh_lir_store1(k, c1, mx, vr, sh_lir_load2(k, C, row, sh_lir_lv(k, c1)), SH_LIR_COMBINE_MAX);
  sh_lir_stmt c2 = sh_lir_loop(k, r, "c2", N);
  sh_lir_store2(k, c2, out, vr, sh_lir_lv(k, c2),
                sh_lir_sub(k, sh_lir_load2(k, C, vr, sh_lir_lv(k, c2)), sh_lir_load1(k, mx, vr)),
                SH_LIR_COMBINE_NONE);
  if (sh_lir_status(k)) {
    sh_lir_free(k);
    return NULL;
  }
  return k;
}

static const char *text_of(const sh_lir_kernel *k) {
  static char t[65536];
  sh_buf b;
  sh_buf_init(&b, k->ctx);
  sh_lir_print(k, &b);
  snprintf(t, sizeof t, "%s", sh_buf_cstr(&b));
  sh_buf_free(&b);
  return t;
}

static double urand(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*s >> 11) / 9007199254740992.0 - 0.5;
}

/* The interpreter on every (M, N, K) against the double reference. */
static bool check_rowmax(sh_lir_kernel *k, const char *what) {
  static const int64_t Ms[] = {1, 3, 4, 5, 7, 8, 9, 12, 13}, Ns[] = {1, 3, 8, 17}, Ks[] = {1, 5};
  uint64_t seed = 11;
  bool ok = true;
  for (size_t a = 0; a < SH_ARRAY_LEN(Ms) && ok; a++)
    for (size_t b = 0; b < SH_ARRAY_LEN(Ns) && ok; b++)
      for (size_t c = 0; c < SH_ARRAY_LEN(Ks) && ok; c++) {
        int64_t M = Ms[a], N = Ns[b], K = Ks[c], sizes[3] = {M, N, K};
        float *A = malloc(sizeof(float) * (size_t)(M * K)), *B = malloc(sizeof(float) * (size_t)(K * N)),
              *o = malloc(sizeof(float) * (size_t)(M * N));
        double *C = malloc(sizeof(double) * (size_t)(M * N));
        for (int64_t q = 0; q < M * K; q++) A[q] = (float)urand(&seed);
        for (int64_t q = 0; q < K * N; q++) B[q] = (float)urand(&seed);
        for (int64_t q = 0; q < M * N; q++) o[q] = NAN;
        ok = CHECK_OK(k->ctx, sh_lir_run(k, sizes, (sh_lir_arg[]){{.data = A}, {.data = B}, {.data = o}}));
        for (int64_t i = 0; i < M && ok; i++) {
          double mx = -INFINITY;
          for (int64_t j = 0; j < N; j++) {
            double s = 0;
            for (int64_t q = 0; q < K; q++) s += (double)A[i * K + q] * B[q * N + j];
            C[i * N + j] = s;
            mx = fmax(mx, s);
          }
          for (int64_t j = 0; j < N && ok; j++)
            if (!(fabs(o[i * N + j] - (C[i * N + j] - mx)) <= 1e-5)) {
              th_fail(__FILE__, __LINE__, "%s: M=%lld N=%lld K=%lld out[%lld, %lld] = %g, want %g", what,
                      (long long)M, (long long)N, (long long)K, (long long)i, (long long)j, (double)o[i * N + j],
                      C[i * N + j] - mx);
              ok = false;
            }
        }
        free(A), free(B), free(o), free(C);
      }
  return ok;
}

TEST(codegen_rowblock_compute_at_shrink_interp) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k = gemm_rowmax(ctx, false);
  REQUIRE(k);
  REQUIRE(check_rowmax(k, "unscheduled"));
  /* the GEMM's rows in blocks of 4, each block in tiles of 2 rows */
  sh_lir_stmt io, ii, it, ti;
  REQUIRE_OK(ctx, sh_sched_split(k, sh_lir_find_loop(k, "i"), 4, SH_SCHED_TAIL_GUARD, &io, &ii, NULL));
  REQUIRE_OK(ctx, sh_sched_split(k, ii, 2, SH_SCHED_TAIL_GUARD, &it, &ti, NULL));
  sh_lir_stmt r = sh_lir_find_loop(k, "r"), inner;
  REQUIRE_OK(ctx, sh_sched_compute_at(k, r, io, 4, &inner));
  REQUIRE_OK(ctx, sh_lir_verify(k));
  CHECK_EQ_INT(sh_lir_body_len(k, sh_lir_root(k)), 1); /* one nest: the row blocks */
  CHECK_CONTAINS(text_of(k), "\n  for r_i in 0..4:\n    if i_o * 4 + r_i < M:\n"
                             "      mx[i_o * 4 + r_i] = -inf\n");
  CHECK_CONTAINS(text_of(k), "C[i_o * 4 + (i_i_o * 2 + i_i_i), j] += A[");
  CHECK(k->st[inner].parent == io);
  REQUIRE(check_rowmax(k, "compute_at"));
  /* C and mx keep one block each; the row-block loop over the pool */
  REQUIRE_OK(ctx, sh_sched_shrink(k, sh_lir_find_buffer(k, "C"), io));
  REQUIRE_OK(ctx, sh_sched_shrink(k, sh_lir_find_buffer(k, "mx"), io));
  CHECK_CONTAINS(text_of(k), "buffer C f32[4, N] temp per-task\n");
  CHECK_CONTAINS(text_of(k), "buffer mx f32[4] temp per-task\n");
  CHECK_CONTAINS(text_of(k), "C[i_i_o * 2 + i_i_i, j] += A[");
  CHECK_CONTAINS(text_of(k), "out[i_o * 4 + r_i, c2] = C[r_i, c2] - mx[r_i]\n");
  REQUIRE(check_rowmax(k, "shrink"));
  /* a loop inside the block would share the block's storage: refused */
  CHECK_STATUS(ctx, sh_sched_parallel(k, sh_lir_find_loop(k, "j")), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "C has one copy per thread and is accessed outside j");
  REQUIRE_OK(ctx, sh_sched_parallel(k, io));
  REQUIRE(check_rowmax(k, "shrink, parallel"));
  /* shrunk already */
  CHECK_STATUS(ctx, sh_sched_shrink(k, sh_lir_find_buffer(k, "C"), io), SHEAF_ERR_INVALID_ARG);
  sh_lir_free(k);
}

TEST(codegen_rowblock_errors_leave_kernel) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k = gemm_rowmax(ctx, false);
  REQUIRE(k);
  sh_lir_stmt io, ii;
  REQUIRE_OK(ctx, sh_sched_split(k, sh_lir_find_loop(k, "i"), 4, SH_SCHED_TAIL_GUARD, &io, &ii, NULL));
  sh_lir_stmt r = sh_lir_find_loop(k, "r");
  char before[65536];
  snprintf(before, sizeof before, "%s", text_of(k));
  /* blocks of another size */
  CHECK_STATUS(ctx, sh_sched_compute_at(k, r, io, 8, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "does not run over blocks of 8 of r's rows");
  CHECK_STATUS(ctx, sh_sched_compute_at(k, r, io, 0, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "0 rows per block");
  /* the producer after the consumer */
  CHECK_STATUS(ctx, sh_sched_compute_at(k, io, r, 4, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "is not in the statement right before");
  /* a loop inside the block as `at` (not a row-block loop) */
  CHECK_STATUS(ctx, sh_sched_compute_at(k, r, ii, 4, NULL), SHEAF_ERR_INVALID_ARG);
  /* C is read outside the block loop: no shrink; out is no temporary */
  CHECK_STATUS(ctx, sh_sched_shrink(k, sh_lir_find_buffer(k, "C"), io), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "C is accessed outside i_o's body");
  CHECK_STATUS(ctx, sh_sched_shrink(k, sh_lir_find_buffer(k, "out"), io), SHEAF_ERR_INVALID_ARG);
  CHECK_STATUS(ctx, sh_sched_shrink(k, 99, io), SHEAF_ERR_INVALID_ARG);
  CHECK_STATUS(ctx, sh_sched_shrink(k, sh_lir_find_buffer(k, "C"), sh_lir_find_store(k, sh_lir_find_buffer(k, "C"), 0)),
               SHEAF_ERR_INVALID_ARG);
  CHECK(strcmp(before, text_of(k)) == 0);
  /* a parallel block loop: compute_at wants it serial (parallel after) */
  REQUIRE_OK(ctx, sh_sched_parallel(k, io));
  CHECK_STATUS(ctx, sh_sched_compute_at(k, r, io, 4, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "not both serial");
  sh_lir_free(k);
  /* the consumer reads another block's rows: a dependence across blocks */
  k = gemm_rowmax(ctx, true);
  REQUIRE(k);
  REQUIRE_OK(ctx, sh_sched_split(k, sh_lir_find_loop(k, "i"), 4, SH_SCHED_TAIL_GUARD, &io, &ii, NULL));
  snprintf(before, sizeof before, "%s", text_of(k));
  CHECK_STATUS(ctx, sh_sched_compute_at(k, sh_lir_find_loop(k, "r"), io, 4, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "C is not accessed per block of rows");
  CHECK(strcmp(before, text_of(k)) == 0);
  REQUIRE_OK(ctx, sh_lir_status(k));
  sh_lir_free(k);
}

/* ------------------------------------------------- the default schedule */

static const char SRC[] =
    "kernel lsm(x: f32[N, D], W: f32[D, F], b: f32[F]) -> f32[N, F] {\n"
    "  y(n, f) +=! x(n, d) * W(d, f)\n  z(n, f) = y(n, f) + b(f)\n"
    "  m(n) max=! z(n, f)\n  s(n) +=! exp(z(n, f) - m(n))\n"
    "  out(n, f) = z(n, f) - m(n) - log(s(n))\n}\n"
    "kernel ffnln(x: f32[N, D], W: f32[D, F], b: f32[F], ga: f32[F], be: f32[F]) -> f32[N, F] {\n"
    "  y(n, f) +=! x(n, d) * W(d, f)\n  z(n, f) = y(n, f) + b(f)\n"
    "  mu(n) +=! z(n, f) / F\n  c(n, f) = z(n, f) - mu(n)\n"
    "  var(n) +=! c(n, f) * c(n, f) / F\n"
    "  out(n, f) = c(n, f) * rsqrt(var(n) + 1e-5) * ga(f) + be(f)\n}\n"
    "kernel xent(x: f32[N, D], W: f32[D, F], b: f32[F], lab: f32[N]) -> f32[N] {\n"
    "  y(n, f) +=! x(n, d) * W(d, f)\n  z(n, f) = y(n, f) + b(f)\n"
    "  m(n) max=! z(n, f)\n  s(n) +=! exp(z(n, f) - m(n))\n"
    "  p(n) +=! where(float(f) == lab(n), z(n, f), 0)\n"
    "  out(n) = m(n) + log(s(n)) - p(n)\n}\n"
    "kernel gate2(x: f32[N, D], W: f32[D, F]) -> f32[N, F] {\n"
    "  g(n, d) = sigmoid(x(n, d)) * x(n, d)\n  out(n, f) +=! g(n, d) * W(d, f)\n}\n";

/* The default schedule's IR of kernel `name` (AVX2 widths). */
static const char *scheduled(sheaf_ctx *ctx, const char *name, const sh_sched_opts *o) {
  static char t[1 << 18];
  t[0] = '\0';
  sh_module m;
  memset(&m, 0, sizeof m);
  if (!CHECK_OK(ctx, sh_kernel_source_compile(&m, ctx, "rb", SRC, strlen(SRC)))) return t;
  const sh_kernel *kk = sh_module_kernel(&m, name);
  sh_lir_kernel *L = NULL;
  if (CHECK(kk) && CHECK_OK(ctx, sh_lower_kernel(ctx, kk, name, &L, NULL)) &&
      CHECK_OK(ctx, sh_sched_default_opts(L, SHEAF_ISA_AVX2, o)))
    snprintf(t, sizeof t, "%s", text_of(L));
  sh_lir_free(L);
  sh_module_free(&m);
  return t;
}

TEST(codegen_rowblock_default_schedule_ir) {
  sheaf_ctx *ctx = th_ctx();
  sh_sched_opts o;
  memset(&o, 0, sizeof o);
  /* the product kept for one block of 12 rows per thread; the row nest in
   * the block loop, which runs over the pool */
  const char *t = scheduled(ctx, "lsm", &o);
  CHECK_CONTAINS(t, "buffer y f32[12, F] temp per-task\n");
  CHECK_CONTAINS(t, "for n_o in 0..(N + 11) / 12 parallel:\n  for f_o in 0..(F + 15) / 16:\n");
  CHECK_CONTAINS(t, "\n  for n2_i in 0..12:\n    if n_o * 12 + n2_i < N:\n");
  t = scheduled(ctx, "xent", &o);
  CHECK_CONTAINS(t, "buffer y f32[12, F] temp per-task\n");
  t = scheduled(ctx, "ffnln", &o);
  CHECK_CONTAINS(t, "buffer y f32[12, F] temp per-task\n");
  /* the knob: 48 rows (8 tiles of 6), 20 rounded up to 4 tiles (24); -1:
   * not fused (y whole) */
  o.row_block = 48;
  CHECK_CONTAINS(scheduled(ctx, "lsm", &o), "buffer y f32[48, F] temp per-task\n");
  o.row_block = 20;
  CHECK_CONTAINS(scheduled(ctx, "lsm", &o), "buffer y f32[24, F] temp per-task\n");
  o.row_block = -1;
  CHECK_CONTAINS(scheduled(ctx, "lsm", &o), "buffer y f32[N, F] temp\n");
}

static void fill(uint64_t *seed, float *p, int64_t n, double scale) {
  for (int64_t i = 0; i < n; i++) p[i] = (float)(urand(seed) * scale);
}

/* One kernel (0 lsm, 1 ffnln, 2 xent) at N, D, F against double math. */
static bool run_one(sheaf_ctx *ctx, sheaf_kernel *k, int which, int64_t N, int64_t D, int64_t F, uint64_t *seed,
                    const char *what) {
  float *x = malloc(sizeof(float) * (size_t)(N * D)), *W = malloc(sizeof(float) * (size_t)(D * F)),
        *b = malloc(sizeof(float) * (size_t)F), *ga = malloc(sizeof(float) * (size_t)F),
        *be = malloc(sizeof(float) * (size_t)F), *lab = malloc(sizeof(float) * (size_t)N),
        *o = malloc(sizeof(float) * (size_t)(N * F));
  double *z = malloc(sizeof(double) * (size_t)F);
  fill(seed, x, N * D, 2), fill(seed, W, D * F, 2), fill(seed, b, F, 1), fill(seed, ga, F, 2), fill(seed, be, F, 1);
  for (int64_t n = 0; n < N; n++) lab[n] = (float)((n * 31 + 7) % F);
  int64_t osz = which == 2 ? N : N * F;
  for (int64_t q = 0; q < osz; q++) o[q] = NAN;
  int64_t sx[] = {N, D}, sw[] = {D, F}, sf[] = {F}, sn[] = {N};
  sheaf_kernel_arg a[6] = {{SHEAF_KERNEL_F32, x, (size_t)(N * D), 2, sx},
                           {SHEAF_KERNEL_F32, W, (size_t)(D * F), 2, sw},
                           {SHEAF_KERNEL_F32, b, (size_t)F, 1, sf}};
  int na = 3;
  if (which == 1) {
    a[na++] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, ga, (size_t)F, 1, sf};
    a[na++] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, be, (size_t)F, 1, sf};
  }
  if (which == 2) a[na++] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, lab, (size_t)N, 1, sn};
  a[na++] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, o, (size_t)osz, 0, NULL};
  bool ok = CHECK_OK(ctx, sheaf_kernel_run(k, a, na));
  double worst = 0;
  for (int64_t n = 0; n < N && ok; n++) {
    double mx = -INFINITY, s = 0, mu = 0, var = 0;
    for (int64_t f = 0; f < F; f++) {
      double y = b[f];
      for (int64_t d = 0; d < D; d++) y += (double)x[n * D + d] * W[d * F + f];
      z[f] = y;
      mx = fmax(mx, y);
      mu += y / (double)F;
    }
    for (int64_t f = 0; f < F; f++) s += exp(z[f] - mx), var += (z[f] - mu) * (z[f] - mu) / (double)F;
    if (which == 2) {
      double want = mx + log(s) - z[(int64_t)lab[n]];
      worst = fmax(worst, fabs(o[n] - want) / fmax(1.0, fabs(want)));
      if (!(worst <= 1e-4)) ok = false;
      continue;
    }
    for (int64_t f = 0; f < F; f++) {
      double want = which == 0 ? z[f] - mx - log(s) : (z[f] - mu) / sqrt(var + 1e-5) * ga[f] + be[f];
      double e = fabs(o[n * F + f] - want) / fmax(1.0, fabs(want));
      if (!(e <= worst)) worst = e;
    }
    if (!(worst <= 1e-4)) ok = false;
  }
  if (!ok)
    th_fail(__FILE__, __LINE__, "%s: N=%lld D=%lld F=%lld: error %g", what, (long long)N, (long long)D, (long long)F,
            worst);
  free(x), free(W), free(b), free(ga), free(be), free(lab), free(o), free(z);
  return ok;
}

TEST(codegen_rowblock_default_c) {
  sheaf_ctx *ctx = th_ctx();
  if (!th_have_jit_cc("codegen_rowblock_default_c")) return;
  static const char *const names[3] = {"lsm", "ffnln", "xent"};
  /* rows: below, at, above and at multiples of the tile (6) and the block
   * (12; 48 with the knob); columns around the panel (16) and the row
   * loops' vectors (8, 32) */
  static const int64_t Ns[] = {1, 5, 6, 7, 12, 13, 47, 48, 49, 96, 100}, Fs[] = {1, 8, 17, 33, 64};
  static const int rbs[] = {0, 48, -1};
  uint64_t seed = 5;
  for (int r = 0; r < 3; r++) {
    sh_sched_opts so;
    memset(&so, 0, sizeof so);
    so.row_block = rbs[r];
    for (int which = 0; which < 3; which++) {
      sheaf_kernel *k = NULL;
      /* eager: th_cache_dir (harness.h) */
      sh_kernel_opts ko = {.eager = true, .cache_dir = th_cache_dir("rowblock"), .sched = &so};
      REQUIRE_OK(ctx, sh_kernel_compile_opts(ctx, SRC, strlen(SRC), names[which], &ko, &k));
      char what[64];
      snprintf(what, sizeof what, "%s, row_block %d", names[which], rbs[r]);
      bool ok = true;
      for (size_t a = 0; a < SH_ARRAY_LEN(Ns) && ok; a++)
        for (size_t c = 0; c < SH_ARRAY_LEN(Fs) && ok; c++) {
          /* a shape that fails is reported once (run_one), then the next kernel */
          ok = run_one(ctx, k, which, Ns[a], (int64_t)(1 + (a + c) % 5 * 3), Fs[c], &seed, what);
        }
      sheaf_kernel_free(k);
    }
  }
}

/* A pointwise temporary that a product reads at fewer indices than its
 * loops (g(n, d) under `out(n, f) +=! g(n, d) * W(d, f)`) is not inlined:
 * inlined, the sigmoid ran once per column f and the product was no GEMM
 * (TreeGRU's node in the linearized mode ran at half the dynamic runtime's
 * speed). It stays a buffer of its own, and the result is right. */
TEST(codegen_pointwise_operand_of_a_product_stays_a_buffer) {
  sheaf_ctx *ctx = th_ctx();
  sh_sched_opts o;
  memset(&o, 0, sizeof o);
  const char *t = scheduled(ctx, "gate2", &o);
  CHECK_CONTAINS(t, "buffer g f32[N, D] temp\n");
  sheaf_kernel *k = NULL;
  const char *src = strstr(SRC, "kernel gate2");
  REQUIRE(CHECK_OK(ctx, sheaf_kernel_compile(ctx, src, strlen(src), "gate2", &k)));
  enum { N = 13, D = 24, F = 40 };
  static float x[N * D], W[D * F], out[N * F];
  uint64_t seed = 7;
  fill(&seed, x, N * D, 4.0);
  fill(&seed, W, D * F, 1.0);
  int64_t sx[2] = {N, D}, sw[2] = {D, F}, so[2] = {N, F};
  sheaf_kernel_arg a[3] = {{SHEAF_KERNEL_F32, x, N * D, 2, sx}, {SHEAF_KERNEL_F32, W, D * F, 2, sw},
                           {SHEAF_KERNEL_F32, out, N * F, 2, so}};
  if (CHECK_OK(ctx, sheaf_kernel_run(k, a, 3))) {
    double worst = 0;
    for (int n = 0; n < N; n++)
      for (int f = 0; f < F; f++) {
        double want = 0;
        for (int d = 0; d < D; d++) want += x[n * D + d] / (1 + exp(-(double)x[n * D + d])) * W[d * F + f];
        worst = fmax(worst, fabs(want - out[n * F + f]) / fmax(1, fabs(want)));
      }
    CHECK(worst < 1e-5);
  }
  sheaf_kernel_free(k);
}
