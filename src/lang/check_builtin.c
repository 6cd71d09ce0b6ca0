/*
 * check_builtin.c — types of the built-in functions: the runtime's
 * elementwise ops (unary, and binary with f32[1] broadcast: pow, min, max,
 * clamp, where), reductions and softmax, cat, reshape, zeros, the fused lstm_cell and
 * tree_lstm_cell, and the
 * list functions len, rev, push, map, fold, scan (which take a function by
 * name), and the conversions to host values argmax and item (wait points:
 * the instance waits for the value, recorded in the module).
 * Each matches an operation of the runtime (include/sheaf_graph.h).
 */
#include <stdio.h>
#include <string.h>

#include "lang/check_int.h"

static const char *nm(const checker *c, sh_sym s) { return sh_sym_name(c->syms, s); }

static sh_type *mk_tensor(checker *c, int rank, const sh_size *dims) {
  sh_type *t = sh_type_tensor(c->pool, rank, dims);
  if (!t) c->nomem = true;
  return t ? t : &sh_type_error;
}

static bool arity(checker *c, sh_ast *e, int lo, int hi) {
  if (e->n >= lo && e->n <= hi) return true;
  const char *name = sh_builtin_name(e->builtin);
  if (lo == hi)
    c_error(c, e->span, "wrong number of arguments: '%s' takes %d but got %d", name, lo, e->n);
  else
    c_error(c, e->span, "wrong number of arguments: '%s' takes %d to %d but got %d", name, lo, hi, e->n);
  return false;
}

static sh_type *need_tensor(checker *c, sh_ast *e, sh_ast *arg, sh_type *t) {
  if (c_is_err(t) || t->kind == SH_TY_TENSOR) return t;
  c_error(c, arg->span, "'%s' needs an f32 tensor, not %s", sh_builtin_name(e->builtin), c_ty(c, t));
  return &sh_type_error;
}

static sh_type *need_list(checker *c, sh_ast *e, sh_ast *arg, sh_type *t) {
  if (c_is_err(t) || t->kind == SH_TY_LIST) return t;
  c_error(c, arg->span, "'%s' needs a list, not %s", sh_builtin_name(e->builtin), c_ty(c, t));
  return &sh_type_error;
}

/* Sizes given as arguments (zeros, reshape): positive, at most rank 2. */
static bool size_args(checker *c, sh_ast *e, int first, sh_size *dims) {
  bool ok = true;
  for (int i = first; i < e->n; i++) {
    sh_ast *a = e->items[i];
    if (!c_size_of(c, a, SIZES_KNOWN, &dims[i - first])) {
      ok = false;
      continue;
    }
    a->type = &sh_type_i32;
    sh_size r;
    int64_t k;
    if (sh_size_resolve(c->sv, &dims[i - first], true, &r) && sh_size_is_const(&r, &k) && k <= 0) {
      c_error(c, a->span, "a dimension must be positive, but this one is %lld", (long long)k);
      ok = false;
    }
  }
  return ok;
}

/* The PARAM named by an argument of lstm_cell or tree_lstm_cell. */
static sh_param_decl *param_arg(checker *c, sh_ast *e, sh_ast *arg, int rank, const char *what) {
  sh_type *t = c_expr(c, arg);
  if (c_is_err(t)) return NULL;
  if (arg->kind != SH_EX_NAME || arg->res != SH_RES_PARAM) {
    c_error(c, arg->span, "the %s of %s must be a parameter (declared with 'param')", what,
            sh_builtin_name(e->builtin));
    return NULL;
  }
  if (t->n != rank) {
    c_error(c, arg->span, "the %s of %s must be a %s, not %s", what, sh_builtin_name(e->builtin),
            rank == 2 ? "matrix" : "vector", c_ty(c, t));
    return NULL;
  }
  return arg->ref.param;
}

