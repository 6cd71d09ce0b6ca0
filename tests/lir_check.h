/*
 * lir_check.h — runs a generated matmul loaded from a compiled kernel
 * (`so`, its entry `name`, `name`_pack_B, `name`_packed_size_B) on every
 * shape of Ms x Ns x Ks, with or without the bias + GELU epilogue, against
 * the double reference of lir_ref.h (the schedule tests of the codegen);
 * lir_build_check_matmul compiles the kernel's C first.
 */
#ifndef SHEAF_TESTS_LIR_CHECK_H
#define SHEAF_TESTS_LIR_CHECK_H

#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/lir_emit.h"
#include "harness.h"
#include "lir_cc.h"
#include "lir_ref.h"

/* Random inputs from `seed`; stops at the first shape that fails (reported
 * with its sizes). The kernel runs on the ctx's pool threads. */
static inline void lir_check_matmul(sheaf_ctx *ctx, void *so, const char *name, bool ep, uint64_t seed,
                                    const int64_t *Ms, int nM, const int64_t *Ns, int nN, const int64_t *Ks,
                                    int nK) {
  char sym[128];
  void *p = dlsym(so, name);
  sk_entry_fn fn;
  memcpy(&fn, &p, sizeof fn);
  void (*pack)(const int64_t *, const float *, int64_t, int, float *);
  int64_t (*psize)(const int64_t *);
  snprintf(sym, sizeof sym, "%s_pack_B", name);
  p = dlsym(so, sym);
  memcpy(&pack, &p, sizeof pack);
  snprintf(sym, sizeof sym, "%s_packed_size_B", name);
  p = dlsym(so, sym);
  memcpy(&psize, &p, sizeof psize);
  REQUIRE(fn && pack && psize);
  sk_abi abi;
  sh_lir_abi_init(ctx, 0, &abi);
  for (int a = 0; a < nM; a++)
    for (int b = 0; b < nN; b++)
      for (int c = 0; c < nK; c++) {
        int64_t M = Ms[a], N = Ns[b], K = Ks[c], sizes[3] = {M, N, K};
        float *A = th_frand_fill(&seed, M * K), *B = th_frand_fill(&seed, K * N), *bias = th_frand_fill(&seed, N),
              *Y = malloc(sizeof(float) * (size_t)(M * N)), *R = malloc(sizeof(float) * (size_t)(M * N)),
              *Bp = malloc(sizeof(float) * (size_t)(psize(sizes) + 1));
        pack(sizes, B, N, 0, Bp);
        sk_arg args[4] = {{.data = A}, {.data = Bp}, {.data = ep ? (void *)bias : (void *)Y}, {.data = Y}};
        CHECK_EQ_INT(fn(&abi, sizes, args), 0);
        lr_matmul(M, N, K, A, B, ep ? bias : NULL, ep, R);
        char what[96];
        snprintf(what, sizeof what, "%s M=%lld N=%lld K=%lld", name, (long long)M, (long long)N, (long long)K);
        bool ok = lr_close(what, Y, R, M * N, 1e-5);
        free(A), free(B), free(bias), free(Y), free(R), free(Bp);
        if (!ok) return;
      }
}

/* Builds the generated C `c_src` of matmul `name` for `isa` and, when the
 * host runs that level (`run`), checks it as lir_check_matmul does. */
static inline void lir_build_check_matmul(sheaf_ctx *ctx, const char *c_src, const char *name, sheaf_isa isa,
                                          bool run, bool ep, uint64_t seed, const int64_t *Ms, int nM,
                                          const int64_t *Ns, int nN, const int64_t *Ks, int nK) {
  const char *src[1] = {c_src};
  char err[8192];
  void *so = NULL;
  int rc = lir_cc_build(th_tmp_path(""), name, src, 1, isa, "-O2", run, &so, err, sizeof err);
  if (rc) th_fail(__FILE__, __LINE__, "building %s: %s", name, err);
  if (rc == 0 && run) {
    lir_check_matmul(ctx, so, name, ep, seed, Ms, nM, Ns, nN, Ks, nK);
    dlclose(so);
  }
}

#endif
