/*
 * test_codegen_scoped_fail.c — scoped temporaries (sh_lir_buffer_scoped,
 * emitted by src/codegen/emit_c.c) whose allocation fails: in the entry
 * (the call's allocator: each of its allocations failed in turn) and in a
 * parallel loop's task (the C heap: a block too large for it), the call
 * returns 1 and frees what it allocated (the test allocator's live blocks
 * unchanged); the emitted C equal to the interpreter and to the reference
 * otherwise, at 0, 1 and many iterations, on 1 and 2 threads.
 *
 *   alloc P[N] (scoped):            P: in the entry
 *     for i: P[i] = 2 x[i]
 *     for b in 0..N parallel:
 *       alloc Q[S] (scoped):        Q: per task (the C heap)
 *         Q[0] = P[b] + 1
 *         T[b] = Q[0]               T: the call's temporary
 *   for i: y[i] = T[i]
 */
#include <stdlib.h>
#include <string.h>

#include "codegen/lir_int.h"
#include "codegen/lir_sched.h"
#include "harness.h"
#include "lir_cc.h"

static sh_lir_kernel *scoped_kernel(sheaf_ctx *ctx) {
  sh_lir_kernel *k;
  if (!CHECK_OK(ctx, sh_lir_create(ctx, "scf", &k))) return NULL;
  sh_lir_expr N = sh_lir_sz(k, sh_lir_size(k, "N")), S = sh_lir_sz(k, sh_lir_size(k, "S"));
  sh_lir_buf x = sh_lir_buffer(k, "x", SH_LIR_F32, SH_LIR_IN, 1, &N);
  sh_lir_buf y = sh_lir_buffer(k, "y", SH_LIR_F32, SH_LIR_OUT, 1, &N);
  sh_lir_buf T = sh_lir_buffer(k, "T", SH_LIR_F32, SH_LIR_TEMP, 1, &N);
  sh_lir_buf P = sh_lir_buffer(k, "P", SH_LIR_F32, SH_LIR_TEMP, 1, &N);
  sh_lir_buf Q = sh_lir_buffer(k, "Q", SH_LIR_F32, SH_LIR_TEMP, 1, &S);
  sh_lir_buffer_scoped(k, P);
  sh_lir_buffer_scoped(k, Q);
  sh_lir_stmt ap = sh_lir_alloc(k, sh_lir_root(k), P);
  sh_lir_stmt i = sh_lir_loop(k, ap, "i", N);
  sh_lir_store1(k, i, P, sh_lir_lv(k, i), sh_lir_mul(k, sh_lir_flt(k, 2), sh_lir_load1(k, x, sh_lir_lv(k, i))),
                SH_LIR_COMBINE_NONE);
  sh_lir_stmt b = sh_lir_loop(k, ap, "b", N);
  sh_lir_stmt aq = sh_lir_alloc(k, b, Q);
  sh_lir_expr zero = sh_lir_int(k, 0);
  sh_lir_store1(k, aq, Q, zero, sh_lir_add(k, sh_lir_load1(k, P, sh_lir_lv(k, b)), sh_lir_flt(k, 1)),
                SH_LIR_COMBINE_NONE);
  sh_lir_store1(k, aq, T, sh_lir_lv(k, b), sh_lir_load1(k, Q, zero), SH_LIR_COMBINE_NONE);
  sh_lir_stmt i2 = sh_lir_loop(k, sh_lir_root(k), "i2", N);
  sh_lir_store1(k, i2, y, sh_lir_lv(k, i2), sh_lir_load1(k, T, sh_lir_lv(k, i2)), SH_LIR_COMBINE_NONE);
  if (b >= 0) k->st[b].annot = SH_LIR_PARALLEL; /* each task its own Q (the race check is parallel's) */
  if (!CHECK_OK(ctx, sh_lir_status(k)) || !CHECK_OK(ctx, sh_lir_verify(k))) {
    sh_lir_free(k);
    return NULL;
  }
  return k;
}

typedef int (*entry_fn)(const sk_abi *, const int64_t *, const sk_arg *);

