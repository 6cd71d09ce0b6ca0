/*
 * buf.c — growable byte buffer (see buf.h).
 */
#include "buf.h"

#include <stdio.h>
#include <string.h>

void sh_buf_init(sh_buf *b, sheaf_ctx *ctx) {
  b->ctx = ctx;
  b->data = NULL;
  b->len = 0;
  b->cap = 0;
  b->failed = false;
}

void sh_buf_free(sh_buf *b) {
  sh_free(b->ctx, b->data, b->cap);
  b->data = NULL;
  b->len = b->cap = 0;
}

bool sh_buf_reserve(sh_buf *b, size_t n) {
  if (b->failed) return false;
  size_t need;
  if (sh_add_overflow(b->len, n, &need) || sh_add_overflow(need, 1, &need)) {
    b->failed = true;
    sh_fail(b->ctx, SHEAF_ERR_NOMEM, "out of memory: buffer of %zu + %zu bytes", b->len, n);
    return false;
  }
  if (need <= b->cap) return true;
  size_t cap = b->cap ? b->cap : 64;
  while (cap < need) {
    if (cap > SIZE_MAX / 2) {
      cap = need;
      break;
    }
    cap *= 2;
  }
  unsigned char *p = sh_realloc(b->ctx, b->data, b->cap, cap);
  if (!p) {
    b->failed = true;
    return false;
  }
  b->data = p;
  b->cap = cap;
  b->data[b->len] = '\0';
  return true;
}

void sh_buf_put(sh_buf *b, const void *p, size_t n) {
  if (!sh_buf_reserve(b, n)) return;
  if (n) memcpy(b->data + b->len, p, n);
  b->len += n;
  b->data[b->len] = '\0';
}

void sh_buf_putc(sh_buf *b, char c) { sh_buf_put(b, &c, 1); }

void sh_buf_puts(sh_buf *b, const char *s) { sh_buf_put(b, s, strlen(s)); }

void sh_buf_printf(sh_buf *b, const char *fmt, ...) {
  if (b->failed) return;
  char small[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) {
    b->failed = true;
    sh_fail(b->ctx, SHEAF_ERR_INTERNAL, "sh_buf_printf: bad format");
    return;
  }
  if ((size_t)n < sizeof small) {
    sh_buf_put(b, small, (size_t)n);
    return;
  }
  if (!sh_buf_reserve(b, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

void sh_buf_put_u32le(sh_buf *b, uint32_t v) {
  unsigned char x[4];
  for (int i = 0; i < 4; i++) x[i] = (unsigned char)(v >> (8 * i));
  sh_buf_put(b, x, 4);
}

void sh_buf_put_u64le(sh_buf *b, uint64_t v) {
  unsigned char x[8];
  for (int i = 0; i < 8; i++) x[i] = (unsigned char)(v >> (8 * i));
  sh_buf_put(b, x, 8);
}

void sh_buf_clear(sh_buf *b) {
  b->len = 0;
  if (b->data) b->data[0] = '\0';
}

sheaf_status sh_buf_status(const sh_buf *b) {
  return b->failed ? SHEAF_ERR_NOMEM : SHEAF_OK;
}

const char *sh_buf_cstr(const sh_buf *b) { return b->data ? (const char *)b->data : ""; }
