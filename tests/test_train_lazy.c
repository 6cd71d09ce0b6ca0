/*
 * test_train_lazy.c — lookup tables' gradient rows (sh_param.grad_rows):
 * a backward marks the rows its lookups reach, sheaf_model_zero_grad
 * zeroes them (and only a table's whole gradient when something else
 * wrote it), the optimizer's norm is the dense norm, and
 * sheaf_optimizer_lazy_rows updates only the marked rows (their moments
 * too) against hand-computed Adam values, while the default updates every
 * row.
 */
#include <math.h>
#include <string.h>

#include "harness.h"
#include "sheaf_train.h"

enum { ROWS = 6, DIM = 4, OUT = 3 };

typedef struct lz {
  sheaf_model *m;
  sheaf_graph *g;
  sheaf_optimizer *o;
  sheaf_param E, W, b;
} lz;

static bool lz_make(sheaf_ctx *ctx, lz *t, int lazy) {
  memset(t, 0, sizeof *t);
  const int64_t se[2] = {ROWS, DIM}, sw[2] = {DIM, OUT}, sb[1] = {OUT};
  sheaf_optimizer_opts oo = {SHEAF_OPTIM_ADAM, 0.01f, 0, 0, 0, 0, 0, 0};
  return CHECK_OK(ctx, sheaf_model_create(ctx, &t->m)) &&
         CHECK_OK(ctx, sheaf_model_param(t->m, "E", 2, se, SHEAF_INIT_NORMAL, &t->E)) &&
         CHECK_OK(ctx, sheaf_model_param(t->m, "W", 2, sw, SHEAF_INIT_GLOROT, &t->W)) &&
         CHECK_OK(ctx, sheaf_model_param(t->m, "b", 1, sb, SHEAF_INIT_ZERO, &t->b)) &&
         CHECK_OK(ctx, sheaf_model_seed(t->m, 7)) && CHECK_OK(ctx, sheaf_graph_create(t->m, NULL, &t->g)) &&
         CHECK_OK(ctx, sheaf_optimizer_create(t->m, &oo, &t->o)) &&
         CHECK_OK(ctx, sheaf_optimizer_lazy_rows(t->o, lazy));
}

static void lz_free(lz *t) {
  sheaf_optimizer_free(t->o);
  sheaf_graph_free(t->g);
  sheaf_model_free(t->m);
}

/* Zero the gradients, then a backward of Σ nll(affine(W, E[row_k]), k mod 3). */
static bool lz_backward(sheaf_ctx *ctx, lz *t, int n, const int *rows) {
  sheaf_expr loss[8];
  if (!CHECK_OK(ctx, sheaf_graph_reset(t->g)) || !CHECK_OK(ctx, sheaf_model_zero_grad(t->m))) return false;
  for (int k = 0; k < n; k++)
    loss[k] = sheaf_nll(t->g, sheaf_affine(t->g, t->W, sheaf_lookup(t->g, t->E, rows[k]), t->b), k % OUT);
  return CHECK_OK(ctx, sheaf_backward(t->g, n, loss, NULL));
}

static bool row_zero(const float *gr, int r) {
  for (int j = 0; j < DIM; j++)
    if (gr[r * DIM + j] != 0.0f) return false;
  return true;
}

