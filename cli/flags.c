/*
 * flags.c — the table-driven flag parser of every sheaf command (cli.h,
 * "flags"): matching "--name V" / "--name=V" (and an alias: "-o V"), the
 * value's kind and range, the positional arguments and "--", flags that
 * exclude each other, the error texts ("CMD: FLAG: ..."), the --help list,
 * the checks on the files the flags name; and the entries more than one
 * command uses (cli_run_flag, the --isa choices).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void *field(void *opts, size_t at) { return (char *)opts + at; }
static const void *cfield(const void *opts, size_t at) { return (const char *)opts + at; }

void cli_flag_error(const cli_flags *s, const cli_flag *f, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  cli_error("%s: %s: %s", s->cmd, f->name, msg);
}

/* "A, B or C" into buf. */
static const char *choice_list(const cli_flag *f, char *buf, size_t cap) {
  size_t n = 0, len = 0;
  while (f->choices[n]) n++;
  buf[0] = '\0';
  for (size_t k = 0; k < n && len < cap; k++) {
    const char *sep = k == 0 ? "" : k + 1 == n ? " or " : ", ";
    int w = snprintf(buf + len, cap - len, "%s%s", sep, f->choices[k]);
    if (w < 0) break;
    len += (size_t)w;
  }
  return buf;
}

static bool parse_enum(const cli_flags *s, const cli_flag *f, const char *v, int *out) {
  for (int k = 0; f->choices[k]; k++)
    if (!strcmp(v, f->choices[k])) {
      *out = f->values ? f->values[k] : k;
      return true;
    }
  char list[256];
  choice_list(f, list, sizeof list);
  if (f->noun) cli_flag_error(s, f, "unknown %s '%s' (expected %s)", f->noun, v, list);
  else cli_flag_error(s, f, "expected %s, got '%s'", list, v);
  return false;
}

bool cli_flag_int(const cli_flags *s, const cli_flag *f, const char *v, long long lo, long long hi,
                  long long *out) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (!*v || *end || errno || x < lo || x > hi) {
    cli_flag_error(s, f, "expected an integer in %lld..%lld, got '%s'", lo, hi, v);
    return false;
  }
  *out = x;
  return true;
}

static bool parse_u64(const cli_flags *s, const cli_flag *f, const char *v, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10);
  if (!*v || *end || errno || *v == '-' || *v == '+') {
    cli_flag_error(s, f, "expected a non-negative integer, got '%s'", v);
    return false;
  }
  *out = x;
  return true;
}

static bool parse_float(const cli_flags *s, const cli_flag *f, const char *v, double *out) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (!*v || *end || errno || !isfinite(x) || x < f->flo || x > f->fhi) {
    cli_flag_error(s, f, "expected a number in %g..%g, got '%s'", f->flo, f->fhi, v);
    return false;
  }
  *out = x;
  return true;
}

bool cli_flag_store(const cli_flags *s, const cli_flag *f, const char *v, void *opts) {
  void *dst = field(opts, f->at);
  switch (f->kind) {
  case CLI_FLAG_BOOL: *(bool *)dst = true; return true;
  case CLI_FLAG_INT: return cli_flag_int(s, f, v, f->lo, f->hi, (long long *)dst);
  case CLI_FLAG_U64: return parse_u64(s, f, v, (uint64_t *)dst);
  case CLI_FLAG_FLOAT: return parse_float(s, f, v, (double *)dst);
  case CLI_FLAG_STRING:
  case CLI_FLAG_IN:
  case CLI_FLAG_OUT: *(const char **)dst = v; return true;
  case CLI_FLAG_ENUM: return parse_enum(s, f, v, (int *)dst);
  case CLI_FLAG_CUSTOM: return f->parse(s, f, v, opts);
  }
  return false;
}

/* Whether a is `name` ("--x", or "--x=..." for a flag with a value). */
static bool spelled(const char *a, const char *name, bool value) {
  size_t n = name ? strlen(name) : 0;
  return n && !strncmp(a, name, n) && (a[n] == '\0' || (a[n] == '=' && value));
}

