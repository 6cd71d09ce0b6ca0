/*
 * bench_dynamic.c — `make bench-dynamic`: models whose control flow depends
 * on computed values, on the bundled EWT sentences, 64 instances, 1 thread
 * (rows: bench_dynamic.h; here the greedy seq2seq decoder and its beam
 * search of width 4, src/models/decoder.h and beam.h; more rows from
 * bench/bench_dynamic_models.c):
 *
 *   batched   sheaf_runner_run_fibers, one batch of 64: each instance waits
 *             at its sheaf_value, one flush per round for all live ones
 *   single    sheaf_runner_run, batch 1: one instance at a time, each
 *             sheaf_value a flush of its own graph
 *   DyNet     the row's DyNet peer (bench/NAME_dynet.cc, built by
 *             scripts/install_dynet.sh), one ComputationGraph per instance
 *             and a forward pass per value read (DyNet cannot suspend an
 *             instance), at --dynet-autobatch 0, 1, 2: the best reported
 *
 * Per row: instances/s (whole passes over the 64 instances; each round is a
 * batched window, a single window, then one run of each DyNet peer setting,
 * so every round's figures share the machine's load; best of --rounds
 * each), the ratios (also per round: min / median / max), mean live
 * instances per flush (fiber waits / flushes), kernel batches per flush,
 * the share of the batched run's time spent in context switches, measured
 * in situ: after the timed rounds, one more batched window runs with
 * sh_fiber_timing on (each resume and yield timed from its entry until the
 * other side runs again, the resumed stack's first touches included; see
 * fiber.h) and its switch time is divided by that window's time (same
 * clock); the old estimate, (instances + waits) x 2 x the warm-cache
 * microbench switch cost / batched time, prints beside it as "est.", and
 * mismatches: instances whose outputs differ between batched and single
 * Sheaf, and between Sheaf and DyNet.
 *
 *   bench_dynamic [--quick] [--hidden N] [--rounds R] [--data FILE]
 *                 [--no-dynet] [--dynet-dir DIR] [--kernels] [--cpu-time]
 *                 [--only NAME]
 *
 * --only NAME: only the row NAME (e.g. decoder-greedy, parser).
 * --side batched|single: time only that run (for a profiler; the other
 * rate prints as 0 and the ratios are meaningless).
 * --single-policy sheaf|none|depth|agenda: the one-at-a-time runner's
 * policy (default sheaf, its fastest: within one instance it batches the
 * beam's hypotheses; the batched runner always uses sheaf).
 * --cpu-time: every rate is instances per second of the thread's CPU time
 * instead of wall time (on a machine shared with other work the wall clock
 * counts their time slices too); the peers run with SHEAF_PEER_CPU_TIME=1
 * in their environment, which decoder_dynet.cc honours (it then prints
 * "# rates on the thread's CPU clock"; a peer that prints no such line
 * measured wall time).
 * --kernels also prints the batched run's kernels (batches and nodes each)
 * and its time split. --quick: windows of 0.2 s, one round unless --rounds
 * is given (e.g. --quick --rounds 5: five short interleaved rounds).
 */
#include "bench_dynamic.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/fiber.h"
#include "bench_util.h"
#include "models/beam.h"

#define N_INST 64

/* ---------------------------------------------------------- decoder rows */

typedef struct dec_row {
  const bench_dyn_env *env;
  sheaf_model *m;
  sh_decoder dec;
  int beam;
  int32_t *off, *ids;
  int32_t *toks[2], *len[2]; /* [0] batched, [1] single */
  float *score[2];
  char args[2048];
} dec_row;

static void dec_teardown(void *s) {
  dec_row *r = s;
  if (!r) return;
  sheaf_model_free(r->m);
  free(r->off);
  free(r->ids);
  for (int k = 0; k < 2; k++) free(r->toks[k]), free(r->len[k]), free(r->score[k]);
  free(r);
}

