/*
 * sheaf.h — the public C API of Sheaf, a compiler and runtime for dynamic
 * deep-learning models.
 *
 * Conventions (everywhere in this header):
 *   - Every fallible call returns a sheaf_status; results come back through
 *     out-parameters. On failure the context's last error holds a message
 *     (sheaf_ctx_last_error), e.g. "w.safetensors: tensor 'emb': data_offsets
 *     [0, 4096) exceed the data region (1024 bytes)".
 *   - The library never calls exit() and never prints; install a log callback
 *     to see diagnostics.
 *   - Objects are opaque handles with create/free pairs. A context is used by
 *     one thread at a time; different contexts are independent.
 *   - NULL, one rule for every function here and in sheaf_graph.h and
 *     sheaf_program.h (never a crash):
 *       - free functions (sheaf_*_free, sheaf_st_close) accept NULL;
 *       - a query (a function that returns a value, not a status) given a
 *         NULL object returns 0, NULL, -1 for an index or an offset, or
 *         SHEAF_DTYPE_COUNT for a dtype, and zeroes the struct it fills
 *         (sheaf_graph_get_stats, sheaf_encoder_get_config); an optional
 *         out-pointer left NULL is skipped (stated where it applies);
 *       - a function returning sheaf_status given NULL for a required
 *         pointer returns SHEAF_ERR_INVALID_ARG, with a message naming the
 *         argument ("sheaf_tensor_slice: tensor is NULL") when a context is
 *         at hand (the ctx argument, or the object's own); with a NULL
 *         context or object there is none to hold it, and the status alone
 *         says it;
 *       - a graph builder given a NULL graph returns a null expression; one
 *         given a NULL array or shape records SHEAF_ERR_INVALID_ARG on the
 *         graph, naming the argument ("sheaf_concat: xs is NULL");
 *       - void functions given a NULL object do nothing.
 *     Pointers documented as optional ("may be NULL") are the exceptions.
 *   - Usable from C++ unchanged.
 */
#ifndef SHEAF_H
#define SHEAF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHEAF_VERSION_MAJOR 0
#define SHEAF_VERSION_MINOR 1
#define SHEAF_VERSION_PATCH 0
#define SHEAF_VERSION_STRING "0.1.0"

/* Marks the library's exported functions: libsheaf.so is built with
 * -fvisibility=hidden, so these, the sheaf_* functions of this header,
 * sheaf_graph.h and sheaf_program.h, are all it exports. */
#if defined(__GNUC__) || defined(__clang__)
#define SHEAF_API __attribute__((visibility("default")))
#else
#define SHEAF_API
#endif

/* The library's version string ("0.1.0"); matches SHEAF_VERSION_STRING of
 * the header it was built with. */
SHEAF_API const char *sheaf_version(void);

/* ---------------------------------------------------------------- status */

typedef enum sheaf_status {
  SHEAF_OK = 0,
  SHEAF_ERR_NOMEM,         /* an allocation failed */
  SHEAF_ERR_INVALID_ARG,   /* an API argument (or CLI flag) is invalid */
  SHEAF_ERR_IO,            /* open/read/write/mmap of a file failed */
  SHEAF_ERR_PARSE,         /* malformed text input; message has file:line:col */
  SHEAF_ERR_FORMAT,        /* malformed binary input (e.g. safetensors) */
  SHEAF_ERR_SHAPE,         /* shapes do not agree */
  SHEAF_ERR_NOT_FOUND,     /* a named item (tensor, parameter) is missing */
  SHEAF_ERR_UNSUPPORTED,   /* valid request that this build cannot do */
  SHEAF_ERR_INTERNAL       /* a bug in Sheaf: please report it */
} sheaf_status;

/* A stable lower-case name for a status ("ok", "out of memory", ...). */
SHEAF_API const char *sheaf_status_str(sheaf_status status);

/* ------------------------------------------------------------- allocator */

