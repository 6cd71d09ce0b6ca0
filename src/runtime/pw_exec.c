/*
 * pw_exec.c — running pointwise programs (pointwise.c builds them): a
 * batch's job (the leaves' row pointers, one output block and one block per
 * side output), the row interpreters (AVX-512, AVX2+FMA with the inline
 * vmath_*.h functions, and libm references at the scalar level), and the
 * GEMM-hook fusion.
 *
 * GEMM-hook fusion (policy sheaf): at the start of flush each pointwise root
 * whose leaves read exactly one pending affine node A (its value, slices of
 * it, activations fused into its GEMM), with A's rows, is linked on A's list
 * (sh_affine_node.hook, then sh_pw_node.hook_next). When A's batch runs, the linked
 * roots whose other leaves are all computed by then (the children's c of a
 * TreeLSTM cell: earlier levels) are prepared as batches, one per program
 * signature, and run from the GEMM's row hook (sh_gemm_args.rows_done) on
 * each block of rows as soon as the GEMM has finished it, while those rows
 * are still in cache; the roots are then marked done, so their own bucket
 * (one level later) skips them. Same program, same interpreter, same values.
 * With several threads, a GEMM that splits N calls the hook after the
 * whole product, in row blocks spread over its threads.
 */
#include <math.h>
#include <string.h>

#include "base/pool.h"
#include "kernels/vmath.h"
#include "runtime/runtime.h"

#if defined(__x86_64__)
#include "kernels/vmath_avx2.h"
#include "kernels/vmath_avx512.h"
#endif

#define PW_CH 128 /* floats per chunk of a row */

typedef struct pw_arg {
  sh_gemm_in in; /* the slot's rows */
  int64_t off;   /* + this column */
  bool row_bc;   /* one row for every row of the batch */
  bool col_bc;   /* a scalar for every column */
} pw_arg;

typedef struct pw_job {
  const sh_pw_prog *p;
  int64_t m, n, tasks;
  int level; /* 0 scalar, 1 AVX2+FMA, 2 AVX-512 */
  pw_arg a[SH_PW_MAX_LEAVES];
  sh_gemm_out y, s[SH_PW_MAX_SIDE];
} pw_job;

static inline const float *arg_row(const pw_arg *a, int64_t r) {
  if (a->row_bc) r = 0;
  return (a->in.rows ? a->in.rows[r] : a->in.base + r * a->in.ld) + a->off;
}
static inline float *out_row(const sh_gemm_out *o, int64_t r) {
  return o->rows ? o->rows[r] : o->base + r * o->ld;
}

static float relu1(float x) { return 0.0f > x ? 0.0f : x; } /* NaN and -0 pass */
static float min1(float a, float b) { return a != a ? a : (b != b ? b : (a < b ? a : b)); }
static float max1(float a, float b) { return a != a ? a : (b != b ? b : (a > b ? a : b)); }
static float rsqrt1(float x) { return 1.0f / sqrtf(x); }
/* log(1 + exp(x)), linear above 20 as PyTorch's Softplus */
static float softplus1(float x) { return x > 20.0f ? x : (float)log1p(exp((double)x)); }

/* Operands each opcode pops (sum_n and scale: see pointwise.c). */
static const uint8_t pw_arity[SH_PW_COUNT] = {
#define SH_OP(ID, name, cls, arity, form, act) [SH_PW_##ID] = arity == 0 ? 1 : arity,
#include "runtime/ops.def"
};
static float gt1(float a, float b) { return a > b ? 1.0f : 0.0f; }
static float ge1(float a, float b) { return a >= b ? 1.0f : 0.0f; }
static float eq1(float a, float b) { return a == b ? 1.0f : 0.0f; }
static float ne1(float a, float b) { return a != b ? 1.0f : 0.0f; }

/* ------------------------------------------------------- row interpreters */

