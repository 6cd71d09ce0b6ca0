/*
 * kernel.h — checked kernels: what the tensor-comprehension notation
 * (`kernel` declarations, docs/LANGUAGE.md "Kernels") means once checked,
 * and the input of everything that executes kernels (the scalar reference
 * evaluator kernel_ref.h, the loop IR and the C emitter).
 *
 * A kernel is a list of tensors and a list of statements run in order.
 *
 *   kernel ffn(x: f32[N, D], W: f32[D, F], b: f32[F]) -> f32[N, F] {
 *     y(n, f) +=! x(n, d) * W(d, f)
 *     out(n, f) = gelu(y(n, f) + b(f))
 *   }
 *
 * checks into: sizes N, D, F (read from the shapes of x and W); tensors
 * x, W, b (inputs), out (the output), y (a temporary, f32[N, F], inferred);
 * statement 0: y(n, f) ADD with init over n in 0..N, f in 0..F (free) and
 * d in 0..D (reduction) of MUL(x(n, d), W(d, f)); statement 1: out(n, f)
 * ASSIGN of GELU(ADD(y(n, f), b(f))).
 *
 * Everything here is plain data, self-contained (no AST, no symbol table:
 * names are strings), allocated in the module's pool and read-only: it
 * lives as long as the sh_module it came from.
 *
 * Extents. Every dimension of a tensor and every index range is `0..E`
 * (indices start at 0) where E is an sh_kext:
 *   - AFFINE: c + sum of coef * size over the kernel's sizes (`N`, `D - 1`,
 *     `64`). Sizes are at least 1; a fixed `size D = 64` of the module is
 *     the constant 64.
 *   - RAGGED: the value of a length tensor (an i32 input of rank 1, `L:
 *     i32[B]`) at an outer index: in a tensor's dims, the index of dimension
 *     `outer` of the same tensor (always an earlier, affine dimension); in a
 *     statement's index range, the index variable `outer` of the statement.
 *     `q: f32[B, L(b), D]` is dims {B, RAGGED(L, outer 0), D}.
 * All ragged dimensions of one tensor depend on the same dimension
 * (sh_ktensor.ragged_outer); the layout of such a tensor is in kernel_ref.h.
 *
 * Statements. `T(i, j) op expr` with op one of
 *   ASSIGN (`=`)                        T[i, j] = expr          (no reduction indices)
 *   ADD, MUL, MAX, MIN with init (`+=!`) T[i, j] = identity (0, 1, -inf, +inf), then
 *                                        T[i, j] = T[i, j] op expr for every reduction point
 *   ADD, MUL, MAX, MIN without (`+=`)   the same without the identity: T was defined before
 * The index variables of a statement are its free indices (those of the
 * left-hand side, in order, idx[0 .. n_free)) then its reduction indices
 * (idx[n_free .. n_idx)), each with its range; an index whose range is
 * RAGGED comes after the index it depends on, so idx is a valid loop order.
 * The checker guarantees: every access is in bounds for every value of its
 * indices (no run-time checks needed, except the values of gather indices,
 * sh_kidx); each left-hand side covers its
 * tensor exactly (every element is written); a tensor is defined (ASSIGN
 * or init) exactly once, before it is read or accumulated into; a
 * reduction never reads the tensor it writes, and an accumulation reads it
 * only at its own left-hand indices with no reduction indices; outputs are
 * all written. MAX and MIN (and the min/max functions) give NaN when either
 * operand is NaN.
 *
 * Expressions are trees of sh_kexpr: constants, sizes, index values, tensor
 * accesses with index arguments `var + off` (var -1: the constant off), and
 * the pointwise operators of SH_KOP_LIST. Their values are f32, except an
 * access of an i32 tensor, which is i32 and only ever the operand of FLOAT
 * or a gather index (sh_kidx.gather).
 */
#ifndef SH_LANG_KERNEL_H
#define SH_LANG_KERNEL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"

#define SH_KERNEL_MAX_RANK 8 /* dimensions of a kernel tensor */
#define SH_KAFF_TERMS 6      /* size terms of an affine extent */

typedef enum sh_kdtype { SH_KDTYPE_F32, SH_KDTYPE_I32 } sh_kdtype;

/* c + sum over t[0 .. n) of t[i].coef * (value of size t[i].size). */
typedef struct sh_kaff {
  int64_t c;
  int n;
  struct {
    int64_t coef;
    int size; /* index into sh_kernel.sizes */
  } t[SH_KAFF_TERMS];
} sh_kaff;

