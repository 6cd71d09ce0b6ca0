/*
 * analyze_regions.c — coarsening: the maximal straight-line runs of graph
 * ops, each a candidate fused kernel. A function body is walked in
 * evaluation order; ops join the current region; control flow (if, match,
 * for, while, phase), a call of a recursive function, a map / fold / scan
 * and a wait point end it (their arms and bodies get regions of their
 * own). A call of a non-recursive function whose body is straight-line is
 * inlined: its ops join the caller's region. Each region lists its inputs
 * (parameters; results of recursive calls; other values: the function's
 * inputs, host indices, values from earlier regions) and its outputs
 * (locals used outside it, the arm's result, values passed on to a call
 * or a wait).
 */
#include "compile/analyze.h"

typedef struct frame {
  const sh_fn *fn;
  const sh_ast *call; /* the inlined call; NULL in the home function */
  const struct frame *up;
  int depth; /* calls inlined around it */
} frame;

typedef struct rreg {
  sh_an_region r;
  int cap_ops, cap_in;
} rreg;

typedef struct rctx {
  sh_analyses *a;
  rreg *regs;
  int n, cap;
  int cur;             /* current region, -1 none */
  int32_t fn, scope;
  const char *label;
  int32_t **def;       /* per fn, per local slot: the region defining it, -1 */
  uint8_t **rec;       /* per fn, per local slot: bound from a recursive call's result */
  int8_t *straight;    /* per fn: 0 unknown, 1 straight-line, -1 not */
} rctx;

#define INLINE_DEPTH 64 /* calls inlined one inside another */

static bool straight_fn(rctx *x, const sh_fn *f, int depth);

static bool straight_expr(rctx *x, const sh_ast *e, int depth) {
  int32_t id = sh_an_id(x->a, e);
  if (id < 0) return false;
  const sh_an_node *n = &x->a->nodes[id];
  if (n->cls == SH_AN_CTRL || n->cls == SH_AN_WAIT) return false;
  if (e->kind == SH_EX_CALL && (e->fn_arg || (e->call == SH_CALL_FN && !straight_fn(x, e->ref.fn, depth + 1))))
    return false;
  const sh_ast *ch[16];
  int k = sh_an_children(e, ch, 16);
  if (k > 16) return false;
  for (int i = 0; i < k; i++)
    if (!straight_expr(x, ch[i], depth)) return false;
  return true;
}

/* A function whose body is straight-line (no control flow, waits, loops
 * over lists, or calls of any other kind) within INLINE_DEPTH calls: its
 * ops can join its caller's region. */
static bool straight_fn(rctx *x, const sh_fn *f, int depth) {
  if (f->recursive || !f->body || depth >= INLINE_DEPTH) return false;
  if (!x->straight[f->index]) {
    x->straight[f->index] = -1; /* while deciding */
    x->straight[f->index] = straight_expr(x, f->body, depth) ? 1 : -1;
  }
  return x->straight[f->index] > 0;
}

static rreg *cur_reg(rctx *x) {
  if (x->cur >= 0) return &x->regs[x->cur];
  if (x->n == x->cap) {
    int nc = x->cap ? 2 * x->cap : 16;
    rreg *nr = sh_an_alloc(x->a, (size_t)nc * sizeof *nr);
    if (!nr) return NULL;
    if (x->n) memcpy(nr, x->regs, (size_t)x->n * sizeof *nr);
    x->regs = nr, x->cap = nc;
  }
  rreg *r = &x->regs[x->n];
  memset(r, 0, sizeof *r);
  r->r.fn = x->fn;
  r->r.scope = x->scope;
  r->r.label = x->label;
  x->cur = x->n++;
  return r;
}

static bool in_region(const sh_an_region *r, int32_t id) {
  for (int i = 0; i < r->n_ops; i++)
    if (r->ops[i] == id) return true;
  return false;
}

