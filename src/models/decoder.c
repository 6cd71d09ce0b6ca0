/*
 * decoder.c — the seq2seq decoder (see decoder.h): parameters, the
 * encoder, one decoder step, the host's pick and greedy decoding.
 */
#include "models/decoder.h"
#include "models/params.h"

#include <stdlib.h>

#include "models/beam.h"

sheaf_status sh_decoder_declare(sheaf_model *m, int64_t H, int64_t E, int64_t Vs, sh_decoder *p) {
  p->hidden = H;
  p->embed = E;
  p->src_vocab = Vs;
  p->eos_bonus = SH_DEC_EOS_BONUS;
  const int64_t V = SH_DEC_VOCAB;
  const sh_model_param_decl decl[] = {
      {"emb_src", 2, Vs, E, SHEAF_INIT_NORMAL, &p->emb_src},
      {"W_fwd", 2, E + H, 4 * H, SHEAF_INIT_GLOROT, &p->W_fwd},
      {"b_fwd", 1, 4 * H, 0, SHEAF_INIT_GLOROT, &p->b_fwd},
      {"W_bwd", 2, E + H, 4 * H, SHEAF_INIT_GLOROT, &p->W_bwd},
      {"b_bwd", 1, 4 * H, 0, SHEAF_INIT_GLOROT, &p->b_bwd},
      {"W_br", 2, 2 * H, H, SHEAF_INIT_GLOROT, &p->W_br},
      {"b_br", 1, H, 0, SHEAF_INIT_GLOROT, &p->b_br},
      {"emb_tgt", 2, V + 1, E, SHEAF_INIT_NORMAL, &p->emb_tgt},
      {"W_dec", 2, E + 2 * H, 4 * H, SHEAF_INIT_GLOROT, &p->W_dec},
      {"b_dec", 1, 4 * H, 0, SHEAF_INIT_GLOROT, &p->b_dec},
      {"W_att", 2, H, 2 * H, SHEAF_INIT_GLOROT, &p->W_att},
      {"W_comb", 2, 3 * H, H, SHEAF_INIT_GLOROT, &p->W_comb},
      {"b_comb", 1, H, 0, SHEAF_INIT_GLOROT, &p->b_comb},
      {"W_out", 2, H, V, SHEAF_INIT_GLOROT, &p->W_out},
      {"b_out", 1, V, 0, SHEAF_INIT_GLOROT, &p->b_out},
  };
  return sh_params_declare(m, decl, sizeof decl / sizeof decl[0]);
}

sheaf_status sh_decoder_seed(sheaf_model *m, const sh_decoder *p, uint64_t seed) {
  sheaf_status st = sheaf_model_seed(m, seed);
  if (st) return st;
  int rank;
  const int64_t *shape;
  float *w = sheaf_model_param_data(m, p->W_out, &rank, &shape);
  if (!w) return sheaf_model_param_update(m, p->W_out); /* reports the bad parameter */
  for (int64_t r = 0; r < shape[0]; r++) w[r * SH_DEC_VOCAB + SH_DEC_EOS] *= SH_DEC_EOS_SCALE;
  return sheaf_model_param_update(m, p->W_out);
}

int32_t sh_decoder_max_len(int32_t n) {
  int32_t m = n > SH_DEC_MAX_LEN / 2 ? SH_DEC_MAX_LEN : 2 * n;
  return m < 1 ? 1 : m;
}

static int64_t src_row(const sh_decoder *p, int32_t w) {
  return w < 0 || w >= p->src_vocab - 1 ? p->src_vocab - 1 : w;
}

sheaf_status sh_decoder_encode(sheaf_graph *g, const sh_decoder *p, const int32_t *src, int32_t n,
                               sh_dec_enc *out) {
  if (n < 1 || n > 65535)
    return sheaf_graph_fail(g, SHEAF_ERR_INVALID_ARG, "sh_decoder_encode: source length %d outside 1..65535",
                            (int)n);
  sheaf_graph_phase(g, 0);
  sheaf_expr *st = malloc((size_t)n * sizeof *st);
  if (!st) return sheaf_graph_fail(g, SHEAF_ERR_NOMEM, "sh_decoder_encode: out of memory");
  int64_t hshape[1] = {p->hidden};
  sheaf_expr zero = sheaf_zeros(g, 1, hshape);
  sheaf_expr h = zero, c = {0}, h_last = zero;
  for (int32_t t = 0; t < n; t++) {
    sheaf_expr xh[2] = {sheaf_lookup(g, p->emb_src, src_row(p, src[t])), h};
    sheaf_lstm_cell(g, p->W_fwd, p->b_fwd, sheaf_concat(g, 2, xh), c, &h, &c);
    st[t] = h;
  }
  h_last = h;
  h = zero;
  c = (sheaf_expr){0};
  for (int32_t t = n - 1; t >= 0; t--) {
    sheaf_expr xh[2] = {sheaf_lookup(g, p->emb_src, src_row(p, src[t])), h};
    sheaf_lstm_cell(g, p->W_bwd, p->b_bwd, sheaf_concat(g, 2, xh), c, &h, &c);
    sheaf_expr both[2] = {st[t], h};
    st[t] = sheaf_concat(g, 2, both);
  }
  out->M = sheaf_stack(g, n, st);
  sheaf_expr ends[2] = {h_last, h};
  out->s0.h = sheaf_tanh(g, sheaf_affine(g, p->W_br, sheaf_concat(g, 2, ends), p->b_br));
  out->s0.c = (sheaf_expr){0};
  out->s0.att = zero;
  free(st);
  return sheaf_graph_status(g);
}

