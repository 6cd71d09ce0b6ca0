/*
 * sched_read_ragged.c — ragged tensors into scoped temporaries: cache_read
 * of a ragged input and storage contraction of a ragged scratch
 * temporary (sh_sched_contract_ragged, at the end: the same split of the
 * dimensions into fixed and varying ones; T[fixed, c] becomes a block
 * P[c] per run of the loop, no copy, when each run owns its block).
 *
 * cache_read_ragged (sh_sched_cache_read_ragged): a dense packed copy of the slice of a
 * ragged input that the body of a loop reads, made at the top of each of
 * its iterations (CoRa's per-sequence staging; the hand attention kernel's
 * packed K and V). The multi-head attention reads k(b, j, h, d) for one
 * head h at a time: a head's rows are H·D floats apart, few L1 sets hold
 * them; the copy puts them D apart.
 *
 *   for b parallel:                  for b parallel:
 *     for h:                           alloc k_rr[L[b], D] (scoped):
 *       ... k[b, f(j), h, g(d)]  ->        for h:
 *                                            for j_rr in 0..L[b]: for d_rr in 0..D:
 *                                              k_rr[j_rr, d_rr] = k[b, j_rr, h, d_rr]
 *                                            ... k_rr[f(j), g(d)]
 *
 * The dimensions of the input split in two: *fixed* ones, indexed alike
 * by every load under the loop with loop variables of the loop and those
 * around it only (dimension 0, the sequence, must be one: it gives the
 * ragged extent), and *copied* ones, copied whole (a ragged one up to the
 * sequence's length, a dense one over its extent), so every load reads
 * the copy at the same indices and no clamping is needed. The copy is a
 * scoped temporary sized by those extents: its alloc wraps the loop, or
 * the loop's body when the loop is parallel (each task its own copy) or
 * the extents depend on its variable. Inside a parallel loop that is one
 * allocation per task (malloc's, reused from its free list: the copy
 * stays in cache from one sequence to the next, where a slot per
 * sequence in one buffer would not). Plain IR: the interpreter runs the
 * result as it runs everything else.
 */
#include <stdio.h>
#include <string.h>

#include "codegen/lir_sched_int.h"

/* e reads no buffer and its variables are bound by `at` or a loop around it. */
static bool fixed_expr(const sh_lir_kernel *k, sh_lir_expr e, sh_lir_stmt at) {
  const sh_lir_enode *x = &k->ex[e];
  switch ((sh_lir_ekind)x->kind) {
  case SH_LIR_E_VAR: {
    sh_lir_stmt L = k->vars[x->a].loop;
    return L >= 0 && (L == at || sh_lir_within(k, at, L));
  }
  case SH_LIR_E_LOAD:
  case SH_LIR_E_LD: return false;
  case SH_LIR_E_BIN: return fixed_expr(k, x->a, at) && fixed_expr(k, x->b, at);
  case SH_LIR_E_UN:
  case SH_LIR_E_CAST: return fixed_expr(k, x->a, at);
  case SH_LIR_E_SELECT: return fixed_expr(k, x->a, at) && fixed_expr(k, x->b, at) && fixed_expr(k, x->c, at);
  default: return true;
  }
}

typedef struct rr_scan {
  sh_lir_buf b;
  sh_lir_stmt at;
  int32_t first; /* the index list of the first access found (in the list pool), or -1 */
  int count;
  uint32_t varies; /* dims whose index differs between accesses or is not fixed */
  bool prefetch, stores;
  int guards;    /* ifs around the statement being scanned whose condition is fixed */
  bool guarded;  /* an access under such an if (where the loop runs, it may not) */
} rr_scan;

/* An access of r->b at index list `list`. */
static void note(const sh_lir_kernel *k, int32_t list, int n, rr_scan *r) {
  r->count++;
  r->guarded |= r->guards > 0;
  if (r->first < 0) r->first = list;
  for (int d = 0; d < n; d++) {
    sh_lir_expr i = k->list[list + d];
    if (!fixed_expr(k, i, r->at) || !sh_lir_expr_eq(k, i, k->list[r->first + d])) r->varies |= 1u << d;
  }
}

