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

void cli_print_graph_stats(FILE *f, const sheaf_graph_stats *st, bool summed) {
  fprintf(f, "  graph: %llu ops, %llu batches (average batch %.1f ops), %llu flushes\n",
          (unsigned long long)st->nodes, (unsigned long long)st->batches,
          st->batches ? (double)st->nodes / (double)st->batches : 0.0, (unsigned long long)st->flushes);
  fprintf(f,
          "  time%s: build %.1f ms, schedule %.1f ms, kernels %.1f ms; %.1f ns of build+schedule per op\n",
          summed ? " (summed over the threads)" : "", st->ns_build * 1e-6, st->ns_schedule * 1e-6,
          st->ns_kernels * 1e-6,
          st->nodes ? (double)(st->ns_build + st->ns_schedule) / (double)st->nodes : 0.0);
  fprintf(f, "  data: %llu rows gathered through row pointers, %llu bytes copied\n",
          (unsigned long long)st->rows_gathered, (unsigned long long)st->bytes_copied);
}

void cli_print_kernel_stats(FILE *f, size_t n, const char *const *names, const uint64_t *batches,
                            const uint64_t *nodes) {
  if (n == 0) return;
  fprintf(f, "  %-32s %10s %12s %10s\n", "kernel", "batches", "nodes", "avg batch");
  for (size_t i = 0; i < n; i++)
    fprintf(f, "  %-32s %10llu %12llu %10.1f\n", names[i] ? names[i] : "?", (unsigned long long)batches[i],
            (unsigned long long)nodes[i], batches[i] ? (double)nodes[i] / (double)batches[i] : 0.0);
}
