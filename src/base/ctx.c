/*
 * ctx.c — context lifetime, last-error message, logging, the memory budget
 * and the allocation wrappers over the caller's allocator hook.
 */
#include "base.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu.h"
#include "pool.h"

static void *default_alloc(void *user, size_t size, size_t align) {
  (void)user;
  if (align < sizeof(void *)) align = sizeof(void *);
  void *p = NULL;
  if (posix_memalign(&p, align, size ? size : 1) != 0) return NULL;
  return p;
}

static void default_free(void *user, void *ptr, size_t size) {
  (void)user;
  (void)size;
  free(ptr);
}

const sheaf_allocator sh_default_allocator = {default_alloc, default_free, NULL};

const char *sheaf_version(void) { return SHEAF_VERSION_STRING; }

const char *sheaf_status_str(sheaf_status status) {
  switch (status) {
  case SHEAF_OK: return "ok";
  case SHEAF_ERR_NOMEM: return "out of memory";
  case SHEAF_ERR_INVALID_ARG: return "invalid argument";
  case SHEAF_ERR_IO: return "i/o error";
  case SHEAF_ERR_PARSE: return "parse error";
  case SHEAF_ERR_FORMAT: return "format error";
  case SHEAF_ERR_SHAPE: return "shape error";
  case SHEAF_ERR_NOT_FOUND: return "not found";
  case SHEAF_ERR_UNSUPPORTED: return "unsupported";
  case SHEAF_ERR_INTERNAL: return "internal error";
  }
  return "unknown status";
}

bool sh_parse_bytes(const char *s, uint64_t *out) {
  if (!s || *s < '0' || *s > '9') return false;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  int shift = 0;
  switch (*end) {
  case 'k': case 'K': shift = 10; end++; break;
  case 'm': case 'M': shift = 20; end++; break;
  case 'g': case 'G': shift = 30; end++; break;
  case 't': case 'T': shift = 40; end++; break;
  default: break;
  }
  if (*end == 'B' || *end == 'b') end++;
  if (errno || *end || v == 0 || v > (UINT64_MAX >> shift)) return false;
  *out = (uint64_t)v << shift;
  return true;
}

/* SHEAF_MEMORY_LIMIT (sh_parse_bytes), else the physical memory; an error
 * message for a malformed value. */
static const char *env_memory_limit(uint64_t *out) {
  const char *env = getenv("SHEAF_MEMORY_LIMIT");
  if (env && *env) {
    if (!sh_parse_bytes(env, out))
      return "SHEAF_MEMORY_LIMIT: expected a positive size such as 8G, 512M or 1000000";
    return NULL;
  }
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  *out = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_MAX;
  return NULL;
}

sheaf_status sheaf_ctx_create(const sheaf_ctx_options *opts, sheaf_ctx **out,
                              char *err_buf, size_t err_buf_size) {
  if (err_buf && err_buf_size) err_buf[0] = '\0';
  if (!out) {
    if (err_buf && err_buf_size)
      snprintf(err_buf, err_buf_size, "sheaf_ctx_create: out is NULL");
    return SHEAF_ERR_INVALID_ARG;
  }
  *out = NULL;
  sheaf_ctx_options o = {0};
  if (opts) o = *opts;
  const sheaf_allocator *a = o.allocator ? o.allocator : &sh_default_allocator;
  if (!a->alloc || !a->free) {
    if (err_buf && err_buf_size)
      snprintf(err_buf, err_buf_size, "sheaf_ctx_create: allocator lacks alloc or free");
    return SHEAF_ERR_INVALID_ARG;
  }
  const char *isa_err = sh_cpu_env_error();
  if (isa_err) {
    if (err_buf && err_buf_size) snprintf(err_buf, err_buf_size, "%s", isa_err);
    return SHEAF_ERR_INVALID_ARG;
  }
  uint64_t mem_limit = o.memory_limit;
  if (!mem_limit) {
    const char *env_err = env_memory_limit(&mem_limit);
    if (env_err) {
      if (err_buf && err_buf_size) snprintf(err_buf, err_buf_size, "%s", env_err);
      return SHEAF_ERR_INVALID_ARG;
    }
  }
  if (o.threads < 0) {
    if (err_buf && err_buf_size)
      snprintf(err_buf, err_buf_size, "sheaf_ctx_create: threads = %d, expected >= 0",
               o.threads);
    return SHEAF_ERR_INVALID_ARG;
  }
  sheaf_ctx *ctx = a->alloc(a->user, sizeof *ctx, 64);
  if (!ctx) {
    if (err_buf && err_buf_size)
      snprintf(err_buf, err_buf_size, "out of memory: context (%zu bytes)", sizeof *ctx);
    return SHEAF_ERR_NOMEM;
  }
  memset(ctx, 0, sizeof *ctx);
  pthread_mutex_init(&ctx->err_mu, NULL);
  ctx->alloc = *a;
  ctx->log = o.log;
  ctx->mem_limit = mem_limit;
  atomic_init(&ctx->mem_held, 0);
  ctx->log_user = o.log_user;
  ctx->log_level = o.log ? o.log_level : SHEAF_LOG_ERROR;
  int threads = o.threads ? o.threads : sh_cpu_count();
  sheaf_status st = sh_pool_create(ctx, threads, &ctx->pool);
  if (st != SHEAF_OK) {
    if (err_buf && err_buf_size) snprintf(err_buf, err_buf_size, "%s", ctx->err);
    a->free(a->user, ctx, sizeof *ctx);
    return st;
  }
  *out = ctx;
  return SHEAF_OK;
}

