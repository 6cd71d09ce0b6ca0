/*
 * file.h — reading whole files and read-only memory maps, with errors that
 * name the path. Readers and the safetensors loader go through here.
 */
#ifndef SH_FILE_H
#define SH_FILE_H

#include "base.h"

/* A view of a file's bytes: mmap'd copy-on-write when possible (writes stay
 * private, the file never changes), else read into memory. */
typedef struct sh_mapping {
  const unsigned char *data;
  size_t size;
  void *map_base;  /* munmap target, or NULL */
  size_t map_size;
  void *heap;      /* allocated copy, or NULL */
  sheaf_ctx *ctx;
} sh_mapping;

sheaf_status sh_file_map(sheaf_ctx *ctx, const char *path, sh_mapping *out);
void sh_file_unmap(sh_mapping *m);

/* Reads a whole file into a NUL-terminated heap buffer (size excludes the
 * NUL); free with sh_free(ctx, data, size + 1). */
sheaf_status sh_file_read(sheaf_ctx *ctx, const char *path, char **data, size_t *size);

/* Writes bytes to path via "path.tmp.<pid>" + rename: never a partial file. */
sheaf_status sh_file_write_atomic(sheaf_ctx *ctx, const char *path, const void *data,
                                  size_t size);

#endif
