/*
 * arena.h — bump allocators for data that dies together (compiler data,
 * one flush of the runtime). Every allocation is 64-byte aligned; memory
 * comes from the context's allocator in chunks and is returned on destroy.
 */
#ifndef SH_ARENA_H
#define SH_ARENA_H

#include "base.h"

#define SH_ARENA_ALIGN 64

typedef struct sh_arena_chunk sh_arena_chunk;

typedef struct sh_arena {
  sheaf_ctx *ctx;
  sh_arena_chunk *head;   /* chunk being filled; older chunks follow ->next */
  size_t chunk_size;      /* default payload size of a new chunk */
  size_t used_total;      /* bytes handed out since init/reset */
} sh_arena;

/* A position to rewind to. */
typedef struct sh_arena_mark {
  sh_arena_chunk *chunk;
  size_t used;
  size_t used_total;
} sh_arena_mark;

/* chunk_size 0 picks 64 KiB. Allocates nothing until first use. */
void sh_arena_init(sh_arena *a, sheaf_ctx *ctx, size_t chunk_size);
/* Returns 64-byte aligned memory, or NULL (last error set). size 0 returns a
 * valid unique pointer. */
void *sh_arena_alloc(sh_arena *a, size_t size);
void *sh_arena_calloc(sh_arena *a, size_t count, size_t size);
char *sh_arena_strndup(sh_arena *a, const char *s, size_t n);
/* Forgets every allocation but keeps the largest chunk for reuse. */
void sh_arena_reset(sh_arena *a);
sh_arena_mark sh_arena_get_mark(const sh_arena *a);
/* Frees everything allocated after the mark (chunks added since are freed). */
void sh_arena_rewind(sh_arena *a, sh_arena_mark m);
void sh_arena_destroy(sh_arena *a);
/* Bytes reserved from the allocator (for statistics and tests). */
size_t sh_arena_reserved(const sh_arena *a);

#endif
