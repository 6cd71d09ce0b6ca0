/*
 * sched_dist.c — loop distribution: a loop whose body holds statements
 * S1 .. Sn becomes n loops of the same extent, one per statement, in
 * order. Legal when every dependence between the statements stays inside
 * one iteration: every buffer the body writes is accessed, everywhere in
 * the body, at one and the same index list, and that list depends on the
 * loop's variable, or at one dimension holding everywhere the same index
 * c·v + (terms of outer loops), c != 0 (each iteration owns its elements). The default schedule
 * uses it to move a reduction loop outside a spatial loop that is stride-1
 * (`for d: o = 0; for j: o[d] += e[j]·v[j, d]` -> `for d: o = 0` then
 * `for j: for d: o[d] += ...`, d vectorizable).
 */
#include <stdio.h>
#include <string.h>

#include "codegen/lir_sched_int.h"

typedef struct acc_check {
  sh_lir_buf buf;
  int32_t idx; /* list of the first access seen, -1 none */
  int n;
  bool ok;
  bool same[SH_LIR_MAX_RANK]; /* dimension d's index is the same in every access */
} acc_check;

static void see(const sh_lir_kernel *k, acc_check *c, int n, const int32_t *idx) {
  if (!c->ok) return;
  if (c->idx < 0) {
    c->idx = (int32_t)(idx - k->list);
    c->n = n;
    for (int d = 0; d < SH_LIR_MAX_RANK; d++) c->same[d] = d < n;
    return;
  }
  if (n != c->n) {
    c->ok = false;
    return;
  }
  for (int d = 0; d < n; d++)
    if (!sh_lir_expr_eq(k, k->list[c->idx + d], idx[d])) c->same[d] = false;
}

/* A variable of a loop inside s is used by e. */
static bool uses_inner_var(const sh_lir_kernel *k, sh_lir_stmt s, sh_lir_expr e) {
  for (sh_lir_stmt b = k->st[s].body; b >= 0; b = k->st[b].next) {
    if (k->st[b].kind == SH_LIR_S_LOOP && sh_lir_uses_var(k, e, k->st[b].var)) return true;
    if (uses_inner_var(k, b, e)) return true;
    if (k->st[b].kind == SH_LIR_S_IF && k->st[b].els >= 0 && uses_inner_var(k, k->st[b].els, e)) return true;
  }
  return false;
}

/* Each iteration owns the elements of c's buffer: every access indexes it
 * at one index list that depends on the loop's variable, or at one
 * dimension holds the same index everywhere, c·v + (terms of loops outside),
 * c != 0 (the rows of a 2-row tile, whatever the columns). */
static bool owned(sh_lir_kernel *k, sh_lir_stmt loop, const acc_check *c) {
  if (!c->ok) return false;
  bool all = true, uses = false;
  for (int d = 0; d < c->n; d++) {
    all &= c->same[d];
    uses |= sh_lir_uses_var(k, k->list[c->idx + d], k->st[loop].var);
  }
  if (all) return uses;
  for (int d = 0; d < c->n; d++) {
    int64_t coef;
    sh_lir_expr e = k->list[c->idx + d];
    if (c->same[d] && sh_lir_affine(k, e, k->st[loop].var, &coef, NULL) && coef != 0 &&
        !uses_inner_var(k, loop, e))
      return true;
  }
  return false;
}

static void see_expr(const sh_lir_kernel *k, sh_lir_expr e, acc_check *c) {
  if (e < 0 || !c->ok) return;
  const sh_lir_enode *x = &k->ex[e];
  switch ((sh_lir_ekind)x->kind) {
  case SH_LIR_E_LOAD:
    if (x->a == c->buf) see(k, c, x->n, &k->list[x->b]);
    for (int i = 0; i < x->n; i++) see_expr(k, k->list[x->b + i], c);
    return;
  case SH_LIR_E_BIN: see_expr(k, x->a, c), see_expr(k, x->b, c); return;
  case SH_LIR_E_UN:
  case SH_LIR_E_CAST: see_expr(k, x->a, c); return;
  case SH_LIR_E_SELECT: see_expr(k, x->a, c), see_expr(k, x->b, c), see_expr(k, x->c, c); return;
  default: return;
  }
}

