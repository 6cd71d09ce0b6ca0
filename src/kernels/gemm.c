/*
 * gemm.c — the GEMM driver: packing B (once, or per call into the
 * workspace), packing A from row pointers / K-split sources, cache blocking,
 * the epilogue tile path, the per-thread workspace, the split over the
 * pool (several dynamically claimed tasks per thread) and the
 * row-completion hook. Micro-kernels live in gemm_{scalar,avx2,avx512}.c.
 *
 * Loop nest (per task = a range of B panels and a range of rows):
 *   for pc in K by KC                      (one pass when there is an epilogue)
 *     for ic in rows by MC:   pack A[ic.., pc..] into micro-panels of <= MR rows
 *       for jc in panels by NC:  (unpacked B: pack B[pc.., jc..] here)
 *         for each A micro-panel          (kc × mr, stays in L1)
 *           for each B panel in jc..      (kc × 32, streams from L2)
 *             micro-kernel -> C, or -> tile -> epilogue -> C
 */
#include "kernels/gemm.h"

#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "base/cpu.h"
#include "base/pool.h"

struct sh_gemm_ws {
  float *buf[SH_MAX_THREADS];
  size_t cap[SH_MAX_THREADS]; /* bytes */
};

/* Blocking (in elements / panels), tuned on Zen 4 (see docs/KERNELS.md). */
static int64_t g_kc = 384, g_mc = 336, g_nc = 8;
/* With a packed B, split M across threads from this many rows per thread. */
static int64_t g_split_m_rows = 128;
/* Finer split over threads (sh_gemm): tasks per thread, and the least work
 * (multiply-adds) worth a task of its own. */
#define TASKS_PER_THREAD 4
#define MIN_TASK_MACS 2.0e6

void sh_gemm_get_blocking(int64_t *kc, int64_t *mc, int64_t *nc_panels, int64_t *split_m_rows) {
  *kc = g_kc;
  *mc = g_mc;
  *nc_panels = g_nc;
  *split_m_rows = g_split_m_rows;
}

void sh_gemm_set_blocking(int64_t kc, int64_t mc, int64_t nc_panels, int64_t split_m_rows) {
  if (kc > 0) g_kc = kc;
  if (mc > 0) g_mc = mc;
  if (nc_panels > 0) g_nc = nc_panels;
  if (split_m_rows > 0) g_split_m_rows = split_m_rows;
}

/* This host's L2 per core in bytes (0: unknown), read once. */
static int64_t l2_bytes(void) {
  static _Atomic int64_t cached = -1;
  int64_t v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v < 0) {
    long s = sysconf(_SC_LEVEL2_CACHE_SIZE); /* glibc; 0 or -1 when unknown */
    v = s > 0 ? (int64_t)s : 0;
    atomic_store_explicit(&cached, v, memory_order_relaxed);
  }
  return v;
}

/* ------------------------------------------------------------ kernels */

/* The least nonzero pad_from of any kernel (the workspace's bound). */
#define PAD_FROM_MIN 4
#ifndef SH_GEMM_AVX2_PAD_FROM
#define SH_GEMM_AVX2_PAD_FROM 0 /* 4: the 4-row panel as 5 (for tuning runs) */
#endif
#define AVX2_PAD_FROM SH_GEMM_AVX2_PAD_FROM
_Static_assert(AVX2_PAD_FROM == 0 || AVX2_PAD_FROM >= PAD_FROM_MIN, "see ws_apack_floats");

static const sh_gemm_kernel k_scalar = {"sh_f32_gemm_ukernel_4x32__scalar", 4,
                                        sh_f32_gemm_ukernel_4x32__scalar,
                                        sh_f32_gemm_pack_a__scalar, 0};
#if defined(__x86_64__)
/* Micro-panels of 2 to 4 rows run as single-pass 2×32 / 3×32 kernels (a
 * 4-row one as two 2-row halves), with 8 or 12 accumulators in flight; they
 * used to run as 16-column passes with 4 to 8 (fewer than 4 cycles of FMA
 * latency × 2 ports need), the 4-row panel padded to 5. */
static const sh_gemm_kernel k_avx2 = {"sh_f32_gemm_ukernel_6x16x2__avx2", 6,
                                      sh_f32_gemm_ukernel_6x16x2__avx2,
                                      sh_f32_gemm_pack_a__avx2, AVX2_PAD_FROM};
#ifndef SH_GEMM_AVX512_MR
#define SH_GEMM_AVX512_MR 14 /* <= 14; smaller values only for tuning runs */
#endif
static const sh_gemm_kernel k_avx512 = {"sh_f32_gemm_ukernel_14x32__avx512", SH_GEMM_AVX512_MR,
                                        sh_f32_gemm_ukernel_14x32__avx512,
                                        sh_f32_gemm_pack_a__avx512, 0};
#endif

