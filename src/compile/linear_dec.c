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
 * row's context). The step's
 * initial state (row 0) is read per sentence: zeros, or the encoder's last
 * state (`enc[len(ws) - 1]`).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compile/linear_int.h"

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
  const float *es = L->state[a->calls[sg->att_first].fn][0];
  /* scores s_k = es_k . q; a = exp(s - max s) / sum; dst = sum_k a_k es_k */
  float m = -INFINITY, z = 0;
  float sc[256], *s = end - first <= 256 ? sc : malloc((size_t)(end - first) * sizeof *s); /* the scores */
  if (!s) return sh_fail(L->ctx, SHEAF_ERR_NOMEM, "out of memory: an attention over %d words", (int)(end - first));
  for (int32_t k = first; k < end; k++) {
    const float *e = es + (size_t)k * w;
    float d = 0;
    for (size_t j = 0; j < w; j++) d += e[j] * x[j];
    s[k - first] = d;
    m = d > m ? d : m;
  }
  for (int32_t k = first; k < end; k++) z += s[k - first] = expf(s[k - first] - m); /* each exp once */
  memset(dst, 0, w * sizeof(float)); /* (dst is another function's row or an input buffer: not x, not es) */
  for (int32_t k = first; k < end; k++) {
    float ak = s[k - first] / z;
    const float *e = es + (size_t)k * w;
    for (size_t j = 0; j < w; j++) dst[j] += ak * e[j];
  }
  if (s != sc) free(s);
  if (cached) {
    memcpy(L->dec_ctx + (size_t)row * w, dst, w * sizeof(float));
    L->dec_done[row] = 1;
  }
  return SHEAF_OK;
}

void sh_lin_dec_reset(sh_lin *L) {
  L->dec_fn = -1;
  if (L->dec_done) memset(L->dec_done, 0, L->dec_cap);
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
