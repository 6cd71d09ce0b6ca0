/*
 * test_models_dynamic.c — the models whose control flow depends on computed
 * values (src/models/decoder.h greedy decoding, beam.h beam search) run on
 * fibers: 64 EWT sentences decoded by sheaf_runner_run_fibers (every
 * policy; one batch of 64, and batches of 7 on 2 threads) give the tokens
 * (identical) and scores (within 1e-5) of one instance at a time
 * (sheaf_runner_run, batch 1, policy none), with one flush per step of the
 * longest instance; beam width 1 is greedy; one decoder step (encoder
 * included) equals a scalar double C implementation of decoder.h's
 * equations; the beam's pre-filtered top-k selects what sorting every
 * candidate selects (widths 2, 4, 7).
 */
#include <stdlib.h>

#include "base/fiber.h"
#include "harness.h"
#include "io/dataset.h"
#include "models/beam.h"

#define EWT_TEST "data/ud_english_ewt/en_ewt-ud-test.conllu"

static const sheaf_policy all_policies[] = {SHEAF_POLICY_SHEAF, SHEAF_POLICY_NONE,
                                            SHEAF_POLICY_DEPTH, SHEAF_POLICY_AGENDA};

typedef struct dec_fix {
  sh_dataset d;
  sheaf_model *m;
  sh_decoder dec;
  int32_t n;
  int32_t *off, *ids;
} dec_fix;

/* The first n EWT sentences (word ids as the data numbers them), a decoder
 * at hidden H, embed E, seeded. */
static bool fix_open(dec_fix *f, int32_t n, int64_t H, int64_t E) {
  sheaf_ctx *ctx = th_ctx();
  memset(f, 0, sizeof *f);
  if (!CHECK_OK(ctx, sh_dataset_load(ctx, EWT_TEST, SH_DATASET_SENTS, &f->d))) return false;
  f->n = n;
  f->off = malloc((size_t)(n + 1) * sizeof *f->off);
  f->ids = malloc((size_t)f->d.sent_off[n] * sizeof *f->ids);
  if (!CHECK(f->off && f->ids)) return false;
  for (int32_t s = 0; s <= n; s++) f->off[s] = f->d.sent_off[s];
  for (int32_t w = 0; w < f->d.sent_off[n]; w++) f->ids[w] = sh_word_id(f->d.ids, f->d.sent_words[w]);
  return CHECK_OK(ctx, sheaf_model_create(ctx, &f->m)) &&
         CHECK_OK(ctx, sh_decoder_declare(f->m, H, E, f->d.vocab, &f->dec)) &&
         CHECK_OK(ctx, sh_decoder_seed(f->m, &f->dec, 7));
}

static void fix_close(dec_fix *f) {
  sheaf_model_free(f->m);
  sh_dataset_free(&f->d);
  free(f->off);
  free(f->ids);
}

typedef struct dec_out {
  int32_t *toks, *len;
  float *score;
  uint64_t waits, fflushes, flushes;
  uint64_t dec_batches, out_batches; /* kernel batches of the decoder cell and of W_out */
} dec_out;

static bool out_init(dec_out *o, int32_t n) {
  o->toks = calloc((size_t)n * SH_DEC_MAX_LEN, sizeof *o->toks);
  o->len = calloc((size_t)n, sizeof *o->len);
  o->score = calloc((size_t)n, sizeof *o->score);
  return o->toks && o->len && o->score;
}

static void out_free(dec_out *o) {
  free(o->toks);
  free(o->len);
  free(o->score);
}

/* Decodes every source on a runner (policy, threads, batch) with or
 * without fibers into o. */
