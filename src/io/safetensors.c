/*
 * safetensors.c — the safetensors format: a validating, zero-copy reader
 * (the file is mapped once; tensors are views into the mapping, which is
 * reference-counted so views outlive sheaf_st_close) and a streaming writer
 * (header in memory, tensor data through sh_out: a temporary file renamed
 * over a regular file when complete, or straight into a device or FIFO).
 *
 * Layout: u64 little-endian N, N bytes of JSON header (an object mapping
 * tensor names to {"dtype", "shape", "data_offsets": [begin, end]} plus an
 * optional "__metadata__" object of strings), then the data region; offsets
 * are relative to byte 8 + N. The reader enforces every rule of the
 * reference implementation (header size, JSON, dtypes, offsets that tile the
 * data region exactly) and more: no duplicate names, no unknown fields, no
 * NUL in names or metadata (they are returned as C strings).
 */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/file.h"
#include "io/json.h"
#include "tensor/tensor.h"

#define ST_MAX_DEPTH 8 /* the format needs 3 (object, entry, shape array) */
#define ST_META_KEY "__metadata__"
#define ST_WRITE_CHUNK ((size_t)1 << 20)

/* ------------------------------------------------------------ the object */

/* A mapping shared by the file object and the zero-copy views. */
typedef struct st_map {
  atomic_long refs;
  sheaf_ctx *ctx;
  sh_mapping m;
} st_map;

typedef struct st_entry {
  const char *name;
  const int64_t *shape;
  int rank;
  sheaf_dtype dtype;
  uint64_t begin, end; /* in the data region */
  size_t order;        /* position in the header */
} st_entry;

struct sheaf_st_file {
  sheaf_ctx *ctx;
  char *name; /* for messages */
  st_map *map; /* NULL over caller memory */
  const unsigned char *data;
  size_t data_size;
  size_t n;
  st_entry *entries;     /* sorted by data offset */
  st_entry **by_name;    /* sorted by name (strcmp) */
  size_t n_meta;
  const char **meta;     /* key, value, key, value, ... in header order */
  char *strings;         /* names, metadata keys and values */
  size_t strings_size;
  int64_t *dims;         /* every shape */
  size_t n_dims;
};

static void map_unref(st_map *map) {
  if (!map || atomic_fetch_sub(&map->refs, 1) != 1) return;
  sheaf_ctx *ctx = map->ctx;
  sh_file_unmap(&map->m);
  sh_free(ctx, map, sizeof *map);
}

/* Storage release callback of zero-copy views. */
static void map_release(void *user, void *data) {
  (void)data;
  map_unref(user);
}

void sheaf_st_close(sheaf_st_file *f) {
  if (!f) return;
  sheaf_ctx *ctx = f->ctx;
  sh_free(ctx, f->entries, f->n * sizeof *f->entries);
  sh_free(ctx, f->by_name, f->n * sizeof *f->by_name);
  sh_free(ctx, f->meta, 2 * f->n_meta * sizeof *f->meta);
  sh_free(ctx, f->strings, f->strings_size);
  sh_free(ctx, f->dims, f->n_dims * sizeof *f->dims);
  sh_strfree(ctx, f->name);
  map_unref(f->map);
  sh_free(ctx, f, sizeof *f);
}

/* ------------------------------------------------------------- messages */

/* A name or literal for a message: at most 64 bytes, control characters as
 * \xNN, "..." when cut. */
typedef struct st_q {
  char s[80];
} st_q;

static const char *quote(st_q *q, const char *s, size_t len) {
  const size_t lim = 64;
  size_t o = 0, i = 0;
  for (; i < len && o < lim; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c < 0x20 || c == 0x7F) {
      if (o + 4 > lim) break;
      snprintf(q->s + o, 5, "\\x%02X", c);
      o += 4;
    } else {
      q->s[o++] = (char)c;
    }
  }
  if (i < len) {
    while (o > 0 && ((unsigned char)q->s[o - 1] & 0xC0) == 0x80) o--;
    if (o > 0 && (unsigned char)q->s[o - 1] >= 0xC0) o--;
    memcpy(q->s + o, "...", 4);
  } else {
    q->s[o] = '\0';
  }
  return q->s;
}

static const char *quote_c(st_q *q, const char *s) { return quote(q, s, strlen(s)); }

static const char *shape_str(int rank, const int64_t *shape, char *buf, size_t cap) {
  return sh_shape_str(rank, shape, buf, cap);
}

/* --------------------------------------------------------------- reading */

static uint64_t le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static bool key_is(const sh_json_member *m, const char *k) {
  size_t n = strlen(k);
  return m->key_len == n && memcmp(m->key, k, n) == 0;
}