/* Libm references (the scalar level of vmath.h). */
static void pw_rows_scalar(const pw_job *j, int64_t r0, int64_t r1) {
  const sh_pw_prog *p = j->p;
  float buf[SH_PW_MAX_STACK][PW_CH];
  for (int64_t r = r0; r < r1; r++) {
    const float *lr[SH_PW_MAX_LEAVES];
    for (int k = 0; k < p->n_leaves; k++) lr[k] = arg_row(&j->a[k], r);
    float *yr = out_row(&j->y, r);
    for (int64_t c0 = 0; c0 < j->n; c0 += PW_CH) {
      int64_t len = j->n - c0 < PW_CH ? j->n - c0 : PW_CH;
      const float *rd[SH_PW_MAX_STACK];
      int sp = 0;
      for (int pc = 0; pc < p->n_code; pc++) {
        int op = p->op[pc], arg = p->arg[pc];
        if (op == SH_PW_LOAD) {
          if (j->a[arg].col_bc) {
            for (int64_t i = 0; i < len; i++) buf[sp][i] = lr[arg][0];
            rd[sp] = buf[sp];
          } else {
            rd[sp] = lr[arg] + c0;
          }
          sp++;
          continue;
        }
        if (op == SH_PW_STORE) {
          memcpy(out_row(&j->s[arg], r) + c0, rd[sp - 1], (size_t)len * sizeof(float));
          continue;
        }
        int ar = pw_arity[op], t = sp - ar;
        float *d = t == 0 ? yr + c0 : buf[t];
        const float *a = rd[t], *b = ar > 1 ? rd[t + 1] : NULL, *c = ar > 2 ? rd[t + 2] : NULL;
        switch (op) {
        case SH_PW_ADD: for (int64_t i = 0; i < len; i++) d[i] = a[i] + b[i]; break;
        case SH_PW_SUB: for (int64_t i = 0; i < len; i++) d[i] = a[i] - b[i]; break;
        case SH_PW_MUL: for (int64_t i = 0; i < len; i++) d[i] = a[i] * b[i]; break;
        case SH_PW_DIV: for (int64_t i = 0; i < len; i++) d[i] = a[i] / b[i]; break;
        case SH_PW_SCALE: {
          float k = p->k[arg];
          for (int64_t i = 0; i < len; i++) d[i] = a[i] * k;
          break;
        }
        case SH_PW_TANH: for (int64_t i = 0; i < len; i++) d[i] = tanhf(a[i]); break;
        case SH_PW_SIGMOID: for (int64_t i = 0; i < len; i++) d[i] = sh_sigmoid_ref(a[i]); break;
        case SH_PW_RELU: for (int64_t i = 0; i < len; i++) d[i] = relu1(a[i]); break;
        case SH_PW_GELU: for (int64_t i = 0; i < len; i++) d[i] = sh_gelu_erf_ref(a[i]); break;
        case SH_PW_EXP: for (int64_t i = 0; i < len; i++) d[i] = expf(a[i]); break;
        case SH_PW_LN: for (int64_t i = 0; i < len; i++) d[i] = logf(a[i]); break;
        case SH_PW_POW: for (int64_t i = 0; i < len; i++) d[i] = powf(a[i], b[i]); break;
        case SH_PW_MINIMUM: for (int64_t i = 0; i < len; i++) d[i] = min1(a[i], b[i]); break;
        case SH_PW_MAXIMUM: for (int64_t i = 0; i < len; i++) d[i] = max1(a[i], b[i]); break;
        case SH_PW_SQRT: for (int64_t i = 0; i < len; i++) d[i] = sqrtf(a[i]); break;
        case SH_PW_RSQRT: for (int64_t i = 0; i < len; i++) d[i] = rsqrt1(a[i]); break;
        case SH_PW_ABS: for (int64_t i = 0; i < len; i++) d[i] = fabsf(a[i]); break;
        case SH_PW_SOFTPLUS: for (int64_t i = 0; i < len; i++) d[i] = softplus1(a[i]); break;
        case SH_PW_ERF: for (int64_t i = 0; i < len; i++) d[i] = erff(a[i]); break;
        case SH_PW_GT: for (int64_t i = 0; i < len; i++) d[i] = gt1(a[i], b[i]); break;
        case SH_PW_GE: for (int64_t i = 0; i < len; i++) d[i] = ge1(a[i], b[i]); break;
        case SH_PW_EQ: for (int64_t i = 0; i < len; i++) d[i] = eq1(a[i], b[i]); break;
        case SH_PW_NE: for (int64_t i = 0; i < len; i++) d[i] = ne1(a[i], b[i]); break;
        case SH_PW_WHERE: for (int64_t i = 0; i < len; i++) d[i] = a[i] != 0 ? b[i] : c[i]; break;
        default: break;
        }
        rd[t] = d;
        sp = t + 1;
      }
      if (rd[0] != yr + c0) memcpy(yr + c0, rd[0], (size_t)len * sizeof(float));
    }
  }
}

