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
#define SH_LIN_MAX_ARMS 32
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
  SH_LIN_LSM,   /* log_softmax(a) over the last axis */
  SH_LIN_RSUM,  /* sum(a): a vector's elements, an f32[1] */
  SH_LIN_RMAX,  /* max(a) of a vector: an f32[1] */
  SH_LIN_KSUM,  /* dependency trees: a per-child value summed over the node's children (ragged, c in 0..K(n)) */
  SH_LIN_KSOFTMAX, /* dependency trees: softmax of a per-child f32[1] over the node's children */
  /* matrices per sentence (coarsen_mat.c): a per-token row of a sentence's matrix is a per-row vector; these
   * mix a sentence's rows and run in ragged kernels (linear_mat.c) */
  SH_LIN_LN,    /* layer_norm(a, items[0] gamma, items[1] beta) over the last axis, eps 1e-5 */
  SH_LIN_TRANS, /* transpose(a) of a per-token matrix: only as the right operand of @ (SCORE) */
  SH_LIN_SCORE, /* a @ transpose(b): the sentence's N x N scores (per row i: a row over the sentence's j) */
  SH_LIN_SMAX,  /* softmax of a score matrix's rows */
  SH_LIN_ATT    /* a (SMAX) @ b (per-token matrix): per-token rows again */
} sh_lin_op;

/* A segment of an executor input: a child's state component, or a table's
 * row looked up by a pattern field's word. */
typedef struct sh_lin_seg {
  bool zero;        /* zeros (the sum over no children) */
  bool lookup;
  int call, comp;   /* child: call site, component */
  int param, field; /* lookup: the table, the word field */
  int64_t width;
  bool edge;        /* sequences, lookup: zeros where the field's position is outside the sentence (its word -1:
                       `if i > 0 { emb[ws[i - 1]] } else { zeros(E) }`) */
  int reduce;       /* sequences: SH_BI_MAX, _MEAN or _SUM of a map's rows calls[call][r] .. calls[call_end][r] - 1
                       (one sentence's tokens), elementwise; 0: none (linear_reduce.c) */
  int call_end;
  int weights;      /* reduce SH_BI_SOFTMAX (`softmax(scores) @ stack(hs)`): the call of the scores' map (f32[1]
                       rows, numbered as the reduced map's) */
  /* token records (linear_rec.c) */
  bool raw;         /* lookup: the field is an integer (deprel, a byte): its value is the row, checked */
  bool chars;       /* the mean of table param's rows over the token's chars (field: the chars slot) */
  int hx;           /* 1 + the root of a per-token host integer expression (a->hx): its value as an f32[1] */
  /* decoders (linear_dec.c): a step's state read where its row is 0 (the initial state) */
  bool init_zero;   /* zeros there */
  int init_call;    /* 1 + the call whose row is read there (an encoder's last state), component init_comp */
  int init_comp;
  bool att;         /* the component is an attention's query q: the value is softmax(es @ q) @ es over the
                       sentence's rows of the matrix's map, calls att_first .. att_end (SEL_FIRST, SEL_END) */
  int att_first, att_end;
  int partial;      /* 1 + the eager product (linear_eager.c) whose row of the consumer this input reads: the child's
                       state times its part of a weight, computed at an earlier level */
} sh_lin_seg;

/* Token records: a per-token host integer expression over the record's
 * integer fields (`if head == 0 { 0 } else { head - 1 - i }`), evaluated by
 * the executor for each row (linear_rec.c). */
typedef enum sh_lin_hx_op {
  SH_HX_CONST, SH_HX_FIELD, SH_HX_ADD, SH_HX_SUB, SH_HX_MUL, SH_HX_NEG,
  SH_HX_EQ, SH_HX_NE, SH_HX_LT, SH_HX_LE, SH_HX_GT, SH_HX_GE, SH_HX_IF
} sh_lin_hx_op;
typedef struct sh_lin_hx {
  int8_t op;
  int a, b, c;  /* operands (IF: condition, then, else) */
  int32_t v;    /* CONST: the value; FIELD: the arm's field */
  sh_span at;   /* the source expression: a run-time i32 overflow names it, as the interpreter does */
} sh_lin_hx;
#define SH_LIN_MAX_HX 64

