/*
 * sched_default.c — the schedule a kernel gets without tuning.
 *
 *   1. exp(x - max x) is marked nonpositive (exp_ranges); invariant factors
 *      leave sums (factor); pointwise temporaries are inlined into their
 *      consumers, except a costly one read twice that can live in its last
 *      reader's output (share: one exp per element); per-row rank-1
 *      temporaries become registers (contract).
 *   2. A GEMM-like nest (for i: for j: [C = 0;] for k: C[i, j] += A[.., k]·B[k, j],
 *      B stride-1 in j) is register-tiled like the hand micro-kernels: an
 *      mr × nr tile (AVX2 6 × 16, AVX-512 12 × 32, scalar 4 × 4) held in
 *      registers across k, B packed in panels of nr columns when it is a
 *      weight, a pointwise consumer of C fused into the tile's store, the
 *      split tails unswitched (whole tiles run without guards), row blocks
 *      of 16 tiles by column panels fused into one parallel loop; K in
 *      blocks of kc steps around the row block's tiles when the knob asks.
 *      A row nest right after it that alone reads its product (log-softmax,
 *      layernorm) runs per row block of 12 rows instead, the product kept
 *      for one block per thread (sched_rowblock.c: compute_at, shrink).
 *   3. A reduction loop that is not stride-1 under a spatial loop that is
 *      (e·v): a tile of 4 vectors of the target in registers across the
 *      reduction (cache_write), else distribute + reorder.
 *      Every other innermost loop whose accesses are stride-1 is split by
 *      U·W (U = 4; the rest peeled, and vectorized by W again), its W lanes
 *      vectorized and its U vectors unrolled; reductions go through vector
 *      accumulators (rfactor), combined lane-wise, and one horizontal
 *      reduction at the end.
 *   4. The outermost loop of each nest runs over the pool (blocks of 4
 *      iterations when its body has no ragged extent).
 *   5. Per-row values (reciprocals, rsqrt, loads) out of element loops (hoist).
 * W is the ISA's vector width (AVX-512 16, AVX2 8, scalar 1).
 * Each step is tried and skipped when its primitive does not apply.
 */
#include <string.h>

#include "codegen/lir_sched_int.h"

static int width_of(sheaf_isa isa) {
  return isa == SHEAF_ISA_AVX512 ? 16 : isa == SHEAF_ISA_AVX2 ? 8 : 1;
}

static bool costly_expr(const sh_lir_kernel *k, sh_lir_expr e) {
  const sh_lir_enode *x = &k->ex[e];
  switch ((sh_lir_ekind)x->kind) {
  case SH_LIR_E_UN:
    return (x->op != SH_LIR_FN_NEG && x->op != SH_LIR_FN_ABS && x->op != SH_LIR_FN_RELU) ||
           costly_expr(k, x->a);
  case SH_LIR_E_BIN: return x->op == SH_LIR_OP_DIV || x->op == SH_LIR_OP_POW || costly_expr(k, x->a) ||
                            costly_expr(k, x->b);
  case SH_LIR_E_SELECT: return costly_expr(k, x->a) || costly_expr(k, x->b) || costly_expr(k, x->c);
  default: return false;
  }
}

/* A pointwise temporary T whose value is costly (exp, ...) and is read by
 * two or more statements is computed once rather than inlined into each,
 * when it can live in the storage of the buffer its last reader writes
 * (sh_sched_share: softmax's exp row in the output row, rescaled in
 * place). */
static bool share_costly(sh_lir_kernel *k, sh_lir_buf T, sh_lir_stmt p) {
  if (!costly_expr(k, k->st[p].val)) return false;
  sh_lir_stmt st[256];
  int n = sh_sched_stores(k, k->root, st, 256), readers = 0;
  if (n > 256) return false;
  for (int i = 0; i < n; i++) readers += sh_lir_uses_buf(k, k->st[st[i]].val, T);
  if (readers < 2) return false;
  for (int i = n - 1; i >= 0; i--) {
    if (!sh_lir_uses_buf(k, k->st[st[i]].val, T)) continue;
    sh_lir_buf O = k->st[st[i]].buf;
    sheaf_status saved = k->err;
    if (k->bufs[O].role == SH_LIR_OUT && !sh_sched_share(k, T, O)) return true;
    k->err = saved;
    return false; /* only T's last reader can take it */
  }
  return false;
}

/* Whether some load of T in e lacks var v in every index (the load's value
 * does not change with v). */
static bool load_lacks_var(const sh_lir_kernel *k, sh_lir_expr e, sh_lir_buf T, sh_lir_var v) {
  if (e < 0) return false;
  const sh_lir_enode *x = &k->ex[e];
  switch ((sh_lir_ekind)x->kind) {
  case SH_LIR_E_BIN: return load_lacks_var(k, x->a, T, v) || load_lacks_var(k, x->b, T, v);
  case SH_LIR_E_UN:
  case SH_LIR_E_CAST: return load_lacks_var(k, x->a, T, v);
  case SH_LIR_E_SELECT:
    return load_lacks_var(k, x->a, T, v) || load_lacks_var(k, x->b, T, v) || load_lacks_var(k, x->c, T, v);
  case SH_LIR_E_LOAD:
    if (x->a == T) {
      bool uses = false;
      for (int i = 0; i < x->n && !uses; i++) uses = sh_lir_uses_var(k, k->list[x->b + i], v);
      if (!uses) return true;
    }
    for (int i = 0; i < x->n; i++)
      if (load_lacks_var(k, k->list[x->b + i], T, v)) return true;
    return false;
  default: return false;
  }
}

/* Whether inlining T would evaluate it again for each value of a loop it
 * does not depend on, inside a reduction: `t13(n, i) +=! t11(n, r) *
 * W(r, i)` would compute t11 (a sigmoid, say) once per column i, and the
 * product would no longer be a GEMM the schedule recognises (its A operand
 * must be a buffer). Such a T stays a row nest of its own. */
static bool reread_by_reduction(const sh_lir_kernel *k, sh_lir_buf T) {
  sh_lir_stmt st[256];
  int n = sh_sched_stores(k, k->root, st, 256);
  if (n > 256) return true;
  for (int i = 0; i < n; i++) {
    const sh_lir_snode *s = &k->st[st[i]];
    if (s->combine == SH_LIR_COMBINE_NONE || !sh_lir_uses_buf(k, s->val, T)) continue;
    for (sh_lir_stmt p = s->parent; p >= 0; p = k->st[p].parent)
      if (k->st[p].kind == SH_LIR_S_LOOP && load_lacks_var(k, s->val, T, k->st[p].var)) return true;
  }
  return false;
}

static void inline_pointwise(sh_lir_kernel *k) {
  for (bool again = true; again && !k->err;) {
    again = false;
    for (int32_t b = 0; b < k->n_bufs; b++) {
      const sh_lir_bufinfo *bi = &k->bufs[b];
      if (bi->role != SH_LIR_TEMP || bi->inlined || sh_lir_find_store(k, b, 1) >= 0) continue;
      sh_lir_stmt p = sh_lir_find_store(k, b, 0);
      if (p < 0 || k->st[p].combine != SH_LIR_COMBINE_NONE || reread_by_reduction(k, b)) continue;
      if (share_costly(k, b, p) || !sh_sched_compute_inline(k, p)) again = true;
    }
  }
}

/* --------------------------------------------------------------- GEMM */

typedef struct gemm_match {
  sh_lir_stmt i, j, kl, U;
  sh_lir_buf B, C;
} gemm_match;

static bool is_var(const sh_lir_kernel *k, sh_lir_expr e, sh_lir_var v) {
  return k->ex[e].kind == SH_LIR_E_VAR && k->ex[e].a == v;
}

static bool match_gemm(const sh_lir_kernel *k, sh_lir_stmt top, gemm_match *g) {
  sh_lir_stmt st[64];
  int n = sh_sched_stores(k, top, st, 64);
  if (n > 2 || n < 1) return false;
  sh_lir_stmt U = st[n - 1];
  const sh_lir_snode *u = &k->st[U];
  const sh_lir_enode *val = &k->ex[u->val];
  if (u->combine != SH_LIR_COMBINE_ADD || u->nidx != 2 || val->kind != SH_LIR_E_BIN ||
      val->op != SH_LIR_OP_MUL || k->ex[val->a].kind != SH_LIR_E_LOAD || k->ex[val->b].kind != SH_LIR_E_LOAD)
    return false;
  const sh_lir_bufinfo *C = &k->bufs[u->buf];
  if (C->layout != SH_LIR_LAYOUT_DENSE || C->role == SH_LIR_LOCAL) return false;
  sh_lir_stmt kl = u->parent;
  if (kl < 0 || k->st[kl].kind != SH_LIR_S_LOOP || k->st[kl].body != U || u->next >= 0) return false;
  sh_lir_stmt j = k->st[kl].parent, i = j >= 0 ? k->st[j].parent : SH_LIR_NONE;
  if (i != top || k->st[j].kind != SH_LIR_S_LOOP || k->st[i].kind != SH_LIR_S_LOOP ||
      k->st[i].body != j || k->st[j].next >= 0)
    return false;
  sh_lir_var vi = k->st[i].var, vj = k->st[j].var, vk = k->st[kl].var;
  if (!is_var(k, k->list[u->idx], vi) || !is_var(k, k->list[u->idx + 1], vj)) return false;
  /* j's body: [C[i, j] = v0,] the k loop */
  for (sh_lir_stmt c = k->st[j].body; c >= 0; c = k->st[c].next) {
    if (c == kl) {
      if (k->st[c].next >= 0) return false;
      break;
    }
    if (n != 2 || c != st[0] || k->st[c].buf != u->buf) return false;
  }
  /* one operand B[k, j] (stride-1 in j), the other free of j */
  for (int side = 0; side < 2; side++) {
    const sh_lir_enode *b = &k->ex[side ? val->a : val->b], *a = &k->ex[side ? val->b : val->a];
    if (b->n != 2 || !is_var(k, k->list[b->b], vk) || !is_var(k, k->list[b->b + 1], vj)) continue;
    bool a_free = true;
    for (int d = 0; d < a->n; d++) a_free &= !sh_lir_uses_var(k, k->list[a->b + d], vj);
    if (!a_free || k->bufs[b->a].layout == SH_LIR_LAYOUT_RAGGED) continue;
    g->i = i;
    g->j = j;
    g->kl = kl;
    g->U = U;
    g->B = b->a;
    g->C = u->buf;
    return true;
  }
  return false;
}

