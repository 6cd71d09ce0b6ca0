/*
 * test_train_shards_edges.c — edge cases of the gradient shards (src/train/
 * shards.c) against a double-precision reference of the gradients: a
 * lookup table, an affine map and an NLL per instance, the instances over
 * non-contiguous shards (0, 1, 5, 63), one of them without instances, a
 * table row marked in one shard only; then sheaf_model_zero_grad clearing
 * a shard that was never reduced, a reduction that fails for memory and is
 * retried, and a backward that fails for memory followed by the documented
 * recovery (zero, run again). Each checks the model's gradients, the
 * table's row marks, and that every shard is zero and unmarked after a
 * reduction.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "runtime/runtime.h"
#include "sheaf_train.h"

enum { RV = 10, RE = 4, RC = 3, RMAX = 8 };

typedef struct rs_inst {
  int word, tag;
} rs_inst;

typedef struct rs_set {
  sheaf_model *m;
  sheaf_param E, W, b;
  sheaf_graph *g[4];
  int shard[4];          /* the graphs' gradient shards */
  rs_inst inst[4][RMAX]; /* graph k's instances */
  int n[4];
  float scale;
} rs_set;

static sheaf_status rs_run(int k, int n, void *user) {
  (void)n;
  rs_set *s = user;
  if (!s->n[k]) return SHEAF_OK; /* a shard without instances: no pass at all */
  sheaf_status st = sheaf_graph_reset(s->g[k]);
  sheaf_expr loss[RMAX];
  for (int i = 0; i < s->n[k] && !st; i++)
    loss[i] = sheaf_nll(s->g[k], sheaf_affine(s->g[k], s->W, sheaf_lookup(s->g[k], s->E, s->inst[k][i].word), s->b),
                        s->inst[k][i].tag);
  if (!st) st = sheaf_graph_status(s->g[k]);
  sheaf_backward_opts bo = {s->scale, 0, NULL, NULL};
  if (!st) st = sheaf_backward(s->g[k], s->n[k], loss, &bo);
  return st;
}

/* The reference gradients (double) of every instance of the set, and the
 * table rows they mark. */
static void rs_reference(const rs_set *s, double *gE, double *gW, double *gb, bool *rows) {
  const float *E = sheaf_model_param_values(s->m, s->E, NULL, NULL), *W = sheaf_model_param_values(s->m, s->W, NULL, NULL),
              *b = sheaf_model_param_values(s->m, s->b, NULL, NULL);
  memset(gE, 0, sizeof(double) * RV * RE);
  memset(gW, 0, sizeof(double) * RE * RC);
  memset(gb, 0, sizeof(double) * RC);
  memset(rows, 0, sizeof(bool) * RV);
  for (int k = 0; k < 4; k++)
    for (int i = 0; i < s->n[k]; i++) {
      const rs_inst *in = &s->inst[k][i];
      const float *x = E + in->word * RE;
      double z[RC], mx = -1e300, sum = 0;
      for (int c = 0; c < RC; c++) {
        z[c] = b[c];
        for (int e = 0; e < RE; e++) z[c] += (double)x[e] * W[e * RC + c];
        mx = fmax(mx, z[c]);
      }
      for (int c = 0; c < RC; c++) sum += exp(z[c] - mx);
      for (int c = 0; c < RC; c++) {
        double dz = s->scale * (exp(z[c] - mx) / sum - (c == in->tag ? 1.0 : 0.0));
        gb[c] += dz;
        for (int e = 0; e < RE; e++) {
          gW[e * RC + c] += x[e] * dz;
          gE[in->word * RE + e] += W[e * RC + c] * dz;
        }
      }
      rows[in->word] = true;
    }
}

static bool close_to(const char *what, const float *got, const double *want, int n) {
  for (int i = 0; i < n; i++) {
    double g = got ? got[i] : 0.0;
    if (!(fabs(g - want[i]) <= 1e-6 + 1e-5 * fabs(want[i])))
      return th_fail(__FILE__, __LINE__, "%s[%d] = %.9g, reference %.9g", what, i, g, want[i]);
  }
  return true;
}

/* The model's gradients and E's row marks against the reference (whole
 * allowed where an allocation failed: no room for the marks is documented
 * as a whole gradient, its other rows zero); every shard part zero and
 * unmarked. */
