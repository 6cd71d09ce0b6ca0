/*
 * check_expr.c — types of expressions and patterns: names, operators
 * (elementwise with f32[1] broadcast, `@` as vector/matrix products), calls
 * of user functions (instantiating the sizes they are generic in) and of
 * constructors, indexing (list elements, tensor picks, parameter-table
 * lookups), slices with symbolic bounds, blocks, if, match, for and phase.
 * Builtins are in check_builtin.c, exhaustiveness in check_match.c.
 */
#include <stdio.h>
#include <string.h>

#include "lang/check_int.h"

static const char *nm(const checker *c, sh_sym s) { return sh_sym_name(c->syms, s); }

static const char *op_name(int op) { return sh_tok_desc((sh_tok_kind)op); }

bool c_is_scalar1(checker *c, const sh_type *t) {
  if (t->kind != SH_TY_TENSOR || t->n != 1) return false;
  sh_size r;
  int64_t k;
  return sh_size_resolve(c->sv, &t->dims[0], true, &r) && sh_size_is_const(&r, &k) && k == 1;
}

static sh_type *tensor1(checker *c, const sh_size *d) {
  sh_type *t = sh_type_tensor(c->pool, 1, d);
  if (!t) c->nomem = true;
  return t ? t : &sh_type_error;
}

static sh_type *tensor2(checker *c, const sh_size *d0, const sh_size *d1) {
  sh_size d[2] = {*d0, *d1};
  sh_type *t = sh_type_tensor(c->pool, 2, d);
  if (!t) c->nomem = true;
  return t ? t : &sh_type_error;
}

/* The parameter (k) a value comes from, and whether it is a strict part. */
int c_origin(checker *c, const sh_ast *e, bool *strict) {
  *strict = false;
  if (e->kind != SH_EX_NAME || e->res != SH_RES_LOCAL) return -1;
  const sh_local *l = e->ref.local;
  if (l->subterm_of >= 0) {
    *strict = true;
    return l->subterm_of;
  }
  if (l->alias_of >= 0) return l->alias_of;
  if (c->fn && l->index < c->fn->n_params) return l->index;
  return -1;
}

bool c_is_subterm(checker *c, const sh_ast *e) {
  bool strict;
  if (e->kind == SH_EX_NAME) return c_origin(c, e, &strict) >= 0 && strict;
  if (e->kind == SH_EX_INDEX && e->a->type && e->a->type->kind == SH_TY_LIST)
    return c_origin(c, e->a, &strict) >= 0; /* an element of a list parameter or part */
  return false;
}

/* ------------------------------------------------------------- patterns */

void c_bind_pattern(checker *c, sh_pat *q, sh_type *t, bool refutable, int subterm, bool strict) {
  q->type = t;
  if (q->kind == SH_PAT_VAR && q->name <= c->n_syms && c->globals[q->name].kind == G_CTOR) {
    q->kind = SH_PAT_CTOR; /* a nullary constructor written without () */
    q->n = 0;
  }
  switch (q->kind) {
  case SH_PAT_ERROR:
  case SH_PAT_WILD: return;
  case SH_PAT_VAR: {
    sh_local *l = c_new_local(c, q->name, q->span, t);
    if (l) { /* a strict part, or the parameter (a part of its tuple) under another name */
      l->subterm_of = strict ? subterm : -1;
      l->alias_of = strict ? -1 : subterm;
    }
    q->local = l;
    return;
  }
  case SH_PAT_INT:
  case SH_PAT_BOOL: {
    sh_type *want = q->kind == SH_PAT_INT ? &sh_type_i32 : &sh_type_bool;
    if (!refutable) c_error(c, q->span, "this pattern can fail to match: use 'match'");
    else c_expect(c, q->span, t, want, "pattern");
    return;
  }
  case SH_PAT_TUPLE:
    if (!c_is_err(t) && (t->kind != SH_TY_TUPLE || t->n != q->n)) {
      c_error(c, q->span, "a tuple pattern of %d elements cannot match a value of type %s", q->n,
              c_ty(c, t));
      t = &sh_type_error;
    }
    for (int i = 0; i < q->n; i++)
      c_bind_pattern(c, q->items[i], c_is_err(t) ? t : t->elems[i], refutable, subterm, strict);
    return;
  case SH_PAT_CTOR: {
    global *g = q->name <= c->n_syms ? &c->globals[q->name] : NULL;
    sh_ctor *ct = g && g->kind == G_CTOR ? g->u.ctor : NULL;
    if (!ct) {
      c_error(c, q->span, "unknown constructor '%s'", nm(c, q->name));
    } else if (!c_is_err(t) && (t->kind != SH_TY_ADT || t->adt != ct->adt)) {
      c_error(c, q->span, "'%s' is a constructor of %s, but the value has type %s", nm(c, ct->name),
              nm(c, ct->adt->name), c_ty(c, t));
      ct = NULL;
    } else if (q->n != ct->n_fields) {
      c_error(c, q->span, "constructor '%s' has %d field%s but the pattern has %d", nm(c, ct->name),
              ct->n_fields, ct->n_fields == 1 ? "" : "s", q->n);
      ct = NULL;
    } else if (!refutable && ct->adt->n_ctors > 1) {
      c_error(c, q->span, "'let' cannot take apart '%s': %s has %d constructors; use 'match'",
              nm(c, ct->name), nm(c, ct->adt->name), ct->adt->n_ctors);
    }
    q->ctor = ct;
    for (int i = 0; i < q->n; i++)
      c_bind_pattern(c, q->items[i], ct ? ct->field_types[i] : &sh_type_error, refutable, subterm, true);
    return;
  }
  }
}

