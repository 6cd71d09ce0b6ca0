/*
 * sched_cache.c — schedule primitives that move data between memory and
 * registers: cache_write (register tiling of a reduction: the GEMM
 * micro-kernel), rfactor (vector accumulators for row reductions), and the
 * two inlining primitives (pointwise producers into consumers; a
 * pointwise consumer into its producer's store: a fused epilogue).
 */
#include <stdio.h>
#include <string.h>

#include "codegen/lir_sched_int.h"

static const char *lname(const sh_lir_kernel *k, sh_lir_stmt loop) {
  return k->vars[k->st[loop].var].name;
}

static bool idx_uses(const sh_lir_kernel *k, const sh_lir_snode *s, sh_lir_var v) {
  for (int d = 0; d < s->nidx; d++)
    if (sh_lir_uses_var(k, k->list[s->idx + d], v)) return true;
  return false;
}

static bool uses_any(const sh_lir_kernel *k, sh_lir_expr e, int n, const sh_lir_var *vs) {
  for (int i = 0; i < n; i++)
    if (sh_lir_uses_var(k, e, vs[i])) return true;
  return false;
}

/* A LOCAL f32 buffer named after `base` (made unique) with constant dims. */
static sh_lir_buf new_local(sh_lir_kernel *k, const char *base, int n, const int64_t *ext) {
  char name[96];
  snprintf(name, sizeof name, "%s_acc", base);
  for (int i = 2; sh_lir_find_buffer(k, name) >= 0; i++) snprintf(name, sizeof name, "%s_acc%d", base, i);
  sh_lir_expr dims[SH_SCHED_MAX_BAND];
  for (int d = 0; d < n; d++) dims[d] = sh_lir_int(k, ext[d]);
  return sh_lir_buffer(k, name, SH_LIR_F32, SH_LIR_LOCAL, n, dims);
}

/* n nested loops copying the band's extents and annotations, variables
 * renamed with `suffix`; loops[] gets them, *inner the innermost. */
static sh_lir_stmt band_copy(sh_lir_kernel *k, int n, const sh_lir_stmt *band, const char *suffix,
                             sh_lir_stmt *loops, sh_lir_var *vars) {
  sh_lir_stmt top = SH_LIR_NONE, prev = SH_LIR_NONE;
  for (int p = 0; p < n; p++) {
    sh_lir_stmt l = sh_lir_new_stmt(k, SH_LIR_S_LOOP);
    if (l < 0) return SH_LIR_NONE;
    char name[96];
    snprintf(name, sizeof name, "%s%s", lname(k, band[p]), suffix);
    sh_lir_var v = sh_lir_new_var(k, name, l);
    if (v < 0) return SH_LIR_NONE;
    k->st[l].var = v;
    k->st[l].ext = k->st[band[p]].ext;
    k->st[l].annot = k->st[band[p]].annot;
    k->st[l].width = k->st[band[p]].width;
    if (prev >= 0) sh_lir_append(k, prev, l);
    else top = l;
    prev = l;
    loops[p] = l;
    vars[p] = v;
  }
  return top;
}

static sh_lir_expr and_all(sh_lir_kernel *k, int n, const sh_lir_expr *c) {
  sh_lir_expr r = SH_LIR_NONE;
  for (int i = 0; i < n; i++) r = r < 0 ? c[i] : sh_lir_bin(k, SH_LIR_OP_AND, r, c[i]);
  return r;
}

static sh_lir_stmt new_store(sh_lir_kernel *k, sh_lir_buf b, int n, const sh_lir_expr *idx,
                             sh_lir_expr val, sh_lir_combine comb) {
  sh_lir_stmt s = sh_lir_new_stmt(k, SH_LIR_S_STORE);
  int32_t l = sh_lir_new_list(k, n, idx);
  if (s < 0 || l < 0) return SH_LIR_NONE;
  k->st[s].buf = b;
  k->st[s].idx = l;
  k->st[s].nidx = n;
  k->st[s].val = val;
  k->st[s].combine = (uint8_t)comb;
  return s;
}

/* Appends s to parent, inside `if cond` when cond is not NONE. */
static void append_guarded(sh_lir_kernel *k, sh_lir_stmt parent, sh_lir_stmt s, sh_lir_expr cond) {
  if (cond >= 0) {
    sh_lir_stmt w = sh_lir_new_stmt(k, SH_LIR_S_IF);
    if (w < 0) return;
    k->st[w].cond = cond;
    sh_lir_append(k, parent, w);
    sh_lir_append(k, w, s);
  } else {
    sh_lir_append(k, parent, s);
  }
}

