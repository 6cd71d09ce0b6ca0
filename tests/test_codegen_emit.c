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
#include "codegen/lir_int.h"
#include "codegen/lir_sched.h"
#include "codegen/tune.h"
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
#if !defined(__x86_64__)
  if (isa != SHEAF_ISA_SCALAR) { /* the AVX levels' flags are x86-64's */
    fprintf(stderr, "  note: %s (%s) not built: not an x86-64 host\n", tag, sheaf_isa_name(isa));
    return NULL;
  }
#endif
  const char *src[8] = {0};
  char *srcm[8] = {0};
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

TEST(codegen_emit_matmul_gelu) {
  if (!have_cc()) return;
  sheaf_ctx *ctx = th_ctx();
  static const int64_t Ms[] = {1, 6, 7, 13, 97}, Ns[] = {1, 8, 9, 16, 17, 33}, Ks[] = {1, 17, 64};
  for (size_t l = 0; l < SH_ARRAY_LEN(isa_levels); l++) {
    sheaf_isa isa = isa_levels[l];
    char name[32];
    snprintf(name, sizeof name, "mmg_%s", sheaf_isa_name(isa));
    sh_lir_kernel *k = lb_matmul(ctx, name, true);
    REQUIRE(k);
    REQUIRE_OK(ctx, sh_sched_default(k, isa));
    /* the epilogue was fused into the tile's store: one nest left */
    CHECK(sh_lir_find_buffer(k, "Z") >= 0 && k->bufs[sh_lir_find_buffer(k, "Z")].inlined);
    CHECK(k->bufs[sh_lir_find_buffer(k, "C")].inlined);
    CHECK_EQ_INT(sh_lir_body_len(k, sh_lir_root(k)), 1);
    void *so = build(ctx, name, &k, 1, isa, runs(isa));
    if (so && runs(isa)) {
      check_matmul(ctx, so, name, true, true, Ms, (int)SH_ARRAY_LEN(Ms), Ns, (int)SH_ARRAY_LEN(Ns), Ks,
                   (int)SH_ARRAY_LEN(Ks));
      dlclose(so);
    }
    sh_lir_free(k);
  }
}

/* The tile's prefetch of B's panel (sh_sched_opts.prefetch) at distances
 * off (no_prefetch), 1, 7, 64 (the default) and 5000 (always past the end of B: rows
 * past K fall into the next panel or past the buffer, a hint that must not
 * fault), with and without the epilogue, at every level: K below, at and
 * above each distance, M and N off the tiles. */
TEST(codegen_emit_matmul_prefetch) {
  if (!have_cc()) return;
  sheaf_ctx *ctx = th_ctx();
  static const int64_t Ms[] = {1, 7, 97}, Ns[] = {1, 9, 17, 33}, Ks[] = {1, 7, 8, 65, 130};
  static const int dists[] = {-1, 1, 7, 64, 5000};
  for (size_t l = 0; l < SH_ARRAY_LEN(isa_levels); l++)
    for (size_t d = 0; d < SH_ARRAY_LEN(dists); d++)
      for (int ep = 0; ep < 2; ep++) {
        sheaf_isa isa = isa_levels[l];
        char name[48];
        snprintf(name, sizeof name, "mmpf%s_%s_%zu", ep ? "g" : "", sheaf_isa_name(isa), d);
        sh_lir_kernel *k = lb_matmul(ctx, name, ep);
        REQUIRE(k);
        sh_sched_opts o = {.prefetch = dists[d] > 0 ? dists[d] : 0, .no_prefetch = dists[d] < 0};
        REQUIRE_OK(ctx, sh_sched_default_opts(k, isa, &o));
        char *c = emit(ctx, k);
        REQUIRE(c);
        CHECK_EQ_INT(strstr(c, "* 4u));") != NULL, dists[d] > 0); /* B's (the output's end in ", 1)") */
        free(c);
        void *so = build(ctx, name, &k, 1, isa, runs(isa));
        if (so && runs(isa)) {
          check_matmul(ctx, so, name, ep, true, Ms, (int)SH_ARRAY_LEN(Ms), Ns, (int)SH_ARRAY_LEN(Ns), Ks,
                       (int)SH_ARRAY_LEN(Ks));
          dlclose(so);
        }
        sh_lir_free(k);
      }
}

