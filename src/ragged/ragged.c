/*
 * ragged.c — ragged tensors: creation from lengths, conversion from and to
 * padded dense tensors, per-sequence views, element offsets. See ragged.h
 * and docs/RAGGED.md for the layout.
 */
#include "ragged.h"

#include <string.h>

/* --------------------------------------------------------------- layout */

void sh_ragged_strides(const sheaf_ragged *r, int64_t b, int64_t *strides) {
  int64_t s = 1;
  for (int i = r->rank - 1; i >= 0; i--) {
    strides[i] = s;
    s *= sh_ragged_ext(r, i, b, true);
  }
}

static int last_ragged(int rank, const int64_t *dims) {
  int last = -1;
  for (int i = 0; i < rank; i++)
    if (dims[i] == SHEAF_RAGGED_DIM) last = i;
  return last;
}

static sheaf_status check_layout(sheaf_ctx *ctx, const char *fn, int64_t batch,
                                 const int64_t *lens, int rank, const int64_t *dims,
                                 const sheaf_ragged_opts *opts) {
  if (batch < 0)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: batch %lld is negative", fn, (long long)batch);
  if (batch > 0 && !lens) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: lens is NULL", fn);
  if (rank < 1 || rank > SH_RAGGED_MAX_RANK)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: rank %d outside 1..%d", fn, rank,
                   SH_RAGGED_MAX_RANK);
  if (!dims) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: dims is NULL", fn);
  for (int i = 0; i < rank; i++)
    if (dims[i] < 0 && dims[i] != SHEAF_RAGGED_DIM)
      return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                     "%s: dims[%d] = %lld is neither an extent nor SHEAF_RAGGED_DIM", fn, i,
                     (long long)dims[i]);
  if (last_ragged(rank, dims) < 0)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: dims has no SHEAF_RAGGED_DIM", fn);
  for (int64_t b = 0; b < batch; b++)
    if (lens[b] < 0)
      return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: lens[%lld] = %lld is negative", fn,
                     (long long)b, (long long)lens[b]);
  if (opts && (opts->storage_tile < 0 || opts->bulk_tile < 0))
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: opts tiles (%lld, %lld) must be >= 0", fn,
                   (long long)opts->storage_tile, (long long)opts->bulk_tile);
  return SHEAF_OK;
}

/* Builds the layout and allocates zeroed storage. */
static sheaf_status ragged_new(sheaf_ctx *ctx, const char *fn, sheaf_dtype dtype, int64_t batch,
                               const int64_t *lens, int rank, const int64_t *dims,
                               const sheaf_ragged_opts *opts, sheaf_ragged **out) {
  sheaf_status st = check_layout(ctx, fn, batch, lens, rank, dims, opts);
  if (st) return st;
  if ((unsigned)dtype >= SHEAF_DTYPE_COUNT)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: unknown dtype %d", fn, (int)dtype);
  sheaf_ragged *r = sh_calloc(ctx, 1, sizeof *r);
  if (!r) return SHEAF_ERR_NOMEM;
  r->ctx = ctx;
  r->dtype = dtype;
  r->rank = rank;
  r->batch = batch;
  r->storage_tile = opts && opts->storage_tile > 1 ? opts->storage_tile : 1;
  r->bulk_tile = opts && opts->bulk_tile > 1 ? opts->bulk_tile : 1;
  memcpy(r->dims, dims, (size_t)rank * sizeof *dims);
  r->row = 1;
  bool over = false;
  for (int i = last_ragged(rank, dims) + 1; i < rank; i++)
    over |= __builtin_mul_overflow(r->row, dims[i], &r->row);
  const char *what = over ? "the row (the dense dimensions after the last ragged one)"
                     : batch > (int64_t)((SIZE_MAX / sizeof(int64_t) - 1) / 2) ? "the batch"
                                                                                : NULL;
  if (what) {
    sh_free(ctx, r, sizeof *r);
    return sh_fail(ctx, SHEAF_ERR_NOMEM, "%s: the size of %s overflows", fn, what);
  }
  r->arrays_bytes = (size_t)(2 * batch + 1) * sizeof(int64_t);
  r->lens = sh_alloc(ctx, r->arrays_bytes, 16);
  if (!r->lens) {
    sh_free(ctx, r, sizeof *r);
    return SHEAF_ERR_NOMEM;
  }
  r->offs = r->lens + batch;
  if (batch) memcpy(r->lens, lens, (size_t)batch * sizeof *lens);
  /* offsets: prefix sums of per-sequence storage sizes (overflow-checked,
   * the rounding to the storage tile included) */
  int64_t off = 0, padded;
  for (int64_t b = 0; b < batch && !over; b++) {
    r->offs[b] = off;
    over |= !sh_ragged_round_ok(lens[b], r->storage_tile, &padded);
    int64_t sz = 1, logical = 1;
    for (int i = 0; i < rank && !over; i++) {
      over |= __builtin_mul_overflow(sz, sh_ragged_ext(r, i, b, true), &sz);
      over |= __builtin_mul_overflow(logical, sh_ragged_ext(r, i, b, false), &logical);
    }
    over |= __builtin_add_overflow(off, sz, &off);
    over |= __builtin_add_overflow(r->numel, logical, &r->numel);
    if (lens[b] > r->max_len) r->max_len = lens[b];
  }
  r->offs[batch] = off;
  int64_t rows = r->row > 0 ? off / r->row : 0;
  over |= !sh_ragged_round_ok(rows, r->bulk_tile, &rows);
  int64_t shape[2] = {rows, r->row};
  if (over || (rows > 0 && r->row > INT64_MAX / rows)) {
    sheaf_ragged_free(r);
    return sh_fail(ctx, SHEAF_ERR_NOMEM,
                   "%s: the ragged layout's size overflows (storage_tile %lld, bulk_tile %lld)",
                   fn, (long long)(opts ? opts->storage_tile : 0),
                   (long long)(opts ? opts->bulk_tile : 0));
  }
  st = sheaf_tensor_create(ctx, dtype, 2, shape, &r->flat);
  if (st) {
    sheaf_ragged_free(r);
    return sh_fail_prefix(ctx, "%s", fn);
  }
  *out = r;
  return SHEAF_OK;
}

