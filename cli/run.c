/*
 * run.c — `sheaf run` and `sheaf bench` for the built-in models
 * (src/models/: treelstm, childsum, bilstm, mvrnn): load the data, declare the
 * model (seeded random init or a safetensors file), run every instance in
 * batches through the auto-batching runtime (src/models/models.h: the same
 * path as the tests and benchmarks), report throughput and the graph's
 * counters, write per-instance outputs. `bench` repeats the run per policy
 * and prints a table.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "io/tree_labels.h"
#include "models/models.h"
#include "run.h"

static const char usage_run[] =
    "usage: sheaf run MODEL --data FILE [options]\n"
    "\n"
    "Runs a built-in example model over every instance of FILE, batched, and\n"
    "prints throughput and the runtime's counters. (A model source, 'sheaf run\n"
    "MODEL.sf ...', has its own options: 'sheaf run MODEL.sf --help'.)\n"
    "\n"
    "models:\n"
    "  treelstm   binary TreeLSTM (Tai et al. 2015) over binarized trees; output per\n"
    "             tree: 5 class log-probabilities (and the accuracy against the tree's\n"
    "             class: a PTB root label 0..4, a .conllu root word's UPOS class)\n"
    "  childsum   child-sum TreeLSTM over dependency trees; output: the root's h\n"
    "  bilstm     BiLSTM tagger over sentences; output per word: 17 UPOS log-probabilities\n"
    "             (and the accuracy against FILE's UPOS column, when it has one)\n"
    "  mvrnn      MV-RNN (Socher et al. 2012) over binarized trees; output: the root's p\n"
    "\n"
    "FILE: a .conllu treebank (binarized for treelstm and mvrnn, dependency trees for\n"
    "childsum, words and UPOS tags for bilstm), PTB trees, or token lines (bilstm).\n"
    "\n"
    "options:\n";

static const char usage_run_end[] =
    "\n"
    "Output files (--out, --trace, --save-weights) replace an existing file only when the run\n"
    "succeeds; a device or FIFO is written into. An output that is an input is refused (exit 2).\n";

static const char usage_bench[] =
    "usage: sheaf bench MODEL --data FILE [options]\n"
    "\n"
    "Times the model over the instances of FILE for each batching policy (after\n"
    "one warm-up pass) and prints instances/s, the runtime's counters per policy\n"
    "and the ratio to the sheaf policy.\n"
    "\n"
    "models: treelstm, childsum, bilstm, mvrnn ('sheaf run --help' has details)\n"
    "\n"
    "options:\n";

/* ------------------------------------------------------------- options */

typedef struct run_opts {
  cli_run_opts c; /* first: cli_run_flag's offsets are into it */
  sh_net_kind model;
  long long hidden, embed, mv_vocab, repeat;
  bool hidden_given, embed_given;
  sheaf_policy policies[4];
  int n_policies;
} run_opts;
_Static_assert(offsetof(run_opts, c) == 0, "cli_run_flag's offsets are into the first member");

/* Comma list of policies (bench's --policy), each parsed as run's --policy. */
static bool parse_policies(const cli_flags *s, const cli_flag *f, const char *v, void *opts) {
  run_opts *o = opts;
  o->n_policies = 0;
  char buf[256];
  if (strlen(v) >= sizeof buf) {
    cli_flag_error(s, f, "list too long: '%s'", v);
    return false;
  }
  strcpy(buf, v);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (o->n_policies == 4) {
      cli_flag_error(s, f, "at most 4 policies, got '%s'", v);
      return false;
    }
    if (!cli_flag_store(s, &cli_run_flag[CLI_RUN_POLICY], tok, o)) return false;
    o->policies[o->n_policies++] = (sheaf_policy)o->c.policy;
  }
  if (o->n_policies == 0) {
    cli_flag_error(s, f, "empty list");
    return false;
  }
  return true;
}

#define AT(field) .at = offsetof(run_opts, field)
static const cli_flag f_hidden = {"--hidden", CLI_FLAG_INT, AT(hidden), CLI_GIVEN(run_opts, hidden_given),
                                  .lo = 1, .hi = 65536, .arg = "H",
                                  .help = "hidden size (default 256; mvrnn 64)"};
