/*
 * seqs.c — the token-sequence reader (see seqs.h): one pass over the lines,
 * tokens split in place and appended to one growable int32 array.
 */
#include "seqs.h"

#include <string.h>

#include "base/file.h"

void sh_seqs_init(sh_seqs *s, sheaf_ctx *ctx) {
  memset(s, 0, sizeof *s);
  s->ctx = ctx;
  s->max_id = -1;
  sh_vocab_init(&s->vocab, ctx);
}

void sh_seqs_free(sh_seqs *s) {
  sheaf_ctx *ctx = s->ctx;
  if (!ctx) return;
  sh_free(ctx, s->tokens, s->cap_tokens * sizeof *s->tokens);
  sh_free(ctx, s->seqs, s->cap_seqs * sizeof *s->seqs);
  sh_vocab_free(&s->vocab);
  sh_seqs_init(s, ctx);
}

typedef struct reader {
  sh_seqs *s;
  sheaf_ctx *ctx;
  const char *name;
  const sh_vocab *vocab; /* given, or NULL */
  int64_t id_limit;      /* > 0: ids must be below it */
  const char *id_limit_what;
  int32_t unk;           /* id of "<unk>" in the given vocabulary, or -1 */
  sh_seqs_mode mode;
  bool auto_decided;     /* mode came from the first token, at first_line:first_col */
  int64_t first_line;
  long first_col;
} reader;

#define SHOWN(n) ((n) > 40 ? 40 : (int)(n))
#define MORE(n) ((n) > 40 ? "..." : "")

static bool digits(const char *p, size_t n) {
  if (n == 0) return false;
  for (size_t i = 0; i < n; i++)
    if (p[i] < '0' || p[i] > '9') return false;
  return true;
}

static bool looks_numeric(const char *p, size_t n) {
  return n > 0 && (digits(p, n) || (p[0] == '-' && digits(p + 1, n - 1)));
}

/* token -> id | word ;  id -> [0-9]+ (within int32) */
static sheaf_status token(reader *r, const char *p, size_t n, int64_t line, long col,
                          int32_t *out) {
  sh_seqs *s = r->s;
  if (r->mode == SH_SEQS_AUTO) {
    r->mode = looks_numeric(p, n) ? SH_SEQS_IDS : SH_SEQS_WORDS;
    r->auto_decided = true;
    r->first_line = line;
    r->first_col = col;
  }
  if (r->mode == SH_SEQS_WORDS) {
    int32_t id;
    if (!r->vocab) return sh_vocab_intern(&s->vocab, p, n, out);
    id = sh_vocab_find(r->vocab, p, n);
    if (id < 0) {
      if (r->unk < 0)
        return sh_io_parse_error(r->ctx, r->name, line, col,
                                 "unknown word '%.*s%s': not in the vocabulary, which has no "
                                 "<unk>",
                                 SHOWN(n), p, MORE(n));
      id = r->unk;
      s->n_unk++;
    }
    *out = id;
    return SHEAF_OK;
  }
  if (!looks_numeric(p, n)) {
    if (r->auto_decided)
      return sh_io_parse_error(r->ctx, r->name, line, col,
                               "'%.*s%s' is not a token id: the file is read as ids since "
                               "its first token (%lld:%ld) is a number; ids and words cannot "
                               "be mixed",
                               SHOWN(n), p, MORE(n), (long long)r->first_line, r->first_col);
    return sh_io_parse_error(r->ctx, r->name, line, col,
                             "'%.*s%s' is not a token id (a non-negative integer); ids and "
                             "words cannot be mixed",
                             SHOWN(n), p, MORE(n));
  }
  if (p[0] == '-')
    return sh_io_parse_error(r->ctx, r->name, line, col,
                             "negative token id %.*s%s: ids are non-negative", SHOWN(n), p,
                             MORE(n));
  int64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    v = v * 10 + (p[i] - '0');
    if (v > INT32_MAX)
      return sh_io_parse_error(r->ctx, r->name, line, col,
                               "token id %.*s%s overflows: ids are at most %d", SHOWN(n), p,
                               MORE(n), INT32_MAX);
  }
  if (r->vocab && v >= sh_vocab_size(r->vocab))
    return sh_io_parse_error(r->ctx, r->name, line, col,
                             "token id %lld is out of range: the vocabulary has %d tokens",
                             (long long)v, sh_vocab_size(r->vocab));
  if (r->id_limit > 0 && v >= r->id_limit)
    return sh_io_parse_error(r->ctx, r->name, line, col,
                             "token id %lld is beyond the vocabulary: ids must be below %lld "
                             "(%s)",
                             (long long)v, (long long)r->id_limit,
                             r->id_limit_what ? r->id_limit_what : "the id limit");
  *out = (int32_t)v;
  if (*out > s->max_id) s->max_id = *out;
  return SHEAF_OK;
}

