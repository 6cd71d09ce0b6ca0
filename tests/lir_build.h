/*
 * lir_build.h — loop-IR kernels built by hand for the codegen tests and the
 * codegen bench (the front end will produce the same IR from `kernel`
 * sources): matmul (and matmul + bias + GELU), row softmax, layernorm,
 * ragged attention scores and ragged per-sequence sums. Each returns NULL
 * (ctx's last error set) on failure.
 */
#ifndef SHEAF_TESTS_LIR_BUILD_H
#define SHEAF_TESTS_LIR_BUILD_H

#include <math.h>

#include "codegen/lir.h"

static inline sh_lir_kernel *lb_done(sh_lir_kernel *k) {
  if (k && sh_lir_status(k) != SHEAF_OK) {
    sh_lir_free(k);
    return NULL;
  }
  return k;
}

/* C[M,N] = A[M,K] · B[K,N] (B a weight). With `epilogue`, C is a temporary
 * and Y = gelu(Z), Z = C + bias (two more nests, temporaries to inline). */
static inline sh_lir_kernel *lb_matmul(sheaf_ctx *ctx, const char *name, bool epilogue) {
  sh_lir_kernel *k;
  if (sh_lir_create(ctx, name, &k)) return NULL;
  sh_lir_expr M = sh_lir_sz(k, sh_lir_size(k, "M")), N = sh_lir_sz(k, sh_lir_size(k, "N")),
              K = sh_lir_sz(k, sh_lir_size(k, "K"));
  sh_lir_buf A = sh_lir_buffer(k, "A", SH_LIR_F32, SH_LIR_IN, 2, (sh_lir_expr[]){M, K});
  sh_lir_buf B = sh_lir_buffer(k, "B", SH_LIR_F32, SH_LIR_IN, 2, (sh_lir_expr[]){K, N});
  sh_lir_buffer_weight(k, B);
  sh_lir_buf bias = SH_LIR_NONE, Y = SH_LIR_NONE, Z = SH_LIR_NONE;
  if (epilogue) {
    bias = sh_lir_buffer(k, "bias", SH_LIR_F32, SH_LIR_IN, 1, &N);
    Y = sh_lir_buffer(k, "Y", SH_LIR_F32, SH_LIR_OUT, 2, (sh_lir_expr[]){M, N});
  }
  sh_lir_buf C = sh_lir_buffer(k, "C", SH_LIR_F32, epilogue ? SH_LIR_TEMP : SH_LIR_OUT, 2,
                               (sh_lir_expr[]){M, N});
  if (epilogue) Z = sh_lir_buffer(k, "Z", SH_LIR_F32, SH_LIR_TEMP, 2, (sh_lir_expr[]){M, N});
  sh_lir_stmt i = sh_lir_loop(k, sh_lir_root(k), "i", M);
  sh_lir_stmt j = sh_lir_loop(k, i, "j", N);
  sh_lir_store2(k, j, C, sh_lir_lv(k, i), sh_lir_lv(k, j), sh_lir_flt(k, 0), SH_LIR_COMBINE_NONE);
  sh_lir_stmt kk = sh_lir_loop(k, j, "k", K);
  sh_lir_expr prod = sh_lir_mul(k, sh_lir_load2(k, A, sh_lir_lv(k, i), sh_lir_lv(k, kk)),
                                sh_lir_load2(k, B, sh_lir_lv(k, kk), sh_lir_lv(k, j)));
  sh_lir_store2(k, kk, C, sh_lir_lv(k, i), sh_lir_lv(k, j), prod, SH_LIR_COMBINE_ADD);
  if (epilogue) {
    sh_lir_stmt i2 = sh_lir_loop(k, sh_lir_root(k), "i", M);
    sh_lir_stmt j2 = sh_lir_loop(k, i2, "j", N);
    sh_lir_expr vi = sh_lir_lv(k, i2), vj = sh_lir_lv(k, j2);
    sh_lir_store2(k, j2, Z, vi, vj, sh_lir_add(k, sh_lir_load2(k, C, vi, vj), sh_lir_load1(k, bias, vj)),
                  SH_LIR_COMBINE_NONE);
    sh_lir_stmt i3 = sh_lir_loop(k, sh_lir_root(k), "i", M);
    sh_lir_stmt j3 = sh_lir_loop(k, i3, "j", N);
    vi = sh_lir_lv(k, i3);
    vj = sh_lir_lv(k, j3);
    sh_lir_store2(k, j3, Y, vi, vj, sh_lir_un(k, SH_LIR_FN_GELU, sh_lir_load2(k, Z, vi, vj)),
                  SH_LIR_COMBINE_NONE);
  }
  return lb_done(k);
}

