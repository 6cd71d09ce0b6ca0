/*
 * test_gemm_ep.c — the generic epilogue's activations over a wide input
 * range at every ISA level: C = act(A·B + bias) with K = 1 and B = 1, so
 * C = act(x) for a dense sweep of x in [-120, 120] (every tail of exp),
 * checked against double precision with the GEMM tests' activation bound
 * 8·eps·(|ref| + 1e-3); sigmoid and tanh also at ±inf, ±0 and NaN. Column
 * ranges that start and end inside a 16-lane vector check the lane masks.
 */
#include <stdlib.h>

#include "harness.h"
#include "kernels/gemm.h"

static double ref_act(sh_gemm_act a, double x) {
  switch (a) {
  case SH_GEMM_ACT_RELU: return x > 0 ? x : 0;
  case SH_GEMM_ACT_SIGMOID: return 1.0 / (1.0 + exp(-x));
  case SH_GEMM_ACT_TANH: return tanh(x);
  case SH_GEMM_ACT_GELU_TANH:
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
  case SH_GEMM_ACT_GELU_ERF: return 0.5 * x * erfc(-x * 0.7071067811865476);
  }
  return x;
}

TEST(gemm_epilogue_activation_range) {
  sheaf_ctx *ctx = th_ctx();
  enum { M = 2400, N = 37 };
  float *a = malloc(M * sizeof *a), *c = malloc(M * N * sizeof *c), one[N], zero[N];
  for (int j = 0; j < N; j++) one[j] = 1.0f, zero[j] = 0.0f;
  for (int i = 0; i < M; i++) a[i] = -120.0f + 240.0f * (float)i / M;
  a[0] = -INFINITY, a[1] = INFINITY, a[2] = -0.0f, a[3] = 0.0f, a[4] = NAN, a[5] = 1e-30f;
  a[6] = -1e-6f, a[7] = 0.6249f, a[8] = -0.6251f, a[9] = -87.5f, a[10] = 88.8f;
  const double eps = 1.0 / (1 << 23);
  sh_gemm_packed_b *pb = NULL;
  REQUIRE_OK(ctx, sh_gemm_pack_b(ctx, one, N, 1, N, 0, &pb));
  for (int isa = 0; isa < (int)sheaf_cpu_isa() + 1; isa++)
    for (int act = 0; act <= SH_GEMM_ACT_GELU_ERF; act++) {
      /* act on [3, N − 2); the other columns get only the (zero) bias */
      sh_gemm_args args = {.m = M, .n_src = 1, .src = {{1, {NULL, a, 1}}}, .b_packed = pb,
                           .c = {NULL, c, N}, .n_ep = 2};
      args.ep[0] = (sh_gemm_ep){.kind = SH_GEMM_EP_BIAS, .vec = zero};
      args.ep[1] = (sh_gemm_ep){.kind = SH_GEMM_EP_ACT, .n0 = 3, .n1 = N - 2, .act = (sh_gemm_act)act};
      if (!CHECK_OK(ctx, sh_gemm(ctx, (sheaf_isa)isa, 1, &args))) break;
      bool specials = act == SH_GEMM_ACT_SIGMOID || act == SH_GEMM_ACT_TANH;
      bool ok = true;
      for (int i = 0; ok && i < M; i++)
        for (int j = 0; ok && j < N; j++) {
          double x = a[i], y = c[i * N + j];
          bool in = j >= 3 && j < N - 2;
          if (isnan(x) || isinf(x)) {
            if (!in) {
              ok = isnan(x) ? isnan(y) : y == x;
            } else if (specials) {
              double want = isnan(x) ? NAN : ref_act((sh_gemm_act)act, x);
              ok = isnan(want) ? isnan(y) : y == want;
            }
            if (!ok)
              th_fail(__FILE__, __LINE__, "isa %d act %d: act(%g) = %g at column %d", isa, act,
                      x, y, j);
            continue;
          }
          double ref = in ? ref_act((sh_gemm_act)act, x) : x;
          if (!(fabs(y - ref) <= 8 * eps * (fabs(ref) + 1e-3)))
            ok = th_fail(__FILE__, __LINE__, "isa %d act %d: act(%.9g) = %.9g, ref %.9g (column %d)",
                         isa, act, x, y, ref, j);
        }
    }
  sh_gemm_packed_b_free(ctx, pb);
  free(a);
  free(c);
}