/* The remainder tiles (sh_sched_opts.rem_rows): a partial row tile with r
 * rows left runs a copy of the tile with r row steps (the default: one copy
 * per r of 1 .. mr - 1; AVX-512 1, 2, 3, 4, 6, 8 of 12). At every level, with and without the
 * epilogue, with K blocks (8) and the prefetch on and off, the default r,
 * r = 1 and none (-1): every M from 1 to 25 (every remainder of every tile,
 * below, at and above it) and 64, 97, 193, against the reference. */
static void matmul_remainder(size_t level) {
  if (!have_cc()) return;
  sheaf_ctx *ctx = th_ctx();
  static int64_t Ms[28];
  for (int m = 0; m < 25; m++) Ms[m] = m + 1;
  Ms[25] = 64, Ms[26] = 97, Ms[27] = 193;
  static const int64_t Ns[] = {1, 17, 33}, Ks[] = {1, 9, 20};
  static const sh_sched_opts cfgs[] = {
      {0},
      {.kc = 8},
      {.kc = 8, .no_prefetch = 1},
      {.prefetch = 7},
      {.rem_rows = 1},
      {.rem_rows = -1},
  };
  /* a knob the tuner searches (off against the default) */
  int nf;
  const sh_tune_field *f = sh_tune_fields(&nf), *rf = NULL;
  for (int i = 0; i < nf; i++)
    if (!strcmp(f[i].name, "rem_rows")) rf = &f[i];
  CHECK(rf && rf->n_vals == 1 && rf->vals[0] == -1);
  for (size_t l = level; l == level; l++)
    for (size_t c = 0; c < SH_ARRAY_LEN(cfgs); c++)
      for (int ep = 0; ep < 2; ep++) {
        if (ep && c >= 4) continue; /* r = 1 and none: without the epilogue only */
        sheaf_isa isa = isa_levels[l];
        char name[48];
        snprintf(name, sizeof name, "mmrem%s_%s_%zu", ep ? "g" : "", sheaf_isa_name(isa), c);
        sh_lir_kernel *k = lb_matmul(ctx, name, ep);
        REQUIRE(k);
        REQUIRE_OK(ctx, sh_sched_default_opts(k, isa, &cfgs[c]));
        /* the remainder copy's row loops: r steps (none when rem_rows < 0) */
        int64_t mr = isa == SHEAF_ISA_AVX512 ? 12 : isa == SHEAF_ISA_AVX2 ? 6 : 4;
        /* the default: one copy per row count 1 .. mr - 1 (AVX-512: 1, 2, 3, 4, 6, 8) */
        int64_t rs[12], nrs = 0;
        if (cfgs[c].rem_rows > 0) rs[nrs++] = cfgs[c].rem_rows;
        else if (cfgs[c].rem_rows == 0)
          for (int64_t r = 1; r < mr; r++)
            if (mr <= 8 || r <= 4 || r == 6 || r == mr - mr / 3) rs[nrs++] = r;
        sh_buf tb;
        sh_buf_init(&tb, ctx);
        sh_lir_print(k, &tb);
        const char *t = sh_buf_cstr(&tb);
        for (int64_t q = 0; q < nrs; q++) {
          char want[48];
          snprintf(want, sizeof want, " in 0..%lld unroll", (long long)rs[q]);
          CHECK(strstr(t, want) != NULL);
        }
        if (nrs == 0) CHECK(strstr(t, "_r in 0..") == NULL);
        sh_buf_free(&tb);
        void *so = build(ctx, name, &k, 1, isa, runs(isa));
        if (so && runs(isa)) {
          check_matmul(ctx, so, name, ep, true, Ms, (int)SH_ARRAY_LEN(Ms), Ns, (int)SH_ARRAY_LEN(Ns), Ks,
                       (int)SH_ARRAY_LEN(Ks));
          dlclose(so);
        }
        sh_lir_free(k);
      }
}

