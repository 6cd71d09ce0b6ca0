/*
 * bench_kernel_batch.c — a generated kernel called per instance through
 * the batching runtime (sheaf_kernel_call: one call over the stacked rows,
 * src/codegen/kernel_call.c) against the same kernel run instance by
 * instance (sheaf_kernel_run), the emitted batch loop called directly
 * (sk_batch_fn: one call, one kernel invocation per instance), and the
 * same computation as separate runtime ops (sheaf_affine + activations /
 * layer_norm, batched into Sheaf's hand GEMM with fused epilogues), the
 * runtime ops under every policy with the best kept. Same inputs, same
 * run, 1 thread, thread CPU time, best of alternating rounds; one graph
 * per side and policy kept across rounds (reset per run: a model's steady
 * state); every variant's results are checked against the runtime ops'.
 * Cases: an FFN + GELU (D 256 -> F 1280), a gated unit
 * sigmoid(x·Wg) * tanh(x·Wh) (256 -> 256), and GEMM + bias + layernorm +
 * GELU (a row reduction between the GEMM and the activation: the runtime
 * cannot fuse it into its GEMM) at an FFN's width and a layer-normalised
 * tree cell's (D = 2H -> H, H 64/128/256); on 64 instances of one row
 * (tree nodes) or of 1..24 rows (sentences); "2 W": odd instances pass a
 * second weight (another layer's), so one bucket holds two weights.
 *
 *   make bench-kernel_batch [BENCH_ARGS='--quick | --only ffn|gate|ffnln']
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
static const char FFNLN[] = "kernel ffnln(x: f32[N, D], W: f32[D, F], b: f32[F], ga: f32[F], be: f32[F]) -> f32[N, F] {\n"
                            "  y(n, f) +=! x(n, d) * W(d, f)\n  z(n, f) = y(n, f) + b(f)\n"
                            "  mu(n) +=! z(n, f) / F\n  c(n, f) = z(n, f) - mu(n)\n"
                            "  var(n) +=! c(n, f) * c(n, f) / F\n"
                            "  out(n, f) = gelu(c(n, f) * rsqrt(var(n) + 1e-5) * ga(f) + be(f))\n}\n";

enum { NI = 64, MAXR = 24 };

enum { K_FFN, K_GATE, K_FFNLN };

typedef struct bcase {
  const char *name, *src;
  int64_t D, F;
  int kind;
  bool sentences; /* 1..24 rows per instance, else 1 */
  bool two;       /* odd instances pass a second W (another layer's): two weights in one bucket */
} bcase;

typedef struct state {
  sheaf_ctx *ctx;
  sheaf_model *m;
  sheaf_param P[4]; /* the kernel's inputs after x: W, b | Wg, Wh | W, b, gamma, beta */
  sheaf_param W2;   /* bcase.two: the odd instances' W */
  int n_par;
  sheaf_kernel *k, *k2; /* k: the graph's calls; k2: kernel_run and the batch loop. Two copies
                         (a cache hit): a kernel keeps one packed copy per weight keyed on its
                         version, and the sides' versions differ, so one kernel would repack */
  const bcase *c;
  float *x[NI];
  int64_t rows[NI];
  float *out[NI]; /* per-instance outputs (kernel_run, batch loop) */
  float *ref[NI]; /* the runtime ops' results */
  float *Pd[4]; /* their values, fetched once: handing out the pointer bumps the
                   parameter's version, so the runtime would repack W */
  int64_t pd[4][2]; /* their shapes ([n] for a vector: pd[j][1] = 0) */
} state;

static double cpu(void) { return exb_now_s(true); }

static double maxdiff(const state *s, float *const *got) {
  double w = 0;
  for (int i = 0; i < NI; i++)
    for (int64_t j = 0; j < s->rows[i] * s->c->F; j++) w = fmax(w, fabs((double)got[i][j] - s->ref[i][j]));
  return w;
}

/* The runtime variants: 64 instances on graph g (reset first: a model's
 * steady state, its arenas already touched), flush; keep = copy results. */
