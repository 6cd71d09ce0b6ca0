/*
 * test_codegen_emit.c — generated C against plain C references: each
 * kernel of lir_build.h, unscheduled and with the default schedule of every
 * ISA level (scalar, AVX2, AVX-512 where the host has them; AVX-512 is at
 * least compiled with -mavx512f when the host lacks it), compiled with the
 * system C compiler (tests/lir_cc.h; skipped with a note when there is
 * none), run on sizes below, at, above and at multiples of every tile, and
 * through the pool (2 threads). Also: emission is deterministic, row-stride
 * and row-pointer arguments, and padded ragged storage (CoRa) with a
 * padded split.
 *
 * Tolerances: 1e-5 relative (to max(1, |ref|)) for sums of products; the
 * vector GELU / exp differ from libm by a few ulp (docs/KERNELS.md), inside
 * the same bound after the sums.
 */
#include <stdlib.h>

#include "codegen/lir_emit.h"
#include "codegen/lir_sched.h"
#include "harness.h"
#include "lir_build.h"
#include "lir_cc.h"
#include "lir_ref.h"

static bool have_cc(void) {
  if (lir_cc_path()) return true;
  fprintf(stderr, "  skipped: no C compiler (cc) to build generated kernels\n");
  return false;
}

static sheaf_isa isa_levels[] = {SHEAF_ISA_SCALAR, SHEAF_ISA_AVX2, SHEAF_ISA_AVX512};

/* The host runs code of this level. */
static bool runs(sheaf_isa isa) { return isa <= sheaf_cpu_isa_host(); }

static char *emit(sheaf_ctx *ctx, sh_lir_kernel *k) {
  sh_buf b;
  sh_buf_init(&b, ctx);
  if (!CHECK_OK(ctx, sh_lir_emit_c(k, &b))) {
    sh_buf_free(&b);
    return NULL;
  }
  char *s = strdup(sh_buf_cstr(&b));
  sh_buf_free(&b);
  return s;
}

/* Compiles the kernels' C into one shared object; NULL on failure (the
 * compiler's output is reported). */
static void *build(sheaf_ctx *ctx, const char *tag, sh_lir_kernel **ks, int n, sheaf_isa isa, bool link) {
  const char *src[8];
  char *srcm[8];
  for (int i = 0; i < n; i++) {
    src[i] = srcm[i] = emit(ctx, ks[i]);
    if (!src[i]) return NULL;
  }
  char dir[512], err[8192];
  snprintf(dir, sizeof dir, "%s", th_tmp_path(""));
  void *so = NULL;
  int rc = lir_cc_build(dir, tag, src, link ? n : 1, isa, "-O2", link, &so, err, sizeof err);
  for (int i = 0; i < n; i++) free(srcm[i]);
  if (rc) {
    th_fail(__FILE__, __LINE__, "building %s (%s): %s", tag, sheaf_isa_name(isa), err);
    return NULL;
  }
  return link ? so : (void *)1;
}

static sk_entry_fn entry(void *so, const char *name) {
  sk_entry_fn f;
  void *p = dlsym(so, name);
  memcpy(&f, &p, sizeof f);
  return f;
}

/* ------------------------------------------------------------- matmul */

static void check_matmul(sheaf_ctx *ctx, void *so, const char *name, bool epilogue, bool packed,
                         const int64_t *Ms, int nM, const int64_t *Ns, int nN, const int64_t *Ks, int nK) {
  sk_entry_fn fn = entry(so, name);
  REQUIRE(fn);
  char sym[128];
  snprintf(sym, sizeof sym, "%s_pack_B", name);
  void (*pack)(const int64_t *, const float *, int64_t, int, float *);
  int64_t (*psize)(const int64_t *);
  void *p = dlsym(so, sym);
  memcpy(&pack, &p, sizeof pack);
  snprintf(sym, sizeof sym, "%s_packed_size_B", name);
  p = dlsym(so, sym);
  memcpy(&psize, &p, sizeof psize);
  REQUIRE(!packed || (pack && psize));
  sk_abi abi;
  sh_lir_abi_init(ctx, 0, &abi);
  uint64_t seed = 3;
  for (int a = 0; a < nM; a++)
    for (int b = 0; b < nN; b++)
      for (int c = 0; c < nK; c++) {
        int64_t M = Ms[a], N = Ns[b], K = Ks[c], sizes[3] = {M, N, K};
        float *A = th_frand_fill(&seed, M * K), *B = th_frand_fill(&seed, K * N),
              *bias = th_frand_fill(&seed, N), *Y = malloc(sizeof(float) * (size_t)(M * N + 1)),
              *R = malloc(sizeof(float) * (size_t)(M * N + 1)), *Bp = B;
        if (packed) {
          Bp = malloc(sizeof(float) * (size_t)(psize(sizes) + 1));
          pack(sizes, B, N, 0, Bp);
        }
        sk_arg args[4] = {{.data = A}, {.data = Bp}, {.data = epilogue ? (void *)bias : (void *)Y}, {.data = Y}};
        CHECK_EQ_INT(fn(&abi, sizes, args), 0);
        lr_matmul(M, N, K, A, B, epilogue ? bias : NULL, epilogue, R);
        char what[96];
        snprintf(what, sizeof what, "%s M=%lld N=%lld K=%lld", name, (long long)M, (long long)N, (long long)K);
        bool ok = lr_close(what, Y, R, M * N, 1e-5);
        if (Bp != B) free(Bp);
        free(A), free(B), free(bias), free(Y), free(R);
        if (!ok) return;
      }
}

TEST(codegen_emit_matmul) {
  if (!have_cc()) return;
  sheaf_ctx *ctx = th_ctx();
  static const int64_t Ms[] = {1, 5, 6, 7, 12, 13, 95, 96, 97, 193},
                       Ns[] = {1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 65},
                       Ks[] = {1, 3, 17, 64};
  /* unscheduled */
  sh_lir_kernel *k0 = lb_matmul(ctx, "mm_plain", false);
  REQUIRE(k0);
  void *so = build(ctx, "mm_plain", &k0, 1, SHEAF_ISA_SCALAR, true);
  if (so) {
    check_matmul(ctx, so, "mm_plain", false, false, Ms, 4, Ns, 4, Ks, 2);
    dlclose(so);
  }
  sh_lir_free(k0);
  /* default schedule at each level */
  for (size_t l = 0; l < SH_ARRAY_LEN(isa_levels); l++) {
    sheaf_isa isa = isa_levels[l];
    char name[32];
    snprintf(name, sizeof name, "mm_%s", sheaf_isa_name(isa));
    sh_lir_kernel *k = lb_matmul(ctx, name, false);
    REQUIRE(k);
    REQUIRE_OK(ctx, sh_sched_default(k, isa));
    so = build(ctx, name, &k, 1, isa, runs(isa));
    if (so && runs(isa)) {
      check_matmul(ctx, so, name, false, true, Ms, (int)SH_ARRAY_LEN(Ms), Ns, (int)SH_ARRAY_LEN(Ns), Ks,
                   (int)SH_ARRAY_LEN(Ks));
      dlclose(so);
    }
    sh_lir_free(k);
  }
}