static void scan_expr(const sh_lir_kernel *k, sh_lir_expr e, rr_scan *r) {
  if (e < 0) return;
  const sh_lir_enode *x = &k->ex[e];
  switch ((sh_lir_ekind)x->kind) {
  case SH_LIR_E_LOAD: {
    for (int d = 0; d < x->n; d++) scan_expr(k, k->list[x->b + d], r);
    if (x->a == r->b) note(k, x->b, x->n, r);
    return;
  }
  case SH_LIR_E_BIN: scan_expr(k, x->a, r), scan_expr(k, x->b, r); return;
  case SH_LIR_E_UN:
  case SH_LIR_E_CAST: scan_expr(k, x->a, r); return;
  case SH_LIR_E_SELECT: scan_expr(k, x->a, r), scan_expr(k, x->b, r), scan_expr(k, x->c, r); return;
  default: return;
  }
}

static void scan_stmts(const sh_lir_kernel *k, sh_lir_stmt s, rr_scan *r) {
  for (; s >= 0; s = k->st[s].next) {
    const sh_lir_snode *x = &k->st[s];
    switch ((sh_lir_skind)x->kind) {
    case SH_LIR_S_LOOP: scan_expr(k, x->ext, r); break;
    case SH_LIR_S_IF: scan_expr(k, x->cond, r); break;
    case SH_LIR_S_STORE:
      for (int d = 0; d < x->nidx; d++) scan_expr(k, k->list[x->idx + d], r);
      scan_expr(k, x->val, r);
      if (x->buf == r->b) {
        r->stores = true;
        note(k, x->idx, x->nidx, r);
      }
      break;
    case SH_LIR_S_PREFETCH: r->prefetch |= x->buf == r->b; break;
    default: break;
    }
    /* an if on the loop's iteration alone may keep its accesses from
     * indices that do not exist (if b + 1 < B: x[b + 1, j]): the copy and
     * the block's size, made for every iteration, would read them */
    int fixed_if = x->kind == SH_LIR_S_IF && fixed_expr(k, x->cond, r->at);
    r->guards += fixed_if;
    scan_stmts(k, x->body, r);
    if (x->kind == SH_LIR_S_IF && x->els >= 0) scan_stmts(k, x->els, r);
    r->guards -= fixed_if;
  }
}

/* An access under a fixed condition (r->guarded) whose fixed indices are
 * not all plain variables or constants: the condition may be what keeps
 * them in bounds (if b + 1 < B: x[b + 1, j]). */
static bool guarded_index(const sh_lir_kernel *k, const rr_scan *r) {
  if (!r->guarded || r->first < 0) return false;
  int n = k->bufs[r->b].rank;
  for (int d = 0; d < n; d++) {
    if (r->varies & (1u << d)) continue;
    sh_lir_ekind e = (sh_lir_ekind)k->ex[k->list[r->first + d]].kind;
    if (e != SH_LIR_E_VAR && e != SH_LIR_E_INT) return true;
  }
  return false;
}

typedef struct rr_map {
  sh_lir_buf b, P;
  uint32_t copied;
} rr_map;

/* The scoped block of buffer b's `copied` dims for one sequence `seq` (a
 * ragged dim at its length), named b's name + "_" + suffix (numbered when
 * taken), and its alloc statement (not yet placed): *per_iter when it must
 * be allocated per iteration of `at` (a parallel task's own, or sized by
 * at's variable). SH_LIR_NONE on failure (k->err). */
static sh_lir_buf scoped_block(sh_lir_kernel *k, sh_lir_buf b, uint32_t copied, sh_lir_expr seq, sh_lir_stmt at,
                               const char *suffix, bool *per_iter, sh_lir_stmt *alloc) {
  const sh_lir_bufinfo *bi = &k->bufs[b];
  sh_lir_expr dims[SH_LIR_MAX_RANK];
  int n = 0;
  *per_iter = k->st[at].annot == SH_LIR_PARALLEL; /* a task's block is its own */
  for (int d = 0; d < bi->rank; d++) {
    if (!(copied & (1u << d))) continue;
    dims[n] = (bi->ragged_mask & (1u << d)) ? sh_lir_load1(k, bi->lengths, seq) : bi->dims[d];
    *per_iter = *per_iter || sh_lir_uses_var(k, dims[n], k->st[at].var);
    n++;
  }
  char name[96];
  snprintf(name, sizeof name, "%s_%s", bi->name, suffix);
  for (int s = 2; sh_lir_find_buffer(k, name) >= 0 && s < 1000; s++)
    snprintf(name, sizeof name, "%s_%s%d", bi->name, suffix, s);
  sh_lir_buf P = sh_lir_buffer(k, name, SH_LIR_F32, SH_LIR_TEMP, n, dims);
  if (P < 0 || sh_lir_buffer_scoped(k, P)) return SH_LIR_NONE;
  *alloc = sh_lir_new_stmt(k, SH_LIR_S_ALLOC);
  if (*alloc < 0) return SH_LIR_NONE;
  k->st[*alloc].buf = P;
  return P;
}