static sh_type *lstm_cell(checker *c, sh_ast *e) {
  if (!arity(c, e, 4, 4)) return &sh_type_error;
  sh_param_decl *W = param_arg(c, e, e->items[0], 2, "weight (first argument)");
  sh_param_decl *b = param_arg(c, e, e->items[1], 1, "bias (second argument)");
  sh_type *tx = need_tensor(c, e, e->items[2], c_expr(c, e->items[2]));
  sh_type *tc = need_tensor(c, e, e->items[3], c_expr(c, e->items[3]));
  if (!W || !b || c_is_err(tx) || c_is_err(tc)) return &sh_type_error;
  if (tx->n != 1 || tc->n != 1) {
    c_error(c, e->span, "lstm_cell works on vectors: x and c must be f32[N], not %s and %s", c_ty(c, tx),
            c_ty(c, tc));
    return &sh_type_error;
  }
  sh_size four, g;
  sh_size_const(&four, 4);
  if (!sh_size_mul(&g, &four, &tc->dims[0])) return &sh_type_error;
  sh_type *want_w = mk_tensor(c, 2, (sh_size[]){tx->dims[0], g});
  sh_type *want_b = mk_tensor(c, 1, &g);
  bool ok = c_expect(c, e->items[0]->span, want_w, W->type, "lstm_cell's weight (x's size, then 4 gates of c's size)");
  ok = c_expect(c, e->items[1]->span, want_b, b->type, "lstm_cell's bias") && ok;
  if (!ok) return &sh_type_error;
  sh_type *pair[2] = {tc, tc};
  sh_type *t = sh_type_tuple(c->pool, 2, pair);
  if (!t) c->nomem = true;
  return t ? t : &sh_type_error;
}

/* tree_lstm_cell(W, b, x, cl, cr) -> (h, c): the binary TreeLSTM cell,
 * W: f32[I, 5*H] (gates i, f_l, f_r, o, u), b: f32[5*H], x: f32[I],
 * cl, cr: f32[H] (sheaf_tree_lstm_cell). */
static sh_type *tree_lstm_cell(checker *c, sh_ast *e) {
  if (!arity(c, e, 5, 5)) return &sh_type_error;
  sh_param_decl *W = param_arg(c, e, e->items[0], 2, "weight (first argument)");
  sh_param_decl *b = param_arg(c, e, e->items[1], 1, "bias (second argument)");
  sh_type *tx = need_tensor(c, e, e->items[2], c_expr(c, e->items[2]));
  sh_type *tl = need_tensor(c, e, e->items[3], c_expr(c, e->items[3]));
  sh_type *tr = need_tensor(c, e, e->items[4], c_expr(c, e->items[4]));
  if (!W || !b || c_is_err(tx) || c_is_err(tl) || c_is_err(tr)) return &sh_type_error;
  if (tx->n != 1 || tl->n != 1 || tr->n != 1) {
    c_error(c, e->span, "tree_lstm_cell works on vectors: x, cl and cr must be f32[N], not %s, %s and %s",
            c_ty(c, tx), c_ty(c, tl), c_ty(c, tr));
    return &sh_type_error;
  }
  if (!c_expect(c, e->items[4]->span, tl, tr, "tree_lstm_cell's cr (the size of cl)")) return &sh_type_error;
  sh_size five, g;
  sh_size_const(&five, 5);
  if (!sh_size_mul(&g, &five, &tl->dims[0])) return &sh_type_error;
  sh_type *want_w = mk_tensor(c, 2, (sh_size[]){tx->dims[0], g});
  sh_type *want_b = mk_tensor(c, 1, &g);
  bool ok = c_expect(c, e->items[0]->span, want_w, W->type,
                     "tree_lstm_cell's weight (x's size, then 5 gates of cl's size)");
  ok = c_expect(c, e->items[1]->span, want_b, b->type, "tree_lstm_cell's bias") && ok;
  if (!ok) return &sh_type_error;
  sh_type *pair[2] = {tl, tl};
  sh_type *t = sh_type_tuple(c->pool, 2, pair);
  if (!t) c->nomem = true;
  return t ? t : &sh_type_error;
}

