/*
 * emit_c.c — C emission of a loop-IR kernel (lir_emit.h): statements,
 * vector loops with lane-guard versioning, unrolling, outlined parallel
 * loops, the entry point, packing functions, and the passes that settle
 * which locals live in registers. Expressions are in emit_c_expr.c.
 *
 * A vector loop has no C loop: its body is emitted once with vector types.
 * An if inside it whose condition depends on the lane is versioned: when
 * the condition is monotone in the lane (lane + c < n, the guard of a
 * split tail) one test at the extreme lane decides whether every lane is
 * in, and then the body runs as vectors; otherwise (a tail) it runs lane by
 * lane as scalar code, reading and writing single lanes of vector
 * registers (`r_acc_3[v_j]`).
 */
#include "codegen/lir_emit_int.h"

#include <stdio.h>
#include <string.h>

static void stmts(em *E, sh_lir_stmt s);
static void stmt(em *E, sh_lir_stmt s);

static const char *vname(const em *E, sh_lir_var v) { return E->k->vars[v].name; }

static void live_push(em *E, sh_lir_var v) {
  if (E->n_live < EM_MAX_BIND) E->live[E->n_live++] = v;
  E->vb[v] = EM_CVAR;
}

static void live_pop(em *E, sh_lir_var v) {
  if (E->n_live > 0) E->n_live--;
  E->vb[v] = EM_UNBOUND;
}

/* ------------------------------------------------------------- stores */

/* Scalar store (the lane, if any, is bound). */
static void store_scalar(em *E, sh_lir_stmt s) {
  sh_lir_kernel *k = E->k;
  const sh_lir_snode n = k->st[s];
  const sh_lir_bufinfo *bi = &k->bufs[n.buf];
  em_ref r;
  sh_em_ref(E, n.buf, n.nidx, &k->list[n.idx], false, &r);
  sh_buf v;
  sh_buf_init(&v, k->ctx);
  if (bi->dtype == SH_LIR_F32) sh_em_flt(E, n.val, false, &v);
  else sh_em_int(E, n.val, &v);
  const char *t = sh_buf_cstr(&r.text), *val = sh_buf_cstr(&v);
  bool f = bi->dtype == SH_LIR_F32;
  if (r.lane_reg) { /* one lane of a vector register: by value, never subscripted */
    static const char *op[] = {"", "+", "*", "sk_maxf", "sk_minf"};
    const char *ln = vname(E, E->lane);
    int W = E->width;
    if (n.combine == SH_LIR_COMBINE_NONE) sh_em_line(E, "%s = sk_setlane%d(%s, v_%s, %s);", t, W, t, ln, val);
    else if (n.combine == SH_LIR_COMBINE_ADD || n.combine == SH_LIR_COMBINE_MUL)
      sh_em_line(E, "%s = sk_setlane%d(%s, v_%s, sk_lane%d(%s, v_%s) %s (%s));", t, W, t, ln, W, t, ln,
                 op[n.combine], val);
    else
      sh_em_line(E, "%s = sk_setlane%d(%s, v_%s, %s(sk_lane%d(%s, v_%s), %s));", t, W, t, ln, op[n.combine],
                 W, t, ln, val);
    sh_buf_free(&v);
    sh_em_ref_free(&r);
    return;
  }
  switch ((sh_lir_combine)n.combine) {
  case SH_LIR_COMBINE_NONE: sh_em_line(E, "%s = %s;", t, val); break;
  case SH_LIR_COMBINE_ADD: sh_em_line(E, "%s += %s;", t, val); break;
  case SH_LIR_COMBINE_MUL: sh_em_line(E, "%s *= %s;", t, val); break;
  case SH_LIR_COMBINE_MAX: sh_em_line(E, "%s = %s(%s, %s);", t, f ? "sk_maxf" : "sk_imax", t, val); break;
  case SH_LIR_COMBINE_MIN: sh_em_line(E, "%s = %s(%s, %s);", t, f ? "sk_minf" : "sk_imin", t, val); break;
  }
  sh_buf_free(&v);
  sh_em_ref_free(&r);
}

/* Runs `body` once per lane as scalar code (the lane a C variable). */
static void lanes_begin(em *E) {
  sh_em_line(E, "for (int64_t v_%s = 0; v_%s < %d; v_%s++) {", vname(E, E->lane),
             vname(E, E->lane), E->width, vname(E, E->lane));
  E->indent++;
  E->vb[E->lane] = EM_CVAR;
}

static void lanes_end(em *E) {
  E->vb[E->lane] = EM_UNBOUND;
  E->indent--;
  sh_em_line(E, "}");
}

