/*
 * parser.h — the front door of the front end: a module's lifetime and the
 * recursive-descent parser that fills it from source text (grammar in
 * docs/LANGUAGE.md; every parse function in parser.c / parse_expr.c opens
 * with its EBNF rule).
 *
 *   sh_module m;
 *   sh_module_init(&m, ctx, "model.sf", src, len);   // src must outlive m
 *   sh_parse(&m);          // syntax errors -> m.diags
 *   sh_check(&m);          // check.h: types, shapes, exhaustiveness
 *   sh_diags_render(&m.diags, &out);
 *   sh_module_free(&m);
 *
 * The parser recovers from errors: it reports one, skips to the next `;`,
 * `}` or declaration keyword, and goes on, so one run reports several
 * (at most SH_DIAG_MAX_ERRORS). Nesting deeper than SH_LANG_MAX_DEPTH is an
 * error, never a stack overflow.
 */
#ifndef SH_LANG_PARSER_H
#define SH_LANG_PARSER_H

#include "lang/ast.h"

void sh_module_init(sh_module *m, sheaf_ctx *ctx, const char *file, const char *src, size_t len);
void sh_module_free(sh_module *m);

/* Lexes and parses. SHEAF_OK when the source is well formed; SHEAF_ERR_PARSE
 * when diagnostics were reported (m->diags; the last error of the context
 * holds the first one); SHEAF_ERR_NOMEM. */
sheaf_status sh_parse(sh_module *m);

#endif
