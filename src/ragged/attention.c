/*
 * attention.c — ragged multi-head self-attention: for every sequence b and
 * head h, over len[b] tokens only (no mask, no padding to the longest),
 *
 *   out_bh = softmax(scale · Q_bh · K_bhᵀ) · V_bh
 *
 * Q, K, V are strided views of the in-projection's [N, 3d] output (no
 * copies). One task is a block of up to SH_ATTN_ROW_BLOCK query rows of one
 * (sequence, head); tasks are sorted by work, longest first, and claimed
 * dynamically by the pool threads. Within a task, per micro-panel of query
 * rows (the GEMM micro-kernel's MR): scores for all keys (K packed once per
 * task into 32-column panels), softmax in place while in L1, then the
 * product with V read in place (V panels are 32 columns of the qkv rows).
 * The len × len score matrix never exists: scratch is MR × len per thread.
 * The micro-kernels are the GEMM's (gemm.h kernel table).
 */
#include <stdlib.h>
#include <string.h>

#include "base/pool.h"
#include "kernels/rows.h"
#include "ragged/ops.h"

typedef struct attn_task {
  int32_t b, h, r0, r1;
  double work;
} attn_task;

struct sh_attn_ws {
  float *buf[SH_MAX_THREADS];
  size_t cap[SH_MAX_THREADS];
  attn_task *tasks;
  size_t tasks_cap; /* entries */
};

sheaf_status sh_attn_ws_create(sheaf_ctx *ctx, sh_attn_ws **out) {
  *out = sh_calloc(ctx, 1, sizeof **out);
  return *out ? SHEAF_OK : SHEAF_ERR_NOMEM;
}

void sh_attn_ws_free(sheaf_ctx *ctx, sh_attn_ws *ws) {
  if (!ws) return;
  for (int i = 0; i < SH_MAX_THREADS; i++) sh_free(ctx, ws->buf[i], ws->cap[i]);
  sh_free(ctx, ws->tasks, ws->tasks_cap * sizeof *ws->tasks);
  sh_free(ctx, ws, sizeof *ws);
}

size_t sh_attn_ws_bytes(const sh_attn_ws *ws) {
  size_t s = 0;
  for (int i = 0; ws && i < SH_MAX_THREADS; i++) s += ws->cap[i];
  return s;
}

static inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* Per-thread scratch (floats, each part 64-byte aligned). */
typedef struct attn_layout {
  int64_t lpad;    /* score row stride */
  size_t kpack;    /* K panels: round_up(L, NR) × dh */
  size_t vpack;    /* V panels when V cannot be read in place */
  size_t s;        /* MR × lpad scores */
  size_t apack;    /* MR × max(dh, L) packed A */
  size_t total;
} attn_layout;

static attn_layout layout_for(int64_t max_len, int64_t dh, int64_t mr) {
  attn_layout l;
  l.lpad = round_up(max_len > 0 ? max_len : 1, 16);
  l.kpack = (size_t)round_up(round_up(max_len, SH_GEMM_NR) * dh, 16);
  l.vpack = (size_t)round_up(max_len * round_up(dh, SH_GEMM_NR), 16);
  l.s = (size_t)round_up(mr * l.lpad, 16);
  l.apack = (size_t)round_up(mr * (dh > l.lpad ? dh : l.lpad), 16);
  l.total = l.kpack + l.vpack + l.s + l.apack;
  return l;
}

typedef struct attn_job {
  sheaf_isa isa;
  const sh_gemm_kernel *kern;
  void (*softmax)(sheaf_isa, int64_t, int64_t, float, sh_gemm_in, sh_gemm_out);
  const sh_rseq *s;
  int heads;
  int64_t dh, d;
  float scale;
  const float *qkv;
  int64_t ld_qkv;
  float *out;
  int64_t ld_out;
  attn_layout lay;
  sh_attn_ws *ws;
} attn_job;

