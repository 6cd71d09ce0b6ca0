/*
 * bench_util.h — what bench/bench_treelstm.c and bench/bench_bilstm.c share:
 * time-bounded throughput of a model on the runtime, the GEMM ceiling
 * (Sheaf's own sh_gemm on a model's shape), running a PyTorch peer script
 * and reading its JSON lines, temporary files, the JSON records file.
 * (In examples/ so that the Makefile links it into every benchmark.)
 */
#ifndef SHEAF_EXAMPLES_BENCH_UTIL_H
#define SHEAF_EXAMPLES_BENCH_UTIL_H

#include <stdio.h>

#include "models.h"

/* Best instances/s over `rounds` windows of at least min_s seconds, each
 * made of whole passes over instances [0, count) in batches of `batch`,
 * after one warm-up pass over min(count, 2 batches). *delta (optional) gets
 * the graph counters of the timed passes; *passes their number. Returns <=
 * 0 on error (printed). */
double exb_sheaf_rate(const ex_net *net, sheaf_policy policy, int threads, int32_t batch,
                      int32_t count, double min_s, int rounds, sheaf_graph_stats *delta,
                      long *passes);

/* GFLOP/s of sh_gemm C[m,n] = A[m,k]·B[k,n] with B packed (the batched
 * kernel's best case: A contiguous), best of 3 windows of min_s. */
double exb_gemm_gflops(sheaf_ctx *ctx, int threads, int64_t m, int64_t n, int64_t k, double min_s);

/* A temporary directory (created on first use) and paths in it; removed
 * with its files by exb_tmp_cleanup. */
const char *exb_tmp_path(const char *name);
void exb_tmp_cleanup(void);

/* One JSON line of a peer: {"system": S, "batch": B, ..., KEY: RATE}. */
typedef struct exb_peer_rec {
  char system[40];
  int batch;
  double rate;
} exb_peer_rec;

/* Runs `cmd` (through the shell), echoes its "# " lines indented, collects
 * its JSON lines (rate from `key`). Returns the exit status (-1: could not
 * run). */
int exb_run_peer(const char *cmd, const char *key, exb_peer_rec *recs, int max, int *n);

/* Whether `python` can import torch (quietly). */
bool exb_have_torch(const char *python);

/* Reads a whole file of float32 values (malloc'd; NULL if missing). */
float *exb_read_f32(const char *path, size_t *n);

/* JSON records file: exb_json_open(path or NULL), exb_json_rec(fmt, ...)
 * appends one object (fmt gives its members), exb_json_close. */
bool exb_json_open(const char *path);
void exb_json_rec(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void exb_json_close(void);

/* Comma list of positive integers into out (at most max); false if bad. */
bool exb_parse_list(const char *s, int *out, int max, int *n);

#endif
