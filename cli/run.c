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
    "options:\n"
    "  --data FILE        input (required; '-' = standard input, a pipe or FIFO works)\n"
    "  --hidden H         hidden size (default 256; mvrnn 64)\n"
    "  --embed E          embedding size (default 256; mvrnn: the hidden size)\n"
    "  --batch N          instances per batch (default 64)\n"
    "  --threads T        threads (default: all CPUs)\n"
    "  --policy P         sheaf (default), none, depth or agenda\n"
    "  --parallel M       how threads are used: batches (whole batches in parallel,\n"
    "                     one graph per thread), kernels (one batch at a time, its\n"
    "                     kernels split over the threads) or auto (default: batches\n"
    "                     when there are at least 2 per thread; kernels with --trace\n"
    "                     or --stats, which read one graph)\n"
    "  --seed S           seed of the random initialization (default 0)\n"
    "  --weights W        load the parameters from a safetensors file instead ('-' = stdin)\n"
    "  --save-weights W   write the parameters used to a safetensors file\n"
    "  --vocab FILE       number the words by this vocabulary (one word per line; others\n"
    "                     are <unk>), e.g. the .vocab that 'sheaf train' wrote beside\n"
    "                     its weights (not mvrnn); default: the vocabulary that weights\n"
    "                     from 'sheaf train' hold (metadata sheaf.words), if any\n"
    "  --limit N          only the first N instances\n"
    "  --mv-vocab N       mvrnn: words with their own matrix (most frequent; default 2000)\n"
    "  --max-vocab N      token ids (token-line files) must be below N (default 1000000;\n"
    "                     with --weights: the rows of their 'emb' table, less <unk>); a\n"
    "                     larger id is an error naming its line and column\n"
    "  --allow-nonfinite  load weights holding NaN or infinities (refused by default:\n"
    "                     the error names the tensor and the first bad index)\n"
    "  --out FILE         per-instance outputs, one line per output row ('-' = stdout):\n"
    "                     'INDEX v1 v2 ...' (bilstm: 'INDEX WORD v1 ...')\n"
    "  --trace FILE       Chrome-trace / Perfetto JSON timeline of the batches\n"
    "  --stats            per-kernel batch counts and sizes\n"
    "  -h, --help         this text\n"
    "\n"
    "Output files (--out, --trace, --save-weights) replace an existing file only when the run\n"
    "succeeds; a device or FIFO is written into. An output that is an input is refused (exit 2).\n";

static const char usage_bench[] =
    "usage: sheaf bench MODEL --data FILE [options]\n"
    "\n"
    "Times the model over the instances of FILE for each batching policy (after\n"
    "one warm-up pass) and prints instances/s, the runtime's counters per policy\n"
    "and the ratio to the sheaf policy. Options as for 'sheaf run' (no --out,\n"
    "--trace, --save-weights, --stats), plus:\n"
    "  --policy LIST      comma-separated policies (default: sheaf,none,depth,agenda)\n"
    "  --repeat R         timed passes per policy, best kept (default 3)\n"
    "  (--parallel as for 'sheaf run')\n"
    "\n"
    "models: treelstm, childsum, bilstm, mvrnn ('sheaf run --help' has details)\n";

/* ------------------------------------------------------------- options */

typedef struct run_opts {
  sh_net_kind model;
  const char *data, *weights, *save_weights, *out, *trace, *vocab;
  int64_t hidden, embed;
  long long batch, threads, limit, mv_vocab, repeat, max_vocab;
  uint64_t seed;
  bool seed_given, stats, allow_nonfinite, hidden_given, embed_given;
  sheaf_parallel parallel;
  sheaf_policy policies[4];
  int n_policies;
} run_opts;

static bool is_help(const char *a) { return !strcmp(a, "--help") || !strcmp(a, "-h"); }

