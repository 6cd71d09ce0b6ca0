/*
 * analyze.c — the analyses' driver and node table: every expression of
 * every function numbered in pre-order (a pointer -> id map beside it),
 * classified once (sh_an_class: a graph op, a tensor that is no op, host
 * work, a call, control flow), then the passes of analyze.h run in order.
 */
#include <stdarg.h>
#include <stdio.h>

#include "compile/analyze.h"

void *sh_an_alloc(sh_analyses *a, size_t n) {
  void *p = sh_lang_alloc(&a->pool, n);
  if (!p) a->nomem = true;
  return p;
}

const char *sh_an_strf(sh_analyses *a, const char *fmt, ...) {
  char tmp[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  char *r = sh_lang_strndup(&a->pool, tmp, strlen(tmp));
  if (!r) a->nomem = true;
  return r ? r : "";
}

bool sh_an_tainted(uint8_t t) { return (t & SH_AN_T_PARAM) && !(t & (SH_AN_T_DATA | SH_AN_T_TVAL)); }

int sh_an_children(const sh_ast *e, const sh_ast **out, int cap) {
  int n = 0;
#define PUT(x) do { if (x) { if (n < cap) out[n] = (x); n++; } } while (0)
  switch (e->kind) {
  case SH_EX_TUPLE: case SH_EX_LIST: case SH_EX_CALL:
    for (int i = 0; i < e->n; i++) PUT(e->items[i]);
    break;
  case SH_EX_UNARY: case SH_EX_SLICE: case SH_EX_PHASE: PUT(e->a); break;
  case SH_EX_BINARY: case SH_EX_INDEX: PUT(e->a); PUT(e->b); break;
  case SH_EX_BLOCK:
    for (int i = 0; i < e->n; i++) PUT(e->lets[i].value);
    PUT(e->a);
    break;
  case SH_EX_IF: case SH_EX_FOR: PUT(e->a); PUT(e->b); PUT(e->c); break;
  case SH_EX_MATCH:
    PUT(e->a);
    for (int i = 0; i < e->n; i++) PUT(e->arms[i].body);
    break;
  case SH_EX_WHILE:
    if (e->lets) PUT(e->lets[0].value);
    PUT(e->a); PUT(e->b); PUT(e->c);
    break;
  default: break;
  }
#undef PUT
  return n;
}

static bool is_list_builtin(sh_builtin b) {
  return b == SH_BI_LEN || b == SH_BI_REV || b == SH_BI_MAP || b == SH_BI_FOLD || b == SH_BI_SCAN ||
         b == SH_BI_PUSH || b == SH_BI_SET || b == SH_BI_POP || b == SH_BI_TOPK;
}

static bool is_tensor(const sh_type *t) { return t && t->kind == SH_TY_TENSOR; }

static bool has_tensor(const sh_type *t) {
  if (!t) return false;
  if (t->kind == SH_TY_TENSOR) return true;
  if (t->kind == SH_TY_TUPLE)
    for (int i = 0; i < t->n; i++)
      if (has_tensor(t->elems[i])) return true;
  return false;
}

static void classify(sh_an_node *n) {
  const sh_ast *e = n->e;
  n->cls = SH_AN_PLUMB;
  n->host = SH_AN_H_NONE;
  switch (e->kind) {
  case SH_EX_FLOAT: n->cls = SH_AN_LEAF; break;
  case SH_EX_NAME: if (e->res == SH_RES_PARAM) n->cls = SH_AN_LEAF; break;
  case SH_EX_LIST: n->cls = SH_AN_HOST, n->host = SH_AN_H_LIST; break;
  case SH_EX_UNARY: case SH_EX_BINARY:
    if (is_tensor(e->type)) n->cls = SH_AN_OP;
    else {
      n->cls = SH_AN_HOST;
      n->host = (e->a && e->a->type && e->a->type->kind == SH_TY_F32) ? SH_AN_H_F32 : SH_AN_H_SCALAR;
    }
    break;
  case SH_EX_CALL:
    if (e->call == SH_CALL_FN) n->cls = SH_AN_CALL;
    else if (e->call == SH_CALL_CTOR) n->cls = SH_AN_HOST, n->host = SH_AN_H_ADT;
    else if (e->call == SH_CALL_KERNEL) n->cls = SH_AN_OP;
    else if (e->builtin == SH_BI_ARGMAX || e->builtin == SH_BI_ITEM || e->builtin == SH_BI_VALUES)
      n->cls = SH_AN_WAIT;
    else if (is_list_builtin(e->builtin)) n->cls = SH_AN_HOST, n->host = SH_AN_H_LIST;
    else if (e->builtin == SH_BI_ZEROS || e->builtin == SH_BI_FLOAT) n->cls = SH_AN_LEAF;
    else if (has_tensor(e->type)) n->cls = SH_AN_OP; /* the fused cells return (h, c) */
    else n->cls = SH_AN_HOST, n->host = SH_AN_H_SCALAR;
    break;
  case SH_EX_INDEX:
    if (e->a && e->a->type && e->a->type->kind == SH_TY_LIST) n->cls = SH_AN_HOST, n->host = SH_AN_H_LIST;
    else n->cls = SH_AN_OP;
    break;
  case SH_EX_SLICE: n->cls = SH_AN_OP; break;
  case SH_EX_IF: case SH_EX_MATCH: case SH_EX_FOR: case SH_EX_WHILE: case SH_EX_PHASE:
    n->cls = SH_AN_CTRL;
    break;
  default: break;
  }
}

static uint32_t hash_ptr(const void *p) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9ull;
  return (uint32_t)(x ^ (x >> 32));
}

