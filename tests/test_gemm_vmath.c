/*
 * test_gemm_vmath.c — the vector math behind the GEMM epilogues and the row
 * kernels (src/kernels/vmath.h): max ulp error against double precision
 * over a dense sample of the whole f32 range (every 1021st bit pattern, both
 * signs, plus runs of consecutive floats at the overflow / underflow
 * boundaries and around 0), at every ISA level up to SHEAF_ISA; special
 * values (±0, ±inf, NaN); the same for the division-free AVX-512 sigmoid
 * and tanh (vmath_avx512.h) that the runtime's pointwise programs use.
 * SHEAF_VMATH_REPORT=1 prints the measured figures.
 * The exhaustive sweep over all 2^32 inputs is `make bench-vmath`.
 */
#include <float.h>
#include <stdlib.h>

#include "harness.h"
#include "kernels/vmath.h"
#if defined(__x86_64__)
#include "kernels/vmath_avx512.h"
#endif

static double ulp_of(double ref) {
  double a = fabs(ref);
  if (a < FLT_MIN) return 0x1p-149;
  int e;
  frexp(a, &e);
  return ldexp(1.0, e - 24);
}

static double ref_fn(sh_vmath_fn fn, double x) {
  switch (fn) {
  case SH_VMATH_EXP: return exp(x);
  case SH_VMATH_SIGMOID: return 1.0 / (1.0 + exp(-x));
  case SH_VMATH_TANH: return tanh(x);
  case SH_VMATH_GELU_TANH:
    return x / (1.0 + exp(-2.0 * 0.7978845608028654 * (x + 0.044715 * x * x * x)));
  case SH_VMATH_GELU_ERF: return 0.5 * x * erfc(-x * 0.7071067811865476);
  case SH_VMATH_LOG: return log(x);
  }
  return x;
}

