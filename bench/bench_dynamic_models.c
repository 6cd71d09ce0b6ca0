/*
 * bench_dynamic_models.c — two rows of `make bench-dynamic`
 * (bench_dynamic.h's bench_dyn_extra_models hook): the early-exit
 * classifier (src/models/early_exit.c: 6 stacked LSTM layers, a 5-class
 * head after each, exit at max probability >= 0.9) and the arc-standard
 * shift-reduce parser (src/models/parser.c), each on the first n EWT
 * sentences, with their DyNet peers (bench/early_exit_dynet.cc,
 * bench/parser_dynet.cc) on the same weights and inputs.
 *
 * Files written for the peers (env->tmp_path): NAME.safetensors (the
 * weights, sheaf_model_save) and NAME.sents:
 *   early_exit LAYERS CLASSES THRESHOLD     (the early-exit model only)
 *   sents N
 *   LEN ROW ROW ...                         (one line per sentence: embedding rows)
 * The peers' --check output, one line per sentence: early exit "EXIT P0 ..
 * P(C-1)", parser "HEAD1 .. HEADn".
 *
 * Built with -DBENCH_DYN_MODELS_MAIN (make bench-dynamic-models) it is a
 * program of its own that times just these two rows: see the end.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_dynamic.h"
#include "models/early_exit.h"
#include "models/parser.h"

enum { EE_LAYERS = 6, EE_CLASSES = 5 };

typedef struct dyn_state {
  int kind; /* 0 early exit, 1 parser */
  sheaf_model *m;
  sh_early_exit ee;
  sh_parser pa;
  int32_t n, *rows, *off; /* sentence i: rows[off[i] .. off[i+1]) */
  int64_t hidden;
  /* outputs: batched (b) and single (s) */
  int *exit_b, *exit_s;
  float *probs_b, *probs_s;
  int32_t *heads_b, *heads_s;
  char weights[512], data[512], args[1200];
} dyn_state;

static void dyn_free(void *st) {
  dyn_state *s = st;
  if (!s) return;
  sheaf_model_free(s->m);
  free(s->rows);
  free(s->off);
  free(s->exit_b);
  free(s->exit_s);
  free(s->probs_b);
  free(s->probs_s);
  free(s->heads_b);
  free(s->heads_s);
  free(s);
}

static bool write_sents(const dyn_state *s, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return false;
  if (s->kind == 0)
    fprintf(f, "early_exit %d %d %.9g\n", s->ee.layers, s->ee.classes, (double)s->ee.threshold);
  fprintf(f, "sents %d\n", (int)s->n);
  for (int32_t i = 0; i < s->n; i++) {
    fprintf(f, "%d", (int)(s->off[i + 1] - s->off[i]));
    for (int32_t k = s->off[i]; k < s->off[i + 1]; k++) fprintf(f, " %d", (int)s->rows[k]);
    fputc('\n', f);
  }
  return fclose(f) == 0;
}

