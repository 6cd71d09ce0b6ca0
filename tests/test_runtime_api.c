/*
 * test_runtime_api.c — the instruments and model accessors of the graph
 * API: sheaf_model_ctx, the identity initializers (values, seed
 * independence, rejected shapes), sheaf_graph_stats_reset (counters,
 * per-kernel counts, timeline) and sheaf_graph_write_trace (mid-run
 * writes, bad paths, a graph that collects nothing).
 */
#include <stdlib.h>

#include "harness.h"

static const float *param_values(sheaf_model *m, sheaf_param p) {
  return sheaf_model_param_data(m, p, NULL, NULL);
}

TEST(runtime_api_model_ctx) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  CHECK(sheaf_model_ctx(m) == ctx);
  CHECK(sheaf_model_ctx(NULL) == NULL);
  sheaf_model_free(m);
}

TEST(runtime_api_init_identity) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  sheaf_param sq, tall, wide, rows, one;
  REQUIRE_OK(ctx, sheaf_model_param(m, "sq", 2, (int64_t[]){3, 3}, SHEAF_INIT_IDENTITY, &sq));
  REQUIRE_OK(ctx, sheaf_model_param(m, "tall", 2, (int64_t[]){4, 2}, SHEAF_INIT_IDENTITY, &tall));
  REQUIRE_OK(ctx, sheaf_model_param(m, "wide", 2, (int64_t[]){2, 6}, SHEAF_INIT_IDENTITY, &wide));
  REQUIRE_OK(ctx,
             sheaf_model_param(m, "rows", 2, (int64_t[]){3, 4}, SHEAF_INIT_IDENTITY_ROWS, &rows));
  REQUIRE_OK(ctx,
             sheaf_model_param(m, "one", 2, (int64_t[]){2, 1}, SHEAF_INIT_IDENTITY_ROWS, &one));
  for (int pass = 0; pass < 2; pass++) { /* as declared, then after a reseed: the same */
    const float *v = param_values(m, sq);
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 3; j++) CHECK_EQ_INT((int)v[i * 3 + j], i == j);
    static const float t[8] = {1, 0, 0, 1, 1, 0, 0, 1}; /* [I; I] */
    v = param_values(m, tall);
    for (int i = 0; i < 8; i++) CHECK_EQ_INT((int)v[i], (int)t[i]);
    static const float w[12] = {1, 0, 1, 0, 1, 0, 0, 1, 0, 1, 0, 1}; /* [I I I] */
    v = param_values(m, wide);
    for (int i = 0; i < 12; i++) CHECK_EQ_INT((int)v[i], (int)w[i]);
    v = param_values(m, rows); /* every row a flattened 2 x 2 identity */
    for (int r = 0; r < 3; r++)
      for (int k = 0; k < 4; k++) CHECK_EQ_INT((int)v[r * 4 + k], k == 0 || k == 3);
    v = param_values(m, one);
    CHECK(v[0] == 1.0f && v[1] == 1.0f);
    CHECK_OK(ctx, sheaf_model_seed(m, 12345));
  }
  /* shapes without an identity: a clear error naming the parameter and shape */
  sheaf_param p;
  CHECK_STATUS(ctx, sheaf_model_param(m, "v", 1, (int64_t[]){4}, SHEAF_INIT_IDENTITY, &p),
               SHEAF_ERR_SHAPE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "'v': SHEAF_INIT_IDENTITY needs a matrix");
  CHECK_STATUS(ctx, sheaf_model_param(m, "r", 2, (int64_t[]){4, 6}, SHEAF_INIT_IDENTITY, &p),
               SHEAF_ERR_SHAPE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "'r': SHEAF_INIT_IDENTITY of shape [4, 6]");
  CHECK_STATUS(ctx,
               sheaf_model_param(m, "t", 2, (int64_t[]){5, 12}, SHEAF_INIT_IDENTITY_ROWS, &p),
               SHEAF_ERR_SHAPE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "a row of 12 floats is not an n x n matrix");
  CHECK_STATUS(ctx, sheaf_model_param(m, "u", 1, (int64_t[]){9}, SHEAF_INIT_IDENTITY_ROWS, &p),
               SHEAF_ERR_SHAPE);
  CHECK_STATUS(ctx, sheaf_model_param(m, "x", 2, (int64_t[]){2, 2}, (sheaf_init)99, &p),
               SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "unknown init 99");
  CHECK_EQ_SIZE(sheaf_model_param_count(m), 5); /* the rejected ones were not declared */
  sheaf_model_free(m);
}

/* 10 instances of three chained tanh(x·W): 3 batches of 10. */
static void build_chain(sheaf_graph *g, sheaf_param W) {
  float x[6] = {1, 2, 3, 4, 5, 6};
  for (int i = 0; i < 10; i++) {
    sheaf_expr h = sheaf_input_vector(g, 6, x);
    for (int t = 0; t < 3; t++) h = sheaf_tanh(g, sheaf_affine(g, W, h, SHEAF_NO_PARAM));
  }
}

