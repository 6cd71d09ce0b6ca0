/*
 * test_cli_data.c — `sheaf data stats` and `sheaf data binarize` through
 * the built executable: EWT counts, binarize -> stats round trip, child-sum
 * output, tokens, usage errors (exit 2 naming the flag), input errors
 * (exit 1 with file:line:col), output that cannot be written, --help.
 */
#include <stdlib.h>

#include "harness.h"

#define EWT_TEST "data/ud_english_ewt/en_ewt-ud-test.conllu"

static char g_out[1 << 16];

/* Runs `sheaf ARGS`; returns the exit status (output in g_out). */
static int sheaf(const char *args) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "%s %s", th_sheaf_bin(), args);
  return th_run(cmd, g_out, sizeof g_out);
}

#define CHECK_STARTS(s, prefix)                                                       \
  do {                                                                                \
    if (strncmp((s), (prefix), strlen(prefix)) != 0)                                  \
      th_fail(__FILE__, __LINE__, "output \"%.200s\" does not start with \"%s\"", (s), \
              (prefix));                                                              \
  } while (0)

#define NEED_BIN() \
  do {             \
    if (!th_sheaf_bin()) return; /* runner started without SHEAF_BIN */ \
  } while (0)

TEST(cli_data_stats_ewt_counts) {
  NEED_BIN();
  CHECK_EQ_INT(sheaf("data stats " EWT_TEST), 0);
  CHECK_CONTAINS(g_out, "sentences             2077\n");
  CHECK_CONTAINS(g_out, "words                 25094\n");
  CHECK_CONTAINS(g_out, "skipped lines         354 multiword tokens, 2 empty nodes\n");
  CHECK_CONTAINS(g_out, "non-projective trees  26 (1.25%)");
  CHECK_CONTAINS(g_out, "sentence length (words)           2077       1     12.08       9      26      81\n");
  CHECK_CONTAINS(g_out, "binarized depth (leaf=1)          2077       1      8.52       8      16      44\n");
  CHECK_CONTAINS(g_out, "binarized depth distribution (depth: count)\n");
  CHECK_CONTAINS(g_out, "\n    44         1   0.05%  #\n");
}

TEST(cli_data_binarize_then_stats_agree) {
  NEED_BIN();
  const char *out = th_tmp_path("ewt.binary.ptb");
  char args[1024];
  snprintf(args, sizeof args, "data binarize " EWT_TEST " -o %s", out);
  CHECK_EQ_INT(sheaf(args), 0);
  CHECK_EQ_STR(g_out, ""); /* nothing on stdout or stderr */
  snprintf(args, sizeof args, "data stats %s", out);
  CHECK_EQ_INT(sheaf(args), 0);
  CHECK_CONTAINS(g_out, "format                ptb");
  CHECK_CONTAINS(g_out, "trees                 2077\n");
  CHECK_CONTAINS(g_out, "nodes                 48111\n");
  CHECK_CONTAINS(g_out, "leaves                25094\n");
  CHECK_CONTAINS(g_out, "depth (leaf=1)                    2077       1      8.52       8      16      44\n");
  /* stdout gives the same bytes as -o */
  snprintf(args, sizeof args, "data binarize " EWT_TEST " | cmp - %s && echo same", out);
  CHECK_EQ_INT(sheaf(args), 0);
  CHECK_EQ_STR(g_out, "same\n");
}

TEST(cli_data_binarize_known_output_and_child_sum) {
  NEED_BIN();
  CHECK_EQ_INT(sheaf("data binarize tests/data/small.conllu"), 0);
  CHECK_STARTS(g_out, "(nsubj (det (DET The) (NOUN cat)) (punct (VERB sat) (PUNCT .)))\n(aux ");
  CHECK_EQ_INT(sheaf("data binarize --child-sum tests/data/small.conllu -o -"), 0);
  CHECK_STARTS(g_out, "(root sat (nsubj cat (det The)) (punct .))\n(root go ");
  const char *cs = th_tmp_path("cs.trees");
  char args[1024];
  snprintf(args, sizeof args, "data binarize --child-sum " EWT_TEST " --output=%s && %s data stats %s",
           cs, th_sheaf_bin(), cs);
  CHECK_EQ_INT(sheaf(args), 0);
  CHECK_CONTAINS(g_out, "nodes                 25094\n");
  CHECK_CONTAINS(g_out, "depth (leaf=1)                    2077       1      3.80       4       6      13\n");
}