/* ------------------------------------------------------------ operators */

static sh_type *arith(checker *c, sh_ast *e, sh_type *ta, sh_type *tb) {
  if (c_is_err(ta) || c_is_err(tb)) return &sh_type_error;
  if (ta->kind == SH_TY_I32 && tb->kind == SH_TY_I32) return &sh_type_i32;
  if (ta->kind == SH_TY_TENSOR && tb->kind == SH_TY_TENSOR) {
    if (e->op == SH_TK_PERCENT) {
      c_error(c, e->span, "'%%' works on i32 only, not on tensors");
      return &sh_type_error;
    }
    if (c_is_scalar1(c, tb)) return ta;
    if (c_is_scalar1(c, ta)) return tb;
    if (sh_type_unify(c->sv, ta, tb)) return ta;
    /* a row against a matrix of its width: the row repeats (a bias) */
    if (ta->n == 2 && tb->n == 1 && sh_size_unify(c->sv, &ta->dims[1], &tb->dims[0])) return ta;
    if (ta->n == 1 && tb->n == 2 && sh_size_unify(c->sv, &tb->dims[1], &ta->dims[0])) return tb;
    c_error(c, e->span, "mismatched shapes for %s: %s and %s", op_name(e->op), c_ty(c, ta), c_ty(c, tb));
    return &sh_type_error;
  }
  c_error(c, e->span, "%s needs two i32 or two f32 tensors, but got %s and %s", op_name(e->op),
          c_ty(c, ta), c_ty(c, tb));
  return &sh_type_error;
}

static sh_type *matmul(checker *c, sh_ast *e, sh_type *ta, sh_type *tb) {
  if (c_is_err(ta) || c_is_err(tb)) return &sh_type_error;
  if (ta->kind != SH_TY_TENSOR || tb->kind != SH_TY_TENSOR) {
    c_error(c, e->span, "'@' multiplies tensors, but got %s @ %s", c_ty(c, ta), c_ty(c, tb));
    return &sh_type_error;
  }
  if (ta->n == 1 && tb->n == 1) {
    c_error(c, e->span, "'@' needs a matrix on one side, but got %s @ %s (for a dot product write sum(a * b))",
            c_ty(c, ta), c_ty(c, tb));
    return &sh_type_error;
  }
  const sh_size *ka = &ta->dims[ta->n - 1], *kb = &tb->dims[0];
  if (!sh_size_unify(c->sv, ka, kb)) {
    sh_buf b;
    sh_buf_init(&b, c->m->ctx);
    sh_size_print(&b, c->sv, ka);
    sh_buf_puts(&b, " and ");
    sh_size_print(&b, c->sv, kb);
    c_error(c, e->span, "inner sizes of '@' differ (%s): %s @ %s",
            sh_buf_status(&b) == SHEAF_OK ? sh_buf_cstr(&b) : "", c_ty(c, ta), c_ty(c, tb));
    sh_buf_free(&b);
    return &sh_type_error;
  }
  /* x @ W with a parameter matrix W: the runtime's affine (M @ v stays a product) */
  e->param_rhs = tb->n == 2 && e->b->kind == SH_EX_NAME && e->b->res == SH_RES_PARAM;
  if (ta->n == 1) return tensor1(c, &tb->dims[1]);
  if (tb->n == 1) return tensor1(c, &ta->dims[0]);
  return tensor2(c, &ta->dims[0], &tb->dims[1]);
}

