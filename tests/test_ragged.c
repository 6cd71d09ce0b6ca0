/*
 * test_ragged.c — the ragged tensor type: offsets from prefix sums, storage
 * and bulk padding, O(1) element offsets, conversion from and to padded
 * tensors, per-sequence views, zero-length sequences, argument errors and
 * allocation failures.
 */
#include "harness.h"
#include "ragged/ragged.h"

static float *fdata(const sheaf_tensor *t) { return sheaf_tensor_data(t); }

TEST(ragged_offsets_are_prefix_sums) {
  sheaf_ctx *ctx = th_ctx();
  int64_t lens[4] = {3, 0, 5, 1}, dims[2] = {SHEAF_RAGGED_DIM, 4};
  sheaf_ragged *r;
  REQUIRE_OK(ctx, sheaf_ragged_create(ctx, SHEAF_F32, 4, lens, 2, dims, NULL, &r));
  const int64_t *off = sheaf_ragged_offsets(r);
  int64_t expect[5] = {0, 12, 12, 32, 36};
  for (int i = 0; i < 5; i++) CHECK_EQ_INT(off[i], expect[i]);
  CHECK_EQ_INT(sheaf_ragged_numel(r), 36);
  CHECK_EQ_INT(sheaf_ragged_max_len(r), 5);
  CHECK_EQ_SIZE(sheaf_ragged_nbytes(r), 36 * 4);
  CHECK_EQ_INT((uintptr_t)sheaf_ragged_data(r) % 64, 0);
  int64_t idx[2] = {4, 3};
  CHECK_EQ_INT(sheaf_ragged_offset(r, 2, idx), 12 + 4 * 4 + 3);
  idx[0] = 5; /* past len[2] */
  CHECK_EQ_INT(sheaf_ragged_offset(r, 2, idx), -1);
  idx[0] = 0;
  CHECK_EQ_INT(sheaf_ragged_offset(r, 1, idx), -1); /* empty sequence */
  CHECK_EQ_INT(sheaf_ragged_offset(r, 4, idx), -1);
  sheaf_tensor *flat;
  REQUIRE_OK(ctx, sheaf_ragged_flat(ctx, r, &flat));
  CHECK_EQ_INT(sheaf_tensor_shape(flat)[0], 9);
  CHECK_EQ_INT(sheaf_tensor_shape(flat)[1], 4);
  CHECK(sheaf_tensor_data(flat) == sheaf_ragged_data(r));
  sheaf_tensor_free(flat);
  CHECK(sh_ragged_is_packed_tokens(r));
  sheaf_ragged_free(r);
}

TEST(ragged_storage_and_bulk_padding) {
  sheaf_ctx *ctx = th_ctx();
  /* lengths 1, tile-1, tile, tile+1 with a storage tile of 4 */
  int64_t lens[4] = {1, 3, 4, 5}, dims[2] = {SHEAF_RAGGED_DIM, 2};
  sheaf_ragged_opts o = {.storage_tile = 4, .bulk_tile = 16};
  sheaf_ragged *r;
  REQUIRE_OK(ctx, sheaf_ragged_create(ctx, SHEAF_F32, 4, lens, 2, dims, &o, &r));
  int64_t expect[5] = {0, 8, 16, 24, 40}; /* storage lengths 4, 4, 4, 8 */
  for (int i = 0; i < 5; i++) CHECK_EQ_INT(sheaf_ragged_offsets(r)[i], expect[i]);
  CHECK_EQ_INT(sheaf_ragged_numel(r), 13 * 2);
  /* 20 storage rows, bulk-padded once on the sum to 32 (not per sequence) */
  CHECK_EQ_SIZE(sheaf_ragged_nbytes(r), 32 * 2 * 4);
  CHECK(!sh_ragged_is_packed_tokens(r));
  float *rows[13];
  sh_ragged_token_rows(r, rows);
  float *base = sheaf_ragged_data(r);
  CHECK(rows[0] == base);
  CHECK(rows[1] == base + 8);      /* sequence 1 starts at its padded offset */
  CHECK(rows[3] == base + 8 + 4);  /* third token of sequence 1 */
  CHECK(rows[4] == base + 16);
  CHECK(rows[12] == base + 24 + 8);
  sheaf_ragged_free(r);
}

