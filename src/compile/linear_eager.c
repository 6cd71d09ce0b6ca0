/*
 * linear_eager.c — eager children's products in the linearized mode
 * (docs/COMPILER.md, "Eager children's products"). A product of a cat of
 * children's states with a parameter weight, `cat(hl, hr) @ W` in an arm,
 * is the sum of each child's part, `hl @ W[0:H] + hr @ W[H:2H]`. Each part
 * can be computed as soon as its child's level is done, not at the
 * consumer's: this file finds such products (prepare: the arm's eager form
 * reads the parts as inputs, one small GEMM kernel per part), and per run
 * schedules each consumer row's part at a level boundary where that part of
 * W is streamed for other rows anyway (plan: per part, the fewest
 * boundaries that cover every row's window [child's height, consumer's
 * height - 1], the greedy interval stabbing by right ends), then runs each
 * boundary's parts as one kernel call over the rows gathered (until). At
 * batch 1 a level has 1-3 rows, so it reads all of W for very little
 * arithmetic; a binarized tree's chain then needs one half of W a level.
 * The runs that take it: SHEAF_LINEAR_EAGER=1 every run, 0 none, unset the
 * runs whose consumer levels average at most SH_LIN_EAGER_ROWS rows.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "compile/linear_int.h"
#include "codegen/kernel_api.h"
#include "codegen/lir_sched.h"
#include "lang/kernel.h"

#define SH_LIN_MAX_EAGER 16 /* parts (a child's state times its rows of a weight) of a model */
#ifndef SH_LIN_EAGER_ROWS
#define SH_LIN_EAGER_ROWS 8 /* auto: runs whose consumer groups average at most this many rows */
#endif

typedef struct sh_lin_epart {
  int fn, arm;    /* the consumer arm */
  int call, comp; /* the child: the arm's call site, the callee's state component */
  int callee;
  int64_t w, d;   /* the child's width (the weight's rows of this part), the product's width */
  int64_t off;    /* the part's first row of the weight */
  int param;      /* the weight: the model parameter L->bind->params[param] */
  sheaf_kernel *k; /* o0(n, i) +=! x0(n, r) * p0(r, i) */
} sh_lin_epart;

typedef struct sh_lin_eager sh_lin_eager;
typedef struct sh_lin_eager_run sh_lin_eager_run;

struct sh_lin_eager {
  int mode; /* -1 auto, 0 off, 1 every run */
  int n_forms; /* arms with an eager form */
  int n_parts;
  sh_lin_epart parts[SH_LIN_MAX_EAGER];
};

struct sh_lin_eager_run {
  float *prod[SH_LIN_MAX_EAGER]; /* part p of consumer row r: prod[p] + r * d */
  size_t prod_cap[SH_LIN_MAX_EAGER];
  int32_t *buf; /* the schedule's arrays */
  size_t buf_cap;
  int32_t *e_part, *e_crow, *e_src, *e_lo, *e_hi, *e_bk, *ord, *sorted, *load, *boff;
  int n_buckets;
  float *x, *y; /* a boundary's gathered child rows and products */
  size_t x_cap, y_cap;
  int next_b; /* boundaries before it are done */
};

/* ------------------------------------------------------------ create */

/* A plain child's segment: its state row as it is. */
static bool plain_child(const sh_lin_arm *a, const sh_lin_seg *sg) {
  return !sg->zero && !sg->lookup && !sg->edge && !sg->reduce && !sg->raw && !sg->chars && !sg->hx &&
         !sg->init_zero && !sg->init_call && !sg->att && !sg->partial && sg->call >= 0 && sg->call < a->n_calls &&
         a->calls[sg->call].sel == SH_LIN_SEL_TREE;
}

/* Whether node k of a is a product the eager form splits: a per-row vector,
 * an input of two or more children's segments, times a parameter matrix. */
static bool splits(const sh_lin_arm *a, int k) {
  const sh_lin_node *n = &a->nodes[k];
  if (n->op != SH_LIN_MM || n->rank != 1 || !n->batched || n->kid || n->a < 0 || n->b < 0) return false;
  const sh_lin_node *x = &a->nodes[n->a], *w = &a->nodes[n->b];
  if (w->op != SH_LIN_PARAM || w->rank != 2 || x->op != SH_LIN_IN || x->rank != 1 || x->kid || x->tok || x->twin ||
      x->n_segs < 2)
    return false;
  for (int q = 0; q < x->n_segs; q++)
    if (!plain_child(a, &x->segs[q])) return false;
  return true;
}

