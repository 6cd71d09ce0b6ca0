/*
 * emit_c_expr.c — expressions and buffer accesses of the C emitter.
 *
 * Integers are int64_t C expressions after substituting the constants of
 * unrolled loops and simplifying (lir_simplify.c): floor division becomes
 * C's `/` where both sides are provably nonnegative, else sk_floordiv.
 * Floats are scalar C, or GCC vectors inside a vector loop: a load whose
 * storage offset is lane + (lane-free part) is one unaligned vector load,
 * a lane-free one a broadcast, anything else a gather built lane by lane.
 * Locals indexed by constants (and the lane, in the last dimension, at a
 * multiple of the width) are registers: `r_acc_5` is the vector holding
 * elements 40..47 of acc; a local the emitter cannot keep in registers is
 * demoted to a stack array and the pass is repeated.
 */
#include "codegen/lir_emit_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void sh_em_line(em *E, const char *fmt, ...) {
  sh_buf_printf(E->out, "%*s", 2 * E->indent, "");
  va_list ap;
  va_start(ap, fmt);
  char tmp[1024];
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n >= (int)sizeof tmp) {
    char *big = sh_malloc(E->k->ctx, (size_t)n + 1);
    if (!big) {
      E->out->failed = true;
      return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sh_buf_puts(E->out, big);
    sh_free(E->k->ctx, big, (size_t)n + 1);
  } else {
    sh_buf_puts(E->out, tmp);
  }
  sh_buf_putc(E->out, '\n');
}

void sh_em_bind_const(em *E, sh_lir_var v, int64_t c) {
  if (E->n_c >= EM_MAX_BIND) {
    sh_lir_fail(E->k, SHEAF_ERR_UNSUPPORTED, "kernel %s: too many unrolled loops", E->k->name);
    return;
  }
  E->vb[v] = EM_CONST;
  E->vc[v] = c;
  E->cv[E->n_c] = v;
  E->ce[E->n_c++] = sh_lir_int(E->k, c);
}

void sh_em_unbind_const(em *E, sh_lir_var v) {
  for (int i = E->n_c - 1; i >= 0; i--)
    if (E->cv[i] == v) {
      memmove(E->cv + i, E->cv + i + 1, (size_t)(E->n_c - i - 1) * sizeof *E->cv);
      memmove(E->ce + i, E->ce + i + 1, (size_t)(E->n_c - i - 1) * sizeof *E->ce);
      E->n_c--;
      break;
    }
  E->vb[v] = EM_UNBOUND;
}

sh_lir_expr sh_em_subst(em *E, sh_lir_expr e) {
  sh_lir_expr s = E->n_c ? sh_lir_subst(E->k, e, E->n_c, E->cv, E->ce) : e;
  return sh_lir_simplify(E->k, s);
}

bool sh_em_varies(const em *E, sh_lir_expr e) {
  return E->lane >= 0 && E->vb[E->lane] == EM_UNBOUND && sh_lir_uses_var(E->k, e, E->lane);
}

void sh_em_float_const(sh_buf *o, float f) {
  if (isnan(f)) {
    sh_buf_puts(o, "((float)NAN)");
    return;
  }
  if (isinf(f)) {
    sh_buf_puts(o, f < 0 ? "(-(float)INFINITY)" : "((float)INFINITY)");
    return;
  }
  char t[48];
  snprintf(t, sizeof t, "%.9g", (double)f);
  if (!strpbrk(t, ".e")) strcat(t, ".0");
  if (f < 0 || (f == 0 && signbit(f))) sh_buf_printf(o, "(%sf)", t);
  else sh_buf_printf(o, "%sf", t);
}

/* ------------------------------------------------------------ integers */

static void cint(em *E, sh_lir_expr e, int prec, sh_buf *o);

