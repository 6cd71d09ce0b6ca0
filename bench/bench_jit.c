/*
 * bench_jit.c — what the JIT's disk cache costs (src/codegen/jit.h): a
 * cold compile of one small kernel (a row softmax with an ABI-header stub,
 * cc -O3 -march=native, an empty cache each time), a cache hit in a new
 * sh_jit (what a second run pays: key, verification of the entry, dlopen),
 * and a hit on a library the sh_jit already holds. Medians and minima over
 * the runs; the targets are those of issue 13 (cold < 1.5 s, hit < 5 ms).
 *
 * Then every kernel kind the project generates (API_SRC: GEMM, the fused
 * FFN, gated unit and GEMM + log-softmax, row softmax, layernorm, ragged
 * attention with one head and with H) through the kernel API, each cold
 * (wall and the compiler's CPU time) and hit, and a summary table with
 * ok / MISSED against those targets and the load average.
 *
 *   bench_jit [--quick] [--iters N] [--cold N] [--kernel NAME]
 *                                        (SHEAF_CC picks the compiler)
 */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/base.h"
#include "codegen/jit.h"
#include "codegen/kernel_api.h"
#include "codegen/lir_emit.h"
#include "codegen/lower.h"
#include "lang/kernel.h"
#include "lang/parser.h"

static const char ABI_H[] =
    "#include <stddef.h>\n#include <stdint.h>\n"
    "typedef void (*sheaf_abi_parallel_fn)(void *arg, int64_t task, int tid);\n"
    "typedef struct sheaf_abi_services { void (*parallel)(void *pool, int64_t n,\n"
    "    sheaf_abi_parallel_fn fn, void *arg); void *pool; } sheaf_abi_services;\n";

static const char KERNEL[] =
    "#include <math.h>\n#include \"sheaf_abi.h\"\n"
    "void softmax_rows(const sheaf_abi_services *s, const float *x, float *y, int64_t m, int64_t n) {\n"
    "  (void)s;\n"
    "  for (int64_t i = 0; i < m; i++) {\n"
    "    const float *xi = x + i * n; float *yi = y + i * n; float mx = xi[0], sum = 0;\n"
    "    for (int64_t j = 1; j < n; j++) mx = xi[j] > mx ? xi[j] : mx;\n"
    "    for (int64_t j = 0; j < n; j++) { yi[j] = expf(xi[j] - mx); sum += yi[j]; }\n"
    "    for (int64_t j = 0; j < n; j++) yi[j] /= sum;\n"
    "  }\n}\n";

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static double median_ms(uint64_t *t, int n) {
  qsort(t, (size_t)n, sizeof *t, cmp_u64);
  return (double)t[n / 2] / 1e6;
}


/* Every kernel kind the project generates and benches, with the sources
 * the benches compile: the GEMM (bench_codegen, bench_codegen_tune), the
 * fused FFN, gated unit and GEMM + log-softmax (bench_codegen_fused), the
 * row softmax and layernorm and the ragged attention, one head and H heads
 * (bench_codegen). */
