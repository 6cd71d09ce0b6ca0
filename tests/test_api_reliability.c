/*
 * test_api_reliability.c — the C API under hostile use (issues 19 and 20):
 * stale and foreign expression handles after 100,000 graphs and after
 * resets; builders given NULL arrays name the NULL argument; n-ary
 * builders past a node's 16-bit input count (sum_n and concat work, stack
 * says why not); a 200,000-deep concat chain (and slice and reshape
 * chains) read by an affine; a runner with batch = INT64_MAX; tensor
 * slices and views at the int64 limits; ragged tiles that overflow; a
 * sweep of NULL arguments over the public functions; and trace paths that
 * cannot be written, refused when the graph or runner is created.
 */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ------------------------------------------------------- stale handles */

TEST(api_rel_foreign_handle_after_100000_graphs) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  sheaf_graph *g0;
  REQUIRE_OK(ctx, sheaf_graph_create(m, NULL, &g0));
  float x[2] = {0.5f, 1.0f};
  sheaf_expr h = sheaf_tanh(g0, sheaf_input_vector(g0, 2, x));
  sheaf_value_view v;
  REQUIRE_OK(ctx, sheaf_value(g0, h, &v));
  CHECK_NEAR(v.data[1], tanh(1.0), 1e-6);
  long accepted = 0, unclear = 0;
  for (int i = 1; i <= 100000; i++) {
    sheaf_graph *g;
    if (!CHECK_OK(ctx, sheaf_graph_create(m, NULL, &g))) break;
    /* the later graph has a node 0 of the same depth: only the tag tells */
    sheaf_expr own = sheaf_tanh(g, sheaf_input_vector(g, 2, x));
    CHECK(!sheaf_expr_is_null(own));
    sheaf_status st = sheaf_value(g, h, &v);
    if (st != SHEAF_ERR_INVALID_ARG) accepted++;
    else if (!strstr(sheaf_ctx_last_error(ctx), "belongs to another graph")) unclear++;
    if (i % 997 == 0) { /* a builder refuses it too */
      CHECK(sheaf_expr_is_null(sheaf_add(g, own, h)));
      CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_add: argument 2 belongs to another graph");
    }
    sheaf_graph_free(g);
  }
  CHECK_EQ_INT(accepted, 0);
  CHECK_EQ_INT(unclear, 0);
  /* the first graph still reads it */
  CHECK_OK(ctx, sheaf_value(g0, h, &v));
  sheaf_graph_free(g0);
  sheaf_model_free(m);
}

TEST(api_rel_stale_handle_after_reset) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  sheaf_graph *g;
  REQUIRE_OK(ctx, sheaf_graph_create(m, NULL, &g));
  float x[2] = {0.5f, 1.0f};
  sheaf_expr old = sheaf_tanh(g, sheaf_input_vector(g, 2, x));
  sheaf_value_view v;
  REQUIRE_OK(ctx, sheaf_value(g, old, &v));
  /* after each of 70,000 resets (more than 2^16) the same node exists again */
  long accepted = 0;
  for (int i = 0; i < 70000; i++) {
    CHECK_OK(ctx, sheaf_graph_reset(g));
    sheaf_expr e = sheaf_tanh(g, sheaf_input_vector(g, 2, x));
    CHECK(e.node == old.node && e.depth == old.depth);
    if (sheaf_value(g, old, &v) != SHEAF_ERR_INVALID_ARG) accepted++;
  }
  CHECK_EQ_INT(accepted, 0);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_value: the expression was built before "
                                            "sheaf_graph_reset (a stale handle)");
  CHECK(sheaf_expr_is_null(sheaf_exp(g, old)));
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx),
                 "sheaf_exp: argument 1 was built before sheaf_graph_reset (a stale handle)");
  CHECK_EQ_INT(sheaf_expr_shape(g, old, NULL), 0);
  sheaf_graph_free(g);
  sheaf_model_free(m);
}

/* ----------------------------------------------------- NULL arrays */

TEST(api_rel_builder_null_pointer_messages) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  sheaf_param W = th_param(ctx, m, "W", 2, 3, 8), b = th_param(ctx, m, "b", 1, 8, 0);
  sheaf_graph *g;
  REQUIRE_OK(ctx, sheaf_graph_create(m, NULL, &g));
  float x[3] = {1, 2, 3};
  int64_t s3 = 3;
  sheaf_expr e, h, c;
  sheaf_param Ws[2] = {W, W};
