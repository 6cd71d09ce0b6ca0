/*
 * ast.c — S-expression dumps of the syntax tree (tests and debugging):
 *   (fn cell ((z (f32 (* 5 H)))) (f32 H) (block (let (tuple h c) ...) ...))
 * Operators print as their source text; sizes in types as written.
 */
#include <string.h>

#include "lang/ast.h"

sh_ast *sh_ast_new(sh_lang_pool *p, sh_ast_kind kind, sh_span span) {
  sh_ast *e = sh_lang_alloc(p, sizeof *e);
  if (e) {
    e->kind = kind;
    e->span = span;
    e->depth = 1;
  }
  return e;
}

/* "(OP " for an operator token ("'+'" in sh_tok_desc). */
static void put_op(sh_buf *b, int op) {
  const char *d = sh_tok_desc((sh_tok_kind)op);
  size_t n = strlen(d);
  if (n >= 3 && d[0] == '\'') sh_buf_printf(b, "(%.*s ", (int)(n - 2), d + 1);
  else sh_buf_printf(b, "(%s ", d);
}

static void dump_tx(sh_buf *b, const sh_module *m, const sh_texpr *t);

static void dump_pat(sh_buf *b, const sh_module *m, const sh_pat *q) {
  if (!q) {
    sh_buf_puts(b, "<null>");
    return;
  }
  switch (q->kind) {
  case SH_PAT_ERROR: sh_buf_puts(b, "<error>"); break;
  case SH_PAT_WILD: sh_buf_puts(b, "_"); break;
  case SH_PAT_VAR: sh_buf_puts(b, sh_sym_name(&m->syms, q->name)); break;
  case SH_PAT_INT: sh_buf_printf(b, "%lld", (long long)q->ival); break;
  case SH_PAT_BOOL: sh_buf_puts(b, q->ival ? "true" : "false"); break;
  case SH_PAT_TUPLE:
  case SH_PAT_CTOR:
    sh_buf_printf(b, "(%s", q->kind == SH_PAT_TUPLE ? "tuple" : sh_sym_name(&m->syms, q->name));
    for (int i = 0; i < q->n; i++) {
      sh_buf_putc(b, ' ');
      dump_pat(b, m, q->items[i]);
    }
    sh_buf_putc(b, ')');
    break;
  }
}

static void dump_list(sh_buf *b, const sh_module *m, const char *head, sh_ast *const *v, int n) {
  sh_buf_printf(b, "(%s", head);
  for (int i = 0; i < n; i++) {
    sh_buf_putc(b, ' ');
    sh_ast_dump_expr(b, m, v[i]);
  }
  sh_buf_putc(b, ')');
}

const char *sh_param_init_name(sh_param_init i) {
  static const char *const names[SH_PINIT_COUNT] = {"default", "glorot",   "normal",       "zeros",
                                                   "ones",    "identity", "identity_rows"};
  return (int)i >= 0 && (int)i < SH_PINIT_COUNT ? names[i] : "?";
}

