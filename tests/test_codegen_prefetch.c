/*
 * test_codegen_prefetch.c — the GEMM tile's software prefetch of its
 * packed B panel (sh_sched_opts.prefetch, SH_LIR_S_PREFETCH): where the
 * default schedule puts it at each ISA level and distance, that the knob
 * turns it off, that kernels without a packed B (rows, ragged) get none,
 * that the emitted C carries it as __builtin_prefetch, and that the tuner
 * knows the knob (its field list, its records). The results of kernels
 * with the prefetch against the scalar reference: test_codegen_emit.c
 * (codegen_emit_matmul_prefetch) and test_codegen_lower.c
 * (codegen_lower_kernels_prefetch).
 */
#include <stdlib.h>
#include <string.h>

#include "codegen/lir_emit.h"
#include "codegen/lir_int.h"
#include "codegen/lir_sched.h"
#include "codegen/tune.h"
#include "harness.h"
#include "lang/check.h"
#include "lang/kernel.h"
#include "lir_build.h"
#include "lir_ref.h"

static int count(const char *t, const char *what) {
  int n = 0;
  for (const char *p = t; (p = strstr(p, what)) != NULL; p += strlen(what)) n++;
  return n;
}

/* The kernel as text (printed) or as C (emitted); a static buffer. */
static const char *show(sheaf_ctx *ctx, sh_lir_kernel *k, bool c) {
  static char t[1 << 20]; /* the C of every copy of the tile */
  sh_buf b;
  sh_buf_init(&b, ctx);
  if (c) CHECK_OK(ctx, sh_lir_emit_c(k, &b));
  else sh_lir_print(k, &b);
  snprintf(t, sizeof t, "%s", sh_buf_cstr(&b));
  sh_buf_free(&b);
  return t;
}

/* The knobs for a prefetch distance pf (< 0: no_prefetch). */
static sh_sched_opts pf_opts(int pf) {
  return pf < 0 ? (sh_sched_opts){.no_prefetch = 1} : (sh_sched_opts){.prefetch = pf};
}

/* The matmul at `isa` with prefetch pf; NULL on failure. */
static sh_lir_kernel *mm_at(sheaf_ctx *ctx, sheaf_isa isa, int pf, bool ep) {
  sh_lir_kernel *k = lb_matmul(ctx, "mm", ep);
  if (!k) return NULL;
  sh_sched_opts o = pf_opts(pf);
  o.prefetch_c = ep ? 0 : 1; /* the output's lines: the knob (mm), the default (off: mm + GELU) */
  if (!CHECK_OK(ctx, sh_sched_default_opts(k, isa, &o))) {
    sh_lir_free(k);
    return NULL;
  }
  return k;
}

/* Copies of the tile's reduction loop at the default: the whole tile, the
 * unswitched slow copy and one remainder copy per row count 1 .. mr - 1
 * (AVX-512: 1, 2, 3, 4, 6, 8; sched_default.c, rem_list). */
static int tile_copies(sheaf_isa isa) { return isa == SHEAF_ISA_AVX512 ? 8 : isa == SHEAF_ISA_AVX2 ? 7 : 5; }

/* One prefetch per 64-byte line of the panel row, at the top of every copy
 * of the tile's reduction loop (whole tile, unswitched slow copy, its
 * remainder-rows copies). */