static void tile_copy(sh_lir_kernel *k, int n, const sh_lir_stmt *loops, int w) {
  for (int p = 0; p < n; p++) {
    if (p == n - 1 && w > 1) sh_sched_vectorize(k, loops[p], w);
    else sh_sched_unroll(k, loops[p]);
  }
}

/* The guarded copy of a tile (after unswitch) accumulates in registers, so
 * its band needs no guard per row and column: a row past the end reads A's
 * last row instead (A's index clamped to min(row, M - 1); the row is never
 * written back), and a column past N reads the zero padding of B's packed
 * panel. Only the write-back keeps its guards. Each guard `if (c && ...)`
 * around an accumulation S into the tile's local loses the conjuncts it can
 * replace so; one left empty is removed. */
typedef struct row_clamp {
  sh_lir_expr row, lim; /* the first clamped row index (min(row, lim - 1)) and its bound */
  sh_lir_var v;         /* the tile's row variable in it */
} row_clamp;

/* e shares a variable with f. */
static bool shares_var(const sh_lir_kernel *k, sh_lir_expr e, sh_lir_expr f) {
  const sh_lir_enode *x = &k->ex[e];
  switch ((sh_lir_ekind)x->kind) {
  case SH_LIR_E_VAR: return sh_lir_uses_var(k, f, x->a);
  case SH_LIR_E_BIN: return shares_var(k, x->a, f) || shares_var(k, x->b, f);
  case SH_LIR_E_UN:
  case SH_LIR_E_CAST: return shares_var(k, x->a, f);
  case SH_LIR_E_SELECT: return shares_var(k, x->a, f) || shares_var(k, x->b, f) || shares_var(k, x->c, f);
  default: return false;
  }
}

/* With A packed (`pa`, a cache_read of A: filled at every point of the
 * tile loops' ranges, rows past the end clamped to the last), a guard
 * conjunct on the rows (one sharing no variable with B's index) goes
 * without any clamp: the band reads pa in bounds everywhere. */
static void unguard_band(sh_lir_kernel *k, sh_lir_buf local, sh_lir_buf B, bool packed, sh_lir_buf pa,
                         row_clamp *rc) {
  for (int nth = 0; !k->err; nth++) {
    sh_lir_stmt S = sh_lir_find_store(k, local, nth), G = S >= 0 ? k->st[S].parent : SH_LIR_NONE;
    if (S < 0) return;
    if (k->st[S].combine != SH_LIR_COMBINE_ADD || G < 0 || k->st[G].kind != SH_LIR_S_IF ||
        k->st[G].els >= 0 || k->st[G].body != S || k->st[S].next >= 0)
      continue;
    const sh_lir_enode val = k->ex[k->st[S].val];
    if (val.kind != SH_LIR_E_BIN || val.op != SH_LIR_OP_MUL) continue;
    sh_lir_expr side[2] = {val.a, val.b};
    int a_side = -1;
    for (int t = 0; t < 2; t++)
      if (k->ex[side[t]].kind == SH_LIR_E_LOAD && k->ex[side[t]].a != B) a_side = t;
    if (a_side < 0 || k->ex[side[1 - a_side]].kind != SH_LIR_E_LOAD || k->ex[side[1 - a_side]].a != B)
      continue;
    const sh_lir_enode A = k->ex[side[a_side]], Bl = k->ex[side[1 - a_side]];
    if (A.n > SH_LIR_MAX_RANK || k->bufs[A.a].layout != SH_LIR_LAYOUT_DENSE) continue;
    sh_lir_expr aidx[SH_LIR_MAX_RANK], conj[16], keep = SH_LIR_NONE;
    for (int d = 0; d < A.n; d++) aidx[d] = k->list[A.b + d];
    int nc = sh_lir_conjuncts(k, k->st[G].cond, conj, 16);
    if (nc > 16) continue;
    bool changed = false;
    for (int c = 0; c < nc; c++) {
      const sh_lir_enode x = k->ex[conj[c]];
      bool gone = false;
      if (x.kind == SH_LIR_E_BIN && x.op == SH_LIR_OP_LT) {
        if (packed && Bl.n == 2 && sh_lir_expr_eq(k, x.a, k->list[Bl.b + 1])) gone = true;
        if (!gone && pa >= 0 && A.a == pa && Bl.n == 2 && !shares_var(k, x.a, k->list[Bl.b]) &&
            !shares_var(k, x.a, k->list[Bl.b + 1])) {
          sh_lir_expr i0 = k->list[k->st[S].idx];
          if (rc && rc->row < 0 && k->ex[i0].kind == SH_LIR_E_VAR && sh_lir_uses_var(k, x.a, k->ex[i0].a)) {
            rc->row = x.a;
            rc->lim = x.b;
            rc->v = k->ex[i0].a;
          }
          gone = true;
        }
        for (int d = 0; d < A.n && !gone; d++)
          if (sh_lir_expr_eq(k, x.a, aidx[d])) {
            sh_lir_expr i0 = k->list[k->st[S].idx];
            if (rc && rc->row < 0 && k->ex[i0].kind == SH_LIR_E_VAR && sh_lir_uses_var(k, x.a, k->ex[i0].a)) {
              rc->row = x.a;
              rc->lim = x.b;
              rc->v = k->ex[i0].a;
            }
            aidx[d] = sh_lir_bin(k, SH_LIR_OP_MIN, x.a, sh_lir_sub(k, x.b, sh_lir_int(k, 1)));
            gone = true;
          }
      }
      if (gone) changed = true;
      else keep = keep < 0 ? conj[c] : sh_lir_bin(k, SH_LIR_OP_AND, keep, conj[c]);
    }
    if (!changed) continue;
    sh_lir_expr na = sh_lir_load(k, A.a, A.n, aidx);
    k->st[S].val = a_side == 0 ? sh_lir_bin(k, SH_LIR_OP_MUL, na, side[1]) : sh_lir_bin(k, SH_LIR_OP_MUL, side[0], na);
    if (keep >= 0) {
      k->st[G].cond = keep;
    } else {
      sh_lir_detach(k, S);
      sh_lir_replace(k, G, S);
    }
  }
}

/* One GEMM nest tiled: B packed (a weight), i split by mr·mb and mr, j by
 * nr and w, reordered to row blocks × column panels × tiles, the tile in
 * registers (cache_write), a pointwise consumer of C fused into its store
 * (`epilogue`), the tile's copies unrolled and vectorized. */
typedef struct gemm_tiled {
  sh_lir_stmt io, jo, iio;
  sh_sched_cache c;
  bool packed;
} gemm_tiled;

static sheaf_status tile_gemm(sh_lir_kernel *k, const gemm_match *g, int w, const sh_sched_opts *o, int64_t mr,
                              int64_t nr, int64_t mb, bool epilogue, gemm_tiled *t) {
  if (mr < 1 || mr > 64 || nr < 1 || nr > 256 || nr % w || mb < 1 || mb > 1024)
    return sh_sched_err(k, "default schedule: GEMM tile %lld x %lld (columns a multiple of %d), %lld "
                           "tiles per block", (long long)mr, (long long)nr, w, (long long)mb);
  const sh_lir_bufinfo *B = &k->bufs[g->B];
  bool packed = !o->no_pack && B->role == SH_LIR_IN && B->weight && B->layout == SH_LIR_LAYOUT_DENSE &&
                B->access == SH_LIR_ACCESS_DENSE;
  if (packed) packed = sh_sched_pack(k, g->B, nr) == SHEAF_OK;
  t->packed = packed;
  sh_lir_stmt i0, ii, ji, jv = SH_LIR_NONE, jl;
  sheaf_status st;
  if ((st = sh_sched_split(k, g->i, mr * mb, SH_SCHED_TAIL_GUARD, &t->io, &i0, NULL)) ||
      (st = sh_sched_split(k, i0, mr, SH_SCHED_TAIL_GUARD, &t->iio, &ii, NULL)) ||
      (st = sh_sched_split(k, g->j, nr, SH_SCHED_TAIL_GUARD, &t->jo, &ji, NULL)))
    return st;
  jl = ji;
  if (w > 1 && (st = sh_sched_split(k, ji, w, SH_SCHED_TAIL_GUARD, &jv, &jl, NULL))) return st;
  sh_lir_stmt order[6] = {t->io, t->jo, t->iio, ii, jv, jl};
  if (w == 1) order[4] = jl;
  if ((st = sh_sched_reorder(k, w > 1 ? 6 : 5, order))) return st;
  if ((st = sh_sched_cache_write(k, ii, &t->c))) return st;
  /* a pointwise consumer of C fuses into the tile's store */
  if (epilogue && k->bufs[g->C].role == SH_LIR_TEMP) {
    sh_lir_stmt all[4096];
    int n = sh_sched_stores(k, k->root, all, 4096);
    for (int s = 0; s < n && s < 4096; s++)
      if (k->st[all[s]].buf != g->C && k->st[all[s]].combine == SH_LIR_COMBINE_NONE &&
          sh_lir_uses_buf(k, k->st[all[s]].val, g->C) && !sh_sched_reverse_inline_of(k, all[s], g->C))
        break;
  }
  tile_copy(k, t->c.n, t->c.init, w);
  tile_copy(k, t->c.n, t->c.band, w);
  tile_copy(k, t->c.n, t->c.final, w);
  return k->err;
}