/* Item i of the array `field` of tensor `tn` as an unsigned 64-bit integer. */
static sheaf_status st_u64_item(sheaf_st_file *f, const char *tn, const char *field, size_t i,
                                const sh_json *v, uint64_t *out) {
  sheaf_ctx *ctx = f->ctx;
  if (v->kind != SH_JSON_NUMBER)
    return sh_fail(ctx, SHEAF_ERR_FORMAT, "%s: tensor '%s': %s[%zu] must be an integer, found %s",
                   f->name, tn, field, i, sh_json_kind_name(v->kind));
  if (sh_json_u64(v, out)) return SHEAF_OK;
  st_q q;
  const char *lit = quote(&q, v->u.num.text, v->len);
  const char *why = !(v->flags & SH_JSON_INT) ? "is not an integer"
                    : (v->flags & SH_JSON_NEG) ? "is negative"
                                               : "does not fit in 64 bits";
  return sh_fail(ctx, SHEAF_ERR_FORMAT, "%s: tensor '%s': %s[%zu] = %s %s", f->name, tn, field, i,
                 lit, why);
}

static sheaf_status st_dtype(sheaf_st_file *f, const char *tn, const sh_json *v,
                             sheaf_dtype *out) {
  if (v->kind != SH_JSON_STRING)
    return sh_fail(f->ctx, SHEAF_ERR_FORMAT, "%s: tensor '%s': dtype must be a string, found %s",
                   f->name, tn, sh_json_kind_name(v->kind));
  for (int d = 0; d < SHEAF_DTYPE_COUNT; d++) {
    const char *nm = sheaf_dtype_name((sheaf_dtype)d);
    if (strlen(nm) == v->len && memcmp(nm, v->u.str, v->len) == 0) {
      *out = (sheaf_dtype)d;
      return SHEAF_OK;
    }
  }
  st_q q;
  return sh_fail(f->ctx, SHEAF_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%s'", f->name, tn,
                 quote(&q, v->u.str, v->len));
}

/* Validates one tensor entry; its shape goes to dims (room for its rank was
 * reserved by the caller). */
static sheaf_status st_entry_parse(sheaf_st_file *f, const char *tn, const sh_json *v,
                                   int64_t *dims, st_entry *e) {
  sheaf_ctx *ctx = f->ctx;
  const char *fn = f->name;
  if (v->kind != SH_JSON_OBJECT)
    return sh_fail(ctx, SHEAF_ERR_FORMAT, "%s: tensor '%s': expected an object, found %s", fn,
                   tn, sh_json_kind_name(v->kind));
  const sh_json *jd = NULL, *js = NULL, *jo = NULL;
  for (size_t i = 0; i < v->len; i++) {
    const sh_json_member *m = &v->u.members[i];
    const sh_json **slot = key_is(m, "dtype")          ? &jd
                           : key_is(m, "shape")        ? &js
                           : key_is(m, "data_offsets") ? &jo
                                                       : NULL;
    st_q q;
    if (!slot)
      return sh_fail(ctx, SHEAF_ERR_FORMAT,
                     "%s: tensor '%s': unexpected field '%s' (expected dtype, shape, data_offsets)",
                     fn, tn, quote(&q, m->key, m->key_len));
    if (*slot)
      return sh_fail(ctx, SHEAF_ERR_FORMAT, "%s: tensor '%s': duplicate field '%s'", fn, tn,
                     m->key);
    *slot = &m->value;
  }
  if (!jd || !js || !jo)
    return sh_fail(ctx, SHEAF_ERR_FORMAT, "%s: tensor '%s': missing field '%s'", fn, tn,
                   !jd ? "dtype" : !js ? "shape" : "data_offsets");

  sheaf_status st = st_dtype(f, tn, jd, &e->dtype);
  if (st != SHEAF_OK) return st;

  if (js->kind != SH_JSON_ARRAY)
    return sh_fail(ctx, SHEAF_ERR_FORMAT, "%s: tensor '%s': shape must be an array, found %s", fn,
                   tn, sh_json_kind_name(js->kind));
  if (js->len > SH_TENSOR_MAX_RANK)
    return sh_fail(ctx, SHEAF_ERR_FORMAT, "%s: tensor '%s': rank %zu exceeds the limit of %d", fn,
                   tn, js->len, SH_TENSOR_MAX_RANK);
  uint64_t numel = 1;
  bool overflow = false;
  for (size_t i = 0; i < js->len; i++) {
    uint64_t d;
    st = st_u64_item(f, tn, "shape", i, &js->u.items[i], &d);
    if (st != SHEAF_OK) return st;
    if (d > (uint64_t)INT64_MAX)
      return sh_fail(ctx, SHEAF_ERR_FORMAT, "%s: tensor '%s': shape[%zu] = %llu exceeds 2^63 - 1",
                     fn, tn, i, (unsigned long long)d);
    dims[i] = (int64_t)d;
    /* in order, like the reference: a 0 after an overflow does not save it */
    if (!overflow && __builtin_mul_overflow(numel, d, &numel)) overflow = true;
  }
  e->rank = (int)js->len;
  e->shape = dims;
  size_t es = sheaf_dtype_size(e->dtype);
  uint64_t nbytes = 0;
  char sb[128];
  if (overflow || numel > (uint64_t)INT64_MAX || __builtin_mul_overflow(numel, (uint64_t)es, &nbytes))
    return sh_fail(ctx, SHEAF_ERR_FORMAT, "%s: tensor '%s': shape %s overflows 64 bits", fn, tn,
                   shape_str(e->rank, dims, sb, sizeof sb));

  if (jo->kind != SH_JSON_ARRAY)
    return sh_fail(ctx, SHEAF_ERR_FORMAT,
                   "%s: tensor '%s': data_offsets must be an array of 2 integers, found %s", fn, tn,
                   sh_json_kind_name(jo->kind));
  if (jo->len != 2)
    return sh_fail(ctx, SHEAF_ERR_FORMAT,
                   "%s: tensor '%s': data_offsets has %zu entries, expected 2", fn, tn, jo->len);
  st = st_u64_item(f, tn, "data_offsets", 0, &jo->u.items[0], &e->begin);
  if (st == SHEAF_OK) st = st_u64_item(f, tn, "data_offsets", 1, &jo->u.items[1], &e->end);
  if (st != SHEAF_OK) return st;
  unsigned long long b = e->begin, en = e->end;
  if (b > en)
    return sh_fail(ctx, SHEAF_ERR_FORMAT,
                   "%s: tensor '%s': data_offsets [%llu, %llu) are reversed (begin > end)", fn, tn,
                   b, en);
  if (en > f->data_size)
    return sh_fail(ctx, SHEAF_ERR_FORMAT,
                   "%s: tensor '%s': data_offsets [%llu, %llu) exceed the data region (%zu bytes)",
                   fn, tn, b, en, f->data_size);
  if (en - b != nbytes)
    return sh_fail(ctx, SHEAF_ERR_FORMAT,
                   "%s: tensor '%s': data_offsets [%llu, %llu) span %llu bytes but %s %s needs %llu",
                   fn, tn, b, en, en - b, sheaf_dtype_name(e->dtype),
                   shape_str(e->rank, dims, sb, sizeof sb), (unsigned long long)nbytes);
  return SHEAF_OK;
}