static void *dyn_setup(const bench_dyn_env *env, int kind) {
  dyn_state *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  const sh_dataset *d = env->sents;
  s->kind = kind;
  s->n = env->n < d->n_sents ? env->n : d->n_sents;
  s->hidden = env->hidden;
  s->off = malloc(((size_t)s->n + 1) * sizeof *s->off);
  int32_t tokens = d->sent_off[s->n] - d->sent_off[0];
  s->rows = malloc((size_t)tokens * sizeof *s->rows);
  s->exit_b = calloc((size_t)s->n, sizeof *s->exit_b);
  s->exit_s = calloc((size_t)s->n, sizeof *s->exit_s);
  s->probs_b = calloc((size_t)s->n * EE_CLASSES, sizeof *s->probs_b);
  s->probs_s = calloc((size_t)s->n * EE_CLASSES, sizeof *s->probs_s);
  s->heads_b = calloc((size_t)tokens, sizeof *s->heads_b);
  s->heads_s = calloc((size_t)tokens, sizeof *s->heads_s);
  if (!s->off || !s->rows || !s->exit_b || !s->exit_s || !s->probs_b || !s->probs_s || !s->heads_b ||
      !s->heads_s) {
    fprintf(stderr, "bench_dynamic: out of memory\n");
    dyn_free(s);
    return NULL;
  }
  for (int32_t i = 0; i <= s->n; i++) s->off[i] = d->sent_off[i] - d->sent_off[0];
  for (int32_t k = 0; k < tokens; k++) s->rows[k] = sh_word_id(d->ids, d->sent_words[d->sent_off[0] + k]);
  const char *name = kind == 0 ? "early_exit" : "parser";
  sheaf_status st = sheaf_model_create(env->ctx, &s->m);
  if (!st && kind == 0) st = sh_early_exit_declare(s->m, s->hidden, d->vocab, EE_LAYERS, EE_CLASSES, &s->ee);
  if (!st && kind == 0) st = sh_early_exit_seed(s->m, &s->ee, 7);
  if (!st && kind == 1) st = sh_parser_declare(s->m, s->hidden, d->vocab, &s->pa);
  if (!st && kind == 1) st = sh_parser_seed(s->m, &s->pa, 11);
  snprintf(s->weights, sizeof s->weights, "%s", env->tmp_path(kind == 0 ? "early_exit.safetensors"
                                                                       : "parser.safetensors"));
  snprintf(s->data, sizeof s->data, "%s", env->tmp_path(kind == 0 ? "early_exit.sents" : "parser.sents"));
  if (!st) st = sheaf_model_save(s->m, s->weights);
  if (st) {
    fprintf(stderr, "bench_dynamic: %s: %s\n", name, sheaf_ctx_last_error(env->ctx));
    dyn_free(s);
    return NULL;
  }
  if (!write_sents(s, s->data)) {
    fprintf(stderr, "bench_dynamic: %s: cannot write %s\n", name, s->data);
    dyn_free(s);
    return NULL;
  }
  snprintf(s->args, sizeof s->args, "--weights %s --sents %s", s->weights, s->data);
  return s;
}

static void *ee_setup(const bench_dyn_env *env) { return dyn_setup(env, 0); }
static void *pa_setup(const bench_dyn_env *env) { return dyn_setup(env, 1); }
static sheaf_model *dyn_model(void *st) { return ((dyn_state *)st)->m; }
static const char *dyn_args(void *st) { return ((dyn_state *)st)->args; }

static sheaf_status ee_batched(void *st, sheaf_runner *r) {
  dyn_state *s = st;
  return sh_early_exit_run_many(r, &s->ee, s->rows, s->off, 0, s->n, 1, s->exit_b, s->probs_b);
}
static sheaf_status ee_single(void *st, sheaf_runner *r) {
  dyn_state *s = st;
  return sh_early_exit_run_many(r, &s->ee, s->rows, s->off, 0, s->n, 0, s->exit_s, s->probs_s);
}
static sheaf_status pa_batched(void *st, sheaf_runner *r) {
  dyn_state *s = st;
  return sh_parser_run_many(r, &s->pa, s->rows, s->off, 0, s->n, 1, s->heads_b, NULL);
}
static sheaf_status pa_single(void *st, sheaf_runner *r) {
  dyn_state *s = st;
  return sh_parser_run_many(r, &s->pa, s->rows, s->off, 0, s->n, 0, s->heads_s, NULL);
}

static bool ee_differ(const dyn_state *s, int32_t i, int exit_layer, const float *probs) {
  if (exit_layer != s->exit_b[i]) return true;
  for (int c = 0; c < EE_CLASSES; c++)
    if (!(fabsf(probs[c] - s->probs_b[i * EE_CLASSES + c]) <= 1e-5f)) return true;
  return false;
}

static long ee_mismatches(void *st) {
  dyn_state *s = st;
  long bad = 0;
  for (int32_t i = 0; i < s->n; i++) bad += ee_differ(s, i, s->exit_s[i], s->probs_s + i * EE_CLASSES);
  return bad;
}

static long pa_mismatches(void *st) {
  dyn_state *s = st;
  long bad = 0;
  for (int32_t i = 0; i < s->n; i++)
    bad += memcmp(s->heads_b + s->off[i], s->heads_s + s->off[i],
                  (size_t)(s->off[i + 1] - s->off[i]) * sizeof *s->heads_b) != 0;
  return bad;
}