static void attn_run(void *arg, int64_t task, int tid) {
  const attn_job *j = arg;
  const attn_task *t = &j->ws->tasks[task];
  const int64_t L = j->s->len[t->b], dh = j->dh, ld = j->ld_qkv, NR = SH_GEMM_NR;
  const float *base = j->qkv + j->s->off[t->b] * ld;
  const float *Q = base + (int64_t)t->h * dh;
  const float *K = base + j->d + (int64_t)t->h * dh;
  const float *V = base + 2 * j->d + (int64_t)t->h * dh;
  float *O = j->out + j->s->off[t->b] * j->ld_out + (int64_t)t->h * dh;
  float *kpack = j->ws->buf[tid];
  float *vpack = kpack + j->lay.kpack;
  float *S = vpack + j->lay.vpack;
  float *apack = S + j->lay.s;
  const int64_t lpad = j->lay.lpad, kpanels = (L + NR - 1) / NR, dpanels = (dh + NR - 1) / NR;

  /* K_bh^T as panels of NR keys: kpack[(p*dh + k)*NR + j] = K[p*NR + j][k] */
  for (int64_t p = 0; p < kpanels; p++) {
    float *dst = kpack + p * dh * NR;
    int64_t cols = L - p * NR < NR ? L - p * NR : NR;
    if (cols < NR)
      for (int64_t k = 0; k < dh; k++) memset(dst + k * NR + cols, 0, (size_t)(NR - cols) * 4);
    for (int64_t c = 0; c < cols; c++) {
      const float *src = K + (p * NR + c) * ld;
      for (int64_t k = 0; k < dh; k++) dst[k * NR + c] = src[k];
    }
  }
  /* V read in place when its panels are aligned full NR-column rows; else
   * packed as [dpanels][L][NR]. */
  const float *vb = V;
  int64_t ldv = ld;
  bool v_direct = dh % NR == 0 && ld % 16 == 0 && ((uintptr_t)V & 63) == 0;
  if (!v_direct) {
    for (int64_t p = 0; p < dpanels; p++) {
      int64_t cols = dh - p * NR < NR ? dh - p * NR : NR;
      for (int64_t k = 0; k < L; k++) {
        float *dst = vpack + (p * L + k) * NR;
        memcpy(dst, V + k * ld + p * NR, (size_t)cols * 4);
        if (cols < NR) memset(dst + cols, 0, (size_t)(NR - cols) * 4);
      }
    }
    vb = vpack;
    ldv = NR;
  }

  const int64_t mr = j->kern->mr, rows_all = t->r1 - t->r0;
  const int64_t nmp = (rows_all + mr - 1) / mr, base_rows = rows_all / nmp, extra = rows_all % nmp;
  const float *src[16];
  float *crow[16];
  int64_t m0 = t->r0;
  for (int64_t i = 0; i < nmp; i++) {
    int64_t rows = base_rows + (i < extra);
    /* scores S[r, :] = Q[m0 + r] · K^T */
    for (int64_t r = 0; r < rows; r++) src[r] = Q + (m0 + r) * ld;
    j->kern->pack_a(rows, dh, src, apack);
    for (int64_t p = 0; p < kpanels; p++) {
      int64_t cols = L - p * NR < NR ? L - p * NR : NR;
      for (int64_t r = 0; r < rows; r++) crow[r] = S + r * lpad + p * NR;
      j->kern->ukernel(rows, cols, dh, apack, kpack + p * dh * NR, NR, crow, false);
    }
    j->softmax(j->isa, rows, L, j->scale, (sh_gemm_in){.base = S, .ld = lpad},
               (sh_gemm_out){.base = S, .ld = lpad});
    /* out[m0 + r] = P[r, :] · V */
    for (int64_t r = 0; r < rows; r++) src[r] = S + r * lpad;
    j->kern->pack_a(rows, L, src, apack);
    for (int64_t p = 0; p < dpanels; p++) {
      int64_t cols = dh - p * NR < NR ? dh - p * NR : NR;
      const float *bp = v_direct ? vb + p * NR : vb + p * L * NR;
      for (int64_t r = 0; r < rows; r++) crow[r] = O + (m0 + r) * j->ld_out + p * NR;
      j->kern->ukernel(rows, cols, L, apack, bp, ldv, crow, false);
    }
    m0 += rows;
  }
}

static int task_cmp(const void *a, const void *b) {
  const attn_task *x = a, *y = b;
  if (x->work != y->work) return x->work < y->work ? 1 : -1;
  if (x->b != y->b) return x->b - y->b;
  if (x->h != y->h) return x->h - y->h;
  return x->r0 - y->r0;
}