/* One test per level (each level's kernels carry a tile copy per row
 * count: compiling all three in one test ran past the harness's 300 s
 * on a loaded host). */
TEST(codegen_emit_matmul_remainder_scalar) { matmul_remainder(0); }
TEST(codegen_emit_matmul_remainder_avx2) { matmul_remainder(1); }
TEST(codegen_emit_matmul_remainder_avx512) { matmul_remainder(2); }

/* The tile's inner loop as emitted: a packed B panel's vectors through
 * sk_ldp (loaded once into a register, never folded into each row's FMA)
 * and `#pragma GCC unroll 4` right before each copy's k loop (whole,
 * remainder, partial); neither without packing, nor in a rows kernel. Then
 * every register tile the tuner tries (sh_tune_tiles), at every level, with
 * the epilogue, K blocks (8, without the prefetch) and without, against the
 * reference at M from 1 to 25 and 64, 97 (below, at, above and multiples of
 * each tile's rows and its remainder), N 1, 8, 17, 48, 65 and K 1, 9, 20. */
static void tile_loop_tiles(size_t level);

TEST(codegen_emit_matmul_tile_loop) {
  if (!have_cc()) return;
  sheaf_ctx *ctx = th_ctx();
  for (int pk = 0; pk < 2; pk++) {
    sh_lir_kernel *k = lb_matmul(ctx, pk ? "tlp" : "tlu", false);
    REQUIRE(k);
    REQUIRE_OK(ctx, sh_sched_default_opts(k, SHEAF_ISA_AVX2, &(sh_sched_opts){.no_pack = !pk}));
    char *c = emit(ctx, k);
    REQUIRE(c);
    int pragmas = 0, kloops = 0;
    for (const char *p = c; (p = strstr(p, "#pragma GCC unroll 4\n")); p++) {
      pragmas++;
      const char *q = strchr(p, '\n') + 1;
      while (*q == ' ') q++;
      if (!strncmp(q, "for (int64_t v_k", 16)) kloops++;
    }
    if (pk) {
      CHECK(strstr(c, "sk_ldp8(") != NULL);
      CHECK(pragmas >= 3 && kloops == pragmas); /* whole, remainder, partial */
    } else {
      CHECK(strstr(c, "sk_ldp") == NULL);
      CHECK_EQ_INT(pragmas, 0);
    }
    free(c);
    sh_lir_free(k);
  }
  sh_lir_kernel *rk = lb_softmax(ctx, "tlrows");
  REQUIRE(rk);
  REQUIRE_OK(ctx, sh_sched_default(rk, SHEAF_ISA_AVX2));
  char *rc = emit(ctx, rk);
  REQUIRE(rc);
  CHECK(strstr(rc, "#pragma GCC unroll") == NULL && strstr(rc, "sk_ldp") == NULL);
  free(rc);
  sh_lir_free(rk);
}

/* Every register tile at one level (a test per level: their tile copies per
 * row count ran past the harness's 300 s in one test on a loaded host). */