static void *dec_setup(const bench_dyn_env *env, int beam) {
  dec_row *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->env = env;
  r->beam = beam;
  const sh_dataset *d = env->sents;
  int32_t n = env->n;
  r->off = malloc((size_t)(n + 1) * sizeof *r->off);
  r->ids = malloc((size_t)d->sent_off[n] * sizeof *r->ids);
  bool ok = r->off && r->ids;
  for (int k = 0; k < 2 && ok; k++) {
    r->toks[k] = calloc((size_t)n * SH_DEC_MAX_LEN, sizeof *r->toks[k]);
    r->len[k] = calloc((size_t)n, sizeof *r->len[k]);
    r->score[k] = calloc((size_t)n, sizeof *r->score[k]);
    ok = r->toks[k] && r->len[k] && r->score[k];
  }
  if (!ok) {
    fprintf(stderr, "bench_dynamic: out of memory\n");
    dec_teardown(r);
    return NULL;
  }
  for (int32_t s = 0; s <= n; s++) r->off[s] = d->sent_off[s];
  for (int32_t w = 0; w < d->sent_off[n]; w++) r->ids[w] = sh_word_id(d->ids, d->sent_words[w]);
  char wname[64], dname[64];
  snprintf(wname, sizeof wname, "decoder-b%d.safetensors", beam);
  snprintf(dname, sizeof dname, "decoder-b%d-sents.txt", beam);
  const char *wpath = env->tmp_path(wname), *dpath = env->tmp_path(dname);
  if (sheaf_model_create(env->ctx, &r->m) ||
      sh_decoder_declare(r->m, env->hidden, env->hidden, d->vocab, &r->dec) ||
      sh_decoder_seed(r->m, &r->dec, 1) || sheaf_model_save(r->m, wpath)) {
    fprintf(stderr, "bench_dynamic: %s\n", sheaf_ctx_last_error(env->ctx));
    dec_teardown(r);
    return NULL;
  }
  FILE *f = fopen(dpath, "w");
  if (f) {
    fprintf(f, "sents %d\n", (int)n);
    for (int32_t s = 0; s < n; s++) {
      fprintf(f, "%d", (int)(r->off[s + 1] - r->off[s]));
      for (int32_t w = r->off[s]; w < r->off[s + 1]; w++) fprintf(f, " %d", (int)r->ids[w]);
      fputc('\n', f);
    }
  }
  if (!f || fclose(f)) {
    fprintf(stderr, "bench_dynamic: cannot write %s\n", dpath);
    dec_teardown(r);
    return NULL;
  }
  snprintf(r->args, sizeof r->args, "--weights %s --data %s --beam %d", wpath, dpath, beam);
  return r;
}

static void *dec_setup_greedy(const bench_dyn_env *env) { return dec_setup(env, 0); }
static void *dec_setup_beam(const bench_dyn_env *env) { return dec_setup(env, 4); }
static sheaf_model *dec_model(void *s) { return ((dec_row *)s)->m; }

static sheaf_status dec_run(dec_row *r, sheaf_runner *rn, int k) {
  sh_dec_batch b = {&r->dec, r->env->n, r->off, r->ids, r->beam, r->toks[k], r->len[k], r->score[k]};
  return k == 0 ? sheaf_runner_run_fibers(rn, 0, b.n, sh_dec_batch_build, NULL, &b)
                : sheaf_runner_run(rn, 0, b.n, sh_dec_batch_build, NULL, &b);
}
static sheaf_status dec_batched(void *s, sheaf_runner *rn) { return dec_run(s, rn, 0); }
static sheaf_status dec_single(void *s, sheaf_runner *rn) { return dec_run(s, rn, 1); }

static long dec_mismatches(void *s) {
  dec_row *r = s;
  long bad = 0;
  for (int32_t i = 0; i < r->env->n; i++) {
    const int32_t *b = r->toks[1] + i * SH_DEC_MAX_LEN;
    bool same = r->len[1][i] == r->len[0][i] &&
                !memcmp(b, r->toks[0] + i * SH_DEC_MAX_LEN, (size_t)r->len[0][i] * sizeof *b) &&
                fabs((double)r->score[1][i] - r->score[0][i]) <= 1e-5 * fmax(1.0, fabs((double)r->score[0][i]));
    bad += !same;
  }
  return bad;
}

static const char *dec_args(void *s) { return ((dec_row *)s)->args; }

/* The peer's check file: per instance a line "LEN SCORE T1 .. TLEN"; the
 * tokens must be identical (scores: the peer's own float sums, not compared
 * here beyond the tokens they select). */
