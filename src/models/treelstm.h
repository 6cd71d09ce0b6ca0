/*
 * treelstm.h — the binary TreeLSTM (Tai, Socher, Manning 2015: N-ary
 * TreeLSTM with N = 2) over binarized trees, written against the C API as
 * one bottom-up pass over a tree. Row vectors: x·W, W is [in, out].
 *
 *   leaf (word w):   [i o u] = emb[w]·W_leaf + b_leaf
 *                    c = σ(i)⊙tanh(u)              h = σ(o)⊙tanh(c)
 *   node (l, r):     [i f_l f_r o u] = [h_l ; h_r]·W_node + b_node
 *                    c = σ(i)⊙tanh(u) + σ(f_l)⊙c_l + σ(f_r)⊙c_r
 *                    h = σ(o)⊙tanh(c)
 *   tree output:     log_softmax(h_root·W_out + b_out)       (5 classes)
 *
 * Parameters (safetensors names, shared with bench/treelstm_torch.py):
 *   emb [V, E], W_leaf [E, 3H], b_leaf [3H], W_node [2H, 5H], b_node [5H],
 *   W_out [H, 5], b_out [5].
 * Each cell is one node, sheaf_tree_lstm_cell (the leaf form without
 * c_l, c_r), the same in inference and training.
 * A unary node (PTB input only; binarized trees have none) passes its
 * child's state through. The tree is built in phase 0 and its classifier in
 * phase 1 (so all trees' classifiers batch together whatever their depth);
 * the builder leaves the graph in phase 0.
 */
#ifndef SH_MODELS_TREELSTM_H
#define SH_MODELS_TREELSTM_H

#include "io/treebank.h"
#include "io/words.h"

#define SH_TREELSTM_CLASSES 5

typedef struct sh_treelstm {
  int64_t hidden, embed, vocab;
  sh_word_ids words; /* of emb: words 0 .. vocab - 2, <unk> the last row */
  sheaf_param emb, W_leaf, b_leaf, W_node, b_node, W_out, b_out;
} sh_treelstm;

/* Declares the parameters on m (Glorot weights, zero biases, normal
 * embeddings; values from the model's seed). */
sheaf_status sh_treelstm_declare(sheaf_model *m, int64_t hidden, int64_t embed, int64_t vocab,
                                 sh_treelstm *p);

/* Builds tree t of tb (a leaf looks up emb[sh_word_id(p->words, word)]:
 * a word -1 or >= vocab - 1 is <unk>): returns the log-probabilities [5]; *root_h
 * (if non-NULL) gets the root's h [H]. A null expression on error (the
 * graph holds the reason). */
sheaf_expr sh_treelstm_build(sheaf_graph *g, const sh_treelstm *p, const sh_treebank *tb,
                             int32_t t, sheaf_expr *root_h);

#endif
