/*
 * sched_dot.c — the default schedule's rule for rows of dot products:
 *
 *   for j: [S[.., j] = v0;] for d: S[.., j] += A[.., d] · B[.., j, .., d]; [S[.., j] = f(S[.., j]);]
 *
 * with d stride-1 in both operands and one operand (A) free of j: the
 * attention's scores q(i, :) · k(j, :). Each dot product alone reads both
 * rows and ends in a horizontal reduction; here a tile of Jt = 4 values of
 * j and, when J is the only statement of a loop I over A's rows, It = 3
 * values of i keeps Jt × It × W partial sums in registers across d
 * (rfactor over the band j_i × i_i × d_l): each k vector is loaded once for
 * It rows, each q vector once for Jt keys, and one horizontal reduction per
 * value follows the d loop:
 *
 *   for i_o in 0..I / 3:
 *     for j_o in 0..J / 4:
 *       (init / post statements of j: loops of their own, unrolled)
 *       alloc S_acc[4, 3, W]:
 *         for d_o in 0..D / W:
 *           for j_i in 0..4 unroll: for i_i in 0..3 unroll: for d_l in 0..W vector:
 *             S_acc[j_i, i_i, d_l] += A[i, d] · B[j, d]
 *         (S[.., i, j] += the horizontal sum of S_acc[j_i, i_i, :], per value)
 *       (the rest of d, D mod W: skipped as a whole when empty)
 *     (the rest of j, and of i: the 1-D tile or the generic row rules)
 *
 * Only primitives (split, distribute, reorder, rfactor, unroll, vectorize)
 * are used; the rule is tried and skipped when one of them refuses.
 */
#include "codegen/lir_sched_int.h"

#define DOT_JT 4 /* values of j per tile */
#define DOT_IT 3 /* values of i per tile (12 accumulators: 16 registers on AVX2) */

static bool is_var(const sh_lir_kernel *k, sh_lir_expr e, sh_lir_var v) {
  return k->ex[e].kind == SH_LIR_E_VAR && k->ex[e].a == v;
}

/* A load stride-1 in v in its last index, free of v elsewhere. */
static bool load_stride1(sh_lir_kernel *k, sh_lir_expr e, sh_lir_var v) {
  const sh_lir_enode x = k->ex[e];
  if (x.kind != SH_LIR_E_LOAD || x.n < 1 || k->bufs[x.a].dtype != SH_LIR_F32) return false;
  for (int d = 0; d + 1 < x.n; d++)
    if (sh_lir_uses_var(k, k->list[x.b + d], v)) return false;
  int64_t coef;
  return sh_lir_affine(k, k->list[x.b + x.n - 1], v, &coef, NULL) && coef == 1;
}

static bool load_uses(const sh_lir_kernel *k, sh_lir_expr e, sh_lir_var v) {
  const sh_lir_enode x = k->ex[e];
  for (int d = 0; d < x.n; d++)
    if (sh_lir_uses_var(k, k->list[x.b + d], v)) return true;
  return false;
}

/* R (innermost, serial, one store S) and its parent loop J match the
 * pattern above. */
static bool match_dot(sh_lir_kernel *k, sh_lir_stmt R, sh_lir_stmt *Jp) {
  const sh_lir_snode r = k->st[R];
  sh_lir_stmt S = r.body, J = r.parent;
  if (r.kind != SH_LIR_S_LOOP || r.annot != SH_LIR_SERIAL || S < 0 || k->st[S].kind != SH_LIR_S_STORE ||
      k->st[S].next >= 0 || J < 0 || k->st[J].kind != SH_LIR_S_LOOP || k->st[J].annot != SH_LIR_SERIAL)
    return false;
  const sh_lir_snode s = k->st[S];
  const sh_lir_enode val = k->ex[s.val];
  sh_lir_var vr = r.var, vj = k->st[J].var;
  if (s.combine != SH_LIR_COMBINE_ADD || val.kind != SH_LIR_E_BIN || val.op != SH_LIR_OP_MUL ||
      k->bufs[s.buf].role == SH_LIR_LOCAL || s.nidx < 1 || !is_var(k, k->list[s.idx + s.nidx - 1], vj) ||
      sh_lir_uses_var(k, r.ext, vj))
    return false;
  for (int d = 0; d < s.nidx; d++)
    if (sh_lir_uses_var(k, k->list[s.idx + d], vr)) return false;
  if (!load_stride1(k, val.a, vr) || !load_stride1(k, val.b, vr)) return false;
  /* one operand reused across j, the other one's rows indexed by j */
  bool ja = load_uses(k, val.a, vj), jb = load_uses(k, val.b, vj);
  if (ja == jb) return false;
  int64_t ext;
  if (sh_lir_is_const(k, k->st[J].ext, &ext) && ext < DOT_JT) return false;
  *Jp = J;
  return true;
}