static void mem_elem(em *E, sh_lir_buf b, sh_lir_expr row, sh_lir_expr off, sh_buf *o) {
  const sh_lir_bufinfo *bi = &E->k->bufs[b];
  if (bi->role == SH_LIR_LOCAL) sh_buf_printf(o, "l_%s[", bi->name);
  else if (row >= 0) {
    sh_buf_printf(o, "b_%s_rows[", bi->name);
    cint(E, row, 0, o);
    sh_buf_puts(o, "][");
  } else sh_buf_printf(o, "b_%s[", bi->name);
  cint(E, off, 0, o);
  sh_buf_putc(o, ']');
}

static void cint(em *E, sh_lir_expr e, int prec, sh_buf *o) {
  sh_lir_kernel *k = E->k;
  const sh_lir_enode x = k->ex[e];
  switch ((sh_lir_ekind)x.kind) {
  case SH_LIR_E_INT:
    if (x.i == INT64_MIN) sh_buf_puts(o, "(-9223372036854775807LL - 1)");
    else if (x.i < 0) sh_buf_printf(o, "(%lld)", (long long)x.i);
    else sh_buf_printf(o, "%lld", (long long)x.i);
    return;
  case SH_LIR_E_SYM: sh_buf_printf(o, "s_%s", k->syms[x.a]); return;
  case SH_LIR_E_LD: sh_buf_printf(o, "ld_%s", k->bufs[x.a].name); return;
  case SH_LIR_E_VAR:
    if (E->vb[x.a] == EM_CONST) sh_buf_printf(o, "%lld", (long long)E->vc[x.a]);
    else {
      if (E->vb[x.a] != EM_CVAR)
        sh_lir_fail(k, SHEAF_ERR_INTERNAL, "kernel %s: emitter: variable %s used unbound", k->name,
                    k->vars[x.a].name);
      sh_buf_printf(o, "v_%s", k->vars[x.a].name);
    }
    return;
  case SH_LIR_E_LOAD: {
    sh_lir_expr idx[SH_LIR_MAX_RANK], row;
    for (int i = 0; i < x.n; i++) idx[i] = k->list[x.b + i];
    sh_lir_expr off = sh_lir_simplify(k, sh_lir_offset(k, x.a, idx, &row));
    mem_elem(E, x.a, row >= 0 ? sh_lir_simplify(k, row) : row, off, o);
    return;
  }
  case SH_LIR_E_BIN: break;
  default:
    sh_lir_fail(k, SHEAF_ERR_INTERNAL, "kernel %s: emitter: float expression in an integer",
                k->name);
    return;
  }
  sh_lir_op op = (sh_lir_op)x.op;
  int64_t c;
  switch (op) {
  case SH_LIR_OP_ADD:
  case SH_LIR_OP_SUB:
  case SH_LIR_OP_MUL: {
    int p = op == SH_LIR_OP_MUL ? 5 : 4;
    if (p < prec) sh_buf_putc(o, '(');
    cint(E, x.a, p, o);
    sh_buf_puts(o, op == SH_LIR_OP_ADD ? " + " : op == SH_LIR_OP_SUB ? " - " : " * ");
    cint(E, x.b, p + 1, o);
    if (p < prec) sh_buf_putc(o, ')');
    return;
  }
  case SH_LIR_OP_DIV:
  case SH_LIR_OP_MOD:
    /* C's truncating / and % equal floor division for a nonnegative
     * dividend and a positive divisor (a zero divisor is an error either way) */
    if (sh_lir_nonneg(k, x.a) && ((sh_lir_is_const(k, x.b, &c) && c > 0) || sh_lir_nonneg(k, x.b))) {
      if (5 < prec) sh_buf_putc(o, '(');
      cint(E, x.a, 5, o);
      sh_buf_puts(o, op == SH_LIR_OP_DIV ? " / " : " % ");
      cint(E, x.b, 6, o);
      if (5 < prec) sh_buf_putc(o, ')');
      return;
    }
    sh_buf_puts(o, op == SH_LIR_OP_DIV ? "sk_floordiv(" : "sk_floormod(");
    break;
  case SH_LIR_OP_MIN: sh_buf_puts(o, "sk_imin("); break;
  case SH_LIR_OP_MAX: sh_buf_puts(o, "sk_imax("); break;
  default: {
    static const char *ops[] = {[SH_LIR_OP_LT] = " < ",  [SH_LIR_OP_LE] = " <= ",
                                [SH_LIR_OP_GT] = " > ",  [SH_LIR_OP_GE] = " >= ",
                                [SH_LIR_OP_EQ] = " == ", [SH_LIR_OP_NE] = " != ",
                                [SH_LIR_OP_AND] = " && ", [SH_LIR_OP_OR] = " || "};
    sh_buf_putc(o, '(');
    cint(E, x.a, 9, o);
    sh_buf_puts(o, (unsigned)op < SH_ARRAY_LEN(ops) && ops[op] ? ops[op] : " ? ");
    cint(E, x.b, 9, o);
    sh_buf_putc(o, ')');
    return;
  }
  }
  cint(E, x.a, 0, o);
  sh_buf_puts(o, ", ");
  cint(E, x.b, 0, o);
  sh_buf_putc(o, ')');
}