TEST(lookup_rows_marked_zeroed_and_updated_lazily) {
  sheaf_ctx *ctx = th_ctx();
  lz d, z; /* dense (default) and lazy */
  memset(&d, 0, sizeof d);
  memset(&z, 0, sizeof z);
  if (!lz_make(ctx, &d, 0) || !lz_make(ctx, &z, 1)) goto done;
  float e0[ROWS * DIM];
  memcpy(e0, sheaf_model_param_data(z.m, z.E, NULL, NULL), sizeof e0);
  /* The gradients' buffers, taken before the passes: sheaf_param_grad
   * marks the whole gradient written (the caller may write it), which the
   * next zeroing clears. */
  const float *gr = sheaf_param_grad(z.m, z.E), *gw = sheaf_param_grad(z.m, z.W), *gb = sheaf_param_grad(z.m, z.b);
  if (!CHECK(gr && gw && gb)) goto done;
  /* step 1: rows 1, 3, 1 */
  const int r1[3] = {1, 3, 1}, r2[1] = {2};
  if (!lz_backward(ctx, &d, 3, r1) || !lz_backward(ctx, &z, 3, r1)) goto done;
  {
    CHECK(row_zero(gr, 0) && !row_zero(gr, 1) && row_zero(gr, 2) && !row_zero(gr, 3) && row_zero(gr, 4) &&
          row_zero(gr, 5));
    /* the norm: Σ g² over every parameter, in double */
    double sq = 0;
    const float *gs[3] = {gr, gw, gb};
    for (int k = 0; k < 3; k++) {
      size_t n = k == 0 ? ROWS * DIM : k == 1 ? DIM * OUT : OUT;
      for (size_t i = 0; i < n; i++) sq += (double)gs[k][i] * gs[k][i];
    }
    double nd = 0, nz = 0;
    if (!CHECK_OK(ctx, sheaf_optimizer_step(d.o, &nd)) || !CHECK_OK(ctx, sheaf_optimizer_step(z.o, &nz))) goto done;
    CHECK(nd == nz);
    CHECK_NEAR(nz, sqrt(sq), 1e-9 * sqrt(sq));
  }
  /* after one step from zero moments, both update the same elements the same way */
  CHECK(memcmp(sheaf_model_param_data(d.m, d.E, NULL, NULL), sheaf_model_param_data(z.m, z.E, NULL, NULL),
               sizeof e0) == 0);
  CHECK(memcmp(sheaf_model_param_data(d.m, d.W, NULL, NULL), sheaf_model_param_data(z.m, z.W, NULL, NULL),
               DIM * OUT * sizeof(float)) == 0);
  float e1[ROWS * DIM];
  memcpy(e1, sheaf_model_param_data(z.m, z.E, NULL, NULL), sizeof e1);
  CHECK(memcmp(e1, e0, DIM * sizeof(float)) == 0);                                /* row 0 */
  CHECK(memcmp(e1 + DIM, e0 + DIM, DIM * sizeof(float)) != 0);                    /* row 1 */
  /* step 2: row 2 only; the zeroing cleared rows 1 and 3 */
  if (!lz_backward(ctx, &d, 1, r2) || !lz_backward(ctx, &z, 1, r2)) goto done;
  {
    float g2[DIM];
    CHECK(row_zero(gr, 1) && row_zero(gr, 3) && !row_zero(gr, 2));
    memcpy(g2, gr + 2 * DIM, sizeof g2);
    if (!CHECK_OK(ctx, sheaf_optimizer_step(d.o, NULL)) || !CHECK_OK(ctx, sheaf_optimizer_step(z.o, NULL)))
      goto done;
    const float *ez = sheaf_model_param_data(z.m, z.E, NULL, NULL), *ed = sheaf_model_param_data(d.m, d.E, NULL, NULL);
    /* lazy: rows 0, 1, 3, 4, 5 as after step 1; row 2 by Adam's first move at step 2 */
    for (int r = 0; r < ROWS; r++)
      if (r != 2) CHECK(memcmp(ez + r * DIM, e1 + r * DIM, DIM * sizeof(float)) == 0);
    double bc1 = 1 - 0.9 * 0.9, bc2 = 1 - 0.999 * 0.999;
    for (int j = 0; j < DIM; j++) {
      double m = 0.1 * g2[j], v = 0.001 * (double)g2[j] * g2[j];
      double want = e1[2 * DIM + j] - 0.01 * (m / bc1) / (sqrt(v / bc2) + 1e-8);
      CHECK_NEAR(ez[2 * DIM + j], want, 1e-6);
    }
    /* dense: row 2 the same, rows 1 and 3 moved on by their moments, row 0 still (zero moments) */
    CHECK(memcmp(ed + 2 * DIM, ez + 2 * DIM, DIM * sizeof(float)) == 0);
    CHECK(memcmp(ed + DIM, e1 + DIM, DIM * sizeof(float)) != 0);
    CHECK(memcmp(ed + 3 * DIM, e1 + 3 * DIM, DIM * sizeof(float)) != 0);
    CHECK(memcmp(ed, e1, DIM * sizeof(float)) == 0);
  }
  /* a gradient written through sheaf_param_grad is whole: zeroing clears every row */
  {
    float *gw1 = sheaf_param_grad(z.m, z.E);
    if (CHECK(gw1)) {
      for (int i = 0; i < ROWS * DIM; i++) gw1[i] = 1.0f;
      CHECK_OK(ctx, sheaf_model_zero_grad(z.m));
      for (int r = 0; r < ROWS; r++) CHECK(row_zero(gw1, r));
    }
  }
  CHECK_STATUS(ctx, sheaf_optimizer_lazy_rows(NULL, 1), SHEAF_ERR_INVALID_ARG);
done:
  lz_free(&d);
  lz_free(&z);
}

