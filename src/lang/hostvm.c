/*
 * hostvm.c — the host program's VM (hostprog.h): one loop over a
 * function's instructions on its frame of registers. Each instruction does
 * what the walker's node does (interp.c, interp_builtin.c): the same
 * builder calls, the same host values in the same regions, the same
 * run-time errors at the same FILE:LINE:COL; an instruction with chk then
 * checks the graph as the walker's built() does after that node.
 */
#include "lang/hostprog.h"

#include "base/stack.h"

#include <string.h>

static SH_NOINLINE sh_value sum(sh_interp *ip, const sh_hp_sum *s, const sh_value *fr) {
  sheaf_expr pieces[8];
  for (int i = 0; i < s->np; i++) pieces[i] = fr[s->pieces[i]].t;
  if (s->n_mm) {
    sheaf_param w[4];
    sheaf_expr xs[4];
    for (int k = 0; k < s->n_mm; k++) w[k] = ip->bind->params[s->w[k]], xs[k] = fr[s->xs[k]].t;
    sheaf_param b = s->bias >= 0 ? ip->bind->params[s->bias] : SHEAF_NO_PARAM;
    pieces[s->at] = s->n_mm == 1 ? sheaf_affine(ip->g, w[0], xs[0], b) : sheaf_affine_n(ip->g, s->n_mm, w, xs, b);
  }
  int np = s->np;
  return mk_tensor(np == 1 ? pieces[0] : np == 2 ? sheaf_add(ip->g, pieces[0], pieces[1]) : sheaf_sum_n(ip->g, np, pieces));
}

static SH_NOINLINE sh_value cell(sh_interp *ip, const sh_hp_ins *I, const sh_value *x) {
  const sh_ast *e = I->e;
  sheaf_param W = ip->bind->params[e->items[0]->ref.param->index], b = ip->bind->params[e->items[1]->ref.param->index];
  sheaf_expr h, cn;
  if (I->op == HP_LSTM) sheaf_lstm_cell(ip->g, W, b, x[0].t, x[1].t, &h, &cn);
  else sheaf_tree_lstm_cell(ip->g, W, b, x[0].t, x[1].t, x[2].t, &h, &cn);
  sh_agg *t = agg_new(ip, -1, 2);
  if (!t) return v_none;
  t->items[0] = mk_tensor(h);
  t->items[1] = mk_tensor(cn);
  return mk_agg(SH_V_TUPLE, t);
}

static SH_NOINLINE sh_value cat(sh_interp *ip, int n, const sh_value *x) {
  sheaf_expr small[4], *xs = small;
  if (n > 4 && !(xs = sh_lang_alloc(ip->cur, (size_t)n * sizeof *xs))) return ip->err = SHEAF_ERR_NOMEM, v_none;
  for (int i = 0; i < n; i++) xs[i] = x[i].t;
  return mk_tensor(sheaf_concat(ip->g, n, xs));
}

static SH_NOINLINE sh_value kcall(sh_interp *ip, const sh_hp_ins *I, const sh_value *x) {
  sheaf_expr in[64];
  for (int i = 0; i < I->n; i++) in[i] = x[i].t;
  int k = I->imm;
  sheaf_kernel *K = k < ip->bind->n_kernels ? ip->bind->kernels[k] : NULL;
  if (!K) return sh_interp_failf(ip, "interp: kernel %d was not compiled", k), v_none;
  return mk_tensor(sheaf_kernel_call(ip->g, K, I->n, in));
}

/* A coarsened region: its row inputs (arguments, side by side) as [1, d], the model's
 * parameters, one kernel call, its [1, out_d] row back to a vector. */
