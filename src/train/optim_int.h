/*
 * optim_int.h — the optimizer's state, shared by optim.c (the updates) and
 * optim_state.c (saving and loading it for an exact resume).
 */
#ifndef SH_TRAIN_OPTIM_INT_H
#define SH_TRAIN_OPTIM_INT_H

#include "train/train.h"

typedef struct opt_state {
  float *s1, *s2; /* momentum / first moment; second moment / AdaGrad sum (numel each) */
  size_t numel;
} opt_state;

struct sheaf_optimizer {
  sheaf_model *m;
  sheaf_optimizer_opts o;
  opt_state *st;
  uint32_t n_st;
  int64_t steps;
  bool lazy_rows; /* sheaf_optimizer_lazy_rows */
  double *part;   /* the norm's partial sums, one per chunk (n_part) */
  size_t n_part;
};

#endif
