/*
 * gemm_avx2.c — AVX2+FMA level of the GEMM: a 6×16 micro-kernel run twice
 * per 32-column panel for 5 and 6 rows (12 ymm accumulators: the 16
 * registers allow no more; B prefetched ahead), single-pass 2×32 and 3×32
 * kernels for 2 to 4 rows, a single-pass 1×32 kernel for GEMV-like rows,
 * one 16-column pass for a panel's first 16 columns alone, masked column
 * tails; the A packer (8×8 transposes); the
 * LSTM / GRU tails with the accurate vmath; and the
 * vectorized epilogue (8 columns per ymm, lane masks for column ranges and
 * tails, masked loads/stores so caller arrays are never over-read). The
 * AVX-512 level has its own single-pass epilogue (gemm_avx512.c).
 */
#include "kernels/gemm.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#include "kernels/vmath.h"
#include "kernels/vmath_avx2.h"

#define AVX2_FN __attribute__((target("avx2,fma")))

/* Software prefetch distance of B, in k rows (PF_K × 128 bytes ahead):
 * measured on Zen 3, 32 beat 8 and 16 at M = 15 to 39, K = 768. B is
 * padded to whole panels, and a prefetch past the end does not fault. */
#ifndef SH_GEMM_AVX2_PF_K
#define SH_GEMM_AVX2_PF_K 32
#endif
#define PF_K SH_GEMM_AVX2_PF_K

static inline AVX2_FN __m256i lane_mask(int64_t lo, int64_t hi) {
  /* lanes j with lo <= j < hi (lo, hi relative to this vector) */
  __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  lo = lo < -1 ? -1 : (lo > 8 ? 8 : lo);
  hi = hi < 0 ? 0 : (hi > 8 ? 8 : hi);
  __m256i ge = _mm256_cmpgt_epi32(idx, _mm256_set1_epi32((int)lo - 1));
  __m256i lt = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)hi), idx);
  return _mm256_and_si256(ge, lt);
}

static inline AVX2_FN __attribute__((always_inline)) void ukr(const int MR, int64_t cols,
                                                              int64_t kc, const float *a,
                                                              const float *b, int64_t ldb,
                                                              float *const *c, int64_t coff,
                                                              bool accumulate) {
  __m256 acc0[6], acc1[6];
  _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) acc0[r] = acc1[r] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k < kc; k++) {
    __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
    /* this pass's B line PF_K rows ahead: the hardware prefetcher does
     * not keep up with the 128-byte stride, and a miss per k stalled the
     * loads of B (a 39 × 768 × 1024 LSTM product: 38 → 64 GFLOP/s) */
    _mm_prefetch((const char *)(b + PF_K * ldb), _MM_HINT_T0);
    _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {
      __m256 av = _mm256_broadcast_ss(a + r);
      acc0[r] = _mm256_fmadd_ps(av, b0, acc0[r]);
      acc1[r] = _mm256_fmadd_ps(av, b1, acc1[r]);
    }
    a += MR;
    b += ldb;
  }
  if (cols == 16) {
    _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {
      float *cr = c[r] + coff;
      if (accumulate) {
        acc0[r] = _mm256_add_ps(acc0[r], _mm256_loadu_ps(cr));
        acc1[r] = _mm256_add_ps(acc1[r], _mm256_loadu_ps(cr + 8));
      }
      _mm256_storeu_ps(cr, acc0[r]);
      _mm256_storeu_ps(cr + 8, acc1[r]);
    }
  } else {
    __m256i m0 = lane_mask(0, cols), m1 = lane_mask(0, cols - 8);
    _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {
      float *cr = c[r] + coff;
      if (accumulate) {
        acc0[r] = _mm256_add_ps(acc0[r], _mm256_maskload_ps(cr, m0));
        acc1[r] = _mm256_add_ps(acc1[r], _mm256_maskload_ps(cr + 8, m1));
      }
      _mm256_maskstore_ps(cr, m0, acc0[r]);
      _mm256_maskstore_ps(cr + 8, m1, acc1[r]);
    }
  }
}

