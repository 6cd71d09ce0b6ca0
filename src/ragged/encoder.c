/*
 * encoder.c — the ragged post-LN transformer encoder (sheaf_encoder_*):
 * loading and packing PyTorch-named weights from safetensors, the forward
 * pass over packed tokens (see encoder.h for the dataflow), and the cost
 * model used by the benchmark.
 */
#include "ragged/encoder.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- load */

static const char *meta_get(const sheaf_st_file *f, const char *key) {
  for (size_t i = 0; i < sheaf_st_metadata_count(f); i++)
    if (strcmp(sheaf_st_metadata_key(f, i), key) == 0) return sheaf_st_metadata_value(f, i);
  return NULL;
}

static int meta_int(const sheaf_st_file *f, const char *key) {
  const char *v = meta_get(f, key);
  return v ? atoi(v) : 0;
}

static void tname(char *buf, size_t n, const char *prefix, int layer, const char *name) {
  snprintf(buf, n, "%slayers.%d.%s", prefix, layer, name);
}

/* The f32 tensor `name` of layer `layer` with the expected shape (rank 1
 * or 2; dim1 < 0 for rank 1), as an aligned view. */
static sheaf_status get_tensor(sheaf_ctx *ctx, const sheaf_st_file *f, const char *prefix,
                               int layer, const char *name, int64_t dim0, int64_t dim1,
                               sheaf_tensor **out) {
  char full[512];
  tname(full, sizeof full, prefix, layer, name);
  sheaf_status st = sheaf_st_tensor(ctx, f, full, out);
  if (st) return sh_fail_prefix(ctx, "sheaf_encoder_load");
  const sheaf_tensor *t = *out;
  int rank = dim1 < 0 ? 1 : 2;
  bool ok = t->dtype == SHEAF_F32 && t->rank == rank && t->shape[0] == dim0 &&
            (rank == 1 || t->shape[1] == dim1) && sheaf_tensor_is_contiguous(t);
  if (!ok) {
    char sb[128], want[64];
    sh_shape_str(t->rank, t->shape, sb, sizeof sb);
    if (rank == 1) snprintf(want, sizeof want, "[%lld]", (long long)dim0);
    else snprintf(want, sizeof want, "[%lld, %lld]", (long long)dim0, (long long)dim1);
    st = sh_fail(ctx, SHEAF_ERR_SHAPE, "sheaf_encoder_load: '%s' is %s %s; expected F32 %s", full,
                 sheaf_dtype_name(t->dtype), sb, want);
    sheaf_tensor_free(*out);
    *out = NULL;
    return st;
  }
  return SHEAF_OK;
}

static sheaf_status load_matrix(sheaf_ctx *ctx, const sheaf_st_file *f, const char *prefix,
                                int layer, const char *name, int64_t out_dim, int64_t in_dim,
                                sh_gemm_packed_b **pb) {
  sheaf_tensor *t;
  sheaf_status st = get_tensor(ctx, f, prefix, layer, name, out_dim, in_dim, &t);
  if (st) return st;
  /* PyTorch Linear weight [out, in] = B^T of y = x·B */
  st = sh_gemm_pack_b(ctx, sheaf_tensor_data(t), in_dim, in_dim, out_dim, SH_GEMM_PACK_TRANS, pb);
  sheaf_tensor_free(t);
  return st;
}

static sheaf_status load_vector(sheaf_ctx *ctx, const sheaf_st_file *f, const char *prefix,
                                int layer, const char *name, int64_t n, float *dst) {
  sheaf_tensor *t;
  sheaf_status st = get_tensor(ctx, f, prefix, layer, name, n, -1, &t);
  if (st) return st;
  memcpy(dst, sheaf_tensor_data(t), (size_t)n * sizeof(float));
  sheaf_tensor_free(t);
  return SHEAF_OK;
}