#define NULL_CASE(call, msg)                                    \
  do {                                                          \
    CHECK_OK(ctx, sheaf_graph_reset(g));                        \
    e = sheaf_input_vector(g, 3, x);                            \
    sheaf_expr xs_[2] = {e, e};                                 \
    (void)xs_;                                                  \
    CHECK(sheaf_expr_is_null(call));                            \
    CHECK_EQ_INT(sheaf_graph_status(g), SHEAF_ERR_INVALID_ARG); \
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), msg);             \
  } while (0)
  NULL_CASE(sheaf_input(g, 1, NULL, x), "sheaf_input: shape is NULL");
  NULL_CASE(sheaf_input(g, 1, &s3, NULL), "sheaf_input: data is NULL");
  NULL_CASE(sheaf_input_vector(g, 3, NULL), "sheaf_input_vector: data is NULL");
  NULL_CASE(sheaf_zeros(g, 2, NULL), "sheaf_zeros: shape is NULL");
  NULL_CASE(sheaf_concat(g, 2, NULL), "sheaf_concat: xs is NULL");
  NULL_CASE(sheaf_stack(g, 2, NULL), "sheaf_stack: xs is NULL");
  NULL_CASE(sheaf_sum_n(g, 2, NULL), "sheaf_sum_n: xs is NULL");
  NULL_CASE(sheaf_affine_n(g, 2, NULL, xs_, b), "sheaf_affine_n: W is NULL");
  NULL_CASE(sheaf_affine_n(g, 2, Ws, NULL, b), "sheaf_affine_n: x is NULL");
  NULL_CASE(sheaf_affine_n(g, 1, Ws, NULL, b), "sheaf_affine: x is NULL");
  NULL_CASE(sheaf_reshape(g, e, 1, NULL), "sheaf_reshape: shape is NULL");
  /* the counts are still checked first where they are wrong */
  NULL_CASE(sheaf_concat(g, 0, NULL), "sheaf_concat: 0 inputs (at least 1)");
  NULL_CASE(sheaf_input(g, 3, NULL, x), "sheaf_input: rank 3 (1 or 2)");
#undef NULL_CASE
  CHECK_OK(ctx, sheaf_graph_reset(g));
  e = sheaf_input_vector(g, 3, x);
  CHECK_STATUS(ctx, sheaf_lstm_cell(g, W, b, e, (sheaf_expr){0, 0, 0}, NULL, &c),
               SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_lstm_cell: h is NULL");
  CHECK_OK(ctx, sheaf_graph_reset(g));
  e = sheaf_input_vector(g, 3, x);
  CHECK_STATUS(ctx, sheaf_lstm_cell(g, W, b, e, (sheaf_expr){0, 0, 0}, &h, NULL),
               SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_lstm_cell: c is NULL");
  sheaf_graph_free(g);
  sheaf_model_free(m);
}

/* ------------------------------------------------------ wide nodes */

TEST(api_rel_wide_sum_concat_stack) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  sheaf_graph *g;
  REQUIRE_OK(ctx, sheaf_graph_create(m, NULL, &g));
  enum { N = 99999 };
  sheaf_expr *xs = malloc(N * sizeof *xs);
  REQUIRE(xs);
  double want[2] = {0, 0};
  for (int i = 0; i < N; i++) {
    float v[2] = {(float)(i % 7) - 3.0f, (float)(i % 5) * 0.25f};
    want[0] += v[0];
    want[1] += v[1];
    xs[i] = sheaf_input_vector(g, 2, v);
  }
  sheaf_expr s = sheaf_sum_n(g, N, xs);
  REQUIRE(!sheaf_expr_is_null(s));
  TH_VALUE_CLOSE(g, s, want, 2, "sum_n of 99999", 0);
  /* concat of 99,999 values: more than a node's 65,535 inputs, grouped */
  sheaf_expr cc = sheaf_concat(g, N, xs);
  REQUIRE(!sheaf_expr_is_null(cc));
  int64_t shape[2];
  CHECK_EQ_INT(sheaf_expr_shape(g, cc, shape), 1);
  CHECK_EQ_INT(shape[0], 2 * N);
  sheaf_value_view v;
  REQUIRE_OK(ctx, sheaf_value(g, cc, &v));
  long bad = 0;
  for (int i = 0; i < N; i++)
    bad += v.data[2 * i] != (float)(i % 7) - 3.0f || v.data[2 * i + 1] != (float)(i % 5) * 0.25f;
  CHECK_EQ_INT(bad, 0);
  /* a slice inside the second group, and the sum of a wide concat's pieces */
  double w2[2] = {(70000 % 7) - 3.0, (70000 % 5) * 0.25};
  TH_VALUE_CLOSE(g, sheaf_slice(g, cc, 140000, 140002), w2, 2, "slice", 0);
  /* stack keeps the node limit and says why */
  CHECK(sheaf_expr_is_null(sheaf_stack(g, 70000, xs)));
  CHECK_EQ_INT(sheaf_graph_status(g), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx),
                 "sheaf_stack: 70000 inputs; at most 65535 (a node's input count is 16 bits)");
  free(xs);
  sheaf_graph_free(g);
  sheaf_model_free(m);
}

/* ---------------------------------------------------- deep view chains */