/* map(f, xs), fold(f, init, xs), scan(f, init, xs). */
static sh_type *apply(checker *c, sh_ast *e) {
  bool is_map = e->builtin == SH_BI_MAP;
  if (!arity(c, e, is_map ? 2 : 3, is_map ? 2 : 3)) return &sh_type_error;
  sh_ast *fe = e->items[0], *xs = e->items[e->n - 1];
  sh_fn *f = NULL;
  if (fe->kind == SH_EX_NAME && fe->name <= c->n_syms && c->globals[fe->name].kind == G_FN &&
      !c_lookup_local(c, fe->name)) {
    f = c->globals[fe->name].u.fn;
    fe->res = SH_RES_FN;
    fe->ref.fn = f;
    fe->type = &sh_type_error; /* functions are not values */
    e->fn_arg = f;
  } else {
    c_error(c, fe->span, "the first argument of '%s' must be the name of a function (declared with 'fn')",
            sh_builtin_name(e->builtin));
  }
  sh_type *tinit = is_map ? NULL : c_expr(c, e->items[1]);
  sh_type *tl = need_list(c, e, xs, c_expr(c, xs));
  if (!f || c_is_err(tl) || (tinit && c_is_err(tinit))) return &sh_type_error;
  bool strict;
  int k = c_origin(c, xs, &strict);
  c_add_edge(c, f, fe->span, k >= 0);
  sh_ast *args[2] = {is_map ? xs : e->items[1], xs};
  sh_type *types[2] = {is_map ? tl->elems[0] : tinit, tl->elems[0]};
  if (f->n_params != (is_map ? 1 : 2)) {
    c_error(c, fe->span, "'%s' applies a function of %d parameter%s, but '%s' takes %d",
            sh_builtin_name(e->builtin), is_map ? 1 : 2, is_map ? "" : "s (accumulator, element)",
            nm(c, f->name), f->n_params);
    return &sh_type_error;
  }
  sh_type *r = c_call_fn(c, e, f, args, types, is_map ? 1 : 2);
  if (c_is_err(r)) return r;
  if (!is_map) tinit = types[0]; /* a constant accumulator: a host f32 where f takes one */
  if (!is_map) {
    char ctx[160];
    snprintf(ctx, sizeof ctx, "the result of '%s' must have the accumulator's type", nm(c, f->name));
    if (!c_expect(c, e->items[1]->span, tinit, r, ctx)) return &sh_type_error;
    r = tinit;
  }
  if (e->builtin == SH_BI_FOLD) return r;
  sh_type *t = sh_type_list(c->pool, r);
  if (!t) c->nomem = true;
  return t ? t : &sh_type_error;
}

static sh_type *cat(checker *c, sh_ast *e, sh_type **t) {
  if (!arity(c, e, 1, 64)) return &sh_type_error;
  sh_size last;
  sh_size_const(&last, 0);
  for (int i = 0; i < e->n; i++) {
    if (c_is_err(t[i])) return t[i];
    if (i > 0 && t[i]->n != t[0]->n) {
      c_error(c, e->items[i]->span, "cat joins tensors of the same rank, but got %s and %s", c_ty(c, t[0]),
              c_ty(c, t[i]));
      return &sh_type_error;
    }
    if (i > 0 && t[0]->n == 2 && !sh_size_unify(c->sv, &t[0]->dims[0], &t[i]->dims[0])) {
      c_error(c, e->items[i]->span, "cat joins along the last axis; the rows differ: %s and %s",
              c_ty(c, t[0]), c_ty(c, t[i]));
      return &sh_type_error;
    }
    if (!sh_size_add(&last, &last, &t[i]->dims[t[i]->n - 1])) {
      c_error(c, e->span, "size of cat is too complex");
      return &sh_type_error;
    }
  }
  sh_size dims[2] = {t[0]->dims[0], last};
  if (t[0]->n == 1) dims[0] = last;
  return mk_tensor(c, t[0]->n, dims);
}

static sh_type *reshape(checker *c, sh_ast *e) {
  if (!arity(c, e, 2, 3)) return &sh_type_error;
  sh_type *t = need_tensor(c, e, e->items[0], c_expr(c, e->items[0]));
  sh_size dims[2];
  if (!size_args(c, e, 1, dims) || c_is_err(t)) return &sh_type_error;
  sh_size a = t->dims[0], b = dims[0];
  bool ok = (t->n == 1 || sh_size_mul(&a, &a, &t->dims[1])) &&
            (e->n == 2 || sh_size_mul(&b, &b, &dims[1]));
  sh_type *r = mk_tensor(c, e->n - 1, dims);
  if (!ok || !sh_size_unify(c->sv, &a, &b)) {
    c_error(c, e->span, "cannot reshape %s to %s: the element counts differ", c_ty(c, t), c_ty(c, r));
    return &sh_type_error;
  }
  return r;
}

/* The size "?": the module's run-time list length (types.h, SH_SV_DYN). */
static bool dyn_size(checker *c, sh_span at, sh_size *out) {
  if (!c->dyn_var && !(c->dyn_var = sh_sizevar_new(c->sv, 0, SH_SV_DYN, at))) {
    c->nomem = true;
    return false;
  }
  sh_size_var(out, c->dyn_var);
  return true;
}

