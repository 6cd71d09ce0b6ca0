/*
 * runtime.h — internal types of the auto-batching runtime (the public API is
 * include/sheaf_graph.h): models and their parameters (model.c), graph nodes
 * and handles (graph.c, ops.c), kernel signatures (sig.c), the scheduling
 * policies (sched_*.c), the batched executor (exec.c, exec_gemm.c, pw_exec.c)
 * and the instruments (trace.c).
 *
 * A graph is a flat array of 56-byte nodes holding what each op means; a
 * node's inputs are a run of ids in another array, and what a policy or a
 * fusion keeps about a node is in side arrays of its own (see sh_node and
 * struct sheaf_graph). Values are f32 matrices of `rows` rows of `cols` floats
 * (row r at val + r*ld); rank-1 values have one row. Views (inputs,
 * parameters, lookups, concat, slice, the second output of an LSTM cell, a
 * fused activation) run no kernel; every other node is a kernel node that a
 * policy puts into a batch of nodes with the same signature.
 */
#ifndef SH_RUNTIME_H
#define SH_RUNTIME_H

#include <pthread.h>

#include "base/arena.h"
#include "base/base.h"
#include "kernels/gemm.h"
#include "kernels/pw.h"

#if defined(__GNUC__)
#define SH_LIKELY(x) __builtin_expect(!!(x), 1)
#else
#define SH_LIKELY(x) (x)
#endif

/* ---------------------------------------------------------------- model */

typedef struct sh_param {
  char *name;
  int rank;
  int64_t shape[2];
  size_t numel;
  float *data;                   /* numel floats, 64-byte aligned */
  sheaf_init init;
  uint64_t version;              /* bumped when the values may have changed */
  sh_gemm_packed_b *packed;      /* B = W [in, out], packed on first use */
  sh_gemm_packed_b *gates;       /* same, gate-interleaved (LSTM cells) */
  sh_gemm_packed_b *packed_t;    /* B = W^T [out, in] (src/train: dX = dY·W^T) */
  uint64_t packed_ver, gates_ver, packed_t_ver;
  float *grad;                   /* numel floats or NULL: the gradient (src/train owns it) */
  /* src/train: what the gradient holds since the last zeroing: grad_whole,
   * any element (a whole-tensor gradient); otherwise only the rows (of
   * shape[0]) marked in grad_rows (lookups' scatter-adds), zero elsewhere. */
  uint8_t *grad_rows;            /* shape[0] bytes or NULL (no row written) */
  bool grad_whole;
} sh_param;

/* src/train: a parameter's gradient in one of the model's extra gradient
 * shards (data-parallel training, sheaf_graph_grad_shard): what grad,
 * grad_rows and grad_whole of sh_param are for the model's own. */
typedef struct sh_grad_part {
  float *grad;
  uint8_t *grad_rows;
  bool grad_whole;
} sh_grad_part;
#define SH_GRAD_SHARDS 64 /* shards 0 (the model's own gradients) .. 63 */

/* A stacked weight [W_1; W_2; ...] (affine_n), packed once per version. */
typedef struct sh_param_stack {
  int n;
  uint32_t ids[SH_GEMM_MAX_KSRC];
  sh_gemm_packed_b *packed;
  uint64_t ver;                  /* sum of the members' versions when packed */
} sh_param_stack;

struct sheaf_model {
  sheaf_ctx *ctx;
  uint32_t tag;
  uint64_t seed;
  sh_param *params;
  uint32_t n_params, cap_params;
  sh_param_stack *stacks;
  uint32_t n_stacks, cap_stacks;
  pthread_mutex_t mu; /* the packed forms and stacks (runner threads share the model) */
  bool allow_nonfinite; /* sheaf_model_load takes NaN/Inf values (sheaf_model_allow_nonfinite) */
  /* src/train: gradient shard k (1 ..) is shard[k - 1], by parameter (cap_shard[k - 1]
   * entries); written only by the backward of the graph bound to it */
  sh_grad_part *shard[SH_GRAD_SHARDS - 1];
  uint32_t cap_shard[SH_GRAD_SHARDS - 1];
};

