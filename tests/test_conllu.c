/*
 * test_conllu.c — the CoNLL-U reader: fields kept, skipped lines counted,
 * the bundled EWT test split (2077 sentences, 25094 words), line-ending and
 * layout tolerance, projectivity, and every validation error with its exact
 * "file:line:col" position; rollback and allocation failure.
 */
#include <time.h>

#include "base/file.h"
#include "harness.h"
#include "io/conllu.h"

#define EWT_TEST "data/ud_english_ewt/en_ewt-ud-test.conllu"

/* A word line with one-byte fields, so HEAD is always at column 13 (one-digit
 * IDs) and DEPREL is "dep". */
#define W(id, head) id "\tw\tw\tX\tX\t_\t" head "\tdep\t_\t_\n"

static const char *form(const sh_depbank *db, int32_t tok) {
  return sh_vocab_str(&db->forms, db->tokens[tok].form);
}

TEST(conllu_reads_fields_and_counts_skipped_lines) {
  sheaf_ctx *ctx = th_ctx();
  sh_depbank db;
  sh_depbank_init(&db, ctx);
  REQUIRE_OK(ctx, sh_conllu_read_file(&db, "tests/data/small.conllu"));
  REQUIRE_EQ_INT(db.n_sents, 3);
  CHECK_EQ_INT(db.n_tokens, 16);
  CHECK_EQ_INT(db.n_multiword, 1);
  CHECK_EQ_INT(db.n_empty_nodes, 1);
  CHECK_EQ_INT(db.n_nonprojective, 1);
  CHECK_EQ_INT(db.n_crossing, 1);
  const int lines[3] = {3, 11, 19}, lens[3] = {4, 4, 8}, depths[3] = {3, 2, 5};
  for (int s = 0; s < 3; s++) {
    CHECK_EQ_INT(db.sents[s].line, lines[s]);
    CHECK_EQ_INT(db.sents[s].len, lens[s]);
    CHECK_EQ_INT(db.sents[s].depth, depths[s]);
    CHECK_EQ_INT(db.sents[s].projective, s != 2);
  }
  CHECK_EQ_STR(form(&db, 0), "The");
  CHECK_EQ_STR(sh_vocab_str(&db.upos, db.tokens[1].upos), "NOUN");
  CHECK_EQ_STR(sh_vocab_str(&db.deprels, db.tokens[1].deprel), "nsubj");
  CHECK_EQ_INT(db.tokens[1].head, 3);
  CHECK_EQ_INT(db.tokens[2].head, 0);
  /* the multiword token "Don't" is skipped; its words are kept */
  CHECK_EQ_STR(form(&db, 4), "Do");
  CHECK_EQ_STR(form(&db, 5), "n't");
  CHECK_EQ_STR(form(&db, 7), ".");
  CHECK_EQ_INT(db.sents[1].first, 4);
  sh_depbank_free(&db);
}

TEST(conllu_ewt_test_split_counts) {
  sheaf_ctx *ctx = th_ctx();
  sh_depbank db;
  sh_depbank_init(&db, ctx);
  /* this thread's CPU time, not wall time: the bound is about the reader's
   * work, and a loaded machine stretches wall time (it failed at load 14) */
  struct timespec c0, c1;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
  REQUIRE_OK(ctx, sh_conllu_read_file(&db, EWT_TEST));
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
  double ms = (double)(c1.tv_sec - c0.tv_sec) * 1e3 + (double)(c1.tv_nsec - c0.tv_nsec) / 1e6;
  CHECK_EQ_INT(db.n_sents, 2077);
  CHECK_EQ_INT(db.n_tokens, 25094);
  CHECK_EQ_INT(db.n_multiword + db.n_empty_nodes, 356);
  CHECK_EQ_INT(db.n_nonprojective, 26);
  int64_t words = 0;
  for (int32_t s = 0; s < db.n_sents; s++) words += db.sents[s].len;
  CHECK_EQ_INT(words, 25094);
#if defined(__OPTIMIZE__) && !defined(__SANITIZE_ADDRESS__)
  CHECK(ms < 100); /* 1.8 MB; typically a few ms */
#else
  (void)ms;
#endif
  sh_depbank_free(&db);
}

TEST(conllu_tolerates_crlf_bom_missing_final_blank_and_extra_blanks) {
  sheaf_ctx *ctx = th_ctx();
  const char *lf = W("1", "2") W("2", "0") "\n" W("1", "0");
  const char *crlf = "\xEF\xBB\xBF\r\n# c\r\n1\tw\tw\tX\tX\t_\t2\tdep\t_\t_\r\n"
                     "2\tw\tw\tX\tX\t_\t0\tdep\t_\t_\r\n\r\n\r\n\n"
                     "1\tw\tw\tX\tX\t_\t0\tdep\t_\t_\r\n\r\n\r\n";
  const char *inputs[2] = {lf, crlf};
  for (int i = 0; i < 2; i++) {
    sh_depbank db;
    sh_depbank_init(&db, ctx);
    REQUIRE_OK(ctx, sh_conllu_read(&db, inputs[i], strlen(inputs[i]), "t.conllu"));
    CHECK_EQ_INT(db.n_sents, 2);
    CHECK_EQ_INT(db.n_tokens, 3);
    CHECK_EQ_STR(sh_vocab_str(&db.deprels, 0), "dep"); /* no '\r' kept */
    CHECK_EQ_INT(sh_vocab_size(&db.forms), 1);
    sh_depbank_free(&db);
  }
  sh_depbank db;
  sh_depbank_init(&db, ctx);
  CHECK_OK(ctx, sh_conllu_read(&db, "", 0, "empty.conllu"));
  CHECK_OK(ctx, sh_conllu_read(&db, "\n\n", 2, "blank.conllu"));
  CHECK_EQ_INT(db.n_sents, 0);
  sh_depbank_free(&db);
}

