/*
 * test_tensor.c — dense tensors: creation, wrapping and lifetime, views
 * (slice, select, permute, reshape) sharing storage, contiguous copies, and
 * the errors of each call.
 */
#include "harness.h"
#include "tensor/tensor.h"

static float *fdata(const sheaf_tensor *t) { return sheaf_tensor_data(t); }

/* Element at a multi-index of any view. */
static float at(const sheaf_tensor *t, const int64_t *idx) {
  const int64_t *st = sheaf_tensor_strides(t);
  int64_t off = 0;
  for (int i = 0; i < sheaf_tensor_rank(t); i++) off += idx[i] * st[i];
  return fdata(t)[off];
}

/* A [2,3,4] tensor holding 0..23. */
static sheaf_tensor *iota234(sheaf_ctx *ctx) {
  int64_t shape[3] = {2, 3, 4};
  sheaf_tensor *t = NULL;
  if (!CHECK_OK(ctx, sheaf_tensor_create(ctx, SHEAF_F32, 3, shape, &t))) return NULL;
  for (int i = 0; i < 24; i++) fdata(t)[i] = (float)i;
  return t;
}

TEST(tensor_create_zeroed_aligned_contiguous) {
  sheaf_ctx *ctx = th_ctx();
  int64_t shape[2] = {3, 5};
  sheaf_tensor *t;
  REQUIRE_OK(ctx, sheaf_tensor_create(ctx, SHEAF_F32, 2, shape, &t));
  CHECK_EQ_INT(sheaf_tensor_rank(t), 2);
  CHECK_EQ_INT(sheaf_tensor_numel(t), 15);
  CHECK_EQ_INT(sheaf_tensor_strides(t)[0], 5);
  CHECK_EQ_INT(sheaf_tensor_strides(t)[1], 1);
  CHECK_EQ_INT((uintptr_t)sheaf_tensor_data(t) % 64, 0);
  CHECK(sheaf_tensor_is_contiguous(t));
  float s = 0;
  for (int i = 0; i < 15; i++) s += fdata(t)[i];
  CHECK_EQ_INT(s, 0);
  CHECK_EQ_INT(sheaf_tensor_dtype(t), SHEAF_F32);
  sheaf_tensor_free(t);
}

TEST(tensor_scalar_high_rank_and_empty) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_tensor *t;
  REQUIRE_OK(ctx, sheaf_tensor_create(ctx, SHEAF_I32, 0, NULL, &t));
  CHECK_EQ_INT(sheaf_tensor_numel(t), 1);
  *(int32_t *)sheaf_tensor_data(t) = 42;
  sheaf_tensor_free(t);
  int64_t shape[12];
  for (int i = 0; i < 12; i++) shape[i] = 2;
  REQUIRE_OK(ctx, sheaf_tensor_create(ctx, SHEAF_F32, 12, shape, &t));
  CHECK_EQ_INT(sheaf_tensor_numel(t), 4096);
  CHECK_EQ_INT(sheaf_tensor_strides(t)[0], 2048);
  sheaf_tensor_free(t);
  int64_t empty[2] = {0, 7};
  REQUIRE_OK(ctx, sheaf_tensor_create(ctx, SHEAF_F32, 2, empty, &t));
  CHECK_EQ_INT(sheaf_tensor_numel(t), 0);
  CHECK(sheaf_tensor_is_contiguous(t));
  sheaf_tensor_free(t);
}