static const char *const API_SRC[][2] = {
    {"mm", "kernel mm(A: f32[M, K], B: f32[K, N]) -> f32[M, N] { C(m, n) +=! A(m, k) * B(k, n) }\n"},
    {"ffn", "kernel ffn(x: f32[N, D], W: f32[D, F], b: f32[F]) -> f32[N, F] {\n"
            "  y(n, f) +=! x(n, d) * W(d, f)\n  out(n, f) = gelu(y(n, f) + b(f))\n}\n"},
    {"gated", "kernel gated(x: f32[N, D], Wg: f32[D, F], Wh: f32[D, F]) -> f32[N, F] {\n"
              "  g(n, f) +=! x(n, d) * Wg(d, f); h(n, f) +=! x(n, d) * Wh(d, f)\n"
              "  out(n, f) = sigmoid(g(n, f)) * tanh(h(n, f))\n}\n"},
    {"lsm", "kernel lsm(x: f32[N, D], W: f32[D, F], b: f32[F]) -> f32[N, F] {\n"
            "  y(n, f) +=! x(n, d) * W(d, f)\n  z(n, f) = y(n, f) + b(f)\n"
            "  m(n) max=! z(n, f)\n  s(n) +=! exp(z(n, f) - m(n))\n"
            "  out(n, f) = z(n, f) - m(n) - log(s(n))\n}\n"},
    {"sm", "kernel sm(x: f32[N, C]) -> f32[N, C] {\n"
           "  m(n) max=! x(n, c)\n  e(n, c) = exp(x(n, c) - m(n))\n"
           "  s(n) +=! e(n, c)\n  out(n, c) = e(n, c) / s(n)\n}\n"},
    {"ln", "kernel ln(x: f32[N, D], g: f32[D], b: f32[D]) -> f32[N, D] {\n"
           "  mu(n) +=! x(n, d) / D\n  c(n, d) = x(n, d) - mu(n)\n"
           "  var(n) +=! c(n, d) * c(n, d) / D\n"
           "  out(n, d) = c(n, d) * rsqrt(var(n) + 1e-5) * g(d) + b(d)\n}\n"},
    {"attn", "kernel attn(L: i32[B], q: f32[B, L(b), D], k: f32[B, L(b), D], v: f32[B, L(b), D])\n"
             "    -> f32[B, L(b), D] {\n"
             "  s(b, i, j) +=! q(b, i, d) * k(b, j, d) / sqrt(D)\n"
             "  m(b, i) max=! s(b, i, j)\n  e(b, i, j) = exp(s(b, i, j) - m(b, i))\n"
             "  z(b, i) +=! e(b, i, j)\n  o(b, i, d) +=! e(b, i, j) * v(b, j, d)\n"
             "  out(b, i, d) = o(b, i, d) / z(b, i)\n}\n"},
    {"mha", "kernel mha(L: i32[B], q: f32[B, L(b), H, D], k: f32[B, L(b), H, D], v: f32[B, L(b), H, D])\n"
            "    -> f32[B, L(b), H, D] {\n"
            "  s(b, h, i, j) +=! q(b, i, h, d) * k(b, j, h, d) / sqrt(D)\n"
            "  m(b, h, i) max=! s(b, h, i, j)\n  e(b, h, i, j) = exp(s(b, h, i, j) - m(b, h, i))\n"
            "  z(b, h, i) +=! e(b, h, i, j)\n  o(b, h, i, d) +=! e(b, h, i, j) * v(b, j, h, d)\n"
            "  out(b, i, h, d) = o(b, h, i, d) / z(b, h, i)\n}\n"},
};

/* One row of the summary table: a kernel's medians and minima. */
typedef struct api_row {
  double cold_ms, cold_min_ms, cpu_ms, cpu_min_ms, hit_ms, hit_min_ms;
  size_t c_bytes;
} api_row;

/* CPU seconds (user + system) of this process's waited-for children: the
 * compiler's own work, whatever the machine's load. */
static double children_cpu_s(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_CHILDREN, &ru) != 0) return 0;
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
         (double)ru.ru_stime.tv_usec * 1e-6;
}

/* One kernel through the public API: cold compiles (a fresh cache
 * directory each), hits in a new sheaf_kernel, and the stages of one
 * compile timed one by one. 0, or 1 with the error printed. */