/* The element type of a list of tensors (an error reported otherwise). */
static sh_type *tensor_list(checker *c, sh_ast *e, sh_type *t) {
  if (c_is_err(t)) return t;
  if (t->kind == SH_TY_LIST && t->elems[0]->kind == SH_TY_TENSOR) return t->elems[0];
  if (t->kind == SH_TY_LIST && c_is_err(t->elems[0])) return &sh_type_error;
  c_error(c, e->items[0]->span, "'%s' needs a list of f32 tensors here, not %s", sh_builtin_name(e->builtin),
          c_ty(c, t));
  return &sh_type_error;
}

/* stack(xs: list[f32[D]]) -> f32[?, D] */
static sh_type *stack(checker *c, sh_ast *e, sh_type *t) {
  sh_type *el = tensor_list(c, e, t);
  if (c_is_err(el)) return el;
  if (el->n != 1) {
    c_error(c, e->items[0]->span, "stack needs a list of vectors f32[D], not of %s", c_ty(c, el));
    return &sh_type_error;
  }
  sh_size dims[2] = {{0}, el->dims[0]};
  return dyn_size(c, e->span, &dims[0]) ? mk_tensor(c, 2, dims) : &sh_type_error;
}

/* softmax / log_softmax of a list of scores list[f32[1]] -> f32[?]; max,
 * mean (and sum, above) of a list elementwise -> its element type */
static sh_type *of_list(checker *c, sh_ast *e, sh_type *t) {
  sh_type *el = tensor_list(c, e, t);
  if (c_is_err(el)) return el;
  if (e->builtin != SH_BI_SOFTMAX && e->builtin != SH_BI_LOG_SOFTMAX) return el;
  if (!c_is_scalar1(c, el)) {
    c_error(c, e->items[0]->span,
            "%s of a list needs scores list[f32[1]], not %s (stack the list for a matrix)",
            sh_builtin_name(e->builtin), c_ty(c, t));
    return &sh_type_error;
  }
  sh_size n;
  return dyn_size(c, e->span, &n) ? mk_tensor(c, 1, &n) : &sh_type_error;
}

/* layer_norm(x: f32[.., D], gamma: f32[D], beta: f32[D]) -> x's type */
static sh_type *layer_norm(checker *c, sh_ast *e, sh_type **t) {
  for (int i = 0; i < 3; i++)
    if (c_is_err(t[i]) || c_is_err(need_tensor(c, e, e->items[i], t[i]))) return &sh_type_error;
  sh_type *row = mk_tensor(c, 1, &t[0]->dims[t[0]->n - 1]);
  bool ok = c_expect(c, e->items[1]->span, row, t[1], "gamma of 'layer_norm'");
  ok = c_expect(c, e->items[2]->span, row, t[2], "beta of 'layer_norm'") && ok;
  return ok ? t[0] : &sh_type_error;
}

/* argmax(x: f32[K]) -> i32, item(x: f32[1]) -> f32, values(x: f32[K]) ->
 * list[f32]: a value the instance waits for (recorded in m->waits for
 * `sheaf check`). */
static sh_type *to_host(checker *c, sh_ast *e, sh_type *x) {
  if (c_is_err(need_tensor(c, e, e->items[0], x))) return &sh_type_error;
  if ((e->builtin == SH_BI_ARGMAX || e->builtin == SH_BI_VALUES) && x->n != 1) {
    c_error(c, e->items[0]->span, "%s needs a vector f32[K], not %s", sh_builtin_name(e->builtin), c_ty(c, x));
    return &sh_type_error;
  }
  if (e->builtin == SH_BI_ITEM && !c_is_scalar1(c, x)) {
    c_error(c, e->items[0]->span, "item needs a one-element tensor f32[1], not %s (pick one with x[i], "
            "or reduce with max(x))", c_ty(c, x));
    return &sh_type_error;
  }
  sh_module *m = c->m;
  if ((m->n_waits & (m->n_waits - 1)) == 0) { /* 0, 1, 2, 4, ...: grow */
    const sh_ast **w = c_alloc(c, (size_t)(m->n_waits ? 2 * m->n_waits : 1) * sizeof *w);
    if (!w) return &sh_type_error;
    if (m->n_waits) memcpy(w, m->waits, (size_t)m->n_waits * sizeof *w);
    m->waits = w;
  }
  m->waits[m->n_waits++] = e;
  if (e->builtin == SH_BI_VALUES) {
    sh_type *l = sh_type_list(c->pool, &sh_type_f32);
    if (!l) c->nomem = true;
    return l ? l : &sh_type_error;
  }
  return e->builtin == SH_BI_ARGMAX ? &sh_type_i32 : &sh_type_f32;
}