/* 2 or 3 rows × 32 columns in one pass over the panel: 8 or 12
 * accumulators (a 16-column pass would keep only 4 or 6, fewer than the 2
 * FMA ports × 4 cycles of latency need), and each B row's two cache lines
 * read together. A's rows sit `lda` floats apart per k (a 4-row packed
 * micro-panel runs as two 2-row halves). */
static inline AVX2_FN __attribute__((always_inline)) void ukr_n32(const int MR, int64_t cols,
                                                                  int64_t kc, const float *a,
                                                                  int64_t lda, const float *b,
                                                                  int64_t ldb, float *const *c,
                                                                  bool accumulate) {
  __m256 acc[3][4];
  _Pragma("GCC unroll 4") for (int r = 0; r < MR; r++)
    _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) acc[r][q] = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; k++) {
    __m256 av[3];
    _Pragma("GCC unroll 4") for (int r = 0; r < MR; r++) av[r] = _mm256_broadcast_ss(a + r);
    _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) {
      __m256 bq = _mm256_load_ps(b + 8 * q);
      _Pragma("GCC unroll 4") for (int r = 0; r < MR; r++)
        acc[r][q] = _mm256_fmadd_ps(av[r], bq, acc[r][q]);
    }
    a += lda;
    b += ldb;
  }
  _Pragma("GCC unroll 4") for (int r = 0; r < MR; r++) {
    float *cr = c[r];
    _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) {
      __m256 v = acc[r][q];
      if (cols - 8 * q >= 8) {
        if (accumulate) v = _mm256_add_ps(v, _mm256_loadu_ps(cr + 8 * q));
        _mm256_storeu_ps(cr + 8 * q, v);
      } else if (cols > 8 * q) {
        __m256i m = lane_mask(0, cols - 8 * q);
        if (accumulate) v = _mm256_add_ps(v, _mm256_maskload_ps(cr + 8 * q, m));
        _mm256_maskstore_ps(cr + 8 * q, m, v);
      }
    }
  }
}

/* K rows per block of the 4-row kernel: the block's B rows (16 KB) stay in
 * L1 between its two 2-row halves. */
#define K4_BLOCK 128

/* 4 rows × 32 columns: two 2×32 halves (16 accumulators would not leave
 * registers for B and A), interleaved by blocks of K4_BLOCK k so that the
 * second half reads the block's B rows from L1. Run one after the other over
 * the whole panel, each half streamed all of B (kc × 128 bytes, from L2 or
 * L3 in a GEMV-like call): a 4-row micro-panel cost as much as a 5-row one.
 * The halves keep their partial sums in a 4 × 32 stack tile between blocks. */
static AVX2_FN void ukr_4x32(int64_t cols, int64_t kc, const float *a, const float *b,
                             int64_t ldb, float *const *c, bool accumulate) {
  if (kc <= K4_BLOCK) {
    ukr_n32(2, cols, kc, a, 4, b, ldb, c, accumulate);
    ukr_n32(2, cols, kc, a + 2, 4, b, ldb, c + 2, accumulate);
    return;
  }
  _Alignas(32) float t[4][SH_GEMM_NR];
  float *const tr[4] = {t[0], t[1], t[2], t[3]};
  for (int64_t k0 = 0; k0 < kc; k0 += K4_BLOCK) {
    int64_t kb = kc - k0 < K4_BLOCK ? kc - k0 : K4_BLOCK;
    ukr_n32(2, SH_GEMM_NR, kb, a + 4 * k0, 4, b + k0 * ldb, ldb, tr, k0 > 0);
    ukr_n32(2, SH_GEMM_NR, kb, a + 4 * k0 + 2, 4, b + k0 * ldb, ldb, tr + 2, k0 > 0);
  }
  for (int r = 0; r < 4; r++) {
    float *cr = c[r];
    for (int q = 0; q * 8 < cols; q++) {
      __m256 v = _mm256_load_ps(t[r] + 8 * q);
      if (cols - 8 * q >= 8) {
        if (accumulate) v = _mm256_add_ps(v, _mm256_loadu_ps(cr + 8 * q));
        _mm256_storeu_ps(cr + 8 * q, v);
      } else {
        __m256i m = lane_mask(0, cols - 8 * q);
        if (accumulate) v = _mm256_add_ps(v, _mm256_maskload_ps(cr + 8 * q, m));
        _mm256_maskstore_ps(cr + 8 * q, m, v);
      }
    }
  }
}