int32_t sh_an_id(const sh_analyses *a, const sh_ast *e) {
  if (!a->map || !e) return -1;
  uint32_t mask = a->map_cap - 1;
  for (uint32_t h = hash_ptr(e) & mask;; h = (h + 1) & mask) {
    int32_t id = a->map[h];
    if (id < 0) return -1;
    if (a->nodes[id].e == e) return id;
  }
}

/* The children of e (an array of the pool when more than fit in buf). */
static const sh_ast **children(sh_analyses *a, const sh_ast *e, const sh_ast **buf, int cap, int *n) {
  *n = sh_an_children(e, buf, cap);
  if (*n <= cap) return buf;
  const sh_ast **ch = sh_an_alloc(a, (size_t)*n * sizeof *ch);
  if (!ch) return *n = 0, buf;
  sh_an_children(e, ch, *n);
  return ch;
}

static int count_all(sh_analyses *a, const sh_ast *e) {
  const sh_ast *buf[16];
  int n, total = 1;
  const sh_ast **ch = children(a, e, buf, 16, &n);
  for (int i = 0; i < n; i++) total += count_all(a, ch[i]);
  return total;
}

static void add_nodes(sh_analyses *a, const sh_ast *e, int32_t parent, int32_t fn, int cap) {
  if (a->n_nodes >= cap) { /* never: the count walked the same children */
    a->nomem = true;
    return;
  }
  int32_t id = a->n_nodes++;
  sh_an_node *n = &a->nodes[id];
  n->e = e;
  n->parent = parent;
  n->fn = fn;
  n->depth.c = -1;
  for (int k = 0; k < SH_AN_MAX_SYM; k++) n->depth.off[k] = -1;
  classify(n);
  uint32_t mask = a->map_cap - 1, h = hash_ptr(e) & mask;
  while (a->map[h] >= 0) h = (h + 1) & mask;
  a->map[h] = id;
  const sh_ast *buf[16];
  int cnt;
  const sh_ast **ch = children(a, e, buf, 16, &cnt);
  for (int i = 0; i < cnt; i++) add_nodes(a, ch[i], id, fn, cap);
}

