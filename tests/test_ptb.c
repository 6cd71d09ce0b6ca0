/*
 * test_ptb.c — PTB s-expression trees: structure of SST trees (post-order
 * layout, labels and their values, heights, depths), layout freedom,
 * round trips through the writer, escaping, every parse error with its
 * exact position, deep nesting, rollback and allocation failure.
 */
#include <stdlib.h>

#include "base/buf.h"
#include "harness.h"
#include "io/ptb.h"

/* Reads text, writes it back (one tree per line) into out. */
static bool read_write(sheaf_ctx *ctx, const char *text, char *out, size_t cap) {
  sh_treebank tb;
  sh_tb_init(&tb, ctx);
  sh_buf b;
  sh_buf_init(&b, ctx);
  bool ok = CHECK_OK(ctx, sh_ptb_read(&tb, text, strlen(text), "t.ptb")) &&
            CHECK_OK(ctx, sh_ptb_write(&tb, &b));
  snprintf(out, cap, "%s", sh_buf_cstr(&b));
  sh_buf_free(&b);
  sh_tb_free(&tb);
  return ok;
}

static const char *word_of(const sh_treebank *tb, int32_t n) {
  return tb->word[n] < 0 ? "-" : sh_vocab_str(&tb->words, tb->word[n]);
}

TEST(ptb_reads_sst_tree_in_post_order) {
  sheaf_ctx *ctx = th_ctx();
  sh_treebank tb;
  sh_tb_init(&tb, ctx);
  const char *t = "(3 (2 It) (4 (2 's) (3 (2 a) (2 gift))))";
  REQUIRE_OK(ctx, sh_ptb_read(&tb, t, strlen(t), "t.ptb"));
  REQUIRE_EQ_INT(tb.n_trees, 1);
  REQUIRE_EQ_INT(tb.n_nodes, 7);
  CHECK_EQ_INT(tb.tree_first[0], 0);
  CHECK_EQ_INT(tb.tree_size[0], 7);
  CHECK_EQ_INT(tb.tree_root[0], 6);
  /* post-order: It 's a gift (3 a gift) (4 's ..) (3 It ..) */
  const char *words[7] = {"It", "'s", "a", "gift", "-", "-", "-"};
  const int values[7] = {2, 2, 2, 2, 3, 4, 3};
  for (int n = 0; n < 7; n++) {
    CHECK_EQ_STR(word_of(&tb, n), words[n]);
    CHECK_EQ_INT(sh_tb_value(&tb, n), values[n]);
  }
  CHECK_EQ_INT(tb.n_children[6], 2);
  CHECK_EQ_INT(sh_tb_child(&tb, 6, 0), 0);
  CHECK_EQ_INT(sh_tb_child(&tb, 6, 1), 5);
  CHECK_EQ_INT(sh_tb_child(&tb, 5, 0), 1);
  CHECK_EQ_INT(sh_tb_child(&tb, 5, 1), 4);
  CHECK_EQ_INT(sh_tb_child(&tb, 4, 0), 2);
  CHECK_EQ_INT(sh_tb_child(&tb, 4, 1), 3);
  CHECK_EQ_INT(tb.parent[6], -1);
  CHECK_EQ_INT(tb.parent[3], 4);
  CHECK_EQ_INT(tb.parent[0], 6);
  int32_t h[7], d[7];
  sh_tb_heights(&tb, h);
  sh_tb_depths(&tb, d);
  const int want_h[7] = {1, 1, 1, 1, 2, 3, 4}, want_d[7] = {2, 3, 4, 4, 3, 2, 1};
  for (int n = 0; n < 7; n++) {
    CHECK_EQ_INT(h[n], want_h[n]);
    CHECK_EQ_INT(d[n], want_d[n]);
  }
  CHECK_EQ_INT(sh_tb_tree_words(&tb, 0), 4);
  CHECK_EQ_INT(sh_vocab_size(&tb.labels), 3); /* 3 2 4 */
  sh_tb_free(&tb);
}

