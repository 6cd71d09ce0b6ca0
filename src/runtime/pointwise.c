/*
 * pointwise.c — generic fusion of chains of the elementwise ops (class EW
 * in ops.def: arithmetic, sum_n, scale, activations, exp, log, ...).
 *
 * Every elementwise node has a side entry, g->pw.node[id] (sh_pw_node):
 * this file's state about it, none of it in the node itself.
 *
 * Build (policy sheaf): a pointwise node absorbs each input that is itself a
 * pending pointwise node nobody else has read yet (same phase, within the
 * program limits): the input is marked ABS (inlined into its reader, its
 * `absorber`) and the new node's depth is max over the *leaves* + 1, so a
 * whole chain takes one level. Nothing is hashed or bucketed at build: the
 * node's id goes on a list.
 *
 * A later reader of an absorbed node gives it a value of its own
 * (sh_pw_need): if its root absorber (following `absorber`) is at the same depth and
 * has the same shape, the root's program stores it as a side output (SIDE:
 * the TreeLSTM's c is written by the program that computes h from it);
 * otherwise it is bucketed and run on its own (recomputed); after a flush it
 * is computed at once.
 *
 * Flush: each root is flattened into a stack program over its distinct
 * leaves (sh_pw_prog, kernels/pw.h: LOAD leaf, STORE side, binary / unary /
 * scale ops), interned in the graph's program table; its signature is
 * (program, shape, which leaves are broadcast scalars), so identical cells
 * of every instance batch together. Running them (batches, and inside a
 * GEMM's row hook) is pw_exec.c, on the interpreters of kernels/pw.h.
 */
#include <stdio.h>
#include <string.h>

#include "runtime/runtime.h"

/* The absorber that nobody absorbed: whose program computes node `id`. */
static uint32_t root_of(const sheaf_graph *g, uint32_t id) {
  while (g->pw.node[id].flags & SH_PW_NODE_ABS) id = g->pw.node[id].absorber;
  return id;
}

/* ------------------------------------------------------------------ build */

