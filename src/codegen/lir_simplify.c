/*
 * lir_simplify.c — integer analysis of the loop IR: value ranges (from
 * constant loop extents and the nonnegativity of sizes, lengths and
 * offsets), linear forms (sums of atoms with constant coefficients), the
 * simplifier built on them, affine decomposition in one variable, and the
 * storage offset of a buffer element in every layout.
 *
 * The simplifier resolves floor division and modulo by a constant d:
 * floordiv(d·q + r, d) = q + floordiv(r, d) holds exactly, and when r's
 * range lies in [m·d, (m+1)·d) the remaining floordiv is the constant m.
 * That is what turns a panel address (n / 16)·16K + k·16 + n % 16 with
 * n = 16·jo + 8 + lane into jo·16K + k·16 + 8 + lane, a contiguous vector.
 */
#include "codegen/lir_int.h"

#include <string.h>

/* ------------------------------------------------------------- ranges */

typedef struct rng {
  int64_t lo, hi;
  bool has_lo, has_hi;
} rng;

static rng rng_exact(int64_t v) { return (rng){v, v, true, true}; }
static rng rng_nonneg(void) { return (rng){0, 0, true, false}; }
static rng rng_any(void) { return (rng){0, 0, false, false}; }

static bool add_ok(int64_t a, int64_t b, int64_t *r) { return !__builtin_add_overflow(a, b, r); }

static rng rng_add(rng a, rng b, int sign) {
  rng r = rng_any();
  if (sign > 0) {
    r.has_lo = a.has_lo && b.has_lo && add_ok(a.lo, b.lo, &r.lo);
    r.has_hi = a.has_hi && b.has_hi && add_ok(a.hi, b.hi, &r.hi);
  } else {
    r.has_lo = a.has_lo && b.has_hi && !__builtin_sub_overflow(a.lo, b.hi, &r.lo);
    r.has_hi = a.has_hi && b.has_lo && !__builtin_sub_overflow(a.hi, b.lo, &r.hi);
  }
  return r;
}

static rng rng_scale(rng a, int64_t c) {
  rng r = rng_any();
  if (c >= 0) {
    r.has_lo = a.has_lo && !__builtin_mul_overflow(a.lo, c, &r.lo);
    r.has_hi = a.has_hi && !__builtin_mul_overflow(a.hi, c, &r.hi);
  } else {
    r.has_lo = a.has_hi && !__builtin_mul_overflow(a.hi, c, &r.lo);
    r.has_hi = a.has_lo && !__builtin_mul_overflow(a.lo, c, &r.hi);
  }
  return r;
}

static int64_t floordiv_i64(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
  return q;
}

