/*
 * kernel_api.h — internals of the public kernel API (include/sheaf_kernel.h,
 * kernel_api.c): compiling with explicit options (the tests pick the ISA,
 * the cache directory and the compiler) and what a compile did.
 */
#ifndef SH_CODEGEN_KERNEL_API_H
#define SH_CODEGEN_KERNEL_API_H

#include "codegen/jit.h"
#include "codegen/lir_emit.h"
#include "codegen/lir_sched.h"
#include "codegen/lower.h"
#include "lang/kernel.h"
#include "runtime/runtime.h"

struct sh_tune_rec;

/* The generated packer of a weight input and its packed size (emit_c's
 * sheafk_NAME_pack_W / _packed_size_W: docs/CODEGEN.md, "Weights"). */
typedef int64_t (*sh_pack_size_fn)(const int64_t *sizes);
typedef void (*sh_pack_fn)(const int64_t *sizes, const float *src, int64_t ld, int trans, float *dst);

typedef struct sh_kernel_opts {
  bool isa_set;          /* false: sheaf_cpu_isa() */
  sheaf_isa isa;
  const char *cache_dir; /* NULL: the JIT's default */
  const char *cc;        /* NULL: the JIT's default */
  const char *file;      /* name in diagnostics; NULL: "kernel" */
  bool eager;            /* emit the C on every compile and key the cache on it
                            (the default keys on the source: kernel_api.c) */
  const sh_sched_opts *sched; /* the default schedule's knobs (NULL: the ISA's; the tuner) */
  bool no_tuning;        /* ignore tuning records (the tuner's own candidates) */
  bool no_few_rows;      /* never run the few-rows variant (kernel_fewrows.c; benches, tests) */
} sh_kernel_opts;

sheaf_status sh_kernel_compile_opts(sheaf_ctx *ctx, const char *source, size_t len, const char *name,
                                    const sh_kernel_opts *opts, sheaf_kernel **out);
/* The checked kernel, and the JIT's statistics of its compile (the
 * compiler ran: stats.compiles == 1). */
const sh_kernel *sh_kernel_of(const sheaf_kernel *k);
/* Its lowered argument layout, batched entry, context and the descriptor
 * the runtime's kernel-call nodes point to (kernel_call.c). */
const sh_lower_info *sh_kernel_info(const sheaf_kernel *k);
/* The error of a generated entry that returned 2 (a gather index value out
 * of range): finds and names the value (sh_kernel_gather_check). data: the
 * entry's argument table (inputs first; each entry's first field the data
 * pointer), stride bytes apart. */
sheaf_status sh_kernel_index_error(sheaf_ctx *ctx, const sh_kernel *k, const int64_t *sizes,
                                   const void *const *data, size_t stride);
sk_batch_fn sh_kernel_batch_fn(const sheaf_kernel *k);
const sh_kcall_desc *sh_kernel_call_desc(const sheaf_kernel *k);
sheaf_ctx *sh_kernel_ctx(const sheaf_kernel *k);
sk_entry_fn sh_kernel_entry_fn(const sheaf_kernel *k);
/* The services for a runtime call of k (kernel_call.c): the context's pool
 * (at most threads), and the temporaries from the blocks k keeps across runs
 * (as sheaf_kernel_run's), so a batch's temporaries are not fresh pages. */
void sh_kernel_abi(sheaf_kernel *k, int threads, sk_abi *abi);
/* The size of k that indexes independent rows (kernel_rows.c): calls that
 * differ only in it run as one call over their stacked rows; -1: none. */
int sh_kernel_row_size(const sh_kernel *k);
/* Whether sheaf_kernel_run(k, args, n_args) would take the fast path of
 * repeated calls (the kept signature of an earlier checked call matches;
 * kernel_api.c). Tests. */
bool sh_kernel_fast_match(sheaf_kernel *k, const sheaf_kernel_arg *args, int n_args);
/* Runs a batch of kernel-call nodes (sh_kcall_desc.run; kernel_call.c). */
sheaf_status sh_kcall_run(sheaf_graph *g, const sh_kcall_desc *d, const uint32_t *ids, uint32_t n);
void sh_kernel_jit_stats(const sheaf_kernel *k, sh_jit_stats *out);
/* Whether the generated code reads input i packed (a weight: kernel_api.c),
 * and how many times it has been packed (runs and batched calls). */