static sheaf_isa clamp_isa(sheaf_isa isa) {
  sheaf_isa host = sheaf_cpu_isa_host();
  if ((int)isa > (int)host) isa = host;
  if ((int)isa < 0) isa = SHEAF_ISA_SCALAR;
  return isa;
}

const sh_gemm_kernel *sh_gemm_kernel_get(sheaf_isa isa) {
  isa = clamp_isa(isa);
#if defined(__x86_64__)
  if (isa == SHEAF_ISA_AVX512) return &k_avx512;
  if (isa == SHEAF_ISA_AVX2) return &k_avx2;
#endif
  return &k_scalar;
}

/* -------------------------------------------------------------- pack B */

static inline float b_at(const float *b, int64_t ldb, bool trans, int64_t k, int64_t n) {
  return trans ? b[n * ldb + k] : b[k * ldb + n];
}

/* Panels per LSTM / GRU gate group (the cell tails run once per group). */
#define GROUP_PANELS (SH_GEMM_LSTM_W / SH_GEMM_NR)
_Static_assert(SH_GEMM_LSTM_W % SH_GEMM_NR == 0 && SH_GEMM_LSTM_W <= 2 * SH_GEMM_NR,
               "a gate group is one or two whole panels");

/* Logical column of packed lane j of panel p, or -1 for padding. */
static inline int64_t packed_col(int64_t p, int64_t j, int64_t n, int64_t hidden, bool lstm) {
  if (!lstm) {
    int64_t c = p * SH_GEMM_NR + j;
    return c < n ? c : -1;
  }
  /* gate group q = c / W holds gates 0..3 of hidden units qG..qG+G-1 */
  int64_t c = p * SH_GEMM_NR + j, g = c % SH_GEMM_LSTM_W / SH_GEMM_LSTM_G;
  int64_t h = c / SH_GEMM_LSTM_W * SH_GEMM_LSTM_G + c % SH_GEMM_LSTM_G;
  return h < hidden ? g * hidden + h : -1;
}

typedef struct pack_b_job {
  sh_gemm_packed_b *pb;
  const float *b;
  int64_t ldb;
  bool trans, lstm;
} pack_b_job;

/* Packs B panel p. A whole plain panel is copied row by row (B) or
 * column by column (B^T), each read contiguous; the rest lane by lane. */
static void pack_b_task(void *arg, int64_t p, int tid) {
  (void)tid;
  const pack_b_job *j = arg;
  const int64_t k = j->pb->k, n = j->pb->n;
  float *dst = j->pb->data + p * k * SH_GEMM_NR;
  if (!j->lstm && (p + 1) * SH_GEMM_NR <= n) {
    if (!j->trans) {
      for (int64_t kk = 0; kk < k; kk++)
        memcpy(dst + kk * SH_GEMM_NR, j->b + kk * j->ldb + p * SH_GEMM_NR, SH_GEMM_NR * sizeof(float));
    } else {
      for (int64_t c = 0; c < SH_GEMM_NR; c++) {
        const float *src = j->b + (p * SH_GEMM_NR + c) * j->ldb;
        for (int64_t kk = 0; kk < k; kk++) dst[kk * SH_GEMM_NR + c] = src[kk];
      }
    }
    return;
  }
  int64_t cols[SH_GEMM_NR];
  for (int64_t c = 0; c < SH_GEMM_NR; c++) cols[c] = packed_col(p, c, n, j->pb->hidden, j->lstm);
  for (int64_t kk = 0; kk < k; kk++)
    for (int64_t c = 0; c < SH_GEMM_NR; c++)
      dst[kk * SH_GEMM_NR + c] = cols[c] >= 0 ? b_at(j->b, j->ldb, j->trans, kk, cols[c]) : 0.0f;
}

/* Packs b into pb (its shape and flags): a pure copy, a panel per task, on
 * the pool when it is large (a training step repacks every weight after
 * its update). */
static void pack_b_fill(sheaf_ctx *ctx, sh_gemm_packed_b *pb, const float *b, int64_t ldb) {
  pack_b_job j = {pb, b, ldb, pb->flags & SH_GEMM_PACK_TRANS, pb->flags & SH_GEMM_PACK_GATES};
  if (pb->n_panels * pb->k * SH_GEMM_NR >= 32768 && pb->n_panels > 1) /* floats packed */
    sh_pool_run(ctx->pool, pb->n_panels, pack_b_task, &j, 0);
  else
    for (int64_t p = 0; p < pb->n_panels; p++) pack_b_task(&j, p, 0);
}