typedef struct sh_lin_node {
  sh_lin_op op;
  int fn;          /* UN: sh_builtin (SH_BI_NONE: negation); BIN: token kind */
  int a, b;
  int rank;        /* per row: 1 or 2 */
  int64_t d[2];
  bool batched;    /* depends on the row (else a parameter or constant) */
  bool kid;        /* dependency trees: one value per child of the row's node (a ragged arm's c index) */
  int param;       /* PARAM */
  double c;        /* CONST */
  int64_t lo;      /* SLICE */
  int n_items;     /* CAT */
  int items[SH_LIN_MAX_SEGS];
  int n_segs;      /* IN */
  sh_lin_seg segs[SH_LIN_MAX_SEGS];
  int input;       /* IN: its position among the kernel's inputs */
  bool tok;        /* IN: a row of a sentence's matrix (stack over main's words; coarsen_mat.c) */
  bool init_only;  /* IN: an encoder's last state taken as a decoder's initial state (read by its first step) */
  bool twin;       /* IN of rank 2: also passed as [N, R, C] (a matrix-vector product reads it so;
                      rank-2 values are otherwise flat in the kernel, [M, C] with M = N·R, so a
                      product with a parameter is one GEMM) */
} sh_lin_node;

/* How the inspector binds an arm's pattern: slot s of the arm is a subtree
 * (tree) or a leaf's word (word) of the node at path[0..depth) from the
 * activation's node (child indices). */
typedef struct sh_lin_slot {
  bool word;
  int8_t shift; /* sequences: the word at the activation's position + shift (a neighbour: ws[i - 1]) */
  int8_t anchor; /* sequences: 0 shift from the activation's position, 1 from the sentence's start (ws[0]),
                    2 from its end (ws[len(ws) - 1]: shift -1) */
  int depth;
  int8_t path[8];
  int8_t tf;     /* token records: the token field read (sh_tok_field; SH_TF_WORD, 0, for a word); SH_TF_CHARS: the
                    token's index in the run's columns (its chars are rec->form[...]) */
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
  SH_LIN_SEL_MIRROR, /* the step at len - 1 - p */
  SH_LIN_SEL_KIDS,   /* dependency trees: every child of the node (a ragged arm's map over its children) */
  SH_LIN_SEL_FIRST,  /* a map's first row of the sentence (its rows are the sentence's tokens, in order) */
  SH_LIN_SEL_END     /* a map's row after the sentence's last */
} sh_lin_sel;

typedef struct sh_lin_call {
  int fn;   /* callee: a structural function */
  int slot; /* its tree: a tree slot (-1: the activation's own node) */
  int sel;  /* sh_lin_sel */
} sh_lin_call;

typedef struct sh_lin_arm {
  const sh_pat *pat; /* NULL: the function has no match (one arm) */
  bool ragged;       /* dependency trees: the arm of nodes with children, any count (its kernel takes K: i32[N]) */
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
  int n_hx;                  /* token records: host integer expressions (sh_lin_hx) */
  sh_lin_hx hx[SH_LIN_MAX_HX];
  int n_params;              /* parameters read, in kernel order */
  int params[64];
  char name[64];
  char *src; /* the kernel's source (malloc) */
  size_t src_len;
  sheaf_kernel *k;
  sheaf_kernel_plan **plans; /* by row count (cap_plans entries) */
  struct sh_lin_mat *mat;    /* matrices per sentence: the arm's stages (linear_mat.c), else NULL */
  bool has_mat;              /* the arm mixes a sentence's rows (SCORE/ATT nodes) */
  int32_t cap_plans;
  struct sh_lin_arm *eager;  /* the arm with its products over children's states split by child (linear_eager.c),
                                or NULL */
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
  bool tokmap;     /* sequences: a map over the words bound by a let in main (`let x2 = for i in ...`): one
                     activation per token, rows 1 .. T in sentence order (coarsen.c seq_tokmap) */
  int src;         /* sequences, a step: the list it scans: 0 main's words, else a map's or a scan's fn */
  /* a decoder step (seq2seq.sf, linear_dec.c): its state carries a sentence's matrix (stack of a map over an
     encoder scan, es_fn's rows) as tuple item es_item, not a component; a ctx component holds the query q of
     `softmax(es @ q) @ es` (its readers get the attention); init_fn[k] > 0: the initial state's component k is
     that scan's last state's component init_comp[k] (else zeros) */
  int es_fn, es_item;
  bool ctx_comp[SH_LIN_MAX_COMPS];
  int init_fn[SH_LIN_MAX_COMPS], init_comp[SH_LIN_MAX_COMPS];
  const sh_type *elem; /* a map's element type (NULL: fn's result type) */
} sh_lin_fn;

