/*
 * test_kernel_lang.c — kernel declarations (tensor comprehensions): the
 * checked form (kernel.h) of known kernels, range inference and ragged
 * extents as `sheaf check` prints them, and the scalar reference evaluator
 * (kernel_ref.h) against hand-written C loops: FFN + GELU, matmul,
 * softmax, layer norm, a gated unit, ragged attention with lengths 0, 1
 * and more, offsets, where clauses, several outputs; argument errors. The
 * malformed kernels are golden diagnostics (tests/bad/kernel_*.sf).
 */
#include <stdarg.h>
#include <stdlib.h>

#include "base/buf.h"
#include "base/file.h"
#include "harness.h"
#include "lang/check.h"
#include "sheaf_program.h"
#include "lang/kernel_ref.h"

/* Compiles a kernel-only source; the kernel `name` (NULL and a failure
 * with the diagnostics when it does not check). */
static const sh_kernel *compile_at(const char *file, int line, sheaf_ctx *ctx, sh_module *m,
                                   const char *src, const char *name) {
  sheaf_status st = sh_kernel_source_compile(m, ctx, "k.sf", src, strlen(src));
  if (st != SHEAF_OK) {
    sh_buf b;
    sh_buf_init(&b, ctx);
    sh_diags_render(&m->diags, &b);
    th_fail(file, line, "kernel source does not check (%s):\n%s", sheaf_status_str(st), sh_buf_cstr(&b));
    sh_buf_free(&b);
    return NULL;
  }
  const sh_kernel *k = sh_module_kernel(m, name);
  if (!k) th_fail(file, line, "no kernel '%s'", name);
  return k;
}
#define COMPILE(ctx, m, src, name) compile_at(__FILE__, __LINE__, ctx, m, src, name)

static sh_kref_arg f32_arg(const float *data, size_t numel, int rank, const int64_t *shape) {
  return (sh_kref_arg){data, numel, rank, shape};
}

/* got[i] within tol * max(1, |want[i]|) of want[i] for every i. */
static bool close_at(const char *file, int line, const float *got, const double *want, size_t n,
                     double tol, const char *what) {
  for (size_t i = 0; i < n; i++) {
    double w = want[i], e = fabs((double)got[i] - w), lim = tol * (fabs(w) > 1 ? fabs(w) : 1);
    if (!(e <= lim)) return th_fail(file, line, "%s[%zu] = %.9g, want %.9g", what, i, (double)got[i], w);
  }
  return true;
}
#define CLOSE(got, want, n, what) close_at(__FILE__, __LINE__, got, want, n, 1e-5, what)

static char *summary_of(sheaf_ctx *ctx, const sh_module *m) {
  sh_buf b;
  sh_buf_init(&b, ctx);
  sh_check_summary(m, &b);
  char *r = strdup(sh_buf_cstr(&b));
  sh_buf_free(&b);
  return r;
}

static double gelu_ref(double x) { return 0.5 * x * (1 + erf(x / sqrt(2.0))); }

/* ------------------------------------------------------- checked form */

static const char ffn_src[] =
    "kernel ffn(x: f32[N, D], W: f32[D, F], b: f32[F]) -> f32[N, F] {\n"
    "  y(n, f) +=! x(n, d) * W(d, f)\n"
    "  out(n, f) = gelu(y(n, f) + b(f))\n"
    "}\n";

TEST(kernel_checked_form_of_ffn) {
  sheaf_ctx *ctx = th_ctx();
  sh_module m;
  const sh_kernel *k = COMPILE(ctx, &m, ffn_src, "ffn");
  if (k) {
    CHECK_EQ_INT(k->n_sizes, 3);
    CHECK_EQ_STR(k->sizes[0].name, "N");
    CHECK_EQ_INT(k->sizes[1].tensor, 0); /* D: dimension 1 of x */
    CHECK_EQ_INT(k->sizes[1].dim, 1);
    CHECK_EQ_INT(k->sizes[2].tensor, 1); /* F: dimension 1 of W */
    CHECK_EQ_INT(k->n_inputs, 3);
    CHECK_EQ_INT(k->n_outputs, 1);
    REQUIRE_EQ_INT(k->n_tensors, 5);
    CHECK_EQ_STR(k->tensors[3].name, "out");
    CHECK_EQ_INT(k->tensors[3].kind, SH_KTENSOR_OUTPUT);
    CHECK_EQ_STR(k->tensors[4].name, "y");
    CHECK_EQ_INT(k->tensors[4].kind, SH_KTENSOR_TEMP);
    CHECK_EQ_INT(k->tensors[4].rank, 2);
    CHECK_EQ_INT(k->tensors[4].dims[1].aff.t[0].size, 2); /* y: f32[N, F] */
    REQUIRE_EQ_INT(k->n_stmts, 2);
    const sh_kstmt *s = &k->stmts[0];
    CHECK_EQ_INT(s->lhs, 4);
    CHECK_EQ_INT(s->red, SH_KRED_ADD);
    CHECK(s->init);
    CHECK_EQ_INT(s->n_free, 2);
    REQUIRE_EQ_INT(s->n_idx, 3);
    CHECK_EQ_STR(s->idx[2].name, "d");
    CHECK(s->idx[2].reduction);
    CHECK_EQ_INT(s->idx[2].range.aff.t[0].size, 1);
    CHECK_EQ_INT(s->rhs->kind, SH_KEXPR_OP);
    CHECK_EQ_INT(s->rhs->op, SH_KOP_MUL);
    CHECK_EQ_INT(s->rhs->a->kind, SH_KEXPR_ACCESS);
    CHECK_EQ_INT(s->rhs->a->tensor, 0);
    CHECK_EQ_INT(s->rhs->a->idx[1].var, 2);
    CHECK_EQ_INT(k->stmts[1].red, SH_KRED_ASSIGN);
    CHECK_EQ_INT(k->stmts[1].rhs->op, SH_KOP_GELU);
    CHECK_EQ_INT(k->stmts[1].line, 3);
  }
  sh_module_free(&m);
}

