/*
 * sched_agenda.c — policy `agenda`, DyNet's default autobatching: at flush,
 * walk the pending nodes (depth and hashed signature per node), count each
 * node's unfinished inputs and build the dependents lists; ready nodes wait
 * in one list per signature; repeatedly run the signature whose ready nodes
 * have the lowest mean depth, then release their dependents. Views are done
 * as soon as they are ready. Phases run in order.
 */
#include <string.h>

#include "runtime/runtime.h"

typedef struct agenda {
  sheaf_graph *g;
  sh_walk *w;                 /* depth, signature and ready-list link of each pending node */
  uint32_t base, n;
  uint32_t *wait, *off, *deps;
  uint32_t *stack, n_stack;
  uint32_t *active, n_active; /* signatures with ready nodes */
  uint32_t deferred;          /* ready nodes of later phases (linked through w->next) */
  uint32_t phase;
} agenda;

static void ready(agenda *a, uint32_t id) {
  sheaf_graph *g = a->g;
  sh_walk *w = a->w;
  const sh_node *nd = &g->store.nodes[id];
  if (!sh_op_is_kernel(nd->op)) {
    a->stack[a->n_stack++] = id;
    return;
  }
  uint32_t i = id - a->base;
  if (nd->phase != a->phase) {
    w->next[i] = a->deferred;
    a->deferred = id;
    return;
  }
  sh_walk_sig *s = &w->by_sig[w->sig[i]];
  w->next[i] = SH_NONE;
  if (!s->count) {
    s->head = s->tail = id;
    s->depth_sum = 0;
    a->active[a->n_active++] = w->sig[i];
  } else {
    w->next[s->tail - a->base] = id;
    s->tail = id;
  }
  s->count++;
  s->depth_sum += w->depth[i];
}

static void release(agenda *a, uint32_t id) {
  uint32_t i = id - a->base;
  for (uint32_t k = a->off[i]; k < a->off[i + 1]; k++)
    if (--a->wait[a->deps[k] - a->base] == 0) ready(a, a->deps[k]);
}

sheaf_status sh_sched_agenda_flush(sheaf_graph *g) {
  agenda a = {0};
  sh_walk w;
  a.g = g;
  a.w = &w;
  sheaf_status st = sh_sched_walk(g, &w);
  if (st) return st;
  a.base = w.base;
  a.n = w.n;
  uint32_t n = a.n, base = a.base;
  a.wait = sh_arena_calloc(&g->work.scratch, n, sizeof *a.wait);
  a.off = sh_arena_calloc(&g->work.scratch, (size_t)n + 1, sizeof *a.off);
  a.stack = sh_arena_alloc(&g->work.scratch, (size_t)n * sizeof *a.stack);
  a.active = sh_arena_alloc(&g->work.scratch, ((size_t)g->sigs.n + 1) * sizeof *a.active);
  uint32_t *ids = sh_arena_alloc(&g->work.scratch, (size_t)n * sizeof *ids);
  if (!a.wait || !a.off || !a.stack || !a.active || !ids) return SHEAF_ERR_NOMEM;
  /* dependents, CSR */
  uint32_t total = 0;
  for (uint32_t i = base; i < g->store.n_nodes; i++) {
    const sh_node *nd = &g->store.nodes[i];
    for (uint32_t k = 0; k < nd->n_in; k++) {
      uint32_t x = g->store.ins[nd->in + k];
      if (x >= base) a.off[x - base + 1]++, a.wait[i - base]++, total++;
    }
  }
  for (uint32_t i = 0; i < n; i++) a.off[i + 1] += a.off[i];
  a.deps = sh_arena_alloc(&g->work.scratch, (size_t)total * sizeof *a.deps);
  uint32_t *cur = sh_arena_alloc(&g->work.scratch, (size_t)n * sizeof *cur);
  if (!a.deps || !cur) return SHEAF_ERR_NOMEM;
  memcpy(cur, a.off, (size_t)n * sizeof *cur);
  for (uint32_t i = base; i < g->store.n_nodes; i++) {
    const sh_node *nd = &g->store.nodes[i];
    for (uint32_t k = 0; k < nd->n_in; k++) {
      uint32_t x = g->store.ins[nd->in + k];
      if (x >= base) a.deps[cur[x - base]++] = i;
    }
  }
  a.deferred = SH_NONE;
  for (uint32_t i = 0; i < n; i++)
    if (!a.wait[i]) ready(&a, base + i);
  uint32_t done = 0;
  for (;;) {
    while (a.n_stack) {
      uint32_t v = a.stack[--a.n_stack];
      done++;
      release(&a, v);
    }
    if (!a.n_active) {
      if (a.deferred == SH_NONE) break;
      uint32_t minp = UINT32_MAX; /* the next phase with ready nodes */
      for (uint32_t i = a.deferred; i != SH_NONE; i = w.next[i - base])
        if (g->store.nodes[i].phase < minp) minp = g->store.nodes[i].phase;
      a.phase = minp;
      uint32_t list = a.deferred;
      a.deferred = SH_NONE;
      while (list != SH_NONE) {
        uint32_t nx = w.next[list - base];
        ready(&a, list);
        list = nx;
      }
      continue;
    }
    /* the signature whose ready nodes have the lowest mean depth */
    uint32_t best = 0;
    for (uint32_t k = 1; k < a.n_active; k++) {
      const sh_walk_sig *s = &w.by_sig[a.active[k]], *b = &w.by_sig[a.active[best]];
      if (s->depth_sum * b->count < b->depth_sum * s->count) best = k;
    }
    uint32_t sig = a.active[best];
    a.active[best] = a.active[--a.n_active];
    sh_walk_sig *s = &w.by_sig[sig];
    uint32_t k = 0;
    for (uint32_t i = s->head; i != SH_NONE; i = w.next[i - base]) ids[k++] = i;
    g->instr.cur_depth = (uint32_t)(s->depth_sum / s->count);
    g->instr.cur_phase = a.phase;
    s->count = 0;
    st = sh_exec_batch(g, sig, ids, k);
    if (st) return st;
    done += k;
    for (uint32_t i = 0; i < k; i++) release(&a, ids[i]);
  }
  if (done != n)
    return sh_fail(g->ctx, SHEAF_ERR_INTERNAL, "internal error: agenda ran %u of %u nodes", done,
                   n);
  return SHEAF_OK;
}
