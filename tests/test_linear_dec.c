/*
 * test_linear_dec.c — the linearized mode on a decoder that attends over the
 * encoder's matrix (seq2seq.sf: an encoder LSTM scan, the decoder's initial
 * state its last state, the decoder step's attention softmax(es @ q) @ es
 * over the sentence's rows): every output against the dynamic runtime on
 * the bundled EWT sentences (batches 1, 7 and 64; 1, 2 and 3 threads, split
 * on and off; 1e-5 relative), on sentences of one, two and three words in
 * one batch and one by one, of 7 to 300 words (the attention's blocks of
 * eight words), variants (a fold as the decoder, a zero
 * initial state), and refusals of what a decoder's state may not do.
 */
#include <stdlib.h>

#include "compile/linear.h"
#include "harness.h"
#include "io/dataset.h"
#include "test_linear_seq_util.h"

#define S2S "examples/seq2seq.sf"
static const char *const s2s_sizes[] = {"H=16", "E=12", "C=5", NULL};

TEST(linear_dec_seq2seq_matches_dynamic) { check_seq_model_on(th_ctx(), S2S, s2s_sizes); }

/* The model in text (or path) on sentences of 1, 2, 1 and 3 words in one
 * batch and one by one against the dynamic runtime. */
static void check_short(const char *path, const char *text) {
  sheaf_ctx *ctx = th_ctx();
  if (!th_have_jit_cc(path)) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  static const int32_t off[] = {0, 1, 3, 4, 7}, words[] = {7, 3, 4, 9, 5, 2, 5};
  tl_model tm;
  if (!tl_open_src(ctx, path, text, s2s_sizes, NULL, &tm)) return;
  check_seq_small(ctx, &tm, path, off, words, 4);
  tl_close(ctx, &tm);
}

static const char dec_head[] =
    "param emb   : f32[V, E]\n"
    "param W_enc : f32[E + H, 4*H]\n"
    "param b_enc : f32[4*H]\n"
    "param W_dec : f32[E + 2*H, 4*H]\n"
    "param b_dec : f32[4*H]\n"
    "param W_att : f32[H, H]\n"
    "param W_out : f32[2*H, C]\n"
    "fn enc_step(s: (f32[H], f32[H]), w: i32) -> (f32[H], f32[H]) {\n"
    "  let (h, c) = s;\n"
    "  lstm_cell(W_enc, b_enc, cat(emb[w], h), c)\n"
    "}\n"
    "fn dec_step(s: (f32[H], f32[H], f32[H], f32[N, H]), w: i32) -> (f32[H], f32[H], f32[H], f32[N, H]) {\n"
    "  let (h, c, ctx, es) = s;\n"
    "  let (h2, c2) = lstm_cell(W_dec, b_dec, cat(emb[w], ctx, h), c);\n"
    "  (h2, c2, softmax(es @ (h2 @ W_att)) @ es, es)\n"
    "}\n";

TEST(linear_dec_short_sentences) {
  check_short(S2S, NULL);
  char src[4096];
  /* a zero initial state, the decoder over rev(ws), its result a fold (one row per sentence) */
  snprintf(src, sizeof src, "%s"
           "fn main(ws: list[i32]) -> f32[C] {\n"
           "  let enc = scan(enc_step, (zeros(H), zeros(H)), ws);\n"
           "  let es = stack(for (h, _) in enc { h });\n"
           "  let (h, _, ctx, _) = fold(dec_step, (zeros(H), zeros(H), zeros(H), es), rev(ws));\n"
           "  log_softmax(cat(h, ctx) @ W_out)\n"
           "}\n", dec_head);
  check_short("fold.sf", src);
  /* the matrix of a map over the encoder's states by position, the cell state from the encoder */
  snprintf(src, sizeof src, "%s"
           "fn main(ws: list[i32]) -> list[f32[C]] {\n"
           "  let enc = scan(enc_step, (zeros(H), zeros(H)), ws);\n"
           "  let es = stack(for i in 0..len(ws) { let (h, _) = enc[i]; tanh(h) });\n"
           "  let (_, c0) = enc[len(ws) - 1];\n"
           "  let dec = scan(dec_step, (zeros(H), c0, zeros(H), es), ws);\n"
           "  for s in dec { let (h, _, ctx, _) = s; log_softmax(cat(h, ctx) @ W_out) }\n"
           "}\n", dec_head);
  check_short("bypos.sf", src);
}

/* Sentences of 7, 8, 9, 16, 17 and 300 words (the attention's blocks of
 * eight words: full, none, a partial last one, a long sentence), in one
 * batch and one by one, against the dynamic runtime: every output within
 * 1e-5 (relative). */
