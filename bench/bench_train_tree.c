/*
 * bench_train_tree.c — training throughput of the binary TreeLSTM
 * (src/models/treelstm.h) against its PyTorch peers (bench/train_torch.py
 * --model treelstm), and the dev accuracy each reaches after the same
 * updates. The task is `sheaf train treelstm`'s on CoNLL-U
 * (src/io/tree_labels.h): the UPOS class of each sentence's root word
 * (VERB, NOUN, PROPN, ADJ, other), the trees binarized (io/binarize.h).
 * Same sizes (embedding E, hidden H), Adam (lr 2e-3, no weight decay, no
 * clipping), batches of B trees taken in file order, the mean NLL of a
 * batch's trees, the same number of updates. Sheaf builds one graph per
 * batch (every tree's leaves, cells and classifiers batched by the
 * runtime). Timed: the updates after one warm-up update, min over --reps
 * runs (each from a fresh seeded initialization); instances = trees. Then
 * the last run's weights classify --dev (not timed) and the accuracy is
 * printed with the majority class's share. The DyNet peer
 * (bench/treelstm_train_dynet.cc, built by scripts/install_dynet.sh into
 * DIR/bin, default build/peers/dynet) runs at --dynet-autobatch 0, 1 and 2
 * on the same corpus when it is built (1 thread: DyNet's CPU backend),
 * each reported and the best one compared; otherwise the output says why
 * not.
 *
 * --split instances|ops (2 threads or more; default instances): the
 * batch's trees in T shards, each built, flushed and
 * differentiated on its own thread with its own graph and gradient shard,
 * the shards' gradients reduced in order, one step; or one graph whose
 * kernels split over the threads. At 1 thread: one graph either way.
 * --cut balanced|nodes|height (default balanced): the shards are sets of
 * trees of about equal nodes, not contiguous (split_balanced); or the
 * batch's own order cut into about equal nodes (contiguous: the larger
 * shard about 5% over the mean, whole trees); or its trees ordered by
 * height and cut where a modelled cost (nodes, plus LEVEL_NODES a level)
 * balances, so the short trees run together (not measurably better on the
 * loaded VM: docs/TRAINING.md, "Packed weights once per step").
 *
 * --scaling [--windows W] [--threads T]: 1 thread against T (default 2) in
 * one process, two models from the same seed trained on the same updates,
 * W windows (default 15) of --updates updates each, the two alternating
 * (run_scaling); prints each window's ratio and their median. The rest of
 * the bench (reps, dev accuracy, peers) is skipped. --shard-log FILE: a
 * line per update and shard: update's first tree, shard, trees, nodes,
 * leaves, height, thread CPU ns.
 *
 *   make bench-train BENCH_ARGS='--threads 1 --updates 100'
 */
#include <math.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench_train_par.h"
#include "io/tree_labels.h"
#include "models/models.h"
#include "runtime/runtime.h"
#include "sheaf_train.h"

enum { MAX_B = 1024 };
static int B = 32; /* trees per update (--batch) */

/* Seconds on the process's CPU clock (--cpu-time: every thread of the
 * process, so the pool's workers count too) or the monotonic clock. */
static bool g_cpu;
/* --lazy-emb: every system updates only the embedding rows a batch looked
 * up (Sheaf: sheaf_optimizer_lazy_rows; PyTorch: a sparse embedding and
 * SparseAdam for it; DyNet: its default for lookup parameters). Without
 * it, every system's Adam updates every row (DyNet: --dense-lookup). */
