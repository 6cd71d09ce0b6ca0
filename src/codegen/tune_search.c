/*
 * tune_search.c — the tuner's search (tune.h, sh_tune_kernel): one kernel
 * at one shape. The default schedule is compiled, run on pseudo-random
 * inputs (its outputs are the reference; a ragged kernel's lengths come
 * from the request, else a fixed distribution) and timed; then coordinate
 * descent — one knob at a time, the ISA's register tiles, then each field
 * of sh_tune_fields in order, each value tried with the best knobs so far —
 * repeated while a pass improves, and after the first pass the two fastest
 * tiles jointly with each K block (kc). A candidate whose generated C
 * equals one already measured is skipped (a knob that does not apply to
 * this kernel costs no compile); the others go through the JIT cache (so
 * the winner is already compiled when a run picks it), are checked against
 * the reference (a wrong one is discarded, never recorded) and timed on
 * the thread's CPU clock, min of several runs, weights packed once. A
 * candidate must beat the best by 2 % to replace it (noise); the search
 * stops at the budget or the candidate limit, and the winner is measured
 * against the default again in paired rounds (the order alternating): it
 * is recorded only if it wins clearly — the median of the per-round ratios
 * >= 1.03 and the lower quartile > 1.02 (sh_tune_confirm_wins) — else the
 * default is.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "codegen/jit.h"
#include "codegen/jit_int.h"
#include "codegen/kernel_api.h"
#include "codegen/tune.h"
#include "lang/kernel_ref.h"

#define MAX_SEEN 128
#define MAX_PASSES 8

typedef struct tbench {
  sheaf_ctx *ctx;
  const sh_kernel *k;
  int n_args;
  sheaf_kernel_arg args[64];
  int64_t shapes[64][SH_KERNEL_MAX_RANK];
  size_t bytes[64];
  float *ref; /* the default's outputs, one after another */
  size_t ref_n;
} tbench;