TEST(codegen_prefetch_placement) {
  sheaf_ctx *ctx = th_ctx();
  static const struct {
    sheaf_isa isa;
    int pf, per_copy; /* prefetches per reduction loop */
    const char *line; /* one of them, printed */
  } cases[] = {
      {SHEAF_ISA_AVX2, 0, 1, "        for k in 0..K:\n          prefetch B[k + 64, i_o_j_o % ((N + 15) / 16) * 16]\n"},
      {SHEAF_ISA_AVX2, 8, 1, "prefetch B[k + 8, i_o_j_o % ((N + 15) / 16) * 16]\n"},
      {SHEAF_ISA_AVX2, 1, 1, "prefetch B[k + 1, "},
      {SHEAF_ISA_AVX2, -1, 0, NULL},
      {SHEAF_ISA_AVX512, 0, 2, "prefetch B[k + 64, i_o_j_o % ((N + 31) / 32) * 32 + 16]\n"},
      {SHEAF_ISA_AVX512, -1, 0, NULL},
      {SHEAF_ISA_SCALAR, 0, 0, NULL}, /* off by default at the scalar level */
      {SHEAF_ISA_SCALAR, 4, 1, "prefetch B[k + 4, i_o_j_o % ((N + 3) / 4) * 4]\n"},
  };
  for (size_t i = 0; i < SH_ARRAY_LEN(cases); i++) {
    sh_lir_kernel *k = mm_at(ctx, cases[i].isa, cases[i].pf, i % 2 == 1);
    if (!k) continue;
    CHECK_OK(ctx, sh_lir_verify(k));
    const char *t = show(ctx, k, false);
    if (!CHECK_EQ_INT(count(t, "prefetch B["), tile_copies(cases[i].isa) * cases[i].per_copy))
      printf("  case %zu (%s, prefetch %d):\n%s\n", i, sheaf_isa_name(cases[i].isa), cases[i].pf, t);
    if (cases[i].line) CHECK_CONTAINS(t, cases[i].line);
    CHECK_EQ_INT(count(t, "prefetch A["), 0);
    /* and with sh_sched_opts.prefetch_c (off by default) the output's
     * lines, for writing, at the top of the whole tile's copy: mr rows of
     * nr columns, 64 bytes a line (AVX2 6 x 1, AVX-512 12 x 2, scalar 4 x 1) */
    int out = i % 2 == 1 ? 0 : cases[i].isa == SHEAF_ISA_AVX2 ? 6 : cases[i].isa == SHEAF_ISA_AVX512 ? 24 : 4;
    CHECK_EQ_INT(count(t, i % 2 == 1 ? "prefetch Y[" : "prefetch C["), out);
    if (i == 0)
      CHECK_CONTAINS(t, "      alloc C_acc[6, 2, 8]:\n"
                        "        prefetch C[i_o_j_o / ((N + 15) / 16) * 96 + i_i_o * 6, i_o_j_o % ((N + 15) / 16) * 16]\n"
                        "        prefetch C[i_o_j_o / ((N + 15) / 16) * 96 + i_i_o * 6 + 1, ");
    const char *c = show(ctx, k, true);
    CHECK_EQ_INT(count(c, "(uintptr_t)b_B + "), tile_copies(cases[i].isa) * cases[i].per_copy);
    CHECK_EQ_INT(count(c, "* 4u), 1);"), out);
    if (cases[i].per_copy) CHECK_CONTAINS(c, "__builtin_prefetch((const void *)((uintptr_t)b_B + (uintptr_t)(");
    sh_lir_free(k);
  }
}

/* With K blocks the prefetch follows the block's k (the row in B). */
TEST(codegen_prefetch_kblock) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k = lb_matmul(ctx, "mm", false);
  REQUIRE(k);
  REQUIRE_OK(ctx, sh_sched_default_opts(k, SHEAF_ISA_AVX2, &(sh_sched_opts){.kc = 128, .prefetch = 16}));
  const char *t = show(ctx, k, false);
  CHECK_CONTAINS(t, "          for k in 0..min(128, K - k_blk * 128):\n"
                    "            prefetch B[k_blk * 128 + k + 16, i_o_j_o % ((N + 15) / 16) * 16]\n");
  CHECK_EQ_INT(count(t, "prefetch B["), tile_copies(SHEAF_ISA_AVX2));
  sh_lir_free(k);
}

/* Rows and ragged kernels read no packed panel: no prefetch, whatever the
 * knob says. */
TEST(codegen_prefetch_not_in_rows) {
  sheaf_ctx *ctx = th_ctx();
  for (int pf = 0; pf <= 32; pf += 32) {
    sh_lir_kernel *ks[4] = {lb_softmax(ctx, "sm"), lb_layernorm(ctx, "ln", 1e-5f), lb_ragged_scores(ctx, "rs", 0.125f),
                            lb_ragged_sums(ctx, "ru")};
    for (int i = 0; i < 4; i++) {
      REQUIRE(ks[i]);
      if (CHECK_OK(ctx, sh_sched_default_opts(ks[i], SHEAF_ISA_AVX2, &(sh_sched_opts){.prefetch = pf}))) {
        CHECK_EQ_INT(count(show(ctx, ks[i], false), "prefetch"), 0);
        CHECK_EQ_INT(count(show(ctx, ks[i], true), "__builtin_prefetch"), 0);
      }
      sh_lir_free(ks[i]);
    }
  }
}

