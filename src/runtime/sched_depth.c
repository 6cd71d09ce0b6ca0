/*
 * sched_depth.c — policy `depth`, DyNet's depth-based batching: at flush,
 * walk every pending node computing its depth from its inputs and hashing
 * its signature, sort by (phase, depth) and group each level by signature.
 * Also the walk itself, which policy `agenda` shares.
 */
#include <string.h>

#include "runtime/runtime.h"

sheaf_status sh_sched_walk(sheaf_graph *g, uint32_t **depth, uint32_t *max_depth) {
  uint32_t base = g->store.first_pending, n = g->store.n_nodes - base, maxd = 0;
  uint32_t *d = sh_arena_alloc(&g->work.scratch, (size_t)n * sizeof *d);
  if (!d) return SHEAF_ERR_NOMEM;
  for (uint32_t i = base; i < g->store.n_nodes; i++) {
    sh_node *nd = &g->store.nodes[i];
    uint32_t dd = 0;
    for (uint32_t k = 0; k < nd->n_in; k++) { /* depth within the node's phase */
      uint32_t x = g->store.ins[nd->in + k];
      if (x >= base && d[x - base] > dd && g->store.nodes[x].phase == nd->phase) dd = d[x - base];
    }
    if (sh_op_is_kernel(nd->op)) {
      dd++;
      sheaf_status st;
      if (sh_op_is_pw(nd->op)) {
        st = sh_pw_finalize(g, i, false); /* no fusion under this policy: a one-op program */
        nd = &g->store.nodes[i];
      } else {
        sh_sig_key key;
        sh_sig_key_of(g, nd, &key);
        st = sh_sig_find_hash(g, &key, &nd->sig);
      }
      if (st) return st;
    }
    d[i - base] = dd;
    if (dd > maxd) maxd = dd;
  }
  *depth = d;
  *max_depth = maxd;
  return SHEAF_OK;
}

/* Runs the nodes ids[0..n) (one level) grouped by signature. */
static sheaf_status run_level(sheaf_graph *g, const uint32_t *lvl, uint32_t n, uint32_t *active,
                              uint32_t *ids) {
  uint32_t stamp = ++g->stamp, na = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t id = lvl[i];
    sh_node *nd = &g->store.nodes[id];
    sh_sig *s = &g->sigs.at[nd->sig];
    nd->next = SH_NONE;
    if (s->mark != stamp) {
      s->mark = stamp;
      s->head = s->tail = id;
      s->count = 1;
      active[na++] = nd->sig;
    } else {
      g->store.nodes[s->tail].next = id;
      s->tail = id;
      s->count++;
    }
  }
  for (uint32_t a = 0; a < na; a++) {
    uint32_t k = 0;
    for (uint32_t i = g->sigs.at[active[a]].head; i != SH_NONE; i = g->store.nodes[i].next) ids[k++] = i;
    sheaf_status st = sh_exec_batch(g, active[a], ids, k);
    if (st) return st;
  }
  return SHEAF_OK;
}

sheaf_status sh_sched_depth_flush(sheaf_graph *g) {
  uint32_t *depth, maxd;
  sheaf_status st = sh_sched_walk(g, &depth, &maxd);
  if (st) return st;
  uint32_t base = g->store.first_pending, n = g->store.n_nodes - base, L = maxd + 1;
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
        st = run_level(g, order + start, end - start, active, ids);
        if (st) return st;
      }
      start = end;
    }
  }
  return SHEAF_OK;
}
