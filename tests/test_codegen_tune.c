/*
 * test_codegen_tune.c — the tuner (src/codegen/tune*.c, docs/CODEGEN.md
 * "Tuner"): records round trip through their text; shape-class buckets and
 * the record a size picks; malformed files fail with FILE:LINE, stale and
 * corrupt records are ignored with a warning; kernels run through records
 * that force each register tile equal a double-precision reference at sizes
 * below, at, above and at multiples of the tile (one compiled variant for
 * every class); a deterministic mini-search finds a record the kernel then
 * uses; two sizes in one class compile once; `sheaf tune` writes records.
 * The tests that compile are skipped with a note when no C compiler exists.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/base.h"
#include "codegen/jit.h"
#include "codegen/kernel_api.h"
#include "codegen/tune.h"
#include "harness.h"

static const char SRC[] =
    "kernel mm(A: f32[M, K], B: f32[K, N]) -> f32[M, N] { C(m, n) +=! A(m, k) * B(k, n) }\n";

static sheaf_isa avx2_or_scalar(void) {
  sheaf_isa h = sheaf_cpu_isa();
  return h == SHEAF_ISA_AVX2 || h == SHEAF_ISA_AVX512 ? SHEAF_ISA_AVX2 : SHEAF_ISA_SCALAR;
}

/* Warnings through the log callback, counted and kept. */
static int g_warns;
static char g_warn[1024];
static void log_fn(void *user, sheaf_log_level level, const char *msg) {
  (void)user;
  if (level != SHEAF_LOG_WARN) return;
  g_warns++;
  snprintf(g_warn, sizeof g_warn, "%s", msg);
}
static sheaf_ctx *log_ctx(void) {
  sheaf_ctx *ctx = th_ctx();
  ctx->log = log_fn;
  ctx->log_level = SHEAF_LOG_WARN;
  g_warns = 0;
  g_warn[0] = '\0';
  return ctx;
}

/* A record for mm at sizes (M, K, N) with knobs o, keyed for this kernel,
 * ISA and compiler. */
static sh_tune_rec mm_rec(sheaf_ctx *ctx, sheaf_kernel *k, sheaf_isa isa, const int64_t *mkn, const sh_sched_opts *o) {
  sh_tune_rec r;
  memset(&r, 0, sizeof r);
  snprintf(r.kernel, sizeof r.kernel, "mm");
  snprintf(r.isa, sizeof r.isa, "%s", sheaf_isa_name(isa));
  sh_tune_kernel_hash(ctx, sh_kernel_of(k), r.ir);
  sh_jit *jit;
  if (sh_jit_create(ctx, &(sh_jit_options){0}, &jit) == SHEAF_OK) {
    sh_tune_compiler_id(ctx, sh_jit_compiler(jit), r.cc);
    sh_jit_free(jit);
  }
  r.n_sizes = 3;
  static const char *const names[] = {"M", "K", "N"};
  for (int i = 0; i < 3; i++) {
    snprintf(r.size_names[i], SH_TUNE_NAME_MAX, "%s", names[i]);
    r.sizes[i] = mkn[i];
    r.cls[i] = sh_tune_bucket(mkn[i]);
  }
  if (o) r.opts = *o;
  return r;
}

/* C = A · B through k at (M, K, N): the largest error relative to
 * max(1, |ref|) against a double-precision product. */
static double run_mm(sheaf_ctx *ctx, sheaf_kernel *k, int64_t M, int64_t K, int64_t N) {
  float *A = malloc(sizeof(float) * (size_t)(M * K + 1)), *B = malloc(sizeof(float) * (size_t)(K * N + 1));
  float *C = malloc(sizeof(float) * (size_t)(M * N + 1));
  uint64_t seed = (uint64_t)(M * 1000003 + K * 1009 + N);
  for (int64_t i = 0; i < M * K; i++) A[i] = th_frand(&seed);
  for (int64_t i = 0; i < K * N; i++) B[i] = th_frand(&seed);
  int64_t sa[] = {M, K}, sb[] = {K, N};
  sheaf_kernel_arg a[] = {{SHEAF_KERNEL_F32, A, (size_t)(M * K), 2, sa},
                          {SHEAF_KERNEL_F32, B, (size_t)(K * N), 2, sb},
                          {SHEAF_KERNEL_F32, C, (size_t)(M * N), 0, NULL}};
  double worst = 1e30;
  if (CHECK_OK(ctx, sheaf_kernel_run(k, a, 3))) {
    worst = 0;
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 0; n < N; n++) {
        double r = 0;
        for (int64_t q = 0; q < K; q++) r += (double)A[m * K + q] * B[q * N + n];
        double e = fabs(C[m * N + n] - r) / fmax(1.0, fabs(r));
        if (!(e <= worst)) worst = e;
      }
  }
  free(A), free(B), free(C);
  return worst;
}

static sheaf_kernel *compile_in(sheaf_ctx *ctx, sheaf_isa isa, const char *dir) {
  sheaf_kernel *k = NULL;
  sh_kernel_opts o = {.isa_set = true, .isa = isa, .cache_dir = dir};
  CHECK_OK(ctx, sh_kernel_compile_opts(ctx, SRC, strlen(SRC), "mm", &o, &k));
  return k;
}

