/*
 * bench_util.c — helpers of the model benchmarks (see bench_util.h):
 * throughput windows, the GEMM ceiling, peer subprocesses, temp files, JSON.
 */
#include "bench_util.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/gemm.h"

double exb_sheaf_rate(const ex_net *net, sheaf_policy policy, int threads, int32_t batch,
                      int32_t count, double min_s, int rounds, sheaf_graph_stats *delta,
                      long *passes_out) {
  sheaf_ctx *ctx = net->data->ctx;
  sheaf_graph_opts go = {policy, threads, NULL};
  sheaf_graph *g = NULL;
  if (sheaf_graph_create(net->model, &go, &g) != SHEAF_OK) goto fail;
  int32_t warm = count < 2 * batch ? count : 2 * batch;
  if (ex_run(net, g, 0, warm, batch, NULL) != SHEAF_OK) goto fail;
  sheaf_graph_stats a, b;
  sheaf_graph_get_stats(g, &a);
  double best = 0;
  long total_passes = 0;
  for (int r = 0; r < rounds; r++) {
    long passes = 0;
    uint64_t t0 = sheaf_time_ns();
    double dt;
    do {
      if (ex_run(net, g, 0, count, batch, NULL) != SHEAF_OK) goto fail;
      passes++;
      dt = (double)(sheaf_time_ns() - t0) * 1e-9;
    } while (dt < min_s);
    total_passes += passes;
    double rate = (double)passes * count / dt;
    if (rate > best) best = rate;
  }
  sheaf_graph_get_stats(g, &b);
  if (delta) {
    delta->nodes = b.nodes - a.nodes;
    delta->batches = b.batches - a.batches;
    delta->flushes = b.flushes - a.flushes;
    delta->rows_gathered = b.rows_gathered - a.rows_gathered;
    delta->bytes_copied = b.bytes_copied - a.bytes_copied;
    delta->flops = b.flops - a.flops;
    delta->ns_build = b.ns_build - a.ns_build;
    delta->ns_schedule = b.ns_schedule - a.ns_schedule;
    delta->ns_kernels = b.ns_kernels - a.ns_kernels;
  }
  if (passes_out) *passes_out = total_passes;
  sheaf_graph_free(g);
  return best;
fail:
  fprintf(stderr, "bench: %s policy %s: %s\n", ex_model_name(net->kind),
          sheaf_policy_name(policy), sheaf_ctx_last_error(ctx));
  sheaf_graph_free(g);
  return -1;
}

static float *frand(int64_t n, uint64_t seed) {
  float *p = NULL;
  if (posix_memalign((void **)&p, 64, (size_t)(n > 0 ? n : 1) * sizeof(float))) return NULL;
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = (float)((double)(seed >> 40) / (double)(1ull << 24)) - 0.5f;
  }
  return p;
}

double exb_gemm_gflops(sheaf_ctx *ctx, int threads, int64_t m, int64_t n, int64_t k,
                       double min_s) {
  float *a = frand(m * k, 1), *b = frand(k * n, 2), *c = frand(m * n, 3);
  sh_gemm_packed_b *pb = NULL;
  sh_gemm_ws *ws = NULL;
  double best = 0;
  if (!a || !b || !c || sh_gemm_pack_b(ctx, b, n, k, n, 0, &pb) != SHEAF_OK ||
      sh_gemm_ws_create(ctx, &ws) != SHEAF_OK)
    goto done;
  sh_gemm_args args = {.m = m, .n_src = 1, .src = {{k, {NULL, a, k}}}, .b_packed = pb,
                       .c = {NULL, c, n}, .ws = ws};
  if (sh_gemm(ctx, sheaf_cpu_isa(), threads, &args) != SHEAF_OK) goto done; /* warm-up */
  for (int r = 0; r < 3; r++) {
    long iters = 0;
    uint64_t t0 = sheaf_time_ns();
    double dt;
    do {
      for (int i = 0; i < 16; i++) sh_gemm(ctx, sheaf_cpu_isa(), threads, &args);
      iters += 16;
      dt = (double)(sheaf_time_ns() - t0) * 1e-9;
    } while (dt < min_s);
    double g = 2.0 * (double)m * (double)n * (double)k * (double)iters / dt * 1e-9;
    if (g > best) best = g;
  }
done:
  sh_gemm_ws_free(ctx, ws);
  sh_gemm_packed_b_free(ctx, pb);
  free(a);
  free(b);
  free(c);
  return best;
}