sheaf_status sh_decoder_step(sheaf_graph *g, const sh_decoder *p, const sh_dec_enc *enc,
                             const sh_dec_state *s, int32_t y, int32_t t, sh_dec_state *next,
                             sheaf_expr *logp) {
  (void)t;
  sheaf_graph_phase(g, 1); /* step 0 shares its flush with the encoder (phase 0) */
  sheaf_expr x[3] = {sheaf_lookup(g, p->emb_tgt, y), s->att, s->h};
  sheaf_expr h, c;
  sheaf_lstm_cell(g, p->W_dec, p->b_dec, sheaf_concat(g, 3, x), s->c, &h, &c);
  sheaf_expr q = sheaf_affine(g, p->W_att, h, SHEAF_NO_PARAM);   /* [2H] */
  sheaf_expr alpha = sheaf_softmax(g, sheaf_matmul(g, enc->M, q)); /* [n] */
  sheaf_expr ctx = sheaf_matmul(g, alpha, enc->M);                 /* [2H] */
  sheaf_expr hc[2] = {h, ctx};
  sheaf_expr att = sheaf_tanh(g, sheaf_affine(g, p->W_comb, sheaf_concat(g, 2, hc), p->b_comb));
  *logp = sheaf_log_softmax(g, sheaf_affine(g, p->W_out, att, p->b_out));
  sheaf_graph_phase(g, 0);
  next->h = h;
  next->c = c;
  next->att = att;
  return sheaf_graph_status(g);
}

int32_t sh_decoder_pick(const sh_decoder *p, const float *logp, int32_t t, int32_t n) {
  return sh_decoder_pick_bonus(logp, sh_decoder_eos_bonus(p, logp, t, n));
}

double sh_decoder_eos_bonus(const sh_decoder *p, const float *logp, int32_t t, int32_t n) {
  double mx = logp[0], sum = 0;
  for (int32_t k = 0; k < SH_DEC_VOCAB; k++) {
    mx = logp[k] > mx ? logp[k] : mx;
    sum += logp[k];
  }
  return (double)p->eos_bonus * (double)(t + 1) / (double)(n > 0 ? n : 1) * (mx - sum / SH_DEC_VOCAB);
}

int32_t sh_decoder_pick_bonus(const float *logp, double bonus) {
  int32_t best = 0;
  double bv = logp[0];
  for (int32_t k = 1; k < SH_DEC_VOCAB; k++) {
    double v = (double)logp[k] + (k == SH_DEC_EOS ? bonus : 0.0);
    if (v > bv) bv = v, best = k;
  }
  return best;
}

sheaf_status sh_decoder_greedy(sheaf_graph *g, const sh_decoder *p, const int32_t *src, int32_t n,
                               int32_t *out, int32_t *len, float *score) {
  *len = 0;
  *score = 0;
  sh_dec_enc enc;
  sheaf_status st = sh_decoder_encode(g, p, src, n, &enc);
  if (st) return st;
  int32_t max_len = sh_decoder_max_len(n), y = SH_DEC_BOS;
  sh_dec_state s = enc.s0;
  double sum = 0;
  for (int32_t t = 0; t < max_len; t++) {
    sheaf_expr logp;
    if ((st = sh_decoder_step(g, p, &enc, &s, y, t, &s, &logp))) return st;
    sheaf_value_view v;
    if ((st = sheaf_value(g, logp, &v))) return st;
    y = sh_decoder_pick(p, v.data, t, n);
    out[t] = y;
    sum += v.data[y];
    *len = t + 1;
    if (y == SH_DEC_EOS) break;
  }
  *score = (float)sum;
  return SHEAF_OK;
}

sheaf_status sh_dec_batch_build(sheaf_graph *g, int64_t i, int worker, void *user) {
  const sh_dec_batch *b = user;
  if (i < 0 || i >= b->n)
    return sheaf_graph_fail(g, SHEAF_ERR_INVALID_ARG, "sh_dec_batch_build: instance %lld of %d",
                            (long long)i, (int)b->n);
  const int32_t *src = b->ids + b->off[i];
  int32_t n = b->off[i + 1] - b->off[i];
  int32_t *out = b->toks + i * SH_DEC_MAX_LEN;
  return b->beam ? sh_decoder_beam(g, b->p, src, n, b->beam, out, &b->len[i], &b->score[i])
                 : sh_decoder_greedy(g, b->p, src, n, out, &b->len[i], &b->score[i]);
}
