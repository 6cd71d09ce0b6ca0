/*
 * test_kernel_gather.c — gather indices in the kernel notation
 * (`emb(ids(n), e)`, docs/CODEGEN.md "Gathers"): an embedding lookup, a
 * label pick, the cross-entropy written with the pick (against the `where`
 * scan and a double reference), a gather inside a reduction, a gather
 * through a rank-2 index tensor and one varying along the inner loop, each through the scalar reference, the
 * loop-IR interpreter (lowered, then default-scheduled) and the emitted C
 * (sheaf_kernel_run and a plan) at every ISA the host runs, at sizes
 * below, at and above the tiles, with index values 0 and extent-1 present;
 * then every out-of-range value (-1, extent, INT32_MAX) fails with
 * SHEAF_ERR_INVALID_ARG naming the kernel, the element and the extent, in
 * every executor.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/kernel_api.h"
#include "codegen/lir_sched.h"
#include "codegen/tune.h"
#include "codegen/lower.h"
#include "harness.h"
#include "lang/kernel_ref.h"
#include "lang/parser.h"
#include "sheaf_kernel.h"

typedef struct gk {
  const char *src, *name;
} gk;

static const gk KS[] = {
    {"kernel lookup(emb: f32[V, E], ids: i32[N]) -> f32[N, E] {\n"
     "  out(n, e) = emb(ids(n), e)\n"
     "}\n",
     "lookup"},
    {"kernel pick(z: f32[N, F], lab: i32[N]) -> f32[N] {\n"
     "  p(n) = z(n, lab(n))\n"
     "}\n",
     "pick"},
    {"kernel xentpick(x: f32[N, D], W: f32[D, F], lab: i32[N]) -> f32[N] {\n"
     "  z(n, f) +=! x(n, d) * W(d, f)\n"
     "  m(n) max=! z(n, f)\n"
     "  s(n) +=! exp(z(n, f) - m(n))\n"
     "  loss(n) = log(s(n)) + m(n) - z(n, lab(n))\n"
     "}\n",
     "xentpick"},
    {"kernel red(w: f32[V], idx: i32[N, K], x: f32[N, K]) -> f32[N] {\n"
     "  s(n) +=! w(idx(n, k)) * x(n, k)\n"
     "}\n",
     "red"},
    {"kernel perm(x: f32[B, T, D], pm: i32[B, T]) -> f32[B, T, D] {\n"
     "  y(b, i, d) = x(b, pm(b, i), d) * 2 + x(b, i, d)\n"
     "}\n",
     "perm"},
    {"kernel gl(w: f32[V], idx: i32[N, K]) -> f32[N, K] {\n"
     "  g(n, k) = w(idx(n, k)) * 2\n"
     "}\n",
     "gl"},
};

static const int SIZES[] = {1, 3, 8, 17, 33};

/* Inputs at sizes (each size = sz, except mixed); i32 inputs hold values in
 * 0 .. ext-1 of what they index, with 0 and ext-1 present. */
typedef struct gcase {
  int n_in;
  sheaf_kernel_arg a[8];
  int64_t shapes[8][8];
  void *data[8];
  int64_t ext[8]; /* per i32 input: the extent its values index */
} gcase;

static int64_t aff(const sh_kaff *a, const int64_t *sizes) { return sh_lower_aff(a, sizes); }

/* The extent the gather values of input gi must stay below. */
static int64_t gather_ext(const sh_kexpr *e, int gi, const sh_kernel *k, const int64_t *sizes) {
  if (!e) return -1;
  if (e->kind == SH_KEXPR_ACCESS)
    for (int d = 0; d < k->tensors[e->tensor].rank; d++)
      if (e->idx[d].gather && e->idx[d].gather->tensor == gi)
        return aff(&k->tensors[e->tensor].dims[d].aff, sizes);
  int64_t r = gather_ext(e->a, gi, k, sizes);
  if (r < 0) r = gather_ext(e->b, gi, k, sizes);
  if (r < 0) r = gather_ext(e->c, gi, k, sizes);
  return r;
}

