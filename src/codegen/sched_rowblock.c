/*
 * sched_rowblock.c — row-block fusion of a producer and its row-wise
 * consumers (TVM's compute_at and storage shrink, docs/CODEGEN.md "Schedule
 * primitives"):
 *
 *   compute_at   a nest `for n in 0..E: body(n)` that follows the nest
 *                holding a row-block loop `at` (for r_o in 0..ceil(E/R),
 *                touching rows r_o·R + [0, R) of what the two share) moves
 *                into at's body as `for n_i in 0..R: if r_o·R + n_i < E:
 *                body(r_o·R + n_i)`: each block's rows are consumed right
 *                after they are produced, while they are in cache (a GEMM's
 *                row block, then the log-softmax's max, sum and output
 *                passes over the same rows).
 *   shrink       a temporary T touched only inside a loop `at`, at one
 *                dimension always as v_at·R + e with e in [0, R), keeps only
 *                R rows there (indexed by e): one block's storage, reused
 *                by every iteration; one copy per pool thread (per_task),
 *                so `at` may run over the pool.
 */
#include <string.h>

#include "codegen/lir_sched_int.h"

typedef struct acc {
  sh_lir_buf buf;
  int n;
  int32_t list;   /* its n index expressions */
  sh_lir_stmt at; /* the statement holding it */
  bool write;
} acc;

typedef struct accs {
  acc a[1024];
  int n;
  bool overflow;
} accs;

static void add(accs *s, sh_lir_buf b, int n, int32_t list, sh_lir_stmt at, bool write) {
  if (s->n >= 1024) {
    s->overflow = true;
    return;
  }
  s->a[s->n++] = (acc){.buf = b, .n = n, .list = list, .at = at, .write = write};
}

static void see_expr(const sh_lir_kernel *k, sh_lir_expr e, accs *s, sh_lir_stmt at) {
  if (e < 0) return;
  const sh_lir_enode *x = &k->ex[e];
  switch ((sh_lir_ekind)x->kind) {
  case SH_LIR_E_LOAD:
    add(s, x->a, x->n, x->b, at, false);
    for (int i = 0; i < x->n; i++) see_expr(k, k->list[x->b + i], s, at);
    return;
  case SH_LIR_E_BIN: see_expr(k, x->a, s, at), see_expr(k, x->b, s, at); return;
  case SH_LIR_E_UN:
  case SH_LIR_E_CAST: see_expr(k, x->a, s, at); return;
  case SH_LIR_E_SELECT: see_expr(k, x->a, s, at), see_expr(k, x->b, s, at), see_expr(k, x->c, s, at); return;
  default: return;
  }
}

/* Every access in subtree t (prefetch hints are not accesses). */
static void see_tree(const sh_lir_kernel *k, sh_lir_stmt t, accs *s) {
  const sh_lir_snode *x = &k->st[t];
  if (x->kind == SH_LIR_S_STORE) {
    add(s, x->buf, x->nidx, x->idx, t, true);
    see_expr(k, x->val, s, t);
    for (int d = 0; d < x->nidx; d++) see_expr(k, k->list[x->idx + d], s, t);
  }
  if (x->kind == SH_LIR_S_LOOP) see_expr(k, x->ext, s, t);
  if (x->kind == SH_LIR_S_IF) {
    see_expr(k, x->cond, s, t);
    if (x->els >= 0) see_tree(k, x->els, s);
  }
  for (sh_lir_stmt c = x->body; c >= 0; c = k->st[c].next) see_tree(k, c, s);
}

static accs *collect(sh_lir_kernel *k, sh_lir_stmt t) {
  accs *s = sh_calloc(k->ctx, 1, sizeof *s);
  if (!s) {
    sh_lir_fail(k, SHEAF_ERR_NOMEM, "out of memory");
    return NULL;
  }
  see_tree(k, t, s);
  return s;
}