/* A caller-supplied allocator. alloc returns memory aligned to `align` (a
 * power of two, at most 4096) or NULL on failure; free receives the same size
 * that was passed to alloc. Both must be callable from any thread. */
typedef struct sheaf_allocator {
  void *(*alloc)(void *user, size_t size, size_t align);
  void (*free)(void *user, void *ptr, size_t size);
  void *user;
} sheaf_allocator;

/* ------------------------------------------------------------------- log */

typedef enum sheaf_log_level {
  SHEAF_LOG_ERROR = 0,
  SHEAF_LOG_WARN = 1,
  SHEAF_LOG_INFO = 2,
  SHEAF_LOG_DEBUG = 3
} sheaf_log_level;

/* Receives one complete message (no trailing newline). */
typedef void (*sheaf_log_fn)(void *user, sheaf_log_level level, const char *msg);

/* --------------------------------------------------------------- context */

typedef struct sheaf_ctx sheaf_ctx;

typedef struct sheaf_ctx_options {
  const sheaf_allocator *allocator; /* NULL: the C library's allocator */
  sheaf_log_fn log;                 /* NULL: no output at all */
  void *log_user;
  sheaf_log_level log_level;        /* messages above this level are dropped */
  int threads;                      /* compute threads, caller included;
                                       0 = number of online CPUs */
  uint64_t memory_limit;            /* the memory budget: bytes the context may hold
                                       at once (graphs, values, parameters, buffers);
                                       a tensor or parameter sized beyond it is
                                       refused before anything is allocated, and an
                                       allocation past it fails with a message.
                                       0 = SHEAF_MEMORY_LIMIT from the environment
                                       (e.g. "8G"), else the physical memory */
} sheaf_ctx_options;

/* Creates a context. opts may be NULL (defaults). Fails with
 * SHEAF_ERR_INVALID_ARG when SHEAF_ISA holds an unknown value; then *out is
 * still NULL and, where err_buf is not NULL, the message is copied there. */
SHEAF_API sheaf_status sheaf_ctx_create(const sheaf_ctx_options *opts, sheaf_ctx **out,
                                        char *err_buf, size_t err_buf_size);
SHEAF_API void sheaf_ctx_free(sheaf_ctx *ctx);

/* The message of the last failed call on this context ("" if none). */
SHEAF_API const char *sheaf_ctx_last_error(const sheaf_ctx *ctx);
SHEAF_API sheaf_status sheaf_ctx_last_status(const sheaf_ctx *ctx);
SHEAF_API void sheaf_ctx_clear_error(sheaf_ctx *ctx);

/* Number of compute threads of the context's pool (caller included). */
SHEAF_API int sheaf_ctx_threads(const sheaf_ctx *ctx);

/* The memory budget of sheaf_ctx_options.memory_limit, in bytes: a size
 * beyond it fails before anything is allocated, with the size and the
 * budget in the message; so does any allocation that would make the
 * context hold more. */
SHEAF_API uint64_t sheaf_ctx_memory_limit(const sheaf_ctx *ctx);

/* ------------------------------------------------------------------- cpu */

/* Instruction-set levels a kernel may be specialised for. The environment
 * variable SHEAF_ISA=scalar|avx2|avx512 lowers the level the library uses
 * (never raises it above what the CPU and OS support). */
typedef enum sheaf_isa {
  SHEAF_ISA_SCALAR = 0, /* portable C */
  SHEAF_ISA_AVX2 = 1,   /* AVX2 + FMA */
  SHEAF_ISA_AVX512 = 2  /* AVX-512 F + BW + VL + DQ */
} sheaf_isa;

SHEAF_API sheaf_isa sheaf_cpu_isa(void);      /* level in use (after SHEAF_ISA) */
SHEAF_API sheaf_isa sheaf_cpu_isa_host(void); /* best level the host supports */
SHEAF_API const char *sheaf_isa_name(sheaf_isa isa);

/* ----------------------------------------------------------------- timer */

/* Monotonic time in nanoseconds (arbitrary origin). */
SHEAF_API uint64_t sheaf_time_ns(void);