static const char attn_src[] =
    "kernel attn(L: i32[B], q: f32[B, L(b), D], k: f32[B, L(b), D], v: f32[B, L(b), D])\n"
    "    -> f32[B, L(b), D] {\n"
    "  s(b, i, j) +=! q(b, i, d) * k(b, j, d) / sqrt(D)   # scores\n"
    "  m(b, i) max=! s(b, i, j)                           # row max\n"
    "  e(b, i, j) = exp(s(b, i, j) - m(b, i))\n"
    "  z(b, i) +=! e(b, i, j)                             # row sum\n"
    "  o(b, i, d) +=! e(b, i, j) * v(b, j, d)\n"
    "  out(b, i, d) = o(b, i, d) / z(b, i)\n"
    "}\n";

TEST(kernel_ragged_ranges_are_inferred) {
  sheaf_ctx *ctx = th_ctx();
  sh_module m;
  const sh_kernel *k = COMPILE(ctx, &m, attn_src, "attn");
  if (k) {
    char *sum = summary_of(ctx, &m);
    CHECK_CONTAINS(sum, "kernel attn(L: i32[B], q: f32[B, L(b), D], k: f32[B, L(b), D], v: f32[B, L(b), D]) "
                        "-> (out: f32[B, L(b), D])\n");
    CHECK_CONTAINS(sum, "  temp s: f32[B, L(b), L(b)]\n");
    CHECK_CONTAINS(sum, "  s(b, i, j) +=! q(b, i, d) * k(b, j, d) / sqrt(D)  for b in 0..B, i in 0..L(b), "
                        "j in 0..L(b); reduce d in 0..D\n");
    CHECK_CONTAINS(sum, "  m(b, i) max=! s(b, i, j)  for b in 0..B, i in 0..L(b); reduce j in 0..L(b)\n");
    free(sum);
    const sh_ktensor *q = &k->tensors[1];
    CHECK_EQ_INT(q->ragged_outer, 0);
    CHECK_EQ_INT(q->dims[1].kind, SH_KEXT_RAGGED);
    CHECK_EQ_INT(q->dims[1].len, 0);
    CHECK_EQ_INT(q->dims[1].outer, 0);
    const sh_kstmt *s = &k->stmts[0];
    CHECK_EQ_INT(s->idx[2].range.kind, SH_KEXT_RAGGED); /* j in 0..L(b): b is index 0 */
    CHECK_EQ_INT(s->idx[2].range.outer, 0);
  }
  sh_module_free(&m);
}

/* The ragged reduction index comes after the reduction index it depends
 * on, whatever the order of first use. */
TEST(kernel_ragged_reduction_order) {
  sheaf_ctx *ctx = th_ctx();
  sh_module m;
  const sh_kernel *k = COMPILE(ctx, &m,
                               "kernel total(L: i32[B], x: f32[B, L(b), D]) -> f32[D] {\n"
                               "  t(d) +=! x(b, i, d) where i in 0..L(b)\n"
                               "}\n",
                               "total");
  if (k) {
    const sh_kstmt *s = &k->stmts[0];
    REQUIRE_EQ_INT(s->n_idx, 3);
    CHECK_EQ_STR(s->idx[1].name, "b");
    CHECK_EQ_STR(s->idx[2].name, "i");
    CHECK_EQ_INT(s->idx[2].range.outer, 1);
    int64_t sx[] = {3, -1, 2};
    int32_t L32[3] = {2, 0, 3};
    float x[10];
    for (int i = 0; i < 10; i++) x[i] = (float)i;
    int64_t sL = 3;
    sh_kref_arg in[2] = {{L32, 3, 1, &sL}, f32_arg(x, 10, 3, sx)};
    float out[2];
    sh_kref_out o = {out, 2};
    if (CHECK_OK(ctx, sh_kernel_ref_run(ctx, k, in, 2, &o, 1))) {
      CHECK_NEAR(out[0], 0 + 2 + 4 + 6 + 8, 1e-6);
      CHECK_NEAR(out[1], 1 + 3 + 5 + 7 + 9, 1e-6);
    }
  }
  sh_module_free(&m);
}

/* ------------------------------------------------ reference evaluator */

TEST(kernel_ref_ffn_gelu) {
  sheaf_ctx *ctx = th_ctx();
  sh_module m;
  const sh_kernel *k = COMPILE(ctx, &m, ffn_src, "ffn");
  enum { N = 5, D = 7, F = 3 };
  uint64_t rng = 11;
  float *x = th_frand_fill(&rng, N * D), *W = th_frand_fill(&rng, D * F), *b = th_frand_fill(&rng, F);
  if (k) {
    int64_t sx[] = {N, D}, sw[] = {D, F}, sb[] = {F};
    sh_kref_arg in[] = {f32_arg(x, N * D, 2, sx), f32_arg(W, D * F, 2, sw), f32_arg(b, F, 1, sb)};
    float out[N * F];
    double want[N * F];
    size_t numel = 0;
    CHECK_OK(ctx, sh_kernel_ref_numel(ctx, k, in, 3, k->n_inputs, &numel));
    CHECK_EQ_SIZE(numel, N * F);
    sh_kref_out o = {out, N * F};
    for (int n = 0; n < N; n++)
      for (int f = 0; f < F; f++) {
        double y = 0;
        for (int d = 0; d < D; d++) y += (double)x[n * D + d] * W[d * F + f];
        want[n * F + f] = gelu_ref(y + b[f]);
      }
    if (CHECK_OK(ctx, sh_kernel_ref_run(ctx, k, in, 3, &o, 1))) CLOSE(out, want, N * F, "ffn");
  }
  free(x), free(W), free(b);
  sh_module_free(&m);
}