static SH_NOINLINE sh_value region(sh_interp *ip, const sh_hp_ins *I, const sh_value *x) {
  const sh_lang_region *r = I->p;
  sheaf_expr in[128];
  for (int i = 0; i < r->n_inputs; i++) {
    sheaf_expr parts[8];
    for (int s = 0; s < r->n_segs[i]; s++) parts[s] = x[r->seg[i][s]].t;
    sheaf_expr v = r->n_segs[i] == 1 ? parts[0] : sheaf_concat(ip->g, r->n_segs[i], parts);
    int64_t d[2] = {0, 0};
    sheaf_expr_shape(ip->g, v, d);
    int64_t shape[2] = {1, d[0]};
    in[i] = sheaf_reshape(ip->g, v, 2, shape);
  }
  for (int p = 0; p < r->n_params; p++) in[r->n_inputs + p] = sheaf_parameter(ip->g, ip->bind->params[r->params[p]]);
  sheaf_expr y = sheaf_kernel_call(ip->g, r->k, r->n_inputs + r->n_params, in);
  return mk_tensor(sheaf_reshape(ip->g, y, 1, &r->out_d));
}

static sh_value exec(sh_interp *ip, const sh_hp_ins *code, sh_value *fr, int pc);

/* A call: interp.c run_fn's work done here for a compiled callee without
 * generic sizes and room on the stack (the stack's room checked, the
 * depth counted); the rest (binding sizes, a stack too full: its error)
 * through run_fn. */
static SH_NOINLINE sh_value call(sh_interp *ip, const sh_hp_ins *I, const sh_value *x) {
  const sh_fn *f = I->p;
  const sh_hp_fn *hf = &ip->hp->fns[f->index];
  sh_value *nf = sh_lang_alloc_raw(ip->cur, (size_t)(hf->n_regs ? hf->n_regs : 1) * sizeof *nf);
  if (!nf) {
    if (!ip->err) ip->err = SHEAF_ERR_NOMEM;
    return v_none;
  }
  for (int i = 0; i < I->n; i++) nf[f->params[i]->index] = x[i];
  if (!hf->code || f->n_size_params || sh_stack_room() < SH_INTERP_STACK_RESERVE)
    return sh_interp_run_fn(ip, f, nf, I->e);
  ip->depth++;
  sh_value r = exec(ip, hf->code, nf, 0);
  ip->depth--;
  return r;
}

static SH_NOINLINE sh_value agg(sh_interp *ip, const sh_hp_ins *I, const sh_value *x) {
  sh_agg *a = agg_new(ip, I->imm, I->n);
  if (!a) return v_none;
  if (I->n) memcpy(a->items, x, (size_t)I->n * sizeof *x);
  return mk_agg(I->c, a);
}

static SH_NOINLINE sh_value bi(sh_interp *ip, const sh_hp_ins *I, const sh_value *x) {
  sh_value a[4] = {0};
  for (int i = I->c ? 1 : 0; i < I->n; i++) a[i] = x[i];
  return sh_interp_builtin_args(ip, I->e, a);
}

static SH_NOINLINE sh_value bl(sh_interp *ip, const sh_hp_ins *I, const sh_value *x) {
  sh_value a[64] = {0};
  memcpy(a, x, (size_t)I->n * sizeof *a);
  return sh_interp_builtin_list_args(ip, I->e, a);
}

/* HP_FOR: the loop's count, bounds and result list (interp.c eval_for). */
static SH_NOINLINE void for_start(sh_interp *ip, const sh_hp_ins *I, sh_value *fr) {
  const sh_ast *e = I->e;
  sh_value xs = fr[I->a];
  int32_t lo = 0, n;
  if (I->b != 0xFFFF) {
    sh_value hi = fr[I->b];
    lo = xs.i;
    int64_t len = hi.i > lo ? (int64_t)hi.i - lo : 0;
    if (len > INT32_MAX) {
      sh_interp_fail_at(ip, e->span, "for over %d..%d: %lld iterations, more than a list can hold "
                        "(2147483647)", (int)lo, (int)hi.i, (long long)len);
      return;
    }
    if (sh_interp_budget_at(ip, e, (double)len * sizeof(sh_value), "for over %d..%d (%lld iterations)", (int)lo,
                            (int)hi.i, (long long)len))
      return;
    n = (int32_t)len;
  } else {
    n = xs.agg->n;
  }
  sh_agg *r = agg_new_raw(ip, -1, n);
  if (!r) return;
  fr[I->dst] = mk_agg(SH_V_LIST, r);
  fr[I->dst + 1].i = 0;
  fr[I->dst + 2].i = lo;
  fr[I->dst + 3].i = n;
}

