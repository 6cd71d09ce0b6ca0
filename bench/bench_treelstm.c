/*
 * bench_treelstm.c — the binary TreeLSTM (examples/treelstm.h) on the
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
 *
 * Throughput = trees / wall time of whole passes over the same N trees
 * (batches of consecutive trees; graph building, scheduling, kernels and
 * reading the outputs all timed), best of several windows. --quick: 256
 * trees, short windows, PyTorch naive timed at the first batch size only
 * (its work per tree does not depend on the batch; "vs naive" then uses
 * that figure); default: all 2077 trees, everything at every batch size.
 * PyTorch at 2 threads runs twice, with OMP_WAIT_POLICY=PASSIVE and with
 * the default policy, and keeps its better figure per system and batch.
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
    "                      [--no-torch]\n";

/* Trees [0, n) as "n w l r ..." lines (post-order, local indices). */
static bool write_trees(const ex_data *d, int32_t n, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return false;
  const sh_treebank *tb = &d->tb;
  fprintf(f, "trees %d\n", (int)n);
  for (int32_t t = 0; t < n; t++) {
    int32_t first = tb->tree_first[t], size = tb->tree_size[t];
    fprintf(f, "%d", (int)size);
    for (int32_t v = first; v < first + size; v++) {
      if (tb->n_children[v] == 0)
        fprintf(f, " %d -1 -1", (int)ex_data_row(d, tb->word[v]));
      else
        fprintf(f, " -1 %d %d", (int)(sh_tb_child(tb, v, 0) - first),
                (int)(sh_tb_child(tb, v, 1) - first));
    }
    fputc('\n', f);
  }
  return fclose(f) == 0;
}

/* Synthetic data: `count` random binary trees of `leaves` leaves each
 * (2*leaves - 1 nodes), words from a 1000-word vocabulary. */
static bool synthetic(sheaf_ctx *ctx, int32_t count, int leaves, ex_data *d) {
  ex_data_init(d, ctx, EX_DATA_BINARY);
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
  return ex_data_finish(d, 0) == SHEAF_OK;
}

