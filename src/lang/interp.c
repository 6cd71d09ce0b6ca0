/*
 * interp.c — runs a checked program (see interp.h): a direct walk over the
 * typed AST, host values in a pool reset per batch (a while loop's
 * iterations in regions of their own, freed as the loop goes: eval_while),
 * tensor operations issued
 * to the graph (sums of parameter products as one affine, longer sums as one
 * sum_n). Errors of the
 * program while it runs (a row, list index or element out of range, a
 * division by zero) name its FILE:LINE:COL. The builtins are
 * interp_builtin.c; a data instance to main's input value, interp_input.c.
 */
#include "lang/interp_int.h"
#include "lang/hostprog.h"

_Static_assert(sizeof(sh_value) <= 32, "sh_value grew: every list element and frame slot pays for it");

#include "base/stack.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The interpreter's first error of an instance: on the graph it builds on
 * (so a runner reports it with the instance), else on the context. */
sheaf_status sh_interp_fail_msg(sh_interp *ip, const char *msg) {
  if (ip->err) return ip->err;
  return ip->err = ip->g ? sheaf_graph_fail(ip->g, SHEAF_ERR_INVALID_ARG, "%s", msg)
                         : sh_fail(ip->ctx, SHEAF_ERR_INVALID_ARG, "%s", msg);
}

sheaf_status sh_interp_failf(sh_interp *ip, const char *fmt, ...) {
  if (ip->err) return ip->err;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return sh_interp_fail_msg(ip, msg);
}

/* A run-time error of the program at `at`: "FILE:LINE:COL: error: ...". */
sheaf_status sh_interp_fail_at(sh_interp *ip, sh_span at, const char *fmt, ...) {
  if (ip->err) return ip->err;
  char msg[512], full[640];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(full, sizeof full, "%s:%u:%u: error: %s", ip->m->diags.file, (unsigned)at.line,
           (unsigned)at.col, msg);
  return sh_interp_fail_msg(ip, full);
}

/* sh_check_budget for a size the program computed at e: the error names
 * the source position. */
sheaf_status sh_interp_budget_at(sh_interp *ip, const sh_ast *e, double bytes, const char *fmt, ...) {
  if (bytes <= (double)sheaf_ctx_memory_limit(ip->ctx)) return SHEAF_OK;
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  sh_check_budget(ip->ctx, bytes, "%s", what); /* the message, on the context */
  return sh_interp_fail_at(ip, e->span, "%s", sheaf_ctx_last_error(ip->ctx));
}

/* ------------------------------------------------------------- sizes */

static int64_t size_eval(const sh_interp *ip, const sh_size *s, int depth);

static int64_t var_value(const sh_interp *ip, uint32_t var, int depth) {
  const sh_sizevar *v = &ip->m->sizes.v[var];
  if (v->kind == SH_SV_FLEX && v->bound && depth < 16) return size_eval(ip, &v->binding, depth + 1);
  if (v->has_value) return v->value;
  return ip->sv[var];
}

static int64_t size_eval(const sh_interp *ip, const sh_size *s, int depth) {
  int64_t r = 0;
  for (int i = 0; i < s->n; i++) {
    int64_t t = s->t[i].coef;
    for (int k = 0; k < s->t[i].deg; k++) t *= var_value(ip, s->t[i].var[k], depth);
    r += t;
  }
  return r;
}

/* ------------------------------------------------------------- values */

/* An aggregate of n values in the current region: zeroed, or (raw) for a
 * caller that writes every item before the aggregate can be read. */
sh_agg *sh_interp_agg_alloc(sh_interp *ip, int32_t tag, int32_t n, bool raw) {
  size_t bytes = sizeof(sh_agg) + (size_t)n * sizeof(sh_value);
  sh_agg *a = raw ? sh_lang_alloc_raw(ip->cur, bytes) : sh_lang_alloc(ip->cur, bytes);
  if (!a) {
    if (!ip->err) ip->err = SHEAF_ERR_NOMEM;
    return NULL;
  }
  a->tag = tag;
  a->n = n;
  a->gen = ip->cur_gen;
  return a;
}

/* The i32 result r of `a op b` (computed exactly in int64): an error at e
 * when it does not fit, as i32 arithmetic never wraps silently. */
sh_value sh_interp_int_result(sh_interp *ip, const sh_ast *e, int64_t a, const char *op, int64_t b, int64_t r) {
  if (r >= INT32_MIN && r <= INT32_MAX) return mk_int((int32_t)r);
  if (e->kind == SH_EX_UNARY)
    return sh_interp_fail_at(ip, e->span, "i32 overflow: -(%lld) is outside -2147483648..2147483647",
                   (long long)b), v_none;
  return sh_interp_fail_at(ip, e->span, "i32 overflow: %lld %s %lld = %lld is outside -2147483648..2147483647",
                 (long long)a, op, (long long)b, (long long)r), v_none;
}

/* Host scalar operators: f32 operands compute in double and round once;
 * i32 operands exactly in int64, then checked (division by zero, overflow
 * at e). */