static void store_vector(em *E, sh_lir_stmt s) {
  sh_lir_kernel *k = E->k;
  const sh_lir_snode n = k->st[s];
  const sh_lir_bufinfo *bi = &k->bufs[n.buf];
  int W = E->width;
  bool target_varies = false;
  for (int i = 0; i < n.nidx; i++) target_varies |= sh_em_varies(E, k->list[n.idx + i]);
  bool val_varies = sh_em_varies(E, n.val);
  if (bi->dtype != SH_LIR_F32) {
    lanes_begin(E);
    store_scalar(E, s);
    lanes_end(E);
    return;
  }
  if (!target_varies) {
    if (!val_varies && n.combine == SH_LIR_COMBINE_NONE) {
      store_scalar(E, s); /* the same value W times */
      return;
    }
    if (val_varies && n.combine != SH_LIR_COMBINE_NONE) {
      /* a reduction over the lanes: combine the horizontal reduction */
      static const char *h[] = {"", "sk_hadd", "sk_hmul", "sk_hmax", "sk_hmin"};
      em_ref r;
      sh_em_ref(E, n.buf, n.nidx, &k->list[n.idx], false, &r);
      sh_buf v;
      sh_buf_init(&v, k->ctx);
      sh_em_flt(E, n.val, true, &v);
      const char *t = sh_buf_cstr(&r.text);
      if (n.combine == SH_LIR_COMBINE_ADD) sh_em_line(E, "%s += %s%d(%s);", t, h[n.combine], W, sh_buf_cstr(&v));
      else if (n.combine == SH_LIR_COMBINE_MUL) sh_em_line(E, "%s *= %s%d(%s);", t, h[n.combine], W, sh_buf_cstr(&v));
      else
        sh_em_line(E, "%s = sk_%sf(%s, %s%d(%s));", t, n.combine == SH_LIR_COMBINE_MAX ? "max" : "min",
                   t, h[n.combine], W, sh_buf_cstr(&v));
      sh_buf_free(&v);
      sh_em_ref_free(&r);
      return;
    }
    /* plain store of varying values to one place (the last lane wins), or a
     * combine of one value W times: lane by lane keeps the exact meaning */
    lanes_begin(E);
    store_scalar(E, s);
    lanes_end(E);
    return;
  }
  em_ref r;
  sh_em_ref(E, n.buf, n.nidx, &k->list[n.idx], true, &r);
  if (!r.vec) {
    sh_em_ref_free(&r);
    lanes_begin(E); /* a scatter */
    store_scalar(E, s);
    lanes_end(E);
    return;
  }
  sh_buf v, cur;
  sh_buf_init(&v, k->ctx);
  sh_buf_init(&cur, k->ctx);
  const sh_lir_enode val = k->ex[n.val]; /* a copy: emitting adds nodes */
  bool madd = n.combine == SH_LIR_COMBINE_ADD && val.kind == SH_LIR_E_BIN &&
              val.op == SH_LIR_OP_MUL;
  if (r.reg) sh_buf_puts(&cur, sh_buf_cstr(&r.text));
  else sh_buf_printf(&cur, "sk_ld%d(%s)", W, sh_buf_cstr(&r.text));
  const char *c = sh_buf_cstr(&cur);
  if (madd) {
    sh_buf_printf(&v, "sk_madd%d(", W);
    sh_em_flt(E, val.a, true, &v);
    sh_buf_puts(&v, ", ");
    sh_em_flt(E, val.b, true, &v);
    sh_buf_printf(&v, ", %s)", c);
  } else {
    sh_buf w;
    sh_buf_init(&w, k->ctx);
    sh_em_flt(E, n.val, true, &w);
    switch ((sh_lir_combine)n.combine) {
    case SH_LIR_COMBINE_NONE: sh_buf_puts(&v, sh_buf_cstr(&w)); break;
    case SH_LIR_COMBINE_ADD: sh_buf_printf(&v, "(%s + %s)", c, sh_buf_cstr(&w)); break;
    case SH_LIR_COMBINE_MUL: sh_buf_printf(&v, "(%s * %s)", c, sh_buf_cstr(&w)); break;
    case SH_LIR_COMBINE_MAX: sh_buf_printf(&v, "sk_max%d(%s, %s)", W, c, sh_buf_cstr(&w)); break;
    case SH_LIR_COMBINE_MIN: sh_buf_printf(&v, "sk_min%d(%s, %s)", W, c, sh_buf_cstr(&w)); break;
    }
    sh_buf_free(&w);
  }
  if (r.reg) sh_em_line(E, "%s = %s;", sh_buf_cstr(&r.text), sh_buf_cstr(&v));
  else sh_em_line(E, "sk_st%d(%s, %s);", W, sh_buf_cstr(&r.text), sh_buf_cstr(&v));
  sh_buf_free(&v);
  sh_buf_free(&cur);
  sh_em_ref_free(&r);
}

/* ---------------------------------------------------------------- ifs */

/* For a lane-dependent conjunct `a < b` (<=, >, >=) monotone in the lane:
 * the same conjunct at the lane where it is hardest to satisfy. */
static sh_lir_expr extreme_lane(em *E, sh_lir_expr c) {
  sh_lir_kernel *k = E->k;
  const sh_lir_enode x = k->ex[c];
  if (x.kind != SH_LIR_E_BIN || x.op < SH_LIR_OP_LT || x.op > SH_LIR_OP_GE) return SH_LIR_NONE;
  int64_t coef;
  sh_lir_expr d = sh_lir_sub(k, x.a, x.b);
  if (!sh_lir_affine(k, sh_em_subst(E, d), E->lane, &coef, NULL) || coef == 0) return SH_LIR_NONE;
  bool wants_small = x.op == SH_LIR_OP_LT || x.op == SH_LIR_OP_LE; /* a - b small */
  int64_t lane = (wants_small == (coef > 0)) ? E->width - 1 : 0;
  sh_lir_var L = E->lane;
  sh_lir_expr at = sh_lir_int(k, lane);
  return sh_lir_subst(k, c, 1, &L, &at);
}