/* The entry whose name or alias a is; *as: the spelling used. */
static int lookup(const cli_flags *s, const char *a, const char **as) {
  for (int k = 0; k < s->n; k++) {
    const cli_flag *f = s->flags[k];
    bool value = f->kind != CLI_FLAG_BOOL;
    if (spelled(a, f->name, value)) *as = f->name;
    else if (spelled(a, f->alias, value)) *as = f->alias;
    else continue;
    return k;
  }
  return -1;
}

/* Where the help is: s->see, or "sheaf CMD --help". */
static const char *see(const cli_flags *s, char *buf, size_t cap) {
  if (s->see) return s->see;
  snprintf(buf, cap, "sheaf %s --help", s->cmd);
  return buf;
}

/* "--flag=V" for a flag without a value: reported (true), as such. */
static bool takes_no_value(const cli_flags *s, const char *a) {
  const char *eq = strchr(a, '=');
  for (int k = 0; eq && k < s->n; k++) {
    const cli_flag *f = s->flags[k];
    size_t n = (size_t)(eq - a);
    bool named = (strlen(f->name) == n && !strncmp(a, f->name, n)) ||
                 (f->alias && strlen(f->alias) == n && !strncmp(a, f->alias, n));
    if (f->kind == CLI_FLAG_BOOL && named) {
      char buf[128];
      cli_error("%s: %.*s takes no value, got '%s' (see '%s')", s->cmd, (int)n, a, a, see(s, buf, sizeof buf));
      return true;
    }
  }
  return false;
}

static int find(const cli_flags *s, const char *name) {
  for (int k = 0; k < s->n; k++)
    if (!strcmp(s->flags[k]->name, name)) return k;
  return -1;
}

void cli_flags_help(FILE *out, const cli_flags *s) {
  for (int k = 0; k < s->n; k++) {
    const cli_flag *f = s->flags[k];
    char head[64]; /* the shorter spelling first: "-o, --output OUT" */
    bool alias_first = f->alias && strlen(f->alias) < strlen(f->name);
    const char *a = alias_first ? f->alias : f->name, *b = alias_first ? f->name : f->alias;
    snprintf(head, sizeof head, "%s%s%s%s%s", a, b ? ", " : "", b ? b : "", f->arg ? " " : "", f->arg ? f->arg : "");
    fprintf(out, "  %-18s ", head);
    for (const char *h = f->help; *h;) { /* each line, the later ones under the first */
      const char *e = strchr(h, '\n');
      size_t len = e ? (size_t)(e - h) : strlen(h);
      fprintf(out, "%s%.*s\n", h == f->help ? "" : "                     ", (int)len, h);
      h += len + (e != NULL);
    }
  }
  fprintf(out, "  %-18s this text\n", "-h, --help");
}

/* The value of the flag at argv[*i] spelled `as`: after '=' or the next
 * argument (then *i moves on); NULL after "AS needs a value" (none, or
 * empty: no flag takes an empty value). */
static const char *value_of(const cli_flags *s, int argc, char **argv, int *i, const char *as) {
  const char *a = argv[*i], *v = NULL;
  size_t n = strlen(as);
  if (a[n] == '=') v = a + n + 1;
  else if (*i + 1 < argc) v = argv[++*i];
  if (!v || !*v) {
    cli_error("%s: %s needs a value", s->cmd, as);
    return NULL;
  }
  return v;
}

enum { MAX_FLAGS = 64 };