sh_lir_buf sh_sched_per_task_escapes(const sh_lir_kernel *k, sh_lir_stmt s) {
  bool any = false;
  for (int32_t b = 0; b < k->n_bufs; b++) any |= k->bufs[b].per_task;
  if (!any) return SH_LIR_NONE;
  accs *all = sh_calloc(k->ctx, 1, sizeof *all);
  if (!all) return -2; /* cannot check */
  see_tree(k, k->root, all);
  sh_lir_buf bad = SH_LIR_NONE;
  for (int i = 0; i < all->n && bad < 0; i++) {
    sh_lir_buf b = all->a[i].buf;
    if (!k->bufs[b].per_task || !sh_lir_within(k, all->a[i].at, s)) continue;
    for (int j = 0; j < all->n && bad < 0; j++)
      if (all->a[j].buf == b && !sh_lir_within(k, all->a[j].at, s)) bad = b;
  }
  if (all->overflow) bad = -2;
  sh_free(k->ctx, all, sizeof *all);
  return bad;
}

/* e = R·v_at + rest, rest in [0, R) and read only from loops inside `at`
 * (not at itself): the row of block v_at that e names. *rest may be NULL. */
static bool block_row(sh_lir_kernel *k, sh_lir_expr e, sh_lir_stmt at, int64_t R, sh_lir_expr *rest) {
  int64_t coef, lo, hi;
  sh_lir_expr r;
  if (!sh_lir_affine(k, e, k->st[at].var, &coef, &r) || coef != R) return false;
  r = sh_lir_simplify(k, r);
  for (sh_lir_var v = 0; v < k->n_vars; v++)
    if (sh_lir_uses_var(k, r, v)) {
      sh_lir_stmt L = k->vars[v].loop;
      if (L < 0 || L == at || !sh_lir_within(k, L, at)) return false;
    }
  if (!sh_lir_range(k, r, &lo, &hi) || lo < 0 || hi >= R) return false;
  if (rest) *rest = r;
  return true;
}

static bool writes(const accs *s, sh_lir_buf b) {
  for (int i = 0; i < s->n; i++)
    if (s->a[i].buf == b && s->a[i].write) return true;
  return false;
}

static bool touches(const accs *s, sh_lir_buf b) {
  for (int i = 0; i < s->n; i++)
    if (s->a[i].buf == b) return true;
  return false;
}

/* Buffer b, shared by the producer's accesses P and the consumer's C (its
 * loop variable vn), is owned per block at some dimension d: every access
 * in P is inside at at R·v_at + [0, R), every one in C is exactly vn. */
static bool owned_per_block(sh_lir_kernel *k, const accs *P, const accs *C, sh_lir_buf b, sh_lir_stmt at,
                            int64_t R, sh_lir_var vn) {
  int rank = k->bufs[b].rank;
  for (int d = 0; d < rank; d++) {
    bool ok = true;
    for (int i = 0; i < P->n && ok; i++) {
      const acc *a = &P->a[i];
      if (a->buf != b) continue;
      ok = d < a->n && sh_lir_within(k, a->at, at) && a->at != at &&
           block_row(k, k->list[a->list + d], at, R, NULL);
    }
    for (int i = 0; i < C->n && ok; i++) {
      const acc *a = &C->a[i];
      if (a->buf != b) continue;
      sh_lir_expr e = d < a->n ? sh_lir_simplify(k, k->list[a->list + d]) : SH_LIR_NONE;
      ok = e >= 0 && k->ex[e].kind == SH_LIR_E_VAR && k->ex[e].a == vn;
    }
    if (ok) return true;
  }
  return false;
}

