/*
 * test_codegen_lir.c — the loop IR (src/codegen/lir.h): building kernels by
 * hand, the printer against golden text, the verifier and the builders'
 * errors, integer simplification, and the reference interpreter against
 * plain C on matmul, softmax, layernorm and the ragged kernels (lengths 0,
 * 1, 17, 64).
 */
#include <stdlib.h>

#include "codegen/lir_int.h"
#include "harness.h"
#include "lir_build.h"
#include "lir_ref.h"

static char *print_kernel(sheaf_ctx *ctx, const sh_lir_kernel *k) {
  static char text[16384];
  sh_buf b;
  sh_buf_init(&b, ctx);
  sh_lir_print(k, &b);
  snprintf(text, sizeof text, "%s", sh_buf_cstr(&b));
  sh_buf_free(&b);
  return text;
}

TEST(codegen_lir_print_matmul) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k = lb_matmul(ctx, "mm", false);
  REQUIRE(k);
  CHECK_OK(ctx, sh_lir_verify(k));
  CHECK_EQ_STR(print_kernel(ctx, k),
               "kernel mm(M, N, K)\n"
               "buffer A f32[M, K] in\n"
               "buffer B f32[K, N] in weight\n"
               "buffer C f32[M, N] out\n"
               "for i in 0..M:\n"
               "  for j in 0..N:\n"
               "    C[i, j] = 0.0\n"
               "    for k in 0..K:\n"
               "      C[i, j] += A[i, k] * B[k, j]\n");
  sh_lir_free(k);
}

TEST(codegen_lir_print_ragged) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k = lb_ragged_scores(ctx, "scores", 0.125f);
  REQUIRE(k);
  CHECK_OK(ctx, sh_lir_verify(k));
  CHECK_EQ_STR(print_kernel(ctx, k),
               "kernel scores(B, D)\n"
               "buffer len i32[B] in\n"
               "buffer qoff i32[B] in\n"
               "buffer soff i32[B] in\n"
               "buffer Q f32[B, *, D] in ragged(len, qoff)\n"
               "buffer Kt f32[B, *, D] in ragged(len, qoff)\n"
               "buffer S f32[B, *, *] out ragged(len, soff)\n"
               "for b in 0..B:\n"
               "  for i in 0..len[b]:\n"
               "    for j in 0..len[b]:\n"
               "      S[b, i, j] = 0.0\n"
               "      for d in 0..D:\n"
               "        S[b, i, j] += Q[b, i, d] * Kt[b, j, d]\n"
               "      S[b, i, j] *= 0.125\n");
  sh_lir_free(k);
}

TEST(codegen_lir_print_exprs) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k;
  REQUIRE_OK(ctx, sh_lir_create(ctx, "e", &k));
  sh_lir_expr a = sh_lir_sz(k, sh_lir_size(k, "a")), b = sh_lir_sz(k, sh_lir_size(k, "b"));
  sh_lir_expr e = sh_lir_sub(k, a, sh_lir_sub(k, b, sh_lir_int(k, 3)));
  e = sh_lir_mul(k, sh_lir_add(k, e, sh_lir_int(k, 1)), sh_lir_bin(k, SH_LIR_OP_MOD, a, b));
  e = sh_lir_bin(k, SH_LIR_OP_AND, sh_lir_bin(k, SH_LIR_OP_LT, e, b),
                 sh_lir_bin(k, SH_LIR_OP_MAX, a, sh_lir_int(k, 2)));
  sh_lir_expr f = sh_lir_select(k, sh_lir_cast(k, e), sh_lir_un(k, SH_LIR_FN_GELU, sh_lir_flt(k, 1.5f)),
                                sh_lir_flt(k, -INFINITY));
  sh_buf out;
  sh_buf_init(&out, ctx);
  sh_lir_print_expr(k, f, &out);
  CHECK_EQ_STR(sh_buf_cstr(&out),
               "select(float((a - (b - 3) + 1) * (a % b) < b && max(a, 2)), gelu(1.5), -inf)");
  /* constants fold in the builders */
  sh_buf_clear(&out);
  sh_lir_print_expr(k, sh_lir_add(k, sh_lir_mul(k, sh_lir_int(k, 6), sh_lir_int(k, 7)),
                                  sh_lir_mul(k, a, sh_lir_int(k, 1))),
                    &out);
  CHECK_EQ_STR(sh_buf_cstr(&out), "42 + a");
  sh_buf_free(&out);
  CHECK_OK(ctx, sh_lir_status(k));
  sh_lir_free(k);
}