static void render(sh_buf *b, const sh_module *m, const sh_ast *e, int lim) {
  if (lim <= 0) {
    sh_buf_puts(b, "...");
    return;
  }
  switch (e->kind) {
  case SH_EX_NAME: sh_buf_puts(b, sh_sym_name(&m->syms, e->name)); return;
  case SH_EX_INT: sh_buf_printf(b, "%lld", (long long)e->ival); return;
  case SH_EX_CALL:
    sh_buf_printf(b, "%s(", sh_sym_name(&m->syms, e->name));
    for (int i = 0; i < e->n; i++) {
      if (i) sh_buf_puts(b, ", ");
      render(b, m, e->items[i], lim - 1);
    }
    sh_buf_putc(b, ')');
    return;
  case SH_EX_INDEX:
    render(b, m, e->a, lim - 1);
    sh_buf_putc(b, '[');
    render(b, m, e->b, lim - 1);
    sh_buf_putc(b, ']');
    return;
  case SH_EX_FOR: sh_buf_printf(b, "(for %u:%u)", (unsigned)e->span.line, (unsigned)e->span.col); return;
  case SH_EX_IF: sh_buf_printf(b, "(if %u:%u)", (unsigned)e->span.line, (unsigned)e->span.col); return;
  case SH_EX_MATCH: sh_buf_printf(b, "(match %u:%u)", (unsigned)e->span.line, (unsigned)e->span.col); return;
  case SH_EX_WHILE: sh_buf_printf(b, "(while %u:%u)", (unsigned)e->span.line, (unsigned)e->span.col); return;
  default: sh_buf_printf(b, "(expr %u:%u)", (unsigned)e->span.line, (unsigned)e->span.col); return;
  }
}

static const char *render_str(sh_analyses *a, const sh_ast *e) {
  sh_buf b;
  sh_buf_init(&b, a->m->ctx);
  render(&b, a->m, e, 3);
  if (sh_buf_status(&b) != SHEAF_OK) a->nomem = true;
  const char *s = sh_an_strf(a, "%s", sh_buf_cstr(&b));
  sh_buf_free(&b);
  return s;
}

static void add_input(rctx *x, uint8_t kind, const char *name) {
  rreg *r = cur_reg(x);
  if (!r) return;
  for (int i = 0; i < r->r.n_in; i++)
    if (r->r.in[i].kind == kind && !strcmp(r->r.in[i].name, name)) return;
  if (r->r.n_in == r->cap_in) {
    int nc = r->cap_in ? 2 * r->cap_in : 8;
    sh_an_input *ni = sh_an_alloc(x->a, (size_t)nc * sizeof *ni);
    if (!ni) return;
    if (r->r.n_in) memcpy(ni, r->r.in, (size_t)r->r.n_in * sizeof *ni);
    r->r.in = ni, r->cap_in = nc;
  }
  r->r.in[r->r.n_in++] = (sh_an_input){.kind = kind, .name = name};
}

/* An operand of an op of the current region that the region does not compute. */
static void describe(rctx *x, const sh_ast *c, const frame *fr) {
  sh_analyses *a = x->a;
  const sh_module *m = a->m;
  int32_t id = sh_an_id(a, c);
  if (id < 0) return;
  const sh_an_node *n = &a->nodes[id];
  if ((n->cls == SH_AN_OP || n->cls == SH_AN_CALL) && x->cur >= 0 && in_region(&x->regs[x->cur].r, id)) return;
  switch (c->kind) {
  case SH_EX_NAME:
    if (c->res == SH_RES_PARAM) {
      add_input(x, SH_AN_IN_PARAM, sh_sym_name(&m->syms, c->name));
      return;
    }
    if (c->res != SH_RES_LOCAL || !c->ref.local) return; /* sizes, constructors */
    {
      const sh_local *l = c->ref.local;
      const sh_fn *f = fr->fn;
      if (fr->call) /* a parameter of an inlined function: the caller's argument */
        for (int k = 0; k < f->n_params && k < fr->call->n; k++)
          if (f->params[k] == l) {
            describe(x, fr->call->items[k], fr->up);
            return;
          }
      if (x->def[f->index][l->index] == x->cur && x->cur >= 0) return;
      add_input(x, x->rec[f->index][l->index] ? SH_AN_IN_REC : SH_AN_IN_OTHER, sh_sym_name(&m->syms, l->name));
    }
    return;
  case SH_EX_TUPLE:
    for (int i = 0; i < c->n; i++) describe(x, c->items[i], fr);
    return;
  case SH_EX_BLOCK: if (c->a) describe(x, c->a, fr); return;
  case SH_EX_INT: case SH_EX_BOOL: case SH_EX_FLOAT: return;
  default: break;
  }
  if (n->cls == SH_AN_LEAF) {
    if (c->kind == SH_EX_CALL) /* zeros(n), float(i): their host operands */
      for (int i = 0; i < c->n; i++) describe(x, c->items[i], fr);
    return;
  }
  if (n->cls == SH_AN_OP) return; /* an op of an inlined callee's own frame, seen through a tuple */
  bool rec = c->kind == SH_EX_CALL && ((c->call == SH_CALL_FN && c->ref.fn->recursive) ||
                                       (c->fn_arg && c->fn_arg->recursive));
  add_input(x, rec ? SH_AN_IN_REC : SH_AN_IN_OTHER, render_str(a, c));
}

