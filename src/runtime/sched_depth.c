/*
 * sched_depth.c — policy `depth`, DyNet's depth-based batching: at flush,
 * walk every pending node computing its depth from its inputs and hashing
 * its signature, sort by (phase, depth) and group each level by signature.
 * Also the walk itself, which policy `agenda` shares: its results are the
 * two policies' side arrays for the flush (sh_walk, in scratch), so they
 * keep nothing in the nodes.
 */
#include <string.h>

#include "runtime/runtime.h"

sheaf_status sh_sched_walk(sheaf_graph *g, sh_walk *w) {
  uint32_t base = g->store.first_pending, n = g->store.n_nodes - base, maxd = 0;
  memset(w, 0, sizeof *w);
  w->base = base;
  w->n = n;
  uint32_t *d = sh_arena_alloc(&g->work.scratch, (size_t)n * sizeof *d);
  uint32_t *sig = sh_arena_alloc(&g->work.scratch, (size_t)n * sizeof *sig);
  w->next = sh_arena_alloc(&g->work.scratch, (size_t)n * sizeof *w->next);
  if (!d || !sig || !w->next) return SHEAF_ERR_NOMEM;
  for (uint32_t i = base; i < g->store.n_nodes; i++) {
    const sh_node *nd = &g->store.nodes[i];
    uint32_t dd = 0;
    for (uint32_t k = 0; k < nd->n_in; k++) { /* depth within the node's phase */
      uint32_t x = g->store.ins[nd->in + k];
      if (x >= base && d[x - base] > dd && g->store.nodes[x].phase == nd->phase) dd = d[x - base];
    }
    sig[i - base] = SH_NONE;
    if (sh_op_is_kernel(nd->op)) {
      dd++;
      sheaf_status st;
      if (sh_op_is_pw(nd->op)) {
        st = sh_pw_finalize(g, i, false); /* no fusion under this policy: a one-op program */
        if (!st) sig[i - base] = g->pw.node[i].sig;
      } else {
        sh_sig_key key;
        sh_sig_key_of(g, nd, &key);
        st = sh_sig_find_hash(g, &key, &sig[i - base]);
      }
      if (st) return st;
    }
    d[i - base] = dd;
    if (dd > maxd) maxd = dd;
  }
  /* every signature is known now: their ready lists */
  w->by_sig = sh_arena_calloc(&g->work.scratch, (size_t)g->sigs.n + 1, sizeof *w->by_sig);
  if (!w->by_sig) return SHEAF_ERR_NOMEM;
  w->depth = d;
  w->sig = sig;
  w->max_depth = maxd;
  return SHEAF_OK;
}

/* Runs the nodes lvl[0..n) (one level) grouped by signature; `level`
 * (from 1) marks the signatures listed at this level. */
static sheaf_status run_level(sheaf_graph *g, sh_walk *w, uint32_t level, const uint32_t *lvl,
                              uint32_t n, uint32_t *active, uint32_t *ids) {
  uint32_t na = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t id = lvl[i], sig = w->sig[id - w->base];
    sh_walk_sig *s = &w->by_sig[sig];
    w->next[id - w->base] = SH_NONE;
    if (s->mark != level) {
      s->mark = level;
      s->head = s->tail = id;
      s->count = 1;
      active[na++] = sig;
    } else {
      w->next[s->tail - w->base] = id;
      s->tail = id;
      s->count++;
    }
  }
  for (uint32_t a = 0; a < na; a++) {
    uint32_t k = 0;
    for (uint32_t i = w->by_sig[active[a]].head; i != SH_NONE; i = w->next[i - w->base]) ids[k++] = i;
    sheaf_status st = sh_exec_batch(g, active[a], ids, k);
    if (st) return st;
  }
  return SHEAF_OK;
}

sheaf_status sh_sched_depth_flush(sheaf_graph *g) {
  sh_walk w;
  sheaf_status st = sh_sched_walk(g, &w);
  if (st) return st;
  uint32_t base = w.base, n = w.n, L = w.max_depth + 1, level = 0;
  const uint32_t *depth = w.depth;
  uint32_t *cnt = sh_arena_alloc(&g->work.scratch, ((size_t)L + 1) * sizeof *cnt);
  uint32_t *order = sh_arena_alloc(&g->work.scratch, (size_t)n * sizeof *order);
  uint32_t *active = sh_arena_alloc(&g->work.scratch, ((size_t)g->sigs.n + 1) * sizeof *active);
  uint32_t *ids = sh_arena_alloc(&g->work.scratch, (size_t)n * sizeof *ids);
  if (!cnt || !order || !active || !ids) return SHEAF_ERR_NOMEM;
  for (uint32_t ph = 0; ph <= g->store.max_phase; ph++) {
    memset(cnt, 0, ((size_t)L + 1) * sizeof *cnt);
    uint32_t in_phase = 0;
    for (uint32_t i = 0; i < n; i++) {
      const sh_node *nd = &g->store.nodes[base + i];
      if (nd->phase == ph && sh_op_is_kernel(nd->op)) cnt[depth[i] + 1]++, in_phase++;
    }
    if (!in_phase) continue;
    for (uint32_t d = 0; d < L; d++) cnt[d + 1] += cnt[d];
    for (uint32_t i = 0; i < n; i++) {
      const sh_node *nd = &g->store.nodes[base + i];
      if (nd->phase == ph && sh_op_is_kernel(nd->op)) order[cnt[depth[i]]++] = base + i;
    }
    /* cnt[d] is now the end of level d */
    uint32_t start = 0;
    for (uint32_t d = 0; d < L; d++) {
      uint32_t end = cnt[d];
      if (end > start) {
        g->instr.cur_depth = d;
        g->instr.cur_phase = ph;
        st = run_level(g, &w, ++level, order + start, end - start, active, ids);
        if (st) return st;
      }
      start = end;
    }
  }
  return SHEAF_OK;
}
