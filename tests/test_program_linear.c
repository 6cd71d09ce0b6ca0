/*
 * test_program_linear.c — sheaf_program's linearized mode (opts.mode): every
 * sequence example that linearizes (main takes list[i32]), loaded with mode LINEAR and with mode
 * DYNAMIC (same seed and sizes), run on the bundled EWT sentences: the same
 * output tensors (count, shapes) within 1e-5 of each instance's largest
 * output, batches of 7 and 64, contexts of 1 and 2 threads; AUTO picks
 * linear for them and says why it does not for a model with a value read
 * (decoder.sf) and a tree model; LINEAR refuses those with the reason;
 * opts.coarsen (the dynamic runtime's coarsened regions) against plain
 * dynamic within 1e-5, and AUTO then dynamic; misuse (host 1 with LINEAR
 * or coarsen, coarsen with LINEAR, an unknown mode, a bad sentence) is
 * named.
 */
#include <math.h>
#include <stdlib.h>

#include "harness.h"
#include "io/dataset.h"

#define EWT "data/ud_english_ewt/en_ewt-ud-test.conllu"
enum { N = 40, MAXV = 512 };

typedef struct prog_case {
  const char *path;
  int n;
  const char *names[4];
  int64_t values[4];
} prog_case;

static const prog_case CASES[] = {
    {"examples/gru.sf", 3, {"H", "E", "C"}, {16, 12, 5}},
    {"examples/bilstm.sf", 3, {"H", "E", "T"}, {16, 12, 7}},
    {"examples/tagger2.sf", 3, {"H", "E", "T"}, {16, 12, 7}},
    {"examples/cnn.sf", 3, {"F", "E", "C"}, {16, 12, 5}},
    {"examples/attnpool.sf", 3, {"H", "E", "C"}, {16, 12, 5}},
    {"examples/handnorm.sf", 1, {"H"}, {16}},
    {"examples/transformer.sf", 2, {"DK", "F"}, {8, 24}},
    {"examples/seq2seq.sf", 3, {"H", "E", "C"}, {16, 12, 5}},
};

static sheaf_status load_c(sheaf_ctx *ctx, const prog_case *c, int64_t vocab, sheaf_program_mode mode, int batch,
                           int coarsen, sheaf_program **p) {
  sheaf_program_opts o;
  memset(&o, 0, sizeof o);
  o.coarsen = coarsen;
  o.seed = 5;
  o.vocab = vocab;
  o.n_sizes = c->n, o.size_names = c->names, o.size_values = c->values;
  o.runner.batch = batch;
  o.mode = mode;
  return sheaf_program_load(ctx, c->path, &o, p);
}

static sheaf_status load(sheaf_ctx *ctx, const prog_case *c, int64_t vocab, sheaf_program_mode mode, int batch,
                         sheaf_program **p) {
  return load_c(ctx, c, vocab, mode, batch, 0, p);
}

/* Instance i's outputs of a and b: the same tensors within 1e-5 of the
 * instance's largest |output| (at least 1). */
static void check_same(const sheaf_program *a, const sheaf_program *b, int i, const char *path) {
  static sheaf_value_view va[MAXV], vb[MAXV];
  size_t na = sheaf_program_outputs(a, i, MAXV, va), nb = sheaf_program_outputs(b, i, MAXV, vb);
  if (!CHECK_EQ_INT(na, nb) || !CHECK(na > 0 && na <= MAXV)) return;
  double scale = 1, worst = 0;
  for (size_t k = 0; k < na; k++) {
    if (!CHECK_EQ_INT(va[k].rank, vb[k].rank) || !CHECK_EQ_INT(va[k].shape[0], vb[k].shape[0]) ||
        (va[k].rank == 2 && !CHECK_EQ_INT(va[k].shape[1], vb[k].shape[1])))
      return;
    int64_t n = va[k].rank == 2 ? va[k].shape[0] * va[k].shape[1] : va[k].shape[0];
    for (int64_t e = 0; e < n; e++) {
      scale = fmax(scale, fabs(va[k].data[e]));
      double d = fabs((double)va[k].data[e] - vb[k].data[e]);
      if (!(d <= worst)) worst = d; /* NaN sticks */
    }
  }
  if (!(worst <= 1e-5 * scale)) th_fail(__FILE__, __LINE__, "%s sentence %d: max abs difference %g (scale %g)", path, i, worst, scale);
}

