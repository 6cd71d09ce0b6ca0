/*
 * sched_fuse.c — fusion of two sibling loops (loop fusion, as opposed to
 * sched.c's fuse of two nested loops into one): `for i in 0..E: A; for i2
 * in 0..E: B` becomes `for i in 0..E: A; B[i2 := i]`. Legal when no
 * dependence crosses iterations: every buffer that one of the bodies
 * writes and the other accesses is indexed, at every access in both, at
 * one dimension by the same c·i + (terms of outer loops), c != 0, so
 * iteration i of B touches only what iteration i of A touched. The default
 * schedule fuses the nests of a ragged kernel over their sequence loop:
 * the attention's scores, max, exps, sums and products of one sequence are
 * then computed while its rows are in cache.
 */
#include <string.h>

#include "codegen/lir_sched_int.h"

typedef struct access {
  sh_lir_buf buf;
  int n;
  int32_t list; /* its n index expressions in the list pool */
  bool in_b; /* the access is in the second loop (its variable not yet renamed) */
} access;

typedef struct accesses {
  access a[512];
  int n;
  bool overflow;
} accesses;

static void add(accesses *s, sh_lir_buf b, int n, int32_t list, bool in_b) {
  if (s->n >= 512) {
    s->overflow = true;
    return;
  }
  s->a[s->n++] = (access){.buf = b, .n = n, .list = list, .in_b = in_b};
}

static void see_expr(const sh_lir_kernel *k, sh_lir_expr e, accesses *s, bool in_b) {
  if (e < 0) return;
  const sh_lir_enode *x = &k->ex[e];
  switch ((sh_lir_ekind)x->kind) {
  case SH_LIR_E_LOAD:
    add(s, x->a, x->n, x->b, in_b);
    for (int i = 0; i < x->n; i++) see_expr(k, k->list[x->b + i], s, in_b);
    return;
  case SH_LIR_E_BIN: see_expr(k, x->a, s, in_b), see_expr(k, x->b, s, in_b); return;
  case SH_LIR_E_UN:
  case SH_LIR_E_CAST: see_expr(k, x->a, s, in_b); return;
  case SH_LIR_E_SELECT: see_expr(k, x->a, s, in_b), see_expr(k, x->b, s, in_b), see_expr(k, x->c, s, in_b); return;
  default: return;
  }
}

static void see_tree(const sh_lir_kernel *k, sh_lir_stmt t, accesses *s, bool in_b) {
  const sh_lir_snode *x = &k->st[t];
  if (x->kind == SH_LIR_S_STORE) {
    add(s, x->buf, x->nidx, x->idx, in_b);
    see_expr(k, x->val, s, in_b);
    for (int d = 0; d < x->nidx; d++) see_expr(k, k->list[x->idx + d], s, in_b);
  }
  if (x->kind == SH_LIR_S_LOOP) see_expr(k, x->ext, s, in_b);
  if (x->kind == SH_LIR_S_IF) {
    see_expr(k, x->cond, s, in_b);
    if (x->els >= 0) see_tree(k, x->els, s, in_b);
  }
  for (sh_lir_stmt c = x->body; c >= 0; c = k->st[c].next) see_tree(k, c, s, in_b);
}

static bool writes(const sh_lir_kernel *k, sh_lir_stmt t, sh_lir_buf b) {
  const sh_lir_snode *x = &k->st[t];
  if (x->kind == SH_LIR_S_STORE && x->buf == b) return true;
  if (x->kind == SH_LIR_S_IF && x->els >= 0 && writes(k, x->els, b)) return true;
  for (sh_lir_stmt c = x->body; c >= 0; c = k->st[c].next)
    if (writes(k, c, b)) return true;
  return false;
}

static bool uses_inner(const sh_lir_kernel *k, sh_lir_stmt s, sh_lir_expr e) {
  for (sh_lir_stmt c = k->st[s].body; c >= 0; c = k->st[c].next) {
    if (k->st[c].kind == SH_LIR_S_LOOP && sh_lir_uses_var(k, e, k->st[c].var)) return true;
    if (uses_inner(k, c, e)) return true;
    if (k->st[c].kind == SH_LIR_S_IF && k->st[c].els >= 0 && uses_inner(k, k->st[c].els, e)) return true;
  }
  return false;
}