sheaf_expr sh_pw_build(sheaf_graph *g, int op, const uint32_t *ins, int n_in, int rank, int32_t rows,
                       int32_t cols, float f) {
  uint32_t phase = (uint32_t)g->store.phase;
  for (int i = 0; i < n_in; i++) {
    if (g->store.nodes[ins[i]].phase > phase) phase = g->store.nodes[ins[i]].phase;
    /* Reads come first: an absorbed input gets its value (a side output of
     * its root, which is then never absorbed) before this node chooses what
     * to absorb, so it cannot absorb the program that stores a value it
     * also reads as a leaf (a / (a + b): a cycle). */
    if (SH_UNLIKELY(g->store.nodes[ins[i]].uses && sh_pw_absorbed(g, ins[i])) &&
        sh_pw_need(g, ins[i]))
      return SH_NULL_EXPR; /* (absorbed: read by its absorber, see sh_node_new) */
  }
  /* the side entry first: a failure leaves no half-built node */
  if (sh_side_reserve(g->ctx, (void **)&g->pw.node, &g->pw.cap_node, g->store.n_nodes,
                      sizeof *g->pw.node)) {
    sh_graph_fail(g, SHEAF_ERR_NOMEM, "%s: out of memory", sh_op_name(op));
    return SH_NULL_EXPR;
  }
  /* what each input contributes: absorbed (its program) or a leaf */
  int n_ops = op == SH_OP_SUM_N ? n_in - 1 : 1;
  unsigned code = (unsigned)n_ops, leaves = 0, consts = op == SH_OP_SCALE, stack = 0;
  uint32_t absorbed = 0; /* bit i: input i is absorbed */
  bool fuse = g->policy == SHEAF_POLICY_SHEAF && n_in <= 16;
  for (int i = 0; i < n_in; i++) {
    const sh_node *x = &g->store.nodes[ins[i]];
    unsigned left = (unsigned)(n_in - 1 - i); /* later inputs take >= 1 code, 1 leaf */
    /* values on the stack below input i's: sum_n adds as it goes, the
     * other ops pop all their inputs at the end */
    unsigned below = op == SH_OP_SUM_N ? (i > 0) : (unsigned)i;
    bool cand = fuse && sh_op_is_pw(x->op) && ins[i] >= g->store.first_pending && x->uses == 0 &&
                !x->done && x->phase == phase &&
                !(g->pw.node[ins[i]].flags & (SH_PW_NODE_ABS | SH_PW_NODE_HAS_SIDE));
    for (int k = 0; cand && k < n_in; k++) cand = k == i || ins[k] != ins[i];
    unsigned xc = 1, xl = 1, xk = 0, xs = 1;
    if (cand) {
      const sh_pw_node *s = &g->pw.node[ins[i]];
      unsigned st = below + s->stack > stack ? below + s->stack : stack;
      if (code + s->code + left <= SH_PW_MAX_CODE && leaves + s->leaves + left <= SH_PW_MAX_LEAVES &&
          consts + s->consts <= SH_PW_MAX_CONST && st <= SH_PW_MAX_STACK) {
        xc = s->code;
        xl = s->leaves;
        xk = s->consts;
        xs = s->stack;
        absorbed |= 1u << i;
      }
    }
    code += xc;
    leaves += xl;
    consts += xk;
    if (below + xs > stack) stack = below + xs;
  }
  uint32_t id = sh_node_new(g, op, ins, n_in);
  if (id == SH_NONE) return SH_NULL_EXPR;
  sh_node *n = &g->store.nodes[id];
  n->rank = (uint8_t)rank;
  n->rows = rows;
  n->cols = cols;
  if (op == SH_OP_SCALE) n->scale = f;
  /* depth: max over the leaves + 1 (an absorbed input is one level above
   * its leaves; a value an earlier flush computed is a leaf at depth 0) */
  uint32_t depth = 1;
  for (int i = 0; i < n_in; i++) {
    const sh_node *x = &g->store.nodes[ins[i]];
    uint32_t d = x->phase != n->phase || ins[i] < g->store.first_pending ? 1
                 : absorbed >> i & 1                                       ? x->depth
                                                                           : x->depth + 1;
    if (d > depth) depth = d;
    if (absorbed >> i & 1) {
      g->pw.node[ins[i]].flags |= SH_PW_NODE_ABS;
      g->pw.node[ins[i]].absorber = id;
    }
  }
  /* absorbed producers leave the flush list (usually its tail: just built) */
  for (int i = n_in - 1; i >= 0; i--)
    if (absorbed >> i & 1 && g->pw.n_list && g->pw.list[g->pw.n_list - 1] == ins[i]) {
      g->pw.n_list--;
      g->pw.node[ins[i]].flags &= (uint8_t)~SH_PW_NODE_LISTED;
    }
  n->depth = depth;
  /* bytes: n_in <= SH_PW_MAX_LEAVES (sum_n builds groups), so each size is
   * at most SH_PW_MAX_CODE */
  sh_pw_node *pn = &g->pw.node[id];
  *pn = (sh_pw_node){0};
  pn->absorbed = (uint16_t)absorbed;
  pn->code = (uint8_t)code;
  pn->leaves = (uint8_t)leaves;
  pn->stack = (uint8_t)stack;
  pn->consts = (uint8_t)consts;
  return sh_build_finish(g, id);
}

sheaf_status sh_pw_need(sheaf_graph *g, uint32_t id) {
  const sh_node *x = &g->store.nodes[id];
  sh_pw_node *xp = &g->pw.node[id];
  if ((xp->flags & SH_PW_NODE_NEED) || x->done) return SHEAF_OK;
  xp->flags |= SH_PW_NODE_NEED;
  if (id < g->store.first_pending) return sh_pw_compute(g, id); /* flushed without a value */
  /* stored by its root's program when that runs no later than x would */
  uint32_t r = root_of(g, id);
  const sh_node *rn = &g->store.nodes[r];
  sh_pw_node *rp = &g->pw.node[r];
  if (g->policy == SHEAF_POLICY_SHEAF && rn->depth == x->depth && rn->rows == x->rows &&
      rn->cols == x->cols && rp->sides < SH_PW_MAX_SIDE && rp->code < SH_PW_MAX_CODE) {
    xp->flags |= SH_PW_NODE_SIDE;
    rp->code++;
    rp->sides++;
    rp->flags |= SH_PW_NODE_HAS_SIDE;
    return SHEAF_OK;
  }
  /* else bucketed at flush on its own (recomputed) */
  if (g->policy == SHEAF_POLICY_SHEAF && !(xp->flags & SH_PW_NODE_LISTED) && sh_pw_list_add(g, id))
    return sh_graph_fail(g, SHEAF_ERR_NOMEM, "%s: out of memory", sh_op_name(x->op));
  return SHEAF_OK;
}

