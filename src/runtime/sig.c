/*
 * sig.c — kernel signatures: the key that decides which nodes may share a
 * batched kernel call (op, output shape, parameters, input widths and the
 * K-split of an affine's input; for a fused pointwise node its interned
 * program and which leaves are broadcast scalars), the graph's table of signatures (kept
 * across resets, with per-kernel statistics and a readable name), and the
 * two ways to find a node's signature: a direct-mapped cache indexed by
 * (op, parameter, width) that policies sheaf and none use at build time, and
 * a hash of the whole key that the DyNet-style policies use at flush.
 */
#include <stdio.h>
#include <string.h>

#include "runtime/runtime.h"

static const char *const op_names[SH_OP_COUNT] = {
#define SH_OP(ID, name, cls, arity, form, act) [SH_OP_##ID] = #name,
#include "kernels/ops.def"
};
static const uint8_t op_arity[SH_OP_COUNT] = {
#define SH_OP(ID, name, cls, arity, form, act) [SH_OP_##ID] = arity,
#include "kernels/ops.def"
};
#define SH_GEMM_ACT_NONE (-1)
static const int8_t op_act[SH_OP_COUNT] = {
#define SH_OP(ID, name, cls, arity, form, act) [SH_OP_##ID] = SH_GEMM_ACT_##act,
#include "kernels/ops.def"
};
#undef SH_GEMM_ACT_NONE

int sh_op_arity(int op) { return op >= 0 && op < SH_OP_COUNT ? op_arity[op] : 0; }
int sh_op_act(int op) { return op >= 0 && op < SH_OP_COUNT ? op_act[op] : -1; }
const char *sh_op_name(int op) { return op >= 0 && op < SH_OP_COUNT ? op_names[op] : "?"; }

/* Bounded: a concat nested `depth` concats deep (each with at least two
 * inputs) lies in a tree of at least depth + 2 pieces, so past depth `max`
 * the pieces cannot fit and the walk stops (a chain acc = concat(acc, x)
 * built in a loop is read whole, materialized, never walked to its end). */
static int pieces(const sheaf_graph *g, uint32_t id, uint32_t *out, int n, int max, int depth) {
  const sh_node *x = &g->store.nodes[id];
  if (x->op != SH_OP_CONCAT) {
    if (n < 0 || n >= max) return -1;
    out[n] = id;
    return n + 1;
  }
  if (depth >= max) return -1;
  for (uint32_t i = 0; i < x->n_in && n >= 0; i++)
    n = pieces(g, g->store.ins[x->in + i], out, n, max, depth + 1);
  return n;
}

int sh_pieces(const sheaf_graph *g, uint32_t id, uint32_t *out, int n, int max) {
  return pieces(g, id, out, n, max, 0);
}

static void key_widths(const sheaf_graph *g, const sh_node *n, int n_x, sh_sig_key *k) {
  uint32_t pc[SH_GEMM_MAX_KSRC];
  int np = 0;
  for (int i = 0; i < n_x && np >= 0; i++)
    np = sh_pieces(g, g->store.ins[n->in + i], pc, np, SH_GEMM_MAX_KSRC);
  if (np < 0) { /* too many pieces: inputs are read whole (concats materialized) */
    k->mat = 1;
    k->n_w = (uint8_t)n_x;
    for (int i = 0; i < n_x; i++) k->w[i] = g->store.nodes[g->store.ins[n->in + i]].cols;
    return;
  }
  k->n_w = (uint8_t)np;
  for (int i = 0; i < np; i++) k->w[i] = g->store.nodes[pc[i]].cols;
}

void sh_sig_key_of(const sheaf_graph *g, const sh_node *n, sh_sig_key *k) {
  memset(k, 0, sizeof *k);
  k->op = n->op;
  k->rank = n->rank;
  k->cols = n->cols;
  const sh_node *a = &g->store.nodes[n->n_in ? g->store.ins[n->in] : 0]; /* views have no key */
  switch (n->op) {
  case SH_OP_AFFINE:
    k->p0 = n->n_in > 1 ? 0x80000000u | n->lin.w : n->lin.w;
    k->p1 = n->lin.b;
    key_widths(g, n, n->n_in, k);
    break;
  case SH_OP_LSTM:
  case SH_OP_TREE_LSTM:
    k->p0 = n->lin.w;
    k->p1 = n->lin.b;
    key_widths(g, n, 1, k);
    break;
  case SH_OP_MATMUL: {
    const sh_node *b = &g->store.nodes[g->store.ins[n->in + 1]];
    k->cols = 0;
    k->w[0] = a->rank, k->w[1] = a->cols, k->w[2] = b->rank, k->w[3] = b->cols;
    break;
  }
  case SH_OP_SUM:
  case SH_OP_MEAN:
  case SH_OP_MAX:
  case SH_OP_PICK:
    k->cols = 0;
    k->rank = a->rank;
    k->w[0] = a->cols;
    break;
  case SH_OP_LAYER_NORM: memcpy(&k->fbits, &n->eps, sizeof k->fbits); break;
  case SH_OP_KCALL: { /* one bucket per kernel, whatever the instances' sizes */
    uint64_t p = (uint64_t)(uintptr_t)n->kcall;
    k->p0 = (uint32_t)p, k->p1 = (uint32_t)(p >> 32);
    k->cols = 0, k->rank = 0;
    break;
  }
  default: break;
  }
}

static uint64_t key_hash(const sh_sig_key *k) {
  uint32_t w[sizeof *k / 4];
  memcpy(w, k, sizeof w);
  uint64_t h = 0x243f6a8885a308d3ull;
  for (size_t i = 0; i < SH_ARRAY_LEN(w); i++) {
    h ^= w[i];
    h *= 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
  }
  return h;
}

