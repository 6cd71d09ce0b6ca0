/*
 * test_data_reliability.c — hostile data and weights at read time (issues
 * 19 and 20): the one tree-depth limit (SH_TB_MAX_DEPTH) in CoNLL-U, PTB,
 * binarization and child-sum conversion, on generated 1,000,000-deep chains
 * and 1,000,000-wide nodes through the readers, the model loaders and the
 * `sheaf data` commands; token ids beyond the vocabulary (the default
 * --max-vocab, --max-vocab N, the weights' rows; no overflow at INT32_MAX);
 * NaN/Inf weights refused at load with the tensor and index
 * (--allow-nonfinite to override) and counted by `data stats`.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "harness.h"
#include "io/binarize.h"
#include "io/conllu.h"
#include "io/dataset.h"
#include "io/ptb.h"
#include "io/seqs.h"
#include "io/stats.h"

#define MILLION 1000000

static char g_out[1 << 16];

/* Runs `sheaf ARGS`; returns the exit status (output in g_out). */
static int sheaf(const char *args) {
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "%s %s", th_sheaf_bin(), args);
  return th_run(cmd, g_out, sizeof g_out);
}

#define NEED_BIN() \
  do {             \
    if (!th_sheaf_bin()) return; /* runner started without SHEAF_BIN */ \
  } while (0)

/* ------------------------------------------------------------ generators */

/* One sentence of n words: a chain (word i's head is i - 1: depth n) or a
 * star (every word's head is word 1: depth 2, word 1 has n - 1 dependents,
 * binarized depth n). */
static void conllu_chain(sh_buf *b, int n) {
  for (int i = 1; i <= n; i++) sh_buf_printf(b, "%d\tw\t_\tX\t_\t_\t%d\td\t_\t_\n", i, i - 1);
  sh_buf_puts(b, "\n");
}

static void conllu_star(sh_buf *b, int n) {
  for (int i = 1; i <= n; i++)
    sh_buf_printf(b, "%d\tw%d\t_\tX\t_\t_\t%d\td\t_\t_\n", i, i % 100, i == 1 ? 0 : 1);
  sh_buf_puts(b, "\n");
}

/* A PTB tree n levels deep: (X (X ... (X w) ...)). */
static void ptb_chain(sh_buf *b, int n) {
  for (int i = 0; i < n; i++) sh_buf_puts(b, i + 1 < n ? "(X " : "(X w");
  for (int i = 0; i < n; i++) sh_buf_putc(b, ')');
  sh_buf_putc(b, '\n');
}

/* A PTB root with n leaves: (R (X a) (X a) ...). */
static void ptb_star(sh_buf *b, int n) {
  sh_buf_puts(b, "(R");
  for (int i = 0; i < n; i++) sh_buf_puts(b, " (X a)");
  sh_buf_puts(b, ")\n");
}

typedef void (*gen_fn)(sh_buf *b, int n);

/* The generated text as a temporary file (path copied into out). */
static bool gen_file(sheaf_ctx *ctx, gen_fn gen, int n, const char *name, char *out, size_t cap) {
  sh_buf b;
  sh_buf_init(&b, ctx);
  gen(&b, n);
  bool ok = sh_buf_status(&b) == SHEAF_OK;
  const char *p = ok ? th_write_tmp(name, b.data, b.len) : NULL;
  sh_buf_free(&b);
  if (!p) return false;
  snprintf(out, cap, "%s", p);
  return true;
}

/* ------------------------------------------------------ CoNLL-U: depth */

