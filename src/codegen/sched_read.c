/*
 * sched_read.c — cache_read (sh_sched_cache_read): a packed copy of the
 * part of an input that the body of a loop reads, made at the top of each
 * iteration of that loop, laid out in the order of chosen loops below it
 * (the GotoBLAS packing of A: per row block, the rows of each register
 * tile interleaved per k step, so that a tile's broadcasts come from one
 * contiguous stream instead of mr rows a row's length apart).
 *
 *   for io:                       for io:
 *     ...                           for t', k', r': P[io, t', k', r'] = A[clamp(f(io, t', r')), k']
 *       for t: for k: for r:  ->    ...
 *         ... A[f(io, t, r), k]       for t: for k: for r:
 *                                       ... P[io, t, k, r]
 *
 * P is a temporary with one slot per iteration of the loop (so the loop may
 * run over the pool); the copy clamps each index into the input's extent,
 * so it reads in bounds at every point of the loops' ranges, including
 * those a split tail's guard keeps the body from reading (there the copy's
 * value is never used). The result is plain IR: the interpreter runs it as
 * it runs everything else.
 */
#include <stdio.h>
#include <string.h>

#include "codegen/lir_sched_int.h"

/* e uses no loop variable and reads no buffer: sizes and constants only. */
static bool sizes_only(const sh_lir_kernel *k, sh_lir_expr e) {
  const sh_lir_enode *x = &k->ex[e];
  switch ((sh_lir_ekind)x->kind) {
  case SH_LIR_E_VAR:
  case SH_LIR_E_LOAD:
  case SH_LIR_E_LD: return false;
  case SH_LIR_E_BIN: return sizes_only(k, x->a) && sizes_only(k, x->b);
  case SH_LIR_E_UN:
  case SH_LIR_E_CAST: return sizes_only(k, x->a);
  case SH_LIR_E_SELECT: return sizes_only(k, x->a) && sizes_only(k, x->b) && sizes_only(k, x->c);
  default: return true;
  }
}

/* Every variable of integer expression e is bound by `at`, one of loops,
 * or a loop around `at`; e reads no buffer. */
static bool idx_vars_ok(const sh_lir_kernel *k, sh_lir_expr e, sh_lir_stmt at, int n, const sh_lir_stmt *loops) {
  const sh_lir_enode *x = &k->ex[e];
  switch ((sh_lir_ekind)x->kind) {
  case SH_LIR_E_VAR: {
    sh_lir_stmt L = k->vars[x->a].loop;
    if (L < 0) return false;
    if (L == at || sh_lir_within(k, at, L)) return true;
    for (int i = 0; i < n; i++)
      if (loops[i] == L) return true;
    return false;
  }
  case SH_LIR_E_LOAD:
  case SH_LIR_E_LD: return false;
  case SH_LIR_E_BIN: return idx_vars_ok(k, x->a, at, n, loops) && idx_vars_ok(k, x->b, at, n, loops);
  case SH_LIR_E_UN:
  case SH_LIR_E_CAST: return idx_vars_ok(k, x->a, at, n, loops);
  case SH_LIR_E_SELECT:
    return idx_vars_ok(k, x->a, at, n, loops) && idx_vars_ok(k, x->b, at, n, loops) &&
           idx_vars_ok(k, x->c, at, n, loops);
  default: return true;
  }
}

typedef struct reads {
  sh_lir_buf b;
  sh_lir_expr first; /* the first load of b found (its index list is the template) */
  int count;
  bool mismatch;  /* a load at another index list */
  bool outside;   /* a load not inside every one of the loops */
  sh_lir_stmt at;
  int n;
  const sh_lir_stmt *loops;
} reads;