static rng range_of(const sh_lir_kernel *k, sh_lir_expr e, int depth) {
  if (e < 0 || depth > 64) return rng_any();
  const sh_lir_enode *x = &k->ex[e];
  switch ((sh_lir_ekind)x->kind) {
  case SH_LIR_E_INT: return rng_exact(x->i);
  case SH_LIR_E_SYM:
  case SH_LIR_E_LD:
  case SH_LIR_E_LOAD: return rng_nonneg(); /* sizes, strides, lengths, offsets: >= 0 */
  case SH_LIR_E_VAR: {
    sh_lir_stmt l = k->vars[x->a].loop;
    if (l < 0) return rng_nonneg();
    rng ext = range_of(k, k->st[l].ext, depth + 1);
    rng r = rng_nonneg();
    if (ext.has_hi) {
      r.has_hi = true;
      r.hi = ext.hi - 1;
    }
    return r;
  }
  case SH_LIR_E_BIN: {
    rng a = range_of(k, x->a, depth + 1), b = range_of(k, x->b, depth + 1);
    int64_t c;
    switch ((sh_lir_op)x->op) {
    case SH_LIR_OP_ADD: return rng_add(a, b, 1);
    case SH_LIR_OP_SUB: return rng_add(a, b, -1);
    case SH_LIR_OP_MUL:
      if (sh_lir_is_const(k, x->b, &c)) return rng_scale(a, c);
      if (sh_lir_is_const(k, x->a, &c)) return rng_scale(b, c);
      if (a.has_lo && b.has_lo && a.lo >= 0 && b.lo >= 0) {
        rng r = rng_nonneg();
        r.has_lo = !__builtin_mul_overflow(a.lo, b.lo, &r.lo);
        r.has_hi = a.has_hi && b.has_hi && !__builtin_mul_overflow(a.hi, b.hi, &r.hi);
        return r;
      }
      return rng_any();
    case SH_LIR_OP_DIV:
      if (sh_lir_is_const(k, x->b, &c) && c > 0) {
        rng r = rng_any();
        r.has_lo = a.has_lo;
        r.has_hi = a.has_hi;
        if (a.has_lo) r.lo = floordiv_i64(a.lo, c);
        if (a.has_hi) r.hi = floordiv_i64(a.hi, c);
        return r;
      }
      if (a.has_lo && a.lo >= 0 && b.has_lo && b.lo > 0) {
        rng r = rng_nonneg();
        r.has_hi = a.has_hi;
        r.hi = a.hi;
        return r;
      }
      return rng_any();
    case SH_LIR_OP_MOD:
      if (sh_lir_is_const(k, x->b, &c) && c > 0) {
        if (a.has_lo && a.has_hi && a.lo >= 0 && a.hi < c) return a;
        return (rng){0, c - 1, true, true};
      }
      if (b.has_lo && b.lo > 0) {
        rng r = rng_nonneg();
        if (b.has_hi) {
          r.has_hi = true;
          r.hi = b.hi - 1;
        }
        return r;
      }
      return rng_any();
    case SH_LIR_OP_MIN: {
      rng r = rng_any();
      r.has_lo = a.has_lo && b.has_lo;
      r.lo = a.lo < b.lo ? a.lo : b.lo;
      r.has_hi = a.has_hi || b.has_hi;
      r.hi = a.has_hi && b.has_hi ? (a.hi < b.hi ? a.hi : b.hi) : (a.has_hi ? a.hi : b.hi);
      return r;
    }
    case SH_LIR_OP_MAX: {
      rng r = rng_any();
      r.has_hi = a.has_hi && b.has_hi;
      r.hi = a.hi > b.hi ? a.hi : b.hi;
      r.has_lo = a.has_lo || b.has_lo;
      r.lo = a.has_lo && b.has_lo ? (a.lo > b.lo ? a.lo : b.lo) : (a.has_lo ? a.lo : b.lo);
      return r;
    }
    default: return (rng){0, 1, true, true}; /* comparisons, && || */
    }
  }
  default: return rng_any();
  }
}

bool sh_lir_range(const sh_lir_kernel *k, sh_lir_expr e, int64_t *lo, int64_t *hi) {
  rng r = range_of(k, e, 0);
  if (!r.has_lo || !r.has_hi) return false;
  *lo = r.lo;
  *hi = r.hi;
  return true;
}

bool sh_lir_nonneg(const sh_lir_kernel *k, sh_lir_expr e) {
  rng r = range_of(k, e, 0);
  return r.has_lo && r.lo >= 0;
}

/* ------------------------------------------------------ linear forms */

#define LIN_MAX 32

typedef struct lin {
  int n;
  sh_lir_expr atom[LIN_MAX];
  int64_t coef[LIN_MAX];
  int64_t c;
  bool bad;
} lin;

static void lin_term(const sh_lir_kernel *k, lin *L, sh_lir_expr atom, int64_t coef) {
  for (int i = 0; i < L->n; i++)
    if (sh_lir_expr_eq(k, L->atom[i], atom)) {
      if (__builtin_add_overflow(L->coef[i], coef, &L->coef[i])) L->bad = true;
      return;
    }
  if (L->n == LIN_MAX) {
    L->bad = true;
    return;
  }
  L->atom[L->n] = atom;
  L->coef[L->n++] = coef;
}

static sh_lir_expr simp(sh_lir_kernel *k, sh_lir_expr e, int depth);

static void lin_build(sh_lir_kernel *k, sh_lir_expr e, int64_t scale, lin *L, int depth) {
  if (L->bad || k->err) return;
  if (depth > 48) {
    L->bad = true;
    return;
  }
  const sh_lir_enode x = k->ex[e];
  int64_t c, t;
  if (x.kind == SH_LIR_E_INT) {
    if (__builtin_mul_overflow(x.i, scale, &t) || __builtin_add_overflow(L->c, t, &L->c))
      L->bad = true;
    return;
  }
  if (x.kind == SH_LIR_E_BIN && (x.op == SH_LIR_OP_ADD || x.op == SH_LIR_OP_SUB)) {
    lin_build(k, x.a, scale, L, depth + 1);
    if (x.op == SH_LIR_OP_SUB && scale == INT64_MIN) L->bad = true;
    lin_build(k, x.b, x.op == SH_LIR_OP_ADD ? scale : -scale, L, depth + 1);
    return;
  }
  if (x.kind == SH_LIR_E_BIN && x.op == SH_LIR_OP_MUL) {
    sh_lir_expr a = simp(k, x.a, depth + 1), b = simp(k, x.b, depth + 1);
    if (sh_lir_is_const(k, a, &c)) {
      if (__builtin_mul_overflow(scale, c, &t)) L->bad = true;
      else lin_build(k, b, t, L, depth + 1);
      return;
    }
    if (sh_lir_is_const(k, b, &c)) {
      if (__builtin_mul_overflow(scale, c, &t)) L->bad = true;
      else lin_build(k, a, t, L, depth + 1);
      return;
    }
    lin_term(k, L, sh_lir_mul(k, a, b), scale);
    return;
  }
  sh_lir_expr s = simp(k, e, depth + 1);
  const sh_lir_enode *y = &k->ex[s];
  if (s != e && (y->kind == SH_LIR_E_INT ||
                 (y->kind == SH_LIR_E_BIN &&
                  (y->op == SH_LIR_OP_ADD || y->op == SH_LIR_OP_SUB || y->op == SH_LIR_OP_MUL)))) {
    lin_build(k, s, scale, L, depth + 1);
    return;
  }
  lin_term(k, L, s, scale);
}

