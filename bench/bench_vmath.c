/*
 * bench_vmath.c — the vector math (src/kernels/vmath.h): accuracy over every
 * f32 input and throughput against a plain scalar libm loop.
 *
 *   accuracy    for each function and each ISA level the host has, the max
 *               error in ulps against a double-precision reference over all
 *               2^32 bit patterns (finite inputs; the ulp is the f32 spacing
 *               at the exact result, 2^-149 for denormal results), plus the
 *               count of special-value mismatches: a NaN/inf input or an
 *               overflowing/underflowing result that differs from the
 *               correctly rounded f32 value's class (NaN, ±inf).
 *   throughput  ns per element (thread CPU time, best of 9 alternating
 *               rounds) on a 4096-float array (L1) of typical inputs,
 *               each level vs the same function written as a plain -O3 loop
 *               over libm (expf, tanhf, logf, erff, 1/(1+expf(-x)), ...).
 *
 *   bench_vmath [--quick] [--stride N] [--fn NAME] [--threads N] [--no-sweep] [--json FILE]
 * --quick sweeps every 97th pattern; the full sweep takes a few minutes on
 * two cores.
 */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "kernels/vmath.h"

/* ------------------------------------------------------------ functions */

typedef struct fn_info {
  sh_vmath_fn fn;
  const char *name;
  float lo, hi; /* throughput inputs: uniform in [lo, hi] */
} fn_info;

static const fn_info fns[] = {
    {SH_VMATH_EXP, "exp", -80.0f, 80.0f},
    {SH_VMATH_SIGMOID, "sigmoid", -20.0f, 20.0f},
    {SH_VMATH_TANH, "tanh", -10.0f, 10.0f},
    {SH_VMATH_LOG, "log", 1e-3f, 1e3f},
    {SH_VMATH_GELU_TANH, "gelu_tanh", -8.0f, 8.0f},
    {SH_VMATH_GELU_ERF, "gelu_erf", -8.0f, 8.0f},
};

static double ref_fn(sh_vmath_fn fn, double x) {
  switch (fn) {
  case SH_VMATH_EXP: return exp(x);
  case SH_VMATH_SIGMOID: return 1.0 / (1.0 + exp(-x));
  case SH_VMATH_TANH: return tanh(x);
  case SH_VMATH_LOG: return log(x);
  case SH_VMATH_GELU_TANH:
    if (x == -INFINITY) return -0.0;
    return x / (1.0 + exp(-2.0 * 0.7978845608028654 * (x + 0.044715 * x * x * x)));
  case SH_VMATH_GELU_ERF:
    if (x == -INFINITY) return -0.0;
    return 0.5 * x * erfc(-x * 0.70710678118654752);
  }
  return x;
}

/* The libm loops a user would write (the throughput baseline). */
__attribute__((noinline)) static void libm_loop(sh_vmath_fn fn, int64_t n, const float *x,
                                                float *y) {
  switch (fn) {
  case SH_VMATH_EXP:
    for (int64_t i = 0; i < n; i++) y[i] = expf(x[i]);
    break;
  case SH_VMATH_SIGMOID:
    for (int64_t i = 0; i < n; i++) y[i] = 1.0f / (1.0f + expf(-x[i]));
    break;
  case SH_VMATH_TANH:
    for (int64_t i = 0; i < n; i++) y[i] = tanhf(x[i]);
    break;
  case SH_VMATH_LOG:
    for (int64_t i = 0; i < n; i++) y[i] = logf(x[i]);
    break;
  case SH_VMATH_GELU_TANH:
    for (int64_t i = 0; i < n; i++) {
      float v = x[i];
      y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
    }
    break;
  case SH_VMATH_GELU_ERF:
    for (int64_t i = 0; i < n; i++) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678f));
    break;
  }
}

/* ------------------------------------------------------------- accuracy */

/* The f32 ulp at |ref|: 2^(e-23) for ref in [2^e, 2^(e+1)), 2^-149 below
 * FLT_MIN (from the double's exponent bits: the sweep calls this 2^32 times). */
