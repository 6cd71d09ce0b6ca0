/*
 * linear_dec.c — the linearized mode's decoders (seq2seq.sf): a scan whose
 * state carries the sentence's encoder matrix and attends over it at every
 * step. The matrix is a map over the encoder scan's states (one row per
 * token, a sentence's rows contiguous: sh_lin_fn.es_fn); the decoder step's
 * kernel writes the attention's query q = h2 @ W_att as the state's context
 * component, and whoever reads that component (the next step, main's map)
 * gets softmax(es @ q) @ es over the row's sentence, computed here when the
 * reader's input is filled (as linear_reduce.c's attention), once per
 * row and run (L->dec_ctx: the next step and main's map read the same
 * row's context), eight words at a time over the sentence's matrix
 * transposed once a run (L->dec_est) with the generated kernels' vector
 * exp. The step's initial state (row 0) is read per sentence: zeros, or
 * the encoder's last state (`enc[len(ws) - 1]`).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compile/linear_int.h"

/* Eight floats as one value (GCC's vector extension: registers where the
 * target has them, at any optimisation level). The functions returning
 * them are static, so a build without AVX (debug, portable) has no ABI of
 * theirs to keep; they take them by address. */
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float f32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef uint32_t u32x8 __attribute__((vector_size(32)));

/* p[0..cnt) (cnt <= 8), zeros after. */
/* The same, at any float's address (a load, no memcpy call: the ASan build
 * checks it inline). */
typedef float f32x8u __attribute__((vector_size(32), aligned(4), may_alias));

static inline f32x8 load8(const float *p) { return *(const f32x8u *)p; }
static inline void store8(float *p, const f32x8 *v) { *(f32x8u *)p = *v; }

/* p[0..cnt) (cnt < 8), then fill. */
static inline f32x8 load_part8(const float *p, size_t cnt, float fill) {
  float a[8];
  for (size_t l = 0; l < 8; l++) a[l] = l < cnt ? p[l] : fill;
  return load8(a);
}

static inline float sum8(const f32x8 *v) {
  float a[8], d = 0;
  memcpy(a, v, sizeof a);
  for (int l = 0; l < 8; l++) d += a[l];
  return d;
}

/* exp of x <= 0 (a score minus its row's max), or NaN: the generated
 * kernels' and the softmax row kernel's (sk_expnp8 in
 * codegen/sheaf_kernel_abi.h, src/kernels/rows_avx2.c: one-constant
 * reduction, degree-5 polynomial, 2^n from the bits of n + 127; <= 5 ulp on
 * [-87.3, 0]), 0 below -87.3365, NaN kept. */
static inline f32x8 expnp8(const f32x8 *px) {
  f32x8 x = *px;
  const float magic = 12583039.0f; /* 1.5 * 2^23 + 127 */
  f32x8 t = x * 1.44269504088896341f + magic;
  f32x8 s = (f32x8)((u32x8)t << 23), n = t - magic;
  f32x8 r = n * -0x1.62E430p-1f + x;
  f32x8 p = 0x1.0F9F9Cp-7f * r + 0x1.573A1Ap-5f;
  p = p * r + 0x1.555A80p-3f;
  p = p * r + 0x1.FFFDC6p-2f;
  p = p * r + 0x1.FFFFF6p-1f;
  f32x8 y = (r * s) * p + s;
  i32x8 under = x < -0x1.5D589Ep6f;
  return (f32x8)((i32x8)y & ~under);
}

/* The scores' buffer: n rounded up to 8 floats. */
static sheaf_status scores_buf(sh_lin *L, size_t n8, float **s) {
  if (n8 > L->dec_tmp_cap) {
    size_t cap = n8 > 2 * L->dec_tmp_cap ? n8 : 2 * L->dec_tmp_cap;
    float *t = malloc(cap * sizeof *t);
    if (!t) return sh_fail(L->ctx, SHEAF_ERR_NOMEM, "out of memory: an attention over %zu words", n8);
    free(L->dec_tmp);
    L->dec_tmp = t, L->dec_tmp_cap = cap;
  }
  *s = L->dec_tmp;
  return SHEAF_OK;
}

