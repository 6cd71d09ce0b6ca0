/*
 * test_binarize.c — dependency trees to binary and child-sum trees: exact
 * structure of known trees (as PTB strings), the absorption order, the
 * invariants over the whole EWT test split (2n-1 nodes, leaves spell
 * projective sentences, post-order, heights), long chains without
 * recursion, statistics of the split, allocation failure.
 */
#include <stdlib.h>

#include "base/buf.h"
#include "base/file.h"
#include "harness.h"
#include "io/binarize.h"
#include "io/ptb.h"
#include "io/stats.h"

#define EWT_TEST "data/ud_english_ewt/en_ewt-ud-test.conllu"

/* A word line: ID FORM UPOS HEAD DEPREL, other fields '_'. */
#define L(id, form, upos, head, rel) id "\t" form "\t_\t" upos "\t_\t_\t" head "\t" rel "\t_\t_\n"

/* Converts a CoNLL-U text and writes the trees, one per line, into out. */
static bool convert_text(const char *conllu, bool binary, char *out, size_t cap) {
  sheaf_ctx *ctx = th_ctx();
  sh_depbank db;
  sh_depbank_init(&db, ctx);
  sh_treebank tb;
  sh_tb_init(&tb, ctx);
  sh_buf b;
  sh_buf_init(&b, ctx);
  bool ok = CHECK_OK(ctx, sh_conllu_read(&db, conllu, strlen(conllu), "t.conllu")) &&
            CHECK_OK(ctx, binary ? sh_binarize(&db, &tb) : sh_childsum(&db, &tb)) &&
            CHECK_OK(ctx, sh_ptb_write(&tb, &b));
  snprintf(out, cap, "%s", sh_buf_cstr(&b));
  sh_buf_free(&b);
  sh_tb_free(&tb);
  sh_depbank_free(&db);
  return ok;
}

static bool convert_file(const char *path, bool binary, char *out, size_t cap) {
  sheaf_ctx *ctx = th_ctx();
  char *data;
  size_t size;
  if (!CHECK_OK(ctx, sh_file_read(ctx, path, &data, &size))) return false;
  bool ok = convert_text(data, binary, out, cap);
  sh_free(ctx, data, size + 1);
  return ok;
}

TEST(binarize_known_trees_exactly) {
  char out[2048];
  REQUIRE(convert_file("tests/data/small.conllu", true, out, sizeof out));
  CHECK_EQ_STR(out,
               /* The cat sat . */
               "(nsubj (det (DET The) (NOUN cat)) (punct (VERB sat) (PUNCT .)))\n"
               /* Do n't go . : right dependent first, then lefts nearest first */
               "(aux (AUX Do) (advmod (PART n't) (punct (VERB go) (PUNCT .))))\n"
               /* non-projective: "on the issue" travels with "hearing" */
               "(nsubj (det (DET A) (nmod (NOUN hearing) (pobj (ADP on) (det (DET the) "
               "(NOUN issue))))) (aux (AUX is) (obl (VERB scheduled) (NOUN today))))\n");
}

TEST(binarize_absorbs_rights_nearest_first_then_lefts_nearest_first) {
  const char *c = L("1", "a", "X", "3", "la") L("2", "b", "X", "3", "lb")
      L("3", "H", "X", "0", "root") L("4", "c", "X", "3", "rc") L("5", "d", "X", "3", "rd");
  char out[512];
  REQUIRE(convert_text(c, true, out, sizeof out));
  CHECK_EQ_STR(out, "(la (X a) (lb (X b) (rd (rc (X H) (X c)) (X d))))\n");
  /* a one-word sentence is a single leaf */
  REQUIRE(convert_text(L("1", "Hi", "INTJ", "0", "root"), true, out, sizeof out));
  CHECK_EQ_STR(out, "(INTJ Hi)\n");
  /* parentheses in words are escaped on the way out */
  REQUIRE(convert_text(L("1", "(", "PUNCT", "2", "punct") L("2", "x", "X", "0", "root"), true,
                       out, sizeof out));
  CHECK_EQ_STR(out, "(punct (PUNCT -LRB-) (X x))\n");
}

TEST(childsum_known_trees_exactly) {
  char out[2048];
  REQUIRE(convert_file("tests/data/small.conllu", false, out, sizeof out));
  CHECK_EQ_STR(out, "(root sat (nsubj cat (det The)) (punct .))\n"
                    "(root go (aux Do) (advmod n't) (punct .))\n"
                    "(root scheduled (nsubj hearing (det A) (nmod on (pobj issue (det the)))) "
                    "(aux is) (obl today))\n");
  const char *c = L("1", "a", "X", "3", "la") L("2", "b", "X", "3", "lb")
      L("3", "H", "X", "0", "root") L("4", "c", "X", "3", "rc") L("5", "d", "X", "3", "rd");
  REQUIRE(convert_text(c, false, out, sizeof out));
  CHECK_EQ_STR(out, "(root H (la a) (lb b) (rc c) (rd d))\n");
}

