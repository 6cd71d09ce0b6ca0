/*
 * kernel_call.c — a generated kernel as an op of the batching runtime
 * (sheaf_kernel_call, docs/CODEGEN.md "Batched use"). The builder binds
 * the kernel's sizes from the input nodes' shapes (range inference gives
 * the output's shape) and appends a KCALL node pointing to the kernel's
 * sh_kcall_desc; the policies bucket KCALL nodes by kernel alone (sig.c),
 * so calls whose sizes differ share a batch. A batch runs as ONE call of
 * the kernel's generated batch loop (sk_batch_fn): per-instance sizes, and
 * each argument in one of the runtime's modes — one pointer for all
 * instances (a parameter passed once), evenly spaced (contiguous rows), or
 * a row-pointer array (gathered inputs, no copy). A kernel whose calls
 * differ only in a row size (kernel_rows.c: `x: f32[N, D]` -> `f32[N, F]`
 * with rows independent) runs each group of calls that agree on the other
 * sizes and non-row inputs (the weights: a bucket may hold two layers')
 * as one call of the instance-level entry over the stacked rows
 * (contiguous rows read in place, others gathered), so 64 calls of an FFN
 * on vectors are one GEMM-like call with M = 64. Packed weights and the
 * generated code's temporaries come from copies the kernel keeps across
 * batches (kernel_api.c: sh_kernel_call_weight, sh_kernel_abi).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "codegen/kernel_api.h"

#define KC_MAX_IN 64

/* The kernel's shape of input or output tensor t under sizes, as "[2, 3]". */
static const char *kshape(const sh_kernel *k, int t, const int64_t *sizes, char *buf, size_t cap) {
  const sh_ktensor *kt = &k->tensors[t];
  size_t len = (size_t)snprintf(buf, cap, "[");
  for (int d = 0; d < kt->rank && len < cap; d++)
    len += (size_t)snprintf(buf + len, cap - len, "%s%lld", d ? ", " : "",
                            (long long)sh_lower_aff(&kt->dims[d].aff, sizes));
  if (len < cap) snprintf(buf + len, cap - len, "]");
  return buf;
}

/* Which kernels the runtime can call: f32 inputs of rank 1 or 2, one f32
 * output of rank 1 or 2, nothing ragged. NULL when k is one, else why not. */
static const char *why_not(const sheaf_kernel *K, char *buf, size_t cap) {
  const sh_kernel *k = sh_kernel_of(K);
  const sh_lower_info *info = sh_kernel_info(K);
  if (k->n_inputs > KC_MAX_IN) return snprintf(buf, cap, "it has over %d inputs", KC_MAX_IN), buf;
  for (int i = 0; i < k->n_inputs; i++) {
    const sh_ktensor *t = &k->tensors[i];
    if (t->dtype != SH_KDTYPE_F32 || t->rank < 1 || t->rank > 2 || t->ragged_outer >= 0) {
      snprintf(buf, cap, "its input '%s' is %s of rank %d%s (a graph passes f32 vectors and matrices)",
               t->name, t->dtype == SH_KDTYPE_I32 ? "i32" : "f32", t->rank, t->ragged_outer >= 0 ? ", ragged" : "");
      return buf;
    }
  }
  if (k->n_outputs != 1)
    return snprintf(buf, cap, "it has %d outputs (a graph node holds one)", k->n_outputs), buf;
  const sh_ktensor *o = &k->tensors[k->n_inputs];
  if (o->rank < 1 || o->rank > 2 || o->ragged_outer >= 0)
    return snprintf(buf, cap, "its output '%s' has rank %d (a graph holds vectors and matrices)", o->name, o->rank),
           buf;
  if (info->n_scratch || info->n_ragged) return snprintf(buf, cap, "it has ragged tensors"), buf;
  return NULL;
}

/* Shape of node x as the kernel sees it: rank 1 [cols], rank 2 [rows, cols]. */
static int64_t node_dim(const sh_node *x, int d) { return x->rank == 1 ? x->cols : d == 0 ? x->rows : x->cols; }