static bool has_load(const sh_lir_kernel *k, sh_lir_expr e) {
  if (e < 0) return false;
  const sh_lir_enode *x = &k->ex[e];
  switch ((sh_lir_ekind)x->kind) {
  case SH_LIR_E_LOAD: return true;
  case SH_LIR_E_BIN: return has_load(k, x->a) || has_load(k, x->b);
  case SH_LIR_E_UN:
  case SH_LIR_E_CAST: return has_load(k, x->a);
  case SH_LIR_E_SELECT: return has_load(k, x->a) || has_load(k, x->b) || has_load(k, x->c);
  default: return false;
  }
}

/* --------------------------------------------------------- cache_write */

sheaf_status sh_sched_cache_write(sh_lir_kernel *k, sh_lir_stmt band_root, sh_sched_cache *out) {
  if (k->err) return k->err;
  memset(out, 0, sizeof *out);
  out->local = out->alloc = SH_LIR_NONE;
  if (!sh_sched_is_loop(k, band_root))
    return sh_sched_err(k, "cache_write: statement %d is not a loop", (int)band_root);
  const char *lv = lname(k, band_root);
  /* the update: the one combining store below */
  sh_lir_stmt st[512], U = SH_LIR_NONE;
  int ns = sh_sched_stores(k, band_root, st, 512);
  if (ns > 512) return sh_sched_err(k, "cache_write at loop %s: more than 512 stores below", lv);
  for (int i = 0; i < ns; i++)
    if (k->st[st[i]].combine != SH_LIR_COMBINE_NONE) {
      if (U >= 0) return sh_sched_err(k, "cache_write at loop %s: more than one reduction below", lv);
      U = st[i];
    }
  if (U < 0) return sh_sched_err(k, "cache_write at loop %s: no reduction (a store with a combine) below", lv);
  const sh_lir_snode u = k->st[U];
  const sh_lir_bufinfo *C = &k->bufs[u.buf];
  if (C->role == SH_LIR_LOCAL || sh_lir_uses_buf(k, u.val, u.buf))
    return sh_sched_err(k, "cache_write at loop %s: the reduction into %s is a local or reads itself", lv,
                        C->name);
  /* the band: single-child loops that index the target */
  sh_lir_stmt band[SH_SCHED_MAX_BAND];
  int nb = 0;
  for (sh_lir_stmt c = band_root; nb < SH_SCHED_MAX_BAND;) {
    if (!idx_uses(k, &u, k->st[c].var)) break;
    band[nb++] = c;
    sh_lir_stmt b = k->st[c].body;
    if (b < 0 || k->st[b].next >= 0 || k->st[b].kind != SH_LIR_S_LOOP) break;
    if (!idx_uses(k, &u, k->st[b].var)) break;
    c = b;
  }
  if (nb == 0)
    return sh_sched_err(k, "cache_write at loop %s: the loop does not index %s (not a spatial loop "
                           "of the reduction)", lv, C->name);
  int64_t ext[SH_SCHED_MAX_BAND], total = 1;
  for (int p = 0; p < nb; p++) {
    if (!sh_lir_is_const(k, k->st[band[p]].ext, &ext[p]) || ext[p] < 1)
      return sh_sched_err(k, "cache_write at loop %s: loop %s has no constant extent (split it)", lv,
                          lname(k, band[p]));
    total *= ext[p];
    if (total > 4096) return sh_sched_err(k, "cache_write at loop %s: the tile exceeds 4096 elements", lv);
  }
  sh_lir_var bv[SH_SCHED_MAX_BAND];
  for (int p = 0; p < nb; p++) bv[p] = k->st[band[p]].var;
  /* the band body: [init], the reduction nest R */
  sh_lir_stmt Ln = band[nb - 1], R = SH_LIR_NONE, init = SH_LIR_NONE;
  sh_lir_expr init_cond = SH_LIR_NONE;
  for (sh_lir_stmt c = k->st[Ln].body; c >= 0; c = k->st[c].next) {
    if (sh_lir_within(k, U, c)) {
      R = c;
      if (k->st[c].next >= 0)
        return sh_sched_err(k, "cache_write at loop %s: statements follow the reduction nest", lv);
      break;
    }
    sh_lir_stmt s = c;
    sh_lir_expr cond = SH_LIR_NONE;
    if (k->st[s].kind == SH_LIR_S_IF && k->st[s].els < 0 && k->st[s].body >= 0 &&
        k->st[k->st[s].body].next < 0) {
      cond = k->st[s].cond;
      s = k->st[s].body;
    }
    const sh_lir_snode *x = &k->st[s];
    bool same = x->kind == SH_LIR_S_STORE && x->combine == SH_LIR_COMBINE_NONE && x->buf == u.buf &&
                init < 0;
    for (int d = 0; same && d < x->nidx; d++)
      same = sh_lir_expr_eq(k, k->list[x->idx + d], k->list[u.idx + d]);
    if (!same)
      return sh_sched_err(k, "cache_write at loop %s: the band body holds a statement other than "
                             "the initial store of %s and the reduction", lv, C->name);
    init = s;
    init_cond = cond;
  }
  /* R: loops and else-less ifs, one statement each, down to U */
  sh_lir_stmt rl[64];
  sh_lir_expr rc[64];
  int nrl = 0, nrc = 0;
  for (sh_lir_stmt t = R; t != U;) {
    const sh_lir_snode *x = &k->st[t];
    if (nrl >= 64 || nrc >= 60 || (x->kind != SH_LIR_S_LOOP && !(x->kind == SH_LIR_S_IF && x->els < 0)))
      return sh_sched_err(k, "cache_write at loop %s: the reduction nest is not loops and guards "
                             "around one store", lv);
    if (x->kind == SH_LIR_S_LOOP) {
      if (uses_any(k, x->ext, nb, bv))
        return sh_sched_err(k, "cache_write at loop %s: the extent of loop %s depends on the band", lv,
                            lname(k, t));
      if (idx_uses(k, &u, x->var))
        return sh_sched_err(k, "cache_write at loop %s: loop %s indexes %s (not a reduction loop)", lv,
                            lname(k, t), C->name);
      rl[nrl++] = t;
    } else {
      nrc += sh_lir_conjuncts(k, x->cond, rc + nrc, 64 - nrc);
    }
    sh_lir_stmt b = x->body;
    if (b < 0 || k->st[b].next >= 0)
      return sh_sched_err(k, "cache_write at loop %s: the reduction nest holds other statements", lv);
    t = b;
  }
  /* guards that do not depend on the reduction loops also guard the store */
  sh_lir_expr wb_conj[64];
  int nwb = 0;
  for (int i = 0; i < nrc; i++) {
    bool red = false;
    for (int j = 0; j < nrl; j++) red |= sh_lir_uses_var(k, rc[i], k->st[rl[j]].var);
    if (!red) wb_conj[nwb++] = rc[i];
  }
  if (init >= 0) {
    sh_lir_expr ic[64];
    int ni = init_cond >= 0 ? sh_lir_conjuncts(k, init_cond, ic, 64) : 0;
    bool match = ni == nwb;
    for (int i = 0; match && i < ni; i++) {
      bool found = false;
      for (int j = 0; j < nwb; j++) found |= sh_lir_expr_eq(k, ic[i], wb_conj[j]);
      match = found;
    }
    if (!match)
      return sh_sched_err(k, "cache_write at loop %s: the initial store and the reduction of %s have "
                             "different guards", lv, C->name);
  }
  /* build */
  const char *cname = C->name; /* C may move when the local is added */
  sh_lir_buf acc = new_local(k, cname, nb, ext);
  sh_lir_stmt a = sh_lir_new_stmt(k, SH_LIR_S_ALLOC);
  if (acc < 0 || a < 0) return k->err;
  k->st[a].buf = acc;
  sh_lir_replace(k, band_root, a);
  sh_lir_expr accidx[SH_SCHED_MAX_BAND], cidx[SH_LIR_MAX_RANK];
  sh_lir_var cv[SH_SCHED_MAX_BAND];
  sh_lir_expr cve[SH_SCHED_MAX_BAND];
  /* init copy */
  sh_lir_stmt top = band_copy(k, nb, band, "_ini", out->init, cv);
  if (top < 0) return k->err;
  for (int p = 0; p < nb; p++) accidx[p] = cve[p] = sh_lir_v(k, cv[p]);
  sh_lir_expr v0 = init >= 0 ? sh_lir_subst(k, k->st[init].val, nb, bv, cve)
                             : sh_lir_flt(k, sh_lir_combine_identity((sh_lir_combine)u.combine));
  sh_lir_expr g0 = init >= 0 && init_cond >= 0 && has_load(k, v0) ? sh_lir_subst(k, init_cond, nb, bv, cve)
                                                                  : SH_LIR_NONE;
  append_guarded(k, out->init[nb - 1], new_store(k, acc, nb, accidx, v0, SH_LIR_COMBINE_NONE), g0);
  sh_lir_append(k, a, top);
  /* the update: R's loops, the band inside them, the guarded accumulation */
  sh_lir_stmt holder = a;
  for (int j = 0; j < nrl; j++) {
    sh_lir_stmt l = rl[j];
    sh_lir_detach(k, l);
    sh_lir_stmt b = k->st[l].body;
    while (b >= 0) { /* keep only the loops of the chain */
      sh_lir_stmt nb2 = k->st[b].next;
      sh_lir_detach(k, b);
      b = nb2;
    }
    sh_lir_append(k, holder, l);
    holder = l;
  }
  for (sh_lir_stmt b = k->st[Ln].body; b >= 0;) {
    sh_lir_stmt nb2 = k->st[b].next;
    sh_lir_detach(k, b);
    b = nb2;
  }
  sh_lir_detach(k, U);
  sh_lir_append(k, holder, band_root);
  for (int p = 0; p < nb; p++) accidx[p] = sh_lir_v(k, bv[p]);
  int32_t l = sh_lir_new_list(k, nb, accidx);
  if (l < 0) return k->err;
  k->st[U].buf = acc;
  k->st[U].idx = l;
  k->st[U].nidx = nb;
  append_guarded(k, Ln, U, and_all(k, nrc, rc));
  /* writeback copy */
  top = band_copy(k, nb, band, "_wb", out->final, cv);
  if (top < 0) return k->err;
  for (int p = 0; p < nb; p++) accidx[p] = cve[p] = sh_lir_v(k, cv[p]);
  for (int d = 0; d < u.nidx; d++) cidx[d] = sh_lir_subst(k, k->list[u.idx + d], nb, bv, cve);
  sh_lir_expr wbg = nwb ? sh_lir_subst(k, and_all(k, nwb, wb_conj), nb, bv, cve) : SH_LIR_NONE;
  sh_lir_stmt wb = new_store(k, u.buf, u.nidx, cidx, sh_lir_load(k, acc, nb, accidx),
                             init >= 0 ? SH_LIR_COMBINE_NONE : (sh_lir_combine)u.combine);
  append_guarded(k, out->final[nb - 1], wb, wbg);
  sh_lir_append(k, a, top);
  out->local = acc;
  out->alloc = a;
  out->n = nb;
  for (int p = 0; p < nb; p++) out->band[p] = band[p];
  return k->err;
}