static long dec_dynet_mismatches(void *s, const char *path) {
  dec_row *r = s;
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long bad = 0;
  for (int32_t i = 0; i < r->env->n; i++) {
    int len = 0;
    float sc = 0;
    int32_t t[SH_DEC_MAX_LEN];
    if (fscanf(f, "%d %f", &len, &sc) != 2 || len < 0 || len > SH_DEC_MAX_LEN) {
      fclose(f);
      return -1;
    }
    for (int k = 0; k < len; k++)
      if (fscanf(f, "%d", &t[k]) != 1) {
        fclose(f);
        return -1;
      }
    const int32_t *a = r->toks[0] + i * SH_DEC_MAX_LEN;
    bad += len != r->len[0][i] || memcmp(a, t, (size_t)len * sizeof *a);
  }
  fclose(f);
  return bad;
}

static void dec_describe(void *s, char *out, size_t cap) {
  dec_row *r = s;
  int32_t lo = SH_DEC_MAX_LEN, hi = 0, eos = 0;
  double sum = 0;
  for (int32_t i = 0; i < r->env->n; i++) {
    int32_t l = r->len[0][i];
    lo = l < lo ? l : lo;
    hi = l > hi ? l : hi;
    sum += l;
    eos += l > 0 && r->toks[0][i * SH_DEC_MAX_LEN + l - 1] == SH_DEC_EOS;
  }
  snprintf(out, cap, "output tokens mean %.1f (%d..%d), %d of %d ended at EOS", sum / r->env->n, (int)lo,
           (int)hi, (int)eos, (int)r->env->n);
}

static const bench_dyn_model builtin_rows[] = {
    {"decoder-greedy", "sentences", dec_setup_greedy, dec_model, dec_batched, dec_single, dec_mismatches,
     "decoder_dynet", dec_args, dec_dynet_mismatches, dec_describe, dec_teardown},
    {"decoder-beam4", "sentences", dec_setup_beam, dec_model, dec_batched, dec_single, dec_mismatches,
     "decoder_dynet", dec_args, dec_dynet_mismatches, dec_describe, dec_teardown},
};

__attribute__((weak)) const bench_dyn_model *bench_dyn_extra_models(int *n) {
  *n = 0;
  return NULL;
}

/* ---------------------------------------------------------------- timing */

static bool cpu_clock; /* --cpu-time: the thread's CPU clock, not the wall clock */
static int side = -1;  /* --side: 0 batched only, 1 single only, -1 both */

#define MAX_ROUNDS 32

typedef struct timing {
  double rate[2]; /* instances/s: batched, single (the best round) */
  double round_rate[2][MAX_ROUNDS];
  double batched_s;      /* seconds of the timed batched passes */
  uint64_t inst, waits, fflushes;
  sheaf_graph_stats gs;  /* batched runner, timed passes */
} timing;

/* Runs passes of one kind for at least min_s; passes done and seconds. */
static sheaf_status window(const bench_dyn_model *row, void *st, sheaf_runner *r, int k, double min_s,
                           long *passes, double *secs) {
  double t0 = exb_now_s(cpu_clock), t;
  *passes = 0;
  do {
    sheaf_status s = k == 0 ? row->run_batched(st, r) : row->run_single(st, r);
    if (s) return s;
    ++*passes;
    t = exb_now_s(cpu_clock);
  } while (t - t0 < min_s);
  *secs = t - t0;
  return SHEAF_OK;
}

/* Rounds of: a batched window, a single window, then between(u, round) (the
 * DyNet peers, so that every round's figures share the machine's load). */
static sheaf_status time_row(const bench_dyn_model *row, void *st, sheaf_runner *rb, sheaf_runner *rs,
                             int32_t n, double min_s, int rounds, void (*between)(void *u, int rd),
                             void *u, timing *tm) {
  memset(tm, 0, sizeof *tm);
  sheaf_status s;
  /* warm-up: the graphs' memory and packed weights */
  if ((s = row->run_batched(st, rb)) || (s = row->run_single(st, rs))) return s;
  uint64_t i0, w0, f0;
  sheaf_runner_fiber_counts(rb, &i0, &w0, &f0);
  sheaf_runner_stats_reset(rb);
  for (int rd = 0; rd < rounds; rd++) {
    for (int k = 0; k < 2; k++) { /* alternating: batched, single */
      if (side >= 0 && k != side) continue;
      long passes;
      double secs;
      if ((s = window(row, st, k == 0 ? rb : rs, k, min_s, &passes, &secs))) return s;
      double rate = (double)passes * n / secs;
      tm->round_rate[k][rd] = rate;
      if (rate > tm->rate[k]) tm->rate[k] = rate;
      if (k == 0) tm->batched_s += secs;
    }
    if (between) between(u, rd);
  }
  sheaf_runner_fiber_counts(rb, &tm->inst, &tm->waits, &tm->fflushes);
  tm->inst -= i0, tm->waits -= w0, tm->fflushes -= f0;
  sheaf_runner_get_stats(rb, &tm->gs);
  return SHEAF_OK;
}

