/*
 * test_linear_mat.c — the linearized mode on models with a matrix per
 * sentence (coarsen_mat.c, linear_mat.c): transformer.sf against the
 * dynamic runtime on the bundled EWT sentences, seeded weights with nonzero
 * biases, batches of 1, 7 and 64, contexts of 1 and 2 threads: every output
 * within 1e-5 (relative, per row); hand-made sentences of lengths 1, 2, 0
 * and 3; the stages' kernels (dense, ragged, dense); refusals of what the
 * mode does not take with a sentence's matrix, with their position.
 */
#include <stdlib.h>

#include "compile/linear.h"
#include "harness.h"
#include "io/dataset.h"
#include "models/models.h"
#include "test_linear_seq_util.h" /* dynamic_seq, linear_outputs, EWT, N_SENTS */
#define TRANSFORMER "examples/transformer.sf"

static const char *const SIZES[] = {"DK=8", "F=24", NULL};

static void check_model(const char *path, const char *const *sizes, int threads) {
  if (!th_have_jit_cc(path)) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  sheaf_ctx *ctx = tl_ctx_threads(threads);
  if (!CHECK(ctx != NULL)) return;
  CHECK_EQ_INT(sheaf_ctx_threads(ctx), threads);
  sh_dataset d;
  if (!CHECK_OK(ctx, sh_dataset_load(ctx, EWT, SH_DATASET_SENTS, &d))) {
    sheaf_ctx_free(ctx);
    return;
  }
  tl_model tm;
  if (!tl_open(ctx, path, sizes, &d, &tm)) {
    sh_dataset_free(&d);
    sheaf_ctx_free(ctx);
    return;
  }
  char why[512];
  sh_lin *L = NULL;
  int n = N_SENTS < sh_dataset_count(&d) ? N_SENTS : sh_dataset_count(&d);
  int64_t cap = 0, width = 0, *at = calloc((size_t)n + 1, sizeof *at);
  float *want = NULL, *got = NULL;
  if (!CHECK_OK(ctx, sh_lin_create(&tm.m, tm.model, &tm.bind, &L, why, sizeof why))) {
    fprintf(stderr, "%s: %s\n", path, why);
    goto out;
  }
  CHECK(sh_lin_takes_sequences(L));
  CHECK_EQ_INT(sh_lin_n_outputs(L), 1);
  {
    int rank;
    int64_t dims[2];
    sh_lin_output_shape(L, 0, &rank, dims);
    width = dims[0];
  }
  cap = (int64_t)(d.sent_off[n] - d.sent_off[0]) * width;
  want = calloc((size_t)cap + 1, sizeof *want);
  got = calloc((size_t)cap + 1, sizeof *got);
  if (!at || !want || !got || !dynamic_seq(ctx, &tm, d.sent_off, d.sent_words, d.ids, n, want, at, cap)) goto out;
  static const int batches[] = {1, 7, 64};
  for (int bi = 0; bi < 3; bi++) {
    int b = batches[bi];
    int stop = b == 1 ? 20 : n; /* batch 1: the first 20 sentences */
    memset(got, 0, (size_t)cap * sizeof *got);
    for (int first = 0; first < stop; first += b) {
      int cnt = first + b <= stop ? b : stop - first;
      if (!CHECK_OK(ctx, sh_lin_run_seq(L, d.sent_off, d.sent_words, first, cnt, d.ids))) goto out;
      /* at 2 threads the batch runs as parts (split, the default), each with its stages' own buffers */
      CHECK_EQ_INT(sh_lin_n_parts(L), tl_want_parts(threads, true, cnt));
      for (int t = 0; t < cnt; t++) {
        CHECK_EQ_INT(sh_lin_output_rows(L, t), d.sent_off[first + t + 1] - d.sent_off[first + t]);
        int64_t w = linear_outputs(L, t, got + at[first + t], cap - at[first + t]);
        if (!CHECK_EQ_INT(w, at[first + t + 1] - at[first + t])) goto out;
      }
    }
    double worst = sh_max_rel_err(got, want, at[stop] / width, width);
    if (!CHECK(worst <= 1e-5)) fprintf(stderr, "%s batch %d threads %d: max rel err %g\n", path, b, threads, worst);
  }
out:
  free(at), free(want), free(got);
  sh_lin_free(L);
  tl_close(ctx, &tm);
  sh_dataset_free(&d);
  sheaf_ctx_free(ctx);
}

TEST(linear_mat_transformer_matches_dynamic_1_thread) { check_model(TRANSFORMER, SIZES, 1); }
TEST(linear_mat_transformer_matches_dynamic_2_threads) { check_model(TRANSFORMER, SIZES, 2); }

