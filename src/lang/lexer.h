/*
 * lexer.h — tokens of the Sheaf model language and the symbol interner.
 *
 * The lexer turns a whole source buffer into an array of tokens (ending with
 * SH_TK_EOF) before parsing starts. Identifiers are interned: each distinct
 * name gets a small integer (sh_sym), so the parser and checker compare
 * names by number and index tables by them. Comments run from '#' to the end
 * of the line. Lexical errors (a stray byte, an integer literal that does not
 * fit in i32) are reported through the diagnostics; a stray byte becomes an
 * SH_TK_ERROR token (the parser recovers at it without a second report).
 * `size` and `kernel` are not keywords: the parser recognizes `size NAME` and
 * `kernel NAME` at the start of a declaration (SH_TK_SIZE and SH_TK_KERNEL
 * are never produced by the lexer); so is `where` after a kernel statement.
 */
#ifndef SH_LANG_LEXER_H
#define SH_LANG_LEXER_H

#include "lang/diag.h"
#include "lang/pool.h"

typedef uint32_t sh_sym; /* 0 is "no name" */

typedef enum sh_tok_kind {
  SH_TK_EOF = 0,
  SH_TK_ERROR,
  SH_TK_IDENT,
  SH_TK_INT,
  SH_TK_FLOAT,
  /* keywords */
  SH_TK_TYPE, SH_TK_PARAM, SH_TK_SIZE, SH_TK_FN, SH_TK_LET, SH_TK_MATCH, SH_TK_IF,
  SH_TK_ELSE, SH_TK_FOR, SH_TK_IN, SH_TK_PHASE, SH_TK_TRUE, SH_TK_FALSE, SH_TK_I32,
  SH_TK_BOOL, SH_TK_F32, SH_TK_LIST, SH_TK_KERNEL, SH_TK_WHILE,
  /* punctuation */
  SH_TK_LPAREN, SH_TK_RPAREN, SH_TK_LBRACKET, SH_TK_RBRACKET, SH_TK_LBRACE, SH_TK_RBRACE,
  SH_TK_COMMA, SH_TK_COLON, SH_TK_SEMI, SH_TK_ARROW, SH_TK_FATARROW, SH_TK_ASSIGN,
  SH_TK_EQ, SH_TK_NE, SH_TK_LT, SH_TK_LE, SH_TK_GT, SH_TK_GE, SH_TK_PLUS, SH_TK_MINUS,
  SH_TK_STAR, SH_TK_SLASH, SH_TK_PERCENT, SH_TK_AT, SH_TK_BANG, SH_TK_ANDAND, SH_TK_OROR,
  SH_TK_BAR, SH_TK_DOTDOT, SH_TK_UNDERSCORE,
  SH_TK_COUNT_
} sh_tok_kind;

typedef struct sh_token {
  sh_tok_kind kind;
  sh_span span;
  union {
    int64_t ival; /* SH_TK_INT (always within i32 range) */
    double fval;  /* SH_TK_FLOAT */
    sh_sym sym;   /* SH_TK_IDENT */
  } v;
} sh_token;

/* Interned names: open addressing over arena-allocated strings. */
typedef struct sh_symtab {
  sh_lang_pool *arena;
  const char **names; /* names[sym], sym >= 1 */
  uint32_t *hash;     /* hash[i] = sym or 0 (table of cap slots) */
  uint32_t n, cap, names_cap;
  sheaf_ctx *ctx;
} sh_symtab;

void sh_symtab_init(sh_symtab *t, sheaf_ctx *ctx, sh_lang_pool *arena);
void sh_symtab_free(sh_symtab *t);
/* 0 on out of memory. */
sh_sym sh_symtab_intern(sh_symtab *t, const char *s, size_t n);
/* Lookup without inserting; 0 when absent. */
sh_sym sh_symtab_find(const sh_symtab *t, const char *s, size_t n);
static inline const char *sh_sym_name(const sh_symtab *t, sh_sym s) {
  return s && s <= t->n ? t->names[s] : "?";
}

/* The whole token array of a source. */
typedef struct sh_tokens {
  sh_token *v;
  size_t n;
} sh_tokens;

/* Lexes src into tokens allocated in arena. Errors go to d. Returns
 * SHEAF_ERR_NOMEM only when out of memory (lexical errors are diagnostics). */
sheaf_status sh_lex(const char *src, size_t len, sh_symtab *syms, sh_lang_pool *arena,
                    sh_diags *d, sh_tokens *out);

/* A token kind as written in messages: "'=>'", "identifier", "end of file". */
const char *sh_tok_desc(sh_tok_kind k);

#endif