TEST(kernel_ref_matmul_sizes_below_at_above_one) {
  sheaf_ctx *ctx = th_ctx();
  sh_module m;
  const sh_kernel *k = COMPILE(ctx, &m,
                               "kernel matmul(A: f32[M, K], B: f32[K, N]) -> f32[M, N] {\n"
                               "  C(m, n) +=! A(m, k) * B(k, n)\n"
                               "}\n",
                               "matmul");
  static const int shapes[][3] = {{1, 1, 1}, {1, 5, 1}, {4, 3, 2}, {17, 33, 9}};
  for (size_t t = 0; k && t < SH_ARRAY_LEN(shapes); t++) {
    int M = shapes[t][0], K = shapes[t][1], N = shapes[t][2];
    uint64_t rng = 5 + t;
    float *A = th_frand_fill(&rng, M * K), *B = th_frand_fill(&rng, K * N);
    float *C = malloc(sizeof(float) * (size_t)(M * N));
    double *want = malloc(sizeof(double) * (size_t)(M * N));
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        double acc = 0;
        for (int p = 0; p < K; p++) acc += (double)A[i * K + p] * B[p * N + j];
        want[i * N + j] = acc;
      }
    int64_t sa[] = {M, K}, sb[] = {K, N};
    sh_kref_arg in[] = {f32_arg(A, (size_t)(M * K), 2, sa), f32_arg(B, (size_t)(K * N), 2, sb)};
    sh_kref_out o = {C, (size_t)(M * N)};
    if (CHECK_OK(ctx, sh_kernel_ref_run(ctx, k, in, 2, &o, 1))) CLOSE(C, want, (size_t)(M * N), "C");
    free(A), free(B), free(C), free(want);
  }
  sh_module_free(&m);
}

TEST(kernel_ref_softmax) {
  sheaf_ctx *ctx = th_ctx();
  sh_module m;
  const sh_kernel *k = COMPILE(ctx, &m,
                               "kernel row_softmax(x: f32[N, C]) -> f32[N, C] {\n"
                               "  m(n) max=! x(n, c)\n"
                               "  e(n, c) = exp(x(n, c) - m(n))\n"
                               "  s(n) +=! e(n, c)\n"
                               "  out(n, c) = e(n, c) / s(n)\n"
                               "}\n",
                               "row_softmax");
  enum { N = 4, C = 9 };
  uint64_t rng = 3;
  float *x = th_frand_fill(&rng, N * C);
  for (int i = 0; i < N * C; i++) x[i] *= 30; /* large values: the max matters */
  if (k) {
    int64_t sx[] = {N, C};
    sh_kref_arg in = f32_arg(x, N * C, 2, sx);
    float out[N * C];
    double want[N * C];
    for (int n = 0; n < N; n++) {
      double mx = -INFINITY, s = 0;
      for (int c = 0; c < C; c++) mx = fmax(mx, x[n * C + c]);
      for (int c = 0; c < C; c++) s += exp(x[n * C + c] - mx);
      for (int c = 0; c < C; c++) want[n * C + c] = exp(x[n * C + c] - mx) / s;
    }
    sh_kref_out o = {out, N * C};
    if (CHECK_OK(ctx, sh_kernel_ref_run(ctx, k, &in, 1, &o, 1))) CLOSE(out, want, N * C, "softmax");
  }
  free(x);
  sh_module_free(&m);
}

TEST(kernel_ref_layernorm) {
  sheaf_ctx *ctx = th_ctx();
  sh_module m;
  const sh_kernel *k = COMPILE(ctx, &m,
                               "kernel layernorm(x: f32[N, D], g: f32[D], b: f32[D]) -> f32[N, D] {\n"
                               "  mu(n) +=! x(n, d) / D\n"
                               "  c(n, d) = x(n, d) - mu(n)\n"
                               "  var(n) +=! c(n, d) * c(n, d) / D\n"
                               "  out(n, d) = c(n, d) * rsqrt(var(n) + 1e-5) * g(d) + b(d)\n"
                               "}\n",
                               "layernorm");
  enum { N = 3, D = 16 };
  uint64_t rng = 7;
  float *x = th_frand_fill(&rng, N * D), *g = th_frand_fill(&rng, D), *b = th_frand_fill(&rng, D);
  if (k) {
    int64_t sx[] = {N, D}, sd[] = {D};
    sh_kref_arg in[] = {f32_arg(x, N * D, 2, sx), f32_arg(g, D, 1, sd), f32_arg(b, D, 1, sd)};
    float out[N * D];
    double want[N * D];
    for (int n = 0; n < N; n++) {
      double mu = 0, var = 0;
      for (int d = 0; d < D; d++) mu += x[n * D + d];
      mu /= D;
      for (int d = 0; d < D; d++) var += (x[n * D + d] - mu) * (x[n * D + d] - mu);
      var /= D;
      for (int d = 0; d < D; d++) want[n * D + d] = (x[n * D + d] - mu) / sqrt(var + 1e-5) * g[d] + b[d];
    }
    sh_kref_out o = {out, N * D};
    if (CHECK_OK(ctx, sh_kernel_ref_run(ctx, k, in, 3, &o, 1))) CLOSE(out, want, N * D, "layernorm");
  }
  free(x), free(g), free(b);
  sh_module_free(&m);
}

