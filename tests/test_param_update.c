/*
 * test_param_update.c — writing parameters between flushes: a graph packs
 * a parameter on first use, and a write is seen by later flushes once it
 * is made explicit (sheaf_model_param_update after writing through
 * sheaf_model_param_data, or sheaf_model_param_set).
 */
#include "harness.h"

/* x·W for x = [1, 2, 3] on a fresh build of graph g: want[j] = Σ x_i W[i][j]. */
static bool check_xW(sheaf_ctx *ctx, sheaf_graph *g, sheaf_param W, const float *w) {
  static const float x[3] = {1, 2, 3};
  if (!CHECK_OK(ctx, sheaf_graph_reset(g))) return false;
  sheaf_expr y = sheaf_affine(g, W, sheaf_input_vector(g, 3, x), SHEAF_NO_PARAM);
  if (!CHECK_OK(ctx, sheaf_graph_flush(g))) return false;
  double want[2];
  for (int j = 0; j < 2; j++) want[j] = x[0] * w[j] + x[1] * w[2 + j] + x[2] * w[4 + j];
  return TH_VALUE_CLOSE(g, y, want, 2, "x.W", 0);
}

/* A model with one 3 x 2 parameter W and a graph on it: W's writable
 * values, or NULL (nothing left to free) after a failed check. */
static float *w_setup(sheaf_ctx *ctx, sheaf_model **m, sheaf_param *W, sheaf_graph **g) {
  int64_t shape[2] = {3, 2};
  if (!CHECK_OK(ctx, sheaf_model_create(ctx, m))) return NULL;
  if (!CHECK_OK(ctx, sheaf_model_param(*m, "W", 2, shape, SHEAF_INIT_GLOROT, W)) ||
      !CHECK_OK(ctx, sheaf_graph_create(*m, NULL, g))) {
    sheaf_model_free(*m);
    return NULL;
  }
  return sheaf_model_param_data(*m, *W, NULL, NULL);
}

TEST(param_update_after_flush_is_seen) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m = NULL;
  sheaf_param W;
  sheaf_graph *g = NULL;
  float *d = w_setup(ctx, &m, &W, &g);
  REQUIRE(d);
  float w1[6] = {1, 2, 3, 4, 5, 6};
  for (int i = 0; i < 6; i++) d[i] = w1[i];
  CHECK(check_xW(ctx, g, W, w1)); /* packed here */
  /* a training step: write through the same pointer after the flush, then say so */
  float w2[6] = {-1, 0.5f, 2, -3, 0.25f, 4};
  for (int i = 0; i < 6; i++) d[i] = w2[i];
  CHECK_OK(ctx, sheaf_model_param_update(m, W));
  CHECK(check_xW(ctx, g, W, w2));
  /* a copy in */
  float w3[6] = {0.5f, -0.5f, 1, 1, -2, 3};
  CHECK_OK(ctx, sheaf_model_param_set(m, W, w3, 6));
  CHECK(check_xW(ctx, g, W, w3));
  CHECK_STATUS(ctx, sheaf_model_param_set(m, W, w3, 5), SHEAF_ERR_SHAPE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "'W' has 6 values, got 5");
  CHECK_STATUS(ctx, sheaf_model_param_set(m, W, NULL, 6), SHEAF_ERR_INVALID_ARG);
  CHECK_STATUS(ctx, sheaf_model_param_update(m, (sheaf_param){0}), SHEAF_ERR_INVALID_ARG);
  CHECK_STATUS(ctx, sheaf_model_param_update(NULL, W), SHEAF_ERR_INVALID_ARG);
  sheaf_graph_free(g);
  sheaf_model_free(m);
}

/* Reading through sheaf_model_param_values does not mark the parameter
 * changed: a write made through sheaf_model_param_data's pointer after the
 * flush and not announced stays unseen (the graph keeps its packed copy),
 * and is seen once sheaf_model_param_update says so. */
TEST(param_values_reads_without_repacking) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m = NULL;
  sheaf_param W;
  sheaf_graph *g = NULL;
  float *d = w_setup(ctx, &m, &W, &g);
  REQUIRE(d);
  float w1[6] = {1, 2, 3, 4, 5, 6}, w2[6] = {-1, 0.5f, 2, -3, 0.25f, 4};
  for (int i = 0; i < 6; i++) d[i] = w1[i];
  CHECK(check_xW(ctx, g, W, w1)); /* packed here */
  for (int i = 0; i < 6; i++) d[i] = w2[i]; /* not announced */
  int rank = 0;
  const int64_t *sh = NULL;
  const float *v = sheaf_model_param_values(m, W, &rank, &sh);
  REQUIRE(v == d);
  CHECK(rank == 2 && sh && sh[0] == 3 && sh[1] == 2);
  CHECK(v[0] == -1 && v[5] == 4);
  CHECK(check_xW(ctx, g, W, w1)); /* still the packed copy of w1 */
  CHECK_OK(ctx, sheaf_model_param_update(m, W));
  CHECK(check_xW(ctx, g, W, w2));
  CHECK(sheaf_model_param_values(m, (sheaf_param){0}, NULL, NULL) == NULL);
  CHECK(sheaf_model_param_values(NULL, W, NULL, NULL) == NULL);
  sheaf_graph_free(g);
  sheaf_model_free(m);
}