/* A float constant (`0.9`, `-0.9`): an f32[1] tensor, or a host f32 where
 * the other operand is one (`item(p) > 0.9`). */
static bool float_literal(const sh_ast *e) {
  while (e->kind == SH_EX_UNARY && e->op == SH_TK_MINUS) e = e->a;
  return e->kind == SH_EX_FLOAT;
}

static sh_type *host_float(sh_ast *e) {
  for (sh_ast *x = e; ; x = x->a) {
    x->type = &sh_type_f32;
    if (x->kind == SH_EX_FLOAT) break;
  }
  return &sh_type_f32;
}

/* A float constant where a host f32 is expected (an argument or a field
 * of type f32, a let's annotation, the other branch of an `if` whose one
 * branch is a host f32; through blocks and the parts of tuple
 * expressions): retyped as a host f32. Returns e's type, t (what c_expr
 * gave) where nothing changes. */
sh_type *c_host_floats_as(checker *c, const sh_type *want, sh_ast *e, sh_type *t) {
  if (!want || c_is_err(want) || c_is_err(t)) return t;
  if (want->kind == SH_TY_F32 && float_literal(e)) return host_float(e);
  if (e->kind == SH_EX_BLOCK) {
    sh_type *r = c_host_floats_as(c, want, e->a, t);
    return r != t ? (e->type = r) : t;
  }
  if (e->kind != SH_EX_TUPLE || want->kind != SH_TY_TUPLE || t->kind != SH_TY_TUPLE || want->n != e->n ||
      t->n != e->n)
    return t;
  sh_type **parts = c_alloc(c, (size_t)e->n * sizeof *parts);
  if (!parts) return &sh_type_error;
  bool changed = false;
  for (int i = 0; i < e->n; i++) {
    parts[i] = c_host_floats_as(c, want->elems[i], e->items[i], t->elems[i]);
    changed |= parts[i] != t->elems[i];
  }
  if (!changed) return t;
  sh_type *r = sh_type_tuple(c->pool, e->n, parts);
  if (!r) c->nomem = true;
  return r ? (e->type = r) : &sh_type_error;
}

/* Operators of host floats: + - * / and comparisons of two f32. */
static sh_type *host_f32_op(checker *c, sh_ast *e, sh_type *ta, sh_type *tb) {
  if (c_is_err(ta) || c_is_err(tb)) return &sh_type_error;
  if (ta->kind == SH_TY_F32 && tb->kind == SH_TY_F32 && e->op != SH_TK_PERCENT && e->op != SH_TK_AT &&
      e->op != SH_TK_ANDAND && e->op != SH_TK_OROR) {
    bool cmp = e->op != SH_TK_PLUS && e->op != SH_TK_MINUS && e->op != SH_TK_STAR && e->op != SH_TK_SLASH;
    return cmp ? &sh_type_bool : &sh_type_f32;
  }
  c_error(c, e->span, "%s of a host f32 needs another f32 (item(x), or a constant like 0.5), but got %s and %s",
          op_name(e->op), c_ty(c, ta), c_ty(c, tb));
  return &sh_type_error;
}

static sh_type *binary(checker *c, sh_ast *e) {
  sh_type *ta = c_expr(c, e->a), *tb = c_expr(c, e->b);
  if (ta->kind == SH_TY_F32 && float_literal(e->b)) tb = host_float(e->b);
  if (tb->kind == SH_TY_F32 && float_literal(e->a)) ta = host_float(e->a);
  if (ta->kind == SH_TY_F32 || tb->kind == SH_TY_F32) return host_f32_op(c, e, ta, tb);
  switch (e->op) {
  case SH_TK_PLUS:
  case SH_TK_MINUS:
  case SH_TK_STAR:
  case SH_TK_SLASH:
  case SH_TK_PERCENT: return arith(c, e, ta, tb);
  case SH_TK_AT: return matmul(c, e, ta, tb);
  case SH_TK_ANDAND:
  case SH_TK_OROR:
    if (c_is_err(ta) || c_is_err(tb)) return &sh_type_error;
    if (ta->kind == SH_TY_BOOL && tb->kind == SH_TY_BOOL) return &sh_type_bool;
    c_error(c, e->span, "%s needs two bool values, but got %s and %s", op_name(e->op), c_ty(c, ta), c_ty(c, tb));
    return &sh_type_error;
  default: /* comparisons */
    if (c_is_err(ta) || c_is_err(tb)) return &sh_type_error;
    if (ta->kind == SH_TY_I32 && tb->kind == SH_TY_I32) return &sh_type_bool;
    /* of tensors: a mask of 1 and 0, shaped as arithmetic would be */
    if (ta->kind == SH_TY_TENSOR && tb->kind == SH_TY_TENSOR) return arith(c, e, ta, tb);
    if (ta->kind == SH_TY_BOOL && tb->kind == SH_TY_BOOL &&
        (e->op == SH_TK_EQ || e->op == SH_TK_NE))
      return &sh_type_bool;
    c_error(c, e->span, "%s compares two i32, two tensors (a 1/0 mask), or two bool with == and !=, but got %s and %s",
            op_name(e->op), c_ty(c, ta), c_ty(c, tb));
    return &sh_type_error;
  }
}

