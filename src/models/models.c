/*
 * models.c — the built-in model registry and the batch driver (see
 * models.h): parameter declaration per model, per-instance build dispatch,
 * useful-FLOP counts, batched runs with output collection, output files.
 */
#include "models/models.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const model_names[SH_NET_COUNT] = {"treelstm", "childsum", "bilstm",
                                                        "mvrnn"};

const char *sh_net_kind_name(sh_net_kind k) {
  return (unsigned)k < SH_NET_COUNT ? model_names[k] : "?";
}

bool sh_net_kind_parse(const char *name, sh_net_kind *out) {
  for (int k = 0; k < SH_NET_COUNT; k++)
    if (!strcmp(name, model_names[k])) {
      *out = (sh_net_kind)k;
      return true;
    }
  return false;
}

sh_dataset_kind sh_net_data_kind(sh_net_kind k) {
  switch (k) {
  case SH_NET_CHILDSUM: return SH_DATASET_CHILDSUM;
  case SH_NET_BILSTM: return SH_DATASET_SENTS;
  default: return SH_DATASET_BINARY;
  }
}

int64_t sh_net_default_hidden(sh_net_kind k) { return k == SH_NET_MVRNN ? 64 : 256; }

const char *sh_net_instance_noun(sh_net_kind k) {
  return k == SH_NET_BILSTM ? "sentences" : "trees";
}

sheaf_status sh_net_create(sheaf_ctx *ctx, sh_net_kind kind, const sh_dataset *d,
                           int64_t hidden, int64_t embed, sh_net *out) {
  memset(out, 0, sizeof *out);
  out->kind = kind;
  out->data = d;
  if (kind == SH_NET_MVRNN) embed = hidden;
  out->hidden = hidden;
  out->embed = embed;
  if (d->kind != sh_net_data_kind(kind))
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "model %s needs %s data", sh_net_kind_name(kind),
                   kind == SH_NET_BILSTM ? "sentence" : "tree");
  sheaf_status st = sheaf_model_create(ctx, &out->model);
  if (st != SHEAF_OK) return st;
  switch (kind) {
  case SH_NET_TREELSTM: st = sh_treelstm_declare(out->model, hidden, embed, d->vocab, &out->tl); break;
  case SH_NET_CHILDSUM: st = sh_childsum_lstm_declare(out->model, hidden, embed, d->vocab, &out->cs); break;
  case SH_NET_BILSTM: st = sh_bilstm_declare(out->model, hidden, embed, d->vocab, &out->bl); break;
  case SH_NET_MVRNN: st = sh_mvrnn_declare(out->model, hidden, d->vocab, d->mv_vocab, &out->mv); break;
  default: st = sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "unknown model %d", (int)kind);
  }
  if (st == SHEAF_OK) st = sh_net_seed(out, 0);
  if (st != SHEAF_OK) {
    sheaf_model_free(out->model);
    out->model = NULL;
  }
  return st;
}

void sh_net_free(sh_net *n) {
  sheaf_model_free(n->model);
  n->model = NULL;
}

sheaf_status sh_net_seed(sh_net *n, uint64_t seed) {
  sheaf_status st = sheaf_model_seed(n->model, seed);
  if (st == SHEAF_OK && n->kind == SH_NET_MVRNN) sh_mvrnn_init_identity(n->model, &n->mv);
  return st;
}

sheaf_status sh_net_load(sh_net *n, const char *path) { return sheaf_model_load(n->model, path); }

int64_t sh_net_out_dim(const sh_net *n) {
  switch (n->kind) {
  case SH_NET_TREELSTM: return SH_TREELSTM_CLASSES;
  case SH_NET_BILSTM: return SH_BILSTM_TAGS;
  default: return n->hidden;
  }
}

int32_t sh_net_out_rows(const sh_net *n, int32_t i) {
  return n->kind == SH_NET_BILSTM ? sh_dataset_size(n->data, i) : 1;
}

double sh_net_flops(const sh_net *n, int32_t i) {
  const sh_dataset *d = n->data;
  double H = (double)n->hidden, E = (double)n->embed, f = 0;
  if (n->kind == SH_NET_BILSTM) {
    double tok = sh_dataset_size(d, i);
    return tok * (2 * 2 * (E + H) * 4 * H + 2 * 2 * H * SH_BILSTM_TAGS);
  }
  const sh_treebank *tb = &d->tb;
  int32_t first = tb->tree_first[i], end = first + tb->tree_size[i];
  for (int32_t v = first; v < end; v++) {
    int32_t nc = tb->n_children[v];
    switch (n->kind) {
    case SH_NET_TREELSTM:
      if (nc == 0) f += 2 * E * 3 * H;
      else if (nc == 2) f += 2 * 2 * H * 5 * H;
      break;
    case SH_NET_CHILDSUM:
      f += 2 * E * 3 * H + (nc ? 2 * H * 3 * H : 0) + nc * (2 * E * H + 2 * H * H);
      break;
    case SH_NET_MVRNN:
      if (nc == 2) {
        f += 2 * (2 * H * H) + 2 * 2 * H * H;                  /* B·a, A·b, W */
        if (v != tb->tree_root[i]) f += 2 * (2 * H * H * H);   /* A·W_1 + B·W_2 */
      }
      break;
    default: break;
    }
  }
  if (n->kind == SH_NET_TREELSTM) f += 2 * H * SH_TREELSTM_CLASSES;
  return f;
}

