/*
 * bench_ablation.c — the ablation table of issue 15 in ACRoBat's style
 * (docs/COMPILER.md, "Ablation"): per model, one row per configuration,
 * each switching one more thing on, 1 thread, the same trees, weights and
 * process, rounds alternating the configurations (paired): trees/s
 * (median, min-max) and the ratio to the first row.
 *
 *   interpreted       the AST walker (--host ast), dynamic runtime with DyNet's
 *                     depth batching (--policy depth: depths by a graph walk at flush)
 *   compiled host     the host program VM (--host vm)
 *   + taint           always on in Sheaf (no switch): parameters are never batched
 *                     nor copied; a GEMM reads a weight packed once per version
 *   + static depth    Sheaf's inline depth (--policy sheaf: each op's depth is
 *                     max(inputs) + 1 when it is built, no walk) in place of the walk
 *   + ghost ops       not implemented: the runtime has no depth-hint API
 *   + coarsening      each straight-line function of vectors one generated kernel
 *                     (compile/dyncoarse.c, sheaf run --coarsen on)
 *   linearized        one generated kernel per level and arm (compile/linear.h)
 *
 *   bench_ablation [--trees N] [--rounds R] [--quick]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "bench_util.h"
#include "compile/dyncoarse.h"
#include "compile/linear.h"
#include "io/dataset.h"
#include "lang/interp.h"

typedef struct model {
  const char *name, *path;
  const char *sizes[4];
  int64_t H;
} model;

typedef struct setup {
  sheaf_ctx *ctx;
  sh_module m;
  char *src;
  size_t len;
  sheaf_model *model;
  sh_lang_bind bind;
  sh_lin *lin;       /* NULL: does not linearize */
  sh_dyncoarse *dc;
  sh_interp *ip[3];  /* ast, vm, vm + coarsening */
  sheaf_graph *g[2]; /* --policy depth, sheaf */
  char names[4][16];
} setup;

static void setup_free(setup *s) {
  for (int i = 0; i < 3; i++) sh_interp_free(s->ip[i]);
  sheaf_graph_free(s->g[0]);
  sheaf_graph_free(s->g[1]);
  sh_dyncoarse_free(s->dc);
  sh_lin_free(s->lin);
  sh_lang_bind_free(s->ctx, &s->bind);
  sheaf_model_free(s->model);
  sh_module_free(&s->m);
  if (s->src) sh_free(s->ctx, s->src, s->len + 1);
}

static bool setup_open(sheaf_ctx *ctx, const model *k, const sh_dataset *d, setup *s) {
  memset(s, 0, sizeof *s);
  s->ctx = ctx;
  sh_lang_bind_opts bo = {.seed = 11, .vocab = d->vocab};
  for (int i = 0; k->sizes[i]; i++) {
    const char *eq = strchr(k->sizes[i], '=');
    snprintf(s->names[i], sizeof s->names[i], "%.*s", (int)(eq - k->sizes[i]), k->sizes[i]);
    bo.override_name[i] = s->names[i];
    bo.override_value[i] = atoll(eq + 1);
    bo.n_overrides++;
  }
  if (sh_file_read(ctx, k->path, &s->src, &s->len) || sh_lang_compile(&s->m, ctx, k->path, s->src, s->len) ||
      sh_module_require_main(&s->m) || sheaf_model_create(ctx, &s->model) ||
      sh_lang_bind_model(&s->m, s->model, &bo, &s->bind) || sh_dyncoarse_create(&s->m, &s->bind, &s->dc) ||
      sheaf_graph_create(s->model, &(sheaf_graph_opts){.policy = SHEAF_POLICY_DEPTH}, &s->g[0]) ||
      sheaf_graph_create(s->model, &(sheaf_graph_opts){.policy = SHEAF_POLICY_SHEAF}, &s->g[1])) {
    fprintf(stderr, "bench_ablation: %s: %s\n", k->path, sheaf_ctx_last_error(ctx));
    return false;
  }
  for (int i = 0; i < 3; i++)
    if (sh_interp_create(&s->m, &s->bind, &s->ip[i]) ||
        sh_interp_set_host(s->ip[i], i == 0 ? SH_HOST_AST : SH_HOST_VM) ||
        (i == 2 && sh_interp_set_regions(s->ip[i], sh_dyncoarse_n_regions(s->dc), sh_dyncoarse_regions(s->dc)))) {
      fprintf(stderr, "bench_ablation: %s: %s\n", k->path, sheaf_ctx_last_error(ctx));
      return false;
    }
  char why[512] = "";
  if (sh_lin_create(&s->m, s->model, &s->bind, &s->lin, why, sizeof why)) s->lin = NULL;
  return true;
}