/* s[0..n8) = exp(s - max s) (the padding after n: -inf, so 0); returns the sum. */
static float softmax_num(float *s, size_t n8) {
  f32x8 mx = (f32x8){0} - INFINITY;
  for (size_t k = 0; k < n8; k += 8) {
    f32x8 v = load8(s + k);
    i32x8 gt = v > mx;
    mx = (f32x8)(((i32x8)v & gt) | ((i32x8)mx & ~gt));
  }
  float a[8], m;
  memcpy(a, &mx, sizeof a);
  m = a[0];
  for (int l = 1; l < 8; l++) m = a[l] > m ? a[l] : m;
  f32x8 zv = {0};
  for (size_t k = 0; k < n8; k += 8) {
    f32x8 v = load8(s + k) - m;
    v = expnp8(&v);
    zv += v;
    store8(s + k, &v);
  }
  return sum8(&zv);
}

/* dst = softmax(E q) E for a sentence of n words whose matrix rows (width
 * w) are e: s_k = e_k . q, e_k = exp(s_k - max s), dst = sum_k e_k e_k /
 * sum_k e_k. Two layouts, eight floats at a time along the contiguous one:
 * w a multiple of 8 reads the rows as they are (eight columns at a time;
 * the context's 32 columns in registers over all the words); otherwise t is
 * the rows transposed ([w][n], sent_transposed), read eight words at a time
 * (s_k summed over j in order, the dynamic runtime's products). */
static sheaf_status attend(sh_lin *L, const float *e, const float *t, size_t n, size_t w, const float *q,
                           float *dst) {
  size_t n8 = (n + 7) / 8 * 8, nf = n / 8 * 8; /* the blocks, the full ones */
  float *s = NULL;
  sheaf_status st = scores_buf(L, n8, &s);
  if (st) return st;
  if (!t) { /* rows */
    for (size_t k = 0; k < n; k++) {
      const float *ek = e + k * w;
      f32x8 acc = load8(ek) * load8(q);
      for (size_t j = 8; j < w; j += 8) acc += load8(ek + j) * load8(q + j);
      s[k] = sum8(&acc);
    }
    for (size_t k = n; k < n8; k++) s[k] = -INFINITY;
    float z = softmax_num(s, n8);
    for (size_t j = 0; j < w; j += 32) {
      if (w - j >= 32) {
        f32x8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        for (size_t k = 0; k < n; k++) {
          const float *ek = e + k * w + j;
          float sk = s[k];
          a0 += load8(ek) * sk, a1 += load8(ek + 8) * sk, a2 += load8(ek + 16) * sk, a3 += load8(ek + 24) * sk;
        }
        a0 /= z, a1 /= z, a2 /= z, a3 /= z;
        store8(dst + j, &a0), store8(dst + j + 8, &a1), store8(dst + j + 16, &a2), store8(dst + j + 24, &a3);
      } else {
        for (size_t jj = j; jj < w; jj += 8) {
          f32x8 a0 = {0};
          for (size_t k = 0; k < n; k++) a0 += load8(e + k * w + jj) * s[k];
          a0 /= z;
          store8(dst + jj, &a0);
        }
      }
    }
    return SHEAF_OK;
  }
  for (size_t k = 0; k < n8; k += 8) { /* transposed */
    f32x8 v;
    if (k < nf) {
      v = load8(t + k) * q[0];
      for (size_t j = 1; j < w; j++) v += load8(t + j * n + k) * q[j];
    } else { /* the last block: -inf after the words (exp 0) */
      v = load_part8(t + k, n - k, 0) * q[0];
      for (size_t j = 1; j < w; j++) v += load_part8(t + j * n + k, n - k, 0) * q[j];
      v = load_part8((const float *)&v, n - k, -INFINITY);
    }
    store8(s + k, &v);
  }
  float z = softmax_num(s, n8);
  for (size_t j = 0; j < w; j++) {
    const float *tj = t + j * n;
    f32x8 acc = {0};
    for (size_t k = 0; k < nf; k += 8) acc += load8(s + k) * load8(tj + k);
    if (nf < n) acc += load8(s + nf) * load_part8(tj + nf, n - nf, 0);
    dst[j] = sum8(&acc) / z;
  }
  return SHEAF_OK;
}

/* The rows first..end - 1 (width w) of function efn's matrix, transposed
 * ([w][end - first]) into *t: made once a run per sentence of the first
 * matrix attended over (L->dec_est, at the sentence's first row), into a
 * buffer of the call otherwise. */
