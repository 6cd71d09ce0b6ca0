/*
 * sched.c — loop schedule primitives: split (guard / peel / pad tails),
 * reorder, fuse, unroll, vectorize, parallel, storage padding, panel
 * packing, and unswitching of split guards. cache_write, rfactor and the
 * inlining primitives are in sched_cache.c; the default schedule in
 * sched_default.c. Every primitive validates before it changes anything.
 */
#include "codegen/lir_sched.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "codegen/lir_int.h"
#include "codegen/lir_sched_int.h"

sheaf_status sh_sched_err(sh_lir_kernel *k, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return sh_fail(k->ctx, SHEAF_ERR_INVALID_ARG, "kernel %s: %s", k->name, msg);
}

bool sh_sched_is_loop(const sh_lir_kernel *k, sh_lir_stmt s) {
  return s >= 0 && s < k->n_st && k->st[s].kind == SH_LIR_S_LOOP && k->st[s].parent >= 0;
}

int sh_sched_stores(const sh_lir_kernel *k, sh_lir_stmt s, sh_lir_stmt *out, int cap) {
  int n = 0;
  const sh_lir_snode *x = &k->st[s];
  if (x->kind == SH_LIR_S_STORE) {
    if (cap > 0) out[0] = s;
    return 1;
  }
  for (sh_lir_stmt c = x->body; c >= 0; c = k->st[c].next)
    n += sh_sched_stores(k, c, out + (n < cap ? n : cap), cap > n ? cap - n : 0);
  if (x->kind == SH_LIR_S_IF && x->els >= 0)
    n += sh_sched_stores(k, x->els, out + (n < cap ? n : cap), cap > n ? cap - n : 0);
  return n;
}

static bool has_kind(const sh_lir_kernel *k, sh_lir_stmt s, sh_lir_skind kind, bool self) {
  const sh_lir_snode *x = &k->st[s];
  if (self && x->kind == kind) return true;
  for (sh_lir_stmt c = x->body; c >= 0; c = k->st[c].next)
    if (has_kind(k, c, kind, true)) return true;
  if (x->kind == SH_LIR_S_IF && x->els >= 0 && has_kind(k, x->els, kind, true)) return true;
  return false;
}

bool sh_sched_contains_loop(const sh_lir_kernel *k, sh_lir_stmt s) {
  return has_kind(k, s, SH_LIR_S_LOOP, false);
}

static bool inside_annot(const sh_lir_kernel *k, sh_lir_stmt s, sh_lir_annot a) {
  for (sh_lir_stmt p = k->st[s].parent; p >= 0; p = k->st[p].parent)
    if (k->st[p].kind == SH_LIR_S_LOOP && k->st[p].annot == a) return true;
  return false;
}

static bool holds_annot(const sh_lir_kernel *k, sh_lir_stmt s, sh_lir_annot a) {
  for (sh_lir_stmt c = k->st[s].body; c >= 0; c = k->st[c].next) {
    if (k->st[c].kind == SH_LIR_S_LOOP && k->st[c].annot == a) return true;
    if (holds_annot(k, c, a)) return true;
    if (k->st[c].kind == SH_LIR_S_IF && k->st[c].els >= 0 && holds_annot(k, k->st[c].els, a))
      return true;
  }
  return false;
}

static const char *lname(const sh_lir_kernel *k, sh_lir_stmt loop) {
  return k->vars[k->st[loop].var].name;
}

/* -------------------------------------------------------------- guards */

static bool ex_uses_any(const sh_lir_kernel *k, sh_lir_expr e, int n, const sh_lir_var *vs) {
  for (int i = 0; i < n; i++)
    if (sh_lir_uses_var(k, e, vs[i])) return true;
  return false;
}

/* Wraps s in a new `if cond` (s keeps its place in the tree). */
sh_lir_stmt sh_sched_wrap_if(sh_lir_kernel *k, sh_lir_stmt s, sh_lir_expr cond) {
  sh_lir_stmt w = sh_lir_new_stmt(k, SH_LIR_S_IF);
  if (w < 0) return w;
  k->st[w].cond = cond;
  sh_lir_replace(k, s, w);
  sh_lir_append(k, w, s);
  return w;
}

/* Pushes `guard` (over variables vs) down to the stores of s: merged into
 * an else-less if, or wrapped around a store, or around a loop whose extent
 * (or an if whose condition) needs the guard. */
static void push_guard(sh_lir_kernel *k, sh_lir_stmt s, sh_lir_expr guard, int n,
                       const sh_lir_var *vs) {
  sh_lir_snode *x = &k->st[s];
  switch ((sh_lir_skind)x->kind) {
  case SH_LIR_S_STORE: sh_sched_wrap_if(k, s, guard); return;
  case SH_LIR_S_PREFETCH: return; /* a hint needs no guard */
  case SH_LIR_S_IF:
    if (x->els < 0) {
      sh_lir_expr c = sh_lir_bin(k, SH_LIR_OP_AND, guard, x->cond);
      k->st[s].cond = c;
    } else {
      sh_sched_wrap_if(k, s, guard);
    }
    return;
  case SH_LIR_S_LOOP:
    if (ex_uses_any(k, x->ext, n, vs)) {
      sh_sched_wrap_if(k, s, guard);
      return;
    }
    break;
  case SH_LIR_S_BLOCK:
  case SH_LIR_S_ALLOC: break;
  }
  sh_lir_stmt c = k->st[s].body;
  while (c >= 0) {
    sh_lir_stmt next = k->st[c].next; /* read before wrapping moves c */
    push_guard(k, c, guard, n, vs);
    c = next;
  }
}

