/*
 * test_program.c — the C API for language models (sheaf_program_*): the
 * BiLSTM tagger of examples/bilstm.sf loaded with seeded weights and run
 * on EWT sentences equals `sheaf run` of the same model, seed and data
 * (1 and 2 threads, every policy); outputs stay readable after the run;
 * load errors carry the source position; misuse is named.
 */
#include <math.h>
#include <stdlib.h>

#include "harness.h"
#include "io/dataset.h"

#define EWT "data/ud_english_ewt/en_ewt-ud-test.conllu"
enum { N = 20, T = 3 };

TEST(program_runs_like_the_cli) {
  if (!th_sheaf_bin()) return;
  sheaf_ctx *ctx = th_ctx();
  sh_dataset d;
  REQUIRE_OK(ctx, sh_dataset_load(ctx, EWT, SH_DATASET_SENTS, &d));
  const char *names[3] = {"E", "H", "T"};
  int64_t values[3] = {5, 6, T};
  const int32_t *words[N];
  int64_t lens[N];
  for (int i = 0; i < N; i++) words[i] = d.sent_words + d.sent_off[i], lens[i] = d.sent_off[i + 1] - d.sent_off[i];
  static char out[1 << 14];
  char cmd[1024], path[512];
  snprintf(path, sizeof path, "%s", th_tmp_path("program_cli.txt"));
  snprintf(cmd, sizeof cmd, "%s run examples/bilstm.sf --data " EWT " --seed 9 --size E=5 --size H=6 --size T=3 "
                            "--limit %d --out %s", th_sheaf_bin(), N, path);
  REQUIRE_EQ_INT(th_run(cmd, out, sizeof out), 0);
  static const sheaf_policy pols[] = {SHEAF_POLICY_SHEAF, SHEAF_POLICY_NONE, SHEAF_POLICY_AGENDA};
  for (int pi = 0; pi < 3; pi++)
    for (int threads = 1; threads <= 2; threads++) {
      sheaf_program_opts o;
      memset(&o, 0, sizeof o);
      o.seed = 9;
      o.vocab = d.vocab;
      o.n_sizes = 3, o.size_names = names, o.size_values = values;
      o.runner.threads = threads;
      o.runner.batch = 7;
      o.runner.policy = pols[pi];
      sheaf_program *p;
      REQUIRE_OK(ctx, sheaf_program_load(ctx, "examples/bilstm.sf", &o, &p));
      REQUIRE_OK(ctx, sheaf_program_run_words(p, N, words, lens));
      FILE *f = fopen(path, "r");
      REQUIRE(f);
      char line[4096];
      double worst = 0;
      long rows = 0;
      for (int i = 0; i < N; i++) {
        sheaf_value_view v[128];
        size_t k = sheaf_program_outputs(p, i, 128, v);
        CHECK_EQ_INT(k, lens[i]); /* one tag distribution per word */
        for (size_t w = 0; w < k && w < 128; w++, rows++) {
          if (!CHECK(fgets(line, sizeof line, f))) break;
          char *q = line;
          CHECK_EQ_INT(strtol(q, &q, 10), i);
          CHECK_EQ_INT(strtol(q, &q, 10), (long)w);
          CHECK_EQ_INT(v[w].shape[0], T);
          for (int c = 0; c < T; c++) {
            double e = fabs(strtod(q, &q) - v[w].data[c]);
            if (!(e <= worst)) worst = e;
          }
        }
      }
      fclose(f);
      CHECK(worst <= 2e-6); /* the text's 7 digits */
      CHECK_EQ_INT(sheaf_program_outputs(p, N, 128, NULL), 0);
      sheaf_program_free(p);
    }
  sh_dataset_free(&d);
}

TEST(program_errors) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_program *p = NULL;
  static const char bad[] = "fn main(ws: list[i32]) -> i32 {\n  len(ws) + true\n}\n";
  const char *path = th_write_tmp("bad_program.sf", bad, sizeof bad - 1);
  CHECK_STATUS(ctx, sheaf_program_load(ctx, path, NULL, &p), SHEAF_ERR_PARSE);
  CHECK(p == NULL);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "bad_program.sf:2:3: error: ");
  CHECK(sheaf_program_load(ctx, "no/such.sf", NULL, &p) != SHEAF_OK);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "no/such.sf");
  CHECK_STATUS(ctx, sheaf_program_load(ctx, NULL, NULL, &p), SHEAF_ERR_INVALID_ARG);
  /* a tree model cannot take sentences */
  const char *names[3] = {"E", "H", "C"};
  int64_t values[3] = {4, 4, 5};
  sheaf_program_opts o;
  memset(&o, 0, sizeof o);
  o.vocab = 10, o.n_sizes = 3, o.size_names = names, o.size_values = values;
  REQUIRE_OK(ctx, sheaf_program_load(ctx, "examples/treelstm.sf", &o, &p));
  int32_t w[2] = {1, 2};
  const int32_t *ws[1] = {w};
  int64_t lens[1] = {2};
  CHECK_STATUS(ctx, sheaf_program_run_words(p, 1, ws, lens), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "main does not take list[i32]");
  CHECK_STATUS(ctx, sheaf_program_run_words(p, 1, NULL, lens), SHEAF_ERR_INVALID_ARG);
  sheaf_program_free(p);
  sheaf_program_free(NULL);
}

/* Weights holding a NaN are refused by sheaf_program_load, naming the
 * tensor, unless opts.allow_nonfinite. */
TEST(program_nonfinite_weights) {
  sheaf_ctx *ctx = th_ctx();
  static const char src[] = "param W: f32[4, 4]\nfn main(ws: list[i32]) -> f32[4] { zeros(4) @ W }\n";
  const char *path = th_write_tmp("nan_program.sf", src, sizeof src - 1);
  const char *w = th_tmp_path("nan_program.safetensors");
  REQUIRE(path && w);
  sheaf_model *m = NULL;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  sheaf_param h;
  int64_t shape[2] = {4, 4};
  CHECK_OK(ctx, sheaf_model_param(m, "W", 2, shape, SHEAF_INIT_GLOROT, &h));
  int rank;
  const int64_t *sh;
  float *d = sheaf_model_param_data(m, h, &rank, &sh);
  REQUIRE(d);
  d[5] = NAN;
  CHECK_OK(ctx, sheaf_model_save(m, w));
  sheaf_model_free(m);
  sheaf_program *p = NULL;
  sheaf_program_opts o;
  memset(&o, 0, sizeof o);
  o.weights = w;
  CHECK_STATUS(ctx, sheaf_program_load(ctx, path, &o, &p), SHEAF_ERR_FORMAT);
  CHECK(p == NULL);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "'W' holds 1 non-finite value");
  o.allow_nonfinite = 1;
  CHECK_OK(ctx, sheaf_program_load(ctx, path, &o, &p));
  sheaf_program_free(p);
}
