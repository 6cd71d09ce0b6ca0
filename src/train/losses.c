/*
 * losses.c — training builders made of the graph's own ops, so they batch
 * and differentiate like any model code: the negative log-likelihood
 * (sheaf_nll, sheaf_nll_logp) and inverted dropout with a seeded mask
 * (sheaf_dropout).
 */
#include <string.h>

#include "train/train.h"

sheaf_expr sheaf_nll_logp(sheaf_graph *g, sheaf_expr logp, int64_t label) {
  return sheaf_scale(g, sheaf_pick(g, logp, label), -1.0f);
}

sheaf_expr sheaf_nll(sheaf_graph *g, sheaf_expr logits, int64_t label) {
  return sheaf_nll_logp(g, sheaf_log_softmax(g, logits), label);
}

static uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

sheaf_expr sheaf_dropout(sheaf_graph *g, sheaf_expr x, float p, uint64_t seed) {
  if (!g || g->status) return SH_NULL_EXPR;
  if (!(p >= 0.0f && p < 1.0f)) {
    sh_graph_fail(g, SHEAF_ERR_INVALID_ARG, "sheaf_dropout: p %g is outside [0, 1)", (double)p);
    return SH_NULL_EXPR;
  }
  int64_t shape[2];
  int rank = sheaf_expr_shape(g, x, shape);
  if (!rank) return sheaf_scale(g, x, 1.0f); /* a null or bad handle: the builder reports it */
  if (p == 0.0f) return x;
  int64_t n = rank == 2 ? shape[0] * shape[1] : shape[0];
  sh_arena_mark mark = sh_arena_get_mark(&g->work.scratch);
  float *mask = sh_arena_alloc(&g->work.scratch, (size_t)n * sizeof(float));
  if (!mask) {
    sh_graph_fail(g, SHEAF_ERR_NOMEM, "sheaf_dropout: out of memory");
    return SH_NULL_EXPR;
  }
  float keep = 1.0f / (1.0f - p);
  for (int64_t i = 0; i < n; i++) {
    double u = (double)(splitmix64(seed ^ splitmix64((uint64_t)i)) >> 11) * 0x1.0p-53;
    mask[i] = u >= (double)p ? keep : 0.0f;
  }
  sheaf_expr m = sheaf_input(g, rank, shape, mask);
  sh_arena_rewind(&g->work.scratch, mark);
  return sheaf_mul(g, x, m);
}
