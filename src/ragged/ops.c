/*
 * ops.c — the ragged linear layer (one GEMM over all tokens, bias,
 * activation and residual fused into its epilogue) and the row-parallel
 * layernorm. Attention is in attention.c.
 */
#include "ragged/ops.h"

#include "base/pool.h"
#include "kernels/rows.h"

static inline sh_gemm_in in_at(sh_gemm_in x, int64_t r) {
  if (x.rows) x.rows += r;
  else if (x.base) x.base += r * x.ld;
  return x;
}
static inline sh_gemm_out out_at(sh_gemm_out y, int64_t r) {
  if (y.rows) y.rows += r;
  else y.base += r * y.ld;
  return y;
}

void sh_rlin_ws_free(sheaf_ctx *ctx, sh_rlin_ws *ws) {
  for (int i = 0; ws && i < SH_MAX_THREADS; i++) {
    sh_gemm_ws_free(ctx, ws->ws[i]);
    ws->ws[i] = NULL;
  }
}

typedef struct lin_job {
  sheaf_ctx *ctx;
  sheaf_isa isa;
  const sh_gemm_args *g;
  int64_t n, chunks;
  sh_rlin_ws *ws;
  _Atomic int status;
} lin_job;

static void lin_task(void *arg, int64_t task, int tid) {
  lin_job *j = arg;
  int64_t r0 = j->n * task / j->chunks, r1 = j->n * (task + 1) / j->chunks;
  sh_gemm_args a = *j->g;
  a.m = r1 - r0;
  a.src[0].in = in_at(a.src[0].in, r0);
  a.c = out_at(a.c, r0);
  for (int i = 0; i < a.n_ep; i++)
    if (a.ep[i].kind == SH_GEMM_EP_ADD) a.ep[i].other = in_at(a.ep[i].other, r0);
  a.ws = j->ws->ws[tid];
  sheaf_status st = sh_gemm(j->ctx, j->isa, 1, &a);
  if (st) j->status = (int)st;
}

sheaf_status sh_ragged_linear(sheaf_ctx *ctx, sheaf_isa isa, int threads, int64_t n,
                              sh_gemm_in x, const sh_gemm_packed_b *w, const float *bias,
                              int act, sh_gemm_in residual, sh_gemm_out y, sh_rlin_ws *ws) {
  if (!w) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "ragged linear: weight is NULL");
  sh_gemm_args g = {
      .m = n,
      .n_src = 1,
      .src = {{w->k, x}},
      .b_packed = w,
      .c = y,
  };
  if (bias) g.ep[g.n_ep++] = (sh_gemm_ep){.kind = SH_GEMM_EP_BIAS, .vec = bias};
  if (act >= 0) g.ep[g.n_ep++] = (sh_gemm_ep){.kind = SH_GEMM_EP_ACT, .act = (sh_gemm_act)act};
  if (residual.rows || residual.base)
    g.ep[g.n_ep++] = (sh_gemm_ep){.kind = SH_GEMM_EP_ADD, .other = residual};
  int pt = sh_pool_threads(ctx->pool);
  if (threads <= 0 || threads > pt) threads = pt;
  if (threads > SH_MAX_THREADS) threads = SH_MAX_THREADS;
  int64_t kc, mc, nc, split_m;
  sh_gemm_get_blocking(&kc, &mc, &nc, &split_m);
  sh_rlin_ws own = {{NULL}};
  sh_rlin_ws *use = ws ? ws : &own;
  sheaf_status st = SHEAF_OK;
  /* Few rows: the GEMM's own split (over columns when rows are short). */
  if (threads == 1 || n < 2 * mc * threads / 3) {
    if (!use->ws[0]) st = sh_gemm_ws_create(ctx, &use->ws[0]);
    g.ws = use->ws[0];
    if (!st) st = sh_gemm(ctx, isa, threads, &g);
  } else {
    int64_t per = n / (mc * threads); /* row blocks per thread */
    if (per < 2) per = 2;
    if (per > 16) per = 16;
    lin_job j = {ctx, isa, &g, n, per * threads, use, SHEAF_OK};
    for (int i = 0; i < threads && !st; i++)
      if (!use->ws[i]) st = sh_gemm_ws_create(ctx, &use->ws[i]);
    if (!st) sh_pool_run(ctx->pool, j.chunks, lin_task, &j, threads);
    if (!st && j.status) st = (sheaf_status)j.status;
  }
  if (!ws) sh_rlin_ws_free(ctx, &own);
  return st;
}

typedef struct ln_job {
  sheaf_isa isa;
  int64_t n, d, chunk;
  sh_gemm_in x, r;
  const float *gamma, *beta;
  float eps;
  sh_gemm_out y;
} ln_job;

static void ln_task(void *arg, int64_t task, int tid) {
  (void)tid;
  const ln_job *j = arg;
  int64_t r0 = task * j->chunk, r1 = r0 + j->chunk < j->n ? r0 + j->chunk : j->n;
  sh_layernorm_rows(j->isa, r1 - r0, j->d, in_at(j->x, r0), in_at(j->r, r0), j->gamma, j->beta,
                    j->eps, out_at(j->y, r0));
}

sheaf_status sh_ragged_layernorm(sheaf_ctx *ctx, sheaf_isa isa, int threads, int64_t n,
                                 int64_t d, sh_gemm_in x, sh_gemm_in r, const float *gamma,
                                 const float *beta, float eps, sh_gemm_out y) {
  if (n < 0 || d < 1)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "ragged layernorm: %lld rows of width %lld",
                   (long long)n, (long long)d);
  if (n == 0) return SHEAF_OK;
  int pt = sh_pool_threads(ctx->pool);
  if (threads <= 0 || threads > pt) threads = pt;
  /* a few tasks per thread for balance; at least ~16K elements per task */
  int64_t chunk = (n + 4 * threads - 1) / (4 * threads);
  int64_t min_rows = (16384 + d - 1) / d;
  if (chunk < min_rows) chunk = min_rows;
  ln_job j = {isa, n, d, chunk, x, r, gamma, beta, eps, y};
  int64_t tasks = (n + chunk - 1) / chunk;
  if (tasks == 1 || threads == 1) {
    for (int64_t t = 0; t < tasks; t++) ln_task(&j, t, 0);
  } else {
    sh_pool_run(ctx->pool, tasks, ln_task, &j, threads);
  }
  return SHEAF_OK;
}
