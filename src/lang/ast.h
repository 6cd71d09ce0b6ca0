/*
 * ast.h — the syntax tree of a Sheaf model, which the checker annotates in
 * place into the typed program that lowering consumes.
 *
 * Every node lives in the module's pool (pool.h) and dies with it. The
 * parser fills the syntax; the checker fills the fields marked "(checker)":
 * the type of every expression and pattern, what each name and call refers
 * to, the local-variable slots of each function, and the sizes of slices.
 * After a successful check there are no SH_TY_ERROR types, every name is
 * resolved and every match is exhaustive, so lowering needs no checks of
 * its own. A failed parse leaves SH_EX_ERROR / SH_PAT_ERROR / SH_TX_ERROR
 * nodes where the syntax was broken; the tree is always well formed.
 */
#ifndef SH_LANG_AST_H
#define SH_LANG_AST_H

#include "lang/types.h"

#define SH_LANG_MAX_DEPTH 256 /* nesting of expressions, types and patterns */

typedef struct sh_ast sh_ast;
typedef struct sh_pat sh_pat;
typedef struct sh_fn sh_fn;

/* ------------------------------------------------------------ type syntax */

typedef enum sh_texpr_kind {
  SH_TX_ERROR, SH_TX_I32, SH_TX_BOOL, SH_TX_TENSOR, SH_TX_TUPLE, SH_TX_LIST, SH_TX_NAME,
  SH_TX_F32 /* a host float: `f32` without a shape (item's result) */
} sh_texpr_kind;

typedef struct sh_texpr {
  sh_texpr_kind kind;
  sh_span span;
  int n;                   /* TENSOR: rank; TUPLE: arity */
  sh_ast **dims;          /* TENSOR: size expressions (INT, NAME, + - *) */
  struct sh_texpr **elems; /* TUPLE items; LIST: elems[0] */
  sh_sym *elem_names;      /* TUPLE: names of the items, (h: f32[H], c: f32[H]); NULL or 0: none */
  sh_sym name;             /* NAME: an ADT */
} sh_texpr;

/* ------------------------------------------------------------ declarations */

typedef struct sh_ctor {
  sh_sym name;
  sh_span span;
  int index; /* in its ADT */
  struct sh_adt *adt;
  int n_fields;
  sh_sym *field_names; /* 0 for an unnamed field */
  sh_texpr **field_tx;
  sh_type **field_types; /* (checker) */
} sh_ctor;

typedef struct sh_adt {
  sh_sym name;
  sh_span span;
  int n_ctors;
  sh_ctor *ctors;
  sh_type *type; /* (checker) */
} sh_adt;

/* How a parameter is drawn without a weights file (`param W: T = init`,
 * `= init + identity`): the runtime's sheaf_init, or the binder's default. */
typedef enum sh_param_init {
  SH_PINIT_DEFAULT = 0, /* tables normal, matrices Glorot, vectors zero */
  SH_PINIT_GLOROT, SH_PINIT_NORMAL, SH_PINIT_ZEROS, SH_PINIT_ONES,
  SH_PINIT_IDENTITY,     /* identity blocks (SHEAF_INIT_IDENTITY) */
  SH_PINIT_IDENTITY_ROWS /* every row an n x n identity (SHEAF_INIT_IDENTITY_ROWS) */
} sh_param_init;
#define SH_PINIT_COUNT (SH_PINIT_IDENTITY_ROWS + 1)

/* The source name of an initializer ("glorot", ...; "default" for DEFAULT). */
const char *sh_param_init_name(sh_param_init i);

typedef struct sh_param_decl {
  sh_sym name;
  sh_span span;
  int index; /* declaration order: the runtime's parameter id - 1 */
  sh_texpr *tx;
  sh_type *type;         /* (checker) f32 tensor of rank 1 or 2 */
  sh_param_init init;    /* DEFAULT when not given */
  sh_param_init plus;    /* DEFAULT, or an identity added to a drawn `init` */
  sh_span init_span;
} sh_param_decl;

