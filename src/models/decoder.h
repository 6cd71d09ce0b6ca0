/*
 * decoder.h — a seq2seq decoder whose length depends on computed values,
 * written against the C API (sheaf_graph.h) for sheaf_runner_run_fibers:
 * a BiLSTM encoder over the source word ids, bilinear attention over its
 * states, an LSTM decoder with input feeding, greedy (argmax) decoding that
 * stops at EOS or a maximum length; beam.h adds beam search. Row vectors;
 * the LSTM cells are sheaf_lstm_cell (PyTorch's gate order i, f, g, o).
 *
 *   encoder   e_t = [h_t ; h'_t]           BiLSTM over emb_src[w_t] (as bilstm.h)
 *             M = stack(e_0 .. e_{n-1})     [n, 2H]
 *             s_0 = tanh([h_{n-1} ; h'_0]·W_br + b_br),  c_0 = 0,  a_0 = 0 [H]
 *   step      (s_t, c_t) = LSTM_dec([emb_tgt[y_{t-1}] ; a_{t-1} ; s_{t-1}], c_{t-1})
 *             alpha = softmax(M · (s_t·W_att))                [n]
 *             ctx = alpha · M                                 [2H]
 *             a_t = tanh([s_t ; ctx]·W_comb + b_comb)         [H]  (fed to the next step)
 *             logp_t = log_softmax(a_t·W_out + b_out)         [V]
 *   y_0 = BOS (row V of emb_tgt; V = SH_DEC_VOCAB = 1000 words + EOS).
 *
 * Decoding reads logp_t with sheaf_value at every step (in a fiber build,
 * the instance waits there and the steps of all live instances run as one
 * batch) and picks on the host
 *
 *   y_t = argmax_k  logp_t[k] + [k == EOS] · eos_bonus · (t + 1) / n · (max logp_t - mean logp_t)
 *
 * (n the source length; lowest k on ties). The EOS term is a length prior,
 * the trick that makes EOS reachable with seeded random weights: such a
 * model's argmax almost never lands on one given token of 1001, so the
 * prior (in units of the step's own spread of log-probabilities) grows
 * until EOS wins, near step n / eos_bonus, earlier or later by the
 * instance's own EOS log-probability. To make that depend more on the
 * values, sh_decoder_seed scales W_out's EOS column by SH_DEC_EOS_SCALE
 * (the EOS logit then varies 3x more than the others from step to step).
 * Decoding stops after EOS (kept as the last token) or at
 * sh_decoder_max_len(n) tokens. The greedy score is the sum of the chosen
 * tokens' logp (the prior not included).
 *
 * Parameters: emb_src [Vs, E], W_fwd, W_bwd [E+H, 4H], b_fwd, b_bwd [4H],
 * W_br [2H, H], b_br [H], emb_tgt [V+1, E], W_dec [E+2H, 4H], b_dec [4H],
 * W_att [H, 2H], W_comb [3H, H], b_comb [H], W_out [H, V], b_out [V]; all
 * seeded (sh_decoder_seed), biases included (GLOROT, small and nonzero).
 */
#ifndef SH_MODELS_DECODER_H
#define SH_MODELS_DECODER_H

#include "sheaf.h"

#define SH_DEC_VOCAB 1001  /* output tokens: 1000 words and EOS */
#define SH_DEC_EOS 1000
#define SH_DEC_BOS 1001    /* row of emb_tgt fed at the first step */
#define SH_DEC_MAX_LEN 48  /* cap of sh_decoder_max_len */
#define SH_DEC_EOS_BONUS 1.0f
#define SH_DEC_EOS_SCALE 5.0f

typedef struct sh_decoder {
  int64_t hidden, embed, src_vocab;
  float eos_bonus; /* SH_DEC_EOS_BONUS unless changed */
  sheaf_param emb_src, W_fwd, b_fwd, W_bwd, b_bwd, W_br, b_br, emb_tgt, W_dec, b_dec, W_att,
      W_comb, b_comb, W_out, b_out;
} sh_decoder;