static sh_type *unary(checker *c, sh_ast *e) {
  sh_type *t = c_expr(c, e->a);
  if (c_is_err(t)) return t;
  if (e->op == SH_TK_BANG) {
    if (t->kind == SH_TY_BOOL) return t;
    c_error(c, e->span, "'!' needs a bool, but got %s", c_ty(c, t));
  } else {
    if (t->kind == SH_TY_I32 || t->kind == SH_TY_TENSOR || t->kind == SH_TY_F32) return t;
    c_error(c, e->span, "'-' needs an i32, an f32 or a tensor, but got %s", c_ty(c, t));
  }
  return &sh_type_error;
}

/* ---------------------------------------------------------------- names */

static sh_type *name(checker *c, sh_ast *e) {
  sh_local *l = c_lookup_local(c, e->name);
  if (l) {
    e->res = SH_RES_LOCAL;
    e->ref.local = l;
    return l->type;
  }
  global *g = e->name <= c->n_syms ? &c->globals[e->name] : NULL;
  switch (g ? g->kind : G_NONE) {
  case G_PARAM:
    e->res = SH_RES_PARAM;
    e->ref.param = g->u.param;
    return g->u.param->type;
  case G_SIZE:
    e->res = SH_RES_SIZE;
    e->ref.size_var = g->u.size_var;
    return &sh_type_i32;
  case G_CTOR:
    if (g->u.ctor->n_fields == 0) {
      e->res = SH_RES_CTOR;
      e->ref.ctor = g->u.ctor;
      return g->u.ctor->adt->type;
    }
    c_error(c, e->span, "constructor '%s' needs its %d field%s: %s(...)", nm(c, e->name),
            g->u.ctor->n_fields, g->u.ctor->n_fields == 1 ? "" : "s", nm(c, e->name));
    return &sh_type_error;
  case G_FN:
    c_error(c, e->span, "'%s' is a function: call it, or pass it by name to map, fold or scan",
            nm(c, e->name));
    return &sh_type_error;
  case G_BUILTIN:
    c_error(c, e->span, "'%s' is a built-in function: call it with arguments", nm(c, e->name));
    return &sh_type_error;
  case G_KERNEL:
    c_error(c, e->span, "'%s' is a kernel: call it with arguments", nm(c, e->name));
    return &sh_type_error;
  case G_NONE: break;
  }
  uint32_t v = c_find_size(c, e->name);
  if (v) {
    e->res = SH_RES_SIZE;
    e->ref.size_var = v;
    return &sh_type_i32;
  }
  c_error(c, e->span, "unknown name '%s'", nm(c, e->name));
  return &sh_type_error;
}

/* ---------------------------------------------------------------- calls */