static void scan_expr(const sh_lir_kernel *k, sh_lir_expr e, sh_lir_stmt s, reads *r) {
  if (e < 0) return;
  const sh_lir_enode *x = &k->ex[e];
  switch ((sh_lir_ekind)x->kind) {
  case SH_LIR_E_LOAD:
    for (int d = 0; d < x->n; d++) scan_expr(k, k->list[x->b + d], s, r);
    if (x->a != r->b) return;
    r->count++;
    for (int i = 0; i < r->n; i++)
      if (!sh_lir_within(k, s, r->loops[i]) || s == r->loops[i]) r->outside = true;
    if (r->first < 0) {
      r->first = e;
      return;
    }
    const sh_lir_enode *f = &k->ex[r->first];
    if (f->n != x->n) r->mismatch = true;
    for (int d = 0; d < x->n && !r->mismatch; d++)
      if (!sh_lir_expr_eq(k, k->list[f->b + d], k->list[x->b + d])) r->mismatch = true;
    return;
  case SH_LIR_E_BIN: scan_expr(k, x->a, s, r), scan_expr(k, x->b, s, r); return;
  case SH_LIR_E_UN:
  case SH_LIR_E_CAST: scan_expr(k, x->a, s, r); return;
  case SH_LIR_E_SELECT: scan_expr(k, x->a, s, r), scan_expr(k, x->b, s, r), scan_expr(k, x->c, s, r); return;
  default: return;
  }
}

/* The loads of r->b in the statements from s on (and below); false when
 * a prefetch names it. */
static bool scan_stmts(const sh_lir_kernel *k, sh_lir_stmt s, reads *r) {
  for (; s >= 0; s = k->st[s].next) {
    const sh_lir_snode *x = &k->st[s];
    switch ((sh_lir_skind)x->kind) {
    case SH_LIR_S_LOOP: scan_expr(k, x->ext, s, r); break;
    case SH_LIR_S_IF: scan_expr(k, x->cond, s, r); break;
    case SH_LIR_S_STORE:
      for (int d = 0; d < x->nidx; d++) scan_expr(k, k->list[x->idx + d], s, r);
      scan_expr(k, x->val, s, r);
      break;
    case SH_LIR_S_PREFETCH:
      if (x->buf == r->b) return false;
      break;
    default: break;
    }
    if (!scan_stmts(k, x->body, r)) return false;
    if (x->kind == SH_LIR_S_IF && x->els >= 0 && !scan_stmts(k, x->els, r)) return false;
  }
  return true;
}

/* e with every load of b replaced by `to`. */
static sh_lir_expr swap_reads(sh_lir_kernel *k, sh_lir_expr e, sh_lir_buf b, sh_lir_expr to) {
  if (e < 0) return e;
  const sh_lir_enode x = k->ex[e];
  switch ((sh_lir_ekind)x.kind) {
  case SH_LIR_E_LOAD: return x.a == b ? to : e;
  case SH_LIR_E_BIN: {
    sh_lir_expr a = swap_reads(k, x.a, b, to), c = swap_reads(k, x.b, b, to);
    return a == x.a && c == x.b ? e : sh_lir_bin(k, (sh_lir_op)x.op, a, c);
  }
  case SH_LIR_E_UN: {
    sh_lir_expr a = swap_reads(k, x.a, b, to);
    return a == x.a ? e : sh_lir_un(k, (sh_lir_fn)x.op, a);
  }
  case SH_LIR_E_SELECT: {
    sh_lir_expr a = swap_reads(k, x.a, b, to), c = swap_reads(k, x.b, b, to), d = swap_reads(k, x.c, b, to);
    return a == x.a && c == x.b && d == x.c ? e : sh_lir_select(k, a, c, d);
  }
  default: return e;
  }
}

static void swap_stmts(sh_lir_kernel *k, sh_lir_stmt s, sh_lir_buf b, sh_lir_expr to) {
  for (; s >= 0 && !k->err; s = k->st[s].next) {
    sh_lir_snode *x = &k->st[s];
    if (x->kind == SH_LIR_S_IF) x->cond = swap_reads(k, x->cond, b, to);
    if (x->kind == SH_LIR_S_STORE) x->val = swap_reads(k, x->val, b, to);
    swap_stmts(k, k->st[s].body, b, to);
    if (k->st[s].kind == SH_LIR_S_IF && k->st[s].els >= 0) swap_stmts(k, k->st[s].els, b, to);
  }
}

