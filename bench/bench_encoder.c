/*
 * bench_encoder.c — Sheaf's ragged transformer encoder against PyTorch on
 * variable-length batches, same weights and same inputs, in one run.
 *
 *   sheaf    sheaf_encoder_forward_into on the packed ragged batch
 *   padded   nn.TransformerEncoderLayer (eval, no_grad, batch_first), the
 *            batch padded to its longest sequence + src_key_padding_mask
 *   nested   nn.TransformerEncoder(enable_nested_tensor=True), eval: the
 *            nested-tensor fast path (same padded input + mask)
 *   loop     the layer on one sequence at a time (no padding)
 *
 * PyTorch runs in a subprocess (bench/encoder_torch.py) once per model and
 * thread count, with OMP_NUM_THREADS / MKL_NUM_THREADS /
 * OPENBLAS_NUM_THREADS = T, torch.set_num_threads(T), and
 * OMP_WAIT_POLICY=PASSIVE when T > 1 (../docs/RAGGED.md, "Measuring").
 * Weights are generated here (seeded) and handed over as a safetensors
 * file under nn.TransformerEncoder's names; inputs are regenerated on both
 * sides from the same counter-based hash, and a checksum of each output is
 * compared, so every peer provably computed the same function.
 * Without python3 + torch only Sheaf is timed.
 *
 * Lengths: WikiText-2 test sentences (data/wikitext2_lengths, sampled) and
 * generators matching CoRa's datasets (min / mean / max): MNLI 9/43/128,
 * RACE 80/364/512, CoLA 6/13/37 (a scaled Beta(2, b) on [min, max] with
 * the mean matched).
 *
 *   bench_encoder [--quick] [--json FILE] [--threads T] [--config NAME]
 *                 [--dataset NAME] [--batch B] [--layers N] [--no-torch]
 *                 [--python CMD] [--lengths FILE] [--budget SECONDS]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "ragged/encoder.h"

/* ------------------------------------------------------------ generators */

/* u(seed, i) in [-0.5, 0.5): splitmix64, top 24 bits (encoder_torch.py has
 * the same function). */
static inline float u_hash(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (float)(z >> 40) * (1.0f / 16777216.0f) - 0.5f;
}

typedef struct rng { uint64_t seed, i; } rng;
static double r_unit(rng *r) { return (double)u_hash(r->seed, r->i++) + 0.5 + 0x1p-25; } /* (0,1) */
static double r_normal(rng *r) {
  return sqrt(-2.0 * log(r_unit(r))) * cos(6.283185307179586 * r_unit(r));
}
/* Gamma(a, 1), Marsaglia & Tsang (a < 1 through the a + 1 boost). */
static double r_gamma(rng *r, double a) {
  if (a < 1) return r_gamma(r, a + 1) * pow(r_unit(r), 1.0 / a);
  double d = a - 1.0 / 3, c = 1 / sqrt(9 * d);
  for (;;) {
    double x = r_normal(r), v = 1 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    double u = r_unit(r);
    if (log(u) < 0.5 * x * x + d - d * v + d * log(v)) return d * v;
  }
}

typedef struct dataset {
  const char *name;
  int min, mean, max; /* generated; 0: from the WikiText-2 lengths file */
} dataset;

static const dataset datasets[] = {
    {"wikitext2", 0, 0, 0}, {"mnli", 9, 43, 128}, {"race", 80, 364, 512}, {"cola", 6, 13, 37}};

static int64_t *g_wiki;
static size_t g_nwiki;

static bool load_wiki(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return false;
  size_t cap = 16384;
  g_wiki = malloc(cap * sizeof *g_wiki);
  long v;
  while (fscanf(f, "%ld", &v) == 1) {
    if (g_nwiki == cap) g_wiki = realloc(g_wiki, (cap *= 2) * sizeof *g_wiki);
    if (v > 0) g_wiki[g_nwiki++] = v;
  }
  fclose(f);
  return g_nwiki > 0;
}

