/*
 * analyze_flow.c — the forward dataflow pass under the taint and depth
 * analyses: each function's body is walked once in evaluation order with
 * an environment of its locals, giving every node its taint (CONST, PARAM,
 * DATA: from the instance, TVAL: read back from a tensor; control
 * dependence included: the result of an if on DATA is DATA) and its static
 * depth (an op lands at max(input depths) + 1; the function's inputs,
 * parameters and host values have none, so the first op is at depth 0).
 * A call of a recursive function gives a symbol R<k> (its result's
 * depth); a call of a non-recursive one is inlined (its body walked with
 * the arguments' values, not recorded), within a budget. A while loop's
 * state and a fold's result are at a dynamic depth.
 */
#include "compile/analyze.h"

#define INLINE_BUDGET 200000 /* nodes walked by inlining, whole module */
#define INLINE_DEPTH 64       /* calls inlined one inside another */

typedef struct an_val {
  uint8_t taint;
  sh_an_depth d;
} an_val;

typedef struct flow {
  sh_analyses *a;
  int32_t fn;     /* the function being recorded */
  long budget;
  int depth;      /* of inlining */
} flow;

static an_val v_none(uint8_t taint) {
  an_val v = {.taint = taint};
  v.d.c = -1;
  for (int k = 0; k < SH_AN_MAX_SYM; k++) v.d.off[k] = -1;
  return v;
}

/* A symbol's depth is >= 0 (a result of ops): a constant part at most the
 * smallest offset is dominated and dropped. */
static void d_norm(sh_an_depth *d) {
  int lo = INT16_MAX;
  for (int k = 0; k < SH_AN_MAX_SYM; k++)
    if (d->off[k] >= 0 && d->off[k] < lo) lo = d->off[k];
  if (lo != INT16_MAX && d->c <= lo) d->c = -1;
}

static void d_max(sh_an_depth *x, const sh_an_depth *y) {
  if (y->c > x->c) x->c = y->c;
  for (int k = 0; k < SH_AN_MAX_SYM; k++)
    if (y->off[k] > x->off[k]) x->off[k] = y->off[k];
  x->dyn = x->dyn || y->dyn;
  d_norm(x);
}

static an_val join(an_val x, an_val y) {
  x.taint |= y.taint;
  d_max(&x.d, &y.d);
  return x;
}

static void d_inc(sh_an_depth *d) {
  if (d->c < INT16_MAX) d->c = (int16_t)(d->c + 1);
  for (int k = 0; k < SH_AN_MAX_SYM; k++)
    if (d->off[k] >= 0 && d->off[k] < INT16_MAX) d->off[k]++;
  d_norm(d);
}

static bool d_has_op(const sh_an_depth *d) {
  if (d->dyn || d->c >= 0) return true;
  for (int k = 0; k < SH_AN_MAX_SYM; k++)
    if (d->off[k] >= 0) return true;
  return false;
}

static an_val visit(flow *f, const sh_ast *e, an_val *env, bool rec);

static void bind(const sh_pat *p, an_val v, an_val *env) {
  if (!p) return;
  if (p->kind == SH_PAT_VAR && p->local) env[p->local->index] = v;
  for (int i = 0; i < p->n; i++) bind(p->items[i], v, env);
}

/* let pat = value: a tuple pattern against a tuple literal binds item by item. */
static an_val bind_let(flow *f, const sh_pat *p, const sh_ast *value, an_val *env, bool rec) {
  if (p && p->kind == SH_PAT_TUPLE && value->kind == SH_EX_TUPLE && value->n == p->n) {
    an_val all = v_none(0);
    for (int i = 0; i < value->n; i++) {
      an_val v = visit(f, value->items[i], env, rec);
      bind(p->items[i], v, env);
      all = join(all, v);
    }
    if (rec) {
      int32_t id = sh_an_id(f->a, value);
      if (id >= 0) f->a->nodes[id].taint |= all.taint, d_max(&f->a->nodes[id].depth, &all.d),
                   f->a->nodes[id].seen = true;
    }
    return all;
  }
  an_val v = visit(f, value, env, rec);
  bind(p, v, env);
  return v;
}