static void tile_loop_tiles(size_t level) {
  if (!have_cc()) return;
  sheaf_ctx *ctx = th_ctx();
  static int64_t Ms[27];
  for (int m = 0; m < 25; m++) Ms[m] = m + 1;
  Ms[25] = 64, Ms[26] = 97;
  static const int64_t Ns[] = {1, 8, 17, 48, 65}, Ks[] = {1, 9, 20};
  static const sh_sched_opts cfgs[] = {{0}, {.kc = 8, .no_prefetch = 1}};
  for (size_t l = level; l == level; l++) {
    sheaf_isa isa = isa_levels[l];
    const int(*tiles)[2];
    int nt = sh_tune_tiles(isa == SHEAF_ISA_AVX512 ? 16 : isa == SHEAF_ISA_AVX2 ? 8 : 1, &tiles);
    for (int t = 0; t < nt; t++) {
      sh_lir_kernel *ks[4];
      char names[4][48];
      int n = 0;
      for (size_t c = 0; c < SH_ARRAY_LEN(cfgs); c++)
        for (int ep = 0; ep < 2; ep++, n++) {
          snprintf(names[n], sizeof names[n], "tl%s_%s_%d_%zu", ep ? "g" : "", sheaf_isa_name(isa), t, c);
          sh_sched_opts o = cfgs[c];
          o.mr = tiles[t][0], o.nr = tiles[t][1];
          ks[n] = lb_matmul(ctx, names[n], ep);
          REQUIRE(ks[n]);
          REQUIRE_OK(ctx, sh_sched_default_opts(ks[n], isa, &o));
        }
      char tag[48];
      snprintf(tag, sizeof tag, "tl_%s_%d", sheaf_isa_name(isa), t);
      void *so = build(ctx, tag, ks, n, isa, runs(isa));
      if (so && runs(isa)) {
        for (int i = 0; i < n; i++)
          check_matmul(ctx, so, names[i], i % 2 == 1, true, Ms, (int)SH_ARRAY_LEN(Ms), Ns, (int)SH_ARRAY_LEN(Ns), Ks,
                       (int)SH_ARRAY_LEN(Ks));
        dlclose(so);
      }
      for (int i = 0; i < n; i++) sh_lir_free(ks[i]);
    }
  }
}
TEST(codegen_emit_matmul_tile_loop_scalar) { tile_loop_tiles(0); }
TEST(codegen_emit_matmul_tile_loop_avx2) { tile_loop_tiles(1); }
TEST(codegen_emit_matmul_tile_loop_avx512) { tile_loop_tiles(2); }

/* Row kernels: unscheduled and default-scheduled, every level. */
TEST(codegen_emit_rows) {
  if (!have_cc()) return;
  sheaf_ctx *ctx = th_ctx();
  static const int64_t Ms[] = {1, 3, 4, 5, 9}, Ns[] = {1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 768};
  sk_abi abi;
  sh_lir_abi_init(ctx, 0, &abi);
  for (int l = -1; l < (int)SH_ARRAY_LEN(isa_levels); l++) {
    sheaf_isa isa = l < 0 ? SHEAF_ISA_SCALAR : isa_levels[l];
    char n1[32], n2[32];
    snprintf(n1, sizeof n1, "sm_%s", l < 0 ? "plain" : sheaf_isa_name(isa));
    snprintf(n2, sizeof n2, "ln_%s", l < 0 ? "plain" : sheaf_isa_name(isa));
    sh_lir_kernel *ks[2] = {lb_softmax(ctx, n1), lb_layernorm(ctx, n2, 1e-5f)};
    REQUIRE(ks[0] && ks[1]);
    if (l >= 0) {
      REQUIRE_OK(ctx, sh_sched_default(ks[0], isa));
      REQUIRE_OK(ctx, sh_sched_default(ks[1], isa));
    }
    char tag[40];
    snprintf(tag, sizeof tag, "rows_%s", n1);
    void *so = build(ctx, tag, ks, 2, isa, runs(isa));
    if (so && runs(isa)) {
      sk_entry_fn sm = entry(so, n1), ln = entry(so, n2);
      REQUIRE(sm && ln);
      uint64_t seed = 5;
      for (size_t a = 0; a < SH_ARRAY_LEN(Ms); a++)
        for (size_t b = 0; b < SH_ARRAY_LEN(Ns); b++) {
          int64_t M = Ms[a], N = Ns[b], sizes[2] = {M, N};
          float *x = th_frand_fill(&seed, M * N), *g = th_frand_fill(&seed, N), *bb = th_frand_fill(&seed, N),
                *y = malloc(sizeof(float) * (size_t)(M * N)), *r = malloc(sizeof(float) * (size_t)(M * N));
          for (int64_t i = 0; i < M * N; i++) x[i] *= 8; /* exp over a range */
          char what[80];
          CHECK_EQ_INT(sm(&abi, sizes, (sk_arg[]){{.data = x}, {.data = y}}), 0);
          lr_softmax(M, N, x, r);
          snprintf(what, sizeof what, "%s M=%lld N=%lld", n1, (long long)M, (long long)N);
          bool ok = lr_close(what, y, r, M * N, 1e-5);
          CHECK_EQ_INT(ln(&abi, sizes, (sk_arg[]){{.data = x}, {.data = g}, {.data = bb}, {.data = y}}), 0);
          lr_layernorm(M, N, x, g, bb, 1e-5f, r);
          snprintf(what, sizeof what, "%s M=%lld N=%lld", n2, (long long)M, (long long)N);
          ok = lr_close(what, y, r, M * N, 1e-5) && ok;
          free(x), free(g), free(bb), free(y), free(r);
          if (!ok) break;
        }
      dlclose(so);
    }
    sh_lir_free(ks[0]);
    sh_lir_free(ks[1]);
  }
}