/* --kernels: the batched runner's kernels (batches, nodes) and counters. */
static void print_kernels(const sheaf_runner *rb, const timing *t) {
  enum { MAXK = 256 };
  const char *names[MAXK];
  uint64_t kb[MAXK], kn[MAXK];
  size_t nk = sheaf_runner_kernel_stats(rb, MAXK, names, kb, kn);
  printf("    %-32s %10s %10s\n", "kernel (batched run)", "batches", "nodes");
  for (size_t k = 0; k < nk; k++)
    printf("    %-32s %10llu %10llu\n", names[k], (unsigned long long)kb[k], (unsigned long long)kn[k]);
  printf("    useful GFLOP %.2f, kernels %.3f s, schedule %.3f s, build %.3f s (timed passes)\n",
         (double)t->gs.flops * 1e-9, (double)t->gs.ns_kernels * 1e-9, (double)t->gs.ns_schedule * 1e-9,
         (double)t->gs.ns_build * 1e-9);
}

/* ----------------------------------------------------------------- DyNet */

typedef struct dyres {
  double rate[3]; /* per --dynet-autobatch; 0: not measured */
  long mism[3];   /* instances differing from Sheaf's; -1: no check output */
  char why[512];  /* why it did not run ("" when it did) */
} dyres;

static void run_dynet(const exb_opts *o, const bench_dyn_model *row, void *st, double min_s, int rounds,
                      dyres *res) {
  memset(res, 0, sizeof *res);
  res->mism[0] = res->mism[1] = res->mism[2] = -1;
  exb_peer p = {0};
  p.dynet = row->dynet_bin;
  char bin[512];
  if (!exb_dynet_bin(o, &p, bin, sizeof bin, res->why, sizeof res->why)) return;
  const char *err = exb_tmp_path("dynet.err");
  for (int ab = 0; ab < 3; ab++) {
    char check[64], cmd[4096];
    snprintf(check, sizeof check, "%s-dynet-ab%d.txt", row->name, ab);
    const char *cpath = exb_tmp_path(check);
    remove(cpath);
    snprintf(cmd, sizeof cmd,
             "OMP_NUM_THREADS=1 SHEAF_PEER_CPU_TIME=%d %s --dynet-autobatch %d --dynet-mem 512 %s "
             "--min-time %g --rounds %d --check %s 2>%s",
             cpu_clock, bin, ab, row->dynet_args(st), min_s, rounds, cpath, err);
    exb_peer_rec recs[8];
    int got = 0, rc = exb_run_peer(cmd, "inst_per_s", recs, 8, &got);
    if (rc != 0) {
      printf("  note: DyNet (--dynet-autobatch %d) exited with status %d", ab, rc);
      FILE *f = fopen(err, "r");
      char line[512];
      while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "dynet peer:", 11) || strstr(line, "rror")) printf("; %s", line);
      if (f) fclose(f);
      printf("\n");
    }
    for (int k = 0; k < got; k++) res->rate[ab] = recs[k].rate;
    res->mism[ab] = row->dynet_mismatches(st, cpath);
    remove(cpath);
  }
}

/* The DyNet peers once per round (between a round's Sheaf windows and the
 * next): the best rate per autobatch setting over the rounds, each round's
 * best over the settings, the largest mismatch count. */
typedef struct dyacc {
  const exb_opts *o;
  const bench_dyn_model *row;
  void *st;
  double min_s;
  dyres best;
  double round_best[MAX_ROUNDS];
} dyacc;