static const cli_flag f_embed = {"--embed", CLI_FLAG_INT, AT(embed), CLI_GIVEN(run_opts, embed_given),
                                 .lo = 1, .hi = 65536, .arg = "E",
                                 .help = "embedding size (default 256; mvrnn: the hidden size)"};
static const cli_flag f_vocab = {
    "--vocab", CLI_FLAG_IN, AT(c.vocab), .arg = "FILE",
    .help = "number the words by this vocabulary (one word per line; others\n"
            "are <unk>), e.g. the .vocab that 'sheaf train' wrote beside\n"
            "its weights (not mvrnn); default: the vocabulary that weights\n"
            "from 'sheaf train' hold (metadata sheaf.words), if any"};
static const cli_flag f_mv_vocab = {"--mv-vocab", CLI_FLAG_INT, AT(mv_vocab), .lo = 1, .hi = 10000000, .arg = "N",
                                    .help = "mvrnn: words with their own matrix (most frequent; default 2000)"};
static const cli_flag f_out = {"--out", CLI_FLAG_OUT, AT(c.out), .arg = "FILE",
                               .help = "per-instance outputs, one line per output row ('-' = stdout):\n"
                                       "'INDEX v1 v2 ...' (bilstm: 'INDEX WORD v1 ...')"};
static const cli_flag f_stats = {"--stats", CLI_FLAG_BOOL, AT(c.stats),
                                 .help = "per-kernel batch counts and sizes (reads one graph, like --trace)"};
static const cli_flag f_policies = {"--policy", CLI_FLAG_CUSTOM, 0, .parse = parse_policies, .arg = "LIST",
                                    .help = "comma-separated policies (default: sheaf,none,depth,agenda)"};
static const cli_flag f_repeat = {"--repeat", CLI_FLAG_INT, AT(repeat), .lo = 1, .hi = 1000000, .arg = "R",
                                  .help = "timed passes per policy, best kept (default 3)"};
#undef AT

#define RUN(x) &cli_run_flag[CLI_RUN_##x]
static const cli_flag *const run_flags[] = {
    RUN(DATA),   &f_hidden,        &f_embed,  RUN(BATCH),     RUN(THREADS),   RUN(POLICY),
    RUN(PARALLEL), RUN(SEED),      RUN(WEIGHTS), RUN(SAVE_WEIGHTS), &f_vocab, RUN(LIMIT),
    &f_mv_vocab, RUN(MAX_VOCAB),   RUN(ALLOW_NONFINITE), &f_out, RUN(TRACE), &f_stats};
static const cli_flag *const bench_flags[] = {
    RUN(DATA),   &f_hidden,   &f_embed,       RUN(BATCH), RUN(THREADS), &f_policies, &f_repeat,
    RUN(PARALLEL), RUN(SEED), RUN(WEIGHTS),   &f_vocab,   RUN(LIMIT),   &f_mv_vocab, RUN(MAX_VOCAB),
    RUN(ALLOW_NONFINITE)};
#undef RUN

#define MODELS "MODEL: treelstm, childsum, bilstm or mvrnn"
static const cli_flags run_spec = {.cmd = "run", CLI_FLAGS_LIST(run_flags), .pos_noun = "model",
                                   .usage = usage_run, .usage_end = usage_run_end, .missing = MODELS};
static const cli_flags bench_spec = {.cmd = "bench", CLI_FLAGS_LIST(bench_flags), .pos_noun = "model",
                                     .usage = usage_bench, .missing = MODELS};
#undef MODELS

/* Parses argv (argv[0] is "run" or "bench"); returns CLI_OK, or an exit
 * code (help printed: -1 meaning exit 0). */