/* Binds the sizes from the input nodes (each size is a whole dimension of
 * an input: sh_ksize). */
static void bind_sizes(const sheaf_graph *g, const sh_kernel *k, const uint32_t *in, int64_t *sizes) {
  for (int s = 0; s < k->n_sizes; s++)
    sizes[s] = node_dim(&g->store.nodes[in[k->sizes[s].tensor]], k->sizes[s].dim);
}

SHEAF_API sheaf_expr sheaf_kernel_call(sheaf_graph *g, sheaf_kernel *K, int n_in, const sheaf_expr *ins) {
  static const char op[] = "sheaf_kernel_call";
  if (!sh_build_enter(g)) return SH_NULL_EXPR;
  if (!K) {
    sh_graph_fail(g, SHEAF_ERR_INVALID_ARG, "%s: k is NULL", op);
    return SH_NULL_EXPR;
  }
  const sh_kernel *k = sh_kernel_of(K);
  char why[256];
  if (sh_kernel_ctx(K) != g->ctx) {
    sh_graph_fail(g, SHEAF_ERR_INVALID_ARG, "%s: kernel '%s' was compiled on another context", op, k->name);
    return SH_NULL_EXPR;
  }
  if (why_not(K, why, sizeof why)) {
    sh_graph_fail(g, SHEAF_ERR_UNSUPPORTED, "%s: kernel '%s' cannot be a graph op: %s", op, k->name, why);
    return SH_NULL_EXPR;
  }
  if (n_in != k->n_inputs || (!ins && n_in)) {
    sh_graph_fail(g, SHEAF_ERR_INVALID_ARG, "%s: kernel '%s' takes %d input%s, not %d%s", op, k->name, k->n_inputs,
                  k->n_inputs == 1 ? "" : "s", n_in, ins || !n_in ? "" : " (ins is NULL)");
    return SH_NULL_EXPR;
  }
  uint32_t in[KC_MAX_IN];
  for (int i = 0; i < n_in; i++) {
    if (sh_build_check(g, ins[i], op, i + 1)) return SH_NULL_EXPR;
    in[i] = ins[i].node;
  }
  int64_t sizes[KC_MAX_IN * 2 + 1]; /* each size is a dimension of an input */
  bind_sizes(g, k, in, sizes);
  for (int i = 0; i < n_in; i++) {
    const sh_node *x = &g->store.nodes[in[i]];
    const sh_ktensor *t = &k->tensors[i];
    bool ok = x->rank == t->rank;
    for (int d = 0; ok && d < t->rank; d++) ok = node_dim(x, d) == sh_lower_aff(&t->dims[d].aff, sizes);
    if (!ok) {
      char got[64], want[160];
      sh_graph_fail(g, SHEAF_ERR_SHAPE, "%s: kernel '%s': argument %d ('%s') has shape %s, but the kernel needs %s",
                    op, k->name, i + 1, t->name, sh_node_shape_str(x, got, sizeof got),
                    kshape(k, i, sizes, want, sizeof want));
      return SH_NULL_EXPR;
    }
  }
  const sh_ktensor *o = &k->tensors[k->n_inputs];
  int64_t od[2] = {1, 1};
  for (int d = 0; d < o->rank; d++) {
    od[d] = sh_lower_aff(&o->dims[d].aff, sizes);
    if (od[d] < 1 || od[d] > INT32_MAX) {
      char s[160];
      sh_graph_fail(g, SHEAF_ERR_SHAPE, "%s: kernel '%s': these inputs make its output '%s' %s", op, k->name,
                    o->name, kshape(k, k->n_inputs, sizes, s, sizeof s));
      return SH_NULL_EXPR;
    }
  }
  uint32_t id = sh_node_new(g, SH_OP_KCALL, in, n_in);
  if (id == SH_NONE) return SH_NULL_EXPR;
  sh_node *n = &g->store.nodes[id];
  n->rank = (uint8_t)o->rank;
  n->rows = o->rank == 2 ? (int32_t)od[0] : 1;
  n->cols = (int32_t)(o->rank == 2 ? od[1] : od[0]);
  n->ld = n->cols;
  n->kcall = sh_kernel_call_desc(K);
  return sh_build_finish(g, id);
}

