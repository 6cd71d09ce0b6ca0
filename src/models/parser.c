/*
 * parser.c — the arc-standard shift-reduce parser (see parser.h):
 * parameters, seeding, the per-sentence transition loop that reads each
 * step's action scores, and the tree check.
 */
#include "models/parser.h"
#include "models/params.h"

#include <stdlib.h>
#include <string.h>

sheaf_status sh_parser_declare(sheaf_model *m, int64_t H, int64_t V, sh_parser *p) {
  memset(p, 0, sizeof *p);
  if (H < 1 || V < 1) return SHEAF_ERR_INVALID_ARG;
  p->hidden = H;
  p->vocab = V;
  const sh_model_param_decl decl[] = {
      {"emb", 2, V, H, SHEAF_INIT_NORMAL, &p->emb},   {"W_h", 2, 3 * H, H, SHEAF_INIT_GLOROT, &p->W_h},
      {"b_h", 1, H, 0, SHEAF_INIT_ZERO, &p->b_h},     {"W_a", 2, H, 3, SHEAF_INIT_GLOROT, &p->W_a},
      {"b_a", 1, 3, 0, SHEAF_INIT_ZERO, &p->b_a},     {"W_c", 2, 2 * H, H, SHEAF_INIT_GLOROT, &p->W_c},
      {"b_c", 1, H, 0, SHEAF_INIT_ZERO, &p->b_c},
  };
  return sh_params_declare(m, decl, sizeof decl / sizeof decl[0]);
}

sheaf_status sh_parser_seed(sheaf_model *m, const sh_parser *p, uint64_t seed) {
  sheaf_status st = sheaf_model_seed(m, seed);
  uint64_t s = seed ^ 0xa5c1d0ull;
  if (!st) st = sh_perturb(m, p->emb, 50.0f, 0.0f, &s); /* std 1 */
  if (!st) st = sh_perturb(m, p->b_h, 1.0f, 0.1f, &s);
  if (!st) st = sh_perturb(m, p->b_a, 1.0f, 0.5f, &s);
  if (!st) st = sh_perturb(m, p->b_c, 1.0f, 0.1f, &s);
  return st;
}

/* A composition: head <- tanh([head; dep]·W_c + b_c). A representation
 * computed by an earlier flush counts as depth 0 (docs/RUNTIME.md, the
 * depth rule), so the compositions of every sentence batch together
 * whatever its action history. */
static void compose(sheaf_graph *g, const sh_parser *p, sheaf_expr *head, const sheaf_expr *dep) {
  sheaf_expr hd[2] = {*head, *dep};
  *head = sheaf_tanh(g, sheaf_affine(g, p->W_c, sheaf_concat(g, 2, hd), p->b_c));
}

sheaf_status sh_parser_run(sheaf_graph *g, const sh_parser *p, const int32_t *rows, int32_t n,
                           int32_t *heads, int8_t *actions, double *score_sum) {
  if (n < 1) return sheaf_graph_fail(g, SHEAF_ERR_INVALID_ARG, "sh_parser_run: empty sentence");
  sheaf_expr *r = malloc((size_t)n * sizeof *r);
  int32_t *stack = malloc((size_t)n * sizeof *stack);
  if (!r || !stack) {
    free(r);
    free(stack);
    return sheaf_graph_fail(g, SHEAF_ERR_NOMEM, "sh_parser_run: out of memory");
  }
  for (int32_t i = 0; i < n; i++) {
    r[i] = sheaf_lookup(g, p->emb, rows[i]);
    heads[i] = -1;
  }
  int64_t hshape[1] = {p->hidden};
  sheaf_expr zero = sheaf_zeros(g, 1, hshape);
  int32_t sp = 0, b = 0, steps = 0;
  double sum = 0;
  sheaf_status st = SHEAF_OK;
  while (b < n || sp > 1) {
    int act;
    if (sp < 2) {
      act = SH_PARSE_SHIFT; /* the only legal action */
    } else {
      sheaf_expr f[3] = {r[stack[sp - 2]], r[stack[sp - 1]], b < n ? r[b] : zero};
      sheaf_graph_phase(g, 1); /* every sentence's scorer in one batch */
      sheaf_expr hid = sheaf_tanh(g, sheaf_affine(g, p->W_h, sheaf_concat(g, 3, f), p->b_h));
      sheaf_expr score = sheaf_affine(g, p->W_a, hid, p->b_a);
      sheaf_graph_phase(g, 0);
      sheaf_value_view v;
      st = sheaf_value(g, score, &v); /* under fibers: waits for the step's batched flush */
      if (st) break;
      act = b < n ? SH_PARSE_SHIFT : SH_PARSE_LEFT;
      for (int a = act + 1; a < 3; a++)
        if (v.data[a] > v.data[act]) act = a;
      sum += v.data[act];
    }
    if (act == SH_PARSE_SHIFT) {
      stack[sp++] = b++;
    } else if (act == SH_PARSE_LEFT) { /* s1 <- s0 */
      int32_t s0 = stack[sp - 1], s1 = stack[sp - 2];
      heads[s1] = s0 + 1;
      compose(g, p, &r[s0], &r[s1]);
      stack[sp - 2] = s0;
      sp--;
    } else { /* s1 -> s0 */
      int32_t s0 = stack[sp - 1], s1 = stack[sp - 2];
      heads[s0] = s1 + 1;
      compose(g, p, &r[s1], &r[s0]);
      sp--;
    }
    if (actions) actions[steps] = (int8_t)act;
    steps++;
  }
  if (!st) heads[stack[0]] = 0;
  free(r);
  free(stack);
  if (score_sum) *score_sum = sum;
  return st ? st : sheaf_graph_status(g);
}

int sh_parser_is_tree(const int32_t *heads, int32_t n) {
  int roots = 0;
  for (int32_t i = 0; i < n; i++) {
    if (heads[i] < 0 || heads[i] > n || heads[i] == i + 1) return 0;
    roots += heads[i] == 0;
  }
  if (roots != 1) return 0;
  for (int32_t i = 0; i < n; i++) { /* the root is reached within n steps from every word */
    int32_t h = i + 1, k = 0;
    while (h != 0 && k <= n) h = heads[h - 1], k++;
    if (h != 0) return 0;
  }
  return 1;
}

typedef struct many {
  const sh_parser *p;
  const int32_t *rows, *off;
  int64_t first;
  int32_t *heads;
  double *score_sum;
} many;

static sheaf_status many_build(sheaf_graph *g, int64_t i, int worker, void *user) {
  const many *u = user;
  return sh_parser_run(g, u->p, u->rows + u->off[i], u->off[i + 1] - u->off[i], u->heads + u->off[i],
                       NULL, u->score_sum ? &u->score_sum[i - u->first] : NULL);
}

sheaf_status sh_parser_run_many(sheaf_runner *r, const sh_parser *p, const int32_t *rows,
                                const int32_t *off, int64_t first, int64_t count, int fibers,
                                int32_t *heads, double *score_sum) {
  many u = {p, rows, off, first, heads, score_sum};
  return fibers ? sheaf_runner_run_fibers(r, first, count, many_build, NULL, &u)
                : sheaf_runner_run(r, first, count, many_build, NULL, &u);
}
