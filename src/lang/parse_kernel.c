/*
 * parse_kernel.c — the parser's rules for `kernel` declarations (tensor
 * comprehensions; docs/LANGUAGE.md, "Kernels"). Index arguments, range
 * bounds and right-hand sides are ordinary expressions and sizes (p_expr,
 * p_dim); the kernel checker (check_kernel.c) decides which forms a
 * kernel accepts. Statements end at `;` or at a line break; after an error
 * the parser skips to the next `;`, the next line that starts a statement
 * (`NAME(`), the kernel's `}` or a declaration.
 */
#include <string.h>

#include "lang/parser_int.h"

static const char *found(const parser *p) { return sh_tok_desc(p_kind(p)); }

static bool at_word(const parser *p, size_t ahead, const char *word) {
  if (p->nomem || p->pos + ahead >= p->n) return false;
  const sh_token *t = &p->t[p->pos + ahead];
  return t->kind == SH_TK_IDENT && strcmp(sh_sym_name(&p->m->syms, t->v.sym), word) == 0;
}

/* Whether token i + 1 starts right where token i ends (`+=!` has no spaces). */
static bool adjacent(const parser *p, size_t i) {
  return i + 1 < p->n && p->t[i].span.off + p->t[i].span.len == p->t[i + 1].span.off;
}

/* Grows a pool array of fixed-size items by one; NULL when out of memory. */
static void *grow(parser *p, void **v, int *n, int *cap, size_t item) {
  if (*n == *cap) {
    int nc = *cap ? 2 * *cap : 4;
    void *nv = p_alloc(p, (size_t)nc * item);
    if (!nv) return NULL;
    if (*n) memcpy(nv, *v, (size_t)*n * item);
    *v = nv;
    *cap = nc;
  }
  char *r = (char *)*v + (size_t)(*n)++ * item;
  memset(r, 0, item);
  return r;
}

/* kdim = IDENT "(" IDENT ")" | dim      (L(b): a ragged extent) */
static sh_ast *p_kdim(parser *p) {
  const sh_token *t = p_cur(p);
  if (t->kind == SH_TK_IDENT && p->t[p->pos + 1].kind == SH_TK_LPAREN) {
    p_next(p);
    const sh_token *open = p_next(p);
    sh_ast *e = p_new_expr(p, SH_EX_CALL, t->span);
    e->name = t->v.sym;
    e->name_span = t->span;
    int cap = 0;
    const sh_token *a = p_cur(p);
    if (a->kind == SH_TK_IDENT) {
      p_next(p);
      sh_ast *arg = p_new_expr(p, SH_EX_NAME, a->span);
      arg->name = a->v.sym;
      arg->name_span = a->span;
      p_push(p, (void ***)&e->items, &e->n, &cap, arg);
    } else {
      p_error(p, a->span, "expected the outer index of a ragged extent, as in L(b), but found %s",
              sh_tok_desc(a->kind));
    }
    p_expect_close(p, SH_TK_RPAREN, open->span);
    e->span = p_span_from(p, t->span);
    return p_finish(p, e);
  }
  return p_dim(p);
}

/* ktype = ( "f32" | "i32" ) "[" [ kdim { "," kdim } ] "]" */
static sh_ksyn_type *p_ktype(parser *p) {
  const sh_token *t = p_cur(p);
  sh_ksyn_type *ty = p_alloc(p, sizeof *ty);
  if (!ty) return NULL;
  ty->span = t->span;
  if (t->kind != SH_TK_F32 && t->kind != SH_TK_I32) {
    p_error(p, t->span, "expected a kernel tensor type (f32[...] or i32[...]) but found %s",
            sh_tok_desc(t->kind));
    return ty;
  }
  ty->i32 = t->kind == SH_TK_I32;
  p_next(p);
  const sh_token *open = p_cur(p);
  if (!p_at(p, SH_TK_LBRACKET)) {
    p_error(p, t->span, "%s needs a shape in brackets, e.g. %s[N, D]", ty->i32 ? "i32" : "f32",
            ty->i32 ? "i32" : "f32");
    return ty;
  }
  p_next(p);
  int cap = 0;
  while (!p_at(p, SH_TK_RBRACKET) && !p->panic) {
    if (!p_push(p, (void ***)&ty->dims, &ty->n, &cap, p_kdim(p))) break;
    if (!p_accept(p, SH_TK_COMMA)) break;
  }
  p_expect_close(p, SH_TK_RBRACKET, open->span);
  ty->span = p_span_from(p, t->span);
  return ty;
}

/* kparam = IDENT ":" ktype */
static void p_kparam(parser *p, sh_ksyn_param *q) {
  const sh_token *t = p_cur(p);
  q->span = t->span;
  if (t->kind != SH_TK_IDENT) {
    p_error(p, t->span, "expected a tensor name but found %s", sh_tok_desc(t->kind));
    return;
  }
  q->name = p_next(p)->v.sym;
  if (p_expect(p, SH_TK_COLON)) q->tx = p_ktype(p);
}

