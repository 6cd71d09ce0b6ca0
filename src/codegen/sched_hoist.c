/*
 * sched_hoist.c — two primitives that make row kernels do per row what
 * they wrote per element:
 *
 *   hoist (loop-invariant code motion of float work): in every store under
 *     s, a maximal subexpression that holds a costly operation (exp, log,
 *     sqrt, rsqrt, tanh, ..., a division, pow) and does not change over the
 *     innermost loops around the store is computed once, before the
 *     outermost of those loops, into a scalar local (a register); a
 *     division by such a value becomes a product with its hoisted
 *     reciprocal (`x / s[n]` -> `x * (1 / s[n])`: one division per row).
 *     Loops are crossed while the value neither depends on their variable
 *     nor reads a buffer stored inside them; never a parallel loop or an if.
 *     A plain invariant load is hoisted too when it crosses a serial loop.
 *   share (storage reuse, in place): a dense temporary T lives in the
 *     storage of a buffer O that is written once, by a pointwise store
 *     F: O[r, i, ...] = f(T[r, i, ...], ...) that is T's last reader (a
 *     softmax's exp row becomes the output row, then rescaled in place).
 */
#include <stdio.h>
#include <string.h>

#include "codegen/lir_sched_int.h"

/* -------------------------------------------------------------- hoist */

static bool costly(const sh_lir_kernel *k, sh_lir_expr e) {
  const sh_lir_enode *x = &k->ex[e];
  switch ((sh_lir_ekind)x->kind) {
  case SH_LIR_E_UN:
    if (x->op != SH_LIR_FN_NEG && x->op != SH_LIR_FN_ABS && x->op != SH_LIR_FN_RELU) return true;
    return costly(k, x->a);
  case SH_LIR_E_BIN:
    if (x->dtype == SH_LIR_F32 && (x->op == SH_LIR_OP_DIV || x->op == SH_LIR_OP_POW)) return true;
    return costly(k, x->a) || costly(k, x->b);
  case SH_LIR_E_SELECT: return costly(k, x->a) || costly(k, x->b) || costly(k, x->c);
  default: return false;
  }
}

/* Whether subtree s stores to a buffer that e loads. */
static bool writes_read_of(const sh_lir_kernel *k, sh_lir_stmt s, sh_lir_expr e) {
  const sh_lir_snode *x = &k->st[s];
  if (x->kind == SH_LIR_S_STORE) return sh_lir_uses_buf(k, e, x->buf);
  for (sh_lir_stmt c = x->body; c >= 0; c = k->st[c].next)
    if (writes_read_of(k, c, e)) return true;
  if (x->kind == SH_LIR_S_IF && x->els >= 0 && writes_read_of(k, x->els, e)) return true;
  return false;
}

/* The outermost loop around `store` that e can be computed before, or
 * NONE when e varies in the innermost one (or there is none). */
static sh_lir_stmt hoist_target(const sh_lir_kernel *k, sh_lir_stmt store, sh_lir_expr e) {
  sh_lir_stmt best = SH_LIR_NONE;
  for (sh_lir_stmt p = k->st[store].parent; p >= 0 && p != k->root; p = k->st[p].parent) {
    const sh_lir_snode *x = &k->st[p];
    if (x->kind == SH_LIR_S_ALLOC) {
      if (sh_lir_uses_buf(k, e, x->buf)) break;
      continue;
    }
    if (x->kind == SH_LIR_S_BLOCK) continue;
    if (x->kind != SH_LIR_S_LOOP || x->annot == SH_LIR_PARALLEL) break;
    if (sh_lir_uses_var(k, e, x->var) || writes_read_of(k, p, e)) break;
    best = p;
  }
  return best;
}

static sh_lir_expr hoist_into(sh_lir_kernel *k, sh_lir_stmt at, sh_lir_expr e, int *count) {
  char name[64];
  do snprintf(name, sizeof name, "h%d", (*count)++);
  while (sh_lir_find_buffer(k, name) >= 0);
  sh_lir_expr one = sh_lir_int(k, 1), zero = sh_lir_int(k, 0);
  sh_lir_buf h = sh_lir_buffer(k, name, SH_LIR_F32, SH_LIR_LOCAL, 1, &one);
  if (k->err) return e;
  sh_lir_stmt a = sh_lir_new_stmt(k, SH_LIR_S_ALLOC);
  sh_lir_stmt st = sh_lir_new_stmt(k, SH_LIR_S_STORE);
  if (k->err) return e;
  k->st[a].buf = h;
  k->st[st].buf = h;
  k->st[st].idx = sh_lir_new_list(k, 1, &zero);
  k->st[st].nidx = 1;
  k->st[st].val = e;
  k->st[st].combine = SH_LIR_COMBINE_NONE;
  sh_lir_replace(k, at, a);
  sh_lir_append(k, a, st);
  sh_lir_append(k, a, at);
  return sh_lir_load1(k, h, zero);
}