/* Software prefetch of a packed B panel (sh_sched_opts.prefetch): each
 * reduction loop that updates the register tile `local` from B starts
 * with a prefetch of B's panel row `dist` k steps ahead (one per 64-byte
 * line of the row: nr floats). A panel of 16 columns is 64 bytes a row, so
 * at K = 512 one panel is 32 KB, all of L1: without it every k waited for
 * L2 once the panel was evicted between tiles. Rows past K fall into the
 * next panel or past the buffer's end (a prefetch does not fault). */
#ifndef SH_SCHED_PREFETCH_DEFAULT /* 0: none by default (a build for before / after runs) */
#define SH_SCHED_PREFETCH_DEFAULT 64
#endif

/* The distance of a single GEMM's tile (a pair's: sched_gemm_pair). */
static int prefetch_dist(const sh_sched_opts *o, int w) {
  if (o->no_prefetch || o->prefetch < 0) return 0;
  if (o->prefetch > 0) return o->prefetch;
  return w > 1 ? SH_SCHED_PREFETCH_DEFAULT : 0;
}

/* The load of B in e, or NONE. */
static sh_lir_expr find_load(const sh_lir_kernel *k, sh_lir_expr e, sh_lir_buf B) {
  const sh_lir_enode *x = &k->ex[e];
  if (x->kind == SH_LIR_E_LOAD) return x->a == B ? e : SH_LIR_NONE;
  if (x->kind != SH_LIR_E_BIN) return SH_LIR_NONE;
  sh_lir_expr a = find_load(k, x->a, B);
  return a >= 0 ? a : find_load(k, x->b, B);
}

static void prefetch_panel(sh_lir_kernel *k, sh_lir_buf local, sh_lir_buf B, int dist) {
  const sh_lir_bufinfo *bi = &k->bufs[B];
  if (dist <= 0 || bi->layout != SH_LIR_LAYOUT_PANELS || bi->rank != 2) return;
  int lines = (int)((bi->panel * 4 + 63) / 64);
  if (lines > 8) lines = 8;
  for (int nth = 0; !k->err; nth++) {
    sh_lir_stmt S = sh_lir_find_store(k, local, nth);
    if (S < 0) return;
    if (k->st[S].combine != SH_LIR_COMBINE_ADD) continue;
    sh_lir_expr ld = find_load(k, k->st[S].val, B);
    if (ld < 0 || k->ex[ld].n != 2) continue;
    sh_lir_expr i0 = k->list[k->ex[ld].b], i1 = k->list[k->ex[ld].b + 1];
    /* up to the reduction loop: the first serial loop indexing B's row */
    sh_lir_var inner[SH_SCHED_MAX_BAND * 2];
    sh_lir_expr zero[SH_SCHED_MAX_BAND * 2];
    int ni = 0;
    sh_lir_stmt L = k->st[S].parent;
    for (; L >= 0 && L != k->root; L = k->st[L].parent) {
      if (k->st[L].kind != SH_LIR_S_LOOP) continue;
      if (k->st[L].annot == SH_LIR_SERIAL && sh_lir_uses_var(k, i0, k->st[L].var)) break;
      if (ni == (int)SH_ARRAY_LEN(inner)) break;
      inner[ni] = k->st[L].var;
      zero[ni++] = sh_lir_int(k, 0);
    }
    if (L < 0 || L == k->root || k->st[L].kind != SH_LIR_S_LOOP || k->st[L].annot != SH_LIR_SERIAL) continue;
    bool done = false; /* the loop's leading prefetches: one copy per B */
    for (sh_lir_stmt c = k->st[L].body; c >= 0 && k->st[c].kind == SH_LIR_S_PREFETCH; c = k->st[c].next)
      done |= k->st[c].buf == B;
    if (done) continue;
    sh_lir_var kv = k->st[L].var;
    inner[ni] = kv;
    zero[ni] = sh_lir_add(k, sh_lir_v(k, kv), sh_lir_int(k, dist));
    sh_lir_expr row = sh_lir_simplify(k, sh_lir_subst(k, i0, ni + 1, inner, zero));
    sh_lir_expr col = sh_lir_simplify(k, sh_lir_subst(k, i1, ni, inner, zero));
    sh_lir_stmt first = k->st[L].body;
    for (int l = 0; l < lines && !k->err; l++) {
      sh_lir_expr idx[2] = {row, sh_lir_add(k, col, sh_lir_int(k, 16 * l))};
      sh_lir_stmt p = sh_lir_new_stmt(k, SH_LIR_S_PREFETCH);
      int32_t il = sh_lir_new_list(k, 2, idx);
      if (p < 0 || il < 0) return;
      k->st[p].buf = B;
      k->st[p].idx = il;
      k->st[p].nidx = 2;
      if (first >= 0) sh_lir_insert_before(k, first, p);
      else sh_lir_append(k, L, p);
    }
  }
}

#ifndef SH_SCHED_REM_DEFAULT /* 0: no remainder tile by default (a build for before / after runs) */
#define SH_SCHED_REM_DEFAULT 1
#endif

/* Rows of the remainder tile (sh_sched_opts.rem_rows): 0 when none. */
static int64_t rem_rows(const sh_sched_opts *o, int64_t mr) {
  int64_t r = o->rem_rows < 0 ? 0 : o->rem_rows > 0 ? o->rem_rows : SH_SCHED_REM_DEFAULT ? mr - mr / 3 : 0;
  return r >= 1 && r < mr ? r : 0;
}

/* e reads one of the n locals at a first index that uses v. */
static bool row_access(const sh_lir_kernel *k, sh_lir_expr e, int n, const sh_lir_buf *loc, sh_lir_var v) {
  const sh_lir_enode *x = &k->ex[e];
  switch ((sh_lir_ekind)x->kind) {
  case SH_LIR_E_LOAD:
    for (int i = 0; i < n; i++)
      if (x->a == loc[i] && x->n > 0 && sh_lir_uses_var(k, k->list[x->b], v)) return true;
    return false;
  case SH_LIR_E_BIN: return row_access(k, x->a, n, loc, v) || row_access(k, x->b, n, loc, v);
  case SH_LIR_E_UN:
  case SH_LIR_E_CAST: return row_access(k, x->a, n, loc, v);
  case SH_LIR_E_SELECT:
    return row_access(k, x->a, n, loc, v) || row_access(k, x->b, n, loc, v) || row_access(k, x->c, n, loc, v);
  default: return false;
  }
}

/* Some statement under s stores or reads one of the locals at a first
 * index (the tile's row) that uses v. */
static bool row_loop_of(const sh_lir_kernel *k, sh_lir_stmt s, int n, const sh_lir_buf *loc, sh_lir_var v) {
  for (sh_lir_stmt c = k->st[s].body; c >= 0; c = k->st[c].next) {
    const sh_lir_snode *x = &k->st[c];
    if (x->kind == SH_LIR_S_STORE) {
      for (int i = 0; i < n; i++)
        if (x->buf == loc[i] && x->nidx > 0 && sh_lir_uses_var(k, k->list[x->idx], v)) return true;
      if (row_access(k, x->val, n, loc, v)) return true;
    }
    if (row_loop_of(k, c, n, loc, v)) return true;
    if (x->kind == SH_LIR_S_IF && x->els >= 0 && row_loop_of(k, x->els, n, loc, v)) return true;
  }
  return false;
}

/* The tile's row loops under s (those over the locals' first dimension,
 * extent mr) run r rows. */
static void shorten_rows(sh_lir_kernel *k, sh_lir_stmt s, int n, const sh_lir_buf *loc, int64_t mr, int64_t r) {
  for (sh_lir_stmt c = k->st[s].body; c >= 0; c = k->st[c].next) {
    int64_t e;
    if (k->st[c].kind == SH_LIR_S_LOOP && sh_lir_is_const(k, k->st[c].ext, &e) && e == mr &&
        row_loop_of(k, c, n, loc, k->st[c].var)) {
      sh_lir_expr re = sh_lir_int(k, r);
      k->st[c].ext = re;
    }
    shorten_rows(k, c, n, loc, mr, r);
    if (k->st[c].kind == SH_LIR_S_IF && k->st[c].els >= 0) shorten_rows(k, k->st[c].els, n, loc, mr, r);
  }
}

/* The remainder tiles: after unswitch the slow copy of the tile (the else
 * of `fast`'s if) serves every partial tile at the cost of a whole one (its
 * band accumulates all mr rows, the missing ones reading A's last row).
 * For each r of rs (ascending), when at most r rows are left (rc: the row
 * index at the tile's row r is past the end), a copy of it whose row loops
 * run r rows takes it: `if (M <= row + r1) tile(r1) else if (M <= row + r2)
 * tile(r2) ... else tile(mr)`. With every r of 1 .. mr - 1 (the default at
 * mr <= 8) a partial tile runs exactly its rows: M = 1 is one 1-row tile
 * per column panel, M = 64 at AVX2 ten 6-row tiles and one of 4 rows. */
