/*
 * sched_none.c — policy `none`: no batching. Every kernel node runs alone
 * (a batch of one, through the same executor) as soon as it is built, so
 * flush has nothing left to do; its kernel time is kept apart from the
 * build time.
 */
#include "runtime/runtime.h"

sheaf_status sh_sched_none_add(sheaf_graph *g, uint32_t id) {
  uint64_t k0 = g->stats.ns_kernels;
  g->cur_depth = g->nodes[id].depth;
  g->cur_phase = g->nodes[id].phase;
  sheaf_status st = sh_exec_batch(g, g->nodes[id].sig, &id, 1);
  g->ns_kernels_build += g->stats.ns_kernels - k0;
  return st;
}
