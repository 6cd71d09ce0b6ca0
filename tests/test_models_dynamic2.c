/*
 * test_models_dynamic2.c — the models whose control flow reads computed
 * values (src/models/early_exit.c, src/models/parser.c) on EWT sentences:
 * fiber-batched runs of 64 instances, under every policy, give the outputs
 * of one-instance-at-a-time runs (exit layers, head arrays and action
 * sequences identical; probabilities within 1e-5), with one flush per layer
 * / per decision step instead of one per instance; a plain scalar C
 * implementation of each model (double precision) agrees; every parse is a
 * tree; the exits happen at several depths.
 */
#include <math.h>
#include <stdlib.h>

#include "base/fiber.h"
#include "harness.h"
#include "io/dataset.h"
#include "models/early_exit.h"
#include "models/parser.h"

#define EWT_TEST "data/ud_english_ewt/en_ewt-ud-test.conllu"

static const sheaf_policy all_policies[] = {SHEAF_POLICY_SHEAF, SHEAF_POLICY_NONE,
                                            SHEAF_POLICY_DEPTH, SHEAF_POLICY_AGENDA};

/* EWT sentences as embedding rows: sentence i is rows[off[i] .. off[i+1]). */
typedef struct sents {
  sh_dataset d;
  int32_t *rows, *off, n;
} sents;

static bool sents_load(sents *s) {
  memset(s, 0, sizeof *s);
  if (!CHECK_OK(th_ctx(), sh_dataset_load(th_ctx(), EWT_TEST, SH_DATASET_SENTS, &s->d))) return false;
  s->n = s->d.n_sents;
  s->off = s->d.sent_off;
  s->rows = malloc((size_t)s->d.n_tokens * sizeof *s->rows);
  if (!CHECK(s->rows)) return false;
  for (int32_t k = 0; k < s->d.n_tokens; k++) s->rows[k] = sh_word_id(s->d.ids, s->d.sent_words[k]);
  return true;
}

static void sents_free(sents *s) {
  free(s->rows);
  sh_dataset_free(&s->d);
}

static const float *param(sheaf_model *m, sheaf_param p) {
  int rank;
  const int64_t *shape;
  return sheaf_model_param_data(m, p, &rank, &shape);
}

static double sig(double x) { return 1 / (1 + exp(-x)); }

/* y[0..out) = x[0..in)·W + b, W [in, out] row-major */
static void affine_ref(const float *W, const float *b, const double *x, int64_t in, int64_t out, double *y) {
  for (int64_t j = 0; j < out; j++) y[j] = b[j];
  for (int64_t k = 0; k < in; k++)
    for (int64_t j = 0; j < out; j++) y[j] += x[k] * W[k * out + j];
}

/* ------------------------------------------------------- early exit */

enum { EE_H = 16, EE_L = 6, EE_C = 5, N = 64 };

/* The early-exit model in plain C (double): exit layer, probabilities. */
static int ee_ref(sheaf_model *m, const sh_early_exit *p, const int32_t *rows, int32_t n, double *probs) {
  enum { H = EE_H };
  double *x = malloc((size_t)n * H * sizeof *x), xh[2 * H], z[4 * H], h[H], c[H];
  const float *emb = param(m, p->emb);
  for (int32_t t = 0; t < n; t++)
    for (int k = 0; k < H; k++) x[t * H + k] = emb[(int64_t)rows[t] * H + k];
  int l = 0;
  for (; l < p->layers; l++) {
    for (int k = 0; k < H; k++) h[k] = c[k] = 0;
    for (int32_t t = 0; t < n; t++) {
      for (int k = 0; k < H; k++) xh[k] = x[t * H + k], xh[H + k] = h[k];
      affine_ref(param(m, p->W[l]), param(m, p->b[l]), xh, 2 * H, 4 * H, z);
      for (int k = 0; k < H; k++) {
        c[k] = sig(z[H + k]) * c[k] + sig(z[k]) * tanh(z[2 * H + k]);
        h[k] = sig(z[3 * H + k]) * tanh(c[k]);
        x[t * H + k] = h[k];
      }
    }
    double lg[EE_C], mx = -1e300, sum = 0, best = 0;
    affine_ref(param(m, p->W_head[l]), param(m, p->b_head[l]), h, H, EE_C, lg);
    for (int k = 0; k < EE_C; k++) mx = lg[k] > mx ? lg[k] : mx;
    for (int k = 0; k < EE_C; k++) sum += probs[k] = exp(lg[k] - mx);
    for (int k = 0; k < EE_C; k++) probs[k] /= sum, best = probs[k] > best ? probs[k] : best;
    if (best >= p->threshold) break;
  }
  free(x);
  return l < p->layers ? l + 1 : p->layers;
}

