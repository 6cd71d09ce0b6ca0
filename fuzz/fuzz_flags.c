/*
 * fuzz_flags.c — libFuzzer target for the sheaf commands' flag parser
 * (cli/flags.c): the input's bytes, split at NUL bytes, are the arguments
 * (the first byte picks one of two tables: one positional argument, or any
 * number with one required) of a table holding every kind of flag: an
 * integer range, a seed, a float range, a string, an input and an output
 * file (with an alias), enums with and without their own values, a bool
 * with an alias, a repeatable custom flag, and two flags that exclude each
 * other. Every parse must end in success, help, or one error that starts
 * with the command's name; on success every value is in its range
 * and every string is one of the arguments. Any mismatch traps; ASan/UBSan
 * catch everything else. The errors are captured here (cli_error), not
 * printed; --help's text goes to /dev/null.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cli/cli.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static int g_errors;
static char g_error[2048];

/* cli.h's error printer, captured: the parser must report each usage error
 * exactly once. */
void cli_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_error, sizeof g_error, fmt, ap);
  va_end(ap);
  g_errors++;
}

/* The table's files are not checked here (cli_flags_check_files is not
 * called; test_cli_reliability covers the files). */
int cli_check_paths(const cli_path *ins, int n_in, const cli_path *outs, int n_out) {
  (void)ins, (void)n_in, (void)outs, (void)n_out;
  return CLI_OK;
}

enum { MAX_ARGS = 32, MAX_REPEAT = 4 };

typedef struct fz_opts {
  long long n;
  uint64_t seed;
  double x;
  const char *s, *in, *out, *rep[MAX_REPEAT];
  int letter, plain, n_rep;
  bool n_given, quiet, loud, soft;
} fz_opts;

static bool parse_rep(const cli_flags *s, const cli_flag *f, const char *v, void *opts) {
  fz_opts *o = opts;
  if (o->n_rep == MAX_REPEAT) {
    cli_flag_error(s, f, "at most %d, got '%s'", MAX_REPEAT, v);
    return false;
  }
  o->rep[o->n_rep++] = v;
  return true;
}

static const char *const letters[] = {"a", "b", "c", NULL};
static const int letter_values[] = {10, 20, 30};
static const char *const plains[] = {"x", "yy", NULL};

#define AT(field) .at = offsetof(fz_opts, field)
static const cli_flag f_n = {"--n", CLI_FLAG_INT, AT(n), CLI_GIVEN(fz_opts, n_given), .lo = -5, .hi = 100,
                             .arg = "N", .help = "an integer"};
static const cli_flag f_seed = {"--seed", CLI_FLAG_U64, AT(seed), .arg = "S", .help = "a seed"};
static const cli_flag f_x = {"--x", CLI_FLAG_FLOAT, AT(x), .flo = -1, .fhi = 1, .arg = "X", .help = "a number"};
static const cli_flag f_s = {"--s", CLI_FLAG_STRING, AT(s), .arg = "S", .help = "a string"};
static const cli_flag f_in = {"--in", CLI_FLAG_IN, AT(in), .arg = "FILE", .help = "an input"};
static const cli_flag f_out = {"-o", CLI_FLAG_OUT, AT(out), .alias = "--out", .arg = "FILE", .help = "an output"};
static const cli_flag f_letter = {"--letter", CLI_FLAG_ENUM, AT(letter), .choices = letters, .values = letter_values,
                                  .noun = "letter", .arg = "L", .help = "a, b or c"};
static const cli_flag f_plain = {"--plain", CLI_FLAG_ENUM, AT(plain), .choices = plains, .arg = "P",
                                 .help = "x or yy"};
static const cli_flag f_quiet = {"--quiet", CLI_FLAG_BOOL, AT(quiet), .alias = "-q", .excludes = "--loud",
                                 .why = "one or the other", .help = "quiet"};
static const cli_flag f_loud = {"--loud", CLI_FLAG_BOOL, AT(loud), .help = "loud"};
static const cli_flag f_soft = {"--soft", CLI_FLAG_BOOL, AT(soft), .help = "soft"};
static const cli_flag f_rep = {"--rep", CLI_FLAG_CUSTOM, 0, .parse = parse_rep, .arg = "V", .help = "repeatable"};
#undef AT
static const cli_flag *const fz_flags[] = {&f_n,     &f_seed,  &f_x,    &f_s,    &f_in,   &f_out,
                                           &f_letter, &f_plain, &f_quiet, &f_loud, &f_soft, &f_rep};
static const cli_flags spec_one = {.cmd = "fz", CLI_FLAGS_LIST(fz_flags), .pos_noun = "thing", .usage = "usage: fz\n"};
static const cli_flags spec_many = {.cmd = "fz", CLI_FLAGS_LIST(fz_flags), .pos_noun = "thing", .usage = "usage: fz\n",
                                    .max_pos = -1, .missing = "THING"};

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  if (!freopen("/dev/null", "w", stdout)) abort(); /* --help's text */
  return 0;
}

/* Whether s is one of argv[1..argc) or points into one after its '='. */
static bool from_argv(const char *s, int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (s >= argv[i] && s <= argv[i] + strlen(argv[i])) return true;
  return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  const cli_flags *spec = data[0] & 1 ? &spec_many : &spec_one;
  char *buf = malloc(size); /* the arguments, each NUL-terminated */
  if (!buf) return 0;
  memcpy(buf, data + 1, size - 1);
  buf[size - 1] = '\0';
  char *argv[MAX_ARGS + 1];
  int argc = 0;
  argv[argc++] = "fz";
  for (char *p = buf; p < buf + size - 1 && argc < MAX_ARGS; p += strlen(p) + 1) argv[argc++] = p;
  argv[argc] = NULL;
  const char *pos[MAX_ARGS + 1] = {NULL}; /* the parser sets 1 (spec_one) or argc of them */
  fz_opts o = {.n = 7, .x = 0.5};
  g_errors = 0;
  int rc = cli_flags_parse(spec, argc, argv, &o, pos);
  REQUIRE(rc == -1 || rc == CLI_OK || rc == CLI_USAGE);
  REQUIRE(g_errors == (rc == CLI_USAGE)); /* one error line, for a usage error only */
  if (rc == CLI_USAGE) REQUIRE(!strncmp(g_error, "fz: ", 4)); /* naming the command */
  if (rc == CLI_OK) {
    REQUIRE(o.n >= -5 && o.n <= 100 && (o.n_given || o.n == 7));
    REQUIRE(o.x >= -1 && o.x <= 1);
    REQUIRE(o.letter == 0 || o.letter == 10 || o.letter == 20 || o.letter == 30);
    REQUIRE(o.plain == 0 || o.plain == 1);
    REQUIRE(!(o.quiet && o.loud));
    REQUIRE(o.n_rep >= 0 && o.n_rep <= MAX_REPEAT);
    const char *strs[] = {o.s, o.in, o.out};
    for (int k = 0; k < 3; k++) REQUIRE(!strs[k] || (*strs[k] && from_argv(strs[k], argc, argv)));
    for (int k = 0; k < o.n_rep; k++) REQUIRE(*o.rep[k] && from_argv(o.rep[k], argc, argv));
    int n_pos = 0;
    while (n_pos < argc && pos[n_pos]) REQUIRE(from_argv(pos[n_pos++], argc, argv));
    REQUIRE(spec == &spec_many ? n_pos >= 1 : n_pos <= 1);
  }
  free(buf);
  return 0;
}
