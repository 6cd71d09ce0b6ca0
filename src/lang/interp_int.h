/*
 * interp_int.h — the interpreter's state and the helpers its files share:
 * interp.c (evaluation, calls, loops), interp_builtin.c (the builtins) and
 * interp_input.c (a data instance to the value main takes).
 */
#ifndef SH_LANG_INTERP_INT_H
#define SH_LANG_INTERP_INT_H

#include "lang/interp.h"

struct sh_interp {
  const sh_module *m;
  sheaf_ctx *ctx;
  const sh_lang_bind *bind;
  int64_t *sv;     /* size values by variable id (globals fixed, locals bound per call) */
  sh_lang_pool pool;    /* host values of the current batch (region generation 0) */
  sh_lang_pool *cur;    /* where values are made now: pool, or a while loop's region */
  uint64_t cur_gen;     /* cur's generation (sh_agg.gen) */
  uint64_t next_gen;    /* the last generation handed out (regions of while loops) */
  sheaf_graph *g;
  int phase;
  int depth;       /* calls in progress */
  sheaf_status err;
  const sh_input_shape *in; /* what main takes: the checker's (sh_check_main_input) */
  struct sh_hostprog *hp;   /* the compiled host program (hostprog.h) */
  bool vm;                  /* run it (else the walker runs everything) */
  const sh_lang_region **region_of; /* by sh_fn index, or NULL: sh_interp_set_regions */
};

/* Out-of-line helpers of eval (it stays a small dispatcher whose frame,
 * paid on every level of the recursion, is small). */
#if defined(__GNUC__) || defined(__clang__)
#define SH_NOINLINE __attribute__((noinline))
#else
#define SH_NOINLINE
#endif

static const sh_value v_none = {0};

static inline sh_value mk_int(int32_t i) { return (sh_value){.kind = SH_V_INT, .i = i}; }
static inline sh_value mk_word(int32_t i) { return (sh_value){.kind = SH_V_INT, .word = 1, .i = i}; }
static inline sh_value mk_bool(bool b) { return (sh_value){.kind = SH_V_BOOL, .i = b}; }
static inline sh_value mk_f32(double f) { return (sh_value){.kind = SH_V_F32, .f = f}; }
static inline sh_value mk_tensor(sheaf_expr t) { return (sh_value){.kind = SH_V_TENSOR, .t = t}; }
static inline sh_value mk_agg(uint8_t kind, sh_agg *a) {
  return a ? (sh_value){.kind = kind, .agg = a} : v_none;
}

/* An aggregate of n values in the current region: zeroed, or (raw) for a
 * caller that writes every item before the aggregate can be read; NULL
 * with ip->err set when out of memory. */
sh_agg *sh_interp_agg_alloc(sh_interp *ip, int32_t tag, int32_t n, bool raw);
static inline sh_agg *agg_new(sh_interp *ip, int32_t tag, int32_t n) {
  return sh_interp_agg_alloc(ip, tag, n, false);
}
static inline sh_agg *agg_new_raw(sh_interp *ip, int32_t tag, int32_t n) {
  return sh_interp_agg_alloc(ip, tag, n, true);
}

/* The instance's first error (later ones return it unchanged): a message;
 * a formatted one; one at a source position, "FILE:LINE:COL: error: ...";
 * sh_check_budget for a size the program computed at e. */
sheaf_status sh_interp_fail_msg(sh_interp *ip, const char *msg);
sheaf_status sh_interp_failf(sh_interp *ip, const char *fmt, ...) SH_PRINTF(2, 3);
sheaf_status sh_interp_fail_at(sh_interp *ip, sh_span at, const char *fmt, ...) SH_PRINTF(3, 4);
sheaf_status sh_interp_budget_at(sh_interp *ip, const sh_ast *e, double bytes, const char *fmt, ...)
    SH_PRINTF(4, 5);