/* Argument j's mode over the batch from its per-instance pointers p[0..n):
 * one pointer (stride 0), evenly spaced (stride), else the array itself. */
static sk_barg mode_of(void **p, uint32_t n) {
  char *p0 = p[0];
  int64_t stride = n > 1 ? (char *)p[1] - p0 : 0;
  for (uint32_t i = 2; i < n; i++)
    if ((char *)p[i] - (char *)p[i - 1] != stride) return (sk_barg){NULL, p, 0};
  return (sk_barg){p0, NULL, stride};
}

/* Runs the batch as one call over stacked rows (see the top) when it can:
 * *done false otherwise. ptr[j * n + i]: argument j of instance i. */
static sheaf_status run_rows(sheaf_graph *g, sheaf_kernel *K, uint32_t n, const int64_t *sizes, void **ptr,
                             bool *done) {
  const sh_kernel *k = sh_kernel_of(K);
  int rs = sh_kernel_row_size(k), ns = k->n_sizes, n_args = k->n_inputs + 1;
  *done = false;
  if (rs < 0 || n < 2 || sh_kernel_info(K)->n_args != n_args) return SHEAF_OK;
  for (uint32_t i = 1; i < n; i++)
    for (int s = 0; s < ns; s++)
      if (s != rs && sizes[(size_t)i * ns + s] != sizes[s]) return SHEAF_OK;
  int64_t msizes[KC_MAX_IN * 2 + 1];
  memcpy(msizes, sizes, sizeof(int64_t) * (size_t)ns);
  int64_t total = 0;
  for (uint32_t i = 0; i < n; i++) total += sizes[(size_t)i * ns + rs];
  msizes[rs] = total;
  sk_arg args[KC_MAX_IN + 1];
  memset(args, 0, sizeof args);
  for (int j = 0; j < n_args; j++) {
    void **p = ptr + (size_t)j * n;
    const sh_ktensor *t = &k->tensors[j];
    if (t->dims[0].aff.n != 1 || t->dims[0].aff.t[0].size != rs) { /* not a row tensor: passed once */
      for (uint32_t i = 1; i < n; i++)
        if (p[i] != p[0]) return SHEAF_OK;
      args[j].data = p[0];
      continue;
    }
    size_t row = 1; /* floats per row */
    for (int dd = 1; dd < t->rank; dd++) row *= (size_t)sh_lower_aff(&t->dims[dd].aff, sizes);
    bool even = true;
    for (uint32_t i = 1; i < n && even; i++)
      even = (float *)p[i] == (float *)p[i - 1] + row * (size_t)sizes[(size_t)(i - 1) * ns + rs];
    if (even) {
      args[j].data = p[0];
      continue;
    }
    if (j == k->n_inputs) return SHEAF_OK; /* (the output block is always contiguous) */
    float *c = sh_arena_alloc(&g->work.scratch, sizeof(float) * row * (size_t)total);
    if (!c) return SHEAF_ERR_NOMEM;
    size_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
      size_t m = row * (size_t)sizes[(size_t)i * ns + rs];
      memcpy(c + off, p[i], sizeof(float) * m);
      off += m;
    }
    g->instr.stats.bytes_copied += sizeof(float) * off;
    args[j].data = c;
  }
  sk_abi abi;
  sh_kernel_abi(K, g->threads, &abi);
  *done = true;
  if (sh_kernel_entry_fn(K)(&abi, msizes, args) != 0)
    return sh_fail(g->ctx, SHEAF_ERR_NOMEM, "kernel '%s': a temporary could not be allocated", k->name);
  return SHEAF_OK;
}

/* The weights the kernel reads packed (kernel_api.c, "Weights" in
 * docs/CODEGEN.md): each instance's pointer replaced by the packed copy.
 * The packed form depends on the weight alone (pointer and shape: the key
 * of the kernel's kept copies), so instances passing the same weight share
 * one copy whatever their other sizes (a sentence's row count): a small
 * table per input finds it. A parameter's copy is kept by the kernel across
 * batches, keyed on its version (sh_kernel_call_weight: several per kernel,
 * so layers calling it with their own weights each keep theirs); held[]:
 * the kept copies this batch took, released after the call. */
