/*
 * treefc.h — TreeFC (Cortex, Fegade et al. 2021: the fully connected tree
 * cell) over binarized trees, written against the C API as one bottom-up
 * pass over a tree; the C-API twin of examples/treefc.sf. Row
 * vectors: x·W, W is [in, out].
 *
 *   leaf (word w):   h = emb[w]
 *   node (l, r):     h = tanh([h_l ; h_r]·W + b)
 *   tree output:     the root's h [H]
 *
 * Parameters (safetensors names, as in treefc.sf): emb [V, H], W [2H, H],
 * b [H]. A unary node (PTB input only) passes its child's h through.
 */
#ifndef SH_MODELS_TREEFC_H
#define SH_MODELS_TREEFC_H

#include "io/treebank.h"
#include "io/words.h"

typedef struct sh_treefc {
  int64_t hidden, vocab;
  sh_word_ids words; /* of emb: words 0 .. vocab - 2, <unk> the last row */
  sheaf_param emb, W, b;
} sh_treefc;

/* Declares the parameters on m (normal embeddings, Glorot W, zero b; values
 * from the model's seed). */
sheaf_status sh_treefc_declare(sheaf_model *m, int64_t hidden, int64_t vocab, sh_treefc *p);

/* Builds tree t of tb (a leaf looks up emb[sh_word_id(p->words, word)]: a
 * word -1 or >= vocab - 1 is <unk>): the root's h [H]. */
sheaf_expr sh_treefc_build(sheaf_graph *g, const sh_treefc *p, const sh_treebank *tb, int32_t t);

#endif
