/*
 * test_seqs.c — token sequences: ids, words with a built or given
 * vocabulary (<unk>), empty lines, every error with its position, rollback,
 * allocation failure; and the distribution summaries of stats.c.
 */
#include "harness.h"
#include "io/seqs.h"
#include "io/stats.h"

static const int32_t *seq(const sh_seqs *s, size_t i) { return s->tokens + s->seqs[i].start; }

TEST(seqs_read_token_ids) {
  sheaf_ctx *ctx = th_ctx();
  sh_seqs s;
  sh_seqs_init(&s, ctx);
  REQUIRE_OK(ctx, sh_seqs_read_file(&s, "tests/data/tokens_ids.txt", NULL));
  CHECK_EQ_INT(s.mode, SH_SEQS_IDS);
  REQUIRE_EQ_INT(s.n_seqs, 3);
  CHECK_EQ_SIZE(s.n_tokens, 15);
  CHECK_EQ_SIZE(s.n_empty_lines, 1);
  CHECK_EQ_INT(s.max_id, 9);
  CHECK_EQ_INT(s.seqs[1].len, 3);
  CHECK_EQ_INT(seq(&s, 1)[2], 6);
  CHECK_EQ_INT(s.seqs[2].line, 4); /* line 3 is empty */
  CHECK_EQ_INT(seq(&s, 2)[6], 9);
  /* a second read appends in the same mode */
  REQUIRE_OK(ctx, sh_seqs_read(&s, "0 2147483647\r\n", 14, "more.txt", NULL));
  CHECK_EQ_INT(s.n_seqs, 4);
  CHECK_EQ_INT(seq(&s, 3)[1], 2147483647);
  sh_seqs_options words = {.mode = SH_SEQS_WORDS};
  CHECK_STATUS(ctx, sh_seqs_read(&s, "a", 1, "w.txt", &words), SHEAF_ERR_INVALID_ARG);
  sh_seqs_free(&s);
}

TEST(seqs_words_build_a_vocabulary) {
  sheaf_ctx *ctx = th_ctx();
  sh_seqs s;
  sh_seqs_init(&s, ctx);
  REQUIRE_OK(ctx, sh_seqs_read_file(&s, "tests/data/tokens_words.txt", NULL));
  CHECK_EQ_INT(s.mode, SH_SEQS_WORDS);
  REQUIRE_EQ_INT(s.n_seqs, 3);
  CHECK_EQ_SIZE(s.n_empty_lines, 1);
  CHECK_EQ_INT(sh_vocab_size(&s.vocab), 7); /* the cat sat dog down bird flew */
  CHECK_EQ_INT(s.seqs[1].len, 4);           /* "  the dog\tsat  down " */
  CHECK_EQ_INT(seq(&s, 1)[0], 0);
  CHECK_EQ_INT(seq(&s, 1)[2], 2);
  CHECK_EQ_STR(sh_vocab_str(&s.vocab, seq(&s, 1)[3]), "down");
  /* numbers in a words file are words */
  sh_seqs_options o = {.mode = SH_SEQS_WORDS};
  REQUIRE_OK(ctx, sh_seqs_read(&s, "in 1999", 7, "n.txt", &o));
  CHECK_EQ_STR(sh_vocab_str(&s.vocab, seq(&s, 3)[1]), "1999");
  sh_seqs_free(&s);
}

