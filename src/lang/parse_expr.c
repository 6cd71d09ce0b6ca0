/*
 * parse_expr.c — the expression half of the recursive-descent parser:
 * operators by precedence (Python's: `@` binds like `*`), postfix indexing
 * and slicing, calls, tuples, lists, blocks, if, match, for and phase.
 */
#include <string.h>

#include "lang/parser_int.h"

static sh_ast *p_unary(parser *p);

static sh_ast *binary(parser *p, sh_ast *a, sh_tok_kind op, sh_ast *b) {
  sh_ast *e = p_new_expr(p, SH_EX_BINARY, sh_span_join(a->span, b->span));
  e->op = op;
  e->a = a;
  e->b = b;
  return p_finish(p, e);
}

/* mul_expr = unary { ("*" | "/" | "%" | "@") unary } */
static sh_ast *p_mul(parser *p) {
  sh_ast *e = p_unary(p);
  for (;;) {
    sh_tok_kind k = p_kind(p);
    if ((k != SH_TK_STAR && k != SH_TK_SLASH && k != SH_TK_PERCENT && k != SH_TK_AT) || p->panic)
      return e;
    p_next(p);
    e = binary(p, e, k, p_unary(p));
  }
}

/* add_expr = mul_expr { ("+" | "-") mul_expr } */
static sh_ast *p_add(parser *p) {
  sh_ast *e = p_mul(p);
  for (;;) {
    sh_tok_kind k = p_kind(p);
    if ((k != SH_TK_PLUS && k != SH_TK_MINUS) || p->panic) return e;
    p_next(p);
    e = binary(p, e, k, p_mul(p));
  }
}

static bool is_cmp(sh_tok_kind k) {
  return k == SH_TK_EQ || k == SH_TK_NE || k == SH_TK_LT || k == SH_TK_LE || k == SH_TK_GT ||
         k == SH_TK_GE;
}

/* cmp_expr = add_expr [ ("==" | "!=" | "<" | "<=" | ">" | ">=") add_expr ] */
static sh_ast *p_cmp(parser *p) {
  sh_ast *e = p_add(p);
  sh_tok_kind k = p_kind(p);
  if (!is_cmp(k) || p->panic) return e;
  p_next(p);
  e = binary(p, e, k, p_add(p));
  if (is_cmp(p_kind(p)))
    p_error(p, p_cur(p)->span, "comparisons do not chain: write (a < b) && (b < c)");
  return e;
}

/* and_expr = cmp_expr { "&&" cmp_expr } */
static sh_ast *p_and(parser *p) {
  sh_ast *e = p_cmp(p);
  while (p_at(p, SH_TK_ANDAND) && !p->panic) {
    p_next(p);
    e = binary(p, e, SH_TK_ANDAND, p_cmp(p));
  }
  return e;
}

/* expr = and_expr { "||" and_expr } */
sh_ast *p_expr(parser *p) {
  if (!p_enter(p, p_cur(p)->span)) return p_new_expr(p, SH_EX_ERROR, p_cur(p)->span);
  sh_ast *e = p_and(p);
  while (p_at(p, SH_TK_OROR) && !p->panic) {
    p_next(p);
    e = binary(p, e, SH_TK_OROR, p_and(p));
  }
  p_leave(p);
  return e;
}

/* Parses "expr { , expr } [,]" up to `close` into e->items; returns whether
 * a comma was seen. */
static bool p_items(parser *p, sh_ast *e, sh_tok_kind close, sh_span open) {
  int cap = 0;
  bool comma = false;
  while (!p_at(p, close) && !p->panic) {
    if (!p_push(p, (void ***)&e->items, &e->n, &cap, p_expr(p))) break;
    if (!p_accept(p, SH_TK_COMMA)) break;
    comma = true;
  }
  p_expect_close(p, close, open);
  return comma;
}