/* The parameter for a handle, or NULL (no message). */
static inline sh_param *sh_model_param_get(const sheaf_model *m, sheaf_param p) {
  if (!m || p.model != m->tag || p.id == 0 || p.id > m->n_params) return NULL;
  return &m->params[p.id - 1];
}
/* W packed as B (plain or gate-interleaved), repacked when its version moved. */
sheaf_status sh_model_packed(sheaf_model *m, uint32_t id, bool gates, const sh_gemm_packed_b **out);
/* W^T packed as B, likewise (the backward's dX = dY·W^T). */
sheaf_status sh_model_packed_t(sheaf_model *m, uint32_t id, const sh_gemm_packed_b **out);
/* Every packed form built so far whose weight's version moved, packed
 * again in place (on the pool): after an optimizer step, so that the next
 * passes (data-parallel shards: several graphs at once) find them ready. */
void sh_model_refresh_packed(sheaf_model *m);
/* Id (1-based) of the stack of these weights, created on first request. */
sheaf_status sh_model_stack_id(sheaf_model *m, int n, const uint32_t *ids, uint32_t *out);
sheaf_status sh_model_stack_packed(sheaf_model *m, uint32_t stack, const sh_gemm_packed_b **out);

/* ----------------------------------------------------------------- nodes */

/* What a KCALL node (a generated kernel called as an op) points to: the
 * kernel's name and its batch runner, which sets the values of ids[0..n)
 * (src/codegen/kernel_call.c; the runtime does not know generated code). */
typedef struct sh_kcall_desc {
  const char *name;
  sheaf_status (*run)(sheaf_graph *g, const struct sh_kcall_desc *d, const uint32_t *ids, uint32_t n);
  void *user;
} sh_kcall_desc;

/* The ops (src/kernels/ops.def lists them with their classes). */
typedef enum sh_op {
#define SH_OP(ID, name, cls, arity, form, act) SH_OP_##ID,
#include "kernels/ops.def"
  SH_OP_COUNT
} sh_op;
_Static_assert(SH_OP_COUNT <= 64, "op classes are 64-bit masks");

enum { SH_OPC_VIEW, SH_OPC_GEMM, SH_OPC_EW, SH_OPC_ROW }; /* ops.def's classes */
#define SH_OP(ID, name, cls, arity, form, act) | (uint64_t)(SH_OPC_##cls != SH_OPC_VIEW) << SH_OP_##ID
static const uint64_t sh_op_kernel_mask = 0
#include "kernels/ops.def"
    ;
#define SH_OP(ID, name, cls, arity, form, act) | (uint64_t)(SH_OPC_##cls == SH_OPC_EW) << SH_OP_##ID
static const uint64_t sh_op_ew_mask = 0
#include "kernels/ops.def"
    ;
/* Kernel ops: a policy batches them (the rest are views). */
static inline bool sh_op_is_kernel(int op) { return sh_op_kernel_mask >> op & 1; }
/* Elementwise ops: built as nodes, run as pointwise programs. */
static inline bool sh_op_is_pw(int op) { return sh_op_ew_mask >> op & 1; }
/* Inputs of an op (0: any number). */
int sh_op_arity(int op);
/* The GEMM-epilogue activation an op fuses as (sh_gemm_act), or -1. */
int sh_op_act(int op);
const char *sh_op_name(int op);

#define SH_NONE UINT32_MAX
#define SH_MAX_NODE_INS 65535 /* sh_node.n_in is 16 bits */

/* A node: what its op means, whatever the policy and however far the flush
 * has gone. Its value is `rows` rows of `cols` floats, row r at val + r*ld
 * (rank 1: one row); val is NULL until computed (kernels) or resolved
 * (views, sh_graph_val).
 *
 * What a policy or a fusion keeps about a node lives with that module, in
 * a side array indexed by node id (not here):
 *   g->pw.node[id]      pointwise fusion: absorbed into which reader, the
 *                       program and signature once flattened, its value
 *                       slots, the GEMM-hook link (sh_pw_node; elementwise
 *                       nodes; pointwise.c, pw_exec.c)
 *   sh_affine_of(g, id) activations fused into the GEMM's epilogue, whether
 *                       the raw value is read or overwritten, the roots run
 *                       in the GEMM's row hook (sh_affine_node; affine nodes;
 *                       ops_pointwise.c, exec_gemm.c, pw_exec.c)
 *   sh_walk             policies depth and agenda: each pending node's depth,
 *                       signature and ready-list link, for one flush
 *                       (sched_depth.c, in scratch)
 * Policy sheaf keeps node ids in its buckets, by signature. An entry is
 * written by the builder of its node (or at flush) and read only for nodes
 * of that kind, so reset clears nothing. Per-node data still to come —
 * gradients of a backward pass, device pointers of a device executor — goes
 * the same way: a part of sheaf_graph owned by that module, with its array
 * indexed by node id (sh_side_reserve), never a field here. */
