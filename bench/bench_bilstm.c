/*
 * bench_bilstm.c — the BiLSTM tagger (examples/bilstm.h) on the bundled EWT
 * sentences (real, variable lengths): Sheaf with every batching policy
 * against PyTorch (bench/bilstm_torch.py: nn.LSTM bidirectional over packed
 * sequences, its best configuration, and a per-sentence loop), same
 * sentences, same weights, one run; plus the GEMM ceiling (sh_gemm on the
 * cell's shape M x 4H x (E+H)) and the fraction of it Sheaf reaches in
 * useful FLOPs, and the runtime's overhead per op at hidden 8.
 *
 *   bench_bilstm [--quick] [--json FILE] [--hidden 256,512] [--batch 1,10,64]
 *                [--threads 1,2] [--sents N] [--data FILE] [--python PY] [--no-torch]
 *
 * Throughput = sentences / wall time of whole passes over the same N
 * sentences (batches of consecutive sentences; build, schedule, kernels and
 * reading the outputs all timed), best of several windows. --quick: 128
 * sentences, short windows, the PyTorch loop timed at the first batch size
 * only (its work per sentence does not depend on the batch; "vs loop" then
 * uses that figure); default: all 2077, everything at every batch size. PyTorch at 2 threads runs
 * twice, with OMP_WAIT_POLICY=PASSIVE and with the default policy, and
 * keeps its better figure per system and batch.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

#define EWT_TEST "data/ud_english_ewt/en_ewt-ud-test.conllu"
#define MAXL 8
#define EMBED 256
#define CHECK_SENTS 64

static const sheaf_policy policies[4] = {SHEAF_POLICY_SHEAF, SHEAF_POLICY_NONE,
                                         SHEAF_POLICY_DEPTH, SHEAF_POLICY_AGENDA};

typedef struct cell {
  double sheaf[4];
  double loop, packed; /* PyTorch; 0 = not measured */
  double useful_gflops;
} cell;

static void usage(void) {
  fprintf(stderr,
          "usage: bench_bilstm [--quick] [--json FILE] [--hidden LIST] [--batch LIST]\n"
          "                    [--threads LIST] [--sents N] [--data FILE] [--python PY]\n"
          "                    [--no-torch]\n");
  exit(2);
}

/* v with `decimals` decimals, or "-" when not measured (v <= 0). */
static void fmt_num(char out[16], double v, int decimals) {
  if (v > 0) snprintf(out, 16, "%.*f", decimals, v);
  else snprintf(out, 16, "-");
}

static bool write_sents(const ex_data *d, int32_t n, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return false;
  fprintf(f, "sents %d\n", (int)n);
  for (int32_t s = 0; s < n; s++) {
    fprintf(f, "%d", (int)(d->sent_off[s + 1] - d->sent_off[s]));
    for (int32_t i = d->sent_off[s]; i < d->sent_off[s + 1]; i++)
      fprintf(f, " %d", (int)ex_data_row(d, d->sent_words[i]));
    fputc('\n', f);
  }
  return fclose(f) == 0;
}

