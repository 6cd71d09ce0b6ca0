/*
 * shards.c — data-parallel training within one update: the model's extra
 * gradient shards (sh_grad_part, sheaf_model.shard), a graph's binding to
 * one (sheaf_graph_grad_shard), their reduction into the model's own
 * gradients in shard order (sheaf_model_reduce_grads), and a helper that
 * runs one callback per shard on the pool (sheaf_run_shards).
 *
 * Why shards and not one gradient under a lock: each graph of a batch's
 * shard adds into buffers no other thread writes, so the shards' backward
 * passes need no synchronisation and each is the serial pass of its
 * instances (deterministic); the reduction then adds, element by element,
 * shard 1, 2, ... into shard 0 in that fixed order, a task owning a range
 * of elements: the same bits on any number of threads. docs/TRAINING.md
 * ("Data-parallel steps") has the user's view.
 */
#include <pthread.h>
#include <string.h>

#include "base/pool.h"
#include "train/train.h"

/* ------------------------------------------------------------ the parts */

sheaf_status sh_grad_shard_reserve(sheaf_model *m, int shard) {
  if (shard <= 0) return SHEAF_OK;
  int k = shard - 1;
  if (m->cap_shard[k] >= m->n_params) return SHEAF_OK;
  return sh_grow(m->ctx, (void **)&m->shard[k], &m->cap_shard[k], m->n_params, sizeof *m->shard[k]);
}

sh_gref sh_grad_ref(sheaf_model *m, int shard, uint32_t i) {
  if (shard <= 0) {
    sh_param *q = &m->params[i];
    return (sh_gref){&q->grad, &q->grad_rows, &q->grad_whole};
  }
  sh_grad_part *p = &m->shard[shard - 1][i]; /* reserved by the pass (sh_grad_shard_reserve) */
  return (sh_gref){&p->grad, &p->grad_rows, &p->grad_whole};
}

/* Parameter i's part of shard k (1 ..), or NULL when it has none. */
static sh_grad_part *part_of(const sheaf_model *m, int k, uint32_t i) {
  if (i >= m->cap_shard[k - 1] || !m->shard[k - 1][i].grad) return NULL;
  return &m->shard[k - 1][i];
}

/* The shards' parts zeroed (whole, or their marked rows) and unmarked. */
void sh_grad_shards_zero(sheaf_model *m) {
  for (int k = 1; k < SH_GRAD_SHARDS; k++)
    for (uint32_t i = 0; i < m->cap_shard[k - 1] && i < m->n_params; i++) {
      sh_grad_part *p = part_of(m, k, i);
      const sh_param *q = &m->params[i];
      if (!p) continue;
      if (p->grad_whole) {
        memset(p->grad, 0, q->numel * sizeof(float));
      } else if (p->grad_rows) {
        size_t n = sh_grad_nrows(q), w = q->rank == 2 ? (size_t)q->shape[1] : q->numel;
        for (size_t r = 0; r < n; r++)
          if (p->grad_rows[r]) memset(p->grad + r * w, 0, w * sizeof(float));
      }
      if (p->grad_rows) memset(p->grad_rows, 0, sh_grad_nrows(q));
      p->grad_whole = false;
    }
}

sheaf_status sheaf_graph_grad_shard(sheaf_graph *g, int shard) {
  if (!g) return SHEAF_ERR_INVALID_ARG;
  if (shard < 0 || shard >= SH_GRAD_SHARDS)
    return sh_fail(g->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_graph_grad_shard: shard %d is not in 0 .. %d", shard,
                   SH_GRAD_SHARDS - 1);
  g->grad_shard = shard;
  return SHEAF_OK;
}



/* ------------------------------------------------------------ reduction */

#define RD_CHUNK 16384 /* floats a task */

typedef struct rd_chunk {
  uint32_t p;    /* parameter */
  size_t a, e;   /* its elements [a, e) */
} rd_chunk;

typedef struct rd_job {
  sheaf_model *m;
  const rd_chunk *c;
} rd_job;