static double now_s(clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void tb_free(tbench *b) {
  for (int i = 0; i < b->n_args; i++)
    if (b->args[i].data) sh_free(b->ctx, b->args[i].data, b->bytes[i]);
  if (b->ref) sh_free(b->ctx, b->ref, (b->ref_n ? b->ref_n : 1) * sizeof(float));
}

static uint64_t xorshift(uint64_t *seed) {
  *seed ^= *seed << 13, *seed ^= *seed >> 7, *seed ^= *seed << 17;
  return *seed;
}

bool sh_tune_is_lengths(const sh_kernel *k, int i) {
  for (int t = 0; t < k->n_tensors; t++)
    for (int d = 0; d < k->tensors[t].rank; d++)
      if (k->tensors[t].dims[d].kind == SH_KEXT_RAGGED && k->tensors[t].dims[d].len == i) return true;
  return false;
}

/* Inputs from a fixed seed: f32 uniform in [-1, 1); lengths from the
 * request's (in order, cycling) or uniform in 1 .. 48; other i32 in
 * 0 .. 7 (a gather's index: below the extent it indexes). Then the outputs, sized by the lengths (kernel_ref.h's layout). */
static sheaf_status tb_init(tbench *b, sheaf_ctx *ctx, const sh_kernel *k, const sh_tune_request *r) {
  memset(b, 0, sizeof *b);
  b->ctx = ctx, b->k = k;
  int n_all = k->n_inputs + k->n_outputs;
  if (n_all > 64)
    return sh_fail(ctx, SHEAF_ERR_UNSUPPORTED, "tuner: kernel '%s' has over 64 arguments", k->name);
  uint64_t seed = 0x9e3779b97f4a7c15u;
  size_t next_len = 0;
  sh_kref_arg in[64];
  int64_t dense_n[64];
  for (int i = 0; i < n_all; i++) {
    const sh_ktensor *t = &k->tensors[i];
    int64_t n = 1;
    for (int d = 0; d < t->rank; d++) {
      b->shapes[i][d] = t->dims[d].kind == SH_KEXT_RAGGED ? -1 : sh_lower_aff(&t->dims[d].aff, r->sizes);
      if (b->shapes[i][d] < -1 || (b->shapes[i][d] >= 0 && __builtin_mul_overflow(n, b->shapes[i][d], &n)) ||
          n > ((int64_t)1 << 31))
        return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "tuner: kernel '%s': argument '%s' is too large or negative",
                       k->name, t->name);
    }
    dense_n[i] = n;
    if (i < k->n_inputs) in[i] = (sh_kref_arg){NULL, 0, t->rank, b->shapes[i]};
  }
  /* i32 inputs, dense f32 ones, then ragged ones and the outputs (their
   * element counts need every input's shape and the lengths) */
  for (int pass = 0; pass < 3; pass++)
    for (int i = 0; i < n_all; i++) {
      const sh_ktensor *t = &k->tensors[i];
      bool i32 = i < k->n_inputs && t->dtype != SH_KDTYPE_F32;
      if (pass != (i32 ? 0 : t->ragged_outer < 0 && i < k->n_inputs ? 1 : 2)) continue;
      int64_t n = dense_n[i];
      if (t->ragged_outer >= 0 || i >= k->n_inputs) {
        size_t m;
        sheaf_status st = sh_kernel_ref_numel(ctx, k, in, k->n_inputs, i, &m);
        if (st) return st;
        if (m > ((size_t)1 << 31))
          return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "tuner: kernel '%s': argument '%s' is too large", k->name,
                         t->name);
        n = (int64_t)m;
      }
      b->bytes[i] = (size_t)(n ? n : 1) * 4;
      void *p = sh_alloc(ctx, b->bytes[i], 64);
      if (!p) return SHEAF_ERR_NOMEM;
      b->args[i] = (sheaf_kernel_arg){i32 ? SHEAF_KERNEL_I32 : SHEAF_KERNEL_F32, p, (size_t)n,
                                      i < k->n_inputs ? t->rank : 0, i < k->n_inputs ? b->shapes[i] : NULL};
      b->n_args = i + 1 > b->n_args ? i + 1 : b->n_args;
      if (i32) {
        int32_t *q = p;
        bool lens = sh_tune_is_lengths(k, i);
        int64_t gx = sh_kernel_gather_extent(k, i, r->sizes); /* a gather's index: below its extent */
        for (int64_t j = 0; j < n; j++) {
          if (!lens) q[j] = (int32_t)(gx > 0 && gx < 8 ? (int64_t)(xorshift(&seed) >> 61) % gx : (int64_t)(xorshift(&seed) >> 61));
          else if (r->lengths && r->n_lengths) q[j] = (int32_t)r->lengths[next_len++ % r->n_lengths];
          else q[j] = 1 + (int32_t)((xorshift(&seed) >> 11) % 48);
        }
      } else if (i < k->n_inputs) {
        float *q = p;
        for (int64_t j = 0; j < n; j++) q[j] = (float)((double)(xorshift(&seed) >> 11) / 4503599627370496.0 - 1.0);
      } else {
        b->ref_n += (size_t)n;
      }
      if (i < k->n_inputs) in[i] = (sh_kref_arg){p, (size_t)n, t->rank, b->shapes[i]};
    }
  b->ref = sh_alloc(ctx, (b->ref_n ? b->ref_n : 1) * sizeof(float), 64);
  return b->ref ? SHEAF_OK : SHEAF_ERR_NOMEM;
}

/* Runs K once; keep: copy the outputs to the reference, else compare them
 * with it (*ok: every element within 1e-4 · max(1, |ref|)). */
static sheaf_status tb_run(tbench *b, sheaf_kernel *K, bool keep, bool *ok) {
  for (int i = b->k->n_inputs; i < b->n_args; i++) memset(b->args[i].data, 0xff, b->bytes[i]); /* NaNs */
  sheaf_status st = sheaf_kernel_run(K, b->args, b->n_args);
  if (st) return st;
  size_t off = 0;
  *ok = true;
  for (int i = b->k->n_inputs; i < b->n_args; i++) {
    const float *o = b->args[i].data;
    for (size_t j = 0; j < b->args[i].numel; j++, off++) {
      if (keep) b->ref[off] = o[j];
      else if (!(fabsf(o[j] - b->ref[off]) <= 1e-4f * fmaxf(1.0f, fabsf(b->ref[off])))) *ok = false;
    }
  }
  return SHEAF_OK;
}

/* Min of several runs on the thread's CPU clock, in ns: at least 3 runs
 * and ~30 ms of them, at most 50; weights packed once beforehand. */
