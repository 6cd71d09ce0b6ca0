/*
 * stats.c — distributions of lengths and depths (see stats.h). Values are
 * bucketed by a counting pass when their range is small (lengths and
 * depths almost always are), else sorted.
 */
#include "stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/binarize.h"

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

int64_t sh_dist_percentile(const sh_dist *d, double p) {
  if (d->count == 0) return 0;
  double r = ceil(p / 100.0 * (double)d->count - 1e-9);
  size_t rank = r < 1 ? 1 : r > (double)d->count ? d->count : (size_t)r;
  size_t seen = 0;
  for (size_t i = 0; i < d->n_bins; i++) {
    seen += (size_t)d->bins[i].count;
    if (seen >= rank) return d->bins[i].value;
  }
  return d->max;
}

sheaf_status sh_dist_compute(sheaf_ctx *ctx, const int32_t *values, size_t n, sh_dist *out) {
  memset(out, 0, sizeof *out);
  out->count = n;
  if (n == 0) return SHEAF_OK;
  int32_t lo = values[0], hi = values[0];
  int64_t total = 0;
  for (size_t i = 0; i < n; i++) {
    if (values[i] < lo) lo = values[i];
    if (values[i] > hi) hi = values[i];
    total += values[i];
  }
  size_t range = (size_t)((int64_t)hi - lo) + 1, n_bins = 0;
  sh_dist_bin *bins;
  if (range <= 4 * n + 1024) { /* counting */
    int64_t *cnt = sh_calloc(ctx, range, sizeof *cnt);
    if (!cnt) return SHEAF_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) cnt[values[i] - lo]++;
    for (size_t v = 0; v < range; v++) n_bins += cnt[v] != 0;
    bins = sh_malloc(ctx, n_bins * sizeof *bins);
    if (!bins) {
      sh_free(ctx, cnt, range * sizeof *cnt);
      return SHEAF_ERR_NOMEM;
    }
    n_bins = 0;
    for (size_t v = 0; v < range; v++)
      if (cnt[v]) bins[n_bins++] = (sh_dist_bin){(int64_t)lo + (int64_t)v, cnt[v]};
    sh_free(ctx, cnt, range * sizeof *cnt);
  } else { /* sorting */
    int32_t *sorted = sh_malloc(ctx, n * sizeof *sorted);
    if (!sorted) return SHEAF_ERR_NOMEM;
    memcpy(sorted, values, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_i32);
    for (size_t i = 0; i < n; i++) n_bins += i == 0 || sorted[i] != sorted[i - 1];
    bins = sh_malloc(ctx, n_bins * sizeof *bins);
    if (!bins) {
      sh_free(ctx, sorted, n * sizeof *sorted);
      return SHEAF_ERR_NOMEM;
    }
    n_bins = 0;
    for (size_t i = 0; i < n; i++) {
      if (i == 0 || sorted[i] != sorted[i - 1]) bins[n_bins++] = (sh_dist_bin){sorted[i], 0};
      bins[n_bins - 1].count++;
    }
    sh_free(ctx, sorted, n * sizeof *sorted);
  }
  out->bins = bins;
  out->n_bins = n_bins;
  out->total = total;
  out->min = lo;
  out->max = hi;
  out->mean = (double)total / (double)n;
  out->median = sh_dist_percentile(out, 50);
  out->p90 = sh_dist_percentile(out, 90);
  return SHEAF_OK;
}

void sh_dist_free(sheaf_ctx *ctx, sh_dist *d) {
  sh_free(ctx, d->bins, d->n_bins * sizeof *d->bins);
  memset(d, 0, sizeof *d);
}

/* ---- treebanks ---- */

sheaf_status sh_tb_stats_compute(const sh_treebank *tb, sh_tb_stats *out) {
  sheaf_ctx *ctx = tb->ctx;
  memset(out, 0, sizeof *out);
  out->trees = tb->n_trees;
  out->nodes = tb->n_nodes;
  out->labels = sh_vocab_size(&tb->labels);
  size_t nn = (size_t)tb->n_nodes, nt = (size_t)tb->n_trees;
  int32_t *heights = sh_malloc(ctx, (nn + 2 * nt + 1) * sizeof *heights);
  if (!heights) return SHEAF_ERR_NOMEM;
  int32_t *depth = heights + nn, *length = depth + nt;
  sh_tb_tree_heights(tb, heights, depth);
  for (int32_t n = 0; n < tb->n_nodes; n++) {
    out->leaves += tb->n_children[n] == 0;
    out->words += tb->word[n] >= 0;
  }
  for (int32_t t = 0; t < tb->n_trees; t++) length[t] = sh_tb_tree_words(tb, t);
  sheaf_status st = sh_dist_compute(ctx, length, nt, &out->length);
  if (st == SHEAF_OK) st = sh_dist_compute(ctx, depth, nt, &out->depth);
  sh_free(ctx, heights, (nn + 2 * nt + 1) * sizeof *heights);
  if (st != SHEAF_OK) sh_tb_stats_free(ctx, out);
  return st;
}

