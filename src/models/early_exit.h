/*
 * early_exit.h — an early-exit classifier (Berxit-like) over one sentence:
 * a stack of up to SH_EE_MAX_LAYERS LSTM layers, each over the whole
 * sentence, with a classifier head after each layer; the instance stops at
 * the first layer whose head is confident enough. Written against the
 * public C API; the exit test reads a computed value (sheaf_value), so run
 * under sheaf_runner_run_fibers the instances waiting at the same layer are
 * flushed as one batch. Row vectors; PyTorch's gate order (i, f, g, o).
 *
 *   x_t^0 = emb[w_t]                                     (E = H)
 *   (h_t^l, c_t^l) = LSTM_l([x_t^l ; h_{t-1}^l], c_{t-1}^l),  x_t^{l+1} = h_t^l
 *   p^l = softmax(h_{n-1}^l·W_head_l + b_head_l)         (C classes)
 *   exit at the first l with max(p^l) >= threshold, else at the last layer
 * with zero initial states. Layers are 1-based in the outputs.
 *
 * Parameters: emb [V, H]; per layer l = 0 .. L-1: "W_l" [2H, 4H], "b_l"
 * [4H], "W_head_l" [H, C], "b_head_l" [C].
 *
 * Varied exit depths with random weights: sh_early_exit_seed scales the
 * embeddings to std 1 (from the NORMAL init's 0.02) and every LSTM weight
 * matrix by cell_gain (2.5), so the signal does not fade layer after layer
 * (with plain Glorot weights the deeper layers' states are near zero and
 * every sentence gets the same head output), and multiplies head l's
 * Glorot weights by a gain g_l = gain0 · growth^l (8 and 1.5): deeper heads
 * have larger logits, hence more confident softmaxes, so the share of
 * instances passing the threshold grows with depth, and which instances
 * pass first depends on their sentence (each head sees another random
 * projection of another layer's state). On the first 64 EWT test sentences
 * at hidden 256 the exits spread over all six layers (14 4 8 12 10 16). The
 * gains are moderate on purpose: larger ones amplify rounding (batched and
 * one-at-a-time runs sum in different orders) beyond 1e-5 in the
 * probabilities.
 *
 * Batching: each layer's cells are built in phase 0 (layer l's inputs were
 * computed by the previous flush and count as depth 0, so cell t sits at
 * depth ~ t in every instance and instances at one layer batch by position), each head in phase 1 (one batch whatever the sentence
 * length); the builder leaves the graph in phase 0.
 */
#ifndef SH_MODELS_EARLY_EXIT_H
#define SH_MODELS_EARLY_EXIT_H

#include "sheaf.h"

#define SH_EE_MAX_LAYERS 8
#define SH_EE_MAX_CLASSES 64

typedef struct sh_early_exit {
  int64_t hidden, vocab;
  int layers, classes;
  float threshold;         /* exit when max(p^l) >= threshold */
  float gain0, growth;     /* head gains (sh_early_exit_seed) */
  float cell_gain;         /* LSTM weight gain (sh_early_exit_seed) */
  sheaf_param emb;
  sheaf_param W[SH_EE_MAX_LAYERS], b[SH_EE_MAX_LAYERS];
  sheaf_param W_head[SH_EE_MAX_LAYERS], b_head[SH_EE_MAX_LAYERS];
} sh_early_exit;

/* Declares the parameters on m (1 <= layers <= SH_EE_MAX_LAYERS,
 * 2 <= classes <= SH_EE_MAX_CLASSES); threshold 0.9, gains 2.5, 8 and 1.5. */
sheaf_status sh_early_exit_declare(sheaf_model *m, int64_t hidden, int64_t vocab, int layers,
                                   int classes, sh_early_exit *p);

/* Seeds every parameter (sheaf_model_seed), then applies the gains above
 * and gives the biases small values (±0.1, from the seed). */
sheaf_status sh_early_exit_seed(sheaf_model *m, const sh_early_exit *p, uint64_t seed);

/* Runs one sentence of n >= 1 embedding rows (each in [0, vocab)): builds
 * layer by layer, reading each head's probabilities with sheaf_value (a
 * wait under fibers, a flush otherwise). *exit_layer gets the exit layer
 * (1 .. layers), probs (classes floats) the exit head's probabilities.
 * Returns the graph's status. */
sheaf_status sh_early_exit_run(sheaf_graph *g, const sh_early_exit *p, const int32_t *rows,
                               int32_t n, int *exit_layer, float *probs);

/* Sentences [first, first + count) of a set whose sentence i is the rows
 * rows[off[i] .. off[i+1]), on runner r: under sheaf_runner_run_fibers when
 * `fibers`, else sheaf_runner_run (each read a flush). exit_layer[i -
 * first] and probs[(i - first) * classes ...] get instance i's outputs. */
sheaf_status sh_early_exit_run_many(sheaf_runner *r, const sh_early_exit *p, const int32_t *rows,
                                    const int32_t *off, int64_t first, int64_t count, int fibers,
                                    int *exit_layer, float *probs);

#endif
