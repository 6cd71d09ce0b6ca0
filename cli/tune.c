/*
 * tune.c — `sheaf tune MODEL.sf`: the tuner (docs/CODEGEN.md, "Tuner") over
 * the kernels of a source. For each kernel and each shape class of the
 * sizes it is given (--size, valued `size` declarations, the row size from
 * --data), src/codegen/tune_search.c searches the default schedule's knobs
 * by measuring; the records go to the cache directory (where every later
 * compile of the kernel finds them) and, with --out, to a file to ship.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/buf.h"
#include "base/file.h"
#include "cli.h"
#include "source.h"
#include "codegen/jit.h"
#include "codegen/kernel_api.h"
#include "codegen/tune.h"
#include "lang/interp.h"
#include "lang/kernel.h"

static const char usage_tune[] =
    "usage: sheaf tune MODEL.sf [--kernel NAME] [--size NAME=V[,V...]]... [--data FILE [--batch N]]\n"
    "                  [--budget SECONDS] [--out FILE] [--isa scalar|avx2|avx512]\n"
    "\n"
    "Searches the schedule of each kernel of MODEL.sf (register tile, tiles per\n"
    "row block, packing, row unroll, parallel block, K block: one knob at a time,\n"
    "repeated while a pass improves, and the tile with the K block jointly) by\n"
    "measuring it, one thread, at each shape class of the given sizes (a class\n"
    "buckets each size: 0, 1, 2-3, 4-7, ..., 64-127, ...), checks every\n"
    "candidate's output against the default schedule's and records the fastest\n"
    "per class in the cache directory ($SHEAF_CACHE_DIR, else\n"
    "$XDG_CACHE_HOME/sheaf): from then on a kernel whose sizes fall in a tuned\n"
    "class runs that schedule, compiled once per class (sheaf run --stats says\n"
    "which records ran).\n"
    "\n"
    "options:\n";

#define MAX_VALS 64

typedef struct size_opt {
  char name[64];
  int64_t v[MAX_VALS];
  int n;
} size_opt;

#define MAX_SIZE_OPTS 32

typedef struct tune_opts {
  const char *only, *data, *out;
  long long batch, budget;
  int isa; /* sheaf_isa */
  size_opt sizes[MAX_SIZE_OPTS];
  int n_sizes;
} tune_opts;

static double wall_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void progress(void *user, const char *line) {
  (void)user;
  fprintf(stderr, "sheaf tune: %s\n", line);
}

/* --size NAME=V[,V...], repeated. */
static bool parse_size(const cli_flags *s, const cli_flag *f, const char *arg, void *opts) {
  tune_opts *t = opts;
  size_opt *o = &t->sizes[t->n_sizes];
  const char *eq = strchr(arg, '=');
  bool ok = t->n_sizes < MAX_SIZE_OPTS && eq && eq != arg && (size_t)(eq - arg) < sizeof o->name;
  if (ok) {
    snprintf(o->name, sizeof o->name, "%.*s", (int)(eq - arg), arg);
    o->n = 0;
  }
  for (const char *p = eq + 1; ok && *p;) {
    char *end;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    ok = end != p && !errno && v >= 0 && v <= (1LL << 30) && o->n < MAX_VALS && (!*end || *end == ',');
    if (ok) o->v[o->n++] = v;
    p = *end ? end + 1 : end;
  }
  if (!ok || o->n == 0) {
    cli_flag_error(s, f, "expected NAME=V[,V...] with values in 0..2^30 (at most %d values, %d sizes), got '%s'",
                   MAX_VALS, MAX_SIZE_OPTS, arg);
    return false;
  }
  t->n_sizes++;
  return true;
}

#define AT(field) .at = offsetof(tune_opts, field)
static const cli_flag f_kernel = {"--kernel", CLI_FLAG_STRING, AT(only), .arg = "NAME",
                                  .help = "tune this kernel only (default: all)"};
