/*
 * vocab.c — string interning (see vocab.h) and the helpers the text readers
 * share: growable arrays, parse errors with positions, the NUL-byte check.
 */
#include "vocab.h"

#include <stdio.h>
#include <string.h>

#include "base/file.h"

/* Strings are packed into chunks of at least this many bytes. */
#define VOCAB_CHUNK (64 * 1024)

struct sh_vocab_chunk {
  sh_vocab_chunk *next;
  size_t cap, used;
  char data[];
};

void sh_vocab_init(sh_vocab *v, sheaf_ctx *ctx) {
  memset(v, 0, sizeof *v);
  v->ctx = ctx;
}

void sh_vocab_free(sh_vocab *v) {
  sheaf_ctx *ctx = v->ctx;
  if (!ctx) return;
  for (sh_vocab_chunk *c = v->chunks; c;) {
    sh_vocab_chunk *next = c->next;
    sh_free(ctx, c, sizeof *c + c->cap);
    c = next;
  }
  sh_free(ctx, v->entries, v->cap * sizeof *v->entries);
  sh_free(ctx, v->table, v->table_size * sizeof *v->table);
  sh_vocab_init(v, ctx);
}

/* FNV-1a, 32 bits: tokens are short, and this is fast enough to vanish
 * next to the reading itself. */
static uint32_t hash_bytes(const char *s, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 16777619u;
  }
  return h;
}

/* Slot holding s, or the empty slot where it would go. */
static size_t probe(const sh_vocab *v, const char *s, size_t n, uint32_t h) {
  size_t mask = v->table_size - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    int32_t id = v->table[i];
    if (id < 0) return i;
    const sh_vocab_entry *e = &v->entries[id];
    if (e->hash == h && e->len == n && memcmp(e->str, s, n) == 0) return i;
  }
}

int32_t sh_vocab_find(const sh_vocab *v, const char *s, size_t n) {
  if (v->table_size == 0 || n > UINT32_MAX) return -1;
  return v->table[probe(v, s, n, hash_bytes(s, n))];
}

static sheaf_status rehash(sh_vocab *v, size_t size) {
  int32_t *t = sh_malloc(v->ctx, size * sizeof *t);
  if (!t) return SHEAF_ERR_NOMEM;
  memset(t, 0xff, size * sizeof *t); /* every slot -1 */
  size_t mask = size - 1;
  for (int32_t id = 0; id < v->count; id++) {
    size_t i = v->entries[id].hash & mask;
    while (t[i] >= 0) i = (i + 1) & mask;
    t[i] = id;
  }
  sh_free(v->ctx, v->table, v->table_size * sizeof *v->table);
  v->table = t;
  v->table_size = size;
  return SHEAF_OK;
}

/* Copies s[0..n) and a NUL into the string chunks. */
static const char *store(sh_vocab *v, const char *s, size_t n) {
  sh_vocab_chunk *c = v->chunks;
  if (!c || c->cap - c->used < n + 1) {
    size_t cap = n + 1 > VOCAB_CHUNK ? n + 1 : VOCAB_CHUNK;
    c = sh_malloc(v->ctx, sizeof *c + cap);
    if (!c) return NULL;
    c->cap = cap;
    c->used = 0;
    /* A dedicated chunk for a long string goes behind the current one, so
     * the current one keeps filling. */
    if (cap > VOCAB_CHUNK && v->chunks) {
      c->next = v->chunks->next;
      v->chunks->next = c;
    } else {
      c->next = v->chunks;
      v->chunks = c;
    }
  }
  char *p = c->data + c->used;
  memcpy(p, s, n);
  p[n] = '\0';
  c->used += n + 1;
  return p;
}

