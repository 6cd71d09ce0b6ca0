/*
 * test_linear_seq.c — the linearized mode on sequence models (main takes
 * list[i32]): gru.sf (a fold, one output per sentence) and bilstm.sf (a
 * scan and a reversed scan, one output per token) against the dynamic
 * runtime on the bundled EWT sentences, seeded weights with nonzero biases,
 * batches of 1, 7 and 64 on 1, 2 and 3 threads, split over instances and
 * not: every output within 1e-5 (relative, per row);
 * the sequence inspector's arrays on hand-made sentences (lengths 3, 0, 1,
 * 2) with the outputs of the empty and one-word sentences; refusals of the
 * sequence constructs it does not take, with their position.
 */
#include <stdlib.h>

#include "compile/linear.h"
#include "harness.h"
#include "io/dataset.h"
#include "models/models.h"
#include "test_linear_seq_util.h"

static void check_seq_model(const char *path, const char *const *sizes) {
  check_seq_model_on(th_ctx(), path, sizes);
}

TEST(linear_seq_gru_matches_dynamic) {
  check_seq_model("examples/gru.sf", (const char *[]){"H=16", "E=12", "C=5", NULL});
}
TEST(linear_seq_bilstm_matches_dynamic) {
  check_seq_model("examples/bilstm.sf", (const char *[]){"H=16", "E=12", "T=7", NULL});
}

/* gru.sf on four sentences: [3 4 5], [], [6], [7 8]. */
TEST(linear_seq_inspector_arrays) {
  sheaf_ctx *ctx = th_ctx();
  if (!th_have_jit_cc("linear_seq_inspector_arrays")) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  static const int32_t off[] = {0, 3, 3, 4, 6}, words[] = {3, 4, 5, 6, 7, 8};
  sh_word_ids ids = sh_word_ids_of_rows(100);
  tl_model tm;
  sh_lin *L = NULL;
  char why[512];
  if (!tl_open(ctx, "examples/gru.sf", (const char *[]){"H=8", "E=6", "C=3", NULL}, NULL, &tm)) return;
  if (!CHECK_OK(ctx, sh_lin_create(&tm.m, tm.model, &tm.bind, &L, why, sizeof why))) goto out;
  sh_lin_set_split(L, false); /* the inspector's view of one part */
  if (!CHECK_OK(ctx, sh_lin_run_seq(L, off, words, 0, 4, ids))) goto out;
  CHECK_EQ_INT(sh_lin_n_parts(L), 0);
  /* fns: 0 main (per sentence), 1 gru (the fold's step). Sorted by length: s0 (3), s3 (2), s2 (1), s1 (0);
   * step j runs the sentences longer than j; gru's row 0 is the zero state. */
  static const struct { int h, fn, start, count, f0[4], c0[4]; } want[] = {
      {1, 1, 1, 3, {3, 7, 6}, {0, 0, 0}}, /* position 0 of s0, s3, s2: rows 1..3 */
      {2, 1, 4, 2, {4, 8}, {1, 2}},       /* position 1 of s0, s3 */
      {3, 1, 6, 1, {5}, {4}},             /* position 2 of s0 */
      {4, 0, 0, 4, {0}, {6, 0, 3, 5}},    /* main: the fold's last state (s1: the zero row) */
  };
  if (!CHECK_EQ_INT(sh_lin_n_groups(L), 4)) goto out;
  for (int g = 0; g < 4; g++) {
    sh_lin_group_view v;
    if (!CHECK(sh_lin_group(L, g, &v))) goto out;
    CHECK_EQ_INT(v.height, want[g].h);
    CHECK_EQ_INT(v.fn, want[g].fn);
    CHECK_EQ_INT(v.start, want[g].start);
    if (!CHECK_EQ_INT(v.count, want[g].count)) continue;
    CHECK_EQ_INT(v.n_fields, want[g].fn == 1 ? 1 : 0);
    if (!CHECK_EQ_INT(v.n_calls, 1)) continue;
    CHECK_EQ_INT(v.call_fn[0], 1);
    for (int i = 0; i < v.count; i++) {
      if (v.n_fields) CHECK_EQ_INT(v.fields[0][i], want[g].f0[i]);
      CHECK_EQ_INT(v.calls[0][i], want[g].c0[i]);
    }
  }
  for (int s = 0; s < 4; s++) {
    CHECK_EQ_INT(sh_lin_root_row(L, s), s);
    CHECK_EQ_INT(sh_lin_output_rows(L, s), 1);
  }
  /* every sentence against the dynamic runtime, the empty one included */
  {
    float want_o[4 * 3], got_o[4 * 3];
    int64_t at[5];
    if (dynamic_seq(ctx, &tm, off, words, ids, 4, want_o, at, 12)) {
      for (int s = 0; s < 4; s++) CHECK_EQ_INT(linear_outputs(L, s, got_o + 3 * s, 3), 3);
      CHECK(sh_max_rel_err(got_o, want_o, 4, 3) <= 1e-5);
    }
  }
out:
  sh_lin_free(L);
  tl_close(ctx, &tm);
}