int cli_flags_parse(const cli_flags *s, int argc, char **argv, void *opts, const char **pos) {
  int n_pos = 0, cap_pos = s->max_pos < 0 ? argc : 1;
  char buf[128];
  bool seen[MAX_FLAGS] = {false}, only_pos = false;
  for (int k = 0; k < cap_pos; k++) pos[k] = NULL;
  for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) /* help wins, wherever it stands */
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(s->usage, stdout);
      cli_flags_help(stdout, s);
      if (s->usage_end) fputs(s->usage_end, stdout);
      return -1;
    }
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *as = NULL, *v = NULL;
    if (!only_pos && !strcmp(a, "--")) {
      only_pos = true;
      continue;
    }
    if (only_pos || a[0] != '-' || a[1] == '\0') {
      if (n_pos == cap_pos) {
        cli_error("%s: unexpected argument '%s' (the %s is '%s')", s->cmd, a, s->pos_noun, pos[0]);
        return CLI_USAGE;
      }
      pos[n_pos++] = a;
      continue;
    }
    int k = lookup(s, a, &as);
    if (k < 0 && takes_no_value(s, a)) return CLI_USAGE;
    if (k < 0) {
      cli_error("%s: unknown option '%s' (see '%s')", s->cmd, a, see(s, buf, sizeof buf));
      return CLI_USAGE;
    }
    const cli_flag *f = s->flags[k];
    if (f->kind != CLI_FLAG_BOOL && !(v = value_of(s, argc, argv, &i, as))) return CLI_USAGE;
    if (!cli_flag_store(s, f, v, opts)) return CLI_USAGE;
    if (f->given) *(bool *)field(opts, f->given - 1) = true;
    if (k < MAX_FLAGS) seen[k] = true;
  }
  if (n_pos == 0 && s->missing && !*s->missing) {
    fputs(s->usage, stderr);
    cli_flags_help(stderr, s);
    return CLI_USAGE;
  }
  if (n_pos == 0 && s->missing) {
    cli_error("%s: missing %s (see '%s')", s->cmd, s->missing, see(s, buf, sizeof buf));
    return CLI_USAGE;
  }
  for (int k = 0; k < s->n && k < MAX_FLAGS; k++) {
    const cli_flag *f = s->flags[k];
    int x = f->excludes ? find(s, f->excludes) : -1;
    if (seen[k] && x >= 0 && x < MAX_FLAGS && seen[x]) {
      cli_error("%s: %s and %s exclude each other%s%s%s", s->cmd, f->name, f->excludes, f->why ? " (" : "",
                f->why ? f->why : "", f->why ? ")" : "");
      return CLI_USAGE;
    }
  }
  return CLI_OK;
}

int cli_flags_check_files(const cli_flags *s, const void *opts, const cli_path *extra, int n_extra) {
  enum { MAX = 16 };
  cli_path ins[MAX], outs[MAX];
  int n_in = 0, n_out = 0;
  for (int k = 0; k < n_extra && n_in < MAX; k++) ins[n_in++] = extra[k];
  for (int k = 0; k < s->n; k++) {
    const cli_flag *f = s->flags[k];
    if (f->kind != CLI_FLAG_IN && f->kind != CLI_FLAG_OUT) continue;
    cli_path p = {f->name, *(const char *const *)cfield(opts, f->at)};
    if (f->kind == CLI_FLAG_IN && n_in < MAX) ins[n_in++] = p;
    else if (f->kind == CLI_FLAG_OUT && n_out < MAX) outs[n_out++] = p;
  }
  for (int a = 0; a < n_in; a++) /* standard input can be read once */
    for (int b = a + 1; b < n_in; b++)
      if (ins[a].path && ins[b].path && !strcmp(ins[a].path, "-") && !strcmp(ins[b].path, "-")) {
        cli_error("%s: %s and %s cannot both be standard input ('-')", s->cmd, ins[a].flag, ins[b].flag);
        return CLI_USAGE;
      }
  return cli_check_paths(ins, n_in, outs, n_out);
}

/* ------------------------------------------------------- shared entries */

const char *const cli_isa_names[] = {"scalar", "avx2", "avx512", NULL};
const int cli_isa_values[] = {SHEAF_ISA_SCALAR, SHEAF_ISA_AVX2, SHEAF_ISA_AVX512};

static const char *const policy_names[] = {"sheaf", "none", "depth", "agenda", NULL};
static const int policy_values[] = {SHEAF_POLICY_SHEAF, SHEAF_POLICY_NONE, SHEAF_POLICY_DEPTH,
                                    SHEAF_POLICY_AGENDA};
static const char *const parallel_names[] = {"auto", "batches", "kernels", NULL};
static const int parallel_values[] = {SHEAF_PARALLEL_AUTO, SHEAF_PARALLEL_BATCHES,
                                      SHEAF_PARALLEL_KERNELS};