typedef struct sh_node {
  uint8_t op;
  uint8_t rank;     /* 1 or 2 */
  bool done;        /* value computed: its kernel ran, or the one that computes it (an LSTM
                       cell's state, a program's side output); inputs, parameters and
                       lookups from the start */
  uint16_t n_in;
  uint16_t phase;
  uint32_t in;      /* first input in g->store.ins */
  uint32_t depth;   /* kernel levels below it within its phase (a pointwise node: its fused
                       program's; see docs/RUNTIME.md) */
  uint32_t uses;    /* nodes built so far that read it */
  int32_t rows, cols, ld;
  union {           /* the op's own operands (zero for the ops without) */
    struct {
      uint32_t id, row;
    } param;        /* PARAM: the parameter (sheaf_param.id); LOOKUP: the table and the row */
    struct {
      uint32_t w, b, aff;
    } lin;          /* AFFINE: W (n_in > 1: the stack of the W's, sh_model_stack_id), b
                       (0: none) and its entry in g->affine.node (sh_affine_of); LSTM and
                       TREE_LSTM: W and b (the cell state is the LSTM_C node after
                       it: sh_lstm_cell) */
    uint32_t offset; /* SLICE: its first column in the source */
    uint32_t index;  /* PICK: the column; ROW: the row */
    float scale;     /* SCALE: the factor */
    float eps;       /* LAYER_NORM */
    const sh_kcall_desc *kcall; /* KCALL: the kernel */
  };
  float *val;
} sh_node;
_Static_assert(sizeof(sh_node) <= 56, "sh_node grew: builders write and flushes read every node");

/* Grows a (ptr, cap) array of `elem`-byte items to hold `need` (new items zeroed). */
sheaf_status sh_grow(sheaf_ctx *ctx, void **ptr, uint32_t *cap, uint32_t need, size_t elem);
/* Room for entry `id` of a per-node side array (see sh_node). */
static inline sheaf_status sh_side_reserve(sheaf_ctx *ctx, void **ptr, uint32_t *cap, uint32_t id,
                                           size_t elem) {
  return SH_LIKELY(id < *cap) ? SHEAF_OK : sh_grow(ctx, ptr, cap, id + 1, elem);
}

/* ------------------------------------------------------------ signatures */

typedef struct sh_sig_key {
  uint8_t op, rank, n_w, mat; /* mat: affine inputs read whole (too many pieces) */
  uint32_t p0, p1;            /* p0 of affine_n: 0x80000000 | stack id */
  int32_t cols;
  int32_t w[4];
  uint32_t fbits;
} sh_sig_key;

typedef struct sh_sig {
  sh_sig_key key;
  char *name;
  size_t name_size;
  uint64_t batches, nodes;    /* instruments: batches run and their nodes (trace.c resets) */
} sh_sig;

/* A bucket's node ids, in chunks (flush reads them without touching nodes). */
#define SH_BCHUNK 15
typedef struct sh_bchunk {
  uint32_t next;
  uint32_t ids[SH_BCHUNK];
} sh_bchunk;

typedef struct sh_bucket {
  uint32_t sig, depth, head, tail, count, next_level, next_same; /* head, tail: chunks */
  uint32_t phase;
} sh_bucket;

/* Policy sheaf's side array by signature: bucket + 1 by depth. */
typedef struct sh_sheaf_sig {
  uint32_t *slot;
  uint32_t cap;
} sh_sheaf_sig;

typedef struct sh_phase_lv {
  uint32_t *head; /* first bucket by depth */
  uint32_t cap, max_depth;
  bool used;
} sh_phase_lv;

/* An activation over columns [c0, c1) of an affine node, run in the GEMM's
 * epilogue; `alias` is the node that holds the result. */
typedef struct sh_fuse {
  uint32_t alias, next; /* next: the affine's next range (SH_NONE ends) */
  int32_t c0, c1;
  int act;              /* sh_gemm_act */
} sh_fuse;

#define SH_MAX_FUSE 6 /* ranges per affine (with the bias: <= SH_GEMM_MAX_EP) */

/* An affine node's side entry (sh_affine_of, written by sheaf_affine_n):
 * what runs with its GEMM. */
