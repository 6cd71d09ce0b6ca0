/*
 * json.h — a small strict JSON reader (RFC 8259) building an immutable DOM,
 * plus the string escaping used by JSON writers. Used by the safetensors
 * header; meant for any other JSON Sheaf reads (configs, benchmarks).
 *
 * Strictness: UTF-8 is validated (no overlong forms, no encoded surrogates,
 * nothing above U+10FFFF), control characters inside strings are rejected,
 * every escape including \uXXXX surrogate pairs is decoded to UTF-8 and lone
 * surrogates are rejected, nesting is bounded, and nothing but whitespace
 * may follow the top-level value. Duplicate object keys are kept (callers
 * decide; lookups return the first).
 *
 * All nodes and decoded strings live in the document's own memory (chunks
 * from the context allocator), freed at once by sh_json_doc_free; the input
 * text is not referenced after parsing.
 */
#ifndef SH_JSON_H
#define SH_JSON_H

#include "base/base.h"
#include "base/buf.h"

typedef enum sh_json_kind {
  SH_JSON_NULL = 0,
  SH_JSON_BOOL,
  SH_JSON_NUMBER,
  SH_JSON_STRING,
  SH_JSON_ARRAY,
  SH_JSON_OBJECT
} sh_json_kind;

/* Number flags. */
enum {
  SH_JSON_INT = 1u << 0,      /* integer literal: no fraction, no exponent */
  SH_JSON_NEG = 1u << 1,      /* leading minus sign (also for "-0") */
  SH_JSON_BIG = 1u << 2       /* an integer literal whose magnitude exceeds UINT64_MAX */
};

typedef struct sh_json sh_json;
typedef struct sh_json_member sh_json_member;

struct sh_json {
  sh_json_kind kind;
  unsigned flags; /* numbers: SH_JSON_INT | SH_JSON_NEG | SH_JSON_BIG */
  size_t pos;     /* byte offset of the value's first character in the input */
  size_t len;     /* string: decoded bytes; number: literal bytes; array/object: count */
  union {
    bool boolean;
    struct {
      const char *text; /* the literal as written, NUL-terminated */
      uint64_t mag;     /* integers: magnitude (valid unless SH_JSON_BIG) */
      double value;     /* nearest double */
    } num;
    const char *str;                /* NUL-terminated UTF-8; may hold NULs (see len) */
    const sh_json *items;           /* array elements */
    const sh_json_member *members;  /* object members in document order */
  } u;
};

struct sh_json_member {
  const char *key; /* NUL-terminated UTF-8; may hold NULs (see key_len) */
  size_t key_len;
  size_t key_pos;  /* byte offset of the key's opening quote */
  sh_json value;
};

typedef struct sh_json_doc sh_json_doc;

/* Where and why parsing failed. line and col are 1-based (col counts bytes). */
typedef struct sh_json_error {
  size_t pos, line, col;
  char msg[160];
} sh_json_error;

#define SH_JSON_DEFAULT_DEPTH 128

/* Parses text[0..len) (no NUL needed). max_depth bounds array/object nesting
 * (0 = SH_JSON_DEFAULT_DEPTH). Returns SHEAF_OK with *out set; SHEAF_ERR_NOMEM
 * (last error set); or SHEAF_ERR_PARSE with the context's last error set to
 * "line L, column C: <msg>" and, when err is not NULL, *err filled in, so that
 * the caller can re-report with its own file name and status. */
sheaf_status sh_json_parse(sheaf_ctx *ctx, const char *text, size_t len, int max_depth,
                           sh_json_doc **out, sh_json_error *err);
const sh_json *sh_json_root(const sh_json_doc *doc);
void sh_json_doc_free(sh_json_doc *doc); /* NULL is fine */

/* "null", "boolean", "number", "string", "array", "object". */
const char *sh_json_kind_name(sh_json_kind kind);

/* First member of an object with this key, or NULL (also when obj is not an
 * object). Linear in the number of members. */
const sh_json *sh_json_get(const sh_json *obj, const char *key);

/* An integer literal that fits the type (no fraction, no exponent, no "-0"
 * for u64). */
bool sh_json_u64(const sh_json *v, uint64_t *out);
bool sh_json_i64(const sh_json *v, int64_t *out);

/* Writing: appends s[0..len) as a quoted JSON string: '"' and '\\' escaped,
 * control characters as \n \t ... or \u00XX, everything else (UTF-8
 * included) as is. */
void sh_json_put_string(sh_buf *b, const char *s, size_t len);

/* True when s[0..len) is well-formed UTF-8 (the same rules as the reader). */
bool sh_utf8_valid(const char *s, size_t len);

#endif