/* A call of fn g with argument values: a symbol when g is recursive, else g
 * inlined. */
static an_val call_fn(flow *f, const sh_ast *e, const sh_fn *g, const an_val *args, int n, bool rec) {
  an_val all = v_none(0);
  for (int i = 0; i < n; i++) all = join(all, args[i]);
  all.d = v_none(0).d;
  if (g->recursive) {
    an_val r = all;
    if (rec) {
      sh_an_fn *af = &f->a->fns[f->fn];
      int32_t id = sh_an_id(f->a, e);
      for (int k = 0; k < af->n_sym; k++) /* a loop's body walked again: the same symbol */
        if (af->sym[k].node == id) return r.d.off[k] = 0, r;
      if (af->n_sym < SH_AN_MAX_SYM) {
        r.d.off[af->n_sym] = 0;
        af->sym[af->n_sym++].node = id;
        return r;
      }
    }
    r.d.dyn = true;
    return r;
  }
  if (!g->body || f->budget <= 0 || g->n_params != n || f->depth >= INLINE_DEPTH) {
    for (int i = 0; i < n; i++) d_max(&all.d, &args[i].d);
    all.d.dyn = true;
    return all;
  }
  an_val *genv = sh_an_alloc(f->a, (size_t)(g->n_locals ? g->n_locals : 1) * sizeof *genv);
  if (!genv) return all;
  for (int i = 0; i < g->n_locals; i++) genv[i] = v_none(SH_AN_T_DATA);
  for (int i = 0; i < n; i++) genv[g->params[i]->index] = args[i];
  f->depth++;
  an_val r = visit(f, g->body, genv, false);
  f->depth--;
  return r;
}

static an_val visit_call(flow *f, const sh_ast *e, an_val *env, bool rec) {
  an_val buf[8];
  an_val *args = e->n <= 8 ? buf : sh_an_alloc(f->a, (size_t)e->n * sizeof *args);
  if (!args) return v_none(SH_AN_T_DATA);
  an_val all = v_none(0);
  for (int i = 0; i < e->n; i++) {
    args[i] = visit(f, e->items[i], env, rec);
    all = join(all, args[i]);
  }
  if (e->call == SH_CALL_FN) return call_fn(f, e, e->ref.fn, args, e->n, rec);
  if (e->call == SH_CALL_BUILTIN && e->fn_arg) { /* map / fold / scan */
    const sh_fn *g = e->fn_arg;
    if (e->builtin == SH_BI_MAP && e->n >= 1) {
      an_val one[1] = {args[e->n - 1]};
      return call_fn(f, e, g, one, g->n_params == 1 ? 1 : 0, rec);
    }
    an_val r = all;
    r.d.dyn = true;
    return r;
  }
  int32_t id = sh_an_id(f->a, e);
  uint8_t cls = id >= 0 ? f->a->nodes[id].cls : SH_AN_PLUMB;
  if (cls == SH_AN_OP) {
    d_inc(&all.d);
    return all;
  }
  if (cls == SH_AN_WAIT) {
    if (rec && id >= 0) { /* the op that is read back lands here */
      sh_an_depth d = all.d;
      d_inc(&d);
      d_max(&f->a->nodes[id].depth, &d);
    }
    an_val r = v_none(all.taint | SH_AN_T_TVAL);
    return r;
  }
  if (cls == SH_AN_LEAF) return v_none(all.taint | SH_AN_T_CONST);
  return all; /* constructors, list builtins, host scalars */
}

