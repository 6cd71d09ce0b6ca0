/*
 * test_lang_cli.c — `sheaf run MODEL.sf` beyond the numbers
 * (test_lang_models.c has those): --vocab (same ids as the data's own
 * numbering give the same outputs; a '<unk>' line; words not in it; errors
 * naming the file and line), --trace, argument errors, run-time errors of
 * the program naming MODEL.sf:LINE:COL (an out-of-range embedding row),
 * silence on a pipe (no progress bar), and the word-to-row rule of
 * sh_lang_word_row.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "io/dataset.h"
#include "lang/interp.h"

#define EWT "data/ud_english_ewt/en_ewt-ud-test.conllu"

static char out[1 << 16];

static int run(const char *args) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "%s run %s", th_sheaf_bin(), args);
  return th_run(cmd, out, sizeof out);
}

static bool same_file(const char *a, const char *b) {
  size_t na, nb;
  const char *x = th_read_file(a, &na), *y = th_read_file(b, &nb);
  return x && y && na == nb && na > 0 && memcmp(x, y, na) == 0;
}

/* The binarized EWT's words in id order (first appearance), one a line;
 * extra lines first when `pre` (shifting every id) or last (`post`). */
static const char *write_vocab(sheaf_ctx *ctx, const char *name, const char *pre, const char *post,
                               int32_t skip_from) {
  sh_dataset d;
  if (!CHECK_OK(ctx, sh_dataset_load(ctx, EWT, SH_DATASET_BINARY, &d))) return NULL;
  const char *path = th_tmp_path(name);
  FILE *f = path ? fopen(path, "w") : NULL;
  if (f) {
    if (pre) fputs(pre, f);
    for (int32_t w = 0; w < sh_vocab_size(&d.tb.words) && w < skip_from; w++)
      fprintf(f, "%s\n", sh_vocab_str(&d.tb.words, w));
    if (post) fputs(post, f);
    fclose(f);
  }
  sh_dataset_free(&d);
  return f ? path : NULL;
}