static int parse_args(int argc, char **argv, bool bench, run_opts *o) {
  memset(o, 0, sizeof *o);
  cli_run_opts_init(&o->c);
  o->repeat = 3;
  o->hidden = -1;
  o->embed = -1;
  o->mv_vocab = SH_DATASET_MV_CAP_DEFAULT;
  o->policies[0] = SHEAF_POLICY_SHEAF;
  o->n_policies = 1;
  if (bench) {
    o->policies[1] = SHEAF_POLICY_NONE;
    o->policies[2] = SHEAF_POLICY_DEPTH;
    o->policies[3] = SHEAF_POLICY_AGENDA;
    o->n_policies = 4;
  }
  const cli_flags *spec = bench ? &bench_spec : &run_spec;
  const char *cmd = spec->cmd, *model;
  int rc = cli_flags_parse(spec, argc, argv, o, &model);
  if (rc) return rc;
  if (!bench) o->policies[0] = (sheaf_policy)o->c.policy;
  if (!sh_net_kind_parse(model, &o->model)) {
    cli_error("%s: unknown model '%s' (expected treelstm, childsum, bilstm or mvrnn%s)", cmd,
              model, bench ? "" : ", or a MODEL.sf source");
    return CLI_USAGE;
  }
  if (!o->c.data) {
    cli_error("%s: missing --data FILE (e.g. --data data/ud_english_ewt/en_ewt-ud-test.conllu)",
              cmd);
    return CLI_USAGE;
  }
  if (o->c.vocab && o->model == SH_NET_MVRNN) {
    cli_error("%s: --vocab: mvrnn numbers its word matrices by frequency in the data", cmd);
    return CLI_USAGE;
  }
  if ((rc = cli_run_check(cmd, &o->c, true)) != CLI_OK) return rc;
  if (o->c.trace || o->c.stats) o->c.parallel = SHEAF_PARALLEL_KERNELS;
  if (o->hidden < 0) o->hidden = sh_net_default_hidden(o->model);
  if (o->model == SH_NET_MVRNN && o->embed >= 0 && o->embed != o->hidden) {
    cli_error("%s: --embed: mvrnn word vectors have the hidden size (%lld), got %lld", cmd,
              (long long)o->hidden, (long long)o->embed);
    return CLI_USAGE;
  }
  if (o->embed < 0) o->embed = 256;
  if (o->model == SH_NET_MVRNN) o->embed = o->hidden;
  return cli_flags_check_files(spec, o, NULL, 0);
}

/* ----------------------------------------------------------- the setup */

typedef struct session {
  sheaf_ctx *ctx;
  sheaf_st_file *weights; /* --weights, opened once (cli_open_weights) */
  sh_dataset data;
  sh_net net;
  int32_t count; /* instances run */
  int64_t size;  /* their nodes / words */
  double flops;  /* their useful FLOPs */
} session;

static int fail_ctx(sheaf_ctx *ctx) {
  cli_error("%s", sheaf_ctx_last_error(ctx));
  return CLI_FAIL;
}

static void session_free(session *s) {
  sheaf_st_close(s->weights);
  sh_net_free(&s->net);
  sh_dataset_free(&s->data);
  sheaf_ctx_free(s->ctx);
}

/* The limit on token ids: the rows of the weights' word table 'emb' (every
 * built-in model has one; its last row is <unk>), else --max-vocab. Opens
 * the weights (s->weights, kept for the load). */
static void id_limit(session *s, const run_opts *o, sh_dataset_opts *lim, char *what, size_t cap) {
  lim->max_vocab = o->c.max_vocab; /* 0: the default */
  lim->max_vocab_what = NULL;
  if (!o->c.weights || cli_open_weights(s->ctx, o->c.weights, &s->weights) != SHEAF_OK) {
    sheaf_ctx_clear_error(s->ctx); /* the load reports a bad weights file */
    return;
  }
  const sheaf_st_file *f = s->weights;
  long j = sheaf_st_find(f, "emb");
  if (j >= 0 && sheaf_st_rank(f, (size_t)j) == 2) {
    int64_t rows = sheaf_st_shape(f, (size_t)j)[0];
    if (rows >= 2 && (!o->c.max_vocab || rows - 1 < o->c.max_vocab)) {
      lim->max_vocab = rows - 1;
      snprintf(what, cap, "the word table 'emb' of %s has %lld rows, the last for <unk>",
               o->c.weights, (long long)rows);
      lim->max_vocab_what = what;
    }
  }
}

