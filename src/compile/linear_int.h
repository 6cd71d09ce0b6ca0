/*
 * linear_int.h — the linearized mode's internal form: structural functions,
 * their arms, each arm's tensor code as a small DAG of per-row operations
 * (coarsen.c builds it from the typed AST, coarsen_emit.c prints it as a
 * kernel), and the inspector's level arrays (inspect.c).
 */
#ifndef SH_COMPILE_LINEAR_INT_H
#define SH_COMPILE_LINEAR_INT_H

#include "compile/linear.h"
#include "lang/check.h"

#define SH_LIN_MAX_FNS 32
#define SH_LIN_MAX_ARMS 32 /* a dependency tree's function: one arm per child count 0 .. 31 */
#define SH_LIN_MAX_SLOTS 40 /* tree and word variables of one arm's pattern (a dependency node's children) */
#define SH_LIN_MAX_CALLS 32
#define SH_LIN_MAX_COMPS 8  /* result components of a structural function */
#define SH_LIN_MAX_NODES 512
#define SH_LIN_MAX_SEGS 8
#define SH_LIN_MAX_PARTS 16 /* a batch split over instances, one part per pool thread (linear.c) */

typedef enum sh_lin_op {
  SH_LIN_PARAM, /* a parameter (not batched) */
  SH_LIN_CONST, /* an f32[1] constant */
  SH_LIN_IN,    /* an executor input: segments copied side by side into [n, width] */
  SH_LIN_UN,    /* fn(a): builtin (SH_BI_...) or SH_BI_NONE for -a */
  SH_LIN_BIN,   /* a op b (+ - * /), an f32[1] side broadcast */
  SH_LIN_MM,    /* a @ b (a may be a CAT: the product split by its parts) */
  SH_LIN_SLICE, /* a[lo : lo + d0] */
  SH_LIN_CAT,   /* items side by side: only as the left operand of @ */
  SH_LIN_LSM    /* log_softmax(a) over the last axis */
} sh_lin_op;

/* A segment of an executor input: a child's state component, or a table's
 * row looked up by a pattern field's word. */
typedef struct sh_lin_seg {
  bool zero;        /* zeros (the sum over no children) */
  bool lookup;
  int call, comp;   /* child: call site, component */
  int param, field; /* lookup: the table, the word field */
  int64_t width;
} sh_lin_seg;

typedef struct sh_lin_node {
  sh_lin_op op;
  int fn;          /* UN: sh_builtin (SH_BI_NONE: negation); BIN: token kind */
  int a, b;
  int rank;        /* per row: 1 or 2 */
  int64_t d[2];
  bool batched;    /* depends on the row (else a parameter or constant) */
  int param;       /* PARAM */
  double c;        /* CONST */
  int64_t lo;      /* SLICE */
  int n_items;     /* CAT */
  int items[SH_LIN_MAX_SEGS];
  int n_segs;      /* IN */
  sh_lin_seg segs[SH_LIN_MAX_SEGS];
  int input;       /* IN: its position among the kernel's inputs */
  bool twin;       /* IN of rank 2: also passed as [N, R, C] (a matrix-vector product reads it so;
                      rank-2 values are otherwise flat in the kernel, [M, C] with M = N·R, so a
                      product with a parameter is one GEMM) */
} sh_lin_node;

/* How the inspector binds an arm's pattern: slot s of the arm is a subtree
 * (tree) or a leaf's word (word) of the node at path[0..depth) from the
 * activation's node (child indices). */
typedef struct sh_lin_slot {
  bool word;
  int depth;
  int8_t path[8];
} sh_lin_slot;

/* Which activation of the callee a call site reads, for sequences (a tree
 * model's calls are SH_LIN_SEL_TREE: by slot). Step activations are one per
 * word position p of a sentence of len words; row 0 of a step's state is
 * the zero initial state. */
typedef enum sh_lin_sel {
  SH_LIN_SEL_TREE,   /* the subtree of slot */
  SH_LIN_SEL_PREV,   /* a step's previous one: p - 1 (forward) or p + 1 (reversed); row 0 before the first */
  SH_LIN_SEL_LAST,   /* the step's last (fold's result): p = len - 1 (forward) or 0; row 0 when len = 0 */
  SH_LIN_SEL_POS,    /* the step at the activation's own position p */
  SH_LIN_SEL_MIRROR  /* the step at len - 1 - p */
} sh_lin_sel;

typedef struct sh_lin_call {
  int fn;   /* callee: a structural function */
  int slot; /* its tree: a tree slot (-1: the activation's own node) */
  int sel;  /* sh_lin_sel */
} sh_lin_call;

typedef struct sh_lin_arm {
  const sh_pat *pat; /* NULL: the function has no match (one arm) */
  sh_span span;
  int n_slots;
  sh_lin_slot slots[SH_LIN_MAX_SLOTS];
  int n_fields;                     /* word slots used by lookups */
  int field_slot[SH_LIN_MAX_SLOTS]; /* field f is slot field_slot[f] */
  int n_calls;
  sh_lin_call calls[SH_LIN_MAX_CALLS];
  int n_nodes;
  sh_lin_node nodes[SH_LIN_MAX_NODES];
  int n_out;
  int out[SH_LIN_MAX_COMPS]; /* the node of each result component */
  int n_inputs;              /* IN nodes, in input order (a twin twice: flat, then [N, R, C]) */
  int inputs[SH_LIN_MAX_NODES];
  bool input_3d[SH_LIN_MAX_NODES];
  int n_params;              /* parameters read, in kernel order */
  int params[64];
  char name[64];
  char *src; /* the kernel's source (malloc) */
  size_t src_len;
  sheaf_kernel *k;
  sheaf_kernel_plan **plans; /* by row count (cap_plans entries) */
  int32_t cap_plans;
} sh_lin_arm;

