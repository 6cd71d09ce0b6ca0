/*
 * sheaf_train.h — training on Sheaf's batched graphs: reverse-mode
 * automatic differentiation, losses and optimizers (docs/TRAINING.md).
 *
 *   sheaf_graph_reset(g);
 *   for (each instance i of the batch) loss[i] = sheaf_nll(g, my_model(g, i), label[i]);
 *   sheaf_backward(g, n, loss, NULL);      // flushes, then the batched backward pass
 *   sheaf_optimizer_step(opt);             // clips, updates every parameter, repacks
 *   sheaf_model_zero_grad(m);
 *
 * The backward pass is batched as the forward is: nodes are grouped by
 * their distance from the losses (the forward's depth levels in reverse)
 * and by kernel, and an affine (or LSTM cell) bucket's weight gradient is
 * ONE GEMM over every row of the bucket, dW += X^T·dY, its input gradient
 * one GEMM dX = dY·W^T. Parameter gradients accumulate in the model (one
 * buffer per parameter, summed over the instances and over calls until
 * sheaf_model_zero_grad). A backward pass writes the gradients of the
 * model it runs on: two graphs of one model must not run it concurrently.
 */
#ifndef SHEAF_TRAIN_H
#define SHEAF_TRAIN_H

#include "sheaf.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------- gradients */

typedef struct sheaf_backward_opts {
  float scale;              /* each loss element's seed gradient (e.g. 1/batch for a mean);
                               0 is taken as 1 */
  int n_wrt;                /* expressions whose gradients are wanted besides the parameters' */
  const sheaf_expr *wrt;    /* (inputs, say: gradient checks) */
  float *const *wrt_grad;   /* n_wrt buffers, each of its expression's element count
                               (row-major): overwritten with d(loss)/d(wrt[i]) */
} sheaf_backward_opts;

/* Flushes the graph, then adds d(Σ of every element of every loss)/d(p)
 * to the gradient of each parameter p that the losses depend on (through
 * sheaf_parameter, sheaf_lookup — only the rows looked up —, affines,
 * LSTM cells). Every op of sheaf_graph.h has its derivative; the
 * comparisons (gt, ge, eq, ne) are piecewise constant and pass no
 * gradient, where passes it through the branch each element selected,
 * max/minimum/maximum/abs/relu through the selected input (ties: split
 * evenly for minimum/maximum, the first maximum for max). opts NULL: scale
 * 1, no wrt. A failure (out of memory) may leave the gradients partly
 * accumulated: zero them before trying again. */
SHEAF_API sheaf_status sheaf_backward(sheaf_graph *g, int n_loss, const sheaf_expr *loss,
                                      const sheaf_backward_opts *opts);

/* The gradient of a parameter (same shape as its values), allocated
 * zeroed on first use and kept with the model; NULL for an invalid
 * parameter or when out of memory. */
SHEAF_API float *sheaf_param_grad(sheaf_model *m, sheaf_param p);

/* Zeroes every parameter's gradient. */
SHEAF_API sheaf_status sheaf_model_zero_grad(sheaf_model *m);

/* ----------------------------------------------------------------- losses */

/* -log_softmax(logits)[label]: [1] (logits [n]); the negative
 * log-likelihood, i.e. cross-entropy against a one-hot label. */
SHEAF_API sheaf_expr sheaf_nll(sheaf_graph *g, sheaf_expr logits, int64_t label);
/* -logp[label]: the same for log-probabilities already computed. */
SHEAF_API sheaf_expr sheaf_nll_logp(sheaf_graph *g, sheaf_expr logp, int64_t label);

/* x with each element zeroed with probability p and the others scaled by
 * 1/(1 - p) (inverted dropout); the mask is drawn from `seed` (one
 * splitmix64 draw per element): the same seed gives the same mask, so
 * training is reproducible. p = 0 (inference): x itself. p outside [0, 1):
 * an error recorded on the graph. The mask is an input, so the gradient
 * passes through the kept elements only. */
SHEAF_API sheaf_expr sheaf_dropout(sheaf_graph *g, sheaf_expr x, float p, uint64_t seed);

