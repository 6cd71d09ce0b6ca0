/*
 * bench_lang.c — the model language against the C API (issue 5): the
 * binary TreeLSTM written in examples/treelstm.sf, compiled and run as
 * `sheaf run MODEL.sf` does, by the compiled host program (the VM,
 * src/lang/hostprog.h: the default) and by the AST walker (interp.c,
 * `--host ast`), against the same model written in C
 * (src/models/treelstm.c), on the bundled EWT trees, binarized, with the
 * same weights (the C model's seeded weights, saved and loaded by the
 * language's binder): outputs compared over every tree (the VM's bit for
 * bit with the walker's), then throughput of the three at each batch size
 * and thread count.
 *
 *   bench_lang [--quick] [--json FILE] [--hidden 256] [--embed 256]
 *              [--batch 64,1,10] [--threads 1] [--trees N] [--rounds N] [--data FILE]
 *
 * Throughput = trees / wall time of whole passes over the same trees (per
 * batch: graph reset, build every tree, flush, read every output; the
 * language sides also turn each tree into its ADT value and free the
 * batch's host values), best of several windows. The three systems'
 * windows alternate, the order rotating each round (C, walker, VM; walker,
 * VM, C; ...), so a noisy minute hits all. Targets (issue 5, hidden 256,
 * 1 thread): language (the VM) / C >= 0.9 at batch 64 and >= 0.8 at batch
 * 1. Each row is followed by where the time of the last window went, per
 * tree (the graph's counters): nodes, batches, and microseconds of build
 * (the program's own work included: the walker, the VM, or the C model's
 * recursion), schedule and kernels; and the build ratios.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "bench_util.h"
#include "lang/interp.h"

#define EWT_TEST "data/ud_english_ewt/en_ewt-ud-test.conllu"
#define MODEL_SF "examples/treelstm.sf"
#define MAXL EXB_MAXL
#define C_OUT SH_TREELSTM_CLASSES

/* The language side: a compiled and bound program. */
typedef struct lang_net {
  const sh_dataset *d;
  sh_module m;
  bool have_m;
  char *src;
  size_t len;
  sheaf_model *model;
  sh_lang_bind bind;
  sh_interp *ip;
  const char *host; /* "vm" or "ast" */
} lang_net;

/* One system as the timed pass sees it: builds instance i's output. */
typedef struct side {
  sheaf_status (*build)(struct side *s, sheaf_graph *g, int32_t i, sheaf_expr *out);
  const sh_net *net; /* the C API */
  lang_net *l;       /* the language */
  sheaf_expr *ex;    /* one batch of outputs */
  float *out;        /* [trees, C_OUT]: the outputs of the last pass */
} side;

static void usage(void) {
  fprintf(stderr, "usage: bench_lang [--quick] [--json FILE] [--hidden LIST] [--embed N]\n"
                  "                  [--batch LIST] [--threads LIST] [--trees N] [--rounds N]\n"
                  "                  [--data FILE]\n");
  exit(2);
}

static sheaf_status c_build(side *s, sheaf_graph *g, int32_t i, sheaf_expr *out) {
  return sh_net_build(s->net, g, i, out);
}

static sheaf_status lang_build(side *s, sheaf_graph *g, int32_t i, sheaf_expr *out) {
  lang_net *l = s->l;
  const sh_dataset *d = l->d;
  sh_value in, res;
  sheaf_status st = sh_interp_tree(l->ip, &d->tb, d->tb.tree_root[i], d->ids, &in);
  if (st == SHEAF_OK) st = sh_interp_main(l->ip, g, in, &res);
  if (st == SHEAF_OK && res.kind != SH_V_TENSOR)
    return sh_fail(d->ctx, SHEAF_ERR_INTERNAL, "%s: main did not return a tensor", MODEL_SF);
  *out = res.t;
  return st;
}

/* Per batch: reset, build every tree, flush, read every output (and free
 * the language's host values). */