/* The value of a weights file's metadata key, or NULL. */
static const char *st_meta(const sheaf_st_file *f, const char *key) {
  for (size_t i = 0; f && i < sheaf_st_metadata_count(f); i++)
    if (!strcmp(sheaf_st_metadata_key(f, i), key)) return sheaf_st_metadata_value(f, i);
  return NULL;
}

/* --vocab, else the weights' "sheaf.words" metadata (the vocabulary 'sheaf
 * train' trained with, one word per line): the data's words renumbered by
 * its lines. Nothing to do without either. */
static sheaf_status renumber(session *s, const run_opts *o) {
  const char *words = o->c.vocab ? NULL : st_meta(s->weights, "sheaf.words");
  if (!o->c.vocab && !words) return SHEAF_OK;
  char name[1024];
  snprintf(name, sizeof name, "%s%s", o->c.vocab ? o->c.vocab : o->c.weights,
           o->c.vocab ? "" : " (metadata sheaf.words)");
  sh_vocab v;
  sh_vocab_init(&v, s->ctx);
  sheaf_status st = words ? sh_vocab_load(&v, words, strlen(words), name)
                          : sh_vocab_load_file(&v, o->c.vocab);
  if (st == SHEAF_OK && sh_vocab_size(&v) == 0)
    st = sh_fail(s->ctx, SHEAF_ERR_INVALID_ARG, "--vocab %s: the vocabulary is empty (one word per line)",
                 name);
  if (st == SHEAF_OK && s->data.kind == SH_DATASET_SENTS && sh_vocab_size(&s->data.words) == 0 &&
      s->data.n_tokens > 0)
    st = sh_fail(s->ctx, SHEAF_ERR_INVALID_ARG,
                 "--vocab %s: %s holds token ids, not words; --vocab maps words to ids", name,
                 o->c.data);
  if (st == SHEAF_OK) st = sh_dataset_renumber(&s->data, &v, NULL, NULL);
  sh_vocab_free(&v);
  return st;
}

/* The share of tagged words whose best-scoring tag is their UPOS (bilstm
 * on data with tags); false when no word has a tag. */
static bool tag_accuracy(const session *s, const sh_net_outputs *out, int64_t *right, int64_t *all) {
  const sh_dataset *d = &s->data;
  *right = *all = 0;
  if (s->net.kind != SH_NET_BILSTM) return false;
  for (int32_t i = 0; i < s->count; i++)
    for (int32_t w = 0; w < sh_dataset_size(d, i); w++) {
      int32_t tag = d->sent_tags[d->sent_off[i] + w];
      if (tag < 0) continue;
      const float *row = sh_net_outputs_row(out, i, w);
      int best = 0;
      for (int k = 1; k < SH_BILSTM_TAGS; k++)
        if (row[k] > row[best]) best = k;
      *right += best == tag;
      ++*all;
    }
  return *all > 0;
}

/* The treelstm's accuracy on its data's classes (io/tree_labels.h: a PTB
 * tree's root label 0..4, a .conllu sentence's root-word UPOS class),
 * printed with the majority class's share; nothing when the data has no
 * classes (a PTB root label that is not 0..4). */
static void tree_accuracy(const session *s, const run_opts *o, const sh_net_outputs *out) {
  const sh_dataset *d = &s->data;
  int32_t n = sh_dataset_count(d);
  int32_t *labels = malloc(((size_t)n + 1) * sizeof *labels);
  if (!labels) return;
  if (sh_tree_labels_load(s->ctx, o->c.data, d, labels) != SHEAF_OK) {
    sheaf_ctx_clear_error(s->ctx);
    free(labels);
    return;
  }
  sh_tree_task task = sh_tree_task_of(o->c.data);
  int64_t right = 0, count[SH_TREE_CLASSES] = {0};
  for (int32_t i = 0; i < s->count; i++) {
    const float *row = sh_net_outputs_row(out, i, 0);
    int best = 0;
    for (int k = 1; k < SH_TREELSTM_CLASSES; k++)
      if (row[k] > row[best]) best = k;
    right += best == labels[i];
    count[labels[i]]++;
  }
  int major = 0;
  for (int c = 1; c < SH_TREE_CLASSES; c++)
    if (count[c] > count[major]) major = c;
  printf("  accuracy: %.2f%% (%lld of %d trees: the best-scoring class is %s of %s; majority "
         "class %s: %.2f%%)\n",
         100.0 * (double)right / s->count, (long long)right, (int)s->count,
         task == SH_TREE_TASK_ROOT_UPOS ? "the root word's UPOS class" : "the root's label",
         o->c.data, sh_tree_class_name(task, major), 100.0 * (double)count[major] / s->count);
  free(labels);
}

