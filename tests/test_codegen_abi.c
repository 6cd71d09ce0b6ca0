/*
 * test_codegen_abi.c — the generated kernels' ABI header
 * (src/codegen/sheaf_kernel_abi.h): the copy embedded in the library equals
 * the file; its vector math (8 and 16 lanes) against double-precision
 * libm over a dense sample of the f32 range (every 8191st bit pattern of
 * each sign plus runs of 4096 consecutive floats at the functions'
 * boundaries), in ulps at the exact result, and the special values — at
 * the AVX2 level, the AVX-512 level when the host has it (else compiled
 * only), and the portable fallbacks (compiled without AVX). Bounds: those
 * of tests/test_gemm_vmath.c for the algorithms shared with
 * src/kernels/vmath_avx2.h (exp, sigmoid, tanh 4 ulp, log 2, GELU 8), and
 * measured + margin for the two added here (erf 4, softplus 4).
 * SHEAF_VMATH_REPORT=1 prints the worst errors.
 */
#include <float.h>
#include <stdlib.h>

#include "codegen/lir_emit.h"
#include "harness.h"
#include "lir_cc.h"

TEST(codegen_abi_header_embedded) {
  size_t n;
  const char *h = sh_lir_abi_header(&n);
  CHECK(n > 1000 && strlen(h) == n);
  CHECK_CONTAINS(h, "typedef struct sk_abi {");
  CHECK_CONTAINS(h, "#define SK_ABI_VERSION 1");
  FILE *f = fopen("src/codegen/sheaf_kernel_abi.h", "rb");
  if (!f) {
    fprintf(stderr, "  note: src/codegen/sheaf_kernel_abi.h not found from here; comparison skipped\n");
    return;
  }
  char *disk = malloc(n + 2);
  size_t got = fread(disk, 1, n + 1, f);
  fclose(f);
  CHECK_EQ_SIZE(got, n);
  CHECK(got == n && memcmp(disk, h, n) == 0);
  free(disk);
}

TEST(codegen_abi_init) {
  sheaf_ctx *ctx = th_ctx();
  sk_abi abi;
  sh_lir_abi_init(ctx, 0, &abi);
  CHECK_EQ_INT(abi.version, SK_ABI_VERSION);
  CHECK_EQ_INT(abi.threads, 2);
  CHECK(abi.parallel && abi.pool && abi.alloc && abi.free);
  sh_lir_abi_init(ctx, 1, &abi);
  CHECK_EQ_INT(abi.threads, 1);
  void *p = abi.alloc(abi.alloc_user, 128);
  CHECK(p && ((uintptr_t)p & 63) == 0);
  abi.free(abi.alloc_user, p, 128);
}

static const char *vm_source =
    "#include \"sheaf_kernel_abi.h\"\n"
    "#define APPLY(W)                                                               \\\n"
    "  void vm_apply##W(int fn, const float *x, float *y, int64_t n) {             \\\n"
    "    for (int64_t i = 0; i + W <= n; i += W) {                                  \\\n"
    "      sk_f32x##W v = sk_ld##W(x + i), r = v;                                   \\\n"
    "      switch (fn) {                                                           \\\n"
    "      case 0: r = sk_exp##W(v); break;                                        \\\n"
    "      case 1: r = sk_sigmoid##W(v); break;                                    \\\n"
    "      case 2: r = sk_tanh##W(v); break;                                       \\\n"
    "      case 3: r = sk_log##W(v); break;                                        \\\n"
    "      case 4: r = sk_gelu##W(v); break;                                       \\\n"
    "      case 5: r = sk_erf##W(v); break;                                        \\\n"
    "      case 6: r = sk_softplus##W(v); break;                                   \\\n"
    "      case 7: r = sk_rsqrt##W(v); break;                                      \\\n"
    "      case 8: r = sk_expnp##W(-sk_abs##W(v)); break;                          \\\n"
    "      }                                                                       \\\n"
    "      sk_st##W(y + i, r);                                                     \\\n"
    "    }                                                                         \\\n"
    "  }\n"
    "APPLY(8)\n"
    "APPLY(16)\n";

typedef void (*vm_fn)(int fn, const float *x, float *y, int64_t n);

static const struct {
  const char *name;
  double bound;
} g_fns[] = {{"exp", 4}, {"sigmoid", 4}, {"tanh", 4}, {"log", 2},
             {"gelu", 8}, {"erf", 4},     {"softplus", 4}, {"rsqrt", 2},
             {"exp_nonpos", 5}}; /* of -|x|: flushed to 0 below -87.3365 */

static double ref(int fn, double x) {
  switch (fn) {
  case 0: return exp(x);
  case 1: return 1.0 / (1.0 + exp(-x));
  case 2: return tanh(x);
  case 3: return log(x);
  case 4: /* the result is -0 below -40, and gelu(-inf) = -0 */
    if (x < -40) x = -40;
    return 0.5 * x * erfc(-x * 0.7071067811865476);
  case 5: return erf(x);
  case 6: return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
  case 7: return 1.0 / sqrt(x);
  case 8: return -fabs(x) < -87.33654022216797 ? 0.0 : exp(-fabs(x));
  }
  return x;
}

static double ulp_of(double r) {
  double a = fabs(r);
  if (a < FLT_MIN) return 0x1p-149;
  int e;
  frexp(a, &e);
  return ldexp(1.0, e - 24);
}