TEST(conllu_projectivity_distinguishes_crossing_from_root_spanning) {
  sheaf_ctx *ctx = th_ctx();
  sh_depbank db;
  sh_depbank_init(&db, ctx);
  /* 3 -> 1 spans the root word 2, but no two arcs between words cross */
  const char *over_root = W("1", "3") W("2", "0") W("3", "2") "\n";
  /* 1 -> 3 and 2 -> 4 cross */
  const char *crossing = W("1", "0") W("2", "4") W("3", "1") W("4", "1") "\n";
  const char *projective = W("1", "2") W("2", "0") W("3", "2") W("4", "3") "\n";
  REQUIRE_OK(ctx, sh_conllu_read(&db, over_root, strlen(over_root), "a"));
  REQUIRE_OK(ctx, sh_conllu_read(&db, crossing, strlen(crossing), "b"));
  REQUIRE_OK(ctx, sh_conllu_read(&db, projective, strlen(projective), "c"));
  CHECK_EQ_INT(db.n_nonprojective, 2);
  CHECK_EQ_INT(db.n_crossing, 1);
  CHECK(!db.sents[0].projective && !db.sents[0].crossing);
  CHECK(!db.sents[1].projective && db.sents[1].crossing);
  CHECK(db.sents[2].projective && !db.sents[2].crossing);
  CHECK_EQ_INT(db.sents[2].depth, 3);
  sh_depbank_free(&db);
}

/* Reading text fails with SHEAF_ERR_PARSE and exactly the message want; the
 * bank keeps the sentence it had. */
static void expect_conllu_error(const char *text, const char *want) {
  sheaf_ctx *ctx = th_ctx();
  sh_depbank db;
  sh_depbank_init(&db, ctx);
  const char *good = W("1", "0");
  REQUIRE_OK(ctx, sh_conllu_read(&db, good, strlen(good), "good.conllu"));
  CHECK_STATUS(ctx, sh_conllu_read(&db, text, strlen(text), "t.conllu"), SHEAF_ERR_PARSE);
  const char *err = sheaf_ctx_last_error(ctx);
  if (strcmp(err, want) != 0)
    th_fail(__FILE__, __LINE__, "got  \"%s\"\n  want \"%s\"", err, want);
  CHECK_EQ_INT(db.n_sents, 1);
  CHECK_EQ_INT(db.n_tokens, 1);
  CHECK_EQ_INT(db.n_multiword, 0);
  sh_depbank_free(&db);
}

TEST(conllu_error_wrong_number_of_fields) {
  expect_conllu_error("# c\n1\tw\tw\tX\n",
                      "t.conllu:2:8: error: expected 10 TAB-separated fields, found 4");
  expect_conllu_error("1\tw\tw\tX\tX\t_\t0\tdep\t_\t_\textra\n",
                      "t.conllu:1:22: error: expected 10 TAB-separated fields, found more: "
                      "this TAB starts an 11th");
  expect_conllu_error("1 w w X X _ 0 dep _ _\n",
                      "t.conllu:1:22: error: expected 10 TAB-separated fields, found 1 "
                      "(fields are separated by TABs, not spaces)");
  expect_conllu_error(W("1", "0") "2\tw\tw\tX\tX\t_\t1\tdep\t_\r\n",
                      "t.conllu:2:20: error: expected 10 TAB-separated fields, found 9");
}

TEST(conllu_error_empty_field) {
  expect_conllu_error("1\tw\t\tX\tX\t_\t0\tdep\t_\t_\n",
                      "t.conllu:1:5: error: field 3 (LEMMA) is empty; write '_' for no value");
  expect_conllu_error("1\tw\tw\tX\tX\t_\t0\tdep\t_\t\n",
                      "t.conllu:1:21: error: field 10 (MISC) is empty; write '_' for no value");
}