/* ------------------------------------------------------------- optimizers */

typedef enum sheaf_optim_kind {
  SHEAF_OPTIM_SGD = 0, /* v = momentum·v + g;  p -= lr·v  (momentum 0: plain SGD) */
  SHEAF_OPTIM_ADAGRAD, /* s += g²;  p -= lr·g / (sqrt(s) + eps) */
  SHEAF_OPTIM_ADAM     /* Adam with bias correction; weight_decay decoupled (AdamW) */
} sheaf_optim_kind;

typedef struct sheaf_optimizer_opts {
  sheaf_optim_kind kind;
  float lr;            /* learning rate (> 0) */
  float momentum;      /* SGD */
  float beta1, beta2;  /* Adam; 0: 0.9 and 0.999 */
  float eps;           /* Adam, AdaGrad; 0: 1e-8 */
  float weight_decay;  /* SGD, AdaGrad: g += wd·p (L2); Adam: p -= lr·wd·p (decoupled) */
  float clip_norm;     /* > 0: gradients scaled so that their global L2 norm is at most this */
} sheaf_optimizer_opts;

typedef struct sheaf_optimizer sheaf_optimizer;

/* An optimizer over every parameter of m (those declared later too). */
SHEAF_API sheaf_status sheaf_optimizer_create(sheaf_model *m, const sheaf_optimizer_opts *opts,
                                              sheaf_optimizer **out);
SHEAF_API void sheaf_optimizer_free(sheaf_optimizer *o); /* NULL is fine */

/* One update of every parameter from its gradient (parameters without a
 * gradient are left alone), in declaration order, in float with the norm
 * summed in double: the same gradients give bit-identical weights. Marks
 * the parameters changed (sheaf_model_param_update), so graphs repack them.
 * Does not zero the gradients. *norm (may be NULL): the global gradient
 * norm before clipping. */
SHEAF_API sheaf_status sheaf_optimizer_step(sheaf_optimizer *o, double *norm);

/* Updates done so far. */
SHEAF_API int64_t sheaf_optimizer_steps(const sheaf_optimizer *o);

/* Lazy updates of lookup tables (on: nonzero; off by default). A parameter
 * whose gradient since the last sheaf_model_zero_grad came only from
 * sheaf_lookup rows then has only those rows updated, their state
 * (moments, sums) too; the other rows and their state stay as they are —
 * what DyNet does for its lookup parameters and PyTorch's SparseAdam for
 * sparse embeddings. Off: every element of every parameter with a
 * gradient is updated (the textbook optimizers: Adam's moments of a row
 * not looked up still decay and move it). The bias correction counts
 * every step either way. */
SHEAF_API sheaf_status sheaf_optimizer_lazy_rows(sheaf_optimizer *o, int on);

/* The optimizer's state, for a resume that continues exactly: its update
 * count (Adam's bias correction) and each parameter's moments, written as
 * a safetensors file (temporary file renamed): tensor "m.NAME" (SGD's
 * momentum, Adam's first moment) and "v.NAME" (Adam's second moment,
 * AdaGrad's sum of squares) for parameter NAME, where it has them;
 * metadata sheaf.optim.kind (sgd, adagrad, adam), sheaf.optim.steps,
 * sheaf.optim.lr (informative). The weights are the model's to save. */
SHEAF_API sheaf_status sheaf_optimizer_save(const sheaf_optimizer *o, const char *path);
/* Loads what sheaf_optimizer_save wrote into o, an optimizer of the same
 * kind over a model with the same parameter names and shapes (its own
 * options, e.g. lr, stay o's). A wrong kind, a state that is no
 * parameter's or of another shape is an error naming the file and the
 * tensor, and changes nothing. Loading, then the updates, gives the
 * weights of the run that never stopped, bit for bit. */
SHEAF_API sheaf_status sheaf_optimizer_load(sheaf_optimizer *o, const char *path);

/* ---------------------------------------------------------------- trainer */

