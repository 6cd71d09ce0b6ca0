/*
 * bench_runtime.c — the runtime's own overhead per graph node, for every
 * batching policy, with a hidden size so small (8) that the kernels cost
 * almost nothing: a binary TreeLSTM-like model (leaf: embedding lookup +
 * LSTM cell; internal node: [h_l ; h_r] concat, c_l + c_r, LSTM cell; root:
 * affine + log-softmax) over random trees of 25 leaves (49 tree nodes, as in
 * DyNet's synthetic benchmark), 64 trees per graph, one thread.
 *
 *   build   ns per node in the builders (graph construction, user code
 *           included; policy none runs its kernels there: they are excluded)
 *   sched   ns per node in flush outside the kernels (grouping, argument
 *           setup, output allocation)
 *   kernel  ns per node inside kernel calls
 *   total   build + sched: what a node costs besides its arithmetic
 *   cpu     the thread's CPU time per node for the whole round (build, flush,
 *           kernels, reading one output): robust to preemption on a shared
 *           machine, where the wall-clock columns are not
 *   trees/s the fastest round; GFLOP/s its useful GEMM FLOPs per second, and
 *           the fraction of the GEMM ceiling (sh_gemm on the internal node's
 *           shape at M=64) measured in the same process (--hidden 256: the
 *           throughput view; hidden 8: the overhead view)
 *
 * Two models: the cell as one sheaf_lstm_cell (GEMM + fused tail), and Tai
 * et al.'s cell written with slices and pointwise ops (src/models/treelstm.c:
 * activations fused into the GEMM, the tail into one pointwise program).
 *
 *   bench_runtime [--quick] [--model lstm|tai|both] [--trees N] [--leaves N] [--hidden N]
 *                 [--rounds N] [--threads N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "sheaf.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t urand(uint32_t n) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (uint32_t)((g_rng >> 33) % n);
}

typedef struct tree {
  int n, *left, *right, *word;
} tree;

static int add_node(tree *t, int l, int r) {
  t->left[t->n] = l;
  t->right[t->n] = r;
  t->word[t->n] = (int)urand(100);
  return t->n++;
}
static int random_tree(tree *t, int leaves) {
  if (leaves == 1) return add_node(t, -1, -1);
  int k = 1 + (int)urand((uint32_t)leaves - 1);
  int l = random_tree(t, k), r = random_tree(t, leaves - k);
  return add_node(t, l, r);
}

typedef struct model {
  sheaf_param emb, Wl, bl, Wn, bn, Wo, bo;
  sheaf_param Wlt, blt, Wnt, bnt; /* Tai's cell: [i o u] and [i f_l f_r o u] */
} model;

static void node(sheaf_graph *g, const model *p, const tree *t, int n, sheaf_expr *h,
                 sheaf_expr *c) {
  if (t->left[n] < 0) {
    sheaf_lstm_cell(g, p->Wl, p->bl, sheaf_lookup(g, p->emb, t->word[n]), (sheaf_expr){0, 0, 0}, h,
                    c);
    return;
  }
  sheaf_expr hl, cl, hr, cr;
  node(g, p, t, t->left[n], &hl, &cl);
  node(g, p, t, t->right[n], &hr, &cr);
  sheaf_expr hh[2] = {hl, hr};
  sheaf_lstm_cell(g, p->Wn, p->bn, sheaf_concat(g, 2, hh), sheaf_add(g, cl, cr), h, c);
}

/* Tai et al.'s cell written with slices and pointwise ops, as
 * src/models/treelstm.c: activations fuse into the GEMM, the cell's
 * elementwise tail into one pointwise program. */
