/*
 * sched_range.c — a value-range fact the schedule can prove from the
 * kernel's own reductions: in exp(A - b[J]), when b is a max-reduction
 * (b[I] = -inf; then b[I] max= E over reduction loops R) that has finished
 * before the exp runs and A is E at a point of R (the same expression, the
 * reduction variables read as loops of the same extents), then
 * A - b[J] <= 0 (or NaN), and exp becomes exp_nonpos: a cheaper vector
 * exp with no range test (softmax's and attention's exp(x - max x)).
 */
#include <math.h>
#include <string.h>

#include "codegen/lir_sched_int.h"

static int preorder(const sh_lir_kernel *k, sh_lir_stmt s, sh_lir_stmt want, int *pos) {
  if (s == want) return *pos;
  (*pos)++;
  const sh_lir_snode *x = &k->st[s];
  for (sh_lir_stmt c = x->body; c >= 0; c = k->st[c].next) {
    int r = preorder(k, c, want, pos);
    if (r >= 0) return r;
  }
  if (x->kind == SH_LIR_S_IF && x->els >= 0) return preorder(k, x->els, want, pos);
  return -1;
}

static int pos_of(const sh_lir_kernel *k, sh_lir_stmt s) {
  int p = 0;
  return preorder(k, k->root, s, &p);
}

/* The stores of b: exactly an init `b[I] = -inf` then `b[I] max= E`. */
static bool max_reduction(const sh_lir_kernel *k, sh_lir_buf b, sh_lir_stmt *S1) {
  sh_lir_stmt s0 = sh_lir_find_store(k, b, 0), s1 = sh_lir_find_store(k, b, 1);
  if (s0 < 0 || s1 < 0 || sh_lir_find_store(k, b, 2) >= 0) return false;
  const sh_lir_snode *a = &k->st[s0], *m = &k->st[s1];
  const sh_lir_enode *v0 = &k->ex[a->val];
  if (a->combine != SH_LIR_COMBINE_NONE || v0->kind != SH_LIR_E_FLT || !(isinf(v0->f) && v0->f < 0) ||
      m->combine != SH_LIR_COMBINE_MAX || a->nidx != m->nidx || pos_of(k, s0) >= pos_of(k, s1))
    return false;
  for (int d = 0; d < a->nidx; d++)
    if (!sh_lir_expr_eq(k, k->list[a->idx + d], k->list[m->idx + d])) return false;
  *S1 = s1;
  return true;
}

