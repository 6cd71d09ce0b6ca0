/*
 * test_runtime_errors.c — misuse of the graph API gives an error with a
 * message naming the op and the shapes (never a crash): shape mismatches,
 * handles from another graph or from before a reset, missing and foreign
 * parameters, sticky first error and silent null propagation; parameters:
 * seeded init, save/load round trip, a load that lists every missing tensor
 * and shape mismatch; allocation failures injected at every allocation of a
 * build + flush; statistics, per-kernel counts and the Chrome trace file.
 */
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"

TEST(runtime_error_shapes) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  sheaf_param W = th_param(ctx, m, "W_leaf", 2, 256, 768);
  sheaf_graph *g;
  REQUIRE_OK(ctx, sheaf_graph_create(m, NULL, &g));
  float x[512] = {0};
  sheaf_expr v = sheaf_input_vector(g, 512, x);
  sheaf_expr y = sheaf_affine(g, W, v, SHEAF_NO_PARAM);
  CHECK(sheaf_expr_is_null(y));
  CHECK_EQ_INT(sheaf_graph_status(g), SHEAF_ERR_SHAPE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx),
                 "sheaf_affine: x has shape [512] but W 'W_leaf' has shape [256, 768]");
  /* sticky: later valid builders return null, flush reports the first error */
  CHECK(sheaf_expr_is_null(sheaf_tanh(g, v)));
  CHECK_STATUS(ctx, sheaf_graph_flush(g), SHEAF_ERR_SHAPE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_affine: x has shape [512]");
  sheaf_value_view vv;
  CHECK_STATUS(ctx, sheaf_value(g, v, &vv), SHEAF_ERR_SHAPE);
  /* reset clears it */
  CHECK_OK(ctx, sheaf_graph_reset(g));
  CHECK_OK(ctx, sheaf_graph_status(g));
  sheaf_expr a = sheaf_input_vector(g, 3, x), b = sheaf_input_vector(g, 4, x);
  CHECK(sheaf_expr_is_null(sheaf_add(g, a, b)));
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_add: shapes [3] and [4] differ");
  CHECK_OK(ctx, sheaf_graph_reset(g));
  a = sheaf_input_vector(g, 3, x);
  CHECK(sheaf_expr_is_null(sheaf_slice(g, a, 2, 5)));
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_slice: [2, 5)");
  CHECK_OK(ctx, sheaf_graph_reset(g));
  int64_t s23[2] = {2, 3}, s7 = 7;
  a = sheaf_input(g, 2, s23, x);
  CHECK(sheaf_expr_is_null(sheaf_matmul(g, a, sheaf_input_vector(g, 2, x))));
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_matmul: shapes [2, 3] and [2]");
  CHECK_OK(ctx, sheaf_graph_reset(g));
  CHECK(sheaf_expr_is_null(sheaf_reshape(g, sheaf_input_vector(g, 6, x), 1, &s7)));
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_reshape: cannot view shape [6] as [7]");
  CHECK_OK(ctx, sheaf_graph_reset(g));
  CHECK(sheaf_expr_is_null(sheaf_pick(g, sheaf_input_vector(g, 6, x), 6)));
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_pick: index 6 is outside [0, 6)");
  sheaf_graph_free(g);
  sheaf_model_free(m);
}

TEST(runtime_error_handles) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  sheaf_graph *g1, *g2;
  REQUIRE_OK(ctx, sheaf_graph_create(m, NULL, &g1));
  REQUIRE_OK(ctx, sheaf_graph_create(m, NULL, &g2));
  float x[4] = {1, 2, 3, 4};
  sheaf_expr a = sheaf_input_vector(g1, 4, x), b = sheaf_input_vector(g2, 4, x);
  CHECK(sheaf_expr_is_null(sheaf_add(g1, a, b)));
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx),
                 "sheaf_add: argument 2 belongs to another graph (or was built before "
                 "sheaf_graph_reset)");
  CHECK_OK(ctx, sheaf_graph_reset(g1));
  sheaf_expr c = sheaf_input_vector(g1, 4, x);
  CHECK(sheaf_expr_is_null(sheaf_mul(g1, c, a))); /* a is from before the reset */
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx),
                 "sheaf_mul: argument 2 was built before sheaf_graph_reset");
  CHECK_OK(ctx, sheaf_graph_reset(g1));
  /* a null argument propagates without an error */
  sheaf_expr nul = {0, 0, 0};
  CHECK(sheaf_expr_is_null(sheaf_tanh(g1, nul)));
  CHECK(sheaf_expr_is_null(sheaf_add(g1, sheaf_input_vector(g1, 4, x), nul)));
  CHECK_OK(ctx, sheaf_graph_status(g1));
  CHECK_OK(ctx, sheaf_graph_flush(g1));
  sheaf_value_view v;
  CHECK_STATUS(ctx, sheaf_value(g1, nul, &v), SHEAF_ERR_INVALID_ARG);
  CHECK_STATUS(ctx, sheaf_value(g1, b, &v), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_value: the expression belongs to another graph");
  /* a forged handle */
  sheaf_expr forged = c;
  forged.node = 1000;
  sheaf_expr d = sheaf_input_vector(g1, 4, x);
  forged.graph = d.graph;
  CHECK(sheaf_expr_is_null(sheaf_exp(g1, forged)));
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_exp: argument 1 is not a valid expression");
  /* NULL graphs */
  CHECK(sheaf_expr_is_null(sheaf_tanh(NULL, c)));
  CHECK_STATUS(ctx, sheaf_graph_flush(NULL), SHEAF_ERR_INVALID_ARG);
  sheaf_graph_free(g1);
  sheaf_graph_free(g2);
  sheaf_model_free(m);
}