/* if_expr = "if" expr block "else" ( block | if_expr ) */
static sh_ast *p_if(parser *p) {
  const sh_token *kw = p_next(p);
  sh_ast *e = p_new_expr(p, SH_EX_IF, kw->span);
  e->a = p_expr(p);
  if (!p->panic && !p_at(p, SH_TK_LBRACE))
    p_error(p, p_cur(p)->span, "expected '{' after the condition of 'if' but found %s",
            sh_tok_desc(p_kind(p)));
  e->b = p->panic ? p_new_expr(p, SH_EX_ERROR, kw->span) : p_block(p);
  if (p->panic) {
    e->c = p_new_expr(p, SH_EX_ERROR, kw->span);
  } else if (!p_accept(p, SH_TK_ELSE)) {
    p_error(p, p_cur(p)->span, "'if' needs an 'else' branch (both branches give the value)");
    e->c = p_new_expr(p, SH_EX_ERROR, kw->span);
  } else if (p_at(p, SH_TK_IF)) {
    if (p_enter(p, p_cur(p)->span)) {
      e->c = p_if(p);
      p_leave(p);
    } else {
      e->c = p_new_expr(p, SH_EX_ERROR, kw->span);
    }
  } else {
    e->c = p_block(p);
  }
  e->span = p_span_from(p, kw->span);
  return p_finish(p, e);
}

/* Skips to the end of a match arm after an error: past `,` or before `}`. */
static void sync_arm(parser *p) {
  int depth = 0;
  for (;;) {
    sh_tok_kind k = p_kind(p);
    if (k == SH_TK_EOF || k == SH_TK_FN || k == SH_TK_TYPE || k == SH_TK_PARAM) break;
    if (depth == 0 && (k == SH_TK_COMMA || k == SH_TK_SEMI)) {
      p_next(p);
      break;
    }
    if (depth == 0 && k == SH_TK_RBRACE) break;
    if (k == SH_TK_LBRACE || k == SH_TK_LPAREN || k == SH_TK_LBRACKET) depth++;
    if ((k == SH_TK_RBRACE || k == SH_TK_RPAREN || k == SH_TK_RBRACKET) && depth > 0) depth--;
    p_next(p);
  }
  p->panic = false;
}

/* match_expr = "match" expr "{" { arm } "}"
 * arm        = pattern "=>" expr [ "," ]     (the "," is required unless the arm's
 *                                             body is a block or the arm is last) */
static sh_ast *p_match(parser *p) {
  const sh_token *kw = p_next(p);
  sh_ast *e = p_new_expr(p, SH_EX_MATCH, kw->span);
  e->a = p_expr(p);
  const sh_token *open = p_cur(p);
  if (p->panic || !p_expect(p, SH_TK_LBRACE)) {
    e->span = p_span_from(p, kw->span);
    return p_finish(p, e);
  }
  int cap = 0;
  while (!p_at(p, SH_TK_RBRACE) && !p_at(p, SH_TK_EOF) && !sh_diags_full(p->d)) {
    if (e->n == cap) {
      int nc = cap ? 2 * cap : 4;
      sh_arm *nv = sh_lang_alloc(p->pool, (size_t)nc * sizeof *nv);
      if (!nv) {
        p->nomem = true;
        break;
      }
      if (e->n) memcpy(nv, e->arms, (size_t)e->n * sizeof *nv);
      e->arms = nv;
      cap = nc;
    }
    sh_arm *arm = &e->arms[e->n++];
    arm->pat = p_pattern(p);
    arm->body = NULL;
    if (!p->panic && p_expect(p, SH_TK_FATARROW)) arm->body = p_expr(p);
    if (!arm->body) arm->body = p_new_expr(p, SH_EX_ERROR, arm->pat->span);
    if (!p->panic && !p_accept(p, SH_TK_COMMA) && !p_at(p, SH_TK_RBRACE) &&
        arm->body->kind != SH_EX_BLOCK)
      p_error(p, p_cur(p)->span, "expected ',' or '}' after a match arm but found %s",
              sh_tok_desc(p_kind(p)));
    if (p->panic) sync_arm(p);
  }
  p_expect_close(p, SH_TK_RBRACE, open->span);
  e->span = p_span_from(p, kw->span);
  if (e->n == 0 && !p->panic) p_error(p, e->span, "'match' needs at least one arm");
  return p_finish(p, e);
}

