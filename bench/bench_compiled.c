/*
 * bench_compiled.c — the linearized mode (src/compile/linear.h) against the
 * dynamic runtime (the interpreter issuing graph ops, policy sheaf) on the
 * same EWT trees with the same seeded weights, in one run: TreeLSTM hidden
 * 256 (E = 256) at batch 64 and batch 1, TreeFC, MV-RNN and TreeLSTM at
 * hidden 64 (batch 64); on the same file's sentences GRU (hidden 64), the
 * BiLSTM tagger (hidden 64 and 128), the 2-layer tagger, the trigram CNN,
 * attention pooling, handnorm, the char tagger (token records) and seq2seq
 * (a decoder attending over the encoder's states; hidden 64) and the
 * transformer layer (d 64:
 * 4 heads of 16, FFN 256), batch 64 (rows per second are then
 * sentences per second); 1 thread; windows alternate (dynamic, linear) per
 * round and the ratio is taken per round (median, min-max). For TreeLSTM
 * 256 batch 64: the fraction of the GEMM ceiling (sh_gemm M = 64, N = 5H,
 * K = 2H, B packed, 1 thread, measured in the same run) the linear mode's
 * useful FLOPs reach, and the linear mode at 2 threads against 1. Compile
 * time of each model's kernels: cold (an empty cache directory) and warm
 * (a second create, cache hits). DyNet (bench/treelstm_dynet.cc, built by
 * scripts/install_dynet.sh; 1 thread, --dynet-autobatch 0, 1 and 2, the
 * best compared) runs in the same run on the same trees and weights for the
 * TreeLSTM 256 rows: those rows bind examples/treelstm.sf to the C-API
 * TreeLSTM's seeded weights (src/models/treelstm.c, the weights DyNet reads),
 * and the linear mode's outputs are checked against that model's. Without
 * the peer the output says "DyNet: not available (why)".
 *
 *   bench_compiled [--trees N] [--rounds R] [--quick] [--data FILE] [--only K] [--cache DIR]
 *                  [--no-dynet] [--dynet-dir DIR] [--scaling] [--cpu-time] [--linear-only]
 *
 * --only K[,K...]: those configurations (0-based, in the table's order) only; --cache
 * DIR: the kernel cache directory to use and keep (default: a fresh one,
 * removed at the end, so "cold" is a cold compile); --scaling: every row's
 * linear mode at 2 threads against 1 (rounds alternating), not only
 * TreeLSTM 256 batch 64's; --cpu-time: the 1-thread windows (dynamic,
 * linear) timed on the calling thread's CPU clock, which a loaded host
 * perturbs less than the wall clock (2-thread figures stay wall time);
 * --linear-only: each row's linear passes alone (rounds windows, with the
 * GEMM ceiling for the TreeLSTM 256 batch 64 row), for profiling.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/file.h"
#include "bench_util.h"
#include "compile/linear.h"
#include "io/dataset.h"
#include "lang/interp.h"

typedef struct setup {
  sheaf_ctx *ctx;
  sh_module m;
  char *src;
  size_t len;
  sheaf_model *model;
  sh_lang_bind bind;
  sh_lin *lin;
  char names[8][16];
} setup;

static void setup_free(setup *s) {
  sh_lin_free(s->lin);
  sh_lang_bind_free(s->ctx, &s->bind);
  sheaf_model_free(s->model);
  sh_module_free(&s->m);
  if (s->src) sh_free(s->ctx, s->src, s->len + 1);
}

/* weights: a safetensors file, or NULL for the seed. */
static bool setup_open(sheaf_ctx *ctx, const char *path, const char *const *sizes, const sh_dataset *d,
                       const char *weights, setup *s, double *compile_s) {
  memset(s, 0, sizeof *s);
  s->ctx = ctx;
  char why[512] = "";
  sh_lang_bind_opts bo = {.weights = weights, .seed = 11, .vocab = d->vocab};
  for (int i = 0; sizes[i]; i++) {
    const char *eq = strchr(sizes[i], '=');
    snprintf(s->names[i], sizeof s->names[i], "%.*s", (int)(eq - sizes[i]), sizes[i]);
    bo.override_name[i] = s->names[i];
    bo.override_value[i] = atoll(eq + 1);
    bo.n_overrides++;
  }
  if (sh_file_read(ctx, path, &s->src, &s->len) || sh_lang_compile(&s->m, ctx, path, s->src, s->len) ||
      sh_module_require_main(&s->m) || sheaf_model_create(ctx, &s->model) ||
      sh_lang_bind_model(&s->m, s->model, &bo, &s->bind)) {
    fprintf(stderr, "bench_compiled: %s: %s\n", path, sheaf_ctx_last_error(ctx));
    return false;
  }
  double t0 = exb_now_s(false);
  if (sh_lin_create(&s->m, s->model, &s->bind, &s->lin, why, sizeof why)) {
    fprintf(stderr, "bench_compiled: %s: %s\n", path, why[0] ? why : sheaf_ctx_last_error(ctx));
    return false;
  }
  if (compile_s) *compile_s = exb_now_s(false) - t0;
  return true;
}