sheaf_status sh_vocab_intern(sh_vocab *v, const char *s, size_t n, int32_t *id) {
  if (n >= UINT32_MAX)
    return sh_fail(v->ctx, SHEAF_ERR_UNSUPPORTED, "vocabulary: a string of %zu bytes is too long",
                   n);
  uint32_t h = hash_bytes(s, n);
  if (v->table_size) {
    int32_t found = v->table[probe(v, s, n, h)];
    if (found >= 0) {
      *id = found;
      return SHEAF_OK;
    }
  }
  if (v->count == INT32_MAX)
    return sh_fail(v->ctx, SHEAF_ERR_UNSUPPORTED, "vocabulary: more than %d strings",
                   INT32_MAX);
  /* Keep the load factor at most 1/2. */
  if ((size_t)(v->count + 1) * 2 > v->table_size) {
    sheaf_status st = rehash(v, v->table_size ? v->table_size * 2 : 64);
    if (st != SHEAF_OK) return st;
  }
  if ((size_t)v->count == v->cap) {
    sh_vocab_entry *e = sh_io_grow(v->ctx, v->entries, &v->cap, v->cap + 1, sizeof *e);
    if (!e) return SHEAF_ERR_NOMEM;
    v->entries = e;
  }
  const char *copy = store(v, s, n);
  if (!copy) return SHEAF_ERR_NOMEM;
  int32_t new_id = v->count++;
  v->entries[new_id] = (sh_vocab_entry){copy, (uint32_t)n, h};
  v->table[probe(v, s, n, h)] = new_id;
  *id = new_id;
  return SHEAF_OK;
}

/* vocab -> (token '\n')* ; token: any bytes but space, TAB, '\n' (a final
 * '\r' is dropped), never empty, never twice. */
sheaf_status sh_vocab_load(sh_vocab *v, const char *data, size_t size, const char *name) {
  if (size == 0) data = ""; /* NULL with 0 bytes is an empty input */
  sheaf_status st = sh_io_check_text(v->ctx, data, size, name);
  if (st != SHEAF_OK) return st;
  const char *p = data + sh_io_bom(data, size), *end = data + size;
  for (long line = 1; p < end; line++) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *le = nl ? nl : end;
    size_t n = (size_t)(le - p);
    if (n && p[n - 1] == '\r') n--;
    if (n == 0)
      return sh_io_parse_error(v->ctx, name, line, 1,
                               "empty line: a vocabulary file holds one token per line");
    for (size_t i = 0; i < n; i++)
      if (p[i] == ' ' || p[i] == '\t')
        return sh_io_parse_error(v->ctx, name, line, (long)i + 1,
                                 "a vocabulary token cannot contain %s",
                                 p[i] == ' ' ? "a space" : "a TAB");
    int32_t before = v->count, id;
    st = sh_vocab_intern(v, p, n, &id);
    if (st != SHEAF_OK) return st;
    if (v->count == before)
      return sh_io_parse_error(v->ctx, name, line, 1,
                               "token '%.*s' already appeared (as id %d, line %d)",
                               n > 60 ? 60 : (int)n, p, id, id + 1);
    p = nl ? nl + 1 : end;
  }
  return SHEAF_OK;
}

sheaf_status sh_vocab_load_file(sh_vocab *v, const char *path) {
  sh_mapping m;
  sheaf_status st = sh_file_map(v->ctx, path, &m);
  if (st != SHEAF_OK) return st;
  st = sh_vocab_load(v, (const char *)m.data, m.size, path);
  sh_file_unmap(&m);
  return st;
}

/* ---- helpers shared by the readers ---- */

void *sh_io_grow(sheaf_ctx *ctx, void *p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap && p) return p;
  size_t n = *cap ? *cap : 16;
  while (n < need) {
    if (n > SIZE_MAX / 2) {
      n = need;
      break;
    }
    n *= 2;
  }
  size_t old_bytes, new_bytes;
  if (sh_mul_overflow(n, elem, &new_bytes) || sh_mul_overflow(*cap, elem, &old_bytes)) {
    sh_fail(ctx, SHEAF_ERR_NOMEM, "out of memory: array of %zu x %zu bytes", n, elem);
    return NULL;
  }
  void *q = sh_realloc(ctx, p, old_bytes, new_bytes);
  if (!q) return NULL;
  *cap = n;
  return q;
}

sheaf_status sh_io_parse_error(sheaf_ctx *ctx, const char *name, long line, long col,
                               const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return sh_fail(ctx, SHEAF_ERR_PARSE, "%s:%ld:%ld: error: %s", name, line, col, msg);
}

sheaf_status sh_io_check_text(sheaf_ctx *ctx, const char *data, size_t size,
                              const char *name) {
  const char *z = size ? memchr(data, '\0', size) : NULL;
  if (!z) return SHEAF_OK;
  long line = 1;
  const char *line_start = data;
  for (const char *p = data; p < z; p++)
    if (*p == '\n') {
      line++;
      line_start = p + 1;
    }
  return sh_io_parse_error(ctx, name, line, (long)(z - line_start) + 1,
                           "NUL byte: text input cannot hold NUL bytes");
}

size_t sh_io_bom(const char *data, size_t size) {
  return size >= 3 && memcmp(data, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
}
