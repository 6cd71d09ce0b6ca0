/*
 * test_linear_seq_util.h — a sequence model's linearized outputs against the
 * dynamic runtime's on the bundled EWT sentences (test_linear_seq*.c).
 */
#ifndef TEST_LINEAR_SEQ_UTIL_H
#define TEST_LINEAR_SEQ_UTIL_H

#include <stdlib.h>

#include "compile/linear.h"
#include "harness.h"
#include "io/dataset.h"
#include "models/models.h"
#include "test_linear_util.h"

#define EWT "data/ud_english_ewt/en_ewt-ud-test.conllu"
#define N_SENTS 150

/* main's argument for sentence s: its words w[0 .. len) (mapped by ids);
 * a records test builds token records from them (test_linear_rec.c). */
typedef bool (*dyn_input_fn)(sheaf_ctx *ctx, sh_interp *ip, int s, const int32_t *w, int32_t len, const void *user,
                             sh_value *in);

static inline bool ints_input(sheaf_ctx *ctx, sh_interp *ip, int s, const int32_t *w, int32_t len, const void *user,
                              sh_value *in) {
  (void)s, (void)user;
  return CHECK_OK(ctx, sh_interp_ints(ip, w, len, in));
}

/* Main's outputs of sentences off[0..n) by the dynamic runtime (batches of
 * 32), flattened one after another: instance i at want + at[i]; main's
 * argument made by input (NULL: the word ids). */
static inline bool dynamic_run(sheaf_ctx *ctx, tl_model *tm, const int32_t *off, const int32_t *words, sh_word_ids ids,
                               int n, dyn_input_fn input, const void *user, float *want, int64_t *at, int64_t cap) {
  sh_interp *ip = NULL;
  sheaf_graph *g = NULL;
  bool ok = CHECK_OK(ctx, sh_interp_create(&tm->m, &tm->bind, &ip)) &&
            CHECK_OK(ctx, sheaf_graph_create(tm->model, NULL, &g));
  sh_value *res = calloc((size_t)n, sizeof *res);
  sheaf_expr *ts = malloc(4096 * sizeof *ts);
  int32_t *w = malloc(4096 * sizeof *w);
  int64_t pos = 0;
  ok = ok && CHECK(res && ts && w);
  if (!input) input = ints_input;
  for (int first = 0; ok && first < n; first += 32) {
    int last = first + 32 < n ? first + 32 : n;
    for (int s = first; ok && s < last; s++) {
      int32_t len = off[s + 1] - off[s];
      ok = CHECK(len < 4096);
      for (int32_t k = 0; ok && k < len; k++) w[k] = sh_word_id(ids, words[off[s] + k]);
      sh_value in;
      ok = ok && input(ctx, ip, s, w, len, user, &in) && CHECK_OK(ctx, sh_interp_main(ip, g, in, &res[s]));
    }
    ok = ok && CHECK_OK(ctx, sheaf_graph_flush(g));
    for (int s = first; ok && s < last; s++) {
      size_t nt = sh_value_tensors(res[s], ts, 4096);
      at[s] = pos;
      for (size_t k = 0; ok && k < nt; k++) {
        sheaf_value_view v;
        ok = CHECK_OK(ctx, sheaf_value(g, ts[k], &v));
        int64_t numel = v.rank == 2 ? v.shape[0] * v.shape[1] : v.shape[0];
        ok = ok && CHECK(pos + numel <= cap);
        if (ok) memcpy(want + pos, v.data, (size_t)numel * sizeof(float));
        pos += numel;
      }
    }
    ok = ok && CHECK_OK(ctx, sheaf_graph_reset(g));
    sh_interp_reset(ip);
  }
  at[n] = pos;
  free(res), free(ts), free(w);
  sheaf_graph_free(g);
  sh_interp_free(ip);
  return ok;
}

/* dynamic_run of main(list[i32]). */
static inline bool dynamic_seq(sheaf_ctx *ctx, tl_model *tm, const int32_t *off, const int32_t *words, sh_word_ids ids,
                               int n, float *want, int64_t *at, int64_t cap) {
  return dynamic_run(ctx, tm, off, words, ids, n, NULL, NULL, want, at, cap);
}