/* ------------------------------------------------------------- rfactor */

sheaf_status sh_sched_rfactor(sh_lir_kernel *k, sh_lir_stmt band_root, sh_lir_stmt store,
                              sh_sched_cache *out) {
  if (k->err) return k->err;
  memset(out, 0, sizeof *out);
  out->local = out->alloc = SH_LIR_NONE;
  if (!sh_sched_is_loop(k, band_root))
    return sh_sched_err(k, "rfactor: statement %d is not a loop", (int)band_root);
  const char *lv = lname(k, band_root);
  sh_lir_stmt band[SH_SCHED_MAX_BAND];
  sh_lir_var bv[SH_SCHED_MAX_BAND];
  int64_t ext[SH_SCHED_MAX_BAND];
  int nb = 0;
  for (sh_lir_stmt c = band_root;;) {
    if (!sh_lir_is_const(k, k->st[c].ext, &ext[nb]) || ext[nb] < 1)
      return sh_sched_err(k, "rfactor at loop %s: loop %s has no constant extent", lv, lname(k, c));
    band[nb] = c;
    bv[nb++] = k->st[c].var;
    sh_lir_stmt b = k->st[c].body;
    if (nb == SH_SCHED_MAX_BAND || b < 0 || k->st[b].next >= 0 || k->st[b].kind != SH_LIR_S_LOOP) break;
    c = b;
  }
  int64_t total = 1;
  for (int p = 0; p < nb; p++) total *= ext[p];
  if (total > 4096) return sh_sched_err(k, "rfactor at loop %s: more than 4096 partial results", lv);
  /* the reduction store */
  sh_lir_stmt st[512], S = SH_LIR_NONE;
  int ns = sh_sched_stores(k, band_root, st, 512);
  if (ns > 512) return sh_sched_err(k, "rfactor at loop %s: more than 512 stores below", lv);
  for (int i = 0; i < ns; i++) {
    const sh_lir_snode *x = &k->st[st[i]];
    const sh_lir_bufinfo *tb = &k->bufs[x->buf];
    int64_t one = 0;
    bool scalar_local = tb->rank == 1 && sh_lir_is_const(k, tb->dims[0], &one) && one == 1;
    bool red = x->combine != SH_LIR_COMBINE_NONE && (tb->role != SH_LIR_LOCAL || scalar_local);
    /* a named store may have spatial loops in the band (a tile of targets,
     * each with its own accumulators) if one band loop reduces */
    int n_spatial = 0;
    for (int p = 0; p < nb; p++) n_spatial += idx_uses(k, x, bv[p]);
    if (store < 0 || n_spatial == nb) red = red && n_spatial == 0;
    if (store >= 0 ? st[i] == store : red) {
      if (!red)
        return sh_sched_err(k, "rfactor at loop %s: the store to %s is not a reduction over the band",
                            lv, k->bufs[x->buf].name);
      if (S >= 0) return sh_sched_err(k, "rfactor at loop %s: several reductions (name one)", lv);
      S = st[i];
    }
  }
  if (S < 0) return sh_sched_err(k, "rfactor at loop %s: no reduction over it below", lv);
  const sh_lir_snode s = k->st[S];
  if (sh_lir_uses_buf(k, s.val, s.buf))
    return sh_sched_err(k, "rfactor at loop %s: the reduction into %s reads it", lv, k->bufs[s.buf].name);
  /* T: the outermost of the enclosing reduction loops */
  sh_lir_stmt T = band_root;
  while (k->st[T].parent != k->root && k->st[k->st[T].parent].kind == SH_LIR_S_LOOP &&
         !idx_uses(k, &s, k->st[k->st[T].parent].var) && k->st[k->st[T].parent].annot != SH_LIR_PARALLEL)
    T = k->st[T].parent;
  /* guards between T and S that do not depend on loops inside T guard the final store */
  sh_lir_expr fc[64];
  int nfc = 0;
  for (sh_lir_stmt p = s.parent; p >= 0 && p != k->st[T].parent; p = k->st[p].parent) {
    if (k->st[p].kind != SH_LIR_S_IF) continue;
    sh_lir_expr conj[64];
    int nc = sh_lir_conjuncts(k, k->st[p].cond, conj, 64);
    for (int i = 0; i < nc && nfc < 64; i++) {
      bool inner = false, spatial = false; /* spatial: a band loop that indexes S */
      for (sh_lir_stmt q = s.parent; q >= 0 && q != k->st[T].parent; q = k->st[q].parent) {
        if (k->st[q].kind != SH_LIR_S_LOOP || !sh_lir_uses_var(k, conj[i], k->st[q].var)) continue;
        bool sp = false;
        for (int p2 = 0; p2 < nb; p2++) sp |= q == band[p2] && idx_uses(k, &s, bv[p2]);
        if (sp) spatial = true;
        else inner = true;
      }
      if (inner && spatial)
        return sh_sched_err(k, "rfactor at loop %s: a guard depends on both a spatial loop of the band "
                               "and a reduction loop", lv);
      if (!inner) fc[nfc++] = conj[i];
    }
  }
  sh_lir_buf acc = new_local(k, k->bufs[s.buf].name, nb, ext);
  sh_lir_stmt a = sh_lir_new_stmt(k, SH_LIR_S_ALLOC);
  if (acc < 0 || a < 0) return k->err;
  k->st[a].buf = acc;
  sh_lir_replace(k, T, a);
  sh_lir_var cv[SH_SCHED_MAX_BAND];
  sh_lir_expr idx[SH_SCHED_MAX_BAND];
  sh_lir_stmt top = band_copy(k, nb, band, "_ini", out->init, cv);
  if (top < 0) return k->err;
  for (int p = 0; p < nb; p++) idx[p] = sh_lir_v(k, cv[p]);
  sh_lir_append(k, out->init[nb - 1],
                new_store(k, acc, nb, idx, sh_lir_flt(k, sh_lir_combine_identity((sh_lir_combine)s.combine)),
                          SH_LIR_COMBINE_NONE));
  sh_lir_append(k, a, top);
  sh_lir_append(k, a, T);
  top = band_copy(k, nb, band, "_fin", out->final, cv);
  if (top < 0) return k->err;
  for (int p = 0; p < nb; p++) idx[p] = sh_lir_v(k, cv[p]);
  sh_lir_expr sidx[SH_LIR_MAX_RANK], cve[SH_SCHED_MAX_BAND];
  for (int p = 0; p < nb; p++) cve[p] = idx[p];
  for (int d = 0; d < s.nidx; d++) sidx[d] = sh_lir_subst(k, k->list[s.idx + d], nb, bv, cve);
  sh_lir_expr accv = sh_lir_load(k, acc, nb, idx);
  sh_lir_stmt fin = new_store(k, s.buf, s.nidx, sidx, accv, (sh_lir_combine)s.combine);
  append_guarded(k, out->final[nb - 1], fin, nfc ? sh_lir_subst(k, and_all(k, nfc, fc), nb, bv, cve) : SH_LIR_NONE);
  sh_lir_append(k, a, top);
  for (int p = 0; p < nb; p++) idx[p] = sh_lir_v(k, bv[p]);
  int32_t l = sh_lir_new_list(k, nb, idx);
  if (l < 0) return k->err;
  k->st[S].buf = acc;
  k->st[S].idx = l;
  k->st[S].nidx = nb;
  out->local = acc;
  out->alloc = a;
  out->n = nb;
  for (int p = 0; p < nb; p++) out->band[p] = band[p];
  return k->err;
}

