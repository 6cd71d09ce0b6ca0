/*
 * train.c — `sheaf train bilstm|treelstm`: trains the built-in BiLSTM
 * tagger (src/models/bilstm.h) on the UPOS tags of a CoNLL-U file, or the
 * binary TreeLSTM on a class per tree (cli/train_tree.c), with the
 * batched backward pass and an optimizer of sheaf_train.h. Owns the
 * training vocabulary (words seen at least --min-count times; the others
 * train the <unk> row), the epoch loop (seeded shuffle, one graph per batch,
 * per-token NLL averaged over the batch's tokens), the progress line, the
 * per-epoch dev accuracy, the time limit and the checkpoints (weights and
 * vocabulary written to temporary files and renamed: never half-written).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "train.h"
#include "train_int.h"

_Static_assert(SH_TREE_CLASSES == SH_TREELSTM_CLASSES, "a tree class per TreeLSTM output");

static const char usage_train[] =
    "usage: sheaf train bilstm|treelstm --data TRAIN --out W.safetensors [options]\n"
    "\n"
    "bilstm: trains the built-in BiLSTM tagger ('sheaf run --help') to predict the\n"
    "UPOS column of TRAIN.conllu (per-token negative log-likelihood, averaged over\n"
    "each batch's tokens).\n"
    "treelstm: trains the binary TreeLSTM to predict a class per tree (the mean NLL\n"
    "over each batch's trees): for PTB trees (SST format) the root's label, an\n"
    "integer 0..4; for a .conllu file (binarized) the UPOS of the sentence's root\n"
    "word as VERB, NOUN, PROPN, ADJ or other.\n"
    "Batched by the auto-batching runtime. Writes the weights to OUT and the\n"
    "training vocabulary (one word per line) to OUT with .vocab for .safetensors,\n"
    "after every epoch and at the end; then\n"
    "  sheaf run MODEL --weights W.safetensors --data TEST\n"
    "runs TEST and prints the accuracy.\n"
    "\n"
    "options:\n";

static const char usage_train_end[] =
    "\n"
    "Same seed, data, options and thread count: a bit-identical weights file.\n"
    "The optimizer's state (Adam's moments, its update count) is written beside the\n"
    "weights (OUT with .optim.safetensors) and --resume W loads W's: N epochs, then M\n"
    "resumed, give the bytes of N + M epochs in one run.\n";

typedef struct train_opts {
  sh_net_kind model;
  char *opath; /* the optimizer's state beside --out */
  const char *data, *dev, *out, *resume;
  long long epochs, batch, threads, hidden, embed, min_count;
  double lr, clip, time_limit;
  int optim; /* sheaf_optim_kind */
  uint64_t seed;
  bool hidden_given, embed_given, keep_best;
} train_opts;

static const char *const optim_names[] = {"adam", "sgd", "adagrad", NULL};
static const int optim_values[] = {SHEAF_OPTIM_ADAM, SHEAF_OPTIM_SGD, SHEAF_OPTIM_ADAGRAD};

#define AT(field) .at = offsetof(train_opts, field)
static const cli_flag f_data = {"--data", CLI_FLAG_IN, AT(data), .arg = "FILE",
                                .help = "training data (required): bilstm .conllu with UPOS;\n"
                                        "treelstm .conllu or PTB trees"};
static const cli_flag f_dev = {"--dev", CLI_FLAG_IN, AT(dev), .arg = "FILE",
                               .help = "data whose accuracy is printed after each epoch"};
static const cli_flag f_out = {"--out", CLI_FLAG_OUT, AT(out), .arg = "FILE",
                               .help = "the weights (.safetensors; required)"};
static const cli_flag f_epochs = {"--epochs", CLI_FLAG_INT, AT(epochs), .lo = 1, .hi = 1000000, .arg = "N",
                                  .help = "passes over TRAIN (default 5)"};
static const cli_flag f_time_limit = {"--time-limit", CLI_FLAG_FLOAT, AT(time_limit), .flo = 1e-9, .fhi = 1e9,
                                      .arg = "S", .help = "stop after the batch that passes S seconds of training"};
