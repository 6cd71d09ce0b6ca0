/*
 * types.h — types of the model language and symbolic sizes.
 *
 * A size (a tensor dimension) is a polynomial with integer coefficients over
 * size variables, kept in a canonical form: terms sorted by degree
 * (highest first) then by variable, no zero coefficients, so two sizes are
 * equal exactly when their canonical forms are. `2*H`, `H + H` and `(H)*2`
 * all normalize to 2*H; `3*H + 1`, `H*H` (MV-RNN's matrices) are sizes too.
 *
 * Size variables come in three kinds: GLOBAL (declared by `size H [= 256]`
 * or implicitly by a parameter's shape; their values come from the `size`
 * declaration or the weights file at run time), LOCAL (a name in a function
 * signature that is not global: the function is generic in it, and inside
 * its body it is a fixed unknown), FLEX (a fresh copy of a LOCAL at one
 * call site, bound by unification with the arguments) and DYN (below). Unification binds a
 * FLEX variable X when the difference of the two sizes is linear in X with
 * a coefficient that divides the rest: f32[2*N] against f32[4*H] binds
 * N = 2*H; f32[2*N] against f32[H] fails.
 */
#ifndef SH_LANG_TYPES_H
#define SH_LANG_TYPES_H

#include "lang/lexer.h"

#define SH_SIZE_TERMS 6 /* terms of a canonical size */
#define SH_SIZE_DEG 3   /* variables in one term */

typedef struct sh_mono {
  int64_t coef;
  uint32_t var[SH_SIZE_DEG]; /* sorted ascending; var[deg..] are 0 */
  uint8_t deg;
} sh_mono;

typedef struct sh_size {
  uint8_t n;
  sh_mono t[SH_SIZE_TERMS];
} sh_size;

/* DYN: the length of a list made into a tensor (stack, softmax of a list),
 * known only at run time; a module has at most one, printed "?", so all
 * such lengths are one unknown to the checker (equal to each other, to no
 * other size) and the runtime checks the shapes when it builds the ops. */
typedef enum sh_sv_kind { SH_SV_GLOBAL, SH_SV_LOCAL, SH_SV_FLEX, SH_SV_DYN } sh_sv_kind;

typedef struct sh_sizevar {
  sh_sym name;
  sh_sv_kind kind;
  bool has_value; /* GLOBAL fixed by `size H = value` */
  bool bound;     /* FLEX bound to `binding` */
  int64_t value;
  sh_span span;   /* where it was declared or first used */
  sh_size binding;
} sh_sizevar;

/* The table of size variables; variable ids are 1-based indices. */
typedef struct sh_sizevars {
  sheaf_ctx *ctx;
  const sh_symtab *syms;
  sh_sizevar *v; /* v[1..n] */
  uint32_t n, cap;
} sh_sizevars;

void sh_sizevars_init(sh_sizevars *sv, sheaf_ctx *ctx, const sh_symtab *syms);
void sh_sizevars_free(sh_sizevars *sv);
/* 0 on out of memory. */
uint32_t sh_sizevar_new(sh_sizevars *sv, sh_sym name, sh_sv_kind kind, sh_span span);

/* Size arithmetic. Each returns false when the result would overflow int64
 * or exceed SH_SIZE_TERMS / SH_SIZE_DEG ("too complex"); *out is then 0. */
void sh_size_const(sh_size *out, int64_t k);
void sh_size_var(sh_size *out, uint32_t var);
bool sh_size_add(sh_size *out, const sh_size *a, const sh_size *b);
bool sh_size_sub(sh_size *out, const sh_size *a, const sh_size *b);
bool sh_size_mul(sh_size *out, const sh_size *a, const sh_size *b);
bool sh_size_equal(const sh_size *a, const sh_size *b);
bool sh_size_is_const(const sh_size *a, int64_t *k);
/* For every value >= 1 of the variables: 1 when a >= 0 is certain, -1 when
 * a < 0 is certain, 0 when unknown (checks the coefficients of a with each
 * variable X replaced by 1 + X). */
int sh_size_sign(const sh_size *a);

/* Replaces bound FLEX variables by their bindings and, with values, GLOBAL
 * variables fixed by `size` declarations by their values. */
bool sh_size_resolve(const sh_sizevars *sv, const sh_size *a, bool values, sh_size *out);
/* Replaces variable from[i] by to[i] (a renaming, for instantiation). */
void sh_size_rename(sh_size *a, const uint32_t *from, const uint32_t *to, int n);

/* Unifies two sizes (see above); false when they differ. */
bool sh_size_unify(sh_sizevars *sv, const sh_size *expected, const sh_size *got);

/* Writes a size as "2*H + 1" (bound FLEX variables resolved). */
void sh_size_print(sh_buf *b, const sh_sizevars *sv, const sh_size *a);

/* ---------------------------------------------------------------- types */

typedef enum sh_type_kind {
  SH_TY_ERROR, /* a type error was reported: unifies with anything, silently */
  SH_TY_I32,
  SH_TY_BOOL,
  SH_TY_TENSOR, /* f32[d1, ..., dn] */
  SH_TY_TUPLE,
  SH_TY_LIST,
  SH_TY_ADT,
  SH_TY_F32 /* a host float (item's result), written `f32` */
} sh_type_kind;

struct sh_adt;

typedef struct sh_type {
  sh_type_kind kind;
  int n;                  /* TENSOR: rank; TUPLE: arity */
  sh_size *dims;          /* TENSOR */
  struct sh_type **elems; /* TUPLE: n items; LIST: elems[0] */
  struct sh_adt *adt;     /* ADT */
} sh_type;

#define SH_MAX_RANK 2 /* the runtime's tensors are vectors and matrices */

extern sh_type sh_type_error, sh_type_i32, sh_type_bool, sh_type_f32;

sh_type *sh_type_tensor(sh_lang_pool *a, int rank, const sh_size *dims);
sh_type *sh_type_tuple(sh_lang_pool *a, int n, sh_type *const *elems);
sh_type *sh_type_list(sh_lang_pool *a, sh_type *elem);
sh_type *sh_type_adt(sh_lang_pool *a, struct sh_adt *adt);

/* Unifies `got` with `expected` (binding FLEX sizes); error types unify
 * with everything. */
bool sh_type_unify(sh_sizevars *sv, const sh_type *expected, const sh_type *got);
bool sh_type_contains_error(const sh_type *t);
/* A copy with size variables renamed (from[i] -> to[i]); NULL on OOM. */
sh_type *sh_type_rename(sh_lang_pool *a, const sh_type *t, const uint32_t *from, const uint32_t *to,
                        int n);
/* With bound FLEX sizes replaced by their bindings; NULL on OOM. */
sh_type *sh_type_resolve(sh_lang_pool *a, const sh_sizevars *sv, const sh_type *t);

/* "f32[H, 2*H]", "(f32[H], list[Tree])", "i32". */
void sh_type_print(sh_buf *b, const sh_sizevars *sv, const sh_symtab *syms, const sh_type *t);
/* Prints into a caller buffer (truncated with "..."); returns buf. */
const char *sh_type_str(char *buf, size_t cap, const sh_sizevars *sv, const sh_symtab *syms,
                        const sh_type *t);

#endif