static volatile float sink;

/* One pass of the dynamic runtime over trees [0, n), batch b: build, flush,
 * read every output. */
static bool pass_dynamic(setup *s, sh_interp *ip, sheaf_graph *g, const sh_dataset *d, int n, int b) {
  sh_value res[256];
  for (int first = 0; first < n; first += b) {
    int cnt = first + b <= n ? b : n - first;
    for (int t = 0; t < cnt; t++) {
      sh_value in;
      if (sh_interp_tree(ip, &d->tb, d->tb.tree_root[first + t], d->ids, &in) ||
          sh_interp_main(ip, g, in, &res[t]))
        return false;
    }
    if (sheaf_graph_flush(g)) return false;
    for (int t = 0; t < cnt; t++) {
      sheaf_expr e[4];
      size_t k = sh_value_tensors(res[t], e, 4);
      sheaf_value_view v;
      if (k < 1 || sheaf_value(g, e[0], &v)) return false;
      sink += v.data[0];
    }
    if (sheaf_graph_reset(g)) return false;
    sh_interp_reset(ip);
  }
  (void)s;
  return true;
}

static bool pass_linear(setup *s, const sh_dataset *d, int n, int b) {
  for (int first = 0; first < n; first += b) {
    int cnt = first + b <= n ? b : n - first;
    if (sh_lin_run(s->lin, &d->tb, first, cnt, d->ids)) return false;
    for (int t = 0; t < cnt; t++) sink += sh_lin_output(s->lin, t, 0)[0];
  }
  return true;
}

/* Token records (chartagger.sf): the sentences' CoNLL-U columns and texts,
 * fed to both modes as `sheaf run` feeds them. */
static sh_lin_records recs;

/* Sequence models (gru.sf, bilstm.sf): the same passes over sentences
 * [0, n) of the EWT sentences (every output read); rec: main takes token
 * records (recs' columns). */
static bool pass_dynamic_sents(sh_interp *ip, sheaf_graph *g, const sh_dataset *d, int n, int b, bool rec) {
  sh_value res[256];
  int32_t w[1024];
  for (int first = 0; first < n; first += b) {
    int cnt = first + b <= n ? b : n - first;
    for (int t = 0; t < cnt; t++) {
      int32_t off = d->sent_off[first + t], len = d->sent_off[first + t + 1] - off;
      if (len > 1024) return false;
      for (int32_t k = 0; k < len; k++) w[k] = sh_word_id(d->ids, d->sent_words[off + k]);
      sh_value in;
      if (rec) { /* recs' columns are set only for a records model */
        sh_token_cols tc = {len, w, recs.upos + off, recs.xpos + off, recs.deprel + off, recs.head + off,
                            recs.form + off, recs.form_len + off};
        if (sh_interp_records(ip, &tc, &in)) return false;
      } else if (sh_interp_ints(ip, w, len, &in)) {
        return false;
      }
      if (sh_interp_main(ip, g, in, &res[t])) return false;
    }
    if (sheaf_graph_flush(g)) return false;
    for (int t = 0; t < cnt; t++) {
      sheaf_expr e[1024];
      size_t k = sh_value_tensors(res[t], e, 1024);
      for (size_t j = 0; j < k && j < 1024; j++) {
        sheaf_value_view v;
        if (sheaf_value(g, e[j], &v)) return false;
        sink += v.data[0];
      }
    }
    if (sheaf_graph_reset(g)) return false;
    sh_interp_reset(ip);
  }
  return true;
}

static bool pass_dynamic_seq(sh_interp *ip, sheaf_graph *g, const sh_dataset *d, int n, int b) {
  return pass_dynamic_sents(ip, g, d, n, b, false);
}

static bool pass_dynamic_seq_s(setup *s, sh_interp *ip, sheaf_graph *g, const sh_dataset *d, int n, int b) {
  (void)s;
  return pass_dynamic_seq(ip, g, d, n, b);
}

