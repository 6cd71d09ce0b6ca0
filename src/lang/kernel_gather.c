/*
 * kernel_gather.c — the run-time rule of gather indices (`emb(ids(n), e)`,
 * kernel.h sh_kidx.gather): every value of an index tensor lies in 0 ..
 * extent-1 of each dimension it indexes. sh_kernel_gather_check scans the
 * index tensors once per call, before anything is computed (the scalar
 * reference runs it first; the kernel API runs it to name the bad value when
 * generated code reports one); the loop IR carries the same checks
 * (sh_lir_index_check) for the interpreter and the emitted C.
 */
#include <stdio.h>

#include "lang/kernel.h"

static int64_t aff_value(const sh_kaff *a, const int64_t *sizes) {
  int64_t v = a->c;
  for (int i = 0; i < a->n; i++) v += a->t[i].coef * sizes[a->t[i].size];
  return v;
}

/* Element count of a dense tensor at these sizes. */
static int64_t dense_numel(const sh_ktensor *t, const int64_t *sizes) {
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++) n *= aff_value(&t->dims[d].aff, sizes);
  return n;
}

void sh_kernel_gather_position(const sh_ktensor *g, const int64_t *sizes, int64_t flat, char *buf,
                               size_t cap) {
  int64_t ix[SH_KERNEL_MAX_RANK] = {0};
  for (int d = g->rank - 1; d >= 0; d--) {
    int64_t e = aff_value(&g->dims[d].aff, sizes);
    ix[d] = e > 0 ? flat % e : 0;
    flat = e > 0 ? flat / e : 0;
  }
  size_t n = (size_t)snprintf(buf, cap, "%s[", g->name);
  for (int d = 0; d < g->rank && n < cap; d++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)ix[d]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

static sheaf_status check_expr(sheaf_ctx *ctx, const sh_kernel *k, const sh_kexpr *e,
                               const int64_t *sizes, const void *const *in_data) {
  if (!e) return SHEAF_OK;
  if (e->kind == SH_KEXPR_ACCESS) {
    const sh_ktensor *t = &k->tensors[e->tensor];
    for (int d = 0; d < t->rank; d++) {
      const sh_kexpr *g = e->idx[d].gather;
      if (!g) continue;
      const sh_ktensor *G = &k->tensors[g->tensor];
      int64_t ext = aff_value(&t->dims[d].aff, sizes), n = dense_numel(G, sizes);
      const int32_t *v = in_data[g->tensor];
      for (int64_t i = 0; i < n; i++) {
        if (v[i] >= 0 && v[i] < ext) continue;
        char pos[200];
        sh_kernel_gather_position(G, sizes, i, pos, sizeof pos);
        return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                       "kernel '%s': %s = %d is outside 0 .. %lld (the extent of %s's dimension %d)",
                       k->name, pos, (int)v[i], (long long)(ext - 1), t->name, d);
      }
    }
  }
  sheaf_status st = check_expr(ctx, k, e->a, sizes, in_data);
  if (!st) st = check_expr(ctx, k, e->b, sizes, in_data);
  if (!st) st = check_expr(ctx, k, e->c, sizes, in_data);
  return st;
}

sheaf_status sh_kernel_gather_check(sheaf_ctx *ctx, const sh_kernel *k, const int64_t *sizes,
                                    const void *const *in_data) {
  for (int s = 0; s < k->n_stmts; s++) {
    sheaf_status st = check_expr(ctx, k, k->stmts[s].rhs, sizes, in_data);
    if (st) return st;
  }
  return SHEAF_OK;
}

static int64_t min_ext(const sh_kernel *k, const sh_kexpr *e, int input, const int64_t *sizes) {
  if (!e) return -1;
  int64_t m = -1;
  if (e->kind == SH_KEXPR_ACCESS)
    for (int d = 0; d < k->tensors[e->tensor].rank; d++)
      if (e->idx[d].gather && e->idx[d].gather->tensor == input) {
        int64_t x = aff_value(&k->tensors[e->tensor].dims[d].aff, sizes);
        if (m < 0 || x < m) m = x;
      }
  const sh_kexpr *kids[3] = {e->a, e->b, e->c};
  for (int i = 0; i < 3; i++) {
    int64_t x = min_ext(k, kids[i], input, sizes);
    if (x >= 0 && (m < 0 || x < m)) m = x;
  }
  return m;
}

int64_t sh_kernel_gather_extent(const sh_kernel *k, int input, const int64_t *sizes) {
  int64_t m = -1;
  for (int s = 0; s < k->n_stmts; s++) {
    int64_t x = min_ext(k, k->stmts[s].rhs, input, sizes);
    if (x >= 0 && (m < 0 || x < m)) m = x;
  }
  return m;
}

bool sh_kernel_has_gather(const sh_kernel *k) {
  for (int s = 0; s < k->n_stmts; s++) {
    const sh_kexpr *stack[256];
    int n = 0;
    stack[n++] = k->stmts[s].rhs;
    while (n > 0) {
      const sh_kexpr *e = stack[--n];
      if (!e) continue;
      if (e->kind == SH_KEXPR_ACCESS)
        for (int d = 0; d < k->tensors[e->tensor].rank; d++)
          if (e->idx[d].gather) return true;
      if (n + 3 > 256) return true; /* too deep to tell: assume one (only costs a scan) */
      stack[n++] = e->a, stack[n++] = e->b, stack[n++] = e->c;
    }
  }
  return false;
}