sheaf_status sheaf_ragged_create(sheaf_ctx *ctx, sheaf_dtype dtype, int64_t batch,
                                 const int64_t *lens, int rank, const int64_t *dims,
                                 const sheaf_ragged_opts *opts, sheaf_ragged **out) {
  if (out) *out = NULL; /* also without a context */
  if (!ctx) return SHEAF_ERR_INVALID_ARG;
  if (!out) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_ragged_create: out is NULL");
  *out = NULL;
  return ragged_new(ctx, "sheaf_ragged_create", dtype, batch, lens, rank, dims, opts, out);
}

void sheaf_ragged_free(sheaf_ragged *r) {
  if (!r) return;
  sheaf_ctx *ctx = r->ctx;
  sheaf_tensor_free(r->flat);
  sh_free(ctx, r->lens, r->arrays_bytes);
  sh_free(ctx, r, sizeof *r);
}

/* ------------------------------------------------------------ accessors */

/* Queries: NULL gives 0, NULL or SHEAF_DTYPE_COUNT (sheaf.h's NULL rule). */
sheaf_dtype sheaf_ragged_dtype(const sheaf_ragged *r) { return r ? r->dtype : SHEAF_DTYPE_COUNT; }
int64_t sheaf_ragged_batch(const sheaf_ragged *r) { return r ? r->batch : 0; }
int sheaf_ragged_rank(const sheaf_ragged *r) { return r ? r->rank : 0; }
const int64_t *sheaf_ragged_dims(const sheaf_ragged *r) { return r ? r->dims : NULL; }
const int64_t *sheaf_ragged_lens(const sheaf_ragged *r) { return r ? r->lens : NULL; }
int64_t sheaf_ragged_max_len(const sheaf_ragged *r) { return r ? r->max_len : 0; }
const int64_t *sheaf_ragged_offsets(const sheaf_ragged *r) { return r ? r->offs : NULL; }
int64_t sheaf_ragged_numel(const sheaf_ragged *r) { return r ? r->numel : 0; }
size_t sheaf_ragged_nbytes(const sheaf_ragged *r) {
  return r ? (size_t)sheaf_tensor_numel(r->flat) * sheaf_dtype_size(r->dtype) : 0;
}
void *sheaf_ragged_data(const sheaf_ragged *r) { return r ? sheaf_tensor_data(r->flat) : NULL; }

int64_t sheaf_ragged_offset(const sheaf_ragged *r, int64_t b, const int64_t *idx) {
  if (!r || !idx || b < 0 || b >= r->batch) return -1;
  int64_t st[SH_RAGGED_MAX_RANK], off = r->offs[b];
  sh_ragged_strides(r, b, st);
  for (int i = 0; i < r->rank; i++) {
    if (idx[i] < 0 || idx[i] >= sh_ragged_ext(r, i, b, false)) return -1;
    off += idx[i] * st[i];
  }
  return off;
}

bool sh_ragged_is_packed_tokens(const sheaf_ragged *r) {
  return r->dtype == SHEAF_F32 && r->rank == 2 && r->dims[0] == SHEAF_RAGGED_DIM &&
         r->dims[1] != SHEAF_RAGGED_DIM && r->storage_tile == 1;
}