typedef struct sh_sizedecl {
  sh_sym name;
  sh_span span;
  bool has_value;
  int64_t value;
  uint32_t var; /* (checker) its size variable */
} sh_sizedecl;

/* A local variable of a function: a parameter, or bound by let, match,
 * for. Slot `index` is unique within its function (0 .. n_locals-1). */
typedef struct sh_local {
  sh_sym name;
  sh_span span;
  int index;
  sh_type *type;
  int subterm_of; /* (checker) >= 0: a strict part of ADT parameter k (structural recursion) */
  int alias_of;   /* (checker) >= 0: parameter k itself, or a tuple component of it, under
                     another name (`let u = t;`): taking it apart gives strict parts of k */
} sh_local;

struct sh_fn {
  sh_sym name;
  sh_span span;
  int index;
  int n_params;
  sh_local **params;
  sh_texpr **param_tx;
  sh_texpr *ret_tx;
  sh_ast *body;
  /* (checker) */
  sh_type **param_types;
  sh_type *ret_type;
  int n_locals;
  sh_local **locals; /* every local, by slot */
  int n_size_params; /* the sizes it is generic in (LOCAL size variables) */
  uint32_t *size_params;
  bool recursive; /* in a cycle of the call graph */
  bool checked;
};

/* ------------------------------------------------------------- patterns */

typedef enum sh_pat_kind {
  SH_PAT_ERROR, SH_PAT_WILD, SH_PAT_VAR, SH_PAT_TUPLE, SH_PAT_CTOR, SH_PAT_INT, SH_PAT_BOOL
} sh_pat_kind;

struct sh_pat {
  sh_pat_kind kind;
  sh_span span;
  sh_type *type; /* (checker) */
  sh_sym name;   /* VAR: the variable; CTOR: the constructor */
  int n;         /* TUPLE, CTOR: sub-patterns */
  sh_pat **items;
  int64_t ival;      /* INT (BOOL: 0 or 1) */
  sh_local *local;   /* (checker) VAR */
  sh_ctor *ctor;     /* (checker) CTOR */
};

/* ----------------------------------------------------------- expressions */

typedef enum sh_ast_kind {
  SH_EX_ERROR,
  SH_EX_INT,    /* ival */
  SH_EX_FLOAT,  /* fval: an f32[1] constant */
  SH_EX_BOOL,   /* ival 0/1 */
  SH_EX_NAME,   /* name, res */
  SH_EX_TUPLE,  /* items */
  SH_EX_LIST,   /* items (non-empty list literal) */
  SH_EX_UNARY,  /* op (MINUS, BANG), a */
  SH_EX_BINARY, /* op, a, b */
  SH_EX_CALL,   /* name (callee), items (arguments), call */
  SH_EX_INDEX,  /* a[b] */
  SH_EX_SLICE,  /* a[b:c], lo/hi sizes */
  SH_EX_BLOCK,  /* lets, a (value) */
  SH_EX_IF,     /* a (cond), b (then), c (else) */
  SH_EX_MATCH,  /* a (scrutinee), arms */
  SH_EX_FOR,    /* pat in a [.. b] { c } */
  SH_EX_PHASE,  /* phase ival { a } */
  SH_EX_WHILE   /* while lets[0] (the state: pat [: tx] = init); a (cond) max b { c } */
} sh_ast_kind;

/* What a name refers to (checker). */
typedef enum sh_res_kind {
  SH_RES_NONE, SH_RES_LOCAL, SH_RES_PARAM, SH_RES_SIZE, SH_RES_FN, SH_RES_CTOR
} sh_res_kind;

/* What a call calls (checker). */
typedef enum sh_call_kind { SH_CALL_NONE, SH_CALL_FN, SH_CALL_CTOR, SH_CALL_BUILTIN, SH_CALL_KERNEL } sh_call_kind;