TEST(kernel_ref_gated_unit) {
  sheaf_ctx *ctx = th_ctx();
  sh_module m;
  const sh_kernel *k = COMPILE(ctx, &m,
                               "kernel gated(x: f32[N, D], Wg: f32[D, H], Wh: f32[D, H]) -> f32[N, H] {\n"
                               "  g(n, h) +=! x(n, d) * Wg(d, h); t(n, h) +=! x(n, d) * Wh(d, h)\n"
                               "  out(n, h) = sigmoid(g(n, h)) * tanh(t(n, h))\n"
                               "}\n",
                               "gated");
  enum { N = 6, D = 5, H = 4 };
  uint64_t rng = 9;
  float *x = th_frand_fill(&rng, N * D), *Wg = th_frand_fill(&rng, D * H), *Wh = th_frand_fill(&rng, D * H);
  if (k) {
    int64_t sx[] = {N, D}, sw[] = {D, H};
    sh_kref_arg in[] = {f32_arg(x, N * D, 2, sx), f32_arg(Wg, D * H, 2, sw), f32_arg(Wh, D * H, 2, sw)};
    float out[N * H];
    double want[N * H];
    for (int n = 0; n < N; n++)
      for (int h = 0; h < H; h++) {
        double g = 0, t = 0;
        for (int d = 0; d < D; d++) g += (double)x[n * D + d] * Wg[d * H + h], t += (double)x[n * D + d] * Wh[d * H + h];
        want[n * H + h] = 1 / (1 + exp(-g)) * tanh(t);
      }
    sh_kref_out o = {out, N * H};
    if (CHECK_OK(ctx, sh_kernel_ref_run(ctx, k, in, 3, &o, 1))) CLOSE(out, want, N * H, "gated");
  }
  free(x), free(Wg), free(Wh);
  sh_module_free(&m);
}

/* Ragged attention over sequences of lengths 0, 1, 5 and 3, in the packed
 * layout (the sequences' rows one after another). */
TEST(kernel_ref_ragged_attention) {
  sheaf_ctx *ctx = th_ctx();
  sh_module m;
  const sh_kernel *k = COMPILE(ctx, &m, attn_src, "attn");
  enum { B = 4, D = 6 };
  int32_t L[B] = {0, 1, 5, 3};
  int rows = 0, first[B];
  for (int b = 0; b < B; b++) first[b] = rows, rows += L[b];
  uint64_t rng = 21;
  float *q = th_frand_fill(&rng, rows * D), *kk = th_frand_fill(&rng, rows * D), *v = th_frand_fill(&rng, rows * D);
  if (k) {
    int64_t sL[] = {B}, sq[] = {B, -1, D};
    sh_kref_arg in[] = {{L, B, 1, sL}, f32_arg(q, (size_t)rows * D, 3, sq), f32_arg(kk, (size_t)rows * D, 3, sq),
                        f32_arg(v, (size_t)rows * D, 3, sq)};
    size_t numel = 0;
    CHECK_OK(ctx, sh_kernel_ref_numel(ctx, k, in, 4, k->n_inputs, &numel));
    CHECK_EQ_SIZE(numel, (size_t)rows * D);
    float *out = malloc(sizeof(float) * (size_t)rows * D);
    double *want = calloc((size_t)rows * D, sizeof(double));
    for (int b = 0; b < B; b++)
      for (int i = 0; i < L[b]; i++) {
        const float *qi = q + (first[b] + i) * D;
        double s[8], mx = -INFINITY, z = 0;
        for (int j = 0; j < L[b]; j++) {
          double acc = 0;
          for (int d = 0; d < D; d++) acc += (double)qi[d] * kk[(first[b] + j) * D + d] / sqrt((double)D);
          s[j] = acc;
          mx = fmax(mx, acc);
        }
        for (int j = 0; j < L[b]; j++) z += exp(s[j] - mx);
        for (int d = 0; d < D; d++) {
          double o = 0;
          for (int j = 0; j < L[b]; j++) o += exp(s[j] - mx) * v[(first[b] + j) * D + d];
          want[(first[b] + i) * D + d] = o / z;
        }
      }
    sh_kref_out o = {out, (size_t)rows * D};
    if (CHECK_OK(ctx, sh_kernel_ref_run(ctx, k, in, 4, &o, 1))) CLOSE(out, want, (size_t)rows * D, "attn");
    /* all lengths 0: an empty output */
    int32_t L0[B] = {0, 0, 0, 0};
    in[0].data = L0;
    for (int i = 1; i < 4; i++) in[i].numel = 0;
    sh_kref_out o0 = {NULL, 0};
    CHECK_OK(ctx, sh_kernel_ref_run(ctx, k, in, 4, &o0, 1));
    free(out), free(want);
  }
  free(q), free(kk), free(v);
  sh_module_free(&m);
}

/* Offsets and where clauses, constants, index values, comparisons, i32
 * lengths as values, several named outputs, accumulation after definition. */
TEST(kernel_ref_offsets_where_and_outputs) {
  sheaf_ctx *ctx = th_ctx();
  sh_module m;
  const char *src =
      "kernel misc(L: i32[B], x: f32[N], r: f32[B, L(b)]) -> (d: f32[N - 1], c: f32[N, N], mean: f32[B]) {\n"
      "  d(i) = x(i + 1) - x(i) where i in 0..N - 1\n"
      "  c(i, j) = where(j <= i, x(i) * x(0), -1e30)     # a causal mask\n"
      "  c(i, j) += i + 0.5 * j\n"
      "  t(b) +=! r(b, l)\n"
      "  mean(b) = t(b) / max(float(L(b)), 1)\n"
      "}\n";
  const sh_kernel *k = COMPILE(ctx, &m, src, "misc");
  if (k) {
    enum { B = 3, N = 4 };
    int32_t L[B] = {2, 0, 3};
    float x[N] = {1, 3, 6, 10}, r[5] = {1, 2, 3, 4, 5};
    int64_t sL[] = {B}, sx[] = {N}, sr[] = {B, -1};
    sh_kref_arg in[] = {{L, B, 1, sL}, f32_arg(x, N, 1, sx), f32_arg(r, 5, 2, sr)};
    float d[N - 1], c[N * N], mean[B];
    sh_kref_out o[] = {{d, N - 1}, {c, N * N}, {mean, B}};
    if (CHECK_OK(ctx, sh_kernel_ref_run(ctx, k, in, 3, o, 3))) {
      double wd[] = {2, 3, 4}, wm[] = {1.5, 0, 4};
      CLOSE(d, wd, 3, "d");
      CLOSE(mean, wm, 3, "mean");
      double wc[N * N];
      for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) wc[i * N + j] = (j <= i ? x[i] * x[0] : -1e30) + i + 0.5 * j;
      CLOSE(c, wc, N * N, "c");
    }
  }
  sh_module_free(&m);
}