/* Whether exp(A - b[J]) in store C is provably of a nonpositive argument. */
static bool nonpos(sh_lir_kernel *k, sh_lir_stmt C, sh_lir_expr A, sh_lir_expr B) {
  const sh_lir_enode *bl = &k->ex[B];
  if (bl->kind != SH_LIR_E_LOAD) return false;
  sh_lir_stmt S1;
  if (!max_reduction(k, bl->a, &S1) || S1 == C) return false;
  const sh_lir_snode *m = &k->st[S1];
  /* the max store's indices: distinct loop variables (sigma: I -> J) */
  sh_lir_var vars[SH_LIR_MAX_RANK + 1];
  sh_lir_expr repl[SH_LIR_MAX_RANK + 1];
  int n = m->nidx;
  for (int d = 0; d < n; d++) {
    const sh_lir_enode *e = &k->ex[k->list[m->idx + d]];
    if (e->kind != SH_LIR_E_VAR) return false;
    for (int q = 0; q < d; q++)
      if (vars[q] == e->a) return false;
    vars[d] = e->a;
    repl[d] = k->list[bl->b + d];
  }
  /* its loops: the index loops outside, then exactly one reduction loop */
  sh_lir_stmt R = SH_LIR_NONE;
  for (sh_lir_stmt p = m->parent; p >= 0 && p != k->root; p = k->st[p].parent) {
    if (k->st[p].kind != SH_LIR_S_LOOP) continue;
    bool idx = false;
    for (int d = 0; d < n; d++) idx |= vars[d] == k->st[p].var;
    if (idx) continue;
    if (R >= 0) return false; /* two reduction loops */
    R = p;
  }
  if (R < 0) return false;
  /* every index loop encloses R (R is the reduction inside them) */
  for (int d = 0; d < n; d++) {
    sh_lir_stmt L = k->vars[vars[d]].loop;
    if (L < 0 || !sh_lir_within(k, R, L) || L == R) return false;
  }
  /* ordering: the lowest common ancestor P of S1 and C is the root or a
   * statement inside the index loops only; S1's branch comes first */
  sh_lir_stmt up1[256];
  int n1 = 0;
  for (sh_lir_stmt p = S1; p >= 0 && n1 < 256; p = k->st[p].parent) up1[n1++] = p;
  sh_lir_stmt P = SH_LIR_NONE, cchild = C;
  for (sh_lir_stmt p = C; p >= 0 && P < 0; p = k->st[p].parent) {
    for (int i = 0; i < n1; i++)
      if (up1[i] == p) P = p;
    if (P < 0) cchild = p;
  }
  if (P < 0 || P == S1 || P == C) return false;
  sh_lir_stmt schild = S1;
  while (k->st[schild].parent != P) schild = k->st[schild].parent;
  if (sh_lir_within(k, R, cchild) || pos_of(k, schild) >= pos_of(k, cchild)) return false;
  for (sh_lir_stmt p = P; p >= 0 && p != k->root; p = k->st[p].parent)
    if (k->st[p].kind == SH_LIR_S_LOOP) {
      bool idx = false;
      for (int d = 0; d < n; d++) idx |= vars[d] == k->st[p].var;
      if (!idx) return false;
    }
  /* A = E[I := J, r := c] for a loop c around C of R's extent */
  sh_lir_expr ext = sh_lir_subst(k, k->st[R].ext, n, vars, repl);
  for (sh_lir_stmt p = C; p >= 0; p = k->st[p].parent) {
    if (k->st[p].kind != SH_LIR_S_LOOP || !sh_lir_expr_eq(k, k->st[p].ext, ext)) continue;
    vars[n] = k->st[R].var;
    repl[n] = sh_lir_v(k, k->st[p].var);
    if (sh_lir_expr_eq(k, sh_lir_subst(k, m->val, n + 1, vars, repl), A)) return true;
  }
  return false;
}

static sh_lir_expr mark(sh_lir_kernel *k, sh_lir_stmt C, sh_lir_expr e, int *count) {
  if (e < 0 || k->err) return e;
  const sh_lir_enode x = k->ex[e];
  switch ((sh_lir_ekind)x.kind) {
  case SH_LIR_E_UN: {
    const sh_lir_enode *arg = &k->ex[x.a];
    if (x.op == SH_LIR_FN_EXP && arg->kind == SH_LIR_E_BIN && arg->op == SH_LIR_OP_SUB &&
        nonpos(k, C, arg->a, arg->b)) {
      (*count)++;
      return sh_lir_un(k, SH_LIR_FN_EXP_NONPOS, x.a);
    }
    sh_lir_expr a = mark(k, C, x.a, count);
    return a == x.a ? e : sh_lir_un(k, (sh_lir_fn)x.op, a);
  }
  case SH_LIR_E_BIN: {
    sh_lir_expr a = mark(k, C, x.a, count), b = mark(k, C, x.b, count);
    return a == x.a && b == x.b ? e : sh_lir_bin(k, (sh_lir_op)x.op, a, b);
  }
  case SH_LIR_E_SELECT: {
    sh_lir_expr a = mark(k, C, x.a, count), b = mark(k, C, x.b, count), c = mark(k, C, x.c, count);
    return a == x.a && b == x.b && c == x.c ? e : sh_lir_select(k, a, b, c);
  }
  default: return e;
  }
}

sheaf_status sh_sched_exp_ranges(sh_lir_kernel *k, int *n_marked) {
  if (n_marked) *n_marked = 0;
  if (k->err) return k->err;
  sh_lir_stmt st[1024];
  int n = sh_sched_stores(k, k->root, st, 1024), count = 0;
  if (n > 1024) n = 1024;
  for (int i = 0; i < n && !k->err; i++) {
    sh_lir_expr v = mark(k, st[i], k->st[st[i]].val, &count);
    k->st[st[i]].val = v;
  }
  if (n_marked) *n_marked = count;
  return k->err;
}