/* Chunk `task`: every shard's part added into the model's gradient in
 * shard order (an element's sum: g0 + g1 + g2 ..., whatever the threads),
 * and zeroed. */
static void rd_task(void *arg, int64_t task, int tid) {
  (void)tid;
  const rd_job *j = arg;
  const rd_chunk *c = &j->c[task];
  const sh_param *q = &j->m->params[c->p];
  float *g0 = q->grad;
  size_t w = q->rank == 2 && q->shape[1] > 0 ? (size_t)q->shape[1] : q->numel;
  for (int k = 1; k < SH_GRAD_SHARDS; k++) {
    sh_grad_part *p = part_of(j->m, k, c->p);
    if (!p) continue;
    float *gk = p->grad;
    if (p->grad_whole) {
      for (size_t i = c->a; i < c->e; i++) g0[i] += gk[i];
      memset(gk + c->a, 0, (c->e - c->a) * sizeof(float));
      continue;
    }
    if (!p->grad_rows || w == 0) continue; /* nothing written */
    for (size_t r = c->a / w; r * w < c->e; r++) { /* the marked rows within the chunk */
      if (!p->grad_rows[r]) continue;
      size_t a = r * w > c->a ? r * w : c->a, e = (r + 1) * w < c->e ? (r + 1) * w : c->e;
      for (size_t i = a; i < e; i++) g0[i] += gk[i];
      memset(gk + a, 0, (e - a) * sizeof(float));
    }
  }
}

/* Parameter i: whether a shard holds anything, and the model's gradient
 * ready for the adds (allocated, its marks the union of the shards'). */
static sheaf_status rd_prepare(sheaf_model *m, uint32_t i, bool *any) {
  *any = false;
  sh_param *q = &m->params[i];
  bool whole = false;
  for (int k = 1; k < SH_GRAD_SHARDS; k++) {
    sh_grad_part *p = part_of(m, k, i);
    if (!p || (!p->grad_whole && !p->grad_rows)) continue;
    *any = true;
    whole |= p->grad_whole;
  }
  if (!*any) return SHEAF_OK;
  if (!q->grad) {
    q->grad = sh_alloc(m->ctx, (q->numel ? q->numel : 1) * sizeof(float), 64);
    if (!q->grad) return sh_fail(m->ctx, SHEAF_ERR_NOMEM, "sheaf_model_reduce_grads: out of memory for a gradient");
    memset(q->grad, 0, q->numel * sizeof(float));
  }
  if (q->grad_whole) return SHEAF_OK;
  if (whole || q->rank != 2) {
    q->grad_whole = true;
    return SHEAF_OK;
  }
  size_t n = sh_grad_nrows(q);
  if (!q->grad_rows && (q->grad_rows = sh_alloc(m->ctx, n, 64))) memset(q->grad_rows, 0, n);
  if (!q->grad_rows) { /* no room for the marks: treated as whole, as sh_bw_param_grad_row does */
    q->grad_whole = true;
    return SHEAF_OK;
  }
  for (int k = 1; k < SH_GRAD_SHARDS; k++) {
    sh_grad_part *p = part_of(m, k, i);
    if (p && p->grad_rows)
      for (size_t r = 0; r < n; r++) q->grad_rows[r] |= p->grad_rows[r];
  }
  return SHEAF_OK;
}