/* push(xs: list[T], x: T) -> list[T]: xs with x appended (a new list). */
static sh_type *push(checker *c, sh_ast *e, sh_type **t) {
  if (!arity(c, e, 2, 2)) return &sh_type_error;
  sh_type *l = need_list(c, e, e->items[0], t[0]);
  if (c_is_err(l) || c_is_err(t[1])) return &sh_type_error;
  if (!c_expect(c, e->items[1]->span, l->elems[0], t[1], "the element pushed onto the list"))
    return &sh_type_error;
  return l;
}

/* set(xs: list[T], i: i32, x: T) -> list[T]: xs with element i replaced
 * (a new list); pop(xs: list[T]) -> list[T]: xs without its last element;
 * topk(fs: list[f32], k: i32) -> list[i32]: the indices of the k largest;
 * cat(xs, ys, ...) of lists of one type: the lists one after another. */
static sh_type *list_op(checker *c, sh_ast *e, sh_type **t) {
  sh_builtin bi = e->builtin;
  int want = bi == SH_BI_SET ? 3 : bi == SH_BI_TOPK ? 2 : bi == SH_BI_POP ? 1 : e->n;
  if (!arity(c, e, want, want ? want : 1)) return &sh_type_error;
  for (int i = 0; i < e->n; i++)
    if (c_is_err(t[i])) return &sh_type_error;
  sh_type *l = need_list(c, e, e->items[0], t[0]);
  if (c_is_err(l)) return l;
  switch (bi) {
  case SH_BI_SET:
    if (!c_expect(c, e->items[1]->span, &sh_type_i32, t[1], "the index of 'set'") ||
        !c_expect(c, e->items[2]->span, l->elems[0], t[2], "the element 'set' stores"))
      return &sh_type_error;
    return l;
  case SH_BI_TOPK:
    if (l->elems[0]->kind != SH_TY_F32) {
      c_error(c, e->items[0]->span, "topk needs a list of host floats list[f32] (values(x) reads a tensor's), not %s",
              c_ty(c, l));
      return &sh_type_error;
    }
    if (!c_expect(c, e->items[1]->span, &sh_type_i32, t[1], "the count of 'topk'")) return &sh_type_error;
    {
      sh_type *r = sh_type_list(c->pool, &sh_type_i32);
      if (!r) c->nomem = true;
      return r ? r : &sh_type_error;
    }
  case SH_BI_CAT:
    for (int i = 1; i < e->n; i++)
      if (!c_expect(c, e->items[i]->span, l, t[i], "the lists of 'cat'")) return &sh_type_error;
    return l;
  default: return l; /* pop */
  }
}

/* Elementwise over tensors of one shape, or with f32[1] broadcast: the
 * shape of the larger (pow, minimum, maximum, min, max, clamp). */
static sh_type *elementwise(checker *c, sh_ast *e, sh_type **t) {
  sh_type *r = NULL;
  for (int i = 0; i < e->n; i++) {
    if (c_is_err(t[i]) || c_is_err(need_tensor(c, e, e->items[i], t[i]))) return &sh_type_error;
    if (!r || (c_is_scalar1(c, r) && !c_is_scalar1(c, t[i]))) {
      r = t[i];
    } else if (!c_is_scalar1(c, t[i]) && !sh_type_unify(c->sv, r, t[i])) {
      c_error(c, e->items[i]->span, "argument %d of '%s' has shape %s but argument 1 has %s", i + 1,
              sh_builtin_name(e->builtin), c_ty(c, t[i]), c_ty(c, r));
      return &sh_type_error;
    }
  }
  return r;
}

