/*
 * pw_exec.c — running pointwise programs (pointwise.c builds them) on the
 * kernels of src/kernels/pw.h: a batch's job (the leaves' row pointers, one
 * output block and one block per side output) with the interpreter of the
 * graph's ISA level, its rows split over the pool, and the GEMM-hook fusion.
 *
 * GEMM-hook fusion (policy sheaf): at the start of flush each pointwise root
 * whose leaves read exactly one pending affine node A (its value, slices of
 * it, activations fused into its GEMM), with A's rows, is linked on A's list
 * (sh_affine_node.hook, then sh_pw_node.hook_next). When A's batch runs, the linked
 * roots whose other leaves are all computed by then (the children's c of a
 * TreeLSTM cell: earlier levels) are prepared as batches, one per program
 * signature, and run from the GEMM's row hook (sh_gemm_args.rows_done) on
 * each block of rows as soon as the GEMM has finished it, while those rows
 * are still in cache; the roots are then marked done, so their own bucket
 * (one level later) skips them. Same program, same interpreter, same values.
 * With several threads, a GEMM that splits N calls the hook after the
 * whole product, in row blocks spread over its threads.
 */
#include <string.h>

#include "base/pool.h"
#include "kernels/pw.h"
#include "runtime/runtime.h"

/* A batch: the kernel's job, its interpreter, and the pool's task count. */
typedef struct pw_job {
  sh_pw_job k;
  sh_pw_rows_fn rows;
  int64_t tasks;
} pw_job;

static void pw_task(void *arg, int64_t task, int tid) {
  const pw_job *j = arg;
  (void)tid;
  int64_t r0 = j->k.m * task / j->tasks, r1 = j->k.m * (task + 1) / j->tasks;
  if (r0 < r1) j->rows(&j->k, r0, r1);
}

/* ------------------------------------------------------------------ jobs */

/* The job of a batch: row pointers of each slot (a one-row slot repeats),
 * the output block (node values point into it), the side-output blocks and
 * the interpreter of the graph's ISA level. */
static sheaf_status job_setup(sheaf_graph *g, const uint32_t *ids, uint32_t n, int64_t m,
                              pw_job *pj) {
  const sh_node *n0 = &g->store.nodes[ids[0]];
  const sh_pw_node *pn0 = &g->pw.node[ids[0]];
  const sh_pw_prog *p = sh_pw_prog_of(g, ids[0]);
  uint32_t mask = (uint32_t)g->sigs.at[pn0->sig].key.w[0], nl = p->n_leaves;
  int64_t cols = n0->cols;
  memset(pj, 0, sizeof *pj);
  pj->rows = sh_pw_kernels_get(g->isa)->rows;
  sh_pw_job *j = &pj->k;
  j->p = p;
  j->m = m;
  j->n = cols;
  uint32_t nv = p->n_slots;
  /* the nodes' side entries, slot lists, then the slot and side nodes (cold: see exec_gemm.c) */
  for (uint32_t i = 0; i < n; i++) __builtin_prefetch(&g->pw.node[ids[i]]);
  for (uint32_t i = 0; i < n; i++) __builtin_prefetch(g->pw.slot + g->pw.node[ids[i]].first_slot);
  for (uint32_t i = 0; i < n; i++)
    for (uint32_t v = 0; v < nv + p->n_side; v++)
      __builtin_prefetch(&g->store.nodes[g->pw.slot[g->pw.node[ids[i]].first_slot + v]]);
  sh_gemm_in slot[SH_PW_MAX_LEAVES];
  bool same[SH_PW_MAX_LEAVES];
  const float **rp[SH_PW_MAX_LEAVES];
  for (uint32_t v = 0; v < nv; v++) {
    rp[v] = sh_arena_alloc(&g->work.scratch, (size_t)m * sizeof *rp[v]);
    if (!rp[v]) return SHEAF_ERR_NOMEM;
  }
  int64_t r = 0;
  for (uint32_t i = 0; i < n; i++) {
    const sh_node *nd = &g->store.nodes[ids[i]];
    const uint32_t *slots = g->pw.slot + g->pw.node[ids[i]].first_slot;
    for (uint32_t v = 0; v < nv; v++) {
      uint32_t x = slots[v];
      const float *val = g->store.nodes[x].val;
      if (!val && !(val = sh_graph_val(g, x))) return g->status ? g->status : SHEAF_ERR_INTERNAL;
      const sh_node *xn = &g->store.nodes[x];
      int64_t ld = xn->rows == 1 ? 0 : xn->ld;
      for (int32_t q = 0; q < nd->rows; q++) rp[v][r + q] = val + q * ld;
    }
    r += nd->rows;
  }
  for (uint32_t v = 0; v < nv; v++) slot[v] = sh_exec_operand(g, rp[v], m, 1, &same[v]);
  for (uint32_t k = 0; k < nl; k++) {
    j->a[k].in = slot[p->slot[k]];
    j->a[k].off = p->off[k];
    j->a[k].row_bc = same[p->slot[k]];
    j->a[k].col_bc = mask >> k & 1;
  }
  float *out = sh_exec_out_block(g, ids, n, m, cols);
  if (!out) return SHEAF_ERR_NOMEM;
  j->y = (sh_gemm_out){NULL, out, cols};
  for (uint32_t s = 0; s < p->n_side; s++) {
    float *blk = sh_arena_alloc(&g->store.data, (size_t)m * (size_t)cols * sizeof(float));
    if (!blk) return SHEAF_ERR_NOMEM;
    int64_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
      const sh_node *nd = &g->store.nodes[ids[i]];
      sh_node *sn = &g->store.nodes[g->pw.slot[g->pw.node[ids[i]].first_slot + nv + s]];
      sn->val = blk + off * cols;
      sn->ld = (int32_t)cols;
      off += nd->rows;
    }
    j->s[s] = (sh_gemm_out){NULL, blk, cols};
  }
  return SHEAF_OK;
}