static void see_tree(const sh_lir_kernel *k, sh_lir_stmt s, acc_check *c) {
  const sh_lir_snode *x = &k->st[s];
  if (x->kind == SH_LIR_S_STORE) {
    if (x->buf == c->buf) see(k, c, x->nidx, &k->list[x->idx]);
    see_expr(k, x->val, c);
    for (int d = 0; d < x->nidx; d++) see_expr(k, k->list[x->idx + d], c);
    return;
  }
  if (x->kind == SH_LIR_S_LOOP) see_expr(k, x->ext, c);
  if (x->kind == SH_LIR_S_IF) {
    see_expr(k, x->cond, c);
    if (x->els >= 0) see_tree(k, x->els, c);
  }
  if (x->kind == SH_LIR_S_ALLOC && x->buf == c->buf) c->ok = false;
  for (sh_lir_stmt b = x->body; b >= 0; b = k->st[b].next) see_tree(k, b, c);
}

sheaf_status sh_sched_distribute(sh_lir_kernel *k, sh_lir_stmt loop, sh_lir_stmt *loops, int cap, int *n_out) {
  if (n_out) *n_out = 0;
  if (k->err) return k->err;
  if (!sh_sched_is_loop(k, loop)) return sh_sched_err(k, "distribute: statement %d is not a loop", (int)loop);
  const sh_lir_snode L = k->st[loop];
  const char *ln = k->vars[L.var].name;
  if (L.annot == SH_LIR_VECTOR || L.annot == SH_LIR_PARALLEL)
    return sh_sched_err(k, "distribute of loop %s: not a serial or unrolled loop", ln);
  int n = sh_lir_body_len(k, loop);
  if (n < 2) return sh_sched_err(k, "distribute of loop %s: its body has one statement", ln);
  /* the buffers the body writes */
  sh_lir_stmt st[1024];
  int ns = sh_sched_stores(k, loop, st, 1024);
  if (ns > 1024) return sh_sched_err(k, "distribute of loop %s: too many stores", ln);
  for (int i = 0; i < ns; i++) {
    sh_lir_buf b = k->st[st[i]].buf;
    bool seen = false;
    for (int j = 0; j < i; j++) seen |= k->st[st[j]].buf == b;
    if (seen) continue;
    acc_check c = {.buf = b, .idx = -1, .ok = true};
    see_tree(k, loop, &c);
    if (!owned(k, loop, &c))
      return sh_sched_err(k, "distribute of loop %s: %s is accessed at different indices, or not "
                             "per iteration, inside it", ln, k->bufs[b].name);
  }
  if (loops && cap > 0) loops[0] = loop;
  int made = 1;
  sh_lir_stmt at = loop;
  sh_lir_stmt first = k->st[L.body].next;
  for (sh_lir_stmt s = first; s >= 0;) {
    sh_lir_stmt next = k->st[s].next;
    sh_lir_stmt nl = sh_lir_new_stmt(k, SH_LIR_S_LOOP);
    if (nl < 0) return k->err;
    sh_lir_var v = sh_lir_new_var(k, ln, nl);
    if (v < 0) return k->err;
    k->st[nl].var = v;
    k->st[nl].ext = L.ext;
    k->st[nl].annot = L.annot;
    sh_lir_expr ve = sh_lir_v(k, v);
    sh_lir_stmt c = sh_lir_clone(k, s, 1, &L.var, &ve, "");
    if (c < 0) return k->err;
    sh_lir_detach(k, s);
    sh_lir_append(k, nl, c);
    sh_lir_insert_after(k, at, nl);
    at = nl;
    if (loops && made < cap) loops[made] = nl;
    made++;
    s = next;
  }
  if (n_out) *n_out = made;
  return k->err;
}