TEST(runtime_error_parameters) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m, *m2;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m2));
  sheaf_param W = th_param(ctx, m, "W", 2, 4, 4), W2 = th_param(ctx, m2, "W", 2, 4, 4);
  sheaf_param b5 = th_param(ctx, m, "b5", 1, 5, 0);
  int64_t s[2] = {4, 4};
  sheaf_param dup;
  CHECK_STATUS(ctx, sheaf_model_param(m, "W", 2, s, SHEAF_INIT_ZERO, &dup), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "'W' is declared twice");
  sheaf_param q;
  CHECK_STATUS(ctx, sheaf_model_find(m, "nope", &q), SHEAF_ERR_NOT_FOUND);
  CHECK_OK(ctx, sheaf_model_find(m, "W", &q));
  CHECK_EQ_INT(q.id, W.id);
  CHECK_EQ_STR(sheaf_model_param_name(m, b5), "b5");
  sheaf_graph *g;
  REQUIRE_OK(ctx, sheaf_graph_create(m, NULL, &g));
  float x[4] = {0};
  sheaf_expr v = sheaf_input_vector(g, 4, x);
  CHECK(sheaf_expr_is_null(sheaf_affine(g, SHEAF_NO_PARAM, v, SHEAF_NO_PARAM)));
  CHECK_EQ_INT(sheaf_graph_status(g), SHEAF_ERR_NOT_FOUND);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_affine: W is not a parameter");
  CHECK_OK(ctx, sheaf_graph_reset(g));
  v = sheaf_input_vector(g, 4, x);
  CHECK(sheaf_expr_is_null(sheaf_affine(g, W2, v, SHEAF_NO_PARAM)));
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_affine: W belongs to another model");
  CHECK_OK(ctx, sheaf_graph_reset(g));
  v = sheaf_input_vector(g, 4, x);
  CHECK(sheaf_expr_is_null(sheaf_affine(g, W, v, b5)));
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "bias 'b5' has shape [5] but the output has 4 columns");
  CHECK_OK(ctx, sheaf_graph_reset(g));
  CHECK(sheaf_expr_is_null(sheaf_lookup(g, W, 4)));
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_lookup: row 4 is outside table 'W' [4, 4]");
  CHECK_OK(ctx, sheaf_graph_reset(g));
  sheaf_expr h, c;
  CHECK_STATUS(ctx, sheaf_lstm_cell(g, b5, SHEAF_NO_PARAM, v, (sheaf_expr){0, 0, 0}, &h, &c),
               SHEAF_ERR_SHAPE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_lstm_cell: W 'b5' has shape [5]");
  CHECK(sheaf_graph_status(g) != SHEAF_OK);
  sheaf_graph_free(g);
  sheaf_model_free(m);
  sheaf_model_free(m2);
}