static void sentences(const sh_dataset *d, const int32_t **words, int64_t *lens) {
  for (int i = 0; i < N; i++) words[i] = d->sent_words + d->sent_off[i], lens[i] = d->sent_off[i + 1] - d->sent_off[i];
}

TEST(program_linear_every_sequence_example_matches_dynamic) {
  if (!th_have_jit_cc("program_linear_every_sequence_example_matches_dynamic")) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  sh_dataset d;
  REQUIRE_OK(th_ctx(), sh_dataset_load(th_ctx(), EWT, SH_DATASET_SENTS, &d));
  const int32_t *words[N];
  int64_t lens[N];
  sentences(&d, words, lens);
  for (int threads = 1; threads <= 2; threads++) {
    sheaf_ctx_options co = {.allocator = th_allocator(), .log_level = SHEAF_LOG_WARN, .threads = threads};
    sheaf_ctx *ctx = NULL;
    if (!CHECK_OK(NULL, sheaf_ctx_create(&co, &ctx, NULL, 0))) break;
    for (size_t c = 0; c < sizeof CASES / sizeof *CASES; c++)
      for (int batch = 7; batch <= 64; batch += 57) {
        sheaf_program *dyn = NULL, *lin = NULL, *aut = NULL;
        const char *why = "unset";
        if (CHECK_OK(ctx, load(ctx, &CASES[c], d.vocab, SHEAF_PROGRAM_DYNAMIC, batch, &dyn)) &&
            CHECK_OK(ctx, load(ctx, &CASES[c], d.vocab, SHEAF_PROGRAM_LINEAR, batch, &lin)) &&
            CHECK_OK(ctx, load(ctx, &CASES[c], d.vocab, SHEAF_PROGRAM_AUTO, batch, &aut)) &&
            CHECK_EQ_INT(sheaf_program_mode_used(dyn, &why), SHEAF_PROGRAM_DYNAMIC) && CHECK(why == NULL) &&
            CHECK_EQ_INT(sheaf_program_mode_used(lin, &why), SHEAF_PROGRAM_LINEAR) && CHECK(why == NULL) &&
            CHECK_EQ_INT(sheaf_program_mode_used(aut, &why), SHEAF_PROGRAM_LINEAR) && CHECK(why == NULL) &&
            CHECK_OK(ctx, sheaf_program_run_words(dyn, N, words, lens)) &&
            CHECK_OK(ctx, sheaf_program_run_words(lin, N, words, lens)) &&
            CHECK_OK(ctx, sheaf_program_run_words(aut, N, words, lens)))
          for (int i = 0; i < N; i++) {
            check_same(dyn, lin, i, CASES[c].path);
            check_same(dyn, aut, i, CASES[c].path);
          }
        /* a second run replaces the first's outputs */
        if (lin && CHECK_OK(ctx, sheaf_program_run_words(lin, 3, words + 5, lens + 5))) {
          CHECK_EQ_INT(sheaf_program_outputs(lin, 3, 0, NULL), 0);
          static sheaf_value_view a[MAXV], b[MAXV];
          size_t na = sheaf_program_outputs(lin, 0, MAXV, a), nb = sheaf_program_outputs(dyn, 5, MAXV, b);
          CHECK_EQ_INT(na, nb);
          if (na && nb) CHECK(fabs(a[0].data[0] - b[0].data[0]) <= 1e-5 * fmax(1, fabs(b[0].data[0])));
        }
        sheaf_program_free(dyn), sheaf_program_free(lin), sheaf_program_free(aut);
      }
    sheaf_ctx_free(ctx);
  }
  sh_dataset_free(&d);
}

/* A sequence model with a straight-line function of vectors (no example
 * of main(list[i32]) has one: their functions take tuples or are generic):
 * sheaf run --stats shows the function is one kernel, and through
 * sheaf_program coarsen's outputs equal plain dynamic's within 1e-5; AUTO
 * with coarsen runs dynamic and says why. */
static const char COARSE_SF[] =
    "size H = 12\n"
    "param emb : f32[V, H]\n"
    "param W   : f32[H, H]\n"
    "param b   : f32[H]\n"
    "fn cell(x: f32[H], h: f32[H]) -> f32[H] = tanh(x @ W + b) * sigmoid(h) + x\n"
    "fn main(ws: list[i32]) -> list[f32[H]] = for w in ws { cell(emb[w], emb[w] * 0.5) }\n";