TEST(codegen_lir_simplify) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k;
  REQUIRE_OK(ctx, sh_lir_create(ctx, "s", &k));
  sh_lir_expr K = sh_lir_sz(k, sh_lir_size(k, "K"));
  sh_lir_stmt jo = sh_lir_loop(k, sh_lir_root(k), "jo", K);
  sh_lir_stmt jl = sh_lir_loop(k, jo, "jl", sh_lir_int(k, 8));
  /* (16 jo + 8 + jl) / 16 = jo and % 16 = 8 + jl, since 8 + jl is in [8, 16) */
  sh_lir_expr n = sh_lir_add(k, sh_lir_add(k, sh_lir_mul(k, sh_lir_lv(k, jo), sh_lir_int(k, 16)),
                                           sh_lir_int(k, 8)),
                             sh_lir_lv(k, jl));
  sh_lir_expr P = sh_lir_int(k, 16);
  sh_buf out;
  sh_buf_init(&out, ctx);
  sh_lir_print_expr(k, sh_lir_simplify(k, sh_lir_bin(k, SH_LIR_OP_DIV, n, P)), &out);
  CHECK_EQ_STR(sh_buf_cstr(&out), "jo");
  sh_buf_clear(&out);
  sh_lir_print_expr(k, sh_lir_simplify(k, sh_lir_bin(k, SH_LIR_OP_MOD, n, P)), &out);
  CHECK_EQ_STR(sh_buf_cstr(&out), "jl + 8");
  /* like terms combine; a comparison decided by ranges folds */
  sh_buf_clear(&out);
  sh_lir_expr t = sh_lir_sub(k, sh_lir_add(k, n, sh_lir_lv(k, jl)), sh_lir_mul(k, sh_lir_lv(k, jl), sh_lir_int(k, 2)));
  sh_lir_print_expr(k, sh_lir_simplify(k, t), &out);
  CHECK_EQ_STR(sh_buf_cstr(&out), "jo * 16 + 8");
  sh_buf_clear(&out);
  sh_lir_print_expr(k, sh_lir_simplify(k, sh_lir_bin(k, SH_LIR_OP_LT, sh_lir_lv(k, jl), sh_lir_int(k, 8))), &out);
  CHECK_EQ_STR(sh_buf_cstr(&out), "1");
  /* affine decomposition */
  int64_t coef = 0;
  sh_lir_expr rest;
  CHECK(sh_lir_affine(k, n, sh_lir_loop_var(k, jl), &coef, &rest));
  CHECK_EQ_INT(coef, 1);
  CHECK(!sh_lir_affine(k, sh_lir_mul(k, sh_lir_lv(k, jl), sh_lir_lv(k, jl)), sh_lir_loop_var(k, jl), &coef,
                       &rest));
  sh_buf_free(&out);
  sh_lir_free(k);
}