/* Places a scoped block's alloc: around at's body (per_iter: one block per
 * iteration, at being parallel or the block sized by its variable), else
 * around at. Returns the statement whose body now holds at's old body. */
static sh_lir_stmt place_alloc(sh_lir_kernel *k, sh_lir_stmt at, sh_lir_stmt alloc, bool per_iter) {
  if (!per_iter) {
    sh_lir_replace(k, at, alloc);
    sh_lir_append(k, alloc, at);
    return at;
  }
  while (k->st[at].body >= 0) {
    sh_lir_stmt c = k->st[at].body;
    sh_lir_detach(k, c);
    sh_lir_append(k, alloc, c);
  }
  sh_lir_append(k, at, alloc);
  return alloc;
}

/* e with every load b[idx] replaced by P[idx at the copied dims]. */
static sh_lir_expr redirect(sh_lir_kernel *k, sh_lir_expr e, const rr_map *m) {
  if (e < 0 || k->err) return e;
  const sh_lir_enode x = k->ex[e];
  switch ((sh_lir_ekind)x.kind) {
  case SH_LIR_E_LOAD: {
    sh_lir_expr idx[SH_LIR_MAX_RANK];
    bool same = true;
    for (int d = 0; d < x.n; d++) {
      idx[d] = redirect(k, k->list[x.b + d], m);
      same = same && idx[d] == k->list[x.b + d];
    }
    if (x.a != m->b) return same ? e : sh_lir_load(k, x.a, x.n, idx);
    sh_lir_expr pidx[SH_LIR_MAX_RANK];
    int n = 0;
    for (int d = 0; d < x.n; d++)
      if (m->copied & (1u << d)) pidx[n++] = idx[d];
    return sh_lir_load(k, m->P, n, pidx);
  }
  case SH_LIR_E_BIN: {
    sh_lir_expr a = redirect(k, x.a, m), c = redirect(k, x.b, m);
    return a == x.a && c == x.b ? e : sh_lir_bin(k, (sh_lir_op)x.op, a, c);
  }
  case SH_LIR_E_UN: {
    sh_lir_expr a = redirect(k, x.a, m);
    return a == x.a ? e : sh_lir_un(k, (sh_lir_fn)x.op, a);
  }
  case SH_LIR_E_CAST: {
    sh_lir_expr a = redirect(k, x.a, m);
    return a == x.a ? e : sh_lir_cast(k, a);
  }
  case SH_LIR_E_SELECT: {
    sh_lir_expr a = redirect(k, x.a, m), c = redirect(k, x.b, m), d = redirect(k, x.c, m);
    return a == x.a && c == x.b && d == x.c ? e : sh_lir_select(k, a, c, d);
  }
  default: return e;
  }
}

static void redirect_stmts(sh_lir_kernel *k, sh_lir_stmt s, const rr_map *m) {
  for (; s >= 0 && !k->err; s = k->st[s].next) {
    /* (integer expressions, extents and indices, read no f32 buffer) */
    if (k->st[s].kind == SH_LIR_S_IF) k->st[s].cond = redirect(k, k->st[s].cond, m);
    if (k->st[s].kind == SH_LIR_S_STORE) k->st[s].val = redirect(k, k->st[s].val, m);
    if (k->st[s].kind == SH_LIR_S_STORE && k->st[s].buf == m->b) { /* a contracted temporary's store */
      sh_lir_expr pidx[SH_LIR_MAX_RANK];
      int n = 0;
      for (int d = 0; d < k->st[s].nidx; d++)
        if (m->copied & (1u << d)) pidx[n++] = k->list[k->st[s].idx + d];
      int32_t list = sh_lir_new_list(k, n, pidx);
      if (list < 0) return;
      k->st[s].buf = m->P, k->st[s].idx = list, k->st[s].nidx = n;
    }
    redirect_stmts(k, k->st[s].body, m);
    if (k->st[s].kind == SH_LIR_S_IF && k->st[s].els >= 0) redirect_stmts(k, k->st[s].els, m);
  }
}

