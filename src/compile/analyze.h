/*
 * analyze.h — static analyses of a checked model (ACRoBat's, over the typed
 * AST): parameter taint, static depth, ghost ops, host-only scalar code,
 * tensor-dependent control-flow points and coarsening regions, and the
 * report `sheaf check --analyses` prints.
 *
 * sh_analyze numbers every expression of every function (a node table,
 * ids in pre-order), classifies each (a graph op, a tensor that is no op,
 * host work, a call, control flow) and runs the passes:
 *   - flow (analyze_flow.c): one forward pass per function giving every
 *     node its taint (what its value depends on) and its static depth
 *     (depth = max(input depths) + 1 from the function's inputs, symbolic
 *     in the depths of recursive calls' results R1, R2, ...);
 *   - taint (analyze_taint.c): the maximal param-only ops (hoistable out of
 *     the per-instance code) and the `@` with a parameter operand;
 *   - depth (analyze_depth.c): per function and per match arm, the ops'
 *     depths; the ghost ops that would align the arms of an if / match;
 *   - host (analyze_host.c): host-only expressions per function and the
 *     control points (wait points of the checker plus if / while / match /
 *     for on values read from tensors);
 *   - regions (analyze_regions.c): maximal straight-line runs of ops.
 * Everything lives in the result's pool; the module must outlive it.
 * Nothing in lang/ includes this header.
 */
#ifndef SH_COMPILE_ANALYZE_H
#define SH_COMPILE_ANALYZE_H

#include "lang/check.h"

/* ------------------------------------------------------------ node table */

typedef enum sh_an_class {
  SH_AN_PLUMB, /* no work: names of locals, tuples, blocks, host literals */
  SH_AN_LEAF,  /* a tensor that is no op: a parameter, an f32 constant, zeros(n) */
  SH_AN_OP,    /* one graph op (a `@` folded into its sum counts with the sum) */
  SH_AN_WAIT,  /* argmax / item / values: a tensor read back by the host */
  SH_AN_HOST,  /* host work: i32/bool/f32 arithmetic, lists, ADT values */
  SH_AN_CALL,  /* a call of a model function */
  SH_AN_CTRL   /* if, match, for, while, phase */
} sh_an_class;

typedef enum sh_an_host_kind { SH_AN_H_NONE, SH_AN_H_SCALAR, SH_AN_H_F32, SH_AN_H_LIST, SH_AN_H_ADT } sh_an_host_kind;

/* What a value depends on (bits). A value is param-only ("tainted") when it
 * has PARAM and neither DATA nor TVAL. */
enum { SH_AN_T_CONST = 1, SH_AN_T_PARAM = 2, SH_AN_T_DATA = 4, SH_AN_T_TVAL = 8 };

#define SH_AN_MAX_SYM 8 /* recursive-call symbols of one function; more: dynamic */

/* A static depth: max(c, R1 + off[0], ...) over the symbols present
 * (off >= 0); c = -1 and no symbol: no op yet (an input, a parameter, a host
 * value); dyn: depends on a run-time count (a loop, a fold). */
typedef struct sh_an_depth {
  int16_t c;
  int16_t off[SH_AN_MAX_SYM]; /* -1: symbol absent */
  bool dyn;
} sh_an_depth;

typedef struct sh_an_node {
  const sh_ast *e;
  int32_t parent; /* -1 at a function body */
  int32_t fn;     /* index in m->fns */
  uint8_t cls;    /* sh_an_class */
  uint8_t host;   /* sh_an_host_kind, for SH_AN_HOST */
  uint8_t taint;  /* SH_AN_T_* (flow) */
  bool fused;     /* a `x @ W` inside a sum: one affine with it */
  bool seen;      /* reached by the flow pass */
  sh_an_depth depth; /* of the node's value (flow); an op: where it lands */
} sh_an_node;

/* ---------------------------------------------------------------- results */

/* A maximal param-only op. */
typedef struct sh_an_hoist {
  int32_t node;
  bool hoistable;  /* computable once per batch, out of the per-instance code */
  const char *why; /* when not hoistable */
} sh_an_hoist;

/* A `@`: which operand is a parameter (pre-packed once) or param-only. */
typedef struct sh_an_matmul {
  int32_t node;
  bool rhs_param, lhs_param; /* a parameter by name */
  bool rhs_tainted;          /* a param-only expression (packable once per batch) */
} sh_an_matmul;