/* One row in a single pass over the panel (GEMV-like M = 1:
 * bandwidth-bound, so each B line is read once), two chains per vector;
 * NV vectors of 8 columns (2 when at most 16 columns are wanted). */
static inline AVX2_FN __attribute__((always_inline)) void ukr_1xn(const int NV, int64_t cols,
                                                                  int64_t kc, const float *a,
                                                                  const float *b, int64_t ldb,
                                                                  float *const *c,
                                                                  bool accumulate) {
  __m256 x[4], y[4];
  _Pragma("GCC unroll 4") for (int q = 0; q < NV; q++) x[q] = y[q] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 2 <= kc; k += 2) {
    __m256 a0 = _mm256_broadcast_ss(a + k), a1 = _mm256_broadcast_ss(a + k + 1);
    _Pragma("GCC unroll 4") for (int q = 0; q < NV; q++) {
      x[q] = _mm256_fmadd_ps(a0, _mm256_load_ps(b + 8 * q), x[q]);
      y[q] = _mm256_fmadd_ps(a1, _mm256_load_ps(b + ldb + 8 * q), y[q]);
    }
    b += 2 * ldb;
  }
  if (k < kc) {
    __m256 a0 = _mm256_broadcast_ss(a + k);
    _Pragma("GCC unroll 4") for (int q = 0; q < NV; q++) x[q] = _mm256_fmadd_ps(a0, _mm256_load_ps(b + 8 * q), x[q]);
  }
  float *cr = c[0];
  _Pragma("GCC unroll 4") for (int q = 0; q < NV; q++) {
    __m256 v = _mm256_add_ps(x[q], y[q]);
    __m256i m = lane_mask(0, cols - 8 * q);
    if (cols - 8 * q >= 8) {
      if (accumulate) v = _mm256_add_ps(v, _mm256_loadu_ps(cr + 8 * q));
      _mm256_storeu_ps(cr + 8 * q, v);
    } else if (cols > 8 * q) {
      if (accumulate) v = _mm256_add_ps(v, _mm256_maskload_ps(cr + 8 * q, m));
      _mm256_maskstore_ps(cr + 8 * q, m, v);
    }
  }
}

/* At most 8 columns (a narrow product's only panel: the parser's scorer,
 * N = 3; a classifier head, N = 5): MR rows of one 8-column vector, each B
 * row one load of the panel's first 32 bytes (a quarter of its lines: the
 * rest is padding), two accumulators per row over even / odd k. A 16-column
 * pass did twice the FMAs and streamed all four lines of every B row. */
