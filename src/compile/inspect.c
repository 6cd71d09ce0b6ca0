/*
 * inspect.c — the linearized mode's inspector: walks a batch of trees once
 * (no recursion: an explicit stack), making an activation per (structural
 * function, node) reached from main, with its arm (the first whose pattern
 * matches the node) and its height (1 + the highest activation it calls; 0
 * when it calls none); then renumbers each function's activations so every
 * (height, function, arm) is a contiguous range of its state rows, and
 * emits per range the word ids of the arm's pattern fields and the callee
 * rows of its call sites (sh_lin_grp). A dependency tree's ragged arm (nodes
 * with children) has call sites on every child (SH_LIN_SEL_KIDS): their
 * rows are the children's in order, each row's count in n_kids (CSR).
 * Binary trees with shallow patterns are walked without the stack, in two
 * passes over the batch's nodes in the treebank's post-order (walk_post),
 * and a leaf arm computed from its word alone gets one activation per
 * distinct word of the batch (share_leaves).
 */
#include <stdlib.h>
#include <string.h>

#include "compile/linear_int.h"

int32_t sh_lin_skip_unary(const sh_lin *L, const sh_treebank *tb, int32_t node) {
  if (L->dep) return node; /* a dependency node of one child is a node */
  while (tb->n_children[node] == 1) node = sh_tb_child(tb, node, 0);
  return node;
}

int sh_lin_ctor_of(const sh_lin *L, const sh_treebank *tb, int32_t node) {
  int32_t nc = tb->n_children[node];
  if (L->dep) return L->in->ctor_dep;
  return nc == 0 ? L->in->ctor_leaf : nc == 2 ? L->in->ctor_node : -1;
}

static bool match(const sh_lin *L, const sh_treebank *tb, const sh_pat *p, int32_t node, bool word) {
  if (!p || p->kind == SH_PAT_WILD || p->kind == SH_PAT_VAR) return true;
  if (p->kind != SH_PAT_CTOR || word || !p->ctor) return false;
  if (sh_lin_ctor_of(L, tb, node) != p->ctor->index) return false;
  if (p->ctor->index == L->in->ctor_leaf) return p->n < 1 || match(L, tb, p->items[0], node, true);
  for (int i = 0; i < p->n && i < 2; i++)
    if (!match(L, tb, p->items[i], sh_lin_skip_unary(L, tb, sh_tb_child(tb, node, i)), false)) return false;
  return true;
}

static int32_t slot_node(const sh_lin *L, const sh_treebank *tb, const sh_lin_slot *s, int32_t node) {
  for (int k = 0; k < s->depth; k++) node = sh_lin_skip_unary(L, tb, sh_tb_child(tb, node, s->path[k]));
  return node;
}

/* What matching arm pattern p needs: -2 always matches (none, `_`, a
 * variable), c >= 0 a node of constructor c whatever its fields (every field
 * a variable or `_`), -1 the full match (nested patterns). */
static int shallow_ctor(const sh_pat *p) {
  if (!p || p->kind == SH_PAT_WILD || p->kind == SH_PAT_VAR) return -2;
  if (p->kind != SH_PAT_CTOR || !p->ctor) return -1;
  for (int i = 0; i < p->n; i++)
    if (p->items[i] && p->items[i]->kind != SH_PAT_WILD && p->items[i]->kind != SH_PAT_VAR) return -1;
  return p->ctor->index;
}

/* Callee entries of an activation of arm a on a node of nk children: one per
 * call site, nk per SH_LIN_SEL_KIDS one; entry e is call site *c, child *j. */
static int32_t n_entries(const sh_lin_arm *a, int32_t nk) {
  int32_t n = 0;
  for (int c = 0; c < a->n_calls; c++) n += a->calls[c].sel == SH_LIN_SEL_KIDS ? nk : 1;
  return n;
}

/* Per (function, arm): its callee entries when no call site is on every
 * child (a binary-tree arm: one entry per call site, entry e is site e),
 * else -1 (n_entries counts them per node). */
