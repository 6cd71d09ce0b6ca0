/*
 * sheaf_graph.h — the define-by-run C API of Sheaf's auto-batching runtime
 * (included by sheaf.h; do not include it alone).
 *
 * A program describes the work of ONE instance with ordinary C control flow,
 * building expressions on a graph; nothing is computed until a value is
 * requested or the graph is flushed. Build many instances on one graph, then
 * flush once: Sheaf batches the same operations across instances and across
 * recursion levels (policy SHEAF_POLICY_SHEAF: the depth is carried inline by
 * each handle, depth = max(input depths) + 1, so there is no graph walk and
 * no per-node hashing), runs each batch as one kernel call (weights packed
 * once, scattered inputs passed as row pointers into the GEMM's packing, no
 * gather copy), and keeps every batch's outputs contiguous.
 *
 *   sheaf_model *m;  sheaf_param W, b;
 *   sheaf_model_create(ctx, &m);
 *   int64_t wshape[2] = {256, 1024};
 *   sheaf_model_param(m, "W", 2, wshape, SHEAF_INIT_GLOROT, &W);
 *   ...
 *   sheaf_graph *g;  sheaf_graph_create(m, NULL, &g);
 *   for (each instance) out[i] = my_model(g, instance);   // builds, computes nothing
 *   sheaf_graph_flush(g);                                   // batched execution
 *   sheaf_value(g, out[i], &v);                             // read results
 *
 * Conventions:
 *   - Values are f32 vectors [n] or matrices [rows, cols] (row-major), per
 *     instance. Weights multiply from the right: affine(W, x) = x·W + b with
 *     W of shape [in, out] (a PyTorch Linear weight transposed).
 *   - Builders return a sheaf_expr by value. On a misuse (shape mismatch, a
 *     handle from another graph or from before a reset, an unknown parameter)
 *     they return a null expression (sheaf_expr_is_null) and record the first
 *     error on the graph — "sheaf_add: shapes [256] and [512] differ" — which
 *     sheaf_graph_status, sheaf_graph_flush and sheaf_value return and the
 *     context's last error holds. Later builders fed a null expression return
 *     null without a new error, so model code may check once, at the end;
 *     once a graph has an error every builder returns null until
 *     sheaf_graph_reset. NULL follows sheaf.h's rule: a NULL graph gives a
 *     null expression, a NULL array or shape an error naming it
 *     ("sheaf_input: shape is NULL").
 *   - Activations (tanh, sigmoid, relu, gelu) of an affine, or of a column
 *     slice of one, that nothing else has read yet run in the affine's GEMM
 *     epilogue; under the default policy a chain of elementwise ops runs as
 *     one pointwise program batched across instances, at one depth level
 *     (docs/RUNTIME.md, "Fusion"). Results are the same either way, and
 *     every intermediate expression stays readable.
 */
#ifndef SHEAF_GRAPH_H
#define SHEAF_GRAPH_H

/* ----------------------------------------------------------- parameters */

typedef struct sheaf_model sheaf_model;

/* A parameter of a model; {0, 0} is "none" (e.g. no bias). */
typedef struct sheaf_param {
  uint32_t id;    /* 1-based index in its model */
  uint32_t model; /* the model's tag: catches a parameter from another model */
} sheaf_param;

#ifdef __cplusplus
#define SHEAF_NO_PARAM (sheaf_param{0, 0})
#else
#define SHEAF_NO_PARAM ((sheaf_param){0, 0})
#endif

typedef enum sheaf_init {
  SHEAF_INIT_GLOROT = 0, /* uniform ±sqrt(6 / (fan_in + fan_out)) (vectors: ±sqrt(3 / n)) */
  SHEAF_INIT_ZERO,
  SHEAF_INIT_ONE,
  SHEAF_INIT_NORMAL,     /* normal, std 0.02 (embeddings) */
  SHEAF_INIT_IDENTITY,   /* rank 2 [r, c] with one side a multiple of the other: identity
                            blocks of n = min(r, c), i.e. element (i, j) = (i % n == j % n):
                            [n, n] is I, [2n, n] is [I; I] (MV-RNN's composition W) */
  SHEAF_INIT_IDENTITY_ROWS /* rank 2 [V, n*n]: every row an n x n identity, row-major (a
                              table of matrices, e.g. MV-RNN's word matrices) */
} sheaf_init;