static int cmp_offset(const void *a, const void *b) {
  const st_entry *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return x->order < y->order ? -1 : x->order > y->order;
}

static int cmp_entry_name(const void *a, const void *b) {
  const st_entry *const *x = a, *const *y = b;
  return strcmp((*x)->name, (*y)->name);
}

static int cmp_str(const void *a, const void *b) {
  const char *const *x = a, *const *y = b;
  return strcmp(*x, *y);
}

static sheaf_status st_metadata(sheaf_st_file *f, const sh_json *meta, char **sp) {
  sheaf_ctx *ctx = f->ctx;
  if (meta->kind == SH_JSON_NULL) return SHEAF_OK; /* the reference accepts null */
  if (meta->kind != SH_JSON_OBJECT)
    return sh_fail(ctx, SHEAF_ERR_FORMAT, "%s: __metadata__ must be an object of strings, found %s",
                   f->name, sh_json_kind_name(meta->kind));
  for (size_t i = 0; i < meta->len; i++) {
    const sh_json_member *m = &meta->u.members[i];
    st_q q;
    const char *k = quote(&q, m->key, m->key_len);
    if (m->value.kind != SH_JSON_STRING)
      return sh_fail(ctx, SHEAF_ERR_FORMAT, "%s: __metadata__ '%s': value must be a string, found %s",
                     f->name, k, sh_json_kind_name(m->value.kind));
    if (memchr(m->key, 0, m->key_len) || memchr(m->value.u.str, 0, m->value.len))
      return sh_fail(ctx, SHEAF_ERR_FORMAT, "%s: __metadata__ '%s': contains a NUL character",
                     f->name, k);
    memcpy(*sp, m->key, m->key_len + 1);
    f->meta[2 * i] = *sp;
    *sp += m->key_len + 1;
    memcpy(*sp, m->value.u.str, m->value.len + 1);
    f->meta[2 * i + 1] = *sp;
    *sp += m->value.len + 1;
  }
  if (f->n_meta < 2) return SHEAF_OK;
  const char **keys = sh_malloc(ctx, f->n_meta * sizeof *keys);
  if (!keys) return sh_fail_prefix(ctx, "%s", f->name);
  for (size_t i = 0; i < f->n_meta; i++) keys[i] = f->meta[2 * i];
  qsort(keys, f->n_meta, sizeof *keys, cmp_str);
  sheaf_status st = SHEAF_OK;
  for (size_t i = 1; i < f->n_meta && st == SHEAF_OK; i++)
    if (strcmp(keys[i - 1], keys[i]) == 0) {
      st_q q;
      st = sh_fail(ctx, SHEAF_ERR_FORMAT, "%s: __metadata__: duplicate key '%s'", f->name,
                   quote_c(&q, keys[i]));
    }
  sh_free(ctx, keys, f->n_meta * sizeof *keys);
  return st;
}

