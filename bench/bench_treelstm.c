/*
 * bench_treelstm.c — the binary TreeLSTM (src/models/treelstm.h) on the
 * bundled EWT trees, binarized: Sheaf with every batching policy against
 * PyTorch (bench/treelstm_torch.py: naive per-node recursion and hand
 * level-batched), same trees, same weights, one run; plus the GEMM ceiling
 * (sh_gemm on the internal-node shape M x 5H x 2H) and the fraction of it
 * Sheaf reaches in useful model FLOPs, the runtime's overhead per graph op
 * at a tiny hidden size, and Sheaf on 49-node synthetic trees next to
 * DyNet's figures measured on this machine (issue 4).
 *
 *   bench_treelstm [--quick] [--json FILE] [--hidden 256,512] [--batch 1,10,64]
 *                  [--threads 1,2] [--trees N] [--data FILE] [--python PY] [--no-torch]
 *                  [--no-dynet] [--dynet-dir DIR] [--paired R] [--cpu-time]
 *
 * DyNet (bench/treelstm_dynet.cc, built by scripts/install_dynet.sh into
 * DIR/bin, default build/peers/dynet) runs as a subprocess on the same trees
 * and weights at 1 thread, once per --dynet-autobatch 0, 1, 2 (each
 * reported, the best one compared), in the same run; on the 49-node
 * synthetic trees too. Without it the output says "DyNet: not available
 * (why)".
 *
 * Throughput = trees / wall time of whole passes over the same N trees
 * (batches of consecutive trees; graph building, scheduling, kernels and
 * reading the outputs all timed), best of several windows. --quick: 256
 * trees, short windows, PyTorch naive timed at the first batch size only
 * (its work per tree does not depend on the batch; "vs naive" then uses
 * that figure); default: all 2077 trees, everything at every batch size.
 * PyTorch at 2 threads runs twice, with OMP_WAIT_POLICY=PASSIVE and with
 * the default policy, and keeps its better figure per system and batch.
 *
 * --paired R (after everything above; hidden 256 only): R rounds of the
 * headline figures, each taken from windows measured back to back in one
 * round, in this order: the shape ceiling (bare sh_gemm calls at the
 * model's own batch shapes: per batch of 64 trees one leaf GEMM and one
 * node GEMM per internal-node height), Sheaf batch 64 at 2 threads with
 * one graph (its kernels split over the threads), the GEMM ceiling (M=64),
 * Sheaf batch 64 at 1 thread, Sheaf batch 64 at 2 threads the default way
 * (whole batches in parallel, a graph per thread), PyTorch level-batched
 * at batch 64 then 1 (one subprocess, one window each), Sheaf batch 1. Each
 * ratio is computed per round; printed as median and min-max over the
 * rounds (one window is one sample on a shared machine: the ratio of
 * neighbouring windows is steadier than either figure). The context gets
 * at least 2 threads in this mode.
 *
 * --cpu-time: every rate is trees per second of the timing thread's CPU
 * time instead of wall time (on a loaded machine the wall clock also
 * counts other work's time slices, so small changes drown): Sheaf's
 * windows and the GEMM ceilings on exb_now_s(true) (bench_util's
 * exb_cpu_time), the peers with SHEAF_PEER_CPU_TIME=1 in their environment
 * (treelstm_torch.py: time.thread_time; treelstm_dynet.cc: the thread's
 * CPU clock; each then prints "# rates on the thread's CPU clock"). Other
 * threads' time would not count, so it means 1 thread: --threads defaults
 * to 1 and more is refused, as is --paired (its 2-thread figures). The
 * header line says which clock.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

#define MAXL EXB_MAXL
#define EMBED 256
#define CHECK_TREES 64 /* instances compared with the PyTorch peers */

typedef exb_cell cell; /* peer[0]: pytorch-naive, peer[1]: pytorch-level */