typedef struct ee_out {
  int exit[N];
  float probs[N * EE_C];
} ee_out;

static bool ee_run(sheaf_model *m, const sh_early_exit *p, const sents *s, int32_t first, sheaf_policy pol,
                   int64_t batch, bool fibers, ee_out *o, uint64_t *flushes) {
  sheaf_runner_opts ro = {batch, 1, pol, SHEAF_PARALLEL_AUTO, NULL};
  sheaf_runner *r = NULL;
  if (!CHECK_OK(th_ctx(), sheaf_runner_create(m, &ro, &r))) return false;
  memset(o, 0, sizeof *o);
  bool ok = CHECK_OK(th_ctx(), sh_early_exit_run_many(r, p, s->rows, s->off, first, N, fibers, o->exit, o->probs));
  if (flushes) sheaf_runner_fiber_counts(r, NULL, NULL, flushes);
  sheaf_runner_free(r);
  return ok;
}

TEST(models_dynamic2_early_exit_batched_equals_one_at_a_time) {
  if (!sh_fiber_supported()) return;
  sheaf_ctx *ctx = th_ctx();
  sents s;
  if (!sents_load(&s)) return;
  sheaf_model *m = NULL;
  sh_early_exit p;
  if (CHECK_OK(ctx, sheaf_model_create(ctx, &m)) &&
      CHECK_OK(ctx, sh_early_exit_declare(m, EE_H, s.d.vocab, EE_L, EE_C, &p)) &&
      CHECK_OK(ctx, sh_early_exit_seed(m, &p, 7))) {
    static const int32_t firsts[] = {0, 500};
    for (size_t fi = 0; fi < SH_ARRAY_LEN(firsts); fi++) {
      ee_out ref, got;
      /* the reference: one instance per graph, policy none, each read a flush */
      if (!ee_run(m, &p, &s, firsts[fi], SHEAF_POLICY_NONE, 1, false, &ref, NULL)) break;
      int hist[EE_L + 1] = {0}, max_exit = 0, distinct = 0;
      for (int i = 0; i < N; i++) {
        hist[ref.exit[i]]++;
        max_exit = ref.exit[i] > max_exit ? ref.exit[i] : max_exit;
      }
      for (int l = 1; l <= EE_L; l++) distinct += hist[l] > 0;
      if (!CHECK(distinct >= 3)) /* the instances exit at different depths */
        th_fail(__FILE__, __LINE__, "exit layers 1..6: %d %d %d %d %d %d", hist[1], hist[2], hist[3],
                hist[4], hist[5], hist[6]);
      /* the scalar double reference */
      for (int i = 0; i < N; i += 9) {
        double pr[EE_C] = {0};
        int32_t k = firsts[fi] + i;
        int e = ee_ref(m, &p, s.rows + s.off[k], s.off[k + 1] - s.off[k], pr);
        CHECK_EQ_INT(e, ref.exit[i]);
        for (int c = 0; c < EE_C; c++) CHECK_NEAR(ref.probs[i * EE_C + c], pr[c], 2e-5);
      }
      for (size_t q = 0; q < SH_ARRAY_LEN(all_policies); q++)
        for (int fib = 0; fib < 2; fib++) {
          uint64_t flushes = 0;
          if (!ee_run(m, &p, &s, firsts[fi], all_policies[q], fib ? 64 : 1, fib, &got, &flushes)) continue;
          int bad = 0;
          double err = 0;
          for (int i = 0; i < N; i++) {
            bad += got.exit[i] != ref.exit[i];
            for (int c = 0; c < EE_C; c++) err = fmax(err, fabs(got.probs[i * EE_C + c] - ref.probs[i * EE_C + c]));
          }
          if (bad || !(err <= 1e-5))
            th_fail(__FILE__, __LINE__, "policy %s, %s: %d exit layers differ, probabilities max error %.3g",
                    sheaf_policy_name(all_policies[q]), fib ? "fibers, batch 64" : "batch 1", bad, err);
          /* fibers: one flush per layer reached (policy none computes as it builds: no waits) */
          if (fib && all_policies[q] != SHEAF_POLICY_NONE) CHECK_EQ_INT(flushes, max_exit);
        }
    }
  }
  sheaf_model_free(m);
  sents_free(&s);
}