static void if_vector(em *E, sh_lir_stmt s) {
  sh_lir_kernel *k = E->k;
  const sh_lir_snode n = k->st[s];
  sh_lir_expr conj[64], all = SH_LIR_NONE, uni = SH_LIR_NONE;
  int nc = sh_lir_conjuncts(k, sh_em_subst(E, n.cond), conj, 64);
  bool monotone = nc < 64, any_lane = false;
  for (int i = 0; i < nc; i++) {
    if (!sh_em_varies(E, conj[i])) {
      uni = uni < 0 ? conj[i] : sh_lir_bin(k, SH_LIR_OP_AND, uni, conj[i]);
      continue;
    }
    any_lane = true;
    sh_lir_expr x = extreme_lane(E, conj[i]);
    if (x < 0) monotone = false;
    else all = all < 0 ? x : sh_lir_bin(k, SH_LIR_OP_AND, all, x);
  }
  if (any_lane && (!monotone || n.els >= 0)) {
    lanes_begin(E); /* the whole if, lane by lane */
    stmt(E, s);
    lanes_end(E);
    return;
  }
  sh_buf c;
  sh_buf_init(&c, k->ctx);
  int opened = 0;
  if (uni >= 0) {
    sh_em_int(E, uni, &c);
    sh_em_line(E, "if (%s) {", sh_buf_cstr(&c));
    E->indent++;
    opened++;
  }
  if (any_lane) {
    sh_buf_clear(&c);
    sh_em_int(E, all, &c);
    sh_em_line(E, "if (%s) {", sh_buf_cstr(&c));
    E->indent++;
    stmts(E, n.body);
    E->indent--;
    sh_em_line(E, "} else {");
    E->indent++;
    sh_lir_expr lanec = SH_LIR_NONE;
    for (int i = 0; i < nc; i++)
      if (sh_em_varies(E, conj[i]))
        lanec = lanec < 0 ? conj[i] : sh_lir_bin(k, SH_LIR_OP_AND, lanec, conj[i]);
    lanes_begin(E);
    sh_buf_clear(&c);
    sh_em_int(E, lanec, &c);
    sh_em_line(E, "if (%s) {", sh_buf_cstr(&c));
    E->indent++;
    stmts(E, n.body);
    E->indent--;
    sh_em_line(E, "}");
    lanes_end(E);
    E->indent--;
    sh_em_line(E, "}");
  } else {
    stmts(E, n.body);
  }
  if (opened) {
    E->indent--;
    if (n.els >= 0) {
      sh_em_line(E, "} else {");
      E->indent++;
      E->cold++;
      stmts(E, k->st[n.els].body);
      E->cold--;
      E->indent--;
    }
    sh_em_line(E, "}");
  }
  sh_buf_free(&c);
}

static void if_scalar(em *E, sh_lir_stmt s) {
  sh_lir_kernel *k = E->k;
  const sh_lir_snode n = k->st[s];
  sh_lir_expr c = sh_em_subst(E, n.cond);
  int64_t v;
  if (sh_lir_is_const(k, c, &v)) {
    if (v) stmts(E, n.body);
    else if (n.els >= 0) stmts(E, k->st[n.els].body);
    return;
  }
  sh_buf t;
  sh_buf_init(&t, k->ctx);
  sh_em_int(E, c, &t);
  sh_em_line(E, "if (%s) {", sh_buf_cstr(&t));
  sh_buf_free(&t);
  E->indent++;
  stmts(E, n.body);
  E->indent--;
  if (n.els >= 0) {
    sh_em_line(E, "} else {");
    E->indent++;
    E->cold++; /* an else is the slow copy of an unswitch (sched.c) */
    stmts(E, k->st[n.els].body);
    E->cold--;
    E->indent--;
  }
  sh_em_line(E, "}");
}

/* -------------------------------------------------------------- loops */

static void prologue(em *E, sh_lir_stmt task);

/* Temporary b exists at statement s: not scoped, or inside its alloc. */
static bool temp_at(const sh_lir_kernel *k, sh_lir_buf b, sh_lir_stmt s) {
  if (k->bufs[b].role != SH_LIR_TEMP || k->bufs[b].inlined) return false;
  if (!k->bufs[b].scoped) return true;
  for (sh_lir_stmt p = s; p >= 0; p = k->st[p].parent)
    if (k->st[p].kind == SH_LIR_S_ALLOC && k->st[p].buf == b) return true;
  return false;
}

/* The frees before a failure return at s: the scoped temporaries whose
 * allocs are around s (in a task: those inside it) and, in the entry, the
 * call's temporaries. */
static void frees_at(em *E, sh_lir_stmt s, sh_buf *out) {
  sh_lir_kernel *k = E->k;
  for (sh_lir_stmt p = k->st[s].parent; p >= 0; p = k->st[p].parent) {
    if (E->in_task && k->st[p].kind == SH_LIR_S_LOOP && k->st[p].annot == SH_LIR_PARALLEL) break;
    if (k->st[p].kind == SH_LIR_S_ALLOC && k->bufs[k->st[p].buf].scoped)
      sh_buf_printf(out, " sk_free(%s, b_%s, n_%s);", E->in_task ? "NULL" : "abi", k->bufs[k->st[p].buf].name,
                    k->bufs[k->st[p].buf].name);
  }
  if (!E->in_task)
    for (int32_t b = 0; b < k->n_bufs; b++)
      if (k->bufs[b].role == SH_LIR_TEMP && !k->bufs[b].inlined && !k->bufs[b].scoped)
        sh_buf_printf(out, " sk_free(abi, b_%s, n_%s);", k->bufs[b].name, k->bufs[b].name);
}

/* s holds the alloc of a scoped temporary. */
static bool has_scoped(const sh_lir_kernel *k, sh_lir_stmt s) {
  for (sh_lir_stmt c = k->st[s].body; c >= 0; c = k->st[c].next) {
    if (k->st[c].kind == SH_LIR_S_ALLOC && k->bufs[k->st[c].buf].scoped) return true;
    if (has_scoped(k, c) || (k->st[c].kind == SH_LIR_S_IF && k->st[c].els >= 0 && has_scoped(k, k->st[c].els)))
      return true;
  }
  return false;
}