#if defined(__x86_64__)
/* The next row's leaves and outputs: scattered rows defeat the prefetchers. */
static inline void prefetch_row(const pw_job *j, int64_t r) {
  const sh_pw_prog *p = j->p;
  int64_t row_bytes = j->n * (int64_t)sizeof(float);
  for (int k = 0; k < p->n_leaves; k++) {
    if (j->a[k].col_bc || j->a[k].row_bc) continue;
    const char *q = (const char *)arg_row(&j->a[k], r);
    for (int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(q + b, 0, 3);
  }
  const char *q = (const char *)out_row(&j->y, r);
  for (int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(q + b, 1, 3);
  for (int s = 0; s < p->n_side; s++) {
    q = (const char *)out_row(&j->s[s], r);
    for (int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(q + b, 1, 3);
  }
}

/* Both SIMD interpreters: each stack slot holds a chunk of PW_CH floats; a
 * leaf chunk is read in place (copied, zero-padded, only for the row's last
 * partial vector); slot 0 is the output row itself when the chunk is whole
 * vectors. V: floats per vector; VEC, LOADU, STOREU, STORE, SET1: the
 * vector type and its ops; the ops' bodies are the PW_OPS_* macros. */
#define PW_INTERP(NAME, ATTR, V, VEC, LOADU, STOREU, STORE, SET1, OPS)                          \
  ATTR static void NAME(const pw_job *j, int64_t r0, int64_t r1) {                              \
    const sh_pw_prog *p = j->p;                                                                 \
    float buf[SH_PW_MAX_STACK][PW_CH] __attribute__((aligned(64)));                             \
    for (int64_t r = r0; r < r1; r++) {                                                         \
      const float *lr[SH_PW_MAX_LEAVES];                                                        \
      for (int k = 0; k < p->n_leaves; k++) lr[k] = arg_row(&j->a[k], r);                      \
      float *yr = out_row(&j->y, r);                                                            \
      if (r + 1 < r1) prefetch_row(j, r + 1); /* 2 or 4 rows ahead: no better */             \
      for (int64_t c0 = 0; c0 < j->n; c0 += PW_CH) {                                            \
        int64_t len = j->n - c0 < PW_CH ? j->n - c0 : PW_CH, nv = (len + V - 1) / V;            \
        bool whole = len % V == 0;                                                              \
        const float *rd[SH_PW_MAX_STACK];                                                       \
        int sp = 0;                                                                             \
        for (int pc = 0; pc < p->n_code; pc++) {                                                \
          int op = p->op[pc], arg = p->arg[pc];                                                 \
          if (op == SH_PW_LOAD) {                                                               \
            if (j->a[arg].col_bc) {                                                             \
              VEC v = SET1(lr[arg][0]);                                                         \
              for (int64_t q = 0; q < nv; q++) STORE(buf[sp] + V * q, v);                       \
              rd[sp] = buf[sp];                                                                 \
            } else if (whole) {                                                                 \
              rd[sp] = lr[arg] + c0;                                                            \
            } else {                                                                            \
              memcpy(buf[sp], lr[arg] + c0, (size_t)len * sizeof(float));                       \
              memset(buf[sp] + len, 0, (size_t)(nv * V - len) * sizeof(float));                \
              rd[sp] = buf[sp];                                                                 \
            }                                                                                   \
            sp++;                                                                               \
            continue;                                                                           \
          }                                                                                     \
          if (op == SH_PW_STORE) {                                                              \
            float *so = out_row(&j->s[arg], r) + c0;                                            \
            const float *si = rd[sp - 1];                                                       \
            if (whole)                                                                          \
              for (int64_t q = 0; q < nv; q++) STOREU(so + V * q, LOADU(si + V * q));           \
            else                                                                                \
              memcpy(so, si, (size_t)len * sizeof(float));                                      \
            continue;                                                                           \
          }                                                                                     \
          int ar = pw_arity[op], t = sp - ar;                                                   \
          float *d = t == 0 && whole ? yr + c0 : buf[t];                                        \
          const float *a = rd[t], *b = ar > 1 ? rd[t + 1] : NULL, *c = ar > 2 ? rd[t + 2] : NULL; \
          (void)b, (void)c;                                                                     \
          switch (op) { OPS }                                                                   \
          rd[t] = d;                                                                            \
          sp = t + 1;                                                                           \
        }                                                                                       \
        if (rd[0] != yr + c0) memcpy(yr + c0, rd[0], (size_t)len * sizeof(float));             \
      }                                                                                         \
    }                                                                                           \
  }

#define PW_LOOP(V, LOADU, STOREU, expr)                                                         \
  for (int64_t q = 0; q < nv; q++) {                                                            \
    x = LOADU(a + V * q);                                                                       \
    STOREU(d + V * q, expr);                                                                    \
  }
#define PW_LOOP2(V, LOADU, STOREU, fn)                                                          \
  for (int64_t q = 0; q < nv; q++) STOREU(d + V * q, fn(LOADU(a + V * q), LOADU(b + V * q)));
/* ops without a vector body yet: the scalar reference on every lane (the
 * chunk's padding lanes included: they are zeros, and never stored) */
#define PW_SCALAR1(V, f) for (int64_t i = 0; i < nv * V; i++) d[i] = f(a[i]);
#define PW_SCALAR2(V, f) for (int64_t i = 0; i < nv * V; i++) d[i] = f(a[i], b[i]);

#define PW_AVX2 __attribute__((target("avx2,fma")))
/* minimum/maximum with NaN from either side (min_ps returns b when either is NaN) */
PW_AVX2 static inline __m256 min_avx2(__m256 a, __m256 b) {
  return _mm256_blendv_ps(_mm256_min_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}
PW_AVX2 static inline __m256 max_avx2(__m256 a, __m256 b) {
  return _mm256_blendv_ps(_mm256_max_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}
/* comparisons as 1 / 0 masks (ordered: NaN false; not-equal unordered: NaN true) */
#define PW_CMP_AVX2(name, pred)                                                        \
  PW_AVX2 static inline __m256 name(__m256 a, __m256 b) {                             \
    return _mm256_and_ps(_mm256_cmp_ps(a, b, pred), _mm256_set1_ps(1.0f));           \
  }
PW_CMP_AVX2(gt_avx2, _CMP_GT_OQ)
PW_CMP_AVX2(ge_avx2, _CMP_GE_OQ)
PW_CMP_AVX2(eq_avx2, _CMP_EQ_OQ)
PW_CMP_AVX2(ne_avx2, _CMP_NEQ_UQ)
#define L2(f) PW_LOOP2(8, _mm256_loadu_ps, _mm256_storeu_ps, f)
#define L1(e) PW_LOOP(8, _mm256_loadu_ps, _mm256_storeu_ps, e)
#define PW_OPS_AVX2                                                                             \
  case SH_PW_ADD: L2(_mm256_add_ps) break;                                                      \
  case SH_PW_SUB: L2(_mm256_sub_ps) break;                                                      \
  case SH_PW_MUL: L2(_mm256_mul_ps) break;                                                      \
  case SH_PW_DIV: L2(_mm256_div_ps) break;                                                      \
  case SH_PW_SCALE: {                                                                           \
    __m256 k = _mm256_set1_ps(p->k[arg]), x;                                                    \
    L1(_mm256_mul_ps(x, k))                                                                     \
    break;                                                                                      \
  }                                                                                             \
  case SH_PW_TANH: { __m256 x; L1(sh_tanh_avx2(x)) break; }                                     \
  case SH_PW_SIGMOID: { __m256 x; L1(sh_sigmoid_avx2(x)) break; }                               \
  case SH_PW_RELU: { __m256 x; L1(_mm256_max_ps(_mm256_setzero_ps(), x)) break; }               \
  case SH_PW_GELU: { __m256 x; L1(sh_gelu_erf_avx2(x)) break; }                                 \
  case SH_PW_EXP: { __m256 x; L1(sh_exp_avx2(x)) break; }                                       \
  case SH_PW_LN: { __m256 x; L1(sh_log_avx2(x)) break; }                                        \
  case SH_PW_POW: PW_SCALAR2(8, powf) break;                                                    \
  case SH_PW_MINIMUM: L2(min_avx2) break;                                                       \
  case SH_PW_MAXIMUM: L2(max_avx2) break;                                                       \
  case SH_PW_SQRT: { __m256 x; L1(_mm256_sqrt_ps(x)) break; }                                   \
  case SH_PW_RSQRT: { __m256 x; L1(_mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_sqrt_ps(x))) break; } \
  case SH_PW_ABS: { __m256 x; L1(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), x)) break; }           \
  case SH_PW_SOFTPLUS: PW_SCALAR1(8, softplus1) break;                                          \
  case SH_PW_ERF: PW_SCALAR1(8, erff) break;                                                    \
  case SH_PW_GT: L2(gt_avx2) break;                                                             \
  case SH_PW_GE: L2(ge_avx2) break;                                                             \
  case SH_PW_EQ: L2(eq_avx2) break;                                                             \
  case SH_PW_NE: L2(ne_avx2) break;                                                             \
  case SH_PW_WHERE:                                                                             \
    for (int64_t q = 0; q < nv; q++)                                                            \
      _mm256_storeu_ps(d + 8 * q, _mm256_blendv_ps(_mm256_loadu_ps(c + 8 * q), _mm256_loadu_ps(b + 8 * q), \
                       _mm256_cmp_ps(_mm256_loadu_ps(a + 8 * q), _mm256_setzero_ps(), _CMP_NEQ_UQ))); \
    break;                                                                                      \
  default: break;

PW_INTERP(pw_rows_avx2, PW_AVX2, 8, __m256, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_store_ps,
          _mm256_set1_ps, PW_OPS_AVX2)
#undef L1
#undef L2

/* AVX-512: 16 floats a vector (Zen 4 runs a zmm op in two halves, but
 * decodes and schedules it once); sigmoid and tanh division-free
 * (sh_*_fast_avx512: the values stream through memory here); GELU through
 * the AVX2 function on each half (no AVX-512 version: same values at every
 * level). */
#define PW_AVX512 __attribute__((target("avx512f,avx512dq,avx2,fma")))
PW_AVX512 static inline __m512 gelu_avx512(__m512 x) {
  __m256 lo = sh_gelu_erf_avx2(_mm512_castps512_ps256(x));
  __m256 hi = sh_gelu_erf_avx2(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
  return _mm512_castpd_ps(
      _mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
}

PW_AVX512 static inline __m512 min_avx512(__m512 a, __m512 b) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), _mm512_min_ps(a, b), a);
}
PW_AVX512 static inline __m512 max_avx512(__m512 a, __m512 b) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), _mm512_max_ps(a, b), a);
}
#define PW_CMP_AVX512(name, pred)                                                      \
  PW_AVX512 static inline __m512 name(__m512 a, __m512 b) {                           \
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a, b, pred), _mm512_set1_ps(1.0f)); \
  }