sheaf_status sh_sched_cache_read_ragged(sh_lir_kernel *k, sh_lir_buf b, sh_lir_stmt at, sh_sched_read *out) {
  if (k->err) return k->err;
  if (b < 0 || b >= k->n_bufs) return sh_sched_err(k, "cache_read_ragged: buffer %d does not exist", (int)b);
  const sh_lir_bufinfo *bi = &k->bufs[b];
  if (bi->role != SH_LIR_IN || bi->layout != SH_LIR_LAYOUT_RAGGED || bi->dtype != SH_LIR_F32 ||
      bi->access != SH_LIR_ACCESS_DENSE)
    return sh_sched_err(k, "cache_read_ragged of %s: not a ragged f32 input", bi->name);
  if (!sh_sched_is_loop(k, at) || k->st[at].annot == SH_LIR_VECTOR || k->st[at].annot == SH_LIR_UNROLL)
    return sh_sched_err(k, "cache_read_ragged of %s: the place is not a serial or parallel loop", bi->name);
  const char *atn = k->vars[k->st[at].var].name;
  for (sh_lir_stmt p = k->st[at].parent; p >= 0; p = k->st[p].parent)
    if (k->st[p].kind == SH_LIR_S_LOOP && (k->st[p].annot == SH_LIR_VECTOR || k->st[p].annot == SH_LIR_UNROLL))
      return sh_sched_err(k, "cache_read_ragged of %s at loop %s: inside a vector or unrolled loop", bi->name, atn);
  rr_scan r = {.b = b, .at = at, .first = -1};
  scan_stmts(k, k->st[at].body, &r);
  if (r.prefetch) return sh_sched_err(k, "cache_read_ragged of %s at loop %s: a prefetch of it inside", bi->name, atn);
  if (r.count == 0) return sh_sched_err(k, "cache_read_ragged of %s at loop %s: no load of it inside", bi->name, atn);
  if (guarded_index(k, &r))
    return sh_sched_err(k, "cache_read_ragged of %s at loop %s: a load of it at a computed index under a "
                           "condition on the loops' variables alone (the copy would read where the load does "
                           "not)", bi->name, atn);
  if (r.varies & 1u)
    return sh_sched_err(k, "cache_read_ragged of %s at loop %s: its sequence index varies inside", bi->name, atn);
  uint32_t all = (1u << bi->rank) - 1, copied = r.varies & all;
  if (copied == 0)
    return sh_sched_err(k, "cache_read_ragged of %s at loop %s: every index is fixed (nothing to copy)", bi->name, atn);
  sh_lir_expr seq = k->list[r.first];

  /* P: the copied dims, a ragged one at the sequence's length */
  bool per_iter;
  sh_lir_stmt alloc;
  sh_lir_buf P = scoped_block(k, b, copied, seq, at, "rr", &per_iter, &alloc);
  if (P < 0) return k->err;

  /* the copy nest: for c over the copied dims: P[c] = b[fixed, c] */
  sh_lir_expr src[SH_LIR_MAX_RANK], pidx[SH_LIR_MAX_RANK];
  int np = 0;
  sh_lir_stmt first = SH_LIR_NONE, last = SH_LIR_NONE;
  sh_sched_read rd = {.n = 0};
  for (int d = 0; d < bi->rank; d++) {
    if (!(copied & (1u << d))) {
      src[d] = k->list[r.first + d];
      continue;
    }
    sh_lir_stmt c = sh_lir_new_stmt(k, SH_LIR_S_LOOP);
    if (c < 0) return k->err;
    char vn[32];
    snprintf(vn, sizeof vn, "%s_d%d_rr", bi->name, d);
    k->st[c].var = sh_lir_new_var(k, vn, c);
    k->st[c].ext = k->bufs[P].dims[np];
    if (last >= 0) sh_lir_append(k, last, c);
    else first = c;
    last = c;
    if (rd.n < SH_SCHED_MAX_BAND) rd.loops[rd.n++] = c;
    src[d] = pidx[np++] = sh_lir_v(k, k->st[c].var);
  }
  if (k->err) return k->err;
  rr_map m = {.b = b, .P = P, .copied = copied};
  redirect_stmts(k, k->st[at].body, &m);
  if (sh_lir_store(k, last, P, np, pidx, sh_lir_load(k, b, bi->rank, src), SH_LIR_COMBINE_NONE) < 0) return k->err;
  /* the copy first in at's body, inside the block's alloc */
  sh_lir_stmt home = place_alloc(k, at, alloc, per_iter);
  if (k->st[home].body >= 0) sh_lir_insert_before(k, k->st[home].body, first);
  else sh_lir_append(k, home, first);
  if (out) {
    rd.buf = P;
    rd.copy = first;
    *out = rd;
  }
  return k->err;
}

