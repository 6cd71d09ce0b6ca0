/*
 * pointwise.c — generic fusion of elementwise chains (add, sub, mul, div,
 * sum_n, scale, tanh, sigmoid, relu, gelu, exp, log).
 *
 * Build (policy sheaf): a pointwise node absorbs each input that is itself a
 * pending pointwise node nobody else has read yet (same phase, within the
 * program limits): the input is marked ABS (inlined into its reader, which
 * p1 names) and the new node's depth is max over the *leaves* + 1, so a
 * whole chain takes one level. Nothing is hashed or bucketed at build: the
 * node's id goes on a list.
 *
 * A later reader of an absorbed node gives it a value of its own
 * (sh_pw_need): if its root absorber (following p1) is at the same depth and
 * has the same shape, the root's program stores it as a side output (SIDE:
 * the TreeLSTM's c is written by the program that computes h from it);
 * otherwise it is bucketed and run on its own (recomputed); after a flush it
 * is computed at once.
 *
 * Flush: each root is flattened into a stack program over its distinct
 * leaves (sh_pw_prog: LOAD leaf, STORE side, binary / unary / scale ops),
 * interned in the graph's program table; its signature is (program, shape,
 * which leaves are broadcast scalars), so identical cells of every instance
 * batch together. A batch runs the program over chunks of each row with the
 * inline vector math of vmath_avx2.h (libm references at the scalar level),
 * leaves read through row pointers (or base + ld, or one broadcast row),
 * one output block per batch and one per side output.
 */
#include <stdio.h>
#include <string.h>

#include "base/pool.h"
#include "kernels/vmath.h"
#include "runtime/runtime.h"

#if defined(__x86_64__)
#include "kernels/vmath_avx2.h"
#endif

/* Sizes of a node's program before flattening (upper bounds: leaves are
 * counted before deduplication): code length in node->act, the rest here. */
typedef struct pw_sizes {
  unsigned leaves, stack, consts, sides;
} pw_sizes;

static pw_sizes sizes_of(const sh_node *n) {
  return (pw_sizes){n->aux & 0xffu, (n->aux >> 8) & 0xffu, (n->aux >> 16) & 0xffu, n->aux >> 24};
}
static uint32_t sizes_pack(pw_sizes s) {
  return s.leaves | s.stack << 8 | s.consts << 16 | s.sides << 24;
}

static uint32_t root_of(const sheaf_graph *g, uint32_t id) {
  while (g->nodes[id].flags & SH_NODE_ABS) id = g->nodes[id].p1 - 1;
  return id;
}

/* ------------------------------------------------------------------ build */