/* Declares the parameters (names as above) on m. */
sheaf_status sh_decoder_declare(sheaf_model *m, int64_t hidden, int64_t embed, int64_t src_vocab,
                                sh_decoder *p);

/* Seeds the model (sheaf_model_seed) and scales W_out's EOS column by
 * SH_DEC_EOS_SCALE (see above). */
sheaf_status sh_decoder_seed(sheaf_model *m, const sh_decoder *p, uint64_t seed);

/* Maximum output length for a source of n words: min(2n, SH_DEC_MAX_LEN),
 * at least 1. */
int32_t sh_decoder_max_len(int32_t n);

/* A decoder state: s_t, c_t, a_t (c and a null before the first step: zeros). */
typedef struct sh_dec_state {
  sheaf_expr h, c, att;
} sh_dec_state;

/* The encoder's output: M [n, 2H] and the initial state. */
typedef struct sh_dec_enc {
  sheaf_expr M;
  sh_dec_state s0;
} sh_dec_enc;

/* Builds the encoder over src[0..n) (n >= 1; ids outside [0, Vs - 1) map
 * to the last row, <unk>). Returns the graph's status. */
sheaf_status sh_decoder_encode(sheaf_graph *g, const sh_decoder *p, const int32_t *src, int32_t n,
                               sh_dec_enc *out);

/* Builds step t (0-based) from state s fed token y (SH_DEC_BOS first):
 * the next state and logp [V]. Every step is built in graph phase 1 (the
 * encoder in phase 0; the graph is left in phase 0): step 0 shares its
 * flush with the encoder, and depth counts within a phase, so step 0 of
 * every instance has the same depths whatever its source length; a later
 * step's inputs come from earlier flushes (depth 0), so its depths are the
 * same in every instance too, and the steps of all live instances batch
 * together at the flush (t only names the step). Returns the graph's
 * status. */
sheaf_status sh_decoder_step(sheaf_graph *g, const sh_decoder *p, const sh_dec_enc *enc,
                             const sh_dec_state *s, int32_t y, int32_t t, sh_dec_state *next,
                             sheaf_expr *logp);

/* The host's choice at step t (0-based) from logp [V]: the argmax above. */
int32_t sh_decoder_pick(const sh_decoder *p, const float *logp, int32_t t, int32_t n);
/* Its parts: the EOS prior at step t for logp, and the argmax of logp with
 * `bonus` added to EOS. */
double sh_decoder_eos_bonus(const sh_decoder *p, const float *logp, int32_t t, int32_t n);
int32_t sh_decoder_pick_bonus(const float *logp, double bonus);

/* Greedy decoding of src[0..n): out (room for sh_decoder_max_len(n)) gets
 * the tokens (EOS last when reached), *len their count, *score the sum of
 * their logp. Reads a value per step (sheaf_value: a wait in a fiber
 * build, a flush otherwise). Returns the graph's status. */
sheaf_status sh_decoder_greedy(sheaf_graph *g, const sh_decoder *p, const int32_t *src, int32_t n,
                               int32_t *out, int32_t *len, float *score);

/* Many sources decoded by a runner: sh_dec_batch_build is a sheaf_instance_fn
 * (user: the sh_dec_batch) decoding source i greedily (beam 0) or with beam
 * search of that width, into toks + i * SH_DEC_MAX_LEN, len[i], score[i]:
 *
 *   sh_dec_batch b = {&dec, n, off, ids, 0, toks, len, score};
 *   sheaf_runner_run_fibers(r, 0, n, sh_dec_batch_build, NULL, &b);
 */
typedef struct sh_dec_batch {
  const sh_decoder *p;
  int32_t n;
  const int32_t *off; /* source i is ids[off[i] .. off[i + 1]) */
  const int32_t *ids;
  int beam;           /* 0: greedy; else the beam width */
  int32_t *toks;      /* n * SH_DEC_MAX_LEN */
  int32_t *len;       /* n */
  float *score;       /* n */
} sh_dec_batch;

sheaf_status sh_dec_batch_build(sheaf_graph *g, int64_t i, int worker, void *user);

#endif