TEST(lang_cli_vocab) {
  if (!th_sheaf_bin()) return;
  sheaf_ctx *ctx = th_ctx();
  char w[512], a[512], b[512], args[2048];
  snprintf(w, sizeof w, "%s", th_tmp_path("v_w.safetensors"));
  snprintf(a, sizeof a, "%s", th_tmp_path("v_a.txt"));
  snprintf(b, sizeof b, "%s", th_tmp_path("v_b.txt"));
  /* weights saved by the C-API model on the data's own numbering */
  snprintf(args, sizeof args, "treelstm --data " EWT " --seed 2 --hidden 6 --embed 5 --save-weights %s", w);
  REQUIRE_EQ_INT(run(args), 0);
  snprintf(args, sizeof args, "examples/treelstm.sf --data " EWT " --weights %s --out %s", w, a);
  REQUIRE_EQ_INT(run(args), 0);
  CHECK_RUN_QUIET(out);
  /* the same words in the same order: the same outputs */
  const char *same = write_vocab(ctx, "vocab_same.txt", NULL, NULL, INT32_MAX);
  REQUIRE(same);
  snprintf(args, sizeof args, "examples/treelstm.sf --data " EWT " --weights %s --vocab %s --out %s", w, same, b);
  CHECK_EQ_INT(run(args), 0);
  CHECK_RUN_QUIET(out);
  CHECK(same_file(a, b));
  /* '<unk>' as the last line names the last row: still the same */
  const char *with_unk = write_vocab(ctx, "vocab_unk.txt", NULL, "<unk>\n", INT32_MAX);
  snprintf(args, sizeof args, "examples/treelstm.sf --data " EWT " --weights %s --vocab=%s --out %s", w, with_unk, b);
  CHECK_EQ_INT(run(args), 0);
  CHECK(same_file(a, b));
  /* the first 1000 words, then <unk>: the others are counted and use <unk> */
  const char *part = write_vocab(ctx, "vocab_part.txt", NULL, NULL, 1000);
  snprintf(args, sizeof args, "examples/treelstm.sf --data " EWT " --seed 1 --size E=4 --size H=4 --size C=3 --vocab %s --out %s", part, b);
  CHECK_EQ_INT(run(args), 0);
  CHECK_CONTAINS(out, "sheaf: note: ");
  CHECK_CONTAINS(out, "words of " EWT " are not in ");
  /* ... but weights with a row per data word do not fit 1000 words */
  snprintf(args, sizeof args, "examples/treelstm.sf --data " EWT " --weights %s --vocab %s", w, part);
  CHECK_EQ_INT(run(args), 1);
  CHECK_CONTAINS(out, "--vocab ");
  CHECK_CONTAINS(out, "the largest table, emb, has ");
  CHECK_CONTAINS(out, "rows, but the vocabulary needs 1001 (one per word, then one for <unk>)");
  /* errors name the file (and line) */
  CHECK_EQ_INT(run("examples/treelstm.sf --data " EWT " --seed 1 --vocab /nonexistent/vocab.txt"), 1);
  CHECK_CONTAINS(out, "/nonexistent/vocab.txt");
  const char *empty = th_write_tmp("vocab_empty.txt", "", 0);
  snprintf(args, sizeof args, "examples/treelstm.sf --data " EWT " --seed 1 --vocab %s", empty);
  CHECK_EQ_INT(run(args), 1);
  CHECK_CONTAINS(out, "vocab_empty.txt: the vocabulary is empty");
  static const char dup[] = "the\ncat\nthe\n";
  const char *dupf = th_write_tmp("vocab_dup.txt", dup, sizeof dup - 1);
  snprintf(args, sizeof args, "examples/treelstm.sf --data " EWT " --seed 1 --vocab %s", dupf);
  CHECK_EQ_INT(run(args), 1);
  CHECK_CONTAINS(out, "vocab_dup.txt:3:1: error: token 'the' already appeared (as id 0, line 1)");
  static const char blank[] = "the\n\ncat\n";
  const char *blankf = th_write_tmp("vocab_blank.txt", blank, sizeof blank - 1);
  snprintf(args, sizeof args, "examples/treelstm.sf --data " EWT " --seed 1 --vocab %s", blankf);
  CHECK_EQ_INT(run(args), 1);
  CHECK_CONTAINS(out, "vocab_blank.txt:2:1: error: empty line");
  /* token-id data has no words to map */
  static const char ids[] = "1 2 3\n4 5\n";
  const char *idf = th_write_tmp("ids.txt", ids, sizeof ids - 1);
  snprintf(args, sizeof args, "examples/bilstm.sf --data %s --seed 1 --size E=4 --size H=4 --size T=3 --vocab %s", idf, same);
  CHECK_EQ_INT(run(args), 1);
  CHECK_CONTAINS(out, "holds token ids, not words");
}

TEST(lang_cli_trace_and_arguments) {
  if (!th_sheaf_bin()) return;
  char args[2048], trace[512];
  snprintf(trace, sizeof trace, "%s", th_tmp_path("lang_trace.json"));
  snprintf(args, sizeof args, "examples/treefc.sf --data " EWT " --seed 1 --size H=8 --batch 500 --out /dev/null --trace %s", trace);
  CHECK_EQ_INT(run(args), 0);
  CHECK_RUN_QUIET(out); /* nothing on stderr in a pipe: no progress bar */
  size_t n;
  const char *t = th_read_file(trace, &n);
  REQUIRE(t);
  CHECK(n > 100);
  CHECK_CONTAINS(t, "traceEvents");
  /* an unwritable trace is an error */
  CHECK_EQ_INT(run("examples/treefc.sf --data " EWT " --seed 1 --size H=8 --out /dev/null --trace /nonexistent/t.json"), 1);
  CHECK_CONTAINS(out, "/nonexistent/t.json");
  /* argument errors: exit 2, naming the argument */
  CHECK_EQ_INT(run("examples/treefc.sf --data " EWT " --batch 0"), 2);
  CHECK_CONTAINS(out, "--batch: expected an integer in 1..");
  CHECK_EQ_INT(run("examples/treefc.sf --data " EWT " --size H"), 2);
  CHECK_CONTAINS(out, "run: --size: expected NAME=VALUE (e.g. --size H=256), got 'H'");
  CHECK_EQ_INT(run("examples/treefc.sf --data " EWT " --size H=x"), 2);
  CHECK_CONTAINS(out, "--size: expected an integer");
  CHECK_EQ_INT(run("examples/treefc.sf --data " EWT " --seed 1 --weights w.safetensors"), 2);
  CHECK_CONTAINS(out, "exclude each other");
  CHECK_EQ_INT(run("examples/treefc.sf --data " EWT " --frobnicate"), 2);
  CHECK_CONTAINS(out, "unknown option '--frobnicate'");
  CHECK_EQ_INT(run("examples/treefc.sf --data " EWT " --seed 1 --size Q=3"), 1);
  CHECK_CONTAINS(out, "--size Q: the model has no size 'Q'");
  CHECK_EQ_INT(run("examples/treefc.sf --help"), 0);
  CHECK_CONTAINS(out, "--vocab FILE");
  CHECK_CONTAINS(out, "--trace FILE");
  /* a program that reads past its table: file:line:col, the row, the rows */
  static const char prog[] = "param emb: f32[V, H]\n"
                             "fn main(ws: list[i32]) -> f32[H] {\n"
                             "  emb[len(ws) + 100000]\n"
                             "}\n";
  const char *pf = th_write_tmp("oob.sf", prog, sizeof prog - 1);
  static const char sents[] = "a b c\nd\n";
  const char *sf = th_write_tmp("oob.txt", sents, sizeof sents - 1);
  snprintf(args, sizeof args, "%s --data %s --seed 1 --size H=4", pf, sf);
  CHECK_EQ_INT(run(args), 1);
  CHECK_CONTAINS(out, "oob.sf:3:3: error: emb[100003]: row 100003 is out of range: emb has 5 rows (0..4)");
  CHECK_CONTAINS(out, "while running sentence 0 of ");
}