sheaf_expr sh_pw_build(sheaf_graph *g, int op, const uint32_t *ins, int n_in, int rank, int32_t rows,
                       int32_t cols, float f) {
  uint32_t phase = (uint32_t)g->phase;
  for (int i = 0; i < n_in; i++)
    if (g->nodes[ins[i]].phase > phase) phase = g->nodes[ins[i]].phase;
  /* what each input contributes: absorbed (its program) or a leaf */
  int n_ops = op == SH_OP_SUM_N ? n_in - 1 : 1;
  unsigned code = (unsigned)n_ops, stack = 0, rest_stack = 0;
  pw_sizes tot = {0, 0, op == SH_OP_SCALE, 0};
  uint32_t absorbed = 0; /* bit i: input i is absorbed */
  bool fuse = g->policy == SHEAF_POLICY_SHEAF && n_in <= 16;
  for (int i = 0; i < n_in; i++) {
    const sh_node *x = &g->nodes[ins[i]];
    unsigned left = (unsigned)(n_in - 1 - i); /* later inputs take >= 1 code, 1 leaf */
    bool cand = fuse && sh_op_is_pw(x->op) && ins[i] >= g->first_pending && x->uses == 0 &&
                !(x->flags & (SH_NODE_DONE | SH_NODE_ABS | SH_NODE_HAS_SIDE)) && x->phase == phase;
    for (int k = 0; cand && k < n_in; k++) cand = k == i || ins[k] != ins[i];
    unsigned xc = 1;
    pw_sizes xs = {1, 1, 0, 0};
    if (cand) {
      pw_sizes s = sizes_of(x);
      unsigned st = i == 0 ? (s.stack > stack ? s.stack : stack)
                           : (1 + s.stack > stack ? 1 + s.stack : stack);
      if (code + x->act + left <= SH_PW_MAX_CODE && tot.leaves + s.leaves + left <= SH_PW_MAX_LEAVES &&
          tot.consts + s.consts <= SH_PW_MAX_CONST && st <= SH_PW_MAX_STACK) {
        xc = x->act;
        xs = s;
        absorbed |= 1u << i;
      }
    }
    code += xc;
    tot.leaves += xs.leaves;
    tot.consts += xs.consts;
    if (i == 0)
      stack = xs.stack;
    else if (1 + xs.stack > rest_stack)
      rest_stack = 1 + xs.stack;
    if (rest_stack > stack) stack = rest_stack;
  }
  uint32_t id = sh_node_new(g, op, ins, n_in);
  if (id == SH_NONE) return SH_NULL_EXPR;
  sh_node *n = &g->nodes[id];
  n->rank = (uint8_t)rank;
  n->rows = rows;
  n->cols = cols;
  n->f = f;
  /* depth: max over the leaves + 1 (an absorbed input is one level above its leaves) */
  uint32_t depth = 1;
  for (int i = 0; i < n_in; i++) {
    sh_node *x = &g->nodes[ins[i]];
    uint32_t d = x->phase != n->phase ? 1 : absorbed >> i & 1 ? x->depth : x->depth + 1;
    if (d > depth) depth = d;
    if (absorbed >> i & 1) {
      x->flags |= SH_NODE_ABS;
      x->p1 = id + 1;
    }
  }
  /* absorbed producers leave the flush list (usually its tail: just built) */
  for (int i = n_in - 1; i >= 0; i--)
    if (absorbed >> i & 1 && g->n_pw_list && g->pw_list[g->n_pw_list - 1] == ins[i]) {
      g->n_pw_list--;
      g->nodes[ins[i]].p0 = 0;
    }
  n->depth = depth;
  n->act = (uint8_t)code;
  tot.stack = stack;
  n->aux = sizes_pack(tot);
  return sh_build_finish(g, id);
}