TEST(ragged_two_ragged_dims_attention_scores) {
  sheaf_ctx *ctx = th_ctx();
  int64_t lens[2] = {2, 3}, dims[3] = {2, SHEAF_RAGGED_DIM, SHEAF_RAGGED_DIM};
  sheaf_ragged *r;
  REQUIRE_OK(ctx, sheaf_ragged_create(ctx, SHEAF_F32, 2, lens, 3, dims, NULL, &r));
  CHECK_EQ_INT(sheaf_ragged_offsets(r)[1], 8);
  CHECK_EQ_INT(sheaf_ragged_offsets(r)[2], 26);
  int64_t idx[3] = {1, 2, 0};
  CHECK_EQ_INT(sheaf_ragged_offset(r, 1, idx), 8 + 9 + 6);
  sheaf_tensor *v;
  REQUIRE_OK(ctx, sheaf_ragged_seq(ctx, r, 1, &v));
  CHECK_EQ_INT(sheaf_tensor_rank(v), 3);
  CHECK_EQ_INT(sheaf_tensor_shape(v)[1], 3);
  CHECK_EQ_INT(sheaf_tensor_strides(v)[0], 9);
  CHECK_EQ_INT(sheaf_tensor_strides(v)[1], 3);
  fdata(v)[1 * 9 + 2 * 3 + 1] = 7.0f;
  CHECK(((float *)sheaf_ragged_data(r))[8 + 9 + 6 + 1] == 7.0f);
  sheaf_tensor_free(v);
  /* storage tile pads both ragged extents */
  sheaf_ragged_opts o = {.storage_tile = 4};
  sheaf_ragged *p;
  REQUIRE_OK(ctx, sheaf_ragged_create(ctx, SHEAF_F32, 2, lens, 3, dims, &o, &p));
  CHECK_EQ_INT(sheaf_ragged_offsets(p)[1], 32);
  CHECK_EQ_INT(sheaf_ragged_offset(p, 1, idx), 32 + 16 + 8);
  sheaf_ragged_free(p);
  sheaf_ragged_free(r);
}

/* padded [B, T, d] holding 1000*b + 10*t + j (pads: -1) */
static sheaf_tensor *padded_iota(sheaf_ctx *ctx, int64_t B, int64_t T, int64_t d,
                                 const int64_t *lens) {
  int64_t shape[3] = {B, T, d};
  sheaf_tensor *t;
  if (!CHECK_OK(ctx, sheaf_tensor_create(ctx, SHEAF_F32, 3, shape, &t))) return NULL;
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < T; i++)
      for (int64_t j = 0; j < d; j++)
        fdata(t)[(b * T + i) * d + j] = i < lens[b] ? (float)(1000 * b + 10 * i + j) : -1.0f;
  return t;
}

TEST(ragged_padded_round_trip_and_views) {
  sheaf_ctx *ctx = th_ctx();
  int64_t lens[6] = {1, 15, 16, 17, 0, 40}; /* 1, tile-1, tile, tile+1, empty, long */
  const int64_t B = 6, T = 40, d = 3;
  sheaf_tensor *p = padded_iota(ctx, B, T, d, lens);
  REQUIRE(p);
  for (int tile = 1; tile <= 16; tile *= 16) {
    sheaf_ragged_opts o = {.storage_tile = tile, .bulk_tile = 8};
    sheaf_ragged *r;
    REQUIRE_OK(ctx, sheaf_ragged_from_padded(ctx, p, lens, NULL, &o, &r));
    CHECK_EQ_INT(sheaf_ragged_numel(r), 89 * d);
    for (int64_t b = 0; b < B; b++) {
      sheaf_tensor *v;
      REQUIRE_OK(ctx, sheaf_ragged_seq(ctx, r, b, &v));
      CHECK_EQ_INT(sheaf_tensor_shape(v)[0], lens[b]);
      CHECK_EQ_INT(sheaf_tensor_shape(v)[1], d);
      const int64_t *st = sheaf_tensor_strides(v);
      for (int64_t i = 0; i < lens[b]; i++)
        for (int64_t j = 0; j < d; j++) {
          float want = (float)(1000 * b + 10 * i + j);
          CHECK(fdata(v)[i * st[0] + j * st[1]] == want);
          int64_t idx[2] = {i, j};
          CHECK(((float *)sheaf_ragged_data(r))[sheaf_ragged_offset(r, b, idx)] == want);
        }
      sheaf_tensor_free(v);
    }
    sheaf_tensor *back;
    REQUIRE_OK(ctx, sheaf_ragged_to_padded(ctx, r, 0, -1.0, &back));
    CHECK_EQ_INT(sheaf_tensor_shape(back)[1], T);
    CHECK(memcmp(fdata(back), fdata(p), (size_t)(B * T * d) * 4) == 0);
    sheaf_tensor_free(back);
    REQUIRE_OK(ctx, sheaf_ragged_to_padded(ctx, r, 48, 0.0, &back));
    CHECK_EQ_INT(sheaf_tensor_shape(back)[1], 48);
    CHECK(fdata(back)[(5 * 48 + 39) * d + 2] == (float)(5000 + 390 + 2));
    CHECK(fdata(back)[(5 * 48 + 40) * d] == 0.0f);
    sheaf_tensor_free(back);
    sheaf_ragged_free(r);
  }
  sheaf_tensor_free(p);
}

TEST(ragged_from_strided_padded_view) {
  sheaf_ctx *ctx = th_ctx();
  int64_t lens[2] = {2, 3};
  sheaf_tensor *p = padded_iota(ctx, 2, 4, 6, lens), *v;
  REQUIRE(p);
  /* every other feature column: a non-contiguous padded view */
  REQUIRE_OK(ctx, sheaf_tensor_slice(ctx, p, 2, 0, 6, 2, &v));
  sheaf_ragged *r;
  REQUIRE_OK(ctx, sheaf_ragged_from_padded(ctx, v, lens, NULL, NULL, &r));
  float *x = sheaf_ragged_data(r);
  CHECK(x[0] == 0.0f && x[1] == 2.0f && x[2] == 4.0f && x[3] == 10.0f);
  CHECK(x[6] == 1000.0f && x[14] == 1024.0f);
  sheaf_ragged_free(r);
  sheaf_tensor_free(v);
  sheaf_tensor_free(p);
}