/* Sentences of lengths 1, 2, 0, 3 (a one-word sentence attends to itself
 * only; the empty one has no rows: the dynamic runtime refuses its `stack`
 * of an empty list, so the comparison skips it). */
TEST(linear_mat_short_sentences) {
  sheaf_ctx *ctx = th_ctx();
  if (!th_have_jit_cc("linear_mat_short_sentences")) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  static const int32_t off[] = {0, 1, 3, 3, 6}, words[] = {5, 9, 2, 4, 4, 7};
  sh_word_ids ids = sh_word_ids_of_rows(100);
  tl_model tm;
  sh_lin *L = NULL;
  char why[512];
  if (!tl_open(ctx, TRANSFORMER, SIZES, NULL, &tm)) return;
  if (!CHECK_OK(ctx, sh_lin_create(&tm.m, tm.model, &tm.bind, &L, why, sizeof why))) goto out;
  /* a dense stage (q, k, v), the ragged heads, a dense stage (W_o, the norms, the FFN) */
  CHECK_EQ_INT(sh_lin_n_kernels(L), 3);
  const char *src = sh_lin_kernel_source(L);
  CHECK_CONTAINS(src, "kernel main_arm0_d0(");
  CHECK_CONTAINS(src, "kernel main_arm0_r1(L: i32[B], x0: f32[B, L(b), 4, 8]");
  CHECK_CONTAINS(src, "-> (o0: f32[B, L(b), 4, 8])"); /* the 4 heads fused: h an index */
  CHECK_CONTAINS(src, "s0(b, h, i, j) +=! x0(b, i, h, d) * x1(b, j, h, d)");
  CHECK_CONTAINS(src, "kernel main_arm0_d1(");
  if (!CHECK_OK(ctx, sh_lin_run_seq(L, off, words, 0, 4, ids))) goto out;
  static const int32_t lens[] = {1, 2, 0, 3};
  for (int s = 0; s < 4; s++) CHECK_EQ_INT(sh_lin_output_rows(L, s), lens[s]);
  CHECK(sh_lin_output_row(L, 2, 0, 0) == NULL);
  CHECK(sh_lin_output_row(L, 0, 1, 0) == NULL);
  {
    static const int32_t doff[] = {0, 1, 3, 6}, dwords[] = {5, 9, 2, 4, 4, 7}; /* without the empty one */
    static const int map[] = {0, 1, 3};
    float want_o[6 * 32], got_o[6 * 32];
    int64_t at[4];
    if (dynamic_seq(ctx, &tm, doff, dwords, ids, 3, want_o, at, 6 * 32) && CHECK_EQ_INT(at[3], 6 * 32)) {
      for (int s = 0; s < 3; s++)
        CHECK_EQ_INT(linear_outputs(L, map[s], got_o + at[s], 6 * 32 - at[s]), at[s + 1] - at[s]);
      CHECK(sh_max_rel_err(got_o, want_o, 6, 32) <= 1e-5);
    }
  }
  /* one sentence alone (batch 1, length 1): the same row as in the batch above */
  {
    float want_o[32];
    int64_t at[2];
    if (CHECK_OK(ctx, sh_lin_run_seq(L, off, words, 0, 1, ids)) &&
        dynamic_seq(ctx, &tm, off, words, ids, 1, want_o, at, 32) && CHECK_EQ_INT(at[1], 32)) {
      const float *p = sh_lin_output_row(L, 0, 0, 0);
      if (CHECK(p != NULL)) CHECK(sh_max_rel_err(p, want_o, 1, 32) <= 1e-5);
    }
  }
out:
  sh_lin_free(L);
  tl_close(ctx, &tm);
}

/* Heads not fused (two heads of different widths, one of them on the
 * whole value; a scale that is not a power of two) against the dynamic
 * runtime on sentences of lengths 1, 2 and 3. */