static inline double ulp_of(double ref) {
  uint64_t b;
  memcpy(&b, &ref, sizeof b);
  int e = (int)((b >> 52) & 0x7ff) - 1023;
  if (e < -126) e = -126;
  uint64_t u = (uint64_t)(e - 23 + 1023) << 52;
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

typedef struct acc_stats {
  double max_ulp;
  float worst_x;
  uint64_t mismatches;
  float first_mismatch;
} acc_stats;

#define MAX_ISA 3
typedef struct sweep_job {
  sh_vmath_fn fn;
  int n_isa;
  uint64_t stride;
  int tid, n_threads;
  acc_stats st[MAX_ISA];
} sweep_job;

/* Error of y against the exact ref, in ulps; < 0 for a special mismatch. */
static double err_ulp(float y, double ref) {
  if (isnan(ref)) return isnan(y) ? 0 : -1;
  float rf = (float)ref;
  if (isinf(rf)) return y == rf ? 0 : -1;
  if (!isfinite(y)) return -1;
  return fabs((double)y - ref) / ulp_of(ref);
}

static void *sweep_thread(void *arg) {
  sweep_job *j = arg;
  enum { B = 4096 };
  float *x = malloc(B * sizeof(float)), *y = malloc(B * sizeof(float));
  for (int i = 0; i < j->n_isa; i++) j->st[i] = (acc_stats){0, 0, 0, 0};
  /* chunks of B·stride patterns, dealt round-robin to the threads */
  const uint64_t span = (uint64_t)B * j->stride, total = 1ull << 32;
  for (uint64_t c0 = (uint64_t)j->tid * span; c0 < total; c0 += span * (uint64_t)j->n_threads) {
    int n = 0;
    for (uint64_t u = c0; u < c0 + span && u < total; u += j->stride) {
      uint32_t b = (uint32_t)u;
      memcpy(&x[n++], &b, sizeof(float));
    }
    double ref[B];
    for (int i = 0; i < n; i++) ref[i] = ref_fn(j->fn, x[i]);
    for (int isa = 0; isa < j->n_isa; isa++) {
      sh_vmath_f32((sheaf_isa)isa, j->fn, n, x, y);
      acc_stats *s = &j->st[isa];
      for (int i = 0; i < n; i++) {
        double e = err_ulp(y[i], ref[i]);
        if (e < 0 || (!isfinite(x[i]) && e != 0)) {
          if (!s->mismatches++) s->first_mismatch = x[i];
        } else if (isfinite(x[i]) && e > s->max_ulp) {
          s->max_ulp = e;
          s->worst_x = x[i];
        }
      }
    }
  }
  free(x);
  free(y);
  return NULL;
}

static void sweep(sh_vmath_fn fn, int n_isa, uint64_t stride, int threads, acc_stats *out) {
  sweep_job jobs[16];
  pthread_t th[16];
  for (int t = 0; t < threads; t++) {
    jobs[t] = (sweep_job){.fn = fn, .n_isa = n_isa, .stride = stride, .tid = t, .n_threads = threads};
    pthread_create(&th[t], NULL, sweep_thread, &jobs[t]);
  }
  for (int i = 0; i < n_isa; i++) out[i] = (acc_stats){0, 0, 0, 0};
  for (int t = 0; t < threads; t++) {
    pthread_join(th[t], NULL);
    for (int i = 0; i < n_isa; i++) {
      acc_stats *s = &jobs[t].st[i];
      if (s->max_ulp > out[i].max_ulp) {
        out[i].max_ulp = s->max_ulp;
        out[i].worst_x = s->worst_x;
      }
      if (s->mismatches && !out[i].mismatches) out[i].first_mismatch = s->first_mismatch;
      out[i].mismatches += s->mismatches;
    }
  }
}

/* ----------------------------------------------------------- throughput */

/* The thread's CPU clock: on a shared machine the wall clock also counts
 * the time this thread waited for a core. */
static uint64_t cpu_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* ns per element of one ~10 ms round (thread CPU time; the clock is a
 * system call, so it is read once per 64 calls). */
static double time_round(int isa, sh_vmath_fn fn, int64_t n, const float *x, float *y) {
  int iters = 0;
  uint64_t t0 = cpu_ns(), t1;
  do {
    for (int i = 0; i < 64; i++) {
      if (isa < 0) libm_loop(fn, n, x, y);
      else sh_vmath_f32((sheaf_isa)isa, fn, n, x, y);
    }
    iters += 64;
    t1 = cpu_ns();
  } while (t1 - t0 < 10000000ull);
  return (double)(t1 - t0) / ((double)iters * (double)n);
}

/* Best ns per element of libm (t[0]) and each level (t[1 + isa]) over
 * rounds that alternate between them, so background load hits all alike. */
static void time_all(sh_vmath_fn fn, int n_isa, int64_t n, const float *x, float *y, double *t) {
  for (int i = 0; i <= n_isa; i++) t[i] = 1e30;
  for (int round = 0; round < 9; round++)
    for (int i = 0; i <= n_isa; i++) {
      double ns = time_round(i - 1, fn, n, x, y);
      if (ns < t[i]) t[i] = ns;
    }
}

int main(int argc, char **argv) {
  uint64_t stride = 1;
  int threads = 2;
  bool do_sweep = true;
  const char *only = NULL, *json = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) stride = 97;
    else if (!strcmp(argv[i], "--stride") && i + 1 < argc) stride = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--fn") && i + 1 < argc) only = argv[++i];
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!strcmp(argv[i], "--no-sweep")) do_sweep = false;
    else {
      fprintf(stderr, "usage: bench_vmath [--quick] [--stride N] [--fn NAME] [--threads N] "
                      "[--no-sweep] [--json FILE]\n");
      return 2;
    }
  }
  if (stride < 1) stride = 1;
  if (threads < 1) threads = 1;
  if (threads > 16) threads = 16;
  int n_isa = (int)sheaf_cpu_isa() + 1;
  if (n_isa > MAX_ISA) n_isa = MAX_ISA;
  FILE *jf = json ? fopen(json, "w") : NULL;
  if (json && !jf) {
    fprintf(stderr, "bench_vmath: cannot write %s\n", json);
    return 1;
  }
  if (jf) fprintf(jf, "[\n");
  bool first_rec = true;

  enum { N = 4096 };
  float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
  printf("accuracy: every %llu%s f32 bit pattern (%s), max ulp over finite inputs vs double; "
         "throughput: ns/element on %d floats, speedup vs a scalar libm loop\n",
         (unsigned long long)stride, stride == 1 ? "st" : "th",
         stride == 1 ? "all 2^32" : "sampled", N);
  printf("%-10s %-7s %10s %16s %9s %9s %9s %8s\n", "function", "isa", "max ulp", "at x",
         "specials", "ns/elem", "libm ns", "speedup");
  for (size_t f = 0; f < SH_ARRAY_LEN(fns); f++) {
    const fn_info *fi = &fns[f];
    if (only && strcmp(only, fi->name)) continue;
    acc_stats st[MAX_ISA] = {{0}};
    if (do_sweep) sweep(fi->fn, n_isa, stride, threads, st);
    uint64_t seed = 12345;
    for (int i = 0; i < N; i++) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      x[i] = fi->lo + (fi->hi - fi->lo) * (float)((double)(seed >> 40) / (double)(1ull << 24));
    }
    double tt[MAX_ISA + 1];
    time_all(fi->fn, n_isa, N, x, y, tt);
    double t_libm = tt[0];
    for (int isa = 0; isa < n_isa; isa++) {
      double t = tt[1 + isa];
      char ulp[32] = "-", at[32] = "-", spec[32] = "-";
      if (do_sweep) {
        snprintf(ulp, sizeof ulp, "%.3f", st[isa].max_ulp);
        snprintf(at, sizeof at, "%.8g", st[isa].worst_x);
        snprintf(spec, sizeof spec, "%llu", (unsigned long long)st[isa].mismatches);
      }
      printf("%-10s %-7s %10s %16s %9s %9.3f %9.3f %7.1fx", fi->name, sheaf_isa_name((sheaf_isa)isa),
             ulp, at, spec, t, t_libm, t_libm / t);
      if (do_sweep && st[isa].mismatches) printf("  (first special mismatch at x = %g)", st[isa].first_mismatch);
      printf("\n");
      fflush(stdout);
      if (jf) {
        fprintf(jf,
                "%s  {\"fn\": \"%s\", \"isa\": \"%s\", \"stride\": %llu, \"max_ulp\": %.4f, "
                "\"worst_x\": %.9g, \"special_mismatches\": %llu, \"ns_per_elem\": %.4f, "
                "\"libm_ns_per_elem\": %.4f, \"speedup\": %.2f}",
                first_rec ? "" : ",\n", fi->name, sheaf_isa_name((sheaf_isa)isa),
                (unsigned long long)stride, do_sweep ? st[isa].max_ulp : -1.0,
                do_sweep ? st[isa].worst_x : 0.0f,
                (unsigned long long)(do_sweep ? st[isa].mismatches : 0), t, t_libm, t_libm / t);
        first_rec = false;
      }
    }
  }
  if (jf) {
    fprintf(jf, "\n]\n");
    fclose(jf);
  }
  free(x);
  free(y);
  return 0;
}
