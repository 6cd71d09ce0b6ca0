/*
 * models.h — the built-in models: one interface over the four models
 * written against the C graph API (binary TreeLSTM, child-sum TreeLSTM,
 * BiLSTM tagger, MV-RNN; treefc.h is a fifth, for the tests) and the batch
 * driver that `sheaf run`, `sheaf bench`, the tests and the benchmarks
 * share, so they all run the same code path:
 *
 *   sh_net net;   sh_net_create(ctx, SH_NET_TREELSTM, &data, 256, 256, &net);
 *   sh_net_seed(&net, 0);                       // or sh_net_load(&net, "w.safetensors")
 *   sheaf_graph *g;  sheaf_graph_create(net.model, &opts, &g);
 *   sh_net_outputs out;  sh_net_outputs_init(&out, &net, 0, n);
 *   sh_net_run(&net, g, 0, n, 64, &out);            // batches of 64: reset, build, flush, read
 *
 * Outputs per instance: treelstm the 5 class log-probabilities; childsum
 * and mvrnn the root's vector [H]; bilstm one row of 17 tag
 * log-probabilities per word.
 */
#ifndef SH_MODELS_MODELS_H
#define SH_MODELS_MODELS_H

#include <stdio.h>

#include "io/dataset.h"
#include "models/bilstm.h"
#include "models/childsum.h"
#include "models/mvrnn.h"
#include "models/treelstm.h"

typedef enum sh_net_kind {
  SH_NET_TREELSTM = 0,
  SH_NET_CHILDSUM,
  SH_NET_BILSTM,
  SH_NET_MVRNN,
  SH_NET_COUNT
} sh_net_kind;

const char *sh_net_kind_name(sh_net_kind k);          /* "treelstm", ... */
bool sh_net_kind_parse(const char *name, sh_net_kind *out);
sh_dataset_kind sh_net_data_kind(sh_net_kind k);     /* what the model runs on */
int64_t sh_net_default_hidden(sh_net_kind k);     /* 256 (mvrnn 64) */
const char *sh_net_instance_noun(sh_net_kind k);  /* "trees" / "sentences" */

typedef struct sh_net {
  sh_net_kind kind;
  const sh_dataset *data; /* must outlive the net */
  sheaf_model *model;
  int64_t hidden, embed;
  sh_treelstm tl;
  sh_childsum_lstm cs;
  sh_bilstm bl;
  sh_mvrnn mv;
} sh_net;

/* Declares the model's parameters for data d (vocabulary from d). The
 * MV-RNN uses embed = hidden (its word vectors are [H]). */
sheaf_status sh_net_create(sheaf_ctx *ctx, sh_net_kind kind, const sh_dataset *d,
                           int64_t hidden, int64_t embed, sh_net *out);
void sh_net_free(sh_net *n);
/* Seeded random initialization (and the MV-RNN's identity matrices). */
sheaf_status sh_net_seed(sh_net *n, uint64_t seed);
/* Every parameter from a safetensors file (names in the model headers). */
sheaf_status sh_net_load(sh_net *n, const char *path);

int64_t sh_net_out_dim(const sh_net *n);             /* floats per output row */
int32_t sh_net_out_rows(const sh_net *n, int32_t i); /* rows of instance i (1, or words) */
/* Floating-point operations of instance i's matrix products (the useful
 * work: 2·m·n·k per product; pointwise work not counted). */
double sh_net_flops(const sh_net *n, int32_t i);

/* Builds instance i on g; out gets sh_net_out_rows(n, i) expressions.
 * Returns the graph's status. */
sheaf_status sh_net_build(const sh_net *n, sheaf_graph *g, int32_t i, sheaf_expr *out);

/* Output rows of instances [first, first + count): instance i's rows start
 * at values + (row_off[i - first]) * dim. */
typedef struct sh_net_outputs {
  int32_t first, count;
  int64_t dim, rows;
  int64_t *row_off; /* count + 1 */
  float *values;    /* rows * dim */
} sh_net_outputs;

sheaf_status sh_net_outputs_init(sh_net_outputs *o, const sh_net *n, int32_t first, int32_t count);
void sh_net_outputs_free(sh_net_outputs *o);
static inline const float *sh_net_outputs_row(const sh_net_outputs *o, int32_t i, int32_t r) {
  return o->values + (o->row_off[i - o->first] + r) * o->dim;
}

/* Runs instances [first, first + count) in batches of `batch` instances:
 * per batch, sheaf_graph_reset, build every instance, sheaf_graph_flush,
 * then (out non-NULL) copy each output into out, which must cover the
 * range. */
sheaf_status sh_net_run(const sh_net *n, sheaf_graph *g, int32_t first, int32_t count,
                        int32_t batch, sh_net_outputs *out);

/* sh_net_run on a graph of its own (policy, threads; <= 0: all), freed after:
 * *out is initialized here for [first, first + count) and freed again on
 * failure. */
sheaf_status sh_net_run_fresh(const sh_net *n, sheaf_policy policy, int threads, int32_t first,
                              int32_t count, int32_t batch, sh_net_outputs *out);

/* The same through a runner (which decides the graphs, the batch size and
 * how threads are used): batches in parallel on several threads. */
sheaf_status sh_net_run_runner(const sh_net *n, sheaf_runner *r, int32_t first, int32_t count,
                               sh_net_outputs *out);

/* Writes outputs as text, one line per output row: "INDEX v1 v2 ..." or,
 * for models with one row per word, "INDEX WORD v1 v2 ..." (0-based
 * indices; values %.7g). Returns 0, or -1 when the stream failed. */
int sh_net_outputs_write(const sh_net_outputs *o, const sh_net *n, FILE *f);

/* The relative error of `rows` output vectors of `dim` floats: the max over
 * rows of ||a_r - b_r||_inf / ||b_r||_inf (0 when both rows are zero; NaN
 * anywhere gives NaN). Elementwise relative errors are meaningless for
 * entries near zero that come out of cancellation (the MV-RNN's). */
double sh_max_rel_err(const float *a, const float *b, int64_t rows, int64_t dim);

#endif