sheaf_status sh_pw_list_grow(sheaf_graph *g) {
  return sh_grow(g->ctx, (void **)&g->pw.list, &g->pw.cap_list, g->pw.n_list + 1,
                 sizeof *g->pw.list);
}

/* ---------------------------------------------------------------- flatten */

typedef struct pw_flat {
  sh_pw_prog p;
  uint32_t leaf[SH_PW_MAX_LEAVES]; /* the leaf node as read (a slice: its own id) */
  uint32_t slot[SH_PW_MAX_LEAVES], side[SH_PW_MAX_SIDE];
  uint32_t root;
  unsigned sp;
  bool bad;
} pw_flat;

static void put(pw_flat *b, int op, unsigned arg) {
  if (b->p.n_code >= SH_PW_MAX_CODE || arg > 255) {
    b->bad = true;
    return;
  }
  b->p.op[b->p.n_code] = (uint8_t)op;
  b->p.arg[b->p.n_code++] = (uint8_t)arg;
}

static void push_leaf(pw_flat *b, uint32_t x) {
  unsigned k = 0;
  while (k < b->p.n_leaves && b->leaf[k] != x) k++;
  if (k == b->p.n_leaves) {
    if (k >= SH_PW_MAX_LEAVES) {
      b->bad = true;
      return;
    }
    b->leaf[b->p.n_leaves++] = x;
  }
  put(b, SH_PW_LOAD, k);
  if (++b->sp > b->p.stack) b->p.stack = (uint8_t)b->sp;
  if (b->sp > SH_PW_MAX_STACK) b->bad = true;
}

/* Value slots of the leaves: slices of one value (not of a concat, whose
 * pieces lie apart) are read through it at their column offsets, so they
 * share one row-pointer array; a leaf whose source no other leaf reads stays
 * its own slot at offset 0 (its signature then does not depend on where it
 * was sliced, so such ops batch as before). */
static void assign_slots(const sheaf_graph *g, pw_flat *b) {
  uint32_t src[SH_PW_MAX_LEAVES];
  int64_t off[SH_PW_MAX_LEAVES];
  unsigned nl = b->p.n_leaves;
  for (unsigned k = 0; k < nl; k++) {
    uint32_t v = b->leaf[k];
    off[k] = 0;
    while (g->store.nodes[v].op == SH_OP_SLICE &&
           g->store.nodes[g->store.ins[g->store.nodes[v].in]].op != SH_OP_CONCAT) {
      off[k] += g->store.nodes[v].offset;
      v = g->store.ins[g->store.nodes[v].in];
    }
    src[k] = v;
  }
  for (unsigned k = 0; k < nl; k++) {
    bool shared = false;
    for (unsigned q = 0; q < nl && !shared; q++) shared = q != k && src[q] == src[k];
    uint32_t v = shared ? src[k] : b->leaf[k];
    unsigned j = 0;
    while (j < b->p.n_slots && b->slot[j] != v) j++;
    if (j == b->p.n_slots) b->slot[b->p.n_slots++] = v;
    b->p.slot[k] = (uint8_t)j;
    b->p.off[k] = shared ? (int32_t)off[k] : 0;
  }
}