sh_type *c_call_fn(checker *c, sh_ast *site, sh_fn *f, sh_ast **args, sh_type **types, int n) {
  if (n != f->n_params) {
    c_error(c, site->span, "wrong number of arguments: '%s' takes %d but got %d", nm(c, f->name),
            f->n_params, n);
    return &sh_type_error;
  }
  if (!f->param_types || !f->ret_type) return &sh_type_error;
  int k = f->n_size_params;
  uint32_t *fresh = k ? c_alloc(c, (size_t)k * sizeof *fresh) : NULL;
  if (k && !fresh) return &sh_type_error;
  for (int i = 0; i < k; i++) {
    const sh_sizevar *v = &c->sv->v[f->size_params[i]];
    if (!(fresh[i] = sh_sizevar_new(c->sv, v->name, SH_SV_FLEX, site->span))) {
      c->nomem = true;
      return &sh_type_error;
    }
  }
  bool ok = true;
  for (int i = 0; i < n; i++) {
    sh_type *pt = k ? sh_type_rename(c->pool, f->param_types[i], f->size_params, fresh, k) : f->param_types[i];
    if (!pt) {
      c->nomem = true;
      return &sh_type_error;
    }
    char ctx[160];
    snprintf(ctx, sizeof ctx, "argument %d of '%s'", i + 1, nm(c, f->name));
    types[i] = c_host_floats_as(c, pt, args[i], types[i]);
    ok = c_expect(c, args[i]->span, pt, types[i], ctx) && ok;
  }
  if (!ok) return &sh_type_error;
  sh_type *rt = k ? sh_type_rename(c->pool, f->ret_type, f->size_params, fresh, k) : f->ret_type;
  rt = rt ? sh_type_resolve(c->pool, c->sv, rt) : NULL;
  if (!rt) c->nomem = true;
  return rt ? rt : &sh_type_error;
}

static sh_type *call(checker *c, sh_ast *e) {
  global *g = e->name <= c->n_syms ? &c->globals[e->name] : NULL;
  gkind kind = g ? g->kind : G_NONE;
  if (kind == G_BUILTIN) {
    e->call = SH_CALL_BUILTIN;
    e->builtin = g->u.builtin;
    return c_builtin(c, e);
  }
  sh_type **types = c_alloc(c, (size_t)e->n * sizeof *types + 1);
  if (!types) return &sh_type_error;
  bool err = false;
  for (int i = 0; i < e->n; i++) {
    types[i] = c_expr(c, e->items[i]);
    err |= c_is_err(types[i]);
  }
  if (kind == G_FN) {
    sh_fn *f = g->u.fn;
    e->call = SH_CALL_FN;
    e->ref.fn = f;
    bool structural = false;
    for (int i = 0; i < e->n; i++) structural |= c_is_subterm(c, e->items[i]);
    sh_span at = e->name_span;
    c_add_edge(c, f, at, structural);
    return c_call_fn(c, e, f, e->items, types, e->n);
  }
  if (kind == G_KERNEL) return err ? &sh_type_error : c_call_kernel(c, e, g->u.kernel, types);
  if (kind == G_CTOR) {
    sh_ctor *ct = g->u.ctor;
    e->call = SH_CALL_CTOR;
    e->ref.ctor = ct;
    if (e->n != ct->n_fields) {
      c_error(c, e->span, "wrong number of arguments: constructor '%s' has %d field%s but got %d",
              nm(c, ct->name), ct->n_fields, ct->n_fields == 1 ? "" : "s", e->n);
      return &sh_type_error;
    }
    bool ok = true;
    for (int i = 0; i < e->n; i++) {
      char ctx[160];
      snprintf(ctx, sizeof ctx, "field %d of '%s'", i + 1, nm(c, ct->name));
      types[i] = c_host_floats_as(c, ct->field_types[i], e->items[i], types[i]);
      ok = c_expect(c, e->items[i]->span, ct->field_types[i], types[i], ctx) && ok;
    }
    return ok ? ct->adt->type : &sh_type_error;
  }
  if (c_lookup_local(c, e->name))
    c_error(c, e->name_span, "'%s' is a variable, not a function", nm(c, e->name));
  else if (kind == G_PARAM)
    c_error(c, e->name_span, "'%s' is a parameter, not a function (multiply with '@')", nm(c, e->name));
  else
    c_error(c, e->name_span, "unknown function '%s'", nm(c, e->name));
  (void)err;
  return &sh_type_error;
}

/* ------------------------------------------------------ index and slice */

static sh_type *index_expr(checker *c, sh_ast *e) {
  sh_type *ta = c_expr(c, e->a), *ti = c_expr(c, e->b);
  if (!c_is_err(ti) && ti->kind != SH_TY_I32) {
    c_error(c, e->b->span, "an index must be an i32, not %s", c_ty(c, ti));
    return &sh_type_error;
  }
  if (c_is_err(ta)) return ta;
  if (ta->kind == SH_TY_LIST) return ta->elems[0];
  if (ta->kind == SH_TY_TENSOR && ta->n == 1) {
    sh_size one;
    sh_size_const(&one, 1);
    return tensor1(c, &one); /* pick */
  }
  if (ta->kind == SH_TY_TENSOR && ta->n == 2) {
    if (e->a->kind == SH_EX_NAME && e->a->res == SH_RES_PARAM) e->lookup = true; /* emb[w] */
    return tensor1(c, &ta->dims[1]); /* a row (checked against the rows at run time) */
  }
  c_error(c, e->span, "cannot index a value of type %s", c_ty(c, ta));
  return &sh_type_error;
}

