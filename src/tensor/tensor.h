/*
 * tensor.h — dense strided tensors: reference-counted storage plus a layout
 * (dtype, shape, strides in elements, offset). A layout never owns memory;
 * the storage does. A ragged tensor (a later module) is another layout over
 * the same storage type, so both kinds share allocation, wrapping of foreign
 * memory (mmap'd weights) and lifetime rules.
 */
#ifndef SH_TENSOR_H
#define SH_TENSOR_H

#include <stdatomic.h>

#include "base/base.h"

/* Rank limit of the implementation (views keep per-axis scratch on the
 * stack); layouts themselves are heap-sized by rank. */
#define SH_TENSOR_MAX_RANK 1024

typedef struct sh_storage {
  sheaf_ctx *ctx;
  atomic_int refs;
  void *data;
  size_t bytes;                           /* bytes reachable from data (0 if unknown) */
  void (*release)(void *user, void *data); /* foreign memory: called at refs 0 */
  void *release_user;
  bool owned;                             /* data allocated by sh_alloc(bytes, 64) */
} sh_storage;

struct sheaf_tensor {
  sheaf_ctx *ctx;
  sh_storage *storage;
  sheaf_dtype dtype;
  int rank;
  int64_t offset; /* in elements, from storage->data */
  int64_t *shape; /* rank entries, in dims[] */
  int64_t *strides;
  int64_t dims[]; /* shape then strides */
};

/* numel of a shape; false on a negative extent or int64 overflow. */
bool sh_shape_numel(int rank, const int64_t *shape, int64_t *numel);
/* Formats a shape as "[2, 3, 4]" into buf; returns buf. */
const char *sh_shape_str(int rank, const int64_t *shape, char *buf, size_t size);
/* Row-major strides for shape. */
void sh_contiguous_strides(int rank, const int64_t *shape, int64_t *strides);

/* A new view over t's storage (takes a storage reference). */
sheaf_status sh_tensor_view(sheaf_ctx *ctx, const sheaf_tensor *t, int rank,
                            const int64_t *shape, const int64_t *strides, int64_t offset,
                            sheaf_tensor **out);

#endif
