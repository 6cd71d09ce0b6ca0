/*
 * bench_rows.c — the row kernels (src/kernels/rows.h) at transformer-encoder
 * shapes, every ISA level the host supports side by side; the scalar level
 * (plain C + libm) is the peer each vector level is compared with.
 *
 * Each kernel runs over M rows of n floats (M = 64: the operands, ~200 KB
 * at n = 768, stay in L2 as they do between a GEMM and its consumer). Time
 * per row is the minimum over many short samples (~20 µs each, alternating
 * between levels), which a busy machine preempts least;
 * GB/s counts the bytes a row must move (softmax: read x, write y;
 * layernorm with residual: read x and r, write y; add: read a and b, write
 * y; gelu: read x, write y; sum: read x).
 *
 *   bench_rows [--quick] [--n N]... [--m ROWS] [--json FILE]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/rows.h"

enum { K_SOFTMAX, K_LAYERNORM, K_ADD_BIAS, K_ADD, K_SUM, K_GELU, K_EMBED, K_COUNT };
static const char *k_names[] = {"softmax",  "layernorm+res", "add [1,N] bias", "add [M,N]",
                                "sum",      "gelu_tanh",     "embedding"};
static const int k_streams[] = {2, 3, 2, 3, 1, 2, 2}; /* row-sized f32 transfers per row */

typedef struct bufs {
  int64_t m, n;
  float *x, *r, *y, *gamma, *beta, *table;
  int32_t *idx;
} bufs;

static float frand(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return (float)((double)(*s >> 40) / (double)(1ull << 23) - 1.0);
}

/* 64-byte aligned, as the runtime's arenas hand out */
static float *amalloc(size_t bytes) { return aligned_alloc(64, (bytes + 63) / 64 * 64); }

static void run(sheaf_isa isa, int kind, const bufs *b) {
  int64_t m = b->m, n = b->n;
  sh_gemm_in x = {NULL, b->x, n}, r = {NULL, b->r, n};
  sh_gemm_out y = {NULL, b->y, n};
  switch (kind) {
  case K_SOFTMAX: sh_softmax_rows(isa, m, n, 0.125f, x, y); break;
  case K_LAYERNORM: sh_layernorm_rows(isa, m, n, x, r, b->gamma, b->beta, 1e-5f, y); break;
  case K_ADD_BIAS:
    sh_ew_binary(isa, SH_EW_ADD, m, n, (sh_ew_operand){x, m, n},
                 (sh_ew_operand){{NULL, b->gamma, 0}, 1, n}, y);
    break;
  case K_ADD:
    sh_ew_binary(isa, SH_EW_ADD, m, n, (sh_ew_operand){x, m, n}, (sh_ew_operand){r, m, n}, y);
    break;
  case K_SUM: sh_reduce_rows(isa, SH_REDUCE_SUM, m, n, x, b->y); break;
  case K_GELU: sh_ew_act(isa, SH_GEMM_ACT_GELU_TANH, m, n, x, y); break;
  case K_EMBED: sh_embedding_rows(NULL, isa, m, n, b->table, 4 * m, n, b->idx, y); break;
  }
}

/* ns per row over `reps` back-to-back calls */
static double time_kernel(sheaf_isa isa, int kind, const bufs *b, int reps) {
  uint64_t t0 = sheaf_time_ns();
  for (int i = 0; i < reps; i++) run(isa, kind, b);
  return (double)(sheaf_time_ns() - t0) / ((double)reps * (double)b->m);
}