/* A prefetch is a hint: the interpreter skips it (its row runs past K here:
 * K = 3, distance 64), and results equal the kernel without it. */
TEST(codegen_prefetch_interp) {
  sheaf_ctx *ctx = th_ctx();
  static const int64_t shapes[][3] = {{1, 1, 1}, {7, 9, 3}, {13, 17, 70}, {6, 16, 64}};
  for (size_t s = 0; s < SH_ARRAY_LEN(shapes); s++) {
    int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], sizes[3] = {M, N, K};
    uint64_t seed = 5 + s;
    float *A = th_frand_fill(&seed, M * K), *B = th_frand_fill(&seed, K * N), *Y = malloc(sizeof(float) * (size_t)(M * N)),
          *R = malloc(sizeof(float) * (size_t)(M * N));
    /* unpacked B (no_pack): the interpreter reads B dense; the prefetch
     * stays off (no panel), so ask the IR directly for one */
    sh_lir_kernel *k = lb_matmul(ctx, "mm", false);
    REQUIRE(k);
    sh_lir_buf b = sh_lir_find_buffer(k, "B");
    sh_lir_stmt kl = sh_lir_find_loop(k, "k");
    REQUIRE(kl >= 0);
    sh_lir_expr idx[2] = {sh_lir_add(k, sh_lir_lv(k, kl), sh_lir_int(k, 64)), sh_lir_int(k, 0)};
    REQUIRE(sh_lir_prefetch(k, kl, b, 2, idx) >= 0);
    REQUIRE_OK(ctx, sh_lir_verify(k));
    CHECK_EQ_INT(count(show(ctx, k, false), "prefetch B[k + 64, 0]\n"), 1);
    if (CHECK_OK(ctx, sh_lir_run(k, sizes, (sh_lir_arg[]){{.data = A}, {.data = B}, {.data = Y}}))) {
      lr_matmul(M, N, K, A, B, NULL, false, R);
      CHECK(lr_close("interp with prefetch", Y, R, M * N, 1e-5));
    }
    sh_lir_free(k);
    free(A), free(B), free(Y), free(R);
  }
  /* misuse: a prefetch of a temporary (an output's is allowed: fetched for
   * writing), of the wrong rank */
  sh_lir_kernel *k = lb_matmul(ctx, "mm", true);
  REQUIRE(k);
  sh_lir_stmt kl = sh_lir_find_loop(k, "k");
  sh_lir_expr z = sh_lir_int(k, 0), idx[2] = {z, z};
  CHECK(sh_lir_prefetch(k, kl, sh_lir_find_buffer(k, "C"), 2, idx) < 0);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "prefetch of C");
  sh_lir_free(k);
  k = lb_matmul(ctx, "mm", false);
  REQUIRE(k);
  kl = sh_lir_find_loop(k, "k");
  z = sh_lir_int(k, 0);
  CHECK(sh_lir_prefetch(k, kl, sh_lir_find_buffer(k, "B"), 1, &z) < 0);
  sh_lir_free(k);
  sheaf_ctx_clear_error(ctx);
}

static const char GATED[] = "kernel gated(x: f32[N, D], Wg: f32[D, H], Wh: f32[D, H]) -> f32[N, H] {\n"
                            "  g(n, h) +=! x(n, d) * Wg(d, h); t(n, h) +=! x(n, d) * Wh(d, h)\n"
                            "  out(n, h) = sigmoid(g(n, h)) * tanh(t(n, h))\n}\n";
static const char FFN[] = "kernel ffn(x: f32[N, D], W: f32[D, F], b: f32[F]) -> f32[N, F] {\n"
                          "  y(n, f) +=! x(n, d) * W(d, f)\n  out(n, f) = gelu(y(n, f) + b(f))\n}\n";

/* Through the lowering (sh_tune_generate: the knobs the tuner sets): the
 * FFN's tile prefetches by default; the gated unit's shared tile only when
 * the knob asks (one line per weight). */