static void loop_parallel(em *E, sh_lir_stmt s, const char *ext) {
  sh_lir_kernel *k = E->k;
  const sh_lir_snode n = k->st[s];
  int id = E->n_task++;
  /* the captured variables: temporaries, then the loop variables in scope */
  sh_buf *saved_out = E->out;
  int saved_indent = E->indent;
  sh_buf body;
  sh_buf_init(&body, k->ctx);
  E->out = &body;
  E->indent = 1;
  E->in_task = true;
  sh_em_line(E, "const %s_cap%d *cap_ = (const %s_cap%d *)arg_;", k->name, id, k->name, id);
  sh_em_line(E, "const sk_abi *abi = cap_->abi;");
  sh_em_line(E, "const int64_t *sizes = cap_->sizes;");
  sh_em_line(E, "const sk_arg *args = cap_->args;");
  sh_em_line(E, "(void)abi; (void)sizes; (void)args; (void)tid_;");
  prologue(E, s);
  for (int i = 0; i < E->n_live; i++)
    sh_em_line(E, "const int64_t v_%s = cap_->v_%s;", vname(E, E->live[i]), vname(E, E->live[i]));
  sh_em_line(E, "const int64_t v_%s = task_;", vname(E, n.var));
  live_push(E, n.var);
  stmts(E, n.body);
  live_pop(E, n.var);
  E->in_task = false;
  E->out = saved_out;
  E->indent = saved_indent;
  /* the struct and the task function */
  sh_buf *t = &E->tasks;
  sh_buf_printf(t, "typedef struct %s_cap%d {\n  const sk_abi *abi;\n  const int64_t *sizes;\n"
                   "  const sk_arg *args;\n", k->name, id);
  for (int32_t b = 0; b < k->n_bufs; b++)
    if (temp_at(k, b, s))
      sh_buf_printf(t, "  %s *b_%s;\n", k->bufs[b].dtype == SH_LIR_F32 ? "float" : "int32_t",
                    k->bufs[b].name);
  for (int i = 0; i < E->n_live; i++) sh_buf_printf(t, "  int64_t v_%s;\n", vname(E, E->live[i]));
  bool fails = has_scoped(k, s); /* a task's allocation may fail */
  if (fails) sh_buf_puts(t, "  int *fail_;\n");
  sh_buf_printf(t, "} %s_cap%d;\n\nstatic void %s_task%d(void *arg_, int64_t task_, int tid_) {\n",
                k->name, id, k->name, id);
  sh_buf_put(t, body.data, body.len);
  sh_buf_puts(t, "}\n\n");
  sh_buf_free(&body);
  /* the call */
  sh_em_line(E, "{");
  E->indent++;
  sh_buf init;
  sh_buf_init(&init, k->ctx);
  sh_buf_puts(&init, "abi, sizes, args");
  for (int32_t b = 0; b < k->n_bufs; b++)
    if (temp_at(k, b, s)) sh_buf_printf(&init, ", b_%s", k->bufs[b].name);
  for (int i = 0; i < E->n_live; i++) sh_buf_printf(&init, ", v_%s", vname(E, E->live[i]));
  if (fails) {
    sh_em_line(E, "int fail_ = 0;");
    sh_buf_puts(&init, ", &fail_");
  }
  sh_em_line(E, "%s_cap%d cap_ = {%s};", k->name, id, sh_buf_cstr(&init));
  sh_em_line(E, "sk_parallel(abi, %s, %s_task%d, &cap_);", ext, k->name, id);
  if (fails) {
    sh_buf frees;
    sh_buf_init(&frees, k->ctx);
    frees_at(E, s, &frees);
    sh_em_line(E, "if (__atomic_load_n(&fail_, __ATOMIC_RELAXED)) {%s return 1; }", sh_buf_cstr(&frees));
    sh_buf_free(&frees);
  }
  sh_buf_free(&init);
  E->indent--;
  sh_em_line(E, "}");
}

/* What a register tile's k loop body holds (tile_body). */
typedef struct tile_regs {
  sh_lir_var var[16]; /* the unrolled loops around the statement being walked */
  int64_t ext[16];
  int depth;
  int64_t acc;  /* accumulator registers: stores into register locals, times their unrolling */
  int64_t pvec; /* panel vectors: loads from packed panels, times the unrolling their index uses */
  int w;        /* the accumulators' vector width (0: scalar registers) */
} tile_regs;

/* Counts e's loads from packed panels into t->pvec. */
static void panel_loads(const sh_lir_kernel *k, sh_lir_expr e, tile_regs *t) {
  const sh_lir_enode *x = &k->ex[e];
  switch ((sh_lir_ekind)x->kind) {
  case SH_LIR_E_LOAD:
    if (k->bufs[x->a].layout == SH_LIR_LAYOUT_PANELS) {
      int64_t n = 1;
      for (int d = 0; d < t->depth; d++)
        for (int i = 0; i < x->n; i++)
          if (sh_lir_uses_var(k, k->list[x->b + i], t->var[d])) {
            n *= t->ext[d];
            break;
          }
      t->pvec += n;
    }
    return;
  case SH_LIR_E_BIN: panel_loads(k, x->a, t), panel_loads(k, x->b, t); return;
  case SH_LIR_E_UN:
  case SH_LIR_E_CAST: panel_loads(k, x->a, t); return;
  case SH_LIR_E_SELECT: panel_loads(k, x->a, t), panel_loads(k, x->b, t), panel_loads(k, x->c, t); return;
  default: return;
  }
}

/* The statements from s on only update register locals (through unrolled
 * and vector loops; prefetches allowed): the body of a register tile's
 * reduction loop. t counts its accumulators and panel vectors. */
