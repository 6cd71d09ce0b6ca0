/*
 * test_codegen_read.c — cache_read (sh_sched_cache_read, src/codegen/
 * sched_read.c) and the GEMM knobs built on it and on output prefetches
 * (sh_sched_opts.pack_a, prefetch_c): the primitive alone (its IR, the
 * interpreter's results before and after, its refusals leaving the kernel
 * unchanged), the default schedule with the knobs through the interpreter
 * at every level, and their generated C at every level (run where the
 * host runs it) at sizes below, at, above and at multiples of the tiles
 * and row blocks, against the double-precision reference.
 */
#include <stdlib.h>

#include "codegen/lir_emit.h"
#include "codegen/lir_int.h"
#include "codegen/lir_sched.h"
#include "harness.h"
#include "lir_build.h"
#include "lir_cc.h"
#include "lir_check.h"
#include "lir_ref.h"

static char *text(sheaf_ctx *ctx, const sh_lir_kernel *k) {
  static char t[65536];
  sh_buf b;
  sh_buf_init(&b, ctx);
  sh_lir_print(k, &b);
  snprintf(t, sizeof t, "%s", sh_buf_cstr(&b));
  sh_buf_free(&b);
  return t;
}

static float *pack_panels(const float *B, int64_t K, int64_t N, int64_t P) {
  int64_t np = (N + P - 1) / P;
  float *d = calloc((size_t)(np * P * K + 1), sizeof(float));
  for (int64_t p = 0; p < np; p++)
    for (int64_t k = 0; k < K; k++)
      for (int64_t c = 0; c < P && p * P + c < N; c++) d[(p * K + k) * P + c] = B[k * N + p * P + c];
  return d;
}

/* The kernel (mm, or mm + bias + GELU) on the interpreter matches the
 * double reference on every {M, N, K}. */
static bool interp_ok(sheaf_ctx *ctx, sh_lir_kernel *k, bool ep, const int64_t (*sh)[3], size_t n) {
  for (size_t s = 0; s < n; s++) {
    int64_t M = sh[s][0], N = sh[s][1], K = sh[s][2], sizes[3] = {M, N, K};
    uint64_t seed = (uint64_t)(M * 1000003 + N * 1009 + K);
    float *A = th_frand_fill(&seed, M * K), *B = th_frand_fill(&seed, K * N), *bias = th_frand_fill(&seed, N);
    float *got = calloc((size_t)(M * N) + 1, sizeof(float)), *want = malloc(sizeof(float) * (size_t)(M * N + 1));
    sh_lir_buf Bb = sh_lir_find_buffer(k, "B");
    float *Bp = k->bufs[Bb].layout == SH_LIR_LAYOUT_PANELS ? pack_panels(B, K, N, k->bufs[Bb].panel) : B;
    sh_lir_arg args[4] = {{.data = A}, {.data = Bp}, {.data = ep ? (void *)bias : (void *)got}, {.data = got}};
    bool ok = CHECK_OK(ctx, sh_lir_run(k, sizes, args));
    lr_matmul(M, N, K, A, B, ep ? bias : NULL, ep, want);
    char what[96];
    snprintf(what, sizeof what, "%s %lldx%lldx%lld", k->name, (long long)M, (long long)N, (long long)K);
    ok = ok && lr_close(what, got, want, M * N, 1e-5);
    if (Bp != B) free(Bp);
    free(A), free(B), free(bias), free(got), free(want);
    if (!ok) return false;
  }
  return true;
}

static const int64_t small[][3] = {{1, 1, 1}, {2, 8, 3}, {3, 5, 2}, {4, 8, 3}, {5, 9, 4}, {7, 17, 5}, {13, 33, 2}};