static const cli_flag f_size = {"--size", CLI_FLAG_CUSTOM, 0, .parse = parse_size, .arg = "N=V,V...",
                                .help = "values of size N to tune at (every combination of the\n"
                                        "sizes' values is one shape); a size declared with a value\n"
                                        "(size D = 256) takes it by default; repeatable"};
static const cli_flag f_data = {"--data", CLI_FLAG_IN, AT(data), .arg = "FILE",
                                .help = "token lines, .conllu, or .lengths (one length a line): the\n"
                                        "row size of a kernel whose calls stack rows (one row per\n"
                                        "token) takes the token counts of batches of --batch\n"
                                        "instances, one value per class they fall in (its median);\n"
                                        "a ragged kernel's lengths are the instances' lengths, in\n"
                                        "order, and the size that counts its sequences is --batch\n"
                                        "(without --data: lengths pseudo-random in 1..48)"};
static const cli_flag f_batch = {"--batch", CLI_FLAG_INT, AT(batch), .lo = 1, .hi = 1 << 20, .arg = "N",
                                 .help = "instances per batch for --data (default 32)"};
static const cli_flag f_budget = {"--budget", CLI_FLAG_INT, AT(budget), .lo = 1, .hi = 86400, .arg = "SECONDS",
                                  .help = "wall-clock time for the whole search (default 60)"};
static const cli_flag f_out = {"--out", CLI_FLAG_OUT, AT(out), .arg = "FILE",
                               .help = "also write this run's records to FILE (sheaf run / compile\n"
                                       "--tuning FILE, sheaf_kernel_load_tuning)"};
static const cli_flag f_isa = CLI_FLAG_ISA(tune_opts, isa, "the instruction set to tune for (default: this CPU's)");
#undef AT
static const cli_flag *const tune_flags[] = {&f_kernel, &f_size, &f_data, &f_batch, &f_budget, &f_out, &f_isa};
static const cli_flags tune_spec = {.cmd = "tune", CLI_FLAGS_LIST(tune_flags), .pos_noun = "source",
                                    .usage = usage_tune, .missing = ""};

/* Instance lengths of a data file: tokens per non-empty line, per
 * sentence of a .conllu file (word lines: an integer id), or the number on
 * each line of a .lengths file (data/wikitext2_lengths). */
