/*
 * test_linear_seq2.c — the linearized mode on the sequence models beyond
 * one layer of scans: tagger2.sf (a map over the first BiLSTM's states bound
 * in main, scanned by a second BiLSTM) against the dynamic runtime on the
 * bundled EWT sentences (batches 1, 7, 64; 1 and 2 threads; 1e-5 relative),
 * and so cnn.sf (neighbours, max and mean pooling) and attnpool.sf (an
 * attention, max and mean over the sentence, layer_norm),
 * on sentences of one and two words, the stages of its groups (a scan of a
 * map after the map, the map after the scans it reads), and refusals of
 * what a map bound in main may not do, with their positions.
 */
#include <stdlib.h>

#include "compile/linear.h"
#include "harness.h"
#include "io/dataset.h"
#include "test_linear_seq_util.h"

static const char *const tagger2_sizes[] = {"H=16", "E=12", "T=7", NULL};

/* Each of path's models on 1, 2 and 3 threads, split and not
 * (check_seq_model_on). */
static void check_both_threads(const char *path, const char *const *sizes) { check_seq_model_on(th_ctx(), path, sizes); }

TEST(linear_seq2_tagger2_matches_dynamic) { check_both_threads("examples/tagger2.sf", tagger2_sizes); }
TEST(linear_seq2_attnpool_matches_dynamic) {
  check_both_threads("examples/attnpool.sf", (const char *[]){"H=16", "E=12", "C=5", NULL});
}
/* handnorm's outputs are one instance's row (x's softmax against ey, and two
 * differences of equal quantities: rounding noise of ~1e-7 in both modes),
 * compared relative to the instance's largest output. */
TEST(linear_seq2_handnorm_matches_dynamic) {
  check_both_threads("examples/handnorm.sf", (const char *[]){"H=16", NULL});
}
TEST(linear_seq2_cnn_matches_dynamic) {
  check_both_threads("examples/cnn.sf", (const char *[]){"F=16", "E=12", "C=5", NULL});
}

/* path on sentences of 1, 2 and 3 words (a neighbour on neither side, on one,
 * on both; the reductions over one row), in one batch and one by one,
 * against the dynamic runtime. */
static void check_short(const char *path, const char *const *sizes) {
  sheaf_ctx *ctx = th_ctx();
  if (!th_have_jit_cc(path)) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  static const int32_t off[] = {0, 1, 3, 6}, words[] = {7, 3, 4, 9, 5, 2};
  tl_model tm;
  if (!tl_open(ctx, path, sizes, NULL, &tm)) return;
  check_seq_small(ctx, &tm, path, off, words, 3);
  tl_close(ctx, &tm);
}

TEST(linear_seq2_short_sentences) {
  check_short("examples/tagger2.sf", (const char *[]){"H=8", "E=6", "T=5", NULL});
  check_short("examples/cnn.sf", (const char *[]){"F=8", "E=6", "C=5", NULL});
  check_short("examples/attnpool.sf", (const char *[]){"H=8", "E=6", "C=5", NULL});
  check_short("examples/handnorm.sf", (const char *[]){"H=8", NULL});
}

/* Sentences [3 4], [5]: the groups in stages and every output against the
 * dynamic runtime. fns: 0 main, 1 f1, 2 b1 (over rev(ws)), 3 the map x2,
 * 4 f2, 5 b2 (over rev(x2)). */
