/*
 * test_codegen_rowblock_threads.c — the row-fused default schedule's
 * per-thread blocks (per_task temporaries: b + tid·size, the entry
 * allocating abi->threads copies) on pools of 1, 3, 4 and 8 threads (more
 * than this machine's cores), through sheaf_kernel_run, a plan run twice
 * with new data, two threads running one kernel at once, and the kernel as
 * a graph op batched by the runtime; every result against double math.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/kernel_api.h"
#include "codegen/lir_sched.h"
#include "harness.h"
#include "sheaf_kernel.h"
#include "sheaf_train.h"

static const char SRC[] =
    "kernel lsm(x: f32[N, D], W: f32[D, F], b: f32[F]) -> f32[N, F] {\n"
    "  y(n, f) +=! x(n, d) * W(d, f)\n  z(n, f) = y(n, f) + b(f)\n"
    "  m(n) max=! z(n, f)\n  s(n) +=! exp(z(n, f) - m(n))\n"
    "  out(n, f) = z(n, f) - m(n) - log(s(n))\n}\n";

static sheaf_ctx *ctx_with(int threads) {
  sheaf_ctx_options o = {0};
  o.allocator = th_allocator();
  o.threads = threads;
  sheaf_ctx *c = NULL;
  char err[256];
  if (sheaf_ctx_create(&o, &c, err, sizeof err) != SHEAF_OK) {
    th_fail(__FILE__, __LINE__, "ctx with %d threads: %s", threads, err);
    return NULL;
  }
  return c;
}

static sheaf_kernel *compile(sheaf_ctx *ctx, int row_block) {
  sh_sched_opts so;
  memset(&so, 0, sizeof so);
  so.row_block = row_block;
  /* eager: th_cache_dir (harness.h) */
  sh_kernel_opts ko = {.eager = true, .cache_dir = th_cache_dir("rowblock-threads"), .sched = &so};
  sheaf_kernel *k = NULL;
  if (!CHECK_OK(ctx, sh_kernel_compile_opts(ctx, SRC, strlen(SRC), "lsm", &ko, &k))) return NULL;
  return k;
}

typedef struct problem {
  int64_t N, D, F;
  float *x, *W, *b, *out;
} problem;

static double urand(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*s >> 11) / 9007199254740992.0 - 0.5;
}

static void problem_fill(problem *p, uint64_t seed) {
  for (int64_t q = 0; q < p->N * p->D; q++) p->x[q] = (float)(2 * urand(&seed));
  for (int64_t q = 0; q < p->D * p->F; q++) p->W[q] = (float)(2 * urand(&seed));
  for (int64_t q = 0; q < p->F; q++) p->b[q] = (float)urand(&seed);
  for (int64_t q = 0; q < p->N * p->F; q++) p->out[q] = NAN;
}

static void problem_make(problem *p, int64_t N, int64_t D, int64_t F, uint64_t seed) {
  p->N = N, p->D = D, p->F = F;
  p->x = malloc(sizeof(float) * (size_t)(N * D + 1));
  p->W = malloc(sizeof(float) * (size_t)(D * F + 1));
  p->b = malloc(sizeof(float) * (size_t)(F + 1));
  p->out = malloc(sizeof(float) * (size_t)(N * F + 1));
  problem_fill(p, seed);
}

static void problem_free(problem *p) { free(p->x), free(p->W), free(p->b), free(p->out); }

/* The log-softmax of x·W + b against double math (quiet: the caller reports). */
static double problem_err(const problem *p) {
  double worst = 0, *z = malloc(sizeof(double) * (size_t)(p->F + 1));
  for (int64_t n = 0; n < p->N; n++) {
    double mx = -INFINITY, s = 0;
    for (int64_t f = 0; f < p->F; f++) {
      double y = p->b[f];
      for (int64_t d = 0; d < p->D; d++) y += (double)p->x[n * p->D + d] * p->W[d * p->F + f];
      z[f] = y;
      mx = fmax(mx, y);
    }
    for (int64_t f = 0; f < p->F; f++) s += exp(z[f] - mx);
    for (int64_t f = 0; f < p->F; f++) {
      double want = z[f] - mx - log(s), e = fabs(p->out[n * p->F + f] - want) / fmax(1.0, fabs(want));
      if (!(e <= worst)) worst = e;
    }
  }
  free(z);
  return worst;
}