/* --------------------------------------------------------------- split */

/* The loop variable v is used by this access only as index d, exactly. */
static int sole_dim(const sh_lir_kernel *k, int n, const int32_t *idx, sh_lir_var v) {
  int dim = -1;
  for (int d = 0; d < n; d++) {
    if (!sh_lir_uses_var(k, idx[d], v)) continue;
    const sh_lir_enode *x = &k->ex[idx[d]];
    if (dim >= 0 || x->kind != SH_LIR_E_VAR) return -2;
    dim = d;
  }
  return dim;
}

/* Every access by v can run over the padded tiles: checks PAD's rules. */
static sheaf_status pad_ok_expr(sh_lir_kernel *k, sh_lir_expr e, sh_lir_var v, sh_lir_expr E,
                                int64_t f, const char *lv) {
  if (e < 0) return SHEAF_OK;
  const sh_lir_enode x = k->ex[e];
  sheaf_status st;
  switch ((sh_lir_ekind)x.kind) {
  case SH_LIR_E_BIN:
    if ((st = pad_ok_expr(k, x.a, v, E, f, lv))) return st;
    return pad_ok_expr(k, x.b, v, E, f, lv);
  case SH_LIR_E_UN:
  case SH_LIR_E_CAST:
    if (x.kind == SH_LIR_E_CAST && sh_lir_uses_var(k, x.a, v))
      return sh_sched_err(k, "split of loop %s with padding: its variable is used as a value", lv);
    return pad_ok_expr(k, x.a, v, E, f, lv);
  case SH_LIR_E_SELECT:
    if ((st = pad_ok_expr(k, x.a, v, E, f, lv)) || (st = pad_ok_expr(k, x.b, v, E, f, lv)))
      return st;
    return pad_ok_expr(k, x.c, v, E, f, lv);
  case SH_LIR_E_LOAD: {
    int d = sole_dim(k, x.n, &k->list[x.b], v);
    if (d == -1) return SHEAF_OK;
    return sh_sched_pad_access(k, x.a, x.n, &k->list[x.b], d, v, E, f, lv);
  }
  default: return SHEAF_OK;
  }
}

sheaf_status sh_sched_pad_access(sh_lir_kernel *k, sh_lir_buf b, int n, const int32_t *idx, int d,
                                 sh_lir_var v, sh_lir_expr E, int64_t f, const char *lv) {
  const sh_lir_bufinfo *bi = &k->bufs[b];
  if (d < 0)
    return sh_sched_err(k, "split of loop %s with padding: %s is indexed by an expression of %s, "
                           "not by %s alone", lv, bi->name, lv, lv);
  int64_t tile = bi->layout == SH_LIR_LAYOUT_PANELS && d == 1 ? bi->panel : bi->pad[d];
  bool ragged = bi->layout == SH_LIR_LAYOUT_RAGGED && (bi->ragged_mask & (1u << d));
  bool extent_ok;
  if (ragged) {
    const sh_lir_enode *x = &k->ex[E];
    extent_ok = x->kind == SH_LIR_E_LOAD && x->a == bi->lengths &&
                sh_lir_expr_eq(k, k->list[x->b], idx[0]);
  } else {
    extent_ok = sh_lir_expr_eq(k, E, bi->dims[d]);
  }
  if (bi->role == SH_LIR_LOCAL || tile < f || tile % f != 0 || !extent_ok)
    return sh_sched_err(k,
                        "split of loop %s with padding: dimension %d of %s is not padded to a "
                        "multiple of %lld over the loop's extent (sh_sched_pad it first)",
                        lv, d, bi->name, (long long)f);
  return SHEAF_OK;
}

static sheaf_status pad_ok(sh_lir_kernel *k, sh_lir_stmt s, sh_lir_var v, sh_lir_expr E, int64_t f,
                           const char *lv) {
  const sh_lir_snode *x = &k->st[s];
  sheaf_status st;
  switch ((sh_lir_skind)x->kind) {
  case SH_LIR_S_STORE: {
    int d = sole_dim(k, x->nidx, &k->list[x->idx], v);
    if (d == -1)
      return sh_sched_err(k, "split of loop %s with padding: the store to %s does not depend on "
                             "it (a reduction would add the padding in)", lv, k->bufs[x->buf].name);
    if ((st = sh_sched_pad_access(k, x->buf, x->nidx, &k->list[x->idx], d, v, E, f, lv))) return st;
    for (int i = 0; i < x->nidx; i++)
      if ((st = pad_ok_expr(k, k->list[x->idx + i], v, E, f, lv))) return st;
    return pad_ok_expr(k, x->val, v, E, f, lv);
  }
  case SH_LIR_S_LOOP:
    if (sh_lir_uses_var(k, x->ext, v))
      return sh_sched_err(k, "split of loop %s with padding: an inner extent depends on it", lv);
    break;
  case SH_LIR_S_IF:
    if (sh_lir_uses_var(k, x->cond, v))
      return sh_sched_err(k, "split of loop %s with padding: a condition depends on it", lv);
    if (x->els >= 0 && (st = pad_ok(k, x->els, v, E, f, lv))) return st;
    break;
  default: break;
  }
  for (sh_lir_stmt c = x->body; c >= 0; c = k->st[c].next)
    if ((st = pad_ok(k, c, v, E, f, lv))) return st;
  return SHEAF_OK;
}

