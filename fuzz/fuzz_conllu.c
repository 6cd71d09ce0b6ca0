/*
 * fuzz_conllu.c — libFuzzer target for the CoNLL-U reader: any input either
 * fails with "fuzz.conllu:LINE:COL: error: ..." or reads into valid trees,
 * which then binarize (2n-1 nodes, heights as computed without building),
 * convert to child-sum trees (depth = dependency depth), give statistics,
 * and write as PTB text that reads back into the same shapes.
 * Any mismatch traps; ASan/UBSan catch everything else.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "io/binarize.h"
#include "io/ptb.h"
#include "io/stats.h"
#include "sheaf.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


/* Writes tb and reads it back: same node count and shape. */
static void round_trip(sheaf_ctx *ctx, const sh_treebank *tb, const int32_t *heights) {
  for (int32_t t = 0; t < tb->n_trees; t++)
    if (heights[tb->tree_root[t]] > SH_PTB_MAX_DEPTH) return; /* the reader's limit */
  sh_buf out;
  sh_buf_init(&out, ctx);
  sh_treebank back;
  sh_tb_init(&back, ctx);
  REQUIRE(sh_ptb_write(tb, &out) == SHEAF_OK);
  REQUIRE(sh_ptb_read(&back, (const char *)out.data, out.len, "written") == SHEAF_OK);
  REQUIRE(back.n_trees == tb->n_trees && back.n_nodes == tb->n_nodes);
  for (int32_t n = 0; n < tb->n_nodes; n++)
    REQUIRE(back.parent[n] == tb->parent[n] && (back.word[n] < 0) == (tb->word[n] < 0));
  sh_tb_free(&back);
  sh_buf_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sheaf_ctx *ctx = fuzz_ctx();
  sh_depbank db;
  sh_depbank_init(&db, ctx);
  sheaf_status st = sh_conllu_read(&db, (const char *)data, size, "fuzz.conllu");
  if (st != SHEAF_OK) {
    fuzz_check_parse_error(ctx, st, "fuzz.conllu");
    REQUIRE(db.n_sents == 0 && db.n_tokens == 0);
    sh_depbank_free(&db);
    return 0;
  }
  REQUIRE(db.n_crossing <= db.n_nonprojective && db.n_nonprojective <= db.n_sents);
  sh_treebank bin, cs;
  sh_tb_init(&bin, ctx);
  sh_tb_init(&cs, ctx);
  REQUIRE(sh_binarize(&db, &bin) == SHEAF_OK);
  REQUIRE(sh_childsum(&db, &cs) == SHEAF_OK);
  REQUIRE(bin.n_trees == db.n_sents && cs.n_trees == db.n_sents);
  REQUIRE(bin.n_nodes == 2 * db.n_tokens - db.n_sents && cs.n_nodes == db.n_tokens);
  int32_t *h = malloc(sizeof(int32_t) * ((size_t)bin.n_nodes + 1));
  int32_t *hc = malloc(sizeof(int32_t) * ((size_t)cs.n_nodes + 1));
  REQUIRE(h && hc);
  sh_tb_heights(&bin, h);
  sh_tb_heights(&cs, hc);
  sh_dep_work w;
  sh_dep_work_init(&w, ctx);
  for (int32_t s = 0; s < db.n_sents; s++) {
    const sh_dep_sentence *sent = &db.sents[s];
    REQUIRE(bin.tree_size[s] == 2 * sent->len - 1 && cs.tree_size[s] == sent->len);
    REQUIRE(hc[cs.tree_root[s]] == sent->depth);
    int32_t bh;
    REQUIRE(sh_binarized_height(&db, s, &w, &bh) == SHEAF_OK);
    REQUIRE(bh == h[bin.tree_root[s]]);
    if (sent->projective) { /* leaves spell the sentence */
      int32_t k = sent->first;
      for (int32_t n = bin.tree_first[s]; n < bin.tree_first[s] + bin.tree_size[s]; n++)
        if (bin.word[n] >= 0)
          REQUIRE(strcmp(sh_vocab_str(&bin.words, bin.word[n]),
                         sh_vocab_str(&db.forms, db.tokens[k++].form)) == 0);
    }
  }
  sh_dep_work_free(&w);
  sh_dep_stats ds;
  if (sh_dep_stats_compute(&db, &ds) == SHEAF_OK) {
    REQUIRE(ds.length.total == db.n_tokens);
    REQUIRE(db.n_sents == 0 || ds.bin_depth.max >= ds.depth.max);
    sh_dep_stats_free(ctx, &ds);
  }
  round_trip(ctx, &bin, h);
  round_trip(ctx, &cs, hc);
  free(h);
  free(hc);
  sh_tb_free(&bin);
  sh_tb_free(&cs);
  sh_depbank_free(&db);
  return 0;
}