static sheaf_status resolve_config(sheaf_ctx *ctx, const sheaf_st_file *f,
                                   const sheaf_encoder_config *cfg, sheaf_encoder *e,
                                   const char *prefix) {
  char name[512];
  tname(name, sizeof name, prefix, 0, "self_attn.in_proj_weight");
  long i0 = sheaf_st_find(f, name);
  if (i0 < 0)
    return sh_fail(ctx, SHEAF_ERR_NOT_FOUND, "sheaf_encoder_load: no tensor '%s' (layer 0)", name);
  e->d = cfg && cfg->d_model ? cfg->d_model
                             : (sheaf_st_rank(f, (size_t)i0) == 2 ? (int)sheaf_st_shape(f, (size_t)i0)[1] : 0);
  tname(name, sizeof name, prefix, 0, "linear1.weight");
  long i1 = sheaf_st_find(f, name);
  e->ff = cfg && cfg->d_ff ? cfg->d_ff
                           : (i1 >= 0 && sheaf_st_rank(f, (size_t)i1) == 2 ? (int)sheaf_st_shape(f, (size_t)i1)[0] : 0);
  e->heads = cfg && cfg->n_heads ? cfg->n_heads : meta_int(f, "nhead");
  e->n_layers = cfg && cfg->n_layers ? cfg->n_layers : 0;
  if (!e->n_layers) {
    for (int l = 0;; l++) {
      tname(name, sizeof name, prefix, l, "self_attn.in_proj_weight");
      if (sheaf_st_find(f, name) < 0) break;
      e->n_layers = l + 1;
    }
  }
  e->act = cfg ? cfg->act : SHEAF_ENCODER_ACT_DEFAULT;
  if (e->act == SHEAF_ENCODER_ACT_DEFAULT) {
    const char *a = meta_get(f, "activation");
    if (!a || strcmp(a, "relu") == 0) e->act = SHEAF_ENCODER_ACT_RELU;
    else if (strcmp(a, "gelu") == 0) e->act = SHEAF_ENCODER_ACT_GELU;
    else
      return sh_fail(ctx, SHEAF_ERR_UNSUPPORTED,
                     "sheaf_encoder_load: activation '%s' (metadata); expected relu or gelu", a);
  }
  if ((unsigned)e->act > SHEAF_ENCODER_ACT_GELU)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_encoder_load: cfg->act = %d", (int)e->act);
  const char *nf = meta_get(f, "norm_first");
  if (nf && (strcmp(nf, "true") == 0 || strcmp(nf, "True") == 0 || strcmp(nf, "1") == 0))
    return sh_fail(ctx, SHEAF_ERR_UNSUPPORTED,
                   "sheaf_encoder_load: norm_first (pre-LN) layers are not supported; post-LN only");
  const char *eps = meta_get(f, "layer_norm_eps");
  e->eps = cfg && cfg->eps > 0 ? cfg->eps : (eps ? (float)atof(eps) : 1e-5f);
  if (e->heads <= 0)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                   "sheaf_encoder_load: n_heads is neither in cfg nor in the metadata 'nhead'");
  if (e->d <= 0 || e->d % e->heads != 0)
    return sh_fail(ctx, SHEAF_ERR_SHAPE, "sheaf_encoder_load: d_model %d is not a multiple of n_heads %d",
                   e->d, e->heads);
  if (e->ff <= 0)
    return sh_fail(ctx, SHEAF_ERR_NOT_FOUND, "sheaf_encoder_load: d_ff unknown (no '%s')", name);
  if (e->n_layers < 1)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_encoder_load: n_layers %d", e->n_layers);
  if (e->eps <= 0 || !isfinite(e->eps))
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_encoder_load: eps %g", (double)e->eps);
  return SHEAF_OK;
}