/* --------------------------------------------------------------- parser */

enum { PA_H = 16 };

/* The parser in plain C (double): heads, actions. */
static void parse_ref(sheaf_model *m, const sh_parser *p, const int32_t *rows, int32_t n, int32_t *heads,
                      int8_t *actions) {
  enum { H = PA_H };
  double *r = malloc((size_t)n * H * sizeof *r), f[3 * H], hid[H], sc[3], hd[2 * H];
  int32_t *stack = malloc((size_t)n * sizeof *stack), sp = 0, b = 0, steps = 0;
  const float *emb = param(m, p->emb);
  for (int32_t t = 0; t < n; t++)
    for (int k = 0; k < H; k++) r[t * H + k] = emb[(int64_t)rows[t] * H + k];
  while (b < n || sp > 1) {
    int act = SH_PARSE_SHIFT;
    if (sp >= 2) {
      for (int k = 0; k < H; k++) {
        f[k] = r[stack[sp - 2] * H + k];
        f[H + k] = r[stack[sp - 1] * H + k];
        f[2 * H + k] = b < n ? r[b * H + k] : 0;
      }
      affine_ref(param(m, p->W_h), param(m, p->b_h), f, 3 * H, H, hid);
      for (int k = 0; k < H; k++) hid[k] = tanh(hid[k]);
      affine_ref(param(m, p->W_a), param(m, p->b_a), hid, H, 3, sc);
      act = b < n ? SH_PARSE_SHIFT : SH_PARSE_LEFT;
      for (int a = act + 1; a < 3; a++)
        if (sc[a] > sc[act]) act = a;
    }
    if (act == SH_PARSE_SHIFT) {
      stack[sp++] = b++;
    } else {
      int32_t s0 = stack[sp - 1], s1 = stack[sp - 2];
      int32_t head = act == SH_PARSE_LEFT ? s0 : s1, dep = act == SH_PARSE_LEFT ? s1 : s0;
      heads[dep] = head + 1;
      for (int k = 0; k < H; k++) hd[k] = r[head * H + k], hd[H + k] = r[dep * H + k];
      affine_ref(param(m, p->W_c), param(m, p->b_c), hd, 2 * H, H, &r[head * H]);
      for (int k = 0; k < H; k++) r[head * H + k] = tanh(r[head * H + k]);
      stack[sp - 2] = head;
      sp--;
    }
    actions[steps++] = (int8_t)act;
  }
  heads[stack[0]] = 0;
  free(r);
  free(stack);
}

typedef struct pa_out {
  int32_t *heads; /* indexed like the rows */
  double sum[N];
} pa_out;

static bool pa_run(sheaf_model *m, const sh_parser *p, const sents *s, int32_t first, sheaf_policy pol,
                   int64_t batch, bool fibers, pa_out *o, uint64_t *flushes, uint64_t *waits,
                   uint64_t *batches) {
  sheaf_runner_opts ro = {batch, 1, pol, SHEAF_PARALLEL_AUTO, NULL};
  sheaf_runner *r = NULL;
  if (!CHECK_OK(th_ctx(), sheaf_runner_create(m, &ro, &r))) return false;
  for (int32_t k = s->off[first]; k < s->off[first + N]; k++) o->heads[k] = -2;
  bool ok = CHECK_OK(th_ctx(), sh_parser_run_many(r, p, s->rows, s->off, first, N, fibers, o->heads, o->sum));
  sheaf_runner_fiber_counts(r, NULL, waits, flushes);
  if (batches) {
    sheaf_graph_stats gs;
    sheaf_runner_get_stats(r, &gs);
    *batches = gs.batches;
  }
  sheaf_runner_free(r);
  return ok;
}

