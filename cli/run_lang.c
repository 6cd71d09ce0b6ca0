/*
 * run_lang.c — `sheaf run MODEL.sf --data FILE [options]` (the flags:
 * lang_flags, parsed by cli/flags.c, most shared with the built-in
 * models' run through cli_run_flag): compiles the model,
 * reads the data according to main's argument type (a tree ADT: binarized
 * or dependency trees from CoNLL-U / PTB; list[i32]: sentences), numbers
 * its words (in order of first appearance, or by --vocab), binds the
 * parameters, runs main on each instance, `--batch` instances per flush,
 * through a runner (on several threads whole batches in parallel, an
 * interpreter per thread), and prints every output in instance order (see
 * write_value). A progress bar goes to stderr
 * when it is a terminal and the run is long.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/file.h"
#include "cli.h"
#include "compile/dyncoarse.h"
#include "io/dataset.h"
#include "lang/interp.h"
#include "run_lang.h"
#include "run_lang_linear.h"
#include "run_lang_out.h"

static const char usage[] =
    "usage: sheaf run MODEL.sf --data FILE [options]\n"
    "\n"
    "Runs the model's main on every instance of FILE, read according to main's argument:\n"
    "a tree type from CoNLL-U (binarized, or dependency trees for Dep(i32, list[T])) or PTB\n"
    "trees; list[i32] from CoNLL-U sentences or token lines. Sizes the weights do not fix\n"
    "come from --size; --weights fixes the others by its shapes.\n"
    "\n"
    "options:\n";

static const char usage_end[] =
    "\n"
    "With --out FILE a summary of the run goes to stdout (the built-in models' one): instances/s,\n"
    "the graph's counters and where the time went.\n"
    "\n"
    "Output files (--out, --trace, --save-weights) replace an existing file only when the run\n"
    "succeeds; a device or FIFO is written into. An output that is an input is refused (exit 2).\n";

#define SH_LANG_MAX_WORKERS 64 /* --threads */

typedef struct lang_opts {
  cli_run_opts c; /* first: cli_run_flag's offsets are into it */
  const char *file, *tuning;
  int format; /* lang_format */
  int mode;   /* lang_mode */
  bool emit_kernels;
  int host;   /* sh_interp_host: --host vm|ast */
  char dynamic_flag[16]; /* a flag of the dynamic runtime that was given (--policy, --host,
                            --parallel): --mode auto then runs dynamic */
  int coarsen; /* --coarsen on|off: 1 on, 0 off (the default: measured slower, docs/COMPILER.md) */
  sh_lang_bind_opts bo;
  char names[SH_BIND_MAX_OVERRIDES][64];
} lang_opts;
_Static_assert(offsetof(lang_opts, c) == 0, "cli_run_flag's offsets are into the first member");

/* --size NAME=VALUE, repeated: a size the weights do not fix. */
static bool parse_size(const cli_flags *s, const cli_flag *f, const char *v, void *opts) {
  lang_opts *o = opts;
  const char *eq = strchr(v, '=');
  int k = o->bo.n_overrides;
  long long x;
  if (!eq || eq == v || (size_t)(eq - v) >= sizeof o->names[0]) {
    cli_flag_error(s, f, "expected NAME=VALUE (e.g. %s H=256), got '%s'", f->name, v);
    return false;
  }
  if (k == SH_BIND_MAX_OVERRIDES) {
    cli_flag_error(s, f, "at most %d sizes, got '%s'", SH_BIND_MAX_OVERRIDES, v);
    return false;
  }
  snprintf(o->names[k], sizeof o->names[0], "%.*s", (int)(eq - v), v);
  if (!cli_flag_int(s, f, eq + 1, 1, INT32_MAX, &x)) return false;
  o->bo.override_name[k] = o->names[k];
  o->bo.override_value[k] = x;
  o->bo.n_overrides++;
  return true;
}

static const char *const format_names[] = {"text", "jsonl", "npy", NULL};
static const int format_values[] = {LANG_FORMAT_TEXT, LANG_FORMAT_JSONL, LANG_FORMAT_NPY};
typedef enum lang_mode { LANG_MODE_AUTO = 0, LANG_MODE_DYNAMIC, LANG_MODE_LINEAR } lang_mode;
static const char *const mode_names[] = {"auto", "dynamic", "linear", NULL};
static const char *const mode_said[] = {"auto", "dynamic", "linear"};

#define AT(field) .at = offsetof(lang_opts, field)
static const cli_flag f_vocab = {
    "--vocab", CLI_FLAG_IN, AT(c.vocab), .arg = "FILE",
    .help = "word ids: line i of FILE is word i; words not in it use the unknown\n"
            "row (a line '<unk>', else the tables' last row). Default: words are\n"
            "numbered in order of first appearance in --data, <unk> last"};
static const cli_flag f_size = {"--size", CLI_FLAG_CUSTOM, 0, .parse = parse_size, .arg = "NAME=VALUE",
                                .help = "a size the weights do not fix (e.g. --size H=256); repeatable"};
static const cli_flag f_threads = {"--threads", CLI_FLAG_INT, AT(c.threads), .lo = 1, .hi = SH_LANG_MAX_WORKERS,
                                   .arg = "T", .help = "threads (default: all CPUs, at most 64); with\n"
                                                       "--parallel batches an interpreter per thread"};
static const cli_flag f_out = {"--out", CLI_FLAG_OUT, AT(c.out), .arg = "FILE",
                               .help = "outputs (default stdout): per instance, one line per output row,\n"
                                       "'INSTANCE v0 v1 ...' ('INSTANCE K v0 ...' for element K of a list)"};
static const cli_flag f_tuning = {"--tuning", CLI_FLAG_IN, AT(tuning), .arg = "FILE",
                                  .help = "schedules for the model's kernels per shape class, written by\n"
                                          "'sheaf tune --out FILE' (records in the cache directory are used\n"
                                          "without it)"};
static const cli_flag f_stats = {"--stats", CLI_FLAG_BOOL, AT(c.stats),
                                 .help = "per-kernel batch counts and sizes, and the tuned schedules used"};