sh_value sh_interp_f32_binary(sh_interp *ip, int op, double a, double b) {
  switch (op) {
  case SH_TK_PLUS: return mk_f32(a + b);
  case SH_TK_MINUS: return mk_f32(a - b);
  case SH_TK_STAR: return mk_f32(a * b);
  case SH_TK_SLASH: return mk_f32(a / b);
  case SH_TK_EQ: return mk_bool(a == b);
  case SH_TK_NE: return mk_bool(a != b);
  case SH_TK_LT: return mk_bool(a < b);
  case SH_TK_LE: return mk_bool(a <= b);
  case SH_TK_GT: return mk_bool(a > b);
  case SH_TK_GE: return mk_bool(a >= b);
  default: return sh_interp_failf(ip, "interp: bad f32 operator"), v_none;
  }
}

sh_value sh_interp_i32_binary(sh_interp *ip, const sh_ast *e, int op, int64_t a, int64_t b) {
  switch (op) {
  case SH_TK_PLUS: return sh_interp_int_result(ip, e, a, "+", b, a + b);
  case SH_TK_MINUS: return sh_interp_int_result(ip, e, a, "-", b, a - b);
  case SH_TK_STAR: return sh_interp_int_result(ip, e, a, "*", b, a * b);
  case SH_TK_SLASH:
  case SH_TK_PERCENT:
    if (b == 0) return sh_interp_fail_at(ip, e->span, "division by zero"), v_none;
    if (op == SH_TK_SLASH) return sh_interp_int_result(ip, e, a, "/", b, a / b);
    return mk_int((int32_t)(a % b));
  case SH_TK_EQ: return mk_bool(a == b);
  case SH_TK_NE: return mk_bool(a != b);
  case SH_TK_LT: return mk_bool(a < b);
  case SH_TK_LE: return mk_bool(a <= b);
  case SH_TK_GT: return mk_bool(a > b);
  case SH_TK_GE: return mk_bool(a >= b);
  default: return sh_interp_failf(ip, "interp: bad operator"), v_none;
  }
}

size_t sh_value_tensors(sh_value v, sheaf_expr *out, size_t cap) {
  if (v.kind == SH_V_TENSOR) {
    if (cap) out[0] = v.t;
    return 1;
  }
  if (v.kind != SH_V_TUPLE && v.kind != SH_V_LIST && v.kind != SH_V_ADT) return 0;
  size_t n = 0;
  for (int32_t i = 0; i < v.agg->n; i++)
    n += sh_value_tensors(v.agg->items[i], out + (n < cap ? n : cap), n < cap ? cap - n : 0);
  return n;
}

/* ------------------------------------------------------------- evaluation */

static sh_value eval(sh_interp *ip, const sh_ast *e, sh_value *fr);
static sh_value call_fn(sh_interp *ip, const sh_fn *f, const sh_value *args, const sh_ast *site);

static bool pat_bind(sh_interp *ip, const sh_pat *p, const sh_value *v, sh_value *fr) {
  switch (p->kind) {
  case SH_PAT_WILD: return true;
  case SH_PAT_VAR: fr[p->local->index] = *v; return true;
  case SH_PAT_INT:
  case SH_PAT_BOOL: return v->i == p->ival;
  case SH_PAT_CTOR:
    if (v->agg->tag != p->ctor->index) return false;
    /* fall through */
  case SH_PAT_TUPLE:
    for (int i = 0; i < p->n; i++)
      if (!pat_bind(ip, p->items[i], &v->agg->items[i], fr)) return false;
    return true;
  default: sh_interp_failf(ip, "interp: bad pattern"); return false;
  }
}

/* eval and call_fn for the builtins (interp_builtin.c) */
sh_value sh_interp_eval(sh_interp *ip, const sh_ast *e, sh_value *fr) { return eval(ip, e, fr); }
sh_value sh_interp_call(sh_interp *ip, const sh_fn *f, const sh_value *args, const sh_ast *site) {
  return call_fn(ip, f, args, site);
}
int64_t sh_interp_size(const sh_interp *ip, const sh_size *s) { return size_eval(ip, s, 0); }

/* ------------------------------------------------------------- sums */


/* The terms of a chain of '+' (at most cap; -1 when there are more). */
int sh_interp_sum_terms(const sh_ast *e, const sh_ast **t, int n, int cap) {
  if (n < 0) return -1;
  if (e->kind == SH_EX_BINARY && e->op == SH_TK_PLUS)
    return sh_interp_sum_terms(e->b, t, sh_interp_sum_terms(e->a, t, n, cap), cap);
  if (n == cap) return -1;
  t[n] = e;
  return n + 1;
}

bool sh_interp_same_type(const sh_type *a, const sh_type *b) {
  if (a == b) return true;
  if (a->kind != SH_TY_TENSOR || b->kind != SH_TY_TENSOR || a->n != b->n) return false;
  for (int d = 0; d < a->n; d++)
    if (!sh_size_equal(&a->dims[d], &b->dims[d])) return false;
  return true;
}

static bool is_param_product(const sh_ast *x) {
  return x->kind == SH_EX_BINARY && x->op == SH_TK_AT && x->param_rhs && x->type->kind == SH_TY_TENSOR;
}

static bool is_param_vector(const sh_ast *x) {
  return x->kind == SH_EX_NAME && x->res == SH_RES_PARAM && x->ref.param->type->n == 1;
}

/* A sum of products with parameters on the right and at most one parameter
 * vector as the bias (of the products' width) is one sheaf_affine(_n): the
 * weights are packed once and the bias is folded in. With a broadcast
 * f32[1] term that is all; otherwise (every term of the sum's shape) the
 * affine and the other terms are added by one sheaf_sum_n, as a C model
 * would write `a + b + c`. false: none of this applies (nothing evaluated):
 * the caller adds two operands. */