static void make_case(const sh_kernel *k, const int64_t *sizes, uint64_t *rng, gcase *c) {
  memset(c, 0, sizeof *c);
  c->n_in = k->n_inputs;
  for (int i = 0; i < k->n_inputs; i++) {
    const sh_ktensor *t = &k->tensors[i];
    int64_t numel = 1;
    for (int d = 0; d < t->rank; d++) numel *= c->shapes[i][d] = aff(&t->dims[d].aff, sizes);
    if (t->dtype == SH_KDTYPE_I32) {
      int64_t ext = -1;
      for (int s = 0; s < k->n_stmts && ext < 0; s++) ext = gather_ext(k->stmts[s].rhs, i, k, sizes);
      c->ext[i] = ext;
      int32_t *v = malloc(sizeof(int32_t) * (size_t)(numel + 1));
      for (int64_t j = 0; j < numel; j++) {
        uint64_t r = (uint64_t)((th_frand(rng) + 1.0f) * 0.5f * (float)ext);
        v[j] = (int32_t)(r >= (uint64_t)ext ? (uint64_t)ext - 1 : r);
      }
      v[0] = 0;
      if (numel > 1) v[numel - 1] = (int32_t)(ext - 1);
      else v[0] = (int32_t)(ext - 1); /* one element: the last index (0 is covered by ext 1) */
      c->data[i] = v;
      c->a[i] = (sheaf_kernel_arg){SHEAF_KERNEL_I32, v, (size_t)numel, t->rank, c->shapes[i]};
    } else {
      float *x = th_frand_fill(rng, numel);
      c->data[i] = x;
      c->a[i] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, x, (size_t)numel, t->rank, c->shapes[i]};
    }
  }
}

static void free_case(gcase *c) {
  for (int i = 0; i < 8; i++) free(c->data[i]);
}

static bool close_all(const float *got, const float *want, size_t n, double tol, const char *what) {
  for (size_t j = 0; j < n; j++) {
    double w = want[j], g = got[j];
    if (!(fabs(g - w) <= tol * fmax(1.0, fabs(w))))
      return th_fail(__FILE__, __LINE__, "%s: [%zu] = %.9g, reference %.9g", what, j, g, w);
  }
  return true;
}

/* The interpreter on k lowered (sched: then default-scheduled at isa). */
static sheaf_status run_interp(sheaf_ctx *ctx, const sh_kernel *k, const int64_t *sizes, gcase *c,
                               float *out, bool sched, sheaf_isa isa) {
  sh_lir_kernel *L = NULL;
  sheaf_status st = sh_lower_kernel(ctx, k, "gk", &L, NULL);
  if (st) return st;
  /* the weight left unpacked: the interpreter reads arguments as passed */
  if (sched) st = sh_sched_default_opts(L, isa, &(sh_sched_opts){.no_pack = 1});
  sh_lir_arg args[8] = {{0}};
  for (int i = 0; i < k->n_inputs; i++) args[i].data = c->data[i];
  args[k->n_inputs].data = out;
  if (!st) st = sh_lir_run(L, sizes, args);
  sh_lir_free(L);
  return st;
}

/* One case through every executor: the reference first, then the
 * interpreter (lowered, scheduled), the compiled kernel and a plan. */
static void check_case(sheaf_ctx *ctx, sheaf_kernel *K, const sh_kernel *k, const int64_t *sizes, gcase *c,
                       sheaf_isa isa, const char *what) {
  int n_in = k->n_inputs;
  sh_kref_arg in[8];
  for (int i = 0; i < n_in; i++) in[i] = (sh_kref_arg){c->a[i].data, c->a[i].numel, c->a[i].rank, c->a[i].shape};
  size_t numel = 0;
  if (!CHECK_OK(ctx, sheaf_kernel_output_numel(K, c->a, n_in, 0, &numel))) return;
  float *want = malloc(sizeof(float) * (numel + 1)), *got = malloc(sizeof(float) * (numel + 1));
  sh_kref_out ro = {want, numel};
  char w2[300];
  if (CHECK_OK(ctx, sh_kernel_ref_run(ctx, k, in, n_in, &ro, 1))) {
    for (int pass = 0; pass < 2; pass++) {
      for (size_t j = 0; j < numel; j++) got[j] = NAN;
      snprintf(w2, sizeof w2, "%s, interpreter%s", what, pass ? " (scheduled)" : "");
      if (CHECK_OK(ctx, run_interp(ctx, k, sizes, c, got, pass == 1, isa))) close_all(got, want, numel, 2e-5, w2);
    }
    sheaf_kernel_arg args[9];
    memcpy(args, c->a, sizeof(sheaf_kernel_arg) * (size_t)n_in);
    args[n_in] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, got, numel, 0, NULL};
    for (size_t j = 0; j < numel; j++) got[j] = NAN;
    snprintf(w2, sizeof w2, "%s, emitted C", what);
    if (CHECK_OK(ctx, sheaf_kernel_run(K, args, n_in + 1))) close_all(got, want, numel, 2e-5, w2);
    sheaf_kernel_plan *P = NULL;
    if (CHECK_OK(ctx, sheaf_kernel_plan_make(K, args, n_in + 1, &P))) {
      void *data[9];
      for (int i = 0; i <= n_in; i++) data[i] = args[i].data;
      for (size_t j = 0; j < numel; j++) got[j] = NAN;
      snprintf(w2, sizeof w2, "%s, plan", what);
      if (CHECK_OK(ctx, sheaf_kernel_plan_run(P, data, n_in + 1))) close_all(got, want, numel, 2e-5, w2);
      sheaf_kernel_plan_free(P);
    }
  }
  free(want);
  free(got);
  sheaf_ctx_clear_error(ctx);
}