static sheaf_status tb_time(tbench *b, sheaf_kernel *K, double *ns) {
  for (int i = 0; i < b->k->n_inputs; i++) sheaf_kernel_set_weight_version(K, i, 1);
  sheaf_status st = sheaf_kernel_run(K, b->args, b->n_args); /* packs */
  double best = 1e30, total = 0;
  for (int r = 0; !st && r < 50 && (r < 3 || total < 0.03); r++) {
    double t0 = now_s(CLOCK_THREAD_CPUTIME_ID);
    st = sheaf_kernel_run(K, b->args, b->n_args);
    double t = now_s(CLOCK_THREAD_CPUTIME_ID) - t0;
    total += t;
    if (t < best) best = t;
  }
  *ns = best * 1e9;
  return st;
}

typedef struct search {
  sheaf_ctx *ctx;
  const sh_tune_request *r;
  const sh_kernel *k;
  sheaf_isa isa;
  tbench b;
  double t0, best_ns, default_ns;
  double last_cost; /* seconds the last candidate took (compile, check, time) */
  double last_ns;   /* the last candidate's time (0: not measured: seen, refused, wrong, over budget) */
  sh_sched_opts best;
  char seen[MAX_SEEN][33];
  int n_seen, n_cand;
  bool stop;
  char cls[512];
} search;

static void say(search *s, const char *fmt, ...) SH_PRINTF(2, 3);
static void say(search *s, const char *fmt, ...) {
  if (!s->r->progress) return;
  char line[1024];
  int n = snprintf(line, sizeof line, "[%6.1f s] %s %s: ", now_s(CLOCK_MONOTONIC) - s->t0, s->k->name, s->cls);
  va_list ap;
  va_start(ap, fmt);
  if (n > 0 && (size_t)n < sizeof line) vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  va_end(ap);
  s->r->progress(s->r->user, line);
}

/* Whether the C of knobs o was measured already (else it is noted). */
static sheaf_status seen_before(search *s, const sh_sched_opts *o, bool *seen) {
  sh_buf c;
  sh_buf_init(&c, s->ctx);
  sheaf_status st = sh_tune_generate(s->ctx, s->k, s->isa, o, &c, NULL);
  char hex[33];
  *seen = false;
  if (!st) {
    sh_jit_hash_hex(c.data, c.len, hex);
    for (int i = 0; i < s->n_seen && !*seen; i++) *seen = !strcmp(s->seen[i], hex);
    if (!*seen && s->n_seen < MAX_SEEN) memcpy(s->seen[s->n_seen++], hex, 33);
  }
  sh_buf_free(&c);
  return st;
}

static sh_kernel_opts kopts(const search *s, const sh_sched_opts *o) {
  return (sh_kernel_opts){.isa_set = true, .isa = s->isa, .cache_dir = s->r->cache_dir, .cc = s->r->cc,
                          .sched = o, .no_tuning = true};
}

/* One candidate: compiled, checked, timed; the best so far when faster. */
static sheaf_status try_opts(search *s, const sh_sched_opts *o) {
  s->last_ns = 0;
  if (s->stop) return SHEAF_OK;
  if (now_s(CLOCK_MONOTONIC) - s->t0 + s->last_cost > s->r->budget_s || /* the next one would overrun */
      (s->r->max_candidates > 0 && s->n_cand >= s->r->max_candidates)) {
    s->stop = true;
    return SHEAF_OK;
  }
  sh_buf desc;
  sh_buf_init(&desc, s->ctx);
  sh_tune_opts_print(o, &desc);
  sheaf_status st = sh_buf_status(&desc);
  bool seen = false;
  if (!st && seen_before(s, o, &seen) != SHEAF_OK) { /* knobs the schedule refuses */
    say(s, "%s: skipped (%s)", sh_buf_cstr(&desc), sheaf_ctx_last_error(s->ctx));
    sh_buf_free(&desc);
    return SHEAF_OK;
  }
  if (st || seen) {
    sh_buf_free(&desc);
    return st;
  }
  s->n_cand++;
  sh_kernel_opts ko = kopts(s, o);
  sheaf_kernel *K = NULL;
  double c0 = now_s(CLOCK_MONOTONIC);
  st = sh_kernel_compile_opts(s->ctx, s->r->source, s->r->len, s->r->kernel, &ko, &K);
  double compile_s = now_s(CLOCK_MONOTONIC) - c0, ns = 0;
  bool ok = false;
  if (!st) st = tb_run(&s->b, K, false, &ok);
  if (!st && ok) st = tb_time(&s->b, K, &ns);
  if (st) {
    say(s, "%s: failed: %s", sh_buf_cstr(&desc), sheaf_ctx_last_error(s->ctx));
  } else if (!ok) {
    say(s, "%s: DISCARDED, its output differs from the default schedule's", sh_buf_cstr(&desc));
  } else {
    bool better = ns < 0.98 * s->best_ns;
    say(s, "%s: %.1f us (default %.1f, best %.1f; compiled in %.2f s)%s", sh_buf_cstr(&desc), ns / 1e3,
        s->default_ns / 1e3, (better ? ns : s->best_ns) / 1e3, compile_s, better ? "  new best" : "");
    if (better) s->best_ns = ns, s->best = *o;
    s->last_ns = ns;
  }
  sheaf_kernel_free(K);
  sh_buf_free(&desc);
  s->last_cost = now_s(CLOCK_MONOTONIC) - c0;
  return st == SHEAF_ERR_NOMEM ? st : SHEAF_OK; /* a failed candidate is not the search's failure */
}

