/*
 * test_codegen_tune_ragged.c — the tuner on ragged kernels and the search's
 * shape (src/codegen/tune_search.c, tune_use.c; docs/CODEGEN.md "Tuner"):
 * a ragged attention kernel (an i32 length input) is searched at lengths
 * that include 0 and 1, its record (forced to a non-default schedule, from
 * a file) is used by a compiled kernel — the variant's outputs equal the
 * default schedule's and the double-precision reference — and
 * sheaf_kernel_tuning_stats names the record; the repeated search ends by
 * itself when a pass finds nothing, and at the budget otherwise; `sheaf
 * tune` takes a ragged kernel's lengths from a .lengths file and `sheaf run
 * --stats` says which records ran. Each test has a cache of its own.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "codegen/jit.h"
#include "codegen/kernel_api.h"
#include "codegen/tune.h"
#include "harness.h"
#include "lang/kernel_ref.h"

static const char ATT[] =
    "kernel attn(L: i32[B], q: f32[B, L(b), D], k: f32[B, L(b), D], v: f32[B, L(b), D]) -> f32[B, L(b), D] {\n"
    "  s(b, i, j) +=! q(b, i, d) * k(b, j, d) / sqrt(D)\n"
    "  m(b, i) max=! s(b, i, j)\n  e(b, i, j) = exp(s(b, i, j) - m(b, i))\n"
    "  z(b, i) +=! e(b, i, j)\n  o(b, i, d) +=! e(b, i, j) * v(b, j, d)\n"
    "  out(b, i, d) = o(b, i, d) / z(b, i)\n}\n";

static sheaf_isa isa_here(void) {
  sheaf_isa h = sheaf_cpu_isa();
  return h == SHEAF_ISA_AVX2 || h == SHEAF_ISA_AVX512 ? SHEAF_ISA_AVX2 : SHEAF_ISA_SCALAR;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static sheaf_kernel *compile_att(sheaf_ctx *ctx, const char *dir, bool no_tuning) {
  sheaf_kernel *k = NULL;
  sh_kernel_opts o = {.isa_set = true, .isa = isa_here(), .cache_dir = dir, .no_tuning = no_tuning};
  CHECK_OK(ctx, sh_kernel_compile_opts(ctx, ATT, strlen(ATT), "attn", &o, &k));
  return k;
}

/* attn through k and k0 at lengths L[0 .. nb) with D = 8: 1 when both run
 * and agree with each other (1e-5) and with the reference (1e-4). */
static int run_att(sheaf_ctx *ctx, sheaf_kernel *k, sheaf_kernel *k0, int32_t *L, int nb) {
  enum { D = 8 };
  int64_t T = 0;
  for (int b = 0; b < nb; b++) T += L[b];
  size_t n = (size_t)(T * D);
  float *q = malloc(sizeof(float) * (n + 1)), *kk = malloc(sizeof(float) * (n + 1));
  float *v = malloc(sizeof(float) * (n + 1)), *o = malloc(sizeof(float) * (n + 1));
  float *o0 = malloc(sizeof(float) * (n + 1)), *r = malloc(sizeof(float) * (n + 1));
  uint64_t seed = 99;
  for (size_t i = 0; i < n; i++) q[i] = th_frand(&seed), kk[i] = th_frand(&seed), v[i] = th_frand(&seed);
  int64_t sl[] = {nb}, sq[] = {nb, -1, D};
  sheaf_kernel_arg a[] = {{SHEAF_KERNEL_I32, L, (size_t)nb, 1, sl}, {SHEAF_KERNEL_F32, q, n, 3, sq},
                          {SHEAF_KERNEL_F32, kk, n, 3, sq}, {SHEAF_KERNEL_F32, v, n, 3, sq},
                          {SHEAF_KERNEL_F32, o, n, 0, NULL}};
  int ok = CHECK_OK(ctx, sheaf_kernel_run(k, a, 5));
  a[4].data = o0;
  ok = ok && CHECK_OK(ctx, sheaf_kernel_run(k0, a, 5));
  sh_kref_arg in[4];
  for (int i = 0; i < 4; i++) in[i] = (sh_kref_arg){a[i].data, a[i].numel, a[i].rank, a[i].shape};
  sh_kref_out ro = {r, n};
  ok = ok && CHECK_OK(ctx, sh_kernel_ref_run(ctx, sh_kernel_of(k), in, 4, &ro, 1));
  double d0 = 0, dr = 0;
  for (size_t i = 0; ok && i < n; i++) {
    d0 = fmax(d0, fabs((double)o[i] - o0[i]));
    dr = fmax(dr, fabs((double)o[i] - r[i]) / fmax(1.0, fabs((double)r[i])));
  }
  if (ok && !(d0 <= 1e-5 && dr <= 1e-4)) {
    fprintf(stderr, "  attn: variant vs default %.3g, vs reference %.3g\n", d0, dr);
    ok = 0;
  }
  free(q), free(kk), free(v), free(o), free(o0), free(r);
  return ok;
}