sheaf_status sh_gemm_pack_b(sheaf_ctx *ctx, const float *b, int64_t ldb, int64_t k, int64_t n,
                            int flags, sh_gemm_packed_b **out) {
  if (!out) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "gemm pack: out is NULL");
  *out = NULL;
  bool trans = flags & SH_GEMM_PACK_TRANS, lstm = flags & SH_GEMM_PACK_GATES;
  if (k < 0 || n < 0) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "gemm pack: negative shape");
  if ((k > 0 && n > 0) && !b) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "gemm pack: B is NULL");
  if (ldb < (trans ? k : n))
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "gemm pack: ldb %lld < %lld", (long long)ldb,
                   (long long)(trans ? k : n));
  if (lstm && n % 4 != 0)
    return sh_fail(ctx, SHEAF_ERR_SHAPE, "gemm pack: LSTM gates need N %% 4 == 0 (N = %lld)",
                   (long long)n);
  int64_t hidden = lstm ? n / 4 : 0;
  int64_t panels = lstm ? (hidden + SH_GEMM_LSTM_G - 1) / SH_GEMM_LSTM_G * GROUP_PANELS
                        : (n + SH_GEMM_NR - 1) / SH_GEMM_NR;
  size_t elems, bytes;
  if (sh_mul_overflow((size_t)panels, (size_t)k, &elems) ||
      sh_mul_overflow(elems, SH_GEMM_NR * sizeof(float), &bytes))
    return sh_fail(ctx, SHEAF_ERR_NOMEM, "gemm pack: size overflow");
  sh_gemm_packed_b *pb = sh_calloc(ctx, 1, sizeof *pb);
  if (!pb) return SHEAF_ERR_NOMEM;
  pb->k = k;
  pb->n = n;
  pb->n_panels = panels;
  pb->hidden = hidden;
  pb->flags = flags;
  pb->bytes = bytes ? bytes : 64;
  pb->data = sh_alloc(ctx, pb->bytes, 64);
  if (!pb->data) {
    sh_free(ctx, pb, sizeof *pb);
    return SHEAF_ERR_NOMEM;
  }
  pack_b_fill(ctx, pb, b, ldb);
  *out = pb;
  return SHEAF_OK;
}

bool sh_gemm_repack_b(sheaf_ctx *ctx, const float *b, int64_t ldb, sh_gemm_packed_b *pb) {
  if (!pb || ((pb->k > 0 && pb->n > 0) && !b) || ldb < (pb->flags & SH_GEMM_PACK_TRANS ? pb->k : pb->n))
    return false;
  pack_b_fill(ctx, pb, b, ldb);
  return true;
}

void sh_gemm_repack_b_panel(const float *b, int64_t ldb, sh_gemm_packed_b *pb, int64_t p) {
  pack_b_job j = {pb, b, ldb, pb->flags & SH_GEMM_PACK_TRANS, pb->flags & SH_GEMM_PACK_GATES};
  pack_b_task(&j, p, 0);
}

void sh_gemm_packed_b_free(sheaf_ctx *ctx, sh_gemm_packed_b *pb) {
  if (!pb) return;
  sh_free(ctx, pb->data, pb->bytes);
  sh_free(ctx, pb, sizeof *pb);
}

/* ----------------------------------------------------------- workspace */

sheaf_status sh_gemm_ws_create(sheaf_ctx *ctx, sh_gemm_ws **out) {
  if (!out) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "gemm ws: out is NULL");
  *out = sh_calloc(ctx, 1, sizeof **out);
  return *out ? SHEAF_OK : SHEAF_ERR_NOMEM;
}

void sh_gemm_ws_free(sheaf_ctx *ctx, sh_gemm_ws *ws) {
  if (!ws) return;
  for (int i = 0; i < SH_MAX_THREADS; i++) sh_free(ctx, ws->buf[i], ws->cap[i]);
  sh_free(ctx, ws, sizeof *ws);
}

size_t sh_gemm_ws_bytes(const sh_gemm_ws *ws) {
  size_t s = 0;
  for (int i = 0; ws && i < SH_MAX_THREADS; i++) s += ws->cap[i];
  return s;
}

static sheaf_status ws_reserve(sheaf_ctx *ctx, sh_gemm_ws *ws, int threads, size_t bytes) {
  bytes = sh_align_up(bytes + 64, 4096);
  for (int i = 0; i < threads; i++) {
    if (ws->cap[i] >= bytes) continue;
    sh_free(ctx, ws->buf[i], ws->cap[i]);
    ws->buf[i] = NULL;
    ws->cap[i] = 0;
    ws->buf[i] = sh_alloc(ctx, bytes, 64);
    if (!ws->buf[i]) return SHEAF_ERR_NOMEM;
    ws->cap[i] = bytes;
  }
  return SHEAF_OK;
}

/* ---------------------------------------------------------------- plan */

typedef struct plan {
  const sh_gemm_args *args;
  const sh_gemm_kernel *kern;
  void (*epilogue)(const sh_gemm_ep_ctx *, float *, int64_t, int64_t, int64_t, int64_t);
  sh_gemm_ep_ctx ec;
  int64_t m, n, k, panels;
  int64_t kc, mc, ncp;
  bool lstm, has_ep, packed;
  int64_t pstep; /* panels per unit of the N loop and split: GROUP_PANELS for a cell */
  const float *bdata; /* packed B */
  int64_t tvec;   /* floats per vector of the epilogue (it reads whole vectors of the tile) */
  bool split_m;
  bool hook_in; /* rows_done from inside the loop (each task owns whole rows) */
  bool a_reuse; /* N split, one K pass, one MC block: a thread packs A once */
  int64_t n_tasks;
  sh_gemm_ws *ws;
  bool a_ready[SH_MAX_THREADS]; /* a_reuse: thread tid's workspace holds packed A */
} plan;