typedef enum sh_kext_kind { SH_KEXT_AFFINE, SH_KEXT_RAGGED } sh_kext_kind;

/* The extent E of a dimension or of an index range 0..E (see above). */
typedef struct sh_kext {
  sh_kext_kind kind;
  sh_kaff aff; /* AFFINE */
  int len;     /* RAGGED: the length tensor (index into sh_kernel.tensors) */
  int outer;   /* RAGGED: a tensor's dimension (in dims) or a statement's index (in ranges) */
  const char *outer_name; /* RAGGED: the outer index's name as written (`b` of L(b)), for printing */
} sh_kext;

/* A size of the kernel: its value is dimension `dim` of input `tensor`,
 * where that dimension is exactly the size. */
typedef struct sh_ksize {
  const char *name;
  int tensor, dim;
} sh_ksize;

typedef enum sh_ktensor_kind {
  SH_KTENSOR_INPUT,  /* a parameter: read only */
  SH_KTENSOR_OUTPUT, /* a result: written by the kernel, may be read after its definition */
  SH_KTENSOR_TEMP    /* defined by a statement and not a result: its shape is inferred */
} sh_ktensor_kind;

typedef struct sh_ktensor {
  const char *name;
  sh_ktensor_kind kind;
  sh_kdtype dtype;  /* outputs and temporaries are f32 */
  int rank;         /* 0 .. SH_KERNEL_MAX_RANK (0: one value) */
  sh_kext *dims;    /* rank extents */
  int ragged_outer; /* -1: dense; else the dimension every RAGGED dimension depends on */
  int defined_by;   /* the statement that defines it; -1 for inputs */
  int line, col;    /* where it is declared or first defined */
} sh_ktensor;

/* An index variable of a statement, ranging over 0 .. range. */
typedef struct sh_kindex {
  const char *name;
  sh_kext range;
  bool reduction; /* not on the left-hand side */
} sh_kindex;

struct sh_kexpr;

/* An index argument of an access: the value of index var (of the
 * statement) plus off; var -1: the constant off. A gather (`emb(ids(n),
 * e)`): gather is set (var -1, off 0) and the index is its value, an
 * ACCESS of a dense i32 input whose own arguments are plain (never
 * gathers); the checker does not bound it: every value of that input must
 * lie in 0 .. extent-1 of the dimension it indexes, which every executor
 * checks once per call before computing (SHEAF_ERR_INVALID_ARG). */
typedef struct sh_kidx {
  int var;
  int64_t off;
  const struct sh_kexpr *gather;
} sh_kidx;

/* Pointwise operators: X(ID, source name, arity). FLOAT is i32 -> f32 (and
 * the identity on f32); comparisons give 1 or 0 (NaN compares false, NE
 * true); SELECT(c, a, b) is c != 0 ? a : b; GELU is the erf form; SOFTPLUS
 * is x above 20, else log(1 + exp(x)). */
#define SH_KOP_LIST(X)                                                                             \
  X(NEG, "-", 1) X(EXP, "exp", 1) X(LOG, "log", 1) X(TANH, "tanh", 1) X(SIGMOID, "sigmoid", 1)    \
  X(GELU, "gelu", 1) X(RELU, "relu", 1) X(SQRT, "sqrt", 1) X(RSQRT, "rsqrt", 1) X(ABS, "abs", 1)  \
  X(SOFTPLUS, "softplus", 1) X(ERF, "erf", 1) X(FLOAT, "float", 1)                                 \
  X(ADD, "+", 2) X(SUB, "-", 2) X(MUL, "*", 2) X(DIV, "/", 2) X(MIN, "min", 2) X(MAX, "max", 2)   \
  X(POW, "pow", 2) X(LT, "<", 2) X(LE, "<=", 2) X(GT, ">", 2) X(GE, ">=", 2) X(EQ, "==", 2)       \
  X(NE, "!=", 2) X(SELECT, "where", 3)

typedef enum sh_kop {
#define SH_KOP_ENUM_(id, name, arity) SH_KOP_##id,
  SH_KOP_LIST(SH_KOP_ENUM_)
#undef SH_KOP_ENUM_
  SH_KOP_COUNT_
} sh_kop;

/* The source name ("exp", "+") and the arity of an operator. */
const char *sh_kop_name(sh_kop op);
int sh_kop_arity(sh_kop op);