/* compile_in the shared cache, eager (th_cache_dir, harness.h) */
static sheaf_kernel *compile_shared(sheaf_ctx *ctx, sheaf_isa isa) {
  sheaf_kernel *k = NULL;
  sh_kernel_opts o = {.isa_set = true, .isa = isa, .eager = true, .cache_dir = th_cache_dir("tune")};
  CHECK_OK(ctx, sh_kernel_compile_opts(ctx, SRC, strlen(SRC), "mm", &o, &k));
  return k;
}

TEST(codegen_tune_record_roundtrip) {
  sheaf_ctx *ctx = th_ctx();
  sh_tune_set s, t;
  sh_tune_set_init(&s, ctx);
  sh_tune_set_init(&t, ctx);
  sh_tune_rec r;
  memset(&r, 0, sizeof r);
  snprintf(r.kernel, sizeof r.kernel, "ffn");
  memset(r.ir, 'a', 32);
  memset(r.cc, '0', 32);
  snprintf(r.isa, sizeof r.isa, "avx2");
  r.n_sizes = 2;
  snprintf(r.size_names[0], SH_TUNE_NAME_MAX, "N");
  snprintf(r.size_names[1], SH_TUNE_NAME_MAX, "D");
  r.sizes[0] = 1600, r.sizes[1] = 256;
  r.cls[0] = 1024, r.cls[1] = 256;
  r.opts.mr = 5, r.opts.nr = 16, r.opts.row_tiles = 8;
  r.ns = 123456, r.default_ns = 130000;
  REQUIRE_OK(ctx, sh_tune_set_add(&s, &r));
  sh_tune_rec r2 = r;
  r2.cls[0] = 64, r2.sizes[0] = 64, r2.opts = (sh_sched_opts){0};
  REQUIRE_OK(ctx, sh_tune_set_add(&s, &r2));
  r.opts.no_pack = 1; /* same key: replaces */
  REQUIRE_OK(ctx, sh_tune_set_add(&s, &r));
  CHECK_EQ_INT(s.n, 2);
  sh_buf b;
  sh_buf_init(&b, ctx);
  sh_tune_set_write(&s, &b);
  CHECK_CONTAINS(sh_buf_cstr(&b), "class=N:1024,D:256 sizes=N:1600,D:256 mr=5 nr=16 row_tiles=8 no_pack=1");
  REQUIRE_OK(ctx, sh_tune_set_parse(&t, "r.tune", sh_buf_cstr(&b), b.len));
  REQUIRE_EQ_INT(t.n, 2);
  for (int i = 0; i < 2; i++) {
    CHECK_EQ_STR(t.r[i].kernel, s.r[i].kernel);
    CHECK_EQ_STR(t.r[i].ir, s.r[i].ir);
    CHECK_EQ_STR(t.r[i].cc, s.r[i].cc);
    CHECK_EQ_STR(t.r[i].isa, "avx2");
    CHECK_EQ_INT(t.r[i].n_sizes, 2);
    CHECK_EQ_INT(t.r[i].cls[0], s.r[i].cls[0]);
    CHECK_EQ_INT(t.r[i].sizes[0], s.r[i].sizes[0]);
    CHECK(!memcmp(&t.r[i].opts, &s.r[i].opts, sizeof(sh_sched_opts)));
    CHECK_NEAR(t.r[i].ns, s.r[i].ns, 0.5);
  }
  /* saved and loaded through a file */
  const char *path = th_tmp_path("rt.tune");
  REQUIRE_OK(ctx, sh_tune_set_save(&s, path));
  sh_tune_set_free(&t);
  REQUIRE_OK(ctx, sh_tune_set_load(&t, path, false));
  CHECK_EQ_INT(t.n, 2);
  sh_tune_set_free(&t);
  REQUIRE_OK(ctx, sh_tune_set_load(&t, th_tmp_path("missing.tune"), true));
  CHECK_EQ_INT(t.n, 0);
  CHECK(sh_tune_set_load(&t, th_tmp_path("missing.tune"), false) != SHEAF_OK);
  sh_buf_free(&b);
  sh_tune_set_free(&s);
  sh_tune_set_free(&t);
}

TEST(codegen_tune_buckets) {
  static const int64_t v[][2] = {{0, 0}, {1, 1}, {2, 2}, {3, 2}, {4, 4}, {7, 4}, {63, 32}, {64, 64},
                                 {100, 64}, {127, 64}, {128, 128}, {1600, 1024}, {2047, 1024}, {2048, 2048}};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) CHECK_EQ_INT(sh_tune_bucket(v[i][0]), v[i][1]);
  sh_tune_rec r;
  memset(&r, 0, sizeof r);
  r.n_sizes = 2, r.cls[0] = 64, r.cls[1] = 256;
  CHECK(sh_tune_matches(&r, (int64_t[]){64, 256}, 2));
  CHECK(sh_tune_matches(&r, (int64_t[]){127, 511}, 2));
  CHECK(!sh_tune_matches(&r, (int64_t[]){128, 256}, 2));
  CHECK(!sh_tune_matches(&r, (int64_t[]){63, 256}, 2));
  CHECK(!sh_tune_matches(&r, (int64_t[]){64, 256, 1}, 3));
}