typedef int8_t sh_lin_fixed[SH_LIN_MAX_FNS][SH_LIN_MAX_ARMS];

/* Also: each (function, arm)'s arm, and its index fa among all arms in
 * (function, arm) order (the sort's key is height · n_fa + fa); returns n_fa. */
static int fixed_entries(const sh_lin *L, sh_lin_fixed fx, int16_t (*shallow)[SH_LIN_MAX_ARMS],
                         const sh_lin_arm *(*arms)[SH_LIN_MAX_ARMS], int16_t (*fa)[SH_LIN_MAX_ARMS]) {
  int n_fa = 0;
  for (int f = 0; f < L->n_fns; f++)
    for (int ai = 0; ai < L->fns[f].n_arms; ai++) {
      const sh_lin_arm *a = L->fns[f].arms[ai];
      arms[f][ai] = a, fa[f][ai] = (int16_t)n_fa++;
      shallow[f][ai] = (int16_t)shallow_ctor(a->pat);
      fx[f][ai] = (int8_t)a->n_calls;
      for (int c = 0; c < a->n_calls; c++)
        if (a->calls[c].sel == SH_LIN_SEL_KIDS) fx[f][ai] = -1;
    }
  return n_fa;
}

static void entry_at(const sh_lin_arm *a, int32_t nk, int32_t e, int *c, int32_t *j) {
  for (*c = 0; *c < a->n_calls; (*c)++) {
    int32_t w = a->calls[*c].sel == SH_LIN_SEL_KIDS ? nk : 1;
    if (e < w) break;
    e -= w;
  }
  *j = e;
}

typedef struct acts {
  int32_t n, cap;
  int8_t *fn, *arm;
  int32_t *node, *height, *next_call, *row, *kid_off;
  int32_t *kids; /* kids[kid_off[id] + c]: the activation call site c of id calls */
  size_t n_kids, cap_kids;
  int32_t *memo; /* [fn][node - lo] */
} acts;

/* The inspector's arrays, kept in the sh_lin across runs (grown, never
 * shrunk; the context's allocator): a batch like the last allocates nothing. */
typedef struct sh_lin_scan {
  acts A;
  size_t memo_cap, stack_cap, order_cap, cnt_cap, tmp_cap;
  int32_t *stack, *order, *cnt, *tmp;
  /* leaves shared by word (walk_post): per shared (function, arm) and word id, the activation made for it in
   * the walk of stamp `stamp` (older stamps: none) */
  struct share_ent { uint32_t stamp; int32_t id; } *share;
  size_t share_cap;
  uint32_t stamp;
} sh_lin_scan;

/* Whether arm a is computed from its node's word alone (no callee, one
 * word field, a result that is not the looked-up row as it is): its
 * activations on one word in a batch have the same results. */
static bool arm_of_word(const sh_lin_arm *a) {
  if (a->n_calls || a->n_fields != 1 || a->ragged || a->has_mat) return false;
  for (int j = 0; j < a->n_out; j++)
    if (a->nodes[a->out[j]].op != SH_LIN_IN) return true;
  return false;
}

/* *p (cap elements of size es) grown to at least need elements (doubling). */
static bool grow(sheaf_ctx *ctx, void *pp, size_t *cap, size_t need, size_t es) {
  if (need <= *cap) return true;
  size_t c = need > 2 * *cap ? need : 2 * *cap;
  void **p = pp;
  void *q = sh_realloc(ctx, *p, *cap * es, c * es);
  if (!q) return false;
  *p = q, *cap = c;
  return true;
}

/* Bytes of the activation arrays at cap entries (one block: fn, arm, then
 * five int32 arrays). */
static size_t acts_bytes(size_t cap) { return cap * (2 + 5 * sizeof(int32_t)); }

/* The activation arrays doubled (one block, so a failure leaves them as
 * they were). */
