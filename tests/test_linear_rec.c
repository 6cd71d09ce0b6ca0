/*
 * test_linear_rec.c — the linearized mode on token records (main takes
 * list[Tok]: chartagger.sf): every output against the dynamic runtime fed
 * the same records (sh_interp_records) on the bundled EWT sentences
 * (batches 1, 7 and 64; 1 and 2 threads, split on and off; 1e-5 relative),
 * on hand-built sentences of one and two tokens with forms of one byte and
 * of many (the chars' mean, the root's and the others' head distance), a
 * missing column named, and refusals of what a token's code may not do.
 */
#include <stdlib.h>

#include "compile/linear.h"
#include "harness.h"
#include "io/dataset.h"
#include "test_linear_seq_util.h"

#define CT "examples/chartagger.sf"
static const char *const ct_sizes[] = {"E=8", "H=16", "T=6", NULL};

/* A batch of sentences as records: off (n + 1), per token its word (data
 * ids), columns and text. */
typedef struct rec_batch {
  const int32_t *off, *words;
  sh_lin_records rec;
} rec_batch;

/* A records run's batch and word numbering (run_rec_batch's user). */
typedef struct rec_job {
  const rec_batch *B;
  sh_word_ids ids;
} rec_job;

/* Sentence s's token records: its words w (mapped) and B's columns. */
static bool rec_input(sheaf_ctx *ctx, sh_interp *ip, int s, const int32_t *w, int32_t len, const void *user, sh_value *in) {
  const rec_batch *B = user;
  const sh_lin_records *R = &B->rec;
  int32_t o = B->off[s];
  sh_token_cols t = {len, w, R->upos ? R->upos + o : NULL, R->xpos ? R->xpos + o : NULL,
                     R->deprel ? R->deprel + o : NULL, R->head ? R->head + o : NULL,
                     R->form ? R->form + o : NULL, R->form_len ? R->form_len + o : NULL};
  return CHECK_OK(ctx, sh_interp_records(ip, &t, in));
}

/* The dynamic runtime's outputs of sentences 0 .. n-1 (batches of 32), one
 * after another: instance i at want + at[i]. */
static bool dynamic_rec(sheaf_ctx *ctx, tl_model *tm, const rec_batch *B, sh_word_ids ids, int n, float *want,
                        int64_t *at, int64_t cap) {
  return dynamic_run(ctx, tm, B->off, B->words, ids, n, rec_input, B, want, at, cap);
}

/* Sentences first .. first + cnt - 1 of the rec_batch user as records
 * (L must take them). */
static sheaf_status run_rec_batch(sh_lin *L, const sh_dataset *d, int first, int cnt, const void *user) {
  const rec_batch *B = ((const rec_job *)user)->B;
  (void)d;
  if (!CHECK(sh_lin_takes_records(L) && sh_lin_takes_sequences(L))) return SHEAF_ERR_INTERNAL;
  return sh_lin_run_rec(L, B->off, B->words, &B->rec, first, cnt, ((const rec_job *)user)->ids);
}

/* The linear mode on `threads` threads (split or not) over sentences 0 ..
 * n-1 in batches of 1 (the first `ones`), 7 and 64 against want. */
static void check_rec_linear(const rec_batch *B, sh_word_ids ids, const sh_dataset *d, int n, int ones,
                             const float *want, const int64_t *at, int64_t cap, int threads, bool split) {
  rec_job J = {B, ids};
  check_linear_runs(CT, ct_sizes, d, n, ones, run_rec_batch, &J, want, at, cap, threads, split);
}

/* B's n sentences: dynamic once, then linear on 1 and 2 threads, split and not. */
static void check_rec_batch(const rec_batch *B, sh_word_ids ids, const sh_dataset *d, int n, int ones) {
  sheaf_ctx *ctx = th_ctx();
  tl_model tm;
  if (!tl_open(ctx, CT, ct_sizes, d, &tm)) return;
  int64_t T = B->off[n] - B->off[0], cap = (T + n) * 6; /* T = 6 floats a token */
  int64_t *at = calloc((size_t)n + 1, sizeof *at);
  float *want = calloc((size_t)cap, sizeof *want);
  if (CHECK(at && want) && dynamic_rec(ctx, &tm, B, ids, n, want, at, cap) && CHECK_EQ_INT(at[n], T * 6))
    for (int threads = 1; threads <= 2; threads++)
      for (int split = 1; split >= (threads > 1 ? 0 : 1); split--)
        check_rec_linear(B, ids, d, n, ones, want, at, cap, threads, split);
  free(at), free(want);
  tl_close(ctx, &tm);
}