static sh_lir_expr lin_expr(sh_lir_kernel *k, const lin *L) {
  sh_lir_expr r = SH_LIR_NONE;
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < L->n; i++) {
      int64_t c = L->coef[i];
      if (c == 0 || (pass == 0) != (c > 0)) continue;
      int64_t m = c > 0 ? c : -c;
      sh_lir_expr t = m == 1 ? L->atom[i] : sh_lir_mul(k, L->atom[i], sh_lir_int(k, m));
      if (r < 0) r = c > 0 ? t : sh_lir_sub(k, sh_lir_int(k, 0), t);
      else r = c > 0 ? sh_lir_add(k, r, t) : sh_lir_sub(k, r, t);
    }
  if (r < 0) return sh_lir_int(k, L->c);
  if (L->c > 0) return sh_lir_add(k, r, sh_lir_int(k, L->c));
  if (L->c < 0 && L->c != INT64_MIN) return sh_lir_sub(k, r, sh_lir_int(k, -L->c));
  if (L->c < 0) return sh_lir_add(k, r, sh_lir_int(k, L->c));
  return r;
}

static rng lin_range(const sh_lir_kernel *k, const lin *L) {
  rng r = rng_exact(L->c);
  for (int i = 0; i < L->n; i++) r = rng_add(r, rng_scale(range_of(k, L->atom[i], 0), L->coef[i]), 1);
  return r;
}

/* floordiv (want_mod false) or mod of the linear form by d > 0. */
static sh_lir_expr divmod_lin(sh_lir_kernel *k, const lin *L, int64_t d, bool want_mod) {
  lin Q, R;
  memset(&Q, 0, sizeof Q);
  memset(&R, 0, sizeof R);
  for (int i = 0; i < L->n; i++) {
    if (L->coef[i] % d == 0) {
      Q.atom[Q.n] = L->atom[i];
      Q.coef[Q.n++] = L->coef[i] / d;
    } else {
      R.atom[R.n] = L->atom[i];
      R.coef[R.n++] = L->coef[i];
    }
  }
  int64_t qc = floordiv_i64(L->c, d);
  R.c = L->c - qc * d;
  Q.c = qc;
  rng rr = lin_range(k, &R);
  if (rr.has_lo && rr.has_hi) {
    int64_t m = floordiv_i64(rr.lo, d);
    if (floordiv_i64(rr.hi, d) == m) {
      if (want_mod) {
        R.c -= m * d;
        return lin_expr(k, &R);
      }
      if (__builtin_add_overflow(Q.c, m, &Q.c)) return SH_LIR_NONE;
      return lin_expr(k, &Q);
    }
  }
  sh_lir_expr rest = lin_expr(k, &R);
  if (want_mod) return sh_lir_bin(k, SH_LIR_OP_MOD, rest, sh_lir_int(k, d));
  sh_lir_expr q = lin_expr(k, &Q);
  return sh_lir_add(k, q, sh_lir_bin(k, SH_LIR_OP_DIV, rest, sh_lir_int(k, d)));
}

