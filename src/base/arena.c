/*
 * arena.c — chunked bump allocator (see arena.h).
 */
#include "arena.h"

#include <stdint.h>
#include <string.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#define SH_ARENA_HUGE ((size_t)2 << 20)      /* a transparent huge page */
#define SH_ARENA_HUGE_MIN ((size_t)4 << 20) /* chunks that get the advice */

struct sh_arena_chunk {
  sh_arena_chunk *next;
  size_t cap;  /* payload bytes */
  size_t used; /* payload bytes handed out */
  /* payload starts at the next 64-byte boundary of the chunk */
};

#define CHUNK_HEADER sh_align_up(sizeof(sh_arena_chunk), SH_ARENA_ALIGN)

static unsigned char *chunk_payload(sh_arena_chunk *c) {
  return (unsigned char *)c + CHUNK_HEADER;
}

void sh_arena_init(sh_arena *a, sheaf_ctx *ctx, size_t chunk_size) {
  a->ctx = ctx;
  a->head = NULL;
  a->chunk_size = chunk_size ? sh_align_up(chunk_size, SH_ARENA_ALIGN) : 64 * 1024;
  a->used_total = 0;
}

static void chunk_free(sh_arena *a, sh_arena_chunk *c) {
  sh_free(a->ctx, c, CHUNK_HEADER + c->cap);
}

static sh_arena_chunk *chunk_new(sh_arena *a, size_t min_payload) {
  size_t cap = a->chunk_size;
  if (min_payload > cap) cap = sh_align_up(min_payload, SH_ARENA_ALIGN);
  size_t total;
  if (cap < min_payload || sh_add_overflow(CHUNK_HEADER, cap, &total)) {
    sh_fail(a->ctx, SHEAF_ERR_NOMEM, "out of memory: arena request of %zu bytes",
            min_payload);
    return NULL;
  }
  sh_arena_chunk *c = sh_alloc(a->ctx, total, SH_ARENA_ALIGN);
  if (!c) return NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  /* A big chunk (a graph's values for a whole flush: megabytes, read
   * through scattered row pointers) in 2 MiB pages where the system allows
   * them (transparent huge pages in madvise mode): one fault and one TLB
   * entry per 2 MiB instead of 512. Advice only: a refusal changes nothing. */
  if (total >= SH_ARENA_HUGE_MIN) {
    uintptr_t p0 = ((uintptr_t)c + SH_ARENA_HUGE - 1) & ~(uintptr_t)(SH_ARENA_HUGE - 1);
    uintptr_t p1 = ((uintptr_t)c + total) & ~(uintptr_t)(SH_ARENA_HUGE - 1);
    if (p1 > p0) (void)madvise((void *)p0, p1 - p0, MADV_HUGEPAGE);
  }
#endif
  c->next = a->head;
  c->cap = cap;
  c->used = 0;
  a->head = c;
  return c;
}

void *sh_arena_alloc(sh_arena *a, size_t size) {
  size_t need = size ? sh_align_up(size, SH_ARENA_ALIGN) : SH_ARENA_ALIGN;
  if (need < size) {
    sh_fail(a->ctx, SHEAF_ERR_NOMEM, "out of memory: arena request of %zu bytes", size);
    return NULL;
  }
  sh_arena_chunk *c = a->head;
  if (!c || c->cap - c->used < need) {
    c = chunk_new(a, need);
    if (!c) return NULL;
  }
  void *p = chunk_payload(c) + c->used;
  c->used += need;
  a->used_total += need;
  return p;
}

void *sh_arena_calloc(sh_arena *a, size_t count, size_t size) {
  size_t total;
  if (sh_mul_overflow(count, size, &total)) {
    sh_fail(a->ctx, SHEAF_ERR_NOMEM, "out of memory: %zu x %zu bytes overflows", count,
            size);
    return NULL;
  }
  void *p = sh_arena_alloc(a, total);
  if (p) memset(p, 0, total);
  return p;
}

char *sh_arena_strndup(sh_arena *a, const char *s, size_t n) {
  char *p = sh_arena_alloc(a, n + 1);
  if (!p) return NULL;
  memcpy(p, s, n);
  p[n] = '\0';
  return p;
}

void sh_arena_reset(sh_arena *a) {
  /* Keep the largest chunk: after a few flushes one chunk fits a whole flush. */
  sh_arena_chunk *keep = NULL;
  for (sh_arena_chunk *c = a->head; c;) {
    sh_arena_chunk *next = c->next;
    if (!keep || c->cap > keep->cap) {
      if (keep) chunk_free(a, keep);
      keep = c;
    } else {
      chunk_free(a, c);
    }
    c = next;
  }
  if (keep) {
    keep->next = NULL;
    keep->used = 0;
    if (keep->cap > a->chunk_size) a->chunk_size = keep->cap;
  }
  a->head = keep;
  a->used_total = 0;
}

sh_arena_mark sh_arena_get_mark(const sh_arena *a) {
  sh_arena_mark m = {a->head, a->head ? a->head->used : 0, a->used_total};
  return m;
}

void sh_arena_rewind(sh_arena *a, sh_arena_mark m) {
  while (a->head && a->head != m.chunk) {
    sh_arena_chunk *next = a->head->next;
    chunk_free(a, a->head);
    a->head = next;
  }
  if (a->head) a->head->used = m.used;
  a->used_total = m.used_total;
}

void sh_arena_destroy(sh_arena *a) {
  for (sh_arena_chunk *c = a->head; c;) {
    sh_arena_chunk *next = c->next;
    chunk_free(a, c);
    c = next;
  }
  a->head = NULL;
  a->used_total = 0;
}

size_t sh_arena_reserved(const sh_arena *a) {
  size_t n = 0;
  for (const sh_arena_chunk *c = a->head; c; c = c->next) n += c->cap;
  return n;
}
