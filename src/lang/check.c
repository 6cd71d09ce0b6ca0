/*
 * check.c — the checker's driver: the global namespaces (types, sizes,
 * parameters, functions, constructors, builtins) with duplicate detection,
 * type expressions and size expressions, function signatures, `main`, and
 * the entry point. Expressions are in check_expr.c, builtins in
 * check_builtin.c, exhaustiveness in check_match.c, the recursion rule in
 * recursion.c, the `sheaf check` summary in summary.c.
 */
#include <stdio.h>
#include <string.h>

#include "lang/check_int.h"
#include "lang/input.h"

#define SH_LANG_MAX_FNS 4096 /* the recursion check recurses over the call graph */

/* ------------------------------------------------------------- builtins */

static const char *const builtin_names[SH_BI_COUNT_] = {
#define SH_OP(ID, name, cls, arity, form, act)
#define SH_OP_LANG(ID, name, cls, arity, form, act, builtin) [SH_BI_##ID] = #builtin,
#include "kernels/ops.def"
    [SH_BI_MIN] = "min", [SH_BI_CLAMP] = "clamp", [SH_BI_FLOAT] = "float", [SH_BI_CAT] = "cat", [SH_BI_RESHAPE] = "reshape",
    [SH_BI_ZEROS] = "zeros", [SH_BI_LSTM_CELL] = "lstm_cell",
    [SH_BI_TREE_LSTM_CELL] = "tree_lstm_cell", [SH_BI_LEN] = "len",
    [SH_BI_REV] = "rev", [SH_BI_MAP] = "map", [SH_BI_FOLD] = "fold", [SH_BI_SCAN] = "scan",
    [SH_BI_PUSH] = "push", [SH_BI_ARGMAX] = "argmax", [SH_BI_ITEM] = "item",
    [SH_BI_SET] = "set", [SH_BI_POP] = "pop", [SH_BI_TOPK] = "topk", [SH_BI_VALUES] = "values",
};

/* Tensor inputs of a runtime op's builtin (ops.def); 0 for the others. */
static const uint8_t builtin_arity[SH_BI_COUNT_] = {
#define SH_OP(ID, name, cls, arity, form, act)
#define SH_OP_LANG(ID, name, cls, arity, form, act, builtin) [SH_BI_##ID] = arity,
#include "kernels/ops.def"
};
int sh_builtin_op_arity(sh_builtin b) { return (unsigned)b < SH_BI_COUNT_ ? builtin_arity[b] : 0; }

const char *sh_builtin_name(sh_builtin b) {
  return (unsigned)b < SH_BI_COUNT_ && builtin_names[b] ? builtin_names[b] : "?";
}

sh_builtin sh_builtin_find(const char *name) {
  for (int b = 1; b < SH_BI_COUNT_; b++)
    if (builtin_names[b] && strcmp(builtin_names[b], name) == 0) return (sh_builtin)b;
  return SH_BI_NONE;
}

/* -------------------------------------------------------------- helpers */

void *c_alloc(checker *c, size_t size) {
  void *p = c->nomem ? NULL : sh_lang_alloc(c->pool, size);
  if (!p) c->nomem = true;
  return p;
}