/* The linear outputs of instance t of the last run, flattened (rows, then
 * components); the floats written, -1 past cap. */
static inline int64_t linear_outputs(const sh_lin *L, int32_t t, float *dst, int64_t cap) {
  int64_t w = 0;
  for (int32_t k = 0; k < sh_lin_output_rows(L, t); k++)
    for (int c = 0; c < sh_lin_n_outputs(L); c++) {
      int rank;
      int64_t dims[2];
      sh_lin_output_shape(L, c, &rank, dims);
      int64_t numel = rank == 2 ? dims[0] * dims[1] : dims[0];
      const float *p = sh_lin_output_row(L, t, k, c);
      if (!p || w + numel > cap) return -1;
      memcpy(dst + w, p, (size_t)numel * sizeof(float));
      w += numel;
    }
  return w;
}

static inline int64_t elem_width(const sh_lin *L) {
  int64_t width = 0;
  for (int c = 0; c < sh_lin_n_outputs(L); c++) {
    int rank;
    int64_t dims[2];
    sh_lin_output_shape(L, c, &rank, dims);
    width += rank == 2 ? dims[0] * dims[1] : dims[0];
  }
  return width;
}

/* tm (path's model, opened) linearized against the dynamic runtime on n
 * hand-made sentences (off, words: at most 8 words of 64 floats out each),
 * in one batch and one by one: every row within 1e-5 (relative). */
static inline void check_seq_small(sheaf_ctx *ctx, tl_model *tm, const char *path, const int32_t *off,
                                   const int32_t *words, int n) {
  enum { CAP = 8 * 64 };
  sh_word_ids ids = sh_word_ids_of_rows(100);
  sh_lin *L = NULL;
  char why[512];
  float want[CAP], got[CAP];
  int64_t at[16];
  if (!CHECK(n < 16 && off[n] <= 8)) return;
  if (!CHECK_OK(ctx, sh_lin_create(&tm->m, tm->model, &tm->bind, &L, why, sizeof why))) {
    fprintf(stderr, "%s: %s\n", path, why);
    return;
  }
  if (!dynamic_seq(ctx, tm, off, words, ids, n, want, at, CAP)) goto out;
  for (int b = 1; b <= n; b += n > 1 ? n - 1 : 1) {
    memset(got, 0, sizeof got);
    for (int first = 0; first < n; first += b) {
      if (!CHECK_OK(ctx, sh_lin_run_seq(L, off, words, first, b, ids))) goto out;
      for (int t = 0; t < b; t++) {
        int64_t w = linear_outputs(L, t, got + at[first + t], CAP - at[first + t]);
        CHECK_EQ_INT(w, at[first + t + 1] - at[first + t]);
      }
    }
    double worst = sh_max_rel_err(got, want, at[n] / elem_width(L), elem_width(L));
    if (!CHECK(worst <= 1e-5)) fprintf(stderr, "%s batch %d: max rel err %g\n", path, b, worst);
  }
out:
  sh_lin_free(L);
}

/* Runs sentences first .. first + cnt - 1 through L (sh_lin_run_seq, or a
 * records test's sh_lin_run_rec). */
typedef sheaf_status (*lin_run_fn)(sh_lin *L, const sh_dataset *d, int first, int cnt, const void *user);

static inline sheaf_status run_seq_batch(sh_lin *L, const sh_dataset *d, int first, int cnt, const void *user) {
  (void)user;
  return sh_lin_run_seq(L, d->sent_off, d->sent_words, first, cnt, d->ids);
}

/* The linear mode on a context of `threads` threads (split on or off) over
 * sentences 0 .. n-1 in batches of 1 (the first `ones`), 7 and 64, each
 * batch run by run (NULL: run_seq_batch), against want (instance i at
 * want + at[i]): every row within 1e-5 (relative); each run's parts as
 * linear.h says. */
