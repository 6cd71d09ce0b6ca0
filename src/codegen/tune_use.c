/*
 * tune_use.c — which tuning records the context's kernels ran (tune.h,
 * sh_tune_use; docs/CODEGEN.md, "Tuner"): the context's record set
 * (sheaf_kernel_load_tuning's, created on first use), a tally per record
 * that chose a run's schedule, and sheaf_kernel_tuning_stats, which
 * `sheaf run --stats` prints. Tallies live as long as the context, so a
 * compiled kernel's records point at theirs and a run counts with one
 * relaxed atomic increment.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "codegen/tune.h"

struct sh_tune_uses {
  pthread_mutex_t mu;
  int n;
  sh_tune_use u[SH_TUNE_MAX_USES];
};

static void ctx_set_free(sheaf_ctx *ctx, void *p) {
  sh_tune_set *s = p;
  struct sh_tune_uses *u = s->uses;
  sh_tune_set_free(s);
  if (u) {
    pthread_mutex_destroy(&u->mu);
    sh_free(ctx, u, sizeof *u);
  }
  sh_free(ctx, s, sizeof *s);
}

sh_tune_set *sh_tune_ctx_set(sheaf_ctx *ctx) {
  sh_tune_set *s = __atomic_load_n((sh_tune_set **)&ctx->tuning, __ATOMIC_ACQUIRE);
  if (s) return s;
  s = sh_malloc(ctx, sizeof *s);
  struct sh_tune_uses *u = sh_calloc(ctx, 1, sizeof *u);
  if (!s || !u || pthread_mutex_init(&u->mu, NULL) != 0) {
    if (s) sh_free(ctx, s, sizeof *s);
    if (u) sh_free(ctx, u, sizeof *u);
    return NULL;
  }
  sh_tune_set_init(s, ctx);
  s->uses = u;
  void *expect = NULL; /* two kernels compiling at once: one set wins */
  if (!__atomic_compare_exchange_n(&ctx->tuning, &expect, s, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    ctx_set_free(ctx, s);
    return expect;
  }
  ctx->tuning_free = ctx_set_free;
  return s;
}

sh_tune_use *sh_tune_use_of(sheaf_ctx *ctx, const sh_tune_rec *r) {
  sh_tune_set *s = sh_tune_ctx_set(ctx);
  if (!s || !s->uses) return NULL;
  struct sh_tune_uses *u = s->uses;
  sh_tune_use x;
  memset(&x, 0, sizeof x);
  snprintf(x.kernel, sizeof x.kernel, "%s", r->kernel);
  snprintf(x.origin, sizeof x.origin, "%s", r->origin[0] ? r->origin : "(made in this process)");
  sh_buf b;
  sh_buf_init(&b, ctx);
  sh_tune_class_print(r, NULL, &b);
  snprintf(x.cls, sizeof x.cls, "%s", sh_buf_cstr(&b));
  sh_buf_free(&b);
  sh_buf_init(&b, ctx);
  if (sh_tune_opts_is_default(&r->opts)) sh_buf_puts(&b, "default");
  else sh_tune_opts_print_set(&r->opts, &b);
  snprintf(x.knobs, sizeof x.knobs, "%s", sh_buf_cstr(&b));
  sh_buf_free(&b);
  sh_tune_use *found = NULL;
  pthread_mutex_lock(&u->mu);
  for (int i = 0; i < u->n && !found; i++)
    if (!strcmp(u->u[i].kernel, x.kernel) && !strcmp(u->u[i].origin, x.origin) && !strcmp(u->u[i].cls, x.cls) &&
        !strcmp(u->u[i].knobs, x.knobs))
      found = &u->u[i];
  if (!found && u->n < SH_TUNE_MAX_USES) {
    u->u[u->n] = x;
    found = &u->u[u->n++];
  }
  pthread_mutex_unlock(&u->mu);
  return found;
}

void sh_tune_count(sh_tune_rec *r) {
  if (r->use) __atomic_fetch_add(&r->use->runs, 1, __ATOMIC_RELAXED);
}

SHEAF_API size_t sheaf_kernel_tuning_stats(sheaf_ctx *ctx, size_t cap, sheaf_kernel_tuning_use *out) {
  if (!ctx) return 0;
  sh_tune_set *s = __atomic_load_n((sh_tune_set **)&ctx->tuning, __ATOMIC_ACQUIRE);
  if (!s || !s->uses) return 0;
  struct sh_tune_uses *u = s->uses;
  size_t n = 0;
  pthread_mutex_lock(&u->mu);
  for (int i = 0; i < u->n; i++) {
    uint64_t runs = __atomic_load_n(&u->u[i].runs, __ATOMIC_RELAXED);
    if (!runs) continue;
    if (out && n < cap)
      out[n] = (sheaf_kernel_tuning_use){u->u[i].kernel, u->u[i].origin, u->u[i].cls, u->u[i].knobs, runs};
    n++;
  }
  pthread_mutex_unlock(&u->mu);
  return n;
}