static inline const float *in_row(const sh_gemm_in *in, int64_t m) {
  return in->rows ? in->rows[m] : in->base + m * in->ld;
}
static inline float *out_row(const sh_gemm_out *o, int64_t m) {
  return o->rows ? o->rows[m] : o->base + m * o->ld;
}

/* Packs rows [m0, m0+rows) × columns [k0, k0+kc) of A as kc × kr (kr >=
 * rows: rows kr - rows of zeros, read from `zeros`, kc floats): per
 * K-source segment, the rows' pointers then the kernel's packer. */
static void pack_a_panel(const sh_gemm_args *a, sh_gemm_pack_a_fn pack, int64_t m0, int64_t rows,
                         int64_t kr, int64_t k0, int64_t kc, const float *zeros, float *dst) {
  int64_t s_k0 = 0;
  const float *src[16];
  for (int64_t r = rows; r < kr; r++) src[r] = zeros;
  for (int s = 0; s < a->n_src; s++) {
    int64_t sk = a->src[s].k;
    int64_t lo = k0 > s_k0 ? k0 : s_k0, hi = k0 + kc < s_k0 + sk ? k0 + kc : s_k0 + sk;
    if (lo < hi) {
      for (int64_t r = 0; r < rows; r++) src[r] = in_row(&a->src[s].in, m0 + r) + (lo - s_k0);
      pack(kr, hi - lo, src, dst + (lo - k0) * kr);
    }
    s_k0 += sk;
  }
}

/* Packs B rows [k0, k0+kc) × panels [p0, p0+np) of an unpacked B (or B^T). */
static void pack_b_block(const plan *pl, int64_t k0, int64_t kc, int64_t p0, int64_t np,
                         float *dst) {
  const sh_gemm_in *b = &pl->args->b;
  for (int64_t p = p0; p < p0 + np; p++) {
    float *d = dst + (p - p0) * kc * SH_GEMM_NR;
    int64_t c0 = p * SH_GEMM_NR, cols = pl->n - c0 < SH_GEMM_NR ? pl->n - c0 : SH_GEMM_NR;
    if (pl->args->b_trans) {
      for (int64_t j = 0; j < cols; j++) {
        const float *s = in_row(b, c0 + j) + k0;
        for (int64_t kk = 0; kk < kc; kk++) d[kk * SH_GEMM_NR + j] = s[kk];
      }
      for (int64_t kk = 0; kk < kc; kk++)
        for (int64_t j = cols; j < SH_GEMM_NR; j++) d[kk * SH_GEMM_NR + j] = 0.0f;
      continue;
    }
    for (int64_t kk = 0; kk < kc; kk++) {
      const float *s = in_row(b, k0 + kk) + c0;
      float *dd = d + kk * SH_GEMM_NR;
      memcpy(dd, s, (size_t)cols * sizeof(float));
      for (int64_t j = cols; j < SH_GEMM_NR; j++) dd[j] = 0.0f;
    }
  }
}

/* Splits `rows` into micro-panels of near-equal size <= mr. */
static inline int64_t n_micro(int64_t rows, int64_t mr) { return (rows + mr - 1) / mr; }

/* Rows the kernel runs for a micro-panel of `rows` (see pad_from). */
static inline int64_t kern_rows(const sh_gemm_kernel *k, int64_t rows) {
  return rows == k->pad_from ? rows + 1 : rows;
}

/* Workspace layout per thread (floats, from the 64-byte aligned start):
 * packed A (a row block, a padded micro-panel one row more: at most one
 * per 4 rows, as every kernel's pad_from is 0 or >= 4; the same size for
 * every kernel, so a workspace grown once serves them all), kc zeros (the
 * padding rows' source), then an unpacked B's block. */
static inline size_t ws_apack_floats(int64_t mc, int64_t kc) {
  return sh_align_up((size_t)((mc + n_micro(mc, PAD_FROM_MIN)) * kc), 16);
}
static inline size_t ws_zeros_floats(int64_t kc) { return sh_align_up((size_t)kc, 16); }