static sh_lir_expr hoist_expr(sh_lir_kernel *k, sh_lir_stmt store, sh_lir_expr e, int *count) {
  if (e < 0 || k->err) return e;
  const sh_lir_enode x = k->ex[e];
  if (x.dtype != SH_LIR_F32) return e;
  if (costly(k, e)) {
    sh_lir_stmt at = hoist_target(k, store, e);
    if (at >= 0) return hoist_into(k, at, e, count);
  }
  /* a per-row value read from memory (mu[n] in x - mu[n]) crossing a serial
   * loop: the C compiler may not prove that the loop's stores leave it alone */
  if (x.kind == SH_LIR_E_LOAD && k->bufs[x.a].role != SH_LIR_LOCAL) {
    sh_lir_stmt at = hoist_target(k, store, e);
    if (at >= 0 && k->st[at].annot == SH_LIR_SERIAL) return hoist_into(k, at, e, count);
  }
  switch ((sh_lir_ekind)x.kind) {
  case SH_LIR_E_BIN: {
    if (x.op == SH_LIR_OP_DIV && k->ex[x.b].kind != SH_LIR_E_FLT) {
      sh_lir_stmt at = hoist_target(k, store, x.b);
      if (at >= 0) {
        sh_lir_expr a = hoist_expr(k, store, x.a, count);
        sh_lir_expr r = hoist_into(k, at, sh_lir_bin(k, SH_LIR_OP_DIV, sh_lir_flt(k, 1.0f), x.b), count);
        return sh_lir_mul(k, a, r);
      }
    }
    sh_lir_expr a = hoist_expr(k, store, x.a, count), b = hoist_expr(k, store, x.b, count);
    return a == x.a && b == x.b ? e : sh_lir_bin(k, (sh_lir_op)x.op, a, b);
  }
  case SH_LIR_E_UN: {
    sh_lir_expr a = hoist_expr(k, store, x.a, count);
    return a == x.a ? e : sh_lir_un(k, (sh_lir_fn)x.op, a);
  }
  case SH_LIR_E_SELECT: {
    sh_lir_expr a = hoist_expr(k, store, x.a, count), b = hoist_expr(k, store, x.b, count),
                c = hoist_expr(k, store, x.c, count);
    return a == x.a && b == x.b && c == x.c ? e : sh_lir_select(k, a, b, c);
  }
  default: return e;
  }
}

sheaf_status sh_sched_hoist(sh_lir_kernel *k, sh_lir_stmt s, int *n_hoisted) {
  if (k->err) return k->err;
  if (n_hoisted) *n_hoisted = 0;
  if (s < 0 || s >= k->n_st || (s != k->root && k->st[s].parent < 0))
    return sh_sched_err(k, "hoist: statement %d is not in the kernel", (int)s);
  enum { CAP = 4096 };
  sh_lir_stmt *st = sh_malloc(k->ctx, sizeof(sh_lir_stmt) * CAP);
  if (!st) return sh_lir_fail(k, SHEAF_ERR_NOMEM, "kernel %s: hoist: out of memory", k->name);
  int n = sh_sched_stores(k, s, st, CAP), count = 0, moved = 0;
  if (n > CAP) n = CAP;
  for (int i = 0; i < n && !k->err; i++) {
    int before = count;
    sh_lir_expr v = hoist_expr(k, st[i], k->st[st[i]].val, &count);
    k->st[st[i]].val = v;
    moved += count - before;
  }
  sh_free(k->ctx, st, sizeof(sh_lir_stmt) * CAP);
  if (n_hoisted) *n_hoisted = moved;
  return k->err;
}

/* -------------------------------------------------------------- share */

