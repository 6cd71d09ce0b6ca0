/*
 * conllu.c — the CoNLL-U reader (see conllu.h): one pass over the lines,
 * fields split in place, strings interned; each sentence is validated when
 * it ends (head range, one root, no cycle) and measured (depth,
 * projectivity) with the CSR/BFS work arrays binarize.c also uses.
 */
#include "conllu.h"

#include <stdio.h>
#include <string.h>

#include "base/file.h"

static const char *const field_names[10] = {"ID",    "FORM", "LEMMA", "UPOS", "XPOS",
                                            "FEATS", "HEAD", "DEPREL", "DEPS", "MISC"};
enum { F_ID, F_FORM, F_LEMMA, F_UPOS, F_XPOS, F_FEATS, F_HEAD, F_DEPREL, F_DEPS, F_MISC };

void sh_depbank_init(sh_depbank *db, sheaf_ctx *ctx) {
  memset(db, 0, sizeof *db);
  db->ctx = ctx;
  sh_vocab_init(&db->forms, ctx);
  sh_vocab_init(&db->upos, ctx);
  sh_vocab_init(&db->xpos, ctx);
  sh_vocab_init(&db->deprels, ctx);
  sh_vocab_init(&db->files, ctx);
}

void sh_depbank_free(sh_depbank *db) {
  sheaf_ctx *ctx = db->ctx;
  if (!ctx) return;
  sh_free(ctx, db->tokens, db->cap_tokens * sizeof *db->tokens);
  sh_free(ctx, db->sents, db->cap_sents * sizeof *db->sents);
  sh_vocab_free(&db->forms);
  sh_vocab_free(&db->upos);
  sh_vocab_free(&db->xpos);
  sh_vocab_free(&db->deprels);
  sh_vocab_free(&db->files);
  sh_depbank_init(db, ctx);
}

/* ------------------------------------------------------ sentence analysis */

void sh_dep_work_init(sh_dep_work *w, sheaf_ctx *ctx) {
  memset(w, 0, sizeof *w);
  w->ctx = ctx;
}

void sh_dep_work_free(sh_dep_work *w) {
  if (w->block) sh_free(w->ctx, w->block, (w->cap + 2) * 7 * sizeof(int32_t));
  sh_dep_work_init(w, w->ctx);
}

sheaf_status sh_dep_work_build(sh_dep_work *w, const sh_dep_token *tok, int32_t n) {
  if ((size_t)n > w->cap || !w->block) {
    size_t cap = w->cap ? w->cap : 64;
    while (cap < (size_t)n) cap *= 2;
    int32_t *b = sh_malloc(w->ctx, (cap + 2) * 7 * sizeof(int32_t));
    if (!b) return SHEAF_ERR_NOMEM;
    sh_dep_work_free(w);
    w->block = b;
    w->cap = cap;
    size_t s = cap + 2;
    w->kid_off = b;
    w->kids = b + s;
    w->order = b + 2 * s;
    w->a = b + 3 * s;
    w->b = b + 4 * s;
    w->c = b + 5 * s;
  }
  int32_t *off = w->kid_off, *cur = w->a;
  memset(off, 0, ((size_t)n + 2) * sizeof *off);
  for (int32_t i = 0; i < n; i++) off[tok[i].head + 1]++;
  for (int32_t h = 0; h <= n; h++) off[h + 1] += off[h];
  memcpy(cur, off, ((size_t)n + 1) * sizeof *cur);
  for (int32_t i = 0; i < n; i++) w->kids[cur[tok[i].head]++] = i + 1; /* ascending */
  /* Breadth-first from the virtual root: every word has one head, so each
   * is queued at most once; words on a cycle are never reached. */
  int32_t qh = 0, qt = 1;
  w->order[0] = 0;
  while (qh < qt) {
    int32_t h = w->order[qh++];
    for (int32_t k = off[h]; k < off[h + 1]; k++) w->order[qt++] = w->kids[k];
  }
  w->reached = qt - 1;
  return SHEAF_OK;
}

/* --------------------------------------------------------------- reading */

typedef struct word_pos {
  int64_t line;
  int32_t head_col;
} word_pos;

typedef struct reader {
  sheaf_ctx *ctx;
  sh_depbank *db;
  const char *name;
  sh_dep_work work;
  word_pos *pos; /* per word of the open sentence, for late errors */
  size_t cap_pos;
  bool open;            /* a comment or token line since the last blank line */
  int64_t open_line;    /* the first of those lines */
  int32_t first_token;  /* the open sentence's first token */
  int32_t file;         /* name's id in db->files */
} reader;