static const cli_flag f_format = {
    "--format", CLI_FLAG_ENUM, AT(format), .choices = format_names, .values = format_values, .arg = "F",
    .help = "text (default: the lines above), jsonl (one JSON object per\n"
            "instance: {\"instance\", \"tokens\" (sentences), \"output\"}, tuple\n"
            "parts named as in main's result type) or npy (every output row\n"
            "stacked into one f32 matrix; FILE.offsets.npy gives each\n"
            "instance's first row when instances have several)"};
static const cli_flag f_mode = {
    "--mode", CLI_FLAG_ENUM, AT(mode), .choices = mode_names, .arg = "M",
    .help = "auto (default): linear when the model linearizes and no flag of the\n"
            "dynamic runtime (--policy, --parallel, --host, --coarsen, --trace) is\n"
            "given, else dynamic; dynamic: the graph runtime batches each instance's\n"
            "ops; linear: one generated kernel per level and arm (docs/COMPILER.md),\n"
            "an error naming the reason when the model does not linearize"};
static const cli_flag f_emit_kernels = {"--emit-kernels", CLI_FLAG_BOOL, AT(emit_kernels),
                                        .help = "print the linearized mode's generated kernels and exit"};
static const char *const host_names[] = {"vm", "ast", NULL};
static const int host_values[] = {SH_HOST_VM, SH_HOST_AST};
static const cli_flag f_host = {
    "--host", CLI_FLAG_ENUM, AT(host), .choices = host_names, .values = host_values, .arg = "H",
    .help = "what runs the model's functions: vm (default: the compiled host\n"
            "program) or ast (the AST walker); the same outputs. The dynamic\n"
            "runtime's: an error with --mode linear"};
static const char *const coarsen_names[] = {"on", "off", NULL};
static const int coarsen_values[] = {1, 0};
static const cli_flag f_coarsen = {
    "--coarsen", CLI_FLAG_ENUM, AT(coarsen), .choices = coarsen_names, .values = coarsen_values, .arg = "C",
    .help = "on: a function of vectors as one kernel (COMPILER.md); off (default)"};
#undef AT

#define RUN(x) &cli_run_flag[CLI_RUN_##x]
static const cli_flag *const lang_flags[] = {
    RUN(DATA),  RUN(WEIGHTS),   RUN(SEED),     &f_vocab,     &f_size,   RUN(MAX_VOCAB),
    RUN(ALLOW_NONFINITE),       RUN(BATCH),    &f_threads,   RUN(PARALLEL), RUN(POLICY),
    &f_out,     RUN(TRACE),     &f_tuning,     RUN(LIMIT),   RUN(SAVE_WEIGHTS), &f_stats, &f_format,
    &f_mode, &f_emit_kernels, &f_host, &f_coarsen};
#undef RUN
static const cli_flags lang_spec = {.cmd = "run", .see = "sheaf run MODEL.sf --help",
                                    CLI_FLAGS_LIST(lang_flags), .pos_noun = "model", .usage = usage,
                                    .usage_end = usage_end};

/* CLI_OK, CLI_USAGE, or -1 (help printed). */
static int parse_args(int argc, char **argv, lang_opts *o) {
  memset(o, 0, sizeof *o);
  cli_run_opts_init(&o->c);
  o->c.out = "-";
  o->c.policy = o->host = -1; /* unset: whether they were given decides --mode auto */
  int rc = cli_flags_parse(&lang_spec, argc, argv, o, &o->file);
  if (rc) return rc;
  if (o->c.policy >= 0) snprintf(o->dynamic_flag, sizeof o->dynamic_flag, "--policy");
  else if (o->host >= 0) snprintf(o->dynamic_flag, sizeof o->dynamic_flag, "--host");
  else if (o->c.parallel != SHEAF_PARALLEL_AUTO) snprintf(o->dynamic_flag, sizeof o->dynamic_flag, "--parallel");
  else if (o->coarsen) snprintf(o->dynamic_flag, sizeof o->dynamic_flag, "--coarsen");
  if (o->host >= 0 && o->mode == LANG_MODE_LINEAR) { /* the linearized mode runs no host program */
    cli_error("run: --host %s picks what runs the model's functions in the dynamic runtime; --mode linear runs "
              "generated kernels per level, no host program: use --mode dynamic (or auto) with --host",
              host_names[o->host == SH_HOST_AST]);
    return CLI_USAGE;
  }
  if (o->c.policy < 0) o->c.policy = SHEAF_POLICY_SHEAF;
  if (o->host < 0) o->host = SH_HOST_VM;
  if (!o->file || !o->c.data) {
    cli_error("run: need MODEL.sf and --data FILE\n%s", usage);
    return CLI_USAGE;
  }
  if ((rc = cli_run_check("run", &o->c, false)) != CLI_OK) return rc;
  o->bo.weights = o->c.weights; /* the binder's copy: the name the weights are read by */
  o->bo.seed = o->c.seed;
  if (o->format == LANG_FORMAT_NPY && !strcmp(o->c.out, "-")) {
    cli_error("run: --format npy needs --out FILE (the header is written last)");
    return CLI_USAGE;
  }
  const cli_path model = {"MODEL.sf", o->file};
  return cli_flags_check_files(&lang_spec, o, &model, 1);
}

/* ------------------------------------------------------------- words */

typedef struct words_info {
  sh_word_ids ids;      /* the run's word ids: the data's own or --vocab's (words.h) */
  int64_t vocab;        /* the table rows the words need (sh_word_rows(ids): sh_lang_bind_opts.vocab) */
  const int32_t *rank;  /* frequency ranks (borrowed from the data) or NULL */
  bool own_unk;         /* --vocab has a '<unk>' line */
  int64_t n_unknown, n_words; /* --vocab: words of the data not in it, of all */
  char fp[96];          /* the numbering's fingerprint (no --vocab): sh_dataset_vocab_fingerprint */
} words_info;

/* The run's word ids: --vocab's (the data renumbered in place: unknown
 * words get the '<unk>' line's id, or the word count: one row more) or,
 * without it, the data's own, with every word's frequency rank for capped
 * tables. */