sheaf_status sh_sched_split(sh_lir_kernel *k, sh_lir_stmt loop, int64_t f, sh_sched_tail tail,
                            sh_lir_stmt *outer, sh_lir_stmt *inner, sh_lir_stmt *tail_loop) {
  if (outer) *outer = SH_LIR_NONE;
  if (inner) *inner = SH_LIR_NONE;
  if (tail_loop) *tail_loop = SH_LIR_NONE;
  if (k->err) return k->err;
  if (!sh_sched_is_loop(k, loop)) return sh_sched_err(k, "split: statement %d is not a loop", (int)loop);
  const char *lv = lname(k, loop);
  if (f < 1 || f > (1 << 20))
    return sh_sched_err(k, "split of loop %s: factor %lld (expected 1..2^20)", lv, (long long)f);
  if ((unsigned)tail > SH_SCHED_TAIL_GUARD_TOP)
    return sh_sched_err(k, "split of loop %s: unknown tail policy %d", lv, (int)tail);
  sh_lir_snode L = k->st[loop];
  if (L.annot == SH_LIR_VECTOR)
    return sh_sched_err(k, "split of loop %s: the loop is vectorized", lv);
  sh_lir_expr E = L.ext;
  int64_t ec;
  bool exact = sh_lir_is_const(k, E, &ec) && ec % f == 0;
  if (tail == SH_SCHED_TAIL_PAD && !exact) {
    for (sh_lir_stmt c = L.body; c >= 0; c = k->st[c].next) {
      sheaf_status st = pad_ok(k, c, L.var, E, f, lv);
      if (st) return st;
    }
  }
  char name[80];
  snprintf(name, sizeof name, "%s_i", lv);
  sh_lir_stmt in = sh_lir_new_stmt(k, SH_LIR_S_LOOP);
  if (in < 0) return k->err;
  sh_lir_var vi = sh_lir_new_var(k, name, in);
  snprintf(name, sizeof name, "%s_o", lv);
  sh_lir_var vo = sh_lir_new_var(k, name, loop);
  if (vi < 0 || vo < 0) return k->err;
  sh_lir_expr F = sh_lir_int(k, f);
  sh_lir_expr ext_o = tail == SH_SCHED_TAIL_PEEL || exact
                          ? sh_lir_bin(k, SH_LIR_OP_DIV, E, F)
                          : sh_lir_bin(k, SH_LIR_OP_DIV, sh_lir_add(k, E, sh_lir_int(k, f - 1)), F);
  ext_o = sh_lir_simplify(k, ext_o);
  sh_lir_expr repl = sh_lir_add(k, sh_lir_mul(k, sh_lir_v(k, vo), F), sh_lir_v(k, vi));
  sh_lir_var old = L.var;
  /* the peeled tail: a copy of the body before it changes */
  sh_lir_stmt tl = SH_LIR_NONE;
  if (tail == SH_SCHED_TAIL_PEEL && !exact) {
    tl = sh_lir_new_stmt(k, SH_LIR_S_LOOP);
    snprintf(name, sizeof name, "%s_t", lv);
    sh_lir_var vt = sh_lir_new_var(k, name, tl);
    if (tl < 0 || vt < 0) return k->err;
    sh_lir_expr base = sh_lir_mul(k, sh_lir_bin(k, SH_LIR_OP_DIV, E, F), F);
    k->st[tl].var = vt;
    k->st[tl].ext = sh_lir_simplify(k, sh_lir_sub(k, E, base));
    sh_lir_expr trepl = sh_lir_add(k, base, sh_lir_v(k, vt));
    for (sh_lir_stmt c = L.body; c >= 0; c = k->st[c].next) {
      sh_lir_stmt d = sh_lir_clone(k, c, 1, &old, &trepl, "_t");
      if (d < 0) return k->err;
      sh_lir_append(k, tl, d);
    }
  }
  /* the inner loop takes the body */
  k->st[in].var = vi;
  k->st[in].ext = F;
  k->st[in].body = L.body;
  for (sh_lir_stmt c = L.body; c >= 0; c = k->st[c].next) k->st[c].parent = in;
  k->st[loop].body = SH_LIR_NONE;
  if (L.annot == SH_LIR_UNROLL) k->st[loop].annot = SH_LIR_SERIAL;
  k->st[loop].var = vo;
  k->st[loop].ext = ext_o;
  k->vars[old].loop = SH_LIR_NONE;
  sh_lir_append(k, loop, in);
  sh_lir_subst_stmt(k, in, 1, &old, &repl);
  if (tail == SH_SCHED_TAIL_GUARD_TOP && !exact && k->st[in].body >= 0) {
    sh_lir_stmt w = sh_lir_new_stmt(k, SH_LIR_S_IF);
    if (w < 0) return k->err;
    k->st[w].cond = sh_lir_bin(k, SH_LIR_OP_LT, repl, E);
    k->st[w].body = k->st[in].body;
    for (sh_lir_stmt c = k->st[w].body; c >= 0; c = k->st[c].next) k->st[c].parent = w;
    k->st[in].body = SH_LIR_NONE;
    sh_lir_append(k, in, w);
  }
  if (tail == SH_SCHED_TAIL_GUARD && !exact) {
    sh_lir_expr g = sh_lir_bin(k, SH_LIR_OP_LT, repl, E);
    sh_lir_var vs[2] = {vo, vi};
    sh_lir_stmt c = k->st[in].body;
    while (c >= 0) {
      sh_lir_stmt next = k->st[c].next;
      push_guard(k, c, g, 2, vs);
      c = next;
    }
  }
  if (tl >= 0) sh_lir_insert_after(k, loop, tl);
  if (outer) *outer = loop;
  if (inner) *inner = in;
  if (tail_loop) *tail_loop = tl;
  return k->err;
}

