/*
 * types.c — canonical polynomial sizes, size variables and unification,
 * and the structural types built on them (see types.h).
 */
#include <stdio.h>
#include <string.h>

#include "lang/ast.h"
#include "lang/types.h"

/* ---------------------------------------------------------- size variables */

void sh_sizevars_init(sh_sizevars *sv, sheaf_ctx *ctx, const sh_symtab *syms) {
  memset(sv, 0, sizeof *sv);
  sv->ctx = ctx;
  sv->syms = syms;
}

void sh_sizevars_free(sh_sizevars *sv) {
  sh_free(sv->ctx, sv->v, sv->cap * sizeof *sv->v);
  sv->v = NULL;
  sv->n = sv->cap = 0;
}

uint32_t sh_sizevar_new(sh_sizevars *sv, sh_sym name, sh_sv_kind kind, sh_span span) {
  if (sv->n + 2 > sv->cap) {
    uint32_t cap = sv->cap ? 2 * sv->cap : 32;
    if (cap > (1u << 24)) return 0;
    sh_sizevar *v = sh_realloc(sv->ctx, sv->v, sv->cap * sizeof *v, cap * sizeof *v);
    if (!v) return 0;
    sv->v = v;
    sv->cap = cap;
  }
  sh_sizevar *x = &sv->v[++sv->n];
  memset(x, 0, sizeof *x);
  x->name = name;
  x->kind = kind;
  x->span = span;
  return sv->n;
}

/* ------------------------------------------------------------ size algebra */

static int mono_cmp(const sh_mono *a, const sh_mono *b) {
  if (a->deg != b->deg) return a->deg > b->deg ? -1 : 1;
  for (int i = 0; i < a->deg; i++)
    if (a->var[i] != b->var[i]) return a->var[i] < b->var[i] ? -1 : 1;
  return 0;
}

/* Sorts, merges like terms, drops zeros; false on overflow or too many terms. */
static bool normalize(sh_size *out, sh_mono *t, int n) {
  for (int i = 1; i < n; i++) /* insertion sort: n <= 36 */
    for (int j = i; j > 0 && mono_cmp(&t[j - 1], &t[j]) > 0; j--) {
      sh_mono x = t[j];
      t[j] = t[j - 1];
      t[j - 1] = x;
    }
  int m = 0;
  for (int i = 0; i < n; i++) {
    if (m > 0 && mono_cmp(&t[m - 1], &t[i]) == 0) {
      if (__builtin_add_overflow(t[m - 1].coef, t[i].coef, &t[m - 1].coef)) goto fail;
    } else {
      t[m++] = t[i];
    }
    if (m > 0 && t[m - 1].coef == 0) m--;
  }
  if (m > SH_SIZE_TERMS) goto fail;
  out->n = (uint8_t)m;
  memcpy(out->t, t, (size_t)m * sizeof *t);
  return true;
fail:
  sh_size_const(out, 0);
  return false;
}

void sh_size_const(sh_size *out, int64_t k) {
  memset(out, 0, sizeof *out);
  if (k) {
    out->n = 1;
    out->t[0].coef = k;
  }
}

void sh_size_var(sh_size *out, uint32_t var) {
  memset(out, 0, sizeof *out);
  out->n = 1;
  out->t[0].coef = 1;
  out->t[0].deg = 1;
  out->t[0].var[0] = var;
}

static bool add_scaled(sh_size *out, const sh_size *a, const sh_size *b, int64_t sb) {
  sh_mono t[2 * SH_SIZE_TERMS];
  int n = 0;
  for (int i = 0; i < a->n; i++) t[n++] = a->t[i];
  for (int i = 0; i < b->n; i++) {
    t[n] = b->t[i];
    if (__builtin_mul_overflow(t[n].coef, sb, &t[n].coef)) {
      sh_size_const(out, 0);
      return false;
    }
    n++;
  }
  return normalize(out, t, n);
}

bool sh_size_add(sh_size *out, const sh_size *a, const sh_size *b) { return add_scaled(out, a, b, 1); }
bool sh_size_sub(sh_size *out, const sh_size *a, const sh_size *b) { return add_scaled(out, a, b, -1); }

bool sh_size_mul(sh_size *out, const sh_size *a, const sh_size *b) {
  sh_mono t[SH_SIZE_TERMS * SH_SIZE_TERMS];
  int n = 0;
  for (int i = 0; i < a->n; i++)
    for (int j = 0; j < b->n; j++) {
      const sh_mono *x = &a->t[i], *y = &b->t[j];
      sh_mono *m = &t[n++];
      memset(m, 0, sizeof *m);
      if (x->deg + y->deg > SH_SIZE_DEG || __builtin_mul_overflow(x->coef, y->coef, &m->coef)) {
        sh_size_const(out, 0);
        return false;
      }
      int p = 0, q = 0, k = 0;
      while (p < x->deg || q < y->deg)
        m->var[k++] = (q >= y->deg || (p < x->deg && x->var[p] <= y->var[q])) ? x->var[p++]
                                                                               : y->var[q++];
      m->deg = (uint8_t)k;
    }
  return normalize(out, t, n);
}

