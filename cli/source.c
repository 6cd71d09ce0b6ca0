/*
 * source.c — loading a model source for the commands that take one as their
 * argument (check, compile, tune): cli_hold_input, sh_file_read,
 * sh_lang_compile, and the errors printed one way for all of them.
 */
#include <stdio.h>
#include <string.h>

#include "base/buf.h"
#include "base/file.h"
#include "cli.h"
#include "source.h"

int cli_source_load(sheaf_ctx *ctx, const char *path, cli_source *s) {
  memset(s, 0, sizeof *s);
  s->ctx = ctx;
  s->name = path;
  /* '-' (standard input), a pipe or FIFO: read once, named "<stdin>" */
  if (cli_hold_input(ctx, path, false, &s->name, NULL) != CLI_OK) return CLI_FAIL;
  if (sh_file_read(ctx, s->name, &s->text, &s->len) != SHEAF_OK) {
    s->text = NULL;
    cli_error("%s", sheaf_ctx_last_error(ctx));
    return CLI_FAIL;
  }
  sheaf_status st = sh_lang_compile(&s->m, ctx, s->name, s->text, s->len);
  s->compiled = true;
  if (st == SHEAF_OK) return CLI_OK;
  if (st != SHEAF_ERR_PARSE) {
    cli_error("%s", sheaf_ctx_last_error(ctx));
    return CLI_FAIL;
  }
  sh_buf out;
  sh_buf_init(&out, ctx);
  sh_diags_render(&s->m.diags, &out);
  fflush(stdout);
  fwrite(out.data ? (const char *)out.data : "", 1, out.len, stderr);
  sh_buf_free(&out);
  return CLI_FAIL;
}

void cli_source_free(cli_source *s) {
  if (s->compiled) sh_module_free(&s->m);
  if (s->text) sh_free(s->ctx, s->text, s->len + 1);
  memset(s, 0, sizeof *s);
}