/* Builds the file's tables from the parsed header. */
static sheaf_status st_build(sheaf_st_file *f, const sh_json *root) {
  sheaf_ctx *ctx = f->ctx;
  if (root->kind != SH_JSON_OBJECT)
    return sh_fail(ctx, SHEAF_ERR_FORMAT, "%s: header is a JSON %s, expected an object", f->name,
                   sh_json_kind_name(root->kind));

  /* Sizes first, so that every table is one allocation. */
  const sh_json *meta = NULL;
  size_t nt = 0, nstr = 0, ndims = 0;
  for (size_t i = 0; i < root->len; i++) {
    const sh_json_member *m = &root->u.members[i];
    if (key_is(m, ST_META_KEY)) {
      if (meta)
        return sh_fail(ctx, SHEAF_ERR_FORMAT, "%s: duplicate key '__metadata__'", f->name);
      meta = &m->value;
      continue;
    }
    nt++;
    nstr += m->key_len + 1;
    const sh_json *s = sh_json_get(&m->value, "shape");
    if (s && s->kind == SH_JSON_ARRAY && s->len <= SH_TENSOR_MAX_RANK) ndims += s->len;
  }
  size_t nmeta = 0;
  if (meta && meta->kind == SH_JSON_OBJECT) {
    nmeta = meta->len;
    for (size_t i = 0; i < meta->len; i++) {
      const sh_json_member *m = &meta->u.members[i];
      nstr += m->key_len + 1 + (m->value.kind == SH_JSON_STRING ? m->value.len + 1 : 0);
    }
  }
  if (nt) {
    f->entries = sh_calloc(ctx, nt, sizeof *f->entries);
    if (!f->entries) return sh_fail_prefix(ctx, "%s", f->name);
    f->n = nt;
    f->by_name = sh_calloc(ctx, nt, sizeof *f->by_name);
    if (!f->by_name) return sh_fail_prefix(ctx, "%s", f->name);
  }
  if (ndims) {
    f->dims = sh_calloc(ctx, ndims, sizeof *f->dims);
    if (!f->dims) return sh_fail_prefix(ctx, "%s", f->name);
    f->n_dims = ndims;
  }
  if (nstr) {
    f->strings = sh_malloc(ctx, nstr);
    if (!f->strings) return sh_fail_prefix(ctx, "%s", f->name);
    f->strings_size = nstr;
  }
  if (nmeta) {
    f->meta = sh_calloc(ctx, 2 * nmeta, sizeof *f->meta);
    if (!f->meta) return sh_fail_prefix(ctx, "%s", f->name);
    f->n_meta = nmeta;
  }

  /* Every entry, in header order. */
  char *sp = f->strings;
  int64_t *dp = f->dims;
  size_t k = 0;
  for (size_t i = 0; i < root->len; i++) {
    const sh_json_member *m = &root->u.members[i];
    if (key_is(m, ST_META_KEY)) continue;
    st_q q;
    const char *tn = quote(&q, m->key, m->key_len);
    if (memchr(m->key, 0, m->key_len))
      return sh_fail(ctx, SHEAF_ERR_FORMAT, "%s: tensor name '%s' contains a NUL character",
                     f->name, tn);
    st_entry *e = &f->entries[k];
    sheaf_status st = st_entry_parse(f, tn, &m->value, dp, e);
    if (st != SHEAF_OK) return st;
    memcpy(sp, m->key, m->key_len + 1);
    e->name = sp;
    e->order = k;
    sp += m->key_len + 1;
    if (e->rank) dp += e->rank;
    k++;
  }
  if (meta) {
    sheaf_status st = st_metadata(f, meta, &sp);
    if (st != SHEAF_OK) return st;
  }

  /* Sorted by offset (ties: by end, then header order), then a name index
   * over that order; equal neighbours there are duplicates. */
  if (nt > 1) {
    qsort(f->entries, nt, sizeof *f->entries, cmp_offset);
    for (size_t i = 0; i < nt; i++) f->by_name[i] = &f->entries[i];
    qsort(f->by_name, nt, sizeof *f->by_name, cmp_entry_name);
  } else if (nt == 1) {
    f->by_name[0] = &f->entries[0];
  }
  for (size_t i = 1; i < nt; i++)
    if (strcmp(f->by_name[i - 1]->name, f->by_name[i]->name) == 0) {
      st_q q;
      return sh_fail(ctx, SHEAF_ERR_FORMAT, "%s: duplicate tensor name '%s'", f->name,
                     quote_c(&q, f->by_name[i]->name));
    }

  /* The tensors must tile the data region: each begins where the previous
   * one ended, and the last ends at its end. */
  uint64_t expect = 0;
  for (size_t i = 0; i < nt; i++) {
    const st_entry *e = &f->entries[i];
    st_q q, q2;
    if (e->begin < expect) {
      const st_entry *p = &f->entries[i - 1];
      return sh_fail(ctx, SHEAF_ERR_FORMAT,
                     "%s: tensor '%s': data_offsets [%llu, %llu) overlap tensor '%s' [%llu, %llu)",
                     f->name, quote_c(&q, e->name), (unsigned long long)e->begin,
                     (unsigned long long)e->end, quote_c(&q2, p->name),
                     (unsigned long long)p->begin, (unsigned long long)p->end);
    }
    if (e->begin > expect)
      return sh_fail(ctx, SHEAF_ERR_FORMAT,
                     "%s: tensor '%s': data_offsets [%llu, %llu) leave a hole of %llu bytes at "
                     "offset %llu of the data region",
                     f->name, quote_c(&q, e->name), (unsigned long long)e->begin,
                     (unsigned long long)e->end, (unsigned long long)(e->begin - expect),
                     (unsigned long long)expect);
    expect = e->end;
  }
  if (expect != f->data_size)
    return sh_fail(ctx, SHEAF_ERR_FORMAT,
                   "%s: the data region has %zu bytes but the tensors cover %llu "
                   "(%llu trailing bytes belong to no tensor)",
                   f->name, f->data_size, (unsigned long long)expect,
                   (unsigned long long)(f->data_size - expect));
  return SHEAF_OK;
}