bool sh_size_equal(const sh_size *a, const sh_size *b) {
  if (a->n != b->n) return false;
  for (int i = 0; i < a->n; i++)
    if (a->t[i].coef != b->t[i].coef || mono_cmp(&a->t[i], &b->t[i]) != 0) return false;
  return true;
}

bool sh_size_is_const(const sh_size *a, int64_t *k) {
  if (a->n == 0) {
    *k = 0;
    return true;
  }
  if (a->n == 1 && a->t[0].deg == 0) {
    *k = a->t[0].coef;
    return true;
  }
  return false;
}

int sh_size_sign(const sh_size *a) {
  /* expand each term c*x1*..*xd into c * (1+u1)*..*(1+ud): 2^d monomials */
  sh_mono t[SH_SIZE_TERMS << SH_SIZE_DEG];
  int n = 0;
  for (int i = 0; i < a->n; i++) {
    const sh_mono *m = &a->t[i];
    for (unsigned mask = 0; mask < (1u << m->deg); mask++) {
      sh_mono *x = &t[n++];
      memset(x, 0, sizeof *x);
      x->coef = m->coef;
      for (int j = 0; j < m->deg; j++)
        if (mask & (1u << j)) x->var[x->deg++] = m->var[j];
    }
  }
  /* merge like monomials (quadratic: n <= 48) and look at the signs */
  bool nonneg = true, nonpos = true;
  int64_t k = 0;
  for (int i = 0; i < n; i++) {
    if (t[i].deg == SH_SIZE_DEG + 1) continue; /* merged away */
    int64_t sum = t[i].coef;
    for (int j = i + 1; j < n; j++)
      if (t[j].deg == t[i].deg && mono_cmp(&t[i], &t[j]) == 0) {
        if (__builtin_add_overflow(sum, t[j].coef, &sum)) return 0;
        t[j].deg = SH_SIZE_DEG + 1;
      }
    if (t[i].deg == 0) k = sum;
    nonneg &= sum >= 0;
    nonpos &= sum <= 0;
  }
  if (nonneg) return 1;
  if (nonpos && k < 0) return -1;
  return 0;
}

static bool resolve_depth(const sh_sizevars *sv, const sh_size *a, bool values, sh_size *out,
                          int depth) {
  sh_size acc;
  sh_size_const(&acc, 0);
  if (depth > 64) goto fail;
  for (int i = 0; i < a->n; i++) {
    sh_size prod;
    sh_size_const(&prod, a->t[i].coef);
    for (int j = 0; j < a->t[i].deg; j++) {
      uint32_t v = a->t[i].var[j];
      const sh_sizevar *x = v <= sv->n ? &sv->v[v] : NULL;
      sh_size f;
      if (x && x->kind == SH_SV_FLEX && x->bound) {
        if (!resolve_depth(sv, &x->binding, values, &f, depth + 1)) goto fail;
      } else if (x && values && x->has_value) {
        sh_size_const(&f, x->value);
      } else {
        sh_size_var(&f, v);
      }
      if (!sh_size_mul(&prod, &prod, &f)) goto fail;
    }
    if (!sh_size_add(&acc, &acc, &prod)) goto fail;
  }
  *out = acc;
  return true;
fail:
  *out = *a;
  return false;
}

bool sh_size_resolve(const sh_sizevars *sv, const sh_size *a, bool values, sh_size *out) {
  return resolve_depth(sv, a, values, out, 0);
}

void sh_size_rename(sh_size *a, const uint32_t *from, const uint32_t *to, int n) {
  sh_mono t[SH_SIZE_TERMS];
  int m = a->n;
  memcpy(t, a->t, (size_t)m * sizeof *t);
  for (int i = 0; i < m; i++) {
    for (int j = 0; j < t[i].deg; j++)
      for (int k = 0; k < n; k++)
        if (t[i].var[j] == from[k]) {
          t[i].var[j] = to[k];
          break;
        }
    for (int p = 1; p < t[i].deg; p++) /* keep the variables sorted */
      for (int q = p; q > 0 && t[i].var[q - 1] > t[i].var[q]; q--) {
        uint32_t x = t[i].var[q];
        t[i].var[q] = t[i].var[q - 1];
        t[i].var[q - 1] = x;
      }
  }
  normalize(a, t, m);
}

