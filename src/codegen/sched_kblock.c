/*
 * sched_kblock.c — K blocking of a register tile (sh_sched_kblock): the
 * reduction loop of a cache_write tile runs in blocks of kc steps, the
 * block loop outside the tiles of a row block, so that kc rows of a B
 * panel stay in L1 across the block's tiles (a 16-column panel at K = 512
 * is 32 KB, all of L1). Between blocks the partial sums live in the
 * tile's write-back target: every block starts the tile at the identity
 * (as block 0 did), blocks after the first combine the target's partial
 * sums into it at the write-back, blocks but the last store it plainly,
 * and the last runs the original write-back (a fused epilogue moves
 * there). Reading the partial sums back at the init instead (the tile
 * starting from a loaded or a zero value) cost the whole-tile path 12-16 %
 * at M = 64 with gcc 12: the accumulators then leave the k loop through
 * the stack.
 */
#include <stdio.h>
#include <string.h>

#include "codegen/lir_sched_int.h"

/* The one store in subtree s (NONE when there are none or several). */
static sh_lir_stmt only_store(const sh_lir_kernel *k, sh_lir_stmt s) {
  sh_lir_stmt st[2];
  return sh_sched_stores(k, s, st, 2) == 1 ? st[0] : SH_LIR_NONE;
}

/* The one load of local `acc` in e (NONE when none; *count counts them). */
static sh_lir_expr local_load(const sh_lir_kernel *k, sh_lir_expr e, sh_lir_buf acc, int *count) {
  if (e < 0) return SH_LIR_NONE;
  const sh_lir_enode *x = &k->ex[e];
  sh_lir_expr r = SH_LIR_NONE, t;
  switch ((sh_lir_ekind)x->kind) {
  case SH_LIR_E_LOAD:
    if (x->a == acc) {
      (*count)++;
      return e;
    }
    return SH_LIR_NONE;
  case SH_LIR_E_BIN:
    r = local_load(k, x->a, acc, count);
    t = local_load(k, x->b, acc, count);
    return r >= 0 ? r : t;
  case SH_LIR_E_UN: return local_load(k, x->a, acc, count);
  case SH_LIR_E_SELECT:
    r = local_load(k, x->a, acc, count);
    if ((t = local_load(k, x->b, acc, count)) >= 0 && r < 0) r = t;
    if ((t = local_load(k, x->c, acc, count)) >= 0 && r < 0) r = t;
    return r;
  default: return SH_LIR_NONE;
  }
}

/* e with the expression `from` (compared by id) replaced by `to`. */
static sh_lir_expr swap_expr(sh_lir_kernel *k, sh_lir_expr e, sh_lir_expr from, sh_lir_expr to) {
  if (e == from) return to;
  const sh_lir_enode x = k->ex[e];
  switch ((sh_lir_ekind)x.kind) {
  case SH_LIR_E_BIN: {
    sh_lir_expr a = swap_expr(k, x.a, from, to), b = swap_expr(k, x.b, from, to);
    return a == x.a && b == x.b ? e : sh_lir_bin(k, (sh_lir_op)x.op, a, b);
  }
  case SH_LIR_E_UN: {
    sh_lir_expr a = swap_expr(k, x.a, from, to);
    return a == x.a ? e : sh_lir_un(k, (sh_lir_fn)x.op, a);
  }
  case SH_LIR_E_SELECT: {
    sh_lir_expr a = swap_expr(k, x.a, from, to), b = swap_expr(k, x.b, from, to), c = swap_expr(k, x.c, from, to);
    return a == x.a && b == x.b && c == x.c ? e : sh_lir_select(k, a, b, c);
  }
  default: return e;
  }
}

/* `a op b` for a reduction's combine. */
static sh_lir_expr combine(sh_lir_kernel *k, sh_lir_combine op, sh_lir_expr a, sh_lir_expr b) {
  switch (op) {
  case SH_LIR_COMBINE_MUL: return sh_lir_mul(k, a, b);
  case SH_LIR_COMBINE_MAX: return sh_lir_bin(k, SH_LIR_OP_MAX, a, b);
  case SH_LIR_COMBINE_MIN: return sh_lir_bin(k, SH_LIR_OP_MIN, a, b);
  default: return sh_lir_add(k, a, b);
  }
}