/* -1: provably negative, 1: provably >= 0 (all coefficients >= 0, sizes >= 1), 0: unknown. */
static int sign_of(checker *c, const sh_size *s) {
  sh_size r;
  if (!sh_size_resolve(c->sv, s, true, &r)) return 0;
  return sh_size_sign(&r);
}

static sh_type *slice(checker *c, sh_ast *e) {
  sh_type *ta = c_expr(c, e->a);
  sh_size *lo = c_alloc(c, sizeof *lo), *hi = c_alloc(c, sizeof *hi);
  if (!lo || !hi) return &sh_type_error;
  e->lo = lo;
  e->hi = hi;
  bool ok = true;
  if (e->b) ok = c_size_of(c, e->b, SIZES_KNOWN, lo);
  if (e->c) ok = c_size_of(c, e->c, SIZES_KNOWN, hi) && ok;
  if (!ok || c_is_err(ta)) return &sh_type_error;
  if (ta->kind != SH_TY_TENSOR) {
    c_error(c, e->span, "only tensors can be sliced, not %s", c_ty(c, ta));
    return &sh_type_error;
  }
  const sh_size *last = &ta->dims[ta->n - 1];
  if (!e->c) *hi = *last;
  sh_size len, room;
  if (!sh_size_sub(&len, hi, lo) || !sh_size_sub(&room, last, hi)) {
    c_error(c, e->span, "slice bounds are too complex");
    return &sh_type_error;
  }
  sh_size one, len1;
  sh_size_const(&one, 1);
  sh_size_sub(&len1, &len, &one);
  sh_buf b;
  sh_buf_init(&b, c->m->ctx);
  sh_buf_putc(&b, '[');
  sh_size_print(&b, c->sv, lo);
  sh_buf_putc(&b, ':');
  sh_size_print(&b, c->sv, hi);
  sh_buf_putc(&b, ']');
  const char *txt = sh_buf_status(&b) == SHEAF_OK ? sh_buf_cstr(&b) : "[..]";
  int s_lo = sign_of(c, lo), s_len = sign_of(c, &len1), s_room = sign_of(c, &room);
  if (s_lo < 0 || s_len < 0 || s_room < 0)
    c_error(c, e->span, "slice %s is %s for %s", txt,
            s_len < 0 ? "empty or reversed" : "out of bounds", c_ty(c, ta));
  else if (s_lo == 0 || s_len == 0 || s_room == 0)
    c_error(c, e->span, "cannot show that slice %s lies within %s", txt, c_ty(c, ta));
  sh_buf_free(&b);
  if (s_lo <= 0 || s_len <= 0 || s_room <= 0) return &sh_type_error;
  sh_size dims[SH_MAX_RANK];
  memcpy(dims, ta->dims, (size_t)ta->n * sizeof *dims);
  dims[ta->n - 1] = len;
  sh_type *t = sh_type_tensor(c->pool, ta->n, dims);
  if (!t) c->nomem = true;
  return t ? t : &sh_type_error;
}

/* ------------------------------------------------------- control flow */

/* Whether e is `[]`, or a tuple with `[]` among its items. */
static bool has_empty_list(const sh_ast *e) {
  if (e->kind == SH_EX_LIST) return e->n == 0;
  if (e->kind != SH_EX_TUPLE) return false;
  for (int i = 0; i < e->n; i++)
    if (has_empty_list(e->items[i])) return true;
  return false;
}

/* Types an empty list `[]` (in e, or among the items of a tuple e) from
 * want, a let's annotation; false (error reported) where want is not a
 * list there. */
static bool type_empty_lists(checker *c, sh_ast *e, sh_type *want) {
  if (c_is_err(want)) return true;
  if (e->kind == SH_EX_LIST && e->n == 0) {
    if (want->kind == SH_TY_LIST) {
      e->type = want;
      return true;
    }
    c_error(c, e->span, "'[]' is a list, but the annotation gives this part the type %s", c_ty(c, want));
    return false;
  }
  if (e->kind != SH_EX_TUPLE || want->kind != SH_TY_TUPLE || want->n != e->n) return true;
  bool ok = true;
  for (int i = 0; i < e->n; i++) ok = type_empty_lists(c, e->items[i], want->elems[i]) && ok;
  return ok;
}

