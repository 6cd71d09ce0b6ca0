/*
 * bench_bilstm.c — the BiLSTM tagger (src/models/bilstm.h) on the bundled EWT
 * sentences (real, variable lengths): Sheaf with every batching policy
 * against PyTorch (bench/bilstm_torch.py: nn.LSTM bidirectional over packed
 * sequences, its best configuration, and a per-sentence loop), same
 * sentences, same weights, one run; plus the GEMM ceiling (sh_gemm on the
 * cell's shape M x 4H x (E+H)) and the fraction of it Sheaf reaches in
 * useful FLOPs, and the runtime's overhead per op at hidden 8.
 *
 *   bench_bilstm [--quick] [--json FILE] [--hidden 256,512] [--batch 1,10,64]
 *                [--threads 1,2] [--sents N] [--data FILE] [--python PY] [--no-torch]
 *                [--no-dynet] [--dynet-dir DIR]
 *
 * DyNet (bench/bilstm_dynet.cc, built by scripts/install_dynet.sh) runs as
 * a subprocess on the same sentences and weights at 1 thread, once per
 * --dynet-autobatch 0, 1, 2 (each reported, the best one compared).
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

#define MAXL EXB_MAXL
#define EMBED 256
#define CHECK_SENTS 64

typedef exb_cell cell; /* peer[0]: pytorch-loop, peer[1]: pytorch-packed */

static const char usage[] =
    "usage: bench_bilstm [--quick] [--json FILE] [--hidden LIST] [--batch LIST]\n"
    "                    [--threads LIST] [--sents N] [--data FILE] [--python PY]\n"
    "                    [--no-torch] [--no-dynet] [--dynet-dir DIR]\n";

static bool write_sents(const sh_dataset *d, int32_t n, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return false;
  fprintf(f, "sents %d\n", (int)n);
  for (int32_t s = 0; s < n; s++) {
    fprintf(f, "%d", (int)(d->sent_off[s + 1] - d->sent_off[s]));
    for (int32_t i = d->sent_off[s]; i < d->sent_off[s + 1]; i++)
      fprintf(f, " %d", (int)sh_word_id(d->ids, d->sent_words[i]));
    fputc('\n', f);
  }
  return fclose(f) == 0;
}

int main(int argc, char **argv) {
  exb_opts o;
  exb_env e;
  if (!exb_start(argc, argv, "bench_bilstm", "--sents", usage, SH_DATASET_SENTS, 128,
                 "sents.txt", write_sents, &o, &e))
    return 1;
  const sh_dataset *d = &e.d;
  int32_t S = e.n;
  int64_t words = sh_dataset_size_range(d, 0, S);
  int32_t max_len = 0;
  for (int32_t s = 0; s < S; s++) max_len = sh_dataset_size(d, s) > max_len ? sh_dataset_size(d, s) : max_len;
  printf("BiLSTM tagger, %s: %d sentences, %lld words (mean %.1f, max %d), embed %d, 17 tags\n",
         o.data, (int)S, (long long)words, (double)words / S, (int)max_len, EMBED);
  printf("sheaf %s, isa %s; sentences/s = sentences / wall time of whole passes (build + "
         "schedule + kernels + reading outputs), best of %d window(s) of >= %.2f s\n",
         sheaf_version(), sheaf_isa_name(sheaf_cpu_isa()), e.rounds, e.min_s);
  exb_note_torch(&o, &e);
  const exb_peer peer = {"bench/bilstm_torch.py", "--sents", "--loop-batches", "sent",
                         {"pytorch-loop", "pytorch-packed"}, "bilstm_dynet"};
  exb_note_dynet(&o, &peer);
  cell cells[MAXL][MAXL][MAXL];
  memset(cells, 0, sizeof cells);
  double worst_check = 0;
  for (int hi = 0; hi < o.nh; hi++) {
    int H = o.hidden[hi];
    sh_net net;
    sh_net_outputs ref;
    const char *wpath;
    if (!exb_net_open(&e, SH_NET_BILSTM, H, EMBED, CHECK_SENTS, &net, &ref, &wpath)) return 1;
    double flops = 0;
    for (int32_t s = 0; s < S; s++) flops += sh_net_flops(&net, s);

    for (int ti = 0; ti < o.nt; ti++) {
      int T = o.threads[ti];
      double ceil64 = exb_gemm_gflops(e.ctx, T, 64, 4 * H, EMBED + H, o.quick ? 0.05 : 0.2);
      printf("\nhidden %d, %d thread%s: GEMM ceiling (sh_gemm, M=64, N=%d, K=%d, packed B): "
             "%.1f GFLOP/s\n",
             H, T, T > 1 ? "s" : "", 4 * H, EMBED + H, ceil64);
      exb_json_ceiling("bilstm", H, T, 64, 4 * H, EMBED + H, ceil64);
      double check = exb_table(&o, &e, &net, &peer, wpath, T, ti == 0 ? &ref : NULL,
                               cells[hi][ti], flops / S, ceil64);
      if (check < 0) return 1;
      worst_check = fmax(worst_check, check);
    }
    sh_net_outputs_free(&ref);
    sh_net_free(&net);
  }

  if (!exb_overhead(&e, SH_NET_BILSTM, "sent")) return 1;
  if (worst_check > 1e-4) printf("\nWARNING: Sheaf and a peer's (PyTorch or DyNet) outputs differ\n");
  exb_finish(&e);
  return 0;
}