/* Appends node id to the current region (an op, or an inlined call: a
 * marker whose value the region computes). */
static bool append(rctx *x, int32_t id) {
  rreg *r = cur_reg(x);
  if (!r) return false;
  if (r->r.n_ops == r->cap_ops) {
    int nc = r->cap_ops ? 2 * r->cap_ops : 16;
    int32_t *no = sh_an_alloc(x->a, (size_t)nc * sizeof *no);
    if (!no) return false;
    if (r->r.n_ops) memcpy(no, r->r.ops, (size_t)r->r.n_ops * sizeof *no);
    r->r.ops = no, r->cap_ops = nc;
  }
  r->r.ops[r->r.n_ops++] = id;
  return true;
}

static void add_op(rctx *x, int32_t id, const frame *fr) {
  if (!append(x, id)) return;
  const sh_ast *ch[16];
  const sh_ast *e = x->a->nodes[id].e;
  int k = sh_an_children(e, ch, 16);
  if (k > 16) {
    for (int i = 0; e->kind == SH_EX_CALL && i < e->n; i++) describe(x, e->items[i], fr);
    return;
  }
  for (int i = 0; i < k; i++) describe(x, ch[i], fr);
}

static void walk(rctx *x, const sh_ast *e, const frame *fr);

/* A body of its own: an arm, a branch, a loop body. */
static void scope(rctx *x, const sh_ast *body, const char *label, const frame *fr) {
  int32_t old_scope = x->scope;
  const char *old_label = x->label;
  x->cur = -1;
  x->scope = sh_an_id(x->a, body);
  x->label = label;
  walk(x, body, fr);
  x->cur = -1;
  x->scope = old_scope;
  x->label = old_label;
}

static bool value_in_region(rctx *x, const sh_ast *v, const frame *fr) {
  if (x->cur < 0 || !v) return false;
  int32_t id = sh_an_id(x->a, v);
  if (id < 0) return false;
  const sh_an_node *n = &x->a->nodes[id];
  if (n->cls == SH_AN_OP || n->cls == SH_AN_CALL) return in_region(&x->regs[x->cur].r, id);
  if (v->kind == SH_EX_BLOCK) return value_in_region(x, v->a, fr);
  if (v->kind == SH_EX_TUPLE) {
    bool any = false;
    for (int i = 0; i < v->n; i++) any = value_in_region(x, v->items[i], fr) || any;
    return any;
  }
  if (v->kind == SH_EX_NAME && v->res == SH_RES_LOCAL && v->ref.local)
    return x->def[fr->fn->index][v->ref.local->index] == x->cur;
  return false;
}

static void mark_pat(rctx *x, const sh_fn *f, const sh_pat *p, int region, bool rec) {
  if (!p) return;
  if (p->kind == SH_PAT_VAR && p->local) {
    x->def[f->index][p->local->index] = region;
    if (rec) x->rec[f->index][p->local->index] = 1;
  }
  for (int i = 0; i < p->n; i++) mark_pat(x, f, p->items[i], region, rec);
}

static bool is_rec_call(const sh_ast *v) {
  return v->kind == SH_EX_CALL && ((v->call == SH_CALL_FN && v->ref.fn->recursive) || (v->fn_arg && v->fn_arg->recursive));
}

static const char *sub_label(rctx *x, const char *what, const sh_ast *e) {
  return sh_an_strf(x->a, "%s, %s %u:%u", x->label, what, (unsigned)e->span.line, (unsigned)e->span.col);
}