static int cmp_f64(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

bool sh_tune_confirm_wins(const double *ratios, int n, double *median) {
  double r[SH_TUNE_CONFIRM_ROUNDS];
  if (n < 1 || n > SH_TUNE_CONFIRM_ROUNDS) {
    if (median) *median = 1.0;
    return false;
  }
  memcpy(r, ratios, (size_t)n * sizeof *r);
  qsort(r, (size_t)n, sizeof *r, cmp_f64);
  double med = n % 2 ? r[n / 2] : 0.5 * (r[n / 2 - 1] + r[n / 2]);
  if (median) *median = med;
  /* the candidate 2 % faster in three quarters of the rounds (the lower
   * quartile), and 3 % at the median */
  return n >= 8 && med >= 1.03 && r[n / 4] > 1.02;
}

/* Mean thread-CPU ns per call of K over runs of at least min_s. */
static sheaf_status tb_round(tbench *b, sheaf_kernel *K, double min_s, double *ns) {
  sheaf_status st = SHEAF_OK;
  int n = 0;
  double t0 = now_s(CLOCK_THREAD_CPUTIME_ID), t = 0;
  while (!st && (n < 2 || t < min_s) && n < 1000) {
    st = sheaf_kernel_run(K, b->args, b->n_args);
    n++;
    t = now_s(CLOCK_THREAD_CPUTIME_ID) - t0;
  }
  *ns = t / n * 1e9;
  return st;
}

sheaf_status sh_tune_confirm_pair(sheaf_ctx *ctx, sheaf_kernel *D, sheaf_kernel *C, const sheaf_kernel_arg *args,
                                  int n_args, int rounds, double *ratios, double *d_ns, double *c_ns) {
  if (!ctx) return SHEAF_ERR_INVALID_ARG;
  if (!D || !C || !args || n_args < 1 || n_args > 64 || rounds < 1 || rounds > SH_TUNE_CONFIRM_ROUNDS || !ratios)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sh_tune_confirm_pair: a NULL kernel or args, or rounds not in 1..%d",
                   SH_TUNE_CONFIRM_ROUNDS);
  tbench b;
  memset(&b, 0, sizeof b);
  b.ctx = ctx, b.k = sh_kernel_of(D), b.n_args = n_args;
  memcpy(b.args, args, (size_t)n_args * sizeof *args);
  double bd = 1e30, bc = 1e30, td, tc;
  sheaf_status st = SHEAF_OK;
  for (int i = 0; !st && i < 2; i++) /* warm: packed weights, caches */
    st = sheaf_kernel_run(i ? C : D, args, n_args);
  for (int r = 0; !st && r < rounds; r++) { /* the first one alternating */
    if (r % 2 == 0) {
      if (!(st = tb_round(&b, D, 0.004, &td))) st = tb_round(&b, C, 0.004, &tc);
    } else if (!(st = tb_round(&b, C, 0.004, &tc))) {
      st = tb_round(&b, D, 0.004, &td);
    }
    if (st) break;
    ratios[r] = td / tc;
    if (td < bd) bd = td;
    if (tc < bc) bc = tc;
  }
  if (d_ns) *d_ns = bd;
  if (c_ns) *c_ns = bc;
  return st;
}

/* The winner against the default again, in paired rounds (the search
 * measured each once, on a machine that may be shared): it stays only when
 * it wins clearly (sh_tune_confirm_wins: the median of the per-round
 * ratios >= 1.03, the lower quartile > 1.02); the record keeps the best
 * round's times. */
