/*
 * bench_codegen_prefetch_tile.c — the generated GEMM of the default
 * schedule at AVX2 against variants of its knobs (sh_sched_opts), same
 * process, one thread, thread CPU time, alternating rounds (the first
 * variant rotating); each variant's ratio is the median over rounds of
 * t(variant 0) / t(variant) of the same round (above 1: the variant is
 * faster). Variant 0 is the default; "ctl" (no knobs) is the control: an
 * identical kernel compiled again, whose ratio shows the noise floor.
 * docs/CODEGEN.md, "The default schedule" and "Peers".
 *
 *   bench_codegen_prefetch_tile ROUNDS [MxKxN,...] [NAME:knob=v,knob=v ...]
 *
 * knobs: mr nr row_tiles kc prefetch no_prefetch rem_rows pack_a
 * prefetch_c; probes that
 * edit the emitted C: unroll_k=U (the tiles' k loops unrolled U times; 1:
 * not), plain_ld=1 (sk_ld for sk_ldp, as before it); the shapes
 * default to bench_codegen_peers' four. TILE_EP=1: with bias + GELU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/lir_build.h"
#include "../tests/lir_cc.h"
#include "codegen/lir_emit.h"
#include "codegen/lir_sched.h"
#include "bench_util.h"

enum { MAXV = 10, MAXS = 8, MAXR = 64 };

typedef struct gen {
  void *so;
  sk_entry_fn fn;
  void (*pack)(const int64_t *, const float *, int64_t, int, float *);
  int64_t (*psize)(const int64_t *);
} gen;

static void *sym(void *so, const char *name, const char *suffix) {
  char s[64];
  snprintf(s, sizeof s, "%s%s", name, suffix);
  return dlsym(so, s);
}

/* In place: every occurrence of `from` in s replaced by `to` (not longer). */
static void replace_all(char *s, const char *from, const char *to) {
  size_t nf = strlen(from), nt = strlen(to);
  for (char *t = s; (t = strstr(t, from));) {
    memmove(t + nt, t + nf, strlen(t + nf) + 1);
    memcpy(t, to, nt);
    t += nt;
  }
}

/* The emitted C, edited for a probe (not knobs of the schedule): u = 1
 * drops the emitter's `#pragma GCC unroll 4` on the tiles' k loops, u > 1
 * makes it `unroll u`; plain: sk_ld for sk_ldp (a packed panel's loads
 * foldable into the FMAs again, as before sk_ldp). */
static char *edit_src(const char *src, int u, bool plain) {
  char *o = malloc(strlen(src) + 1);
  strcpy(o, src);
  if (u == 1) replace_all(o, "#pragma GCC unroll 4", "");
  if (u > 1 && u < 10) {
    char to[32];
    snprintf(to, sizeof to, "#pragma GCC unroll %d", u);
    replace_all(o, "#pragma GCC unroll 4", to);
  }
  if (plain) replace_all(o, "sk_ldp", "sk_ld");
  return o;
}

