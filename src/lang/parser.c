/*
 * parser.c — the module's lifetime and the declaration half of the
 * recursive-descent parser: programs, declarations, blocks and `let`
 * (types, sizes and patterns: parse_type.c; expressions: parse_expr.c).
 * Error recovery: an error sets `panic`, which silences further reports
 * until a sync point (`;`, `}` of the current block, `,` of a match arm,
 * or a declaration keyword) is reached.
 */
#include <stdio.h>
#include <string.h>

#include "lang/parser_int.h"

/* -------------------------------------------------------------- helpers */

void p_error(parser *p, sh_span at, const char *fmt, ...) {
  if (p->panic) return;
  p->panic = true;
  if (p_kind(p) == SH_TK_ERROR) return;
  char msg[SH_DIAG_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  sh_diag_error(p->d, at, "%s", msg);
}

static const char *found(const parser *p) { return sh_tok_desc(p_kind(p)); }

bool p_expect(parser *p, sh_tok_kind k) {
  if (p_accept(p, k)) return true;
  p_error(p, p_cur(p)->span, "expected %s but found %s", sh_tok_desc(k), found(p));
  return false;
}

bool p_expect_close(parser *p, sh_tok_kind k, sh_span open) {
  if (p_accept(p, k)) return true;
  if (!p->panic) {
    p_error(p, p_cur(p)->span, "expected %s but found %s", sh_tok_desc(k), found(p));
    sh_tok_kind opener = k == SH_TK_RPAREN ? SH_TK_LPAREN : k == SH_TK_RBRACKET ? SH_TK_LBRACKET
                                                                              : SH_TK_LBRACE;
    sh_diag_note(p->d, open, "to match this %s", sh_tok_desc(opener));
  }
  return false;
}

bool p_enter(parser *p, sh_span at) {
  if (p->depth >= SH_LANG_MAX_DEPTH) {
    p_error(p, at, "nesting is too deep (more than %d levels)", SH_LANG_MAX_DEPTH);
    return false;
  }
  p->depth++;
  return true;
}

sh_span p_span_from(const parser *p, sh_span start) {
  if (p->pos == 0) return start;
  return sh_span_join(start, p->t[p->pos - 1].span);
}

sh_ast *p_new_expr(parser *p, sh_ast_kind kind, sh_span span) {
  sh_ast *e = p->nomem ? NULL : sh_lang_alloc(p->pool, sizeof *e);
  if (!e) {
    p->nomem = true;
    e = &p->scratch_expr;
    memset(e, 0, sizeof *e);
  }
  e->kind = kind;
  e->span = span;
  e->depth = 1;
  return e;
}

static int depth_of(const sh_ast *e) { return e ? e->depth : 0; }

sh_ast *p_finish(parser *p, sh_ast *e) {
  int d = depth_of(e->a);
  if (depth_of(e->b) > d) d = depth_of(e->b);
  if (depth_of(e->c) > d) d = depth_of(e->c);
  for (int i = 0; e->items && i < e->n; i++)
    if (depth_of(e->items[i]) > d) d = depth_of(e->items[i]);
  if (e->kind == SH_EX_BLOCK || e->kind == SH_EX_WHILE) /* lets; a while's state */
    for (int i = 0; i < e->n; i++)
      if (depth_of(e->lets[i].value) > d) d = depth_of(e->lets[i].value);
  if (e->kind == SH_EX_MATCH)
    for (int i = 0; i < e->n; i++)
      if (depth_of(e->arms[i].body) > d) d = depth_of(e->arms[i].body);
  e->depth = d + 1;
  if (e->depth > SH_LANG_MAX_TREE_DEPTH) {
    p_error(p, e->span, "expression is nested too deeply (more than %d levels)",
            SH_LANG_MAX_TREE_DEPTH);
    e->kind = SH_EX_ERROR;
    e->a = e->b = e->c = NULL;
    e->n = 0;
    e->depth = 1;
  }
  return e;
}

bool p_push(parser *p, void ***v, int *n, int *cap, void *item) {
  if (p->nomem) return false;
  if (*n == *cap) {
    int nc = *cap ? 2 * *cap : 4;
    void **nv = sh_lang_alloc(p->pool, (size_t)nc * sizeof *nv);
    if (!nv || nc > (1 << 28)) {
      p->nomem = true;
      return false;
    }
    if (*n) memcpy(nv, *v, (size_t)*n * sizeof *nv);
    *v = nv;
    *cap = nc;
  }
  (*v)[(*n)++] = item;
  return true;
}

void *p_alloc(parser *p, size_t size) {
  void *r = p->nomem ? NULL : sh_lang_alloc(p->pool, size);
  if (!r) p->nomem = true;
  return r;
}

/* At the contextual keyword `word` followed by a name (`size H`, `kernel k`). */
static bool is_context_kw(const parser *p, const char *word) {
  const sh_token *t = p_cur(p);
  if (p->nomem || t->kind != SH_TK_IDENT || p->t[p->pos + 1].kind != SH_TK_IDENT) return false;
  return strcmp(sh_sym_name(&p->m->syms, t->v.sym), word) == 0;
}

static bool is_size_kw(const parser *p) { return is_context_kw(p, "size"); }
static bool is_kernel_kw(const parser *p) { return is_context_kw(p, "kernel"); }

bool p_at_decl(const parser *p) {
  sh_tok_kind k = p_kind(p);
  return k == SH_TK_TYPE || k == SH_TK_PARAM || k == SH_TK_FN || is_size_kw(p) || is_kernel_kw(p);
}

/* --------------------------------------------------------------- blocks */

/* Skips to a statement boundary after an error: past `;`, or before `}` or
 * a declaration keyword (nesting of brackets is followed). */
static void sync_stmt(parser *p) {
  int depth = 0;
  for (;;) {
    sh_tok_kind k = p_kind(p);
    if (k == SH_TK_EOF || p_at_decl(p)) break;
    if (depth == 0 && k == SH_TK_SEMI) {
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

/* let_stmt = "let" pattern [ ":" type ] "=" expr ";" */
void p_let(parser *p, sh_let *l, const char *what) {
  const sh_token *kw = p_next(p);
  l->pat = p_pattern(p);
  if (p_accept(p, SH_TK_COLON)) l->tx = p_type(p);
  if (!p->panic && p_expect(p, SH_TK_ASSIGN)) l->value = p_expr(p);
  if (!l->value) l->value = p_new_expr(p, SH_EX_ERROR, p_cur(p)->span);
  if (!p->panic && !p_accept(p, SH_TK_SEMI)) {
    if (p_at(p, SH_TK_ERROR) || p_at(p, SH_TK_RBRACE))
      p_error(p, p_cur(p)->span, "expected ';' after %s but found %s", what, found(p));
    else /* report, but go on as if the ';' were there */
      sh_diag_error(p->d, p_cur(p)->span, "expected ';' after %s but found %s", what, found(p));
  }
  l->span = p_span_from(p, kw->span);
}

/* block = "{" { let_stmt } expr "}" */
sh_ast *p_block(parser *p) {
  const sh_token *open = p_cur(p);
  sh_ast *e = p_new_expr(p, SH_EX_BLOCK, open->span);
  if (!p_expect(p, SH_TK_LBRACE)) return e;
  if (!p_enter(p, open->span)) return e;
  int cap = 0;
  for (;;) {
    sh_tok_kind k = p_kind(p);
    if (k == SH_TK_RBRACE || k == SH_TK_EOF || p_at_decl(p) || sh_diags_full(p->d)) break;
    if (k == SH_TK_LET) {
      if (e->n == cap) {
        int nc = cap ? 2 * cap : 4;
        sh_let *nv = p_alloc(p, (size_t)nc * sizeof *nv);
        if (!nv) break;
        if (e->n) memcpy(nv, e->lets, (size_t)e->n * sizeof *nv);
        e->lets = nv;
        cap = nc;
      }
      sh_let *l = &e->lets[e->n++];
      p_let(p, l, "the let statement");
      if (p->panic) sync_stmt(p);
      continue;
    }
    if (e->a) { /* a second value: the first one was followed by ';' or junk */
      p_error(p, p_cur(p)->span, "expected '}' after the block's value but found %s", found(p));
      sync_stmt(p);
      continue;
    }
    e->a = p_expr(p);
    if (p->panic) {
      sync_stmt(p);
      continue;
    }
    if (p_at(p, SH_TK_SEMI)) {
      p_error(p, p_cur(p)->span,
              "unexpected ';' after the block's value (a block is 'let' statements, then the value, with no ';')");
      sync_stmt(p);
    }
  }
  if (!e->a && !p->panic && p_at(p, SH_TK_RBRACE))
    p_error(p, p_cur(p)->span, "a block must end with a value (an expression before '}')");
  p_expect_close(p, SH_TK_RBRACE, open->span);
  p_leave(p);
  if (!e->a) e->a = p_new_expr(p, SH_EX_ERROR, p_cur(p)->span);
  e->span = p_span_from(p, open->span);
  return p_finish(p, e);
}

/* --------------------------------------------------------- declarations */

static bool push_decl(parser *p, sh_decl_kind kind, void *u, int *cap) {
  sh_module *m = p->m;
  if (m->n_decls == *cap) {
    int nc = *cap ? 2 * *cap : 16;
    sh_decl *nv = p_alloc(p, (size_t)nc * sizeof *nv);
    if (!nv) return false;
    if (m->n_decls) memcpy(nv, m->decls, (size_t)m->n_decls * sizeof *nv);
    m->decls = nv;
    *cap = nc;
  }
  sh_decl *d = &m->decls[m->n_decls++];
  d->kind = kind;
  d->u.adt = u;
  return true;
}

static sh_sym p_name(parser *p, const char *what, sh_span *span) {
  const sh_token *t = p_cur(p);
  *span = t->span;
  if (t->kind == SH_TK_IDENT) {
    p_next(p);
    return t->v.sym;
  }
  p_error(p, t->span, "expected %s but found %s", what, sh_tok_desc(t->kind));
  return 0;
}

/* variant = IDENT [ "(" [ field { "," field } [","] ] ")" ]
 * field   = [ IDENT ":" ] type */
static void p_variant(parser *p, sh_ctor *c) {
  c->name = p_name(p, "a constructor name", &c->span);
  if (!p_at(p, SH_TK_LPAREN) || p->panic) return;
  const sh_token *open = p_next(p);
  int cap_n = 0, cap_t = 0;
  void **names = NULL;
  while (!p_at(p, SH_TK_RPAREN) && !p->panic) {
    sh_sym fname = 0;
    if (p_at(p, SH_TK_IDENT) && p->t[p->pos + 1].kind == SH_TK_COLON) {
      fname = p_next(p)->v.sym;
      p_next(p);
    }
    sh_texpr *tx = p_type(p);
    int n = c->n_fields;
    if (!p_push(p, (void ***)&c->field_tx, &c->n_fields, &cap_t, tx) ||
        !p_push(p, &names, &n, &cap_n, (void *)(uintptr_t)fname))
      break;
    if (!p_accept(p, SH_TK_COMMA)) break;
  }
  p_expect_close(p, SH_TK_RPAREN, open->span);
  c->field_names = p_alloc(p, (size_t)c->n_fields * sizeof *c->field_names + 1);
  if (!c->field_names) {
    c->n_fields = 0;
    return;
  }
  for (int i = 0; i < c->n_fields; i++) c->field_names[i] = (sh_sym)(uintptr_t)names[i];
}

/* type_decl = "type" IDENT "=" [ "|" ] variant { "|" variant } */
static sh_adt *p_type_decl(parser *p) {
  p_next(p);
  sh_adt *a = p_alloc(p, sizeof *a);
  if (!a) return NULL;
  a->name = p_name(p, "a type name after 'type'", &a->span);
  if (!p->panic) p_expect(p, SH_TK_ASSIGN);
  p_accept(p, SH_TK_BAR);
  int cap = 0;
  while (!p->panic) {
    if (a->n_ctors == cap) {
      int nc = cap ? 2 * cap : 4;
      sh_ctor *nv = p_alloc(p, (size_t)nc * sizeof *nv);
      if (!nv) break;
      if (a->n_ctors) memcpy(nv, a->ctors, (size_t)a->n_ctors * sizeof *nv);
      a->ctors = nv;
      cap = nc;
    }
    sh_ctor *c = &a->ctors[a->n_ctors];
    memset(c, 0, sizeof *c);
    c->index = a->n_ctors++;
    c->adt = a;
    p_variant(p, c);
    if (!p_accept(p, SH_TK_BAR)) break;
  }
  return a;
}

/* init = "glorot" | "normal" | "zeros" | "ones" | "identity" | "identity_rows" */
static sh_param_init p_init(parser *p) {
  if (p_at(p, SH_TK_IDENT)) {
    const char *s = sh_sym_name(&p->m->syms, p_cur(p)->v.sym);
    for (int i = SH_PINIT_DEFAULT + 1; i < SH_PINIT_COUNT; i++)
      if (!strcmp(s, sh_param_init_name((sh_param_init)i))) {
        p_next(p);
        return (sh_param_init)i;
      }
  }
  p_error(p, p_cur(p)->span,
          "expected an initializer (glorot, normal, zeros, ones, identity, identity_rows) but found %s",
          found(p));
  return SH_PINIT_DEFAULT;
}

static bool is_identity(sh_param_init i) { return i == SH_PINIT_IDENTITY || i == SH_PINIT_IDENTITY_ROWS; }

/* param_decl = "param" IDENT ":" type [ "=" init [ "+" init ] ] */
static sh_param_decl *p_param_decl(parser *p) {
  p_next(p);
  sh_param_decl *q = p_alloc(p, sizeof *q);
  if (!q) return NULL;
  q->name = p_name(p, "a parameter name after 'param'", &q->span);
  if (!p->panic && p_expect(p, SH_TK_COLON)) q->tx = p_type(p);
  if (!p->panic && p_accept(p, SH_TK_ASSIGN)) {
    sh_span start = p_cur(p)->span;
    q->init = p_init(p);
    if (!p->panic && p_accept(p, SH_TK_PLUS)) {
      sh_span at = p_cur(p)->span;
      sh_param_init b = p_init(p);
      if (is_identity(q->init) && !is_identity(b)) q->plus = q->init, q->init = b;
      else q->plus = b;
      if (!p->panic && (is_identity(q->init) || !is_identity(q->plus)))
        p_error(p, at, "an initializer sum is a drawn one and an identity: 'normal + identity'");
    }
    q->init_span = p_span_from(p, start);
  }
  return q;
}

/* size_decl = "size" IDENT [ "=" INT ] */
static sh_sizedecl *p_size_decl(parser *p) {
  p_next(p);
  sh_sizedecl *s = p_alloc(p, sizeof *s);
  if (!s) return NULL;
  s->name = p_name(p, "a size name after 'size'", &s->span);
  if (!p->panic && p_accept(p, SH_TK_ASSIGN)) {
    if (p_at(p, SH_TK_INT)) {
      s->has_value = true;
      s->value = p_next(p)->v.ival;
    } else {
      p_error(p, p_cur(p)->span, "expected an integer after 'size %s =' but found %s",
              sh_sym_name(&p->m->syms, s->name), found(p));
    }
  }
  return s;
}

/* fn_decl = "fn" IDENT "(" [ fparam { "," fparam } [","] ] ")" "->" type ( block | "=" expr )
 * fparam  = IDENT ":" type */
static sh_fn *p_fn_decl(parser *p) {
  p_next(p);
  sh_fn *f = p_alloc(p, sizeof *f);
  if (!f) return NULL;
  f->name = p_name(p, "a function name after 'fn'", &f->span);
  const sh_token *open = p_cur(p);
  if (p->panic || !p_expect(p, SH_TK_LPAREN)) return f;
  int cap_p = 0, cap_t = 0;
  while (!p_at(p, SH_TK_RPAREN) && !p->panic) {
    sh_local *l = p_alloc(p, sizeof *l);
    if (!l) break;
    l->name = p_name(p, "a parameter name", &l->span);
    sh_texpr *tx = NULL;
    if (!p->panic && p_expect(p, SH_TK_COLON)) tx = p_type(p);
    int n = f->n_params;
    if (!p_push(p, (void ***)&f->params, &f->n_params, &cap_p, l) ||
        !p_push(p, (void ***)&f->param_tx, &n, &cap_t, tx))
      break;
    if (!p_accept(p, SH_TK_COMMA)) break;
  }
  if (!p_expect_close(p, SH_TK_RPAREN, open->span)) return f;
  if (!p_at(p, SH_TK_ARROW)) {
    p_error(p, p_cur(p)->span, "expected '->' and the result type of '%s' but found %s",
            sh_sym_name(&p->m->syms, f->name), found(p));
    return f;
  }
  p_next(p);
  f->ret_tx = p_type(p);
  if (p->panic) return f;
  if (p_accept(p, SH_TK_ASSIGN)) f->body = p_expr(p);
  else if (p_at(p, SH_TK_LBRACE)) f->body = p_block(p);
  else p_error(p, p_cur(p)->span, "expected '{' or '=' to start the body of '%s' but found %s",
               sh_sym_name(&p->m->syms, f->name), found(p));
  return f;
}

/* program = { decl } EOF
 * decl    = type_decl | param_decl | size_decl | fn_decl | kernel_decl */
static void p_program(parser *p) {
  sh_module *m = p->m;
  int cap = 0, cap_a = 0, cap_p = 0, cap_s = 0, cap_f = 0, cap_k = 0;
  while (!p_at(p, SH_TK_EOF) && !sh_diags_full(p->d)) {
    sh_tok_kind k = is_size_kw(p) ? SH_TK_SIZE : is_kernel_kw(p) ? SH_TK_KERNEL : p_kind(p);
    void *u = NULL;
    bool ok = true;
    if (m->kernels_only && (k == SH_TK_TYPE || k == SH_TK_PARAM || k == SH_TK_FN)) {
      p_error(p, p_cur(p)->span, "a kernel source holds only kernel and size declarations, not %s",
              found(p));
      k = SH_TK_COUNT_; /* refused: skipped below */
    }
    switch (k) {
    case SH_TK_TYPE:
      if ((u = p_type_decl(p))) ok = p_push(p, (void ***)&m->adts, &m->n_adts, &cap_a, u);
      break;
    case SH_TK_PARAM:
      if ((u = p_param_decl(p))) {
        ((sh_param_decl *)u)->index = m->n_params;
        ok = p_push(p, (void ***)&m->params, &m->n_params, &cap_p, u);
      }
      break;
    case SH_TK_SIZE:
      if ((u = p_size_decl(p))) ok = p_push(p, (void ***)&m->size_decls, &m->n_sizes, &cap_s, u);
      break;
    case SH_TK_FN:
      if ((u = p_fn_decl(p))) {
        ((sh_fn *)u)->index = m->n_fns;
        ok = p_push(p, (void ***)&m->fns, &m->n_fns, &cap_f, u);
      }
      break;
    case SH_TK_KERNEL:
      if ((u = p_kernel_decl(p))) {
        ((sh_kernel_decl *)u)->index = m->n_kernels;
        ok = p_push(p, (void ***)&m->kernels, &m->n_kernels, &cap_k, u);
      }
      break;
    case SH_TK_COUNT_: break; /* refused above */
    default:
      p_error(p, p_cur(p)->span, "expected a declaration (type, param, size, fn or kernel) but found %s%s",
              found(p), k == SH_TK_LET ? " ('let' goes inside a function body)" : "");
      break;
    }
    if (u && ok) {
      sh_decl_kind dk = k == SH_TK_TYPE ? SH_DECL_TYPE : k == SH_TK_PARAM ? SH_DECL_PARAM
                        : k == SH_TK_SIZE ? SH_DECL_SIZE : k == SH_TK_KERNEL ? SH_DECL_KERNEL
                        : SH_DECL_FN;
      push_decl(p, dk, u, &cap);
    }
    if (!u && k != SH_TK_TYPE && k != SH_TK_PARAM && k != SH_TK_SIZE && k != SH_TK_FN &&
        k != SH_TK_KERNEL)
      p_next(p);
    if (p->nomem) return;
    if (!p->panic && !p_at_decl(p) && !p_at(p, SH_TK_EOF)) {
      if (p_at(p, SH_TK_SEMI))
        p_error(p, p_cur(p)->span, "unexpected ';' after a declaration");
      else
        p_error(p, p_cur(p)->span, "expected a declaration (type, param, size, fn or kernel) but found %s",
                found(p));
    }
    if (p->panic) {
      while (!p_at(p, SH_TK_EOF) && !p_at_decl(p)) p_next(p);
      p->panic = false;
    }
  }
}

/* --------------------------------------------------------------- module */

void sh_module_init(sh_module *m, sheaf_ctx *ctx, const char *file, const char *src, size_t len) {
  memset(m, 0, sizeof *m);
  m->ctx = ctx;
  sh_lang_pool_init(&m->pool, ctx);
  sh_symtab_init(&m->syms, ctx, &m->pool);
  sh_sizevars_init(&m->sizes, ctx, &m->syms);
  sh_diags_init(&m->diags, file, src, len);
}

void sh_module_free(sh_module *m) {
  sh_sizevars_free(&m->sizes);
  sh_symtab_free(&m->syms);
  sh_lang_pool_destroy(&m->pool);
}

sheaf_status sh_parse(sh_module *m) {
  sh_diags *d = &m->diags;
  if (d->len > UINT32_MAX / 2)
    return sh_fail(m->ctx, SHEAF_ERR_INVALID_ARG, "%s: source too large (%zu bytes)", d->file, d->len);
  if (sh_lex(d->src, d->len, &m->syms, &m->pool, d, &m->toks) != SHEAF_OK)
    return sh_fail(m->ctx, SHEAF_ERR_NOMEM, "out of memory while parsing %s", d->file);
  parser p;
  memset(&p, 0, sizeof p);
  p.m = m;
  p.pool = &m->pool;
  p.d = d;
  p.t = m->toks.v;
  p.n = m->toks.n;
  if (!sh_diags_full(d)) p_program(&p);
  if (p.nomem) return sh_fail(m->ctx, SHEAF_ERR_NOMEM, "out of memory while parsing %s", d->file);
  if (sh_diags_failed(d)) {
    const sh_diag *e = &d->v[0];
    return sh_fail(m->ctx, SHEAF_ERR_PARSE, "%s:%u:%u: error: %s", d->file, e->span.line,
                   e->span.col, e->msg);
  }
  return SHEAF_OK;
}
