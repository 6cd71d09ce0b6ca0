/*
 * ctx.c — context lifetime, last-error message, logging and the allocation
 * wrappers over the caller's allocator hook.
 */
#include "base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
int sheaf_ctx_threads(const sheaf_ctx *ctx) { return ctx ? sh_pool_threads(ctx->pool) : 0; }

sheaf_status sh_failv(sheaf_ctx *ctx, sheaf_status status, const char *fmt, va_list ap) {
  if (!ctx) return status;
  char msg[SH_ERR_MAX]; /* formatted outside the lock: fmt may read ctx->err */
  vsnprintf(msg, sizeof msg, fmt, ap);
  pthread_mutex_lock(&ctx->err_mu);
  memcpy(ctx->err, msg, strlen(msg) + 1);
  ctx->last_status = status;
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
  void *p = ctx->alloc.alloc(ctx->alloc.user, size, align);
  if (!p) sh_fail(ctx, SHEAF_ERR_NOMEM, "out of memory: %zu bytes", size);
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
  if (ptr) ctx->alloc.free(ctx->alloc.user, ptr, size);
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