void sh_em_int(em *E, sh_lir_expr e, sh_buf *o) { cint(E, sh_em_subst(E, e), 0, o); }

/* ----------------------------------------------------------- references */

void sh_em_ref_free(em_ref *r) { sh_buf_free(&r->text); }

static void demote(em *E, sh_lir_buf b) {
  if (E->lm[b] != EM_LOCAL_ARRAY) {
    E->lm[b] = EM_LOCAL_ARRAY;
    E->changed = true;
  }
}

/* Flat constant index of a local from constant indices; -1 if not constant. */
static int64_t local_flat(em *E, sh_lir_buf b, const sh_lir_expr *idx, int skip_last,
                          int64_t last) {
  const sh_lir_bufinfo *bi = &E->k->bufs[b];
  int64_t flat = 0;
  for (int d = 0; d < bi->rank; d++) {
    int64_t c, ext = 1;
    sh_lir_is_const(E->k, bi->dims[d], &ext);
    if (d == bi->rank - 1 && skip_last) c = last;
    else if (!sh_lir_is_const(E->k, idx[d], &c)) return -1;
    if (c < 0 || c >= ext) return -1;
    flat = flat * ext + c;
  }
  return flat;
}

void sh_em_ref(em *E, sh_lir_buf b, int n, const sh_lir_expr *idx_in, bool want_vec, em_ref *r) {
  sh_lir_kernel *k = E->k;
  const sh_lir_bufinfo *bi = &k->bufs[b];
  memset(r, 0, sizeof *r);
  sh_buf_init(&r->text, k->ctx);
  sh_lir_expr idx[SH_LIR_MAX_RANK];
  for (int i = 0; i < n; i++) idx[i] = idx_in[i]; /* idx_in may be in the list pool */
  for (int i = 0; i < n; i++) idx[i] = sh_em_subst(E, idx[i]);
  bool lane_sym = E->lane >= 0 && E->vb[E->lane] == EM_UNBOUND;
  bool lane_var = E->lane >= 0 && E->vb[E->lane] == EM_CVAR;
  int W = E->width;
  if (bi->role == SH_LIR_LOCAL && E->lm[b] == EM_LOCAL_REG) {
    int64_t ext_last = 1, coef, c0;
    sh_lir_expr rest;
    sh_lir_is_const(k, bi->dims[n - 1], &ext_last);
    bool uses_lane = E->lane >= 0 && (lane_sym || lane_var);
    bool lane_in_last = false;
    if (uses_lane) {
      for (int d = 0; d < n - 1; d++)
        if (sh_lir_uses_var(k, idx[d], E->lane)) goto demoted;
      lane_in_last = sh_lir_uses_var(k, idx[n - 1], E->lane);
    }
    if (!lane_in_last) {
      if (want_vec && lane_sym) goto demoted; /* a lane-free register read in vector code */
      int64_t flat = local_flat(E, b, idx, 0, 0);
      if (flat < 0) goto demoted;
      r->reg = true;
      if (E->lw[b] > 0)
        sh_buf_printf(&r->text, "r_%s_%lld[%lld]", bi->name, (long long)(flat / E->lw[b]),
                      (long long)(flat % E->lw[b]));
      else sh_buf_printf(&r->text, "r_%s_%lld", bi->name, (long long)flat);
      return;
    }
    if (!sh_lir_affine(k, idx[n - 1], E->lane, &coef, &rest) || coef != 1 ||
        !sh_lir_is_const(k, rest, &c0) || c0 % W != 0 || ext_last % W != 0)
      goto demoted;
    if (E->lw[b] == 0) {
      E->lw[b] = W;
      E->changed = true;
    }
    if (E->lw[b] != W) goto demoted;
    int64_t flat = local_flat(E, b, idx, 1, c0);
    if (flat < 0) goto demoted;
    r->reg = true;
    if (lane_sym && want_vec) {
      r->vec = true;
      sh_buf_printf(&r->text, "r_%s_%lld", bi->name, (long long)(flat / W));
    } else {
      r->lane_reg = true;
      sh_buf_printf(&r->text, "r_%s_%lld", bi->name, (long long)(flat / W));
    }
    return;
  demoted:
    demote(E, b);
  }
  sh_lir_expr row, off = sh_lir_simplify(k, sh_lir_offset(k, b, idx, &row));
  if (row >= 0) row = sh_lir_simplify(k, row);
  if (want_vec && lane_sym && (row < 0 || !sh_lir_uses_var(k, row, E->lane))) {
    int64_t coef;
    sh_lir_expr rest;
    if (sh_lir_affine(k, off, E->lane, &coef, &rest) && coef == 1) {
      r->vec = true;
      sh_buf_putc(&r->text, '(');
      if (bi->role == SH_LIR_LOCAL) sh_buf_printf(&r->text, "l_%s", bi->name);
      else if (row >= 0) {
        sh_buf_printf(&r->text, "b_%s_rows[", bi->name);
        cint(E, row, 0, &r->text);
        sh_buf_putc(&r->text, ']');
      } else sh_buf_printf(&r->text, "b_%s", bi->name);
      sh_buf_puts(&r->text, " + ");
      cint(E, sh_lir_simplify(k, rest), 5, &r->text);
      sh_buf_putc(&r->text, ')');
      return;
    }
  }
  if (want_vec && lane_sym) {
    r->gather = true;
    return;
  }
  mem_elem(E, b, row, off, &r->text);
}

