/*
 * common.c — helpers shared by the sheaf subcommands: error printing,
 * context creation and flag parsing.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int cli_flag_match(int argc, char **argv, int *i, const char *name, const char **out) {
  const char *a = argv[*i];
  size_t n = strlen(name);
  if (strncmp(a, name, n) != 0) return 0;
  if (a[n] == '=') {
    *out = a + n + 1;
    return 1;
  }
  if (a[n] != '\0') return 0;
  if (*i + 1 >= argc) return -1;
  *out = argv[++*i];
  return 1;
}

int cli_flag_value(int argc, char **argv, int *i, const char *name, const char **out) {
  int r = cli_flag_match(argc, argv, i, name, out);
  if (r < 0) cli_error("%s needs a value", name);
  return r;
}

bool cli_parse_int(const char *flag, const char *v, long long lo, long long hi, long long *out) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (!*v || *end || errno || x < lo || x > hi) {
    cli_error("%s: expected an integer in %lld..%lld, got '%s'", flag, lo, hi, v);
    return false;
  }
  *out = x;
  return true;
}

bool cli_parse_parallel(const char *v, sheaf_parallel *out) {
  static const char *const names[] = {"auto", "batches", "kernels"};
  for (int k = 0; k < 3; k++)
    if (!strcmp(v, names[k])) {
      *out = (sheaf_parallel)k;
      return true;
    }
  cli_error("--parallel: unknown mode '%s' (expected auto, batches or kernels)", v);
  return false;
}
