/*
 * mvrnn.h — the matrix-vector RNN (Socher, Huval, Manning, Ng 2012) over
 * binarized trees, written against the C API as one bottom-up pass over a
 * tree. Every node has a vector [H] and a matrix [H, H]:
 *
 *   leaf (word w):  a = emb[w]        A = reshape(emb_mat[w'], [H, H])
 *                   (w' in the capped matrix vocabulary, sh_dataset_mv_row)
 *   node (l, r) with (a, A) left and (b, B) right:
 *                   p = tanh([B·a ; A·b]·W + bias)        (W [2H, H])
 *                   P = A·W_1 + B·W_2                      (W_1, W_2 [H, H])
 *   tree output:    the root's p [H] (the root's P is not built)
 *
 * B·a is sheaf_matmul(B, a) (matrix times column vector). Parameters: emb
 * [V, H], emb_mat [V', H*H], W [2H, H], bias [H], W_1 [H, H], W_2 [H, H].
 * Initialization as in the paper: word matrices are the identity plus
 * small noise (sh_mvrnn_init_identity adds the identity after seeding).
 * Unary nodes (PTB input only) pass their child through.
 */
#ifndef SH_MODELS_MVRNN_H
#define SH_MODELS_MVRNN_H

#include "io/treebank.h"
#include "io/words.h"

typedef struct sh_mvrnn {
  int64_t hidden, vocab, mat_vocab;
  sh_word_ids words; /* of emb: words 0 .. vocab - 2, <unk> the last row */
  sheaf_param emb, emb_mat, W, bias, W_1, W_2;
} sh_mvrnn;

sheaf_status sh_mvrnn_declare(sheaf_model *m, int64_t hidden, int64_t vocab, int64_t mat_vocab,
                              sh_mvrnn *p);

/* Adds the identity to every word matrix (call after sheaf_model_seed, not
 * after loading weights). */
void sh_mvrnn_init_identity(sheaf_model *m, const sh_mvrnn *p);

/* Builds tree t: the root's vector p. Word w (its id sh_word_id(p->words,
 * w)) looks up emb[w] and emb_mat[mat_row[w]] (mat_row has vocab - 1
 * entries); a word -1 or beyond the tables uses their last row (<unk>). */
sheaf_expr sh_mvrnn_build(sheaf_graph *g, const sh_mvrnn *p, const sh_treebank *tb, int32_t t,
                          const int32_t *mat_row);

#endif