sh_type *c_builtin(checker *c, sh_ast *e) {
  if (e->builtin == SH_BI_MAX && e->n == 2) e->builtin = SH_BI_MAXIMUM; /* max(a, b) */
  if (e->builtin == SH_BI_MIN && e->n == 2) e->builtin = SH_BI_MINIMUM;
  sh_builtin bi = e->builtin;
  switch (bi) {
  case SH_BI_MAP:
  case SH_BI_FOLD:
  case SH_BI_SCAN: return apply(c, e);
  case SH_BI_LSTM_CELL: return lstm_cell(c, e);
  case SH_BI_TREE_LSTM_CELL: return tree_lstm_cell(c, e);
  case SH_BI_RESHAPE: return reshape(c, e);
  case SH_BI_ZEROS: {
    sh_size dims[2];
    if (!arity(c, e, 1, 2) || !size_args(c, e, 0, dims)) return &sh_type_error;
    return mk_tensor(c, e->n, dims);
  }
  default: break;
  }
  sh_type **t = c_alloc(c, (size_t)e->n * sizeof *t + 1);
  if (!t) return &sh_type_error;
  for (int i = 0; i < e->n; i++) t[i] = c_expr(c, e->items[i]);
  if (bi == SH_BI_SET || bi == SH_BI_POP || bi == SH_BI_TOPK ||
      (bi == SH_BI_CAT && e->n > 0 && t[0]->kind == SH_TY_LIST))
    return list_op(c, e, t);
  if (bi == SH_BI_CAT) {
    for (int i = 0; i < e->n; i++) t[i] = need_tensor(c, e, e->items[i], t[i]);
    return cat(c, e, t);
  }
  if (bi == SH_BI_PUSH) return push(c, e, t);
  if (sh_builtin_op_arity(bi) == 2 || bi == SH_BI_MIN)
    return arity(c, e, 2, 2) ? elementwise(c, e, t) : &sh_type_error;
  if (bi == SH_BI_LAYER_NORM) return arity(c, e, 3, 3) ? layer_norm(c, e, t) : &sh_type_error;
  if (bi == SH_BI_WHERE) return arity(c, e, 3, 3) ? elementwise(c, e, t) : &sh_type_error;
  if (bi == SH_BI_CLAMP) {
    if (!arity(c, e, 3, 3)) return &sh_type_error;
    sh_type *r = elementwise(c, e, t);
    if (!c_is_err(r) && !c_is_err(t[0]) && r != t[0] && !sh_type_unify(c->sv, r, t[0])) {
      c_error(c, e->items[0]->span, "clamp(x, lo, hi): the bounds must be f32[1] or have x's shape %s",
              c_ty(c, t[0]));
      return &sh_type_error;
    }
    return c_is_err(r) ? r : t[0];
  }
  if (!arity(c, e, 1, 1)) return &sh_type_error;
  sh_type *x = t[0];
  if (c_is_err(x)) return x;
  switch (bi) {
  case SH_BI_STACK: return stack(c, e, x);
  case SH_BI_TRANSPOSE: {
    if (c_is_err(need_tensor(c, e, e->items[0], x))) return &sh_type_error;
    if (x->n != 2) {
      c_error(c, e->items[0]->span, "transpose needs a matrix f32[R, C], not %s", c_ty(c, x));
      return &sh_type_error;
    }
    sh_size dims[2] = {x->dims[1], x->dims[0]};
    return mk_tensor(c, 2, dims);
  }
  case SH_BI_ARGMAX:
  case SH_BI_VALUES:
  case SH_BI_ITEM: return to_host(c, e, x);
  case SH_BI_FLOAT: {
    if (x->kind != SH_TY_I32 && x->kind != SH_TY_F32) {
      c_error(c, e->items[0]->span, "float needs an i32 or an f32, not %s", c_ty(c, x));
      return &sh_type_error;
    }
    sh_size one;
    sh_size_const(&one, 1);
    return mk_tensor(c, 1, &one);
  }
  case SH_BI_SOFTMAX:
  case SH_BI_LOG_SOFTMAX:
    if (x->kind == SH_TY_LIST) return of_list(c, e, x);
    return need_tensor(c, e, e->items[0], x);
  case SH_BI_LEN:
    return c_is_err(need_list(c, e, e->items[0], x)) ? &sh_type_error : &sh_type_i32;
  case SH_BI_REV: return need_list(c, e, e->items[0], x);
  case SH_BI_SUM:
  case SH_BI_MEAN:
  case SH_BI_MAX:
    if (x->kind == SH_TY_LIST && x->elems[0]->kind == SH_TY_F32) /* host floats: an f32 */
      return &sh_type_f32;
    if (bi != SH_BI_SUM) goto reduce;
    if (x->kind == SH_TY_LIST) { /* elementwise sum of a list of tensors */
      sh_type *el = x->elems[0];
      if (el->kind == SH_TY_TENSOR) return el;
      c_error(c, e->items[0]->span, "sum of a list needs a list of tensors, not %s", c_ty(c, x));
      return &sh_type_error;
    }
  reduce: {
    if (x->kind == SH_TY_LIST) return of_list(c, e, x); /* elementwise over the list */
    if (c_is_err(need_tensor(c, e, e->items[0], x))) return &sh_type_error;
    sh_size one;
    sh_size_const(&one, 1);
    return mk_tensor(c, 1, x->n == 1 ? &one : &x->dims[0]);
  }
  default: /* elementwise and softmax: same shape */
    return need_tensor(c, e, e->items[0], x);
  }
}