static void count_lines(void *user, const char *line) {
  (void)line;
  ++*(int *)user;
}

/* A ragged kernel is searched (lengths with 0 and 1); a record forcing
 * another schedule for its class runs the variant, whose outputs equal the
 * default's; the tuning stats name the record's FILE:LINE. */
TEST(codegen_tune_ragged_record_used) {
  if (!th_have_jit_cc("codegen_tune_ragged_record_used")) return;
  sheaf_ctx *ctx = th_ctx();
  char dir[512];
  snprintf(dir, sizeof dir, "%s", th_tmp_path("tune-ragged"));
  int lines = 0;
  const int64_t lens[] = {0, 1, 3, 7, 2};
  sh_tune_stats ts;
  sh_tune_request q = {.source = ATT, .len = strlen(ATT), .kernel = "attn", .isa_set = true, .isa = isa_here(),
                       .cache_dir = dir, .sizes = (int64_t[]){5, 8}, .n_sizes = 2, .lengths = lens, .n_lengths = 5,
                       .budget_s = 600, .max_candidates = 2, .progress = count_lines, .user = &lines,
                       .stats = &ts};
  sh_tune_rec r;
  REQUIRE_OK(ctx, sh_tune_kernel(ctx, &q, &r));
  CHECK_EQ_STR(r.kernel, "attn");
  CHECK_EQ_INT(r.n_sizes, 2);
  CHECK_EQ_STR(r.size_names[0], "B");
  CHECK_EQ_INT(r.cls[0], 4);
  CHECK_EQ_INT(r.cls[1], 8);
  CHECK(r.ns > 0 && r.default_ns > 0);
  if (isa_here() == SHEAF_ISA_SCALAR) {
    /* no knob changes this kernel's scalar C (row_unroll is a vector-row
     * knob), so the search measures the default and compiles nothing */
    CHECK_EQ_INT(ts.compiled, 0);
    CHECK(lines >= 2);
  } else {
    CHECK(ts.compiled >= 1 && ts.compiled <= 2);
    CHECK(lines >= 3);
  }
  /* forced to a non-default schedule, through a file */
  r.opts = (sh_sched_opts){.row_unroll = 1, .par_block = 8};
  sh_tune_set s;
  sh_tune_set_init(&s, ctx);
  REQUIRE_OK(ctx, sh_tune_set_add(&s, &r));
  const char *p = th_tmp_path("ragged.tune");
  REQUIRE_OK(ctx, sh_tune_set_save(&s, p));
  sh_tune_set_free(&s);
  CHECK_EQ_INT((int)sheaf_kernel_tuning_stats(ctx, 0, NULL), 0);
  REQUIRE_OK(ctx, sheaf_kernel_load_tuning(ctx, p));
  sheaf_kernel *k = compile_att(ctx, dir, false), *k0 = compile_att(ctx, dir, true);
  REQUIRE(k && k0);
  CHECK_EQ_INT(sh_kernel_n_tuned(k), 1);
  int32_t L1[] = {0, 1, 5, 9, 2, 4}; /* B = 6: class 4, as tuned */
  CHECK(run_att(ctx, k, k0, L1, 6));
  CHECK_EQ_INT(sh_kernel_n_variants(k), 1);
  int32_t L2[] = {3, 1}; /* B = 2: another class, the default schedule */
  CHECK(run_att(ctx, k, k0, L2, 2));
  CHECK_EQ_INT(sh_kernel_n_variants(k), 1);
  sheaf_kernel_tuning_use u[4];
  REQUIRE_EQ_INT((int)sheaf_kernel_tuning_stats(ctx, 4, u), 1);
  CHECK_EQ_STR(u[0].kernel, "attn");
  CHECK_EQ_INT((int)u[0].runs, 1);
  CHECK_EQ_STR(u[0].shape_class, "B:4,D:8");
  CHECK_EQ_STR(u[0].knobs, "row_unroll=1 par_block=8");
  CHECK_CONTAINS(u[0].record, "ragged.tune:3");
  sheaf_kernel_free(k);
  sheaf_kernel_free(k0);
  /* an i32 input that is not a length (values 0 .. 7) */
  static const char sc[] = "kernel sc(x: f32[N], c: i32[N]) -> f32[N] { out(n) = x(n) * float(c(n)) }\n";
  sh_tune_request q3 = {.source = sc, .len = strlen(sc), .kernel = "sc", .isa_set = true, .isa = isa_here(),
                        .cache_dir = dir, .sizes = (int64_t[]){100}, .n_sizes = 1, .budget_s = 600,
                        .max_candidates = 1};
  REQUIRE_OK(ctx, sh_tune_kernel(ctx, &q3, &r));
  CHECK_EQ_INT(r.cls[0], 64);
}