static bool run_dec(dec_fix *f, int beam, sheaf_policy pol, int threads, int64_t batch, bool fibers,
                    dec_out *o) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_runner_opts ro = {batch, threads, pol, SHEAF_PARALLEL_AUTO, NULL};
  sheaf_runner *r = NULL;
  if (!CHECK_OK(ctx, sheaf_runner_create(f->m, &ro, &r))) return false;
  sh_dec_batch b = {&f->dec, f->n, f->off, f->ids, beam, o->toks, o->len, o->score};
  sheaf_status st = fibers ? sheaf_runner_run_fibers(r, 0, f->n, sh_dec_batch_build, NULL, &b)
                           : sheaf_runner_run(r, 0, f->n, sh_dec_batch_build, NULL, &b);
  sheaf_graph_stats gs;
  sheaf_runner_get_stats(r, &gs);
  o->flushes = gs.flushes;
  sheaf_runner_fiber_counts(r, NULL, &o->waits, &o->fflushes);
  enum { MAXK = 256 };
  const char *names[MAXK];
  uint64_t kb[MAXK], kn[MAXK];
  size_t nk = sheaf_runner_kernel_stats(r, MAXK, names, kb, kn);
  o->dec_batches = o->out_batches = 0;
  for (size_t k = 0; k < nk; k++) {
    if (!strcmp(names[k], "lstm W_dec")) o->dec_batches += kb[k];
    if (!strcmp(names[k], "affine W_out")) o->out_batches += kb[k];
  }
  sheaf_runner_free(r);
  return CHECK_OK(ctx, st);
}

/* Instances of got whose tokens differ from ref's or whose score is beyond
 * 1e-5 * max(1, |ref|); the first one reported. */
static int compare(const dec_out *got, const dec_out *ref, int32_t n, const char *what) {
  int bad = 0;
  for (int32_t i = 0; i < n; i++) {
    bool same = got->len[i] == ref->len[i] &&
                !memcmp(got->toks + i * SH_DEC_MAX_LEN, ref->toks + i * SH_DEC_MAX_LEN,
                        (size_t)ref->len[i] * sizeof(int32_t));
    double tol = 1e-5 * fmax(1.0, fabs((double)ref->score[i]));
    if (same && fabs((double)got->score[i] - ref->score[i]) <= tol) continue;
    if (!bad++)
      th_fail(__FILE__, __LINE__, "%s: instance %d: length %d vs %d, score %.7g vs %.7g", what, (int)i,
              (int)got->len[i], (int)ref->len[i], got->score[i], ref->score[i]);
  }
  return bad;
}

static void fibers_equal_single(int beam) {
  if (!sh_fiber_supported()) return;
  enum { N = 64 };
  dec_fix f;
  dec_out ref, got;
  if (!fix_open(&f, N, 32, 16) || !CHECK(out_init(&ref, N) && out_init(&got, N))) goto done;
  /* the reference: one instance at a time, eager */
  if (!run_dec(&f, beam, SHEAF_POLICY_NONE, 1, 1, false, &ref)) goto done;
  int32_t max_len = 0, eos = 0, hist[SH_DEC_MAX_LEN + 1] = {0};
  for (int32_t i = 0; i < N; i++) {
    CHECK(ref.len[i] >= 1 && ref.len[i] <= sh_decoder_max_len(f.off[i + 1] - f.off[i]));
    CHECK(isfinite(ref.score[i]));
    max_len = ref.len[i] > max_len ? ref.len[i] : max_len;
    eos += ref.toks[i * SH_DEC_MAX_LEN + ref.len[i] - 1] == SH_DEC_EOS;
    hist[ref.len[i]]++;
  }
  int distinct = 0;
  for (int k = 0; k <= SH_DEC_MAX_LEN; k++) distinct += hist[k] > 0;
  CHECK(distinct >= 5);  /* the instances stop at varied lengths */
  CHECK(eos >= N / 2);   /* mostly at EOS, not the cap */
  for (size_t p = 0; p < SH_ARRAY_LEN(all_policies); p++) {
    static const struct {
      int threads;
      int64_t batch;
    } cfg[] = {{1, 64}, {2, 7}};
    for (size_t c = 0; c < SH_ARRAY_LEN(cfg); c++) {
      memset(got.len, 0, N * sizeof *got.len);
      if (!run_dec(&f, beam, all_policies[p], cfg[c].threads, cfg[c].batch, true, &got)) continue;
      char what[96];
      snprintf(what, sizeof what, "%s, policy %s, threads %d, batch %d", beam ? "beam" : "greedy",
               sheaf_policy_name(all_policies[p]), cfg[c].threads, (int)cfg[c].batch);
      compare(&got, &ref, N, what);
      if (all_policies[p] == SHEAF_POLICY_NONE || cfg[c].batch != 64) continue;
      /* one flush per step of the longest instance, each for many instances */
      CHECK_EQ_INT(got.fflushes, max_len);
      CHECK_EQ_INT(got.flushes, max_len);
      CHECK(got.waits > 8 * got.fflushes);
      /* every live instance's step in one batch per flush (the depth rule:
       * each step starts at depth 0 whatever the source length) */
      if (all_policies[p] == SHEAF_POLICY_SHEAF || all_policies[p] == SHEAF_POLICY_DEPTH) {
        CHECK_EQ_INT(got.dec_batches, max_len);
        CHECK_EQ_INT(got.out_batches, max_len);
      }
    }
  }
done:
  out_free(&ref);
  out_free(&got);
  fix_close(&f);
}