static void emit(const sheaf_graph *g, pw_flat *b, uint32_t id, int level) {
  const sh_node *n = &g->store.nodes[id];
  if (level > SH_PW_MAX_CODE) {
    b->bad = true;
    return;
  }
  uint32_t absorbed = g->pw.node[id].absorbed;
  for (uint32_t i = 0; i < n->n_in && !b->bad; i++) {
    uint32_t x = g->store.ins[n->in + i];
    if (absorbed >> i & 1) { /* inlined into this node */
      emit(g, b, x, level + 1);
      if ((g->pw.node[x].flags & SH_PW_NODE_SIDE) && root_of(g, x) == b->root) {
        if (b->p.n_side >= SH_PW_MAX_SIDE) {
          b->bad = true;
          return;
        }
        b->side[b->p.n_side] = x;
        put(b, SH_PW_STORE, b->p.n_side++);
      }
    } else {
      push_leaf(b, x);
    }
    if (n->op == SH_OP_SUM_N && i >= 1) {
      put(b, SH_PW_ADD, 0);
      b->sp--;
    }
  }
  switch (n->op) {
  case SH_OP_SUM_N: break;
  case SH_OP_SCALE:
    if (b->p.n_const >= SH_PW_MAX_CONST) {
      b->bad = true;
      return;
    }
    b->p.k[b->p.n_const] = n->scale;
    put(b, SH_PW_SCALE, b->p.n_const++);
    break;
  default: /* every other elementwise op is its own opcode (ops.def) */
    if (!sh_op_is_pw(n->op)) {
      b->bad = true;
      return;
    }
    put(b, SH_PW_OPS + n->op, 0);
    b->sp -= (unsigned)sh_op_arity(n->op) - 1;
    break;
  }
}

/* Four independent multiply chains over the program's words (one chain
 * would serialize on the multiplies: this runs once per flushed root). */
static uint64_t prog_hash(const sh_pw_prog *p) {
  _Static_assert(sizeof(sh_pw_prog) % 8 == 0, "whole words");
  uint64_t w[sizeof *p / 8];
  memcpy(w, p, sizeof w);
  uint64_t h0 = 0x6a09e667f3bcc909ull, h1 = 0xbb67ae8584caa73bull, h2 = 0x3c6ef372fe94f82bull,
           h3 = 0xa54ff53a5f1d36f1ull;
  size_t i = 0;
  for (; i + 4 <= SH_ARRAY_LEN(w); i += 4) {
    h0 = (h0 ^ w[i]) * 0x9e3779b97f4a7c15ull;
    h1 = (h1 ^ w[i + 1]) * 0xc2b2ae3d27d4eb4full;
    h2 = (h2 ^ w[i + 2]) * 0x165667b19e3779f9ull;
    h3 = (h3 ^ w[i + 3]) * 0x85ebca77c2b2ae63ull;
  }
  for (; i < SH_ARRAY_LEN(w); i++) h0 = (h0 ^ w[i]) * 0x9e3779b97f4a7c15ull;
  uint64_t h = h0 ^ (h1 << 17 | h1 >> 47) ^ (h2 << 31 | h2 >> 33) ^ (h3 << 47 | h3 >> 17);
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ h >> 32;
}

static sheaf_status intern(sheaf_graph *g, const sh_pw_prog *p, uint32_t *out) {
  uint64_t h = prog_hash(p);
  if (g->pw.prog_table_cap) {
    uint32_t mask = g->pw.prog_table_cap - 1, j = (uint32_t)h & mask;
    for (uint32_t s; (s = g->pw.prog_table[j]) != 0; j = (j + 1) & mask)
      if (memcmp(&g->pw.progs[s - 1], p, sizeof *p) == 0) {
        *out = s - 1;
        return SHEAF_OK;
      }
  }
  sheaf_status st =
      sh_grow(g->ctx, (void **)&g->pw.progs, &g->pw.cap_progs, g->pw.n_progs + 1, sizeof *g->pw.progs);
  if (st) return st;
  if (2 * (g->pw.n_progs + 1) > g->pw.prog_table_cap) {
    uint32_t cap = g->pw.prog_table_cap ? 2 * g->pw.prog_table_cap : 64;
    uint32_t *t = sh_calloc(g->ctx, cap, sizeof *t);
    if (!t) return SHEAF_ERR_NOMEM;
    for (uint32_t i = 0; i < g->pw.n_progs; i++) {
      uint32_t j = (uint32_t)prog_hash(&g->pw.progs[i]) & (cap - 1);
      while (t[j]) j = (j + 1) & (cap - 1);
      t[j] = i + 1;
    }
    sh_free(g->ctx, g->pw.prog_table, g->pw.prog_table_cap * sizeof *t);
    g->pw.prog_table = t;
    g->pw.prog_table_cap = cap;
  }
  uint32_t j = (uint32_t)h & (g->pw.prog_table_cap - 1);
  while (g->pw.prog_table[j]) j = (j + 1) & (g->pw.prog_table_cap - 1);
  g->pw.progs[g->pw.n_progs] = *p;
  g->pw.prog_table[j] = g->pw.n_progs + 1;
  *out = g->pw.n_progs++;
  return SHEAF_OK;
}