/* ------------------------------------------------------------- reorder */

sheaf_status sh_sched_reorder(sh_lir_kernel *k, int n, const sh_lir_stmt *order) {
  if (k->err) return k->err;
  if (n < 1 || n > SH_SCHED_MAX_BAND) return sh_sched_err(k, "reorder: %d loops (1..%d)", n, SH_SCHED_MAX_BAND);
  for (int i = 0; i < n; i++) {
    if (!sh_sched_is_loop(k, order[i])) return sh_sched_err(k, "reorder: statement %d is not a loop", (int)order[i]);
    for (int j = 0; j < i; j++)
      if (order[j] == order[i]) return sh_sched_err(k, "reorder: loop %s given twice", lname(k, order[i]));
  }
  /* the outermost of them, then the chain below it */
  sh_lir_stmt top = SH_LIR_NONE;
  for (int i = 0; i < n && top < 0; i++) {
    bool inner = false;
    for (int j = 0; j < n; j++)
      if (j != i && sh_lir_within(k, order[i], order[j])) inner = true;
    if (!inner) top = order[i];
  }
  sh_lir_stmt chain[SH_SCHED_MAX_BAND];
  chain[0] = top;
  for (int p = 1; p < n; p++) {
    sh_lir_stmt b = k->st[chain[p - 1]].body;
    bool in_set = false;
    for (int j = 0; j < n; j++) in_set |= order[j] == b;
    if (b < 0 || k->st[b].next >= 0 || !in_set)
      return sh_sched_err(k,
                          "reorder: loops %s .. are not a perfectly nested band (loop %s holds "
                          "other statements than the next loop of the list)",
                          lname(k, top), lname(k, chain[p - 1]));
    chain[p] = b;
  }
  /* extents may use only the variables of loops that stay outside them */
  for (int p = 0; p < n; p++) {
    const sh_lir_snode *L = &k->st[order[p]];
    for (int q = p; q < n; q++)
      if (sh_lir_uses_var(k, L->ext, k->st[order[q]].var))
        return sh_sched_err(k, "reorder: the extent of loop %s depends on loop %s, which would "
                               "not be outside it", lname(k, order[p]), lname(k, order[q]));
    if (L->annot == SH_LIR_VECTOR && p != n - 1)
      return sh_sched_err(k, "reorder: vector loop %s must stay innermost", lname(k, order[p]));
  }
  /* relink: the statements keep their loops; the innermost body moves */
  sh_lir_stmt body = k->st[chain[n - 1]].body;
  for (int p = 0; p < n; p++) k->st[chain[p]].body = SH_LIR_NONE;
  if (order[0] != top) sh_lir_replace(k, top, order[0]);
  for (int p = 0; p + 1 < n; p++) {
    k->st[order[p]].body = order[p + 1];
    k->st[order[p + 1]].parent = order[p];
    k->st[order[p + 1]].next = SH_LIR_NONE;
  }
  k->st[order[n - 1]].body = body;
  for (sh_lir_stmt c = body; c >= 0; c = k->st[c].next) k->st[c].parent = order[n - 1];
  return SHEAF_OK;
}

/* ---------------------------------------------------------------- fuse */

