/*
 * sheaf_kernel.h — kernels written in the `kernel` notation (docs/LANGUAGE.md,
 * "Kernels"), compiled to native code at run time and called from C or C++
 * (included by sheaf.h; do not include it alone). docs/CODEGEN.md has the
 * pipeline: check, lower to the loop IR, default schedule for the CPU's
 * instruction set (SHEAF_ISA lowers it), C emission, the system C compiler
 * (SHEAF_CC, else cc) and the on-disk cache (SHEAF_CACHE_DIR, else
 * $XDG_CACHE_HOME/sheaf): a second compile of the same kernel, in this
 * process or another, does not run the compiler.
 *
 *   const char *src = "kernel mm(A: f32[M, K], B: f32[K, N]) -> f32[M, N] {\n"
 *                     "  C(m, n) +=! A(m, k) * B(k, n)\n}\n";
 *   sheaf_kernel *k;
 *   if (sheaf_kernel_compile(ctx, src, strlen(src), "mm", &k)) ... sheaf_ctx_last_error(ctx)
 *   int64_t sa[] = {M, K}, sb[] = {K, N}, sc[] = {M, N};
 *   sheaf_kernel_arg args[] = {{SHEAF_KERNEL_F32, A, M * K, 2, sa},
 *                              {SHEAF_KERNEL_F32, B, K * N, 2, sb},
 *                              {SHEAF_KERNEL_F32, C, M * N, 2, sc}};   // the output
 *   sheaf_kernel_run(k, args, 3);
 *   sheaf_kernel_free(k);
 *
 * Arguments: the kernel's inputs in parameter order, then its outputs in
 * result order. Data is packed (row-major, no strides); a ragged tensor
 * (`q: f32[B, L(b), D]` with `L: i32[B]` an input) holds its sequences one
 * after another (docs/LANGUAGE.md, "Kernels": the packed layout), its
 * lengths being the values of the i32 input. Sizes (N, D, ...) are bound
 * from the inputs' shapes; every input's rank, dimensions and element count
 * and every output's element count are checked against them (the error
 * names the argument). An output's shape is not read (rank 0 / NULL is
 * fine); its element count is sheaf_kernel_output_numel's. A call repeated
 * at the same shapes is cheaper prepared once: sheaf_kernel_plan_make below.
 */
#ifndef SHEAF_KERNEL_H
#define SHEAF_KERNEL_H

typedef struct sheaf_kernel sheaf_kernel;

typedef enum sheaf_kernel_dtype {
  SHEAF_KERNEL_F32 = 0, /* float */
  SHEAF_KERNEL_I32 = 1  /* int32_t (lengths of ragged tensors) */
} sheaf_kernel_dtype;

typedef struct sheaf_kernel_arg {
  sheaf_kernel_dtype dtype;
  void *data;           /* inputs: read; outputs: written. Must not overlap each other */
  size_t numel;         /* elements at data */
  int rank;
  const int64_t *shape; /* rank entries; the entry of a ragged dimension is not read */
} sheaf_kernel_arg;

/* Compiles kernel `name` (NULL: the source's first kernel) of a source that
 * holds `kernel` and `size` declarations only. Errors: SHEAF_ERR_PARSE etc.
 * with "kernel:LINE:COL: error: ..." for the source; SHEAF_ERR_NOT_FOUND
 * for no such kernel or no C compiler; SHEAF_ERR_UNSUPPORTED for a kernel
 * the code generator cannot express yet. */
SHEAF_API sheaf_status sheaf_kernel_compile(sheaf_ctx *ctx, const char *source, size_t len,
                                            const char *name, sheaf_kernel **out);
SHEAF_API void sheaf_kernel_free(sheaf_kernel *k); /* NULL is fine */
/* Runs k on the context's thread pool. n_args = inputs + outputs. */
SHEAF_API sheaf_status sheaf_kernel_run(sheaf_kernel *k, const sheaf_kernel_arg *args, int n_args);
/* Declares input `input` (0-based) a weight of version `version`: until the
 * next call, runs may keep a prepared (packed) copy of its data, keyed on
 * (data pointer, shape, version), instead of preparing it on every run (a
 * generated GEMM reads a weight in panels: docs/CODEGEN.md, "Weights").
 * The caller promises that the data at a pointer it passes does not change
 * while the version stays the same: change the version (or pass 0, the
 * default: prepared again on every run) after writing to it. Errors:
 * SHEAF_ERR_INVALID_ARG for a NULL k or an input out of range. */
SHEAF_API sheaf_status sheaf_kernel_set_weight_version(sheaf_kernel *k, int input, uint64_t version);
/* Loads tuning records (a file `sheaf tune` wrote: plain text, one record
 * a line; docs/CODEGEN.md, "Tuner") into ctx: kernels compiled on ctx from
 * then on run, for sizes in a record's shape class, the schedule the
 * record chose (compiled once per distinct schedule, on first use). The
 * cache directory's records (SHEAF_CACHE_DIR, where `sheaf tune` stores
 * them) are used without this call; a loaded record wins over a cached one
 * for the same class. Records made for another version of the kernel or
 * another compiler are ignored with a warning through the log callback.
 * Errors: SHEAF_ERR_PARSE with "FILE:LINE: ..." for a malformed file
 * (nothing is loaded), SHEAF_ERR_IO / SHEAF_ERR_NOT_FOUND when it cannot be
 * read. Not concurrently with compiles on the same ctx. */
