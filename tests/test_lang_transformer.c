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

#include "data.h"
#include "harness.h"

#define EWT "data/ud_english_ewt/en_ewt-ud-test.conllu"

enum { DK = 8, D = 4 * DK, F = 48, N_SENT = 120 };

static void fill(float *p, int64_t n, uint64_t *rng, float center, float scale) {
  for (int64_t i = 0; i < n; i++) p[i] = center + scale * th_frand(rng);
}

/* dst [in, out] = src [out, in] transposed (src rows from row0). */
static float *transposed(const float *src, int64_t row0, int64_t out, int64_t in) {
  float *t = malloc((size_t)(in * out) * sizeof *t);
  for (int64_t o = 0; o < out; o++)
    for (int64_t i = 0; i < in; i++) t[i * out + o] = src[(row0 + o) * in + i];
  return t;
}

static bool write_st(sheaf_ctx *ctx, const char *path, int n, const char *const *names, float *const *data,
                     const int64_t (*shapes)[2], const char *const *meta, size_t n_meta) {
  sheaf_tensor *ts[32];
  bool ok = true;
  for (int i = 0; i < n; i++)
    ok = CHECK_OK(ctx, sheaf_tensor_wrap(ctx, SHEAF_F32, shapes[i][1] ? 2 : 1, shapes[i], NULL, data[i], NULL,
                                         NULL, &ts[i])) && ok;
  if (ok) ok = CHECK_OK(ctx, sheaf_st_write(ctx, path, (size_t)n, names, (const sheaf_tensor *const *)ts, n_meta, meta));
  for (int i = 0; i < n; i++) sheaf_tensor_free(ts[i]);
  return ok;
}

TEST(lang_transformer_matches_ragged_encoder) {
  if (!th_sheaf_bin()) return;
  sheaf_ctx *ctx = th_ctx();
  ex_data d;
  REQUIRE_OK(ctx, ex_data_load(ctx, EWT, EX_DATA_SENTS, &d));
  int64_t V = d.vocab;
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  /* PyTorch's layout */
  float *in_w = malloc(3 * D * D * sizeof(float)), *in_b = malloc(3 * D * sizeof(float));
  float *out_w = malloc(D * D * sizeof(float)), *out_b = malloc(D * sizeof(float));
  float *l1_w = malloc(F * D * sizeof(float)), *l1_b = malloc(F * sizeof(float));
  float *l2_w = malloc(D * F * sizeof(float)), *l2_b = malloc(D * sizeof(float));
  float *n1_w = malloc(D * sizeof(float)), *n1_b = malloc(D * sizeof(float));
  float *n2_w = malloc(D * sizeof(float)), *n2_b = malloc(D * sizeof(float));
  float *emb = malloc((size_t)(V * D) * sizeof(float));
  fill(in_w, 3 * D * D, &rng, 0, 0.35f), fill(in_b, 3 * D, &rng, 0, 0.1f);
  fill(out_w, D * D, &rng, 0, 0.35f), fill(out_b, D, &rng, 0, 0.1f);
  fill(l1_w, F * D, &rng, 0, 0.35f), fill(l1_b, F, &rng, 0, 0.1f);
  fill(l2_w, D * F, &rng, 0, 0.3f), fill(l2_b, D, &rng, 0, 0.1f);
  fill(n1_w, D, &rng, 1, 0.2f), fill(n1_b, D, &rng, 0, 0.1f);
  fill(n2_w, D, &rng, 1, 0.2f), fill(n2_b, D, &rng, 0, 0.1f);
  fill(emb, V * D, &rng, 0, 1.0f);

  const char *enc_path = th_tmp_path("tr_encoder.safetensors"), *sf_path = th_tmp_path("tr_sf.safetensors");
  {
    const char *names[] = {"layers.0.self_attn.in_proj_weight", "layers.0.self_attn.in_proj_bias",
                           "layers.0.self_attn.out_proj.weight", "layers.0.self_attn.out_proj.bias",
                           "layers.0.linear1.weight", "layers.0.linear1.bias", "layers.0.linear2.weight",
                           "layers.0.linear2.bias", "layers.0.norm1.weight", "layers.0.norm1.bias",
                           "layers.0.norm2.weight", "layers.0.norm2.bias"};
    float *data[] = {in_w, in_b, out_w, out_b, l1_w, l1_b, l2_w, l2_b, n1_w, n1_b, n2_w, n2_b};
    const int64_t shapes[][2] = {{3 * D, D}, {3 * D, 0}, {D, D}, {D, 0}, {F, D}, {F, 0},
                                 {D, F},     {D, 0},     {D, 0}, {D, 0}, {D, 0}, {D, 0}};
    const char *meta[] = {"nhead", "4", "activation", "relu", "layer_norm_eps", "1e-05"};
    REQUIRE(write_st(ctx, enc_path, 12, names, data, shapes, meta, 3));
  }
  {
    float *wq = transposed(in_w, 0, D, D), *wk = transposed(in_w, D, D, D), *wv = transposed(in_w, 2 * D, D, D);
    float *wo = transposed(out_w, 0, D, D), *w1 = transposed(l1_w, 0, F, D), *w2 = transposed(l2_w, 0, D, F);
    const char *names[] = {"emb", "W_q", "b_q", "W_k", "b_k", "W_v", "b_v", "W_o", "b_o",
                           "W_1", "b_1", "W_2", "b_2", "g1",  "be1", "g2",  "be2"};
    float *data[] = {emb, wq, in_b, wk, in_b + D, wv, in_b + 2 * D, wo, out_b,
                     w1,  l1_b, w2, l2_b, n1_w, n1_b, n2_w, n2_b};
    const int64_t shapes[][2] = {{V, D}, {D, D}, {D, 0}, {D, D}, {D, 0}, {D, D}, {D, 0}, {D, D}, {D, 0},
                                 {D, F}, {F, 0}, {F, D}, {D, 0}, {D, 0}, {D, 0}, {D, 0}, {D, 0}};
    bool ok = write_st(ctx, sf_path, 17, names, data, shapes, NULL, 0);
    free(wq), free(wk), free(wv), free(wo), free(w1), free(w2);
    REQUIRE(ok);
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
  ex_data_free(&d);
  free(in_w), free(in_b), free(out_w), free(out_b), free(l1_w), free(l1_b), free(l2_w), free(l2_b);
  free(n1_w), free(n1_b), free(n2_w), free(n2_b), free(emb);
}