sheaf_status sh_sched_contract_ragged(sh_lir_kernel *k, sh_lir_buf T, sh_lir_stmt at) {
  if (k->err) return k->err;
  if (T < 0 || T >= k->n_bufs) return sh_sched_err(k, "contract_ragged: buffer %d does not exist", (int)T);
  const sh_lir_bufinfo *bi = &k->bufs[T];
  if (bi->role != SH_LIR_OUT || !bi->scratch || bi->layout != SH_LIR_LAYOUT_RAGGED || bi->dtype != SH_LIR_F32 ||
      bi->access != SH_LIR_ACCESS_DENSE)
    return sh_sched_err(k, "contract_ragged of %s: not a ragged f32 scratch temporary", bi->name);
  if (!sh_sched_is_loop(k, at) || k->st[at].annot == SH_LIR_VECTOR || k->st[at].annot == SH_LIR_UNROLL)
    return sh_sched_err(k, "contract_ragged of %s: the place is not a serial or parallel loop", bi->name);
  const char *atn = k->vars[k->st[at].var].name;
  for (sh_lir_stmt p = k->st[at].parent; p >= 0; p = k->st[p].parent)
    if (k->st[p].kind == SH_LIR_S_LOOP && (k->st[p].annot == SH_LIR_VECTOR || k->st[p].annot == SH_LIR_UNROLL))
      return sh_sched_err(k, "contract_ragged of %s at loop %s: inside a vector or unrolled loop", bi->name, atn);
  rr_scan r = {.b = T, .at = at, .first = -1}, all = {.b = T, .at = at, .first = -1};
  scan_stmts(k, k->st[at].body, &r);
  scan_stmts(k, k->st[k->root].body, &all);
  if (r.count == 0) return sh_sched_err(k, "contract_ragged of %s at loop %s: no access of it inside", bi->name, atn);
  if (all.count != r.count)
    return sh_sched_err(k, "contract_ragged of %s at loop %s: accessed outside the loop", bi->name, atn);
  if (guarded_index(k, &r))
    return sh_sched_err(k, "contract_ragged of %s at loop %s: an access at a computed index under a condition "
                           "on the loops' variables alone (the block's size would read where the access does "
                           "not)", bi->name, atn);
  if (r.varies & 1u)
    return sh_sched_err(k, "contract_ragged of %s at loop %s: its sequence index varies inside", bi->name, atn);
  uint32_t copied = r.varies & ((1u << bi->rank) - 1);
  if (copied == 0) return sh_sched_err(k, "contract_ragged of %s at loop %s: every index is fixed", bi->name, atn);
  /* each run of the loop's body owns its block: the fixed indices hold the
   * variable of `at` and of every loop around it (no value flows from one
   * iteration to another through T) */
  for (sh_lir_stmt p = at; p >= 0; p = k->st[p].parent) {
    if (k->st[p].kind != SH_LIR_S_LOOP) continue;
    bool owned = false;
    for (int d = 0; d < bi->rank; d++) {
      const sh_lir_enode *x = &k->ex[k->list[r.first + d]];
      owned |= !(copied & (1u << d)) && x->kind == SH_LIR_E_VAR && x->a == k->st[p].var;
    }
    if (!owned)
      return sh_sched_err(k, "contract_ragged of %s at loop %s: its block is shared by the iterations of loop %s",
                          bi->name, atn, k->vars[k->st[p].var].name);
  }
  sh_lir_expr seq = k->list[r.first];
  bool per_iter;
  sh_lir_stmt alloc;
  sh_lir_buf P = scoped_block(k, T, copied, seq, at, "blk", &per_iter, &alloc);
  if (P < 0) return k->err;
  rr_map m = {.b = T, .P = P, .copied = copied};
  redirect_stmts(k, k->st[at].body, &m);
  place_alloc(k, at, alloc, per_iter);
  return k->err;
}