static void remainder_tiles(sh_lir_kernel *k, sh_lir_stmt fast, int n, const sh_lir_buf *loc, int64_t mr,
                            const int64_t *rs, int nrs, const row_clamp *rc) {
  if (nrs < 1 || rc->row < 0 || k->err) return;
  sh_lir_stmt top = k->st[fast].parent;
  if (top < 0 || k->st[top].kind != SH_LIR_S_IF || k->st[top].els < 0) return;
  sh_lir_stmt slow = k->st[k->st[top].els].body;
  if (slow >= 0 && k->st[slow].kind == SH_LIR_S_IF && k->st[slow].els < 0) slow = k->st[slow].body;
  if (slow < 0 || k->st[slow].next >= 0) return;
  for (int i = 0; i < nrs && !k->err; i++) {
    int64_t r = rs[i];
    if (r < 1 || r >= mr) continue;
    sh_lir_stmt rem = sh_lir_clone(k, slow, 0, NULL, NULL, "_r");
    if (rem < 0) return;
    shorten_rows(k, rem, n, loc, mr, r);
    sh_lir_expr at_r = sh_lir_subst(k, rc->row, 1, &rc->v, (sh_lir_expr[]){sh_lir_int(k, r)});
    sh_lir_stmt w = sh_sched_wrap_if(k, slow, sh_lir_simplify(k, sh_lir_bin(k, SH_LIR_OP_LE, rc->lim, at_r)));
    if (w < 0) return;
    sh_lir_detach(k, slow);
    sh_lir_append(k, w, rem);
    sh_lir_stmt els = sh_lir_else(k, w);
    if (els < 0) return;
    sh_lir_append(k, els, slow);
  }
}

/* The remainder tiles' rows (sh_sched_opts.rem_rows): r > 0 one copy of r
 * rows; 0 (the default) every r of 1 .. mr - 1 when mr <= 8 (else 1, 2, 3,
 * 4, 6 and mr - mr / 3: fewer copies to compile); -1 none. */
static int rem_list(const sh_sched_opts *o, int64_t mr, int64_t *rs) {
  if (o->rem_rows > 0 || !SH_SCHED_REM_DEFAULT) {
    int64_t r = rem_rows(o, mr);
    rs[0] = r;
    return r > 0;
  }
  if (o->rem_rows < 0) return 0;
  int n = 0;
  if (mr <= 8) {
    for (int64_t r = 1; r < mr; r++) rs[n++] = r;
    return n;
  }
  static const int64_t few[] = {1, 2, 3, 4, 6};
  for (int i = 0; i < 5; i++)
    if (few[i] < mr) rs[n++] = few[i];
  if (mr - mr / 3 > 6) rs[n++] = mr - mr / 3;
  return n;
}

#ifndef SH_SCHED_PACK_A_DEFAULT /* 1: A packed per row block by default */
#define SH_SCHED_PACK_A_DEFAULT 0
#endif

/* A packed per row block (sh_sched_opts.pack_a; cache_read at the row
 * block loop): the tile's rows interleaved per k step, [row block, tile,
 * k, row], so a tile's mr broadcasts per k come from one contiguous
 * stream, not mr rows a row's length apart. Copied once per row block and
 * read by every column panel's tiles. Not with K blocks (the k loop's
 * extent then depends on the block). Returns the packed buffer, or NONE
 * (the kernel unchanged). */
static sh_lir_buf pack_a(sh_lir_kernel *k, const gemm_match *g, const gemm_tiled *t, int w,
                         const sh_sched_opts *o) {
  (void)w;
  bool on = o->pack_a > 0 || (o->pack_a == 0 && SH_SCHED_PACK_A_DEFAULT);
  if (!on || o->kc > 0 || k->err) return SH_LIR_NONE;
  const sh_lir_enode *v = &k->ex[k->st[g->U].val];
  sh_lir_expr a = k->ex[v->a].kind == SH_LIR_E_LOAD && k->ex[v->a].a == g->B ? v->b : v->a;
  sh_lir_stmt loops[3] = {t->iio, g->kl, t->c.band[0]};
  sh_sched_read rd;
  if (sh_sched_cache_read(k, k->ex[a].a, t->io, 3, loops, &rd)) return SH_LIR_NONE;
  sh_sched_unroll(k, rd.loops[2]); /* the tile's rows: one k step's copy in a row */
  return rd.buf;
}

#ifndef SH_SCHED_PREFETCH_C_DEFAULT /* 1: on by default (a build for before / after runs) */
#define SH_SCHED_PREFETCH_C_DEFAULT 0
#endif

/* The tile's output lines fetched for writing before its reduction
 * (sh_sched_opts.prefetch_c): the write-back's target at each of the
 * tile's rows, one prefetch per 64-byte line of its nr columns, at the top
 * of the tile's alloc — after unswitch, of the whole tile's copy only (the
 * partial tiles' copies stay as they were: less C to compile). A knob,
 * off by default: paired, it gained 1.02-1.05x at M = 1600 with outputs
 * 16-byte aligned (each tile row's 64 bytes on two lines), 0.99-1.03x
 * with 64-byte aligned ones (docs/CODEGEN.md, "The default schedule"). */
static void prefetch_out(sh_lir_kernel *k, const sh_sched_cache *c, int64_t mr, int64_t nr) {
  sh_lir_stmt st[8];
  int ns = sh_sched_stores(k, c->final[0], st, 8);
  sh_lir_stmt S = SH_LIR_NONE;
  for (int i = 0; i < ns && i < 8; i++)
    if (k->bufs[k->st[st[i]].buf].role == SH_LIR_OUT) S = st[i];
  if (S < 0 || c->n < 2 || k->st[S].nidx < 1 || mr > 64) return;
  sh_lir_var v[SH_SCHED_MAX_BAND];
  sh_lir_expr z[SH_SCHED_MAX_BAND];
  for (int p = 0; p < c->n; p++) v[p] = k->st[c->final[p]].var, z[p] = sh_lir_int(k, 0);
  int nidx = k->st[S].nidx, lines = (int)((nr * 4 + 63) / 64);
  sh_lir_stmt first = k->st[c->alloc].body;
  for (int64_t r = 0; r < mr && !k->err; r++) {
    z[0] = sh_lir_int(k, r);
    for (int l = 0; l < lines && l < 8; l++) {
      sh_lir_expr idx[SH_LIR_MAX_RANK];
      for (int d = 0; d < nidx; d++) {
        idx[d] = sh_lir_subst(k, k->list[k->st[S].idx + d], c->n, v, z);
        if (d == nidx - 1) idx[d] = sh_lir_add(k, idx[d], sh_lir_int(k, 16 * l));
        idx[d] = sh_lir_simplify(k, idx[d]);
      }
      sh_lir_stmt p = sh_lir_new_stmt(k, SH_LIR_S_PREFETCH);
      int32_t il = sh_lir_new_list(k, nidx, idx);
      if (p < 0 || il < 0) return;
      k->st[p].buf = k->st[S].buf, k->st[p].idx = il, k->st[p].nidx = nidx;
      if (first >= 0) sh_lir_insert_before(k, first, p);
      else sh_lir_append(k, c->alloc, p);
    }
  }
}

#ifndef SH_SCHED_ROW_BLOCK_DEFAULT /* rows per block of a row-fused GEMM (sh_sched_opts.row_block) */
#define SH_SCHED_ROW_BLOCK_DEFAULT 12
#endif

/* *cons (NONE: none): a row nest reading C only, computed per row block
 * (sched_rowblock.c; set to NONE when it was). */
static sheaf_status sched_gemm(sh_lir_kernel *k, const gemm_match *g, int w, const sh_sched_opts *o,
                               sh_lir_stmt *cons) {
  int64_t mr = o->mr ? o->mr : w == 16 ? 12 : w == 8 ? 6 : 4;
  int64_t nr = o->nr ? o->nr : w == 16 ? 32 : w == 8 ? 16 : 4, mb = o->row_tiles ? o->row_tiles : 16;
  int64_t rb = o->row_block ? o->row_block : SH_SCHED_ROW_BLOCK_DEFAULT;
  if (*cons >= 0 && rb > 0) mb = (rb + mr - 1) / mr; /* the row block: whole tiles */
  gemm_tiled t;
  sheaf_status st;
  if ((st = tile_gemm(k, g, w, o, mr, nr, mb, true, &t))) return st;
  /* K in blocks of kc steps (sh_sched_opts.kc; none by default: on this
   * project's Zen 4 host blocking never beat the unblocked tile, at M = 64
   * and 1600, K = 256 .. 4096, kc = 128 .. 384: docs/CODEGEN.md). The block
   * loop goes around the row block's tiles, inside a parallel task, so the
   * partial sums a later block adds back are still in cache. */
  if (o->kc > 0 && sh_sched_kblock(k, &t.c, g->kl, t.iio, o->kc) && k->err) return k->err; /* refused: unblocked */
  sh_lir_buf pa = pack_a(k, g, &t, w, o);
  if (sh_sched_unswitch(k, t.c.alloc) == SHEAF_OK) {
    row_clamp rc = {SH_LIR_NONE, SH_LIR_NONE, SH_LIR_NONE};
    unguard_band(k, t.c.local, g->B, t.packed, pa, &rc);
    int64_t rs[16];
    remainder_tiles(k, t.c.alloc, 1, &t.c.local, mr, rs, rem_list(o, mr, rs), &rc);
  }
  /* the whole tile's copy (t.c.alloc after unswitch; partial tiles are one
   * column panel's last row block or column) */
  if (o->prefetch_c > 0 || (o->prefetch_c == 0 && SH_SCHED_PREFETCH_C_DEFAULT && w > 1))
    prefetch_out(k, &t.c, mr, nr);
  sh_lir_stmt f;
  if (*cons >= 0 && rb > 0 && sh_sched_row_fuse(k, g->C, t.io, *cons, mr * mb)) *cons = SH_LIR_NONE;
  else if (pa >= 0) sh_sched_parallel(k, t.io); /* the copy sits between the row block and its panels */
  else if (!sh_sched_fuse(k, t.io, t.jo, &f)) sh_sched_parallel(k, f);
  prefetch_panel(k, t.c.local, g->B, prefetch_dist(o, w));
  return k->err;
}