/* Inserts an empty node at position k (nodes k.. move up one; every
 * reference to them follows). */
static void insert_at(sh_lin_arm *e, int k) {
  memmove(&e->nodes[k + 1], &e->nodes[k], (size_t)(e->n_nodes - k) * sizeof e->nodes[0]);
  e->n_nodes++;
  for (int i = 0; i < e->n_nodes; i++) {
    sh_lin_node *n = &e->nodes[i];
    if (i == k) continue;
    if (n->a >= k) n->a++;
    if (n->b >= k) n->b++;
    for (int t = 0; t < n->n_items; t++)
      if (n->items[t] >= k) n->items[t]++;
  }
  for (int j = 0; j < e->n_out; j++)
    if (e->out[j] >= k) e->out[j]++;
  memset(&e->nodes[k], 0, sizeof e->nodes[k]);
  e->nodes[k].a = e->nodes[k].b = -1;
}

/* Product k of e (splits) as the sum of its parts, each an input read from
 * the eager products; the parts appended to E. False: no room. */
static bool split_product(sh_lin *L, int fn, int arm, sh_lin_arm *e, int k) {
  sh_lin_eager *E = L->eager;
  const sh_lin_node mm = e->nodes[k], x = e->nodes[mm.a];
  int s = x.n_segs;
  if (E->n_parts + s > SH_LIN_MAX_EAGER || e->n_nodes + 2 * s - 2 > SH_LIN_MAX_NODES) return false;
  int first = E->n_parts;
  int64_t off = 0;
  for (int q = 0; q < s; q++) {
    const sh_lin_seg *sg = &x.segs[q];
    E->parts[E->n_parts++] = (sh_lin_epart){fn, arm, sg->call, sg->comp, e->calls[sg->call].fn, sg->width, mm.d[0],
                                            off, e->nodes[mm.b].param, NULL};
    off += sg->width;
  }
  for (int i = 0; i < s - 2; i++) insert_at(e, k); /* the sums before the last: k .. k + s - 3 */
  int last = k + s - 2, in0 = e->n_nodes;
  for (int q = 0; q < s; q++) { /* the parts: inputs (they print no statement, so they may follow) */
    sh_lin_node *n = &e->nodes[e->n_nodes++];
    memset(n, 0, sizeof *n);
    n->op = SH_LIN_IN, n->rank = 1, n->d[0] = mm.d[0], n->d[1] = 1, n->batched = true, n->a = n->b = -1;
    n->n_segs = 1;
    n->segs[0] = (sh_lin_seg){.call = x.segs[q].call, .comp = x.segs[q].comp, .width = mm.d[0], .partial = first + q + 1};
  }
  int prev = in0;
  for (int q = 1; q < s; q++) {
    int at = q == s - 1 ? last : k + q - 1;
    sh_lin_node *n = &e->nodes[at];
    memset(n, 0, sizeof *n);
    n->op = SH_LIN_BIN, n->fn = SH_TK_PLUS, n->rank = 1, n->d[0] = mm.d[0], n->d[1] = 1, n->batched = true;
    n->a = prev, n->b = in0 + q;
    prev = at;
  }
  return true;
}

static sheaf_status compile_kernel(sh_lin *L, const char *src, const char *name, int n_in, int n_params, bool part,
                                   sheaf_kernel **out) {
  /* a part's product (few rows, one weight part): a tile of 3 rows x 4 vectors, no few-rows variant, so one
   * packed copy serves every row count and 1-3 rows stream the weight once with 12 accumulators (measured:
   * docs/COMPILER.md, "Eager children's products"); an arm's kernel: the defaults */
  sheaf_isa isa = sheaf_cpu_isa();
  sh_sched_opts so = {.mr = 3, .nr = isa == SHEAF_ISA_AVX512 ? 64 : 32, .rem_rows = -1};
  sh_kernel_opts ko = {.no_few_rows = true, .sched = &so};
  bool tiled = part && (isa == SHEAF_ISA_AVX2 || isa == SHEAF_ISA_AVX512);
  sheaf_status st = tiled ? sh_kernel_compile_opts(L->ctx, src, strlen(src), name, &ko, out)
                          : sheaf_kernel_compile(L->ctx, src, strlen(src), name, out);
  if (st)
    return sh_fail(L->ctx, st, "linearized mode: the kernel %s does not compile: %s\n%s", name,
                   sheaf_ctx_last_error(L->ctx), src);
  for (int p = 0; p < n_params; p++) sheaf_kernel_set_weight_version(*out, n_in + p, 1);
  return SHEAF_OK;
}