/* Ragged kernels, lengths 0, 1, 17, 64: unscheduled, default schedule. */
TEST(codegen_emit_ragged) {
  if (!have_cc()) return;
  sheaf_ctx *ctx = th_ctx();
  static const int32_t lens[] = {0, 1, 17, 64, 3, 0, 9};
  static const int64_t Ds[] = {1, 7, 8, 31, 32, 33, 64};
  sk_abi abi;
  sh_lir_abi_init(ctx, 0, &abi);
  for (int l = -1; l < (int)SH_ARRAY_LEN(isa_levels); l++) {
    sheaf_isa isa = l < 0 ? SHEAF_ISA_SCALAR : isa_levels[l];
    char n1[32], n2[32];
    snprintf(n1, sizeof n1, "rsc_%s", l < 0 ? "plain" : sheaf_isa_name(isa));
    snprintf(n2, sizeof n2, "rsu_%s", l < 0 ? "plain" : sheaf_isa_name(isa));
    sh_lir_kernel *ks[2] = {lb_ragged_scores(ctx, n1, 0.125f), lb_ragged_sums(ctx, n2)};
    REQUIRE(ks[0] && ks[1]);
    if (l >= 0) {
      REQUIRE_OK(ctx, sh_sched_default(ks[0], isa));
      REQUIRE_OK(ctx, sh_sched_default(ks[1], isa));
    }
    char tag[40];
    snprintf(tag, sizeof tag, "ragged_%s", n1);
    void *so = build(ctx, tag, ks, 2, isa, runs(isa));
    if (so && runs(isa)) {
      sk_entry_fn sc = entry(so, n1), su = entry(so, n2);
      REQUIRE(sc && su);
      for (size_t d = 0; d < SH_ARRAY_LEN(Ds); d++) {
        lr_ragged rg;
        REQUIRE(lr_ragged_make(&rg, lens, (int64_t)SH_ARRAY_LEN(lens), Ds[d], 1, 31 + d));
        int64_t sizes[2] = {rg.batch, rg.d};
        CHECK_EQ_INT(sc(&abi, sizes, (sk_arg[]){{.data = rg.len}, {.data = rg.qoff}, {.data = rg.soff},
                                              {.data = rg.q}, {.data = rg.k}, {.data = rg.s}}),
                     0);
        lr_ragged_scores(&rg, 0.125f, rg.sref);
        char what[80];
        snprintf(what, sizeof what, "%s D=%lld", n1, (long long)Ds[d]);
        bool ok = lr_close(what, rg.s, rg.sref, rg.s_elems, 1e-5);
        CHECK_EQ_INT(su(&abi, sizes, (sk_arg[]){{.data = rg.len}, {.data = rg.qoff}, {.data = rg.q},
                                              {.data = rg.sums}}),
                     0);
        lr_ragged_sums(&rg, rg.sumsref);
        snprintf(what, sizeof what, "%s D=%lld", n2, (long long)Ds[d]);
        ok = lr_close(what, rg.sums, rg.sumsref, rg.batch * rg.d, 1e-5) && ok;
        lr_ragged_free(&rg);
        if (!ok) break;
      }
      dlclose(so);
    }
    sh_lir_free(ks[0]);
    sh_lir_free(ks[1]);
  }
}