SHEAF_API sheaf_status sheaf_model_create(sheaf_ctx *ctx, sheaf_model **out);
SHEAF_API void sheaf_model_free(sheaf_model *m); /* NULL is fine */

/* The context the model was created with (NULL for NULL). */
SHEAF_API sheaf_ctx *sheaf_model_ctx(const sheaf_model *m);

/* Declares a parameter (rank 1 or 2) and initializes it from the model's
 * seed (sheaf_model_seed; default 0): deterministic across runs and
 * platforms. Names are unique within a model. The identity initializers
 * ignore the seed (exact 0s and 1s; add noise through
 * sheaf_model_param_data if wanted) and reject, with SHEAF_ERR_SHAPE, a
 * shape they have no meaning for: a vector, [r, c] with neither side a
 * multiple of the other (IDENTITY), a width that is not a square (ROWS). */
SHEAF_API sheaf_status sheaf_model_param(sheaf_model *m, const char *name, int rank, const int64_t *shape,
                                         sheaf_init init, sheaf_param *out);

/* Re-initializes every parameter from `seed` (each from its own stream, so
 * adding a parameter does not change the others' values). */
SHEAF_API sheaf_status sheaf_model_seed(sheaf_model *m, uint64_t seed);

/* Loads every declared parameter from a safetensors file (F32; F16/BF16/F64
 * converted). One error lists every missing tensor and every shape
 * mismatch; tensors the model does not declare are ignored. A tensor holding
 * NaN or an infinity (or, in F64, a value beyond float's range) is refused
 * too, with SHEAF_ERR_FORMAT naming it, its count of such values and the
 * first one's index, unless sheaf_model_allow_nonfinite allowed them. A
 * failed load changes no parameter. */
SHEAF_API sheaf_status sheaf_model_load(sheaf_model *m, const char *path);
/* The same from a safetensors file already open (sheaf_st_open, or
 * sheaf_st_open_memory over bytes read once from a stream), which stays
 * open; messages name it as it was opened. */
SHEAF_API sheaf_status sheaf_model_load_st(sheaf_model *m, const sheaf_st_file *f);

/* allow != 0: sheaf_model_load takes non-finite values as they are (`sheaf
 * run --allow-nonfinite`); 0 (the default): it refuses them. */
SHEAF_API sheaf_status sheaf_model_allow_nonfinite(sheaf_model *m, int allow);

/* Writes every parameter to a safetensors file, in declaration order. */
SHEAF_API sheaf_status sheaf_model_save(const sheaf_model *m, const char *path);
/* The same with "__metadata__" entries: n_meta (key, value) pairs (e.g. the
 * vocabulary the weights were trained with: `sheaf run` writes
 * "sheaf.vocab" and warns when weights recorded another). */
SHEAF_API sheaf_status sheaf_model_save_meta(const sheaf_model *m, const char *path, size_t n_meta,
                                             const char *const *meta_kv);

SHEAF_API sheaf_status sheaf_model_find(const sheaf_model *m, const char *name, sheaf_param *out);
SHEAF_API size_t sheaf_model_param_count(const sheaf_model *m);

/* The parameter's values (row-major, writable) and shape; NULL for an
 * invalid parameter. Graphs keep packed copies of the parameters they use:
 * after writing through this pointer, call sheaf_model_param_update before
 * the next flush (a training step's weight update, say), or the graphs
 * that packed the parameter earlier keep using the old values. Handing out
 * the pointer also marks the parameter changed, so a write made right after
 * this call and before any flush is seen without it. */
SHEAF_API float *sheaf_model_param_data(sheaf_model *m, sheaf_param p, int *rank, const int64_t **shape);

/* The parameter's values for reading (row-major) and shape; NULL for an
 * invalid parameter. Unlike sheaf_model_param_data this does not mark the
 * parameter changed, so a loop that reads weights every round (to save,
 * print or compare them) never makes the graphs repack them. */