static void free_arm(sh_lin_arm *e) {
  if (!e) return;
  for (int32_t c = 0; c < e->cap_plans; c++) sheaf_kernel_plan_free(e->plans[c]);
  free(e->plans);
  sheaf_kernel_free(e->k);
  free(e->src);
  free(e);
}

/* Arm ai of function f's eager form, when it has a product that splits. */
static sheaf_status prepare_arm(sh_lin *L, int f, int ai) {
  sh_lin_arm *a = L->fns[f].arms[ai];
  if (!a->k || a->ragged || a->has_mat || a->mat) return SHEAF_OK;
  bool live[SH_LIN_MAX_NODES] = {0};
  for (int j = 0; j < a->n_out; j++) sh_lin_mark_live(a, a->out[j], live);
  int found = 0;
  for (int k = 0; k < a->n_nodes; k++) found += live[k] && splits(a, k);
  if (!found) return SHEAF_OK;
  sh_lin_arm *e = malloc(sizeof *e);
  if (!e) return sh_fail(L->ctx, SHEAF_ERR_NOMEM, "out of memory");
  memcpy(e, a, sizeof *e);
  e->src = NULL, e->k = NULL, e->plans = NULL, e->cap_plans = 0, e->eager = NULL;
  snprintf(e->name, sizeof e->name, "%.50s_eager", a->name);
  int n0 = L->eager->n_parts, done = 0;
  for (int k = a->n_nodes - 1; k >= 0; k--) /* from the last: an insertion moves only later nodes */
    if (live[k] && splits(a, k)) done += split_product(L, f, ai, e, k);
  sheaf_status st = done ? sh_lin_emit(L, &L->fns[f], e) : SHEAF_OK;
  if (done && !st) st = compile_kernel(L, e->src, e->name, e->n_inputs, e->n_params, false, &e->k);
  if (!done || st) { /* the arm keeps its one product */
    L->eager->n_parts = n0;
    free_arm(e);
    return st == SHEAF_ERR_NOMEM ? st : SHEAF_OK;
  }
  a->eager = e;
  L->eager->n_forms++;
  sh_buf_printf(&L->all_src, "# %s, eager form: the children's products computed at their levels (linear_eager.c)\n%s\n",
                a->name, e->src);
  return SHEAF_OK;
}

sheaf_status sh_lin_eager_prepare(sh_lin *L) {
  if (L->seq || L->dep || L->records || !L->model) return SHEAF_OK; /* binary trees */
  const char *ev = getenv("SHEAF_LINEAR_EAGER");
  int mode = ev && ev[0] == '0' ? 0 : ev && ev[0] == '1' ? 1 : -1;
  if (!mode) return SHEAF_OK;
  if (!(L->eager = calloc(1, sizeof *L->eager))) return sh_fail(L->ctx, SHEAF_ERR_NOMEM, "out of memory");
  L->eager->mode = mode;
  sheaf_status st = SHEAF_OK;
  for (int f = 0; !st && f < L->n_fns; f++)
    for (int ai = 0; !st && ai < L->fns[f].n_arms; ai++) st = prepare_arm(L, f, ai);
  for (int p = 0; !st && p < L->eager->n_parts; p++) { /* same shapes, same source: one JIT compile */
    sh_lin_epart *P = &L->eager->parts[p];
    char src[512], name[64];
    snprintf(name, sizeof name, "eager_%lldx%lld", (long long)P->w, (long long)P->d);
    snprintf(src, sizeof src,
             "kernel %s(x0: f32[N, %lld], p0: f32[%lld, %lld]) -> (o0: f32[N, %lld]) {\n"
             "  o0(n, i) +=! x0(n, r) * p0(r, i) where i in 0..%lld, r in 0..%lld\n}\n",
             name, (long long)P->w, (long long)P->w, (long long)P->d, (long long)P->d, (long long)P->d,
             (long long)P->w);
    st = compile_kernel(L, src, name, 1, 1, true, &P->k);
    bool seen = false; /* --emit-kernels: each part's source once */
    for (int q = 0; q < p; q++)
      seen = seen || (L->eager->parts[q].w == P->w && L->eager->parts[q].d == P->d);
    if (!seen) sh_buf_printf(&L->all_src, "# a child's part of a product (linear_eager.c)\n%s\n", src);
  }
  return st;
}