sheaf_status sh_sched_fuse(sh_lir_kernel *k, sh_lir_stmt outer, sh_lir_stmt inner, sh_lir_stmt *fused) {
  if (fused) *fused = SH_LIR_NONE;
  if (k->err) return k->err;
  if (!sh_sched_is_loop(k, outer) || !sh_sched_is_loop(k, inner))
    return sh_sched_err(k, "fuse: statements %d and %d are not both loops", (int)outer, (int)inner);
  const sh_lir_snode O = k->st[outer], I = k->st[inner];
  if (O.body != inner || I.next >= 0)
    return sh_sched_err(k, "fuse: loop %s is not the only statement of loop %s", lname(k, inner),
                        lname(k, outer));
  if (sh_lir_uses_var(k, I.ext, O.var))
    return sh_sched_err(k, "fuse: the extent of loop %s depends on loop %s", lname(k, inner),
                        lname(k, outer));
  if (O.annot == SH_LIR_VECTOR || I.annot == SH_LIR_VECTOR || I.annot == SH_LIR_PARALLEL)
    return sh_sched_err(k, "fuse of loops %s and %s: vector loops and inner parallel loops cannot "
                           "be fused", lname(k, outer), lname(k, inner));
  char name[120];
  snprintf(name, sizeof name, "%s_%s", lname(k, outer), lname(k, inner));
  sh_lir_var vf = sh_lir_new_var(k, name, outer);
  if (vf < 0) return k->err;
  sh_lir_expr f = sh_lir_v(k, vf);
  sh_lir_var vs[2] = {O.var, I.var};
  sh_lir_expr repl[2] = {sh_lir_bin(k, SH_LIR_OP_DIV, f, I.ext), sh_lir_bin(k, SH_LIR_OP_MOD, f, I.ext)};
  sh_lir_expr ext = sh_lir_simplify(k, sh_lir_mul(k, O.ext, I.ext));
  /* the outer loop takes the inner one's body */
  k->st[outer].body = I.body;
  for (sh_lir_stmt c = I.body; c >= 0; c = k->st[c].next) k->st[c].parent = outer;
  k->st[inner].body = k->st[inner].parent = SH_LIR_NONE;
  k->vars[O.var].loop = k->vars[I.var].loop = SH_LIR_NONE;
  k->st[outer].var = vf;
  k->st[outer].ext = ext;
  for (sh_lir_stmt c = k->st[outer].body; c >= 0; c = k->st[c].next) sh_lir_subst_stmt(k, c, 2, vs, repl);
  if (fused) *fused = outer;
  return k->err;
}

/* ------------------------------------------------- unroll / vectorize */

sheaf_status sh_sched_unroll(sh_lir_kernel *k, sh_lir_stmt loop) {
  if (k->err) return k->err;
  if (!sh_sched_is_loop(k, loop)) return sh_sched_err(k, "unroll: statement %d is not a loop", (int)loop);
  int64_t c;
  if (!sh_lir_is_const(k, k->st[loop].ext, &c) || c > 256)
    return sh_sched_err(k, "unroll of loop %s: the extent is not a constant up to 256 (split it first)",
                        lname(k, loop));
  if (k->st[loop].annot == SH_LIR_VECTOR || k->st[loop].annot == SH_LIR_PARALLEL)
    return sh_sched_err(k, "unroll of loop %s: the loop is %s", lname(k, loop),
                        k->st[loop].annot == SH_LIR_VECTOR ? "vectorized" : "parallel");
  k->st[loop].annot = SH_LIR_UNROLL;
  return SHEAF_OK;
}

/* The store's target is stride-1 in v (last index v + v-free part, the
 * others v-free) or v-free with a combine (a reduction over the lanes). */
bool sh_sched_store_vectorizable(sh_lir_kernel *k, sh_lir_stmt s, sh_lir_var v) {
  const sh_lir_snode *x = &k->st[s];
  bool uses = false;
  for (int d = 0; d < x->nidx; d++) uses |= sh_lir_uses_var(k, k->list[x->idx + d], v);
  if (!uses) return x->combine != SH_LIR_COMBINE_NONE || !sh_lir_uses_var(k, x->val, v);
  for (int d = 0; d + 1 < x->nidx; d++)
    if (sh_lir_uses_var(k, k->list[x->idx + d], v)) return false;
  int64_t coef;
  return sh_lir_affine(k, k->list[x->idx + x->nidx - 1], v, &coef, NULL) && coef == 1;
}

sheaf_status sh_sched_vectorize(sh_lir_kernel *k, sh_lir_stmt loop, int width) {
  if (k->err) return k->err;
  if (!sh_sched_is_loop(k, loop)) return sh_sched_err(k, "vectorize: statement %d is not a loop", (int)loop);
  const char *lv = lname(k, loop);
  if (width == 1) return SHEAF_OK;
  if (width != 8 && width != 16)
    return sh_sched_err(k, "vectorize of loop %s: width %d (8 or 16; 1 leaves it scalar)", lv, width);
  int64_t c;
  if (!sh_lir_is_const(k, k->st[loop].ext, &c) || c != width)
    return sh_sched_err(k, "vectorize of loop %s: its extent must be %d (split it by %d first)", lv,
                        width, width);
  if (has_kind(k, loop, SH_LIR_S_LOOP, false) || has_kind(k, loop, SH_LIR_S_ALLOC, false))
    return sh_sched_err(k, "vectorize of loop %s: not an innermost loop", lv);
  if (inside_annot(k, loop, SH_LIR_VECTOR) || k->st[loop].annot == SH_LIR_PARALLEL)
    return sh_sched_err(k, "vectorize of loop %s: inside a vector loop, or parallel", lv);
  sh_lir_stmt st[256];
  int n = sh_sched_stores(k, loop, st, 256);
  if (n > 256) return sh_sched_err(k, "vectorize of loop %s: more than 256 stores", lv);
  for (int i = 0; i < n; i++)
    if (!sh_sched_store_vectorizable(k, st[i], k->st[loop].var))
      return sh_sched_err(k,
                          "vectorize of loop %s: the store to %s is not stride-1 in %s (nor a "
                          "reduction over it)",
                          lv, k->bufs[k->st[st[i]].buf].name, lv);
  k->st[loop].annot = SH_LIR_VECTOR;
  k->st[loop].width = width;
  return SHEAF_OK;
}

/* ------------------------------------------------------------ parallel */

