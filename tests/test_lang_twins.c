/*
 * test_lang_twins.c — the dynamic models' .sf twins of src/models.
 *
 * examples/parser.sf (the shift-reduce parser in the
 * language: a stack of word indices with push / pop, representations
 * replaced with set, argmax over the legal actions) against the C-API
 * parser (src/models/parser.c) on the same saved weights and EWT
 * sentences: heads and action sequences identical. Then the .sf parser
 * batched on fibers (64 per batch, every policy, 1 and 2 threads) gives
 * exactly the output of one sentence per batch, with far fewer flushes.
 *
 * examples/beam.sf (beam search of width 4 over the seq2seq decoder:
 * values, topk, cat of lists, host floats in double) against
 * sh_decoder_beam (src/models/beam.c) on the same weights: tokens
 * identical, scores within 1e-5, one per batch and 64 per batch on fibers.
 */
#include <math.h>
#include <stdlib.h>

#include "harness.h"
#include "io/dataset.h"
#include "models/beam.h"
#include "models/parser.h"

#define EWT "data/ud_english_ewt/en_ewt-ud-test.conllu"
#define PA_N 160

static const char *const k_pols[] = {"none", "sheaf", "depth", "agenda"};

static bool run_sf(const char *w, const char *pol, int threads, int batch, const char *out, char *sum,
                   size_t cap) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "%s run examples/parser.sf --data " EWT " --limit %d --weights %s --policy %s --threads %d "
           "--batch %d --out %s",
           th_sheaf_bin(), PA_N, w, pol, threads, batch, out);
  int rc = th_run(cmd, sum, cap);
  if (!CHECK_EQ_INT(rc, 0)) {
    fprintf(stderr, "%s\n%s", cmd, sum);
    return false;
  }
  return true;
}

TEST(lang_parser_sf_matches_c_and_batches) {
  if (!th_sheaf_bin()) return;
  sheaf_ctx *ctx = th_ctx();
  sh_dataset d;
  REQUIRE_OK(ctx, sh_dataset_load(ctx, EWT, SH_DATASET_SENTS, &d));
  sheaf_model *m = NULL;
  sh_parser p;
  sheaf_graph *g = NULL;
  static char sum[1 << 14], want[1 << 20];
  char *ref_text = NULL;
  int32_t rows[1024], heads[1024];
  int8_t acts[2048];
  char wpath[512];
  snprintf(wpath, sizeof wpath, "%s", th_tmp_path("parser_sf.safetensors"));
  if (!CHECK_OK(ctx, sheaf_model_create(ctx, &m)) || !CHECK_OK(ctx, sh_parser_declare(m, 16, d.vocab, &p)) ||
      !CHECK_OK(ctx, sh_parser_seed(m, &p, 11)) || !CHECK_OK(ctx, sheaf_model_save(m, wpath)) ||
      !CHECK_OK(ctx, sheaf_graph_create(m, NULL, &g)))
    goto out;
  /* the C parser, one sentence at a time: the lines `sheaf run` prints for (heads, actions) */
  size_t at = 0;
  long left = 0, right = 0;
  for (int32_t i = 0; i < PA_N && i < d.n_sents; i++) {
    int32_t n = d.sent_off[i + 1] - d.sent_off[i];
    REQUIRE(n <= 1024);
    for (int32_t k = 0; k < n; k++) rows[k] = sh_word_id(d.ids, d.sent_words[d.sent_off[i] + k]);
    if (!CHECK_OK(ctx, sh_parser_run(g, &p, rows, n, heads, acts, NULL))) goto out;
    sheaf_graph_reset(g);
    at += (size_t)snprintf(want + at, sizeof want - at, "%d", (int)i);
    for (int32_t k = 0; k < n; k++) at += (size_t)snprintf(want + at, sizeof want - at, " %d", (int)heads[k]);
    at += (size_t)snprintf(want + at, sizeof want - at, "\n%d", (int)i);
    for (int32_t k = 0; k < 2 * n - 1; k++) {
      at += (size_t)snprintf(want + at, sizeof want - at, " %d", (int)acts[k]);
      left += acts[k] == SH_PARSE_LEFT;
      right += acts[k] == SH_PARSE_RIGHT;
    }
    at += (size_t)snprintf(want + at, sizeof want - at, "\n");
    REQUIRE(at < sizeof want - 64);
  }
  CHECK(left > 100 && right > 100); /* both reductions are chosen, at the end of the buffer too */
  char ref[512], got[512];
  snprintf(ref, sizeof ref, "%s", th_tmp_path("parser_sf_ref.txt"));
  if (!run_sf(wpath, "none", 1, 1, ref, sum, sizeof sum)) goto out;
  long one_flushes = th_flushes_of(sum);
  const char *r = th_read_file(ref, NULL);
  ref_text = r ? strdup(r) : NULL; /* kept across the later reads */
  if (!CHECK(ref_text)) goto out;
  if (!CHECK_EQ_STR(ref_text, want)) goto out;
  for (int q = 0; q < 4; q++)
    for (int th = 1; th <= 2; th++) {
      char name[64];
      snprintf(name, sizeof name, "parser_sf_%s_%d.txt", k_pols[q], th);
      snprintf(got, sizeof got, "%s", th_tmp_path(name));
      if (!run_sf(wpath, k_pols[q], th, 64, got, sum, sizeof sum)) continue;
      const char *t = th_read_file(got, NULL);
      if (!CHECK(t && !strcmp(t, ref_text)))
        fprintf(stderr, "parser.sf, policy %s, %d threads: heads or actions differ from one per batch\n",
                k_pols[q], th);
      if (th == 1) { /* one flush per decision round of a batch */
        long f = th_flushes_of(sum);
        if (!CHECK(f > 0 && f * 5 < one_flushes))
          fprintf(stderr, "parser.sf, policy %s: %ld flushes batched, %ld one by one\n", k_pols[q], f, one_flushes);
      }
    }
out:
  free(ref_text);
  sheaf_graph_free(g);
  sheaf_model_free(m);
  sh_dataset_free(&d);
}