static sheaf_status confirm(search *s, sheaf_kernel *D) {
  sh_kernel_opts ko = kopts(s, &s->best);
  sheaf_kernel *B = NULL;
  sheaf_status st = sh_kernel_compile_opts(s->ctx, s->r->source, s->r->len, s->r->kernel, &ko, &B); /* a hit */
  double bd = 1e30, bb = 1e30, ratios[SH_TUNE_CONFIRM_ROUNDS], med = 1;
  for (int i = 0; !st && i < s->b.k->n_inputs; i++) sheaf_kernel_set_weight_version(B, i, 1);
  if (!st)
    st = sh_tune_confirm_pair(s->ctx, D, B, s->b.args, s->b.n_args, SH_TUNE_CONFIRM_ROUNDS, ratios, &bd, &bb);
  sheaf_kernel_free(B);
  if (st) return st;
  bool win = sh_tune_confirm_wins(ratios, SH_TUNE_CONFIRM_ROUNDS, &med);
  s->default_ns = bd, s->best_ns = bb;
  if (!win) {
    say(s, "the best is not clearly faster than the default in %d paired rounds (median %.3fx): default kept",
        SH_TUNE_CONFIRM_ROUNDS, med);
    memset(&s->best, 0, sizeof s->best);
    s->best_ns = bd;
  } else {
    say(s, "the best confirmed in %d paired rounds: median %.3fx the default", SH_TUNE_CONFIRM_ROUNDS, med);
  }
  return SHEAF_OK;
}

