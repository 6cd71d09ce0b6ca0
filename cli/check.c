/*
 * check.c — `sheaf check MODEL.sf...`: parses and type-checks model sources
 * and prints every error (file:line:col, the source line and a caret), or a
 * summary of each model (sizes, types, parameters with their shapes,
 * function signatures). Exit 0 when every file checks, 1 otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "cli.h"
#include "compile/analyze.h"
#include "lang/hostprog.h"
#include "source.h"

static const char usage_check[] =
    "usage: sheaf check [--quiet] [--ast] [--analyses [--verbose]] MODEL.sf...\n"
    "\n"
    "Parses and type-checks model sources ('-' = standard input; the language\n"
    "is described in docs/LANGUAGE.md). Errors go to stderr as 'FILE:LINE:COL: error: ...' with\n"
    "the source line and a caret under the problem (at most 20 per file).\n"
    "A model that checks gets a summary on stdout: its sizes (those without a\n"
    "value come from the weights file), types, parameters with their shapes and\n"
    "function signatures; with --analyses, then what the static analyses found\n"
    "(parameter taint, static depth, ghost ops, host-only code, control points,\n"
    "coarsening regions: docs/COMPILER.md).\n"
    "\n"
    "options:\n";

typedef struct check_opts {
  bool quiet, ast, analyses, verbose;
} check_opts;

#define AT(field) .at = offsetof(check_opts, field)
static const cli_flag f_quiet = {"--quiet", CLI_FLAG_BOOL, AT(quiet), .alias = "-q",
                                 .help = "print nothing for models that check"};
static const cli_flag f_ast = {"--ast", CLI_FLAG_BOOL, AT(ast),
                               .help = "print the syntax tree (S-expressions) instead of the summary"};
static const cli_flag f_analyses = {"--analyses", CLI_FLAG_BOOL, AT(analyses),
                                    .help = "after the summary, print what the static analyses found"};
static const cli_flag f_verbose = {"--verbose", CLI_FLAG_BOOL, AT(verbose),
                                   .help = "with --analyses: the position of every host-only expression"};
#undef AT
static const cli_flag *const check_flags[] = {&f_quiet, &f_ast, &f_analyses, &f_verbose};
static const cli_flags check_spec = {.cmd = "check", CLI_FLAGS_LIST(check_flags), .pos_noun = "model",
                                     .usage = usage_check, .max_pos = -1, .missing = ""};

/* The analyses' report after the summary; CLI_FAIL when out of memory. */
static int analyses(const sh_module *m, sh_buf *out, bool verbose) {
  sh_analyses a;
  sheaf_status st = sh_analyze(m, &a);
  if (st == SHEAF_OK) st = sh_analyses_report(&a, out, verbose);
  sh_analyses_free(&a);
  if (st != SHEAF_OK) fprintf(stderr, "sheaf: error: analyses of %s: %s\n", m->diags.file, sheaf_status_str(st));
  return st == SHEAF_OK ? CLI_OK : CLI_FAIL;
}

static int check_one(sheaf_ctx *ctx, const char *path, const check_opts *o) {
  cli_source src;
  int rc = cli_source_load(ctx, path, &src);
  bool ast = o->ast, quiet = o->quiet;
  if (rc == CLI_OK && (ast || !quiet)) {
    sh_buf out;
    sh_buf_init(&out, ctx);
    if (ast) sh_ast_dump(&out, &src.m);
    else sh_check_summary(&src.m, &out);
    char host[512]; /* what the compiled host program leaves to the AST walker */
    if (!ast && src.m.main && sh_hostprog_describe_module(&src.m, host, sizeof host) == SHEAF_OK)
      sh_buf_printf(&out, "%s\n", host);
    if (!ast && o->analyses) rc = analyses(&src.m, &out, o->verbose);
    fwrite(out.data ? (const char *)out.data : "", 1, out.len, stdout);
    sh_buf_free(&out);
  }
  cli_source_free(&src);
  return rc;
}

int cli_check(int argc, char **argv) {
  check_opts o = {0};
  const char **files = calloc((size_t)argc, sizeof *files);
  if (!files) return CLI_FAIL;
  int rc = cli_flags_parse(&check_spec, argc, argv, &o, files);
  if (rc) {
    free(files);
    return rc < 0 ? CLI_OK : rc;
  }
  sheaf_ctx *ctx = cli_ctx(1);
  if (!ctx) {
    free(files);
    return CLI_FAIL;
  }
  for (int i = 0; i < argc && files[i]; i++)
    if (check_one(ctx, files[i], &o) != CLI_OK) rc = CLI_FAIL;
  sheaf_ctx_free(ctx);
  free(files);
  return rc;
}
