/*
 * test_cli_help.c — the --help text of `sheaf` and of every subcommand
 * against its golden copy in tests/data/help/ (the list of flags comes from
 * each command's flag table, cli/flags.c: a flag added, renamed or
 * re-documented shows here). After a deliberate change, SHEAF_UPDATE_GOLDEN=1
 * rewrites the goldens; review them with git diff.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static char g_out[1 << 16];

/* The first line where a and b differ (1-based). */
static int first_diff_line(const char *a, const char *b) {
  int line = 1;
  for (; *a && *a == *b; a++, b++) line += *a == '\n';
  return line;
}

/* tests/data/help/sheaf_WORDS.txt for "sheaf WORDS --help" ('/' and ' ' as '_'). */
static void golden_path(const char *cmd, char *path, size_t cap) {
  int n = snprintf(path, cap, "tests/data/help/sheaf%s%s", *cmd ? "_" : "", cmd);
  for (char *p = path + strlen("tests/data/help/"); *p; p++)
    if (*p == ' ' || *p == '/') *p = '_';
  snprintf(path + n, cap - (size_t)n, ".txt");
}

TEST(cli_help_goldens) {
  if (!th_sheaf_bin()) return;
  static const char *const cmds[] = {"",      "data",  "data stats", "data binarize", "run", "run examples/treefc.sf",
                                     "bench", "train", "check",      "compile",       "tune"};
  bool update = getenv("SHEAF_UPDATE_GOLDEN") != NULL;
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    CHECK_EQ_INT(th_sheaf(g_out, sizeof g_out, "%s --help 2>/dev/null", cmds[i]), 0);
    char path[256];
    golden_path(cmds[i], path, sizeof path);
    if (update) {
      FILE *f = fopen(path, "wb");
      REQUIRE(f && fwrite(g_out, 1, strlen(g_out), f) == strlen(g_out) && fclose(f) == 0);
      continue;
    }
    const char *want = th_read_file(path, NULL);
    if (!CHECK(want != NULL)) fprintf(stderr, "  no golden %s\n", path);
    else if (!CHECK(!strcmp(g_out, want)))
      fprintf(stderr, "  'sheaf %s --help' differs from %s at line %d (SHEAF_UPDATE_GOLDEN=1 rewrites it):\n%s\n",
              cmds[i], path, first_diff_line(g_out, want), g_out);
  }
}