/* A copy of the write-back fin (or fin itself) under `if cond`, its store's
 * value v(acc) made v(acc) (plain: acc) with acc op= the target's old
 * value when `old`. */
static void wb_variant(sh_lir_kernel *k, sh_lir_stmt fin, bool copy, bool plain, bool old, sh_lir_buf acc,
                       sh_lir_combine op, sh_lir_expr cond) {
  sh_lir_stmt t = copy ? sh_lir_clone(k, fin, 0, NULL, NULL, "_kb") : fin;
  if (t < 0) return;
  sh_lir_stmt F = only_store(k, t);
  int n = 0;
  sh_lir_expr a = local_load(k, k->st[F].val, acc, &n), v = plain ? a : k->st[F].val;
  if (old) {
    sh_lir_expr idx[SH_LIR_MAX_RANK];
    for (int d = 0; d < k->st[F].nidx; d++) idx[d] = k->list[k->st[F].idx + d];
    v = swap_expr(k, v, a, combine(k, op, a, sh_lir_load(k, k->st[F].buf, k->st[F].nidx, idx)));
  }
  k->st[F].val = v;
  if (copy) sh_lir_insert_after(k, fin, t);
  sh_sched_wrap_if(k, t, cond);
}

sheaf_status sh_sched_kblock(sh_lir_kernel *k, const sh_sched_cache *c, sh_lir_stmt kloop, sh_lir_stmt at,
                             int64_t kc) {
  if (k->err) return k->err;
  if (!c || c->alloc < 0 || c->n < 1 || c->n > SH_SCHED_MAX_BAND || c->alloc >= k->n_st ||
      k->st[c->alloc].kind != SH_LIR_S_ALLOC)
    return sh_sched_err(k, "kblock: not a cache_write tile");
  if (kc < 1) return sh_sched_err(k, "kblock: block of %lld steps (at least 1)", (long long)kc);
  if (!sh_sched_is_loop(k, kloop) || k->st[kloop].parent != c->alloc ||
      k->st[kloop].annot != SH_LIR_SERIAL)
    return sh_sched_err(k, "kblock: statement %d is not the tile's serial reduction loop", (int)kloop);
  const char *kn = k->vars[k->st[kloop].var].name;
  sh_lir_stmt init_top = k->st[c->alloc].body, fin_top = k->st[kloop].next;
  if (init_top < 0 || k->st[init_top].next != kloop || fin_top < 0 || k->st[fin_top].next >= 0)
    return sh_sched_err(k, "kblock of %s: the tile is not [init, reduction, write-back]", kn);
  sh_lir_stmt I = only_store(k, init_top), F = only_store(k, fin_top);
  if (I < 0 || F < 0 || k->st[I].buf != c->local)
    return sh_sched_err(k, "kblock of %s: the tile's init or write-back is not one store", kn);
  const sh_lir_snode f = k->st[F];
  const sh_lir_bufinfo *O = &k->bufs[f.buf];
  if (O->role == SH_LIR_LOCAL || O->role == SH_LIR_IN || O->dtype != SH_LIR_F32 ||
      O->layout != SH_LIR_LAYOUT_DENSE || sh_lir_uses_buf(k, f.val, f.buf))
    return sh_sched_err(k, "kblock of %s: the write-back target %s cannot hold partial sums", kn,
                        O->name);
  int nacc = 0;
  sh_lir_expr accl = local_load(k, f.val, c->local, &nacc);
  if (nacc != 1) return sh_sched_err(k, "kblock of %s: the write-back reads the tile %d times", kn, nacc);
  /* the update: one combining store into the tile, reading nothing the tile writes */
  sh_lir_stmt ups[64];
  int nu = sh_sched_stores(k, kloop, ups, 64);
  if (nu != 1 || k->st[ups[0]].buf != c->local || k->st[ups[0]].combine == SH_LIR_COMBINE_NONE ||
      sh_lir_uses_buf(k, k->st[ups[0]].val, f.buf))
    return sh_sched_err(k, "kblock of %s: the reduction is not one update of the tile free of %s", kn, O->name);
  sh_lir_combine op = (sh_lir_combine)k->st[ups[0]].combine;
  const sh_lir_enode *v0 = &k->ex[k->st[I].val];
  if (f.combine == SH_LIR_COMBINE_NONE && !(v0->kind == SH_LIR_E_FLT && v0->f == sh_lir_combine_identity(op)))
    return sh_sched_err(k, "kblock of %s: the tile does not start at the identity of its reduction", kn);
  /* at: an ancestor of the alloc whose loops down to it index the target */
  if (!sh_sched_is_loop(k, at) || !sh_lir_within(k, c->alloc, at))
    return sh_sched_err(k, "kblock of %s: statement %d is not a loop around the tile", kn, (int)at);
  sh_lir_expr K = k->st[kloop].ext;
  for (sh_lir_stmt p = c->alloc; p != at;) {
    p = k->st[p].parent;
    if (k->st[p].kind != SH_LIR_S_LOOP) continue;
    bool idx = false;
    for (int d = 0; d < f.nidx; d++) idx |= sh_lir_uses_var(k, k->list[f.idx + d], k->st[p].var);
    if (!idx || (p != at && k->st[p].annot == SH_LIR_PARALLEL) || sh_lir_uses_var(k, K, k->st[p].var))
      return sh_sched_err(k, "kblock of %s: loop %s between the tile and the block loop is not a serial "
                             "loop over the target's elements", kn, k->vars[k->st[p].var].name);
  }
  if (!sh_lir_nonneg(k, K)) return sh_sched_err(k, "kblock of %s: its extent is not provably >= 0", kn);
  int64_t kconst;
  if (sh_lir_is_const(k, K, &kconst) && kconst <= kc) return SHEAF_OK; /* one block: nothing to do */
  /* the block loop around `at` */
  sh_lir_stmt ko = sh_lir_new_stmt(k, SH_LIR_S_LOOP);
  if (ko < 0) return k->err;
  char name[96];
  snprintf(name, sizeof name, "%s_blk", kn);
  sh_lir_var vo = sh_lir_new_var(k, name, ko);
  if (vo < 0) return k->err;
  sh_lir_expr kce = sh_lir_int(k, kc), voe = sh_lir_v(k, vo), base = sh_lir_mul(k, voe, kce);
  k->st[ko].var = vo;
  k->st[ko].ext = sh_lir_bin(k, SH_LIR_OP_DIV, sh_lir_add(k, K, sh_lir_int(k, kc - 1)), kce);
  sh_lir_replace(k, at, ko);
  sh_lir_append(k, ko, at);
  /* the reduction loop: this block's steps */
  sh_lir_var kv = k->st[kloop].var;
  sh_lir_expr shifted = sh_lir_add(k, base, sh_lir_v(k, kv));
  for (sh_lir_stmt s = k->st[kloop].body; s >= 0; s = k->st[s].next) sh_lir_subst_stmt(k, s, 1, &kv, &shifted);
  k->st[kloop].ext = sh_lir_bin(k, SH_LIR_OP_MIN, kce, sh_lir_sub(k, K, base));
  if (f.combine != SH_LIR_COMBINE_NONE) return k->err; /* each block combines into the target */
  /* the write-back by block (conditions not of the form a < b: unswitch
   * leaves them alone); a write-back of the tile as it is serves the first
   * blocks and the last alike */
  sh_lir_expr zero = sh_lir_int(k, 0), end = sh_lir_add(k, base, kce);
  sh_lir_expr first = sh_lir_bin(k, SH_LIR_OP_EQ, voe, zero), later = sh_lir_bin(k, SH_LIR_OP_NE, voe, zero);
  sh_lir_expr last = sh_lir_bin(k, SH_LIR_OP_GE, end, K), more = sh_lir_bin(k, SH_LIR_OP_GT, K, end);
  if (f.val == accl) {
    wb_variant(k, fin_top, true, true, true, c->local, op, later);
    wb_variant(k, fin_top, false, true, false, c->local, op, first);
    return k->err;
  }
  wb_variant(k, fin_top, true, false, true, c->local, op, sh_lir_bin(k, SH_LIR_OP_AND, later, last));
  wb_variant(k, fin_top, true, true, true, c->local, op, sh_lir_bin(k, SH_LIR_OP_AND, later, more));
  wb_variant(k, fin_top, true, true, false, c->local, op, sh_lir_bin(k, SH_LIR_OP_AND, first, more));
  wb_variant(k, fin_top, false, false, false, c->local, op, sh_lir_bin(k, SH_LIR_OP_AND, first, last));
  return k->err;
}
