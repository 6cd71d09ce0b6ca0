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

sheaf_status sh_ragged_linear(sheaf_ctx *ctx, sheaf_isa isa, int threads, int64_t n,
                              sh_gemm_in x, const sh_gemm_packed_b *w, const float *bias,
                              int act, sh_gemm_in residual, sh_gemm_out y, sh_gemm_ws *ws) {
  if (!w) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "ragged linear: weight is NULL");
  sh_gemm_args g = {
      .m = n,
      .n_src = 1,
      .src = {{w->k, x}},
      .b_packed = w,
      .c = y,
      .ws = ws,
  };
  if (bias) g.ep[g.n_ep++] = (sh_gemm_ep){.kind = SH_GEMM_EP_BIAS, .vec = bias};
  if (act >= 0) g.ep[g.n_ep++] = (sh_gemm_ep){.kind = SH_GEMM_EP_ACT, .act = (sh_gemm_act)act};
  if (residual.rows || residual.base)
    g.ep[g.n_ep++] = (sh_gemm_ep){.kind = SH_GEMM_EP_ADD, .other = residual};
  return sh_gemm(ctx, isa, threads, &g);
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
