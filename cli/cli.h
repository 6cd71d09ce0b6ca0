/*
 * cli.h — declarations shared by the files of the `sheaf` command-line tool.
 * Exit codes: 0 success, 1 the command failed (bad input file, I/O, a write
 * to standard output or to an output file that failed), 2 usage error
 * (unknown subcommand or flag, a flag's bad or missing value, an output
 * file that is one of the inputs). Errors go to stderr as
 * "sheaf: error: <message>"; results go to stdout (or -o FILE).
 *
 * Files: every input is opened once (standard input, pipes and FIFOs are
 * read into memory: cli_hold_input); every output goes through sh_out
 * (base/file.h) and cli_outs: a regular file is replaced only when the
 * command succeeds, a device or FIFO is written into, never replaced.
 */
#ifndef SHEAF_CLI_H
#define SHEAF_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "base/file.h"
#include "sheaf.h"

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* Prints "sheaf: error: <formatted>" to stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Creates the context used by a subcommand; on failure prints the reason and
 * returns NULL. threads 0 = all CPUs. The library's warnings (a trace that
 * could not be written when its graph was freed) go to stderr as
 * "sheaf: warning: ..." and are counted (cli_warnings). */
sheaf_ctx *cli_ctx(int threads);
int cli_warnings(void);

/* ----------------------------------------------------------------- files */

/* A flag and its file ("-": standard input, or standard output for an
 * output); a NULL path is skipped. */
typedef struct cli_path {
  const char *flag, *path;
} cli_path;
/* Before any work: an output that is the same file (st_dev and st_ino) as
 * an input, or two outputs that are the same file, is refused with a
 * message naming both (returns CLI_USAGE); else CLI_OK. Outputs that are
 * not regular files (/dev/null, a FIFO) are never refused. */
int cli_check_paths(const cli_path *ins, int n_in, const cli_path *outs, int n_out);

/* Reads an input that cannot be opened twice ("-" = standard input, a pipe,
 * a FIFO, a device) once (sh_file_hold): *name is what the readers open
 * afterwards: the path, "<stdin>" for "-". With `sniff`, a held input whose
 * name lacks a known extension and whose bytes read as CoNLL-U gets
 * ".conllu" appended (readers choose the format by extension). *held (may be NULL):
 * whether it was read into memory. Returns CLI_OK, or CLI_FAIL after
 * printing the error. */
int cli_hold_input(sheaf_ctx *ctx, const char *path, bool sniff, const char **name, bool *held);

/* Opens a weights file (safetensors) once, by the name cli_hold_input
 * gave: bytes held in memory (standard input, a pipe, a FIFO: read once)
 * are parsed where they are, anything else is mapped (sheaf_st_open). The
 * open file then goes to whatever reads the weights (the binder's
 * weights_file, sheaf_model_load_st), so nothing opens or copies it again.
 * SHEAF_OK, or the error as the context's last error (not printed). */
sheaf_status cli_open_weights(sheaf_ctx *ctx, const char *name, sheaf_st_file **out);

/* The format of an input by its first bytes (sh_file_peek): safetensors
 * when byte 8 is '{' after a header length that fits, CoNLL-U when the
 * first line that is not blank or a '#' comment starts with a digit and has
 * 10 TAB-separated fields, PTB when the first non-blank byte is '(',
 * otherwise tokens. */
typedef enum { CLI_SNIFF_TOKENS, CLI_SNIFF_CONLLU, CLI_SNIFF_PTB, CLI_SNIFF_SAFETENSORS } cli_sniff_kind;
cli_sniff_kind cli_sniff(const char *path);

/* The files a command writes, opened (sh_out_open) before the work and
 * committed together at the end: devices and FIFOs first, then the
 * renames, so that a late failure (a full device) leaves every regular
 * file as it was; or all abandoned (sh_out_abort) on a failure. */
#define CLI_MAX_OUTS 4
typedef struct cli_outs {
  sh_out o[CLI_MAX_OUTS];
  int n;
} cli_outs;
/* NULL after printing the error. */
sh_out *cli_out_open(cli_outs *s, sheaf_ctx *ctx, const char *path, int flags);
/* CLI_OK, or CLI_FAIL after printing the error (the rest abandoned). */
int cli_outs_commit(cli_outs *s);
/* A staged output (SH_OUT_STAGE) that the library writes by path (the
 * trace, when its graph is freed): CLI_OK when it was written (not empty)
 * and no warning came since cli_warnings() was warnings_before; else
 * prints that `what` was not written and returns CLI_FAIL. */