static bool tile_body(em *E, sh_lir_stmt s, tile_regs *t) {
  const sh_lir_kernel *k = E->k;
  for (; s >= 0; s = k->st[s].next) {
    const sh_lir_snode *x = &k->st[s];
    int64_t c = 0;
    switch ((sh_lir_skind)x->kind) {
    case SH_LIR_S_PREFETCH: break;
    case SH_LIR_S_BLOCK:
      if (!tile_body(E, x->body, t)) return false;
      break;
    case SH_LIR_S_LOOP:
      if (x->annot == SH_LIR_VECTOR) {
        if (!tile_body(E, x->body, t)) return false;
        break;
      }
      if (x->annot != SH_LIR_UNROLL || !sh_lir_is_const(k, x->ext, &c) || t->depth == 16) return false;
      t->var[t->depth] = x->var, t->ext[t->depth++] = c;
      bool ok = tile_body(E, x->body, t);
      t->depth--;
      if (!ok) return false;
      break;
    case SH_LIR_S_STORE: {
      if (k->bufs[x->buf].role != SH_LIR_LOCAL || E->lm[x->buf] != EM_LOCAL_REG) return false;
      int64_t n = 1;
      for (int d = 0; d < t->depth; d++) n *= t->ext[d];
      t->acc += n;
      t->w = E->lw[x->buf];
      panel_loads(k, x->val, t);
      break;
    }
    default: return false;
    }
  }
  return true;
}

static void loop(em *E, sh_lir_stmt s) {
  sh_lir_kernel *k = E->k;
  const sh_lir_snode n = k->st[s];
  sh_lir_expr ext = sh_em_subst(E, n.ext);
  int64_t c = -1;
  bool cst = sh_lir_is_const(k, ext, &c);
  if (cst && c <= 0) return;
  if (n.annot == SH_LIR_VECTOR && E->lane < 0 && n.width > 1) {
    E->lane = n.var;
    E->width = n.width;
    E->vb[n.var] = EM_UNBOUND;
    sh_em_line(E, "{ /* %s: %d lanes */", vname(E, n.var), (int)n.width);
    E->indent++;
    stmts(E, n.body);
    E->indent--;
    sh_em_line(E, "}");
    E->lane = SH_LIR_NONE;
    E->width = 1;
    return;
  }
  if ((n.annot == SH_LIR_UNROLL || (cst && c == 1) || n.annot == SH_LIR_VECTOR) && cst) {
    for (int64_t i = 0; i < c; i++) {
      sh_em_bind_const(E, n.var, i);
      stmts(E, n.body);
      sh_em_unbind_const(E, n.var);
    }
    return;
  }
  sh_buf t;
  sh_buf_init(&t, k->ctx);
  sh_em_int(E, ext, &t);
  if (n.annot == SH_LIR_PARALLEL && !E->in_task && E->lane < 0) {
    loop_parallel(E, s, sh_buf_cstr(&t));
    sh_buf_free(&t);
    return;
  }
  const char *v = vname(E, n.var);
  tile_regs tr = {.depth = 0};
  bool ldp = E->ldp;
  /* a register tile's k loop over packed panels whose vectors fit in
   * registers beside the accumulators and a broadcast (AVX2 6 x 16: 12 + 2
   * + 1 of 16): those loaded once into registers (sk_ldp), the loop
   * unrolled by 4 (paired, 31 rounds: 1.02x on the four GEMM shapes of the
   * peers bench). Not the gated unit's shared tile (12 + 4 + 1): unrolled,
   * it ran at half speed; gcc's FMAs with memory operands fit it as it is
   * (docs/CODEGEN.md "C emission"). */
  if (n.annot == SH_LIR_SERIAL && !cst && E->lane < 0 && tile_body(E, n.body, &tr) && tr.pvec > 0 &&
      tr.acc + tr.pvec + 1 <= (tr.w == 16 ? 32 : 16)) {
    sh_em_line(E, "#pragma GCC unroll 4");
    E->ldp = true;
  }
  sh_em_line(E, "for (int64_t v_%s = 0; v_%s < %s; v_%s++) {", v, v, sh_buf_cstr(&t), v);
  sh_buf_free(&t);
  E->indent++;
  live_push(E, n.var);
  stmts(E, n.body);
  E->ldp = ldp;
  live_pop(E, n.var);
  E->indent--;
  sh_em_line(E, "}");
}

/* A scoped temporary: allocated here, sized as its dims say now, freed at
 * the end of its alloc. In the entry from the call's allocator (a failure
 * frees what is allocated and fails the call); in a task (the allocator
 * serves the calling thread only) from the C heap, a failure flagged for
 * the entry to fail the call after the parallel loop. */
static void alloc_scoped(em *E, sh_lir_stmt s) {
  sh_lir_kernel *k = E->k;
  sh_lir_buf b = k->st[s].buf;
  const sh_lir_bufinfo *bi = &k->bufs[b];
  const char *ty = bi->dtype == SH_LIR_F32 ? "float" : "int32_t", *A = E->in_task ? "NULL" : "abi";
  sh_buf t, frees;
  sh_buf_init(&t, k->ctx);
  sh_buf_init(&frees, k->ctx);
  sh_em_int(E, sh_lir_storage_size(k, b), &t);
  frees_at(E, s, &frees);
  sh_em_line(E, "{");
  E->indent++;
  sh_em_line(E, "const size_t n_%s = (size_t)(%s) * sizeof(%s);", bi->name, sh_buf_cstr(&t), ty);
  sh_em_line(E, "%s *restrict b_%s = (%s *)sk_alloc(%s, n_%s);", ty, bi->name, ty, A, bi->name);
  if (E->in_task)
    sh_em_line(E, "if (!b_%s) {%s __atomic_store_n(cap_->fail_, 1, __ATOMIC_RELAXED); return; }", bi->name,
               sh_buf_cstr(&frees));
  else sh_em_line(E, "if (!b_%s) {%s return 1; }", bi->name, sh_buf_cstr(&frees));
  sh_buf_free(&t);
  sh_buf_free(&frees);
  stmts(E, k->st[s].body);
  sh_em_line(E, "sk_free(%s, b_%s, n_%s);", A, bi->name, bi->name);
  E->indent--;
  sh_em_line(E, "}");
}

