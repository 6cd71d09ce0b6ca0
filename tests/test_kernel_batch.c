/*
 * test_kernel_batch.c — generated kernels as batched runtime ops
 * (sheaf_kernel_call, src/codegen/kernel_call.c, and the emitted batch
 * loop, src/codegen/lower_batch.c): 64 instances of an FFN + GELU kernel
 * with per-instance row counts against a double-precision scalar
 * reference, under every policy with 1 and 2 threads; the whole batch
 * equals each instance run alone; the arguments in every mode (a parameter
 * passed once, contiguous rows from an earlier batch, row pointers, a
 * strided slice copied); a batch is one kernel launch; chains of calls;
 * and misuse (arity, shapes, unsupported kernels) as errors naming the
 * argument. Skipped with a note when no C compiler exists.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/jit.h"
#include "codegen/kernel_api.h"
#include "harness.h"
#include "sheaf_train.h"

static const char SRC[] =
    "kernel ffn(x: f32[N, D], W: f32[D, F], b: f32[F]) -> f32[N, F] {\n"
    "  y(n, f) +=! x(n, d) * W(d, f)\n  out(n, f) = gelu(y(n, f) + b(f))\n}\n"
    "kernel vaxpy(a: f32[K], x: f32[K]) -> f32[K] { y(k) = 2 * a(k) + x(k) }\n"
    "kernel rsum(x: f32[M, K]) -> f32[M] { s(m) +=! x(m, k) }\n"
    "kernel attn(q: f32[B, L(b), D], L: i32[B]) -> f32[B, D] { o(b, d) +=! q(b, l, d) }\n"
    "kernel two(x: f32[K]) -> (u: f32[K], v: f32[K]) { u(k) = x(k); v(k) = -x(k) }\n"
    "kernel gram(x: f32[N, D]) -> f32[D, D] { g(i, j) +=! x(n, i) * x(n, j) }\n"
    "kernel gate(x: f32[N, D], Wg: f32[D, F], Wh: f32[D, F]) -> f32[N, F] {\n"
    "  g(n, f) +=! x(n, d) * Wg(d, f)\n  h(n, f) +=! x(n, d) * Wh(d, f)\n"
    "  out(n, f) = sigmoid(g(n, f)) * tanh(h(n, f))\n}\n"
    "kernel ffnln(x: f32[N, D], W: f32[D, F], b: f32[F], ga: f32[F], be: f32[F]) -> f32[N, F] {\n"
    "  y(n, f) +=! x(n, d) * W(d, f)\n  z(n, f) = y(n, f) + b(f)\n"
    "  mu(n) +=! z(n, f) / F\n  c(n, f) = z(n, f) - mu(n)\n  var(n) +=! c(n, f) * c(n, f) / F\n"
    "  out(n, f) = gelu(c(n, f) * rsqrt(var(n) + 1e-5) * ga(f) + be(f))\n}\n";

static sheaf_kernel *compile(sheaf_ctx *ctx, const char *name) {
  sheaf_kernel *k = NULL;
  /* eager: th_cache_dir (harness.h) */
  sh_kernel_opts o = {.eager = true, .cache_dir = th_cache_dir("kbatch-cache")};
  if (!CHECK_OK(ctx, sh_kernel_compile_opts(ctx, SRC, strlen(SRC), name, &o, &k))) return NULL;
  return k;
}

enum { NI = 64, D = 17, F = 19, MAXN = 5 };

static float xs[NI][MAXN * D], Wd[D * F], bd[F];
static int rows_of(int i) { return 1 + (i * 7) % MAXN; } /* 1 .. 5 rows per instance */

static void fill(void) {
  for (int i = 0; i < NI; i++)
    for (int j = 0; j < MAXN * D; j++) xs[i][j] = (float)(((i * 31 + j * 7) % 23) - 11) / 11.0f;
  for (int i = 0; i < D * F; i++) Wd[i] = (float)((i * 5 % 19) - 9) / 19.0f;
  for (int i = 0; i < F; i++) bd[i] = (float)(i % 5) / 5.0f - 0.4f;
}

/* Largest relative error of instance i's output against the reference. */
static double ffn_err(int i, const sheaf_value_view *v, bool tanh_in) {
  int n = rows_of(i);
  if (v->rank != 2 || v->shape[0] != n || v->shape[1] != F) return 1e30;
  double worst = 0;
  for (int r = 0; r < n; r++)
    for (int f = 0; f < F; f++) {
      double y = bd[f];
      for (int d = 0; d < D; d++) {
        double x = xs[i][r * D + d];
        y += (tanh_in ? tanh(x) : x) * Wd[d * F + f];
      }
      double ref = 0.5 * y * erfc(-y / sqrt(2.0));
      double e = fabs(v->data[r * F + f] - ref) / fmax(1.0, fabs(ref));
      if (!(e <= worst)) worst = e;
    }
  return worst;
}

typedef struct setup {
  sheaf_model *m;
  sheaf_param W, b;
} setup;

static bool make_model(sheaf_ctx *ctx, setup *s) {
  if (!CHECK_OK(ctx, sheaf_model_create(ctx, &s->m))) return false;
  s->W = th_param(ctx, s->m, "W", 2, D, F);
  s->b = th_param(ctx, s->m, "b", 1, F, 0);
  memcpy(sheaf_model_param_data(s->m, s->W, NULL, NULL), Wd, sizeof Wd);
  memcpy(sheaf_model_param_data(s->m, s->b, NULL, NULL), bd, sizeof bd);
  return true;
}

/* Instance i's call: x (mode 0: an input; 1: tanh of it, rows of one batch
 * block; 2: a column slice of a wider input, strided; 3: an input, with W an
 * input of each instance, so the rows are not stacked: the batch loop with
 * W as row pointers) then ffn(x, W, b). */