static const char usage[] =
    "usage: bench_treelstm [--quick] [--json FILE] [--hidden LIST] [--batch LIST]\n"
    "                      [--threads LIST] [--trees N] [--data FILE] [--python PY]\n"
    "                      [--no-torch] [--no-dynet] [--dynet-dir DIR] [--paired R]\n"
    "                      [--cpu-time]\n"
    "  --paired R: R rounds (1..99) of the headline ratios at hidden 256 from\n"
    "              back-to-back windows; median and min-max over the rounds\n"
    "  --cpu-time: rates on the timing thread's CPU clock (Sheaf and the peers;\n"
    "              1 thread only), not the wall clock\n";

/* Synthetic data: `count` random binary trees of `leaves` leaves each
 * (2*leaves - 1 nodes), words from a 1000-word vocabulary. */
static bool synthetic(sheaf_ctx *ctx, int32_t count, int leaves, sh_dataset *d) {
  sh_dataset_init(d, ctx, SH_DATASET_BINARY);
  sh_treebank *tb = &d->tb;
  int32_t label;
  if (sh_vocab_intern(&tb->labels, "x", 1, &label)) return false;
  for (int w = 0; w < 1000; w++) {
    char s[16];
    int32_t id;
    snprintf(s, sizeof s, "w%d", w);
    if (sh_vocab_intern(&tb->words, s, strlen(s), &id)) return false;
  }
  uint64_t rng = 42;
  for (int32_t t = 0; t < count; t++) {
    int32_t stack[256];
    int sp = 0, made = 0;
    if (sh_tb_begin_tree(tb)) return false;
    while (made < leaves || sp > 1) {
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      int32_t id;
      if (made < leaves && (sp < 2 || (rng >> 63))) {
        if (sh_tb_add_node(tb, (int32_t)((rng >> 20) % 1000), 0, NULL, 0, &id)) return false;
        made++;
      } else {
        int32_t kids[2] = {stack[sp - 2], stack[sp - 1]};
        sp -= 2;
        if (sh_tb_add_node(tb, -1, 0, kids, 2, &id)) return false;
      }
      stack[sp++] = id;
    }
    if (sh_tb_end_tree(tb)) return false;
  }
  return sh_dataset_finish(d, 0) == SHEAF_OK;
}

/* ------------------------------------------------------------ --paired */

#define MAX_PAIRED 99

/* Takes "--paired R" out of argv (the shared flag parser does not know it):
 * R, or 0 when absent; prints the usage and exits 2 when R is bad. */
static int take_paired(int *argc, char **argv) {
  int R = 0, out = 1;
  for (int i = 1; i < *argc; i++) {
    if (strcmp(argv[i], "--paired")) {
      argv[out++] = argv[i];
      continue;
    }
    char *end = NULL;
    long v = i + 1 < *argc ? strtol(argv[i + 1], &end, 10) : 0;
    if (!end || end == argv[i + 1] || *end || v < 1 || v > MAX_PAIRED) {
      fputs(usage, stderr);
      exit(2);
    }
    R = (int)v;
    i++;
  }
  *argc = out;
  argv[out] = NULL;
  return R;
}

/* Takes the flag `name` (no value) out of argv: whether it was there. */
static bool take_flag(int *argc, char **argv, const char *name) {
  bool seen = false;
  int out = 1;
  for (int i = 1; i < *argc; i++) {
    if (!strcmp(argv[i], name)) seen = true;
    else argv[out++] = argv[i];
  }
  *argc = out;
  argv[out] = NULL;
  return seen;
}

/* Whether argv names `flag`. */
static bool has_flag(int argc, char **argv, const char *flag) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], flag)) return true;
  return false;
}

/* The GEMM shapes policy sheaf runs on trees [0, n) in batches of B
 * consecutive trees: per batch one leaf GEMM (M = its leaves, N = 3H,
 * K = E) and, per internal-node height h, one node GEMM (M = its internal
 * nodes of height h, N = 5H, K = 2H). malloc'd; *count entries. */
