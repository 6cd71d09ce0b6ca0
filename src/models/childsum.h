/*
 * childsum.h — the child-sum TreeLSTM (Tai, Socher, Manning 2015) over
 * dependency trees (one node per word, any number of children), written
 * against the C API as one bottom-up pass over a tree. Row vectors.
 *
 *   x = emb[w]          h~ = Σ_k h_k                   (children k)
 *   [i o u] = x·W_iou + h~·U_iou + b_iou
 *   f_k = σ(x·W_f + h_k·U_f + b_f)                     (one per child)
 *   c = σ(i)⊙tanh(u) + Σ_k f_k⊙c_k        h = σ(o)⊙tanh(c)
 *   tree output: the root's h [H]
 *
 * Parameters: emb [V, E], W_iou [E, 3H], U_iou [H, 3H], b_iou [3H],
 * W_f [E, H], U_f [H, H], b_f [H].
 */
#ifndef SH_MODELS_CHILDSUM_H
#define SH_MODELS_CHILDSUM_H

#include "io/treebank.h"
#include "io/words.h"

typedef struct sh_childsum_lstm {
  int64_t hidden, embed, vocab;
  sh_word_ids words; /* of emb: words 0 .. vocab - 2, <unk> the last row */
  sheaf_param emb, W_iou, U_iou, b_iou, W_f, U_f, b_f;
} sh_childsum_lstm;

sheaf_status sh_childsum_lstm_declare(sheaf_model *m, int64_t hidden, int64_t embed, int64_t vocab,
                                      sh_childsum_lstm *p);

/* Builds tree t (a node looks up emb[sh_word_id(p->words, word)]: a word
 * -1 or >= vocab - 1 is <unk>): the root's h. */
sheaf_expr sh_childsum_lstm_build(sheaf_graph *g, const sh_childsum_lstm *p, const sh_treebank *tb,
                                  int32_t t);

#endif