TEST(runtime_params_seed_save_load) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *a, *b;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &a));
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &b));
  sheaf_param pa = th_param(ctx, a, "W", 2, 30, 20), pb0 = th_param(ctx, b, "extra", 1, 3, 0);
  sheaf_param pb = th_param(ctx, b, "W", 2, 30, 20);
  (void)pb0;
  const float *wa = sheaf_model_param_data(a, pa, NULL, NULL),
              *wb = sheaf_model_param_data(b, pb, NULL, NULL);
  /* one stream per name: the declaration order does not matter */
  CHECK(memcmp(wa, wb, 600 * sizeof(float)) == 0);
  float lim = sqrtf(6.0f / 50.0f), mx = 0;
  for (int i = 0; i < 600; i++) mx = fabsf(wa[i]) > mx ? fabsf(wa[i]) : mx;
  CHECK(mx <= lim && mx > 0.9f * lim);
  CHECK_OK(ctx, sheaf_model_seed(b, 1));
  CHECK(memcmp(wa, wb, 600 * sizeof(float)) != 0);
  /* save a, load into b */
  const char *path = th_tmp_path("params.safetensors");
  CHECK_OK(ctx, sheaf_model_save(a, path));
  sheaf_model *c;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &c));
  sheaf_param pc = th_param(ctx, c, "W", 2, 30, 20);
  CHECK_OK(ctx, sheaf_model_seed(c, 99));
  CHECK_OK(ctx, sheaf_model_load(c, path));
  CHECK(memcmp(wa, sheaf_model_param_data(c, pc, NULL, NULL), 600 * sizeof(float)) == 0);
  /* b declares 'extra', which the file lacks: error, nothing changed */
  float before = wb[0];
  CHECK_STATUS(ctx, sheaf_model_load(b, path), SHEAF_ERR_NOT_FOUND);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "missing 'extra' [3]");
  CHECK(wb[0] == before);
  sheaf_model_free(a);
  sheaf_model_free(b);
  sheaf_model_free(c);
}

TEST(runtime_params_load_lists_every_problem) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *a, *b;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &a));
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &b));
  th_param(ctx, a, "W", 2, 4, 3);
  th_param(ctx, a, "b", 1, 4, 0);
  th_param(ctx, a, "unused", 1, 2, 0);
  const char *path = th_tmp_path("problems.safetensors");
  REQUIRE_OK(ctx, sheaf_model_save(a, path));
  th_param(ctx, b, "W", 2, 3, 4);     /* transposed */
  th_param(ctx, b, "b", 1, 5, 0);     /* wrong length */
  th_param(ctx, b, "emb", 2, 10, 2);  /* missing */
  th_param(ctx, b, "gamma", 1, 2, 0); /* missing */
  CHECK_STATUS(ctx, sheaf_model_load(b, path), SHEAF_ERR_SHAPE);
  const char *e = sheaf_ctx_last_error(ctx);
  CHECK_CONTAINS(e, "4 problems");
  CHECK_CONTAINS(e, "'W' has shape [4, 3] but the model declares [3, 4]");
  CHECK_CONTAINS(e, "'b' has shape [4] but the model declares [5]");
  CHECK_CONTAINS(e, "missing 'emb' [10, 2]");
  CHECK_CONTAINS(e, "missing 'gamma' [2]");
  CHECK_STATUS(ctx, sheaf_model_load(b, th_tmp_path("no-such-file.safetensors")), SHEAF_ERR_IO);
  sheaf_model_free(a);
  sheaf_model_free(b);
}

/* A small model run: 6 trees of an RNN-like recursion with every kind of op. */
static sheaf_status small_run(sheaf_ctx *ctx, sheaf_policy pol) {
  sheaf_model *m = NULL;
  sheaf_graph *g = NULL;
  sheaf_status st = sheaf_model_create(ctx, &m);
  int64_t s1[2] = {8, 16}, s2[2] = {16, 16}, s3[1] = {16}, s4[2] = {16, 64}, s5[2] = {12, 4};
  sheaf_param W, U, b, L, E;
  if (!st) st = sheaf_model_param(m, "W", 2, s1, SHEAF_INIT_GLOROT, &W);
  if (!st) st = sheaf_model_param(m, "U", 2, s2, SHEAF_INIT_GLOROT, &U);
  if (!st) st = sheaf_model_param(m, "b", 1, s3, SHEAF_INIT_NORMAL, &b);
  if (!st) st = sheaf_model_param(m, "L", 2, s4, SHEAF_INIT_GLOROT, &L);
  if (!st) st = sheaf_model_param(m, "E", 2, s5, SHEAF_INIT_NORMAL, &E);
  sheaf_graph_opts o = {pol, 0, NULL};
  if (!st) st = sheaf_graph_create(m, &o, &g);
  sheaf_expr out[6];
  for (int i = 0; !st && i < 6; i++) {
    sheaf_expr x0 =
        sheaf_concat(g, 2, (sheaf_expr[]){sheaf_lookup(g, E, i), sheaf_lookup(g, E, i + 1)});
    sheaf_expr h = sheaf_tanh(g, sheaf_affine(g, W, x0, b)), c = {0, 0, 0};
    for (int t = 0; t < 3 + i; t++) {
      sheaf_expr hc[2] = {h, h};
      sheaf_expr h2;
      sheaf_lstm_cell(g, L, SHEAF_NO_PARAM, sheaf_slice(g, sheaf_concat(g, 2, hc), 0, 16),
                      sheaf_expr_is_null(c) ? c : c, &h2, &c);
      h = sheaf_add(g, sheaf_relu(g, sheaf_affine(g, U, h2, SHEAF_NO_PARAM)),
                    sheaf_scale(g, h, 0.5f));
    }
    out[i] = sheaf_log_softmax(g, sheaf_matmul(g, h, sheaf_parameter(g, U)));
  }
  if (!st) st = sheaf_graph_flush(g);
  for (int i = 0; !st && i < 6; i++) {
    sheaf_value_view v;
    st = sheaf_value(g, out[i], &v);
  }
  sheaf_graph_free(g);
  sheaf_model_free(m);
  return st;
}

