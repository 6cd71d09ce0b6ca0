/*
 * graph.c — a graph's lifetime (create, reset, free), its first-error rule,
 * flush (dispatch to the policy, time accounting), reading values (views
 * resolved on demand: slices, concats, the outputs the executor sets), and
 * the policy names.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "base/pool.h"
#include "runtime/runtime.h"
#include "runtime/fiber_run.h"

static atomic_uint_least32_t g_graph_tags = 0;

sheaf_status sh_grow(sheaf_ctx *ctx, void **ptr, uint32_t *cap, uint32_t need, size_t elem) {
  if (need <= *cap) return SHEAF_OK;
  uint64_t nc = *cap ? *cap : 16;
  while (nc < need) nc *= 2;
  if (nc > UINT32_MAX) {
    if (need == UINT32_MAX) return sh_fail(ctx, SHEAF_ERR_NOMEM, "out of memory: too many items");
    nc = UINT32_MAX;
  }
  void *p = sh_realloc(ctx, *ptr, (size_t)*cap * elem, (size_t)nc * elem);
  if (!p) return SHEAF_ERR_NOMEM;
  memset((char *)p + (size_t)*cap * elem, 0, (size_t)(nc - *cap) * elem);
  *ptr = p;
  *cap = (uint32_t)nc;
  return SHEAF_OK;
}

sheaf_status sh_graph_fail(sheaf_graph *g, sheaf_status st, const char *fmt, ...) {
  if (g->status) return g->status; /* the first error stays */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g->err, sizeof g->err, fmt, ap);
  va_end(ap);
  g->status = st;
  return sh_fail(g->ctx, st, "%s", g->err);
}

/* sh_graph_fail for the API (the first-error rule stays there): also takes a
 * NULL graph, SHEAF_OK and a NULL format. */
sheaf_status sheaf_graph_fail(sheaf_graph *g, sheaf_status st, const char *fmt, ...) {
  if (!g) return SHEAF_ERR_INVALID_ARG;
  char msg[sizeof g->err];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt ? fmt : "(no message)", ap);
  va_end(ap);
  return sh_graph_fail(g, st == SHEAF_OK ? SHEAF_ERR_INVALID_ARG : st, "%s", msg);
}

/* Re-reports the sticky error as the context's last error. */
sheaf_status sheaf_graph_error_context(sheaf_graph *g, const char *fmt, ...) {
  if (!g) return SHEAF_ERR_INVALID_ARG;
  if (!g->status || !fmt) return g->status;
  char pre[256], old[sizeof g->err];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pre, sizeof pre, fmt, ap);
  va_end(ap);
  memcpy(old, g->err, sizeof old);
  size_t n = strlen(pre), m = strlen(old);
  if (n > sizeof g->err - 3) n = sizeof g->err - 3;
  if (m > sizeof g->err - 3 - n) m = sizeof g->err - 3 - n; /* "pre: old", cut to fit */
  memcpy(g->err, pre, n);
  memcpy(g->err + n, ": ", 2);
  memcpy(g->err + n + 2, old, m);
  g->err[n + 2 + m] = '\0';
  return sh_fail(g->ctx, g->status, "%s", g->err);
}

static sheaf_status sticky(sheaf_graph *g) { return sh_fail(g->ctx, g->status, "%s", g->err); }

/* ------------------------------------------------------------- policies */

static const char *const policy_names[] = {"sheaf", "none", "depth", "agenda"};

const char *sheaf_policy_name(sheaf_policy p) {
  return (unsigned)p < SH_ARRAY_LEN(policy_names) ? policy_names[p] : "?";
}

sheaf_status sheaf_policy_parse(sheaf_ctx *ctx, const char *name, sheaf_policy *out) {
  if (!name) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_policy_parse: name is NULL");
  for (size_t i = 0; i < SH_ARRAY_LEN(policy_names); i++)
    if (strcmp(name, policy_names[i]) == 0) {
      if (out) *out = (sheaf_policy)i;
      return SHEAF_OK;
    }
  return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                 "unknown batching policy '%s' (expected sheaf, none, depth or agenda)", name);
}

