/*
 * test_codegen_read_ragged_threads.c — the multi-head attention's scoped
 * blocks (contract_ragged, cache_read_ragged with pack_rows: allocated per
 * task from the C heap) on pools of 1, 3 and 8 threads, at edge lengths,
 * every sequence empty and one long sequence (a batch of none refused);
 * a plan run three times with new data (and refusing new lengths); two
 * threads running the kernel at once. Every result against double math.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/kernel_api.h"
#include "codegen/lir_sched.h"
#include "attn_ref.h"
#include "harness.h"
#include "sheaf_kernel.h"

static const char MHA[] =
    "kernel mha(L: i32[B], q: f32[B, L(b), H, D], k: f32[B, L(b), H, D], v: f32[B, L(b), H, D])\n"
    "    -> f32[B, L(b), H, D] {\n"
    "  s(b, h, i, j) +=! q(b, i, h, d) * k(b, j, h, d) / sqrt(D)\n"
    "  m(b, h, i) max=! s(b, h, i, j)\n  e(b, h, i, j) = exp(s(b, h, i, j) - m(b, h, i))\n"
    "  z(b, h, i) +=! e(b, h, i, j)\n  o(b, h, i, d) +=! e(b, h, i, j) * v(b, j, h, d)\n"
    "  out(b, i, h, d) = o(b, h, i, d) / z(b, h, i)\n}\n";

/* One call's data: lengths, q, k, v, out and the reference. */
typedef struct call {
  int nb;
  int64_t H, D, n;
  int32_t *L;
  float *q, *k, *v, *out, *want;
  int64_t sL[1], s4[4];
  sheaf_kernel_arg a[5];
} call;

static void call_fill(call *c, uint64_t seed) {
  uint64_t s = seed;
  for (int64_t i = 0; i < c->n; i++) c->q[i] = th_frand(&s), c->k[i] = th_frand(&s), c->v[i] = th_frand(&s);
  for (int64_t i = 0; i < c->n; i++) c->out[i] = NAN;
  ar_mha(c->L, c->nb, c->H, c->D, c->q, c->k, c->v, c->want);
}

static void call_make(call *c, const int32_t *lens, int nb, int64_t H, int64_t D, uint64_t seed) {
  int64_t T = 0;
  for (int b = 0; b < nb; b++) T += lens[b];
  c->nb = nb, c->H = H, c->D = D, c->n = T * H * D;
  size_t n = (size_t)c->n + 1;
  c->L = malloc(sizeof(int32_t) * (size_t)(nb + 1));
  if (nb) memcpy(c->L, lens, sizeof(int32_t) * (size_t)nb);
  c->q = malloc(sizeof(float) * n), c->k = malloc(sizeof(float) * n), c->v = malloc(sizeof(float) * n);
  c->out = malloc(sizeof(float) * n), c->want = malloc(sizeof(float) * n);
  call_fill(c, seed);
  c->sL[0] = nb;
  c->s4[0] = nb, c->s4[1] = -1, c->s4[2] = H, c->s4[3] = D;
  c->a[0] = (sheaf_kernel_arg){SHEAF_KERNEL_I32, c->L, (size_t)nb, 1, c->sL};
  c->a[1] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, c->q, (size_t)c->n, 4, c->s4};
  c->a[2] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, c->k, (size_t)c->n, 4, c->s4};
  c->a[3] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, c->v, (size_t)c->n, 4, c->s4};
  c->a[4] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, c->out, (size_t)c->n, 0, NULL};
}

static void call_free(call *c) { free(c->L), free(c->q), free(c->k), free(c->v), free(c->out), free(c->want); }

/* out against the reference: the first element off (quiet), or -1. */
static int64_t call_bad(const call *c) {
  for (int64_t i = 0; i < c->n; i++)
    if (!(fabs((double)c->out[i] - c->want[i]) <= 2e-5 * fmax(1.0, fabs((double)c->want[i])))) return i;
  return -1;
}

static bool call_check(const call *c, const char *what) {
  int64_t i = call_bad(c);
  if (i >= 0)
    return th_fail(__FILE__, __LINE__, "%s: %d sequences, %lld x %lld: element %lld is %.9g, want %.9g", what, c->nb,
                   (long long)c->H, (long long)c->D, (long long)i, c->out[i], c->want[i]);
  return true;
}

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

static sheaf_kernel *compile(sheaf_ctx *ctx, int pack) {
  sh_sched_opts so;
  memset(&so, 0, sizeof so);
  so.pack_rows = pack;
  /* eager: th_cache_dir (harness.h) */
  sh_kernel_opts ko = {.eager = true, .cache_dir = th_cache_dir("read-ragged-threads"), .sched = &so};
  sheaf_kernel *k = NULL;
  if (!CHECK_OK(ctx, sh_kernel_compile_opts(ctx, MHA, strlen(MHA), NULL, &ko, &k))) return NULL;
  return k;
}