static bool acts_grow(sheaf_ctx *ctx, acts *A) {
  size_t old = (size_t)A->cap, cap = old ? 2 * old : 1024;
  char *blk = sh_malloc(ctx, acts_bytes(cap));
  if (!blk) return false;
  int32_t *i32 = (int32_t *)(blk + 2 * cap); /* cap is even: 4-byte aligned */
  int32_t **dst[] = {&A->node, &A->height, &A->next_call, &A->row, &A->kid_off};
  if (old) {
    memcpy(blk, A->fn, old), memcpy(blk + cap, A->arm, old);
    for (int k = 0; k < 5; k++) memcpy(i32 + k * cap, *dst[k], old * sizeof(int32_t));
    sh_free(ctx, A->fn, acts_bytes(old));
  }
  A->fn = (int8_t *)blk, A->arm = (int8_t *)(blk + cap);
  for (int k = 0; k < 5; k++) *dst[k] = i32 + k * cap;
  A->cap = (int32_t)cap;
  return true;
}

void sh_lin_scan_free(sh_lin *L) {
  sh_lin_scan *S = L ? L->scan : NULL;
  if (!S) return;
  sheaf_ctx *ctx = L->ctx;
  acts *A = &S->A;
  if (A->cap) sh_free(ctx, A->fn, acts_bytes((size_t)A->cap));
  sh_free(ctx, A->kids, A->cap_kids * 4), sh_free(ctx, A->memo, S->memo_cap * 4);
  sh_free(ctx, S->stack, S->stack_cap * 4), sh_free(ctx, S->order, S->order_cap * 4);
  sh_free(ctx, S->cnt, S->cnt_cap * 4), sh_free(ctx, S->tmp, S->tmp_cap * 4);
  sh_free(ctx, S->share, S->share_cap * sizeof *S->share);
  sh_free(ctx, S, sizeof *S);
  L->scan = NULL;
}

/* ids 0 .. n-1 sorted by (height, function, arm, id): one stable counting
 * pass by the key height · n_fa + fa(function, arm) (nb = (max_h + 1) · n_fa
 * buckets); after it cnt[b] is the end of bucket b in order (its start
 * cnt[b - 1], 0 for the first), so the buckets in use are the groups. */
static bool sort_acts(sheaf_ctx *ctx, sh_lin_scan *S, const int16_t (*fa)[SH_LIN_MAX_ARMS], int n_fa, int32_t max_h,
                      int32_t *order) {
  const acts *A = &S->A;
  size_t nb = ((size_t)max_h + 1) * (size_t)n_fa;
  if (!grow(ctx, &S->cnt, &S->cnt_cap, nb + 1, sizeof *S->cnt) ||
      !grow(ctx, &S->tmp, &S->tmp_cap, (size_t)A->n + 1, sizeof *S->tmp))
    return false;
  int32_t *cnt = S->cnt, *key = S->tmp;
  memset(cnt, 0, (nb + 1) * sizeof *cnt);
  for (int32_t i = 0; i < A->n; i++) cnt[(key[i] = A->height[i] * n_fa + fa[A->fn[i]][A->arm[i]]) + 1]++;
  for (size_t b = 0; b < nb; b++) cnt[b + 1] += cnt[b];
  for (int32_t i = 0; i < A->n; i++) order[cnt[key[i]]++] = i;
  return true;
}

/* Binary trees in the treebank's post-order (every node after its
 * descendants: io/treebank.h) walked without a stack: a pass down the
 * nodes (descending: callers first) marks the activations needed and
 * picks their arms (arm_of), a pass up (ascending: callees first) numbers
 * them, reads their callees' ids and takes their heights. Functions on one
 * node run in an order where callers on the same node (a call on slot -1,
 * main's fc(t)) come first going down. Activations are numbered by node,
 * so each group's rows are in its nodes' order, the depth-first walk's
 * order when no two of a group's nodes are one above the other. Returns 1;
 * 0 when it does not apply (nested patterns, dependency trees, a cycle of
 * calls on one node) or the batch breaks an assumption (a node that is not
 * binary, no arm matching, a callee outside its tree or above its caller):
 * the depth-first walk then runs and names any error; -1 out of memory. */