/* A let's value against its optional annotation: the type bound. */
static sh_type *let_value(checker *c, sh_let *l) {
  sh_type *want = l->tx ? c_resolve_type(c, l->tx, SIZES_KNOWN) : NULL;
  if (want && has_empty_list(l->value) && !c_is_err(want)) {
    if (!type_empty_lists(c, l->value, want)) return &sh_type_error;
    if (l->value->kind == SH_EX_LIST) return l->value->type = want;
  }
  sh_type *t = c_host_floats_as(c, want, l->value, c_expr(c, l->value));
  if (want) {
    if (!c_expect(c, l->value->span, want, t, "let")) t = &sh_type_error;
    else if (!c_is_err(want)) t = want;
  }
  return t;
}

static sh_type *block(checker *c, sh_ast *e) {
  int mark = c_scope_mark(c);
  for (int i = 0; i < e->n; i++) {
    sh_let *l = &e->lets[i];
    sh_type *t = let_value(c, l);
    bool strict;
    int k = c_origin(c, l->value, &strict);
    c_bind_pattern(c, l->pat, t, false, k, strict);
  }
  sh_type *t = c_expr(c, e->a);
  c_scope_pop(c, mark);
  return t;
}

static sh_type *if_expr(checker *c, sh_ast *e) {
  sh_type *tc = c_expr(c, e->a);
  if (!c_is_err(tc) && tc->kind != SH_TY_BOOL)
    c_error(c, e->a->span, "the condition of 'if' must be a bool, not %s", c_ty(c, tc));
  sh_type *tt = c_expr(c, e->b), *te = c_expr(c, e->c);
  if (c_is_err(tt) || c_is_err(te)) return &sh_type_error;
  te = c_host_floats_as(c, tt, e->c, te); /* `if p { item(x) } else { 0.0 }` */
  tt = c_host_floats_as(c, te, e->b, tt);
  if (!c_expect(c, e->c->span, tt, te, "the branches of 'if' differ")) return &sh_type_error;
  return tt;
}

static sh_type *match_expr(checker *c, sh_ast *e) {
  sh_type *ts = c_expr(c, e->a);
  bool strict;
  int k = c_origin(c, e->a, &strict);
  sh_type *result = NULL;
  bool err = c_is_err(ts);
  for (int i = 0; i < e->n; i++) {
    int mark = c_scope_mark(c);
    c_bind_pattern(c, e->arms[i].pat, ts, true, k, strict);
    sh_type *t = c_expr(c, e->arms[i].body);
    c_scope_pop(c, mark);
    if (c_is_err(t)) {
      err = true;
      continue;
    }
    if (!result) result = t;
    else if (!c_expect(c, e->arms[i].body->span, result, t, "this arm's value differs from the first arm's"))
      err = true;
  }
  if (!c_is_err(ts)) c_check_exhaustive(c, e);
  return err || !result ? &sh_type_error : result;
}

static sh_type *for_expr(checker *c, sh_ast *e) {
  sh_type *ti = c_expr(c, e->a), *el;
  int k = -1;
  bool strict = false;
  if (e->b) {
    sh_type *tb = c_expr(c, e->b);
    if (!c_is_err(ti) && ti->kind != SH_TY_I32)
      c_error(c, e->a->span, "a range starts at an i32, not %s", c_ty(c, ti));
    if (!c_is_err(tb) && tb->kind != SH_TY_I32)
      c_error(c, e->b->span, "a range ends at an i32, not %s", c_ty(c, tb));
    el = &sh_type_i32;
  } else if (c_is_err(ti)) {
    el = ti;
  } else if (ti->kind != SH_TY_LIST) {
    c_error(c, e->a->span, "'for' runs over a list or a range a..b, not %s", c_ty(c, ti));
    el = &sh_type_error;
  } else {
    el = ti->elems[0];
    k = c_origin(c, e->a, &strict);
    strict = k >= 0; /* elements are strict parts of the list */
  }
  int mark = c_scope_mark(c);
  c_bind_pattern(c, e->pat, el, false, k, strict);
  sh_type *tb = c_expr(c, e->c);
  c_scope_pop(c, mark);
  if (c_is_err(tb)) return tb;
  sh_type *t = sh_type_list(c->pool, tb);
  if (!t) c->nomem = true;
  return t ? t : &sh_type_error;
}

