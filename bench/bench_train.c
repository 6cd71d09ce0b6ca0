/*
 * bench_train.c — training throughput of the BiLSTM tagger against its
 * PyTorch peer (bench/train_torch.py): the same CoNLL-U sentences (word
 * forms -> ids, UPOS -> 17 tags), the same sizes (embedding E, hidden H
 * per direction), Adam (lr 1e-3, no weight decay, no clipping), batches
 * of 64 sentences taken in file order, the same number of updates. One
 * update = forward over the batch, the mean token NLL, backward, Adam step.
 * Sheaf builds one graph per batch (lstm_cell over [x ; h] each way, an
 * affine over [h_fwd ; h_bwd], sheaf_nll per token). Timed: the updates
 * after one warm-up update, min over --reps runs; instances = sentences.
 * The peers run in the same invocation: PyTorch (per-sentence and
 * packed) and DyNet (bench/bilstm_train_dynet.cc, built by
 * scripts/install_dynet.sh into DIR/bin, default build/peers/dynet; at
 * --dynet-autobatch 0, 1 and 2, from the initial weights Sheaf's seeded
 * model saves), and the ratios Sheaf / peer are printed. --cpu-time: every
 * system timed on its process's CPU clock (the machine is shared: a wall
 * clock counts other jobs' time slices).
 *
 * --split instances|ops (2 threads or more; default instances): the
 * batch's sentences in T contiguous shards, each built, flushed and
 * differentiated on its own thread with its own graph and gradient shard,
 * the shards' gradients reduced in order, one step (sheaf_run_shards,
 * sheaf_model_reduce_grads); or one graph whose kernels split over the
 * threads. At 1 thread: one graph, the same update either way.
 *
 *   make bench-train BENCH_ARGS='--threads 1 --updates 20 --cpu-time'
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_train_par.h"
#include "sheaf.h"
#include "sheaf_train.h"

enum { TAGS = 17, MAXW = 200000, MAXS = 20000, MAXLEN = 256, B = 64 };

static const char *const upos[TAGS] = {"ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM",
                                       "PART", "PRON", "PROPN", "PUNCT", "SCONJ", "SYM", "VERB", "X"};

typedef struct corpus {
  int n, ntok, nvocab;
  int *start, *len; /* sentence i: tokens start[i] .. start[i] + len[i] */
  int *word, *tag;
} corpus;

/* Word ids by first appearance (a linear-probe hash of the forms). */
typedef struct vocab {
  char **key;
  int *id;
  size_t cap;
  int n;
} vocab;

static int vocab_id(vocab *v, const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (const char *p = s; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  size_t i = (size_t)h & (v->cap - 1);
  while (v->key[i]) {
    if (strcmp(v->key[i], s) == 0) return v->id[i];
    i = (i + 1) & (v->cap - 1);
  }
  v->key[i] = strdup(s);
  return v->id[i] = v->n++;
}

static bool load_conllu(const char *path, corpus *c) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "bench_train: cannot open %s\n", path);
    return false;
  }
  vocab v = {calloc(1 << 17, sizeof(char *)), calloc(1 << 17, sizeof(int)), 1 << 17, 0};
  c->start = calloc(MAXS, sizeof(int));
  c->len = calloc(MAXS, sizeof(int));
  c->word = calloc(MAXW, sizeof(int));
  c->tag = calloc(MAXW, sizeof(int));
  c->n = c->ntok = 0;
  char line[4096];
  int cur = 0;
  bool ok = v.key && v.id && c->start && c->len && c->word && c->tag;
  while (ok && fgets(line, sizeof line, f)) {
    if (line[0] == '#') continue;
    if (line[0] == '\n' || line[0] == '\r') {
      if (cur > 0 && c->n < MAXS) {
        c->start[c->n] = c->ntok - cur;
        c->len[c->n++] = cur;
      }
      cur = 0;
      continue;
    }
    char *col[4], *save = NULL, *p = strtok_r(line, "\t", &save);
    int k = 0;
    for (; p && k < 4; p = strtok_r(NULL, "\t", &save)) col[k++] = p;
    if (k < 4 || strchr(col[0], '-') || strchr(col[0], '.')) continue; /* ranges, empty nodes */
    if (cur >= MAXLEN || c->ntok >= MAXW) continue;
    int t = TAGS - 1;
    for (int j = 0; j < TAGS; j++)
      if (strcmp(col[3], upos[j]) == 0) t = j;
    c->word[c->ntok] = vocab_id(&v, col[1]);
    c->tag[c->ntok++] = t;
    cur++;
  }
  if (cur > 0 && c->n < MAXS) {
    c->start[c->n] = c->ntok - cur;
    c->len[c->n++] = cur;
  }
  fclose(f);
  c->nvocab = v.n;
  for (size_t i = 0; i < v.cap; i++) free(v.key[i]);
  free(v.key);
  free(v.id);
  return ok && c->n > 0;
}

