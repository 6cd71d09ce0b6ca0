/*
 * tree_walk.h — what the built-in tree models share to build a tree without
 * recursion. A treebank stores each tree in post-order (every node after its
 * descendants, see io/treebank.h), so one forward pass over the tree's nodes
 * visits children before parents, in the order a left-to-right recursion
 * would finish them: a model keeps one state per node in a scratch array and
 * reads its children's states from it. Depth then costs no stack at all (a
 * 1,000,000-deep chain is as safe as a 10-word sentence).
 */
#ifndef SH_MODELS_TREE_WALK_H
#define SH_MODELS_TREE_WALK_H

#include <stdlib.h>

#include "io/treebank.h"
#include "sheaf_graph.h"

/* An array of tree t's size elements of `elem` bytes each, zeroed (the state
 * of node n is at index n - tb->tree_first[t]); NULL with g failed when out
 * of memory. Free with free(). */
static inline void *sh_tree_scratch(sheaf_graph *g, const sh_treebank *tb, int32_t t,
                                    size_t elem) {
  void *s = calloc((size_t)tb->tree_size[t], elem);
  if (!s)
    sheaf_graph_fail(g, SHEAF_ERR_NOMEM, "tree %d: no memory for the states of its %d nodes",
                     (int)t, (int)tb->tree_size[t]);
  return s;
}

#endif