/* memcmp equality of two flattened programs, read with the widths the
 * flattener wrote them (bytes, int32): a memcmp right after flattening
 * reads those narrow stores with wide loads, which the store buffer cannot
 * forward (a stall until the stores retire). Programs are flattened into a
 * zeroed struct, so both are zero past their counts. */
static bool prog_same(const sh_pw_prog *a, const sh_pw_prog *b) {
  if (a->n_code != b->n_code || a->n_leaves != b->n_leaves || a->n_slots != b->n_slots ||
      a->n_const != b->n_const || a->n_side != b->n_side || a->stack != b->stack)
    return false;
  for (unsigned i = 0; i < a->n_code; i++)
    if (a->op[i] != b->op[i] || a->arg[i] != b->arg[i]) return false;
  for (unsigned i = 0; i < a->n_leaves; i++)
    if (a->slot[i] != b->slot[i] || a->off[i] != b->off[i]) return false;
  return a->n_const == 0 || memcmp(a->k, b->k, a->n_const * sizeof *a->k) == 0;
}

sheaf_status sh_pw_finalize(sheaf_graph *g, uint32_t id, bool fast) {
  if (g->pw.node[id].flags & SH_PW_NODE_FINAL) return SHEAF_OK;
  pw_flat b;
  memset(&b, 0, sizeof b);
  b.root = id;
  b.sp = 0;
  b.bad = false;
  emit(g, &b, id, 0);
  if (!b.bad) assign_slots(g, &b);
  if (b.bad || b.sp != 1)
    return sh_fail(g->ctx, SHEAF_ERR_INTERNAL, "internal error: pointwise program of node %u", id);
  /* consecutive roots are usually the same cell: try the last program first */
  uint32_t pid = g->pw.memo_prog - 1;
  sheaf_status st = SHEAF_OK;
  if (!g->pw.memo_prog || !prog_same(&g->pw.progs[pid], &b.p)) {
    st = intern(g, &b.p, &pid);
    if (!st) g->pw.memo_prog = pid + 1;
  }
  uint32_t nl = b.p.n_leaves, nv = b.p.n_slots, ns = b.p.n_side;
  if (!st)
    st = sh_grow(g->ctx, (void **)&g->pw.slot, &g->pw.cap_slot, g->pw.n_slot + nv + ns,
                 sizeof *g->pw.slot);
  if (st) return st;
  uint32_t off = g->pw.n_slot;
  memcpy(g->pw.slot + off, b.slot, nv * sizeof *b.slot);
  memcpy(g->pw.slot + off + nv, b.side, ns * sizeof *b.side);
  g->pw.n_slot += nv + ns;
  const sh_node *n = &g->store.nodes[id];
  sh_sig_key k;
  memset(&k, 0, sizeof k);
  k.op = SH_OP_FUSED;
  k.rank = n->rank;
  k.cols = n->cols;
  k.p0 = pid;
  bool big = (int64_t)n->rows * n->cols > 1;
  for (uint32_t i = 0; i < nl; i++) {
    const sh_node *x = &g->store.nodes[b.leaf[i]];
    if (big && (int64_t)x->rows * x->cols == 1) k.w[0] |= 1 << i; /* a broadcast scalar */
  }
  uint32_t sig = g->pw.memo_sig - 1;
  /* the fields set above (the rest is zero in both), not memcmp: see prog_same */
  const sh_sig_key *mk = &g->pw.memo_key;
  if (!g->pw.memo_sig || mk->op != k.op || mk->rank != k.rank || mk->cols != k.cols ||
      mk->p0 != k.p0 || mk->w[0] != k.w[0]) {
    st = fast ? sh_sig_find_fast(g, &k, &sig) : sh_sig_find_hash(g, &k, &sig);
    if (st) return st;
    g->pw.memo_key = k;
    g->pw.memo_sig = sig + 1;
  }
  sh_pw_node *pn = &g->pw.node[id];
  pn->first_slot = off;
  pn->sig = sig;
  pn->flags |= SH_PW_NODE_FINAL;
  return SHEAF_OK;
}