static bool rs_check_as(const rs_set *s, const char *when, bool allow_whole) {
  double gE[RV * RE], gW[RE * RC], gb[RC];
  bool rows[RV];
  rs_reference(s, gE, gW, gb, rows);
  const sheaf_model *m = s->m;
  const sh_param *E = &m->params[s->E.id - 1], *W = &m->params[s->W.id - 1], *b = &m->params[s->b.id - 1];
  bool ok = close_to("dE", E->grad, gE, RV * RE) && close_to("dW", W->grad, gW, RE * RC) &&
            close_to("db", b->grad, gb, RC);
  if (ok && !E->grad_whole)
    for (int r = 0; r < RV && ok; r++) {
      bool marked = E->grad_rows && E->grad_rows[r];
      if (marked != rows[r]) ok = th_fail(__FILE__, __LINE__, "%s: row %d of E marked %d, reference %d", when, r, marked, rows[r]);
    }
  if (ok && E->grad_whole && !allow_whole) ok = th_fail(__FILE__, __LINE__, "%s: E's gradient whole, not rows", when);
  for (int k = 1; k < SH_GRAD_SHARDS && ok; k++)
    for (uint32_t i = 0; i < m->cap_shard[k - 1] && i < m->n_params && ok; i++) {
      const sh_grad_part *p = &m->shard[k - 1][i];
      const sh_param *q = &m->params[i];
      if (p->grad_whole) ok = th_fail(__FILE__, __LINE__, "%s: shard %d param %u still whole", when, k, i);
      for (size_t r = 0; p->grad_rows && r < (q->rank == 2 ? (size_t)q->shape[0] : 1) && ok; r++)
        if (p->grad_rows[r]) ok = th_fail(__FILE__, __LINE__, "%s: shard %d param %u row %zu still marked", when, k, i, r);
      for (size_t e = 0; p->grad && e < q->numel && ok; e++)
        if (p->grad[e] != 0) ok = th_fail(__FILE__, __LINE__, "%s: shard %d param %u element %zu = %g", when, k, i, e, p->grad[e]);
    }
  if (!ok) th_fail(__FILE__, __LINE__, "(%s)", when);
  return ok;
}
static bool rs_check(const rs_set *s, const char *when) { return rs_check_as(s, when, false); }

static bool rs_open(sheaf_ctx *ctx, rs_set *s) {
  memset(s, 0, sizeof *s);
  if (!CHECK_OK(ctx, sheaf_model_create(ctx, &s->m))) return false;
  s->E = th_param(ctx, s->m, "E", 2, RV, RE);
  s->W = th_param(ctx, s->m, "W", 2, RE, RC);
  s->b = th_param(ctx, s->m, "b", 1, RC, 0);
  if (!CHECK_OK(ctx, sheaf_model_seed(s->m, 5))) return false;
  static const int shards[4] = {0, 1, 5, 63};
  for (int k = 0; k < 4; k++) {
    sheaf_graph_opts go = {SHEAF_POLICY_SHEAF, 1, NULL};
    s->shard[k] = shards[k];
    if (!CHECK_OK(ctx, sheaf_graph_create(s->m, &go, &s->g[k])) ||
        !CHECK_OK(ctx, sheaf_graph_grad_shard(s->g[k], shards[k])))
      return false;
  }
  s->scale = 0.25f;
  return true;
}

static void rs_close(rs_set *s) {
  for (int k = 0; k < 4; k++) sheaf_graph_free(s->g[k]);
  sheaf_model_free(s->m);
}

static void rs_assign(rs_set *s, int k, int n, const rs_inst *in) {
  s->n[k] = n;
  if (n) memcpy(s->inst[k], in, sizeof *in * (size_t)n);
}

/* Shard 0 empty, row 3 in shards 1 and 63, row 7 in shard 5 only, row 9
 * in shard 63 only; then zero_grad clearing a shard never reduced. */
TEST(shards_edges_reduce_against_reference) {
  sheaf_ctx_options co = {0};
  co.threads = 2;
  sheaf_ctx *ctx = NULL;
  REQUIRE(sheaf_ctx_create(&co, &ctx, NULL, 0) == SHEAF_OK);
  rs_set s;
  if (rs_open(ctx, &s)) {
    rs_assign(&s, 1, 2, (rs_inst[]){{3, 0}, {4, 1}});
    rs_assign(&s, 2, 1, (rs_inst[]){{7, 2}});
    rs_assign(&s, 3, 2, (rs_inst[]){{3, 2}, {9, 1}});
    bool ok = CHECK_OK(ctx, sheaf_model_zero_grad(s.m)) && CHECK_OK(ctx, sheaf_run_shards(ctx, 4, rs_run, &s)) &&
              CHECK_OK(ctx, sheaf_model_reduce_grads(s.m)) && rs_check(&s, "first reduction");
    /* a second reduction adds nothing */
    ok = ok && CHECK_OK(ctx, sheaf_model_reduce_grads(s.m)) && rs_check(&s, "reduced twice");
    /* shard 5 written and never reduced: zero_grad must clear it (values and marks) */
    if (ok) {
      rs_assign(&s, 1, 0, NULL);
      rs_assign(&s, 2, 2, (rs_inst[]){{2, 0}, {8, 1}});
      rs_assign(&s, 3, 0, NULL);
      ok = CHECK_OK(ctx, sheaf_model_zero_grad(s.m)) && CHECK_OK(ctx, sheaf_run_shards(ctx, 4, rs_run, &s)) &&
           CHECK_OK(ctx, sheaf_model_zero_grad(s.m));
      rs_assign(&s, 2, 0, NULL);
      rs_assign(&s, 1, 1, (rs_inst[]){{3, 1}});
      ok = ok && CHECK_OK(ctx, sheaf_run_shards(ctx, 4, rs_run, &s)) && CHECK_OK(ctx, sheaf_model_reduce_grads(s.m)) &&
           rs_check(&s, "after zero_grad of an unreduced shard");
    }
    /* only shard 0 (the model's own) written: reduce leaves it as it is */
    if (ok) {
      rs_assign(&s, 1, 0, NULL);
      rs_assign(&s, 0, 2, (rs_inst[]){{1, 1}, {6, 0}});
      ok = CHECK_OK(ctx, sheaf_model_zero_grad(s.m)) && CHECK_OK(ctx, sheaf_run_shards(ctx, 4, rs_run, &s)) &&
           CHECK_OK(ctx, sheaf_model_reduce_grads(s.m)) && rs_check(&s, "shard 0 only");
    }
  }
  rs_close(&s);
  sheaf_ctx_free(ctx);
}