/* A dense step over a large table (rows 0..4999 of 8, chunks of 16384
 * elements: several rows reached in some chunks, none in others): the rows
 * no lookup reached are updated with a zero gradient read from a zero
 * buffer (optim.c), bit for bit the step that reads the table's whole
 * (zero) gradient, which sheaf_param_grad forces. */
TEST(dense_step_over_unreached_rows_equals_a_whole_gradient_step) {
  enum { V2 = 5000, D2 = 8 };
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m[2] = {NULL, NULL};
  sheaf_graph *g[2] = {NULL, NULL};
  sheaf_optimizer *o[2] = {NULL, NULL};
  sheaf_param E[2], W[2];
  const int64_t se[2] = {V2, D2}, sw[2] = {D2, OUT};
  sheaf_optimizer_opts oo = {SHEAF_OPTIM_ADAM, 0.01f, 0, 0, 0, 0, 0, 0};
  for (int k = 0; k < 2; k++)
    if (!CHECK_OK(ctx, sheaf_model_create(ctx, &m[k])) ||
        !CHECK_OK(ctx, sheaf_model_param(m[k], "E", 2, se, SHEAF_INIT_NORMAL, &E[k])) ||
        !CHECK_OK(ctx, sheaf_model_param(m[k], "W", 2, sw, SHEAF_INIT_GLOROT, &W[k])) ||
        !CHECK_OK(ctx, sheaf_model_seed(m[k], 9)) || !CHECK_OK(ctx, sheaf_graph_create(m[k], NULL, &g[k])) ||
        !CHECK_OK(ctx, sheaf_optimizer_create(m[k], &oo, &o[k])))
      goto done;
  const int rows[3][4] = {{1, 2, 2100, 4999}, {7, 2049, 2050, 3000}, {0, 4096, 4097, 12}};
  for (int step = 0; step < 3; step++)
    for (int k = 0; k < 2; k++) {
      sheaf_expr loss[4];
      if (!CHECK_OK(ctx, sheaf_graph_reset(g[k])) || !CHECK_OK(ctx, sheaf_model_zero_grad(m[k]))) goto done;
      for (int i = 0; i < 4; i++)
        loss[i] = sheaf_nll(g[k], sheaf_affine(g[k], W[k], sheaf_lookup(g[k], E[k], rows[step][i]), (sheaf_param){0}), i % OUT);
      if (!CHECK_OK(ctx, sheaf_backward(g[k], 4, loss, NULL))) goto done;
      if (k == 1 && !CHECK(sheaf_param_grad(m[1], E[1]) != NULL)) goto done; /* whole: read as it is */
      if (!CHECK_OK(ctx, sheaf_optimizer_step(o[k], NULL))) goto done;
    }
  const float *a = sheaf_model_param_data(m[0], E[0], NULL, NULL), *b = sheaf_model_param_data(m[1], E[1], NULL, NULL);
  CHECK(memcmp(a, b, (size_t)V2 * D2 * sizeof(float)) == 0);
  CHECK(memcmp(sheaf_model_param_data(m[0], W[0], NULL, NULL), sheaf_model_param_data(m[1], W[1], NULL, NULL),
               (size_t)D2 * OUT * sizeof(float)) == 0);
done:
  for (int k = 0; k < 2; k++) {
    sheaf_optimizer_free(o[k]);
    sheaf_graph_free(g[k]);
    sheaf_model_free(m[k]);
  }
}