/* ---------------------------------------------------- two GEMMs, one A */

/* The operand of g's product that is not B. */
static sh_lir_expr gemm_a(const sh_lir_kernel *k, const gemm_match *g) {
  const sh_lir_enode *v = &k->ex[k->st[g->U].val];
  return k->ex[v->a].kind == SH_LIR_E_LOAD && k->ex[v->a].a == g->B ? v->b : v->a;
}

/* Two GEMM nests over the same rows of the same A (`g(n, f) +=! x(n, d) *
 * Wg(d, f); h(n, f) +=! x(n, d) * Wh(d, f)`: the gated unit) can share one
 * register tile: same extents, A read at the same indices, neither reading
 * what the other writes. */
static bool gemm_pair(sh_lir_kernel *k, const gemm_match *a, const gemm_match *b) {
  if (a->C == b->C || a->B == b->B) return false;
  sh_lir_stmt la[3] = {a->i, a->j, a->kl}, lb[3] = {b->i, b->j, b->kl};
  sh_lir_var vb[3];
  sh_lir_expr va[3];
  for (int d = 0; d < 3; d++) {
    if (!sh_lir_expr_eq(k, k->st[la[d]].ext, k->st[lb[d]].ext)) return false;
    vb[d] = k->st[lb[d]].var;
    va[d] = sh_lir_v(k, k->st[la[d]].var);
  }
  sh_lir_expr xa = gemm_a(k, a), xb = sh_lir_subst(k, gemm_a(k, b), 3, vb, va);
  if (!sh_lir_expr_eq(k, xa, xb) || k->bufs[a->C].layout != SH_LIR_LAYOUT_DENSE) return false;
  sh_lir_stmt sa[4], sb[4];
  int na = sh_sched_stores(k, a->i, sa, 4), nb = sh_sched_stores(k, b->i, sb, 4);
  for (int s = 0; s < na && s < 4; s++)
    if (sh_lir_uses_buf(k, k->st[sa[s]].val, b->C)) return false;
  for (int s = 0; s < nb && s < 4; s++)
    if (sh_lir_uses_buf(k, k->st[sb[s]].val, a->C)) return false;
  return true;
}

/* The loops of a band copy, as variables / expressions. */
static void band_vars(sh_lir_kernel *k, int n, const sh_lir_stmt *loops, sh_lir_var *v, sh_lir_expr *e) {
  for (int p = 0; p < n; p++) {
    if (v) v[p] = k->st[loops[p]].var;
    if (e) e[p] = sh_lir_v(k, k->st[loops[p]].var);
  }
}

/* Moves the statements of `from`'s body (the innermost loop of one of t's
 * band copies) into `to` (the same copy of s's tile), t's variables
 * replaced by s's. */
static void move_body(sh_lir_kernel *k, sh_lir_stmt from, sh_lir_stmt to, int n, const sh_lir_var *vars,
                      const sh_lir_expr *repl) {
  for (sh_lir_stmt c = k->st[from].body; c >= 0;) {
    sh_lir_stmt next = k->st[c].next;
    sh_lir_detach(k, c);
    sh_lir_subst_stmt(k, c, n, vars, repl);
    sh_lir_append(k, to, c);
    c = next;
  }
}

/* e with every load of buffer T at indices idx replaced by `to`; *left
 * counts loads of T at other indices. */
static sh_lir_expr swap_loads(sh_lir_kernel *k, sh_lir_expr e, sh_lir_buf T, int n, const int32_t *idx,
                              sh_lir_expr to, int *left) {
  const sh_lir_enode x = k->ex[e];
  switch ((sh_lir_ekind)x.kind) {
  case SH_LIR_E_LOAD: {
    if (x.a != T) return e;
    bool same = x.n == n;
    for (int d = 0; same && d < n; d++) same = sh_lir_expr_eq(k, k->list[x.b + d], k->list[idx[0] + d]);
    if (same) return to;
    (*left)++;
    return e;
  }
  case SH_LIR_E_BIN: {
    sh_lir_expr a = swap_loads(k, x.a, T, n, idx, to, left), b = swap_loads(k, x.b, T, n, idx, to, left);
    return a == x.a && b == x.b ? e : sh_lir_bin(k, (sh_lir_op)x.op, a, b);
  }
  case SH_LIR_E_UN: {
    sh_lir_expr a = swap_loads(k, x.a, T, n, idx, to, left);
    return a == x.a ? e : sh_lir_un(k, (sh_lir_fn)x.op, a);
  }
  case SH_LIR_E_SELECT: {
    sh_lir_expr a = swap_loads(k, x.a, T, n, idx, to, left), b = swap_loads(k, x.b, T, n, idx, to, left),
                c = swap_loads(k, x.c, T, n, idx, to, left);
    return a == x.a && b == x.b && c == x.c ? e : sh_lir_select(k, a, b, c);
  }
  default: return e;
  }
}

/* The one store under s (through ifs), or NONE. */
static sh_lir_stmt sole_store(const sh_lir_kernel *k, sh_lir_stmt s) {
  sh_lir_stmt st[2];
  return sh_sched_stores(k, s, st, 2) == 1 ? st[0] : SH_LIR_NONE;
}

/* Two GEMMs over one A in one register tile: each tiled as one (mr rows:
 * half the single tile's, so both tiles fit the registers), then t's tile
 * merged into s's (one k loop updating both, A's element loaded once for
 * both products), t's nest removed. When the only reader of s's result (a
 * temporary) is t's fused epilogue, at the same element, it reads s's
 * register instead and s's result is never stored (the gated unit's g). */
static sheaf_status sched_gemm_pair(sh_lir_kernel *k, const gemm_match *ga, const gemm_match *gb, int w,
                                    const sh_sched_opts *o) {
  int64_t mr = o->mr ? o->mr : w == 16 ? 6 : w == 8 ? 3 : 2;
  int64_t nr = o->nr ? o->nr : w == 16 ? 32 : w == 8 ? 16 : 4, mb = o->row_tiles ? o->row_tiles : 32;
  gemm_tiled s, t;
  sheaf_status st;
  if ((st = tile_gemm(k, ga, w, o, mr, nr, mb, false, &s)) || (st = tile_gemm(k, gb, w, o, mr, nr, mb, true, &t)))
    return st;
  int n = s.c.n;
  if (t.c.n != n || k->bufs[s.c.local].rank != k->bufs[t.c.local].rank)
    return sh_lir_fail(k, SHEAF_ERR_INVALID_ARG, "kernel %s: GEMM pair: tiles of different shapes", k->name);
  /* t's variables -> s's: the outer loops, the reduction loop, each copy's band */
  sh_lir_var tv[3 + 3 * SH_SCHED_MAX_BAND];
  sh_lir_expr sv[3 + 3 * SH_SCHED_MAX_BAND];
  sh_lir_stmt tl[3] = {t.io, t.jo, t.iio}, sl[3] = {s.io, s.jo, s.iio};
  band_vars(k, 3, tl, tv, NULL);
  band_vars(k, 3, sl, NULL, sv);
  int nv = 3;
  const sh_lir_stmt *tc[3] = {t.c.init, t.c.band, t.c.final}, *sc[3] = {s.c.init, s.c.band, s.c.final};
  for (int c = 0; c < 3; c++) {
    band_vars(k, n, tc[c], tv + nv, NULL);
    band_vars(k, n, sc[c], NULL, sv + nv);
    nv += n;
  }
  tv[nv] = k->st[gb->kl].var;
  sv[nv++] = sh_lir_v(k, k->st[ga->kl].var);
  for (int c = 0; c < 3; c++) move_body(k, tc[c][n - 1], sc[c][n - 1], nv, tv, sv);
  /* t's local lives in an alloc around s's tile */
  sh_lir_stmt ta = t.c.alloc, sa = s.c.alloc;
  sh_lir_detach(k, ta);
  for (sh_lir_stmt c = k->st[ta].body; c >= 0;) {
    sh_lir_stmt next = k->st[c].next;
    sh_lir_detach(k, c);
    c = next;
  }
  for (sh_lir_stmt c = k->st[sa].body; c >= 0;) {
    sh_lir_stmt next = k->st[c].next;
    sh_lir_detach(k, c);
    sh_lir_append(k, ta, c);
    c = next;
  }
  sh_lir_append(k, sa, ta);
  sh_lir_detach(k, t.io);
  /* s's result read only by t's epilogue, at the element s's tile stores:
   * from the register */
  sh_lir_buf C = ga->C;
  sh_lir_stmt fs = SH_LIR_NONE, ft = SH_LIR_NONE;
  for (sh_lir_stmt c = k->st[s.c.final[n - 1]].body; c >= 0; c = k->st[c].next) {
    sh_lir_stmt x = sole_store(k, c);
    if (x >= 0 && k->st[x].buf == C) fs = x;
    else ft = x;
  }
  if (k->bufs[C].role == SH_LIR_TEMP && fs >= 0 && ft >= 0 && sh_lir_body_len(k, s.c.final[n - 1]) == 2) {
    sh_lir_stmt all[4096];
    int na = sh_sched_stores(k, k->root, all, 4096), readers = 0;
    for (int i = 0; i < na && i < 4096; i++) readers += sh_lir_uses_buf(k, k->st[all[i]].val, C);
    int left = 0;
    sh_lir_expr v = swap_loads(k, k->st[ft].val, C, k->st[fs].nidx, &k->st[fs].idx, k->st[fs].val, &left);
    if (na <= 4096 && readers == 1 && left == 0 && sh_lir_uses_buf(k, k->st[ft].val, C)) {
      k->st[ft].val = v;
      sh_lir_stmt top = fs;
      while (k->st[top].parent != s.c.final[n - 1]) top = k->st[top].parent;
      sh_lir_detach(k, top);
      k->bufs[C].inlined = true;
    }
  }
  if (sh_sched_unswitch(k, ta) == SHEAF_OK) {
    row_clamp rc = {SH_LIR_NONE, SH_LIR_NONE, SH_LIR_NONE};
    unguard_band(k, s.c.local, ga->B, s.packed, SH_LIR_NONE, &rc);
    unguard_band(k, t.c.local, gb->B, t.packed, SH_LIR_NONE, NULL);
    sh_lir_buf loc[2] = {s.c.local, t.c.local};
    /* only when asked: its copy (two tiles' write-backs, the epilogue's
     * sigmoid and tanh) doubled the gated unit's compile time (0.59 -> 1.2 s
     * of cc CPU) for at most one 3-row tile per 32 */
    int64_t r1 = o->rem_rows > 0 ? rem_rows(o, mr) : 0;
    remainder_tiles(k, ta, 2, loc, mr, &r1, r1 > 0, &rc);
  }
  sh_lir_stmt f;
  if (!sh_sched_fuse(k, s.io, s.jo, &f)) sh_sched_parallel(k, f);
  /* only when asked: two panels prefetched per k measured 0.89-1.04x the
   * pair without (gated unit, N = 64 and 1600, paired; docs/CODEGEN.md) */
  int pf = o->prefetch > 0 && !o->no_prefetch ? o->prefetch : 0;
  prefetch_panel(k, s.c.local, ga->B, pf);
  prefetch_panel(k, t.c.local, gb->B, pf);
  return k->err;
}