typedef enum sh_kexpr_kind {
  SH_KEXPR_CONST,  /* value */
  SH_KEXPR_SIZE,   /* the value of size `size` */
  SH_KEXPR_INDEX,  /* the value of index `var` */
  SH_KEXPR_ACCESS, /* tensor at idx[0 .. rank) */
  SH_KEXPR_OP      /* op applied to a (, b (, c)) */
} sh_kexpr_kind;

typedef struct sh_kexpr {
  sh_kexpr_kind kind;
  sh_kdtype dtype; /* I32 only for an ACCESS of an i32 tensor */
  double value;    /* CONST */
  int size;        /* SIZE */
  int var;         /* INDEX */
  int tensor;      /* ACCESS */
  sh_kidx *idx;    /* ACCESS: one per dimension of the tensor */
  sh_kop op;       /* OP */
  struct sh_kexpr *a, *b, *c;
  int line, col;   /* in the source */
} sh_kexpr;

/* The statement operators (see above). */
typedef enum sh_kred { SH_KRED_ASSIGN, SH_KRED_ADD, SH_KRED_MUL, SH_KRED_MAX, SH_KRED_MIN } sh_kred;

typedef struct sh_kstmt {
  int lhs;        /* the tensor written */
  sh_kred red;
  bool init;      /* starts from red's identity (`+=!`); ASSIGN: false */
  int n_free;     /* idx[0 .. n_free): the left-hand side's indices, in order */
  int n_idx;
  sh_kindex *idx; /* free indices, then reduction indices (a loop order) */
  sh_kexpr *rhs;
  int line, col;
} sh_kstmt;

typedef struct sh_kernel {
  const char *name;
  int line, col;
  int n_sizes;
  sh_ksize *sizes;
  /* tensors[0 .. n_inputs): the parameters in order; then n_outputs
   * results in order; then the temporaries in order of definition */
  int n_tensors, n_inputs, n_outputs;
  sh_ktensor *tensors;
  int n_stmts;
  sh_kstmt *stmts;
} sh_kernel;

/* The identity of a reduction (0, 1, -inf, +inf). */
double sh_kred_identity(sh_kred r);
/* "=", "+=", "*=", "max=", "min=" (with init: "+=!", ...). */
const char *sh_kred_name(sh_kred r, bool init);

/* An extent as text: "N", "2*N - 1", "L(b)". */
void sh_kext_print(sh_buf *out, const sh_kernel *k, const sh_kext *e);
/* A readable dump of a checked kernel: its signature, temporaries with
 * their inferred shapes, statements with their index ranges (what `sheaf
 * check` prints; tests, debugging). */
void sh_kernel_print(sh_buf *out, const sh_kernel *k);

/* ------------------------------------------------------------- gathers */

/* Checks every gather of k (kernel_gather.c): each value of an index tensor
 * lies in 0 .. extent-1 of the dimension it indexes, at these sizes (one
 * per size of k) and inputs (in_data[i]: input i's elements). Fails with
 * SHEAF_ERR_INVALID_ARG naming the kernel, the value and its position
 * ("kernel 'pick': lab[3] = 300 is outside 0 .. 255 (the extent of z's
 * dimension 1)"). */
sheaf_status sh_kernel_gather_check(sheaf_ctx *ctx, const sh_kernel *k, const int64_t *sizes,
                                    const void *const *in_data);
/* The smallest extent the values of input `input` index as a gather at
 * these sizes; -1 when it indexes nothing. */
int64_t sh_kernel_gather_extent(const sh_kernel *k, int input, const int64_t *sizes);
/* Whether any access of k has a gather index. */
bool sh_kernel_has_gather(const sh_kernel *k);
/* "lab[3]", "perm[1, 2]": element flat of dense tensor g as text. */
void sh_kernel_gather_position(const sh_ktensor *g, const int64_t *sizes, int64_t flat, char *buf,
                               size_t cap);

/* ------------------------------------------------------------- sources */

struct sh_module;

/* The checked kernels of a module that sh_check accepted, in declaration
 * order (NULL / 0 before that or after errors). */
int sh_module_kernels(const struct sh_module *m, const sh_kernel *const **out);
/* The checked kernel named name, or NULL. */
const sh_kernel *sh_module_kernel(const struct sh_module *m, const char *name);

/* Parses and checks a source holding only `kernel` and `size` declarations
 * (what sheaf_kernel_compile runs first): like sh_lang_compile (check.h), with no
 * `main`; any other declaration is an error. The module must be freed with
 * sh_module_free whatever the result; diagnostics are in m->diags. */
sheaf_status sh_kernel_source_compile(struct sh_module *m, sheaf_ctx *ctx, const char *file,
                                      const char *src, size_t len);

#endif
