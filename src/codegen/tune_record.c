/*
 * tune_record.c — the tuner's records (tune.h): the knob list, shape
 * classes, kernel and compiler identities, and the text format:
 *
 *   sheaf-tuning 1
 *   kernel=mm ir=<32 hex> isa=avx2 cc=<32 hex> class=M:64,K:256,N:1024 sizes=M:64,K:256,N:1280
 *     mr=5 nr=16 row_tiles=0 no_pack=0 row_unroll=0 par_block=0 ns=812345 default_ns=845000
 *
 * (one record a line; `#` starts a comment line). A missing knob is 0 (the
 * ISA's default). Parsing is all or nothing: a malformed line fails the
 * whole file with "FILE:LINE: ...".
 */
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/base.h"
#include "base/file.h"
#include "codegen/jit_int.h"
#include "codegen/lir_emit.h"
#include "codegen/tune.h"

/* The knobs: one line per field of sh_sched_opts the tuner searches and
 * records (a new knob of the default schedule is one more line). */
#define F(name) #name, offsetof(sh_sched_opts, name)
static const sh_tune_field fields[] = {
    {F(mr), 0, {0}},                 /* searched with nr as a tile: sh_tune_tiles */
    {F(nr), 0, {0}},
    {F(row_tiles), 3, {8, 32, 4}},   /* GEMM tiles per row block (16) */
    {F(no_pack), 1, {1}},            /* leave a weight unpacked */
    {F(row_unroll), 3, {2, 8, 1}},   /* vectors per step of a row loop (4) */
    {F(par_block), 2, {1, 8}},       /* iterations per parallel task (4) */
    {F(no_pair), 1, {1}},            /* a tile per GEMM over a shared A, not one for both */
    {F(kc), 3, {128, 256, 384}},     /* GEMM K block (none) */
    {F(prefetch), 2, {32, 128}},     /* GEMM: B panel prefetch distance in k rows (64) */
    {F(no_prefetch), 1, {1}},        /* GEMM: no B prefetch */
    {F(rem_rows), 1, {-1}},          /* GEMM: no remainder row tile (mr - mr / 3 rows) */
    {F(pack_a), 1, {1}},             /* GEMM: A packed per row block (cache_read; not) */
    {F(prefetch_c), 1, {1}},         /* GEMM: the tile's output lines prefetched (not) */
    {F(row_block), 3, {24, 48, -1}}, /* GEMM + row nest: rows per fused row block (12; -1: not fused) */
};
#undef F

const sh_tune_field *sh_tune_fields(int *n) {
  *n = (int)SH_ARRAY_LEN(fields);
  return fields;
}

int sh_tune_field_get(const sh_sched_opts *o, const sh_tune_field *f) {
  int v;
  memcpy(&v, (const char *)o + f->off, sizeof v);
  return v;
}

void sh_tune_field_set(sh_sched_opts *o, const sh_tune_field *f, int v) { memcpy((char *)o + f->off, &v, sizeof v); }

int sh_tune_tiles(int w, const int (**tiles)[2]) {
  static const int t8[][2] = {{6, 16}, {4, 24}, {5, 16}, {4, 16}, {8, 8}, {3, 32}};
  static const int t16[][2] = {{12, 32}, {14, 32}, {8, 32}, {6, 48}, {4, 64}, {16, 16}};
  static const int t1[][2] = {{4, 4}, {2, 8}, {8, 2}, {4, 8}, {6, 4}, {3, 3}};
  *tiles = w == 16 ? t16 : w == 8 ? t8 : t1;
  return 6;
}

void sh_tune_opts_print(const sh_sched_opts *o, sh_buf *out) {
  for (size_t i = 0; i < SH_ARRAY_LEN(fields); i++)
    sh_buf_printf(out, "%s%s=%d", i ? " " : "", fields[i].name, sh_tune_field_get(o, &fields[i]));
}

void sh_tune_opts_print_set(const sh_sched_opts *o, sh_buf *out) {
  bool first = true;
  for (size_t i = 0; i < SH_ARRAY_LEN(fields); i++) {
    int v = sh_tune_field_get(o, &fields[i]);
    if (v) sh_buf_printf(out, "%s%s=%d", first ? "" : " ", fields[i].name, v), first = false;
  }
}

bool sh_tune_opts_is_default(const sh_sched_opts *o) {
  for (size_t i = 0; i < SH_ARRAY_LEN(fields); i++)
    if (sh_tune_field_get(o, &fields[i])) return false;
  return true;
}

