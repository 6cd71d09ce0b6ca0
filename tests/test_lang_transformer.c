/*
 * test_lang_transformer.c — examples/transformer.sf (a post-LN transformer
 * layer written in the language: stack, transpose, softmax, layer_norm,
 * rows of a matrix) against src/ragged's encoder on the same weights: the
 * encoder reads PyTorch's nn.TransformerEncoderLayer names and layout, the
 * model its own names with the weights transposed (x @ W). Every token of
 * the first EWT sentences agrees within 1e-4 relative (floor 1).
 */
#include <math.h>
#include <stdlib.h>

#include "harness.h"
#include "io/dataset.h"
#include "models/transformer_weights.h"

#define EWT "data/ud_english_ewt/en_ewt-ud-test.conllu"

enum { DK = 8, D = 4 * DK, F = 48, N_SENT = 120 };

TEST(lang_transformer_matches_ragged_encoder) {
  if (!th_sheaf_bin()) return;
  sheaf_ctx *ctx = th_ctx();
  sh_dataset d;
  REQUIRE_OK(ctx, sh_dataset_load(ctx, EWT, SH_DATASET_SENTS, &d));
  int64_t V = d.vocab;
  float *emb = NULL;
  const char *enc_path = th_tmp_path("tr_encoder.safetensors"), *sf_path = th_tmp_path("tr_sf.safetensors");
  if (!CHECK_OK(ctx, sh_transformer_weights(ctx, V, D, F, 7, enc_path, sf_path, &emb))) {
    free(emb);
    sh_dataset_free(&d);
    return;
  }
  /* the language model through the CLI */
  char out_path[512], cmd[2048];
  static char out[1 << 14];
  snprintf(out_path, sizeof out_path, "%s", th_tmp_path("tr_sf.txt"));
  snprintf(cmd, sizeof cmd, "%s run examples/transformer.sf --data " EWT " --weights %s --limit %d --out %s",
           th_sheaf_bin(), sf_path, N_SENT, out_path);
  if (!CHECK_EQ_INT(th_run(cmd, out, sizeof out), 0)) fprintf(stderr, "%s\n%s", cmd, out);
  /* the encoder on the same embeddings */
  int64_t lens[N_SENT], n_tok = 0;
  for (int s = 0; s < N_SENT; s++) n_tok += lens[s] = d.sent_off[s + 1] - d.sent_off[s];
  sheaf_ragged *x = NULL, *y = NULL;
  sheaf_encoder *enc = NULL;
  sheaf_st_file *f = NULL;
  int64_t dims[2] = {SHEAF_RAGGED_DIM, D};
  REQUIRE_OK(ctx, sheaf_ragged_create(ctx, SHEAF_F32, N_SENT, lens, 2, dims, NULL, &x));
  float *xd = sheaf_ragged_data(x);
  for (int64_t t = 0; t < n_tok; t++) memcpy(xd + t * D, emb + (int64_t)d.sent_words[t] * D, D * sizeof(float));
  REQUIRE_OK(ctx, sheaf_st_open(ctx, enc_path, &f));
  REQUIRE_OK(ctx, sheaf_encoder_load(ctx, f, NULL, &enc));
  sheaf_st_close(f);
  REQUIRE_OK(ctx, sheaf_encoder_forward(enc, x, &y));
  const float *yd = sheaf_ragged_data(y);
  /* compare: lines "SENTENCE TOKEN v0 .. v(D-1)", in order */
  FILE *fo = fopen(out_path, "r");
  REQUIRE(fo);
  static char line[1 << 14];
  int64_t t = 0;
  double worst = 0;
  for (int s = 0; s < N_SENT; s++)
    for (int64_t k = 0; k < lens[s]; k++, t++) {
      if (!CHECK(fgets(line, sizeof line, fo))) goto done;
      char *p = line;
      CHECK_EQ_INT(strtol(p, &p, 10), s);
      CHECK_EQ_INT(strtol(p, &p, 10), k);
      for (int j = 0; j < D; j++) {
        double v = strtod(p, &p), r = yd[t * D + j];
        double e = fabs(v - r) / (fabs(r) > 1 ? fabs(r) : 1);
        if (!(e <= worst)) worst = e;
      }
    }
  CHECK(!fgets(line, sizeof line, fo));
done:
  fclose(fo);
  if (getenv("SHEAF_TEST_VERBOSE")) fprintf(stderr, "transformer.sf vs encoder: max rel err %g\n", worst);
  if (!CHECK(worst <= 1e-4)) fprintf(stderr, "transformer.sf vs encoder: max rel err %g\n", worst);
  sheaf_encoder_free(enc);
  sheaf_ragged_free(x);
  sheaf_ragged_free(y);
  sh_dataset_free(&d);
  free(emb);
}