/* --------------------------------------------------------------- floats */

static const char *fn_scalar(sh_lir_fn fn) {
  switch (fn) {
  case SH_LIR_FN_EXP: return "expf";
  case SH_LIR_FN_LOG: return "logf";
  case SH_LIR_FN_TANH: return "tanhf";
  case SH_LIR_FN_SIGMOID: return "sk_sigmoidf";
  case SH_LIR_FN_GELU: return "sk_geluf";
  case SH_LIR_FN_RELU: return "sk_reluf";
  case SH_LIR_FN_SQRT: return "sqrtf";
  case SH_LIR_FN_RSQRT: return "sk_rsqrtf";
  case SH_LIR_FN_ABS: return "fabsf";
  case SH_LIR_FN_SOFTPLUS: return "sk_softplusf";
  case SH_LIR_FN_ERF: return "erff";
  case SH_LIR_FN_EXP_NONPOS: return "sk_expnpf";
  default: return "";
  }
}

static const char *fn_vector(sh_lir_fn fn) {
  switch (fn) {
  case SH_LIR_FN_EXP: return "sk_exp";
  case SH_LIR_FN_LOG: return "sk_log";
  case SH_LIR_FN_TANH: return "sk_tanh";
  case SH_LIR_FN_SIGMOID: return "sk_sigmoid";
  case SH_LIR_FN_GELU: return "sk_gelu";
  case SH_LIR_FN_RELU: return "sk_relu";
  case SH_LIR_FN_SQRT: return "sk_sqrt";
  case SH_LIR_FN_RSQRT: return "sk_rsqrt";
  case SH_LIR_FN_ABS: return "sk_abs";
  case SH_LIR_FN_SOFTPLUS: return "sk_softplus";
  case SH_LIR_FN_ERF: return "sk_erf";
  case SH_LIR_FN_EXP_NONPOS: return "sk_expnp";
  default: return "";
  }
}