#define KC_SHARED 8
typedef struct kc_shared {
  const void *src;
  int64_t d0, d1;
  void *packed;
} kc_shared;
static sheaf_status pack_weights(sheaf_graph *g, sheaf_kernel *K, const uint32_t *ids, uint32_t n,
                                 const int64_t *sizes, void **ptr, int *held, int *n_held) {
  const sh_kernel *k = sh_kernel_of(K);
  int ns = k->n_sizes;
  for (int j = 0; j < k->n_inputs; j++) {
    if (!sh_kernel_input_packed(K, j)) continue;
    void **p = ptr + (size_t)j * n;
    kc_shared seen[KC_SHARED];
    int n_seen = 0;
    for (uint32_t i = 0; i < n; i++) {
      uint32_t x = g->store.ins[g->store.nodes[ids[i]].in + j];
      const sh_node *xn = &g->store.nodes[x];
      int s = 0;
      while (s < n_seen && !(seen[s].src == p[i] && seen[s].d0 == xn->rows && seen[s].d1 == xn->cols)) s++;
      if (s < n_seen) {
        p[i] = seen[s].packed;
        continue;
      }
      uint64_t version = 0; /* the kept copy only for a parameter: its version says when it changed */
      if (xn->op == SH_OP_PARAM && g->model && xn->param.id >= 1 && xn->param.id <= g->model->n_params)
        version = g->model->params[xn->param.id - 1].version + 1;
      const float *packed;
      int slot;
      const void *src = p[i];
      sheaf_status st = sh_kernel_call_weight(K, j, sizes + (size_t)i * (size_t)ns, src, xn->rows, xn->cols,
                                              version, &g->work.scratch, &packed, &slot);
      if (st) return st;
      if (slot >= 0) held[(*n_held)++] = slot; /* at most once per instance and input: held has n * inputs */
      p[i] = (void *)(uintptr_t)packed;
      if (n_seen < KC_SHARED) seen[n_seen++] = (kc_shared){src, xn->rows, xn->cols, p[i]};
    }
  }
  return SHEAF_OK;
}

/* The stacking groups of a batch (kernel with a row size rs): instances
 * that agree on every size but rs and pass the same non-row inputs (the
 * same weights) can run as one call over their stacked rows. grp[i]: the
 * group of instance i, in order of first appearance; returns the count, or
 * 1 (everything one group, the batch loop's when they differ) when there
 * is no row size or over KC_GROUPS groups. A bucket is keyed by kernel
 * alone, so calls with different weights (two layers, leaf and internal
 * nodes) at one depth share it: each weight's instances still stack. */
#define KC_GROUPS 16
static uint32_t stack_groups(const sh_kernel *k, uint32_t n, const int64_t *sizes, void *const *ptr,
                             uint32_t *grp) {
  int rs = sh_kernel_row_size(k), ns = k->n_sizes;
  uint32_t rep[KC_GROUPS], ng = 0;
  for (uint32_t i = 0; i < n; i++) grp[i] = 0;
  if (rs < 0) return 1;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t gi = 0;
    for (; gi < ng; gi++) {
      uint32_t r = rep[gi];
      bool same = true;
      for (int s = 0; s < ns && same; s++) same = s == rs || sizes[(size_t)i * ns + s] == sizes[(size_t)r * ns + s];
      for (int j = 0; j < k->n_inputs && same; j++) {
        const sh_ktensor *t = &k->tensors[j];
        if (t->dims[0].aff.n != 1 || t->dims[0].aff.t[0].size != rs) same = ptr[(size_t)j * n + i] == ptr[(size_t)j * n + r];
      }
      if (same) break;
    }
    if (gi == ng) {
      if (ng == KC_GROUPS) {
        for (uint32_t q = 0; q < n; q++) grp[q] = 0;
        return 1;
      }
      rep[ng++] = i;
    }
    grp[i] = gi;
  }
  return ng;
}