/* Several threads: whole batches in parallel (an interpreter per thread)
 * write, in instance order, what one thread of the dynamic runtime writes
 * (--parallel makes --mode auto dynamic too); the first failing
 * instance is the one named. */
TEST(lang_runner_cli_parallel_batches_equal_one_thread) {
  char args[2048];
  const char *a = th_tmp_path("lang-par-1.txt"), *b = th_tmp_path("lang-par-2.txt");
  snprintf(args, sizeof args,
           "examples/treelstm.sf --data " EWT " --seed 1 --size H=8 --size E=8 --size C=5 "
           "--batch 7 --mode dynamic --out %s",
           a);
  CHECK_EQ_INT(run(args), 0);
  snprintf(args, sizeof args,
           "examples/treelstm.sf --data " EWT " --seed 1 --size H=8 --size E=8 --size C=5 "
           "--batch 7 --threads 2 --parallel batches --out %s && cmp %s %s && echo same",
           b, a, b);
  CHECK_EQ_INT(run(args), 0);
  CHECK_CONTAINS(out, "same");
  CHECK_EQ_INT(run("examples/treefc.sf --data " EWT " --parallel fast"), 2);
  CHECK_CONTAINS(out, "--parallel: unknown mode 'fast'");
  CHECK_EQ_INT(run("examples/treefc.sf --data " EWT " --parallel batches --trace t.json"), 2);
  CHECK_CONTAINS(out, "--trace reads one graph");
  /* sentences 3 and 9 fail (words past the table): 3 is reported */
  static const char prog[] = "param emb: f32[V, H]\n"
                             "fn main(ws: list[i32]) -> f32[H] {\n"
                             "  emb[len(ws) * 1000]\n"
                             "}\n";
  const char *pf = th_write_tmp("par-oob.sf", prog, sizeof prog - 1);
  static const char sents[] = "a\nb\nc\nd d d d d d d d d d d d d d d d d d d d d d d d d d d d d d d d d d d d d d d d\n"
                              "e\nf\ng\nh\ni\nj j j j j j j j j j j j j j j j j j j j j j j j j j j j j j j j j j j j j j j j j\n"
                              "k\nl\n";
  const char *sf = th_write_tmp("par-oob.txt", sents, sizeof sents - 1);
  snprintf(args, sizeof args, "%s --data %s --seed 1 --size H=4 --size V=2000 --batch 1 --threads 2 --parallel batches", pf, sf);
  CHECK_EQ_INT(run(args), 1);
  CHECK_CONTAINS(out, "instance 3: ");
  CHECK_CONTAINS(out, "par-oob.sf:3:3: error: emb[40000]: row 40000 is out of range");
  CHECK_CONTAINS(out, "while running sentence 3 of ");
}