static bool local_inside(const sh_lir_kernel *k, sh_lir_stmt s, sh_lir_buf b, sh_lir_stmt top) {
  for (sh_lir_stmt p = k->st[s].parent; p >= 0 && p != k->st[top].parent; p = k->st[p].parent)
    if (k->st[p].kind == SH_LIR_S_ALLOC && k->st[p].buf == b) return true;
  return false;
}

sheaf_status sh_sched_parallel(sh_lir_kernel *k, sh_lir_stmt loop) {
  if (k->err) return k->err;
  if (!sh_sched_is_loop(k, loop)) return sh_sched_err(k, "parallel: statement %d is not a loop", (int)loop);
  const char *lv = lname(k, loop);
  if (inside_annot(k, loop, SH_LIR_PARALLEL) || inside_annot(k, loop, SH_LIR_VECTOR) ||
      holds_annot(k, loop, SH_LIR_PARALLEL) || k->st[loop].annot == SH_LIR_VECTOR)
    return sh_sched_err(k, "parallel loop %s: nested in or holding another parallel or vector loop", lv);
  sh_lir_var v = k->st[loop].var;
  sh_lir_stmt st[1024];
  int n = sh_sched_stores(k, loop, st, 1024);
  if (n > 1024) return sh_sched_err(k, "parallel loop %s: too many stores to check", lv);
  for (int i = 0; i < n; i++) {
    const sh_lir_snode *x = &k->st[st[i]];
    if (k->bufs[x->buf].role == SH_LIR_LOCAL && local_inside(k, st[i], x->buf, loop)) continue;
    if (k->bufs[x->buf].per_task) continue; /* its thread's copy (checked below) */
    bool uses = false;
    for (int d = 0; d < x->nidx; d++) uses |= sh_lir_uses_var(k, k->list[x->idx + d], v);
    if (!uses)
      return sh_sched_err(k, "parallel loop %s: iterations would race on %s (its index does not "
                             "depend on %s)", lv, k->bufs[x->buf].name, lv);
  }
  /* a temporary with a copy per thread is accessed in the tasks only */
  sh_lir_buf pt = sh_sched_per_task_escapes(k, loop);
  if (pt == -2) return sh_sched_err(k, "parallel loop %s: too many accesses to check its per-thread temporaries", lv);
  if (pt >= 0)
    return sh_sched_err(k, "parallel loop %s: %s has one copy per thread and is accessed outside %s (its "
                           "tasks would write copies that code outside does not read)", lv, k->bufs[pt].name, lv);
  /* a local allocated outside cannot be shared by the tasks */
  for (int i = 0; i < n; i++) {
    const sh_lir_snode *x = &k->st[st[i]];
    if (k->bufs[x->buf].role == SH_LIR_LOCAL && !local_inside(k, st[i], x->buf, loop))
      return sh_sched_err(k, "parallel loop %s: local %s is allocated outside it", lv,
                          k->bufs[x->buf].name);
  }
  k->st[loop].annot = SH_LIR_PARALLEL;
  return SHEAF_OK;
}

/* ------------------------------------------------------ pad and pack */

sheaf_status sh_sched_pad(sh_lir_kernel *k, sh_lir_buf b, int dim, int64_t tile) {
  if (k->err) return k->err;
  if (b < 0 || b >= k->n_bufs) return sh_sched_err(k, "pad: no buffer %d", (int)b);
  sh_lir_bufinfo *bi = &k->bufs[b];
  if (dim < 0 || dim >= bi->rank || tile < 1 || tile > 4096)
    return sh_sched_err(k, "pad of %s: dimension %d, tile %lld (expected 0..%d and 1..4096)", bi->name,
                        dim, (long long)tile, bi->rank - 1);
  if (bi->role == SH_LIR_LOCAL || bi->layout == SH_LIR_LAYOUT_PANELS ||
      (bi->access == SH_LIR_ACCESS_ROWS && dim == 0))
    return sh_sched_err(k, "pad of %s: a local, a packed buffer or the row-pointer dimension", bi->name);
  if (bi->layout == SH_LIR_LAYOUT_RAGGED && dim == 0)
    return sh_sched_err(k, "pad of %s: dimension 0 of a ragged buffer is the sequence index", bi->name);
  bi->pad[dim] = tile;
  return SHEAF_OK;
}

sheaf_status sh_sched_pack(sh_lir_kernel *k, sh_lir_buf b, int64_t panel) {
  if (k->err) return k->err;
  if (b < 0 || b >= k->n_bufs) return sh_sched_err(k, "pack: no buffer %d", (int)b);
  sh_lir_bufinfo *bi = &k->bufs[b];
  if (bi->role != SH_LIR_IN || bi->dtype != SH_LIR_F32 || bi->rank != 2 ||
      bi->layout != SH_LIR_LAYOUT_DENSE || bi->access != SH_LIR_ACCESS_DENSE)
    return sh_sched_err(k, "pack of %s: only a dense f32 input of rank 2 can be packed", bi->name);
  if (panel < 1 || panel > 1024 || bi->pad[0] > 1 || bi->pad[1] > 1)
    return sh_sched_err(k, "pack of %s: panel width %lld (1..1024), unpadded storage", bi->name,
                        (long long)panel);
  bi->layout = SH_LIR_LAYOUT_PANELS;
  bi->panel = panel;
  return SHEAF_OK;
}

