/*
 * json.c — the strict JSON reader behind json.h: a recursive-descent parser
 * (depth bounded) that builds the DOM in the document's bump memory, using
 * two scratch stacks so that every array and object is stored contiguously
 * once it closes. Also the JSON string writer and the UTF-8 validator.
 */
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- memory */

typedef struct doc_chunk {
  struct doc_chunk *next;
  size_t size; /* bytes allocated for this chunk, header included */
} doc_chunk;

#define CHUNK_HDR sh_align_up(sizeof(doc_chunk), 16)
#define CHUNK_MIN ((size_t)16 << 10)
#define CHUNK_MAX ((size_t)1 << 20)

struct sh_json_doc {
  sheaf_ctx *ctx;
  doc_chunk *chunks;
  unsigned char *cur; /* next free byte of the newest chunk */
  size_t left;        /* free bytes after cur */
  size_t next_size;   /* payload size of the next chunk */
  sh_json root;
};

/* 8-byte aligned memory from the document, or NULL (last error set). */
static void *doc_alloc(sh_json_doc *d, size_t n) {
  if (n > SIZE_MAX - 64) {
    sh_fail(d->ctx, SHEAF_ERR_NOMEM, "out of memory: %zu bytes", n);
    return NULL;
  }
  n = sh_align_up(n ? n : 1, 8);
  if (n > d->left) {
    size_t payload = d->next_size > n ? d->next_size : n;
    size_t total = CHUNK_HDR + payload;
    doc_chunk *c = sh_malloc(d->ctx, total);
    if (!c) return NULL;
    c->next = d->chunks;
    c->size = total;
    d->chunks = c;
    d->cur = (unsigned char *)c + CHUNK_HDR;
    d->left = payload;
    if (d->next_size < CHUNK_MAX) d->next_size *= 2;
  }
  void *p = d->cur;
  d->cur += n;
  d->left -= n;
  return p;
}

/* Gives back the tail of the most recent allocation p (of `had` bytes),
 * keeping its first `keep` bytes. */
static void doc_trim(sh_json_doc *d, void *p, size_t had, size_t keep) {
  had = sh_align_up(had ? had : 1, 8);
  keep = sh_align_up(keep ? keep : 1, 8);
  if ((unsigned char *)p + had == d->cur && keep <= had) {
    d->cur -= had - keep;
    d->left += had - keep;
  }
}

void sh_json_doc_free(sh_json_doc *doc) {
  if (!doc) return;
  sheaf_ctx *ctx = doc->ctx;
  for (doc_chunk *c = doc->chunks; c;) {
    doc_chunk *next = c->next;
    sh_free(ctx, c, c->size);
    c = next;
  }
  sh_free(ctx, doc, sizeof *doc);
}

const sh_json *sh_json_root(const sh_json_doc *doc) { return doc ? &doc->root : NULL; }

/* ----------------------------------------------------------------- UTF-8 */

/* Length (1..4) of the well-formed UTF-8 sequence at s[0..n), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  if (c < 0x80) return 1;
  size_t len;
  unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c == 0xE0) len = 3, lo = 0xA0;
  else if (c >= 0xE1 && c <= 0xEC) len = 3;
  else if (c == 0xED) len = 3, hi = 0x9F; /* no UTF-16 surrogates */
  else if (c >= 0xEE && c <= 0xEF) len = 3;
  else if (c == 0xF0) len = 4, lo = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) len = 4;
  else if (c == 0xF4) len = 4, hi = 0x8F; /* nothing above U+10FFFF */
  else return 0;
  if (n < len) return 0;
  if (s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < len; i++)
    if ((s[i] & 0xC0) != 0x80) return 0;
  return len;
}

bool sh_utf8_valid(const char *s, size_t len) {
  const unsigned char *u = (const unsigned char *)s;
  size_t i = 0;
  while (i < len) {
    if (u[i] < 0x80) {
      i++;
      continue;
    }
    size_t k = utf8_seq(u + i, len - i);
    if (!k) return false;
    i += k;
  }
  return true;
}