typedef struct sh_affine_node {
  uint32_t act;     /* its first activation range in g->affine.range (SH_NONE: none) */
  uint32_t hook;    /* policy sheaf, flush: its first pointwise root run in the GEMM's row
                       hook (SH_NONE: none), then sh_pw_node.hook_next (pw_exec.c) */
  uint8_t n_act;    /* activation ranges (ops_pointwise.c) */
  bool raw_used;    /* its raw value is read, directly or through a slice (ops.c) */
  bool val_is_act;  /* val holds the activated values in its ranges (exec_gemm.c) */
} sh_affine_node;

/* The LSTM_C node of an LSTM or TREE_LSTM node (the cell state): built
 * right after it. */
static inline uint32_t sh_lstm_cell(uint32_t lstm) { return lstm + 1; }

/* Pointwise programs (sh_pw_prog) and their opcodes are the kernel's
 * (kernels/pw.h), numbered from the same op table as sh_op. */
_Static_assert(SH_PW_COUNT == SH_PW_OPS + SH_OP_COUNT && SH_PW_ADD == SH_PW_OPS + SH_OP_ADD,
               "SH_PW_<ID> = SH_PW_OPS + SH_OP_<ID>");

/* A pointwise node's side entry (g->pw.node[id], written by sh_pw_build for
 * every elementwise node; the other nodes' entries are never read). */
enum {
  SH_PW_NODE_LISTED = 1,   /* on g->pw.list: bucketed at flush (policy sheaf) */
  SH_PW_NODE_ABS = 2,      /* inlined into the program of its only reader, `absorber` (permanent) */
  SH_PW_NODE_NEED = 4,     /* absorbed, and read by another node too: needs its own value */
  SH_PW_NODE_SIDE = 8,     /* ... stored by the program of its root absorber (else recomputed) */
  SH_PW_NODE_HAS_SIDE = 16, /* its program stores a side output (never absorbed itself) */
  SH_PW_NODE_FINAL = 32,   /* flattened: sig and first_slot are set */
};
typedef struct sh_pw_node {
  uint8_t flags;
  /* its program's sizes before flattening (upper bounds: leaves are counted
   * before deduplication) */
  uint8_t code, leaves, stack, consts, sides;
  uint16_t absorbed;   /* bit i: its input i is inlined into it (flush reads this, not the
                          inputs' entries: a leaf's entry would be one more cold line) */
  uint32_t absorber;   /* SH_PW_NODE_ABS: the node it is inlined into */
  uint32_t sig;        /* SH_PW_NODE_FINAL: its kernel signature (whose key's p0 is its
                          interned program: sh_pw_prog_of) */
  uint32_t first_slot; /* SH_PW_NODE_FINAL: its value slots, then side outputs, in g->pw.slot */
  uint32_t hook_next;  /* policy sheaf, flush: the next root in the row hook of the same
                          affine (sh_affine_node.hook) */
} sh_pw_node;
_Static_assert(sizeof(sh_pw_node) <= 24, "sh_pw_node grew: flush reads one per pointwise node");

typedef struct sh_trace_ev {
  uint64_t t0, dur;
  uint32_t sig, n, depth, phase;
} sh_trace_ev;

#define SH_MAX_PHASE 1023
#define SH_MAX_WS 64
/* Buckets a backward pass runs side by side, one per pool task (src/train/lanes.c). */
#define SH_TRAIN_LANES 4

/* The graph's parts, one per owner (struct sheaf_graph below): a runtime
 * file writes its own part, node values and the counters of sh_instr; it
 * may read the others. */

/* The node store (ops*.c append, graph.c resets and resolves views; the
 * executor sets the values of the nodes it runs: val, ld, done). */
typedef struct sh_node_store {
  sh_node *nodes;
  uint32_t n_nodes, cap_nodes;
  uint32_t *ins;          /* node i reads ins[nodes[i].in ...], n_in of them */
  uint32_t n_ins, cap_ins;
  uint32_t first_pending; /* nodes below are computed */
  uint32_t *epoch_start;  /* node id where each flush's successor began, ascending: a node
                             reading an earlier flush's value may sit at a lower depth than
                             it (that value is ready), so readers-after-inputs order is
                             (phase, epoch, depth) */
  uint32_t n_epoch, cap_epoch;
  int phase;              /* the phase of the nodes built now (sheaf_graph_phase) */
  uint32_t max_phase;     /* highest phase of a node since the last flush */
  sh_arena data;          /* values: inputs, batch outputs (reset with the graph) */
} sh_node_store;