static inline void check_linear_runs(const char *path, const char *const *sizes, const sh_dataset *d, int n, int ones,
                                     lin_run_fn run, const void *user, const float *want, const int64_t *at,
                                     int64_t cap, int threads, bool split) {
  sheaf_ctx *ctx = tl_ctx_threads(threads);
  if (!ctx) return;
  tl_model tm;
  char why[512];
  sh_lin *L = NULL;
  float *got = calloc((size_t)cap, sizeof *got);
  if (!run) run = run_seq_batch;
  if (!CHECK(got != NULL) || !tl_open(ctx, path, sizes, d, &tm)) {
    free(got);
    sheaf_ctx_free(ctx);
    return;
  }
  if (!CHECK_OK(ctx, sh_lin_create(&tm.m, tm.model, &tm.bind, &L, why, sizeof why))) {
    fprintf(stderr, "%s: %s\n", path, why);
    goto out;
  }
  sh_lin_set_split(L, split);
  static const int batches[] = {1, 7, 64};
  for (int bi = 0; bi < 3; bi++) {
    int b = batches[bi];
    int stop = b == 1 ? ones : n;
    memset(got, 0, (size_t)cap * sizeof *got);
    for (int first = 0; first < stop; first += b) {
      int cnt = first + b <= stop ? b : stop - first;
      if (!CHECK_OK(ctx, run(L, d, first, cnt, user))) goto out;
      if (!CHECK_EQ_INT(sh_lin_n_parts(L), tl_want_parts(threads, split, cnt))) goto out;
      for (int t = 0; t < cnt; t++) {
        int64_t w = linear_outputs(L, t, got + at[first + t], cap - at[first + t]);
        if (!CHECK_EQ_INT(w, at[first + t + 1] - at[first + t])) goto out;
      }
    }
    double worst = sh_max_rel_err(got, want, at[stop] / elem_width(L), elem_width(L));
    if (!CHECK(worst <= 1e-5))
      fprintf(stderr, "%s batch %d, %d threads, split %d: max rel err %g\n", path, b, threads, split, worst);
  }
out:
  free(got);
  sh_lin_free(L);
  tl_close(ctx, &tm);
  sheaf_ctx_free(ctx);
}

/* check_linear_runs of main(list[i32]), batch 1 over the first 20 sentences. */
static inline void check_seq_linear(const char *path, const char *const *sizes, const sh_dataset *d, int n,
                                    const float *want, const int64_t *at, int64_t cap, int threads, bool split) {
  check_linear_runs(path, sizes, d, n, 20, NULL, NULL, want, at, cap, threads, split);
}

/* path's outputs by the dynamic runtime on ctx, then by the linearized
 * mode on 1, 2 and 3 threads, split and not (check_seq_linear). */
static inline void check_seq_model_on(sheaf_ctx *ctx, const char *path, const char *const *sizes) {
  if (!th_have_jit_cc(path)) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  sh_dataset d;
  REQUIRE_OK(ctx, sh_dataset_load(ctx, EWT, SH_DATASET_SENTS, &d));
  tl_model tm;
  if (!tl_open(ctx, path, sizes, &d, &tm)) {
    sh_dataset_free(&d);
    return;
  }
  char why[512];
  sh_lin *L = NULL;
  int n = N_SENTS < sh_dataset_count(&d) ? N_SENTS : sh_dataset_count(&d);
  int64_t cap = 0, *at = calloc((size_t)n + 1, sizeof *at);
  float *want = NULL;
  if (!CHECK_OK(ctx, sh_lin_create(&tm.m, tm.model, &tm.bind, &L, why, sizeof why))) {
    fprintf(stderr, "%s: %s\n", path, why);
    goto out;
  }
  CHECK(sh_lin_takes_sequences(L));
  cap = (int64_t)(d.sent_off[n] - d.sent_off[0] + n) * elem_width(L);
  want = calloc((size_t)cap, sizeof *want);
  if (!at || !want || !dynamic_seq(ctx, &tm, d.sent_off, d.sent_words, d.ids, n, want, at, cap)) goto out;
  /* 1, 2 and 3 threads; split over instances (the default) and not */
  for (int threads = 1; threads <= 3; threads++)
    for (int split = 1; split >= (threads > 1 ? 0 : 1); split--)
      check_seq_linear(path, sizes, &d, n, want, at, cap, threads, split);
out:
  free(at), free(want);
  sh_lin_free(L);
  tl_close(ctx, &tm);
  sh_dataset_free(&d);
}

#endif