/* for_expr = "for" pattern "in" expr [ ".." expr ] block */
static sh_ast *p_for(parser *p) {
  const sh_token *kw = p_next(p);
  sh_ast *e = p_new_expr(p, SH_EX_FOR, kw->span);
  e->pat = p_pattern(p);
  if (!p->panic && p_expect(p, SH_TK_IN)) {
    e->a = p_expr(p);
    if (!p->panic && p_accept(p, SH_TK_DOTDOT)) e->b = p_expr(p);
  }
  if (!p->panic && !p_at(p, SH_TK_LBRACE))
    p_error(p, p_cur(p)->span, "expected '{' to start the body of 'for' but found %s",
            sh_tok_desc(p_kind(p)));
  e->c = p->panic ? NULL : p_block(p);
  if (!e->a) e->a = p_new_expr(p, SH_EX_ERROR, kw->span);
  if (!e->c) e->c = p_new_expr(p, SH_EX_ERROR, kw->span);
  e->span = p_span_from(p, kw->span);
  return p_finish(p, e);
}

/* while_expr = "while" pattern [ ":" type ] "=" expr ";" expr "max" expr block
 * (`max` is a contextual keyword: after the condition, an identifier) */
static sh_ast *p_while(parser *p) {
  const sh_token *kw = p_cur(p);
  sh_ast *e = p_new_expr(p, SH_EX_WHILE, kw->span);
  sh_let *l = p_alloc(p, sizeof *l);
  if (!l) return e;
  memset(l, 0, sizeof *l);
  e->lets = l;
  e->n = 1;
  p_let(p, l, "the state of 'while' (while STATE = INIT; COND max N { ... })");
  if (!p->panic) e->a = p_expr(p);
  if (!p->panic) {
    const sh_token *t = p_cur(p);
    if (t->kind == SH_TK_IDENT && !strcmp(sh_sym_name(&p->m->syms, t->v.sym), "max")) {
      p_next(p);
      e->b = p_expr(p);
    } else {
      p_error(p, t->span, "expected 'max N' after the condition of 'while' (every loop has a bound) but found %s",
              sh_tok_desc(t->kind));
    }
  }
  if (!p->panic && !p_at(p, SH_TK_LBRACE))
    p_error(p, p_cur(p)->span, "expected '{' to start the body of 'while' but found %s",
            sh_tok_desc(p_kind(p)));
  e->c = p->panic ? NULL : p_block(p);
  if (!e->a) e->a = p_new_expr(p, SH_EX_ERROR, kw->span);
  if (!e->b) e->b = p_new_expr(p, SH_EX_ERROR, kw->span);
  if (!e->c) e->c = p_new_expr(p, SH_EX_ERROR, kw->span);
  e->span = p_span_from(p, kw->span);
  return p_finish(p, e);
}

/* phase_expr = "phase" INT block */
static sh_ast *p_phase(parser *p) {
  const sh_token *kw = p_next(p);
  sh_ast *e = p_new_expr(p, SH_EX_PHASE, kw->span);
  if (p_at(p, SH_TK_INT)) e->ival = p_next(p)->v.ival;
  else p_error(p, p_cur(p)->span, "expected the phase number after 'phase' but found %s",
               sh_tok_desc(p_kind(p)));
  e->a = p->panic ? p_new_expr(p, SH_EX_ERROR, kw->span) : p_block(p);
  e->span = p_span_from(p, kw->span);
  return p_finish(p, e);
}

/* primary = INT | FLOAT | "true" | "false" | IDENT [ "(" [ expr { "," expr } [","] ] ")" ]
 *         | "(" expr { "," expr } [","] ")" | "[" expr { "," expr } [","] "]"
 *         | block | if_expr | match_expr | for_expr | phase_expr */