TEST(conllu_error_ids_not_consecutive) {
  expect_conllu_error(W("1", "0") W("3", "1"),
                      "t.conllu:2:1: error: expected ID 2, found '3' (IDs are consecutive)");
  expect_conllu_error("# s\n" W("2", "0"),
                      "t.conllu:2:1: error: expected ID 1, found '2' (IDs start at 1 in each "
                      "sentence)");
  expect_conllu_error(W("1", "0") W("2", "1") W("1", "0"),
                      "t.conllu:3:1: error: expected ID 3, found '1' (is a blank line missing "
                      "before this sentence?)");
  expect_conllu_error(W("1-x", "_"), "t.conllu:1:1: error: invalid ID '1-x': expected N, N-M "
                                     "(multiword token) or N.M (empty node)");
  expect_conllu_error(W("one", "0"), "t.conllu:1:1: error: expected ID 1, found 'one' (IDs "
                                     "start at 1 in each sentence)");
}

TEST(conllu_error_head_not_an_index_or_out_of_range) {
  expect_conllu_error(W("1", "_"), "t.conllu:1:13: error: HEAD must be a word index (0 for the "
                                   "root), found '_'");
  expect_conllu_error(W("1", "0") W("2", "-1"), "t.conllu:2:13: error: HEAD must be a word "
                                                "index (0 for the root), found '-1'");
  expect_conllu_error(W("1", "0") W("2", "5") W("3", "1") "\n" W("1", "0"),
                      "t.conllu:2:13: error: HEAD 5 is out of range: the sentence has 3 words");
  expect_conllu_error(W("1", "99999999999"), "t.conllu:1:13: error: HEAD must be a word index "
                                             "(0 for the root), found '99999999999'");
}

TEST(conllu_error_root_count) {
  expect_conllu_error("# two roots\n" W("1", "0") W("2", "0"),
                      "t.conllu:3:13: error: a second root: word 2 has HEAD 0 but word 1 is "
                      "the root already");
  expect_conllu_error(W("1", "2") W("2", "1") "\n",
                      "t.conllu:1:13: error: no root: no word of the sentence has HEAD 0");
}

TEST(conllu_error_cycle) {
  expect_conllu_error(W("1", "0") W("2", "3") W("3", "2") "\n",
                      "t.conllu:2:13: error: the HEAD fields form a cycle: 2 -> 3 -> 2 (each "
                      "word's head must lead to the root)");
  expect_conllu_error(W("1", "0") W("2", "2"),
                      "t.conllu:2:13: error: the HEAD fields form a cycle: 2 -> 2 (each word's "
                      "head must lead to the root)");
  expect_conllu_error(W("1", "3") W("2", "0") W("3", "4") W("4", "5") W("5", "3"),
                      "t.conllu:3:13: error: the HEAD fields form a cycle: 3 -> 4 -> 5 -> 3 "
                      "(each word's head must lead to the root)");
}

TEST(conllu_error_empty_sentence) {
  expect_conllu_error("# c\n\n", "t.conllu:2:1: error: empty sentence: the lines from line 1 "
                                 "on hold no word line");
  expect_conllu_error(W("1", "0") "\n# a\n# b",
                      "t.conllu:4:4: error: empty sentence: the lines from line 3 on hold no "
                      "word line");
  expect_conllu_error("1-2\tw\t_\t_\t_\t_\t_\t_\t_\t_\n\n",
                      "t.conllu:2:1: error: empty sentence: the lines from line 1 on hold no "
                      "word line");
  expect_conllu_error("a\nb", "t.conllu:1:2: error: expected 10 TAB-separated fields, found 1");
}

TEST(conllu_nul_byte_is_an_error) {
  sheaf_ctx *ctx = th_ctx();
  sh_depbank db;
  sh_depbank_init(&db, ctx);
  const char text[] = "1\tw\0w\tX\tX\t_\t0\tdep\t_\t_\n";
  CHECK_STATUS(ctx, sh_conllu_read(&db, text, sizeof text - 1, "nul.conllu"), SHEAF_ERR_PARSE);
  CHECK_EQ_STR(sheaf_ctx_last_error(ctx),
               "nul.conllu:1:4: error: NUL byte: text input cannot hold NUL bytes");
  CHECK_STATUS(ctx, sh_conllu_read_file(&db, "tests/data/absent.conllu"), SHEAF_ERR_IO);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "tests/data/absent.conllu");
  sh_depbank_free(&db);
}

TEST(conllu_reader_survives_every_allocation_failure) {
  sheaf_ctx *ctx = th_ctx();
  char *data;
  size_t size;
  REQUIRE_OK(ctx, sh_file_read(ctx, "tests/data/small.conllu", &data, &size));
  for (long n = 1; n < 200; n++) {
    sh_depbank db;
    sh_depbank_init(&db, ctx);
    th_fail_alloc_at(n);
    sheaf_status st = sh_conllu_read(&db, data, size, "small.conllu");
    th_fail_alloc_at(0);
    if (st == SHEAF_OK) {
      CHECK_EQ_INT(db.n_sents, 3);
      sh_depbank_free(&db);
      sh_free(ctx, data, size + 1);
      return;
    }
    CHECK_EQ_INT(st, SHEAF_ERR_NOMEM);
    CHECK_EQ_INT(db.n_sents, 0);
    sh_depbank_free(&db);
  }
  sh_free(ctx, data, size + 1);
  th_fail(__FILE__, __LINE__, "reading never succeeded within the allowed attempts");
}