/* ---------------------------------------------------------------- dtypes */

/* Element types. F32 and I32 are the compute types; the others exist so that
 * any safetensors file can be described (and bf16 compute can come later). */
typedef enum sheaf_dtype {
  SHEAF_F32 = 0,
  SHEAF_I32,
  SHEAF_BF16,
  SHEAF_F16,
  SHEAF_F64,
  SHEAF_I64,
  SHEAF_I16,
  SHEAF_I8,
  SHEAF_U8,
  SHEAF_U16,
  SHEAF_U32,
  SHEAF_U64,
  SHEAF_BOOL,
  SHEAF_F8_E4M3,
  SHEAF_F8_E5M2,
  SHEAF_DTYPE_COUNT
} sheaf_dtype;

SHEAF_API size_t sheaf_dtype_size(sheaf_dtype dtype);      /* bytes per element */
SHEAF_API const char *sheaf_dtype_name(sheaf_dtype dtype); /* safetensors spelling: "F32" */

/* --------------------------------------------------------------- tensors */

/* A dense strided tensor: a view (dtype, shape, strides in elements, offset)
 * over reference-counted storage. Views (slice, select, permute, reshape)
 * share storage and never copy. Rank is unbounded. */
typedef struct sheaf_tensor sheaf_tensor;

/* A new contiguous, zero-filled tensor; data is 64-byte aligned. rank may be
 * 0 (a scalar). Every extent must be >= 0. */
SHEAF_API sheaf_status sheaf_tensor_create(sheaf_ctx *ctx, sheaf_dtype dtype, int rank,
                                           const int64_t *shape, sheaf_tensor **out);

/* Wraps caller memory (no copy). strides may be NULL (row-major contiguous);
 * strides whose last element lies past 2^63 bytes are refused.
 * release(release_user, data) is called when the last view is freed; it may
 * be NULL when the caller keeps the memory alive longer than every view.
 * When the call fails, release is never called: the memory stays the
 * caller's. */
SHEAF_API sheaf_status sheaf_tensor_wrap(sheaf_ctx *ctx, sheaf_dtype dtype, int rank,
                                         const int64_t *shape, const int64_t *strides,
                                         void *data, void (*release)(void *, void *),
                                         void *release_user, sheaf_tensor **out);

SHEAF_API void sheaf_tensor_free(sheaf_tensor *t); /* NULL is fine */

SHEAF_API sheaf_dtype sheaf_tensor_dtype(const sheaf_tensor *t);
SHEAF_API int sheaf_tensor_rank(const sheaf_tensor *t);
SHEAF_API const int64_t *sheaf_tensor_shape(const sheaf_tensor *t);
SHEAF_API const int64_t *sheaf_tensor_strides(const sheaf_tensor *t); /* in elements */
SHEAF_API int64_t sheaf_tensor_numel(const sheaf_tensor *t);
SHEAF_API int sheaf_tensor_is_contiguous(const sheaf_tensor *t);
/* Address of element [0, 0, ...]. */
SHEAF_API void *sheaf_tensor_data(const sheaf_tensor *t);

/* t[..., start:stop:step, ...] along `axis`; negative start/stop count from
 * the end (Python rules, clamped); step > 0. Any int64 values are exact
 * (INT64_MIN..INT64_MAX bounds, a step of INT64_MAX: one element). */
SHEAF_API sheaf_status sheaf_tensor_slice(sheaf_ctx *ctx, const sheaf_tensor *t, int axis,
                                          int64_t start, int64_t stop, int64_t step,
                                          sheaf_tensor **out);
/* t[..., index, ...]: removes `axis`. Negative index counts from the end. */
SHEAF_API sheaf_status sheaf_tensor_select(sheaf_ctx *ctx, const sheaf_tensor *t, int axis,
                                           int64_t index, sheaf_tensor **out);
/* Axes reordered: out.shape[i] = t.shape[perm[i]]. */
SHEAF_API sheaf_status sheaf_tensor_permute(sheaf_ctx *ctx, const sheaf_tensor *t,
                                            const int *perm, sheaf_tensor **out);
