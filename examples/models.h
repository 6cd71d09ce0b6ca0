/*
 * models.h — one interface over the four example models (binary TreeLSTM,
 * child-sum TreeLSTM, BiLSTM tagger, MV-RNN) and the batch driver that
 * `sheaf run`, `sheaf bench`, the tests and the benchmarks share, so they all
 * run the same code path:
 *
 *   ex_net net;   ex_net_create(ctx, EX_MODEL_TREELSTM, &data, 256, 256, &net);
 *   ex_net_seed(&net, 0);                       // or ex_net_load(&net, "w.safetensors")
 *   sheaf_graph *g;  sheaf_graph_create(net.model, &opts, &g);
 *   ex_outputs out;  ex_outputs_init(&out, &net, 0, n);
 *   ex_run(&net, g, 0, n, 64, &out);            // batches of 64: reset, build, flush, read
 *
 * Outputs per instance: treelstm the 5 class log-probabilities; childsum
 * and mvrnn the root's vector [H]; bilstm one row of 17 tag
 * log-probabilities per word.
 */
#ifndef SHEAF_EXAMPLES_MODELS_H
#define SHEAF_EXAMPLES_MODELS_H

#include <stdio.h>

#include "bilstm.h"
#include "childsum.h"
#include "data.h"
#include "mvrnn.h"
#include "treelstm.h"

typedef enum ex_model_kind {
  EX_MODEL_TREELSTM = 0,
  EX_MODEL_CHILDSUM,
  EX_MODEL_BILSTM,
  EX_MODEL_MVRNN,
  EX_MODEL_COUNT
} ex_model_kind;

const char *ex_model_name(ex_model_kind k);          /* "treelstm", ... */
bool ex_model_parse(const char *name, ex_model_kind *out);
ex_data_kind ex_model_data_kind(ex_model_kind k);     /* what the model runs on */
int64_t ex_model_default_hidden(ex_model_kind k);     /* 256 (mvrnn 64) */
const char *ex_model_instance_noun(ex_model_kind k);  /* "trees" / "sentences" */

typedef struct ex_net {
  ex_model_kind kind;
  const ex_data *data; /* must outlive the net */
  sheaf_model *model;
  int64_t hidden, embed;
  ex_treelstm tl;
  ex_childsum cs;
  ex_bilstm bl;
  ex_mvrnn mv;
} ex_net;

/* Declares the model's parameters for data d (vocabulary from d). The
 * MV-RNN uses embed = hidden (its word vectors are [H]). */
sheaf_status ex_net_create(sheaf_ctx *ctx, ex_model_kind kind, const ex_data *d,
                           int64_t hidden, int64_t embed, ex_net *out);
void ex_net_free(ex_net *n);
/* Seeded random initialization (and the MV-RNN's identity matrices). */
sheaf_status ex_net_seed(ex_net *n, uint64_t seed);
/* Every parameter from a safetensors file (names in the model headers). */
sheaf_status ex_net_load(ex_net *n, const char *path);

int64_t ex_net_out_dim(const ex_net *n);             /* floats per output row */
int32_t ex_net_out_rows(const ex_net *n, int32_t i); /* rows of instance i (1, or words) */
/* Floating-point operations of instance i's matrix products (the useful
 * work: 2·m·n·k per product; pointwise work not counted). */
double ex_net_flops(const ex_net *n, int32_t i);

/* Builds instance i on g; out gets ex_net_out_rows(n, i) expressions.
 * Returns the graph's status. */
sheaf_status ex_net_build(const ex_net *n, sheaf_graph *g, int32_t i, sheaf_expr *out);

/* Output rows of instances [first, first + count): instance i's rows start
 * at values + (row_off[i - first]) * dim. */
typedef struct ex_outputs {
  int32_t first, count;
  int64_t dim, rows;
  int64_t *row_off; /* count + 1 */
  float *values;    /* rows * dim */
} ex_outputs;

sheaf_status ex_outputs_init(ex_outputs *o, const ex_net *n, int32_t first, int32_t count);
void ex_outputs_free(ex_outputs *o);
static inline const float *ex_outputs_row(const ex_outputs *o, int32_t i, int32_t r) {
  return o->values + (o->row_off[i - o->first] + r) * o->dim;
}

/* Runs instances [first, first + count) in batches of `batch` instances:
 * per batch, sheaf_graph_reset, build every instance, sheaf_graph_flush,
 * then (out non-NULL) copy each output into out, which must cover the
 * range. */
sheaf_status ex_run(const ex_net *n, sheaf_graph *g, int32_t first, int32_t count,
                    int32_t batch, ex_outputs *out);

/* ex_run on a graph of its own (policy, threads; <= 0: all), freed after:
 * *out is initialized here for [first, first + count) and freed again on
 * failure. */
sheaf_status ex_run_fresh(const ex_net *n, sheaf_policy policy, int threads, int32_t first,
                          int32_t count, int32_t batch, ex_outputs *out);

/* The same through a runner (which decides the graphs, the batch size and
 * how threads are used): batches in parallel on several threads. */
sheaf_status ex_run_runner(const ex_net *n, sheaf_runner *r, int32_t first, int32_t count,
                           ex_outputs *out);

/* Writes outputs as text, one line per output row: "INDEX v1 v2 ..." or,
 * for models with one row per word, "INDEX WORD v1 v2 ..." (0-based
 * indices; values %.7g). Returns 0, or -1 when the stream failed. */
int ex_outputs_write(const ex_outputs *o, const ex_net *n, FILE *f);

/* The relative error of `rows` output vectors of `dim` floats: the max over
 * rows of ||a_r - b_r||_inf / ||b_r||_inf (0 when both rows are zero; NaN
 * anywhere gives NaN). Elementwise relative errors are meaningless for
 * entries near zero that come out of cancellation (the MV-RNN's). */
double ex_max_rel_err(const float *a, const float *b, int64_t rows, int64_t dim);

#endif