#define BM_N 48

static bool run_beam(const char *w, const char *pol, int batch, const char *out, char *sum, size_t cap) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "%s run examples/beam.sf --data " EWT " --limit %d --weights %s --policy %s --threads 1 "
           "--batch %d --out %s",
           th_sheaf_bin(), BM_N, w, pol, batch, out);
  int rc = th_run(cmd, sum, cap);
  if (!CHECK_EQ_INT(rc, 0)) {
    fprintf(stderr, "%s\n%s", cmd, sum);
    return false;
  }
  return true;
}

/* Compares `sheaf run` output (per sentence: "i tok ..." then "i score")
 * with the C beam's tokens and scores; the number of sentences that differ. */
static int beam_compare(const char *path, const int32_t *toks, const int32_t *lens, const float *scores) {
  FILE *f = fopen(path, "r");
  if (!CHECK(f)) return BM_N;
  static char line[1 << 14];
  int bad = 0;
  for (int i = 0; i < BM_N; i++) {
    bool same = fgets(line, sizeof line, f) != NULL;
    char *p = line, *q;
    same = same && strtol(p, &q, 10) == i && q != p;
    for (int k = 0; same && k < lens[i]; k++) {
      p = q;
      same = strtol(p, &q, 10) == toks[i * SH_DEC_MAX_LEN + k] && q != p;
    }
    same = same && strspn(q, " \n") == strlen(q);
    same = same && fgets(line, sizeof line, f) != NULL && strtol(line, &q, 10) == i;
    double s = same ? strtod(q, NULL) : 0;
    same = same && fabs(s - scores[i]) <= 1e-5 * fmax(1.0, fabs((double)scores[i]));
    if (!same && !bad++) fprintf(stderr, "beam.sf: sentence %d differs from the C beam (%s)\n", i, line);
  }
  fclose(f);
  return bad;
}

TEST(lang_beam_sf_matches_c_beam) {
  if (!th_sheaf_bin()) return;
  sheaf_ctx *ctx = th_ctx();
  sh_dataset d;
  REQUIRE_OK(ctx, sh_dataset_load(ctx, EWT, SH_DATASET_SENTS, &d));
  sheaf_model *m = NULL;
  sh_decoder dec;
  sheaf_graph *g = NULL;
  static char sum[1 << 14];
  static int32_t toks[BM_N * SH_DEC_MAX_LEN], lens[BM_N];
  static float scores[BM_N];
  int32_t src[1024];
  char wpath[512];
  snprintf(wpath, sizeof wpath, "%s", th_tmp_path("beam_sf.safetensors"));
  if (!CHECK_OK(ctx, sheaf_model_create(ctx, &m)) ||
      !CHECK_OK(ctx, sh_decoder_declare(m, 20, 24, d.vocab, &dec)) ||
      !CHECK_OK(ctx, sh_decoder_seed(m, &dec, 7)) || !CHECK_OK(ctx, sheaf_model_save(m, wpath)) ||
      !CHECK_OK(ctx, sheaf_graph_create(m, NULL, &g)))
    goto out;
  int eos = 0;
  for (int32_t i = 0; i < BM_N; i++) {
    int32_t n = d.sent_off[i + 1] - d.sent_off[i];
    REQUIRE(n <= 1024);
    for (int32_t k = 0; k < n; k++) src[k] = sh_word_id(d.ids, d.sent_words[d.sent_off[i] + k]);
    if (!CHECK_OK(ctx, sh_decoder_beam(g, &dec, src, n, 4, toks + i * SH_DEC_MAX_LEN, &lens[i], &scores[i])))
      goto out;
    sheaf_graph_reset(g);
    eos += lens[i] > 0 && toks[i * SH_DEC_MAX_LEN + lens[i] - 1] == SH_DEC_EOS;
  }
  CHECK(eos > 0 && eos < BM_N); /* some stop at EOS, some at the length bound */
  static const struct { const char *pol; int batch; } runs[] = {{"none", 1}, {"sheaf", 64}, {"depth", 64},
                                                                {"agenda", 64}, {"none", 64}};
  for (size_t r = 0; r < SH_ARRAY_LEN(runs); r++) {
    char got[512], name[64];
    snprintf(name, sizeof name, "beam_sf_%s_%d.txt", runs[r].pol, runs[r].batch);
    snprintf(got, sizeof got, "%s", th_tmp_path(name));
    if (!run_beam(wpath, runs[r].pol, runs[r].batch, got, sum, sizeof sum)) continue;
    int bad = beam_compare(got, toks, lens, scores);
    if (!CHECK_EQ_INT(bad, 0))
      fprintf(stderr, "beam.sf, policy %s, batch %d: %d sentences differ\n", runs[r].pol, runs[r].batch, bad);
  }
out:
  sheaf_graph_free(g);
  sheaf_model_free(m);
  sh_dataset_free(&d);
}

