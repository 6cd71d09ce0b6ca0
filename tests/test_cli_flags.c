/*
 * test_cli_flags.c — the commands' flag tables (cli/flags.c): every flag
 * that the run commands' --help lists is one the parser takes (and the
 * other way round for the flags the tests know), a flag that `sheaf run
 * MODEL`, `sheaf bench` and `sheaf run MODEL.sf` share gives the same error
 * text in each, both spellings of a value ("--f V", "--f=V") mean the same,
 * the files the flags name are checked from the table (standard input
 * once); every flag of train, tune, compile, check and data gives its one
 * "CMD: FLAG: ..." error for a bad or missing value, and -h/--help wins
 * anywhere. (The --help texts themselves: test_cli_help.c.)
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define SMALL "tests/data/small.conllu"
#define SF "examples/treefc.sf"

static char g_out[1 << 16];

#define sheaf(...) th_sheaf(g_out, sizeof g_out, __VA_ARGS__)

/* The flags a --help text lists (lines "  --name ..."), space-separated. */
static int help_flags(const char *help, char names[][32], int cap) {
  int n = 0;
  for (const char *l = help; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    if (strncmp(l, "  --", 4) != 0 || n == cap) continue;
    size_t k = 2;
    while (l[k] && l[k] != ' ' && l[k] != '\n' && k - 2 < 31) k++;
    snprintf(names[n++], 32, "%.*s", (int)(k - 2), l + 2);
  }
  return n;
}

/* --help lists every flag in want, none twice, and the parser takes each
 * flag it lists (never an unknown option). */
static void check_help_complete(const char *cmd, const char *const *want, int n_want) {
  REQUIRE(sheaf("%s --help", cmd) == 0);
  static char help[1 << 16];
  snprintf(help, sizeof help, "%s", g_out);
  char names[64][32];
  int n = help_flags(help, names, 64);
  CHECK(n >= n_want);
  for (int i = 0; i < n_want; i++) {
    bool listed = false;
    for (int k = 0; k < n; k++) listed |= !strcmp(names[k], want[i]);
    if (!CHECK(listed)) fprintf(stderr, "  '%s --help' does not list %s\n", cmd, want[i]);
  }
  for (int k = 0; k < n; k++) {
    for (int j = 0; j < k; j++)
      if (!CHECK(strcmp(names[j], names[k]) != 0)) fprintf(stderr, "  %s listed twice\n", names[k]);
    /* a value flag takes x1; then x2 and x3 are one positional too many */
    CHECK_EQ_INT(sheaf("%s --data %s %s x1 x2 x3", cmd, SMALL, names[k]), 2);
    if (!CHECK(strstr(g_out, "unknown option") == NULL))
      fprintf(stderr, "  '%s' lists %s but does not take it:\n%s\n", cmd, names[k], g_out);
  }
}

TEST(cli_flags_help_lists_every_flag) {
  if (!th_sheaf_bin()) return;
  static const char *const run[] = {"--data", "--hidden", "--embed", "--batch", "--threads", "--policy",
                                    "--parallel", "--seed", "--weights", "--save-weights", "--vocab",
                                    "--limit", "--mv-vocab", "--max-vocab", "--allow-nonfinite", "--out",
                                    "--trace", "--stats"};
  static const char *const bench[] = {"--data", "--hidden", "--embed", "--batch", "--threads",
                                      "--policy", "--repeat", "--parallel", "--seed", "--weights",
                                      "--vocab", "--limit", "--mv-vocab", "--max-vocab",
                                      "--allow-nonfinite"};
  static const char *const lang[] = {"--data", "--weights", "--seed", "--vocab", "--size", "--max-vocab",
                                     "--allow-nonfinite", "--batch", "--threads", "--parallel",
                                     "--policy", "--out", "--trace", "--tuning", "--limit",
                                     "--save-weights", "--stats", "--format"};
  check_help_complete("run", run, (int)(sizeof run / sizeof run[0]));
  check_help_complete("bench", bench, (int)(sizeof bench / sizeof bench[0]));
  check_help_complete("run " SF, lang, (int)(sizeof lang / sizeof lang[0]));
  /* what the help says is not a flag is not one */
  CHECK_EQ_INT(sheaf("bench treelstm --data " SMALL " --stats"), 2);
  CHECK_CONTAINS(g_out, "bench: unknown option '--stats' (see 'sheaf bench --help')");
  CHECK_EQ_INT(sheaf("run " SF " --data " SMALL " --mv-vocab 3"), 2);
  CHECK_CONTAINS(g_out, "run: unknown option '--mv-vocab' (see 'sheaf run MODEL.sf --help')");
}