/* The vector math with an out-of-line copy in the ABI header
 * (sk_*_coldW), called from the unswitched slow copy of a tile: there it
 * runs once per tile edge, and inlined it was most of the compile time of
 * a fused kernel (each tile register's epilogue inlined it twice, once in
 * the whole tile and once in its slow copy). sk_expnpW (attention, softmax
 * rows: whose slow copies can be the common case) stays inline. */
static bool fn_has_cold(sh_lir_fn fn) {
  switch (fn) {
  case SH_LIR_FN_EXP:
  case SH_LIR_FN_LOG:
  case SH_LIR_FN_TANH:
  case SH_LIR_FN_SIGMOID:
  case SH_LIR_FN_GELU:
  case SH_LIR_FN_SOFTPLUS:
  case SH_LIR_FN_ERF: return true;
  default: return false;
  }
}

static void flt(em *E, sh_lir_expr e, bool vec, sh_buf *o);

/* The lanes of e one by one: (sk_f32xW){e@0, e@1, ...}. */
static void gather(em *E, sh_lir_expr e, sh_buf *o) {
  sh_lir_var L = E->lane;
  sh_buf_printf(o, "(sk_f32x%d){", E->width);
  for (int l = 0; l < E->width; l++) {
    if (l) sh_buf_puts(o, ", ");
    sh_em_bind_const(E, L, l);
    flt(E, e, false, o);
    sh_em_unbind_const(E, L);
  }
  sh_buf_putc(o, '}');
}

