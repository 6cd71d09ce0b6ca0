/*
 * treebank.h — many trees in flat arrays, laid out for the batching runtime.
 *
 * Nodes of all trees share one index space (int32). Per node (structure of
 * arrays): word id (-1 for a node without a word), label id, parent (-1 for
 * a root), number of children, and the offset of its children in the shared
 * `children` array (children[child_off[n] + i], i < n_children[n], in
 * left-to-right order). Per tree: root, first node, node count; the nodes of
 * tree t are exactly [tree_first[t], tree_first[t] + tree_size[t]).
 *
 * Order invariant: within a tree every node comes after all of its
 * descendants, so the root is the tree's last node and one forward pass over
 * the nodes is a valid bottom-up evaluation order. Every tree made by the
 * readers (PTB, binarization, child-sum) is in post-order: children's
 * subtrees in child order, then the node — so the leaves of a tree, in index
 * order, read its words left to right.
 *
 * Words and labels are interned in the two vocabularies that live with the
 * treebank (callers may fill them beforehand to share ids across files). A
 * label spelled as a decimal integer ("0".."4" in SST) also has its integer
 * value: sh_tb_value(tb, node), SH_TB_NO_VALUE otherwise.
 */
#ifndef SH_IO_TREEBANK_H
#define SH_IO_TREEBANK_H

#include "io/vocab.h"

#define SH_TB_NO_VALUE INT32_MIN

/* The deepest tree Sheaf reads or writes, in every format: the nodes on the
 * longest root-to-leaf path (a lone node is 1; for a CoNLL-U sentence its
 * dependency depth, root word = 1). Readers refuse deeper input (PTB
 * nesting, CoNLL-U dependency chains), and binarization / child-sum
 * conversion refuse a sentence whose tree would be deeper, so every tree in
 * a treebank stays within it and whatever walks trees (the built-in models,
 * the interpreter) can rely on it. Width (children per node) is not
 * limited. Documented in docs/DATA.md ("Limits"). */
#define SH_TB_MAX_DEPTH 10000

typedef struct sh_treebank {
  sheaf_ctx *ctx;
  /* nodes: five arrays carved from one block of cap_nodes entries each */
  int32_t *word, *label, *parent, *n_children, *child_off;
  int32_t n_nodes;
  size_t cap_nodes;
  int32_t *children; /* child node indices, grouped by parent */
  int32_t n_child_refs;
  size_t cap_children;
  /* trees: three arrays carved from one block */
  int32_t *tree_root, *tree_first, *tree_size;
  int32_t n_trees;
  size_t cap_trees;
  /* label id -> integer value (or SH_TB_NO_VALUE), kept in step with labels */
  int32_t *label_value;
  int32_t n_label_values;
  size_t cap_label_values;
  sh_vocab words, labels;
  /* tree under construction */
  int32_t open_first; /* its first node, or -1 when none is open */
  int32_t open_child_refs;
} sh_treebank;

void sh_tb_init(sh_treebank *tb, sheaf_ctx *ctx);
void sh_tb_free(sh_treebank *tb);

static inline int32_t sh_tb_child(const sh_treebank *tb, int32_t node, int32_t i) {
  return tb->children[tb->child_off[node] + i];
}
static inline int32_t sh_tb_value(const sh_treebank *tb, int32_t node) {
  return tb->label_value[tb->label[node]];
}

/* ---- building (what the readers use) ----
 * begin; add nodes bottom-up (each child before its parent); end. The last
 * node added is the root and must be the only node without a parent. */
sheaf_status sh_tb_begin_tree(sh_treebank *tb);
/* Adds a node whose children are the given nodes of the open tree, none of
 * which may have a parent yet. word is -1 or a word id, label a label id. */
sheaf_status sh_tb_add_node(sh_treebank *tb, int32_t word, int32_t label,
                            const int32_t *children, int32_t n_children, int32_t *out);
sheaf_status sh_tb_end_tree(sh_treebank *tb);
/* Drops the open tree's nodes (no-op when none is open). */
void sh_tb_abort_tree(sh_treebank *tb);

/* A state to roll back to (readers restore it when the input is bad, so a
 * failed read leaves the trees as they were; vocabularies may have grown). */
typedef struct sh_tb_mark {
  int32_t n_trees, n_nodes, n_child_refs;
} sh_tb_mark;
sh_tb_mark sh_tb_get_mark(const sh_treebank *tb);
void sh_tb_rollback(sh_treebank *tb, sh_tb_mark m);

/* ---- shape ---- */

/* out[n] = height of node n over all nodes (a leaf is 1). out has n_nodes. */
void sh_tb_heights(const sh_treebank *tb, int32_t *out);
/* out[n] = depth of node n (a root is 1). out has n_nodes entries. */
void sh_tb_depths(const sh_treebank *tb, int32_t *out);
/* Height of each tree's root into out[n_trees] (scratch: n_nodes int32s). */
void sh_tb_tree_heights(const sh_treebank *tb, int32_t *scratch, int32_t *out);
/* Number of nodes carrying a word in tree t (its sentence length). */
int32_t sh_tb_tree_words(const sh_treebank *tb, int32_t t);

#endif
