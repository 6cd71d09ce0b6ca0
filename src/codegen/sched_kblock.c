/*
 * sched_kblock.c — K blocking of a register tile (sh_sched_kblock): the
 * reduction loop of a cache_write tile runs in blocks of kc steps, the
 * block loop outside the tiles of a row block, so that kc rows of a B
 * panel stay in L1 across the block's tiles (a 16-column panel at K = 512
 * is 32 KB, all of L1). Between blocks the partial sums live in the
 * tile's write-back target: block 0 initialises the tile as before, later
 * blocks load it back; every block but the last stores the tile plainly,
 * the last runs the original write-back (a fused epilogue moves there).
 */
#include <stdio.h>
#include <string.h>

#include "codegen/lir_sched_int.h"

/* The one store in subtree s (NONE when there are none or several). */
static sh_lir_stmt only_store(const sh_lir_kernel *k, sh_lir_stmt s) {
  sh_lir_stmt st[2];
  return sh_sched_stores(k, s, st, 2) == 1 ? st[0] : SH_LIR_NONE;
}

/* The one load of local `acc` in e (NONE when none or several). */
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

/* The n loops of a perfect chain from `top` down (each loop's body its
 * one child loop), into loops[]; the count found. */
static int loop_chain(const sh_lir_kernel *k, sh_lir_stmt top, int n, sh_lir_stmt *loops) {
  int c = 0;
  for (sh_lir_stmt s = top; s >= 0 && c < n && k->st[s].kind == SH_LIR_S_LOOP; s = k->st[s].body)
    loops[c++] = s;
  return c;
}

/* Wraps s (in place) in `if cond`. */
static bool wrap(sh_lir_kernel *k, sh_lir_stmt s, sh_lir_expr cond) {
  return cond >= 0 && sh_sched_wrap_if(k, s, cond) >= 0;
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
  /* at: an ancestor of the alloc whose loops down to it index the target */
  if (!sh_sched_is_loop(k, at) || !sh_lir_within(k, c->alloc, at))
    return sh_sched_err(k, "kblock of %s: statement %d is not a loop around the tile", kn, (int)at);
  sh_lir_expr K = k->st[kloop].ext;
  for (sh_lir_stmt p = c->alloc; p != at;) {
    p = k->st[p].parent;
    if (k->st[p].kind != SH_LIR_S_LOOP) continue;
    bool idx = false;
    for (int d = 0; d < f.nidx; d++) idx |= sh_lir_uses_var(k, k->list[f.idx + d], k->st[p].var);
    if (!idx || k->st[p].annot == SH_LIR_PARALLEL || sh_lir_uses_var(k, K, k->st[p].var))
      return sh_sched_err(k, "kblock of %s: loop %s between the tile and the block loop is not a serial "
                             "loop over the target's elements", kn, k->vars[k->st[p].var].name);
  }
  /* the reduction reads nothing the tile writes */
  sh_lir_stmt ups[64];
  int nu = sh_sched_stores(k, kloop, ups, 64);
  for (int i = 0; i < nu && i < 64; i++)
    if (sh_lir_uses_buf(k, k->st[ups[i]].val, f.buf))
      return sh_sched_err(k, "kblock of %s: the reduction reads %s", kn, O->name);
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
  /* the init: block 0 as before, later blocks read the partial sums back
   * (under the write-back's guard: never past the target's end) */
  sh_lir_stmt fl[SH_SCHED_MAX_BAND], il[SH_SCHED_MAX_BAND], il2[SH_SCHED_MAX_BAND];
  sh_lir_stmt init2 = sh_lir_clone(k, init_top, 0, NULL, NULL, "_kb");
  if (init2 < 0) return k->err;
  if (loop_chain(k, fin_top, c->n, fl) != c->n || loop_chain(k, init_top, c->n, il) != c->n ||
      loop_chain(k, init2, c->n, il2) != c->n)
    return sh_lir_fail(k, SHEAF_ERR_INVALID_ARG, "kernel %s: kblock of %s: the tile's copies are not "
                                                 "loop bands", k->name, kn);
  (void)il;
  sh_lir_var fv[SH_SCHED_MAX_BAND];
  sh_lir_expr iv[SH_SCHED_MAX_BAND];
  for (int p = 0; p < c->n; p++) fv[p] = k->st[fl[p]].var, iv[p] = sh_lir_v(k, k->st[il2[p]].var);
  sh_lir_expr oidx[SH_LIR_MAX_RANK];
  for (int d = 0; d < f.nidx; d++) oidx[d] = sh_lir_subst(k, k->list[f.idx + d], c->n, fv, iv);
  sh_lir_stmt I2 = only_store(k, init2);
  k->st[I2].val = sh_lir_load(k, f.buf, f.nidx, oidx);
  sh_lir_stmt G = k->st[F].parent;
  if (G != fl[c->n - 1] && k->st[G].kind == SH_LIR_S_IF && k->st[G].els < 0)
    wrap(k, I2, sh_lir_subst(k, k->st[G].cond, c->n, fv, iv));
  sh_lir_insert_after(k, init_top, init2);
  sh_lir_expr zero = sh_lir_int(k, 0);
  wrap(k, init_top, sh_lir_bin(k, SH_LIR_OP_EQ, voe, zero));
  wrap(k, init2, sh_lir_bin(k, SH_LIR_OP_NE, voe, zero));
  /* the write-back: the last block runs it, the others store the tile
   * (conditions not of the form a < b: unswitch leaves them alone) */
  sh_lir_stmt fin2 = sh_lir_clone(k, fin_top, 0, NULL, NULL, "_kb");
  if (fin2 < 0) return k->err;
  sh_lir_stmt F2 = only_store(k, fin2);
  int n2 = 0;
  k->st[F2].val = local_load(k, k->st[F2].val, c->local, &n2);
  sh_lir_insert_after(k, fin_top, fin2);
  sh_lir_expr end = sh_lir_add(k, base, kce);
  wrap(k, fin_top, sh_lir_bin(k, SH_LIR_OP_GE, end, K));
  wrap(k, fin2, sh_lir_bin(k, SH_LIR_OP_GT, K, end));
  (void)accl;
  return k->err;
}