void sh_tb_stats_free(sheaf_ctx *ctx, sh_tb_stats *s) {
  sh_dist_free(ctx, &s->length);
  sh_dist_free(ctx, &s->depth);
}

/* ---- dependency banks ---- */

sheaf_status sh_dep_stats_compute(const sh_depbank *db, sh_dep_stats *out) {
  sheaf_ctx *ctx = db->ctx;
  memset(out, 0, sizeof *out);
  out->sentences = db->n_sents;
  out->words = db->n_tokens;
  out->multiword = db->n_multiword;
  out->empty_nodes = db->n_empty_nodes;
  out->nonprojective = db->n_nonprojective;
  out->crossing = db->n_crossing;
  size_t ns = (size_t)db->n_sents;
  int32_t *v = sh_malloc(ctx, (3 * ns + 1) * sizeof *v);
  if (!v) return SHEAF_ERR_NOMEM;
  int32_t *len = v, *depth = v + ns, *bin = v + 2 * ns;
  sh_dep_work w;
  sh_dep_work_init(&w, ctx);
  sheaf_status st = SHEAF_OK;
  for (size_t s = 0; s < ns && st == SHEAF_OK; s++) {
    len[s] = db->sents[s].len;
    depth[s] = db->sents[s].depth;
    /* the depth of the tree sh_binarize builds (the fuzzer checks they agree) */
    st = sh_binarized_height(db, (int32_t)s, &w, &bin[s]);
    if (st == SHEAF_OK && bin[s] > SH_TB_MAX_DEPTH) out->bin_too_deep++;
  }
  sh_dep_work_free(&w);
  if (st == SHEAF_OK) st = sh_dist_compute(ctx, len, ns, &out->length);
  if (st == SHEAF_OK) st = sh_dist_compute(ctx, depth, ns, &out->depth);
  if (st == SHEAF_OK) st = sh_dist_compute(ctx, bin, ns, &out->bin_depth);
  sh_free(ctx, v, (3 * ns + 1) * sizeof *v);
  if (st != SHEAF_OK) sh_dep_stats_free(ctx, out);
  return st;
}

void sh_dep_stats_free(sheaf_ctx *ctx, sh_dep_stats *s) {
  sh_dist_free(ctx, &s->length);
  sh_dist_free(ctx, &s->depth);
  sh_dist_free(ctx, &s->bin_depth);
}

/* ---- sequences ---- */

sheaf_status sh_seq_stats_compute(const sh_seqs *s, sh_seq_stats *out) {
  sheaf_ctx *ctx = s->ctx;
  memset(out, 0, sizeof *out);
  out->sequences = (int64_t)s->n_seqs;
  out->tokens = (int64_t)s->n_tokens;
  out->empty_lines = (int64_t)s->n_empty_lines;
  out->unk = (int64_t)s->n_unk;
  int32_t *len = sh_malloc(ctx, (s->n_seqs + 1) * sizeof *len);
  if (!len) return SHEAF_ERR_NOMEM;
  for (size_t i = 0; i < s->n_seqs; i++) len[i] = s->seqs[i].len;
  sheaf_status st = sh_dist_compute(ctx, len, s->n_seqs, &out->length);
  sh_free(ctx, len, (s->n_seqs + 1) * sizeof *len);
  if (st == SHEAF_OK) { /* distinct ids: the bins of the token distribution */
    sh_dist tokens;
    st = sh_dist_compute(ctx, s->tokens, s->n_tokens, &tokens);
    if (st == SHEAF_OK) out->distinct = (int64_t)tokens.n_bins;
    sh_dist_free(ctx, &tokens);
  }
  if (st != SHEAF_OK) sh_seq_stats_free(ctx, out);
  return st;
}

void sh_seq_stats_free(sheaf_ctx *ctx, sh_seq_stats *s) { sh_dist_free(ctx, &s->length); }