/* The activations of one (height, function, arm): rows start .. start + count
 * of the function's states; the arrays count entries each. */
typedef struct sh_lin_grp {
  int height, fn, arm;
  int32_t start, count;
  int32_t *fields[SH_LIN_MAX_SLOTS]; /* word ids */
  int32_t *calls[SH_LIN_MAX_CALLS];  /* callee rows (a SH_LIN_SEL_KIDS call: n_kid_rows, the children in order) */
  int32_t *n_kids;                   /* a ragged arm: each row's child count (K) */
  int32_t n_kid_rows;                /* a ragged arm: their sum */
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
  bool share_leaves; /* binary trees: a leaf arm computed from its word alone runs once per distinct word of a
                        batch, its callers reading that row (inspect.c; SHEAF_LINEAR_SHARE_LEAVES=0: off) */
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
  bool records;       /* main takes a list of token records: a sequence whose fields are the tokens' columns */
  const sh_lin_records *rec; /* records: the running batch's columns (linear_rec.c) */
  bool dep;           /* main takes a dependency tree: a function that maps over a node's children has two arms,
                         arm 0 for leaves (no children) and a ragged arm 1 for any child count (coarsen.c) */
  int dep_k;          /* translating: 0 the leaves' arm, -1 the ragged arm */
  bool dep_kids_needed; /* translating: the ragged arm assumed a child (an if on the count, softmax or stack of
                           the children), so leaves keep their arm; else leaves take the ragged arm too (K = 0) */
  bool dep_used;      /* translating: the arm read the node's children */
  int32_t *out_rows;  /* main's rows of each instance (per-token outputs: its length; else 1) */
  float *scratch; /* the executor's inputs */
  size_t scratch_cap;
  float *mat_mem; /* matrices per sentence: the stages' buffers of a run (linear_mat.c) */
  size_t mat_mem_cap;
  /* decoders (linear_dec.c): each state row's attention context, computed
   * once a run (the next step and main's map both read it); rows of one
   * (function, component), the first the run attends from */
  float *dec_ctx;
  uint8_t *dec_done;
  size_t dec_cap; /* rows of dec_ctx and dec_done */
  int dec_fn, dec_comp;
  float *dec_est; /* the first attended matrix's sentences, each transposed ([w][n]) once a run (w % 8 != 0) */
  uint8_t *dec_est_done; /* per row: the sentence starting there is in dec_est */
  size_t dec_est_cap;
  int dec_est_fn;
  float *dec_tmp; /* an attention's scores (and another matrix's transposed rows) */
  size_t dec_tmp_cap;
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
  /* eager children's products (linear_eager.c): the products and their kernels (made at create, shared by the
   * parts), and a run's schedule and buffers (each part its own) */
  struct sh_lin_eager *eager;
  struct sh_lin_eager_run *eager_run;
  bool eager_on; /* the last run takes the arms' eager forms */
};

/* A refusal: "FILE:L:C: " + message into L->why; returns SHEAF_ERR_UNSUPPORTED. */
sheaf_status sh_lin_refuse(sh_lin *L, sh_span at, const char *fmt, ...) SH_PRINTF(3, 4);

/* linear_check.c: control flow that depends on tensor values, then main's
 * input (binary trees only). */
sheaf_status sh_lin_check_program(sh_lin *L);
/* coarsen.c: finds the structural functions from main and builds each
 * arm's DAG. */
sheaf_status sh_lin_coarsen(sh_lin *L);
/* coarsen_emit.c: marks node k of arm a and what it reads live (live[]:
 * a->n_nodes entries, false where not yet marked). */
void sh_lin_mark_live(const sh_lin_arm *a, int k, bool *live);
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
/* linear_reduce.c: the reduction seg sg of row r of group g into dst. */
sheaf_status sh_lin_reduce_rows(sh_lin *L, const sh_lin_arm *a, const sh_lin_grp *g, const sh_lin_seg *sg, int32_t r,
                                float *dst);
/* linear_rec.c: token records. The value of slot sl of the token at index tok (global, in the run's columns) at
 * position q of its sentence; a row's host expression's value; the mean of a table's rows over a token's chars. */