int64_t sh_tune_bucket(int64_t v) {
  if (v <= 0) return 0;
  int64_t b = 1;
  while (b <= v / 2) b *= 2;
  return b;
}

bool sh_tune_matches(const sh_tune_rec *r, const int64_t *sizes, int n) {
  if (r->n_sizes != n) return false;
  for (int i = 0; i < n; i++)
    if (r->cls[i] != sh_tune_bucket(sizes[i])) return false;
  return true;
}

void sh_tune_class_print(const sh_tune_rec *r, const int64_t *vals, sh_buf *out) {
  for (int i = 0; i < r->n_sizes; i++)
    sh_buf_printf(out, "%s%s:%lld", i ? "," : "", r->size_names[i], (long long)(vals ? vals : r->cls)[i]);
  if (r->n_sizes == 0) sh_buf_puts(out, "-");
}

sheaf_status sh_tune_kernel_hash(sheaf_ctx *ctx, const sh_kernel *k, char hex[33]) {
  sh_buf b;
  sh_buf_init(&b, ctx);
  sh_kernel_print(&b, k);
  sheaf_status st = sh_buf_status(&b);
  if (!st) sh_jit_hash_hex(b.data, b.len, hex);
  sh_buf_free(&b);
  return st;
}

sheaf_status sh_tune_compiler_id(sheaf_ctx *ctx, const char *cc, char hex[33]) {
  char real[PATH_MAX], id[PATH_MAX + 96];
  struct stat sb;
  hex[0] = '\0';
  if (!cc || !realpath(cc, real) || stat(real, &sb) != 0)
    return sh_fail(ctx, SHEAF_ERR_NOT_FOUND, "tuner: cannot identify the compiler %s", cc ? cc : "(none)");
  int n = snprintf(id, sizeof id, "%s %lld %lld.%09ld", real, (long long)sb.st_size, (long long)sb.st_mtim.tv_sec,
                   (long)sb.st_mtim.tv_nsec);
  sh_jit_hash_hex(id, n > 0 && (size_t)n < sizeof id ? (size_t)n : strlen(id), hex);
  return SHEAF_OK;
}

/* ------------------------------------------------------------- the set */

void sh_tune_set_init(sh_tune_set *s, sheaf_ctx *ctx) { *s = (sh_tune_set){.ctx = ctx}; }

void sh_tune_set_free(sh_tune_set *s) {
  if (s->r) sh_free(s->ctx, s->r, sizeof(sh_tune_rec) * (size_t)s->cap);
  *s = (sh_tune_set){.ctx = s->ctx};
}

static bool same_key(const sh_tune_rec *a, const sh_tune_rec *b) {
  if (strcmp(a->kernel, b->kernel) || strcmp(a->ir, b->ir) || strcmp(a->isa, b->isa) || strcmp(a->cc, b->cc) ||
      a->n_sizes != b->n_sizes)
    return false;
  for (int i = 0; i < a->n_sizes; i++)
    if (a->cls[i] != b->cls[i]) return false;
  return true;
}

sheaf_status sh_tune_set_add(sh_tune_set *s, const sh_tune_rec *r) {
  for (int i = 0; i < s->n; i++)
    if (same_key(&s->r[i], r)) {
      s->r[i] = *r;
      return SHEAF_OK;
    }
  if (s->n == s->cap) {
    int cap = s->cap ? 2 * s->cap : 8;
    sh_tune_rec *p = sh_realloc(s->ctx, s->r, sizeof *p * (size_t)s->cap, sizeof *p * (size_t)cap);
    if (!p) return SHEAF_ERR_NOMEM;
    s->r = p, s->cap = cap;
  }
  s->r[s->n++] = *r;
  return SHEAF_OK;
}

void sh_tune_set_write(const sh_tune_set *s, sh_buf *out) {
  sh_buf_puts(out, "# Sheaf tuning records (docs/CODEGEN.md, \"Tuner\"); one a line.\nsheaf-tuning 1\n");
  for (int i = 0; i < s->n; i++) {
    const sh_tune_rec *r = &s->r[i];
    sh_buf_printf(out, "kernel=%s ir=%s isa=%s cc=%s class=", r->kernel, r->ir, r->isa, r->cc);
    sh_tune_class_print(r, NULL, out);
    sh_buf_puts(out, " sizes=");
    sh_tune_class_print(r, r->sizes, out);
    sh_buf_putc(out, ' ');
    sh_tune_opts_print(&r->opts, out);
    sh_buf_printf(out, " ns=%.0f default_ns=%.0f\n", r->ns, r->default_ns);
  }
}