static const int32_t EDGE[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 11, 12, 13, 31, 32, 33}, NONE[] = {0, 0, 0},
                     ONE[] = {70};

TEST(codegen_read_ragged_threads_pools) {
  if (!th_have_jit_cc("codegen_read_ragged_threads_pools")) return;
  static const int pools[] = {1, 3, 8};
  struct {
    const int32_t *lens;
    int nb;
    int64_t H, D;
  } cases[] = {{EDGE, (int)SH_ARRAY_LEN(EDGE), 3, 13}, {EDGE, (int)SH_ARRAY_LEN(EDGE), 4, 16},
               {NONE, 3, 2, 8}, {NONE, 0, 2, 8}, {ONE, 1, 2, 33}};
  for (size_t t = 0; t < SH_ARRAY_LEN(pools); t++) {
    sheaf_ctx *ctx = ctx_with(pools[t]);
    REQUIRE(ctx);
    for (int pack = 0; pack < 2; pack++) {
      sheaf_kernel *K = compile(ctx, pack);
      if (!K) break;
      char what[64];
      snprintf(what, sizeof what, "%d threads, pack_rows %d", pools[t], pack);
      for (size_t c = 0; c < SH_ARRAY_LEN(cases); c++) {
        call cl;
        call_make(&cl, cases[c].lens, cases[c].nb, cases[c].H, cases[c].D, 5 + c);
        if (cases[c].nb == 0) { /* a batch of none: refused, naming the size */
          CHECK_STATUS(ctx, sheaf_kernel_run(K, cl.a, 5), SHEAF_ERR_SHAPE);
          CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "size B = 0 (dimension 0 of input 'L')");
          sheaf_ctx_clear_error(ctx);
        } else if (CHECK_OK(ctx, sheaf_kernel_run(K, cl.a, 5))) {
          call_check(&cl, what);
        }
        call_free(&cl);
      }
      sheaf_kernel_free(K);
    }
    sheaf_ctx_free(ctx);
  }
}

typedef struct racer {
  sheaf_kernel *K;
  int id, bad;
} racer;

static void *race(void *arg) {
  racer *r = arg;
  for (int it = 0; it < 30 && !r->bad; it++) {
    int32_t lens[6];
    for (int b = 0; b < 6; b++) lens[b] = (int32_t)((b * 7 + it * 3 + r->id * 5) % 19);
    call c;
    call_make(&c, lens, 6, 2, 16, (uint64_t)(100 * r->id + it));
    if (sheaf_kernel_run(r->K, c.a, 5) != SHEAF_OK || call_bad(&c) >= 0) r->bad = it + 1;
    call_free(&c);
  }
  return NULL;
}

TEST(codegen_read_ragged_threads_plan_and_concurrent_runs) {
  if (!th_have_jit_cc("codegen_read_ragged_threads_plan_and_concurrent_runs")) return;
  sheaf_ctx *ctx = ctx_with(4);
  REQUIRE(ctx);
  for (int pack = 0; pack < 2; pack++) {
    sheaf_kernel *K = compile(ctx, pack);
    if (!K) break;
    call c;
    call_make(&c, EDGE, (int)SH_ARRAY_LEN(EDGE), 3, 13, 1);
    sheaf_kernel_plan *plan = NULL;
    if (CHECK_OK(ctx, sheaf_kernel_plan_make(K, c.a, 5, &plan))) {
      for (int run = 0; run < 3; run++) {
        call_fill(&c, 20 + (uint64_t)run);
        void *data[5] = {c.L, c.q, c.k, c.v, c.out};
        if (!CHECK_OK(ctx, sheaf_kernel_plan_run(plan, data, 5))) break;
        char what[48];
        snprintf(what, sizeof what, "plan run %d, pack_rows %d", run, pack);
        call_check(&c, what);
      }
      /* other lengths are another shape */
      c.L[3] += 1;
      void *data[5] = {c.L, c.q, c.k, c.v, c.out};
      CHECK_STATUS(ctx, sheaf_kernel_plan_run(plan, data, 5), SHEAF_ERR_SHAPE);
      sheaf_kernel_plan_free(plan);
      sheaf_ctx_clear_error(ctx);
    }
    call_free(&c);
    racer rs[2] = {{K, 0, 0}, {K, 1, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) REQUIRE(pthread_create(&th[i], NULL, race, &rs[i]) == 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++)
      if (rs[i].bad) th_fail(__FILE__, __LINE__, "pack_rows %d, thread %d: run %d failed or wrong", pack, i, rs[i].bad - 1);
    sheaf_kernel_free(K);
  }
  sheaf_ctx_free(ctx);
}