static double err_ulp(float y, double r) {
  if (isnan(r)) return isnan(y) ? 0 : 1e9;
  float rf = (float)r;
  if (isinf(rf)) return y == rf ? 0 : 1e9;
  if (!isfinite(y)) return 1e9;
  return fabs((double)y - r) / ulp_of(r);
}

static float bits_f(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* The sample: every 8191st finite pattern of each sign, runs of 4096 at
 * boundaries, then the special values. */
static float *sample(int64_t *n_out) {
  static const float runs[] = {88.72f, -87.33f, -103.97f, 0.0f, -0.0f, 1.17549435e-38f, 0.625f,
                               -0.625f, 1.0f, -1.0f, 0.70710677f, -9.0f, 10.0f, 20.0f, -20.0f};
  int64_t per = 0x7f800000 / 8191 + 1, n = 2 * per + (int64_t)SH_ARRAY_LEN(runs) * 4096 + 16;
  float *x = malloc(sizeof(float) * (size_t)(n + 16));
  int64_t m = 0;
  for (int64_t i = 0; i < per; i++) {
    x[m++] = bits_f((uint32_t)(i * 8191));
    x[m++] = bits_f((uint32_t)(i * 8191) | 0x80000000u);
  }
  for (size_t r = 0; r < SH_ARRAY_LEN(runs); r++) {
    uint32_t b;
    memcpy(&b, &runs[r], sizeof b);
    for (uint32_t i = 0; i < 4096; i++) x[m++] = bits_f(b + i);
  }
  const float sp[] = {INFINITY, -INFINITY, NAN, -NAN, 0.0f, -0.0f, FLT_MIN, -FLT_MIN, FLT_MAX, -FLT_MAX,
                      1e-45f, -1e-45f};
  for (size_t i = 0; i < SH_ARRAY_LEN(sp); i++) x[m++] = sp[i];
  while (m % 16) x[m++] = 1.0f;
  *n_out = m;
  return x;
}

/* The references, computed once per function. */
static double *g_ref[SH_ARRAY_LEN(g_fns)];

static void check_level(const char *note, vm_fn f8, vm_fn f16, const float *x, int64_t n) {
  float *y = malloc(sizeof(float) * (size_t)n);
  bool report = getenv("SHEAF_VMATH_REPORT") != NULL;
  for (size_t fn = 0; fn < SH_ARRAY_LEN(g_fns); fn++) {
    if (!g_ref[fn]) {
      g_ref[fn] = malloc(sizeof(double) * (size_t)n);
      for (int64_t i = 0; i < n; i++) g_ref[fn][i] = ref((int)fn, (double)x[i]);
    }
    for (int w = 8; w <= 16; w += 8) {
      (w == 8 ? f8 : f16)((int)fn, x, y, n);
      double worst = 0, worst_x = 0;
      for (int64_t i = 0; i < n; i++) {
        double e = err_ulp(y[i], g_ref[fn][i]);
        if (e > worst) {
          worst = e;
          worst_x = x[i];
        }
      }
      if (report)
        fprintf(stderr, "  %s %-8s x%-2d max %.3f ulp at %.9g\n", note, g_fns[fn].name, w, worst, worst_x);
      if (worst > g_fns[fn].bound)
        th_fail(__FILE__, __LINE__, "%s (%s, %d lanes): %.3g ulp at x = %.9g (bound %g)", g_fns[fn].name,
                note, w, worst, worst_x, g_fns[fn].bound);
    }
  }
  free(y);
}

TEST(codegen_abi_vmath) {
  if (!lir_cc_path()) {
    fprintf(stderr, "  skipped: no C compiler (cc)\n");
    return;
  }
  struct {
    sheaf_isa isa;
    const char *opt, *note;
  } levels[] = {{SHEAF_ISA_AVX2, "-O2", "avx2"},
                {SHEAF_ISA_AVX512, "-O2", "avx512"},
                {SHEAF_ISA_SCALAR, "-O2", "portable"}};
  int64_t n;
  float *x = sample(&n);
  for (size_t l = 0; l < SH_ARRAY_LEN(levels); l++) {
    bool run = levels[l].isa <= sheaf_cpu_isa_host();
#if !defined(__x86_64__)
    if (levels[l].isa != SHEAF_ISA_SCALAR) { /* the AVX levels' flags are x86-64's */
      fprintf(stderr, "  note: %s not built: not an x86-64 host\n", levels[l].note);
      continue;
    }
#endif
    char dir[512], err[8192], tag[32];
    snprintf(dir, sizeof dir, "%s", th_tmp_path(""));
    snprintf(tag, sizeof tag, "vmath_%s", levels[l].note);
    void *so = NULL;
    if (lir_cc_build(dir, tag, &vm_source, 1, levels[l].isa, levels[l].opt, run, &so, err, sizeof err)) {
      th_fail(__FILE__, __LINE__, "building the vector math (%s): %s", levels[l].note, err);
      continue;
    }
    if (!run) {
      fprintf(stderr, "  note: %s compiled, not run (the host lacks it)\n", levels[l].note);
      continue;
    }
    vm_fn f8, f16;
    void *p = dlsym(so, "vm_apply8");
    memcpy(&f8, &p, sizeof p);
    p = dlsym(so, "vm_apply16");
    memcpy(&f16, &p, sizeof p);
    if (CHECK(f8 && f16)) check_level(levels[l].note, f8, f16, x, n);
    dlclose(so);
  }
  free(x);
  for (size_t fn = 0; fn < SH_ARRAY_LEN(g_fns); fn++) free(g_ref[fn]);
}
