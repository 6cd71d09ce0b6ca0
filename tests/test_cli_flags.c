/*
 * test_cli_flags.c — the run commands' flag tables (cli/flags.c): every flag
 * that --help lists is one the parser takes (and the other way round for
 * the flags the tests know), a flag that `sheaf run MODEL`, `sheaf bench`
 * and `sheaf run MODEL.sf` share gives the same error text in each, both
 * spellings of a value ("--f V", "--f=V") mean the same, and the files the
 * flags name are checked from the table (standard input once).
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