TEST(codegen_lir_builder_errors) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k;
  CHECK_STATUS(ctx, sh_lir_create(ctx, "no spaces", &k), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "C identifier");
  REQUIRE_OK(ctx, sh_lir_create(ctx, "bad", &k));
  sh_lir_expr M = sh_lir_sz(k, sh_lir_size(k, "M"));
  sh_lir_buf A = sh_lir_buffer(k, "A", SH_LIR_F32, SH_LIR_IN, 1, &M);
  /* float + int */
  CHECK_EQ_INT(sh_lir_add(k, sh_lir_flt(k, 1), M), SH_LIR_NONE);
  CHECK_STATUS(ctx, sh_lir_status(k), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "kernel bad: '+' on float and integer");
  /* sticky: later builders return NONE, the first message stays */
  CHECK_EQ_INT(sh_lir_int(k, 1), SH_LIR_NONE);
  CHECK_EQ_INT(sh_lir_load1(k, A, M), SH_LIR_NONE);
  sh_lir_free(k);

  struct {
    const char *what, *msg;
  } cases[] = {
      {"rank", "1 indices for rank 2"},       {"store-in", "the buffer is an input"},
      {"modf", "% && || integer only"},       {"local-dim", "a positive constant for a local"},
      {"dup", "declared twice"},              {"ragged", "cannot be ragged"},
      {"gelu-int", "gelu takes a float"},     {"select", "select takes float operands"},
      {"alloc", "not a local buffer"},        {"else", "else of a statement that is not an if"},
  };
  for (size_t c = 0; c < SH_ARRAY_LEN(cases); c++) {
    REQUIRE_OK(ctx, sh_lir_create(ctx, "bad", &k));
    M = sh_lir_sz(k, sh_lir_size(k, "M"));
    sh_lir_buf X = sh_lir_buffer(k, "X", SH_LIR_F32, SH_LIR_IN, 2, (sh_lir_expr[]){M, M});
    sh_lir_buf Y = sh_lir_buffer(k, "Y", SH_LIR_F32, SH_LIR_OUT, 1, &M);
    const char *w = cases[c].what;
    if (!strcmp(w, "rank")) sh_lir_load1(k, X, M);
    if (!strcmp(w, "store-in")) sh_lir_store2(k, sh_lir_root(k), X, M, M, sh_lir_flt(k, 0), 0);
    if (!strcmp(w, "modf")) sh_lir_bin(k, SH_LIR_OP_MOD, sh_lir_flt(k, 1), sh_lir_flt(k, 2));
    if (!strcmp(w, "local-dim")) sh_lir_buffer(k, "L", SH_LIR_F32, SH_LIR_LOCAL, 1, &M);
    if (!strcmp(w, "dup")) sh_lir_buffer(k, "X", SH_LIR_F32, SH_LIR_IN, 1, &M);
    if (!strcmp(w, "ragged")) sh_lir_buffer_ragged(k, Y, 1u, Y, Y);
    if (!strcmp(w, "gelu-int")) sh_lir_un(k, SH_LIR_FN_GELU, M);
    if (!strcmp(w, "select")) sh_lir_select(k, M, sh_lir_flt(k, 1), sh_lir_flt(k, 2));
    if (!strcmp(w, "alloc")) sh_lir_alloc(k, sh_lir_root(k), Y);
    if (!strcmp(w, "else")) sh_lir_else(k, sh_lir_root(k));
    if (!CHECK_STATUS(ctx, sh_lir_status(k), SHEAF_ERR_INVALID_ARG))
      fprintf(stderr, "  case %s\n", w);
    else if (!CHECK_CONTAINS(sheaf_ctx_last_error(ctx), cases[c].msg))
      fprintf(stderr, "  case %s\n", w);
    sh_lir_free(k);
  }
}

TEST(codegen_lir_verify_errors) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k;
  /* a variable used outside its loop */
  REQUIRE_OK(ctx, sh_lir_create(ctx, "v", &k));
  sh_lir_expr M = sh_lir_sz(k, sh_lir_size(k, "M"));
  sh_lir_buf Y = sh_lir_buffer(k, "Y", SH_LIR_F32, SH_LIR_OUT, 1, &M);
  sh_lir_stmt i = sh_lir_loop(k, sh_lir_root(k), "i", M);
  sh_lir_store1(k, sh_lir_root(k), Y, sh_lir_lv(k, i), sh_lir_flt(k, 1), SH_LIR_COMBINE_NONE);
  CHECK_STATUS(ctx, sh_lir_verify(k), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "store to Y: uses a loop variable outside its loop: i");
  CHECK_OK(ctx, sh_lir_status(k)); /* not sticky */
  sh_lir_free(k);
  /* a local read outside its alloc */
  REQUIRE_OK(ctx, sh_lir_create(ctx, "v", &k));
  M = sh_lir_sz(k, sh_lir_size(k, "M"));
  Y = sh_lir_buffer(k, "Y", SH_LIR_F32, SH_LIR_OUT, 1, &M);
  sh_lir_expr four = sh_lir_int(k, 4);
  sh_lir_buf L = sh_lir_buffer(k, "acc", SH_LIR_F32, SH_LIR_LOCAL, 1, &four);
  i = sh_lir_loop(k, sh_lir_root(k), "i", M);
  sh_lir_alloc(k, i, L);
  sh_lir_store1(k, i, Y, sh_lir_lv(k, i), sh_lir_load1(k, L, sh_lir_int(k, 0)), SH_LIR_COMBINE_NONE);
  CHECK_STATUS(ctx, sh_lir_verify(k), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "reads a local outside its alloc: acc");
  sh_lir_free(k);
  /* the interpreter checks every index */
  REQUIRE_OK(ctx, sh_lir_create(ctx, "oob", &k));
  M = sh_lir_sz(k, sh_lir_size(k, "M"));
  Y = sh_lir_buffer(k, "Y", SH_LIR_F32, SH_LIR_OUT, 1, &M);
  i = sh_lir_loop(k, sh_lir_root(k), "i", M);
  sh_lir_store1(k, i, Y, sh_lir_add(k, sh_lir_lv(k, i), sh_lir_int(k, 1)), sh_lir_flt(k, 1),
                SH_LIR_COMBINE_NONE);
  float y[4];
  int64_t m = 4;
  CHECK_STATUS(ctx, sh_lir_run(k, &m, (sh_lir_arg[]){{.data = y}}), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "kernel oob: index 4 of Y's dimension 0 is outside 0..3");
  sh_lir_free(k);
}