TEST(ptb_layout_is_free_and_trees_share_vocabularies) {
  sheaf_ctx *ctx = th_ctx();
  sh_treebank tb;
  sh_tb_init(&tb, ctx);
  const char *t = "\xEF\xBB\xBF  (1 (2 a)\r\n\t(1 b)) (0 (2 a)\n(3 c))(2 b)\n\n";
  REQUIRE_OK(ctx, sh_ptb_read(&tb, t, strlen(t), "t.ptb"));
  CHECK_EQ_INT(tb.n_trees, 3);
  CHECK_EQ_INT(tb.n_nodes, 7);
  CHECK_EQ_INT(sh_vocab_size(&tb.words), 3);
  CHECK_EQ_INT(tb.tree_first[1], 3);
  CHECK_EQ_INT(tb.tree_root[2], 6);
  CHECK_EQ_INT(tb.tree_size[2], 1);
  CHECK_EQ_INT(sh_tb_value(&tb, 5), 0);
  /* a second file appends and keeps ids */
  const char *t2 = "(NP (DT a) (-3 z))";
  REQUIRE_OK(ctx, sh_ptb_read(&tb, t2, strlen(t2), "u.ptb"));
  CHECK_EQ_INT(tb.n_trees, 4);
  CHECK_EQ_INT(tb.word[7], 0); /* "a" */
  CHECK_EQ_INT(sh_tb_value(&tb, 9), SH_TB_NO_VALUE); /* NP */
  CHECK_EQ_INT(sh_tb_value(&tb, 8), -3);
  /* an empty input is zero trees */
  REQUIRE_OK(ctx, sh_ptb_read(&tb, " \n", 2, "e.ptb"));
  CHECK_EQ_INT(tb.n_trees, 4);
  sh_tb_free(&tb);
}

TEST(ptb_round_trips_through_the_writer) {
  sheaf_ctx *ctx = th_ctx();
  const char *in = "(3 (2 It) (4 (2 's) (3 (2 a) (2 gift))))\n"
                   "(1 (2 The)\n   (1 (1 plot) (2 (2 is) (1 thin))))\n"
                   "(2 x)\n";
  char out[1024], again[1024];
  REQUIRE(read_write(ctx, in, out, sizeof out));
  CHECK_EQ_STR(out, "(3 (2 It) (4 (2 's) (3 (2 a) (2 gift))))\n"
                    "(1 (2 The) (1 (1 plot) (2 (2 is) (1 thin))))\n"
                    "(2 x)\n");
  REQUIRE(read_write(ctx, out, again, sizeof again));
  CHECK_EQ_STR(again, out);
}

TEST(ptb_round_trips_the_sst_sample_file) {
  sheaf_ctx *ctx = th_ctx();
  sh_treebank tb;
  sh_tb_init(&tb, ctx);
  REQUIRE_OK(ctx, sh_ptb_read_file(&tb, "tests/data/sst_sample.ptb"));
  CHECK_EQ_INT(tb.n_trees, 4);
  sh_buf b;
  sh_buf_init(&b, ctx);
  REQUIRE_OK(ctx, sh_ptb_write(&tb, &b));
  sh_treebank tb2;
  sh_tb_init(&tb2, ctx);
  REQUIRE_OK(ctx, sh_ptb_read(&tb2, (const char *)b.data, b.len, "written"));
  REQUIRE_EQ_INT(tb2.n_nodes, tb.n_nodes);
  CHECK_EQ_INT(tb2.n_trees, tb.n_trees);
  for (int32_t n = 0; n < tb.n_nodes; n++) {
    CHECK_EQ_INT(tb2.word[n], tb.word[n]);
    CHECK_EQ_INT(tb2.label[n], tb.label[n]);
    CHECK_EQ_INT(tb2.parent[n], tb.parent[n]);
    CHECK_EQ_INT(tb2.n_children[n], tb.n_children[n]);
  }
  /* -LRB- / -RRB- are parentheses in memory */
  CHECK(sh_vocab_find(&tb.words, "(", 1) >= 0);
  CHECK(sh_vocab_find(&tb.words, ")", 1) >= 0);
  CHECK_CONTAINS(sh_buf_cstr(&b), "(2 (2 -LRB-) (2 (2 fine) (2 -RRB-)))\n");
  sh_buf_free(&b);
  sh_tb_free(&tb2);
  sh_tb_free(&tb);
}