TEST(codegen_tune_malformed) {
  sheaf_ctx *ctx = log_ctx();
  static const struct {
    const char *text, *want;
  } bad[] = {
      {"kernel=mm\n", "f:1: expected the header"},
      {"# c\nsheaf-tuning 2\n", "f:2: expected the header"},
      {"sheaf-tuning 1\n\nkernel=mm isa=avx2\n", "f:3: the record has no ir="},
      {"sheaf-tuning 1\nkernel=mm ir=zz isa=avx2\n", "f:2: bad value in 'ir=zz'"},
      {"sheaf-tuning 1\nkernel=mm ir=0123456789abcdef0123456789abcdef isa=avx2 cc=0123456789abcdef0123456789abcdef "
       "class=M:65\n",
       "f:2: class M:65 is not a bucket"},
      {"sheaf-tuning 1\nkernel=mm ir=0123456789abcdef0123456789abcdef isa=avx2 cc=0123456789abcdef0123456789abcdef "
       "class=M:64 mr=x\n",
       "f:2: bad value in 'mr=x'"},
      {"sheaf-tuning 1\nkernel mm\n", "f:2: expected key=value"},
      {"sheaf-tuning 1\nkernel=mm ir=0123456789abcdef0123456789abcdef isa=avx2 cc=0123456789abcdef0123456789abcdef "
       "class=M:64 sizes=N:64\n",
       "f:2: sizes= does not match class="},
      {"", "f:1: no 'sheaf-tuning 1' header"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    sh_tune_set s;
    sh_tune_set_init(&s, ctx);
    CHECK_STATUS(ctx, sh_tune_set_parse(&s, "f", bad[i].text, strlen(bad[i].text)), SHEAF_ERR_PARSE);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), bad[i].want);
    CHECK_EQ_INT(s.n, 0);
    sh_tune_set_free(&s);
  }
  /* a field this build does not know: that record skipped with a warning */
  const char *newer = "sheaf-tuning 1\n"
                      "kernel=mm ir=0123456789abcdef0123456789abcdef isa=avx2 cc=0123456789abcdef0123456789abcdef "
                      "class=M:64 mr=4 warp=3\n"
                      "kernel=mm ir=0123456789abcdef0123456789abcdef isa=avx2 cc=0123456789abcdef0123456789abcdef "
                      "class=M:128 mr=4\n";
  sh_tune_set s;
  sh_tune_set_init(&s, ctx);
  CHECK_OK(ctx, sh_tune_set_parse(&s, "f", newer, strlen(newer)));
  CHECK_EQ_INT(s.n, 1);
  CHECK_EQ_INT(g_warns, 1);
  CHECK_CONTAINS(g_warn, "f:2: unknown field 'warp'");
  sh_tune_set_free(&s);
  /* through the public API: FILE:LINE, nothing loaded */
  const char *p = th_write_tmp("bad.tune", bad[3].text, strlen(bad[3].text));
  CHECK_STATUS(ctx, sheaf_kernel_load_tuning(ctx, p), SHEAF_ERR_PARSE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "bad.tune:2: bad value");
  CHECK_STATUS(ctx, sheaf_kernel_load_tuning(ctx, NULL), SHEAF_ERR_INVALID_ARG);
}

/* Stale records (another kernel hash, another compiler) and a corrupt cache
 * file are ignored with a warning; the kernel runs its default schedule. */
