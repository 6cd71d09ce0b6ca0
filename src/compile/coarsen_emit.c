/*
 * coarsen_emit.c — an arm's DAG (coarsen.c) printed as one kernel in the
 * `kernel` notation (docs/LANGUAGE.md, "Kernels"), batched over a leading
 * index n (the level's activations, size N): inputs x<i> are the executor's
 * dense copies [N, ...] (children's state rows, looked-up table rows, side
 * by side), p<k> the parameters (declared weights: packed once), results
 * o<j> the function's state components. Sizes are numbers except N. A
 * product of a vector and a parameter is a GEMM statement the default
 * schedule recognises; its bias and activations follow as row statements.
 * A dependency tree's ragged arm (nodes with children) also takes K: i32[N],
 * the child counts: per-child values are t(n, c, i) with c in 0..K(n), the
 * children's states ragged inputs x<i>: f32[N, K(n), width] (packed, the
 * children of row 0, then row 1's ...), sums over the children reductions
 * over c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/linear_int.h"

typedef struct em {
  sh_lin_arm *a;
  sh_buf *b;
  char names[SH_LIN_MAX_NODES][16];
  /* a sum of two products with parameters (A @ W_1 + B @ W_2), each read
   * only by the sum: both accumulate into the sum's name, the later product
   * emitting the pair (first_of: the earlier one; +=! then +=), the sum no
   * statement (folded) */
  int first_of[SH_LIN_MAX_NODES];
  bool folded[SH_LIN_MAX_NODES];
} em;

/* Appends node k read at per-row indices idx (rank entries; an f32[1]
 * operand read at 0 whatever idx says). */
static void acc(em *e, int k, const char *const *idx, int rank) {
  const sh_lin_node *n = &e->a->nodes[k];
  if (n->op == SH_LIN_CONST) {
    double c = n->c;
    if (c == 0) sh_buf_puts(e->b, "0.0");
    else if (fabs(c) >= 1e-3 && fabs(c) < 1e7) sh_buf_printf(e->b, "(%.9f)", c);
    else sh_buf_printf(e->b, "(%.9e)", c);
    return;
  }
  sh_buf_printf(e->b, "%s(", e->names[k]);
  if (n->rank == 2 && n->batched) { /* flat: [M, C] */
    sh_buf_printf(e->b, "m, %s)", rank == 2 ? idx[1] : "0");
    return;
  }
  bool first = true;
  if (n->batched) sh_buf_puts(e->b, n->kid ? "n, c" : "n"), first = false;
  bool one = n->rank == 1 && n->d[0] == 1;
  for (int i = 0; i < n->rank; i++) {
    sh_buf_puts(e->b, first ? "" : ", ");
    sh_buf_puts(e->b, one ? "0" : i < rank ? idx[i] : "0");
    first = false;
  }
  sh_buf_putc(e->b, ')');
}

static const char *const IDX1[] = {"i"}, *const IDX2[] = {"i", "j"};

static void lhs(em *e, int k) {
  const sh_lin_node *n = &e->a->nodes[k];
  if (n->rank == 2 && n->batched) {
    sh_buf_printf(e->b, "  %s(m, j)", e->names[k]);
    return;
  }
  sh_buf_printf(e->b, "  %s(%s%s%s)", e->names[k], n->batched ? n->kid ? "n, c, " : "n, " : "", "i",
                n->rank == 2 ? ", j" : "");
}

static void where_n(em *e, int k, bool with_n) {
  const sh_lin_node *n = &e->a->nodes[k];
  if (n->rank == 2 && n->batched) sh_buf_printf(e->b, " where j in 0..%lld", (long long)n->d[1]);
  else sh_buf_printf(e->b, " where %s%si in 0..%lld", with_n ? "n in 0..N, " : "", n->kid ? "c in 0..K(n), " : "",
                     (long long)n->d[0]);
  if (n->rank == 2 && !n->batched) sh_buf_printf(e->b, ", j in 0..%lld", (long long)n->d[1]);
  sh_buf_putc(e->b, '\n');
}

static void where(em *e, int k) { where_n(e, k, false); }