/* Fixed sizes of the module are constants; kernels and functions live side
 * by side, and a file of kernels only needs no main. */
TEST(kernel_module_sizes_and_library_files) {
  sheaf_ctx *ctx = th_ctx();
  sh_module m;
  const char *src =
      "size D = 4\n"
      "kernel proj(x: f32[N, D], w: f32[D]) -> f32[N] { y(n) +=! x(n, d) * w(d) / D }\n"
      "param emb: f32[V, D]\n"
      "fn main(ws: list[i32]) -> f32[D] { emb[ws[0]] }\n";
  sheaf_status st = sh_lang_compile(&m, ctx, "m.sf", src, strlen(src));
  CHECK_OK(ctx, st);
  const sh_kernel *k = sh_module_kernel(&m, "proj");
  if (CHECK(k != NULL)) {
    CHECK_EQ_INT(k->n_sizes, 1); /* N; D is the constant 4 */
    CHECK_EQ_INT(k->tensors[0].dims[1].aff.n, 0);
    CHECK_EQ_INT(k->tensors[0].dims[1].aff.c, 4);
    CHECK_EQ_INT(k->stmts[0].rhs->b->kind, SH_KEXPR_CONST);
  }
  sh_module_free(&m);
  /* a kernel library checks without main; a model without main does not */
  CHECK_OK(ctx, sh_lang_compile(&m, ctx, "lib.sf", ffn_src, strlen(ffn_src)));
  sh_module_free(&m);
  const char *no_main = "kernel f(x: f32[N]) -> f32[N] { y(i) = x(i) }\nfn g(x: i32) -> i32 { x }\n";
  CHECK_STATUS(ctx, sh_lang_compile(&m, ctx, "nm.sf", no_main, strlen(no_main)), SHEAF_ERR_PARSE);
  sh_module_free(&m);
  /* a kernel source refuses other declarations */
  const char *with_fn = "kernel f(x: f32[N]) -> f32[N] { y(i) = x(i) }\nfn g(x: i32) -> i32 { x }\n";
  CHECK_STATUS(ctx, sh_kernel_source_compile(&m, ctx, "k.sf", with_fn, strlen(with_fn)), SHEAF_ERR_PARSE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "k.sf:2:1: error: a kernel source holds only kernel and size declarations");
  sh_module_free(&m);
}

TEST(kernel_ref_argument_errors_are_clear) {
  sheaf_ctx *ctx = th_ctx();
  sh_module m;
  const sh_kernel *k = COMPILE(ctx, &m, ffn_src, "ffn");
  if (k) {
    float x[12] = {0}, W[12] = {0}, b[4] = {0}, out[12];
    int64_t sx[] = {3, 4}, sw[] = {4, 3}, sb[] = {3}, sb_bad[] = {4}, sw_bad[] = {5, 3};
    sh_kref_arg in[] = {f32_arg(x, 12, 2, sx), f32_arg(W, 12, 2, sw), f32_arg(b, 3, 1, sb)};
    sh_kref_out o = {out, 9};
    CHECK_OK(ctx, sh_kernel_ref_run(ctx, k, in, 3, &o, 1));
    in[2].shape = sb_bad;
    CHECK_STATUS(ctx, sh_kernel_ref_run(ctx, k, in, 3, &o, 1), SHEAF_ERR_SHAPE);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx),
                   "kernel 'ffn': dimension 0 of input 'b' is 4, but it is declared F = 3");
    in[2].shape = sb;
    in[1].shape = sw_bad;
    CHECK_STATUS(ctx, sh_kernel_ref_run(ctx, k, in, 3, &o, 1), SHEAF_ERR_SHAPE);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "dimension 0 of input 'W' is 5, but it is declared D = 4");
    in[1].shape = sw;
    in[0].numel = 11;
    CHECK_STATUS(ctx, sh_kernel_ref_run(ctx, k, in, 3, &o, 1), SHEAF_ERR_SHAPE);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "input 'x' has 11 elements, but its shape needs 12");
    in[0].numel = 12;
    in[0].rank = 1;
    CHECK_STATUS(ctx, sh_kernel_ref_run(ctx, k, in, 3, &o, 1), SHEAF_ERR_SHAPE);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "input 1 ('x') has rank 1, but it is declared with 2");
    in[0].rank = 2;
    o.numel = 12;
    CHECK_STATUS(ctx, sh_kernel_ref_run(ctx, k, in, 3, &o, 1), SHEAF_ERR_SHAPE);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "output 'out' has room for 12 elements, but needs 9");
    CHECK_STATUS(ctx, sh_kernel_ref_run(ctx, k, in, 2, &o, 1), SHEAF_ERR_INVALID_ARG);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "kernel 'ffn' takes 3 inputs, not 2");
    int64_t s0[] = {0, 4};
    in[0].shape = s0;
    in[0].numel = 0;
    CHECK_STATUS(ctx, sh_kernel_ref_run(ctx, k, in, 3, &o, 1), SHEAF_ERR_SHAPE);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "size N = 0 (dimension 0 of input 'x'): sizes are at least 1");
  }
  sh_module_free(&m);
  /* ragged: negative lengths, element counts from the lengths */
  k = COMPILE(ctx, &m, attn_src, "attn");
  if (k) {
    int32_t L[2] = {2, -1};
    float q[8] = {0}, out[8];
    int64_t sL[] = {2}, sq[] = {2, -1, 4};
    sh_kref_arg in[] = {{L, 2, 1, sL}, f32_arg(q, 8, 3, sq), f32_arg(q, 8, 3, sq), f32_arg(q, 8, 3, sq)};
    sh_kref_out o = {out, 8};
    CHECK_STATUS(ctx, sh_kernel_ref_run(ctx, k, in, 4, &o, 1), SHEAF_ERR_SHAPE);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "kernel 'attn': length L[1] = -1 is negative");
    L[1] = 1;
    CHECK_STATUS(ctx, sh_kernel_ref_run(ctx, k, in, 4, &o, 1), SHEAF_ERR_SHAPE);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "input 'q' has 8 elements, but its shape needs 12");
    L[1] = 0;
    CHECK_OK(ctx, sh_kernel_ref_run(ctx, k, in, 4, &o, 1));
  }
  sh_module_free(&m);
}

