/*
 * interp_builtin.c — the interpreter's builtins: the runtime builder of each
 * one-op builtin (from ops.def), lstm_cell, tree_lstm_cell, cat, list reductions to a
 * tensor, map / fold / scan, the wait points (argmax, item, values: a fiber
 * may be suspended there) and the list builtins (push, set, pop, topk, cat
 * of lists, rev, len).
 */
#include "lang/interp_int.h"

#include <string.h>

/* The runtime's builder of each builtin that is one op (ops.def). */
#define BI_FN_x(ID, name) [SH_BI_##ID] = sheaf_##name,
#define BI_FN_ab(ID, name)
#define BI_FN_own(ID, name) /* by hand: builtin() */
#define SH_OP(ID, name, cls, arity, form, act)
#define SH_OP_LANG(ID, name, cls, arity, form, act, builtin) BI_FN_##form(ID, name)
static sheaf_expr (*const bi_unary[SH_BI_COUNT_])(sheaf_graph *, sheaf_expr) = {
#include "kernels/ops.def"
};
#undef BI_FN_x
#undef BI_FN_ab
#define BI_FN_x(ID, name)
#define BI_FN_ab(ID, name) [SH_BI_##ID] = sheaf_##name,
#define SH_OP(ID, name, cls, arity, form, act)
#define SH_OP_LANG(ID, name, cls, arity, form, act, builtin) BI_FN_##form(ID, name)
static sheaf_expr (*const bi_binary[SH_BI_COUNT_])(sheaf_graph *, sheaf_expr, sheaf_expr) = {
#include "kernels/ops.def"
};
#undef BI_FN_x
#undef BI_FN_ab
#undef BI_FN_own

static sh_value tensor_zeros(sh_interp *ip, const sh_type *t) {
  int64_t shape[2] = {1, 1};
  for (int i = 0; i < t->n && i < 2; i++) shape[i] = sh_interp_size(ip, &t->dims[i]);
  return mk_tensor(sheaf_zeros(ip->g, t->n, shape));
}

static SH_NOINLINE sh_value builtin_lstm_cell(sh_interp *ip, const sh_ast *e, sh_value *fr) {
  const sh_ast *we = e->items[0], *be = e->items[1];
  if (we->res != SH_RES_PARAM || be->res != SH_RES_PARAM)
    return sh_interp_failf(ip, "lstm_cell: W and b must be parameters"), v_none;
  sh_value x = sh_interp_eval(ip, e->items[2], fr);
  if (ip->err) return v_none;
  sh_value c = sh_interp_eval(ip, e->items[3], fr);
  if (ip->err) return v_none;
  sheaf_expr h, cn;
  sheaf_lstm_cell(ip->g, ip->bind->params[we->ref.param->index], ip->bind->params[be->ref.param->index],
                  x.t, c.t, &h, &cn);
  sh_agg *t = agg_new(ip, -1, 2);
  if (!t) return v_none;
  t->items[0] = mk_tensor(h);
  t->items[1] = mk_tensor(cn);
  return mk_agg(SH_V_TUPLE, t);
}

static SH_NOINLINE sh_value builtin_tree_lstm_cell(sh_interp *ip, const sh_ast *e, sh_value *fr) {
  const sh_ast *we = e->items[0], *be = e->items[1];
  if (we->res != SH_RES_PARAM || be->res != SH_RES_PARAM)
    return sh_interp_failf(ip, "tree_lstm_cell: W and b must be parameters"), v_none;
  sh_value v[3];
  for (int k = 0; k < 3; k++) {
    v[k] = sh_interp_eval(ip, e->items[2 + k], fr);
    if (ip->err) return v_none;
  }
  sheaf_expr h, cn;
  sheaf_tree_lstm_cell(ip->g, ip->bind->params[we->ref.param->index], ip->bind->params[be->ref.param->index],
                       v[0].t, v[1].t, v[2].t, &h, &cn);
  sh_agg *t = agg_new(ip, -1, 2);
  if (!t) return v_none;
  t->items[0] = mk_tensor(h);
  t->items[1] = mk_tensor(cn);
  return mk_agg(SH_V_TUPLE, t);
}

static SH_NOINLINE sh_value builtin_cat(sh_interp *ip, const sh_ast *e, sh_value *fr) {
  sheaf_expr small[4], *xs = small;
  if (e->n > 4 && !(xs = sh_lang_alloc(ip->cur, (size_t)e->n * sizeof *xs)))
    return ip->err = SHEAF_ERR_NOMEM, v_none;
  for (int i = 0; i < e->n; i++) {
    sh_value v = sh_interp_eval(ip, e->items[i], fr);
    if (ip->err) return v_none;
    xs[i] = v.t;
  }
  return mk_tensor(sheaf_concat(ip->g, e->n, xs));
}

