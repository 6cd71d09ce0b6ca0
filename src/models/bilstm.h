/*
 * bilstm.h — a BiLSTM tagger over one variable-length sentence, written
 * against the C API as two ordinary loops. Row vectors; PyTorch's gate
 * order (i, f, g, o) in the 4H columns of the cell weights.
 *
 *   x_t = emb[w_t]
 *   (h_t, c_t)  = LSTM_fwd([x_t ; h_{t-1}], c_{t-1})     t = 0 .. n-1
 *   (h'_t, c'_t) = LSTM_bwd([x_t ; h'_{t+1}], c'_{t+1})  t = n-1 .. 0
 *   y_t = log_softmax([h_t ; h'_t]·W_tag + b_tag)          (17 UPOS tags)
 * with zero initial states; each cell is one sheaf_lstm_cell on
 * sheaf_concat([x_t, h_prev]) (no copy). The cells are built in phase 0,
 * the classifier in phase 1 (so every token's classifier batches together
 * whatever its depth); the builder leaves the graph in phase 0.
 *
 * Parameters: emb [V, E], W_fwd [E+H, 4H], b_fwd [4H], W_bwd [E+H, 4H],
 * b_bwd [4H], W_tag [2H, 17], b_tag [17]. A PyTorch nn.LSTM(E, H,
 * bidirectional=True) holds the same weights as weight_ih_l0 = W_fwd[:E]ᵀ,
 * weight_hh_l0 = W_fwd[E:]ᵀ, bias_ih_l0 = b_fwd, bias_hh_l0 = 0 (and
 * *_reverse from W_bwd, b_bwd).
 */
#ifndef SH_MODELS_BILSTM_H
#define SH_MODELS_BILSTM_H

#include "io/words.h"
#include "sheaf.h"

#define SH_BILSTM_TAGS 17

typedef struct sh_bilstm {
  int64_t hidden, embed, vocab;
  sh_word_ids words; /* of emb: words 0 .. vocab - 2, <unk> the last row */
  sheaf_param emb, W_fwd, b_fwd, W_bwd, b_bwd, W_tag, b_tag;
} sh_bilstm;

sheaf_status sh_bilstm_declare(sheaf_model *m, int64_t hidden, int64_t embed, int64_t vocab,
                               sh_bilstm *p);

/* Builds the sentence words[0..n) (word w looks up emb[sh_word_id(p->words,
 * w)]: ids -1 or >= vocab - 1 are <unk>): out[t] = y_t, the tag
 * log-probabilities [17] of word t.
 * Returns the graph's status (SHEAF_OK, or the first build error). */
sheaf_status sh_bilstm_build(sheaf_graph *g, const sh_bilstm *p, const int32_t *words,
                             int32_t n, sheaf_expr *out);

#endif