/* The epoch loop of `sheaf train`, for any model: per epoch the instances
 * 0 .. n-1 shuffled (splitmix64 from the seed and the epoch number,
 * Fisher-Yates) or in order, in batches of `batch`; per batch one graph:
 * sheaf_graph_reset, the build callback for each instance (it adds the
 * instance's losses with sheaf_trainer_loss), sheaf_model_zero_grad, one
 * sheaf_backward of the mean over the batch's losses, one optimizer step.
 * Nothing is printed: progress goes to a callback after each batch, which
 * may stop the epoch. Same model, seed, options and thread count: the
 * same weights, bit for bit.
 *
 *   sheaf_trainer *t;
 *   sheaf_trainer_opts to = {{SHEAF_OPTIM_ADAM, 2e-3f}, 32, 1, 0, SHEAF_POLICY_SHEAF, 0};
 *   sheaf_trainer_create(m, n_instances, &to, build, my_data, &t);
 *   for (e = 0; e < epochs; e++) sheaf_trainer_epoch(t, NULL, NULL, &info);  // info.loss
 *   sheaf_model_save(m, "w.safetensors");
 *   sheaf_optimizer_save(sheaf_trainer_optimizer(t), "w.optim.safetensors");
 */
typedef struct sheaf_trainer sheaf_trainer;

/* How the threads of a training update share it. SHEAF_SPLIT_OPS: one
 * graph of the whole batch, each batch of its kernels (GEMMs, a depth's
 * buckets) split over the threads. SHEAF_SPLIT_INSTANCES: the batch's
 * instances in T contiguous shards (T = threads, fewer when the batch has
 * fewer instances), each built, flushed and differentiated on its own
 * thread, with its own graph (of 1 thread) and gradient shard, then the
 * shards' gradients added in shard order and one optimizer step (see
 * "Data-parallel training" below): the build callback then runs on T
 * threads at once, for different instances — it must not write state it
 * shares with other instances without a lock. AUTO: instances at 2
 * threads or more. At 1 thread both are the same update. */
typedef enum sheaf_train_split {
  SHEAF_SPLIT_AUTO = 0,
  SHEAF_SPLIT_OPS,
  SHEAF_SPLIT_INSTANCES
} sheaf_train_split;

typedef struct sheaf_trainer_opts {
  sheaf_optimizer_opts optim;
  int64_t batch;        /* instances per update (>= 1) */
  int shuffle;          /* nonzero: a seeded shuffle per epoch; 0: instances in order */
  uint64_t seed;        /* of the shuffles */
  sheaf_policy policy;  /* of the training graph */
  int threads;          /* of the training graph (<= 0: the context's) */
  sheaf_train_split split; /* how 2 or more threads share an update (SHEAF_SPLIT_AUTO: 0) */
} sheaf_trainer_opts;

/* Builds instance i on g and adds its losses (sheaf_trainer_loss). */
typedef sheaf_status (*sheaf_trainer_build_fn)(sheaf_trainer *t, sheaf_graph *g, int64_t i,
                                               void *user);

typedef struct sheaf_trainer_info {
  int64_t epoch;     /* 1-based, counting the epochs before (sheaf_trainer_set_epochs) */
  int64_t done, n;   /* instances of the epoch done so far, of n */
  int64_t losses;    /* losses summed so far in this epoch */
  double loss;       /* their mean */
  int64_t steps;     /* optimizer steps so far (sheaf_optimizer_steps) */
  double seconds;    /* since the epoch started */
} sheaf_trainer_info;

/* After each batch; a nonzero return stops the epoch there. */
typedef int (*sheaf_trainer_progress_fn)(const sheaf_trainer_info *info, void *user);

/* A trainer of m over n instances (its own graph and optimizer). */
SHEAF_API sheaf_status sheaf_trainer_create(sheaf_model *m, int64_t n, const sheaf_trainer_opts *opts,
                                            sheaf_trainer_build_fn build, void *user,
                                            sheaf_trainer **out);
SHEAF_API void sheaf_trainer_free(sheaf_trainer *t); /* NULL is fine */

/* Adds a loss ([1]) of the instance being built: each update minimizes
 * the mean of its batch's losses. Outside a build callback: an error. */