static int walk_post(sh_lin *L, const sh_treebank *tb, int32_t first, int32_t n, int32_t lo, int32_t hi, acts *A,
                     sh_lin_fixed fixed, int16_t (*shallow)[SH_LIN_MAX_ARMS],
                     const sh_lin_arm *(*arms)[SH_LIN_MAX_ARMS], int32_t *root_act, int32_t *arm_of, sh_word_ids ids) {
  int nf = L->n_fns, fo[SH_LIN_MAX_FNS], indeg[SH_LIN_MAX_FNS] = {0};
  bool edge[SH_LIN_MAX_FNS][SH_LIN_MAX_FNS] = {{false}}, placed[SH_LIN_MAX_FNS] = {false};
  if (L->dep) return 0;
  for (int f = 0; f < nf; f++)
    for (int ai = 0; ai < L->fns[f].n_arms; ai++) {
      const sh_lin_arm *a = arms[f][ai];
      if (shallow[f][ai] == -1 || fixed[f][ai] < 0) return 0;
      for (int c = 0; c < a->n_calls; c++) {
        if (a->calls[c].sel != SH_LIN_SEL_TREE) return 0;
        int g = a->calls[c].fn;
        if (a->calls[c].slot < 0 && !edge[f][g]) edge[f][g] = true, indeg[g]++;
      }
    }
  for (int k = 0; k < nf; k++) { /* callers on the same node first (Kahn) */
    int f = 0;
    while (f < nf && (placed[f] || indeg[f])) f++;
    if (f == nf) return 0; /* a cycle: the depth-first walk names it */
    placed[f] = true, fo[k] = f;
    for (int g = 0; g < nf; g++) indeg[g] -= edge[f][g];
  }
  /* leaves shared by word (L->share_leaves): the arms of words (not main's), share slot k each */
  int8_t share_k[SH_LIN_MAX_FNS][SH_LIN_MAX_ARMS];
  int n_share = 0;
  size_t words = ids.n_ids > 0 ? (size_t)ids.n_ids + 1 : 0;
  for (int f = 0; f < nf; f++)
    for (int ai = 0; ai < L->fns[f].n_arms; ai++)
      share_k[f][ai] = (int8_t)(L->share_leaves && f > 0 && words && words <= (1u << 22) && n_share < 8 &&
                                        arm_of_word(arms[f][ai])
                                    ? n_share++
                                    : -1);
  sh_lin_scan *S = L->scan;
  size_t share_old = S->share_cap;
  if (n_share && !grow(L->ctx, &S->share, &S->share_cap, (size_t)n_share * words, sizeof *S->share)) return -1;
  if (S->share_cap > share_old) /* new entries: no stamp (0, never a walk's) */
    memset(S->share + share_old, 0, (S->share_cap - share_old) * sizeof *S->share);
  if (n_share && ++S->stamp == 0) { /* wrapped: every entry old again */
    memset(S->share, 0, S->share_cap * sizeof *S->share);
    S->stamp = 1;
  }
  size_t span = (size_t)(hi - lo);
  int32_t *memo = A->memo; /* -1 not needed, -2 needed, -3 armed (pass down), then the id (pass up) */
  for (int32_t t = 0; t < n; t++) {
    int32_t root = sh_lin_skip_unary(L, tb, tb->tree_root[first + t]);
    if (root < lo || root >= hi) return 0;
    memo[root - lo] = -2;
  }
  for (int32_t v = hi - 1; v >= lo; v--)
    for (int k = 0; k < nf; k++) {
      int f = fo[k];
      size_t at = (size_t)f * span + (size_t)(v - lo);
      if (memo[at] != -2) continue;
      int ctor = sh_lin_ctor_of(L, tb, v), arm = 0;
      if (ctor < 0) return 0;
      while (arm < L->fns[f].n_arms && shallow[f][arm] != -2 && shallow[f][arm] != ctor) arm++;
      if (arm == L->fns[f].n_arms) return 0;
      const sh_lin_arm *a = arms[f][arm];
      for (int c = 0; c < a->n_calls; c++) {
        const sh_lin_call *cl = &a->calls[c];
        int32_t u = cl->slot < 0 ? v : slot_node(L, tb, &a->slots[cl->slot], v);
        if (u < lo || u > v || (u == v && cl->slot >= 0)) return 0;
        int32_t *mu = &memo[(size_t)cl->fn * span + (size_t)(u - lo)];
        if (*mu == -1) *mu = -2;
      }
      arm_of[at] = arm, memo[at] = -3;
    }
  for (int32_t v = lo; v < hi; v++)
    for (int k = nf - 1; k >= 0; k--) {
      int f = fo[k];
      size_t at = (size_t)f * span + (size_t)(v - lo);
      if (memo[at] != -3) continue;
      const sh_lin_arm *a = arms[f][arm_of[at]];
      struct share_ent *se = NULL;
      int sk = share_k[f][arm_of[at]];
      if (sk >= 0) { /* a word's leaf: the batch's first activation on that word */
        int32_t w = sh_word_id(ids, tb->word[slot_node(L, tb, &a->slots[a->field_slot[0]], v)]);
        if (w >= 0 && (size_t)w < words) {
          se = &S->share[(size_t)sk * words + (size_t)w];
          if (se->stamp == S->stamp) {
            memo[at] = se->id;
            continue;
          }
        }
      }
      if (A->n == A->cap && !acts_grow(L->ctx, A)) return -1;
      if (!grow(L->ctx, &A->kids, &A->cap_kids, A->n_kids + (size_t)a->n_calls, sizeof *A->kids)) return -1;
      int32_t id = A->n++, h = 0, *kid = A->kids + A->n_kids;
      A->kid_off[id] = (int32_t)A->n_kids;
      A->n_kids += (size_t)a->n_calls;
      A->fn[id] = (int8_t)f, A->arm[id] = (int8_t)arm_of[at], A->node[id] = v, A->next_call[id] = a->n_calls;
      for (int c = 0; c < a->n_calls; c++) {
        const sh_lin_call *cl = &a->calls[c];
        int32_t u = cl->slot < 0 ? v : slot_node(L, tb, &a->slots[cl->slot], v);
        int32_t cid = memo[(size_t)cl->fn * span + (size_t)(u - lo)];
        if (cid < 0) return 0; /* (cannot happen: its callees came first) */
        kid[c] = cid;
        if (A->height[cid] + 1 > h) h = A->height[cid] + 1;
      }
      A->height[id] = h, memo[at] = id;
      if (se) se->stamp = S->stamp, se->id = id;
    }
  for (int32_t t = 0; t < n; t++) root_act[t] = memo[sh_lin_skip_unary(L, tb, tb->tree_root[first + t]) - lo];
  return 1;
}