static bool all_match(const float *x, const float *y, int64_t n, const char *what) {
  for (int64_t q = 0; q < n; q++)
    if (!(y[q] == 2 * x[q] + 1))
      return th_fail(__FILE__, __LINE__, "%s: y[%lld] = %g, want %g", what, (long long)q, (double)y[q],
                     2.0 * x[q] + 1);
  return true;
}

TEST(codegen_scoped_alloc_failure) {
  sheaf_ctx *ctx = th_ctx();
  if (!lir_cc_path()) {
    fprintf(stderr, "  skipped: no C compiler (cc) to build generated kernels\n");
    return;
  }
  sh_lir_kernel *k = scoped_kernel(ctx);
  REQUIRE(k);
  enum { NMAX = 100 };
  float x[NMAX], y[NMAX];
  for (int q = 0; q < NMAX; q++) x[q] = (float)(q % 17) - 8;
  static const int64_t Ns[] = {0, 1, 5, NMAX};
  for (size_t a = 0; a < SH_ARRAY_LEN(Ns); a++) {
    for (int q = 0; q < NMAX; q++) y[q] = NAN;
    int64_t sizes[2] = {Ns[a], 1};
    if (CHECK_OK(ctx, sh_lir_run(k, sizes, (sh_lir_arg[]){{.data = x}, {.data = y}})))
      all_match(x, y, Ns[a], "interpreter");
  }
  sh_buf src;
  sh_buf_init(&src, ctx);
  void *h = NULL;
  char err[4096];
  if (CHECK_OK(ctx, sh_lir_emit_c(k, &src))) {
    const char *c = sh_buf_cstr(&src);
    CHECK_CONTAINS(c, "float *restrict b_P = (float *)sk_alloc(abi, n_P);");
    CHECK_CONTAINS(c, "float *restrict b_Q = (float *)sk_alloc(NULL, n_Q);");
    if (lir_cc_build(th_tmp_path(""), "scf", &c, 1, SHEAF_ISA_SCALAR, NULL, 1, &h, err, sizeof err))
      th_fail(__FILE__, __LINE__, "build: %s", err);
  }
  entry_fn fn = h ? (entry_fn)dlsym(h, "scf") : NULL;
  if (h) CHECK(fn != NULL);
  for (int threads = 1; fn && threads <= 2; threads++) {
    sk_abi abi;
    sh_lir_abi_init(ctx, threads, &abi);
    for (size_t a = 0; a < SH_ARRAY_LEN(Ns); a++) {
      for (int q = 0; q < NMAX; q++) y[q] = NAN;
      int64_t sizes[2] = {Ns[a], 1};
      sk_arg args[2] = {{.data = x}, {.data = y}};
      if (CHECK_EQ_INT(fn(&abi, sizes, args), 0)) all_match(x, y, Ns[a], "emitted C");
    }
    /* the entry's allocations (T, then P) failed in turn: 1, nothing left */
    for (long n = 1; n <= 3; n++) {
      int64_t sizes[2] = {NMAX, 1};
      sk_arg args[2] = {{.data = x}, {.data = y}};
      long live = th_live_blocks();
      th_fail_alloc_at(n);
      int r = fn(&abi, sizes, args);
      th_fail_alloc_at(0);
      CHECK_EQ_INT(r, n <= 2 ? 1 : 0);
      CHECK_EQ_INT(th_live_blocks(), live);
    }
    sheaf_ctx_clear_error(ctx);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__) /* they abort on a too-large malloc */
    /* each task's Q too large for the C heap (2^60 bytes): the tasks flag
     * it, the entry frees P and T and fails the call */
    {
      int64_t sizes[2] = {NMAX, (int64_t)1 << 58};
      sk_arg args[2] = {{.data = x}, {.data = y}};
      long live = th_live_blocks();
      CHECK_EQ_INT(fn(&abi, sizes, args), 1);
      CHECK_EQ_INT(th_live_blocks(), live);
      /* and the next call, which fits, runs */
      sizes[1] = 1;
      for (int q = 0; q < NMAX; q++) y[q] = NAN;
      if (CHECK_EQ_INT(fn(&abi, sizes, args), 0)) all_match(x, y, NMAX, "after a failed call");
    }
#endif
  }
  if (h) dlclose(h);
  sh_buf_free(&src);
  sh_lir_free(k);
}