TEST(ptb_writer_escapes_parentheses_and_whitespace) {
  sheaf_ctx *ctx = th_ctx();
  sh_treebank tb;
  sh_tb_init(&tb, ctx);
  int32_t w1, w2, l1, l2, a, b, root;
  REQUIRE_OK(ctx, sh_vocab_intern(&tb.words, "f(x)", 4, &w1));
  REQUIRE_OK(ctx, sh_vocab_intern(&tb.words, "New York\tCity", 13, &w2));
  REQUIRE_OK(ctx, sh_vocab_intern(&tb.labels, "A(B", 3, &l1));
  REQUIRE_OK(ctx, sh_vocab_intern(&tb.labels, "S", 1, &l2));
  REQUIRE_OK(ctx, sh_tb_begin_tree(&tb));
  REQUIRE_OK(ctx, sh_tb_add_node(&tb, w1, l1, NULL, 0, &a));
  REQUIRE_OK(ctx, sh_tb_add_node(&tb, w2, l2, NULL, 0, &b));
  int32_t kids[2] = {a, b};
  REQUIRE_OK(ctx, sh_tb_add_node(&tb, -1, l2, kids, 2, &root));
  REQUIRE_OK(ctx, sh_tb_end_tree(&tb));
  sh_buf out;
  sh_buf_init(&out, ctx);
  REQUIRE_OK(ctx, sh_ptb_write_tree(&tb, 0, &out));
  CHECK_EQ_STR(sh_buf_cstr(&out),
               "(S (A-LRB-B f-LRB-x-RRB-) (S New\xC2\xA0York\xC2\xA0" "City))");
  /* read back: parentheses restored, whitespace stays U+00A0 */
  sh_treebank tb2;
  sh_tb_init(&tb2, ctx);
  REQUIRE_OK(ctx, sh_ptb_read(&tb2, (const char *)out.data, out.len, "w"));
  CHECK_EQ_STR(sh_vocab_str(&tb2.words, tb2.word[0]), "f(x)");
  CHECK_EQ_STR(sh_vocab_str(&tb2.labels, tb2.label[0]), "A(B");
  CHECK_EQ_STR(sh_vocab_str(&tb2.words, tb2.word[1]), "New\xC2\xA0York\xC2\xA0" "City");
  CHECK_STATUS(ctx, sh_ptb_write_tree(&tb, 1, &out), SHEAF_ERR_INVALID_ARG);
  /* an empty word cannot be written */
  int32_t empty, x;
  REQUIRE_OK(ctx, sh_vocab_intern(&tb.words, "", 0, &empty));
  REQUIRE_OK(ctx, sh_tb_begin_tree(&tb));
  REQUIRE_OK(ctx, sh_tb_add_node(&tb, empty, l2, NULL, 0, &x));
  REQUIRE_OK(ctx, sh_tb_end_tree(&tb));
  CHECK_STATUS(ctx, sh_ptb_write_tree(&tb, 1, &out), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "empty word");
  sh_buf_free(&out);
  sh_tb_free(&tb2);
  sh_tb_free(&tb);
}

TEST(ptb_accepts_child_sum_nodes) {
  sheaf_ctx *ctx = th_ctx();
  char out[256];
  REQUIRE(read_write(ctx, "(root sat (nsubj cat (det the)) (punct .))", out, sizeof out));
  CHECK_EQ_STR(out, "(root sat (nsubj cat (det the)) (punct .))\n");
  sh_treebank tb;
  sh_tb_init(&tb, ctx);
  const char *t = "(root sat (nsubj cat (det the)) (punct .))";
  REQUIRE_OK(ctx, sh_ptb_read(&tb, t, strlen(t), "t"));
  CHECK_EQ_INT(sh_tb_tree_words(&tb, 0), 4);
  CHECK_EQ_STR(word_of(&tb, tb.tree_root[0]), "sat");
  sh_tb_free(&tb);
}