/* Runs instances sel[0..m) of the batch (sizes and ptr of all n): stacked
 * rows when they can, else the emitted batch loop. */
static sheaf_status run_group(sheaf_graph *g, sheaf_kernel *K, uint32_t n, const int64_t *sizes, void **ptr,
                              const uint32_t *sel, uint32_t m) {
  const sh_kernel *k = sh_kernel_of(K);
  int ns = k->n_sizes, n_args = k->n_inputs + 1;
  const int64_t *gs = sizes;
  void **gp = ptr;
  if (m != n) { /* the group's own arrays */
    int64_t *ss = sh_arena_alloc(&g->work.scratch, sizeof(int64_t) * ((size_t)m * (size_t)ns + 1));
    void **pp = sh_arena_alloc(&g->work.scratch, sizeof(void *) * (size_t)m * (size_t)n_args);
    if (!ss || !pp) return SHEAF_ERR_NOMEM;
    for (uint32_t i = 0; i < m; i++) {
      memcpy(ss + (size_t)i * ns, sizes + (size_t)sel[i] * ns, sizeof(int64_t) * (size_t)ns);
      for (int j = 0; j < n_args; j++) pp[(size_t)j * m + i] = ptr[(size_t)j * n + sel[i]];
    }
    gs = ss, gp = pp;
  }
  bool done = false;
  sheaf_status st = run_rows(g, K, m, gs, gp, &done);
  if (st || done) return st;
  sk_barg args[KC_MAX_IN + 1];
  for (int j = 0; j < n_args; j++) args[j] = mode_of(gp + (size_t)j * m, m);
  sk_abi abi;
  sh_kernel_abi(K, g->threads, &abi);
  if (sh_kernel_batch_fn(K)(&abi, (int64_t)m, gs, args) != 0)
    return sh_fail(g->ctx, SHEAF_ERR_NOMEM, "kernel '%s': a temporary could not be allocated", k->name);
  return SHEAF_OK;
}

/* The tuned variant of K for this batch (sh_kernel_pick): at the sizes of
 * the one call the batch stacks into when its instances differ only in the
 * row size (run_rows), else at the first instance's. */
static sheaf_status pick_tuned(sheaf_graph *g, sheaf_kernel *K, const uint32_t *ids, uint32_t n,
                               const sheaf_kernel **out) {
  const sh_kernel *k = sh_kernel_of(K);
  int ns = k->n_sizes, rs = sh_kernel_row_size(k);
  int64_t first[KC_MAX_IN * 2 + 1], cur[KC_MAX_IN * 2 + 1];
  bind_sizes(g, k, &g->store.ins[g->store.nodes[ids[0]].in], first);
  bool stack = rs >= 0;
  int64_t total = rs >= 0 ? first[rs] : 0;
  for (uint32_t i = 1; i < n && stack; i++) {
    bind_sizes(g, k, &g->store.ins[g->store.nodes[ids[i]].in], cur);
    for (int s = 0; s < ns && stack; s++) stack = s == rs || cur[s] == first[s];
    total += cur[rs];
  }
  if (stack && n > 1) first[rs] = total;
  sheaf_kernel *V;
  sheaf_status st = sh_kernel_pick(K, first, &V);
  *out = V;
  return st;
}

