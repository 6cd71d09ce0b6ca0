/*
 * test_gemm_vmath.c — the vector math behind the GEMM epilogues
 * (src/kernels/vmath.h): max ulp error against double-precision libm over a
 * dense sample of the f32 range (every 257th bit pattern), at every ISA
 * level up to SHEAF_ISA; special values. SHEAF_VMATH_REPORT=1 prints the
 * measured figures.
 */
#include <stdlib.h>

#include "harness.h"
#include "kernels/vmath.h"

static double ulp_of(double ref) {
  double a = fabs(ref);
  if (a < 1.1754943508222875e-38) return 1.401298464324817e-45;
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
    return x / (1.0 + exp(-2.0 * 0.7978845608028654 * (x + 0.044715 * x * x * x)));  case SH_VMATH_GELU_ERF: return 0.5 * x * erfc(-x * 0.7071067811865476);
  case SH_VMATH_LOG: return log(x);
  }
  return x;
}

static float bits_to_f(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Max ulp error of fn over [lo, hi] (bit patterns of both signs, stride 257). */
static double max_ulp(sheaf_isa isa, sh_vmath_fn fn, float lo, float hi, float *worst_x) {
  enum { B = 4096 };
  static float x[B], y[B];
  double worst = 0;
  int n = 0;
  for (int sign = 0; sign < 2; sign++)
    for (uint64_t u = 0; u <= 0x7f800000u; u += 257) {
      float v = bits_to_f((uint32_t)u | (sign ? 0x80000000u : 0));
      if (v < lo || v > hi) continue;
      x[n++] = v;
      if (n == B || u + 257 > 0x7f800000u) {
        sh_vmath_f32(isa, fn, n, x, y);
        for (int i = 0; i < n; i++) {
          double r = ref_fn(fn, x[i]);
          double e = fabs((double)y[i] - r) / ulp_of(r);
          if (!(e <= worst)) {
            worst = e;
            *worst_x = x[i];
          }
        }
        n = 0;
      }
    }
  return worst;
}

TEST(gemm_vmath_ulp_bounds) {
  static const struct {
    sh_vmath_fn fn;
    const char *name;
    float lo, hi;
    double bound;
  } cases[] = {
      {SH_VMATH_EXP, "exp", -87.3f, 88.0f, 4},
      {SH_VMATH_SIGMOID, "sigmoid", -87.0f, 3.0e38f, 4},
      {SH_VMATH_TANH, "tanh", -3.0e38f, 3.0e38f, 4},
      {SH_VMATH_GELU_TANH, "gelu_tanh", -4.0f, 3.0e38f, 32} /* ill-conditioned for x << 0 */,
  };
  bool report = getenv("SHEAF_VMATH_REPORT") != NULL;
  for (int isa = 0; isa <= (int)sheaf_cpu_isa(); isa++)
    for (size_t c = 0; c < SH_ARRAY_LEN(cases); c++) {
      float wx = 0;
      double u = max_ulp((sheaf_isa)isa, cases[c].fn, cases[c].lo, cases[c].hi, &wx);
      if (report)
        printf("vmath %-9s %-6s max %.2f ulp (at x = %.9g) on [%g, %g]\n", cases[c].name,
               sheaf_isa_name((sheaf_isa)isa), u, wx, cases[c].lo, cases[c].hi);
      if (!(u <= cases[c].bound))
        th_fail(__FILE__, __LINE__, "vmath %s %s: %.2f ulp at x = %.9g (bound %.0f)",
                cases[c].name, sheaf_isa_name((sheaf_isa)isa), u, wx, cases[c].bound);
    }
}

TEST(gemm_vmath_special_values) {
  float x[12] = {0.0f, -0.0f, 1e-30f, -1e-30f, 100.0f, -100.0f, 1e30f, -1e30f,
                 INFINITY, -INFINITY, 20.0f, -20.0f};
  float y[12];
  for (int isa = 0; isa <= (int)sheaf_cpu_isa(); isa++) {
    sh_vmath_f32((sheaf_isa)isa, SH_VMATH_SIGMOID, 12, x, y);
    CHECK_NEAR(y[0], 0.5, 0);
    CHECK_NEAR(y[4], 1.0, 0);
    CHECK_NEAR(y[5], 0.0, 1e-37);
    CHECK_NEAR(y[8], 1.0, 0);
    CHECK_NEAR(y[9], 0.0, 1e-37);
    sh_vmath_f32((sheaf_isa)isa, SH_VMATH_TANH, 12, x, y);
    CHECK_NEAR(y[0], 0.0, 0);
    CHECK(signbit(y[1]));
    CHECK_NEAR(y[2], 1e-30, 1e-37);
    CHECK_NEAR(y[6], 1.0, 0);
    CHECK_NEAR(y[7], -1.0, 0);
    CHECK_NEAR(y[8], 1.0, 0);
    CHECK_NEAR(y[9], -1.0, 0);
    CHECK_NEAR(y[11], -1.0, 0);
    float nan_in = NAN, out;
    sh_vmath_f32((sheaf_isa)isa, SH_VMATH_TANH, 1, &nan_in, &out);
    CHECK(isnan(out));
    sh_vmath_f32((sheaf_isa)isa, SH_VMATH_EXP, 1, &nan_in, &out);
    CHECK(isnan(out));
    sh_vmath_f32((sheaf_isa)isa, SH_VMATH_EXP, 3, (float[]){0.0f, 1.0f, -1.0f}, y);
    CHECK_NEAR(y[0], 1.0, 0);
    CHECK_NEAR(y[1], 2.718281828, 3e-7);
    CHECK_NEAR(y[2], 0.3678794412, 1e-7);
  }
}