static sheaf_status number_words(sheaf_ctx *ctx, const lang_opts *o, sh_dataset *d, words_info *wi) {
  memset(wi, 0, sizeof *wi);
  if (!o->c.vocab) {
    /* every word ranked: the capped-table rows of dataset.h with no cap */
    sheaf_status st = sh_dataset_finish(d, INT32_MAX);
    if (st != SHEAF_OK) return st;
    wi->ids = d->ids;
    wi->vocab = sh_word_rows(d->ids);
    wi->rank = d->ids.n_ids > 0 ? d->mv_row : NULL;
    sh_dataset_vocab_fingerprint(d, wi->fp, sizeof wi->fp);
    return SHEAF_OK;
  }
  bool sents = d->kind == SH_DATASET_SENTS;
  if (sents && sh_vocab_size(&d->words) == 0 && d->n_tokens > 0)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                   "--vocab %s: %s holds token ids, not words; --vocab maps words to ids", o->c.vocab,
                   o->c.data);
  sh_vocab v;
  sh_vocab_init(&v, ctx);
  sheaf_status st = sh_vocab_load_file(&v, o->c.vocab);
  if (st == SHEAF_OK && sh_vocab_size(&v) == 0)
    st = sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: the vocabulary is empty (one word per line)", o->c.vocab);
  if (st == SHEAF_OK) st = sh_dataset_renumber(d, &v, &wi->n_words, &wi->n_unknown);
  sh_vocab_free(&v);
  if (st != SHEAF_OK) return st;
  wi->ids = d->ids;
  wi->vocab = sh_word_rows(d->ids);
  wi->own_unk = d->ids.unk < d->ids.n_ids;
  return SHEAF_OK;
}

/* The tables must fit the vocabulary file: a row per word (and <unk>). */
static sheaf_status check_tables(sheaf_ctx *ctx, const lang_opts *o, const sh_module *m,
                                 const sh_lang_bind *b, const words_info *wi) {
  int best = -1;
  for (int p = 0; p < b->n_params; p++)
    if (b->table_rows[p] > 0 && (best < 0 || b->table_rows[p] > b->table_rows[best])) best = p;
  if (best < 0) return SHEAF_OK;
  int64_t rows = b->table_rows[best];
  const char *table = sh_sym_name(&m->syms, m->params[best]->name);
  if (!o->c.vocab) {
    /* trained weights read through this data's own numbering: unless the
     * weights recorded this very numbering (saved by a run on this data),
     * almost certainly not the one they were trained with */
    if (o->bo.weights && b->vocab_fp[0] && !strcmp(b->vocab_fp, wi->fp)) return SHEAF_OK;
    if (o->bo.weights && rows != wi->vocab)
      fprintf(stderr,
              "sheaf: warning: table %s of %s has %lld rows but %s numbers %lld words (+1 for "
              "<unk>) in order of first appearance: the weights were trained with another "
              "vocabulary, so word lookups pick the wrong rows. Give that vocabulary with "
              "--vocab FILE (one word per line, line i = row i)\n",
              table, o->bo.weights, (long long)rows, o->c.data, (long long)wi->ids.n_ids);
    else if (o->bo.weights)
      fprintf(stderr,
              "sheaf: warning: words of %s are numbered in order of first appearance there, "
              "but the weights %s %s: give their vocabulary with --vocab FILE\n",
              o->c.data, o->bo.weights,
              b->vocab_fp[0] ? "were saved with another numbering"
                             : "do not record the numbering they were trained with");
    else if (rows != wi->vocab)
      fprintf(stderr, "sheaf: note: table %s has %lld rows but %s has %lld words (+1 for <unk>): "
                      "words are numbered in order of first appearance there\n",
              table, (long long)rows, o->c.data, (long long)wi->ids.n_ids);
    return SHEAF_OK;
  }
  if (rows == wi->vocab) return SHEAF_OK;
  return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                 "--vocab %s: the largest table, %s, has %lld rows, but the vocabulary needs %lld "
                 "(one per word%s)",
                 o->c.vocab, table, (long long)rows, (long long)wi->vocab,
                 wi->own_unk ? ", '<unk>' included" : ", then one for <unk>");
}

/* Token ids read with trained weights are rows of their word tables: an id
 * past the largest table's rows (its last row is <unk>) is an error at its
 * line and column, not a silent <unk> or a frequency-ranked row. */
static sheaf_status check_ids(sheaf_ctx *ctx, const lang_opts *o, const sh_module *m,
                              const sh_lang_bind *b, const sh_dataset *d) {
  bool ids = d->kind == SH_DATASET_SENTS && sh_vocab_size(&d->words) == 0 && d->n_tokens > 0;
  if (!o->bo.weights || o->c.vocab || !ids) return SHEAF_OK;
  int best = -1;
  for (int p = 0; p < b->n_params; p++)
    if (b->table_rows[p] > 0 && (best < 0 || b->table_rows[p] > b->table_rows[best])) best = p;
  if (best < 0 || d->ids.n_ids <= b->table_rows[best] - 1) return SHEAF_OK;
  char what[512];
  snprintf(what, sizeof what, "the largest word table, %s, of %s has %lld rows, the last for <unk>",
           sh_sym_name(&m->syms, m->params[best]->name), o->bo.weights,
           (long long)b->table_rows[best]);
  return sh_dataset_check_ids(ctx, o->c.data, b->table_rows[best] - 1, what);
}

/* ------------------------------------------------------------- progress */

typedef struct progress {
  bool on;
  uint64_t t0, last;
  int shown;
} progress;

/* Redraws the bar on stderr (a terminal only; first after 0.5 s, then at
 * most every 0.1 s). */
static void progress_update(progress *p, int32_t done, int32_t total, const char *noun) {
  if (!p->on) return;
  uint64_t now = sheaf_time_ns();
  if (now - p->t0 < 500000000ull || (done < total && now - p->last < 100000000ull)) return;
  p->last = now;
  int width = 30, fill = total ? (int)((int64_t)done * width / total) : width;
  double secs = (double)(now - p->t0) * 1e-9;
  fprintf(stderr, "\r[%.*s%*s] %3d%%  %d/%d %s  %.0f/s ", fill, "==============================",
          width - fill, "", total ? (int)((int64_t)done * 100 / total) : 100, (int)done, (int)total,
          noun, secs > 0 ? done / secs : 0.0);
  fflush(stderr);
  p->shown = 1;
}