/* The list builtins and host floats through the CLI, exact: topk (ties:
 * the lower index first; fewer elements than asked: all), set, pop, cat of
 * lists, sum / max / mean of host floats, and double-precision host
 * arithmetic (1e-10 survives 1 + 1e-10 - 1). */
TEST(lang_twins_list_builtins_and_host_doubles) {
  if (!th_sheaf_bin()) return;
  static const char src[] =
      "param v: f32[H] = ones\n"
      "fn main(ws: list[i32]) -> (list[i32], list[i32], list[i32], list[i32], f32, f32, f32, f32) {\n"
      "  let fs = values(cat(v * 0.5, v * 2.0, v));\n"
      "  let xs = for i in 0..5 { i * i };\n"
      "  let zero: f32 = 0.0;\n"
      "  (topk(fs, 6), topk(fs, 20), set(xs, 2, 7), cat(pop(xs), [5], pop(pop(xs))),\n"
      "   sum(fs), max(fs), mean(fs), zero + 1.0 + 1e-10 - 1.0)\n"
      "}\n";
  const char *sf = th_write_tmp("lists.sf", src, sizeof src - 1);
  char cmd[2048], out_path[512];
  static char out[1 << 14];
  snprintf(out_path, sizeof out_path, "%s", th_tmp_path("lists.txt"));
  snprintf(cmd, sizeof cmd, "%s run %s --data tests/data/tokens_ids.txt --size H=4 --limit 1 --out %s",
           th_sheaf_bin(), sf, out_path);
  REQUIRE(CHECK_EQ_INT(th_run(cmd, out, sizeof out), 0));
  const char *got = th_read_file(out_path, NULL);
  REQUIRE(got);
  CHECK_EQ_STR(got, "0 4 5 6 7 8 9\n0 4 5 6 7 8 9 10 11 0 1 2 3\n0 0 1 7 9 16\n0 0 1 4 9 5 0 1 4\n"
                    "0 14\n0 2\n0 1.166667\n0 1e-10\n");
}

/* set out of range and pop of an empty list stop the instance with an
 * error at the call; topk of a negative count too. */
TEST(lang_twins_list_builtins_errors) {
  if (!th_sheaf_bin()) return;
  static const char *const bodies[] = {
      "set(ws, len(ws), 0)",
      "{ let e: list[i32] = []; pop(e) }",
      "topk(values(zeros(3)), 0 - len(ws))",
  };
  static const char *const want[] = {
      "e.sf:2:47: error: set: index 5 is out of range for a list of 5 elements", "e.sf:2:68: error: pop of an empty list",
      "e.sf:2:62: error: topk of -5: the count is negative",
  };
  for (int k = 0; k < 3; k++) {
    char src[512], cmd[2048];
    static char out[1 << 14];
    int n = snprintf(src, sizeof src, "param v: f32[H]\nfn main(ws: list[i32]) -> list[i32] { %s }\n", bodies[k]);
    const char *sf = th_write_tmp("e.sf", src, (size_t)n);
    snprintf(cmd, sizeof cmd, "%s run %s --data tests/data/tokens_ids.txt --size H=4 --limit 1 --seed 1 2>&1",
             th_sheaf_bin(), sf);
    CHECK_EQ_INT(th_run(cmd, out, sizeof out), 1);
    CHECK_CONTAINS(out, want[k]);
  }
}

TEST(lang_twins_check_lists_wait_points) {
  if (!th_sheaf_bin()) return;
  static char out[1 << 15];
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s check examples/parser.sf examples/beam.sf", th_sheaf_bin());
  REQUIRE(CHECK_EQ_INT(th_run(cmd, out, sizeof out), 0));
  CHECK_CONTAINS(out, "waits: 2 points where an instance waits for a value");
  CHECK_CONTAINS(out, "examples/parser.sf:38:20: argmax\n");
  CHECK_CONTAINS(out, "waits: 1 point where an instance waits for a value");
  CHECK_CONTAINS(out, ": values\n");
}