TEST(linear_mat_unfused_heads) {
  sheaf_ctx *ctx = th_ctx();
  if (!th_have_jit_cc("linear_mat_unfused_heads")) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  static const char text[] = "param emb : f32[V, 8]\nparam W : f32[8, 8]\nparam b : f32[8]\nparam W2 : f32[16, 8]\n"
                             "fn att(q: f32[N, K], k: f32[N, K], v: f32[N, K]) -> f32[N, K] {\n"
                             "  softmax(q @ transpose(k) * 0.3) @ v\n"
                             "}\n"
                             "fn main(ws: list[i32]) -> list[f32[8]] {\n"
                             "  let x = stack(for w in ws { emb[w] });\n"
                             "  let q = x @ W + b;\n"
                             "  let a = cat(att(q, x, q), att(x[0:3], q[0:3], x[2:5]) * 2.0, x[0:5]);\n"
                             "  let y = tanh(a @ W2);\n"
                             "  for i in 0..len(ws) { y[i] }\n"
                             "}\n";
  static const int32_t off[] = {0, 1, 3, 6}, words[] = {5, 9, 2, 4, 4, 7};
  sh_word_ids ids = sh_word_ids_of_rows(100);
  tl_model tm;
  sh_lin *L = NULL;
  char why[512];
  if (!tl_open_src(ctx, "unfused.sf", text, NULL, NULL, &tm)) return;
  if (!CHECK_OK(ctx, sh_lin_create(&tm.m, tm.model, &tm.bind, &L, why, sizeof why))) {
    fprintf(stderr, "unfused.sf: %s\n", why);
    goto out;
  }
  CHECK_CONTAINS(sh_lin_kernel_source(L), "u1(b, i, j) = s1(b, i, j) * (0.300000012)");
  if (!CHECK_OK(ctx, sh_lin_run_seq(L, off, words, 0, 3, ids))) goto out;
  {
    float want_o[6 * 8], got_o[6 * 8];
    int64_t at[4];
    if (dynamic_seq(ctx, &tm, off, words, ids, 3, want_o, at, 6 * 8) && CHECK_EQ_INT(at[3], 6 * 8)) {
      for (int s = 0; s < 3; s++) CHECK_EQ_INT(linear_outputs(L, s, got_o + at[s], 6 * 8 - at[s]), at[s + 1] - at[s]);
      CHECK(sh_max_rel_err(got_o, want_o, 6, 8) <= 1e-5);
    }
  }
out:
  sh_lin_free(L);
  tl_close(ctx, &tm);
}

#define HEAD "param emb : f32[V, D]\nparam W : f32[D, D]\n"

static const char *const D8[] = {"D=8", NULL}; /* the refusal tests' sizes */

TEST(linear_mat_refusals) {
  char why[512];
  static const char expo[] = HEAD "fn main(ws: list[i32]) -> list[f32[D]] {\n"
                                  "  let x = stack(for w in ws { emb[w] });\n"
                                  "  let y = exp(x @ transpose(x)) @ x;\n"
                                  "  for i in 0..len(ws) { y[i] }\n"
                                  "}\n";
  if (tl_refusal("expo.sf", expo, D8, why, sizeof why))
    CHECK_CONTAINS(why, "expo.sf:5:11: a sentence's N x N scores (q @ transpose(k)) are translated only");
  static const char tw[] = HEAD "fn main(ws: list[i32]) -> list[f32[D]] {\n"
                                "  let x = stack(for w in ws { emb[w] });\n"
                                "  let y = x @ transpose(W);\n"
                                "  for i in 0..len(ws) { y[i] }\n"
                                "}\n";
  if (tl_refusal("tw.sf", tw, D8, why, sizeof why))
    CHECK_CONTAINS(why, "tw.sf:5:15: transpose of other than a sentence's matrix");
  static const char rev[] = HEAD "fn main(ws: list[i32]) -> list[f32[D]] {\n"
                                 "  let x = stack(for w in rev(ws) { emb[w] });\n"
                                 "  for i in 0..len(ws) { x[i] }\n"
                                 "}\n";
  if (tl_refusal("rev.sf", rev, D8, why, sizeof why))
    CHECK_CONTAINS(why, "rev.sf:4:26: stack over a list other than main's words");
  static const char scaled[] = HEAD "fn main(ws: list[i32]) -> list[f32[D]] {\n"
                                    "  let x = stack(for w in ws { emb[w] });\n"
                                    "  let y = softmax(x @ transpose(x) + x @ transpose(x)) @ x;\n"
                                    "  for i in 0..len(ws) { y[i] }\n"
                                    "}\n";
  if (tl_refusal("scaled.sf", scaled, D8, why, sizeof why))
    CHECK_CONTAINS(why, "scaled.sf:5:19: a sentence's N x N scores");
  static const char rowvec[] = HEAD "fn main(ws: list[i32]) -> list[f32[D]] {\n"
                                    "  let x = stack(for w in ws { emb[w] });\n"
                                    "  let p = softmax(x @ transpose(x));\n"
                                    "  let y = (p @ (x @ transpose(x))) @ x;\n"
                                    "  for i in 0..len(ws) { y[i] }\n"
                                    "}\n";
  if (tl_refusal("rowvec.sf", rowvec, D8, why, sizeof why))
    CHECK_CONTAINS(why, "rowvec.sf:6:12: softmax(scores) @ ...: the right operand must be a sentence's matrix");
}