static const cli_flag f_optimizer = {"--optimizer", CLI_FLAG_ENUM, AT(optim), .choices = optim_names,
                                     .values = optim_values, .noun = "optimizer", .arg = "O",
                                     .help = "adam (default), sgd or adagrad"};
static const cli_flag f_lr = {"--lr", CLI_FLAG_FLOAT, AT(lr), .flo = 1e-12, .fhi = 1e6, .arg = "X",
                              .help = "learning rate (default: adam 0.002, sgd 0.1, adagrad 0.05)"};
static const cli_flag f_clip = {"--clip", CLI_FLAG_FLOAT, AT(clip), .flo = 0, .fhi = 1e30, .arg = "X",
                                .help = "gradient norm clipping (default 5; 0: none)"};
static const cli_flag f_batch = {"--batch", CLI_FLAG_INT, AT(batch), .lo = 1, .hi = 1000000, .arg = "N",
                                 .help = "sentences (trees) per update (default 32)"};
static const cli_flag f_hidden = {"--hidden", CLI_FLAG_INT, AT(hidden), CLI_GIVEN(train_opts, hidden_given),
                                  .lo = 1, .hi = 65536, .arg = "H", .help = "hidden size (default 128)"};
static const cli_flag f_embed = {"--embed", CLI_FLAG_INT, AT(embed), CLI_GIVEN(train_opts, embed_given),
                                 .lo = 1, .hi = 65536, .arg = "E", .help = "embedding size (default 128)"};
static const cli_flag f_min_count = {"--min-count", CLI_FLAG_INT, AT(min_count), .lo = 1, .hi = INT32_MAX,
                                     .arg = "N", .help = "words seen fewer times are <unk> (default 2)"};
static const cli_flag f_threads = CLI_FLAG_THREADS(train_opts, threads);
static const cli_flag f_seed = {"--seed", CLI_FLAG_U64, AT(seed), .arg = "S",
                                .help = "initialization and shuffling (default 0)"};
static const cli_flag f_keep_best = {"--keep-best", CLI_FLAG_BOOL, AT(keep_best),
                                     .help = "checkpoint only an epoch whose dev accuracy beats the epochs\n"
                                             "before (early stopping; needs --dev)"};
static const cli_flag f_resume = {"--resume", CLI_FLAG_IN, AT(resume), .arg = "W",
                                  .help = "start from these weights (hidden and embedding sizes from\n"
                                          "them; the vocabulary must be the one TRAIN gives)"};
#undef AT
static const cli_flag *const train_flags[] = {&f_data,  &f_dev,    &f_out,       &f_epochs,    &f_time_limit,
                                              &f_optimizer, &f_lr, &f_clip,      &f_batch,     &f_hidden,
                                              &f_embed, &f_min_count, &f_threads, &f_seed,     &f_keep_best,
                                              &f_resume};
static const cli_flags train_spec = {.cmd = "train", CLI_FLAGS_LIST(train_flags), .pos_noun = "model",
                                     .usage = usage_train, .usage_end = usage_train_end,
                                     .missing = "MODEL: bilstm or treelstm"};

static int parse_args(int argc, char **argv, train_opts *o) {
  memset(o, 0, sizeof *o);
  o->epochs = 5;
  o->batch = 32;
  o->hidden = 128;
  o->embed = 128;
  o->min_count = 2;
  o->clip = 5;
  o->lr = -1;
  o->optim = SHEAF_OPTIM_ADAM;
  const char *model;
  int rc = cli_flags_parse(&train_spec, argc, argv, o, &model);
  if (rc) return rc;
  if (!strcmp(model, "bilstm")) {
    o->model = SH_NET_BILSTM;
  } else if (!strcmp(model, "treelstm")) {
    o->model = SH_NET_TREELSTM;
  } else {
    cli_error("train: unknown model '%s' (sheaf train knows bilstm and treelstm)", model);
    return CLI_USAGE;
  }
  if (!o->data) {
    cli_error("train: missing --data FILE (e.g. --data data/ud_english_ewt/en_ewt-ud-train.min.conllu)");
    return CLI_USAGE;
  }
  if (!o->out) {
    cli_error("train: missing --out FILE (the weights, .safetensors)");
    return CLI_USAGE;
  }
  if (o->keep_best && !o->dev) {
    cli_error("train: --keep-best: needs --dev FILE (the accuracy that picks the epoch)");
    return CLI_USAGE;
  }
  if (!strcmp(o->out, "-")) {
    cli_error("train: --out: the weights are rewritten after every epoch: a file is needed, not '-'");
    return CLI_USAGE;
  }
  if (o->lr < 0)
    o->lr = o->optim == SHEAF_OPTIM_ADAM ? 0.002 : o->optim == SHEAF_OPTIM_SGD ? 0.1 : 0.05;
  return CLI_OK;
}