SHEAF_API sheaf_status sheaf_trainer_loss(sheaf_trainer *t, sheaf_expr loss);

/* One epoch (or until progress returns nonzero): *info (may be NULL) gets
 * its final figures. A batch without losses makes no update. */
SHEAF_API sheaf_status sheaf_trainer_epoch(sheaf_trainer *t, sheaf_trainer_progress_fn progress,
                                           void *user, sheaf_trainer_info *info);

/* Epochs done before (a resumed training): the next epoch is number
 * epochs + 1, and its shuffle is that epoch's. */
SHEAF_API void sheaf_trainer_set_epochs(sheaf_trainer *t, int64_t epochs);
SHEAF_API int64_t sheaf_trainer_epochs(const sheaf_trainer *t);

/* The trainer's optimizer (sheaf_optimizer_save / _load for checkpoints)
 * and graph (free to use between epochs: evaluation, say). */
SHEAF_API sheaf_optimizer *sheaf_trainer_optimizer(sheaf_trainer *t);
SHEAF_API sheaf_graph *sheaf_trainer_graph(sheaf_trainer *t);

/* ------------------------------------------------ data-parallel training */

/* One update over T threads, each with a graph of its own (created with
 * sheaf_graph_opts.threads = 1: no nested dispatch) over a shard of the
 * batch's instances:
 *
 *   // once: graphs g[0..T), sheaf_graph_grad_shard(g[k], k)
 *   sheaf_model_zero_grad(m);
 *   sheaf_run_shards(ctx, T, shard_fn, &batch);  // shard k: reset g[k], build its
 *                                                // instances, sheaf_backward(g[k], ..)
 *   sheaf_model_reduce_grads(m);                 // shard 0 += shard 1 + shard 2 ...
 *   sheaf_optimizer_step(opt, NULL);
 *
 * Contract: graphs of one model and context may be built, flushed and run
 * backward on different threads at once (the context's error and
 * allocator, the model's packed weights are locked or atomic; everything
 * else a graph writes is its own) as long as (a) no two of them are bound
 * to the same gradient shard, (b) nothing changes the model meanwhile (no
 * parameter declared, loaded or updated: sheaf_optimizer_step,
 * sheaf_model_zero_grad and sheaf_model_reduce_grads run between the
 * shards' passes, not during them), and (c) one graph is used by one
 * thread at a time. The backward's scale is each loss element's seed:
 * for the mean over the whole batch, every shard passes 1 / (the batch's
 * loss count), not its own. The result equals one graph of the whole
 * batch within rounding (only the order of the sums differs); the same
 * shards and T give the same bits on every run. */

/* Binds g's backward passes to gradient shard `shard` of its model: 0 (the
 * default), the model's own gradients (sheaf_param_grad); 1 .. 63, extra
 * buffers the model keeps (allocated on the first pass that writes them,
 * freed with the model). */
SHEAF_API sheaf_status sheaf_graph_grad_shard(sheaf_graph *g, int shard);

/* Adds every extra shard's gradients into the model's own, element by
 * element in shard order (g0 + g1 + g2 ...: the same bits on any thread
 * count; split over the context's pool by element ranges), and zeroes
 * them; a table's row marks (lazy rows) are merged. Out of memory: an
 * error, nothing added. sheaf_model_zero_grad zeroes the shards too. */
SHEAF_API sheaf_status sheaf_model_reduce_grads(sheaf_model *m);

/* fn(shard, n_shards, user) for shard 0 .. n_shards - 1 (at most 64), on
 * up to n_shards threads of the context's pool at once, returning when all
 * have returned. A failure: the lowest failing shard's status, its message
 * prefixed "shard K of N: " (the other shards still run to their end). */
typedef sheaf_status (*sheaf_shard_fn)(int shard, int n_shards, void *user);
SHEAF_API sheaf_status sheaf_run_shards(sheaf_ctx *ctx, int n_shards, sheaf_shard_fn fn, void *user);

#ifdef __cplusplus
}
#endif

#endif /* SHEAF_TRAIN_H */