/* ------------------------------------------------------------ inlining */

static int count_loads(const sh_lir_kernel *k, sh_lir_expr e, sh_lir_buf b) {
  if (e < 0) return 0;
  const sh_lir_enode *x = &k->ex[e];
  switch ((sh_lir_ekind)x->kind) {
  case SH_LIR_E_LOAD: {
    int n = x->a == b;
    for (int i = 0; i < x->n; i++) n += count_loads(k, k->list[x->b + i], b);
    return n;
  }
  case SH_LIR_E_BIN: return count_loads(k, x->a, b) + count_loads(k, x->b, b);
  case SH_LIR_E_UN:
  case SH_LIR_E_CAST: return count_loads(k, x->a, b);
  case SH_LIR_E_SELECT: return count_loads(k, x->a, b) + count_loads(k, x->b, b) + count_loads(k, x->c, b);
  default: return 0;
  }
}

static int count_loads_tree(const sh_lir_kernel *k, sh_lir_stmt s, sh_lir_buf b) {
  const sh_lir_snode *x = &k->st[s];
  int n = 0;
  if (x->kind == SH_LIR_S_STORE) {
    n += count_loads(k, x->val, b);
    for (int d = 0; d < x->nidx; d++) n += count_loads(k, k->list[x->idx + d], b);
  }
  if (x->kind == SH_LIR_S_LOOP) n += count_loads(k, x->ext, b);
  if (x->kind == SH_LIR_S_IF) {
    n += count_loads(k, x->cond, b);
    if (x->els >= 0) n += count_loads_tree(k, x->els, b);
  }
  for (sh_lir_stmt c = x->body; c >= 0; c = k->st[c].next) n += count_loads_tree(k, c, b);
  return n;
}