/* file -> (line '\n')* line? ;  line -> sep* (token (sep+ token)*)? sep* ;
 * sep -> ' ' | '\t' */
static sheaf_status read_lines(reader *r, const char *data, size_t size) {
  sh_seqs *s = r->s;
  const char *p = data + sh_io_bom(data, size), *end = data + size;
  const char *line_start = data; /* columns count the BOM, as editors do */
  for (int64_t line = 1; p < end; line++) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *le = nl ? nl : end;
    if (le > p && le[-1] == '\r') le--;
    size_t start = s->n_tokens;
    for (const char *q = p; q < le;) {
      if (*q == ' ' || *q == '\t') {
        q++;
        continue;
      }
      const char *t = q;
      while (q < le && *q != ' ' && *q != '\t') q++;
      if (s->n_tokens - start >= (size_t)INT32_MAX)
        return sh_fail(r->ctx, SHEAF_ERR_UNSUPPORTED, "%s:%lld: more than %d tokens in a line",
                       r->name, (long long)line, INT32_MAX);
      if (s->n_tokens == s->cap_tokens) {
        int32_t *tk = sh_io_grow(r->ctx, s->tokens, &s->cap_tokens, s->n_tokens + 1,
                                 sizeof *tk);
        if (!tk) return SHEAF_ERR_NOMEM;
        s->tokens = tk;
      }
      sheaf_status st = token(r, t, (size_t)(q - t), line, (long)(t - line_start) + 1,
                              &s->tokens[s->n_tokens]);
      if (st != SHEAF_OK) return st;
      s->n_tokens++;
    }
    if (s->n_tokens == start) {
      s->n_empty_lines++;
    } else {
      if (s->n_seqs == s->cap_seqs) {
        sh_seq *sq = sh_io_grow(r->ctx, s->seqs, &s->cap_seqs, s->n_seqs + 1, sizeof *sq);
        if (!sq) return SHEAF_ERR_NOMEM;
        s->seqs = sq;
      }
      s->seqs[s->n_seqs++] = (sh_seq){(int64_t)start, line, (int32_t)(s->n_tokens - start)};
    }
    p = nl ? nl + 1 : end;
    line_start = p;
  }
  return SHEAF_OK;
}

sheaf_status sh_seqs_read(sh_seqs *s, const char *data, size_t size, const char *name,
                          const sh_seqs_options *opt) {
  sheaf_ctx *ctx = s->ctx;
  if (size == 0) data = ""; /* NULL with 0 bytes is an empty input */
  sh_seqs_options o = {0};
  if (opt) o = *opt;
  if (o.mode != SH_SEQS_AUTO && o.mode != SH_SEQS_IDS && o.mode != SH_SEQS_WORDS)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: unknown sequence mode %d", name, (int)o.mode);
  if (s->mode != SH_SEQS_AUTO) {
    if (o.mode != SH_SEQS_AUTO && o.mode != s->mode)
      return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                     "%s: these sequences hold %s, this read asks for %s", name,
                     s->mode == SH_SEQS_IDS ? "ids" : "words",
                     o.mode == SH_SEQS_IDS ? "ids" : "words");
    o.mode = s->mode;
  }
  sheaf_status st = sh_io_check_text(ctx, data, size, name);
  if (st != SHEAF_OK) return st;
  if (o.id_limit < 0)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: negative id limit %lld", name,
                   (long long)o.id_limit);
  reader r = {.s = s, .ctx = ctx, .name = name, .vocab = o.vocab, .id_limit = o.id_limit,
              .id_limit_what = o.id_limit_what, .unk = -1, .mode = o.mode};
  if (o.vocab) r.unk = sh_vocab_find(o.vocab, "<unk>", 5);
  sh_seqs saved = *s;
  st = read_lines(&r, data, size);
  if (st != SHEAF_OK) { /* roll back the counts; arrays and vocab may have grown */
    s->n_tokens = saved.n_tokens;
    s->n_seqs = saved.n_seqs;
    s->n_empty_lines = saved.n_empty_lines;
    s->n_unk = saved.n_unk;
    s->max_id = saved.max_id;
    return st;
  }
  s->mode = r.mode;
  return SHEAF_OK;
}

sheaf_status sh_seqs_read_file(sh_seqs *s, const char *path, const sh_seqs_options *opt) {
  sh_mapping m;
  sheaf_status st = sh_file_map(s->ctx, path, &m);
  if (st != SHEAF_OK) return st;
  st = sh_seqs_read(s, (const char *)m.data, m.size, path, opt);
  sh_file_unmap(&m);
  return st;
}
