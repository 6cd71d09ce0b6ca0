/*
 * bench_kernel_batch.c — a generated kernel called per instance through
 * the batching runtime (sheaf_kernel_call: one call over the stacked rows,
 * src/codegen/kernel_call.c) against the same kernel run instance by
 * instance (sheaf_kernel_run), the emitted batch loop called directly
 * (sk_batch_fn: one call, one kernel invocation per instance), and the
 * same computation as separate runtime ops (sheaf_affine + activations,
 * batched into Sheaf's hand GEMM with fused epilogues). Same inputs, same
 * run, 1 thread, thread CPU time, best of alternating rounds; every
 * variant's results are checked against the runtime ops' (max |diff|).
 * Cases: an FFN + GELU (D 256 -> F 1280) and a gated unit
 * sigmoid(x·Wg) * tanh(x·Wh) (256 -> 256), on 64 instances of one row
 * (tree nodes) and of 1..24 rows (sentences).
 *
 *   make bench-kernel_batch [BENCH_ARGS='--quick']
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "codegen/kernel_api.h"

static const char FFN[] = "kernel ffn(x: f32[N, D], W: f32[D, F], b: f32[F]) -> f32[N, F] {\n"
                          "  y(n, f) +=! x(n, d) * W(d, f)\n  out(n, f) = gelu(y(n, f) + b(f))\n}\n";
static const char GATE[] = "kernel gate(x: f32[N, D], Wg: f32[D, F], Wh: f32[D, F]) -> f32[N, F] {\n"
                           "  g(n, f) +=! x(n, d) * Wg(d, f)\n  h(n, f) +=! x(n, d) * Wh(d, f)\n"
                           "  out(n, f) = sigmoid(g(n, f)) * tanh(h(n, f))\n}\n";

enum { NI = 64, MAXR = 24 };

typedef struct bcase {
  const char *name, *src;
  int64_t D, F;
  bool gate;
  bool sentences; /* 1..24 rows per instance, else 1 */
} bcase;

typedef struct state {
  sheaf_ctx *ctx;
  sheaf_model *m;
  sheaf_param W, b, W2;
  sheaf_kernel *k;
  const bcase *c;
  float *x[NI];
  int64_t rows[NI];
  float *out[NI]; /* per-instance outputs (kernel_run, batch loop) */
  float *ref[NI]; /* the runtime ops' results */
  float *Wd, *Bd; /* W and b (gated: W2) values, fetched once: handing out the pointer
                     bumps the parameter's version, so the runtime would repack W */
} state;

static double cpu(void) { return exb_now_s(true); }

static double maxdiff(const state *s, float *const *got) {
  double w = 0;
  for (int i = 0; i < NI; i++)
    for (int64_t j = 0; j < s->rows[i] * s->c->F; j++) w = fmax(w, fabs((double)got[i][j] - s->ref[i][j]));
  return w;
}

/* The runtime variants: one graph, 64 instances, flush; keep = copy results. */
static double run_graph(state *s, bool kernel, float **keep) {
  sheaf_graph *g;
  if (sheaf_graph_create(s->m, &(sheaf_graph_opts){.threads = 1}, &g)) return -1;
  double t0 = cpu();
  sheaf_expr y[NI];
  for (int i = 0; i < NI; i++) {
    sheaf_expr x = sheaf_input(g, 2, (int64_t[]){s->rows[i], s->c->D}, s->x[i]);
    if (kernel) {
      sheaf_expr in[3] = {x, sheaf_parameter(g, s->W), sheaf_parameter(g, s->c->gate ? s->W2 : s->b)};
      y[i] = sheaf_kernel_call(g, s->k, 3, in);
    } else if (s->c->gate) {
      y[i] = sheaf_mul(g, sheaf_sigmoid(g, sheaf_affine(g, s->W, x, SHEAF_NO_PARAM)),
                       sheaf_tanh(g, sheaf_affine(g, s->W2, x, SHEAF_NO_PARAM)));
    } else {
      y[i] = sheaf_gelu(g, sheaf_affine(g, s->W, x, s->b));
    }
  }
  sheaf_status st = sheaf_graph_flush(g);
  double t = cpu() - t0;
  for (int i = 0; !st && keep && i < NI; i++) {
    sheaf_value_view v;
    st = sheaf_value(g, y[i], &v);
    if (!st) memcpy(keep[i], v.data, sizeof(float) * (size_t)(s->rows[i] * s->c->F));
  }
  if (st) fprintf(stderr, "bench_kernel_batch: %s\n", sheaf_ctx_last_error(s->ctx));
  sheaf_graph_free(g);
  return st ? -1 : t;
}