/* The shared flags: one error text whichever command reads them. */
TEST(cli_flags_shared_errors_alike) {
  if (!th_sheaf_bin()) return;
  static const struct {
    const char *flag, *want;
  } cases[] = {
      {"--batch 0", "--batch: expected an integer in 1..2147483647, got '0'\n"},
      {"--batch=x", "--batch: expected an integer in 1..2147483647, got 'x'\n"},
      {"--limit -1", "--limit: expected an integer in 1..2147483647, got '-1'\n"},
      {"--max-vocab 0", "--max-vocab: expected an integer in 1..2147483645, got '0'\n"},
      {"--seed -1", "--seed: expected a non-negative integer, got '-1'\n"},
      {"--seed 1x", "--seed: expected a non-negative integer, got '1x'\n"},
      {"--policy fast",
       "--policy: unknown policy 'fast' (expected sheaf, none, depth or agenda)\n"},
      {"--parallel=fast", "--parallel: unknown mode 'fast' (expected auto, batches or kernels)\n"},
      {"--weights", "--weights needs a value\n"},
      {"--weights=", "--weights needs a value\n"},
      {"--allow-nonfinite=1", "(see 'sheaf "},
  };
  const char *cmds[] = {"run treelstm --data " SMALL, "bench treelstm --data " SMALL,
                        "run " SF " --data " SMALL};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (size_t c = 0; c < 3; c++) {
      int rc = sheaf("%s %s", cmds[c], cases[i].flag);
      char want[256]; /* "sheaf: error: CMD: --flag..." (CMD: the first word of cmds[c]) */
      if (cases[i].want[0] == '-')
        snprintf(want, sizeof want, "sheaf: error: %.*s: %s", (int)strcspn(cmds[c], " "), cmds[c], cases[i].want);
      else snprintf(want, sizeof want, "%s", cases[i].want);
      if (!CHECK_EQ_INT(rc, 2) || !strstr(g_out, want)) fprintf(stderr, "  %s %s:\n%s\n", cmds[c], cases[i].flag, g_out);
      CHECK_CONTAINS(g_out, want);
    }
  /* --threads: each command's own range */
  CHECK_EQ_INT(sheaf("run treelstm --data " SMALL " --threads 1025"), 2);
  CHECK_CONTAINS(g_out, "--threads: expected an integer in 1..1024, got '1025'");
  CHECK_EQ_INT(sheaf("run " SF " --data " SMALL " --threads 65"), 2);
  CHECK_CONTAINS(g_out, "--threads: expected an integer in 1..64, got '65'");
  /* bench's list: each item as run's --policy */
  CHECK_EQ_INT(sheaf("bench treelstm --data " SMALL " --policy sheaf,none,depth,agenda,sheaf"), 2);
  CHECK_CONTAINS(g_out, "--policy: at most 4 policies");
  CHECK_EQ_INT(sheaf("bench treelstm --data " SMALL " --policy ,"), 2);
  CHECK_CONTAINS(g_out, "--policy: empty list");
}