TEST(data_rel_conllu_depth_limit_at_read) {
  sheaf_ctx *ctx = th_ctx();
  CHECK_EQ_INT(SH_TB_MAX_DEPTH, 10000);
  CHECK_EQ_INT(SH_PTB_MAX_DEPTH, SH_TB_MAX_DEPTH); /* one limit for every format */
  sh_depbank db;
  sh_depbank_init(&db, ctx);
  sh_buf b;
  sh_buf_init(&b, ctx);
  /* at the limit: read, binarized and converted (all iteratively) */
  conllu_chain(&b, SH_TB_MAX_DEPTH);
  REQUIRE_OK(ctx, sh_conllu_read(&db, (const char *)b.data, b.len, "limit.conllu"));
  CHECK_EQ_INT(db.sents[0].depth, SH_TB_MAX_DEPTH);
  sh_treebank tb;
  sh_tb_init(&tb, ctx);
  CHECK_OK(ctx, sh_binarize(&db, &tb));
  CHECK_OK(ctx, sh_childsum(&db, &tb));
  CHECK_EQ_INT(tb.n_trees, 2);
  sh_tb_stats ts;
  if (CHECK_OK(ctx, sh_tb_stats_compute(&tb, &ts))) {
    CHECK_EQ_INT(ts.depth.min, SH_TB_MAX_DEPTH);
    CHECK_EQ_INT(ts.depth.max, SH_TB_MAX_DEPTH);
    sh_tb_stats_free(ctx, &ts);
  }
  /* what binarize writes reads back */
  sh_buf_clear(&b);
  CHECK_OK(ctx, sh_ptb_write(&tb, &b));
  sh_treebank back;
  sh_tb_init(&back, ctx);
  CHECK_OK(ctx, sh_ptb_read(&back, (const char *)b.data, b.len, "written.ptb"));
  CHECK_EQ_INT(back.n_nodes, tb.n_nodes);
  sh_tb_free(&back);
  sh_tb_free(&tb);
  /* one level more: refused at the sentence's first line, with the depth;
   * the bank keeps what it had */
  int32_t n_sents = db.n_sents, n_tokens = db.n_tokens;
  sh_buf_clear(&b);
  sh_buf_puts(&b, "# one comment line\n");
  conllu_chain(&b, SH_TB_MAX_DEPTH + 1);
  CHECK_STATUS(ctx, sh_conllu_read(&db, (const char *)b.data, b.len, "deep.conllu"),
               SHEAF_ERR_PARSE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "deep.conllu:2:1: error: ");
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "is 10001 levels deep");
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "limit of 10000 levels");
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "word 10001, line 10002, is the first at level 10001");
  CHECK_EQ_INT(db.n_sents, n_sents);
  CHECK_EQ_INT(db.n_tokens, n_tokens);
  /* 1,000,000 deep (a cycle-free chain written backwards: the root last) */
  sh_buf_clear(&b);
  for (int i = 1; i <= MILLION; i++)
    sh_buf_printf(&b, "%d\tw\t_\tX\t_\t_\t%d\td\t_\t_\n", i, i == MILLION ? 0 : i + 1);
  REQUIRE_OK(ctx, sh_buf_status(&b));
  CHECK_STATUS(ctx, sh_conllu_read(&db, (const char *)b.data, b.len, "million.conllu"),
               SHEAF_ERR_PARSE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "million.conllu:1:1: error: ");
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "is 1000000 levels deep");
  /* word 990000 is at depth 10001 counted from the root (word 1000000) */
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "word 990000, line 990000");
  CHECK_EQ_INT(db.n_sents, n_sents);
  sh_buf_free(&b);
  sh_depbank_free(&db);
}

/* A head with many dependents: the dependency tree is shallow (reads, and
 * converts to child-sum form) but the binary tree is as deep as the head has
 * dependents: binarize refuses past the limit, stats still measure it. */
TEST(data_rel_conllu_wide_node_binarize_limit) {
  sheaf_ctx *ctx = th_ctx();
  sh_buf b;
  sh_buf_init(&b, ctx);
  sh_buf_puts(&b, "1\ta\t_\tX\t_\t_\t0\troot\t_\t_\n\n"); /* a first sentence */
  conllu_star(&b, SH_TB_MAX_DEPTH);      /* binarized depth 10000: fine */
  conllu_star(&b, SH_TB_MAX_DEPTH + 1);  /* 10001: refused */
  REQUIRE_OK(ctx, sh_buf_status(&b));
  sh_depbank db;
  sh_depbank_init(&db, ctx);
  REQUIRE_OK(ctx, sh_conllu_read(&db, (const char *)b.data, b.len, "wide.conllu"));
  REQUIRE_EQ_INT(db.n_sents, 3);
  CHECK_EQ_INT(db.sents[2].depth, 2);
  sh_dep_work w;
  sh_dep_work_init(&w, ctx);
  int32_t h = 0;
  CHECK_OK(ctx, sh_binarized_height(&db, 1, &w, &h));
  CHECK_EQ_INT(h, SH_TB_MAX_DEPTH);
  CHECK_OK(ctx, sh_binarized_height(&db, 2, &w, &h));
  CHECK_EQ_INT(h, SH_TB_MAX_DEPTH + 1);
  sh_dep_work_free(&w);
  sh_treebank tb;
  sh_tb_init(&tb, ctx);
  CHECK_STATUS(ctx, sh_binarize(&db, &tb), SHEAF_ERR_PARSE);
  /* named by file and the sentence's first line (1 + 2 + 10000 + 1 + 1) */
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "wide.conllu:10004:1: error: binarized, this "
                                            "sentence (10001 words, dependency depth 2) would "
                                            "be a tree 10001 levels deep");
  CHECK_EQ_INT(tb.n_trees, 0); /* nothing kept from the failed call */
  CHECK_EQ_INT(tb.n_nodes, 0);
  CHECK_OK(ctx, sh_childsum(&db, &tb)); /* width is not limited */
  CHECK_EQ_INT(tb.n_trees, 3);
  sh_dep_stats ds;
  if (CHECK_OK(ctx, sh_dep_stats_compute(&db, &ds))) {
    CHECK_EQ_INT(ds.bin_depth.max, SH_TB_MAX_DEPTH + 1);
    CHECK_EQ_INT(ds.bin_too_deep, 1);
    CHECK_EQ_INT(ds.depth.max, 2);
    sh_dep_stats_free(ctx, &ds);
  }
  sh_tb_free(&tb);
  sh_depbank_free(&db);
  /* 1,000,000 wide */
  sh_buf_clear(&b);
  conllu_star(&b, MILLION);
  REQUIRE_OK(ctx, sh_buf_status(&b));
  sh_depbank_init(&db, ctx);
  REQUIRE_OK(ctx, sh_conllu_read(&db, (const char *)b.data, b.len, "million.conllu"));
  sh_tb_init(&tb, ctx);
  CHECK_STATUS(ctx, sh_binarize(&db, &tb), SHEAF_ERR_PARSE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "million.conllu:1:1: error: ");
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "1000000 levels deep");
  REQUIRE_OK(ctx, sh_childsum(&db, &tb));
  CHECK_EQ_INT(tb.n_nodes, MILLION);
  CHECK_EQ_INT(tb.n_children[tb.tree_root[0]], MILLION - 1);
  sh_buf_clear(&b); /* the child-sum form is written and reads back */
  CHECK_OK(ctx, sh_ptb_write(&tb, &b));
  sh_treebank back;
  sh_tb_init(&back, ctx);
  CHECK_OK(ctx, sh_ptb_read(&back, (const char *)b.data, b.len, "cs.ptb"));
  CHECK_EQ_INT(back.n_nodes, MILLION);
  sh_tb_free(&back);
  sh_tb_free(&tb);
  sh_depbank_free(&db);
  sh_buf_free(&b);
}