TEST(codegen_tune_stale_ignored) {
  if (!th_have_jit_cc("codegen_tune_stale_ignored")) return;
  sheaf_ctx *ctx = log_ctx();
  sheaf_isa isa = avx2_or_scalar();
  const char *dir = th_tmp_path("tune-stale");
  sheaf_kernel *k = compile_in(ctx, isa, dir);
  REQUIRE(k);
  CHECK_EQ_INT(sh_kernel_n_tuned(k), 0);
  CHECK_EQ_INT(g_warns, 0);
  sh_sched_opts o = {.mr = 4, .nr = isa == SHEAF_ISA_AVX2 ? 24 : 8};
  sh_tune_rec good = mm_rec(ctx, k, isa, (int64_t[]){8, 8, 8}, &o);
  sh_tune_rec old_ir = good, old_cc = good;
  old_ir.ir[0] = old_ir.ir[0] == 'a' ? 'b' : 'a';
  old_cc.cc[0] = old_cc.cc[0] == 'a' ? 'b' : 'a';
  sheaf_kernel_free(k);
  sh_tune_set s;
  sh_tune_set_init(&s, ctx);
  REQUIRE_OK(ctx, sh_tune_set_add(&s, &old_ir));
  old_cc.cls[0] = 16; /* another class, so both are kept */
  REQUIRE_OK(ctx, sh_tune_set_add(&s, &old_cc));
  const char *p = th_tmp_path("stale.tune");
  REQUIRE_OK(ctx, sh_tune_set_save(&s, p));
  sh_tune_set_free(&s);
  REQUIRE_OK(ctx, sheaf_kernel_load_tuning(ctx, p));
  k = compile_in(ctx, isa, dir);
  REQUIRE(k);
  CHECK_EQ_INT(sh_kernel_n_tuned(k), 0);
  CHECK_EQ_INT(g_warns, 1);
  CHECK_CONTAINS(g_warn, "2 tuning records ignored");
  CHECK(run_mm(ctx, k, 8, 8, 8) < 1e-5);
  CHECK_EQ_INT(sh_kernel_n_variants(k), 0);
  sheaf_kernel_free(k);
  /* a corrupt file in the cache directory: ignored with a warning */
  char path[4096], d[4096];
  snprintf(d, sizeof d, "%s/tune", dir);
  mkdir(d, 0700);
  sh_tune_cache_path(dir, good.ir, path, sizeof path);
  FILE *f = fopen(path, "w");
  REQUIRE(f);
  fputs("sheaf-tuning 1\nkernel=mm ir=\x01\x02 garbage\n", f);
  fclose(f);
  g_warns = 0;
  k = compile_in(ctx, isa, dir);
  REQUIRE(k);
  CHECK_EQ_INT(sh_kernel_n_tuned(k), 0);
  CHECK(g_warns >= 1);
  CHECK_CONTAINS(g_warn, "tuning records ignored");
  CHECK(run_mm(ctx, k, 8, 8, 8) < 1e-5);
  sheaf_kernel_free(k);
  /* the good record in the cache's file: used */
  sh_tune_set_init(&s, ctx);
  REQUIRE_OK(ctx, sh_tune_set_add(&s, &good));
  REQUIRE_OK(ctx, sh_tune_set_save(&s, path));
  sh_tune_set_free(&s);
  k = compile_in(ctx, isa, dir);
  REQUIRE(k);
  CHECK_EQ_INT(sh_kernel_n_tuned(k), 1);
  CHECK(run_mm(ctx, k, 9, 8, 13) < 1e-5);
  CHECK_EQ_INT(sh_kernel_n_variants(k), 1);
  sheaf_kernel_free(k);
}

/* Records forcing each register tile (and a row block) for every class the
 * sizes fall in: results equal the reference below, at, above and at
 * multiples of the tile, and the classes share one compiled variant. */
TEST(codegen_tune_tiles_reference) {
  if (!th_have_jit_cc("codegen_tune_tiles_reference")) return;
  sheaf_isa isa = avx2_or_scalar();
  const int(*tiles)[2];
  int nt = sh_tune_tiles(isa == SHEAF_ISA_AVX2 ? 8 : 1, &tiles);
  for (int t = 1; t < nt; t++) {
    sheaf_ctx *ctx = th_ctx();
    int mr = tiles[t][0], nr = tiles[t][1];
    sh_sched_opts o = {.mr = mr, .nr = nr, .row_tiles = 2 + t % 2};
    sheaf_kernel *k = compile_shared(ctx, isa);
    REQUIRE(k);
    int64_t Ms[] = {1, mr - 1, mr, mr + 1, 2 * mr, mr * o.row_tiles + 1, 3 * mr * o.row_tiles + 2};
    int64_t Ns[] = {1, nr - 1, nr, nr + 1, 2 * nr, 3 * nr + 5};
    int64_t Ks[] = {1, 17};
    sh_tune_set s;
    sh_tune_set_init(&s, ctx);
    for (size_t a = 0; a < 7; a++)
      for (size_t b = 0; b < 6; b++)
        for (size_t c = 0; c < 2; c++) {
          if (Ms[a] < 1 || Ns[b] < 1) continue;
          sh_tune_rec r = mm_rec(ctx, k, isa, (int64_t[]){Ms[a], Ks[c], Ns[b]}, &o);
          REQUIRE_OK(ctx, sh_tune_set_add(&s, &r));
        }
    sheaf_kernel_free(k);
    const char *p = th_tmp_path("tiles.tune");
    REQUIRE_OK(ctx, sh_tune_set_save(&s, p));
    sh_tune_set_free(&s);
    REQUIRE_OK(ctx, sheaf_kernel_load_tuning(ctx, p));
    k = compile_shared(ctx, isa);
    REQUIRE(k);
    CHECK(sh_kernel_n_tuned(k) > 10);
    for (size_t a = 0; a < 7; a++)
      for (size_t b = 0; b < 6; b++)
        for (size_t c = 0; c < 2; c++) {
          if (Ms[a] < 1 || Ns[b] < 1) continue;
          double e = run_mm(ctx, k, Ms[a], Ks[c], Ns[b]);
          if (!CHECK(e < 1e-5))
            fprintf(stderr, "  tile %d x %d: M %lld K %lld N %lld: error %g\n", mr, nr, (long long)Ms[a],
                    (long long)Ks[c], (long long)Ns[b], e);
        }
    CHECK_EQ_INT(sh_kernel_n_variants(k), 1);
    sheaf_kernel_free(k);
  }
}