TEST(linear_seq2_tagger2_stages) {
  sheaf_ctx *ctx = th_ctx();
  if (!th_have_jit_cc("linear_seq2_tagger2_stages")) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  static const int32_t off[] = {0, 2, 3}, words[] = {3, 4, 5};
  sh_word_ids ids = sh_word_ids_of_rows(100);
  tl_model tm;
  sh_lin *L = NULL;
  char why[512];
  if (!tl_open(ctx, "examples/tagger2.sf", (const char *[]){"H=8", "E=6", "T=5", NULL}, NULL, &tm)) return;
  if (!CHECK_OK(ctx, sh_lin_create(&tm.m, tm.model, &tm.bind, &L, why, sizeof why))) goto out;
  if (!CHECK_OK(ctx, sh_lin_run_seq(L, off, words, 0, 2, ids))) goto out;
  /* f1 rows: (s0,0) 1, (s1,0) 2, (s0,1) 3; b1 rows: (s0,1) 1, (s1,0) 2, (s0,0) 3; the map's rows: the tokens
   * (s0,0) 1, (s0,1) 2, (s1,0) 3; f2 at j reads the map at its position, b2 at len - 1 - j. */
  static const struct { int h, fn, start, count, self[3], other_fn, other[3]; } want[] = {
      {1, 1, 1, 2, {0, 0}, -1, {0}},     {1, 2, 1, 2, {0, 0}, -1, {0}},    {2, 1, 3, 1, {1}, -1, {0}},
      {2, 2, 3, 1, {1}, -1, {0}},        {3, 3, 1, 3, {0}, 1, {1, 3, 2}},  {4, 4, 1, 2, {0, 0}, 3, {1, 3}},
      {4, 5, 1, 2, {0, 0}, 3, {2, 3}},   {5, 4, 3, 1, {1}, 3, {2}},        {5, 5, 3, 1, {1}, 3, {1}},
      {6, 0, 0, 3, {0}, -1, {0}},
  };
  if (!CHECK_EQ_INT(sh_lin_n_groups(L), 10)) goto out;
  for (int g = 0; g < 10; g++) {
    sh_lin_group_view v;
    if (!CHECK(sh_lin_group(L, g, &v))) goto out;
    CHECK_EQ_INT(v.height, want[g].h);
    CHECK_EQ_INT(v.fn, want[g].fn);
    CHECK_EQ_INT(v.start, want[g].start);
    if (!CHECK_EQ_INT(v.count, want[g].count)) continue;
    for (int c = 0; c < v.n_calls; c++) {
      const int *rows = v.call_fn[c] == v.fn ? want[g].self : v.call_fn[c] == want[g].other_fn ? want[g].other : NULL;
      if (v.fn == 0 || v.fn == 3) continue; /* main and the map read two scans each: the map's fw checked below */
      if (!CHECK(rows != NULL)) continue;
      for (int i = 0; i < v.count; i++) CHECK_EQ_INT(v.calls[c][i], rows[i]);
    }
    if (v.fn == 3) { /* x2 = cat(fw[i].h, bw[i].h): fw's rows, then bw's (3, 1, 2) */
      static const int bw[] = {3, 1, 2};
      if (!CHECK_EQ_INT(v.n_calls, 2)) continue;
      for (int i = 0; i < 3; i++)
        CHECK_EQ_INT(v.calls[0][i], v.call_fn[0] == 1 ? want[g].other[i] : bw[i]);
    }
  }
  {
    float want_o[3 * 5], got_o[3 * 5];
    int64_t at[3];
    if (dynamic_seq(ctx, &tm, off, words, ids, 2, want_o, at, 15)) {
      CHECK_EQ_INT(linear_outputs(L, 0, got_o, 15), 10);
      CHECK_EQ_INT(linear_outputs(L, 1, got_o + 10, 5), 5);
      CHECK(sh_max_rel_err(got_o, want_o, 3, 5) <= 1e-5);
    }
  }
out:
  sh_lin_free(L);
  tl_close(ctx, &tm);
}

/* An empty sentence: ws[0] (handnorm) and max over no words (cnn) are run
 * errors, as in the dynamic runtime. */
TEST(linear_seq2_empty_sentence_errors) {
  sheaf_ctx *ctx = th_ctx();
  if (!th_have_jit_cc("linear_seq2_empty_sentence_errors")) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  static const int32_t off[] = {0, 2, 2}, words[] = {3, 4};
  static const char *const models[] = {"examples/handnorm.sf", "examples/cnn.sf"};
  static const char *const want[] = {"a word index outside its sentence", "max of an empty list"};
  for (int i = 0; i < 2; i++) {
    tl_model tm;
    sh_lin *L = NULL;
    char why[512];
    const char *const *sizes = i == 0 ? (const char *[]){"H=8", NULL} : (const char *[]){"F=8", "E=6", "C=5", NULL};
    if (!tl_open(ctx, models[i], sizes, NULL, &tm)) continue;
    if (CHECK_OK(ctx, sh_lin_create(&tm.m, tm.model, &tm.bind, &L, why, sizeof why))) {
      CHECK_OK(ctx, sh_lin_run_seq(L, off, words, 0, 1, sh_word_ids_of_rows(100)));
      CHECK_EQ_INT(sh_lin_run_seq(L, off, words, 0, 2, sh_word_ids_of_rows(100)), SHEAF_ERR_INVALID_ARG);
      CHECK_CONTAINS(sheaf_ctx_last_error(ctx), want[i]);
    }
    sh_lin_free(L);
    tl_close(ctx, &tm);
  }
}