static sh_lir_expr rebuf(sh_lir_kernel *k, sh_lir_expr e, sh_lir_buf T, sh_lir_buf O) {
  if (e < 0 || k->err) return e;
  const sh_lir_enode x = k->ex[e];
  switch ((sh_lir_ekind)x.kind) {
  case SH_LIR_E_LOAD: {
    if (x.a != T) return e;
    sh_lir_expr idx[SH_LIR_MAX_RANK];
    for (int i = 0; i < x.n; i++) idx[i] = k->list[x.b + i];
    return sh_lir_load(k, O, x.n, idx);
  }
  case SH_LIR_E_BIN: {
    sh_lir_expr a = rebuf(k, x.a, T, O), b = rebuf(k, x.b, T, O);
    return a == x.a && b == x.b ? e : sh_lir_bin(k, (sh_lir_op)x.op, a, b);
  }
  case SH_LIR_E_UN: {
    sh_lir_expr a = rebuf(k, x.a, T, O);
    return a == x.a ? e : sh_lir_un(k, (sh_lir_fn)x.op, a);
  }
  case SH_LIR_E_SELECT: {
    sh_lir_expr a = rebuf(k, x.a, T, O), b = rebuf(k, x.b, T, O), c = rebuf(k, x.c, T, O);
    return a == x.a && b == x.b && c == x.c ? e : sh_lir_select(k, a, b, c);
  }
  default: return e;
  }
}

static void rebuf_tree(sh_lir_kernel *k, sh_lir_stmt s, sh_lir_buf T, sh_lir_buf O) {
  sh_lir_snode *x = &k->st[s];
  if (x->kind == SH_LIR_S_STORE) {
    sh_lir_expr v = rebuf(k, x->val, T, O);
    k->st[s].val = v;
    if (k->st[s].buf == T) k->st[s].buf = O;
    return;
  }
  if (x->kind == SH_LIR_S_IF && x->els >= 0) rebuf_tree(k, x->els, T, O);
  for (sh_lir_stmt c = k->st[s].body; c >= 0; c = k->st[c].next) rebuf_tree(k, c, T, O);
}

/* Every load of b in e has exactly the indices idx (n of them). */
static bool loads_at(const sh_lir_kernel *k, sh_lir_expr e, sh_lir_buf b, int n, const int32_t *idx) {
  if (e < 0) return true;
  const sh_lir_enode *x = &k->ex[e];
  switch ((sh_lir_ekind)x->kind) {
  case SH_LIR_E_LOAD:
    if (x->a == b) {
      if (x->n != n) return false;
      for (int d = 0; d < n; d++)
        if (!sh_lir_expr_eq(k, k->list[x->b + d], idx[d])) return false;
    }
    return true;
  case SH_LIR_E_BIN: return loads_at(k, x->a, b, n, idx) && loads_at(k, x->b, b, n, idx);
  case SH_LIR_E_UN: return loads_at(k, x->a, b, n, idx);
  case SH_LIR_E_SELECT:
    return loads_at(k, x->a, b, n, idx) && loads_at(k, x->b, b, n, idx) && loads_at(k, x->c, b, n, idx);
  default: return true;
  }
}

/* Whether subtree s accesses (loads or stores) b; `skip` is left out. */
static bool touches(const sh_lir_kernel *k, sh_lir_stmt s, sh_lir_buf b, sh_lir_stmt skip) {
  const sh_lir_snode *x = &k->st[s];
  if (s == skip) return false;
  if (x->kind == SH_LIR_S_STORE) {
    if (x->buf == b || sh_lir_uses_buf(k, x->val, b)) return true;
    for (int d = 0; d < x->nidx; d++)
      if (sh_lir_uses_buf(k, k->list[x->idx + d], b)) return true;
    return false;
  }
  if (x->kind == SH_LIR_S_LOOP && sh_lir_uses_buf(k, x->ext, b)) return true;
  if (x->kind == SH_LIR_S_IF) {
    if (sh_lir_uses_buf(k, x->cond, b)) return true;
    if (x->els >= 0 && touches(k, x->els, b, skip)) return true;
  }
  for (sh_lir_stmt c = x->body; c >= 0; c = k->st[c].next)
    if (touches(k, c, b, skip)) return true;
  return false;
}

/* Every access to b in subtree s has index 0 = variable v. */
static bool rows_of(const sh_lir_kernel *k, sh_lir_stmt s, sh_lir_buf b, sh_lir_var v);