TEST(models_dynamic_greedy_fibers_equal_one_at_a_time) { fibers_equal_single(0); }
TEST(models_dynamic_beam4_fibers_equal_one_at_a_time) { fibers_equal_single(4); }

TEST(models_dynamic_beam1_is_greedy) {
  enum { N = 24 };
  dec_fix f;
  dec_out g1, b1;
  if (fix_open(&f, N, 16, 8) && CHECK(out_init(&g1, N) && out_init(&b1, N)) &&
      run_dec(&f, 0, SHEAF_POLICY_SHEAF, 1, 1, false, &g1) &&
      run_dec(&f, 1, SHEAF_POLICY_SHEAF, 1, 1, false, &b1))
    for (int32_t i = 0; i < N; i++) {
      CHECK_EQ_INT(b1.len[i], g1.len[i]);
      CHECK(!memcmp(b1.toks + i * SH_DEC_MAX_LEN, g1.toks + i * SH_DEC_MAX_LEN,
                    (size_t)g1.len[i] * sizeof(int32_t)));
    }
  out_free(&g1);
  out_free(&b1);
  fix_close(&f);
}

/* ------------------------------------------- scalar reference of a step */

typedef struct ref_par {
  const float *d;
  int64_t rows, cols;
} ref_par;

static ref_par par(sheaf_model *m, sheaf_param p) {
  int rank;
  const int64_t *shape;
  const float *d = sheaf_model_param_data(m, p, &rank, &shape);
  return (ref_par){d, shape[0], rank == 2 ? shape[1] : 1};
}

/* y[c] = sum_k x[k] W[k][c] + b[c] (b may be NULL) */
static void ref_affine(const double *x, ref_par W, const ref_par *b, double *y) {
  for (int64_t c = 0; c < W.cols; c++) {
    double s = b ? b->d[c] : 0;
    for (int64_t k = 0; k < W.rows; k++) s += x[k] * W.d[k * W.cols + c];
    y[c] = s;
  }
}

static double sig(double x) { return 1 / (1 + exp(-x)); }

/* LSTM cell on x (in floats) and c (in/out), h out. */
static void ref_lstm(const double *x, ref_par W, ref_par b, int64_t H, double *c, double *h) {
  double *z = malloc((size_t)(4 * H) * sizeof *z);
  ref_affine(x, W, &b, z);
  for (int64_t j = 0; j < H; j++) {
    c[j] = sig(z[H + j]) * c[j] + sig(z[j]) * tanh(z[2 * H + j]);
    h[j] = sig(z[3 * H + j]) * tanh(c[j]);
  }
  free(z);
}