TEST(lang_run_errors_name_the_source) {
  sheaf_ctx *ctx = th_ctx();
  static const char prog[] = "param emb: f32[V, H]\n"
                             "fn pick(ws: list[i32], k: i32) -> f32[1] { emb[ws[0]][k] }\n"
                             "fn main(ws: list[i32]) -> f32[1] {\n"
                             "  let n = len(ws);\n"
                             "  if n == 1 { emb[-1][0] } else if n == 2 { pick(ws, 7) }\n"
                             "  else if n == 3 { emb[ws[5]][0] } else if n == 4 { emb[0][n / (n - 4)] }\n"
                             "  else { emb[ws[0]][0] + emb[ws[1] + 0][0] }\n"
                             "}\n";
  sh_module m;
  REQUIRE_OK(ctx, sh_lang_compile(&m, ctx, "e.sf", prog, sizeof prog - 1));
  sheaf_model *model = NULL;
  sh_lang_bind bind = {0};
  sh_interp *ip = NULL;
  sheaf_graph *g = NULL;
  sh_lang_bind_opts bo = {.vocab = 6, .n_overrides = 1, .override_name = {"H"}, .override_value = {3}};
  if (!CHECK_OK(ctx, sheaf_model_create(ctx, &model)) || !CHECK_OK(ctx, sh_lang_bind_model(&m, model, &bo, &bind)) ||
      !CHECK_OK(ctx, sh_interp_create(&m, &bind, &ip)) || !CHECK_OK(ctx, sheaf_graph_create(model, NULL, &g)))
    goto out;
  static const struct {
    int n;
    const char *msg;
  } cases[] = {
      {1, "e.sf:5:15: error: emb[-1]: row -1 is out of range: emb has 6 rows (0..5)"},
      {2, "e.sf:2:44: error: index 7 is out of range for a tensor of 3 elements"},
      {3, "e.sf:6:24: error: index 5 is out of range for a list of 3 elements"},
      {4, "e.sf:6:60: error: division by zero"},
  };
  int32_t words[5] = {1, 2, 3, 4, 5};
  for (size_t k = 0; k < SH_ARRAY_LEN(cases); k++) {
    sh_value in, res;
    REQUIRE_OK(ctx, sh_interp_ints(ip, words, cases[k].n, &in));
    CHECK(sh_interp_main(ip, g, in, &res) != SHEAF_OK);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), cases[k].msg);
    CHECK_OK(ctx, sheaf_graph_reset(g));
    sh_interp_reset(ip);
  }
  /* words of the data are never out of range: 9 is past V - 1 = 5, so <unk>,
   * the last row; a computed 9 would be an error */
  int32_t big[5] = {9, 1, 2, 3, 4};
  sh_value in, res;
  REQUIRE_OK(ctx, sh_interp_ints(ip, big, 5, &in));
  CHECK_OK(ctx, sh_interp_main(ip, g, in, &res));
out:
  sheaf_graph_free(g);
  sh_interp_free(ip);
  sh_lang_bind_free(ctx, &bind);
  sheaf_model_free(model);
  sh_module_free(&m);
}

TEST(lang_word_rows) {
  /* vocab 10: words 0..8, <unk> 9; ranks reverse the ids */
  int32_t rank[9] = {8, 7, 6, 5, 4, 3, 2, 1, 0};
  int64_t rows[3] = {10, 4, 12};
  sh_lang_bind b = {.table_rows = rows, .n_params = 3, .vocab = 10, .word_rank = rank};
  CHECK_EQ_INT(sh_lang_word_row(&b, 0, 3), 3);   /* a full table: the id */
  CHECK_EQ_INT(sh_lang_word_row(&b, 0, 9), 9);   /* <unk>: the last row */
  CHECK_EQ_INT(sh_lang_word_row(&b, 0, -1), 9);
  CHECK_EQ_INT(sh_lang_word_row(&b, 1, 8), 0);   /* capped: the most frequent word */
  CHECK_EQ_INT(sh_lang_word_row(&b, 1, 6), 2);
  CHECK_EQ_INT(sh_lang_word_row(&b, 1, 5), 3);   /* rank 3: past the 3 kept words */
  CHECK_EQ_INT(sh_lang_word_row(&b, 1, 0), 3);
  CHECK_EQ_INT(sh_lang_word_row(&b, 1, 9), 3);
  CHECK_EQ_INT(sh_lang_word_row(&b, 2, 8), 8);   /* more rows than words: ids, <unk> last */
  CHECK_EQ_INT(sh_lang_word_row(&b, 2, 9), 11);
  b.word_rank = NULL; /* --vocab: ids are ranks */
  CHECK_EQ_INT(sh_lang_word_row(&b, 1, 2), 2);
  CHECK_EQ_INT(sh_lang_word_row(&b, 1, 3), 3);
}

