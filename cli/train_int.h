/*
 * train_int.h — what cli/train.c (options, the epoch loop, checkpoints)
 * shares with cli/train_tree.c (the TreeLSTM's labels, batches and
 * accuracy).
 */
#ifndef SHEAF_CLI_TRAIN_INT_H
#define SHEAF_CLI_TRAIN_INT_H

#include "io/tree_labels.h"
#include "models/models.h"
#include "sheaf_train.h"

typedef struct trainer {
  sheaf_ctx *ctx;
  sh_net_kind kind; /* SH_NET_BILSTM or SH_NET_TREELSTM */
  sh_dataset train, dev;
  bool have_dev;
  int32_t *train_labels, *dev_labels; /* treelstm: a class per tree */
  sh_tree_task task;                  /* treelstm: what the classes are */
  sh_vocab vocab;
  sh_net net;
  sheaf_trainer *tr; /* the epoch loop (sheaf_train.h) */
  sheaf_graph *g;       /* tr's */
  sheaf_optimizer *opt; /* tr's */
  int64_t epochs_before, steps_before; /* of a resumed checkpoint */
  int64_t steps_loaded; /* the update count of a resumed optimizer state */
} trainer;

int train_fail_ctx(sheaf_ctx *ctx);
/* The net's outputs on every instance of d, `batch` per graph (to free
 * with sh_net_outputs_free); CLI_OK or CLI_FAIL (printed, nothing held). */
int train_outputs(trainer *t, const sh_dataset *d, int32_t batch, sh_net_outputs *out);
/* The index of the largest of row[0..n). */
int train_argmax(const float *row, int n);

/* Loads binary trees and their classes (tree_labels.h); CLI_OK or CLI_FAIL
 * (printed). *labels: malloc'd, a class per tree. */
int train_tree_load(sheaf_ctx *ctx, const char *flag, const char *path, sh_dataset *d,
                    int32_t **labels);
/* The trainer's build callback (user: the trainer): tree i and the NLL of
 * its class. */
sheaf_status train_tree_build(sheaf_trainer *tr, sheaf_graph *g, int64_t i, void *user);
/* The fraction of d's trees whose best-scoring class is labels[tree]. */
int train_tree_accuracy(trainer *t, const sh_dataset *d, const int32_t *labels, int32_t batch,
                        double *acc);
/* Prints the classes' shares in labels[0..n) and the majority class's. */
void train_tree_print_classes(const char *what, sh_tree_task task, const int32_t *labels, int32_t n);

#endif