static int bench_api(sheaf_ctx *ctx, const char *root, const char *name, const char *src, int cold_runs,
                     int hit_runs, api_row *row) {
  size_t len = strlen(src);
  uint64_t *cold = calloc((size_t)cold_runs, sizeof *cold), *hit = calloc((size_t)hit_runs, sizeof *hit),
           *cold_cpu = calloc((size_t)cold_runs, sizeof *cold_cpu);
  char dir[600];
  int rc = 0;
  for (int r = 0; r < cold_runs && !rc; r++) {
    snprintf(dir, sizeof dir, "%s/api-%s-%d", root, name, r);
    sh_kernel_opts o = {.cache_dir = dir};
    sheaf_kernel *k = NULL;
    double c0 = children_cpu_s();
    uint64_t t0 = sheaf_time_ns();
    if (sh_kernel_compile_opts(ctx, src, len, name, &o, &k) != SHEAF_OK) rc = 1;
    cold[r] = sheaf_time_ns() - t0;
    cold_cpu[r] = (uint64_t)((children_cpu_s() - c0) * 1e9);
    sheaf_kernel_free(k);
  }
  sh_kernel_opts o = {.cache_dir = dir};
  for (int r = 0; r < hit_runs && !rc; r++) {
    sheaf_kernel *k = NULL;
    sh_jit_stats js;
    uint64_t t0 = sheaf_time_ns();
    if (sh_kernel_compile_opts(ctx, src, len, name, &o, &k) != SHEAF_OK) rc = 1;
    hit[r] = sheaf_time_ns() - t0;
    sh_kernel_jit_stats(k, &js);
    if (!rc && js.compiles) rc = 1, printf("bench_jit: a hit of kernel %s ran the compiler\n", name);
    sheaf_kernel_free(k);
  }
  /* the stages of a compile, one by one (the last cache directory: a hit) */
  uint64_t t_parse = 0, t_lower = 0, t_hit = 0;
  size_t c_bytes = 0;
  for (int r = 0; r < 5 && !rc; r++) {
    sh_module m;
    sh_buf c;
    sh_buf_init(&c, ctx);
    sh_lower_info info = {0};
    uint64_t t0 = sheaf_time_ns();
    sheaf_status st = sh_kernel_source_compile(&m, ctx, "kernel", src, len);
    uint64_t t1 = sheaf_time_ns();
    const sh_kernel *k = st ? NULL : sh_module_kernel(&m, name);
    if (!k || sh_lower_generate(ctx, k, sheaf_cpu_isa(), &c, NULL, &info) != SHEAF_OK) rc = 1;
    uint64_t t2 = sheaf_time_ns();
    c_bytes = c.len;
    sh_lower_info_free(ctx, &info);
    sh_buf_free(&c);
    sh_module_free(&m);
    if (r == 0 || t1 - t0 < t_parse) t_parse = t1 - t0;
    if (r == 0 || t2 - t1 < t_lower) t_lower = t2 - t1;
  }
  for (int r = 0; r < 5 && !rc; r++) {
    sheaf_kernel *k = NULL;
    if (sh_kernel_compile_opts(ctx, src, len, name, &o, &k) != SHEAF_OK) rc = 1;
    sh_jit_stats js;
    sh_kernel_jit_stats(k, &js);
    if (r == 0 || js.hit_ns < t_hit) t_hit = js.hit_ns;
    sheaf_kernel_free(k);
  }
  if (rc) {
    printf("bench_jit: kernel %s: %s\n", name, sheaf_ctx_last_error(ctx));
  } else {
    double c = median_ms(cold, cold_runs), h = median_ms(hit, hit_runs), cc_cpu = median_ms(cold_cpu, cold_runs);
    *row = (api_row){c, (double)cold[0] / 1e6, cc_cpu, (double)cold_cpu[0] / 1e6, h, (double)hit[0] / 1e6, c_bytes};
    char label[64];
    snprintf(label, sizeof label, "%s: cold compile (empty cache)", name);
    printf("%-44s %10.1f %10.1f %10s %s\n", label, c, (double)cold[0] / 1e6, "< 1500", c < 1500 ? "ok" : "MISSED");
    printf("%-44s %10.1f %10.1f %10s %s\n", "  of which the compiler's CPU time", cc_cpu, (double)cold_cpu[0] / 1e6,
           "< 1500", cc_cpu < 1500 ? "ok" : "MISSED");
    snprintf(label, sizeof label, "%s: cache hit (new sheaf_kernel)", name);
    printf("%-44s %10.3f %10.3f %10s %s\n", label, h, (double)hit[0] / 1e6, "< 5", h < 5 ? "ok" : "MISSED");
    printf("  %s, each stage alone (min of 5): parse+check %.3f ms; lower+schedule+emit %.3f ms (%zu bytes "
           "of C; skipped on a hit); the JIT's disk hit (key, verify, dlopen) %.3f ms\n",
           name, (double)t_parse / 1e6, (double)t_lower / 1e6, c_bytes, (double)t_hit / 1e6);
  }
  free(cold);
  free(hit);
  free(cold_cpu);
  return rc;
}