TEST(codegen_prefetch_lowered) {
  sheaf_ctx *ctx = th_ctx();
  static const struct {
    const char *src;
    int pf, n;
  } cases[] = {{FFN, 0, 7}, {FFN, -1, 0}, {FFN, 16, 7}, {GATED, 0, 0}, {GATED, 16, 4}, {GATED, -1, 0}};
  for (size_t i = 0; i < SH_ARRAY_LEN(cases); i++) {
    sh_module m;
    if (CHECK_OK(ctx, sh_kernel_source_compile(&m, ctx, "k.sf", cases[i].src, strlen(cases[i].src)))) {
      const sh_kernel *const *ks;
      REQUIRE(sh_module_kernels(&m, &ks) == 1);
      sh_buf c;
      sh_buf_init(&c, ctx);
      sh_sched_opts o = pf_opts(cases[i].pf);
      if (CHECK_OK(ctx, sh_tune_generate(ctx, ks[0], SHEAF_ISA_AVX2, &o, &c, NULL))) {
        /* read prefetches (the output's, for writing, end in ", 1)") */
        if (!CHECK_EQ_INT(count(sh_buf_cstr(&c), "* 4u));"), cases[i].n)) printf("  case %zu\n", i);
        if (cases[i].pf == 16 && cases[i].n) CHECK_CONTAINS(sh_buf_cstr(&c), " * 16 + 256) * 4u));");
      }
      sh_buf_free(&c);
    }
    sh_module_free(&m);
  }
}

/* The tuner searches the knobs and records them. */
TEST(codegen_prefetch_tuner_knob) {
  sheaf_ctx *ctx = th_ctx();
  int n;
  const sh_tune_field *f = sh_tune_fields(&n);
  const sh_tune_field *pf = NULL, *off = NULL;
  for (int i = 0; i < n; i++) {
    if (!strcmp(f[i].name, "prefetch")) pf = &f[i];
    if (!strcmp(f[i].name, "no_prefetch")) off = &f[i];
  }
  REQUIRE(pf && off);
  CHECK(pf->n_vals >= 2);
  CHECK(off->n_vals == 1 && off->vals[0] == 1);
  sh_sched_opts o = {.prefetch = 32, .no_prefetch = 1};
  CHECK_EQ_INT(sh_tune_field_get(&o, pf), 32);
  CHECK_EQ_INT(sh_tune_field_get(&o, off), 1);
  sh_buf b;
  sh_buf_init(&b, ctx);
  sh_tune_opts_print(&o, &b);
  CHECK_CONTAINS(sh_buf_cstr(&b), "prefetch=32 no_prefetch=1");
  sh_buf_free(&b);
  /* records with the knobs: written, parsed back */
  sh_tune_set s, t;
  sh_tune_set_init(&s, ctx);
  sh_tune_set_init(&t, ctx);
  sh_tune_rec r;
  memset(&r, 0, sizeof r);
  snprintf(r.kernel, sizeof r.kernel, "mm");
  memset(r.ir, 'b', 32);
  memset(r.cc, '1', 32);
  snprintf(r.isa, sizeof r.isa, "avx2");
  r.n_sizes = 1;
  snprintf(r.size_names[0], SH_TUNE_NAME_MAX, "M");
  r.sizes[0] = 64, r.cls[0] = 64;
  r.opts.prefetch = 128;
  r.ns = 1000, r.default_ns = 1100;
  REQUIRE_OK(ctx, sh_tune_set_add(&s, &r));
  r.sizes[0] = 1600, r.cls[0] = 1024;
  r.opts.prefetch = 0, r.opts.no_prefetch = 1;
  REQUIRE_OK(ctx, sh_tune_set_add(&s, &r));
  sh_buf_init(&b, ctx);
  sh_tune_set_write(&s, &b);
  CHECK_CONTAINS(sh_buf_cstr(&b), " prefetch=128 no_prefetch=0");
  CHECK_CONTAINS(sh_buf_cstr(&b), " prefetch=0 no_prefetch=1");
  if (CHECK_OK(ctx, sh_tune_set_parse(&t, "p.tune", sh_buf_cstr(&b), b.len)) && CHECK_EQ_INT(t.n, 2)) {
    CHECK_EQ_INT(t.r[0].opts.prefetch, 128);
    CHECK_EQ_INT(t.r[1].opts.no_prefetch, 1);
  }
  sh_buf_free(&b);
  sh_tune_set_free(&s);
  sh_tune_set_free(&t);
}