/* --------------------------------------------------------------- rows */

/* Every access by v inside loop L is stride-1 in v (or free of it), and
 * every store is vectorizable. */
static bool contiguous_expr(sh_lir_kernel *k, sh_lir_expr e, sh_lir_var v) {
  const sh_lir_enode x = k->ex[e];
  switch ((sh_lir_ekind)x.kind) {
  case SH_LIR_E_LOAD: {
    int64_t coef;
    for (int d = 0; d + 1 < x.n; d++)
      if (sh_lir_uses_var(k, k->list[x.b + d], v)) return false;
    sh_lir_expr last = k->list[x.b + x.n - 1];
    return !sh_lir_uses_var(k, last, v) || (sh_lir_affine(k, last, v, &coef, NULL) && coef == 1);
  }
  case SH_LIR_E_BIN: return contiguous_expr(k, x.a, v) && contiguous_expr(k, x.b, v);
  case SH_LIR_E_UN: return contiguous_expr(k, x.a, v);
  case SH_LIR_E_CAST: { /* float(v + ...): the lanes' indices, converted at once */
    int64_t coef;
    return !sh_lir_uses_var(k, x.a, v) || (sh_lir_affine(k, x.a, v, &coef, NULL) && coef == 1);
  }
  case SH_LIR_E_SELECT:
    return contiguous_expr(k, x.a, v) && contiguous_expr(k, x.b, v) && contiguous_expr(k, x.c, v);
  default: return true;
  }
}

/* The U vector accumulators of an rfactor over [U, W] are combined lane by
 * lane into the first (U - 1 vector operations) before the one horizontal
 * reduction, rather than each reduced horizontally. */
static void combine_partials(sh_lir_kernel *k, const sh_sched_cache *c, int w) {
  int64_t U;
  if (c->n != 2 || !sh_lir_is_const(k, k->st[c->final[0]].ext, &U) || U < 2) return;
  sh_lir_stmt S = k->st[c->final[1]].body;
  if (S < 0 || k->st[S].kind != SH_LIR_S_STORE || k->st[S].next >= 0) return;
  sh_lir_combine op = (sh_lir_combine)k->st[S].combine;
  sh_lir_stmt lu = sh_lir_new_stmt(k, SH_LIR_S_LOOP), ll = sh_lir_new_stmt(k, SH_LIR_S_LOOP);
  if (lu < 0 || ll < 0) return;
  sh_lir_var vu = sh_lir_new_var(k, "u_cmb", lu), vl = sh_lir_new_var(k, "l_cmb", ll);
  if (vu < 0 || vl < 0) return;
  k->st[lu].var = vu, k->st[lu].ext = sh_lir_int(k, U - 1);
  k->st[ll].var = vl, k->st[ll].ext = sh_lir_int(k, w > 1 ? w : 1);
  int64_t W;
  if (!sh_lir_is_const(k, k->st[c->final[1]].ext, &W) || W != (w > 1 ? w : 1)) return;
  sh_lir_expr i0[2] = {sh_lir_int(k, 0), sh_lir_v(k, vl)};
  sh_lir_expr iu[2] = {sh_lir_add(k, sh_lir_v(k, vu), sh_lir_int(k, 1)), sh_lir_v(k, vl)};
  sh_lir_stmt st = sh_lir_new_stmt(k, SH_LIR_S_STORE);
  if (st < 0) return;
  k->st[st].buf = c->local;
  k->st[st].idx = sh_lir_new_list(k, 2, i0);
  k->st[st].nidx = 2;
  k->st[st].val = sh_lir_load(k, c->local, 2, iu);
  k->st[st].combine = (uint8_t)op;
  sh_lir_append(k, ll, st);
  sh_lir_append(k, lu, ll);
  sh_lir_insert_before(k, c->final[0], lu);
  k->st[c->final[0]].ext = sh_lir_int(k, 1);
  sh_sched_unroll(k, lu);
  if (w > 1) sh_sched_vectorize(k, ll, w);
}

/* A row loop of a reduction whose extent is not a constant (a ragged
 * row's whole vectors) goes inside `if (0 < extent)`: the accumulators'
 * set-up and their horizontal reduction after it are skipped with it when
 * the row has none (a row of 25 has no block of 4 vectors). */
static void skip_empty(sh_lir_kernel *k, sh_lir_stmt L) {
  int64_t ext;
  if (!sh_lir_is_const(k, k->st[L].ext, &ext))
    sh_sched_wrap_if(k, L, sh_lir_bin(k, SH_LIR_OP_LT, sh_lir_int(k, 0), k->st[L].ext));
}

static void vectorize_loop(sh_lir_kernel *k, sh_lir_stmt L, int w, int unroll) {
  sh_lir_var v = k->st[L].var;
  sh_lir_stmt st[64];
  int n = sh_sched_stores(k, L, st, 64), nred = 0;
  if (n < 1 || n > 64) return;
  bool any_contig = false;
  for (int i = 0; i < n; i++) {
    const sh_lir_snode *x = &k->st[st[i]];
    if (!sh_sched_store_vectorizable(k, st[i], v) || !contiguous_expr(k, x->val, v)) return;
    bool uses = false;
    for (int d = 0; d < x->nidx; d++) uses |= sh_lir_uses_var(k, k->list[x->idx + d], v);
    if (!uses) nred++;
    any_contig |= uses || sh_lir_uses_var(k, x->val, v);
  }
  int64_t ext;
  if (!any_contig || (sh_lir_is_const(k, k->st[L].ext, &ext) && ext < w)) return;
  int64_t U = unroll > 0 ? unroll : 4;
  sh_lir_stmt lo, li, lv, ll, lt = SH_LIR_NONE;
  if (sh_sched_split(k, L, w * U, SH_SCHED_TAIL_PEEL, &lo, &li, &lt) ||
      sh_sched_split(k, li, w, SH_SCHED_TAIL_GUARD, &lv, &ll, NULL))
    return;
  if (nred) skip_empty(k, lo);
  for (int r = 0; r < nred; r++) {
    sh_sched_cache c;
    if (sh_sched_rfactor(k, lv, SH_LIR_NONE, &c)) break;
    tile_copy(k, c.n, c.init, w);
    combine_partials(k, &c, w);
    tile_copy(k, c.n, c.final, w);
  }
  sh_sched_unroll(k, lv);
  sh_sched_vectorize(k, ll, w);
  /* the rest (< U·W: most of a short ragged row) by whole vectors too;
   * only the last < W elements stay scalar */
  if (U > 1 && lt >= 0) vectorize_loop(k, lt, w, 1);
}

static void innermost_loops(const sh_lir_kernel *k, sh_lir_stmt s, sh_lir_stmt *out, int *n, int cap) {
  const sh_lir_snode *x = &k->st[s];
  if (x->kind == SH_LIR_S_LOOP && !sh_sched_contains_loop(k, s)) {
    if (*n < cap) out[(*n)++] = s;
    return;
  }
  for (sh_lir_stmt c = x->body; c >= 0; c = k->st[c].next) innermost_loops(k, c, out, n, cap);
  if (x->kind == SH_LIR_S_IF && x->els >= 0) innermost_loops(k, x->els, out, n, cap);
}