/* A view with a new shape (one extent may be -1). Fails with
 * SHEAF_ERR_SHAPE when the layout cannot be viewed that way (use
 * sheaf_tensor_contiguous first). */
SHEAF_API sheaf_status sheaf_tensor_reshape(sheaf_ctx *ctx, const sheaf_tensor *t, int rank,
                                            const int64_t *shape, sheaf_tensor **out);
/* A contiguous copy of any view. */
SHEAF_API sheaf_status sheaf_tensor_contiguous(sheaf_ctx *ctx, const sheaf_tensor *t,
                                               sheaf_tensor **out);

/* ----------------------------------------------------------- safetensors */

/* A safetensors file, memory-mapped and fully validated at open: header size,
 * JSON syntax, dtypes, shapes, and data offsets (in bounds, no overlap, no
 * holes). Tensors are zero-copy views into the mapping and stay valid after
 * sheaf_st_close (the mapping lives until its last view is freed). */
typedef struct sheaf_st_file sheaf_st_file;

SHEAF_API sheaf_status sheaf_st_open(sheaf_ctx *ctx, const char *path, sheaf_st_file **out);
/* Same checks over a caller buffer that must outlive the file object and its
 * views (name is used in messages). */
SHEAF_API sheaf_status sheaf_st_open_memory(sheaf_ctx *ctx, const void *data, size_t size,
                                            const char *name, sheaf_st_file **out);
SHEAF_API void sheaf_st_close(sheaf_st_file *f);

SHEAF_API size_t sheaf_st_count(const sheaf_st_file *f);
/* Tensors in file order of their data offsets. */
SHEAF_API const char *sheaf_st_name(const sheaf_st_file *f, size_t i);
SHEAF_API sheaf_dtype sheaf_st_dtype(const sheaf_st_file *f, size_t i);
SHEAF_API int sheaf_st_rank(const sheaf_st_file *f, size_t i);
SHEAF_API const int64_t *sheaf_st_shape(const sheaf_st_file *f, size_t i);
SHEAF_API size_t sheaf_st_nbytes(const sheaf_st_file *f, size_t i);
SHEAF_API const void *sheaf_st_bytes(const sheaf_st_file *f, size_t i);
/* Index of a tensor by name, or -1. */
SHEAF_API long sheaf_st_find(const sheaf_st_file *f, const char *name);
/* "__metadata__" entries (string to string). */
SHEAF_API size_t sheaf_st_metadata_count(const sheaf_st_file *f);
SHEAF_API const char *sheaf_st_metadata_key(const sheaf_st_file *f, size_t i);
SHEAF_API const char *sheaf_st_metadata_value(const sheaf_st_file *f, size_t i);
/* A tensor view by name (zero-copy when its data is aligned for its dtype,
 * otherwise an aligned copy). SHEAF_ERR_NOT_FOUND names the missing tensor. */
SHEAF_API sheaf_status sheaf_st_tensor(sheaf_ctx *ctx, const sheaf_st_file *f, const char *name,
                                       sheaf_tensor **out);

/* Writes tensors (any strided views) to a safetensors file, in the given
 * order, with the header padded to 8 bytes as the reference writer does.
 * metadata is n_meta (key, value) pairs, may be NULL. Written to a temporary
 * file and renamed, so a failed write never leaves a truncated file. */
SHEAF_API sheaf_status sheaf_st_write(sheaf_ctx *ctx, const char *path, size_t n,
                                      const char *const *names,
                                      const sheaf_tensor *const *tensors, size_t n_meta,
                                      const char *const *meta_kv);

/* The auto-batching runtime's define-by-run API (models, graphs, expressions). */
#include "sheaf_graph.h"
/* Models written in the model language, loaded and run from C. */
#include "sheaf_program.h"
/* Kernels in the `kernel` notation, compiled to native code at run time. */
#include "sheaf_kernel.h"