static void sig_name(const sheaf_graph *g, const sh_sig_key *k, char *buf, size_t size) {
  sheaf_model *m = g->model;
  const char *op = sh_op_name(k->op);
  if ((k->op == SH_OP_AFFINE || k->op == SH_OP_LSTM || k->op == SH_OP_TREE_LSTM) &&
      !(k->p0 & 0x80000000u)) {
    snprintf(buf, size, "%s %s", op, m->params[k->p0 - 1].name);
  } else if (k->op == SH_OP_AFFINE) {
    pthread_mutex_t *mu = &m->mu; /* stacks may grow in another runner thread */
    pthread_mutex_lock(mu);
    const sh_param_stack *s = &m->stacks[(k->p0 & 0x7fffffffu) - 1];
    size_t len = (size_t)snprintf(buf, size, "%s ", op);
    for (int i = 0; i < s->n && len < size; i++)
      len += (size_t)snprintf(buf + len, size - len, "%s%s", i ? "+" : "",
                              m->params[s->ids[i] - 1].name);
    pthread_mutex_unlock(mu);
  } else if (k->op == SH_OP_FUSED) {
    char prog[128];
    sh_pw_prog_str(&g->pw.progs[k->p0], prog, sizeof prog);
    snprintf(buf, size, "pw %s [%d]", prog, (int)k->cols);
  } else if (k->op == SH_OP_KCALL) {
    const sh_kcall_desc *d = (const sh_kcall_desc *)(uintptr_t)((uint64_t)k->p1 << 32 | k->p0);
    snprintf(buf, size, "kernel %s", d->name);
  } else if (k->op == SH_OP_MATMUL) {
    snprintf(buf, size, "%s [%d]x[%d]", op, (int)k->w[1], (int)k->w[3]);
  } else {
    snprintf(buf, size, "%s [%d]", op, (int)(k->cols ? k->cols : k->w[0]));
  }
}

static sheaf_status table_insert(sheaf_graph *g, uint64_t h, uint32_t sig) {
  if (2 * (g->sigs.n + 1) > g->sigs.table_cap) {
    uint32_t cap = g->sigs.table_cap ? 2 * g->sigs.table_cap : 64;
    uint32_t *t = sh_calloc(g->ctx, cap, sizeof *t);
    if (!t) return SHEAF_ERR_NOMEM;
    for (uint32_t i = 0; i < g->sigs.n; i++) {
      uint32_t j = (uint32_t)key_hash(&g->sigs.at[i].key) & (cap - 1);
      while (t[j]) j = (j + 1) & (cap - 1);
      t[j] = i + 1;
    }
    sh_free(g->ctx, g->sigs.table, g->sigs.table_cap * sizeof *t);
    g->sigs.table = t;
    g->sigs.table_cap = cap;
  }
  uint32_t j = (uint32_t)h & (g->sigs.table_cap - 1);
  while (g->sigs.table[j]) j = (j + 1) & (g->sigs.table_cap - 1);
  g->sigs.table[j] = sig + 1;
  return SHEAF_OK;
}

sheaf_status sh_sig_find_hash(sheaf_graph *g, const sh_sig_key *k, uint32_t *out) {
  uint64_t h = key_hash(k);
  if (g->sigs.table_cap) {
    uint32_t j = (uint32_t)h & (g->sigs.table_cap - 1);
    for (uint32_t s; (s = g->sigs.table[j]) != 0; j = (j + 1) & (g->sigs.table_cap - 1))
      if (memcmp(&g->sigs.at[s - 1].key, k, sizeof *k) == 0) {
        *out = s - 1;
        return SHEAF_OK;
      }
  }
  /* new signature */
  sheaf_status st =
      sh_grow(g->ctx, (void **)&g->sigs.at, &g->sigs.cap, g->sigs.n + 1, sizeof *g->sigs.at);
  if (st) return st;
  char name[160];
  sig_name(g, k, name, sizeof name);
  sh_sig s = {0};
  s.key = *k;
  s.name_size = strlen(name) + 1;
  s.name = sh_alloc(g->ctx, s.name_size, 1);
  if (!s.name) return SHEAF_ERR_NOMEM;
  memcpy(s.name, name, s.name_size);
  st = table_insert(g, h, g->sigs.n);
  if (st) {
    sh_free(g->ctx, s.name, s.name_size);
    return st;
  }
  g->sigs.at[g->sigs.n] = s;
  *out = g->sigs.n++;
  return SHEAF_OK;
}

sheaf_status sh_sig_find_fast(sheaf_graph *g, const sh_sig_key *k, uint32_t *out) {
  uint32_t i = (k->op * 0x9e37u ^ k->p0 * 0x85ebu ^ (uint32_t)k->cols * 0xc2b3u ^
                (uint32_t)k->w[0] * 0x27d5u) &
               255u;
  uint32_t s = g->sigs.cache[i];
  if (s && memcmp(&g->sigs.at[s - 1].key, k, sizeof *k) == 0) {
    *out = s - 1;
    return SHEAF_OK;
  }
  sheaf_status st = sh_sig_find_hash(g, k, out);
  if (st == SHEAF_OK) g->sigs.cache[i] = *out + 1;
  return st;
}

void sh_sigs_free(sheaf_graph *g) {
  for (uint32_t i = 0; i < g->sigs.n; i++) sh_free(g->ctx, g->sigs.at[i].name, g->sigs.at[i].name_size);
  sh_free(g->ctx, g->sigs.at, g->sigs.cap * sizeof *g->sigs.at);
  sh_free(g->ctx, g->sigs.table, g->sigs.table_cap * sizeof(uint32_t));
}