/* stack(xs), and sum / mean / max / softmax / log_softmax of a list of
 * tensors (elementwise; softmax over a list of scores). */
static SH_NOINLINE sh_value list_to_tensor(sh_interp *ip, const sh_ast *e, const sh_agg *l) {
  sheaf_graph *g = ip->g;
  int32_t n = l->n;
  if (n == 0) {
    if (e->builtin == SH_BI_SUM) return tensor_zeros(ip, e->type);
    return sh_interp_fail_at(ip, e->span, "%s of an empty list", sh_builtin_name(e->builtin)), v_none;
  }
  sheaf_expr *xs = sh_lang_alloc(ip->cur, (size_t)n * sizeof *xs);
  if (!xs) return ip->err = SHEAF_ERR_NOMEM, v_none;
  for (int32_t i = 0; i < n; i++) xs[i] = l->items[i].t;
  switch (e->builtin) {
  case SH_BI_STACK: return mk_tensor(sheaf_stack(g, n, xs));
  case SH_BI_SUM: return mk_tensor(sheaf_sum_n(g, n, xs));
  case SH_BI_MEAN: return mk_tensor(sheaf_scale(g, sheaf_sum_n(g, n, xs), 1.0f / (float)n));
  case SH_BI_MAX: { /* a balanced tree of maximum */
    for (int32_t w = n, h; w > 1; w = h) {
      h = 0;
      for (int32_t i = 0; i + 1 < w; i += 2) xs[h++] = sheaf_maximum(g, xs[i], xs[i + 1]);
      if (w % 2) xs[h++] = xs[w - 1];
    }
    return mk_tensor(xs[0]);
  }
  case SH_BI_SOFTMAX: return mk_tensor(sheaf_softmax(g, sheaf_concat(g, n, xs)));
  case SH_BI_LOG_SOFTMAX: return mk_tensor(sheaf_log_softmax(g, sheaf_concat(g, n, xs)));
  default: return sh_interp_failf(ip, "interp: builtin '%s' of a list", sh_builtin_name(e->builtin)), v_none;
  }
}

/* map, fold, scan: a named function applied along a list. */
static SH_NOINLINE sh_value builtin_apply(sh_interp *ip, const sh_ast *e, const sh_value *a) {
  if (e->builtin == SH_BI_MAP) {
    sh_agg *xs = a[1].agg;
    sh_agg *r = agg_new(ip, -1, xs->n);
    if (!r) return v_none;
    for (int32_t i = 0; i < xs->n; i++) {
      r->items[i] = sh_interp_call(ip, e->fn_arg, &xs->items[i], e);
      if (ip->err) return v_none;
    }
    return mk_agg(SH_V_LIST, r);
  }
  sh_agg *xs = a[2].agg;
  sh_agg *r = NULL;
  if (e->builtin == SH_BI_SCAN && !(r = agg_new(ip, -1, xs->n))) return v_none;
  sh_value acc = a[1];
  for (int32_t i = 0; i < xs->n; i++) {
    sh_value args[2] = {acc, xs->items[i]};
    acc = sh_interp_call(ip, e->fn_arg, args, e);
    if (ip->err) return v_none;
    if (r) r->items[i] = acc;
  }
  return r ? mk_agg(SH_V_LIST, r) : acc;
}

/* ------------------------------------------------------------- wait points */

/* The value of tensor t, for argmax / item. On a fiber of a batch
 * (sheaf_runner_run_fibers) the instance is suspended in sheaf_value until
 * every live instance waits and the graph is flushed once for all of them;
 * other instances run on this interpreter meanwhile, so the state of this
 * call (its depth, phase and the sizes bound by generic calls) is kept
 * here and restored after the wait. Elsewhere sheaf_value flushes. */