static double run_each(state *s) {
  float *W = s->Wd, *B = s->Bd;
  int64_t sw[2] = {s->c->D, s->c->F}, sb[1] = {s->c->F};
  double t0 = cpu();
  for (int i = 0; i < NI; i++) {
    int64_t sx[2] = {s->rows[i], s->c->D};
    sheaf_kernel_arg a[4] = {{SHEAF_KERNEL_F32, s->x[i], (size_t)(sx[0] * sx[1]), 2, sx},
                             {SHEAF_KERNEL_F32, W, (size_t)(sw[0] * sw[1]), 2, sw},
                             {SHEAF_KERNEL_F32, B, s->c->gate ? (size_t)(sw[0] * sw[1]) : (size_t)sb[0],
                              s->c->gate ? 2 : 1, s->c->gate ? sw : sb},
                             {SHEAF_KERNEL_F32, s->out[i], (size_t)(sx[0] * s->c->F), 0, NULL}};
    if (sheaf_kernel_run(s->k, a, 4)) {
      fprintf(stderr, "bench_kernel_batch: %s\n", sheaf_ctx_last_error(s->ctx));
      return -1;
    }
  }
  return cpu() - t0;
}

/* The emitted batch loop alone: x as row pointers, W and b passed once. */
static double run_loop(state *s) {
  float *W = s->Wd, *B = s->Bd;
  const sh_kernel *k = sh_kernel_of(s->k);
  int ns = k->n_sizes;
  int64_t sizes[NI * 4];
  for (int i = 0; i < NI; i++)
    for (int z = 0; z < ns; z++) {
      const char *nm = k->sizes[z].name;
      sizes[i * ns + z] = !strcmp(nm, "N") ? s->rows[i] : !strcmp(nm, "D") ? s->c->D : s->c->F;
    }
  /* a weight the generated code reads packed (panels) is passed packed,
   * packed once before the timing as the runtime keeps it (version 1) */
  const float *wp[2] = {W, B};
  const int64_t wd[2][2] = {{s->c->D, s->c->F}, {s->c->gate ? s->c->D : s->c->F, s->c->gate ? s->c->F : 1}};
  bool held[2] = {false, false};
  for (int j = 0; j < 2; j++)
    if (sh_kernel_input_packed(s->k, 1 + j) &&
        sh_kernel_weight_get(s->k, 1 + j, sizes, wp[j], wd[j][0], wd[j][1], 1, NULL, &wp[j], &held[j])) {
      fprintf(stderr, "bench_kernel_batch: packing input %d (%lld x %lld): %s\n", 1 + j, (long long)wd[j][0], (long long)wd[j][1], sheaf_ctx_last_error(s->ctx));
      return -1;
    }
  sk_barg a[4] = {{NULL, (void *const *)s->x, 0}, {(char *)(uintptr_t)wp[0], NULL, 0},
                  {(char *)(uintptr_t)wp[1], NULL, 0}, {NULL, (void *const *)s->out, 0}};
  sk_abi abi;
  sh_lir_abi_init(s->ctx, 1, &abi);
  double t0 = cpu();
  int rc = sh_kernel_batch_fn(s->k)(&abi, NI, sizes, a);
  double t = cpu() - t0;
  for (int j = 0; j < 2; j++)
    if (held[j]) sh_kernel_weight_put(s->k, 1 + j);
  return rc ? -1 : t;
}