TEST(seqs_words_through_a_given_vocabulary_with_unk) {
  sheaf_ctx *ctx = th_ctx();
  sh_vocab v;
  sh_vocab_init(&v, ctx);
  REQUIRE_OK(ctx, sh_vocab_load_file(&v, "tests/data/vocab.txt")); /* <unk> the cat dog sat */
  sh_seqs s;
  sh_seqs_init(&s, ctx);
  sh_seqs_options o = {.vocab = &v};
  REQUIRE_OK(ctx, sh_seqs_read_file(&s, "tests/data/tokens_words.txt", &o));
  CHECK_EQ_SIZE(s.n_unk, 3); /* down bird flew */
  CHECK_EQ_INT(seq(&s, 0)[1], 2);
  CHECK_EQ_INT(seq(&s, 1)[3], 0);
  CHECK_EQ_INT(sh_vocab_size(&s.vocab), 0); /* nothing built */
  /* ids are checked against the vocabulary size */
  sh_seqs ids;
  sh_seqs_init(&ids, ctx);
  sh_seqs_options io = {.mode = SH_SEQS_IDS, .vocab = &v};
  CHECK_OK(ctx, sh_seqs_read(&ids, "0 4 1", 5, "i.txt", &io));
  CHECK_STATUS(ctx, sh_seqs_read(&ids, "0 4\n1 5", 7, "i.txt", &io), SHEAF_ERR_PARSE);
  CHECK_EQ_STR(sheaf_ctx_last_error(ctx),
               "i.txt:2:3: error: token id 5 is out of range: the vocabulary has 5 tokens");
  CHECK_EQ_INT(ids.n_seqs, 1); /* rolled back */
  sh_seqs_free(&ids);
  sh_seqs_free(&s);
  sh_vocab_free(&v);
}

static void expect_seqs_error(const char *text, sh_seqs_mode mode, const sh_vocab *v,
                              const char *want) {
  sheaf_ctx *ctx = th_ctx();
  sh_seqs s;
  sh_seqs_init(&s, ctx);
  sh_seqs_options o = {.mode = mode, .vocab = v};
  CHECK_STATUS(ctx, sh_seqs_read(&s, text, strlen(text), "s.txt", &o), SHEAF_ERR_PARSE);
  const char *err = sheaf_ctx_last_error(ctx);
  if (strcmp(err, want) != 0) th_fail(__FILE__, __LINE__, "got  \"%s\"\n  want \"%s\"", err, want);
  CHECK_EQ_SIZE(s.n_seqs, 0);
  CHECK_EQ_SIZE(s.n_tokens, 0);
  sh_seqs_free(&s);
}

TEST(seqs_errors_have_positions) {
  expect_seqs_error("1 2\n3 -4\n", SH_SEQS_AUTO, NULL,
                    "s.txt:2:3: error: negative token id -4: ids are non-negative");
  expect_seqs_error("1 2\n\n 3 2147483648\n", SH_SEQS_AUTO, NULL,
                    "s.txt:3:4: error: token id 2147483648 overflows: ids are at most 2147483647");
  expect_seqs_error("\n  7 8\n9 cat\n", SH_SEQS_AUTO, NULL,
                    "s.txt:3:3: error: 'cat' is not a token id: the file is read as ids since "
                    "its first token (2:3) is a number; ids and words cannot be mixed");
  expect_seqs_error("the cat\n", SH_SEQS_IDS, NULL,
                    "s.txt:1:1: error: 'the' is not a token id (a non-negative integer); ids "
                    "and words cannot be mixed");
  expect_seqs_error("-1 2\n", SH_SEQS_AUTO, NULL,
                    "s.txt:1:1: error: negative token id -1: ids are non-negative");
  sheaf_ctx *ctx = th_ctx();
  sh_vocab v;
  sh_vocab_init(&v, ctx);
  REQUIRE_OK(ctx, sh_vocab_load(&v, "the\ncat\n", 8, "v.txt"));
  expect_seqs_error("the cat\r\nthe\tdog\n", SH_SEQS_WORDS, &v,
                    "s.txt:2:5: error: unknown word 'dog': not in the vocabulary, which has no "
                    "<unk>");
  sh_vocab_free(&v);
  sh_seqs s;
  sh_seqs_init(&s, ctx);
  CHECK_STATUS(ctx, sh_seqs_read(&s, "1\n2\0", 4, "z.txt", NULL), SHEAF_ERR_PARSE);
  CHECK_EQ_STR(sheaf_ctx_last_error(ctx),
               "z.txt:2:2: error: NUL byte: text input cannot hold NUL bytes");
  sh_seqs_free(&s);
}