sheaf_status sh_pw_need(sheaf_graph *g, uint32_t id) {
  sh_node *x = &g->nodes[id];
  if (x->flags & (SH_NODE_NEED | SH_NODE_DONE)) return SHEAF_OK;
  x->flags |= SH_NODE_NEED;
  if (id < g->first_pending) return sh_pw_compute(g, id); /* flushed without a value */
  /* stored by its root's program when that runs no later than x would */
  uint32_t r = root_of(g, id);
  sh_node *rn = &g->nodes[r];
  pw_sizes s = sizes_of(rn);
  if (g->policy == SHEAF_POLICY_SHEAF && rn->depth == x->depth && rn->rows == x->rows &&
      rn->cols == x->cols && s.sides < SH_PW_MAX_SIDE && rn->act < SH_PW_MAX_CODE) {
    x->flags |= SH_NODE_SIDE;
    rn->act++;
    s.sides++;
    rn->aux = sizes_pack(s);
    rn->flags |= SH_NODE_HAS_SIDE;
    return SHEAF_OK;
  }
  /* else bucketed at flush on its own (recomputed) */
  if (g->policy == SHEAF_POLICY_SHEAF && !x->p0) {
    if (sh_grow(g->ctx, (void **)&g->pw_list, &g->cap_pw_list, g->n_pw_list + 1, sizeof *g->pw_list))
      return sh_graph_fail(g, SHEAF_ERR_NOMEM, "%s: out of memory", sh_op_name(x->op));
    g->pw_list[g->n_pw_list++] = id;
    x->p0 = 1;
  }
  return SHEAF_OK;
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
    while (g->nodes[v].op == SH_OP_SLICE && g->nodes[g->ins[g->nodes[v].in]].op != SH_OP_CONCAT) {
      off[k] += g->nodes[v].aux;
      v = g->ins[g->nodes[v].in];
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
  const sh_node *n = &g->nodes[id];
  if (level > SH_PW_MAX_CODE) {
    b->bad = true;
    return;
  }
  for (uint32_t i = 0; i < n->n_in && !b->bad; i++) {
    uint32_t x = g->ins[n->in + i];
    const sh_node *xn = &g->nodes[x];
    if ((xn->flags & SH_NODE_ABS) && xn->p1 == id + 1) {
      emit(g, b, x, level + 1);
      if ((xn->flags & SH_NODE_SIDE) && root_of(g, x) == b->root) {
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
  case SH_OP_ADD: put(b, SH_PW_ADD, 0), b->sp--; break;
  case SH_OP_SUB: put(b, SH_PW_SUB, 0), b->sp--; break;
  case SH_OP_MUL: put(b, SH_PW_MUL, 0), b->sp--; break;
  case SH_OP_DIV: put(b, SH_PW_DIV, 0), b->sp--; break;
  case SH_OP_SUM_N: break;
  case SH_OP_SCALE:
    if (b->p.n_const >= SH_PW_MAX_CONST) {
      b->bad = true;
      return;
    }
    b->p.k[b->p.n_const] = n->f;
    put(b, SH_PW_SCALE, b->p.n_const++);
    break;
  case SH_OP_TANH: put(b, SH_PW_TANH, 0); break;
  case SH_OP_SIGMOID: put(b, SH_PW_SIGMOID, 0); break;
  case SH_OP_RELU: put(b, SH_PW_RELU, 0); break;
  case SH_OP_GELU: put(b, SH_PW_GELU, 0); break;
  case SH_OP_EXP: put(b, SH_PW_EXP, 0); break;
  case SH_OP_LOG: put(b, SH_PW_LOG, 0); break;
  default: b->bad = true; break;
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
  if (g->prog_table_cap) {
    uint32_t mask = g->prog_table_cap - 1, j = (uint32_t)h & mask;
    for (uint32_t s; (s = g->prog_table[j]) != 0; j = (j + 1) & mask)
      if (memcmp(&g->progs[s - 1], p, sizeof *p) == 0) {
        *out = s - 1;
        return SHEAF_OK;
      }
  }
  sheaf_status st =
      sh_grow(g->ctx, (void **)&g->progs, &g->cap_progs, g->n_progs + 1, sizeof *g->progs);
  if (st) return st;
  if (2 * (g->n_progs + 1) > g->prog_table_cap) {
    uint32_t cap = g->prog_table_cap ? 2 * g->prog_table_cap : 64;
    uint32_t *t = sh_calloc(g->ctx, cap, sizeof *t);
    if (!t) return SHEAF_ERR_NOMEM;
    for (uint32_t i = 0; i < g->n_progs; i++) {
      uint32_t j = (uint32_t)prog_hash(&g->progs[i]) & (cap - 1);
      while (t[j]) j = (j + 1) & (cap - 1);
      t[j] = i + 1;
    }
    sh_free(g->ctx, g->prog_table, g->prog_table_cap * sizeof *t);
    g->prog_table = t;
    g->prog_table_cap = cap;
  }
  uint32_t j = (uint32_t)h & (g->prog_table_cap - 1);
  while (g->prog_table[j]) j = (j + 1) & (g->prog_table_cap - 1);
  g->progs[g->n_progs] = *p;
  g->prog_table[j] = g->n_progs + 1;
  *out = g->n_progs++;
  return SHEAF_OK;
}

sheaf_status sh_pw_finalize(sheaf_graph *g, uint32_t id, bool fast) {
  if (g->nodes[id].flags & SH_NODE_FINAL) return SHEAF_OK;
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
  uint32_t pid = g->pw_memo_prog - 1;
  sheaf_status st = SHEAF_OK;
  if (!g->pw_memo_prog || memcmp(&g->progs[pid], &b.p, sizeof b.p) != 0) {
    st = intern(g, &b.p, &pid);
    if (!st) g->pw_memo_prog = pid + 1;
  }
  uint32_t nl = b.p.n_leaves, nv = b.p.n_slots, ns = b.p.n_side;
  if (!st) st = sh_grow(g->ctx, (void **)&g->pwl, &g->cap_pwl, g->n_pwl + nv + ns, sizeof *g->pwl);
  if (st) return st;
  uint32_t off = g->n_pwl;
  memcpy(g->pwl + off, b.slot, nv * sizeof *b.slot);
  memcpy(g->pwl + off + nv, b.side, ns * sizeof *b.side);
  g->n_pwl += nv + ns;
  sh_node *n = &g->nodes[id];
  sh_sig_key k;
  memset(&k, 0, sizeof k);
  k.op = SH_OP_FUSED;
  k.rank = n->rank;
  k.cols = n->cols;
  k.p0 = pid;
  bool big = (int64_t)n->rows * n->cols > 1;
  for (uint32_t i = 0; i < nl; i++) {
    const sh_node *x = &g->nodes[b.leaf[i]];
    if (big && (int64_t)x->rows * x->cols == 1) k.w[0] |= 1 << i; /* a broadcast scalar */
  }
  uint32_t sig = g->pw_memo_sig - 1;
  if (!g->pw_memo_sig || memcmp(&k, &g->pw_memo_key, sizeof k) != 0) {
    st = fast ? sh_sig_find_fast(g, &k, &sig) : sh_sig_find_hash(g, &k, &sig);
    if (st) return st;
    g->pw_memo_key = k;
    g->pw_memo_sig = sig + 1;
  }
  n = &g->nodes[id];
  n->p0 = pid;
  n->aux = off;
  n->sig = sig;
  n->flags |= SH_NODE_FINAL;
  return SHEAF_OK;
}

sheaf_status sh_pw_flush_roots(sheaf_graph *g) {
  for (uint32_t i = 0; i < g->n_pw_list; i++) {
    uint32_t id = g->pw_list[i];
    uint8_t f = g->nodes[id].flags;
    bool own = !(f & SH_NODE_ABS) || ((f & SH_NODE_NEED) && !(f & SH_NODE_SIDE));
    if (!own || (f & SH_NODE_DONE)) continue;
    sheaf_status st = sh_pw_finalize(g, id, true);
    if (!st) st = sh_sched_sheaf_add(g, id);
    if (st) return st;
  }
  g->n_pw_list = 0;
  return SHEAF_OK;
}

sheaf_status sh_pw_compute(sheaf_graph *g, uint32_t id) {
  sheaf_status st = sh_pw_finalize(g, id, false);
  if (!st) {
    g->cur_depth = g->nodes[id].depth;
    g->cur_phase = g->nodes[id].phase;
    st = sh_exec_batch(g, g->nodes[id].sig, &id, 1);
  }
  if (st && !g->status) sh_graph_fail(g, st, "computing a fused value: %s", sheaf_ctx_last_error(g->ctx));
  return st ? (g->status ? g->status : st) : SHEAF_OK;
}

void sh_pw_free(sheaf_graph *g) {
  sh_free(g->ctx, g->progs, (size_t)g->cap_progs * sizeof *g->progs);
  sh_free(g->ctx, g->prog_table, (size_t)g->prog_table_cap * sizeof *g->prog_table);
  sh_free(g->ctx, g->pw_list, (size_t)g->cap_pw_list * sizeof *g->pw_list);
  sh_free(g->ctx, g->pwl, (size_t)g->cap_pwl * sizeof *g->pwl);
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
      snprintf(t, sizeof t, "%s%s%s%c%s%s%s", pl ? "(" : "", s[sp - 2], pl ? ")" : "", "+-*/"[op - SH_PW_ADD],
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
    default: {
      static const char *const fn[] = {"tanh", "sigmoid", "relu", "gelu", "exp", "log"};
      if (sp < 1 || op < SH_PW_TANH || op > SH_PW_LOG) goto bad;
      snprintf(t, sizeof t, "%s(%s)", fn[op - SH_PW_TANH], s[sp - 1]);
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

/* ------------------------------------------------------------- execution */

#define PW_CH 128 /* floats per chunk of a row */

typedef struct pw_arg {
  sh_gemm_in in; /* the slot's rows */
  int64_t off;   /* + this column */
  bool row_bc;   /* one row for every row of the batch */
  bool col_bc;   /* a scalar for every column */
} pw_arg;

typedef struct pw_job {
  const sh_pw_prog *p;
  int64_t m, n, tasks;
  pw_arg a[SH_PW_MAX_LEAVES];
  sh_gemm_out y, s[SH_PW_MAX_SIDE];
  bool simd;
} pw_job;

static inline const float *arg_row(const pw_arg *a, int64_t r) {
  if (a->row_bc) r = 0;
  return (a->in.rows ? a->in.rows[r] : a->in.base + r * a->in.ld) + a->off;
}
static inline float *out_row(const sh_gemm_out *o, int64_t r) {
  return o->rows ? o->rows[r] : o->base + r * o->ld;
}

static float relu1(float x) { return 0.0f > x ? 0.0f : x; } /* NaN and -0 pass */

/* Libm references (the scalar level of vmath.h). */
static void pw_rows_scalar(const pw_job *j, int64_t r0, int64_t r1) {
  const sh_pw_prog *p = j->p;
  float buf[SH_PW_MAX_STACK][PW_CH];
  for (int64_t r = r0; r < r1; r++) {
    const float *lr[SH_PW_MAX_LEAVES];
    for (int k = 0; k < p->n_leaves; k++) lr[k] = arg_row(&j->a[k], r);
    float *yr = out_row(&j->y, r);
    for (int64_t c0 = 0; c0 < j->n; c0 += PW_CH) {
      int64_t len = j->n - c0 < PW_CH ? j->n - c0 : PW_CH;
      const float *rd[SH_PW_MAX_STACK];
      int sp = 0;
      for (int pc = 0; pc < p->n_code; pc++) {
        int op = p->op[pc], arg = p->arg[pc];
        if (op == SH_PW_LOAD) {
          if (j->a[arg].col_bc) {
            for (int64_t i = 0; i < len; i++) buf[sp][i] = lr[arg][0];
            rd[sp] = buf[sp];
          } else {
            rd[sp] = lr[arg] + c0;
          }
          sp++;
          continue;
        }
        if (op == SH_PW_STORE) {
          memcpy(out_row(&j->s[arg], r) + c0, rd[sp - 1], (size_t)len * sizeof(float));
          continue;
        }
        bool bin = op >= SH_PW_ADD && op <= SH_PW_DIV;
        int t = bin ? sp - 2 : sp - 1;
        float *d = t == 0 ? yr + c0 : buf[t];
        const float *a = rd[t], *b = bin ? rd[t + 1] : NULL;
        switch (op) {
        case SH_PW_ADD: for (int64_t i = 0; i < len; i++) d[i] = a[i] + b[i]; break;
        case SH_PW_SUB: for (int64_t i = 0; i < len; i++) d[i] = a[i] - b[i]; break;
        case SH_PW_MUL: for (int64_t i = 0; i < len; i++) d[i] = a[i] * b[i]; break;
        case SH_PW_DIV: for (int64_t i = 0; i < len; i++) d[i] = a[i] / b[i]; break;
        case SH_PW_SCALE: {
          float k = p->k[arg];
          for (int64_t i = 0; i < len; i++) d[i] = a[i] * k;
          break;
        }
        case SH_PW_TANH: for (int64_t i = 0; i < len; i++) d[i] = tanhf(a[i]); break;
        case SH_PW_SIGMOID: for (int64_t i = 0; i < len; i++) d[i] = sh_sigmoid_ref(a[i]); break;
        case SH_PW_RELU: for (int64_t i = 0; i < len; i++) d[i] = relu1(a[i]); break;
        case SH_PW_GELU: for (int64_t i = 0; i < len; i++) d[i] = sh_gelu_erf_ref(a[i]); break;
        case SH_PW_EXP: for (int64_t i = 0; i < len; i++) d[i] = expf(a[i]); break;
        case SH_PW_LOG: for (int64_t i = 0; i < len; i++) d[i] = logf(a[i]); break;
        default: break;
        }
        rd[t] = d;
        sp = t + 1;
      }
      if (rd[0] != yr + c0) memcpy(yr + c0, rd[0], (size_t)len * sizeof(float));
    }
  }
}

#if defined(__x86_64__)
#define PW_AVX2 __attribute__((target("avx2,fma")))

#define PW_LOOP(expr)                                                                         \
  for (int64_t q = 0; q < nv; q++) {                                                          \
    __m256 x = _mm256_loadu_ps(a + 8 * q);                                                    \
    _mm256_storeu_ps(d + 8 * q, expr);                                                        \
  }
#define PW_LOOP2(fn)                                                                          \
  for (int64_t q = 0; q < nv; q++)                                                            \
    _mm256_storeu_ps(d + 8 * q, fn(_mm256_loadu_ps(a + 8 * q), _mm256_loadu_ps(b + 8 * q)));

/* AVX2+FMA: each stack slot holds a chunk of PW_CH floats; a leaf chunk is
 * read in place (copied, zero-padded, only for the row's last partial
 * vector); slot 0 is the output row itself when the chunk is whole vectors. */
PW_AVX2 static void pw_rows_avx2(const pw_job *j, int64_t r0, int64_t r1) {
  const sh_pw_prog *p = j->p;
  float buf[SH_PW_MAX_STACK][PW_CH] __attribute__((aligned(32)));
  int64_t row_bytes = j->n * (int64_t)sizeof(float);
  for (int64_t r = r0; r < r1; r++) {
    const float *lr[SH_PW_MAX_LEAVES];
    for (int k = 0; k < p->n_leaves; k++) lr[k] = arg_row(&j->a[k], r);
    float *yr = out_row(&j->y, r);
    if (r + 1 < r1) { /* the next row's leaves and outputs: scattered rows defeat the prefetchers */
      for (int k = 0; k < p->n_leaves; k++) {
        if (j->a[k].col_bc || j->a[k].row_bc) continue;
        const char *q = (const char *)arg_row(&j->a[k], r + 1);
        for (int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(q + b, 0, 3);
      }
      const char *q = (const char *)out_row(&j->y, r + 1);
      for (int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(q + b, 1, 3);
      for (int s = 0; s < p->n_side; s++) {
        q = (const char *)out_row(&j->s[s], r + 1);
        for (int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(q + b, 1, 3);
      }
    }
    for (int64_t c0 = 0; c0 < j->n; c0 += PW_CH) {
      int64_t len = j->n - c0 < PW_CH ? j->n - c0 : PW_CH, nv = (len + 7) >> 3;
      bool whole = (len & 7) == 0;
      const float *rd[SH_PW_MAX_STACK];
      int sp = 0;
      for (int pc = 0; pc < p->n_code; pc++) {
        int op = p->op[pc], arg = p->arg[pc];
        if (op == SH_PW_LOAD) {
          if (j->a[arg].col_bc) {
            __m256 v = _mm256_set1_ps(lr[arg][0]);
            for (int64_t q = 0; q < nv; q++) _mm256_store_ps(buf[sp] + 8 * q, v);
            rd[sp] = buf[sp];
          } else if (whole) {
            rd[sp] = lr[arg] + c0;
          } else {
            memcpy(buf[sp], lr[arg] + c0, (size_t)len * sizeof(float));
            memset(buf[sp] + len, 0, (size_t)(nv * 8 - len) * sizeof(float));
            rd[sp] = buf[sp];
          }
          sp++;
          continue;
        }
        if (op == SH_PW_STORE) {
          memcpy(out_row(&j->s[arg], r) + c0, rd[sp - 1], (size_t)len * sizeof(float));
          continue;
        }
        bool bin = op >= SH_PW_ADD && op <= SH_PW_DIV;
        int t = bin ? sp - 2 : sp - 1;
        float *d = t == 0 && whole ? yr + c0 : buf[t];
        const float *a = rd[t], *b = bin ? rd[t + 1] : NULL;
        switch (op) {
        case SH_PW_ADD: PW_LOOP2(_mm256_add_ps) break;
        case SH_PW_SUB: PW_LOOP2(_mm256_sub_ps) break;
        case SH_PW_MUL: PW_LOOP2(_mm256_mul_ps) break;
        case SH_PW_DIV: PW_LOOP2(_mm256_div_ps) break;
        case SH_PW_SCALE: {
          __m256 k = _mm256_set1_ps(p->k[arg]);
          PW_LOOP(_mm256_mul_ps(x, k))
          break;
        }
        case SH_PW_TANH: PW_LOOP(sh_tanh_avx2(x)) break;
        case SH_PW_SIGMOID: PW_LOOP(sh_sigmoid_avx2(x)) break;
        case SH_PW_RELU: PW_LOOP(_mm256_max_ps(_mm256_setzero_ps(), x)) break;
        case SH_PW_GELU: PW_LOOP(sh_gelu_erf_avx2(x)) break;
        case SH_PW_EXP: PW_LOOP(sh_exp_avx2(x)) break;
        case SH_PW_LOG: PW_LOOP(sh_log_avx2(x)) break;
        default: break;
        }
        rd[t] = d;
        sp = t + 1;
      }
      if (rd[0] != yr + c0) memcpy(yr + c0, rd[0], (size_t)len * sizeof(float));
    }
  }
}
#undef PW_LOOP
#undef PW_LOOP2
#endif

static void pw_range(const pw_job *j, int64_t r0, int64_t r1) {
#if defined(__x86_64__)
  if (j->simd) {
    pw_rows_avx2(j, r0, r1);
    return;
  }
#endif
  pw_rows_scalar(j, r0, r1);
}

static void pw_task(void *arg, int64_t task, int tid) {
  const pw_job *j = arg;
  (void)tid;
  int64_t r0 = j->m * task / j->tasks, r1 = j->m * (task + 1) / j->tasks;
  if (r0 < r1) pw_range(j, r0, r1);
}

sheaf_status sh_exec_pw(sheaf_graph *g, const uint32_t *ids, uint32_t n, int64_t m) {
  const sh_node *n0 = &g->nodes[ids[0]];
  const sh_pw_prog *p = &g->progs[n0->p0];
  uint32_t mask = (uint32_t)g->sigs[n0->sig].key.w[0], nl = p->n_leaves;
  int64_t cols = n0->cols;
  pw_job j;
  memset(&j, 0, sizeof j);
  j.p = p;
  j.m = m;
  j.n = cols;
#if defined(__x86_64__)
  j.simd = g->isa != SHEAF_ISA_SCALAR && sheaf_cpu_isa_host() >= SHEAF_ISA_AVX2;
#endif
  uint32_t nv = p->n_slots;
  sh_gemm_in slot[SH_PW_MAX_LEAVES];
  bool same[SH_PW_MAX_LEAVES];
  const float **rp[SH_PW_MAX_LEAVES];
  for (uint32_t v = 0; v < nv; v++) {
    rp[v] = sh_arena_alloc(&g->scratch, (size_t)m * sizeof *rp[v]);
    if (!rp[v]) return SHEAF_ERR_NOMEM;
  }
  int64_t r = 0;
  for (uint32_t i = 0; i < n; i++) { /* row pointers of each slot (a one-row slot repeats) */
    const sh_node *nd = &g->nodes[ids[i]];
    for (uint32_t v = 0; v < nv; v++) {
      uint32_t x = g->pwl[nd->aux + v];
      const float *val = g->nodes[x].val;
      if (!val && !(val = sh_graph_val(g, x))) return g->status ? g->status : SHEAF_ERR_INTERNAL;
      const sh_node *xn = &g->nodes[x];
      int64_t ld = xn->rows == 1 ? 0 : xn->ld;
      for (int32_t q = 0; q < nd->rows; q++) rp[v][r + q] = val + q * ld;
    }
    r += nd->rows;
  }
  for (uint32_t v = 0; v < nv; v++) slot[v] = sh_exec_operand(g, rp[v], m, 1, &same[v]);
  for (uint32_t k = 0; k < nl; k++) {
    j.a[k].in = slot[p->slot[k]];
    j.a[k].off = p->off[k];
    j.a[k].row_bc = same[p->slot[k]];
    j.a[k].col_bc = mask >> k & 1;
  }
  float *out = sh_exec_out_block(g, ids, n, m, cols);
  if (!out) return SHEAF_ERR_NOMEM;
  j.y = (sh_gemm_out){NULL, out, cols};
  for (uint32_t s = 0; s < p->n_side; s++) {
    float *blk = sh_arena_alloc(&g->data, (size_t)m * (size_t)cols * sizeof(float));
    if (!blk) return SHEAF_ERR_NOMEM;
    int64_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
      const sh_node *nd = &g->nodes[ids[i]];
      sh_node *sn = &g->nodes[g->pwl[nd->aux + nv + s]];
      sn->val = blk + off * cols;
      sn->ld = (int32_t)cols;
      off += nd->rows;
    }
    j.s[s] = (sh_gemm_out){NULL, blk, cols};
  }
  uint64_t t0 = sheaf_time_ns();
  /* split rows over the pool when each thread gets a few microseconds of
   * work (about one vector op per element and instruction) */
  if (g->threads > 1 && m >= 2 && m * cols * p->n_code >= 32768) {
    j.tasks = m < 4 * g->threads ? m : 4 * g->threads;
    sh_pool_run(g->ctx->pool, j.tasks, pw_task, &j, g->threads);
  } else {
    pw_range(&j, 0, m);
  }
  g->stats.ns_kernels += sheaf_time_ns() - t0;
  for (uint32_t s = 0; s < p->n_side; s++)
    for (uint32_t i = 0; i < n; i++) {
      const sh_node *nd = &g->nodes[ids[i]];
      g->nodes[g->pwl[nd->aux + nv + s]].flags |= SH_NODE_DONE;
    }
  uint64_t ops = 0;
  for (int pc = 0; pc < p->n_code; pc++) ops += p->op[pc] != SH_PW_LOAD && p->op[pc] != SH_PW_STORE;
  g->stats.flops += ops * (uint64_t)m * (uint64_t)cols;
  return SHEAF_OK;
}