/* y[i, :] = softmax(x[i, :]) (max, exp and sum, divide). */
static inline sh_lir_kernel *lb_softmax(sheaf_ctx *ctx, const char *name) {
  sh_lir_kernel *k;
  if (sh_lir_create(ctx, name, &k)) return NULL;
  sh_lir_expr M = sh_lir_sz(k, sh_lir_size(k, "M")), N = sh_lir_sz(k, sh_lir_size(k, "N"));
  sh_lir_buf x = sh_lir_buffer(k, "x", SH_LIR_F32, SH_LIR_IN, 2, (sh_lir_expr[]){M, N});
  sh_lir_buf y = sh_lir_buffer(k, "y", SH_LIR_F32, SH_LIR_OUT, 2, (sh_lir_expr[]){M, N});
  sh_lir_buf mx = sh_lir_buffer(k, "mx", SH_LIR_F32, SH_LIR_TEMP, 1, &M);
  sh_lir_buf sm = sh_lir_buffer(k, "sm", SH_LIR_F32, SH_LIR_TEMP, 1, &M);
  sh_lir_stmt i = sh_lir_loop(k, sh_lir_root(k), "i", M);
  sh_lir_expr vi = sh_lir_lv(k, i);
  sh_lir_store1(k, i, mx, vi, sh_lir_flt(k, -INFINITY), SH_LIR_COMBINE_NONE);
  sh_lir_stmt j1 = sh_lir_loop(k, i, "j", N);
  sh_lir_store1(k, j1, mx, vi, sh_lir_load2(k, x, vi, sh_lir_lv(k, j1)), SH_LIR_COMBINE_MAX);
  sh_lir_store1(k, i, sm, vi, sh_lir_flt(k, 0), SH_LIR_COMBINE_NONE);
  sh_lir_stmt j2 = sh_lir_loop(k, i, "j", N);
  sh_lir_expr vj = sh_lir_lv(k, j2);
  sh_lir_store2(k, j2, y, vi, vj,
                sh_lir_un(k, SH_LIR_FN_EXP, sh_lir_sub(k, sh_lir_load2(k, x, vi, vj), sh_lir_load1(k, mx, vi))),
                SH_LIR_COMBINE_NONE);
  sh_lir_store1(k, j2, sm, vi, sh_lir_load2(k, y, vi, vj), SH_LIR_COMBINE_ADD);
  sh_lir_stmt j3 = sh_lir_loop(k, i, "j", N);
  vj = sh_lir_lv(k, j3);
  sh_lir_store2(k, j3, y, vi, vj,
                sh_lir_bin(k, SH_LIR_OP_DIV, sh_lir_load2(k, y, vi, vj), sh_lir_load1(k, sm, vi)),
                SH_LIR_COMBINE_NONE);
  return lb_done(k);
}