TEST(seqs_reader_survives_every_allocation_failure) {
  sheaf_ctx *ctx = th_ctx();
  char text[8192];
  size_t len = 0;
  for (int i = 0; i < 200; i++)
    len += (size_t)snprintf(text + len, sizeof text - len, "w%d x y%d\n\n", i % 50, i);
  for (long n = 1; n < 200; n++) {
    sh_seqs s;
    sh_seqs_init(&s, ctx);
    th_fail_alloc_at(n);
    sheaf_status st = sh_seqs_read(&s, text, len, "t.txt", NULL);
    th_fail_alloc_at(0);
    if (st == SHEAF_OK) {
      CHECK_EQ_SIZE(s.n_seqs, 200);
      CHECK_EQ_SIZE(s.n_empty_lines, 200);
      sh_seqs_free(&s);
      return;
    }
    CHECK_EQ_INT(st, SHEAF_ERR_NOMEM);
    sh_seqs_free(&s);
  }
  th_fail(__FILE__, __LINE__, "reading never succeeded within the allowed attempts");
}

TEST(stats_dist_nearest_rank_percentiles) {
  sheaf_ctx *ctx = th_ctx();
  sh_dist d;
  const int32_t four[4] = {4, 1, 3, 2};
  REQUIRE_OK(ctx, sh_dist_compute(ctx, four, 4, &d));
  CHECK_EQ_INT(d.min, 1);
  CHECK_EQ_INT(d.max, 4);
  CHECK_EQ_INT(d.median, 2); /* lower middle */
  CHECK_EQ_INT(d.p90, 4);
  CHECK_EQ_INT(d.total, 10);
  CHECK_NEAR(d.mean, 2.5, 1e-12);
  CHECK_EQ_SIZE(d.n_bins, 4);
  sh_dist_free(ctx, &d);
  int32_t ten[10];
  for (int i = 0; i < 10; i++) ten[i] = 10 - i; /* 1..10 */
  REQUIRE_OK(ctx, sh_dist_compute(ctx, ten, 10, &d));
  CHECK_EQ_INT(d.median, 5);
  CHECK_EQ_INT(d.p90, 9);
  CHECK_EQ_INT(sh_dist_percentile(&d, 100), 10);
  CHECK_EQ_INT(sh_dist_percentile(&d, 1), 1);
  sh_dist_free(ctx, &d);
  /* a wide range takes the sorting path; bins stay exact */
  const int32_t wide[5] = {1000000000, 3, 3, -7, 3};
  REQUIRE_OK(ctx, sh_dist_compute(ctx, wide, 5, &d));
  CHECK_EQ_SIZE(d.n_bins, 3);
  CHECK_EQ_INT(d.bins[1].value, 3);
  CHECK_EQ_INT(d.bins[1].count, 3);
  CHECK_EQ_INT(d.median, 3);
  CHECK_EQ_INT(d.min, -7);
  sh_dist_free(ctx, &d);
  REQUIRE_OK(ctx, sh_dist_compute(ctx, NULL, 0, &d));
  CHECK_EQ_SIZE(d.count, 0);
  CHECK_EQ_INT(sh_dist_percentile(&d, 50), 0);
  sh_dist_free(ctx, &d);
}

TEST(stats_of_sequences) {
  sheaf_ctx *ctx = th_ctx();
  sh_seqs s;
  sh_seqs_init(&s, ctx);
  REQUIRE_OK(ctx, sh_seqs_read_file(&s, "tests/data/tokens_ids.txt", NULL));
  sh_seq_stats st;
  REQUIRE_OK(ctx, sh_seq_stats_compute(&s, &st));
  CHECK_EQ_INT(st.sequences, 3);
  CHECK_EQ_INT(st.tokens, 15);
  CHECK_EQ_INT(st.empty_lines, 1);
  CHECK_EQ_INT(st.distinct, 9); /* 1..9 */
  CHECK_EQ_INT(st.length.min, 3);
  CHECK_EQ_INT(st.length.median, 5);
  CHECK_EQ_INT(st.length.max, 7);
  sh_seq_stats_free(ctx, &st);
  sh_seqs_free(&s);
}
