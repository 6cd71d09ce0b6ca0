/*
 * base.h — the context every other module works through: allocation through
 * the caller's hook, the last-error message, logging, and small helpers.
 * Depends on nothing but libc. Internal names start with sh_.
 */
#ifndef SH_BASE_H
#define SH_BASE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sheaf.h"

#define SH_ERR_MAX 2048

struct sh_pool;

struct sheaf_ctx {
  sheaf_allocator alloc;
  sheaf_log_fn log;
  void *log_user;
  sheaf_log_level log_level;
  struct sh_pool *pool;
  uint64_t mem_limit;            /* sheaf_ctx_memory_limit */
  _Atomic uint64_t mem_held;     /* bytes allocated through sh_alloc and not yet freed */
  sheaf_status last_status;
  char err[SH_ERR_MAX];
  pthread_mutex_t err_mu; /* writers of err (runner threads may fail at once) */
  void *tuning;           /* records sheaf_kernel_load_tuning loaded (codegen/tune.h), */
  void (*tuning_free)(sheaf_ctx *ctx, void *tuning); /* freed through this by sheaf_ctx_free */
};

#if defined(__GNUC__)
#define SH_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define SH_PRINTF_V(f) __attribute__((format(printf, f, 0)))
#define SH_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define SH_PRINTF(f, a)
#define SH_PRINTF_V(f)
#define SH_UNLIKELY(x) (x)
#endif

#define SH_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Records `status` and a formatted message as the context's last error, logs
 * it at ERROR level when a log callback is set, and returns `status`. */
sheaf_status sh_fail(sheaf_ctx *ctx, sheaf_status status, const char *fmt, ...)
    SH_PRINTF(3, 4);
sheaf_status sh_failv(sheaf_ctx *ctx, sheaf_status status, const char *fmt, va_list ap)
    SH_PRINTF_V(3);
/* A byte count from the environment: digits, then K, M, G or T (powers of
 * 1024) and an optional B ("8G", "512MB", "1000000"); false unless positive
 * and representable. SHEAF_MEMORY_LIMIT and SHEAF_MAX_INPUT use it. */
bool sh_parse_bytes(const char *s, uint64_t *out);
/* "12.0 GB", "3.1 MB", "512 B": a byte count for messages (buf >= 32). */
const char *sh_fmt_bytes(char *buf, size_t cap, double bytes);
/* SHEAF_OK when `bytes` (a product computed in double, so it cannot wrap)
 * fits the context's memory budget; else fails with SHEAF_ERR_NOMEM and
 * "<what>: needs <bytes>, more than the memory budget of <limit> (...)". */
sheaf_status sh_check_budget(sheaf_ctx *ctx, double bytes, const char *what_fmt, ...)
    SH_PRINTF(3, 4);
/* Prefixes the current last error with "prefix: " (keeps its status). */
sheaf_status sh_fail_prefix(sheaf_ctx *ctx, const char *fmt, ...) SH_PRINTF(2, 3);
/* A copy of the context's last error taken under its lock (runner threads
 * may be writing it): for messages that wrap it. Returns buf. */
const char *sh_last_error_copy(sheaf_ctx *ctx, char *buf, size_t size);
/* While set on a thread (buf non-NULL), every error that thread raises on
 * ctx (sh_fail, sh_fail_prefix) is also written to buf: the thread's own
 * last error, which another thread's failure on the same context cannot
 * overwrite (sheaf_run_shards' shards). buf[0] is cleared when set;
 * sh_error_capture(NULL, NULL, 0) stops it. */
void sh_error_capture(const sheaf_ctx *ctx, char *buf, size_t size);

void sh_log(sheaf_ctx *ctx, sheaf_log_level level, const char *fmt, ...) SH_PRINTF(3, 4);

/* Allocation through the context's hook. On failure these set the last error
 * ("out of memory: N bytes") and return NULL. sh_free takes the size given at
 * allocation; NULL is ignored. */
void *sh_alloc(sheaf_ctx *ctx, size_t size, size_t align);
void *sh_malloc(sheaf_ctx *ctx, size_t size); /* align 16 */
void *sh_calloc(sheaf_ctx *ctx, size_t count, size_t size);
void sh_free(sheaf_ctx *ctx, void *ptr, size_t size);
/* Grows (or shrinks) a block: new block, copy min(old,new), free old. */
void *sh_realloc(sheaf_ctx *ctx, void *ptr, size_t old_size, size_t new_size);
char *sh_strdup(sheaf_ctx *ctx, const char *s);
void sh_strfree(sheaf_ctx *ctx, char *s);

/* size_t arithmetic that reports overflow (true = overflowed). */
static inline bool sh_mul_overflow(size_t a, size_t b, size_t *out) {
  return __builtin_mul_overflow(a, b, out);
}
static inline bool sh_add_overflow(size_t a, size_t b, size_t *out) {
  return __builtin_add_overflow(a, b, out);
}

static inline size_t sh_align_up(size_t x, size_t align) {
  return (x + align - 1) & ~(align - 1);
}

/* The default allocator (aligned malloc/free). */
extern const sheaf_allocator sh_default_allocator;

#endif
