/*
 * data.c — `sheaf data stats` and `sheaf data binarize`: statistics of
 * treebanks, PTB trees and token files, and CoNLL-U -> PTB s-expressions
 * (binary or child-sum trees) so other systems run on the very same trees.
 * Safetensors listings are delegated to data_weights.c.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/buf.h"
#include "base/file.h"
#include "cli.h"
#include "io/binarize.h"
#include "io/conllu.h"
#include "io/ptb.h"
#include "io/seqs.h"
#include "io/stats.h"

_Static_assert(SH_TB_MAX_DEPTH == 10000, "usage_binarize and docs/DATA.md state the limit");

static const char usage_data[] =
    "usage: sheaf data <command> [args]\n"
    "\n"
    "commands:\n"
    "  stats FILE      statistics of a CoNLL-U treebank, PTB trees, token lines,\n"
    "                  or a safetensors weights file\n"
    "  binarize FILE   CoNLL-U dependency trees -> PTB s-expressions, one per line\n"
    "\n"
    "Run 'sheaf data <command> --help' for its options.\n";

static const char usage_stats[] =
    "usage: sheaf data stats FILE [--format conllu|ptb|tokens|safetensors]\n"
    "                             [--vocab VOCAB] [--ids | --words]\n"
    "\n"
    "Prints counts and length/depth statistics (count, min, mean, median, p90,\n"
    "max; percentiles by nearest rank) of FILE ('-' = standard input):\n"
    "  conllu       sentences, words, skipped multiword/empty-node lines,\n"
    "               non-projective trees, sentence length, dependency depth\n"
    "               (root = 1), depth of the binarized trees and their histogram\n"
    "  ptb          trees, nodes, leaves, words per tree, tree depth (a leaf is 1)\n"
    "               and its histogram\n"
    "  tokens       one sequence per line (empty lines skipped): sequences,\n"
    "               tokens, vocabulary size, tokens per sequence\n"
    "  safetensors  every tensor's name, dtype, shape, size and count of non-finite\n"
    "               values (NaN, infinities: 'sheaf run' refuses them)\n"
    "\n"
    "The format comes from the extension unless --format is given: .conllu;\n"
    ".ptb .tree .trees; .txt when its first non-blank character is '('; .safetensors;\n"
    "anything else is read as tokens. Standard input ('-'), a pipe or a FIFO is read\n"
    "once, up to SHEAF_MAX_INPUT bytes (default 1 GiB), and recognized by content:\n"
    "safetensors, CoNLL-U (10 TAB-separated fields), PTB (starts with '('), else tokens.\n"
    "\n"
    "options:\n";

static const char usage_binarize[] =
    "usage: sheaf data binarize FILE.conllu [-o OUT] [--child-sum]\n"
    "\n"
    "Writes each dependency tree of FILE ('-' = standard input) as a PTB\n"
    "s-expression, one per line, to OUT (written whole or not at all) or to\n"
    "standard output.\n"
    "\n"
    "Binary trees (default): each word is a leaf '(UPOS word)'; a head absorbs\n"
    "its dependents one at a time, right ones nearest first, then left ones\n"
    "nearest first; each absorption is a node '(DEPREL left right)' labelled\n"
    "with the absorbed dependent's relation. n words give 2n-1 nodes.\n"
    "  e.g. 'the cat sat' -> (nsubj (det (DET the) (NOUN cat)) (VERB sat))\n"
    "\n"
    "--child-sum: one node per word, '(DEPREL word child ...)', its dependents\n"
    "in sentence order (a word without dependents is '(DEPREL word)').\n"
    "  e.g. 'the cat sat' -> (root sat (nsubj cat (det the)))\n"
    "\n"
    "Trees deeper than 10000 levels are refused, as every reader refuses them: a\n"
    "head with many dependents binarizes far deeper than its dependency tree (a\n"
    "head with 99,999 dependents: 100,000 levels); 'data stats' shows the depths.\n"
    "\n"
    "In words and labels '(' and ')' are written -LRB- and -RRB-, whitespace as\n"
    "U+00A0 (no-break space).\n"
    "\n"
    "options:\n";

/* ---------------------------------------------------------------- helpers */

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int input_error(sheaf_ctx *ctx) {
  cli_error("%s", sheaf_ctx_last_error(ctx));
  sheaf_ctx_free(ctx);
  return CLI_FAIL;
}

