/*
 * optim_state.c — sheaf_optimizer_save / sheaf_optimizer_load: an
 * optimizer's state (its update count and each parameter's moments) as a
 * safetensors file, so that a training resumed from a checkpoint continues
 * exactly as if it had not stopped.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/optim_int.h"

static const char *const kind_names[3] = {"sgd", "adagrad", "adam"};

/* Tensor name of a parameter's state: "m.NAME" (s1) or "v.NAME" (s2). */
static char *state_name(sheaf_ctx *ctx, char which, const char *param) {
  size_t n = strlen(param) + 3;
  char *s = sh_malloc(ctx, n);
  if (s) snprintf(s, n, "%c.%s", which, param);
  return s;
}

sheaf_status sheaf_optimizer_save(const sheaf_optimizer *o, const char *path) {
  if (!o) return SHEAF_ERR_INVALID_ARG;
  sheaf_ctx *ctx = o->m->ctx;
  if (!path) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_optimizer_save: path is NULL");
  size_t cap = 2 * (size_t)o->n_st + 1, n = 0;
  char **names = sh_calloc(ctx, cap, sizeof *names);
  sheaf_tensor **ts = sh_calloc(ctx, cap, sizeof *ts);
  sheaf_status st = names && ts ? SHEAF_OK : SHEAF_ERR_NOMEM;
  for (uint32_t i = 0; i < o->n_st && st == SHEAF_OK; i++) {
    const sh_param *p = &o->m->params[i];
    for (int k = 0; k < 2 && st == SHEAF_OK; k++) {
      float *v = k ? o->st[i].s2 : o->st[i].s1;
      if (!v) continue;
      names[n] = state_name(ctx, k ? 'v' : 'm', p->name);
      if (!names[n]) {
        st = SHEAF_ERR_NOMEM;
        break;
      }
      st = sheaf_tensor_wrap(ctx, SHEAF_F32, p->rank, p->shape, NULL, v, NULL, NULL, &ts[n]);
      n++;
    }
  }
  char steps[32], lr[32];
  snprintf(steps, sizeof steps, "%" PRId64, o->steps);
  snprintf(lr, sizeof lr, "%.9g", (double)o->o.lr);
  const char *meta[] = {"sheaf.optim.kind", kind_names[o->o.kind], "sheaf.optim.steps", steps,
                        "sheaf.optim.lr", lr};
  if (st == SHEAF_OK)
    st = sheaf_st_write(ctx, path, n, (const char *const *)names, (const sheaf_tensor *const *)ts, 3, meta);
  for (size_t i = 0; i < cap && names && ts; i++) {
    if (names[i]) sh_free(ctx, names[i], strlen(names[i]) + 1);
    sheaf_tensor_free(ts[i]);
  }
  if (names) sh_free(ctx, names, cap * sizeof *names);
  if (ts) sh_free(ctx, ts, cap * sizeof *ts);
  return st;
}

static const char *meta_of(const sheaf_st_file *f, const char *key) {
  for (size_t i = 0; i < sheaf_st_metadata_count(f); i++)
    if (!strcmp(sheaf_st_metadata_key(f, i), key)) return sheaf_st_metadata_value(f, i);
  return NULL;
}

/* Checks tensor `name` of f against parameter p (F32, p's shape); *idx its
 * index or -1 when absent. */
static sheaf_status find_state(sheaf_ctx *ctx, const sheaf_st_file *f, const char *path,
                               const char *name, const sh_param *p, long *idx) {
  *idx = sheaf_st_find(f, name);
  if (*idx < 0) return SHEAF_OK;
  size_t i = (size_t)*idx;
  int rank = sheaf_st_rank(f, i);
  const int64_t *shape = sheaf_st_shape(f, i);
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= shape[d];
  bool same = rank == p->rank && (size_t)n == p->numel;
  for (int d = 0; same && d < rank; d++) same = shape[d] == p->shape[d];
  if (!same || sheaf_st_dtype(f, i) != SHEAF_F32)
    return sh_fail(ctx, SHEAF_ERR_SHAPE,
                   "%s: optimizer state '%s' is not F32 of the shape of parameter '%s' (%lld values)",
                   path, name, p->name, (long long)p->numel);
  return SHEAF_OK;
}