/* Every out-of-range value at the middle element of each index input:
 * every executor fails, naming it. */
static void check_bad(sheaf_ctx *ctx, sheaf_kernel *K, const sh_kernel *k, const int64_t *sizes, gcase *c) {
  int n_in = k->n_inputs;
  for (int gi = 0; gi < n_in; gi++) {
    if (k->tensors[gi].dtype != SH_KDTYPE_I32) continue;
    int32_t *v = c->data[gi];
    size_t at = c->a[gi].numel / 2;
    int32_t keep = v[at];
    const int64_t bads[] = {-1, c->ext[gi], INT32_MAX};
    for (size_t b = 0; b < SH_ARRAY_LEN(bads); b++) {
      v[at] = (int32_t)bads[b];
      char want[300], pos[120];
      sh_kernel_gather_position(&k->tensors[gi], sizes, (int64_t)at, pos, sizeof pos);
      snprintf(want, sizeof want, "%s = %d is outside 0 .. %lld (the extent of", pos, (int)v[at],
               (long long)(c->ext[gi] - 1));
      size_t numel = 0;
      REQUIRE_OK(ctx, sheaf_kernel_output_numel(K, c->a, n_in, 0, &numel));
      float *out = calloc(numel + 1, sizeof(float));
      sh_kref_arg in[8];
      for (int i = 0; i < n_in; i++) in[i] = (sh_kref_arg){c->a[i].data, c->a[i].numel, c->a[i].rank, c->a[i].shape};
      sh_kref_out ro = {out, numel};
      CHECK_STATUS(ctx, sh_kernel_ref_run(ctx, k, in, n_in, &ro, 1), SHEAF_ERR_INVALID_ARG);
      CHECK_CONTAINS(sheaf_ctx_last_error(ctx), want);
      CHECK_STATUS(ctx, run_interp(ctx, k, sizes, c, out, false, SHEAF_ISA_SCALAR), SHEAF_ERR_INVALID_ARG);
      CHECK_CONTAINS(sheaf_ctx_last_error(ctx), want);
      CHECK_STATUS(ctx, run_interp(ctx, k, sizes, c, out, true, SHEAF_ISA_SCALAR), SHEAF_ERR_INVALID_ARG);
      CHECK_CONTAINS(sheaf_ctx_last_error(ctx), want);
      sheaf_kernel_arg args[9];
      memcpy(args, c->a, sizeof(sheaf_kernel_arg) * (size_t)n_in);
      args[n_in] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, out, numel, 0, NULL};
      CHECK_STATUS(ctx, sheaf_kernel_run(K, args, n_in + 1), SHEAF_ERR_INVALID_ARG);
      CHECK_CONTAINS(sheaf_ctx_last_error(ctx), want);
      char kn[100];
      snprintf(kn, sizeof kn, "kernel '%s'", k->name);
      CHECK_CONTAINS(sheaf_ctx_last_error(ctx), kn);
      sheaf_kernel_plan *P = NULL;
      if (CHECK_OK(ctx, sheaf_kernel_plan_make(K, args, n_in + 1, &P))) {
        void *data[9];
        for (int i = 0; i <= n_in; i++) data[i] = args[i].data;
        CHECK_STATUS(ctx, sheaf_kernel_plan_run(P, data, n_in + 1), SHEAF_ERR_INVALID_ARG);
        CHECK_CONTAINS(sheaf_ctx_last_error(ctx), want);
        sheaf_kernel_plan_free(P);
      }
      free(out);
      sheaf_ctx_clear_error(ctx);
    }
    v[at] = keep;
  }
}