/* ------------------------------------------------------------ temp files */

static char g_tmpdir[256];
static char g_paths[16][320];
static int g_npaths;

const char *exb_tmp_path(const char *name) {
  if (!g_tmpdir[0]) {
    const char *base = getenv("TMPDIR");
    snprintf(g_tmpdir, sizeof g_tmpdir, "%s/sheaf-bench-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(g_tmpdir)) {
      perror("bench: mkdtemp");
      exit(1);
    }
  }
  for (int i = 0; i < g_npaths; i++)
    if (!strcmp(g_paths[i] + strlen(g_tmpdir) + 1, name)) return g_paths[i];
  if (g_npaths == 16) {
    fprintf(stderr, "bench: too many temporary files\n");
    exit(1);
  }
  snprintf(g_paths[g_npaths], sizeof g_paths[0], "%s/%s", g_tmpdir, name);
  return g_paths[g_npaths++];
}

void exb_tmp_cleanup(void) {
  for (int i = 0; i < g_npaths; i++) remove(g_paths[i]);
  if (g_tmpdir[0]) rmdir(g_tmpdir);
  g_npaths = 0;
  g_tmpdir[0] = '\0';
}

/* ------------------------------------------------------------------ peers */

/* The number after "KEY": in a JSON line, or the string value. */
static bool json_num(const char *line, const char *key, double *out) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(line, pat);
  if (!p) return false;
  char *end;
  *out = strtod(p + strlen(pat), &end);
  return end != p + strlen(pat);
}

static bool json_str(const char *line, const char *key, char *out, size_t cap) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\": \"", key);
  const char *p = strstr(line, pat);
  if (!p) return false;
  p += strlen(pat);
  const char *q = strchr(p, '"');
  if (!q || (size_t)(q - p) >= cap) return false;
  memcpy(out, p, (size_t)(q - p));
  out[q - p] = '\0';
  return true;
}

int exb_run_peer(const char *cmd, const char *key, exb_peer_rec *recs, int max, int *n) {
  *n = 0;
  fflush(stdout);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  char line[4096];
  while (fgets(line, sizeof line, p)) {
    if (line[0] == '#') {
      printf("  %s", line);
      fflush(stdout);
      continue;
    }
    if (line[0] != '{' || *n >= max) continue;
    exb_peer_rec r = {{0}, 0, 0};
    double b;
    if (json_str(line, "system", r.system, sizeof r.system) && json_num(line, "batch", &b) &&
        json_num(line, key, &r.rate)) {
      r.batch = (int)b;
      recs[(*n)++] = r;
    }
  }
  int st = pclose(p);
  return st == -1 ? -1 : (WIFEXITED(st) ? WEXITSTATUS(st) : 128);
}

bool exb_have_torch(const char *python) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "%s -c 'import torch' >/dev/null 2>&1", python);
  return system(cmd) == 0;
}

float *exb_read_f32(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  float *v = size > 0 ? malloc((size_t)size) : NULL;
  if (v && fread(v, 1, (size_t)size, f) != (size_t)size) {
    free(v);
    v = NULL;
  }
  fclose(f);
  *n = v ? (size_t)size / sizeof(float) : 0;
  return v;
}

/* ------------------------------------------------------------------ JSON */

static FILE *g_json;
static bool g_json_first;

bool exb_json_open(const char *path) {
  if (!path) return true;
  g_json = fopen(path, "w");
  if (!g_json) return false;
  fputs("[\n", g_json);
  g_json_first = true;
  return true;
}

void exb_json_rec(const char *fmt, ...) {
  if (!g_json) return;
  fputs(g_json_first ? "  {" : ",\n  {", g_json);
  g_json_first = false;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(g_json, fmt, ap);
  va_end(ap);
  fputc('}', g_json);
}

void exb_json_close(void) {
  if (!g_json) return;
  fputs("\n]\n", g_json);
  fclose(g_json);
  g_json = NULL;
}

bool exb_parse_list(const char *s, int *out, int max, int *n) {
  *n = 0;
  while (*s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || v <= 0 || v > 1000000 || *n >= max) return false;
    out[(*n)++] = (int)v;
    s = end;
    if (*s == ',') s++;
    else if (*s) return false;
  }
  return *n > 0;
}