/* The loop among loops[0..n) whose body is a loop holding only a reduction
 * into buffer b (distribute copies statements: ids change); *R gets that
 * inner loop. */
static sh_lir_stmt holding(const sh_lir_kernel *k, const sh_lir_stmt *loops, int n, sh_lir_buf b,
                           sh_lir_stmt *R) {
  for (int i = 0; i < n; i++) {
    sh_lir_stmt r = k->st[loops[i]].body;
    if (r < 0 || k->st[r].kind != SH_LIR_S_LOOP || k->st[r].next >= 0) continue;
    sh_lir_stmt s = k->st[r].body;
    if (s >= 0 && k->st[s].kind == SH_LIR_S_STORE && k->st[s].next < 0 && k->st[s].buf == b &&
        k->st[s].combine == SH_LIR_COMBINE_ADD) {
      *R = r;
      return loops[i];
    }
  }
  return SH_LIR_NONE;
}

/* Steps 1-3 on the dot row J (R its d loop, S the reduction): J split by
 * Jt, its statements distributed over j_i, d split by W and the d_o loop
 * moved outside j_i. Returns the loop over j_i under d_o (NONE: stopped
 * early; the kernel is valid either way). */
static sh_lir_stmt tile_j(sh_lir_kernel *k, sh_lir_stmt J, sh_lir_stmt R, int w) {
  sh_lir_buf sb = k->st[k->st[R].body].buf;
  sh_lir_stmt jo, ji, jt;
  if (sh_sched_split(k, J, DOT_JT, SH_SCHED_TAIL_PEEL, &jo, &ji, &jt)) return SH_LIR_NONE;
  sh_lir_stmt loops[16];
  int nl = 1;
  loops[0] = ji;
  if (sh_lir_body_len(k, ji) > 1 && (sh_sched_distribute(k, ji, loops, 16, &nl) || nl > 16))
    return SH_LIR_NONE;
  sh_lir_stmt jr = holding(k, loops, nl, sb, &R);
  if (jr < 0) return SH_LIR_NONE;
  for (int i = 0; i < nl; i++) /* init and post statements: Jt scalars each */
    if (loops[i] != jr) sh_sched_unroll(k, loops[i]);
  sh_lir_stmt dout, dl, dt = SH_LIR_NONE;
  if (sh_sched_split(k, R, w, SH_SCHED_TAIL_PEEL, &dout, &dl, &dt)) return SH_LIR_NONE;
  if (dt >= 0) {
    sh_lir_stmt l2[2];
    int n2;
    if (sh_sched_distribute(k, jr, l2, 2, &n2) || n2 != 2) return SH_LIR_NONE;
    jr = l2[0];
    /* l2[1]: the rest of d, per j, skipped as a whole when empty (W divides
     * D), its generic row schedule's fixed costs (a horizontal reduction
     * per j) included */
    sh_sched_wrap_if(k, l2[1], sh_lir_bin(k, SH_LIR_OP_LT, sh_lir_int(k, 0), k->st[dt].ext));
  }
  sh_lir_stmt order[2] = {dout, jr};
  if (sh_sched_reorder(k, 2, order)) return SH_LIR_NONE;
  (void)jt;
  return jr;
}

/* The accumulators of the tile whose band starts at `band` (loops down to
 * the W lanes) for reduction S: rfactor, band loops unrolled, the lanes
 * vectorized. */
static void accumulate(sh_lir_kernel *k, sh_lir_stmt band, sh_lir_stmt S, int w) {
  sh_sched_cache c;
  if (sh_sched_rfactor(k, band, S, &c)) return;
  for (int p = 0; p + 1 < c.n; p++) {
    sh_sched_unroll(k, c.init[p]), sh_sched_unroll(k, c.band[p]), sh_sched_unroll(k, c.final[p]);
  }
  sh_sched_vectorize(k, c.init[c.n - 1], w);
  sh_sched_vectorize(k, c.band[c.n - 1], w);
  sh_sched_vectorize(k, c.final[c.n - 1], w);
}

/* The reduction into b at the bottom of the chain of single loops from l,
 * or NONE. */
static sh_lir_stmt chain_store(const sh_lir_kernel *k, sh_lir_stmt l, sh_lir_buf b) {
  while (l >= 0 && k->st[l].kind == SH_LIR_S_LOOP && k->st[l].next < 0) l = k->st[l].body;
  if (l < 0 || k->st[l].kind != SH_LIR_S_STORE || k->st[l].next >= 0 || k->st[l].buf != b ||
      k->st[l].combine != SH_LIR_COMBINE_ADD)
    return SH_LIR_NONE;
  return l;
}