static bool parse_policy(const char *flag, const char *v, sheaf_policy *out) {
  static const struct {
    const char *name;
    sheaf_policy p;
  } names[] = {{"sheaf", SHEAF_POLICY_SHEAF},
               {"none", SHEAF_POLICY_NONE},
               {"depth", SHEAF_POLICY_DEPTH},
               {"agenda", SHEAF_POLICY_AGENDA}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!strcmp(v, names[i].name)) {
      *out = names[i].p;
      return true;
    }
  cli_error("%s: unknown policy '%s' (expected sheaf, none, depth or agenda)", flag, v);
  return false;
}

/* Comma list of policies (bench). */
static bool parse_policies(const char *v, run_opts *o) {
  o->n_policies = 0;
  char buf[256];
  if (strlen(v) >= sizeof buf) {
    cli_error("--policy: list too long: '%s'", v);
    return false;
  }
  strcpy(buf, v);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (o->n_policies == 4) {
      cli_error("--policy: at most 4 policies, got '%s'", v);
      return false;
    }
    if (!parse_policy("--policy", tok, &o->policies[o->n_policies])) return false;
    o->n_policies++;
  }
  if (o->n_policies == 0) {
    cli_error("--policy: empty list");
    return false;
  }
  return true;
}

/* Parses argv (argv[0] is "run" or "bench"); returns CLI_OK, or an exit
 * code (help printed: -1 meaning exit 0). */