static bool tensor_sum(sh_interp *ip, const sh_ast *e, sh_value *fr, sh_value *out) {
  const sh_ast *t[SH_INTERP_SUM_MAX];
  int n = sh_interp_sum_terms(e, t, 0, SH_INTERP_SUM_MAX), n_mm = 0, bias = -1;
  if (n < 2) return false;
  bool uniform = true;
  uint8_t cls[SH_INTERP_SUM_MAX]; /* 0 another term, 1 a product with a parameter, 2 the bias */
  for (int i = 0; i < n; i++) {
    cls[i] = 0;
    if (!sh_interp_same_type(t[i]->type, e->type)) uniform = false;
    if (is_param_product(t[i]) && n_mm < 4) cls[i] = 1, n_mm++;
    else if (is_param_vector(t[i]) && bias < 0) bias = i;
  }
  if (!uniform) { /* the affine alone: x @ W + b, a vector bias as wide (rows of a matrix too) */
    if (n_mm != n - (bias >= 0)) return false;
    if (bias >= 0) {
      const sh_type *mt = e->type, *bt = t[bias]->ref.param->type;
      if (size_eval(ip, &bt->dims[0], 0) != size_eval(ip, &mt->dims[mt->n - 1], 0)) return false;
    }
  }
  if (n_mm == 0 && n == 2) return false;
  if (n_mm > 0 && bias >= 0) cls[bias] = 2;
  sheaf_param w[4];
  sheaf_expr xs[4], pieces[SH_INTERP_SUM_MAX];
  int np = 0, at = -1, k = 0;
  for (int i = 0; i < n; i++) { /* in source order */
    if (cls[i] == 2) continue;
    sh_value v = eval(ip, cls[i] == 1 ? t[i]->a : t[i], fr);
    if (ip->err) return *out = v_none, true;
    if (cls[i] == 1) {
      xs[k] = v.t;
      w[k++] = ip->bind->params[t[i]->b->ref.param->index];
      if (at < 0) at = np++;
    } else {
      pieces[np++] = v.t;
    }
  }
  if (n_mm) {
    sheaf_param b = bias >= 0 ? ip->bind->params[t[bias]->ref.param->index] : SHEAF_NO_PARAM;
    pieces[at] = n_mm == 1 ? sheaf_affine(ip->g, w[0], xs[0], b) : sheaf_affine_n(ip->g, n_mm, w, xs, b);
  }
  *out = mk_tensor(np == 1 ? pieces[0] : np == 2 ? sheaf_add(ip->g, pieces[0], pieces[1]) : sheaf_sum_n(ip->g, np, pieces));
  return true;
}

static SH_NOINLINE sh_value binary(sh_interp *ip, const sh_ast *e, sh_value *fr) {
  int op = e->op;
  if (op == SH_TK_ANDAND || op == SH_TK_OROR) {
    sh_value x = eval(ip, e->a, fr);
    if (ip->err) return v_none;
    if ((op == SH_TK_ANDAND) != (x.i != 0)) return x;
    return eval(ip, e->b, fr);
  }
  /* x @ W + b, x1 @ W1 + x2 @ W2 + b, a + b + c, ...: one affine, one sum */
  if (op == SH_TK_PLUS && e->type->kind == SH_TY_TENSOR) {
    sh_value r;
    if (tensor_sum(ip, e, fr, &r)) return r;
  }
  if (op == SH_TK_AT && e->param_rhs) {
    sh_value x = eval(ip, e->a, fr);
    if (ip->err) return v_none;
    return mk_tensor(sheaf_affine(ip->g, ip->bind->params[e->b->ref.param->index], x.t, SHEAF_NO_PARAM));
  }
  sh_value x = eval(ip, e->a, fr);
  if (ip->err) return v_none;
  sh_value y = eval(ip, e->b, fr);
  if (ip->err) return v_none;
  if (x.kind == SH_V_TENSOR) {
    sheaf_graph *g = ip->g;
    switch (op) {
    case SH_TK_PLUS: return mk_tensor(sheaf_add(g, x.t, y.t));
    case SH_TK_MINUS: return mk_tensor(sheaf_sub(g, x.t, y.t));
    case SH_TK_STAR: return mk_tensor(sheaf_mul(g, x.t, y.t));
    case SH_TK_SLASH: return mk_tensor(sheaf_div(g, x.t, y.t));
    case SH_TK_AT: return mk_tensor(sheaf_matmul(g, x.t, y.t));
    case SH_TK_GT: return mk_tensor(sheaf_gt(g, x.t, y.t)); /* masks */
    case SH_TK_GE: return mk_tensor(sheaf_ge(g, x.t, y.t));
    case SH_TK_LT: return mk_tensor(sheaf_gt(g, y.t, x.t));
    case SH_TK_LE: return mk_tensor(sheaf_ge(g, y.t, x.t));
    case SH_TK_EQ: return mk_tensor(sheaf_eq(g, x.t, y.t));
    case SH_TK_NE: return mk_tensor(sheaf_ne(g, x.t, y.t));
    default: return sh_interp_failf(ip, "interp: bad tensor operator"), v_none;
    }
  }
  if (x.kind == SH_V_F32) return sh_interp_f32_binary(ip, op, x.f, y.f); /* host floats */
  return sh_interp_i32_binary(ip, e, op, x.i, y.i); /* i32: exact in int64 */
}

/* ------------------------------------------------------------- calls */