sheaf_status sh_tune_set_save(const sh_tune_set *s, const char *path) {
  sh_buf b;
  sh_buf_init(&b, s->ctx);
  sh_tune_set_write(s, &b);
  sheaf_status st = sh_buf_status(&b);
  if (!st) st = sh_file_write_atomic(s->ctx, path, b.data, b.len);
  sh_buf_free(&b);
  return st;
}

/* ------------------------------------------------------------- parsing */

static bool parse_i64(const char *s, size_t n, int64_t *out) {
  if (n == 0 || n > 19) return false;
  int64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return true;
}

static bool copy_word(char *dst, size_t cap, const char *s, size_t n) {
  if (n == 0 || n >= cap) return false;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] <= ' ' || s[i] == '=' || s[i] == ',' || s[i] == ':') return false;
  memcpy(dst, s, n);
  dst[n] = '\0';
  return true;
}

static bool is_hex32(const char *s) {
  if (strlen(s) != 32) return false;
  for (int i = 0; i < 32; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
  return true;
}

/* "M:64,K:256" into names and values; "-" for no sizes. */
static bool parse_class(const char *s, size_t n, sh_tune_rec *r, int64_t *vals, bool names) {
  int k = 0;
  if (n == 1 && s[0] == '-') return names ? (r->n_sizes = 0, true) : r->n_sizes == 0;
  size_t i = 0;
  while (i < n) {
    size_t e = i;
    while (e < n && s[e] != ',') e++;
    const char *colon = memchr(s + i, ':', e - i);
    if (!colon || k >= SH_TUNE_MAX_SIZES) return false;
    size_t nl = (size_t)(colon - (s + i));
    if (names) {
      if (!copy_word(r->size_names[k], SH_TUNE_NAME_MAX, s + i, nl)) return false;
    } else if (k >= r->n_sizes || strlen(r->size_names[k]) != nl || memcmp(r->size_names[k], s + i, nl)) {
      return false;
    }
    if (!parse_i64(colon + 1, (size_t)(s + e - colon - 1), &vals[k])) return false;
    k++;
    i = e + 1;
    if (e < n && i >= n) return false; /* trailing comma */
  }
  if (names) r->n_sizes = k;
  return k == r->n_sizes;
}

static sheaf_status perr(sheaf_ctx *ctx, const char *file, int line, const char *what, const char *tok, size_t n) {
  return sh_fail(ctx, SHEAF_ERR_PARSE, "%s:%d: %s '%.*s'", file, line, what, (int)(n > 80 ? 80 : n), tok);
}

/* One record line (no newline). *skip: a field this build does not know. */
static sheaf_status parse_line(sheaf_ctx *ctx, const char *file, int line, const char *s, size_t n,
                               sh_tune_rec *r, bool *skip) {
  memset(r, 0, sizeof *r);
  *skip = false;
  size_t fl_n = strlen(file); /* "FILE:LINE", the file's tail when it is long */
  const char *ftail = fl_n > 120 ? file + fl_n - 117 : file;
  snprintf(r->origin, sizeof r->origin, "%s%s:%d", ftail != file ? "..." : "", ftail, line);
  bool have[5] = {false};
  const char *sizes_tok = NULL;
  size_t sizes_n = 0;
  int nf;
  const sh_tune_field *fl = sh_tune_fields(&nf);
  size_t i = 0;
  while (i < n) {
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r')) i++;
    if (i >= n) break;
    size_t e = i;
    while (e < n && s[e] != ' ' && s[e] != '\t' && s[e] != '\r') e++;
    const char *t = s + i, *eq = memchr(t, '=', e - i);
    if (!eq) return perr(ctx, file, line, "expected key=value, got", t, e - i);
    size_t kn = (size_t)(eq - t), vn = (size_t)(s + e - eq - 1);
    const char *v = eq + 1;
#define KEY(lit) (kn == sizeof(lit) - 1 && !memcmp(t, lit, kn))
    bool ok = true;
    if (KEY("kernel")) ok = have[0] = copy_word(r->kernel, sizeof r->kernel, v, vn);
    else if (KEY("ir")) ok = have[1] = copy_word(r->ir, sizeof r->ir, v, vn) && is_hex32(r->ir);
    else if (KEY("isa")) ok = have[2] = copy_word(r->isa, sizeof r->isa, v, vn);
    else if (KEY("cc")) ok = have[3] = copy_word(r->cc, sizeof r->cc, v, vn) && is_hex32(r->cc);
    else if (KEY("class")) ok = have[4] = parse_class(v, vn, r, r->cls, true);
    else if (KEY("sizes")) sizes_tok = v, sizes_n = vn;
    else if (KEY("ns") || KEY("default_ns")) {
      int64_t x = 0;
      ok = parse_i64(v, vn, &x);
      *(KEY("ns") ? &r->ns : &r->default_ns) = (double)x;
    } else {
      int f = 0;
      while (f < nf && !(strlen(fl[f].name) == kn && !memcmp(fl[f].name, t, kn))) f++;
      int64_t x = 0;
      if (f == nf) {
        sh_log(ctx, SHEAF_LOG_WARN, "%s:%d: unknown field '%.*s' (a newer Sheaf's record?): record ignored", file,
               line, (int)kn, t);
        *skip = true;
      } else if (!(ok = parse_i64(v, vn, &x) && x <= 4096)) {
      } else {
        sh_tune_field_set(&r->opts, &fl[f], (int)x);
      }
    }
#undef KEY
    if (!ok) return perr(ctx, file, line, "bad value in", t, e - i);
    i = e;
  }
  static const char *const req[] = {"kernel", "ir", "isa", "cc", "class"};
  for (int q = 0; q < 5; q++)
    if (!have[q]) return sh_fail(ctx, SHEAF_ERR_PARSE, "%s:%d: the record has no %s=", file, line, req[q]);
  if (sizes_tok && !parse_class(sizes_tok, sizes_n, r, r->sizes, false))
    return perr(ctx, file, line, "sizes= does not match class=:", sizes_tok, sizes_n);
  for (int q = 0; q < r->n_sizes; q++)
    if (r->cls[q] != sh_tune_bucket(r->cls[q]))
      return sh_fail(ctx, SHEAF_ERR_PARSE, "%s:%d: class %s:%lld is not a bucket (0 or a power of two)", file, line,
                     r->size_names[q], (long long)r->cls[q]);
  return SHEAF_OK;
}

sheaf_status sh_tune_set_parse(sh_tune_set *s, const char *file, const char *text, size_t n) {
  sh_tune_set tmp;
  sh_tune_set_init(&tmp, s->ctx);
  sheaf_status st = SHEAF_OK;
  bool header = false;
  int line = 0;
  for (size_t i = 0; i < n && !st;) {
    size_t e = i;
    while (e < n && text[e] != '\n') e++;
    line++;
    const char *l = text + i;
    size_t ln = e - i;
    while (ln && (l[ln - 1] == '\r' || l[ln - 1] == ' ')) ln--;
    i = e + 1;
    size_t b = 0;
    while (b < ln && (l[b] == ' ' || l[b] == '\t')) b++;
    if (b == ln || l[b] == '#') continue;
    if (memchr(l, '\0', ln)) {
      st = sh_fail(s->ctx, SHEAF_ERR_PARSE, "%s:%d: a NUL byte (not a text file)", file, line);
    } else if (!header) {
      if (ln - b == 14 && !memcmp(l + b, "sheaf-tuning 1", 14)) header = true;
      else st = perr(s->ctx, file, line, "expected the header 'sheaf-tuning 1', got", l + b, ln - b);
    } else {
      sh_tune_rec r;
      bool skip;
      st = parse_line(s->ctx, file, line, l + b, ln - b, &r, &skip);
      if (!st && !skip) st = sh_tune_set_add(&tmp, &r);
    }
  }
  if (!st && !header) st = sh_fail(s->ctx, SHEAF_ERR_PARSE, "%s:%d: no 'sheaf-tuning 1' header", file, line ? line : 1);
  for (int q = 0; !st && q < tmp.n; q++) st = sh_tune_set_add(s, &tmp.r[q]);
  sh_tune_set_free(&tmp);
  return st;
}

sheaf_status sh_tune_set_load(sh_tune_set *s, const char *path, bool missing_ok) {
  struct stat sb;
  if (missing_ok && stat(path, &sb) != 0 && errno == ENOENT) return SHEAF_OK;
  char *data;
  size_t n;
  sheaf_status st = sh_file_read(s->ctx, path, &data, &n);
  if (st) return sh_fail_prefix(s->ctx, "tuning records");
  st = sh_tune_set_parse(s, path, data, n);
  sh_free(s->ctx, data, n + 1);
  return st;
}

void sh_tune_cache_path(const char *cache_dir, const char *ir, char *out, size_t cap) {
  snprintf(out, cap, "%s/tune/%s.tune", cache_dir, ir);
}

sheaf_status sh_tune_select(sheaf_ctx *ctx, const sh_kernel *k, const char *ir, const char *isa,
                            const char *cc, const sh_tune_set *loaded, const char *cache_dir,
                            sh_tune_rec **out, int *n_out) {
  *out = NULL, *n_out = 0;
  sh_tune_set cached;
  sh_tune_set_init(&cached, ctx);
  sheaf_status st = SHEAF_OK;
  if (cache_dir) {
    char path[4096];
    sh_tune_cache_path(cache_dir, ir, path, sizeof path);
    if (sh_tune_set_load(&cached, path, true)) { /* a corrupt cache file: ignored, said once */
      sh_log(ctx, SHEAF_LOG_WARN, "kernel '%s': tuning records ignored: %s", k->name, sheaf_ctx_last_error(ctx));
      sh_tune_set_free(&cached);
    }
  }
  const sh_tune_set *sets[2] = {loaded, &cached};
  int cap = 0, n = 0;
  for (int q = 0; q < 2; q++) cap += sets[q] ? sets[q]->n : 0;
  sh_tune_rec *r = cap ? sh_calloc(ctx, (size_t)cap, sizeof *r) : NULL;
  if (cap && !r) st = SHEAF_ERR_NOMEM;
  int stale = 0;
  for (int q = 0; !st && q < 2; q++)
    for (int i = 0; sets[q] && i < sets[q]->n; i++) {
      const sh_tune_rec *x = &sets[q]->r[i];
      if (strcmp(x->kernel, k->name) || strcmp(x->isa, isa)) continue;
      bool sizes_ok = x->n_sizes == k->n_sizes;
      for (int z = 0; sizes_ok && z < k->n_sizes; z++) sizes_ok = !strcmp(x->size_names[z], k->sizes[z].name);
      if (strcmp(x->ir, ir) || strcmp(x->cc, cc) || !sizes_ok) {
        stale++;
        continue;
      }
      bool dup = false; /* the loaded file wins over the cache for one class */
      for (int j = 0; j < n && !dup; j++) dup = same_key(&r[j], x);
      if (!dup) {
        r[n] = *x;
        r[n].use = sh_tune_use_of(ctx, x); /* NULL: not counted (the tally is full) */
        n++;
      }
    }
  if (stale)
    sh_log(ctx, SHEAF_LOG_WARN,
           "kernel '%s': %d tuning record%s ignored: made for another version of the kernel or another compiler "
           "(re-run sheaf tune)",
           k->name, stale, stale == 1 ? "" : "s");
  sh_tune_set_free(&cached);
  if (st || n == 0) {
    if (r) sh_free(ctx, r, sizeof *r * (size_t)cap);
    return st;
  }
  if (n < cap) {
    sh_tune_rec *p = sh_realloc(ctx, r, sizeof *r * (size_t)cap, sizeof *r * (size_t)n);
    if (!p) {
      sh_free(ctx, r, sizeof *r * (size_t)cap);
      return SHEAF_ERR_NOMEM;
    }
    r = p;
  }
  *out = r, *n_out = n;
  return SHEAF_OK;
}

sheaf_status sh_tune_generate(sheaf_ctx *ctx, const sh_kernel *k, sheaf_isa isa, const sh_sched_opts *opts,
                              sh_buf *c, sh_lower_info *info) {
  char name[300];
  sh_lower_entry_name(k, name, sizeof name);
  sh_lir_kernel *L;
  sheaf_status st = sh_lower_kernel(ctx, k, name, &L, info);
  if (st) return sh_fail_prefix(ctx, "kernel '%s': lowering", k->name);
  st = sh_sched_default_opts(L, isa, opts);
  if (st) st = sh_fail_prefix(ctx, "kernel '%s': default schedule", k->name);
  if (!st) {
    st = sh_lir_emit_c(L, c);
    if (!st) st = sh_buf_status(c);
    if (st) st = sh_fail_prefix(ctx, "kernel '%s': C emission", k->name);
  }
  sh_lir_free(L);
  if (st && info) sh_lower_info_free(ctx, info);
  return st;
}
