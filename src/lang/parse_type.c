/*
 * parse_type.c — the parser's rules for types, size expressions (tensor
 * dimensions) and patterns (see parser.c for the rest of the grammar).
 */
#include <string.h>

#include "lang/parser_int.h"

/* ------------------------------------------------------ types and sizes */

static sh_texpr *new_tx(parser *p, sh_texpr_kind kind, sh_span span) {
  sh_texpr *t = p_alloc(p, sizeof *t);
  if (!t) {
    t = &p->scratch_tx;
    memset(t, 0, sizeof *t);
  }
  t->kind = kind;
  t->span = span;
  return t;
}

/* dfactor = INT | IDENT | "(" dim ")" */
static sh_ast *p_dfactor(parser *p) {
  const sh_token *t = p_cur(p);
  if (t->kind == SH_TK_INT || t->kind == SH_TK_IDENT) {
    p_next(p);
    sh_ast *e = p_new_expr(p, t->kind == SH_TK_INT ? SH_EX_INT : SH_EX_NAME, t->span);
    e->ival = t->kind == SH_TK_INT ? t->v.ival : 0;
    e->name = t->kind == SH_TK_IDENT ? t->v.sym : 0;
    e->name_span = t->span;
    return e;
  }
  if (t->kind == SH_TK_LPAREN) {
    p_next(p);
    sh_ast *e = p_dim(p);
    p_expect_close(p, SH_TK_RPAREN, t->span);
    return e;
  }
  p_error(p, t->span, "expected a size (a number or a size name like H) but found %s",
          sh_tok_desc(t->kind));
  return p_new_expr(p, SH_EX_ERROR, t->span);
}

/* dterm = dfactor { "*" dfactor } */
static sh_ast *p_dterm(parser *p) {
  sh_ast *e = p_dfactor(p);
  while (p_at(p, SH_TK_STAR) && !p->panic) {
    p_next(p);
    sh_ast *r = p_new_expr(p, SH_EX_BINARY, e->span);
    r->op = SH_TK_STAR;
    r->a = e;
    r->b = p_dfactor(p);
    r->span = sh_span_join(e->span, r->b->span);
    e = p_finish(p, r);
  }
  return e;
}

/* dim = dterm { ("+" | "-") dterm } */
sh_ast *p_dim(parser *p) {
  if (!p_enter(p, p_cur(p)->span)) return p_new_expr(p, SH_EX_ERROR, p_cur(p)->span);
  sh_ast *e = p_dterm(p);
  while ((p_at(p, SH_TK_PLUS) || p_at(p, SH_TK_MINUS)) && !p->panic) {
    sh_ast *r = p_new_expr(p, SH_EX_BINARY, e->span);
    r->op = p_next(p)->kind;
    r->a = e;
    r->b = p_dterm(p);
    r->span = sh_span_join(e->span, r->b->span);
    e = p_finish(p, r);
  }
  p_leave(p);
  return e;
}

/* type = "i32" | "bool" | "f32" "[" dim { "," dim } "]" | "list" "[" type "]"
 *      | "(" type { "," type } [","] ")" | IDENT */
sh_texpr *p_type(parser *p) {
  const sh_token *t = p_cur(p);
  if (!p_enter(p, t->span)) return new_tx(p, SH_TX_ERROR, t->span);
  sh_texpr *r;
  switch (t->kind) {
  case SH_TK_I32: p_next(p); r = new_tx(p, SH_TX_I32, t->span); break;
  case SH_TK_BOOL: p_next(p); r = new_tx(p, SH_TX_BOOL, t->span); break;
  case SH_TK_IDENT:
    p_next(p);
    r = new_tx(p, SH_TX_NAME, t->span);
    r->name = t->v.sym;
    break;
  case SH_TK_F32: {
    p_next(p);
    r = new_tx(p, SH_TX_TENSOR, t->span);
    const sh_token *open = p_cur(p);
    if (!p_at(p, SH_TK_LBRACKET)) { /* a host float (item's result) */
      r->kind = SH_TX_F32;
      break;
    }
    p_next(p);
    int cap = 0;
    do {
      if (!p_push(p, (void ***)&r->dims, &r->n, &cap, p_dim(p))) break;
    } while (!p->panic && p_accept(p, SH_TK_COMMA) && !p_at(p, SH_TK_RBRACKET));
    p_expect_close(p, SH_TK_RBRACKET, open->span);
    r->span = p_span_from(p, t->span);
    break;
  }
  case SH_TK_LIST: {
    p_next(p);
    r = new_tx(p, SH_TX_LIST, t->span);
    const sh_token *open = p_cur(p);
    if (!p_expect(p, SH_TK_LBRACKET)) break;
    int cap = 0;
    p_push(p, (void ***)&r->elems, &r->n, &cap, p_type(p));
    p_expect_close(p, SH_TK_RBRACKET, open->span);
    r->span = p_span_from(p, t->span);
    break;
  }
  case SH_TK_LPAREN: {
    p_next(p);
    r = new_tx(p, SH_TX_TUPLE, t->span);
    int cap = 0, name_cap = 0;
    bool comma = false;
    do {
      if (p_at(p, SH_TK_RPAREN)) break;
      /* (name: T, ...): named parts (what outputs call them) */
      sh_sym name = 0;
      if (p_at(p, SH_TK_IDENT) && p->pos + 1 < p->n && p->t[p->pos + 1].kind == SH_TK_COLON) {
        name = p_next(p)->v.sym;
        p_next(p);
      }
      if ((name || r->elem_names) && name_cap <= r->n) {
        int want = r->n + 8;
        sh_sym *nn = p_alloc(p, (size_t)want * sizeof *nn);
        if (!nn) break;
        memset(nn, 0, (size_t)want * sizeof *nn);
        if (r->elem_names) memcpy(nn, r->elem_names, (size_t)name_cap * sizeof *nn);
        r->elem_names = nn;
        name_cap = want;
      }
      if (name) r->elem_names[r->n] = name;
      if (!p_push(p, (void ***)&r->elems, &r->n, &cap, p_type(p))) break;
    } while (!p->panic && (comma = p_accept(p, SH_TK_COMMA)));
    p_expect_close(p, SH_TK_RPAREN, t->span);
    r->span = p_span_from(p, t->span);
    if (r->n == 1 && !comma) r = r->elems[0]; /* (T) is T */
    else if (r->n == 0 && !p->panic)
      p_error(p, r->span, "empty tuple type: a tuple has at least one element");
    break;
  }
  default:
    p_error(p, t->span, "expected a type (i32, bool, f32[...], list[...], a tuple or a type name) but found %s",
            sh_tok_desc(t->kind));
    r = new_tx(p, SH_TX_ERROR, t->span);
    break;
  }
  p_leave(p);
  return r;
}

