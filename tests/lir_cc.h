/*
 * lir_cc.h — compiles generated kernels with the system C compiler and
 * loads them (the codegen tests and bench/bench_codegen_lir.c). A stand-in
 * until the JIT (src/codegen/jit.c: cache, cc detection, errors) replaces
 * it: writes sheaf_kernel_abi.h and the sources into `dir`, runs
 * `cc -O2 -shared -fPIC <ISA flags> -o X.so ... -lm` and dlopens the result.
 */
#ifndef SHEAF_TESTS_LIR_CC_H
#define SHEAF_TESTS_LIR_CC_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/lir_emit.h"

/* The compiler: $CC, else cc; NULL when it cannot be run. */
static inline const char *lir_cc_path(void) {
  static int probed;
  static const char *cc;
  if (!probed) {
    probed = 1;
    const char *env = getenv("SHEAF_CC");
    const char *cand = env && *env ? env : "cc";
    char cmd[600];
    snprintf(cmd, sizeof cmd, "%s --version >/dev/null 2>&1", cand);
    cc = system(cmd) == 0 ? cand : NULL;
  }
  return cc;
}

static inline const char *lir_cc_isa_flags(sheaf_isa isa) {
  switch (isa) {
  case SHEAF_ISA_AVX512: return "-mavx2 -mfma -mavx512f -mavx512vl -mavx512bw -mavx512dq";
  case SHEAF_ISA_AVX2: return "-mavx2 -mfma";
  default: return "";
  }
}

static inline int lir_write_file(const char *path, const char *text, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int ok = fwrite(text, 1, n, f) == n;
  return fclose(f) == 0 && ok ? 0 : -1;
}

/* Compiles sources[0..n) (each a C file's text) into DIR/TAG.so (or, with
 * link == 0, only to objects) and dlopens it into *handle. 0 on success;
 * else err holds the compiler's output. */
static inline int lir_cc_build(const char *dir, const char *tag, const char *const *sources, int n,
                               sheaf_isa isa, const char *opt, int link, void **handle, char *err,
                               size_t cap) {
  const char *cc = lir_cc_path();
  if (handle) *handle = NULL;
  if (!cc) {
    snprintf(err, cap, "no C compiler");
    return -1;
  }
  char path[700], cmd[8192];
  size_t hn;
  const char *h = sh_lir_abi_header(&hn);
  snprintf(path, sizeof path, "%s/sheaf_kernel_abi.h", dir);
  if (lir_write_file(path, h, hn)) {
    snprintf(err, cap, "cannot write %s", path);
    return -1;
  }
  int len = snprintf(cmd, sizeof cmd, "%s %s %s -fPIC -I%s %s %s/%s%s", cc, opt ? opt : "-O2",
                     lir_cc_isa_flags(isa), dir, link ? "-shared -o" : "-c -o", dir, tag,
                     link ? ".so" : ".o");
  for (int i = 0; i < n; i++) {
    snprintf(path, sizeof path, "%s/%s_%d.c", dir, tag, i);
    if (lir_write_file(path, sources[i], strlen(sources[i]))) {
      snprintf(err, cap, "cannot write %s", path);
      return -1;
    }
    if (!link && n > 1) {
      snprintf(err, cap, "compile-only takes one source");
      return -1;
    }
    len += snprintf(cmd + len, sizeof cmd - (size_t)len, " %s", path);
  }
  snprintf(cmd + len, sizeof cmd - (size_t)len, "%s 2>&1", link ? " -lm" : "");
  FILE *p = popen(cmd, "r");
  if (!p) {
    snprintf(err, cap, "cannot run %s", cc);
    return -1;
  }
  size_t got = 0;
  if (cap) err[0] = '\0';
  while (cap && got + 1 < cap) {
    size_t r = fread(err + got, 1, cap - 1 - got, p);
    if (r == 0) break;
    got += r;
  }
  if (cap) err[got] = '\0';
  char sink[512];
  while (fread(sink, 1, sizeof sink, p) > 0) {}
  int st = pclose(p);
  if (st != 0) return -1;
  if (!link) return 0;
  snprintf(path, sizeof path, "%s/%s.so", dir, tag);
  *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!*handle) {
    snprintf(err, cap, "dlopen %s: %s", path, dlerror());
    return -1;
  }
  return 0;
}

#endif