static int build(sheaf_ctx *ctx, const char *dir, const char *name, bool ep, const sh_sched_opts *so, int unroll,
                 bool plain, gen *g) {
  sh_lir_kernel *k = lb_matmul(ctx, name, ep);
  if (!k || sh_sched_default_opts(k, SHEAF_ISA_AVX2, so)) return 0;
  sh_buf b;
  sh_buf_init(&b, ctx);
  if (sh_lir_emit_c(k, &b)) return 0;
  char err[8192];
  char *un = unroll || plain ? edit_src(sh_buf_cstr(&b), unroll, plain) : NULL;
  const char *src = un ? un : sh_buf_cstr(&b);
  if (getenv("TILE_DUMP")) fputs(src, stderr);
  if (lir_cc_build(dir, name, &src, 1, SHEAF_ISA_AVX2, "-O3 -march=native", 1, &g->so, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return 0;
  }
  free(un);
  void *p = sym(g->so, name, "");
  memcpy(&g->fn, &p, sizeof p);
  p = sym(g->so, name, "_pack_B");
  memcpy(&g->pack, &p, sizeof p);
  p = sym(g->so, name, "_packed_size_B");
  memcpy(&g->psize, &p, sizeof p);
  sh_buf_free(&b);
  sh_lir_free(k);
  return g->fn && g->pack && g->psize;
}

/* "name:mr=4,nr=16" → opts; 0 on an unknown knob. */
static int parse(char *spec, char **name, sh_sched_opts *o, int *unroll, bool *plain) {
  memset(o, 0, sizeof *o);
  *unroll = 0, *plain = false;
  char *c = strchr(spec, ':');
  *name = spec;
  if (!c) return 1;
  *c = 0;
  for (char *t = strtok(c + 1, ","); t; t = strtok(NULL, ",")) {
    char *eq = strchr(t, '=');
    if (!eq) return 0;
    *eq = 0;
    int v = atoi(eq + 1);
    if (!strcmp(t, "mr")) o->mr = v;
    else if (!strcmp(t, "nr")) o->nr = v;
    else if (!strcmp(t, "row_tiles")) o->row_tiles = v;
    else if (!strcmp(t, "kc")) o->kc = v;
    else if (!strcmp(t, "prefetch")) o->prefetch = v;
    else if (!strcmp(t, "no_prefetch")) o->no_prefetch = v;
    else if (!strcmp(t, "rem_rows")) o->rem_rows = v;
    else if (!strcmp(t, "pack_a")) o->pack_a = v;
    else if (!strcmp(t, "prefetch_c")) o->prefetch_c = v;
    else if (!strcmp(t, "unroll_k")) *unroll = v;
    else if (!strcmp(t, "plain_ld")) *plain = v != 0;
    else return 0;
  }
  return 1;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 31;
  if (rounds < 1 || rounds > MAXR) rounds = 31;
  int64_t shapes[MAXS][3] = {{64, 256, 1280}, {64, 512, 2048}, {1600, 256, 1280}, {1600, 512, 2048}};
  int ns = 4;
  if (argc > 2 && strchr(argv[2], 'x')) {
    ns = 0;
    for (char *t = strtok(argv[2], ","); t && ns < MAXS; t = strtok(NULL, ","), ns++) {
      long long m, kk, n;
      if (sscanf(t, "%lldx%lldx%lld", &m, &kk, &n) != 3) return fprintf(stderr, "bad shape %s\n", t), 2;
      shapes[ns][0] = m, shapes[ns][1] = kk, shapes[ns][2] = n;
    }
  }
  char *names[MAXV] = {"default", "ctl"};
  sh_sched_opts opts[MAXV] = {{0}};
  int unroll[MAXV] = {0};
  bool plain[MAXV] = {0};
  int nv = 2;
  for (int i = argc > 2 && strchr(argv[2], 'x') ? 3 : 2; i < argc && nv < MAXV; i++, nv++)
    if (!parse(argv[i], &names[nv], &opts[nv], &unroll[nv], &plain[nv])) return fprintf(stderr, "bad variant %s\n", argv[i]), 2;
  bool ep = getenv("TILE_EP") && atoi(getenv("TILE_EP"));
  sheaf_ctx *ctx;
  char err[256];
  sheaf_ctx_options co = {0};
  co.threads = 1;
  if (sheaf_ctx_create(&co, &ctx, err, sizeof err)) return 1;
  char dir[] = "/tmp/sheaf-bench-tile-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  gen g[MAXV];
  for (int v = 0; v < nv; v++) {
    char name[32];
    snprintf(name, sizeof name, "tile_%d", v);
    if (!build(ctx, dir, name, ep, &opts[v], unroll[v], plain[v], &g[v])) return fprintf(stderr, "variant %s failed\n", names[v]), 1;
  }
  sk_abi abi;
  sh_lir_abi_init(ctx, 1, &abi);
  uint64_t seed = 42;
  printf("# %s; %d paired rounds; GFLOP/s of the best round; xR = median over rounds of t(default)/t(variant)\n",
         ep ? "matmul + bias + GELU" : "matmul", rounds);
  for (int s = 0; s < ns; s++) {
    int64_t M = shapes[s][0], K = shapes[s][1], N = shapes[s][2], sizes[3] = {M, N, K};
    float *A = exb_frand_xs(M * K, &seed), *B = exb_frand_xs(K * N, &seed), *bias = exb_frand_xs(N, &seed);
    float *C[MAXV], *Bp[MAXV];
    for (int v = 0; v < nv; v++) {
      /* 64-byte aligned, as the peers bench's outputs and the runtime's buffers */
      C[v] = aligned_alloc(64, (sizeof(float) * (size_t)(M * N) + 63) / 64 * 64);
      size_t pb = (sizeof(float) * (size_t)g[v].psize(sizes) + 63) / 64 * 64;
      Bp[v] = aligned_alloc(64, pb); /* as the kernel API packs a weight */
      g[v].pack(sizes, B, N, 0, Bp[v]);
    }
    double flops = 2.0 * M * N * K, t[MAXR][MAXV], best[MAXV];
    int reps = (int)(2e8 / flops) + 1;
    for (int v = 0; v < nv; v++) best[v] = 1e30;
    for (int r = 0; r < rounds; r++)
      for (int q = 0; q < nv; q++) {
        int v = (q + r) % nv;
        sk_arg args[4] = {{.data = A}, {.data = Bp[v]}, {.data = ep ? (void *)bias : (void *)C[v]}, {.data = C[v]}};
        g[v].fn(&abi, sizes, args);
        double t0 = exb_now_s(true);
        for (int i = 0; i < reps; i++) g[v].fn(&abi, sizes, args);
        t[r][v] = (exb_now_s(true) - t0) / reps;
        if (t[r][v] < best[v]) best[v] = t[r][v];
      }
    double maxd = 0;
    for (int v = 1; v < nv; v++)
      for (int64_t i = 0; i < M * N; i++) {
        double d = C[v][i] - C[0][i];
        if (d < 0) d = -d;
        if (d > maxd) maxd = d;
      }
    printf("%4lld %4lld %4lld:", (long long)M, (long long)K, (long long)N);
    for (int v = 0; v < nv; v++) {
      double rr[MAXR];
      for (int r = 0; r < rounds; r++) rr[r] = t[r][0] / t[r][v];
      exb_sort_f64(rr, (size_t)rounds);
      printf("  %s %.1f GF x%.3f", names[v], flops / best[v] * 1e-9, rr[rounds / 2]);
    }
    printf("%s\n", maxd > 1e-3 ? " DIFFER" : "");
    fflush(stdout);
    for (int v = 0; v < nv; v++) free(C[v]), free(Bp[v]);
    free(A), free(B), free(bias);
  }
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  sheaf_ctx_free(ctx);
  return 0;
}