static void deep_chains(sheaf_policy policy) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  enum { D = 200000, O = 3 };
  sheaf_param W = th_param(ctx, m, "W", 2, D + 1, O), b = th_param(ctx, m, "b", 1, O, 0);
  const float *wd = sheaf_model_param_data(m, W, NULL, NULL);
  const float *bd = sheaf_model_param_data(m, b, NULL, NULL);
  sheaf_graph_opts go = {policy, 0, NULL};
  sheaf_graph *g;
  REQUIRE_OK(ctx, sheaf_graph_create(m, &go, &g));
  float x0 = 0.5f;
  sheaf_expr acc = sheaf_input_vector(g, 1, &x0);
  double want[O], *xv = malloc((D + 1) * sizeof *xv);
  REQUIRE(xv);
  xv[0] = x0;
  for (int i = 1; i <= D; i++) { /* acc = concat(acc, x): a chain D deep */
    float xi = (float)((i * 37) % 101) / 101.0f - 0.5f;
    xv[i] = xi;
    sheaf_expr pair[2] = {acc, sheaf_input_vector(g, 1, &xi)};
    acc = sheaf_concat(g, 2, pair);
  }
  sheaf_expr y = sheaf_affine(g, W, acc, b);
  REQUIRE(!sheaf_expr_is_null(y));
  for (int o = 0; o < O; o++) {
    want[o] = bd[o];
    for (int i = 0; i <= D; i++) want[o] += xv[i] * wd[(int64_t)i * O + o];
  }
  sheaf_value_view v;
  REQUIRE_OK(ctx, sheaf_value(g, y, &v));
  for (int o = 0; o < O; o++) CHECK_NEAR(v.data[o], want[o], 1e-3 * (1 + fabs(want[o])));
  /* the chain itself, and a slice of it, read */
  REQUIRE_OK(ctx, sheaf_value(g, acc, &v));
  CHECK_EQ_INT(v.shape[0], D + 1);
  long bad = 0;
  for (int i = 0; i <= D; i++) bad += v.data[i] != (float)xv[i];
  CHECK_EQ_INT(bad, 0);
  CHECK_OK(ctx, sheaf_graph_reset(g));
  /* a chain of D slices and one of D reshapes, read at the end */
  float *big = malloc((D + 1) * sizeof *big);
  REQUIRE(big);
  for (int i = 0; i <= D; i++) big[i] = (float)xv[i];
  sheaf_expr s = sheaf_input_vector(g, D + 1, big), r = s;
  for (int i = 0; i < D; i++) s = sheaf_slice(g, s, 1, D + 1 - i);
  int64_t sh1 = D + 1, sh2[2] = {1, D + 1};
  for (int i = 0; i < D; i++) r = i % 2 ? sheaf_reshape(g, r, 1, &sh1) : sheaf_reshape(g, r, 2, sh2);
  REQUIRE(!sheaf_expr_is_null(s) && !sheaf_expr_is_null(r));
  double last = xv[D];
  TH_VALUE_CLOSE(g, s, &last, 1, "slice chain", 0);
  REQUIRE_OK(ctx, sheaf_value(g, r, &v));
  CHECK_EQ_INT(v.data[D], big[D]);
  free(big);
  free(xv);
  sheaf_graph_free(g);
  sheaf_model_free(m);
}

TEST(api_rel_deep_concat_chain) { deep_chains(SHEAF_POLICY_SHEAF); }
TEST(api_rel_deep_concat_chain_depth_policy) { deep_chains(SHEAF_POLICY_DEPTH); }

/* ------------------------------------------------------------- runner */

typedef struct big_batch_run {
  sheaf_param W;
  int64_t first;
  int built[8], read[8];
  sheaf_expr out[8];
  float got[8];
} big_batch_run;

static sheaf_status bb_build(sheaf_graph *g, int64_t i, int worker, void *u) {
  big_batch_run *r = u;
  int k = (int)(i - r->first);
  r->built[k]++;
  float x[2] = {(float)k, 1.0f};
  r->out[k] = sheaf_affine(g, r->W, sheaf_input_vector(g, 2, x), SHEAF_NO_PARAM);
  return sheaf_graph_status(g);
}

static sheaf_status bb_read(sheaf_graph *g, int64_t i, int worker, void *u) {
  big_batch_run *r = u;
  int k = (int)(i - r->first);
  r->read[k]++;
  sheaf_value_view v;
  sheaf_status st = sheaf_value(g, r->out[k], &v);
  if (!st) r->got[k] = v.data[0];
  return st;
}

TEST(api_rel_runner_batch_int64_max) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  sheaf_param W;
  int64_t ws[2] = {2, 1};
  REQUIRE_OK(ctx, sheaf_model_param(m, "W", 2, ws, SHEAF_INIT_ONE, &W));
  int64_t firsts[3] = {0, 1000, INT64_MAX - 3};
  for (int p = SHEAF_PARALLEL_AUTO; p <= SHEAF_PARALLEL_KERNELS; p++) {
    sheaf_runner_opts o = {0};
    o.batch = INT64_MAX;
    o.parallel = (sheaf_parallel)p;
    sheaf_runner *r;
    REQUIRE_OK(ctx, sheaf_runner_create(m, &o, &r));
    /* one batch, however many instances */
    CHECK_EQ_INT(sheaf_runner_mode(r, INT64_MAX),
                 p == SHEAF_PARALLEL_AUTO ? SHEAF_PARALLEL_KERNELS : p);
    for (int f = 0; f < 3; f++) {
      big_batch_run run = {.W = W, .first = firsts[f]};
      CHECK_OK(ctx, sheaf_runner_run(r, firsts[f], 3, bb_build, bb_read, &run));
      for (int k = 0; k < 3; k++) {
        CHECK_EQ_INT(run.built[k], 1);
        CHECK_EQ_INT(run.read[k], 1);
        CHECK_NEAR(run.got[k], k + 1.0, 1e-6);
      }
    }
    /* past INT64_MAX: refused, nothing built */
    big_batch_run none = {.W = W, .first = 1000};
    CHECK_STATUS(ctx, sheaf_runner_run(r, 1000, INT64_MAX - 999, bb_build, NULL, &none),
                 SHEAF_ERR_INVALID_ARG);
    CHECK_EQ_INT(none.built[0], 0);
    sheaf_runner_free(r);
  }
  /* batches just below INT64_MAX: ceil(count / batch) without overflow */
  sheaf_runner_opts o = {0};
  o.batch = INT64_MAX - 1;
  o.parallel = SHEAF_PARALLEL_AUTO;
  sheaf_runner *r;
  REQUIRE_OK(ctx, sheaf_runner_create(m, &o, &r));
  CHECK_EQ_INT(sheaf_runner_mode(r, INT64_MAX), SHEAF_PARALLEL_KERNELS);
  big_batch_run run = {.W = W, .first = 5};
  CHECK_OK(ctx, sheaf_runner_run(r, 5, 3, bb_build, bb_read, &run));
  CHECK_EQ_INT(run.built[0] + run.built[1] + run.built[2], 3);
  CHECK_NEAR(run.got[2], 3.0, 1e-6);
  sheaf_runner_free(r);
  sheaf_model_free(m);
}