/* Every node after its descendants, subtrees contiguous: post-order. */
static bool is_post_order(const sh_treebank *tb, int32_t t, int32_t *size) {
  int32_t first = tb->tree_first[t], end = first + tb->tree_size[t];
  for (int32_t n = first; n < end; n++) {
    int32_t s = 1, expect_start = n;
    for (int32_t i = tb->n_children[n]; i-- > 0;) {
      int32_t c = sh_tb_child(tb, n, i);
      if (c != expect_start - 1) return false; /* last child right before n, ... */
      s += size[c];
      expect_start = c - size[c] + 1;
    }
    size[n] = s;
  }
  return size[end - 1] == tb->tree_size[t] && tb->tree_root[t] == end - 1;
}

TEST(binarize_ewt_invariants) {
  sheaf_ctx *ctx = th_ctx();
  sh_depbank db;
  sh_depbank_init(&db, ctx);
  REQUIRE_OK(ctx, sh_conllu_read_file(&db, EWT_TEST));
  sh_treebank tb, cs;
  sh_tb_init(&tb, ctx);
  sh_tb_init(&cs, ctx);
  REQUIRE_OK(ctx, sh_binarize(&db, &tb));
  REQUIRE_OK(ctx, sh_childsum(&db, &cs));
  REQUIRE_EQ_INT(tb.n_trees, 2077);
  CHECK_EQ_INT(tb.n_nodes, 2 * 25094 - 2077);
  CHECK_EQ_INT(cs.n_nodes, 25094);
  int32_t *h = malloc(sizeof(int32_t) * (size_t)tb.n_nodes);
  int32_t *size = malloc(sizeof(int32_t) * (size_t)tb.n_nodes);
  REQUIRE(h && size);
  sh_tb_heights(&tb, h);
  sh_dep_work w;
  sh_dep_work_init(&w, ctx);
  int spelled = 0, bad_shape = 0, bad_height = 0, bad_order = 0;
  for (int32_t s = 0; s < db.n_sents; s++) {
    const sh_dep_sentence *sent = &db.sents[s];
    int32_t first = tb.tree_first[s], k = 0;
    bool same = true;
    if (tb.tree_size[s] != 2 * sent->len - 1) bad_shape++;
    for (int32_t n = first; n < first + tb.tree_size[s]; n++) {
      bool leaf = tb.n_children[n] == 0;
      if (leaf != (tb.word[n] >= 0) || (!leaf && tb.n_children[n] != 2)) bad_shape++;
      if (leaf && k < sent->len) {
        const char *want = sh_vocab_str(&db.forms, db.tokens[sent->first + k++].form);
        if (strcmp(sh_vocab_str(&tb.words, tb.word[n]), want) != 0) same = false;
      }
    }
    if (sent->projective) spelled += same;
    int32_t bh = 0;
    REQUIRE_OK(ctx, sh_binarized_height(&db, s, &w, &bh));
    if (bh != h[tb.tree_root[s]]) bad_height++;
    if (!is_post_order(&tb, s, size) || !is_post_order(&cs, s, size)) bad_order++;
  }
  CHECK_EQ_INT(spelled, 2077 - 26); /* every projective tree reads as its sentence */
  CHECK_EQ_INT(bad_shape, 0);
  CHECK_EQ_INT(bad_height, 0);
  CHECK_EQ_INT(bad_order, 0);
  /* child-sum: one node per word, heights = dependency depths */
  sh_tb_heights(&cs, h);
  int bad_depth = 0;
  for (int32_t s = 0; s < cs.n_trees; s++) bad_depth += h[cs.tree_root[s]] != db.sents[s].depth;
  CHECK_EQ_INT(bad_depth, 0);
  sh_dep_work_free(&w);
  free(h);
  free(size);
  sh_tb_free(&cs);
  sh_tb_free(&tb);
  sh_depbank_free(&db);
}

/* A chain as deep as the data limit (each word's head is the next word):
 * read, binarized (2N - 1 nodes, N levels), converted to child-sum, measured
 * and written without recursion. One level more is refused when read. */