static int parse_args(int argc, char **argv, bool bench, run_opts *o) {
  memset(o, 0, sizeof *o);
  o->batch = 64;
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
  const char *cmd = argv[0];
  const char *model = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = NULL;
    int r;
    long long x;
    if (is_help(a)) {
      fputs(bench ? usage_bench : usage_run, stdout);
      return -1;
    }
#define FLAG(name) ((r = cli_flag_value(argc, argv, &i, name, &v)) != 0)
    if (FLAG("--data")) {
      if (r < 0) return CLI_USAGE;
      o->data = v;
    } else if (FLAG("--weights")) {
      if (r < 0) return CLI_USAGE;
      o->weights = v;
    } else if (FLAG("--vocab")) {
      if (r < 0) return CLI_USAGE;
      o->vocab = v;
    } else if (FLAG("--hidden")) {
      if (r < 0 || !cli_parse_int("--hidden", v, 1, 65536, &x)) return CLI_USAGE;
      o->hidden = x;
      o->hidden_given = true;
    } else if (FLAG("--embed")) {
      if (r < 0 || !cli_parse_int("--embed", v, 1, 65536, &x)) return CLI_USAGE;
      o->embed = x;
      o->embed_given = true;
    } else if (FLAG("--batch")) {
      if (r < 0 || !cli_parse_int("--batch", v, 1, INT32_MAX, &o->batch)) return CLI_USAGE;
    } else if (FLAG("--threads")) {
      if (r < 0 || !cli_parse_int("--threads", v, 1, 1024, &o->threads)) return CLI_USAGE;
    } else if (FLAG("--limit")) {
      if (r < 0 || !cli_parse_int("--limit", v, 1, INT32_MAX, &o->limit)) return CLI_USAGE;
    } else if (FLAG("--mv-vocab")) {
      if (r < 0 || !cli_parse_int("--mv-vocab", v, 1, 10000000, &o->mv_vocab)) return CLI_USAGE;
    } else if (FLAG("--max-vocab")) {
      if (r < 0 || !cli_parse_int("--max-vocab", v, 1, INT32_MAX - 2, &o->max_vocab))
        return CLI_USAGE;
    } else if (!strcmp(a, "--allow-nonfinite")) {
      o->allow_nonfinite = true;
    } else if (FLAG("--seed")) {
      if (r < 0) return CLI_USAGE;
      char *end;
      errno = 0;
      unsigned long long s = strtoull(v, &end, 10);
      if (!*v || *end || errno || *v == '-') {
        cli_error("--seed: expected a non-negative integer, got '%s'", v);
        return CLI_USAGE;
      }
      o->seed = s;
      o->seed_given = true;
    } else if (FLAG("--policy")) {
      if (r < 0) return CLI_USAGE;
      if (bench ? !parse_policies(v, o) : !parse_policy("--policy", v, &o->policies[0]))
        return CLI_USAGE;
    } else if (FLAG("--parallel")) {
      if (r < 0 || !cli_parse_parallel(v, &o->parallel)) return CLI_USAGE;
    } else if (!bench && FLAG("--out")) {
      if (r < 0) return CLI_USAGE;
      o->out = v;
    } else if (!bench && FLAG("--trace")) {
      if (r < 0) return CLI_USAGE;
      o->trace = v;
    } else if (!bench && FLAG("--save-weights")) {
      if (r < 0) return CLI_USAGE;
      o->save_weights = v;
    } else if (bench && FLAG("--repeat")) {
      if (r < 0 || !cli_parse_int("--repeat", v, 1, 1000000, &o->repeat)) return CLI_USAGE;
    } else if (!bench && !strcmp(a, "--stats")) {
      o->stats = true;
    } else if (a[0] == '-' && a[1] != '\0') {
      cli_error("%s: unknown option '%s' (see 'sheaf %s --help')", cmd, a, cmd);
      return CLI_USAGE;
    } else if (!model) {
      model = a;
    } else {
      cli_error("%s: unexpected argument '%s' (the model is '%s')", cmd, a, model);
      return CLI_USAGE;
    }
#undef FLAG
  }
  if (!model) {
    cli_error("%s: missing MODEL (treelstm, childsum, bilstm or mvrnn; see 'sheaf %s --help')",
              cmd, cmd);
    return CLI_USAGE;
  }
  if (!sh_net_kind_parse(model, &o->model)) {
    cli_error("%s: unknown model '%s' (expected treelstm, childsum, bilstm or mvrnn%s)", cmd,
              model, bench ? "" : ", or a MODEL.sf source");
    return CLI_USAGE;
  }
  if (!o->data) {
    cli_error("%s: missing --data FILE (e.g. --data data/ud_english_ewt/en_ewt-ud-test.conllu)",
              cmd);
    return CLI_USAGE;
  }
  if (o->vocab && o->model == SH_NET_MVRNN) {
    cli_error("%s: --vocab: mvrnn numbers its word matrices by frequency in the data", cmd);
    return CLI_USAGE;
  }
  if (o->weights && o->seed_given) {
    cli_error("%s: --seed and --weights exclude each other (weights are loaded, not drawn)",
              cmd);
    return CLI_USAGE;
  }
  if ((o->trace || o->stats) && o->parallel == SHEAF_PARALLEL_BATCHES) {
    cli_error("%s: --%s reads one graph: use --parallel kernels (or auto)", cmd,
              o->trace ? "trace" : "stats");
    return CLI_USAGE;
  }
  if (o->trace || o->stats) o->parallel = SHEAF_PARALLEL_KERNELS;
  if (o->hidden < 0) o->hidden = sh_net_default_hidden(o->model);
  if (o->model == SH_NET_MVRNN && o->embed >= 0 && o->embed != o->hidden) {
    cli_error("--embed: mvrnn word vectors have the hidden size (%lld), got %lld",
              (long long)o->hidden, (long long)o->embed);
    return CLI_USAGE;
  }
  if (o->embed < 0) o->embed = 256;
  if (o->model == SH_NET_MVRNN) o->embed = o->hidden;
  return CLI_OK;
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
  lim->max_vocab = o->max_vocab; /* 0: the default */
  lim->max_vocab_what = NULL;
  if (!o->weights || cli_open_weights(s->ctx, o->weights, &s->weights) != SHEAF_OK) {
    sheaf_ctx_clear_error(s->ctx); /* the load reports a bad weights file */
    return;
  }
  const sheaf_st_file *f = s->weights;
  long j = sheaf_st_find(f, "emb");
  if (j >= 0 && sheaf_st_rank(f, (size_t)j) == 2) {
    int64_t rows = sheaf_st_shape(f, (size_t)j)[0];
    if (rows >= 2 && (!o->max_vocab || rows - 1 < o->max_vocab)) {
      lim->max_vocab = rows - 1;
      snprintf(what, cap, "the word table 'emb' of %s has %lld rows, the last for <unk>",
               o->weights, (long long)rows);
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
  const char *words = o->vocab ? NULL : st_meta(s->weights, "sheaf.words");
  if (!o->vocab && !words) return SHEAF_OK;
  char name[1024];
  snprintf(name, sizeof name, "%s%s", o->vocab ? o->vocab : o->weights,
           o->vocab ? "" : " (metadata sheaf.words)");
  sh_vocab v;
  sh_vocab_init(&v, s->ctx);
  sheaf_status st = words ? sh_vocab_load(&v, words, strlen(words), name)
                          : sh_vocab_load_file(&v, o->vocab);
  if (st == SHEAF_OK && sh_vocab_size(&v) == 0)
    st = sh_fail(s->ctx, SHEAF_ERR_INVALID_ARG, "--vocab %s: the vocabulary is empty (one word per line)",
                 name);
  if (st == SHEAF_OK && s->data.kind == SH_DATASET_SENTS && sh_vocab_size(&s->data.words) == 0 &&
      s->data.n_tokens > 0)
    st = sh_fail(s->ctx, SHEAF_ERR_INVALID_ARG,
                 "--vocab %s: %s holds token ids, not words; --vocab maps words to ids", name,
                 o->data);
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
  if (sh_tree_labels_load(s->ctx, o->data, d, labels) != SHEAF_OK) {
    sheaf_ctx_clear_error(s->ctx);
    free(labels);
    return;
  }
  sh_tree_task task = sh_tree_task_of(o->data);
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
         o->data, sh_tree_class_name(task, major), 100.0 * (double)count[major] / s->count);
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

/* o->data and o->weights become the names the inputs are read by (standard
 * input, a pipe or a FIFO is read once into memory: cli_hold_input). */
static int session_open(run_opts *o, session *s) {
  memset(s, 0, sizeof *s);
  s->ctx = cli_ctx((int)o->threads);
  if (!s->ctx) return CLI_FAIL;
  if (cli_hold_input(s->ctx, o->data, true, &o->data, NULL) != CLI_OK ||
      (o->weights && cli_hold_input(s->ctx, o->weights, false, &o->weights, NULL) != CLI_OK)) {
    sheaf_ctx_free(s->ctx);
    return CLI_FAIL;
  }
  sh_dataset_opts lim;
  char lim_what[512];
  id_limit(s, o, &lim, lim_what, sizeof lim_what);
  if (sh_dataset_load_opts(s->ctx, o->data, sh_net_data_kind(o->model), &lim, &s->data) !=
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
  if (o->allow_nonfinite) sheaf_model_allow_nonfinite(s->net.model, 1);
  if (o->weights) { /* a file that did not open in id_limit is opened again for its error */
    if ((!s->weights && cli_open_weights(s->ctx, o->weights, &s->weights) != SHEAF_OK) ||
        sheaf_model_load_st(s->net.model, s->weights) != SHEAF_OK)
      goto fail;
  } else if (sh_net_seed(&s->net, o->seed) != SHEAF_OK) {
    goto fail;
  }
  s->count = sh_dataset_count(&s->data);
  if (o->limit && o->limit < s->count) s->count = (int32_t)o->limit;
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
         sh_net_instance_noun(o->model), (long long)s->size, size_noun(o->model), o->data);
  printf("  hidden %lld, embed %lld, vocab %d", (long long)o->hidden, (long long)o->embed,
         (int)d->vocab);
  if (o->model == SH_NET_MVRNN) printf(" (matrices %d)", (int)d->mv_vocab);
  printf(", %s", o->weights ? "weights " : "seed ");
  if (o->weights) printf("%s", o->weights);
  else printf("%llu", (unsigned long long)o->seed);
  printf("\n  policy %s, batch %lld, threads %d, isa %s\n", policy, o->batch,
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

/* Inputs and outputs before any work: no output may be an input, only one
 * input may be standard input. */
static int check_files(const run_opts *o) {
  const cli_path ins[] = {{"--data", o->data}, {"--weights", o->weights}, {"--vocab", o->vocab}};
  const cli_path outs[] = {{"--out", o->out}, {"--save-weights", o->save_weights}, {"--trace", o->trace}};
  if (o->weights && !strcmp(o->data, "-") && !strcmp(o->weights, "-")) {
    cli_error("run: --data and --weights cannot both be standard input ('-')");
    return CLI_USAGE;
  }
  return cli_check_paths(ins, 3, outs, 3);
}

static int cmd_run(int argc, char **argv) {
  run_opts o;
  int rc = parse_args(argc, argv, false, &o);
  if (rc) return rc < 0 ? CLI_OK : rc;
  if ((rc = check_files(&o)) != CLI_OK) return rc;
  session s;
  if ((rc = session_open(&o, &s)) != CLI_OK) return rc;
  /* every output is written to a temporary file (or into a device) and
   * replaces the file only when the whole run succeeded */
  cli_outs files = {0};
  sh_out *out_f = NULL, *weights_f = NULL, *trace_f = NULL;
  if ((o.out && !(out_f = cli_out_open(&files, s.ctx, o.out, SH_OUT_DASH_STDOUT))) ||
      (o.save_weights && !(weights_f = cli_out_open(&files, s.ctx, o.save_weights, SH_OUT_STAGE))) ||
      (o.trace && !(trace_f = cli_out_open(&files, s.ctx, o.trace, SH_OUT_STAGE)))) {
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
  bool one_graph = o.trace || o.stats;
  int warnings = cli_warnings();
  int64_t rows = 0;
  sheaf_graph_opts go = {policy, (int)o.threads, trace_f ? trace_f->tmp : NULL};
  sheaf_runner_opts ro = {o.batch, (int)o.threads, policy, o.parallel, NULL};
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
  if ((g ? sh_net_run(&s.net, g, 0, s.count, (int32_t)o.batch, &out)
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
           100.0 * (double)right / (double)tagged, (long long)right, (long long)tagged, o.data);
  if (o.model == SH_NET_TREELSTM && s.count > 0) tree_accuracy(&s, &o, &out);
  if (o.stats) print_kernel_stats(g);
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
  if (rc == CLI_OK && o.out && strcmp(o.out, "-"))
    printf("  outputs: %s (%lld lines: %s)\n", o.out, (long long)rows,
           o.model == SH_NET_TREELSTM ? "tree index, 5 class log-probabilities"
           : o.model == SH_NET_BILSTM ? "sentence index, word index, 17 tag log-probabilities"
                                         : "tree index, the root's vector");
  if (rc == CLI_OK && o.trace)
    printf("  trace: %s (open in https://ui.perfetto.dev or chrome://tracing)\n", o.trace);
  session_free(&s);
  return rc;
}

/* -------------------------------------------------------------- bench */

static int cmd_bench(int argc, char **argv) {
  run_opts o;
  int rc = parse_args(argc, argv, true, &o);
  if (rc) return rc < 0 ? CLI_OK : rc;
  if ((rc = check_files(&o)) != CLI_OK) return rc;
  session s;
  if ((rc = session_open(&o, &s)) != CLI_OK) return rc;
  char plist[64] = "";
  for (int i = 0; i < o.n_policies; i++)
    snprintf(plist + strlen(plist), sizeof plist - strlen(plist), "%s%s", i ? "," : "",
             sheaf_policy_name(o.policies[i]));
  print_header(&o, &s, plist);
  {
    sheaf_runner_opts ro = {o.batch, (int)o.threads, SHEAF_POLICY_SHEAF, o.parallel, NULL};
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
    sheaf_runner_opts ro = {o.batch, (int)o.threads, o.policies[pi], o.parallel, NULL};
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