sheaf_status sh_sched_compute_at(sh_lir_kernel *k, sh_lir_stmt nest, sh_lir_stmt at, int64_t rows,
                                 sh_lir_stmt *inner) {
  if (k->err) return k->err;
  if (inner) *inner = SH_LIR_NONE;
  if (!sh_sched_is_loop(k, nest) || !sh_sched_is_loop(k, at))
    return sh_sched_err(k, "compute_at: statements %d and %d are not both loops", (int)nest, (int)at);
  const char *nn = k->vars[k->st[nest].var].name, *na = k->vars[k->st[at].var].name;
  if (rows < 1 || rows > 4096)
    return sh_sched_err(k, "compute_at of loop %s at %s: %lld rows per block (expected 1..4096)", nn, na,
                        (long long)rows);
  if (k->st[nest].annot != SH_LIR_SERIAL || k->st[at].annot != SH_LIR_SERIAL)
    return sh_sched_err(k, "compute_at of loop %s at %s: not both serial", nn, na);
  /* the producer's nest: at's ancestor among nest's siblings, right before it */
  sh_lir_stmt top = at;
  while (top >= 0 && k->st[top].parent != k->st[nest].parent) top = k->st[top].parent;
  if (top < 0 || k->st[top].next != nest)
    return sh_sched_err(k, "compute_at of loop %s at %s: %s is not in the statement right before %s", nn, na,
                        na, nn);
  /* nest would run once per iteration of a loop around at (on a product
   * whose other iterations' part is not there yet), or only when a
   * condition around at holds */
  for (sh_lir_stmt p = k->st[at].parent; p >= 0 && p != k->st[top].parent; p = k->st[p].parent) {
    if (k->st[p].kind == SH_LIR_S_LOOP)
      return sh_sched_err(k, "compute_at of loop %s at %s: %s is inside loop %s (%s would run once per its "
                             "iteration)", nn, na, na, k->vars[k->st[p].var].name, nn);
    if (k->st[p].kind == SH_LIR_S_IF)
      return sh_sched_err(k, "compute_at of loop %s at %s: %s is inside a condition", nn, na, na);
  }
  sh_lir_expr E = k->st[nest].ext;
  sh_lir_expr blocks = sh_lir_simplify(
      k, sh_lir_bin(k, SH_LIR_OP_DIV, sh_lir_add(k, E, sh_lir_int(k, rows - 1)), sh_lir_int(k, rows)));
  if (!sh_lir_expr_eq(k, blocks, sh_lir_simplify(k, k->st[at].ext)))
    return sh_sched_err(k, "compute_at of loop %s at %s: %s does not run over blocks of %lld of %s's rows", nn,
                        na, na, (long long)rows, nn);
  accs *P = collect(k, top), *C = P ? collect(k, nest) : NULL;
  sheaf_status st = SHEAF_OK;
  if (!P || !C) st = k->err;
  else if (P->overflow || C->overflow)
    st = sh_sched_err(k, "compute_at of loop %s at %s: more than 1024 accesses", nn, na);
  /* what one side writes and the other touches is owned per block */
  for (int i = 0; !st && i < P->n + C->n; i++) {
    sh_lir_buf b = i < P->n ? P->a[i].buf : C->a[i - P->n].buf;
    if (!touches(P, b) || !touches(C, b) || (!writes(P, b) && !writes(C, b))) continue;
    if (!owned_per_block(k, P, C, b, at, rows, k->st[nest].var))
      st = sh_sched_err(k, "compute_at of loop %s at %s: %s is not accessed per block of rows (a "
                           "dependence could cross blocks)", nn, na, k->bufs[b].name);
  }
  if (P) sh_free(k->ctx, P, sizeof *P);
  if (C) sh_free(k->ctx, C, sizeof *C);
  if (st) return st;
  /* nest -> n_o, n_i (one guard around the body); n_o becomes at */
  sh_lir_stmt no, ni;
  if ((st = sh_sched_split(k, nest, rows, SH_SCHED_TAIL_GUARD_TOP, &no, &ni, NULL))) return st;
  sh_lir_var vo = k->st[no].var;
  sh_lir_expr va = sh_lir_v(k, k->st[at].var);
  sh_lir_subst_stmt(k, ni, 1, &vo, &va);
  sh_lir_detach(k, ni);
  sh_lir_append(k, at, ni);
  sh_lir_detach(k, no);
  k->vars[vo].loop = SH_LIR_NONE;
  if (inner) *inner = ni;
  return k->err;
}

