/*
 * sched_dot.c — the default schedule's rule for rows of dot products:
 *
 *   for j: [S[.., j] = v0;] for d: S[.., j] += A[.., d] · B[.., j, .., d]; [S[.., j] = f(S[.., j]);]
 *
 * with d stride-1 in both operands and one operand (A) free of j: the
 * attention's scores q(i, :) · k(j, :). Each dot product alone reads both
 * rows and ends in a horizontal reduction; here Jt = 4 values of j share
 * one load of A's vector, each keeping W lanes of partial sums in
 * registers (a Jt × W tile: rfactor over the band j_i × d_l), and the
 * horizontal reductions happen once per tile row after the d loop:
 *
 *   for j_o in 0..J / 4:
 *     (init / post statements of j: loops of their own over j_i, unrolled)
 *     alloc S_acc[4, W]:
 *       for d_o in 0..D / W:
 *         for j_i in 0..4 unroll: for d_l in 0..W vector: S_acc[j_i, d_l] += A[d] · B[j, d]
 *       for j_i in 0..4 unroll: for d_l in 0..W vector: S[.., j] += S_acc[j_i, d_l]
 *   (the rest of j, and of d, as before: the generic row rules)
 *
 * Only primitives (split, distribute, reorder, rfactor, unroll, vectorize)
 * are used; the rule is tried and skipped when one of them refuses.
 */
#include "codegen/lir_sched_int.h"

#define DOT_JT 4 /* values of j per tile */

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

bool sh_sched_dot_tile(sh_lir_kernel *k, sh_lir_stmt R, int w) {
  sh_lir_stmt J;
  if (w < 2 || k->err || !match_dot(k, R, &J)) return false;
  sh_lir_stmt S = k->st[R].body, jo, ji, jt;
  if (sh_sched_split(k, J, DOT_JT, SH_SCHED_TAIL_PEEL, &jo, &ji, &jt)) return false;
  /* the same store in the peeled tail keeps the generic treatment */
  sh_lir_stmt loops[16];
  int nl = 1;
  loops[0] = ji;
  if (sh_lir_body_len(k, ji) > 1 && (sh_sched_distribute(k, ji, loops, 16, &nl) || nl > 16)) return true;
  sh_lir_buf sb = k->st[S].buf;
  sh_lir_stmt jr = holding(k, loops, nl, sb, &R);
  if (jr < 0) return true;
  S = k->st[R].body;
  for (int i = 0; i < nl; i++) /* init and post statements: Jt scalars each */
    if (loops[i] != jr) sh_sched_unroll(k, loops[i]);
  sh_lir_stmt dout, dl, dt = SH_LIR_NONE;
  if (sh_sched_split(k, R, w, SH_SCHED_TAIL_PEEL, &dout, &dl, &dt)) return true;
  if (dt >= 0) {
    sh_lir_stmt l2[2];
    int n2;
    if (sh_sched_distribute(k, jr, l2, 2, &n2) || n2 != 2) return true;
    jr = l2[0]; /* l2[1]: the rest of d, per j (0 iterations when W divides D) */
  }
  sh_lir_stmt order[2] = {dout, jr};
  if (sh_sched_reorder(k, 2, order)) return true;
  sh_sched_cache c;
  if (sh_sched_rfactor(k, jr, S, &c)) return true;
  sh_sched_unroll(k, c.init[0]), sh_sched_vectorize(k, c.init[1], w);
  sh_sched_unroll(k, jr), sh_sched_vectorize(k, dl, w);
  sh_sched_unroll(k, c.final[0]), sh_sched_vectorize(k, c.final[1], w);
  (void)jt;
  return true;
}