static size_t utf8_put(unsigned char *o, uint32_t cp) {
  if (cp < 0x80) {
    o[0] = (unsigned char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (unsigned char)(0xC0 | (cp >> 6));
    o[1] = (unsigned char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (unsigned char)(0xE0 | (cp >> 12));
    o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (unsigned char)(0xF0 | (cp >> 18));
  o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
  o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
  o[3] = (unsigned char)(0x80 | (cp & 0x3F));
  return 4;
}

/* ---------------------------------------------------------------- parser */

typedef struct parser {
  sheaf_ctx *ctx;
  sh_json_doc *doc;
  const unsigned char *s;
  size_t len, pos;
  int depth, max_depth;
  sh_json *vals; /* scratch: elements of the arrays being parsed */
  size_t nvals, capvals;
  sh_json_member *mems; /* scratch: members of the objects being parsed */
  size_t nmems, capmems;
  sheaf_status st;
  sh_json_error *err;
} parser;

static bool fail(parser *p, size_t pos, const char *fmt, ...) SH_PRINTF(3, 4);
static bool fail(parser *p, size_t pos, const char *fmt, ...) {
  if (p->st != SHEAF_OK) return false;
  p->st = SHEAF_ERR_PARSE;
  sh_json_error *e = p->err;
  e->pos = pos;
  e->line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < pos && i < p->len; i++)
    if (p->s[i] == '\n') {
      e->line++;
      line_start = i + 1;
    }
  e->col = pos - line_start + 1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  return false;
}

static bool nomem(parser *p) {
  if (p->st == SHEAF_OK) p->st = SHEAF_ERR_NOMEM;
  return false;
}

/* Describes the byte at pos for messages: "'x'", "byte 0xC3" or "end of input". */
static const char *what_at(const parser *p, size_t pos, char *buf, size_t cap) {
  if (pos >= p->len) return "end of input";
  unsigned c = p->s[pos];
  if (c > 0x20 && c < 0x7F) snprintf(buf, cap, "'%c'", (char)c);
  else snprintf(buf, cap, "byte 0x%02X", c);
  return buf;
}

static void skip_ws(parser *p) {
  while (p->pos < p->len) {
    unsigned char c = p->s[p->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    p->pos++;
  }
}

static int hexval(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Four hex digits at s[i..i+4) within end, or -1. */
static long hex4(const parser *p, size_t i, size_t end) {
  if (end - i < 4) return -1;
  long v = 0;
  for (size_t k = 0; k < 4; k++) {
    int h = hexval(p->s[i + k]);
    if (h < 0) return -1;
    v = v * 16 + h;
  }
  return v;
}

/* A string starting at the '"' at p->pos; decoded into document memory. */
static bool parse_string(parser *p, const char **out, size_t *out_len) {
  size_t start = p->pos, i = start + 1;
  while (i < p->len && p->s[i] != '"') i += p->s[i] == '\\' ? 2 : 1;
  if (i >= p->len) return fail(p, start, "unterminated string");
  size_t end = i, raw = end - (start + 1);
  unsigned char *o = doc_alloc(p->doc, raw + 1);
  if (!o) return nomem(p);
  size_t n = 0;
  i = start + 1;
  while (i < end) {
    unsigned char c = p->s[i];
    if (c == '\\') {
      if (i + 1 >= end) return fail(p, i, "unterminated escape");
      unsigned char e = p->s[i + 1];
      switch (e) {
      case '"': o[n++] = '"'; break;
      case '\\': o[n++] = '\\'; break;
      case '/': o[n++] = '/'; break;
      case 'b': o[n++] = '\b'; break;
      case 'f': o[n++] = '\f'; break;
      case 'n': o[n++] = '\n'; break;
      case 'r': o[n++] = '\r'; break;
      case 't': o[n++] = '\t'; break;
      case 'u': {
        long cp = hex4(p, i + 2, end);
        if (cp < 0) return fail(p, i, "invalid \\u escape: expected 4 hex digits");
        size_t used = 6;
        if (cp >= 0xDC00 && cp <= 0xDFFF)
          return fail(p, i, "lone low surrogate \\u%04lX", (unsigned long)cp);
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          long lo = -1;
          if (end - i >= 12 && p->s[i + 6] == '\\' && p->s[i + 7] == 'u')
            lo = hex4(p, i + 8, end);
          if (lo < 0xDC00 || lo > 0xDFFF)
            return fail(p, i, "lone high surrogate \\u%04lX (not followed by \\uDC00-\\uDFFF)",
                        (unsigned long)cp);
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          used = 12;
        }
        n += utf8_put(o + n, (uint32_t)cp);
        i += used;
        continue;
      }
      default: {
        char b[16];
        return fail(p, i, "invalid escape '\\' followed by %s", what_at(p, i + 1, b, sizeof b));
      }
      }
      i += 2;
    } else if (c < 0x20) {
      return fail(p, i, "control character 0x%02X in string (must be escaped)", c);
    } else if (c < 0x80) {
      o[n++] = c;
      i++;
    } else {
      size_t k = utf8_seq(p->s + i, end - i);
      if (!k) return fail(p, i, "invalid UTF-8 (byte 0x%02X) in string", c);
      memcpy(o + n, p->s + i, k);
      n += k;
      i += k;
    }
  }
  o[n] = '\0';
  doc_trim(p->doc, o, raw + 1, n + 1);
  p->pos = end + 1;
  *out = (const char *)o;
  *out_len = n;
  return true;
}

static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

static bool parse_number(parser *p, sh_json *v) {
  size_t start = p->pos, i = start;
  const unsigned char *s = p->s;
  unsigned flags = SH_JSON_INT;
  uint64_t mag = 0;
  if (i < p->len && s[i] == '-') {
    flags |= SH_JSON_NEG;
    i++;
  }
  if (i >= p->len || !is_digit(s[i])) {
    char b[16];
    return fail(p, i, "invalid number: expected a digit, found %s", what_at(p, i, b, sizeof b));
  }
  if (s[i] == '0') {
    i++;
    if (i < p->len && is_digit(s[i])) return fail(p, start, "invalid number: leading zero");
  } else {
    while (i < p->len && is_digit(s[i])) {
      unsigned d = s[i] - '0';
      if (mag > (UINT64_MAX - d) / 10) flags |= SH_JSON_BIG;
      else mag = mag * 10 + d;
      i++;
    }
  }
  if (i < p->len && s[i] == '.') {
    flags &= ~(unsigned)(SH_JSON_INT | SH_JSON_BIG);
    i++;
    if (i >= p->len || !is_digit(s[i]))
      return fail(p, i, "invalid number: expected a digit after '.'");
    while (i < p->len && is_digit(s[i])) i++;
  }
  if (i < p->len && (s[i] == 'e' || s[i] == 'E')) {
    flags &= ~(unsigned)(SH_JSON_INT | SH_JSON_BIG);
    i++;
    if (i < p->len && (s[i] == '+' || s[i] == '-')) i++;
    if (i >= p->len || !is_digit(s[i]))
      return fail(p, i, "invalid number: expected a digit in the exponent");
    while (i < p->len && is_digit(s[i])) i++;
  }
  size_t n = i - start;
  char *text = doc_alloc(p->doc, n + 1);
  if (!text) return nomem(p);
  memcpy(text, s + start, n);
  text[n] = '\0';
  v->kind = SH_JSON_NUMBER;
  v->flags = flags;
  v->len = n;
  v->u.num.text = text;
  v->u.num.mag = (flags & SH_JSON_INT) && !(flags & SH_JSON_BIG) ? mag : 0;
  if ((flags & SH_JSON_INT) && !(flags & SH_JSON_BIG))
    v->u.num.value = (flags & SH_JSON_NEG) ? -(double)mag : (double)mag;
  else
    v->u.num.value = strtod(text, NULL); /* grammar already checked */
  p->pos = i;
  return true;
}

static bool parse_value(parser *p, sh_json *v);

static bool enter(parser *p) {
  if (++p->depth > p->max_depth)
    return fail(p, p->pos, "nesting deeper than %d levels", p->max_depth);
  return true;
}

static bool parse_array(parser *p, sh_json *v) {
  if (!enter(p)) return false;
  p->pos++; /* '[' */
  size_t base = p->nvals;
  skip_ws(p);
  if (p->pos < p->len && p->s[p->pos] == ']') {
    p->pos++;
  } else {
    for (;;) {
      sh_json item;
      if (!parse_value(p, &item)) return false;
      if (p->nvals == p->capvals) {
        size_t nc = p->capvals ? 2 * p->capvals : 64;
        sh_json *nv = sh_realloc(p->ctx, p->vals, p->capvals * sizeof *nv, nc * sizeof *nv);
        if (!nv) return nomem(p);
        p->vals = nv;
        p->capvals = nc;
      }
      p->vals[p->nvals++] = item;
      skip_ws(p);
      if (p->pos < p->len && p->s[p->pos] == ',') {
        p->pos++;
        continue;
      }
      if (p->pos < p->len && p->s[p->pos] == ']') {
        p->pos++;
        break;
      }
      char b[16];
      return fail(p, p->pos, "expected ',' or ']' in array, found %s",
                  what_at(p, p->pos, b, sizeof b));
    }
  }
  size_t n = p->nvals - base;
  sh_json *items = NULL;
  if (n) {
    items = doc_alloc(p->doc, n * sizeof *items);
    if (!items) return nomem(p);
    memcpy(items, p->vals + base, n * sizeof *items);
  }
  p->nvals = base;
  v->kind = SH_JSON_ARRAY;
  v->len = n;
  v->u.items = items;
  p->depth--;
  return true;
}

static bool parse_object(parser *p, sh_json *v) {
  if (!enter(p)) return false;
  p->pos++; /* '{' */
  size_t base = p->nmems;
  skip_ws(p);
  if (p->pos < p->len && p->s[p->pos] == '}') {
    p->pos++;
  } else {
    for (;;) {
      char b[16];
      if (p->pos >= p->len || p->s[p->pos] != '"')
        return fail(p, p->pos, "expected a string key in object, found %s",
                    what_at(p, p->pos, b, sizeof b));
      sh_json_member m;
      memset(&m, 0, sizeof m);
      m.key_pos = p->pos;
      if (!parse_string(p, &m.key, &m.key_len)) return false;
      skip_ws(p);
      if (p->pos >= p->len || p->s[p->pos] != ':')
        return fail(p, p->pos, "expected ':' after object key, found %s",
                    what_at(p, p->pos, b, sizeof b));
      p->pos++;
      if (!parse_value(p, &m.value)) return false;
      if (p->nmems == p->capmems) {
        size_t nc = p->capmems ? 2 * p->capmems : 64;
        sh_json_member *nm =
            sh_realloc(p->ctx, p->mems, p->capmems * sizeof *nm, nc * sizeof *nm);
        if (!nm) return nomem(p);
        p->mems = nm;
        p->capmems = nc;
      }
      p->mems[p->nmems++] = m;
      skip_ws(p);
      if (p->pos < p->len && p->s[p->pos] == ',') {
        p->pos++;
        skip_ws(p);
        continue;
      }
      if (p->pos < p->len && p->s[p->pos] == '}') {
        p->pos++;
        break;
      }
      return fail(p, p->pos, "expected ',' or '}' in object, found %s",
                  what_at(p, p->pos, b, sizeof b));
    }
  }
  size_t n = p->nmems - base;
  sh_json_member *mems = NULL;
  if (n) {
    mems = doc_alloc(p->doc, n * sizeof *mems);
    if (!mems) return nomem(p);
    memcpy(mems, p->mems + base, n * sizeof *mems);
  }
  p->nmems = base;
  v->kind = SH_JSON_OBJECT;
  v->len = n;
  v->u.members = mems;
  p->depth--;
  return true;
}

static bool literal(parser *p, const char *word, size_t n) {
  if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0) {
    char b[16];
    return fail(p, p->pos, "expected a value, found %s", what_at(p, p->pos, b, sizeof b));
  }
  p->pos += n;
  return true;
}

static bool parse_value(parser *p, sh_json *v) {
  memset(v, 0, sizeof *v);
  skip_ws(p);
  v->pos = p->pos;
  if (p->pos >= p->len) return fail(p, p->pos, "unexpected end of input, expected a value");
  switch (p->s[p->pos]) {
  case '{': return parse_object(p, v);
  case '[': return parse_array(p, v);
  case '"':
    v->kind = SH_JSON_STRING;
    return parse_string(p, &v->u.str, &v->len);
  case 't':
    v->kind = SH_JSON_BOOL;
    v->u.boolean = true;
    return literal(p, "true", 4);
  case 'f':
    v->kind = SH_JSON_BOOL;
    return literal(p, "false", 5);
  case 'n':
    v->kind = SH_JSON_NULL;
    return literal(p, "null", 4);
  default:
    if (p->s[p->pos] == '-' || is_digit(p->s[p->pos])) return parse_number(p, v);
    {
      char b[16];
      return fail(p, p->pos, "expected a value, found %s", what_at(p, p->pos, b, sizeof b));
    }
  }
}

sheaf_status sh_json_parse(sheaf_ctx *ctx, const char *text, size_t len, int max_depth,
                           sh_json_doc **out, sh_json_error *err) {
  *out = NULL;
  sh_json_error local;
  if (!err) err = &local;
  memset(err, 0, sizeof *err);
  sh_json_doc *doc = sh_malloc(ctx, sizeof *doc);
  if (!doc) return SHEAF_ERR_NOMEM;
  memset(doc, 0, sizeof *doc);
  doc->ctx = ctx;
  doc->next_size = CHUNK_MIN;
  parser p = {.ctx = ctx,
              .doc = doc,
              .s = (const unsigned char *)text,
              .len = len,
              .max_depth = max_depth > 0 ? max_depth : SH_JSON_DEFAULT_DEPTH,
              .st = SHEAF_OK,
              .err = err};
  if (parse_value(&p, &doc->root)) {
    skip_ws(&p);
    if (p.pos < p.len) {
      char b[16];
      fail(&p, p.pos, "unexpected %s after the JSON value", what_at(&p, p.pos, b, sizeof b));
    }
  }
  sh_free(ctx, p.vals, p.capvals * sizeof *p.vals);
  sh_free(ctx, p.mems, p.capmems * sizeof *p.mems);
  if (p.st != SHEAF_OK) {
    sh_json_doc_free(doc);
    if (p.st == SHEAF_ERR_PARSE)
      sh_fail(ctx, SHEAF_ERR_PARSE, "line %zu, column %zu: %s", err->line, err->col, err->msg);
    return p.st;
  }
  *out = doc;
  return SHEAF_OK;
}

/* --------------------------------------------------------------- helpers */

const char *sh_json_kind_name(sh_json_kind kind) {
  switch (kind) {
  case SH_JSON_NULL: return "null";
  case SH_JSON_BOOL: return "boolean";
  case SH_JSON_NUMBER: return "number";
  case SH_JSON_STRING: return "string";
  case SH_JSON_ARRAY: return "array";
  case SH_JSON_OBJECT: return "object";
  }
  return "?";
}

const sh_json *sh_json_get(const sh_json *obj, const char *key) {
  if (!obj || obj->kind != SH_JSON_OBJECT) return NULL;
  size_t kl = strlen(key);
  for (size_t i = 0; i < obj->len; i++) {
    const sh_json_member *m = &obj->u.members[i];
    if (m->key_len == kl && memcmp(m->key, key, kl) == 0) return &m->value;
  }
  return NULL;
}

bool sh_json_u64(const sh_json *v, uint64_t *out) {
  if (!v || v->kind != SH_JSON_NUMBER) return false;
  if (!(v->flags & SH_JSON_INT) || (v->flags & (SH_JSON_BIG | SH_JSON_NEG))) return false;
  *out = v->u.num.mag;
  return true;
}

bool sh_json_i64(const sh_json *v, int64_t *out) {
  if (!v || v->kind != SH_JSON_NUMBER) return false;
  if (!(v->flags & SH_JSON_INT) || (v->flags & SH_JSON_BIG)) return false;
  uint64_t m = v->u.num.mag;
  if (v->flags & SH_JSON_NEG) {
    if (m > (uint64_t)INT64_MAX + 1) return false;
    *out = m == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)m;
  } else {
    if (m > (uint64_t)INT64_MAX) return false;
    *out = (int64_t)m;
  }
  return true;
}

void sh_json_put_string(sh_buf *b, const char *s, size_t len) {
  static const char hex[] = "0123456789abcdef";
  sh_buf_putc(b, '"');
  size_t run = 0; /* start of the pending unescaped run */
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    sh_buf_put(b, s + run, i - run);
    run = i + 1;
    char e[6] = {'\\', 0, 0, 0, 0, 0};
    size_t en = 2;
    switch (c) {
    case '"': e[1] = '"'; break;
    case '\\': e[1] = '\\'; break;
    case '\b': e[1] = 'b'; break;
    case '\f': e[1] = 'f'; break;
    case '\n': e[1] = 'n'; break;
    case '\r': e[1] = 'r'; break;
    case '\t': e[1] = 't'; break;
    default:
      e[1] = 'u';
      e[2] = '0';
      e[3] = '0';
      e[4] = hex[c >> 4];
      e[5] = hex[c & 15];
      en = 6;
    }
    sh_buf_put(b, e, en);
  }
  sh_buf_put(b, s + run, len - run);
  sh_buf_putc(b, '"');
}