static const char *const H8[] = {"H=8", NULL}; /* the refusal tests' sizes */

TEST(linear_seq2_refusals) {
  char why[512];
  static const char outer[] = "param emb : f32[V, H]\n"
                              "param q : f32[H]\n"
                              "fn step(h: f32[H], w: i32) -> f32[H] = tanh(emb[w] + h)\n"
                              "fn main(ws: list[i32]) -> list[f32[H]] {\n"
                              "  let s = fold(step, zeros(H), ws);\n"
                              "  let xs = for w in ws { emb[w] * s };\n"
                              "  for x in xs { x + q }\n"
                              "}\n";
  if (tl_refusal("outer.sf", outer, H8, why, sizeof why))
    CHECK_CONTAINS(why, "outer.sf:6:35: 's': a per-sentence tensor of main read inside a map over the words");
  static const char nested[] = "param emb : f32[V, H]\n"
                               "fn main(ws: list[i32]) -> list[f32[H]] {\n"
                               "  let xs = for w in ws { let ys = for v in ws { emb[v] }; emb[w] };\n"
                               "  for x in xs { x }\n"
                               "}\n";
  if (tl_refusal("nested.sf", nested, H8, why, sizeof why))
    CHECK_CONTAINS(why, "nested.sf:3:35: a map over the words inside a map or a step");
  static const char inmap[] = "param emb : f32[V, H]\n"
                              "fn step(h: f32[H], w: i32) -> f32[H] = tanh(emb[w] + h)\n"
                              "fn main(ws: list[i32]) -> list[f32[H]] {\n"
                              "  let xs = for w in ws { fold(step, zeros(H), ws) };\n"
                              "  for x in xs { x }\n"
                              "}\n";
  static const char far[] = "param emb : f32[V, H]\n"
                            "fn main(ws: list[i32]) -> f32[H] {\n"
                            "  let xs = for i in 0..len(ws) { if i >= 0 - 1 { emb[ws[i + 1]] } else { zeros(H) } };\n"
                            "  max(xs)\n"
                            "}\n";
  if (tl_refusal("far.sf", far, H8, why, sizeof why))
    CHECK_CONTAINS(why, "far.sf:3:37: arithmetic on the map's position other than i + k");
  static const char wrongside[] = "param emb : f32[V, H]\n"
                                  "fn main(ws: list[i32]) -> f32[H] {\n"
                                  "  let xs = for i in 0..len(ws) { if i > 0 { emb[ws[i + 1]] } else { zeros(H) } };\n"
                                  "  mean(xs)\n"
                                  "}\n";
  if (tl_refusal("wrongside.sf", wrongside, H8, why, sizeof why))
    CHECK_CONTAINS(why, "wrongside.sf:3:34: an if on a neighbour's existence is translated as");
  static const char scanred[] = "param emb : f32[V, H]\n"
                                "fn step(h: f32[H], w: i32) -> f32[H] = tanh(emb[w] + h)\n"
                                "fn main(ws: list[i32]) -> f32[H] = max(scan(step, zeros(H), ws))\n";
  if (tl_refusal("scanred.sf", scanred, H8, why, sizeof why))
    CHECK_CONTAINS(why, "scanred.sf:3:40: max over a list other than a map over the words bound by a let");
  static const char softmax_alone[] = "param emb : f32[V, H]\n"
                                      "param q : f32[H]\n"
                                      "fn main(ws: list[i32]) -> f32[H] {\n"
                                      "  let hs = for w in ws { emb[w] };\n"
                                      "  let a = softmax(for h in hs { sum(h * q) });\n"
                                      "  a @ stack(rev(hs))\n"
                                      "}\n";
  if (tl_refusal("softmax_alone.sf", softmax_alone, H8, why, sizeof why))
    CHECK_CONTAINS(why, "softmax_alone.sf:6:13: stack over a list other than a map over the words");
  if (tl_refusal("inmap.sf", inmap, H8, why, sizeof why))
    CHECK_CONTAINS(why, "inmap.sf:4:26: fold inside a map over the words");
}
