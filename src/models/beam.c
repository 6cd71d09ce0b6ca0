/*
 * beam.c — beam search for the seq2seq decoder (see beam.h): the beam's
 * hypotheses, the top-`width` selection over their candidates on the host
 * (exact, with a float pre-filter that skips tokens that cannot enter).
 */
#include "models/beam.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

typedef struct hyp {
  sh_dec_state s; /* the state before feeding y */
  int32_t y;      /* the token fed next (the last of toks; BOS at first) */
  int32_t len;
  bool ended;
  double score;
  int32_t toks[SH_DEC_MAX_LEN];
} hyp;

typedef struct cand {
  double score;
  int parent;
  int32_t tok; /* -1: the parent itself, ended */
} cand;

static bool better(const cand *a, const cand *b) {
  if (a->score != b->score) return a->score > b->score;
  if (a->parent != b->parent) return a->parent < b->parent;
  return a->tok < b->tok;
}

/* Inserts c into the sorted top list (*n of at most w entries). */
static void consider(cand *top, int *n, int w, cand c) {
  if (*n == w && !better(&c, &top[w - 1])) return;
  int i = *n < w ? (*n)++ : w - 1;
  while (i > 0 && better(&c, &top[i - 1])) {
    top[i] = top[i - 1];
    i--;
  }
  top[i] = c;
}

/* A float below which a token's log-probability v cannot enter the full
 * top list: then base + v < the last entry's score strictly, whatever the
 * rounding (a relative margin far above double's), so consider() would
 * reject it; -inf (filter nothing) while the list is not full. */
static float reject_below(const cand *top, int n, int w, double base) {
  if (n < w) return -INFINITY;
  double thr = top[w - 1].score, d = thr - base;
  if (!isfinite(d)) return -INFINITY;
  d -= 1e-12 * (fabs(thr) + fabs(base) + fabs(d)) + 1e-300;
  if (d < -FLT_MAX) return -INFINITY;
  if (d > FLT_MAX) return FLT_MAX;
  float f = (float)d;
  return (double)f > d ? nextafterf(f, -INFINITY) : f;
}

sheaf_status sh_decoder_beam(sheaf_graph *g, const sh_decoder *p, const int32_t *src, int32_t n,
                             int width, int32_t *out, int32_t *len, float *score) {
  *len = 0;
  *score = 0;
  if (width < 1 || width > SH_BEAM_MAX_WIDTH)
    return sheaf_graph_fail(g, SHEAF_ERR_INVALID_ARG, "sh_decoder_beam: width %d outside 1..%d", width,
                            SH_BEAM_MAX_WIDTH);
  sh_dec_enc enc;
  sheaf_status st = sh_decoder_encode(g, p, src, n, &enc);
  if (st) return st;
  int32_t max_len = sh_decoder_max_len(n);
  hyp beam[SH_BEAM_MAX_WIDTH], nb[SH_BEAM_MAX_WIDTH];
  sh_dec_state next[SH_BEAM_MAX_WIDTH];
  sheaf_expr logp[SH_BEAM_MAX_WIDTH];
  cand top[SH_BEAM_MAX_WIDTH];
  int nbeam = 1;
  memset(&beam[0], 0, sizeof beam[0]);
  beam[0].s = enc.s0;
  beam[0].y = SH_DEC_BOS;
  for (int32_t t = 0;; t++) {
    bool live = false;
    for (int b = 0; b < nbeam; b++) live |= !beam[b].ended;
    if (!live) break;
    /* every live hypothesis' step first: one batch */
    for (int b = 0; b < nbeam; b++)
      if (!beam[b].ended && (st = sh_decoder_step(g, p, &enc, &beam[b].s, beam[b].y, t, &next[b], &logp[b])))
        return st;
    int ntop = 0;
    for (int b = 0; b < nbeam; b++) {
      if (beam[b].ended) {
        consider(top, &ntop, width, (cand){beam[b].score, b, -1});
        continue;
      }
      sheaf_value_view v;
      if ((st = sheaf_value(g, logp[b], &v))) return st;
      double bonus = sh_decoder_eos_bonus(p, v.data, t, n), base = beam[b].score;
      /* EOS (its bonus) first, then the other tokens through the float
       * pre-filter; consider's result does not depend on the order */
      consider(top, &ntop, width, (cand){base + (double)v.data[SH_DEC_EOS] + bonus, b, SH_DEC_EOS});
      float lim = reject_below(top, ntop, width, base);
      for (int32_t k = 0; k < SH_DEC_VOCAB; k++) {
        if (v.data[k] < lim || k == SH_DEC_EOS) continue;
        consider(top, &ntop, width, (cand){base + (double)v.data[k] + 0.0, b, k});
        lim = reject_below(top, ntop, width, base);
      }
    }
    for (int i = 0; i < ntop; i++) {
      const hyp *par = &beam[top[i].parent];
      hyp *h = &nb[i];
      h->len = par->len;
      memcpy(h->toks, par->toks, (size_t)par->len * sizeof h->toks[0]);
      h->score = top[i].score;
      if (top[i].tok < 0) {
        h->s = par->s;
        h->y = par->y;
        h->ended = true;
        continue;
      }
      h->s = next[top[i].parent];
      h->y = top[i].tok;
      h->toks[h->len++] = top[i].tok;
      h->ended = top[i].tok == SH_DEC_EOS || h->len >= max_len;
    }
    memcpy(beam, nb, (size_t)ntop * sizeof beam[0]);
    nbeam = ntop;
  }
  *len = beam[0].len;
  memcpy(out, beam[0].toks, (size_t)beam[0].len * sizeof out[0]);
  *score = (float)beam[0].score;
  return SHEAF_OK;
}