sheaf_status sh_ragged_attention(sheaf_ctx *ctx, sheaf_isa isa, int threads, const sh_rseq *s,
                                 int heads, int64_t dh, float scale, const float *qkv,
                                 int64_t ld_qkv, float *out, int64_t ld_out, sh_attn_ws *ws) {
  if (!s || !qkv || !out || !ws || heads < 1 || dh < 1)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "ragged attention: missing operand, heads %d or dh %lld",
                   heads, (long long)dh);
  int64_t d = heads * dh;
  if (ld_qkv < 3 * d || ld_out < d)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                   "ragged attention: ld_qkv %lld < 3d = %lld or ld_out %lld < d = %lld",
                   (long long)ld_qkv, (long long)(3 * d), (long long)ld_out, (long long)d);
  if (s->max_len > INT32_MAX / 2 || s->batch > INT32_MAX)
    return sh_fail(ctx, SHEAF_ERR_UNSUPPORTED, "ragged attention: length %lld too large",
                   (long long)s->max_len);
  int pt = sh_pool_threads(ctx->pool);
  if (threads <= 0 || threads > pt) threads = pt;
  if (threads > SH_MAX_THREADS) threads = SH_MAX_THREADS;

  /* tasks: (sequence, head, block of query rows), longest first */
  size_t n_tasks = 0;
  for (int64_t b = 0; b < s->batch; b++)
    n_tasks += (size_t)heads * (size_t)((s->len[b] + SH_ATTN_ROW_BLOCK - 1) / SH_ATTN_ROW_BLOCK);
  if (n_tasks == 0) return SHEAF_OK;
  if (n_tasks > ws->tasks_cap) {
    size_t cap = n_tasks + n_tasks / 2;
    attn_task *nt = sh_alloc(ctx, cap * sizeof *nt, 64);
    if (!nt) return SHEAF_ERR_NOMEM;
    sh_free(ctx, ws->tasks, ws->tasks_cap * sizeof *ws->tasks);
    ws->tasks = nt;
    ws->tasks_cap = cap;
  }
  size_t at = 0;
  for (int64_t b = 0; b < s->batch; b++) {
    int64_t L = s->len[b];
    for (int64_t r0 = 0; r0 < L; r0 += SH_ATTN_ROW_BLOCK) {
      int64_t r1 = r0 + SH_ATTN_ROW_BLOCK < L ? r0 + SH_ATTN_ROW_BLOCK : L;
      for (int h = 0; h < heads; h++)
        ws->tasks[at++] = (attn_task){(int32_t)b, h, (int32_t)r0, (int32_t)r1,
                                      (double)(r1 - r0) * (double)(L + 8)};
    }
  }
  qsort(ws->tasks, n_tasks, sizeof *ws->tasks, task_cmp);

  attn_job j = {.isa = isa, .kern = sh_gemm_kernel_get(isa), .softmax = sh_softmax_rows,
                .s = s, .heads = heads, .dh = dh, .d = d, .scale = scale, .qkv = qkv,
                .ld_qkv = ld_qkv, .out = out, .ld_out = ld_out, .ws = ws};
  j.lay = layout_for(s->max_len, dh, j.kern->mr);
  if ((size_t)threads > n_tasks) threads = (int)n_tasks;
  size_t bytes = j.lay.total * sizeof(float);
  for (int i = 0; i < threads; i++) { /* grown here, never inside a task */
    if (ws->cap[i] >= bytes) continue;
    sh_free(ctx, ws->buf[i], ws->cap[i]);
    ws->cap[i] = 0;
    ws->buf[i] = sh_alloc(ctx, bytes, 64);
    if (!ws->buf[i]) return SHEAF_ERR_NOMEM;
    ws->cap[i] = bytes;
  }
  if (threads == 1) {
    for (size_t t = 0; t < n_tasks; t++) attn_run(&j, (int64_t)t, 0);
  } else {
    sh_pool_run(ctx->pool, (int64_t)n_tasks, attn_run, &j, threads);
  }
  return SHEAF_OK;
}