sheaf_status sheaf_model_reduce_grads(sheaf_model *m) {
  if (!m) return SHEAF_ERR_INVALID_ARG;
  size_t n_chunks = 0, floats = 0;
  for (uint32_t i = 0; i < m->n_params; i++) {
    bool any;
    sheaf_status st = rd_prepare(m, i, &any);
    if (st) return st; /* nothing added yet: the shards keep their gradients */
    if (any) n_chunks += (m->params[i].numel + RD_CHUNK - 1) / RD_CHUNK, floats += m->params[i].numel;
  }
  if (!n_chunks) return SHEAF_OK;
  rd_chunk one, *c = n_chunks > 1 ? sh_alloc(m->ctx, n_chunks * sizeof *c, 64) : &one;
  bool whole_params = c == NULL; /* no room for the list: the parameters in turn, on the caller */
  if (whole_params) c = &one;
  rd_job j = {m, c};
  size_t at = 0;
  for (uint32_t i = 0; i < m->n_params; i++) {
    bool any = false;
    for (int k = 1; k < SH_GRAD_SHARDS && !any; k++) {
      sh_grad_part *p = part_of(m, k, i);
      any = p && (p->grad_whole || p->grad_rows);
    }
    if (!any) continue;
    size_t numel = m->params[i].numel;
    if (whole_params) { /* on the caller, one parameter at a time */
      one = (rd_chunk){i, 0, numel};
      rd_task(&j, 0, 0);
      continue;
    }
    for (size_t a = 0; a < numel; a += RD_CHUNK)
      c[at++] = (rd_chunk){i, a, a + RD_CHUNK < numel ? a + RD_CHUNK : numel};
  }
  if (!whole_params) {
    sh_pool_run(m->ctx->pool, (int64_t)at, rd_task, &j, floats < SH_BW_PAR_MIN ? 1 : 0);
    if (c != &one) sh_free(m->ctx, c, n_chunks * sizeof *c);
  }
  for (int k = 1; k < SH_GRAD_SHARDS; k++) /* the shards are zero again: unmarked */
    for (uint32_t i = 0; i < m->cap_shard[k - 1] && i < m->n_params; i++) {
      sh_grad_part *p = part_of(m, k, i);
      if (!p) continue;
      if (p->grad_rows) memset(p->grad_rows, 0, sh_grad_nrows(&m->params[i]));
      p->grad_whole = false;
    }
  return SHEAF_OK;
}

/* ------------------------------------------------------- running shards */

typedef struct rs_job {
  sheaf_ctx *ctx;
  int n;
  sheaf_shard_fn fn;
  void *user;
  pthread_mutex_t mu;
  int first;            /* the lowest shard that failed (n: none) */
  sheaf_status st;
  char msg[512];
} rs_job;

static void rs_task(void *arg, int64_t task, int tid) {
  (void)tid;
  rs_job *j = arg;
  char msg[512];
  sh_error_capture(j->ctx, msg, sizeof msg); /* this shard's own message: another may fail meanwhile */
  sheaf_status st = j->fn((int)task, j->n, j->user);
  sh_error_capture(NULL, NULL, 0);
  if (!st) return;
  if (!msg[0]) sh_last_error_copy(j->ctx, msg, sizeof msg); /* a status without a message of its own */
  pthread_mutex_lock(&j->mu);
  if ((int)task < j->first) {
    j->first = (int)task;
    j->st = st;
    memcpy(j->msg, msg, sizeof msg);
  }
  pthread_mutex_unlock(&j->mu);
}

sheaf_status sheaf_run_shards(sheaf_ctx *ctx, int n_shards, sheaf_shard_fn fn, void *user) {
  if (!ctx) return SHEAF_ERR_INVALID_ARG;
  if (!fn) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_run_shards: fn is NULL");
  if (n_shards < 1 || n_shards > SH_GRAD_SHARDS)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_run_shards: n_shards %d is not in 1 .. %d", n_shards,
                   SH_GRAD_SHARDS);
  rs_job j = {ctx, n_shards, fn, user, PTHREAD_MUTEX_INITIALIZER, n_shards, SHEAF_OK, {0}};
  sh_pool_run(ctx->pool, n_shards, rs_task, &j, n_shards);
  pthread_mutex_destroy(&j.mu);
  if (j.first == n_shards) return SHEAF_OK;
  if (n_shards == 1) return sh_fail(ctx, j.st, "%s", j.msg);
  return sh_fail(ctx, j.st, "shard %d of %d: %s", j.first, n_shards, j.msg);
}