/* ======================================== ragged tensors and encoder (CoRa) */
/* (src/ragged/; docs/RAGGED.md has the representation and measured figures) */

/* A ragged tensor: an outer batch dimension of `batch` sequences, then
 * `rank` per-sequence dimensions, each either a fixed extent or
 * SHEAF_RAGGED_DIM, whose extent for sequence b is lens[b] (token embeddings
 * are {SHEAF_RAGGED_DIM, d}; attention scores {heads, SHEAF_RAGGED_DIM,
 * SHEAF_RAGGED_DIM}). Values are stored packed, sequence after sequence;
 * offsets are prefix sums (O(1) access, no per-element indices). In storage
 * each ragged extent is padded to a multiple of `storage_tile`, and the
 * whole fused batch×length dimension once, on the sum, to a multiple of
 * `bulk_tile` rows (a row: the dense dimensions after the last ragged one).
 * Padding is zero-filled. Lengths may be 0 (the sequence holds nothing).
 * A ragged tensor holds a reference to the same storage type as dense
 * tensors, so per-sequence views are ordinary sheaf_tensors. */
typedef struct sheaf_ragged sheaf_ragged;

#define SHEAF_RAGGED_DIM (-1)

typedef struct sheaf_ragged_opts {
  int64_t storage_tile; /* 0 or 1: no per-sequence padding */
  int64_t bulk_tile;    /* 0 or 1: no padding of the total */
} sheaf_ragged_opts;   /* tiles whose padded sizes overflow int64: SHEAF_ERR_NOMEM */

/* A zero-filled ragged tensor. lens has `batch` entries (>= 0); dims has
 * `rank` entries (1..8), at least one SHEAF_RAGGED_DIM. opts may be NULL. */
SHEAF_API sheaf_status sheaf_ragged_create(sheaf_ctx *ctx, sheaf_dtype dtype, int64_t batch,
                                           const int64_t *lens, int rank, const int64_t *dims,
                                           const sheaf_ragged_opts *opts, sheaf_ragged **out);
/* From a padded dense tensor [batch, P1, P2, ...] and lens: dims (rank =
 * padded rank - 1) marks the ragged axes with SHEAF_RAGGED_DIM and repeats
 * the dense extents; NULL means "axis 1 is ragged, the rest dense". Every
 * lens[b] must fit in the padded extents. Padding values are not read. */
SHEAF_API sheaf_status sheaf_ragged_from_padded(sheaf_ctx *ctx, const sheaf_tensor *padded,
                                                const int64_t *lens, const int64_t *dims,
                                                const sheaf_ragged_opts *opts, sheaf_ragged **out);
/* Back to a contiguous padded tensor [batch, ...], every ragged extent
 * padded to pad_len (0: the longest length), padding set to `fill` (F32,
 * F64, I32, I64; other dtypes pad with zero bytes). */
SHEAF_API sheaf_status sheaf_ragged_to_padded(sheaf_ctx *ctx, const sheaf_ragged *r, int64_t pad_len,
                                              double fill, sheaf_tensor **out);
/* A dense view (no copy) of sequence b: shape = dims with lens[b] for the
 * ragged extents; strides follow the storage padding. */
SHEAF_API sheaf_status sheaf_ragged_seq(sheaf_ctx *ctx, const sheaf_ragged *r, int64_t b,
                                        sheaf_tensor **out);
/* A dense view [rows, row] of the whole storage, bulk padding included
 * (for tokens {RAGGED, d} with storage_tile 1: [sum(lens) rounded up, d]). */
SHEAF_API sheaf_status sheaf_ragged_flat(sheaf_ctx *ctx, const sheaf_ragged *r, sheaf_tensor **out);
SHEAF_API void sheaf_ragged_free(sheaf_ragged *r); /* NULL is fine */

