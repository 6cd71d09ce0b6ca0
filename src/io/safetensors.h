/*
 * safetensors.h — internal entry points of the safetensors module (the
 * public API is in sheaf.h, "safetensors").
 */
#ifndef SH_SAFETENSORS_H
#define SH_SAFETENSORS_H

#include "base/base.h"
#include "base/buf.h"

/* The reference implementation's limit on the JSON header. */
#define SH_ST_MAX_HEADER ((uint64_t)100000000)

/* The name f was opened with (its path, or sheaf_st_open_memory's name):
 * what messages about it say. */
const char *sh_st_file_name(const sheaf_st_file *f);

/* sheaf_st_write into memory: appends the whole file to *out. Same argument
 * checks and layout as sheaf_st_write; `name` is used in messages. */
sheaf_status sh_st_write_buf(sheaf_ctx *ctx, const char *name, size_t n,
                             const char *const *names, const sheaf_tensor *const *tensors,
                             size_t n_meta, const char *const *meta_kv, sh_buf *out);

#endif
