/*
 * test_ragged_encoder.c — the ragged transformer encoder: weights written
 * under PyTorch's names and loaded back; output against a plain scalar
 * reference (each sequence alone, dense, in double; <= 1e-4 max rel err);
 * storage-padded input and output give the same result as packed ones;
 * empty sequences are handled; PyTorch's nn.TransformerEncoder on the same
 * weights and inputs (<= 1e-3) when `python3 -c 'import torch, numpy'` works
 * (otherwise the test says it skipped and passes); load errors.
 */
#include <stdlib.h>

#include "harness.h"
#include "ragged/encoder.h"

typedef struct model {
  int d, heads, ff, layers;
  const char *act; /* "relu" | "gelu" */
  float *w;        /* all tensors, in the order of names[] per layer */
  size_t nw;
} model;

static const char *const PARTS[12] = {
    "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
    "self_attn.out_proj.bias",  "linear1.weight",         "linear1.bias",
    "linear2.weight",           "linear2.bias",           "norm1.weight",
    "norm1.bias",               "norm2.weight",           "norm2.bias"};

static void part_shape(const model *m, int p, int64_t *shape, int *rank) {
  int64_t d = m->d, ff = m->ff;
  int64_t s[12][2] = {{3 * d, d}, {3 * d, 0}, {d, d}, {d, 0}, {ff, d}, {ff, 0},
                      {d, ff},    {d, 0},     {d, 0}, {d, 0}, {d, 0},  {d, 0}};
  shape[0] = s[p][0], shape[1] = s[p][1];
  *rank = s[p][1] ? 2 : 1;
}

static int64_t part_numel(const model *m, int p) {
  int64_t s[2];
  int r;
  part_shape(m, p, s, &r);
  return r == 2 ? s[0] * s[1] : s[0];
}

static void frand(float *p, int64_t n, uint64_t seed, float center, float scale) {
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = center + scale * ((float)((double)(seed >> 40) / (double)(1ull << 24)) - 0.5f);
  }
}

static float *part(const model *m, int layer, int p) {
  float *w = m->w;
  for (int l = 0; l < layer; l++)
    for (int q = 0; q < 12; q++) w += part_numel(m, q);
  for (int q = 0; q < p; q++) w += part_numel(m, q);
  return w;
}

static void model_init(model *m, uint64_t seed) {
  m->nw = 0;
  for (int p = 0; p < 12; p++) m->nw += (size_t)part_numel(m, p) * (size_t)m->layers;
  m->w = malloc(m->nw * sizeof(float));
  for (int l = 0; l < m->layers; l++)
    for (int p = 0; p < 12; p++) {
      int64_t s[2];
      int r;
      part_shape(m, p, s, &r);
      float scale = r == 2 ? 2.0f / sqrtf((float)s[1]) : 0.2f;
      float center = (p == 8 || p == 10) ? 1.0f : 0.0f; /* layernorm gains near 1 */
      frand(part(m, l, p), part_numel(m, p), seed + (uint64_t)(l * 12 + p) * 131, center, scale);
    }
}

/* Writes the model under nn.TransformerEncoder names; `skip` omits one part
 * of layer 0 (-1: none); extra metadata pairs appended. */
static const char *model_write(sheaf_ctx *ctx, const model *m, const char *file, int skip,
                               const char *const *extra, size_t n_extra) {
  const char *path = th_tmp_path(file);
  size_t n = 0;
  char names[64][96];
  const char *np[64];
  sheaf_tensor *ts[64];
  for (int l = 0; l < m->layers; l++)
    for (int p = 0; p < 12; p++) {
      if (l == 0 && p == skip) continue;
      int64_t s[2];
      int r;
      part_shape(m, p, s, &r);
      snprintf(names[n], sizeof names[n], "layers.%d.%s", l, PARTS[p]);
      np[n] = names[n];
      if (!CHECK_OK(ctx, sheaf_tensor_wrap(ctx, SHEAF_F32, r, s, NULL, part(m, l, p), NULL, NULL,
                                           &ts[n])))
        return NULL;
      n++;
    }
  char dbuf[16], hbuf[16], fbuf[16], lbuf[16];
  snprintf(dbuf, sizeof dbuf, "%d", m->d);
  snprintf(hbuf, sizeof hbuf, "%d", m->heads);
  snprintf(fbuf, sizeof fbuf, "%d", m->ff);
  snprintf(lbuf, sizeof lbuf, "%d", m->layers);
  const char *meta[32] = {"format", "sheaf-encoder", "d_model", dbuf, "nhead", hbuf,
                          "dim_feedforward", fbuf, "num_layers", lbuf, "activation", m->act,
                          "layer_norm_eps", "1e-05"};
  size_t nm = 7;
  for (size_t i = 0; i < n_extra; i++) meta[2 * nm] = extra[2 * i], meta[2 * nm + 1] = extra[2 * i + 1], nm++;
  bool ok = CHECK_OK(ctx, sheaf_st_write(ctx, path, n, np, (const sheaf_tensor *const *)ts, nm, meta));
  for (size_t i = 0; i < n; i++) sheaf_tensor_free(ts[i]);
  return ok ? path : NULL;
}