PW_CMP_AVX512(gt_avx512, _CMP_GT_OQ)
PW_CMP_AVX512(ge_avx512, _CMP_GE_OQ)
PW_CMP_AVX512(eq_avx512, _CMP_EQ_OQ)
PW_CMP_AVX512(ne_avx512, _CMP_NEQ_UQ)

#define L2(f) PW_LOOP2(16, _mm512_loadu_ps, _mm512_storeu_ps, f)
#define L1(e) PW_LOOP(16, _mm512_loadu_ps, _mm512_storeu_ps, e)
#define PW_OPS_AVX512                                                                           \
  case SH_PW_ADD: L2(_mm512_add_ps) break;                                                      \
  case SH_PW_SUB: L2(_mm512_sub_ps) break;                                                      \
  case SH_PW_MUL: L2(_mm512_mul_ps) break;                                                      \
  case SH_PW_DIV: L2(_mm512_div_ps) break;                                                      \
  case SH_PW_SCALE: {                                                                           \
    __m512 k = _mm512_set1_ps(p->k[arg]), x;                                                    \
    L1(_mm512_mul_ps(x, k))                                                                     \
    break;                                                                                      \
  }                                                                                             \
  case SH_PW_TANH: { __m512 x; L1(sh_tanh_fast_avx512(x)) break; }                                       \
  case SH_PW_SIGMOID: { __m512 x; L1(sh_sigmoid_fast_avx512(x)) break; }                                 \
  case SH_PW_RELU: { __m512 x; L1(_mm512_max_ps(_mm512_setzero_ps(), x)) break; }               \
  case SH_PW_GELU: { __m512 x; L1(gelu_avx512(x)) break; }                                      \
  case SH_PW_EXP: { __m512 x; L1(sh_exp_avx512(x)) break; }                                     \
  case SH_PW_LN: { __m512 x; L1(sh_log_avx512(x)) break; }                                      \
  case SH_PW_POW: PW_SCALAR2(16, powf) break;                                                   \
  case SH_PW_MINIMUM: L2(min_avx512) break;                                                     \
  case SH_PW_MAXIMUM: L2(max_avx512) break;                                                     \
  case SH_PW_SQRT: { __m512 x; L1(_mm512_sqrt_ps(x)) break; }                                   \
  case SH_PW_RSQRT: { __m512 x; L1(_mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_sqrt_ps(x))) break; } \
  case SH_PW_ABS: { __m512 x; L1(_mm512_abs_ps(x)) break; }                                     \
  case SH_PW_SOFTPLUS: PW_SCALAR1(16, softplus1) break;                                         \
  case SH_PW_ERF: PW_SCALAR1(16, erff) break;                                                   \
  case SH_PW_GT: L2(gt_avx512) break;                                                           \
  case SH_PW_GE: L2(ge_avx512) break;                                                           \
  case SH_PW_EQ: L2(eq_avx512) break;                                                           \
  case SH_PW_NE: L2(ne_avx512) break;                                                           \
  case SH_PW_WHERE:                                                                             \
    for (int64_t q = 0; q < nv; q++)                                                            \
      _mm512_storeu_ps(d + 16 * q, _mm512_mask_blend_ps(_mm512_cmp_ps_mask(_mm512_loadu_ps(a + 16 * q), \
                       _mm512_setzero_ps(), _CMP_NEQ_UQ), _mm512_loadu_ps(c + 16 * q), _mm512_loadu_ps(b + 16 * q))); \
    break;                                                                                      \
  default: break;