#define AT(field) .at = offsetof(cli_run_opts, field)
const cli_flag cli_run_flag[CLI_RUN_N] = {
    [CLI_RUN_DATA] = {"--data", CLI_FLAG_IN, AT(data), .arg = "FILE",
                      .help = "the instances (required; '-' = standard input, a pipe or FIFO works)"},
    [CLI_RUN_WEIGHTS] = {"--weights", CLI_FLAG_IN, AT(weights), .arg = "W",
                         .help = "the parameters from a safetensors file instead of drawn ones\n"
                                 "('-' = standard input)"},
    [CLI_RUN_SEED] = {"--seed", CLI_FLAG_U64, AT(seed), CLI_GIVEN(cli_run_opts, seed_given), .arg = "S",
                      .help = "seed of the random parameters (default 0)", .excludes = "--weights",
                      .why = "weights are loaded, not drawn"},
    [CLI_RUN_BATCH] = {"--batch", CLI_FLAG_INT, AT(batch), .lo = 1, .hi = INT32_MAX, .arg = "N",
                       .help = "instances per batch (default 64)"},
    [CLI_RUN_THREADS] = CLI_FLAG_THREADS(cli_run_opts, threads),
    [CLI_RUN_POLICY] = {"--policy", CLI_FLAG_ENUM, AT(policy), .choices = policy_names,
                        .values = policy_values, .noun = "policy", .arg = "P",
                        .help = "batching policy: sheaf (default), none, depth or agenda"},
    [CLI_RUN_PARALLEL] = {"--parallel", CLI_FLAG_ENUM, AT(parallel), .choices = parallel_names,
                          .values = parallel_values, .noun = "mode", .arg = "M",
                          .help = "how threads are used: batches (whole batches in parallel,\n"
                                  "a graph per thread), kernels (one batch at a time, its\n"
                                  "kernels split over the threads) or auto (default: batches\n"
                                  "when there are at least 2 per thread; kernels when a flag\n"
                                  "reads one graph: --trace)"},
    [CLI_RUN_LIMIT] = {"--limit", CLI_FLAG_INT, AT(limit), .lo = 1, .hi = INT32_MAX, .arg = "N",
                       .help = "only the first N instances"},
    [CLI_RUN_MAX_VOCAB] = {"--max-vocab", CLI_FLAG_INT, AT(max_vocab), .lo = 1, .hi = INT32_MAX - 2,
                           .arg = "N",
                           .help = "token ids (token-line files) must be below N (default 1000000;\n"
                                   "with --weights also below the rows of the word table, less\n"
                                   "<unk>); a larger id is an error naming its line and column"},
    [CLI_RUN_ALLOW_NONFINITE] = {"--allow-nonfinite", CLI_FLAG_BOOL, AT(allow_nonfinite),
                                 .help = "load weights holding NaN or infinities (refused by default:\n"
                                         "the error names the tensor and the first bad index)"},
    [CLI_RUN_SAVE_WEIGHTS] = {"--save-weights", CLI_FLAG_OUT, AT(save_weights), .arg = "W",
                              .help = "write the parameters used (loaded or drawn) to a safetensors file"},
    [CLI_RUN_TRACE] = {"--trace", CLI_FLAG_OUT, AT(trace), .arg = "FILE",
                       .help = "Chrome-trace / Perfetto JSON timeline of the batches"},
    [CLI_RUN_STATS] = {"--stats", CLI_FLAG_BOOL, AT(stats), .help = "per-kernel batch counts and sizes"},
};
#undef AT

void cli_run_opts_init(cli_run_opts *c) {
  memset(c, 0, sizeof *c);
  c->batch = 64;
  c->policy = SHEAF_POLICY_SHEAF;
  c->parallel = SHEAF_PARALLEL_AUTO;
}

int cli_run_check(const char *cmd, const cli_run_opts *c, bool stats_one_graph) {
  bool stats = stats_one_graph && c->stats;
  if ((c->trace || stats) && c->parallel == SHEAF_PARALLEL_BATCHES) {
    cli_error("%s: --%s reads one graph: use --parallel kernels (or auto)", cmd,
              c->trace ? "trace" : "stats");
    return CLI_USAGE;
  }
  return CLI_OK;
}