sheaf_status sh_sched_shrink(sh_lir_kernel *k, sh_lir_buf T, sh_lir_stmt at) {
  if (k->err) return k->err;
  if (T < 0 || T >= k->n_bufs) return sh_sched_err(k, "shrink: no buffer %d", (int)T);
  sh_lir_bufinfo *bi = &k->bufs[T];
  if (!sh_sched_is_loop(k, at)) return sh_sched_err(k, "shrink of %s: statement %d is not a loop", bi->name, (int)at);
  const char *na = k->vars[k->st[at].var].name;
  if (bi->role != SH_LIR_TEMP || bi->inlined || bi->per_task || bi->layout != SH_LIR_LAYOUT_DENSE)
    return sh_sched_err(k, "shrink of %s at %s: not a dense temporary (or already shrunk)", bi->name, na);
  if (bi->scoped) /* its alloc sizes one copy: the tasks' copies per thread would lie past it */
    return sh_sched_err(k, "shrink of %s at %s: a scoped temporary (allocated by its alloc statement)", bi->name,
                        na);
  if (k->st[at].annot == SH_LIR_VECTOR || k->st[at].annot == SH_LIR_UNROLL)
    return sh_sched_err(k, "shrink of %s at %s: %s is a vector or unrolled loop", bi->name, na, na);
  for (sh_lir_stmt p = k->st[at].parent; p >= 0; p = k->st[p].parent)
    if (k->st[p].kind == SH_LIR_S_LOOP && k->st[p].annot == SH_LIR_PARALLEL && k->st[at].annot == SH_LIR_PARALLEL)
      return sh_sched_err(k, "shrink of %s at %s: nested parallel loops", bi->name, na);
  accs *all = collect(k, k->root);
  if (!all) return k->err;
  sheaf_status st = SHEAF_OK;
  int dim = -1;
  int64_t R = 0;
  if (all->overflow) st = sh_sched_err(k, "shrink of %s at %s: more than 1024 accesses", bi->name, na);
  for (int i = 0; i < all->n && !st; i++)
    if (all->a[i].buf == T && (!sh_lir_within(k, all->a[i].at, at) || all->a[i].at == at))
      st = sh_sched_err(k, "shrink of %s at %s: %s is accessed outside %s's body", bi->name, na, bi->name, na);
  /* a loop around at runs at's nest again: each run must own its part of T
   * (one dimension exactly that loop's variable at every access), else the
   * block a run leaves would be overwritten before the next run reads it */
  for (sh_lir_stmt p = k->st[at].parent; p >= 0 && !st; p = k->st[p].parent) {
    if (k->st[p].kind != SH_LIR_S_LOOP) continue;
    bool owned = false;
    for (int d = 0; d < bi->rank && !owned; d++) {
      owned = true;
      for (int i = 0; i < all->n && owned; i++) {
        const acc *a = &all->a[i];
        if (a->buf != T) continue;
        sh_lir_expr e = d < a->n ? sh_lir_simplify(k, k->list[a->list + d]) : SH_LIR_NONE;
        owned = e >= 0 && k->ex[e].kind == SH_LIR_E_VAR && k->ex[e].a == k->st[p].var;
      }
    }
    if (!owned)
      st = sh_sched_err(k, "shrink of %s at %s: its block would be shared by the iterations of loop %s around %s",
                        bi->name, na, k->vars[k->st[p].var].name, na);
  }
  for (int d = 0; d < bi->rank && !st && dim < 0; d++) {
    int64_t coef = 0;
    bool ok = true, any = false;
    for (int i = 0; i < all->n && ok; i++) {
      const acc *a = &all->a[i];
      if (a->buf != T) continue;
      any = true;
      int64_t c;
      ok = d < a->n && sh_lir_affine(k, k->list[a->list + d], k->st[at].var, &c, NULL) && c > 0 &&
           (coef == 0 || c == coef);
      if (ok) coef = c;
      ok = ok && block_row(k, k->list[a->list + d], at, coef, NULL);
    }
    if (ok && any) dim = d, R = coef;
  }
  if (!st && dim < 0)
    st = sh_sched_err(k, "shrink of %s at %s: no dimension of %s is indexed by %s's block of rows (R·%s + "
                         "[0, R)) at every access", bi->name, na, bi->name, na, na);
  if (!st && bi->rank > 0 && (R > (int64_t)1 << 20))
    st = sh_sched_err(k, "shrink of %s at %s: a block of %lld rows", bi->name, na, (long long)R);
  if (st) {
    sh_free(k->ctx, all, sizeof *all);
    return st;
  }
  /* every index list of T: dimension dim loses its block (R·v_at) */
  for (int i = 0; i < all->n; i++) {
    const acc *a = &all->a[i];
    bool seen = false; /* an expression (its index list) shared by two statements: once */
    for (int j = 0; j < i && !seen; j++) seen = all->a[j].list == a->list && all->a[j].buf == T;
    if (a->buf != T || seen) continue;
    sh_lir_expr rest = SH_LIR_NONE;
    if (!block_row(k, k->list[a->list + dim], at, R, &rest)) break; /* checked above */
    k->list[a->list + dim] = rest;
  }
  sh_free(k->ctx, all, sizeof *all);
  bi->dims[dim] = sh_lir_int(k, R);
  bi->pad[dim] = 1;
  bi->per_task = true;
  return k->err;
}