static bool has_load(const sh_lir_kernel *k, sh_lir_expr e) {
  const sh_lir_enode *x = &k->ex[e];
  if (x->kind == SH_LIR_E_LOAD) return true;
  if (x->kind == SH_LIR_E_BIN) return has_load(k, x->a) || has_load(k, x->b);
  return false;
}

/* Some loop below s has an extent read from memory (a ragged length). */
static bool ragged_extents(const sh_lir_kernel *k, sh_lir_stmt s) {
  for (sh_lir_stmt c = k->st[s].body; c >= 0; c = k->st[c].next) {
    if (k->st[c].kind == SH_LIR_S_LOOP && has_load(k, k->st[c].ext)) return true;
    if (ragged_extents(k, c)) return true;
  }
  return false;
}

/* D's body is [an init of S's element,] R: D is split by 4·W (whole tiles,
 * the rest peeled) and the tile of 4 vectors of S's target kept in
 * registers across R (cache_write): one load and store per tile rather
 * than per iteration of R. */
static bool tile_row_reduction(sh_lir_kernel *k, sh_lir_stmt D, sh_lir_stmt R, sh_lir_stmt S, int w) {
  sh_lir_stmt first = k->st[D].body;
  if (first == R) {
    if (k->st[R].next >= 0) return false;
  } else {
    const sh_lir_snode *i0 = &k->st[first];
    if (i0->kind != SH_LIR_S_STORE || i0->next != R || k->st[R].next >= 0 || i0->buf != k->st[S].buf ||
        i0->combine != SH_LIR_COMBINE_NONE || i0->nidx != k->st[S].nidx)
      return false;
    for (int d = 0; d < i0->nidx; d++)
      if (!sh_lir_expr_eq(k, k->list[i0->idx + d], k->list[k->st[S].idx + d])) return false;
  }
  int64_t U = 4, ext;
  if (sh_lir_is_const(k, k->st[D].ext, &ext) && ext < U * w) return false;
  sh_lir_stmt dout, din, dv, dl;
  if (sh_sched_split(k, D, U * w, SH_SCHED_TAIL_PEEL, &dout, &din, NULL)) return false;
  if (sh_sched_split(k, din, w, SH_SCHED_TAIL_GUARD, &dv, &dl, NULL)) return false;
  sh_sched_cache c;
  if (sh_sched_cache_write(k, dv, &c)) return false;
  tile_copy(k, c.n, c.init, w);
  tile_copy(k, c.n, c.band, w);
  tile_copy(k, c.n, c.final, w);
  (void)dout;
  return true;
}

/* The same with three rows of an outer loop I (D its only statement, the
 * value reading an operand free of I: the attention's v) in the tile:
 * `for i: for d: for j: o[i, d] += e[i, j]·v[j, d]` keeps 4 vectors × 3
 * rows of o in registers across j (12 accumulators), each v vector loaded
 * once for the three rows (1.13–1.16x the attention against 2 rows,
 * paired). The last one or two rows take the one-row tile. */
static bool tile_row_reduction2(sh_lir_kernel *k, sh_lir_stmt D, sh_lir_stmt R, sh_lir_stmt S, int w) {
  sh_lir_stmt I = k->st[D].parent;
  int64_t U = 4, ext;
  if (I < 0 || k->st[I].kind != SH_LIR_S_LOOP || k->st[I].annot != SH_LIR_SERIAL || k->st[I].body != D ||
      k->st[D].next >= 0 || (sh_lir_is_const(k, k->st[I].ext, &ext) && ext < 3) ||
      (sh_lir_is_const(k, k->st[D].ext, &ext) && ext < U * w))
    return false;
  sh_lir_var vi = k->st[I].var;
  const sh_lir_snode *x = &k->st[S];
  const sh_lir_enode *val = &k->ex[x->val];
  bool idx_i = false;
  for (int d = 0; d < x->nidx; d++) idx_i |= sh_lir_uses_var(k, k->list[x->idx + d], vi);
  if (!idx_i || sh_lir_uses_var(k, k->st[D].ext, vi) || sh_lir_uses_var(k, k->st[R].ext, vi) ||
      val->kind != SH_LIR_E_BIN || val->op != SH_LIR_OP_MUL ||
      (sh_lir_uses_var(k, val->a, vi) && sh_lir_uses_var(k, val->b, vi)))
    return false;
  sh_lir_stmt first = k->st[D].body;
  if (first != R && (k->st[first].kind != SH_LIR_S_STORE || k->st[first].next != R)) return false;
  if (k->st[R].next >= 0) return false;
  sh_lir_stmt io, ii, it = SH_LIR_NONE;
  if (sh_sched_split(k, I, 3, SH_SCHED_TAIL_PEEL, &io, &ii, &it)) return false;
  (void)io;
  if (it >= 0) { /* the rest of the rows: its copy of D */
    sh_lir_stmt D2 = k->st[it].body, R2 = D2 >= 0 ? k->st[D2].body : SH_LIR_NONE;
    while (R2 >= 0 && k->st[R2].next >= 0) R2 = k->st[R2].next;
    if (R2 >= 0 && k->st[R2].kind == SH_LIR_S_LOOP && k->st[R2].body >= 0)
      tile_row_reduction(k, D2, R2, k->st[R2].body, w);
  }
  sh_lir_stmt dout, din, dv, dl, loops[4];
  int nl;
  if (sh_sched_split(k, D, U * w, SH_SCHED_TAIL_PEEL, &dout, &din, NULL) ||
      sh_sched_split(k, din, w, SH_SCHED_TAIL_GUARD, &dv, &dl, NULL))
    return true;
  if (sh_lir_body_len(k, ii) > 1 && (sh_sched_distribute(k, ii, loops, 4, &nl) || loops[0] != ii)) return true;
  /* d_o, then the 4 vectors, then the 3 rows: each v vector is loaded
   * once and used by the rows' statements in a row */
  sh_lir_stmt order[3] = {dout, dv, ii};
  if (sh_sched_reorder(k, 3, order)) return true;
  sh_sched_cache c;
  if (sh_sched_cache_write(k, dv, &c)) return true;
  tile_copy(k, c.n, c.init, w);
  tile_copy(k, c.n, c.band, w);
  tile_copy(k, c.n, c.final, w);
  return true;
}

/* A reduction loop R innermost under a spatial loop D, R's accesses not
 * stride-1 in R but D's are (`for d: [o = 0;] for j: o[.., d] += e[j]·v[j, d]`):
 * D is distributed (its other statements keep a loop of their own) and R
 * moved outside it, so the stride-1 loop is innermost and vectorizes. */
static void reductions_outward(sh_lir_kernel *k, sh_lir_stmt top, int w) {
  sh_lir_stmt inner[256];
  int n = 0;
  innermost_loops(k, top, inner, &n, 256);
  for (int i = 0; i < n && i < 256; i++) {
    sh_lir_stmt R = inner[i], S = k->st[R].body, D = k->st[R].parent;
    if (k->st[R].annot != SH_LIR_SERIAL || S < 0 || k->st[S].next >= 0 || k->st[S].kind != SH_LIR_S_STORE ||
        k->st[S].combine == SH_LIR_COMBINE_NONE || D < 0 || k->st[D].kind != SH_LIR_S_LOOP ||
        k->st[D].annot != SH_LIR_SERIAL)
      continue;
    const sh_lir_snode *x = &k->st[S];
    sh_lir_var vr = k->st[R].var, vd = k->st[D].var;
    bool r_in_idx = false, d_ok = is_var(k, k->list[x->idx + x->nidx - 1], vd);
    for (int d = 0; d < x->nidx; d++) {
      r_in_idx |= sh_lir_uses_var(k, k->list[x->idx + d], vr);
      if (d + 1 < x->nidx && sh_lir_uses_var(k, k->list[x->idx + d], vd)) d_ok = false;
    }
    if (r_in_idx || !d_ok || contiguous_expr(k, x->val, vr) || !contiguous_expr(k, x->val, vd) ||
        sh_lir_uses_var(k, k->st[R].ext, vd))
      continue;
    if (tile_row_reduction2(k, D, R, S, w) || tile_row_reduction(k, D, R, S, w)) continue;
    int pos = 0;
    for (sh_lir_stmt c = k->st[D].body; c >= 0 && c != R; c = k->st[c].next) pos++;
    sh_lir_stmt Dp = D;
    if (sh_lir_body_len(k, D) > 1) {
      sh_lir_stmt loops[64];
      int nl;
      if (pos >= 64 || sh_sched_distribute(k, D, loops, 64, &nl)) continue;
      Dp = loops[pos];
    }
    sh_lir_stmt order[2] = {k->st[Dp].body, Dp};
    sh_sched_reorder(k, 2, order);
  }
}

/* Rows of dot products (the attention's scores) get a register tile over
 * the rows of the operand that varies (sched_dot.c). */
static void dot_tiles(sh_lir_kernel *k, sh_lir_stmt top, int w) {
  sh_lir_stmt inner[256];
  int n = 0;
  innermost_loops(k, top, inner, &n, 256);
  for (int i = 0; i < n && i < 256 && !k->err; i++) sh_sched_dot_tile(k, inner[i], w);
}

static void nest_parallel(sh_lir_kernel *k, sh_lir_stmt top, const sh_sched_opts *o);

static void sched_nest(sh_lir_kernel *k, sh_lir_stmt top, int w, const sh_sched_opts *o, bool par) {
  if (w > 1) dot_tiles(k, top, w);
  if (w > 1) reductions_outward(k, top, w);
  if (w > 1) {
    sh_lir_stmt inner[256];
    int n = 0;
    innermost_loops(k, top, inner, &n, 256);
    for (int i = 0; i < n; i++)
      if (k->st[inner[i]].annot == SH_LIR_SERIAL) vectorize_loop(k, inner[i], w, o->row_unroll);
  }
  if (par) nest_parallel(k, top, o);
}

