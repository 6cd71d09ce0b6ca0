/*
 * lir_cc.h — compiles generated kernels with the system C compiler and
 * loads them (the codegen tests and bench/bench_codegen_lir.c). A stand-in
 * until the JIT (src/codegen/jit.c: cache, cc detection, errors) replaces
 * it: writes sheaf_kernel_abi.h and the sources into `dir`, runs
 * `cc -O2 -shared -fPIC <ISA flags> -o X.so ... -lm` and dlopens the result.
 *
 * With SHEAF_CACHE_DIR set (CI: one directory for every build's test run)
 * the compiler's outputs are kept under $SHEAF_CACHE_DIR/lir-cc/<key>.so
 * (or .o): the key hashes the compiler's identity (its command, the
 * resolved driver's path, size and mtime, its --version and -dumpmachine
 * output), the flags, the link mode, the ABI header and every source, so
 * a later run with the same inputs loads the object instead of compiling.
 * An entry is written to a temporary name and renamed into place; one that
 * fails to load is rebuilt. Without SHEAF_CACHE_DIR nothing is cached.
 */
#ifndef SHEAF_TESTS_LIR_CC_H
#define SHEAF_TESTS_LIR_CC_H

#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen/jit_int.h"
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

/* The compiler's identity for the cache key: the command, the driver
 * found on PATH (real path, size, mtime) and what --version and
 * -dumpmachine print. "" when it cannot be told (then nothing is cached). */
static inline const char *lir_cc_identity(void) {
  static int probed;
  static char id[4096];
  const char *cc = lir_cc_path();
  if (probed || !cc) return id;
  probed = 1;
  char word[256], path[PATH_MAX], real[PATH_MAX];
  size_t wn = strcspn(cc, " \t");
  if (wn == 0 || wn >= sizeof word) return id;
  memcpy(word, cc, wn);
  word[wn] = '\0';
  const char *found = NULL;
  if (strchr(word, '/')) {
    found = word;
  } else {
    const char *env = getenv("PATH");
    for (const char *d = env ? env : ""; *d && !found;) {
      size_t dn = strcspn(d, ":");
      snprintf(path, sizeof path, "%.*s/%s", (int)dn, d, word);
      if (dn && access(path, X_OK) == 0) found = path;
      d += dn + (d[dn] == ':');
    }
  }
  struct stat st;
  if (!found || !realpath(found, real) || stat(real, &st)) return id;
  int len = snprintf(id, sizeof id, "%s => %s size %lld mtime %lld.%09ld\n", cc, real, (long long)st.st_size,
                     (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "%s --version 2>&1 && %s -dumpmachine 2>&1", cc, cc);
  FILE *p = popen(cmd, "r");
  if (!p) {
    id[0] = '\0';
    return id;
  }
  size_t got = (size_t)len;
  for (size_t r; got + 1 < sizeof id && (r = fread(id + got, 1, sizeof id - 1 - got, p)) > 0;) got += r;
  id[got] = '\0';
  char sink[512];
  while (fread(sink, 1, sizeof sink, p) > 0) {}
  if (pclose(p) != 0) id[0] = '\0';
  return id;
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

/* The cache entry for one build into path (cap bytes): false when nothing
 * is cached (no SHEAF_CACHE_DIR, no identity, no directory). */
static inline bool lir_cc_cache_path(char *path, size_t cap, const char *cmd_flags, const char *const *sources,
                                     int n, int link) {
  const char *root = getenv("SHEAF_CACHE_DIR");
  const char *id = lir_cc_identity();
  if (!root || !*root || !id[0]) return false;
  size_t hn;
  const char *h = sh_lir_abi_header(&hn);
  sh_jit_hash hs;
  sh_jit_hash_begin(&hs);
  /* each field with its length first, so no two inputs hash the same bytes */
  const char *fields[3] = {"tests/lir_cc.h 1", id, cmd_flags};
  for (int i = 0; i < 3; i++) {
    uint64_t fl = strlen(fields[i]);
    sh_jit_hash_update(&hs, &fl, sizeof fl);
    sh_jit_hash_update(&hs, fields[i], fl);
  }
  uint64_t v[3] = {(uint64_t)link, (uint64_t)n, hn};
  sh_jit_hash_update(&hs, v, sizeof v);
  sh_jit_hash_update(&hs, h, hn);
  for (int i = 0; i < n; i++) {
    uint64_t sl = strlen(sources[i]);
    sh_jit_hash_update(&hs, &sl, sizeof sl);
    sh_jit_hash_update(&hs, sources[i], sl);
  }
  uint8_t tag[16];
  char hex[33];
  sh_jit_hash_final(&hs, tag);
  sh_jit_hex(tag, sizeof tag, hex);
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s/lir-cc", root);
  if (mkdir(root, 0777) && errno != EEXIST) return false;
  if (mkdir(dir, 0777) && errno != EEXIST) return false;
  return (size_t)snprintf(path, cap, "%s/%s%s", dir, hex, link ? ".so" : ".o") < cap;
}

/* Copies from to `to` through a temporary file renamed into place. */
static inline void lir_cc_cache_put(const char *from, const char *to) {
  char tmp[PATH_MAX + 32];
  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", to, (long)getpid());
  FILE *in = fopen(from, "rb"), *out = in ? fopen(tmp, "wb") : NULL;
  int ok = in && out;
  char b[1 << 14];
  for (size_t r; ok && (r = fread(b, 1, sizeof b, in)) > 0;) ok = fwrite(b, 1, r, out) == r;
  ok = ok && !ferror(in);
  if (in) fclose(in);
  if (out && fclose(out)) ok = 0;
  if (!ok || rename(tmp, to)) unlink(tmp);
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
  if (!link && n > 1) {
    snprintf(err, cap, "compile-only takes one source");
    return -1;
  }
  char flags[512], cached[PATH_MAX];
  snprintf(flags, sizeof flags, "%s %s -fPIC %s", opt ? opt : "-O2", lir_cc_isa_flags(isa),
           link ? "-shared -lm" : "-c");
  bool cache = lir_cc_cache_path(cached, sizeof cached, flags, sources, n, link);
  if (cache && access(cached, R_OK) == 0) {
    if (cap) err[0] = '\0';
    if (!link) return 0;
    *handle = dlopen(cached, RTLD_NOW | RTLD_LOCAL);
    if (*handle) return 0;
    unlink(cached); /* does not load: built again below */
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
  snprintf(path, sizeof path, "%s/%s%s", dir, tag, link ? ".so" : ".o");
  if (cache) lir_cc_cache_put(path, cached);
  if (!link) return 0;
  *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!*handle) {
    snprintf(err, cap, "dlopen %s: %s", path, dlerror());
    return -1;
  }
  return 0;
}

#endif