sheaf_status sheaf_optimizer_load(sheaf_optimizer *o, const char *path) {
  if (!o) return SHEAF_ERR_INVALID_ARG;
  sheaf_model *m = o->m;
  sheaf_ctx *ctx = m->ctx;
  if (!path) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_optimizer_load: path is NULL");
  sheaf_st_file *f = NULL;
  sheaf_status st = sheaf_st_open(ctx, path, &f);
  if (st) return st;
  const char *kind = meta_of(f, "sheaf.optim.kind"), *steps = meta_of(f, "sheaf.optim.steps");
  char *end = NULL;
  long long nsteps = steps ? strtoll(steps, &end, 10) : -1;
  if (!kind || !steps || !end || *end || nsteps < 0) {
    sheaf_st_close(f);
    return sh_fail(ctx, SHEAF_ERR_FORMAT,
                   "%s: not an optimizer state (metadata sheaf.optim.kind and sheaf.optim.steps)", path);
  }
  if (strcmp(kind, kind_names[o->o.kind])) {
    /* the message first: kind lives in the file's metadata */
    st = sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: the state of a %s optimizer, this one is %s", path, kind,
                 kind_names[o->o.kind]);
    sheaf_st_close(f);
    return st;
  }
  /* every tensor must be a state of a declared parameter, shapes checked
   * before anything changes */
  size_t matched = 0;
  long (*idx)[2] = sh_calloc(ctx, (size_t)m->n_params + 1, sizeof *idx);
  if (!idx) {
    sheaf_st_close(f);
    return SHEAF_ERR_NOMEM;
  }
  for (uint32_t i = 0; i < m->n_params && st == SHEAF_OK; i++)
    for (int k = 0; k < 2 && st == SHEAF_OK; k++) {
      char *name = state_name(ctx, k ? 'v' : 'm', m->params[i].name);
      if (!name) {
        st = SHEAF_ERR_NOMEM;
        break;
      }
      st = find_state(ctx, f, path, name, &m->params[i], &idx[i][k]);
      matched += idx[i][k] >= 0;
      sh_free(ctx, name, strlen(name) + 1);
    }
  if (st == SHEAF_OK && matched != sheaf_st_count(f))
    st = sh_fail(ctx, SHEAF_ERR_SHAPE,
                 "%s: %zu tensors are not the state of a parameter of this model (m.NAME or v.NAME)",
                 path, sheaf_st_count(f) - matched);
  /* room for the state of every parameter */
  if (st == SHEAF_OK && o->n_st < m->n_params) {
    opt_state *s = sh_realloc(ctx, o->st, (size_t)o->n_st * sizeof *s, (size_t)m->n_params * sizeof *s);
    if (!s) st = SHEAF_ERR_NOMEM;
    else {
      memset(s + o->n_st, 0, (size_t)(m->n_params - o->n_st) * sizeof *s);
      o->st = s;
      o->n_st = m->n_params;
    }
  }
  for (uint32_t i = 0; i < m->n_params && st == SHEAF_OK; i++)
    for (int k = 0; k < 2 && st == SHEAF_OK; k++) {
      float **v = k ? &o->st[i].s2 : &o->st[i].s1;
      size_t numel = m->params[i].numel;
      if (idx[i][k] < 0) { /* absent: no state yet (zero, as a fresh one) */
        if (*v) memset(*v, 0, numel * sizeof(float));
        continue;
      }
      if (!*v && !(*v = sh_alloc(ctx, (numel ? numel : 1) * sizeof(float), 64))) {
        st = SHEAF_ERR_NOMEM;
        break;
      }
      o->st[i].numel = numel;
      memcpy(*v, sheaf_st_bytes(f, (size_t)idx[i][k]), numel * sizeof(float));
    }
  if (st == SHEAF_OK) o->steps = nsteps;
  sh_free(ctx, idx, ((size_t)m->n_params + 1) * sizeof *idx);
  sheaf_st_close(f);
  return st;
}