static void progress_end(progress *p) {
  if (p->shown) fputs("\r\033[K", stderr);
  p->shown = 0;
}

/* ---------------------------------------------------------- the runner */

/* One runner thread's interpreter and word buffers (by worker slot: the
 * runner never runs two callbacks with one slot at once). */
typedef struct lang_worker {
  sh_interp *ip;
  int32_t *words;
  int32_t cap;
  const char **form; /* token records' word texts (chars), cap entries */
  size_t *form_len;
} lang_worker;

/* What the runner's callbacks share. Outputs are formatted per instance as
 * their batch finishes (possibly out of order on several threads) and
 * written in instance order by whichever callback completes the next one. */
typedef struct lang_job {
  const sh_module *m;
  const sh_lang_bind *bind;
  const sh_dataset *d;
  const words_info *wi;
  const int32_t *form_ids; /* each token's id in d->words before --vocab (chars, jsonl tokens) */
  lang_format format;
  int host;                    /* sh_interp_host */
  const sh_dyncoarse *dc;      /* the coarsened regions (--coarsen on), or NULL */
  int64_t *npy_rows, npy_cols; /* npy: rows of each instance; the width (0: none yet) */
  char npy_why[256];           /* npy: why an instance could not be written */
  sheaf_ctx *ctx;
  const char *model_path;
  int32_t n, batch;
  const char *noun;
  sh_value *res;       /* by instance */
  char **text;         /* by instance: formatted, not yet written */
  size_t *text_len;
  int32_t next;        /* first instance not written */
  FILE *out;
  bool write_failed;
  progress *pg;
  pthread_mutex_t mu;  /* text, next, out, pg */
  lang_worker *w;      /* by worker slot (sheaf_runner_threads) */
  int nw;
  atomic_int failed_at; /* smallest failing instance (INT32_MAX: none) */
} lang_job;

/* The worker of slot `worker`, its interpreter created on first use; NULL
 * when out of memory. */
static lang_worker *worker_of(lang_job *j, int worker) {
  lang_worker *w = &j->w[worker];
  if (!w->ip && (sh_interp_create(j->m, j->bind, &w->ip) != SHEAF_OK ||
                 sh_interp_set_host(w->ip, (sh_interp_host)j->host) != SHEAF_OK ||
                 (j->dc && sh_interp_set_regions(w->ip, sh_dyncoarse_n_regions(j->dc),
                                                 sh_dyncoarse_regions(j->dc)) != SHEAF_OK)))
    return NULL;
  return w;
}

static void note_failure(lang_job *j, int64_t i) {
  int cur = atomic_load(&j->failed_at);
  while ((int)i < cur && !atomic_compare_exchange_weak(&j->failed_at, &cur, (int)i)) {
  }
}

static sheaf_status lang_build(sheaf_graph *g, int64_t i, int worker, void *user) {
  lang_job *j = user;
  lang_worker *w = worker_of(j, worker);
  if (!w) return sheaf_graph_fail(g, SHEAF_ERR_NOMEM, "out of memory: an interpreter");
  const sh_dataset *d = j->d;
  sh_value in;
  sheaf_status st;
  if (d->kind == SH_DATASET_SENTS) {
    int32_t off = d->sent_off[i], len = d->sent_off[i + 1] - off;
    if (len + 1 > w->cap) {
      int32_t *nb = realloc(w->words, ((size_t)len + 1) * sizeof *nb);
      const char **nf = nb ? realloc(w->form, ((size_t)len + 1) * sizeof *nf) : NULL;
      if (nf) w->form = nf;
      size_t *nl = nf ? realloc(w->form_len, ((size_t)len + 1) * sizeof *nl) : NULL;
      if (nb) w->words = nb;
      if (!nl) return sheaf_graph_fail(g, SHEAF_ERR_NOMEM, "out of memory: a sentence of %d words", (int)len);
      w->form_len = nl;
      w->cap = len + 1;
    }
    for (int32_t k = 0; k < len; k++) {
      int32_t x = d->sent_words[off + k];
      w->words[k] = sh_word_id(j->wi->ids, x);
    }
    if (sh_check_main_input(j->m)->kind == SH_INPUT_RECORDS) {
      bool conllu = d->sent_xpos != NULL; /* token lines have words only */
      sh_token_cols t = {len, w->words, conllu ? d->sent_tags + off : NULL, conllu ? d->sent_xpos + off : NULL,
                         d->sent_deprel ? d->sent_deprel + off : NULL, d->sent_head ? d->sent_head + off : NULL,
                         NULL, NULL};
      if (j->form_ids) {
        for (int32_t k = 0; k < len; k++) {
          w->form[k] = sh_vocab_str(&d->words, j->form_ids[off + k]);
          w->form_len[k] = sh_vocab_len(&d->words, j->form_ids[off + k]);
        }
        t.form = w->form;
        t.form_len = w->form_len;
      }
      st = sh_interp_records(w->ip, &t, &in);
      if (st != SHEAF_OK && !sheaf_graph_status(g)) /* on the graph: the runner names the instance */
        st = sheaf_graph_fail(g, st, "%s: %s", j->model_path, sheaf_ctx_last_error(j->ctx));
    } else {
      st = sh_interp_ints(w->ip, w->words, len, &in);
    }
  } else {
    st = sh_interp_tree(w->ip, &d->tb, d->tb.tree_root[i], j->wi->ids, &in);
  }
  if (st == SHEAF_OK) st = sh_interp_main(w->ip, g, in, &j->res[i]);
  if (st != SHEAF_OK) note_failure(j, i);
  return st;
}

/* Writes every formatted instance from j->next on that is ready (j->mu held). */
static void drain(lang_job *j) {
  while (j->next < j->n && j->text[j->next]) {
    if (!j->write_failed && fwrite(j->text[j->next], 1, j->text_len[j->next], j->out) != j->text_len[j->next])
      j->write_failed = true;
    free(j->text[j->next]);
    j->text[j->next++] = NULL;
  }
  progress_update(j->pg, j->next, j->n, j->noun);
}