static void problem_args(problem *p, sheaf_kernel_arg a[4], int64_t sh[3][2]) {
  sh[0][0] = p->N, sh[0][1] = p->D, sh[1][0] = p->D, sh[1][1] = p->F, sh[2][0] = p->F;
  a[0] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, p->x, (size_t)(p->N * p->D), 2, sh[0]};
  a[1] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, p->W, (size_t)(p->D * p->F), 2, sh[1]};
  a[2] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, p->b, (size_t)p->F, 1, sh[2]};
  a[3] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, p->out, (size_t)(p->N * p->F), 0, NULL};
}

static bool run_check(sheaf_ctx *ctx, sheaf_kernel *k, problem *p, const char *what) {
  sheaf_kernel_arg a[4];
  int64_t sh[3][2];
  problem_args(p, a, sh);
  if (!CHECK_OK(ctx, sheaf_kernel_run(k, a, 4))) return false;
  double e = problem_err(p);
  if (!(e <= 1e-4))
    return th_fail(__FILE__, __LINE__, "%s: N=%lld D=%lld F=%lld: error %g", what, (long long)p->N, (long long)p->D,
                   (long long)p->F, e);
  return true;
}

/* Rows around the block (12; 24 with the knob) and many blocks (more
 * tasks than threads); columns around the vectors (8) and the panel (16). */
TEST(codegen_rowblock_threads_pools) {
  if (!th_have_jit_cc("codegen_rowblock_threads_pools")) return;
  static const int pools[] = {1, 3, 4, 8}, rbs[] = {0, 24};
  static const int64_t Ns[] = {1, 11, 12, 13, 25, 100, 257}, Fs[] = {1, 7, 8, 9, 17, 64};
  for (size_t t = 0; t < SH_ARRAY_LEN(pools); t++) {
    sheaf_ctx *ctx = ctx_with(pools[t]);
    REQUIRE(ctx);
    CHECK_EQ_INT(sheaf_ctx_threads(ctx), pools[t]);
    for (size_t r = 0; r < SH_ARRAY_LEN(rbs); r++) {
      sheaf_kernel *k = compile(ctx, rbs[r]);
      if (!k) break;
      char what[64];
      snprintf(what, sizeof what, "%d threads, row_block %d", pools[t], rbs[r]);
      bool ok = true;
      for (size_t a = 0; a < SH_ARRAY_LEN(Ns) && ok; a++)
        for (size_t c = 0; c < SH_ARRAY_LEN(Fs) && ok; c++) {
          problem p;
          problem_make(&p, Ns[a], 1 + (int64_t)((a + c) % 4) * 5, Fs[c], 7 + a * 13 + c);
          ok = run_check(ctx, k, &p, what);
          problem_free(&p);
        }
      sheaf_kernel_free(k);
    }
    sheaf_ctx_free(ctx);
  }
}

/* A plan on 4 threads run twice with new data; then two threads running
 * the kernel at once (sheaf_kernel_run on each, one pool: the second runs
 * its parallel loops on its own thread, tid 0, with its own blocks). */
typedef struct racer {
  sheaf_ctx *ctx;
  sheaf_kernel *k;
  int id;
  int bad;
} racer;

static void *race(void *arg) {
  racer *r = arg;
  for (int it = 0; it < 40 && !r->bad; it++) {
    problem p;
    problem_make(&p, 37 + 12 * r->id + it % 3, 9, 17, (uint64_t)(1000 * r->id + it));
    sheaf_kernel_arg a[4];
    int64_t sh[3][2];
    problem_args(&p, a, sh);
    if (sheaf_kernel_run(r->k, a, 4) != SHEAF_OK || !(problem_err(&p) <= 1e-4)) r->bad = it + 1;
    problem_free(&p);
  }
  return NULL;
}