static float bits_to_f(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Error in ulps of y against the exact value ref (finite x); a result whose
 * class (NaN, ±inf) differs from the correctly rounded one counts as 1e9. */
static double err_ulp(float y, double ref) {
  if (isnan(ref)) return isnan(y) ? 0 : 1e9;
  float rf = (float)ref;
  if (isinf(rf)) return y == rf ? 0 : 1e9;
  if (!isfinite(y)) return 1e9;
  return fabs((double)y - ref) / ulp_of(ref);
}

typedef struct ucase {
  sh_vmath_fn fn;
  const char *name;
  float lo, hi;  /* inputs checked */
  double bound;  /* max ulp */
} ucase;

/* The sample: every 1021st pattern of each sign, and 4096 consecutive
 * floats from each of these starting points (boundaries of the functions). */
static const float g_runs[] = {88.72f, -87.33f, -103.97f, -88.72f, 0.0f, -0.0f,
                               1.17549435e-38f, 0.625f, -9.0f, -13.0f, 1.0f, 0.70710677f};

static int sample(uint64_t i, float *x) { /* 0 when past the end */
  const uint64_t per_sign = 0x7f800000u / 1021 + 1, runs = SH_ARRAY_LEN(g_runs) * 4096;
  if (i < 2 * per_sign) {
    *x = bits_to_f((uint32_t)((i % per_sign) * 1021) | (i >= per_sign ? 0x80000000u : 0));
    return 1;
  }
  i -= 2 * per_sign;
  if (i >= runs) return 0;
  uint32_t b;
  float s = g_runs[i / 4096];
  memcpy(&b, &s, sizeof b);
  *x = bits_to_f(b + (uint32_t)(i % 4096) - 2048u * (s != 0.0f));
  return 1;
}

/* y[0, n) = fn(x[0, n)) by evaluator `which` (an ISA, or the fast variants). */
typedef void (*eval_fn)(int which, sh_vmath_fn fn, int n, const float *x, float *y);

enum { SWEEP_B = 4096, SWEEP_MAX_EVAL = 4 };

/* The worst ulp error of fn over the sample's inputs in [lo, hi], for
 * evaluators 0 .. n_eval - 1 (each chunk's reference computed once):
 * worst[e], and wx[e] the input where it occurs. */
static void sweep(sh_vmath_fn fn, float lo, float hi, eval_fn eval, int n_eval, double *worst,
                  float *wx) {
  static float x[SWEEP_B], y[SWEEP_MAX_EVAL][SWEEP_B];
  for (int e = 0; e < n_eval; e++) worst[e] = 0, wx[e] = 0;
  uint64_t i = 0;
  for (bool more = true; more;) {
    int n = 0;
    float v;
    while (n < SWEEP_B && (more = sample(i, &v))) {
      i++;
      if (v >= lo && v <= hi) x[n++] = v;
    }
    for (int e = 0; e < n_eval; e++) eval(e, fn, n, x, y[e]);
    for (int k = 0; k < n; k++) {
      double r = ref_fn(fn, x[k]);
      for (int e = 0; e < n_eval; e++) {
        double err = err_ulp(y[e][k], r);
        if (!(err <= worst[e])) {
          worst[e] = err;
          wx[e] = x[k];
        }
      }
    }
  }
}

static void isa_eval(int isa, sh_vmath_fn fn, int n, const float *x, float *y) {
  sh_vmath_f32((sheaf_isa)isa, fn, n, x, y);
}

TEST(gemm_vmath_ulp_bounds) {
  static const ucase cases[] = {
      {SH_VMATH_EXP, "exp", -FLT_MAX, FLT_MAX, 4},
      {SH_VMATH_SIGMOID, "sigmoid", -FLT_MAX, FLT_MAX, 4},
      {SH_VMATH_TANH, "tanh", -FLT_MAX, FLT_MAX, 4},
      {SH_VMATH_LOG, "log", -FLT_MAX, FLT_MAX, 2},
      {SH_VMATH_GELU_ERF, "gelu_erf", -FLT_MAX, FLT_MAX, 8},
      {SH_VMATH_GELU_TANH, "gelu_tanh", -4.0f, FLT_MAX, 32}, /* ill-conditioned for x << 0 */
      {SH_VMATH_GELU_TANH, "gelu_tanh", -FLT_MAX, FLT_MAX, 256},
  };
  bool report = getenv("SHEAF_VMATH_REPORT") != NULL;
  int n_isa = (int)sheaf_cpu_isa() + 1;
  for (size_t c = 0; c < SH_ARRAY_LEN(cases); c++) {
    const ucase *uc = &cases[c];
    double worst[SWEEP_MAX_EVAL];
    float wx[SWEEP_MAX_EVAL];
    sweep(uc->fn, uc->lo, uc->hi, isa_eval, n_isa, worst, wx);
    for (int isa = 0; isa < n_isa; isa++) {
      if (report)
        printf("vmath %-9s %-6s max %.2f ulp (at x = %.9g) on [%g, %g]\n", uc->name,
               sheaf_isa_name((sheaf_isa)isa), worst[isa], wx[isa], uc->lo, uc->hi);
      if (!(worst[isa] <= uc->bound))
        th_fail(__FILE__, __LINE__, "vmath %s %s: %.2f ulp at x = %.9g (bound %.0f)", uc->name,
                sheaf_isa_name((sheaf_isa)isa), worst[isa], wx[isa], uc->bound);
    }
  }
}

/* Exact expectations at special inputs; NaN expected as NaN. */
typedef struct special {
  sh_vmath_fn fn;
  float x, y;
  bool sign; /* also check the sign of a zero result */
} special;

static bool special_ok(const special *sp, float got) {
  return isnan(sp->y) ? isnan(got) : got == sp->y && (!sp->sign || signbit(got) == signbit(sp->y));
}

TEST(gemm_vmath_special_values) {
  const float inf = INFINITY, nan = NAN;
  static special sp[64];
  int n = 0;
#define SP(f, a, b, s) sp[n++] = (special){f, a, b, s}
  SP(SH_VMATH_EXP, 0.0f, 1.0f, false), SP(SH_VMATH_EXP, -0.0f, 1.0f, false);
  SP(SH_VMATH_EXP, inf, inf, false), SP(SH_VMATH_EXP, -inf, 0.0f, true);
  SP(SH_VMATH_EXP, nan, nan, false), SP(SH_VMATH_EXP, 88.73f, inf, false);
  SP(SH_VMATH_EXP, 1e30f, inf, false), SP(SH_VMATH_EXP, -104.0f, 0.0f, true);
  SP(SH_VMATH_EXP, -1e30f, 0.0f, true);
  SP(SH_VMATH_SIGMOID, 0.0f, 0.5f, false), SP(SH_VMATH_SIGMOID, -0.0f, 0.5f, false);
  SP(SH_VMATH_SIGMOID, inf, 1.0f, false), SP(SH_VMATH_SIGMOID, -inf, 0.0f, true);
  SP(SH_VMATH_SIGMOID, nan, nan, false), SP(SH_VMATH_SIGMOID, 100.0f, 1.0f, false);
  SP(SH_VMATH_SIGMOID, -200.0f, 0.0f, true);
  SP(SH_VMATH_TANH, 0.0f, 0.0f, true), SP(SH_VMATH_TANH, -0.0f, -0.0f, true);
  SP(SH_VMATH_TANH, inf, 1.0f, false), SP(SH_VMATH_TANH, -inf, -1.0f, false);
  SP(SH_VMATH_TANH, nan, nan, false), SP(SH_VMATH_TANH, 1e30f, 1.0f, false);
  SP(SH_VMATH_TANH, -20.0f, -1.0f, false), SP(SH_VMATH_TANH, 1e-30f, 1e-30f, false);
  SP(SH_VMATH_LOG, 1.0f, 0.0f, true), SP(SH_VMATH_LOG, 0.0f, -inf, false);
  SP(SH_VMATH_LOG, -0.0f, -inf, false), SP(SH_VMATH_LOG, -1.0f, nan, false);
  SP(SH_VMATH_LOG, -inf, nan, false), SP(SH_VMATH_LOG, inf, inf, false);
  SP(SH_VMATH_LOG, nan, nan, false);
  SP(SH_VMATH_GELU_TANH, 0.0f, 0.0f, true), SP(SH_VMATH_GELU_TANH, -0.0f, -0.0f, true);
  SP(SH_VMATH_GELU_TANH, inf, inf, false), SP(SH_VMATH_GELU_TANH, -inf, -0.0f, false);
  SP(SH_VMATH_GELU_TANH, nan, nan, false), SP(SH_VMATH_GELU_TANH, 1e30f, 1e30f, false);
  SP(SH_VMATH_GELU_ERF, 0.0f, 0.0f, true), SP(SH_VMATH_GELU_ERF, -0.0f, -0.0f, true);
  SP(SH_VMATH_GELU_ERF, inf, inf, false), SP(SH_VMATH_GELU_ERF, -inf, -0.0f, false);
  SP(SH_VMATH_GELU_ERF, nan, nan, false), SP(SH_VMATH_GELU_ERF, 1e30f, 1e30f, false);
  SP(SH_VMATH_GELU_ERF, -30.0f, -0.0f, false);
#undef SP
  for (int isa = 0; isa <= (int)sheaf_cpu_isa(); isa++)
    for (int i = 0; i < n; i++) {
      /* each input alone and in a full vector of ordinary values */
      float in[9] = {0.5f, 1.5f, -2.0f, 3.0f, 0.25f, -0.75f, 2.0f, 1.0f, sp[i].x}, out[9];
      for (int pass = 0; pass < 2; pass++) {
        float got;
        if (pass == 0) {
          sh_vmath_f32((sheaf_isa)isa, sp[i].fn, 1, &sp[i].x, &got);
        } else {
          sh_vmath_f32((sheaf_isa)isa, sp[i].fn, 9, in, out);
          got = out[8];
        }
        if (!special_ok(&sp[i], got))
          th_fail(__FILE__, __LINE__, "vmath fn %d %s: f(%g) = %g, expected %g", (int)sp[i].fn,
                  sheaf_isa_name((sheaf_isa)isa), sp[i].x, got, sp[i].y);
      }
    }
  float y[3];
  for (int isa = 0; isa <= (int)sheaf_cpu_isa(); isa++) {
    sh_vmath_f32((sheaf_isa)isa, SH_VMATH_EXP, 3, (float[]){0.0f, 1.0f, -1.0f}, y);
    CHECK_NEAR(y[1], 2.718281828, 3e-7);
    CHECK_NEAR(y[2], 0.3678794412, 1e-7);
  }
}

#if defined(__x86_64__)
/* y = f(x) through the division-free AVX-512 sigmoid (fn SIGMOID) or tanh. */
__attribute__((target("avx512f,avx512dq,fma"))) static void fast_eval(int which, sh_vmath_fn fn,
                                                                       int n, const float *x,
                                                                       float *y) {
  (void)which; /* one evaluator */
  for (int i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
    __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    v = fn == SH_VMATH_SIGMOID ? sh_sigmoid_fast_avx512(v) : sh_tanh_fast_avx512(v);
    _mm512_mask_storeu_ps(y + i, m, v);
  }
}
#endif

TEST(gemm_vmath_fast_avx512_bounds_and_specials) {
#if defined(__x86_64__)
  if (sheaf_cpu_isa() < SHEAF_ISA_AVX512) return; /* no AVX-512 here: nothing to check */
  static const sh_vmath_fn fns[2] = {SH_VMATH_SIGMOID, SH_VMATH_TANH};
  for (int f = 0; f < 2; f++) {
    double worst;
    float wx;
    sweep(fns[f], -INFINITY, INFINITY, fast_eval, 1, &worst, &wx); /* every sampled input */
    if (getenv("SHEAF_VMATH_REPORT"))
      printf("vmath %-9s avx512-fast max %.2f ulp (at x = %.9g)\n",
             f ? "tanh" : "sigmoid", worst, wx);
    if (!(worst <= 4))
      th_fail(__FILE__, __LINE__, "fast %s: %.2f ulp at x = %.9g (bound 4)",
              f ? "tanh" : "sigmoid", worst, wx);
  }
  const float inf = INFINITY, nan = NAN;
  static const special sp[] = {
      {SH_VMATH_SIGMOID, 0.0f, 0.5f, false},  {SH_VMATH_SIGMOID, -0.0f, 0.5f, false},
      {SH_VMATH_SIGMOID, inf, 1.0f, false},   {SH_VMATH_SIGMOID, -inf, 0.0f, true},
      {SH_VMATH_SIGMOID, nan, nan, false},    {SH_VMATH_SIGMOID, 100.0f, 1.0f, false},
      {SH_VMATH_SIGMOID, -200.0f, 0.0f, true}, {SH_VMATH_TANH, 0.0f, 0.0f, true},
      {SH_VMATH_TANH, -0.0f, -0.0f, true},    {SH_VMATH_TANH, inf, 1.0f, false},
      {SH_VMATH_TANH, -inf, -1.0f, false},    {SH_VMATH_TANH, nan, nan, false},
      {SH_VMATH_TANH, 1e30f, 1.0f, false},    {SH_VMATH_TANH, -20.0f, -1.0f, false},
      {SH_VMATH_TANH, 9.1f, 1.0f, false},     {SH_VMATH_TANH, 1e-30f, 1e-30f, false},
  };
  for (size_t k = 0; k < SH_ARRAY_LEN(sp); k++) {
    float got;
    fast_eval(0, sp[k].fn, 1, &sp[k].x, &got);
    if (!special_ok(&sp[k], got))
      th_fail(__FILE__, __LINE__, "fast %s(%g) = %g, expected %g",
              sp[k].fn == SH_VMATH_TANH ? "tanh" : "sigmoid", sp[k].x, got, sp[k].y);
  }
#endif
}
