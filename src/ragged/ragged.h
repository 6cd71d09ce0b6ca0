/*
 * ragged.h — the ragged tensor layout (CoRa) beside the dense one: an outer
 * batch dimension, per-sequence dimensions some of which have extent
 * len[b], values packed sequence after sequence with offsets from prefix
 * sums. The storage is a dense flat view [rows, row] (sh_storage, shared
 * with dense tensors), so per-sequence views are plain sheaf_tensors.
 * Also: sh_rseq, the length structure the ragged operators loop over.
 */
#ifndef SH_RAGGED_H
#define SH_RAGGED_H

#include "kernels/gemm.h"
#include "tensor/tensor.h"

#define SH_RAGGED_MAX_RANK 8

struct sheaf_ragged {
  sheaf_ctx *ctx;
  sheaf_tensor *flat;      /* [rows, row]: owns the storage reference */
  sheaf_dtype dtype;
  int rank;                /* per-sequence dimensions (batch excluded) */
  int64_t batch;
  int64_t storage_tile;    /* >= 1 */
  int64_t bulk_tile;       /* >= 1 */
  int64_t row;             /* elements per flat row */
  int64_t max_len;
  int64_t numel;           /* logical elements, no padding */
  int64_t dims[SH_RAGGED_MAX_RANK];
  int64_t *lens;           /* batch */
  int64_t *offs;           /* batch + 1, in elements */
  size_t arrays_bytes;     /* of the lens+offs block */
};

/* x (>= 0) rounded up to a multiple of tile; false when that overflows. */
static inline bool sh_ragged_round_ok(int64_t x, int64_t tile, int64_t *out) {
  int64_t r = tile > 1 ? x % tile : 0;
  if (r == 0) {
    *out = x;
    return true;
  }
  return !__builtin_add_overflow(x, tile - r, out);
}
/* Per-sequence extent of dimension i in storage (ragged: len padded to the
 * storage tile) and logically. Creation checks every rounding fits, so the
 * layout's own roundings never overflow. */
static inline int64_t sh_ragged_round(int64_t x, int64_t tile) {
  int64_t r = tile > 1 ? x % tile : 0;
  return r ? x + (tile - r) : x;
}
static inline int64_t sh_ragged_ext(const sheaf_ragged *r, int i, int64_t b, bool storage) {
  if (r->dims[i] != SHEAF_RAGGED_DIM) return r->dims[i];
  return storage ? sh_ragged_round(r->lens[b], r->storage_tile) : r->lens[b];
}
/* Strides (in elements) of sequence b's dimensions in storage. */
void sh_ragged_strides(const sheaf_ragged *r, int64_t b, int64_t *strides);

/* The lengths of a batch of token sequences: off[b] = len[0] + ... +
 * len[b-1] (batch + 1 entries); n = off[batch] tokens. */
typedef struct sh_rseq {
  int64_t batch;
  const int64_t *len;
  const int64_t *off;
  int64_t n, max_len;
} sh_rseq;

/* True when r is a token matrix {RAGGED, d} (f32) whose tokens are
 * contiguous rows (storage_tile 1): row t of the batch is data + t*d. */
bool sh_ragged_is_packed_tokens(const sheaf_ragged *r);
/* Row pointers of every token of a token matrix {RAGGED, d} in batch order
 * (any storage tile): rows has sum(lens) entries. */
void sh_ragged_token_rows(const sheaf_ragged *r, float **rows);

#endif