/* A from row pointers (the runtime's gathered rows), C with a row stride. */
TEST(codegen_emit_access_modes) {
  if (!have_cc()) return;
  sheaf_ctx *ctx = th_ctx();
  sheaf_isa isa = runs(SHEAF_ISA_AVX2) ? SHEAF_ISA_AVX2 : SHEAF_ISA_SCALAR;
  sh_lir_kernel *k = lb_matmul(ctx, "mm_modes", false);
  REQUIRE(k);
  REQUIRE_OK(ctx, sh_lir_buffer_access(k, sh_lir_find_buffer(k, "A"), SH_LIR_ACCESS_ROWS));
  REQUIRE_OK(ctx, sh_lir_buffer_access(k, sh_lir_find_buffer(k, "C"), SH_LIR_ACCESS_LD));
  REQUIRE_OK(ctx, sh_sched_default(k, isa));
  void *so = build(ctx, "mm_modes", &k, 1, isa, true);
  sh_lir_free(k);
  REQUIRE(so);
  sk_entry_fn fn = entry(so, "mm_modes");
  void (*pack)(const int64_t *, const float *, int64_t, int, float *);
  void *p = dlsym(so, "mm_modes_pack_B");
  memcpy(&pack, &p, sizeof pack);
  REQUIRE(fn && pack);
  sk_abi abi;
  sh_lir_abi_init(ctx, 0, &abi);
  uint64_t seed = 9;
  int64_t M = 13, N = 37, K = 19, ldc = 41, sizes[3] = {M, N, K};
  float *A = th_frand_fill(&seed, 2 * M * K), *B = th_frand_fill(&seed, K * N),
        *Bt = malloc(sizeof(float) * (size_t)(K * N)), *Bp = calloc((size_t)(K * 48), sizeof(float)),
        *C = calloc((size_t)(M * ldc), sizeof(float)), *Cd = malloc(sizeof(float) * (size_t)(M * N)),
        *Ad = malloc(sizeof(float) * (size_t)(M * K)), *R = malloc(sizeof(float) * (size_t)(M * N));
  float *rows[13];
  for (int64_t i = 0; i < M; i++) { /* rows in reverse order, every other one */
    rows[i] = A + (2 * (M - 1 - i)) * K;
    memcpy(Ad + i * K, rows[i], sizeof(float) * (size_t)K);
  }
  /* the packer also takes B^T (a PyTorch Linear weight) */
  for (int64_t kk = 0; kk < K; kk++)
    for (int64_t n = 0; n < N; n++) Bt[n * K + kk] = B[kk * N + n];
  pack(sizes, Bt, K, 1, Bp);
  sk_arg args[3] = {{.rows = (void *const *)rows}, {.data = Bp}, {.data = C, .ld = ldc}};
  CHECK_EQ_INT(fn(&abi, sizes, args), 0);
  for (int64_t i = 0; i < M; i++) memcpy(Cd + i * N, C + i * ldc, sizeof(float) * (size_t)N);
  lr_matmul(M, N, K, Ad, B, NULL, false, R);
  CHECK(lr_close("row pointers / row stride", Cd, R, M * N, 1e-5));
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = N; j < ldc; j++) CHECK(C[i * ldc + j] == 0.0f); /* no write past N */
  free(A), free(B), free(Bt), free(Bp), free(C), free(Cd), free(Ad), free(R);
  dlclose(so);
}

/* CoRa: the scores' ragged dimensions stored padded to 8 and the j loop
 * split by 8 with padding (no guard): the padding lanes compute garbage
 * the logical elements never see. */