TEST(models_dynamic_decoder_step_matches_scalar_reference) {
  sheaf_ctx *ctx = th_ctx();
  enum { H = 12, E = 8, VS = 50, N = 5 };
  const int32_t src[N] = {3, 17, 49, -1, 8}; /* 49 and -1: <unk> */
  sheaf_model *m = NULL;
  sh_decoder p;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  if (!CHECK_OK(ctx, sh_decoder_declare(m, H, E, VS, &p)) || !CHECK_OK(ctx, sh_decoder_seed(m, &p, 11))) {
    sheaf_model_free(m);
    return;
  }
  /* reference: encoder, then two steps (BOS, then token 5) */
  double fw[N][H], bw[N][H], x[E + 2 * H], h[H], c[H], s[H], sc[H], att[H], logp[2][SH_DEC_VOCAB];
  memset(h, 0, sizeof h);
  memset(c, 0, sizeof c);
  for (int t = 0; t < N; t++) {
    int64_t row = src[t] < 0 || src[t] >= VS - 1 ? VS - 1 : src[t];
    for (int k = 0; k < E; k++) x[k] = par(m, p.emb_src).d[row * E + k];
    memcpy(x + E, h, sizeof h);
    ref_lstm(x, par(m, p.W_fwd), par(m, p.b_fwd), H, c, h);
    memcpy(fw[t], h, sizeof h);
  }
  memset(h, 0, sizeof h);
  memset(c, 0, sizeof c);
  for (int t = N - 1; t >= 0; t--) {
    int64_t row = src[t] < 0 || src[t] >= VS - 1 ? VS - 1 : src[t];
    for (int k = 0; k < E; k++) x[k] = par(m, p.emb_src).d[row * E + k];
    memcpy(x + E, h, sizeof h);
    ref_lstm(x, par(m, p.W_bwd), par(m, p.b_bwd), H, c, h);
    memcpy(bw[t], h, sizeof h);
  }
  double ends[2 * H];
  memcpy(ends, fw[N - 1], sizeof fw[0]);
  memcpy(ends + H, bw[0], sizeof bw[0]);
  ref_par b_br = par(m, p.b_br), b_comb = par(m, p.b_comb), b_out = par(m, p.b_out);
  ref_affine(ends, par(m, p.W_br), &b_br, s);
  for (int j = 0; j < H; j++) s[j] = tanh(s[j]), sc[j] = 0, att[j] = 0;
  const int32_t feed[2] = {SH_DEC_BOS, 5};
  for (int t = 0; t < 2; t++) {
    for (int k = 0; k < E; k++) x[k] = par(m, p.emb_tgt).d[feed[t] * E + k];
    memcpy(x + E, att, sizeof att);
    memcpy(x + E + H, s, sizeof s);
    ref_lstm(x, par(m, p.W_dec), par(m, p.b_dec), H, sc, s);
    double q[2 * H], score[N], ctxv[2 * H], hc[3 * H], mx = -1e300, sum = 0;
    ref_affine(s, par(m, p.W_att), NULL, q);
    for (int i = 0; i < N; i++) {
      score[i] = 0;
      for (int k = 0; k < H; k++) score[i] += fw[i][k] * q[k] + bw[i][k] * q[H + k];
      mx = fmax(mx, score[i]);
    }
    for (int i = 0; i < N; i++) sum += exp(score[i] - mx);
    for (int k = 0; k < 2 * H; k++) ctxv[k] = 0;
    for (int i = 0; i < N; i++) {
      double a = exp(score[i] - mx) / sum;
      for (int k = 0; k < H; k++) ctxv[k] += a * fw[i][k], ctxv[H + k] += a * bw[i][k];
    }
    memcpy(hc, s, sizeof s);
    memcpy(hc + H, ctxv, sizeof ctxv);
    ref_affine(hc, par(m, p.W_comb), &b_comb, att);
    for (int j = 0; j < H; j++) att[j] = tanh(att[j]);
    ref_affine(att, par(m, p.W_out), &b_out, logp[t]);
    double lm = -1e300, ls = 0;
    for (int k = 0; k < SH_DEC_VOCAB; k++) lm = fmax(lm, logp[t][k]);
    for (int k = 0; k < SH_DEC_VOCAB; k++) ls += exp(logp[t][k] - lm);
    for (int k = 0; k < SH_DEC_VOCAB; k++) logp[t][k] -= lm + log(ls);
  }
  /* the graph */
  sheaf_graph *g = NULL;
  if (CHECK_OK(ctx, sheaf_graph_create(m, NULL, &g))) {
    sh_dec_enc enc;
    sh_dec_state st;
    sheaf_expr lp[2];
    CHECK_OK(ctx, sh_decoder_encode(g, &p, src, N, &enc));
    CHECK_OK(ctx, sh_decoder_step(g, &p, &enc, &enc.s0, feed[0], 0, &st, &lp[0]));
    CHECK_OK(ctx, sh_decoder_step(g, &p, &enc, &st, feed[1], 1, &st, &lp[1]));
    for (int t = 0; t < 2; t++) TH_VALUE_CLOSE(g, lp[t], logp[t], SH_DEC_VOCAB, "logp of step", t);
    /* the host's pick: argmax of logp with the EOS prior
     * eos_bonus * (t + 1) / n * (max - mean) added to EOS */
    sheaf_value_view v;
    if (CHECK_OK(ctx, sheaf_value(g, lp[0], &v))) {
      float buf[SH_DEC_VOCAB];
      memcpy(buf, v.data, sizeof buf);
      double mx = -1e300, mean = 0;
      for (int k = 0; k < SH_DEC_VOCAB; k++) mx = fmax(mx, buf[k]), mean += buf[k] / (double)SH_DEC_VOCAB;
      double unit = p.eos_bonus * (mx - mean) / N;
      CHECK(unit > 0);
      CHECK_NEAR(sh_decoder_eos_bonus(&p, buf, 0, N), unit, 1e-6);
      CHECK_NEAR(sh_decoder_eos_bonus(&p, buf, 3, N), 4 * unit, 1e-6);
      buf[SH_DEC_EOS] = -100; /* far below the rest */
      int32_t a = sh_decoder_pick_bonus(buf, 0);
      CHECK(a != SH_DEC_EOS);
      CHECK_EQ_INT(sh_decoder_pick_bonus(buf, 100.5 + buf[a]), SH_DEC_EOS);
      CHECK_EQ_INT(sh_decoder_pick_bonus(buf, 99.5 + buf[a]), a);
      buf[SH_DEC_EOS] = buf[a]; /* a tie goes to the lower token */
      CHECK_EQ_INT(sh_decoder_pick_bonus(buf, 0), a < SH_DEC_EOS ? a : SH_DEC_EOS);
    }
    sheaf_graph_free(g);
  }
  sheaf_model_free(m);
}