static exb_mnk *batch_shapes(const sh_treebank *tb, int32_t n, int B, int H, int *count) {
  int32_t *height = malloc((size_t)tb->n_nodes * sizeof(int32_t));
  sh_tb_heights(tb, height);
  int32_t max_h = 1;
  for (int32_t v = 0; v < tb->n_nodes; v++) max_h = height[v] > max_h ? height[v] : max_h;
  int64_t *at_h = malloc((size_t)(max_h + 1) * sizeof(int64_t));
  exb_mnk *shapes = malloc((size_t)((n + B - 1) / B) * (size_t)max_h * sizeof *shapes);
  *count = 0;
  for (int32_t t0 = 0; t0 < n; t0 += B) {
    memset(at_h, 0, (size_t)(max_h + 1) * sizeof(int64_t));
    int32_t first = tb->tree_first[t0], t1 = t0 + B < n ? t0 + B : n;
    int32_t end = tb->tree_first[t1 - 1] + tb->tree_size[t1 - 1];
    for (int32_t v = first; v < end; v++) at_h[tb->n_children[v] ? height[v] : 1]++;
    shapes[(*count)++] = (exb_mnk){at_h[1], 3 * H, EMBED};
    for (int32_t h = 2; h <= max_h; h++)
      if (at_h[h]) shapes[(*count)++] = (exb_mnk){at_h[h], 5 * H, 2 * H};
  }
  free(at_h);
  free(height);
  return shapes;
}

/* One line on the shape list: how many GEMMs, their mean M per kind. */
static void print_shapes(const exb_mnk *shapes, int count, int H, double of_useful) {
  double m[2] = {0, 0};
  int n[2] = {0, 0};
  for (int i = 0; i < count; i++) {
    int node = shapes[i].n == 5 * H;
    m[node] += (double)shapes[i].m;
    n[node]++;
  }
  printf("shape ceiling: %d bare sh_gemm calls per pass at batch 64: %d leaf GEMMs (N=%d, K=%d, "
         "mean M %.1f), %d node GEMMs, one per height (N=%d, K=%d, mean M %.1f); %.1f%% of the "
         "model's useful FLOPs\n",
         count, n[0], 3 * H, EMBED, n[0] ? m[0] / n[0] : 0, n[1], 5 * H, 2 * H,
         n[1] ? m[1] / n[1] : 0, 100 * of_useful);
}

/* One ratio over the rounds (0 = not measured that round). */
typedef struct paired_fig {
  const char *name;   /* JSON "figure" */
  const char *label;  /* printed */
  const char *target; /* the issue's target, or "information" */
  double scale;       /* 100 for percentages */
  double v[MAX_PAIRED];
} paired_fig;

enum { FIG_CEIL, FIG_VS_B64, FIG_VS_B1, FIG_T2, FIG_T2K, FIG_SHAPE, FIG_SHAPE_CEIL, NFIG };

/* What one round measures (0 = not measured). */
typedef struct paired_round {
  double shape, ceil;       /* GFLOP/s: shape ceiling, GEMM ceiling M=64 (1 thread) */
  double b64_t2, b64, b1;   /* Sheaf trees/s (2 threads: whole batches in parallel) */
  double b64_t2k;           /* Sheaf trees/s, 2 threads, one graph (kernels split) */
  double pt_b64, pt_b1;     /* PyTorch level-batched trees/s */
  double useful;            /* Sheaf b64 1 thread, useful GFLOP/s */
} paired_round;

/* Median, min, max of the measured (> 0) values of f; false if none. */
static bool fig_stats(const paired_fig *f, int R, double *med, double *lo, double *hi, int *n) {
  double v[MAX_PAIRED];
  *n = 0;
  for (int r = 0; r < R; r++)
    if (f->v[r] > 0) v[(*n)++] = f->v[r] * f->scale;
  if (!*n) return false;
  exb_sort_f64(v, (size_t)*n);
  *med = *n % 2 ? v[*n / 2] : 0.5 * (v[*n / 2 - 1] + v[*n / 2]);
  *lo = v[0];
  *hi = v[*n - 1];
  return true;
}