void sh_ast_dump_expr(sh_buf *b, const sh_module *m, const sh_ast *e) {
  if (!e) {
    sh_buf_puts(b, "<null>");
    return;
  }
  switch (e->kind) {
  case SH_EX_ERROR: sh_buf_puts(b, "<error>"); break;
  case SH_EX_INT: sh_buf_printf(b, "%lld", (long long)e->ival); break;
  case SH_EX_FLOAT: sh_buf_printf(b, "%g", e->fval); break;
  case SH_EX_BOOL: sh_buf_puts(b, e->ival ? "true" : "false"); break;
  case SH_EX_NAME: sh_buf_puts(b, sh_sym_name(&m->syms, e->name)); break;
  case SH_EX_TUPLE: dump_list(b, m, "tuple", e->items, e->n); break;
  case SH_EX_LIST: dump_list(b, m, "list", e->items, e->n); break;
  case SH_EX_CALL: dump_list(b, m, sh_sym_name(&m->syms, e->name), e->items, e->n); break;
  case SH_EX_UNARY:
    put_op(b, e->op);
    sh_ast_dump_expr(b, m, e->a);
    sh_buf_putc(b, ')');
    break;
  case SH_EX_BINARY:
    put_op(b, e->op);
    sh_ast_dump_expr(b, m, e->a);
    sh_buf_putc(b, ' ');
    sh_ast_dump_expr(b, m, e->b);
    sh_buf_putc(b, ')');
    break;
  case SH_EX_INDEX:
  case SH_EX_SLICE:
    sh_buf_puts(b, e->kind == SH_EX_INDEX ? "(index " : "(slice ");
    sh_ast_dump_expr(b, m, e->a);
    sh_buf_putc(b, ' ');
    if (e->b) sh_ast_dump_expr(b, m, e->b);
    else sh_buf_puts(b, "_");
    if (e->kind == SH_EX_SLICE) {
      sh_buf_putc(b, ' ');
      if (e->c) sh_ast_dump_expr(b, m, e->c);
      else sh_buf_puts(b, "_");
    }
    sh_buf_putc(b, ')');
    break;
  case SH_EX_BLOCK:
    sh_buf_puts(b, "(block");
    for (int i = 0; i < e->n; i++) {
      sh_buf_puts(b, " (let ");
      dump_pat(b, m, e->lets[i].pat);
      if (e->lets[i].tx) {
        sh_buf_puts(b, " : ");
        dump_tx(b, m, e->lets[i].tx);
      }
      sh_buf_putc(b, ' ');
      sh_ast_dump_expr(b, m, e->lets[i].value);
      sh_buf_putc(b, ')');
    }
    sh_buf_putc(b, ' ');
    sh_ast_dump_expr(b, m, e->a);
    sh_buf_putc(b, ')');
    break;
  case SH_EX_IF:
    sh_buf_puts(b, "(if ");
    sh_ast_dump_expr(b, m, e->a);
    sh_buf_putc(b, ' ');
    sh_ast_dump_expr(b, m, e->b);
    sh_buf_putc(b, ' ');
    sh_ast_dump_expr(b, m, e->c);
    sh_buf_putc(b, ')');
    break;
  case SH_EX_MATCH:
    sh_buf_puts(b, "(match ");
    sh_ast_dump_expr(b, m, e->a);
    for (int i = 0; i < e->n; i++) {
      sh_buf_puts(b, " (");
      dump_pat(b, m, e->arms[i].pat);
      sh_buf_puts(b, " => ");
      sh_ast_dump_expr(b, m, e->arms[i].body);
      sh_buf_putc(b, ')');
    }
    sh_buf_putc(b, ')');
    break;
  case SH_EX_FOR:
    sh_buf_puts(b, "(for ");
    dump_pat(b, m, e->pat);
    sh_buf_putc(b, ' ');
    sh_ast_dump_expr(b, m, e->a);
    if (e->b) {
      sh_buf_puts(b, " .. ");
      sh_ast_dump_expr(b, m, e->b);
    }
    sh_buf_putc(b, ' ');
    sh_ast_dump_expr(b, m, e->c);
    sh_buf_putc(b, ')');
    break;
  case SH_EX_WHILE:
    sh_buf_puts(b, "(while ");
    dump_pat(b, m, e->lets[0].pat);
    if (e->lets[0].tx) {
      sh_buf_puts(b, " : ");
      dump_tx(b, m, e->lets[0].tx);
    }
    sh_buf_putc(b, ' ');
    sh_ast_dump_expr(b, m, e->lets[0].value);
    sh_buf_putc(b, ' ');
    sh_ast_dump_expr(b, m, e->a);
    sh_buf_puts(b, " max ");
    sh_ast_dump_expr(b, m, e->b);
    sh_buf_putc(b, ' ');
    sh_ast_dump_expr(b, m, e->c);
    sh_buf_putc(b, ')');
    break;
  case SH_EX_PHASE:
    sh_buf_printf(b, "(phase %lld ", (long long)e->ival);
    sh_ast_dump_expr(b, m, e->a);
    sh_buf_putc(b, ')');
    break;
  }
}

static void dump_tx(sh_buf *b, const sh_module *m, const sh_texpr *t) {
  if (!t) {
    sh_buf_puts(b, "<null>");
    return;
  }
  switch (t->kind) {
  case SH_TX_ERROR: sh_buf_puts(b, "<error>"); break;
  case SH_TX_I32: sh_buf_puts(b, "i32"); break;
  case SH_TX_BOOL: sh_buf_puts(b, "bool"); break;
  case SH_TX_F32: sh_buf_puts(b, "f32"); break;
  case SH_TX_NAME: sh_buf_puts(b, sh_sym_name(&m->syms, t->name)); break;
  case SH_TX_TENSOR: dump_list(b, m, "f32", t->dims, t->n); break;
  case SH_TX_LIST:
  case SH_TX_TUPLE:
    sh_buf_puts(b, t->kind == SH_TX_LIST ? "(list" : "(tuple");
    for (int i = 0; i < t->n; i++) {
      sh_buf_putc(b, ' ');
      dump_tx(b, m, t->elems[i]);
    }
    sh_buf_putc(b, ')');
    break;
  }
}