SHEAF_API const float *sheaf_model_param_values(const sheaf_model *m, sheaf_param p, int *rank,
                                                const int64_t **shape);

/* Marks parameter p changed: every graph repacks it before its next use. */
SHEAF_API sheaf_status sheaf_model_param_update(sheaf_model *m, sheaf_param p);

/* Copies n values (row-major; n must be the parameter's element count)
 * into parameter p and marks it changed. */
SHEAF_API sheaf_status sheaf_model_param_set(sheaf_model *m, sheaf_param p, const float *values,
                                             int64_t n);

/* The parameter's name; NULL for an invalid parameter. */
SHEAF_API const char *sheaf_model_param_name(const sheaf_model *m, sheaf_param p);

/* ---------------------------------------------------------------- graphs */

typedef struct sheaf_graph sheaf_graph;

typedef enum sheaf_policy {
  SHEAF_POLICY_SHEAF = 0, /* inline depth, buckets per (phase, depth, kernel): the default */
  SHEAF_POLICY_NONE,      /* no batching: every op runs eagerly when built */
  SHEAF_POLICY_DEPTH,     /* DyNet's depth-based batching (graph walk at flush) */
  SHEAF_POLICY_AGENDA     /* DyNet's agenda: ready ops by signature, lowest mean depth first */
} sheaf_policy;

/* "sheaf", "none", "depth", "agenda"; parse accepts these names. */
SHEAF_API const char *sheaf_policy_name(sheaf_policy p);
SHEAF_API sheaf_status sheaf_policy_parse(sheaf_ctx *ctx, const char *name, sheaf_policy *out);

typedef struct sheaf_graph_opts {
  sheaf_policy policy;
  int threads;            /* threads of the context's pool to use; <= 0: all */
  const char *trace_path; /* non-NULL: collect a Chrome-trace / Perfetto JSON timeline of
                             every batch, written there when the graph is freed (and by
                             sheaf_graph_write_trace at any time, to any path); checked at
                             creation: a directory or a path that cannot be written fails
                             sheaf_graph_create with SHEAF_ERR_IO naming it and why */
} sheaf_graph_opts;

/* opts NULL: policy sheaf, all threads, no trace. The model must outlive
 * the graph; parameters are packed for the GEMM on first use. */
SHEAF_API sheaf_status sheaf_graph_create(sheaf_model *m, const sheaf_graph_opts *opts, sheaf_graph **out);
SHEAF_API void sheaf_graph_free(sheaf_graph *g); /* NULL is fine */

/* Computes every expression built so far (phase by phase). Idempotent. */
SHEAF_API sheaf_status sheaf_graph_flush(sheaf_graph *g);

/* Forgets every expression (their handles become invalid: using one is an
 * error) and reuses the memory; the parameters' packed forms are kept. */
SHEAF_API sheaf_status sheaf_graph_reset(sheaf_graph *g);

/* Operations built after this call belong to `phase` (0..1023, default 0;
 * an operation reading a later phase's value joins that phase); at flush,
 * phases run in increasing order, each batched on its own. */
SHEAF_API void sheaf_graph_phase(sheaf_graph *g, int phase);

/* Records an error of the caller's own on the graph, as a builder's misuse
 * would be (the first error since reset stays; also the context's last
 * error): a model's run-time check, or a runner callback's failure, which
 * the runner then reports with the instance's index. Returns the graph's
 * error (st, or the earlier one); SHEAF_OK for st is taken as
 * SHEAF_ERR_INVALID_ARG. */