static sh_lir_expr simp(sh_lir_kernel *k, sh_lir_expr e, int depth) {
  if (e < 0 || k->err) return e;
  const sh_lir_enode x = k->ex[e];
  if (x.dtype != SH_LIR_I32 || depth > 48) return e;
  switch ((sh_lir_ekind)x.kind) {
  case SH_LIR_E_LOAD: {
    sh_lir_expr idx[SH_LIR_MAX_RANK];
    bool same = true;
    for (int i = 0; i < x.n; i++) {
      idx[i] = simp(k, k->list[x.b + i], depth + 1);
      same = same && idx[i] == k->list[x.b + i];
    }
    return same ? e : sh_lir_load(k, x.a, x.n, idx);
  }
  case SH_LIR_E_BIN: break;
  default: return e;
  }
  sh_lir_op op = (sh_lir_op)x.op;
  if (op == SH_LIR_OP_ADD || op == SH_LIR_OP_SUB || op == SH_LIR_OP_MUL) {
    lin L;
    memset(&L, 0, sizeof L);
    lin_build(k, e, 1, &L, depth + 1);
    return L.bad ? e : lin_expr(k, &L);
  }
  sh_lir_expr a = simp(k, x.a, depth + 1), b = simp(k, x.b, depth + 1);
  int64_t ca, cb;
  bool ka = sh_lir_is_const(k, a, &ca), kb = sh_lir_is_const(k, b, &cb);
  if ((op == SH_LIR_OP_DIV || op == SH_LIR_OP_MOD) && kb && cb > 0 && !ka) {
    lin L;
    memset(&L, 0, sizeof L);
    lin_build(k, a, 1, &L, depth + 1);
    if (!L.bad) {
      sh_lir_expr r = divmod_lin(k, &L, cb, op == SH_LIR_OP_MOD);
      if (r >= 0) return r;
    }
    return sh_lir_bin(k, op, a, b);
  }
  if (op >= SH_LIR_OP_LT && op <= SH_LIR_OP_NE) {
    rng d = range_of(k, simp(k, sh_lir_sub(k, a, b), depth + 1), 0);
    int decided = -1;
    switch (op) {
    case SH_LIR_OP_LT:
      if (d.has_hi && d.hi < 0) decided = 1;
      if (d.has_lo && d.lo >= 0) decided = 0;
      break;
    case SH_LIR_OP_LE:
      if (d.has_hi && d.hi <= 0) decided = 1;
      if (d.has_lo && d.lo > 0) decided = 0;
      break;
    case SH_LIR_OP_GT:
      if (d.has_lo && d.lo > 0) decided = 1;
      if (d.has_hi && d.hi <= 0) decided = 0;
      break;
    case SH_LIR_OP_GE:
      if (d.has_lo && d.lo >= 0) decided = 1;
      if (d.has_hi && d.hi < 0) decided = 0;
      break;
    case SH_LIR_OP_EQ:
    case SH_LIR_OP_NE:
      if (d.has_lo && d.has_hi && d.lo == 0 && d.hi == 0) decided = op == SH_LIR_OP_EQ;
      if ((d.has_lo && d.lo > 0) || (d.has_hi && d.hi < 0)) decided = op == SH_LIR_OP_NE;
      break;
    default: break;
    }
    if (decided >= 0) return sh_lir_int(k, decided);
  }
  if (op == SH_LIR_OP_MIN || op == SH_LIR_OP_MAX) {
    rng ra = range_of(k, a, 0), rb = range_of(k, b, 0);
    if (op == SH_LIR_OP_MIN) {
      if (ra.has_hi && rb.has_lo && ra.hi <= rb.lo) return a;
      if (rb.has_hi && ra.has_lo && rb.hi <= ra.lo) return b;
    } else {
      if (ra.has_lo && rb.has_hi && ra.lo >= rb.hi) return a;
      if (rb.has_lo && ra.has_hi && rb.lo >= ra.hi) return b;
    }
  }
  if (op == SH_LIR_OP_OR && ka) return ca ? sh_lir_int(k, 1) : b;
  if (op == SH_LIR_OP_OR && kb) return cb ? sh_lir_int(k, 1) : a;
  if (a == x.a && b == x.b) return e;
  return sh_lir_bin(k, op, a, b);
}

sh_lir_expr sh_lir_simplify(sh_lir_kernel *k, sh_lir_expr e) { return simp(k, e, 0); }

bool sh_lir_affine(sh_lir_kernel *k, sh_lir_expr e, sh_lir_var v, int64_t *coef,
                   sh_lir_expr *rest) {
  if (e < 0 || k->ex[e].dtype != SH_LIR_I32) return false;
  lin L;
  memset(&L, 0, sizeof L);
  lin_build(k, e, 1, &L, 0);
  if (L.bad || k->err) return false;
  int64_t a = 0;
  lin R;
  memset(&R, 0, sizeof R);
  R.c = L.c;
  for (int i = 0; i < L.n; i++) {
    const sh_lir_enode *x = &k->ex[L.atom[i]];
    if (x->kind == SH_LIR_E_VAR && x->a == v) {
      a += L.coef[i];
    } else {
      if (sh_lir_uses_var(k, L.atom[i], v)) return false;
      R.atom[R.n] = L.atom[i];
      R.coef[R.n++] = L.coef[i];
    }
  }
  *coef = a;
  if (rest) *rest = lin_expr(k, &R);
  return !k->err;
}

