/*
 * train_tree.c — `sheaf train treelstm`: the built-in binary TreeLSTM
 * (src/models/treelstm.h) learns a class per tree (src/io/tree_labels.h:
 * SST's root sentiment from PTB trees, the root word's UPOS class from
 * CoNLL-U). Owns the tree data and labels, a tree's loss (the trainer of
 * sheaf_train.h batches a batch's trees in one graph and minimizes the mean
 * NLL of their classes) and the accuracy; the loop, checkpoints and options
 * are cli/train.c's.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "train_int.h"

int train_tree_load(sheaf_ctx *ctx, const char *flag, const char *path, sh_dataset *d,
                    int32_t **labels) {
  *labels = NULL;
  if (sh_dataset_load(ctx, path, SH_DATASET_BINARY, d) != SHEAF_OK) {
    cli_error("%s", sheaf_ctx_last_error(ctx));
    return CLI_FAIL;
  }
  int32_t n = sh_dataset_count(d);
  *labels = malloc(((size_t)n + 1) * sizeof **labels);
  if (!*labels) {
    cli_error("%s %s: out of memory for %d labels", flag, path, (int)n);
    return CLI_FAIL;
  }
  if (sh_tree_labels_load(ctx, path, d, *labels) != SHEAF_OK) {
    cli_error("%s", sheaf_ctx_last_error(ctx));
    return CLI_FAIL;
  }
  return CLI_OK;
}

void train_tree_print_classes(const char *what, sh_tree_task task, const int32_t *labels, int32_t n) {
  int64_t count[SH_TREE_CLASSES] = {0};
  for (int32_t i = 0; i < n; i++) count[labels[i]]++;
  int best = 0;
  printf("  %s classes (%s):", what,
         task == SH_TREE_TASK_ROOT_UPOS ? "the root word's UPOS" : "the root's label");
  for (int c = 0; c < SH_TREE_CLASSES; c++) {
    printf(" %s %.1f%%", sh_tree_class_name(task, c), n ? 100.0 * (double)count[c] / n : 0.0);
    if (count[c] > count[best]) best = c;
  }
  printf("; majority class %s: %.2f%%\n", sh_tree_class_name(task, best),
         n ? 100.0 * (double)count[best] / n : 0.0);
}

sheaf_status train_tree_build(sheaf_trainer *tr, sheaf_graph *g, int64_t i, void *user) {
  trainer *t = user;
  sheaf_expr out;
  sheaf_status st = sh_net_build(&t->net, g, (int32_t)i, &out);
  return st == SHEAF_OK ? sheaf_trainer_loss(tr, sheaf_nll_logp(g, out, t->train_labels[i])) : st;
}

int train_tree_accuracy(trainer *t, const sh_dataset *d, const int32_t *labels, int32_t batch,
                        double *acc) {
  sh_net_outputs out;
  if (train_outputs(t, d, batch, &out) != CLI_OK) return CLI_FAIL;
  int32_t n = sh_dataset_count(d);
  int64_t right = 0;
  for (int32_t i = 0; i < n; i++)
    right += train_argmax(sh_net_outputs_row(&out, i, 0), SH_TREELSTM_CLASSES) == labels[i];
  sh_net_outputs_free(&out);
  *acc = n ? (double)right / (double)n : 0.0;
  return CLI_OK;
}