static sheaf_status host_read(sh_interp *ip, sheaf_expr t, sheaf_value_view *v) {
  uint32_t ns = ip->m->sizes.n + 1;
  int64_t *sv = sh_lang_alloc_raw(ip->cur, ns * sizeof *sv);
  if (!sv) return ip->err = SHEAF_ERR_NOMEM;
  memcpy(sv, ip->sv, ns * sizeof *sv);
  int depth = ip->depth, phase = ip->phase;
  sheaf_graph *g = ip->g;
  sh_lang_pool *cur = ip->cur;
  uint64_t cur_gen = ip->cur_gen;
  sheaf_status st = sheaf_value(g, t, v);
  memcpy(ip->sv, sv, ns * sizeof *sv);
  ip->cur = cur;
  ip->cur_gen = cur_gen;
  ip->g = g;
  ip->depth = depth;
  ip->phase = phase;
  ip->err = SHEAF_OK;
  sheaf_graph_phase(g, phase);
  if (st) return ip->err = st; /* the flush's error (the graph's), or the run stopped */
  return SHEAF_OK;
}

/* argmax(x): the index of the first largest element (NaN never wins; all
 * NaN: 0); item(x): its one element; values(x): its elements, a list of
 * host floats. */
static SH_NOINLINE sh_value to_host(sh_interp *ip, const sh_ast *e, sh_value x) {
  sheaf_value_view v;
  if (host_read(ip, x.t, &v)) return v_none;
  int64_t n = v.shape[v.rank - 1];
  if (e->builtin == SH_BI_ITEM) return mk_f32(v.data[0]);
  if (e->builtin == SH_BI_VALUES) {
    sh_agg *r = agg_new_raw(ip, -1, (int32_t)n); /* n fits: a vector has at most INT32_MAX elements */
    if (!r) return v_none;
    for (int64_t k = 0; k < n; k++) r->items[k] = mk_f32(v.data[k]);
    return mk_agg(SH_V_LIST, r);
  }
  int64_t best = 0;
  for (int64_t k = 1; k < n; k++)
    if (v.data[k] > v.data[best] || (v.data[best] != v.data[best] && v.data[k] == v.data[k])) best = k;
  return mk_int((int32_t)best);
}

static SH_NOINLINE sh_value builtin_to_host(sh_interp *ip, const sh_ast *e, sh_value *fr) {
  sh_value x = sh_interp_eval(ip, e->items[0], fr);
  if (ip->err) return v_none;
  return to_host(ip, e, x);
}

/* push(xs, x): a new list, xs then x. */
static SH_NOINLINE sh_value push(sh_interp *ip, const sh_ast *e, sh_value xs, sh_value x) {
  int32_t n = xs.agg->n;
  if (n == INT32_MAX) return sh_interp_fail_at(ip, e->span, "push: a list holds at most 2147483647 elements"), v_none;
  sh_agg *r = agg_new_raw(ip, -1, n + 1);
  if (!r) return v_none;
  if (n) memcpy(r->items, xs.agg->items, (size_t)n * sizeof *r->items);
  r->items[n] = x;
  return mk_agg(SH_V_LIST, r);
}

static SH_NOINLINE sh_value builtin_push(sh_interp *ip, const sh_ast *e, sh_value *fr) {
  sh_value xs = sh_interp_eval(ip, e->items[0], fr);
  if (ip->err) return v_none;
  sh_value x = sh_interp_eval(ip, e->items[1], fr);
  if (ip->err) return v_none;
  return push(ip, e, xs, x);
}

/* sum, mean, max of a list of host floats (in order, in double; max: NaN
 * never wins, as argmax). */
static SH_NOINLINE sh_value host_reduce(sh_interp *ip, const sh_ast *e, const sh_agg *l) {
  if (l->n == 0 && e->builtin != SH_BI_SUM)
    return sh_interp_fail_at(ip, e->span, "%s of an empty list", sh_builtin_name(e->builtin)), v_none;
  double r = e->builtin == SH_BI_MAX ? l->items[0].f : 0;
  for (int32_t k = 0; k < l->n; k++) {
    double x = l->items[k].f;
    if (e->builtin != SH_BI_MAX) r += x;
    else if (x > r || r != r) r = x;
  }
  return mk_f32(e->builtin == SH_BI_MEAN ? r / l->n : r);
}

/* a before b in topk's order: larger first, NaN last, ties by index. */
static bool topk_before(const sh_agg *l, int32_t a, int32_t b) {
  double x = l->items[a].f, y = l->items[b].f;
  if (x != y && (x == x || y == y)) return y != y || x > y;
  return a < b;
}

/* The list builtins that make new lists: set(xs, i, x), pop(xs),
 * topk(fs, k), cat(xs, ys, ...) of lists. */