/* ------------------------------------------------------------ PTB */

TEST(data_rel_ptb_deep_and_wide) {
  sheaf_ctx *ctx = th_ctx();
  sh_buf b;
  sh_buf_init(&b, ctx);
  sh_treebank tb;
  sh_tb_init(&tb, ctx);
  ptb_chain(&b, SH_TB_MAX_DEPTH);
  REQUIRE_OK(ctx, sh_ptb_read(&tb, (const char *)b.data, b.len, "limit.ptb"));
  int32_t *hs = malloc(sizeof(int32_t) * ((size_t)tb.n_nodes + 1));
  REQUIRE(hs);
  sh_tb_heights(&tb, hs);
  CHECK_EQ_INT(hs[tb.tree_root[0]], SH_TB_MAX_DEPTH);
  free(hs);
  sh_buf_clear(&b);
  ptb_chain(&b, MILLION);
  CHECK_STATUS(ctx, sh_ptb_read(&tb, (const char *)b.data, b.len, "deep.ptb"), SHEAF_ERR_PARSE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "deep.ptb:1:30001: error: trees nested deeper than "
                                            "10000 levels");
  CHECK_EQ_INT(tb.n_trees, 1);
  sh_buf_clear(&b);
  ptb_star(&b, MILLION);
  REQUIRE_OK(ctx, sh_ptb_read(&tb, (const char *)b.data, b.len, "wide.ptb"));
  CHECK_EQ_INT(tb.n_trees, 2);
  CHECK_EQ_INT(tb.n_children[tb.tree_root[1]], MILLION);
  sh_tb_free(&tb);
  sh_buf_free(&b);
}

/* The loaders the models use (sh_dataset): clear errors or correct data. */
TEST(data_rel_model_loaders_deep_and_wide) {
  sheaf_ctx *ctx = th_ctx();
  char chain[512], star[512], pchain[512], pstar[512];
  REQUIRE(gen_file(ctx, conllu_chain, MILLION, "chain.conllu", chain, sizeof chain));
  REQUIRE(gen_file(ctx, conllu_star, MILLION, "star.conllu", star, sizeof star));
  REQUIRE(gen_file(ctx, ptb_chain, MILLION, "chain.ptb", pchain, sizeof pchain));
  REQUIRE(gen_file(ctx, ptb_star, MILLION, "star.ptb", pstar, sizeof pstar));
  sh_dataset d;
  for (int k = SH_DATASET_BINARY; k <= SH_DATASET_SENTS; k++) {
    CHECK_STATUS(ctx, sh_dataset_load(ctx, chain, (sh_dataset_kind)k, &d), SHEAF_ERR_PARSE);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "chain.conllu:1:1: error: the dependency tree");
  }
  CHECK_STATUS(ctx, sh_dataset_load(ctx, star, SH_DATASET_BINARY, &d), SHEAF_ERR_PARSE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "star.conllu:1:1: error: binarized");
  if (CHECK_OK(ctx, sh_dataset_load(ctx, star, SH_DATASET_CHILDSUM, &d))) {
    CHECK_EQ_INT(d.tb.n_nodes, MILLION);
    sh_dataset_free(&d);
  }
  if (CHECK_OK(ctx, sh_dataset_load(ctx, star, SH_DATASET_SENTS, &d))) {
    CHECK_EQ_INT(d.n_tokens, MILLION);
    sh_dataset_free(&d);
  }
  CHECK_STATUS(ctx, sh_dataset_load(ctx, pchain, SH_DATASET_BINARY, &d), SHEAF_ERR_PARSE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "trees nested deeper than 10000 levels");
  CHECK_STATUS(ctx, sh_dataset_load(ctx, pchain, SH_DATASET_CHILDSUM, &d), SHEAF_ERR_PARSE);
  CHECK_STATUS(ctx, sh_dataset_load(ctx, pstar, SH_DATASET_BINARY, &d), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "is not binary (a node with 1000000 children)");
  if (CHECK_OK(ctx, sh_dataset_load(ctx, pstar, SH_DATASET_CHILDSUM, &d))) {
    CHECK_EQ_INT(d.tb.n_nodes, MILLION + 1);
    sh_dataset_free(&d);
  }
  remove(chain);
  remove(star);
  remove(pchain);
  remove(pstar);
}

