/*
 * test_linear_util.h — a model of examples/ compiled and bound with seeded
 * weights (sizes from NAME=VALUE strings, nonzero biases) for the
 * linearized mode's tests (test_linear*.c).
 */
#ifndef TEST_LINEAR_UTIL_H
#define TEST_LINEAR_UTIL_H

#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "harness.h"
#include "io/dataset.h"
#include "lang/interp.h"

typedef struct tl_model {
  sh_module m;
  bool have_m;
  char *src;
  size_t len;
  sheaf_model *model;
  sh_lang_bind bind;
  char names[SH_BIND_MAX_OVERRIDES][32];
} tl_model;

static inline void tl_close(sheaf_ctx *ctx, tl_model *t) {
  sh_lang_bind_free(ctx, &t->bind);
  sheaf_model_free(t->model);
  if (t->have_m) sh_module_free(&t->m);
  if (t->src) sh_free(ctx, t->src, t->len + 1);
  memset(t, 0, sizeof *t);
}

/* Compiles path (or src when path is NULL... path names it), binds it seeded. */
static inline bool tl_open_src(sheaf_ctx *ctx, const char *name, const char *text, const char *const *sizes,
                               const sh_dataset *d, tl_model *t) {
  memset(t, 0, sizeof *t);
  if (text) {
    t->len = strlen(text);
    t->src = sh_alloc(ctx, t->len + 1, 1);
    if (!CHECK(t->src != NULL)) return false;
    memcpy(t->src, text, t->len + 1);
  } else if (!CHECK_OK(ctx, sh_file_read(ctx, name, &t->src, &t->len))) {
    return false;
  }
  t->have_m = true;
  if (!CHECK_OK(ctx, sh_lang_compile(&t->m, ctx, name, t->src, t->len)) ||
      !CHECK_OK(ctx, sh_module_require_main(&t->m)) || !CHECK_OK(ctx, sheaf_model_create(ctx, &t->model))) {
    tl_close(ctx, t);
    return false;
  }
  sh_lang_bind_opts bo = {.seed = 7, .vocab = d ? d->vocab : 100};
  for (int i = 0; sizes && sizes[i] && i < SH_BIND_MAX_OVERRIDES; i++) {
    const char *eq = strchr(sizes[i], '=');
    snprintf(t->names[i], sizeof t->names[i], "%.*s", (int)(eq - sizes[i]), sizes[i]);
    bo.override_name[i] = t->names[i];
    bo.override_value[i] = atoll(eq + 1);
    bo.n_overrides++;
  }
  if (!CHECK_OK(ctx, sh_lang_bind_model(&t->m, t->model, &bo, &t->bind))) {
    tl_close(ctx, t);
    return false;
  }
  for (int i = 0; i < t->bind.n_params; i++) { /* nonzero biases */
    int rank;
    const int64_t *shape;
    float *v = sheaf_model_param_data(t->model, t->bind.params[i], &rank, &shape);
    if (v && rank == 1)
      for (int64_t j = 0; j < shape[0]; j++) v[j] = 0.05f * (float)((j * 7 + i) % 11) - 0.25f;
  }
  return true;
}

static inline bool tl_open(sheaf_ctx *ctx, const char *path, const char *const *sizes, const sh_dataset *d,
                           tl_model *t) {
  return tl_open_src(ctx, path, NULL, sizes, d, t);
}

/* Whether sh_lin_check refuses the model in text (bound, sizes seeded as
 * given), its reason in why: the refusal tests of test_linear*.c. */
static inline bool tl_refusal(const char *name, const char *text, const char *const *sizes, char *why, size_t cap) {
  sheaf_ctx *ctx = th_ctx();
  tl_model tm;
  why[0] = 0;
  if (!tl_open_src(ctx, name, text, sizes, NULL, &tm)) return false;
  sheaf_status st = sh_lin_check(&tm.m, &tm.bind, why, cap);
  tl_close(ctx, &tm);
  return CHECK_EQ_INT(st, SHEAF_ERR_UNSUPPORTED);
}

/* A context of `threads` threads with the tests' leak-checking allocator
 * (NULL after a failed CHECK). */
static inline sheaf_ctx *tl_ctx_threads(int threads) {
  sheaf_ctx_options o = {0};
  o.allocator = th_allocator();
  o.threads = threads;
  sheaf_ctx *c = NULL;
  char err[256];
  if (!CHECK_EQ_INT(sheaf_ctx_create(&o, &c, err, sizeof err), SHEAF_OK)) return NULL;
  return c;
}

/* The parts a linear run of n instances should run as (linear.h,
 * sh_lin_set_split): min(threads, n / 2) when split and that is 2 or more. */
static inline int tl_want_parts(int threads, bool split, int n) {
  int p = threads < n / 2 ? threads : n / 2;
  return split && p >= 2 ? p : 0;
}

/* main's outputs of trees 0 .. n-1 of tb by the dynamic runtime, in
 * batches of 32: per tree all its tensors (at most 8) flattened, width
 * floats, at want + t * width. */
static inline bool tl_dynamic_trees(sheaf_ctx *ctx, tl_model *tm, const sh_treebank *tb, sh_word_ids ids, int n,
                                    float *want, int64_t width) {
  sh_interp *ip = NULL;
  sheaf_graph *g = NULL;
  bool ok = CHECK_OK(ctx, sh_interp_create(&tm->m, &tm->bind, &ip)) &&
            CHECK_OK(ctx, sheaf_graph_create(tm->model, NULL, &g));
  sh_value *res = calloc((size_t)n, sizeof *res);
  ok = ok && CHECK(res != NULL);
  for (int first = 0; ok && first < n; first += 32) {
    int last = first + 32 < n ? first + 32 : n;
    for (int t = first; ok && t < last; t++) {
      sh_value in;
      ok = CHECK_OK(ctx, sh_interp_tree(ip, tb, tb->tree_root[t], ids, &in)) &&
           CHECK_OK(ctx, sh_interp_main(ip, g, in, &res[t]));
    }
    ok = ok && CHECK_OK(ctx, sheaf_graph_flush(g));
    for (int t = first; ok && t < last; t++) {
      sheaf_expr ts[8];
      size_t nt = sh_value_tensors(res[t], ts, 8);
      int64_t off = 0;
      for (size_t k = 0; ok && k < nt && k < 8; k++) {
        sheaf_value_view v;
        ok = CHECK_OK(ctx, sheaf_value(g, ts[k], &v));
        int64_t numel = v.rank == 2 ? v.shape[0] * v.shape[1] : v.shape[0];
        ok = ok && CHECK(off + numel <= width);
        if (ok) memcpy(want + (size_t)t * (size_t)width + off, v.data, (size_t)numel * sizeof(float));
        off += numel;
      }
      ok = ok && CHECK_EQ_INT(off, width);
    }
    ok = ok && CHECK_OK(ctx, sheaf_graph_reset(g));
    sh_interp_reset(ip);
  }
  free(res);
  sheaf_graph_free(g);
  sh_interp_free(ip);
  return ok;
}

#endif