static void alloc(em *E, sh_lir_stmt s) {
  sh_lir_kernel *k = E->k;
  sh_lir_buf b = k->st[s].buf;
  const sh_lir_bufinfo *bi = &k->bufs[b];
  if (bi->scoped) {
    alloc_scoped(E, s);
    return;
  }
  int64_t total = 1, c;
  for (int d = 0; d < bi->rank; d++) {
    sh_lir_is_const(k, bi->dims[d], &c);
    total *= c;
  }
  const char *ty = bi->dtype == SH_LIR_F32 ? "float" : "int32_t";
  sh_em_line(E, "{");
  E->indent++;
  if (E->lm[b] == EM_LOCAL_ARRAY || bi->dtype != SH_LIR_F32 || total > 4096) {
    E->lm[b] = EM_LOCAL_ARRAY;
    sh_em_line(E, "%s l_%s[%lld];", ty, bi->name, (long long)total);
  } else {
    int W = E->lw[b];
    int64_t regs = W > 0 ? total / W : total;
    sh_buf d;
    sh_buf_init(&d, k->ctx);
    for (int64_t i = 0; i < regs; i++)
      sh_buf_printf(&d, "%sr_%s_%lld%s", i % 8 == 0 && i ? "\n" : "", bi->name, (long long)i,
                    i + 1 < regs ? ", " : "");
    /* unused: a remainder tile's copy uses only its rows' registers */
    if (W > 0) sh_em_line(E, "sk_f32x%d __attribute__((unused)) %s;", W, sh_buf_cstr(&d));
    else sh_em_line(E, "float __attribute__((unused)) %s;", sh_buf_cstr(&d));
    sh_buf_free(&d);
  }
  stmts(E, k->st[s].body);
  E->indent--;
  sh_em_line(E, "}");
}

/* A prefetch hint: the element's address by integer arithmetic (the index
 * may lie past the buffer; __builtin_prefetch never faults). In vector code
 * an address that varies by lane is not emitted. */
static void prefetch(em *E, sh_lir_stmt s) {
  sh_lir_kernel *k = E->k;
  const sh_lir_snode n = k->st[s];
  sh_lir_expr idx[SH_LIR_MAX_RANK], row;
  for (int i = 0; i < n.nidx; i++) idx[i] = sh_em_subst(E, k->list[n.idx + i]);
  sh_lir_expr off = sh_lir_simplify(k, sh_lir_offset(k, n.buf, idx, &row));
  if (row >= 0 || sh_em_varies(E, off)) return;
  sh_buf t;
  sh_buf_init(&t, k->ctx);
  sh_em_int(E, off, &t);
  /* an output's line is fetched for writing (the tile's write-back) */
  sh_em_line(E, "__builtin_prefetch((const void *)((uintptr_t)b_%s + (uintptr_t)(%s) * %du)%s);",
             k->bufs[n.buf].name, sh_buf_cstr(&t), 4 /* f32 and i32 */,
             k->bufs[n.buf].role == SH_LIR_OUT ? ", 1" : "");
  sh_buf_free(&t);
}

static void stmt(em *E, sh_lir_stmt s) {
  sh_lir_kernel *k = E->k;
  if (k->err) return;
  bool vec = E->lane >= 0 && E->vb[E->lane] == EM_UNBOUND;
  switch ((sh_lir_skind)k->st[s].kind) {
  case SH_LIR_S_BLOCK: stmts(E, k->st[s].body); return;
  case SH_LIR_S_LOOP: loop(E, s); return;
  case SH_LIR_S_ALLOC: alloc(E, s); return;
  case SH_LIR_S_IF:
    if (vec) if_vector(E, s);
    else if_scalar(E, s);
    return;
  case SH_LIR_S_STORE:
    if (vec) store_vector(E, s);
    else store_scalar(E, s);
    return;
  case SH_LIR_S_PREFETCH: prefetch(E, s); return;
  }
}

static void stmts(em *E, sh_lir_stmt s) {
  for (; s >= 0 && !E->k->err; s = E->k->st[s].next) stmt(E, s);
}

/* ---------------------------------------------------------- functions */