/* The `sheaf data` commands on the same inputs: exit 1 with a positioned
 * message, or the right numbers; never a crash. */
TEST(data_rel_cli_data_deep_and_wide) {
  NEED_BIN();
  sheaf_ctx *ctx = th_ctx();
  char chain[512], star[512], pchain[512], pstar[512], args[2048];
  REQUIRE(gen_file(ctx, conllu_chain, MILLION, "cchain.conllu", chain, sizeof chain));
  REQUIRE(gen_file(ctx, conllu_star, MILLION, "cstar.conllu", star, sizeof star));
  REQUIRE(gen_file(ctx, ptb_chain, MILLION, "cchain.ptb", pchain, sizeof pchain));
  REQUIRE(gen_file(ctx, ptb_star, MILLION, "cstar.ptb", pstar, sizeof pstar));
  const char *out = th_tmp_path("never.ptb");
  char outp[512];
  snprintf(outp, sizeof outp, "%s", out);
  remove(outp);
  /* the 1,000,000-deep chain: every command refuses it when reading */
  for (int i = 0; i < 3; i++) {
    if (i == 0) snprintf(args, sizeof args, "data stats %s", chain);
    else snprintf(args, sizeof args, "data binarize%s %s -o %s", i == 2 ? " --child-sum" : "", chain, outp);
    CHECK_EQ_INT(sheaf(args), 1);
    CHECK_CONTAINS(g_out, "cchain.conllu:1:1: error: the dependency tree of this sentence is "
                          "1000000 levels deep");
    CHECK(!strstr(g_out, "Segmentation") && !strstr(g_out, "Sanitizer"));
  }
  CHECK(fopen(outp, "r") == NULL); /* nothing written */
  /* the 1,000,000-wide node: stats measure it, binarize refuses, child-sum works */
  snprintf(args, sizeof args, "data stats %s", star);
  CHECK_EQ_INT(sheaf(args), 0);
  CHECK_CONTAINS(g_out, "words                 1000000\n");
  CHECK_CONTAINS(g_out, "too deep to binarize  1 (binarized deeper than 10000 levels");
  CHECK_CONTAINS(g_out, "binarized depth (leaf=1)             1 1000000 1000000.00 1000000 "
                        "1000000 1000000\n");
  snprintf(args, sizeof args, "data binarize %s -o %s", star, outp);
  CHECK_EQ_INT(sheaf(args), 1);
  CHECK_CONTAINS(g_out, "cstar.conllu:1:1: error: binarized, this sentence (1000000 words, "
                        "dependency depth 2) would be a tree 1000000 levels deep");
  CHECK(fopen(outp, "r") == NULL);
  snprintf(args, sizeof args, "data binarize --child-sum %s -o %s", star, outp);
  CHECK_EQ_INT(sheaf(args), 0);
  CHECK_EQ_STR(g_out, "");
  snprintf(args, sizeof args, "data stats %s", outp);
  CHECK_EQ_INT(sheaf(args), 0);
  CHECK_CONTAINS(g_out, "nodes                 1000000\n");
  CHECK_CONTAINS(g_out, "depth (leaf=1)                       1       2      2.00       2       "
                        "2       2\n");
  /* PTB: the deep chain refused, the wide node measured */
  snprintf(args, sizeof args, "data stats %s", pchain);
  CHECK_EQ_INT(sheaf(args), 1);
  CHECK_CONTAINS(g_out, "cchain.ptb:1:30001: error: trees nested deeper than 10000 levels");
  snprintf(args, sizeof args, "data stats %s", pstar);
  CHECK_EQ_INT(sheaf(args), 0);
  CHECK_CONTAINS(g_out, "leaves                1000000\n");
  /* the models that binarize refuse with the same message; the readers'
   * limit reaches every model (the C models and the .sf interpreter) */
  snprintf(args, sizeof args, "run treelstm --data %s --hidden 4 --embed 4 --threads 1", star);
  CHECK_EQ_INT(sheaf(args), 1);
  CHECK_CONTAINS(g_out, "cstar.conllu:1:1: error: binarized");
  snprintf(args, sizeof args, "run childsum --data %s --hidden 4 --embed 4 --threads 1", chain);
  CHECK_EQ_INT(sheaf(args), 1);
  CHECK_CONTAINS(g_out, "cchain.conllu:1:1: error: the dependency tree");
  snprintf(args, sizeof args,
           "run examples/treelstm.sf --data %s --size E=4 --size H=4 --size C=3 --threads 1", star);
  CHECK_EQ_INT(sheaf(args), 1);
  CHECK_CONTAINS(g_out, "cstar.conllu:1:1: error: binarized");
  snprintf(args, sizeof args,
           "run examples/treelstm.sf --data %s --size E=4 --size H=4 --size C=3 --threads 1",
           pchain);
  CHECK_EQ_INT(sheaf(args), 1);
  CHECK_CONTAINS(g_out, "trees nested deeper than 10000 levels");
  remove(chain);
  remove(star);
  remove(pchain);
  remove(pstar);
  remove(outp);
}