/* ------------------------------------------------------------ the data */

/* A file beside the weights OUT: OUT less ".safetensors", plus suffix
 * (".vocab": the vocabulary; ".optim.safetensors": the optimizer's state). */
static char *side_path(const char *out, const char *suffix) {
  size_t n = strlen(out), k = strlen(".safetensors");
  if (n > k && !strcmp(out + n - k, ".safetensors")) n -= k;
  char *p = malloc(n + strlen(suffix) + 1);
  if (p) {
    memcpy(p, out, n);
    strcpy(p + n, suffix);
  }
  return p;
}

/* The words of d seen at least min_count times, in order of first
 * appearance; words a vocabulary file cannot hold (a space or TAB, the
 * literal "<unk>") are left to <unk>. */
static sheaf_status train_vocab(const sh_dataset *d, long long min_count, sh_vocab *v) {
  bool sents = d->kind == SH_DATASET_SENTS;
  const sh_vocab *dw = sents ? &d->words : &d->tb.words;
  const int32_t *ids = sents ? d->sent_words : d->tb.word;
  int64_t n_ids = sents ? d->n_tokens : d->tb.n_nodes;
  int32_t nw = sh_vocab_size(dw);
  int64_t *count = calloc((size_t)nw + 1, sizeof *count);
  if (!count) return SHEAF_ERR_NOMEM;
  for (int64_t i = 0; i < n_ids; i++)
    if (ids[i] >= 0 && ids[i] < nw) count[ids[i]]++;
  sheaf_status st = SHEAF_OK;
  for (int32_t w = 0; w < nw && st == SHEAF_OK; w++) {
    const char *s = sh_vocab_str(dw, w);
    if (count[w] < min_count || strpbrk(s, " \t\r\n") || !strcmp(s, "<unk>")) continue;
    int32_t id;
    st = sh_vocab_intern(v, s, sh_vocab_len(dw, w), &id);
  }
  free(count);
  return st;
}

/* Loads a CoNLL-U file of tagged sentences; CLI_OK or CLI_FAIL (printed). */
static int load_sents(sheaf_ctx *ctx, const char *flag, const char *path, sh_dataset *d) {
  if (sh_dataset_load(ctx, path, SH_DATASET_SENTS, d) != SHEAF_OK) {
    cli_error("%s", sheaf_ctx_last_error(ctx));
    return CLI_FAIL;
  }
  int64_t tagged = 0;
  for (int32_t i = 0; i < d->n_tokens; i++) tagged += d->sent_tags[i] >= 0;
  if (tagged == 0) {
    cli_error("%s %s: no word has a UPOS tag (a .conllu file with the UPOS column is needed)",
              flag, path);
    sh_dataset_free(d);
    return CLI_FAIL;
  }
  return CLI_OK;
}

/* ------------------------------------------------------------ the loop */



int train_fail_ctx(sheaf_ctx *ctx) {
  cli_error("%s", sheaf_ctx_last_error(ctx));
  return CLI_FAIL;
}

int train_outputs(trainer *t, const sh_dataset *d, int32_t batch, sh_net_outputs *out) {
  sh_net dn = t->net;
  dn.data = d;
  int32_t n = sh_dataset_count(d);
  memset(out, 0, sizeof *out);
  if (sh_net_outputs_init(out, &dn, 0, n) != SHEAF_OK || sh_net_run(&dn, t->g, 0, n, batch, out) != SHEAF_OK) {
    sh_net_outputs_free(out);
    return train_fail_ctx(t->ctx);
  }
  return CLI_OK;
}

