/*
 * check_match.c — exhaustiveness of `match`: the pattern-matrix algorithm
 * of Maranget ("Warnings for pattern matching", JFP 2007) over constructor,
 * tuple, bool and integer patterns. When a value is not covered it reports
 * one such value as a pattern: "non-exhaustive match: Node(Leaf(_), _) is
 * not covered". A step budget bounds the work on pathological inputs.
 */
#include <string.h>

#include "lang/check_int.h"

#define MATCH_BUDGET 200000

typedef enum { W_WILD, W_CTOR, W_TUPLE, W_BOOL } wkind;

typedef struct wpat {
  wkind kind;
  sh_ctor *ctor;
  int n;
  int64_t ival;
  struct wpat **items;
} wpat;

typedef struct mrow {
  sh_pat **p; /* ncols patterns; NULL is a wildcard */
} mrow;

static wpat *new_w(checker *c, wkind kind, int n) {
  wpat *w = c_alloc(c, sizeof *w);
  if (!w) return NULL;
  w->kind = kind;
  w->n = n;
  if (n && !(w->items = c_alloc(c, (size_t)n * sizeof *w->items))) return NULL;
  for (int i = 0; i < n; i++)
    if (!(w->items[i] = c_alloc(c, sizeof(wpat)))) return NULL; /* zeroed: wildcards */
  return w;
}

static sh_pat *head(sh_pat *p) {
  if (!p || p->kind == SH_PAT_WILD || p->kind == SH_PAT_VAR || p->kind == SH_PAT_ERROR) return NULL;
  if (p->kind == SH_PAT_CTOR && !p->ctor) return NULL; /* reported already */
  return p;
}

/* Rows of the specialized matrix: col0 expanded into `ar` columns. */
static mrow *specialize(checker *c, const mrow *rows, int nrows, int ncols, int ar,
                        bool (*keep)(const sh_pat *, int), int key, int *out_n) {
  mrow *r = c_alloc(c, (size_t)nrows * sizeof *r + 1);
  if (!r) return NULL;
  int n = 0;
  for (int i = 0; i < nrows; i++) {
    sh_pat *h = head(rows[i].p[0]);
    if (h && !keep(h, key)) continue;
    sh_pat **p = c_alloc(c, (size_t)(ar + ncols - 1) * sizeof *p + 1);
    if (!p) return NULL;
    for (int j = 0; j < ar; j++) p[j] = h && h->n == ar ? h->items[j] : NULL;
    memcpy(p + ar, rows[i].p + 1, (size_t)(ncols - 1) * sizeof *p);
    r[n++].p = p;
  }
  *out_n = n;
  return r;
}

static bool keep_ctor(const sh_pat *h, int k) { return h->kind == SH_PAT_CTOR && h->ctor->index == k; }
static bool keep_bool(const sh_pat *h, int k) { return h->kind == SH_PAT_BOOL && h->ival == k; }
static bool keep_any(const sh_pat *h, int k) { (void)k; return h->kind == SH_PAT_TUPLE; }
static bool keep_none(const sh_pat *h, int k) { (void)h; (void)k; return false; }

/* Returns a witness vector (ncols values not matched by any row), or NULL
 * when the rows are exhaustive (or on budget exhaustion / OOM). */
