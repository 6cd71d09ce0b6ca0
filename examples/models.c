/*
 * models.c — the example-model registry and the batch driver (see
 * models.h): parameter declaration per model, per-instance build dispatch,
 * useful-FLOP counts, batched runs with output collection, output files.
 */
#include "models.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const model_names[EX_MODEL_COUNT] = {"treelstm", "childsum", "bilstm",
                                                        "mvrnn"};

const char *ex_model_name(ex_model_kind k) {
  return (unsigned)k < EX_MODEL_COUNT ? model_names[k] : "?";
}

bool ex_model_parse(const char *name, ex_model_kind *out) {
  for (int k = 0; k < EX_MODEL_COUNT; k++)
    if (!strcmp(name, model_names[k])) {
      *out = (ex_model_kind)k;
      return true;
    }
  return false;
}

ex_data_kind ex_model_data_kind(ex_model_kind k) {
  switch (k) {
  case EX_MODEL_CHILDSUM: return EX_DATA_CHILDSUM;
  case EX_MODEL_BILSTM: return EX_DATA_SENTS;
  default: return EX_DATA_BINARY;
  }
}

int64_t ex_model_default_hidden(ex_model_kind k) { return k == EX_MODEL_MVRNN ? 64 : 256; }

const char *ex_model_instance_noun(ex_model_kind k) {
  return k == EX_MODEL_BILSTM ? "sentences" : "trees";
}

sheaf_status ex_net_create(sheaf_ctx *ctx, ex_model_kind kind, const ex_data *d,
                           int64_t hidden, int64_t embed, ex_net *out) {
  memset(out, 0, sizeof *out);
  out->kind = kind;
  out->data = d;
  if (kind == EX_MODEL_MVRNN) embed = hidden;
  out->hidden = hidden;
  out->embed = embed;
  if (d->kind != ex_model_data_kind(kind))
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "model %s needs %s data", ex_model_name(kind),
                   kind == EX_MODEL_BILSTM ? "sentence" : "tree");
  sheaf_status st = sheaf_model_create(ctx, &out->model);
  if (st != SHEAF_OK) return st;
  switch (kind) {
  case EX_MODEL_TREELSTM: st = ex_treelstm_declare(out->model, hidden, embed, d->vocab, &out->tl); break;
  case EX_MODEL_CHILDSUM: st = ex_childsum_declare(out->model, hidden, embed, d->vocab, &out->cs); break;
  case EX_MODEL_BILSTM: st = ex_bilstm_declare(out->model, hidden, embed, d->vocab, &out->bl); break;
  case EX_MODEL_MVRNN: st = ex_mvrnn_declare(out->model, hidden, d->vocab, d->mv_vocab, &out->mv); break;
  default: st = sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "unknown model %d", (int)kind);
  }
  if (st == SHEAF_OK) st = ex_net_seed(out, 0);
  if (st != SHEAF_OK) {
    sheaf_model_free(out->model);
    out->model = NULL;
  }
  return st;
}

void ex_net_free(ex_net *n) {
  sheaf_model_free(n->model);
  n->model = NULL;
}

sheaf_status ex_net_seed(ex_net *n, uint64_t seed) {
  sheaf_status st = sheaf_model_seed(n->model, seed);
  if (st == SHEAF_OK && n->kind == EX_MODEL_MVRNN) ex_mvrnn_init_identity(n->model, &n->mv);
  return st;
}

sheaf_status ex_net_load(ex_net *n, const char *path) { return sheaf_model_load(n->model, path); }

int64_t ex_net_out_dim(const ex_net *n) {
  switch (n->kind) {
  case EX_MODEL_TREELSTM: return EX_TREELSTM_CLASSES;
  case EX_MODEL_BILSTM: return EX_BILSTM_TAGS;
  default: return n->hidden;
  }
}

int32_t ex_net_out_rows(const ex_net *n, int32_t i) {
  return n->kind == EX_MODEL_BILSTM ? ex_data_size(n->data, i) : 1;
}