int train_argmax(const float *row, int n) {
  int best = 0;
  for (int k = 1; k < n; k++)
    if (row[k] > row[best]) best = k;
  return best;
}

/* Token accuracy of the net on d (tagged tokens only). */
static int accuracy(trainer *t, const sh_dataset *d, int32_t batch, double *acc) {
  sh_net_outputs out;
  if (train_outputs(t, d, batch, &out) != CLI_OK) return CLI_FAIL;
  int32_t n = sh_dataset_count(d);
  int64_t right = 0, all = 0;
  for (int32_t s = 0; s < n; s++)
    for (int32_t w = 0; w < sh_dataset_size(d, s); w++) {
      int32_t tag = d->sent_tags[d->sent_off[s] + w];
      if (tag < 0) continue;
      right += train_argmax(sh_net_outputs_row(&out, s, w), SH_BILSTM_TAGS) == tag;
      all++;
    }
  sh_net_outputs_free(&out);
  *acc = all ? (double)right / (double)all : 0.0;
  return CLI_OK;
}

/* The trainer's build callback for the tagger: sentence i and the NLL of
 * each of its tagged words. It runs on several threads at once when the
 * trainer splits a batch's instances (sheaf_trainer_opts.split): its
 * outputs live on the stack (or in a buffer of this call), not in t. */
static sheaf_status build_sent(sheaf_trainer *tr, sheaf_graph *g, int64_t i, void *user) {
  trainer *t = user;
  const sh_dataset *d = &t->train;
  int32_t len = sh_dataset_size(d, (int32_t)i), off = d->sent_off[i];
  sheaf_expr local[256], *outs = local;
  if (len > (int32_t)(sizeof local / sizeof *local) && !(outs = malloc((size_t)len * sizeof *outs)))
    return sh_fail(t->ctx, SHEAF_ERR_NOMEM, "train: out of memory for a sentence of %d words", (int)len);
  sheaf_status st = sh_bilstm_build(g, &t->net.bl, d->sent_words + off, len, outs);
  for (int32_t w = 0; w < len && st == SHEAF_OK; w++) {
    int32_t tag = d->sent_tags[off + w];
    if (tag >= 0) st = sheaf_trainer_loss(tr, sheaf_nll_logp(g, outs[w], tag));
  }
  if (outs != local) free(outs);
  return st;
}

/* Writes the weights and the vocabulary, each to a temporary file renamed
 * over its target only when both were written. */
static int checkpoint(trainer *t, const train_opts *o, const char *vpath, int64_t epochs,
                      int64_t steps) {
  cli_outs files = {0};
  sh_out *wf = cli_out_open(&files, t->ctx, o->out, SH_OUT_STAGE);
  sh_out *vf = wf ? cli_out_open(&files, t->ctx, vpath, 0) : NULL;
  sh_out *of = vf ? cli_out_open(&files, t->ctx, o->opath, SH_OUT_STAGE) : NULL;
  if (!wf || !vf || !of) {
    cli_outs_abort(&files);
    return CLI_FAIL;
  }
  /* the vocabulary, one word per line: in the .vocab file and in the
   * weights' metadata (sheaf.words, which 'sheaf run' reads) */
  size_t len = 1;
  for (int32_t w = 0; w < sh_vocab_size(&t->vocab); w++) len += sh_vocab_len(&t->vocab, w) + 1;
  char *words = malloc(len), *p = words;
  if (!words) {
    cli_outs_abort(&files);
    cli_error("train: out of memory");
    return CLI_FAIL;
  }
  for (int32_t w = 0; w < sh_vocab_size(&t->vocab); w++) {
    memcpy(p, sh_vocab_str(&t->vocab, w), sh_vocab_len(&t->vocab, w));
    p += sh_vocab_len(&t->vocab, w);
    *p++ = '\n';
  }
  *p = '\0';
  fputs(words, vf->f);
  char ep[32], st[32], desc[160];
  snprintf(ep, sizeof ep, "%lld", (long long)epochs);
  snprintf(st, sizeof st, "%lld", (long long)steps);
  snprintf(desc, sizeof desc, "%s hidden %lld embed %lld vocab %d (min-count %lld)",
           sh_net_kind_name(t->kind), (long long)t->net.hidden, (long long)t->net.embed, (int)sh_vocab_size(&t->vocab),
           o->min_count);
  const char *meta[] = {"sheaf.train.epochs", ep, "sheaf.train.steps", st,
                        "sheaf.train.model", desc, "sheaf.words", words};
  sheaf_status sst = sheaf_model_save_meta(t->net.model, wf->tmp, 4, meta);
  if (sst == SHEAF_OK) sst = sheaf_optimizer_save(t->opt, of->tmp);
  free(words);
  if (sst != SHEAF_OK) {
    int rc = train_fail_ctx(t->ctx);
    cli_outs_abort(&files);
    return rc;
  }
  return cli_outs_commit(&files);
}