static void walk_ctrl(rctx *x, const sh_ast *e, const frame *fr) {
  sh_analyses *a = x->a;
  switch (e->kind) {
  case SH_EX_IF:
    walk(x, e->a, fr);
    scope(x, e->b, sub_label(x, "if then", e), fr);
    scope(x, e->c, sub_label(x, "if else", e), fr);
    break;
  case SH_EX_MATCH:
    walk(x, e->a, fr);
    for (int i = 0; i < e->n; i++) {
      sh_buf b;
      sh_buf_init(&b, a->m->ctx);
      sh_an_pat_print(&b, a->m, e->arms[i].pat);
      if (sh_buf_status(&b) != SHEAF_OK) a->nomem = true;
      const char *l = sh_an_strf(a, "%s arm %s", x->label, sh_buf_cstr(&b));
      sh_buf_free(&b);
      mark_pat(x, fr->fn, e->arms[i].pat, -1, false);
      scope(x, e->arms[i].body, l, fr);
    }
    break;
  case SH_EX_FOR:
    walk(x, e->a, fr);
    if (e->b) walk(x, e->b, fr);
    scope(x, e->c, sub_label(x, "for body", e), fr);
    break;
  case SH_EX_WHILE:
    if (e->lets) walk(x, e->lets[0].value, fr);
    x->cur = -1;
    if (e->b) walk(x, e->b, fr);
    x->cur = -1;
    {
      const char *l = sub_label(x, "while body", e);
      int32_t old_scope = x->scope;
      const char *old_label = x->label;
      x->scope = sh_an_id(a, e->c), x->label = l;
      walk(x, e->a, fr); /* the condition runs with the body, each round */
      x->cur = -1;
      walk(x, e->c, fr);
      x->scope = old_scope, x->label = old_label;
    }
    break;
  case SH_EX_PHASE: scope(x, e->a, sh_an_strf(a, "%s, phase %lld", x->label, (long long)e->ival), fr); break;
  default: break;
  }
  x->cur = -1;
}

static void walk(rctx *x, const sh_ast *e, const frame *fr) {
  if (!e) return;
  sh_analyses *a = x->a;
  int32_t id = sh_an_id(a, e);
  if (id < 0) return;
  const sh_an_node *n = &a->nodes[id];
  switch (n->cls) {
  case SH_AN_CTRL: walk_ctrl(x, e, fr); return;
  case SH_AN_CALL: {
    for (int i = 0; i < e->n; i++) walk(x, e->items[i], fr);
    const sh_fn *g = e->ref.fn;
    if (fr->depth < INLINE_DEPTH && straight_fn(x, g, 0)) {
      frame in = {.fn = g, .call = e, .up = fr, .depth = fr->depth + 1};
      walk(x, g->body, &in);
      if (x->cur >= 0) append(x, id); /* the call's value: the region's */
      return;
    }
    x->cur = -1;
    return;
  }
  case SH_AN_WAIT:
    for (int i = 0; i < e->n; i++) walk(x, e->items[i], fr);
    x->cur = -1;
    return;
  default: break;
  }
  if (e->kind == SH_EX_BLOCK) {
    for (int i = 0; i < e->n; i++) {
      const sh_let *l = &e->lets[i];
      walk(x, l->value, fr);
      mark_pat(x, fr->fn, l->pat, value_in_region(x, l->value, fr) ? x->cur : -1, is_rec_call(l->value));
    }
    walk(x, e->a, fr);
    return;
  }
  const sh_ast *buf[16];
  int k = sh_an_children(e, buf, 16);
  if (k > 16) {
    for (int i = 0; i < e->n; i++) walk(x, e->items[i], fr); /* a long call, tuple or list */
  } else {
    for (int i = 0; i < k; i++) walk(x, buf[i], fr);
  }
  if (e->kind == SH_EX_CALL && e->fn_arg) x->cur = -1; /* map / fold / scan: a loop */
  if (n->cls == SH_AN_OP) add_op(x, id, fr);
}

/* The outputs of the regions of the home function f. */
static void add_out(sh_analyses *a, rreg *r, const char *name) {
  for (int i = 0; i < r->r.n_out; i++)
    if (!strcmp(r->r.out[i], name)) return;
  const char **no = sh_an_alloc(a, (size_t)(r->r.n_out + 1) * sizeof *no);
  if (!no) return;
  if (r->r.n_out) memcpy(no, r->r.out, (size_t)r->r.n_out * sizeof *no);
  no[r->r.n_out++] = name;
  r->r.out = no;
}