static bool expr_rows(const sh_lir_kernel *k, sh_lir_expr e, sh_lir_buf b, sh_lir_var v) {
  if (e < 0) return true;
  const sh_lir_enode *x = &k->ex[e];
  switch ((sh_lir_ekind)x->kind) {
  case SH_LIR_E_LOAD: {
    if (x->a == b) {
      const sh_lir_enode *i0 = &k->ex[k->list[x->b]];
      if (i0->kind != SH_LIR_E_VAR || i0->a != v) return false;
    }
    for (int d = 0; d < x->n; d++)
      if (!expr_rows(k, k->list[x->b + d], b, v)) return false;
    return true;
  }
  case SH_LIR_E_BIN: return expr_rows(k, x->a, b, v) && expr_rows(k, x->b, b, v);
  case SH_LIR_E_UN:
  case SH_LIR_E_CAST: return expr_rows(k, x->a, b, v);
  case SH_LIR_E_SELECT: return expr_rows(k, x->a, b, v) && expr_rows(k, x->b, b, v) && expr_rows(k, x->c, b, v);
  default: return true;
  }
}

static bool rows_of(const sh_lir_kernel *k, sh_lir_stmt s, sh_lir_buf b, sh_lir_var v) {
  const sh_lir_snode *x = &k->st[s];
  if (x->kind == SH_LIR_S_STORE) {
    if (x->buf == b) {
      const sh_lir_enode *i0 = &k->ex[k->list[x->idx]];
      if (i0->kind != SH_LIR_E_VAR || i0->a != v) return false;
    }
    return expr_rows(k, x->val, b, v);
  }
  if (x->kind == SH_LIR_S_IF && x->els >= 0 && !rows_of(k, x->els, b, v)) return false;
  for (sh_lir_stmt c = x->body; c >= 0; c = k->st[c].next)
    if (!rows_of(k, c, b, v)) return false;
  return true;
}

sheaf_status sh_sched_share(sh_lir_kernel *k, sh_lir_buf T, sh_lir_buf O) {
  if (k->err) return k->err;
  if (T < 0 || T >= k->n_bufs || O < 0 || O >= k->n_bufs || T == O)
    return sh_sched_err(k, "share: buffers %d and %d are not two buffers of the kernel", (int)T, (int)O);
  const sh_lir_bufinfo *t = &k->bufs[T], *o = &k->bufs[O];
  if (t->role != SH_LIR_TEMP || t->inlined || t->layout != SH_LIR_LAYOUT_DENSE)
    return sh_sched_err(k, "share of %s: only a dense temporary can live in another buffer", t->name);
  if ((o->role != SH_LIR_OUT && o->role != SH_LIR_TEMP) || o->inlined || o->layout != SH_LIR_LAYOUT_DENSE ||
      o->dtype != t->dtype || o->rank != t->rank)
    return sh_sched_err(k, "share of %s in %s: %s is not a dense written buffer of the same type and rank",
                        t->name, o->name, o->name);
  for (int d = 0; d < t->rank; d++)
    if (!sh_lir_expr_eq(k, t->dims[d], o->dims[d]) || t->pad[d] != o->pad[d])
      return sh_sched_err(k, "share of %s in %s: dimension %d differs", t->name, o->name, d);
  /* F: O's one store, plain, reading T only at its own indices */
  sh_lir_stmt F = sh_lir_find_store(k, O, 0);
  if (F < 0 || sh_lir_find_store(k, O, 1) >= 0 || k->st[F].combine != SH_LIR_COMBINE_NONE)
    return sh_sched_err(k, "share of %s in %s: %s has no single plain store", t->name, o->name, o->name);
  const sh_lir_snode f = k->st[F];
  if (sh_lir_uses_buf(k, f.val, O) || !sh_lir_uses_buf(k, f.val, T) ||
      !loads_at(k, f.val, T, f.nidx, &k->list[f.idx]))
    return sh_sched_err(k, "share of %s in %s: the store to %s does not read %s at its own indices",
                        t->name, o->name, o->name, t->name);
  if (touches(k, k->root, O, F))
    return sh_sched_err(k, "share of %s in %s: %s is accessed outside its store", t->name, o->name, o->name);
  /* F's indices: the variable of a row loop R, then those of every loop
   * between R and F, each once (each element of O written once per row) */
  const sh_lir_enode *i0 = &k->ex[k->list[f.idx]];
  sh_lir_stmt R = i0->kind == SH_LIR_E_VAR ? k->vars[i0->a].loop : SH_LIR_NONE;
  if (R < 0 || !sh_lir_within(k, F, R))
    return sh_sched_err(k, "share of %s in %s: the store's first index is not an enclosing loop's variable",
                        t->name, o->name);
  int n_between = 0;
  for (sh_lir_stmt p = f.parent; p >= 0 && p != R; p = k->st[p].parent) {
    if (k->st[p].kind != SH_LIR_S_LOOP) continue;
    bool found = false;
    for (int d = 1; d < f.nidx; d++) {
      const sh_lir_enode *x = &k->ex[k->list[f.idx + d]];
      found |= x->kind == SH_LIR_E_VAR && x->a == k->st[p].var;
    }
    if (!found) return sh_sched_err(k, "share of %s in %s: the store repeats over a loop it does not "
                                       "index", t->name, o->name);
    n_between++;
  }
  if (n_between != f.nidx - 1)
    return sh_sched_err(k, "share of %s in %s: the store's indices are not its loops'", t->name, o->name);
  /* every access to T is in R at row R; every other one comes before F's
   * statement in R's body */
  if (touches(k, k->root, T, R) || !rows_of(k, R, T, k->st[R].var))
    return sh_sched_err(k, "share of %s in %s: %s is accessed outside the row loop or at another row",
                        t->name, o->name, t->name);
  sh_lir_stmt top = F;
  while (k->st[top].parent != R) top = k->st[top].parent;
  if (touches(k, top, T, F))
    return sh_sched_err(k, "share of %s in %s: %s is accessed next to the store", t->name, o->name, t->name);
  for (sh_lir_stmt c = k->st[top].next; c >= 0; c = k->st[c].next)
    if (touches(k, c, T, SH_LIR_NONE))
      return sh_sched_err(k, "share of %s in %s: %s is read after the store", t->name, o->name, t->name);
  rebuf_tree(k, k->root, T, O);
  k->bufs[T].inlined = true;
  return k->err;
}