static inline AVX2_FN __attribute__((always_inline)) void ukr_x8(const int MR, int64_t cols,
                                                                 int64_t kc, const float *a,
                                                                 const float *b, int64_t ldb,
                                                                 float *const *c,
                                                                 bool accumulate) {
  __m256 x[6], y[6];
  _Pragma("GCC unroll 6") for (int r = 0; r < MR; r++) x[r] = y[r] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 2 <= kc; k += 2) {
    __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + ldb);
    _Pragma("GCC unroll 6") for (int r = 0; r < MR; r++) {
      x[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(a + r), b0, x[r]);
      y[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(a + MR + r), b1, y[r]);
    }
    a += 2 * MR;
    b += 2 * ldb;
  }
  if (k < kc) {
    __m256 b0 = _mm256_load_ps(b);
    _Pragma("GCC unroll 6") for (int r = 0; r < MR; r++)
      x[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(a + r), b0, x[r]);
  }
  __m256i m = lane_mask(0, cols);
  _Pragma("GCC unroll 6") for (int r = 0; r < MR; r++) {
    __m256 v = _mm256_add_ps(x[r], y[r]);
    if (cols == 8) {
      if (accumulate) v = _mm256_add_ps(v, _mm256_loadu_ps(c[r]));
      _mm256_storeu_ps(c[r], v);
    } else {
      if (accumulate) v = _mm256_add_ps(v, _mm256_maskload_ps(c[r], m));
      _mm256_maskstore_ps(c[r], m, v);
    }
  }
}

#define UKR_CASE(n)                                                              \
  case n:                                                                        \
    ukr(n, cols < 16 ? cols : 16, kc, a, b, ldb, c, 0, accumulate);              \
    if (cols > 16) ukr(n, cols - 16, kc, a, b + 16, ldb, c, 16, accumulate);     \
    break;

/* Rows 1 to 4 take one pass over the panel (a 4-row micro-panel as two
 * 2-row halves), rows 5 and 6 two passes of 16 columns; at most 16
 * columns (a narrow product's only panel, e.g. N = 3) take one 16-column
 * pass. */
AVX2_FN void sh_f32_gemm_ukernel_6x16x2__avx2(int64_t rows, int64_t cols, int64_t kc,
                                              const float *a, const float *b, int64_t ldb,
                                              float *const *c, bool accumulate) {
  if (cols <= 8) {
    switch (rows) {
    case 1: ukr_x8(1, cols, kc, a, b, ldb, c, accumulate); break;
    case 2: ukr_x8(2, cols, kc, a, b, ldb, c, accumulate); break;
    case 3: ukr_x8(3, cols, kc, a, b, ldb, c, accumulate); break;
    case 4: ukr_x8(4, cols, kc, a, b, ldb, c, accumulate); break;
    case 5: ukr_x8(5, cols, kc, a, b, ldb, c, accumulate); break;
    case 6: ukr_x8(6, cols, kc, a, b, ldb, c, accumulate); break;
    default: break;
    }
    return;
  }
  if (rows == 1) {
    if (cols <= 16)
      ukr_1xn(2, cols, kc, a, b, ldb, c, accumulate);
    else
      ukr_1xn(4, cols, kc, a, b, ldb, c, accumulate);
    return;
  }
  if (cols > 16 && rows <= 4) {
    switch (rows) {
    case 2: ukr_n32(2, cols, kc, a, 2, b, ldb, c, accumulate); break;
    case 3: ukr_n32(3, cols, kc, a, 3, b, ldb, c, accumulate); break;
    case 4: ukr_4x32(cols, kc, a, b, ldb, c, accumulate); break;
    default: break;
    }
    return;
  }
  switch (rows) {
    UKR_CASE(2) UKR_CASE(3) UKR_CASE(4) UKR_CASE(5) UKR_CASE(6)
  default: break;
  }
}

/* ---------------------------------------------------------- pack A */

/* dst[k*rows + r] = src[r][k] for r < rows (<= 8), k < len: 8 × 8 register
 * transposes, masked loads for a column tail (reads only src[r][0..len)).
 * Column k's 8-lane store also writes the first 8 - rows floats of column
 * k + 1, which that column's store then overwrites: only the last
 * columns, whose 8 lanes would pass dst[len*rows), go through a bounce
 * buffer. (A masked store, vmaskmovps, is microcoded on AMD Zen, about
 * ten times a plain store: with one per column the packing took 14% of an
 * M = 36, N = 256 product.) One row is a plain copy. */