/* Reading text fails with SHEAF_ERR_PARSE and a message starting with want;
 * the treebank keeps its earlier tree. */
static void expect_ptb_error(const char *text, const char *want) {
  sheaf_ctx *ctx = th_ctx();
  sh_treebank tb;
  sh_tb_init(&tb, ctx);
  REQUIRE_OK(ctx, sh_ptb_read(&tb, "(1 ok)", 6, "first.ptb"));
  CHECK_STATUS(ctx, sh_ptb_read(&tb, text, strlen(text), "bad.ptb"), SHEAF_ERR_PARSE);
  const char *err = sheaf_ctx_last_error(ctx);
  if (strncmp(err, want, strlen(want)) != 0)
    th_fail(__FILE__, __LINE__, "for %s: got \"%s\", want prefix \"%s\"", text, err, want);
  CHECK_EQ_INT(tb.n_trees, 1);
  CHECK_EQ_INT(tb.n_nodes, 1);
  CHECK_EQ_INT(tb.n_child_refs, 0);
  sh_tb_free(&tb);
}

TEST(ptb_error_unbalanced_parentheses) {
  expect_ptb_error("(3 (2 a) (2 b", "bad.ptb:1:14: error: unexpected end of input: the '(' at "
                                    "1:10 is never closed (1 enclosing '(' also open; the tree "
                                    "starts at 1:1)");
  expect_ptb_error("(3 (2 a)\n(2 b)", "bad.ptb:2:6: error: unexpected end of input: the '(' at "
                                      "1:1 is never closed");
  expect_ptb_error("(3 (2 a) (2 b)))", "bad.ptb:1:16: error: unexpected ')': no tree is open");
  expect_ptb_error(")", "bad.ptb:1:1: error: unexpected ')'");
  expect_ptb_error("(2 a) (", "bad.ptb:1:8: error: unexpected end of input: the '(' at 1:7");
}

TEST(ptb_error_empty_and_unlabelled) {
  expect_ptb_error("(2 a) ()", "bad.ptb:1:7: error: empty tree '()'");
  expect_ptb_error("(3 (2 a) ( ))", "bad.ptb:1:10: error: empty tree '()'");
  expect_ptb_error("( (S (NN a)))", "bad.ptb:1:3: error: missing label: expected a label after the '(' at 1:1, found '('");
  expect_ptb_error("(3)", "bad.ptb:1:3: error: node '3' has neither a word nor subtrees");
  expect_ptb_error("(3\n  )", "bad.ptb:2:3: error: node '3' has neither a word nor subtrees");
}

TEST(ptb_error_word_where_subtree_expected) {
  expect_ptb_error("(3 (2 a) b)", "bad.ptb:1:10: error: a word where a subtree was expected: 'b'");
  expect_ptb_error("(2 a b)", "bad.ptb:1:6: error: a second word 'b'");
  expect_ptb_error("hello", "bad.ptb:1:1: error: expected '(' to start a tree, found word 'hello'");
  expect_ptb_error("(2 a)\n  stray", "bad.ptb:2:3: error: expected '(' to start a tree, found word 'stray'");
  sheaf_ctx *ctx = th_ctx();
  sh_treebank tb;
  sh_tb_init(&tb, ctx);
  CHECK_STATUS(ctx, sh_ptb_read(&tb, "(2 a)\n(1 b\0)", 11, "nul.ptb"), SHEAF_ERR_PARSE);
  CHECK_EQ_STR(sheaf_ctx_last_error(ctx),
               "nul.ptb:2:5: error: NUL byte: text input cannot hold NUL bytes");
  sh_tb_free(&tb);
}