void c_error(checker *c, sh_span at, const char *fmt, ...) {
  char msg[SH_DIAG_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  sh_diag_error(c->d, at, "%s", msg);
}

const char *c_ty(checker *c, const sh_type *t) {
  static _Thread_local char bufs[4][160];
  static _Thread_local int slot;
  slot = (slot + 1) % 4;
  return sh_type_str(bufs[slot], sizeof bufs[slot], c->sv, c->syms, t);
}

bool c_expect(checker *c, sh_span at, const sh_type *expected, const sh_type *got,
              const char *context) {
  if (sh_type_unify(c->sv, expected, got)) return true;
  c_error(c, at, "%s%sexpected %s but got %s", context ? context : "", context ? ": " : "",
          c_ty(c, expected), c_ty(c, got));
  return false;
}

sh_local *c_new_local(checker *c, sh_sym name, sh_span span, sh_type *type) {
  sh_local *l = c_alloc(c, sizeof *l);
  sh_fn *f = c->fn;
  if (!l || !f) return l;
  l->name = name;
  l->span = span;
  l->type = type;
  l->subterm_of = -1;
  l->alias_of = -1;
  l->index = f->n_locals;
  if (f->n_locals == c->cap_locals) {
    int nc = c->cap_locals ? 2 * c->cap_locals : 16;
    sh_local **v = c_alloc(c, (size_t)nc * sizeof *v);
    if (!v) return l;
    if (f->n_locals) memcpy(v, f->locals, (size_t)f->n_locals * sizeof *v);
    f->locals = v;
    c->cap_locals = nc;
  }
  f->locals[f->n_locals++] = l;
  if (!name) return l;
  if (c->n_scope == c->cap_scope) {
    int nc = c->cap_scope ? 2 * c->cap_scope : 64;
    scope_entry *v = sh_realloc(c->m->ctx, c->scope, (size_t)c->cap_scope * sizeof *v,
                                (size_t)nc * sizeof *v);
    if (!v) {
      c->nomem = true;
      return l;
    }
    c->scope = v;
    c->cap_scope = nc;
  }
  c->scope[c->n_scope] = (scope_entry){l, c->sym_top[name]};
  c->sym_top[name] = (uint32_t)++c->n_scope;
  return l;
}

sh_local *c_lookup_local(checker *c, sh_sym name) {
  uint32_t i = name <= c->n_syms ? c->sym_top[name] : 0;
  return i ? c->scope[i - 1].local : NULL;
}

void c_scope_pop(checker *c, int mark) {
  while (c->n_scope > mark) {
    scope_entry *e = &c->scope[--c->n_scope];
    c->sym_top[e->local->name] = e->prev;
  }
}

void c_add_edge(checker *c, sh_fn *to, sh_span at, bool structural) {
  if (!c->fn || !to) return;
  if (c->n_edges == c->cap_edges) {
    int nc = c->cap_edges ? 2 * c->cap_edges : 32;
    call_edge *v = c_alloc(c, (size_t)nc * sizeof *v);
    if (!v) return;
    if (c->n_edges) memcpy(v, c->edges, (size_t)c->n_edges * sizeof *v);
    c->edges = v;
    c->cap_edges = nc;
  }
  c->edges[c->n_edges++] = (call_edge){c->fn, to, at, structural};
}

/* ------------------------------------------------------ sizes and types */

static const char *name_of(const checker *c, sh_sym s) { return sh_sym_name(c->syms, s); }

/* A size name: a global size, or a size parameter of the current function. */
uint32_t c_find_size(checker *c, sh_sym name) {
  if (name <= c->n_syms && c->globals[name].kind == G_SIZE) return c->globals[name].u.size_var;
  sh_fn *f = c->fn;
  for (int i = 0; f && i < f->n_size_params; i++)
    if (c->sv->v[f->size_params[i]].name == name) return f->size_params[i];
  return 0;
}

static uint32_t declare_size(checker *c, sh_sym name, sh_span at, size_mode mode) {
  global *g = &c->globals[name];
  if (g->kind != G_NONE) {
    c_error(c, at, "'%s' is not a size: it names a %s", name_of(c, name),
            g->kind == G_PARAM ? "parameter" : g->kind == G_FN ? "function"
            : g->kind == G_CTOR ? "constructor" : g->kind == G_KERNEL ? "kernel" : "built-in function");
    return 0;
  }
  uint32_t v = sh_sizevar_new(c->sv, name, mode == SIZES_DECLARE_GLOBAL ? SH_SV_GLOBAL : SH_SV_LOCAL, at);
  if (!v) {
    c->nomem = true;
    return 0;
  }
  if (mode == SIZES_DECLARE_GLOBAL) {
    g->kind = G_SIZE;
    g->span = at;
    g->u.size_var = v;
  } else {
    sh_fn *f = c->fn;
    uint32_t *nv = c_alloc(c, (size_t)(f->n_size_params + 1) * sizeof *nv);
    if (!nv) return 0;
    if (f->n_size_params) memcpy(nv, f->size_params, (size_t)f->n_size_params * sizeof *nv);
    nv[f->n_size_params++] = v;
    f->size_params = nv;
  }
  return v;
}

bool c_size_of(checker *c, sh_ast *e, size_mode mode, sh_size *out) {
  sh_size_const(out, 0);
  switch (e->kind) {
  case SH_EX_INT: sh_size_const(out, e->ival); return true;
  case SH_EX_NAME: {
    uint32_t v = c_find_size(c, e->name);
    if (!v && mode != SIZES_KNOWN) v = declare_size(c, e->name, e->span, mode);
    if (!v) {
      if (mode == SIZES_KNOWN) {
        sh_local *l = c_lookup_local(c, e->name);
        if (l) c_error(c, e->span, "'%s' is a variable; sizes are numbers and size names (like H)", name_of(c, e->name));
        else c_error(c, e->span, "unknown size '%s'", name_of(c, e->name));
      }
      return false;
    }
    e->res = SH_RES_SIZE;
    e->ref.size_var = v;
    sh_size_var(out, v);
    return true;
  }
  case SH_EX_BINARY:
    if (e->op == SH_TK_PLUS || e->op == SH_TK_MINUS || e->op == SH_TK_STAR) {
      sh_size a, b;
      if (!c_size_of(c, e->a, mode, &a) || !c_size_of(c, e->b, mode, &b)) return false;
      bool ok = e->op == SH_TK_PLUS ? sh_size_add(out, &a, &b)
                : e->op == SH_TK_MINUS ? sh_size_sub(out, &a, &b) : sh_size_mul(out, &a, &b);
      if (!ok) c_error(c, e->span, "size expression is too large or too complex");
      return ok;
    }
    break;
  case SH_EX_ERROR: return false;
  default: break;
  }
  c_error(c, e->span, "a size must be built from numbers, size names, +, - and *");
  return false;
}

sh_type *c_resolve_type(checker *c, sh_texpr *tx, size_mode mode) {
  if (!tx) return &sh_type_error;
  switch (tx->kind) {
  case SH_TX_ERROR: return &sh_type_error;
  case SH_TX_I32: return &sh_type_i32;
  case SH_TX_BOOL: return &sh_type_bool;
  case SH_TX_F32: return &sh_type_f32;
  case SH_TX_NAME: {
    sh_adt *a = tx->name <= c->n_syms ? c->types[tx->name] : NULL;
    if (!a) {
      c_error(c, tx->span, "unknown type '%s'", name_of(c, tx->name));
      return &sh_type_error;
    }
    return a->type;
  }
  case SH_TX_TENSOR: {
    if (tx->n > SH_MAX_RANK) {
      c_error(c, tx->span, "tensors have rank 1 or 2 (vectors and matrices); this one has rank %d", tx->n);
      return &sh_type_error;
    }
    sh_size dims[SH_MAX_RANK];
    bool ok = true;
    for (int i = 0; i < tx->n; i++) {
      if (!c_size_of(c, tx->dims[i], mode, &dims[i])) {
        ok = false;
        continue;
      }
      sh_size r;
      int64_t k;
      if (sh_size_resolve(c->sv, &dims[i], true, &r) && sh_size_is_const(&r, &k) && k <= 0) {
        c_error(c, tx->dims[i]->span, "a dimension must be positive, but this one is %lld", (long long)k);
        ok = false;
      }
    }
    if (!ok) return &sh_type_error;
    sh_type *t = sh_type_tensor(c->pool, tx->n, dims);
    if (!t) c->nomem = true;
    return t ? t : &sh_type_error;
  }
  case SH_TX_LIST:
  case SH_TX_TUPLE: {
    sh_type *el[1];
    sh_type **items = tx->kind == SH_TX_LIST ? el : c_alloc(c, (size_t)tx->n * sizeof *items);
    if (!items) return &sh_type_error;
    bool err = false;
    for (int i = 0; i < tx->n; i++) {
      items[i] = c_resolve_type(c, tx->elems[i], mode);
      err |= items[i]->kind == SH_TY_ERROR;
    }
    if (err) return &sh_type_error;
    sh_type *t = tx->kind == SH_TX_LIST ? sh_type_list(c->pool, items[0])
                                        : sh_type_tuple(c->pool, tx->n, items);
    if (!t) c->nomem = true;
    return t ? t : &sh_type_error;
  }
  }
  return &sh_type_error;
}

/* --------------------------------------------------------- declarations */

static void duplicate(checker *c, sh_sym name, sh_span at, sh_span first, const char *what) {
  c_error(c, at, "%s '%s' is already defined", what, name_of(c, name));
  if (first.line) sh_diag_note(c->d, first, "'%s' was first defined here", name_of(c, name));
}

/* Enters a global into the value namespace; false when the name is taken. */
static bool define(checker *c, sh_sym name, sh_span at, gkind kind, const char *what) {
  if (!name) return false;
  global *g = &c->globals[name];
  if (g->kind == G_BUILTIN) {
    c_error(c, at, "'%s' is a built-in function and cannot be redefined", name_of(c, name));
    return false;
  }
  if (g->kind != G_NONE) {
    duplicate(c, name, at, g->span, what);
    return false;
  }
  g->kind = kind;
  g->span = at;
  return true;
}

static void declare_globals(checker *c) {
  sh_module *m = c->m;
  for (int b = 1; b < SH_BI_COUNT_; b++) {
    sh_sym s = sh_symtab_find(c->syms, builtin_names[b], strlen(builtin_names[b]));
    if (s) {
      c->globals[s].kind = G_BUILTIN;
      c->globals[s].u.builtin = (sh_builtin)b;
    }
  }
  for (int i = 0; i < m->n_decls; i++) {
    sh_decl *d = &m->decls[i];
    switch (d->kind) {
    case SH_DECL_SIZE: {
      sh_sizedecl *s = d->u.size;
      if (!define(c, s->name, s->span, G_SIZE, "size")) break;
      if (s->has_value && s->value <= 0)
        c_error(c, s->span, "size '%s' must be positive", name_of(c, s->name));
      s->var = sh_sizevar_new(c->sv, s->name, SH_SV_GLOBAL, s->span);
      if (!s->var) {
        c->nomem = true;
        return;
      }
      c->sv->v[s->var].has_value = s->has_value && s->value > 0;
      c->sv->v[s->var].value = s->value;
      c->globals[s->name].u.size_var = s->var;
      break;
    }
    case SH_DECL_TYPE: {
      sh_adt *a = d->u.adt;
      if (!a->name) break;
      if (c->types[a->name]) duplicate(c, a->name, a->span, c->types[a->name]->span, "type");
      else c->types[a->name] = a;
      a->type = sh_type_adt(c->pool, a);
      if (!a->type) {
        c->nomem = true;
        return;
      }
      for (int k = 0; k < a->n_ctors; k++)
        if (define(c, a->ctors[k].name, a->ctors[k].span, G_CTOR, "constructor"))
          c->globals[a->ctors[k].name].u.ctor = &a->ctors[k];
      break;
    }
    case SH_DECL_PARAM:
      if (define(c, d->u.param->name, d->u.param->span, G_PARAM, "parameter"))
        c->globals[d->u.param->name].u.param = d->u.param;
      break;
    case SH_DECL_FN:
      if (define(c, d->u.fn->name, d->u.fn->span, G_FN, "function"))
        c->globals[d->u.fn->name].u.fn = d->u.fn;
      break;
    case SH_DECL_KERNEL:
      if (define(c, d->u.kernel->name, d->u.kernel->span, G_KERNEL, "kernel"))
        c->globals[d->u.kernel->name].u.kernel = d->u.kernel;
      break;
    }
  }
}

/* Types with no finite value (every constructor needs the type itself). */
static void check_inhabited(checker *c) {
  sh_module *m = c->m;
  bool *fin = c_alloc(c, (size_t)m->n_adts + 1);
  if (!fin) return;
  for (bool changed = true; changed;) {
    changed = false;
    for (int i = 0; i < m->n_adts; i++) {
      sh_adt *a = m->adts[i];
      for (int k = 0; k < a->n_ctors && !fin[i]; k++) {
        bool ok = true;
        for (int f = 0; f < a->ctors[k].n_fields && ok; f++) {
          const sh_type *t = a->ctors[k].field_types[f];
          while (t->kind == SH_TY_TUPLE && t->n == 1) t = t->elems[0];
          if (t->kind == SH_TY_ADT) {
            int j = 0;
            while (j < m->n_adts && m->adts[j] != t->adt) j++;
            ok = j < m->n_adts && fin[j];
          } else if (t->kind == SH_TY_TUPLE) {
            for (int e = 0; e < t->n && ok; e++)
              if (t->elems[e]->kind == SH_TY_ADT) {
                int j = 0;
                while (j < m->n_adts && m->adts[j] != t->elems[e]->adt) j++;
                ok = j < m->n_adts && fin[j];
              }
          }
        }
        if (ok) fin[i] = changed = true;
      }
    }
  }
  for (int i = 0; i < m->n_adts; i++)
    if (!fin[i] && m->adts[i]->name && c->types[m->adts[i]->name] == m->adts[i])
      c_error(c, m->adts[i]->span,
              "type '%s' has no finite values: give it a constructor that does not contain it (a leaf)",
              name_of(c, m->adts[i]->name));
}

static void resolve_decl_types(checker *c) {
  sh_module *m = c->m;
  for (int i = 0; i < m->n_adts; i++) {
    sh_adt *a = m->adts[i];
    for (int k = 0; k < a->n_ctors; k++) {
      sh_ctor *ct = &a->ctors[k];
      ct->field_types = c_alloc(c, (size_t)ct->n_fields * sizeof *ct->field_types + 1);
      if (!ct->field_types) return;
      for (int f = 0; f < ct->n_fields; f++) {
        ct->field_types[f] = c_resolve_type(c, ct->field_tx[f], SIZES_KNOWN);
        for (int g = 0; g < f; g++)
          if (ct->field_names[f] && ct->field_names[f] == ct->field_names[g])
            c_error(c, ct->field_tx[f]->span, "field '%s' appears twice in '%s'",
                    name_of(c, ct->field_names[f]), name_of(c, ct->name));
      }
    }
  }
  check_inhabited(c);
  for (int i = 0; i < m->n_params; i++) {
    sh_param_decl *p = m->params[i];
    sh_type *t = c_resolve_type(c, p->tx, SIZES_DECLARE_GLOBAL);
    if (t->kind != SH_TY_TENSOR && t->kind != SH_TY_ERROR) {
      c_error(c, p->tx->span, "parameter '%s' must be an f32 vector or matrix (f32[N] or f32[N, M]), not %s",
              name_of(c, p->name), c_ty(c, t));
      t = &sh_type_error;
    }
    sh_param_init id = p->plus ? p->plus : p->init;
    if (t->kind == SH_TY_TENSOR && t->n != 2 && (id == SH_PINIT_IDENTITY || id == SH_PINIT_IDENTITY_ROWS))
      c_error(c, p->init_span, "parameter '%s': %s needs a matrix, not %s", name_of(c, p->name),
              sh_param_init_name(id), c_ty(c, t));
    p->type = t;
  }
}

static bool type_mentions(const sh_type *t, uint32_t var) {
  if (t->kind == SH_TY_TENSOR) {
    for (int i = 0; i < t->n; i++)
      for (int k = 0; k < t->dims[i].n; k++)
        for (int j = 0; j < t->dims[i].t[k].deg; j++)
          if (t->dims[i].t[k].var[j] == var) return true;
  } else if (t->kind == SH_TY_TUPLE || t->kind == SH_TY_LIST) {
    for (int i = 0; i < t->n; i++)
      if (type_mentions(t->elems[i], var)) return true;
  }
  return false;
}

static void check_signature(checker *c, sh_fn *f) {
  c->fn = f;
  f->param_types = c_alloc(c, (size_t)f->n_params * sizeof *f->param_types + 1);
  if (!f->param_types) return;
  for (int i = 0; i < f->n_params; i++) {
    f->param_types[i] = c_resolve_type(c, f->param_tx[i], SIZES_DECLARE_LOCAL);
    for (int j = 0; j < i; j++)
      if (f->params[i]->name && f->params[i]->name == f->params[j]->name)
        duplicate(c, f->params[i]->name, f->params[i]->span, f->params[j]->span, "parameter");
  }
  int before = f->n_size_params;
  f->ret_type = c_resolve_type(c, f->ret_tx, SIZES_DECLARE_LOCAL);
  for (int i = before; i < f->n_size_params; i++) {
    uint32_t v = f->size_params[i];
    bool used = false;
    for (int k = 0; k < f->n_params && !used; k++) used = type_mentions(f->param_types[k], v);
    if (!used) {
      f->ret_type = &sh_type_error;
      c_error(c, f->ret_tx->span,
              "size '%s' in the result type of '%s' is not a declared size and does not appear in its parameters",
              name_of(c, c->sv->v[v].name), name_of(c, f->name));
    }
  }
  c->fn = NULL;
}

static void check_main(checker *c) {
  sh_module *m = c->m;
  sh_sym s = sh_symtab_find(c->syms, "main", 4);
  sh_fn *f = s && c->globals[s].kind == G_FN ? c->globals[s].u.fn : NULL;
  if (!f) {
    sh_span at = {0, 0, 1, 1};
    c_error(c, at, "no 'main' function: a model needs 'fn main(input: T) -> ...', run once per instance");
    return;
  }
  m->main = f;
  if (f->n_params != 1) {
    c_error(c, f->span, "'main' must take exactly one parameter (one instance of the input), not %d",
            f->n_params);
    return;
  }
  const sh_type *t = f->param_types[0];
  /* an input type with errors of its own (an unknown field type, no leaf)
   * was reported already: its shape says nothing more */
  if (sh_type_contains_error(t) || sh_diags_failed(c->d)) return;
  sh_input_shape *in = c_alloc(c, sizeof *in);
  if (!in) return;
  char why[256];
  sh_input_classify(t, c->syms, in, why, sizeof why);
  if (in->kind == SH_INPUT_UNSUPPORTED)
    c_error(c, f->param_tx[0]->span, "sheaf run cannot feed 'main' a %s: %s", c_ty(c, t), why);
  else
    m->main_input = in;
}

const sh_input_shape *sh_check_main_input(const sh_module *m) {
  static const sh_input_shape none = {.kind = SH_INPUT_UNSUPPORTED, .ctor_leaf = -1, .ctor_node = -1,
                                      .ctor_unary = -1, .ctor_dep = -1, .leaf_word = -1, .dep_kids = -1,
                                      .ctor_rec = -1};
  return m && m->main_input && !sh_diags_failed(&m->diags) ? m->main_input : &none;
}

static void check_body(checker *c, sh_fn *f) {
  if (!f->body || !f->param_types) return;
  c->fn = f;
  c->cap_locals = 0;
  int mark = c_scope_mark(c);
  for (int i = 0; i < f->n_params; i++) {
    sh_local *p = f->params[i];
    sh_local *l = c_new_local(c, p->name, p->span, f->param_types[i]);
    if (l) f->params[i] = l;
  }
  sh_type *t = c_expr(c, f->body);
  char ctx[200];
  snprintf(ctx, sizeof ctx, "the result of '%s'", name_of(c, f->name));
  sh_span at = f->body->kind == SH_EX_BLOCK && f->body->a ? f->body->a->span : f->body->span;
  c_expect(c, at, f->ret_type, t, ctx);
  c_scope_pop(c, mark);
  f->checked = true;
  c->fn = NULL;
}

/* ---------------------------------------------------------------- entry */

sheaf_status sh_check(sh_module *m) {
  checker c;
  memset(&c, 0, sizeof c);
  c.m = m;
  c.pool = &m->pool;
  c.d = &m->diags;
  c.sv = &m->sizes;
  c.syms = &m->syms;
  c.n_syms = m->syms.n;
  c.globals = c_alloc(&c, (c.n_syms + 1) * sizeof *c.globals);
  c.types = c_alloc(&c, (c.n_syms + 1) * sizeof *c.types);
  c.sym_top = c_alloc(&c, (c.n_syms + 1) * sizeof *c.sym_top);
  if (!c.nomem) {
    if (m->n_fns > SH_LANG_MAX_FNS) {
      sh_span at = {0, 0, 1, 1};
      c_error(&c, at, "too many functions (%d; at most %d)", m->n_fns, SH_LANG_MAX_FNS);
    } else {
      declare_globals(&c);
      if (!c.nomem) resolve_decl_types(&c);
      for (int i = 0; i < m->n_fns && !c.nomem; i++) check_signature(&c, m->fns[i]);
      /* a source of kernels only (no fn) is a kernel library: no main */
      if (!c.nomem && !m->kernels_only && (m->n_fns > 0 || m->n_kernels == 0)) check_main(&c);
      /* kernels first: a function's call of one is typed from the checked kernel */
      if (!c.nomem && !sh_diags_full(c.d)) c_check_kernels(&c);
      for (int i = 0; i < m->n_fns && !c.nomem && !sh_diags_full(c.d); i++) check_body(&c, m->fns[i]);
      if (!c.nomem && !sh_diags_full(c.d)) c_check_recursion(&c);
    }
  }
  sh_free(m->ctx, c.scope, (size_t)c.cap_scope * sizeof *c.scope);
  if (c.nomem) return sh_fail(m->ctx, SHEAF_ERR_NOMEM, "out of memory while checking %s", c.d->file);
  if (sh_diags_failed(c.d)) {
    const sh_diag *e = &c.d->v[0];
    return sh_fail(m->ctx, SHEAF_ERR_PARSE, "%s:%u:%u: error: %s", c.d->file, e->span.line,
                   e->span.col, e->msg);
  }
  return SHEAF_OK;
}

sheaf_status sh_lang_compile(sh_module *m, sheaf_ctx *ctx, const char *file, const char *src,
                             size_t len) {
  sh_module_init(m, ctx, file, src, len);
  sheaf_status st = sh_parse(m);
  if (st != SHEAF_OK) return st;
  return sh_check(m);
}