/* A frame of f's locals (not zeroed: every local is bound before it is read). */
static sh_value *frame_new(sh_interp *ip, const sh_fn *f) {
  int n = ip->vm ? ip->hp->fns[f->index].n_regs : f->n_locals;
  sh_value *fr = sh_lang_alloc_raw(ip->cur, (size_t)(n ? n : 1) * sizeof *fr);
  if (!fr && !ip->err) ip->err = SHEAF_ERR_NOMEM;
  return fr;
}

/* f's body: its host program, or the walk. */
static inline sh_value body(sh_interp *ip, const sh_fn *f, sh_value *fr) {
  if (ip->vm && ip->hp->fns[f->index].code) return sh_hostvm_run(ip, &ip->hp->fns[f->index], fr);
  return eval(ip, f->body, fr);
}

/* f's body on a frame whose parameters are bound. */
static sh_value run_body(sh_interp *ip, const sh_fn *f, sh_value *fr) {
  if (!f->n_size_params) return body(ip, f, fr);
  int64_t saved[8];
  int ns = f->n_size_params < 8 ? f->n_size_params : 8;
  /* bind the sizes f is generic in from its tensor arguments */
  for (int k = 0; k < ns; k++) saved[k] = ip->sv[f->size_params[k]];
  for (int i = 0; i < f->n_params; i++) {
    const sh_type *t = f->param_types[i];
    const sh_value *a = &fr[f->params[i]->index];
    if (t->kind != SH_TY_TENSOR || a->kind != SH_V_TENSOR) continue;
    int64_t shape[2];
    int r = sheaf_expr_shape(ip->g, a->t, shape);
    for (int d = 0; d < t->n && d < r; d++) {
      const sh_size *s = &t->dims[d];
      if (s->n == 1 && s->t[0].deg == 1 && s->t[0].coef != 0 &&
          ip->m->sizes.v[s->t[0].var[0]].kind == SH_SV_LOCAL)
        ip->sv[s->t[0].var[0]] = shape[d] / s->t[0].coef;
    }
  }
  sh_value r = body(ip, f, fr);
  for (int k = 0; k < ns; k++) ip->sv[f->size_params[k]] = saved[k];
  return r;
}


/* A call at `site` (NULL: main) that the thread's stack cannot hold. */
static sh_value stack_full(sh_interp *ip, const sh_fn *f, const sh_ast *site) {
  const char *name = sh_sym_name(&ip->m->syms, f->name);
#define STACK_FULL_MSG "calls nested %d deep leave too little of this thread's stack for '%s' " \
                       "(%zu KiB left; the sheaf tool and sheaf_runner's threads have %zu MiB)"
  size_t room = sh_stack_room() / 1024, big = SH_BIG_STACK >> 20;
  if (site) return sh_interp_fail_at(ip, site->span, STACK_FULL_MSG, ip->depth, name, room, big), v_none;
  return sh_interp_failf(ip, STACK_FULL_MSG, ip->depth, name, room, big), v_none;
#undef STACK_FULL_MSG
}

/* Runs f's body on a frame whose parameters are bound; site is the call. */
static sh_value run_fn(sh_interp *ip, const sh_fn *f, sh_value *fr, const sh_ast *site) {
  if (sh_stack_room() < SH_INTERP_STACK_RESERVE) return stack_full(ip, f, site);
  ip->depth++;
  sh_value r = run_body(ip, f, fr);
  ip->depth--;
  return r;
}

sh_value sh_interp_run_fn(sh_interp *ip, const sh_fn *f, sh_value *fr, const sh_ast *site) {
  return run_fn(ip, f, fr, site);
}

static sh_value call_fn(sh_interp *ip, const sh_fn *f, const sh_value *args, const sh_ast *site) {
  sh_value *fr = frame_new(ip, f);
  if (!fr) return v_none;
  for (int i = 0; i < f->n_params; i++) fr[f->params[i]->index] = args[i];
  return run_fn(ip, f, fr, site);
}

/* A kernel's call: one batched runtime op (bind_kernels.c compiled it). */
static SH_NOINLINE sh_value call_kernel(sh_interp *ip, const sh_ast *e, sh_value *fr) {
  sheaf_expr in[64];
  if (e->n > 64) return sh_interp_failf(ip, "interp: over 64 kernel arguments"), v_none;
  for (int i = 0; i < e->n; i++) {
    in[i] = eval(ip, e->items[i], fr).t;
    if (ip->err) return v_none;
  }
  int k = e->ref.kernel->index;
  sheaf_kernel *K = k < ip->bind->n_kernels ? ip->bind->kernels[k] : NULL;
  if (!K) return sh_interp_failf(ip, "interp: kernel %d was not compiled", k), v_none;
  return mk_tensor(sheaf_kernel_call(ip->g, K, e->n, in)); /* eval checks the graph (built) */
}