TEST(codegen_emit_ragged_padded) {
  if (!have_cc()) return;
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k = lb_ragged_scores(ctx, "rsc_pad", 0.5f);
  REQUIRE(k);
  sh_lir_buf Q = sh_lir_find_buffer(k, "Q"), Kt = sh_lir_find_buffer(k, "Kt"), S = sh_lir_find_buffer(k, "S");
  REQUIRE_OK(ctx, sh_sched_pad(k, Q, 1, 8));
  REQUIRE_OK(ctx, sh_sched_pad(k, Kt, 1, 8));
  REQUIRE_OK(ctx, sh_sched_pad(k, S, 1, 8));
  REQUIRE_OK(ctx, sh_sched_pad(k, S, 2, 8));
  sh_lir_stmt jo, ji, t;
  REQUIRE_OK(ctx, sh_sched_split(k, sh_lir_find_loop(k, "j"), 8, SH_SCHED_TAIL_PAD, &jo, &ji, &t));
  CHECK_EQ_INT(t, SH_LIR_NONE);
  REQUIRE_OK(ctx, sh_sched_unroll(k, ji));
  void *so = build(ctx, "rsc_pad", &k, 1, SHEAF_ISA_SCALAR, true);
  REQUIRE(so);
  sk_entry_fn fn = entry(so, "rsc_pad");
  REQUIRE(fn);
  sk_abi abi;
  sh_lir_abi_init(ctx, 1, &abi);
  static const int32_t lens[] = {0, 1, 17, 64, 5};
  lr_ragged rg;
  REQUIRE(lr_ragged_make(&rg, lens, 5, 12, 8, 77));
  int64_t sizes[2] = {rg.batch, rg.d};
  /* interpreter and generated code agree, and both match the reference */
  float *si = calloc((size_t)rg.s_elems + 1, sizeof(float));
  CHECK_OK(ctx, sh_lir_run(k, sizes, (sh_lir_arg[]){{.data = rg.len}, {.data = rg.qoff}, {.data = rg.soff},
                                                  {.data = rg.q}, {.data = rg.k}, {.data = si}}));
  CHECK_EQ_INT(fn(&abi, sizes, (sk_arg[]){{.data = rg.len}, {.data = rg.qoff}, {.data = rg.soff},
                                          {.data = rg.q}, {.data = rg.k}, {.data = rg.s}}),
               0);
  lr_ragged_scores(&rg, 0.5f, rg.sref);
  /* compare the logical elements only */
  for (int64_t b = 0; b < rg.batch; b++) {
    int64_t L = rg.len[b], Ls = lr_round(L, 8);
    for (int64_t i = 0; i < L; i++)
      for (int64_t j = 0; j < L; j++) {
        int64_t at = rg.soff[b] + i * Ls + j;
        if (!CHECK_NEAR(rg.s[at], rg.sref[at], 1e-5 * fmax(1, fabs(rg.sref[at])))) goto out;
        if (!CHECK_NEAR(si[at], rg.sref[at], 1e-5 * fmax(1, fabs(rg.sref[at])))) goto out;
      }
  }
out:
  free(si);
  lr_ragged_free(&rg);
  sh_lir_free(k);
  dlclose(so);
}

/* The same IR gives the same bytes; emission leaves the kernel unchanged. */
TEST(codegen_emit_deterministic) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *a = lb_matmul(ctx, "mmd", true), *b = lb_matmul(ctx, "mmd", true);
  REQUIRE(a && b);
  REQUIRE_OK(ctx, sh_sched_default(a, SHEAF_ISA_AVX2));
  REQUIRE_OK(ctx, sh_sched_default(b, SHEAF_ISA_AVX2));
  char *s1 = emit(ctx, a), *s2 = emit(ctx, a), *s3 = emit(ctx, b);
  REQUIRE(s1 && s2 && s3);
  CHECK(strcmp(s1, s2) == 0);
  CHECK(strcmp(s1, s3) == 0);
  int32_t nex = a->n_ex;
  free(s2);
  s2 = emit(ctx, a);
  CHECK_EQ_INT(a->n_ex, nex);
  CHECK_CONTAINS(s1, "int mmd(const sk_abi *abi, const int64_t *sizes, const sk_arg *args) {");
  CHECK_CONTAINS(s1, "sk_gelu8(");
  CHECK_CONTAINS(s1, "sk_parallel(abi, ");
  free(s1), free(s2), free(s3);
  sh_lir_free(a);
  sh_lir_free(b);
}
