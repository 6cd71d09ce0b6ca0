/*
 * cpu.c — cpuid/xgetbv probing (x86-64), scalar-only elsewhere, and the
 * SHEAF_ISA environment override.
 */
#include "cpu.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define SH_X86 1
#endif

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static sh_cpu_features g_feat;
static sheaf_isa g_host = SHEAF_ISA_SCALAR;
static sheaf_isa g_isa = SHEAF_ISA_SCALAR;
static char g_env_error[160];

#ifdef SH_X86
static uint64_t xgetbv0(void) {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((uint64_t)hi << 32) | lo;
}

static void probe(sh_cpu_features *f) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return;
  bool osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
  f->fma = (c >> 12) & 1;
  if (osxsave && avx) {
    uint64_t xcr0 = xgetbv0();
    f->os_avx = (xcr0 & 0x6) == 0x6;
    f->os_avx512 = f->os_avx && (xcr0 & 0xe0) == 0xe0;
  }
  if (__get_cpuid_max(0, NULL) < 7) return;
  __cpuid_count(7, 0, a, b, c, d);
  f->avx2 = (b >> 5) & 1;
  f->avx512f = (b >> 16) & 1;
  f->avx512dq = (b >> 17) & 1;
  f->avx512bw = (b >> 30) & 1;
  f->avx512vl = (b >> 31) & 1;
}
#else
static void probe(sh_cpu_features *f) { (void)f; }
#endif

static sheaf_isa host_level(const sh_cpu_features *f) {
  if (f->os_avx512 && f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq && f->avx2 &&
      f->fma)
    return SHEAF_ISA_AVX512;
  if (f->os_avx && f->avx2 && f->fma) return SHEAF_ISA_AVX2;
  return SHEAF_ISA_SCALAR;
}

bool sh_cpu_parse_isa(const char *value, sheaf_isa host, sheaf_isa *out) {
  if (!value || !*value) {
    *out = host;
    return true;
  }
  static const struct { const char *name; sheaf_isa isa; } names[] = {
      {"scalar", SHEAF_ISA_SCALAR}, {"avx2", SHEAF_ISA_AVX2}, {"avx512", SHEAF_ISA_AVX512}};
  for (size_t i = 0; i < SH_ARRAY_LEN(names); i++) {
    if (strcmp(value, names[i].name) == 0) {
      *out = names[i].isa < host ? names[i].isa : host;
      return true;
    }
  }
  return false;
}

static void init_once(void) {
  probe(&g_feat);
  g_host = host_level(&g_feat);
  const char *env = getenv("SHEAF_ISA");
  if (!sh_cpu_parse_isa(env, g_host, &g_isa)) {
    g_isa = g_host;
    snprintf(g_env_error, sizeof g_env_error,
             "SHEAF_ISA=%.40s: unknown ISA (expected scalar, avx2 or avx512)", env);
  }
}

const sh_cpu_features *sh_cpu_features_get(void) {
  pthread_once(&g_once, init_once);
  return &g_feat;
}

const char *sh_cpu_env_error(void) {
  pthread_once(&g_once, init_once);
  return g_env_error[0] ? g_env_error : NULL;
}

sheaf_isa sheaf_cpu_isa(void) {
  pthread_once(&g_once, init_once);
  return g_isa;
}

sheaf_isa sheaf_cpu_isa_host(void) {
  pthread_once(&g_once, init_once);
  return g_host;
}

const char *sheaf_isa_name(sheaf_isa isa) {
  switch (isa) {
  case SHEAF_ISA_SCALAR: return "scalar";
  case SHEAF_ISA_AVX2: return "avx2";
  case SHEAF_ISA_AVX512: return "avx512";
  }
  return "unknown";
}

int sh_cpu_count(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}