void sh_lin_eager_free_run(sh_lin *L) {
  sh_lin_eager_run *R = L->eager_run;
  if (!R) return;
  for (int p = 0; p < SH_LIN_MAX_EAGER; p++) free(R->prod[p]);
  free(R->buf);
  free(R->x);
  free(R->y);
  free(R);
  L->eager_run = NULL;
}

void sh_lin_eager_free(sh_lin *L) {
  if (!L->eager) return;
  for (int f = 0; f < L->n_fns; f++)
    for (int ai = 0; ai < L->fns[f].n_arms; ai++) {
      free_arm(L->fns[f].arms[ai]->eager);
      L->fns[f].arms[ai]->eager = NULL;
    }
  for (int p = 0; p < L->eager->n_parts; p++) sheaf_kernel_free(L->eager->parts[p].k);
  free(L->eager);
  L->eager = NULL;
}

/* ------------------------------------------------------------ run */

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return true;
  size_t c = need > 2 * *cap ? need : 2 * *cap;
  void *q = aligned_alloc(64, (c * elem + 63) & ~(size_t)63);
  if (!q) return false;
  free(*p);
  *p = q, *cap = c;
  return true;
}

sheaf_status sh_lin_eager_plan(sh_lin *L) {
  L->eager_on = false;
  const sh_lin_eager *E = L->eager;
  if (!E || !E->n_parts) return SHEAF_OK;
  int64_t rows = 0, groups = 0, n_e = 0;
  int max_h = 0;
  for (int g = 0; g < L->n_groups; g++) {
    const sh_lin_grp *G = &L->groups[g];
    max_h = G->height > max_h ? G->height : max_h;
    if (!L->fns[G->fn].arms[G->arm]->eager) continue;
    rows += G->count, groups++;
    for (int p = 0; p < E->n_parts; p++) n_e += E->parts[p].fn == G->fn && E->parts[p].arm == G->arm ? G->count : 0;
  }
  if (!groups || (E->mode < 0 && rows > (int64_t)SH_LIN_EAGER_ROWS * groups)) return SHEAF_OK;
  if (!L->eager_run && !(L->eager_run = calloc(1, sizeof *L->eager_run)))
    return sh_fail(L->ctx, SHEAF_ERR_NOMEM, "out of memory: eager products");
  sh_lin_eager_run *R = L->eager_run;
  /* each function's rows' heights, then the entries (part, consumer row, child row, window) */
  int64_t rh_off[SH_LIN_MAX_FNS + 1] = {0};
  for (int f = 0; f < L->n_fns; f++) rh_off[f + 1] = rh_off[f] + L->n_rows[f];
  int n_buckets = (max_h + 1) * E->n_parts;
  size_t need = (size_t)rh_off[L->n_fns] + 8 * (size_t)n_e + (size_t)n_buckets +
                (size_t)(n_buckets > max_h + 1 ? n_buckets : max_h + 1) + 1;
  if (!grow((void **)&R->buf, &R->buf_cap, need, sizeof(int32_t)))
    return sh_fail(L->ctx, SHEAF_ERR_NOMEM, "out of memory: eager products");
  int32_t *rh = R->buf;
  R->e_part = rh + rh_off[L->n_fns], R->e_crow = R->e_part + n_e, R->e_src = R->e_crow + n_e;
  R->e_lo = R->e_src + n_e, R->e_hi = R->e_lo + n_e, R->e_bk = R->e_hi + n_e, R->ord = R->e_bk + n_e;
  R->sorted = R->ord + n_e, R->load = R->sorted + n_e, R->boff = R->load + n_buckets;
  for (int g = 0; g < L->n_groups; g++) {
    const sh_lin_grp *G = &L->groups[g];
    for (int32_t i = 0; i < G->count; i++) rh[rh_off[G->fn] + G->start + i] = G->height;
  }
  int64_t e = 0;
  for (int g = 0; g < L->n_groups; g++) {
    const sh_lin_grp *G = &L->groups[g];
    for (int p = 0; p < E->n_parts; p++) {
      const sh_lin_epart *P = &E->parts[p];
      if (P->fn != G->fn || P->arm != G->arm) continue;
      for (int32_t i = 0; i < G->count; i++, e++) {
        int32_t src = G->calls[P->call][i];
        R->e_part[e] = p, R->e_crow[e] = G->start + i, R->e_src[e] = src;
        R->e_lo[e] = rh[rh_off[P->callee] + src], R->e_hi[e] = G->height - 1;
      }
    }
  }
  /* by right end (counting sort), then per part the greedy stabbing: an
   * entry whose window holds the part's last boundary joins it, else its
   * right end is the part's next boundary (the fewest boundaries, so the
   * fewest passes over each part of the weight) */
  int np = E->n_parts;
  int32_t *cnt = R->boff;
  memset(cnt, 0, (size_t)(max_h + 2) * sizeof *cnt);
  for (int64_t i = 0; i < n_e; i++) cnt[R->e_hi[i] + 1]++;
  for (int h = 0; h <= max_h; h++) cnt[h + 1] += cnt[h];
  for (int64_t i = 0; i < n_e; i++) R->ord[cnt[R->e_hi[i]]++] = (int32_t)i;
  int32_t last[SH_LIN_MAX_EAGER];
  for (int p = 0; p < np; p++) last[p] = -1;
  for (int b = 0; b < n_buckets; b++) R->load[b] = -1; /* -1: no pass there */
  for (int64_t t = 0; t < n_e; t++) {
    int32_t i = R->ord[t], p = R->e_part[i];
    if (R->e_lo[i] > last[p]) last[p] = R->e_hi[i], R->load[last[p] * np + p] = 0;
    R->e_bk[i] = last[p] * np + p; /* its bucket (boundary, part) */
  }
  /* then the rows spread over those passes: a pass of 1-3 rows costs about
   * one read of its part of W (few rows: bound by the stream), so an entry
   * whose window holds several passes (a leaf under a chain) joins the one
   * with the fewest rows (of the last 64 boundaries of its window), in
   * order of right ends, after the entries with one boundary (lo == hi) */
  for (int64_t i = 0; i < n_e; i++)
    if (R->e_lo[i] == R->e_hi[i]) R->load[R->e_bk[i]]++;
  for (int64_t t = 0; t < n_e; t++) {
    int32_t i = R->ord[t], p = R->e_part[i];
    if (R->e_lo[i] == R->e_hi[i]) continue;
    int32_t best = R->e_bk[i], stop = R->e_hi[i] - 63 > R->e_lo[i] ? R->e_hi[i] - 63 : R->e_lo[i];
    for (int32_t b = R->e_hi[i]; b >= stop; b--) {
      int32_t bk = b * np + p;
      if (R->load[bk] >= 0 && R->load[bk] < R->load[best]) best = bk;
    }
    R->load[best]++, R->e_bk[i] = best;
  }
  /* by bucket: boff[b] .. boff[b + 1] of sorted */
  memset(R->boff, 0, (size_t)(n_buckets + 1) * sizeof *R->boff);
  for (int64_t i = 0; i < n_e; i++) R->boff[R->e_bk[i] + 1]++;
  for (int b = 0; b < n_buckets; b++) R->boff[b + 1] += R->boff[b];
  for (int64_t i = 0; i < n_e; i++) R->ord[R->boff[R->e_bk[i]]++] = (int32_t)i;
  for (int b = n_buckets; b > 0; b--) R->boff[b] = R->boff[b - 1];
  R->boff[0] = 0;
  memcpy(R->sorted, R->ord, (size_t)n_e * sizeof *R->sorted);
  R->n_buckets = n_buckets, R->next_b = 0;
  for (int p = 0; p < E->n_parts; p++) {
    const sh_lin_epart *P = &E->parts[p];
    if (!grow((void **)&R->prod[p], &R->prod_cap[p], (size_t)L->n_rows[P->fn] * (size_t)P->d, sizeof(float)))
      return sh_fail(L->ctx, SHEAF_ERR_NOMEM, "out of memory: eager products");
  }
  L->eager_on = true;
  return SHEAF_OK;
}