/* ------------------------------------------------------------- lifetime */

sheaf_status sheaf_graph_create(sheaf_model *m, const sheaf_graph_opts *opts, sheaf_graph **out) {
  if (!out)
    return m ? sh_fail(m->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_graph_create: out is NULL")
             : SHEAF_ERR_INVALID_ARG;
  *out = NULL;
  if (!m) return SHEAF_ERR_INVALID_ARG;
  sheaf_ctx *ctx = m->ctx;
  sheaf_graph_opts o = {SHEAF_POLICY_SHEAF, 0, NULL};
  if (opts) o = *opts;
  if ((unsigned)o.policy > SHEAF_POLICY_AGENDA)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_graph_create: unknown policy %d",
                   (int)o.policy);
  if (o.trace_path) {
    sheaf_status st = sh_trace_path_check(ctx, "sheaf_graph_create", o.trace_path);
    if (st) return st;
  }
  sheaf_graph *g = sh_calloc(ctx, 1, sizeof *g);
  if (!g) return SHEAF_ERR_NOMEM;
  g->ctx = ctx;
  g->model = m;
  g->policy = o.policy;
  int pt = sheaf_ctx_threads(ctx);
  g->threads = o.threads <= 0 || o.threads > pt ? pt : o.threads;
  g->isa = sheaf_cpu_isa();
  uint32_t t; /* 32-bit ids: a handle is refused by the next 2^32 - 1 graphs created */
  do t = (uint32_t)(atomic_fetch_add(&g_graph_tags, 1) + 1);
  while (t == 0);
  g->tag = t;
  g->gen = 1;
  g->handle = (uint64_t)g->tag << 32 | g->gen;
  sh_arena_init(&g->store.data, ctx, 1u << 20);
  sh_arena_init(&g->work.scratch, ctx, 256u << 10);
  sh_arena_init(&g->train, ctx, 1u << 20); /* src/train's */
  for (int i = 0; i < SH_TRAIN_LANES; i++) sh_arena_init(&g->train_lane[i], ctx, 256u << 10);
  sheaf_status st = sh_gemm_ws_create(ctx, &g->work.gemm_ws[0]);
  if (st == SHEAF_OK) g->work.n_gemm_ws = 1;
  if (st == SHEAF_OK && o.trace_path) {
    g->instr.trace_path = sh_strdup(ctx, o.trace_path);
    if (!g->instr.trace_path) st = SHEAF_ERR_NOMEM;
  }
  if (st) {
    sheaf_graph_free(g);
    return st;
  }
  *out = g;
  return SHEAF_OK;
}

void sheaf_graph_free(sheaf_graph *g) {
  if (!g) return;
  sheaf_ctx *ctx = g->ctx;
  if (g->instr.trace_path) sh_trace_write(g);
  sh_strfree(ctx, g->instr.trace_path);
  sh_free(ctx, g->store.nodes, (size_t)g->store.cap_nodes * sizeof *g->store.nodes);
  sh_free(ctx, g->store.epoch_start, (size_t)g->store.cap_epoch * sizeof *g->store.epoch_start);
  sh_free(ctx, g->store.ins, (size_t)g->store.cap_ins * sizeof *g->store.ins);
  sh_free(ctx, g->affine.range, (size_t)g->affine.cap_range * sizeof *g->affine.range);
  sh_free(ctx, g->affine.node, (size_t)g->affine.cap_node * sizeof *g->affine.node);
  sh_arena_destroy(&g->store.data);
  sh_arena_destroy(&g->work.scratch);
  sh_arena_destroy(&g->train);
  for (int i = 0; i < SH_TRAIN_LANES; i++) sh_arena_destroy(&g->train_lane[i]);
  sh_free(ctx, g->saved.lstm_gates, (size_t)g->saved.cap * sizeof *g->saved.lstm_gates);
  sh_free(ctx, g->work.zeros, (size_t)g->work.n_zeros * sizeof(float));
  sh_sched_sheaf_free(g);
  sh_pw_free(g);
  sh_sigs_free(g);
  for (int i = 0; i < g->work.n_gemm_ws; i++) sh_gemm_ws_free(ctx, g->work.gemm_ws[i]);
  sh_free(ctx, g->instr.ev, (size_t)g->instr.cap_ev * sizeof *g->instr.ev);
  sh_free(ctx, g, sizeof *g);
}