/* ------------------------------------------------------------ unswitch */

/* Loops inside s with constant extents (their variables, highest value). */
typedef struct inner_vars {
  int n;
  sh_lir_var v[128];
  int64_t hi[128];
} inner_vars;

static void collect_inner(const sh_lir_kernel *k, sh_lir_stmt s, inner_vars *iv) {
  const sh_lir_snode *x = &k->st[s];
  int64_t c;
  if (x->kind == SH_LIR_S_LOOP && iv->n < 128 && sh_lir_is_const(k, x->ext, &c) && c > 0) {
    iv->v[iv->n] = x->var;
    iv->hi[iv->n++] = c - 1;
  }
  for (sh_lir_stmt c2 = x->body; c2 >= 0; c2 = k->st[c2].next) collect_inner(k, c2, iv);
  if (x->kind == SH_LIR_S_IF && x->els >= 0) collect_inner(k, x->els, iv);
}

static bool bound_inside(const sh_lir_kernel *k, sh_lir_var v, sh_lir_stmt s) {
  sh_lir_stmt l = k->vars[v].loop;
  return l >= 0 && sh_lir_within(k, l, s);
}

/* For conjunct c (a < b or a <= b): the same at the inner variables'
 * extreme values making it hardest (want_all) or easiest to hold; NONE when
 * c is not affine in them or uses other variables bound inside s. */
static sh_lir_expr extreme(sh_lir_kernel *k, sh_lir_expr c, sh_lir_stmt s, const inner_vars *iv,
                           bool want_all) {
  const sh_lir_enode x = k->ex[c];
  if (x.kind != SH_LIR_E_BIN || (x.op != SH_LIR_OP_LT && x.op != SH_LIR_OP_LE)) return SH_LIR_NONE;
  sh_lir_expr d = sh_lir_sub(k, x.a, x.b);
  sh_lir_var vs[128];
  sh_lir_expr at[128];
  int n = 0;
  for (int i = 0; i < iv->n; i++) {
    if (!sh_lir_uses_var(k, d, iv->v[i])) continue;
    int64_t coef;
    if (!sh_lir_affine(k, d, iv->v[i], &coef, NULL)) return SH_LIR_NONE;
    /* all: d at its largest; any: at its smallest */
    bool big = (coef > 0) == want_all;
    vs[n] = iv->v[i];
    at[n++] = sh_lir_int(k, big ? iv->hi[i] : 0);
  }
  sh_lir_expr r = sh_lir_simplify(k, sh_lir_subst(k, c, n, vs, at));
  /* anything still bound inside s (a loop of non-constant extent) rules it out */
  for (int32_t v = 0; v < k->n_vars; v++)
    if (sh_lir_uses_var(k, r, v) && bound_inside(k, v, s)) return SH_LIR_NONE;
  return r;
}

typedef struct guard_set {
  int n;
  sh_lir_expr all[64], any[64];
} guard_set;

static void gs_add(sh_lir_kernel *k, guard_set *g, sh_lir_expr all, sh_lir_expr any) {
  for (int i = 0; i < g->n; i++)
    if (sh_lir_expr_eq(k, g->all[i], all)) return;
  if (g->n < 64) {
    g->all[g->n] = all;
    g->any[g->n++] = any;
  }
}

static void collect_guards(sh_lir_kernel *k, sh_lir_stmt t, sh_lir_stmt s, const inner_vars *iv,
                           guard_set *g) {
  const sh_lir_snode x = k->st[t];
  if (x.kind == SH_LIR_S_IF && x.els < 0) {
    sh_lir_expr conj[64];
    int nc = sh_lir_conjuncts(k, x.cond, conj, 64);
    for (int i = 0; i < nc && i < 64; i++) {
      sh_lir_expr all = extreme(k, conj[i], s, iv, true), any = extreme(k, conj[i], s, iv, false);
      if (all >= 0 && any >= 0) gs_add(k, g, all, any);
    }
  }
  for (sh_lir_stmt c = x.body; c >= 0; c = k->st[c].next) collect_guards(k, c, s, iv, g);
}

/* Removes from every else-less if under t the conjuncts whose all-form is
 * in g; an if left without conditions gives way to its body. */
static void strip_guards(sh_lir_kernel *k, sh_lir_stmt t, sh_lir_stmt s, const inner_vars *iv,
                         const guard_set *g) {
  sh_lir_stmt c = k->st[t].body;
  while (c >= 0) {
    sh_lir_stmt next = k->st[c].next;
    strip_guards(k, c, s, iv, g);
    c = next;
  }
  if (k->st[t].kind != SH_LIR_S_IF || k->st[t].els >= 0) return;
  sh_lir_expr conj[64], keep = SH_LIR_NONE;
  int nc = sh_lir_conjuncts(k, k->st[t].cond, conj, 64);
  for (int i = 0; i < nc && i < 64; i++) {
    sh_lir_expr all = extreme(k, conj[i], s, iv, true);
    bool hoisted = false;
    for (int j = 0; j < g->n && all >= 0; j++) hoisted |= sh_lir_expr_eq(k, g->all[j], all);
    if (!hoisted) keep = keep < 0 ? conj[i] : sh_lir_bin(k, SH_LIR_OP_AND, keep, conj[i]);
  }
  if (keep >= 0) {
    k->st[t].cond = keep;
    return;
  }
  /* splice the body in place of the if */
  sh_lir_stmt b = k->st[t].body;
  while (b >= 0) {
    sh_lir_stmt nb = k->st[b].next;
    sh_lir_detach(k, b);
    sh_lir_insert_before(k, t, b);
    b = nb;
  }
  sh_lir_detach(k, t);
}