/* task: the parallel loop being outlined, or SH_LIR_NONE (the entry). */
static void prologue(em *E, sh_lir_stmt task) {
  sh_lir_kernel *k = E->k;
  for (int32_t i = 0; i < k->n_syms; i++)
    sh_em_line(E, "const int64_t s_%s = sizes[%d]; (void)s_%s;", k->syms[i], (int)i, k->syms[i]);
  int a = 0;
  for (int32_t b = 0; b < k->n_bufs; b++) {
    const sh_lir_bufinfo *bi = &k->bufs[b];
    const char *ty = bi->dtype == SH_LIR_F32 ? "float" : "int32_t";
    const char *cq = bi->role == SH_LIR_IN ? "const " : "";
    if (bi->role <= SH_LIR_OUT) {
      if (bi->access == SH_LIR_ACCESS_ROWS)
        sh_em_line(E, "%s%s *const *b_%s_rows = (%s%s *const *)args[%d].rows; (void)b_%s_rows;", cq,
                   ty, bi->name, cq, ty, a, bi->name);
      else
        sh_em_line(E, "%s%s *restrict b_%s = (%s%s *)args[%d].data; (void)b_%s;", cq, ty, bi->name,
                   cq, ty, a, bi->name);
      if (bi->access == SH_LIR_ACCESS_LD)
        sh_em_line(E, "const int64_t ld_%s = args[%d].ld; (void)ld_%s;", bi->name, a, bi->name);
      a++;
    } else if (task >= 0 && temp_at(k, b, task) && bi->per_task) {
      sh_buf t; /* this thread's copy */
      sh_buf_init(&t, k->ctx);
      sh_em_int(E, sh_lir_storage_size(k, b), &t);
      sh_em_line(E, "%s *restrict b_%s = cap_->b_%s + (size_t)tid_ * (size_t)(%s); (void)b_%s;", ty, bi->name,
                 bi->name, sh_buf_cstr(&t), bi->name);
      sh_buf_free(&t);
    } else if (task >= 0 && temp_at(k, b, task)) {
      sh_em_line(E, "%s *restrict b_%s = cap_->b_%s; (void)b_%s;", ty, bi->name, bi->name, bi->name);
    }
  }
}

/* The index checks (sh_lir_check): one pass over each gather's index
 * buffer before anything runs, so the loops read gathered rows unchecked;
 * a value outside 0 .. ext-1 returns 2 (the caller names it). */
static void index_checks(em *E) {
  sh_lir_kernel *k = E->k;
  for (int32_t c = 0; c < k->n_checks; c++) {
    const sh_lir_check *ck = &k->checks[c];
    const sh_lir_bufinfo *bi = &k->bufs[ck->buf];
    if (bi->access != SH_LIR_ACCESS_DENSE) {
      sh_lir_fail(k, SHEAF_ERR_UNSUPPORTED, "kernel %s: index buffer %s must be passed dense", k->name,
                  bi->name);
      return;
    }
    sh_buf n, x;
    sh_buf_init(&n, k->ctx);
    sh_buf_init(&x, k->ctx);
    for (int d = 0; d < bi->rank; d++) {
      if (d) sh_buf_puts(&n, " * ");
      sh_buf_putc(&n, '(');
      sh_em_int(E, bi->dims[d], &n);
      sh_buf_putc(&n, ')');
    }
    sh_em_int(E, ck->ext, &x);
    sh_em_line(E, "{ /* the values of %s index dimension %d of %s */", bi->name, ck->dim, ck->target);
    sh_em_line(E, "  const int64_t n_ = %s, e_ = %s;", sh_buf_cstr(&n), sh_buf_cstr(&x));
    sh_em_line(E, "  int32_t bad_ = 0;");
    sh_em_line(E, "  for (int64_t i_ = 0; i_ < n_; i_++) bad_ |= (int64_t)b_%s[i_] < 0 || "
                  "(int64_t)b_%s[i_] >= e_;", bi->name, bi->name);
    sh_em_line(E, "  if (bad_) return 2;");
    sh_em_line(E, "}");
    sh_buf_free(&n);
    sh_buf_free(&x);
  }
}

static void entry(em *E) {
  sh_lir_kernel *k = E->k;
  sh_em_line(E, "int %s(const sk_abi *abi, const int64_t *sizes, const sk_arg *args) {", k->name);
  E->indent = 1;
  prologue(E, SH_LIR_NONE);
  index_checks(E);
  int n_temps = 0;
  for (int32_t b = 0; b < k->n_bufs; b++) {
    const sh_lir_bufinfo *bi = &k->bufs[b];
    if (bi->role != SH_LIR_TEMP || bi->inlined || bi->scoped) continue;
    sh_buf t;
    sh_buf_init(&t, k->ctx);
    sh_em_int(E, sh_lir_storage_size(k, b), &t);
    const char *ty = bi->dtype == SH_LIR_F32 ? "float" : "int32_t";
    if (bi->per_task) /* one copy per thread a parallel loop may use (tid_ < threads) */
      sh_em_line(E, "const size_t n_%s = (size_t)(%s) * sizeof(%s) * (size_t)(abi && abi->threads > 1 ? "
                    "abi->threads : 1);", bi->name, sh_buf_cstr(&t), ty);
    else
      sh_em_line(E, "const size_t n_%s = (size_t)(%s) * sizeof(%s);", bi->name, sh_buf_cstr(&t), ty);
    sh_em_line(E, "%s *restrict b_%s = (%s *)sk_alloc(abi, n_%s);", ty, bi->name, ty, bi->name);
    sh_buf_free(&t);
    sh_buf frees;
    sh_buf_init(&frees, k->ctx);
    for (int32_t p = 0; p < b; p++)
      if (k->bufs[p].role == SH_LIR_TEMP && !k->bufs[p].inlined && !k->bufs[p].scoped)
        sh_buf_printf(&frees, " sk_free(abi, b_%s, n_%s);", k->bufs[p].name, k->bufs[p].name);
    sh_em_line(E, "if (!b_%s) {%s return 1; }", bi->name, sh_buf_cstr(&frees));
    sh_buf_free(&frees);
    n_temps++;
  }
  stmts(E, k->st[k->root].body);
  for (int32_t b = k->n_bufs - 1; b >= 0; b--)
    if (k->bufs[b].role == SH_LIR_TEMP && !k->bufs[b].inlined && !k->bufs[b].scoped)
      sh_em_line(E, "sk_free(abi, b_%s, n_%s);", k->bufs[b].name, k->bufs[b].name);
  sh_em_line(E, "(void)abi;");
  sh_em_line(E, "return 0;");
  E->indent = 0;
  sh_em_line(E, "}");
  (void)n_temps;
}

