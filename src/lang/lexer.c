/*
 * lexer.c — the symbol interner and the lexer of the model language
 * (see lexer.h). The lexer scans the whole source once; every byte belongs to
 * a token, whitespace or a comment, and every loop advances, so any input
 * terminates in linear time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lang/lexer.h"

/* ------------------------------------------------------------- interner */

static uint32_t hash_bytes(const char *s, size_t n) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
  return h;
}

void sh_symtab_init(sh_symtab *t, sheaf_ctx *ctx, sh_lang_pool *arena) {
  memset(t, 0, sizeof *t);
  t->ctx = ctx;
  t->arena = arena;
}

void sh_symtab_free(sh_symtab *t) {
  sh_free(t->ctx, t->hash, t->cap * sizeof *t->hash);
  sh_free(t->ctx, (void *)t->names, t->names_cap * sizeof *t->names);
  memset(t, 0, sizeof *t);
}

static uint32_t *slot_of(const sh_symtab *t, const char *s, size_t n) {
  if (!t->cap) return NULL;
  uint32_t mask = t->cap - 1, i = hash_bytes(s, n) & mask;
  for (;;) {
    uint32_t sym = t->hash[i];
    if (!sym) return &t->hash[i];
    const char *name = t->names[sym];
    if (strlen(name) == n && memcmp(name, s, n) == 0) return &t->hash[i];
    i = (i + 1) & mask;
  }
}

sh_sym sh_symtab_find(const sh_symtab *t, const char *s, size_t n) {
  uint32_t *slot = slot_of(t, s, n);
  return slot ? *slot : 0;
}

static bool grow(sh_symtab *t) {
  if (t->n + 2 > t->names_cap) {
    uint32_t cap = t->names_cap ? 2 * t->names_cap : 64;
    const char **names = sh_realloc(t->ctx, (void *)t->names, t->names_cap * sizeof *names,
                                    cap * sizeof *names);
    if (!names) return false;
    t->names = names;
    t->names_cap = cap;
  }
  if (2 * (t->n + 1) > t->cap) {
    uint32_t cap = t->cap ? 2 * t->cap : 128;
    uint32_t *hash = sh_calloc(t->ctx, cap, sizeof *hash);
    if (!hash) return false;
    uint32_t *old = t->hash, old_cap = t->cap;
    t->hash = hash;
    t->cap = cap;
    for (uint32_t sym = 1; sym <= t->n; sym++)
      *slot_of(t, t->names[sym], strlen(t->names[sym])) = sym;
    sh_free(t->ctx, old, old_cap * sizeof *old);
  }
  return true;
}

sh_sym sh_symtab_intern(sh_symtab *t, const char *s, size_t n) {
  uint32_t *slot = slot_of(t, s, n);
  if (slot && *slot) return *slot;
  if (!grow(t)) return 0;
  char *copy = sh_lang_strndup(t->arena, s, n);
  if (!copy) return 0;
  t->names[++t->n] = copy;
  *slot_of(t, s, n) = t->n;
  return t->n;
}

/* ---------------------------------------------------------------- lexer */

static const struct { const char *word; sh_tok_kind kind; } keywords[] = {
    {"type", SH_TK_TYPE},   {"param", SH_TK_PARAM},
    {"fn", SH_TK_FN},       {"let", SH_TK_LET},     {"match", SH_TK_MATCH},
    {"if", SH_TK_IF},       {"else", SH_TK_ELSE},   {"for", SH_TK_FOR},
    {"in", SH_TK_IN},       {"phase", SH_TK_PHASE}, {"true", SH_TK_TRUE},
    {"false", SH_TK_FALSE}, {"i32", SH_TK_I32},     {"bool", SH_TK_BOOL},
    {"f32", SH_TK_F32},     {"list", SH_TK_LIST},   {"while", SH_TK_WHILE},
};