/* Parses "(" [ kparam { "," kparam } [","] ")" into *v. */
static void p_kparams(parser *p, sh_ksyn_param **v, int *n) {
  const sh_token *open = p_cur(p);
  if (!p_expect(p, SH_TK_LPAREN)) return;
  int cap = 0;
  while (!p_at(p, SH_TK_RPAREN) && !p->panic) {
    sh_ksyn_param *q = grow(p, (void **)v, n, &cap, sizeof *q);
    if (!q) return;
    p_kparam(p, q);
    if (!p_accept(p, SH_TK_COMMA)) break;
  }
  p_expect_close(p, SH_TK_RPAREN, open->span);
}

/* kop = "=" | ( "+" | "*" | "max" | "min" ) "=" [ "!" ]      (written without spaces) */
static bool p_kop(parser *p, sh_ksyn_stmt *s) {
  const sh_token *t = p_cur(p);
  size_t i = p->pos;
  s->op_span = t->span;
  if (t->kind == SH_TK_ASSIGN) {
    p_next(p);
    s->op = SH_KSYN_ASSIGN;
    if (p_at(p, SH_TK_BANG) && adjacent(p, i)) {
      p_error(p, sh_span_join(t->span, p_cur(p)->span),
              "'=!' is not an operator: '=' defines a tensor; '+=!', '*=!', 'max=!' and 'min=!' reduce");
      return false;
    }
    return true;
  }
  sh_ksyn_op op = t->kind == SH_TK_PLUS ? SH_KSYN_ADD : t->kind == SH_TK_STAR ? SH_KSYN_MUL
                  : at_word(p, 0, "max") ? SH_KSYN_MAX : at_word(p, 0, "min") ? SH_KSYN_MIN
                  : SH_KSYN_ASSIGN;
  if (op == SH_KSYN_ASSIGN || p->t[i + 1].kind != SH_TK_ASSIGN || !adjacent(p, i)) {
    p_error(p, t->span,
            "expected '=', '+=!', '*=!', 'max=!', 'min=!', '+=', '*=', 'max=' or 'min=' after the "
            "left-hand side but found %s",
            found(p));
    return false;
  }
  p_next(p);
  p_next(p);
  s->op = op;
  if (p_at(p, SH_TK_BANG) && adjacent(p, i + 1)) {
    p_next(p);
    s->init = true;
  }
  s->op_span = p_span_from(p, t->span);
  return true;
}

/* krange = IDENT "in" dim ".." kdim */
static void p_krange(parser *p, sh_ksyn_range *r) {
  const sh_token *t = p_cur(p);
  r->span = t->span;
  if (t->kind != SH_TK_IDENT) {
    p_error(p, t->span, "expected an index name after 'where' but found %s", sh_tok_desc(t->kind));
    return;
  }
  r->var = p_next(p)->v.sym;
  if (!p_expect(p, SH_TK_IN)) return;
  r->lo = p_dim(p);
  if (p->panic) return;
  if (!p_accept(p, SH_TK_DOTDOT)) {
    p_error(p, p_cur(p)->span, "expected '..' in the range of '%s' (as in 0..N) but found %s",
            sh_sym_name(&p->m->syms, r->var), found(p));
    return;
  }
  r->hi = p_kdim(p);
}

/* kstmt = IDENT "(" [ expr { "," expr } [","] ] ")" kop expr [ "where" krange { "," krange } ] */
static void p_kstmt(parser *p, sh_ksyn_stmt *s) {
  const sh_token *t = p_cur(p);
  s->span = s->lhs_span = t->span;
  if (t->kind != SH_TK_IDENT) {
    p_error(p, t->span, "expected a statement (as in y(i) = x(i)) but found %s", found(p));
    return;
  }
  s->lhs = p_next(p)->v.sym;
  const sh_token *open = p_cur(p);
  if (!p_at(p, SH_TK_LPAREN)) {
    p_error(p, open->span, "expected '(' and the indices of '%s' (as in %s(i, j)) but found %s",
            sh_sym_name(&p->m->syms, s->lhs), sh_sym_name(&p->m->syms, s->lhs), found(p));
    return;
  }
  p_next(p);
  int cap = 0;
  while (!p_at(p, SH_TK_RPAREN) && !p->panic) {
    if (!p_push(p, (void ***)&s->idx, &s->n_idx, &cap, p_expr(p))) return;
    if (!p_accept(p, SH_TK_COMMA)) break;
  }
  if (!p_expect_close(p, SH_TK_RPAREN, open->span) || !p_kop(p, s)) return;
  s->rhs = p_expr(p);
  if (p->panic) return;
  if (at_word(p, 0, "where") && p->pos + 1 < p->n && p->t[p->pos + 1].kind == SH_TK_IDENT) {
    p_next(p);
    int cap_w = 0;
    do {
      sh_ksyn_range *r = grow(p, (void **)&s->where, &s->n_where, &cap_w, sizeof *r);
      if (!r) return;
      p_krange(p, r);
    } while (!p->panic && p_accept(p, SH_TK_COMMA));
  }
  s->span = p_span_from(p, t->span);
}