static sheaf_status lang_read(sheaf_graph *g, int64_t i, int worker, void *user) {
  lang_job *j = user;
  lang_worker *w = worker_of(j, worker);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = w ? open_memstream(&buf, &len) : NULL;
  if (!f) return sheaf_graph_fail(g, SHEAF_ERR_NOMEM, "out of memory: the outputs of instance %d", (int)i);
  int bad = 0;
  int64_t rows = 0, cols = 0;
  char why[256] = "";
  if (j->format == LANG_FORMAT_TEXT) {
    char prefix[16];
    snprintf(prefix, sizeof prefix, "%d", (int)i);
    bad = lang_out_text(f, g, prefix, j->res[i]);
  } else if (j->format == LANG_FORMAT_JSONL) {
    const sh_dataset *d = j->d;
    int32_t off = d->kind == SH_DATASET_SENTS ? d->sent_off[i] : 0;
    int32_t nt = d->kind == SH_DATASET_SENTS ? d->sent_off[i + 1] - off : 0;
    if (j->form_ids && nt > 0 && (w->cap < nt + 1)) nt = 0; /* (the buffer holds this sentence's) */
    for (int32_t k = 0; j->form_ids && k < nt; k++) {
      w->form[k] = sh_vocab_str(&d->words, j->form_ids[off + k]);
      w->form_len[k] = sh_vocab_len(&d->words, j->form_ids[off + k]);
    }
    bad = lang_out_json(f, g, j->m, i, j->res[i], j->form_ids && nt ? w->form : NULL, w->form_len, nt);
  } else {
    bad = lang_out_npy_rows(f, g, j->res[i], &rows, &cols, why, sizeof why);
  }
  bad |= fclose(f);
  if (bad && why[0]) {
    free(buf);
    note_failure(j, i);
    return sheaf_graph_fail(g, SHEAF_ERR_INVALID_ARG, "%s", why);
  }
  if (bad) {
    free(buf);
    note_failure(j, i);
    return sheaf_graph_status(g) ? sheaf_graph_status(g)
                                 : sheaf_graph_fail(g, SHEAF_ERR_NOMEM, "formatting the outputs of instance %d", (int)i);
  }
  /* the last instance of its batch: the batch's host values are done */
  if ((i + 1) % j->batch == 0 || i + 1 == j->n) sh_interp_reset(w->ip);
  pthread_mutex_lock(&j->mu);
  if (j->format == LANG_FORMAT_NPY) {
    j->npy_rows[i] = rows;
    if (j->npy_cols == 0) j->npy_cols = cols;
    if (rows > 0 && cols != j->npy_cols && !j->npy_why[0]) /* instances differ: the first says */
      snprintf(j->npy_why, sizeof j->npy_why,
               "--format npy writes one matrix: instance %d has rows of %lld columns, others %lld "
               "(use --format jsonl)", (int)i, (long long)cols, (long long)j->npy_cols);
  }
  j->text[i] = buf;
  j->text_len[i] = len;
  drain(j);
  pthread_mutex_unlock(&j->mu);
  return SHEAF_OK;
}

static void lang_job_free(lang_job *j) {
  for (int k = 0; j->w && k < j->nw; k++) {
    sh_interp_free(j->w[k].ip);
    free(j->w[k].words);
    free(j->w[k].form);
    free(j->w[k].form_len);
  }
  free(j->w);
  for (int32_t i = 0; j->text && i < j->n; i++) free(j->text[i]);
  free(j->text);
  free(j->text_len);
  free(j->res);
  free(j->npy_rows);
  pthread_mutex_destroy(&j->mu);
}

/* ------------------------------------------------------------- npy */

/* The real shape in out's header, and FILE.offsets.npy (int64, n + 1) when
 * an instance has other than one row. */
static int write_npy_shape(const lang_opts *o, const lang_job *j, FILE *out, int32_t n, cli_outs *files) {
  int64_t total = 0;
  bool one_each = true;
  for (int32_t i = 0; i < n; i++) total += j->npy_rows[i], one_each &= j->npy_rows[i] == 1;
  if (fflush(out) != 0 || fseek(out, 0, SEEK_SET) != 0 ||
      lang_npy_header(out, "<f4", 2, (int64_t[]){total, j->npy_cols}) != 0 || fseek(out, 0, SEEK_END) != 0) {
    cli_error("%s: write failed (--format npy needs a seekable file)", o->c.out);
    return CLI_FAIL;
  }
  if (one_each) return CLI_OK;
  char path[4096];
  snprintf(path, sizeof path, "%s.offsets.npy", o->c.out);
  sh_out *f = cli_out_open(files, NULL, path, 0); /* committed with --out */
  if (!f) return CLI_FAIL;
  bool ok = lang_npy_header(f->f, "<i8", 1, (int64_t[]){(int64_t)n + 1}) == 0;
  int64_t at = 0;
  for (int32_t i = 0; ok && i <= n; i++) {
    ok = fwrite(&at, sizeof at, 1, f->f) == 1;
    if (i < n) at += j->npy_rows[i];
  }
  if (!ok) cli_error("%s: write failed", path);
  return ok ? CLI_OK : CLI_FAIL;
}

/* ------------------------------------------------------------- summary */

/* --stats: which kernels ran a tuned schedule, and from which record
 * (sheaf_kernel_tuning_stats; docs/CODEGEN.md, "Tuner"). */
static void print_tuning_stats(FILE *f, sheaf_ctx *ctx, const char *tuning) {
  size_t n = sheaf_kernel_tuning_stats(ctx, 0, NULL);
  sheaf_kernel_tuning_use *u = n ? calloc(n, sizeof *u) : NULL;
  if (n && !u) return;
  n = sheaf_kernel_tuning_stats(ctx, n, u);
  if (!n) {
    if (tuning) fprintf(f, "  tuning: no record applied (every kernel ran its default schedule)\n");
    return;
  }
  fprintf(f, "  %-16s %10s  %-24s %-28s %s\n", "tuned kernel", "runs", "shape class", "schedule", "record");
  for (size_t i = 0; i < n; i++)
    fprintf(f, "  %-16s %10llu  %-24s %-28s %s\n", u[i].kernel, (unsigned long long)u[i].runs, u[i].shape_class,
            u[i].knobs, u[i].record);
  free(u);
}