/* --resume: the sizes of the weights (emb [V, E]; bilstm W_fwd [E + H, 4H],
 * treelstm W_node [2H, 5H]) and
 * the epochs and updates they were trained for (so that the shuffles go on
 * where they stopped: with a stateless optimizer, plain SGD, N epochs and
 * then M resumed give the weights of N + M in one run). */
static int resume_shape(trainer *t, train_opts *o, sheaf_st_file **wf) {
  if (sheaf_st_open(t->ctx, o->resume, wf) != SHEAF_OK) {
    cli_error("--resume: %s", sheaf_ctx_last_error(t->ctx));
    return CLI_FAIL;
  }
  bool tree = t->kind == SH_NET_TREELSTM;
  const char *wname = tree ? "W_node" : "W_fwd";
  long e = sheaf_st_find(*wf, "emb"), w = sheaf_st_find(*wf, wname);
  if (e < 0 || w < 0 || sheaf_st_rank(*wf, (size_t)e) != 2 || sheaf_st_rank(*wf, (size_t)w) != 2) {
    cli_error("--resume %s: not %s weights (needs 2-D tensors 'emb' and '%s')", o->resume,
              tree ? "TreeLSTM" : "BiLSTM tagger", wname);
    return CLI_FAIL;
  }
  int64_t E = sheaf_st_shape(*wf, (size_t)e)[1], Hk = sheaf_st_shape(*wf, (size_t)w)[1];
  int64_t H = Hk / (tree ? 5 : 4);
  if ((o->hidden_given && o->hidden != H) || (o->embed_given && o->embed != E)) {
    cli_error("--resume %s: its sizes are --hidden %lld --embed %lld (leave --hidden and --embed out "
              "to take them)", o->resume, (long long)H, (long long)E);
    return CLI_USAGE;
  }
  o->hidden = H;
  o->embed = E;
  for (size_t i = 0; i < sheaf_st_metadata_count(*wf); i++)
    if (!strcmp(sheaf_st_metadata_key(*wf, i), "sheaf.train.epochs"))
      t->epochs_before = strtoll(sheaf_st_metadata_value(*wf, i), NULL, 10);
    else if (!strcmp(sheaf_st_metadata_key(*wf, i), "sheaf.train.steps"))
      t->steps_before = strtoll(sheaf_st_metadata_value(*wf, i), NULL, 10);
  return CLI_OK;
}

/* --resume W: the optimizer's state beside W, when there is one (then the
 * update count is the optimizer's own); without it the optimizer starts
 * fresh (said so). */
static int resume_optimizer(trainer *t, const train_opts *o) {
  char *path = side_path(o->resume, ".optim.safetensors");
  if (!path) return CLI_FAIL;
  int rc = CLI_OK;
  if (access(path, F_OK) != 0) {
    printf("  no optimizer state %s: the optimizer starts fresh\n", path);
  } else if (sheaf_optimizer_load(t->opt, path) != SHEAF_OK) {
    cli_error("--resume: %s", sheaf_ctx_last_error(t->ctx));
    rc = CLI_FAIL;
  } else {
    t->steps_loaded = sheaf_optimizer_steps(t->opt);
    t->steps_before = 0;
  }
  free(path);
  return rc;
}