int main(int argc, char **argv) {
  bool quick = argc > 1 && !strcmp(argv[1], "--quick");
  int rounds = quick ? 3 : 9;
  sheaf_ctx *ctx;
  if (sheaf_ctx_create(&(sheaf_ctx_options){.threads = 1}, &ctx, NULL, 0)) return 1;
  const bcase cases[] = {{"ffn+gelu 256->1280", FFN, 256, 1280, false, false},
                         {"ffn+gelu 256->1280", FFN, 256, 1280, false, true},
                         {"gated unit 256->256", GATE, 256, 256, true, false},
                         {"gated unit 256->256", GATE, 256, 256, true, true}};
  printf("bench_kernel_batch: 64 instances, 1 thread, thread CPU time, best of %d alternating rounds (us)\n", rounds);
  printf("%-20s %-10s %12s %12s %12s %12s %9s %9s %10s\n", "kernel", "rows", "kernel_call", "batch loop",
         "kernel_run", "runtime ops", "ops/call", "run/call", "max diff");
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    const bcase *c = &cases[ci];
    state s = {.ctx = ctx, .c = c};
    if (sheaf_model_create(ctx, &s.m)) return 1;
    int64_t sw[2] = {c->D, c->F};
    sheaf_model_param(s.m, "W", 2, sw, SHEAF_INIT_GLOROT, &s.W);
    sheaf_model_param(s.m, "b", 1, &sw[1], SHEAF_INIT_GLOROT, &s.b);
    sheaf_model_param(s.m, "W2", 2, sw, SHEAF_INIT_GLOROT, &s.W2);
    sheaf_model_seed(s.m, 3);
    s.Wd = sheaf_model_param_data(s.m, s.W, NULL, NULL);
    s.Bd = sheaf_model_param_data(s.m, c->gate ? s.W2 : s.b, NULL, NULL);
    sh_kernel_opts o = {.cache_dir = exb_tmp_path("kbatch-cache")};
    if (sh_kernel_compile_opts(ctx, c->src, strlen(c->src), NULL, &o, &s.k)) {
      fprintf(stderr, "bench_kernel_batch: %s\n", sheaf_ctx_last_error(ctx));
      return 1;
    }
    uint64_t seed = 11;
    int64_t total = 0;
    for (int i = 0; i < NI; i++) {
      s.rows[i] = c->sentences ? 1 + (i * 7) % MAXR : 1;
      total += s.rows[i];
      s.x[i] = exb_frand_xs(s.rows[i] * c->D, &seed);
      s.out[i] = calloc((size_t)(s.rows[i] * c->F), sizeof(float));
      s.ref[i] = calloc((size_t)(s.rows[i] * c->F), sizeof(float));
    }
    double best[4] = {1e30, 1e30, 1e30, 1e30};
    for (int r = 0; r < rounds; r++) {
      double t[4] = {run_graph(&s, true, NULL), run_loop(&s), run_each(&s), run_graph(&s, false, s.ref)};
      for (int v = 0; v < 4; v++)
        if (t[v] < 0) return 1;
        else if (t[v] < best[v]) best[v] = t[v];
    }
    double refmax = 0;
    for (int i = 0; i < NI; i++)
      for (int64_t j = 0; j < s.rows[i] * c->F; j++) refmax = fmax(refmax, fabs(s.ref[i][j]));
    if (!(refmax > 0)) {
      fprintf(stderr, "bench_kernel_batch: the reference is all zeros\n");
      return 1;
    }
    double d = maxdiff(&s, s.out); /* kernel_run's (the last to write out) */
    if (run_loop(&s) < 0) return 1;
    d = fmax(d, maxdiff(&s, s.out));
    float *got[NI];
    for (int i = 0; i < NI; i++) got[i] = calloc((size_t)(s.rows[i] * c->F), sizeof(float));
    if (run_graph(&s, true, got) < 0) return 1;
    d = fmax(d, maxdiff(&s, got));
    if (!(d <= 1e-3 * refmax)) { /* a timing of wrong results is no timing */
      fprintf(stderr, "bench_kernel_batch: %s: results differ from the runtime ops' by %g\n", c->name, d);
      return 1;
    }
    char rows[24];
    snprintf(rows, sizeof rows, "%lld", (long long)total);
    printf("%-20s %-10s %12.1f %12.1f %12.1f %12.1f %9.2f %9.2f %10.2g\n", c->name, rows, best[0] * 1e6,
           best[1] * 1e6, best[2] * 1e6, best[3] * 1e6, best[3] / best[0], best[2] / best[0], d);
    for (int i = 0; i < NI; i++) free(s.x[i]), free(s.out[i]), free(s.ref[i]), free(got[i]);
    sheaf_kernel_free(s.k);
    sheaf_model_free(s.m);
  }
  printf("ops/call: runtime ops time / kernel_call time; run/call: per-instance sheaf_kernel_run / kernel_call\n");
  sheaf_ctx_free(ctx);
  exb_tmp_cleanup();
  return 0;
}