/* bilstm and treelstm with --weights: --hidden and --embed not given are
 * the weights' (emb [V, E]; W_fwd [E + H, 4H], W_node [2H, 5H]). */
static void weight_sizes(const session *s, run_opts *o) {
  const sheaf_st_file *f = s->weights;
  bool tree = o->model == SH_NET_TREELSTM;
  long e = f ? sheaf_st_find(f, "emb") : -1, w = f ? sheaf_st_find(f, tree ? "W_node" : "W_fwd") : -1;
  if (e < 0 || w < 0 || sheaf_st_rank(f, (size_t)e) != 2 || sheaf_st_rank(f, (size_t)w) != 2) return;
  if (!o->embed_given) o->embed = sheaf_st_shape(f, (size_t)e)[1];
  if (!o->hidden_given) o->hidden = sheaf_st_shape(f, (size_t)w)[1] / (tree ? 5 : 4);
}

/* o->c.data and o->c.weights become the names the inputs are read by (standard
 * input, a pipe or a FIFO is read once into memory: cli_hold_input). */
static int session_open(run_opts *o, session *s) {
  memset(s, 0, sizeof *s);
  s->ctx = cli_ctx((int)o->c.threads);
  if (!s->ctx) return CLI_FAIL;
  if (cli_hold_input(s->ctx, o->c.data, true, &o->c.data, NULL) != CLI_OK ||
      (o->c.weights && cli_hold_input(s->ctx, o->c.weights, false, &o->c.weights, NULL) != CLI_OK)) {
    sheaf_ctx_free(s->ctx);
    return CLI_FAIL;
  }
  sh_dataset_opts lim;
  char lim_what[512];
  id_limit(s, o, &lim, lim_what, sizeof lim_what);
  if (sh_dataset_load_opts(s->ctx, o->c.data, sh_net_data_kind(o->model), &lim, &s->data) !=
      SHEAF_OK) {
    fail_ctx(s->ctx);
    sheaf_st_close(s->weights);
    sheaf_ctx_free(s->ctx);
    return CLI_FAIL;
  }
  if (o->model == SH_NET_MVRNN && sh_dataset_finish(&s->data, (int32_t)o->mv_vocab) != SHEAF_OK)
    goto fail;
  if (o->model != SH_NET_MVRNN && renumber(s, o) != SHEAF_OK) goto fail;
  if (o->model == SH_NET_BILSTM || o->model == SH_NET_TREELSTM) weight_sizes(s, o);
  if (sh_net_create(s->ctx, o->model, &s->data, o->hidden, o->embed, &s->net) != SHEAF_OK)
    goto fail;
  if (o->c.allow_nonfinite) sheaf_model_allow_nonfinite(s->net.model, 1);
  if (o->c.weights) { /* a file that did not open in id_limit is opened again for its error */
    if ((!s->weights && cli_open_weights(s->ctx, o->c.weights, &s->weights) != SHEAF_OK) ||
        sheaf_model_load_st(s->net.model, s->weights) != SHEAF_OK)
      goto fail;
  } else if (sh_net_seed(&s->net, o->c.seed) != SHEAF_OK) {
    goto fail;
  }
  s->count = sh_dataset_count(&s->data);
  if (o->c.limit && o->c.limit < s->count) s->count = (int32_t)o->c.limit;
  s->size = sh_dataset_size_range(&s->data, 0, s->count);
  for (int32_t i = 0; i < s->count; i++) s->flops += sh_net_flops(&s->net, i);
  return CLI_OK;
fail:
  fail_ctx(s->ctx);
  session_free(s);
  return CLI_FAIL;
}