TEST(tensor_create_rejects_bad_arguments) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_tensor *t = (sheaf_tensor *)ctx;
  int64_t neg[2] = {3, -1};
  CHECK_EQ_INT(sheaf_tensor_create(ctx, SHEAF_F32, 2, neg, &t), SHEAF_ERR_SHAPE);
  CHECK(t == NULL);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "shape [3, -1]");
  int64_t huge[2] = {INT64_MAX / 2, 4};
  CHECK_EQ_INT(sheaf_tensor_create(ctx, SHEAF_F32, 2, huge, &t), SHEAF_ERR_SHAPE);
  int64_t big[2] = {INT64_MAX / 8, 4}; /* numel fits, bytes do not */
  CHECK_EQ_INT(sheaf_tensor_create(ctx, SHEAF_F32, 2, big, &t), SHEAF_ERR_NOMEM);
  CHECK_EQ_INT(sheaf_tensor_create(ctx, (sheaf_dtype)99, 0, NULL, &t), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "unknown dtype 99");
  CHECK_EQ_INT(sheaf_tensor_create(ctx, SHEAF_F32, -1, NULL, &t), SHEAF_ERR_INVALID_ARG);
  CHECK_EQ_INT(sheaf_tensor_create(ctx, SHEAF_F32, 2, NULL, &t), SHEAF_ERR_INVALID_ARG);
  CHECK_EQ_INT(sheaf_tensor_create(ctx, SHEAF_F32, 0, NULL, NULL), SHEAF_ERR_INVALID_ARG);
}

TEST(tensor_create_survives_allocation_failures) {
  sheaf_ctx *ctx = th_ctx();
  int64_t shape[1] = {10};
  for (long n = 1; n <= 3; n++) {
    sheaf_tensor *t = NULL;
    th_fail_alloc_at(n);
    CHECK_EQ_INT(sheaf_tensor_create(ctx, SHEAF_F32, 1, shape, &t), SHEAF_ERR_NOMEM);
    th_fail_alloc_at(0);
    CHECK(t == NULL);
  }
}

TEST(tensor_slice_select_are_views) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_tensor *t = iota234(ctx), *s, *row, *neg;
  REQUIRE(t);
  REQUIRE_OK(ctx, sheaf_tensor_slice(ctx, t, 2, 1, 4, 2, &s)); /* [:, :, 1:4:2] */
  CHECK_EQ_INT(sheaf_tensor_shape(s)[2], 2);
  CHECK_EQ_INT(sheaf_tensor_strides(s)[2], 2);
  CHECK(!sheaf_tensor_is_contiguous(s));
  int64_t i1[3] = {1, 2, 1};
  CHECK_EQ_INT(at(s, i1), 1 * 12 + 2 * 4 + 3);
  REQUIRE_OK(ctx, sheaf_tensor_select(ctx, t, 1, -1, &row)); /* [:, 2, :] */
  CHECK_EQ_INT(sheaf_tensor_rank(row), 2);
  int64_t i2[2] = {1, 3};
  CHECK_EQ_INT(at(row, i2), 12 + 8 + 3);
  fdata(t)[12 + 8 + 3] = -5; /* writes through the base are seen by views */
  CHECK_EQ_INT(at(row, i2), -5);
  REQUIRE_OK(ctx, sheaf_tensor_slice(ctx, t, 0, -1, 100, 1, &neg)); /* clamped */
  CHECK_EQ_INT(sheaf_tensor_shape(neg)[0], 1);
  CHECK_EQ_INT(fdata(neg)[0], 12);
  sheaf_tensor_free(t); /* views keep the storage alive */
  CHECK_EQ_INT(at(row, i2), -5);
  sheaf_tensor_free(s);
  sheaf_tensor_free(row);
  sheaf_tensor_free(neg);
}

TEST(tensor_empty_slice_and_view_errors) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_tensor *t = iota234(ctx), *v = NULL;
  REQUIRE(t);
  REQUIRE_OK(ctx, sheaf_tensor_slice(ctx, t, 1, 2, 1, 1, &v));
  CHECK_EQ_INT(sheaf_tensor_shape(v)[1], 0);
  CHECK_EQ_INT(sheaf_tensor_numel(v), 0);
  sheaf_tensor_free(v);
  CHECK_EQ_INT(sheaf_tensor_slice(ctx, t, 3, 0, 1, 1, &v), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "axis 3 out of range for rank 3");
  CHECK_EQ_INT(sheaf_tensor_slice(ctx, t, 0, 0, 1, 0, &v), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "step 0");
  CHECK_EQ_INT(sheaf_tensor_select(ctx, t, 0, 2, &v), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "index 2 out of range");
  CHECK_EQ_INT(sheaf_tensor_select(ctx, NULL, 0, 0, &v), SHEAF_ERR_INVALID_ARG);
  int bad[3] = {0, 0, 1};
  CHECK_EQ_INT(sheaf_tensor_permute(ctx, t, bad, &v), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "repeated");
  CHECK(v == NULL);
  sheaf_tensor_free(t);
}