typedef enum sh_builtin {
  SH_BI_NONE = 0,
  /* the runtime's ops with a builtin name (src/kernels/ops.def): elementwise
   * f32[s] -> f32[s] (unary) or two tensors of one shape (or an f32[1]);
   * last-axis reductions and normalizations */
#define SH_OP(ID, name, cls, arity, form, act)
#define SH_OP_LANG(ID, name, cls, arity, form, act, builtin) SH_BI_##ID,
#include "kernels/ops.def"
  /* elementwise, written with the ops above: min(a, b), max(a, b) (max(x) is
   * the reduction), clamp(x, lo, hi); float(i): an i32 as f32[1] */
  SH_BI_MIN, SH_BI_CLAMP, SH_BI_FLOAT,
  /* shapes */
  SH_BI_CAT, SH_BI_RESHAPE, SH_BI_ZEROS,
  /* fused cells */
  SH_BI_LSTM_CELL, SH_BI_TREE_LSTM_CELL,
  /* lists */
  SH_BI_LEN, SH_BI_REV, SH_BI_MAP, SH_BI_FOLD, SH_BI_SCAN, SH_BI_PUSH,
  SH_BI_SET, SH_BI_POP, SH_BI_TOPK, /* set(xs, i, x), pop(xs), topk(fs, k) */
  /* tensor to host: the instance waits for the value (a wait point) */
  SH_BI_ARGMAX, SH_BI_ITEM, SH_BI_VALUES,
  SH_BI_COUNT_
} sh_builtin;

typedef struct sh_let {
  sh_span span;
  sh_pat *pat;
  sh_texpr *tx; /* optional annotation */
  sh_ast *value;
} sh_let;

typedef struct sh_arm {
  sh_pat *pat;
  sh_ast *body;
} sh_arm;

struct sh_ast {
  sh_ast_kind kind;
  sh_span span;
  int depth;     /* nesting depth of this subtree (parser; bounded) */
  sh_type *type; /* (checker) */
  int op;        /* sh_tok_kind of UNARY / BINARY */
  int64_t ival;
  double fval;
  sh_sym name; /* NAME; CALL: the callee */
  sh_span name_span;
  sh_ast *a, *b, *c;
  int n;          /* TUPLE, LIST, CALL: items; BLOCK: lets; MATCH: arms */
  sh_ast **items;
  sh_let *lets;
  sh_arm *arms;
  sh_pat *pat; /* FOR */
  /* (checker) */
  sh_res_kind res;
  union {
    sh_local *local;
    sh_param_decl *param;
    uint32_t size_var;
    sh_fn *fn;
    sh_ctor *ctor;
    struct sh_kernel_decl *kernel; /* CALL of a kernel (check_kcall.c) */
  } ref;                /* NAME: what res names; CALL: fn / ctor / kernel */
  sh_call_kind call;    /* CALL */
  sh_builtin builtin;   /* CALL of a builtin */
  sh_fn *fn_arg;        /* CALL of map/fold/scan: the function applied */
  sh_size *lo, *hi;     /* SLICE: bounds (pool) */
  bool lookup;          /* INDEX: a row of a parameter table (embedding) */
  bool param_rhs;       /* BINARY '@': right operand is a parameter (affine) */
};

/* --------------------------------------------------------- kernel syntax */

/* `kernel` declarations (tensor comprehensions, docs/LANGUAGE.md "Kernels"):
 * their syntax only. sh_check turns each into a checked sh_kernel
 * (kernel.h), the form the code generator reads; these nodes are not
 * annotated. Index arguments and right-hand sides are ordinary expressions
 * (sh_ast) that the kernel checker restricts. */

typedef struct sh_ksyn_type {
  sh_span span;
  bool i32;       /* i32[...]; else f32[...] */
  int n;          /* rank (0: a scalar, f32[]) */
  sh_ast **dims;  /* size expressions; a CALL L(b) is a ragged extent */
} sh_ksyn_type;