int cli_check_staged(const sh_out *f, const char *what, int warnings_before);
void cli_outs_abort(cli_outs *s);

/* ----------------------------------------------------------------- flags */

/* A command's flags as a table (cli/flags.c): one parser, one set of error
 * texts and one help layout for every command. Destinations are offsets
 * into the command's options struct (offsetof), so a table is static data
 * and entries can be shared between commands (cli_run_flag). Every error
 * about a flag reads "CMD: FLAG...": "train: --epochs: expected an integer
 * in 1..1000000, got 'x'", "tune: --out needs a value", "data stats:
 * unknown option '--x' (see 'sheaf data stats --help')". */
typedef enum cli_flag_kind {
  CLI_FLAG_BOOL,   /* no value: sets a bool */
  CLI_FLAG_INT,    /* long long in lo..hi */
  CLI_FLAG_U64,    /* uint64_t: a non-negative decimal integer (a seed) */
  CLI_FLAG_FLOAT,  /* double in flo..fhi */
  CLI_FLAG_STRING, /* const char *, not empty (a name, a folder) */
  CLI_FLAG_IN,     /* const char *: an input file ('-' = standard input) */
  CLI_FLAG_OUT,    /* const char *: an output file ('-' = standard output) */
  CLI_FLAG_ENUM,   /* int: values[k] (or k) for the k-th of choices */
  CLI_FLAG_CUSTOM, /* parse(s, f, value, opts), which reports its own errors
                    * (cli_flag_error); a repeatable flag appends */
} cli_flag_kind;

/* `given`: the offset of a bool the parser sets when the flag appears,
 * plus one (0: none). */
#define CLI_GIVEN(type, field) (offsetof(type, field) + 1)

typedef struct cli_flags cli_flags;
typedef struct cli_flag cli_flag;
struct cli_flag {
  const char *name; /* "--data"; a value follows as "--data V" or "--data=V" */
  cli_flag_kind kind;
  size_t at;    /* offsetof the destination in the options struct */
  size_t given; /* CLI_GIVEN(...) or 0 */
  long long lo, hi;
  double flo, fhi;
  const char *const *choices; /* ENUM: NULL-terminated */
  const int *values;          /* ENUM: the int stored for each choice (NULL: its index) */
  /* ENUM errors: "FLAG: unknown NOUN 'V' (expected A, B or C)", or without
   * a noun "FLAG: expected A, B or C, got 'V'" */
  const char *noun;
  bool (*parse)(const cli_flags *s, const cli_flag *f, const char *v, void *opts);
  const char *arg;   /* help: the value's name ("FILE"); NULL for BOOL */
  const char *help;  /* help: one or more lines ('\n'), the later ones indented */
  const char *alias; /* another spelling ("-o" for "--output"), or NULL */
  /* the name of a flag of the same table that cannot be given with this
   * one: "CMD: NAME and EXCLUDES exclude each other (WHY)" */
  const char *excludes, *why;
};

struct cli_flags {
  const char *cmd; /* the error prefix: "run", "data stats" */
  const char *see; /* named by an unknown option (NULL: "sheaf CMD --help") */
  const cli_flag *const *flags;
  int n;
  const char *pos_noun;          /* what a positional argument is: "model" */
  const char *usage, *usage_end; /* help: before and after the list of flags */
  int max_pos;                   /* positional arguments taken: 0 one, -1 any number */
  /* without a positional argument: NULL fine; "" the usage and the flags
   * to standard error; else "CMD: missing MISSING (see 'sheaf CMD --help')";
   * both exit 2 */
  const char *missing;
};
/* .flags and .n of a cli_flags from an array of entries. */
#define CLI_FLAGS_LIST(array) .flags = (array), .n = (int)(sizeof(array) / sizeof(array)[0])

/* Parses argv[1..] into opts by the table (the flags that are not given
 * keep what opts held). The positional arguments (not starting with '-';
 * "-"; everything after "--") go to pos[] in order, the rest of it NULL:
 * pos has room for one (max_pos 0: a second is an error) or for argc
 * (max_pos -1); none, when the table says `missing`, is an error. -h or
 * --help anywhere before "--" prints usage, the flags' list
 * (cli_flags_help) and usage_end to standard output: returns -1.
 * Returns CLI_OK, or CLI_USAGE after printing an error that names the
 * flag. */