/* The repeated search ends by itself once a pass finds nothing (a small
 * row kernel: most knobs give the C already measured), and at the budget
 * on a GEMM whose candidates outlast it. */
TEST(codegen_tune_repeated_search_ends) {
  if (!th_have_jit_cc("codegen_tune_repeated_search_ends")) return;
  sheaf_ctx *ctx = th_ctx();
  char dir[512];
  snprintf(dir, sizeof dir, "%s", th_tmp_path("tune-passes"));
  static const char rag[] = "kernel s(x: f32[B, L(b)], L: i32[B]) -> f32[B] { y(b) +=! x(b, l) * x(b, l) }\n";
  sh_tune_stats ts;
  sh_tune_request q = {.source = rag, .len = strlen(rag), .kernel = "s", .isa_set = true, .isa = isa_here(),
                       .cache_dir = dir, .sizes = (int64_t[]){16}, .n_sizes = 1, .budget_s = 600, .stats = &ts};
  sh_tune_rec r;
  REQUIRE_OK(ctx, sh_tune_kernel(ctx, &q, &r));
  CHECK(!ts.budget_stop);
  CHECK(ts.passes >= 1 && ts.passes <= 8); /* ended by a pass that improved nothing, not by the budget */
  CHECK(ts.seconds < 300);
  /* a budget of 2 s: stopped by it, within one candidate's cost of it */
  static const char mm[] = "kernel mm(A: f32[M, K], B: f32[K, N]) -> f32[M, N] { C(m, n) +=! A(m, k) * B(k, n) }\n";
  sh_tune_request q2 = {.source = mm, .len = strlen(mm), .kernel = "mm", .isa_set = true, .isa = isa_here(),
                        .cache_dir = dir, .sizes = (int64_t[]){40, 64, 48}, .n_sizes = 3, .budget_s = 2,
                        .stats = &ts};
  double t0 = now_s();
  REQUIRE_OK(ctx, sh_tune_kernel(ctx, &q2, &r));
  double t = now_s() - t0;
  CHECK(ts.budget_stop);
  CHECK(ts.passes >= 1); /* (no candidate when the default's compile took the budget) */
  if (!CHECK(t < 2 + 20)) fprintf(stderr, "  a 2 s search took %.1f s\n", t); /* the default's compile, one
                                                                               candidate over, the confirmation */
}

/* `sheaf tune` on a ragged kernel: lengths from a .lengths file, the
 * sequence count from --batch; then `sheaf run --stats` names the records
 * a model's kernel ran. */
TEST(codegen_tune_ragged_cli) {
  if (!th_have_jit_cc("codegen_tune_ragged_cli")) return;
  const char *bin = th_sheaf_bin();
  if (!bin) {
    printf("note: codegen_tune_ragged_cli skipped: SHEAF_BIN not set\n");
    return;
  }
  char src[sizeof ATT + 32];
  snprintf(src, sizeof src, "size D = 8\n%s", ATT);
  const char *sf = th_write_tmp("ra.sf", src, strlen(src));
  const char *lp = th_write_tmp("w.lengths", "3\n0\n1\n12\n5\n", 11);
  const char *out = th_tmp_path("ra.tune");
  char cmd[8192], buf[16384];
  snprintf(cmd, sizeof cmd, "SHEAF_CACHE_DIR='%s' %s tune '%s' --data '%s' --batch 5 --budget 1 --out '%s'",
           th_tmp_path("tune-ra-cli"), bin, sf, lp, out);
  CHECK_EQ_INT(th_run(cmd, buf, sizeof buf), 0);
  CHECK_CONTAINS(buf, "attn");
  CHECK_CONTAINS(buf, "B:5 (B:4)"); /* D is the file's size 8, not the kernel's */
  sheaf_ctx *ctx = th_ctx();
  CHECK_OK(ctx, sheaf_kernel_load_tuning(ctx, out));
  const char *bad = th_write_tmp("bad.lengths", "3\nx\n", 4);
  snprintf(cmd, sizeof cmd, "SHEAF_CACHE_DIR='%s' %s tune '%s' --data '%s' --budget 1", th_tmp_path("tune-ra-cli"),
           bin, sf, bad);
  CHECK_EQ_INT(th_run(cmd, buf, sizeof buf), 1);
  CHECK_CONTAINS(buf, "bad.lengths: line 2 is not a length (0 .. 2^20): 'x'");
}