sheaf_status sheaf_encoder_load(sheaf_ctx *ctx, const sheaf_st_file *f,
                                const sheaf_encoder_config *cfg, sheaf_encoder **out) {
  if (out) *out = NULL; /* also without a context */
  if (!ctx) return SHEAF_ERR_INVALID_ARG;
  if (!out) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_encoder_load: out is NULL");
  *out = NULL;
  if (!f) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_encoder_load: weights is NULL");
  const char *prefix = cfg && cfg->prefix ? cfg->prefix : "";
  sheaf_encoder *e = sh_calloc(ctx, 1, sizeof *e);
  if (!e) return SHEAF_ERR_NOMEM;
  e->ctx = ctx;
  sheaf_status st = resolve_config(ctx, f, cfg, e, prefix);
  if (st == SHEAF_OK) {
    e->layers = sh_calloc(ctx, (size_t)e->n_layers, sizeof *e->layers);
    size_t per = (size_t)(3 * e->d + e->d + e->ff + e->d + 4 * e->d);
    e->vecs_bytes = per * (size_t)e->n_layers * sizeof(float);
    e->vecs = sh_alloc(ctx, e->vecs_bytes, 64);
    if (!e->layers || !e->vecs) st = SHEAF_ERR_NOMEM;
  }
  if (st == SHEAF_OK) st = sh_attn_ws_create(ctx, &e->aws);
  const int64_t d = e->d, ff = e->ff;
  float *v = e->vecs;
  for (int l = 0; st == SHEAF_OK && l < e->n_layers; l++) {
    sh_enc_layer *L = &e->layers[l];
    L->b_in = v, v += 3 * d;
    L->b_out = v, v += d;
    L->b_1 = v, v += ff;
    L->b_2 = v, v += d;
    L->g1 = v, v += d;
    L->be1 = v, v += d;
    L->g2 = v, v += d;
    L->be2 = v, v += d;
    if (!st) st = load_matrix(ctx, f, prefix, l, "self_attn.in_proj_weight", 3 * d, d, &L->w_in);
    if (!st) st = load_vector(ctx, f, prefix, l, "self_attn.in_proj_bias", 3 * d, L->b_in);
    if (!st) st = load_matrix(ctx, f, prefix, l, "self_attn.out_proj.weight", d, d, &L->w_out);
    if (!st) st = load_vector(ctx, f, prefix, l, "self_attn.out_proj.bias", d, L->b_out);
    if (!st) st = load_matrix(ctx, f, prefix, l, "linear1.weight", ff, d, &L->w_1);
    if (!st) st = load_vector(ctx, f, prefix, l, "linear1.bias", ff, L->b_1);
    if (!st) st = load_matrix(ctx, f, prefix, l, "linear2.weight", d, ff, &L->w_2);
    if (!st) st = load_vector(ctx, f, prefix, l, "linear2.bias", d, L->b_2);
    if (!st) st = load_vector(ctx, f, prefix, l, "norm1.weight", d, L->g1);
    if (!st) st = load_vector(ctx, f, prefix, l, "norm1.bias", d, L->be1);
    if (!st) st = load_vector(ctx, f, prefix, l, "norm2.weight", d, L->g2);
    if (!st) st = load_vector(ctx, f, prefix, l, "norm2.bias", d, L->be2);
  }
  if (st) {
    sheaf_encoder_free(e);
    return st;
  }
  *out = e;
  return SHEAF_OK;
}

void sheaf_encoder_free(sheaf_encoder *e) {
  if (!e) return;
  sheaf_ctx *ctx = e->ctx;
  for (int l = 0; e->layers && l < e->n_layers; l++) {
    sh_gemm_packed_b_free(ctx, e->layers[l].w_in);
    sh_gemm_packed_b_free(ctx, e->layers[l].w_out);
    sh_gemm_packed_b_free(ctx, e->layers[l].w_1);
    sh_gemm_packed_b_free(ctx, e->layers[l].w_2);
  }
  if (e->layers) sh_free(ctx, e->layers, (size_t)e->n_layers * sizeof *e->layers);
  sh_free(ctx, e->vecs, e->vecs_bytes);
  sh_free(ctx, e->act_buf, e->act_bytes);
  sh_free(ctx, e->offs, e->offs_bytes);
  sh_free(ctx, e->rows, e->rows_bytes);
  sh_rlin_ws_free(ctx, &e->gws);
  sh_attn_ws_free(ctx, e->aws);
  sh_free(ctx, e, sizeof *e);
}

void sheaf_encoder_get_config(const sheaf_encoder *e, sheaf_encoder_config *cfg) {
  if (!cfg) return;
  memset(cfg, 0, sizeof *cfg);
  if (!e) return; /* NULL: all zero */
  cfg->d_model = e->d;
  cfg->n_heads = e->heads;
  cfg->d_ff = e->ff;
  cfg->n_layers = e->n_layers;
  cfg->act = e->act;
  cfg->eps = e->eps;
}

/* ------------------------------------------------------------- forward */

/* Floats of the activation workspace per token. */
static int64_t act_floats_per_token(const sheaf_encoder *e) {
  int64_t big = 3 * (int64_t)e->d > e->ff ? 3 * (int64_t)e->d : e->ff;
  return big + 2 * (int64_t)e->d + (e->n_layers > 1 ? e->d : 0);
}

static sheaf_status grow(sheaf_ctx *ctx, void **p, size_t *cap, size_t need) {
  if (*cap >= need) return SHEAF_OK;
  sh_free(ctx, *p, *cap);
  *cap = 0;
  *p = sh_alloc(ctx, need, 64);
  if (!*p) return SHEAF_ERR_NOMEM;
  *cap = need;
  return SHEAF_OK;
}