void sheaf_ctx_free(sheaf_ctx *ctx) {
  if (!ctx) return;
  if (ctx->tuning_free) ctx->tuning_free(ctx, ctx->tuning);
  sh_pool_free(ctx->pool);
  pthread_mutex_destroy(&ctx->err_mu);
  sheaf_allocator a = ctx->alloc;
  a.free(a.user, ctx, sizeof *ctx);
}

const char *sheaf_ctx_last_error(const sheaf_ctx *ctx) { return ctx ? ctx->err : ""; }
sheaf_status sheaf_ctx_last_status(const sheaf_ctx *ctx) {
  return ctx ? ctx->last_status : SHEAF_ERR_INVALID_ARG;
}
void sheaf_ctx_clear_error(sheaf_ctx *ctx) {
  if (!ctx) return;
  ctx->err[0] = '\0';
  ctx->last_status = SHEAF_OK;
}
uint64_t sheaf_ctx_memory_limit(const sheaf_ctx *ctx) { return ctx ? ctx->mem_limit : 0; }

const char *sh_fmt_bytes(char *buf, size_t cap, double b) {
  static const char *const unit[] = {"B", "KB", "MB", "GB", "TB", "PB", "EB"};
  int u = 0;
  while (b >= 1024 && u < 6) {
    b /= 1024;
    u++;
  }
  if (u == 0) snprintf(buf, cap, "%.0f B", b);
  else snprintf(buf, cap, "%.1f %s", b, unit[u]);
  return buf;
}

sheaf_status sh_check_budget(sheaf_ctx *ctx, double bytes, const char *what_fmt, ...) {
  if (bytes <= (double)ctx->mem_limit) return SHEAF_OK;
  char what[256], need[32], have[32];
  va_list ap;
  va_start(ap, what_fmt);
  vsnprintf(what, sizeof what, what_fmt, ap);
  va_end(ap);
  return sh_fail(ctx, SHEAF_ERR_NOMEM,
                 "%s: needs %s, more than the memory budget of %s (set SHEAF_MEMORY_LIMIT or "
                 "sheaf_ctx_options.memory_limit to change it)",
                 what, sh_fmt_bytes(need, sizeof need, bytes),
                 sh_fmt_bytes(have, sizeof have, (double)ctx->mem_limit));
}

int sheaf_ctx_threads(const sheaf_ctx *ctx) { return ctx ? sh_pool_threads(ctx->pool) : 0; }

/* The calling thread's error capture (sh_error_capture). */
static _Thread_local struct {
  const sheaf_ctx *ctx;
  char *buf;
  size_t size;
} tl_capture;

void sh_error_capture(const sheaf_ctx *ctx, char *buf, size_t size) {
  tl_capture.ctx = buf && size ? ctx : NULL;
  tl_capture.buf = buf;
  tl_capture.size = size;
  if (buf && size) buf[0] = '\0';
}

static bool capturing(const sheaf_ctx *ctx) { return ctx && tl_capture.ctx == ctx; }

sheaf_status sh_failv(sheaf_ctx *ctx, sheaf_status status, const char *fmt, va_list ap) {
  if (!ctx) return status;
  char msg[SH_ERR_MAX]; /* formatted outside the lock: fmt may read ctx->err */
  vsnprintf(msg, sizeof msg, fmt, ap);
  pthread_mutex_lock(&ctx->err_mu);
  memcpy(ctx->err, msg, strlen(msg) + 1);
  ctx->last_status = status;
  if (capturing(ctx)) snprintf(tl_capture.buf, tl_capture.size, "%s", msg);
  if (ctx->log) ctx->log(ctx->log_user, SHEAF_LOG_ERROR, msg);
  pthread_mutex_unlock(&ctx->err_mu);
  return status;
}

