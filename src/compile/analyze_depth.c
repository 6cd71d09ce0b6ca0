/*
 * analyze_depth.c — static depth's results: the ops of each function, and
 * the ghost ops: for each if / match producing tensors, each arm's result
 * depth (the flow pass's) and the padding that aligns it with the deepest
 * arm. Arms compare when their depths are constants, or the same symbols
 * shifted by one constant (R1+1 against R1+3); otherwise the padding is
 * not static (-1).
 */
#include "compile/analyze.h"

static bool has_tensor(const sh_type *t) {
  if (!t) return false;
  if (t->kind == SH_TY_TENSOR) return true;
  if (t->kind == SH_TY_TUPLE)
    for (int i = 0; i < t->n; i++)
      if (has_tensor(t->elems[i])) return true;
  return false;
}

/* The level of arm d relative to arm d0 (same symbols, one shift); false
 * when they do not compare. */
static bool rel_level(const sh_an_depth *d0, const sh_an_depth *d, int *level) {
  if (d0->dyn || d->dyn) return false;
  int shift = 0;
  bool any = false;
  for (int k = 0; k < SH_AN_MAX_SYM; k++) {
    if ((d0->off[k] < 0) != (d->off[k] < 0)) return false;
    if (d0->off[k] < 0) continue;
    int s = d->off[k] - d0->off[k];
    if (any && s != shift) return false;
    shift = s, any = true;
  }
  if (!any) return *level = d->c, true;
  if (d0->c > 0 || d->c > 0)
    if (d->c - d0->c != shift) return false;
  *level = shift;
  return true;
}

void sh_an_depth_pass(sh_analyses *a) {
  int n_g = 0;
  for (int i = 0; i < a->n_nodes; i++) {
    const sh_an_node *n = &a->nodes[i];
    if (n->seen && n->cls == SH_AN_OP && !n->fused) a->fns[n->fn].n_ops++;
    if (n->seen && (n->e->kind == SH_EX_IF || n->e->kind == SH_EX_MATCH) && has_tensor(n->e->type)) n_g++;
  }
  a->ghost = sh_an_alloc(a, (size_t)(n_g + 1) * sizeof *a->ghost);
  if (!a->ghost) return;
  for (int i = 0; i < a->n_nodes; i++) {
    const sh_an_node *n = &a->nodes[i];
    const sh_ast *e = n->e;
    if (!n->seen || !(e->kind == SH_EX_IF || e->kind == SH_EX_MATCH) || !has_tensor(e->type)) continue;
    sh_an_ghost *g = &a->ghost[a->n_ghost++];
    g->node = i;
    g->n_arms = e->kind == SH_EX_IF ? 2 : e->n;
    g->arm_node = sh_an_alloc(a, (size_t)(g->n_arms + 1) * sizeof *g->arm_node);
    g->pad = sh_an_alloc(a, (size_t)(g->n_arms + 1) * sizeof *g->pad);
    int *level = sh_an_alloc(a, (size_t)(g->n_arms + 1) * sizeof *level);
    if (!level || !g->pad || !g->arm_node) return;
    bool ok = true;
    int top = -1;
    for (int k = 0; k < g->n_arms; k++) {
      const sh_ast *body = e->kind == SH_EX_IF ? (k ? e->c : e->b) : e->arms[k].body;
      g->arm_node[k] = sh_an_id(a, body);
      if (g->arm_node[k] < 0 || g->arm_node[0] < 0) {
        ok = false;
        continue;
      }
      if (!rel_level(&a->nodes[g->arm_node[0]].depth, &a->nodes[g->arm_node[k]].depth, &level[k])) ok = false;
      else if (level[k] > top) top = level[k];
    }
    g->aligned_statically = ok;
    for (int k = 0; k < g->n_arms; k++) g->pad[k] = ok ? top - level[k] : -1;
  }
}