static sheaf_status check_io(sheaf_ctx *ctx, const sheaf_encoder *e, const sheaf_ragged *x,
                             const sheaf_ragged *y) {
  static const char fn[] = "sheaf_encoder_forward";
  if (!x) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: x is NULL", fn);
  if (x->dtype != SHEAF_F32 || x->rank != 2 || x->dims[0] != SHEAF_RAGGED_DIM ||
      x->dims[1] != e->d)
    return sh_fail(ctx, SHEAF_ERR_SHAPE, "%s: x must be F32 {SHEAF_RAGGED_DIM, %d}", fn, e->d);
  if (!y) return SHEAF_OK;
  if (y->dtype != SHEAF_F32 || y->rank != 2 || y->dims[0] != SHEAF_RAGGED_DIM ||
      y->dims[1] != e->d || y->batch != x->batch)
    return sh_fail(ctx, SHEAF_ERR_SHAPE, "%s: y must be F32 {SHEAF_RAGGED_DIM, %d} with x's batch %lld",
                   fn, e->d, (long long)x->batch);
  for (int64_t b = 0; b < x->batch; b++)
    if (x->lens[b] != y->lens[b])
      return sh_fail(ctx, SHEAF_ERR_SHAPE, "%s: y's lens[%lld] = %lld but x's is %lld", fn,
                     (long long)b, (long long)y->lens[b], (long long)x->lens[b]);
  const char *xs = sheaf_ragged_data(x), *ys = sheaf_ragged_data(y);
  if (xs < ys + sheaf_ragged_nbytes(y) && ys < xs + sheaf_ragged_nbytes(x))
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: y overlaps x", fn);
  return SHEAF_OK;
}

sheaf_status sheaf_encoder_forward_into(sheaf_encoder *e, const sheaf_ragged *x, sheaf_ragged *y) {
  if (!e) return SHEAF_ERR_INVALID_ARG;
  sheaf_ctx *ctx = e->ctx;
  if (!y) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_encoder_forward_into: y is NULL");
  sheaf_status st = check_io(ctx, e, x, y);
  if (st) return st;
  const int64_t d = e->d, B = x->batch, N = x->numel / d;
  const int64_t big = 3 * d > e->ff ? 3 * d : e->ff;
  bool x_packed = sh_ragged_is_packed_tokens(x), y_packed = sh_ragged_is_packed_tokens(y);
  st = grow(ctx, (void **)&e->act_buf, &e->act_bytes,
            (size_t)(N > 0 ? N : 1) * (size_t)act_floats_per_token(e) * sizeof(float));
  if (!st) st = grow(ctx, (void **)&e->offs, &e->offs_bytes, (size_t)(B + 1) * sizeof(int64_t));
  if (!st && (!x_packed || !y_packed))
    st = grow(ctx, (void **)&e->rows, &e->rows_bytes, (size_t)(2 * N + 1) * sizeof(float *));
  if (st) return st;

  e->offs[0] = 0;
  for (int64_t b = 0; b < B; b++) e->offs[b + 1] = e->offs[b] + x->lens[b];
  sh_rseq s = {B, x->lens, e->offs, N, x->max_len};
  float *qkv = e->act_buf, *hid = e->act_buf; /* the FFN hidden reuses qkv's rows */
  float *ctxb = qkv + N * big, *x1 = ctxb + N * d, *cur = x1 + N * d;
  sh_gemm_in in0 = {.base = sheaf_ragged_data(x), .ld = d};
  sh_gemm_out outF = {.base = sheaf_ragged_data(y), .ld = d};
  if (!x_packed) { /* storage-padded input: read through row pointers, no copy */
    sh_ragged_token_rows(x, e->rows);
    in0 = (sh_gemm_in){.rows = (const float *const *)e->rows};
  }
  if (!y_packed) {
    sh_ragged_token_rows(y, e->rows + N);
    outF = (sh_gemm_out){.rows = e->rows + N};
  }
  const sheaf_isa isa = sheaf_cpu_isa();
  const int act = e->act == SHEAF_ENCODER_ACT_GELU ? SH_GEMM_ACT_GELU_ERF : SH_GEMM_ACT_RELU;
  const int64_t dh = d / e->heads;
  const float scale = 1.0f / sqrtf((float)dh);
  const sh_gemm_in none = {0};
  for (int l = 0; l < e->n_layers && !st; l++) {
    const sh_enc_layer *L = &e->layers[l];
    sh_gemm_in in = l == 0 ? in0 : (sh_gemm_in){.base = cur, .ld = d};
    sh_gemm_out out = l == e->n_layers - 1 ? outF : (sh_gemm_out){.base = cur, .ld = d};
    sh_gemm_in out_in = {.rows = (const float *const *)out.rows, .base = out.base, .ld = out.ld};
    st = sh_ragged_linear(ctx, isa, 0, N, in, L->w_in, L->b_in, -1, none,
                          (sh_gemm_out){.base = qkv, .ld = 3 * d}, &e->gws);
    if (!st) st = sh_ragged_attention(ctx, isa, 0, &s, e->heads, dh, scale, qkv, 3 * d, ctxb, d, e->aws);
    if (!st) st = sh_ragged_linear(ctx, isa, 0, N, (sh_gemm_in){.base = ctxb, .ld = d}, L->w_out,
                                   L->b_out, -1, in, (sh_gemm_out){.base = x1, .ld = d}, &e->gws);
    if (!st) st = sh_ragged_layernorm(ctx, isa, 0, N, d, (sh_gemm_in){.base = x1, .ld = d}, none,
                                      L->g1, L->be1, e->eps, (sh_gemm_out){.base = x1, .ld = d});
    if (!st) st = sh_ragged_linear(ctx, isa, 0, N, (sh_gemm_in){.base = x1, .ld = d}, L->w_1, L->b_1,
                                   act, none, (sh_gemm_out){.base = hid, .ld = e->ff}, &e->gws);
    if (!st) st = sh_ragged_linear(ctx, isa, 0, N, (sh_gemm_in){.base = hid, .ld = e->ff}, L->w_2,
                                   L->b_2, -1, (sh_gemm_in){.base = x1, .ld = d}, out, &e->gws);
    if (!st) st = sh_ragged_layernorm(ctx, isa, 0, N, d, out_in, none, L->g2, L->be2, e->eps, out);
  }
  return st ? sh_fail_prefix(ctx, "sheaf_encoder_forward") : SHEAF_OK;
}