static const char *op_str(int op) {
  switch (op) {
  case SH_TK_PLUS: return "+";
  case SH_TK_MINUS: return "-";
  case SH_TK_STAR: return "*";
  default: return "/";
  }
}

/* A per-row matrix read as [N, R, C] at (n, i, j). */
static void acc3(em *e, int k, const char *i, const char *j) {
  sh_buf_printf(e->b, "%sq(n, %s, %s)", e->names[k], i, j);
}

/* One part of a product (a CAT's part at row offset off of the right
 * operand): t(n, i) or, flat, t(m, j) (+=! | +=) A(...) * B(...). */
static void mm_part(em *e, int k, int part, int64_t off, bool first) {
  const sh_lin_node *n = &e->a->nodes[k], *p = &e->a->nodes[part], *q = &e->a->nodes[n->b];
  lhs(e, k);
  sh_buf_puts(e->b, first ? " +=! " : " += ");
  char r[32];
  snprintf(r, sizeof r, off ? "r + %lld" : "r", (long long)off);
  if (p->rank == 1 && q->rank == 2) { /* vector @ matrix: t(n, i) */
    acc(e, part, (const char *[]){"r"}, 1);
    sh_buf_puts(e->b, " * ");
    if (q->batched) acc3(e, n->b, r, "i");
    else acc(e, n->b, (const char *[]){r, "i"}, 2);
  } else if (p->rank == 2 && q->rank == 1) { /* matrix @ vector: t(n, i) */
    acc3(e, part, "i", "r");
    sh_buf_puts(e->b, " * ");
    acc(e, n->b, (const char *[]){r}, 1);
  } else { /* flat matrix @ parameter matrix: t(m, j) */
    acc(e, part, (const char *[]){"m", "r"}, 2);
    sh_buf_puts(e->b, " * ");
    acc(e, n->b, (const char *[]){r, "j"}, 2);
  }
  /* a per-row product's part read from parameters only (cat(b, x) @ W):
   * nothing in the statement gives n its range */
  bool no_n = n->batched && !p->batched && !q->batched;
  if (n->rank == 2) sh_buf_printf(e->b, " where j in 0..%lld", (long long)n->d[1]);
  else sh_buf_printf(e->b, " where %s%si in 0..%lld", no_n ? "n in 0..N, " : "", n->kid ? "c in 0..K(n), " : "",
                     (long long)n->d[0]);
  sh_buf_printf(e->b, ", r in 0..%lld\n", (long long)(p->rank == 1 ? p->d[0] : p->d[1]));
}

/* Product k's statements, its first part +=! unless cont (a second product
 * accumulating into the same name). */
static void mm_stmts(em *e, int k, bool cont) {
  const sh_lin_node *n = &e->a->nodes[k], *p = &e->a->nodes[n->a];
  if (p->op == SH_LIN_CAT) {
    int64_t off = 0;
    for (int t = 0; t < p->n_items; t++) {
      mm_part(e, k, p->items[t], off, t == 0 && !cont);
      off += e->a->nodes[p->items[t]].d[0];
    }
  } else {
    mm_part(e, k, n->a, 0, !cont);
  }
}

