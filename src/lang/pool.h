/*
 * pool.h — the small-object allocator of the language front end: 8-byte
 * aligned bump allocation out of 64 KiB blocks taken from an sh_arena (whose
 * own allocations are 64-byte aligned: too coarse for AST nodes). Everything
 * of one compiled source lives in one pool and dies with it.
 */
#ifndef SH_LANG_POOL_H
#define SH_LANG_POOL_H

#include <string.h>

#include "base/arena.h"

typedef struct sh_lang_pool {
  sh_arena arena;
  char *cur;
  size_t left;
} sh_lang_pool;

#define SH_LANG_POOL_BLOCK (64 * 1024)

static inline void sh_lang_pool_init(sh_lang_pool *p, sheaf_ctx *ctx) {
  sh_arena_init(&p->arena, ctx, SH_LANG_POOL_BLOCK);
  p->cur = NULL;
  p->left = 0;
}

static inline void sh_lang_pool_destroy(sh_lang_pool *p) {
  sh_arena_destroy(&p->arena);
  p->cur = NULL;
  p->left = 0;
}

/* Forgets every allocation, keeping one block for reuse (the interpreter's
 * values of one batch). */
static inline void sh_lang_pool_reset(sh_lang_pool *p) {
  sh_arena_reset(&p->arena);
  p->cur = NULL;
  p->left = 0;
}

/* Memory of unspecified content, 8-byte aligned; NULL (last error set) when
 * out of memory. */
static inline void *sh_lang_alloc_raw(sh_lang_pool *p, size_t size) {
  size = (size + 7) & ~(size_t)7;
  if (size == 0) size = 8;
  if (size > SH_LANG_POOL_BLOCK / 4) return sh_arena_alloc(&p->arena, size);
  if (size > p->left) {
    char *blk = sh_arena_alloc(&p->arena, SH_LANG_POOL_BLOCK);
    if (!blk) return NULL;
    p->cur = blk;
    p->left = SH_LANG_POOL_BLOCK;
  }
  void *r = p->cur;
  p->cur += size;
  p->left -= size;
  return r;
}

/* Zeroed memory, 8-byte aligned; NULL (last error set) when out of memory. */
static inline void *sh_lang_alloc(sh_lang_pool *p, size_t size) {
  size = (size + 7) & ~(size_t)7;
  if (size == 0) size = 8;
  if (size > SH_LANG_POOL_BLOCK / 4) return sh_arena_calloc(&p->arena, 1, size);
  if (size > p->left) {
    char *blk = sh_arena_alloc(&p->arena, SH_LANG_POOL_BLOCK);
    if (!blk) return NULL;
    p->cur = blk;
    p->left = SH_LANG_POOL_BLOCK;
  }
  void *r = p->cur;
  p->cur += size;
  p->left -= size;
  memset(r, 0, size);
  return r;
}

static inline char *sh_lang_strndup(sh_lang_pool *p, const char *s, size_t n) {
  char *r = (char *)sh_lang_alloc(p, n + 1);
  if (r) memcpy(r, s, n);
  return r;
}

#endif