int main(int argc, char **argv) {
  bool quick = false, no_torch = false;
  const char *json = NULL, *data_path = EWT_TEST, *python = "python3";
  int hidden[MAXL] = {256, 512}, nh = 2, batch[MAXL] = {1, 10, 64}, nb = 3,
      threads[MAXL] = {1, 2}, nt = 2;
  long sents_arg = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    bool has = i + 1 < argc;
    if (!strcmp(a, "--quick")) quick = true;
    else if (!strcmp(a, "--no-torch")) no_torch = true;
    else if (!strcmp(a, "--json") && has) json = argv[++i];
    else if (!strcmp(a, "--data") && has) data_path = argv[++i];
    else if (!strcmp(a, "--python") && has) python = argv[++i];
    else if (!strcmp(a, "--sents") && has) sents_arg = strtol(argv[++i], NULL, 10);
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
    fprintf(stderr, "bench_bilstm: %s\n", err);
    return 1;
  }
  ex_data d;
  if (ex_data_load(ctx, data_path, EX_DATA_SENTS, &d) != SHEAF_OK) {
    fprintf(stderr, "bench_bilstm: %s\n", sheaf_ctx_last_error(ctx));
    return 1;
  }
  int32_t S = ex_data_count(&d);
  if (quick && S > 128) S = 128;
  if (sents_arg > 0 && sents_arg < S) S = (int32_t)sents_arg;
  double min_s = quick ? 0.2 : 1.0;
  int rounds = quick ? 1 : 3;
  int64_t words = ex_data_size_range(&d, 0, S);
  int32_t max_len = 0;
  for (int32_t s = 0; s < S; s++) max_len = ex_data_size(&d, s) > max_len ? ex_data_size(&d, s) : max_len;
  const char *sents_file = exb_tmp_path("sents.txt");
  if (!write_sents(&d, S, sents_file)) {
    fprintf(stderr, "bench_bilstm: cannot write %s\n", sents_file);
    return 1;
  }
  bool torch = !no_torch && exb_have_torch(python);
  if (!exb_json_open(json)) {
    fprintf(stderr, "bench_bilstm: cannot write %s\n", json);
    return 1;
  }
  printf("BiLSTM tagger, %s: %d sentences, %lld words (mean %.1f, max %d), embed %d, 17 tags\n",
         data_path, (int)S, (long long)words, (double)words / S, (int)max_len, EMBED);
  printf("sheaf %s, isa %s; sentences/s = sentences / wall time of whole passes (build + "
         "schedule + kernels + reading outputs), best of %d window(s) of >= %.2f s\n",
         sheaf_version(), sheaf_isa_name(sheaf_cpu_isa()), rounds, min_s);
  if (!torch)
    printf("note: PyTorch peers skipped: %s\n",
           no_torch ? "--no-torch"
                    : "'import torch' failed (scripts/install_torch.sh installs it)");

  cell cells[MAXL][MAXL][MAXL];
  memset(cells, 0, sizeof cells);
  double worst_check = 0;
  for (int hi = 0; hi < nh; hi++) {
    int H = hidden[hi];
    ex_net net;
    if (ex_net_create(ctx, EX_MODEL_BILSTM, &d, H, EMBED, &net) != SHEAF_OK ||
        ex_net_seed(&net, 1) != SHEAF_OK) {
      fprintf(stderr, "bench_bilstm: %s\n", sheaf_ctx_last_error(ctx));
      return 1;
    }
    double flops = 0;
    for (int32_t s = 0; s < S; s++) flops += ex_net_flops(&net, s);
    char wname[64];
    snprintf(wname, sizeof wname, "bilstm-h%d.safetensors", H);
    const char *wpath = exb_tmp_path(wname);
    int32_t C = S < CHECK_SENTS ? S : CHECK_SENTS;
    ex_outputs ref;
    sheaf_graph *g = NULL;
    if (sheaf_model_save(net.model, wpath) != SHEAF_OK ||
        ex_outputs_init(&ref, &net, 0, C) != SHEAF_OK ||
        sheaf_graph_create(net.model, NULL, &g) != SHEAF_OK ||
        ex_run(&net, g, 0, C, 64, &ref) != SHEAF_OK) {
      fprintf(stderr, "bench_bilstm: %s\n", sheaf_ctx_last_error(ctx));
      return 1;
    }
    sheaf_graph_free(g);

    for (int ti = 0; ti < nt; ti++) {
      int T = threads[ti];
      double ceil64 = exb_gemm_gflops(ctx, T, 64, 4 * H, EMBED + H, quick ? 0.05 : 0.2);
      printf("\nhidden %d, %d thread%s: GEMM ceiling (sh_gemm, M=64, N=%d, K=%d, packed B): "
             "%.1f GFLOP/s\n",
             H, T, T > 1 ? "s" : "", 4 * H, EMBED + H, ceil64);
      exb_json_rec("\"system\": \"gemm-ceiling\", \"model\": \"bilstm\", \"hidden\": %d, "
                   "\"threads\": %d, \"m\": 64, \"n\": %d, \"k\": %d, \"gflops\": %.2f",
                   H, T, 4 * H, EMBED + H, ceil64);
      if (torch) {
        char cmd[2048], blist[128] = "";
        for (int bi = 0; bi < nb; bi++)
          snprintf(blist + strlen(blist), sizeof blist - strlen(blist), "%s%d", bi ? "," : "",
                   batch[bi]);
        char first_batch[16]; /* quick: the loop at the first batch size only */
        snprintf(first_batch, sizeof first_batch, "%d", batch[0]);
        const char *check = exb_tmp_path("check.f32");
        remove(check);
        /* with several threads, OMP_WAIT_POLICY=PASSIVE (needed by OpenBLAS builds)
         * and the default (often better for MKL builds) both run: the best counts */
        for (int wp = 0; wp < (T > 1 ? 2 : 1); wp++) {
          snprintf(cmd, sizeof cmd,
                   "OMP_NUM_THREADS=%d MKL_NUM_THREADS=%d OPENBLAS_NUM_THREADS=%d %s "
                   "%s bench/bilstm_torch.py --weights %s --sents %s --threads %d "
                   "--batches %s --min-time %g --rounds %d%s%s --check-count %d --loop-batches %s",
                   T, T, T, T > 1 && wp == 0 ? "OMP_WAIT_POLICY=PASSIVE" : "", python, wpath,
                   sents_file, T, blist, min_s, rounds, ti == 0 ? " --check " : "",
                   ti == 0 ? check : "", C, quick ? first_batch : blist);
          exb_peer_rec recs[64];
          int n = 0;
          int st = exb_run_peer(cmd, "sents_per_s", recs, 64, &n);
          if (st != 0) printf("  note: the PyTorch peer exited with status %d\n", st);
          for (int r = 0; r < n; r++)
            for (int bi = 0; bi < nb; bi++) {
              cell *c = &cells[hi][ti][bi];
              if (recs[r].batch != batch[bi]) continue;
              if (!strcmp(recs[r].system, "pytorch-loop")) c->loop = fmax(c->loop, recs[r].rate);
              if (!strcmp(recs[r].system, "pytorch-packed")) c->packed = fmax(c->packed, recs[r].rate);
            }
        }
        if (ti == 0) {
          size_t nv = 0;
          float *v = exb_read_f32(check, &nv);
          size_t want = (size_t)(ref.rows * ref.dim);
          if (v && nv == 2 * want) {
            double dl = 0, dp = 0;
            for (size_t k = 0; k < want; k++) {
              double a = fabs((double)ref.values[k] - v[k]), b = fabs((double)ref.values[k] - v[want + k]);
              dl = a > dl ? a : dl;
              dp = b > dp ? b : dp;
            }
            printf("  check (first %d sentences, %lld words, same weights): max |sheaf - "
                   "pytorch-loop| = %.2g, max |sheaf - pytorch-packed| = %.2g%s\n",
                   (int)C, (long long)ref.rows, dl, dp,
                   dl > 1e-4 || dp > 1e-4 ? "  ** MISMATCH **" : "");
            worst_check = fmax(worst_check, fmax(dl, dp));
          } else {
            printf("  check: no PyTorch outputs to compare\n");
          }
          free(v);
        }
      }
      printf("  %5s | %9s %9s %9s %9s | %9s %9s | %9s %8s | %7s %7s\n", "batch", "sheaf", "none",
             "depth", "agenda", "pt-loop", "pt-packed", "vs packed", "vs loop", "GFLOP/s",
             "of ceil");
      for (int bi = 0; bi < nb; bi++) {
        cell *c = &cells[hi][ti][bi];
        for (int p = 0; p < 4; p++) {
          c->sheaf[p] = exb_sheaf_rate(&net, policies[p], T, batch[bi], S, min_s, rounds, NULL, NULL);
          if (c->sheaf[p] <= 0) return 1;
          exb_json_rec("\"system\": \"sheaf\", \"policy\": \"%s\", \"model\": \"bilstm\", "
                       "\"hidden\": %d, \"batch\": %d, \"threads\": %d, \"sents_per_s\": %.2f",
                       sheaf_policy_name(policies[p]), H, batch[bi], T, c->sheaf[p]);
        }
        if (c->loop > 0)
          exb_json_rec("\"system\": \"pytorch-loop\", \"policy\": null, \"model\": \"bilstm\", "
                       "\"hidden\": %d, \"batch\": %d, \"threads\": %d, \"sents_per_s\": %.2f",
                       H, batch[bi], T, c->loop);
        if (c->packed > 0)
          exb_json_rec("\"system\": \"pytorch-packed\", \"policy\": null, \"model\": \"bilstm\", "
                       "\"hidden\": %d, \"batch\": %d, \"threads\": %d, \"sents_per_s\": %.2f",
                       H, batch[bi], T, c->packed);
        c->useful_gflops = c->sheaf[0] * flops / S * 1e-9;
        double loop = c->loop > 0 ? c->loop : cells[hi][ti][0].loop;
        char f[4][16];
        fmt_num(f[0], c->loop, 1);
        if (c->loop <= 0 && loop > 0) snprintf(f[0], 16, "(above)");
        fmt_num(f[1], c->packed, 1);
        fmt_num(f[2], c->packed > 0 ? c->sheaf[0] / c->packed : 0, 2);
        fmt_num(f[3], loop > 0 ? c->sheaf[0] / loop : 0, 2);
        printf("  %5d | %9.1f %9.1f %9.1f %9.1f | %9s %9s | %9s %8s | %7.1f %6.1f%%\n",
               batch[bi], c->sheaf[0], c->sheaf[1], c->sheaf[2], c->sheaf[3], f[0], f[1], f[2],
               f[3], c->useful_gflops, 100 * c->useful_gflops / ceil64);
        fflush(stdout);
      }
    }
    ex_outputs_free(&ref);
    ex_net_free(&net);
  }

  printf("\nruntime overhead at hidden 8, embed 8, batch 64, 1 thread, %d sentences "
         "(ns per graph op: one builder call, views included)\n",
         (int)S);
  printf("  %-8s %10s %12s %12s %12s %12s\n", "policy", "sents/s", "ops/sent", "build ns/op",
         "sched ns/op", "wall ns/op");
  ex_net tiny;
  if (ex_net_create(ctx, EX_MODEL_BILSTM, &d, 8, 8, &tiny) != SHEAF_OK) return 1;
  for (int p = 0; p < 4; p++) {
    sheaf_graph_stats s;
    long passes = 0;
    double r = exb_sheaf_rate(&tiny, policies[p], 1, 64, S, min_s, rounds, &s, &passes);
    if (r <= 0) return 1;
    double ops = (double)s.nodes, per = ops / ((double)passes * S);
    printf("  %-8s %10.1f %12.1f %12.1f %12.1f %12.1f\n", sheaf_policy_name(policies[p]), r, per,
           (double)s.ns_build / ops, (double)s.ns_schedule / ops, 1e9 / r / per);
    exb_json_rec("\"system\": \"sheaf-overhead\", \"policy\": \"%s\", \"model\": \"bilstm\", "
                 "\"hidden\": 8, \"batch\": 64, \"threads\": 1, \"sents_per_s\": %.2f, "
                 "\"build_ns_per_op\": %.2f, \"schedule_ns_per_op\": %.2f",
                 sheaf_policy_name(policies[p]), r, (double)s.ns_build / ops,
                 (double)s.ns_schedule / ops);
  }
  ex_net_free(&tiny);
  if (torch && worst_check > 1e-4) printf("\nWARNING: Sheaf and PyTorch outputs differ\n");
  exb_json_close();
  exb_tmp_cleanup();
  ex_data_free(&d);
  sheaf_ctx_free(ctx);
  return 0;
}