sheaf_status sheaf_graph_reset(sheaf_graph *g) {
  if (!g) return SHEAF_ERR_INVALID_ARG;
  if (g->instr.build_t0)
    g->instr.stats.ns_build += sheaf_time_ns() - g->instr.build_t0 - g->instr.ns_kernels_build;
  g->instr.build_t0 = 0;
  g->instr.ns_kernels_build = 0;
  if (++g->gen == 0) g->gen = 1; /* 2^32 resets before an epoch comes back */
  g->handle = (uint64_t)g->tag << 32 | g->gen;
  g->store.n_nodes = g->store.n_ins = g->store.first_pending = g->store.max_phase = 0;
  g->store.n_epoch = 0;
  g->affine.n_range = g->affine.n_node = 0; /* the side entries are rewritten as nodes are built again */
  sh_pw_clear(g);
  g->status = SHEAF_OK;
  g->err[0] = '\0';
  sh_sched_sheaf_clear(g);
  /* next time, one chunk holds what this round needed: no allocation */
  if (g->store.data.used_total > g->store.data.chunk_size)
    g->store.data.chunk_size =
        sh_align_up(g->store.data.used_total + g->store.data.used_total / 8, SH_ARENA_ALIGN);
  sh_arena_reset(&g->store.data);
  sh_arena_reset(&g->work.scratch);
  return SHEAF_OK;
}

void sheaf_graph_phase(sheaf_graph *g, int phase) {
  if (!g) return;
  if (phase < 0 || phase > SH_MAX_PHASE) {
    sh_graph_fail(g, SHEAF_ERR_INVALID_ARG, "sheaf_graph_phase: phase %d is outside [0, %d]", phase,
                  SH_MAX_PHASE);
    return;
  }
  g->store.phase = phase;
}

sheaf_status sheaf_graph_status(const sheaf_graph *g) {
  return g ? g->status : SHEAF_ERR_INVALID_ARG;
}

/* --------------------------------------------------------------- flush */

sheaf_status sheaf_graph_flush(sheaf_graph *g) {
  if (!g) return SHEAF_ERR_INVALID_ARG;
  if (g->status) return sticky(g);
  if (g->store.first_pending == g->store.n_nodes) return SHEAF_OK;
  uint64_t t0 = sheaf_time_ns();
  if (g->instr.build_t0) g->instr.stats.ns_build += t0 - g->instr.build_t0 - g->instr.ns_kernels_build;
  g->instr.build_t0 = 0;
  g->instr.ns_kernels_build = 0;
  uint64_t k0 = g->instr.stats.ns_kernels;
  sheaf_status st = SHEAF_OK;
  switch (g->policy) {
  case SHEAF_POLICY_SHEAF: st = sh_sched_sheaf_flush(g); break;
  case SHEAF_POLICY_DEPTH: st = sh_sched_depth_flush(g); break;
  case SHEAF_POLICY_AGENDA: st = sh_sched_agenda_flush(g); break;
  case SHEAF_POLICY_NONE: break; /* every kernel ran when it was built */
  }
  sh_sched_sheaf_clear(g);
  if (g->work.scratch.used_total > g->work.scratch.chunk_size)
    g->work.scratch.chunk_size =
        sh_align_up(g->work.scratch.used_total + g->work.scratch.used_total / 8, SH_ARENA_ALIGN);
  sh_arena_reset(&g->work.scratch);
  if (st) {
    char e[SH_ERR_MAX];
    if (!g->status) sh_graph_fail(g, st, "sheaf_graph_flush: %s", sh_last_error_copy(g->ctx, e, sizeof e));
    return sticky(g);
  }
  if (SH_UNLIKELY(g->store.n_epoch == g->store.cap_epoch) &&
      sh_grow(g->ctx, (void **)&g->store.epoch_start, &g->store.cap_epoch, g->store.n_epoch + 1,
              sizeof *g->store.epoch_start))
    return sh_graph_fail(g, SHEAF_ERR_NOMEM, "sheaf_graph_flush: out of memory");
  g->store.epoch_start[g->store.n_epoch++] = g->store.n_nodes;
  g->store.first_pending = g->store.n_nodes;
  g->instr.stats.flushes++;
  uint64_t t1 = sheaf_time_ns();
  g->instr.stats.ns_schedule += (t1 - t0) - (g->instr.stats.ns_kernels - k0);
  return SHEAF_OK;
}

