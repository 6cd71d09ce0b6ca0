/*
 * sched_sheaf.c — policy `sheaf` (ACRoBat's inline depth): at build time a
 * kernel node is appended to bucket (phase, depth, signature), found in O(1)
 * through its signature's slot array indexed by depth (a short chain when
 * several phases use one signature at one depth); a new bucket is linked into
 * its phase's list for that depth. A bucket keeps its node ids in chunks of
 * SH_BCHUNK (appending touches no other node; flush reads ids sequentially).
 * The slot arrays are this policy's side array by signature (g->sheaf.sig);
 * it keeps nothing in the nodes.
 * Pointwise nodes are bucketed at the start of flush (sh_pw_flush_roots):
 * until then a later pointwise node may absorb them. Flush walks phases
 * ascending, depths ascending, and runs each bucket as one batch: no graph
 * walk, no hashing (a pointwise bucket skips the roots that already ran in
 * the row hook of the GEMM they read, see pw_exec.c).
 */
#include <string.h>

#include "runtime/runtime.h"

sheaf_status sh_sched_sheaf_add(sheaf_graph *g, uint32_t id, uint32_t sig) {
  const sh_node *n = &g->store.nodes[id];
  uint32_t d = n->depth, ph = n->phase;
  if (SH_UNLIKELY(sig >= g->sheaf.cap_sig) &&
      sh_grow(g->ctx, (void **)&g->sheaf.sig, &g->sheaf.cap_sig, sig + 1, sizeof *g->sheaf.sig))
    return SHEAF_ERR_NOMEM;
  sh_sheaf_sig *s = &g->sheaf.sig[sig];
  if (SH_UNLIKELY(d >= s->cap)) {
    sheaf_status st = sh_grow(g->ctx, (void **)&s->slot, &s->cap, d + 1, sizeof *s->slot);
    if (st) return st;
  }
  uint32_t b = s->slot[d];
  while (b && g->sheaf.buckets[b - 1].phase != ph) b = g->sheaf.buckets[b - 1].next_same;
  if (SH_LIKELY(b)) {
    sh_bucket *bk = &g->sheaf.buckets[b - 1];
    uint32_t pos = bk->count % SH_BCHUNK;
    if (SH_UNLIKELY(pos == 0)) { /* the tail chunk is full */
      if (g->sheaf.n_bchunks == g->sheaf.cap_bchunks &&
          sh_grow(g->ctx, (void **)&g->sheaf.bchunks, &g->sheaf.cap_bchunks, g->sheaf.n_bchunks + 1,
                  sizeof *g->sheaf.bchunks))
        return SHEAF_ERR_NOMEM;
      uint32_t c = g->sheaf.n_bchunks++;
      g->sheaf.bchunks[c].next = SH_NONE;
      g->sheaf.bchunks[bk->tail].next = c;
      bk->tail = c;
    }
    g->sheaf.bchunks[bk->tail].ids[pos] = id;
    bk->count++;
    return SHEAF_OK;
  }
  /* a new bucket */
  sheaf_status st = sh_grow(g->ctx, (void **)&g->sheaf.buckets, &g->sheaf.cap_buckets,
                            g->sheaf.n_buckets + 1, sizeof *g->sheaf.buckets);
  if (!st && g->sheaf.n_bchunks == g->sheaf.cap_bchunks)
    st = sh_grow(g->ctx, (void **)&g->sheaf.bchunks, &g->sheaf.cap_bchunks, g->sheaf.n_bchunks + 1,
                 sizeof *g->sheaf.bchunks);
  if (!st)
    st = sh_grow(g->ctx, (void **)&g->sheaf.phases, &g->sheaf.n_phases, ph + 1,
                 sizeof *g->sheaf.phases);
  if (st) return st;
  sh_phase_lv *lv = &g->sheaf.phases[ph];
  if (d >= lv->cap) {
    st = sh_grow(g->ctx, (void **)&lv->head, &lv->cap, d + 1, sizeof *lv->head);
    if (st) return st;
  }
  b = ++g->sheaf.n_buckets;
  sh_bucket *bk = &g->sheaf.buckets[b - 1];
  bk->sig = sig;
  bk->depth = d;
  bk->phase = ph;
  uint32_t c = g->sheaf.n_bchunks++;
  g->sheaf.bchunks[c].next = SH_NONE;
  g->sheaf.bchunks[c].ids[0] = id;
  bk->head = bk->tail = c;
  bk->count = 1;
  bk->next_same = s->slot[d];
  bk->next_level = lv->head[d];
  s->slot[d] = b;
  lv->head[d] = b;
  if (!lv->used || d > lv->max_depth) lv->max_depth = d;
  lv->used = true;
  return SHEAF_OK;
}