static double run_graph(state *s, sheaf_graph *g, bool kernel, float **keep) {
  double t0 = cpu();
  if (sheaf_graph_reset(g)) return -1;
  sheaf_expr y[NI], in[5]; /* the parameters' expressions: once per graph, as a model builds them */
  for (int j = 0; j < s->n_par; j++) in[1 + j] = sheaf_parameter(g, s->P[j]);
  sheaf_expr w1 = in[1], w2 = s->c->two ? sheaf_parameter(g, s->W2) : w1;
  for (int i = 0; i < NI; i++) {
    sheaf_expr x = sheaf_input(g, 2, (int64_t[]){s->rows[i], s->c->D}, s->x[i]);
    sheaf_param W = s->c->two && i % 2 ? s->W2 : s->P[0];
    if (kernel) {
      in[0] = x, in[1] = s->c->two && i % 2 ? w2 : w1;
      y[i] = sheaf_kernel_call(g, s->k, 1 + s->n_par, in);
    } else if (s->c->kind == K_GATE) {
      y[i] = sheaf_mul(g, sheaf_sigmoid(g, sheaf_affine(g, W, x, SHEAF_NO_PARAM)),
                       sheaf_tanh(g, sheaf_affine(g, s->P[1], x, SHEAF_NO_PARAM)));
    } else if (s->c->kind == K_FFNLN) {
      y[i] = sheaf_gelu(g, sheaf_layer_norm(g, sheaf_affine(g, W, x, s->P[1]), in[3], in[4], 1e-5f));
    } else {
      y[i] = sheaf_gelu(g, sheaf_affine(g, W, x, s->P[1]));
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
  return st ? -1 : t;
}

static double run_each(state *s) {
  double t0 = cpu();
  for (int i = 0; i < NI; i++) {
    int64_t sx[2] = {s->rows[i], s->c->D};
    sheaf_kernel_arg a[6] = {{SHEAF_KERNEL_F32, s->x[i], (size_t)(sx[0] * sx[1]), 2, sx}};
    for (int j = 0; j < s->n_par; j++) {
      const int64_t *d = s->pd[j];
      a[1 + j] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, s->Pd[j], (size_t)(d[0] * (d[1] ? d[1] : 1)), d[1] ? 2 : 1, d};
    }
    a[1 + s->n_par] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, s->out[i], (size_t)(sx[0] * s->c->F), 0, NULL};
    if (sheaf_kernel_run(s->k2, a, 2 + s->n_par)) {
      fprintf(stderr, "bench_kernel_batch: %s\n", sheaf_ctx_last_error(s->ctx));
      return -1;
    }
  }
  return cpu() - t0;
}

/* The emitted batch loop alone: x as row pointers, the parameters passed once. */
static double run_loop(state *s) {
  const sh_kernel *k = sh_kernel_of(s->k2);
  int ns = k->n_sizes;
  int64_t sizes[NI * 4];
  for (int i = 0; i < NI; i++)
    for (int z = 0; z < ns; z++) {
      const char *nm = k->sizes[z].name;
      sizes[i * ns + z] = !strcmp(nm, "N") ? s->rows[i] : !strcmp(nm, "D") ? s->c->D : s->c->F;
    }
  /* a weight the generated code reads packed (panels) is passed packed,
   * packed once before the timing as the runtime keeps it (version 1) */
  const float *wp[4];
  bool held[4] = {false};
  for (int j = 0; j < s->n_par; j++) {
    const int64_t *d = s->pd[j];
    wp[j] = s->Pd[j];
    if (sh_kernel_input_packed(s->k2, 1 + j) &&
        sh_kernel_weight_get(s->k2, 1 + j, sizes, wp[j], d[0], d[1] ? d[1] : 1, 1, NULL, &wp[j], &held[j])) {
      fprintf(stderr, "bench_kernel_batch: packing input %d (%lld x %lld): %s\n", 1 + j, (long long)d[0],
              (long long)d[1], sheaf_ctx_last_error(s->ctx));
      return -1;
    }
  }
  sk_barg a[6] = {{NULL, (void *const *)s->x, 0}};
  for (int j = 0; j < s->n_par; j++) a[1 + j] = (sk_barg){(char *)(uintptr_t)wp[j], NULL, 0};
  a[1 + s->n_par] = (sk_barg){NULL, (void *const *)s->out, 0};
  sk_abi abi;
  sh_lir_abi_init(s->ctx, 1, &abi);
  double t0 = cpu();
  int rc = sh_kernel_batch_fn(s->k2)(&abi, NI, sizes, a);
  double t = cpu() - t0;
  for (int j = 0; j < s->n_par; j++)
    if (held[j]) sh_kernel_weight_put(s->k2, 1 + j);
  return rc ? -1 : t;
}