static void dynet_round(void *u, int rd) {
  dyacc *a = u;
  if (a->best.why[0]) return; /* unavailable: said once */
  dyres r;
  run_dynet(a->o, a->row, a->st, a->min_s, 1, &r);
  if (r.why[0]) {
    memcpy(a->best.why, r.why, sizeof r.why);
    return;
  }
  for (int ab = 0; ab < 3; ab++) {
    if (r.rate[ab] > a->best.rate[ab]) a->best.rate[ab] = r.rate[ab];
    if (r.mism[ab] > a->best.mism[ab]) a->best.mism[ab] = r.mism[ab]; /* -1 (no output) only if no round had one */
    if (r.rate[ab] > a->round_best[rd]) a->round_best[rd] = r.rate[ab];
  }
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* "min / median / max" of num[i] / den[i] over the rounds with den > 0 */
static void print_ratio_range(const char *what, const double *num, const double *den, int rounds) {
  double r[MAX_ROUNDS];
  int n = 0;
  for (int i = 0; i < rounds; i++)
    if (den[i] > 0 && num[i] > 0) r[n++] = num[i] / den[i];
  if (n < 2) return;
  qsort(r, (size_t)n, sizeof r[0], cmp_double);
  double med = n % 2 ? r[n / 2] : 0.5 * (r[n / 2 - 1] + r[n / 2]);
  printf("  %s, per round (%d): min %.2fx, median %.2fx, max %.2fx\n", what, n, r[0], med, r[n - 1]);
}

/* ------------------------------------------------------------------ main */

typedef struct result {
  const char *name;
  timing tm;
  double dy_best;
  int dy_ab;
  long mism_single, mism_dynet;
  double switch_frac;     /* estimate: switch count x the microbench's warm cost */
  double insitu_frac;     /* measured in situ (sh_fiber_timing) */
  double insitu_ns;       /* mean ns per timed switch, in situ */
  uint64_t insitu_n, insitu_capped;
  bool ok;
} result;

/* One more batched window with the switches timed (sh_fiber_timing): the
 * share of that window's time they took. */
static sheaf_status insitu_switch(const bench_dyn_model *row, void *st, sheaf_runner *rb, double min_s,
                                  result *R) {
  long passes;
  double secs = 0;
  sh_fiber_timing_enable(true);
  sheaf_status s = window(row, st, rb, 0, min_s, &passes, &secs);
  sh_fiber_timing ft;
  sh_fiber_timing_get(&ft);
  sh_fiber_timing_enable(false);
  if (s) return s;
  R->insitu_frac = secs > 0 ? ft.ns * 1e-9 / secs : 0;
  R->insitu_ns = ft.switches ? ft.ns / (double)ft.switches : 0;
  R->insitu_n = ft.switches;
  R->insitu_capped = ft.capped;
  return SHEAF_OK;
}

static const char usage[] =
    "usage: bench_dynamic [--quick] [--hidden N] [--rounds R] [--data FILE] [--no-dynet]\n"
    "                     [--dynet-dir DIR] [--kernels] [--cpu-time] [--only NAME]\n"
    "                     [--side batched|single] [--single-policy sheaf|none|depth|agenda]\n";

int main(int argc, char **argv) {
  exb_opts o;
  memset(&o, 0, sizeof o);
  o.data = "data/ud_english_ewt/en_ewt-ud-test.conllu";
  int64_t hidden = 256;
  int rounds = 3;
  bool kernels = false, rounds_given = false;
  const char *only = NULL;
  sheaf_policy single_policy = SHEAF_POLICY_SHEAF;
  for (int a = 1; a < argc; a++) {
    if (!strcmp(argv[a], "--quick")) o.quick = true;
    else if (!strcmp(argv[a], "--kernels")) kernels = true;
    else if (!strcmp(argv[a], "--cpu-time")) cpu_clock = true;
    else if (!strcmp(argv[a], "--no-dynet")) o.no_dynet = true;
    else if (!strcmp(argv[a], "--hidden") && a + 1 < argc) hidden = atoll(argv[++a]);
    else if (!strcmp(argv[a], "--rounds") && a + 1 < argc) rounds = atoi(argv[++a]), rounds_given = true;
    else if (!strcmp(argv[a], "--data") && a + 1 < argc) o.data = argv[++a];
    else if (!strcmp(argv[a], "--only") && a + 1 < argc) only = argv[++a];
    else if (!strcmp(argv[a], "--single-policy") && a + 1 < argc) {
      const char *pn = argv[++a];
      if (!strcmp(pn, "sheaf")) single_policy = SHEAF_POLICY_SHEAF;
      else if (!strcmp(pn, "none")) single_policy = SHEAF_POLICY_NONE;
      else if (!strcmp(pn, "depth")) single_policy = SHEAF_POLICY_DEPTH;
      else if (!strcmp(pn, "agenda")) single_policy = SHEAF_POLICY_AGENDA;
      else {
        fputs(usage, stderr);
        return 2;
      }
    }
    else if (!strcmp(argv[a], "--side") && a + 1 < argc && !strcmp(argv[a + 1], "batched")) side = 0, a++;
    else if (!strcmp(argv[a], "--side") && a + 1 < argc && !strcmp(argv[a + 1], "single")) side = 1, a++;
    else if (!strcmp(argv[a], "--dynet-dir") && a + 1 < argc) o.dynet_dir = argv[++a];
    else {
      fputs(usage, stderr);
      return 2;
    }
  }
  if (hidden < 1 || rounds < 1 || rounds > MAX_ROUNDS) {
    fputs(usage, stderr);
    return 2;
  }
  if (!sh_fiber_supported()) {
    printf("bench_dynamic: fibers are unsupported on this architecture\n");
    return 0;
  }
  if (o.quick && !rounds_given) rounds = 1;
  double min_s = o.quick ? 0.2 : 1.0;
  sheaf_ctx_options co = {0};
  co.threads = 1;
  sheaf_ctx *ctx = NULL;
  char err[256];
  if (sheaf_ctx_create(&co, &ctx, err, sizeof err)) {
    fprintf(stderr, "bench_dynamic: %s\n", err);
    return 1;
  }
  sh_dataset d;
  if (sh_dataset_load(ctx, o.data, SH_DATASET_SENTS, &d)) {
    fprintf(stderr, "bench_dynamic: %s\n", sheaf_ctx_last_error(ctx));
    sheaf_ctx_free(ctx);
    return 1;
  }
  bench_dyn_env env = {ctx, &d, N_INST < d.n_sents ? N_INST : d.n_sents, hidden, o.quick, exb_tmp_path};
  double sw = exb_fiber_switch_ns(o.quick ? 200000 : 1000000, 5, cpu_clock);
  int64_t words = sh_dataset_size_range(&d, 0, env.n);
  printf("Tensor-dependent control flow: %s, the first %d sentences (%lld words), hidden %lld, 1 thread\n",
         o.data, (int)env.n, (long long)words, (long long)hidden);
  printf("sheaf %s, isa %s; context switch %.1f ns; instances/s over whole passes of the %d, best of %d "
         "window(s) of >= %.1f s (%s), batched and single alternating\n",
         sheaf_version(), sheaf_isa_name(sheaf_cpu_isa()), sw, (int)env.n, rounds, min_s,
         cpu_clock ? "thread CPU time" : "wall time");

  int n_extra = 0;
  const bench_dyn_model *extra = bench_dyn_extra_models(&n_extra);
  int n_rows = (int)(sizeof builtin_rows / sizeof builtin_rows[0]) + (extra ? n_extra : 0);
  result *res = calloc((size_t)n_rows, sizeof *res);
  int fails = 0;
  for (int ri = 0; ri < n_rows && res; ri++) {
    int nb = (int)(sizeof builtin_rows / sizeof builtin_rows[0]);
    const bench_dyn_model *row = ri < nb ? &builtin_rows[ri] : &extra[ri - nb];
    result *R = &res[ri];
    R->name = row->name;
    if (only && strcmp(only, row->name)) continue;
    printf("\n%s:\n", row->name);
    void *st = row->setup(&env);
    if (!st) {
      fails++;
      continue;
    }
    sheaf_runner_opts ob = {env.n, 1, SHEAF_POLICY_SHEAF, SHEAF_PARALLEL_AUTO, NULL};
    sheaf_runner_opts os = {1, 1, single_policy, SHEAF_PARALLEL_AUTO, NULL};
    sheaf_runner *rb = NULL, *rs = NULL;
    sheaf_status s = sheaf_runner_create(row->model(st), &ob, &rb);
    if (!s) s = sheaf_runner_create(row->model(st), &os, &rs);
    dyacc dya;
    memset(&dya, 0, sizeof dya);
    dya.o = &o, dya.row = row, dya.st = st, dya.min_s = min_s;
    dya.best.mism[0] = dya.best.mism[1] = dya.best.mism[2] = -1;
    if (!s) s = time_row(row, st, rb, rs, env.n, min_s, rounds, dynet_round, &dya, &R->tm);
    if (!s && side != 1) s = insitu_switch(row, st, rb, min_s, R);
    if (s) {
      fprintf(stderr, "bench_dynamic: %s: %s\n", row->name, sheaf_ctx_last_error(ctx));
      fails++;
    } else {
      R->ok = true;
      R->mism_single = row->mismatches(st);
      timing *t = &R->tm;
      R->switch_frac = 2.0 * (double)(t->inst + t->waits) * sw * 1e-9 / t->batched_s;
      if (row->describe) {
        char desc[256];
        row->describe(st, desc, sizeof desc);
        printf("  %s\n", desc);
      }
      printf("  Sheaf batched (fibers, 64)   %9.1f %s/s\n", t->rate[0], row->unit);
      printf("  Sheaf one at a time          %9.1f %s/s   batched / single %.2fx\n", t->rate[1], row->unit,
             t->rate[0] / t->rate[1]);
      printf("  flushes per pass %.1f, live instances per flush %.1f, kernel batches per flush %.1f\n",
             (double)t->fflushes * env.n / (double)t->inst, (double)t->waits / (double)t->fflushes,
             (double)t->gs.batches / (double)t->gs.flushes);
      printf("  context switches in situ %.3f%% of the batched time (%llu timed, %.1f ns each, %llu "
             "preempted left out); est. from the warm microbench %.3f%%\n",
             100 * R->insitu_frac, (unsigned long long)R->insitu_n, R->insitu_ns,
             (unsigned long long)R->insitu_capped, 100 * R->switch_frac);
      printf("  batched vs single: %ld of %d instances differ\n", R->mism_single, (int)env.n);
      if (kernels) print_kernels(rb, t);
      print_ratio_range("batched / single", t->round_rate[0], t->round_rate[1], rounds);
      const dyres dy = dya.best;
      print_ratio_range("batched / DyNet best", t->round_rate[0], dya.round_best, rounds);
      R->mism_dynet = -1;
      if (dy.why[0]) {
        printf("  DyNet: not available (%s)\n", dy.why);
      } else {
        for (int ab = 0; ab < 3; ab++) {
          printf("  DyNet --dynet-autobatch %d     %9.1f %s/s   mismatches vs Sheaf: ", ab, dy.rate[ab],
                 row->unit);
          if (dy.mism[ab] < 0) printf("no output\n");
          else printf("%ld of %d\n", dy.mism[ab], (int)env.n);
          if (dy.rate[ab] > R->dy_best) R->dy_best = dy.rate[ab], R->dy_ab = ab;
          if (dy.mism[ab] > R->mism_dynet) R->mism_dynet = dy.mism[ab];
        }
      }
    }
    sheaf_runner_free(rb);
    sheaf_runner_free(rs);
    row->teardown(st);
  }

  printf("\n%-16s %11s %11s %8s %12s %8s %9s %9s %8s %8s %s\n", "model", "batched/s", "single/s",
         "x single", "DyNet best/s", "x DyNet", "live/fl", "kern/fl", "switch", "sw est.",
         "mismatch (single, DyNet)");
  for (int ri = 0; ri < n_rows && res; ri++) {
    const result *R = &res[ri];
    if (only && strcmp(only, R->name)) continue;
    if (!R->ok) {
      printf("%-16s failed\n", R->name);
      continue;
    }
    const timing *t = &R->tm;
    char dyb[48] = "-", dyx[32] = "-", mdy[32] = "-";
    if (R->dy_best > 0) {
      snprintf(dyb, sizeof dyb, "%.1f (ab%d)", R->dy_best, R->dy_ab);
      snprintf(dyx, sizeof dyx, "%.2fx", t->rate[0] / R->dy_best);
    }
    if (R->mism_dynet >= 0) snprintf(mdy, sizeof mdy, "%ld", R->mism_dynet);
    printf("%-16s %11.1f %11.1f %7.2fx %12s %8s %9.1f %9.1f %7.3f%% %7.3f%% %ld, %s\n", R->name,
           t->rate[0], t->rate[1], t->rate[0] / t->rate[1], dyb, dyx, (double)t->waits / (double)t->fflushes,
           (double)t->gs.batches / (double)t->gs.flushes, 100 * R->insitu_frac, 100 * R->switch_frac,
           R->mism_single, mdy);
  }
  free(res);
  exb_tmp_cleanup();
  sh_dataset_free(&d);
  sheaf_ctx_free(ctx);
  return fails ? 1 : 0;
}