static void run_range(plan *pl, int64_t r0, int64_t r1, int64_t p0, int64_t p1, int tid) {
  const sh_gemm_args *a = pl->args;
  const int64_t K = pl->k, mr_max = pl->kern->mr;
  float *ws = (float *)sh_align_up((uintptr_t)pl->ws->buf[tid], 64);
  float *apack = ws;
  float *zeros = ws + ws_apack_floats(pl->mc, pl->kc);
  float *bpack = zeros + ws_zeros_floats(pl->kc);
  bool zeroed = false;
  _Alignas(64) float discard[SH_GEMM_NR] = {0}; /* C row of a padding row (no epilogue) */
  /* the epilogue tile: rows × 32 (stride 32), or for a cell rows × W
   * (stride W), panel s of the group in columns [32s, 32s + 32) */
  _Alignas(64) float tile[16 * SH_GEMM_LSTM_W];
  float *trow[GROUP_PANELS][16];
  float *crow[16];
  for (int s = 0; s < GROUP_PANELS; s++)
    for (int i = 0; i < 16; i++)
      trow[s][i] = pl->lstm ? tile + i * SH_GEMM_LSTM_W + s * SH_GEMM_NR : tile + i * SH_GEMM_NR;

  /* rows_done per micro-panel when one NC block covers the task's panels,
   * else per MC row block; only on the last K pass */
  const bool hook_mp = pl->hook_in && p1 - p0 <= pl->ncp;
  int64_t pc = 0;
  do {
    int64_t kc = K - pc < pl->kc ? K - pc : pl->kc;
    bool first = pc == 0, last = pc + kc >= K;
    for (int64_t ic = r0; ic < r1; ic += pl->mc) {
      int64_t mc = r1 - ic < pl->mc ? r1 - ic : pl->mc;
      int64_t nmp = n_micro(mc, mr_max);
      /* micro-panel i: rows [ic + off_i, +rows_i), packed at apack + off_i*kc;
       * near-equal sizes */
      int64_t base_rows = mc / nmp, extra = mc % nmp;
      if (!pl->a_reuse || !pl->a_ready[tid]) {
        pl->a_ready[tid] = pl->a_reuse;
        int64_t off = 0, aoff = 0;
        for (int64_t i = 0; i < nmp; i++) {
          int64_t rows = base_rows + (i < extra), kr = kern_rows(pl->kern, rows);
          if (kr > rows && !zeroed) {
            memset(zeros, 0, (size_t)pl->kc * sizeof(float));
            zeroed = true;
          }
          pack_a_panel(a, pl->kern->pack_a, ic + off, rows, kr, pc, kc, zeros, apack + aoff * kc);
          off += rows;
          aoff += kr;
        }
      }
      for (int64_t jc = p0; jc < p1; jc += pl->ncp) {
        int64_t np = p1 - jc < pl->ncp ? p1 - jc : pl->ncp;
        if (!pl->packed) pack_b_block(pl, pc, kc, jc, np, bpack);
        int64_t off = 0, aoff = 0;
        for (int64_t i = 0; i < nmp; i++) {
          int64_t rows = base_rows + (i < extra), kr = kern_rows(pl->kern, rows);
          const float *ap = apack + aoff * kc;
          int64_t m0 = ic + off;
          if (!pl->has_ep)
            for (int64_t r = 0; r < rows; r++) crow[r] = out_row(&a->c, m0 + r);
          for (int64_t p = jc; p < jc + np; p += pl->pstep) {
            const float *bp = pl->packed ? pl->bdata + (p * K + pc) * SH_GEMM_NR
                                         : bpack + (p - jc) * kc * SH_GEMM_NR;
            int64_t col0 = p * SH_GEMM_NR;
            if (pl->lstm) { /* the group's panels into one tile, then the cell tail */
              for (int64_t s = 0; s < pl->pstep; s++)
                pl->kern->ukernel(kr, SH_GEMM_NR, kc, ap, bp + s * K * SH_GEMM_NR, SH_GEMM_NR,
                                  trow[s], false);
              pl->epilogue(&pl->ec, tile, m0, rows, col0, SH_GEMM_LSTM_W);
            } else if (pl->has_ep) {
              int64_t cols = pl->n - col0 < SH_GEMM_NR ? pl->n - col0 : SH_GEMM_NR;
              /* the tile's columns the epilogue reads, in whole vectors of
               * of tvec: a narrow last panel (N = 3) computes 8 columns
               * (AVX2, scalar) or 16 (AVX-512), not 32 */
              int64_t tcols = cols <= pl->tvec ? pl->tvec : cols <= SH_GEMM_NR / 2 ? SH_GEMM_NR / 2 : SH_GEMM_NR;
              /* the epilogue's C lines, for writing, while the kernel runs
               * (C is often a fresh block: its lines come from L3) */
              for (int64_t r = 0; r < rows; r++) {
                const float *cr = out_row(&a->c, m0 + r) + col0;
                __builtin_prefetch(cr, 1);
                __builtin_prefetch(cr + cols - 1, 1);
              }
              pl->kern->ukernel(kr, tcols, kc, ap, bp, SH_GEMM_NR, trow[0], false);
              pl->epilogue(&pl->ec, tile, m0, rows, col0, cols);
            } else {
              int64_t cols = pl->n - col0 < SH_GEMM_NR ? pl->n - col0 : SH_GEMM_NR;
              float *cp[16];
              for (int64_t r = 0; r < rows; r++) cp[r] = crow[r] + col0;
              for (int64_t r = rows; r < kr; r++) cp[r] = discard;
              pl->kern->ukernel(kr, cols, kc, ap, bp, SH_GEMM_NR, cp, a->accumulate || !first);
            }
          }
          if (hook_mp && last) a->rows_done(a->rows_done_arg, m0, rows, tid);
          off += rows;
          aoff += kr;
        }
      }
      if (pl->hook_in && !hook_mp && last) a->rows_done(a->rows_done_arg, ic, mc, tid);
    }
    pc += kc;
  } while (pc < K);
}

