/*
 * common.c — helpers shared by the sheaf subcommands: error printing and
 * context creation.
 */
#include <stdarg.h>
#include <stdio.h>

#include "cli.h"

void cli_error(const char *fmt, ...) {
  fflush(stdout);
  fputs("sheaf: error: ", stderr);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

sheaf_ctx *cli_ctx(int threads) {
  sheaf_ctx_options o = {0};
  o.threads = threads;
  sheaf_ctx *ctx = NULL;
  char err[512];
  if (sheaf_ctx_create(&o, &ctx, err, sizeof err) != SHEAF_OK) {
    cli_error("%s", err);
    return NULL;
  }
  return ctx;
}
