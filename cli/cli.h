/*
 * cli.h — declarations shared by the files of the `sheaf` command-line tool.
 * Exit codes: 0 success, 1 the command failed (bad input file, I/O),
 * 2 usage error (unknown subcommand or flag). Errors go to stderr as
 * "sheaf: error: <message>"; results go to stdout (or -o FILE).
 */
#ifndef SHEAF_CLI_H
#define SHEAF_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "sheaf.h"

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* Prints "sheaf: error: <formatted>" to stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Creates the context used by a subcommand; on failure prints the reason and
 * returns NULL. threads 0 = all CPUs. */
sheaf_ctx *cli_ctx(int threads);

/* "NAME VALUE" or "NAME=VALUE" at argv[*i]: 1 matched (value in *out, *i
 * advanced past a separate value), 0 not this flag, -1 the value is
 * missing (not reported: the caller says what was expected). */
int cli_flag_match(int argc, char **argv, int *i, const char *name, const char **out);
/* cli_flag_match, reporting a missing value as "NAME needs a value". */
int cli_flag_value(int argc, char **argv, int *i, const char *name, const char **out);
/* A decimal integer in [lo, hi]; otherwise reports "FLAG: expected an
 * integer in LO..HI, got 'V'" and returns false. */
bool cli_parse_int(const char *flag, const char *v, long long lo, long long hi, long long *out);
/* --parallel's value: auto, batches or kernels (else an error, false). */
bool cli_parse_parallel(const char *v, sheaf_parallel *out);

/* The end-of-run lines both run commands print: the graph counters ("graph:",
 * "time:", "data:"; times summed over threads when `summed`), and per-kernel
 * batch counts (--stats) from names/batches/nodes. */
void cli_print_graph_stats(FILE *f, const sheaf_graph_stats *st, bool summed);
void cli_print_kernel_stats(FILE *f, size_t n, const char *const *names, const uint64_t *batches,
                            const uint64_t *nodes);

/* `sheaf data ...` (cli/data.c). argv[0] is "data". */
int cli_data(int argc, char **argv);
/* `sheaf data stats FILE.safetensors` (cli/data_weights.c): lists name,
 * dtype, shape and bytes of every tensor, then totals. */
int cli_data_stats_weights(sheaf_ctx *ctx, const char *path, FILE *out);

/* `sheaf check MODEL.sf...` (cli/check.c). argv[0] is "check". */
int cli_check(int argc, char **argv);

#endif