static sheaf_status data_lengths(sheaf_ctx *ctx, const char *path, int64_t **out, size_t *n_out) {
  char *d;
  size_t n;
  sheaf_status st = sh_file_read(ctx, path, &d, &n);
  if (st) return st;
  size_t pl = strlen(path), cap = 1024, m = 0;
  bool conllu = pl > 7 && !strcmp(path + pl - 7, ".conllu"), numbers = pl > 8 && !strcmp(path + pl - 8, ".lengths");
  int64_t *len = malloc(cap * sizeof *len), cur = 0;
  size_t lno = 0;
  for (size_t i = 0; len && i <= n;) {
    size_t e = i;
    lno++;
    while (e < n && d[e] != '\n') e++;
    const char *l = d + i;
    size_t ln = e - i;
    bool blank = true;
    for (size_t j = 0; j < ln && blank; j++) blank = l[j] == ' ' || l[j] == '\t' || l[j] == '\r';
    int64_t add = 0;
    bool end = false;
    if (numbers) {
      if (!blank) {
        long long v = 0;
        size_t j = 0, digits = 0;
        while (j < ln && (l[j] == ' ' || l[j] == '\t')) j++;
        for (; j < ln && l[j] >= '0' && l[j] <= '9' && v <= (1 << 20); j++, digits++) v = v * 10 + (l[j] - '0');
        while (j < ln && (l[j] == ' ' || l[j] == '\t' || l[j] == '\r')) j++;
        if (!digits || j < ln || v > (1 << 20)) {
          sheaf_status bad = sh_fail(ctx, SHEAF_ERR_PARSE, "%s: line %zu is not a length (0 .. 2^20): '%.*s'",
                                     path, lno, (int)(ln > 40 ? 40 : ln), l);
          free(len);
          sh_free(ctx, d, n + 1);
          return bad;
        }
        add = v, end = true;
      }
    } else if (conllu) {
      if (blank) end = true;
      else if (l[0] >= '0' && l[0] <= '9') {
        size_t j = 0;
        while (j < ln && l[j] >= '0' && l[j] <= '9') j++;
        add = j < ln && l[j] == '\t';
      }
    } else if (!blank) {
      for (size_t j = 0; j < ln; j++)
        add += (l[j] != ' ' && l[j] != '\t' && l[j] != '\r') && (j == 0 || l[j - 1] == ' ' || l[j - 1] == '\t');
      end = true;
    }
    cur += add;
    if ((end || e >= n) && cur > 0) {
      if (m == cap && !(len = realloc(len, (cap *= 2) * sizeof *len))) break;
      len[m++] = cur, cur = 0;
    }
    i = e + 1;
  }
  sh_free(ctx, d, n + 1);
  if (!len) return sh_fail(ctx, SHEAF_ERR_NOMEM, "%s: out of memory", path);
  *out = len, *n_out = m;
  return SHEAF_OK;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* The row size's values from the data: sums of `batch` consecutive
 * lengths, one value per class (the median of those in it). */
static int data_values(const int64_t *len, size_t n, int batch, int64_t *v) {
  size_t nb = (n + (size_t)batch - 1) / (size_t)batch;
  int64_t *tot = malloc((nb ? nb : 1) * sizeof *tot);
  if (!tot) return 0;
  for (size_t b = 0; b < nb; b++) {
    tot[b] = 0;
    for (size_t i = b * (size_t)batch; i < n && i < (b + 1) * (size_t)batch; i++) tot[b] += len[i];
  }
  qsort(tot, nb, sizeof *tot, cmp_i64);
  int k = 0;
  for (size_t i = 0; i < nb && k < MAX_VALS;) {
    size_t j = i;
    while (j < nb && sh_tune_bucket(tot[j]) == sh_tune_bucket(tot[i])) j++;
    v[k++] = tot[i + (j - i) / 2];
    i = j;
  }
  free(tot);
  return k;
}

int cli_tune(int argc, char **argv) {
  tune_opts to = {.batch = 32, .budget = 60, .isa = sheaf_cpu_isa()};
  const char *file;
  int prc = cli_flags_parse(&tune_spec, argc, argv, &to, &file);
  if (prc) return prc < 0 ? CLI_OK : prc;
  const cli_path source = {"MODEL.sf", file};
  if ((prc = cli_flags_check_files(&tune_spec, &to, &source, 1)) != CLI_OK) return prc;
  const char *only = to.only, *data = to.data, *out_path = to.out;
  const size_opt *sizes = to.sizes;
  int n_size_opts = to.n_sizes;
  long long batch = to.batch, budget_ll = to.budget;
  sheaf_isa isa = (sheaf_isa)to.isa;
  sheaf_ctx *ctx = cli_ctx(1);
  if (!ctx) return CLI_FAIL;
  int64_t *lens = NULL;
  size_t n_lens = 0;
  cli_source src;
  int rc = cli_source_load(ctx, file, &src);
  file = src.name;
  if (rc == CLI_OK && data && data_lengths(ctx, data, &lens, &n_lens)) {
    cli_error("%s", sheaf_ctx_last_error(ctx));
    rc = CLI_FAIL;
  }
  const sh_module *m = &src.m;
  sheaf_status st;
  /* the shapes: every kernel's sizes resolved before any measurement */
  typedef struct task {
    int kernel;
    int64_t sizes[SH_TUNE_MAX_SIZES];
  } task;
  task *tasks = NULL;
  int n_tasks = 0, cap_tasks = 0, n_tuned_kernels = 0;
  for (int i = 0; rc == CLI_OK && i < m->n_kernels; i++) {
    const char *name = sh_sym_name(&m->syms, m->kernels[i]->name);
    if (only && strcmp(only, name)) continue;
    const sh_kernel *k = sh_module_kernel(m, name);
    if (!k) continue;
    n_tuned_kernels++;
    if (k->n_sizes > SH_TUNE_MAX_SIZES) {
      cli_error("%s: kernel '%s' has over %d sizes", file, name, SH_TUNE_MAX_SIZES);
      rc = CLI_FAIL;
      break;
    }
    int64_t vals[SH_TUNE_MAX_SIZES][MAX_VALS];
    int nv[SH_TUNE_MAX_SIZES];
    for (int s = 0; rc == CLI_OK && s < k->n_sizes; s++) {
      const char *sn = k->sizes[s].name;
      nv[s] = 0;
      for (int q = 0; q < n_size_opts; q++)
        if (!strcmp(sizes[q].name, sn)) {
          memcpy(vals[s], sizes[q].v, sizeof(int64_t) * (size_t)sizes[q].n);
          nv[s] = sizes[q].n;
        }
      for (int q = 0; !nv[s] && q < m->n_sizes; q++)
        if (m->size_decls[q]->has_value && !strcmp(sh_sym_name(&m->syms, m->size_decls[q]->name), sn))
          vals[s][0] = m->size_decls[q]->value, nv[s] = 1;
      if (!nv[s] && lens && s == sh_kernel_row_size(k)) nv[s] = data_values(lens, n_lens, (int)batch, vals[s]);
      if (!nv[s] && lens && sh_tune_is_lengths(k, k->sizes[s].tensor)) /* sequences per call: a batch */
        vals[s][0] = batch, nv[s] = 1;
      if (!nv[s]) {
        cli_error("kernel '%s': no value for size %s: give --size %s=V[,V...]%s", name, sn, sn,
                  sh_kernel_row_size(k) == s || sh_tune_is_lengths(k, k->sizes[s].tensor) ? " or --data FILE" : "");
        rc = CLI_USAGE;
      }
    }
    /* every combination, one per shape class */
    int idx[SH_TUNE_MAX_SIZES] = {0};
    for (bool more = rc == CLI_OK; more;) {
      task t = {.kernel = i};
      for (int s = 0; s < k->n_sizes; s++) t.sizes[s] = vals[s][idx[s]];
      bool dup = false;
      for (int q = 0; q < n_tasks && !dup; q++) {
        dup = tasks[q].kernel == i;
        for (int s = 0; dup && s < k->n_sizes; s++) dup = sh_tune_bucket(tasks[q].sizes[s]) == sh_tune_bucket(t.sizes[s]);
      }
      if (!dup) {
        if (n_tasks == cap_tasks) {
          task *p = realloc(tasks, sizeof *p * (size_t)(cap_tasks = cap_tasks ? 2 * cap_tasks : 16));
          if (!p) {
            rc = CLI_FAIL;
            break;
          }
          tasks = p;
        }
        tasks[n_tasks++] = t;
      }
      more = false;
      for (int s = 0; s < k->n_sizes && !more; s++) {
        if (++idx[s] < nv[s]) more = true;
        else idx[s] = 0;
      }
    }
  }
  if (rc == CLI_OK && only && !n_tuned_kernels) {
    cli_error("%s: no kernel '%s'", file, only);
    rc = CLI_FAIL;
  } else if (rc == CLI_OK && !n_tuned_kernels) {
    cli_error("%s: no kernel declarations", file);
    rc = CLI_FAIL;
  }
  sh_jit *jit = NULL;
  if (rc == CLI_OK && sh_jit_create(ctx, &(sh_jit_options){0}, &jit)) {
    cli_error("%s", sheaf_ctx_last_error(ctx));
    rc = CLI_FAIL;
  }
  sh_tune_set run;
  sh_tune_set_init(&run, ctx);
  if (rc == CLI_OK)
    fprintf(stderr, "sheaf tune: %d shape%s, %lld s in all, records in %s/tune/\n", n_tasks, n_tasks == 1 ? "" : "s",
            budget_ll, sh_jit_cache_dir(jit));
  double budget = (double)budget_ll, t_start = wall_s();
  for (int t = 0; rc == CLI_OK && t < n_tasks; t++) {
    const sh_kernel_decl *kd = m->kernels[tasks[t].kernel];
    const char *name = sh_sym_name(&m->syms, kd->name);
    const sh_kernel *k = sh_module_kernel(m, name);
    sh_buf ks;
    sh_buf_init(&ks, ctx);
    sh_tune_rec r;
    st = sh_lang_kernel_source(m, kd, &ks);
    sh_tune_request q = {.source = sh_buf_cstr(&ks), .len = ks.len, .kernel = name, .isa_set = true, .isa = isa,
                         .sizes = tasks[t].sizes, .n_sizes = k->n_sizes,
                         .budget_s = fmax(0.001, (budget - (wall_s() - t_start)) / (n_tasks - t)),
                         .progress = progress, .lengths = lens, .n_lengths = n_lens};
    if (!st) st = sh_tune_kernel(ctx, &q, &r);
    /* into the cache directory's file for this kernel (merged with what is there) */
    char path[4096];
    sh_tune_set cached;
    sh_tune_set_init(&cached, ctx);
    if (!st) {
      snprintf(path, sizeof path, "%s/tune", sh_jit_cache_dir(jit));
      if (mkdir(path, 0700) != 0 && errno != EEXIST)
        st = sh_fail(ctx, SHEAF_ERR_IO, "cannot create %s: %s", path, strerror(errno));
      sh_tune_cache_path(sh_jit_cache_dir(jit), r.ir, path, sizeof path);
      if (!st && sh_tune_set_load(&cached, path, true)) { /* a corrupt file is replaced */
        fprintf(stderr, "sheaf: warning: %s (replaced)\n", sheaf_ctx_last_error(ctx));
        sh_tune_set_free(&cached);
      }
      if (!st) st = sh_tune_set_add(&cached, &r);
      if (!st) st = sh_tune_set_save(&cached, path);
      if (!st) st = sh_tune_set_add(&run, &r);
    }
    sh_tune_set_free(&cached);
    sh_buf_free(&ks);
    if (st) {
      cli_error("kernel '%s': %s", name, sheaf_ctx_last_error(ctx));
      rc = CLI_FAIL;
    }
  }
  if (rc == CLI_OK && out_path && sh_tune_set_save(&run, out_path)) {
    cli_error("%s", sheaf_ctx_last_error(ctx));
    rc = CLI_FAIL;
  }
  if (rc == CLI_OK) {
    printf("%-16s %-32s %-44s %10s %10s %7s\n", "kernel", "shape (class)", "schedule", "default us", "tuned us",
           "speedup");
    for (int i = 0; i < run.n; i++) {
      const sh_tune_rec *r = &run.r[i];
      sh_buf c, o;
      sh_buf_init(&c, ctx);
      sh_buf_init(&o, ctx);
      sh_tune_class_print(r, r->sizes, &c);
      sh_buf_puts(&c, " (");
      sh_tune_class_print(r, NULL, &c);
      sh_buf_puts(&c, ")");
      if (sh_tune_opts_is_default(&r->opts)) sh_buf_puts(&o, "default");
      else sh_tune_opts_print(&r->opts, &o);
      printf("%-16s %-32s %-44s %10.1f %10.1f %6.2fx\n", r->kernel, sh_buf_cstr(&c), sh_buf_cstr(&o),
             r->default_ns / 1e3, r->ns / 1e3, r->ns > 0 ? r->default_ns / r->ns : 0.0);
      sh_buf_free(&c);
      sh_buf_free(&o);
    }
    if (out_path) printf("records: %s\n", out_path);
  }
  sh_tune_set_free(&run);
  sh_jit_free(jit);
  free(tasks);
  free(lens);
  cli_source_free(&src);
  sheaf_ctx_free(ctx);
  return rc;
}