static sheaf_status st_parse(sheaf_st_file *f, const unsigned char *bytes, size_t size) {
  sheaf_ctx *ctx = f->ctx;
  if (size < 8)
    return sh_fail(ctx, SHEAF_ERR_FORMAT,
                   "%s: file is %zu bytes, too short for the 8-byte header length", f->name, size);
  uint64_t hn = le64(bytes);
  if (hn > size - 8)
    return sh_fail(ctx, SHEAF_ERR_FORMAT, "%s: header length %llu exceeds the file (%zu bytes)",
                   f->name, (unsigned long long)hn, size);
  if (hn > SH_ST_MAX_HEADER)
    return sh_fail(ctx, SHEAF_ERR_FORMAT,
                   "%s: header length %llu exceeds the limit of %llu bytes (header too large)",
                   f->name, (unsigned long long)hn, (unsigned long long)SH_ST_MAX_HEADER);
  if (hn == 0)
    return sh_fail(ctx, SHEAF_ERR_FORMAT, "%s: header length is 0 (expected a JSON object)",
                   f->name);
  f->data = bytes + 8 + hn;
  f->data_size = size - 8 - (size_t)hn;
  sh_json_doc *doc = NULL;
  sh_json_error je;
  sheaf_status st = sh_json_parse(ctx, (const char *)bytes + 8, (size_t)hn, ST_MAX_DEPTH, &doc, &je);
  if (st == SHEAF_ERR_PARSE)
    return sh_fail(ctx, SHEAF_ERR_FORMAT, "%s: header is not valid JSON: %s (at header byte %zu)",
                   f->name, je.msg, je.pos);
  if (st != SHEAF_OK) return sh_fail_prefix(ctx, "%s", f->name);
  st = st_build(f, sh_json_root(doc));
  sh_json_doc_free(doc);
  return st;
}

/* A file object named `name`, or NULL (last error set). */
static sheaf_st_file *st_new(sheaf_ctx *ctx, const char *name) {
  sheaf_st_file *f = sh_calloc(ctx, 1, sizeof *f);
  if (!f) {
    sh_fail_prefix(ctx, "%s", name);
    return NULL;
  }
  f->ctx = ctx;
  f->name = sh_strdup(ctx, name);
  if (!f->name) {
    sh_free(ctx, f, sizeof *f);
    sh_fail_prefix(ctx, "%s", name);
    return NULL;
  }
  return f;
}

sheaf_status sheaf_st_open(sheaf_ctx *ctx, const char *path, sheaf_st_file **out) {
  if (!ctx) return SHEAF_ERR_INVALID_ARG;
  if (!out) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_st_open: out is NULL");
  *out = NULL;
  if (!path) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_st_open: path is NULL");
  st_map *map = sh_malloc(ctx, sizeof *map);
  if (!map) return sh_fail_prefix(ctx, "%s", path);
  sheaf_status st = sh_file_map_binary(ctx, path, &map->m);
  if (st != SHEAF_OK) {
    sh_free(ctx, map, sizeof *map);
    return st;
  }
  atomic_init(&map->refs, 1);
  map->ctx = ctx;
  sheaf_st_file *f = st_new(ctx, path);
  if (!f) {
    map_unref(map);
    return SHEAF_ERR_NOMEM;
  }
  f->map = map;
  st = st_parse(f, map->m.data, map->m.size);
  if (st != SHEAF_OK) {
    sheaf_st_close(f);
    return st;
  }
  *out = f;
  return SHEAF_OK;
}

sheaf_status sheaf_st_open_memory(sheaf_ctx *ctx, const void *data, size_t size,
                                  const char *name, sheaf_st_file **out) {
  if (!ctx) return SHEAF_ERR_INVALID_ARG;
  if (!out) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_st_open_memory: out is NULL");
  *out = NULL;
  if (!name) name = "<memory>";
  if (!data && size)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: sheaf_st_open_memory: data is NULL", name);
  sheaf_st_file *f = st_new(ctx, name);
  if (!f) return SHEAF_ERR_NOMEM;
  sheaf_status st = st_parse(f, data, size);
  if (st != SHEAF_OK) {
    sheaf_st_close(f);
    return st;
  }
  *out = f;
  return SHEAF_OK;
}