/* interp.c: an expression's value; a call of f; a size's value now. */
sh_value sh_interp_eval(sh_interp *ip, const sh_ast *e, sh_value *fr);
sh_value sh_interp_call(sh_interp *ip, const sh_fn *f, const sh_value *args, const sh_ast *site);
int64_t sh_interp_size(const sh_interp *ip, const sh_size *s);

/* interp.c: `t[i]` where t is the parameter table of e (e->lookup: a word
 * or a row number, checked); `x[i]` of a list, a matrix (a row) or a
 * vector (an element), checked. The walker and the VM (hostvm.c) share
 * them, so their checks and messages are one. */
/* The terms of a chain of '+' into t (from n; -1 when more than cap), and
 * whether two types are the same tensor shape: how the walker's tensor_sum
 * and the host program's compiler (hostprog.c) read `x @ W + h @ U + b`. */
#define SH_INTERP_SUM_MAX 8 /* terms of a '+' chain lowered at once */
int sh_interp_sum_terms(const sh_ast *e, const sh_ast **t, int n, int cap);
bool sh_interp_same_type(const sh_type *a, const sh_type *b);
sh_value sh_interp_lookup(sh_interp *ip, const sh_ast *e, sh_value i);
sh_value sh_interp_index(sh_interp *ip, const sh_ast *e, sh_value x, sh_value i);
/* Host scalar `a op b` (f32 in double; i32 exact in int64 and checked at
 * e), and the i32 result check of r = a op b: the walker's binary() and
 * unary minus and the VM's HP_FBIN / HP_IBIN / HP_INEG. */
sh_value sh_interp_f32_binary(sh_interp *ip, int op, double a, double b);
sh_value sh_interp_i32_binary(sh_interp *ip, const sh_ast *e, int op, int64_t a, int64_t b);
sh_value sh_interp_int_result(sh_interp *ip, const sh_ast *e, int64_t a, const char *op, int64_t b, int64_t r);

/* interp_builtin.c: a call of a builtin (e->builtin); the same once its
 * arguments are in a[0..4) (for the builtins sh_hostprog_compile lowers
 * to HP_BI: not lstm_cell, tree_lstm_cell, the list builtins, cat, the
 * wait points, push); the runtime builder of a one-op builtin (NULL if
 * none). */
sh_value sh_interp_builtin(sh_interp *ip, const sh_ast *e, sh_value *fr);
sh_value sh_interp_builtin_args(sh_interp *ip, const sh_ast *e, sh_value *a);
sh_value sh_interp_builtin_list_args(sh_interp *ip, const sh_ast *e, const sh_value *a);
typedef sheaf_expr (*sh_builder1)(sheaf_graph *, sheaf_expr);
typedef sheaf_expr (*sh_builder2)(sheaf_graph *, sheaf_expr, sheaf_expr);
sh_builder1 sh_interp_builder1(sh_builtin b);
sh_builder2 sh_interp_builder2(sh_builtin b);

/* Room a call must leave on the stack: the callee's own frames, the
 * builders it calls, and ASan's larger frames. */
#define SH_INTERP_STACK_RESERVE ((size_t)1 << 20)

/* interp.c: f's body run on fr (parameters bound; frames hold the host
 * program's registers too) as a call at site (NULL: main): the stack's
 * room checked, generic sizes bound, the host program or the walker. */
/* A while loop e (its bound n and initial state st evaluated): its
 * regions, bound and final copy as interp.c eval_while describes; cond
 * binds the state st and evaluates the condition, body the next state
 * (the walker's, or the host program's code for them; u is theirs). */
typedef sh_value (*sh_while_step)(sh_interp *ip, const sh_ast *e, sh_value *fr, sh_value st, const void *u);
sh_value sh_interp_while(sh_interp *ip, const sh_ast *e, sh_value n, sh_value st, sh_value *fr,
                         sh_while_step cond, sh_while_step body, const void *u);
sh_value sh_interp_run_fn(sh_interp *ip, const sh_fn *f, sh_value *fr, const sh_ast *site);

#endif