static bool pass_linear_seq(setup *s, const sh_dataset *d, int n, int b) {
  for (int first = 0; first < n; first += b) {
    int cnt = first + b <= n ? b : n - first;
    if (sh_lin_run_seq(s->lin, d->sent_off, d->sent_words, first, cnt, d->ids)) return false;
    for (int t = 0; t < cnt; t++)
      for (int32_t k = 0; k < sh_lin_output_rows(s->lin, t); k++) sink += sh_lin_output_row(s->lin, t, k, 0)[0];
  }
  return true;
}


static bool pass_dynamic_rec(setup *s, sh_interp *ip, sheaf_graph *g, const sh_dataset *d, int n, int b) {
  (void)s;
  return pass_dynamic_sents(ip, g, d, n, b, true);
}

static bool pass_linear_rec(setup *s, const sh_dataset *d, int n, int b) {
  for (int first = 0; first < n; first += b) {
    int cnt = first + b <= n ? b : n - first;
    if (sh_lin_run_rec(s->lin, d->sent_off, d->sent_words, &recs, first, cnt, d->ids)) return false;
    for (int t = 0; t < cnt; t++)
      for (int32_t k = 0; k < sh_lin_output_rows(s->lin, t); k++) sink += sh_lin_output_row(s->lin, t, k, 0)[0];
  }
  return true;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Useful FLOPs of the TreeLSTM on trees [0, n): GEMMs only (leaf E x 3H,
 * node 2H x 5H, output H x C). */
static double treelstm_flops(const sh_dataset *d, int n, int64_t E, int64_t H, int64_t C) {
  double f = 0;
  for (int t = 0; t < n; t++) {
    int32_t lo = d->tb.tree_first[t], hi = lo + d->tb.tree_size[t];
    for (int32_t v = lo; v < hi; v++) {
      int32_t nc = d->tb.n_children[v];
      if (nc == 0) f += 2.0 * (double)E * 3 * H;
      else if (nc == 2) f += 2.0 * 2 * H * 5 * H;
    }
    f += 2.0 * H * C;
  }
  return f;
}

/* The TreeLSTM's GEMMs on trees [0, n) in batches of b, shaped as the
 * linearized mode runs them (its levels, docs/COMPILER.md "The inspector"):
 * per batch one (leaves, 3H, E) product, one (internal nodes of height h,
 * 5H, 2H) per height, one (roots of height h, C, H) per root height. The
 * list (malloc'd) and its length in *count; NULL when out of memory. */
static exb_mnk *treelstm_levels(const sh_dataset *d, int n, int b, int64_t E, int64_t H, int64_t C, int *count) {
  const sh_treebank *tb = &d->tb;
  int32_t *height = malloc((size_t)(tb->n_nodes > 0 ? tb->n_nodes : 1) * sizeof *height);
  int cap = 64, k = 0;
  exb_mnk *out = malloc((size_t)cap * sizeof *out);
  int64_t *nodes = calloc(SH_TB_MAX_DEPTH + 2, sizeof *nodes), *roots = calloc(SH_TB_MAX_DEPTH + 2, sizeof *roots);
  if (!height || !out || !nodes || !roots) goto fail;
  for (int first = 0; first < n; first += b) {
    int cnt = first + b <= n ? b : n - first, top = 0;
    int64_t leaves = 0;
    for (int t = first; t < first + cnt; t++) {
      int32_t lo = tb->tree_first[t], hi = lo + tb->tree_size[t];
      for (int32_t v = lo; v < hi; v++) { /* post-order: children first */
        int32_t h = 0;
        for (int32_t c = 0; c < tb->n_children[v]; c++) {
          int32_t ch = height[tb->children[tb->child_off[v] + c]] + 1;
          h = ch > h ? ch : h;
        }
        height[v] = h;
        if (h == 0) leaves++;
        else nodes[h]++;
        top = h > top ? h : top;
      }
      roots[height[tb->tree_root[t]]]++;
    }
    for (int h = 0; h <= top; h++) {
      int64_t m[2] = {h == 0 ? leaves : nodes[h], roots[h]}; /* this height's level of tree and of main */
      for (int j = 0; j < 2; j++) {
        if (!m[j]) continue;
        if (k == cap) {
          exb_mnk *q = realloc(out, (size_t)(cap *= 2) * sizeof *out);
          if (!q) goto fail;
          out = q;
        }
        out[k++] = j == 1 ? (exb_mnk){m[j], C, H} : h == 0 ? (exb_mnk){m[j], 3 * H, E} : (exb_mnk){m[j], 5 * H, 2 * H};
      }
      nodes[h] = roots[h] = 0;
    }
  }
  free(height), free(nodes), free(roots);
  *count = k;
  return out;
fail:
  free(height), free(out), free(nodes), free(roots);
  return NULL;
}

/* The DyNet peer on the TreeLSTM 256 rows: the C-API TreeLSTM's seeded
 * weights (which those rows' model binds too) and its outputs for the first
 * 64 trees, the peer's rates at batch 64 and 1 (cells[0], cells[1]). */
typedef struct dynet_side {
  exb_env e;
  sh_net net;
  sh_net_outputs ref;
  const char *wpath; /* NULL: the net could not be made */
  exb_cell cells[2];
  bool ran;
} dynet_side;

static bool dynet_start(sheaf_ctx *ctx, const sh_dataset *d, int n, const exb_opts *o, const exb_peer *p,
                        dynet_side *y) {
  memset(y, 0, sizeof *y);
  y->e = (exb_env){.prog = "bench_compiled", .ctx = ctx, .d = *d, .n = n, .min_s = 0.5, .rounds = 3};
  y->e.data_file = exb_tmp_path("trees.txt");
  if (!exb_write_trees(d, n, y->e.data_file)) {
    fprintf(stderr, "bench_compiled: cannot write %s\n", y->e.data_file);
    return false;
  }
  if (!exb_net_open(&y->e, SH_NET_TREELSTM, 256, 256, 64, &y->net, &y->ref, &y->wpath)) return false;
  static const int batches[2] = {64, 1};
  printf("# DyNet TreeLSTM 256, 1 thread, --dynet-autobatch 0, 1, 2, batches 64 and 1, same %d trees and weights:\n",
         n);
  exb_note_dynet(o, p);
  y->ran = exb_dynet(o, &y->e, p, y->wpath, NULL, batches, 2, &y->ref, y->cells) >= 0;
  return true;
}

/* Largest |linear - C API| over the first min(64, n) trees at batch 64. */
static double dynet_check(setup *s, const dynet_side *y, const sh_dataset *d) {
  int32_t c = y->ref.count;
  if (sh_lin_run(s->lin, &d->tb, 0, c, d->ids)) return INFINITY;
  double worst = 0;
  for (int32_t t = 0; t < c; t++) {
    const float *a = sh_lin_output(s->lin, t, 0), *b = sh_net_outputs_row(&y->ref, t, 0);
    for (int64_t k = 0; k < y->ref.dim; k++) worst = fmax(worst, fabs((double)a[k] - b[k]));
  }
  return worst;
}

typedef struct cfg {
  const char *name, *path;
  const char *sizes[6];
  int batch;
  bool ceiling; /* TreeLSTM 256 batch 64: GEMM ceiling and 2 threads */
  int64_t E, H, C;
} cfg;

/* The configurations whose model takes dependency trees (Dep(i32, list[T])). */
static bool takes_dep_trees(const cfg *k) { return strstr(k->path, "/childsum.sf") || strstr(k->path, "/treeattn.sf"); }

/* The configurations whose model takes sentences (list[i32]), not trees. */
static bool takes_sentences(const cfg *k) {
  return strstr(k->path, "/gru.sf") || strstr(k->path, "/bilstm.sf") || strstr(k->path, "/tagger2.sf") ||
         strstr(k->path, "/cnn.sf") || strstr(k->path, "/attnpool.sf") || strstr(k->path, "/handnorm.sf") ||
         strstr(k->path, "/transformer.sf") || strstr(k->path, "/chartagger.sf") || strstr(k->path, "/seq2seq.sf");
}

/* --linear-only: configuration k's linear passes alone, `rounds` windows
 * (for a profile of the linear mode: no dynamic run, no DyNet); for the
 * TreeLSTM 256 batch 64 row the GEMM ceiling timed before each window, as
 * the table's rows do. */
static bool linear_only(sheaf_ctx *ctx, const cfg *k, const sh_dataset *dk, int nb, int rounds, bool cpu_time) {
  setup s;
  if (!setup_open(ctx, k->path, k->sizes, dk, NULL, &s, NULL)) return false;
  bool (*lin)(setup *, const sh_dataset *, int, int) = pass_linear;
  if (takes_sentences(k)) lin = pass_linear_seq;
  if (strstr(k->path, "/chartagger.sf")) lin = pass_linear_rec;
  if (!lin(&s, dk, nb, k->batch)) {
    fprintf(stderr, "bench_compiled: %s\n", sheaf_ctx_last_error(ctx));
    setup_free(&s);
    return false;
  }
  double rl[99], frac[99], ceil_r[99], lev_r[99], lfrac[99];
  double fl = k->ceiling ? treelstm_flops(dk, nb, k->E, k->H, k->C) : 0;
  int n_lev = 0;
  exb_mnk *lev = k->ceiling ? treelstm_levels(dk, nb, k->batch, k->E, k->H, k->C, &n_lev) : NULL;
  if (k->ceiling && !lev) {
    setup_free(&s);
    return false;
  }
  bool was = exb_cpu_time;
  exb_cpu_time = cpu_time; /* the ceiling on the same clock */
  for (int r = 0; r < rounds; r++) {
    if (k->ceiling) ceil_r[r] = exb_gemm_gflops(ctx, 1, 64, 5 * k->H, 2 * k->H, 0.2);
    if (k->ceiling) lev_r[r] = exb_gemm_list_gflops(ctx, 1, lev, n_lev, 0.2);
    double t0 = exb_now_s(cpu_time);
    lin(&s, dk, nb, k->batch);
    double t1 = exb_now_s(cpu_time);
    rl[r] = nb / (t1 - t0);
    if (k->ceiling) frac[r] = fl / (t1 - t0) * 1e-9 / ceil_r[r], lfrac[r] = fl / (t1 - t0) * 1e-9 / lev_r[r];
  }
  exb_cpu_time = was;
  qsort(rl, (size_t)rounds, sizeof *rl, cmp_d);
  printf("| %s | %lld | %d | linear only: %.0f rows/s (median; %.0f-%.0f) |\n", k->name, (long long)k->H, k->batch,
         rl[rounds / 2], rl[0], rl[rounds - 1]);
  if (k->ceiling) {
    qsort(frac, (size_t)rounds, sizeof *frac, cmp_d);
    qsort(ceil_r, (size_t)rounds, sizeof *ceil_r, cmp_d);
    printf("#   GEMM ceiling %.1f GFLOP/s (median); linear reaches %.0f%% of it (median, %.0f-%.0f%% per round)\n",
           ceil_r[rounds / 2], 100 * frac[rounds / 2], 100 * frac[0], 100 * frac[rounds - 1]);
    qsort(lev_r, (size_t)rounds, sizeof *lev_r, cmp_d);
    qsort(lfrac, (size_t)rounds, sizeof *lfrac, cmp_d);
    printf("#   the same GEMMs as the levels (sh_gemm over the %d (M, N, K) of the leaves', nodes' and roots' levels, "
           "B packed, 1 thread) %.1f GFLOP/s (median); linear reaches %.0f%% of it (median, %.0f-%.0f%% per round)\n",
           n_lev, lev_r[rounds / 2], 100 * lfrac[rounds / 2], 100 * lfrac[0], 100 * lfrac[rounds - 1]);
  }
  free(lev);
  fflush(stdout);
  setup_free(&s);
  return true;
}

int main(int argc, char **argv) {
  int n = 512, rounds = 5, only = -1;
  bool scaling = false, cpu_time = false; /* --cpu-time: the 1-thread windows on the thread's CPU clock */
  bool lin_only = false; /* --linear-only: the linear passes alone (profiling; no dynamic run, no DyNet) */
  const char *keep = NULL;
  exb_opts xo = {0};
  const char *data = "data/ud_english_ewt/en_ewt-ud-test.conllu";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--trees") && i + 1 < argc) n = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--data") && i + 1 < argc) data = argv[++i];
    else if (!strcmp(argv[i], "--quick")) n = 128, rounds = 3;
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) { /* a list: 0,1,4 */
      only = 0;
      for (const char *q = argv[++i]; *q; q += *q == ',') {
        char *end;
        long k = strtol(q, &end, 10);
        if (end == q || k < 0 || k > 30) {
          fprintf(stderr, "bench_compiled: --only: expected a list of configuration numbers, got '%s'\n", argv[i]);
          return 2;
        }
        only |= 1 << k;
        q = end;
      }
    }
    else if (!strcmp(argv[i], "--cache") && i + 1 < argc) keep = argv[++i];
    else if (!strcmp(argv[i], "--no-dynet")) xo.no_dynet = true;
    else if (!strcmp(argv[i], "--scaling")) scaling = true;
    else if (!strcmp(argv[i], "--cpu-time")) cpu_time = true;
    else if (!strcmp(argv[i], "--linear-only")) lin_only = true, xo.no_dynet = true;
    else if (!strcmp(argv[i], "--dynet-dir") && i + 1 < argc) xo.dynet_dir = argv[++i];
    else {
      fprintf(stderr, "usage: bench_compiled [--trees N] [--rounds R] [--quick] [--data FILE] [--only K] "
                      "[--cache DIR] [--no-dynet] [--dynet-dir DIR] [--scaling] [--cpu-time] [--linear-only]\n");
      return 2;
    }
  }
  if (rounds < 1 || rounds > 99 || n < 1) return 2;
  /* a fresh cache directory: the first create of each model is cold */
  char cache[] = "/tmp/sheaf_bench_compiled_XXXXXX";
  if (!keep && !mkdtemp(cache)) return 1;
  setenv("SHEAF_CACHE_DIR", keep ? keep : cache, 1);
  sheaf_ctx *ctx1 = NULL, *ctx2 = NULL;
  sheaf_ctx_options o1 = {.threads = 1}, o2 = {.threads = 2};
  if (sheaf_ctx_create(&o1, &ctx1, NULL, 0) || sheaf_ctx_create(&o2, &ctx2, NULL, 0)) return 1;
  sh_dataset d;
  if (sh_dataset_load(ctx1, data, SH_DATASET_BINARY, &d)) {
    fprintf(stderr, "bench_compiled: %s\n", sheaf_ctx_last_error(ctx1));
    return 1;
  }
  if (n > sh_dataset_count(&d)) n = sh_dataset_count(&d);
  sh_dataset ds, dc; /* the same file's sentences and dependency trees */
  if (sh_dataset_load(ctx1, data, SH_DATASET_SENTS, &ds) || sh_dataset_load(ctx1, data, SH_DATASET_CHILDSUM, &dc)) {
    fprintf(stderr, "bench_compiled: %s\n", sheaf_ctx_last_error(ctx1));
    return 1;
  }
  int32_t n_tok = ds.sent_off[ds.n_sents];
  const char **forms = malloc(((size_t)n_tok + 1) * sizeof *forms);
  size_t *form_lens = malloc(((size_t)n_tok + 1) * sizeof *form_lens);
  if (!forms || !form_lens) return 1;
  for (int32_t k = 0; k < n_tok; k++) {
    forms[k] = sh_vocab_str(&ds.words, ds.sent_words[k]);
    form_lens[k] = sh_vocab_len(&ds.words, ds.sent_words[k]);
  }
  recs = (sh_lin_records){ds.sent_tags, ds.sent_xpos, ds.sent_deprel, ds.sent_head, forms, form_lens};
  printf("# bench_compiled: %d EWT trees, %d rounds, windows alternating dynamic / linear, 1 thread, isa %s\n", n,
         rounds, sheaf_isa_name(sheaf_cpu_isa()));
  const exb_peer peer = {"bench/treelstm_torch.py", "--trees", NULL, "tree", {NULL, NULL}, "treelstm_dynet"};
  dynet_side dy;
  if (!lin_only && (only < 0 || (only & 3))) {
    if (!dynet_start(ctx1, &d, n, &xo, &peer, &dy)) return 1;
  } else {
    memset(&dy, 0, sizeof dy);
  }
  static const cfg cfgs[] = {
      {"TreeLSTM", "examples/treelstm.sf", {"H=256", "E=256", "C=5", NULL}, 64, true, 256, 256, 5},
      {"TreeLSTM", "examples/treelstm.sf", {"H=256", "E=256", "C=5", NULL}, 1, false, 256, 256, 5},
      {"TreeFC", "examples/treefc.sf", {"H=64", NULL}, 64, false, 0, 64, 0},
      {"MV-RNN", "examples/mvrnn.sf", {"H=64", "Vm=1000", NULL}, 64, false, 0, 64, 0},
      {"TreeLSTM", "examples/treelstm.sf", {"H=64", "E=64", "C=5", NULL}, 64, false, 64, 64, 5},
      {"GRU", "examples/gru.sf", {"H=64", "E=64", "C=5", NULL}, 64, false, 64, 64, 5},
      {"BiLSTM tagger", "examples/bilstm.sf", {"H=64", "E=64", "T=17", NULL}, 64, false, 64, 64, 17},
      {"BiLSTM tagger", "examples/bilstm.sf", {"H=128", "E=128", "T=17", NULL}, 64, false, 128, 128, 17},
      {"ChildSum", "examples/childsum.sf", {"H=64", "E=64", NULL}, 64, false, 64, 64, 0},
      {"TreeAttn", "examples/treeattn.sf", {"H=64", "E=64", "C=5", NULL}, 64, false, 64, 64, 5},
      {"ChildSum", "examples/childsum.sf", {"H=256", "E=256", NULL}, 64, false, 256, 256, 0},
      {"Transformer layer", "examples/transformer.sf", {"DK=16", "F=256", NULL}, 64, false, 64, 64, 0},
      {"2-layer BiLSTM tagger", "examples/tagger2.sf", {"H=64", "E=64", "T=17", NULL}, 64, false, 64, 64, 17},
      {"Trigram CNN", "examples/cnn.sf", {"F=64", "E=64", "C=5", NULL}, 64, false, 64, 64, 5},
      {"Attention pooling", "examples/attnpool.sf", {"H=64", "E=64", "C=5", NULL}, 64, false, 64, 64, 5},
      {"Hand-written norms", "examples/handnorm.sf", {"H=64", NULL}, 64, false, 0, 64, 0},
      {"Char tagger (records)", "examples/chartagger.sf", {"E=64", "H=64", "T=17", NULL}, 64, false, 64, 64, 17},
      {"Seq2seq with attention", "examples/seq2seq.sf", {"E=64", "H=64", "C=17", NULL}, 64, false, 64, 64, 17},
  };
  printf("| model | hidden | batch | dynamic trees/s | linear trees/s | linear / dynamic (median, min-max) | "
         "compile cold / warm |\n|---|---:|---:|---:|---:|---:|---|\n");
  int rc = 0;
  for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
    const cfg *k = &cfgs[c];
    if (only >= 0 && !(only >> c & 1)) continue;
    int nb = k->batch == 1 ? (n < 128 ? n : 128) : n; /* batch 1: fewer trees, same per-tree work */
    if (takes_sentences(k) && nb > sh_dataset_count(&ds)) nb = sh_dataset_count(&ds);
    const sh_dataset *dk = takes_sentences(k) ? &ds : takes_dep_trees(k) ? &dc : &d;
    setup s, warm;
    double cold_s = 0, warm_s = 0;
    if (lin_only) {
      if (!linear_only(ctx1, k, dk, nb, rounds, cpu_time)) return 1;
      continue;
    }
    bool with_dynet = k->H == 256 && strstr(k->path, "/treelstm.sf") && dy.wpath; /* the TreeLSTM 256 rows: the C-API model's weights */
    const char *wts = with_dynet ? dy.wpath : NULL;
    if (!setup_open(ctx1, k->path, k->sizes, dk, wts, &s, &cold_s)) return 1;
    if (!setup_open(ctx1, k->path, k->sizes, dk, wts, &warm, &warm_s)) return 1;
    setup_free(&warm);
    sh_interp *ip = NULL;
    sheaf_graph *g = NULL;
    if (sh_interp_create(&s.m, &s.bind, &ip) || sheaf_graph_create(s.model, NULL, &g)) return 1;
    /* warm-up */
    bool (*dyn)(setup *, sh_interp *, sheaf_graph *, const sh_dataset *, int, int) = pass_dynamic;
    bool (*lin)(setup *, const sh_dataset *, int, int) = pass_linear;
    if (takes_sentences(k)) dyn = pass_dynamic_seq_s, lin = pass_linear_seq;
    if (strstr(k->path, "/chartagger.sf")) dyn = pass_dynamic_rec, lin = pass_linear_rec;
    if (!dyn(&s, ip, g, dk, nb, k->batch) || !lin(&s, dk, nb, k->batch)) {
      fprintf(stderr, "bench_compiled: %s\n", sheaf_ctx_last_error(ctx1));
      return 1;
    }
    double rd[99], rl[99], ratio[99];
    for (int r = 0; r < rounds; r++) { /* 1 thread: --cpu-time reads the thread's CPU clock */
      double t0 = exb_now_s(cpu_time);
      dyn(&s, ip, g, dk, nb, k->batch);
      double t1 = exb_now_s(cpu_time);
      lin(&s, dk, nb, k->batch);
      double t2 = exb_now_s(cpu_time);
      rd[r] = nb / (t1 - t0), rl[r] = nb / (t2 - t1), ratio[r] = rl[r] / rd[r];
    }
    qsort(rd, (size_t)rounds, sizeof *rd, cmp_d);
    qsort(rl, (size_t)rounds, sizeof *rl, cmp_d);
    qsort(ratio, (size_t)rounds, sizeof *ratio, cmp_d);
    printf("| %s | %lld | %d | %.0f | %.0f | %.2fx (%.2f-%.2f) | %.2f s / %.1f ms |\n", k->name, (long long)k->H,
           k->batch, rd[rounds / 2], rl[rounds / 2], ratio[rounds / 2], ratio[0], ratio[rounds - 1], cold_s,
           warm_s * 1e3);
    if (with_dynet) {
      const exb_cell *dcell = &dy.cells[k->batch == 1 ? 1 : 0];
      int ab = 0;
      double best = exb_dynet_best(dcell, &ab);
      double diff = dynet_check(&s, &dy, &d);
      printf("#   check: max |linear - C API| = %.2g over the first %d trees (batch 64)%s\n", diff, (int)dy.ref.count,
             diff > 1e-4 ? "  ** MISMATCH **" : "");
      if (best > 0)
        printf("#   DyNet batch %d: %.0f / %.0f / %.0f trees/s (autobatch 0 / 1 / 2); linear / DyNet best (ab %d) "
               "%.2fx, dynamic / DyNet %.2fx (medians)\n",
               k->batch, dcell->dynet[0], dcell->dynet[1], dcell->dynet[2], ab, rl[rounds / 2] / best, rd[rounds / 2] / best);
      else
        printf("#   DyNet batch %d: not measured%s\n", k->batch, dy.ran ? " (the peer gave no rate)" : "");
    }
    fflush(stdout);
    if (scaling && !k->ceiling) { /* linear 2 threads / 1 thread, rounds alternating */
      double thr[99];
      setup s2;
      if (!setup_open(ctx2, k->path, k->sizes, dk, wts, &s2, NULL)) return 1;
      lin(&s2, dk, nb, k->batch);
      for (int r = 0; r < rounds; r++) {
        double t0 = exb_now_s(false);
        lin(&s, dk, nb, k->batch);
        double t1 = exb_now_s(false);
        lin(&s2, dk, nb, k->batch);
        double t2 = exb_now_s(false);
        thr[r] = (t1 - t0) / (t2 - t1);
      }
      qsort(thr, (size_t)rounds, sizeof *thr, cmp_d);
      printf("#   %s %lld batch %d: linear 2 threads / 1 thread %.2fx (median, %.2f-%.2f)\n", k->name, (long long)k->H,
             k->batch, thr[rounds / 2], thr[0], thr[rounds - 1]);
      fflush(stdout);
      setup_free(&s2);
    }
    if (k->ceiling) {
      double fl = treelstm_flops(&d, nb, k->E, k->H, k->C);
      double ceil_r[99], frac[99], thr[99];
      setup s2;
      if (!setup_open(ctx2, k->path, k->sizes, &d, wts, &s2, NULL)) return 1;
      pass_linear(&s2, &d, nb, k->batch);
      for (int r = 0; r < rounds; r++) {
        ceil_r[r] = exb_gemm_gflops(ctx1, 1, 64, 5 * k->H, 2 * k->H, 0.2);
        double t0 = exb_now_s(false);
        pass_linear(&s, &d, nb, k->batch);
        double t1 = exb_now_s(false);
        pass_linear(&s2, &d, nb, k->batch);
        double t2 = exb_now_s(false);
        frac[r] = fl / (t1 - t0) * 1e-9 / ceil_r[r];
        thr[r] = (t1 - t0) / (t2 - t1);
      }
      qsort(ceil_r, (size_t)rounds, sizeof *ceil_r, cmp_d);
      qsort(frac, (size_t)rounds, sizeof *frac, cmp_d);
      qsort(thr, (size_t)rounds, sizeof *thr, cmp_d);
      printf("#   TreeLSTM 256 batch 64: GEMM ceiling (sh_gemm 64 x %lld x %lld, 1 thread) %.1f GFLOP/s (median); "
             "linear reaches %.0f%% of it (median, %.0f-%.0f%% per round); linear 2 threads / 1 thread %.2fx "
             "(median, %.2f-%.2f)\n",
             (long long)(5 * k->H), (long long)(2 * k->H), ceil_r[rounds / 2], 100 * frac[rounds / 2],
             100 * frac[0], 100 * frac[rounds - 1], thr[rounds / 2], thr[0], thr[rounds - 1]);
      fflush(stdout);
      setup_free(&s2);
    }
    sheaf_graph_free(g);
    sh_interp_free(ip);
    setup_free(&s);
  }
  if (dy.wpath) {
    sh_net_outputs_free(&dy.ref);
    sh_net_free(&dy.net);
  }
  exb_tmp_cleanup();
  sh_dataset_free(&d);
  sh_dataset_free(&ds);
  sh_dataset_free(&dc);
  free(forms), free(form_lens);
  sheaf_ctx_free(ctx1);
  sheaf_ctx_free(ctx2);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", cache);
  if (!keep && system(cmd) != 0) rc = 0;
  return rc;
}