SHEAF_API sheaf_status sheaf_graph_fail(sheaf_graph *g, sheaf_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Puts the caller's context before the graph's first error: the message
 * becomes "<context>: <error>" (e.g. where in a model's source the builder
 * that failed was called). Does nothing on a graph without an error.
 * Returns the graph's status. */
SHEAF_API sheaf_status sheaf_graph_error_context(sheaf_graph *g, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* The first build error since the last reset, or SHEAF_OK. */
SHEAF_API sheaf_status sheaf_graph_status(const sheaf_graph *g);

/* ----------------------------------------------------------- expressions */

typedef struct sheaf_expr {
  uint32_t node;  /* index in the graph */
  uint32_t depth; /* inline depth: max(input depths) + 1 */
  uint64_t graph; /* the graph's id (high 32 bits: one per graph created in the process,
                     so a handle is refused by every other graph until 2^32 more graphs
                     have been created) and its reset epoch (low 32 bits: a handle from
                     before sheaf_graph_reset is refused); 0: null expression */
} sheaf_expr;

static inline int sheaf_expr_is_null(sheaf_expr e) { return e.graph == 0; }

/* Shape without computing (rank 1 or 2). Null, stale or foreign handle (or
 * a NULL graph): 0. shape may be NULL (the rank alone). */
SHEAF_API int sheaf_expr_shape(const sheaf_graph *g, sheaf_expr e, int64_t shape[2]);

/* Inputs and parameters. `data` is copied. */
SHEAF_API sheaf_expr sheaf_input(sheaf_graph *g, int rank, const int64_t *shape, const float *data);
SHEAF_API sheaf_expr sheaf_input_vector(sheaf_graph *g, int64_t n, const float *data);
SHEAF_API sheaf_expr sheaf_zeros(sheaf_graph *g, int rank, const int64_t *shape);
SHEAF_API sheaf_expr sheaf_parameter(sheaf_graph *g, sheaf_param p);              /* the value itself */
SHEAF_API sheaf_expr sheaf_lookup(sheaf_graph *g, sheaf_param table, int64_t row); /* table[row]: [E] */

/* Linear algebra. affine: x·W (+ b); x is [in] (or [rows, in]); a
 * sheaf_concat input is read piecewise (no copy). affine_n: Σ x_i·W_i + b
 * (1 <= n <= 4; the W_i are stacked [W_1; W_2; ...] and packed once).
 * matmul: both operands expressions ([r,k]·[k,c], [k]·[k,c], [r,k]·[k]). */
SHEAF_API sheaf_expr sheaf_affine(sheaf_graph *g, sheaf_param W, sheaf_expr x, sheaf_param b);
SHEAF_API sheaf_expr sheaf_affine_n(sheaf_graph *g, int n, const sheaf_param *W, const sheaf_expr *x,
                                    sheaf_param b);
SHEAF_API sheaf_expr sheaf_matmul(sheaf_graph *g, sheaf_expr a, sheaf_expr b);

/* Elementwise. Binary ops need equal shapes, or one side of size 1 (a scalar
 * broadcast), or one side one row ([c] or [1, c]) of the other's width (the
 * row repeats over the other's rows, as PyTorch broadcasts a bias). sum_n
 * adds n >= 1 expressions of one shape (any n: summed in groups). */
SHEAF_API sheaf_expr sheaf_add(sheaf_graph *g, sheaf_expr a, sheaf_expr b);
SHEAF_API sheaf_expr sheaf_sub(sheaf_graph *g, sheaf_expr a, sheaf_expr b);
SHEAF_API sheaf_expr sheaf_mul(sheaf_graph *g, sheaf_expr a, sheaf_expr b);
SHEAF_API sheaf_expr sheaf_div(sheaf_graph *g, sheaf_expr a, sheaf_expr b);
SHEAF_API sheaf_expr sheaf_sum_n(sheaf_graph *g, int n, const sheaf_expr *xs);
SHEAF_API sheaf_expr sheaf_scale(sheaf_graph *g, sheaf_expr x, float s); /* s·x */
SHEAF_API sheaf_expr sheaf_tanh(sheaf_graph *g, sheaf_expr x);
SHEAF_API sheaf_expr sheaf_sigmoid(sheaf_graph *g, sheaf_expr x);
SHEAF_API sheaf_expr sheaf_relu(sheaf_graph *g, sheaf_expr x);
SHEAF_API sheaf_expr sheaf_gelu(sheaf_graph *g, sheaf_expr x); /* erf form */
SHEAF_API sheaf_expr sheaf_exp(sheaf_graph *g, sheaf_expr x);
SHEAF_API sheaf_expr sheaf_ln(sheaf_graph *g, sheaf_expr x);       /* natural log (logf) */
SHEAF_API sheaf_expr sheaf_sqrt(sheaf_graph *g, sheaf_expr x);
SHEAF_API sheaf_expr sheaf_rsqrt(sheaf_graph *g, sheaf_expr x);    /* 1 / sqrt(x) */
SHEAF_API sheaf_expr sheaf_abs(sheaf_graph *g, sheaf_expr x);
SHEAF_API sheaf_expr sheaf_softplus(sheaf_graph *g, sheaf_expr x); /* log(1 + exp(x)); x above 20: x */
SHEAF_API sheaf_expr sheaf_erf(sheaf_graph *g, sheaf_expr x);
SHEAF_API sheaf_expr sheaf_silu(sheaf_graph *g, sheaf_expr x); /* x * sigmoid(x) (SiLU, swish) */
SHEAF_API sheaf_expr sheaf_pow(sheaf_graph *g, sheaf_expr a, sheaf_expr b);     /* a^b, as powf */
SHEAF_API sheaf_expr sheaf_minimum(sheaf_graph *g, sheaf_expr a, sheaf_expr b); /* NaN if either is */
SHEAF_API sheaf_expr sheaf_maximum(sheaf_graph *g, sheaf_expr a, sheaf_expr b);
/* Comparisons as masks: 1 where it holds, else 0 (NaN compares false,
 * but not-equal true, as in C). */
SHEAF_API sheaf_expr sheaf_gt(sheaf_graph *g, sheaf_expr a, sheaf_expr b);
SHEAF_API sheaf_expr sheaf_ge(sheaf_graph *g, sheaf_expr a, sheaf_expr b);
SHEAF_API sheaf_expr sheaf_eq(sheaf_graph *g, sheaf_expr a, sheaf_expr b);
SHEAF_API sheaf_expr sheaf_ne(sheaf_graph *g, sheaf_expr a, sheaf_expr b);
/* c != 0 ? a : b elementwise; the three broadcast as the binary ops do. */
SHEAF_API sheaf_expr sheaf_where(sheaf_graph *g, sheaf_expr c, sheaf_expr a, sheaf_expr b);

/* Shape ops on the last axis (views where possible: no copy). concat takes
 * n >= 1 (past 65,535, a node's input count, a concat of concats). */
SHEAF_API sheaf_expr sheaf_concat(sheaf_graph *g, int n, const sheaf_expr *xs);
SHEAF_API sheaf_expr sheaf_slice(sheaf_graph *g, sheaf_expr x, int64_t begin, int64_t end);
/* Same values, another shape of the same element count (rank 1 or 2): a
 * view, e.g. a looked-up row of H*H floats as an [H, H] matrix (MV-RNN). */
SHEAF_API sheaf_expr sheaf_reshape(sheaf_graph *g, sheaf_expr x, int rank, const int64_t *shape);

/* Reductions along the last axis: [n] -> [1], [r, n] -> [r]. */
SHEAF_API sheaf_expr sheaf_sum(sheaf_graph *g, sheaf_expr x);
SHEAF_API sheaf_expr sheaf_mean(sheaf_graph *g, sheaf_expr x);
SHEAF_API sheaf_expr sheaf_max(sheaf_graph *g, sheaf_expr x);
SHEAF_API sheaf_expr sheaf_softmax(sheaf_graph *g, sheaf_expr x);
SHEAF_API sheaf_expr sheaf_log_softmax(sheaf_graph *g, sheaf_expr x);
SHEAF_API sheaf_expr sheaf_pick(sheaf_graph *g, sheaf_expr x, int64_t index); /* x[index]: [1] */
/* (x - mean) / sqrt(var + eps) * gamma + beta along the last axis (the
 * biased variance, as PyTorch's LayerNorm); gamma and beta are [n] (often
 * sheaf_parameter values). */
SHEAF_API sheaf_expr sheaf_layer_norm(sheaf_graph *g, sheaf_expr x, sheaf_expr gamma, sheaf_expr beta,
                                      float eps);
/* n one-row values [D] (or [1, D]) as the rows of an [n, D] matrix;
 * 1 <= n <= 65535 (a node's input count is 16 bits). */
SHEAF_API sheaf_expr sheaf_stack(sheaf_graph *g, int n, const sheaf_expr *xs);
/* [r, c] -> [c, r]. */
SHEAF_API sheaf_expr sheaf_transpose(sheaf_graph *g, sheaf_expr x);
/* Row `index` of a matrix [r, c]: [c] (a copy; sheaf_lookup for a
 * parameter table). */
SHEAF_API sheaf_expr sheaf_row(sheaf_graph *g, sheaf_expr x, int64_t index);

/* A fused LSTM cell (PyTorch gate order i, f, g, o in W's 4H columns):
 *   z = x·W + b;  c = σ(z_f)·c_prev + σ(z_i)·tanh(z_g);  h = σ(z_o)·tanh(c)
 * x may be a sheaf_concat ([x_t ; h_prev] without a copy); c_prev may be
 * null for zeros. Runs as one GEMM with the cell's tail in its epilogue. */
SHEAF_API sheaf_status sheaf_lstm_cell(sheaf_graph *g, sheaf_param W, sheaf_param b, sheaf_expr x,
                                       sheaf_expr c_prev, sheaf_expr *h, sheaf_expr *c);

/* A fused binary TreeLSTM cell (Tai et al.'s N-ary cell, N = 2; W's 5H
 * columns in gate order i, f_l, f_r, o, u):
 *   z = x·W + b;  c = σ(z_i)·tanh(z_u) + σ(z_fl)·c_l + σ(z_fr)·c_r;
 *   h = σ(z_o)·tanh(c)
 * x = [h_l ; h_r] (may be a sheaf_concat: no copy). With c_l and c_r both
 * null it is the leaf cell: W has 3H columns, gates i, o, u, and
 * c = σ(z_i)·tanh(z_u). One graph node per cell: one GEMM per batch, the
 * gates' activations in its epilogue and the rest of the cell in its row
 * hook; its backward is one vectorised gates' gradient per batch. */
SHEAF_API sheaf_status sheaf_tree_lstm_cell(sheaf_graph *g, sheaf_param W, sheaf_param b, sheaf_expr x,
                                            sheaf_expr c_l, sheaf_expr c_r, sheaf_expr *h,
                                            sheaf_expr *c);

/* The value of an expression (flushes the graph first if needed; in a
 * build of sheaf_runner_run_fibers, waits for the batch's flush instead).
 * The pointer stays valid until the graph is reset or freed. */
typedef struct sheaf_value_view {
  const float *data;
  int rank;
  int64_t shape[2];
} sheaf_value_view;
SHEAF_API sheaf_status sheaf_value(sheaf_graph *g, sheaf_expr e, sheaf_value_view *out);

/* ---------------------------------------------------------- instruments */

typedef struct sheaf_graph_stats {
  uint64_t nodes;          /* operations built since creation */
  uint64_t batches;        /* kernel launches */
  uint64_t flushes;
  uint64_t rows_gathered;  /* input rows read through row pointers (no copy) */
  uint64_t bytes_copied;   /* bytes memcpy'd to gather inputs (0 is the aim) */
  uint64_t flops;          /* useful floating-point operations executed */
  uint64_t ns_build;       /* graph construction: from the first builder call after a
                              flush (or reset) to the next flush, the caller's own code in
                              between included, kernels run by policy none excluded */
  uint64_t ns_schedule;    /* in flush, outside kernels (grouping, argument setup) */
  uint64_t ns_kernels;     /* in kernels */
} sheaf_graph_stats;
SHEAF_API void sheaf_graph_get_stats(const sheaf_graph *g, sheaf_graph_stats *out);

/* Per-kernel batch sizes: for i < count, name (e.g. "affine W_iou") and
 * batches / nodes (average batch = nodes / batches). Returns count. */
SHEAF_API size_t sheaf_graph_kernel_stats(const sheaf_graph *g, size_t max, const char **names,
                                          uint64_t *batches, uint64_t *nodes);

/* Starts a new measurement window: zeroes the counters of
 * sheaf_graph_get_stats (a construction in progress counts from now), the
 * per-kernel counts of sheaf_graph_kernel_stats, and drops the timeline
 * collected so far. Expressions, values and the graph's error are kept. */
SHEAF_API sheaf_status sheaf_graph_stats_reset(sheaf_graph *g);

/* Writes the timeline collected so far (since creation or the last
 * sheaf_graph_stats_reset) to `path` as Chrome-trace / Perfetto JSON, and
 * keeps collecting. Needs a graph created with sheaf_graph_opts.trace_path
 * (else SHEAF_ERR_INVALID_ARG: nothing is collected); a file that cannot
 * be written gives SHEAF_ERR_IO naming the path and the reason. */
SHEAF_API sheaf_status sheaf_graph_write_trace(const sheaf_graph *g, const char *path);

/* --------------------------------------------------------------- runners */

/* A runner drives the model's per-instance code over many instances: for
 * each batch of instances it resets a graph, calls build(g, i, worker,
 * user) for every instance i of the batch (the code for ONE instance,
 * building on g), flushes, then calls read(g, i, worker, user) for each
 * (sheaf_value works there; read may be NULL). With several threads whole
 * batches run in parallel, each on one thread with a graph of its own, so
 * building and scheduling scale along with the kernels
 * (SHEAF_PARALLEL_BATCHES): build and read are then called concurrently for
 * different instances, and may only share read-only data or write to
 * per-instance or per-worker places (and a custom allocator must be
 * thread-safe).
 *
 * `worker` is the slot of the thread running the batch, 0 ..
 * sheaf_runner_threads(r) - 1: every call of a batch (its builds and its
 * reads) gets the same slot, and no two calls run at once with the same
 * slot, so per-thread state (scratch buffers, an interpreter) is an array
 * of sheaf_runner_threads(r) entries indexed by it, without a lock. One
 * batch at a time (SHEAF_PARALLEL_KERNELS, or 1 thread) is always slot 0.
 *
 *   static sheaf_status build(sheaf_graph *g, int64_t i, int worker, void *u) {
 *     ((my_run *)u)->out[i] = my_model(g, ((my_run *)u)->data, i);
 *     return sheaf_graph_status(g);
 *   }
 *   sheaf_runner *r;  sheaf_runner_create(m, NULL, &r);   // batches of 64, all threads
 *   sheaf_runner_run(r, 0, n, build, read, &run);
 */
typedef sheaf_status (*sheaf_instance_fn)(sheaf_graph *g, int64_t instance, int worker, void *user);

/* Fibers (sheaf_runner_run_fibers, below; x86-64 and AArch64, elsewhere
 * SHEAF_ERR_UNSUPPORTED): control flow that depends on computed values,
 * batched. Each build runs on a fiber of its own (a stack of 256 KiB or
 * sheaf_runner_set_fiber_stack's size, mmap'd with a guard page, pooled)
 * on the batch's worker thread. When a build calls sheaf_value on a node not yet
 * computed, its fiber is suspended instead of flushing; when every live
 * build of the batch is suspended (or has returned), the graph is flushed
 * ONCE, batched across all of them, and they resume in instance order:
 *
 *   static sheaf_status build(sheaf_graph *g, int64_t i, int worker, void *u) {
 *     sheaf_expr h = ...;
 *     for (int t = 0; t < max_steps; t++) {
 *       h = sheaf_tanh(g, sheaf_affine(g, W, h, b));
 *       sheaf_value_view v;
 *       sheaf_status st = sheaf_value(g, sheaf_max(g, h), &v); // waits here
 *       if (st) return st;
 *       if (v.data[0] > threshold) break;                        // per instance
 *     }
 *     ...
 *   }
 *
 * A build that never waits costs two context switches and no flush. A
 * failing build (its status, or an error recorded on the graph) stops the
 * run with that instance's error; the other suspended builds resume with
 * sheaf_value failing so they can return. With fibers, the error reported
 * is the failure met first in the batch's run order, which for builds that
 * fail after different numbers of waits need not be the smallest instance.
 * Code that recurses by input (an interpreter) must check the stack room
 * (the fiber's, not the thread's); overflowing the guard page is a SIGSEGV
 * of the process, never silent corruption. read runs after the batch's
 * final flush, on the worker's own stack. */

typedef enum sheaf_parallel {
  SHEAF_PARALLEL_AUTO = 0, /* batches when there are at least 2 per thread, else kernels */
  SHEAF_PARALLEL_BATCHES,  /* a batch per thread at a time, each on that thread alone */
  SHEAF_PARALLEL_KERNELS   /* one batch at a time, its kernels split over the threads */
} sheaf_parallel;

typedef struct sheaf_runner_opts {
  int64_t batch;           /* instances per flush; <= 0: 64 (any int64 up to INT64_MAX) */
  int threads;             /* threads of the context's pool to use; <= 0: all */
  sheaf_policy policy;     /* of every graph (default sheaf) */
  sheaf_parallel parallel; /* default AUTO */
  const char *trace_path;  /* non-NULL: one graph (kernels) collecting a Chrome-trace /
                              Perfetto timeline, written there when the runner is freed;
                              checked by sheaf_runner_create as sheaf_graph_opts' is */
} sheaf_runner_opts;

typedef struct sheaf_runner sheaf_runner;

/* opts NULL: batches of 64, all threads, policy sheaf, parallel AUTO. The
 * graphs are created on first use and kept (warm) across runs. */
SHEAF_API sheaf_status sheaf_runner_create(sheaf_model *m, const sheaf_runner_opts *opts, sheaf_runner **out);
SHEAF_API void sheaf_runner_free(sheaf_runner *r); /* NULL is fine */

/* Runs instances [first, first + count), one run at a time per runner (a
 * callback must not start another run on it). A failure (a callback's
 * status, a build error recorded on the graph, a flush error) stops the
 * run: batches after the failing one do not start, and the error returned,
 * also the context's last error, is the first failing instance's, as a
 * sequential run would report it: "instance 17: sheaf_add: shapes [4] and
 * [8] differ". */
SHEAF_API sheaf_status sheaf_runner_run(sheaf_runner *r, int64_t first, int64_t count, sheaf_instance_fn build,
                                        sheaf_instance_fn read, void *user);

/* sheaf_runner_run with each build on a fiber, so that a build may read a
 * value mid-way (sheaf_value) and branch on it: see "Fibers" above. The
 * batches, threads, worker slots, read and errors are sheaf_runner_run's. */
SHEAF_API sheaf_status sheaf_runner_run_fibers(sheaf_runner *r, int64_t first, int64_t count,
                                               sheaf_instance_fn build, sheaf_instance_fn read,
                                               void *user);

/* Bytes of each fiber stack of the runner's later runs (address space;
 * pages committed as touched): 0 for the default 256 KiB, at least 16 KiB
 * (smaller sizes are raised to it). Not during a run. */
SHEAF_API sheaf_status sheaf_runner_set_fiber_stack(sheaf_runner *r, size_t bytes);

/* How a run of `count` instances is parallelized (never AUTO; KERNELS with
 * a trace). */
SHEAF_API sheaf_parallel sheaf_runner_mode(const sheaf_runner *r, int64_t count);

/* The threads the runner uses (opts.threads, at most the context's; 1 for
 * NULL): its callbacks' worker slots are 0 .. this - 1. */
SHEAF_API int sheaf_runner_threads(const sheaf_runner *r);

/* Per-kernel batch counts summed over the runner's graphs, as
 * sheaf_graph_kernel_stats gives them for one graph. With names NULL: an
 * upper bound on the count (size the arrays with it); otherwise the number
 * of distinct kernels (those past max are left out). */
SHEAF_API size_t sheaf_runner_kernel_stats(const sheaf_runner *r, size_t max, const char **names,
                                           uint64_t *batches, uint64_t *nodes);

/* Fiber counters summed over the runner's workers since creation (any
 * pointer may be NULL): instances run on fibers, waits (suspensions in
 * sheaf_value) and the flushes that resumed them. */
SHEAF_API void sheaf_runner_fiber_counts(const sheaf_runner *r, uint64_t *instances, uint64_t *waits,
                                         uint64_t *flushes);

/* Counters summed over the runner's graphs (times: summed over threads). */
SHEAF_API void sheaf_runner_get_stats(const sheaf_runner *r, sheaf_graph_stats *out);
SHEAF_API sheaf_status sheaf_runner_stats_reset(sheaf_runner *r);

#endif /* SHEAF_GRAPH_H */