/* A reduction failing for memory adds nothing (the shards keep their
 * gradients): retried, it gives the reference. A backward failing for
 * memory, then zero_grad and the passes again: the reference (nothing of
 * the failed pass left in a shard). Every allocation in turn. */
TEST(shards_edges_recover_after_out_of_memory) {
  sheaf_ctx_options co = {0};
  co.threads = 2;
  co.allocator = th_allocator();
  sheaf_ctx *ctx = NULL;
  REQUIRE(sheaf_ctx_create(&co, &ctx, NULL, 0) == SHEAF_OK);
  int reduce_failed = 0, pass_failed = 0;
  bool reduce_done = false, pass_done = false;
  for (long n = 1; n < 400 && !(reduce_done && pass_done); n++) {
    rs_set s;
    if (!rs_open(ctx, &s)) {
      rs_close(&s);
      break;
    }
    rs_assign(&s, 0, 0, NULL); /* the model's own gradients made by the reduction */
    rs_assign(&s, 1, 2, (rs_inst[]){{3, 0}, {4, 1}});
    rs_assign(&s, 2, 1, (rs_inst[]){{7, 2}});
    rs_assign(&s, 3, 2, (rs_inst[]){{3, 2}, {9, 1}});
    bool ok = true;
    if (!reduce_done) {
      ok = CHECK_OK(ctx, sheaf_model_zero_grad(s.m)) && CHECK_OK(ctx, sheaf_run_shards(ctx, 4, rs_run, &s));
      sheaf_ctx_clear_error(ctx);
      th_fail_alloc_at(n);
      sheaf_status st = ok ? sheaf_model_reduce_grads(s.m) : SHEAF_OK;
      th_fail_alloc_at(0);
      if (st) {
        reduce_failed++;
        ok = CHECK_EQ_INT(st, SHEAF_ERR_NOMEM) && CHECK(sheaf_ctx_last_error(ctx)[0] != '\0') &&
             CHECK_OK(ctx, sheaf_model_reduce_grads(s.m));
      } else {
        reduce_done = true;
      }
      ok = ok && rs_check_as(&s, "reduction retried", true);
    }
    if (ok && !pass_done) {
      rs_assign(&s, 0, 1, (rs_inst[]){{5, 2}});
      CHECK_OK(ctx, sheaf_model_zero_grad(s.m));
      sheaf_ctx_clear_error(ctx);
      th_fail_alloc_at(n);
      sheaf_status st = sheaf_run_shards(ctx, 4, rs_run, &s);
      if (!st) st = sheaf_model_reduce_grads(s.m);
      th_fail_alloc_at(0);
      if (st) {
        pass_failed++;
        if (getenv("RS_SHOW")) fprintf(stderr, "%ld: %s\n", n, sheaf_ctx_last_error(ctx));
        ok = CHECK_EQ_INT(st, SHEAF_ERR_NOMEM) && CHECK(sheaf_ctx_last_error(ctx)[0] != '\0') &&
             CHECK_OK(ctx, sheaf_model_zero_grad(s.m)) && CHECK_OK(ctx, sheaf_run_shards(ctx, 4, rs_run, &s)) &&
             CHECK_OK(ctx, sheaf_model_reduce_grads(s.m));
      } else {
        pass_done = true;
      }
      ok = ok && rs_check_as(&s, "passes again after a failed one", true);
    }
    rs_close(&s);
    if (!ok) {
      th_fail(__FILE__, __LINE__, "allocation %ld", n);
      break;
    }
  }
  CHECK(reduce_done && pass_done);
  CHECK(reduce_failed > 0 && pass_failed > 5);
  sheaf_ctx_free(ctx);
}