/* ---------------------------------------------------- scalar reference */

static void ref_linear(const double *x, int64_t L, int64_t in, const float *w, const float *b,
                       int64_t out, double *y) {
  for (int64_t i = 0; i < L; i++)
    for (int64_t o = 0; o < out; o++) {
      double s = b[o];
      for (int64_t k = 0; k < in; k++) s += x[i * in + k] * w[o * in + k];
      y[i * out + o] = s;
    }
}

static void ref_ln(double *x, int64_t L, int64_t d, const float *g, const float *b) {
  for (int64_t i = 0; i < L; i++) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < d; j++) mean += x[i * d + j];
    mean /= (double)d;
    for (int64_t j = 0; j < d; j++) var += (x[i * d + j] - mean) * (x[i * d + j] - mean);
    var /= (double)d;
    for (int64_t j = 0; j < d; j++) x[i * d + j] = (x[i * d + j] - mean) / sqrt(var + 1e-5) * g[j] + b[j];
  }
}

/* One sequence x [L, d] through every layer, in place. */
static void ref_encoder(const model *m, double *x, int64_t L) {
  const int64_t d = m->d, ff = m->ff, dh = d / m->heads;
  double *qkv = malloc((size_t)(L * 3 * d + 1) * 8), *ctxv = malloc((size_t)(L * d + 1) * 8);
  double *o = malloc((size_t)(L * d + 1) * 8), *h = malloc((size_t)(L * ff + 1) * 8);
  double *p = malloc((size_t)(L + 1) * 8);
  for (int l = 0; l < m->layers; l++) {
    ref_linear(x, L, d, part(m, l, 0), part(m, l, 1), 3 * d, qkv);
    for (int hd = 0; hd < m->heads; hd++)
      for (int64_t i = 0; i < L; i++) {
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < L; j++) {
          double s = 0;
          for (int64_t c = 0; c < dh; c++) s += qkv[i * 3 * d + hd * dh + c] * qkv[j * 3 * d + d + hd * dh + c];
          p[j] = s / sqrt((double)dh);
          mx = p[j] > mx ? p[j] : mx;
        }
        for (int64_t j = 0; j < L; j++) sum += p[j] = exp(p[j] - mx);
        for (int64_t c = 0; c < dh; c++) {
          double s = 0;
          for (int64_t j = 0; j < L; j++) s += p[j] / sum * qkv[j * 3 * d + 2 * d + hd * dh + c];
          ctxv[i * d + hd * dh + c] = s;
        }
      }
    ref_linear(ctxv, L, d, part(m, l, 2), part(m, l, 3), d, o);
    for (int64_t i = 0; i < L * d; i++) x[i] += o[i];
    ref_ln(x, L, d, part(m, l, 8), part(m, l, 9));
    ref_linear(x, L, d, part(m, l, 4), part(m, l, 5), ff, h);
    for (int64_t i = 0; i < L * ff; i++)
      h[i] = m->act[0] == 'g' ? 0.5 * h[i] * (1 + erf(h[i] / sqrt(2.0))) : (h[i] > 0 ? h[i] : 0);
    ref_linear(h, L, ff, part(m, l, 6), part(m, l, 7), d, o);
    for (int64_t i = 0; i < L * d; i++) x[i] += o[i];
    ref_ln(x, L, d, part(m, l, 10), part(m, l, 11));
  }
  free(qkv), free(ctxv), free(o), free(h), free(p);
}

/* ------------------------------------------------------------- helpers */

static sheaf_ragged *inputs(sheaf_ctx *ctx, int64_t B, const int64_t *lens, int64_t d,
                            int64_t tile) {
  int64_t dims[2] = {SHEAF_RAGGED_DIM, d};
  sheaf_ragged_opts o = {tile, tile};
  sheaf_ragged *r;
  if (!CHECK_OK(ctx, sheaf_ragged_create(ctx, SHEAF_F32, B, lens, 2, dims, &o, &r))) return NULL;
  for (int64_t b = 0; b < B; b++)
    frand((float *)sheaf_ragged_data(r) + sheaf_ragged_offsets(r)[b], lens[b] * d,
          1000 + (uint64_t)b, 0.0f, 2.0f);
  return r;
}