/* ------------------------------------------------------------- accessors */

static const st_entry *entry(const sheaf_st_file *f, size_t i) {
  return f && i < f->n ? &f->entries[i] : NULL;
}

size_t sheaf_st_count(const sheaf_st_file *f) { return f ? f->n : 0; }
const char *sh_st_file_name(const sheaf_st_file *f) { return f && f->name ? f->name : "<safetensors>"; }
const char *sheaf_st_name(const sheaf_st_file *f, size_t i) {
  const st_entry *e = entry(f, i);
  return e ? e->name : NULL;
}
sheaf_dtype sheaf_st_dtype(const sheaf_st_file *f, size_t i) {
  const st_entry *e = entry(f, i);
  return e ? e->dtype : SHEAF_DTYPE_COUNT;
}
int sheaf_st_rank(const sheaf_st_file *f, size_t i) {
  const st_entry *e = entry(f, i);
  return e ? e->rank : 0;
}
const int64_t *sheaf_st_shape(const sheaf_st_file *f, size_t i) {
  const st_entry *e = entry(f, i);
  return e ? e->shape : NULL;
}
size_t sheaf_st_nbytes(const sheaf_st_file *f, size_t i) {
  const st_entry *e = entry(f, i);
  return e ? (size_t)(e->end - e->begin) : 0;
}
const void *sheaf_st_bytes(const sheaf_st_file *f, size_t i) {
  const st_entry *e = entry(f, i);
  return e ? f->data + e->begin : NULL;
}

long sheaf_st_find(const sheaf_st_file *f, const char *name) {
  if (!f || !name) return -1;
  size_t lo = 0, hi = f->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(f->by_name[mid]->name, name);
    if (c == 0) return (long)(f->by_name[mid] - f->entries);
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return -1;
}

size_t sheaf_st_metadata_count(const sheaf_st_file *f) { return f ? f->n_meta : 0; }
const char *sheaf_st_metadata_key(const sheaf_st_file *f, size_t i) {
  return f && i < f->n_meta ? f->meta[2 * i] : NULL;
}
const char *sheaf_st_metadata_value(const sheaf_st_file *f, size_t i) {
  return f && i < f->n_meta ? f->meta[2 * i + 1] : NULL;
}

sheaf_status sheaf_st_tensor(sheaf_ctx *ctx, const sheaf_st_file *f, const char *name,
                             sheaf_tensor **out) {
  if (!ctx) return SHEAF_ERR_INVALID_ARG;
  if (!out) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_st_tensor: out is NULL");
  *out = NULL;
  if (!f || !name)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_st_tensor: %s is NULL", !f ? "file" : "name");
  long i = sheaf_st_find(f, name);
  st_q q;
  if (i < 0)
    return sh_fail(ctx, SHEAF_ERR_NOT_FOUND, "%s: no tensor named '%s'", f->name,
                   quote_c(&q, name));
  const st_entry *e = &f->entries[i];
  const unsigned char *p = f->data + e->begin;
  size_t nbytes = (size_t)(e->end - e->begin);
  sheaf_tensor *t;
  sheaf_status st;
  if ((uintptr_t)p % sheaf_dtype_size(e->dtype) == 0) {
    /* Zero-copy. Wrapped without a release callback, which is attached only
     * once the view exists, so a failed wrap never touches the mapping. */
    st = sheaf_tensor_wrap(ctx, e->dtype, e->rank, e->shape, NULL, (void *)(uintptr_t)p, NULL,
                           NULL, &t);
    if (st != SHEAF_OK) return sh_fail_prefix(ctx, "%s: tensor '%s'", f->name, quote_c(&q, name));
    t->storage->bytes = nbytes;
    if (f->map) {
      atomic_fetch_add(&f->map->refs, 1);
      t->storage->release = map_release;
      t->storage->release_user = f->map;
    }
  } else {
    st = sheaf_tensor_create(ctx, e->dtype, e->rank, e->shape, &t);
    if (st != SHEAF_OK) return sh_fail_prefix(ctx, "%s: tensor '%s'", f->name, quote_c(&q, name));
    if (nbytes) memcpy(sheaf_tensor_data(t), p, nbytes);
  }
  *out = t;
  return SHEAF_OK;
}

/* --------------------------------------------------------------- writing */

/* Where the file goes: a file descriptor behind a staging buffer, or memory. */
typedef struct st_sink {
  sheaf_ctx *ctx;
  const char *name;
  FILE *f; /* sh_out's stream, or NULL with mem */
  sh_buf *mem;
  unsigned char *buf;
  size_t len, cap;
  sheaf_status st;
} st_sink;

static bool write_all(st_sink *s, const void *p, size_t n) {
  const unsigned char *c = p;
  if (n && fwrite(c, 1, n, s->f) != n) {
    s->st = sh_fail(s->ctx, SHEAF_ERR_IO, "%s: write failed: %s", s->name, strerror(errno));
    return false;
  }
  return true;
}