sheaf_status sh_fail(sheaf_ctx *ctx, sheaf_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sh_failv(ctx, status, fmt, ap);
  va_end(ap);
  return status;
}

sheaf_status sh_fail_prefix(sheaf_ctx *ctx, const char *fmt, ...) {
  if (!ctx) return SHEAF_ERR_INTERNAL;
  char prefix[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&ctx->err_mu);
  char old[SH_ERR_MAX];
  memcpy(old, ctx->err, sizeof old);
  size_t np = strlen(prefix);
  memcpy(ctx->err, prefix, np);
  memcpy(ctx->err + np, ": ", 2);
  size_t room = sizeof ctx->err - np - 3;
  size_t no = strnlen(old, room);
  memcpy(ctx->err + np + 2, old, no);
  ctx->err[np + 2 + no] = '\0';
  sheaf_status st = ctx->last_status;
  pthread_mutex_unlock(&ctx->err_mu);
  if (capturing(ctx) && tl_capture.buf[0]) { /* this thread's own message, prefixed the same way */
    char own[SH_ERR_MAX];
    snprintf(own, sizeof own, "%s", tl_capture.buf);
    snprintf(tl_capture.buf, tl_capture.size, "%s: %s", prefix, own);
  }
  return st;
}

const char *sh_last_error_copy(sheaf_ctx *ctx, char *buf, size_t size) {
  if (!size) return buf;
  buf[0] = '\0';
  if (!ctx) return buf;
  pthread_mutex_lock(&ctx->err_mu);
  snprintf(buf, size, "%s", ctx->err);
  pthread_mutex_unlock(&ctx->err_mu);
  return buf;
}

void sh_log(sheaf_ctx *ctx, sheaf_log_level level, const char *fmt, ...) {
  if (!ctx || !ctx->log || level > ctx->log_level) return;
  char msg[SH_ERR_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  ctx->log(ctx->log_user, level, msg);
}

void *sh_alloc(sheaf_ctx *ctx, size_t size, size_t align) {
  uint64_t held = atomic_fetch_add_explicit(&ctx->mem_held, size, memory_order_relaxed) + size;
  if (SH_UNLIKELY(held > ctx->mem_limit || held < size)) {
    atomic_fetch_sub_explicit(&ctx->mem_held, size, memory_order_relaxed);
    char a[32], h[32], l[32];
    sh_fail(ctx, SHEAF_ERR_NOMEM,
            "out of memory budget: %s more would make %s held, more than the memory budget of %s "
            "(set SHEAF_MEMORY_LIMIT or sheaf_ctx_options.memory_limit to change it)",
            sh_fmt_bytes(a, sizeof a, (double)size), sh_fmt_bytes(h, sizeof h, (double)held),
            sh_fmt_bytes(l, sizeof l, (double)ctx->mem_limit));
    return NULL;
  }
  void *p = ctx->alloc.alloc(ctx->alloc.user, size, align);
  if (!p) {
    atomic_fetch_sub_explicit(&ctx->mem_held, size, memory_order_relaxed);
    sh_fail(ctx, SHEAF_ERR_NOMEM, "out of memory: %zu bytes", size);
  }
  return p;
}

void *sh_malloc(sheaf_ctx *ctx, size_t size) { return sh_alloc(ctx, size, 16); }

void *sh_calloc(sheaf_ctx *ctx, size_t count, size_t size) {
  size_t total;
  if (sh_mul_overflow(count, size, &total)) {
    sh_fail(ctx, SHEAF_ERR_NOMEM, "out of memory: %zu x %zu bytes overflows", count, size);
    return NULL;
  }
  void *p = sh_malloc(ctx, total);
  if (p) memset(p, 0, total);
  return p;
}

void sh_free(sheaf_ctx *ctx, void *ptr, size_t size) {
  if (!ptr) return;
  atomic_fetch_sub_explicit(&ctx->mem_held, size, memory_order_relaxed);
  ctx->alloc.free(ctx->alloc.user, ptr, size);
}

void *sh_realloc(sheaf_ctx *ctx, void *ptr, size_t old_size, size_t new_size) {
  void *p = sh_malloc(ctx, new_size);
  if (!p) return NULL;
  if (ptr) {
    memcpy(p, ptr, old_size < new_size ? old_size : new_size);
    sh_free(ctx, ptr, old_size);
  }
  return p;
}

char *sh_strdup(sheaf_ctx *ctx, const char *s) {
  size_t n = strlen(s) + 1;
  char *p = sh_malloc(ctx, n);
  if (p) memcpy(p, s, n);
  return p;
}

void sh_strfree(sheaf_ctx *ctx, char *s) {
  if (s) sh_free(ctx, s, strlen(s) + 1);
}