/* "--f V" and "--f=V" run the same, in both run commands. */
TEST(cli_flags_both_spellings_same_output) {
  if (!th_sheaf_bin()) return;
  static char a[1 << 16];
  CHECK_EQ_INT(sheaf("run treelstm --data " SMALL " --hidden 4 --embed 4 --seed 3 --batch 2 --policy depth "
                     "--threads 1 --out -"),
               0);
  snprintf(a, sizeof a, "%s", g_out);
  CHECK_EQ_INT(sheaf("run treelstm --data=" SMALL " --hidden=4 --embed=4 --seed=3 --batch=2 --policy=depth "
                     "--threads=1 --out=-"),
               0);
  const char *x = strstr(a, "\n0 "), *y = strstr(g_out, "\n0 "); /* the outputs (the timings differ) */
  CHECK(x && y && !strcmp(x, y));
  CHECK_CONTAINS(a, "policy depth, batch 2, threads 1");
  CHECK_EQ_INT(sheaf("run " SF " --data " SMALL " --size H=4 --seed 3 --batch 2 --policy agenda --threads 1"), 0);
  snprintf(a, sizeof a, "%s", g_out);
  CHECK_EQ_INT(sheaf("run " SF " --data=" SMALL " --size=H=4 --seed=3 --batch=2 --policy=agenda --threads=1"), 0);
  CHECK(!strcmp(g_out, a));
  CHECK_EQ_INT(sheaf("run " SF " --data " SMALL " --size H=4 --policy agenda --out /dev/null"), 0);
  CHECK_CONTAINS(g_out, "policy agenda, batch 64");
}

/* The files: one input at most is standard input; an output is no input. */
TEST(cli_flags_files_from_the_table) {
  if (!th_sheaf_bin()) return;
  CHECK_EQ_INT(sheaf("run treelstm --data - --vocab - < " SMALL), 2);
  CHECK_CONTAINS(g_out, "run: --data and --vocab cannot both be standard input ('-')");
  CHECK_EQ_INT(sheaf("bench treelstm --data - --weights - < " SMALL), 2);
  CHECK_CONTAINS(g_out, "bench: --data and --weights cannot both be standard input ('-')");
  CHECK_EQ_INT(sheaf("run " SF " --data - --tuning - < " SMALL), 2);
  CHECK_CONTAINS(g_out, "run: --data and --tuning cannot both be standard input ('-')");
  CHECK_EQ_INT(sheaf("run treelstm --data " SMALL " --out " SMALL), 2);
  CHECK_CONTAINS(g_out, "--out " SMALL " is the same file as --data " SMALL);
  const char *t = th_tmp_path("flags-trace.json");
  CHECK_EQ_INT(sheaf("run " SF " --data " SMALL " --size H=4 --out %s --trace %s", t, t), 2);
  CHECK_CONTAINS(g_out, "are the same file");
}

/* Every subcommand's every flag: a bad value (or a value given to a flag
 * that takes none), a missing value, an unknown option, one positional
 * argument too many: exit 2 and one line "sheaf: error: CMD: ..." naming
 * the flag, before any work (no file is read: the data paths below do not
 * exist). */