TEST(program_coarsen_matches_dynamic) {
  sheaf_ctx *ctx = th_ctx();
  if (!th_have_jit_cc("program_coarsen_matches_dynamic") || !th_sheaf_bin()) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("dyncoarse"), 0);
  const char *path = th_write_tmp("coarse_seq.sf", COARSE_SF, sizeof COARSE_SF - 1);
  static char out[1 << 14];
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s run %s --data " EWT " --limit 3 --mode dynamic --coarsen on --stats --out %s 2>&1",
           th_sheaf_bin(), path, th_tmp_path("coarse_seq.txt"));
  REQUIRE_EQ_INT(th_run(cmd, out, sizeof out), 0);
  if (!CHECK(strstr(out, "coarsening: cell") && strstr(out, "one kernel of"))) printf("%s\n", out);
  sh_dataset d;
  REQUIRE_OK(ctx, sh_dataset_load(ctx, EWT, SH_DATASET_SENTS, &d));
  const int32_t *words[N];
  int64_t lens[N];
  sentences(&d, words, lens);
  const prog_case c = {path, 0, {NULL}, {0}};
  sheaf_program *dyn = NULL, *co = NULL;
  const char *why = NULL;
  if (CHECK_OK(ctx, load(ctx, &c, d.vocab, SHEAF_PROGRAM_DYNAMIC, 64, &dyn)) &&
      CHECK_OK(ctx, load_c(ctx, &c, d.vocab, SHEAF_PROGRAM_AUTO, 64, 1, &co)) &&
      CHECK_EQ_INT(sheaf_program_mode_used(co, &why), SHEAF_PROGRAM_DYNAMIC) && CHECK(why && strstr(why, "coarsen")) &&
      CHECK_OK(ctx, sheaf_program_run_words(dyn, N, words, lens)) &&
      CHECK_OK(ctx, sheaf_program_run_words(co, N, words, lens)))
    for (int i = 0; i < N; i++) check_same(dyn, co, i, path);
  sheaf_program_free(dyn), sheaf_program_free(co);
  sh_dataset_free(&d);
}

TEST(program_linear_refusals_name_the_reason) {
  sheaf_ctx *ctx = th_ctx();
  if (!th_have_jit_cc("program_linear_refusals_name_the_reason")) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  /* decoder.sf reads a value (argmax) mid-way: AUTO runs it dynamic, says why */
  static const prog_case dec = {"examples/decoder.sf", 3, {"H", "E", "C"}, {8, 8, 5}};
  sheaf_program *p = NULL;
  const char *why = NULL;
  if (CHECK_OK(ctx, load(ctx, &dec, 50, SHEAF_PROGRAM_AUTO, 64, &p))) {
    CHECK_EQ_INT(sheaf_program_mode_used(p, &why), SHEAF_PROGRAM_DYNAMIC);
    CHECK(why && strstr(why, "examples/decoder.sf:"));
    static const int32_t w[] = {3, 4, 5};
    const int32_t *ws[1] = {w};
    int64_t len[1] = {3};
    CHECK_OK(ctx, sheaf_program_run_words(p, 1, ws, len)); /* main returns list[i32]: no tensors */
  }
  sheaf_program_free(p);
  p = NULL;
  CHECK_EQ_INT(load(ctx, &dec, 50, SHEAF_PROGRAM_LINEAR, 64, &p), SHEAF_ERR_UNSUPPORTED);
  CHECK(!p);
  CHECK(strstr(sheaf_ctx_last_error(ctx), "mode linear") && strstr(sheaf_ctx_last_error(ctx), "examples/decoder.sf:"));
  /* a tree model linearizes (its runs: sheaf_program_run_sentences, test_program_trees.c); words are refused */
  static const prog_case tree = {"examples/treefc.sf", 1, {"H"}, {8}};
  if (CHECK_OK(ctx, load(ctx, &tree, 50, SHEAF_PROGRAM_LINEAR, 64, &p))) {
    CHECK_EQ_INT(sheaf_program_mode_used(p, &why), SHEAF_PROGRAM_LINEAR);
    static const int32_t w[] = {3, 4, 5};
    const int32_t *ws[1] = {w};
    int64_t len[1] = {3};
    CHECK_EQ_INT(sheaf_program_run_words(p, 1, ws, len), SHEAF_ERR_INVALID_ARG);
    CHECK(strstr(sheaf_ctx_last_error(ctx), "main does not take list[i32] (sheaf_program_run_sentences"));
  }
  sheaf_program_free(p);
}