sheaf_status sheaf_encoder_forward(sheaf_encoder *e, const sheaf_ragged *x, sheaf_ragged **y) {
  if (!e) return SHEAF_ERR_INVALID_ARG;
  sheaf_ctx *ctx = e->ctx;
  if (!y) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_encoder_forward: y is NULL");
  *y = NULL;
  sheaf_status st = check_io(ctx, e, x, NULL);
  if (st) return st;
  sheaf_ragged_opts o = {x->storage_tile, x->bulk_tile};
  sheaf_ragged *r;
  st = sheaf_ragged_create(ctx, SHEAF_F32, x->batch, x->lens, 2, x->dims, &o, &r);
  if (st) return st;
  st = sheaf_encoder_forward_into(e, x, r);
  if (st) {
    sheaf_ragged_free(r);
    return st;
  }
  *y = r;
  return SHEAF_OK;
}

/* ---------------------------------------------------------------- cost */

void sh_encoder_cost(const sheaf_encoder *e, int64_t batch, const int64_t *lens, int threads,
                     sh_enc_cost *c) {
  memset(c, 0, sizeof *c);
  const double d = e->d, ff = e->ff, dh = (double)e->d / e->heads, H = e->heads;
  const double per_tok = 4 * d * d + 2 * d * ff; /* in-proj, out-proj, FFN */
  double n = 0, T = 0;
  for (int64_t b = 0; b < batch; b++) {
    double L = (double)lens[b];
    n += L;
    if (L > T) T = L;
    c->macs_useful += L * per_tok + H * 2 * L * L * dh;
    c->macs_sheaf += L * per_tok + H * sh_attn_macs_executed(lens[b], e->d / e->heads);
  }
  c->macs_padded = (double)batch * (T * per_tok + H * 2 * T * T * dh);
  c->macs_useful *= e->n_layers;
  c->macs_sheaf *= e->n_layers;
  c->macs_padded *= e->n_layers;
  /* live activations: input, output, the workspace, attention scratch */
  double per = (double)act_floats_per_token(e) + 2 * d;
  double kpad = ceil(T / SH_GEMM_NR) * SH_GEMM_NR;
  double scratch = kpad * dh + T * ceil(dh / SH_GEMM_NR) * SH_GEMM_NR + 2 * 16 * (T + 16);
  c->act_bytes_sheaf = 4 * (n * per + threads * scratch);
  /* padded: the same tensors at [batch, T] plus one [batch, heads, T, T] */
  c->act_bytes_padded = 4 * ((double)batch * T * per + (double)batch * H * T * T);
}
