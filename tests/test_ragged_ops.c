/*
 * test_ragged_ops.c — every ragged operator against a dense padded
 * reference (the batch padded to the longest length, masked, in double):
 * linear with bias / activation / residual fused (packed and storage-padded
 * operands, i.e. the padding change fused into the GEMM), attention per
 * sequence and head (lengths 1, tile-1, tile, tile+1 for the micro-kernel's
 * MR and NR tiles, one long among short ones, empty sequences; head widths
 * that are and are not multiples of the panel width), layernorm with a
 * residual. Every ISA level the host supports; 1 and 2 threads (the
 * linear layer's dynamically claimed row chunks included).
 */
#include <stdlib.h>

#include "harness.h"
#include "kernels/rows.h"
#include "ragged/ops.h"

static int n_isas(void) { return (int)sheaf_cpu_isa() + 1; }

static void frand(float *p, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = scale * ((float)((double)(seed >> 40) / (double)(1ull << 24)) - 0.5f);
  }
}

/* A token ragged tensor {RAGGED, d} with random values (padding zero). */
static sheaf_ragged *tokens(sheaf_ctx *ctx, int64_t B, const int64_t *lens, int64_t d,
                            int64_t tile, uint64_t seed) {
  int64_t dims[2] = {SHEAF_RAGGED_DIM, d};
  sheaf_ragged_opts o = {.storage_tile = tile, .bulk_tile = tile};
  sheaf_ragged *r;
  if (!CHECK_OK(ctx, sheaf_ragged_create(ctx, SHEAF_F32, B, lens, 2, dims, &o, &r))) return NULL;
  float *x = sheaf_ragged_data(r);
  for (int64_t b = 0; b < B; b++)
    frand(x + sheaf_ragged_offsets(r)[b], lens[b] * d, seed + (uint64_t)b * 7919, 2.0f);
  return r;
}

/* Operand view of a token ragged tensor: base + ld when packed, else row
 * pointers (rows must hold sum(lens) entries). */
static sh_gemm_in in_of(const sheaf_ragged *r, float **rows) {
  if (sh_ragged_is_packed_tokens(r))
    return (sh_gemm_in){.base = sheaf_ragged_data(r), .ld = sheaf_ragged_dims(r)[1]};
  sh_ragged_token_rows(r, rows);
  return (sh_gemm_in){.rows = (const float *const *)rows};
}
static sh_gemm_out out_of(sheaf_ragged *r, float **rows) {
  if (sh_ragged_is_packed_tokens(r))
    return (sh_gemm_out){.base = sheaf_ragged_data(r), .ld = sheaf_ragged_dims(r)[1]};
  sh_ragged_token_rows(r, rows);
  return (sh_gemm_out){.rows = rows};
}

/* max |got - ref| / max |ref| over the valid tokens of padded ref [B, T, d]
 * and ragged got. */
static double rel_err(const sheaf_ragged *got, const double *ref, int64_t T) {
  const int64_t B = sheaf_ragged_batch(got), d = sheaf_ragged_dims(got)[1];
  double num = 0, den = 1e-30;
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < sheaf_ragged_lens(got)[b]; i++)
      for (int64_t j = 0; j < d; j++) {
        int64_t idx[2] = {i, j};
        double g = ((const float *)sheaf_ragged_data(got))[sheaf_ragged_offset(got, b, idx)];
        double r = ref[(b * T + i) * d + j];
        if (fabs(g - r) > num) num = fabs(g - r);
        if (fabs(r) > den) den = fabs(r);
      }
  return num / den;
}

static const int64_t LENS[] = {1, 13, 14, 15, 31, 32, 33, 0, 5, 129, 2, 300, 7};
#define NL ((int64_t)(sizeof LENS / sizeof LENS[0]))