static SH_NOINLINE sh_value slicex(sh_interp *ip, const sh_ast *e, sh_value x) {
  return mk_tensor(sheaf_slice(ip->g, x.t, sh_interp_size(ip, e->lo), sh_interp_size(ip, e->hi)));
}

static SH_NOINLINE sh_value kten(sh_interp *ip, const sh_ast *e) {
  float f = (float)e->fval;
  return mk_tensor(sheaf_input_vector(ip->g, 1, &f));
}

static SH_NOINLINE void graph_failed(sh_interp *ip, const sh_ast *e) {
  ip->err = sheaf_graph_error_context(ip->g, "%s:%u:%u: error", ip->m->diags.file, (unsigned)e->span.line,
                                      (unsigned)e->span.col);
}

/* A while loop's steps (HP_WHILE): the state into register c, then the
 * code at k (its pattern and condition); the code at imm (its body). */
typedef struct vm_loop {
  const sh_hp_ins *code, *I;
} vm_loop;

static sh_value loop_cond(sh_interp *ip, const sh_ast *e, sh_value *fr, sh_value st, const void *u) {
  const vm_loop *l = u;
  (void)e;
  fr[l->I->c] = st;
  return exec(ip, l->code, fr, (int)l->I->k);
}

static sh_value loop_body(sh_interp *ip, const sh_ast *e, sh_value *fr, sh_value st, const void *u) {
  const vm_loop *l = u;
  (void)e, (void)st;
  return exec(ip, l->code, fr, l->I->imm);
}

static SH_NOINLINE sh_value while_(sh_interp *ip, const sh_hp_ins *code, const sh_hp_ins *I, sh_value *fr) {
  vm_loop l = {code, I};
  return sh_interp_while(ip, I->e, fr[I->a], fr[I->b], fr, loop_cond, loop_body, &l);
}

sh_value sh_hostvm_run(sh_interp *ip, const sh_hp_fn *hf, sh_value *fr) { return exec(ip, hf->code, fr, 0); }