/* The nodes built after `id` up to the next root, their pointwise side
 * entries (next is an elementwise node: they are in the array) and their
 * input ids: a cell's chain is usually built just before its root, so
 * flattening the next root finds them in cache instead of waiting on each
 * in turn. (The affine side entries are dense, in build order: the one
 * sh_pw_link_hot writes shares its line with the previous GEMMs'.) */
static void prefetch_next(const sheaf_graph *g, uint32_t id, uint32_t next) {
  if (next <= id || next - id > 48) return;
  for (uint32_t x = id + 1; x <= next; x++) __builtin_prefetch(&g->store.nodes[x]);
  /* the side entries by cache line (a last partial line is fetched with next's) */
  for (uint32_t x = id + 1; x <= next; x += 64 / sizeof *g->pw.node) __builtin_prefetch(&g->pw.node[x]);
  __builtin_prefetch(&g->pw.node[next]);
  const uint32_t *in = g->store.ins + g->store.nodes[id].in + g->store.nodes[id].n_in;
  for (uint32_t k = 0; k < 64 && in + k < g->store.ins + g->store.n_ins; k += 16) __builtin_prefetch(in + k);
}

sheaf_status sh_pw_flush_roots(sheaf_graph *g) {
  for (uint32_t i = 0; i < g->pw.n_list; i++) {
    uint32_t id = g->pw.list[i];
    if (i + 1 < g->pw.n_list) prefetch_next(g, id, g->pw.list[i + 1]);
    uint8_t f = g->pw.node[id].flags;
    bool own = !(f & SH_PW_NODE_ABS) || ((f & SH_PW_NODE_NEED) && !(f & SH_PW_NODE_SIDE));
    if (!own || g->store.nodes[id].done) continue;
    sheaf_status st = sh_pw_finalize(g, id, true);
    if (!st) st = sh_sched_sheaf_add(g, id, g->pw.node[id].sig);
    if (st) return st;
    sh_pw_link_hot(g, id); /* may run in the row hook of the GEMM it reads */
  }
  g->pw.n_list = 0;
  return SHEAF_OK;
}

sheaf_status sh_pw_compute(sheaf_graph *g, uint32_t id) {
  sheaf_status st = sh_pw_finalize(g, id, false);
  if (!st) {
    g->instr.cur_depth = g->store.nodes[id].depth;
    g->instr.cur_phase = g->store.nodes[id].phase;
    st = sh_exec_batch(g, g->pw.node[id].sig, &id, 1);
  }
  if (st && !g->status) {
    char e[SH_ERR_MAX];
    sh_graph_fail(g, st, "computing a fused value: %s", sh_last_error_copy(g->ctx, e, sizeof e));
  }
  return st ? (g->status ? g->status : st) : SHEAF_OK;
}

void sh_pw_clear(sheaf_graph *g) { g->pw.n_list = g->pw.n_slot = 0; }