static SH_NOINLINE sh_value list_args(sh_interp *ip, const sh_ast *e, const sh_value *a) {
  const sh_agg *xs = a[0].agg;
  int32_t n = xs->n;
  sh_agg *r;
  switch (e->builtin) {
  case SH_BI_SET:
    if (a[1].i < 0 || a[1].i >= n)
      return sh_interp_fail_at(ip, e->items[1]->span, "set: index %d is out of range for a list of %d element%s",
                     (int)a[1].i, (int)n, n == 1 ? "" : "s"), v_none;
    if (!(r = agg_new_raw(ip, -1, n))) return v_none;
    memcpy(r->items, xs->items, (size_t)n * sizeof *r->items);
    r->items[a[1].i] = a[2];
    return mk_agg(SH_V_LIST, r);
  case SH_BI_POP:
    if (n == 0) return sh_interp_fail_at(ip, e->items[0]->span, "pop of an empty list"), v_none;
    if (!(r = agg_new_raw(ip, -1, n - 1))) return v_none;
    if (n > 1) memcpy(r->items, xs->items, (size_t)(n - 1) * sizeof *r->items);
    return mk_agg(SH_V_LIST, r);
  case SH_BI_TOPK: {
    if (a[1].i < 0) return sh_interp_fail_at(ip, e->items[1]->span, "topk of %d: the count is negative", (int)a[1].i), v_none;
    int32_t k = a[1].i < n ? a[1].i : n, m = 0;
    if (!(r = agg_new(ip, -1, k))) return v_none;
    for (int32_t j = 0; j < n; j++) { /* insertion into the sorted first m (k is small) */
      if (m == k && (k == 0 || !topk_before(xs, j, r->items[k - 1].i))) continue;
      int32_t at = m < k ? m++ : k - 1;
      while (at > 0 && topk_before(xs, j, r->items[at - 1].i)) r->items[at] = r->items[at - 1], at--;
      r->items[at] = mk_int(j);
    }
    return mk_agg(SH_V_LIST, r);
  }
  default: { /* cat of lists */
    int64_t total = 0;
    for (int i = 0; i < e->n; i++) total += a[i].agg->n;
    if (total > INT32_MAX) return sh_interp_fail_at(ip, e->span, "cat: a list holds at most 2147483647 elements"), v_none;
    if (!(r = agg_new_raw(ip, -1, (int32_t)total))) return v_none;
    int32_t at = 0;
    for (int i = 0; i < e->n; i++) {
      if (a[i].agg->n) memcpy(r->items + at, a[i].agg->items, (size_t)a[i].agg->n * sizeof *r->items);
      at += a[i].agg->n;
    }
    return mk_agg(SH_V_LIST, r);
  }
  }
}

static SH_NOINLINE sh_value builtin_list(sh_interp *ip, const sh_ast *e, sh_value *fr) {
  sh_value a[64] = {0};
  for (int i = 0; i < e->n && i < 64; i++) {
    a[i] = sh_interp_eval(ip, e->items[i], fr);
    if (ip->err) return v_none;
  }
  return list_args(ip, e, a);
}

/* The list builtins, the wait points and push once their arguments are in
 * a[] (sh_interp_builtin evaluates them so: every argument of set, pop,
 * topk and cat of lists, at most 64; the one of argmax, item, values; the
 * two of push). */
sh_value sh_interp_builtin_list_args(sh_interp *ip, const sh_ast *e, const sh_value *a) {
  if (e->builtin == SH_BI_ARGMAX || e->builtin == SH_BI_ITEM || e->builtin == SH_BI_VALUES) return to_host(ip, e, a[0]);
  if (e->builtin == SH_BI_PUSH) return push(ip, e, a[0], a[1]);
  return list_args(ip, e, a);
}

sh_builder1 sh_interp_builder1(sh_builtin b) { return b > SH_BI_NONE && b < SH_BI_COUNT_ ? bi_unary[b] : NULL; }
sh_builder2 sh_interp_builder2(sh_builtin b) { return b > SH_BI_NONE && b < SH_BI_COUNT_ ? bi_binary[b] : NULL; }