/* ------------------------------------------------------------- factor */

/* The reduction loops of store S: the loops around it, innermost first,
 * whose variables S's indices do not use, up to the first that they do
 * use; *outer gets the outermost. False when a non-loop is in between. */
static bool reduction_loops(const sh_lir_kernel *k, sh_lir_stmt S, sh_lir_stmt *outer) {
  const sh_lir_snode *x = &k->st[S];
  *outer = SH_LIR_NONE;
  for (sh_lir_stmt p = x->parent; p >= 0 && p != k->root; p = k->st[p].parent) {
    if (k->st[p].kind != SH_LIR_S_LOOP) break;
    bool idx = false;
    for (int d = 0; d < x->nidx; d++) idx |= sh_lir_uses_var(k, k->list[x->idx + d], k->st[p].var);
    if (idx) break;
    if (k->st[p].body != (*outer >= 0 ? *outer : S) || k->st[(*outer >= 0 ? *outer : S)].next >= 0) return false;
    *outer = p;
  }
  return *outer >= 0;
}

sheaf_status sh_sched_factor(sh_lir_kernel *k, int *n_factored) {
  if (n_factored) *n_factored = 0;
  if (k->err) return k->err;
  sh_lir_stmt st[1024];
  int n = sh_sched_stores(k, k->root, st, 1024), count = 0;
  if (n > 1024) n = 1024;
  for (int i = 0; i < n && !k->err; i++) {
    sh_lir_stmt S = st[i], R;
    const sh_lir_snode x = k->st[S];
    const sh_lir_enode v = k->ex[x.val];
    if (x.combine != SH_LIR_COMBINE_ADD || v.kind != SH_LIR_E_BIN ||
        (v.op != SH_LIR_OP_MUL && v.op != SH_LIR_OP_DIV) || !reduction_loops(k, S, &R))
      continue;
    /* the invariant factor c: a side free of the reduction loops' variables
     * that reads nothing they write */
    sh_lir_expr a = SH_LIR_NONE, c = SH_LIR_NONE;
    for (int side = 0; side < 2 && c < 0; side++) {
      if (side == 0 && v.op == SH_LIR_OP_DIV) continue; /* only a / c */
      sh_lir_expr cand = side ? v.b : v.a, other = side ? v.a : v.b;
      bool inv = !writes_read_of(k, R, cand) && !sh_lir_uses_buf(k, cand, x.buf);
      for (sh_lir_stmt p = S; inv && p != R;) {
        p = k->st[p].parent;
        inv = !sh_lir_uses_var(k, cand, k->st[p].var);
      }
      if (inv) c = cand, a = other;
    }
    if (c < 0) continue;
    /* the element starts at 0 just before R */
    sh_lir_stmt init = SH_LIR_NONE;
    for (sh_lir_stmt p = k->st[k->st[R].parent].body; p >= 0 && k->st[p].next >= 0; p = k->st[p].next)
      if (k->st[p].next == R) init = p;
    if (init < 0) continue;
    const sh_lir_snode *in = &k->st[init];
    const sh_lir_enode *iv = &k->ex[in->val];
    bool same = in->kind == SH_LIR_S_STORE && in->buf == x.buf && in->nidx == x.nidx &&
                in->combine == SH_LIR_COMBINE_NONE && iv->kind == SH_LIR_E_FLT && iv->f == 0.0f;
    for (int d = 0; same && d < x.nidx; d++) same = sh_lir_expr_eq(k, k->list[in->idx + d], k->list[x.idx + d]);
    if (!same) continue;
    sh_lir_stmt post = sh_lir_new_stmt(k, SH_LIR_S_STORE);
    if (post < 0) break;
    k->st[post].buf = x.buf;
    k->st[post].idx = x.idx;
    k->st[post].nidx = x.nidx;
    k->st[post].combine = SH_LIR_COMBINE_NONE;
    k->st[post].val = sh_lir_bin(k, (sh_lir_op)v.op, sh_lir_load(k, x.buf, x.nidx, &k->list[x.idx]), c);
    k->st[S].val = a;
    sh_lir_insert_after(k, R, post);
    count++;
  }
  if (n_factored) *n_factored = count;
  return k->err;
}