static double tok(const sheaf_ragged *r, int64_t b, int64_t i, int64_t j) {
  int64_t idx[2] = {i, j};
  return ((const float *)sheaf_ragged_data(r))[sheaf_ragged_offset(r, b, idx)];
}

/* max |y - ref| / max |ref| against the scalar reference. */
static double err_vs_ref(const model *m, const sheaf_ragged *x, const sheaf_ragged *y) {
  double num = 0, den = 1e-30;
  const int64_t d = m->d;
  for (int64_t b = 0; b < sheaf_ragged_batch(x); b++) {
    int64_t L = sheaf_ragged_lens(x)[b];
    double *s = malloc((size_t)(L * d + 1) * 8);
    for (int64_t i = 0; i < L; i++)
      for (int64_t j = 0; j < d; j++) s[i * d + j] = tok(x, b, i, j);
    ref_encoder(m, s, L);
    for (int64_t i = 0; i < L; i++)
      for (int64_t j = 0; j < d; j++) {
        double e = fabs(tok(y, b, i, j) - s[i * d + j]);
        num = e > num ? e : num;
        den = fabs(s[i * d + j]) > den ? fabs(s[i * d + j]) : den;
      }
    free(s);
  }
  return num / den;
}

static sheaf_encoder *load(sheaf_ctx *ctx, const char *path, const sheaf_encoder_config *cfg) {
  sheaf_st_file *f;
  if (!CHECK_OK(ctx, sheaf_st_open(ctx, path, &f))) return NULL;
  sheaf_encoder *e = NULL;
  CHECK_OK(ctx, sheaf_encoder_load(ctx, f, cfg, &e));
  sheaf_st_close(f);
  return e;
}

static const int64_t LENS[] = {1, 13, 14, 15, 31, 32, 33, 0, 129, 5};
#define NL ((int64_t)(sizeof LENS / sizeof LENS[0]))

/* --------------------------------------------------------------- tests */

TEST(encoder_matches_scalar_reference) {
  sheaf_ctx *ctx = th_ctx();
  model ms[2] = {{64, 4, 128, 2, "relu", NULL, 0}, {128, 2, 256, 1, "gelu", NULL, 0}};
  for (int k = 0; k < 2; k++) {
    model *m = &ms[k];
    model_init(m, 42 + (uint64_t)k);
    const char *path = model_write(ctx, m, "enc.safetensors", -1, NULL, 0);
    REQUIRE(path);
    sheaf_encoder *e = load(ctx, path, NULL);
    REQUIRE(e);
    sheaf_encoder_config c;
    sheaf_encoder_get_config(e, &c);
    CHECK_EQ_INT(c.d_model, m->d);
    CHECK_EQ_INT(c.n_heads, m->heads);
    CHECK_EQ_INT(c.d_ff, m->ff);
    CHECK_EQ_INT(c.n_layers, m->layers);
    CHECK_EQ_INT(c.act, k ? SHEAF_ENCODER_ACT_GELU : SHEAF_ENCODER_ACT_RELU);
    sheaf_ragged *x = inputs(ctx, NL, LENS, m->d, 1), *y = NULL;
    REQUIRE(x);
    REQUIRE_OK(ctx, sheaf_encoder_forward(e, x, &y));
    double err = err_vs_ref(m, x, y);
    if (!CHECK(err <= 1e-4)) fprintf(stderr, "  model %d: max rel err %.3g\n", k, err);
    /* storage-padded input and output: same values (layout change fused) */
    sheaf_ragged *xp = inputs(ctx, NL, LENS, m->d, 8);
    int64_t dims[2] = {SHEAF_RAGGED_DIM, m->d};
    sheaf_ragged_opts o = {.storage_tile = 16};
    sheaf_ragged *yp;
    REQUIRE_OK(ctx, sheaf_ragged_create(ctx, SHEAF_F32, NL, LENS, 2, dims, &o, &yp));
    REQUIRE_OK(ctx, sheaf_encoder_forward_into(e, xp, yp));
    double diff = 0;
    for (int64_t b = 0; b < NL; b++)
      for (int64_t i = 0; i < LENS[b]; i++)
        for (int64_t j = 0; j < m->d; j++) diff = fmax(diff, fabs(tok(yp, b, i, j) - tok(y, b, i, j)));
    CHECK(diff <= 1e-6);
    sheaf_ragged_free(xp), sheaf_ragged_free(yp);
    sheaf_ragged_free(x), sheaf_ragged_free(y);
    sheaf_encoder_free(e);
    free(m->w);
  }
}