/* The peer's check file, one line per sentence (see the top). */
static long dyn_dynet_mismatches(void *st, const char *path) {
  dyn_state *s = st;
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long bad = 0;
  for (int32_t i = 0; i < s->n && bad >= 0; i++) {
    if (s->kind == 0) {
      int e;
      float pr[EE_CLASSES];
      bool ok = fscanf(f, "%d", &e) == 1;
      for (int c = 0; c < EE_CLASSES && ok; c++) ok = fscanf(f, "%f", &pr[c]) == 1;
      if (!ok) bad = -1;
      else bad += ee_differ(s, i, e, pr);
    } else {
      bool differ = false;
      for (int32_t k = s->off[i]; k < s->off[i + 1]; k++) {
        int h;
        if (fscanf(f, "%d", &h) != 1) {
          bad = -1;
          break;
        }
        differ |= h != s->heads_b[k];
      }
      if (bad >= 0) bad += differ;
    }
  }
  fclose(f);
  return bad;
}

static void ee_describe(void *st, char *out, size_t cap) {
  dyn_state *s = st;
  int hist[EE_LAYERS + 1] = {0};
  double sum = 0;
  for (int32_t i = 0; i < s->n; i++) hist[s->exit_b[i]]++, sum += s->exit_b[i];
  snprintf(out, cap, "exit layer mean %.2f of %d (layers 1..6: %d %d %d %d %d %d), hidden %lld",
           sum / s->n, EE_LAYERS, hist[1], hist[2], hist[3], hist[4], hist[5], hist[6],
           (long long)s->hidden);
}

static void pa_describe(void *st, char *out, size_t cap) {
  dyn_state *s = st;
  int32_t mx = 0;
  for (int32_t i = 0; i < s->n; i++) mx = s->off[i + 1] - s->off[i] > mx ? s->off[i + 1] - s->off[i] : mx;
  snprintf(out, cap, "sentence length mean %.1f, max %d (2n-1 actions), hidden %lld",
           (double)s->off[s->n] / s->n, (int)mx, (long long)s->hidden);
}

static const bench_dyn_model rows[] = {
    {"early-exit", "sentences", ee_setup, dyn_model, ee_batched, ee_single, ee_mismatches,
     "early_exit_dynet", dyn_args, dyn_dynet_mismatches, ee_describe, dyn_free},
    {"parser", "sentences", pa_setup, dyn_model, pa_batched, pa_single, pa_mismatches, "parser_dynet",
     dyn_args, dyn_dynet_mismatches, pa_describe, dyn_free},
};

const bench_dyn_model *bench_dyn_extra_models(int *n) {
  *n = (int)(sizeof rows / sizeof rows[0]);
  return rows;
}

#ifdef BENCH_DYN_MODELS_MAIN
/* ------------------------------------------------------------------------
 * The standalone program (make bench-dynamic-models): these two rows alone,
 * timed as bench_dynamic.h describes. Flags: --hidden N (256), --n N (64),
 * --quick, --dynet-dir DIR (build/peers/dynet), --no-dynet, --stats (the
 * runtime's counters and batch sizes). Sheaf batched
 * and single run alternately, the best of each kept; the context switch's
 * share is (switches per pass x ns per switch) / pass time.
 */
#include <unistd.h>

#include "base/fiber.h"
#include "bench_util.h"

static char g_tmp[256];
static char g_path[512];
static const char *tmp_path(const char *name) {
  snprintf(g_path, sizeof g_path, "%s/%s", g_tmp, name);
  return g_path;
}

/* Passes of fn over min_s seconds: instances/s (0 on error). */
static double pass_rate(sheaf_status (*fn)(void *, sheaf_runner *), void *st, sheaf_runner *r, int32_t n,
                        double min_s) {
  uint64_t t0 = sheaf_time_ns(), t;
  long passes = 0;
  do {
    if (fn(st, r)) return 0;
    passes++;
    t = sheaf_time_ns();
  } while ((double)(t - t0) < min_s * 1e9);
  return (double)passes * n / ((double)(t - t0) * 1e-9);
}

/* DyNet's rate at --dynet-autobatch ab (0: not measured; why in *why). */
static double dynet_rate(const char *bin, int ab, const char *args, const char *check, bool quick,
                         char *why, size_t cap) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "%s --dynet-autobatch %d --dynet-mem 1024 %s --check %s --min-time %s --rounds %d 2>&1",
           bin, ab, args, check, quick ? "0.3" : "1", quick ? 2 : 3);
  FILE *p = popen(cmd, "r");
  if (!p) {
    snprintf(why, cap, "cannot run %.300s", bin);
    return 0;
  }
  char line[1024];
  double r = 0;
  why[0] = 0;
  while (fgets(line, sizeof line, p)) {
    const char *k = strstr(line, "\"inst_per_s\":");
    if (k) r = atof(k + 13);
    else if (line[0] != '#' && !why[0]) snprintf(why, cap, "%.300s", line);
  }
  pclose(p);
  return r;
}