sheaf_status sh_net_build(const sh_net *n, sheaf_graph *g, int32_t i, sheaf_expr *out) {
  const sh_dataset *d = n->data;
  sheaf_graph_phase(g, 0);
  switch (n->kind) {
  case SH_NET_TREELSTM: out[0] = sh_treelstm_build(g, &n->tl, &d->tb, i, NULL); break;
  case SH_NET_CHILDSUM: out[0] = sh_childsum_lstm_build(g, &n->cs, &d->tb, i); break;
  case SH_NET_MVRNN:
    out[0] = sh_mvrnn_build(g, &n->mv, &d->tb, i, d->mv_row);
    break;
  case SH_NET_BILSTM: {
    int32_t s = d->sent_off[i];
    return sh_bilstm_build(g, &n->bl, d->sent_words + s, d->sent_off[i + 1] - s, out);
  }
  default: break;
  }
  return sheaf_graph_status(g);
}

/* ------------------------------------------------------------- outputs */

sheaf_status sh_net_outputs_init(sh_net_outputs *o, const sh_net *n, int32_t first, int32_t count) {
  memset(o, 0, sizeof *o);
  o->first = first;
  o->count = count;
  o->dim = sh_net_out_dim(n);
  sheaf_ctx *ctx = n->data->ctx;
  o->row_off = malloc(((size_t)count + 1) * sizeof *o->row_off);
  if (!o->row_off) return sh_fail(ctx, SHEAF_ERR_NOMEM, "out of memory: output offsets");
  o->row_off[0] = 0;
  for (int32_t i = 0; i < count; i++) o->row_off[i + 1] = o->row_off[i] + sh_net_out_rows(n, first + i);
  o->rows = o->row_off[count];
  o->values = calloc((size_t)(o->rows * o->dim) + 1, sizeof(float));
  if (!o->values) {
    free(o->row_off);
    o->row_off = NULL;
    return sh_fail(ctx, SHEAF_ERR_NOMEM, "out of memory: %lld output values", (long long)(o->rows * o->dim));
  }
  return SHEAF_OK;
}

void sh_net_outputs_free(sh_net_outputs *o) {
  free(o->row_off);
  free(o->values);
  memset(o, 0, sizeof *o);
}

sheaf_status sh_net_run(const sh_net *n, sheaf_graph *g, int32_t first, int32_t count,
                        int32_t batch, sh_net_outputs *out) {
  if (batch < 1) batch = 1;
  int32_t max_rows = 0; /* expressions of the largest batch */
  for (int32_t b = first; b < first + count; b += batch) {
    int32_t end = b + batch < first + count ? b + batch : first + count, rows = 0;
    for (int32_t i = b; i < end; i++) rows += sh_net_out_rows(n, i);
    if (rows > max_rows) max_rows = rows;
  }
  sheaf_expr *ex = malloc(((size_t)max_rows + 1) * sizeof *ex);
  if (!ex) return sh_fail(n->data->ctx, SHEAF_ERR_NOMEM, "out of memory: %d expressions", (int)max_rows);
  sheaf_status st = SHEAF_OK;
  for (int32_t b = first; b < first + count && st == SHEAF_OK; b += batch) {
    int32_t end = b + batch < first + count ? b + batch : first + count;
    st = sheaf_graph_reset(g);
    int32_t k = 0;
    for (int32_t i = b; i < end && st == SHEAF_OK; i++) {
      st = sh_net_build(n, g, i, ex + k);
      k += sh_net_out_rows(n, i);
    }
    if (st == SHEAF_OK) st = sheaf_graph_flush(g);
    if (st != SHEAF_OK || !out) continue;
    k = 0;
    for (int32_t i = b; i < end && st == SHEAF_OK; i++) {
      int32_t rows = sh_net_out_rows(n, i);
      for (int32_t r = 0; r < rows && st == SHEAF_OK; r++, k++) {
        sheaf_value_view v;
        st = sheaf_value(g, ex[k], &v);
        if (st != SHEAF_OK) break;
        int64_t numel = v.rank == 2 ? v.shape[0] * v.shape[1] : v.shape[0];
        if (numel != out->dim) {
          st = sh_fail(n->data->ctx, SHEAF_ERR_INTERNAL, "%s: output of instance %d has %lld values, expected %lld",
                       sh_net_kind_name(n->kind), (int)i, (long long)numel, (long long)out->dim);
          break;
        }
        memcpy(out->values + (out->row_off[i - out->first] + r) * out->dim, v.data, (size_t)numel * sizeof(float));
      }
    }
  }
  free(ex);
  return st;
}

