/*
 * diag.c — recording diagnostics (bounded, allocation-free) and rendering
 * them with the source line and a caret under the span.
 */
#include <stdio.h>
#include <string.h>

#include "lang/diag.h"

void sh_diags_init(sh_diags *d, const char *file, const char *src, size_t len) {
  d->file = file;
  d->src = src;
  d->len = len;
  d->n = 0;
  d->n_errors = 0;
  d->dropping = false;
}

SH_PRINTF_V(4) static void add(sh_diags *d, sh_diag_kind kind, sh_span at, const char *fmt, va_list ap) {
  if (d->n >= (int)SH_ARRAY_LEN(d->v)) return;
  sh_diag *e = &d->v[d->n++];
  e->kind = kind;
  e->span = at;
  int w = vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  if (w >= (int)sizeof e->msg) memcpy(e->msg + sizeof e->msg - 4, "...", 4);
}

void sh_diag_error(sh_diags *d, sh_span at, const char *fmt, ...) {
  d->n_errors++;
  d->dropping = d->n_errors > SH_DIAG_MAX_ERRORS;
  if (d->dropping) return;
  va_list ap;
  va_start(ap, fmt);
  add(d, SH_DIAG_ERROR, at, fmt, ap);
  va_end(ap);
}

void sh_diag_note(sh_diags *d, sh_span at, const char *fmt, ...) {
  if (d->dropping || d->n_errors == 0) return;
  va_list ap;
  va_start(ap, fmt);
  add(d, SH_DIAG_NOTE, at, fmt, ap);
  va_end(ap);
}

sh_span sh_span_join(sh_span a, sh_span b) {
  if (b.off + b.len > a.off) a.len = b.off + b.len - a.off;
  return a;
}

/* Line `line` (1-based) of the source: start and length without newline. */
static void line_at(const sh_diags *d, const sh_span *sp, size_t *start, size_t *n) {
  size_t off = sp->off <= d->len ? sp->off : d->len;
  size_t s = off;
  while (s > 0 && d->src[s - 1] != '\n') s--;
  size_t e = off;
  while (e < d->len && d->src[e] != '\n') e++;
  if (e > s && d->src[e - 1] == '\r') e--;
  *start = s;
  *n = e - s;
}

#define SH_DIAG_LINE_MAX 400 /* longer source lines are cut in the echo */

static void render_one(const sh_diags *d, const sh_diag *e, sh_buf *out) {
  sh_buf_printf(out, "%s:%u:%u: %s: %s\n", d->file, e->span.line, e->span.col,
                e->kind == SH_DIAG_ERROR ? "error" : "note", e->msg);
  if (!d->src || e->span.line == 0) return;
  size_t s, n;
  line_at(d, &e->span, &s, &n);
  size_t shown = n > SH_DIAG_LINE_MAX ? SH_DIAG_LINE_MAX : n;
  char gutter[16];
  int gw = snprintf(gutter, sizeof gutter, "%u", e->span.line);
  sh_buf_printf(out, " %s | ", gutter);
  for (size_t i = 0; i < shown; i++) {
    unsigned char c = (unsigned char)d->src[s + i];
    sh_buf_putc(out, (char)(c < 0x20 && c != '\t' ? ' ' : c));
  }
  if (shown < n) sh_buf_puts(out, " ...");
  sh_buf_printf(out, "\n %*s | ", gw, "");
  size_t col = (size_t)e->span.off >= s ? e->span.off - s : 0;
  if (col > shown) col = shown;
  for (size_t i = 0; i < col; i++) sh_buf_putc(out, d->src[s + i] == '\t' ? '\t' : ' ');
  sh_buf_putc(out, '^');
  size_t len = e->span.len;
  if (col + len > shown) len = shown > col ? shown - col : 0;
  for (size_t i = 1; i < len; i++) sh_buf_putc(out, '~');
  sh_buf_putc(out, '\n');
}

void sh_diags_render(const sh_diags *d, sh_buf *out) {
  for (int i = 0; i < d->n; i++) render_one(d, &d->v[i], out);
  if (d->n_errors > SH_DIAG_MAX_ERRORS)
    sh_buf_printf(out, "%s: error: too many errors; stopped after %d\n", d->file,
                  SH_DIAG_MAX_ERRORS);
}