static bool all_digits(const char *s, size_t n) {
  if (n == 0) return false;
  for (size_t i = 0; i < n; i++)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

/* Digits to int32; false when longer than int32 can hold. */
static bool parse_i32(const char *s, size_t n, int32_t *out) {
  int64_t v = 0;
  if (!all_digits(s, n)) return false;
  for (size_t i = 0; i < n; i++) {
    v = v * 10 + (s[i] - '0');
    if (v > INT32_MAX) return false;
  }
  *out = (int32_t)v;
  return true;
}

#define SHOWN(n) ((n) > 40 ? 40 : (int)(n))
#define MORE(n) ((n) > 40 ? "..." : "")

/* Finds a cycle among the words that the root does not reach and reports it
 * at the HEAD field of one of its words. */
/* A word on a cycle of the HEAD fields (w: built, w->reached < n) into
 * f->word and the cycle as "u -> v -> ... -> u" into f->cycle. */
static void find_cycle(sh_dep_work *w, const sh_dep_token *tok, int32_t n, sh_dep_fault *f) {
  int32_t *seen = w->b; /* 1 = reached from the root */
  memset(seen, 0, ((size_t)n + 1) * sizeof *seen);
  for (int32_t i = 1; i <= w->reached; i++) seen[w->order[i]] = 1;
  int32_t u = 1;
  while (seen[u]) u++;
  /* Heads of unreached words are unreached: walk until a word repeats. */
  int32_t *step = w->c;
  memset(step, 0, ((size_t)n + 1) * sizeof *step);
  int32_t k = 1;
  while (!step[u]) {
    step[u] = k++;
    u = tok[u - 1].head;
  }
  char *msg = f->cycle;
  size_t len = 0, cap = sizeof f->cycle;
  msg[0] = 0;
  int32_t v = u;
  do {
    int m = snprintf(msg + len, cap - len, "%d -> ", v);
    if (m < 0 || (size_t)m >= cap - len - 16) {
      len = strlen(msg);
      snprintf(msg + len, cap - len, "... -> ");
      break;
    }
    len += (size_t)m;
    v = tok[v - 1].head;
  } while (v != u);
  len = strlen(msg);
  snprintf(msg + len, cap - len, "%d", u);
  f->word = u;
}

/* Whether two arcs between words cross (i < k < j < l), the root's arc not
 * counted. Arcs are visited by left end, longer first, against a stack of
 * the right ends of the arcs that enclose the current position. */
static bool has_crossing(const sh_dep_work *w, const sh_dep_token *tok, int32_t n,
                         int32_t *stack) {
  int32_t sp = 0;
  for (int32_t l = 1; l <= n; l++) {
    int32_t head = tok[l - 1].head, k = w->kid_off[l + 1] - 1, kb = w->kid_off[l];
    bool head_right = head > l;
    for (;;) { /* arcs (l, r), r descending: right dependents and a right head */
      int32_t r;
      if (k >= kb && w->kids[k] > l && (!head_right || w->kids[k] > head)) {
        r = w->kids[k--];
      } else if (head_right) {
        r = head;
        head_right = false;
      } else {
        break;
      }
      while (sp > 0 && stack[sp - 1] <= l) sp--;
      if (sp > 0 && stack[sp - 1] < r) return true;
      stack[sp++] = r;
    }
  }
  return false;
}

/* Validates and measures the open sentence; line/col locate its end. */
sheaf_status sh_dep_check(sh_dep_work *w, const sh_dep_token *tok, int32_t n, sh_dep_fault *f) {
  *f = (sh_dep_fault){0};
  for (int32_t i = 0; i < n; i++)
    if (tok[i].head < 0 || tok[i].head > n) return f->kind = SH_DEP_HEAD_RANGE, f->word = i + 1, SHEAF_OK;
  int32_t root = 0;
  for (int32_t i = 0; i < n; i++) {
    if (tok[i].head != 0) continue;
    if (root) return f->kind = SH_DEP_SECOND_ROOT, f->word = i + 1, f->root = root, SHEAF_OK;
    root = i + 1;
  }
  if (!root) return f->kind = SH_DEP_NO_ROOT, f->word = 1, SHEAF_OK;
  sheaf_status st = sh_dep_work_build(w, tok, n);
  if (st != SHEAF_OK) return st;
  if (w->reached < n) return f->kind = SH_DEP_CYCLE, find_cycle(w, tok, n, f), SHEAF_OK;
  /* depth (root = 1), then subtree size/min/max bottom-up: projective iff
   * every subtree covers a contiguous span. */
  int32_t *depth = w->a, *size = w->b, *lo = w->c, *hi = w->a;
  int32_t max_depth = 0, deepest = 0;
  depth[0] = 0;
  for (int32_t i = 1; i <= n; i++) {
    int32_t v = w->order[i];
    depth[v] = depth[tok[v - 1].head] + 1;
    if (depth[v] > max_depth) max_depth = depth[v];
    if (depth[v] > SH_TB_MAX_DEPTH && !deepest) deepest = v; /* first word past the limit */
  }
  f->depth = max_depth;
  if (max_depth > SH_TB_MAX_DEPTH) return f->kind = SH_DEP_TOO_DEEP, f->word = deepest, SHEAF_OK;
  bool projective = true;
  for (int32_t i = n; i >= 1; i--) {
    int32_t v = w->order[i];
    int32_t s = 1, l = v, h = v;
    for (int32_t k = w->kid_off[v]; k < w->kid_off[v + 1]; k++) {
      int32_t c = w->kids[k];
      s += size[c];
      if (lo[c] < l) l = lo[c];
      if (hi[c] > h) h = hi[c];
    }
    size[v] = s;
    lo[v] = l;
    hi[v] = h; /* reuses depth's array: depth is no longer needed */
    if (s != h - l + 1) projective = false;
  }
  /* Non-projective trees either have crossing arcs or an arc over the root. */
  f->projective = projective;
  f->crossing = !projective && has_crossing(w, tok, n, w->a);
  return SHEAF_OK;
}

sheaf_status sh_depbank_add_tokens(sh_depbank *db, const sh_dep_token *tok, int32_t n) {
  if (n < 0 || (int64_t)db->n_tokens + n > INT32_MAX)
    return sh_fail(db->ctx, SHEAF_ERR_UNSUPPORTED, "more than %d words", INT32_MAX);
  if ((size_t)(db->n_tokens + n) > db->cap_tokens) {
    sh_dep_token *t = sh_io_grow(db->ctx, db->tokens, &db->cap_tokens, (size_t)db->n_tokens + (size_t)n, sizeof *t);
    if (!t) return SHEAF_ERR_NOMEM;
    db->tokens = t;
  }
  if (n) memcpy(db->tokens + db->n_tokens, tok, (size_t)n * sizeof *tok);
  db->n_tokens += n;
  return SHEAF_OK;
}

sheaf_status sh_depbank_end_sentence(sh_depbank *db, int32_t first, int64_t line, int32_t file, const sh_dep_fault *f) {
  if (db->n_sents == INT32_MAX) return sh_fail(db->ctx, SHEAF_ERR_UNSUPPORTED, "more than %d sentences", INT32_MAX);
  if ((size_t)db->n_sents == db->cap_sents) {
    sh_dep_sentence *s = sh_io_grow(db->ctx, db->sents, &db->cap_sents, (size_t)db->n_sents + 1, sizeof *s);
    if (!s) return SHEAF_ERR_NOMEM;
    db->sents = s;
  }
  db->sents[db->n_sents++] =
      (sh_dep_sentence){line, first, db->n_tokens - first, f->depth, f->projective, f->crossing, file};
  if (!f->projective) db->n_nonprojective++;
  if (f->crossing) db->n_crossing++;
  return SHEAF_OK;
}

/* Validates and measures the open sentence; line/col locate its end. */
static sheaf_status end_sentence(reader *r, int64_t line, long col) {
  sh_depbank *db = r->db;
  int32_t first = r->first_token, n = db->n_tokens - first;
  r->open = false;
  if (n == 0)
    return sh_io_parse_error(r->ctx, r->name, line, col,
                             "empty sentence: the lines from line %lld on hold no word line",
                             (long long)r->open_line);
  const sh_dep_token *tok = db->tokens + first;
  sh_dep_fault f;
  sheaf_status st = sh_dep_check(&r->work, tok, n, &f);
  if (st != SHEAF_OK) return st;
  const word_pos *at = f.word ? &r->pos[f.word - 1] : NULL;
  switch (f.kind) {
  case SH_DEP_FINE: break;
  case SH_DEP_HEAD_RANGE:
    return sh_io_parse_error(r->ctx, r->name, at->line, at->head_col, "HEAD %d is out of range: the sentence has %d word%s",
                             tok[f.word - 1].head, n, n == 1 ? "" : "s");
  case SH_DEP_SECOND_ROOT:
    return sh_io_parse_error(r->ctx, r->name, at->line, at->head_col,
                             "a second root: word %d has HEAD 0 but word %d is the root "
                             "already",
                             f.word, f.root);
  case SH_DEP_NO_ROOT:
    return sh_io_parse_error(r->ctx, r->name, at->line, at->head_col, "no root: no word of the sentence has HEAD 0");
  case SH_DEP_CYCLE:
    return sh_io_parse_error(r->ctx, r->name, at->line, at->head_col,
                             "the HEAD fields form a cycle: %s (each word's head must lead "
                             "to the root)",
                             f.cycle);
  case SH_DEP_TOO_DEEP:
    return sh_io_parse_error(r->ctx, r->name, r->pos[0].line, 1,
                             "the dependency tree of this sentence is %d levels deep (root = "
                             "1), over the limit of %d levels for trees in every format (word "
                             "%d, line %lld, is the first at level %d)",
                             f.depth, SH_TB_MAX_DEPTH, f.word, (long long)at->line, SH_TB_MAX_DEPTH + 1);
  }
  st = sh_depbank_end_sentence(db, first, r->pos[0].line, r->file, &f);
  if (st == SHEAF_ERR_UNSUPPORTED) return sh_fail(r->ctx, st, "%s: more than %d sentences", r->name, INT32_MAX);
  return st;
}

/* word line -> ID '\t' FORM '\t' LEMMA '\t' UPOS '\t' XPOS '\t' FEATS '\t'
 *              HEAD '\t' DEPREL '\t' DEPS '\t' MISC
 * ID -> int | int '-' int | int '.' int ;  HEAD -> int */
static sheaf_status word_line(reader *r, const char *p, size_t len, int64_t line) {
  sheaf_ctx *ctx = r->ctx;
  const char *name = r->name, *le = p + len;
  const char *f[10];
  size_t fl[10];
  int nf = 0;
  for (const char *q = p;;) {
    const char *tab = memchr(q, '\t', (size_t)(le - q));
    if (nf == 10)
      return sh_io_parse_error(ctx, name, line, (long)(q - p),
                               "expected 10 TAB-separated fields, found more: this TAB "
                               "starts an 11th");
    f[nf] = q;
    fl[nf] = (size_t)((tab ? tab : le) - q);
    nf++;
    if (!tab) break;
    q = tab + 1;
  }
  if (nf < 10)
    return sh_io_parse_error(ctx, name, line, (long)len + 1,
                             "expected 10 TAB-separated fields, found %d%s", nf,
                             memchr(p, ' ', len) ? " (fields are separated by TABs, not spaces)"
                                                 : "");
  for (int i = 0; i < 10; i++)
    if (fl[i] == 0)
      return sh_io_parse_error(ctx, name, line, (long)(f[i] - p) + 1,
                               "field %d (%s) is empty; write '_' for no value", i + 1,
                               field_names[i]);
  sh_depbank *db = r->db;
  if (!r->open) {
    r->open = true;
    r->open_line = line;
    r->first_token = db->n_tokens;
  }
  const char *id = f[F_ID];
  size_t idn = fl[F_ID];
  const char *sep = NULL;
  for (size_t i = 0; i < idn; i++)
    if (id[i] == '-' || id[i] == '.') {
      sep = id + i;
      break;
    }
  if (sep) {
    size_t a = (size_t)(sep - id);
    if (!all_digits(id, a) || !all_digits(sep + 1, idn - a - 1))
      return sh_io_parse_error(ctx, name, line, 1,
                               "invalid ID '%.*s%s': expected N, N-M (multiword token) or "
                               "N.M (empty node)",
                               SHOWN(idn), id, MORE(idn));
    if (*sep == '-') db->n_multiword++;
    else db->n_empty_nodes++;
    return SHEAF_OK;
  }
  int32_t n = db->n_tokens - r->first_token, idv = -1;
  if (!parse_i32(id, idn, &idv) || idv != n + 1)
    return sh_io_parse_error(ctx, name, line, 1, "expected ID %d, found '%.*s%s'%s", n + 1,
                             SHOWN(idn), id, MORE(idn),
                             n == 0      ? " (IDs start at 1 in each sentence)"
                             : idv == 1 ? " (is a blank line missing before this sentence?)"
                                        : " (IDs are consecutive)");
  int32_t head;
  if (!parse_i32(f[F_HEAD], fl[F_HEAD], &head))
    return sh_io_parse_error(ctx, name, line, (long)(f[F_HEAD] - p) + 1,
                             "HEAD must be a word index (0 for the root), found '%.*s%s'",
                             SHOWN(fl[F_HEAD]), f[F_HEAD], MORE(fl[F_HEAD]));
  if (db->n_tokens == INT32_MAX)
    return sh_fail(ctx, SHEAF_ERR_UNSUPPORTED, "%s: more than %d words", name, INT32_MAX);
  if ((size_t)db->n_tokens == db->cap_tokens) {
    sh_dep_token *t = sh_io_grow(ctx, db->tokens, &db->cap_tokens, (size_t)db->n_tokens + 1,
                                 sizeof *t);
    if (!t) return SHEAF_ERR_NOMEM;
    db->tokens = t;
  }
  if ((size_t)n == r->cap_pos) {
    word_pos *wp = sh_io_grow(ctx, r->pos, &r->cap_pos, (size_t)n + 1, sizeof *wp);
    if (!wp) return SHEAF_ERR_NOMEM;
    r->pos = wp;
  }
  sh_dep_token t = {.head = head};
  sheaf_status st = sh_vocab_intern(&db->forms, f[F_FORM], fl[F_FORM], &t.form);
  if (st == SHEAF_OK) st = sh_vocab_intern(&db->upos, f[F_UPOS], fl[F_UPOS], &t.upos);
  if (st == SHEAF_OK) st = sh_vocab_intern(&db->xpos, f[F_XPOS], fl[F_XPOS], &t.xpos);
  if (st == SHEAF_OK) st = sh_vocab_intern(&db->deprels, f[F_DEPREL], fl[F_DEPREL], &t.deprel);
  if (st != SHEAF_OK) return st;
  db->tokens[db->n_tokens++] = t;
  r->pos[n] = (word_pos){line, (int32_t)(f[F_HEAD] - p) + 1};
  return SHEAF_OK;
}

/* file -> (sentence blank+)* sentence? ;
 * sentence -> (comment | word line)+   with at least one word line */
static sheaf_status read_lines(reader *r, const char *data, size_t size) {
  const char *p = data + sh_io_bom(data, size), *end = data + size;
  int64_t line = 1;
  sheaf_status st = SHEAF_OK;
  for (; p < end && st == SHEAF_OK; line++) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t len = (size_t)((nl ? nl : end) - p);
    if (len && p[len - 1] == '\r') len--;
    if (len == 0) {
      if (r->open) st = end_sentence(r, line, 1);
    } else if (p[0] == '#') {
      if (!r->open) {
        r->open = true;
        r->open_line = line;
        r->first_token = r->db->n_tokens;
      }
    } else {
      st = word_line(r, p, len, line);
    }
    p = nl ? nl + 1 : end;
  }
  if (st == SHEAF_OK && r->open) {
    /* end of input: report at the position just past the last byte */
    const char *ls = end;
    while (ls > data && ls[-1] != '\n') ls--;
    st = end_sentence(r, ls == end ? line : line - 1, (long)(end - ls) + 1);
  }
  return st;
}