static void nest_parallel(sh_lir_kernel *k, sh_lir_stmt top, const sh_sched_opts *o) {
  if (k->st[top].kind != SH_LIR_S_LOOP || !sh_sched_contains_loop(k, top)) return;
  if (ragged_extents(k, top)) {
    sh_sched_parallel(k, top);
    return;
  }
  int64_t ext;
  int64_t pb = o->par_block > 0 ? o->par_block : 4;
  if (sh_lir_is_const(k, k->st[top].ext, &ext) && ext <= pb) return;
  sh_lir_stmt outer = top;
  if (pb > 1 && sh_sched_split(k, top, pb, SH_SCHED_TAIL_GUARD_TOP, &outer, NULL, NULL)) return;
  sh_sched_parallel(k, outer);
}

/* Consecutive nests over the same outer loop whose bodies have ragged
 * extents (the attention's scores, max, exps, sums, products: one nest per
 * statement) become one nest over it (fuse_siblings), so each sequence's
 * temporaries are written and read again while in cache; then the same
 * inside the fused body (the heads of a multi-head attention). Only loops
 * whose own extent is not ragged are fused: the query rows (ragged) stay
 * one loop per statement, for the register tiles over rows. GEMM-like
 * nests stay alone (they are tiled as a whole). */
static void fuse_nests(sh_lir_kernel *k, sh_lir_stmt parent) {
  for (sh_lir_stmt a = k->st[parent].body; a >= 0 && !k->err;) {
    sh_lir_stmt b = k->st[a].next;
    gemm_match g;
    bool fusable = k->st[a].kind == SH_LIR_S_LOOP && !has_load(k, k->st[a].ext) && ragged_extents(k, a) &&
                   !(parent == k->root && match_gemm(k, a, &g));
    if (fusable && b >= 0 && k->st[b].kind == SH_LIR_S_LOOP && ragged_extents(k, b) &&
        !(parent == k->root && match_gemm(k, b, &g))) {
      sheaf_status saved = k->err;
      if (sh_sched_fuse_siblings(k, a, b) == SHEAF_OK) continue; /* a took b's body; try the next */
      k->err = saved;
    }
    if (fusable) fuse_nests(k, a);
    a = b;
  }
}

/* A load of b under s at dimension d is exactly variable v (the head h of
 * k(b, j, h, d)), d neither the first nor the last dimension. */
static bool strided_by(const sh_lir_kernel *k, sh_lir_expr e, sh_lir_buf b, sh_lir_var v) {
  const sh_lir_enode *x = &k->ex[e];
  if (x->kind == SH_LIR_E_LOAD && x->a == b)
    for (int d = 1; d + 1 < x->n; d++)
      if (is_var(k, k->list[x->b + d], v)) return true;
  if (x->kind == SH_LIR_E_BIN) return strided_by(k, x->a, b, v) || strided_by(k, x->b, b, v);
  if (x->kind == SH_LIR_E_UN) return strided_by(k, x->a, b, v);
  return false;
}

static bool strided_in(const sh_lir_kernel *k, sh_lir_stmt s, sh_lir_buf b, sh_lir_var v) {
  for (; s >= 0; s = k->st[s].next) {
    if (k->st[s].kind == SH_LIR_S_STORE && strided_by(k, k->st[s].val, b, v)) return true;
    if (strided_in(k, k->st[s].body, b, v)) return true;
  }
  return false;
}

/* In a parallel ragged nest (the attention, fused per sequence): each
 * ragged scratch temporary (scores, exps, maxima, sums, products) lives in
 * a block per run of a serial loop directly in it (per head), else per
 * sequence (contract_ragged: reused from one run to the next, in cache,
 * where the notation's ragged temporaries spread over the whole call: 4
 * heads' scores and exps of 64 WikiText-2 sequences are 2 MB). With
 * sh_sched_opts.pack_rows, a ragged input read inside such a loop whose
 * variable indexes one of its middle dimensions (q, k, v(b, j, h, d)
 * inside the loop over heads: a head's rows H·D floats apart) is also read
 * through a dense copy per run (cache_read_ragged: rows D apart; measured
 * no faster: docs/CODEGEN.md, a knob). */
static void ragged_blocks(sh_lir_kernel *k, int w, bool pack) {
  sh_lir_stmt tops[256];
  int n = 0;
  for (sh_lir_stmt t = k->st[k->root].body; t >= 0 && n < 256; t = k->st[t].next) tops[n++] = t;
  for (int i = 0; i < n && !k->err; i++) {
    sh_lir_stmt t = tops[i];
    if (k->st[t].kind != SH_LIR_S_LOOP || k->st[t].annot != SH_LIR_PARALLEL || !ragged_extents(k, t)) continue;
    for (sh_lir_stmt at = k->st[t].body; at >= 0 && !k->err; at = k->st[at].next) {
      if (!pack || k->st[at].kind != SH_LIR_S_LOOP || k->st[at].annot != SH_LIR_SERIAL ||
          has_load(k, k->st[at].ext))
        continue;
      for (sh_lir_buf b = 0; b < k->n_bufs; b++) {
        const sh_lir_bufinfo *bi = &k->bufs[b];
        if (bi->role != SH_LIR_IN || bi->layout != SH_LIR_LAYOUT_RAGGED || !strided_in(k, k->st[at].body, b, k->st[at].var))
          continue;
        sheaf_status saved = k->err;
        sh_sched_read rd;
        if (sh_sched_cache_read_ragged(k, b, at, &rd)) {
          k->err = saved;
          continue;
        }
        if (w > 1 && rd.n > 0) vectorize_loop(k, rd.loops[rd.n - 1], w, 0);
      }
    }
    /* the scratch temporaries per run of such a loop, else per sequence */
    for (sh_lir_buf b = 0; b < k->n_bufs && !k->err; b++) {
      if (!k->bufs[b].scratch || k->bufs[b].layout != SH_LIR_LAYOUT_RAGGED) continue;
      bool done = false;
      for (sh_lir_stmt at = k->st[t].body; at >= 0 && !done; at = k->st[at].next) {
        sh_lir_stmt L = at;
        while (L >= 0 && k->st[L].kind == SH_LIR_S_ALLOC) L = k->st[L].body; /* inside a copy's alloc */
        if (L < 0 || k->st[L].kind != SH_LIR_S_LOOP || k->st[L].annot != SH_LIR_SERIAL) continue;
        sheaf_status saved = k->err;
        if (!(done = sh_sched_contract_ragged(k, b, L) == SHEAF_OK)) k->err = saved;
      }
      sheaf_status saved = k->err;
      if (!done && sh_sched_contract_ragged(k, b, t)) k->err = saved;
    }
  }
}

sheaf_status sh_sched_default(sh_lir_kernel *k, sheaf_isa isa) {
  sh_sched_opts o;
  memset(&o, 0, sizeof o);
  return sh_sched_default_opts(k, isa, &o);
}

sheaf_status sh_sched_default_opts(sh_lir_kernel *k, sheaf_isa isa, const sh_sched_opts *opts) {
  if (k->err) return k->err;
  sheaf_status st = sh_lir_verify(k);
  if (st) return st;
  int w = width_of(isa);
  if ((st = sh_sched_exp_ranges(k, NULL))) return st;
  if ((st = sh_sched_factor(k, NULL))) return st;
  inline_pointwise(k);
  for (int32_t b = 0; b < k->n_bufs && !k->err; b++) /* per-row scalars into registers */
    if (k->bufs[b].role == SH_LIR_TEMP && !k->bufs[b].inlined && k->bufs[b].rank == 1) {
      sheaf_status saved = k->err;
      if (sh_sched_contract(k, b)) k->err = saved;
    }
  fuse_nests(k, k->root);
  sh_lir_stmt tops[256];
  int n = 0;
  for (sh_lir_stmt s = k->st[k->root].body; s >= 0 && n < 256; s = k->st[s].next) tops[n++] = s;
  for (int i = 0; i < n && !k->err; i++) {
    if (k->st[tops[i]].parent != k->root) continue; /* removed by an earlier step */
    gemm_match g, g2;
    if (match_gemm(k, tops[i], &g)) {
      if (!opts->no_pair && i + 1 < n && match_gemm(k, tops[i + 1], &g2) && gemm_pair(k, &g, &g2)) {
        if ((st = sched_gemm_pair(k, &g, &g2, w, opts))) return st;
        i++;
        continue;
      }
      /* a row nest over the product (log-softmax, layernorm): run per row block */
      sh_lir_stmt cons = i + 1 < n && sh_sched_row_consumer(k, tops[i], g.C, tops[i + 1]) ? tops[i + 1] : SH_LIR_NONE;
      if (cons >= 0) sched_nest(k, cons, w, opts, false), i++;
      if ((st = sched_gemm(k, &g, w, opts, &cons))) return st;
      if (cons >= 0 && k->st[cons].parent == k->root) nest_parallel(k, cons, opts); /* not fused: as any nest */
      continue;
    }
    sched_nest(k, tops[i], w, opts, true);
  }
  if (k->err) return k->err;
  ragged_blocks(k, w, opts->pack_rows > 0);
  if (k->err) return k->err;
  /* 5. per-row values (a reciprocal, an rsqrt) out of the element loops */
  if ((st = sh_sched_hoist(k, k->root, NULL))) return st;
  return sh_lir_verify(k);
}