TEST(encoder_batch_of_one_and_empty_sequences) {
  sheaf_ctx *ctx = th_ctx();
  model m = {32, 2, 64, 1, "relu", NULL, 0};
  model_init(&m, 7);
  const char *path = model_write(ctx, &m, "enc1.safetensors", -1, NULL, 0);
  REQUIRE(path);
  sheaf_encoder *e = load(ctx, path, NULL);
  REQUIRE(e);
  int64_t cases[3][3] = {{1, 0, 0}, {0, 3, 0}, {0, 0, 0}};
  for (int c = 0; c < 3; c++) {
    sheaf_ragged *x = inputs(ctx, 3, cases[c], m.d, 1), *y;
    REQUIRE(x);
    REQUIRE_OK(ctx, sheaf_encoder_forward(e, x, &y));
    CHECK(err_vs_ref(&m, x, y) <= 1e-4);
    sheaf_ragged_free(x), sheaf_ragged_free(y);
  }
  sheaf_ragged *x0 = inputs(ctx, 0, NULL, m.d, 1), *y0;
  REQUIRE(x0);
  CHECK_OK(ctx, sheaf_encoder_forward(e, x0, &y0));
  sheaf_ragged_free(x0), sheaf_ragged_free(y0);
  sheaf_encoder_free(e);
  free(m.w);
}

TEST(encoder_matches_pytorch_when_installed) {
  sheaf_ctx *ctx = th_ctx();
  char out[4096];
  FILE *script = fopen("bench/encoder_torch.py", "r");
  if (!script) {
    fprintf(stderr, "  skipped: bench/encoder_torch.py missing\n");
    return;
  }
  fclose(script);
  /* both models through one Python process (importing torch is slow) */
  model ms[2] = {{64, 4, 128, 2, "relu", NULL, 0}, {128, 2, 256, 1, "gelu", NULL, 0}};
  char paths[2][3][512], cmd[4096];
  sheaf_ragged *xs[2] = {NULL, NULL};
  for (int k = 0; k < 2; k++) {
    model *m = &ms[k];
    model_init(m, 99 + (uint64_t)k);
    char name[64];
    snprintf(name, sizeof name, "pt_w%d.safetensors", k);
    const char *wpath = model_write(ctx, m, name, -1, NULL, 0);
    REQUIRE(wpath);
    snprintf(paths[k][0], sizeof paths[k][0], "%s", wpath);
    snprintf(name, sizeof name, "pt_in%d.safetensors", k);
    snprintf(paths[k][1], sizeof paths[k][1], "%s", th_tmp_path(name));
    snprintf(name, sizeof name, "pt_out%d.safetensors", k);
    snprintf(paths[k][2], sizeof paths[k][2], "%s", th_tmp_path(name));
    xs[k] = inputs(ctx, NL, LENS, m->d, 1);
    REQUIRE(xs[k]);
    sheaf_tensor *flat, *lens;
    REQUIRE_OK(ctx, sheaf_ragged_flat(ctx, xs[k], &flat));
    int64_t ls[NL], nb = NL;
    memcpy(ls, LENS, sizeof ls);
    REQUIRE_OK(ctx, sheaf_tensor_wrap(ctx, SHEAF_I64, 1, &nb, NULL, ls, NULL, NULL, &lens));
    const char *names[2] = {"x", "lens"};
    const sheaf_tensor *ts[2] = {flat, lens};
    REQUIRE_OK(ctx, sheaf_st_write(ctx, paths[k][1], 2, names, ts, 0, NULL));
    sheaf_tensor_free(flat), sheaf_tensor_free(lens);
  }
  snprintf(cmd, sizeof cmd,
           "OMP_NUM_THREADS=1 python3 bench/encoder_torch.py check %s %s %s %s %s %s 2>&1",
           paths[0][0], paths[0][1], paths[0][2], paths[1][0], paths[1][1], paths[1][2]);
  int rc = th_run_torch(cmd, out, sizeof out); /* skips when torch or numpy is missing */
  if (rc == TH_SKIP) {
    for (int k = 0; k < 2; k++) sheaf_ragged_free(xs[k]), free(ms[k].w);
    return;
  }
  if (!CHECK_EQ_INT(rc, 0)) fprintf(stderr, "%s\n", out);
  for (int k = 0; k < 2; k++) {
    sheaf_encoder *e = rc == 0 ? load(ctx, paths[k][0], NULL) : NULL;
    sheaf_ragged *y = NULL;
    sheaf_st_file *f = NULL;
    sheaf_tensor *ty = NULL;
    if (e && CHECK_OK(ctx, sheaf_encoder_forward(e, xs[k], &y)) &&
        CHECK_OK(ctx, sheaf_st_open(ctx, paths[k][2], &f)) &&
        CHECK_OK(ctx, sheaf_st_tensor(ctx, f, "y", &ty)) &&
        CHECK_EQ_INT(sheaf_tensor_numel(ty), sheaf_ragged_numel(y))) {
      const float *pt = sheaf_tensor_data(ty), *sy = sheaf_ragged_data(y);
      double num = 0, den = 1e-30;
      for (int64_t i = 0; i < sheaf_ragged_numel(y); i++) {
        num = fmax(num, fabs((double)sy[i] - pt[i]));
        den = fmax(den, fabs((double)pt[i]));
      }
      if (!CHECK(num / den <= 1e-3)) fprintf(stderr, "  model %d: rel err vs PyTorch %.3g\n", k, num / den);
    }
    sheaf_st_close(f);
    sheaf_tensor_free(ty);
    sheaf_ragged_free(y);
    sheaf_ragged_free(xs[k]);
    sheaf_encoder_free(e);
    free(ms[k].w);
  }
}

