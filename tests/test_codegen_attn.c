/*
 * test_codegen_attn.c — the ragged attention kernel of the `kernel`
 * notation through the whole pipeline (lower, default schedule with its
 * dot-product and e·v tiles, C, JIT, sheaf_kernel_run) at every ISA level
 * the host runs, against a double-precision reference: sequence lengths
 * 0, 1 and below, at, above and at multiples of the tiles (3 query rows
 * and 4 keys of the scores, 3 rows and 4 vectors of d of e·v), head sizes
 * below, at, above and at multiples of the vector width, and several heads
 * as a kernel of its own.
 */
#include <math.h>
#include <stdlib.h>

#include "codegen/kernel_api.h"
#include "attn_ref.h"
#include "harness.h"

static const char ATTN[] =
    "kernel attn(L: i32[B], q: f32[B, L(b), D], k: f32[B, L(b), D], v: f32[B, L(b), D])\n"
    "    -> f32[B, L(b), D] {\n"
    "  s(b, i, j) +=! q(b, i, d) * k(b, j, d) / sqrt(D)\n"
    "  m(b, i) max=! s(b, i, j)\n  e(b, i, j) = exp(s(b, i, j) - m(b, i))\n"
    "  z(b, i) +=! e(b, i, j)\n  o(b, i, d) +=! e(b, i, j) * v(b, j, d)\n"
    "  out(b, i, d) = o(b, i, d) / z(b, i)\n}\n";

/* H heads of D in one token row [L(b), H, D] (the encoder's layout). */
static const char MHA[] =
    "kernel mha(L: i32[B], q: f32[B, L(b), H, D], k: f32[B, L(b), H, D], v: f32[B, L(b), H, D])\n"
    "    -> f32[B, L(b), H, D] {\n"
    "  s(b, h, i, j) +=! q(b, i, h, d) * k(b, j, h, d) / sqrt(D)\n"
    "  m(b, h, i) max=! s(b, h, i, j)\n  e(b, h, i, j) = exp(s(b, h, i, j) - m(b, h, i))\n"
    "  z(b, h, i) +=! e(b, h, i, j)\n  o(b, h, i, d) +=! e(b, h, i, j) * v(b, j, h, d)\n"
    "  out(b, i, h, d) = o(b, h, i, d) / z(b, h, i)\n}\n";

/* One run of kernel k (H heads: rank 4 when H > 0) on lens against the reference. */
static void check(sheaf_kernel *k, const int32_t *lens, int nb, int64_t H, int64_t D, uint64_t seed,
                  const char *what) {
  int64_t T = 0, HH = H > 0 ? H : 1;
  for (int b = 0; b < nb; b++) T += lens[b];
  int64_t n = T * HH * D;
  float *q = th_frand_fill(&seed, n), *kk = th_frand_fill(&seed, n), *v = th_frand_fill(&seed, n);
  float *got = calloc((size_t)n + 1, sizeof(float)), *want = calloc((size_t)n + 1, sizeof(float));
  int32_t *L = malloc(sizeof(int32_t) * (size_t)nb);
  memcpy(L, lens, sizeof(int32_t) * (size_t)nb);
  int64_t sL[] = {nb}, s3[] = {nb, -1, D}, s4[] = {nb, -1, HH, D};
  int rank = H > 0 ? 4 : 3;
  const int64_t *sq = H > 0 ? s4 : s3;
  sheaf_kernel_arg a[] = {{SHEAF_KERNEL_I32, L, (size_t)nb, 1, sL},
                          {SHEAF_KERNEL_F32, q, (size_t)n, rank, sq},
                          {SHEAF_KERNEL_F32, kk, (size_t)n, rank, sq},
                          {SHEAF_KERNEL_F32, v, (size_t)n, rank, sq},
                          {SHEAF_KERNEL_F32, got, (size_t)n, 0, NULL}};
  sheaf_status st = sheaf_kernel_run(k, a, 5);
  if (st != SHEAF_OK) {
    th_fail(__FILE__, __LINE__, "%s: sheaf_kernel_run: %s", what, sheaf_ctx_last_error(sh_kernel_ctx(k)));
  } else {
    ar_mha(lens, nb, HH, D, q, kk, v, want);
    ar_close(got, want, n, what);
  }
  free(q), free(kk), free(v), free(got), free(want), free(L);
}

static sheaf_kernel *compile(sheaf_ctx *ctx, const char *src, sheaf_isa isa, const char *dir) {
  /* dir: th_cache_dir, eager (harness.h) */
  sh_kernel_opts o = {.eager = true, .cache_dir = dir, .isa_set = true, .isa = isa};
  sheaf_kernel *k = NULL;
  if (!CHECK_OK(ctx, sh_kernel_compile_opts(ctx, src, strlen(src), NULL, &o, &k))) return NULL;
  return k;
}

TEST(codegen_attn_compiled) {
  if (!th_have_jit_cc("codegen_attn_compiled")) return;
  sheaf_ctx *ctx = th_ctx();
  static const sheaf_isa levels[] = {SHEAF_ISA_SCALAR, SHEAF_ISA_AVX2, SHEAF_ISA_AVX512};
  /* lengths 0 and 1; 2, 3, 4, 6, 8, 12 (tile multiples) and their neighbours */
  static const int32_t lens[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 33};
  static const int64_t dims[] = {1, 8, 13, 32, 33, 64};
  for (size_t l = 0; l < SH_ARRAY_LEN(levels); l++) {
    if (levels[l] > sheaf_cpu_isa_host()) continue;
    sheaf_kernel *k = compile(ctx, ATTN, levels[l], th_cache_dir("attn-cache"));
    if (!k) return;
    for (size_t d = 0; d < SH_ARRAY_LEN(dims); d++) {
      char what[64];
      snprintf(what, sizeof what, "attn %s D %lld", sheaf_isa_name(levels[l]), (long long)dims[d]);
      check(k, lens, (int)SH_ARRAY_LEN(lens), 0, dims[d], 17 + d, what);
    }
    static const int32_t none[] = {0, 0};
    check(k, none, 2, 0, 8, 3, "attn: every sequence empty");
    sheaf_kernel_free(k);
  }
}

/* Several heads (4 x 16 and 2 x 64), heads inside each token's row. */
TEST(codegen_attn_heads) {
  if (!th_have_jit_cc("codegen_attn_heads")) return;
  sheaf_ctx *ctx = th_ctx();
  sheaf_kernel *k = compile(ctx, MHA, sheaf_cpu_isa(), th_cache_dir("attn-cache"));
  if (!k) return;
  static const int32_t lens[] = {0, 1, 3, 4, 9, 17};
  check(k, lens, (int)SH_ARRAY_LEN(lens), 4, 16, 5, "mha 4 x 16");
  check(k, lens, (int)SH_ARRAY_LEN(lens), 2, 64, 6, "mha 2 x 64");
  sheaf_kernel_free(k);
}