static sheaf_status pass(void *arg, sheaf_graph *g, int32_t count, int32_t batch) {
  side *s = arg;
  sheaf_status st = SHEAF_OK;
  for (int32_t b = 0; b < count && st == SHEAF_OK; b += batch) {
    int32_t end = b + batch < count ? b + batch : count;
    st = sheaf_graph_reset(g);
    for (int32_t i = b; i < end && st == SHEAF_OK; i++) st = s->build(s, g, i, &s->ex[i - b]);
    if (st == SHEAF_OK) st = sheaf_graph_flush(g);
    for (int32_t i = b; i < end && st == SHEAF_OK; i++) {
      sheaf_value_view v;
      st = sheaf_value(g, s->ex[i - b], &v);
      if (st == SHEAF_OK) memcpy(s->out + (size_t)i * C_OUT, v.data, C_OUT * sizeof(float));
    }
    if (s->l) sh_interp_reset(s->l->ip);
  }
  return st;
}

/* Compiles examples/treelstm.sf and binds it to the weights in wpath. */
static bool lang_open(sheaf_ctx *ctx, const sh_dataset *d, const char *wpath, sh_interp_host host,
                      lang_net *l) {
  memset(l, 0, sizeof *l);
  l->d = d;
  l->host = host == SH_HOST_VM ? "vm" : "ast";
  if (sh_file_read(ctx, MODEL_SF, &l->src, &l->len) != SHEAF_OK) return false;
  l->have_m = true;
  if (sh_lang_compile(&l->m, ctx, MODEL_SF, l->src, l->len) != SHEAF_OK) {
    sh_buf b;
    sh_buf_init(&b, ctx);
    sh_diags_render(&l->m.diags, &b);
    if (b.data) fputs((const char *)b.data, stderr);
    sh_buf_free(&b);
    return false;
  }
  sh_lang_bind_opts bo = {.weights = wpath, .vocab = d->vocab};
  return sheaf_model_create(ctx, &l->model) == SHEAF_OK &&
         sh_lang_bind_model(&l->m, l->model, &bo, &l->bind) == SHEAF_OK &&
         sh_interp_create(&l->m, &l->bind, &l->ip) == SHEAF_OK && sh_interp_set_host(l->ip, host) == SHEAF_OK;
}

static void lang_close(sheaf_ctx *ctx, lang_net *l) {
  sh_interp_free(l->ip);
  sh_lang_bind_free(ctx, &l->bind);
  sheaf_model_free(l->model);
  if (l->have_m) sh_module_free(&l->m);
  if (l->src) sh_free(ctx, l->src, l->len + 1);
}