static const char *size_noun(sh_net_kind k) { return k == SH_NET_BILSTM ? "words" : "nodes"; }

static void print_header(const run_opts *o, const session *s, const char *policy) {
  const sh_dataset *d = &s->data;
  printf("%s: %d %s, %lld %s from %s\n", sh_net_kind_name(o->model), (int)s->count,
         sh_net_instance_noun(o->model), (long long)s->size, size_noun(o->model), o->c.data);
  printf("  hidden %lld, embed %lld, vocab %d", (long long)o->hidden, (long long)o->embed,
         (int)d->vocab);
  if (o->model == SH_NET_MVRNN) printf(" (matrices %d)", (int)d->mv_vocab);
  printf(", %s", o->c.weights ? "weights " : "seed ");
  if (o->c.weights) printf("%s", o->c.weights);
  else printf("%llu", (unsigned long long)o->c.seed);
  printf("\n  policy %s, batch %lld, threads %d, isa %s\n", policy, o->c.batch,
         sheaf_ctx_threads(s->ctx), sheaf_isa_name(sheaf_cpu_isa()));
}

static void print_parallel(sheaf_parallel mode, const sheaf_ctx *ctx) {
  int t = sheaf_ctx_threads(ctx);
  if (t <= 1) return;
  printf("  parallel: %s\n", mode == SHEAF_PARALLEL_BATCHES
                                 ? "batches (whole batches at once, a graph per thread)"
                                 : "kernels (one batch at a time, its kernels over the threads)");
}

static void print_kernel_stats(const sheaf_graph *g) {
  size_t n = sheaf_graph_kernel_stats(g, 0, NULL, NULL, NULL);
  if (n == 0) return;
  const char **names = calloc(n, sizeof *names);
  uint64_t *batches = calloc(n, sizeof *batches), *nodes = calloc(n, sizeof *nodes);
  if (names && batches && nodes) {
    n = sheaf_graph_kernel_stats(g, n, names, batches, nodes);
    cli_print_kernel_stats(stdout, n, names, batches, nodes);
  }
  free(names);
  free(batches);
  free(nodes);
}

/* Into --out's sh_out (committed with the other outputs at the end). */
static int write_outputs(sh_out *f, const sh_net_outputs *out, const sh_net *net) {
  if (sh_net_outputs_write(out, net, f->f) != 0 || fflush(f->f) != 0 || ferror(f->f)) {
    cli_error("%s: write failed: %s", f->target, strerror(errno));
    return CLI_FAIL;
  }
  return CLI_OK;
}


/* ---------------------------------------------------------------- run */