TEST(linear_dec_long_sentences) {
  sheaf_ctx *ctx = th_ctx();
  if (!th_have_jit_cc(S2S)) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  enum { N = 6, WORDS = 7 + 8 + 9 + 16 + 17 + 300, CAP = (WORDS + N) * 5 };
  static const int32_t len[N] = {7, 8, 9, 16, 17, 300};
  int32_t off[N + 1] = {0}, words[WORDS];
  for (int i = 0; i < N; i++) off[i + 1] = off[i] + len[i];
  for (int k = 0; k < WORDS; k++) words[k] = (k * 37 + 11) % 97;
  sh_word_ids ids = sh_word_ids_of_rows(100);
  float *want = malloc(CAP * sizeof *want), *got = malloc(CAP * sizeof *got);
  int64_t at[N + 1];
  tl_model tm;
  sh_lin *L = NULL;
  char why[512];
  if (!CHECK(want && got) || !tl_open_src(ctx, S2S, NULL, s2s_sizes, NULL, &tm)) goto out_free;
  if (!CHECK_OK(ctx, sh_lin_create(&tm.m, tm.model, &tm.bind, &L, why, sizeof why))) {
    fprintf(stderr, "%s: %s\n", S2S, why);
    goto out;
  }
  if (!dynamic_seq(ctx, &tm, off, words, ids, N, want, at, CAP)) goto out;
  for (int b = 1; b <= N; b += N - 1) {
    memset(got, 0, CAP * sizeof *got);
    for (int first = 0; first < N; first += b) {
      if (!CHECK_OK(ctx, sh_lin_run_seq(L, off, words, first, b, ids))) goto out;
      for (int t = 0; t < b; t++)
        CHECK_EQ_INT(linear_outputs(L, t, got + at[first + t], CAP - at[first + t]), at[first + t + 1] - at[first + t]);
    }
    double worst = sh_max_rel_err(got, want, at[N] / elem_width(L), elem_width(L));
    if (!CHECK(worst <= 1e-5)) fprintf(stderr, "long sentences, batch %d: max rel err %g\n", b, worst);
  }
out:
  sh_lin_free(L);
  tl_close(ctx, &tm);
out_free:
  free(want), free(got);
}

static void refused(const char *name, const char *main_src, const char *want) {
  char src[4096], why[512];
  snprintf(src, sizeof src, "%s%s", dec_head, main_src);
  if (!tl_refusal(name, src, s2s_sizes, why, sizeof why)) return;
  if (!CHECK(strstr(why, want) != NULL)) fprintf(stderr, "%s: %s\n", name, why);
}

TEST(linear_dec_refusals) {
  /* a nonzero attention context to start with */
  refused("ctx0.sf",
          "fn main(ws: list[i32]) -> list[f32[C]] {\n"
          "  let enc = scan(enc_step, (zeros(H), zeros(H)), ws);\n"
          "  let es = stack(for (h, _) in enc { h });\n"
          "  let (h0, c0) = enc[len(ws) - 1];\n"
          "  let dec = scan(dec_step, (h0, c0, h0, es), ws);\n"
          "  for s in dec { let (h, _, ctx, _) = s; log_softmax(cat(h, ctx) @ W_out) }\n"
          "}\n",
          "ctx0.sf:12:4: a decoder's attention context whose initial value is not zeros");
  /* an initial state other than zeros, the encoder's last state or the matrix */
  refused("init.sf",
          "fn main(ws: list[i32]) -> list[f32[C]] {\n"
          "  let enc = scan(enc_step, (zeros(H), zeros(H)), ws);\n"
          "  let es = stack(for (h, _) in enc { h });\n"
          "  let (h0, c0) = enc[len(ws) - 1];\n"
          "  let dec = scan(dec_step, (tanh(h0), c0, zeros(H), es), ws);\n"
          "  for s in dec { let (h, _, ctx, _) = s; log_softmax(cat(h, ctx) @ W_out) }\n"
          "}\n",
          "init.sf:21:28: a decoder's initial state: item 0 is not zeros(...), an encoder scan's last state");
  /* the encoder's last state also read by main */
  refused("lastread.sf",
          "fn main(ws: list[i32]) -> list[f32[C]] {\n"
          "  let enc = scan(enc_step, (zeros(H), zeros(H)), ws);\n"
          "  let es = stack(for (h, _) in enc { h });\n"
          "  let (h0, c0) = enc[len(ws) - 1];\n"
          "  let dec = scan(dec_step, (h0, c0, zeros(H), es), ws);\n"
          "  for s in dec { let (h, _, ctx, _) = s; log_softmax(cat(h, ctx + h0) @ W_out) }\n"
          "}\n",
          "an encoder's last state read besides as a decoder's initial state");
}

/* A step using the matrix otherwise than in an attention. */
TEST(linear_dec_refuses_other_matrix_use) {
  char why[512];
  static const char other[] =
      "param emb : f32[V, H]\n"
      "param W : f32[H, H]\n"
      "fn enc_step(h: f32[H], w: i32) -> f32[H] = tanh(emb[w] + h)\n"
      "fn dec_step(s: (f32[H], f32[N, H]), w: i32) -> (f32[H], f32[N, H]) {\n"
      "  let (h, es) = s;\n"
      "  (tanh(emb[w] + sum(es @ (h @ W)) * h), es)\n"
      "}\n"
      "fn main(ws: list[i32]) -> list[f32[H]] {\n"
      "  let enc = scan(enc_step, zeros(H), ws);\n"
      "  let es = stack(for h in enc { h });\n"
      "  let dec = scan(dec_step, (zeros(H), es), ws);\n"
      "  for s in dec { let (h, _) = s; h }\n"
      "}\n";
  if (tl_refusal("other.sf", other, (const char *[]){"H=8", NULL}, why, sizeof why))
    CHECK_CONTAINS(why, "other.sf:6:");
}