/* ------------------------------------------------------------ token ids */

TEST(data_rel_token_ids_beyond_the_vocabulary) {
  sheaf_ctx *ctx = th_ctx();
  static const char big[] = "1 2 3\n4 2000000000\n"; /* 19 bytes */
  char p[512];
  snprintf(p, sizeof p, "%s", th_write_tmp("big.txt", big, sizeof big - 1));
  sh_dataset d;
  CHECK_STATUS(ctx, sh_dataset_load(ctx, p, SH_DATASET_SENTS, &d), SHEAF_ERR_PARSE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "big.txt:2:3: error: token id 2000000000 is beyond "
                                            "the vocabulary: ids must be below 1000000 "
                                            "(--max-vocab, default 1000000)");
  /* INT32_MAX once overflowed (id + 1) into an 18 EB allocation */
  static const char max[] = "5 2147483647\n";
  snprintf(p, sizeof p, "%s", th_write_tmp("max.txt", max, sizeof max - 1));
  CHECK_STATUS(ctx, sh_dataset_load(ctx, p, SH_DATASET_SENTS, &d), SHEAF_ERR_PARSE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "max.txt:1:3: error: token id 2147483647 is beyond");
  sh_dataset_opts wide = {.max_vocab = INT32_MAX};
  CHECK_STATUS(ctx, sh_dataset_load_opts(ctx, p, SH_DATASET_SENTS, &wide, &d), SHEAF_ERR_PARSE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "max.txt:1:3: error: token id 2147483647 is beyond "
                                            "the vocabulary: ids must be below 2147483645");
  /* a limit given: ids below it load (the vocabulary is max id + 2 with <unk>) */
  static const char ok[] = "0 1 2\n2 1\n";
  snprintf(p, sizeof p, "%s", th_write_tmp("ok.txt", ok, sizeof ok - 1));
  sh_dataset_opts three = {.max_vocab = 3, .max_vocab_what = "the test's table"};
  if (CHECK_OK(ctx, sh_dataset_load_opts(ctx, p, SH_DATASET_SENTS, &three, &d))) {
    CHECK_EQ_INT(d.vocab, 4);
    sh_dataset_free(&d);
  }
  sh_dataset_opts two = {.max_vocab = 2, .max_vocab_what = "the test's table"};
  CHECK_STATUS(ctx, sh_dataset_load_opts(ctx, p, SH_DATASET_SENTS, &two, &d), SHEAF_ERR_PARSE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "ok.txt:1:5: error: token id 2 is beyond the "
                                            "vocabulary: ids must be below 2 (the test's table)");
  CHECK_OK(ctx, sh_dataset_check_ids(ctx, p, 3, "x"));
  CHECK_STATUS(ctx, sh_dataset_check_ids(ctx, p, 2, "x"), SHEAF_ERR_PARSE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "ok.txt:1:5: error: token id 2 is beyond");
  /* from memory, as the fuzzer reads */
  if (CHECK_OK(ctx, sh_dataset_load_mem(ctx, ok, sizeof ok - 1, "mem.txt", SH_DATASET_SENTS, NULL, &d))) {
    CHECK_EQ_INT(d.n_sents, 2);
    sh_dataset_free(&d);
  }
  /* ids added by hand (no reader): sh_dataset_finish refuses them too, and
   * INT32_MAX does not overflow */
  sh_dataset_init(&d, ctx, SH_DATASET_SENTS);
  int32_t w[2] = {1, INT32_MAX};
  REQUIRE_OK(ctx, sh_dataset_add_sent(&d, w, NULL, 2));
  CHECK_STATUS(ctx, sh_dataset_finish(&d, 0), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "token id 2147483647 is beyond the vocabulary");
  d.max_vocab = INT64_MAX;
  CHECK_STATUS(ctx, sh_dataset_finish(&d, 0), SHEAF_ERR_UNSUPPORTED);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "vocabulary of 2147483648 words is too large");
  sh_dataset_free(&d);
  /* the readers: the limit is checked per id with its position */
  sh_seqs s;
  sh_seqs_init(&s, ctx);
  sh_seqs_options so = {.id_limit = 10, .id_limit_what = "ten"};
  CHECK_STATUS(ctx, sh_seqs_read(&s, "1 2\n\n3  10 4\n", 13, "s.txt", &so), SHEAF_ERR_PARSE);
  CHECK_EQ_STR(sheaf_ctx_last_error(ctx), "s.txt:3:4: error: token id 10 is beyond the "
                                          "vocabulary: ids must be below 10 (ten)");
  CHECK_EQ_SIZE(s.n_seqs, 0);
  sh_seqs_free(&s);
}