static wpat **missing(checker *c, const mrow *rows, int nrows, sh_type **cols, int ncols) {
  if (--c->match_budget < 0 || c->nomem) return NULL;
  if (ncols == 0) return nrows > 0 ? NULL : c_alloc(c, sizeof(wpat *));
  const sh_type *t = cols[0];
  int ar = 0, nk = 0;
  if (t->kind == SH_TY_TUPLE) ar = t->n;
  else if (t->kind == SH_TY_ADT) nk = t->adt->n_ctors;
  else if (t->kind == SH_TY_BOOL) nk = 2;

  if (t->kind == SH_TY_TUPLE) {
    int n;
    mrow *r = specialize(c, rows, nrows, ncols, ar, keep_any, 0, &n);
    sh_type **nc = c_alloc(c, (size_t)(ar + ncols - 1) * sizeof *nc + 1);
    if (!r || !nc) return NULL;
    memcpy(nc, t->elems, (size_t)ar * sizeof *nc);
    memcpy(nc + ar, cols + 1, (size_t)(ncols - 1) * sizeof *nc);
    wpat **w = missing(c, r, n, nc, ar + ncols - 1);
    if (!w) return NULL;
    wpat *tw = new_w(c, W_TUPLE, 0);
    if (!tw) return NULL;
    tw->n = ar;
    tw->items = w;
    wpat **out = c_alloc(c, (size_t)ncols * sizeof *out);
    if (!out) return NULL;
    out[0] = tw;
    memcpy(out + 1, w + ar, (size_t)(ncols - 1) * sizeof *out);
    return out;
  }

  bool *present = c_alloc(c, (size_t)nk + 1);
  if (!present) return NULL;
  int n_present = 0;
  for (int i = 0; i < nrows && nk; i++) {
    sh_pat *h = head(rows[i].p[0]);
    if (!h) continue;
    int k = h->kind == SH_PAT_CTOR ? h->ctor->index : h->kind == SH_PAT_BOOL ? (int)h->ival : -1;
    if (k >= 0 && k < nk && !present[k]) {
      present[k] = true;
      n_present++;
    }
  }
  if (nk && n_present == nk) { /* complete signature: every constructor must be exhaustive */
    for (int k = 0; k < nk; k++) {
      sh_ctor *ct = t->kind == SH_TY_ADT ? &t->adt->ctors[k] : NULL;
      int a = ct ? ct->n_fields : 0, n;
      mrow *r = specialize(c, rows, nrows, ncols, a, ct ? keep_ctor : keep_bool, k, &n);
      sh_type **nc = c_alloc(c, (size_t)(a + ncols - 1) * sizeof *nc + 1);
      if (!r || !nc) return NULL;
      if (a) memcpy(nc, ct->field_types, (size_t)a * sizeof *nc);
      memcpy(nc + a, cols + 1, (size_t)(ncols - 1) * sizeof *nc);
      wpat **w = missing(c, r, n, nc, a + ncols - 1);
      if (!w) continue;
      wpat *cw = new_w(c, ct ? W_CTOR : W_BOOL, 0);
      wpat **out = c_alloc(c, (size_t)ncols * sizeof *out);
      if (!cw || !out) return NULL;
      cw->ctor = ct;
      cw->ival = k;
      cw->n = a;
      cw->items = w;
      out[0] = cw;
      memcpy(out + 1, w + a, (size_t)(ncols - 1) * sizeof *out);
      return out;
    }
    return NULL;
  }
  /* incomplete: the rows with a wildcard first must cover the rest */
  int n;
  mrow *r = specialize(c, rows, nrows, ncols, 0, keep_none, 0, &n);
  if (!r) return NULL;
  wpat **w = missing(c, r, n, cols + 1, ncols - 1);
  if (!w) return NULL;
  wpat *first;
  int k = 0;
  while (k < nk && present[k]) k++;
  if (t->kind == SH_TY_ADT) {
    first = new_w(c, W_CTOR, t->adt->ctors[k].n_fields);
    if (first) first->ctor = &t->adt->ctors[k];
  } else if (t->kind == SH_TY_BOOL) {
    first = new_w(c, W_BOOL, 0);
    if (first) first->ival = k;
  } else {
    first = new_w(c, W_WILD, 0);
  }
  wpat **out = c_alloc(c, (size_t)ncols * sizeof *out);
  if (!first || !out) return NULL;
  out[0] = first;
  memcpy(out + 1, w, (size_t)(ncols - 1) * sizeof *out);
  return out;
}

static void print_w(checker *c, sh_buf *b, const wpat *w, int depth) {
  if (!w || depth > 64) {
    sh_buf_putc(b, '_');
    return;
  }
  switch (w->kind) {
  case W_WILD: sh_buf_putc(b, '_'); break;
  case W_BOOL: sh_buf_puts(b, w->ival ? "true" : "false"); break;
  case W_CTOR:
  case W_TUPLE:
    if (w->kind == W_CTOR) sh_buf_puts(b, sh_sym_name(c->syms, w->ctor->name));
    if (w->kind == W_TUPLE || w->n) sh_buf_putc(b, '(');
    for (int i = 0; i < w->n; i++) {
      if (i) sh_buf_puts(b, ", ");
      print_w(c, b, w->items[i], depth + 1);
    }
    if (w->kind == W_TUPLE || w->n) sh_buf_putc(b, ')');
    break;
  }
}

void c_check_exhaustive(checker *c, sh_ast *e) {
  mrow *rows = c_alloc(c, (size_t)e->n * sizeof *rows + 1);
  if (!rows) return;
  for (int i = 0; i < e->n; i++) rows[i].p = &e->arms[i].pat;
  sh_type *col = e->a->type;
  c->match_budget = MATCH_BUDGET;
  wpat **w = missing(c, rows, e->n, &col, 1);
  if (!w || c->match_budget < 0) return;
  sh_span at = e->span;
  if (e->a->span.off + e->a->span.len > at.off) at.len = e->a->span.off + e->a->span.len - at.off;
  if (col->kind == SH_TY_I32) {
    c_error(c, at, "non-exhaustive match: not every i32 is covered (add a '_' arm)");
    return;
  }
  sh_buf b;
  sh_buf_init(&b, c->m->ctx);
  print_w(c, &b, w[0], 0);
  c_error(c, at, "non-exhaustive match: %s is not covered",
          sh_buf_status(&b) == SHEAF_OK ? sh_buf_cstr(&b) : "a value");
  sh_buf_free(&b);
}
