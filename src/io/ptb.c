/*
 * ptb.c — PTB s-expression reader and writer (see ptb.h for the format and
 * the escaping rules). Both sides work with explicit stacks, so no input
 * depth can exhaust the C stack.
 */
#include "ptb.h"

#include <string.h>

#include "base/file.h"

/* ------------------------------------------------------------------ lexer */

typedef enum { TOK_EOF, TOK_OPEN, TOK_CLOSE, TOK_ATOM } tok_kind;

typedef struct tok {
  tok_kind kind;
  const char *s; /* atom bytes */
  size_t n;
  long line, col;
} tok;

typedef struct frame {
  long line, col;     /* of its '(' */
  int32_t label;      /* -1 until read */
  int32_t word;       /* -1 when none */
  size_t child_base;  /* where its finished children start in kids */
} frame;

typedef struct parser {
  sheaf_ctx *ctx;
  sh_treebank *tb;
  const char *name;
  const char *p, *end, *line_start;
  long line;
  frame *frames;
  size_t n_frames, cap_frames;
  int32_t *kids; /* finished children of the open frames, innermost last */
  size_t n_kids, cap_kids;
  sh_buf scratch; /* unescaped token */
} parser;

static bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* token -> '(' | ')' | atom ;  atom -> (any byte but '(' ')' and whitespace)+ ;
 * whitespace -> ' ' | TAB | LF | CR | VT | FF   (LF counts lines) */
static void next_token(parser *ps, tok *t) {
  const char *p = ps->p, *end = ps->end;
  while (p < end && is_space(*p)) {
    if (*p == '\n') {
      ps->line++;
      ps->line_start = p + 1;
    }
    p++;
  }
  t->line = ps->line;
  t->col = (long)(p - ps->line_start) + 1;
  t->s = p;
  t->n = 0;
  if (p == end) {
    t->kind = TOK_EOF;
  } else if (*p == '(' || *p == ')') {
    t->kind = *p == '(' ? TOK_OPEN : TOK_CLOSE;
    p++;
  } else {
    t->kind = TOK_ATOM;
    while (p < end && !is_space(*p) && *p != '(' && *p != ')') p++;
    t->n = (size_t)(p - t->s);
  }
  ps->p = p;
}

/* At most 40 bytes of a token, for messages. */
#define SHOW(t) ((t)->n > 40 ? 40 : (int)(t)->n), (t)->s, ((t)->n > 40 ? "..." : "")

/* Interns an atom, turning every -LRB- / -RRB- into a parenthesis:
 * atom -> ('-LRB-' | '-RRB-' | byte)+   scanned left to right */
static sheaf_status intern_atom(parser *ps, sh_vocab *v, const tok *t, int32_t *id) {
  const char *s = t->s;
  size_t n = t->n;
  if (!memchr(s, '-', n)) return sh_vocab_intern(v, s, n, id);
  sh_buf *b = &ps->scratch;
  sh_buf_clear(b);
  for (size_t i = 0; i < n;) {
    if (s[i] == '-' && n - i >= 5 && s[i + 2] == 'R' && s[i + 3] == 'B' && s[i + 4] == '-' &&
        (s[i + 1] == 'L' || s[i + 1] == 'R')) {
      sh_buf_putc(b, s[i + 1] == 'L' ? '(' : ')');
      i += 5;
    } else {
      sh_buf_putc(b, s[i++]);
    }
  }
  sheaf_status st = sh_buf_status(b);
  if (st != SHEAF_OK) return st;
  return sh_vocab_intern(v, (const char *)b->data, b->len, id);
}

static sheaf_status push_frame(parser *ps, const tok *t) {
  if (ps->n_frames >= SH_TB_MAX_DEPTH)
    return sh_io_parse_error(ps->ctx, ps->name, t->line, t->col,
                             "trees nested deeper than %d levels", SH_TB_MAX_DEPTH);
  if (ps->n_frames == ps->cap_frames) {
    frame *f = sh_io_grow(ps->ctx, ps->frames, &ps->cap_frames, ps->n_frames + 1, sizeof *f);
    if (!f) return SHEAF_ERR_NOMEM;
    ps->frames = f;
  }
  ps->frames[ps->n_frames++] = (frame){t->line, t->col, -1, -1, ps->n_kids};
  return SHEAF_OK;
}

static sheaf_status push_kid(parser *ps, int32_t node) {
  if (ps->n_kids == ps->cap_kids) {
    int32_t *k = sh_io_grow(ps->ctx, ps->kids, &ps->cap_kids, ps->n_kids + 1, sizeof *k);
    if (!k) return SHEAF_ERR_NOMEM;
    ps->kids = k;
  }
  ps->kids[ps->n_kids++] = node;
  return SHEAF_OK;
}

/* Closes the innermost frame at its ')': adds the node, hands it to the
 * enclosing frame or ends the tree. */