/* Kernel signatures (sig.c): kept across resets. */
typedef struct sh_sig_table {
  sh_sig *at;
  uint32_t n, cap;
  uint32_t *table;        /* open addressing: sig + 1 */
  uint32_t table_cap;
  uint32_t cache[256];    /* build-time direct-mapped cache: sig + 1 */
} sh_sig_table;

/* Policy sheaf's buckets (sched_sheaf.c): cleared at every flush and reset. */
typedef struct sh_sheaf_state {
  sh_bucket *buckets;
  uint32_t n_buckets, cap_buckets;
  sh_bchunk *bchunks;
  uint32_t n_bchunks, cap_bchunks;
  sh_phase_lv *phases;
  uint32_t n_phases;
  sh_sheaf_sig *sig;      /* by signature id (grown as signatures are bucketed) */
  uint32_t cap_sig;
} sh_sheaf_state;

/* What runs with an affine's GEMM: activations fused into its epilogue
 * (ops_pointwise.c builds them, exec_gemm.c runs them) and the pointwise
 * roots run in its row hook (pw_exec.c); graph.c resets and frees it. */
typedef struct sh_affine_state {
  sh_fuse *range;
  uint32_t n_range, cap_range;
  sh_affine_node *node;   /* affine nodes' entries in build order (sh_affine_of): dense, so a
                             batch's entries share cache lines */
  uint32_t n_node, cap_node;
} sh_affine_state;

/* Pointwise fusion (pointwise.c builds and flattens, pw_exec.c runs). */
typedef struct sh_pw_state {
  sh_pw_prog *progs;      /* interned programs (kept across resets) */
  uint32_t n_progs, cap_progs;
  uint32_t *prog_table;   /* open addressing: program + 1 */
  uint32_t prog_table_cap;
  uint32_t memo_prog, memo_sig; /* the last program and signature found (+ 1) */
  sh_sig_key memo_key;
  uint32_t *list;         /* policy sheaf: pointwise nodes built since the last flush */
  uint32_t n_list, cap_list;
  uint32_t *slot;         /* value slots (then side outputs) of flattened pointwise nodes */
  uint32_t n_slot, cap_slot;
  sh_pw_node *node;       /* by node id: elementwise nodes' entries */
  uint32_t cap_node;
} sh_pw_state;

/* The executor's workspaces (exec*.c; the policies' flush-time arrays and
 * the builders' temporaries also come from scratch). */
typedef struct sh_work {
  sh_arena scratch;       /* temporaries: reset after every flush, rewound after every batch */
  float *zeros;           /* a zero row for LSTM cells without c_prev */
  int64_t n_zeros;
  sh_gemm_ws *gemm_ws[SH_MAX_WS];
  int n_gemm_ws;
} sh_work;

/* Instruments (trace.c): counters, timers and the timeline of batches. */
typedef struct sh_instr {
  sheaf_graph_stats stats;
  uint64_t pw_hooked;     /* pointwise roots run in a GEMM's row hook (pw_exec.c) */
  uint64_t build_t0;      /* first builder call since the last flush (0: none) */
  uint64_t ns_kernels_build; /* kernel time inside builders (policy none) */
  char *trace_path;       /* the timeline is collected when set */
  sh_trace_ev *ev;
  uint32_t n_ev, cap_ev;
  uint32_t cur_depth, cur_phase; /* of the batch being run (set by the policy, for the trace) */
} sh_instr;

/* What a forward flush keeps for a backward pass. src/train sets `keep` on
 * a graph once it has run one (inference graphs never do); then the LSTM
 * executor (exec_gemm.c) stores each cell's activated gates and tanh(c),
 * 5*hidden floats a row (sh_gemm_args.lstm_gates), in the node store, at
 * lstm_gates[node id] (NULL: not kept; entries written for every LSTM node
 * flushed once the array exists); the tree-LSTM executor (exec_tree_lstm.c)
 * likewise, (gates + 1)*hidden floats a row: its activated gates in W's
 * order, then tanh(c). */
typedef struct sh_saved {
  bool keep;
  uint32_t cap;
  float **lstm_gates;
} sh_saved;

struct sheaf_graph {
  /* options, identity and the first error (graph.c) */
  sheaf_ctx *ctx;
  sheaf_model *model;
  sheaf_policy policy;
  int threads;
  sheaf_isa isa;
  uint32_t tag, gen;        /* the graph's id (unique in the process) and reset epoch */
  uint64_t handle;          /* of its expressions: (uint64_t)tag << 32 | gen (never 0) */
  sheaf_status status;      /* first build error since reset */
  char err[512];