/* Part p's rows of bucket entries [lo, hi): the children's rows gathered,
 * one kernel call, the products to their consumer rows. */
static sheaf_status run_part(sh_lin *L, int p, int32_t lo, int32_t hi) {
  const sh_lin_epart *P = &L->eager->parts[p];
  sh_lin_eager_run *R = L->eager_run;
  size_t m = (size_t)(hi - lo), w = (size_t)P->w, d = (size_t)P->d;
  if (!grow((void **)&R->x, &R->x_cap, m * w, sizeof(float)) || !grow((void **)&R->y, &R->y_cap, m * d, sizeof(float)))
    return sh_fail(L->ctx, SHEAF_ERR_NOMEM, "out of memory: eager products");
  /* the children's rows and the consumers' read and written in place where
   * they are consecutive (a tree alone: one row a pass, mostly), else
   * gathered and scattered */
  const float *const *al = L->alias[P->callee][P->comp];
  float *state = L->state[P->callee][P->comp];
  int32_t s0 = R->e_src[R->sorted[lo]], c0 = R->e_crow[R->sorted[lo]];
  bool src_run = true, dst_run = true;
  for (size_t r = 0; r < m; r++) {
    int32_t i = R->sorted[lo + (int32_t)r];
    src_run = src_run && R->e_src[i] == s0 + (int32_t)r && !(al && al[R->e_src[i]]);
    dst_run = dst_run && R->e_crow[i] == c0 + (int32_t)r;
  }
  float *x = src_run ? state + (size_t)s0 * w : R->x, *y = dst_run ? R->prod[p] + (size_t)c0 * d : R->y;
  for (size_t r = 0; !src_run && r < m; r++) {
    int32_t src = R->e_src[R->sorted[lo + (int32_t)r]];
    const float *sp = al && al[src] ? al[src] : state + (size_t)src * w;
    memcpy(R->x + r * w, sp, w * sizeof(float));
  }
  int rank;
  const int64_t *shape;
  union { const float *c; void *v; } W = {sheaf_model_param_values(L->model, L->bind->params[P->param], &rank, &shape)};
  if (!W.c) return sh_fail(L->ctx, SHEAF_ERR_INVALID_ARG, "linear run: eager product: no weight");
  int64_t sx[2] = {(int64_t)m, P->w}, sw[2] = {P->w, P->d}, sy[2] = {(int64_t)m, P->d};
  sheaf_kernel_arg args[3] = {{SHEAF_KERNEL_F32, x, m * w, 2, sx},
                              {SHEAF_KERNEL_F32, (float *)W.v + (size_t)P->off * d, w * d, 2, sw},
                              {SHEAF_KERNEL_F32, y, m * d, 2, sy}};
  sheaf_status st = sheaf_kernel_run(P->k, args, 3);
  if (st) return st;
  for (size_t r = 0; !dst_run && r < m; r++)
    memcpy(R->prod[p] + (size_t)R->e_crow[R->sorted[lo + (int32_t)r]] * d, R->y + r * d, d * sizeof(float));
  return SHEAF_OK;
}

sheaf_status sh_lin_eager_until(sh_lin *L, int h) {
  sh_lin_eager_run *R = L->eager_run;
  int np = L->eager->n_parts;
  for (; R->next_b < h && R->next_b * np < R->n_buckets; R->next_b++)
    for (int p = 0; p < np; p++) {
      int bk = R->next_b * np + p;
      if (R->boff[bk + 1] > R->boff[bk]) {
        sheaf_status st = run_part(L, p, R->boff[bk], R->boff[bk + 1]);
        if (st) return st;
      }
    }
  return SHEAF_OK;
}

float *sh_lin_eager_rows(sh_lin *L, const sh_lin_seg *seg, int32_t row) {
  return L->eager_run->prod[seg->partial - 1] + (size_t)row * (size_t)L->eager->parts[seg->partial - 1].d;
}

int sh_lin_eager_parts(const sh_lin *L) { return L && L->eager ? L->eager->n_parts : 0; }
int sh_lin_eager_kernels(const sh_lin *L) { return L && L->eager ? L->eager->n_forms + L->eager->n_parts : 0; }
bool sh_lin_eager_ran(const sh_lin *L) {
  if (!L) return false;
  return L->n_parts && L->parts[0] ? L->parts[0]->eager_on : L->eager_on;
}