int cli_flags_parse(const cli_flags *s, int argc, char **argv, void *opts, const char **pos);
/* Stores v (NULL for a BOOL) into opts by f's kind, as the parser does;
 * false after printing the error (a CUSTOM flag's parse may use it). */
bool cli_flag_store(const cli_flags *s, const cli_flag *f, const char *v, void *opts);
/* A decimal integer in [lo, hi] (part of a CUSTOM flag's value); else
 * reports "CMD: FLAG: expected an integer in LO..HI, got 'V'", false. */
bool cli_flag_int(const cli_flags *s, const cli_flag *f, const char *v, long long lo, long long hi,
                  long long *out);
/* Prints "sheaf: error: CMD: FLAG: <formatted>". */
void cli_flag_error(const cli_flags *s, const cli_flag *f, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The list of flags as --help shows it: "  NAME ARG   HELP", then -h. */
void cli_flags_help(FILE *f, const cli_flags *s);
/* Before any work, the files of the table's IN and OUT flags (and `extra`
 * inputs: a positional file): at most one input may be standard input
 * ("CMD: A and B cannot both be standard input ('-')"), and
 * cli_check_paths. CLI_OK or CLI_USAGE (printed). */
int cli_flags_check_files(const cli_flags *s, const void *opts, const cli_path *extra, int n_extra);

/* --threads' entry (run, bench, train) into a long long field of TYPE. */
#define CLI_FLAG_THREADS(type, field)                                                  \
  {"--threads", CLI_FLAG_INT, offsetof(type, field), .lo = 1, .hi = 1024, .arg = "T", \
   .help = "threads (default: all CPUs)"}

/* --isa's entry (sheaf compile, sheaf tune) into an int field of TYPE that
 * holds a sheaf_isa: scalar, avx2 or avx512, not capped at the host's
 * (code for another machine may be generated). */
extern const char *const cli_isa_names[];
extern const int cli_isa_values[];
#define CLI_FLAG_ISA(type, field, text)                                                            \
  {"--isa", CLI_FLAG_ENUM, offsetof(type, field), .choices = cli_isa_names, .values = cli_isa_values, \
   .noun = "instruction set", .arg = "LEVEL", .help = text}

/* What `sheaf run` of a built-in model, `sheaf bench` and `sheaf run
 * MODEL.sf` share: the first member of each one's options struct, so that
 * the entries of cli_run_flag (offsets into this struct) serve them all. */
typedef struct cli_run_opts {
  const char *data, *weights, *vocab, *out, *trace, *save_weights;
  long long batch, threads, limit, max_vocab;
  uint64_t seed;
  bool seed_given, stats, allow_nonfinite;
  int policy;   /* sheaf_policy */
  int parallel; /* sheaf_parallel */
} cli_run_opts;
enum {
  CLI_RUN_DATA, CLI_RUN_WEIGHTS, CLI_RUN_SEED, CLI_RUN_BATCH, CLI_RUN_THREADS, CLI_RUN_POLICY,
  CLI_RUN_PARALLEL, CLI_RUN_LIMIT, CLI_RUN_MAX_VOCAB, CLI_RUN_ALLOW_NONFINITE,
  CLI_RUN_SAVE_WEIGHTS, CLI_RUN_TRACE, CLI_RUN_STATS, CLI_RUN_N
};
extern const cli_flag cli_run_flag[CLI_RUN_N];
/* The defaults: batch 64, policy sheaf, parallel auto, the rest zero. */
void cli_run_opts_init(cli_run_opts *c);
/* After parsing: a flag that reads one graph (--trace, or --stats when
 * `stats_one_graph`) with --parallel batches is an error (CLI_USAGE,
 * printed); else CLI_OK. (--seed with --weights: the table's excludes.) */
int cli_run_check(const char *cmd, const cli_run_opts *c, bool stats_one_graph);

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
/* `sheaf compile FILE.sf --emit-c DIR | --emit-ir` (compile.c). */
int cli_compile(int argc, char **argv);
/* `sheaf tune FILE.sf [--size N=V,...] [--data FILE] ...` (tune.c). */
int cli_tune(int argc, char **argv);

#endif