  sh_node_store store;      /* the nodes: what each op means, and the values */
  sh_sig_table sigs;        /* kernel signatures */
  sh_sheaf_state sheaf;     /* policy sheaf's buckets (depth and agenda keep theirs in scratch) */
  sh_affine_state affine;   /* GEMM fusion: epilogue activations, row-hook roots */
  sh_pw_state pw;           /* pointwise fusion and programs */
  sh_work work;             /* workspaces */
  sh_instr instr;           /* counters, timers, the timeline */
  sh_arena train;           /* src/train: a backward pass's gradients and temporaries (reset
                               by each pass, its chunk kept for the next; graph.c frees it) */
  sh_arena train_lane[SH_TRAIN_LANES]; /* the same for the buckets the pass runs side by side
                               on the pool, one arena each (src/train/lanes.c) */
  sh_saved saved;           /* training: what the forward keeps for the backward */
  int grad_shard;           /* src/train: the model's gradient shard its backward adds into
                               (0: the model's own; sheaf_graph_grad_shard) */
  /* A new module with per-node data (the gradients of a backward pass, the
   * device buffers of a device executor) adds its part here, with its side
   * array indexed by node id: see sh_node. */
};

/* An affine node's side entry (policy and fusion state of its GEMM). */
static inline sh_affine_node *sh_affine_of(const sheaf_graph *g, uint32_t id) {
  return &g->affine.node[g->store.nodes[id].lin.aff];
}

/* ---------------------------------------------------------- graph (graph.c) */

/* Records the graph's first error (also the context's last error); returns it. */
sheaf_status sh_graph_fail(sheaf_graph *g, sheaf_status st, const char *fmt, ...) SH_PRINTF(3, 4);
/* Before node `id` is read again after a flush: an affine (or a slice of
 * one) whose buffer holds fused activations gets its raw value back. */
sheaf_status sh_graph_raw_guard(sheaf_graph *g, uint32_t id);
/* The value of a node, resolving views (materializes a concat read whole). */
float *sh_graph_val(sheaf_graph *g, uint32_t id);

/* ------------------------------------------------ builders (ops*.c) */

#define SH_NULL_EXPR ((sheaf_expr){0, 0, 0})
static inline sheaf_expr sh_expr_of(const sheaf_graph *g, uint32_t id) {
  return (sheaf_expr){id, g->store.nodes[id].depth, g->handle};
}
/* "[2, 3]" */
const char *sh_node_shape_str(const sh_node *n, char *buf, size_t size);
/* Start of every builder: false when it must return a null expression. */
static inline bool sh_build_enter(sheaf_graph *g) {
  if (!g || g->status) return false;
  if (!g->instr.build_t0) g->instr.build_t0 = sheaf_time_ns();
  return true;
}
/* 0: a valid handle; 1: null (propagate silently); 2: misuse (error recorded).
 * Inline: every builder checks each argument (a call spilled the handle). */
int sh_build_check_slow(sheaf_graph *g, sheaf_expr e, const char *op, int argno);
static inline int sh_build_check(sheaf_graph *g, sheaf_expr e, const char *op, int argno) {
  if (!SH_UNLIKELY(e.graph != g->handle || e.node >= g->store.n_nodes ||
                   g->store.nodes[e.node].depth != e.depth))
    return 0;
  return sh_build_check_slow(g, e, op, argno);
}
/* Appends a node reading `ins` (SH_NONE on failure, error recorded). */
uint32_t sh_node_new(sheaf_graph *g, int op, const uint32_t *ins, int n_in);
/* Hands a finished node to the policy; returns its expression. */
sheaf_expr sh_build_finish(sheaf_graph *g, uint32_t id);

/* ------------------------------------------------------------ sigs (sig.c) */

void sh_sig_key_of(const sheaf_graph *g, const sh_node *n, sh_sig_key *k);
/* Appends the pieces of `id` (the inputs of nested concats, else id itself)
 * to out[n..max); returns the new count, or -1 when they do not fit. */
int sh_pieces(const sheaf_graph *g, uint32_t id, uint32_t *out, int n, int max);
/* Build-time lookup (policy sheaf / none): direct-mapped cache, then the table. */
sheaf_status sh_sig_find_fast(sheaf_graph *g, const sh_sig_key *k, uint32_t *out);
/* Flush-time lookup (policies depth / agenda): hash of the whole key. */
sheaf_status sh_sig_find_hash(sheaf_graph *g, const sh_sig_key *k, uint32_t *out);
void sh_sigs_free(sheaf_graph *g);