TEST(data_rel_cli_token_ids_beyond_the_vocabulary) {
  NEED_BIN();
  static const char big[] = "1 2 3 4 5 2000000000\n"; /* 21 bytes: once 13 GB RSS */
  char bigp[512], okp[512], ok7p[512], w[512], args[4096];
  snprintf(bigp, sizeof bigp, "%s", th_write_tmp("big.txt", big, sizeof big - 1));
  snprintf(okp, sizeof okp, "%s", th_write_tmp("ok.txt", "0 1 2\n3 4\n", 10));
  snprintf(ok7p, sizeof ok7p, "%s", th_write_tmp("ok7.txt", "0 1 7\n", 6));
  snprintf(w, sizeof w, "%s", th_tmp_path("bilstm.safetensors"));
  snprintf(args, sizeof args, "run bilstm --data %s --hidden 4 --embed 4 --threads 1", bigp);
  CHECK_EQ_INT(sheaf(args), 1);
  CHECK_CONTAINS(g_out, "big.txt:1:11: error: token id 2000000000 is beyond the vocabulary: ids "
                        "must be below 1000000 (--max-vocab, default 1000000)");
  snprintf(args, sizeof args,
           "run examples/bilstm.sf --data %s --size E=4 --size H=4 --size T=3 --threads 1", bigp);
  CHECK_EQ_INT(sheaf(args), 1);
  CHECK_CONTAINS(g_out, "big.txt:1:11: error: token id 2000000000 is beyond the vocabulary");
  snprintf(args, sizeof args, "run bilstm --data %s --hidden 4 --embed 4 --max-vocab 4", okp);
  CHECK_EQ_INT(sheaf(args), 1);
  CHECK_CONTAINS(g_out, "ok.txt:2:3: error: token id 4 is beyond the vocabulary: ids must be "
                        "below 4 (--max-vocab 4)");
  snprintf(args, sizeof args, "run bilstm --data %s --hidden 4 --embed 4 --max-vocab 0", okp);
  CHECK_EQ_INT(sheaf(args), 2);
  /* weights saved on ids 0..4 have 6 rows (the last <unk>): id 7 is beyond */
  snprintf(args, sizeof args,
           "run bilstm --data %s --hidden 4 --embed 4 --threads 1 --save-weights %s", okp, w);
  REQUIRE(sheaf(args) == 0);
  snprintf(args, sizeof args, "run bilstm --data %s --hidden 4 --embed 4 --weights %s", ok7p, w);
  CHECK_EQ_INT(sheaf(args), 1);
  CHECK_CONTAINS(g_out, "ok7.txt:1:5: error: token id 7 is beyond the vocabulary: ids must be "
                        "below 5 (the word table 'emb' of ");
  CHECK_CONTAINS(g_out, "has 6 rows, the last for <unk>)");
  snprintf(args, sizeof args, "run bilstm --data %s --hidden 4 --embed 4 --weights %s", okp, w);
  CHECK_EQ_INT(sheaf(args), 0);
  /* .sf: weights of its own, then data with an id past their table */
  snprintf(w, sizeof w, "%s", th_tmp_path("bilstm_sf.safetensors"));
  snprintf(args, sizeof args,
           "run examples/bilstm.sf --data %s --size E=4 --size H=4 --size T=3 --threads 1 "
           "--out /dev/null --save-weights %s",
           okp, w);
  REQUIRE(sheaf(args) == 0);
  snprintf(args, sizeof args, "run examples/bilstm.sf --data %s --weights %s --threads 1", ok7p, w);
  CHECK_EQ_INT(sheaf(args), 1);
  CHECK_CONTAINS(g_out, "ok7.txt:1:5: error: token id 7 is beyond the vocabulary: ids must be "
                        "below 5 (the largest word table, emb, of ");
  snprintf(args, sizeof args,
           "run examples/bilstm.sf --data %s --size E=4 --size H=4 --size T=3 --max-vocab 7", ok7p);
  CHECK_EQ_INT(sheaf(args), 1);
  CHECK_CONTAINS(g_out, "ok7.txt:1:5: error: token id 7 is beyond the vocabulary: ids must be "
                        "below 7 (--max-vocab 7)");
  /* data stats reads any int32 id (nothing is allocated per id) */
  snprintf(args, sizeof args, "data stats %s", th_write_tmp("max.txt", "5 2147483647\n", 13));
  CHECK_EQ_INT(sheaf(args), 0);
  CHECK_CONTAINS(g_out, "2147483648 ids (0..max id), 2 used");
}

