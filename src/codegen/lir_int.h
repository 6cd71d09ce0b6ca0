/*
 * lir_int.h — helpers shared by the IR, the schedule primitives and the C
 * emitter (not for other modules): pool growth, tree surgery, variable
 * substitution, subtree cloning, affine analysis, integer simplification,
 * storage offsets.
 */
#ifndef SH_CODEGEN_LIR_INT_H
#define SH_CODEGEN_LIR_INT_H

#include "codegen/lir.h"

/* Grows *p (elements of `size`, capacity *cap) to hold `need`; false
 * (error recorded in k) when out of memory. */
bool sh_lir_grow(sh_lir_kernel *k, void **p, int32_t *cap, size_t size, int32_t need);

/* A fresh loop variable named `base` (made unique with a suffix) bound to
 * `loop`. */
sh_lir_var sh_lir_new_var(sh_lir_kernel *k, const char *base, sh_lir_stmt loop);
/* A new statement of kind `kind`, detached, every link NONE. */
sh_lir_stmt sh_lir_new_stmt(sh_lir_kernel *k, sh_lir_skind kind);
/* An index list copied into the list pool; returns its start. */
int32_t sh_lir_new_list(sh_lir_kernel *k, int n, const sh_lir_expr *idx);
static inline sh_lir_expr sh_lir_idx(const sh_lir_kernel *k, int32_t list, int i) {
  return k->list[list + i];
}

/* Dimension 0's stride of LD-access argument b (an SH_LIR_E_LD node). */
sh_lir_expr sh_lir_ld_ref(sh_lir_kernel *k, sh_lir_buf b);

/* Tree surgery (parent links kept). */
void sh_lir_detach(sh_lir_kernel *k, sh_lir_stmt s);
void sh_lir_append(sh_lir_kernel *k, sh_lir_stmt parent, sh_lir_stmt s);
void sh_lir_insert_before(sh_lir_kernel *k, sh_lir_stmt at, sh_lir_stmt s);
void sh_lir_insert_after(sh_lir_kernel *k, sh_lir_stmt at, sh_lir_stmt s);
/* Puts s where `at` is (at is detached). */
void sh_lir_replace(sh_lir_kernel *k, sh_lir_stmt at, sh_lir_stmt s);
/* Number of statements in s's body list. */
int sh_lir_body_len(const sh_lir_kernel *k, sh_lir_stmt s);
/* s is inside (or is) anc. */
bool sh_lir_within(const sh_lir_kernel *k, sh_lir_stmt s, sh_lir_stmt anc);

/* e with every variable vars[i] replaced by repl[i]. */
sh_lir_expr sh_lir_subst(sh_lir_kernel *k, sh_lir_expr e, int n, const sh_lir_var *vars,
                         const sh_lir_expr *repl);
/* The same in every expression of subtree s, in place. */
void sh_lir_subst_stmt(sh_lir_kernel *k, sh_lir_stmt s, int n, const sh_lir_var *vars,
                       const sh_lir_expr *repl);
/* A copy of subtree s (detached) with vars[i] replaced by repl[i]; loops
 * inside get fresh variables (named after theirs plus `suffix`). */
sh_lir_stmt sh_lir_clone(sh_lir_kernel *k, sh_lir_stmt s, int n, const sh_lir_var *vars,
                         const sh_lir_expr *repl, const char *suffix);

bool sh_lir_uses_var(const sh_lir_kernel *k, sh_lir_expr e, sh_lir_var v);
bool sh_lir_stmt_uses_var(const sh_lir_kernel *k, sh_lir_stmt s, sh_lir_var v);
bool sh_lir_uses_buf(const sh_lir_kernel *k, sh_lir_expr e, sh_lir_buf b);

/* e = coef·v + rest with coef a constant and rest free of v: true and the
 * parts (rest may be NULL); false when e is not affine in v. */
bool sh_lir_affine(sh_lir_kernel *k, sh_lir_expr e, sh_lir_var v, int64_t *coef,
                   sh_lir_expr *rest);
/* Bounds of an integer expression from constant loop extents and the
 * nonnegativity of sizes and lengths; false when unbounded. */
bool sh_lir_range(const sh_lir_kernel *k, sh_lir_expr e, int64_t *lo, int64_t *hi);
/* e is provably >= 0. */
bool sh_lir_nonneg(const sh_lir_kernel *k, sh_lir_expr e);
/* Canonical form of an integer expression: sums of terms with constant
 * coefficients combined, floor division and modulo by constants resolved
 * where the ranges allow, comparisons decided by ranges, constants folded. */
sh_lir_expr sh_lir_simplify(sh_lir_kernel *k, sh_lir_expr e);

/* Element offset of buf[idx] from the argument's base (or from the row
 * pointer, ROWS access: *row gets dimension 0's index, else NONE). */
sh_lir_expr sh_lir_offset(sh_lir_kernel *k, sh_lir_buf b, const sh_lir_expr *idx,
                          sh_lir_expr *row);
/* Storage extent of dimension d of a dense / local buffer (padded). */
sh_lir_expr sh_lir_storage_dim(sh_lir_kernel *k, sh_lir_buf b, int d);
/* Total elements of a dense buffer's storage. */
sh_lir_expr sh_lir_storage_size(sh_lir_kernel *k, sh_lir_buf b);

/* The identity of a combine (0, 1, -inf, +inf). */
float sh_lir_combine_identity(sh_lir_combine c);
const char *sh_lir_fn_name(sh_lir_fn fn);
/* A short description of a statement for messages ("loop i", "store to C"). */
const char *sh_lir_stmt_desc(const sh_lir_kernel *k, sh_lir_stmt s, char *buf, size_t cap);

/* Conjuncts of an && tree into out (at most cap); returns the count. */
int sh_lir_conjuncts(const sh_lir_kernel *k, sh_lir_expr e, sh_lir_expr *out, int cap);

#endif