static sheaf_status close_frame(parser *ps, const tok *t) {
  frame *f = &ps->frames[ps->n_frames - 1];
  size_t nk = ps->n_kids - f->child_base;
  if (f->word < 0 && nk == 0) {
    const sh_vocab *labels = &ps->tb->labels;
    size_t n = sh_vocab_len(labels, f->label);
    return sh_io_parse_error(ps->ctx, ps->name, t->line, t->col,
                             "node '%.*s%s' has neither a word nor subtrees: a leaf is "
                             "'(LABEL word)'",
                             n > 40 ? 40 : (int)n, sh_vocab_str(labels, f->label),
                             n > 40 ? "..." : "");
  }
  int32_t node;
  sheaf_status st = sh_tb_add_node(ps->tb, f->word, f->label,
                                   nk ? ps->kids + f->child_base : NULL, (int32_t)nk, &node);
  if (st != SHEAF_OK) return st;
  ps->n_kids = f->child_base;
  ps->n_frames--;
  if (ps->n_frames == 0) return sh_tb_end_tree(ps->tb);
  return push_kid(ps, node);
}

/* The grammar (see ptb.h), driven by the frame stack:
 *   file -> tree*
 *   tree -> '(' label word? tree* ')'      (a word or at least one tree) */
static sheaf_status parse(parser *ps) {
  sh_treebank *tb = ps->tb;
  sheaf_ctx *ctx = ps->ctx;
  const char *name = ps->name;
  tok t;
  sheaf_status st = SHEAF_OK;
  for (;;) {
    next_token(ps, &t);
    if (ps->n_frames == 0) { /* between trees */
      switch (t.kind) {
      case TOK_EOF: return SHEAF_OK;
      case TOK_OPEN:
        st = sh_tb_begin_tree(tb);
        if (st == SHEAF_OK) st = push_frame(ps, &t);
        break;
      case TOK_CLOSE:
        return sh_io_parse_error(ctx, name, t.line, t.col, "unexpected ')': no tree is open");
      case TOK_ATOM:
        return sh_io_parse_error(ctx, name, t.line, t.col,
                                 "expected '(' to start a tree, found word '%.*s%s'", SHOW(&t));
      }
      if (st != SHEAF_OK) return st;
      continue;
    }
    frame *f = &ps->frames[ps->n_frames - 1];
    if (t.kind == TOK_EOF) {
      if (ps->n_frames == 1)
        return sh_io_parse_error(ctx, name, t.line, t.col,
                                 "unexpected end of input: the '(' at %ld:%ld is never closed",
                                 f->line, f->col);
      return sh_io_parse_error(ctx, name, t.line, t.col,
                               "unexpected end of input: the '(' at %ld:%ld is never closed "
                               "(%zu enclosing '(' also open; the tree starts at %ld:%ld)",
                               f->line, f->col, ps->n_frames - 1, ps->frames[0].line,
                               ps->frames[0].col);
    }
    if (f->label < 0) { /* just after '(' */
      if (t.kind == TOK_ATOM) {
        st = intern_atom(ps, &tb->labels, &t, &f->label);
        if (st != SHEAF_OK) return st;
        continue;
      }
      if (t.kind == TOK_CLOSE)
        return sh_io_parse_error(ctx, name, f->line, f->col, "empty tree '()'");
      return sh_io_parse_error(ctx, name, t.line, t.col,
                               "missing label: expected a label after the '(' at %ld:%ld, "
                               "found '('",
                               f->line, f->col);
    }
    bool has_kids = ps->n_kids > f->child_base;
    switch (t.kind) {
    case TOK_ATOM:
      if (f->word < 0 && !has_kids) {
        st = intern_atom(ps, &tb->words, &t, &f->word);
      } else if (has_kids) {
        return sh_io_parse_error(ctx, name, t.line, t.col,
                                 "a word where a subtree was expected: '%.*s%s' (write it as "
                                 "a leaf '(LABEL word)')",
                                 SHOW(&t));
      } else {
        return sh_io_parse_error(ctx, name, t.line, t.col,
                                 "a second word '%.*s%s': a leaf '(LABEL word)' has one word",
                                 SHOW(&t));
      }
      break;
    case TOK_OPEN: st = push_frame(ps, &t); break;
    case TOK_CLOSE: st = close_frame(ps, &t); break;
    case TOK_EOF: break; /* handled above */
    }
    if (st != SHEAF_OK) return st;
  }
}