TEST(runtime_allocation_failures) {
  sheaf_ctx *ctx = th_ctx();
  const sheaf_policy pols[] = {SHEAF_POLICY_SHEAF, SHEAF_POLICY_NONE, SHEAF_POLICY_DEPTH,
                               SHEAF_POLICY_AGENDA};
  for (int pi = 0; pi < 4; pi++) {
    long c0 = th_fail_alloc_at(0);
    REQUIRE_OK(ctx, small_run(ctx, pols[pi]));
    long total = th_fail_alloc_at(0) - c0;
    CHECK(total > 10);
    for (long at = 1; at <= total; at++) {
      th_fail_alloc_at(at);
      sheaf_status st = small_run(ctx, pols[pi]);
      th_fail_alloc_at(0);
      if (st != SHEAF_OK && st != SHEAF_ERR_NOMEM)
        th_fail(__FILE__, __LINE__, "policy %s, allocation %ld: %s (%s)",
                sheaf_policy_name(pols[pi]), at, sheaf_status_str(st), sheaf_ctx_last_error(ctx));
    }
  }
}

TEST(runtime_stats_and_trace) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  sheaf_param W = th_param(ctx, m, "W_h", 2, 6, 6);
  const char *path = th_tmp_path("trace.json");
  sheaf_graph_opts o = {SHEAF_POLICY_SHEAF, 1, path};
  sheaf_graph *g;
  REQUIRE_OK(ctx, sheaf_graph_create(m, &o, &g));
  float x[6] = {1, 2, 3, 4, 5, 6};
  for (int i = 0; i < 10; i++) {
    sheaf_expr h = sheaf_input_vector(g, 6, x);
    for (int t = 0; t < 3; t++) h = sheaf_tanh(g, sheaf_affine(g, W, h, SHEAF_NO_PARAM));
  }
  CHECK_OK(ctx, sheaf_graph_flush(g));
  sheaf_graph_stats st;
  sheaf_graph_get_stats(g, &st);
  CHECK_EQ_SIZE(st.batches, 3);
  CHECK_EQ_SIZE(st.nodes, 70);
  /* the 10 inputs lie 64 bytes apart in the graph's arena: read as one strided block */
  CHECK_EQ_SIZE(st.rows_gathered, 0);
  CHECK_EQ_SIZE(st.bytes_copied, 0);
  CHECK_EQ_SIZE(st.flops, 3 * 10 * 2 * 36);
  const char *names[4];
  uint64_t nb[4], nn[4];
  CHECK_EQ_SIZE(sheaf_graph_kernel_stats(g, 4, names, nb, nn), 1);
  CHECK_EQ_STR(names[0], "affine W_h");
  CHECK_EQ_SIZE(nb[0], 3);
  CHECK_EQ_SIZE(nn[0], 30);
  sheaf_graph_free(g);
  FILE *f = fopen(path, "r");
  REQUIRE(f);
  char buf[8192];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  CHECK_CONTAINS(buf, "\"traceEvents\"");
  CHECK_CONTAINS(buf, "{\"name\":\"affine W_h\",\"cat\":\"batch\",\"ph\":\"X\"");
  CHECK_CONTAINS(buf, "\"args\":{\"batch\":10,\"depth\":2,\"phase\":0}");
  sheaf_policy p;
  CHECK_OK(ctx, sheaf_policy_parse(ctx, "agenda", &p));
  CHECK_EQ_INT(p, SHEAF_POLICY_AGENDA);
  CHECK_STATUS(ctx, sheaf_policy_parse(ctx, "greedy", &p), SHEAF_ERR_INVALID_ARG);
  CHECK_EQ_STR(sheaf_policy_name(SHEAF_POLICY_DEPTH), "depth");
  sheaf_model_free(m);
}