/* Seconds on the process's CPU clock (--cpu-time) or the monotonic clock. */
static bool g_cpu;
/* --lazy-emb: every system updates only the embedding rows a batch looked
 * up (Sheaf: sheaf_optimizer_lazy_rows; PyTorch: a sparse embedding and
 * SparseAdam for it; DyNet: its default for lookup parameters). Without
 * it, every system's Adam updates every row (DyNet: --dense-lookup). */
static bool lazy_emb;
/* --threads 2 and more: the serial part of a step (bench_train_par.h) */
static par_acct g_par;
static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(g_cpu ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

typedef struct tagger {
  sheaf_param emb, Wf, bf, Wb, bb, Wt, bt;
} tagger;

/* Builds sentences s0 + i0 .. s0 + i1 (wrapping) on g, their token losses
 * into loss (*k of them); hf, hb: room for a sentence's states. */
static void build(sheaf_graph *g, const tagger *p, const corpus *c, int s0, int i0, int i1, int H, sheaf_expr *hf,
                  sheaf_expr *hb, sheaf_expr *loss, int *k) {
  const int64_t zshape[1] = {H};
  for (int i = i0; i < i1; i++) {
    int s = (s0 + i) % c->n, n = c->len[s];
    const int *w = c->word + c->start[s], *tg = c->tag + c->start[s];
    sheaf_expr h = sheaf_zeros(g, 1, zshape), cc = {0, 0, 0};
    for (int t = 0; t < n; t++) {
      sheaf_expr xh[2] = {sheaf_lookup(g, p->emb, w[t]), h};
      sheaf_lstm_cell(g, p->Wf, p->bf, sheaf_concat(g, 2, xh), cc, &h, &cc);
      hf[t] = h;
    }
    h = sheaf_zeros(g, 1, zshape);
    cc = (sheaf_expr){0, 0, 0};
    for (int t = n - 1; t >= 0; t--) {
      sheaf_expr xh[2] = {sheaf_lookup(g, p->emb, w[t]), h};
      sheaf_lstm_cell(g, p->Wb, p->bb, sheaf_concat(g, 2, xh), cc, &h, &cc);
      hb[t] = h;
    }
    for (int t = 0; t < n; t++) {
      sheaf_expr two[2] = {hf[t], hb[t]};
      loss[(*k)++] = sheaf_nll(g, sheaf_affine(g, p->Wt, sheaf_concat(g, 2, two), p->bt), tg[t]);
    }
  }
}

/* --split instances: shard k of an update, on its own thread and graph. */
enum { MAXT = 64 };
typedef struct dp_update {
  sheaf_graph **g;  /* a graph per shard (1 thread, bound to gradient shard k) */
  const tagger *p;
  const corpus *c;
  int s0, H, n;     /* first sentence, hidden, shards */
  float scale;      /* 1 / the batch's tokens */
  sheaf_expr *loss; /* B * MAXLEN per shard */
  int k[MAXT];      /* the shard's losses */
  uint64_t ns[MAXT]; /* the shard's thread CPU time */
  int cut[MAXT + 1]; /* shard k: sentences cut[k] .. cut[k + 1] of the batch */
} dp_update;

static sheaf_expr *dp_states; /* 2 * MAXLEN per shard: hf, hb */

static sheaf_status dp_shard(int k, int n, void *user) {
  dp_update *u = user;
  sheaf_graph *g = u->g[k];
  sheaf_expr *loss = u->loss + (size_t)k * B * MAXLEN, *hf = dp_states + (size_t)k * 2 * MAXLEN;
  uint64_t t0 = par_thread_ns();
  u->k[k] = 0;
  sheaf_status st = sheaf_graph_reset(g);
  if (st) return st;
  (void)n;
  build(g, u->p, u->c, u->s0, u->cut[k], u->cut[k + 1], u->H, hf, hf + MAXLEN, loss, &u->k[k]);
  sheaf_backward_opts bo = {u->scale, 0, NULL, NULL};
  st = sheaf_backward(g, u->k[k], loss, &bo); /* flushes first */
  u->ns[k] = par_thread_ns() - t0;
  return st;
}

/* One data-parallel update (--split instances) on sentences s0 .. s0 + B. */
static sheaf_status update_dp(sheaf_model *m, sheaf_graph **gs, int T, sheaf_optimizer *opt, const tagger *p,
                              const corpus *c, int s0, int H, sheaf_expr *loss, uint64_t *fwd_ns, uint64_t *bwd_ns,
                              double *last_loss) {
  uint64_t t0 = now_ns();
  par_begin(&g_par);
  dp_update u = {gs, p, c, s0, H, T, 0, loss, {0}, {0}, {0}};
  int tokens = 0;
  for (int i = 0; i < B; i++) tokens += c->len[(s0 + i) % c->n];
  u.scale = 1.0f / (float)tokens;
  /* contiguous shards of about equal tokens (the work of a sentence) */
  for (int i = 0, k = 1, run = 0; i < B; i++) {
    run += c->len[(s0 + i) % c->n];
    while (k < T && (int64_t)run * T >= (int64_t)tokens * k && i + 1 >= k) u.cut[k++] = i + 1;
  }
  u.cut[T] = B;
  sheaf_status st = sheaf_model_zero_grad(m);
  par_mark(&g_par, PAR_ZERO);
  if (!st) st = sheaf_run_shards(sheaf_model_ctx(m), T, dp_shard, &u);
  par_mark(&g_par, PAR_BACKWARD);
  par_shards(&g_par, u.ns, T);
  if (!st) st = sheaf_model_reduce_grads(m);
  par_mark(&g_par, PAR_REDUCE);
  if (!st) st = sheaf_optimizer_step(opt, NULL);
  par_mark(&g_par, PAR_STEP);
  g_par.updates++;
  uint64_t t2 = now_ns();
  if (!st && last_loss) { /* the batch's mean loss (not timed) */
    double sum = 0;
    for (int k = 0; k < T && !st; k++)
      for (int i = 0; i < u.k[k] && !st; i++) {
        sheaf_value_view v;
        st = sheaf_value(gs[k], loss[(size_t)k * B * MAXLEN + i], &v);
        if (!st) sum += v.data[0];
      }
    *last_loss = sum / tokens;
  }
  *fwd_ns += 0; /* forward and backward run together in the shards */
  *bwd_ns += t2 - t0;
  return st;
}

static int fail(sheaf_ctx *ctx, const char *what) {
  fprintf(stderr, "bench_train: %s: %s\n", what, sheaf_ctx_last_error(ctx));
  return 1;
}

/* One update on sentences s0 .. s0 + B (wrapping); *fwd_ns, *bwd_ns: its
 * parts; *last_loss (when not NULL): the batch's mean token NLL. */
static sheaf_status update(sheaf_model *m, sheaf_graph *g, sheaf_optimizer *opt, const tagger *p, const corpus *c, int s0,
                           int H, sheaf_expr *hf, sheaf_expr *hb, sheaf_expr *loss, uint64_t *fwd_ns,
                           uint64_t *bwd_ns, double *last_loss) {
  uint64_t t0 = now_ns();
  par_begin(&g_par);
  sheaf_graph_reset(g);
  int k = 0;
  build(g, p, c, s0, 0, B, H, hf, hb, loss, &k);
  par_mark(&g_par, PAR_BUILD);
  sheaf_status st = sheaf_graph_flush(g);
  par_mark(&g_par, PAR_FLUSH);
  uint64_t t1 = now_ns();
  sheaf_backward_opts bo = {1.0f / (float)k, 0, NULL, NULL};
  if (!st && last_loss) { /* the batch's mean loss (not timed: read after the step) */
    double sum = 0;
    for (int i = 0; i < k && !st; i++) {
      sheaf_value_view v;
      st = sheaf_value(g, loss[i], &v);
      if (!st) sum += v.data[0];
    }
    *last_loss = sum / k;
    t1 = now_ns();
  }
  par_mark(&g_par, PAR_LOSS);
  if (!st) st = sheaf_model_zero_grad(m);
  par_mark(&g_par, PAR_ZERO);
  if (!st) st = sheaf_backward(g, k, loss, &bo);
  par_mark(&g_par, PAR_BACKWARD);
  if (!st) st = sheaf_optimizer_step(opt, NULL);
  par_mark(&g_par, PAR_STEP);
  g_par.updates++;
  uint64_t t2 = now_ns();
  *fwd_ns += t1 - t0;
  *bwd_ns += t2 - t1;
  return st;
}

/* Runs a peer command; prints its "# ..." lines and, per JSON line, its
 * rate and Sheaf's ratio; *best: the best rate so far. Returns the lines
 * read. */
static int run_peer(const char *cmd, double sheaf_rate, double *best) {
  FILE *pp = popen(cmd, "r");
  char line[512];
  int peers = 0;
  while (pp && fgets(line, sizeof line, pp)) {
    char sys[64];
    double r, l = 0, l0 = 0;
    int n = sscanf(line, "{\"system\": \"%63[^\"]\", \"sents_per_s\": %lf, \"final_loss\": %lf, \"first_loss\": %lf",
                   sys, &r, &l, &l0);
    if (n >= 2 && r > 0) {
      if (r > *best) *best = r;
      printf("  %-22s %9.1f sents/s   sheaf / %s = %.2fx", sys, r, sys, sheaf_rate / r);
      if (n == 4) printf("   (loss: first update %.5f, last %.4f)", l0, l);
      printf("\n");
      peers++;
    } else if (line[0] == '#') {
      printf("  %s", line);
    }
  }
  int st = pp ? pclose(pp) : -1;
  if (!peers) printf("  note: peer did not run (exit status %d): %s\n", st, cmd);
  fflush(stdout);
  return peers;
}

/* Writes the corpus for the peer: "corpus N V", then "n w.. t.." per sentence. */
static bool write_corpus(const corpus *c, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return false;
  fprintf(f, "corpus %d %d\n", c->n, c->nvocab);
  for (int s = 0; s < c->n; s++) {
    fprintf(f, "%d", c->len[s]);
    for (int t = 0; t < c->len[s]; t++) fprintf(f, " %d", c->word[c->start[s] + t]);
    for (int t = 0; t < c->len[s]; t++) fprintf(f, " %d", c->tag[c->start[s] + t]);
    fputc('\n', f);
  }
  return fclose(f) == 0;
}

int main(int argc, char **argv) {
  int threads = 1, updates = 20, reps = 3, E = 64, H = 128;
  const char *data = "data/ud_english_ewt/en_ewt-ud-test.conllu", *python = "python3";
  const char *dynet_dir = "build/peers/dynet";
  bool torch = true, dynet = true, split_ops = false;
  for (int i = 1; i < argc; i++) {
    if (i + 1 < argc && strcmp(argv[i], "--threads") == 0) threads = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--updates") == 0) updates = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--reps") == 0) reps = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--embed") == 0) E = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--hidden") == 0) H = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--data") == 0) data = argv[++i];
    else if (i + 1 < argc && strcmp(argv[i], "--python") == 0) python = argv[++i];
    else if (strcmp(argv[i], "--no-torch") == 0) torch = false;
    else if (strcmp(argv[i], "--no-dynet") == 0) dynet = false;
    else if (i + 1 < argc && strcmp(argv[i], "--dynet-dir") == 0) dynet_dir = argv[++i];
    else if (strcmp(argv[i], "--cpu-time") == 0) g_cpu = true;
    else if (strcmp(argv[i], "--lazy-emb") == 0) lazy_emb = true;
    else if (i + 1 < argc && strcmp(argv[i], "--split") == 0 &&
             (strcmp(argv[i + 1], "ops") == 0 || strcmp(argv[i + 1], "instances") == 0))
      split_ops = strcmp(argv[++i], "ops") == 0;
    else if (i + 1 < argc && (strcmp(argv[i], "--tree-data") == 0 || strcmp(argv[i], "--tree-dev") == 0)) ++i;
    else {
      fprintf(stderr, "usage: bench_train [--threads T] [--updates N] [--reps R] [--embed E] [--hidden H]\n"
                      "                   [--data FILE.conllu] [--python PY] [--no-torch] [--no-dynet]\n"
                      "                   [--dynet-dir DIR] [--lazy-emb] [--cpu-time] [--split instances|ops]\n");
      return 2;
    }
  }
  if (threads < 1 || updates < 1 || reps < 1 || E < 1 || H < 1 || threads > MAXT) {
    fprintf(stderr, "bench_train: --threads (at most %d), --updates, --reps, --embed, --hidden must be >= 1\n", MAXT);
    return 2;
  }
  int T = threads >= 2 && !split_ops ? threads : 0; /* shards (0: one graph) */
  corpus c;
  if (!load_conllu(data, &c)) return 1;
  sheaf_ctx_options co = {0};
  co.threads = threads;
  sheaf_ctx *ctx = NULL;
  char err[256];
  if (sheaf_ctx_create(&co, &ctx, err, sizeof err)) {
    fprintf(stderr, "bench_train: %s\n", err);
    return 1;
  }
  par_init(&g_par, ctx);
  printf("bench_train: BiLSTM tagger on %s (%d sentences, %d tokens, %d words), E = %d, H = %d,\n"
         "  Adam lr 1e-3, batch %d sentences, %d updates (after 1 warm-up), %d thread(s), min of %d runs (%s);\n"
         "  Adam on the embedding: %s;\n  split: %s\n",
         data, c.n, c.ntok, c.nvocab, E, H, B, updates, threads, reps,
         g_cpu ? "process CPU time, every system" : "wall time",
         lazy_emb ? "lazy, the rows looked up only (every system)" : "dense, every row (every system)",
         T ? "instances (a shard of the batch per thread, its own graph; gradients reduced in order)"
           : threads > 1 ? "ops (one graph, its kernels over the threads)" : "none (1 thread)");
  sheaf_expr *dp_loss = NULL; /* B * MAXLEN losses per shard */
  if (T) {
    dp_loss = malloc((size_t)T * B * MAXLEN * sizeof *dp_loss);
    dp_states = malloc((size_t)T * 2 * MAXLEN * sizeof *dp_states);
    if (!dp_loss || !dp_states) {
      fprintf(stderr, "bench_train: out of memory\n");
      return 1;
    }
  }
  char wpath[] = "/tmp/bench_train_w_XXXXXX";
  int wfd = dynet ? mkstemp(wpath) : -1;
  if (wfd >= 0) close(wfd);
  double last_loss = 0, first_loss = 0;
  static sheaf_expr hf[MAXLEN], hb[MAXLEN], loss[B * MAXLEN];
  double best = 1e30, best_f = 0, best_b = 0;
  int rc = 1;
  for (int rep = 0; rep < reps; rep++) {
    sheaf_model *m = NULL;
    sheaf_graph *g = NULL, *gs[MAXT] = {0};
    sheaf_optimizer *opt = NULL;
    tagger p;
    const int64_t s_emb[2] = {c.nvocab, E}, s_w[2] = {E + H, 4 * H}, s_b[1] = {4 * H}, s_wt[2] = {2 * H, TAGS},
                  s_bt[1] = {TAGS};
    sheaf_optimizer_opts oo = {SHEAF_OPTIM_ADAM, 1e-3f, 0, 0, 0, 0, 0, 0};
    if (sheaf_model_create(ctx, &m) || sheaf_model_param(m, "emb", 2, s_emb, SHEAF_INIT_NORMAL, &p.emb) ||
        sheaf_model_param(m, "W_fwd", 2, s_w, SHEAF_INIT_GLOROT, &p.Wf) ||
        sheaf_model_param(m, "b_fwd", 1, s_b, SHEAF_INIT_ZERO, &p.bf) ||
        sheaf_model_param(m, "W_bwd", 2, s_w, SHEAF_INIT_GLOROT, &p.Wb) ||
        sheaf_model_param(m, "b_bwd", 1, s_b, SHEAF_INIT_ZERO, &p.bb) ||
        sheaf_model_param(m, "W_tag", 2, s_wt, SHEAF_INIT_GLOROT, &p.Wt) ||
        sheaf_model_param(m, "b_tag", 1, s_bt, SHEAF_INIT_ZERO, &p.bt) || sheaf_model_seed(m, 1) ||
        sheaf_graph_create(m, NULL, &g) || sheaf_optimizer_create(m, &oo, &opt) ||
        sheaf_optimizer_lazy_rows(opt, lazy_emb)) {
      rc = fail(ctx, "setup");
      goto rep_done;
    }
    for (int k = 0; k < T; k++) {
      sheaf_graph_opts go = {SHEAF_POLICY_SHEAF, 1, NULL};
      if (sheaf_graph_create(m, &go, &gs[k]) || sheaf_graph_grad_shard(gs[k], k)) {
        rc = fail(ctx, "setup of the shards' graphs");
        goto rep_done;
      }
    }
    if (rep == 0 && wfd >= 0 && sheaf_model_save(m, wpath)) {
      rc = fail(ctx, "saving the initial weights for the DyNet peer");
      goto rep_done;
    }
    uint64_t f = 0, bw = 0;
    par_acct par_keep = g_par; /* the warm-up is not counted */
    if (T ? update_dp(m, gs, T, opt, &p, &c, 0, H, dp_loss, &f, &bw, &first_loss)
          : update(m, g, opt, &p, &c, 0, H, hf, hb, loss, &f, &bw, &first_loss)) {
      rc = fail(ctx, "warm-up update");
      goto rep_done;
    }
    f = bw = 0;
    g_par = par_keep;
    for (int u = 0; u < updates; u++)
      if (T ? update_dp(m, gs, T, opt, &p, &c, (u + 1) * B, H, dp_loss, &f, &bw, u == updates - 1 ? &last_loss : NULL)
            : update(m, g, opt, &p, &c, (u + 1) * B, H, hf, hb, loss, &f, &bw, u == updates - 1 ? &last_loss : NULL)) {
        rc = fail(ctx, "update");
        goto rep_done;
      }
    double s = (double)(f + bw) * 1e-9;
    if (s < best) best = s, best_f = (double)f * 1e-9, best_b = (double)bw * 1e-9;
    rc = 0;
  rep_done:
    sheaf_optimizer_free(opt);
    for (int k = 0; k < T; k++) sheaf_graph_free(gs[k]);
    sheaf_graph_free(g);
    sheaf_model_free(m);
    if (rc) break;
  }
  if (rc) {
    sheaf_ctx_free(ctx);
    return rc;
  }
  double sheaf_rate = (double)updates * B / best;
  if (T)
    printf("  %-22s %9.1f sents/s   (shards: build, forward and backward %.3f s with the reduction and step;\n"
           "  %-22s %9s           loss: first update %.5f, last %.4f)\n",
           "sheaf", sheaf_rate, best_b, "", "", first_loss, last_loss);
  else
    printf("  %-22s %9.1f sents/s   (forward %.3f s, backward+step %.3f s: %.2fx the forward;\n"
           "  %-22s %9s           loss: first update %.5f, last %.4f)\n",
           "sheaf", sheaf_rate, best_f, best_b, best_b / best_f, "", "", first_loss, last_loss);
  par_report(&g_par);
  if (torch || dynet) {
    char path[] = "/tmp/bench_train_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || !write_corpus(&c, path)) {
      fprintf(stderr, "bench_train: cannot write the peer's corpus\n");
      sheaf_ctx_free(ctx);
      return 1;
    }
    char cmd[2048];
    double best_torch = 0, best_dynet = 0;
    if (torch) {
      snprintf(cmd, sizeof cmd,
               "OMP_NUM_THREADS=%d MKL_NUM_THREADS=%d OPENBLAS_NUM_THREADS=%d %s bench/train_torch.py --corpus %s "
               "--threads %d --updates %d --reps %d --embed %d --hidden %d --batch %d%s",
               threads, threads, threads, python, path, threads, updates, reps, E, H, B, g_cpu ? " --cpu-time" : "");
      if (lazy_emb) strncat(cmd, " --sparse-emb", sizeof cmd - strlen(cmd) - 1);
      if (!run_peer(cmd, sheaf_rate, &best_torch)) printf("  (PyTorch: scripts/install_torch.sh)\n");
      else printf("  sheaf / best PyTorch = %.2fx\n", sheaf_rate / best_torch);
    }
    char bin[1024];
    snprintf(bin, sizeof bin, "%s/bin/bilstm_train_dynet", dynet_dir);
    if (dynet && access(bin, X_OK) != 0) {
      char failed[1100], why[1200] = "";
      snprintf(failed, sizeof failed, "%s/FAILED", dynet_dir);
      FILE *ff = fopen(failed, "r");
      if (!ff || !fgets(why, sizeof why, ff)) snprintf(why, sizeof why, "%s not built (scripts/install_dynet.sh)\n", bin);
      if (ff) fclose(ff);
      printf("  DyNet: not available (%.*s)\n", (int)strcspn(why, "\n"), why);
    } else if (dynet) {
      for (int k = 0; k <= 2; k++) {
        snprintf(cmd, sizeof cmd,
                 "%s --dynet-autobatch %d --dynet-mem 2048 --dynet-seed 1 --weights %s --corpus %s --updates %d "
                 "--reps %d --batch %d%s%s 2>/dev/null",
                 bin, k, wpath, path, updates, reps, B, g_cpu ? " --cpu-time" : "",
                 lazy_emb ? "" : " --dense-lookup");
        run_peer(cmd, sheaf_rate, &best_dynet);
      }
      if (best_dynet > 0) printf("  sheaf / best DyNet = %.2fx\n", sheaf_rate / best_dynet);
    }
    remove(path);
  }
  if (wfd >= 0) remove(wpath);
  free(dp_loss);
  free(dp_states);
  sheaf_ctx_free(ctx);
  free(c.start);
  free(c.len);
  free(c.word);
  free(c.tag);
  return 0;
}