static void run_at(const gk *g, sheaf_isa isa) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_kernel *K = NULL;
  /* eager: th_cache_dir (harness.h) */
  sh_kernel_opts o = {.isa_set = true, .isa = isa, .eager = true, .cache_dir = th_cache_dir("gather-cache")};
  if (!CHECK_OK(ctx, sh_kernel_compile_opts(ctx, g->src, strlen(g->src), g->name, &o, &K))) return;
  const sh_kernel *k = sh_kernel_of(K);
  uint64_t rng = 29;
  for (int mode = 0; mode < 2; mode++)
    for (size_t t = 0; t < SH_ARRAY_LEN(SIZES); t++) {
      int64_t sizes[8];
      for (int i = 0; i < k->n_sizes; i++)
        sizes[i] = mode == 0 ? SIZES[t] : SIZES[(t + 2 * (size_t)i + 1) % SH_ARRAY_LEN(SIZES)];
      gcase c;
      make_case(k, sizes, &rng, &c);
      char what[200];
      snprintf(what, sizeof what, "%s at %s, sizes %s #%zu", g->name, sheaf_isa_name(isa), mode ? "mixed" : "equal", t);
      check_case(ctx, K, k, sizes, &c, isa, what);
      if (t == 2 || t == 4) check_bad(ctx, K, k, sizes, &c);
      free_case(&c);
    }
  sheaf_kernel_free(K);
}

static void run_isa(sheaf_isa isa, const char *test) {
  if (!th_have_jit_cc(test)) return;
  if (isa > sheaf_cpu_isa_host()) {
    printf("note: %s skipped: the host has no %s\n", test, sheaf_isa_name(isa));
    return;
  }
  for (size_t i = 0; i < SH_ARRAY_LEN(KS); i++) run_at(&KS[i], isa);
}

TEST(kernel_gather_scalar) { run_isa(SHEAF_ISA_SCALAR, "kernel_gather_scalar"); }
TEST(kernel_gather_avx2) { run_isa(SHEAF_ISA_AVX2, "kernel_gather_avx2"); }
TEST(kernel_gather_avx512) { run_isa(SHEAF_ISA_AVX512, "kernel_gather_avx512"); }

/* The cross-entropy with the pick against the `where` scan and a double
 * reference computed here. */