PW_INTERP(pw_rows_avx512, PW_AVX512, 16, __m512, _mm512_loadu_ps, _mm512_storeu_ps,
          _mm512_store_ps, _mm512_set1_ps, PW_OPS_AVX512)
#undef L1
#undef L2
#endif

static void pw_range(const pw_job *j, int64_t r0, int64_t r1) {
#if defined(__x86_64__)
  if (j->level == 2) {
    pw_rows_avx512(j, r0, r1);
    return;
  }
  if (j->level == 1) {
    pw_rows_avx2(j, r0, r1);
    return;
  }
#endif
  pw_rows_scalar(j, r0, r1);
}

static void pw_task(void *arg, int64_t task, int tid) {
  const pw_job *j = arg;
  (void)tid;
  int64_t r0 = j->m * task / j->tasks, r1 = j->m * (task + 1) / j->tasks;
  if (r0 < r1) pw_range(j, r0, r1);
}

/* ------------------------------------------------------------------ jobs */

/* The job of a batch: row pointers of each slot (a one-row slot repeats),
 * the output block (node values point into it) and the side-output blocks. */
static sheaf_status job_setup(sheaf_graph *g, const uint32_t *ids, uint32_t n, int64_t m, pw_job *j) {
  const sh_node *n0 = &g->store.nodes[ids[0]];
  const sh_pw_node *pn0 = &g->pw.node[ids[0]];
  const sh_pw_prog *p = sh_pw_prog_of(g, ids[0]);
  uint32_t mask = (uint32_t)g->sigs.at[pn0->sig].key.w[0], nl = p->n_leaves;
  int64_t cols = n0->cols;
  memset(j, 0, sizeof *j);
  j->p = p;
  j->m = m;
  j->n = cols;
#if defined(__x86_64__)
  sheaf_isa host = sheaf_cpu_isa_host(), isa = g->isa < host ? g->isa : host;
  j->level = isa >= SHEAF_ISA_AVX512 ? 2 : isa >= SHEAF_ISA_AVX2 ? 1 : 0;
#endif
  uint32_t nv = p->n_slots;
  /* the nodes' side entries, slot lists, then the slot and side nodes (cold: see exec_gemm.c) */
  for (uint32_t i = 0; i < n; i++) __builtin_prefetch(&g->pw.node[ids[i]]);
  for (uint32_t i = 0; i < n; i++) __builtin_prefetch(g->pw.slot + g->pw.node[ids[i]].first_slot);
  for (uint32_t i = 0; i < n; i++)
    for (uint32_t v = 0; v < nv + p->n_side; v++)
      __builtin_prefetch(&g->store.nodes[g->pw.slot[g->pw.node[ids[i]].first_slot + v]]);
  sh_gemm_in slot[SH_PW_MAX_LEAVES];
  bool same[SH_PW_MAX_LEAVES];
  const float **rp[SH_PW_MAX_LEAVES];
  for (uint32_t v = 0; v < nv; v++) {
    rp[v] = sh_arena_alloc(&g->work.scratch, (size_t)m * sizeof *rp[v]);
    if (!rp[v]) return SHEAF_ERR_NOMEM;
  }
  int64_t r = 0;
  for (uint32_t i = 0; i < n; i++) {
    const sh_node *nd = &g->store.nodes[ids[i]];
    const uint32_t *slots = g->pw.slot + g->pw.node[ids[i]].first_slot;
    for (uint32_t v = 0; v < nv; v++) {
      uint32_t x = slots[v];
      const float *val = g->store.nodes[x].val;
      if (!val && !(val = sh_graph_val(g, x))) return g->status ? g->status : SHEAF_ERR_INTERNAL;
      const sh_node *xn = &g->store.nodes[x];
      int64_t ld = xn->rows == 1 ? 0 : xn->ld;
      for (int32_t q = 0; q < nd->rows; q++) rp[v][r + q] = val + q * ld;
    }
    r += nd->rows;
  }
  for (uint32_t v = 0; v < nv; v++) slot[v] = sh_exec_operand(g, rp[v], m, 1, &same[v]);
  for (uint32_t k = 0; k < nl; k++) {
    j->a[k].in = slot[p->slot[k]];
    j->a[k].off = p->off[k];
    j->a[k].row_bc = same[p->slot[k]];
    j->a[k].col_bc = mask >> k & 1;
  }
  float *out = sh_exec_out_block(g, ids, n, m, cols);
  if (!out) return SHEAF_ERR_NOMEM;
  j->y = (sh_gemm_out){NULL, out, cols};
  for (uint32_t s = 0; s < p->n_side; s++) {
    float *blk = sh_arena_alloc(&g->store.data, (size_t)m * (size_t)cols * sizeof(float));
    if (!blk) return SHEAF_ERR_NOMEM;
    int64_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
      const sh_node *nd = &g->store.nodes[ids[i]];
      sh_node *sn = &g->store.nodes[g->pw.slot[g->pw.node[ids[i]].first_slot + nv + s]];
      sn->val = blk + off * cols;
      sn->ld = (int32_t)cols;
      off += nd->rows;
    }
    j->s[s] = (sh_gemm_out){NULL, blk, cols};
  }
  return SHEAF_OK;
}