void sh_pw_free(sheaf_graph *g) {
  sh_free(g->ctx, g->pw.progs, (size_t)g->pw.cap_progs * sizeof *g->pw.progs);
  sh_free(g->ctx, g->pw.prog_table, (size_t)g->pw.prog_table_cap * sizeof *g->pw.prog_table);
  sh_free(g->ctx, g->pw.list, (size_t)g->pw.cap_list * sizeof *g->pw.list);
  sh_free(g->ctx, g->pw.slot, (size_t)g->pw.cap_slot * sizeof *g->pw.slot);
  sh_free(g->ctx, g->pw.node, (size_t)g->pw.cap_node * sizeof *g->pw.node);
}

/* ------------------------------------------------------------------ names */

void sh_pw_prog_str(const sh_pw_prog *p, char *buf, size_t size) {
  enum { W = 80 };
  char s[SH_PW_MAX_STACK][W];
  int prec[SH_PW_MAX_STACK]; /* 1: + -, 2: * /, 3: atom */
  int sp = 0;
  for (int pc = 0; pc < p->n_code; pc++) {
    int op = p->op[pc], a = p->arg[pc];
    char t[2 * W + 32]; /* room for two operands: truncated to W when stored */
    switch (op) {
    case SH_PW_LOAD:
      if (sp >= SH_PW_MAX_STACK) goto bad;
      snprintf(s[sp], W, "x%d", a);
      prec[sp++] = 3;
      continue;
    case SH_PW_STORE: /* a side output: {...} */
      if (sp < 1) goto bad;
      snprintf(t, sizeof t, "{%s}", s[sp - 1]);
      memcpy(s[sp - 1], t, W - 1), s[sp - 1][W - 1] = '\0';
      prec[sp - 1] = 3;
      continue;
    case SH_PW_ADD:
    case SH_PW_SUB:
    case SH_PW_MUL:
    case SH_PW_DIV: {
      if (sp < 2) goto bad;
      int pr = op == SH_PW_ADD || op == SH_PW_SUB ? 1 : 2;
      bool pl = prec[sp - 2] < pr, prr = prec[sp - 1] < pr || (prec[sp - 1] == pr && op != SH_PW_ADD && op != SH_PW_MUL);
      char sym = op == SH_PW_ADD ? '+' : op == SH_PW_SUB ? '-' : op == SH_PW_MUL ? '*' : '/';
      snprintf(t, sizeof t, "%s%s%s%c%s%s%s", pl ? "(" : "", s[sp - 2], pl ? ")" : "", sym,
               prr ? "(" : "", s[sp - 1], prr ? ")" : "");
      sp--;
      memcpy(s[sp - 1], t, W - 1), s[sp - 1][W - 1] = '\0';
      prec[sp - 1] = pr;
      continue;
    }
    case SH_PW_SCALE: {
      if (sp < 1) goto bad;
      bool par = prec[sp - 1] < 2;
      snprintf(t, sizeof t, "%g*%s%s%s", (double)p->k[a], par ? "(" : "", s[sp - 1], par ? ")" : "");
      memcpy(s[sp - 1], t, W - 1), s[sp - 1][W - 1] = '\0';
      prec[sp - 1] = 2;
      continue;
    }
    default: { /* name(x) or name(x, y) */
      int opi = op - SH_PW_OPS, ar = sh_op_arity(opi);
      if (op < SH_PW_OPS || !sh_op_is_pw(opi) || ar < 1 || ar > 3 || sp < ar) goto bad;
      if (ar == 3)
        snprintf(t, sizeof t, "%s(%.24s, %.24s, %.24s)", sh_op_name(opi), s[sp - 3], s[sp - 2], s[sp - 1]);
      else if (ar == 2)
        snprintf(t, sizeof t, "%s(%s, %s)", sh_op_name(opi), s[sp - 2], s[sp - 1]);
      else
        snprintf(t, sizeof t, "%s(%s)", sh_op_name(opi), s[sp - 1]);
      sp -= ar - 1;
      memcpy(s[sp - 1], t, W - 1), s[sp - 1][W - 1] = '\0';
      prec[sp - 1] = 3;
      continue;
    }
    }
  }
  if (sp == 1) {
    snprintf(buf, size, "%s", s[0]);
    return;
  }
bad:
  snprintf(buf, size, "?");
}
