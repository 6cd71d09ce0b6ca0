/*
 * test_vocab.c — string interning: dense ids, growth through many rehashes,
 * lookups by length, vocabulary files and their errors, allocation failure.
 */
#include <stdlib.h>

#include "harness.h"
#include "io/vocab.h"

TEST(vocab_interns_dense_ids_in_order) {
  sheaf_ctx *ctx = th_ctx();
  sh_vocab v;
  sh_vocab_init(&v, ctx);
  int32_t a, b, c, a2;
  REQUIRE_OK(ctx, sh_vocab_intern(&v, "the", 3, &a));
  REQUIRE_OK(ctx, sh_vocab_intern(&v, "cat", 3, &b));
  REQUIRE_OK(ctx, sh_vocab_intern(&v, "there", 3, &a2)); /* "the" again, by length */
  REQUIRE_OK(ctx, sh_vocab_intern(&v, "there", 5, &c));
  CHECK_EQ_INT(a, 0);
  CHECK_EQ_INT(b, 1);
  CHECK_EQ_INT(a2, 0);
  CHECK_EQ_INT(c, 2);
  CHECK_EQ_INT(sh_vocab_size(&v), 3);
  CHECK_EQ_STR(sh_vocab_str(&v, 2), "there");
  CHECK_EQ_SIZE(sh_vocab_len(&v, 2), 5);
  CHECK_EQ_INT(sh_vocab_find(&v, "cat", 3), 1);
  CHECK_EQ_INT(sh_vocab_find(&v, "ca", 2), -1);
  CHECK_EQ_INT(sh_vocab_find(&v, "dog", 3), -1);
  int32_t e;
  REQUIRE_OK(ctx, sh_vocab_intern(&v, "", 0, &e)); /* the empty string is a string */
  CHECK_EQ_INT(e, 3);
  CHECK_EQ_STR(sh_vocab_str(&v, e), "");
  sh_vocab_free(&v);
  sh_vocab_free(&v); /* idempotent */
}

TEST(vocab_grows_through_many_rehashes) {
  sheaf_ctx *ctx = th_ctx();
  sh_vocab v;
  sh_vocab_init(&v, ctx);
  CHECK_EQ_INT(sh_vocab_find(&v, "x", 1), -1); /* empty table */
  char s[32];
  enum { N = 100000 };
  for (int i = 0; i < N; i++) {
    int n = snprintf(s, sizeof s, "w%d", i * 7919);
    int32_t id;
    REQUIRE_OK(ctx, sh_vocab_intern(&v, s, (size_t)n, &id));
    REQUIRE_EQ_INT(id, i);
  }
  CHECK_EQ_INT(sh_vocab_size(&v), N);
  for (int i = 0; i < N; i += 37) {
    int n = snprintf(s, sizeof s, "w%d", i * 7919);
    REQUIRE_EQ_INT(sh_vocab_find(&v, s, (size_t)n), i);
    CHECK_EQ_STR(sh_vocab_str(&v, i), s);
  }
  /* a string longer than a chunk gets a chunk of its own */
  size_t big = 200000;
  char *long_s = malloc(big);
  REQUIRE(long_s != NULL);
  memset(long_s, 'q', big);
  int32_t id;
  CHECK_OK(ctx, sh_vocab_intern(&v, long_s, big, &id));
  CHECK_EQ_INT(id, N);
  CHECK_EQ_INT(sh_vocab_find(&v, long_s, big), N);
  int32_t after;
  CHECK_OK(ctx, sh_vocab_intern(&v, "after", 5, &after));
  CHECK_EQ_STR(sh_vocab_str(&v, after), "after");
  CHECK_EQ_SIZE(sh_vocab_len(&v, id), big);
  free(long_s);
  sh_vocab_free(&v);
}

TEST(vocab_file_gives_line_index_ids) {
  sheaf_ctx *ctx = th_ctx();
  sh_vocab v;
  sh_vocab_init(&v, ctx);
  const char *text = "<unk>\r\nthe\ncat\ndog"; /* CRLF and no final newline */
  REQUIRE_OK(ctx, sh_vocab_load(&v, text, strlen(text), "v.txt"));
  CHECK_EQ_INT(sh_vocab_size(&v), 4);
  CHECK_EQ_INT(sh_vocab_find(&v, "<unk>", 5), 0);
  CHECK_EQ_INT(sh_vocab_find(&v, "dog", 3), 3);
  sh_vocab_free(&v);
  sh_vocab_init(&v, ctx);
  REQUIRE_OK(ctx, sh_vocab_load_file(&v, "tests/data/vocab.txt"));
  CHECK_EQ_INT(sh_vocab_size(&v), 5);
  CHECK_EQ_INT(sh_vocab_find(&v, "sat", 3), 4);
  sh_vocab_free(&v);
}

static void expect_vocab_error(const char *text, const char *want) {
  sheaf_ctx *ctx = th_ctx();
  sh_vocab v;
  sh_vocab_init(&v, ctx);
  CHECK_STATUS(ctx, sh_vocab_load(&v, text, strlen(text), "v.txt"), SHEAF_ERR_PARSE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), want);
  CHECK(strncmp(sheaf_ctx_last_error(ctx), want, strlen(want)) == 0);
  sh_vocab_free(&v);
}

TEST(vocab_file_errors_have_positions) {
  expect_vocab_error("a\nb\na\n", "v.txt:3:1: error: token 'a' already appeared (as id 0, line 1)");
  expect_vocab_error("a\n\nb\n", "v.txt:2:1: error: empty line");
  expect_vocab_error("a\nb c\n", "v.txt:2:2: error: a vocabulary token cannot contain a space");
  expect_vocab_error("a\nbc\td\n", "v.txt:2:3: error: a vocabulary token cannot contain a TAB");
  sheaf_ctx *ctx = th_ctx();
  sh_vocab v;
  sh_vocab_init(&v, ctx);
  CHECK_STATUS(ctx, sh_vocab_load(&v, "a\nb\0c\n", 6, "v.txt"), SHEAF_ERR_PARSE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "v.txt:2:2: error: NUL byte");
  CHECK_STATUS(ctx, sh_vocab_load_file(&v, "tests/data/no-such-vocab.txt"), SHEAF_ERR_IO);
  sh_vocab_free(&v);
}

TEST(vocab_survives_every_allocation_failure) {
  sheaf_ctx *ctx = th_ctx();
  char text[4096];
  size_t len = 0;
  for (int i = 0; i < 300; i++) len += (size_t)snprintf(text + len, sizeof text - len, "t%d\n", i);
  for (long n = 1; n < 100; n++) {
    sh_vocab v;
    sh_vocab_init(&v, ctx);
    th_fail_alloc_at(n);
    sheaf_status st = sh_vocab_load(&v, text, len, "v.txt");
    th_fail_alloc_at(0);
    if (st == SHEAF_OK) {
      CHECK_EQ_INT(sh_vocab_size(&v), 300);
      sh_vocab_free(&v);
      return;
    }
    CHECK_EQ_INT(st, SHEAF_ERR_NOMEM);
    sh_vocab_free(&v); /* the leak check at the end of the test covers this */
  }
  th_fail(__FILE__, __LINE__, "loading never succeeded within the allowed attempts");
}