static sheaf_status sent_transposed(sh_lin *L, int efn, int32_t first, int32_t end, size_t w, const float **t) {
  size_t n = (size_t)(end - first), rows = (size_t)L->n_rows[efn];
  const float *es = L->state[efn][0];
  if (L->dec_est_fn < 0) L->dec_est_fn = efn;
  bool cached = L->dec_est_fn == efn;
  if (cached && rows * w > L->dec_est_cap) {
    size_t cap = rows * w > 2 * L->dec_est_cap ? rows * w : 2 * L->dec_est_cap;
    float *c = malloc(cap * sizeof *c);
    uint8_t *d = calloc(cap, 1);
    if (!c || !d) {
      free(c), free(d);
      return sh_fail(L->ctx, SHEAF_ERR_NOMEM, "out of memory: a decoder's matrix of %zu rows", rows);
    }
    free(L->dec_est), free(L->dec_est_done); /* (nothing of this run in them: their rows grow only here) */
    L->dec_est = c, L->dec_est_done = d, L->dec_est_cap = cap;
  }
  float *dst;
  if (cached) {
    dst = L->dec_est + (size_t)first * w;
    *t = dst;
    if (L->dec_est_done[first]) return SHEAF_OK;
    L->dec_est_done[first] = 1;
  } else {
    if (n * w + n + 7 > L->dec_tmp_cap) { /* the scores (attend's, n rounded up to 8) first, then the rows */
      size_t cap = n * w + n + 7;
      float *c = malloc(cap * sizeof *c);
      if (!c) return sh_fail(L->ctx, SHEAF_ERR_NOMEM, "out of memory: an attention over %zu words", n);
      free(L->dec_tmp);
      L->dec_tmp = c, L->dec_tmp_cap = cap;
    }
    dst = L->dec_tmp + L->dec_tmp_cap - n * w;
    *t = dst;
  }
  for (size_t k = 0; k < n; k++)
    for (size_t j = 0; j < w; j++) dst[j * n + k] = es[((size_t)first + k) * w + j];
  return SHEAF_OK;
}

sheaf_status sh_lin_dec_fill(sh_lin *L, const sh_lin_arm *a, const sh_lin_grp *g, const sh_lin_seg *sg, int32_t r,
                             float *dst) {
  size_t w = (size_t)sg->width;
  int32_t row = g->calls[sg->call][r];
  int fn = a->calls[sg->call].fn, comp = sg->comp;
  if (row == 0 && sg->init_zero) {
    memset(dst, 0, w * sizeof(float));
    return SHEAF_OK;
  }
  if (row == 0 && sg->init_call) { /* the initial state: the encoder's last */
    fn = a->calls[sg->init_call - 1].fn, comp = sg->init_comp;
    row = g->calls[sg->init_call - 1][r];
  }
  const float *x = L->state[fn][comp] + (size_t)row * w;
  if (!sg->att) {
    memcpy(dst, x, w * sizeof(float));
    return SHEAF_OK;
  }
  /* the row's context, once a run: rows of the first (function, component) attended from */
  int qfn = fn, qcomp = comp;
  if (L->dec_fn < 0) L->dec_fn = qfn, L->dec_comp = qcomp;
  bool cached = L->dec_fn == qfn && L->dec_comp == qcomp;
  if (cached && (size_t)L->n_rows[qfn] > L->dec_cap) {
    size_t cap = (size_t)L->n_rows[qfn] > 2 * L->dec_cap ? (size_t)L->n_rows[qfn] : 2 * L->dec_cap;
    float *c = malloc(cap * w * sizeof *c);
    uint8_t *d = calloc(cap, 1);
    if (!c || !d) {
      free(c), free(d);
      return sh_fail(L->ctx, SHEAF_ERR_NOMEM, "out of memory: the attention contexts of %d rows", (int)L->n_rows[qfn]);
    }
    if (L->dec_cap) { /* this run's contexts so far */
      memcpy(c, L->dec_ctx, L->dec_cap * w * sizeof *c);
      memcpy(d, L->dec_done, L->dec_cap);
    }
    free(L->dec_ctx), free(L->dec_done);
    L->dec_ctx = c, L->dec_done = d, L->dec_cap = cap;
  }
  if (cached && L->dec_done[row]) {
    memcpy(dst, L->dec_ctx + (size_t)row * w, w * sizeof(float));
    return SHEAF_OK;
  }
  int32_t first = g->calls[sg->att_first][r], end = g->calls[sg->att_end][r];
  if (end <= first)
    return sh_fail(L->ctx, SHEAF_ERR_INVALID_ARG, "linear run: an attention over a sentence of no words");
  int efn = a->calls[sg->att_first].fn;
  const float *e = L->state[efn][0] + (size_t)first * w, *t = NULL;
  sheaf_status st = w % 8 ? sent_transposed(L, efn, first, end, w, &t) : SHEAF_OK;
  if (!st) st = attend(L, e, t, (size_t)(end - first), w, x, dst);
  if (st) return st;
  if (cached) {
    memcpy(L->dec_ctx + (size_t)row * w, dst, w * sizeof(float));
    L->dec_done[row] = 1;
  }
  return SHEAF_OK;
}

