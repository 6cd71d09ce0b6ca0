/*
 * analyze_taint.c — parameter taint's results: the maximal ops whose value
 * depends only on parameters, sizes and constants (never batched: one value
 * per batch, e.g. `W_1 + W_2`, `transpose(W)`, `emb[0]`), each marked
 * hoistable unless its shape uses a function's generic size (then it
 * differs per call site); and every `@` with which operand is a parameter
 * (its weights packed once) or param-only (packable once per batch).
 */
#include "compile/analyze.h"

static const sh_size *local_size(const sh_analyses *a, const sh_type *t) {
  if (!t) return NULL;
  if (t->kind == SH_TY_TENSOR) {
    for (int i = 0; i < t->n; i++)
      for (int k = 0; k < t->dims[i].n; k++)
        for (int v = 0; v < t->dims[i].t[k].deg; v++) {
          uint32_t var = t->dims[i].t[k].var[v];
          if (var && var <= a->m->sizes.n && a->m->sizes.v[var].kind != SH_SV_GLOBAL) return &t->dims[i];
        }
  }
  if (t->kind == SH_TY_TUPLE)
    for (int i = 0; i < t->n; i++)
      if (local_size(a, t->elems[i])) return local_size(a, t->elems[i]);
  return NULL;
}

void sh_an_taint(sh_analyses *a) {
  int n_h = 0, n_mm = 0;
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < a->n_nodes; i++) {
      const sh_an_node *n = &a->nodes[i];
      if (!n->seen || n->cls != SH_AN_OP) continue;
      const sh_ast *e = n->e;
      if (e->kind == SH_EX_BINARY && e->op == SH_TK_AT) {
        if (pass) {
          sh_an_matmul *mm = &a->matmul[a->n_matmul++];
          mm->node = i;
          mm->rhs_param = e->param_rhs || (e->b->kind == SH_EX_NAME && e->b->res == SH_RES_PARAM);
          mm->lhs_param = e->a->kind == SH_EX_NAME && e->a->res == SH_RES_PARAM;
          int32_t b = sh_an_id(a, e->b);
          mm->rhs_tainted = !mm->rhs_param && b >= 0 && sh_an_tainted(a->nodes[b].taint);
        } else {
          n_mm++;
        }
      }
      if (!sh_an_tainted(n->taint)) continue;
      if (n->parent >= 0 && a->nodes[n->parent].cls == SH_AN_OP && sh_an_tainted(a->nodes[n->parent].taint))
        continue; /* inside a larger param-only op */
      if (!pass) {
        n_h++;
        continue;
      }
      sh_an_hoist *h = &a->hoist[a->n_hoist++];
      h->node = i;
      h->hoistable = !local_size(a, e->type);
      h->why = h->hoistable ? NULL : "its shape uses a generic size of the function";
    }
    if (!pass) {
      a->hoist = sh_an_alloc(a, (size_t)(n_h + 1) * sizeof *a->hoist);
      a->matmul = sh_an_alloc(a, (size_t)(n_mm + 1) * sizeof *a->matmul);
      if (a->nomem) return;
    }
  }
}