/* ------------------------------- beam search against a brute-force top-k */

typedef struct rcand {
  double score;
  int parent;
  int32_t tok; /* -1: the parent itself, ended */
} rcand;

static int rcand_cmp(const void *x, const void *y) { /* the better first */
  const rcand *a = x, *b = y;
  if (a->score != b->score) return a->score > b->score ? -1 : 1;
  if (a->parent != b->parent) return a->parent < b->parent ? -1 : 1;
  return (a->tok > b->tok) - (a->tok < b->tok);
}

typedef struct rhyp {
  sh_dec_state s;
  int32_t y, len;
  bool ended;
  double score;
  int32_t toks[SH_DEC_MAX_LEN];
} rhyp;

/* beam.h's search with the selection done by sorting every candidate. */
static sheaf_status ref_beam(sheaf_graph *g, const sh_decoder *p, const int32_t *src, int32_t n, int width,
                             int32_t *out, int32_t *len, float *score) {
  sh_dec_enc enc;
  sheaf_status st = sh_decoder_encode(g, p, src, n, &enc);
  if (st) return st;
  int32_t max_len = sh_decoder_max_len(n);
  rhyp beam[SH_BEAM_MAX_WIDTH], nb[SH_BEAM_MAX_WIDTH];
  sh_dec_state next[SH_BEAM_MAX_WIDTH];
  sheaf_expr logp[SH_BEAM_MAX_WIDTH];
  rcand *c = malloc((size_t)width * (SH_DEC_VOCAB + 1) * sizeof *c);
  if (!c) return SHEAF_ERR_NOMEM;
  int nbeam = 1;
  memset(&beam[0], 0, sizeof beam[0]);
  beam[0].s = enc.s0;
  beam[0].y = SH_DEC_BOS;
  for (int32_t t = 0; !st; t++) {
    bool live = false;
    for (int b = 0; b < nbeam; b++) live |= !beam[b].ended;
    if (!live) break;
    for (int b = 0; b < nbeam && !st; b++)
      if (!beam[b].ended) st = sh_decoder_step(g, p, &enc, &beam[b].s, beam[b].y, t, &next[b], &logp[b]);
    int nc = 0;
    for (int b = 0; b < nbeam && !st; b++) {
      if (beam[b].ended) {
        c[nc++] = (rcand){beam[b].score, b, -1};
        continue;
      }
      sheaf_value_view v;
      if ((st = sheaf_value(g, logp[b], &v))) break;
      double bonus = sh_decoder_eos_bonus(p, v.data, t, n);
      for (int32_t k = 0; k < SH_DEC_VOCAB; k++)
        c[nc++] = (rcand){beam[b].score + (double)v.data[k] + (k == SH_DEC_EOS ? bonus : 0.0), b, k};
    }
    if (st) break;
    qsort(c, (size_t)nc, sizeof *c, rcand_cmp);
    int ntop = nc < width ? nc : width;
    for (int i = 0; i < ntop; i++) {
      const rhyp *par = &beam[c[i].parent];
      rhyp *h = &nb[i];
      *h = *par;
      h->score = c[i].score;
      if (c[i].tok < 0) {
        h->ended = true;
        continue;
      }
      h->s = next[c[i].parent];
      h->y = c[i].tok;
      h->toks[h->len++] = c[i].tok;
      h->ended = c[i].tok == SH_DEC_EOS || h->len >= max_len;
    }
    memcpy(beam, nb, (size_t)ntop * sizeof beam[0]);
    nbeam = ntop;
  }
  free(c);
  if (st) return st;
  *len = beam[0].len;
  memcpy(out, beam[0].toks, (size_t)beam[0].len * sizeof out[0]);
  *score = (float)beam[0].score;
  return SHEAF_OK;
}