static sh_ast *p_primary(parser *p) {
  const sh_token *t = p_cur(p);
  sh_ast *e;
  switch (t->kind) {
  case SH_TK_INT:
  case SH_TK_FLOAT:
    p_next(p);
    e = p_new_expr(p, t->kind == SH_TK_INT ? SH_EX_INT : SH_EX_FLOAT, t->span);
    if (t->kind == SH_TK_INT) e->ival = t->v.ival;
    else e->fval = t->v.fval;
    return e;
  case SH_TK_TRUE:
  case SH_TK_FALSE:
    p_next(p);
    e = p_new_expr(p, SH_EX_BOOL, t->span);
    e->ival = t->kind == SH_TK_TRUE;
    return e;
  case SH_TK_IDENT:
    p_next(p);
    e = p_new_expr(p, SH_EX_NAME, t->span);
    e->name = t->v.sym;
    e->name_span = t->span;
    if (p_at(p, SH_TK_LPAREN)) {
      const sh_token *open = p_next(p);
      e->kind = SH_EX_CALL;
      p_items(p, e, SH_TK_RPAREN, open->span);
      e->span = p_span_from(p, t->span);
      return p_finish(p, e);
    }
    return e;
  case SH_TK_LPAREN: {
    p_next(p);
    e = p_new_expr(p, SH_EX_TUPLE, t->span);
    bool comma = p_items(p, e, SH_TK_RPAREN, t->span);
    e->span = p_span_from(p, t->span);
    if (e->n == 1 && !comma) return e->items[0]; /* (e) is e */
    if (e->n == 0 && !p->panic)
      p_error(p, e->span, "empty tuple '()': a tuple has at least one element");
    return p_finish(p, e);
  }
  case SH_TK_LBRACKET:
    p_next(p);
    e = p_new_expr(p, SH_EX_LIST, t->span);
    p_items(p, e, SH_TK_RBRACKET, t->span);
    e->span = p_span_from(p, t->span);
    return p_finish(p, e); /* '[]' is typed by a let's annotation (the checker) */
  case SH_TK_LBRACE: return p_block(p);
  case SH_TK_IF: return p_if(p);
  case SH_TK_MATCH: return p_match(p);
  case SH_TK_FOR: return p_for(p);
  case SH_TK_PHASE: return p_phase(p);
  case SH_TK_WHILE: return p_while(p);
  default:
    p_error(p, t->span, "expected an expression but found %s", sh_tok_desc(t->kind));
    return p_new_expr(p, SH_EX_ERROR, t->span);
  }
}

/* postfix = primary { "[" ( expr | [ expr ] ":" [ expr ] ) "]" } */
static sh_ast *p_postfix(parser *p) {
  sh_ast *e = p_primary(p);
  while (p_at(p, SH_TK_LBRACKET) && !p->panic) {
    const sh_token *open = p_next(p);
    sh_ast *r = p_new_expr(p, SH_EX_INDEX, e->span);
    r->a = e;
    if (!p_at(p, SH_TK_COLON)) r->b = p_expr(p);
    if (!p->panic && p_accept(p, SH_TK_COLON)) {
      r->kind = SH_EX_SLICE;
      if (!p_at(p, SH_TK_RBRACKET)) r->c = p_expr(p);
    } else if (!r->b) {
      r->b = p_new_expr(p, SH_EX_ERROR, open->span);
    }
    p_expect_close(p, SH_TK_RBRACKET, open->span);
    r->span = p_span_from(p, e->span);
    e = p_finish(p, r);
  }
  return e;
}

/* unary = ( "-" | "!" ) unary | postfix */
static sh_ast *p_unary(parser *p) {
  const sh_token *t = p_cur(p);
  if (t->kind != SH_TK_MINUS && t->kind != SH_TK_BANG) return p_postfix(p);
  if (!p_enter(p, t->span)) return p_new_expr(p, SH_EX_ERROR, t->span);
  p_next(p);
  sh_ast *e = p_new_expr(p, SH_EX_UNARY, t->span);
  e->op = t->kind;
  e->a = p_unary(p);
  e->span = sh_span_join(t->span, e->a->span);
  p_leave(p);
  return p_finish(p, e);
}