static sheaf_expr build(sheaf_graph *g, const setup *s, sheaf_kernel *k, int i, int mode) {
  int64_t n = rows_of(i);
  sheaf_expr x;
  if (mode == 2) {
    float wide[MAXN * (D + 3)];
    for (int r = 0; r < n; r++)
      for (int c = 0; c < D + 3; c++) wide[r * (D + 3) + c] = c < 2 || c >= D + 2 ? 99.0f : xs[i][r * D + c - 2];
    x = sheaf_slice(g, sheaf_input(g, 2, (int64_t[]){n, D + 3}, wide), 2, D + 2);
  } else {
    x = sheaf_input(g, 2, (int64_t[]){n, D}, xs[i]);
    if (mode == 1) x = sheaf_tanh(g, x);
  }
  sheaf_expr W = mode == 3 ? sheaf_input(g, 2, (int64_t[]){D, F}, Wd) : sheaf_parameter(g, s->W);
  sheaf_expr in[3] = {x, W, sheaf_parameter(g, s->b)};
  return sheaf_kernel_call(g, k, 3, in);
}

TEST(kernel_batch_ffn_every_policy_and_thread_count) {
  if (!th_have_jit_cc("kernel_batch_ffn_every_policy_and_thread_count")) return;
  sheaf_ctx *ctx = th_ctx();
  fill();
  sheaf_kernel *k = compile(ctx, "ffn");
  REQUIRE(k != NULL);
  setup s;
  REQUIRE(make_model(ctx, &s));
  static float alone[4][NI][MAXN * F]; /* each instance in a graph of its own */
  const sheaf_policy pols[] = {SHEAF_POLICY_SHEAF, SHEAF_POLICY_NONE, SHEAF_POLICY_DEPTH, SHEAF_POLICY_AGENDA};
  for (int mode = 0; mode < 4; mode++) {
    sheaf_graph *g;
    REQUIRE_OK(ctx, sheaf_graph_create(s.m, &(sheaf_graph_opts){.threads = 1}, &g));
    for (int i = 0; i < NI; i++) {
      sheaf_expr y = build(g, &s, k, i, mode);
      REQUIRE_OK(ctx, sheaf_graph_flush(g));
      sheaf_value_view v;
      REQUIRE_OK(ctx, sheaf_value(g, y, &v));
      CHECK(ffn_err(i, &v, mode == 1) < 2e-5);
      memcpy(alone[mode][i], v.data, sizeof(float) * (size_t)(v.shape[0] * v.shape[1]));
      REQUIRE_OK(ctx, sheaf_graph_reset(g));
    }
    sheaf_graph_free(g);
  }
  for (int p = 0; p < 4; p++)
    for (int threads = 1; threads <= 2; threads++)
      for (int mode = 0; mode < 4; mode++) {
        sheaf_graph *g;
        REQUIRE_OK(ctx, sheaf_graph_create(s.m, &(sheaf_graph_opts){.policy = pols[p], .threads = threads}, &g));
        sheaf_expr y[NI];
        for (int i = 0; i < NI; i++) y[i] = build(g, &s, k, i, mode);
        sheaf_graph_stats before, after;
        sheaf_graph_get_stats(g, &before);
        REQUIRE_OK(ctx, sheaf_graph_flush(g));
        sheaf_graph_get_stats(g, &after);
        /* one launch for the 64 calls (plus one for the 64 tanh in mode 1) */
        if (pols[p] != SHEAF_POLICY_NONE) CHECK_EQ_INT((int)(after.batches - before.batches), mode == 1 ? 2 : 1);
        double worst = 0, diff = 0;
        for (int i = 0; i < NI; i++) {
          sheaf_value_view v;
          REQUIRE_OK(ctx, sheaf_value(g, y[i], &v));
          double e = ffn_err(i, &v, mode == 1);
          if (!(e <= worst)) worst = e;
          for (int j = 0; j < rows_of(i) * F; j++) diff = fmax(diff, fabs(v.data[j] - alone[mode][i][j]));
        }
        if (!CHECK(worst < 2e-5) || !CHECK(diff <= 1e-6))
          printf("policy %d, %d threads, mode %d: error %g, vs alone %g\n", p, threads, mode, worst, diff);
        sheaf_graph_free(g);
      }
  sheaf_model_free(s.m);
  sheaf_kernel_free(k);
}

/* Calls feeding calls and builtins: z = rsum(ffn(x)) + vaxpy(rsum(...), ...). */
TEST(kernel_batch_chains_with_builtins) {
  if (!th_have_jit_cc("kernel_batch_chains_with_builtins")) return;
  sheaf_ctx *ctx = th_ctx();
  fill();
  sheaf_kernel *ffn = compile(ctx, "ffn"), *ax = compile(ctx, "vaxpy"), *rs = compile(ctx, "rsum");
  REQUIRE(ffn && ax && rs);
  setup s;
  REQUIRE(make_model(ctx, &s));
  sheaf_graph *g;
  REQUIRE_OK(ctx, sheaf_graph_create(s.m, &(sheaf_graph_opts){.threads = 2}, &g));
  sheaf_expr out[NI];
  for (int i = 0; i < NI; i++) {
    sheaf_expr h = build(g, &s, ffn, i, 0);                   /* [n, F] */
    sheaf_expr r = sheaf_kernel_call(g, rs, 1, &h);           /* [n] */
    sheaf_expr two[2] = {r, sheaf_sum(g, h)};                 /* builtin row sums: the same */
    out[i] = sheaf_kernel_call(g, ax, 2, two);                /* 2 r + r = 3 r */
  }
  REQUIRE_OK(ctx, sheaf_graph_flush(g));
  double worst = 0;
  for (int i = 0; i < NI; i++) {
    sheaf_value_view v;
    REQUIRE_OK(ctx, sheaf_value(g, out[i], &v));
    REQUIRE_EQ_INT(v.rank, 1);
    REQUIRE_EQ_INT((int)v.shape[0], rows_of(i));
    for (int r = 0; r < rows_of(i); r++) {
      double sum = 0;
      for (int f = 0; f < F; f++) {
        double y = bd[f];
        for (int d = 0; d < D; d++) y += (double)xs[i][r * D + d] * Wd[d * F + f];
        sum += 0.5 * y * erfc(-y / sqrt(2.0));
      }
      worst = fmax(worst, fabs(v.data[r] - 3 * sum) / fmax(1.0, fabs(3 * sum)));
    }
  }
  CHECK(worst < 1e-5);
  sheaf_graph_free(g);
  sheaf_model_free(s.m);
  sheaf_kernel_free(ffn);
  sheaf_kernel_free(ax);
  sheaf_kernel_free(rs);
}