static const char *const tok_desc[SH_TK_COUNT_] = {
    [SH_TK_EOF] = "end of file", [SH_TK_ERROR] = "invalid token",
    [SH_TK_IDENT] = "identifier", [SH_TK_INT] = "integer", [SH_TK_FLOAT] = "number",
    [SH_TK_TYPE] = "'type'", [SH_TK_PARAM] = "'param'", [SH_TK_SIZE] = "'size'",
    [SH_TK_FN] = "'fn'", [SH_TK_LET] = "'let'", [SH_TK_MATCH] = "'match'",
    [SH_TK_IF] = "'if'", [SH_TK_ELSE] = "'else'", [SH_TK_FOR] = "'for'", [SH_TK_IN] = "'in'",
    [SH_TK_PHASE] = "'phase'", [SH_TK_TRUE] = "'true'", [SH_TK_FALSE] = "'false'",
    [SH_TK_I32] = "'i32'", [SH_TK_BOOL] = "'bool'", [SH_TK_F32] = "'f32'",
    [SH_TK_LIST] = "'list'", [SH_TK_KERNEL] = "'kernel'", [SH_TK_WHILE] = "'while'",
    [SH_TK_LPAREN] = "'('", [SH_TK_RPAREN] = "')'",
    [SH_TK_LBRACKET] = "'['", [SH_TK_RBRACKET] = "']'", [SH_TK_LBRACE] = "'{'",
    [SH_TK_RBRACE] = "'}'", [SH_TK_COMMA] = "','", [SH_TK_COLON] = "':'",
    [SH_TK_SEMI] = "';'", [SH_TK_ARROW] = "'->'", [SH_TK_FATARROW] = "'=>'",
    [SH_TK_ASSIGN] = "'='", [SH_TK_EQ] = "'=='", [SH_TK_NE] = "'!='", [SH_TK_LT] = "'<'",
    [SH_TK_LE] = "'<='", [SH_TK_GT] = "'>'", [SH_TK_GE] = "'>='", [SH_TK_PLUS] = "'+'",
    [SH_TK_MINUS] = "'-'", [SH_TK_STAR] = "'*'", [SH_TK_SLASH] = "'/'",
    [SH_TK_PERCENT] = "'%'", [SH_TK_AT] = "'@'", [SH_TK_BANG] = "'!'",
    [SH_TK_ANDAND] = "'&&'", [SH_TK_OROR] = "'||'", [SH_TK_BAR] = "'|'",
    [SH_TK_DOTDOT] = "'..'", [SH_TK_UNDERSCORE] = "'_'",
};

const char *sh_tok_desc(sh_tok_kind k) {
  return (unsigned)k < SH_TK_COUNT_ && tok_desc[k] ? tok_desc[k] : "token";
}

typedef struct lexer {
  const char *src;
  size_t len, pos;
  uint32_t line;
  size_t line_start;
  sh_symtab *syms;
  sh_lang_pool *arena;
  sh_diags *d;
  sh_tokens toks;
  size_t cap;
} lexer;

static bool is_ident_start(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(int c) { return c >= '0' && c <= '9'; }
static bool is_ident(int c) { return is_ident_start(c) || is_digit(c); }

static int peek(const lexer *l, size_t k) {
  return l->pos + k < l->len ? (unsigned char)l->src[l->pos + k] : -1;
}

static sh_token *push(lexer *l, sh_tok_kind kind, size_t start) {
  if (l->toks.n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 256;
    sh_token *v = sh_lang_alloc(l->arena, cap * sizeof *v);
    if (!v) return NULL;
    if (l->toks.n) memcpy(v, l->toks.v, l->toks.n * sizeof *v);
    l->toks.v = v;
    l->cap = cap;
  }
  sh_token *t = &l->toks.v[l->toks.n++];
  memset(t, 0, sizeof *t);
  t->kind = kind;
  t->span.off = (uint32_t)start;
  t->span.len = (uint32_t)(l->pos - start);
  t->span.line = l->line;
  t->span.col = (uint32_t)(start - l->line_start + 1);
  return t;
}

/* Skips whitespace and comments. */
static void skip_space(lexer *l) {
  while (l->pos < l->len) {
    int c = peek(l, 0);
    if (c == '\n') {
      l->pos++;
      l->line++;
      l->line_start = l->pos;
    } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
      l->pos++;
    } else if (c == '#') {
      while (l->pos < l->len && l->src[l->pos] != '\n') l->pos++;
    } else {
      return;
    }
  }
}

/* number = digit { digit } [ "." digit { digit } ] [ ("e"|"E") ["+"|"-"] digit { digit } ] */
static sheaf_status lex_number(lexer *l, size_t start) {
  bool is_float = false;
  while (is_digit(peek(l, 0))) l->pos++;
  if (peek(l, 0) == '.' && is_digit(peek(l, 1))) {
    is_float = true;
    l->pos++;
    while (is_digit(peek(l, 0))) l->pos++;
  }
  if ((peek(l, 0) == 'e' || peek(l, 0) == 'E') &&
      (is_digit(peek(l, 1)) || ((peek(l, 1) == '+' || peek(l, 1) == '-') && is_digit(peek(l, 2))))) {
    is_float = true;
    l->pos += 2;
    while (is_digit(peek(l, 0))) l->pos++;
  }
  bool junk = false;
  while (is_ident(peek(l, 0))) {
    junk = true;
    l->pos++;
  }
  size_t n = l->pos - start;
  sh_token *t = push(l, is_float ? SH_TK_FLOAT : SH_TK_INT, start);
  if (!t) return SHEAF_ERR_NOMEM;
  if (junk) { /* reported; parsing goes on as if it were a number */
    sh_diag_error(l->d, t->span, "invalid number '%.*s'", (int)(n > 40 ? 40 : n), l->src + start);
  } else if (is_float) {
    char buf[64];
    if (n >= sizeof buf) {
      sh_diag_error(l->d, t->span, "number literal is too long");
      return SHEAF_OK;
    }
    memcpy(buf, l->src + start, n);
    buf[n] = '\0';
    t->v.fval = strtod(buf, NULL);
    if (t->v.fval > 3.4028234663852886e38) {
      sh_diag_error(l->d, t->span, "number %s does not fit in f32", buf);
    }
  } else {
    int64_t v = 0;
    for (size_t i = start; i < l->pos; i++) {
      v = v * 10 + (l->src[i] - '0');
      if (v > INT32_MAX) break;
    }
    if (v > INT32_MAX) {
      v = 0;
      sh_diag_error(l->d, t->span, "integer literal %.*s does not fit in i32 (max 2147483647)",
                    (int)(n > 40 ? 40 : n), l->src + start);
    }
    t->v.ival = v;
  }
  return SHEAF_OK;
}

