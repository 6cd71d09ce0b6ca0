/*
 * trainer.c — sheaf_trainer: the epoch loop (seeded shuffle, one graph
 * per batch, the mean of the batch's losses, one backward and one
 * optimizer step per batch) that `sheaf train` runs, without printing:
 * progress goes to a callback. At 2 threads or more (split instances,
 * the default) a batch is data-parallel: its instances in contiguous
 * shards, one graph and gradient shard each (shards.c), the shards'
 * gradients reduced in order before the step.
 */
#include <string.h>

#include "train/train.h"

/* A shard of a batch (split instances): its graph, bound to gradient
 * shard k, and the losses its instances added. */
typedef struct tr_shard {
  sheaf_graph *g;
  sheaf_expr *loss;
  size_t n_loss, cap_loss;
  const int64_t *order; /* its instances */
  int64_t k;
  double sum;           /* its losses' values */
} tr_shard;

struct sheaf_trainer {
  sheaf_model *m;
  sheaf_ctx *ctx;
  sheaf_graph *g;
  sheaf_optimizer *opt;
  sheaf_trainer_opts o;
  sheaf_trainer_build_fn build;
  void *user;
  int64_t n, epochs;
  int64_t *order;      /* n */
  sheaf_expr *loss;    /* the batch's losses */
  size_t n_loss, cap_loss;
  bool building;
  int n_shards;        /* split instances: the shard graphs (0: split ops) */
  tr_shard *sh;
  int used;            /* shards of the batch being run */
  float scale;         /* its backward's seed: 1 / its losses */
};

/* The split a trainer runs: shards at 2 threads or more unless ops. */
static int shard_count(const sheaf_ctx *ctx, const sheaf_trainer_opts *o) {
  int pt = sheaf_ctx_threads(ctx), th = o->threads <= 0 || o->threads > pt ? pt : o->threads;
  if (o->split == SHEAF_SPLIT_OPS || th < 2) return 0;
  return th < SH_GRAD_SHARDS ? th : SH_GRAD_SHARDS;
}

sheaf_status sheaf_trainer_create(sheaf_model *m, int64_t n, const sheaf_trainer_opts *opts,
                                  sheaf_trainer_build_fn build, void *user, sheaf_trainer **out) {
  if (!m) return SHEAF_ERR_INVALID_ARG;
  sheaf_ctx *ctx = m->ctx;
  if (!out) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_trainer_create: out is NULL");
  *out = NULL;
  if (!opts || !build)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_trainer_create: %s is NULL", opts ? "build" : "opts");
  if ((unsigned)opts->split > SHEAF_SPLIT_INSTANCES)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_trainer_create: opts.split %d is unknown", (int)opts->split);
  if (n < 1 || opts->batch < 1)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_trainer_create: %s %lld must be at least 1",
                   n < 1 ? "n" : "batch", (long long)(n < 1 ? n : opts->batch));
  sheaf_trainer *t = sh_calloc(ctx, 1, sizeof *t);
  if (!t) return SHEAF_ERR_NOMEM;
  t->m = m;
  t->ctx = ctx;
  t->o = *opts;
  t->build = build;
  t->user = user;
  t->n = n;
  t->order = sh_malloc(ctx, (size_t)n * sizeof *t->order);
  sheaf_graph_opts go = {opts->policy, opts->threads, NULL};
  sheaf_status st = t->order ? SHEAF_OK : SHEAF_ERR_NOMEM;
  if (!st) st = sheaf_graph_create(m, &go, &t->g);
  if (!st) st = sheaf_optimizer_create(m, &opts->optim, &t->opt);
  int ns = shard_count(ctx, opts);
  if (!st && ns) {
    t->sh = sh_calloc(ctx, (size_t)ns, sizeof *t->sh);
    if (!t->sh) st = SHEAF_ERR_NOMEM;
    else t->n_shards = ns;
    sheaf_graph_opts so = {opts->policy, 1, NULL};
    for (int k = 0; k < ns && !st; k++)
      if (!(st = sheaf_graph_create(m, &so, &t->sh[k].g))) st = sheaf_graph_grad_shard(t->sh[k].g, k);
  }
  if (st) {
    sheaf_trainer_free(t);
    return st;
  }
  *out = t;
  return SHEAF_OK;
}