/* A kernel whose rows are not independent (a reduction over N) runs
 * through the batch loop, with sizes that differ per instance. */
TEST(kernel_batch_loop_with_per_instance_sizes) {
  if (!th_have_jit_cc("kernel_batch_loop_with_per_instance_sizes")) return;
  sheaf_ctx *ctx = th_ctx();
  fill();
  sheaf_kernel *k = compile(ctx, "gram");
  REQUIRE(k != NULL);
  CHECK_EQ_INT(sh_kernel_row_size(sh_kernel_of(k)), -1);
  sheaf_kernel *f = compile(ctx, "ffn");
  REQUIRE(f != NULL);
  CHECK_EQ_INT(sh_kernel_row_size(sh_kernel_of(f)), 0); /* N */
  sheaf_kernel_free(f);
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  for (int threads = 1; threads <= 2; threads++) {
    sheaf_graph *g;
    REQUIRE_OK(ctx, sheaf_graph_create(m, &(sheaf_graph_opts){.threads = threads}, &g));
    sheaf_expr y[NI];
    for (int i = 0; i < NI; i++) {
      sheaf_expr x = sheaf_input(g, 2, (int64_t[]){rows_of(i), 3 + i % 4}, xs[i]);
      y[i] = sheaf_kernel_call(g, k, 1, &x);
    }
    REQUIRE_OK(ctx, sheaf_graph_flush(g));
    double worst = 0;
    for (int i = 0; i < NI; i++) {
      sheaf_value_view v;
      REQUIRE_OK(ctx, sheaf_value(g, y[i], &v));
      int dd = 3 + i % 4;
      REQUIRE(v.rank == 2 && v.shape[0] == dd && v.shape[1] == dd);
      for (int a = 0; a < dd; a++)
        for (int b = 0; b < dd; b++) {
          double r = 0;
          for (int n = 0; n < rows_of(i); n++) r += (double)xs[i][n * dd + a] * xs[i][n * dd + b];
          worst = fmax(worst, fabs(v.data[a * dd + b] - r) / fmax(1.0, fabs(r)));
        }
    }
    CHECK(worst < 1e-5);
    sheaf_graph_free(g);
  }
  sheaf_model_free(m);
  sheaf_kernel_free(k);
}

/* A GEMM, then row passes (layernorm) and GELU: the product is a temporary
 * of the generated code, taken from the kernel's kept blocks. 64 instances
 * of 1..5 rows against a double reference and against the same computation
 * as builtins (affine -> layer_norm -> gelu), every policy, 1 and 2
 * threads; a flush after the first allocates nothing of the temporary's
 * size (the block is kept across batches, not allocated per batch). */
typedef struct count_alloc {
  size_t big;  /* allocations of at least min bytes */
  size_t min;
} count_alloc;
static void *ca_alloc(void *user, size_t size, size_t align) {
  count_alloc *c = user;
  if (size >= c->min) c->big++;
  return aligned_alloc(align, (size + align - 1) / align * align);
}
static void ca_free(void *user, void *p, size_t size) {
  (void)user, (void)size;
  free(p);
}

TEST(kernel_batch_layernorm_after_gemm) {
  if (!th_have_jit_cc("kernel_batch_layernorm_after_gemm")) return;
  fill();
  count_alloc ca = {0, 0};
  sheaf_allocator al = {ca_alloc, ca_free, &ca};
  sheaf_ctx *ctx;
  REQUIRE(sheaf_ctx_create(&(sheaf_ctx_options){.threads = 2, .allocator = &al}, &ctx, NULL, 0) == SHEAF_OK);
  sheaf_kernel *k = compile(ctx, "ffnln");
  REQUIRE(k != NULL);
  CHECK_EQ_INT(sh_kernel_row_size(sh_kernel_of(k)), 0);
  setup s;
  REQUIRE(make_model(ctx, &s));
  sheaf_param ga = th_param(ctx, s.m, "ga", 1, F, 0), be = th_param(ctx, s.m, "be", 1, F, 0);
  float gad[F], bed[F];
  for (int f = 0; f < F; f++) gad[f] = 0.5f + (float)(f % 7) / 7.0f, bed[f] = (float)(f % 3) / 3.0f - 0.3f;
  memcpy(sheaf_model_param_data(s.m, ga, NULL, NULL), gad, sizeof gad);
  memcpy(sheaf_model_param_data(s.m, be, NULL, NULL), bed, sizeof bed);
  int total = 0;
  for (int i = 0; i < NI; i++) total += rows_of(i);
  const sheaf_policy pols[] = {SHEAF_POLICY_SHEAF, SHEAF_POLICY_NONE, SHEAF_POLICY_DEPTH, SHEAF_POLICY_AGENDA};
  for (int p = 0; p < 4; p++)
    for (int threads = 1; threads <= 2; threads++) {
      sheaf_graph *g;
      REQUIRE_OK(ctx, sheaf_graph_create(s.m, &(sheaf_graph_opts){.policy = pols[p], .threads = threads}, &g));
      for (int run = 0; run < 3; run++) {
        REQUIRE_OK(ctx, sheaf_graph_reset(g));
        sheaf_expr y[NI], r[NI];
        sheaf_expr in[5] = {SH_NULL_EXPR, sheaf_parameter(g, s.W), sheaf_parameter(g, s.b), sheaf_parameter(g, ga),
                            sheaf_parameter(g, be)};
        for (int i = 0; i < NI; i++) {
          in[0] = sheaf_input(g, 2, (int64_t[]){rows_of(i), D}, xs[i]);
          y[i] = sheaf_kernel_call(g, k, 5, in);
          r[i] = sheaf_gelu(g, sheaf_layer_norm(g, sheaf_affine(g, s.W, in[0], s.b), in[3], in[4], 1e-5f));
        }
        ca.min = sizeof(float) * (size_t)total * F, ca.big = 0;
        REQUIRE_OK(ctx, sheaf_graph_flush(g));
        if (run == 2 && !CHECK(ca.big == 0)) printf("policy %d, %d threads: %zu allocations\n", p, threads, ca.big);
        double worst = 0, diff = 0;
        for (int i = 0; i < NI; i++) {
          sheaf_value_view v, w;
          REQUIRE_OK(ctx, sheaf_value(g, y[i], &v));
          REQUIRE_OK(ctx, sheaf_value(g, r[i], &w));
          REQUIRE(v.rank == 2 && v.shape[0] == rows_of(i) && v.shape[1] == F);
          for (int n = 0; n < rows_of(i); n++) {
            double z[F], mu = 0, var = 0;
            for (int f = 0; f < F; f++) {
              z[f] = bd[f];
              for (int d = 0; d < D; d++) z[f] += (double)xs[i][n * D + d] * Wd[d * F + f];
              mu += z[f] / F;
            }
            for (int f = 0; f < F; f++) var += (z[f] - mu) * (z[f] - mu) / F;
            for (int f = 0; f < F; f++) {
              double t = (z[f] - mu) / sqrt(var + 1e-5) * gad[f] + bed[f];
              double ref = 0.5 * t * erfc(-t / sqrt(2.0));
              worst = fmax(worst, fabs(v.data[n * F + f] - ref) / fmax(1.0, fabs(ref)));
              diff = fmax(diff, fabs(v.data[n * F + f] - w.data[n * F + f]));
            }
          }
        }
        if (!CHECK(worst < 2e-5) || !CHECK(diff < 1e-5))
          printf("policy %d, %d threads: error %g, vs builtins %g\n", p, threads, worst, diff);
      }
      sheaf_graph_free(g);
    }
  sheaf_model_free(s.m);
  sheaf_kernel_free(k);
  sheaf_ctx_free(ctx);
}

