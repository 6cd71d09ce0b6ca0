/*
 * check.c — `sheaf check MODEL.sf...`: parses and type-checks model sources
 * and prints every error (file:line:col, the source line and a caret), or a
 * summary of each model (sizes, types, parameters with their shapes,
 * function signatures). Exit 0 when every file checks, 1 otherwise.
 */
#include <stdio.h>
#include <string.h>

#include "base/buf.h"
#include "base/file.h"
#include "cli.h"
#include "lang/check.h"

static const char usage_check[] =
    "usage: sheaf check [--quiet] [--ast] MODEL.sf...\n"
    "\n"
    "Parses and type-checks model sources ('-' = standard input; the language\n"
    "is described in docs/LANGUAGE.md). Errors go to stderr as 'FILE:LINE:COL: error: ...' with\n"
    "the source line and a caret under the problem (at most 20 per file).\n"
    "A model that checks gets a summary on stdout: its sizes (those without a\n"
    "value come from the weights file), types, parameters with their shapes and\n"
    "function signatures.\n"
    "\n"
    "options:\n"
    "  -q, --quiet  print nothing for models that check\n"
    "  --ast        print the syntax tree (S-expressions) instead of the summary\n"
    "  -h, --help   this text\n";

static int check_one(sheaf_ctx *ctx, const char *path, bool quiet, bool ast) {
  char *src = NULL;
  size_t len = 0;
  /* '-' (standard input), a pipe or FIFO: read once, named "<stdin>" */
  if (cli_hold_input(ctx, path, false, &path, NULL) != CLI_OK) return CLI_FAIL;
  if (sh_file_read(ctx, path, &src, &len) != SHEAF_OK) {
    cli_error("%s", sheaf_ctx_last_error(ctx));
    return CLI_FAIL;
  }
  sh_module m;
  sheaf_status st = sh_lang_compile(&m, ctx, path, src, len);
  sh_buf out;
  sh_buf_init(&out, ctx);
  int rc = CLI_OK;
  if (st == SHEAF_OK) {
    if (ast) sh_ast_dump(&out, &m);
    else if (!quiet) sh_check_summary(&m, &out);
    fwrite(out.data ? (const char *)out.data : "", 1, out.len, stdout);
  } else if (st == SHEAF_ERR_PARSE) {
    sh_diags_render(&m.diags, &out);
    fflush(stdout);
    fwrite(out.data ? (const char *)out.data : "", 1, out.len, stderr);
    rc = CLI_FAIL;
  } else {
    cli_error("%s", sheaf_ctx_last_error(ctx));
    rc = CLI_FAIL;
  }
  sh_buf_free(&out);
  sh_module_free(&m);
  sh_free(ctx, src, len + 1);
  return rc;
}

int cli_check(int argc, char **argv) {
  bool quiet = false, ast = false;
  int n_files = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(usage_check, stdout);
      return CLI_OK;
    }
    if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) quiet = true;
    else if (!strcmp(a, "--ast")) ast = true;
    else if (a[0] == '-' && a[1]) {
      cli_error("check: unknown option '%s' (see 'sheaf check --help')", a);
      return CLI_USAGE;
    } else n_files++;
  }
  if (n_files == 0) {
    fputs(usage_check, stderr);
    return CLI_USAGE;
  }
  sheaf_ctx *ctx = cli_ctx(1);
  if (!ctx) return CLI_FAIL;
  int rc = CLI_OK;
  for (int i = 1; i < argc; i++) {
    if (argv[i][0] == '-' && argv[i][1]) continue;
    if (check_one(ctx, argv[i], quiet, ast) != CLI_OK) rc = CLI_FAIL;
  }
  sheaf_ctx_free(ctx);
  return rc;
}