sheaf_status sh_sched_sheaf_flush(sheaf_graph *g) {
  uint32_t *ids = NULL;
  uint32_t cap = 0;
  sheaf_status st0 = sh_pw_flush_roots(g); /* pointwise programs that need a value */
  if (st0) return st0;
  for (uint32_t ph = 0; ph < g->sheaf.n_phases; ph++) {
    sh_phase_lv *lv = &g->sheaf.phases[ph];
    if (!lv->used) continue;
    for (uint32_t d = 0; d <= lv->max_depth; d++) {
      for (uint32_t b = lv->head[d]; b; b = g->sheaf.buckets[b - 1].next_level) {
        const sh_bucket *bk = &g->sheaf.buckets[b - 1];
        if (bk->count > cap) {
          cap = bk->count > 2 * cap ? bk->count : 2 * cap;
          ids = sh_arena_alloc(&g->work.scratch, (size_t)cap * sizeof *ids);
          if (!ids) return SHEAF_ERR_NOMEM;
        }
        uint32_t k = 0;
        for (uint32_t c = bk->head; c != SH_NONE; c = g->sheaf.bchunks[c].next) {
          uint32_t nc = bk->count - k < SH_BCHUNK ? bk->count - k : SH_BCHUNK;
          memcpy(ids + k, g->sheaf.bchunks[c].ids, nc * sizeof *ids);
          k += nc;
        }
        if (g->sigs.at[bk->sig].key.op == SH_OP_FUSED) { /* some ran in a GEMM's row hook */
          uint32_t kk = 0;
          for (uint32_t i = 0; i < k; i++)
            if (!g->store.nodes[ids[i]].done) ids[kk++] = ids[i];
          if (!(k = kk)) continue;
        }
        g->instr.cur_depth = d;
        g->instr.cur_phase = ph;
        sheaf_status st = sh_exec_batch(g, bk->sig, ids, k);
        if (st) return st;
      }
    }
  }
  return SHEAF_OK;
}

void sh_sched_sheaf_clear(sheaf_graph *g) {
  for (uint32_t b = 0; b < g->sheaf.n_buckets; b++) {
    const sh_bucket *bk = &g->sheaf.buckets[b];
    g->sheaf.sig[bk->sig].slot[bk->depth] = 0;
    g->sheaf.phases[bk->phase].head[bk->depth] = 0;
  }
  g->sheaf.n_buckets = 0;
  g->sheaf.n_bchunks = 0;
  for (uint32_t ph = 0; ph < g->sheaf.n_phases; ph++) {
    g->sheaf.phases[ph].used = false;
    g->sheaf.phases[ph].max_depth = 0;
  }
}

void sh_sched_sheaf_free(sheaf_graph *g) {
  for (uint32_t ph = 0; ph < g->sheaf.n_phases; ph++)
    sh_free(g->ctx, g->sheaf.phases[ph].head, (size_t)g->sheaf.phases[ph].cap * sizeof(uint32_t));
  sh_free(g->ctx, g->sheaf.phases, (size_t)g->sheaf.n_phases * sizeof *g->sheaf.phases);
  sh_free(g->ctx, g->sheaf.buckets, (size_t)g->sheaf.cap_buckets * sizeof *g->sheaf.buckets);
  sh_free(g->ctx, g->sheaf.bchunks, (size_t)g->sheaf.cap_bchunks * sizeof *g->sheaf.bchunks);
  for (uint32_t s = 0; s < g->sheaf.cap_sig; s++)
    sh_free(g->ctx, g->sheaf.sig[s].slot, (size_t)g->sheaf.sig[s].cap * sizeof(uint32_t));
  sh_free(g->ctx, g->sheaf.sig, (size_t)g->sheaf.cap_sig * sizeof *g->sheaf.sig);
}