/* mm with i split by 2, j by 8, the tile in registers (cache_write). */
static sh_lir_kernel *tiled(sheaf_ctx *ctx, sh_sched_cache *c) {
  sh_lir_kernel *k = lb_matmul(ctx, "mm", false);
  if (!k) return NULL;
  sh_lir_stmt io, ii, jo, ji;
  if (sh_sched_split(k, sh_lir_find_loop(k, "i"), 2, SH_SCHED_TAIL_GUARD, &io, &ii, NULL) ||
      sh_sched_split(k, sh_lir_find_loop(k, "j"), 8, SH_SCHED_TAIL_GUARD, &jo, &ji, NULL) ||
      sh_sched_reorder(k, 4, (sh_lir_stmt[]){io, jo, ii, ji}) || sh_sched_cache_write(k, ii, c)) {
    sh_lir_free(k);
    return NULL;
  }
  return k;
}

/* A's rows of each i_o packed [k, i_i] at the top of i_o: the copy clamps
 * the row (a partial tile's missing row reads A's last), K needs no clamp
 * (the copy's k runs over exactly A's extent), the tile reads the copy. */
TEST(codegen_read_primitive) {
  sheaf_ctx *ctx = th_ctx();
  sh_sched_cache c;
  sh_lir_kernel *k = tiled(ctx, &c);
  REQUIRE(k);
  sh_lir_buf A = sh_lir_find_buffer(k, "A");
  sh_lir_stmt io = sh_lir_find_loop(k, "i_o");
  sh_sched_read rd;
  REQUIRE_OK(ctx, sh_sched_cache_read(k, A, io, 2, (sh_lir_stmt[]){sh_lir_find_loop(k, "k"), c.band[0]}, &rd));
  const char *t = text(ctx, k);
  CHECK_CONTAINS(t, "buffer A_rd f32[(M + 1) / 2, K, 2] temp\n");
  CHECK_CONTAINS(t, "for i_o in 0..(M + 1) / 2:\n"
                    "  if 0 < M:\n"
                    "    for k_rd in 0..K:\n"
                    "      for i_i_rd in 0..2:\n"
                    "        A_rd[i_o, k_rd, i_i_rd] = A[min(i_o * 2 + i_i_rd, M - 1), k_rd]\n"
                    "  for j_o in 0..(N + 7) / 8:\n");
  CHECK_CONTAINS(t, "C_acc[i_i, j_i] += A_rd[i_o, k, i_i] * B[k, j_o * 8 + j_i]\n");
  CHECK_EQ_INT(rd.buf, sh_lir_find_buffer(k, "A_rd"));
  CHECK_EQ_INT(rd.n, 2);
  CHECK_EQ_INT(k->st[rd.copy].kind, SH_LIR_S_IF);
  CHECK_OK(ctx, sh_lir_verify(k));
  interp_ok(ctx, k, false, small, SH_ARRAY_LEN(small));
  /* then the tile unswitched, the row block over the pool: the same */
  REQUIRE_OK(ctx, sh_sched_unswitch(k, c.alloc));
  REQUIRE_OK(ctx, sh_sched_parallel(k, io));
  CHECK_OK(ctx, sh_lir_verify(k));
  interp_ok(ctx, k, false, small, SH_ARRAY_LEN(small));
  sh_lir_free(k);

  /* at a loop inside: j_o (i_o a loop around it), the tile's rows first */
  k = tiled(ctx, &c);
  REQUIRE(k);
  A = sh_lir_find_buffer(k, "A");
  REQUIRE_OK(ctx, sh_sched_cache_read(k, A, sh_lir_find_loop(k, "j_o"), 2,
                                      (sh_lir_stmt[]){c.band[0], sh_lir_find_loop(k, "k")}, &rd));
  CHECK_CONTAINS(text(ctx, k), "A_rd[j_o, i_i_rd, k_rd] = A[min(i_o * 2 + i_i_rd, M - 1), k_rd]\n");
  interp_ok(ctx, k, false, small, SH_ARRAY_LEN(small));
  sh_lir_free(k);
}