/* Negative run-time extents (a range N - 2 with N = 1) are errors, not
 * empty loops over garbage. */
TEST(kernel_ref_negative_range_is_an_error) {
  sheaf_ctx *ctx = th_ctx();
  sh_module m;
  const sh_kernel *k = COMPILE(ctx, &m, "kernel d2(x: f32[N]) -> f32[N - 2] { y(i) = x(i + 2) - x(i) where i in 0..N - 2 }\n", "d2");
  if (k) {
    float x[1] = {0}, out[1];
    int64_t sx[] = {1};
    sh_kref_arg in = f32_arg(x, 1, 1, sx);
    size_t numel;
    CHECK_STATUS(ctx, sh_kernel_ref_numel(ctx, k, &in, 1, 1, &numel), SHEAF_ERR_SHAPE);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "kernel 'd2': dimension 0 of 'y', N - 2, is negative (N = 1)");
    sh_kref_out o = {out, 0};
    CHECK_STATUS(ctx, sh_kernel_ref_run(ctx, k, &in, 1, &o, 1), SHEAF_ERR_SHAPE);
  }
  sh_module_free(&m);
}

/* A kernel library has no main: running it is a positioned error. */
TEST(kernel_library_cannot_be_run) {
  sheaf_ctx *ctx = th_ctx();
  const char *path = th_write_tmp("lib.sf", ffn_src, strlen(ffn_src));
  sheaf_program *p = NULL;
  CHECK_STATUS(ctx, sheaf_program_load(ctx, path, NULL, &p), SHEAF_ERR_PARSE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), ":1:1: error: no 'main' function: this file holds kernels only");
  CHECK(p == NULL);
  if (!th_sheaf_bin()) return;
  static char out[1 << 14];
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s run %s --data data/ud_english_ewt/en_ewt-ud-test.conllu 2>&1", th_sheaf_bin(), path);
  CHECK_EQ_INT(th_run(cmd, out, sizeof out), 1);
  CHECK_CONTAINS(out, "lib.sf:1:1: error: no 'main' function: this file holds kernels only (a kernel library)");
}

/* -------------------------------------------------------- robustness */

TEST(kernel_allocation_failure_everywhere) {
  sheaf_ctx *ctx = th_ctx();
  long live = th_live_blocks();
  bool done = false;
  for (long n = 1; n < 100000 && !done; n++) {
    th_fail_alloc_at(n);
    sh_module m;
    sheaf_status st = sh_kernel_source_compile(&m, ctx, "a.sf", attn_src, strlen(attn_src));
    const sh_kernel *k = st == SHEAF_OK ? sh_module_kernel(&m, "attn") : NULL;
    if (k) { /* the evaluator too */
      int32_t L[2] = {1, 2};
      float q[12] = {0}, out[12];
      int64_t sL[] = {2}, sq[] = {2, -1, 4};
      sh_kref_arg in[] = {{L, 2, 1, sL}, f32_arg(q, 12, 3, sq), f32_arg(q, 12, 3, sq), f32_arg(q, 12, 3, sq)};
      sh_kref_out o = {out, 12};
      st = sh_kernel_ref_run(ctx, k, in, 4, &o, 1);
    }
    th_fail_alloc_at(0);
    sh_module_free(&m);
    if (st == SHEAF_OK) done = true;
    else if (!CHECK_EQ_INT(st, SHEAF_ERR_NOMEM)) break;
    CHECK_EQ_INT(th_live_blocks(), live);
  }
  CHECK(done);
}

/* A model calling a kernel checks: the call is typed from the kernel
 * (tests/test_kernel_batch.c runs such models; tests/bad/kcall_*.sf are
 * the misuses). */
TEST(kernel_call_from_fn_checks) {
  sheaf_ctx *ctx = th_ctx();
  sh_module m;
  const char *src = "param emb: f32[V, H]\n"
                    "kernel twice(x: f32[N]) -> f32[N] { y(i) = 2 * x(i) }\n"
                    "fn main(ws: list[i32]) -> f32[H] { twice(emb[ws[0]]) }\n";
  CHECK_OK(ctx, sh_lang_compile(&m, ctx, "call.sf", src, strlen(src)));
  CHECK(m.kernels[0]->called);
  sh_module_free(&m);
}

/* Every ```sheaf-kernel block of docs/LANGUAGE.md checks as a kernel
 * source; every ```sheaf-kernel-error block fails with the message of its
 * "# error: " line. */