static SH_NOINLINE sh_value eval_call(sh_interp *ip, const sh_ast *e, sh_value *fr) {
  if (e->call == SH_CALL_BUILTIN) return sh_interp_builtin(ip, e, fr);
  if (e->call == SH_CALL_FN) { /* the arguments go straight into the callee's frame */
    const sh_fn *f = e->ref.fn;
    sh_value *nf = frame_new(ip, f);
    if (!nf) return v_none;
    for (int i = 0; i < e->n; i++) {
      nf[f->params[i]->index] = eval(ip, e->items[i], fr);
      if (ip->err) return v_none;
    }
    return run_fn(ip, f, nf, e);
  }
  if (e->call == SH_CALL_CTOR) {
    sh_agg *a = agg_new(ip, e->ref.ctor->index, e->n);
    if (!a) return v_none;
    for (int i = 0; i < e->n; i++) {
      a->items[i] = eval(ip, e->items[i], fr);
      if (ip->err) return v_none;
    }
    return mk_agg(SH_V_ADT, a);
  }
  if (e->call == SH_CALL_KERNEL) return call_kernel(ip, e, fr);
  return sh_interp_failf(ip, "interp: unresolved call"), v_none;
}

/* ------------------------------------------------------------- other expressions */

/* emb[i]: a word of the data looks up its row (sh_lang_word_row); any
 * other i32 is a row number, checked. */
sh_value sh_interp_lookup(sh_interp *ip, const sh_ast *e, sh_value i) {
  int p = e->a->ref.param->index;
  int64_t rows = ip->bind->table_rows[p], row = i.i;
  if (i.word) {
    row = sh_lang_word_row(ip->bind, p, i.i);
  } else if (row < 0 || row >= rows) {
    const char *nm = sh_sym_name(&ip->m->syms, e->a->ref.param->name);
    return sh_interp_fail_at(ip, e->span, "%s[%d]: row %d is out of range: %s has %lld rows (0..%lld)", nm,
                             (int)i.i, (int)i.i, nm, (long long)rows, (long long)rows - 1), v_none;
  }
  return mk_tensor(sheaf_lookup(ip->g, ip->bind->params[p], row));
}

sh_value sh_interp_index(sh_interp *ip, const sh_ast *e, sh_value x, sh_value i) {
  if (x.kind == SH_V_LIST) {
    if (i.i < 0 || i.i >= x.agg->n)
      return sh_interp_fail_at(ip, e->span, "index %d is out of range for a list of %d element%s", (int)i.i,
                               (int)x.agg->n, x.agg->n == 1 ? "" : "s"), v_none;
    return x.agg->items[i.i];
  }
  int64_t shape[2] = {0, 0};
  int r = sheaf_expr_shape(ip->g, x.t, shape);
  if (r == 2) {
    if (i.i < 0 || i.i >= shape[0])
      return sh_interp_fail_at(ip, e->span, "row %d is out of range for a matrix of %lld row%s", (int)i.i,
                               (long long)shape[0], shape[0] == 1 ? "" : "s"), v_none;
    return mk_tensor(sheaf_row(ip->g, x.t, i.i));
  }
  if (r >= 1 && (i.i < 0 || i.i >= shape[r - 1]))
    return sh_interp_fail_at(ip, e->span, "index %d is out of range for a tensor of %lld element%s", (int)i.i,
                             (long long)shape[r - 1], shape[r - 1] == 1 ? "" : "s"), v_none;
  return mk_tensor(sheaf_pick(ip->g, x.t, i.i));
}

static SH_NOINLINE sh_value eval_index(sh_interp *ip, const sh_ast *e, sh_value *fr) {
  sh_value i = eval(ip, e->b, fr);
  if (ip->err) return v_none;
  if (e->lookup) return sh_interp_lookup(ip, e, i);
  sh_value x = eval(ip, e->a, fr);
  if (ip->err) return v_none;
  return sh_interp_index(ip, e, x, i);
}

static SH_NOINLINE sh_value eval_slice(sh_interp *ip, const sh_ast *e, sh_value *fr) {
  sh_value x = eval(ip, e->a, fr);
  if (ip->err) return v_none;
  return mk_tensor(sheaf_slice(ip->g, x.t, size_eval(ip, e->lo, 0), size_eval(ip, e->hi, 0)));
}

static SH_NOINLINE sh_value eval_name(sh_interp *ip, const sh_ast *e) {
  switch (e->res) {
  case SH_RES_PARAM: return mk_tensor(sheaf_parameter(ip->g, ip->bind->params[e->ref.param->index]));
  case SH_RES_SIZE: return mk_int((int32_t)var_value(ip, e->ref.size_var, 0));
  case SH_RES_CTOR: return mk_agg(SH_V_ADT, agg_new(ip, e->ref.ctor->index, 0));
  default: return sh_interp_failf(ip, "interp: unresolved name"), v_none;
  }
}

static SH_NOINLINE sh_value eval_items(sh_interp *ip, const sh_ast *e, sh_value *fr) {
  sh_agg *a = agg_new(ip, -1, e->n);
  if (!a) return v_none;
  for (int i = 0; i < e->n; i++) {
    a->items[i] = eval(ip, e->items[i], fr);
    if (ip->err) return v_none;
  }
  return mk_agg(e->kind == SH_EX_TUPLE ? SH_V_TUPLE : SH_V_LIST, a);
}

static SH_NOINLINE sh_value eval_unary(sh_interp *ip, const sh_ast *e, sh_value *fr) {
  sh_value x = eval(ip, e->a, fr);
  if (ip->err) return v_none;
  if (e->op == SH_TK_BANG) return mk_bool(!x.i);
  if (x.kind == SH_V_TENSOR) return mk_tensor(sheaf_scale(ip->g, x.t, -1.0f));
  if (x.kind == SH_V_F32) return mk_f32(-x.f);
  return sh_interp_int_result(ip, e, 0, "-", x.i, -(int64_t)x.i);
}