/* Whether every non-local store under t sits under an if with the guard's
 * any-form among its conjuncts' any-forms. */
static bool guards_all_stores(sh_lir_kernel *k, sh_lir_stmt t, sh_lir_stmt s, const inner_vars *iv,
                              sh_lir_expr any) {
  const sh_lir_snode x = k->st[t];
  if (x.kind == SH_LIR_S_STORE) {
    if (k->bufs[x.buf].role == SH_LIR_LOCAL) return true;
    for (sh_lir_stmt p = x.parent; p >= 0 && p != k->st[s].parent; p = k->st[p].parent) {
      if (k->st[p].kind != SH_LIR_S_IF || k->st[p].els >= 0) continue;
      sh_lir_expr conj[64];
      int nc = sh_lir_conjuncts(k, k->st[p].cond, conj, 64);
      for (int i = 0; i < nc && i < 64; i++) {
        sh_lir_expr a = extreme(k, conj[i], s, iv, false);
        if (a >= 0 && sh_lir_expr_eq(k, a, any)) return true;
      }
    }
    return false;
  }
  for (sh_lir_stmt c = x.body; c >= 0; c = k->st[c].next)
    if (!guards_all_stores(k, c, s, iv, any)) return false;
  if (x.kind == SH_LIR_S_IF && x.els >= 0) return guards_all_stores(k, x.els, s, iv, any);
  return true;
}

sheaf_status sh_sched_unswitch(sh_lir_kernel *k, sh_lir_stmt s) {
  if (k->err) return k->err;
  if (s < 0 || s >= k->n_st || s == k->root || k->st[s].parent < 0)
    return sh_sched_err(k, "unswitch: statement %d is not in the kernel", (int)s);
  if (inside_annot(k, s, SH_LIR_VECTOR))
    return sh_sched_err(k, "unswitch: statement %d is inside a vector loop", (int)s);
  inner_vars iv;
  iv.n = 0;
  collect_inner(k, s, &iv);
  guard_set g;
  g.n = 0;
  collect_guards(k, s, s, &iv, &g);
  if (g.n == 0) {
    char d[96];
    return sh_sched_err(k, "unswitch of %s: no guard of the form a < b affine in its loops",
                        sh_lir_stmt_desc(k, s, d, sizeof d));
  }
  sh_lir_expr all = SH_LIR_NONE, any = SH_LIR_NONE;
  for (int i = 0; i < g.n; i++) {
    all = all < 0 ? g.all[i] : sh_lir_bin(k, SH_LIR_OP_AND, all, g.all[i]);
    if (guards_all_stores(k, s, s, &iv, g.any[i]))
      any = any < 0 ? g.any[i] : sh_lir_bin(k, SH_LIR_OP_AND, any, g.any[i]);
  }
  /* slow = a copy of s with its guards; s itself loses them */
  sh_lir_stmt slow = sh_lir_clone(k, s, 0, NULL, NULL, "_g");
  sh_lir_stmt top = sh_lir_new_stmt(k, SH_LIR_S_IF);
  if (slow < 0 || top < 0) return k->err;
  k->st[top].cond = all;
  sh_lir_replace(k, s, top);
  sh_lir_append(k, top, s);
  strip_guards(k, s, s, &iv, &g);
  sh_lir_stmt els = sh_lir_else(k, top);
  if (els < 0) return k->err;
  if (any >= 0) {
    sh_lir_stmt w = sh_lir_if(k, els, any);
    if (w < 0) return k->err;
    sh_lir_append(k, w, slow);
  } else {
    sh_lir_append(k, els, slow);
  }
  return k->err;
}

/* ------------------------------------------------------------- lookups */

static sh_lir_stmt nth_store(const sh_lir_kernel *k, sh_lir_stmt s, sh_lir_buf b, int *nth) {
  for (; s >= 0; s = k->st[s].next) {
    const sh_lir_snode *x = &k->st[s];
    if (x->kind == SH_LIR_S_STORE && x->buf == b && (*nth)-- == 0) return s;
    sh_lir_stmt r = nth_store(k, x->body, b, nth);
    if (r >= 0) return r;
    if (x->kind == SH_LIR_S_IF && x->els >= 0 && (r = nth_store(k, k->st[x->els].body, b, nth)) >= 0)
      return r;
  }
  return SH_LIR_NONE;
}

sh_lir_stmt sh_lir_find_store(const sh_lir_kernel *k, sh_lir_buf b, int nth) {
  return nth_store(k, k->st[k->root].body, b, &nth);
}

sh_lir_buf sh_lir_find_buffer(const sh_lir_kernel *k, const char *name) {
  for (int32_t b = 0; b < k->n_bufs; b++)
    if (strcmp(k->bufs[b].name, name) == 0) return b;
  return SH_LIR_NONE;
}