static void print_summary(FILE *f, const lang_opts *o, sheaf_ctx *ctx, const sh_dataset *d, const lang_job *j,
                          const sheaf_runner *r, int32_t n, double secs, const sh_lin *lin, const char *lin_why) {
  int64_t size = 0; /* words or nodes of the instances run */
  for (int32_t i = 0; i < n; i++)
    size += d->kind == SH_DATASET_SENTS ? d->sent_off[i + 1] - d->sent_off[i] : d->tb.tree_size[i];
  bool sents = d->kind == SH_DATASET_SENTS;
  fprintf(f, "%s: %d %s, %lld %s from %s\n", o->file, (int)n, j->noun, (long long)size,
          sents ? "words" : "nodes", o->c.data);
  fprintf(f, "  %s%s", o->bo.weights ? "weights " : "seed ", o->bo.weights ? o->bo.weights : "");
  if (!o->bo.weights) fprintf(f, "%llu", (unsigned long long)o->bo.seed);
  for (int k = 0; k < o->bo.n_overrides; k++)
    fprintf(f, ", %s=%lld", o->bo.override_name[k], (long long)o->bo.override_value[k]);
  fprintf(f, "\n  policy %s, batch %lld, threads %d, isa %s\n", sheaf_policy_name((sheaf_policy)o->c.policy), o->c.batch,
          sheaf_ctx_threads(ctx), sheaf_isa_name(sheaf_cpu_isa()));
  if (lin) {
    fprintf(f, "  mode linear (--mode %s): %d generated kernels, compiled or loaded in %.3f s\n",
            mode_said[o->mode], sh_lin_n_kernels(lin), sh_lin_compile_seconds(lin));
    fprintf(f, "  %d %s in %.3f s: %.1f %s/s (%.0f nodes/s)\n", (int)n, j->noun, secs, secs > 0 ? n / secs : 0.0,
            j->noun, secs > 0 ? (double)size / secs : 0.0);
    return;
  }
  if (o->mode == LANG_MODE_AUTO) fprintf(f, "  mode dynamic (--mode auto; not linear: %s)\n", lin_why);
  else fprintf(f, "  mode dynamic (--mode dynamic)\n");
  sheaf_parallel mode = sheaf_runner_mode(r, n);
  if (sheaf_ctx_threads(ctx) > 1)
    fprintf(f, "  parallel: %s\n", mode == SHEAF_PARALLEL_BATCHES
                                       ? "batches (whole batches at once, a graph and interpreter per thread)"
                                       : "kernels (one batch at a time, its kernels over the threads)");
  sheaf_graph_stats st;
  sheaf_runner_get_stats(r, &st);
  fprintf(f, "  %d %s in %.3f s: %.1f %s/s (%.0f %s/s), %.2f GFLOP/s useful\n", (int)n, j->noun, secs,
          secs > 0 ? n / secs : 0.0, j->noun, secs > 0 ? (double)size / secs : 0.0, sents ? "words" : "nodes",
          secs > 0 ? (double)st.flops / secs * 1e-9 : 0.0);
  cli_print_graph_stats(f, &st, mode == SHEAF_PARALLEL_BATCHES);
  for (int k = 0; o->c.stats && k < j->nw; k++)
    if (j->w[k].ip) { /* what ran main (every worker's is the same) */
      char host[512];
      sh_interp_host_describe(j->w[k].ip, host, sizeof host);
      fprintf(f, "  %s\n", host);
      break;
    }
  if (o->c.stats && !lin) {
    if (j->dc) fputs(sh_dyncoarse_report(j->dc), f);
    else fprintf(f, "coarsening: off (%s)\n", o->coarsen ? "--host ast" : "--coarsen off, the default");
  }
  if (o->c.stats) {
    size_t cap = sheaf_runner_kernel_stats(r, 0, NULL, NULL, NULL);
    const char **names = calloc(cap + 1, sizeof *names);
    uint64_t *b = calloc(cap + 1, sizeof *b), *c = calloc(cap + 1, sizeof *c);
    if (names && b && c) cli_print_kernel_stats(f, sheaf_runner_kernel_stats(r, cap, names, b, c), names, b, c);
    free(names), free(b), free(c);
    print_tuning_stats(f, ctx, o->tuning);
  }
}

/* ------------------------------------------------------------- run */