int main(int argc, char **argv) {
  exb_opts o;
  exb_env e;
  if (!exb_start(argc, argv, "bench_treelstm", "--trees", usage, EX_DATA_BINARY, 256,
                 "trees.txt", write_trees, &o, &e))
    return 1;
  const ex_data *d = &e.d;
  int32_t S = e.n;
  int64_t nodes = ex_data_size_range(d, 0, S);
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
  printf("sheaf %s, isa %s; trees/s = trees / wall time of whole passes (build + schedule + "
         "kernels + reading outputs), best of %d window(s) of >= %.2f s\n",
         sheaf_version(), sheaf_isa_name(sheaf_cpu_isa()), e.rounds, e.min_s);
  exb_note_torch(&o, &e);

  const exb_peer peer = {"bench/treelstm_torch.py", "--trees", "--naive-batches", "tree",
                         {"pytorch-naive", "pytorch-level"}};
  cell cells[MAXL][MAXL][MAXL]; /* [hidden][threads][batch] */
  memset(cells, 0, sizeof cells);
  double ceiling[MAXL][MAXL][2];
  memset(ceiling, 0, sizeof ceiling);
  double worst_check = 0;

  for (int hi = 0; hi < o.nh; hi++) {
    int H = o.hidden[hi];
    ex_net net;
    ex_outputs ref;
    const char *wpath;
    if (!exb_net_open(&e, EX_MODEL_TREELSTM, H, EMBED, CHECK_TREES, &net, &ref, &wpath)) return 1;
    double flops = 0;
    for (int32_t t = 0; t < S; t++) flops += ex_net_flops(&net, t);

    for (int ti = 0; ti < o.nt; ti++) {
      int T = o.threads[ti];
      ceiling[hi][ti][0] = exb_gemm_gflops(e.ctx, T, 64, 5 * H, 2 * H, o.quick ? 0.05 : 0.2);
      ceiling[hi][ti][1] = exb_gemm_gflops(e.ctx, T, 256, 5 * H, 2 * H, o.quick ? 0.05 : 0.2);
      printf("\nhidden %d, %d thread%s: GEMM ceiling (sh_gemm, N=%d, K=%d, packed B): "
             "M=64 %.1f GFLOP/s, M=256 %.1f GFLOP/s\n",
             H, T, T > 1 ? "s" : "", 5 * H, 2 * H, ceiling[hi][ti][0], ceiling[hi][ti][1]);
      exb_json_ceiling("treelstm", H, T, 64, 5 * H, 2 * H, ceiling[hi][ti][0]);
      exb_json_ceiling("treelstm", H, T, 256, 5 * H, 2 * H, ceiling[hi][ti][1]);
      if (e.torch) {
        worst_check = fmax(worst_check,
                           exb_peers(&o, &e, &peer, wpath, T, ti == 0 ? &ref : NULL, cells[hi][ti]));
      }
      printf("  %5s | %9s %9s %9s %9s | %9s %9s | %8s %8s | %7s %7s\n", "batch", "sheaf", "none",
             "depth", "agenda", "pt-naive", "pt-level", "vs level", "vs naive", "GFLOP/s",
             "of ceil");
      for (int bi = 0; bi < o.nb; bi++) {
        cell *c = &cells[hi][ti][bi];
        char f[4][16];
        if (!exb_row(&e, &net, &peer, T, o.batch[bi], c, &cells[hi][ti][0], f)) return 1;
        c->useful_gflops = c->sheaf[0] * flops / S * 1e-9;
        printf("  %5d | %9.1f %9.1f %9.1f %9.1f | %9s %9s | %8s %8s | %7.1f %6.1f%%\n",
               o.batch[bi], c->sheaf[0], c->sheaf[1], c->sheaf[2], c->sheaf[3], f[0], f[1], f[2],
               f[3], c->useful_gflops, 100 * c->useful_gflops / ceiling[hi][ti][0]);
        fflush(stdout);
      }
    }
    ex_outputs_free(&ref);
    ex_net_free(&net);
  }

  /* runtime overhead: hidden 8, kernels cost (almost) nothing */
  if (!exb_overhead(&e, EX_MODEL_TREELSTM, "tree")) return 1;

  /* DyNet's setting: 49-node synthetic trees, hidden 256, 1 thread */
  printf("\nDyNet's setting (issue 4): 49-node synthetic trees, hidden 256, embed %d, 1 thread\n",
         EMBED);
  {
    ex_data syn;
    ex_net net;
    if (!synthetic(e.ctx, 256, 25, &syn) ||
        ex_net_create(e.ctx, EX_MODEL_TREELSTM, &syn, 256, EMBED, &net) != SHEAF_OK) {
      fprintf(stderr, "bench_treelstm: synthetic trees: %s\n", sheaf_ctx_last_error(e.ctx));
      return 1;
    }
    static const int bs[2] = {1, 64};
    static const double dynet[2] = {770, 1200};
    for (int i = 0; i < 2; i++) {
      double r = exb_sheaf_rate(&net, SHEAF_POLICY_SHEAF, 1, bs[i], 256, e.min_s, e.rounds, NULL, NULL);
      printf("  batch %2d: sheaf %.1f trees/s; DyNet agenda autobatching ~%.0f trees/s "
             "(measured on this machine, issue 4): %.2fx\n",
             bs[i], r, dynet[i], r / dynet[i]);
      exb_json_rec("\"system\": \"sheaf\", \"policy\": \"sheaf\", \"model\": \"treelstm-synthetic49\", "
                   "\"hidden\": 256, \"batch\": %d, \"threads\": 1, \"trees_per_s\": %.2f",
                   bs[i], r);
      exb_json_rec("\"system\": \"dynet-reference\", \"policy\": \"agenda\", "
                   "\"model\": \"treelstm-synthetic49\", \"hidden\": 256, \"batch\": %d, "
                   "\"threads\": 1, \"trees_per_s\": %.0f",
                   bs[i], dynet[i]);
    }
    ex_net_free(&net);
    ex_data_free(&syn);
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
      printf("\n");
    }
    if (b1 >= 0) {
      cell *c = &cells[h256][t1][b1];
      printf("  batch 1:  sheaf %.1f trees/s", c->sheaf[0]);
      if (c->peer[1] > 0) printf(", %.2fx pytorch-level", c->sheaf[0] / c->peer[1]);
      printf("\n");
    }
    if (b64 >= 0 && t2 >= 0)
      printf("  batch 64, 2 threads / 1 thread: %.2fx\n",
             cells[h256][t2][b64].sheaf[0] / cells[h256][t1][b64].sheaf[0]);
  }
  if (e.torch && worst_check > 1e-4) printf("\nWARNING: Sheaf and PyTorch outputs differ\n");
  exb_finish(&e);
  return 0;
}