static bool sink_flush(st_sink *s) {
  if (s->st != SHEAF_OK) return false;
  if (s->mem || !s->len) return true;
  bool ok = write_all(s, s->buf, s->len);
  s->len = 0;
  return ok;
}

static bool sink_put(st_sink *s, const void *p, size_t n) {
  if (s->st != SHEAF_OK) return false;
  if (s->mem) {
    sh_buf_put(s->mem, p, n);
    if (s->mem->failed) s->st = SHEAF_ERR_NOMEM;
    return s->st == SHEAF_OK;
  }
  if (n > s->cap - s->len) {
    if (!sink_flush(s)) return false;
    if (n >= s->cap) return write_all(s, p, n);
  }
  memcpy(s->buf + s->len, p, n);
  s->len += n;
  return true;
}

/* A tensor's elements in row-major order, whatever its strides. */
static bool put_tensor(st_sink *s, const sheaf_tensor *t) {
  int64_t numel = sheaf_tensor_numel(t);
  if (numel == 0) return true;
  size_t es = sheaf_dtype_size(sheaf_tensor_dtype(t));
  const unsigned char *base = sheaf_tensor_data(t);
  if (sheaf_tensor_is_contiguous(t)) return sink_put(s, base, (size_t)numel * es);
  int r = sheaf_tensor_rank(t);
  const int64_t *shape = sheaf_tensor_shape(t), *strides = sheaf_tensor_strides(t);
  int64_t idx[SH_TENSOR_MAX_RANK] = {0};
  int64_t inner = shape[r - 1], istride = strides[r - 1] * (int64_t)es;
  int64_t off = 0; /* bytes from base to element [idx..., 0] */
  for (;;) {
    const unsigned char *row = base + off;
    if (istride == (int64_t)es) {
      if (!sink_put(s, row, (size_t)inner * es)) return false;
    } else {
      for (int64_t k = 0; k < inner; k++)
        if (!sink_put(s, row + k * istride, es)) return false;
    }
    int d = r - 2;
    for (; d >= 0; d--) {
      off += strides[d] * (int64_t)es;
      if (++idx[d] < shape[d]) break;
      off -= shape[d] * strides[d] * (int64_t)es;
      idx[d] = 0;
    }
    if (d < 0) return true;
  }
}

/* Checks the arguments and builds the padded header in hdr. */
static sheaf_status st_header(sheaf_ctx *ctx, const char *fn, size_t n, const char *const *names,
                              const sheaf_tensor *const *tensors, size_t n_meta,
                              const char *const *meta_kv, sh_buf *hdr) {
  if (n && (!names || !tensors))
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: %s is NULL (n = %zu)", fn,
                   !names ? "names" : "tensors", n);
  if (n_meta && !meta_kv)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: meta_kv is NULL (n_meta = %zu)", fn, n_meta);
  st_q q;
  for (size_t i = 0; i < n; i++) {
    if (!names[i]) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: names[%zu] is NULL", fn, i);
    if (!names[i][0]) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: names[%zu] is empty", fn, i);
    if (!sh_utf8_valid(names[i], strlen(names[i])))
      return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: names[%zu] is not valid UTF-8", fn, i);
    if (strcmp(names[i], ST_META_KEY) == 0)
      return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                     "%s: names[%zu]: '__metadata__' is reserved for the metadata", fn, i);
    if (!tensors[i])
      return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: tensors[%zu] ('%s') is NULL", fn, i,
                     quote_c(&q, names[i]));
    if ((unsigned)sheaf_tensor_dtype(tensors[i]) >= SHEAF_DTYPE_COUNT)
      return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: tensor '%s' has an unknown dtype", fn,
                     quote_c(&q, names[i]));
  }
  for (size_t i = 0; i < 2 * n_meta; i++) {
    if (!meta_kv[i]) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: meta_kv[%zu] is NULL", fn, i);
    if (!sh_utf8_valid(meta_kv[i], strlen(meta_kv[i])))
      return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: meta_kv[%zu] is not valid UTF-8", fn, i);
  }
  /* duplicates, in O(n log n) */
  size_t nsort = n > n_meta ? n : n_meta;
  if (nsort > 1) {
    const char **tmp = sh_malloc(ctx, nsort * sizeof *tmp);
    if (!tmp) return sh_fail_prefix(ctx, "%s", fn);
    sheaf_status st = SHEAF_OK;
    for (int pass = 0; pass < 2 && st == SHEAF_OK; pass++) {
      size_t m = pass == 0 ? n : n_meta;
      for (size_t i = 0; i < m; i++) tmp[i] = pass == 0 ? names[i] : meta_kv[2 * i];
      qsort(tmp, m, sizeof *tmp, cmp_str);
      for (size_t i = 1; i < m && st == SHEAF_OK; i++)
        if (strcmp(tmp[i - 1], tmp[i]) == 0)
          st = sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: duplicate %s '%s'", fn,
                       pass == 0 ? "tensor name" : "metadata key", quote_c(&q, tmp[i]));
    }
    sh_free(ctx, tmp, nsort * sizeof *tmp);
    if (st != SHEAF_OK) return st;
  }

  sh_buf_putc(hdr, '{');
  bool first = true;
  if (n_meta) {
    sh_buf_puts(hdr, "\"" ST_META_KEY "\":{");
    for (size_t i = 0; i < n_meta; i++) {
      if (i) sh_buf_putc(hdr, ',');
      sh_json_put_string(hdr, meta_kv[2 * i], strlen(meta_kv[2 * i]));
      sh_buf_putc(hdr, ':');
      sh_json_put_string(hdr, meta_kv[2 * i + 1], strlen(meta_kv[2 * i + 1]));
    }
    sh_buf_putc(hdr, '}');
    first = false;
  }
  uint64_t at = 0;
  for (size_t i = 0; i < n; i++) {
    const sheaf_tensor *t = tensors[i];
    uint64_t nbytes, end;
    if (__builtin_mul_overflow((uint64_t)sheaf_tensor_numel(t),
                               (uint64_t)sheaf_dtype_size(sheaf_tensor_dtype(t)), &nbytes) ||
        __builtin_add_overflow(at, nbytes, &end))
      return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: tensor '%s': size overflows 64 bits", fn,
                     quote_c(&q, names[i]));
    if (!first) sh_buf_putc(hdr, ',');
    first = false;
    sh_json_put_string(hdr, names[i], strlen(names[i]));
    sh_buf_printf(hdr, ":{\"dtype\":\"%s\",\"shape\":[", sheaf_dtype_name(sheaf_tensor_dtype(t)));
    const int64_t *shape = sheaf_tensor_shape(t);
    for (int d = 0; d < sheaf_tensor_rank(t); d++)
      sh_buf_printf(hdr, d ? ",%lld" : "%lld", (long long)shape[d]);
    sh_buf_printf(hdr, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at,
                  (unsigned long long)end);
    at = end;
  }
  sh_buf_putc(hdr, '}');
  sh_buf_put(hdr, "        ", (8 - hdr->len % 8) % 8); /* as the reference pads */
  if (sh_buf_status(hdr) != SHEAF_OK) return sh_fail_prefix(ctx, "%s", fn);
  if (hdr->len > SH_ST_MAX_HEADER)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                   "%s: the header would be %zu bytes, over the limit of %llu", fn, hdr->len,
                   (unsigned long long)SH_ST_MAX_HEADER);
  return SHEAF_OK;
}