/* ----------------------------------------------------------- contract */

/* Every access to b in e is b[v]; *n counts them. */
static bool at_var(const sh_lir_kernel *k, sh_lir_expr e, sh_lir_buf b, sh_lir_var v, int *n) {
  if (e < 0) return true;
  const sh_lir_enode *x = &k->ex[e];
  switch ((sh_lir_ekind)x->kind) {
  case SH_LIR_E_LOAD:
    if (x->a == b) {
      const sh_lir_enode *i0 = &k->ex[k->list[x->b]];
      if (x->n != 1 || i0->kind != SH_LIR_E_VAR || i0->a != v) return false;
      (*n)++;
      return true;
    }
    for (int i = 0; i < x->n; i++)
      if (!at_var(k, k->list[x->b + i], b, v, n)) return false;
    return true;
  case SH_LIR_E_BIN: return at_var(k, x->a, b, v, n) && at_var(k, x->b, b, v, n);
  case SH_LIR_E_UN:
  case SH_LIR_E_CAST: return at_var(k, x->a, b, v, n);
  case SH_LIR_E_SELECT: return at_var(k, x->a, b, v, n) && at_var(k, x->b, b, v, n) && at_var(k, x->c, b, v, n);
  default: return true;
  }
}

static bool tree_at_var(const sh_lir_kernel *k, sh_lir_stmt s, sh_lir_buf b, sh_lir_var v, int *n) {
  const sh_lir_snode *x = &k->st[s];
  if (x->kind == SH_LIR_S_STORE) {
    if (x->buf == b) {
      const sh_lir_enode *i0 = &k->ex[k->list[x->idx]];
      if (x->nidx != 1 || i0->kind != SH_LIR_E_VAR || i0->a != v) return false;
      (*n)++;
    }
    for (int d = 0; d < x->nidx; d++)
      if (!at_var(k, k->list[x->idx + d], b, v, n)) return false;
    return at_var(k, x->val, b, v, n);
  }
  if (x->kind == SH_LIR_S_LOOP && !at_var(k, x->ext, b, v, n)) return false;
  if (x->kind == SH_LIR_S_IF) {
    if (!at_var(k, x->cond, b, v, n)) return false;
    if (x->els >= 0 && !tree_at_var(k, x->els, b, v, n)) return false;
  }
  for (sh_lir_stmt c = x->body; c >= 0; c = k->st[c].next)
    if (!tree_at_var(k, c, b, v, n)) return false;
  return true;
}