/* Binds a FLEX variable so that d == 0, when d is linear in it. */
static bool solve(sh_sizevars *sv, const sh_size *d) {
  for (int i = 0; i < d->n; i++) {
    const sh_mono *m = &d->t[i];
    if (m->deg != 1) continue;
    uint32_t x = m->var[0];
    if (x > sv->n || sv->v[x].kind != SH_SV_FLEX || sv->v[x].bound) continue;
    int64_t c = m->coef;
    bool ok = true;
    sh_mono rest[SH_SIZE_TERMS];
    int n = 0;
    for (int j = 0; j < d->n && ok; j++) {
      if (j == i) continue;
      const sh_mono *o = &d->t[j];
      for (int k = 0; k < o->deg; k++) ok = ok && o->var[k] != x;
      if (!ok || o->coef == INT64_MIN || o->coef % c != 0) ok = false;
      else {
        rest[n] = *o;
        rest[n++].coef = -(o->coef / c);
      }
    }
    if (!ok) continue;
    sh_size b;
    if (!normalize(&b, rest, n)) continue;
    sv->v[x].bound = true;
    sv->v[x].binding = b;
    return true;
  }
  return false;
}

bool sh_size_unify(sh_sizevars *sv, const sh_size *expected, const sh_size *got) {
  for (int values = 0; values < 2; values++) {
    sh_size a, b, d;
    if (!sh_size_resolve(sv, expected, values, &a) || !sh_size_resolve(sv, got, values, &b))
      return false;
    if (sh_size_equal(&a, &b)) return true;
    if (sh_size_sub(&d, &a, &b) && solve(sv, &d)) return true;
  }
  return false;
}

void sh_size_print(sh_buf *b, const sh_sizevars *sv, const sh_size *a0) {
  sh_size a;
  sh_size_resolve(sv, a0, false, &a);
  if (a.n == 0) {
    sh_buf_putc(b, '0');
    return;
  }
  for (int i = 0; i < a.n; i++) {
    const sh_mono *m = &a.t[i];
    bool neg = m->coef < 0;
    uint64_t mag = neg ? 0 - (uint64_t)m->coef : (uint64_t)m->coef;
    if (i == 0) sh_buf_puts(b, neg ? "-" : "");
    else sh_buf_puts(b, neg ? " - " : " + ");
    if (mag != 1 || m->deg == 0) sh_buf_printf(b, "%llu%s", (unsigned long long)mag, m->deg ? "*" : "");
    for (int j = 0; j < m->deg; j++) {
      uint32_t v = m->var[j];
      bool named = v <= sv->n && sv->v[v].kind != SH_SV_DYN;
      sh_buf_printf(b, "%s%s", j ? "*" : "", named ? sh_sym_name(sv->syms, sv->v[v].name) : "?");
    }
  }
}

/* ------------------------------------------------------------------ types */

sh_type sh_type_error = {.kind = SH_TY_ERROR};
sh_type sh_type_i32 = {.kind = SH_TY_I32};
sh_type sh_type_bool = {.kind = SH_TY_BOOL};
sh_type sh_type_f32 = {.kind = SH_TY_F32};

sh_type *sh_type_tensor(sh_lang_pool *a, int rank, const sh_size *dims) {
  sh_type *t = sh_lang_alloc(a, sizeof *t);
  sh_size *d = sh_lang_alloc(a, (size_t)rank * sizeof *d);
  if (!t || !d) return NULL;
  t->kind = SH_TY_TENSOR;
  t->n = rank;
  memcpy(d, dims, (size_t)rank * sizeof *d);
  t->dims = d;
  return t;
}

sh_type *sh_type_tuple(sh_lang_pool *a, int n, sh_type *const *elems) {
  sh_type *t = sh_lang_alloc(a, sizeof *t);
  sh_type **e = sh_lang_alloc(a, (size_t)n * sizeof *e);
  if (!t || !e) return NULL;
  t->kind = SH_TY_TUPLE;
  t->n = n;
  memcpy(e, elems, (size_t)n * sizeof *e);
  t->elems = e;
  return t;
}

sh_type *sh_type_list(sh_lang_pool *a, sh_type *elem) {
  sh_type *t = sh_lang_alloc(a, sizeof *t);
  sh_type **e = sh_lang_alloc(a, sizeof *e);
  if (!t || !e) return NULL;
  t->kind = SH_TY_LIST;
  t->n = 1;
  e[0] = elem;
  t->elems = e;
  return t;
}

sh_type *sh_type_adt(sh_lang_pool *a, struct sh_adt *adt) {
  sh_type *t = sh_lang_alloc(a, sizeof *t);
  if (!t) return NULL;
  t->kind = SH_TY_ADT;
  t->adt = adt;
  return t;
}