TEST(cli_data_stats_tokens_and_ptb_detection) {
  NEED_BIN();
  CHECK_EQ_INT(sheaf("data stats tests/data/tokens_ids.txt"), 0);
  CHECK_CONTAINS(g_out, "format                tokens (token ids");
  CHECK_CONTAINS(g_out, "sequences             3\n");
  CHECK_CONTAINS(g_out, "tokens                15\n");
  CHECK_CONTAINS(g_out, "empty lines skipped   1\n");
  CHECK_CONTAINS(g_out, "vocabulary            10 ids (0..max id), 9 used\n");
  CHECK_EQ_INT(sheaf("data stats tests/data/tokens_words.txt --vocab tests/data/vocab.txt"), 0);
  CHECK_CONTAINS(g_out, "vocabulary            5 tokens (tests/data/vocab.txt), 5 used\n");
  CHECK_CONTAINS(g_out, "unknown -> <unk>      3\n");
  CHECK_EQ_INT(sheaf("data stats --words tests/data/tokens_ids.txt"), 0);
  CHECK_CONTAINS(g_out, "vocabulary            9 distinct words\n");
  /* .txt starting with '(' is PTB; --format overrides the extension */
  const char *p = th_write_tmp("trees.txt", "\n  (3 (2 a) (1 b))\n", 19);
  char args[1024];
  snprintf(args, sizeof args, "data stats %s", p);
  CHECK_EQ_INT(sheaf(args), 0);
  CHECK_CONTAINS(g_out, "format                ptb");
  CHECK_CONTAINS(g_out, "depth (leaf=1)                       1       2      2.00       2       2       2\n");
  CHECK_EQ_INT(sheaf("data stats --format=ptb tests/data/sst_sample.ptb"), 0);
  CHECK_CONTAINS(g_out, "trees                 4\n");
  CHECK_EQ_INT(sheaf("data stats --format tokens tests/data/sst_sample.ptb"), 0);
  CHECK_CONTAINS(g_out, "format                tokens (words");
}

TEST(cli_data_usage_errors_exit_2_naming_the_flag) {
  NEED_BIN();
  CHECK_EQ_INT(sheaf("data"), 2);
  CHECK_CONTAINS(g_out, "usage: sheaf data");
  CHECK_EQ_INT(sheaf("data frobnicate"), 2);
  CHECK_CONTAINS(g_out, "sheaf: error: data: unknown command 'frobnicate'");
  CHECK_EQ_INT(sheaf("data stats"), 2);
  CHECK_CONTAINS(g_out, "missing FILE");
  CHECK_EQ_INT(sheaf("data stats " EWT_TEST " --bogus"), 2);
  CHECK_CONTAINS(g_out, "data stats: unknown option '--bogus' (see 'sheaf data stats --help')");
  CHECK_EQ_INT(sheaf("data stats " EWT_TEST " --format"), 2);
  CHECK_CONTAINS(g_out, "data stats: --format needs a value");
  CHECK_EQ_INT(sheaf("data stats " EWT_TEST " --format xml"), 2);
  CHECK_CONTAINS(g_out, "data stats: --format: unknown format 'xml' (expected conllu, ptb, tokens or safetensors)");
  CHECK_EQ_INT(sheaf("data stats " EWT_TEST " --vocab tests/data/vocab.txt"), 2);
  CHECK_CONTAINS(g_out, "--vocab applies to token files only");
  CHECK_EQ_INT(sheaf("data stats a.txt b.txt"), 2);
  CHECK_CONTAINS(g_out, "data stats: unexpected argument 'b.txt' (the file is 'a.txt')");
  CHECK_EQ_INT(sheaf("data binarize " EWT_TEST " -o"), 2);
  CHECK_CONTAINS(g_out, "data binarize: -o needs a value");
  CHECK_EQ_INT(sheaf("data binarize " EWT_TEST " --left-first"), 2);
  CHECK_CONTAINS(g_out, "data binarize: unknown option '--left-first' (see 'sheaf data binarize --help')");
  CHECK_EQ_INT(sheaf("data binarize"), 2);
  CHECK_CONTAINS(g_out, "missing FILE.conllu");
}