/* After the job ran: side outputs are computed; the batch's flops. */
static void job_finish(sheaf_graph *g, const pw_job *j, const uint32_t *ids, uint32_t n) {
  const sh_pw_prog *p = j->p;
  for (uint32_t s = 0; s < p->n_side; s++)
    for (uint32_t i = 0; i < n; i++)
      g->store.nodes[g->pw.slot[g->pw.node[ids[i]].first_slot + p->n_slots + s]].done = true;
  uint64_t ops = 0;
  for (int pc = 0; pc < p->n_code; pc++) ops += p->op[pc] != SH_PW_LOAD && p->op[pc] != SH_PW_STORE;
  g->instr.stats.flops += ops * (uint64_t)j->m * (uint64_t)j->n;
}

sheaf_status sh_exec_pw(sheaf_graph *g, const uint32_t *ids, uint32_t n, int64_t m) {
  pw_job j;
  sheaf_status st = job_setup(g, ids, n, m, &j);
  if (st) return st;
  uint64_t t0 = sheaf_time_ns();
  /* split rows over the pool when each thread gets a few microseconds of
   * work (about one vector op per element and instruction) */
  if (g->threads > 1 && m >= 2 && m * j.n * j.p->n_code >= 32768) {
    j.tasks = m < 4 * g->threads ? m : 4 * g->threads;
    sh_pool_run(g->ctx->pool, j.tasks, pw_task, &j, g->threads);
  } else {
    pw_range(&j, 0, m);
  }
  g->instr.stats.ns_kernels += sheaf_time_ns() - t0;
  job_finish(g, &j, ids, n);
  return SHEAF_OK;
}