/* The 1-D tile of a dot row (a query row alone). */
static void tile_row(sh_lir_kernel *k, sh_lir_stmt J, sh_lir_stmt R, int w) {
  sh_lir_buf sb = k->st[k->st[R].body].buf;
  sh_lir_stmt jr = tile_j(k, J, R, w);
  sh_lir_stmt S = jr >= 0 ? chain_store(k, k->st[jr].body, sb) : SH_LIR_NONE;
  if (S >= 0) accumulate(k, jr, S, w);
}

/* The first loop over a dot row of b below s (a j loop whose body holds
 * a loop with the reduction into b), and that inner loop. */
static sh_lir_stmt find_row(const sh_lir_kernel *k, sh_lir_stmt s, sh_lir_buf b, sh_lir_stmt *R) {
  for (sh_lir_stmt c = k->st[s].body; c >= 0; c = k->st[c].next) {
    if (k->st[c].kind != SH_LIR_S_LOOP) continue;
    for (sh_lir_stmt r = k->st[c].body; r >= 0; r = k->st[r].next)
      if (k->st[r].kind == SH_LIR_S_LOOP && chain_store(k, k->st[r].body, b) >= 0 &&
          k->st[k->st[r].body].kind == SH_LIR_S_STORE) {
        *R = r;
        return c;
      }
    sh_lir_stmt f = find_row(k, c, b, R);
    if (f >= 0) return f;
  }
  return SH_LIR_NONE;
}

bool sh_sched_dot_tile(sh_lir_kernel *k, sh_lir_stmt R, int w) {
  sh_lir_stmt J;
  if (w < 2 || k->err || !match_dot(k, R, &J)) return false;
  sh_lir_buf sb = k->st[k->st[R].body].buf;
  /* a 2-D tile when J is the only statement of a serial loop I over the
   * operand rows that stay (the query rows) */
  sh_lir_stmt I = k->st[J].parent, io, ii, it = SH_LIR_NONE;
  int64_t ext;
  bool two = I >= 0 && k->st[I].kind == SH_LIR_S_LOOP && k->st[I].annot == SH_LIR_SERIAL &&
             k->st[I].body == J && k->st[J].next < 0 && !sh_lir_uses_var(k, k->st[J].ext, k->st[I].var) &&
             !(sh_lir_is_const(k, k->st[I].ext, &ext) && ext < DOT_IT);
  if (!two || sh_sched_split(k, I, DOT_IT, SH_SCHED_TAIL_PEEL, &io, &ii, &it)) {
    tile_row(k, J, R, w);
    return true;
  }
  (void)io;
  /* the rest of the rows (< It) one at a time */
  sh_lir_stmt Rt, Jt = it >= 0 ? find_row(k, it, sb, &Rt) : SH_LIR_NONE;
  if (Jt >= 0) tile_row(k, Jt, Rt, w);
  /* J and R kept their ids in i_i */
  sh_lir_stmt jr = tile_j(k, J, R, w);
  if (jr < 0) return true;
  /* i_i's body: the j_o loop, the j tail: i_i goes inside j_o, then
   * inside d_o */
  sh_lir_stmt jo = k->st[ii].body, loops[16];
  int nl;
  if (sh_lir_body_len(k, ii) > 1 && (sh_sched_distribute(k, ii, loops, 16, &nl) || loops[0] != ii)) return true;
  sh_lir_stmt order[2] = {jo, ii};
  if (sh_sched_reorder(k, 2, order)) return true;
  if (sh_sched_distribute(k, ii, loops, 16, &nl) || nl > 16) return true;
  sh_lir_stmt ir = SH_LIR_NONE, dout = SH_LIR_NONE;
  for (int i = 0; i < nl; i++) {
    sh_lir_stmt d = k->st[loops[i]].body; /* d_o: its body the j_i loop of the tile */
    if (ir < 0 && d >= 0 && k->st[d].kind == SH_LIR_S_LOOP && k->st[d].next < 0 && chain_store(k, d, sb) >= 0 &&
        k->st[k->st[d].body].kind == SH_LIR_S_LOOP && k->st[k->st[k->st[d].body].body].kind == SH_LIR_S_LOOP) {
      ir = loops[i];
      dout = d;
    } else if (k->st[loops[i]].body >= 0 && k->st[k->st[loops[i]].body].annot == SH_LIR_UNROLL) {
      sh_sched_unroll(k, loops[i]); /* init / post: It × Jt scalars */
    }
  }
  if (ir < 0) return true;
  /* d_o, then the keys, then the rows: each k vector is loaded once and
   * used by both rows' statements in a row */
  sh_lir_stmt jt2 = k->st[dout].body;
  sh_lir_stmt order2[3] = {dout, jt2, ir};
  if (sh_sched_reorder(k, 3, order2)) return true;
  sh_lir_stmt S = chain_store(k, k->st[jt2].body, sb);
  if (S >= 0) accumulate(k, jt2, S, w);
  return true;
}