/* Whether the subtree at s stores to a buffer that e loads, other than T. */
static bool stores_read_by(const sh_lir_kernel *k, sh_lir_stmt s, sh_lir_expr e, sh_lir_buf T) {
  const sh_lir_snode *x = &k->st[s];
  if (x->kind == SH_LIR_S_STORE && x->buf != T && count_loads(k, e, x->buf) > 0) return true;
  if (x->kind == SH_LIR_S_IF && x->els >= 0 && stores_read_by(k, x->els, e, T)) return true;
  for (sh_lir_stmt c = x->body; c >= 0; c = k->st[c].next)
    if (stores_read_by(k, c, e, T)) return true;
  return false;
}

/* The ancestor of s directly under the root. */
static sh_lir_stmt top_of(const sh_lir_kernel *k, sh_lir_stmt s) {
  while (s >= 0 && k->st[s].parent != k->root) s = k->st[s].parent;
  return s;
}

/* e with every load T[g...] replaced by f[vars := g]. */
static sh_lir_expr replace_loads(sh_lir_kernel *k, sh_lir_expr e, sh_lir_buf T, sh_lir_expr f, int n,
                                 const sh_lir_var *vars) {
  if (e < 0 || k->err) return e;
  const sh_lir_enode x = k->ex[e];
  switch ((sh_lir_ekind)x.kind) {
  case SH_LIR_E_LOAD:
    if (x.a == T) {
      sh_lir_expr g[SH_LIR_MAX_RANK];
      for (int i = 0; i < x.n; i++) g[i] = k->list[x.b + i];
      return sh_lir_subst(k, f, n, vars, g);
    }
    return e;
  case SH_LIR_E_BIN: {
    sh_lir_expr a = replace_loads(k, x.a, T, f, n, vars), b = replace_loads(k, x.b, T, f, n, vars);
    return a == x.a && b == x.b ? e : sh_lir_bin(k, (sh_lir_op)x.op, a, b);
  }
  case SH_LIR_E_UN: {
    sh_lir_expr a = replace_loads(k, x.a, T, f, n, vars);
    return a == x.a ? e : sh_lir_un(k, (sh_lir_fn)x.op, a);
  }
  case SH_LIR_E_SELECT: {
    sh_lir_expr a = replace_loads(k, x.a, T, f, n, vars), b = replace_loads(k, x.b, T, f, n, vars),
                c = replace_loads(k, x.c, T, f, n, vars);
    return a == x.a && b == x.b && c == x.c ? e : sh_lir_select(k, a, b, c);
  }
  default: return e;
  }
}