AVX2_FN void sh_f32_gemm_pack_a__avx2(int64_t rows, int64_t len, const float *const *src,
                                      float *dst) {
  if (rows == 1) {
    memcpy(dst, src[0], (size_t)len * sizeof(float));
    return;
  }
  for (int64_t k0 = 0; k0 < len; k0 += 8) {
    int64_t n = len - k0 < 8 ? len - k0 : 8;
    __m256i lmask = lane_mask(0, n);
    __m256 r[8];
    for (int i = 0; i < 8; i++)
      r[i] = i < rows ? (n == 8 ? _mm256_loadu_ps(src[i] + k0) : _mm256_maskload_ps(src[i] + k0, lmask))
                      : _mm256_setzero_ps();
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    __m256 o[8] = {_mm256_permute2f128_ps(s0, s4, 0x20), _mm256_permute2f128_ps(s1, s5, 0x20),
                   _mm256_permute2f128_ps(s2, s6, 0x20), _mm256_permute2f128_ps(s3, s7, 0x20),
                   _mm256_permute2f128_ps(s0, s4, 0x31), _mm256_permute2f128_ps(s1, s5, 0x31),
                   _mm256_permute2f128_ps(s2, s6, 0x31), _mm256_permute2f128_ps(s3, s7, 0x31)};
    float *d = dst + k0 * rows;
    for (int e = 0; e < n; e++) {
      if ((k0 + e) * rows + 8 <= len * rows) {
        _mm256_storeu_ps(d + e * rows, o[e]);
      } else { /* the last columns: 8 lanes would pass the end */
        _Alignas(32) float t[8];
        _mm256_store_ps(t, o[e]);
        memcpy(d + e * rows, t, (size_t)rows * sizeof(float));
      }
    }
  }
}

/* ------------------------------------------------------------ epilogue */

static inline const float *in_row(const sh_gemm_in *in, int64_t m) {
  return in->rows ? in->rows[m] : in->base + m * in->ld;
}
static inline float *out_row(const sh_gemm_out *o, int64_t m) {
  return o->rows ? o->rows[m] : o->base + m * o->ld;
}

static AVX2_FN SH_GEMM_SPECIALISE __m256 act_avx2(sh_gemm_act act, __m256 x) {
  switch (act) {
  case SH_GEMM_ACT_RELU: return _mm256_max_ps(x, _mm256_setzero_ps());
  case SH_GEMM_ACT_SIGMOID: return sh_sigmoid_avx2(x);
  case SH_GEMM_ACT_TANH: return sh_tanh_avx2(x);
  case SH_GEMM_ACT_GELU_TANH: return sh_gelu_tanh_avx2(x);
  case SH_GEMM_ACT_GELU_ERF: return sh_gelu_erf_avx2(x);
  }
  return x;
}

/* The cell tails work on 8 hidden units at a time: the two halves of a
 * gate group's 16. */