TEST(program_linear_misuse_is_named) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_program_opts o;
  memset(&o, 0, sizeof o);
  o.n_sizes = CASES[0].n, o.size_names = CASES[0].names, o.size_values = CASES[0].values; /* gru.sf */
  o.vocab = 50;
  sheaf_program *p = NULL;
  o.mode = (sheaf_program_mode)7;
  CHECK_EQ_INT(sheaf_program_load(ctx, "examples/gru.sf", &o, &p), SHEAF_ERR_INVALID_ARG);
  CHECK(strstr(sheaf_ctx_last_error(ctx), "mode 7"));
  o.mode = SHEAF_PROGRAM_LINEAR, o.host = 1;
  CHECK_EQ_INT(sheaf_program_load(ctx, "examples/gru.sf", &o, &p), SHEAF_ERR_INVALID_ARG);
  CHECK(strstr(sheaf_ctx_last_error(ctx), "host 1"));
  CHECK(!p);
  o.coarsen = 1; /* coarsening needs the host program */
  o.mode = SHEAF_PROGRAM_DYNAMIC;
  CHECK_EQ_INT(sheaf_program_load(ctx, "examples/gru.sf", &o, &p), SHEAF_ERR_INVALID_ARG);
  CHECK(strstr(sheaf_ctx_last_error(ctx), "coarsen") && strstr(sheaf_ctx_last_error(ctx), "host 1"));
  o.host = 0, o.mode = SHEAF_PROGRAM_LINEAR;
  CHECK_EQ_INT(sheaf_program_load(ctx, "examples/gru.sf", &o, &p), SHEAF_ERR_INVALID_ARG);
  CHECK(strstr(sheaf_ctx_last_error(ctx), "coarsen configures the dynamic runtime"));
  CHECK(!p);
  o.coarsen = 0, o.host = 1;
  /* AUTO with the AST walker: dynamic, and says so */
  o.mode = SHEAF_PROGRAM_AUTO;
  const char *why = NULL;
  if (CHECK_OK(ctx, sheaf_program_load(ctx, "examples/gru.sf", &o, &p))) {
    CHECK_EQ_INT(sheaf_program_mode_used(p, &why), SHEAF_PROGRAM_DYNAMIC);
    CHECK(why && strstr(why, "host 1"));
  }
  sheaf_program_free(p);
  p = NULL;
  CHECK_EQ_INT(sheaf_program_mode_used(NULL, &why), SHEAF_PROGRAM_DYNAMIC);
  CHECK(why == NULL);
  if (!th_have_jit_cc("program_linear_misuse_is_named")) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  sh_dataset d; /* the EWT test file's vocabulary, as the test above (the kernel cache's entries are shared) */
  REQUIRE_OK(ctx, sh_dataset_load(ctx, EWT, SH_DATASET_SENTS, &d));
  o.vocab = d.vocab;
  sh_dataset_free(&d);
  o.mode = SHEAF_PROGRAM_LINEAR, o.host = 0;
  if (CHECK_OK(ctx, sheaf_program_load(ctx, "examples/gru.sf", &o, &p))) {
    static const int32_t w[] = {3, 4};
    const int32_t *ws[3] = {w, w, NULL};
    int64_t lens[3] = {2, 1, 4};
    CHECK_EQ_INT(sheaf_program_run_words(p, 3, ws, lens), SHEAF_ERR_INVALID_ARG);
    CHECK(strstr(sheaf_ctx_last_error(ctx), "sentence 2: 4 words but no array"));
    lens[2] = -1;
    CHECK_EQ_INT(sheaf_program_run_words(p, 3, ws, lens), SHEAF_ERR_INVALID_ARG);
    CHECK(strstr(sheaf_ctx_last_error(ctx), "sentence 2: -1 words"));
    CHECK_EQ_INT(sheaf_program_outputs(p, 0, 0, NULL), 0);
    lens[2] = 0; /* an empty sentence: a fold's initial state */
    if (CHECK_OK(ctx, sheaf_program_run_words(p, 3, ws, lens))) CHECK(sheaf_program_outputs(p, 2, 0, NULL) > 0);
  }
  sheaf_program_free(p);
}