/* After an error in a statement: skips to its end (past `;`, before `}`, a
 * declaration, or a line that starts a new statement `NAME(`). */
static void sync_kstmt(parser *p) {
  int depth = 0;
  uint32_t line = p->pos ? p->t[p->pos - 1].span.line : 0;
  for (;;) {
    sh_tok_kind k = p_kind(p);
    if (k == SH_TK_EOF || p_at_decl(p)) break;
    if (depth == 0 && k == SH_TK_SEMI) {
      p_next(p);
      break;
    }
    if (depth == 0 && k == SH_TK_RBRACE) break;
    if (depth == 0 && k == SH_TK_IDENT && p_cur(p)->span.line > line &&
        p->t[p->pos + 1].kind == SH_TK_LPAREN)
      break;
    if (k == SH_TK_LBRACE || k == SH_TK_LPAREN || k == SH_TK_LBRACKET) depth++;
    if ((k == SH_TK_RBRACE || k == SH_TK_RPAREN || k == SH_TK_RBRACKET) && depth > 0) depth--;
    p_next(p);
  }
  p->panic = false;
}

/* kernel_decl = "kernel" IDENT "(" [ kparam { "," kparam } [","] ] ")" "->" kresult
 *               "{" { kstmt ( ";" | NEWLINE ) } "}"
 * kresult     = ktype | "(" kparam { "," kparam } [","] ")" */
sh_kernel_decl *p_kernel_decl(parser *p) {
  p_next(p);
  sh_kernel_decl *k = p_alloc(p, sizeof *k);
  if (!k) return NULL;
  const sh_token *t = p_cur(p);
  k->span = t->span;
  k->name = p_next(p)->v.sym; /* p_at_decl saw `kernel NAME` */
  p_kparams(p, &k->params, &k->n_params);
  if (p->panic) return k;
  if (!p_at(p, SH_TK_ARROW)) {
    p_error(p, p_cur(p)->span, "expected '->' and the result of kernel '%s' but found %s",
            sh_sym_name(&p->m->syms, k->name), found(p));
    return k;
  }
  p_next(p);
  if (p_at(p, SH_TK_LPAREN)) {
    k->named_results = true;
    p_kparams(p, &k->results, &k->n_results);
    if (!p->panic && k->n_results == 0)
      p_error(p, p_cur(p)->span, "kernel '%s' has no results: name at least one, as in -> (y: f32[N])",
              sh_sym_name(&p->m->syms, k->name));
  } else {
    int cap = 0;
    sh_ksyn_param *r = grow(p, (void **)&k->results, &k->n_results, &cap, sizeof *r);
    if (!r) return k;
    r->span = p_cur(p)->span;
    r->tx = p_ktype(p);
  }
  if (p->panic) return k;
  const sh_token *open = p_cur(p);
  if (!p_at(p, SH_TK_LBRACE)) {
    p_error(p, open->span, "expected '{' to start the body of kernel '%s' but found %s",
            sh_sym_name(&p->m->syms, k->name), found(p));
    return k;
  }
  p_next(p);
  int cap = 0;
  for (;;) {
    while (p_accept(p, SH_TK_SEMI)) {}
    sh_tok_kind kind = p_kind(p);
    if (kind == SH_TK_RBRACE || kind == SH_TK_EOF || p_at_decl(p) || sh_diags_full(p->d)) break;
    sh_ksyn_stmt *s = grow(p, (void **)&k->stmts, &k->n_stmts, &cap, sizeof *s);
    if (!s) return k;
    p_kstmt(p, s);
    if (!p->panic && !p_at(p, SH_TK_SEMI) && !p_at(p, SH_TK_RBRACE) && !p_at(p, SH_TK_EOF) &&
        p_cur(p)->span.line == p->t[p->pos - 1].span.line)
      p_error(p, p_cur(p)->span, "expected ';' or a line break after the statement but found %s",
              found(p));
    if (p->panic) sync_kstmt(p);
  }
  if (!p->panic && k->n_stmts == 0 && p_at(p, SH_TK_RBRACE))
    p_error(p, p_cur(p)->span, "kernel '%s' has no statements",
            sh_sym_name(&p->m->syms, k->name));
  p_expect_close(p, SH_TK_RBRACE, open->span);
  return k;
}
