/*
 * vocab.h — string interning for the text readers: string -> dense int32 id
 * (0, 1, 2, ... in order of first appearance) and id -> string. Open
 * addressing (linear probing) over a power-of-two table of ids; the strings
 * are packed, NUL-terminated, into chunks the vocabulary owns, so interning
 * never allocates per string. Used for words, labels, tags and relations.
 *
 * Also the three small helpers every reader of src/io shares: a growable
 * array step, the "FILE:LINE:COL: error: ..." parse error, and the check that
 * text input holds no NUL byte.
 */
#ifndef SH_IO_VOCAB_H
#define SH_IO_VOCAB_H

#include "base/base.h"

typedef struct sh_vocab_entry {
  const char *str; /* NUL-terminated; may not contain NUL itself */
  uint32_t len;
  uint32_t hash;
} sh_vocab_entry;

typedef struct sh_vocab_chunk sh_vocab_chunk;

typedef struct sh_vocab {
  sheaf_ctx *ctx;
  sh_vocab_entry *entries; /* id -> string */
  int32_t count;
  size_t cap;
  int32_t *table;    /* slot -> id, -1 empty; table_size is a power of two */
  size_t table_size; /* 0 until the first intern */
  sh_vocab_chunk *chunks;
} sh_vocab;

void sh_vocab_init(sh_vocab *v, sheaf_ctx *ctx);
void sh_vocab_free(sh_vocab *v);

/* The id of s[0..n), adding it when new. Any bytes but NUL. */
sheaf_status sh_vocab_intern(sh_vocab *v, const char *s, size_t n, int32_t *id);
/* The id of s[0..n), or -1. */
int32_t sh_vocab_find(const sh_vocab *v, const char *s, size_t n);
static inline int32_t sh_vocab_size(const sh_vocab *v) { return v->count; }
static inline const char *sh_vocab_str(const sh_vocab *v, int32_t id) {
  return v->entries[id].str;
}
static inline size_t sh_vocab_len(const sh_vocab *v, int32_t id) { return v->entries[id].len; }

/* A vocabulary file: one token per line, id = line index (0-based). A
 * trailing '\r' is dropped; the last line may lack its '\n'. Errors
 * (SHEAF_ERR_PARSE, "NAME:LINE:COL: error: ..."): an empty line, a token
 * holding a space or TAB, a token that appeared on an earlier line. Appends
 * to v, which is normally empty. */
sheaf_status sh_vocab_load(sh_vocab *v, const char *data, size_t size, const char *name);
sheaf_status sh_vocab_load_file(sh_vocab *v, const char *path);

/* ---- helpers shared by the readers ---- */

/* Makes room for `need` elements of `elem` bytes in the block p (capacity
 * *cap elements, contents kept): returns the (possibly new) block and updates
 * *cap, or returns NULL with the last error set and p untouched. Capacity at
 * least doubles. */
void *sh_io_grow(sheaf_ctx *ctx, void *p, size_t *cap, size_t need, size_t elem);

/* Records "NAME:LINE:COL: error: <formatted>" as SHEAF_ERR_PARSE. */
sheaf_status sh_io_parse_error(sheaf_ctx *ctx, const char *name, long line, long col,
                               const char *fmt, ...) SH_PRINTF(5, 6);

/* SHEAF_ERR_PARSE at the first NUL byte of data, if any ("text input cannot
 * hold NUL bytes"). Text readers call it first, so every string they intern
 * is a proper C string. */
sheaf_status sh_io_check_text(sheaf_ctx *ctx, const char *data, size_t size,
                              const char *name);

/* Length of a UTF-8 byte-order mark at the start of data (3 or 0). */
size_t sh_io_bom(const char *data, size_t size);

#endif