/* rows_done after the whole product (N was split over the threads, so no
 * task owned whole rows): blocks of rows spread over the same threads. */
typedef struct rows_job {
  const sh_gemm_args *args;
  int64_t block;
} rows_job;

static void rows_task(void *arg, int64_t task, int tid) {
  const rows_job *j = arg;
  int64_t m0 = task * j->block, rows = j->args->m - m0 < j->block ? j->args->m - m0 : j->block;
  j->args->rows_done(j->args->rows_done_arg, m0, rows, tid);
}

static void rows_done_after(sheaf_ctx *ctx, const sh_gemm_args *args, int threads) {
  int64_t nb = (int64_t)threads * TASKS_PER_THREAD;
  rows_job j = {args, (args->m + nb - 1) / nb};
  if (j.block > 64) j.block = 64;
  int64_t n_tasks = (args->m + j.block - 1) / j.block;
  if (threads == 1 || n_tasks == 1)
    for (int64_t t = 0; t < n_tasks; t++) rows_task(&j, t, 0);
  else
    sh_pool_run(ctx->pool, n_tasks, rows_task, &j, threads);
}

static void gemm_task(void *arg, int64_t task, int tid) {
  plan *pl = arg;
  int64_t nt = pl->n_tasks;
  if (pl->split_m) {
    /* even row ranges; each is cut into near-equal micro-panels */
    int64_t r0 = pl->m * task / nt, r1 = pl->m * (task + 1) / nt;
    if (r0 < r1) run_range(pl, r0, r1, 0, pl->panels, tid);
  } else {
    /* even ranges of panels (of gate groups for a cell) */
    int64_t units = pl->panels / pl->pstep;
    int64_t q0 = units * task / nt * pl->pstep, q1 = units * (task + 1) / nt * pl->pstep;
    if (q0 < q1) run_range(pl, 0, pl->m, q0, q1, tid);
  }
}

/* ----------------------------------------------------------- validation */

static bool in_ok(const sh_gemm_in *in, int64_t cols) {
  return in->rows || (in->base && in->ld >= cols);
}
static bool out_ok(const sh_gemm_out *o, int64_t cols) {
  return o->rows || (o->base && o->ld >= cols);
}