/* stdout must have taken everything: a full disk or closed pipe is an error. */
static int finish_stdout(void) {
  if (fflush(stdout) != 0 || ferror(stdout)) {
    cli_error("writing to standard output failed: %s", strerror(errno));
    return CLI_FAIL;
  }
  return CLI_OK;
}

static void print_dist_header(void) {
  printf("%-28s %9s %7s %9s %7s %7s %7s\n", "", "count", "min", "mean", "median", "p90",
         "max");
}

static void print_dist(const char *what, const sh_dist *d) {
  printf("%-28s %9zu %7lld %9.2f %7lld %7lld %7lld\n", what, d->count, (long long)d->min,
         d->mean, (long long)d->median, (long long)d->p90, (long long)d->max);
}

/* One line per value: value, count, share, bar. Every value from min to max
 * when that range is short, else only the values that occur. */
static void print_histogram(const char *title, const char *unit, const sh_dist *d) {
  if (d->count == 0) return;
  printf("\n%s (%s: count)\n", title, unit);
  int64_t top = 0;
  for (size_t i = 0; i < d->n_bins; i++)
    if (d->bins[i].count > top) top = d->bins[i].count;
  bool dense = d->max - d->min < 200;
  size_t b = 0;
  for (int64_t v = d->min; v <= d->max; v++) {
    int64_t c = 0;
    if (b < d->n_bins && d->bins[b].value == v) c = d->bins[b++].count;
    else if (!dense) {
      if (b >= d->n_bins) break;
      v = d->bins[b].value - 1;
      continue;
    }
    char bar[52];
    int w = (int)((c * 50 + top - 1) / top);
    memset(bar, '#', (size_t)w);
    bar[w] = '\0';
    printf("%6lld %9lld %6.2f%%%s%s\n", (long long)v, (long long)c,
           100.0 * (double)c / (double)d->count, w ? "  " : "", bar);
  }
}

/* ------------------------------------------------------------------ stats */

typedef enum { FMT_NONE, FMT_CONLLU, FMT_PTB, FMT_TOKENS, FMT_SAFETENSORS } data_format;

/* By extension; a safetensors file under another name by its header; a
 * .txt file is PTB when its first non-blank byte is '('.
 * Standard input, a pipe or a FIFO without an extension (held: read once
 * into memory) by its content (cli_sniff). */