static void node_tai(sheaf_graph *g, const model *p, const tree *t, int n, int64_t H, sheaf_expr *h,
                     sheaf_expr *c) {
  if (t->left[n] < 0) {
    sheaf_expr z = sheaf_affine(g, p->Wlt, sheaf_lookup(g, p->emb, t->word[n]), p->blt);
    sheaf_expr io = sheaf_sigmoid(g, sheaf_slice(g, z, 0, 2 * H));
    sheaf_expr u = sheaf_tanh(g, sheaf_slice(g, z, 2 * H, 3 * H));
    *c = sheaf_mul(g, sheaf_slice(g, io, 0, H), u);
    *h = sheaf_mul(g, sheaf_slice(g, io, H, 2 * H), sheaf_tanh(g, *c));
    return;
  }
  sheaf_expr hl, cl, hr, cr;
  node_tai(g, p, t, t->left[n], H, &hl, &cl);
  node_tai(g, p, t, t->right[n], H, &hr, &cr);
  sheaf_expr hh[2] = {hl, hr};
  sheaf_expr z = sheaf_affine(g, p->Wnt, sheaf_concat(g, 2, hh), p->bnt);
  sheaf_expr gates = sheaf_sigmoid(g, sheaf_slice(g, z, 0, 4 * H));
  sheaf_expr u = sheaf_tanh(g, sheaf_slice(g, z, 4 * H, 5 * H));
  sheaf_expr terms[3] = {sheaf_mul(g, sheaf_slice(g, gates, 0, H), u),
                         sheaf_mul(g, sheaf_slice(g, gates, H, 2 * H), cl),
                         sheaf_mul(g, sheaf_slice(g, gates, 2 * H, 3 * H), cr)};
  *c = sheaf_sum_n(g, 3, terms);
  *h = sheaf_mul(g, sheaf_slice(g, gates, 3 * H, 4 * H), sheaf_tanh(g, *c));
}

/* This thread's CPU time: unlike the wall-clock split in the graph's
 * statistics, it does not count time the thread spent preempted. */
static double thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int fail(sheaf_ctx *ctx, const char *what) {
  fprintf(stderr, "bench_runtime: %s: %s\n", what, sheaf_ctx_last_error(ctx));
  return 1;
}