static sheaf_status validate(sheaf_ctx *ctx, const sh_gemm_args *a, int64_t *k_out,
                             int64_t *n_out) {
  if (a->m < 0) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "gemm: M = %lld", (long long)a->m);
  if (a->n_src < 1 || a->n_src > SH_GEMM_MAX_KSRC)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "gemm: %d A sources (1..%d)", a->n_src,
                   SH_GEMM_MAX_KSRC);
  int64_t k = 0;
  for (int s = 0; s < a->n_src; s++) {
    if (a->src[s].k < 0) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "gemm: source %d K < 0", s);
    if (a->m > 0 && a->src[s].k > 0 && !in_ok(&a->src[s].in, a->src[s].k))
      return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "gemm: A source %d has no rows/base or lda < K",
                     s);
    k += a->src[s].k;
  }
  int64_t n;
  if (a->b_packed) {
    if (a->b_packed->k != k)
      return sh_fail(ctx, SHEAF_ERR_SHAPE, "gemm: A has K = %lld, packed B has K = %lld",
                     (long long)k, (long long)a->b_packed->k);
    n = a->b_packed->n;
  } else {
    n = a->n;
    if (n < 0) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "gemm: N = %lld", (long long)n);
    if (k > 0 && n > 0 && !in_ok(&a->b, a->b_trans ? k : n))
      return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "gemm: B has no rows/base or ldb < %s",
                     a->b_trans ? "K" : "N");
  }
  bool lstm_packed = a->b_packed && (a->b_packed->flags & SH_GEMM_PACK_GATES);
  if (a->lstm || a->gru) {
    const char *what = a->lstm ? "LSTM" : "GRU";
    if (a->lstm && a->gru)
      return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "gemm: both an LSTM and a GRU epilogue");
    if (!lstm_packed)
      return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                     "gemm: the %s epilogue needs B packed with SH_GEMM_PACK_GATES", what);
    int seen = 0;
    int g[4];
    if (a->lstm) {
      g[0] = a->lstm->gate_i, g[1] = a->lstm->gate_f, g[2] = a->lstm->gate_o, g[3] = a->lstm->gate_u;
    } else {
      g[0] = a->gru->gate_r, g[1] = a->gru->gate_z, g[2] = a->gru->gate_nx, g[3] = a->gru->gate_nh;
    }
    for (int i = 0; i < 4; i++)
      if (g[i] >= 0 && g[i] < 4) seen |= 1 << g[i];
    if (seen != 15)
      return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "gemm: %s gate indices are not a permutation",
                     what);
    if (a->accumulate || a->n_ep)
      return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                     "gemm: the %s epilogue excludes accumulate and other epilogues", what);
    int64_t h = a->b_packed->hidden;
    if (a->lstm) {
      const sh_gemm_lstm *l = a->lstm;
      if (a->m > 0 && h > 0 && (!out_ok(&l->c_out, h) || !out_ok(&l->h_out, h)))
        return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "gemm: LSTM c_out/h_out missing or ld < hidden");
      if (a->lstm_gates.base && a->lstm_gates.ld < 5 * h)
        return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "gemm: LSTM lstm_gates ld < 5 * hidden");
      if (l->c_prev.base && l->c_prev.ld < h)
        return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "gemm: LSTM c_prev ld < hidden");
    } else {
      const sh_gemm_gru *r = a->gru;
      if (a->m > 0 && h > 0 && !out_ok(&r->h_out, h))
        return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "gemm: GRU h_out missing or ld < hidden");
      if (r->h_prev.base && r->h_prev.ld < h)
        return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "gemm: GRU h_prev ld < hidden");
    }
  } else {
    if (lstm_packed)
      return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                     "gemm: B packed with SH_GEMM_PACK_GATES needs an LSTM or GRU epilogue");
    if (a->m > 0 && n > 0 && !out_ok(&a->c, n))
      return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "gemm: C has no rows/base or ldc < N");
    if (a->n_ep < 0 || a->n_ep > SH_GEMM_MAX_EP)
      return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "gemm: %d epilogue ops (0..%d)", a->n_ep,
                     SH_GEMM_MAX_EP);
    for (int i = 0; i < a->n_ep; i++) {
      const sh_gemm_ep *e = &a->ep[i];
      int64_t n1 = e->n1 <= 0 ? n : e->n1;
      if (e->n0 < 0 || e->n0 > n1 || n1 > n)
        return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "gemm: epilogue %d columns [%lld, %lld) vs N = %lld",
                       i, (long long)e->n0, (long long)n1, (long long)n);
      switch (e->kind) {
      case SH_GEMM_EP_BIAS:
        if (!e->vec) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "gemm: epilogue %d: no bias", i);
        break;
      case SH_GEMM_EP_ACT:
        if ((unsigned)e->act > SH_GEMM_ACT_GELU_ERF)
          return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "gemm: epilogue %d: bad activation", i);
        break;
      case SH_GEMM_EP_ADD:
      case SH_GEMM_EP_MUL:
        if (a->m > 0 && n1 > e->n0 && !e->other.rows && !(e->other.base && e->other.ld >= n1))
          return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "gemm: epilogue %d: operand missing or ld < %lld",
                         i, (long long)n1);
        break;
      default:
        return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "gemm: epilogue %d: bad kind", i);
      }
    }
  }
  *k_out = k;
  *n_out = n;
  return SHEAF_OK;
}

/* ----------------------------------------------------------------- call */

sheaf_status sh_gemm(sheaf_ctx *ctx, sheaf_isa isa, int threads, const sh_gemm_args *args) {
  if (!args) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "gemm: args is NULL");
  int64_t k = 0, n = 0;
  sheaf_status st = validate(ctx, args, &k, &n);
  if (st) return st;
  if (args->m == 0 || n == 0) return SHEAF_OK;

  isa = clamp_isa(isa);
  plan pl = {0};
  pl.args = args;
  pl.kern = sh_gemm_kernel_get(isa);
  pl.epilogue = sh_gemm_epilogue__scalar;
#if defined(__x86_64__)
  if (isa == SHEAF_ISA_AVX512) pl.epilogue = sh_gemm_epilogue__avx512;
  if (isa == SHEAF_ISA_AVX2) pl.epilogue = sh_gemm_epilogue__avx2;
