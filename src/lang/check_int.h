/*
 * check_int.h — state shared by the checker's files (check.c: declarations
 * and signatures; check_expr.c: expressions and patterns; check_builtin.c;
 * check_match.c: exhaustiveness; recursion.c). Internal to src/lang.
 */
#ifndef SH_LANG_CHECK_INT_H
#define SH_LANG_CHECK_INT_H

#include "lang/check.h"

typedef enum gkind { G_NONE, G_PARAM, G_FN, G_CTOR, G_SIZE, G_BUILTIN, G_KERNEL } gkind;

/* A global of the value namespace, indexed by symbol. */
typedef struct global {
  gkind kind;
  sh_span span;
  union {
    sh_param_decl *param;
    sh_fn *fn;
    sh_ctor *ctor;
    uint32_t size_var;
    sh_builtin builtin;
    sh_kernel_decl *kernel;
  } u;
} global;

typedef struct scope_entry {
  sh_local *local;
  uint32_t prev; /* previous binding of the same symbol (entry index + 1), or 0 */
} scope_entry;

/* A call from one function to another (for the recursion check). */
typedef struct call_edge {
  sh_fn *from, *to;
  sh_span at;
  bool structural; /* passes a strict part of one of `from`'s parameters */
} call_edge;

/* How unknown size names in a type are treated. */
typedef enum size_mode {
  SIZES_DECLARE_GLOBAL, /* parameter shapes: declare them (values from the weights) */
  SIZES_DECLARE_LOCAL,  /* function signatures: the function is generic in them */
  SIZES_KNOWN           /* elsewhere: they must exist */
} size_mode;

typedef struct checker {
  sh_module *m;
  sh_lang_pool *pool;
  sh_diags *d;
  sh_sizevars *sv;
  const sh_symtab *syms;
  bool nomem;
  uint32_t n_syms;
  global *globals;   /* [n_syms + 1] */
  sh_adt **types;    /* [n_syms + 1]: the type namespace */
  uint32_t *sym_top; /* [n_syms + 1]: innermost local binding (scope index + 1) */
  scope_entry *scope;
  int n_scope, cap_scope;
  sh_fn *fn; /* being checked */
  int cap_locals;
  call_edge *edges;
  int n_edges, cap_edges;
  long match_budget;
  uint32_t dyn_var; /* the module's run-time list length "?" (0: not yet made) */
} checker;

void *c_alloc(checker *c, size_t size);
void c_error(checker *c, sh_span at, const char *fmt, ...) SH_PRINTF(3, 4);
/* A type as text for messages (a few rotating buffers). */
const char *c_ty(checker *c, const sh_type *t);

/* Resolves a type expression; unknown size names per mode. */
sh_type *c_resolve_type(checker *c, sh_texpr *tx, size_mode mode);
/* A size name: a global size or a size parameter of the current function; 0 if none. */
uint32_t c_find_size(checker *c, sh_sym name);
/* Evaluates a size expression (INT, NAME, + - *). false: error reported. */
bool c_size_of(checker *c, sh_ast *e, size_mode mode, sh_size *out);

/* Local scopes. */
sh_local *c_new_local(checker *c, sh_sym name, sh_span span, sh_type *type);
sh_local *c_lookup_local(checker *c, sh_sym name);
static inline int c_scope_mark(const checker *c) { return c->n_scope; }
void c_scope_pop(checker *c, int mark);

/* Reports "CONTEXT: expected X but got Y" unless got unifies with expected. */
bool c_expect(checker *c, sh_span at, const sh_type *expected, const sh_type *got,
              const char *context);

sh_type *c_expr(checker *c, sh_ast *e);
sh_type *c_host_floats_as(checker *c, const sh_type *want, sh_ast *e, sh_type *t);
/* A call of a builtin (check_builtin.c); e->builtin is set. */
sh_type *c_builtin(checker *c, sh_ast *e);
/* A call of user function f with argument expressions args[0..n) whose
 * types are given (NULL: check them here); `via` names the caller for messages. */
sh_type *c_call_fn(checker *c, sh_ast *site, sh_fn *f, sh_ast **args, sh_type **types, int n);
static inline bool c_is_err(const sh_type *t) { return t->kind == SH_TY_ERROR; }
/* An f32[1] tensor (a scalar that broadcasts). */
bool c_is_scalar1(checker *c, const sh_type *t);
/* Binds a pattern against a value of type t. refutable: a match arm (else a
 * let / for, which must be irrefutable). subterm: the value is (a part of)
 * parameter k of the function (-1: not). */
void c_bind_pattern(checker *c, sh_pat *q, sh_type *t, bool refutable, int subterm, bool strict);
/* Reports a non-exhaustive match (check_match.c). */
void c_check_exhaustive(checker *c, sh_ast *match);
/* Records a call edge (for the recursion check). */
void c_add_edge(checker *c, sh_fn *to, sh_span at, bool structural);
/* Reports recursive calls that are not structural (recursion.c). */
void c_check_recursion(checker *c);
/* Checks every kernel declaration into its sh_kernel (check_kernel.c). */
void c_check_kernels(checker *c);
/* A call of kernel kd from a function, its arguments' types given
 * (check_kcall.c); sets e->call = SH_CALL_KERNEL. */
sh_type *c_call_kernel(checker *c, sh_ast *e, struct sh_kernel_decl *kd, sh_type **types);
/* Whether an argument expression is a strict part of a parameter. */
bool c_is_subterm(checker *c, const sh_ast *e);
/* The parameter (index k) a NAME expression's value comes from (-1: none),
 * and whether it is a strict part of it. */
int c_origin(checker *c, const sh_ast *e, bool *strict);

#endif
