/*
 * diag.h — diagnostics of the model language: source spans, the list of
 * errors (and notes) found while lexing, parsing and checking one source,
 * and their rendering as
 *
 *   model.sf:12:9: error: expected f32[H] but got f32[2*H]
 *      12 |   let c = h + cat(h, h);
 *         |           ^~~~~~~~~~~~~
 *
 * At most SH_DIAG_MAX_ERRORS errors are kept; further ones are counted and
 * rendering ends with "too many errors". Recording never allocates.
 */
#ifndef SH_LANG_DIAG_H
#define SH_LANG_DIAG_H

#include "base/arena.h"
#include "base/buf.h"

/* A byte range of the source with the 1-based line and column of its start. */
typedef struct sh_span {
  uint32_t off, len;
  uint32_t line, col;
} sh_span;

#define SH_DIAG_MAX_ERRORS 20
#define SH_DIAG_MSG_MAX 400

typedef enum sh_diag_kind { SH_DIAG_ERROR, SH_DIAG_NOTE } sh_diag_kind;

typedef struct sh_diag {
  sh_diag_kind kind;
  sh_span span;
  char msg[SH_DIAG_MSG_MAX];
} sh_diag;

typedef struct sh_diags {
  const char *file;  /* name used in messages */
  const char *src;   /* the source (not owned) */
  size_t len;
  sh_diag v[2 * SH_DIAG_MAX_ERRORS];
  int n;            /* entries in v */
  int n_errors;     /* errors reported (including dropped ones) */
  bool dropping;    /* the last error was dropped: drop its notes too */
} sh_diags;

void sh_diags_init(sh_diags *d, const char *file, const char *src, size_t len);
void sh_diag_error(sh_diags *d, sh_span at, const char *fmt, ...) SH_PRINTF(3, 4);
/* A note attached to the previous error (e.g. "first defined here"). */
void sh_diag_note(sh_diags *d, sh_span at, const char *fmt, ...) SH_PRINTF(3, 4);
static inline bool sh_diags_failed(const sh_diags *d) { return d->n_errors > 0; }
/* True once an error beyond the cap was reported (and dropped): callers stop. */
static inline bool sh_diags_full(const sh_diags *d) { return d->n_errors > SH_DIAG_MAX_ERRORS; }

/* Appends every diagnostic with its source line and caret to out. */
void sh_diags_render(const sh_diags *d, sh_buf *out);

/* A span covering a through b (b after a). */
sh_span sh_span_join(sh_span a, sh_span b);

#endif