sheaf_status sh_ptb_read(sh_treebank *tb, const char *data, size_t size, const char *name) {
  if (size == 0) data = ""; /* NULL with 0 bytes is an empty input */
  sheaf_ctx *ctx = tb->ctx;
  sheaf_status st = sh_io_check_text(ctx, data, size, name);
  if (st != SHEAF_OK) return st;
  size_t bom = sh_io_bom(data, size);
  parser ps = {.ctx = ctx, .tb = tb, .name = name, .p = data + bom, .end = data + size,
               .line_start = data, .line = 1};
  sh_buf_init(&ps.scratch, ctx);
  sh_tb_mark mark = sh_tb_get_mark(tb);
  st = parse(&ps);
  if (st != SHEAF_OK) sh_tb_rollback(tb, mark);
  sh_free(ctx, ps.frames, ps.cap_frames * sizeof *ps.frames);
  sh_free(ctx, ps.kids, ps.cap_kids * sizeof *ps.kids);
  sh_buf_free(&ps.scratch);
  return st;
}

sheaf_status sh_ptb_read_file(sh_treebank *tb, const char *path) {
  sh_mapping m;
  sheaf_status st = sh_file_map(tb->ctx, path, &m);
  if (st != SHEAF_OK) return st;
  st = sh_ptb_read(tb, (const char *)m.data, m.size, path);
  sh_file_unmap(&m);
  return st;
}

/* ----------------------------------------------------------------- writer */

/* A word or label with '(' ')' and whitespace escaped (see ptb.h). */
static sheaf_status put_token(const sh_treebank *tb, const sh_vocab *v, int32_t id,
                              int32_t node, sh_buf *out) {
  const char *s = sh_vocab_str(v, id);
  size_t n = sh_vocab_len(v, id);
  if (n == 0)
    return sh_fail(tb->ctx, SHEAF_ERR_INVALID_ARG,
                   "PTB writer: node %d has an empty %s, which an s-expression cannot hold",
                   node, v == &tb->words ? "word" : "label");
  size_t run = 0;
  for (size_t i = 0; i < n; i++) {
    const char *rep;
    switch (s[i]) {
    case '(': rep = "-LRB-"; break;
    case ')': rep = "-RRB-"; break;
    case ' ': case '\t': case '\n': case '\r': case '\v': case '\f': rep = "\xC2\xA0"; break;
    default: continue;
    }
    sh_buf_put(out, s + run, i - run);
    sh_buf_puts(out, rep);
    run = i + 1;
  }
  sh_buf_put(out, s + run, n - run);
  return SHEAF_OK;
}

typedef struct wframe {
  int32_t node, next; /* next child to write */
} wframe;

static sheaf_status write_tree(const sh_treebank *tb, int32_t t, sh_buf *out, wframe **stack,
                               size_t *cap) {
  sheaf_ctx *ctx = tb->ctx;
  size_t sp = 0;
  int32_t node = tb->tree_root[t];
  for (;;) {
    /* open `node` */
    sh_buf_putc(out, '(');
    sheaf_status st = put_token(tb, &tb->labels, tb->label[node], node, out);
    if (st == SHEAF_OK && tb->word[node] >= 0) {
      sh_buf_putc(out, ' ');
      st = put_token(tb, &tb->words, tb->word[node], node, out);
    }
    if (st != SHEAF_OK) return st;
    if (sp == *cap) {
      wframe *s = sh_io_grow(ctx, *stack, cap, sp + 1, sizeof *s);
      if (!s) return SHEAF_ERR_NOMEM;
      *stack = s;
    }
    (*stack)[sp++] = (wframe){node, 0};
    /* close finished frames until one has a child left to open */
    for (;;) {
      wframe *f = &(*stack)[sp - 1];
      if (f->next < tb->n_children[f->node]) {
        node = sh_tb_child(tb, f->node, f->next++);
        sh_buf_putc(out, ' ');
        break;
      }
      sh_buf_putc(out, ')');
      if (--sp == 0) return sh_buf_status(out);
    }
  }
}

sheaf_status sh_ptb_write_tree(const sh_treebank *tb, int32_t t, sh_buf *out) {
  if (t < 0 || t >= tb->n_trees)
    return sh_fail(tb->ctx, SHEAF_ERR_INVALID_ARG, "PTB writer: no tree %d (%d trees)", t,
                   tb->n_trees);
  wframe *stack = NULL;
  size_t cap = 0;
  sheaf_status st = write_tree(tb, t, out, &stack, &cap);
  sh_free(tb->ctx, stack, cap * sizeof *stack);
  return st;
}

sheaf_status sh_ptb_write(const sh_treebank *tb, sh_buf *out) {
  wframe *stack = NULL;
  size_t cap = 0;
  sheaf_status st = SHEAF_OK;
  for (int32_t t = 0; t < tb->n_trees && st == SHEAF_OK; t++) {
    st = write_tree(tb, t, out, &stack, &cap);
    sh_buf_putc(out, '\n');
  }
  sh_free(tb->ctx, stack, cap * sizeof *stack);
  return st != SHEAF_OK ? st : sh_buf_status(out);
}