/* ------------------------------------------------------- GEMM-hook fusion */

/* A slot's value through slices and fused activations: the node that holds
 * it (an affine for its slices and aliases), or SH_NONE when it is read
 * through a concat or a reshape (never fused: those may copy). */
static uint32_t slot_base(const sheaf_graph *g, uint32_t x) {
  for (;;) {
    const sh_node *n = &g->store.nodes[x];
    if (n->op == SH_OP_SLICE || n->op == SH_OP_ALIAS) {
      x = g->store.ins[n->in];
      continue;
    }
    return n->op == SH_OP_CONCAT || n->op == SH_OP_RESHAPE ? SH_NONE : x;
  }
}

/* Links root `id` to the one pending affine A whose rows it reads when
 * every other leaf is computed before A runs: done already, from an earlier
 * phase, or at a lower depth of A's phase (policy sheaf runs phases, then
 * depths, in ascending order; a value stored by a program or recomputed is
 * computed at its own depth). */
void sh_pw_link_hot(sheaf_graph *g, uint32_t id) {
  const sh_node *r = &g->store.nodes[id];
  sh_pw_node *rp = &g->pw.node[id];
  const uint32_t *slots = g->pw.slot + rp->first_slot;
  uint32_t hot = SH_NONE, nv = sh_pw_prog_of(g, id)->n_slots;
  for (uint32_t v = 0; v < nv; v++) {
    uint32_t b = slot_base(g, slots[v]);
    if (b == SH_NONE) return;
    const sh_node *bn = &g->store.nodes[b];
    if (bn->op != SH_OP_AFFINE || bn->done) continue;
    if ((hot != SH_NONE && b != hot) || bn->rows != r->rows || bn->phase != r->phase) return;
    hot = b;
  }
  if (hot == SH_NONE) return;
  const sh_node *a = &g->store.nodes[hot];
  for (uint32_t v = 0; v < nv; v++) {
    uint32_t b = slot_base(g, slots[v]);
    const sh_node *bn = &g->store.nodes[b];
    if (b != hot && !bn->done && bn->phase == a->phase && bn->depth >= a->depth)
      return; /* may not be computed yet when A runs */
  }
  rp->hook_next = g->affine.node[hot].hook;
  g->affine.node[hot].hook = id;
}