int main(int argc, char **argv) {
  exb_opts o = {.data = EWT_TEST, .no_torch = true, .hidden = {256}, .nh = 1,
                .batch = {64, 1, 10}, .nb = 3, .threads = {1}, .nt = 1};
  long embed = 256, rounds = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    bool has = i + 1 < argc;
    if (!strcmp(a, "--quick")) o.quick = true;
    else if (!strcmp(a, "--json") && has) o.json = argv[++i];
    else if (!strcmp(a, "--data") && has) o.data = argv[++i];
    else if (!strcmp(a, "--trees") && has) o.count = strtol(argv[++i], NULL, 10);
    else if (!strcmp(a, "--rounds") && has) rounds = strtol(argv[++i], NULL, 10);
    else if (!strcmp(a, "--embed") && has) embed = strtol(argv[++i], NULL, 10);
    else if (!strcmp(a, "--hidden") && has) {
      if (!exb_parse_list(argv[++i], o.hidden, MAXL, &o.nh)) usage();
    } else if (!strcmp(a, "--batch") && has) {
      if (!exb_parse_list(argv[++i], o.batch, MAXL, &o.nb)) usage();
    } else if (!strcmp(a, "--threads") && has) {
      if (!exb_parse_list(argv[++i], o.threads, MAXL, &o.nt)) usage();
    } else usage();
  }
  if (embed < 1 || embed > 65536 || rounds < 0 || rounds > 1000) usage();
  int max_batch = 1;
  for (int i = 0; i < o.nb; i++) max_batch = o.batch[i] > max_batch ? o.batch[i] : max_batch;
  exb_env e;
  if (!exb_setup("bench_lang", &o, SH_DATASET_BINARY, 512, &e)) return 1;
  sheaf_ctx *ctx = e.ctx;
  const sh_dataset *d = &e.d;
  int32_t S = e.n;
  double min_s = o.quick ? 0.2 : 0.5;
  if (rounds == 0) rounds = o.quick ? 2 : 5;
  int64_t nodes = sh_dataset_size_range(d, 0, S);
  printf("TreeLSTM (binary, Tai et al. 2015): %s (compiled host program: vm; AST walker: ast) vs "
         "src/models/treelstm.c (C API), same weights\n%s binarized: %d trees, %lld nodes, embed %d\n",
         MODEL_SF, o.data, (int)S, (long long)nodes, (int)embed);
  printf("sheaf %s, isa %s; trees/s = trees / wall time of whole passes (build + schedule + "
         "kernels + reading outputs), best of %d rounds of alternating windows (order rotating) of >= %.2f s\n",
         sheaf_version(), sheaf_isa_name(sheaf_cpu_isa()), (int)rounds, min_s);

  float *out[3]; /* C, walker, VM */
  for (int k = 0; k < 3; k++) out[k] = malloc((size_t)S * C_OUT * sizeof(float));
  sheaf_expr *ex = malloc((size_t)max_batch * sizeof *ex);
  if (!out[0] || !out[1] || !out[2] || !ex) {
    fprintf(stderr, "bench_lang: out of memory\n");
    return 1;
  }
  static const char *const names[3] = {"C", "ast", "vm"};
  int misses = 0, vm_differs = 0;
  double worst_diff = 0;
  for (int hi = 0; hi < o.nh; hi++) {
    int H = o.hidden[hi];
    sh_net net;
    sh_net_outputs one;
    lang_net la, lv;
    const char *wpath;
    if (!exb_net_open(&e, SH_NET_TREELSTM, H, (int)embed, 1, &net, &one, &wpath)) return 1;
    sh_net_outputs_free(&one);
    if (!lang_open(ctx, d, wpath, SH_HOST_AST, &la) || !lang_open(ctx, d, wpath, SH_HOST_VM, &lv)) {
      fprintf(stderr, "bench_lang: %s\n", sheaf_ctx_last_error(ctx));
      return 1;
    }
    char host[256];
    sh_interp_host_describe(lv.ip, host, sizeof host);
    side sd[3] = {{c_build, &net, NULL, ex, out[0]}, {lang_build, NULL, &la, ex, out[1]},
                  {lang_build, NULL, &lv, ex, out[2]}};
    sheaf_model *models[3] = {net.model, la.model, lv.model};
    /* the same outputs: every tree, batch 64, 1 thread */
    {
      sheaf_graph_opts go = {SHEAF_POLICY_SHEAF, 1, NULL};
      for (int k = 0; k < 3; k++) {
        sheaf_graph *g = NULL;
        if (sheaf_graph_create(models[k], &go, &g) != SHEAF_OK ||
            pass(&sd[k], g, S, max_batch < 64 ? max_batch : 64) != SHEAF_OK) {
          fprintf(stderr, "bench_lang: %s\n", sheaf_ctx_last_error(ctx));
          return 1;
        }
        sheaf_graph_free(g);
      }
      double diff = 0;
      for (size_t k = 0; k < (size_t)S * C_OUT; k++) {
        double dk = fabs((double)out[0][k] - out[1][k]);
        diff = dk > diff || isnan(dk) ? dk : diff;
      }
      double rel = sh_max_rel_err(out[1], out[0], S, C_OUT);
      bool same = diff <= 1e-5;
      bool vm_same = !memcmp(out[1], out[2], (size_t)S * C_OUT * sizeof(float));
      vm_differs += !vm_same;
      printf("\nhidden %d: outputs of all %d trees (5 log-probabilities each): max |sf - C| = "
             "%.3g, max rel %.3g: %s; vm vs ast: %s\n%s\n",
             H, (int)S, diff, rel, same ? "same" : "** MISMATCH **",
             vm_same ? "bit-identical" : "** DIFFERENT **", host);
      worst_diff = isnan(diff) || diff > worst_diff ? diff : worst_diff;
      exb_json_rec("\"system\": \"check\", \"model\": \"treelstm\", \"hidden\": %d, "
                   "\"trees\": %d, \"max_abs_diff\": %.3g, \"vm_bit_identical\": %s",
                   H, (int)S, diff, vm_same ? "true" : "false");
    }
    for (int ti = 0; ti < o.nt; ti++) {
      int T = o.threads[ti];
      printf("\nhidden %d, %d thread%s\n", H, T, T > 1 ? "s" : "");
      printf("  %5s | %10s %10s %10s | %7s %7s %7s %-10s\n", "batch", "C API", "ast", "vm", "ast/C",
             "vm/C", "vm/ast", "target");
      for (int bi = 0; bi < o.nb; bi++) {
        int B = o.batch[bi];
        double rate[3] = {0, 0, 0};
        sheaf_graph_stats st[3]; /* of the last window of each */
        long np[3];
        for (int r = 0; r < rounds; r++) /* rotate which system goes first */
          for (int k0 = 0; k0 < 3; k0++) {
            int k = (k0 + r) % 3;
            double v = exb_rate(models[k], pass, &sd[k], SHEAF_POLICY_SHEAF, T, B, S, min_s, 1, &st[k], &np[k]);
            if (v <= 0) {
              fprintf(stderr, "bench_lang: %s\n", sheaf_ctx_last_error(ctx));
              return 1;
            }
            rate[k] = fmax(rate[k], v);
          }
        double ratio = rate[2] / rate[0], target = B == 64 ? 0.9 : B == 1 ? 0.8 : 0;
        char tgt[32] = "";
        if (target > 0 && H == 256 && T == 1) {
          snprintf(tgt, sizeof tgt, ">= %.1f %s", target, ratio >= target ? "met" : "MISSED");
          misses += ratio < target;
        }
        printf("  %5d | %10.1f %10.1f %10.1f | %7.3f %7.3f %7.3f %-10s\n", B, rate[0], rate[1], rate[2],
               rate[1] / rate[0], ratio, rate[2] / rate[1], tgt);
        double build[3];
        printf("        per tree (nodes, batches, build, schedule, kernel us):");
        for (int k = 0; k < 3; k++) { /* where the time goes, per tree */
          double per = 1e-3 / ((double)np[k] * S);
          build[k] = (double)st[k].ns_build * per;
          printf(" %s %.0f %.1f %.1f %.1f %.1f%s", names[k], (double)st[k].nodes * 1e3 * per,
                 (double)st[k].batches * 1e3 * per, build[k], (double)st[k].ns_schedule * per,
                 (double)st[k].ns_kernels * per, k < 2 ? ";" : "\n");
        }
        printf("        build: ast/C %.2f, vm/C %.2f, vm/ast %.2f\n", build[1] / build[0], build[2] / build[0],
               build[2] / build[1]);
        fflush(stdout);
        static const char *const sys[3] = {"sheaf-c-api", "sheaf-lang-ast", "sheaf-lang"};
        for (int k = 0; k < 3; k++)
          exb_json_rec("\"system\": \"%s\", \"model\": \"treelstm\", \"hidden\": %d, "
                       "\"batch\": %d, \"threads\": %d, \"trees_per_s\": %.2f, \"build_us_per_tree\": %.3f",
                       sys[k], H, B, T, rate[k], build[k]);
      }
    }
    lang_close(ctx, &la);
    lang_close(ctx, &lv);
    sh_net_free(&net);
  }
  if (worst_diff > 1e-5 || isnan(worst_diff))
    printf("\nWARNING: the language's outputs differ from the C API's\n");
  if (vm_differs) printf("\nWARNING: the VM's outputs differ from the walker's\n");
  if (misses) printf("\n%d throughput target%s missed\n", misses, misses > 1 ? "s" : "");
  for (int k = 0; k < 3; k++) free(out[k]);
  free(ex);
  exb_finish(&e);
  return vm_differs ? 1 : 0;
}