int main(int argc, char **argv) {
  bool quick = false;
  const char *only = NULL; /* --only ffn|gate|ffnln: that kernel's cases */
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--quick")) quick = true;
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
  int rounds = quick ? 3 : 9;
  sheaf_ctx *ctx;
  if (sheaf_ctx_create(&(sheaf_ctx_options){.threads = 1}, &ctx, NULL, 0)) return 1;
  const bcase cases[] = {{"ffn+gelu 256->1280", FFN, 256, 1280, K_FFN, false, false},
                         {"ffn+gelu 256->1280", FFN, 256, 1280, K_FFN, true, false},
                         {"gated unit 256->256", GATE, 256, 256, K_GATE, false, false},
                         {"gated unit 256->256", GATE, 256, 256, K_GATE, true, false},
                         {"ffn+ln+gelu 256->1024", FFNLN, 256, 1024, K_FFNLN, false, false},
                         {"ffn+ln+gelu 256->1024", FFNLN, 256, 1024, K_FFNLN, true, false},
                         {"ffn+ln+gelu 128->64", FFNLN, 128, 64, K_FFNLN, false, false},
                         {"ffn+ln+gelu 256->128", FFNLN, 256, 128, K_FFNLN, false, false},
                         {"ffn+ln+gelu 512->256", FFNLN, 512, 256, K_FFNLN, false, false},
                         {"ffn+ln+gelu 512->256", FFNLN, 512, 256, K_FFNLN, true, false},
                         {"ffn+ln+gelu 256->1024, 2 W", FFNLN, 256, 1024, K_FFNLN, false, true},
                         {"gated unit 256->256, 2 W", GATE, 256, 256, K_GATE, false, true}};
  printf("bench_kernel_batch: 64 instances, 1 thread, thread CPU time, best of %d alternating rounds (us)\n", rounds);
  printf("%-27s %-6s %12s %12s %12s %12s %-7s %9s %9s %10s\n", "kernel", "rows", "kernel_call", "batch loop",
         "kernel_run", "runtime ops", "policy", "ops/call", "run/call", "max diff");
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    const bcase *c = &cases[ci];
    static const char *const kinds[] = {"ffn", "gate", "ffnln"};
    if (only && strcmp(only, kinds[c->kind])) continue;
    state s = {.ctx = ctx, .c = c};
    if (sheaf_model_create(ctx, &s.m)) return 1;
    /* W [D, F], then b [F] | Wh [D, F], then gamma, beta [F] */
    s.n_par = c->kind == K_FFNLN ? 4 : 2;
    for (int j = 0; j < s.n_par; j++) {
      bool mat = j == 0 || (j == 1 && c->kind == K_GATE);
      s.pd[j][0] = mat ? c->D : c->F, s.pd[j][1] = mat ? c->F : 0;
      char nm[8];
      snprintf(nm, sizeof nm, "p%d", j);
      if (sheaf_model_param(s.m, nm, mat ? 2 : 1, s.pd[j], SHEAF_INIT_GLOROT, &s.P[j])) return 1;
    }
    if (c->two && sheaf_model_param(s.m, "W2", 2, s.pd[0], SHEAF_INIT_GLOROT, &s.W2)) return 1;
    sheaf_model_seed(s.m, 3);
    for (int j = 0; j < s.n_par; j++) s.Pd[j] = sheaf_model_param_data(s.m, s.P[j], NULL, NULL);
    sh_kernel_opts o = {.cache_dir = exb_tmp_path("kbatch-cache")};
    if (sh_kernel_compile_opts(ctx, c->src, strlen(c->src), NULL, &o, &s.k) ||
        sh_kernel_compile_opts(ctx, c->src, strlen(c->src), NULL, &o, &s.k2)) {
      fprintf(stderr, "bench_kernel_batch: %s\n", sheaf_ctx_last_error(ctx));
      return 1;
    }
    /* kernel_run's weights are versioned as a model's are (its kept packed
     * copy serves every run; version 0 would repack them on each call) */
    for (int j = 0; j < s.n_par; j++)
      if (sh_kernel_input_packed(s.k2, 1 + j) && sheaf_kernel_set_weight_version(s.k2, 1 + j, 1)) return 1;
    uint64_t seed = 11;
    int64_t total = 0;
    for (int i = 0; i < NI; i++) {
      s.rows[i] = c->sentences ? 1 + (i * 7) % MAXR : 1;
      total += s.rows[i];
      s.x[i] = exb_frand_xs(s.rows[i] * c->D, &seed);
      s.out[i] = calloc((size_t)(s.rows[i] * c->F), sizeof(float));
      s.ref[i] = calloc((size_t)(s.rows[i] * c->F), sizeof(float));
    }
    /* one graph per side and policy, kept across rounds (reset per run);
     * both sides run under every policy (the same number of samples) */
    sheaf_graph *gk[4], *go[4];
    for (int p = 0; p < 4; p++)
      if (sheaf_graph_create(s.m, &(sheaf_graph_opts){.policy = exb_policies[p], .threads = 1}, &gk[p]) ||
          sheaf_graph_create(s.m, &(sheaf_graph_opts){.policy = exb_policies[p], .threads = 1}, &go[p]))
        return 1;
    /* best[3 + p]: the runtime ops under policy exb_policies[p] */
    double best[7] = {1e30, 1e30, 1e30, 1e30, 1e30, 1e30, 1e30};
    for (int r = 0; r < rounds; r++) {
      double t[7] = {1e30, c->two ? 0 : run_loop(&s), c->two ? 0 : run_each(&s)}; /* (one W) */
      for (int p = 0; p < 4; p++) {
        double tk = run_graph(&s, gk[p], true, NULL);
        t[0] = tk < 0 || t[0] < 0 ? -1 : fmin(t[0], tk);
        t[3 + p] = run_graph(&s, go[p], false, s.ref);
      }
      for (int v = 0; v < 7; v++)
        if (t[v] < 0) return 1;
        else if (t[v] < best[v]) best[v] = t[v];
    }
    int bp = 0; /* the runtime's best policy */
    for (int p = 1; p < 4; p++)
      if (best[3 + p] < best[3 + bp]) bp = p;
    best[3] = best[3 + bp];
    double refmax = 0;
    for (int i = 0; i < NI; i++)
      for (int64_t j = 0; j < s.rows[i] * c->F; j++) refmax = fmax(refmax, fabs(s.ref[i][j]));
    if (!(refmax > 0)) {
      fprintf(stderr, "bench_kernel_batch: the reference is all zeros\n");
      return 1;
    }
    double d = 0;
    if (!c->two) {
      d = maxdiff(&s, s.out); /* kernel_run's (the last to write out) */
      if (run_loop(&s) < 0) return 1;
      d = fmax(d, maxdiff(&s, s.out));
    }
    float *got[NI];
    for (int i = 0; i < NI; i++) got[i] = calloc((size_t)(s.rows[i] * c->F), sizeof(float));
    if (run_graph(&s, gk[0], true, got) < 0) return 1;
    d = fmax(d, maxdiff(&s, got));
    if (!(d <= 1e-3 * refmax)) { /* a timing of wrong results is no timing */
      fprintf(stderr, "bench_kernel_batch: %s: results differ from the runtime ops' by %g\n", c->name, d);
      return 1;
    }
    char rows[24];
    snprintf(rows, sizeof rows, "%lld", (long long)total);
    char loop[24] = "-", each[24] = "-", rc[24] = "-";
    if (!c->two) {
      snprintf(loop, sizeof loop, "%.1f", best[1] * 1e6);
      snprintf(each, sizeof each, "%.1f", best[2] * 1e6);
      snprintf(rc, sizeof rc, "%.2f", best[2] / best[0]);
    }
    printf("%-27s %-6s %12.1f %12s %12s %12.1f %-7s %9.2f %9s %10.2g\n", c->name, rows, best[0] * 1e6, loop, each,
           best[3] * 1e6, sheaf_policy_name(exb_policies[bp]), best[3] / best[0], rc, d);
    for (int i = 0; i < NI; i++) free(s.x[i]), free(s.out[i]), free(s.ref[i]), free(got[i]);
    for (int p = 0; p < 4; p++) sheaf_graph_free(gk[p]), sheaf_graph_free(go[p]);
    sheaf_kernel_free(s.k), sheaf_kernel_free(s.k2);
    sheaf_model_free(s.m);
  }
  printf("ops/call: runtime ops time (best policy) / kernel_call time; run/call: per-instance sheaf_kernel_run / "
         "kernel_call\n");
  sheaf_ctx_free(ctx);
  exb_tmp_cleanup();
  return 0;
}