/* Packs of input i by k and its variants (a 1-row sheaf_kernel_run runs the
 * few-rows variant, which packs its own copy: kernel_fewrows.c). */
static int packs_all(const sheaf_kernel *k, int i) {
  long n = sh_kernel_pack_count(k, i);
  for (int v = 0; v < sh_kernel_n_variants(k); v++) n += sh_kernel_pack_count(sh_kernel_variant(k, v), i);
  return (int)n;
}

/* One kernel with several weights (two layers' W in one batch, kept across
 * flushes) and used by sheaf_kernel_run as well: each weight is packed once,
 * not on every switch (the batched calls keep a copy per weight, apart from
 * the run path's). Results equal the builtins (affine -> gelu). */
TEST(kernel_batch_weights_kept_per_layer) {
  if (!th_have_jit_cc("kernel_batch_weights_kept_per_layer")) return;
  sheaf_ctx *ctx = th_ctx();
  fill();
  sheaf_kernel *k = compile(ctx, "ffn");
  REQUIRE(k != NULL);
  REQUIRE(sh_kernel_input_packed(k, 1));
  setup s;
  REQUIRE(make_model(ctx, &s));
  sheaf_param W2 = th_param(ctx, s.m, "W2", 2, D, F);
  sheaf_graph *g;
  REQUIRE_OK(ctx, sheaf_graph_create(s.m, NULL, &g));
  static float out[MAXN * F];
  int want = 2; /* W and W2, once each */
  for (int flush = 0; flush < 3; flush++) {
    REQUIRE_OK(ctx, sheaf_graph_reset(g));
    sheaf_expr y[2][NI], r[2][NI];
    sheaf_expr in[3] = {SH_NULL_EXPR, sheaf_parameter(g, s.W), sheaf_parameter(g, s.b)};
    sheaf_expr w2 = sheaf_parameter(g, W2);
    for (int i = 0; i < NI; i++) {
      in[0] = sheaf_input(g, 2, (int64_t[]){rows_of(i), D}, xs[i]);
      in[1] = i % 2 ? w2 : sheaf_parameter(g, s.W); /* the instances alternate the weights */
      y[i % 2][i] = sheaf_kernel_call(g, k, 3, in);
      r[i % 2][i] = sheaf_gelu(g, sheaf_affine(g, i % 2 ? W2 : s.W, in[0], s.b));
    }
    REQUIRE_OK(ctx, sheaf_graph_flush(g));
    CHECK_EQ_INT(packs_all(k, 1), want); /* nothing repacked */
    double diff = 0;
    for (int i = 0; i < NI; i++) {
      sheaf_value_view v, w;
      REQUIRE_OK(ctx, sheaf_value(g, y[i % 2][i], &v));
      REQUIRE_OK(ctx, sheaf_value(g, r[i % 2][i], &w));
      for (int j = 0; j < rows_of(i) * F; j++) diff = fmax(diff, fabs(v.data[j] - w.data[j]));
    }
    CHECK(diff < 1e-5);
    if (flush == 1) { /* the run path (its own kept copy) in between: the calls' copies stay */
      sheaf_kernel_set_weight_version(k, 1, 7);
      sheaf_kernel_arg a[4] = {{SHEAF_KERNEL_F32, xs[0], (size_t)D, 2, (int64_t[]){1, D}},
                               {SHEAF_KERNEL_F32, Wd, (size_t)(D * F), 2, (int64_t[]){D, F}},
                               {SHEAF_KERNEL_F32, bd, (size_t)F, 1, (int64_t[]){F}},
                               {SHEAF_KERNEL_F32, out, (size_t)F, 0, NULL}};
      REQUIRE_OK(ctx, sheaf_kernel_run(k, a, 4));
      CHECK_EQ_INT(packs_all(k, 1), ++want);
    }
  }
  sheaf_graph_free(g);
  sheaf_model_free(s.m);
  sheaf_kernel_free(k);
}