int cli_run_lang(int argc, char **argv) {
  lang_opts o;
  int prc = parse_args(argc, argv, &o);
  if (prc) return prc < 0 ? CLI_OK : prc;
  sheaf_ctx *ctx = cli_ctx((int)o.c.threads);
  if (!ctx) return CLI_FAIL;
  int rc = CLI_FAIL;
  char *src = NULL;
  size_t len = 0;
  sh_module m;
  bool have_m = false, have_d = false;
  sh_dataset d;
  sheaf_model *model = NULL;
  sheaf_st_file *weights = NULL;
  sh_lang_bind bind = {0};
  sheaf_runner *runner = NULL;
  FILE *out = NULL;
  cli_outs files = {0}; /* --out, --save-weights, --trace, FILE.offsets.npy: committed together */
  sh_out *out_f = NULL, *weights_f = NULL, *trace_f = NULL;
  int warnings = cli_warnings();
  int32_t failed_at = -1;
  double secs = 0;
  bool uses_chars = false;
  int32_t *form_ids = NULL;
  progress pg = {0};
  sh_lin *lin = NULL;
  sh_dyncoarse *dc = NULL;
  char lin_why[512] = "";
  lang_job job;
  memset(&job, 0, sizeof job);
  pthread_mutex_init(&job.mu, NULL);
  atomic_init(&job.failed_at, INT32_MAX);
  sheaf_runner_opts ro = {.batch = o.c.batch, .threads = (int)o.c.threads, .policy = (sheaf_policy)o.c.policy,
                          .parallel = o.c.parallel, .trace_path = NULL};
  /* inputs: standard input, a pipe or a FIFO is read once into memory */
  if (cli_hold_input(ctx, o.file, false, &o.file, NULL) != CLI_OK ||
      cli_hold_input(ctx, o.c.data, true, &o.c.data, NULL) != CLI_OK ||
      (o.bo.weights && cli_hold_input(ctx, o.bo.weights, false, &o.bo.weights, NULL) != CLI_OK) ||
      (o.c.vocab && cli_hold_input(ctx, o.c.vocab, false, &o.c.vocab, NULL) != CLI_OK))
    goto fail_quiet;
  /* outputs: a regular file is replaced only when the run succeeds (the
   * library writes the weights and the trace by path: staged) */
  if (!(out_f = cli_out_open(&files, ctx, o.c.out, SH_OUT_DASH_STDOUT)) ||
      (o.c.save_weights && !(weights_f = cli_out_open(&files, ctx, o.c.save_weights, SH_OUT_STAGE))) ||
      (o.c.trace && !(trace_f = cli_out_open(&files, ctx, o.c.trace, SH_OUT_STAGE))))
    goto fail_quiet;
  out = out_f->f;
  if (trace_f) ro.trace_path = trace_f->tmp;
  if (sh_file_read(ctx, o.file, &src, &len) != SHEAF_OK) goto fail;
  if (o.tuning && sheaf_kernel_load_tuning(ctx, o.tuning) != SHEAF_OK) goto fail;
  have_m = true;
  if (sh_lang_compile(&m, ctx, o.file, src, len) != SHEAF_OK || sh_module_require_main(&m) != SHEAF_OK) {
    sh_buf b;
    sh_buf_init(&b, ctx);
    sh_diags_render(&m.diags, &b);
    if (b.data) fputs((const char *)b.data, stderr);
    bool said = b.len > 0; /* else (out of memory) the context's error */
    sh_buf_free(&b);
    if (!said) goto fail;
    goto fail_quiet;
  }
  /* what main takes decides how the data is read */
  if (sheaf_model_create(ctx, &model) != SHEAF_OK) goto fail;
  if (o.c.allow_nonfinite) sheaf_model_allow_nonfinite(model, 1);
  {
    const sh_input_shape *in = sh_check_main_input(&m);
    sh_input_kind k = in->kind;
    uses_chars = in->uses >> SH_TF_CHARS & 1;
    if (k == SH_INPUT_UNSUPPORTED) {
      sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: main's argument must be a tree type (Leaf(i32) | "
                                           "Node(T, T), or Dep(i32, list[T])), list[i32] or a list of "
                                           "token records", o.file);
      goto fail;
    }
    sh_dataset_kind dk = k == SH_INPUT_TOKENS || k == SH_INPUT_RECORDS ? SH_DATASET_SENTS
                      : k == SH_INPUT_DEP_TREE ? SH_DATASET_CHILDSUM : SH_DATASET_BINARY;
    sh_dataset_opts lim = {.max_vocab = o.c.max_vocab};
    if (sh_dataset_load_opts(ctx, o.c.data, dk, &lim, &d) != SHEAF_OK) goto fail;
    have_d = true;
  }
  words_info wi;
  bool want_forms = d.kind == SH_DATASET_SENTS && o.format == LANG_FORMAT_JSONL && sh_vocab_size(&d.words) > 0;
  if (uses_chars || want_forms) { /* the texts of the words, before --vocab renumbers them */
    if (uses_chars && sh_vocab_size(&d.words) == 0 && d.n_tokens > 0) {
      sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: main reads 'chars', but %s holds token ids, not words",
              o.file, o.c.data);
      goto fail;
    }
    if (!(form_ids = malloc(((size_t)d.n_tokens + 1) * sizeof *form_ids))) {
      sh_fail(ctx, SHEAF_ERR_NOMEM, "out of memory: %d words", (int)d.n_tokens);
      goto fail;
    }
    memcpy(form_ids, d.sent_words, (size_t)d.n_tokens * sizeof *form_ids);
  }
  if (number_words(ctx, &o, &d, &wi) != SHEAF_OK) goto fail;
  o.bo.vocab = wi.vocab;
  o.bo.word_rank = wi.rank;
  /* the weights are opened once: the binder reads their shapes and loads them */
  if (o.bo.weights && cli_open_weights(ctx, o.bo.weights, &weights) != SHEAF_OK) goto fail;
  o.bo.weights_file = weights;
  if (sh_lang_bind_model(&m, model, &o.bo, &bind) != SHEAF_OK) goto fail;
  if (check_tables(ctx, &o, &m, &bind, &wi) != SHEAF_OK) goto fail;
  if (check_ids(ctx, &o, &m, &bind, &d) != SHEAF_OK) goto fail;
  if (wi.n_unknown > 0)
    fprintf(stderr, "sheaf: note: %lld of %lld words of %s are not in %s: they use the <unk> row\n",
            (long long)wi.n_unknown, (long long)wi.n_words, o.c.data, o.c.vocab);
  if (o.c.save_weights) { /* with the word numbering (ours, unless --vocab gave one) */
    const char *meta[2] = {"sheaf.vocab", wi.fp};
    if (sheaf_model_save_meta(model, weights_f->tmp, o.c.vocab ? 0 : 1, meta) != SHEAF_OK) goto fail;
  }
  int32_t n = sh_dataset_count(&d);
  if (o.c.limit && o.c.limit < n) n = (int32_t)o.c.limit;
  if (o.c.trace && o.mode == LANG_MODE_LINEAR) {
    cli_error("run: --trace records the dynamic runtime's batches: use --mode dynamic (or auto)");
    goto fail_quiet;
  }
  if (o.c.trace && o.mode == LANG_MODE_AUTO) snprintf(lin_why, sizeof lin_why, "--trace records the dynamic runtime");
  else if (o.dynamic_flag[0] && o.mode == LANG_MODE_AUTO)
    snprintf(lin_why, sizeof lin_why, "%s configures the dynamic runtime", o.dynamic_flag);
  else if (o.mode == LANG_MODE_AUTO && !o.emit_kernels && sh_lin_auto_refusal(&m))
    snprintf(lin_why, sizeof lin_why, "%s; --mode linear runs it linearized", sh_lin_auto_refusal(&m));
  else if (o.mode != LANG_MODE_DYNAMIC || o.emit_kernels) { /* the linearized mode, when the model takes it */
    sheaf_status ls = sh_lin_create(&m, model, &bind, &lin, lin_why, sizeof lin_why);
    if (ls && !lin_why[0]) snprintf(lin_why, sizeof lin_why, "%s", sheaf_ctx_last_error(ctx));
    char *nl = strchr(lin_why, '\n'); /* auto's summary: the reason's line, not the kernel's source after it */
    if (nl && o.mode == LANG_MODE_AUTO) *nl = 0;
    if (ls && (o.mode == LANG_MODE_LINEAR || o.emit_kernels)) {
      cli_error("run: %s: %s", o.emit_kernels ? "--emit-kernels" : "--mode linear", lin_why);
      goto fail_quiet;
    }
  }
  if (o.emit_kernels) {
    fputs(sh_lin_kernel_source(lin), out);
    goto finish;
  }
  job.m = &m;
  job.bind = &bind;
  job.d = &d;
  job.wi = &wi;
  job.form_ids = form_ids;
  job.format = (lang_format)o.format;
  job.host = o.host;
  if (o.format == LANG_FORMAT_NPY && !(job.npy_rows = calloc((size_t)n + 1, sizeof *job.npy_rows))) {
    sh_fail(ctx, SHEAF_ERR_NOMEM, "out of memory: the outputs of %d instances", (int)n);
    goto fail;
  }
  if (o.format == LANG_FORMAT_NPY && lang_npy_header(out, "<f4", 2, (int64_t[]){0, 0}) != 0) {
    cli_error("%s: write failed", o.c.out);
    goto fail_quiet;
  }
  job.ctx = ctx;
  job.model_path = o.file;
  job.n = n;
  job.batch = (int32_t)o.c.batch;
  job.noun = d.kind == SH_DATASET_SENTS ? "sentences" : "trees";
  job.out = out;
  job.pg = &pg;
  job.res = calloc((size_t)n + 1, sizeof *job.res);
  job.text = calloc((size_t)n + 1, sizeof *job.text);
  job.text_len = calloc((size_t)n + 1, sizeof *job.text_len);
  if (!job.res || !job.text || !job.text_len) {
    sh_fail(ctx, SHEAF_ERR_NOMEM, "out of memory: the outputs of %d instances", (int)n);
    goto fail;
  }
  pg.t0 = sheaf_time_ns();
  if (lin) {
    if (lang_run_linear(lin, model, &m, &d, wi.ids, form_ids, n, job.batch, job.format, out, job.npy_rows, &job.npy_cols,
                        job.npy_why, sizeof job.npy_why, &failed_at) != SHEAF_OK)
      goto fail;
    goto ran;
  }
  if (o.coarsen && o.host == SH_HOST_VM) { /* the dynamic mode's coarsened regions */
    if (sh_dyncoarse_create(&m, &bind, &dc) != SHEAF_OK) goto fail;
    job.dc = dc;
  }
  if (sheaf_runner_create(model, &ro, &runner) != SHEAF_OK) goto fail;
  job.nw = sheaf_runner_threads(runner);
  if (!(job.w = calloc((size_t)job.nw, sizeof *job.w))) {
    sh_fail(ctx, SHEAF_ERR_NOMEM, "out of memory: %d workers", job.nw);
    goto fail;
  }
  pg.on = isatty(STDERR_FILENO) && n > job.batch;
  pg.t0 = sheaf_time_ns();
  /* a program that reads values (argmax, item) runs each instance on a
   * fiber: its reads wait for one flush batched across the instances */
  if (m.n_waits && sheaf_runner_set_fiber_stack(runner, SH_INTERP_FIBER_STACK) != SHEAF_OK) goto fail;
  if ((m.n_waits ? sheaf_runner_run_fibers : sheaf_runner_run)(runner, 0, n, lang_build, lang_read, &job) !=
      SHEAF_OK) {
    int at = atomic_load(&job.failed_at);
    failed_at = at == INT32_MAX ? -1 : at;
    goto fail;
  }