static int setup(trainer *t, train_opts *o) {
  int rc;
  sh_vocab_init(&t->vocab, t->ctx);
  bool tree = t->kind == SH_NET_TREELSTM;
  if (tree) {
    if ((rc = train_tree_load(t->ctx, "--data", o->data, &t->train, &t->train_labels)) != CLI_OK)
      return rc;
    t->task = sh_tree_task_of(o->data);
    if (o->dev) {
      if ((rc = train_tree_load(t->ctx, "--dev", o->dev, &t->dev, &t->dev_labels)) != CLI_OK)
        return rc;
      if (sh_tree_task_of(o->dev) != t->task) {
        cli_error("--dev %s: its classes are not those of --data %s (PTB trees have the root's "
                  "label, .conllu the root word's UPOS)", o->dev, o->data);
        return CLI_USAGE;
      }
      t->have_dev = true;
    }
  } else {
    if ((rc = load_sents(t->ctx, "--data", o->data, &t->train)) != CLI_OK) return rc;
    if (o->dev) {
      if ((rc = load_sents(t->ctx, "--dev", o->dev, &t->dev)) != CLI_OK) return rc;
      t->have_dev = true;
    }
  }
  if (train_vocab(&t->train, o->min_count, &t->vocab) != SHEAF_OK) return train_fail_ctx(t->ctx);
  int64_t n_words = 0, unk = 0, dev_words = 0, dev_unk = 0;
  if (sh_dataset_renumber(&t->train, &t->vocab, &n_words, &unk) != SHEAF_OK ||
      (t->have_dev && sh_dataset_renumber(&t->dev, &t->vocab, &dev_words, &dev_unk) != SHEAF_OK))
    return train_fail_ctx(t->ctx);
  sheaf_st_file *wf = NULL;
  if (o->resume && (rc = resume_shape(t, o, &wf)) != CLI_OK) {
    sheaf_st_close(wf);
    return rc;
  }
  if (sh_net_create(t->ctx, t->kind, &t->train, o->hidden, o->embed, &t->net) != SHEAF_OK) {
    sheaf_st_close(wf);
    return train_fail_ctx(t->ctx);
  }
  sheaf_status st = wf ? sheaf_model_load_st(t->net.model, wf) : sh_net_seed(&t->net, o->seed);
  sheaf_st_close(wf);
  if (st != SHEAF_OK) {
    if (wf) cli_error("--resume %s: %s", o->resume, sheaf_ctx_last_error(t->ctx));
    else train_fail_ctx(t->ctx);
    return CLI_FAIL;
  }
  sheaf_trainer_opts to = {{(sheaf_optim_kind)o->optim, (float)o->lr, 0, 0, 0, 0, 0, (float)o->clip},
                           o->batch, 1, o->seed, SHEAF_POLICY_SHEAF, (int)o->threads,
                           SHEAF_SPLIT_AUTO}; /* 2 threads or more: a batch's sentences split */
  if (sheaf_trainer_create(t->net.model, sh_dataset_count(&t->train), &to,
                           tree ? train_tree_build : build_sent, t, &t->tr) != SHEAF_OK)
    return train_fail_ctx(t->ctx);
  t->g = sheaf_trainer_graph(t->tr);
  t->opt = sheaf_trainer_optimizer(t->tr);
  if (o->resume && (rc = resume_optimizer(t, o)) != CLI_OK) return rc;
  const char *noun = sh_net_instance_noun(t->kind);
  printf("train %s: %d %s, %lld words from %s (%d words in the vocabulary, "
         "%.1f%% of the tokens <unk>)\n",
         sh_net_kind_name(t->kind), (int)sh_dataset_count(&t->train), noun, (long long)n_words, o->data,
         (int)sh_vocab_size(&t->vocab), n_words ? 100.0 * (double)unk / (double)n_words : 0.0);
  if (t->have_dev)
    printf("  dev: %d %s, %lld words from %s (%.1f%% <unk>)\n",
           (int)sh_dataset_count(&t->dev), noun, (long long)dev_words, o->dev,
           dev_words ? 100.0 * (double)dev_unk / (double)dev_words : 0.0);
  printf("  hidden %lld, embed %lld, %s lr %g, clip %g, batch %lld, %d threads, seed %llu%s%s\n",
         o->hidden, o->embed,
         o->optim == SHEAF_OPTIM_ADAM ? "adam" : o->optim == SHEAF_OPTIM_SGD ? "sgd" : "adagrad",
         o->lr, o->clip, o->batch, sheaf_ctx_threads(t->ctx), (unsigned long long)o->seed,
         o->resume ? ", resumed from " : "", o->resume ? o->resume : "");
  if (tree) {
    train_tree_print_classes("training", t->task, t->train_labels, sh_dataset_count(&t->train));
    if (t->have_dev)
      train_tree_print_classes("dev", t->task, t->dev_labels, sh_dataset_count(&t->dev));
  }
  fflush(stdout);
  return CLI_OK;
}