/* ------------------------------------------------------------ tensors */

TEST(api_rel_tensor_slice_int64_limits) {
  sheaf_ctx *ctx = th_ctx();
  int64_t n = 8;
  sheaf_tensor *t, *v;
  REQUIRE_OK(ctx, sheaf_tensor_create(ctx, SHEAF_F32, 1, &n, &t));
  float *d = sheaf_tensor_data(t);
  for (int i = 0; i < 8; i++) d[i] = (float)i;
  struct {
    int64_t start, stop, step, len, first;
  } cases[] = {
      {0, 8, INT64_MAX, 1, 0},           {INT64_MIN, INT64_MAX, 1, 8, 0},
      {INT64_MIN, INT64_MAX, INT64_MAX, 1, 0}, {-1, INT64_MAX, INT64_MAX, 1, 7},
      {0, INT64_MIN, 1, 0, -1},          {INT64_MAX, INT64_MIN, INT64_MAX, 0, -1},
      {INT64_MAX, INT64_MAX, 1, 0, -1},  {INT64_MIN, INT64_MIN, INT64_MAX, 0, -1},
      {1, 8, INT64_MAX - 1, 1, 1},       {1, 8, 3, 3, 1},
      {-3, INT64_MAX, 2, 2, 5},          {INT64_MIN + 1, -7, INT64_MAX, 1, 0},
  };
  for (size_t c = 0; c < LEN(cases); c++) {
    if (!CHECK_OK(ctx, sheaf_tensor_slice(ctx, t, 0, cases[c].start, cases[c].stop, cases[c].step,
                                          &v)))
      continue;
    if (!CHECK_EQ_INT(sheaf_tensor_shape(v)[0], cases[c].len))
      fprintf(stderr, "  case %zu\n", c);
    if (cases[c].len > 0) CHECK_EQ_INT(*(float *)sheaf_tensor_data(v), cases[c].first);
    if (cases[c].len > 1)
      CHECK_EQ_INT(((float *)sheaf_tensor_data(v))[sheaf_tensor_strides(v)[0]],
                   cases[c].first + cases[c].step);
    sheaf_tensor_free(v);
  }
  CHECK_STATUS(ctx, sheaf_tensor_slice(ctx, t, 0, 0, 8, INT64_MIN, &v), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "step -9223372036854775808 must be positive");
  CHECK_STATUS(ctx, sheaf_tensor_select(ctx, t, 0, INT64_MIN, &v), SHEAF_ERR_INVALID_ARG);
  CHECK_STATUS(ctx, sheaf_tensor_select(ctx, t, 0, INT64_MAX, &v), SHEAF_ERR_INVALID_ARG);
  CHECK_OK(ctx, sheaf_tensor_select(ctx, t, 0, -8, &v));
  CHECK_EQ_INT(*(float *)sheaf_tensor_data(v), 0);
  sheaf_tensor_free(v);
  sheaf_tensor_free(t);

  /* wrapped memory whose strides reach past int64: refused at wrap */
  float buf[4] = {0};
  int64_t s22[2] = {2, 2}, huge[2] = {INT64_MAX / 2, 1}, far[2] = {INT64_MAX / 4, 1};
  CHECK_STATUS(ctx, sheaf_tensor_wrap(ctx, SHEAF_F32, 2, s22, huge, buf, NULL, NULL, &t),
               SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "reaches past 2^63 bytes");
  CHECK_STATUS(ctx, sheaf_tensor_wrap(ctx, SHEAF_F32, 2, s22, far, buf, NULL, NULL, &t),
               SHEAF_ERR_INVALID_ARG);

  /* an empty tensor with huge extents: views and strides never overflow */
  int64_t e3[3] = {0, INT64_MAX, 4};
  REQUIRE_OK(ctx, sheaf_tensor_create(ctx, SHEAF_F32, 3, e3, &t));
  CHECK_EQ_INT(sheaf_tensor_numel(t), 0);
  CHECK_OK(ctx, sheaf_tensor_select(ctx, t, 1, INT64_MAX - 1, &v));
  sheaf_tensor_free(v);
  CHECK_OK(ctx, sheaf_tensor_slice(ctx, t, 1, 1, INT64_MAX, 3, &v));
  CHECK_EQ_INT(sheaf_tensor_shape(v)[1], (INT64_MAX - 2) / 3 + 1);
  sheaf_tensor_free(v);
  int64_t r3[3] = {INT64_MAX, 0, INT64_MAX};
  CHECK_OK(ctx, sheaf_tensor_reshape(ctx, t, 3, r3, &v));
  sheaf_tensor_free(v);
  CHECK_OK(ctx, sheaf_tensor_contiguous(ctx, t, &v));
  sheaf_tensor_free(v);
  sheaf_tensor_free(t);
}