TEST(kernel_gather_xent_forms) {
  if (!th_have_jit_cc("kernel_gather_xent_forms")) return;
  sheaf_ctx *ctx = th_ctx();
  const char *pick = "kernel xp(z: f32[N, F], lab: i32[N]) -> f32[N] {\n"
                     "  m(n) max=! z(n, f)\n"
                     "  s(n) +=! exp(z(n, f) - m(n))\n"
                     "  loss(n) = log(s(n)) + m(n) - z(n, lab(n))\n"
                     "}\n";
  const char *scan = "kernel xw(z: f32[N, F], lab: i32[N]) -> f32[N] {\n"
                     "  m(n) max=! z(n, f)\n"
                     "  s(n) +=! exp(z(n, f) - m(n))\n"
                     "  t(n) +=! where(float(f) == float(lab(n)), z(n, f), 0)\n"
                     "  loss(n) = log(s(n)) + m(n) - t(n)\n"
                     "}\n";
  sheaf_kernel *P = NULL, *S = NULL;
  /* eager: th_cache_dir (harness.h) */
  sh_kernel_opts o = {.eager = true, .cache_dir = th_cache_dir("gather-cache")};
  REQUIRE_OK(ctx, sh_kernel_compile_opts(ctx, pick, strlen(pick), "xp", &o, &P));
  if (!CHECK_OK(ctx, sh_kernel_compile_opts(ctx, scan, strlen(scan), "xw", &o, &S))) {
    sheaf_kernel_free(P);
    return;
  }
  static const int64_t shapes[][2] = {{1, 1}, {5, 7}, {16, 64}, {33, 257}};
  uint64_t rng = 5;
  for (size_t c = 0; c < SH_ARRAY_LEN(shapes); c++) {
    int64_t N = shapes[c][0], F = shapes[c][1];
    float *z = th_frand_fill(&rng, N * F);
    for (int64_t i = 0; i < N * F; i++) z[i] *= 8;
    int32_t *lab = malloc(sizeof(int32_t) * (size_t)N);
    for (int64_t n = 0; n < N; n++) lab[n] = (int32_t)(n == 0 ? 0 : n == N - 1 ? F - 1 : (n * 7) % F);
    float *lp = malloc(sizeof(float) * (size_t)N), *lw = malloc(sizeof(float) * (size_t)N);
    int64_t zs[2] = {N, F}, ls[1] = {N};
    sheaf_kernel_arg a[3] = {{SHEAF_KERNEL_F32, z, (size_t)(N * F), 2, zs},
                             {SHEAF_KERNEL_I32, lab, (size_t)N, 1, ls},
                             {SHEAF_KERNEL_F32, lp, (size_t)N, 0, NULL}};
    CHECK_OK(ctx, sheaf_kernel_run(P, a, 3));
    a[2].data = lw;
    CHECK_OK(ctx, sheaf_kernel_run(S, a, 3));
    for (int64_t n = 0; n < N; n++) {
      double m = -INFINITY, s = 0;
      for (int64_t f = 0; f < F; f++) m = fmax(m, z[n * F + f]);
      for (int64_t f = 0; f < F; f++) s += exp((double)z[n * F + f] - m);
      double want = log(s) + m - z[n * F + lab[n]];
      CHECK_NEAR(lp[n], want, 2e-5 * fmax(1.0, fabs(want)));
      CHECK_NEAR(lw[n], want, 2e-5 * fmax(1.0, fabs(want)));
      CHECK_NEAR(lp[n], lw[n], 2e-5 * fmax(1.0, fabs(want)));
    }
    free(z), free(lab), free(lp), free(lw);
  }
  sheaf_kernel_free(P);
  sheaf_kernel_free(S);
}

/* The checked kernel prints its gather as written, with the range of k
 * read from the index tensor idx's shape. */
TEST(kernel_gather_printed) {
  sheaf_ctx *ctx = th_ctx();
  const char *src = KS[3].src;
  sh_module m;
  sheaf_status st = sh_kernel_source_compile(&m, ctx, "g", src, strlen(src));
  if (CHECK_OK(ctx, st)) {
    sh_buf b;
    sh_buf_init(&b, ctx);
    sh_kernel_print(&b, sh_module_kernel(&m, "red"));
    CHECK_CONTAINS(sh_buf_cstr(&b), "s(n) +=! w(idx(n, k)) * x(n, k)  for n in 0..N; reduce k in 0..K");
    sh_buf_free(&b);
  }
  sh_module_free(&m);
}

/* The tuner's inputs respect a gather's extent (its other i32 values are 0
 * .. 7, here the gathered extent is 5): a two-candidate search of the pick
 * runs to a record instead of failing on its own inputs. */
TEST(kernel_gather_tuner_inputs) {
  if (!th_have_jit_cc("kernel_gather_tuner_inputs")) return;
  sheaf_ctx *ctx = th_ctx();
  const char *src = KS[1].src;
  char dir[512];
  snprintf(dir, sizeof dir, "%s", th_tmp_path("gather-tune"));
  sh_tune_request q = {.source = src, .len = strlen(src), .kernel = "pick", .cache_dir = dir,
                       .sizes = (int64_t[]){40, 5}, .n_sizes = 2, .budget_s = 600, .max_candidates = 2};
  sh_tune_rec r;
  REQUIRE_OK(ctx, sh_tune_kernel(ctx, &q, &r));
  CHECK_EQ_STR(r.kernel, "pick");
  const sh_kernel *k = NULL;
  sheaf_kernel *K = NULL;
  REQUIRE_OK(ctx, sh_kernel_compile_opts(ctx, src, strlen(src), "pick", &(sh_kernel_opts){.cache_dir = dir}, &K));
  k = sh_kernel_of(K);
  CHECK_EQ_INT((int)sh_kernel_gather_extent(k, 1, (int64_t[]){40, 5}), 5);
  CHECK_EQ_INT((int)sh_kernel_gather_extent(k, 0, (int64_t[]){40, 5}), -1);
  sheaf_kernel_free(K);
}
