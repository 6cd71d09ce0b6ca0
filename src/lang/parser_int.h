/*
 * parser_int.h — state shared by the two halves of the parser
 * (parser.c: declarations, types, patterns, blocks; parse_expr.c:
 * expressions). Not for use outside src/lang/parser*.c and parse_expr.c.
 */
#ifndef SH_LANG_PARSER_INT_H
#define SH_LANG_PARSER_INT_H

#include "lang/parser.h"

#define SH_LANG_MAX_TREE_DEPTH 1024 /* depth of an expression tree (a + b + ... chains) */

typedef struct parser {
  sh_module *m;
  sh_lang_pool *pool;
  sh_diags *d;
  const sh_token *t; /* tokens, ending with EOF */
  size_t pos, n;
  bool panic; /* an error was reported; quiet until the next sync point */
  bool nomem;
  int depth;  /* recursion depth of nested constructs */
  sh_ast scratch_expr; /* handed out when an allocation fails */
  sh_pat scratch_pat;
  sh_texpr scratch_tx;
} parser;

static inline const sh_token *p_cur(const parser *p) { return &p->t[p->pos]; }
static inline sh_tok_kind p_kind(const parser *p) { return p->nomem ? SH_TK_EOF : p->t[p->pos].kind; }
static inline bool p_at(const parser *p, sh_tok_kind k) { return p_kind(p) == k; }
static inline const sh_token *p_next(parser *p) {
  const sh_token *t = &p->t[p->pos];
  if (t->kind != SH_TK_EOF) p->pos++;
  return t;
}
static inline bool p_accept(parser *p, sh_tok_kind k) {
  if (!p_at(p, k)) return false;
  p_next(p);
  return true;
}

/* Reports an error and enters panic mode (quiet when the current token is
 * a lexical error, which the lexer reported already). */
void p_error(parser *p, sh_span at, const char *fmt, ...) SH_PRINTF(3, 4);
/* At `type`, `param`, `fn`, or `size NAME` (size is a contextual keyword). */
bool p_at_decl(const parser *p);
/* Consumes a token of kind k, or reports "expected K but found X". */
bool p_expect(parser *p, sh_tok_kind k);
/* Like p_expect for a closing delimiter; the note points at the opener. */
bool p_expect_close(parser *p, sh_tok_kind k, sh_span open);
/* Enters one nesting level; false (error reported) when too deep. */
bool p_enter(parser *p, sh_span at);
static inline void p_leave(parser *p) { p->depth--; }
/* The span from start to the end of the last consumed token. */
sh_span p_span_from(const parser *p, sh_span start);

sh_ast *p_new_expr(parser *p, sh_ast_kind kind, sh_span span);
/* Sets e->depth from its children; reports an expression nested too deeply. */
sh_ast *p_finish(parser *p, sh_ast *e);
/* Pool memory; NULL (and p->nomem) when out of memory. */
void *p_alloc(parser *p, size_t size);
/* Appends item to a pool vector (doubling); false when out of memory. */
bool p_push(parser *p, void ***v, int *n, int *cap, void *item);

sh_ast *p_expr(parser *p);
sh_ast *p_block(parser *p);
/* `KW pattern [":" type] "=" expr ";"` at the keyword (let, while's state);
 * `what` names it in the message about a missing ';'. */
void p_let(parser *p, sh_let *l, const char *what);
sh_pat *p_pattern(parser *p);
sh_texpr *p_type(parser *p);
/* A size expression (types' dimensions): INT, IDENT, + - * and parentheses. */
sh_ast *p_dim(parser *p);
/* kernel_decl, at `kernel NAME` (parse_kernel.c). */
sh_kernel_decl *p_kernel_decl(parser *p);

#endif