static an_val visit_kind(flow *f, const sh_ast *e, an_val *env, bool rec) {
  switch (e->kind) {
  case SH_EX_INT: case SH_EX_BOOL: case SH_EX_FLOAT: return v_none(SH_AN_T_CONST);
  case SH_EX_NAME:
    if (e->res == SH_RES_PARAM) return v_none(SH_AN_T_PARAM);
    if (e->res == SH_RES_LOCAL && e->ref.local) return env[e->ref.local->index];
    return v_none(SH_AN_T_CONST);
  case SH_EX_TUPLE: case SH_EX_LIST: {
    an_val all = v_none(e->n ? 0 : SH_AN_T_CONST);
    for (int i = 0; i < e->n; i++) all = join(all, visit(f, e->items[i], env, rec));
    return all;
  }
  case SH_EX_UNARY: case SH_EX_BINARY: case SH_EX_INDEX: case SH_EX_SLICE: {
    an_val x = visit(f, e->a, env, rec);
    if (e->b && e->kind != SH_EX_SLICE) x = join(x, visit(f, e->b, env, rec));
    int32_t id = sh_an_id(f->a, e);
    if (id >= 0 && f->a->nodes[id].cls == SH_AN_OP && !f->a->nodes[id].fused) d_inc(&x.d);
    return x;
  }
  case SH_EX_CALL: return visit_call(f, e, env, rec);
  case SH_EX_BLOCK:
    for (int i = 0; i < e->n; i++) bind_let(f, e->lets[i].pat, e->lets[i].value, env, rec);
    return e->a ? visit(f, e->a, env, rec) : v_none(SH_AN_T_CONST);
  case SH_EX_IF: {
    an_val c = visit(f, e->a, env, rec);
    an_val r = join(visit(f, e->b, env, rec), visit(f, e->c, env, rec));
    r.taint |= c.taint;
    return r;
  }
  case SH_EX_MATCH: {
    an_val s = visit(f, e->a, env, rec), r = v_none(0);
    for (int i = 0; i < e->n; i++) {
      bind(e->arms[i].pat, s, env);
      r = join(r, visit(f, e->arms[i].body, env, rec));
    }
    r.taint |= s.taint;
    return r;
  }
  case SH_EX_FOR: {
    an_val l = visit(f, e->a, env, rec);
    if (e->b) l = join(l, visit(f, e->b, env, rec));
    bind(e->pat, l, env);
    an_val r = visit(f, e->c, env, rec);
    r.taint |= l.taint;
    return r;
  }
  case SH_EX_WHILE: {
    const sh_let *st = e->lets;
    an_val s = st ? bind_let(f, st->pat, st->value, env, rec) : v_none(SH_AN_T_CONST), c = v_none(0);
    for (int round = 0; round < 2; round++) { /* twice: the state's taint reaches its fixed point */
      c = join(c, visit(f, e->a, env, rec));
      if (e->b) visit(f, e->b, env, rec);
      an_val body = visit(f, e->c, env, rec);
      s = join(s, body);
      s.taint |= c.taint;
      if (d_has_op(&body.d)) s.d.dyn = true;
      if (st) bind(st->pat, s, env);
    }
    return s;
  }
  case SH_EX_PHASE: return visit(f, e->a, env, rec);
  default: return v_none(SH_AN_T_CONST);
  }
}

static an_val visit(flow *f, const sh_ast *e, an_val *env, bool rec) {
  if (!e) return v_none(SH_AN_T_CONST);
  if (!rec && --f->budget < 0) {
    an_val r = v_none(SH_AN_T_DATA);
    r.d.dyn = true;
    return r;
  }
  an_val v = visit_kind(f, e, env, rec);
  if (rec) {
    int32_t id = sh_an_id(f->a, e);
    if (id >= 0) {
      sh_an_node *n = &f->a->nodes[id];
      n->taint |= v.taint;
      if (n->cls != SH_AN_WAIT) d_max(&n->depth, &v.d);
      n->seen = true;
    }
  }
  return v;
}

void sh_an_flow(sh_analyses *a) {
  const sh_module *m = a->m;
  flow f = {.a = a, .budget = INLINE_BUDGET};
  for (int i = 0; i < m->n_fns; i++) {
    const sh_fn *g = m->fns[i];
    if (!g->body) continue;
    an_val *env = sh_an_alloc(a, (size_t)(g->n_locals ? g->n_locals : 1) * sizeof *env);
    if (!env) return;
    for (int k = 0; k < g->n_locals; k++) env[k] = v_none(SH_AN_T_DATA);
    f.fn = i;
    visit(&f, g->body, env, true);
  }
}