sheaf_status sh_sched_cache_read(sh_lir_kernel *k, sh_lir_buf b, sh_lir_stmt at, int n, const sh_lir_stmt *loops,
                                 sh_sched_read *out) {
  if (k->err) return k->err;
  if (b < 0 || b >= k->n_bufs) return sh_sched_err(k, "cache_read: buffer %d does not exist", (int)b);
  const sh_lir_bufinfo *bi = &k->bufs[b];
  if (bi->role != SH_LIR_IN || bi->layout != SH_LIR_LAYOUT_DENSE || bi->dtype != SH_LIR_F32)
    return sh_sched_err(k, "cache_read of %s: not a dense f32 input", bi->name);
  if (!sh_sched_is_loop(k, at) || k->st[at].annot == SH_LIR_VECTOR || k->st[at].annot == SH_LIR_UNROLL)
    return sh_sched_err(k, "cache_read of %s: the place is not a serial or parallel loop", bi->name);
  const char *atn = k->vars[k->st[at].var].name;
  for (sh_lir_stmt p = k->st[at].parent; p >= 0; p = k->st[p].parent)
    if (k->st[p].kind == SH_LIR_S_LOOP && k->st[p].annot != SH_LIR_SERIAL)
      return sh_sched_err(k, "cache_read of %s at loop %s: inside a parallel or vector loop", bi->name, atn);
  if (n < 1 || n >= SH_LIR_MAX_RANK)
    return sh_sched_err(k, "cache_read of %s at loop %s: %d loops (1..%d)", bi->name, atn, n, SH_LIR_MAX_RANK - 1);
  if (!sizes_only(k, k->st[at].ext))
    return sh_sched_err(k, "cache_read of %s at loop %s: its extent is not of sizes only", bi->name, atn);
  for (int i = 0; i < n; i++) {
    if (!sh_sched_is_loop(k, loops[i]) || loops[i] == at || !sh_lir_within(k, loops[i], at))
      return sh_sched_err(k, "cache_read of %s at loop %s: loop %d is not a loop inside it", bi->name, atn, i);
    for (int j = 0; j < i; j++)
      if (loops[j] == loops[i]) return sh_sched_err(k, "cache_read of %s: a loop named twice", bi->name);
    if (!sizes_only(k, k->st[loops[i]].ext))
      return sh_sched_err(k, "cache_read of %s: the extent of loop %s is not of sizes only", bi->name,
                          k->vars[k->st[loops[i]].var].name);
  }
  reads r = {.b = b, .first = SH_LIR_NONE, .at = at, .n = n, .loops = loops};
  if (!scan_stmts(k, k->st[at].body, &r))
    return sh_sched_err(k, "cache_read of %s at loop %s: a prefetch of it inside", bi->name, atn);
  if (r.count == 0) return sh_sched_err(k, "cache_read of %s at loop %s: no load of it inside", bi->name, atn);
  if (r.mismatch)
    return sh_sched_err(k, "cache_read of %s at loop %s: loads at different indices", bi->name, atn);
  if (r.outside)
    return sh_sched_err(k, "cache_read of %s at loop %s: a load outside the named loops", bi->name, atn);
  const sh_lir_enode ld = k->ex[r.first];
  for (int d = 0; d < ld.n; d++)
    if (!idx_vars_ok(k, k->list[ld.b + d], at, n, loops))
      return sh_sched_err(k, "cache_read of %s at loop %s: its index %d uses a loop not named or reads memory",
                          bi->name, atn, d);

  /* the packed buffer: a slot per iteration of `at`, then the loops' extents */
  char name[96];
  snprintf(name, sizeof name, "%s_rd", bi->name);
  for (int s = 2; sh_lir_find_buffer(k, name) >= 0 && s < 1000; s++) snprintf(name, sizeof name, "%s_rd%d", bi->name, s);
  sh_lir_expr dims[SH_LIR_MAX_RANK];
  dims[0] = k->st[at].ext;
  for (int i = 0; i < n; i++) dims[i + 1] = k->st[loops[i]].ext;
  sh_lir_buf P = sh_lir_buffer(k, name, SH_LIR_F32, SH_LIR_TEMP, n + 1, dims);
  if (P < 0) return k->err;

  /* the copy: for c_0 .. c_{n-1}: P[at, c..] = b[clamp(idx(c))] */
  sh_lir_stmt cl[SH_LIR_MAX_RANK];
  sh_lir_var lv[SH_LIR_MAX_RANK];
  sh_lir_expr cv[SH_LIR_MAX_RANK], pidx[SH_LIR_MAX_RANK];
  pidx[0] = sh_lir_v(k, k->st[at].var);
  for (int i = 0; i < n; i++) {
    char vn[80];
    snprintf(vn, sizeof vn, "%s_rd", k->vars[k->st[loops[i]].var].name);
    cl[i] = sh_lir_new_stmt(k, SH_LIR_S_LOOP);
    if (cl[i] < 0) return k->err;
    k->st[cl[i]].var = sh_lir_new_var(k, vn, cl[i]);
    k->st[cl[i]].ext = k->st[loops[i]].ext;
    if (i) sh_lir_append(k, cl[i - 1], cl[i]);
    lv[i] = k->st[loops[i]].var;
    cv[i] = sh_lir_v(k, k->st[cl[i]].var);
    pidx[i + 1] = sh_lir_v(k, lv[i]);
  }
  if (k->err) return k->err;
  sh_lir_expr src[SH_LIR_MAX_RANK], guard = SH_LIR_NONE;
  for (int d = 0; d < ld.n; d++) {
    sh_lir_expr e = sh_lir_simplify(k, sh_lir_subst(k, k->list[ld.b + d], n, lv, cv));
    bool whole = false; /* e is a copy loop's variable running over exactly the dimension */
    for (int i = 0; i < n; i++)
      if (k->ex[e].kind == SH_LIR_E_VAR && k->ex[e].a == k->st[cl[i]].var &&
          sh_lir_expr_eq(k, k->st[cl[i]].ext, bi->dims[d]))
        whole = true;
    int64_t lo, hi, D;
    if (!whole && !(sh_lir_range(k, e, &lo, &hi) && lo >= 0 && sh_lir_is_const(k, bi->dims[d], &D) && hi < D)) {
      sh_lir_expr last = sh_lir_sub(k, bi->dims[d], sh_lir_int(k, 1));
      e = sh_lir_bin(k, SH_LIR_OP_MIN, e, last);
      if (!sh_lir_nonneg(k, k->list[ld.b + d])) e = sh_lir_bin(k, SH_LIR_OP_MAX, e, sh_lir_int(k, 0));
      if (!(sh_lir_is_const(k, bi->dims[d], &D) && D > 0)) {
        sh_lir_expr c = sh_lir_bin(k, SH_LIR_OP_LT, sh_lir_int(k, 0), bi->dims[d]);
        guard = guard < 0 ? c : sh_lir_bin(k, SH_LIR_OP_AND, guard, c);
      }
    }
    src[d] = e;
  }
  sh_lir_expr cidx[SH_LIR_MAX_RANK];
  cidx[0] = pidx[0];
  for (int i = 0; i < n; i++) cidx[i + 1] = cv[i];
  sh_lir_stmt store = sh_lir_store(k, cl[n - 1], P, n + 1, cidx, sh_lir_load(k, b, ld.n, src), SH_LIR_COMBINE_NONE);
  if (store < 0) return k->err;
  sh_lir_stmt top = cl[0];
  if (guard >= 0) {
    top = sh_lir_new_stmt(k, SH_LIR_S_IF);
    if (top < 0) return k->err;
    k->st[top].cond = guard;
    sh_lir_append(k, top, cl[0]);
  }

  /* the loads of b under `at` read P, then the copy goes first in its body */
  swap_stmts(k, k->st[at].body, b, sh_lir_load(k, P, n + 1, pidx));
  sh_lir_stmt first = k->st[at].body;
  if (first >= 0) sh_lir_insert_before(k, first, top);
  else sh_lir_append(k, at, top);
  if (out) {
    out->buf = P;
    out->copy = top;
    out->n = n;
    for (int i = 0; i < n; i++) out->loops[i] = cl[i];
  }
  return k->err;
}