TEST(linear_rec_chartagger_matches_dynamic) {
  if (!th_have_jit_cc(CT)) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  sheaf_ctx *ctx = th_ctx();
  sh_dataset d;
  REQUIRE_OK(ctx, sh_dataset_load(ctx, EWT, SH_DATASET_SENTS, &d));
  int n = N_SENTS < sh_dataset_count(&d) ? N_SENTS : sh_dataset_count(&d);
  int32_t nt = d.sent_off[n];
  const char **form = malloc(((size_t)nt + 1) * sizeof *form);
  size_t *form_len = malloc(((size_t)nt + 1) * sizeof *form_len);
  if (CHECK(form && form_len)) {
    for (int32_t k = 0; k < nt; k++) {
      form[k] = sh_vocab_str(&d.words, d.sent_words[k]);
      form_len[k] = sh_vocab_len(&d.words, d.sent_words[k]);
    }
    rec_batch B = {d.sent_off, d.sent_words, {d.sent_tags, d.sent_xpos, d.sent_deprel, d.sent_head, form, form_len}};
    check_rec_batch(&B, d.ids, &d, n, 20);
  }
  free(form), free(form_len);
  sh_dataset_free(&d);
}

/* Sentences of 1, 2, 1 and 3 tokens: forms of one byte and of many (UTF-8
 * bytes above 127 too), the root (head 0) first, last and alone, heads
 * before and after the token; in one batch, one by one and split. */
static const int32_t h_off[] = {0, 1, 3, 4, 7};
static const int32_t h_words[] = {5, 9, 2, 40, 7, 7, 11};
static const int32_t h_upos[] = {1, 2, 3, 4, 5, 6, 7}, h_xpos[] = {0, 1, 0, 1, 0, 1, 2};
static const int32_t h_deprel[] = {0, 37, 5, 0, 12, 0, 36}, h_head[] = {0, 2, 0, 0, 2, 0, 2};
static const char *const h_form[] = {"a", "internationalization", "\xc3\xa9t\xc3\xa9", "x", "Zz", "ok",
                                     "a-very-long-token-of-many-bytes-indeed"};
static const size_t h_len[] = {1, 20, 5, 1, 2, 2, 38};

TEST(linear_rec_short_sentences_and_chars) {
  if (!th_have_jit_cc(CT)) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  rec_batch B = {h_off, h_words, {h_upos, h_xpos, h_deprel, h_head, h_form, h_len}};
  check_rec_batch(&B, sh_word_ids_of_rows(100), NULL, 4, 4);
}

/* The data lacks a column main reads: an error naming the field; a model
 * taking records refuses sh_lin_run_seq; a chars index outside its table. */
TEST(linear_rec_missing_field_errors) {
  if (!th_have_jit_cc(CT)) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  sheaf_ctx *ctx = th_ctx();
  tl_model tm;
  char why[512];
  sh_lin *L = NULL;
  if (!tl_open(ctx, CT, ct_sizes, NULL, &tm)) return;
  sh_word_ids ids = sh_word_ids_of_rows(100);
  if (CHECK_OK(ctx, sh_lin_create(&tm.m, tm.model, &tm.bind, &L, why, sizeof why))) {
    sh_lin_records r = {h_upos, h_xpos, NULL, h_head, h_form, h_len};
    CHECK_EQ_INT(sh_lin_run_rec(L, h_off, h_words, &r, 0, 4, ids), SHEAF_ERR_INVALID_ARG);
    CHECK(strstr(sheaf_ctx_last_error(ctx), "'deprel'") != NULL);
    r.deprel = h_deprel, r.form = NULL;
    CHECK_EQ_INT(sh_lin_run_rec(L, h_off, h_words, &r, 0, 4, ids), SHEAF_ERR_INVALID_ARG);
    CHECK(strstr(sheaf_ctx_last_error(ctx), "'chars'") != NULL);
    CHECK_EQ_INT(sh_lin_run_seq(L, h_off, h_words, 0, 4, ids), SHEAF_ERR_INVALID_ARG);
    CHECK(strstr(sheaf_ctx_last_error(ctx), "token records") != NULL);
    CHECK_EQ_INT(sh_lin_run_rec(L, h_off, h_words, NULL, 0, 4, ids), SHEAF_ERR_INVALID_ARG);
    static const int32_t bad_rel[] = {0, 38, 5, 0, 12, 0, 36}; /* remb has 38 rows */
    r.form = h_form, r.deprel = bad_rel;
    CHECK_EQ_INT(sh_lin_run_rec(L, h_off, h_words, &r, 0, 4, ids), SHEAF_ERR_INVALID_ARG);
    CHECK(strstr(sheaf_ctx_last_error(ctx), "outside its table") != NULL);
  }
  sh_lin_free(L);
  tl_close(ctx, &tm);
}