int main(int argc, char **argv) {
  int64_t hidden = 256;
  int32_t n = 64;
  bool quick = false, dynet = true, stats = false;
  const char *dydir = "build/peers/dynet";
  for (int a = 1; a < argc; a++) {
    if (!strcmp(argv[a], "--quick")) quick = true;
    else if (!strcmp(argv[a], "--no-dynet")) dynet = false;
    else if (!strcmp(argv[a], "--stats")) stats = true;
    else if (!strcmp(argv[a], "--hidden") && a + 1 < argc) hidden = atoll(argv[++a]);
    else if (!strcmp(argv[a], "--n") && a + 1 < argc) n = atoi(argv[++a]);
    else if (!strcmp(argv[a], "--dynet-dir") && a + 1 < argc) dydir = argv[++a];
    else {
      fprintf(stderr, "usage: bench_dynamic_models [--hidden N] [--n N] [--quick] [--dynet-dir DIR] [--no-dynet] [--stats]\n");
      return 2;
    }
  }
  if (!sh_fiber_supported()) {
    printf("bench_dynamic_models: fibers are unsupported on this architecture\n");
    return 0;
  }
  snprintf(g_tmp, sizeof g_tmp, "/tmp/sheaf-bench-dyn-XXXXXX");
  if (!mkdtemp(g_tmp)) {
    perror("bench_dynamic_models: mkdtemp");
    return 1;
  }
  sheaf_ctx_options co = {0};
  co.threads = 1;
  sheaf_ctx *ctx = NULL;
  char err[512];
  if (sheaf_ctx_create(&co, &ctx, err, sizeof err)) {
    fprintf(stderr, "bench_dynamic_models: %s\n", err);
    return 1;
  }
  sh_dataset d;
  if (sh_dataset_load(ctx, "data/ud_english_ewt/en_ewt-ud-test.conllu", SH_DATASET_SENTS, &d)) {
    fprintf(stderr, "bench_dynamic_models: %s\n", sheaf_ctx_last_error(ctx));
    return 1;
  }
  bench_dyn_env env = {ctx, &d, n, hidden, quick, tmp_path};
  double sw = exb_fiber_switch_ns(quick ? 200000 : 1000000, 3, false);
  printf("# %d EWT sentences, hidden %lld, 1 thread; context switch %.1f ns\n", (int)n, (long long)hidden, sw);
  printf("%-11s %10s %10s %8s %10s %7s %7s %9s %8s %s\n", "model", "batched/s", "single/s", "b/s", "dynet/s",
         "b/dy", "inst/fl", "switch%", "mism b/s", "dynet mismatches");
  int nrows = 0;
  const bench_dyn_model *rs = bench_dyn_extra_models(&nrows);
  int rc = 0;
  for (int k = 0; k < nrows; k++) {
    const bench_dyn_model *row = &rs[k];
    void *st = row->setup(&env);
    if (!st) {
      rc = 1;
      continue;
    }
    sheaf_runner_opts ob = {64, 1, SHEAF_POLICY_SHEAF, SHEAF_PARALLEL_AUTO, NULL};
    sheaf_runner_opts o1 = {1, 1, SHEAF_POLICY_SHEAF, SHEAF_PARALLEL_AUTO, NULL};
    sheaf_runner *rb = NULL, *r1 = NULL;
    if (sheaf_runner_create(row->model(st), &ob, &rb) || sheaf_runner_create(row->model(st), &o1, &r1) ||
        row->run_batched(st, rb) || row->run_single(st, r1)) {
      fprintf(stderr, "bench_dynamic_models: %s: %s\n", row->name, sheaf_ctx_last_error(ctx));
      rc = 1;
      goto next;
    }
    sheaf_runner_stats_reset(rb);
    sheaf_runner_stats_reset(r1);
    uint64_t i0, w0, f0;
    sheaf_runner_fiber_counts(rb, &i0, &w0, &f0);
    double best_b = 0, best_1 = 0, min_s = quick ? 0.2 : 0.5;
    for (int rep = 0; rep < (quick ? 2 : 4); rep++) { /* alternating, best of each */
      double b = pass_rate(row->run_batched, st, rb, n, min_s);
      double s1 = pass_rate(row->run_single, st, r1, n, min_s);
      if (b == 0 || s1 == 0) {
        fprintf(stderr, "bench_dynamic_models: %s: %s\n", row->name, sheaf_ctx_last_error(ctx));
        rc = 1;
        goto next;
      }
      best_b = b > best_b ? b : best_b;
      best_1 = s1 > best_1 ? s1 : best_1;
    }
    uint64_t i1, w1, f1;
    sheaf_runner_fiber_counts(rb, &i1, &w1, &f1);
    double inst = (double)(i1 - i0), waits = (double)(w1 - w0), fl = (double)(f1 - f0);
    double per_flush = fl > 0 ? waits / fl : 0;
    double frac = 2.0 * (inst + waits) / inst * sw * 1e-9 * best_b; /* switch time per instance x rate */
    long mism = row->mismatches(st);
    if (stats) {
      sheaf_graph_stats gs, g1;
      sheaf_runner_get_stats(rb, &gs);
      sheaf_runner_get_stats(r1, &g1);
      printf("#   %s batched: %llu batches, %.1f nodes/batch, build %.0f ms, schedule %.0f ms, kernels %.0f ms,"
             " %.1f GFLOP/s in kernels\n", row->name, (unsigned long long)gs.batches,
             (double)gs.nodes / (double)gs.batches, gs.ns_build * 1e-6, gs.ns_schedule * 1e-6,
             gs.ns_kernels * 1e-6, (double)gs.flops / (double)gs.ns_kernels);
      printf("#   %s single: %llu batches, build %.0f ms, schedule %.0f ms, kernels %.0f ms, %.1f GFLOP/s in kernels\n",
             row->name, (unsigned long long)g1.batches, g1.ns_build * 1e-6, g1.ns_schedule * 1e-6,
             g1.ns_kernels * 1e-6, (double)g1.flops / (double)g1.ns_kernels);
      const char *names[64];
      uint64_t kb[64], kn[64];
      size_t nk = sheaf_runner_kernel_stats(rb, 64, names, kb, kn);
      for (size_t q = 0; q < nk; q++)
        printf("#     %-24s %8llu batches, %.1f per batch\n", names[q], (unsigned long long)kb[q],
               (double)kn[q] / (double)kb[q]);
    }
    double dy = 0;
    int dy_ab = -1;
    char note[1000] = "", why[400] = "";
    if (dynet && row->dynet_bin) {
      char bin[700], check[600];
      snprintf(bin, sizeof bin, "%s/bin/%s", dydir, row->dynet_bin);
      snprintf(check, sizeof check, "%s", tmp_path("dynet.check"));
      if (access(bin, X_OK)) {
        snprintf(note, sizeof note, "DyNet peer %s not built (make install-dynet)", bin);
      } else {
        long dm = -2;
        for (int ab = 0; ab <= 2; ab++) {
          remove(check);
          double r = dynet_rate(bin, ab, row->dynet_args(st), check, quick, why, sizeof why);
          long m = row->dynet_mismatches(st, check);
          dm = m > dm ? m : dm;
          printf("#   %s: dynet autobatch %d: %.1f %s/s%s%s\n", row->name, ab, r, row->unit, r ? "" : ": ", r ? "" : why);
          if (r > dy) dy = r, dy_ab = ab;
        }
        snprintf(note, sizeof note, "%ld (worst of autobatch 0..2; best: autobatch %d)", dm, dy_ab);
      }
    } else {
      snprintf(note, sizeof note, "not run");
    }
    char dys[32] = "-", bdy[32] = "-";
    if (dy > 0) snprintf(dys, sizeof dys, "%.1f", dy), snprintf(bdy, sizeof bdy, "%.2fx", best_b / dy);
    printf("%-11s %10.1f %10.1f %7.2fx %10s %7s %7.1f %8.3f%% %8ld %s\n", row->name, best_b, best_1,
           best_b / best_1, dys, bdy, per_flush, 100 * frac, mism, note);
    if (row->describe) {
      char desc[300];
      row->describe(st, desc, sizeof desc);
      printf("#   %s: %s\n", row->name, desc);
    }
  next:
    sheaf_runner_free(rb);
    sheaf_runner_free(r1);
    row->teardown(st);
  }
  sh_dataset_free(&d);
  sheaf_ctx_free(ctx);
  char rm[300];
  snprintf(rm, sizeof rm, "rm -rf %s", g_tmp);
  if (system(rm)) rc = rc ? rc : 1;
  return rc;
}
#endif