typedef struct sh_ksyn_param {
  sh_sym name; /* 0: the unnamed result, `-> f32[N]` */
  sh_span span;
  sh_ksyn_type *tx;
} sh_ksyn_param;

/* `where i in lo..hi` */
typedef struct sh_ksyn_range {
  sh_sym var;
  sh_span span; /* the variable */
  sh_ast *lo, *hi;
} sh_ksyn_range;

/* The statement operators: `=`, `+=`, `*=`, `max=`, `min=` (init: with `!`). */
typedef enum sh_ksyn_op { SH_KSYN_ASSIGN, SH_KSYN_ADD, SH_KSYN_MUL, SH_KSYN_MAX, SH_KSYN_MIN } sh_ksyn_op;

typedef struct sh_ksyn_stmt {
  sh_span span;     /* the whole statement */
  sh_sym lhs;
  sh_span lhs_span; /* the tensor's name */
  int n_idx;
  sh_ast **idx;     /* the left-hand side's index arguments */
  sh_ksyn_op op;
  bool init;        /* `+=!`, ...: the reduction starts from its identity */
  sh_span op_span;
  sh_ast *rhs;
  int n_where;
  sh_ksyn_range *where;
} sh_ksyn_stmt;

struct sh_kernel; /* kernel.h */

typedef struct sh_kernel_decl {
  sh_sym name;
  sh_span span;
  int index;
  int n_params;
  sh_ksyn_param *params;
  bool named_results;  /* `-> (a: T, b: T)`; else one unnamed result */
  int n_results;
  sh_ksyn_param *results;
  int n_stmts;
  sh_ksyn_stmt *stmts;
  struct sh_kernel *checked; /* (checker) NULL when it has errors */
  bool called;               /* (checker) a function calls it (check_kcall.c) */
} sh_kernel_decl;

/* --------------------------------------------------------------- module */

typedef enum sh_decl_kind { SH_DECL_TYPE, SH_DECL_PARAM, SH_DECL_SIZE, SH_DECL_FN, SH_DECL_KERNEL } sh_decl_kind;

typedef struct sh_decl {
  sh_decl_kind kind;
  union {
    sh_adt *adt;
    sh_param_decl *param;
    sh_sizedecl *size;
    sh_fn *fn;
    sh_kernel_decl *kernel;
  } u;
} sh_decl;

/* A parsed (and, after sh_check, checked) source file. */
typedef struct sh_module {
  sheaf_ctx *ctx;
  sh_lang_pool pool;
  sh_symtab syms;
  sh_sizevars sizes;
  sh_diags diags;
  sh_tokens toks;
  int n_decls;
  sh_decl *decls;
  int n_adts, n_params, n_sizes, n_fns, n_kernels;
  sh_adt **adts;
  sh_param_decl **params;
  sh_sizedecl **size_decls;
  sh_fn **fns;
  sh_kernel_decl **kernels;
  struct sh_kernel **kernels_checked; /* (checker) those without errors, in order */
  bool kernels_only; /* sh_kernel_source_compile: kernel and size declarations only */
  sh_fn *main; /* (checker) */
  int n_waits;         /* (checker) argmax / item calls: where an instance waits for a value */
  const sh_ast **waits; /* those calls, in the order checked (pool) */
  const struct sh_input_shape *main_input; /* (checker) what main takes: sh_check_main_input */
} sh_module;

/* Helpers for the parser and tests. */
sh_ast *sh_ast_new(sh_lang_pool *p, sh_ast_kind kind, sh_span span);
/* An S-expression dump of the syntax ("(fn f (x i32) i32 (+ x 1))"), for
 * tests and debugging. */
void sh_ast_dump(sh_buf *b, const sh_module *m);
void sh_ast_dump_expr(sh_buf *b, const sh_module *m, const sh_ast *e);

#endif
