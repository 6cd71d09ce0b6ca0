/*
 * early_exit.c — the early-exit classifier (see early_exit.h): parameters,
 * the seeded initialization that spreads the exit depths, and the
 * per-sentence builder that reads each head's output to decide whether to
 * go on.
 */
#include "models/early_exit.h"
#include "models/params.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

sheaf_status sh_early_exit_declare(sheaf_model *m, int64_t H, int64_t V, int layers, int classes,
                                   sh_early_exit *p) {
  memset(p, 0, sizeof *p);
  if (layers < 1 || layers > SH_EE_MAX_LAYERS || classes < 2 || classes > SH_EE_MAX_CLASSES ||
      H < 1 || V < 1)
    return SHEAF_ERR_INVALID_ARG;
  p->hidden = H;
  p->vocab = V;
  p->layers = layers;
  p->classes = classes;
  p->threshold = 0.9f;
  p->gain0 = 8.0f;
  p->growth = 1.5f;
  p->cell_gain = 2.5f;
  int64_t shape[2] = {V, H};
  sheaf_status st = sheaf_model_param(m, "emb", 2, shape, SHEAF_INIT_NORMAL, &p->emb);
  for (int l = 0; l < layers && !st; l++) {
    char name[32];
    snprintf(name, sizeof name, "W_%d", l);
    shape[0] = 2 * H, shape[1] = 4 * H;
    st = sheaf_model_param(m, name, 2, shape, SHEAF_INIT_GLOROT, &p->W[l]);
    snprintf(name, sizeof name, "b_%d", l);
    shape[0] = 4 * H;
    if (!st) st = sheaf_model_param(m, name, 1, shape, SHEAF_INIT_ZERO, &p->b[l]);
    snprintf(name, sizeof name, "W_head_%d", l);
    shape[0] = H, shape[1] = classes;
    if (!st) st = sheaf_model_param(m, name, 2, shape, SHEAF_INIT_GLOROT, &p->W_head[l]);
    snprintf(name, sizeof name, "b_head_%d", l);
    shape[0] = classes;
    if (!st) st = sheaf_model_param(m, name, 1, shape, SHEAF_INIT_ZERO, &p->b_head[l]);
  }
  return st;
}

sheaf_status sh_early_exit_seed(sheaf_model *m, const sh_early_exit *p, uint64_t seed) {
  sheaf_status st = sheaf_model_seed(m, seed);
  uint64_t s = seed ^ 0x5eaf5eafull;
  st = st ? st : sh_perturb(m, p->emb, 50.0f, 0.0f, &s); /* std 1: sentences differ */
  float gain = p->gain0;
  for (int l = 0; l < p->layers && !st; l++, gain *= p->growth) {
    st = sh_perturb(m, p->W[l], p->cell_gain, 0.0f, &s);
    if (!st) st = sh_perturb(m, p->b[l], 1.0f, 0.1f, &s);
    if (!st) st = sh_perturb(m, p->W_head[l], gain, 0.0f, &s);
    if (!st) st = sh_perturb(m, p->b_head[l], 1.0f, 0.1f, &s);
  }
  return st;
}

sheaf_status sh_early_exit_run(sheaf_graph *g, const sh_early_exit *p, const int32_t *rows,
                               int32_t n, int *exit_layer, float *probs) {
  if (n < 1) return sheaf_graph_fail(g, SHEAF_ERR_INVALID_ARG, "sh_early_exit_run: empty sentence");
  sheaf_expr *x = malloc((size_t)n * sizeof *x);
  if (!x) return sheaf_graph_fail(g, SHEAF_ERR_NOMEM, "sh_early_exit_run: out of memory");
  for (int32_t t = 0; t < n; t++) x[t] = sheaf_lookup(g, p->emb, rows[t]);
  int64_t hshape[1] = {p->hidden};
  sheaf_expr zero = sheaf_zeros(g, 1, hshape);
  sheaf_status st = SHEAF_OK;
  int l = 0;
  for (; l < p->layers; l++) {
    sheaf_expr h = zero, c = {0};
    for (int32_t t = 0; t < n; t++) {
      sheaf_expr xh[2] = {x[t], h};
      sheaf_lstm_cell(g, p->W[l], p->b[l], sheaf_concat(g, 2, xh), c, &h, &c);
      x[t] = h; /* the next layer's input */
    }
    sheaf_graph_phase(g, 1); /* every instance's head at this layer in one batch */
    sheaf_expr pr = sheaf_softmax(g, sheaf_affine(g, p->W_head[l], h, p->b_head[l]));
    sheaf_graph_phase(g, 0);
    sheaf_value_view v;
    st = sheaf_value(g, pr, &v); /* under fibers: waits for the layer's batched flush */
    if (st) break;
    float best = v.data[0];
    for (int k = 1; k < p->classes; k++) best = v.data[k] > best ? v.data[k] : best;
    memcpy(probs, v.data, (size_t)p->classes * sizeof *probs);
    if (best >= p->threshold) break;
  }
  free(x);
  *exit_layer = l < p->layers ? l + 1 : p->layers;
  return st ? st : sheaf_graph_status(g);
}

typedef struct many {
  const sh_early_exit *p;
  const int32_t *rows, *off;
  int64_t first;
  int *exit_layer;
  float *probs;
} many;

static sheaf_status many_build(sheaf_graph *g, int64_t i, int worker, void *user) {
  const many *u = user;
  int64_t k = i - u->first;
  return sh_early_exit_run(g, u->p, u->rows + u->off[i], u->off[i + 1] - u->off[i],
                           &u->exit_layer[k], u->probs + k * u->p->classes);
}

sheaf_status sh_early_exit_run_many(sheaf_runner *r, const sh_early_exit *p, const int32_t *rows,
                                    const int32_t *off, int64_t first, int64_t count, int fibers,
                                    int *exit_layer, float *probs) {
  many u = {p, rows, off, first, exit_layer, probs};
  return fibers ? sheaf_runner_run_fibers(r, first, count, many_build, NULL, &u)
                : sheaf_runner_run(r, first, count, many_build, NULL, &u);
}