static void gen_lengths(const dataset *ds, int64_t B, uint64_t seed, int64_t *lens) {
  rng r = {seed, 0};
  if (!ds->max) {
    for (int64_t b = 0; b < B; b++) lens[b] = g_wiki[(size_t)(r_unit(&r) * (double)g_nwiki) % g_nwiki];
    return;
  }
  double m = (double)(ds->mean - ds->min) / (ds->max - ds->min), a = 2.0, bb = a * (1 - m) / m;
  for (int64_t b = 0; b < B; b++) {
    double x = r_gamma(&r, a), y = r_gamma(&r, bb);
    lens[b] = ds->min + (int64_t)llround(x / (x + y) * (ds->max - ds->min));
  }
}

/* ---------------------------------------------------------------- model */

typedef struct config {
  const char *name;
  int d, heads, ff;
} config;

static const config configs[] = {{"d512h8f2048", 512, 8, 2048}, {"d768h12f3072", 768, 12, 3072}};

static void die(sheaf_ctx *ctx, const char *what) {
  fprintf(stderr, "bench_encoder: %s: %s\n", what, ctx ? sheaf_ctx_last_error(ctx) : "");
  exit(1);
}

/* Seeded weights (PyTorch-like bounds: +-1/sqrt(fan_in); layernorm near 1, 0)
 * written under nn.TransformerEncoder's names. */
static void write_weights(sheaf_ctx *ctx, const config *c, int layers, const char *path) {
  static const char *const parts[12] = {
      "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
      "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight",
      "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"};
  int64_t d = c->d, ff = c->ff;
  int64_t shapes[12][2] = {{3 * d, d}, {3 * d, 0}, {d, d}, {d, 0}, {ff, d}, {ff, 0},
                           {d, ff},    {d, 0},     {d, 0}, {d, 0}, {d, 0},  {d, 0}};
  int64_t fan[12] = {d, d, d, d, d, d, ff, ff, 0, 0, 0, 0};
  size_t n = (size_t)layers * 12;
  char **names = calloc(n, sizeof *names);
  sheaf_tensor **ts = calloc(n, sizeof *ts);
  for (int l = 0; l < layers; l++)
    for (int p = 0; p < 12; p++) {
      size_t i = (size_t)l * 12 + (size_t)p;
      names[i] = malloc(96);
      snprintf(names[i], 96, "layers.%d.%s", l, parts[p]);
      int rank = shapes[p][1] ? 2 : 1;
      if (sheaf_tensor_create(ctx, SHEAF_F32, rank, shapes[p], &ts[i])) die(ctx, "weights");
      float *w = sheaf_tensor_data(ts[i]);
      int64_t cnt = sheaf_tensor_numel(ts[i]);
      uint64_t seed = 1000003ull * (uint64_t)(l * 12 + p + 1) + (uint64_t)c->d;
      for (int64_t k = 0; k < cnt; k++) {
        float u = u_hash(seed, (uint64_t)k);
        w[k] = fan[p] ? 2.0f * u / sqrtf((float)fan[p]) : (p % 2 == 0 ? 1.0f + 0.2f * u : 0.2f * u);
      }
    }
  char dbuf[16], hbuf[16], fbuf[16], lbuf[16];
  snprintf(dbuf, sizeof dbuf, "%d", c->d);
  snprintf(hbuf, sizeof hbuf, "%d", c->heads);
  snprintf(fbuf, sizeof fbuf, "%d", c->ff);
  snprintf(lbuf, sizeof lbuf, "%d", layers);
  const char *meta[] = {"format", "sheaf-encoder", "d_model", dbuf, "nhead", hbuf,
                        "dim_feedforward", fbuf, "num_layers", lbuf, "activation", "relu",
                        "layer_norm_eps", "1e-05", "norm_first", "false"};
  if (sheaf_st_write(ctx, path, n, (const char *const *)names, (const sheaf_tensor *const *)ts,
                     SH_ARRAY_LEN(meta) / 2, meta))
    die(ctx, path);
  for (size_t i = 0; i < n; i++) free(names[i]), sheaf_tensor_free(ts[i]);
  free(names), free(ts);
}

/* ---------------------------------------------------------------- cases */