/* -------------------------------------------------------- NaN / Inf weights */

/* A copy of safetensors file `in` as `out` with element k of tensor `name`
 * (F32) set to v. */
static bool poison(sheaf_ctx *ctx, const char *in, const char *out, const char *name, size_t k,
                   float v) {
  sheaf_st_file *f;
  if (sheaf_st_open(ctx, in, &f) != SHEAF_OK) return false;
  size_t n = sheaf_st_count(f);
  const char *names[64];
  sheaf_tensor *ts[64];
  bool ok = n <= 64;
  size_t made = 0;
  for (size_t i = 0; ok && i < n; i++) {
    names[i] = sheaf_st_name(f, i);
    ok = sheaf_tensor_create(ctx, sheaf_st_dtype(f, i), sheaf_st_rank(f, i), sheaf_st_shape(f, i),
                             &ts[i]) == SHEAF_OK;
    if (!ok) break;
    made++;
    memcpy(sheaf_tensor_data(ts[i]), sheaf_st_bytes(f, i), sheaf_st_nbytes(f, i));
    if (!strcmp(names[i], name)) ((float *)sheaf_tensor_data(ts[i]))[k] = v;
  }
  if (ok)
    ok = sheaf_st_write(ctx, out, n, names, (const sheaf_tensor *const *)ts, 0, NULL) == SHEAF_OK;
  for (size_t i = 0; i < made; i++) sheaf_tensor_free(ts[i]);
  sheaf_st_close(f);
  return ok;
}

TEST(data_rel_nonfinite_weights_refused_at_load) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  sheaf_param pw, pb;
  int64_t sw[2] = {2, 3}, sb[1] = {4};
  REQUIRE_OK(ctx, sheaf_model_param(m, "W", 2, sw, SHEAF_INIT_GLOROT, &pw));
  REQUIRE_OK(ctx, sheaf_model_param(m, "b", 1, sb, SHEAF_INIT_ZERO, &pb));
  float *W = sheaf_model_param_data(m, pw, NULL, NULL);
  float w0[6];
  memcpy(w0, W, sizeof w0);
  char good[512], bad[512];
  snprintf(good, sizeof good, "%s", th_tmp_path("good.safetensors"));
  snprintf(bad, sizeof bad, "%s", th_tmp_path("nan.safetensors"));
  REQUIRE_OK(ctx, sheaf_model_save(m, good));
  REQUIRE(poison(ctx, good, bad, "W", 5, NAN));
  /* refused, naming the tensor and [row, column]; nothing changes */
  W[0] = 42.0f;
  CHECK_STATUS(ctx, sheaf_model_load(m, bad), SHEAF_ERR_FORMAT);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "'W' holds 1 non-finite value (NaN or infinity): the "
                                            "first, nan, at index 5, i.e. [1, 2]");
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "--allow-nonfinite");
  CHECK(W[0] == 42.0f);
  /* infinities, several, in a vector */
  REQUIRE(poison(ctx, good, bad, "b", 2, -INFINITY));
  CHECK_STATUS(ctx, sheaf_model_load(m, bad), SHEAF_ERR_FORMAT);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "'b' holds 1 non-finite value (NaN or infinity): the "
                                            "first, -inf, at index 2");
  /* allowed: loaded as they are */
  CHECK_OK(ctx, sheaf_model_allow_nonfinite(m, 1));
  CHECK_OK(ctx, sheaf_model_load(m, bad));
  float *b = sheaf_model_param_data(m, pb, NULL, NULL);
  CHECK(isinf(b[2]) && b[2] < 0);
  CHECK_OK(ctx, sheaf_model_allow_nonfinite(m, 0));
  CHECK_OK(ctx, sheaf_model_load(m, good));
  W = sheaf_model_param_data(m, pw, NULL, NULL);
  CHECK(memcmp(W, w0, sizeof w0) == 0);
  CHECK_STATUS(ctx, sheaf_model_allow_nonfinite(NULL, 1), SHEAF_ERR_INVALID_ARG);
  /* the other float dtypes: F16 and BF16 infinities/NaN, F64 NaN and a
   * value beyond float's range (it would load as inf) */
  const sheaf_dtype dts[4] = {SHEAF_F16, SHEAF_BF16, SHEAF_F64, SHEAF_F64};
  for (int c = 0; c < 4; c++) {
    sheaf_tensor *tw, *tb;
    REQUIRE_OK(ctx, sheaf_tensor_create(ctx, dts[c], 2, sw, &tw));
    REQUIRE_OK(ctx, sheaf_tensor_create(ctx, SHEAF_F32, 1, sb, &tb));
    memset(sheaf_tensor_data(tw), 0, 6 * sheaf_dtype_size(dts[c]));
    memset(sheaf_tensor_data(tb), 0, 4 * sizeof(float));
    if (c == 0) ((uint16_t *)sheaf_tensor_data(tw))[4] = 0x7c00;      /* f16 +inf */
    else if (c == 1) ((uint16_t *)sheaf_tensor_data(tw))[4] = 0x7fc0; /* bf16 nan */
    else ((double *)sheaf_tensor_data(tw))[4] = c == 2 ? NAN : 1e300;
    const char *names[2] = {"W", "b"};
    const sheaf_tensor *ts[2] = {tw, tb};
    REQUIRE_OK(ctx, sheaf_st_write(ctx, bad, 2, names, ts, 0, NULL));
    sheaf_tensor_free(tw);
    sheaf_tensor_free(tb);
    CHECK_STATUS(ctx, sheaf_model_load(m, bad), SHEAF_ERR_FORMAT);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "at index 4, i.e. [1, 1]");
    if (c == 3) CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "or beyond float's range): the first, inf");
  }
  sheaf_model_free(m);
}