static void trainer_free(trainer *t) {
  free(t->train_labels);
  free(t->dev_labels);
  sheaf_trainer_free(t->tr);
  sh_net_free(&t->net);
  sh_vocab_free(&t->vocab);
  sh_dataset_free(&t->dev);
  sh_dataset_free(&t->train);
  sheaf_ctx_free(t->ctx);
}

/* The progress line on stderr: on a terminal rewritten in place (at most
 * every 0.2 s); otherwise a plain line at each tenth of an epoch of at
 * least 500 instances. And the time limit: stop after the batch that
 * passes it. The trainer's progress callback. */
typedef struct progress_state {
  bool tty, stop;
  int shown;          /* tenths printed so far */
  const char *noun;
  uint64_t t0;        /* training started */
  double last_shown, time_limit;
} progress_state;

static int progress(const sheaf_trainer_info *in, void *user) {
  progress_state *p = user;
  double secs = (double)(sheaf_time_ns() - p->t0) * 1e-9, epoch_secs = in->seconds, loss = in->loss;
  int64_t epoch = in->epoch, done = in->done, n = in->n;
  const char *noun = p->noun;
  if (p->time_limit > 0 && secs >= p->time_limit) p->stop = true;
  if (p->tty && secs - p->last_shown < 0.2 && done < n) return p->stop;
  p->last_shown = secs;
  double rate = epoch_secs > 0 ? done / epoch_secs : 0;
  double eta = rate > 0 ? (n - done) / rate : 0;
  if (p->tty) {
    fprintf(stderr, "\r  epoch %lld: %d/%d %s, %.0f %s/s, loss %.4f, epoch ETA %.0f s, %.0f s in  ",
            (long long)epoch, (int)done, (int)n, noun, rate, noun, loss, eta, secs);
  } else {
    int tenth = (int)(done * 10 / n);
    if (n < 500 || tenth <= p->shown || done == n) return p->stop;
    p->shown = tenth;
    fprintf(stderr, "  epoch %lld: %d/%d %s, %.0f %s/s, loss %.4f, epoch ETA %.0f s\n",
            (long long)epoch, (int)done, (int)n, noun, rate, noun, loss, eta);
  }
  fflush(stderr);
  return p->stop;
}