static int cmd_run(int argc, char **argv) {
  run_opts o;
  int rc = parse_args(argc, argv, false, &o);
  if (rc) return rc < 0 ? CLI_OK : rc;
  session s;
  if ((rc = session_open(&o, &s)) != CLI_OK) return rc;
  /* every output is written to a temporary file (or into a device) and
   * replaces the file only when the whole run succeeded */
  cli_outs files = {0};
  sh_out *out_f = NULL, *weights_f = NULL, *trace_f = NULL;
  if ((o.c.out && !(out_f = cli_out_open(&files, s.ctx, o.c.out, SH_OUT_DASH_STDOUT))) ||
      (o.c.save_weights && !(weights_f = cli_out_open(&files, s.ctx, o.c.save_weights, SH_OUT_STAGE))) ||
      (o.c.trace && !(trace_f = cli_out_open(&files, s.ctx, o.c.trace, SH_OUT_STAGE)))) {
    cli_outs_abort(&files);
    session_free(&s);
    return CLI_FAIL;
  }
  sheaf_policy policy = o.policies[0];
  print_header(&o, &s, sheaf_policy_name(policy));
  char fp[96]; /* the word numbering, so that a model run on these weights can check its own */
  sh_dataset_vocab_fingerprint(&s.data, fp, sizeof fp);
  const char *meta[2] = {"sheaf.vocab", fp};
  if (weights_f && sheaf_model_save_meta(s.net.model, weights_f->tmp, 1, meta) != SHEAF_OK) {
    rc = fail_ctx(s.ctx);
    cli_outs_abort(&files);
    session_free(&s);
    return rc;
  }

  /* --trace and --stats read one graph; otherwise a runner (batches in parallel) */
  bool one_graph = o.c.trace || o.c.stats;
  int warnings = cli_warnings();
  int64_t rows = 0;
  sheaf_graph_opts go = {policy, (int)o.c.threads, trace_f ? trace_f->tmp : NULL};
  sheaf_runner_opts ro = {o.c.batch, (int)o.c.threads, policy, o.c.parallel, NULL};
  sheaf_graph *g = NULL;
  sheaf_runner *r = NULL;
  sh_net_outputs out = {0};
  if ((one_graph ? sheaf_graph_create(s.net.model, &go, &g)
                 : sheaf_runner_create(s.net.model, &ro, &r)) != SHEAF_OK ||
      sh_net_outputs_init(&out, &s.net, 0, s.count) != SHEAF_OK) {
    rc = fail_ctx(s.ctx);
    goto done;
  }
  sheaf_parallel mode = r ? sheaf_runner_mode(r, s.count) : SHEAF_PARALLEL_KERNELS;
  print_parallel(mode, s.ctx);
  uint64_t t0 = sheaf_time_ns();
  if ((g ? sh_net_run(&s.net, g, 0, s.count, (int32_t)o.c.batch, &out)
         : sh_net_run_runner(&s.net, r, 0, s.count, &out)) != SHEAF_OK) {
    rc = fail_ctx(s.ctx);
    goto done;
  }
  double secs = (double)(sheaf_time_ns() - t0) * 1e-9;
  sheaf_graph_stats st;
  if (g) sheaf_graph_get_stats(g, &st);
  else sheaf_runner_get_stats(r, &st);
  printf("  %d %s in %.3f s: %.1f %s/s (%.0f %s/s), %.2f GFLOP/s useful\n", (int)s.count,
         sh_net_instance_noun(o.model), secs, s.count / secs, sh_net_instance_noun(o.model),
         (double)s.size / secs, size_noun(o.model), s.flops / secs * 1e-9);
  cli_print_graph_stats(stdout, &st, mode == SHEAF_PARALLEL_BATCHES);
  int64_t right, tagged;
  if (tag_accuracy(&s, &out, &right, &tagged))
    printf("  accuracy: %.2f%% (%lld of %lld tagged words: the best-scoring tag is the UPOS of %s)\n",
           100.0 * (double)right / (double)tagged, (long long)right, (long long)tagged, o.c.data);
  if (o.model == SH_NET_TREELSTM && s.count > 0) tree_accuracy(&s, &o, &out);
  if (o.c.stats) print_kernel_stats(g);
  if (out_f) rc = write_outputs(out_f, &out, &s.net);
  rows = out.rows;
done:
  sh_net_outputs_free(&out);
  sheaf_runner_free(r);
  sheaf_graph_free(g); /* writes the trace (to its temporary file) */
  /* sheaf_graph_free cannot report a failure: it logs a warning */
  if (rc == CLI_OK && trace_f) rc = cli_check_staged(trace_f, "trace", warnings);
  if (rc == CLI_OK) rc = cli_outs_commit(&files);
  else cli_outs_abort(&files);
  if (rc == CLI_OK && o.c.out && strcmp(o.c.out, "-"))
    printf("  outputs: %s (%lld lines: %s)\n", o.c.out, (long long)rows,
           o.model == SH_NET_TREELSTM ? "tree index, 5 class log-probabilities"
           : o.model == SH_NET_BILSTM ? "sentence index, word index, 17 tag log-probabilities"
                                         : "tree index, the root's vector");
  if (rc == CLI_OK && o.c.trace)
    printf("  trace: %s (open in https://ui.perfetto.dev or chrome://tracing)\n", o.c.trace);
  session_free(&s);
  return rc;
}