/* PyTorch level-batched at 1 thread, batch 64 then 1, one window each. */
static void paired_torch(const exb_opts *o, const exb_env *e, const exb_peer *p,
                         const char *wpath, paired_round *rd) {
  char args[1024], key[32];
  snprintf(args, sizeof args,
           "--weights %s %s %s --threads 1 --systems level --batches 64,1 --min-time %g "
           "--rounds 1",
           wpath, p->data_flag, e->data_file, e->min_s);
  snprintf(key, sizeof key, "%ss_per_s", p->unit);
  exb_peer_rec recs[8];
  int n = exb_run_peer_threads(o->python, p->script, 1, args, NULL, key, recs, 8);
  for (int r = 0; r < n; r++) {
    if (strcmp(recs[r].system, p->sys[1])) continue;
    if (recs[r].batch == 64) rd->pt_b64 = recs[r].rate;
    if (recs[r].batch == 1) rd->pt_b1 = recs[r].rate;
  }
}

/* One round, windows back to back (order: see the top of the file). */
static bool paired_round_run(const exb_opts *o, const exb_env *e, const exb_peer *p,
                             const sh_net *net, const char *wpath, const exb_mnk *shapes,
                             int nshapes, double flops_per_tree, paired_round *rd) {
  int H = (int)net->hidden;
  double gemm_s = o->quick ? 0.05 : 0.2;
  memset(rd, 0, sizeof *rd);
  rd->shape = exb_gemm_list_gflops(e->ctx, 1, shapes, nshapes, gemm_s);
  bool two = sheaf_ctx_threads(e->ctx) >= 2;
  if (two) {
    rd->b64_t2k = exb_runner_rate(net, SHEAF_POLICY_SHEAF, 2, SHEAF_PARALLEL_KERNELS, 64, e->n,
                                  e->min_s, 1, NULL, NULL);
    if (rd->b64_t2k <= 0) return false;
  }
  rd->ceil = exb_gemm_gflops(e->ctx, 1, 64, 5 * H, 2 * H, gemm_s);
  rd->b64 = exb_sheaf_rate(net, SHEAF_POLICY_SHEAF, 1, 64, e->n, e->min_s, 1, NULL, NULL);
  if (rd->b64 <= 0) return false;
  if (two) {
    rd->b64_t2 = exb_runner_rate(net, SHEAF_POLICY_SHEAF, 2, SHEAF_PARALLEL_BATCHES, 64, e->n,
                                 e->min_s, 1, NULL, NULL);
    if (rd->b64_t2 <= 0) return false;
  }
  rd->useful = rd->b64 * flops_per_tree * 1e-9;
  if (e->torch) paired_torch(o, e, p, wpath, rd);
  rd->b1 = exb_sheaf_rate(net, SHEAF_POLICY_SHEAF, 1, 1, e->n, e->min_s, 1, NULL, NULL);
  return rd->b1 > 0;
}

static double ratio(double a, double b) { return a > 0 && b > 0 ? a / b : 0; }

/* The round's ratios into the figures' column r. */
static void paired_record(const paired_round *rd, int r, paired_fig *f) {
  f[FIG_CEIL].v[r] = ratio(rd->useful, rd->ceil);
  f[FIG_VS_B64].v[r] = ratio(rd->b64, rd->pt_b64);
  f[FIG_VS_B1].v[r] = ratio(rd->b1, rd->pt_b1);
  f[FIG_T2].v[r] = ratio(rd->b64_t2, rd->b64);
  f[FIG_T2K].v[r] = ratio(rd->b64_t2k, rd->b64);
  f[FIG_SHAPE].v[r] = ratio(rd->useful, rd->shape);
  f[FIG_SHAPE_CEIL].v[r] = ratio(rd->shape, rd->ceil);
}

static void paired_print_round(int r, const paired_round *rd) {
  char t2[16], t2k[16], pt64[16], pt1[16];
  exb_fmt_num(t2, rd->b64_t2, 1);
  exb_fmt_num(t2k, rd->b64_t2k, 1);
  exb_fmt_num(pt64, rd->pt_b64, 1);
  exb_fmt_num(pt1, rd->pt_b1, 1);
  printf("  %5d | %8.1f %8.1f | %9s %9.1f %9s %8.1f %9s | %9.1f %9s\n", r + 1, rd->shape,
         rd->ceil, t2k, rd->b64, t2, rd->useful, pt64, rd->b1, pt1);
  fflush(stdout);
}