static void stmt(em *e, int k) {
  const sh_lin_node *n = &e->a->nodes[k];
  const char *const *idx = n->rank == 2 ? IDX2 : IDX1;
  if (e->folded[k]) return;
  if (n->op == SH_LIN_MM && e->first_of[k] >= 0) { /* the pair: the earlier product, then this one */
    mm_stmts(e, e->first_of[k], false);
    mm_stmts(e, k, true);
    return;
  }
  switch (n->op) {
  case SH_LIN_UN:
    lhs(e, k);
    if (n->fn == SH_BI_NONE) sh_buf_puts(e->b, " = -(");
    else sh_buf_printf(e->b, " = %s(", sh_builtin_name((sh_builtin)n->fn));
    acc(e, n->a, idx, n->rank);
    sh_buf_putc(e->b, ')');
    where(e, k);
    break;
  case SH_LIN_BIN:
    lhs(e, k);
    sh_buf_puts(e->b, " = ");
    acc(e, n->a, idx, n->rank);
    sh_buf_printf(e->b, " %s ", op_str(n->fn));
    acc(e, n->b, idx, n->rank);
    where(e, k);
    break;
  case SH_LIN_SLICE: {
    char i[32];
    snprintf(i, sizeof i, n->lo ? "i + %lld" : "i", (long long)n->lo);
    lhs(e, k);
    sh_buf_puts(e->b, " = ");
    acc(e, n->a, (const char *[]){i}, 1);
    where(e, k);
    break;
  }
  case SH_LIN_MM:
    mm_stmts(e, k, false);
    break;
  case SH_LIN_LSM: {
    const char *t = e->names[k];
    const char *nn = n->batched ? "n" : "";
    sh_buf_printf(e->b, "  %s_m(%s) max=! ", t, nn);
    acc(e, n->a, IDX1, 1);
    sh_buf_printf(e->b, "\n  %s_s(%s) +=! exp(", t, nn);
    acc(e, n->a, IDX1, 1);
    sh_buf_printf(e->b, " - %s_m(%s))\n", t, nn);
    lhs(e, k);
    sh_buf_puts(e->b, " = ");
    acc(e, n->a, IDX1, 1);
    sh_buf_printf(e->b, " - %s_m(%s) - log(%s_s(%s))", t, nn, t, nn);
    where(e, k);
    break;
  }
  case SH_LIN_RSUM: case SH_LIN_RMAX: /* t(n[, c], i) +=! (max=!) a(n[, c], r), i in 0..1: the row's sum or max */
    lhs(e, k);
    sh_buf_puts(e->b, n->op == SH_LIN_RSUM ? " +=! " : " max=! ");
    acc(e, n->a, (const char *[]){"r"}, 1);
    sh_buf_printf(e->b, " where %si in 0..1, r in 0..%lld\n", n->kid ? "c in 0..K(n), " : "",
                  (long long)e->a->nodes[n->a].d[0]);
    break;
  case SH_LIN_KSUM: /* over the children: t(n, i) +=! a(n, c, i) */
    lhs(e, k);
    sh_buf_puts(e->b, " +=! ");
    acc(e, n->a, IDX1, 1);
    sh_buf_printf(e->b, " where i in 0..%lld, c in 0..K(n)\n", (long long)n->d[0]);
    break;
  case SH_LIN_KSOFTMAX: { /* per-child scores a(n, c, 0): max, exp, sum, divide */
    const char *t = e->names[k];
    sh_buf_printf(e->b, "  %s_m(n) max=! ", t);
    acc(e, n->a, IDX1, 1);
    sh_buf_printf(e->b, " where c in 0..K(n)\n  %s_e(n, c, i) = exp(", t);
    acc(e, n->a, IDX1, 1);
    sh_buf_printf(e->b, " - %s_m(n)) where c in 0..K(n), i in 0..1\n", t);
    sh_buf_printf(e->b, "  %s_s(n) +=! %s_e(n, c, 0) where c in 0..K(n)\n", t, t);
    sh_buf_printf(e->b, "  %s(n, c, i) = %s_e(n, c, i) / %s_s(n) where c in 0..K(n), i in 0..1\n", t, t, t);
    break;
  }
  case SH_LIN_LN: { /* the runtime's layer_norm: mean, centred, variance, eps 1e-5 */
    const char *t = e->names[k], *nn = n->batched ? "n" : "", *sep = n->batched ? "n, " : "";
    sh_buf_printf(e->b, "  %s_mu(%s) +=! ", t, nn);
    acc(e, n->a, IDX1, 1);
    sh_buf_printf(e->b, " / (%lld.0)\n  %s_c(%si) = ", (long long)n->d[0], t, sep);
    acc(e, n->a, IDX1, 1);
    sh_buf_printf(e->b, " - %s_mu(%s)", t, nn);
    where(e, k);
    sh_buf_printf(e->b, "  %s_v(%s) +=! %s_c(%si) * %s_c(%si) / (%lld.0)\n", t, nn, t, sep, t, sep,
                  (long long)n->d[0]);
    lhs(e, k);
    sh_buf_printf(e->b, " = %s_c(%si) * rsqrt(%s_v(%s) + 1e-5) * ", t, sep, t, nn);
    acc(e, n->items[0], IDX1, 1);
    sh_buf_puts(e->b, " + ");
    acc(e, n->items[1], IDX1, 1);
    where(e, k);
    break;
  }
  default: break;
  }
}