void sh_ragged_token_rows(const sheaf_ragged *r, float **rows) {
  float *base = sheaf_ragged_data(r);
  int64_t d = r->dims[1], t = 0;
  for (int64_t b = 0; b < r->batch; b++)
    for (int64_t i = 0; i < r->lens[b]; i++) rows[t++] = base + r->offs[b] + i * d;
}

/* ---------------------------------------------------------------- views */

sheaf_status sheaf_ragged_seq(sheaf_ctx *ctx, const sheaf_ragged *r, int64_t b,
                              sheaf_tensor **out) {
  if (out) *out = NULL; /* also without a context */
  if (!ctx) return SHEAF_ERR_INVALID_ARG;
  if (!out) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_ragged_seq: out is NULL");
  *out = NULL;
  if (!r) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_ragged_seq: r is NULL");
  if (b < 0 || b >= r->batch)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_ragged_seq: sequence %lld out of range 0..%lld",
                   (long long)b, (long long)r->batch - 1);
  int64_t shape[SH_RAGGED_MAX_RANK], strides[SH_RAGGED_MAX_RANK];
  for (int i = 0; i < r->rank; i++) shape[i] = sh_ragged_ext(r, i, b, false);
  sh_ragged_strides(r, b, strides);
  return sh_tensor_view(ctx, r->flat, r->rank, shape, strides, r->flat->offset + r->offs[b], out);
}

sheaf_status sheaf_ragged_flat(sheaf_ctx *ctx, const sheaf_ragged *r, sheaf_tensor **out) {
  if (out) *out = NULL; /* also without a context */
  if (!ctx) return SHEAF_ERR_INVALID_ARG;
  if (!out) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_ragged_flat: out is NULL");
  *out = NULL;
  if (!r) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_ragged_flat: r is NULL");
  return sh_tensor_view(ctx, r->flat, 2, r->flat->shape, r->flat->strides, r->flat->offset, out);
}

/* ----------------------------------------------------------- conversion */

/* Copies the elements of one sequence between two strided layouts of the
 * same logical shape (dst and src already point at the sequence start). */
static void copy_seq(int rank, const int64_t *shape, size_t es, unsigned char *dst,
                     const int64_t *dst_st, const unsigned char *src, const int64_t *src_st) {
  int64_t outer = 1;
  for (int i = 0; i < rank - 1; i++) outer *= shape[i];
  int64_t inner = shape[rank - 1];
  if (outer == 0 || inner == 0) return;
  int64_t idx[SH_RAGGED_MAX_RANK] = {0};
  for (int64_t o = 0; o < outer; o++) {
    int64_t so = 0, dof = 0;
    for (int i = 0; i < rank - 1; i++) {
      so += idx[i] * src_st[i];
      dof += idx[i] * dst_st[i];
    }
    const unsigned char *s = src + so * (int64_t)es;
    unsigned char *d = dst + dof * (int64_t)es;
    if (src_st[rank - 1] == 1 && dst_st[rank - 1] == 1) {
      memcpy(d, s, (size_t)inner * es);
    } else {
      for (int64_t k = 0; k < inner; k++)
        memcpy(d + k * dst_st[rank - 1] * (int64_t)es, s + k * src_st[rank - 1] * (int64_t)es, es);
    }
    for (int i = rank - 2; i >= 0; i--) {
      if (++idx[i] < shape[i]) break;
      idx[i] = 0;
    }
  }
}