ran:
  if (job.write_failed) {
    cli_error("%s: write failed: %s", out_f->target, strerror(errno));
    goto fail_quiet;
  }
  progress_end(&pg);
  if (job.npy_why[0]) {
    cli_error("%s", job.npy_why);
    goto fail_quiet;
  }
  if (o.format == LANG_FORMAT_NPY && write_npy_shape(&o, &job, out, n, &files) != CLI_OK) goto fail_quiet;
  secs = (double)(sheaf_time_ns() - pg.t0) * 1e-9;
  if (strcmp(o.c.out, "-") || o.c.stats) /* stdout is free for the summary (or asked for) */
    print_summary(strcmp(o.c.out, "-") ? stdout : stderr, &o, ctx, &d, &job, runner, n, secs, lin, lin_why);
finish:
  errno = 0;
  if (fflush(out) != 0 || ferror(out)) {
    cli_error("%s: write failed: %s", out_f->target, errno ? strerror(errno) : "I/O error");
    goto fail_quiet;
  }
  rc = CLI_OK;
  goto done;
fail:
  progress_end(&pg);
  cli_error("%s", sheaf_ctx_last_error(ctx));
  if (failed_at >= 0)
    fprintf(stderr, "sheaf: note: while running %s %d of %s (0-based)\n",
            d.kind == SH_DATASET_SENTS ? "sentence" : "tree", (int)failed_at, o.c.data);
fail_quiet:
done:
  sheaf_runner_free(runner); /* writes the trace (to its temporary file) */
  sh_lin_free(lin);
  lang_job_free(&job);
  sh_dyncoarse_free(dc); /* after the interpreters */
  /* the runner cannot report a trace it failed to write: it logs a warning */
  if (rc == CLI_OK && trace_f) rc = cli_check_staged(trace_f, "trace", warnings);
  if (rc == CLI_OK) rc = cli_outs_commit(&files);
  else cli_outs_abort(&files);
  if (rc == CLI_OK && strcmp(o.c.out, "-")) /* the summary's last line, once the file is there */
    printf("  outputs: %s (%d instances)\n", o.c.out, (int)job.n);
  sh_lang_bind_free(ctx, &bind);
  sheaf_model_free(model);
  sheaf_st_close(weights);
  free(form_ids);
  if (have_d) sh_dataset_free(&d);
  if (have_m) sh_module_free(&m);
  if (src) sh_free(ctx, src, len + 1);
  sheaf_ctx_free(ctx);
  return rc;
}
