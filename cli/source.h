/*
 * source.h — a model source as `sheaf check`, `compile` and `tune` read it
 * (cli/source.c): held once when it is standard input, a pipe or a FIFO,
 * read, and compiled (parsed and type-checked).
 */
#ifndef SHEAF_CLI_SOURCE_H
#define SHEAF_CLI_SOURCE_H

#include <stdbool.h>
#include <stddef.h>

#include "lang/check.h"
#include "sheaf.h"

typedef struct cli_source {
  sheaf_ctx *ctx;
  const char *name; /* what it is read by: the path, "<stdin>" for "-" */
  char *text;
  size_t len;
  sh_module m; /* when `compiled` (whether or not it checked) */
  bool compiled;
} cli_source;

/* Holds, reads and compiles the source at path into s. CLI_OK; or CLI_FAIL
 * after printing why: the diagnostics ("FILE:LINE:COL: error: ..." with the
 * source line and a caret, at most 20) or "sheaf: error: ..." on stderr
 * (standard output flushed first). cli_source_free in both cases. */
int cli_source_load(sheaf_ctx *ctx, const char *path, cli_source *s);
void cli_source_free(cli_source *s);

#endif