int32_t sh_lin_rec_field(const sh_lin *L, const sh_lin_slot *sl, int32_t tok, int32_t q, sh_word_ids ids);
sheaf_status sh_lin_rec_hx(sh_lin *L, const sh_lin_arm *a, const sh_lin_grp *g, int root, int32_t r, float *dst);
sheaf_status sh_lin_rec_chars(sh_lin *L, const sh_lin_grp *g, const sh_lin_seg *sg, int32_t r, float *dst);
/* linear_dec.c: a decoder's segment (initial state, attention context) of row r of group g into dst; the calls
 * and flags of the segments that read a decoder's state, once every arm is translated. */
/* Forgets the attention contexts of the last run (the inspector, at a run's start). */
void sh_lin_dec_reset(sh_lin *L);
sheaf_status sh_lin_dec_fill(sh_lin *L, const sh_lin_arm *a, const sh_lin_grp *g, const sh_lin_seg *sg, int32_t r,
                             float *dst);
sheaf_status sh_lin_dec_patch(sh_lin *L);
/* The fields a record's data must have (NULL columns an error naming the field). */
sheaf_status sh_lin_rec_check(sh_lin *L, const sh_lin_records *rec);

/* linear_eager.c: eager children's products. prepare (at create): finds the
 * products over a cat of children's states with a parameter weight, makes
 * each arm's eager form and the products' kernels; plan (per run, after the
 * inspector): whether the run takes them, and when each is computed; until:
 * computes those due before the groups of height h; rows: where consumer
 * row `row` of product seg->partial is; free. */
sheaf_status sh_lin_eager_prepare(sh_lin *L);
sheaf_status sh_lin_eager_plan(sh_lin *L);
sheaf_status sh_lin_eager_until(sh_lin *L, int h);
float *sh_lin_eager_rows(sh_lin *L, const sh_lin_seg *seg, int32_t row);
void sh_lin_eager_free_run(sh_lin *L);
void sh_lin_eager_free(sh_lin *L);

/* inspect.c: frees L->scan. */
void sh_lin_scan_free(sh_lin *L);
/* The node of tb under `node` at one child step (unary nodes pass through
 * when the type has no unary constructor) and the constructor of a node. */
int sh_lin_ctor_of(const sh_lin *L, const sh_treebank *tb, int32_t node);
int32_t sh_lin_skip_unary(const sh_lin *L, const sh_treebank *tb, int32_t node);

/* coarsen_mat.c: matrices per sentence in a sequence model's main (a per-token
 * row of `stack(for w in words { ... })` is a per-row vector; attention over
 * the sentence's rows becomes SCORE / SMAX / ATT nodes). Each returns the
 * new node, -1 on a refusal (L->why), or -2 when no operand is a sentence
 * matrix (the caller translates as before). */
int sh_lin_mat_node(sh_lin *L, sh_lin_arm *a, sh_span at, sh_lin_op op, int rank, int64_t d0, int64_t d1,
                    bool batched);
int sh_lin_mat_binary(sh_lin *L, sh_lin_arm *a, sh_span at, int op, int x, int y);
int sh_lin_mat_builtin(sh_lin *L, sh_lin_arm *a, sh_span at, int builtin, const int *args, int n);
/* Whether the nodes made before main's per-token map are rows of sentence matrices (the map reads them). */
bool sh_lin_mat_rows_ok(const sh_lin_arm *a, int n_nodes);
/* linear_mat.c: an arm with matrices per sentence split into stages (dense
 * per-token kernels and ragged per-sentence ones), their source in a->src;
 * compiled; run over main's per-token group; freed. */
sheaf_status sh_lin_mat_emit(sh_lin *L, sh_lin_arm *a);
sheaf_status sh_lin_mat_compile(sh_lin *L, sh_lin_arm *a);
sheaf_status sh_lin_mat_run(sh_lin *L, const sh_lin_grp *g);
void sh_lin_mat_free(sh_lin_arm *a);
int sh_lin_mat_n_kernels(const sh_lin_arm *a);
/* linear.c: copies input node n of arm a for row r of group g to dst (tables' rows, callees' states). */
sheaf_status sh_lin_fill_input(sh_lin *L, const sh_lin_arm *a, const sh_lin_grp *g, const sh_lin_node *n, int32_t r,
                               float *dst);

#endif