TEST(data_rel_cli_nonfinite_weights) {
  NEED_BIN();
  sheaf_ctx *ctx = th_ctx();
  char data[512], good[512], bad[512], args[4096];
  REQUIRE(gen_file(ctx, conllu_star, 12, "small.conllu", data, sizeof data));
  snprintf(good, sizeof good, "%s", th_tmp_path("tl.safetensors"));
  snprintf(bad, sizeof bad, "%s", th_tmp_path("tl_nan.safetensors"));
  snprintf(args, sizeof args,
           "run treelstm --data %s --hidden 4 --embed 4 --threads 1 --save-weights %s", data, good);
  REQUIRE(sheaf(args) == 0);
  REQUIRE(poison(ctx, good, bad, "W_out", 7, NAN));
  snprintf(args, sizeof args, "run treelstm --data %s --hidden 4 --embed 4 --weights %s", data, bad);
  CHECK_EQ_INT(sheaf(args), 1);
  CHECK_CONTAINS(g_out, "'W_out' holds 1 non-finite value (NaN or infinity): the first, nan, at "
                        "index 7, i.e. [1, 2]");
  snprintf(args, sizeof args,
           "run treelstm --data %s --hidden 4 --embed 4 --weights %s --allow-nonfinite --out -",
           data, bad);
  CHECK_EQ_INT(sheaf(args), 0);
  CHECK_CONTAINS(g_out, "nan");
  /* .sf: the same weights (same names), the same refusal and override */
  snprintf(args, sizeof args, "run examples/treelstm.sf --data %s --weights %s --threads 1", data,
           bad);
  CHECK_EQ_INT(sheaf(args), 1);
  CHECK_CONTAINS(g_out, "'W_out' holds 1 non-finite value");
  snprintf(args, sizeof args,
           "run examples/treelstm.sf --data %s --weights %s --threads 1 --allow-nonfinite", data,
           bad);
  CHECK_EQ_INT(sheaf(args), 0);
  CHECK_CONTAINS(g_out, "nan");
  /* data stats counts them per tensor */
  snprintf(args, sizeof args, "data stats %s", good);
  CHECK_EQ_INT(sheaf(args), 0);
  CHECK_CONTAINS(g_out, "non-finite");
  CHECK_CONTAINS(g_out, "non-finite values: none\n");
  REQUIRE(poison(ctx, good, bad, "b_out", 0, INFINITY));
  char bad2[512];
  snprintf(bad2, sizeof bad2, "%s", th_tmp_path("tl_nan2.safetensors"));
  REQUIRE(poison(ctx, bad, bad2, "b_out", 3, NAN));
  snprintf(args, sizeof args, "data stats %s", bad2);
  CHECK_EQ_INT(sheaf(args), 0);
  CHECK_CONTAINS(g_out, "non-finite values: 2 (NaN or infinity) in 1 tensor, the first in 'b_out' "
                        "at index 0");
  /* the b_out line ends with its count, 2 */
  const char *line = strstr(g_out, "\nb_out ");
  const char *end = line ? strchr(line + 1, '\n') : NULL;
  CHECK(end && end - line > 3 && !strncmp(end - 2, " 2\n", 3));
  CHECK_EQ_INT(sheaf("run --help"), 0);
  CHECK_CONTAINS(g_out, "--allow-nonfinite");
  CHECK_CONTAINS(g_out, "--max-vocab N");
  CHECK_EQ_INT(sheaf("run examples/treelstm.sf --help"), 0);
  CHECK_CONTAINS(g_out, "--allow-nonfinite");
  CHECK_CONTAINS(g_out, "--max-vocab N");
}
