/*
 * parser.h — a greedy arc-standard shift-reduce dependency parser
 * (SPINN-like: a word's representation is replaced by a composition when it
 * takes a dependent), written against the public C API. Each decision
 * reads the action scores (sheaf_value), so under sheaf_runner_run_fibers
 * the sentences waiting for a decision are flushed as one batch.
 *
 *   r_i = emb[w_i]                                         (E = H)
 *   state: stack s (s0 the top, s1 below), buffer front b0 (zeros if absent)
 *   hid = tanh([r_s1 ; r_s0 ; r_b0]·W_h + b_h)             [H]
 *   score = hid·W_a + b_a                                  [3]: SHIFT, LEFT, RIGHT
 *   action = argmax of score over the legal actions (ties: the first)
 *     SHIFT (buffer not empty)  push b0
 *     LEFT  (2+ on the stack)   head(s1) = s0, pop s1;  r_s0 = compose(r_s0, r_s1)
 *     RIGHT (2+ on the stack)   head(s0) = s1, pop s0;  r_s1 = compose(r_s1, r_s0)
 *   compose(h, d) = tanh([h ; d]·W_c + b_c)
 * until the buffer is empty and one word is left: its head is 0 (the root).
 * With one legal action (a stack of fewer than two) nothing is read. Every
 * sentence gets a projective tree (2n - 1 actions).
 *
 * Parameters: emb [V, H], W_h [3H, H], b_h [H], W_a [H, 3], b_a [3],
 * W_c [2H, H], b_c [H].
 *
 * Batching: compositions are built in phase 0, the scorer in phase 1; a
 * representation computed by an earlier flush counts as depth 0 (the
 * runtime's depth rule), so every sentence's step sits at the same depth
 * whatever its action history. The builder leaves the graph in phase 0.
 */
#ifndef SH_MODELS_PARSER_H
#define SH_MODELS_PARSER_H

#include "sheaf.h"

enum { SH_PARSE_SHIFT = 0, SH_PARSE_LEFT = 1, SH_PARSE_RIGHT = 2 };

typedef struct sh_parser {
  int64_t hidden, vocab;
  sheaf_param emb, W_h, b_h, W_a, b_a, W_c, b_c;
} sh_parser;

sheaf_status sh_parser_declare(sheaf_model *m, int64_t hidden, int64_t vocab, sh_parser *p);

/* Seeds every parameter (sheaf_model_seed), then gives the biases small
 * values (±0.1; b_a ±0.5) from the seed. */
sheaf_status sh_parser_seed(sheaf_model *m, const sh_parser *p, uint64_t seed);

/* Parses one sentence of n >= 1 embedding rows (each in [0, vocab)):
 * heads[i] gets word i's head (1-based, 0 for the root). actions (may be
 * NULL; 2n - 1 entries) gets the action sequence; *score_sum (may be NULL)
 * the sum of the chosen actions' scores over the steps that read them.
 * Returns the graph's status. */
sheaf_status sh_parser_run(sheaf_graph *g, const sh_parser *p, const int32_t *rows, int32_t n,
                           int32_t *heads, int8_t *actions, double *score_sum);

/* Sentences [first, first + count) of a set whose sentence i is the rows
 * rows[off[i] .. off[i+1]), on runner r (fibers or not, as
 * sh_early_exit_run_many): heads[off[i] ..] gets sentence i's heads (an
 * array indexed like rows), score_sum[i - first] (may be NULL) its sum. */
sheaf_status sh_parser_run_many(sheaf_runner *r, const sh_parser *p, const int32_t *rows,
                                const int32_t *off, int64_t first, int64_t count, int fibers,
                                int32_t *heads, double *score_sum);

/* 1 if heads[0..n) (1-based, 0 = root) is a tree: exactly one root, every
 * head in 0..n, no cycle. */
int sh_parser_is_tree(const int32_t *heads, int32_t n);

#endif