/* ------------------------------------------------------------- patterns */

static sh_pat *new_pat(parser *p, sh_pat_kind kind, sh_span span) {
  sh_pat *q = p_alloc(p, sizeof *q);
  if (!q) {
    q = &p->scratch_pat;
    memset(q, 0, sizeof *q);
  }
  q->kind = kind;
  q->span = span;
  return q;
}

/* Parses "(" pattern { "," pattern } [","] ")" into q->items. */
static bool p_subpatterns(parser *p, sh_pat *q, bool *trailing_comma) {
  const sh_token *open = p_next(p);
  int cap = 0;
  *trailing_comma = false;
  while (!p_at(p, SH_TK_RPAREN) && !p->panic) {
    if (!p_push(p, (void ***)&q->items, &q->n, &cap, p_pattern(p))) break;
    *trailing_comma = p_accept(p, SH_TK_COMMA);
    if (!*trailing_comma) break;
  }
  return p_expect_close(p, SH_TK_RPAREN, open->span);
}

/* pattern = "_" | IDENT [ "(" [ pattern { "," pattern } ] ")" ]
 *         | "(" pattern { "," pattern } [","] ")" | [ "-" ] INT | "true" | "false" */
sh_pat *p_pattern(parser *p) {
  const sh_token *t = p_cur(p);
  if (!p_enter(p, t->span)) return new_pat(p, SH_PAT_ERROR, t->span);
  sh_pat *q;
  bool comma;
  switch (t->kind) {
  case SH_TK_UNDERSCORE: p_next(p); q = new_pat(p, SH_PAT_WILD, t->span); break;
  case SH_TK_TRUE:
  case SH_TK_FALSE:
    p_next(p);
    q = new_pat(p, SH_PAT_BOOL, t->span);
    q->ival = t->kind == SH_TK_TRUE;
    break;
  case SH_TK_INT:
    p_next(p);
    q = new_pat(p, SH_PAT_INT, t->span);
    q->ival = t->v.ival;
    break;
  case SH_TK_MINUS:
    p_next(p);
    q = new_pat(p, SH_PAT_INT, t->span);
    if (p_at(p, SH_TK_INT)) q->ival = -p_next(p)->v.ival;
    else p_error(p, p_cur(p)->span, "expected an integer after '-' in a pattern");
    q->span = p_span_from(p, t->span);
    break;
  case SH_TK_IDENT:
    p_next(p);
    q = new_pat(p, SH_PAT_VAR, t->span);
    q->name = t->v.sym;
    if (p_at(p, SH_TK_LPAREN)) {
      q->kind = SH_PAT_CTOR;
      p_subpatterns(p, q, &comma);
      q->span = p_span_from(p, t->span);
    }
    break;
  case SH_TK_LPAREN:
    q = new_pat(p, SH_PAT_TUPLE, t->span);
    p_subpatterns(p, q, &comma);
    q->span = p_span_from(p, t->span);
    if (q->n == 1 && !comma) q = q->items[0];
    else if (q->n == 0 && !p->panic) p_error(p, q->span, "empty tuple pattern");
    break;
  default:
    p_error(p, t->span, "expected a pattern (a name, _, a constructor like Leaf(w), or a tuple) but found %s",
            sh_tok_desc(t->kind));
    q = new_pat(p, SH_PAT_ERROR, t->span);
    break;
  }
  p_leave(p);
  return q;
}