static void replace_loads_tree(sh_lir_kernel *k, sh_lir_stmt s, sh_lir_buf T, sh_lir_expr f, int n,
                               const sh_lir_var *vars) {
  sh_lir_snode *x = &k->st[s];
  if (x->kind == SH_LIR_S_STORE) {
    sh_lir_expr v = replace_loads(k, x->val, T, f, n, vars);
    k->st[s].val = v;
    return;
  }
  if (x->kind == SH_LIR_S_IF && x->els >= 0) replace_loads_tree(k, x->els, T, f, n, vars);
  for (sh_lir_stmt c = k->st[s].body; c >= 0; c = k->st[c].next) replace_loads_tree(k, c, T, f, n, vars);
}

/* Detaches s and then every enclosing statement left empty. */
static void remove_nest(sh_lir_kernel *k, sh_lir_stmt s) {
  sh_lir_stmt p = k->st[s].parent;
  sh_lir_detach(k, s);
  while (p >= 0 && p != k->root && k->st[p].body < 0) {
    const sh_lir_snode *x = &k->st[p];
    if (x->kind == SH_LIR_S_IF && x->els >= 0 && k->st[x->els].body >= 0) break;
    sh_lir_stmt up = x->parent;
    if (x->kind == SH_LIR_S_BLOCK && up >= 0 && k->st[up].kind == SH_LIR_S_IF && k->st[up].els == p) {
      k->st[up].els = SH_LIR_NONE; /* an empty else */
      k->st[p].parent = SH_LIR_NONE;
      p = up;
      continue;
    }
    if (x->kind == SH_LIR_S_LOOP) k->vars[x->var].loop = SH_LIR_NONE;
    sh_lir_detach(k, p);
    p = up;
  }
}