sheaf_status sheaf_ragged_from_padded(sheaf_ctx *ctx, const sheaf_tensor *padded,
                                      const int64_t *lens, const int64_t *dims,
                                      const sheaf_ragged_opts *opts, sheaf_ragged **out) {
  static const char fn[] = "sheaf_ragged_from_padded";
  if (out) *out = NULL; /* also without a context */
  if (!ctx) return SHEAF_ERR_INVALID_ARG;
  if (!out) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: out is NULL", fn);
  *out = NULL;
  if (!padded) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: padded is NULL", fn);
  int prank = padded->rank;
  if (prank < 2 || prank - 1 > SH_RAGGED_MAX_RANK)
    return sh_fail(ctx, SHEAF_ERR_SHAPE, "%s: padded has rank %d; expected 2..%d", fn, prank,
                   SH_RAGGED_MAX_RANK + 1);
  int64_t d[SH_RAGGED_MAX_RANK];
  for (int i = 0; i < prank - 1; i++)
    d[i] = dims ? dims[i] : (i == 0 ? SHEAF_RAGGED_DIM : padded->shape[i + 1]);
  int64_t batch = padded->shape[0];
  sheaf_status st = check_layout(ctx, fn, batch, lens, prank - 1, d, opts);
  if (st) return st;
  for (int i = 0; i < prank - 1; i++) {
    if (d[i] != SHEAF_RAGGED_DIM && d[i] != padded->shape[i + 1])
      return sh_fail(ctx, SHEAF_ERR_SHAPE, "%s: dims[%d] = %lld but padded axis %d has extent %lld",
                     fn, i, (long long)d[i], i + 1, (long long)padded->shape[i + 1]);
    for (int64_t b = 0; d[i] == SHEAF_RAGGED_DIM && b < batch; b++)
      if (lens[b] > padded->shape[i + 1])
        return sh_fail(ctx, SHEAF_ERR_SHAPE, "%s: lens[%lld] = %lld exceeds padded axis %d (%lld)",
                       fn, (long long)b, (long long)lens[b], i + 1,
                       (long long)padded->shape[i + 1]);
  }
  sheaf_ragged *r;
  st = ragged_new(ctx, fn, padded->dtype, batch, lens, prank - 1, d, opts, &r);
  if (st) return st;
  size_t es = sheaf_dtype_size(r->dtype);
  const unsigned char *src = sheaf_tensor_data(padded);
  unsigned char *dst = sheaf_ragged_data(r);
  for (int64_t b = 0; b < batch; b++) {
    int64_t shape[SH_RAGGED_MAX_RANK], dst_st[SH_RAGGED_MAX_RANK];
    for (int i = 0; i < r->rank; i++) shape[i] = sh_ragged_ext(r, i, b, false);
    sh_ragged_strides(r, b, dst_st);
    copy_seq(r->rank, shape, es, dst + r->offs[b] * (int64_t)es, dst_st,
             src + b * padded->strides[0] * (int64_t)es, padded->strides + 1);
  }
  *out = r;
  return SHEAF_OK;
}

static void fill_value(sheaf_dtype dt, double v, unsigned char *buf) {
  switch (dt) {
  case SHEAF_F32: { float f = (float)v; memcpy(buf, &f, 4); break; }
  case SHEAF_F64: memcpy(buf, &v, 8); break;
  case SHEAF_I32: { int32_t x = (int32_t)v; memcpy(buf, &x, 4); break; }
  case SHEAF_I64: { int64_t x = (int64_t)v; memcpy(buf, &x, 8); break; }
  default: memset(buf, 0, 8); break; /* other dtypes: fill with zero bytes */
  }
}

sheaf_status sheaf_ragged_to_padded(sheaf_ctx *ctx, const sheaf_ragged *r, int64_t pad_len,
                                    double fill, sheaf_tensor **out) {
  static const char fn[] = "sheaf_ragged_to_padded";
  if (out) *out = NULL; /* also without a context */
  if (!ctx) return SHEAF_ERR_INVALID_ARG;
  if (!out) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: out is NULL", fn);
  *out = NULL;
  if (!r) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: r is NULL", fn);
  if (pad_len < 0 || (pad_len > 0 && pad_len < r->max_len))
    return sh_fail(ctx, SHEAF_ERR_SHAPE, "%s: pad_len %lld is shorter than the longest length %lld",
                   fn, (long long)pad_len, (long long)r->max_len);
  int64_t P = pad_len ? pad_len : r->max_len;
  int64_t shape[SH_RAGGED_MAX_RANK + 1];
  shape[0] = r->batch;
  for (int i = 0; i < r->rank; i++) shape[i + 1] = r->dims[i] == SHEAF_RAGGED_DIM ? P : r->dims[i];
  sheaf_tensor *t;
  sheaf_status st = sheaf_tensor_create(ctx, r->dtype, r->rank + 1, shape, &t);
  if (st) return sh_fail_prefix(ctx, "%s", fn);
  size_t es = sheaf_dtype_size(r->dtype);
  unsigned char *dst = sheaf_tensor_data(t);
  int64_t numel = sheaf_tensor_numel(t);
  if (fill != 0.0 && es <= 8) {
    unsigned char v[8];
    fill_value(r->dtype, fill, v);
    for (int64_t i = 0; i < numel; i++) memcpy(dst + i * (int64_t)es, v, es);
  }
  const unsigned char *src = sheaf_ragged_data(r);
  for (int64_t b = 0; b < r->batch; b++) {
    int64_t sh[SH_RAGGED_MAX_RANK], src_st[SH_RAGGED_MAX_RANK];
    for (int i = 0; i < r->rank; i++) sh[i] = sh_ragged_ext(r, i, b, false);
    sh_ragged_strides(r, b, src_st);
    copy_seq(r->rank, sh, es, dst + b * t->strides[0] * (int64_t)es, t->strides + 1,
             src + r->offs[b] * (int64_t)es, src_st);
  }
  *out = t;
  return SHEAF_OK;
}
