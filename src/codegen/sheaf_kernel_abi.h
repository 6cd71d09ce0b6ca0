/*
 * sheaf_kernel_abi.h — the one header a Sheaf-generated kernel includes.
 * Self-contained (libc, libm, and <immintrin.h> on x86 for FMA, sqrt and
 * lane masks); the generated .so never links against libsheaf: runtime
 * services (the thread pool, an allocator) come in through sk_abi.
 * Embedded in libsheaf as a string (sh_lir_abi_header()) so the JIT can
 * write it next to the generated source. Works with gcc >= 9 and clang >= 8
 * in C11 (GCC vector extensions).
 *
 * Entry point of a kernel NAME (docs/CODEGEN.md):
 *   int NAME(const sk_abi *abi, const int64_t *sizes, const sk_arg *args);
 * sizes: the kernel's size symbols in declaration order; args: one per
 * input / output buffer in declaration order. Returns 0, 1 when a
 * temporary buffer could not be allocated, or 2 when a gather's index
 * value is out of range (checked before anything is computed).
 *
 * Vector math (sk_exp8 ... sk_erf16): the algorithms and constants of
 * src/kernels/vmath_avx2.h (Cephes exp with exponent-field scaling, tanh,
 * sigmoid, log with Estrin's scheme, GELU (erf form) by a rational fit) on
 * GCC vectors of 8 and 16 floats, so the error bounds of docs/KERNELS.md
 * carry over; erf and softplus added (tests/test_codegen_abi.c measures
 * every function against libm). Scalar code uses libm.
 */
#ifndef SHEAF_KERNEL_ABI_H
#define SHEAF_KERNEL_ABI_H

#include <stddef.h>
#include <stdint.h>

#define SK_ABI_VERSION 1

/* Runs task `task` on pool thread `tid` (0 = the caller). */
typedef void (*sk_task_fn)(void *arg, int64_t task, int tid);

typedef struct sk_abi {
  int32_t version; /* SK_ABI_VERSION */
  int32_t threads; /* threads a parallel loop may use; <= 1 runs it on the caller */
  /* Runs fn(arg, t, tid) for every t < n_tasks on up to max_threads pool
   * threads and returns when all are done (Sheaf's sh_pool_run). */
  void (*parallel)(void *pool, int64_t n_tasks, sk_task_fn fn, void *arg, int max_threads);
  void *pool;
  /* Temporaries; NULL: aligned_alloc / free. */
  void *(*alloc)(void *user, size_t bytes);
  void (*free)(void *user, void *p, size_t bytes);
  void *alloc_user;
} sk_abi;

/* One buffer argument: which fields are read depends on how the kernel was
 * generated for it (dense, row stride, row pointers, ragged, panels). */
typedef struct sk_arg {
  void *data;        /* element 0 (ragged: the packed values; panels: the packed weight) */
  void *const *rows; /* row-pointer access: rows[i] is row i of dimension 0 */
  int64_t ld;        /* row-stride access: elements between rows of dimension 0 */
} sk_arg;

typedef int (*sk_entry_fn)(const sk_abi *abi, const int64_t *sizes, const sk_arg *args);

/* The batched entry point NAME_batch of a kernel the runtime calls as an op
 * (docs/CODEGEN.md, "Batched use"): runs NAME on n instances. Argument j of
 * instance i is rows[i] when rows is set (a row-pointer array: gathered
 * inputs, no copy), else data + i * stride bytes (stride 0: one buffer
 * passed once, a parameter; stride = one instance's bytes: contiguous
 * rows). sizes holds n_sizes values per instance (instance i's at
 * sizes + i * n_sizes), so extents may differ per instance. Returns 0, or
 * 1 when a temporary could not be allocated. */
typedef struct sk_barg {
  char *data;
  void *const *rows;
  int64_t stride; /* bytes */
} sk_barg;

typedef int (*sk_batch_fn)(const sk_abi *abi, int64_t n, const int64_t *sizes, const sk_barg *args);

/* Libsheaf itself includes only the types above. */
#ifndef SK_ABI_TYPES_ONLY

#include <math.h>
#include <stdlib.h>
#include <string.h>
/* No <immintrin.h>: parsing it is over a second of a cold compile (gcc 12).
 * The few instructions below are the compilers' builtins that the
 * intrinsics wrap (the same names in gcc and clang). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi" /* vector arguments of static functions */
#endif

/* ------------------------------------------------------ runtime helpers */

static inline void *sk_alloc(const sk_abi *abi, size_t bytes) {
  bytes = (bytes + 63) & ~(size_t)63;
  if (abi && abi->alloc) return abi->alloc(abi->alloc_user, bytes ? bytes : 64);
  return aligned_alloc(64, bytes ? bytes : 64);
}

static inline void sk_free(const sk_abi *abi, void *p, size_t bytes) {
  bytes = (bytes + 63) & ~(size_t)63;
  if (abi && abi->free) abi->free(abi->alloc_user, p, bytes ? bytes : 64);
  else free(p);
}