void sh_lin_dec_reset(sh_lin *L) {
  L->dec_fn = -1, L->dec_est_fn = -1;
  if (L->dec_done) memset(L->dec_done, 0, L->dec_cap);
  if (L->dec_est_done) memset(L->dec_est_done, 0, L->dec_est_cap);
}

/* The call (fn, sel) of arm a, added when missing; -1 when the arm has too many. */
static int call_of(sh_lin_arm *a, int fn, int sel) {
  for (int c = 0; c < a->n_calls; c++)
    if (a->calls[c].fn == fn && a->calls[c].sel == sel) return c;
  if (a->n_calls == SH_LIN_MAX_CALLS) return -1;
  a->calls[a->n_calls] = (sh_lin_call){fn, -1, sel};
  return a->n_calls++;
}

/* Whether an encoder's last state taken as a decoder's initial state is also read by arm a's code. */
static bool init_read(const sh_lin_arm *a) {
  bool used[SH_LIN_MAX_NODES] = {0};
  for (int k = 0; k < a->n_nodes; k++) {
    const sh_lin_node *n = &a->nodes[k];
    if (n->a >= 0) used[n->a] = true;
    if (n->b >= 0) used[n->b] = true;
    for (int i = 0; (n->op == SH_LIN_CAT || n->op == SH_LIN_LN) && i < n->n_items; i++) used[n->items[i]] = true;
  }
  for (int j = 0; j < a->n_out; j++) used[a->out[j]] = true;
  for (int k = 0; k < a->n_nodes; k++)
    if (a->nodes[k].init_only && used[k]) return true;
  return false;
}

sheaf_status sh_lin_dec_patch(sh_lin *L) {
  for (int f = 0; f < L->n_fns; f++)
    for (int ai = 0; ai < L->fns[f].n_arms; ai++)
      if (init_read(L->fns[f].arms[ai]))
        return sh_lin_refuse(L, L->fns[f].arms[ai]->span, "an encoder's last state read besides as a decoder's "
                             "initial state: not translated by the linearized mode");
  for (int f = 1; f < L->n_fns; f++) {
    const sh_lin_fn *d = &L->fns[f];
    if (!d->es_fn) continue;
    for (int fi = 0; fi < L->n_fns; fi++)
      for (int ai = 0; ai < L->fns[fi].n_arms; ai++) {
        sh_lin_arm *a = L->fns[fi].arms[ai];
        for (int k = 0; k < a->n_nodes; k++) {
          sh_lin_node *n = &a->nodes[k];
          for (int q = 0; n->op == SH_LIN_IN && q < n->n_segs; q++) {
            sh_lin_seg *sg = &n->segs[q];
            if (sg->lookup || sg->zero || sg->reduce || sg->chars || sg->hx || a->calls[sg->call].fn != f) continue;
            if (a->calls[sg->call].sel == SH_LIN_SEL_PREV) {
              if (d->init_fn[sg->comp]) {
                int c = call_of(a, d->init_fn[sg->comp], SH_LIN_SEL_LAST);
                if (c < 0) return sh_lin_refuse(L, a->span, "too many calls in one arm");
                sg->init_call = 1 + c, sg->init_comp = d->init_comp[sg->comp];
              } else {
                sg->init_zero = true;
              }
            } /* (any other reader's row is of its own sentence: the attention reads that sentence's rows) */
            if (d->ctx_comp[sg->comp]) {
              if (d->init_fn[sg->comp])
                return sh_lin_refuse(L, d->fn->span, "a decoder's attention context whose initial value is not "
                                     "zeros: not translated by the linearized mode");
              int c0 = call_of(a, d->es_fn, SH_LIN_SEL_FIRST), c1 = c0 < 0 ? -1 : call_of(a, d->es_fn, SH_LIN_SEL_END);
              if (c1 < 0) return sh_lin_refuse(L, a->span, "too many calls in one arm");
              sg->att = true, sg->att_first = c0, sg->att_end = c1;
            }
          }
        }
      }
  }
  return SHEAF_OK;
}