void sheaf_trainer_free(sheaf_trainer *t) {
  if (!t) return;
  sheaf_optimizer_free(t->opt);
  sheaf_graph_free(t->g);
  for (int k = 0; k < t->n_shards; k++) {
    sheaf_graph_free(t->sh[k].g);
    if (t->sh[k].loss) sh_free(t->ctx, t->sh[k].loss, t->sh[k].cap_loss * sizeof *t->sh[k].loss);
  }
  if (t->sh) sh_free(t->ctx, t->sh, (size_t)t->n_shards * sizeof *t->sh);
  if (t->order) sh_free(t->ctx, t->order, (size_t)t->n * sizeof *t->order);
  if (t->loss) sh_free(t->ctx, t->loss, t->cap_loss * sizeof *t->loss);
  sh_free(t->ctx, t, sizeof *t);
}

/* The shard the calling thread is building (shard_build), for
 * sheaf_trainer_loss: build callbacks of several shards run at once. */
static _Thread_local tr_shard *tl_shard;

/* Appends e to the list (*l, *n of *cap), doubling it when full. */
static sheaf_status push_loss(sheaf_ctx *ctx, sheaf_expr **l, size_t *n, size_t *cap, sheaf_expr e) {
  if (*n == *cap) {
    size_t nc = *cap ? 2 * *cap : 256;
    sheaf_expr *p = sh_realloc(ctx, *l, *cap * sizeof *p, nc * sizeof *p);
    if (!p) return SHEAF_ERR_NOMEM;
    *l = p;
    *cap = nc;
  }
  (*l)[(*n)++] = e;
  return SHEAF_OK;
}