static const char rec_head[] =
    "type Tok = Tok(word: i32, chars: list[i32], deprel: i32, head: i32, index: i32)\n"
    "param emb : f32[V, E]\nparam cemb : f32[256, E]\nparam W : f32[E, E]\n";

static void refused(const char *name, const char *body, const char *want) {
  char src[2048], why[512];
  snprintf(src, sizeof src, "%s%s", rec_head, body);
  if (!tl_refusal(name, src, (const char *[]){"E=4", "V=50", NULL}, why, sizeof why)) return;
  if (!CHECK(strstr(why, want) != NULL)) fprintf(stderr, "%s: %s\n", name, why);
}

TEST(linear_rec_refusals) {
  /* a loop over the chars other than mean(for c in cs { table[c] }) */
  refused("chars.sf",
          "fn main(s: list[Tok]) -> list[f32[E]] {\n"
          "  for t in s { let Tok(w, cs, r, h, i) = t; mean(for c in cs { tanh(cemb[c]) }) }\n}\n",
          "chars.sf:6:50: a loop over a token's chars: the linearized mode translates it only as "
          "mean(for c in cs { table[c] })");
  /* an if on the fields choosing tensors */
  refused("iftens.sf",
          "fn main(s: list[Tok]) -> list[f32[E]] {\n"
          "  for t in s { let Tok(w, cs, r, h, i) = t; if h == 0 { emb[w] } else { cemb[r] } }\n}\n",
          "iftens.sf:6:45: an if on a token's integer fields whose branches are not integers");
  /* integer division on the fields */
  refused("div.sf",
          "fn main(s: list[Tok]) -> list[f32[E]] {\n"
          "  for t in s { let Tok(w, cs, r, h, i) = t; emb[w] * float(h / 2) }\n}\n",
          "div.sf:6:60: a token's integer code with other than + - * and comparisons");
  /* arithmetic on a word */
  refused("wordarith.sf",
          "fn main(s: list[Tok]) -> list[f32[E]] {\n"
          "  for t in s { let Tok(w, cs, r, h, i) = t; emb[w] * float(w + 1) }\n}\n",
          "wordarith.sf:6:60: a token's integer code over other than its integer fields and integer literals");
}

/* A token's integer code that overflows i32 (head * 70000 * 70000, every
 * token but the root): both modes fail with the interpreter's error at the
 * product's position (the linearized mode once computed in int64 and
 * truncated, a silent wrong answer). */
TEST(linear_rec_i32_overflow_is_the_interpreters_error) {
  if (!th_sheaf_bin() || !th_have_jit_cc(CT)) return;
  static const char src[] =
      "type Tok = Tok(word: i32, chars: list[i32], deprel: i32, head: i32, index: i32)\n"
      "param emb : f32[V, E]\n"
      "fn main(s: list[Tok]) -> list[f32[E + 1]] {\n"
      "  for t in s { let Tok(w, cs, r, h, i) = t; cat(emb[w], float(h * 70000 * 70000)) }\n"
      "}\n";
  const char *model = th_write_tmp("overflow.sf", src, sizeof src - 1);
  REQUIRE(model);
  char mpath[512], out[2][4096], line[2][512];
  snprintf(mpath, sizeof mpath, "%s", model);
  static const char *const modes[2] = {"dynamic", "linear"};
  for (int k = 0; k < 2; k++) {
    int rc = th_sheaf(out[k], sizeof out[k], "run %s --data %s --limit 3 --size E=4 --mode %s --out - 2>&1", mpath,
                      TH_EWT_TEST, modes[k]);
    CHECK(rc != 0);
    const char *p = strstr(out[k], "overflow.sf:4:");
    line[k][0] = 0;
    if (CHECK(p != NULL)) snprintf(line[k], sizeof line[k], "%.*s", (int)strcspn(p, "\n"), p);
    if (!CHECK(strstr(line[k], "error: i32 overflow: ") && strstr(line[k], " * 70000 = ")))
      fprintf(stderr, "--mode %s:\n%s", modes[k], out[k]);
  }
  /* the same position (the outer product's); the values are the first token each mode evaluates */
  CHECK_EQ_INT((int)strcspn(line[0], "i"), (int)strcspn(line[1], "i"));
  CHECK(!strncmp(line[0], line[1], strcspn(line[0], "i")));
}