TEST(encoder_load_errors_name_the_tensor) {
  sheaf_ctx *ctx = th_ctx();
  model m = {32, 2, 64, 2, "relu", NULL, 0};
  model_init(&m, 3);
  sheaf_st_file *f;
  sheaf_encoder *e = NULL;
  /* a missing bias */
  const char *p = model_write(ctx, &m, "miss.safetensors", 5, NULL, 0);
  REQUIRE(p);
  REQUIRE_OK(ctx, sheaf_st_open(ctx, p, &f));
  CHECK_STATUS(ctx, sheaf_encoder_load(ctx, f, NULL, &e), SHEAF_ERR_NOT_FOUND);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "layers.0.linear1.bias");
  CHECK(e == NULL);
  sheaf_st_close(f);
  /* pre-LN is refused, not silently computed as post-LN */
  const char *nf[2] = {"norm_first", "true"};
  p = model_write(ctx, &m, "nf.safetensors", -1, nf, 1);
  REQUIRE(p);
  REQUIRE_OK(ctx, sheaf_st_open(ctx, p, &f));
  CHECK_STATUS(ctx, sheaf_encoder_load(ctx, f, NULL, &e), SHEAF_ERR_UNSUPPORTED);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "norm_first");
  sheaf_st_close(f);
  /* heads that do not divide d; a d_model that disagrees with the shapes */
  p = model_write(ctx, &m, "ok.safetensors", -1, NULL, 0);
  REQUIRE(p);
  REQUIRE_OK(ctx, sheaf_st_open(ctx, p, &f));
  sheaf_encoder_config c = {.n_heads = 3};
  CHECK_STATUS(ctx, sheaf_encoder_load(ctx, f, &c, &e), SHEAF_ERR_SHAPE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "n_heads 3");
  c = (sheaf_encoder_config){.d_model = 16, .n_heads = 2};
  CHECK_STATUS(ctx, sheaf_encoder_load(ctx, f, &c, &e), SHEAF_ERR_SHAPE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "in_proj_weight");
  c = (sheaf_encoder_config){.prefix = "encoder."};
  CHECK_STATUS(ctx, sheaf_encoder_load(ctx, f, &c, &e), SHEAF_ERR_NOT_FOUND);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "encoder.layers.0.self_attn.in_proj_weight");
  /* allocation failures: no leak, NOMEM */
  for (long n = 1; n < 80; n += 3) {
    long live = th_live_blocks();
    th_fail_alloc_at(n);
    sheaf_status st = sheaf_encoder_load(ctx, f, NULL, &e);
    th_fail_alloc_at(0);
    if (st == SHEAF_OK) sheaf_encoder_free(e);
    else CHECK_EQ_INT(st, SHEAF_ERR_NOMEM);
    CHECK_EQ_INT(th_live_blocks(), live);
  }
  REQUIRE_OK(ctx, sheaf_encoder_load(ctx, f, NULL, &e));
  sheaf_st_close(f);
  /* input of the wrong width */
  int64_t lens[1] = {3};
  sheaf_ragged *x = inputs(ctx, 1, lens, 16, 1), *y = NULL;
  REQUIRE(x);
  CHECK_STATUS(ctx, sheaf_encoder_forward(e, x, &y), SHEAF_ERR_SHAPE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "{SHEAF_RAGGED_DIM, 32}");
  sheaf_ragged_free(x);
  sheaf_encoder_free(e);
  free(m.w);
}
