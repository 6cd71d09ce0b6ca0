/*
 * tree_labels.h — the class of each tree, the target that `sheaf train
 * treelstm` learns and `sheaf run treelstm` scores (docs/TRAINING.md):
 *
 *   PTB trees (SST format): the root's label, an integer 0..4 (SST's
 *     sentiment, 0 very negative .. 4 very positive);
 *   CoNLL-U (binarized): the UPOS of the sentence's root word (the word
 *     whose HEAD is 0), in five classes: VERB, NOUN, PROPN, ADJ, and every
 *     other tag as "other". The binarized tree's labels do not give it
 *     away: the model sees only the words and the tree's shape, and must
 *     find the head word among the leaves.
 *
 * The labels are read from the same file the trees were loaded from (the
 * data set d, binary trees, loaded by sh_dataset_load from `name`), tree t
 * gets labels[t]. Errors (SHEAF_ERR_PARSE): a PTB root label that is not
 * an integer 0..4, "NAME:LINE:COL: error: ..." at that label; a file whose
 * trees are not d's ("NAME: ... trees, the data set has ...").
 */
#ifndef SH_IO_TREE_LABELS_H
#define SH_IO_TREE_LABELS_H

#include "io/dataset.h"

#define SH_TREE_CLASSES 5

typedef enum sh_tree_task {
  SH_TREE_TASK_PTB_ROOT = 0, /* PTB: the root's integer label */
  SH_TREE_TASK_ROOT_UPOS     /* CoNLL-U: the root word's UPOS class */
} sh_tree_task;

/* The names of the classes of a task ("0".."4"; "VERB" .. "other"). */
const char *sh_tree_class_name(sh_tree_task task, int32_t c);
/* The task a file gives (by its name: .conllu or PTB). */
sh_tree_task sh_tree_task_of(const char *name);

/* labels[sh_dataset_count(d)] from the file `path` d was loaded from. */
sheaf_status sh_tree_labels_load(sheaf_ctx *ctx, const char *path, const sh_dataset *d,
                                 int32_t *labels);
/* The same from the file's bytes data[0..size) (name: messages, format). */
sheaf_status sh_tree_labels_mem(sheaf_ctx *ctx, const char *data, size_t size, const char *name,
                                const sh_dataset *d, int32_t *labels);

#endif