typedef struct bcase {
  const config *cfg;
  const dataset *ds;
  int64_t batch;
  int threads;
  int64_t *lens;
  uint64_t seed; /* of the inputs */
  double mean_len;
  int64_t max_len;
  double ms[4];   /* sheaf, padded, nested, loop (NAN: not run) */
  double chk[4];  /* sum y*x */
  double chk_abs; /* sum |y*x| (Sheaf) */
  sh_enc_cost cost;
} bcase;

static const char *const systems[4] = {"sheaf", "padded", "nested", "loop"};

static double now_s(void) { return (double)sheaf_time_ns() * 1e-9; }

static void run_sheaf(sheaf_ctx *ctx, sheaf_encoder *enc, bcase *k, int reps, double budget) {
  const int64_t d = k->cfg->d, B = k->batch;
  int64_t dims[2] = {SHEAF_RAGGED_DIM, d};
  sheaf_ragged *x, *y;
  if (sheaf_ragged_create(ctx, SHEAF_F32, B, k->lens, 2, dims, NULL, &x) ||
      sheaf_ragged_create(ctx, SHEAF_F32, B, k->lens, 2, dims, NULL, &y))
    die(ctx, "inputs");
  float *xd = sheaf_ragged_data(x);
  int64_t n = sheaf_ragged_numel(x);
  for (int64_t i = 0; i < n; i++) xd[i] = 2.0f * u_hash(k->seed, (uint64_t)i);
  if (sheaf_encoder_forward_into(enc, x, y)) die(ctx, "forward"); /* warm-up: grows workspace */
  double best = INFINITY, start = now_s();
  for (int r = 0; r < reps; r++) {
    double t0 = now_s();
    if (sheaf_encoder_forward_into(enc, x, y)) die(ctx, "forward");
    double t = now_s() - t0;
    best = t < best ? t : best;
    if (r >= 1 && now_s() - start > budget) break;
  }
  const float *yd = sheaf_ragged_data(y);
  double s = 0, sa = 0;
  for (int64_t i = 0; i < n; i++) s += (double)yd[i] * xd[i], sa += fabs((double)yd[i] * xd[i]);
  k->ms[0] = best * 1e3;
  k->chk[0] = s;
  k->chk_abs = sa;
  sh_encoder_cost(enc, B, k->lens, k->threads, &k->cost);
  sheaf_ragged_free(x);
  sheaf_ragged_free(y);
}

/* Runs encoder_torch.py over cases [0, n) (same config and threads). */
static bool run_torch(const char *python, const char *wpath, const char *dir, bcase *cs, int n,
                      int reps, double budget, bool print_info) {
  char cpath[600], cmd[2048];
  snprintf(cpath, sizeof cpath, "%s/cases.txt", dir);
  FILE *f = fopen(cpath, "w");
  if (!f) return false;
  for (int i = 0; i < n; i++) {
    fprintf(f, "%d %llu", i, (unsigned long long)cs[i].seed);
    for (int64_t b = 0; b < cs[i].batch; b++) fprintf(f, " %lld", (long long)cs[i].lens[b]);
    fputc('\n', f);
  }
  fclose(f);
  int t = cs[0].threads;
  snprintf(cmd, sizeof cmd,
           "OMP_NUM_THREADS=%d MKL_NUM_THREADS=%d OPENBLAS_NUM_THREADS=%d %s %s "
           "bench/encoder_torch.py bench %s %s --reps %d --warmup 1 --budget %g",
           t, t, t, t > 1 ? "OMP_WAIT_POLICY=PASSIVE" : "", python, wpath, cpath, reps, budget);
  FILE *p = popen(cmd, "r");
  if (!p) return false;
  char line[1024];
  bool any = false;
  while (fgets(line, sizeof line, p)) {
    int id;
    char sys[32], ms[64], chk[64];
    if (sscanf(line, "RESULT %d %31s %63s %63s", &id, sys, ms, chk) == 4 && id >= 0 && id < n) {
      for (int s = 1; s < 4; s++)
        if (!strcmp(sys, systems[s])) cs[id].ms[s] = strtod(ms, NULL), cs[id].chk[s] = strtod(chk, NULL);
      any = true;
    } else if (!strncmp(line, "INFO", 4) && print_info) {
      printf("  torch: %s", line + 5);
    }
  }
  int rc = pclose(p);
  if (rc != 0) fprintf(stderr, "bench_encoder: PyTorch peer exited with status %d\n", rc);
  return any;
}