TEST(kernel_batch_misuse_is_an_error) {
  if (!th_have_jit_cc("kernel_batch_misuse_is_an_error")) return;
  sheaf_ctx *ctx = th_ctx();
  fill();
  sheaf_kernel *ffn = compile(ctx, "ffn"), *at = compile(ctx, "attn"), *two = compile(ctx, "two");
  REQUIRE(ffn && at && two);
  setup s;
  REQUIRE(make_model(ctx, &s));
  sheaf_graph *g;
  REQUIRE_OK(ctx, sheaf_graph_create(s.m, NULL, &g));
  struct {
    int kernel, n_in, what;
    sheaf_status st;
    const char *msg;
  } cases[] = {
      {0, 2, 0, SHEAF_ERR_INVALID_ARG, "sheaf_kernel_call: kernel 'ffn' takes 3 inputs, not 2"},
      {0, 3, 1, SHEAF_ERR_SHAPE,
       "sheaf_kernel_call: kernel 'ffn': argument 2 ('W') has shape [19, 17], but the kernel needs [17, 17]"},
      {0, 3, 2, SHEAF_ERR_SHAPE, "kernel 'ffn': argument 1 ('x') has shape [17], but the kernel needs"},
      {1, 2, 0, SHEAF_ERR_UNSUPPORTED,
       "sheaf_kernel_call: kernel 'attn' cannot be a graph op: its input 'q' is f32 of rank 3, ragged"},
      {2, 1, 0, SHEAF_ERR_UNSUPPORTED, "kernel 'two' cannot be a graph op: it has 2 outputs"},
      {3, 0, 0, SHEAF_ERR_INVALID_ARG, "sheaf_kernel_call: k is NULL"},
  };
  sheaf_kernel *ks[] = {ffn, at, two, NULL};
  float z[64 * 64] = {0};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    sheaf_expr x = sheaf_input(g, 2, (int64_t[]){3, D}, z);
    sheaf_expr W = cases[c].what == 1 ? sheaf_input(g, 2, (int64_t[]){F, D}, z) : sheaf_parameter(g, s.W);
    if (cases[c].what == 2) x = sheaf_input_vector(g, D, z);
    sheaf_expr in[3] = {x, W, sheaf_parameter(g, s.b)};
    sheaf_expr y = sheaf_kernel_call(g, ks[cases[c].kernel], cases[c].n_in, in);
    CHECK(sheaf_expr_is_null(y));
    CHECK_STATUS(ctx, sheaf_graph_status(g), cases[c].st);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), cases[c].msg);
    REQUIRE_OK(ctx, sheaf_graph_reset(g));
  }
  sheaf_graph_free(g);
  sheaf_model_free(s.m);
  sheaf_kernel_free(ffn);
  sheaf_kernel_free(at);
  sheaf_kernel_free(two);
}

/* ------------------------------------------------ .sf models calling kernels */

static const char KMODEL[] =
    "param emb: f32[V, E]\n"
    "param W1: f32[E, H]\n"
    "param b1: f32[H]\n"
    "param Wg: f32[H, H]\n"
    "param Wh: f32[H, H]\n"
    "param q: f32[H]\n"
    "kernel ffn(x: f32[N, D], W: f32[D, F], b: f32[F]) -> f32[N, F] {\n"
    "  y(n, f) +=! x(n, d) * W(d, f)\n"
    "  out(n, f) = gelu(y(n, f) + b(f))\n"
    "}\n"
    "kernel gated(x: f32[D], Wg: f32[D, F], Wh: f32[D, F]) -> f32[F] {\n"
    "  g(f) +=! x(d) * Wg(d, f)\n"
    "  h(f) +=! x(d) * Wh(d, f)\n"
    "  out(f) = sigmoid(g(f)) * tanh(h(f))\n"
    "}\n"
    "kernel scale_add(a: f32[K], b: f32[K]) -> f32[K] { y(k) = 0.5 * a(k) + b(k) }\n"
    "fn main(ws: list[i32]) -> (f32[H], list[f32[H]]) {\n"
    "  let xs = ffn(stack(for w in ws { emb[w] }), W1, b1);\n"
    "  let hs = for w in ws { gated(gelu(emb[w] @ W1 + b1), Wg, Wh) };\n"
    "  let ctx = softmax(for h in hs { sum(h * q) }) @ xs;\n"
    "  (scale_add(ctx, q), for h in hs { scale_add(h, ctx) })\n"
    "}\n";

/* The same model with builtins. */
static const char BMODEL[] =
    "param emb: f32[V, E]\n"
    "param W1: f32[E, H]\n"
    "param b1: f32[H]\n"
    "param Wg: f32[H, H]\n"
    "param Wh: f32[H, H]\n"
    "param q: f32[H]\n"
    "fn main(ws: list[i32]) -> (f32[H], list[f32[H]]) {\n"
    "  let xs = gelu(stack(for w in ws { emb[w] }) @ W1 + b1);\n"
    "  let hs = for w in ws { let x = gelu(emb[w] @ W1 + b1); sigmoid(x @ Wg) * tanh(x @ Wh) };\n"
    "  let ctx = softmax(for h in hs { sum(h * q) }) @ xs;\n"
    "  (0.5 * ctx + q, for h in hs { 0.5 * h + ctx })\n"
    "}\n";

enum { NS = 64, VOCAB = 50 };

/* Runs `src` on NS sentences; outputs into out[sentence][...] (floats in order). */
static bool run_model(sheaf_ctx *ctx, const char *file, const char *src, sheaf_policy pol, int threads, int batch,
                      float (*out)[16 * 8]) {
  const char *path = th_write_tmp(file, src, strlen(src));
  static int32_t wbuf[NS][7];
  const int32_t *words[NS];
  int64_t lens[NS];
  for (int i = 0; i < NS; i++) {
    lens[i] = 1 + (i * 5) % 6;
    for (int j = 0; j < lens[i]; j++) wbuf[i][j] = (i * 13 + j * 7) % (VOCAB - 1);
    words[i] = wbuf[i];
  }
  const char *names[2] = {"E", "H"};
  int64_t values[2] = {8, 16};
  sheaf_program_opts o;
  memset(&o, 0, sizeof o);
  o.seed = 5;
  o.vocab = VOCAB;
  o.n_sizes = 2, o.size_names = names, o.size_values = values;
  o.runner.threads = threads;
  o.runner.batch = batch;
  o.runner.policy = pol;
  sheaf_program *p;
  if (!CHECK_OK(ctx, sheaf_program_load(ctx, path, &o, &p))) return false;
  bool ok = CHECK_OK(ctx, sheaf_program_run_words(p, NS, words, lens));
  for (int i = 0; ok && i < NS; i++) {
    sheaf_value_view v[8];
    size_t k = sheaf_program_outputs(p, i, 8, v);
    ok = CHECK_EQ_INT((int)k, 1 + (int)lens[i]);
    for (size_t t = 0; ok && t < k; t++) {
      ok = CHECK_EQ_INT((int)v[t].shape[0], 16);
      memcpy(out[i] + t * 16, v[t].data, 16 * sizeof(float));
    }
  }
  sheaf_program_free(p);
  return ok;
}