static data_format detect_format(const char *path, bool held) {
  if (ends_with(path, ".conllu")) return FMT_CONLLU;
  if (ends_with(path, ".safetensors")) return FMT_SAFETENSORS;
  if (ends_with(path, ".ptb") || ends_with(path, ".tree") || ends_with(path, ".trees"))
    return FMT_PTB;
  if (held && !ends_with(path, ".txt")) {
    cli_sniff_kind k = cli_sniff(path);
    return k == CLI_SNIFF_CONLLU ? FMT_CONLLU : k == CLI_SNIFF_PTB ? FMT_PTB
           : k == CLI_SNIFF_SAFETENSORS ? FMT_SAFETENSORS : FMT_TOKENS;
  }
  if (cli_sniff(path) == CLI_SNIFF_SAFETENSORS) return FMT_SAFETENSORS; /* any other name */
  if (!ends_with(path, ".txt")) return FMT_TOKENS;
  static char b[1 << 16]; /* the input is read once: its first bytes from where it is kept */
  size_t n, i = 0;
  sh_file_peek(path, b, sizeof b, &n);
  while (i < n && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r')) i++;
  return i < n && b[i] == '(' ? FMT_PTB : FMT_TOKENS;
}

static int stats_conllu(sheaf_ctx *ctx, const char *path) {
  sh_depbank db;
  sh_depbank_init(&db, ctx);
  sh_dep_stats s;
  sheaf_status st = sh_conllu_read_file(&db, path);
  if (st == SHEAF_OK) st = sh_dep_stats_compute(&db, &s);
  sh_depbank_free(&db);
  if (st != SHEAF_OK) return input_error(ctx);
  printf("file                  %s\n", path);
  printf("format                conllu (dependency trees)\n");
  printf("sentences             %lld\n", (long long)s.sentences);
  printf("words                 %lld\n", (long long)s.words);
  printf("skipped lines         %lld multiword tokens, %lld empty nodes\n",
         (long long)s.multiword, (long long)s.empty_nodes);
  printf("non-projective trees  %lld (%.2f%%): %lld with crossing arcs, %lld only with an "
         "arc over the root\n",
         (long long)s.nonprojective,
         s.sentences ? 100.0 * (double)s.nonprojective / (double)s.sentences : 0.0,
         (long long)s.crossing, (long long)(s.nonprojective - s.crossing));
  if (s.bin_too_deep)
    printf("too deep to binarize  %lld (binarized deeper than %d levels, the tree depth limit: "
           "'binarize' and the binary models refuse them)\n",
           (long long)s.bin_too_deep, SH_TB_MAX_DEPTH);
  printf("\n");
  print_dist_header();
  print_dist("sentence length (words)", &s.length);
  print_dist("dependency depth (root=1)", &s.depth);
  print_dist("binarized depth (leaf=1)", &s.bin_depth);
  print_histogram("binarized depth distribution", "depth", &s.bin_depth);
  sh_dep_stats_free(ctx, &s);
  sheaf_ctx_free(ctx);
  return finish_stdout();
}

static int stats_ptb(sheaf_ctx *ctx, const char *path) {
  sh_treebank tb;
  sh_tb_init(&tb, ctx);
  sh_tb_stats s;
  sheaf_status st = sh_ptb_read_file(&tb, path);
  if (st == SHEAF_OK) st = sh_tb_stats_compute(&tb, &s);
  int64_t vocab = sh_vocab_size(&tb.words);
  sh_tb_free(&tb);
  if (st != SHEAF_OK) return input_error(ctx);
  printf("file                  %s\n", path);
  printf("format                ptb (s-expression trees)\n");
  printf("trees                 %lld\n", (long long)s.trees);
  printf("nodes                 %lld\n", (long long)s.nodes);
  printf("leaves                %lld\n", (long long)s.leaves);
  printf("words                 %lld (%lld distinct)\n", (long long)s.words, (long long)vocab);
  printf("labels                %lld distinct\n", (long long)s.labels);
  printf("\n");
  print_dist_header();
  print_dist("length (words per tree)", &s.length);
  print_dist("depth (leaf=1)", &s.depth);
  print_histogram("depth distribution", "depth", &s.depth);
  sh_tb_stats_free(ctx, &s);
  sheaf_ctx_free(ctx);
  return finish_stdout();
}

static int stats_tokens(sheaf_ctx *ctx, const char *path, const char *vocab_path,
                        sh_seqs_mode mode) {
  sh_vocab vocab;
  sh_vocab_init(&vocab, ctx);
  sh_seqs seqs;
  sh_seqs_init(&seqs, ctx);
  sh_seq_stats s;
  sheaf_status st = SHEAF_OK;
  if (vocab_path) st = sh_vocab_load_file(&vocab, vocab_path);
  sh_seqs_options opt = {.mode = mode, .vocab = vocab_path ? &vocab : NULL};
  if (st == SHEAF_OK) st = sh_seqs_read_file(&seqs, path, &opt);
  if (st == SHEAF_OK) st = sh_seq_stats_compute(&seqs, &s);
  sh_seqs_mode got = seqs.mode;
  int64_t vocab_size = vocab_path ? sh_vocab_size(&vocab)
                       : got == SH_SEQS_WORDS ? sh_vocab_size(&seqs.vocab)
                                              : (int64_t)seqs.max_id + 1;
  sh_seqs_free(&seqs);
  sh_vocab_free(&vocab);
  if (st != SHEAF_OK) return input_error(ctx);
  printf("file                  %s\n", path);
  printf("format                tokens (%s, one sequence per line)\n",
         got == SH_SEQS_IDS ? "token ids" : got == SH_SEQS_WORDS ? "words" : "empty");
  printf("sequences             %lld\n", (long long)s.sequences);
  printf("tokens                %lld\n", (long long)s.tokens);
  printf("empty lines skipped   %lld\n", (long long)s.empty_lines);
  if (vocab_path)
    printf("vocabulary            %lld tokens (%s), %lld used\n", (long long)vocab_size,
           vocab_path, (long long)s.distinct);
  else if (got == SH_SEQS_IDS)
    printf("vocabulary            %lld ids (0..max id), %lld used\n", (long long)vocab_size,
           (long long)s.distinct);
  else
    printf("vocabulary            %lld distinct words\n", (long long)vocab_size);
  if (vocab_path && got == SH_SEQS_WORDS)
    printf("unknown -> <unk>      %lld\n", (long long)s.unk);
  printf("\n");
  print_dist_header();
  print_dist("length (tokens per sequence)", &s.length);
  sh_seq_stats_free(ctx, &s);
  sheaf_ctx_free(ctx);
  return finish_stdout();
}

static const char *const format_names[] = {"conllu", "ptb", "tokens", "safetensors", NULL};
static const int format_values[] = {FMT_CONLLU, FMT_PTB, FMT_TOKENS, FMT_SAFETENSORS};

typedef struct stats_opts {
  const char *vocab;
  int format; /* data_format; FMT_NONE: by the extension or the content */
  bool ids, words;
} stats_opts;

#define AT(field) .at = offsetof(stats_opts, field)
static const cli_flag f_format = {"--format", CLI_FLAG_ENUM, AT(format), .choices = format_names,
                                  .values = format_values, .noun = "format", .arg = "F",
                                  .help = "conllu, ptb, tokens or safetensors"};
static const cli_flag f_vocab = {"--vocab", CLI_FLAG_IN, AT(vocab), .arg = "VOCAB",
                                 .help = "(tokens) map words through VOCAB, one token per line,\n"
                                         "id = line index; unknown words become <unk> if VOCAB has it"};
static const cli_flag f_ids = {"--ids", CLI_FLAG_BOOL, AT(ids), .excludes = "--words",
                               .why = "the tokens are one or the other",
                               .help = "(tokens) the tokens are ids (non-negative integers)"};
static const cli_flag f_words = {"--words", CLI_FLAG_BOOL, AT(words),
                                 .help = "(tokens) the tokens are words\n"
                                         "default: ids when the first token is a number"};
#undef AT
static const cli_flag *const stats_flags[] = {&f_format, &f_vocab, &f_ids, &f_words};
static const cli_flags stats_spec = {.cmd = "data stats", CLI_FLAGS_LIST(stats_flags), .pos_noun = "file",
                                     .usage = usage_stats, .missing = "FILE"};

static int data_stats(int argc, char **argv) {
  stats_opts o = {.format = FMT_NONE};
  const char *path;
  int rc = cli_flags_parse(&stats_spec, argc, argv, &o, &path);
  if (rc) return rc < 0 ? CLI_OK : rc;
  const char *vocab = o.vocab;
  sh_seqs_mode mode = o.ids ? SH_SEQS_IDS : o.words ? SH_SEQS_WORDS : SH_SEQS_AUTO;
  data_format fmt = (data_format)o.format;
  const cli_path file = {"FILE", path};
  if (cli_flags_check_files(&stats_spec, &o, &file, 1) != CLI_OK) return CLI_USAGE;
  sheaf_ctx *ctx = cli_ctx(1);
  if (!ctx) return CLI_USAGE;
  /* standard input, a pipe or a FIFO: read once ("-" is named <stdin>) */
  bool held = false;
  if (cli_hold_input(ctx, path, false, &path, &held) != CLI_OK ||
      (vocab && cli_hold_input(ctx, vocab, false, &vocab, NULL) != CLI_OK)) {
    sheaf_ctx_free(ctx);
    return CLI_FAIL;
  }
  if (fmt == FMT_NONE) fmt = detect_format(path, held);
  if (fmt != FMT_TOKENS && (vocab || mode != SH_SEQS_AUTO)) {
    cli_error("data stats: %s applies to token files only",
              vocab ? "--vocab" : mode == SH_SEQS_IDS ? "--ids" : "--words");
    sheaf_ctx_free(ctx);
    return CLI_USAGE;
  }
  switch (fmt) {
  case FMT_CONLLU: return stats_conllu(ctx, path);
  case FMT_PTB: return stats_ptb(ctx, path);
  case FMT_TOKENS: return stats_tokens(ctx, path, vocab, mode);
  case FMT_SAFETENSORS: {
    rc = cli_data_stats_weights(ctx, path, stdout);
    sheaf_ctx_free(ctx);
    return rc == CLI_OK ? finish_stdout() : rc;
  }
  case FMT_NONE: break;
  }
  sheaf_ctx_free(ctx);
  return CLI_FAIL;
}

/* --------------------------------------------------------------- binarize */

typedef struct binarize_opts {
  const char *out;
  bool child_sum;
} binarize_opts;

#define AT(field) .at = offsetof(binarize_opts, field)
static const cli_flag f_output = {"-o", CLI_FLAG_OUT, AT(out), .alias = "--output", .arg = "OUT",
                                  .help = "write to OUT ('-' = standard output)"};
static const cli_flag f_child_sum = {"--child-sum", CLI_FLAG_BOOL, AT(child_sum),
                                     .help = "child-sum trees instead of binary ones"};
#undef AT
static const cli_flag *const binarize_flags[] = {&f_output, &f_child_sum};
static const cli_flags binarize_spec = {.cmd = "data binarize", CLI_FLAGS_LIST(binarize_flags),
                                        .pos_noun = "file", .usage = usage_binarize, .missing = "FILE.conllu"};

static int data_binarize(int argc, char **argv) {
  binarize_opts bo = {.out = "-"};
  const char *path;
  int rc = cli_flags_parse(&binarize_spec, argc, argv, &bo, &path);
  if (rc) return rc < 0 ? CLI_OK : rc;
  const char *out = bo.out;
  bool child_sum = bo.child_sum;
  const cli_path file = {"FILE", path};
  if (cli_flags_check_files(&binarize_spec, &bo, &file, 1) != CLI_OK) return CLI_USAGE;
  sheaf_ctx *ctx = cli_ctx(1);
  if (!ctx) return CLI_USAGE;
  /* the output first (a folder or an unwritable path fails before any work);
   * a regular file is replaced only when the whole output is written */
  cli_outs files = {0};
  sh_out *o = cli_out_open(&files, ctx, out, SH_OUT_DASH_STDOUT);
  if (!o || cli_hold_input(ctx, path, false, &path, NULL) != CLI_OK) {
    cli_outs_abort(&files);
    sheaf_ctx_free(ctx);
    return CLI_FAIL;
  }
  sh_depbank db;
  sh_depbank_init(&db, ctx);
  sh_treebank tb;
  sh_tb_init(&tb, ctx);
  sh_buf buf;
  sh_buf_init(&buf, ctx);
  sheaf_status st = sh_conllu_read_file(&db, path);
  if (st == SHEAF_OK) st = child_sum ? sh_childsum(&db, &tb) : sh_binarize(&db, &tb);
  if (st == SHEAF_OK) st = sh_ptb_write(&tb, &buf);
  sh_tb_free(&tb);
  sh_depbank_free(&db);
  if (st != SHEAF_OK) {
    cli_outs_abort(&files);
    sh_buf_free(&buf);
    return input_error(ctx);
  }
  rc = CLI_OK;
  if (buf.len && fwrite(buf.data, 1, buf.len, o->f) != buf.len) {
    cli_error("%s: write failed: %s", o->is_stdout ? "standard output" : out, strerror(errno));
    cli_outs_abort(&files);
    rc = CLI_FAIL;
  } else {
    rc = cli_outs_commit(&files);
  }
  sh_buf_free(&buf);
  sheaf_ctx_free(ctx);
  return rc;
}

int cli_data(int argc, char **argv) {
  if (argc < 2) {
    fputs(usage_data, stderr);
    return CLI_USAGE;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
    fputs(usage_data, stdout);
    return CLI_OK;
  }
  if (!strcmp(cmd, "stats")) return data_stats(argc - 1, argv + 1);
  if (!strcmp(cmd, "binarize")) return data_binarize(argc - 1, argv + 1);
  cli_error("data: unknown command '%s' (expected stats or binarize)", cmd);
  return CLI_USAGE;
}
