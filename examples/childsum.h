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
#ifndef SHEAF_EXAMPLES_CHILDSUM_H
#define SHEAF_EXAMPLES_CHILDSUM_H

#include "io/treebank.h"

typedef struct ex_childsum {
  int64_t hidden, embed, vocab;
  sheaf_param emb, W_iou, U_iou, b_iou, W_f, U_f, b_f;
} ex_childsum;

sheaf_status ex_childsum_declare(sheaf_model *m, int64_t hidden, int64_t embed, int64_t vocab,
                                 ex_childsum *p);

/* Builds tree t (words -1 or >= vocab - 1 look up unk_row): the root's h. */
sheaf_expr ex_childsum_build(sheaf_graph *g, const ex_childsum *p, const sh_treebank *tb,
                             int32_t t, int32_t unk_row);

#endif