int cli_train(int argc, char **argv) {
  train_opts o;
  int rc = parse_args(argc, argv, &o);
  if (rc) return rc < 0 ? CLI_OK : rc;
  char *vpath = side_path(o.out, ".vocab");
  o.opath = side_path(o.out, ".optim.safetensors");
  if (!vpath || !o.opath) {
    free(vpath);
    free(o.opath);
    return CLI_FAIL;
  }
  {
    const cli_path ins[] = {{"--data", o.data}, {"--dev", o.dev}, {"--resume", o.resume}};
    const cli_path outs[] = {{"--out", o.out}, {"--out's vocabulary", vpath},
                             {"--out's optimizer state", o.opath}};
    if (!strcmp(o.data, "-") || (o.dev && !strcmp(o.dev, "-")) ||
        (o.resume && !strcmp(o.resume, "-"))) {
      cli_error("train: inputs are read more than once: standard input ('-') cannot be one");
      rc = CLI_USAGE;
    } else {
      rc = cli_check_paths(ins, 3, outs, 3);
    }
    if (rc != CLI_OK) {
      free(vpath);
      free(o.opath);
      return rc;
    }
  }
  trainer t;
  memset(&t, 0, sizeof t);
  t.kind = o.model;
  t.ctx = cli_ctx((int)o.threads);
  if (!t.ctx) {
    free(vpath);
    free(o.opath);
    return CLI_FAIL;
  }
  {
    /* the outputs can be created (else the error now, not after an epoch) */
    cli_outs probe = {0};
    bool ok = cli_out_open(&probe, t.ctx, o.out, SH_OUT_STAGE) && cli_out_open(&probe, t.ctx, vpath, 0) &&
              cli_out_open(&probe, t.ctx, o.opath, SH_OUT_STAGE);
    cli_outs_abort(&probe);
    if (!ok) {
      rc = CLI_FAIL;
      goto done;
    }
  }
  if ((rc = setup(&t, &o)) != CLI_OK) goto done;
  int32_t n = sh_dataset_count(&t.train);
  progress_state ps = {isatty(STDERR_FILENO), false, 0, sh_net_instance_noun(t.kind), sheaf_time_ns(), -1,
                       o.time_limit};
  uint64_t t0 = ps.t0;
  double best_dev = -1;
  for (int64_t ep = 0; ep < o.epochs && !ps.stop && rc == CLI_OK; ep++) {
    int64_t epoch = t.epochs_before + ep + 1;
    sheaf_trainer_set_epochs(t.tr, epoch - 1);
    ps.shown = 0;
    sheaf_trainer_info in;
    if (sheaf_trainer_epoch(t.tr, progress, &ps, &in) != SHEAF_OK) rc = train_fail_ctx(t.ctx);
    bool stop = ps.stop, tty = ps.tty;
    int32_t done = (int32_t)in.done;
    int64_t tokens = in.losses;
    if (rc != CLI_OK) break;
    if (tty) fputs("\n", stderr);
    double esecs = in.seconds;
    if (t.kind == SH_NET_TREELSTM)
      printf("epoch %lld: loss %.4f over %d trees, %.1f s, %.1f trees/s", (long long)epoch,
             in.loss, (int)done, esecs, done / esecs);
    else
      printf("epoch %lld: loss %.4f over %d sentences (%lld tokens), %.1f s, %.1f sentences/s",
             (long long)epoch, in.loss, (int)done, (long long)tokens,
             esecs, done / esecs);
    bool save = true;
    if (t.have_dev) {
      double acc;
      rc = t.kind == SH_NET_TREELSTM
               ? train_tree_accuracy(&t, &t.dev, t.dev_labels, (int32_t)o.batch * 4, &acc)
               : accuracy(&t, &t.dev, (int32_t)o.batch * 4, &acc);
      if (rc != CLI_OK) break;
      printf(", dev accuracy %.2f%%", 100 * acc);
      if (o.keep_best) {
        save = acc > best_dev;
        if (!save) printf(" (not saved: the best is %.2f%%)", 100 * best_dev);
        else best_dev = acc;
      }
    }
    printf("%s\n", stop && done < n ? " (time limit: epoch cut short)" : stop ? " (time limit)" : "");
    fflush(stdout);
    if (save) rc = checkpoint(&t, &o, vpath, done == n ? epoch : epoch - 1,
                    t.steps_before + sheaf_optimizer_steps(t.opt));
  }
  if (rc == CLI_OK)
    printf("weights: %s (vocabulary: %s, optimizer state: %s), %lld updates in %.1f s\n", o.out,
           vpath, o.opath, (long long)(sheaf_optimizer_steps(t.opt) - t.steps_loaded),
           (double)(sheaf_time_ns() - t0) * 1e-9);
done:
  trainer_free(&t);
  free(vpath);
  free(o.opath);
  return rc;
}
