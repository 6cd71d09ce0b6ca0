/*
 * sched_none.c — policy `none`: no batching. Every kernel node runs alone
 * (a batch of one, through the same executor) as soon as it is built, so
 * flush has nothing left to do; its kernel time is kept apart from the
 * build time.
 */
#include "runtime/runtime.h"

sheaf_status sh_sched_none_add(sheaf_graph *g, uint32_t id, uint32_t sig) {
  uint64_t k0 = g->instr.stats.ns_kernels;
  g->instr.cur_depth = g->store.nodes[id].depth;
  g->instr.cur_phase = g->store.nodes[id].phase;
  sheaf_status st = sh_exec_batch(g, sig, &id, 1);
  g->instr.ns_kernels_build += g->instr.stats.ns_kernels - k0;
  return st;
}