sheaf_status sheaf_trainer_loss(sheaf_trainer *t, sheaf_expr loss) {
  if (!t) return SHEAF_ERR_INVALID_ARG;
  if (!t->building)
    return sh_fail(t->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_trainer_loss: called outside a build callback");
  if (t->used) { /* split instances: the shard this thread builds (its graph only is read) */
    tr_shard *s = tl_shard;
    if (!s || s < t->sh || s >= t->sh + t->used || loss.graph != s->g->handle)
      return sh_fail(t->ctx, SHEAF_ERR_INVALID_ARG,
                     "sheaf_trainer_loss: loss is not an expression of the graph being built on this thread");
    return push_loss(t->ctx, &s->loss, &s->n_loss, &s->cap_loss, loss);
  }
  return push_loss(t->ctx, &t->loss, &t->n_loss, &t->cap_loss, loss);
}

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* One update on order[0..k): *sum and *count add its losses. */
static sheaf_status batch(sheaf_trainer *t, const int64_t *order, int64_t k, double *sum, int64_t *count) {
  sheaf_status st = sheaf_graph_reset(t->g);
  t->n_loss = 0;
  t->building = true;
  for (int64_t i = 0; i < k && !st; i++) st = t->build(t, t->g, order[i], t->user);
  t->building = false;
  if (st || t->n_loss == 0) return st;
  if (t->n_loss > (size_t)INT32_MAX)
    return sh_fail(t->ctx, SHEAF_ERR_UNSUPPORTED, "sheaf_trainer: %zu losses in one batch", t->n_loss);
  sheaf_backward_opts bo = {1.0f / (float)t->n_loss, 0, NULL, NULL};
  if (!st) st = sheaf_model_zero_grad(t->m);
  if (!st) st = sheaf_backward(t->g, (int)t->n_loss, t->loss, &bo);
  if (!st) st = sheaf_optimizer_step(t->opt, NULL);
  double s = 0;
  for (size_t j = 0; j < t->n_loss && !st; j++) {
    sheaf_value_view v;
    st = sheaf_value(t->g, t->loss[j], &v);
    if (!st) s += v.data[0];
  }
  *sum += s;
  *count += (int64_t)t->n_loss;
  return st;
}

/* Split instances, phase 1: shard k's graph reset, its instances built and flushed. */
static sheaf_status shard_build(int k, int n, void *user) {
  (void)n;
  sheaf_trainer *t = user;
  tr_shard *s = &t->sh[k];
  s->n_loss = 0;
  s->sum = 0;
  sheaf_status st = sheaf_graph_reset(s->g);
  tr_shard *saved = tl_shard;
  tl_shard = s;
  for (int64_t i = 0; i < s->k && !st; i++)
    if ((st = t->build(t, s->g, s->order[i], t->user)))
      sh_fail_prefix(t->ctx, "instance %lld", (long long)s->order[i]);
  tl_shard = saved;
  if (!st && s->n_loss) st = sheaf_graph_flush(s->g);
  return st;
}

/* Phase 2: its backward (the batch's mean: t->scale), its losses' sum. */
static sheaf_status shard_backward(int k, int n, void *user) {
  (void)n;
  sheaf_trainer *t = user;
  tr_shard *s = &t->sh[k];
  if (!s->n_loss) return SHEAF_OK;
  sheaf_backward_opts bo = {t->scale, 0, NULL, NULL};
  sheaf_status st = sheaf_backward(s->g, (int)s->n_loss, s->loss, &bo);
  for (size_t j = 0; j < s->n_loss && !st; j++) {
    sheaf_value_view v;
    st = sheaf_value(s->g, s->loss[j], &v);
    if (!st) s->sum += v.data[0];
  }
  return st;
}

/* One data-parallel update on order[0..k): the shards built (phase 1),
 * the gradients zeroed, the shards' backward passes (phase 2), their
 * gradients reduced in shard order, one step. */
static sheaf_status batch_shards(sheaf_trainer *t, const int64_t *order, int64_t k, double *sum, int64_t *count) {
  int ns = k < t->n_shards ? (int)k : t->n_shards;
  for (int s = 0; s < ns; s++) {
    int64_t a = k * s / ns, e = k * (s + 1) / ns;
    t->sh[s].order = order + a;
    t->sh[s].k = e - a;
  }
  t->used = ns;
  t->building = true;
  sheaf_status st = sheaf_run_shards(t->ctx, ns, shard_build, t);
  t->building = false;
  size_t total = 0;
  for (int s = 0; s < ns; s++) total += t->sh[s].n_loss;
  if (!st && total > (size_t)INT32_MAX)
    st = sh_fail(t->ctx, SHEAF_ERR_UNSUPPORTED, "sheaf_trainer: %zu losses in one batch", total);
  if (st || total == 0) {
    t->used = 0;
    return st;
  }
  t->scale = 1.0f / (float)total;
  st = sheaf_model_zero_grad(t->m);
  if (!st) st = sheaf_run_shards(t->ctx, ns, shard_backward, t);
  if (!st) st = sheaf_model_reduce_grads(t->m);
  if (!st) st = sheaf_optimizer_step(t->opt, NULL);
  for (int s = 0; s < ns && !st; s++) *sum += t->sh[s].sum;
  if (!st) *count += (int64_t)total;
  t->used = 0;
  return st;
}

sheaf_status sheaf_trainer_epoch(sheaf_trainer *t, sheaf_trainer_progress_fn progress, void *user,
                                 sheaf_trainer_info *info) {
  if (!t) return SHEAF_ERR_INVALID_ARG;
  sheaf_trainer_info in = {t->epochs + 1, 0, t->n, 0, 0.0, 0, 0.0};
  for (int64_t i = 0; i < t->n; i++) t->order[i] = i;
  if (t->o.shuffle) {
    uint64_t rng = t->o.seed * 0x9e3779b97f4a7c15ull + (uint64_t)in.epoch;
    for (int64_t i = t->n - 1; i > 0; i--) {
      int64_t j = (int64_t)(splitmix(&rng) % (uint64_t)(i + 1)), x = t->order[i];
      t->order[i] = t->order[j];
      t->order[j] = x;
    }
  }
  uint64_t t0 = sheaf_time_ns();
  double sum = 0;
  sheaf_status st = SHEAF_OK;
  while (in.done < t->n && !st) {
    int64_t k = t->n - in.done < t->o.batch ? t->n - in.done : t->o.batch;
    st = t->n_shards ? batch_shards(t, t->order + in.done, k, &sum, &in.losses)
                     : batch(t, t->order + in.done, k, &sum, &in.losses);
    in.done += k;
    in.loss = in.losses ? sum / (double)in.losses : 0.0;
    in.steps = sheaf_optimizer_steps(t->opt);
    in.seconds = (double)(sheaf_time_ns() - t0) * 1e-9;
    if (!st && progress && progress(&in, user)) break;
  }
  if (!st && in.done == t->n) t->epochs++;
  if (info) *info = in;
  return st;
}

void sheaf_trainer_set_epochs(sheaf_trainer *t, int64_t epochs) {
  if (t && epochs >= 0) t->epochs = epochs;
}
int64_t sheaf_trainer_epochs(const sheaf_trainer *t) { return t ? t->epochs : 0; }
sheaf_optimizer *sheaf_trainer_optimizer(sheaf_trainer *t) { return t ? t->opt : NULL; }
sheaf_graph *sheaf_trainer_graph(sheaf_trainer *t) { return t ? t->g : NULL; }
