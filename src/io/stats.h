/*
 * stats.h — length and depth statistics of the loaded data, for `sheaf data
 * stats` and the benchmarks: distributions (count, total, min, mean, median,
 * p90, max, histogram) of sentence lengths and tree depths.
 *
 * Percentiles use the nearest-rank rule: the p-th percentile of n sorted
 * values is the value at rank ceil(p/100 * n) (1-based); so the median of an
 * even count is the lower middle value.
 */
#ifndef SH_IO_STATS_H
#define SH_IO_STATS_H

#include "io/conllu.h"
#include "io/seqs.h"
#include "io/treebank.h"

typedef struct sh_dist_bin {
  int64_t value, count;
} sh_dist_bin;

typedef struct sh_dist {
  size_t count;
  int64_t total, min, max, median, p90; /* 0 when count is 0 */
  double mean;
  sh_dist_bin *bins; /* distinct values ascending, with their counts */
  size_t n_bins;
} sh_dist;

/* Summarizes values[0..n). */
sheaf_status sh_dist_compute(sheaf_ctx *ctx, const int32_t *values, size_t n, sh_dist *out);
void sh_dist_free(sheaf_ctx *ctx, sh_dist *d);
/* Nearest-rank percentile (0 < p <= 100) of a computed distribution. */
int64_t sh_dist_percentile(const sh_dist *d, double p);

/* A treebank: length = nodes with a word per tree (its leaves for ordinary
 * trees), depth = height of the root (a leaf is 1). */
typedef struct sh_tb_stats {
  int64_t trees, nodes, leaves, words, labels;
  sh_dist length, depth;
} sh_tb_stats;

sheaf_status sh_tb_stats_compute(const sh_treebank *tb, sh_tb_stats *out);
void sh_tb_stats_free(sheaf_ctx *ctx, sh_tb_stats *s);

/* A dependency bank: sentence length, dependency depth (root word = 1) and
 * the depth of the binarized tree (see binarize.h; computed without building
 * it, so a sentence too deep to binarize still has its depth);
 * bin_too_deep counts the sentences whose binary tree would exceed
 * SH_TB_MAX_DEPTH (sh_binarize refuses them). */
typedef struct sh_dep_stats {
  int64_t sentences, words, multiword, empty_nodes, nonprojective, crossing, bin_too_deep;
  sh_dist length, depth, bin_depth;
} sh_dep_stats;

sheaf_status sh_dep_stats_compute(const sh_depbank *db, sh_dep_stats *out);
void sh_dep_stats_free(sheaf_ctx *ctx, sh_dep_stats *s);

/* Token sequences: length = tokens per sequence; distinct = token ids used. */
typedef struct sh_seq_stats {
  int64_t sequences, tokens, empty_lines, unk, distinct;
  sh_dist length;
} sh_seq_stats;

sheaf_status sh_seq_stats_compute(const sh_seqs *s, sh_seq_stats *out);
void sh_seq_stats_free(sheaf_ctx *ctx, sh_seq_stats *s);

#endif