TEST(ptb_deep_nesting_is_an_error_not_a_crash) {
  sheaf_ctx *ctx = th_ctx();
  size_t depth = SH_PTB_MAX_DEPTH + 1, n = depth * 4 + 8;
  char *s = malloc(n);
  REQUIRE(s != NULL);
  size_t k = 0;
  for (size_t i = 0; i < depth; i++) s[k++] = '(', s[k++] = '1', s[k++] = ' ';
  s[k++] = 'x';
  for (size_t i = 0; i < depth; i++) s[k++] = ')';
  sh_treebank tb;
  sh_tb_init(&tb, ctx);
  CHECK_STATUS(ctx, sh_ptb_read(&tb, s, k, "deep.ptb"), SHEAF_ERR_PARSE);
  char want[128];
  snprintf(want, sizeof want, "deep.ptb:1:%d: error: trees nested deeper than %d levels",
           SH_PTB_MAX_DEPTH * 3 + 1, SH_PTB_MAX_DEPTH);
  CHECK_EQ_STR(sheaf_ctx_last_error(ctx), want);
  /* exactly at the limit: read, measured and written without recursion */
  REQUIRE_OK(ctx, sh_ptb_read(&tb, s + 3, k - 4, "deep.ptb"));
  CHECK_EQ_INT(tb.n_nodes, SH_PTB_MAX_DEPTH);
  int32_t *h = malloc(sizeof(int32_t) * (size_t)tb.n_nodes);
  REQUIRE(h != NULL);
  sh_tb_heights(&tb, h);
  CHECK_EQ_INT(h[tb.tree_root[0]], SH_PTB_MAX_DEPTH);
  sh_buf b;
  sh_buf_init(&b, ctx);
  CHECK_OK(ctx, sh_ptb_write(&tb, &b));
  CHECK_EQ_SIZE(b.len, k - 4 + 1);
  sh_buf_free(&b);
  free(h);
  free(s);
  sh_tb_free(&tb);
}

TEST(ptb_reader_survives_every_allocation_failure) {
  sheaf_ctx *ctx = th_ctx();
  char text[1 << 14];
  size_t len = 0;
  for (int i = 0; i < 100; i++)
    len += (size_t)snprintf(text + len, sizeof text - len,
                            "(3 (2 w%d) (4 (2 -LRB-) (3 (2 a) (2 g%d))))\n", i, i % 7);
  for (long n = 1; n < 200; n++) {
    sh_treebank tb;
    sh_tb_init(&tb, ctx);
    th_fail_alloc_at(n);
    sheaf_status st = sh_ptb_read(&tb, text, len, "t.ptb");
    th_fail_alloc_at(0);
    if (st == SHEAF_OK) {
      CHECK_EQ_INT(tb.n_trees, 100);
      sh_tb_free(&tb);
      return;
    }
    CHECK_EQ_INT(st, SHEAF_ERR_NOMEM);
    CHECK_EQ_INT(tb.n_trees, 0);
    sh_tb_free(&tb);
  }
  th_fail(__FILE__, __LINE__, "reading never succeeded within the allowed attempts");
}

TEST(ptb_reads_a_binarized_treebank_fast) {
  /* 25k leaves in 2,000 trees: parse well under the 100 ms budget */
  sheaf_ctx *ctx = th_ctx();
  sh_buf b;
  sh_buf_init(&b, ctx);
  for (int i = 0; i < 2000; i++)
    sh_buf_printf(&b, "(nsubj (det (DET the%d) (NOUN cat)) (punct (obj (VERB sat) (case (ADP on) "
                      "(det (DET the) (NOUN mat)))) (PUNCT .)))\n", i % 300);
  REQUIRE_OK(ctx, sh_buf_status(&b));
  sh_treebank tb;
  sh_tb_init(&tb, ctx);
  uint64_t t0 = sheaf_time_ns();
  REQUIRE_OK(ctx, sh_ptb_read(&tb, (const char *)b.data, b.len, "gen"));
  double ms = (double)(sheaf_time_ns() - t0) / 1e6;
  CHECK_EQ_INT(tb.n_nodes, 2000 * 13);
  CHECK(ms < 100);
  sh_tb_free(&tb);
  sh_buf_free(&b);
}