int main(int argc, char **argv) {
  int trees = 64, leaves = 25, hidden = 8, rounds = 200, threads = 1;
  const char *which = "both";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick"))
      rounds = 40;
    else if (i + 1 < argc && !strcmp(argv[i], "--model"))
      which = argv[++i];
    else if (i + 1 < argc && !strcmp(argv[i], "--trees"))
      trees = atoi(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--leaves"))
      leaves = atoi(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--hidden"))
      hidden = atoi(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--rounds"))
      rounds = atoi(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--threads"))
      threads = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: bench_runtime [--quick] [--model lstm|tai|both] [--trees N] "
                      "[--leaves N] [--hidden N] [--rounds N] [--threads N]\n");
      return 2;
    }
  }
  if (trees < 1 || leaves < 1 || hidden < 1 || rounds < 1 || threads < 1 ||
      (strcmp(which, "lstm") && strcmp(which, "tai") && strcmp(which, "both")))
    return 2;
  sheaf_ctx_options o = {0};
  o.threads = threads;
  sheaf_ctx *ctx;
  char err[256];
  if (sheaf_ctx_create(&o, &ctx, err, sizeof err)) {
    fprintf(stderr, "bench_runtime: %s\n", err);
    return 1;
  }
  sheaf_model *m;
  model p;
  int64_t H = hidden;
  int64_t se[2] = {100, H}, sl[2] = {H, 4 * H}, sn[2] = {2 * H, 4 * H}, sb[1] = {4 * H},
          so[2] = {H, 5}, sbo[1] = {5}, slt[2] = {H, 3 * H}, sblt[1] = {3 * H},
          snt[2] = {2 * H, 5 * H}, sbnt[1] = {5 * H};
  if (sheaf_model_create(ctx, &m) ||
      sheaf_model_param(m, "emb", 2, se, SHEAF_INIT_NORMAL, &p.emb) ||
      sheaf_model_param(m, "W_leaf", 2, sl, SHEAF_INIT_GLOROT, &p.Wl) ||
      sheaf_model_param(m, "b_leaf", 1, sb, SHEAF_INIT_ZERO, &p.bl) ||
      sheaf_model_param(m, "W_node", 2, sn, SHEAF_INIT_GLOROT, &p.Wn) ||
      sheaf_model_param(m, "b_node", 1, sb, SHEAF_INIT_ZERO, &p.bn) ||
      sheaf_model_param(m, "W_out", 2, so, SHEAF_INIT_GLOROT, &p.Wo) ||
      sheaf_model_param(m, "b_out", 1, sbo, SHEAF_INIT_ZERO, &p.bo) ||
      sheaf_model_param(m, "W_leaf_tai", 2, slt, SHEAF_INIT_GLOROT, &p.Wlt) ||
      sheaf_model_param(m, "b_leaf_tai", 1, sblt, SHEAF_INIT_ZERO, &p.blt) ||
      sheaf_model_param(m, "W_node_tai", 2, snt, SHEAF_INIT_GLOROT, &p.Wnt) ||
      sheaf_model_param(m, "b_node_tai", 1, sbnt, SHEAF_INIT_ZERO, &p.bnt))
    return fail(ctx, "model");
  tree *ts = calloc((size_t)trees, sizeof *ts);
  int *roots = calloc((size_t)trees, sizeof *roots);
  for (int i = 0; i < trees; i++) {
    ts[i].left = calloc((size_t)(2 * leaves), sizeof(int));
    ts[i].right = calloc((size_t)(2 * leaves), sizeof(int));
    ts[i].word = calloc((size_t)(2 * leaves), sizeof(int));
    roots[i] = random_tree(&ts[i], leaves);
  }
  const sheaf_policy pols[] = {SHEAF_POLICY_SHEAF, SHEAF_POLICY_NONE, SHEAF_POLICY_DEPTH,
                               SHEAF_POLICY_AGENDA};
  double *bs = calloc((size_t)rounds, sizeof *bs), *ss = calloc((size_t)rounds, sizeof *ss),
         *ks = calloc((size_t)rounds, sizeof *ks), *cs = calloc((size_t)rounds, sizeof *cs);
  double best_round = 0;
  for (int tai = 0; tai < 2; tai++) {
  if (!strcmp(which, tai ? "lstm" : "tai")) continue;
  printf("%sruntime overhead: binary TreeLSTM-like model (%s), hidden %d, %d trees of %d leaves "
         "per graph, %d thread%s, ISA %s, median of %d rounds\n\n",
         tai && strcmp(which, "tai") ? "\n" : "",
         tai ? "Tai et al.'s cell with slices and pointwise ops: fused" : "sheaf_lstm_cell", hidden,
         trees, leaves, threads, threads > 1 ? "s" : "", sheaf_isa_name(sheaf_cpu_isa()), rounds);
  /* useful model FLOPs per graph (the GEMMs) and the GEMM ceiling on the
   * internal node's shape, measured in this process */
  double flops = 0;
  for (int i = 0; i < trees; i++) {
    double L = leaves, I = leaves - 1, h = (double)H;
    flops += tai ? L * 2 * h * 3 * h + I * 2 * 2 * h * 5 * h : L * 2 * h * 4 * h + I * 2 * 2 * h * 4 * h;
    flops += 2 * h * 5;
  }
  double ceil = 0;
  for (int k = 0; k < 3; k++) {
    double c = exb_gemm_gflops(ctx, threads, 64, (tai ? 5 : 4) * H, 2 * H, rounds > 40 ? 0.05 : 0.02);
    ceil = c > ceil ? c : ceil;
  }
  printf("GEMM ceiling (sh_gemm M=64, N=%d, K=%d, packed B, best of 3 windows): %.1f GFLOP/s\n\n",
         (int)((tai ? 5 : 4) * H), (int)(2 * H), ceil);
  printf("| policy | nodes/graph | batches/graph | build ns/node | sched ns/node | kernel ns/node | "
         "total ns/node | vs sheaf | cpu ns/node | trees/s | GFLOP/s | of ceiling |\n"
         "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  double sheaf_total = 0;
  for (int pi = 0; pi < 4; pi++) {
    sheaf_graph_opts go = {pols[pi], threads, NULL};
    sheaf_graph *g;
    if (sheaf_graph_create(m, &go, &g)) return fail(ctx, "graph");
    uint64_t nodes = 0, batches = 0;
    for (int r = -3; r < rounds; r++) { /* 3 warm-up rounds */
      sheaf_graph_stats s0, s1;
      sheaf_graph_get_stats(g, &s0);
      double c0 = thread_cpu_ns();
      uint64_t w0 = sheaf_time_ns();
      sheaf_expr out[1024];
      for (int i = 0; i < trees; i++) {
        sheaf_expr h, c;
        if (tai)
          node_tai(g, &p, &ts[i], roots[i], H, &h, &c);
        else
          node(g, &p, &ts[i], roots[i], &h, &c);
        sheaf_expr o1 = sheaf_log_softmax(g, sheaf_affine(g, p.Wo, h, p.bo));
        if (i < 1024) out[i] = o1;
      }
      if (sheaf_graph_flush(g)) return fail(ctx, "flush");
      sheaf_value_view v;
      if (sheaf_value(g, out[0], &v)) return fail(ctx, "value");
      double c1 = thread_cpu_ns(), wall = (double)(sheaf_time_ns() - w0);
      if (r >= 0 && (best_round == 0 || wall < best_round)) best_round = wall;
      sheaf_graph_get_stats(g, &s1);
      nodes = s1.nodes - s0.nodes;
      batches = s1.batches - s0.batches;
      if (r >= 0) {
        bs[r] = (double)(s1.ns_build - s0.ns_build) / (double)nodes;
        ss[r] = (double)(s1.ns_schedule - s0.ns_schedule) / (double)nodes;
        ks[r] = (double)(s1.ns_kernels - s0.ns_kernels) / (double)nodes;
        cs[r] = (c1 - c0) / (double)nodes; /* build + flush + read, kernels included */
      }
      if (sheaf_graph_reset(g)) return fail(ctx, "reset");
    }
    exb_sort_f64(bs, (size_t)rounds);
    exb_sort_f64(ss, (size_t)rounds);
    exb_sort_f64(ks, (size_t)rounds);
    exb_sort_f64(cs, (size_t)rounds);
    double b = bs[rounds / 2], s = ss[rounds / 2], k = ks[rounds / 2], tot = b + s;
    if (pi == 0) sheaf_total = tot;
    double gf = flops / best_round;
    printf("| %s | %llu | %llu | %.1f | %.1f | %.1f | %.1f | %.2f | %.1f | %.0f | %.1f | %.1f%% |\n",
           sheaf_policy_name(pols[pi]), (unsigned long long)nodes, (unsigned long long)batches, b, s,
           k, tot, tot / sheaf_total, cs[rounds / 2], trees * 1e9 / best_round, gf,
           100 * gf / ceil);
    best_round = 0;
    sheaf_graph_free(g);
  }
  }
  printf("\n(nodes count every expression, views included; lower is better. build/sched/kernel:\n"
         "medians of the wall-clock split in the graph's statistics; cpu: median of the thread's\n"
         "CPU time for the whole round, kernels included, which preemption does not inflate;\n"
         "trees/s, GFLOP/s: the fastest round (useful GEMM FLOPs), against the GEMM ceiling)\n");
  free(cs);
  free(bs);
  free(ss);
  free(ks);
  for (int i = 0; i < trees; i++) {
    free(ts[i].left);
    free(ts[i].right);
    free(ts[i].word);
  }
  free(ts);
  free(roots);
  sheaf_model_free(m);
  sheaf_ctx_free(ctx);
  return 0;
}
