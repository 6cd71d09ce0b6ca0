/*
 * binarize.h — dependency trees (sh_depbank) to constituency-style trees
 * (sh_treebank), for the TreeLSTM variants.
 *
 * Binary (sh_binarize), for the binary TreeLSTM: every word is a leaf
 * (word = FORM, label = UPOS). A head takes its dependents one at a time,
 * nearest first: first its right dependents from nearest to farthest, then
 * its left dependents from nearest to farthest. Each absorption makes an
 * internal node labelled with the absorbed dependent's DEPREL whose left
 * child is the part further left in the sentence:
 *
 *   x = leaf(h); for r in rights: x = (deprel(r) x bin(r));
 *                for l in lefts:  x = (deprel(l) bin(l) x)
 *
 * A sentence of n words gives 2n-1 nodes; for a projective tree the leaves,
 * left to right, spell the sentence (non-projective trees get the same
 * construction, so their leaf order differs from the sentence).
 *
 * Child-sum (sh_childsum), for the child-sum TreeLSTM: one node per word
 * (word = FORM, label = DEPREL, "root" for the root), children = its
 * dependents in sentence order. Written by the PTB writer as
 * "(deprel word child...)".
 *
 * Both append one tree per sentence, in post-order (see treebank.h), with
 * words and labels interned into the treebank's vocabularies. A sentence
 * whose tree would be deeper than SH_TB_MAX_DEPTH (the binary tree of a
 * head with many dependents is much deeper than its dependency tree) is
 * refused: SHEAF_ERR_PARSE "FILE:LINE:1: error: ..." at the sentence's
 * first line, with the depth, and the treebank is left as it was.
 */
#ifndef SH_IO_BINARIZE_H
#define SH_IO_BINARIZE_H

#include "io/conllu.h"
#include "io/treebank.h"

sheaf_status sh_binarize(const sh_depbank *db, sh_treebank *out);
sheaf_status sh_childsum(const sh_depbank *db, sh_treebank *out);

/* Height of sentence s's binary tree (a leaf is 1) without building it:
 * cur = 1; per absorbed dependent d: cur = max(cur, height(d)) + 1. w is
 * scratch. */
sheaf_status sh_binarized_height(const sh_depbank *db, int32_t s, sh_dep_work *w,
                                 int32_t *out);

#endif