/* The summary table and one JSON record per figure. */
static void paired_summary(const paired_fig *f, int R, int H, bool torch) {
  printf("\n  %-44s %9s %19s   %s\n", "ratio (per round)", "median", "min - max", "target");
  for (int i = 0; i < NFIG; i++) {
    double med, lo, hi;
    int n;
    const char *unit = f[i].scale == 100 ? "%" : "x";
    if (!fig_stats(&f[i], R, &med, &lo, &hi, &n)) {
      printf("  %-44s %9s %19s   %s%s\n", f[i].label, "-", "-", f[i].target,
             (i == FIG_VS_B64 || i == FIG_VS_B1) && !torch ? " (PyTorch skipped)" : "");
      continue;
    }
    char mid[24], range[40];
    snprintf(mid, sizeof mid, "%.*f%s", f[i].scale == 100 ? 1 : 2, med, unit);
    snprintf(range, sizeof range, "%.*f - %.*f%s", f[i].scale == 100 ? 1 : 2, lo,
             f[i].scale == 100 ? 1 : 2, hi, unit);
    printf("  %-44s %9s %19s   %s%s\n", f[i].label, mid, range, f[i].target,
           n < R ? " (not every round)" : "");
    exb_json_rec("\"system\": \"paired\", \"model\": \"treelstm\", \"hidden\": %d, "
                 "\"figure\": \"%s\", \"unit\": \"%s\", \"median\": %.4f, \"min\": %.4f, "
                 "\"max\": %.4f, \"rounds\": %d",
                 H, f[i].name, f[i].scale == 100 ? "percent" : "ratio", med, lo, hi, n);
  }
}

/* --paired R: see the top of the file. False on error (printed). */
static bool paired(const exb_opts *o, exb_env *e, const exb_peer *p, int R) {
  int hi = 0;
  while (hi < o->nh && o->hidden[hi] != 256) hi++;
  if (hi == o->nh) {
    printf("\n--paired: skipped (hidden 256 is not in --hidden)\n");
    return true;
  }
  int H = o->hidden[hi];
  sh_net net;
  sh_net_outputs ref;
  const char *wpath;
  if (!exb_net_open(e, SH_NET_TREELSTM, H, EMBED, CHECK_TREES, &net, &ref, &wpath)) return false;
  sh_net_outputs_free(&ref);
  double flops = 0;
  for (int32_t t = 0; t < e->n; t++) flops += sh_net_flops(&net, t);
  int nshapes = 0;
  exb_mnk *shapes = batch_shapes(&e->d.tb, e->n, 64, H, &nshapes);
  double shape_flops = 0;
  for (int i = 0; i < nshapes; i++)
    shape_flops += 2.0 * (double)shapes[i].m * (double)shapes[i].n * (double)shapes[i].k;

  printf("\npaired rounds (--paired %d), hidden %d, %d trees: per round, back to back: shape "
         "ceiling, sheaf b64 2 threads one graph (kernels split), GEMM ceiling (M=64), sheaf b64 1 "
         "thread, sheaf b64 2 threads (whole batches in parallel), %s, sheaf b1; "
         "sheaf and PyTorch one window of >= %.2f s each\n",
         R, H, (int)e->n, e->torch ? "pytorch-level b64 and b1 (one subprocess)" : "(no PyTorch)",
         e->min_s);
  print_shapes(shapes, nshapes, H, shape_flops / flops);
  exb_note_torch(o, e);
  printf("  %5s | %8s %8s | %9s %9s %9s %8s %9s | %9s %9s\n", "round", "shape", "ceil M64",
         "b64 2thr", "b64 1thr", "b64 2thr", "GFLOP/s", "pt-level", "b1 1thr", "pt-level");
  printf("  %5s | %8s %8s | %9s %9s %9s %8s %9s | %9s %9s\n", "", "GFLOP/s", "GFLOP/s",
         "kernels", "trees/s", "batches", "useful", "b64", "trees/s", "b1");

  paired_fig figs[NFIG] = {
      [FIG_CEIL] = {"ceiling_pct_b64_t1", "% of GEMM ceiling (M=64), batch 64, 1 thread",
                    ">= 90%", 100, {0}},
      [FIG_VS_B64] = {"vs_pytorch_level_b64_t1", "vs pytorch-level, batch 64, 1 thread",
                      ">= 1.3x", 1, {0}},
      [FIG_VS_B1] = {"vs_pytorch_level_b1_t1", "vs pytorch-level, batch 1, 1 thread", ">= 2x",
                     1, {0}},
      [FIG_T2] = {"threads2_over_1_b64", "2 threads / 1 thread, batch 64", ">= 1.7x", 1, {0}},
      [FIG_T2K] = {"threads2_kernels_over_1_b64", "  the same, one graph (kernels split)",
                   "information", 1, {0}},
      [FIG_SHAPE] = {"shape_ceiling_pct_b64_t1", "% of shape ceiling, batch 64, 1 thread",
                     "information", 100, {0}},
      [FIG_SHAPE_CEIL] = {"shape_over_ceiling_pct", "shape ceiling / GEMM ceiling (M=64)",
                          "information", 100, {0}},
  };
  bool ok = true;
  for (int r = 0; r < R && ok; r++) {
    paired_round rd;
    ok = paired_round_run(o, e, p, &net, wpath, shapes, nshapes, flops / e->n, &rd);
    if (ok) {
      paired_print_round(r, &rd);
      paired_record(&rd, r, figs);
    }
  }
  if (ok) paired_summary(figs, R, H, e->torch);
  free(shapes);
  sh_net_free(&net);
  return ok;
}