static inline void sk_parallel(const sk_abi *abi, int64_t n, sk_task_fn fn, void *arg) {
  if (n <= 0) return;
  if (!abi || abi->threads <= 1 || !abi->parallel || n == 1) {
    for (int64_t t = 0; t < n; t++) fn(arg, t, 0);
    return;
  }
  abi->parallel(abi->pool, n, fn, arg, abi->threads);
}

static inline int64_t sk_floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static inline int64_t sk_floormod(int64_t a, int64_t b) { return a - sk_floordiv(a, b) * b; }
static inline int64_t sk_imin(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t sk_imax(int64_t a, int64_t b) { return a > b ? a : b; }

/* ------------------------------------------------------- scalar math */

/* max / min propagate NaN (either operand). */
static inline float sk_maxf(float a, float b) { return (a > b || a != a) ? a : b; }
static inline float sk_minf(float a, float b) { return (a < b || a != a) ? a : b; }
static inline float sk_reluf(float x) { return (x > 0 || x != x) ? x : 0.0f; }
static inline float sk_rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float sk_sigmoidf(float x) { return (float)(1.0 / (1.0 + exp(-(double)x))); }
/* x·Φ(x) = 0.5x·erfc(−x/√2), in double (no cancellation for x << 0) */
static inline float sk_geluf(float x) {
  double d = x < -40.0f ? -40.0 : (double)x;
  return (float)(0.5 * d * erfc(-d * 0.70710678118654752));
}
static inline float sk_softplusf(float x) {
  double d = x;
  return (float)(fmax(d, 0.0) + log1p(exp(-fabs(d))));
}
/* exp of x <= 0 (or NaN): one lane of sk_expnpW below, the same operations
 * (exact fmaf), so a row's scalar rest matches its vector lanes bit for
 * bit and costs no libm call; 0 below -87.3365. */
static inline float sk_expnpf(float x) {
  const float magic = 12583039.0f; /* 1.5·2^23 + 127 */
  float t = fmaf(x, 1.44269504088896341f, magic), s, n = t - magic;
  uint32_t bits;
  memcpy(&bits, &t, sizeof bits);
  bits <<= 23;
  memcpy(&s, &bits, sizeof s);
  float r = fmaf(n, -0x1.62E430p-1f, x);
  float p = fmaf(0x1.0F9F9Cp-7f, r, 0x1.573A1Ap-5f);
  p = fmaf(p, r, 0x1.555A80p-3f);
  p = fmaf(p, r, 0x1.FFFDC6p-2f);
  p = fmaf(p, r, 0x1.FFFFF6p-1f);
  return x < -0x1.5D589Ep6f ? 0.0f : fmaf(r * s, p, s);
}

/* ------------------------------------------------------- vector types */

typedef float sk_f32x8 __attribute__((vector_size(32)));
typedef int32_t sk_i32x8 __attribute__((vector_size(32)));
typedef uint32_t sk_u32x8 __attribute__((vector_size(32)));
typedef float sk_f32x16 __attribute__((vector_size(64)));
typedef int32_t sk_i32x16 __attribute__((vector_size(64)));
typedef uint32_t sk_u32x16 __attribute__((vector_size(64)));

static inline sk_f32x8 sk_bc8(float x) { return (sk_f32x8){x, x, x, x, x, x, x, x}; }
static inline sk_f32x16 sk_bc16(float x) {
  return (sk_f32x16){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x};
}
/* One lane of a vector register by value (a variable subscript on the
 * register itself would keep it in memory for the whole function). */
static inline float sk_lane8(sk_f32x8 v, int64_t i) {
  float t[8];
  __builtin_memcpy(t, &v, sizeof t);
  return t[i];
}
static inline sk_f32x8 sk_setlane8(sk_f32x8 v, int64_t i, float x) {
  float t[8];
  __builtin_memcpy(t, &v, sizeof t);
  t[i] = x;
  __builtin_memcpy(&v, t, sizeof t);
  return v;
}
static inline float sk_lane16(sk_f32x16 v, int64_t i) {
  float t[16];
  __builtin_memcpy(t, &v, sizeof t);
  return t[i];
}
static inline sk_f32x16 sk_setlane16(sk_f32x16 v, int64_t i, float x) {
  float t[16];
  __builtin_memcpy(t, &v, sizeof t);
  t[i] = x;
  __builtin_memcpy(&v, t, sizeof t);
  return v;
}
static inline sk_i32x8 sk_iota8(void) { return (sk_i32x8){0, 1, 2, 3, 4, 5, 6, 7}; }
static inline sk_i32x16 sk_iota16(void) {
  return (sk_i32x16){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
}

/* The per-width primitives that map to instructions where the target has
 * them: exact fused multiply-add, all-lanes test, square root. */
#if defined(__x86_64__) && defined(__FMA__)
static inline sk_f32x8 sk_fma8(sk_f32x8 a, sk_f32x8 b, sk_f32x8 c) {
  return __builtin_ia32_vfmaddps256(a, b, c); /* _mm256_fmadd_ps */
}
#else
static inline sk_f32x8 sk_fma8(sk_f32x8 a, sk_f32x8 b, sk_f32x8 c) {
  for (int i = 0; i < 8; i++) a[i] = fmaf(a[i], b[i], c[i]);
  return a;
}
#endif
#if defined(__x86_64__) && defined(__AVX512F__)
/* _mm512_fmadd_ps, _mm512_cmpneq_epi32_mask, _mm512_sqrt_ps (4: the
 * current rounding mode, _MM_FROUND_CUR_DIRECTION) */
static inline sk_f32x16 sk_fma16(sk_f32x16 a, sk_f32x16 b, sk_f32x16 c) {
  return __builtin_ia32_vfmaddps512_mask(a, b, c, (unsigned short)0xffff, 4);
}
static inline int sk_all16(sk_i32x16 m) {
  return (unsigned short)__builtin_ia32_cmpd512_mask(m, (sk_i32x16){0}, 4, (unsigned short)0xffff) == 0xffff;
}
#if defined(__clang__)
static inline sk_f32x16 sk_sqrt16(sk_f32x16 a) { return __builtin_ia32_sqrtps512(a, 4); }
#else
static inline sk_f32x16 sk_sqrt16(sk_f32x16 a) { return __builtin_ia32_sqrtps512_mask(a, a, (unsigned short)0xffff, 4); }
#endif
#else
static inline sk_f32x16 sk_fma16(sk_f32x16 a, sk_f32x16 b, sk_f32x16 c) {
  sk_f32x8 h[6], r[2];
  memcpy(h, &a, 64);
  memcpy(h + 2, &b, 64);
  memcpy(h + 4, &c, 64);
  r[0] = sk_fma8(h[0], h[2], h[4]);
  r[1] = sk_fma8(h[1], h[3], h[5]);
  memcpy(&a, r, 64);
  return a;
}
static inline int sk_all16(sk_i32x16 m) {
  int32_t r = -1;
  for (int i = 0; i < 16; i++) r &= m[i];
  return r != 0;
}
static inline sk_f32x16 sk_sqrt16(sk_f32x16 a) {
  for (int i = 0; i < 16; i++) a[i] = sqrtf(a[i]);
  return a;
}
#endif
#if defined(__x86_64__) && defined(__AVX__)
static inline int sk_all8(sk_i32x8 m) { return __builtin_ia32_movmskps256((sk_f32x8)m) == 0xff; }
static inline sk_f32x8 sk_sqrt8(sk_f32x8 a) { return __builtin_ia32_sqrtps256(a); } /* _mm256_sqrt_ps */
#else
static inline int sk_all8(sk_i32x8 m) {
  int32_t r = -1;
  for (int i = 0; i < 8; i++) r &= m[i];
  return r != 0;
}
static inline sk_f32x8 sk_sqrt8(sk_f32x8 a) {
  for (int i = 0; i < 8; i++) a[i] = sqrtf(a[i]);
  return a;
}
#endif
/* a·b + c, fused where the target has FMA (the GEMM update). */
#if defined(__FMA__)
#define sk_madd8 sk_fma8
#define sk_madd16 sk_fma16
#else
static inline sk_f32x8 sk_madd8(sk_f32x8 a, sk_f32x8 b, sk_f32x8 c) { return a * b + c; }
static inline sk_f32x16 sk_madd16(sk_f32x16 a, sk_f32x16 b, sk_f32x16 c) { return a * b + c; }
#endif

/* Max / min keeping a NaN of either operand, and horizontal reductions as
 * a tree (an ordering of the sum that differs from left to right by
 * rounding only; a NaN lane gives NaN): single instructions where the
 * target has them, else the portable forms in SK_VEC_DEFINE. */
/* (compiler builtins, not <immintrin.h>: parsing it is most of a cold
 * compile; the names they stand for are in the comments. 3 is _CMP_UNORD_Q.) */
#if defined(__x86_64__) && defined(__AVX__)
static inline sk_f32x8 sk_maxv8(sk_f32x8 a, sk_f32x8 b) {
  sk_f32x8 m = __builtin_ia32_maxps256(a, b); /* _mm256_max_ps: b where either is NaN */
  return __builtin_ia32_blendvps256(m, a, __builtin_ia32_cmpps256(a, a, 3)); /* _mm256_blendv_ps */
}
static inline sk_f32x8 sk_minv8(sk_f32x8 a, sk_f32x8 b) {
  sk_f32x8 m = __builtin_ia32_minps256(a, b); /* _mm256_min_ps */
  return __builtin_ia32_blendvps256(m, a, __builtin_ia32_cmpps256(a, a, 3));
}
static inline int sk_anynan8(sk_f32x8 v) { /* _mm256_movemask_ps(_mm256_cmp_ps(v, v, UNORD)) */
  return __builtin_ia32_movmskps256(__builtin_ia32_cmpps256(v, v, 3)) != 0;
}
/* The tree: lanes i and i + 4, then i and i + 2, then 0 and 1 (what the
 * 128-bit halving shuffles compute); max / min on NaN-free vectors only. */
/* Written on 4-lane halves so that gcc emits vector adds (lane by lane it
 * extracted and added each lane: twice the instructions; the same sums). */
typedef float sk_f32x4 __attribute__((vector_size(16)));
static inline float sk_hadd8_tree(sk_f32x8 v) {
  sk_f32x4 lo = {v[0], v[1], v[2], v[3]}, hi = {v[4], v[5], v[6], v[7]};
  sk_f32x4 s = lo + hi, t = {s[2], s[3], s[2], s[3]}; /* s_i = v[i] + v[i + 4] */
  sk_f32x4 u = s + t;                                 /* s0 + s2, s1 + s3 */
  return u[0] + u[1];
}
static inline float sk_fmax_nn(float a, float b) { return a > b ? a : b; }
static inline float sk_fmin_nn(float a, float b) { return a < b ? a : b; }
static inline sk_f32x4 sk_fmax4_nn(sk_f32x4 a, sk_f32x4 b) { /* _mm_max_ps: a > b ? a : b per lane */
  return __builtin_ia32_maxps(a, b);
}
static inline sk_f32x4 sk_fmin4_nn(sk_f32x4 a, sk_f32x4 b) { /* _mm_min_ps: a < b ? a : b per lane */
  return __builtin_ia32_minps(a, b);
}
static inline float sk_hmax8_tree(sk_f32x8 v) {
  sk_f32x4 lo = {v[0], v[1], v[2], v[3]}, hi = {v[4], v[5], v[6], v[7]};
  sk_f32x4 s = sk_fmax4_nn(lo, hi), t = {s[2], s[3], s[2], s[3]};
  sk_f32x4 u = sk_fmax4_nn(s, t);
  return sk_fmax_nn(u[0], u[1]);
}
static inline float sk_hmin8_tree(sk_f32x8 v) {
  sk_f32x4 lo = {v[0], v[1], v[2], v[3]}, hi = {v[4], v[5], v[6], v[7]};
  sk_f32x4 s = sk_fmin4_nn(lo, hi), t = {s[2], s[3], s[2], s[3]};
  sk_f32x4 u = sk_fmin4_nn(s, t);
  return sk_fmin_nn(u[0], u[1]);
}
#define SK_MAXV8(a, b) sk_maxv8(a, b)
#define SK_MINV8(a, b) sk_minv8(a, b)
#define SK_HADD_FAST8(v) return sk_hadd8_tree(v)
#define SK_HMAX_FAST8(v) if (!sk_anynan8(v)) return sk_hmax8_tree(v)
#define SK_HMIN_FAST8(v) if (!sk_anynan8(v)) return sk_hmin8_tree(v)
#else
#define SK_MAXV8(a, b) sk_sel8(((a) > (b)) | ((a) != (a)), a, b)
#define SK_MINV8(a, b) sk_sel8(((a) < (b)) | ((a) != (a)), a, b)
#define SK_HADD_FAST8(v) (void)0
#define SK_HMAX_FAST8(v) (void)0
#define SK_HMIN_FAST8(v) (void)0
#endif
/* 16 lanes: the portable forms (the compiler makes compare + blend of them;
 * the AVX-512 builtins' signatures differ between gcc and clang). */
#define SK_MAXV16(a, b) sk_sel16(((a) > (b)) | ((a) != (a)), a, b)
#define SK_MINV16(a, b) sk_sel16(((a) < (b)) | ((a) != (a)), a, b)
#define SK_HADD_FAST16(v) (void)0
#define SK_HMAX_FAST16(v) (void)0
#define SK_HMIN_FAST16(v) (void)0

/* A packed panel's vector (sk_ldp: a GEMM tile's B row) is loaded once into a
 * register for all the tile's rows: the empty asm makes the value opaque, so
 * gcc cannot fold the load into each row's FMA as a memory operand (a 4-row
 * tile then issued 12 loads per 8 FMAs and ran at half the FMA rate). */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__AVX__)
#define SK_KEEP_REG8(v) __asm__("" : "+x"(v))
#else
#define SK_KEEP_REG8(v) (void)0
#endif
#if defined(__x86_64__) && defined(__GNUC__) && defined(__AVX512F__)
#define SK_KEEP_REG16(v) __asm__("" : "+v"(v)) /* clang refuses a 64-byte operand without AVX-512 */
#else
#define SK_KEEP_REG16(v) (void)0
#endif

/* Everything else, for W = 8 and 16: loads and stores (unaligned, through
 * memcpy: vmovups), broadcast, lane select, NaN-propagating max / min,
 * comparisons as 1.0 / 0.0, horizontal reductions, and the vector math. */
#define SK_VEC_DEFINE(W)                                                                  \
  static inline sk_f32x##W sk_ld##W(const float *p) {                                      \
    sk_f32x##W v;                                                                          \
    memcpy(&v, p, sizeof v);                                                               \
    return v;                                                                              \
  }                                                                                        \
  static inline void sk_st##W(float *p, sk_f32x##W v) { memcpy(p, &v, sizeof v); }         \
  static inline sk_f32x##W sk_ldp##W(const float *p) {                                     \
    sk_f32x##W v = sk_ld##W(p);                                                            \
    SK_KEEP_REG##W(v);                                                                     \
    return v;                                                                              \
  }                                                                                        \
  static inline sk_f32x##W sk_sel##W(sk_i32x##W m, sk_f32x##W a, sk_f32x##W b) {           \
    return (sk_f32x##W)((m & (sk_i32x##W)a) | (~m & (sk_i32x##W)b));                       \
  }                                                                                        \
  static inline sk_f32x##W sk_max##W(sk_f32x##W a, sk_f32x##W b) {                         \
    return SK_MAXV##W(a, b);                                                               \
  }                                                                                        \
  static inline sk_f32x##W sk_min##W(sk_f32x##W a, sk_f32x##W b) {                         \
    return SK_MINV##W(a, b);                                                               \
  }                                                                                        \
  static inline sk_f32x##W sk_one##W(sk_i32x##W m) {                                        \
    return (sk_f32x##W)(m & (sk_i32x##W)sk_bc##W(1.0f));                                   \
  }                                                                                        \
  static inline sk_f32x##W sk_select##W(sk_f32x##W c, sk_f32x##W a, sk_f32x##W b) {        \
    return sk_sel##W(c != 0, a, b);                                                        \
  }                                                                                        \
  static inline float sk_hadd##W(sk_f32x##W v) {                                            \
    SK_HADD_FAST##W(v);                                                                    \
    float s = v[0];                                                                        \
    for (int i = 1; i < W; i++) s += v[i];                                                 \
    return s;                                                                              \
  }                                                                                        \
  static inline float sk_hmul##W(sk_f32x##W v) {                                            \
    float s = v[0];                                                                        \
    for (int i = 1; i < W; i++) s *= v[i];                                                 \
    return s;                                                                              \
  }                                                                                        \
  static inline float sk_hmax##W(sk_f32x##W v) {                                            \
    SK_HMAX_FAST##W(v);                                                                    \
    float s = v[0];                                                                        \
    for (int i = 1; i < W; i++) s = sk_maxf(s, v[i]);                                      \
    return s;                                                                              \
  }                                                                                        \
  static inline float sk_hmin##W(sk_f32x##W v) {                                            \
    SK_HMIN_FAST##W(v);                                                                    \
    float s = v[0];                                                                        \
    for (int i = 1; i < W; i++) s = sk_minf(s, v[i]);                                      \
    return s;                                                                              \
  }                                                                                        \
  static inline sk_f32x##W sk_abs##W(sk_f32x##W x) {                                        \
    return (sk_f32x##W)((sk_i32x##W)x & 0x7fffffff);                                       \
  }                                                                                        \
  static inline sk_f32x##W sk_relu##W(sk_f32x##W x) {                                       \
    return sk_sel##W((x > 0) | (x != x), x, sk_bc##W(0.0f));                              \
  }                                                                                        \
  static inline sk_f32x##W sk_rsqrt##W(sk_f32x##W x) { return 1.0f / sk_sqrt##W(x); }      \
  static inline sk_f32x##W sk_pow##W(sk_f32x##W a, sk_f32x##W b) {                          \
    for (int i = 0; i < W; i++) a[i] = powf(a[i], b[i]);                                   \
    return a;                                                                              \
  }                                                                                        \
  /* exp(r) for x = n·ln2 + r; *t_out = n + 1.5·2^23 (low bits hold n) */                  \
  static inline sk_f32x##W sk_exp_core##W(sk_f32x##W x, sk_f32x##W *t_out) {               \
    const sk_f32x##W magic = sk_bc##W(12582912.0f);                                        \
    sk_f32x##W t = sk_fma##W(x, sk_bc##W(1.44269504088896341f), magic);                    \
    sk_f32x##W n = t - magic;                                                              \
    sk_f32x##W r = sk_fma##W(-n, sk_bc##W(0.693359375f), x);                               \
    r = sk_fma##W(-n, sk_bc##W(-2.12194440e-4f), r);                                       \
    sk_f32x##W p = sk_bc##W(1.9875691500E-4f);                                             \
    p = sk_fma##W(p, r, sk_bc##W(1.3981999507E-3f));                                       \
    p = sk_fma##W(p, r, sk_bc##W(8.3334519073E-3f));                                       \
    p = sk_fma##W(p, r, sk_bc##W(4.1665795894E-2f));                                       \
    p = sk_fma##W(p, r, sk_bc##W(1.6666665459E-1f));                                       \
    p = sk_fma##W(p, r, sk_bc##W(5.0000001201E-1f));                                       \
    p = sk_fma##W(p, r * r, r + 1.0f);                                                     \
    *t_out = t;                                                                            \
    return p;                                                                              \
  }                                                                                        \
  /* exp: 2^n by an integer add to the exponent field when every lane is in               \
   * [-87, 88]; else clamped to [-104, 89] and 2^n applied as two normal                   \
   * factors, so overflow and gradual underflow round once. */                             \
  static inline sk_f32x##W sk_exp##W(sk_f32x##W x) {                                        \
    sk_f32x##W t, p = sk_exp_core##W(x, &t);                                               \
    sk_f32x##W y = (sk_f32x##W)((sk_i32x##W)p + ((sk_i32x##W)t << 23));                    \
    sk_i32x##W ok = sk_abs##W(x) <= 87.0f; /* false for NaN */                             \
    if (__builtin_expect(sk_all##W(ok), 1)) return y;                                      \
    sk_f32x##W xc = sk_sel##W(x > 89.0f, sk_bc##W(89.0f), x);                               \
    xc = sk_sel##W(xc < -104.0f, sk_bc##W(-104.0f), xc);                                   \
    p = sk_exp_core##W(xc, &t);                                                            \
    sk_i32x##W ni = (sk_i32x##W)t - 0x4b400000;                                            \
    sk_i32x##W n1 = ni >> 1, n2 = ni - n1;                                                 \
    sk_f32x##W s1 = (sk_f32x##W)((n1 + 127) << 23), s2 = (sk_f32x##W)((n2 + 127) << 23);   \
    return sk_sel##W(ok, y, (p * s1) * s2);                                                \
  }                                                                                        \
  /* exp of x <= 0 (or NaN), for arguments the kernel proves nonpositive                   \
   * (x - max x): the hand softmax's exp (src/kernels/rows_avx2.c: one-constant            \
   * reduction, degree-5 polynomial, 2^n from the bits of n + 127, no range                 \
   * test; <= 5 ulp on [-87.3, 0]); 0 below -87.3365 (subnormal results                     \
   * flushed: an error under 1.2e-38), NaN kept. */                                         \
  static inline sk_f32x##W sk_expnp##W(sk_f32x##W x) {                                      \
    const sk_f32x##W magic = sk_bc##W(12583039.0f); /* 1.5·2^23 + 127 */                  \
    sk_f32x##W t = sk_fma##W(x, sk_bc##W(1.44269504088896341f), magic);                    \
    sk_f32x##W s = (sk_f32x##W)((sk_i32x##W)t << 23);                                       \
    sk_f32x##W n = t - magic;                                                              \
    sk_f32x##W r = sk_fma##W(n, sk_bc##W(-0x1.62E430p-1f), x);                   \
    sk_f32x##W p = sk_fma##W(sk_bc##W(0x1.0F9F9Cp-7f), r, sk_bc##W(0x1.573A1Ap-5f));      \
    p = sk_fma##W(p, r, sk_bc##W(0x1.555A80p-3f));                                         \
    p = sk_fma##W(p, r, sk_bc##W(0x1.FFFDC6p-2f));                                         \
    p = sk_fma##W(p, r, sk_bc##W(0x1.FFFFF6p-1f));                                         \
    return sk_sel##W(x < -0x1.5D589Ep6f, sk_bc##W(0.0f), sk_fma##W(r * s, p, s));            \
  }                                                                                        \
  /* sigmoid: e = exp(-|x|); 1/(1+e) for x >= 0, e/(1+e) below */                         \
  static inline sk_f32x##W sk_sigmoid##W(sk_f32x##W x) {                                    \
    sk_f32x##W e = sk_exp##W((sk_f32x##W)((sk_i32x##W)x | (int32_t)0x80000000));           \
    sk_f32x##W num = sk_sel##W((sk_i32x##W)x >> 31, e, sk_bc##W(1.0f));                    \
    return num / (e + 1.0f);                                                               \
  }                                                                                        \
  /* tanh: |x| < 0.625 Cephes odd polynomial, else (1 - e)/(1 + e) with e = exp(-2|x|)     \
   * (sk_expnp: the argument is nonpositive, so no range test; e <= exp(-1.25) where it     \
   * is used, so no cancellation; 0 below -87.3, so tanh is 1 there); sign of x. Within     \
   * 1.9 ulp (tests/test_codegen_abi.c); the TreeLSTM cell's gate code 1.12-1.21x with     \
   * it against 1 - 2/(exp(2|x|)+1) through sk_exp (docs/CODEGEN.md, "Few rows and shared  \
   * weights") */                                                                           \
  static inline sk_f32x##W sk_tanh##W(sk_f32x##W x) {                                       \
    sk_f32x##W ax = sk_abs##W(x), s = x * x;                                               \
    sk_f32x##W p = sk_bc##W(-5.70498872745E-3f);                                           \
    p = sk_fma##W(p, s, sk_bc##W(2.06390887954E-2f));                                      \
    p = sk_fma##W(p, s, sk_bc##W(-5.37397155531E-2f));                                     \
    p = sk_fma##W(p, s, sk_bc##W(1.33314422036E-1f));                                      \
    p = sk_fma##W(p, s, sk_bc##W(-3.33332819422E-1f));                                     \
    sk_f32x##W small = sk_fma##W(p * s, ax, ax);                                           \
    sk_f32x##W e = sk_expnp##W(-(ax + ax));                                                \
    sk_f32x##W big = (1.0f - e) / (e + 1.0f);                                              \
    sk_f32x##W r = sk_sel##W(ax < 0.625f, small, big);                                     \
    return (sk_f32x##W)((sk_i32x##W)r | ((sk_i32x##W)x & (int32_t)0x80000000));           \
  }                                                                                        \
  /* log(m·2^e), x normal and positive */                                                  \
  static inline sk_f32x##W sk_log_core##W(sk_f32x##W x, sk_f32x##W e_adj) {                \
    sk_i32x##W bits = (sk_i32x##W)x;                                                       \
    sk_f32x##W e = __builtin_convertvector(                                                \
        (sk_i32x##W)((sk_u32x##W)bits >> 23) - 126, sk_f32x##W);                           \
    e = e - e_adj;                                                                         \
    sk_f32x##W m = (sk_f32x##W)((bits & 0x007fffff) | 0x3f000000);                         \
    sk_i32x##W lo = m < 0.707106781186547524f;                                             \
    e = e - (sk_f32x##W)(lo & (sk_i32x##W)sk_bc##W(1.0f));                                 \
    m = (m - 1.0f) + (sk_f32x##W)(lo & (sk_i32x##W)m);                                     \
    sk_f32x##W z = m * m, z2 = z * z;                                                      \
    sk_f32x##W q01 = sk_fma##W(sk_bc##W(-2.4999993993E-1f), m, sk_bc##W(3.3333331174E-1f)); \
    sk_f32x##W q23 = sk_fma##W(sk_bc##W(-1.6668057665E-1f), m, sk_bc##W(2.0000714765E-1f)); \
    sk_f32x##W q45 = sk_fma##W(sk_bc##W(-1.2420140846E-1f), m, sk_bc##W(1.4249322787E-1f)); \
    sk_f32x##W q67 = sk_fma##W(sk_bc##W(-1.1514610310E-1f), m, sk_bc##W(1.1676998740E-1f)); \
    sk_f32x##W q03 = sk_fma##W(q23, z, q01);                                               \
    sk_f32x##W q47 = sk_fma##W(q67, z, q45);                                               \
    sk_f32x##W q48 = sk_fma##W(sk_bc##W(7.0376836292E-2f), z2, q47);                       \
    sk_f32x##W p = sk_fma##W(q48, z2, q03);                                                \
    sk_f32x##W y = (p * m) * z;                                                            \
    y = sk_fma##W(e, sk_bc##W(-2.12194440e-4f), y);                                        \
    y = sk_fma##W(z, sk_bc##W(-0.5f), y);                                                  \
    return sk_fma##W(e, sk_bc##W(0.693359375f), m + y);                                    \
  }                                                                                        \
  /* log: denormals scaled by 2^23 first; log(±0) = -inf, log(x < 0) = NaN */              \
  static inline sk_f32x##W sk_log##W(sk_f32x##W x) {                                        \
    const float fmin = 1.17549435e-38f;                                                    \
    sk_i32x##W ok = (x >= fmin) & (x < (float)INFINITY);                                   \
    if (__builtin_expect(sk_all##W(ok), 1)) return sk_log_core##W(x, sk_bc##W(0.0f));      \
    sk_i32x##W tiny = x < fmin;                                                            \
    sk_f32x##W xs = sk_sel##W(tiny, x * 8388608.0f, x);                                    \
    sk_f32x##W r = sk_log_core##W(xs, (sk_f32x##W)(tiny & (sk_i32x##W)sk_bc##W(23.0f)));   \
    r = sk_sel##W(x == 0.0f, sk_bc##W(-(float)INFINITY), r);                               \
    r = sk_sel##W(x == (float)INFINITY, sk_bc##W((float)INFINITY), r);                     \
    return sk_sel##W(~(x >= 0.0f), sk_bc##W((float)NAN), r);                               \
  }                                                                                        \
  /* Φ(-u)·exp(u²/2) for u >= 0 (rational fit, rel. error 4e-8 on [0, 15]) */              \
  static inline sk_f32x##W sk_phi_r##W(sk_f32x##W u) {                                     \
    sk_f32x##W p = sk_bc##W(0.004153503105044365f);                                        \
    p = sk_fma##W(p, u, sk_bc##W(0.040883250534534454f));                                  \
    p = sk_fma##W(p, u, sk_bc##W(0.18397581577301025f));                                   \
    p = sk_fma##W(p, u, sk_bc##W(0.4392929673194885f));                                    \
    p = sk_fma##W(p, u, sk_bc##W(0.5f));                                                   \
    sk_f32x##W q = sk_bc##W(0.010411176830530167f);                                        \
    q = sk_fma##W(q, u, sk_bc##W(0.10248523205518723f));                                   \
    q = sk_fma##W(q, u, sk_bc##W(0.47142618894577026f));                                   \
    q = sk_fma##W(q, u, sk_bc##W(1.2055768966674805f));                                    \
    q = sk_fma##W(q, u, sk_bc##W(1.6764709949493408f));                                    \
    q = sk_fma##W(q, u, sk_bc##W(1.0f));                                                   \
    return p / q;                                                                          \
  }                                                                                        \
  /* exp(-u²) with u² split exactly into h + l by an FMA */                                \
  static inline sk_f32x##W sk_expnsq##W(sk_f32x##W u, float scale) {                         \
    sk_f32x##W h = u * u, l = sk_fma##W(u, u, -h);                                         \
    sk_f32x##W e = sk_exp##W(h * -scale);                                                  \
    return sk_fma##W(-e, l * scale, e);                                                    \
  }                                                                                        \
  /* gelu (erf form) = x·Φ(x): Φ(-u) = exp(-u²/2)·R(u), u = |x| */                         \
  static inline sk_f32x##W sk_gelu##W(sk_f32x##W x) {                                       \
    sk_f32x##W ax = sk_abs##W(x);                                                          \
    sk_f32x##W u = sk_sel##W(ax > 20.0f, sk_bc##W(20.0f), ax);                              \
    sk_f32x##W e = sk_expnsq##W(u, 0.5f), R = sk_phi_r##W(u);                              \
    x = sk_sel##W(x < -20.0f, sk_bc##W(-20.0f), x);                                        \
    sk_f32x##W neg = (x * R) * e;                                                          \
    sk_f32x##W pos = x * sk_fma##W(-e, R, sk_bc##W(1.0f));                                 \
    return sk_sel##W(x < 0.0f, neg, pos);                                                  \
  }                                                                                        \
  /* erf: |x| < 1 Cephes x·P(x²); else sign(x)·(1 - erfc(|x|)),                             \
   * erfc(u) = 2·exp(-u²)·R(u·√2) */                                                       \
  static inline sk_f32x##W sk_erf##W(sk_f32x##W x) {                                        \
    sk_f32x##W ax = sk_abs##W(x), z = x * x;                                               \
    sk_f32x##W p = sk_bc##W(7.853861353153693E-5f);                                        \
    p = sk_fma##W(p, z, sk_bc##W(-8.010193625184903E-4f));                                 \
    p = sk_fma##W(p, z, sk_bc##W(5.188327685732524E-3f));                                  \
    p = sk_fma##W(p, z, sk_bc##W(-2.685381193529856E-2f));                                 \
    p = sk_fma##W(p, z, sk_bc##W(1.128358514861418E-1f));                                 \
    p = sk_fma##W(p, z, sk_bc##W(-3.761262582423300E-1f));                                 \
    p = sk_fma##W(p, z, sk_bc##W(1.128379165726710E0f));                                   \
    sk_f32x##W small = x * p;                                                              \
    sk_f32x##W u = sk_sel##W(ax > 10.0f, sk_bc##W(10.0f), ax);                              \
    sk_f32x##W big = sk_fma##W(-2.0f * sk_expnsq##W(u, 1.0f),                              \
                               sk_phi_r##W(u * 1.41421356237309505f), sk_bc##W(1.0f));     \
    big = (sk_f32x##W)((sk_i32x##W)big | ((sk_i32x##W)x & (int32_t)0x80000000));          \
    return sk_sel##W(ax < 1.0f, small, big);                                               \
  }                                                                                        \
  /* softplus = max(x, 0) + log1p(exp(-|x|)), log1p(e) = log(1+e)·e/((1+e)-1) */           \
  static inline sk_f32x##W sk_softplus##W(sk_f32x##W x) {                                   \
    sk_f32x##W e = sk_exp##W(-sk_abs##W(x)), u = e + 1.0f, d = u - 1.0f;                    \
    sk_f32x##W l1p = sk_sel##W(d == 0.0f, e, sk_log##W(u) * (e / d));                      \
    return sk_sel##W(x > 0.0f, x, sk_bc##W(0.0f)) + l1p;                                   \
  }

/* Out-of-line copies of the vector math for the slow (edge) copy of an
 * unswitched tile (emit_c_expr.c): compiled once per kernel instead of
 * inlined into every tile register's epilogue. */
#define SK_COLD_DEFINE1(F, W)                                                             \
  static __attribute__((noinline, cold, unused)) sk_f32x##W sk_##F##_cold##W(sk_f32x##W x) { \
    return sk_##F##W(x);                                                                   \
  }
#define SK_COLD_DEFINE(W)                                                                 \
  SK_COLD_DEFINE1(exp, W)                                                                 \
  SK_COLD_DEFINE1(log, W)                                                                 \
  SK_COLD_DEFINE1(tanh, W)                                                                \
  SK_COLD_DEFINE1(sigmoid, W)                                                             \
  SK_COLD_DEFINE1(gelu, W)                                                                \
  SK_COLD_DEFINE1(softplus, W)                                                            \
  SK_COLD_DEFINE1(erf, W)

SK_VEC_DEFINE(8)
SK_VEC_DEFINE(16)
SK_COLD_DEFINE(8)
SK_COLD_DEFINE(16)

#endif /* SK_ABI_TYPES_ONLY */
#endif