int main(int argc, char **argv) {
  int cold_runs = 5, hit_runs = 200;
  const char *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) cold_runs = 3, hit_runs = 50;
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc) hit_runs = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--cold") && i + 1 < argc) cold_runs = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--kernel") && i + 1 < argc) only = argv[++i];
    else {
      fprintf(stderr, "usage: bench_jit [--quick] [--iters N] [--cold N] [--kernel NAME]\n");
      return 2;
    }
  }
  if (hit_runs < 1) hit_runs = 1;
  if (cold_runs < 1) cold_runs = 1;
  sheaf_ctx *ctx = NULL;
  sheaf_ctx_options co = {.threads = 1};
  char err[256];
  if (sheaf_ctx_create(&co, &ctx, err, sizeof err) != SHEAF_OK) {
    fprintf(stderr, "bench_jit: %s\n", err);
    return 1;
  }
  const char *tmp = getenv("TMPDIR");
  char root[512];
  snprintf(root, sizeof root, "%s/sheaf-bench-jit-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(root)) {
    perror("bench_jit: mkdtemp");
    return 1;
  }
  static const char *const flags[] = {"-O3", "-march=native"};
  sh_jit_header hdr = {"sheaf_abi.h", ABI_H, strlen(ABI_H)};
  sh_jit_request req = {.name = "softmax_rows", .source = KERNEL, .source_size = strlen(KERNEL),
                        .flags = flags, .n_flags = 2, .headers = &hdr, .n_headers = 1,
                        .isa = sheaf_isa_name(sheaf_cpu_isa())};
  uint64_t *cold = calloc((size_t)cold_runs, sizeof *cold), *hit = calloc((size_t)hit_runs, sizeof *hit),
           *memo = calloc((size_t)hit_runs, sizeof *memo);
  int rc = 0;
  const char *cc = NULL;
  char dir[600];
  for (int r = 0; r < cold_runs && !rc; r++) {
    snprintf(dir, sizeof dir, "%s/cold-%d", root, r);
    sh_jit_options o = {.cache_dir = dir};
    sh_jit *jit = NULL;
    sh_jit_lib *lib = NULL;
    uint64_t t0 = sheaf_time_ns();
    if (sh_jit_create(ctx, &o, &jit) != SHEAF_OK || sh_jit_load(jit, &req, &lib, NULL) != SHEAF_OK) rc = 1;
    cold[r] = sheaf_time_ns() - t0;
    if (!cc && jit && sh_jit_compiler(jit)) cc = strdup(sh_jit_compiler(jit));
    sh_jit_free(jit);
  }
  if (rc) {
    /* no compiler is a note, not a failure: the JIT is optional */
    bool none = sheaf_ctx_last_status(ctx) == SHEAF_ERR_NOT_FOUND;
    printf("bench_jit: %s\n", sheaf_ctx_last_error(ctx));
    rc = none ? 0 : 1;
  } else {
    sh_jit_options o = {.cache_dir = dir};
    for (int r = 0; r < hit_runs && !rc; r++) {
      sh_jit *jit = NULL;
      sh_jit_lib *lib = NULL;
      bool was_hit = false;
      uint64_t t0 = sheaf_time_ns();
      if (sh_jit_create(ctx, &o, &jit) != SHEAF_OK || sh_jit_load(jit, &req, &lib, &was_hit) != SHEAF_OK ||
          !was_hit || !sh_jit_sym(lib, "softmax_rows"))
        rc = 1;
      hit[r] = sheaf_time_ns() - t0;
      t0 = sheaf_time_ns();
      if (!rc && sh_jit_load(jit, &req, &lib, NULL) != SHEAF_OK) rc = 1;
      memo[r] = sheaf_time_ns() - t0;
      sh_jit_free(jit);
    }
    if (rc) {
      printf("bench_jit: cache hit failed: %s\n", sheaf_ctx_last_error(ctx));
    } else {
      /* medians first: they sort, so [0] is then the minimum */
      double c = median_ms(cold, cold_runs), h = median_ms(hit, hit_runs), m = median_ms(memo, hit_runs);
      printf("JIT cache, one small kernel (%zu bytes of C + a %zu-byte header, -O3 -march=native)\n",
             strlen(KERNEL), strlen(ABI_H));
      printf("compiler: %s\n\n", cc ? cc : "?");
      printf("%-44s %10s %10s %10s\n", "", "median ms", "min ms", "target");
      printf("%-44s %10.1f %10.1f %10s %s\n", "cold compile (empty cache, cc run)", c,
             (double)cold[0] / 1e6, "< 1500", c < 1500 ? "ok" : "MISSED");
      printf("%-44s %10.3f %10.3f %10s %s\n", "cache hit (new sh_jit: verify + dlopen)", h,
             (double)hit[0] / 1e6, "< 5", h < 5 ? "ok" : "MISSED");
      printf("%-44s %10.4f %10.4f %10s\n", "hit on a library the sh_jit holds", m,
             (double)memo[0] / 1e6, "");
      printf("\n%d cold runs, %d hits\n", cold_runs, hit_runs);
      printf("\nThe public API (sheaf_kernel_compile: parse, check, lower, schedule, emit, JIT), ISA %s\n",
             sheaf_isa_name(sheaf_cpu_isa()));
      printf("%-44s %10s %10s %10s\n", "", "median ms", "min ms", "target");
      api_row rows[SH_ARRAY_LEN(API_SRC)];
      bool ran[SH_ARRAY_LEN(API_SRC)] = {0};
      for (size_t i = 0; i < SH_ARRAY_LEN(API_SRC) && !rc; i++) {
        if (only && strcmp(only, API_SRC[i][0])) continue;
        rc = bench_api(ctx, root, API_SRC[i][0], API_SRC[i][1], cold_runs, hit_runs, &rows[i]);
        ran[i] = !rc;
      }
      if (!rc) {
        double worst = 0;
        printf("\nSummary (ms; cold: wall, empty cache, median / min of %d; cc CPU: the compiler's user + sys; "
               "hit: new sheaf_kernel, median / min of %d)\n", cold_runs, hit_runs);
        printf("%-6s %8s %9s %9s %9s %9s %8s %8s  %-13s %s\n", "kernel", "C bytes", "cold", "cold min",
               "cc CPU", "CPU min", "hit", "hit min", "cold < 1500", "hit < 5");
        for (size_t i = 0; i < SH_ARRAY_LEN(API_SRC); i++) {
          if (!ran[i]) continue;
          const api_row *r = &rows[i];
          if (r->cold_ms > worst) worst = r->cold_ms;
          printf("%-6s %8zu %9.1f %9.1f %9.1f %9.1f %8.3f %8.3f  %-13s %s\n", API_SRC[i][0], r->c_bytes, r->cold_ms,
                 r->cold_min_ms, r->cpu_ms, r->cpu_min_ms, r->hit_ms, r->hit_min_ms,
                 r->cold_ms < 1500 ? "ok" : "MISSED", r->hit_ms < 5 ? "ok" : "MISSED");
        }
        double la[3] = {0};
        FILE *f = fopen("/proc/loadavg", "r");
        if (f) {
          if (fscanf(f, "%lf %lf %lf", &la[0], &la[1], &la[2]) != 3) la[0] = la[1] = la[2] = -1;
          fclose(f);
        }
        printf("worst cold compile %.1f ms (median); load average %.2f %.2f %.2f\n", worst, la[0], la[1], la[2]);
      }
    }
  }
  nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  free(cold);
  free(hit);
  free(memo);
  free((void *)(uintptr_t)cc);
  sheaf_ctx_free(ctx);
  return rc;
}