/* -------------------------------------------------------------- bench */

static int cmd_bench(int argc, char **argv) {
  run_opts o;
  int rc = parse_args(argc, argv, true, &o);
  if (rc) return rc < 0 ? CLI_OK : rc;
  session s;
  if ((rc = session_open(&o, &s)) != CLI_OK) return rc;
  char plist[64] = "";
  for (int i = 0; i < o.n_policies; i++)
    snprintf(plist + strlen(plist), sizeof plist - strlen(plist), "%s%s", i ? "," : "",
             sheaf_policy_name(o.policies[i]));
  print_header(&o, &s, plist);
  {
    sheaf_runner_opts ro = {o.c.batch, (int)o.c.threads, SHEAF_POLICY_SHEAF, o.c.parallel, NULL};
    sheaf_runner *r = NULL;
    if (sheaf_runner_create(s.net.model, &ro, &r) == SHEAF_OK)
      print_parallel(sheaf_runner_mode(r, s.count), s.ctx);
    sheaf_runner_free(r);
  }
  printf("  best of %lld timed passes after one warm-up pass\n\n", o.repeat);
  printf("%-8s %12s %10s %12s %10s %9s %12s %12s %9s\n", "policy",
         sh_net_instance_noun(o.model), "ms/pass", "ops/pass", "batches", "avg batch",
         "build ns/op", "sched ns/op", "vs sheaf");
  double sheaf_rate = 0;
  for (int pi = 0; pi < o.n_policies && rc == CLI_OK; pi++) {
    sheaf_runner_opts ro = {o.c.batch, (int)o.c.threads, o.policies[pi], o.c.parallel, NULL};
    sheaf_runner *r = NULL;
    if (sheaf_runner_create(s.net.model, &ro, &r) != SHEAF_OK ||
        sh_net_run_runner(&s.net, r, 0, s.count, NULL) != SHEAF_OK) { /* the warm-up pass */
      rc = fail_ctx(s.ctx);
      sheaf_runner_free(r);
      break;
    }
    double best = 1e30;
    sheaf_graph_stats a, b;
    sheaf_runner_get_stats(r, &a);
    for (long long k = 0; k < o.repeat && rc == CLI_OK; k++) {
      uint64_t t0 = sheaf_time_ns();
      if (sh_net_run_runner(&s.net, r, 0, s.count, NULL) != SHEAF_OK) rc = fail_ctx(s.ctx);
      double dt = (double)(sheaf_time_ns() - t0) * 1e-9;
      if (dt < best) best = dt;
    }
    sheaf_runner_get_stats(r, &b);
    sheaf_runner_free(r);
    if (rc != CLI_OK) break;
    double ops = (double)(b.nodes - a.nodes) / (double)o.repeat;
    double batches = (double)(b.batches - a.batches) / (double)o.repeat;
    double rate = s.count / best;
    if (o.policies[pi] == SHEAF_POLICY_SHEAF) sheaf_rate = rate;
    double all_ops = (double)(b.nodes - a.nodes);
    printf("%-8s %12.1f %10.2f %12.0f %10.0f %9.1f %12.1f %12.1f", sheaf_policy_name(o.policies[pi]),
           rate, best * 1e3, ops, batches, batches > 0 ? ops / batches : 0.0,
           all_ops > 0 ? (double)(b.ns_build - a.ns_build) / all_ops : 0.0,
           all_ops > 0 ? (double)(b.ns_schedule - a.ns_schedule) / all_ops : 0.0);
    if (sheaf_rate > 0) printf(" %9.2f", rate / sheaf_rate);
    printf("\n");
    fflush(stdout);
  }
  if (rc == CLI_OK)
    printf("\n(%s/s over %d %s, %.2f GFLOP of matrix products per pass)\n",
           sh_net_instance_noun(o.model), (int)s.count, sh_net_instance_noun(o.model),
           s.flops * 1e-9);
  session_free(&s);
  return rc;
}

int cli_run(int argc, char **argv) { return cmd_run(argc, argv); }
int cli_bench(int argc, char **argv) { return cmd_bench(argc, argv); }
