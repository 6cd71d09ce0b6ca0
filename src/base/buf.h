/*
 * buf.h — a growable byte buffer with a sticky error flag (QuickJS DynBuf
 * style): append freely, check once at the end with sh_buf_status. Used for
 * emitting text (JSON, PTB trees, generated C) and building binary files.
 */
#ifndef SH_BUF_H
#define SH_BUF_H

#include "base.h"

typedef struct sh_buf {
  sheaf_ctx *ctx;
  unsigned char *data; /* always NUL-terminated when len > 0 or cap > 0 */
  size_t len;
  size_t cap;
  bool failed;
} sh_buf;

void sh_buf_init(sh_buf *b, sheaf_ctx *ctx);
void sh_buf_free(sh_buf *b);
/* Each append is a no-op once the buffer has failed. */
void sh_buf_put(sh_buf *b, const void *p, size_t n);
void sh_buf_putc(sh_buf *b, char c);
void sh_buf_puts(sh_buf *b, const char *s);
void sh_buf_printf(sh_buf *b, const char *fmt, ...) SH_PRINTF(2, 3);
void sh_buf_put_u32le(sh_buf *b, uint32_t v);
void sh_buf_put_u64le(sh_buf *b, uint64_t v);
/* Ensures room for n more bytes (so a caller can write into data+len). */
bool sh_buf_reserve(sh_buf *b, size_t n);
void sh_buf_clear(sh_buf *b);
/* SHEAF_OK, or SHEAF_ERR_NOMEM if any append failed. */
sheaf_status sh_buf_status(const sh_buf *b);
/* A C string view of the contents ("" when empty). */
const char *sh_buf_cstr(const sh_buf *b);

#endif
