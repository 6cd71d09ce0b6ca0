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

TEST(cli_help_goldens) {
  if (!th_sheaf_bin()) return;
  static const struct {
    const char *args, *golden;
  } cases[] = {
      {"--help", "sheaf"},
      {"data --help", "sheaf_data"},
      {"data stats --help", "sheaf_data_stats"},
      {"data binarize --help", "sheaf_data_binarize"},
      {"run --help", "sheaf_run"},
      {"run examples/treefc.sf --help", "sheaf_run_MODEL.sf"},
      {"bench --help", "sheaf_bench"},
      {"train --help", "sheaf_train"},
      {"check --help", "sheaf_check"},
      {"compile --help", "sheaf_compile"},
      {"tune --help", "sheaf_tune"},
  };
  bool update = getenv("SHEAF_UPDATE_GOLDEN") != NULL;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    CHECK_EQ_INT(th_sheaf(g_out, sizeof g_out, "%s 2>/dev/null", cases[i].args), 0);
    char path[256];
    snprintf(path, sizeof path, "tests/data/help/%s.txt", cases[i].golden);
    if (update) {
      FILE *f = fopen(path, "wb");
      REQUIRE(f && fwrite(g_out, 1, strlen(g_out), f) == strlen(g_out) && fclose(f) == 0);
      continue;
    }
    const char *want = th_read_file(path, NULL);
    if (!CHECK(want != NULL)) continue;
    if (!CHECK(!strcmp(g_out, want)))
      fprintf(stderr, "  'sheaf %s' differs from %s at line %d (SHEAF_UPDATE_GOLDEN=1 rewrites it):\n%s\n",
              cases[i].args, path, first_diff_line(g_out, want), g_out);
  }
}