/* Trained weights read through another word numbering warn, loudly: saved
 * by a run on other data (another table size, or the same size and another
 * recorded numbering), or recording no numbering at all; weights saved on
 * this very data do not. */
TEST(lang_cli_vocab_mismatch_warns) {
  if (!th_sheaf_bin()) return;
  char w[512], w2[512], args[2048];
  snprintf(w, sizeof w, "%s", th_tmp_path("vm_small.safetensors"));
  snprintf(w2, sizeof w2, "%s", th_tmp_path("vm_nometa.safetensors"));
  /* weights saved on tests/data/small.conllu: a smaller vocabulary */
  snprintf(args, sizeof args, "examples/gru.sf --data tests/data/small.conllu --seed 2 --size E=4 "
                              "--size H=4 --size C=3 --save-weights %s --out /dev/null", w);
  REQUIRE_EQ_INT(run(args), 0);
  snprintf(args, sizeof args, "examples/gru.sf --data tests/data/small.conllu --weights %s --out /dev/null", w);
  REQUIRE_EQ_INT(run(args), 0);
  CHECK_RUN_QUIET(out); /* the numbering it was saved with */
  snprintf(args, sizeof args, "examples/gru.sf --data " EWT " --weights %s --limit 3 --out /dev/null", w);
  REQUIRE_EQ_INT(run(args), 0);
  CHECK_CONTAINS(out, "sheaf: warning: table emb of ");
  CHECK_CONTAINS(out, "word lookups pick the wrong rows. Give that vocabulary with --vocab FILE");
  /* weights saved with --vocab record no numbering of the data */
  snprintf(args, sizeof args, "examples/gru.sf --data tests/data/small.conllu --seed 2 --size E=4 "
                              "--size H=4 --size C=3 --vocab tests/data/vocab.txt --save-weights %s --out /dev/null", w2);
  REQUIRE_EQ_INT(run(args), 0);
  snprintf(args, sizeof args, "examples/gru.sf --data tests/data/small.conllu --weights %s --out /dev/null", w2);
  REQUIRE_EQ_INT(run(args), 0);
  CHECK_CONTAINS(out, "sheaf: warning: ");
  CHECK_CONTAINS(out, "--vocab FILE");
}

/* Token records from CoNLL-U: every field reads its column (UPOS and
 * DEPREL as universal ids, XPOS by first appearance, HEAD, the 0-based
 * index, the form's bytes); fields the data lacks are errors naming them. */
TEST(lang_cli_token_records) {
  if (!th_sheaf_bin()) return;
  static const char src[] =
      "type Tok = Tok(head: i32, upos: i32, xpos: i32, deprel: i32, index: i32, chars: list[i32], word: i32)\n"
      "fn field(t: Tok, k: i32) -> i32 {\n"
      "  let Tok(h, u, x, r, i, cs, w) = t;\n"
      "  if k == 0 { h } else if k == 1 { u } else if k == 2 { x } else if k == 3 { r }\n"
      "  else if k == 4 { i } else if k == 5 { len(cs) } else { cs[0] }\n"
      "}\n"
      "fn main(s: list[Tok]) -> list[list[i32]] { for k in 0..7 { for t in s { field(t, k) } } }\n";
  const char *sf = th_write_tmp("records.sf", src, sizeof src - 1);
  REQUIRE(sf);
  char args[1024];
  snprintf(args, sizeof args, "%s --data tests/data/small.conllu --limit 2", sf);
  REQUIRE_EQ_INT(run(args), 0);
  /* sentence 1: The cat sat . ; DET NOUN VERB PUNCT = 5 7 15 12; DT NN VBD . = 0 1 2 3;
   * det nsubj root punct = 15 26 34 32 */
  CHECK_CONTAINS(out, "0 0 2 3 0 3\n0 1 5 7 15 12\n0 2 0 1 2 3\n0 3 15 26 34 32\n0 4 0 1 2 3\n0 5 3 3 3 1\n0 6 84 99 115 46\n");
  /* sentence 2: Do n't go . (the multiword line skipped): AUX PART VERB PUNCT, VBP RB VB . */
  CHECK_CONTAINS(out, "1 1 3 9 15 12\n1 2 4 5 6 3\n1 3 5 2 34 32\n");
  /* token lines have words but no CoNLL-U columns */
  snprintf(args, sizeof args, "%s --data tests/data/tokens_words.txt", sf);
  CHECK_EQ_INT(run(args), 1);
  CHECK_CONTAINS(out, "main reads the token field 'upos', which the data does not have (it comes from CoNLL-U)");
}