static sh_lir_expr to_local(sh_lir_kernel *k, sh_lir_expr e, sh_lir_buf T, sh_lir_buf L) {
  if (e < 0 || k->err) return e;
  const sh_lir_enode x = k->ex[e];
  switch ((sh_lir_ekind)x.kind) {
  case SH_LIR_E_LOAD: return x.a == T ? sh_lir_load1(k, L, sh_lir_int(k, 0)) : e;
  case SH_LIR_E_BIN: {
    sh_lir_expr a = to_local(k, x.a, T, L), b = to_local(k, x.b, T, L);
    return a == x.a && b == x.b ? e : sh_lir_bin(k, (sh_lir_op)x.op, a, b);
  }
  case SH_LIR_E_UN: {
    sh_lir_expr a = to_local(k, x.a, T, L);
    return a == x.a ? e : sh_lir_un(k, (sh_lir_fn)x.op, a);
  }
  case SH_LIR_E_SELECT: {
    sh_lir_expr a = to_local(k, x.a, T, L), b = to_local(k, x.b, T, L), c = to_local(k, x.c, T, L);
    return a == x.a && b == x.b && c == x.c ? e : sh_lir_select(k, a, b, c);
  }
  default: return e;
  }
}

static void to_local_tree(sh_lir_kernel *k, sh_lir_stmt s, sh_lir_buf T, sh_lir_buf L) {
  sh_lir_snode *x = &k->st[s];
  if (x->kind == SH_LIR_S_STORE) {
    sh_lir_expr v = to_local(k, x->val, T, L);
    k->st[s].val = v;
    if (k->st[s].buf == T) {
      sh_lir_expr z = sh_lir_int(k, 0);
      k->st[s].buf = L;
      k->st[s].idx = sh_lir_new_list(k, 1, &z);
    }
    return;
  }
  if (x->kind == SH_LIR_S_IF && x->els >= 0) to_local_tree(k, x->els, T, L);
  for (sh_lir_stmt c = k->st[s].body; c >= 0; c = k->st[c].next) to_local_tree(k, c, T, L);
}

sheaf_status sh_sched_contract(sh_lir_kernel *k, sh_lir_buf T) {
  if (k->err) return k->err;
  if (T < 0 || T >= k->n_bufs) return sh_sched_err(k, "contract: buffer %d is not in the kernel", (int)T);
  const sh_lir_bufinfo *t = &k->bufs[T];
  if (t->role != SH_LIR_TEMP || t->inlined || t->layout != SH_LIR_LAYOUT_DENSE || t->rank != 1 ||
      t->dtype != SH_LIR_F32)
    return sh_sched_err(k, "contract of %s: not a dense f32 temporary of rank 1", t->name);
  sh_lir_stmt S = sh_lir_find_store(k, T, 0);
  const sh_lir_enode *i0 = S >= 0 ? &k->ex[k->list[k->st[S].idx]] : NULL;
  sh_lir_stmt R = i0 && i0->kind == SH_LIR_E_VAR ? k->vars[i0->a].loop : SH_LIR_NONE;
  int inside = 0, all = 0;
  if (R < 0 || !tree_at_var(k, R, T, k->st[R].var, &inside) ||
      !tree_at_var(k, k->root, T, k->st[R].var, &all) || all != inside)
    return sh_sched_err(k, "contract of %s: not every access is %s[r] inside the loop r of its first store",
                        t->name, t->name);
  char name[200];
  snprintf(name, sizeof name, "%s_r", t->name);
  for (int i = 2; sh_lir_find_buffer(k, name) >= 0; i++) snprintf(name, sizeof name, "%s_r%d", t->name, i);
  sh_lir_expr one = sh_lir_int(k, 1);
  sh_lir_buf L = sh_lir_buffer(k, name, SH_LIR_F32, SH_LIR_LOCAL, 1, &one);
  sh_lir_stmt a = sh_lir_new_stmt(k, SH_LIR_S_ALLOC);
  if (k->err) return k->err;
  k->st[a].buf = L;
  /* the alloc takes R's body */
  k->st[a].body = k->st[R].body;
  for (sh_lir_stmt c = k->st[a].body; c >= 0; c = k->st[c].next) k->st[c].parent = a;
  k->st[R].body = SH_LIR_NONE;
  sh_lir_append(k, R, a);
  to_local_tree(k, a, T, L);
  k->bufs[T].inlined = true;
  return k->err;
}