typedef struct sh_lin_fn {
  const sh_fn *fn;
  int n_arms;
  sh_lin_arm *arms[SH_LIN_MAX_ARMS];
  int n_comp;
  int comp_rank[SH_LIN_MAX_COMPS];
  int64_t comp_d[SH_LIN_MAX_COMPS][2];
  int64_t comp_width[SH_LIN_MAX_COMPS]; /* floats a row */
  int step;       /* sequences: +1 a forward scan/fold step, -1 one over rev(words), 0 not a step */
  bool per_token; /* sequences, main: one activation per token (main returns a list: a map) */
} sh_lin_fn;

/* The activations of one (height, function, arm): rows start .. start + count
 * of the function's states; the arrays count entries each. */
typedef struct sh_lin_grp {
  int height, fn, arm;
  int32_t start, count;
  int32_t *fields[SH_LIN_MAX_SLOTS]; /* word ids */
  int32_t *calls[SH_LIN_MAX_CALLS];  /* callee rows */
} sh_lin_grp;

struct sh_lin {
  sheaf_ctx *ctx;
  const sh_module *m;
  const sh_lang_bind *bind;
  sheaf_model *model; /* NULL: checking only */
  const sh_input_shape *in;
  int n_fns;
  sh_lin_fn fns[SH_LIN_MAX_FNS];
  char *why;
  size_t why_cap;
  bool refused;
  bool plans; /* prepared calls per row count (SHEAF_LINEAR_PLANS=1), else sheaf_kernel_run */
  sh_buf all_src;
  double compile_s;
  /* the last run: the inspector's output, the states */
  int n_groups, cap_groups;
  sh_lin_grp *groups;
  int32_t *group_buf; /* the groups' arrays */
  size_t group_buf_cap;
  int32_t n_rows[SH_LIN_MAX_FNS];
  float *state[SH_LIN_MAX_FNS][SH_LIN_MAX_COMPS];
  size_t state_cap[SH_LIN_MAX_FNS];
  int32_t *root_row;
  int32_t n_inst, cap_inst;
  bool seq;           /* main takes a sequence (list[i32]): inspect_seq.c */
  bool dep;           /* main takes a dependency tree: a function that maps over a node's children has one arm
                         per child count k (the map unrolled k times), arm k taken by nodes of k children */
  int dep_k;          /* translating: the arm's child count */
  bool dep_used;      /* translating: the arm read the node's children */
  int32_t *out_rows;  /* main's rows of each instance (per-token outputs: its length; else 1) */
  float *scratch; /* the executor's inputs */
  size_t scratch_cap;
  /* rows of a direct arm (its results are looked-up rows as they are) of a
   * function other than main: where each row's values are (a table's row),
   * read there by fill_row instead of copied into the state; NULL entries:
   * the state's row. One array per component, state_cap entries (linear.c). */
  const float **alias[SH_LIN_MAX_FNS][SH_LIN_MAX_COMPS];
  bool has_alias[SH_LIN_MAX_FNS];
  struct sh_lin_scan *scan; /* the inspector's arrays, kept across runs (inspect.c) */
  /* threads (linear.c): a batch of n instances on a pool of T >= 2 threads
   * runs as min(T, n / 2) parts over consecutive instances, each a part
   * (its own inspector output and states, the kernels shared) running its
   * levels on one thread with serial kernels */
  bool split;                          /* SHEAF_LINEAR_SPLIT: 0 keeps one part, kernels split over threads */
  bool is_part;                        /* a part: borrows its parent's functions and kernels */
  int n_parts;                         /* the last run's parts (0: not split) */
  int32_t part_first[SH_LIN_MAX_PARTS + 1];
  struct sh_lin *parts[SH_LIN_MAX_PARTS]; /* made on first use */
};

/* A refusal: "FILE:L:C: " + message into L->why; returns SHEAF_ERR_UNSUPPORTED. */
sheaf_status sh_lin_refuse(sh_lin *L, sh_span at, const char *fmt, ...) SH_PRINTF(3, 4);

/* linear_check.c: control flow that depends on tensor values, then main's
 * input (binary trees only). */
sheaf_status sh_lin_check_program(sh_lin *L);
/* coarsen.c: finds the structural functions from main and builds each
 * arm's DAG. */
sheaf_status sh_lin_coarsen(sh_lin *L);
/* coarsen_emit.c: the kernel source of an arm (a->src). */
sheaf_status sh_lin_emit(sh_lin *L, sh_lin_fn *f, sh_lin_arm *a);
/* coarsen.c: the body of fn (tensor parameters) as one arm a, each
 * parameter a batched input (the dynamic mode's regions, dyncoarse.c). */
sheaf_status sh_lin_translate_body(sh_lin *L, const sh_fn *fn, sh_lin_fn *lf, sh_lin_arm *a);
/* inspect.c: the groups of a batch of trees. */
sheaf_status sh_lin_inspect(sh_lin *L, const sh_treebank *tb, int32_t first, int32_t n, sh_word_ids ids);
/* inspect_seq.c: the groups of a batch of sentences (sentence s is words
 * off[s] .. off[s + 1] - 1, off relative to words). */
sheaf_status sh_lin_inspect_seq(sh_lin *L, const int32_t *off, const int32_t *words, int32_t n, sh_word_ids ids);
/* inspect.c: frees L->scan. */
void sh_lin_scan_free(sh_lin *L);
/* The node of tb under `node` at one child step (unary nodes pass through
 * when the type has no unary constructor) and the constructor of a node. */
int sh_lin_ctor_of(const sh_lin *L, const sh_treebank *tb, int32_t node);
int32_t sh_lin_skip_unary(const sh_lin *L, const sh_treebank *tb, int32_t node);

#endif