bool sh_type_unify(sh_sizevars *sv, const sh_type *e, const sh_type *g) {
  if (e->kind == SH_TY_ERROR || g->kind == SH_TY_ERROR) return true;
  if (e->kind != g->kind) return false;
  switch (e->kind) {
  case SH_TY_TENSOR: {
    if (e->n != g->n) return false;
    bool ok = true;
    for (int i = 0; i < e->n; i++) ok = sh_size_unify(sv, &e->dims[i], &g->dims[i]) && ok;
    return ok;
  }
  case SH_TY_TUPLE: {
    if (e->n != g->n) return false;
    bool ok = true;
    for (int i = 0; i < e->n; i++) ok = sh_type_unify(sv, e->elems[i], g->elems[i]) && ok;
    return ok;
  }
  case SH_TY_LIST: return sh_type_unify(sv, e->elems[0], g->elems[0]);
  case SH_TY_ADT: return e->adt == g->adt;
  default: return true;
  }
}

bool sh_type_contains_error(const sh_type *t) {
  if (t->kind == SH_TY_ERROR) return true;
  if (t->kind == SH_TY_TUPLE || t->kind == SH_TY_LIST)
    for (int i = 0; i < t->n; i++)
      if (sh_type_contains_error(t->elems[i])) return true;
  return false;
}

/* Rebuilds t with each size passed through f. */
typedef struct map_ctx {
  const uint32_t *from, *to;
  int n;
  const sh_sizevars *sv;
} map_ctx;

static sh_type *map_type(sh_lang_pool *a, const sh_type *t, const map_ctx *m) {
  switch (t->kind) {
  case SH_TY_TENSOR: {
    sh_type *r = sh_type_tensor(a, t->n, t->dims);
    if (!r) return NULL;
    for (int i = 0; i < t->n; i++) {
      if (m->sv) sh_size_resolve(m->sv, &t->dims[i], false, &r->dims[i]);
      else sh_size_rename(&r->dims[i], m->from, m->to, m->n);
    }
    return r;
  }
  case SH_TY_TUPLE:
  case SH_TY_LIST: {
    sh_type *r = t->kind == SH_TY_LIST ? sh_type_list(a, t->elems[0]) : sh_type_tuple(a, t->n, t->elems);
    if (!r) return NULL;
    for (int i = 0; i < t->n; i++)
      if (!(r->elems[i] = map_type(a, t->elems[i], m))) return NULL;
    return r;
  }
  default: return (sh_type *)(uintptr_t)t; /* immutable leaves are shared */
  }
}

sh_type *sh_type_rename(sh_lang_pool *a, const sh_type *t, const uint32_t *from, const uint32_t *to,
                        int n) {
  map_ctx m = {from, to, n, NULL};
  return map_type(a, t, &m);
}

sh_type *sh_type_resolve(sh_lang_pool *a, const sh_sizevars *sv, const sh_type *t) {
  map_ctx m = {NULL, NULL, 0, sv};
  return map_type(a, t, &m);
}

void sh_type_print(sh_buf *b, const sh_sizevars *sv, const sh_symtab *syms, const sh_type *t) {
  switch (t->kind) {
  case SH_TY_ERROR: sh_buf_puts(b, "<error>"); break;
  case SH_TY_I32: sh_buf_puts(b, "i32"); break;
  case SH_TY_BOOL: sh_buf_puts(b, "bool"); break;
  case SH_TY_F32: sh_buf_puts(b, "f32"); break;
  case SH_TY_TENSOR:
    sh_buf_puts(b, "f32[");
    for (int i = 0; i < t->n; i++) {
      if (i) sh_buf_puts(b, ", ");
      sh_size_print(b, sv, &t->dims[i]);
    }
    sh_buf_putc(b, ']');
    break;
  case SH_TY_TUPLE:
    sh_buf_putc(b, '(');
    for (int i = 0; i < t->n; i++) {
      if (i) sh_buf_puts(b, ", ");
      sh_type_print(b, sv, syms, t->elems[i]);
    }
    sh_buf_putc(b, ')');
    break;
  case SH_TY_LIST:
    sh_buf_puts(b, "list[");
    sh_type_print(b, sv, syms, t->elems[0]);
    sh_buf_putc(b, ']');
    break;
  case SH_TY_ADT: sh_buf_puts(b, sh_sym_name(syms, t->adt->name)); break;
  }
}

const char *sh_type_str(char *buf, size_t cap, const sh_sizevars *sv, const sh_symtab *syms,
                        const sh_type *t) {
  sh_buf b;
  sh_buf_init(&b, sv->ctx);
  sh_type_print(&b, sv, syms, t);
  const char *s = sh_buf_status(&b) == SHEAF_OK ? sh_buf_cstr(&b) : "<type>";
  size_t n = strlen(s);
  if (n >= cap) {
    memcpy(buf, s, cap - 4);
    memcpy(buf + cap - 4, "...", 4);
  } else {
    memcpy(buf, s, n + 1);
  }
  sh_buf_free(&b);
  return buf;
}