TEST(kernel_docs_examples_check) {
  sheaf_ctx *ctx = th_ctx();
  char *doc;
  size_t len;
  REQUIRE_OK(ctx, sh_file_read(ctx, "docs/LANGUAGE.md", &doc, &len));
  int n_ok = 0, n_err = 0;
  for (char *p = doc; (p = strstr(p, "```sheaf-kernel"));) {
    bool want_error = strncmp(p, "```sheaf-kernel-error", 21) == 0;
    char *start = strchr(p, '\n');
    if (!start) break;
    start++;
    char *end = strstr(start, "```");
    if (!end) break;
    *end = '\0';
    sh_module m;
    sheaf_status st = sh_kernel_source_compile(&m, ctx, "doc.sf", start, strlen(start));
    sh_buf b;
    sh_buf_init(&b, ctx);
    sh_diags_render(&m.diags, &b);
    if (want_error) {
      n_err++;
      const char *tag = strstr(start, "# error: ");
      char msg[300] = "";
      if (tag) snprintf(msg, sizeof msg, "%.*s", (int)strcspn(tag + 9, "\n"), tag + 9);
      if (st != SHEAF_ERR_PARSE || !msg[0] || !strstr(sh_buf_cstr(&b), msg))
        th_fail(__FILE__, __LINE__, "docs kernel should fail with \"%s\":\n%s\ngot:\n%s", msg, start,
                sh_buf_cstr(&b));
    } else {
      n_ok++;
      if (st != SHEAF_OK)
        th_fail(__FILE__, __LINE__, "docs kernel does not check:\n%s\n%s", start, sh_buf_cstr(&b));
    }
    sh_buf_free(&b);
    sh_module_free(&m);
    p = end + 3;
  }
  CHECK(n_ok >= 4);
  CHECK(n_err >= 2);
  sh_free(ctx, doc, len + 1);
}

TEST(kernel_cli_check_prints_ranges) {
  if (!th_sheaf_bin()) return;
  const char *path = th_write_tmp("attn.sf", attn_src, strlen(attn_src));
  static char out[1 << 14];
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s check %s 2>&1", th_sheaf_bin(), path);
  CHECK_EQ_INT(th_run(cmd, out, sizeof out), 0);
  CHECK_CONTAINS(out, "  o(b, i, d) +=! e(b, i, j) * v(b, j, d)  for b in 0..B, i in 0..L(b), d in 0..D; "
                      "reduce j in 0..L(b)\n");
}

/* ------------------------------------------------- random kernels */

typedef struct gen {
  uint64_t s;
  char buf[4096];
  size_t len;
} gen;

static unsigned gen_rand(gen *g, unsigned n) {
  g->s ^= g->s << 13, g->s ^= g->s >> 7, g->s ^= g->s << 17;
  return (unsigned)(g->s % n);
}