bool sh_kernel_input_packed(const sheaf_kernel *k, int i);
/* Input i (a weight the kernel reads packed) in the run path's one kept
 * copy per input (sheaf_kernel_run's; benches and tests call it directly):
 * *out is its packed copy under `sizes` (d0 x d1 floats at data, rows d1
 * apart). version != 0 keys the kernel's kept copy (data, version, shape):
 * packed once while it holds; *held is then set and the copy stays until
 * sh_kernel_weight_put. version 0 (or a kept copy in use by another run):
 * packed into `scratch`. */
sheaf_status sh_kernel_weight_get(sheaf_kernel *k, int i, const int64_t *sizes, const float *data,
                                  int64_t d0, int64_t d1, uint64_t version, sh_arena *scratch,
                                  const float **out, bool *held);
void sh_kernel_weight_put(sheaf_kernel *k, int i);
/* The same for the runtime's batched calls (kernel_call.c), from the kernel's
 * kept copies of that path: one per (input, data, shape, version), several
 * per kernel (a weight per layer), version 0 packed into scratch. *slot: the
 * copy this batch holds (release with sh_kernel_call_weight_put), or -1. */
sheaf_status sh_kernel_call_weight(sheaf_kernel *k, int i, const int64_t *sizes, const float *data, int64_t d0,
                                   int64_t d1, uint64_t version, sh_arena *scratch, const float **out, int *slot);
void sh_kernel_call_weight_put(sheaf_kernel *k, int slot);
/* The same copies for plans (kernel_plan.c: plans of one kernel, of any
 * row count, share them): version 0, or no slot free of readers, packs
 * into `own` (the plan's buffer of the packed size; NULL: SHEAF_ERR_NOMEM
 * then). *packed: this call packed. Release *slot (>= 0) with
 * sh_kernel_call_weight_put after the run. */
sheaf_status sh_kernel_plan_weight(sheaf_kernel *k, int i, const int64_t *sizes, const float *data, int64_t d0,
                                   int64_t d1, uint64_t version, float *own, const float **out, int *slot,
                                   bool *packed);
long sh_kernel_pack_count(const sheaf_kernel *k, int i);
/* Tuning (docs/CODEGEN.md, "Tuner"): the records k picks from by shape
 * class, and the variants it compiled for them (one per distinct opts). */
int sh_kernel_n_tuned(const sheaf_kernel *k);
/* The kernel to run at bound `sizes`: the variant of the record whose shape
 * class holds them (compiled on first use), else k itself. */
sheaf_status sh_kernel_pick(sheaf_kernel *k, const int64_t *sizes, sheaf_kernel **out);
int sh_kernel_n_variants(const sheaf_kernel *k);
/* The few-rows variant's knobs (kernel_fewrows.c): true and *o set when a
 * GEMM of `rows` rows at `isa` runs faster with its own tile than with the
 * default one (a wide 1- or 2-row tile: docs/CODEGEN.md, "Few rows"). */
bool sh_kernel_few_rows_opts(sheaf_isa isa, int64_t rows, sh_sched_opts *o);

/* Plans (kernel_plan.c). Every check of sheaf_kernel_run on args but the
 * data pointers of inputs other than lengths and of outputs: the sizes
 * they bind (sizes: 64 entries), the kernel to run (*V: k or a tuned
 * variant) and the record that chose it (*rec, counted per run; NULL). */
sheaf_status sh_kernel_plan_bind(sheaf_kernel *k, const sheaf_kernel_arg *args, int n_args, int64_t *sizes,
                                 sheaf_kernel **V, struct sh_tune_rec **rec);
/* Input i's packer when k reads it packed (false: read as given). */
bool sh_kernel_weight_fns(const sheaf_kernel *k, int i, sh_pack_size_fn *size, sh_pack_fn *pack);
/* A counter every sheaf_kernel_set_weight_version on k bumps; the versions
 * of k's inputs (v: n_inputs entries) and the counter they go with. */
uint64_t sh_kernel_weight_epoch(sheaf_kernel *k);
uint64_t sh_kernel_weight_versions(sheaf_kernel *k, uint64_t *v);
/* Counts k's live plans (+1 at make, -1 at free; sheaf_kernel_free warns
 * through the log callback when some are left). */
void sh_kernel_plan_count(sheaf_kernel *k, int delta);
/* Whether input i is the lengths of a ragged dimension (its values are
 * part of the shape). */
bool sh_kernel_input_is_length(const sheaf_kernel *k, int i);
/* A plan's kernel that runs (tests: the tuned variant it picked) and how
 * many times it packed input i. */
sheaf_kernel *sh_kernel_plan_kernel(const sheaf_kernel_plan *p);
long sh_kernel_plan_packs(const sheaf_kernel_plan *p, int i);
sheaf_kernel *sh_kernel_variant(const sheaf_kernel *k, int i);

#endif