/* The indices of s are distinct variables of loops enclosing s. */
static bool index_vars(const sh_lir_kernel *k, sh_lir_stmt s, sh_lir_var *vars) {
  const sh_lir_snode *x = &k->st[s];
  for (int d = 0; d < x->nidx; d++) {
    const sh_lir_enode *e = &k->ex[k->list[x->idx + d]];
    if (e->kind != SH_LIR_E_VAR) return false;
    vars[d] = e->a;
    for (int q = 0; q < d; q++)
      if (vars[q] == vars[d]) return false;
    sh_lir_stmt l = k->vars[e->a].loop;
    if (l < 0 || !sh_lir_within(k, s, l)) return false;
  }
  return true;
}

/* Every variable of e is among vars. */
static bool vars_within(const sh_lir_kernel *k, sh_lir_expr e, int n, const sh_lir_var *vars) {
  for (int32_t v = 0; v < k->n_vars; v++) {
    if (!sh_lir_uses_var(k, e, v)) continue;
    bool in = false;
    for (int i = 0; i < n; i++) in |= vars[i] == v;
    if (!in) return false;
  }
  return true;
}

static int count_stores(const sh_lir_kernel *k, sh_lir_buf b) {
  sh_lir_stmt st[4096];
  int n = sh_sched_stores(k, k->root, st, 4096), c = 0;
  for (int i = 0; i < n && i < 4096; i++) c += k->st[st[i]].buf == b;
  return n > 4096 ? -1 : c;
}

sheaf_status sh_sched_compute_inline(sh_lir_kernel *k, sh_lir_stmt store) {
  if (k->err) return k->err;
  if (store < 0 || store >= k->n_st || k->st[store].kind != SH_LIR_S_STORE || k->st[store].parent < 0)
    return sh_sched_err(k, "compute_inline: statement %d is not a store", (int)store);
  const sh_lir_snode p = k->st[store];
  const sh_lir_bufinfo *T = &k->bufs[p.buf];
  sh_lir_var vars[SH_LIR_MAX_RANK];
  if (T->role != SH_LIR_TEMP || T->layout != SH_LIR_LAYOUT_DENSE)
    return sh_sched_err(k, "compute_inline of %s: only a dense temporary can be inlined", T->name);
  if (p.combine != SH_LIR_COMBINE_NONE || count_stores(k, p.buf) != 1)
    return sh_sched_err(k, "compute_inline of %s: not a pointwise producer (one plain store)", T->name);
  if (!index_vars(k, store, vars))
    return sh_sched_err(k, "compute_inline of %s: its indices are not distinct loop variables", T->name);
  if (sh_lir_uses_buf(k, p.val, p.buf) || !vars_within(k, p.val, p.nidx, vars))
    return sh_sched_err(k, "compute_inline of %s: the value reads %s or depends on other loops",
                        T->name, T->name);
  replace_loads_tree(k, k->root, p.buf, p.val, p.nidx, vars);
  remove_nest(k, store);
  k->bufs[p.buf].inlined = true;
  return k->err;
}

sheaf_status sh_sched_reverse_inline(sh_lir_kernel *k, sh_lir_stmt store) {
  return sh_sched_reverse_inline_of(k, store, SH_LIR_NONE);
}