sheaf_status sh_conllu_read(sh_depbank *db, const char *data, size_t size, const char *name) {
  if (size == 0) data = ""; /* NULL with 0 bytes is an empty input */
  sheaf_ctx *ctx = db->ctx;
  sheaf_status st = sh_io_check_text(ctx, data, size, name);
  if (st != SHEAF_OK) return st;
  reader r = {.ctx = ctx, .db = db, .name = name};
  st = sh_vocab_intern(&db->files, name ? name : "", name ? strlen(name) : 0, &r.file);
  if (st != SHEAF_OK) return st;
  sh_dep_work_init(&r.work, ctx);
  int32_t n_tokens = db->n_tokens, n_sents = db->n_sents, n_nonproj = db->n_nonprojective,
          n_crossing = db->n_crossing;
  int64_t n_mw = db->n_multiword, n_empty = db->n_empty_nodes;
  st = read_lines(&r, data, size);
  if (st != SHEAF_OK) {
    db->n_tokens = n_tokens;
    db->n_sents = n_sents;
    db->n_nonprojective = n_nonproj;
    db->n_crossing = n_crossing;
    db->n_multiword = n_mw;
    db->n_empty_nodes = n_empty;
  }
  sh_dep_work_free(&r.work);
  sh_free(ctx, r.pos, r.cap_pos * sizeof *r.pos);
  return st;
}

sheaf_status sh_conllu_read_file(sh_depbank *db, const char *path) {
  sh_mapping m;
  sheaf_status st = sh_file_map(db->ctx, path, &m);
  if (st != SHEAF_OK) return st;
  st = sh_conllu_read(db, (const char *)m.data, m.size, path);
  sh_file_unmap(&m);
  return st;
}