static const char *consumer(const sh_analyses *a, const sh_ast *p) {
  switch (p->kind) {
  case SH_EX_CALL: return sh_sym_name(&a->m->syms, p->name);
  case SH_EX_IF: return "if";
  case SH_EX_MATCH: return "match";
  case SH_EX_FOR: return "for";
  case SH_EX_WHILE: return "while";
  case SH_EX_PHASE: return "phase";
  case SH_EX_INDEX: return "index";
  default: return "expression";
  }
}

static bool member(const sh_analyses *a, const sh_an_region *r, int32_t id) {
  return id >= 0 && (a->nodes[id].cls == SH_AN_OP || a->nodes[id].cls == SH_AN_CALL) && in_region(r, id);
}

/* The outputs of the regions of the home function f: values that leave
 * them (the scope's result, a value passed to a call, a wait or control
 * flow), then locals defined in one and used outside it. */
static void outputs(rctx *x, int first, const sh_fn *f) {
  sh_analyses *a = x->a;
  for (int ri = first; ri < x->n; ri++) {
    rreg *r = &x->regs[ri];
    for (int oi = 0; oi < r->r.n_ops; oi++) {
      int32_t id = r->r.ops[oi];
      if (a->nodes[id].fn != f->index) continue; /* an inlined callee's */
      int32_t p = a->nodes[id].parent, c = id;
      if (member(a, &r->r, p)) continue;
      while (c != r->r.scope && p >= 0 && (a->nodes[p].e->kind == SH_EX_TUPLE ||
                        (a->nodes[p].e->kind == SH_EX_BLOCK && a->nodes[p].e->a == a->nodes[c].e)))
        c = p, p = a->nodes[p].parent;
      if (c == r->r.scope || p < 0) {
        add_out(a, r, "result");
        continue;
      }
      const sh_ast *pe = a->nodes[p].e;
      if (pe->kind == SH_EX_BLOCK || member(a, &r->r, p)) continue; /* a let's value: its locals below */
      add_out(a, r, sh_an_strf(a, "to %s %u:%u", consumer(a, pe), (unsigned)pe->span.line, (unsigned)pe->span.col));
    }
  }
  for (int i = a->fn_root[f->index]; i >= 0 && i < a->n_nodes && a->nodes[i].fn == f->index; i++) {
    const sh_ast *e = a->nodes[i].e;
    if (e->kind != SH_EX_NAME || e->res != SH_RES_LOCAL || !e->ref.local) continue;
    int d = x->def[f->index][e->ref.local->index];
    if (d < first) continue;
    if (member(a, &x->regs[d].r, a->nodes[i].parent)) continue;
    add_out(a, &x->regs[d], sh_sym_name(&a->m->syms, e->ref.local->name));
  }
}

void sh_an_regions(sh_analyses *a) {
  const sh_module *m = a->m;
  rctx x = {.a = a, .cur = -1};
  x.def = sh_an_alloc(a, (size_t)(m->n_fns + 1) * sizeof *x.def);
  x.rec = sh_an_alloc(a, (size_t)(m->n_fns + 1) * sizeof *x.rec);
  x.straight = sh_an_alloc(a, (size_t)(m->n_fns + 1));
  if (a->nomem) return;
  for (int i = 0; i < m->n_fns; i++) {
    int nl = m->fns[i]->n_locals + 1;
    x.def[i] = sh_an_alloc(a, (size_t)nl * sizeof **x.def);
    x.rec[i] = sh_an_alloc(a, (size_t)nl);
    if (a->nomem) return;
    for (int k = 0; k < nl; k++) x.def[i][k] = -1;
  }
  for (int i = 0; i < m->n_fns; i++) {
    const sh_fn *f = m->fns[i];
    if (!f->body || a->fn_root[i] < 0) continue;
    int first = x.n;
    frame home = {.fn = f};
    x.fn = i;
    x.cur = -1;
    x.scope = a->fn_root[i];
    x.label = sh_an_strf(a, "fn %s", sh_sym_name(&m->syms, f->name));
    walk(&x, f->body, &home);
    if (a->nomem) return;
    outputs(&x, first, f);
  }
  a->regions = sh_an_alloc(a, (size_t)(x.n + 1) * sizeof *a->regions);
  if (!a->regions) return;
  for (int i = 0; i < x.n; i++) a->regions[i] = x.regs[i].r;
  a->n_regions = x.n;
}