sheaf_status sh_sched_reverse_inline_of(sh_lir_kernel *k, sh_lir_stmt store, sh_lir_buf of) {
  if (k->err) return k->err;
  if (store < 0 || store >= k->n_st || k->st[store].kind != SH_LIR_S_STORE || k->st[store].parent < 0)
    return sh_sched_err(k, "reverse_inline: statement %d is not a store", (int)store);
  const sh_lir_snode c = k->st[store];
  const char *O = k->bufs[c.buf].name;
  sh_lir_var vars[SH_LIR_MAX_RANK];
  if (c.combine != SH_LIR_COMBINE_NONE || !index_vars(k, store, vars) ||
      !vars_within(k, c.val, c.nidx, vars))
    return sh_sched_err(k, "reverse_inline into the store to %s: not a pointwise consumer (a plain "
                           "store indexed by its loops)", O);
  /* the temporary it consumes, read here only, at this store's indices */
  sh_lir_buf T = SH_LIR_NONE;
  for (int32_t b = 0; b < k->n_bufs && T < 0; b++) {
    if (k->bufs[b].role != SH_LIR_TEMP || k->bufs[b].inlined || count_loads(k, c.val, b) == 0) continue;
    if (of >= 0 && b != of) continue;
    T = b;
  }
  if (T < 0) return sh_sched_err(k, "reverse_inline into the store to %s: it reads no temporary", O);
  const char *tn = k->bufs[T].name;
  if (count_loads_tree(k, k->root, T) != count_loads(k, c.val, T))
    return sh_sched_err(k, "reverse_inline of %s into %s: %s is read elsewhere too", tn, O, tn);
  sh_lir_stmt P = sh_lir_find_store(k, T, 0);
  if (P < 0 || count_stores(k, T) != 1 || k->st[P].combine != SH_LIR_COMBINE_NONE)
    return sh_sched_err(k, "reverse_inline of %s into %s: %s has no single plain store (cache_write "
                           "its reduction first)", tn, O, tn);
  /* check the index of every T load in c.val */
  sh_lir_expr stack[256];
  int sp = 0;
  stack[sp++] = c.val;
  while (sp) {
    sh_lir_expr e = stack[--sp];
    const sh_lir_enode *x = &k->ex[e];
    if (x->kind == SH_LIR_E_LOAD && x->a == T) {
      for (int d = 0; d < x->n; d++)
        if (!sh_lir_expr_eq(k, k->list[x->b + d], k->list[c.idx + d]))
          return sh_sched_err(k, "reverse_inline of %s into %s: %s is read at other indices than "
                                 "the store's", tn, O, tn);
      continue;
    }
    if (sp + 3 > 256) return sh_sched_err(k, "reverse_inline into %s: expression too deep", O);
    if (x->kind == SH_LIR_E_BIN || x->kind == SH_LIR_E_SELECT) {
      stack[sp++] = x->a;
      stack[sp++] = x->b;
    }
    if (x->kind == SH_LIR_E_SELECT) stack[sp++] = x->c;
    if (x->kind == SH_LIR_E_UN) stack[sp++] = x->a;
  }
  const sh_lir_snode p = k->st[P];
  if (p.nidx != c.nidx) return sh_sched_err(k, "reverse_inline of %s into %s: ranks differ", tn, O);
  /* moving the consumer up to T's writer must not read a buffer before a
   * statement in between writes it (out = f(g, t) with t computed after g) */
  sh_lir_stmt tp = top_of(k, P), tc = top_of(k, store);
  if (tp < 0 || tc < 0)
    return sh_sched_err(k, "reverse_inline of %s into %s: not under the kernel's root", tn, O);
  for (sh_lir_stmt s = k->st[tp].next; s >= 0 && s != tc; s = k->st[s].next)
    if (stores_read_by(k, s, c.val, T))
      return sh_sched_err(k, "reverse_inline of %s into %s: the store reads a buffer written "
                             "between %s's writer and it", tn, O, tn);
  /* nor a value its own nest computes before it (a row's max and sum for
   * a log-softmax beside the product: moved into T's writer, the store
   * would read them before they exist, or a register outside its alloc) */
  if (tc != tp && stores_read_by(k, tc, c.val, T))
    return sh_sched_err(k, "reverse_inline of %s into %s: the store reads a value its own nest "
                           "computes", tn, O);
  /* g[T := p.val] with the consumer's variables replaced by p's indices */
  sh_lir_expr g = replace_loads(k, c.val, T, p.val, 0, NULL);
  sh_lir_expr pidx[SH_LIR_MAX_RANK];
  for (int d = 0; d < p.nidx; d++) pidx[d] = k->list[p.idx + d];
  g = sh_lir_subst(k, g, c.nidx, vars, pidx);
  k->st[P].buf = c.buf;
  k->st[P].val = g;
  remove_nest(k, store);
  k->bufs[T].inlined = true;
  return k->err;
}