/* After the job ran: side outputs are computed; the batch's flops. */
static void job_finish(sheaf_graph *g, const sh_pw_job *j, const uint32_t *ids, uint32_t n) {
  const sh_pw_prog *p = j->p;
  for (uint32_t s = 0; s < p->n_side; s++)
    for (uint32_t i = 0; i < n; i++)
      g->store.nodes[g->pw.slot[g->pw.node[ids[i]].first_slot + p->n_slots + s]].done = true;
  uint64_t ops = 0;
  for (int pc = 0; pc < p->n_code; pc++) ops += p->op[pc] != SH_PW_LOAD && p->op[pc] != SH_PW_STORE;
  g->instr.stats.flops += ops * (uint64_t)j->m * (uint64_t)j->n;
}

sheaf_status sh_exec_pw(sheaf_graph *g, const uint32_t *ids, uint32_t n, int64_t m) {
  pw_job j;
  sheaf_status st = job_setup(g, ids, n, m, &j);
  if (st) return st;
  uint64_t t0 = sheaf_time_ns();
  /* split rows over the pool when each thread gets a few microseconds of
   * work (about one vector op per element and instruction) */
  if (g->threads > 1 && m >= 2 && m * j.k.n * j.k.p->n_code >= 32768) {
    j.tasks = m < 4 * g->threads ? m : 4 * g->threads;
    sh_pool_run(g->ctx->pool, j.tasks, pw_task, &j, g->threads);
  } else {
    j.rows(&j.k, 0, m);
  }
  g->instr.stats.ns_kernels += sheaf_time_ns() - t0;
  job_finish(g, &j.k, ids, n);
  return SHEAF_OK;
}

/* ------------------------------------------------------- GEMM-hook fusion */

/* A slot's value through slices and fused activations: the node that holds
 * it (an affine for its slices and aliases), or SH_NONE when it is read
 * through a concat or a reshape (never fused: those may copy). */
static uint32_t slot_base(const sheaf_graph *g, uint32_t x) {
  for (;;) {
    const sh_node *n = &g->store.nodes[x];
    if (n->op == SH_OP_SLICE || n->op == SH_OP_ALIAS) {
      x = g->store.ins[n->in];
      continue;
    }
    return n->op == SH_OP_CONCAT || n->op == SH_OP_RESHAPE ? SH_NONE : x;
  }
}

/* Links root `id` to the one pending affine A whose rows it reads when
 * every other leaf is computed before A runs: done already, from an earlier
 * phase, or at a lower depth of A's phase (policy sheaf runs phases, then
 * depths, in ascending order; a value stored by a program or recomputed is
 * computed at its own depth). */
void sh_pw_link_hot(sheaf_graph *g, uint32_t id) {
  const sh_node *r = &g->store.nodes[id];
  sh_pw_node *rp = &g->pw.node[id];
  const uint32_t *slots = g->pw.slot + rp->first_slot;
  uint32_t hot = SH_NONE, nv = sh_pw_prog_of(g, id)->n_slots;
  for (uint32_t v = 0; v < nv; v++) {
    uint32_t b = slot_base(g, slots[v]);
    if (b == SH_NONE) return;
    const sh_node *bn = &g->store.nodes[b];
    if (bn->op != SH_OP_AFFINE || bn->done) continue;
    if ((hot != SH_NONE && b != hot) || bn->rows != r->rows || bn->phase != r->phase) return;
    hot = b;
  }
  if (hot == SH_NONE) return;
  const sh_node *a = &g->store.nodes[hot];
  for (uint32_t v = 0; v < nv; v++) {
    uint32_t b = slot_base(g, slots[v]);
    const sh_node *bn = &g->store.nodes[b];
    if (b != hot && !bn->done && bn->phase == a->phase && bn->depth >= a->depth)
      return; /* may not be computed yet when A runs */
  }
  rp->hook_next = sh_affine_of(g, hot)->hook;
  sh_affine_of(g, hot)->hook = id;
}