static AVX2_FN void lstm_tail(const sh_gemm_ep_ctx *e, const float *t, int64_t m0, int64_t rows,
                              int64_t col0) {
  const sh_gemm_lstm *l = e->args->lstm;
  int64_t H = e->hidden;
  const sh_gemm_out *gso = &e->args->lstm_gates; /* a training forward's gates */
  bool has_prev = l->c_prev.rows || l->c_prev.base, save = gso->rows || gso->base;
  for (int64_t h0 = col0 / SH_GEMM_LSTM_W * SH_GEMM_LSTM_G, j0 = 0; j0 < SH_GEMM_LSTM_G && h0 < H;
       h0 += 8, j0 += 8) {
    int64_t hv = H - h0 < 8 ? H - h0 : 8;
    __m256i mask = lane_mask(0, hv);
    bool full = hv == 8;
    __m256 bi = _mm256_setzero_ps(), bf = bi, bo = bi, bu = bi;
    if (l->bias) {
      bi = _mm256_maskload_ps(l->bias + l->gate_i * H + h0, mask);
      bf = _mm256_maskload_ps(l->bias + l->gate_f * H + h0, mask);
      bo = _mm256_maskload_ps(l->bias + l->gate_o * H + h0, mask);
      bu = _mm256_maskload_ps(l->bias + l->gate_u * H + h0, mask);
    }
    for (int64_t r = 0; r < rows; r++) {
      const float *tr = t + r * SH_GEMM_LSTM_W + j0;
      __m256 zi = _mm256_add_ps(_mm256_load_ps(tr + l->gate_i * SH_GEMM_LSTM_G), bi);
      __m256 zf = _mm256_add_ps(_mm256_load_ps(tr + l->gate_f * SH_GEMM_LSTM_G), bf);
      __m256 zo = _mm256_add_ps(_mm256_load_ps(tr + l->gate_o * SH_GEMM_LSTM_G), bo);
      __m256 zu = _mm256_add_ps(_mm256_load_ps(tr + l->gate_u * SH_GEMM_LSTM_G), bu);
      __m256 si = sh_sigmoid_avx2(zi), tu = sh_tanh_avx2(zu), sf = _mm256_setzero_ps();
      __m256 c = _mm256_mul_ps(si, tu);
      if (has_prev) {
        const float *cp = in_row(&l->c_prev, m0 + r) + h0;
        __m256 cpv = full ? _mm256_loadu_ps(cp) : _mm256_maskload_ps(cp, mask);
        sf = sh_sigmoid_avx2(zf);
        c = _mm256_fmadd_ps(sf, cpv, c);
      }
      __m256 so = sh_sigmoid_avx2(zo), tc = sh_tanh_avx2(c);
      __m256 h = _mm256_mul_ps(so, tc);
      if (save) { /* the backward's values: i, f, u, o, tanh(c) */
        float *gs = out_row(gso, m0 + r) + h0;
        if (!has_prev) sf = sh_sigmoid_avx2(zf);
        _mm256_maskstore_ps(gs, mask, si);
        _mm256_maskstore_ps(gs + H, mask, sf);
        _mm256_maskstore_ps(gs + 2 * H, mask, tu);
        _mm256_maskstore_ps(gs + 3 * H, mask, so);
        _mm256_maskstore_ps(gs + 4 * H, mask, tc);
      }
      float *co = out_row(&l->c_out, m0 + r) + h0, *ho = out_row(&l->h_out, m0 + r) + h0;
      if (full) {
        _mm256_storeu_ps(co, c);
        _mm256_storeu_ps(ho, h);
      } else {
        _mm256_maskstore_ps(co, mask, c);
        _mm256_maskstore_ps(ho, mask, h);
      }
    }
  }
}