static void no_progress(void *user, const char *line) {
  (void)line;
  ++*(int *)user;
}

/* A deterministic mini-search: two candidates; the record it makes is for
 * the kernel's hash, ISA and class, and the kernel then runs through it. */
TEST(codegen_tune_mini_search) {
  if (!th_have_jit_cc("codegen_tune_mini_search")) return;
  sheaf_ctx *ctx = th_ctx();
  sheaf_isa isa = avx2_or_scalar();
  /* a cache of its own: the search stores its record there, and a shared
   * cache (CI's, th_cache_dir) would hold an earlier run's records of the
   * same kernel, which the kernel compiled below would pick up too */
  char dir[512];
  snprintf(dir, sizeof dir, "%s", th_tmp_path("tune-mini"));
  int lines = 0;
  sh_tune_request q = {.source = SRC, .len = strlen(SRC), .kernel = "mm", .isa_set = true, .isa = isa,
                       .cache_dir = dir, .sizes = (int64_t[]){13, 9, 40}, .n_sizes = 3,
                       .budget_s = 600, .max_candidates = 2, .progress = no_progress, .user = &lines};
  sh_tune_rec r;
  REQUIRE_OK(ctx, sh_tune_kernel(ctx, &q, &r));
  CHECK_EQ_STR(r.kernel, "mm");
  CHECK_EQ_STR(r.isa, sheaf_isa_name(isa));
  CHECK_EQ_INT(r.n_sizes, 3);
  CHECK_EQ_STR(r.size_names[0], "M");
  CHECK_EQ_INT(r.cls[0], 8);
  CHECK_EQ_INT(r.cls[1], 8);
  CHECK_EQ_INT(r.cls[2], 32);
  CHECK_EQ_INT(r.sizes[2], 40);
  CHECK(r.ns > 0 && r.default_ns > 0 && r.ns <= r.default_ns);
  CHECK(lines >= 3); /* the default, two candidates, the choice */
  /* the same kernel's hash: the record applies */
  sheaf_kernel *k = compile_in(ctx, isa, dir);
  REQUIRE(k);
  sh_tune_rec want = mm_rec(ctx, k, isa, (int64_t[]){13, 9, 40}, NULL);
  CHECK_EQ_STR(r.ir, want.ir);
  CHECK_EQ_STR(r.cc, want.cc);
  sheaf_kernel_free(k);
  /* forced to a non-default choice, through a file */
  if (sh_tune_opts_is_default(&r.opts)) r.opts.mr = 4, r.opts.nr = isa == SHEAF_ISA_AVX2 ? 24 : 8;
  sh_tune_set s;
  sh_tune_set_init(&s, ctx);
  REQUIRE_OK(ctx, sh_tune_set_add(&s, &r));
  const char *p = th_tmp_path("mini.tune");
  REQUIRE_OK(ctx, sh_tune_set_save(&s, p));
  sh_tune_set_free(&s);
  REQUIRE_OK(ctx, sheaf_kernel_load_tuning(ctx, p));
  k = compile_in(ctx, isa, dir);
  REQUIRE(k);
  CHECK_EQ_INT(sh_kernel_n_tuned(k), 1);
  CHECK(run_mm(ctx, k, 13, 9, 40) < 1e-5);
  CHECK_EQ_INT(sh_kernel_n_variants(k), 1);
  CHECK(run_mm(ctx, k, 3, 9, 40) < 1e-5); /* another class: the default */
  CHECK_EQ_INT(sh_kernel_n_variants(k), 1);
  sheaf_kernel_free(k);
  /* ragged and i32 inputs are measured too (test_codegen_tune_ragged.c) */
  static const char rag[] = "kernel s(x: f32[B, L(b)], L: i32[B]) -> f32[B] { y(b) +=! x(b, l) }\n";
  sh_tune_request q2 = {.source = rag, .len = strlen(rag), .kernel = "s", .isa_set = true, .isa = isa,
                        .cache_dir = dir, .sizes = (int64_t[]){4}, .n_sizes = 1, .budget_s = 10,
                        .max_candidates = 1};
  CHECK_OK(ctx, sh_tune_kernel(ctx, &q2, &r));
  CHECK_EQ_INT(r.cls[0], 4);
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* Two sizes in one class: one compile (the variant's), the second size
 * compiles nothing; a fresh kernel loads the variant from the cache (no
 * compile; the hit < 5 ms). */
TEST(codegen_tune_one_compile_per_class) {
  if (!th_have_jit_cc("codegen_tune_one_compile_per_class")) return;
  sheaf_ctx *ctx = th_ctx();
  sheaf_isa isa = avx2_or_scalar();
  const char *dir = th_tmp_path("tune-class"); /* a cold cache of its own */
  sheaf_kernel *k = compile_in(ctx, isa, dir);
  REQUIRE(k);
  sh_sched_opts o = {.mr = 5, .nr = isa == SHEAF_ISA_AVX2 ? 16 : 4};
  sh_tune_rec r = mm_rec(ctx, k, isa, (int64_t[]){64, 32, 40}, &o);
  sheaf_kernel_free(k);
  sh_tune_set s;
  sh_tune_set_init(&s, ctx);
  REQUIRE_OK(ctx, sh_tune_set_add(&s, &r));
  const char *p = th_tmp_path("class.tune");
  REQUIRE_OK(ctx, sh_tune_set_save(&s, p));
  sh_tune_set_free(&s);
  REQUIRE_OK(ctx, sheaf_kernel_load_tuning(ctx, p));
  k = compile_in(ctx, isa, dir);
  REQUIRE(k);
  CHECK(run_mm(ctx, k, 64, 32, 40) < 1e-5);
  REQUIRE_EQ_INT(sh_kernel_n_variants(k), 1);
  sh_jit_stats st;
  sh_kernel_jit_stats(sh_kernel_variant(k, 0), &st);
  CHECK_EQ_INT(st.compiles, 1);
  double t0 = now_ms();
  CHECK(run_mm(ctx, k, 100, 33, 63) < 1e-5); /* M 100, K 33, N 63: the same class */
  double t1 = now_ms();
  CHECK_EQ_INT(sh_kernel_n_variants(k), 1);
  sh_kernel_jit_stats(sh_kernel_variant(k, 0), &st);
  CHECK_EQ_INT(st.compiles, 1);
  CHECK_EQ_INT(st.loads, 1);
  (void)t0, (void)t1; /* (includes the reference product: timed below without it) */
  sheaf_kernel_free(k);
  /* a fresh kernel: the variant comes from the disk cache. The load is
   * timed on the wall clock, so on a loaded machine one preemption can
   * exceed the bound: the best of three fresh kernels is checked (each
   * must be a disk hit, never a compile). */
  float A[70 * 32], B[32 * 40], C[70 * 40];
  memset(A, 0, sizeof A), memset(B, 0, sizeof B);
  int64_t sa[] = {70, 32}, sb[] = {32, 40};
  sheaf_kernel_arg a[] = {{SHEAF_KERNEL_F32, A, 70 * 32, 2, sa},
                          {SHEAF_KERNEL_F32, B, 32 * 40, 2, sb},
                          {SHEAF_KERNEL_F32, C, 70 * 40, 0, NULL}};
  uint64_t best_load_ns = UINT64_MAX;
  double first_run_ms = 0;
  for (int rep = 0; rep < 3; rep++) {
    k = compile_in(ctx, isa, dir);
    REQUIRE(k);
    t0 = now_ms();
    CHECK_OK(ctx, sheaf_kernel_run(k, a, 3));
    t1 = now_ms();
    REQUIRE_EQ_INT(sh_kernel_n_variants(k), 1);
    sh_kernel_jit_stats(sh_kernel_variant(k, 0), &st);
    CHECK_EQ_INT(st.compiles, 0);
    CHECK_EQ_INT(st.disk_hits, 1);
    if (st.last_load_ns < best_load_ns) best_load_ns = st.last_load_ns, first_run_ms = t1 - t0;
    sheaf_kernel_free(k);
  }
  /* the cache hit: key, verify, dlopen of the variant (the first run's
   * wall time, which also packs B and multiplies, is printed) */
  if (!CHECK(best_load_ns < 5000000))
    fprintf(stderr, "  variant loaded from the cache in %.2f ms at best of 3 (first run %.2f ms)\n",
            best_load_ns / 1e6, first_run_ms);
}

/* `sheaf tune` end to end: a tiny budget still measures the default and
 * writes a record that loads. */
TEST(codegen_tune_cli) {
  if (!th_have_jit_cc("codegen_tune_cli")) return;
  const char *bin = th_sheaf_bin();
  if (!bin) {
    printf("note: codegen_tune_cli skipped: SHEAF_BIN not set\n");
    return;
  }
  const char *src = th_write_tmp("t.sf", SRC, strlen(SRC));
  const char *out = th_tmp_path("cli.tune");
  char cmd[8192], buf[16384];
  snprintf(cmd, sizeof cmd, "SHEAF_CACHE_DIR='%s' %s tune '%s' --size M=5,70 --size K=8 --size N=24 --budget 1 --out '%s'",
           th_tmp_path("tune-cli"), bin, src, out); /* its own cache: the command stores its records there */
  int rc = th_run(cmd, buf, sizeof buf);
  CHECK_EQ_INT(rc, 0);
  CHECK_CONTAINS(buf, "M:5,K:8,N:24 (M:4,K:8,N:16)");
  CHECK_CONTAINS(buf, "M:70,K:8,N:24 (M:64,K:8,N:16)");
  sheaf_ctx *ctx = th_ctx();
  CHECK_OK(ctx, sheaf_kernel_load_tuning(ctx, out));
  snprintf(cmd, sizeof cmd, "%s tune '%s' --budget 1", bin, src);
  CHECK_EQ_INT(th_run(cmd, buf, sizeof buf), 2);
  CHECK_CONTAINS(buf, "no value for size M");
}

/* A model whose kernel calls stack rows: `sheaf tune --data` picks the row
 * size's classes from the data; `sheaf run --tuning FILE` with records
 * forcing another tile for every class runs the variant (its cache entry
 * appears) and prints what the default schedule prints. */
TEST(codegen_tune_run_model) {
  if (!th_have_jit_cc("codegen_tune_run_model")) return;
  const char *bin = th_sheaf_bin();
  if (!bin) {
    printf("note: codegen_tune_run_model skipped: SHEAF_BIN not set\n");
    return;
  }
  static const char model[] = "size E = 16\nsize H = 40\n"
                              "param emb: f32[V, E]\nparam W1: f32[E, H]\nparam b1: f32[H]\n"
                              "kernel ffn(x: f32[N, D], W: f32[D, F], b: f32[F]) -> f32[N, F] {\n"
                              "  y(n, f) +=! x(n, d) * W(d, f)\n  out(n, f) = gelu(y(n, f) + b(f))\n}\n"
                              "fn main(ws: list[i32]) -> f32[H] {\n"
                              "  let xs = ffn(stack(for w in ws { emb[w] }), W1, b1);\n"
                              "  softmax(for w in ws { 1.0 }) @ xs\n}\n";
  const char *src = th_write_tmp("m.sf", model, strlen(model));
  char data[4096];
  size_t n = 0;
  uint64_t seed = 7;
  for (int l = 0; l < 40; l++) {
    int words = 1 + l % 9;
    for (int w = 0; w < words; w++)
      n += (size_t)snprintf(data + n, sizeof data - n, "%sw%d", w ? " " : "", (int)((th_frand(&seed) + 1) * 10));
    data[n++] = '\n';
  }
  const char *dpath = th_write_tmp("d.txt", data, n);
  char cache[1024];
  snprintf(cache, sizeof cache, "%s", th_tmp_path("tune-run"));
  const char *tfile = th_tmp_path("run.tune");
  char cmd[8192], buf[16384];
  snprintf(cmd, sizeof cmd,
           "SHEAF_CACHE_DIR='%s' %s tune '%s' --data '%s' --batch 8 --size D=16 --size F=40 --budget 1 --out '%s'",
           cache, bin, src, dpath, tfile);
  REQUIRE(CHECK_EQ_INT(th_run(cmd, buf, sizeof buf), 0));
  CHECK_CONTAINS(buf, "ffn");
  sheaf_ctx *ctx = th_ctx();
  sh_tune_set s, f;
  sh_tune_set_init(&s, ctx);
  sh_tune_set_init(&f, ctx);
  REQUIRE_OK(ctx, sh_tune_set_load(&s, tfile, false));
  REQUIRE(s.n >= 1);
  CHECK_EQ_STR(s.r[0].size_names[0], "N");
  for (int64_t b = 1; b <= 4096; b *= 2) { /* every class of N */
    sh_tune_rec r = s.r[0];
    r.cls[0] = b, r.sizes[0] = b;
    r.opts = (sh_sched_opts){.mr = 4, .nr = sheaf_cpu_isa() == SHEAF_ISA_SCALAR ? 8 : 24, .row_tiles = 3};
    REQUIRE_OK(ctx, sh_tune_set_add(&f, &r));
  }
  const char *forced = th_tmp_path("forced.tune");
  REQUIRE_OK(ctx, sh_tune_set_save(&f, forced));
  sh_tune_set_free(&s);
  sh_tune_set_free(&f);
  const char *oa = th_tmp_path("a.out"), *ob = th_tmp_path("b.out");
  snprintf(cmd, sizeof cmd, "SHEAF_CACHE_DIR='%s' %s run '%s' --data '%s' --batch 8 --seed 1 --threads 1 --out '%s'",
           cache, bin, src, dpath, oa);
  REQUIRE(CHECK_EQ_INT(th_run(cmd, buf, sizeof buf), 0));
  snprintf(cmd, sizeof cmd,
           "SHEAF_CACHE_DIR='%s' %s run '%s' --data '%s' --batch 8 --seed 1 --threads 1 --out '%s' --tuning '%s' "
           "--stats",
           cache, bin, src, dpath, ob, forced);
  REQUIRE(CHECK_EQ_INT(th_run(cmd, buf, sizeof buf), 0));
  /* --stats: which records chose the schedule (tune_use.c) */
  CHECK_CONTAINS(buf, "tuned kernel");
  CHECK_CONTAINS(buf, "forced.tune:");
  CHECK_CONTAINS(buf, sheaf_cpu_isa() == SHEAF_ISA_SCALAR ? "mr=4 nr=8 row_tiles=3" : "mr=4 nr=24 row_tiles=3");
  long lines = 0;
  double d = th_compare_outputs(oa, ob, 1, &lines, NULL);
  CHECK(d >= 0 && d < 1e-5);
  CHECK_EQ_INT(lines, 40);
  snprintf(cmd, sizeof cmd, "grep -l 'sched mr=4 nr=%d row_tiles=3' '%s'/v1/*.spec",
           sheaf_cpu_isa() == SHEAF_ISA_SCALAR ? 8 : 24, cache);
  CHECK_EQ_INT(th_run(cmd, buf, sizeof buf), 0); /* the variant was compiled */
  /* a malformed --tuning file: the run fails with FILE:LINE */
  const char *bad = th_write_tmp("bad2.tune", "sheaf-tuning 1\nkernel=ffn x\n", 28);
  snprintf(cmd, sizeof cmd, "SHEAF_CACHE_DIR='%s' %s run '%s' --data '%s' --tuning '%s'", cache, bin, src, dpath,
           bad);
  CHECK_EQ_INT(th_run(cmd, buf, sizeof buf), 1);
  CHECK_CONTAINS(buf, "bad2.tune:2: expected key=value");
}

/* The tuner's confirmation (tune_search.c, sh_tune_confirm_wins): a
 * candidate identical to the default is never recorded as a win — on
 * 20000 synthetic sets of per-round ratios of two equal kernels under
 * load (log-normal noise of 3 %, a quarter of the rounds hit by a swing of
 * up to 2x on either side) and on the real thing: the default mm kernel
 * against a second compile of itself in paired rounds, three times; a
 * clear win (10 % in nearly every round) is one, a 2 % one is not. */
TEST(codegen_tune_confirm_identical_never_wins) {
  uint64_t seed = 12345;
  double r[SH_TUNE_CONFIRM_ROUNDS], med;
  int wins = 0;
  for (int t = 0; t < 20000; t++) {
    for (int i = 0; i < SH_TUNE_CONFIRM_ROUNDS; i++) {
      double g = 0;
      for (int j = 0; j < 12; j++) g += (double)th_frand(&seed) * 0.5 + 0.5; /* ~N(6, 1) */
      double x = exp(0.03 * (g - 6));
      if (th_frand(&seed) < -0.5) { /* a load swing: up to 2x on one side */
        double swing = 1.0 + (th_frand(&seed) + 1) / 2;
        x *= th_frand(&seed) < 0 ? swing : 1 / swing;
      }
      r[i] = x;
    }
    wins += sh_tune_confirm_wins(r, SH_TUNE_CONFIRM_ROUNDS, &med);
  }
  CHECK_EQ_INT(wins, 0);
  for (int i = 0; i < SH_TUNE_CONFIRM_ROUNDS; i++) r[i] = i == 3 ? 0.7 : 1.10 + 0.01 * (i % 3);
  CHECK(sh_tune_confirm_wins(r, SH_TUNE_CONFIRM_ROUNDS, &med));
  CHECK(med > 1.09 && med < 1.13);
  for (int i = 0; i < SH_TUNE_CONFIRM_ROUNDS; i++) r[i] = 1.02;
  CHECK(!sh_tune_confirm_wins(r, SH_TUNE_CONFIRM_ROUNDS, NULL));
  CHECK(!sh_tune_confirm_wins(r, 4, NULL)); /* too few rounds */
  if (!th_have_jit_cc("codegen_tune_confirm_identical_never_wins")) return;
  sheaf_ctx *ctx = th_ctx();
  sheaf_isa isa = avx2_or_scalar();
  char dir[512];
  snprintf(dir, sizeof dir, "%s", th_tmp_path("tune-confirm"));
  sheaf_kernel *D = compile_in(ctx, isa, dir), *C = compile_in(ctx, isa, dir);
  REQUIRE(D && C);
  int64_t M = 64, K = 64, N = 256, sa[] = {M, K}, sb[] = {K, N};
  float *A = malloc(sizeof(float) * (size_t)(M * K)), *B = malloc(sizeof(float) * (size_t)(K * N));
  float *O = malloc(sizeof(float) * (size_t)(M * N));
  REQUIRE(A && B && O);
  for (int64_t i = 0; i < M * K; i++) A[i] = th_frand(&seed);
  for (int64_t i = 0; i < K * N; i++) B[i] = th_frand(&seed);
  sheaf_kernel_arg a[] = {{SHEAF_KERNEL_F32, A, (size_t)(M * K), 2, sa},
                          {SHEAF_KERNEL_F32, B, (size_t)(K * N), 2, sb},
                          {SHEAF_KERNEL_F32, O, (size_t)(M * N), 0, NULL}};
  for (int t = 0; t < 3; t++) {
    double dn = 0, cn = 0;
    REQUIRE_OK(ctx, sh_tune_confirm_pair(ctx, D, C, a, 3, SH_TUNE_CONFIRM_ROUNDS, r, &dn, &cn));
    CHECK(dn > 0 && cn > 0);
    CHECK(!sh_tune_confirm_wins(r, SH_TUNE_CONFIRM_ROUNDS, &med));
  }
  CHECK(sh_tune_confirm_pair(ctx, D, NULL, a, 3, 5, r, NULL, NULL) == SHEAF_ERR_INVALID_ARG);
  CHECK(strstr(sheaf_ctx_last_error(ctx), "sh_tune_confirm_pair") != NULL);
  free(A), free(B), free(O);
  sheaf_kernel_free(D);
  sheaf_kernel_free(C);
}