static SH_NOINLINE sh_value eval_block(sh_interp *ip, const sh_ast *e, sh_value *fr) {
  for (int i = 0; i < e->n; i++) {
    sh_value v = eval(ip, e->lets[i].value, fr);
    if (ip->err) return v_none;
    if (!pat_bind(ip, e->lets[i].pat, &v, fr)) return sh_interp_failf(ip, "let: pattern did not match"), v_none;
  }
  return eval(ip, e->a, fr);
}

static SH_NOINLINE sh_value eval_if(sh_interp *ip, const sh_ast *e, sh_value *fr) {
  sh_value c = eval(ip, e->a, fr);
  if (ip->err) return v_none;
  return eval(ip, c.i ? e->b : e->c, fr);
}

static SH_NOINLINE sh_value eval_match(sh_interp *ip, const sh_ast *e, sh_value *fr) {
  sh_value s = eval(ip, e->a, fr);
  if (ip->err) return v_none;
  for (int i = 0; i < e->n; i++)
    if (pat_bind(ip, e->arms[i].pat, &s, fr)) return eval(ip, e->arms[i].body, fr);
  return sh_interp_failf(ip, "match: no arm matched"), v_none;
}

static SH_NOINLINE sh_value eval_for(sh_interp *ip, const sh_ast *e, sh_value *fr) {
  sh_value xs = eval(ip, e->a, fr);
  if (ip->err) return v_none;
  int32_t lo = 0, n;
  if (e->b) {
    sh_value hi = eval(ip, e->b, fr);
    if (ip->err) return v_none;
    lo = xs.i;
    int64_t len = hi.i > lo ? (int64_t)hi.i - lo : 0;
    if (len > INT32_MAX)
      return sh_interp_fail_at(ip, e->span, "for over %d..%d: %lld iterations, more than a list can hold "
                     "(2147483647)", (int)lo, (int)hi.i, (long long)len), v_none;
    if (sh_interp_budget_at(ip, e, (double)len * sizeof(sh_value), "for over %d..%d (%lld iterations)",
                  (int)lo, (int)hi.i, (long long)len))
      return v_none;
    n = (int32_t)len;
  } else {
    n = xs.agg->n;
  }
  sh_agg *r = agg_new_raw(ip, -1, n);
  if (!r) return v_none;
  for (int32_t k = 0; k < n; k++) {
    sh_value v = e->b ? mk_int(lo + k) : xs.agg->items[k];
    if (!pat_bind(ip, e->pat, &v, fr)) return sh_interp_failf(ip, "for: pattern did not match"), v_none;
    r->items[k] = eval(ip, e->c, fr);
    if (ip->err) return v_none;
  }
  return mk_agg(SH_V_LIST, r);
}

/* A region of a while loop: a pool whose values die together. */
typedef struct region {
  sh_lang_pool pool;
  uint64_t gen;
} region;

static void region_enter(sh_interp *ip, region *r) {
  ip->cur = &r->pool;
  ip->cur_gen = r->gen;
}

/* Empties r for reuse under a new generation. */
static void region_recycle(sh_interp *ip, region *r) {
  sh_lang_pool_reset(&r->pool);
  r->gen = ++ip->next_gen;
}

/* v with every aggregate of generation >= gen (a region of the loop that is
 * about to be emptied) copied into the current region; older ones (made
 * before the loop) are shared. A copied aggregate is marked forwarded
 * (gen UINT64_MAX, its copy in items[0].agg) so that one reached twice is
 * copied once (a state that shares parts stays the same size). */
#define FORWARDED UINT64_MAX
static sh_value evacuate(sh_interp *ip, sh_value v, uint64_t gen) {
  if (v.kind != SH_V_TUPLE && v.kind != SH_V_LIST && v.kind != SH_V_ADT) return v;
  sh_agg *a = v.agg;
  if (a->gen == FORWARDED) return v.agg = a->items[0].agg, v;
  if (a->gen < gen) return v;
  if (sh_stack_room() < SH_INTERP_STACK_RESERVE)
    return sh_interp_failf(ip, "while: its state is nested too deep to keep across iterations"), v_none;
  sh_agg *r = agg_new_raw(ip, a->tag, a->n);
  if (!r) return v_none;
  if (a->n == 0) return v.agg = r, v;
  memcpy(r->items, a->items, (size_t)a->n * sizeof *r->items);
  a->gen = FORWARDED;
  a->items[0].agg = r; /* r->items[0] keeps the original */
  for (int32_t k = 0; k < r->n && !ip->err; k++) r->items[k] = evacuate(ip, r->items[k], gen);
  return v.agg = r, v;
}

/* Bytes a loop's iterations may leave in its work region before the live
 * state is copied out and the rest freed (a copy per iteration would make
 * every step O(state)). */
#define SH_WHILE_COLLECT ((size_t)256 << 10)

/* while STATE = INIT; COND max N { BODY }: N is read once; a condition that
 * still holds after N iterations stops the instance with an error at the
 * loop (a loop never ends silently short).
 *
 * The iterations' values are made in a region of their own (work); once
 * it holds SH_WHILE_COLLECT bytes, what the state holds of them is copied
 * into a fresh state region and the previous state's and the work's regions
 * are emptied, so an instance's host memory is its live state plus at most
 * about SH_WHILE_COLLECT, not its history (a batch on fibers keeps many
 * instances in progress). The final state is copied out to where the loop
 * was called. */
