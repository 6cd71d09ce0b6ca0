/*
 * fuzz_ptb.c — libFuzzer target for the PTB s-expression reader: any input
 * either fails with "fuzz.ptb:LINE:COL: error: ..." (or out of memory), or
 * reads into trees that satisfy the treebank invariants (post-order, parent
 * links, heights), have statistics, and go through the writer and back
 * unchanged (same structure, same strings, same text on a second write).
 * Any mismatch traps; ASan/UBSan catch everything else.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "io/ptb.h"
#include "io/stats.h"
#include "sheaf.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


static void check_invariants(const sh_treebank *tb) {
  int32_t n_refs = 0;
  for (int32_t t = 0; t < tb->n_trees; t++) {
    int32_t first = tb->tree_first[t], end = first + tb->tree_size[t];
    REQUIRE(tb->tree_root[t] == end - 1 && tb->parent[end - 1] == -1);
    REQUIRE(t == 0 || first == tb->tree_first[t - 1] + tb->tree_size[t - 1]);
    for (int32_t n = first; n < end; n++) {
      REQUIRE(tb->word[n] >= 0 || tb->n_children[n] > 0);
      for (int32_t i = 0; i < tb->n_children[n]; i++) {
        int32_t c = sh_tb_child(tb, n, i);
        REQUIRE(c >= first && c < n && tb->parent[c] == n);
      }
      n_refs += tb->n_children[n];
    }
  }
  REQUIRE(n_refs == tb->n_child_refs && n_refs == tb->n_nodes - tb->n_trees);
}

static void same_trees(const sh_treebank *a, const sh_treebank *b) {
  REQUIRE(a->n_trees == b->n_trees && a->n_nodes == b->n_nodes);
  for (int32_t n = 0; n < a->n_nodes; n++) {
    REQUIRE(a->parent[n] == b->parent[n] && a->n_children[n] == b->n_children[n]);
    REQUIRE(strcmp(sh_vocab_str(&a->labels, a->label[n]),
                   sh_vocab_str(&b->labels, b->label[n])) == 0);
    REQUIRE(sh_tb_value(a, n) == sh_tb_value(b, n));
    REQUIRE((a->word[n] < 0) == (b->word[n] < 0));
    if (a->word[n] >= 0)
      REQUIRE(strcmp(sh_vocab_str(&a->words, a->word[n]), sh_vocab_str(&b->words, b->word[n])) ==
              0);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sheaf_ctx *ctx = fuzz_ctx();
  sh_treebank tb, tb2;
  sh_tb_init(&tb, ctx);
  sh_tb_init(&tb2, ctx);
  sh_buf out, out2;
  sh_buf_init(&out, ctx);
  sh_buf_init(&out2, ctx);
  sheaf_status st = sh_ptb_read(&tb, (const char *)data, size, "fuzz.ptb");
  if (st != SHEAF_OK) {
    fuzz_check_parse_error(ctx, st, "fuzz.ptb");
    REQUIRE(tb.n_trees == 0 && tb.n_nodes == 0);
    goto done;
  }
  check_invariants(&tb);
  sh_tb_stats s;
  if (sh_tb_stats_compute(&tb, &s) == SHEAF_OK) {
    REQUIRE((int64_t)s.length.count == tb.n_trees && s.leaves <= s.nodes);
    REQUIRE(s.depth.count == 0 || s.depth.max <= SH_PTB_MAX_DEPTH);
    sh_tb_stats_free(ctx, &s);
  }
  REQUIRE(sh_ptb_write(&tb, &out) == SHEAF_OK);
  REQUIRE(sh_ptb_read(&tb2, (const char *)out.data, out.len, "written") == SHEAF_OK);
  same_trees(&tb, &tb2);
  REQUIRE(sh_ptb_write(&tb2, &out2) == SHEAF_OK);
  REQUIRE(out.len == out2.len && (out.len == 0 || memcmp(out.data, out2.data, out.len) == 0));
done:
  sh_buf_free(&out);
  sh_buf_free(&out2);
  sh_tb_free(&tb);
  sh_tb_free(&tb2);
  return 0;
}