/* The code from pc to its RET or YIELD. */
static sh_value exec(sh_interp *ip, const sh_hp_ins *code, sh_value *fr, int pc) {
  const sh_hostprog *hp = ip->hp;
  for (;;) {
    const sh_hp_ins *I = &code[pc++];
    sh_value *d = &fr[I->dst];
    switch ((sh_hp_op)I->op) {
    case HP_MOV: *d = fr[I->a]; continue;
    case HP_KINT: *d = mk_int(I->imm); break;
    case HP_KBOOL: *d = mk_bool(I->imm != 0); break;
    case HP_KF32: *d = mk_f32(I->e->fval); break;
    case HP_KTEN: *d = kten(ip, I->e); break;
    case HP_PARAM: *d = mk_tensor(sheaf_parameter(ip->g, ip->bind->params[I->imm])); break;
    case HP_CTOR0: *d = mk_agg(SH_V_ADT, agg_new(ip, I->imm, 0)); break;
    case HP_EVAL: *d = sh_interp_eval(ip, I->e, fr); break;
    case HP_JMP: pc = I->imm; continue;
    case HP_JZ: if (!fr[I->a].i) pc = I->imm; continue;
    case HP_JNZ: if (fr[I->a].i) pc = I->imm; continue;
    case HP_TBIN: *d = mk_tensor(I->f2(ip->g, fr[I->a].t, fr[I->b].t)); break;
    case HP_T1: *d = mk_tensor(I->f1(ip->g, fr[I->a].t)); break;
    case HP_TNEG: *d = mk_tensor(sheaf_scale(ip->g, fr[I->a].t, -1.0f)); break;
    case HP_IBIN: *d = sh_interp_i32_binary(ip, I->e, I->imm, fr[I->a].i, fr[I->b].i); break;
    case HP_INEG: *d = sh_interp_int_result(ip, I->e, 0, "-", fr[I->a].i, -(int64_t)fr[I->a].i); break;
    case HP_NOT: *d = mk_bool(!fr[I->a].i); break;
    case HP_FBIN: *d = sh_interp_f32_binary(ip, I->imm, fr[I->a].f, fr[I->b].f); break;
    case HP_FNEG: *d = mk_f32(-fr[I->a].f); break;
    case HP_AFFINE:
      *d = mk_tensor(sheaf_affine(ip->g, ip->bind->params[I->imm], fr[I->a].t,
                                  I->k >= 0 ? ip->bind->params[I->k] : SHEAF_NO_PARAM));
      break;
    case HP_SUM: *d = sum(ip, &hp->sums[I->imm], fr); break;
    case HP_LOOKUP: *d = sh_interp_lookup(ip, I->e, fr[I->a]); break;
    case HP_INDEX: *d = sh_interp_index(ip, I->e, fr[I->a], fr[I->b]); break;
    case HP_SLICE: *d = mk_tensor(sheaf_slice(ip->g, fr[I->a].t, I->k, I->imm)); break;
    case HP_SLICEX: *d = slicex(ip, I->e, fr[I->a]); break;
    case HP_AGG: *d = agg(ip, I, fr + I->a); break;
    case HP_FIELD: *d = fr[I->a].agg->items[I->imm]; continue;
    case HP_TAGSW: pc = hp->tables[I->imm + fr[I->a].agg->tag]; continue;
    case HP_TTAG: if (fr[I->a].agg->tag != I->n) pc = I->imm; continue;
    case HP_TINT: if (fr[I->a].i != I->k) pc = I->imm; continue;
    case HP_CALL: *d = call(ip, I, fr + I->a); break;
    case HP_KCALL: *d = kcall(ip, I, fr + I->a); break;
    case HP_REGION: *d = region(ip, I, fr + I->a); break;
    case HP_BI: *d = bi(ip, I, fr + I->a); break;
    case HP_BL: *d = bl(ip, I, fr + I->a); break;
    case HP_LSTM: case HP_TLSTM: *d = cell(ip, I, fr + I->a); break;
    case HP_CAT: *d = cat(ip, I->n, fr + I->a); break;
    case HP_PHASE:
      d->i = ip->phase;
      ip->phase = I->imm;
      sheaf_graph_phase(ip->g, ip->phase);
      break;
    case HP_PHASE_END:
      ip->phase = fr[I->a].i;
      sheaf_graph_phase(ip->g, ip->phase);
      break;
    case HP_FOR: for_start(ip, I, fr); break;
    case HP_FORNEXT: {
      sh_value *b = &fr[I->a];
      if (b[1].i >= b[3].i) {
        pc = I->imm;
        continue;
      }
      *d = I->c ? mk_int(b[2].i + b[1].i) : fr[I->b].agg->items[b[1].i];
      continue;
    }
    case HP_FORSTORE: {
      sh_value *b = &fr[I->a];
      b[0].agg->items[b[1].i++] = fr[I->b];
      pc = I->imm;
      continue;
    }
    case HP_FAIL: sh_interp_failf(ip, "%s", (const char *)I->p); return v_none;
    case HP_CHECK: break;
    case HP_WHILE: *d = while_(ip, code, I, fr); break;
    case HP_RET: case HP_YIELD: return fr[I->a];
    }
    if (SH_UNLIKELY(ip->err)) return v_none;
    if (I->chk && SH_UNLIKELY(ip->g && sheaf_graph_status(ip->g) != SHEAF_OK)) {
      graph_failed(ip, I->e);
      return v_none;
    }
  }
}