/* --format jsonl (named tuple parts, the sentence's tokens) and npy (every
 * row stacked, offsets when instances have several rows) give the values
 * of the text format. */
TEST(lang_cli_output_formats) {
  if (!th_sheaf_bin()) return;
  static const char src[] = "param v: f32[H]\n"
                            "fn main(ws: list[i32]) -> (scores: f32[H], n: i32) { (v + float(len(ws)), len(ws)) }\n";
  const char *sf = th_write_tmp("named.sf", src, sizeof src - 1);
  REQUIRE(sf);
  char args[1024], npy[512], txt[512];
  snprintf(args, sizeof args, "%s --data " EWT " --size H=2 --limit 2 --format jsonl", sf);
  REQUIRE_EQ_INT(run(args), 0);
  CHECK_CONTAINS(out, "{\"instance\": 0, \"tokens\": [\"What\", \"if\", \"Google\", \"Morphed\", \"Into\", "
                      "\"GoogleOS\", \"?\"], \"output\": {\"scores\": [7, 7], \"n\": 7}}\n{\"instance\": 1, ");
  /* npy: the BiLSTM's per-word rows of 3 sentences = the text lines */
  snprintf(npy, sizeof npy, "%s", th_tmp_path("tags.npy"));
  snprintf(txt, sizeof txt, "%s", th_tmp_path("tags.txt"));
  snprintf(args, sizeof args, "examples/bilstm.sf --data " EWT " --size E=4 --size H=4 --size T=3 --limit 3 --seed 1 "
                              "--format npy --out %s", npy);
  REQUIRE_EQ_INT(run(args), 0);
  snprintf(args, sizeof args, "examples/bilstm.sf --data " EWT " --size E=4 --size H=4 --size T=3 --limit 3 --seed 1 "
                              "--out %s", txt);
  REQUIRE_EQ_INT(run(args), 0);
  FILE *f = fopen(npy, "rb"), *t = fopen(txt, "r");
  REQUIRE(f && t);
  char head[128];
  CHECK_EQ_INT(fread(head, 1, 128, f), 128);
  CHECK(!memcmp(head, "\x93NUMPY\x01\x00", 8));
  head[127] = '\0';
  CHECK_CONTAINS(head + 10, "'descr': '<f4', 'fortran_order': False, 'shape': (39, 3), }");
  long n = 0;
  char line[4096];
  while (fgets(line, sizeof line, t)) {
    char *p = line;
    strtol(p, &p, 10), strtol(p, &p, 10);
    for (int k = 0; k < 3; k++) {
      float x;
      CHECK_EQ_INT(fread(&x, 4, 1, f), 1);
      CHECK_NEAR(x, strtod(p, &p), 1e-6);
    }
    n++;
  }
  CHECK_EQ_INT(n, 39);
  CHECK_EQ_INT(fread(head, 1, 1, f), 0);
  fclose(f), fclose(t);
  char offs[600];
  snprintf(offs, sizeof offs, "%s.offsets.npy", npy);
  f = fopen(offs, "rb");
  REQUIRE(f);
  int64_t o[4];
  CHECK_EQ_INT(fread(head, 1, 128, f), 128);
  CHECK_EQ_INT(fread(o, 8, 4, f), 4);
  CHECK(o[0] == 0 && o[1] == 7 && o[2] == 30 && o[3] == 39);
  fclose(f);
  /* what npy cannot hold, and where it cannot go */
  snprintf(args, sizeof args, "%s --data " EWT " --size H=2 --limit 2 --format npy --out %s", sf, npy);
  CHECK_EQ_INT(run(args), 1);
  CHECK_CONTAINS(out, "--format npy writes f32 rows: main must return a tensor or a list of them");
  snprintf(args, sizeof args, "%s --data " EWT " --size H=2 --format npy", sf);
  CHECK_EQ_INT(run(args), 2);
  CHECK_CONTAINS(out, "--format npy needs --out FILE");
  snprintf(args, sizeof args, "%s --data " EWT " --size H=2 --format xml", sf);
  CHECK_EQ_INT(run(args), 2);
  CHECK_CONTAINS(out, "--format: expected text, jsonl or npy, got 'xml'");
}