TEST(kernel_batch_sf_model_equals_builtins) {
  if (!th_have_jit_cc("kernel_batch_sf_model_equals_builtins")) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("kbatch-cache"), 1); /* this test's child process only */
  sheaf_ctx *ctx = th_ctx();
  static float ref[NS][16 * 8], got[NS][16 * 8], one[NS][16 * 8];
  REQUIRE(run_model(ctx, "bmodel.sf", BMODEL, SHEAF_POLICY_SHEAF, 1, NS, ref));
  REQUIRE(run_model(ctx, "kmodel.sf", KMODEL, SHEAF_POLICY_SHEAF, 1, 1, one)); /* one at a time */
  const sheaf_policy pols[] = {SHEAF_POLICY_SHEAF, SHEAF_POLICY_NONE, SHEAF_POLICY_DEPTH, SHEAF_POLICY_AGENDA};
  for (int p = 0; p < 4; p++)
    for (int threads = 1; threads <= 2; threads++) {
      memset(got, 0, sizeof got);
      REQUIRE(run_model(ctx, "kmodel.sf", KMODEL, pols[p], threads, NS, got));
      double worst = 0, vs_one = 0;
      for (int i = 0; i < NS; i++)
        for (int j = 0; j < 16 * (2 + (i * 5) % 6); j++) {
          /* (if, not fmax: aarch64-linux-gnu-gcc 12's vectorizer crashes on
           * this two-fmax reduction, an internal compiler error) */
          double e = fabs(got[i][j] - ref[i][j]) / fmax(1.0, fabs(ref[i][j])), d = fabs(got[i][j] - one[i][j]);
          if (e > worst) worst = e;
          if (d > vs_one) vs_one = d;
        }
      if (!CHECK(worst <= 1e-5) || !CHECK(vs_one <= 1e-6))
        printf("policy %d, %d threads: vs builtins %g, vs one at a time %g\n", p, threads, worst, vs_one);
    }
}

/* A program compiles each kernel it calls once, at load; a second load
 * (another run) takes it from the cache: no new library. */
TEST(kernel_batch_sf_compiles_once_and_hits_the_cache) {
  if (!th_have_jit_cc("kernel_batch_sf_compiles_once_and_hits_the_cache")) return;
  char dir[512], vdir[600];
  snprintf(dir, sizeof dir, "%s", th_tmp_path("kbatch-own-cache"));
  snprintf(vdir, sizeof vdir, "%s/v1", dir);
  setenv("SHEAF_CACHE_DIR", dir, 1); /* this test's child process only */
  sheaf_ctx *ctx = th_ctx();
  static const char src[] = "param emb: f32[V, H]\n"
                            "kernel axpy(a: f32[N], x: f32[N]) -> f32[N] { y(i) = 2 * a(i) + x(i) }\n"
                            "kernel unused(a: f32[N]) -> f32[N] { y(i) = a(i) }\n"
                            "fn main(ws: list[i32]) -> f32[H] { axpy(emb[ws[0]], emb[ws[1]]) }\n";
  const char *path = th_write_tmp("once.sf", src, sizeof src - 1);
  const char *names[1] = {"H"};
  int64_t values[1] = {8};
  sheaf_program_opts o;
  memset(&o, 0, sizeof o);
  o.vocab = 10, o.n_sizes = 1, o.size_names = names, o.size_values = values;
  const int32_t w[2] = {3, 4};
  const int32_t *words[1] = {w};
  int64_t lens[1] = {2};
  for (int run = 0; run < 2; run++) {
    sheaf_program *p;
    REQUIRE_OK(ctx, sheaf_program_load(ctx, path, &o, &p));
    CHECK_EQ_SIZE(th_count_suffix(vdir, ".so"), 1); /* axpy only, compiled by the first load */
    CHECK_OK(ctx, sheaf_program_run_words(p, 1, words, lens));
    sheaf_value_view v[1];
    CHECK_EQ_SIZE(sheaf_program_outputs(p, 0, 1, v), 1);
    sheaf_param pe;
    REQUIRE_OK(ctx, sheaf_model_find(sheaf_program_model(p), "emb", &pe));
    const float *E = sheaf_model_param_data(sheaf_program_model(p), pe, NULL, NULL);
    double worst = 0;
    for (int j = 0; j < 8; j++) { /* (if, not fmax: see above) */
      double e = fabs(v[0].data[j] - (2.0 * E[3 * 8 + j] + E[4 * 8 + j]));
      if (e > worst) worst = e;
    }
    CHECK(worst < 1e-6);
    sheaf_program_free(p);
  }
}

/* Two packed weights (the gated unit's Wg and Wh, parameters) on 64
 * instances whose row counts differ from one to the next: each weight is
 * packed once for the whole batch and once over two flushes (the kept
 * copy, keyed on the parameter's version), the results equal a double
 * reference, and the batch releases the kept copies it read (a later
 * caller finds them free). */