sheaf_status sh_net_run_fresh(const sh_net *n, sheaf_policy policy, int threads, int32_t first,
                              int32_t count, int32_t batch, sh_net_outputs *out) {
  sheaf_status st = sh_net_outputs_init(out, n, first, count);
  if (st) return st;
  sheaf_graph_opts go = {policy, threads, NULL};
  sheaf_graph *g = NULL;
  st = sheaf_graph_create(n->model, &go, &g);
  if (!st) st = sh_net_run(n, g, first, count, batch, out);
  sheaf_graph_free(g);
  if (st) sh_net_outputs_free(out);
  return st;
}

/* sh_net_run_runner's callbacks: instance i's expressions live at ex + off[i - first]. */
typedef struct runner_job {
  const sh_net *n;
  int32_t first;
  const int64_t *off; /* off[i - first]: instance i's first row (from off[0]) */
  sheaf_expr *ex;     /* row k at ex[k - off[0]] */
  sh_net_outputs *out;
} runner_job;

static sheaf_status job_build(sheaf_graph *g, int64_t i, int worker, void *user) {
  const runner_job *j = user;
  return sh_net_build(j->n, g, (int32_t)i, j->ex + (j->off[i - j->first] - j->off[0]));
}

static sheaf_status job_read(sheaf_graph *g, int64_t i, int worker, void *user) {
  const runner_job *j = user;
  int64_t k = j->off[i - j->first] - j->off[0], rows = j->off[i - j->first + 1] - j->off[i - j->first];
  for (int64_t r = 0; r < rows; r++) {
    sheaf_value_view v;
    sheaf_status st = sheaf_value(g, j->ex[k + r], &v);
    if (st != SHEAF_OK) return st;
    int64_t numel = v.rank == 2 ? v.shape[0] * v.shape[1] : v.shape[0];
    if (numel != j->out->dim)
      return sh_fail(j->n->data->ctx, SHEAF_ERR_INTERNAL, "%s: output of instance %d has %lld values, expected %lld",
                     sh_net_kind_name(j->n->kind), (int)i, (long long)numel, (long long)j->out->dim);
    memcpy(j->out->values + (j->out->row_off[i - j->out->first] + r) * j->out->dim, v.data,
           (size_t)numel * sizeof(float));
  }
  return SHEAF_OK;
}

sheaf_status sh_net_run_runner(const sh_net *n, sheaf_runner *r, int32_t first, int32_t count, sh_net_outputs *out) {
  sheaf_ctx *ctx = n->data->ctx;
  int64_t *off = out ? NULL : malloc(((size_t)count + 1) * sizeof *off);
  if (!out && !off) return sh_fail(ctx, SHEAF_ERR_NOMEM, "out of memory: %d offsets", (int)count);
  if (off) {
    off[0] = 0;
    for (int32_t i = 0; i < count; i++) off[i + 1] = off[i] + sh_net_out_rows(n, first + i);
  }
  runner_job j = {n, first, out ? out->row_off + (first - out->first) : off, NULL, out};
  j.ex = malloc(((size_t)(j.off[count] - j.off[0]) + 1) * sizeof *j.ex);
  sheaf_status st = SHEAF_OK;
  if (!j.ex) st = sh_fail(ctx, SHEAF_ERR_NOMEM, "out of memory: expressions of %d instances", (int)count);
  if (!st) st = sheaf_runner_run(r, first, count, job_build, out ? job_read : NULL, &j);
  free(j.ex);
  free(off);
  return st;
}

int sh_net_outputs_write(const sh_net_outputs *o, const sh_net *n, FILE *f) {
  bool per_word = n->kind == SH_NET_BILSTM;
  for (int32_t i = o->first; i < o->first + o->count; i++) {
    int32_t rows = (int32_t)(o->row_off[i - o->first + 1] - o->row_off[i - o->first]);
    for (int32_t r = 0; r < rows; r++) {
      const float *v = sh_net_outputs_row(o, i, r);
      if (per_word) fprintf(f, "%d %d", (int)i, (int)r);
      else fprintf(f, "%d", (int)i);
      for (int64_t j = 0; j < o->dim; j++) fprintf(f, " %.7g", (double)v[j]);
      fputc('\n', f);
    }
  }
  return ferror(f) ? -1 : 0;
}

double sh_max_rel_err(const float *a, const float *b, int64_t rows, int64_t dim) {
  double worst = 0;
  for (int64_t r = 0; r < rows; r++) {
    double diff = 0, mag = 0;
    for (int64_t j = 0; j < dim; j++) {
      double x = a[r * dim + j], y = b[r * dim + j], e = fabs(x - y);
      if (!(e <= diff)) diff = e; /* NaN sticks */
      if (fabs(y) > mag) mag = fabs(y);
    }
    double rel = diff == 0 ? 0 : diff / mag;
    if (!(rel <= worst)) worst = rel;
  }
  return worst;
}