/* bilstm.sf per token: sentence lengths 2, 0, 1: main's rows are the tokens in order. */
TEST(linear_seq_per_token_rows) {
  sheaf_ctx *ctx = th_ctx();
  if (!th_have_jit_cc("linear_seq_per_token_rows")) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  static const int32_t off[] = {0, 2, 2, 3}, words[] = {9, 2, 4};
  sh_word_ids ids = sh_word_ids_of_rows(100);
  tl_model tm;
  sh_lin *L = NULL;
  char why[512];
  if (!tl_open(ctx, "examples/bilstm.sf", (const char *[]){"H=8", "E=6", "T=5", NULL}, NULL, &tm)) return;
  if (!CHECK_OK(ctx, sh_lin_create(&tm.m, tm.model, &tm.bind, &L, why, sizeof why))) goto out;
  if (!CHECK_OK(ctx, sh_lin_run_seq(L, off, words, 0, 3, ids))) goto out;
  CHECK_EQ_INT(sh_lin_output_rows(L, 0), 2);
  CHECK_EQ_INT(sh_lin_output_rows(L, 1), 0);
  CHECK_EQ_INT(sh_lin_output_rows(L, 2), 1);
  CHECK(sh_lin_output_row(L, 1, 0, 0) == NULL);
  /* fns 0 main, 1 step_fw (forward), 2 step_bw (over rev(words)): main's calls read fw at p, bw at p */
  sh_lin_group_view v;
  int last = sh_lin_n_groups(L) - 1;
  if (CHECK(sh_lin_group(L, last, &v)) && CHECK_EQ_INT(v.fn, 0) && CHECK_EQ_INT(v.count, 3) &&
      CHECK_EQ_INT(v.n_calls, 2)) {
    /* step rows: position 0 of s0 and s2 at step 0 (rows 1, 2), position 1 of s0 at step 1 (row 3) forward;
     * reversed: s0's position 1 and s2's 0 at step 0 (rows 1, 2), s0's position 0 at step 1 (row 3) */
    static const int32_t fw[] = {1, 3, 2}, bw[] = {3, 1, 2};
    for (int i = 0; i < 3; i++) {
      CHECK_EQ_INT(v.calls[0][i], v.call_fn[0] == 1 ? fw[i] : bw[i]);
      CHECK_EQ_INT(v.calls[1][i], v.call_fn[1] == 1 ? fw[i] : bw[i]);
    }
  }
  float want_o[3 * 5], got_o[3 * 5];
  int64_t at[4];
  if (dynamic_seq(ctx, &tm, off, words, ids, 3, want_o, at, 15)) {
    CHECK_EQ_INT(at[3], 15);
    for (int s = 0; s < 3; s++) CHECK_EQ_INT(linear_outputs(L, s, got_o + at[s], 15 - at[s]), at[s + 1] - at[s]);
    CHECK(sh_max_rel_err(got_o, want_o, 3, 5) <= 1e-5);
  }
out:
  sh_lin_free(L);
  tl_close(ctx, &tm);
}

static const char *const H8[] = {"H=8", NULL}; /* the refusal tests' sizes */

TEST(linear_seq_refusals) {
  char why[512];
  static const char nonzero[] = "param emb : f32[V, H]\n"
                                "param h0 : f32[H]\n"
                                "fn step(h: f32[H], w: i32) -> f32[H] = tanh(emb[w] + h)\n"
                                "fn main(ws: list[i32]) -> f32[H] = fold(step, h0, ws)\n";
  if (tl_refusal("nonzero.sf", nonzero, H8, why, sizeof why))
    CHECK_CONTAINS(why, "nonzero.sf:4:47: fold's initial state: the linearized mode takes zeros");
  static const char shifted[] = "param emb : f32[V, H]\n"
                                "fn step(h: f32[H], w: i32) -> f32[H] = tanh(emb[w] + h)\n"
                                "fn main(ws: list[i32]) -> list[f32[H]] {\n"
                                "  let s = scan(step, zeros(H), ws);\n"
                                "  for i in 1..len(ws) { s[i] }\n"
                                "}\n";
  if (tl_refusal("shifted.sf", shifted, H8, why, sizeof why))
    CHECK_CONTAINS(why, "shifted.sf:5:3: a range other than 0..len(words)");
  static const char loose[] = "param emb : f32[V, H]\n"
                              "fn step(h: f32[H], w: i32) -> f32[H] = tanh(emb[w] + h)\n"
                              "fn main(ws: list[i32]) -> f32[H] {\n"
                              "  let z = zeros(H);\n"
                              "  z + fold(step, zeros(H), ws)\n"
                              "}\n";
  if (tl_refusal("loose.sf", loose, H8, why, sizeof why))
    CHECK_CONTAINS(why, "loose.sf:5:3: zeros(...) is translated by the linearized mode only as a scan's");
}