/* while STATE = INIT; COND max N { BODY }: the body's value is the next
 * state (of the state's type); the loop's value is the last state. N is an
 * i32 evaluated once, before the state is bound. */
static sh_type *while_expr(checker *c, sh_ast *e) {
  sh_type *tn = c_expr(c, e->b);
  if (!c_is_err(tn) && tn->kind != SH_TY_I32)
    c_error(c, e->b->span, "the bound of 'while' (max N) must be an i32, not %s", c_ty(c, tn));
  sh_let *l = &e->lets[0];
  sh_type *ts = let_value(c, l);
  int mark = c_scope_mark(c);
  c_bind_pattern(c, l->pat, ts, false, -1, false); /* no part of a parameter: the state changes */
  sh_type *tc = c_expr(c, e->a);
  if (!c_is_err(tc) && tc->kind != SH_TY_BOOL)
    c_error(c, e->a->span, "the condition of 'while' must be a bool, not %s", c_ty(c, tc));
  sh_type *tb = c_expr(c, e->c);
  c_scope_pop(c, mark);
  if (c_is_err(ts) || c_is_err(tb)) return &sh_type_error;
  if (!c_expect(c, e->c->span, ts, tb, "the body of 'while' gives the next state")) return &sh_type_error;
  return ts;
}

static sh_type *items(checker *c, sh_ast *e) {
  if (e->kind == SH_EX_LIST && e->n == 0) {
    if (e->type && e->type->kind == SH_TY_LIST) return e->type; /* typed by a let's annotation */
    c_error(c, e->span, "empty list '[]' needs a type: write it as a let's value with one (let xs: "
            "list[i32] = [];), or build lists with 'for' or 'map'");
    return &sh_type_error;
  }
  sh_type **v = c_alloc(c, (size_t)e->n * sizeof *v + 1);
  if (!v) return &sh_type_error;
  bool err = false;
  for (int i = 0; i < e->n; i++) {
    v[i] = c_expr(c, e->items[i]);
    err |= c_is_err(v[i]);
  }
  if (err || e->n == 0) return &sh_type_error;
  sh_type *t;
  if (e->kind == SH_EX_LIST) {
    for (int i = 1; i < e->n; i++)
      if (!c_expect(c, e->items[i]->span, v[0], v[i], "list element")) return &sh_type_error;
    t = sh_type_list(c->pool, v[0]);
  } else {
    t = sh_type_tuple(c->pool, e->n, v);
  }
  if (!t) c->nomem = true;
  return t ? t : &sh_type_error;
}

static sh_type *expr_kind(checker *c, sh_ast *e) {
  switch (e->kind) {
  case SH_EX_ERROR: return &sh_type_error;
  case SH_EX_INT: return &sh_type_i32;
  case SH_EX_BOOL: return &sh_type_bool;
  case SH_EX_FLOAT: {
    sh_size one;
    sh_size_const(&one, 1);
    return tensor1(c, &one);
  }
  case SH_EX_NAME: return name(c, e);
  case SH_EX_TUPLE:
  case SH_EX_LIST: return items(c, e);
  case SH_EX_UNARY: return unary(c, e);
  case SH_EX_BINARY: return binary(c, e);
  case SH_EX_CALL: return call(c, e);
  case SH_EX_INDEX: return index_expr(c, e);
  case SH_EX_SLICE: return slice(c, e);
  case SH_EX_BLOCK: return block(c, e);
  case SH_EX_IF: return if_expr(c, e);
  case SH_EX_MATCH: return match_expr(c, e);
  case SH_EX_FOR: return for_expr(c, e);
  case SH_EX_WHILE: return while_expr(c, e);
  case SH_EX_PHASE:
    if (e->ival < 0 || e->ival > 1023) /* sheaf_graph_phase's range */
      c_error(c, e->span, "phase %lld: phases are numbered 0..1023", (long long)e->ival);
    return c_expr(c, e->a);
  }
  return &sh_type_error;
}

sh_type *c_expr(checker *c, sh_ast *e) {
  if (c->nomem || sh_diags_full(c->d)) return e->type = &sh_type_error;
  sh_type *t = expr_kind(c, e);
  return e->type = t ? t : &sh_type_error;
}