TEST(kernel_batch_two_weights_packed_once_per_batch) {
  if (!th_have_jit_cc("kernel_batch_two_weights_packed_once_per_batch")) return;
  sheaf_ctx *ctx = th_ctx();
  fill();
  sheaf_kernel *k = compile(ctx, "gate");
  REQUIRE(k != NULL);
  REQUIRE(sh_kernel_input_packed(k, 1) && sh_kernel_input_packed(k, 2));
  static float wh[D * F];
  for (int i = 0; i < D * F; i++) wh[i] = (float)((i * 3 % 13) - 6) / 13.0f;
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  sheaf_param Wg = th_param(ctx, m, "Wg", 2, D, F), Wh = th_param(ctx, m, "Wh", 2, D, F);
  REQUIRE_OK(ctx, sheaf_model_param_set(m, Wg, Wd, D * F));
  REQUIRE_OK(ctx, sheaf_model_param_set(m, Wh, wh, D * F));
  sheaf_graph *g;
  REQUIRE_OK(ctx, sheaf_graph_create(m, NULL, &g));
  for (int flush = 0; flush < 2; flush++) {
    REQUIRE_OK(ctx, sheaf_graph_reset(g));
    sheaf_expr y[NI];
    for (int i = 0; i < NI; i++) {
      sheaf_expr in[3] = {sheaf_input(g, 2, (int64_t[]){rows_of(i), D}, xs[i]), sheaf_parameter(g, Wg),
                          sheaf_parameter(g, Wh)};
      y[i] = sheaf_kernel_call(g, k, 3, in);
    }
    REQUIRE_OK(ctx, sheaf_graph_flush(g));
    CHECK_EQ_INT(sh_kernel_pack_count(k, 1), 1);
    CHECK_EQ_INT(sh_kernel_pack_count(k, 2), 1);
    double worst = 0;
    for (int i = 0; i < NI; i++) {
      sheaf_value_view v;
      REQUIRE_OK(ctx, sheaf_value(g, y[i], &v));
      REQUIRE(v.rank == 2 && v.shape[0] == rows_of(i) && v.shape[1] == F);
      for (int r = 0; r < rows_of(i); r++)
        for (int f = 0; f < F; f++) {
          double a = 0, b = 0;
          for (int d = 0; d < D; d++) {
            a += (double)xs[i][r * D + d] * Wd[d * F + f];
            b += (double)xs[i][r * D + d] * wh[d * F + f];
          }
          double ref = 1 / (1 + exp(-a)) * tanh(b);
          worst = fmax(worst, fabs(v.data[r * F + f] - ref));
        }
    }
    CHECK(worst < 1e-5);
  }
  /* nothing still holds the kept copies: a caller without scratch gets them */
  int64_t sizes[3] = {1, D, F};
  for (int j = 1; j <= 2; j++) {
    const float *packed = NULL;
    bool held = false;
    CHECK_OK(ctx, sh_kernel_weight_get(k, j, sizes, j == 1 ? Wd : wh, D, F, 99, NULL, &packed, &held));
    CHECK(held && packed);
    if (held) sh_kernel_weight_put(k, j);
  }
  sheaf_graph_free(g);
  sheaf_model_free(m);
  sheaf_kernel_free(k);
}

/* ------------------------------------------- weight groups, kept copies */

/* Instance i of ffn(x_i, W_w, b) against the double reference: the GELU of
 * x_i · W + b with W the given values. */
static double ffn_ref_err(int i, const sheaf_value_view *v, const float *W) {
  int n = rows_of(i);
  if (v->rank != 2 || v->shape[0] != n || v->shape[1] != F) return 1e30;
  double worst = 0;
  for (int r = 0; r < n; r++)
    for (int f = 0; f < F; f++) {
      double y = bd[f];
      for (int d = 0; d < D; d++) y += (double)xs[i][r * D + d] * W[d * F + f];
      double ref = 0.5 * y * erfc(-y / sqrt(2.0));
      double e = fabs(v->data[r * F + f] - ref) / fmax(1.0, fabs(ref));
      if (!(e <= worst)) worst = e;
    }
  return worst;
}

enum { RV_W = 20 };
static float rv_w[RV_W][D * F];

/* One batch of ffn calls on NI instances where instance i passes weight
 * wsel(i) of RV_W parameters (or, for wsel < 0, weight -wsel-1's values
 * as a graph input: no kept copy), checked against the reference. */
static bool rv_batch(sheaf_ctx *ctx, sheaf_graph *g, sheaf_kernel *k, const sheaf_param *W, sheaf_param b,
                     int n_groups, int n_inst, bool some_inputs) {
  if (!CHECK_OK(ctx, sheaf_graph_reset(g))) return false;
  sheaf_expr y[NI];
  int w[NI];
  for (int i = 0; i < n_inst; i++) {
    w[i] = i < n_groups ? i : (i * 7) % n_groups; /* every group once, then some again */
    sheaf_expr in[3] = {sheaf_input(g, 2, (int64_t[]){rows_of(i), D}, xs[i]), SH_NULL_EXPR, sheaf_parameter(g, b)};
    in[1] = some_inputs && i % 5 == 3 ? sheaf_input(g, 2, (int64_t[]){D, F}, rv_w[w[i]]) : sheaf_parameter(g, W[w[i]]);
    y[i] = sheaf_kernel_call(g, k, 3, in);
  }
  if (!CHECK_OK(ctx, sheaf_graph_flush(g))) return false;
  for (int i = 0; i < n_inst; i++) {
    sheaf_value_view v;
    if (!CHECK_OK(ctx, sheaf_value(g, y[i], &v))) return false;
    double e = ffn_ref_err(i, &v, rv_w[w[i]]);
    if (!(e < 1e-5))
      return th_fail(__FILE__, __LINE__, "groups %d instances %d: instance %d (weight %d) error %g", n_groups,
                     n_inst, i, w[i], e);
  }
  return true;
}

/* h-fused2's stacking groups and kept per-weight copies: 1, 2, 15, 16, 17
 * and 20 distinct weights in one bucket (over the 16 groups stacking
 * handles and the 8 kept copies), groups of one instance, weights given
 * as graph inputs among parameters, and every weight's values changed
 * between flushes (sheaf_model_param_set, then sheaf_model_param_data)
 * so that a stale kept copy would show; 1 and 2 threads. */