static AVX2_FN void gru_tail(const sh_gemm_ep_ctx *e, const float *t, int64_t m0, int64_t rows,
                             int64_t col0) {
  const sh_gemm_gru *g = e->args->gru;
  int64_t H = e->hidden;
  bool has_prev = g->h_prev.rows || g->h_prev.base;
  for (int64_t h0 = col0 / SH_GEMM_LSTM_W * SH_GEMM_LSTM_G, j0 = 0; j0 < SH_GEMM_LSTM_G && h0 < H;
       h0 += 8, j0 += 8) {
    int64_t hv = H - h0 < 8 ? H - h0 : 8;
    __m256i mask = lane_mask(0, hv);
    __m256 b[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    if (g->bias)
      for (int q = 0; q < 4; q++) b[q] = _mm256_maskload_ps(g->bias + q * H + h0, mask);
    for (int64_t r = 0; r < rows; r++) {
      const float *tr = t + r * SH_GEMM_LSTM_W + j0;
      __m256 z[4];
      for (int q = 0; q < 4; q++) z[q] = _mm256_add_ps(_mm256_load_ps(tr + q * SH_GEMM_LSTM_G), b[q]);
      __m256 rg = sh_sigmoid_avx2(z[g->gate_r]), u = sh_sigmoid_avx2(z[g->gate_z]);
      __m256 n = sh_tanh_avx2(_mm256_fmadd_ps(rg, z[g->gate_nh], z[g->gate_nx]));
      __m256 h = _mm256_fnmadd_ps(u, n, n); /* (1 - u) n */
      if (has_prev) h = _mm256_fmadd_ps(u, _mm256_maskload_ps(in_row(&g->h_prev, m0 + r) + h0, mask), h);
      _mm256_maskstore_ps(out_row(&g->h_out, m0 + r) + h0, mask, h);
    }
  }
}

/* The common epilogue in one pass from the tile to C: an optional bias
 * then an optional activation, both over all of the tile's columns (the
 * parser's and the attention's tanh layers). ACT < 0: none. Each vector
 * goes tile -> registers -> C once, instead of one pass over the tile per
 * op and a last one to copy it out. */
static AVX2_FN SH_GEMM_SPECIALISE void ep_bias_act(const sh_gemm_args *a, const float *bias, int act, const float *t,
                                            int64_t m0, int64_t rows, int64_t col0, int64_t cols) {
  const int64_t nf = cols / 8, tail = cols % 8;
  const __m256i tm = lane_mask(0, tail);
  for (int64_t r = 0; r < rows; r++) {
    float *cr = out_row(&a->c, m0 + r) + col0;
    const float *tr = t + r * SH_GEMM_NR;
    for (int64_t q = 0; q < nf; q++) {
      __m256 x = _mm256_load_ps(tr + 8 * q);
      if (a->accumulate) x = _mm256_add_ps(x, _mm256_loadu_ps(cr + 8 * q));
      if (bias) x = _mm256_add_ps(x, _mm256_loadu_ps(bias + col0 + 8 * q));
      if (act >= 0) x = act_avx2((sh_gemm_act)act, x);
      _mm256_storeu_ps(cr + 8 * q, x);
    }
    if (tail) {
      __m256 x = _mm256_load_ps(tr + 8 * nf);
      if (a->accumulate) x = _mm256_add_ps(x, _mm256_maskload_ps(cr + 8 * nf, tm));
      if (bias) x = _mm256_add_ps(x, _mm256_maskload_ps(bias + col0 + 8 * nf, tm));
      if (act >= 0) x = act_avx2((sh_gemm_act)act, x);
      _mm256_maskstore_ps(cr + 8 * nf, tm, x);
    }
  }
}

/* ep_bias_act's case: returns false when the ops are not a bias and / or an
 * activation covering [col0, col0 + cols). */
static AVX2_FN bool ep_fast(const sh_gemm_ep_ctx *e, const float *t, int64_t m0, int64_t rows,
                            int64_t col0, int64_t cols) {
  const sh_gemm_args *a = e->args;
  const float *bias = NULL;
  int act = -1;
  for (int i = 0; i < a->n_ep; i++) {
    const sh_gemm_ep *op = &a->ep[i];
    int64_t n1 = op->n1 <= 0 ? e->n : op->n1;
    if (op->n0 > col0 || n1 < col0 + cols) return false;
    if (op->kind == SH_GEMM_EP_BIAS && !bias && act < 0)
      bias = op->vec;
    else if (op->kind == SH_GEMM_EP_ACT && act < 0)
      act = (int)op->act;
    else
      return false;
  }
  switch (act) {
  case -1: ep_bias_act(a, bias, -1, t, m0, rows, col0, cols); break;
  case SH_GEMM_ACT_TANH: ep_bias_act(a, bias, SH_GEMM_ACT_TANH, t, m0, rows, col0, cols); break;
  case SH_GEMM_ACT_RELU: ep_bias_act(a, bias, SH_GEMM_ACT_RELU, t, m0, rows, col0, cols); break;
  case SH_GEMM_ACT_SIGMOID: ep_bias_act(a, bias, SH_GEMM_ACT_SIGMOID, t, m0, rows, col0, cols); break;
  default: ep_bias_act(a, bias, act, t, m0, rows, col0, cols); break;
  }
  return true;
}

AVX2_FN void sh_gemm_epilogue__avx2(const sh_gemm_ep_ctx *e, float *t, int64_t m0, int64_t rows,
                                    int64_t col0, int64_t cols) {
  const sh_gemm_args *a = e->args;
  if (a->lstm) {
    lstm_tail(e, t, m0, rows, col0);
    return;
  }
  if (a->gru) {
    gru_tail(e, t, m0, rows, col0);
    return;
  }
  if (ep_fast(e, t, m0, rows, col0, cols)) return;
  const int64_t nq = (cols + 7) / 8;
  if (a->accumulate)
    for (int64_t r = 0; r < rows; r++) {
      const float *cr = out_row(&a->c, m0 + r) + col0;
      for (int64_t q = 0; q < nq; q++) {
        float *tq = t + r * SH_GEMM_NR + q * 8;
        __m256 cv = cols - q * 8 >= 8 ? _mm256_loadu_ps(cr + q * 8)
                                      : _mm256_maskload_ps(cr + q * 8, lane_mask(0, cols - q * 8));
        _mm256_store_ps(tq, _mm256_add_ps(_mm256_load_ps(tq), cv));
      }
    }
  for (int i = 0; i < a->n_ep; i++) {
    const sh_gemm_ep *op = &a->ep[i];
    int64_t n1 = op->n1 <= 0 ? e->n : op->n1;
    int64_t lo = (op->n0 > col0 ? op->n0 : col0) - col0;
    int64_t hi = (n1 < col0 + cols ? n1 : col0 + cols) - col0;
    if (lo >= hi) continue;
    for (int64_t q = lo / 8; q * 8 < hi; q++) {
      int64_t qlo = lo - q * 8, qhi = hi - q * 8;
      bool full = qlo <= 0 && qhi >= 8;
      __m256i mask = lane_mask(qlo, qhi);
      __m256 bias = _mm256_setzero_ps();
      if (op->kind == SH_GEMM_EP_BIAS) {
        const float *v = op->vec + col0 + q * 8;
        bias = full ? _mm256_loadu_ps(v) : _mm256_maskload_ps(v, mask);
      }
      for (int64_t r = 0; r < rows; r++) {
        float *tq = t + r * SH_GEMM_NR + q * 8;
        __m256 x = _mm256_load_ps(tq), y;
        switch (op->kind) {
        case SH_GEMM_EP_BIAS: y = _mm256_add_ps(x, bias); break;
        case SH_GEMM_EP_ACT: y = act_avx2(op->act, x); break;
        default: {
          const float *o = in_row(&op->other, m0 + r) + col0 + q * 8;
          __m256 ov = full ? _mm256_loadu_ps(o) : _mm256_maskload_ps(o, mask);
          y = op->kind == SH_GEMM_EP_ADD ? _mm256_add_ps(x, ov) : _mm256_mul_ps(x, ov);
        } break;
        }
        if (!full) y = _mm256_blendv_ps(x, y, _mm256_castsi256_ps(mask));
        _mm256_store_ps(tq, y);
      }
    }
  }
  for (int64_t r = 0; r < rows; r++) {
    float *cr = out_row(&a->c, m0 + r) + col0;
    const float *tr = t + r * SH_GEMM_NR;
    for (int64_t q = 0; q < nq; q++) {
      if (cols - q * 8 >= 8)
        _mm256_storeu_ps(cr + q * 8, _mm256_load_ps(tr + q * 8));
      else
        _mm256_maskstore_ps(cr + q * 8, lane_mask(0, cols - q * 8), _mm256_load_ps(tr + q * 8));
    }
  }
}
#endif