static bool put_file(st_sink *s, const sh_buf *hdr, size_t n, const sheaf_tensor *const *tensors) {
  unsigned char len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hdr->len >> (8 * i));
  if (!sink_put(s, len8, 8) || !sink_put(s, hdr->data, hdr->len)) return false;
  for (size_t i = 0; i < n; i++)
    if (!put_tensor(s, tensors[i])) return false;
  return sink_flush(s);
}

sheaf_status sh_st_write_buf(sheaf_ctx *ctx, const char *name, size_t n,
                             const char *const *names, const sheaf_tensor *const *tensors,
                             size_t n_meta, const char *const *meta_kv, sh_buf *out) {
  if (!name) name = "<memory>";
  sh_buf hdr;
  sh_buf_init(&hdr, ctx);
  sheaf_status st = st_header(ctx, name, n, names, tensors, n_meta, meta_kv, &hdr);
  if (st == SHEAF_OK) {
    st_sink s = {.ctx = ctx, .name = name, .f = NULL, .mem = out, .st = SHEAF_OK};
    if (!put_file(&s, &hdr, n, tensors)) st = s.st;
    if (st == SHEAF_ERR_NOMEM) sh_fail_prefix(ctx, "%s", name);
  }
  sh_buf_free(&hdr);
  return st;
}

sheaf_status sheaf_st_write(sheaf_ctx *ctx, const char *path, size_t n,
                            const char *const *names, const sheaf_tensor *const *tensors,
                            size_t n_meta, const char *const *meta_kv) {
  if (!ctx) return SHEAF_ERR_INVALID_ARG;
  if (!path) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_st_write: path is NULL");
  sh_buf hdr;
  sh_buf_init(&hdr, ctx);
  sheaf_status st = st_header(ctx, path, n, names, tensors, n_meta, meta_kv, &hdr);
  if (st != SHEAF_OK) {
    sh_buf_free(&hdr);
    return st;
  }
  st_sink s = {.ctx = ctx, .name = path, .f = NULL, .st = SHEAF_OK, .cap = ST_WRITE_CHUNK};
  s.buf = sh_malloc(ctx, s.cap);
  if (!s.buf) {
    sh_buf_free(&hdr);
    return sh_fail_prefix(ctx, "%s", path);
  }
  sh_out o; /* whole or not at all for a regular file; a device is written into */
  st = sh_out_open(ctx, path, 0, &o);
  if (st == SHEAF_OK) {
    s.f = o.f;
    if (!put_file(&s, &hdr, n, tensors)) {
      st = s.st;
      sh_out_abort(&o);
    } else {
      st = sh_out_commit(&o);
    }
  }
  sh_free(ctx, s.buf, s.cap);
  sh_buf_free(&hdr);
  return st;
}