/* Every access to b (in either loop) has dimension d at one and the same
 * c·v + outer terms (the second loop's variable read as the first's). */
static bool owned_at(sh_lir_kernel *k, const accesses *s, sh_lir_buf b, sh_lir_stmt A, sh_lir_stmt B, int d) {
  sh_lir_var va = k->st[A].var, vb = k->st[B].var;
  sh_lir_expr first = SH_LIR_NONE, ve = sh_lir_v(k, va);
  for (int i = 0; i < s->n; i++) {
    const access *x = &s->a[i];
    if (x->buf != b) continue;
    if (d >= x->n) return false;
    sh_lir_expr e = k->list[x->list + d];
    if (x->in_b) {
      if (uses_inner(k, B, e)) return false;
      e = sh_lir_subst(k, e, 1, &vb, &ve);
    } else if (uses_inner(k, A, e)) {
      return false;
    }
    if (first < 0) {
      int64_t coef;
      if (!sh_lir_affine(k, e, va, &coef, NULL) || coef == 0) return false;
      first = e;
    } else if (!sh_lir_expr_eq(k, first, e)) {
      return false;
    }
  }
  return first >= 0;
}

sheaf_status sh_sched_fuse_siblings(sh_lir_kernel *k, sh_lir_stmt a, sh_lir_stmt b) {
  if (k->err) return k->err;
  if (!sh_sched_is_loop(k, a) || !sh_sched_is_loop(k, b))
    return sh_sched_err(k, "fuse_siblings: statements %d and %d are not both loops", (int)a, (int)b);
  const char *na = k->vars[k->st[a].var].name, *nb = k->vars[k->st[b].var].name;
  if (k->st[a].next != b)
    return sh_sched_err(k, "fuse_siblings of loops %s and %s: %s does not follow %s directly", na, nb, nb, na);
  if (k->st[a].annot != SH_LIR_SERIAL || k->st[b].annot != SH_LIR_SERIAL)
    return sh_sched_err(k, "fuse_siblings of loops %s and %s: not both serial", na, nb);
  if (!sh_lir_expr_eq(k, k->st[a].ext, k->st[b].ext))
    return sh_sched_err(k, "fuse_siblings of loops %s and %s: different extents", na, nb);
  accesses *s = sh_calloc(k->ctx, 1, sizeof *s);
  if (!s) return sh_lir_fail(k, SHEAF_ERR_NOMEM, "out of memory");
  see_tree(k, a, s, false);
  see_tree(k, b, s, true);
  sheaf_status st = SHEAF_OK;
  if (s->overflow) st = sh_sched_err(k, "fuse_siblings of loops %s and %s: more than 512 accesses", na, nb);
  for (int i = 0; i < s->n && !st; i++) {
    sh_lir_buf buf = s->a[i].buf;
    bool seen = false;
    for (int j = 0; j < i; j++) seen |= s->a[j].buf == buf;
    bool in_a = false, in_b = false;
    for (int j = 0; j < s->n; j++) {
      if (s->a[j].buf != buf) continue;
      in_a |= !s->a[j].in_b;
      in_b |= s->a[j].in_b;
    }
    if (seen || !in_a || !in_b || (!writes(k, a, buf) && !writes(k, b, buf))) continue;
    bool ok = false;
    for (int d = 0; d < s->a[i].n && !ok; d++) ok = owned_at(k, s, buf, a, b, d);
    if (!ok)
      st = sh_sched_err(k, "fuse_siblings of loops %s and %s: %s is not accessed per iteration (a "
                           "dependence could cross iterations)", na, nb, k->bufs[buf].name);
  }
  sh_free(k->ctx, s, sizeof *s);
  if (st) return st;
  sh_lir_var vb = k->st[b].var;
  sh_lir_expr ve = sh_lir_v(k, k->st[a].var);
  sh_lir_subst_stmt(k, b, 1, &vb, &ve);
  sh_lir_detach(k, b);
  for (sh_lir_stmt c = k->st[b].body; c >= 0;) {
    sh_lir_stmt next = k->st[c].next;
    sh_lir_detach(k, c);
    sh_lir_append(k, a, c);
    c = next;
  }
  k->vars[vb].loop = SH_LIR_NONE;
  return k->err;
}