/* ---------------------------------------------------------------- main */

/* A JSON number, or null when not finite. */
static const char *json_num(double v, char *buf, size_t n) {
  if (isfinite(v)) snprintf(buf, n, "%.4f", v);
  else snprintf(buf, n, "null");
  return buf;
}

static double geo_add(double *acc, int *n, double v) {
  if (v > 0 && isfinite(v)) *acc += log(v), (*n)++;
  return v;
}

int main(int argc, char **argv) {
  bool quick = false, torch = true;
  int thread_sel = 0, layers = 1;
  int64_t batch_sel = 0;
  double budget = 0;
  const char *json = NULL, *cfg_sel = NULL, *ds_sel = NULL, *python = "python3";
  const char *lengths = "data/wikitext2_lengths/wiki.test.lengths";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = true;
    else if (!strcmp(argv[i], "--no-torch")) torch = false;
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) thread_sel = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--config") && i + 1 < argc) cfg_sel = argv[++i];
    else if (!strcmp(argv[i], "--dataset") && i + 1 < argc) ds_sel = argv[++i];
    else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch_sel = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--layers") && i + 1 < argc) layers = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--python") && i + 1 < argc) python = argv[++i];
    else if (!strcmp(argv[i], "--lengths") && i + 1 < argc) lengths = argv[++i];
    else if (!strcmp(argv[i], "--budget") && i + 1 < argc) budget = atof(argv[++i]);
    else {
      fprintf(stderr, "usage: bench_encoder [--quick] [--json FILE] [--threads T] [--config d512h8f2048|d768h12f3072]\n"
                      "                     [--dataset wikitext2|mnli|race|cola] [--batch B] [--layers N]\n"
                      "                     [--no-torch] [--python CMD] [--lengths FILE] [--budget SECONDS]\n");
      return 2;
    }
  }
  if (layers < 1) layers = 1;
  int reps = quick ? 3 : 7;
  if (budget <= 0) budget = quick ? 4.0 : 15.0; /* per system and case, after 2 runs */
  if (!load_wiki(lengths)) {
    fprintf(stderr, "bench_encoder: cannot read WikiText-2 lengths from %s (run from the repository root or pass --lengths)\n",
            lengths);
    return 1;
  }
  if (torch) {
    char cmd[512], out[256];
    snprintf(cmd, sizeof cmd, "%s -c 'import torch, numpy' 2>/dev/null && test -f bench/encoder_torch.py && echo ok",
             python);
    FILE *p = popen(cmd, "r");
    torch = p && fgets(out, sizeof out, p) && !strncmp(out, "ok", 2);
    if (p) pclose(p);
    if (!torch) printf("PyTorch peers skipped: `%s -c 'import torch, numpy'` failed (pip install torch numpy)\n", python);
  }
  char dir[] = "/tmp/sheaf-bench-encoder-XXXXXX";
  if (!mkdtemp(dir)) {
    perror("bench_encoder: mkdtemp");
    return 1;
  }
  FILE *jf = json ? fopen(json, "w") : NULL;
  if (json && !jf) {
    fprintf(stderr, "bench_encoder: cannot write %s\n", json);
    return 1;
  }
  if (jf) fprintf(jf, "[\n");
  bool first_json = true, info_done = false;
  printf("Sheaf ragged encoder vs PyTorch, %d layer(s), post-LN, relu; ISA %s; best of up to %d runs\n",
         layers, sheaf_isa_name(sheaf_cpu_isa()), reps);
  printf("ms per batch; ratios = PyTorch ms / Sheaf ms (higher: Sheaf faster); FLOPs = executed / useful\n"
         "(Sheaf; padF: padded batch); act = activation bytes Sheaf / padded (MB in the last column)\n\n");
  double g_pad = 0, g_nest = 0, g_mnli = 0, g_loop = 0, max_flops = 0, g_act = 0, max_act = 0;
  int n_pad = 0, n_nest = 0, n_mnli = 0, n_loop = 0, n_act = 0, max_chk_bad = 0;
  double worst_chk = 0;

  for (size_t ci = 0; ci < SH_ARRAY_LEN(configs); ci++) {
    const config *c = &configs[ci];
    if (cfg_sel && strcmp(cfg_sel, c->name)) continue;
    char wpath[600];
    snprintf(wpath, sizeof wpath, "%s/%s.safetensors", dir, c->name);
    {
      sheaf_ctx *wc;
      char err[256];
      if (sheaf_ctx_create(NULL, &wc, err, sizeof err)) die(NULL, err);
      write_weights(wc, c, layers, wpath);
      sheaf_ctx_free(wc);
    }
    for (int t = 1; t <= 2; t++) {
      if (thread_sel && t != thread_sel) continue;
      sheaf_ctx_options o = {.threads = t};
      sheaf_ctx *ctx;
      char err[256];
      if (sheaf_ctx_create(&o, &ctx, err, sizeof err)) die(NULL, err);
      sheaf_st_file *wf;
      sheaf_encoder *enc;
      if (sheaf_st_open(ctx, wpath, &wf) || sheaf_encoder_load(ctx, wf, NULL, &enc)) die(ctx, wpath);
      sheaf_st_close(wf);
      bcase cs[16];
      int n = 0;
      for (size_t di = 0; di < SH_ARRAY_LEN(datasets); di++) {
        if (ds_sel && strcmp(ds_sel, datasets[di].name)) continue;
        for (int64_t B = 32; B <= 64; B *= 2) {
          if (batch_sel && B != batch_sel) continue;
          bcase *k = &cs[n++];
          memset(k, 0, sizeof *k);
          k->cfg = c, k->ds = &datasets[di], k->batch = B, k->threads = t;
          k->lens = malloc((size_t)B * sizeof *k->lens);
          gen_lengths(k->ds, B, 77 + di * 1000 + (uint64_t)B, k->lens);
          k->seed = 5 + di * 100 + (uint64_t)B;
          for (int64_t b = 0; b < B; b++) {
            k->mean_len += (double)k->lens[b] / (double)B;
            if (k->lens[b] > k->max_len) k->max_len = k->lens[b];
          }
          for (int s = 0; s < 4; s++) k->ms[s] = NAN, k->chk[s] = NAN;
          run_sheaf(ctx, enc, k, reps, budget);
        }
      }
      if (torch && n) {
        run_torch(python, wpath, dir, cs, n, reps, budget, !info_done);
        info_done = true;
        /* Sheaf again after PyTorch (best of both passes), so that a change
         * of background load during the run hits both sides alike */
        for (int i = 0; i < n; i++) {
          double ms = cs[i].ms[0];
          run_sheaf(ctx, enc, &cs[i], reps, budget);
          if (ms < cs[i].ms[0]) cs[i].ms[0] = ms;
        }
      }
      sheaf_encoder_free(enc);
      sheaf_ctx_free(ctx);
      if (n) {
        printf("%-13s %-9s %3s %2s %11s %9s %9s %9s %9s %6s %6s %6s %6s %6s %5s %13s\n", "config",
               "dataset", "B", "T", "len mean/max", "sheaf", "padded", "nested", "loop", "pad/S",
               "nest/S", "loop/S", "FLOPs", "padF", "act", "act MB S/pad");
      }
      for (int i = 0; i < n; i++) {
        bcase *k = &cs[i];
        double r[4], fl = k->cost.macs_sheaf / k->cost.macs_useful;
        double pf = k->cost.macs_padded / k->cost.macs_useful;
        double act = k->cost.act_bytes_sheaf / k->cost.act_bytes_padded;
        for (int s = 0; s < 4; s++) r[s] = k->ms[s] / k->ms[0];
        printf("%-13s %-9s %3lld %2d %6.1f/%-4lld %9.2f %9.2f %9.2f %9.2f %6.2f %6.2f %6.2f %6.3f %6.2f %5.2f %6.0f/%-6.0f\n",
               c->name, k->ds->name, (long long)k->batch, t, k->mean_len, (long long)k->max_len,
               k->ms[0], k->ms[1], k->ms[2], k->ms[3], r[1], r[2], r[3], fl, pf, act,
               k->cost.act_bytes_sheaf / 1e6, k->cost.act_bytes_padded / 1e6);
        geo_add(&g_pad, &n_pad, r[1]);
        geo_add(&g_nest, &n_nest, r[2]);
        geo_add(&g_loop, &n_loop, r[3]);
        if (!strcmp(k->ds->name, "mnli")) geo_add(&g_mnli, &n_mnli, r[1]);
        geo_add(&g_act, &n_act, act);
        max_flops = fl > max_flops ? fl : max_flops;
        max_act = act > max_act ? act : max_act;
        for (int s = 1; s < 4; s++) {
          if (!isfinite(k->chk[s])) continue;
          double e = fabs(k->chk[s] - k->chk[0]) / (k->chk_abs > 0 ? k->chk_abs : 1);
          worst_chk = e > worst_chk ? e : worst_chk;
          if (e > 1e-3) {
            max_chk_bad++;
            printf("  WARNING: %s output differs from Sheaf's (checksum rel diff %.2g)\n", systems[s], e);
          }
        }
        for (int s = 0; s < 4 && jf; s++) {
          char rbuf[32];
          if (!isfinite(k->ms[s])) continue;
          fprintf(jf,
                  "%s  {\"system\": \"%s\", \"config\": \"%s\", \"dataset\": \"%s\", \"batch\": %lld, "
                  "\"threads\": %d, \"layers\": %d, \"ms\": %.4f, \"ratio_vs_padded\": %s, "
                  "\"mean_len\": %.2f, \"max_len\": %lld",
                  first_json ? "" : ",\n", systems[s], c->name, k->ds->name, (long long)k->batch, t,
                  layers, k->ms[s], json_num(k->ms[1] / k->ms[s], rbuf, sizeof rbuf), k->mean_len,
                  (long long)k->max_len);
          if (s == 0)
            fprintf(jf, ", \"flops_executed_over_useful\": %.4f, \"gflops_useful\": %.2f, "
                        "\"act_bytes\": %.0f, \"act_bytes_padded\": %.0f",
                    fl, 2 * k->cost.macs_useful / (k->ms[0] * 1e6), k->cost.act_bytes_sheaf,
                    k->cost.act_bytes_padded);
          fprintf(jf, "}");
          first_json = false;
        }
        free(k->lens);
      }
      printf("\n");
      fflush(stdout);
    }
  }
  if (jf) {
    fprintf(jf, "\n]\n");
    fclose(jf);
  }
  if (n_pad) {
    printf("geomean speedup over PyTorch padded: %.2fx (%d cases)", exp(g_pad / n_pad), n_pad);
    printf("; over nested: %.2fx (%d)", n_nest ? exp(g_nest / n_nest) : NAN, n_nest);
    printf("; over per-sequence loop: %.2fx (%d)\n", n_loop ? exp(g_loop / n_loop) : NAN, n_loop);
    if (n_mnli) printf("MNLI-like, over padded: %.2fx geomean (%d cases)\n", exp(g_mnli / n_mnli), n_mnli);
  }
  printf("FLOPs executed / useful: at most %.3f; activation bytes / padded: geomean %.2f, at most %.2f\n",
         max_flops, n_act ? exp(g_act / n_act) : NAN, max_act);
  if (n_pad) printf("outputs agree with PyTorch: worst checksum rel diff %.2g%s\n", worst_chk,
                    max_chk_bad ? " (MISMATCH)" : "");
  char rm[600];
  snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
  if (system(rm) != 0) fprintf(stderr, "bench_encoder: could not remove %s\n", dir);
  return max_chk_bad ? 1 : 0;
}