/* ------------------------------------------------------------ storage */

sh_lir_expr sh_lir_storage_dim(sh_lir_kernel *k, sh_lir_buf b, int d) {
  const sh_lir_bufinfo *bi = &k->bufs[b];
  sh_lir_expr D = bi->dims[d];
  int64_t p = bi->pad[d];
  if (p <= 1) return D;
  sh_lir_expr P = sh_lir_int(k, p);
  return sh_lir_mul(k, sh_lir_bin(k, SH_LIR_OP_DIV, sh_lir_add(k, D, sh_lir_int(k, p - 1)), P), P);
}

sh_lir_expr sh_lir_storage_size(sh_lir_kernel *k, sh_lir_buf b) {
  const sh_lir_bufinfo *bi = &k->bufs[b];
  if (bi->layout == SH_LIR_LAYOUT_PANELS) {
    sh_lir_expr P = sh_lir_int(k, bi->panel);
    sh_lir_expr np = sh_lir_bin(k, SH_LIR_OP_DIV,
                                sh_lir_add(k, bi->dims[1], sh_lir_int(k, bi->panel - 1)), P);
    return sh_lir_simplify(k, sh_lir_mul(k, sh_lir_mul(k, np, P), bi->dims[0]));
  }
  sh_lir_expr n = sh_lir_int(k, 1);
  for (int d = 0; d < bi->rank; d++) n = sh_lir_mul(k, n, sh_lir_storage_dim(k, b, d));
  return sh_lir_simplify(k, n);
}

static sh_lir_expr round_up(sh_lir_kernel *k, sh_lir_expr x, int64_t p) {
  if (p <= 1) return x;
  sh_lir_expr P = sh_lir_int(k, p);
  return sh_lir_mul(k, sh_lir_bin(k, SH_LIR_OP_DIV, sh_lir_add(k, x, sh_lir_int(k, p - 1)), P), P);
}

sh_lir_expr sh_lir_offset(sh_lir_kernel *k, sh_lir_buf b, const sh_lir_expr *idx,
                          sh_lir_expr *row) {
  const sh_lir_bufinfo *bi = &k->bufs[b];
  *row = SH_LIR_NONE;
  sh_lir_expr off;
  if (bi->layout == SH_LIR_LAYOUT_PANELS) {
    sh_lir_expr P = sh_lir_int(k, bi->panel);
    off = sh_lir_add(
        k,
        sh_lir_add(k, sh_lir_mul(k, sh_lir_bin(k, SH_LIR_OP_DIV, idx[1], P),
                                 sh_lir_mul(k, bi->dims[0], P)),
                   sh_lir_mul(k, idx[0], P)),
        sh_lir_bin(k, SH_LIR_OP_MOD, idx[1], P));
    return sh_lir_simplify(k, off);
  }
  int first = 0;
  off = sh_lir_int(k, 0);
  sh_lir_expr stride = sh_lir_int(k, 1);
  if (bi->layout == SH_LIR_LAYOUT_RAGGED) {
    sh_lir_expr len = sh_lir_load1(k, bi->lengths, idx[0]);
    for (int d = bi->rank - 1; d >= 1; d--) {
      off = sh_lir_add(k, off, sh_lir_mul(k, idx[d], stride));
      sh_lir_expr ext = (bi->ragged_mask & (1u << d)) ? round_up(k, len, bi->pad[d])
                                                      : sh_lir_storage_dim(k, b, d);
      stride = sh_lir_mul(k, stride, ext);
    }
    off = sh_lir_add(k, off, sh_lir_load1(k, bi->offsets, idx[0]));
    return sh_lir_simplify(k, off);
  }
  if (bi->access == SH_LIR_ACCESS_ROWS) {
    *row = idx[0];
    first = 1;
  }
  for (int d = bi->rank - 1; d >= first; d--) {
    if (d == 0 && bi->access == SH_LIR_ACCESS_LD) stride = sh_lir_ld_ref(k, b);
    off = sh_lir_add(k, off, sh_lir_mul(k, idx[d], stride));
    if (d > 0) stride = sh_lir_mul(k, stride, sh_lir_storage_dim(k, b, d));
  }
  return sh_lir_simplify(k, off);
}