/* y = (x - mean) · rsqrt(var + eps) · g + b over each row (two passes). */
static inline sh_lir_kernel *lb_layernorm(sheaf_ctx *ctx, const char *name, float eps) {
  sh_lir_kernel *k;
  if (sh_lir_create(ctx, name, &k)) return NULL;
  sh_lir_expr M = sh_lir_sz(k, sh_lir_size(k, "M")), N = sh_lir_sz(k, sh_lir_size(k, "N"));
  sh_lir_buf x = sh_lir_buffer(k, "x", SH_LIR_F32, SH_LIR_IN, 2, (sh_lir_expr[]){M, N});
  sh_lir_buf g = sh_lir_buffer(k, "g", SH_LIR_F32, SH_LIR_IN, 1, &N);
  sh_lir_buf b = sh_lir_buffer(k, "b", SH_LIR_F32, SH_LIR_IN, 1, &N);
  sh_lir_buf y = sh_lir_buffer(k, "y", SH_LIR_F32, SH_LIR_OUT, 2, (sh_lir_expr[]){M, N});
  sh_lir_buf mu = sh_lir_buffer(k, "mu", SH_LIR_F32, SH_LIR_TEMP, 1, &M);
  sh_lir_buf rs = sh_lir_buffer(k, "rs", SH_LIR_F32, SH_LIR_TEMP, 1, &M);
  sh_lir_stmt i = sh_lir_loop(k, sh_lir_root(k), "i", M);
  sh_lir_expr vi = sh_lir_lv(k, i), fN = sh_lir_cast(k, N);
  sh_lir_store1(k, i, mu, vi, sh_lir_flt(k, 0), SH_LIR_COMBINE_NONE);
  sh_lir_stmt j1 = sh_lir_loop(k, i, "j", N);
  sh_lir_store1(k, j1, mu, vi, sh_lir_load2(k, x, vi, sh_lir_lv(k, j1)), SH_LIR_COMBINE_ADD);
  sh_lir_store1(k, i, mu, vi, sh_lir_bin(k, SH_LIR_OP_DIV, sh_lir_load1(k, mu, vi), fN),
                SH_LIR_COMBINE_NONE);
  sh_lir_store1(k, i, rs, vi, sh_lir_flt(k, 0), SH_LIR_COMBINE_NONE);
  sh_lir_stmt j2 = sh_lir_loop(k, i, "j", N);
  sh_lir_expr d = sh_lir_sub(k, sh_lir_load2(k, x, vi, sh_lir_lv(k, j2)), sh_lir_load1(k, mu, vi));
  sh_lir_store1(k, j2, rs, vi, sh_lir_mul(k, d, d), SH_LIR_COMBINE_ADD);
  sh_lir_store1(k, i, rs, vi,
                sh_lir_un(k, SH_LIR_FN_RSQRT,
                          sh_lir_add(k, sh_lir_bin(k, SH_LIR_OP_DIV, sh_lir_load1(k, rs, vi), fN),
                                     sh_lir_flt(k, eps))),
                SH_LIR_COMBINE_NONE);
  sh_lir_stmt j3 = sh_lir_loop(k, i, "j", N);
  sh_lir_expr vj = sh_lir_lv(k, j3);
  sh_lir_expr nrm = sh_lir_mul(k, sh_lir_sub(k, sh_lir_load2(k, x, vi, vj), sh_lir_load1(k, mu, vi)),
                               sh_lir_load1(k, rs, vi));
  sh_lir_store2(k, j3, y, vi, vj,
                sh_lir_add(k, sh_lir_mul(k, nrm, sh_lir_load1(k, g, vj)), sh_lir_load1(k, b, vj)),
                SH_LIR_COMBINE_NONE);
  return lb_done(k);
}

/* Ragged attention scores: S[b, i, j] = scale · Σ_d Q[b, i, d]·Kt[b, j, d]
 * for i, j < len[b]; Q and Kt [B, len, D] at offsets qoff (in elements), S
 * [B, len, len] at soff. */