TEST(tensor_permute_and_contiguous_copy) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_tensor *t = iota234(ctx), *p, *c;
  REQUIRE(t);
  int perm[3] = {2, 0, 1};
  REQUIRE_OK(ctx, sheaf_tensor_permute(ctx, t, perm, &p));
  CHECK_EQ_INT(sheaf_tensor_shape(p)[0], 4);
  CHECK_EQ_INT(sheaf_tensor_shape(p)[1], 2);
  CHECK_EQ_INT(sheaf_tensor_shape(p)[2], 3);
  CHECK(!sheaf_tensor_is_contiguous(p));
  REQUIRE_OK(ctx, sheaf_tensor_contiguous(ctx, p, &c));
  CHECK(sheaf_tensor_is_contiguous(c));
  int bad = 0;
  for (int64_t a = 0; a < 4; a++)
    for (int64_t b = 0; b < 2; b++)
      for (int64_t k = 0; k < 3; k++) {
        int64_t idx[3] = {a, b, k};
        if (fdata(c)[(a * 2 + b) * 3 + k] != at(p, idx)) bad++;
        if (at(p, idx) != (float)(b * 12 + k * 4 + a)) bad++;
      }
  CHECK_EQ_INT(bad, 0);
  sheaf_tensor_free(t);
  sheaf_tensor_free(p);
  sheaf_tensor_free(c);
}

TEST(tensor_reshape_views_and_refusals) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_tensor *t = iota234(ctx), *r, *s, *r2, *p, *bad = NULL;
  REQUIRE(t);
  int64_t flat[2] = {6, -1};
  REQUIRE_OK(ctx, sheaf_tensor_reshape(ctx, t, 2, flat, &r));
  CHECK_EQ_INT(sheaf_tensor_shape(r)[1], 4);
  CHECK(sheaf_tensor_data(r) == sheaf_tensor_data(t));
  /* a slice along the outer axis stays viewable: [2,3,2] of [:, :, 0:2] -> [6, 2] */
  REQUIRE_OK(ctx, sheaf_tensor_slice(ctx, t, 2, 0, 2, 1, &s));
  int64_t six2[2] = {6, 2};
  REQUIRE_OK(ctx, sheaf_tensor_reshape(ctx, s, 2, six2, &r2));
  int64_t idx[2] = {4, 1};
  CHECK_EQ_INT(at(r2, idx), 1 * 12 + 1 * 4 + 1);
  /* but flattening it entirely needs a copy */
  int64_t twelve[1] = {12};
  CHECK_EQ_INT(sheaf_tensor_reshape(ctx, s, 1, twelve, &bad), SHEAF_ERR_SHAPE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "without a copy");
  int perm[3] = {1, 0, 2};
  REQUIRE_OK(ctx, sheaf_tensor_permute(ctx, t, perm, &p));
  int64_t with_ones[5] = {3, 1, 2, 4, 1}; /* splits/ones around a permuted layout */
  sheaf_tensor *po;
  REQUIRE_OK(ctx, sheaf_tensor_reshape(ctx, p, 5, with_ones, &po));
  int64_t i5[5] = {2, 0, 1, 3, 0};
  CHECK_EQ_INT(at(po, i5), 12 + 8 + 3);
  sheaf_tensor_free(po);
  int64_t wrong[2] = {5, 5};
  CHECK_EQ_INT(sheaf_tensor_reshape(ctx, t, 2, wrong, &bad), SHEAF_ERR_SHAPE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "cannot view [2, 3, 4] (24 elements) as [5, 5]");
  int64_t two_infer[2] = {-1, -1};
  CHECK_EQ_INT(sheaf_tensor_reshape(ctx, t, 2, two_infer, &bad), SHEAF_ERR_SHAPE);
  int64_t noninf[2] = {5, -1};
  CHECK_EQ_INT(sheaf_tensor_reshape(ctx, t, 2, noninf, &bad), SHEAF_ERR_SHAPE);
  CHECK(bad == NULL);
  sheaf_tensor_free(t);
  sheaf_tensor_free(r);
  sheaf_tensor_free(s);
  sheaf_tensor_free(r2);
  sheaf_tensor_free(p);
}