TEST(ragged_linear_matches_padded_reference) {
  sheaf_ctx *ctx = th_ctx();
  const int64_t K = 40, N = 72;
  float *w = malloc((size_t)(K * N) * 4), *bias = malloc((size_t)N * 4);
  frand(w, K * N, 11, 0.5f);
  frand(bias, N, 12, 1.0f);
  sh_gemm_packed_b *pb;
  REQUIRE_OK(ctx, sh_gemm_pack_b(ctx, w, K, K, N, SH_GEMM_PACK_TRANS, &pb)); /* w is [N, K] */
  int64_t n = 0, T = 0;
  for (int64_t b = 0; b < NL; b++) n += LENS[b], T = LENS[b] > T ? LENS[b] : T;
  float **rows = malloc((size_t)(3 * n) * sizeof *rows);
  double *ref = malloc((size_t)(NL * T * N) * sizeof *ref);
  sh_rlin_ws lws = {{NULL}};
  for (int isa = 0; isa < n_isas(); isa++)
    for (int v = 0; v < 4; v++) {
      int64_t tin = v & 1 ? 8 : 1, tout = v & 2 ? 4 : 1; /* storage padding of x / y */
      sheaf_ragged *x = tokens(ctx, NL, LENS, K, tin, 100 + (uint64_t)v);
      sheaf_ragged *res = tokens(ctx, NL, LENS, N, tout, 200);
      sheaf_ragged *y = tokens(ctx, NL, LENS, N, tout, 300);
      REQUIRE(x && res && y);
      sheaf_tensor *xp;
      REQUIRE_OK(ctx, sheaf_ragged_to_padded(ctx, x, 0, 0.0, &xp));
      const float *X = sheaf_tensor_data(xp);
      for (int64_t b = 0; b < NL; b++)
        for (int64_t i = 0; i < T; i++)
          for (int64_t o = 0; o < N; o++) {
            double s = bias[o];
            for (int64_t k = 0; k < K; k++) s += (double)X[(b * T + i) * K + k] * w[o * K + k];
            s = s > 0 ? s : 0; /* relu */
            if (i < LENS[b]) {
              int64_t idx[2] = {i, o};
              s += ((const float *)sheaf_ragged_data(res))[sheaf_ragged_offset(res, b, idx)];
            }
            ref[(b * T + i) * N + o] = s;
          }
      /* 2 threads: row chunks claimed dynamically, a workspace per thread */
      REQUIRE_OK(ctx, sh_ragged_linear(ctx, (sheaf_isa)isa, v == 3 ? 1 : 2, n, in_of(x, rows), pb,
                                       bias, SH_GEMM_ACT_RELU, in_of(res, rows + n),
                                       out_of(y, rows + 2 * n), v == 1 ? &lws : NULL));
      double e = rel_err(y, ref, T);
      if (!CHECK(e < 1e-5))
        fprintf(stderr, "  isa %d tiles %lld/%lld: rel err %.3g\n", isa, (long long)tin,
                (long long)tout, e);
      sheaf_tensor_free(xp);
      sheaf_ragged_free(x);
      sheaf_ragged_free(res);
      sheaf_ragged_free(y);
    }
  sh_rlin_ws_free(ctx, &lws);
  sh_gemm_packed_b_free(ctx, pb);
  free(w), free(bias), free(rows), free(ref);
}

/* Masked attention on the padded batch, in double. qkv: [B, T, 3d]. */
static void attention_ref(const float *qkv, int64_t B, int64_t T, int heads, int64_t dh,
                          const int64_t *lens, double *out) {
  const int64_t d = heads * dh;
  double *p = malloc((size_t)(T > 0 ? T : 1) * sizeof *p);
  for (int64_t b = 0; b < B; b++)
    for (int h = 0; h < heads; h++)
      for (int64_t i = 0; i < T; i++) {
        const float *q = qkv + (b * T + i) * 3 * d + h * dh;
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < T; j++) {
          const float *k = qkv + (b * T + j) * 3 * d + d + h * dh;
          double s = 0;
          for (int64_t c = 0; c < dh; c++) s += (double)q[c] * k[c];
          p[j] = j < lens[b] ? s / sqrt((double)dh) : -INFINITY; /* key padding mask */
          if (p[j] > mx) mx = p[j];
        }
        for (int64_t j = 0; j < T; j++) sum += p[j] = j < lens[b] ? exp(p[j] - mx) : 0;
        for (int64_t c = 0; c < dh; c++) {
          double s = 0;
          for (int64_t j = 0; j < lens[b]; j++)
            s += p[j] / sum * qkv[(b * T + j) * 3 * d + 2 * d + h * dh + c];
          out[(b * T + i) * d + h * dh + c] = s;
        }
      }
  free(p);
}