sh_value sh_interp_while(sh_interp *ip, const sh_ast *e, sh_value n, sh_value st, sh_value *fr,
                         sh_while_step cond, sh_while_step step, const void *u) {
  sh_lang_pool *outer = ip->cur;
  uint64_t outer_gen = ip->cur_gen;
  region rg[3]; /* the state, the next state, the work */
  for (int i = 0; i < 3; i++) {
    sh_lang_pool_init(&rg[i].pool, ip->ctx);
    rg[i].gen = ++ip->next_gen;
  }
  uint64_t first = rg[0].gen;
  region *state = &rg[0], *next = &rg[1], *work = &rg[2];
  sh_value r = v_none;
  for (int64_t k = 0; !ip->err; k++) {
    region_enter(ip, work);
    sh_value c = cond(ip, e, fr, st, u);
    if (ip->err) break;
    if (!c.i) {
      ip->cur = outer;
      ip->cur_gen = outer_gen;
      r = evacuate(ip, st, first);
      break;
    }
    if (k >= n.i) {
      sh_interp_fail_at(ip, e->span, "'while' reached its bound (max %d) and its condition still holds", (int)n.i);
      break;
    }
    st = step(ip, e, fr, st, u);
    if (ip->err) break;
    if (work->pool.arena.used_total < SH_WHILE_COLLECT) continue; /* little garbage yet */
    region_enter(ip, next);
    st = evacuate(ip, st, first);
    region *t = state;
    state = next;
    next = t;
    region_recycle(ip, next);
    region_recycle(ip, work);
  }
  ip->cur = outer;
  ip->cur_gen = outer_gen;
  for (int i = 0; i < 3; i++) sh_lang_pool_destroy(&rg[i].pool);
  return ip->err ? v_none : r;
}

/* The walker's steps of a while loop: the state bound, the condition; the body. */
static sh_value walk_cond(sh_interp *ip, const sh_ast *e, sh_value *fr, sh_value st, const void *u) {
  (void)u;
  if (!pat_bind(ip, e->lets[0].pat, &st, fr)) return sh_interp_failf(ip, "while: pattern did not match"), v_none;
  return eval(ip, e->a, fr);
}

static sh_value walk_body(sh_interp *ip, const sh_ast *e, sh_value *fr, sh_value st, const void *u) {
  (void)st, (void)u;
  return eval(ip, e->c, fr);
}

static SH_NOINLINE sh_value eval_while(sh_interp *ip, const sh_ast *e, sh_value *fr) {
  sh_value n = eval(ip, e->b, fr);
  if (ip->err) return v_none;
  sh_value st = eval(ip, e->lets[0].value, fr);
  if (ip->err) return v_none;
  return sh_interp_while(ip, e, n, st, fr, walk_cond, walk_body, NULL);
}

static SH_NOINLINE sh_value eval_phase(sh_interp *ip, const sh_ast *e, sh_value *fr) {
  int old = ip->phase;
  ip->phase = (int)e->ival;
  sheaf_graph_phase(ip->g, ip->phase);
  sh_value v = eval(ip, e->a, fr);
  ip->phase = old;
  sheaf_graph_phase(ip->g, old);
  return v;
}

static SH_NOINLINE sh_value eval_float(sh_interp *ip, const sh_ast *e) {
  if (e->type->kind == SH_TY_F32) return mk_f32(e->fval); /* a host float (item(p) > 0.9) */
  float f = (float)e->fval;
  return mk_tensor(sheaf_input_vector(ip->g, 1, &f));
}

/* v, the value of e, which may have issued builders: the first builder that
 * fails (a slice out of range, shapes that do not agree at run time) gets
 * e's source position before its message, and the instance stops. */
static inline sh_value built(sh_interp *ip, const sh_ast *e, sh_value v) {
  if (SH_UNLIKELY(!ip->err && ip->g && sheaf_graph_status(ip->g) != SHEAF_OK)) {
    ip->err = sheaf_graph_error_context(ip->g, "%s:%u:%u: error", ip->m->diags.file,
                                        (unsigned)e->span.line, (unsigned)e->span.col);
    return v_none;
  }
  return v;
}

static sh_value eval(sh_interp *ip, const sh_ast *e, sh_value *fr) {
  switch (e->kind) {
  case SH_EX_NAME:
    if (e->res == SH_RES_LOCAL) return fr[e->ref.local->index];
    return eval_name(ip, e);
  case SH_EX_BINARY: return built(ip, e, binary(ip, e, fr));
  case SH_EX_CALL: return built(ip, e, eval_call(ip, e, fr));
  case SH_EX_SLICE: return built(ip, e, eval_slice(ip, e, fr));
  case SH_EX_INDEX: return built(ip, e, eval_index(ip, e, fr));
  case SH_EX_BLOCK: return eval_block(ip, e, fr);
  case SH_EX_MATCH: return eval_match(ip, e, fr);
  case SH_EX_IF: return eval_if(ip, e, fr);
  case SH_EX_INT: return mk_int((int32_t)e->ival);
  case SH_EX_BOOL: return mk_bool(e->ival != 0);
  case SH_EX_FLOAT: return eval_float(ip, e);
  case SH_EX_TUPLE: case SH_EX_LIST: return eval_items(ip, e, fr);
  case SH_EX_UNARY: return built(ip, e, eval_unary(ip, e, fr));
  case SH_EX_FOR: return eval_for(ip, e, fr);
  case SH_EX_PHASE: return eval_phase(ip, e, fr);
  case SH_EX_WHILE: return eval_while(ip, e, fr);
  default: return sh_interp_failf(ip, "interp: unsupported expression"), v_none;
  }
}