#define PW_HOOK_MAX 4 /* programs (signatures) run in one GEMM's hook */

typedef struct pw_hook_grp {
  pw_job j;
  uint32_t sig, n;
  uint32_t *ids, *aff; /* the roots, and the index of each one's affine in the batch */
  int64_t *cnt;        /* cnt[r]: job rows before GEMM row r (m + 1 entries) */
} pw_hook_grp;

struct sh_pw_hook {
  int n;
  pw_hook_grp grp[PW_HOOK_MAX];
};

sheaf_status sh_pw_hook_plan(sheaf_graph *g, const uint32_t *ids, uint32_t n, int64_t m,
                             sh_pw_hook **out) {
  *out = NULL;
  sh_pw_hook *h = NULL;
  for (uint32_t i = 0; i < n; i++) { /* each affine's first root (cold: built long before) */
    uint32_t r = sh_affine_of(g, ids[i])->hook;
    if (r != SH_NONE) __builtin_prefetch(&g->pw.node[r]), __builtin_prefetch(&g->store.nodes[r]);
  }
  for (uint32_t i = 0; i < n; i++) {
    for (uint32_t r = sh_affine_of(g, ids[i])->hook; r != SH_NONE; r = g->pw.node[r].hook_next) {
      if (g->store.nodes[r].done) continue;
      if (!h) {
        h = sh_arena_alloc(&g->work.scratch, sizeof *h);
        if (!h) return SHEAF_ERR_NOMEM;
        h->n = 0;
      }
      uint32_t sig = g->pw.node[r].sig;
      int k = 0;
      while (k < h->n && h->grp[k].sig != sig) k++;
      pw_hook_grp *q = &h->grp[k];
      if (k == h->n) {
        if (k == PW_HOOK_MAX) continue;
        h->n++;
        q->sig = sig;
        q->n = 0;
        q->ids = sh_arena_alloc(&g->work.scratch, (size_t)n * sizeof *q->ids);
        q->aff = sh_arena_alloc(&g->work.scratch, (size_t)n * sizeof *q->aff);
        if (!q->ids || !q->aff) return SHEAF_ERR_NOMEM;
      } else if (q->aff[q->n - 1] == i) {
        continue; /* one root per affine and program: job rows follow GEMM rows */
      }
      q->ids[q->n] = r;
      q->aff[q->n++] = i;
    }
  }
  if (!h) return SHEAF_OK;
  for (int k = 0; k < h->n; k++) {
    pw_hook_grp *q = &h->grp[k];
    q->cnt = sh_arena_alloc(&g->work.scratch, (size_t)(m + 1) * sizeof *q->cnt);
    if (!q->cnt) return SHEAF_ERR_NOMEM;
    int64_t row = 0, jr = 0;
    uint32_t e = 0;
    q->cnt[0] = 0;
    for (uint32_t i = 0; i < n; i++) {
      bool mine = e < q->n && q->aff[e] == i;
      e += mine;
      for (int32_t t = g->store.nodes[ids[i]].rows; t > 0; t--, row++) q->cnt[row + 1] = mine ? ++jr : jr;
    }
    sheaf_status st = job_setup(g, q->ids, q->n, jr, &q->j);
    if (st) return st;
  }
  *out = h;
  return SHEAF_OK;
}

void sh_pw_hook_rows(void *arg, int64_t m0, int64_t rows, int tid) {
  const sh_pw_hook *h = arg;
  (void)tid;
  for (int k = 0; k < h->n; k++) {
    const pw_hook_grp *q = &h->grp[k];
    int64_t r0 = q->cnt[m0], r1 = q->cnt[m0 + rows];
    if (r0 < r1) q->j.rows(&q->j.k, r0, r1);
  }
}

void sh_pw_hook_done(sheaf_graph *g, const sh_pw_hook *h) {
  for (int k = 0; k < h->n; k++) {
    const pw_hook_grp *q = &h->grp[k];
    for (uint32_t i = 0; i < q->n; i++) g->store.nodes[q->ids[i]].done = true;
    job_finish(g, &q->j.k, q->ids, q->n);
    g->instr.pw_hooked += q->n;
    g->instr.stats.batches++;
    g->sigs.at[q->sig].batches++;
    g->sigs.at[q->sig].nodes += q->n;
  }
}