TEST(codegen_rowblock_threads_plan_and_concurrent_runs) {
  if (!th_have_jit_cc("codegen_rowblock_threads_plan_and_concurrent_runs")) return;
  sheaf_ctx *ctx = ctx_with(4);
  REQUIRE(ctx);
  sheaf_kernel *k = compile(ctx, 0);
  if (k) {
    problem p;
    problem_make(&p, 101, 13, 33, 1);
    sheaf_kernel_arg a[4];
    int64_t sh[3][2];
    problem_args(&p, a, sh);
    sheaf_kernel_plan *plan = NULL;
    if (CHECK_OK(ctx, sheaf_kernel_plan_make(k, a, 4, &plan))) {
      for (int run = 0; run < 3; run++) {
        problem_fill(&p, 50 + (uint64_t)run);
        void *data[4] = {p.x, p.W, p.b, p.out};
        if (!CHECK_OK(ctx, sheaf_kernel_plan_run(plan, data, 4))) break;
        double e = problem_err(&p);
        if (!(e <= 1e-4)) th_fail(__FILE__, __LINE__, "plan run %d: error %g", run, e);
      }
      sheaf_kernel_plan_free(plan);
    }
    problem_free(&p);
    racer rs[2] = {{ctx, k, 0, 0}, {ctx, k, 1, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) REQUIRE(pthread_create(&th[i], NULL, race, &rs[i]) == 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++)
      if (rs[i].bad) th_fail(__FILE__, __LINE__, "thread %d: run %d failed or wrong", i, rs[i].bad - 1);
    sheaf_kernel_free(k);
  }
  sheaf_ctx_free(ctx);
}

/* The kernel as a graph op (sheaf_kernel_call): 24 instances of 1 .. 30
 * rows, batched by the runtime on 1 and 4 threads (the batch loop over the
 * pool, each instance on one thread, or the instances in turn, each over
 * the pool). */
TEST(codegen_rowblock_threads_graph) {
  if (!th_have_jit_cc("codegen_rowblock_threads_graph")) return;
  sheaf_ctx *ctx = ctx_with(4);
  REQUIRE(ctx);
  sheaf_kernel *k = compile(ctx, 0);
  sheaf_model *m = NULL;
  enum { NI = 24, D = 5, F = 19 };
  if (k && CHECK_OK(ctx, sheaf_model_create(ctx, &m))) {
    sheaf_param W = th_param(ctx, m, "W", 2, D, F), b = th_param(ctx, m, "b", 1, F, 0);
    problem p[NI];
    for (int i = 0; i < NI; i++) problem_make(&p[i], 1 + (i * 7) % 30, D, F, 300 + (uint64_t)i);
    memcpy(sheaf_model_param_data(m, W, NULL, NULL), p[0].W, sizeof(float) * D * F);
    memcpy(sheaf_model_param_data(m, b, NULL, NULL), p[0].b, sizeof(float) * F);
    for (int i = 1; i < NI; i++) memcpy(p[i].W, p[0].W, sizeof(float) * D * F), memcpy(p[i].b, p[0].b, sizeof(float) * F);
    for (int threads = 1; threads <= 4; threads += 3) {
      sheaf_graph *g = NULL;
      if (!CHECK_OK(ctx, sheaf_graph_create(m, &(sheaf_graph_opts){.threads = threads}, &g))) break;
      sheaf_expr y[NI];
      for (int i = 0; i < NI; i++) {
        sheaf_expr in[3] = {sheaf_input(g, 2, (int64_t[]){p[i].N, D}, p[i].x), sheaf_parameter(g, W),
                            sheaf_parameter(g, b)};
        y[i] = sheaf_kernel_call(g, k, 3, in);
      }
      if (CHECK_OK(ctx, sheaf_graph_flush(g)))
        for (int i = 0; i < NI; i++) {
          sheaf_value_view v;
          if (!CHECK_OK(ctx, sheaf_value(g, y[i], &v))) break;
          if (!CHECK(v.rank == 2 && v.shape[0] == p[i].N && v.shape[1] == F)) break;
          memcpy(p[i].out, v.data, sizeof(float) * (size_t)(p[i].N * F));
          double e = problem_err(&p[i]);
          if (!(e <= 1e-4)) {
            th_fail(__FILE__, __LINE__, "graph, %d threads, instance %d (%lld rows): error %g", threads, i,
                    (long long)p[i].N, e);
            break;
          }
        }
      sheaf_graph_free(g);
    }
    for (int i = 0; i < NI; i++) problem_free(&p[i]);
    sheaf_model_free(m);
  }
  sheaf_kernel_free(k);
  sheaf_ctx_free(ctx);
}