static void check_attention(sheaf_ctx *ctx, const int64_t *lens, int64_t B, int heads, int64_t dh,
                            int threads) {
  const int64_t d = heads * dh;
  int64_t T = 0, n = 0;
  for (int64_t b = 0; b < B; b++) T = lens[b] > T ? lens[b] : T, n += lens[b];
  sheaf_ragged *qkv = tokens(ctx, B, lens, 3 * d, 1, 7 + (uint64_t)dh);
  REQUIRE(qkv);
  sheaf_tensor *qp;
  REQUIRE_OK(ctx, sheaf_ragged_to_padded(ctx, qkv, 0, 0.0, &qp));
  double *ref = calloc((size_t)(B * T * d + 1), sizeof *ref);
  attention_ref(sheaf_tensor_data(qp), B, T, heads, dh, lens, ref);
  int64_t *off = malloc((size_t)(B + 1) * sizeof *off);
  off[0] = 0;
  for (int64_t b = 0; b < B; b++) off[b + 1] = off[b] + lens[b];
  sh_rseq s = {B, lens, off, n, T};
  sh_attn_ws *ws;
  REQUIRE_OK(ctx, sh_attn_ws_create(ctx, &ws));
  for (int isa = 0; isa < n_isas(); isa++) {
    sheaf_ragged *out = tokens(ctx, B, lens, d, 1, 99);
    REQUIRE(out);
    REQUIRE_OK(ctx, sh_ragged_attention(ctx, (sheaf_isa)isa, threads, &s, heads, dh,
                                        1.0f / sqrtf((float)dh), sheaf_ragged_data(qkv), 3 * d,
                                        sheaf_ragged_data(out), d, ws));
    double e = rel_err(out, ref, T);
    if (!CHECK(e < 2e-6))
      fprintf(stderr, "  isa %d heads %d dh %lld threads %d: rel err %.3g\n", isa, heads,
              (long long)dh, threads, e);
    sheaf_ragged_free(out);
  }
  sh_attn_ws_free(ctx, ws);
  free(off), free(ref);
  sheaf_tensor_free(qp);
  sheaf_ragged_free(qkv);
}

TEST(ragged_attention_matches_masked_padded_reference) {
  sheaf_ctx *ctx = th_ctx();
  check_attention(ctx, LENS, NL, 2, 64, 2);  /* V read in place */
  check_attention(ctx, LENS, NL, 3, 16, 1);  /* V packed (dh < panel) */
  check_attention(ctx, LENS, NL, 1, 48, 2);  /* V packed, two panels */
}

TEST(ragged_attention_one_long_among_short) {
  sheaf_ctx *ctx = th_ctx();
  int64_t lens[9] = {3, 2, 1, 4, 513, 2, 5, 1, 3};
  check_attention(ctx, lens, 9, 2, 32, 2);
  int64_t one[1] = {1};
  check_attention(ctx, one, 1, 4, 32, 2);
  int64_t empty[2] = {0, 0};
  check_attention(ctx, empty, 2, 2, 32, 2); /* nothing to do, nothing written */
}

TEST(ragged_layernorm_matches_padded_reference) {
  sheaf_ctx *ctx = th_ctx();
  const int64_t d = 96;
  int64_t n = 0, T = 0;
  for (int64_t b = 0; b < NL; b++) n += LENS[b], T = LENS[b] > T ? LENS[b] : T;
  float g[96], be[96];
  frand(g, d, 5, 1.0f);
  frand(be, d, 6, 1.0f);
  float **rows = malloc((size_t)(3 * n) * sizeof *rows);
  double *ref = calloc((size_t)(NL * T * d), sizeof *ref);
  for (int isa = 0; isa < n_isas(); isa++)
    for (int tile = 1; tile <= 8; tile *= 8) {
      sheaf_ragged *x = tokens(ctx, NL, LENS, d, tile, 1), *r = tokens(ctx, NL, LENS, d, 1, 2);
      sheaf_ragged *y = tokens(ctx, NL, LENS, d, 1, 3);
      REQUIRE(x && r && y);
      sheaf_tensor *xp, *rp;
      REQUIRE_OK(ctx, sheaf_ragged_to_padded(ctx, x, 0, 0.0, &xp));
      REQUIRE_OK(ctx, sheaf_ragged_to_padded(ctx, r, 0, 0.0, &rp));
      const float *X = sheaf_tensor_data(xp), *R = sheaf_tensor_data(rp);
      for (int64_t t = 0; t < NL * T; t++) {
        double mean = 0, var = 0;
        for (int64_t j = 0; j < d; j++) mean += (double)X[t * d + j] + R[t * d + j];
        mean /= (double)d;
        for (int64_t j = 0; j < d; j++) {
          double v = (double)X[t * d + j] + R[t * d + j] - mean;
          var += v * v;
        }
        var /= (double)d;
        for (int64_t j = 0; j < d; j++)
          ref[t * d + j] = ((double)X[t * d + j] + R[t * d + j] - mean) / sqrt(var + 1e-5) * g[j] + be[j];
      }
      REQUIRE_OK(ctx, sh_ragged_layernorm(ctx, (sheaf_isa)isa, 2, n, d, in_of(x, rows),
                                          in_of(r, rows + n), g, be, 1e-5f, out_of(y, rows + 2 * n)));
      double e = rel_err(y, ref, T);
      if (!CHECK(e < 1e-5)) fprintf(stderr, "  isa %d tile %d: rel err %.3g\n", isa, tile, e);
      sheaf_tensor_free(xp), sheaf_tensor_free(rp);
      sheaf_ragged_free(x), sheaf_ragged_free(r), sheaf_ragged_free(y);
    }
  free(rows), free(ref);
}