TEST(binarize_long_chain_without_recursion) {
  sheaf_ctx *ctx = th_ctx();
  enum { N = SH_TB_MAX_DEPTH };
  sh_buf b;
  sh_buf_init(&b, ctx);
  for (int i = 1; i <= N; i++)
    sh_buf_printf(&b, "%d\tw%d\t_\tX\t_\t_\t%d\tdep\t_\t_\n", i, i % 10, i == N ? 0 : i + 1);
  REQUIRE_OK(ctx, sh_buf_status(&b));
  sh_depbank db;
  sh_depbank_init(&db, ctx);
  REQUIRE_OK(ctx, sh_conllu_read(&db, (const char *)b.data, b.len, "chain.conllu"));
  CHECK_EQ_INT(db.sents[0].depth, N);
  sh_treebank tb;
  sh_tb_init(&tb, ctx);
  REQUIRE_OK(ctx, sh_binarize(&db, &tb));
  REQUIRE_OK(ctx, sh_childsum(&db, &tb));
  CHECK_EQ_INT(tb.n_nodes, 2 * N - 1 + N);
  sh_tb_stats st;
  REQUIRE_OK(ctx, sh_tb_stats_compute(&tb, &st));
  CHECK_EQ_INT(st.depth.min, N);
  CHECK_EQ_INT(st.depth.max, N);
  sh_tb_stats_free(ctx, &st);
  sh_buf_clear(&b);
  CHECK_OK(ctx, sh_ptb_write(&tb, &b)); /* the writer is iterative too */
  sh_tb_free(&tb);
  sh_depbank_free(&db);
  /* N + 1 levels: over the limit */
  sh_buf_clear(&b);
  for (int i = 1; i <= N + 1; i++)
    sh_buf_printf(&b, "%d\tw%d\t_\tX\t_\t_\t%d\tdep\t_\t_\n", i, i % 10, i == N + 1 ? 0 : i + 1);
  sh_depbank_init(&db, ctx);
  CHECK_STATUS(ctx, sh_conllu_read(&db, (const char *)b.data, b.len, "chain.conllu"), SHEAF_ERR_PARSE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "10001 levels deep");
  sh_depbank_free(&db);
  sh_buf_free(&b);
}

TEST(stats_of_the_ewt_test_split) {
  sheaf_ctx *ctx = th_ctx();
  sh_depbank db;
  sh_depbank_init(&db, ctx);
  REQUIRE_OK(ctx, sh_conllu_read_file(&db, EWT_TEST));
  sh_dep_stats s;
  REQUIRE_OK(ctx, sh_dep_stats_compute(&db, &s));
  CHECK_EQ_INT(s.sentences, 2077);
  CHECK_EQ_INT(s.words, 25094);
  CHECK_EQ_INT(s.length.total, 25094);
  CHECK_EQ_INT(s.length.min, 1);
  CHECK_EQ_INT(s.length.median, 9);
  CHECK_EQ_INT(s.length.p90, 26);
  CHECK_EQ_INT(s.length.max, 81);
  CHECK_NEAR(s.length.mean, 25094.0 / 2077, 1e-9);
  CHECK_EQ_INT(s.depth.median, 4);
  CHECK_EQ_INT(s.depth.max, 13);
  CHECK_EQ_INT(s.bin_depth.median, 8);
  CHECK_EQ_INT(s.bin_depth.p90, 16);
  CHECK_EQ_INT(s.bin_depth.max, 44);
  CHECK_NEAR(s.bin_depth.mean, 8.52, 0.005);
  int64_t in_bins = 0;
  for (size_t i = 0; i < s.bin_depth.n_bins; i++) in_bins += s.bin_depth.bins[i].count;
  CHECK_EQ_INT(in_bins, 2077);
  CHECK_EQ_INT(s.bin_depth.bins[0].value, 1); /* one-word sentences */
  sh_dep_stats_free(ctx, &s);
  sh_depbank_free(&db);
}

TEST(binarize_survives_every_allocation_failure) {
  sheaf_ctx *ctx = th_ctx();
  sh_depbank db;
  sh_depbank_init(&db, ctx);
  REQUIRE_OK(ctx, sh_conllu_read_file(&db, "tests/data/small.conllu"));
  for (int binary = 0; binary < 2; binary++) {
    long n;
    for (n = 1; n < 200; n++) {
      sh_treebank tb;
      sh_tb_init(&tb, ctx);
      th_fail_alloc_at(n);
      sheaf_status st = binary ? sh_binarize(&db, &tb) : sh_childsum(&db, &tb);
      th_fail_alloc_at(0);
      if (st == SHEAF_OK) {
        CHECK_EQ_INT(tb.n_trees, 3);
        sh_tb_free(&tb);
        break;
      }
      CHECK_EQ_INT(st, SHEAF_ERR_NOMEM);
      CHECK_EQ_INT(tb.n_trees, 0);
      CHECK_EQ_INT(tb.n_nodes, 0);
      sh_tb_free(&tb);
    }
    CHECK(n < 200);
  }
  for (long n = 1; n < 300; n++) { /* statistics too */
    sh_dep_stats s;
    th_fail_alloc_at(n);
    sheaf_status st = sh_dep_stats_compute(&db, &s);
    th_fail_alloc_at(0);
    if (st == SHEAF_OK) {
      CHECK_EQ_INT(s.bin_depth.max, 6);
      sh_dep_stats_free(ctx, &s);
      break;
    }
    CHECK_EQ_INT(st, SHEAF_ERR_NOMEM);
  }
  sh_depbank_free(&db);
}