static volatile float sink;

/* The measured configurations: interpreter (0 ast, 1 vm, 2 vm + coarsening)
 * and graph (0 policy depth, 1 sheaf); linear: the linearized mode. */
typedef struct cfg {
  int ip, g;
  bool linear;
} cfg;
static const cfg k_cfgs[] = {{0, 0, false}, {1, 0, false}, {1, 1, false}, {2, 1, false}, {0, 0, true}};
#define N_CFGS 5

/* One pass over trees [0, n), batch 64; out: the first output of each
 * tree (NULL: not kept). */
static bool pass(setup *s, int ci, const sh_dataset *d, int n, float *out) {
  const cfg *cf = &k_cfgs[ci];
  sheaf_graph *g = s->g[cf->g];
  const int b = 64;
  sh_value res[64];
  for (int first = 0; first < n; first += b) {
    int cnt = first + b <= n ? b : n - first;
    if (cf->linear) {
      if (sh_lin_run(s->lin, &d->tb, first, cnt, d->ids)) return false;
      for (int t = 0; t < cnt; t++) {
        float v = sh_lin_output(s->lin, t, 0)[0];
        sink += v;
        if (out) out[first + t] = v;
      }
      continue;
    }
    sh_interp *ip = s->ip[cf->ip];
    for (int t = 0; t < cnt; t++) {
      sh_value in;
      if (sh_interp_tree(ip, &d->tb, d->tb.tree_root[first + t], d->ids, &in) ||
          sh_interp_main(ip, g, in, &res[t]))
        return false;
    }
    if (sheaf_graph_flush(g)) return false;
    for (int t = 0; t < cnt; t++) {
      sheaf_expr e[4];
      sheaf_value_view v;
      if (sh_value_tensors(res[t], e, 4) < 1 || sheaf_value(g, e[0], &v)) return false;
      sink += v.data[0];
      if (out) out[first + t] = v.data[0];
    }
    if (sheaf_graph_reset(g)) return false;
    sh_interp_reset(ip);
  }
  return true;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  int n = 512, rounds = 5;
  const char *data = "data/ud_english_ewt/en_ewt-ud-test.conllu";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--trees") && i + 1 < argc) n = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--quick")) n = 128, rounds = 3;
    else {
      fprintf(stderr, "usage: bench_ablation [--trees N] [--rounds R] [--quick]\n");
      return 2;
    }
  }
  if (rounds < 1 || rounds > 99 || n < 1) return 2;
  sheaf_ctx *ctx = NULL;
  sheaf_ctx_options o1 = {.threads = 1};
  if (sheaf_ctx_create(&o1, &ctx, NULL, 0)) return 1;
  sh_dataset d;
  if (sh_dataset_load(ctx, data, SH_DATASET_BINARY, &d)) {
    fprintf(stderr, "bench_ablation: %s\n", sheaf_ctx_last_error(ctx));
    return 1;
  }
  if (n > sh_dataset_count(&d)) n = sh_dataset_count(&d);
  static const model models[] = {
      {"TreeLSTM", "examples/treelstm.sf", {"H=256", "E=256", "C=5", NULL}, 256},
      {"TreeLSTM", "examples/treelstm.sf", {"H=64", "E=64", "C=5", NULL}, 64},
      {"TreeGRU", "examples/treegru.sf", {"H=64", "E=64", "C=5", NULL}, 64},
      {"MV-RNN", "examples/mvrnn.sf", {"H=64", "Vm=1000", NULL}, 64},
  };
  static const char *const rows[] = {"interpreted (--host ast, --policy depth)", "compiled host (VM)", "+ taint",
                                     "+ static depth (--policy sheaf)", "+ ghost ops", "+ coarsening", "linearized"};
  printf("# bench_ablation: %d EWT trees, batch 64, %d rounds alternating the configurations, 1 thread, isa %s\n",
         n, rounds, sheaf_isa_name(sheaf_cpu_isa()));
  printf("| model | hidden | configuration | trees/s (median, min-max) | / interpreted | max |out - VM sheaf| |\n"
         "|---|---:|---|---:|---:|---:|\n");
  float *ref = malloc((size_t)n * sizeof *ref), *got = malloc((size_t)n * sizeof *got);
  if (!ref || !got) return 1;
  int rc = 0;
  for (size_t mi = 0; mi < sizeof models / sizeof *models; mi++) {
    const model *k = &models[mi];
    setup s;
    if (!setup_open(ctx, k, &d, &s)) return 1;
    int ncfg = s.lin ? N_CFGS : N_CFGS - 1;
    double r[N_CFGS][99], diff[N_CFGS] = {0};
    for (int c = 0; c < ncfg; c++) /* warm-up, and outputs against the VM's */
      if (!pass(&s, c, &d, n, c == 2 ? ref : NULL)) {
        fprintf(stderr, "bench_ablation: %s: %s\n", k->name, sheaf_ctx_last_error(ctx));
        return 1;
      }
    for (int c = 0; c < ncfg; c++) {
      if (!pass(&s, c, &d, n, got)) return 1;
      for (int t = 0; t < n; t++) {
        double e = got[t] > ref[t] ? got[t] - ref[t] : ref[t] - got[t];
        if (e > diff[c]) diff[c] = e;
      }
    }
    for (int round = 0; round < rounds; round++)
      for (int c = 0; c < ncfg; c++) {
        double t0 = exb_now_s(false);
        if (!pass(&s, c, &d, n, NULL)) return 1;
        r[c][round] = n / (exb_now_s(false) - t0);
      }
    for (int c = 0; c < ncfg; c++) qsort(r[c], (size_t)rounds, sizeof **r, cmp_d);
    double base = r[0][rounds / 2];
    for (int row = 0; row < 7; row++) {
      static const int row_cfg[7] = {0, 1, -1, 2, -1, 3, 4};
      int c = row_cfg[row];
      if (c < 0) {
        printf("| %s | %lld | %s | %s | | |\n", k->name, (long long)k->H, rows[row],
               row == 2 ? "always on in Sheaf: parameters are never batched or copied, GEMMs read them packed once"
                        : "not implemented: no depth hint reaches the runtime");
        continue;
      }
      if (k_cfgs[c].linear && !s.lin) {
        printf("| %s | %lld | %s | does not linearize | | |\n", k->name, (long long)k->H, rows[row]);
        continue;
      }
      printf("| %s | %lld | %s | %.0f (%.0f-%.0f) | %.2fx | %.2g |\n", k->name, (long long)k->H, rows[row],
             r[c][rounds / 2], r[c][0], r[c][rounds - 1], r[c][rounds / 2] / base, diff[c]);
      if (!k_cfgs[c].linear && diff[c] > 1e-5) rc = 1;
    }
    const char *rep = sh_dyncoarse_report(s.dc);
    if (!rep[0]) printf("#   %s %lld: no function of vectors to coarsen (its cell is one builtin op)\n", k->name,
                        (long long)k->H);
    for (const char *p = rep; *p;) {
      const char *e = strchr(p, '\n');
      int len = e ? (int)(e - p) : (int)strlen(p);
      printf("#   %.*s\n", len, p);
      p += len + (e ? 1 : 0);
    }
    setup_free(&s);
  }
  free(ref);
  free(got);
  sh_dataset_free(&d);
  sheaf_ctx_free(ctx);
  return rc;
}