static size_t count_events(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return (size_t)-1;
  size_t n = 0;
  char line[1024];
  while (fgets(line, sizeof line, f)) n += strstr(line, "\"ph\":\"X\"") != NULL;
  fclose(f);
  return n;
}

TEST(runtime_api_stats_reset_and_write_trace) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  sheaf_param W;
  REQUIRE_OK(ctx, sheaf_model_param(m, "W_h", 2, (int64_t[]){6, 6}, SHEAF_INIT_GLOROT, &W));
  const char *at_free = th_tmp_path("api_trace_free.json");
  const char *mid = th_tmp_path("api_trace_mid.json");
  sheaf_graph_opts o = {SHEAF_POLICY_SHEAF, 1, at_free};
  sheaf_graph *g;
  REQUIRE_OK(ctx, sheaf_graph_create(m, &o, &g));
  build_chain(g, W);
  CHECK_OK(ctx, sheaf_graph_flush(g));
  CHECK_OK(ctx, sheaf_graph_write_trace(g, mid));
  CHECK_EQ_SIZE(count_events(mid), 3);
  /* a second round: the timeline keeps growing until a stats reset */
  CHECK_OK(ctx, sheaf_graph_reset(g));
  build_chain(g, W);
  CHECK_OK(ctx, sheaf_graph_flush(g));
  CHECK_OK(ctx, sheaf_graph_write_trace(g, mid));
  CHECK_EQ_SIZE(count_events(mid), 6);

  sheaf_graph_stats st;
  sheaf_graph_get_stats(g, &st);
  CHECK_EQ_SIZE(st.batches, 6);
  CHECK_OK(ctx, sheaf_graph_stats_reset(g));
  sheaf_graph_get_stats(g, &st);
  CHECK_EQ_SIZE(st.nodes, 0);
  CHECK_EQ_SIZE(st.batches, 0);
  CHECK_EQ_SIZE(st.flushes, 0);
  CHECK_EQ_SIZE(st.flops, 0);
  CHECK_EQ_SIZE(st.ns_build + st.ns_schedule + st.ns_kernels, 0);
  CHECK_EQ_SIZE(sheaf_graph_kernel_stats(g, 0, NULL, NULL, NULL), 0);
  CHECK_OK(ctx, sheaf_graph_write_trace(g, mid));
  CHECK_EQ_SIZE(count_events(mid), 0);
  /* values and the graph stay usable; the counters count the next round */
  CHECK_OK(ctx, sheaf_graph_reset(g));
  build_chain(g, W);
  CHECK_OK(ctx, sheaf_graph_flush(g));
  sheaf_graph_get_stats(g, &st);
  CHECK_EQ_SIZE(st.batches, 3);
  CHECK_EQ_SIZE(st.nodes, 70);
  CHECK_EQ_SIZE(st.flushes, 1);
  const char *names[2];
  uint64_t nb[2], nn[2];
  CHECK_EQ_SIZE(sheaf_graph_kernel_stats(g, 2, names, nb, nn), 1);
  CHECK_EQ_SIZE(nb[0], 3);
  CHECK_EQ_SIZE(nn[0], 30);
  /* a reset in the middle of a construction counts its build time from then on */
  build_chain(g, W);
  CHECK_OK(ctx, sheaf_graph_stats_reset(g));
  sheaf_graph_get_stats(g, &st);
  CHECK(st.ns_build < 1000000000ull);
  CHECK_EQ_SIZE(st.nodes, 0);

  /* bad paths and arguments */
  CHECK_STATUS(ctx, sheaf_graph_write_trace(g, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_graph_write_trace: path is NULL");
  CHECK_STATUS(ctx, sheaf_graph_write_trace(g, ""), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "path is empty");
  const char *bad = "/nonexistent-dir-for-sheaf-tests/t.json";
  CHECK_STATUS(ctx, sheaf_graph_write_trace(g, bad), SHEAF_ERR_IO);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "cannot write the trace to '/nonexistent-dir");
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "No such file or directory");
  CHECK_EQ_INT(sheaf_graph_status(g), SHEAF_OK); /* an instrument never fails the graph */
  CHECK_STATUS(ctx, sheaf_graph_write_trace(NULL, mid), SHEAF_ERR_INVALID_ARG);
  CHECK_STATUS(ctx, sheaf_graph_stats_reset(NULL), SHEAF_ERR_INVALID_ARG);
  sheaf_graph_free(g);
  CHECK_EQ_SIZE(count_events(at_free), 0); /* at free: what was collected since the reset */

  /* a graph without trace_path collects nothing: asking for it is an error */
  REQUIRE_OK(ctx, sheaf_graph_create(m, NULL, &g));
  build_chain(g, W);
  CHECK_OK(ctx, sheaf_graph_flush(g));
  CHECK_STATUS(ctx, sheaf_graph_write_trace(g, mid), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "collects no timeline");
  sheaf_graph_free(g);
  sheaf_model_free(m);
}