#define PW_HOOK_MAX 4 /* programs (signatures) run in one GEMM's hook */

typedef struct pw_hook_grp {
  pw_job j;
  uint32_t sig, n;
  uint32_t *ids, *aff; /* the roots, and the index of each one's affine in the batch */
  int64_t *cnt;        /* cnt[r]: job rows before GEMM row r (m + 1 entries) */
} pw_hook_grp;

struct sh_pw_hook {
  int n;
  pw_hook_grp grp[PW_HOOK_MAX];
};

sheaf_status sh_pw_hook_plan(sheaf_graph *g, const uint32_t *ids, uint32_t n, int64_t m,
                             sh_pw_hook **out) {
  *out = NULL;
  sh_pw_hook *h = NULL;
  for (uint32_t i = 0; i < n; i++) { /* each affine's first root (cold: built long before) */
    uint32_t r = g->affine.node[ids[i]].hook;
    if (r != SH_NONE) __builtin_prefetch(&g->pw.node[r]), __builtin_prefetch(&g->store.nodes[r]);
  }
  for (uint32_t i = 0; i < n; i++) {
    for (uint32_t r = g->affine.node[ids[i]].hook; r != SH_NONE; r = g->pw.node[r].hook_next) {
      if (g->store.nodes[r].done) continue;
      if (!h) {
        h = sh_arena_alloc(&g->work.scratch, sizeof *h);
        if (!h) return SHEAF_ERR_NOMEM;
        h->n = 0;
      }
      uint32_t sig = g->pw.node[r].sig;
      int k = 0;
      while (k < h->n && h->grp[k].sig != sig) k++;
      pw_hook_grp *q = &h->grp[k];
      if (k == h->n) {
        if (k == PW_HOOK_MAX) continue;
        h->n++;
        q->sig = sig;
        q->n = 0;
        q->ids = sh_arena_alloc(&g->work.scratch, (size_t)n * sizeof *q->ids);
        q->aff = sh_arena_alloc(&g->work.scratch, (size_t)n * sizeof *q->aff);
        if (!q->ids || !q->aff) return SHEAF_ERR_NOMEM;
      } else if (q->aff[q->n - 1] == i) {
        continue; /* one root per affine and program: job rows follow GEMM rows */
      }
      q->ids[q->n] = r;
      q->aff[q->n++] = i;
    }
  }
  if (!h) return SHEAF_OK;
  for (int k = 0; k < h->n; k++) {
    pw_hook_grp *q = &h->grp[k];
    q->cnt = sh_arena_alloc(&g->work.scratch, (size_t)(m + 1) * sizeof *q->cnt);
    if (!q->cnt) return SHEAF_ERR_NOMEM;
    int64_t row = 0, jr = 0;
    uint32_t e = 0;
    q->cnt[0] = 0;
    for (uint32_t i = 0; i < n; i++) {
      bool mine = e < q->n && q->aff[e] == i;
      e += mine;
      for (int32_t t = g->store.nodes[ids[i]].rows; t > 0; t--, row++) q->cnt[row + 1] = mine ? ++jr : jr;
    }
    sheaf_status st = job_setup(g, q->ids, q->n, jr, &q->j);
    if (st) return st;
  }
  *out = h;
  return SHEAF_OK;
}

void sh_pw_hook_rows(void *arg, int64_t m0, int64_t rows, int tid) {
  const sh_pw_hook *h = arg;
  (void)tid;
  for (int k = 0; k < h->n; k++) {
    const pw_hook_grp *q = &h->grp[k];
    int64_t r0 = q->cnt[m0], r1 = q->cnt[m0 + rows];
    if (r0 < r1) pw_range(&q->j, r0, r1);
  }
}

void sh_pw_hook_done(sheaf_graph *g, const sh_pw_hook *h) {
  for (int k = 0; k < h->n; k++) {
    const pw_hook_grp *q = &h->grp[k];
    for (uint32_t i = 0; i < q->n; i++) g->store.nodes[q->ids[i]].done = true;
    job_finish(g, &q->j, q->ids, q->n);
    g->instr.pw_hooked += q->n;
    g->instr.stats.batches++;
    g->sigs.at[q->sig].batches++;
    g->sigs.at[q->sig].nodes += q->n;
  }
}