sheaf_status sh_kcall_run(sheaf_graph *g, const sh_kcall_desc *d, const uint32_t *ids, uint32_t n) {
  const sheaf_kernel *K = d->user;
  if (sh_kernel_n_tuned(K)) { /* a tuned class: its variant (by the stacked rows' sizes when they stack) */
    sheaf_status st = pick_tuned(g, d->user, ids, n, &K);
    if (st) return st;
  }
  const sh_kernel *k = sh_kernel_of(K);
  int n_in = k->n_inputs, n_args = n_in + 1;
  int ns = k->n_sizes;
  sh_arena *scr = &g->work.scratch;
  int64_t *sizes = sh_arena_alloc(scr, sizeof(int64_t) * ((size_t)n * (size_t)ns + 1));
  void **ptr = sh_arena_alloc(scr, sizeof(void *) * (size_t)n * (size_t)n_args);
  uint32_t *grp = sh_arena_alloc(scr, sizeof(uint32_t) * (size_t)n * 2), *sel = grp ? grp + n : NULL;
  if (!sizes || !ptr || !grp) return SHEAF_ERR_NOMEM;
  for (uint32_t i = 0; i < n; i++) {
    const sh_node *nd = &g->store.nodes[ids[i]];
    bind_sizes(g, k, &g->store.ins[nd->in], sizes + (size_t)i * (size_t)ns);
  }
  for (int j = 0; j < n_in; j++)
    for (uint32_t i = 0; i < n; i++) {
      uint32_t x = g->store.ins[g->store.nodes[ids[i]].in + j];
      float *v = sh_graph_val(g, x);
      if (!v) return g->status ? g->status : SHEAF_ERR_NOMEM;
      const sh_node *xn = &g->store.nodes[x];
      if (xn->rows > 1 && xn->ld != xn->cols) { /* a strided view: the kernel reads packed rows */
        float *c = sh_arena_alloc(scr, sizeof(float) * (size_t)xn->rows * (size_t)xn->cols);
        if (!c) return SHEAF_ERR_NOMEM;
        for (int32_t r = 0; r < xn->rows; r++)
          memcpy(c + (size_t)r * (size_t)xn->cols, v + (size_t)r * (size_t)xn->ld, sizeof(float) * (size_t)xn->cols);
        v = c;
      }
      ptr[(size_t)j * n + i] = v;
    }
  /* the outputs: one block, group after group (each group's rows contiguous;
   * one group, the usual case: instance order) */
  uint32_t ng = stack_groups(k, n, sizes, ptr, grp), *first = NULL;
  if (ng > 1) {
    first = sh_arena_alloc(scr, sizeof(uint32_t) * (ng + 1));
    if (!first) return SHEAF_ERR_NOMEM;
    memset(first, 0, sizeof(uint32_t) * (ng + 1));
    for (uint32_t i = 0; i < n; i++) first[grp[i] + 1]++;
    for (uint32_t q = 0; q < ng; q++) first[q + 1] += first[q];
    uint32_t fill[KC_GROUPS];
    memcpy(fill, first, sizeof(uint32_t) * ng);
    for (uint32_t i = 0; i < n; i++) sel[fill[grp[i]]++] = i;
  } else {
    for (uint32_t i = 0; i < n; i++) sel[i] = i;
  }
  size_t total = 0;
  for (uint32_t i = 0; i < n; i++) total += (size_t)g->store.nodes[ids[i]].rows * (size_t)g->store.nodes[ids[i]].cols;
  float *blk = sh_arena_alloc(&g->store.data, sizeof(float) * (total ? total : 1));
  if (!blk) return SHEAF_ERR_NOMEM;
  size_t off = 0;
  for (uint32_t q = 0; q < n; q++) {
    sh_node *nd = &g->store.nodes[ids[sel[q]]];
    nd->val = blk + off;
    nd->ld = nd->cols;
    ptr[(size_t)n_in * n + sel[q]] = nd->val;
    off += (size_t)nd->rows * (size_t)nd->cols;
  }
  int *held = sh_arena_alloc(scr, sizeof(int) * (size_t)n * (size_t)n_in + 1), n_held = 0;
  if (!held) return SHEAF_ERR_NOMEM;
  sheaf_kernel *KK = (sheaf_kernel *)(uintptr_t)K;
  sheaf_status st = pack_weights(g, KK, ids, n, sizes, ptr, held, &n_held);
  for (uint32_t q = 0; q < ng && !st; q++)
    st = ng > 1 ? run_group(g, KK, n, sizes, ptr, sel + first[q], first[q + 1] - first[q])
                : run_group(g, KK, n, sizes, ptr, sel, n);
  for (int h = 0; h < n_held; h++) sh_kernel_call_weight_put(KK, held[h]);
  return st;
}
