/*
 * common.c — helpers shared by the sheaf subcommands: error printing,
 * context creation, the end-of-run counters, and the files a command
 * reads and writes (held inputs, output files checked against the inputs,
 * outputs committed together). The flags: flags.c.
 */
#include <libgen.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

void cli_error(const char *fmt, ...) {
  fflush(stdout);
  fputs("sheaf: error: ", stderr);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

static atomic_int g_warnings;

/* Errors are reported by the commands themselves (from the context's last
 * error); warnings only come this way. */
static void cli_log(void *user, sheaf_log_level level, const char *msg) {
  (void)user;
  if (level != SHEAF_LOG_WARN) return;
  atomic_fetch_add(&g_warnings, 1);
  fflush(stdout);
  fprintf(stderr, "sheaf: warning: %s\n", msg);
}

int cli_warnings(void) { return atomic_load(&g_warnings); }

sheaf_ctx *cli_ctx(int threads) {
  sheaf_ctx_options o = {0};
  o.threads = threads;
  o.log = cli_log;
  o.log_level = SHEAF_LOG_WARN;
  sheaf_ctx *ctx = NULL;
  char err[512];
  if (sheaf_ctx_create(&o, &ctx, err, sizeof err) != SHEAF_OK) {
    cli_error("%s", err);
    return NULL;
  }
  return ctx;
}

void cli_print_graph_stats(FILE *f, const sheaf_graph_stats *st, bool summed) {
  fprintf(f, "  graph: %llu ops, %llu batches (average batch %.1f ops), %llu flushes\n",
          (unsigned long long)st->nodes, (unsigned long long)st->batches,
          st->batches ? (double)st->nodes / (double)st->batches : 0.0, (unsigned long long)st->flushes);
  fprintf(f,
          "  time%s: build %.1f ms, schedule %.1f ms, kernels %.1f ms; %.1f ns of build+schedule per op\n",
          summed ? " (summed over the threads)" : "", st->ns_build * 1e-6, st->ns_schedule * 1e-6,
          st->ns_kernels * 1e-6,
          st->nodes ? (double)(st->ns_build + st->ns_schedule) / (double)st->nodes : 0.0);
  fprintf(f, "  data: %llu rows gathered through row pointers, %llu bytes copied\n",
          (unsigned long long)st->rows_gathered, (unsigned long long)st->bytes_copied);
}

void cli_print_kernel_stats(FILE *f, size_t n, const char *const *names, const uint64_t *batches,
                            const uint64_t *nodes) {
  if (n == 0) return;
  fprintf(f, "  %-32s %10s %12s %10s\n", "kernel", "batches", "nodes", "avg batch");
  for (size_t i = 0; i < n; i++)
    fprintf(f, "  %-32s %10llu %12llu %10.1f\n", names[i] ? names[i] : "?", (unsigned long long)batches[i],
            (unsigned long long)nodes[i], batches[i] ? (double)nodes[i] / (double)batches[i] : 0.0);
}

/* ------------------------------------------------------------------ files */

/* What an output will be: an existing file's identity, or (a new path) its
 * folder's identity and its name. */
typedef struct out_key {
  bool exists, regular;
  uint64_t dev, ino;
  char base[256];
} out_key;

static bool get_out_key(const char *path, out_key *k) {
  memset(k, 0, sizeof *k);
  if (sh_file_identity(path, true, &k->dev, &k->ino, &k->regular)) return k->exists = true;
  if (!strcmp(path, "-")) return false;
  char a[4096], b[4096];
  snprintf(a, sizeof a, "%s", path);
  snprintf(b, sizeof b, "%s", path);
  snprintf(k->base, sizeof k->base, "%s", basename(a));
  return sh_file_identity(dirname(b), false, &k->dev, &k->ino, NULL);
}

static const char *shown(const char *path, bool output) {
  return strcmp(path, "-") ? path : output ? "(standard output)" : "(standard input)";
}

int cli_check_paths(const cli_path *ins, int n_in, const cli_path *outs, int n_out) {
  for (int i = 0; i < n_out; i++) {
    if (!outs[i].path) continue;
    out_key k;
    if (!get_out_key(outs[i].path, &k)) continue;
    if (k.exists && !k.regular) continue; /* a device or FIFO is written into, never replaced */
    for (int j = 0; k.exists && j < n_in; j++) {
      uint64_t dev, ino;
      if (!ins[j].path || !sh_file_identity(ins[j].path, false, &dev, &ino, NULL)) continue;
      if (dev == k.dev && ino == k.ino) {
        cli_error("%s %s is the same file as %s %s: refusing to overwrite an input (write the "
                  "output elsewhere)",
                  outs[i].flag, shown(outs[i].path, true), ins[j].flag, shown(ins[j].path, false));
        return CLI_USAGE;
      }
    }
    for (int j = 0; j < i; j++) {
      out_key m;
      if (!outs[j].path || !get_out_key(outs[j].path, &m)) continue;
      if (m.exists != k.exists || m.dev != k.dev || m.ino != k.ino || strcmp(m.base, k.base)) continue;
      if (m.exists && !m.regular) continue;
      cli_error("%s %s and %s %s are the same file: give each output its own file", outs[j].flag,
                shown(outs[j].path, true), outs[i].flag, shown(outs[i].path, true));
      return CLI_USAGE;
    }
  }
  return CLI_OK;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

cli_sniff_kind cli_sniff(const char *path) {
  static char buf[1 << 16];
  size_t n;
  sh_file_peek(path, buf, sizeof buf, &n);
  if (n >= 10 && buf[8] == '{') { /* u64 little-endian header length, then the JSON header */
    uint64_t len = 0;
    for (int k = 7; k >= 0; k--) len = len << 8 | (unsigned char)buf[k];
    if (len >= 2 && len <= 100000000) return CLI_SNIFF_SAFETENSORS;
  }
  size_t i = n >= 3 && !memcmp(buf, "\xEF\xBB\xBF", 3) ? 3 : 0;
  while (i < n) {
    size_t e = i;
    while (e < n && buf[e] != '\n') e++;
    size_t j = i;
    while (j < e && (buf[j] == ' ' || buf[j] == '\t' || buf[j] == '\r')) j++;
    if (j < e && buf[j] == '(') return CLI_SNIFF_PTB;
    if (j == e || buf[i] == '#') { /* blank or a comment */
      i = e + 1;
      continue;
    }
    int tabs = 0;
    for (size_t k = i; k < e; k++) tabs += buf[k] == '\t';
    return buf[i] >= '0' && buf[i] <= '9' && tabs >= 9 ? CLI_SNIFF_CONLLU : CLI_SNIFF_TOKENS;
  }
  return CLI_SNIFF_TOKENS;
}

int cli_hold_input(sheaf_ctx *ctx, const char *path, bool sniff, const char **name, bool *was_held) {
  static char names[4][4096]; /* the names of held inputs that get an extension */
  static int n_names;
  const char *base = strcmp(path, "-") ? path : "<stdin>";
  bool held = false;
  *name = path;
  if (sh_file_hold(ctx, path, base, &held) != SHEAF_OK) {
    cli_error("%s", sheaf_ctx_last_error(ctx));
    return CLI_FAIL;
  }
  if (was_held) *was_held = held;
  if (!held) return CLI_OK;
  *name = base;
  if (!sniff || ends_with(base, ".conllu") || n_names == 4 || cli_sniff(base) != CLI_SNIFF_CONLLU)
    return CLI_OK;
  char *alias = names[n_names++];
  snprintf(alias, sizeof names[0], "%s.conllu", base);
  if (!sh_file_rename_held(base, alias)) {
    cli_error("%s: cannot hold it as CoNLL-U", base);
    return CLI_FAIL;
  }
  *name = alias;
  return CLI_OK;
}

sheaf_status cli_open_weights(sheaf_ctx *ctx, const char *name, sheaf_st_file **out) {
  size_t size;
  const void *held = sh_file_held_data(name, &size);
  return held ? sheaf_st_open_memory(ctx, held, size, name, out) : sheaf_st_open(ctx, name, out);
}

sh_out *cli_out_open(cli_outs *s, sheaf_ctx *ctx, const char *path, int flags) {
  if (s->n == CLI_MAX_OUTS) {
    cli_error("%s: too many output files", path);
    return NULL;
  }
  sh_out *o = &s->o[s->n];
  if (sh_out_open(ctx, path, flags, o) != SHEAF_OK) {
    cli_error("%s", o->err);
    return NULL;
  }
  s->n++;
  return o;
}

int cli_outs_commit(cli_outs *s) {
  int rc = CLI_OK;
  for (int pass = 0; pass < 2; pass++) /* the ones that write into a file first, then the renames */
    for (int i = 0; i < s->n; i++) {
      sh_out *o = &s->o[i];
      if (!o->target || sh_out_is_direct(o) != (pass == 0)) continue;
      if (rc != CLI_OK) sh_out_abort(o);
      else if (sh_out_commit(o) != SHEAF_OK) {
        cli_error("%s", o->err);
        rc = CLI_FAIL;
      }
    }
  s->n = 0;
  return rc;
}

int cli_check_staged(const sh_out *f, const char *what, int warnings_before) {
  FILE *t = f->tmp ? fopen(f->tmp, "rb") : NULL;
  bool written = t && fgetc(t) != EOF;
  if (t) fclose(t);
  if (written && cli_warnings() == warnings_before) return CLI_OK;
  cli_error("%s: the %s was not written", f->target, what);
  return CLI_FAIL;
}

void cli_outs_abort(cli_outs *s) {
  for (int i = 0; i < s->n; i++)
    if (s->o[i].target) sh_out_abort(&s->o[i]);
  s->n = 0;
}