sheaf_status sh_tune_kernel(sheaf_ctx *ctx, const sh_tune_request *r, sh_tune_rec *out) {
  if (!ctx) return SHEAF_ERR_INVALID_ARG;
  if (!r || !out || !r->source || !r->kernel || !(r->budget_s > 0))
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sh_tune_kernel: a NULL argument or a budget that is not positive");
  memset(out, 0, sizeof *out);
  search s;
  memset(&s, 0, sizeof s);
  s.ctx = ctx, s.r = r, s.t0 = now_s(CLOCK_MONOTONIC);
  s.isa = r->isa_set ? r->isa : sheaf_cpu_isa();
  sh_kernel_opts ko = kopts(&s, NULL);
  sheaf_kernel *D = NULL;
  sheaf_status st = sh_kernel_compile_opts(ctx, r->source, r->len, r->kernel, &ko, &D);
  if (st) return st;
  const sh_kernel *k = s.k = sh_kernel_of(D);
  if (r->n_sizes != k->n_sizes || k->n_sizes > SH_TUNE_MAX_SIZES) {
    sheaf_kernel_free(D);
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "tuner: kernel '%s' has %d sizes, %d given%s", k->name, k->n_sizes,
                   r->n_sizes, k->n_sizes > SH_TUNE_MAX_SIZES ? " (the tuner takes at most 16)" : "");
  }
  /* the record's key */
  snprintf(out->kernel, sizeof out->kernel, "%s", k->name);
  snprintf(out->isa, sizeof out->isa, "%s", sheaf_isa_name(s.isa));
  out->n_sizes = k->n_sizes;
  for (int i = 0; i < k->n_sizes; i++) {
    if (strlen(k->sizes[i].name) >= SH_TUNE_NAME_MAX || strlen(k->name) >= SH_TUNE_NAME_MAX) {
      sheaf_kernel_free(D);
      return sh_fail(ctx, SHEAF_ERR_UNSUPPORTED, "tuner: kernel '%s': a name of 64 bytes or more", k->name);
    }
    snprintf(out->size_names[i], SH_TUNE_NAME_MAX, "%s", k->sizes[i].name);
    out->sizes[i] = r->sizes[i];
    out->cls[i] = sh_tune_bucket(r->sizes[i]);
  }
  sh_buf cls;
  sh_buf_init(&cls, ctx);
  sh_tune_class_print(out, out->sizes, &cls);
  snprintf(s.cls, sizeof s.cls, "%s", sh_buf_cstr(&cls));
  sh_buf_free(&cls);
  sh_jit *jit = NULL;
  st = sh_tune_kernel_hash(ctx, k, out->ir);
  if (!st) st = sh_jit_create(ctx, &(sh_jit_options){.cache_dir = r->cache_dir, .cc = r->cc}, &jit);
  if (!st) st = sh_tune_compiler_id(ctx, sh_jit_compiler(jit), out->cc);
  sh_jit_free(jit);
  bool ok = true;
  if (!st) st = tb_init(&s.b, ctx, k, r);
  if (!st) st = tb_run(&s.b, D, true, &ok);
  if (!st) st = tb_time(&s.b, D, &s.default_ns);
  sh_sched_opts zero;
  memset(&zero, 0, sizeof zero);
  if (!st) {
    s.best_ns = s.default_ns;
    s.best = zero;
    bool seen;
    st = seen_before(&s, &zero, &seen);
    say(&s, "default schedule: %.1f us", s.default_ns / 1e3);
  }
  /* coordinate descent: the tiles, then each knob with the best so far;
   * again while a pass improves (a repeated candidate costs its emission
   * only); after the first pass, the two fastest tiles with each kc */
  const int(*tiles)[2];
  int nt = sh_tune_tiles(s.isa == SHEAF_ISA_AVX512 ? 16 : s.isa == SHEAF_ISA_AVX2 ? 8 : 1, &tiles), nf;
  const sh_tune_field *f = sh_tune_fields(&nf);
  sh_tune_field fm = f[0], fn = f[1];
  const sh_tune_field *fkc = NULL;
  for (int i = 0; i < nf; i++)
    if (!strcmp(f[i].name, "kc")) fkc = &f[i];
  double tile_ns[8];
  int passes = 0, joint = 0;
  for (int pass = 0; !st && !s.stop && pass < MAX_PASSES; pass++) {
    sh_sched_opts before = s.best;
    passes++;
    for (int t = 0; !st && t < nt; t++) {
      sh_sched_opts o = s.best;
      sh_tune_field_set(&o, &fm, tiles[t][0]);
      sh_tune_field_set(&o, &fn, tiles[t][1]);
      st = try_opts(&s, &o);
      if (pass == 0 && t < 8) tile_ns[t] = s.last_ns;
    }
    for (int i = 0; !st && i < nf; i++) {
      sh_sched_opts base = s.best;
      for (int v = 0; !st && v < f[i].n_vals; v++) {
        sh_sched_opts o = base;
        sh_tune_field_set(&o, &f[i], f[i].vals[v]);
        st = try_opts(&s, &o);
      }
    }
    if (pass == 0 && fkc) { /* the tile and the K block together */
      int top[2] = {-1, -1};
      for (int t = 0; t < nt && t < 8; t++) {
        if (!(tile_ns[t] > 0)) continue;
        if (top[0] < 0 || tile_ns[t] < tile_ns[top[0]]) top[1] = top[0], top[0] = t;
        else if (top[1] < 0 || tile_ns[t] < tile_ns[top[1]]) top[1] = t;
      }
      sh_sched_opts base = s.best;
      for (int q = 0; !st && q < 2 && top[q] >= 0; q++)
        for (int v = 0; !st && v < fkc->n_vals; v++) {
          sh_sched_opts o = base;
          sh_tune_field_set(&o, &fm, tiles[top[q]][0]);
          sh_tune_field_set(&o, &fn, tiles[top[q]][1]);
          sh_tune_field_set(&o, fkc, fkc->vals[v]);
          int before_n = s.n_cand;
          st = try_opts(&s, &o);
          joint += s.n_cand - before_n;
        }
    }
    if (!memcmp(&before, &s.best, sizeof before)) break; /* nothing improved: a local optimum */
  }
  if (!st && !sh_tune_opts_is_default(&s.best)) st = confirm(&s, D);
  if (!st) {
    out->opts = s.best;
    out->ns = s.best_ns;
    out->default_ns = s.default_ns;
    sh_buf d;
    sh_buf_init(&d, ctx);
    sh_tune_opts_print(&s.best, &d);
    say(&s, "chose %s: %.1f us, %.2fx the default (%d candidates compiled, %d of them joint tile x kc, %d pass%s%s)",
        sh_buf_cstr(&d), s.best_ns / 1e3, s.default_ns / s.best_ns, s.n_cand, joint, passes,
        passes == 1 ? "" : "es", s.stop ? ", stopped at the budget" : "");
    if (r->stats)
      *r->stats = (sh_tune_stats){.passes = passes, .compiled = s.n_cand, .joint = joint, .budget_stop = s.stop,
                                  .seconds = now_s(CLOCK_MONOTONIC) - s.t0};
    sh_buf_free(&d);
  }
  tb_free(&s.b);
  sheaf_kernel_free(D);
  return st;
}