/* -------------------------------------------------------- policies (sched_*.c) */

/* Policy sheaf: appends kernel node `id` of signature `sig` to its bucket. */
sheaf_status sh_sched_sheaf_add(sheaf_graph *g, uint32_t id, uint32_t sig);
sheaf_status sh_sched_sheaf_flush(sheaf_graph *g);
void sh_sched_sheaf_clear(sheaf_graph *g);
void sh_sched_sheaf_free(sheaf_graph *g);
/* Policy none: runs kernel node `id` of signature `sig` now. */
sheaf_status sh_sched_none_add(sheaf_graph *g, uint32_t id, uint32_t sig);
sheaf_status sh_sched_depth_flush(sheaf_graph *g);
sheaf_status sh_sched_agenda_flush(sheaf_graph *g);

/* Policies depth and agenda: the ready list of one signature during a flush. */
typedef struct sh_walk_sig {
  uint32_t head, tail, count; /* node ids, linked through sh_walk.next */
  uint32_t mark;              /* depth: the level that last listed it */
  uint64_t depth_sum;         /* agenda: of the listed nodes */
} sh_walk_sig;

/* Policies depth and agenda: the DyNet-style walk over the pending nodes
 * base .. base + n at the start of a flush, and the policies' side arrays
 * for that flush (in scratch; per node indexed by id - base). */
typedef struct sh_walk {
  uint32_t base, n;
  uint32_t *depth;      /* within the node's phase, from the inputs (not the handles) */
  uint32_t *sig;        /* kernel nodes: the signature, by hashing its key */
  uint32_t *next;       /* ready-list links (the policy's) */
  uint32_t max_depth;
  sh_walk_sig *by_sig;  /* [g->sigs.n], zeroed */
} sh_walk;
sheaf_status sh_sched_walk(sheaf_graph *g, sh_walk *w);

/* ----------------------------------------------------- executor (exec*.c) */

/* Runs one batch: n kernel nodes with the same signature, all inputs computed. */
sheaf_status sh_exec_batch(sheaf_graph *g, uint32_t sig, const uint32_t *ids, uint32_t n);
sheaf_status sh_exec_affine(sheaf_graph *g, uint32_t sig, const uint32_t *ids, uint32_t n,
                            int64_t m_rows);
sheaf_status sh_exec_lstm(sheaf_graph *g, uint32_t sig, const uint32_t *ids, uint32_t n,
                          int64_t m_rows);
sheaf_status sh_exec_tree_lstm(sheaf_graph *g, uint32_t sig, const uint32_t *ids, uint32_t n,
                               int64_t m_rows);
/* The K-split sources of a GEMM batch (exec_gemm.c): inputs [0, n_x) of each
 * node, split into their concat pieces as the signature key k says, as
 * row-pointer operands of a (m rows). */
sheaf_status sh_exec_gemm_sources(sheaf_graph *g, const sh_sig_key *k, const uint32_t *ids,
                                  uint32_t n, int n_x, int64_t m, sh_gemm_args *a);
/* A zero row of at least n floats (the graph's, grown on demand). */
const float *sh_exec_zero_row(sheaf_graph *g, int64_t n);
sheaf_status sh_exec_matmul(sheaf_graph *g, const uint32_t *ids, uint32_t n);
/* The raw value of an affine node whose val holds the activated one. */
sheaf_status sh_exec_affine_raw(sheaf_graph *g, uint32_t id);
/* A GEMM operand from m row pointers of width w: base + ld when they are
 * evenly spaced (contiguous), a single row with *same when they are all equal
 * (same may be NULL: then equal rows stay a pointer array), else the array. */
sh_gemm_in sh_exec_operand(sheaf_graph *g, const float **rows, int64_t m, int64_t w, bool *same);
/* Row pointers (in the graph's scratch) of input k of each of the n nodes
 * (m rows in all): a node contributes its own rows (in_rows: its input's
 * rows); a scalar input of a larger node repeats. NULL when out of memory
 * or an input has no value. */
const float **sh_exec_gather(sheaf_graph *g, const uint32_t *ids, uint32_t n, int k, int64_t m,
                             bool in_rows);
/* Allocates a batch's output block and points each node's val into it. */
float *sh_exec_out_block(sheaf_graph *g, const uint32_t *ids, uint32_t n, int64_t m_rows,
                         int64_t cols);