/* A row of a computed matrix outside it stops the run at the source
 * position, like a list index. */
TEST(lang_cli_matrix_row_out_of_range) {
  if (!th_sheaf_bin()) return;
  static const char src[] = "param emb: f32[V, H]\n"
                            "fn main(ws: list[i32]) -> f32[H] {\n"
                            "  let m = stack(for w in ws { emb[w] });\n"
                            "  m[len(ws)]\n"
                            "}\n";
  const char *sf = th_write_tmp("rowoob.sf", src, sizeof src - 1);
  REQUIRE(sf);
  char args[1024];
  snprintf(args, sizeof args, "%s --data " EWT " --size H=2 --limit 2", sf);
  CHECK_EQ_INT(run(args), 1);
  CHECK_CONTAINS(out, "rowoob.sf:4:3: error: row 7 is out of range for a matrix of 7 rows");
}

/* --mode auto runs a model that linearizes linearized, unless a flag that
 * only the dynamic runtime reads was given: then dynamic, saying which. */
TEST(lang_run_auto_mode_follows_dynamic_flags) {
  if (!th_sheaf_bin()) return;
  const char *o = th_tmp_path("auto-mode.txt");
  char args[1024];
  static const char *const flags[] = {"", "--policy sheaf", "--policy depth", "--host ast", "--parallel kernels"};
  static const char *const want[] = {"mode linear (--mode auto)",
                                     "not linear: --policy configures the dynamic runtime",
                                     "not linear: --policy configures the dynamic runtime",
                                     "not linear: --host configures the dynamic runtime",
                                     "not linear: --parallel configures the dynamic runtime"};
  for (size_t i = 0; i < SH_ARRAY_LEN(flags); i++) {
    snprintf(args, sizeof args, "examples/treefc.sf --data " EWT " --limit 5 --size H=4 --seed 1 %s --out %s",
             flags[i], o);
    if (!CHECK_EQ_INT(run(args), 0)) continue;
    CHECK_CONTAINS(out, want[i]);
  }
  /* a dependency-tree model: auto runs it linearized (a leaves' arm and one ragged arm over the children) */
  snprintf(args, sizeof args, "examples/childsum.sf --data " EWT " --limit 5 --size H=4 --size E=4 --seed 1 --out %s", o);
  CHECK_EQ_INT(run(args), 0);
  CHECK_CONTAINS(out, "mode linear (--mode auto)");
  /* an explicit --mode linear keeps linear whatever else is given */
  snprintf(args, sizeof args, "examples/treefc.sf --data " EWT " --limit 5 --size H=4 --seed 1 --policy depth --mode linear --out %s", o);
  CHECK_EQ_INT(run(args), 0);
  CHECK_CONTAINS(out, "mode linear (--mode linear)");
}

/* --host configures the dynamic runtime's host program: with --mode linear
 * (which runs none) it is a usage error naming both flags, not ignored. */
TEST(lang_run_linear_refuses_host) {
  if (!th_sheaf_bin()) return;
  const char *o = th_tmp_path("linear-host.txt");
  char args[1024];
  static const char *const hosts[] = {"ast", "vm"};
  for (size_t i = 0; i < SH_ARRAY_LEN(hosts); i++) {
    snprintf(args, sizeof args, "examples/treefc.sf --data " EWT " --limit 5 --size H=4 --seed 1 --host %s --mode linear --out %s",
             hosts[i], o);
    CHECK_EQ_INT(run(args), 2);
    CHECK_CONTAINS(out, "--host");
    CHECK_CONTAINS(out, "--mode linear runs generated kernels per level, no host program");
  }
  /* the order of the flags does not matter; dynamic and auto still take --host */
  snprintf(args, sizeof args, "examples/treefc.sf --data " EWT " --limit 5 --size H=4 --mode linear --host ast --out %s", o);
  CHECK_EQ_INT(run(args), 2);
  snprintf(args, sizeof args, "examples/treefc.sf --data " EWT " --limit 5 --size H=4 --seed 1 --mode dynamic --host ast --out %s", o);
  CHECK_EQ_INT(run(args), 0);
  CHECK_CONTAINS(out, "mode dynamic (--mode dynamic)");
}