void sh_lin_mark_live(const sh_lin_arm *a, int k, bool *live) {
  if (k < 0 || live[k]) return;
  live[k] = true;
  const sh_lin_node *n = &a->nodes[k];
  sh_lin_mark_live(a, n->a, live);
  sh_lin_mark_live(a, n->b, live);
  for (int i = 0; (n->op == SH_LIN_CAT || n->op == SH_LIN_LN) && i < n->n_items; i++)
    sh_lin_mark_live(a, n->items[i], live);
}

/* Whether product m (an operand of sum k) can accumulate into k: a per-row
 * product (not per child) with a parameter on the right, read only by k,
 * of k's shape. */
static bool foldable(const sh_lin_arm *a, const int *uses, int m, int k) {
  const sh_lin_node *n = &a->nodes[m], *s = &a->nodes[k];
  if (m < 0 || n->op != SH_LIN_MM || uses[m] != 1 || !n->batched || n->kid || s->kid) return false;
  if (a->nodes[n->b].op != SH_LIN_PARAM || n->rank != s->rank || n->d[0] != s->d[0] ||
      (n->rank == 2 && n->d[1] != s->d[1]))
    return false;
  const sh_lin_node *p = &a->nodes[n->a];
  if (p->op != SH_LIN_CAT) return p->batched;
  for (int i = 0; i < p->n_items; i++)
    if (!a->nodes[p->items[i]].batched) return false;
  return true;
}

/* Finds the sums of two products that fold (em's first_of, folded). */
static void find_folds(em *e, const bool *live) {
  const sh_lin_arm *a = e->a;
  int uses[SH_LIN_MAX_NODES] = {0};
  for (int k = 0; k < a->n_nodes; k++) {
    const sh_lin_node *n = &a->nodes[k];
    e->first_of[k] = -1;
    if (!live[k]) continue;
    if (n->a >= 0) uses[n->a]++;
    if (n->b >= 0) uses[n->b]++;
    for (int i = 0; (n->op == SH_LIN_CAT || n->op == SH_LIN_LN) && i < n->n_items; i++) uses[n->items[i]]++;
  }
  for (int j = 0; j < a->n_out; j++) uses[a->out[j]] += 2; /* a result keeps its own statement */
  for (int k = 0; k < a->n_nodes; k++) {
    const sh_lin_node *n = &a->nodes[k];
    if (!live[k] || n->op != SH_LIN_BIN || n->fn != SH_TK_PLUS || !n->batched || n->a == n->b ||
        !foldable(a, uses, n->a, k) || !foldable(a, uses, n->b, k))
      continue;
    int lo = n->a < n->b ? n->a : n->b, hi = n->a < n->b ? n->b : n->a;
    e->first_of[hi] = lo, e->folded[lo] = true, e->folded[k] = true;
    memcpy(e->names[lo], e->names[k], sizeof e->names[k]);
    memcpy(e->names[hi], e->names[k], sizeof e->names[k]);
  }
}

static void put_shape(sh_buf *b, const sh_lin_node *n, bool batched) {
  if (batched && n->rank == 2) { /* flat */
    sh_buf_printf(b, "f32[M%lld, %lld]", (long long)n->d[0], (long long)n->d[1]);
    return;
  }
  sh_buf_printf(b, "f32[%s%lld", batched ? "N, " : "", (long long)n->d[0]);
  if (n->rank == 2) sh_buf_printf(b, ", %lld", (long long)n->d[1]);
  sh_buf_putc(b, ']');
}