/* --------------------------------------------------------------- values */

/* A stack of node ids for the walks below: on the C stack while small,
 * then on the heap (a chain of views may be as long as the graph). */
typedef struct id_stack {
  uint32_t *v;
  uint32_t n, cap;
  uint32_t local[64];
} id_stack;

static void ids_init(id_stack *s) {
  s->v = s->local;
  s->n = 0;
  s->cap = SH_ARRAY_LEN(s->local);
}

static void ids_free(sheaf_graph *g, id_stack *s) {
  if (s->v != s->local) sh_free(g->ctx, s->v, (size_t)s->cap * sizeof *s->v);
}

static bool ids_push(sheaf_graph *g, id_stack *s, uint32_t id) {
  if (s->n == s->cap) {
    if (s->cap >= UINT32_MAX / 2) return false;
    uint32_t cap = 2 * s->cap;
    uint32_t *v = sh_alloc(g->ctx, (size_t)cap * sizeof *v, 16);
    if (!v) return false;
    memcpy(v, s->v, (size_t)s->n * sizeof *v);
    ids_free(g, s);
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = id;
  return true;
}

/* A node read through a concat: a concat without a value is walked into
 * (its pieces are copied directly: nested concats are not materialized
 * one by one, which would copy a chain quadratically); anything else is a
 * piece. */
static bool walk_into(const sheaf_graph *g, uint32_t id) {
  return g->store.nodes[id].op == SH_OP_CONCAT && !g->store.nodes[id].val;
}

/* Pushes onto `todo` the pieces of concat `id` that have no value yet;
 * returns how many (or -1 when out of memory). */
static int64_t concat_missing(sheaf_graph *g, uint32_t id, id_stack *walk, id_stack *todo) {
  int64_t missing = 0;
  walk->n = 0;
  if (!ids_push(g, walk, id)) return -1;
  while (walk->n) {
    const sh_node *n = &g->store.nodes[walk->v[--walk->n]];
    for (uint32_t i = 0; i < n->n_in; i++) {
      uint32_t p = g->store.ins[n->in + i];
      if (walk_into(g, p)) {
        if (!ids_push(g, walk, p)) return -1;
      } else if (!g->store.nodes[p].val) {
        if (!ids_push(g, todo, p)) return -1;
        missing++;
      }
    }
  }
  return missing;
}

/* Copies concat `id`'s pieces (all with values) into a new block, left to
 * right; false on failure (error recorded). */
static bool materialize_concat(sheaf_graph *g, uint32_t id, id_stack *walk) {
  const sh_node *cn = &g->store.nodes[id];
  int32_t rows = cn->rows, cols = cn->cols;
  size_t bytes = (size_t)rows * (size_t)cols * sizeof(float);
  float *dst = sh_arena_alloc(&g->store.data, bytes);
  if (!dst) {
    sh_graph_fail(g, SHEAF_ERR_NOMEM, "out of memory: %zu bytes for a concat", bytes);
    return false;
  }
  int64_t off = 0;
  walk->n = 0;
  if (!ids_push(g, walk, id)) goto nomem;
  while (walk->n) { /* depth first, left to right: inputs pushed in reverse */
    uint32_t x = walk->v[--walk->n];
    if (x != id && !walk_into(g, x)) {
      const sh_node *pn = &g->store.nodes[x];
      for (int32_t r = 0; r < rows; r++)
        memcpy(dst + (int64_t)r * cols + off, pn->val + (int64_t)r * pn->ld,
               (size_t)pn->cols * sizeof(float));
      off += pn->cols;
      continue;
    }
    const sh_node *n = &g->store.nodes[x];
    for (uint32_t i = n->n_in; i-- > 0;)
      if (!ids_push(g, walk, g->store.ins[n->in + i])) goto nomem;
  }
  g->store.nodes[id].ld = cols;
  g->store.nodes[id].val = dst;
  g->instr.stats.bytes_copied += bytes;
  return true;
nomem:
  sh_graph_fail(g, SHEAF_ERR_NOMEM, "out of memory: reading a concat of %d columns", cols);
  return false;
}
sheaf_status sh_graph_raw_guard(sheaf_graph *g, uint32_t id) {
  uint32_t r = id;
  while (g->store.nodes[r].op == SH_OP_SLICE) r = g->store.ins[g->store.nodes[r].in];
  if (g->store.nodes[r].op != SH_OP_AFFINE || !sh_affine_of(g, r)->val_is_act) return SHEAF_OK;
  sheaf_status st = sh_exec_affine_raw(g, r);
  if (st) return st;
  for (uint32_t s = id; s != r; s = g->store.ins[g->store.nodes[s].in])
    g->store.nodes[s].val = NULL; /* re-resolve */
  return SHEAF_OK;
}

/* sh_graph_val without a value at hand: resolves the views under `id`
 * with explicit stacks (no recursion: chains of slices, reshapes and
 * concats may be as deep as the graph). */
static float *resolve(sheaf_graph *g, uint32_t id) {
  id_stack todo, walk;
  ids_init(&todo);
  ids_init(&walk);
  bool ok = ids_push(g, &todo, id);
  while (ok && todo.n) {
    uint32_t t = todo.v[todo.n - 1];
    sh_node *n = &g->store.nodes[t];
    if (n->val) {
      todo.n--;
      continue;
    }
    uint32_t dep = SH_NONE; /* a view's source without a value yet: resolved first */
    switch (n->op) {
    case SH_OP_SLICE: {
      uint32_t x = g->store.ins[n->in], src = x, off = n->offset;
      const sh_node *xn = &g->store.nodes[x];
      if (xn->op == SH_OP_CONCAT && !xn->val) { /* a slice within one piece: no copy */
        uint32_t at = 0;
        for (uint32_t i = 0; i < xn->n_in; i++) {
          uint32_t p = g->store.ins[xn->in + i];
          uint32_t pc = (uint32_t)g->store.nodes[p].cols;
          if (n->offset >= at && n->offset + (uint32_t)n->cols <= at + pc) {
            src = p;
            off = n->offset - at;
            break;
          }
          at += pc;
        }
      }
      const sh_node *sn = &g->store.nodes[src];
      if (!sn->val) {
        dep = src;
      } else {
        n->ld = sn->ld;
        n->val = sn->val + off;
      }
      break;
    }
    case SH_OP_CONCAT: {
      int64_t missing = concat_missing(g, t, &walk, &todo);
      if (missing < 0) ok = false;
      else if (missing == 0 && !materialize_concat(g, t, &walk)) goto fail;
      break;
    }
    case SH_OP_RESHAPE: {
      uint32_t x = g->store.ins[n->in];
      const sh_node *xn = &g->store.nodes[x];
      if (!xn->val) {
        dep = x;
        break;
      }
      float *v = xn->val;
      if (xn->rows > 1 && xn->ld != xn->cols) { /* strided: copy */
        size_t bytes = (size_t)xn->rows * (size_t)xn->cols * sizeof(float);
        float *c = sh_arena_alloc(&g->store.data, bytes);
        if (!c) {
          sh_graph_fail(g, SHEAF_ERR_NOMEM, "out of memory: %zu bytes for a reshape", bytes);
          goto fail;
        }
        for (int32_t r = 0; r < xn->rows; r++)
          memcpy(c + (int64_t)r * xn->cols, v + (int64_t)r * xn->ld,
                 (size_t)xn->cols * sizeof(float));
        g->instr.stats.bytes_copied += bytes;
        v = c;
      }
      n->ld = n->cols;
      n->val = v;
      break;
    }
    default:
      sh_graph_fail(g, SHEAF_ERR_INTERNAL, "internal error: node %u (%s) has no value", t,
                    sh_op_name(n->op));
      goto fail;
    }
    if (dep != SH_NONE) ok = ids_push(g, &todo, dep);
  }
  if (!ok) sh_graph_fail(g, SHEAF_ERR_NOMEM, "out of memory: resolving the views of node %u", id);
  ids_free(g, &todo);
  ids_free(g, &walk);
  return ok ? g->store.nodes[id].val : NULL;
fail:
  ids_free(g, &todo);
  ids_free(g, &walk);
  return NULL;
}

float *sh_graph_val(sheaf_graph *g, uint32_t id) {
  float *v = g->store.nodes[id].val;
  return v ? v : resolve(g, id);
}
int sheaf_expr_shape(const sheaf_graph *g, sheaf_expr e, int64_t shape[2]) {
  if (!g || e.graph != g->handle || e.node >= g->store.n_nodes || g->store.nodes[e.node].depth != e.depth)
    return 0;
  const sh_node *n = &g->store.nodes[e.node];
  if (!shape) return n->rank; /* the rank alone */
  if (n->rank == 2) {
    shape[0] = n->rows;
    shape[1] = n->cols;
  } else {
    shape[0] = n->cols;
    shape[1] = 1;
  }
  return n->rank;
}

sheaf_status sheaf_value(sheaf_graph *g, sheaf_expr e, sheaf_value_view *out) {
  if (!g) return SHEAF_ERR_INVALID_ARG;
  if (out) memset(out, 0, sizeof *out);
  if (!out) return sh_fail(g->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_value: out is NULL");
  if (g->status) return sticky(g);
  if (e.graph == 0)
    return sh_fail(g->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_value: the expression is null");
  if (e.graph != g->handle || e.node >= g->store.n_nodes || g->store.nodes[e.node].depth != e.depth) {
    bool stale = (uint32_t)(e.graph >> 32) == g->tag;
    return sh_fail(g->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_value: %s",
                   stale ? "the expression was built before sheaf_graph_reset (a stale handle)"
                         : "the expression belongs to another graph (or was built before "
                           "sheaf_graph_reset)");
  }
  if (e.node >= g->store.first_pending) {
    sheaf_status st = sh_fiber_wait(g); /* a runner's fiber waits for the batch's flush */
    if (st) return st;
    if (e.node >= g->store.first_pending && (st = sheaf_graph_flush(g))) return st;
  }
  sheaf_status st = sh_graph_raw_guard(g, e.node);
  if (st) return st;
  if (SH_UNLIKELY(sh_pw_absorbed(g, e.node)) && (st = sh_pw_need(g, e.node)))
    return st; /* fused into its reader: computed now */
  sh_node *n;
  const float *v = sh_graph_val(g, e.node);
  if (!v) return sticky(g);
  n = &g->store.nodes[e.node];
  if (n->rank == 2 && n->rows > 1 && n->ld != n->cols) { /* a strided view: copy */
    size_t bytes = (size_t)n->rows * (size_t)n->cols * sizeof(float);
    float *c = sh_arena_alloc(&g->store.data, bytes);
    if (!c) return sh_graph_fail(g, SHEAF_ERR_NOMEM, "out of memory: %zu bytes", bytes);
    for (int32_t r = 0; r < n->rows; r++)
      memcpy(c + (int64_t)r * n->cols, v + (int64_t)r * n->ld, (size_t)n->cols * sizeof(float));
    v = c;
  }
  out->data = v;
  out->rank = n->rank;
  out->shape[0] = n->rank == 2 ? n->rows : n->cols;
  out->shape[1] = n->rank == 2 ? n->cols : 1;
  return SHEAF_OK;
}