sheaf_status sh_analyze(const sh_module *m, sh_analyses *a) {
  memset(a, 0, sizeof *a);
  if (!m) return SHEAF_ERR_INVALID_ARG;
  a->m = m;
  sh_lang_pool_init(&a->pool, m->ctx);
  if (m->diags.n_errors || (m->n_fns && !m->fns[0]->checked)) return SHEAF_ERR_INVALID_ARG;
  int total = 0;
  for (int i = 0; i < m->n_fns; i++)
    if (m->fns[i]->body) total += count_all(a, m->fns[i]->body);
  if (a->nomem) return SHEAF_ERR_NOMEM;
  a->fns = sh_an_alloc(a, (size_t)(m->n_fns ? m->n_fns : 1) * sizeof *a->fns);
  a->fn_root = sh_an_alloc(a, (size_t)(m->n_fns ? m->n_fns : 1) * sizeof *a->fn_root);
  a->nodes = sh_an_alloc(a, (size_t)(total ? total : 1) * sizeof *a->nodes);
  a->map_cap = 16;
  while (a->map_cap < 2u * (uint32_t)total + 2) a->map_cap <<= 1;
  a->map = sh_an_alloc(a, a->map_cap * sizeof *a->map);
  if (a->nomem) return SHEAF_ERR_NOMEM;
  for (uint32_t i = 0; i < a->map_cap; i++) a->map[i] = -1;
  for (int i = 0; i < m->n_fns; i++) {
    a->fn_root[i] = -1;
    if (!m->fns[i]->body) continue;
    a->fn_root[i] = a->n_nodes;
    add_nodes(a, m->fns[i]->body, -1, i, total);
  }
  if (a->nomem) return SHEAF_ERR_NOMEM;
  /* a `x @ W` term of a tensor sum is one affine with the sum (the interpreter's tensor_sum) */
  for (int i = 0; i < a->n_nodes; i++) {
    sh_an_node *n = &a->nodes[i];
    const sh_ast *e = n->e;
    if (n->cls != SH_AN_OP || e->kind != SH_EX_BINARY || e->op != SH_TK_AT || !e->param_rhs || n->parent < 0)
      continue;
    const sh_ast *p = a->nodes[n->parent].e;
    if (p->kind == SH_EX_BINARY && p->op == SH_TK_PLUS && is_tensor(p->type)) n->fused = true;
  }
  sh_an_flow(a);
  sh_an_taint(a);
  sh_an_depth_pass(a);
  sh_an_host(a);
  sh_an_regions(a);
  return a->nomem ? SHEAF_ERR_NOMEM : SHEAF_OK;
}

void sh_analyses_free(sh_analyses *a) {
  if (!a || !a->m) return;
  sh_lang_pool_destroy(&a->pool);
  memset(a, 0, sizeof *a);
}

void sh_an_pat_print(sh_buf *b, const sh_module *m, const sh_pat *p) {
  switch (p->kind) {
  case SH_PAT_WILD: sh_buf_putc(b, '_'); break;
  case SH_PAT_VAR: sh_buf_puts(b, sh_sym_name(&m->syms, p->name)); break;
  case SH_PAT_INT: sh_buf_printf(b, "%lld", (long long)p->ival); break;
  case SH_PAT_BOOL: sh_buf_puts(b, p->ival ? "true" : "false"); break;
  case SH_PAT_TUPLE: case SH_PAT_CTOR:
    if (p->kind == SH_PAT_CTOR) sh_buf_puts(b, sh_sym_name(&m->syms, p->name));
    if (p->kind == SH_PAT_TUPLE || p->n) sh_buf_putc(b, '(');
    for (int i = 0; i < p->n; i++) {
      if (i) sh_buf_puts(b, ", ");
      sh_an_pat_print(b, m, p->items[i]);
    }
    if (p->kind == SH_PAT_TUPLE || p->n) sh_buf_putc(b, ')');
    break;
  default: sh_buf_putc(b, '?'); break;
  }
}

void sh_an_depth_print(sh_buf *b, const sh_an_depth *d) {
  if (d->dyn) {
    sh_buf_puts(b, "dynamic");
    return;
  }
  int n = 0;
  for (int k = 0; k < SH_AN_MAX_SYM; k++) n += d->off[k] >= 0;
  bool show_c = n == 0 || d->c >= 0;
  if (n == 0 && d->c < 0) {
    sh_buf_putc(b, '-');
    return;
  }
  if (n + show_c > 1) sh_buf_puts(b, "max(");
  bool first = true;
  if (show_c) sh_buf_printf(b, "%d", d->c), first = false;
  for (int k = 0; k < SH_AN_MAX_SYM; k++) {
    if (d->off[k] < 0) continue;
    sh_buf_printf(b, "%sR%d", first ? "" : ", ", k + 1);
    if (d->off[k]) sh_buf_printf(b, "+%d", d->off[k]);
    first = false;
  }
  if (n + show_c > 1) sh_buf_putc(b, ')');
}