sheaf_status sh_lin_emit(sh_lin *L, sh_lin_fn *f, sh_lin_arm *a) {
  if (a->has_mat) return sh_lin_mat_emit(L, a); /* stages: linear_mat.c */
  bool live[SH_LIN_MAX_NODES] = {0};
  for (int j = 0; j < a->n_out; j++) sh_lin_mark_live(a, a->out[j], live);
  em *e = calloc(1, sizeof *e);
  if (!e) return sh_fail(L->ctx, SHEAF_ERR_NOMEM, "out of memory");
  sh_buf b;
  sh_buf_init(&b, L->ctx);
  e->a = a, e->b = &b;
  a->n_inputs = a->n_params = 0;
  bool batched_in = false;
  for (int k = 0; k < a->n_nodes; k++) {
    sh_lin_node *n = &a->nodes[k];
    if (!live[k]) continue;
    if (n->op == SH_LIN_IN) {
      n->input = a->n_inputs;
      a->input_3d[a->n_inputs] = false;
      a->inputs[a->n_inputs++] = k;
      snprintf(e->names[k], sizeof e->names[k], "x%d", n->input);
      if (n->twin && n->rank == 2) { /* the same rows as [N, R, C]: x<i>q */
        a->input_3d[a->n_inputs] = true;
        a->inputs[a->n_inputs++] = k;
      }
      batched_in = true;
    } else if (n->op == SH_LIN_PARAM) {
      if (a->n_params == (int)(sizeof a->params / sizeof a->params[0])) {
        free(e);
        sh_buf_free(&b);
        return sh_lin_refuse(L, a->span, "the arm reads too many parameters");
      }
      a->params[a->n_params++] = k;
      snprintf(e->names[k], sizeof e->names[k], "p%d", n->param);
    } else {
      snprintf(e->names[k], sizeof e->names[k], "t%d", k);
    }
  }
  if (!batched_in) {
    free(e);
    sh_buf_free(&b);
    return sh_lin_refuse(L, a->span, "the arm reads nothing of its node (no child and no word): nothing to batch");
  }
  sh_buf_printf(&b, "kernel %s(%s", a->name, a->ragged ? "K: i32[N]" : "");
  for (int i = 0; i < a->n_inputs; i++) {
    const sh_lin_node *n = &a->nodes[a->inputs[i]];
    if (a->input_3d[i])
      sh_buf_printf(&b, ", x%dq: f32[N, %lld, %lld]", n->input, (long long)n->d[0], (long long)n->d[1]);
    else if (n->kid)
      sh_buf_printf(&b, "%sx%d: f32[N, K(n), %lld]", i || a->ragged ? ", " : "", n->input, (long long)n->d[0]);
    else {
      sh_buf_printf(&b, "%sx%d: ", i || a->ragged ? ", " : "", n->input);
      put_shape(&b, n, true);
    }
  }
  for (int i = 0; i < a->n_params; i++) {
    sh_buf_printf(&b, ", %s: ", e->names[a->params[i]]);
    put_shape(&b, &a->nodes[a->params[i]], false);
  }
  sh_buf_puts(&b, ")\n    -> (");
  for (int j = 0; j < a->n_out; j++) {
    sh_buf_printf(&b, "%so%d: ", j ? ", " : "", j);
    put_shape(&b, &a->nodes[a->out[j]], true);
  }
  sh_buf_puts(&b, ") {\n");
  find_folds(e, live);
  for (int k = 0; k < a->n_nodes; k++)
    if (live[k]) stmt(e, k);
  for (int j = 0; j < a->n_out; j++) {
    const sh_lin_node *n = &a->nodes[a->out[j]];
    sh_buf_printf(&b, n->rank == 2 ? "  o%d(m, j) = " : "  o%d(n, i) = ", j);
    acc(e, a->out[j], n->rank == 2 ? IDX2 : IDX1, n->rank);
    where_n(e, a->out[j], !n->batched);
  }
  sh_buf_puts(&b, "}\n");
  free(e);
  (void)f;
  sheaf_status st = sh_buf_status(&b);
  if (st) {
    sh_buf_free(&b);
    return sh_fail(L->ctx, st, "out of memory");
  }
  free(a->src);
  a->src = strdup(sh_buf_cstr(&b));
  a->src_len = b.len;
  sh_buf_free(&b);
  return a->src ? SHEAF_OK : sh_fail(L->ctx, SHEAF_ERR_NOMEM, "out of memory");
}