sh_value sh_interp_builtin(sh_interp *ip, const sh_ast *e, sh_value *fr) {
  sheaf_expr (*f1)(sheaf_graph *, sheaf_expr) = bi_unary[e->builtin];
  if (f1 && e->items[0]->type->kind == SH_TY_TENSOR) { /* tanh(x), sigmoid(x), ...: the common case */
    sh_value x = sh_interp_eval(ip, e->items[0], fr);
    if (ip->err) return v_none;
    return mk_tensor(f1(ip->g, x.t));
  }
  if (e->builtin == SH_BI_LSTM_CELL) return builtin_lstm_cell(ip, e, fr);
  if (e->builtin == SH_BI_TREE_LSTM_CELL) return builtin_tree_lstm_cell(ip, e, fr);
  if (e->builtin == SH_BI_SET || e->builtin == SH_BI_POP || e->builtin == SH_BI_TOPK ||
      (e->builtin == SH_BI_CAT && e->type->kind == SH_TY_LIST))
    return builtin_list(ip, e, fr);
  if (e->builtin == SH_BI_CAT) return builtin_cat(ip, e, fr);
  if (e->builtin == SH_BI_ARGMAX || e->builtin == SH_BI_ITEM || e->builtin == SH_BI_VALUES)
    return builtin_to_host(ip, e, fr);
  if (e->builtin == SH_BI_PUSH) return builtin_push(ip, e, fr);
  sh_value a[4] = {0};
  int nargs = e->n;
  bool applies = e->builtin == SH_BI_MAP || e->builtin == SH_BI_FOLD || e->builtin == SH_BI_SCAN;
  for (int i = applies ? 1 : 0; i < nargs && i < 4; i++) {
    a[i] = sh_interp_eval(ip, e->items[i], fr);
    if (ip->err) return v_none;
  }
  return sh_interp_builtin_args(ip, e, a);
}

/* The builtins that evaluate their arguments first, in order (the first
 * four; map / fold / scan: not the function): what is left of e once a[]
 * holds them (the host program calls it with arguments it evaluated). */
sh_value sh_interp_builtin_args(sh_interp *ip, const sh_ast *e, sh_value *a) {
  sheaf_graph *g = ip->g;
  int nargs = e->n;
  bool applies = e->builtin == SH_BI_MAP || e->builtin == SH_BI_FOLD || e->builtin == SH_BI_SCAN;
  if (bi_binary[e->builtin]) return mk_tensor(bi_binary[e->builtin](g, a[0].t, a[1].t));
  if (a[0].kind == SH_V_LIST && e->type->kind == SH_TY_F32) return host_reduce(ip, e, a[0].agg);
  if (a[0].kind == SH_V_LIST && e->builtin != SH_BI_LEN && e->builtin != SH_BI_REV && !applies)
    return list_to_tensor(ip, e, a[0].agg);
  switch (e->builtin) {
  case SH_BI_CLAMP: return mk_tensor(sheaf_minimum(g, sheaf_maximum(g, a[0].t, a[1].t), a[2].t));
  case SH_BI_LAYER_NORM: return mk_tensor(sheaf_layer_norm(g, a[0].t, a[1].t, a[2].t, 1e-5f));
  case SH_BI_WHERE: return mk_tensor(sheaf_where(g, a[0].t, a[1].t, a[2].t));
  case SH_BI_TRANSPOSE: return mk_tensor(sheaf_transpose(g, a[0].t));
  case SH_BI_FLOAT: {
    float f = a[0].kind == SH_V_F32 ? (float)a[0].f : (float)a[0].i;
    return mk_tensor(sheaf_input_vector(g, 1, &f));
  }
  case SH_BI_RESHAPE: {
    int64_t shape[2] = {a[1].i, nargs > 2 ? a[2].i : 0};
    return mk_tensor(sheaf_reshape(g, a[0].t, nargs - 1, shape));
  }
  case SH_BI_ZEROS: {
    int64_t shape[2] = {a[0].i, nargs > 1 ? a[1].i : 0};
    if (sh_interp_budget_at(ip, e, 4.0 * (double)shape[0] * (double)(nargs > 1 ? shape[1] : 1),
                  "zeros(%lld%s%.0lld)", (long long)shape[0], nargs > 1 ? ", " : "",
                  (long long)shape[1]))
      return v_none;
    return mk_tensor(sheaf_zeros(g, nargs, shape));
  }
  case SH_BI_LEN: return mk_int(a[0].agg->n);
  case SH_BI_REV: {
    int32_t n = a[0].agg->n;
    sh_agg *r = agg_new_raw(ip, -1, n);
    if (!r) return v_none;
    for (int32_t i = 0; i < n; i++) r->items[i] = a[0].agg->items[n - 1 - i];
    return mk_agg(SH_V_LIST, r);
  }
  case SH_BI_MAP: case SH_BI_FOLD: case SH_BI_SCAN: return builtin_apply(ip, e, a);
  default: return sh_interp_failf(ip, "interp: builtin '%s' is not supported yet", sh_builtin_name(e->builtin)), v_none;
  }
}