static int g_released;
static void on_release(void *user, void *data) {
  g_released++;
  CHECK(user == (void *)&g_released);
  CHECK(data != NULL);
}

TEST(tensor_wrap_releases_after_last_view) {
  sheaf_ctx *ctx = th_ctx();
  static float buf[6] = {1, 2, 3, 4, 5, 6};
  int64_t shape[2] = {3, 2};
  int64_t strides[2] = {1, 3}; /* column-major */
  sheaf_tensor *t, *v;
  g_released = 0;
  REQUIRE_OK(ctx, sheaf_tensor_wrap(ctx, SHEAF_F32, 2, shape, strides, buf, on_release,
                                    &g_released, &t));
  CHECK(!sheaf_tensor_is_contiguous(t));
  int64_t idx[2] = {2, 1};
  CHECK_EQ_INT(at(t, idx), 6);
  REQUIRE_OK(ctx, sheaf_tensor_select(ctx, t, 1, 1, &v));
  sheaf_tensor_free(t);
  CHECK_EQ_INT(g_released, 0);
  CHECK_EQ_INT(fdata(v)[0], 4);
  sheaf_tensor_free(v);
  CHECK_EQ_INT(g_released, 1);
  int64_t negs[2] = {-1, 1};
  CHECK_EQ_INT(sheaf_tensor_wrap(ctx, SHEAF_F32, 2, shape, negs, buf, NULL, NULL, &t),
               SHEAF_ERR_INVALID_ARG);
  CHECK_EQ_INT(sheaf_tensor_wrap(ctx, SHEAF_F32, 2, shape, NULL, NULL, NULL, NULL, &t),
               SHEAF_ERR_INVALID_ARG);
}

TEST(tensor_dtype_table) {
  CHECK_EQ_SIZE(sheaf_dtype_size(SHEAF_F32), 4);
  CHECK_EQ_SIZE(sheaf_dtype_size(SHEAF_BF16), 2);
  CHECK_EQ_SIZE(sheaf_dtype_size(SHEAF_U64), 8);
  CHECK_EQ_SIZE(sheaf_dtype_size(SHEAF_F8_E5M2), 1);
  for (int d = 0; d < SHEAF_DTYPE_COUNT; d++) {
    CHECK(sheaf_dtype_size((sheaf_dtype)d) > 0);
    CHECK(strcmp(sheaf_dtype_name((sheaf_dtype)d), "?") != 0);
  }
  CHECK_EQ_STR(sheaf_dtype_name(SHEAF_BOOL), "BOOL");
}

TEST(tensor_wrap_failure_never_calls_release) {
  sheaf_ctx *ctx = th_ctx();
  static float buf[4];
  int64_t shape[1] = {4};
  for (long n = 1; n <= 2; n++) { /* storage, then layout allocation fails */
    sheaf_tensor *t = NULL;
    g_released = 0;
    th_fail_alloc_at(n);
    CHECK_EQ_INT(sheaf_tensor_wrap(ctx, SHEAF_F32, 1, shape, NULL, buf, on_release,
                                   &g_released, &t),
                 SHEAF_ERR_NOMEM);
    th_fail_alloc_at(0);
    CHECK(t == NULL);
    CHECK_EQ_INT(g_released, 0);
  }
}

TEST(tensor_view_allocation_failure_keeps_base_intact) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_tensor *t = iota234(ctx), *v = NULL;
  REQUIRE(t);
  th_fail_alloc_at(1);
  CHECK_EQ_INT(sheaf_tensor_select(ctx, t, 0, 1, &v), SHEAF_ERR_NOMEM);
  th_fail_alloc_at(0);
  CHECK(v == NULL);
  CHECK_EQ_INT(fdata(t)[23], 23); /* storage still alive and owned by t */
  sheaf_tensor_free(t);
}