TEST(api_rel_ragged_tile_overflow) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_ragged *r = NULL;
  int64_t lens[2] = {2, 3}, dims[2] = {SHEAF_RAGGED_DIM, 4};
  sheaf_ragged_opts o = {INT64_MAX, 0};
  CHECK_STATUS(ctx, sheaf_ragged_create(ctx, SHEAF_F32, 2, lens, 2, dims, &o, &r),
               SHEAF_ERR_NOMEM);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx),
                 "sheaf_ragged_create: the ragged layout's size overflows (storage_tile "
                 "9223372036854775807, bulk_tile 0)");
  CHECK(r == NULL);
  int64_t one = 1;
  CHECK_STATUS(ctx, sheaf_ragged_create(ctx, SHEAF_F32, 1, &one, 2, dims, &o, &r),
               SHEAF_ERR_NOMEM);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "overflows");
  int64_t lmax = INT64_MAX, d1 = SHEAF_RAGGED_DIM; /* the rounding itself overflows */
  sheaf_ragged_opts o2 = {2, 0};
  CHECK_STATUS(ctx, sheaf_ragged_create(ctx, SHEAF_U8, 1, &lmax, 1, &d1, &o2, &r), SHEAF_ERR_NOMEM);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "overflows (storage_tile 2");
  o.storage_tile = INT64_MAX - 1;
  CHECK_STATUS(ctx, sheaf_ragged_create(ctx, SHEAF_F32, 2, lens, 2, dims, &o, &r),
               SHEAF_ERR_NOMEM);
  /* a huge tile is fine when every length is 0 */
  int64_t zeros[3] = {0, 0, 0};
  o.storage_tile = INT64_MAX;
  o.bulk_tile = INT64_MAX;
  REQUIRE_OK(ctx, sheaf_ragged_create(ctx, SHEAF_F32, 3, zeros, 2, dims, &o, &r));
  CHECK_EQ_INT(sheaf_ragged_numel(r), 0);
  CHECK_EQ_INT(sheaf_ragged_nbytes(r), 0);
  sheaf_ragged_free(r);
  /* the bulk tile's rounding of the total */
  o.storage_tile = 0;
  CHECK_STATUS(ctx, sheaf_ragged_create(ctx, SHEAF_F32, 2, lens, 2, dims, &o, &r),
               SHEAF_ERR_NOMEM);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "bulk_tile 9223372036854775807");
  /* a dense row past int64 */
  int64_t wide[3] = {SHEAF_RAGGED_DIM, (int64_t)1 << 40, (int64_t)1 << 40};
  CHECK_STATUS(ctx, sheaf_ragged_create(ctx, SHEAF_F32, 2, lens, 3, wide, NULL, &r),
               SHEAF_ERR_NOMEM);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "the size of the row");
  /* a moderate tile still works */
  o.storage_tile = 4;
  o.bulk_tile = 0;
  REQUIRE_OK(ctx, sheaf_ragged_create(ctx, SHEAF_F32, 2, lens, 2, dims, &o, &r));
  CHECK_EQ_INT(sheaf_ragged_offsets(r)[1], 16);
  sheaf_ragged_free(r);
}

/* ------------------------------------------------------- NULL sweep */