SHEAF_API sheaf_status sheaf_kernel_load_tuning(sheaf_ctx *ctx, const char *path);
/* Which tuning records chose the schedule of runs of kernels compiled on
 * ctx (sheaf_kernel_run and batched kernel calls alike), one entry per
 * record that chose at least one run: the kernel, the record's "FILE:LINE"
 * (a --tuning file or the cache directory's), its shape class
 * ("M:64,K:256"), its knobs ("mr=3 nr=32", or "default": the record kept
 * the default schedule) and the runs it chose. Strings live as long as
 * ctx. Fills up to cap entries of out (may be NULL) and returns how many
 * there are. */
typedef struct sheaf_kernel_tuning_use {
  const char *kernel, *record, *shape_class, *knobs;
  uint64_t runs;
} sheaf_kernel_tuning_use;
SHEAF_API size_t sheaf_kernel_tuning_stats(sheaf_ctx *ctx, size_t cap, sheaf_kernel_tuning_use *out);
/* The number of inputs and outputs (0 for NULL). */
SHEAF_API int sheaf_kernel_n_inputs(const sheaf_kernel *k);
SHEAF_API int sheaf_kernel_n_outputs(const sheaf_kernel *k);
/* The element count output r must have for these inputs (n_inputs of them). */
SHEAF_API sheaf_status sheaf_kernel_output_numel(sheaf_kernel *k, const sheaf_kernel_arg *inputs,
                                                 int n_inputs, int r, size_t *numel);

/* A prepared call (a plan, as cuDNN's or cuBLASLt's): the checks of
 * sheaf_kernel_run done once for fixed argument shapes, then runs with new
 * data pointers that check only what can change. sheaf_kernel_plan_make
 * checks args as sheaf_kernel_run does (count, dtypes, ranks, shapes,
 * element counts, the sizes they bind, with the same errors), picks the
 * tuned variant for those sizes (sheaf_kernel_load_tuning), and prepares
 * what the kernel needs besides its arguments: its scratch buffers, the
 * offsets of ragged tensors, a buffer per packed weight, its temporaries.
 * args' data pointers are not read, except those of the lengths of ragged
 * tensors (the i32 inputs a ragged dimension names: their values are part
 * of the shape); the others may be NULL at make.
 *
 *   sheaf_kernel_plan *p;
 *   if (sheaf_kernel_plan_make(k, args, 4, &p)) ... sheaf_ctx_last_error(ctx)
 *   for (int t = 0; t < T; t++) {
 *     void *data[] = {x[t], gamma, beta, y[t]};   // the planned shapes, new data
 *     if (sheaf_kernel_plan_run(p, data, 4)) ... sheaf_ctx_last_error(ctx)
 *   }
 *   sheaf_kernel_plan_free(p);
 *
 * A run takes data[i] for argument i of args (inputs, then outputs; same
 * shapes and element counts as planned) and checks: n_data, NULL pointers
 * (allowed only where the element count is 0), and each length input's
 * values against the plan's (another length is another shape:
 * SHEAF_ERR_SHAPE, make a new plan). Errors are SHEAF_ERR_INVALID_ARG
 * naming the argument, in sheaf_ctx_last_error of k's context (a NULL plan:
 * SHEAF_ERR_INVALID_ARG alone).
 * Weights: the plan packs a weight the kernel reads packed (docs/CODEGEN.md,
 * "Weights") into a buffer of its own on its first run, and again on any
 * run whose data pointer for it or whose version (sheaf_kernel_set_weight_
 * version on k, read at every run) differs from the packed copy's; version
 * 0 packs on every run. A stale copy is never read, under the promise of
 * sheaf_kernel_set_weight_version (data unchanged while the version is).
 * Threads: a plan runs on one thread at a time (it holds the run's argument
 * table and buffers): make one plan per thread. Plans of one kernel, and
 * sheaf_kernel_run and sheaf_kernel_set_weight_version on it, may run
 * concurrently. What invalidates a plan: only freeing k (free its plans
 * first); the variant it picked lives as long as k. */
typedef struct sheaf_kernel_plan sheaf_kernel_plan;
SHEAF_API sheaf_status sheaf_kernel_plan_make(sheaf_kernel *k, const sheaf_kernel_arg *args, int n_args,
                                              sheaf_kernel_plan **out);
SHEAF_API sheaf_status sheaf_kernel_plan_run(sheaf_kernel_plan *p, void *const *data, int n_data);
SHEAF_API void sheaf_kernel_plan_free(sheaf_kernel_plan *p); /* NULL is fine */

/* The kernel as an op of graph g, batched by the runtime like any other
 * (docs/CODEGEN.md, "Batched use"): inputs ins[0 .. n_in) (n_in =
 * sheaf_kernel_n_inputs) are vectors or matrices whose shapes are the
 * kernel's parameter shapes (a rank-1 parameter takes a vector, rank 2 a
 * matrix; sizes are bound per call, so calls of one kernel with different
 * sizes still share a batch); returns its output, whose shape the kernel's
 * range inference gives. The kernel must have f32 inputs of rank 1 or 2 and
 * one output of rank 1 or 2 (else SHEAF_ERR_UNSUPPORTED); a shape mismatch
 * is SHEAF_ERR_SHAPE naming the argument. Each batch of calls is one call
 * of the generated batch loop (parallel over the graph's threads when it is
 * large). k must outlive the graph's use of the node (its flush). */
SHEAF_API sheaf_expr sheaf_kernel_call(sheaf_graph *g, sheaf_kernel *k, int n_in, const sheaf_expr *ins);

#endif