#endif
  pl.tvec = isa == SHEAF_ISA_AVX512 ? 16 : 8;
  pl.m = args->m;
  pl.n = n;
  pl.k = k;
  pl.lstm = args->lstm != NULL || args->gru != NULL;
  pl.has_ep = pl.lstm || args->n_ep > 0;
  pl.pstep = pl.lstm ? GROUP_PANELS : 1;
  pl.packed = args->b_packed != NULL;
  pl.bdata = pl.packed ? args->b_packed->data : NULL;
  pl.panels = pl.packed ? args->b_packed->n_panels : (n + SH_GEMM_NR - 1) / SH_GEMM_NR;
  pl.ec.args = args;
  pl.ec.n = n;
  pl.ec.hidden = pl.packed ? args->b_packed->hidden : 0;
  /* K blocks: an epilogue needs the whole K sum in one pass; few rows (a
   * handful of A micro-panels, little reuse of a B block) do best with long
   * K blocks (fewer passes over C); else KC, balanced. */
  int64_t kc_max = args->m <= 96 ? 1024 : g_kc;
  if (kc_max < g_kc) kc_max = g_kc;
  pl.kc = k > 0 ? k : 1;
  if (!pl.has_ep && k > kc_max) {
    int64_t nb = (k + kc_max - 1) / kc_max;
    pl.kc = (k + nb - 1) / nb;
  }
  /* B panels per NC block: every A micro-panel of a row block streams the
   * block, so it should stay in L2 (at most half of it, the rest for A and
   * C): g_nc (tuned on a 1 MB L2) unless the block's panels are too long
   * for this host's L2 (K = 768 on a 512 KB L2: 2 panels, not 8, else each
   * micro-panel re-reads the block from L3). */
  int64_t ncp = g_nc, l2 = l2_bytes(), panel_bytes = pl.kc * SH_GEMM_NR * (int64_t)sizeof(float);
  if (l2 > 0 && ncp * panel_bytes > l2 / 2) ncp = l2 / 2 / panel_bytes;
  if (ncp < 1) ncp = 1;
  pl.ncp = (ncp + pl.pstep - 1) / pl.pstep * pl.pstep; /* whole gate groups */

  int pool_threads = sh_pool_threads(ctx->pool);
  if (threads <= 0 || threads > pool_threads) threads = pool_threads;
  if (threads > SH_MAX_THREADS) threads = SH_MAX_THREADS;
  if (threads < 1) threads = 1;
  /* Below ~2 us of work a second thread costs more than it brings. */
  if ((double)args->m * (double)n * (double)(k > 0 ? k : 1) < 131072.0) threads = 1;
  /* Split M when each thread gets many rows (each packs only its own A and
   * B is pre-packed), else N when there are enough panels, else M. */
  int64_t mr = pl.kern->mr;
  if (threads > 1 && pl.packed && args->m >= g_split_m_rows * threads) pl.split_m = true;
  int64_t n_units = pl.panels / pl.pstep; /* what an N split divides */
  if (threads > 1 && pl.panels < 2 * threads && args->m >= 2 * mr * threads) pl.split_m = true;
  if (threads > 1 && !pl.split_m && n_units < threads) threads = (int)n_units;
  if (threads > 1 && pl.split_m && args->m < threads) threads = (int)args->m;
  /* Several tasks per thread, claimed dynamically, so that a preempted or
   * slow thread delays the call by one small task, not by its whole share:
   * up to TASKS_PER_THREAD per thread, each at least MIN_TASK_MACS of work
   * and at least 2 micro-panels of rows (M split) or 2 panels (N split; 8
   * when each task must pack its own copy of A). */
  pl.n_tasks = 1;
  if (threads > 1) {
    double macs = (double)args->m * (double)n * (double)(k > 0 ? k : 1);
    int64_t units = pl.split_m ? args->m / (2 * mr) : pl.lstm ? n_units : pl.panels / 2;
    pl.a_reuse = !pl.split_m && pl.kc >= k && args->m <= g_mc;
    if (!pl.split_m && !pl.a_reuse) units = pl.panels / pl.ncp;
    int64_t by_work = (int64_t)(macs / MIN_TASK_MACS);
    int64_t nt = (int64_t)threads * TASKS_PER_THREAD;
    if (nt > units) nt = units;
    if (nt > by_work) nt = by_work;
    nt -= nt % threads; /* equal tasks: a multiple of the thread count */
    pl.n_tasks = nt > threads ? nt : threads;
  }
  pl.hook_in = args->rows_done && (threads == 1 || pl.split_m);
  int64_t rows_per_task = pl.split_m ? (args->m + pl.n_tasks - 1) / pl.n_tasks : args->m;
  pl.mc = rows_per_task < g_mc ? rows_per_task : g_mc;
  size_t need = sizeof(float) * (ws_apack_floats(pl.mc, pl.kc) + ws_zeros_floats(pl.kc) +
                                 (pl.packed ? 0 : (size_t)(pl.kc * pl.ncp * SH_GEMM_NR)));

  sh_gemm_ws *own = NULL;
  pl.ws = args->ws;
  if (!pl.ws) {
    st = sh_gemm_ws_create(ctx, &own);
    if (st) return st;
    pl.ws = own;
  }
  st = ws_reserve(ctx, pl.ws, threads, need);
  if (st == SHEAF_OK) {
    if (threads == 1)
      gemm_task(&pl, 0, 0);
    else
      sh_pool_run(ctx->pool, pl.n_tasks, gemm_task, &pl, threads);
    if (args->rows_done && !pl.hook_in) rows_done_after(ctx, args, threads);
  }
  if (own) sh_gemm_ws_free(ctx, own);
  return st;
}