int main(int argc, char **argv) {
  exb_opts o;
  exb_env e;
  int R = take_paired(&argc, argv);
  if (R > 0) exb_ctx_min_threads = 2; /* the 2-thread figure */
  exb_cpu_time = take_flag(&argc, argv, "--cpu-time");
  bool threads_given = has_flag(argc, argv, "--threads");
  if (exb_cpu_time && R > 0) {
    fprintf(stderr, "bench_treelstm: --cpu-time times one thread: it does not go with --paired "
                    "(2-thread figures)\n");
    return 2;
  }
  if (exb_cpu_time && setenv("SHEAF_PEER_CPU_TIME", "1", 1) != 0) {
    perror("bench_treelstm: setenv");
    return 1;
  }
  if (!exb_start(argc, argv, "bench_treelstm", "--trees", usage, SH_DATASET_BINARY, 256,
                 "trees.txt", exb_write_trees, &o, &e))
    return 1;
  if (exb_cpu_time && !threads_given) {
    o.threads[0] = 1;
    o.nt = 1;
  }
  for (int i = 0; exb_cpu_time && i < o.nt; i++)
    if (o.threads[i] != 1) {
      fprintf(stderr, "bench_treelstm: --cpu-time times one thread's CPU clock: use --threads 1 "
                      "(got %d)\n", o.threads[i]);
      return 2;
    }
  const sh_dataset *d = &e.d;
  int32_t S = e.n;
  int64_t nodes = sh_dataset_size_range(d, 0, S);
  int32_t *scratch = malloc((size_t)d->tb.n_nodes * sizeof(int32_t)),
          *heights = malloc((size_t)d->tb.n_trees * sizeof(int32_t));
  sh_tb_tree_heights(&d->tb, scratch, heights);
  double mean_h = 0;
  for (int32_t t = 0; t < S; t++) mean_h += heights[t];
  mean_h /= S;
  free(scratch);
  free(heights);

  printf("TreeLSTM (binary, Tai et al. 2015), %s binarized: %d trees, %lld nodes "
         "(mean %.1f nodes, mean height %.2f), embed %d\n",
         o.data, (int)S, (long long)nodes, (double)nodes / S, mean_h, EMBED);
  printf("sheaf %s, isa %s; trees/s = trees / %s of whole passes (build + schedule + "
         "kernels + reading outputs), best of %d window(s) of >= %.2f s%s\n",
         sheaf_version(), sheaf_isa_name(sheaf_cpu_isa()),
         exb_cpu_time ? "the timing thread's CPU time" : "wall time", e.rounds, e.min_s,
         exb_cpu_time ? "; clock: thread CPU (--cpu-time; the peers too: SHEAF_PEER_CPU_TIME=1)"
                      : "; clock: wall");
  exb_note_torch(&o, &e);
  const exb_peer peer = {"bench/treelstm_torch.py", "--trees", "--naive-batches", "tree",
                         {"pytorch-naive", "pytorch-level"}, "treelstm_dynet"};
  exb_note_dynet(&o, &peer);
  cell cells[MAXL][MAXL][MAXL]; /* [hidden][threads][batch] */
  memset(cells, 0, sizeof cells);
  double ceiling[MAXL][MAXL][2];
  memset(ceiling, 0, sizeof ceiling);
  double worst_check = 0;

  for (int hi = 0; hi < o.nh; hi++) {
    int H = o.hidden[hi];
    sh_net net;
    sh_net_outputs ref;
    const char *wpath;
    if (!exb_net_open(&e, SH_NET_TREELSTM, H, EMBED, CHECK_TREES, &net, &ref, &wpath)) return 1;
    double flops = 0;
    for (int32_t t = 0; t < S; t++) flops += sh_net_flops(&net, t);

    for (int ti = 0; ti < o.nt; ti++) {
      int T = o.threads[ti];
      ceiling[hi][ti][0] = exb_gemm_gflops(e.ctx, T, 64, 5 * H, 2 * H, o.quick ? 0.05 : 0.2);
      ceiling[hi][ti][1] = exb_gemm_gflops(e.ctx, T, 256, 5 * H, 2 * H, o.quick ? 0.05 : 0.2);
      printf("\nhidden %d, %d thread%s: GEMM ceiling (sh_gemm, N=%d, K=%d, packed B): "
             "M=64 %.1f GFLOP/s, M=256 %.1f GFLOP/s\n",
             H, T, T > 1 ? "s" : "", 5 * H, 2 * H, ceiling[hi][ti][0], ceiling[hi][ti][1]);
      exb_json_ceiling("treelstm", H, T, 64, 5 * H, 2 * H, ceiling[hi][ti][0]);
      exb_json_ceiling("treelstm", H, T, 256, 5 * H, 2 * H, ceiling[hi][ti][1]);
      double check = exb_table(&o, &e, &net, &peer, wpath, T, ti == 0 ? &ref : NULL,
                               cells[hi][ti], flops / S, ceiling[hi][ti][0]);
      if (check < 0) return 1;
      worst_check = fmax(worst_check, check);
    }
    sh_net_outputs_free(&ref);
    sh_net_free(&net);
  }

  /* runtime overhead: hidden 8, kernels cost (almost) nothing */
  if (!exb_overhead(&e, SH_NET_TREELSTM, "tree")) return 1;

  /* DyNet's setting: 49-node synthetic trees, hidden 256, 1 thread; DyNet
   * measured in the same run on the same trees and weights */
  printf("\nDyNet's setting (issue 4): 49-node synthetic trees, hidden 256, embed %d, 1 thread\n",
         EMBED);
  {
    sh_dataset syn;
    sh_net net;
    const char *syn_trees = exb_tmp_path("synthetic49.txt"),
               *syn_w = exb_tmp_path("treelstm-synthetic49.safetensors");
    if (!synthetic(e.ctx, 256, 25, &syn) ||
        sh_net_create(e.ctx, SH_NET_TREELSTM, &syn, 256, EMBED, &net) != SHEAF_OK ||
        sh_net_seed(&net, 1) != SHEAF_OK || sheaf_model_save(net.model, syn_w) != SHEAF_OK ||
        !exb_write_trees(&syn, 256, syn_trees)) {
      fprintf(stderr, "bench_treelstm: synthetic trees: %s\n", sheaf_ctx_last_error(e.ctx));
      return 1;
    }
    static const int bs[2] = {1, 64};
    exb_cell dy[2];
    memset(dy, 0, sizeof dy);
    bool have_dynet = exb_dynet(&o, &e, &peer, syn_w, syn_trees, bs, 2, NULL, dy) >= 0;
    for (int i = 0; i < 2; i++) {
      double r = exb_sheaf_rate(&net, SHEAF_POLICY_SHEAF, 1, bs[i], 256, e.min_s, e.rounds, NULL, NULL);
      int ab = 0;
      double dy_best = exb_dynet_best(&dy[i], &ab);
      printf("  batch %2d: sheaf %.1f trees/s", bs[i], r);
      if (dy_best > 0)
        printf("; DyNet %.1f / %.1f / %.1f trees/s at --dynet-autobatch 0 / 1 / 2 (measured now): "
               "%.2fx its best (autobatch %d)\n",
               dy[i].dynet[0], dy[i].dynet[1], dy[i].dynet[2], r / dy_best, ab);
      else printf("; DyNet: %s\n", have_dynet ? "no figure (the peer failed; see above)" : "not available (see the top)");
      exb_json_rec("\"system\": \"sheaf\", \"policy\": \"sheaf\", \"model\": \"treelstm-synthetic49\", "
                   "\"hidden\": 256, \"batch\": %d, \"threads\": 1, \"trees_per_s\": %.2f",
                   bs[i], r);
      for (int k = 0; k < 3; k++)
        if (dy[i].dynet[k] > 0)
          exb_json_rec("\"system\": \"dynet-ab%d\", \"policy\": null, "
                       "\"model\": \"treelstm-synthetic49\", \"hidden\": 256, \"batch\": %d, "
                       "\"threads\": 1, \"trees_per_s\": %.2f",
                       k, bs[i], dy[i].dynet[k]);
    }
    sh_net_free(&net);
    sh_dataset_free(&syn);
  }

  /* the headline figures */
  int h256 = -1, t1 = -1, t2 = -1, b1 = -1, b64 = -1;
  for (int i = 0; i < o.nh; i++) h256 = o.hidden[i] == 256 ? i : h256;
  for (int i = 0; i < o.nt; i++) {
    t1 = o.threads[i] == 1 ? i : t1;
    t2 = o.threads[i] == 2 ? i : t2;
  }
  for (int i = 0; i < o.nb; i++) {
    b1 = o.batch[i] == 1 ? i : b1;
    b64 = o.batch[i] == 64 ? i : b64;
  }
  if (h256 >= 0 && t1 >= 0) {
    printf("\nsummary, hidden 256, 1 thread:\n");
    if (b64 >= 0) {
      cell *c = &cells[h256][t1][b64];
      printf("  batch 64: sheaf %.1f trees/s = %.1f%% of the GEMM ceiling (M=64; %.1f%% of M=256)",
             c->sheaf[0], 100 * c->useful_gflops / ceiling[h256][t1][0],
             100 * c->useful_gflops / ceiling[h256][t1][1]);
      if (c->peer[1] > 0) printf(", %.2fx pytorch-level", c->sheaf[0] / c->peer[1]);
      int ab = 0;
      double dy_best = exb_dynet_best(c, &ab);
      if (dy_best > 0) printf(", %.2fx DyNet's best (%.1f trees/s, autobatch %d)", c->sheaf[0] / dy_best, dy_best, ab);
      printf("\n");
    }
    if (b1 >= 0) {
      cell *c = &cells[h256][t1][b1];
      printf("  batch 1:  sheaf %.1f trees/s", c->sheaf[0]);
      if (c->peer[1] > 0) printf(", %.2fx pytorch-level", c->sheaf[0] / c->peer[1]);
      int ab = 0;
      double dy_best = exb_dynet_best(c, &ab);
      if (dy_best > 0) printf(", %.2fx DyNet's best (%.1f trees/s, autobatch %d)", c->sheaf[0] / dy_best, dy_best, ab);
      printf("\n");
    }
    if (b64 >= 0 && t2 >= 0)
      printf("  batch 64, 2 threads / 1 thread: %.2fx\n",
             cells[h256][t2][b64].sheaf[0] / cells[h256][t1][b64].sheaf[0]);
  }
  if (R > 0 && !paired(&o, &e, &peer, R)) return 1;
  if (worst_check > 1e-4) printf("\nWARNING: Sheaf and a peer's (PyTorch or DyNet) outputs differ\n");
  exb_finish(&e);
  return 0;
}
