/*
 * kernel_rows.c — which size of a kernel indexes independent rows
 * (sh_kernel_row_size, kernel_api.h): calls that differ only in that size
 * can run as ONE call over their rows stacked (the runtime's batch of
 * kernel calls then is a single GEMM-like call with M = the rows of every
 * instance, not one small call per instance).
 *
 * Size S qualifies when every tensor mentions S only as its dimension 0,
 * exactly S; every index ranging over S is a free index (never reduced),
 * is the left-hand side's first index, and appears in accesses only as
 * the plain index (no offset) of a dimension 0; S's value is not read
 * (`SIZE` expressions); and nothing is ragged. Then row r of every output
 * depends on row r of the inputs that have S (and on the other inputs)
 * alone, so stacking rows commutes with the kernel.
 */
#include "codegen/kernel_api.h"

static bool aff_mentions(const sh_kaff *a, int s) {
  for (int i = 0; i < a->n; i++)
    if (a->t[i].size == s && a->t[i].coef != 0) return true;
  return false;
}

static bool aff_is(const sh_kaff *a, int s) { return a->c == 0 && a->n == 1 && a->t[0].size == s && a->t[0].coef == 1; }

/* Whether expression e keeps the rows of index var r independent. */
static bool expr_ok(const sh_kernel *k, const sh_kexpr *e, int s, int r) {
  if (!e) return true;
  switch (e->kind) {
  case SH_KEXPR_CONST: return true;
  case SH_KEXPR_SIZE: return e->size != s;
  case SH_KEXPR_INDEX: return e->var != r;
  case SH_KEXPR_ACCESS: {
    const sh_ktensor *t = &k->tensors[e->tensor];
    bool has_s = t->rank > 0 && aff_is(&t->dims[0].aff, s);
    for (int d = 0; d < t->rank; d++) {
      if (e->idx[d].gather && (d == 0 && has_s ? true : !expr_ok(k, e->idx[d].gather, s, r)))
        return false; /* a gathered row is another row; the gather's own reads follow the rule */
      bool uses_r = r >= 0 && e->idx[d].var == r;
      if (d == 0 && has_s) {
        if (!uses_r || e->idx[d].off != 0) return false; /* dim 0 of a row tensor: the row itself */
      } else if (uses_r) {
        return false;
      }
    }
    return true;
  }
  case SH_KEXPR_OP: return expr_ok(k, e->a, s, r) && expr_ok(k, e->b, s, r) && expr_ok(k, e->c, s, r);
  }
  return false;
}

static bool size_ok(const sh_kernel *k, int s) {
  for (int t = 0; t < k->n_tensors; t++) {
    const sh_ktensor *kt = &k->tensors[t];
    if (kt->ragged_outer >= 0) return false;
    for (int d = 0; d < kt->rank; d++) {
      if (kt->dims[d].kind != SH_KEXT_AFFINE) return false;
      if (aff_mentions(&kt->dims[d].aff, s) && (d != 0 || !aff_is(&kt->dims[d].aff, s))) return false;
    }
  }
  for (int i = 0; i < k->n_stmts; i++) {
    const sh_kstmt *st = &k->stmts[i];
    int r = -1;
    for (int j = 0; j < st->n_idx; j++) {
      const sh_kext *x = &st->idx[j].range;
      if (x->kind != SH_KEXT_AFFINE) return false;
      if (!aff_mentions(&x->aff, s)) continue;
      if (j != 0 || j >= st->n_free || !aff_is(&x->aff, s)) return false;
      r = j;
    }
    const sh_ktensor *lhs = &k->tensors[st->lhs];
    bool lhs_rows = lhs->rank > 0 && aff_is(&lhs->dims[0].aff, s);
    if (lhs_rows != (r == 0)) return false; /* rows are written by the row index */
    if (!expr_ok(k, st->rhs, s, r)) return false;
  }
  return true;
}

int sh_kernel_row_size(const sh_kernel *k) {
  if (k->n_outputs < 1) return -1;
  const sh_ktensor *o = &k->tensors[k->n_inputs];
  if (o->rank < 1 || o->dims[0].kind != SH_KEXT_AFFINE || o->dims[0].aff.n != 1 || o->dims[0].aff.c != 0 ||
      o->dims[0].aff.t[0].coef != 1)
    return -1;
  int s = o->dims[0].aff.t[0].size; /* the candidate: the first output's dimension 0 */
  for (int r = 0; r < k->n_outputs; r++) {
    const sh_ktensor *t = &k->tensors[k->n_inputs + r];
    if (t->rank < 1 || !aff_is(&t->dims[0].aff, s)) return -1;
  }
  return size_ok(k, s) ? s : -1;
}