static void pack_fns(em *E) {
  sh_lir_kernel *k = E->k;
  for (int32_t b = 0; b < k->n_bufs; b++) {
    const sh_lir_bufinfo *bi = &k->bufs[b];
    if (bi->layout != SH_LIR_LAYOUT_PANELS) continue;
    long long P = (long long)bi->panel;
    sh_buf K, N;
    sh_buf_init(&K, k->ctx);
    sh_buf_init(&N, k->ctx);
    sh_em_int(E, bi->dims[0], &K);
    sh_em_int(E, bi->dims[1], &N);
    sh_em_line(E, "int64_t %s_packed_size_%s(const int64_t *sizes) {", k->name, bi->name);
    E->indent = 1;
    for (int32_t i = 0; i < k->n_syms; i++)
      sh_em_line(E, "const int64_t s_%s = sizes[%d]; (void)s_%s;", k->syms[i], (int)i, k->syms[i]);
    sh_em_line(E, "return (%s) * (((%s) + %lld) / %lld * %lld);", sh_buf_cstr(&K), sh_buf_cstr(&N),
               P - 1, P, P);
    E->indent = 0;
    sh_em_line(E, "}\n");
    sh_em_line(E, "void %s_pack_%s(const int64_t *sizes, const float *src, int64_t ld, int trans, "
                  "float *dst) {", k->name, bi->name);
    E->indent = 1;
    for (int32_t i = 0; i < k->n_syms; i++)
      sh_em_line(E, "const int64_t s_%s = sizes[%d]; (void)s_%s;", k->syms[i], (int)i, k->syms[i]);
    sh_em_line(E, "const int64_t K = %s, N = %s;", sh_buf_cstr(&K), sh_buf_cstr(&N));
    sh_em_line(E, "for (int64_t p = 0; p < (N + %lld) / %lld; p++)", P - 1, P);
    sh_em_line(E, "  for (int64_t k = 0; k < K; k++)");
    sh_em_line(E, "    for (int64_t c = 0; c < %lld; c++) {", P);
    sh_em_line(E, "      const int64_t n = p * %lld + c;", P);
    sh_em_line(E, "      dst[(p * K + k) * %lld + c] = n < N ? (trans ? src[n * ld + k] : src[k * ld + n]) : 0.0f;", P);
    sh_em_line(E, "    }");
    E->indent = 0;
    sh_em_line(E, "}\n");
    sh_buf_free(&K);
    sh_buf_free(&N);
  }
}

static sheaf_status emit_pass(em *E, sh_buf *out) {
  sh_lir_kernel *k = E->k;
  int32_t n_ex = k->n_ex, n_list = k->n_list;
  sh_buf main;
  sh_buf_init(&main, k->ctx);
  sh_buf_clear(&E->tasks);
  E->out = &main;
  E->indent = 0;
  E->n_task = 0;
  E->cold = 0;
  E->n_c = 0;
  E->n_live = 0;
  E->lane = SH_LIR_NONE;
  E->width = 1;
  E->changed = false;
  entry(E);
  sheaf_status st = k->err ? k->err : sh_buf_status(&main);
  if (!st) st = sh_buf_status(&E->tasks);
  if (!st && out) {
    sh_buf_printf(out, "/* Generated by Sheaf from kernel %s. Do not edit. */\n", k->name);
    sh_buf_puts(out, "#include \"sheaf_kernel_abi.h\"\n\n");
    E->out = out;
    pack_fns(E);
    sh_buf_put(out, E->tasks.data, E->tasks.len);
    sh_buf_put(out, main.data, main.len);
    st = k->err ? k->err : sh_buf_status(out);
  }
  sh_buf_free(&main);
  /* drop the scratch expressions the pass made */
  k->n_ex = n_ex;
  k->n_list = n_list;
  return st;
}

sheaf_status sh_lir_emit_c(sh_lir_kernel *k, sh_buf *out) {
  sheaf_status st = sh_lir_verify(k);
  if (st) return st;
  em E;
  memset(&E, 0, sizeof E);
  E.k = k;
  sh_buf_init(&E.tasks, k->ctx);
  size_t nv = (size_t)k->n_vars + 1, nb = (size_t)k->n_bufs + 1;
  E.vb = sh_calloc(k->ctx, nv, 1);
  E.vc = sh_calloc(k->ctx, nv, sizeof *E.vc);
  E.lm = sh_calloc(k->ctx, nb, 1);
  E.lw = sh_calloc(k->ctx, nb, sizeof *E.lw);
  if (!E.vb || !E.vc || !E.lm || !E.lw) {
    st = SHEAF_ERR_NOMEM;
    goto done;
  }
  /* probe passes settle the locals' registers (each pass only demotes or
   * fixes a width, so this ends) */
  for (int pass = 0; pass < 2 * (int)k->n_bufs + 4; pass++) {
    memset(E.vb, 0, nv);
    st = emit_pass(&E, NULL);
    if (st || !E.changed) break;
  }
  if (!st) {
    memset(E.vb, 0, nv);
    st = emit_pass(&E, out);
  }
  if (st && !k->err && st != SHEAF_ERR_NOMEM)
    st = sh_fail(k->ctx, st, "kernel %s: C emission failed", k->name);
  if (k->err) {
    st = k->err;
    k->err = SHEAF_OK; /* emission errors are reported, not kept in the kernel */
  }
done:
  sh_buf_free(&E.tasks);
  sh_free(k->ctx, E.vb, nv);
  sh_free(k->ctx, E.vc, nv * sizeof *E.vc);
  sh_free(k->ctx, E.lm, nb);
  sh_free(k->ctx, E.lw, nb * sizeof *E.lw);
  return st;
}
