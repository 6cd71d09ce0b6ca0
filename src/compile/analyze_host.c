/*
 * analyze_host.c — host-only scalar code and tensor-dependent control flow.
 * Host code: per function, the expressions that run on the host and never
 * enter the graph (i32/bool arithmetic, host f32, list handling, ADT
 * constructors, matches taking a tree apart). Control points: the checker's wait points (m->waits:
 * argmax, item, values), then every if / while / match / for whose
 * condition, scrutinee or range carries a value read back from a tensor
 * (taint TVAL): there an instance waits before it can go on.
 */
#include "compile/analyze.h"

static bool reads_tensor(const sh_analyses *a, const sh_ast *x) {
  int32_t id = sh_an_id(a, x);
  return id >= 0 && (a->nodes[id].taint & SH_AN_T_TVAL);
}

void sh_an_host(sh_analyses *a) {
  const sh_module *m = a->m;
  int cap = m->n_waits;
  for (int i = 0; i < a->n_nodes; i++) {
    sh_an_node *n = &a->nodes[i];
    if (!n->seen) continue;
    if (n->e->kind == SH_EX_MATCH && n->e->a && n->e->a->type && n->e->a->type->kind == SH_TY_ADT)
      n->host = SH_AN_H_ADT; /* taking a tree apart: control flow on the host */
    if (n->host != SH_AN_H_NONE) a->fns[n->fn].n_host[n->host]++;
    if (n->cls == SH_AN_CTRL) cap++;
  }
  a->ctl = sh_an_alloc(a, (size_t)(cap + 1) * sizeof *a->ctl);
  if (!a->ctl) return;
  for (int i = 0; i < m->n_waits; i++) {
    int32_t id = sh_an_id(a, m->waits[i]);
    if (id >= 0) a->ctl[a->n_ctl++] = (sh_an_ctl){.node = id, .wait = true};
  }
  for (int i = 0; i < a->n_nodes; i++) {
    const sh_an_node *n = &a->nodes[i];
    const sh_ast *e = n->e;
    if (!n->seen || n->cls != SH_AN_CTRL || e->kind == SH_EX_PHASE) continue;
    bool t = reads_tensor(a, e->a) || (e->kind == SH_EX_FOR && e->b && reads_tensor(a, e->b));
    if (t) a->ctl[a->n_ctl++] = (sh_an_ctl){.node = i, .wait = false};
  }
}