double ex_net_flops(const ex_net *n, int32_t i) {
  const ex_data *d = n->data;
  double H = (double)n->hidden, E = (double)n->embed, f = 0;
  if (n->kind == EX_MODEL_BILSTM) {
    double tok = ex_data_size(d, i);
    return tok * (2 * 2 * (E + H) * 4 * H + 2 * 2 * H * EX_BILSTM_TAGS);
  }
  const sh_treebank *tb = &d->tb;
  int32_t first = tb->tree_first[i], end = first + tb->tree_size[i];
  for (int32_t v = first; v < end; v++) {
    int32_t nc = tb->n_children[v];
    switch (n->kind) {
    case EX_MODEL_TREELSTM:
      if (nc == 0) f += 2 * E * 3 * H;
      else if (nc == 2) f += 2 * 2 * H * 5 * H;
      break;
    case EX_MODEL_CHILDSUM:
      f += 2 * E * 3 * H + (nc ? 2 * H * 3 * H : 0) + nc * (2 * E * H + 2 * H * H);
      break;
    case EX_MODEL_MVRNN:
      if (nc == 2) {
        f += 2 * (2 * H * H) + 2 * 2 * H * H;                  /* B·a, A·b, W */
        if (v != tb->tree_root[i]) f += 2 * (2 * H * H * H);   /* A·W_1 + B·W_2 */
      }
      break;
    default: break;
    }
  }
  if (n->kind == EX_MODEL_TREELSTM) f += 2 * H * EX_TREELSTM_CLASSES;
  return f;
}

sheaf_status ex_net_build(const ex_net *n, sheaf_graph *g, int32_t i, sheaf_expr *out) {
  const ex_data *d = n->data;
  sheaf_graph_phase(g, 0);
  switch (n->kind) {
  case EX_MODEL_TREELSTM: out[0] = ex_treelstm_build(g, &n->tl, &d->tb, i, d->unk, NULL); break;
  case EX_MODEL_CHILDSUM: out[0] = ex_childsum_build(g, &n->cs, &d->tb, i, d->unk); break;
  case EX_MODEL_MVRNN:
    out[0] = ex_mvrnn_build(g, &n->mv, &d->tb, i, d->mv_row, d->n_word_types);
    break;
  case EX_MODEL_BILSTM: {
    int32_t s = d->sent_off[i];
    return ex_bilstm_build(g, &n->bl, d->sent_words + s, d->sent_off[i + 1] - s, d->unk, out);
  }
  default: break;
  }
  return sheaf_graph_status(g);
}

/* ------------------------------------------------------------- outputs */

sheaf_status ex_outputs_init(ex_outputs *o, const ex_net *n, int32_t first, int32_t count) {
  memset(o, 0, sizeof *o);
  o->first = first;
  o->count = count;
  o->dim = ex_net_out_dim(n);
  sheaf_ctx *ctx = n->data->ctx;
  o->row_off = malloc(((size_t)count + 1) * sizeof *o->row_off);
  if (!o->row_off) return sh_fail(ctx, SHEAF_ERR_NOMEM, "out of memory: output offsets");
  o->row_off[0] = 0;
  for (int32_t i = 0; i < count; i++) o->row_off[i + 1] = o->row_off[i] + ex_net_out_rows(n, first + i);
  o->rows = o->row_off[count];
  o->values = calloc((size_t)(o->rows * o->dim) + 1, sizeof(float));
  if (!o->values) {
    free(o->row_off);
    o->row_off = NULL;
    return sh_fail(ctx, SHEAF_ERR_NOMEM, "out of memory: %lld output values", (long long)(o->rows * o->dim));
  }
  return SHEAF_OK;
}

void ex_outputs_free(ex_outputs *o) {
  free(o->row_off);
  free(o->values);
  memset(o, 0, sizeof *o);
}

sheaf_status ex_run(const ex_net *n, sheaf_graph *g, int32_t first, int32_t count,
                    int32_t batch, ex_outputs *out) {
  if (batch < 1) batch = 1;
  int32_t max_rows = 0; /* expressions of the largest batch */
  for (int32_t b = first; b < first + count; b += batch) {
    int32_t end = b + batch < first + count ? b + batch : first + count, rows = 0;
    for (int32_t i = b; i < end; i++) rows += ex_net_out_rows(n, i);
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
      st = ex_net_build(n, g, i, ex + k);
      k += ex_net_out_rows(n, i);
    }
    if (st == SHEAF_OK) st = sheaf_graph_flush(g);
    if (st != SHEAF_OK || !out) continue;
    k = 0;
    for (int32_t i = b; i < end && st == SHEAF_OK; i++) {
      int32_t rows = ex_net_out_rows(n, i);
      for (int32_t r = 0; r < rows && st == SHEAF_OK; r++, k++) {
        sheaf_value_view v;
        st = sheaf_value(g, ex[k], &v);
        if (st != SHEAF_OK) break;
        int64_t numel = v.rank == 2 ? v.shape[0] * v.shape[1] : v.shape[0];
        if (numel != out->dim) {
          st = sh_fail(n->data->ctx, SHEAF_ERR_INTERNAL, "%s: output of instance %d has %lld values, expected %lld",
                       ex_model_name(n->kind), (int)i, (long long)numel, (long long)out->dim);
          break;
        }
        memcpy(out->values + (out->row_off[i - out->first] + r) * out->dim, v.data, (size_t)numel * sizeof(float));
      }
    }
  }
  free(ex);
  return st;
}