/* sh_decoder_beam (its pre-filtered top-k) gives the tokens and the very
 * score of the brute-force selection on the same graph values, widths 2, 4
 * and 7, 12 sentences (one at a time on a policy-none graph). */
TEST(models_dynamic_beam_topk_matches_brute_force) {
  sheaf_ctx *ctx = th_ctx();
  enum { N = 12 };
  dec_fix f;
  sheaf_graph *ga = NULL, *gb = NULL;
  sheaf_graph_opts go = {SHEAF_POLICY_NONE, 1, NULL};
  if (!fix_open(&f, N, 32, 16) || !CHECK_OK(ctx, sheaf_graph_create(f.m, &go, &ga)) ||
      !CHECK_OK(ctx, sheaf_graph_create(f.m, &go, &gb)))
    goto done;
  static const int widths[] = {2, 4, 7};
  int eos_seen = 0;
  for (size_t w = 0; w < SH_ARRAY_LEN(widths); w++)
    for (int32_t i = 0; i < N; i++) {
      const int32_t *src = f.ids + f.off[i];
      int32_t n = f.off[i + 1] - f.off[i], ta[SH_DEC_MAX_LEN], tb[SH_DEC_MAX_LEN], la = 0, lb = 0;
      float sa = 0, sb = 0;
      if (!CHECK_OK(ctx, sheaf_graph_reset(ga)) || !CHECK_OK(ctx, sheaf_graph_reset(gb)) ||
          !CHECK_OK(ctx, sh_decoder_beam(ga, &f.dec, src, n, widths[w], ta, &la, &sa)) ||
          !CHECK_OK(ctx, ref_beam(gb, &f.dec, src, n, widths[w], tb, &lb, &sb)))
        goto done;
      if (!CHECK_EQ_INT(la, lb) || !CHECK(!memcmp(ta, tb, (size_t)la * sizeof ta[0])) || !CHECK(sa == sb)) {
        th_fail(__FILE__, __LINE__, "width %d, sentence %d: length %d vs %d, score %.9g vs %.9g",
                widths[w], (int)i, (int)la, (int)lb, sa, sb);
        goto done;
      }
      eos_seen += la > 0 && ta[la - 1] == SH_DEC_EOS;
    }
  CHECK(eos_seen > 0); /* some searches end at EOS (its bonus path taken) */
done:
  sheaf_graph_free(ga);
  sheaf_graph_free(gb);
  fix_close(&f);
}