TEST(cli_data_input_errors_exit_1_with_position) {
  NEED_BIN();
  CHECK_EQ_INT(sheaf("data stats tests/data/bad_head.conllu"), 1);
  CHECK_EQ_STR(g_out, "sheaf: error: tests/data/bad_head.conllu:3:25: error: HEAD 7 is out of "
                      "range: the sentence has 2 words\n");
  CHECK_EQ_INT(sheaf("data binarize tests/data/bad_head.conllu"), 1);
  CHECK_CONTAINS(g_out, "bad_head.conllu:3:25: error: HEAD 7");
  const char *p = th_write_tmp("bad.ptb", "(3 (2 a) b)\n", 12);
  char args[1024];
  snprintf(args, sizeof args, "data stats %s", p);
  CHECK_EQ_INT(sheaf(args), 1);
  CHECK_CONTAINS(g_out, "bad.ptb:1:10: error: a word where a subtree was expected");
  CHECK_EQ_INT(sheaf("data stats tests/data/tokens_ids.txt --vocab tests/data/vocab.txt"), 1);
  CHECK_CONTAINS(g_out, "tests/data/tokens_ids.txt:1:9: error: token id 5 is out of range");
  CHECK_EQ_INT(sheaf("data stats --ids tests/data/tokens_words.txt"), 1);
  CHECK_CONTAINS(g_out, "tokens_words.txt:1:1: error: 'the' is not a token id");
  CHECK_EQ_INT(sheaf("data stats tests/data/no-such-file.conllu"), 1);
  CHECK_CONTAINS(g_out, "tests/data/no-such-file.conllu: cannot open");
  /* a rejected input writes no output file */
  const char *out = th_tmp_path("never.ptb");
  snprintf(args, sizeof args, "data binarize tests/data/bad_head.conllu -o %s; test -e %s", out, out);
  CHECK_EQ_INT(sheaf(args), 1);
}

TEST(cli_data_output_that_cannot_be_written_fails) {
  NEED_BIN();
  CHECK_EQ_INT(sheaf("data binarize tests/data/small.conllu -o /nonexistent-dir/x.ptb"), 1);
  CHECK_CONTAINS(g_out, "sheaf: error: /nonexistent-dir/x.ptb");
  /* a full device on stdout is reported, not lost */
  if (system("test -w /dev/full") == 0) {
    CHECK_EQ_INT(sheaf("data binarize " EWT_TEST " > /dev/full"), 1);
    CHECK_CONTAINS(g_out, "writing to standard output failed");
    CHECK_EQ_INT(sheaf("data stats " EWT_TEST " > /dev/full"), 1);
    CHECK_CONTAINS(g_out, "writing to standard output failed");
  }
}

TEST(cli_data_help) {
  NEED_BIN();
  CHECK_EQ_INT(sheaf("data --help"), 0);
  CHECK_CONTAINS(g_out, "binarize FILE");
  CHECK_EQ_INT(sheaf("data stats --help"), 0);
  CHECK_CONTAINS(g_out, "usage: sheaf data stats FILE");
  CHECK_CONTAINS(g_out, "--vocab VOCAB");
  CHECK_EQ_INT(sheaf("data binarize -h"), 0);
  CHECK_CONTAINS(g_out, "--child-sum");
  CHECK_CONTAINS(g_out, "-LRB-");
}

TEST(cli_data_reads_standard_input) {
  NEED_BIN();
  char args[512];
  snprintf(args, sizeof args, "data binarize - < tests/data/small.conllu | %s data stats --format ptb -",
           th_sheaf_bin());
  CHECK_EQ_INT(sheaf(args), 0);
  CHECK_CONTAINS(g_out, "trees                 3\n");
  CHECK_CONTAINS(g_out, "leaves                16\n");
}
