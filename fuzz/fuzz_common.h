/*
 * fuzz_common.h — what every libFuzzer target shares: a check that traps
 * (so libFuzzer records the input), the context reused across inputs, and
 * the contract of a failed text read.
 */
#ifndef SHEAF_FUZZ_COMMON_H
#define SHEAF_FUZZ_COMMON_H

#include <stdlib.h>
#include <string.h>

#include "sheaf.h"

#define REQUIRE(c)                \
  do {                            \
    if (!(c)) __builtin_trap();   \
  } while (0)

/* One single-threaded context for the whole fuzzing process. */
static inline sheaf_ctx *fuzz_ctx(void) {
  static sheaf_ctx *ctx;
  if (!ctx && sheaf_ctx_create(&(sheaf_ctx_options){.threads = 1}, &ctx, NULL, 0) != SHEAF_OK)
    abort();
  return ctx;
}

/* A text reader failed: out of memory, or a parse error whose message
 * starts "NAME:LINE:COL: error: ". */
static inline void fuzz_check_parse_error(sheaf_ctx *ctx, sheaf_status st, const char *name) {
  REQUIRE(st == SHEAF_ERR_PARSE || st == SHEAF_ERR_NOMEM);
  if (st == SHEAF_ERR_PARSE) {
    const char *e = sheaf_ctx_last_error(ctx);
    size_t n = strlen(name);
    REQUIRE(strncmp(e, name, n) == 0 && e[n] == ':' && strstr(e, ": error: "));
  }
}

#endif