int main(int argc, char **argv) {
  bool quick = false;
  int64_t ns_default[] = {128, 768, 1024, 4096};
  int64_t ns[4];
  int n_ns = 0;
  const char *json = NULL;
  int64_t rows = 64;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = true;
    else if (!strcmp(argv[i], "--n") && i + 1 < argc && n_ns < 4) ns[n_ns++] = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!strcmp(argv[i], "--m") && i + 1 < argc) rows = atoll(argv[++i]);
    else {
      fprintf(stderr, "usage: bench_rows [--quick] [--n N]... [--m ROWS] [--json FILE]\n");
      return 2;
    }
  }
  if (!n_ns) {
    n_ns = quick ? 1 : 4;
    for (int i = 0; i < n_ns; i++) ns[i] = quick ? 768 : ns_default[i];
  }
  FILE *jf = json ? fopen(json, "w") : NULL;
  if (json && !jf) {
    perror(json);
    return 1;
  }
  if (jf) fprintf(jf, "[\n");
  int levels = (int)sheaf_cpu_isa() + 1, rounds = quick ? 100 : 400;
  bool first_rec = true;
  printf("M = %lld rows; ns/row (GB/s), min of %d samples; ratio = scalar / best level\n\n",
         (long long)rows, rounds);
  printf("%-16s %6s", "kernel", "n");
  for (int l = 0; l < levels; l++) printf(" %20s", sheaf_isa_name((sheaf_isa)l));
  printf(" %7s\n", "ratio");
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  for (int si = 0; si < n_ns; si++) {
    bufs b = {rows, ns[si], NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    size_t sz = (size_t)(b.m * b.n) * sizeof(float);
    b.x = amalloc(sz);
    b.r = amalloc(sz);
    b.y = amalloc(sz);
    b.gamma = amalloc((size_t)b.n * sizeof(float));
    b.beta = amalloc((size_t)b.n * sizeof(float));
    b.table = amalloc(4 * sz);
    b.idx = malloc((size_t)b.m * sizeof(int32_t));
    for (int64_t i = 0; i < b.m * b.n; i++) {
      b.x[i] = 4 * frand(&seed);
      b.r[i] = frand(&seed);
    }
    for (int64_t i = 0; i < 4 * b.m * b.n; i++) b.table[i] = frand(&seed);
    for (int64_t i = 0; i < b.n; i++) {
      b.gamma[i] = 1 + 0.1f * frand(&seed);
      b.beta[i] = 0.1f * frand(&seed);
    }
    for (int64_t i = 0; i < b.m; i++) b.idx[i] = (int32_t)((i * 37) % (4 * b.m));
    for (int k = 0; k < K_COUNT; k++) {
      double best[3] = {1e30, 1e30, 1e30};
      int reps[3];
      for (int l = 0; l < levels; l++) { /* calibrate: ~20 µs per sample */
        run((sheaf_isa)l, k, &b);
        double t = time_kernel((sheaf_isa)l, k, &b, 1) * (double)b.m;
        reps[l] = t > 0 ? (int)(2e4 / t) + 1 : 100;
      }
      for (int rd = 0; rd < rounds; rd++)
        for (int l = 0; l < levels; l++) {
          double t = time_kernel((sheaf_isa)l, k, &b, reps[l]);
          if (t < best[l]) best[l] = t;
        }
      printf("%-16s %6lld", k_names[k], (long long)b.n);
      double bytes = (double)k_streams[k] * (double)b.n * 4.0;
      for (int l = 0; l < levels; l++) {
        char cell[32];
        snprintf(cell, sizeof cell, "%.1f (%.1f)", best[l], bytes / best[l]);
        printf(" %20s", cell);
      }
      printf(" %7.2f\n", best[0] / best[levels - 1]);
      if (jf)
        for (int l = 0; l < levels; l++) {
          fprintf(jf, "%s  {\"name\": \"%s\", \"n\": %lld, \"m\": %lld, \"isa\": \"%s\", "
                      "\"ns_per_row\": %.2f, \"gbps\": %.2f, \"vs_scalar\": %.3f}",
                  first_rec ? "" : ",\n", k_names[k], (long long)b.n, (long long)b.m,
                  sheaf_isa_name((sheaf_isa)l), best[l], bytes / best[l], best[0] / best[l]);
          first_rec = false;
        }
    }
    free(b.x);
    free(b.r);
    free(b.y);
    free(b.gamma);
    free(b.beta);
    free(b.table);
    free(b.idx);
  }
  if (jf) {
    fprintf(jf, "\n]\n");
    fclose(jf);
  }
  return 0;
}