TEST(models_dynamic2_parser_batched_equals_one_at_a_time) {
  if (!sh_fiber_supported()) return;
  sheaf_ctx *ctx = th_ctx();
  sents s;
  if (!sents_load(&s)) return;
  sheaf_model *m = NULL;
  sh_parser p;
  pa_out ref, got;
  ref.heads = malloc((size_t)s.d.n_tokens * sizeof *ref.heads);
  got.heads = malloc((size_t)s.d.n_tokens * sizeof *got.heads);
  int8_t *acts_ref = malloc(4096);
  int32_t *heads_ref = malloc(2048 * sizeof *heads_ref);
  if (CHECK(ref.heads && got.heads && acts_ref && heads_ref) && CHECK_OK(ctx, sheaf_model_create(ctx, &m)) &&
      CHECK_OK(ctx, sh_parser_declare(m, PA_H, s.d.vocab, &p)) && CHECK_OK(ctx, sh_parser_seed(m, &p, 11))) {
    static const int32_t firsts[] = {0, 1200};
    for (size_t fi = 0; fi < SH_ARRAY_LEN(firsts); fi++) {
      int32_t first = firsts[fi];
      if (!pa_run(m, &p, &s, first, SHEAF_POLICY_NONE, 1, false, &ref, NULL, NULL, NULL)) break;
      int64_t steps = 0, n_left = 0, n_right = 0;
      int32_t max_len = 0;
      for (int32_t i = first; i < first + N; i++) {
        int32_t n = s.off[i + 1] - s.off[i];
        max_len = n > max_len ? n : max_len;
        if (!CHECK(sh_parser_is_tree(ref.heads + s.off[i], n)))
          th_fail(__FILE__, __LINE__, "sentence %d: not a tree", (int)i);
        /* the scalar reference */
        parse_ref(m, &p, s.rows + s.off[i], n, heads_ref, acts_ref);
        for (int32_t k = 0; k < n; k++) CHECK_EQ_INT(ref.heads[s.off[i] + k], heads_ref[k]);
        for (int32_t k = 0; k < 2 * n - 1; k++) {
          n_left += acts_ref[k] == SH_PARSE_LEFT;
          n_right += acts_ref[k] == SH_PARSE_RIGHT;
        }
        steps += 2 * n - 1;
      }
      CHECK(n_left > steps / 20 && n_right > steps / 20); /* both reductions are chosen */
      for (size_t q = 0; q < SH_ARRAY_LEN(all_policies); q++)
        for (int fib = 0; fib < 2; fib++) {
          uint64_t flushes = 0, waits = 0, batches = 0;
          if (!pa_run(m, &p, &s, first, all_policies[q], fib ? 64 : 1, fib, &got, &flushes, &waits, &batches))
            continue;
          int bad = 0;
          double err = 0;
          for (int32_t k = s.off[first]; k < s.off[first + N]; k++) bad += got.heads[k] != ref.heads[k];
          for (int i = 0; i < N; i++) err = fmax(err, fabs(got.sum[i] - ref.sum[i]) / fmax(1, fabs(ref.sum[i])));
          if (bad || !(err <= 1e-5))
            th_fail(__FILE__, __LINE__, "policy %s, %s: %d heads differ, score sums max relative error %.3g",
                    sheaf_policy_name(all_policies[q]), fib ? "fibers, batch 64" : "batch 1", bad, err);
          /* fibers: a flush per decision round, at most 2n - 2 for the longest sentence */
          if (fib && all_policies[q] != SHEAF_POLICY_NONE) {
            CHECK(flushes <= (uint64_t)(2 * max_len - 2));
            CHECK(waits > flushes * 8); /* many sentences per flush */
            /* at most one batch per kernel (W_c, W_h, W_a) per flush: a
             * representation computed by an earlier flush is at depth 0,
             * whatever the sentence's action history */
            if (all_policies[q] == SHEAF_POLICY_SHEAF) CHECK(batches <= 3 * flushes);
          }
        }
    }
  }
  sheaf_model_free(m);
  free(ref.heads);
  free(got.heads);
  free(acts_ref);
  free(heads_ref);
  sents_free(&s);
}

TEST(models_dynamic2_parser_tree_check) {
  int32_t ok1[] = {2, 0, 2}, cyc[] = {2, 3, 1}, two_roots[] = {0, 0, 2}, bad_range[] = {0, 4, 1},
          self[] = {0, 2, 1};
  CHECK(sh_parser_is_tree(ok1, 3));
  CHECK(!sh_parser_is_tree(cyc, 3));
  CHECK(!sh_parser_is_tree(two_roots, 3));
  CHECK(!sh_parser_is_tree(bad_range, 3));
  CHECK(!sh_parser_is_tree(self, 3));
}