sheaf_status sh_lin_inspect(sh_lin *L, const sh_treebank *tb, int32_t first, int32_t n, sh_word_ids ids) {
  if (n <= 0 || first < 0 || first + n > tb->n_trees)
    return sh_fail(L->ctx, SHEAF_ERR_INVALID_ARG, "linear run: trees %d .. %d of %d", (int)first, (int)(first + n),
                   (int)tb->n_trees);
  int32_t lo = tb->tree_first[first], hi = tb->tree_first[first + n - 1] + tb->tree_size[first + n - 1];
  if (hi < lo) return sh_fail(L->ctx, SHEAF_ERR_INVALID_ARG, "linear run: trees out of order");
  int32_t span = hi - lo;
  sheaf_status st = SHEAF_OK;
  if (!L->scan && !(L->scan = sh_calloc(L->ctx, 1, sizeof *L->scan)))
    return sh_fail(L->ctx, SHEAF_ERR_NOMEM, "out of memory: the inspector's arrays");
  sh_lin_scan *S = L->scan;
  acts A = S->A; /* written back at the end (grown arrays) */
  A.n = 0, A.n_kids = 0;
  int32_t *order = NULL, *stack = NULL;
  size_t memo_n = (size_t)L->n_fns * (size_t)span;
  if (!grow(L->ctx, &A.memo, &S->memo_cap, memo_n, sizeof *A.memo) ||
      !grow(L->ctx, &S->stack, &S->stack_cap, memo_n + 1, sizeof *S->stack))
    goto nomem;
  stack = S->stack;
  memset(A.memo, 0xff, memo_n * sizeof *A.memo);
  if (n > L->cap_inst) {
    int32_t *r = realloc(L->root_row, (size_t)n * sizeof *r);
    if (!r) goto nomem;
    L->root_row = r, L->cap_inst = n;
  }
  L->n_inst = n;
  int32_t *root_act = L->root_row; /* activation ids first, rows below */
  sh_lin_fixed fixed;
  int16_t shallow[SH_LIN_MAX_FNS][SH_LIN_MAX_ARMS], fa[SH_LIN_MAX_FNS][SH_LIN_MAX_ARMS];
  const sh_lin_arm *arms[SH_LIN_MAX_FNS][SH_LIN_MAX_ARMS];
  int n_fa = fixed_entries(L, fixed, shallow, arms, fa);
  int walked = walk_post(L, tb, first, n, lo, hi, &A, fixed, shallow, arms, root_act, stack, ids);
  if (walked < 0) goto nomem;
  if (!walked) { /* the depth-first walk below, from scratch */
    A.n = 0, A.n_kids = 0;
    memset(A.memo, 0xff, memo_n * sizeof *A.memo);
  }
  for (int32_t t = 0; !walked && t < n; t++) {
    int32_t sp = 0;
    int32_t root = sh_lin_skip_unary(L, tb, tb->tree_root[first + t]);
    /* the activation (fn 0, root), then its callees depth first */
    int32_t want_fn = 0, want_node = root, want_at = -1; /* want_at: where its id goes (-1: the root's) */
    bool want = true;
    for (;;) {
      if (want) { /* get or make activation (want_fn, want_node) */
        if (want_node < lo || want_node >= hi) {
          st = sh_fail(L->ctx, SHEAF_ERR_INVALID_ARG, "linear run: node %d outside its tree", (int)want_node);
          goto done;
        }
        int32_t *m = &A.memo[(size_t)want_fn * span + (want_node - lo)];
        if (*m < 0) {
          if (sh_lin_ctor_of(L, tb, want_node) < 0) {
            st = sh_fail(L->ctx, SHEAF_ERR_INVALID_ARG, "tree node with %d children: the model takes binary trees",
                         (int)tb->n_children[want_node]);
            goto done;
          }
          const sh_lin_fn *f = &L->fns[want_fn];
          int arm = 0;
          if (L->dep && f->n_arms > 1) arm = tb->n_children[want_node] > 0; /* leaves, the ragged arm */
          int ctor = sh_lin_ctor_of(L, tb, want_node);
          while (!(L->dep && f->n_arms > 1) && arm < f->n_arms &&
                 (shallow[want_fn][arm] == -1 ? !match(L, tb, f->arms[arm]->pat, want_node, false)
                                              : shallow[want_fn][arm] != -2 && shallow[want_fn][arm] != ctor))
            arm++;
          if (arm == f->n_arms) {
            st = sh_fail(L->ctx, SHEAF_ERR_INVALID_ARG, "linear run: no arm of '%s' matches a node",
                         sh_sym_name(&L->m->syms, f->fn->name));
            goto done;
          }
          if (A.n == A.cap && !acts_grow(L->ctx, &A)) goto nomem;
          size_t nc = fixed[want_fn][arm] >= 0 ? (size_t)fixed[want_fn][arm]
                                               : (size_t)n_entries(f->arms[arm], tb->n_children[want_node]);
          if (!grow(L->ctx, &A.kids, &A.cap_kids, A.n_kids + nc > 4096 ? A.n_kids + nc : 4096, sizeof *A.kids))
            goto nomem;
          int32_t id = A.n++;
          A.kid_off[id] = (int32_t)A.n_kids;
          A.n_kids += nc;
          A.fn[id] = (int8_t)want_fn, A.arm[id] = (int8_t)arm, A.node[id] = want_node;
          A.height[id] = -1, A.next_call[id] = 0;
          *m = id;
          stack[sp++] = id;
        }
        if (want_at < 0) root_act[t] = *m;
        else A.kids[want_at] = *m;
        want = false;
      }
      if (sp == 0) break;
      int32_t id = stack[sp - 1];
      const sh_lin_arm *a = arms[A.fn[id]][A.arm[id]];
      int32_t fx = fixed[A.fn[id]][A.arm[id]];
      int32_t nk = fx >= 0 ? 0 : tb->n_children[A.node[id]], ne = fx >= 0 ? fx : n_entries(a, nk);
      if (A.next_call[id] < ne) { /* its next callee */
        int ci = A.next_call[id];
        int32_t j = 0;
        if (fx < 0) entry_at(a, nk, A.next_call[id], &ci, &j);
        const sh_lin_call *c = &a->calls[ci];
        int32_t node = c->sel == SH_LIN_SEL_KIDS ? sh_tb_child(tb, A.node[id], j)
                       : c->slot < 0                ? A.node[id]
                                                    : slot_node(L, tb, &a->slots[c->slot], A.node[id]);
        int32_t *m = &A.memo[(size_t)c->fn * span + (node - lo)];
        if (node >= lo && node < hi && *m >= 0 && A.height[*m] < 0) { /* on the stack: a cycle */
          st = sh_fail(L->ctx, SHEAF_ERR_INVALID_ARG, "linear run: a cycle of calls on one node");
          goto done;
        }
        int32_t at = A.kid_off[id] + A.next_call[id]++;
        if (node >= lo && node < hi && *m >= 0) {
          A.kids[at] = *m;
          continue;
        }
        want_fn = c->fn, want_node = node, want_at = at, want = true;
        continue;
      }
      int32_t h = 0; /* all callees done */
      for (int32_t c = 0; c < ne; c++) {
        int32_t ch = A.height[A.kids[A.kid_off[id] + c]];
        if (ch + 1 > h) h = ch + 1;
      }
      A.height[id] = h;
      sp--;
    }
  }
  /* renumber: sorted by (height, fn, arm) */
  int32_t max_h = 0;
  for (int32_t i = 0; i < A.n; i++) max_h = A.height[i] > max_h ? A.height[i] : max_h;
  S->A = A;
  if (!grow(L->ctx, &S->order, &S->order_cap, (size_t)A.n + 1, sizeof *S->order)) goto nomem;
  order = S->order;
  if (!sort_acts(L->ctx, S, fa, n_fa, max_h, order)) goto nomem;
  /* rows in that order; a group per bucket in use (bucket b: arm fa b % n_fa at height b / n_fa) */
  const int32_t *end = S->cnt;
  size_t nb = ((size_t)max_h + 1) * (size_t)n_fa;
  int8_t fa_fn[SH_LIN_MAX_FNS * SH_LIN_MAX_ARMS], fa_arm[SH_LIN_MAX_FNS * SH_LIN_MAX_ARMS];
  for (int f = 0; f < L->n_fns; f++)
    for (int ai = 0; ai < L->fns[f].n_arms; ai++) fa_fn[fa[f][ai]] = (int8_t)f, fa_arm[fa[f][ai]] = (int8_t)ai;
  memset(L->n_rows, 0, sizeof L->n_rows);
  int n_groups = 0;
  size_t ints = 0;
  for (size_t b = 0; b < nb; b++) {
    int32_t i = b ? end[b - 1] : 0, j = end[b];
    if (i == j) continue;
    int f = fa_fn[b % (size_t)n_fa], ai = fa_arm[b % (size_t)n_fa];
    const sh_lin_arm *a = arms[f][ai];
    int32_t fx = fixed[f][ai], *rows = &L->n_rows[f];
    n_groups++;
    ints += (size_t)(j - i) * ((size_t)a->n_fields + (size_t)(fx >= 0 ? fx : 0) + (a->ragged ? 1u : 0u));
    for (; i < j; i++) {
      int32_t id = order[i];
      A.row[id] = (*rows)++;
      if (fx < 0) ints += (size_t)n_entries(a, tb->n_children[A.node[id]]);
    }
  }
  if (n_groups > L->cap_groups) {
    sh_lin_grp *g = realloc(L->groups, (size_t)n_groups * sizeof *g);
    if (!g) goto nomem;
    L->groups = g, L->cap_groups = n_groups;
  }
  if (ints > L->group_buf_cap) {
    int32_t *b = realloc(L->group_buf, (ints + 1) * sizeof *b);
    if (!b) goto nomem;
    L->group_buf = b, L->group_buf_cap = ints;
  }
  L->n_groups = 0;
  int32_t *buf = L->group_buf;
  for (size_t bk = 0; bk < nb; bk++) {
    int32_t i = bk ? end[bk - 1] : 0, count = end[bk] - i;
    if (!count) continue;
    int32_t id0 = order[i];
    const sh_lin_arm *a = arms[A.fn[id0]][A.arm[id0]];
    sh_lin_grp *g = &L->groups[L->n_groups++];
    memset(g, 0, sizeof *g);
    g->height = A.height[id0], g->fn = A.fn[id0], g->arm = A.arm[id0];
    g->start = A.row[id0], g->count = count;
    for (int f = 0; f < a->n_fields; f++, buf += count) {
      g->fields[f] = buf;
      for (int32_t r = 0; r < count; r++) {
        int32_t node = slot_node(L, tb, &a->slots[a->field_slot[f]], A.node[order[i + r]]);
        g->fields[f][r] = sh_word_id(ids, tb->word[node]);
      }
    }
    if (a->ragged) { /* the child counts, then per call site the children's rows */
      g->n_kids = buf;
      for (int32_t r = 0; r < count; r++) g->n_kid_rows += (g->n_kids[r] = tb->n_children[A.node[order[i + r]]]);
      buf += count;
    }
    if (fixed[g->fn][g->arm] >= 0) /* entry c of each row is call site c */
      for (int c = 0; c < a->n_calls; c++, buf += count) {
        g->calls[c] = buf;
        for (int32_t r = 0; r < count; r++) {
          int32_t id = order[i + r];
          buf[r] = A.row[A.kids[A.kid_off[id] + c]];
        }
      }
    for (int c = 0; fixed[g->fn][g->arm] < 0 && c < a->n_calls; c++) {
      g->calls[c] = buf;
      for (int32_t r = 0; r < count; r++) {
        int32_t id = order[i + r], nk = tb->n_children[A.node[id]], off = 0;
        for (int c2 = 0; c2 < c; c2++) off += a->calls[c2].sel == SH_LIN_SEL_KIDS ? nk : 1;
        if (a->calls[c].sel == SH_LIN_SEL_KIDS)
          for (int32_t kj = 0; kj < nk; kj++) *buf++ = A.row[A.kids[A.kid_off[id] + off + kj]];
        else
          *buf++ = A.row[A.kids[A.kid_off[id] + off]];
      }
    }
  }
  for (int32_t t = 0; t < n; t++) L->root_row[t] = A.row[root_act[t]];
  goto done;
nomem:
  st = sh_fail(L->ctx, SHEAF_ERR_NOMEM, "out of memory: the inspector's arrays");
done:
  S->A = A; /* the arrays as grown */
  return st;
}