/* Refusals leave the kernel unchanged. */
TEST(codegen_read_errors) {
  sheaf_ctx *ctx = th_ctx();
  sh_sched_cache c;
  sh_lir_kernel *k = tiled(ctx, &c);
  REQUIRE(k);
  char *before = strdup(text(ctx, k));
  sh_lir_buf A = sh_lir_find_buffer(k, "A"), C = sh_lir_find_buffer(k, "C");
  sh_lir_stmt io = sh_lir_find_loop(k, "i_o"), jo = sh_lir_find_loop(k, "j_o"), kl = sh_lir_find_loop(k, "k");
  sh_lir_stmt ii = c.band[0], ji = c.band[1];
  CHECK_STATUS(ctx, sh_sched_cache_read(k, C, io, 2, (sh_lir_stmt[]){kl, ii}, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "cache_read of C: not a dense f32 input");
  CHECK_STATUS(ctx, sh_sched_cache_read(k, A, io, 1, (sh_lir_stmt[]){kl}, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "its index 0 uses a loop not named");
  CHECK_STATUS(ctx, sh_sched_cache_read(k, A, jo, 2, (sh_lir_stmt[]){io, kl}, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "loop 0 is not a loop inside it");
  CHECK_STATUS(ctx, sh_sched_cache_read(k, A, io, 2, (sh_lir_stmt[]){kl, kl}, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "a loop named twice");
  CHECK_STATUS(ctx, sh_sched_cache_read(k, A, io, 0, NULL, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "0 loops");
  /* the loads of A sit in the reduction loop: a loop of the write-back has none */
  CHECK_STATUS(ctx, sh_sched_cache_read(k, A, c.final[0], 1, (sh_lir_stmt[]){c.final[1]}, NULL),
               SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "no load of it inside");
  REQUIRE_OK(ctx, sh_sched_vectorize(k, ji, 8));
  CHECK_STATUS(ctx, sh_sched_cache_read(k, A, ji, 1, (sh_lir_stmt[]){kl}, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "not a serial or parallel loop");
  k->st[ji].annot = SH_LIR_SERIAL, k->st[ji].width = 1;
  REQUIRE_OK(ctx, sh_sched_parallel(k, io));
  CHECK_STATUS(ctx, sh_sched_cache_read(k, A, jo, 2, (sh_lir_stmt[]){ii, kl}, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "inside a parallel or vector loop");
  k->st[io].annot = SH_LIR_SERIAL;
  CHECK_EQ_STR(text(ctx, k), before);
  /* once packed, A is read under i_o only by the copy, outside the tile's
   * loops: a second cache_read there is refused */
  REQUIRE_OK(ctx, sh_sched_cache_read(k, A, io, 2, (sh_lir_stmt[]){kl, ii}, NULL));
  char *once = strdup(text(ctx, k));
  CHECK_STATUS(ctx, sh_sched_cache_read(k, A, io, 2, (sh_lir_stmt[]){kl, ii}, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "a load outside the named loops");
  CHECK_EQ_STR(text(ctx, k), once);
  free(before), free(once);
  sh_lir_free(k);
}

/* Shapes around every level's tile (scalar 4 x 4, AVX2 6 x 16, AVX-512
 * 12 x 32) and row block (16 tiles: 64, 96, 192 rows). */
static const int64_t edge[][3] = {{1, 1, 1},    {5, 7, 3},    {6, 16, 4},    {7, 17, 5},   {12, 32, 2},
                                  {13, 33, 3},  {64, 9, 2},   {65, 15, 3},   {95, 8, 2},   {96, 16, 3},
                                  {97, 31, 2},  {191, 33, 2}, {192, 1, 1},   {193, 17, 2}, {4, 65, 17}};

static const sheaf_isa levels[] = {SHEAF_ISA_SCALAR, SHEAF_ISA_AVX2, SHEAF_ISA_AVX512};

/* The default schedule with A packed and the output prefetched, through
 * the interpreter at every level: the copy at the top of the row block,
 * the tiles reading it, the row block loop over the pool. */
TEST(codegen_read_default_interp) {
  sheaf_ctx *ctx = th_ctx();
  for (size_t l = 0; l < SH_ARRAY_LEN(levels); l++)
    for (int ep = 0; ep < 2; ep++)
      for (int pc = 0; pc < 2; pc++) {
        sh_lir_kernel *k = lb_matmul(ctx, ep ? "mmg" : "mm", ep);
        REQUIRE(k);
        REQUIRE_OK(ctx, sh_sched_default_opts(k, levels[l], &(sh_sched_opts){.pack_a = 1, .prefetch_c = pc ? 1 : -1}));
        const char *t = text(ctx, k);
        CHECK_CONTAINS(t, "buffer A_rd f32[");
        CHECK_CONTAINS(t, "for i_o in 0..");
        CHECK_CONTAINS(t, " parallel:\n  if 0 < M:\n    for i_i_o_rd in 0..16:\n      for k_rd in 0..K:\n");
        CHECK(!strstr(t, "i_o_j_o"));
        const char *pf = ep ? "prefetch Y[" : "prefetch C[";
        if (pc) CHECK_CONTAINS(t, pf);
        else CHECK(!strstr(t, pf));
        if (!interp_ok(ctx, k, ep, edge, SH_ARRAY_LEN(edge))) printf("  %s %s pc=%d\n", k->name, sheaf_isa_name(levels[l]), pc);
        sh_lir_free(k);
      }
  /* off (-1), with K blocks (the k loop's extent depends on the block), and
   * for two GEMMs sharing a tile: no copy */
  sh_lir_kernel *k = lb_matmul(ctx, "mm", false);
  REQUIRE(k);
  REQUIRE_OK(ctx, sh_sched_default_opts(k, SHEAF_ISA_AVX2, &(sh_sched_opts){.pack_a = -1}));
  CHECK(!strstr(text(ctx, k), "A_rd"));
  sh_lir_free(k);
  k = lb_matmul(ctx, "mm", false);
  REQUIRE(k);
  REQUIRE_OK(ctx, sh_sched_default_opts(k, SHEAF_ISA_AVX2, &(sh_sched_opts){.pack_a = 1, .kc = 4}));
  CHECK(!strstr(text(ctx, k), "A_rd"));
  interp_ok(ctx, k, false, edge, 6);
  sh_lir_free(k);
}

/* The generated C with A packed and the output prefetched, with and
 * without the epilogue, at every level (run where the host runs it). */
TEST(codegen_read_c) {
  sheaf_ctx *ctx = th_ctx();
  if (!lir_cc_path()) {
    fprintf(stderr, "  skipped: no C compiler (cc) to build generated kernels\n");
    return;
  }
  static const int64_t Ms[] = {1, 4, 5, 6, 7, 12, 13, 64, 95, 96, 97, 191, 192, 193},
                       Ns[] = {1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 65}, Ks[] = {1, 3, 17, 64};
  for (size_t l = 0; l < SH_ARRAY_LEN(levels); l++) {
#if !defined(__x86_64__)
    if (levels[l] != SHEAF_ISA_SCALAR) continue;
#endif
    bool run = levels[l] <= sheaf_cpu_isa_host();
    for (int ep = 0; ep < 2; ep++) {
      char name[32];
      snprintf(name, sizeof name, "rd%s_%s", ep ? "g" : "", sheaf_isa_name(levels[l]));
      sh_lir_kernel *k = lb_matmul(ctx, name, ep);
      REQUIRE(k);
      REQUIRE_OK(ctx, sh_sched_default_opts(k, levels[l], &(sh_sched_opts){.pack_a = 1, .prefetch_c = 1}));
      sh_buf b;
      sh_buf_init(&b, ctx);
      REQUIRE_OK(ctx, sh_lir_emit_c(k, &b));
      CHECK_CONTAINS(sh_buf_cstr(&b), "float *restrict b_A_rd = ");
      CHECK_CONTAINS(sh_buf_cstr(&b), ep ? "__builtin_prefetch((const void *)((uintptr_t)b_Y + "
                                         : "__builtin_prefetch((const void *)((uintptr_t)b_C + ");
      lir_build_check_matmul(ctx, sh_buf_cstr(&b), name, levels[l], run, ep, 9, Ms, (int)SH_ARRAY_LEN(Ms), Ns,
                             (int)SH_ARRAY_LEN(Ns), Ks, (int)SH_ARRAY_LEN(Ks));
      sh_buf_free(&b);
      sh_lir_free(k);
    }
  }
}

/* A prefetch may name an output (fetched for writing), not a temporary. */
TEST(codegen_read_prefetch_out) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k = lb_matmul(ctx, "mmp", true);
  REQUIRE(k);
  sh_lir_buf Y = sh_lir_find_buffer(k, "Y"), Z = sh_lir_find_buffer(k, "Z");
  sh_lir_expr zero = sh_lir_int(k, 0);
  sh_lir_stmt p = sh_lir_prefetch(k, sh_lir_root(k), Y, 2, (sh_lir_expr[]){zero, zero});
  CHECK(p >= 0);
  CHECK_OK(ctx, sh_lir_status(k));
  CHECK_OK(ctx, sh_lir_verify(k));
  CHECK_EQ_INT(sh_lir_prefetch(k, sh_lir_root(k), Z, 2, (sh_lir_expr[]){zero, zero}), SH_LIR_NONE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "prefetch of Z: not a dense input or output");
  sh_lir_free(k);
}

/* Review: both operands read through copies on partial tiles in all three
 * dimensions: the tiled mm's k split by 3 with a guarded tail, A's rows of
 * each i_o packed over (k_o, k_i, i_i) and B's columns of each j_o over
 * (k_o, k_i, j_i). The copies clamp the row, the column and k (k_o * 3 +
 * k_i runs past K in the tail tile, where the guard keeps the body from
 * reading): every shape, K not a multiple of 3 included, equals the
 * double reference on the interpreter, serial and with j_o over the pool. */
TEST(codegen_read_partial_tiles_every_dimension) {
  sheaf_ctx *ctx = th_ctx();
  static const int64_t shapes[][3] = {{1, 1, 1}, {1, 9, 2}, {2, 8, 3}, {3, 5, 4}, {4, 8, 5}, {5, 9, 7},
                                      {7, 17, 8}, {13, 33, 10}, {2, 7, 1}, {9, 16, 6}};
  for (int pass = 0; pass < 2; pass++) {
    sh_sched_cache c;
    sh_lir_kernel *k = tiled(ctx, &c);
    REQUIRE(k);
    sh_lir_stmt ko, ki;
    if (!CHECK_OK(ctx, sh_sched_split(k, sh_lir_find_loop(k, "k"), 3, SH_SCHED_TAIL_GUARD, &ko, &ki, NULL))) {
      sh_lir_free(k);
      return;
    }
    sh_sched_read ra, rb;
    bool ok = CHECK_OK(ctx, sh_sched_cache_read(k, sh_lir_find_buffer(k, "A"), sh_lir_find_loop(k, "i_o"), 3,
                                                (sh_lir_stmt[]){ko, ki, c.band[0]}, &ra)) &&
              CHECK_OK(ctx, sh_sched_cache_read(k, sh_lir_find_buffer(k, "B"), sh_lir_find_loop(k, "j_o"), 3,
                                                (sh_lir_stmt[]){ko, ki, c.band[1]}, &rb)) &&
              CHECK_OK(ctx, sh_lir_verify(k));
    /* (i_o over the pool is refused: B's copy of a j_o is shared by the i_o; j_o is not) */
    if (ok && pass == 1) ok = CHECK_OK(ctx, sh_sched_parallel(k, sh_lir_find_loop(k, "j_o")));
    if (ok && !interp_ok(ctx, k, false, shapes, SH_ARRAY_LEN(shapes)))
      th_fail(__FILE__, __LINE__, "pass %d:\n%s", pass, text(ctx, k));
    sh_lir_free(k);
  }
}