TEST(ragged_errors_name_the_argument) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_ragged *r = NULL;
  int64_t lens[2] = {2, -1}, dims[2] = {SHEAF_RAGGED_DIM, 4}, dense[2] = {3, 4};
  CHECK_STATUS(ctx, sheaf_ragged_create(ctx, SHEAF_F32, 2, lens, 2, dims, NULL, &r),
               SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "lens[1] = -1");
  CHECK(r == NULL);
  lens[1] = 1;
  CHECK_STATUS(ctx, sheaf_ragged_create(ctx, SHEAF_F32, 2, lens, 2, dense, NULL, &r),
               SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "no SHEAF_RAGGED_DIM");
  CHECK_STATUS(ctx, sheaf_ragged_create(ctx, SHEAF_F32, 2, lens, 0, dims, NULL, &r),
               SHEAF_ERR_INVALID_ARG);
  CHECK_STATUS(ctx, sheaf_ragged_create(ctx, SHEAF_F32, -1, lens, 2, dims, NULL, &r),
               SHEAF_ERR_INVALID_ARG);
  sheaf_ragged_opts bad = {.storage_tile = -2};
  CHECK_STATUS(ctx, sheaf_ragged_create(ctx, SHEAF_F32, 2, lens, 2, dims, &bad, &r),
               SHEAF_ERR_INVALID_ARG);
  int64_t big[2] = {2, 9};
  sheaf_tensor *p = padded_iota(ctx, 2, 4, 4, lens);
  REQUIRE(p);
  CHECK_STATUS(ctx, sheaf_ragged_from_padded(ctx, p, big, NULL, NULL, &r), SHEAF_ERR_SHAPE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "lens[1] = 9 exceeds");
  int64_t wrong[2] = {SHEAF_RAGGED_DIM, 5};
  CHECK_STATUS(ctx, sheaf_ragged_from_padded(ctx, p, lens, wrong, NULL, &r), SHEAF_ERR_SHAPE);
  REQUIRE_OK(ctx, sheaf_ragged_from_padded(ctx, p, lens, NULL, NULL, &r));
  sheaf_tensor *t = NULL;
  CHECK_STATUS(ctx, sheaf_ragged_to_padded(ctx, r, 1, 0.0, &t), SHEAF_ERR_SHAPE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "pad_len 1");
  CHECK_STATUS(ctx, sheaf_ragged_seq(ctx, r, 2, &t), SHEAF_ERR_INVALID_ARG);
  CHECK(t == NULL);
  sheaf_ragged_free(r);
  sheaf_tensor_free(p);
  sheaf_ragged_free(NULL);
}

TEST(ragged_empty_batch_and_empty_sequences) {
  sheaf_ctx *ctx = th_ctx();
  int64_t dims[2] = {SHEAF_RAGGED_DIM, 8}, zeros[3] = {0, 0, 0};
  sheaf_ragged *r;
  REQUIRE_OK(ctx, sheaf_ragged_create(ctx, SHEAF_F32, 0, NULL, 2, dims, NULL, &r));
  CHECK_EQ_INT(sheaf_ragged_numel(r), 0);
  sheaf_tensor *t;
  REQUIRE_OK(ctx, sheaf_ragged_to_padded(ctx, r, 0, 0.0, &t));
  CHECK_EQ_INT(sheaf_tensor_numel(t), 0);
  sheaf_tensor_free(t);
  sheaf_ragged_free(r);
  REQUIRE_OK(ctx, sheaf_ragged_create(ctx, SHEAF_F32, 3, zeros, 2, dims, NULL, &r));
  REQUIRE_OK(ctx, sheaf_ragged_seq(ctx, r, 1, &t));
  CHECK_EQ_INT(sheaf_tensor_shape(t)[0], 0);
  sheaf_tensor_free(t);
  sheaf_ragged_free(r);
}

TEST(ragged_allocation_failures_leak_nothing) {
  sheaf_ctx *ctx = th_ctx();
  int64_t lens[3] = {4, 1, 7};
  sheaf_tensor *p = padded_iota(ctx, 3, 7, 5, lens);
  REQUIRE(p);
  for (long n = 1; n < 12; n++) {
    long live = th_live_blocks();
    th_fail_alloc_at(n);
    sheaf_ragged *r = NULL;
    sheaf_status st = sheaf_ragged_from_padded(ctx, p, lens, NULL, NULL, &r);
    th_fail_alloc_at(0);
    if (st == SHEAF_OK) {
      sheaf_ragged_free(r);
    } else {
      CHECK_EQ_INT(st, SHEAF_ERR_NOMEM);
      CHECK(r == NULL);
    }
    CHECK_EQ_INT(th_live_blocks(), live);
  }
  sheaf_tensor_free(p);
}