/* A recursive call whose result's depth is the symbol R<index+1>. */
typedef struct sh_an_sym {
  int32_t node; /* the call (or map) */
} sh_an_sym;

/* Per function. */
typedef struct sh_an_fn {
  int n_sym;
  sh_an_sym sym[SH_AN_MAX_SYM];
  int n_ops;
  int n_host[5]; /* by sh_an_host_kind */
} sh_an_fn;

/* An if / match producing tensors: each arm's result depth and the ghost
 * ops that would align it with the deepest arm (-1 when not static). */
typedef struct sh_an_ghost {
  int32_t node;
  int n_arms;
  int32_t *arm_node; /* each arm's body */
  int *pad;
  bool aligned_statically; /* every pad known */
} sh_an_ghost;

/* A tensor-dependent control-flow point. */
typedef struct sh_an_ctl {
  int32_t node;
  bool wait; /* an argmax / item / values (m->waits); else an if / while / match / for on one */
} sh_an_ctl;

typedef enum sh_an_in_kind { SH_AN_IN_PARAM, SH_AN_IN_REC, SH_AN_IN_OTHER } sh_an_in_kind;

typedef struct sh_an_input {
  uint8_t kind; /* sh_an_in_kind */
  const char *name;
} sh_an_input;

/* A maximal straight-line run of ops in one arm / block (a candidate fused
 * kernel); callees that are straight-line are inlined into it. */
typedef struct sh_an_region {
  int32_t fn;
  int32_t scope;        /* the node whose body it is in: the fn body, an arm, a branch, a loop body */
  const char *label;    /* "fn tree arm Node" */
  int n_ops;
  int32_t *ops;         /* in evaluation order (callee nodes when inlined) */
  int n_in, n_out;
  sh_an_input *in;
  const char **out;
} sh_an_region;

typedef struct sh_analyses {
  const sh_module *m;
  sh_lang_pool pool;
  int n_nodes;
  sh_an_node *nodes;
  int32_t *fn_root; /* per fn: its body's node */
  sh_an_fn *fns;
  int n_hoist, n_matmul, n_ghost, n_ctl, n_regions;
  sh_an_hoist *hoist;
  sh_an_matmul *matmul;
  sh_an_ghost *ghost;
  sh_an_ctl *ctl;
  sh_an_region *regions;
  /* (private) pointer -> id map */
  int32_t *map;
  uint32_t map_cap;
  bool nomem;
} sh_analyses;

/* Runs every analysis on a checked module. SHEAF_OK, or SHEAF_ERR_NOMEM /
 * SHEAF_ERR_INVALID_ARG (m NULL or not checked). Free with
 * sh_analyses_free whatever the result. */
sheaf_status sh_analyze(const sh_module *m, sh_analyses *a);
void sh_analyses_free(sh_analyses *a);

/* Appends the report `sheaf check --analyses` prints (one block per
 * analysis) to out; verbose adds the position of every host-only
 * expression. SHEAF_OK; SHEAF_ERR_NOMEM (out's status included);
 * SHEAF_ERR_INVALID_ARG when a holds no analyses. */
sheaf_status sh_analyses_report(const sh_analyses *a, sh_buf *out, bool verbose);

/* The id of an expression of one of the module's functions; -1 if none. */
int32_t sh_an_id(const sh_analyses *a, const sh_ast *e);
/* Child expressions in evaluation order (n at most *cap; returns the count). */
int sh_an_children(const sh_ast *e, const sh_ast **out, int cap);
bool sh_an_tainted(uint8_t taint);
void sh_an_depth_print(sh_buf *b, const sh_an_depth *d);

/* The passes (run by sh_analyze, in this order). */
void sh_an_flow(sh_analyses *a);
void sh_an_taint(sh_analyses *a);
void sh_an_depth_pass(sh_analyses *a);
void sh_an_host(sh_analyses *a);
void sh_an_regions(sh_analyses *a);

/* Internal helpers shared by the passes. */
void *sh_an_alloc(sh_analyses *a, size_t n);
const char *sh_an_strf(sh_analyses *a, const char *fmt, ...) SH_PRINTF(2, 3);
/* The label of an arm's pattern ("Leaf", "Node(l, Leaf(b))", "_"). */
void sh_an_pat_print(sh_buf *b, const sh_module *m, const sh_pat *p);

#endif