/* ------------------------------------------------------------- lifetime */

sheaf_status sh_interp_create(const sh_module *m, const sh_lang_bind *bind, sh_interp **out) {
  *out = NULL;
  if (!m->main) return sh_fail(m->ctx, SHEAF_ERR_INVALID_ARG, "the program has no main");
  sh_interp *ip = sh_alloc(m->ctx, sizeof *ip, 16);
  if (!ip) return SHEAF_ERR_NOMEM;
  memset(ip, 0, sizeof *ip);
  ip->m = m;
  ip->ctx = m->ctx;
  ip->bind = bind;
  ip->sv = sh_alloc(m->ctx, (m->sizes.n + 1) * sizeof(int64_t), 16);
  if (!ip->sv) {
    sh_free(m->ctx, ip, sizeof *ip);
    return SHEAF_ERR_NOMEM;
  }
  for (uint32_t i = 0; i <= m->sizes.n; i++) ip->sv[i] = bind->size_values && i <= bind->n_sizes ? bind->size_values[i] : 0;
  sh_lang_pool_init(&ip->pool, m->ctx);
  ip->cur = &ip->pool;
  ip->in = sh_check_main_input(m);
  sheaf_status st = sh_hostprog_compile(ip, &ip->hp);
  if (st) {
    sh_interp_free(ip);
    return st;
  }
  ip->vm = true;
  *out = ip;
  return SHEAF_OK;
}

sheaf_status sh_interp_set_host(sh_interp *ip, sh_interp_host h) {
  if (h != SH_HOST_VM && h != SH_HOST_AST)
    return sh_fail(ip->ctx, SHEAF_ERR_INVALID_ARG, "host: %d is neither vm nor ast", (int)h);
  ip->vm = h == SH_HOST_VM;
  return SHEAF_OK;
}

sheaf_status sh_interp_set_regions(sh_interp *ip, int n, const sh_lang_region *r) {
  if (!ip || n < 0 || (n && !r)) return SHEAF_ERR_INVALID_ARG;
  size_t sz = (size_t)(ip->m->n_fns ? ip->m->n_fns : 1) * sizeof *ip->region_of;
  if (!ip->region_of && !(ip->region_of = sh_alloc(ip->ctx, sz, 16))) return SHEAF_ERR_NOMEM;
  memset(ip->region_of, 0, sz);
  for (int i = 0; i < n; i++) {
    if (!r[i].fn || !r[i].k || r[i].fn->index < 0 || r[i].fn->index >= ip->m->n_fns || r[i].n_params < 0 ||
        r[i].n_params > 64 || r[i].n_inputs < 1 || r[i].n_inputs > 16)
      return sh_fail(ip->ctx, SHEAF_ERR_INVALID_ARG, "regions: region %d is malformed", i);
    for (int j = 0; j < r[i].n_inputs; j++) {
      bool ok = r[i].n_segs[j] >= 1 && r[i].n_segs[j] <= 8;
      for (int s = 0; ok && s < r[i].n_segs[j]; s++) ok = r[i].seg[j][s] >= 0 && r[i].seg[j][s] < r[i].fn->n_params;
      if (!ok) return sh_fail(ip->ctx, SHEAF_ERR_INVALID_ARG, "regions: region %d, input %d is malformed", i, j);
    }
    ip->region_of[r[i].fn->index] = &r[i];
  }
  sh_hostprog *hp;
  sheaf_status st = sh_hostprog_compile(ip, &hp);
  if (st) return st;
  sh_hostprog_free(ip->hp);
  ip->hp = hp;
  return SHEAF_OK;
}

void sh_interp_host_describe(const sh_interp *ip, char *buf, size_t cap) {
  if (!ip->vm) snprintf(buf, cap, "host program: not used (--host ast: the AST walker runs every function)");
  else sh_hostprog_describe(ip->hp, ip->m, buf, cap);
}

void sh_interp_free(sh_interp *ip) {
  if (!ip) return;
  sh_hostprog_free(ip->hp);
  if (ip->region_of) sh_free(ip->ctx, ip->region_of, (size_t)(ip->m->n_fns ? ip->m->n_fns : 1) * sizeof *ip->region_of);
  sh_lang_pool_destroy(&ip->pool);
  sh_free(ip->ctx, ip->sv, (ip->m->sizes.n + 1) * sizeof(int64_t));
  sh_free(ip->ctx, ip, sizeof *ip);
}

void sh_interp_reset(sh_interp *ip) {
  sh_lang_pool_reset(&ip->pool);
  ip->cur = &ip->pool;
  ip->cur_gen = 0;
}

sheaf_status sh_interp_main(sh_interp *ip, sheaf_graph *g, sh_value input, sh_value *out) {
  ip->g = g;
  ip->depth = 0;
  ip->err = SHEAF_OK;
  ip->phase = 0;
  ip->cur = &ip->pool;
  ip->cur_gen = 0;
  if (ip->m->n_waits) sheaf_graph_phase(g, 0); /* another instance may have waited in a phase */
  *out = call_fn(ip, ip->m->main, &input, NULL);
  sheaf_graph_phase(g, 0);
  if (ip->err) return ip->err;
  return sheaf_graph_status(g);
}