/* ------------------------------------------------- pointwise (pointwise.c) */

/* The program of flattened pointwise node `id`. */
static inline const sh_pw_prog *sh_pw_prog_of(const sheaf_graph *g, uint32_t id) {
  return &g->pw.progs[g->sigs.at[g->pw.node[id].sig].key.p0];
}
/* Node `id` is inlined into its reader's program (only policy sheaf absorbs:
 * the other policies never look at the side entry). */
static inline bool sh_pw_absorbed(const sheaf_graph *g, uint32_t id) {
  return g->policy == SHEAF_POLICY_SHEAF && sh_op_is_pw(g->store.nodes[id].op) &&
         (g->pw.node[id].flags & SH_PW_NODE_ABS);
}

/* Builds a pointwise node (add .. log): absorbs pending pointwise producers
 * nobody else has read (policy sheaf) and hands the node to the policy. */
sheaf_expr sh_pw_build(sheaf_graph *g, int op, const uint32_t *ins, int n_in, int rank, int32_t rows,
                       int32_t cols, float f);
/* A new reader of absorbed node `id` (from sh_node_new): it gets a value of
 * its own (stored by its absorber's program, recomputed, or computed now). */
sheaf_status sh_pw_need(sheaf_graph *g, uint32_t id);
/* Policy sheaf: puts pointwise node `id` on the list bucketed at flush
 * (inline: every elementwise builder ends here; the list grows out of line). */
sheaf_status sh_pw_list_grow(sheaf_graph *g);
static inline sheaf_status sh_pw_list_add(sheaf_graph *g, uint32_t id) {
  if (SH_UNLIKELY(g->pw.n_list == g->pw.cap_list) && sh_pw_list_grow(g)) return SHEAF_ERR_NOMEM;
  g->pw.list[g->pw.n_list++] = id;
  g->pw.node[id].flags |= SH_PW_NODE_LISTED;
  return SHEAF_OK;
}
/* Flattens pointwise node `id` into a program over its leaves, interns it
 * and finds its signature (fast: the build-time cache). */
sheaf_status sh_pw_finalize(sheaf_graph *g, uint32_t id, bool fast);
/* Policy sheaf, start of flush: buckets the pointwise nodes that need a value. */
sheaf_status sh_pw_flush_roots(sheaf_graph *g);
/* Computes absorbed node `id` alone (read after the flush that skipped it). */
sheaf_status sh_pw_compute(sheaf_graph *g, uint32_t id);
/* "x0*x1+x2" */
void sh_pw_prog_str(const sh_pw_prog *p, char *buf, size_t size);
void sh_pw_clear(sheaf_graph *g); /* reset: no pending list, no flattened nodes */
void sh_pw_free(sheaf_graph *g);

/* ------------------------------------------------- pointwise runs (pw_exec.c) */

sheaf_status sh_exec_pw(sheaf_graph *g, const uint32_t *ids, uint32_t n, int64_t m_rows);
/* Policy sheaf, flush: links flattened root `id` on the list (sh_affine_node.hook)
 * of the one pending affine whose rows it reads, if any. */
void sh_pw_link_hot(sheaf_graph *g, uint32_t id);
/* The linked roots of affine batch ids[0..n) whose other leaves are
 * computed, prepared to run in its GEMM's row hook (node values, aliases
 * already point into the GEMM's output block); *out NULL when none. */
typedef struct sh_pw_hook sh_pw_hook;
sheaf_status sh_pw_hook_plan(sheaf_graph *g, const uint32_t *ids, uint32_t n, int64_t m_rows,
                             sh_pw_hook **out);
void sh_pw_hook_rows(void *arg, int64_t m0, int64_t rows, int tid); /* sh_gemm_args.rows_done */
/* After the GEMM: the roots are done (their buckets skip them), counted as batches. */
void sh_pw_hook_done(sheaf_graph *g, const sh_pw_hook *h);

/* ---------------------------------------------------------- trace (trace.c) */

void sh_trace_record(sheaf_graph *g, uint32_t sig, uint32_t n, uint32_t depth, uint32_t phase,
                     uint64_t t0, uint64_t t1);
void sh_trace_write(sheaf_graph *g);
/* At creation (graph or runner, `fn`): path can be written as the trace (an
 * existing writable non-directory, or a new name in a writable directory);
 * else SHEAF_ERR_IO naming the path and the reason (nothing is created). */
sheaf_status sh_trace_path_check(sheaf_ctx *ctx, const char *fn, const char *path);

#endif