static void gen_put(gen *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void gen_put(gen *g, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(g->buf + g->len, sizeof g->buf - g->len, fmt, ap);
  va_end(ap);
  if (n > 0 && g->len + (size_t)n < sizeof g->buf) g->len += (size_t)n;
}

typedef struct gen_tensor {
  char name[16]; /* "t%d" of any int */
  int rank;
  char lhs[32]; /* a temporary's left-hand side: "t0(i, j)" */
} gen_tensor;

/* Index roles: b in 0..N, i in 0..L(b), j and k in 0..M; most accesses
 * follow them (so kernels often check), some do not (so errors are hit). */
static void gen_access(gen *g, const gen_tensor *t) {
  static const char *const any[] = {"i", "j", "k", "b", "i + 1", "j - 1", "0", "1", "k + 1"};
  static const char *const px[] = {"b, j", "b, k", "b, 0", "b, k + 1", "b, j"};
  static const char *const pw[] = {"j", "k", "0", "1", "k + 1"};
  static const char *const pr[] = {"b, i, j", "b, i, k", "b, i, 0", "b, i + 1, k", "b, 0, j"};
  if (gen_rand(g, 8) == 0 || (t->name[0] == 't' && gen_rand(g, 4) == 0)) {
    gen_put(g, "%s(", t->name);
    for (int d = 0; d < t->rank; d++) gen_put(g, "%s%s", d ? ", " : "", any[gen_rand(g, SH_ARRAY_LEN(any))]);
    gen_put(g, ")");
  } else if (t->name[0] == 't') {
    gen_put(g, "%s", t->lhs);
  } else {
    const char *const *v = t->name[0] == 'x' ? px : t->name[0] == 'w' ? pw : pr;
    gen_put(g, "%s(%s)", t->name, v[gen_rand(g, 5)]);
  }
}

static void gen_expr(gen *g, int depth, const gen_tensor *t, int n) {
  static const char *const fn1[] = {"exp", "tanh", "sigmoid", "gelu", "relu", "abs", "softplus", "erf"};
  static const char *const op2[] = {"+", "-", "*", "/", "<", ">=", "=="};
  unsigned r = gen_rand(g, depth > 2 ? 4 : 8);
  if (r == 0) gen_put(g, "%s", gen_rand(g, 2) ? "0.5" : gen_rand(g, 2) ? "M" : "j");
  else if (r <= 3) gen_access(g, &t[gen_rand(g, (unsigned)n)]);
  else if (r == 4) {
    gen_put(g, "%s(", fn1[gen_rand(g, SH_ARRAY_LEN(fn1))]);
    gen_expr(g, depth + 1, t, n);
    gen_put(g, ")");
  } else if (r == 5) {
    gen_put(g, "where(");
    gen_expr(g, depth + 1, t, n);
    gen_put(g, ", ");
    gen_expr(g, depth + 1, t, n);
    gen_put(g, ", -");
    gen_expr(g, depth + 1, t, n);
    gen_put(g, ")");
  } else {
    gen_put(g, "(");
    gen_expr(g, depth + 1, t, n);
    gen_put(g, " %s ", op2[gen_rand(g, SH_ARRAY_LEN(op2))]);
    gen_expr(g, depth + 1, t, n);
    gen_put(g, ")");
  }
}

/* A random kernel over x: f32[N, M], w: f32[M] and a ragged r: f32[N,
 * L(b), M]; its result is the last statement's tensor, of type `result`. */
static void gen_kernel(gen *g, uint64_t seed, const char *result) {
  static const char *const lhs1[] = {"b", "j", "k", "b", "i"};
  static const char *const lhs2[] = {"b, j", "b, i", "j, b", "b, k", "i, b"};
  static const char *const ops[] = {"=", "+=!", "max=!", "*=!", "min=!", "="};
  static const char *const where[] = {"b in 0..N", "j in 0..M", "i in 0..L(b)", "k in 0..M - 1", "j in 0..N - 1"};
  g->s = seed * 0x9E3779B97F4A7C15ull + 1;
  g->len = 0;
  gen_tensor t[8] = {{"x", 2, ""}, {"w", 1, ""}, {"r", 3, ""}};
  int n = 3;
  gen_put(g, "kernel rnd(L: i32[N], x: f32[N, M], w: f32[M], r: f32[N, L(b), M]) -> %s {\n", result);
  int n_stmts = 1 + (int)gen_rand(g, 4);
  for (int s = 0; s < n_stmts; s++) {
    bool acc = n > 3 && gen_rand(g, 4) == 0 && s < n_stmts - 1;
    if (acc) { /* accumulate into an earlier temporary */
      const gen_tensor *a = &t[3 + gen_rand(g, (unsigned)(n - 3))];
      gen_put(g, "  %s += ", a->lhs);
    } else {
      gen_tensor *a = &t[n++];
      snprintf(a->name, sizeof a->name, "t%d", s);
      a->rank = 1 + (int)gen_rand(g, 2);
      snprintf(a->lhs, sizeof a->lhs, "t%d(%s)", s,
               a->rank == 1 ? lhs1[gen_rand(g, SH_ARRAY_LEN(lhs1))] : lhs2[gen_rand(g, SH_ARRAY_LEN(lhs2))]);
      gen_put(g, "  %s %s ", a->lhs, ops[gen_rand(g, SH_ARRAY_LEN(ops))]);
    }
    gen_expr(g, 0, t, acc ? n : n - 1);
    if (gen_rand(g, 3) == 0) gen_put(g, " where %s", where[gen_rand(g, SH_ARRAY_LEN(where))]);
    gen_put(g, "\n");
  }
  gen_put(g, "}\n");
}

/* Random kernels that check are run by the reference evaluator at random
 * small sizes and lengths: it checks every access, so a kernel the checker
 * accepts that reads or writes out of bounds fails here. */
TEST(kernel_random_kernels_stay_in_bounds) {
  static const char *const results[] = {"f32[N]", "f32[M]", "f32[N, M]", "f32[M, N]", "f32[N, L(b)]",
                                        "f32[N, M - 1]", "f32[N - 1]"};
  sheaf_ctx *ctx = th_ctx();
  static gen g;
  int checked = 0, ran = 0;
  for (uint64_t seed = 1; seed <= 3000; seed++) {
    sh_module m;
    const sh_kernel *k = NULL;
    for (size_t r = 0; r < SH_ARRAY_LEN(results) && !k; r++) {
      gen_kernel(&g, seed, results[r]);
      if (sh_kernel_source_compile(&m, ctx, "rnd.sf", g.buf, g.len) == SHEAF_OK) k = sh_module_kernel(&m, "rnd");
      else sh_module_free(&m);
    }
    if (!k) continue;
    checked++;
    int N = 1 + (int)(seed % 4), M = 1 + (int)(seed / 4 % 3);
    int32_t L[4];
    int rows = 0;
    for (int b = 0; b < N; b++) rows += L[b] = (int32_t)((seed / 12 + (uint64_t)b * 7) % 4);
    float x[16], w[4], r[64], out[64];
    for (int v = 0; v < 64; v++) r[v] = (float)(v % 5) * 0.3f - 0.6f;
    for (int v = 0; v < 16; v++) x[v] = (float)(v % 3) * 0.5f - 0.4f;
    for (int v = 0; v < 4; v++) w[v] = 0.25f * (float)v;
    int64_t sL[] = {N}, sx[] = {N, M}, sw[] = {M}, sr[] = {N, -1, M};
    sh_kref_arg in[] = {{L, (size_t)N, 1, sL}, f32_arg(x, (size_t)(N * M), 2, sx), f32_arg(w, (size_t)M, 1, sw),
                        f32_arg(r, (size_t)(rows * M), 3, sr)};
    size_t numel = 0;
    sheaf_status st = sh_kernel_ref_numel(ctx, k, in, 4, 4, &numel);
    if (st == SHEAF_OK && CHECK(numel <= 64)) {
      sh_kref_out o = {out, numel};
      st = sh_kernel_ref_run(ctx, k, in, 4, &o, 1);
      ran += st == SHEAF_OK;
    }
    if (st != SHEAF_OK && !(st == SHEAF_ERR_SHAPE && strstr(sheaf_ctx_last_error(ctx), "negative")))
      th_fail(__FILE__, __LINE__, "seed %llu: %s\n%s", (unsigned long long)seed, sheaf_ctx_last_error(ctx),
              g.buf);
    sh_module_free(&m);
  }
  CHECK(checked >= 250); /* 300 at the time of writing */
  CHECK(ran >= 200);
  if (getenv("SHEAF_TEST_VERBOSE")) printf("random kernels: %d checked, %d ran\n", checked, ran);
}