static void run_ok(sheaf_ctx *ctx, sh_lir_kernel *k, const int64_t *sizes, const sh_lir_arg *args) {
  CHECK_OK(ctx, sh_lir_run(k, sizes, args));
}

TEST(codegen_lir_interp_matmul) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k = lb_matmul(ctx, "mm", false), *ke = lb_matmul(ctx, "mmg", true);
  REQUIRE(k && ke);
  const int64_t shapes[][3] = {{1, 1, 1}, {7, 9, 17}, {16, 8, 3}, {5, 33, 64}};
  uint64_t seed = 7;
  for (size_t s = 0; s < SH_ARRAY_LEN(shapes); s++) {
    int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
    float *A = th_frand_fill(&seed, M * K), *B = th_frand_fill(&seed, K * N),
          *bias = th_frand_fill(&seed, N), *C = malloc(sizeof(float) * (size_t)(M * N)),
          *Y = malloc(sizeof(float) * (size_t)(M * N)), *R = malloc(sizeof(float) * (size_t)(M * N));
    int64_t sizes[3] = {M, N, K};
    run_ok(ctx, k, sizes, (sh_lir_arg[]){{.data = A}, {.data = B}, {.data = C}});
    lr_matmul(M, N, K, A, B, NULL, false, R);
    CHECK(lr_close("matmul", C, R, M * N, 1e-5));
    run_ok(ctx, ke, sizes, (sh_lir_arg[]){{.data = A}, {.data = B}, {.data = bias}, {.data = Y}});
    lr_matmul(M, N, K, A, B, bias, true, R);
    CHECK(lr_close("matmul+gelu", Y, R, M * N, 1e-5));
    free(A), free(B), free(bias), free(C), free(Y), free(R);
  }
  sh_lir_free(k);
  sh_lir_free(ke);
}

TEST(codegen_lir_interp_rows) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *sm = lb_softmax(ctx, "sm"), *ln = lb_layernorm(ctx, "ln", 1e-5f);
  REQUIRE(sm && ln);
  uint64_t seed = 11;
  for (int64_t N = 1; N <= 70; N += 23) {
    int64_t M = 3;
    float *x = th_frand_fill(&seed, M * N), *g = th_frand_fill(&seed, N), *b = th_frand_fill(&seed, N),
          *y = malloc(sizeof(float) * (size_t)(M * N)), *r = malloc(sizeof(float) * (size_t)(M * N));
    int64_t sizes[2] = {M, N};
    run_ok(ctx, sm, sizes, (sh_lir_arg[]){{.data = x}, {.data = y}});
    lr_softmax(M, N, x, r);
    CHECK(lr_close("softmax", y, r, M * N, 1e-5));
    run_ok(ctx, ln, sizes, (sh_lir_arg[]){{.data = x}, {.data = g}, {.data = b}, {.data = y}});
    lr_layernorm(M, N, x, g, b, 1e-5f, r);
    CHECK(lr_close("layernorm", y, r, M * N, 1e-4));
    free(x), free(g), free(b), free(y), free(r);
  }
  sh_lir_free(sm);
  sh_lir_free(ln);
}

TEST(codegen_lir_interp_ragged) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *ks = lb_ragged_scores(ctx, "scores", 0.125f), *kr = lb_ragged_sums(ctx, "sums");
  REQUIRE(ks && kr);
  lr_ragged rg;
  const int32_t lens[] = {0, 1, 17, 64, 3};
  REQUIRE(lr_ragged_make(&rg, lens, 5, 24, 1, 21));
  int64_t sizes[2] = {rg.batch, rg.d};
  run_ok(ctx, ks, sizes, (sh_lir_arg[]){{.data = rg.len}, {.data = rg.qoff}, {.data = rg.soff}, {.data = rg.q}, {.data = rg.k}, {.data = rg.s}});
  lr_ragged_scores(&rg, 0.125f, rg.sref);
  CHECK(lr_close("ragged scores", rg.s, rg.sref, rg.s_elems, 1e-5));
  run_ok(ctx, kr, sizes, (sh_lir_arg[]){{.data = rg.len}, {.data = rg.qoff}, {.data = rg.q}, {.data = rg.sums}});
  lr_ragged_sums(&rg, rg.sumsref);
  CHECK(lr_close("ragged sums", rg.sums, rg.sumsref, rg.batch * rg.d, 1e-5));
  lr_ragged_free(&rg);
  sh_lir_free(ks);
  sh_lir_free(kr);
}