static sh_tok_kind punct(lexer *l) {
  int c = peek(l, 0), c1 = peek(l, 1);
  sh_tok_kind two = SH_TK_EOF;
  switch (c) {
  case '-': two = c1 == '>' ? SH_TK_ARROW : SH_TK_EOF; break;
  case '=': two = c1 == '>' ? SH_TK_FATARROW : c1 == '=' ? SH_TK_EQ : SH_TK_EOF; break;
  case '!': two = c1 == '=' ? SH_TK_NE : SH_TK_EOF; break;
  case '<': two = c1 == '=' ? SH_TK_LE : SH_TK_EOF; break;
  case '>': two = c1 == '=' ? SH_TK_GE : SH_TK_EOF; break;
  case '&': two = c1 == '&' ? SH_TK_ANDAND : SH_TK_EOF; break;
  case '|': two = c1 == '|' ? SH_TK_OROR : SH_TK_EOF; break;
  case '.': two = c1 == '.' ? SH_TK_DOTDOT : SH_TK_EOF; break;
  default: break;
  }
  if (two != SH_TK_EOF) {
    l->pos += 2;
    return two;
  }
  static const char one_ch[] = "()[]{},:;=<>+-*/%@!|";
  static const sh_tok_kind one_k[] = {
      SH_TK_LPAREN, SH_TK_RPAREN, SH_TK_LBRACKET, SH_TK_RBRACKET, SH_TK_LBRACE,
      SH_TK_RBRACE, SH_TK_COMMA,  SH_TK_COLON,    SH_TK_SEMI,     SH_TK_ASSIGN,
      SH_TK_LT,     SH_TK_GT,     SH_TK_PLUS,     SH_TK_MINUS,    SH_TK_STAR,
      SH_TK_SLASH,  SH_TK_PERCENT, SH_TK_AT,      SH_TK_BANG,     SH_TK_BAR};
  const char *p = c > 0 ? strchr(one_ch, c) : NULL;
  if (!p) return SH_TK_ERROR;
  l->pos++;
  return one_k[p - one_ch];
}

sheaf_status sh_lex(const char *src, size_t len, sh_symtab *syms, sh_lang_pool *arena,
                    sh_diags *d, sh_tokens *out) {
  lexer l = {.src = src, .len = len, .line = 1, .syms = syms, .arena = arena, .d = d};
  out->v = NULL;
  out->n = 0;
  for (;;) {
    skip_space(&l);
    size_t start = l.pos;
    if (l.pos >= len) break;
    int c = peek(&l, 0);
    if (is_ident_start(c)) {
      while (is_ident(peek(&l, 0))) l.pos++;
      size_t n = l.pos - start;
      sh_tok_kind kind = SH_TK_IDENT;
      if (n == 1 && c == '_') kind = SH_TK_UNDERSCORE;
      for (size_t k = 0; k < SH_ARRAY_LEN(keywords); k++)
        if (strlen(keywords[k].word) == n && memcmp(keywords[k].word, src + start, n) == 0)
          kind = keywords[k].kind;
      sh_token *t = push(&l, kind, start);
      if (!t) return SHEAF_ERR_NOMEM;
      if (kind == SH_TK_IDENT && !(t->v.sym = sh_symtab_intern(syms, src + start, n)))
        return SHEAF_ERR_NOMEM;
    } else if (is_digit(c)) {
      if (lex_number(&l, start) != SHEAF_OK) return SHEAF_ERR_NOMEM;
    } else {
      sh_tok_kind kind = punct(&l);
      if (kind == SH_TK_ERROR) {
        /* one error for a run of bytes that cannot start a token */
        do l.pos++;
        while (l.pos < len && (unsigned char)src[l.pos] >= 0x80);
        sh_token *t = push(&l, SH_TK_ERROR, start);
        if (!t) return SHEAF_ERR_NOMEM;
        if (c >= 0x21 && c < 0x7f)
          sh_diag_error(d, t->span, "unexpected character '%c'", c);
        else
          sh_diag_error(d, t->span, "unexpected byte 0x%02X", (unsigned)c);
      } else if (!push(&l, kind, start)) {
        return SHEAF_ERR_NOMEM;
      }
    }
  }
  if (!push(&l, SH_TK_EOF, l.pos)) return SHEAF_ERR_NOMEM;
  *out = l.toks;
  return SHEAF_OK;
}