TEST(cli_flags_every_subcommand_every_flag) {
  if (!th_sheaf_bin()) return;
#define TRAIN "train bilstm --data " SMALL " --out /nonexistent/w.safetensors"
#define TUNE "tune /nonexistent/m.sf"
#define COMPILE "compile /nonexistent/m.sf"
#define STATS "data stats /nonexistent/x.conllu"
#define BINARIZE "data binarize /nonexistent/x.conllu"
  static const struct {
    const char *args, *want;
  } cases[] = {
      /* train */
      {TRAIN " --data", "train: --data needs a value"},
      {TRAIN " --dev", "train: --dev needs a value"},
      {TRAIN " --out=", "train: --out needs a value"},
      {"train bilstm --data " SMALL " --out -", "train: --out: the weights are rewritten after every epoch"},
      {TRAIN " --epochs x", "train: --epochs: expected an integer in 1..1000000, got 'x'"},
      {TRAIN " --epochs=0", "train: --epochs: expected an integer in 1..1000000, got '0'"},
      {TRAIN " --time-limit 0", "train: --time-limit: expected a number in 1e-09..1e+09, got '0'"},
      {TRAIN " --time-limit nan", "train: --time-limit: expected a number in 1e-09..1e+09, got 'nan'"},
      {TRAIN " --optimizer rmsprop",
       "train: --optimizer: unknown optimizer 'rmsprop' (expected adam, sgd or adagrad)"},
      {TRAIN " --lr -1", "train: --lr: expected a number in 1e-12..1e+06, got '-1'"},
      {TRAIN " --clip -0.5", "train: --clip: expected a number in 0..1e+30, got '-0.5'"},
      {TRAIN " --batch 0", "train: --batch: expected an integer in 1..1000000, got '0'"},
      {TRAIN " --hidden 65537", "train: --hidden: expected an integer in 1..65536, got '65537'"},
      {TRAIN " --embed 1.5", "train: --embed: expected an integer in 1..65536, got '1.5'"},
      {TRAIN " --min-count 0", "train: --min-count: expected an integer in 1..2147483647, got '0'"},
      {TRAIN " --threads 1025", "train: --threads: expected an integer in 1..1024, got '1025'"},
      {TRAIN " --seed -3", "train: --seed: expected a non-negative integer, got '-3'"},
      {TRAIN " --keep-best=yes", "train: --keep-best takes no value, got '--keep-best=yes' (see 'sheaf train --help')"},
      {TRAIN " --keep-best", "train: --keep-best: needs --dev FILE"},
      {TRAIN " --resume", "train: --resume needs a value"},
      {TRAIN " --bogus", "train: unknown option '--bogus' (see 'sheaf train --help')"},
      {TRAIN " treelstm", "train: unexpected argument 'treelstm' (the model is 'bilstm')"},
      {"train --data " SMALL " --out w", "train: missing MODEL: bilstm or treelstm (see 'sheaf train --help')"},
      {"run --data " SMALL, "run: missing MODEL: treelstm, childsum, bilstm or mvrnn (see 'sheaf run --help')"},
      {"bench --data " SMALL, "bench: missing MODEL: treelstm, childsum, bilstm or mvrnn (see 'sheaf bench --help')"},
      {"data stats --ids", "data stats: missing FILE (see 'sheaf data stats --help')"},
      {"data binarize -o x", "data binarize: missing FILE.conllu (see 'sheaf data binarize --help')"},
      /* tune */
      {TUNE " --kernel", "tune: --kernel needs a value"},
      {TUNE " --size H", "tune: --size: expected NAME=V[,V...] with values in 0..2^30 (at most 64 values, 32 sizes), "
                         "got 'H'"},
      {TUNE " --size M=1,x", "tune: --size: expected NAME=V[,V...]"},
      {TUNE " --size M=1073741825", "tune: --size: expected NAME=V[,V...]"},
      {TUNE " --data=", "tune: --data needs a value"},
      {TUNE " --batch 0", "tune: --batch: expected an integer in 1..1048576, got '0'"},
      {TUNE " --budget 86401", "tune: --budget: expected an integer in 1..86400, got '86401'"},
      {TUNE " --out", "tune: --out needs a value"},
      {TUNE " --isa neon", "tune: --isa: unknown instruction set 'neon' (expected scalar, avx2 or avx512)"},
      {TUNE " --bogus", "tune: unknown option '--bogus' (see 'sheaf tune --help')"},
      {TUNE " b.sf", "tune: unexpected argument 'b.sf' (the source is '/nonexistent/m.sf')"},
      {"tune --data - --out x - < " SMALL, "tune: MODEL.sf and --data cannot both be standard input ('-')"},
      /* compile */
      {COMPILE " --emit-c", "compile: --emit-c needs a value"},
      {COMPILE " --emit-ir=1", "compile: --emit-ir takes no value, got '--emit-ir=1' (see 'sheaf compile --help')"},
      {COMPILE " --isa=avx3", "compile: --isa: unknown instruction set 'avx3' (expected scalar, avx2 or avx512)"},
      {COMPILE " --tuning", "compile: --tuning needs a value"},
      {COMPILE " --bogus", "compile: unknown option '--bogus' (see 'sheaf compile --help')"},
      {COMPILE " b.sf", "compile: unexpected argument 'b.sf' (the source is '/nonexistent/m.sf')"},
      /* check */
      {"check --quiet=1 x.sf", "check: --quiet takes no value, got '--quiet=1' (see 'sheaf check --help')"},
      {"check -q=1 x.sf", "check: -q takes no value, got '-q=1' (see 'sheaf check --help')"},
      {"check --ast=x x.sf", "check: --ast takes no value, got '--ast=x' (see 'sheaf check --help')"},
      {"check x.sf --bogus", "check: unknown option '--bogus' (see 'sheaf check --help')"},
      /* data stats */
      {STATS " --format", "data stats: --format needs a value"},
      {STATS " --format=xml",
       "data stats: --format: unknown format 'xml' (expected conllu, ptb, tokens or safetensors)"},
      {STATS " --vocab", "data stats: --vocab needs a value"},
      {STATS " --ids=1", "data stats: --ids takes no value, got '--ids=1' (see 'sheaf data stats --help')"},
      {STATS " --words=0", "data stats: --words takes no value, got '--words=0' (see 'sheaf data stats --help')"},
      {STATS " --words --ids", "data stats: --ids and --words exclude each other (the tokens are one or the other)"},
      {STATS " --bogus", "data stats: unknown option '--bogus' (see 'sheaf data stats --help')"},
      {STATS " y", "data stats: unexpected argument 'y' (the file is '/nonexistent/x.conllu')"},
      {"data stats - --vocab - < " SMALL, "data stats: FILE and --vocab cannot both be standard input ('-')"},
      /* data binarize */
      {BINARIZE " -o", "data binarize: -o needs a value"},
      {BINARIZE " --output=", "data binarize: --output needs a value"},
      {BINARIZE " --child-sum=1",
       "data binarize: --child-sum takes no value, got '--child-sum=1' (see 'sheaf data binarize --help')"},
      {BINARIZE " --bogus", "data binarize: unknown option '--bogus' (see 'sheaf data binarize --help')"},
      {BINARIZE " y", "data binarize: unexpected argument 'y' (the file is '/nonexistent/x.conllu')"},
      {"data binarize " SMALL " -o " SMALL, "-o " SMALL " is the same file as FILE " SMALL},
  };
#undef TRAIN
#undef TUNE
#undef COMPILE
#undef STATS
#undef BINARIZE
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int rc = sheaf("%s", cases[i].args);
    char want[512];
    snprintf(want, sizeof want, "sheaf: error: %s", cases[i].want);
    if (!CHECK_EQ_INT(rc, 2) || !strstr(g_out, want)) fprintf(stderr, "  sheaf %s:\n%s\n", cases[i].args, g_out);
    CHECK_CONTAINS(g_out, want);
    const char *nl = strchr(g_out, '\n'); /* one line, on stderr alone */
    CHECK(nl && nl[1] == '\0');
  }
}

/* -h and --help: exit 0, the usage on standard output, whatever else is
 * on the line (a bad flag after it is not read). */
TEST(cli_flags_help_anywhere) {
  if (!th_sheaf_bin()) return;
  static const char *const cmds[] = {"train", "tune", "compile", "check", "data stats", "data binarize", "run",
                                     "bench", ("run " SF)};
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    const char *first = cmds[i][0] == 'r' && strchr(cmds[i], ' ') ? "run" : cmds[i];
    char usage[64];
    snprintf(usage, sizeof usage, "usage: sheaf %s", first);
    CHECK_EQ_INT(sheaf("%s --help", cmds[i]), 0);
    CHECK(!strncmp(g_out, usage, strlen(usage)));
    CHECK_CONTAINS(g_out, "  -h, --help         this text\n");
    CHECK_EQ_INT(sheaf("%s x -h --bogus=1 2>/dev/null", cmds[i]), 0);
    if (!CHECK(!strncmp(g_out, usage, strlen(usage)))) fprintf(stderr, "  %s -h:\n%.300s\n", cmds[i], g_out);
  }
}