TEST(api_rel_null_sweep) {
  sheaf_ctx *ctx = th_ctx();
  int64_t s2[2] = {2, 2};
  sheaf_tensor *t = NULL;
  /* queries: 0, NULL or SHEAF_DTYPE_COUNT */
  CHECK_EQ_INT(sheaf_tensor_dtype(NULL), SHEAF_DTYPE_COUNT);
  CHECK_EQ_INT(sheaf_tensor_rank(NULL), 0);
  CHECK(sheaf_tensor_shape(NULL) == NULL);
  CHECK(sheaf_tensor_strides(NULL) == NULL);
  CHECK_EQ_INT(sheaf_tensor_numel(NULL), 0);
  CHECK_EQ_INT(sheaf_tensor_is_contiguous(NULL), 0);
  CHECK(sheaf_tensor_data(NULL) == NULL);
  CHECK_EQ_INT(sheaf_ragged_dtype(NULL), SHEAF_DTYPE_COUNT);
  CHECK_EQ_INT(sheaf_ragged_batch(NULL), 0);
  CHECK_EQ_INT(sheaf_ragged_rank(NULL), 0);
  CHECK(sheaf_ragged_dims(NULL) == NULL);
  CHECK(sheaf_ragged_lens(NULL) == NULL);
  CHECK_EQ_INT(sheaf_ragged_max_len(NULL), 0);
  CHECK(sheaf_ragged_offsets(NULL) == NULL);
  CHECK_EQ_INT(sheaf_ragged_numel(NULL), 0);
  CHECK_EQ_INT(sheaf_ragged_nbytes(NULL), 0);
  CHECK(sheaf_ragged_data(NULL) == NULL);
  CHECK_EQ_INT(sheaf_ragged_offset(NULL, 0, s2), -1);
  sheaf_encoder_config cfg;
  memset(&cfg, 0xff, sizeof cfg);
  sheaf_encoder_get_config(NULL, &cfg);
  CHECK_EQ_INT(cfg.d_model, 0);
  sheaf_encoder_get_config(NULL, NULL);
  CHECK_EQ_INT(sheaf_st_count(NULL), 0);
  CHECK(sheaf_st_name(NULL, 0) == NULL);
  CHECK_EQ_INT(sheaf_st_find(NULL, "x"), -1);
  CHECK(sheaf_model_ctx(NULL) == NULL);
  CHECK_EQ_INT(sheaf_model_param_count(NULL), 0);
  CHECK(sheaf_model_param_data(NULL, SHEAF_NO_PARAM, NULL, NULL) == NULL);
  CHECK(sheaf_model_param_name(NULL, SHEAF_NO_PARAM) == NULL);
  CHECK_EQ_INT(sheaf_ctx_threads(NULL), 0);
  CHECK_EQ_STR(sheaf_ctx_last_error(NULL), "");
  int64_t shp[2] = {7, 7};
  CHECK_EQ_INT(sheaf_expr_shape(NULL, (sheaf_expr){0, 0, 0}, shp), 0);
  CHECK_EQ_INT(sheaf_graph_kernel_stats(NULL, 4, NULL, NULL, NULL), 0);
  CHECK_EQ_INT(sheaf_runner_kernel_stats(NULL, 4, NULL, NULL, NULL), 0);
  CHECK_EQ_INT(sheaf_runner_mode(NULL, 10), SHEAF_PARALLEL_KERNELS);
  sheaf_graph_stats gs;
  sheaf_graph_get_stats(NULL, &gs);
  CHECK_EQ_INT(gs.nodes, 0);
  sheaf_graph_get_stats(NULL, NULL);
  sheaf_runner_get_stats(NULL, &gs);
  sheaf_runner_get_stats(NULL, NULL);
  sheaf_graph_phase(NULL, 1);
  /* frees */
  sheaf_tensor_free(NULL);
  sheaf_ragged_free(NULL);
  sheaf_encoder_free(NULL);
  sheaf_st_close(NULL);
  sheaf_model_free(NULL);
  sheaf_graph_free(NULL);
  sheaf_runner_free(NULL);
  sheaf_program_free(NULL);
  sheaf_ctx_free(NULL);
  sheaf_ctx_clear_error(NULL);
  /* fallible calls: SHEAF_ERR_INVALID_ARG, with a message when a context is at hand */
  sheaf_status E = SHEAF_ERR_INVALID_ARG;
#define NULL_ERR(call, msg)                                     \
  do {                                                          \
    sheaf_ctx_clear_error(ctx);                                 \
    CHECK_STATUS(ctx, call, E);                                 \
    if (msg[0]) CHECK_CONTAINS(sheaf_ctx_last_error(ctx), msg); \
  } while (0)
  t = (sheaf_tensor *)s2; /* out is set to NULL even without a context */
  NULL_ERR(sheaf_tensor_create(NULL, SHEAF_F32, 2, s2, &t), "");
  CHECK(t == NULL);
  NULL_ERR(sheaf_tensor_create(ctx, SHEAF_F32, 2, NULL, &t), "sheaf_tensor_create: shape is NULL");
  NULL_ERR(sheaf_tensor_create(ctx, SHEAF_F32, 2, s2, NULL), "sheaf_tensor_create: out is NULL");
  NULL_ERR(sheaf_tensor_wrap(ctx, SHEAF_F32, 2, s2, NULL, NULL, NULL, NULL, &t),
           "sheaf_tensor_wrap: data is NULL");
  NULL_ERR(sheaf_tensor_slice(ctx, NULL, 0, 0, 1, 1, &t), "sheaf_tensor_slice: tensor is NULL");
  t = (sheaf_tensor *)s2;
  NULL_ERR(sheaf_tensor_slice(NULL, NULL, 0, 0, 1, 1, &t), "");
  CHECK(t == NULL);
  NULL_ERR(sheaf_tensor_select(ctx, NULL, 0, 0, &t), "tensor is NULL");
  NULL_ERR(sheaf_tensor_permute(ctx, NULL, NULL, &t), "tensor is NULL");
  NULL_ERR(sheaf_tensor_reshape(ctx, NULL, 1, s2, &t), "tensor is NULL");
  NULL_ERR(sheaf_tensor_contiguous(ctx, NULL, &t), "tensor is NULL");
  NULL_ERR(sheaf_tensor_contiguous(ctx, NULL, NULL), "out is NULL");
  NULL_ERR(sheaf_st_open(ctx, NULL, NULL), "out is NULL");
  NULL_ERR(sheaf_st_tensor(ctx, NULL, "x", &t), "file is NULL");
  NULL_ERR(sheaf_st_write(ctx, NULL, 0, NULL, NULL, 0, NULL), "path is NULL");
  NULL_ERR(sheaf_ragged_create(ctx, SHEAF_F32, 2, NULL, 1, s2, NULL, NULL), "out is NULL");
  sheaf_ragged *r;
  NULL_ERR(sheaf_ragged_create(ctx, SHEAF_F32, 2, NULL, 1, s2, NULL, &r), "lens is NULL");
  NULL_ERR(sheaf_ragged_from_padded(ctx, NULL, NULL, NULL, NULL, &r), "padded is NULL");
  NULL_ERR(sheaf_ragged_to_padded(ctx, NULL, 0, 0.0, &t), "r is NULL");
  NULL_ERR(sheaf_ragged_seq(ctx, NULL, 0, &t), "r is NULL");
  NULL_ERR(sheaf_ragged_flat(ctx, NULL, &t), "r is NULL");
  sheaf_encoder *enc;
  NULL_ERR(sheaf_encoder_load(ctx, NULL, NULL, &enc), "weights is NULL");
  NULL_ERR(sheaf_encoder_forward(NULL, NULL, NULL), "");
  NULL_ERR(sheaf_encoder_forward_into(NULL, NULL, NULL), "");
  NULL_ERR(sheaf_model_create(NULL, NULL), "");
  NULL_ERR(sheaf_model_create(ctx, NULL), "sheaf_model_create: out is NULL");
  sheaf_param p;
  NULL_ERR(sheaf_model_param(NULL, "W", 1, s2, SHEAF_INIT_ZERO, &p), "");
  NULL_ERR(sheaf_model_seed(NULL, 1), "");
  NULL_ERR(sheaf_model_load(NULL, "x"), "");
  NULL_ERR(sheaf_model_save(NULL, "x"), "");
  NULL_ERR(sheaf_model_find(NULL, "x", &p), "");
  NULL_ERR(sheaf_policy_parse(ctx, NULL, NULL), "sheaf_policy_parse: name is NULL");
  sheaf_program *prog;
  NULL_ERR(sheaf_program_load(ctx, NULL, NULL, &prog), "sheaf_program_load: path is NULL");
  NULL_ERR(sheaf_program_load(ctx, "x.sf", NULL, NULL), "sheaf_program_load: out is NULL");
  NULL_ERR(sheaf_program_run_words(NULL, 0, NULL, NULL), "");
  CHECK(sheaf_program_model(NULL) == NULL);
  CHECK_EQ_INT(sheaf_program_outputs(NULL, 0, 0, NULL), 0);
  sheaf_ctx *c2 = (sheaf_ctx *)1;
  char eb[64];
  CHECK_EQ_INT(sheaf_ctx_create(NULL, NULL, eb, sizeof eb), SHEAF_ERR_INVALID_ARG);
  CHECK_EQ_STR(eb, "sheaf_ctx_create: out is NULL");
  (void)c2;
  sheaf_graph *g;
  sheaf_runner *rn;
  NULL_ERR(sheaf_graph_create(NULL, NULL, &g), "");
  NULL_ERR(sheaf_graph_flush(NULL), "");
  NULL_ERR(sheaf_graph_reset(NULL), "");
  NULL_ERR(sheaf_graph_fail(NULL, SHEAF_ERR_SHAPE, "x"), "");
  NULL_ERR(sheaf_graph_status(NULL), "");
  NULL_ERR(sheaf_graph_stats_reset(NULL), "");
  NULL_ERR(sheaf_graph_write_trace(NULL, "x"), "");
  sheaf_value_view vv;
  NULL_ERR(sheaf_value(NULL, (sheaf_expr){0, 0, 0}, &vv), "");
  sheaf_expr h, c;
  NULL_ERR(sheaf_lstm_cell(NULL, SHEAF_NO_PARAM, SHEAF_NO_PARAM, (sheaf_expr){0, 0, 0},
                           (sheaf_expr){0, 0, 0}, &h, &c),
           "");
  NULL_ERR(sheaf_runner_create(NULL, NULL, &rn), "");
  NULL_ERR(sheaf_runner_run(NULL, 0, 1, NULL, NULL, NULL), "");
  NULL_ERR(sheaf_runner_stats_reset(NULL), "");
#undef NULL_ERR
  /* builders on a NULL graph: null expressions */
  float x[2] = {1, 2};
  CHECK(sheaf_expr_is_null(sheaf_input(NULL, 1, s2, x)));
  CHECK(sheaf_expr_is_null(sheaf_input_vector(NULL, 2, x)));
  CHECK(sheaf_expr_is_null(sheaf_zeros(NULL, 1, s2)));
  CHECK(sheaf_expr_is_null(sheaf_parameter(NULL, SHEAF_NO_PARAM)));
  CHECK(sheaf_expr_is_null(sheaf_lookup(NULL, SHEAF_NO_PARAM, 0)));
  CHECK(sheaf_expr_is_null(sheaf_affine_n(NULL, 1, NULL, NULL, SHEAF_NO_PARAM)));
  CHECK(sheaf_expr_is_null(sheaf_sum_n(NULL, 2, NULL)));
  CHECK(sheaf_expr_is_null(sheaf_concat(NULL, 2, NULL)));
  CHECK(sheaf_expr_is_null(sheaf_stack(NULL, 2, NULL)));
  CHECK(sheaf_expr_is_null(sheaf_reshape(NULL, (sheaf_expr){0, 0, 0}, 1, NULL)));
  CHECK(sheaf_expr_is_null(sheaf_tanh(NULL, (sheaf_expr){0, 0, 0})));

  /* a model and graph: the out-parameter NULL cases name it */
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  CHECK_STATUS(ctx, sheaf_model_param(m, "W", 1, NULL, SHEAF_INIT_ZERO, &p), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "shape is NULL");
  CHECK_STATUS(ctx, sheaf_model_find(m, NULL, &p), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_model_find: name is NULL");
  CHECK_STATUS(ctx, sheaf_model_find(m, "W", NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_model_find: out is NULL");
  CHECK_STATUS(ctx, sheaf_model_load(m, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_model_load: path is NULL");
  CHECK_STATUS(ctx, sheaf_model_save(m, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_STATUS(ctx, sheaf_graph_create(m, NULL, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_graph_create: out is NULL");
  CHECK_STATUS(ctx, sheaf_runner_create(m, NULL, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_runner_create: out is NULL");
  REQUIRE_OK(ctx, sheaf_graph_create(m, NULL, &g));
  CHECK_STATUS(ctx, sheaf_value(g, sheaf_input_vector(g, 2, x), NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_value: out is NULL");
  CHECK_STATUS(ctx, sheaf_graph_write_trace(g, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_EQ_INT(sheaf_expr_shape(g, sheaf_input_vector(g, 2, x), NULL), 1);
  sheaf_graph_get_stats(g, NULL);
  CHECK_EQ_INT(sheaf_graph_kernel_stats(g, 0, NULL, NULL, NULL), 0);
  sheaf_graph_free(g);
  REQUIRE_OK(ctx, sheaf_runner_create(m, NULL, &rn));
  CHECK_STATUS(ctx, sheaf_runner_run(rn, 0, 1, NULL, NULL, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_runner_run: build is NULL");
  sheaf_runner_free(rn);
  sheaf_model_free(m);
}

/* ------------------------------------------------------------- traces */

TEST(api_rel_trace_path_checked_at_creation) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  char dir[512], file[512], under_file[600], good[512], missing[600];
  snprintf(dir, sizeof dir, "%s", th_tmp_path("trace_dir"));
  REQUIRE(mkdir(dir, 0755) == 0);
  snprintf(file, sizeof file, "%s", th_write_tmp("trace_plain", "x", 1));
  snprintf(under_file, sizeof under_file, "%s/t.json", file);
  snprintf(good, sizeof good, "%s", th_tmp_path("trace_ok.json"));
  snprintf(missing, sizeof missing, "%s/no-such-dir/t.json", dir);
  char slash[600];
  snprintf(slash, sizeof slash, "%s/new-dir/", dir);
  struct {
    const char *path, *reason;
  } bad[] = {{dir, "Is a directory"},
             {under_file, "Not a directory"},
             {missing, "No such file or directory"},
             {slash, "Is a directory"},
             {"", "trace_path is empty"}};
  for (size_t i = 0; i < LEN(bad); i++) {
    sheaf_graph *g = (sheaf_graph *)1;
    sheaf_graph_opts go = {SHEAF_POLICY_SHEAF, 0, bad[i].path};
    sheaf_status st = sheaf_graph_create(m, &go, &g);
    CHECK(st == SHEAF_ERR_IO || (st == SHEAF_ERR_INVALID_ARG && !bad[i].path[0]));
    CHECK(g == NULL);
    char want[700];
    snprintf(want, sizeof want, "sheaf_graph_create: cannot write the trace to '%s': %s",
             bad[i].path, bad[i].reason);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), bad[i].path[0] ? want : bad[i].reason);
    sheaf_runner_opts ro = {0};
    ro.trace_path = bad[i].path;
    sheaf_runner *r = (sheaf_runner *)1;
    st = sheaf_runner_create(m, &ro, &r);
    CHECK(st == SHEAF_ERR_IO || (st == SHEAF_ERR_INVALID_ARG && !bad[i].path[0]));
    CHECK(r == NULL);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_runner_create: ");
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), bad[i].reason);
    CHECK_EQ_INT(access(bad[i].path, F_OK) == 0, i == 0 || i == 4 ? i == 0 : 0);
  }
  if (geteuid() != 0) { /* root may write anywhere */
    char ro_dir[512], in_ro[600];
    snprintf(ro_dir, sizeof ro_dir, "%s", th_tmp_path("trace_ro"));
    REQUIRE(mkdir(ro_dir, 0555) == 0);
    snprintf(in_ro, sizeof in_ro, "%s/t.json", ro_dir);
    sheaf_graph_opts go = {SHEAF_POLICY_SHEAF, 0, in_ro};
    sheaf_graph *g;
    CHECK_STATUS(ctx, sheaf_graph_create(m, &go, &g), SHEAF_ERR_IO);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "Permission denied");
  }
  /* a writable path: created on free (nothing written before) */
  sheaf_graph_opts go = {SHEAF_POLICY_SHEAF, 0, good};
  sheaf_graph *g;
  REQUIRE_OK(ctx, sheaf_graph_create(m, &go, &g));
  CHECK(access(good, F_OK) != 0);
  float x[2] = {1, 2};
  sheaf_value_view v;
  CHECK_OK(ctx, sheaf_value(g, sheaf_tanh(g, sheaf_input_vector(g, 2, x)), &v));
  sheaf_graph_free(g);
  CHECK(access(good, F_OK) == 0);
  /* an existing writable file and a device are fine too */
  REQUIRE_OK(ctx, sheaf_graph_create(m, &go, &g));
  sheaf_graph_free(g);
  sheaf_runner_opts ro = {0};
  ro.trace_path = "/dev/null";
  sheaf_runner *r;
  CHECK_OK(ctx, sheaf_runner_create(m, &ro, &r));
  sheaf_runner_free(r);
  sheaf_model_free(m);
}