sheaf_status ex_run_fresh(const ex_net *n, sheaf_policy policy, int threads, int32_t first,
                          int32_t count, int32_t batch, ex_outputs *out) {
  sheaf_status st = ex_outputs_init(out, n, first, count);
  if (st) return st;
  sheaf_graph_opts go = {policy, threads, NULL};
  sheaf_graph *g = NULL;
  st = sheaf_graph_create(n->model, &go, &g);
  if (!st) st = ex_run(n, g, first, count, batch, out);
  sheaf_graph_free(g);
  if (st) ex_outputs_free(out);
  return st;
}

/* ex_run_runner's callbacks: instance i's expressions live at ex + off[i - first]. */
typedef struct runner_job {
  const ex_net *n;
  int32_t first;
  const int64_t *off; /* off[i - first]: instance i's first row (from off[0]) */
  sheaf_expr *ex;     /* row k at ex[k - off[0]] */
  ex_outputs *out;
} runner_job;

static sheaf_status job_build(sheaf_graph *g, int64_t i, void *user) {
  const runner_job *j = user;
  return ex_net_build(j->n, g, (int32_t)i, j->ex + (j->off[i - j->first] - j->off[0]));
}

static sheaf_status job_read(sheaf_graph *g, int64_t i, void *user) {
  const runner_job *j = user;
  int64_t k = j->off[i - j->first] - j->off[0], rows = j->off[i - j->first + 1] - j->off[i - j->first];
  for (int64_t r = 0; r < rows; r++) {
    sheaf_value_view v;
    sheaf_status st = sheaf_value(g, j->ex[k + r], &v);
    if (st != SHEAF_OK) return st;
    int64_t numel = v.rank == 2 ? v.shape[0] * v.shape[1] : v.shape[0];
    if (numel != j->out->dim)
      return sh_fail(j->n->data->ctx, SHEAF_ERR_INTERNAL, "%s: output of instance %d has %lld values, expected %lld",
                     ex_model_name(j->n->kind), (int)i, (long long)numel, (long long)j->out->dim);
    memcpy(j->out->values + (j->out->row_off[i - j->out->first] + r) * j->out->dim, v.data,
           (size_t)numel * sizeof(float));
  }
  return SHEAF_OK;
}

sheaf_status ex_run_runner(const ex_net *n, sheaf_runner *r, int32_t first, int32_t count, ex_outputs *out) {
  sheaf_ctx *ctx = n->data->ctx;
  int64_t *off = out ? NULL : malloc(((size_t)count + 1) * sizeof *off);
  if (!out && !off) return sh_fail(ctx, SHEAF_ERR_NOMEM, "out of memory: %d offsets", (int)count);
  if (off) {
    off[0] = 0;
    for (int32_t i = 0; i < count; i++) off[i + 1] = off[i] + ex_net_out_rows(n, first + i);
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

int ex_outputs_write(const ex_outputs *o, const ex_net *n, FILE *f) {
  bool per_word = n->kind == EX_MODEL_BILSTM;
  for (int32_t i = o->first; i < o->first + o->count; i++) {
    int32_t rows = (int32_t)(o->row_off[i - o->first + 1] - o->row_off[i - o->first]);
    for (int32_t r = 0; r < rows; r++) {
      const float *v = ex_outputs_row(o, i, r);
      if (per_word) fprintf(f, "%d %d", (int)i, (int)r);
      else fprintf(f, "%d", (int)i);
      for (int64_t j = 0; j < o->dim; j++) fprintf(f, " %.7g", (double)v[j]);
      fputc('\n', f);
    }
  }
  return ferror(f) ? -1 : 0;
}

double ex_max_rel_err(const float *a, const float *b, int64_t rows, int64_t dim) {
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
