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

#define EWT_TEST "data/ud_english_ewt/en_ewt-ud-test.conllu"
#define MAXL 8
#define EMBED 256
#define CHECK_TREES 64

static const sheaf_policy policies[4] = {SHEAF_POLICY_SHEAF, SHEAF_POLICY_NONE,
                                         SHEAF_POLICY_DEPTH, SHEAF_POLICY_AGENDA};

typedef struct cell {
  double sheaf[4];     /* trees/s per policy */
  double naive, level; /* PyTorch; 0 = not measured */
  double useful_gflops;
} cell;

static void usage(void) {
  fprintf(stderr,
          "usage: bench_treelstm [--quick] [--json FILE] [--hidden LIST] [--batch LIST]\n"
          "                      [--threads LIST] [--trees N] [--data FILE] [--python PY]\n"
          "                      [--no-torch]\n");
  exit(2);
}

/* v with `decimals` decimals, or "-" when not measured (v <= 0). */
static void fmt_num(char out[16], double v, int decimals) {
  if (v > 0) snprintf(out, 16, "%.*f", decimals, v);
  else snprintf(out, 16, "-");
}

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
  bool quick = false, no_torch = false;
  const char *json = NULL, *data_path = EWT_TEST, *python = "python3";
  int hidden[MAXL] = {256, 512}, nh = 2, batch[MAXL] = {1, 10, 64}, nb = 3,
      threads[MAXL] = {1, 2}, nt = 2;
  long trees_arg = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    bool has = i + 1 < argc;
    if (!strcmp(a, "--quick")) quick = true;
    else if (!strcmp(a, "--no-torch")) no_torch = true;
    else if (!strcmp(a, "--json") && has) json = argv[++i];
    else if (!strcmp(a, "--data") && has) data_path = argv[++i];
    else if (!strcmp(a, "--python") && has) python = argv[++i];
    else if (!strcmp(a, "--trees") && has) trees_arg = strtol(argv[++i], NULL, 10);
    else if (!strcmp(a, "--hidden") && has) {
      if (!exb_parse_list(argv[++i], hidden, MAXL, &nh)) usage();
    } else if (!strcmp(a, "--batch") && has) {
      if (!exb_parse_list(argv[++i], batch, MAXL, &nb)) usage();
    } else if (!strcmp(a, "--threads") && has) {
      if (!exb_parse_list(argv[++i], threads, MAXL, &nt)) usage();
    } else usage();
  }
  int max_threads = 1;
  for (int i = 0; i < nt; i++) max_threads = threads[i] > max_threads ? threads[i] : max_threads;
  sheaf_ctx_options o = {.threads = max_threads};
  sheaf_ctx *ctx;
  char err[512];
  if (sheaf_ctx_create(&o, &ctx, err, sizeof err) != SHEAF_OK) {
    fprintf(stderr, "bench_treelstm: %s\n", err);
    return 1;
  }
  ex_data d;
  if (ex_data_load(ctx, data_path, EX_DATA_BINARY, &d) != SHEAF_OK) {
    fprintf(stderr, "bench_treelstm: %s\n", sheaf_ctx_last_error(ctx));
    return 1;
  }
  int32_t S = ex_data_count(&d);
  if (quick && S > 256) S = 256;
  if (trees_arg > 0 && trees_arg < S) S = (int32_t)trees_arg;
  double min_s = quick ? 0.2 : 1.0;
  int rounds = quick ? 1 : 3;
  int64_t nodes = ex_data_size_range(&d, 0, S);
  int32_t *scratch = malloc((size_t)d.tb.n_nodes * sizeof(int32_t)),
          *heights = malloc((size_t)d.tb.n_trees * sizeof(int32_t));
  sh_tb_tree_heights(&d.tb, scratch, heights);
  double mean_h = 0;
  for (int32_t t = 0; t < S; t++) mean_h += heights[t];
  mean_h /= S;
  free(scratch);
  free(heights);
  const char *trees_file = exb_tmp_path("trees.txt");
  if (!write_trees(&d, S, trees_file)) {
    fprintf(stderr, "bench_treelstm: cannot write %s\n", trees_file);
    return 1;
  }
  bool torch = !no_torch && exb_have_torch(python);
  if (!exb_json_open(json)) {
    fprintf(stderr, "bench_treelstm: cannot write %s\n", json);
    return 1;
  }

  printf("TreeLSTM (binary, Tai et al. 2015), %s binarized: %d trees, %lld nodes "
         "(mean %.1f nodes, mean height %.2f), embed %d\n",
         data_path, (int)S, (long long)nodes, (double)nodes / S, mean_h, EMBED);
  printf("sheaf %s, isa %s; trees/s = trees / wall time of whole passes (build + schedule + "
         "kernels + reading outputs), best of %d window(s) of >= %.2f s\n",
         sheaf_version(), sheaf_isa_name(sheaf_cpu_isa()), rounds, min_s);
  if (!torch)
    printf("note: PyTorch peers skipped: %s\n",
           no_torch ? "--no-torch"
                    : "'import torch' failed (scripts/install_torch.sh installs it)");

  cell cells[MAXL][MAXL][MAXL]; /* [hidden][threads][batch] */
  memset(cells, 0, sizeof cells);
  double ceiling[MAXL][MAXL][2];
  memset(ceiling, 0, sizeof ceiling);
  double worst_check = 0;

  for (int hi = 0; hi < nh; hi++) {
    int H = hidden[hi];
    ex_net net;
    if (ex_net_create(ctx, EX_MODEL_TREELSTM, &d, H, EMBED, &net) != SHEAF_OK ||
        ex_net_seed(&net, 1) != SHEAF_OK) {
      fprintf(stderr, "bench_treelstm: %s\n", sheaf_ctx_last_error(ctx));
      return 1;
    }
    double flops = 0;
    for (int32_t t = 0; t < S; t++) flops += ex_net_flops(&net, t);
    char wname[64];
    snprintf(wname, sizeof wname, "treelstm-h%d.safetensors", H);
    const char *wpath = exb_tmp_path(wname);
    if (sheaf_model_save(net.model, wpath) != SHEAF_OK) {
      fprintf(stderr, "bench_treelstm: %s\n", sheaf_ctx_last_error(ctx));
      return 1;
    }
    /* Sheaf's outputs for the check against PyTorch */
    int32_t C = S < CHECK_TREES ? S : CHECK_TREES;
    ex_outputs ref;
    sheaf_graph *g = NULL;
    if (ex_outputs_init(&ref, &net, 0, C) != SHEAF_OK ||
        sheaf_graph_create(net.model, NULL, &g) != SHEAF_OK ||
        ex_run(&net, g, 0, C, 64, &ref) != SHEAF_OK) {
      fprintf(stderr, "bench_treelstm: %s\n", sheaf_ctx_last_error(ctx));
      return 1;
    }
    sheaf_graph_free(g);

    for (int ti = 0; ti < nt; ti++) {
      int T = threads[ti];
      ceiling[hi][ti][0] = exb_gemm_gflops(ctx, T, 64, 5 * H, 2 * H, quick ? 0.05 : 0.2);
      ceiling[hi][ti][1] = exb_gemm_gflops(ctx, T, 256, 5 * H, 2 * H, quick ? 0.05 : 0.2);
      printf("\nhidden %d, %d thread%s: GEMM ceiling (sh_gemm, N=%d, K=%d, packed B): "
             "M=64 %.1f GFLOP/s, M=256 %.1f GFLOP/s\n",
             H, T, T > 1 ? "s" : "", 5 * H, 2 * H, ceiling[hi][ti][0], ceiling[hi][ti][1]);
      exb_json_rec("\"system\": \"gemm-ceiling\", \"model\": \"treelstm\", \"hidden\": %d, "
                   "\"threads\": %d, \"m\": 64, \"n\": %d, \"k\": %d, \"gflops\": %.2f",
                   H, T, 5 * H, 2 * H, ceiling[hi][ti][0]);
      exb_json_rec("\"system\": \"gemm-ceiling\", \"model\": \"treelstm\", \"hidden\": %d, "
                   "\"threads\": %d, \"m\": 256, \"n\": %d, \"k\": %d, \"gflops\": %.2f",
                   H, T, 5 * H, 2 * H, ceiling[hi][ti][1]);
      if (torch) {
        char cmd[2048], blist[128] = "";
        for (int bi = 0; bi < nb; bi++)
          snprintf(blist + strlen(blist), sizeof blist - strlen(blist), "%s%d", bi ? "," : "",
                   batch[bi]);
        char first_batch[16];
        snprintf(first_batch, sizeof first_batch, "%d", batch[0]);
        const char *check = exb_tmp_path("check.f32");
        remove(check);
        /* with several threads, OMP_WAIT_POLICY=PASSIVE (needed by OpenBLAS builds)
         * and the default (often better for MKL builds) both run: the best counts */
        for (int wp = 0; wp < (T > 1 ? 2 : 1); wp++) {
          snprintf(cmd, sizeof cmd,
                   "OMP_NUM_THREADS=%d MKL_NUM_THREADS=%d OPENBLAS_NUM_THREADS=%d %s "
                   "%s bench/treelstm_torch.py --weights %s --trees %s --threads %d "
                   "--batches %s --min-time %g --rounds %d%s%s --check-count %d --naive-batches %s",
                   T, T, T, T > 1 && wp == 0 ? "OMP_WAIT_POLICY=PASSIVE" : "", python, wpath,
                   trees_file, T, blist, min_s, rounds, ti == 0 ? " --check " : "",
                   ti == 0 ? check : "", C,
                   quick ? first_batch : blist); /* quick: naive at the first batch size */
          exb_peer_rec recs[64];
          int n = 0;
          int st = exb_run_peer(cmd, "trees_per_s", recs, 64, &n);
          if (st != 0) printf("  note: the PyTorch peer exited with status %d\n", st);
          for (int r = 0; r < n; r++)
            for (int bi = 0; bi < nb; bi++) {
              cell *c = &cells[hi][ti][bi];
              if (recs[r].batch != batch[bi]) continue;
              if (!strcmp(recs[r].system, "pytorch-naive")) c->naive = fmax(c->naive, recs[r].rate);
              if (!strcmp(recs[r].system, "pytorch-level")) c->level = fmax(c->level, recs[r].rate);
            }
        }
        if (ti == 0) {
          size_t nv = 0;
          float *v = exb_read_f32(check, &nv);
          size_t want = (size_t)C * EX_TREELSTM_CLASSES;
          if (v && nv == 2 * want) {
            double dn = 0, dl = 0;
            for (size_t k = 0; k < want; k++) {
              double a = fabs((double)ref.values[k] - v[k]), b = fabs((double)ref.values[k] - v[want + k]);
              dn = a > dn ? a : dn;
              dl = b > dl ? b : dl;
            }
            printf("  check (first %d trees, same weights): max |sheaf - pytorch-naive| = %.2g, "
                   "max |sheaf - pytorch-level| = %.2g%s\n",
                   (int)C, dn, dl, dn > 1e-4 || dl > 1e-4 ? "  ** MISMATCH **" : "");
            if (dn > worst_check) worst_check = dn;
            if (dl > worst_check) worst_check = dl;
          } else {
            printf("  check: no PyTorch outputs to compare\n");
          }
          free(v);
        }
      }
      printf("  %5s | %9s %9s %9s %9s | %9s %9s | %8s %8s | %7s %7s\n", "batch", "sheaf", "none",
             "depth", "agenda", "pt-naive", "pt-level", "vs level", "vs naive", "GFLOP/s",
             "of ceil");
      for (int bi = 0; bi < nb; bi++) {
        cell *c = &cells[hi][ti][bi];
        for (int p = 0; p < 4; p++) {
          c->sheaf[p] = exb_sheaf_rate(&net, policies[p], T, batch[bi], S, min_s, rounds, NULL, NULL);
          if (c->sheaf[p] <= 0) return 1;
          exb_json_rec("\"system\": \"sheaf\", \"policy\": \"%s\", \"model\": \"treelstm\", "
                       "\"hidden\": %d, \"batch\": %d, \"threads\": %d, \"trees_per_s\": %.2f",
                       sheaf_policy_name(policies[p]), H, batch[bi], T, c->sheaf[p]);
        }
        if (c->naive > 0)
          exb_json_rec("\"system\": \"pytorch-naive\", \"policy\": null, \"model\": \"treelstm\", "
                       "\"hidden\": %d, \"batch\": %d, \"threads\": %d, \"trees_per_s\": %.2f",
                       H, batch[bi], T, c->naive);
        if (c->level > 0)
          exb_json_rec("\"system\": \"pytorch-level\", \"policy\": null, \"model\": \"treelstm\", "
                       "\"hidden\": %d, \"batch\": %d, \"threads\": %d, \"trees_per_s\": %.2f",
                       H, batch[bi], T, c->level);
        c->useful_gflops = c->sheaf[0] * flops / S * 1e-9;
        double naive = c->naive > 0 ? c->naive : cells[hi][ti][0].naive;
        char f[4][16];
        fmt_num(f[0], c->naive, 1);
        if (c->naive <= 0 && naive > 0) snprintf(f[0], 16, "(above)");
        fmt_num(f[1], c->level, 1);
        fmt_num(f[2], c->level > 0 ? c->sheaf[0] / c->level : 0, 2);
        fmt_num(f[3], naive > 0 ? c->sheaf[0] / naive : 0, 2);
        printf("  %5d | %9.1f %9.1f %9.1f %9.1f | %9s %9s | %8s %8s | %7.1f %6.1f%%\n",
               batch[bi], c->sheaf[0], c->sheaf[1], c->sheaf[2], c->sheaf[3], f[0], f[1], f[2],
               f[3], c->useful_gflops, 100 * c->useful_gflops / ceiling[hi][ti][0]);
        fflush(stdout);
      }
    }
    ex_outputs_free(&ref);
    ex_net_free(&net);
  }

  /* runtime overhead: hidden 8, kernels cost (almost) nothing */
  printf("\nruntime overhead at hidden 8, embed 8, batch 64, 1 thread, %d trees "
         "(ns per graph op: one builder call, views included)\n",
         (int)S);
  printf("  %-8s %10s %12s %12s %12s %12s\n", "policy", "trees/s", "ops/tree", "build ns/op",
         "sched ns/op", "wall ns/op");
  {
    ex_net tiny;
    if (ex_net_create(ctx, EX_MODEL_TREELSTM, &d, 8, 8, &tiny) != SHEAF_OK) return 1;
    for (int p = 0; p < 4; p++) {
      sheaf_graph_stats s;
      long passes = 0;
      double r = exb_sheaf_rate(&tiny, policies[p], 1, 64, S, min_s, rounds, &s, &passes);
      if (r <= 0) return 1;
      double ops = (double)s.nodes, per_tree = ops / ((double)passes * S);
      printf("  %-8s %10.1f %12.1f %12.1f %12.1f %12.1f\n", sheaf_policy_name(policies[p]), r,
             per_tree, (double)s.ns_build / ops, (double)s.ns_schedule / ops, 1e9 / r / per_tree);
      exb_json_rec("\"system\": \"sheaf-overhead\", \"policy\": \"%s\", \"model\": \"treelstm\", "
                   "\"hidden\": 8, \"batch\": 64, \"threads\": 1, \"trees_per_s\": %.2f, "
                   "\"build_ns_per_op\": %.2f, \"schedule_ns_per_op\": %.2f",
                   sheaf_policy_name(policies[p]), r, (double)s.ns_build / ops,
                   (double)s.ns_schedule / ops);
    }
    ex_net_free(&tiny);
  }

  /* DyNet's setting: 49-node synthetic trees, hidden 256, 1 thread */
  printf("\nDyNet's setting (issue 4): 49-node synthetic trees, hidden 256, embed %d, 1 thread\n",
         EMBED);
  {
    ex_data syn;
    ex_net net;
    if (!synthetic(ctx, 256, 25, &syn) ||
        ex_net_create(ctx, EX_MODEL_TREELSTM, &syn, 256, EMBED, &net) != SHEAF_OK) {
      fprintf(stderr, "bench_treelstm: synthetic trees: %s\n", sheaf_ctx_last_error(ctx));
      return 1;
    }
    static const int bs[2] = {1, 64};
    static const double dynet[2] = {770, 1200};
    for (int i = 0; i < 2; i++) {
      double r = exb_sheaf_rate(&net, SHEAF_POLICY_SHEAF, 1, bs[i], 256, min_s, rounds, NULL, NULL);
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
  for (int i = 0; i < nh; i++) h256 = hidden[i] == 256 ? i : h256;
  for (int i = 0; i < nt; i++) {
    t1 = threads[i] == 1 ? i : t1;
    t2 = threads[i] == 2 ? i : t2;
  }
  for (int i = 0; i < nb; i++) {
    b1 = batch[i] == 1 ? i : b1;
    b64 = batch[i] == 64 ? i : b64;
  }
  if (h256 >= 0 && t1 >= 0) {
    printf("\nsummary, hidden 256, 1 thread:\n");
    if (b64 >= 0) {
      cell *c = &cells[h256][t1][b64];
      printf("  batch 64: sheaf %.1f trees/s = %.1f%% of the GEMM ceiling (M=64; %.1f%% of M=256)",
             c->sheaf[0], 100 * c->useful_gflops / ceiling[h256][t1][0],
             100 * c->useful_gflops / ceiling[h256][t1][1]);
      if (c->level > 0) printf(", %.2fx pytorch-level", c->sheaf[0] / c->level);
      printf("\n");
    }
    if (b1 >= 0) {
      cell *c = &cells[h256][t1][b1];
      printf("  batch 1:  sheaf %.1f trees/s", c->sheaf[0]);
      if (c->level > 0) printf(", %.2fx pytorch-level", c->sheaf[0] / c->level);
      printf("\n");
    }
    if (b64 >= 0 && t2 >= 0)
      printf("  batch 64, 2 threads / 1 thread: %.2fx\n",
             cells[h256][t2][b64].sheaf[0] / cells[h256][t1][b64].sheaf[0]);
  }
  if (torch && worst_check > 1e-4) printf("\nWARNING: Sheaf and PyTorch outputs differ\n");
  exb_json_close();
  exb_tmp_cleanup();
  ex_data_free(&d);
  sheaf_ctx_free(ctx);
  return 0;
}