TEST(kernel_batch_weight_groups) {
  if (!th_have_jit_cc("kernel_batch_weight_groups")) return;
  sheaf_ctx *ctx = th_ctx();
  fill();
  sheaf_kernel *k = compile(ctx, "ffn");
  REQUIRE(k != NULL);
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  sheaf_param W[RV_W];
  uint64_t seed = 77;
  for (int j = 0; j < RV_W; j++) {
    char name[16];
    snprintf(name, sizeof name, "W%d", j);
    W[j] = th_param(ctx, m, name, 2, D, F);
    for (int e = 0; e < D * F; e++) rv_w[j][e] = th_frand(&seed);
    REQUIRE_OK(ctx, sheaf_model_param_set(m, W[j], rv_w[j], D * F));
  }
  sheaf_param b = th_param(ctx, m, "b", 1, F, 0);
  REQUIRE_OK(ctx, sheaf_model_param_set(m, b, bd, F));
  static const int groups[] = {1, 2, 15, 16, 17, 20};
  for (int threads = 1; threads <= 2; threads++) {
    sheaf_graph *g;
    sheaf_graph_opts go = {SHEAF_POLICY_DEPTH, threads, NULL};
    REQUIRE_OK(ctx, sheaf_graph_create(m, &go, &g));
    for (size_t q = 0; q < SH_ARRAY_LEN(groups); q++)
      for (int round = 0; round < 3; round++) {
        int ng = groups[q];
        if (!rv_batch(ctx, g, k, W, b, ng, ng + 1 + (round == 2 ? 30 : 0), round == 1)) goto out;
        /* new values for every weight: set for the even ones, written in place for the odd ones */
        for (int j = 0; j < RV_W; j++) {
          for (int e = 0; e < D * F; e++) rv_w[j][e] = th_frand(&seed);
          if (j % 2 == 0) {
            REQUIRE_OK(ctx, sheaf_model_param_set(m, W[j], rv_w[j], D * F));
          } else {
            float *p = sheaf_model_param_data(m, W[j], NULL, NULL);
            memcpy(p, rv_w[j], sizeof rv_w[j]);
          }
        }
      }
  out:
    sheaf_graph_free(g);
  }
  sheaf_model_free(m);
  sheaf_kernel_free(k);
}

/* A kept copy outlives the model whose parameter it packed: a second model
 * whose parameter lands on the same address with the same version history
 * (created, set once) must not read the first one's packed values. */
TEST(kernel_batch_kept_copy_new_model) {
  if (!th_have_jit_cc("kernel_batch_kept_copy_new_model")) return;
  sheaf_ctx *ctx = th_ctx();
  fill();
  sheaf_kernel *k = compile(ctx, "ffn");
  REQUIRE(k != NULL);
  uint64_t seed = 91;
  const void *prev = NULL;
  int same_address = 0;
  for (int round = 0; round < 6; round++) {
    sheaf_model *m;
    REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
    sheaf_param W[1] = {th_param(ctx, m, "W", 2, D, F)};
    for (int e = 0; e < D * F; e++) rv_w[0][e] = th_frand(&seed);
    REQUIRE_OK(ctx, sheaf_model_param_set(m, W[0], rv_w[0], D * F));
    const void *at = sheaf_model_param_values(m, W[0], NULL, NULL);
    same_address += at == prev;
    prev = at;
    sheaf_param b = th_param(ctx, m, "b", 1, F, 0);
    REQUIRE_OK(ctx, sheaf_model_param_set(m, b, bd, F));
    sheaf_graph *g;
    REQUIRE_OK(ctx, sheaf_graph_create(m, NULL, &g));
    bool ok = rv_batch(ctx, g, k, W, b, 1, 8, false);
    sheaf_graph_free(g);
    sheaf_model_free(m);
    if (!ok) break;
  }
  if (!same_address) fprintf(stderr, "note: kernel_batch_kept_copy_new_model: no address reused\n");
  sheaf_kernel_free(k);
}

typedef struct rv_par {
  sheaf_ctx *ctx;
  sheaf_graph *g[4];
  sheaf_kernel *k;
  const sheaf_param *W;
  sheaf_param b;
  int groups;
} rv_par;

static sheaf_status rv_par_shard(int s, int n, void *user) {
  (void)n;
  rv_par *p = user;
  /* each graph its own count of weights (over the kept copies together) */
  return rv_batch(p->ctx, p->g[s], p->k, p->W, p->b, p->groups - s, NI - 3 * s, s % 2 == 1) ? SHEAF_OK
                                                                                             : SHEAF_ERR_INTERNAL;
}

/* Graphs on several threads at once calling one kernel with 20 weights
 * between them (sheaf_run_shards, as the data-parallel trainer does): the
 * kernel's 8 kept copies and its temporaries are shared under its lock;
 * every instance still equals the reference. */
TEST(kernel_batch_calls_from_threads) {
  if (!th_have_jit_cc("kernel_batch_calls_from_threads")) return;
  sheaf_ctx_options co = {0};
  co.threads = 2;
  sheaf_ctx *ctx = NULL;
  REQUIRE(sheaf_ctx_create(&co, &ctx, NULL, 0) == SHEAF_OK);
  fill();
  sheaf_kernel *k = compile(ctx, "ffn");
  sheaf_model *m = NULL;
  rv_par p = {ctx, {NULL}, k, NULL, SHEAF_NO_PARAM, RV_W};
  sheaf_param W[RV_W];
  if (k && CHECK_OK(ctx, sheaf_model_create(ctx, &m))) {
    uint64_t seed = 123;
    bool ok = true;
    for (int j = 0; j < RV_W && ok; j++) {
      char name[16];
      snprintf(name, sizeof name, "W%d", j);
      W[j] = th_param(ctx, m, name, 2, D, F);
      for (int e = 0; e < D * F; e++) rv_w[j][e] = th_frand(&seed);
      ok = CHECK_OK(ctx, sheaf_model_param_set(m, W[j], rv_w[j], D * F));
    }
    p.W = W;
    p.b = th_param(ctx, m, "b", 1, F, 0);
    ok = ok && CHECK_OK(ctx, sheaf_model_param_set(m, p.b, bd, F));
    for (int s = 0; s < 4 && ok; s++) {
      sheaf_graph_opts go = {SHEAF_POLICY_DEPTH, 1, NULL};
      ok = CHECK_OK(ctx, sheaf_graph_create(m, &go, &p.g[s]));
    }
    for (int round = 0; round < 6 && ok; round++) {
      ok = CHECK_OK(ctx, sheaf_run_shards(ctx, 4, rv_par_shard, &p));
      for (int j = 0; j < RV_W && ok; j++) { /* new values between rounds */
        for (int e = 0; e < D * F; e++) rv_w[j][e] = th_frand(&seed);
        ok = CHECK_OK(ctx, sheaf_model_param_set(m, W[j], rv_w[j], D * F));
      }
    }
  }
  for (int s = 0; s < 4; s++) sheaf_graph_free(p.g[s]);
  sheaf_model_free(m);
  sheaf_kernel_free(k);
  sheaf_ctx_free(ctx);
}