static void dump_ktype(sh_buf *b, const sh_module *m, const sh_ksyn_type *t) {
  if (!t) {
    sh_buf_puts(b, "<null>");
    return;
  }
  dump_list(b, m, t->i32 ? "i32" : "f32", t->dims, t->n);
}

static void dump_kparams(sh_buf *b, const sh_module *m, const sh_ksyn_param *v, int n) {
  sh_buf_putc(b, '(');
  for (int i = 0; i < n; i++) {
    sh_buf_printf(b, "%s(%s ", i ? " " : "", v[i].name ? sh_sym_name(&m->syms, v[i].name) : "_");
    dump_ktype(b, m, v[i].tx);
    sh_buf_putc(b, ')');
  }
  sh_buf_putc(b, ')');
}

static void dump_kernel(sh_buf *b, const sh_module *m, const sh_kernel_decl *k) {
  static const char *const ops[] = {"=", "+=", "*=", "max=", "min="};
  sh_buf_printf(b, "(kernel %s ", sh_sym_name(&m->syms, k->name));
  dump_kparams(b, m, k->params, k->n_params);
  sh_buf_putc(b, ' ');
  dump_kparams(b, m, k->results, k->n_results);
  for (int i = 0; i < k->n_stmts; i++) {
    const sh_ksyn_stmt *s = &k->stmts[i];
    sh_buf_printf(b, " (%s%s ", (unsigned)s->op < SH_ARRAY_LEN(ops) ? ops[s->op] : "?", s->init ? "!" : "");
    dump_list(b, m, sh_sym_name(&m->syms, s->lhs), s->idx, s->n_idx);
    sh_buf_putc(b, ' ');
    sh_ast_dump_expr(b, m, s->rhs);
    for (int w = 0; w < s->n_where; w++) {
      sh_buf_printf(b, " (where %s ", sh_sym_name(&m->syms, s->where[w].var));
      sh_ast_dump_expr(b, m, s->where[w].lo);
      sh_buf_putc(b, ' ');
      sh_ast_dump_expr(b, m, s->where[w].hi);
      sh_buf_putc(b, ')');
    }
    sh_buf_putc(b, ')');
  }
  sh_buf_puts(b, ")\n");
}

void sh_ast_dump(sh_buf *b, const sh_module *m) {
  for (int i = 0; i < m->n_decls; i++) {
    const sh_decl *d = &m->decls[i];
    switch (d->kind) {
    case SH_DECL_TYPE:
      sh_buf_printf(b, "(type %s", sh_sym_name(&m->syms, d->u.adt->name));
      for (int c = 0; c < d->u.adt->n_ctors; c++) {
        const sh_ctor *k = &d->u.adt->ctors[c];
        sh_buf_printf(b, " (%s", sh_sym_name(&m->syms, k->name));
        for (int f = 0; f < k->n_fields; f++) {
          sh_buf_putc(b, ' ');
          if (k->field_names[f]) sh_buf_printf(b, "%s:", sh_sym_name(&m->syms, k->field_names[f]));
          dump_tx(b, m, k->field_tx[f]);
        }
        sh_buf_putc(b, ')');
      }
      sh_buf_puts(b, ")\n");
      break;
    case SH_DECL_PARAM:
      sh_buf_printf(b, "(param %s ", sh_sym_name(&m->syms, d->u.param->name));
      dump_tx(b, m, d->u.param->tx);
      sh_buf_puts(b, ")\n");
      break;
    case SH_DECL_SIZE:
      sh_buf_printf(b, "(size %s", sh_sym_name(&m->syms, d->u.size->name));
      if (d->u.size->has_value) sh_buf_printf(b, " %lld", (long long)d->u.size->value);
      sh_buf_puts(b, ")\n");
      break;
    case SH_DECL_FN: {
      const sh_fn *f = d->u.fn;
      sh_buf_printf(b, "(fn %s (", sh_sym_name(&m->syms, f->name));
      for (int k = 0; k < f->n_params; k++) {
        sh_buf_printf(b, "%s(%s ", k ? " " : "", sh_sym_name(&m->syms, f->params[k]->name));
        dump_tx(b, m, f->param_tx[k]);
        sh_buf_putc(b, ')');
      }
      sh_buf_puts(b, ") ");
      dump_tx(b, m, f->ret_tx);
      sh_buf_putc(b, ' ');
      sh_ast_dump_expr(b, m, f->body);
      sh_buf_puts(b, ")\n");
      break;
    }
    case SH_DECL_KERNEL: dump_kernel(b, m, d->u.kernel); break;
    }
  }
}