static bool lazy_emb;
static double now_s(void) {
  struct timespec t;
  clock_gettime(g_cpu ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Runs a peer command; prints its "# ..." lines and, per JSON line, its
 * rate, dev accuracy and Sheaf's ratio; *best: its best rate. Returns the
 * lines read. */
static int run_peer(const char *cmd, double sheaf_rate, double *best) {
  FILE *pp = popen(cmd, "r");
  char line[512];
  int peers = 0;
  while (pp && fgets(line, sizeof line, pp)) {
    char sys[64];
    double r, a;
    if (sscanf(line, "{\"system\": \"%63[^\"]\", \"trees_per_s\": %lf, \"dev_accuracy\": %lf", sys, &r, &a) == 3 &&
        r > 0) {
      printf("  %-22s %9.1f trees/s   dev accuracy %.2f%%   sheaf / %s = %.2fx\n", sys, r, 100 * a, sys,
             sheaf_rate / r);
      if (r > *best) *best = r;
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

static int fail(sheaf_ctx *ctx, const char *what) {
  fprintf(stderr, "bench_train_tree: %s: %s\n", what, sheaf_ctx_last_error(ctx));
  return 1;
}

typedef struct data {
  sh_dataset d;
  int32_t *label;
  int32_t *height; /* by tree: its levels (a leaf: 1) */
} data;

static bool load(sheaf_ctx *ctx, const char *path, data *x) {
  if (sh_dataset_load(ctx, path, SH_DATASET_BINARY, &x->d) != SHEAF_OK) return false;
  const sh_treebank *tb = &x->d.tb;
  x->label = malloc(((size_t)sh_dataset_count(&x->d) + 1) * sizeof *x->label);
  x->height = malloc(((size_t)tb->n_trees + 1) * sizeof *x->height);
  int32_t *lev = malloc(((size_t)tb->n_nodes + 1) * sizeof *lev);
  if (x->height && lev)
    for (int32_t t = 0; t < tb->n_trees; t++) { /* post-order: children before parents */
      int32_t h = 1;
      for (int32_t v = tb->tree_first[t]; v < tb->tree_first[t] + tb->tree_size[t]; v++) {
        lev[v] = 1;
        for (int32_t i = 0; i < tb->n_children[v]; i++) {
          int32_t c = lev[sh_tb_child(tb, v, i)] + 1;
          if (c > lev[v]) lev[v] = c;
        }
        if (lev[v] > h) h = lev[v];
      }
      x->height[t] = h;
    }
  free(lev);
  return x->label && x->height && sh_tree_labels_load(ctx, path, &x->d, x->label) == SHEAF_OK;
}

/* --threads 2 and more: the serial part of a step (bench_train_par.h) */
static par_acct g_par;

/* One update on trees s0 .. s0 + B (wrapping); ph[0..2] += the seconds of
 * its forward (build and flush), backward (zeroing included) and step. */
static sheaf_status update(sh_net *net, sheaf_graph *g, sheaf_optimizer *opt, const data *tr, int64_t s0,
                           sheaf_expr *out, sheaf_expr *loss, double *ph) {
  int32_t n = sh_dataset_count(&tr->d);
  double t0 = now_s();
  par_begin(&g_par);
  sheaf_status st = sheaf_graph_reset(g);
  for (int i = 0; i < B && !st; i++) {
    int32_t t = (int32_t)((s0 + i) % n);
    st = sh_net_build(net, g, t, out + i);
    loss[i] = sheaf_nll_logp(g, out[i], tr->label[t]);
  }
  par_mark(&g_par, PAR_BUILD);
  if (!st) st = sheaf_graph_flush(g);
  par_mark(&g_par, PAR_FLUSH);
  double t1 = now_s();
  sheaf_backward_opts bo = {1.0f / (float)B, 0, NULL, NULL};
  if (!st) st = sheaf_model_zero_grad(net->model);
  par_mark(&g_par, PAR_ZERO);
  if (!st) st = sheaf_backward(g, B, loss, &bo);
  par_mark(&g_par, PAR_BACKWARD);
  double t2 = now_s();
  if (!st) st = sheaf_optimizer_step(opt, NULL);
  par_mark(&g_par, PAR_STEP);
  if (g_par.pool) g_par.updates++; /* --scaling: off (its pair runs on two threads) */
  double t3 = now_s();
  ph[0] += t1 - t0, ph[1] += t2 - t1, ph[2] += t3 - t2;
  return st;
}

/* --shard-log FILE: a line per update and shard (trees, nodes, leaves,
 * height, thread CPU ns), for fitting the cut's cost model. */
static FILE *shard_log;

/* --split instances: shard k of an update, on its own thread and graph. */
enum { MAXT = 64 };
typedef struct dp_update {
  sheaf_graph **g; /* a graph per shard (1 thread, bound to gradient shard k) */
  sh_net *net;
  const data *tr;
  int64_t s0;
  sheaf_expr *out, *loss; /* MAX_B each, by position in `order` */
  uint64_t ns[MAXT];      /* the shard's thread CPU time */
  int order[MAX_B];       /* the batch's trees (indices in the batch), by height */
  int cut[MAXT + 1];      /* shard k: trees order[cut[k] .. cut[k + 1]) */
  int64_t log[MAXT][4];   /* --shard-log: trees, nodes, leaves, height */
} dp_update;

static sheaf_status dp_shard(int k, int n, void *user) {
  dp_update *u = user;
  sheaf_graph *g = u->g[k];
  int32_t nt = sh_dataset_count(&u->tr->d);
  (void)n;
  int i0 = u->cut[k], i1 = u->cut[k + 1];
  uint64_t t0 = par_thread_ns();
  sheaf_status st = sheaf_graph_reset(g);
  for (int i = i0; i < i1 && !st; i++) {
    int32_t t = (int32_t)((u->s0 + u->order[i]) % nt);
    st = sh_net_build(u->net, g, t, u->out + i);
    u->loss[i] = sheaf_nll_logp(g, u->out[i], u->tr->label[t]);
  }
  sheaf_backward_opts bo = {1.0f / (float)B, 0, NULL, NULL};
  if (!st) st = sheaf_backward(g, i1 - i0, u->loss + i0, &bo); /* flushes first */
  u->ns[k] = par_thread_ns() - t0;
  if (shard_log) { /* --shard-log: the shard's trees, nodes, leaves, height and thread CPU time */
    const sh_treebank *tb = &u->tr->d.tb;
    int64_t nodes = 0, leaves = 0, h = 0;
    for (int i = i0; i < i1; i++) {
      int32_t t = (int32_t)((u->s0 + u->order[i]) % nt);
      nodes += tb->tree_size[t];
      for (int32_t v = tb->tree_first[t]; v < tb->tree_first[t] + tb->tree_size[t]; v++) leaves += !tb->n_children[v];
      h = u->tr->height[t] > h ? u->tr->height[t] : h;
    }
    u->log[k][0] = i1 - i0, u->log[k][1] = nodes, u->log[k][2] = leaves, u->log[k][3] = h;
  }
  return st;
}

/* The cost of a shard, in tree nodes: its nodes, plus LEVEL_NODES for each
 * level it runs (its tallest tree's height): a level is a GEMM over all of
 * W_node (640 KB at H = 128) whatever its rows, about 40 us forward and
 * backward against about 9 us a node (thread CPU time, 1-thread shards). */
enum { LEVEL_NODES = 2 };
enum { CUT_NODES, CUT_HEIGHT, CUT_BALANCED };
static int cut_mode = CUT_BALANCED; /* --cut balanced (default) | nodes | height */

/* Shards k of the cut: trees order[cut[k] .. cut[k + 1]) of at most `cap`
 * cost each, greedily over the order (a shard is cut off when the next
 * tree would exceed cap, or when the trees left are as many as the shards
 * left: n non-empty shards); false when cap is too small. */
static bool cut_at(const int64_t *nodes, const int32_t *h, const int *order, int b, int n, int64_t cap, int *cut) {
  int k = 0;
  int64_t sum = 0;
  cut[0] = 0;
  for (int j = 0; j < b; j++) {
    int64_t c = nodes[order[j]], lv = (int64_t)LEVEL_NODES * h[order[j]];
    if (j > cut[k] && (lv + sum + c > cap || b - j <= n - 1 - k)) { /* a new shard */
      if (++k == n) return false;
      cut[k] = j, sum = 0;
    }
    if (lv + sum + c > cap) return false;
    sum += c;
  }
  cut[n] = b;
  return k == n - 1;
}

/* The batch's trees in n shards of about equal cost: ordered by height
 * (then batch index), cut where the largest shard's cost is least, so the
 * short trees run together, their levels not again in every shard. */
static void split_by_cost(const data *tr, int64_t s0, int n, int *order, int *cut) {
  int32_t nt = sh_dataset_count(&tr->d);
  int64_t nodes[MAX_B] = {0}, lo = 0, hi = 0;
  int32_t h[MAX_B] = {0};
  for (int i = 0; i < B; i++) {
    int32_t t = (int32_t)((s0 + i) % nt);
    nodes[i] = tr->d.tb.tree_size[t], h[i] = tr->height[t];
    int j = i; /* insertion sort by (height, index) */
    for (; j > 0 && h[order[j - 1]] > h[i]; j--) order[j] = order[j - 1];
    order[j] = i;
    int64_t one = nodes[i] + (int64_t)LEVEL_NODES * h[i];
    lo = one > lo ? one : lo;
    hi += one;
  }
  while (lo < hi) { /* the least cap that n shards meet */
    int64_t mid = lo + (hi - lo) / 2;
    if (cut_at(nodes, h, order, B, n, mid, cut)) hi = mid;
    else lo = mid + 1;
  }
  (void)cut_at(nodes, h, order, B, n, lo, cut); /* meets hi = the total: every tree's cost */
}

/* --cut balanced: the batch's trees in n shards of about equal nodes, not
 * contiguous (a contiguous cut of 32 trees leaves the larger shard about 5%
 * over the mean: whole trees of up to 100 nodes): the largest tree first
 * to the shard with the fewest nodes so far (ties: the lowest shard), then
 * moves of one tree, or swaps of two, from the largest shard to the
 * smallest while that narrows their gap; each shard's trees in batch
 * order. The same trees give the same shards (deterministic). */
static void split_balanced(const data *tr, int64_t s0, int n, int *order, int *cut) {
  int32_t nt = sh_dataset_count(&tr->d);
  int64_t nodes[MAX_B], load[MAXT] = {0};
  int by[MAX_B], in[MAX_B], count[MAXT] = {0};
  for (int i = 0; i < B; i++) {
    nodes[i] = tr->d.tb.tree_size[(s0 + i) % nt];
    int j = i; /* insertion sort: nodes descending, then batch index */
    for (; j > 0 && nodes[by[j - 1]] < nodes[i]; j--) by[j] = by[j - 1];
    by[j] = i;
  }
  for (int q = 0; q < B; q++) {
    int i = by[q], k = 0;
    for (int c = 1; c < n; c++)
      if (load[c] < load[k]) k = c;
    in[i] = k, load[k] += nodes[i], count[k]++;
  }
  for (int round = 0; round < 4 * B; round++) {
    int hi = 0, lo = 0;
    for (int c = 1; c < n; c++) {
      if (load[c] > load[hi]) hi = c;
      if (load[c] < load[lo]) lo = c;
    }
    int64_t gap = load[hi] - load[lo], best = gap; /* the gap after the best change */
    int bi = -1, bj = -1;
    for (int i = 0; i < B; i++) {
      if (in[i] != hi) continue;
      int64_t d = nodes[i]; /* moving i */
      if (count[hi] > 1 && d < gap && llabs(gap - 2 * d) < best) best = llabs(gap - 2 * d), bi = i, bj = -1;
      for (int j = 0; j < B; j++) { /* swapping i and j */
        if (in[j] != lo) continue;
        d = nodes[i] - nodes[j];
        if (d > 0 && d < gap && llabs(gap - 2 * d) < best) best = llabs(gap - 2 * d), bi = i, bj = j;
      }
    }
    if (bi < 0) break;
    in[bi] = lo, load[hi] -= nodes[bi], load[lo] += nodes[bi], count[hi]--, count[lo]++;
    if (bj >= 0) in[bj] = hi, load[lo] -= nodes[bj], load[hi] += nodes[bj], count[lo]--, count[hi]++;
  }
  int at = 0;
  for (int k = 0; k < n; k++) {
    cut[k] = at;
    for (int i = 0; i < B; i++)
      if (in[i] == k) order[at++] = i;
  }
  cut[n] = B;
}

/* One data-parallel update (--split instances); ph[1] += its seconds. */
static sheaf_status update_dp(sh_net *net, sheaf_graph **gs, int T, sheaf_optimizer *opt, const data *tr,
                              int64_t s0, sheaf_expr *out, sheaf_expr *loss, double *ph) {
  double t0 = now_s();
  par_begin(&g_par);
  dp_update u = {gs, net, tr, s0, out, loss, {0}, {0}, {0}, {{0}}};
  int n = T < B ? T : B;
  int32_t nt = sh_dataset_count(&tr->d);
  if (cut_mode == CUT_BALANCED) {
    split_balanced(tr, s0, n, u.order, u.cut);
  } else if (cut_mode == CUT_NODES) { /* the batch's order, about equal nodes */
    int64_t nodes = 0, run = 0;
    for (int i = 0; i < B; i++) nodes += tr->d.tb.tree_size[(s0 + i) % nt], u.order[i] = i;
    for (int i = 0, k = 1; i < B; i++) {
      run += tr->d.tb.tree_size[(s0 + i) % nt];
      while (k < n && run * n >= nodes * k && i + 1 >= k) u.cut[k++] = i + 1;
    }
    u.cut[n] = B;
  } else {
    split_by_cost(tr, s0, n, u.order, u.cut);
  }
  sheaf_status st = sheaf_model_zero_grad(net->model);
  par_mark(&g_par, PAR_ZERO);
  if (!st) st = sheaf_run_shards(sheaf_model_ctx(net->model), n, dp_shard, &u);
  par_mark(&g_par, PAR_BACKWARD);
  par_shards(&g_par, u.ns, n);
  for (int k = 0; shard_log && k < n; k++)
    fprintf(shard_log, "%lld %d %lld %lld %lld %lld %llu\n", (long long)s0, k, (long long)u.log[k][0],
            (long long)u.log[k][1], (long long)u.log[k][2], (long long)u.log[k][3], (unsigned long long)u.ns[k]);
  if (!st) st = sheaf_model_reduce_grads(net->model);
  par_mark(&g_par, PAR_REDUCE);
  double t2 = now_s();
  if (!st) st = sheaf_optimizer_step(opt, NULL);
  par_mark(&g_par, PAR_STEP);
  if (g_par.pool) g_par.updates++; /* --scaling: off (its pair runs on two threads) */
  double t3 = now_s();
  ph[1] += t2 - t0, ph[2] += t3 - t2;
  return st;
}

/* T graphs of 1 thread, graph k bound to gradient shard k. */
static bool make_shards(sheaf_model *m, int T, sheaf_graph **gs) {
  sheaf_graph_opts go = {SHEAF_POLICY_SHEAF, 1, NULL};
  for (int k = 0; k < T; k++)
    if (sheaf_graph_create(m, &go, &gs[k]) || sheaf_graph_grad_shard(gs[k], k)) return false;
  return true;
}

/* --scaling: one process, models from the same seed trained side by side
 * on the same updates: one on a context of 1 thread, one on a context of
 * `threads` (data-parallel shards, or one graph with --split ops), and two
 * more of 1 thread each (the pair). Window w runs the same `updates`
 * updates (trees (1 + w * updates) * B ..) on the 1-thread model alone,
 * on the T-thread model, and on the pair at once (two threads, one model
 * each), the order reversed every other window; each timed on the wall
 * clock. The window's ratio is the 1-thread time over the T-thread time;
 * its capacity is 2 x the 1-thread time over the pair's (what the machine
 * gave two threads in that window: about 2 on two free cores, about 1
 * when they share one core's throughput). Printed per window with the
 * 1-thread run's own thread CPU time over its wall time (below 1: it
 * waited for a vCPU) and its minor page faults, the machine's steal time
 * over the window (/proc/stat), then the median and range
 * of the ratios over every window and over the quiet ones (capacity 1.8
 * or more, and the 1-thread run on a vCPU 90% of its wall time or more:
 * under a heavy load a single window can pass the first test by chance). */
static int cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The machine's steal time so far (ms: the hypervisor ran something else
 * on a vCPU that had work), from /proc/stat; -1 when unreadable. */
static long steal_ms(void) {
  FILE *f = fopen("/proc/stat", "r");
  unsigned long long v[8] = {0};
  int n = f ? fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                     &v[6], &v[7])
            : 0;
  if (f) fclose(f);
  long hz = sysconf(_SC_CLK_TCK);
  return n == 8 && hz > 0 ? (long)(v[7] * 1000ull / (unsigned long long)hz) : -1;
}

static long minflt_now(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

typedef struct sc_side {
  sheaf_ctx *ctx;
  sh_net net;
  sheaf_graph *g, *gs[MAXT];
  sheaf_optimizer *opt;
  int T; /* shards (0: one graph) */
  const data *tr;
  int64_t u0;
  int n;
  bool ok;
  sheaf_expr out[MAX_B], loss[MAX_B];
} sc_side;

static bool sc_open(sc_side *s, const data *tr, int E, int H) {
  sheaf_optimizer_opts oo = {SHEAF_OPTIM_ADAM, 2e-3f, 0, 0, 0, 0, 0, 0};
  s->tr = tr;
  return !sh_net_create(s->ctx, SH_NET_TREELSTM, &tr->d, H, E, &s->net) && !sh_net_seed(&s->net, 1) &&
         !sheaf_graph_create(s->net.model, NULL, &s->g) && !sheaf_optimizer_create(s->net.model, &oo, &s->opt) &&
         !sheaf_optimizer_lazy_rows(s->opt, lazy_emb) && make_shards(s->net.model, s->T, s->gs);
}

static void sc_close(sc_side *s) {
  sheaf_optimizer_free(s->opt);
  for (int k = 0; k < s->T; k++) sheaf_graph_free(s->gs[k]);
  sheaf_graph_free(s->g);
  sh_net_free(&s->net);
}

/* Updates u0 .. u0 + n on side s (s->ok: no error; printed). */
static void *sc_run(void *arg) {
  sc_side *s = arg;
  double ph[3] = {0, 0, 0};
  s->ok = true;
  for (int u = 0; u < s->n && s->ok; u++)
    if (s->T ? update_dp(&s->net, s->gs, s->T, s->opt, s->tr, (s->u0 + u) * B, s->out, s->loss, ph)
             : update(&s->net, s->g, s->opt, s->tr, (s->u0 + u) * B, s->out, s->loss, ph))
      s->ok = false, fail(s->ctx, "update");
  return NULL;
}

/* Wall seconds of updates u0 .. u0 + n on side a, and on b at the same
 * time on a thread of its own when b is given (until both are done). */
static double sc_time(sc_side *a, sc_side *b, int64_t u0, int n) {
  pthread_t th;
  a->u0 = u0, a->n = n;
  if (b) b->u0 = u0, b->n = n;
  double t0 = now_s();
  bool two = b && pthread_create(&th, NULL, sc_run, b) == 0;
  if (b && !two) b->ok = false;
  sc_run(a);
  if (two) pthread_join(th, NULL);
  return now_s() - t0;
}

/* The largest |w1 - w2| over every weight, against the largest |w1|. */
static double sc_weight_diff(const sheaf_model *a, const sheaf_model *b, double *scale) {
  double d = 0, sc = 0;
  for (uint32_t i = 0; i < a->n_params && i < b->n_params; i++)
    for (size_t k = 0; k < a->params[i].numel; k++) {
      double x = a->params[i].data[k], y = b->params[i].data[k];
      d = fabs(x - y) > d ? fabs(x - y) : d;
      sc = fabs(x) > sc ? fabs(x) : sc;
    }
  *scale = sc;
  return d;
}

static void sc_summary(const char *what, double *r, int n, int threads) {
  if (!n) {
    printf("  %d threads / 1 thread, %s: no window\n", threads, what);
    return;
  }
  qsort(r, (size_t)n, sizeof *r, cmp_dbl);
  double med = n & 1 ? r[n / 2] : 0.5 * (r[n / 2 - 1] + r[n / 2]);
  printf("  %d threads / 1 thread, %s: median %.2fx over %d windows (%.2f-%.2f)\n", threads, what, med, n, r[0],
         r[n - 1]);
}

static int run_scaling(sheaf_ctx *ctx1, int threads, bool split_ops, const data *tr, int E, int H, int updates,
                       int windows) {
  enum { ONE, MANY, PAIR_A, PAIR_B, SIDES };
  sheaf_ctx_options co = {0};
  char err[256];
  sc_side *s = calloc(SIDES, sizeof *s);
  double *ratio = calloc(2 * (size_t)windows + 2, sizeof *ratio), *quiet = ratio ? ratio + windows + 1 : NULL;
  if (!s || !ratio) {
    fprintf(stderr, "bench_train_tree: out of memory\n");
    free(s), free(ratio);
    return 1;
  }
  s[ONE].ctx = ctx1;
  s[MANY].T = split_ops ? 0 : threads;
  int rc = 0;
  for (int k = MANY; k < SIDES && !rc; k++) {
    co.threads = k == MANY ? threads : 1;
    if (sheaf_ctx_create(&co, &s[k].ctx, err, sizeof err)) fprintf(stderr, "bench_train_tree: %s\n", err), rc = 1;
  }
  for (int k = 0; k < SIDES && !rc; k++)
    if (!sc_open(&s[k], tr, E, H)) rc = fail(s[k].ctx, "setup");
  printf("  --scaling: %d windows of %d updates (%d trees each) in one process, the same updates on 1 thread,\n"
         "  on %d threads (%s) and on two 1-thread models at once (the pair), the order reversed every other\n"
         "  window; wall clock. ratio = 1-thread time / %d-thread time; capacity = 2 x 1-thread time / the pair's\n",
         windows, updates, updates * B, threads, split_ops ? "split ops" : "split instances", threads);
  printf("  %6s %11s %11s %9s %8s %11s %11s %8s %8s\n", "window", "1T trees/s", "1T cpu/wall", "1T minflt",
         "steal ms", "2T trees/s", "pair tr/s", "ratio", "capacity");
  int nq = 0;
  double sum1 = 0, sum2 = 0;
  if (!rc) { /* warm-up: update 0 on each */
    sc_time(&s[ONE], NULL, 0, 1), sc_time(&s[MANY], NULL, 0, 1), sc_time(&s[PAIR_A], &s[PAIR_B], 0, 1);
    for (int k = 0; k < SIDES; k++) rc |= !s[k].ok;
  }
  for (int w = 0; w < windows && !rc; w++) {
    int64_t u0 = 1 + (int64_t)w * updates;
    double t[3] = {0, 0, 0}, cpu1 = 0;
    long flt1 = 0, st0 = steal_ms();
    for (int q = 0; q < 3; q++) {
      int what = w & 1 ? 2 - q : q; /* 0: 1 thread, 1: T threads, 2: the pair */
      long f0 = minflt_now();
      uint64_t c0 = par_thread_ns();
      t[what] = what == 0 ? sc_time(&s[ONE], NULL, u0, updates)
              : what == 1 ? sc_time(&s[MANY], NULL, u0, updates)
                          : sc_time(&s[PAIR_A], &s[PAIR_B], u0, updates);
      if (what == 0) cpu1 = 1e-9 * (double)(par_thread_ns() - c0), flt1 = minflt_now() - f0;
    }
    for (int k = 0; k < SIDES; k++) rc |= !s[k].ok;
    if (rc) break;
    double cap = 2 * t[0] / t[2];
    ratio[w] = t[0] / t[1];
    if (cap >= 1.8 && cpu1 >= 0.9 * t[0]) quiet[nq++] = ratio[w]; /* two threads given, the 1-thread run not waiting */
    sum1 += t[0], sum2 += t[1];
    long st1 = steal_ms();
    printf("  %6d %11.1f %11.3f %9ld %8ld %11.1f %11.1f %7.2fx %7.2fx\n", w, updates * B / t[0], cpu1 / t[0], flt1,
           st0 < 0 || st1 < 0 ? -1 : st1 - st0, updates * B / t[1], 2 * updates * B / t[2], ratio[w], cap);
    fflush(stdout);
  }
  if (!rc) {
    double scale, d = sc_weight_diff(s[ONE].net.model, s[MANY].net.model, &scale);
    double dp = sc_weight_diff(s[ONE].net.model, s[PAIR_A].net.model, &scale);
    sc_summary("every window", ratio, windows, threads);
    sc_summary("quiet windows (capacity >= 1.8, 1T cpu/wall >= 0.9)", quiet, nq, threads);
    printf("  total time ratio %.2fx; weights after %d updates: max |1T - %dT| = %.3g, max |1T - pair| = %.3g "
           "(largest |w| %.3g)\n",
           sum1 / sum2, 1 + windows * updates, threads, d, dp, scale);
  }
  free(ratio);
  for (int k = 0; k < SIDES; k++) {
    sc_close(&s[k]);
    if (k != ONE) sheaf_ctx_free(s[k].ctx);
  }
  free(s);
  return rc;
}

static double accuracy(const sh_net *net, sheaf_graph *g, const data *dv, double *major) {
  sh_net dn = *net;
  dn.data = &dv->d;
  int32_t n = sh_dataset_count(&dv->d);
  sh_net_outputs out;
  if (sh_net_outputs_init(&out, &dn, 0, n) || sh_net_run(&dn, g, 0, n, 256, &out)) return -1;
  int64_t right = 0, count[SH_TREE_CLASSES] = {0};
  for (int32_t i = 0; i < n; i++) {
    const float *r = sh_net_outputs_row(&out, i, 0);
    int best = 0;
    for (int k = 1; k < SH_TREE_CLASSES; k++)
      if (r[k] > r[best]) best = k;
    right += best == dv->label[i];
    count[dv->label[i]]++;
  }
  int64_t m = 0;
  for (int k = 0; k < SH_TREE_CLASSES; k++)
    if (count[k] > m) m = count[k];
  *major = (double)m / n;
  sh_net_outputs_free(&out);
  return (double)right / n;
}

/* The corpus for the peer: "treecorpus NTRAIN NDEV V", then a tree per
 * line "label n w0 l0 r0 w1 l1 r1 ..." in post-order (w: the embedding
 * row of a leaf, -1 for an internal node; l, r: local child indices, -1
 * for a leaf), the training trees then the dev trees. */
static bool write_corpus(const data *tr, const data *dv, int64_t V, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return false;
  fprintf(f, "treecorpus %d %d %lld\n", (int)sh_dataset_count(&tr->d), (int)sh_dataset_count(&dv->d),
          (long long)V);
  for (int k = 0; k < 2; k++) {
    const data *x = k ? dv : tr;
    const sh_treebank *tb = &x->d.tb;
    for (int32_t t = 0; t < tb->n_trees; t++) {
      int32_t first = tb->tree_first[t];
      fprintf(f, "%d %d", (int)x->label[t], (int)tb->tree_size[t]);
      for (int32_t v = first; v < first + tb->tree_size[t]; v++) {
        if (tb->n_children[v] == 0)
          fprintf(f, " %d -1 -1", (int)sh_word_id(x->d.ids, tb->word[v]));
        else
          fprintf(f, " -1 %d %d", (int)(sh_tb_child(tb, v, 0) - first), (int)(sh_tb_child(tb, v, 1) - first));
      }
      fputc('\n', f);
    }
  }
  return fclose(f) == 0;
}

int main(int argc, char **argv) {
  int threads = 1, updates = 100, reps = 3, E = 64, H = 128;
  const char *dynet_dir = "build/peers/dynet";
  bool dynet = true;
  const char *train = "data/ud_english_ewt/en_ewt-ud-train.min.conllu",
             *dev = "data/ud_english_ewt/en_ewt-ud-dev.min.conllu", *python = "python3";
  bool torch = true, split_ops = false, scaling = false;
  int windows = 15;
  for (int i = 1; i < argc; i++) {
    if (i + 1 < argc && strcmp(argv[i], "--threads") == 0) threads = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--updates") == 0) updates = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--reps") == 0) reps = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--batch") == 0) B = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--embed") == 0) E = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--hidden") == 0) H = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--tree-data") == 0) train = argv[++i];
    else if (i + 1 < argc && strcmp(argv[i], "--tree-dev") == 0) dev = argv[++i];
    else if (i + 1 < argc && strcmp(argv[i], "--python") == 0) python = argv[++i];
    else if (i + 1 < argc && strcmp(argv[i], "--data") == 0) ++i; /* bench_train's (sentences) */
    else if (strcmp(argv[i], "--no-torch") == 0) torch = false;
    else if (strcmp(argv[i], "--cpu-time") == 0) g_cpu = true;
    else if (strcmp(argv[i], "--lazy-emb") == 0) lazy_emb = true;
    else if (strcmp(argv[i], "--no-dynet") == 0) dynet = false;
    else if (strcmp(argv[i], "--scaling") == 0) scaling = true;
    else if (i + 1 < argc && strcmp(argv[i], "--shard-log") == 0 && !shard_log) {
      if (!(shard_log = fopen(argv[++i], "w"))) {
        fprintf(stderr, "bench_train_tree: --shard-log %s: cannot write it\n", argv[i]);
        return 2;
      }
    }
    else if (i + 1 < argc && strcmp(argv[i], "--windows") == 0) windows = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--split") == 0 &&
             (strcmp(argv[i + 1], "ops") == 0 || strcmp(argv[i + 1], "instances") == 0))
      split_ops = strcmp(argv[++i], "ops") == 0;
    else if (i + 1 < argc && strcmp(argv[i], "--cut") == 0 &&
             (!strcmp(argv[i + 1], "height") || !strcmp(argv[i + 1], "nodes") || !strcmp(argv[i + 1], "balanced"))) {
      i++;
      cut_mode = !strcmp(argv[i], "nodes") ? CUT_NODES : !strcmp(argv[i], "height") ? CUT_HEIGHT : CUT_BALANCED;
    }
    else if (i + 1 < argc && strcmp(argv[i], "--dynet-dir") == 0) dynet_dir = argv[++i];
    else {
      fprintf(stderr, "usage: bench_train_tree [--threads T] [--updates N] [--reps R] [--embed E] [--hidden H]\n"
                      "                        [--tree-data TRAIN.conllu] [--tree-dev DEV.conllu] [--python PY]\n"
                      "                        [--no-torch] [--no-dynet] [--dynet-dir DIR] [--lazy-emb]\n"
                      "                        [--cpu-time] [--batch B (default 32)] [--split instances|ops]\n"
                      "                        [--cut balanced|nodes|height] [--scaling [--windows W (default 15)]]\n"
                      "                        [--shard-log FILE]\n");
      return 2;
    }
  }
  if (scaling && (windows < 1 || windows > 10000)) {
    fprintf(stderr, "bench_train_tree: --windows %d: from 1 to 10000\n", windows);
    return 2;
  }
  int scale_threads = threads >= 2 ? threads : 2; /* --scaling: against 1 thread */
  if (scaling) threads = 1;
  if (threads < 1 || updates < 1 || reps < 1 || E < 1 || H < 1 || threads > MAXT || scale_threads > MAXT) {
    fprintf(stderr, "bench_train_tree: --threads (at most %d), --updates, --reps, --embed, --hidden must be >= 1\n",
            MAXT);
    return 2;
  }
  int T = threads >= 2 && !split_ops ? threads : 0; /* shards (0: one graph) */
  if (B < 1 || B > MAX_B) {
    fprintf(stderr, "bench_train_tree: --batch %d: from 1 to %d\n", B, (int)MAX_B);
    return 2;
  }
  sheaf_ctx_options co = {0};
  co.threads = threads;
  sheaf_ctx *ctx = NULL;
  char err[256];
  if (sheaf_ctx_create(&co, &ctx, err, sizeof err)) {
    fprintf(stderr, "bench_train_tree: %s\n", err);
    return 1;
  }
  par_init(&g_par, ctx);
  data tr = {0}, dv = {0};
  if (!load(ctx, train, &tr) || !load(ctx, dev, &dv)) return fail(ctx, "data");
  /* the dev words numbered by the training words (others: <unk>) */
  if (sh_dataset_renumber(&dv.d, &tr.d.tb.words, NULL, NULL)) return fail(ctx, "dev words");
  printf("bench_train_tree: TreeLSTM on %s (%d trees, %d words; the root word's UPOS class), E = %d, H = %d,\n"
         "  Adam lr 2e-3, batch %d trees, %d updates (after 1 warm-up), %d thread(s), min of %d runs (%s);\n"
         "  Adam on the embedding: %s; dev accuracy on %s (%d trees) after the updates\n",
         train, (int)sh_dataset_count(&tr.d), (int)tr.d.vocab - 1, E, H, B, updates, threads, reps,
         g_cpu ? "process CPU time, every system" : "wall time",
         lazy_emb ? "lazy, the rows looked up only (every system)" : "dense, every row (every system)", dev,
         (int)sh_dataset_count(&dv.d));
  if (scaling) /* what the 2-thread model splits (the lines above: the 1-thread one's) */
    T = split_ops ? 0 : scale_threads, threads = scale_threads;
  printf("  split%s: %s%s\n", scaling ? " (--scaling, the multi-thread model)" : "", T ? "instances (a shard of the batch per thread, its own graph; gradients reduced in order)"
                            : threads > 1 ? "ops (one graph, its kernels over the threads)" : "none (1 thread)",
         !T                       ? ""
         : cut_mode == CUT_NODES  ? ", cut: the batch's order by nodes"
         : cut_mode == CUT_HEIGHT ? ", cut: trees by height, balanced by cost"
                                  : ", cut: balanced by nodes (largest first, then moves and swaps)");
  if (scaling) {
    int rc = run_scaling(ctx, scale_threads, split_ops, &tr, E, H, updates, windows);
    free(tr.label), free(dv.label), free(tr.height), free(dv.height);
    sh_dataset_free(&tr.d), sh_dataset_free(&dv.d);
    sheaf_ctx_free(ctx);
    return rc;
  }
  static sheaf_expr out[MAX_B], loss[MAX_B];
  double best = 1e30, acc = -1, major = 0, best_ph[3] = {0, 0, 0};
  int rc = 0;
  for (int rep = 0; rep < reps && !rc; rep++) {
    sh_net net = {0};
    sheaf_graph *g = NULL, *gs[MAXT] = {0};
    sheaf_optimizer *opt = NULL;
    par_acct par_keep;
    sheaf_optimizer_opts oo = {SHEAF_OPTIM_ADAM, 2e-3f, 0, 0, 0, 0, 0, 0};
    if (sh_net_create(ctx, SH_NET_TREELSTM, &tr.d, H, E, &net) || sh_net_seed(&net, 1) ||
        sheaf_graph_create(net.model, NULL, &g) || sheaf_optimizer_create(net.model, &oo, &opt) ||
        sheaf_optimizer_lazy_rows(opt, lazy_emb)) {
      rc = fail(ctx, "setup");
    } else if (!make_shards(net.model, T, gs)) {
      rc = fail(ctx, "setup of the shards' graphs");
    } else if (par_keep = g_par, /* the warm-up is not counted */
               T ? update_dp(&net, gs, T, opt, &tr, 0, out, loss, (double[3]){0, 0, 0})
                 : update(&net, g, opt, &tr, 0, out, loss, (double[3]){0, 0, 0})) {
      rc = fail(ctx, "warm-up update");
    } else {
      g_par = par_keep;
      double ph[3] = {0, 0, 0};
      double t0 = now_s();
      for (int u = 0; u < updates && !rc; u++)
        if (T ? update_dp(&net, gs, T, opt, &tr, (int64_t)(u + 1) * B, out, loss, ph)
              : update(&net, g, opt, &tr, (int64_t)(u + 1) * B, out, loss, ph))
          rc = fail(ctx, "update");
      double s = now_s() - t0;
      if (s < best) best = s, memcpy(best_ph, ph, sizeof ph);
      if (!rc && rep == reps - 1 && (acc = accuracy(&net, g, &dv, &major)) < 0) rc = fail(ctx, "dev");
    }
    sheaf_optimizer_free(opt);
    for (int k = 0; k < T; k++) sheaf_graph_free(gs[k]);
    sheaf_graph_free(g);
    sh_net_free(&net);
  }
  if (!rc) {
    double rate = (double)updates * B / best;
    printf("  %-22s %9.1f trees/s   dev accuracy %.2f%% (majority class %.2f%%)\n", "sheaf", rate, 100 * acc,
           100 * major);
    printf("  sheaf per update: forward %.2f ms, backward %.2f ms, optimizer step %.2f ms\n",
           1e3 * best_ph[0] / updates, 1e3 * best_ph[1] / updates, 1e3 * best_ph[2] / updates);
    par_report(&g_par);
    char path[] = "/tmp/bench_train_tree_XXXXXX";
    int fd = (torch || dynet) ? mkstemp(path) : -1;
    if ((torch || dynet) && (fd < 0 || !write_corpus(&tr, &dv, tr.d.vocab, path))) {
      fprintf(stderr, "bench_train_tree: cannot write the peers' corpus\n");
      rc = 1;
    }
    char cmd[2048];
    if (!rc && torch) {
      double best_torch = 0;
      snprintf(cmd, sizeof cmd,
               "OMP_NUM_THREADS=%d MKL_NUM_THREADS=%d OPENBLAS_NUM_THREADS=%d %s bench/train_torch.py "
               "--model treelstm --corpus %s --threads %d --updates %d --reps %d --embed %d --hidden %d "
               "--batch %d%s",
               threads, threads, threads, python, path, threads, updates, reps, E, H, B, g_cpu ? " --cpu-time" : "");
      if (lazy_emb) strncat(cmd, " --sparse-emb", sizeof cmd - strlen(cmd) - 1);
      if (!run_peer(cmd, rate, &best_torch)) printf("  (PyTorch: scripts/install_torch.sh)\n");
      else printf("  sheaf / best PyTorch = %.2fx\n", rate / best_torch);
    }
    if (!rc && dynet) {
      char bin[1024], why[1200] = "";
      snprintf(bin, sizeof bin, "%s/bin/treelstm_train_dynet", dynet_dir);
      if (access(bin, X_OK) != 0) {
        char failed[1100];
        snprintf(failed, sizeof failed, "%s/FAILED", dynet_dir);
        FILE *ff = fopen(failed, "r");
        if (!ff || !fgets(why, sizeof why, ff)) snprintf(why, sizeof why, "%s not built (scripts/install_dynet.sh)\n", bin);
        if (ff) fclose(ff);
        printf("  DyNet: not available (%.*s)\n", (int)strcspn(why, "\n"), why);
      } else {
        double best_dynet = 0;
        for (int k = 0; k <= 2; k++) {
          snprintf(cmd, sizeof cmd,
                   "%s --dynet-autobatch %d --dynet-mem 2048 --dynet-seed 1 --autobatch %d --corpus %s --updates %d --reps %d "
                   "--embed %d --hidden %d --batch %d%s%s 2>/dev/null",
                   bin, k, k, path, updates, reps, E, H, B, g_cpu ? " --cpu-time" : "",
                   lazy_emb ? "" : " --dense-lookup");
          run_peer(cmd, rate, &best_dynet);
        }
        if (best_dynet > 0) printf("  sheaf / best DyNet = %.2fx\n", rate / best_dynet);
      }
    }
    if (fd >= 0) close(fd), remove(path);
  }
  free(tr.label);
  free(dv.label);
  free(tr.height);
  free(dv.height);
  sh_dataset_free(&tr.d);
  sh_dataset_free(&dv.d);
  sheaf_ctx_free(ctx);
  return rc;
}