/* ------------------------------------------------- the default schedule */

/* next: a row nest with a reduction (or reading C where no tile store can:
 * the gates of an LSTM cell), right after the GEMM nest prod, over its
 * rows, the only reader of the product C (lir_sched_int.h). */

bool sh_sched_row_consumer(const sh_lir_kernel *k, sh_lir_stmt prod, sh_lir_buf C, sh_lir_stmt next) {
  if (next < 0 || k->st[prod].next != next || !sh_sched_is_loop(k, prod) || !sh_sched_is_loop(k, next) ||
      k->st[next].annot != SH_LIR_SERIAL || !sh_lir_expr_eq(k, k->st[prod].ext, k->st[next].ext) ||
      k->bufs[C].role != SH_LIR_TEMP || k->bufs[C].inlined || k->bufs[C].layout != SH_LIR_LAYOUT_DENSE)
    return false;
  accs *s = sh_calloc(k->ctx, 1, sizeof *s);
  if (!s) return false;
  see_tree(k, k->root, s);
  bool read = false, ok = !s->overflow;
  for (int i = 0; i < s->n && ok; i++) {
    const acc *a = &s->a[i];
    if (a->buf != C) continue;
    if (sh_lir_within(k, a->at, next)) read |= !a->write;
    else ok = sh_lir_within(k, a->at, prod);
  }
  /* a loop extent read from memory (a ragged row): not a dense row nest;
   * a nest with no reduction is a pointwise epilogue (fused into the GEMM's
   * tile store instead) unless the tile's store cannot hold it: C read by
   * two stores, or at another element than the reading store's (the
   * TreeLSTM cell's gates: z(n, i), z(n, i + H), ... of one row) */
  bool reduces = false, other = false;
  sh_lir_stmt reader = SH_LIR_NONE;
  for (int i = 0; i < s->n && ok; i++) {
    const acc *a = &s->a[i];
    if (!sh_lir_within(k, a->at, next)) continue;
    if (k->st[a->at].kind == SH_LIR_S_LOOP) ok = false;
    if (a->write && k->st[a->at].combine != SH_LIR_COMBINE_NONE) reduces = true;
    if (a->buf != C || a->write || k->st[a->at].kind != SH_LIR_S_STORE) continue;
    if (reader >= 0 && reader != a->at) other = true;
    reader = a->at;
    const sh_lir_snode *st = &k->st[a->at];
    if (a->n != st->nidx) other = true;
    for (int d = 0; d < a->n && !other; d++)
      other = !sh_lir_expr_eq(k, k->list[a->list + d], k->list[st->idx + d]);
  }
  ok = ok && (reduces || other);
  sh_free(k->ctx, s, sizeof *s);
  return ok && read;
}

bool sh_sched_row_fuse(sh_lir_kernel *k, sh_lir_buf C, sh_lir_stmt at, sh_lir_stmt cons, int64_t rows) {
  sheaf_status saved = k->err;
  if (sh_sched_compute_at(k, cons, at, rows, NULL)) {
    k->err = saved;
    return false;
  }
  if (sh_sched_shrink(k, C, at)) k->err = saved; /* the product kept whole */
  if (sh_sched_parallel(k, at)) k->err = saved;
  return true;
}