SHEAF_API sheaf_dtype sheaf_ragged_dtype(const sheaf_ragged *r);
SHEAF_API int64_t sheaf_ragged_batch(const sheaf_ragged *r);
SHEAF_API int sheaf_ragged_rank(const sheaf_ragged *r);            /* per sequence */
SHEAF_API const int64_t *sheaf_ragged_dims(const sheaf_ragged *r); /* with SHEAF_RAGGED_DIM */
SHEAF_API const int64_t *sheaf_ragged_lens(const sheaf_ragged *r);
SHEAF_API int64_t sheaf_ragged_max_len(const sheaf_ragged *r);
/* batch + 1 element offsets: sequence b starts at element offsets[b]. */
SHEAF_API const int64_t *sheaf_ragged_offsets(const sheaf_ragged *r);
/* Elements in use (sum over sequences, without any padding). */
SHEAF_API int64_t sheaf_ragged_numel(const sheaf_ragged *r);
SHEAF_API size_t sheaf_ragged_nbytes(const sheaf_ragged *r); /* storage, padding included */
SHEAF_API void *sheaf_ragged_data(const sheaf_ragged *r);
/* Element offset of (b, idx[0..rank)) from sheaf_ragged_data, or -1 when
 * out of range (or r or idx is NULL). O(rank). */
SHEAF_API int64_t sheaf_ragged_offset(const sheaf_ragged *r, int64_t b, const int64_t *idx);

/* A post-LN transformer encoder (BERT, CoRa; PyTorch's
 * nn.TransformerEncoderLayer with norm_first=False) over ragged f32 batches
 * of embeddings {SHEAF_RAGGED_DIM, d_model}. Weights are read from
 * safetensors under PyTorch's nn.TransformerEncoder state_dict names
 * (prefix + "layers.<i>.self_attn.in_proj_weight", ...; see
 * scripts/export_encoder.py and docs/RAGGED.md). */
typedef struct sheaf_encoder sheaf_encoder;

typedef enum sheaf_encoder_act {
  SHEAF_ENCODER_ACT_DEFAULT = 0, /* the file's "activation" metadata, else relu */
  SHEAF_ENCODER_ACT_RELU,
  SHEAF_ENCODER_ACT_GELU         /* erf form, PyTorch's "gelu" */
} sheaf_encoder_act;

/* Zero fields are taken from the file: d_model and d_ff from the weight
 * shapes, n_layers by counting layers, n_heads from the "nhead" metadata
 * (required somewhere), eps from "layer_norm_eps" (else 1e-5). */
typedef struct sheaf_encoder_config {
  int d_model, n_heads, d_ff, n_layers;
  sheaf_encoder_act act;
  float eps;
  const char *prefix; /* prepended to every tensor name; NULL: "" */
} sheaf_encoder_config;

/* Packs the weights once (the file may be closed afterwards). cfg may be
 * NULL. */
SHEAF_API sheaf_status sheaf_encoder_load(sheaf_ctx *ctx, const sheaf_st_file *weights,
                                          const sheaf_encoder_config *cfg, sheaf_encoder **out);
SHEAF_API void sheaf_encoder_free(sheaf_encoder *enc); /* NULL is fine */
/* The resolved configuration (all zero for a NULL encoder; cfg NULL: nothing). */
SHEAF_API void sheaf_encoder_get_config(const sheaf_encoder *enc, sheaf_encoder_config *cfg);
/* y = encoder(x): a new ragged tensor with x's lengths and storage layout. */
SHEAF_API sheaf_status sheaf_encoder_forward(sheaf_encoder *enc, const sheaf_ragged *x, sheaf_ragged **y);
/* The same into an existing y with x's batch, lens and dims (any storage
 * padding: the change of layout is fused into the first and last ops). y
 * must not overlap x. Reuses the encoder's workspace: no allocation once it
 * has grown to the batch. */
SHEAF_API sheaf_status sheaf_encoder_forward_into(sheaf_encoder *enc, const sheaf_ragged *x,
                                                  sheaf_ragged *y);

/* ==================================== end of ragged tensors and encoder */

#ifdef __cplusplus
}
#endif

#endif /* SHEAF_H */