static inline sh_lir_kernel *lb_ragged_scores(sheaf_ctx *ctx, const char *name, float scale) {
  sh_lir_kernel *k;
  if (sh_lir_create(ctx, name, &k)) return NULL;
  sh_lir_expr B = sh_lir_sz(k, sh_lir_size(k, "B")), D = sh_lir_sz(k, sh_lir_size(k, "D"));
  sh_lir_expr one = sh_lir_int(k, 1);
  sh_lir_buf len = sh_lir_buffer(k, "len", SH_LIR_I32, SH_LIR_IN, 1, &B);
  sh_lir_buf qoff = sh_lir_buffer(k, "qoff", SH_LIR_I32, SH_LIR_IN, 1, &B);
  sh_lir_buf soff = sh_lir_buffer(k, "soff", SH_LIR_I32, SH_LIR_IN, 1, &B);
  sh_lir_buf Q = sh_lir_buffer(k, "Q", SH_LIR_F32, SH_LIR_IN, 3, (sh_lir_expr[]){B, one, D});
  sh_lir_buf Kt = sh_lir_buffer(k, "Kt", SH_LIR_F32, SH_LIR_IN, 3, (sh_lir_expr[]){B, one, D});
  sh_lir_buf S = sh_lir_buffer(k, "S", SH_LIR_F32, SH_LIR_OUT, 3, (sh_lir_expr[]){B, one, one});
  sh_lir_buffer_ragged(k, Q, 2u, len, qoff);
  sh_lir_buffer_ragged(k, Kt, 2u, len, qoff);
  sh_lir_buffer_ragged(k, S, 6u, len, soff);
  sh_lir_stmt b = sh_lir_loop(k, sh_lir_root(k), "b", B);
  sh_lir_expr vb = sh_lir_lv(k, b), L = sh_lir_load1(k, len, vb);
  sh_lir_stmt i = sh_lir_loop(k, b, "i", L);
  sh_lir_stmt j = sh_lir_loop(k, i, "j", L);
  sh_lir_expr idx[3] = {vb, sh_lir_lv(k, i), sh_lir_lv(k, j)};
  sh_lir_store(k, j, S, 3, idx, sh_lir_flt(k, 0), SH_LIR_COMBINE_NONE);
  sh_lir_stmt d = sh_lir_loop(k, j, "d", D);
  sh_lir_expr vd = sh_lir_lv(k, d);
  sh_lir_expr prod = sh_lir_mul(k, sh_lir_load3(k, Q, vb, idx[1], vd), sh_lir_load3(k, Kt, vb, idx[2], vd));
  sh_lir_store(k, d, S, 3, idx, prod, SH_LIR_COMBINE_ADD);
  sh_lir_store(k, j, S, 3, idx, sh_lir_flt(k, scale), SH_LIR_COMBINE_MUL);
  return lb_done(k);
}

/* s[b, d] = Σ_{l < len[b]} x[b, l, d] (x ragged [B, len, D] at xoff): zero the
 * row, then add the tokens one by one (the d loops are stride-1). */
static inline sh_lir_kernel *lb_ragged_sums(sheaf_ctx *ctx, const char *name) {
  sh_lir_kernel *k;
  if (sh_lir_create(ctx, name, &k)) return NULL;
  sh_lir_expr B = sh_lir_sz(k, sh_lir_size(k, "B")), D = sh_lir_sz(k, sh_lir_size(k, "D"));
  sh_lir_buf len = sh_lir_buffer(k, "len", SH_LIR_I32, SH_LIR_IN, 1, &B);
  sh_lir_buf xoff = sh_lir_buffer(k, "xoff", SH_LIR_I32, SH_LIR_IN, 1, &B);
  sh_lir_buf x = sh_lir_buffer(k, "x", SH_LIR_F32, SH_LIR_IN, 3, (sh_lir_expr[]){B, sh_lir_int(k, 1), D});
  sh_lir_buf s = sh_lir_buffer(k, "s", SH_LIR_F32, SH_LIR_OUT, 2, (sh_lir_expr[]){B, D});
  sh_lir_buffer_ragged(k, x, 2u, len, xoff);
  sh_lir_stmt b = sh_lir_loop(k, sh_lir_root(k), "b", B);
  sh_lir_expr vb = sh_lir_lv(k, b);
  sh_lir_stmt d0 = sh_lir_loop(k, b, "d", D);
  sh_lir_store2(k, d0, s, vb, sh_lir_lv(k, d0), sh_lir_flt(k, 0), SH_LIR_COMBINE_NONE);
  sh_lir_stmt l = sh_lir_loop(k, b, "l", sh_lir_load1(k, len, vb));
  sh_lir_stmt d = sh_lir_loop(k, l, "d", D);
  sh_lir_expr vd = sh_lir_lv(k, d);
  sh_lir_store2(k, d, s, vb, vd, sh_lir_load3(k, x, vb, sh_lir_lv(k, l), vd), SH_LIR_COMBINE_ADD);
  return lb_done(k);
}

#endif