static void flt(em *E, sh_lir_expr e, bool vec, sh_buf *o) {
  sh_lir_kernel *k = E->k;
  const sh_lir_enode x = k->ex[e];
  int W = E->width;
  if (vec && !sh_em_varies(E, e)) {
    sh_buf_printf(o, "sk_bc%d(", W);
    flt(E, e, false, o);
    sh_buf_putc(o, ')');
    return;
  }
  switch ((sh_lir_ekind)x.kind) {
  case SH_LIR_E_FLT: sh_em_float_const(o, x.f); return;
  case SH_LIR_E_CAST:
    if (vec) { /* float(rest + lane): the lanes' integers converted at once; else one by one */
      int64_t coef;
      sh_lir_expr rest;
      if (E->lane >= 0 && E->vb[E->lane] == EM_UNBOUND && sh_lir_affine(k, x.a, E->lane, &coef, &rest) &&
          coef == 1) {
        sh_buf_printf(o, "__builtin_convertvector(sk_iota%d() + (int32_t)(", W);
        sh_em_int(E, sh_lir_simplify(k, rest), o);
        sh_buf_printf(o, "), sk_f32x%d)", W);
        return;
      }
      gather(E, e, o);
      return;
    }
    sh_buf_puts(o, "(float)(");
    sh_em_int(E, x.a, o);
    sh_buf_putc(o, ')');
    return;
  case SH_LIR_E_LOAD: {
    em_ref r;
    sh_em_ref(E, x.a, x.n, &k->list[x.b], vec, &r);
    if (r.gather) gather(E, e, o);
    else if (vec && !r.reg)
      sh_buf_printf(o, "sk_ld%s%d(%s)", E->ldp && k->bufs[x.a].layout == SH_LIR_LAYOUT_PANELS ? "p" : "", W,
                    sh_buf_cstr(&r.text));
    else if (r.lane_reg)
      sh_buf_printf(o, "sk_lane%d(%s, v_%s)", W, sh_buf_cstr(&r.text), k->vars[E->lane].name);
    else sh_buf_puts(o, sh_buf_cstr(&r.text));
    sh_em_ref_free(&r);
    return;
  }
  case SH_LIR_E_UN: {
    sh_lir_fn fn = (sh_lir_fn)x.op;
    if (fn == SH_LIR_FN_NEG) {
      sh_buf_puts(o, "(-");
      flt(E, x.a, vec, o);
      sh_buf_putc(o, ')');
      return;
    }
    if (vec && E->cold && fn_has_cold(fn)) sh_buf_printf(o, "%s_cold%d(", fn_vector(fn), W);
    else if (vec) sh_buf_printf(o, "%s%d(", fn_vector(fn), W);
    else sh_buf_printf(o, "%s(", fn_scalar(fn));
    flt(E, x.a, vec, o);
    sh_buf_putc(o, ')');
    return;
  }
  case SH_LIR_E_SELECT:
    if (vec) {
      sh_buf_printf(o, "sk_select%d(", W);
      flt(E, x.a, true, o);
      sh_buf_puts(o, ", ");
      flt(E, x.b, true, o);
      sh_buf_puts(o, ", ");
      flt(E, x.c, true, o);
      sh_buf_putc(o, ')');
      return;
    }
    sh_buf_puts(o, "((");
    flt(E, x.a, false, o);
    sh_buf_puts(o, ") != 0.0f ? (");
    flt(E, x.b, false, o);
    sh_buf_puts(o, ") : (");
    flt(E, x.c, false, o);
    sh_buf_puts(o, "))");
    return;
  case SH_LIR_E_BIN: {
    sh_lir_op op = (sh_lir_op)x.op;
    const char *inf = op == SH_LIR_OP_ADD   ? " + "
                      : op == SH_LIR_OP_SUB ? " - "
                      : op == SH_LIR_OP_MUL ? " * "
                      : op == SH_LIR_OP_DIV ? " / "
                                            : NULL;
    if (inf) {
      sh_buf_putc(o, '(');
      flt(E, x.a, vec, o);
      sh_buf_puts(o, inf);
      flt(E, x.b, vec, o);
      sh_buf_putc(o, ')');
      return;
    }
    if (op >= SH_LIR_OP_LT && op <= SH_LIR_OP_NE) {
      static const char *cmp[] = {[SH_LIR_OP_LT] = " < ",  [SH_LIR_OP_LE] = " <= ",
                                  [SH_LIR_OP_GT] = " > ",  [SH_LIR_OP_GE] = " >= ",
                                  [SH_LIR_OP_EQ] = " == ", [SH_LIR_OP_NE] = " != "};
      if (vec) sh_buf_printf(o, "sk_one%d(", W);
      else sh_buf_puts(o, "((");
      flt(E, x.a, vec, o);
      sh_buf_puts(o, cmp[op]);
      flt(E, x.b, vec, o);
      sh_buf_puts(o, vec ? ")" : ") ? 1.0f : 0.0f)");
      return;
    }
    const char *fnn = op == SH_LIR_OP_MIN ? "min" : op == SH_LIR_OP_MAX ? "max" : "pow";
    if (vec) sh_buf_printf(o, "sk_%s%d(", fnn, W);
    else if (op == SH_LIR_OP_POW) sh_buf_puts(o, "powf(");
    else sh_buf_printf(o, "sk_%sf(", fnn);
    flt(E, x.a, vec, o);
    sh_buf_puts(o, ", ");
    flt(E, x.b, vec, o);
    sh_buf_putc(o, ')');
    return;
  }
  default:
    sh_lir_fail(k, SHEAF_ERR_INTERNAL, "kernel %s: emitter: integer expression used as a float",
                k->name);
    return;
  }
}

void sh_em_flt(em *E, sh_lir_expr e, bool vec, sh_buf *o) { flt(E, e, vec, o); }
