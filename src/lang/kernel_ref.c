/*
 * kernel_ref.c — the scalar reference evaluator of checked kernels (see
 * kernel_ref.h for the precision, the argument checks and the layout).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/arena.h"
#include "lang/kernel_ref.h"

/* Where the elements of one tensor are, for one run. */
typedef struct layout {
  int rank;
  int64_t ext[SH_KERNEL_MAX_RANK];       /* affine extents (ragged: -1) */
  const int32_t *len[SH_KERNEL_MAX_RANK]; /* ragged dimensions: the lengths */
  int outer;                             /* ragged_outer, or -1 */
  int64_t *prefix;                       /* ragged: prefix[0 .. ext[outer]] */
  int64_t numel;
} layout;

typedef struct rt {
  sheaf_ctx *ctx;
  const sh_kernel *k;
  sh_arena arena;
  int64_t *sizes;
  layout *lay;  /* per tensor */
  double **val; /* per tensor */
  const int32_t **i32; /* per i32 input: its values (lengths) */
  const sh_kstmt *s;
  int64_t *ix;  /* the statement's index values */
  sheaf_status st;
} rt;

#define REF_MAX_NUMEL ((int64_t)1 << 40)

static int64_t aff_eval(const sh_kaff *a, const int64_t *sizes, bool *overflow) {
  int64_t v = a->c;
  for (int i = 0; i < a->n; i++) {
    int64_t t;
    if (__builtin_mul_overflow(a->t[i].coef, sizes[a->t[i].size], &t) ||
        __builtin_add_overflow(v, t, &v))
      *overflow = true;
  }
  return v;
}

static void aff_print(sheaf_ctx *ctx, char *buf, size_t cap, const sh_kernel *k, const sh_kext *e) {
  sh_buf b;
  sh_buf_init(&b, ctx);
  sh_kext_print(&b, k, e);
  snprintf(buf, cap, "%s", sh_buf_status(&b) == SHEAF_OK ? sh_buf_cstr(&b) : "?");
  sh_buf_free(&b);
}

/* "N = 4, D = 8": the sizes an extent mentions, for messages. */
static void sizes_of(char *buf, size_t cap, const sh_kernel *k, const sh_kext *e, const int64_t *sizes) {
  size_t n = 0;
  buf[0] = '\0';
  for (int i = 0; e->kind == SH_KEXT_AFFINE && i < e->aff.n && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%s = %lld", i ? ", " : "", k->sizes[e->aff.t[i].size].name,
                          (long long)sizes[e->aff.t[i].size]);
}

/* Whether an extent is one size alone (N). */
static bool lone_size(const sh_kext *e) {
  return e->kind == SH_KEXT_AFFINE && e->aff.n == 1 && e->aff.c == 0 && e->aff.t[0].coef == 1;
}

/* The layout of tensor t (lengths of ragged dims: the values of their inputs). */
static sheaf_status make_layout(rt *R, int ti, const sh_kref_arg *in) {
  const sh_kernel *k = R->k;
  const sh_ktensor *t = &k->tensors[ti];
  layout *L = &R->lay[ti];
  L->rank = t->rank;
  L->outer = t->ragged_outer;
  for (int d = 0; d < t->rank; d++) {
    const sh_kext *e = &t->dims[d];
    if (e->kind == SH_KEXT_RAGGED) {
      L->ext[d] = -1;
      L->len[d] = (const int32_t *)in[e->len].data;
      continue;
    }
    bool ovf = false;
    L->ext[d] = aff_eval(&e->aff, R->sizes, &ovf);
    if (ovf || L->ext[d] < 0 || L->ext[d] > REF_MAX_NUMEL) {
      char ex[160], sz[200];
      aff_print(R->ctx, ex, sizeof ex, k, e);
      sizes_of(sz, sizeof sz, k, e, R->sizes);
      return sh_fail(R->ctx, SHEAF_ERR_SHAPE, "kernel '%s': dimension %d of '%s', %s, is %s (%s)", k->name,
                     d, t->name, ex, !ovf && L->ext[d] < 0 ? "negative" : "too large", sz);
    }
  }
  int64_t head = 1, total = 1;
  int j = L->outer;
  for (int d = 0; d < (j < 0 ? t->rank : j); d++)
    if (__builtin_mul_overflow(head, L->ext[d], &head) || head > REF_MAX_NUMEL) goto too_large;
  if (j >= 0) {
    int64_t n = L->ext[j];
    L->prefix = sh_arena_alloc(&R->arena, (size_t)(n + 1) * sizeof *L->prefix);
    if (!L->prefix) return SHEAF_ERR_NOMEM;
    L->prefix[0] = 0;
    for (int64_t x = 0; x < n; x++) {
      int64_t s = 1;
      for (int d = j + 1; d < t->rank; d++) {
        int64_t e = L->ext[d] >= 0 ? L->ext[d] : L->len[d][x];
        if (__builtin_mul_overflow(s, e, &s) || s > REF_MAX_NUMEL) goto too_large;
      }
      if (__builtin_add_overflow(L->prefix[x], s, &L->prefix[x + 1]) || L->prefix[x + 1] > REF_MAX_NUMEL)
        goto too_large;
    }
    total = L->prefix[n];
  }
  if (__builtin_mul_overflow(head, total, &L->numel) || L->numel > REF_MAX_NUMEL) goto too_large;
  return SHEAF_OK;
too_large:
  return sh_fail(R->ctx, SHEAF_ERR_SHAPE, "kernel '%s': tensor '%s' would be too large", k->name, t->name);
}

static int64_t offset(const layout *L, const int64_t *i) {
  int j = L->outer;
  if (j < 0) {
    int64_t o = 0;
    for (int d = 0; d < L->rank; d++) o = o * L->ext[d] + i[d];
    return o;
  }
  int64_t head = 0, inner = 0, t = i[j];
  for (int d = 0; d < j; d++) head = head * L->ext[d] + i[d];
  for (int d = j + 1; d < L->rank; d++) inner = inner * (L->ext[d] >= 0 ? L->ext[d] : L->len[d][t]) + i[d];
  return head * L->prefix[L->ext[j]] + L->prefix[t] + inner;
}

/* Whether index i is inside the tensor (each coordinate within its extent). */
static bool inside(const layout *L, const int64_t *i) {
  for (int d = 0; d < L->rank; d++) {
    if (i[d] < 0) return false;
    if (L->ext[d] >= 0 ? i[d] >= L->ext[d] : (i[L->outer] < 0 || i[L->outer] >= L->ext[L->outer] ||
                                              i[d] >= L->len[d][i[L->outer]]))
      return false;
  }
  return true;
}

/* ------------------------------------------------------------ arguments */

sheaf_status sh_kernel_ref_bind(sheaf_ctx *ctx, const sh_kernel *k, const sh_kref_arg *in, int n_in,
                                int64_t *sizes) {
  if (n_in != k->n_inputs)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "kernel '%s' takes %d inputs, not %d", k->name,
                   k->n_inputs, n_in);
  for (int i = 0; i < n_in; i++) {
    const sh_ktensor *t = &k->tensors[i];
    if (in[i].rank != t->rank || (t->rank && !in[i].shape) || (!in[i].data && in[i].numel))
      return sh_fail(ctx, SHEAF_ERR_SHAPE,
                     "kernel '%s': input %d ('%s') has rank %d, but it is declared with %d",
                     k->name, i + 1, t->name, in[i].rank, t->rank);
  }
  for (int s = 0; s < k->n_sizes; s++) {
    const sh_ksize *z = &k->sizes[s];
    sizes[s] = in[z->tensor].shape[z->dim];
    if (sizes[s] < 1)
      return sh_fail(ctx, SHEAF_ERR_SHAPE,
                     "kernel '%s': size %s = %lld (dimension %d of input '%s'): sizes are at least 1",
                     k->name, z->name, (long long)sizes[s], z->dim, k->tensors[z->tensor].name);
  }
  for (int i = 0; i < n_in; i++) {
    const sh_ktensor *t = &k->tensors[i];
    for (int d = 0; d < t->rank; d++) {
      const sh_kext *e = &t->dims[d];
      if (e->kind == SH_KEXT_RAGGED) continue;
      bool ovf = false;
      int64_t want = aff_eval(&e->aff, sizes, &ovf);
      if (!ovf && want == in[i].shape[d]) continue;
      char ex[160], sz[200];
      aff_print(ctx, ex, sizeof ex, k, e);
      sizes_of(sz, sizeof sz, k, e, sizes);
      if (lone_size(e))
        return sh_fail(ctx, SHEAF_ERR_SHAPE,
                       "kernel '%s': dimension %d of input '%s' is %lld, but it is declared %s",
                       k->name, d, t->name, (long long)in[i].shape[d], sz);
      return sh_fail(ctx, SHEAF_ERR_SHAPE,
                     "kernel '%s': dimension %d of input '%s' is %lld, but it is declared %s = %lld (%s)",
                     k->name, d, t->name, (long long)in[i].shape[d], ex, (long long)want, sz);
    }
  }
  /* lengths: every i32 input a ragged extent reads */
  for (int i = 0; i < k->n_tensors; i++) {
    const sh_ktensor *t = &k->tensors[i];
    for (int d = 0; d < t->rank; d++) {
      if (t->dims[d].kind != SH_KEXT_RAGGED) continue;
      const sh_kref_arg *L = &in[t->dims[d].len];
      const int32_t *v = (const int32_t *)L->data;
      for (size_t x = 0; x < L->numel; x++)
        if (v[x] < 0)
          return sh_fail(ctx, SHEAF_ERR_SHAPE, "kernel '%s': length %s[%zu] = %d is negative", k->name,
                         k->tensors[t->dims[d].len].name, x, (int)v[x]);
    }
  }
  return SHEAF_OK;
}

/* Binds, checks the element counts (of ragged inputs only when counts),
 * and lays out every tensor. */
static sheaf_status prepare(rt *R, const sh_kref_arg *in, int n_in, bool counts) {
  const sh_kernel *k = R->k;
  R->sizes = sh_arena_alloc(&R->arena, (size_t)(k->n_sizes + 1) * sizeof *R->sizes);
  R->lay = sh_arena_calloc(&R->arena, (size_t)k->n_tensors + 1, sizeof *R->lay);
  if (!R->sizes || !R->lay) return SHEAF_ERR_NOMEM;
  sheaf_status st = sh_kernel_ref_bind(R->ctx, k, in, n_in, R->sizes);
  if (st != SHEAF_OK) return st;
  /* the inputs' element counts: dense ones (lengths among them) before ragged ones */
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < k->n_inputs; i++) {
      if ((k->tensors[i].ragged_outer >= 0) != (pass == 1)) continue;
      if ((st = make_layout(R, i, in)) != SHEAF_OK) return st;
      if ((counts || pass == 0) && (int64_t)in[i].numel != R->lay[i].numel)
        return sh_fail(R->ctx, SHEAF_ERR_SHAPE,
                       "kernel '%s': input '%s' has %zu elements, but its shape needs %lld", k->name,
                       k->tensors[i].name, in[i].numel, (long long)R->lay[i].numel);
    }
  for (int i = k->n_inputs; i < k->n_tensors; i++)
    if ((st = make_layout(R, i, in)) != SHEAF_OK) return st;
  return SHEAF_OK;
}

sheaf_status sh_kernel_ref_numel(sheaf_ctx *ctx, const sh_kernel *k, const sh_kref_arg *in, int n_in,
                                 int tensor, size_t *numel) {
  *numel = 0;
  if (tensor < 0 || tensor >= k->n_tensors)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "kernel '%s' has no tensor %d", k->name, tensor);
  rt R = {.ctx = ctx, .k = k};
  sh_arena_init(&R.arena, ctx, 0);
  sheaf_status st = prepare(&R, in, n_in, false);
  if (st == SHEAF_OK) *numel = (size_t)R.lay[tensor].numel;
  sh_arena_destroy(&R.arena);
  return st;
}

/* ------------------------------------------------------------ evaluation */

static double fmax_nan(double a, double b) { return isnan(a) || isnan(b) ? NAN : a > b ? a : b; }
static double fmin_nan(double a, double b) { return isnan(a) || isnan(b) ? NAN : a < b ? a : b; }

static double eval(rt *R, const sh_kexpr *x) {
  switch (x->kind) {
  case SH_KEXPR_CONST: return x->value;
  case SH_KEXPR_SIZE: return (double)R->sizes[x->size];
  case SH_KEXPR_INDEX: return (double)R->ix[x->var];
  case SH_KEXPR_ACCESS: {
    const layout *L = &R->lay[x->tensor];
    int64_t i[SH_KERNEL_MAX_RANK];
    for (int d = 0; d < L->rank; d++) {
      if (x->idx[d].gather) { /* a gather: its value must lie in the dimension */
        const sh_kexpr *g = x->idx[d].gather;
        double v = eval(R, g);
        if (!(v >= 0 && v < (double)L->ext[d])) { /* sh_kernel_gather_check ran first */
          if (R->st == SHEAF_OK)
            R->st = sh_fail(R->ctx, SHEAF_ERR_INTERNAL, "kernel '%s': line %d: '%s' gathered out of bounds",
                            R->k->name, x->line, R->k->tensors[x->tensor].name);
          return 0.0;
        }
        i[d] = (int64_t)v;
        continue;
      }
      i[d] = (x->idx[d].var >= 0 ? R->ix[x->idx[d].var] : 0) + x->idx[d].off;
    }
    if (!inside(L, i)) {
      if (R->st == SHEAF_OK)
        R->st = sh_fail(R->ctx, SHEAF_ERR_INTERNAL, "kernel '%s': line %d: '%s' read out of bounds",
                        R->k->name, x->line, R->k->tensors[x->tensor].name);
      return 0.0;
    }
    return R->val[x->tensor][offset(L, i)];
  }
  case SH_KEXPR_OP: break;
  }
  double a = eval(R, x->a);
  double b = x->b ? eval(R, x->b) : 0.0;
  switch (x->op) {
  case SH_KOP_NEG: return -a;
  case SH_KOP_EXP: return exp(a);
  case SH_KOP_LOG: return log(a);
  case SH_KOP_TANH: return tanh(a);
  case SH_KOP_SIGMOID: return 1.0 / (1.0 + exp(-a));
  case SH_KOP_GELU: return 0.5 * a * (1.0 + erf(a * 0.70710678118654752440));
  case SH_KOP_RELU: return a > 0.0 ? a : isnan(a) ? a : 0.0;
  case SH_KOP_SQRT: return sqrt(a);
  case SH_KOP_RSQRT: return 1.0 / sqrt(a);
  case SH_KOP_ABS: return fabs(a);
  case SH_KOP_SOFTPLUS: return a > 20.0 ? a : log1p(exp(a));
  case SH_KOP_ERF: return erf(a);
  case SH_KOP_FLOAT: return a;
  case SH_KOP_ADD: return a + b;
  case SH_KOP_SUB: return a - b;
  case SH_KOP_MUL: return a * b;
  case SH_KOP_DIV: return a / b;
  case SH_KOP_MIN: return fmin_nan(a, b);
  case SH_KOP_MAX: return fmax_nan(a, b);
  case SH_KOP_POW: return pow(a, b);
  case SH_KOP_LT: return a < b;
  case SH_KOP_LE: return a <= b;
  case SH_KOP_GT: return a > b;
  case SH_KOP_GE: return a >= b;
  case SH_KOP_EQ: return a == b;
  case SH_KOP_NE: return a != b;
  case SH_KOP_SELECT: return a != 0.0 ? b : eval(R, x->c);
  case SH_KOP_COUNT_: break;
  }
  return NAN;
}

/* The extent of index v at the current values of the earlier indices. */
static int64_t extent(rt *R, const sh_kindex *v) {
  const sh_kext *e = &v->range;
  if (e->kind == SH_KEXT_RAGGED) {
    int64_t t = R->ix[e->outer];
    if (t < 0 || t >= R->lay[e->len].ext[0]) {
      if (R->st == SHEAF_OK)
        R->st = sh_fail(R->ctx, SHEAF_ERR_INTERNAL, "kernel '%s': line %d: length %s[%lld] out of bounds",
                        R->k->name, R->s->line, R->k->tensors[e->len].name, (long long)t);
      return 0;
    }
    return R->i32[e->len][t];
  }
  bool ovf = false;
  int64_t n = aff_eval(&e->aff, R->sizes, &ovf);
  if ((ovf || n < 0) && R->st == SHEAF_OK) {
    char ex[160], sz[200];
    aff_print(R->ctx, ex, sizeof ex, R->k, e);
    sizes_of(sz, sizeof sz, R->k, e, R->sizes);
    R->st = sh_fail(R->ctx, SHEAF_ERR_SHAPE,
                    "kernel '%s': line %d: the range 0..%s of index '%s' is %s (%s)",
                    R->k->name, R->s->line, ex, v->name, ovf ? "too large" : "negative", sz);
  }
  return R->st == SHEAF_OK ? n : 0;
}

static double combine(sh_kred r, double acc, double v) {
  switch (r) {
  case SH_KRED_ADD: return acc + v;
  case SH_KRED_MUL: return acc * v;
  case SH_KRED_MAX: return fmax_nan(acc, v);
  case SH_KRED_MIN: return fmin_nan(acc, v);
  case SH_KRED_ASSIGN: break;
  }
  return v;
}

/* The reduction indices d .. n_idx at one point of the left-hand side. */
static void reduce_loops(rt *R, int d, double *acc) {
  const sh_kstmt *s = R->s;
  if (d == s->n_idx) {
    *acc = combine(s->red, *acc, eval(R, s->rhs));
    return;
  }
  int64_t n = extent(R, &s->idx[d]);
  for (R->ix[d] = 0; R->ix[d] < n && R->st == SHEAF_OK; R->ix[d]++) reduce_loops(R, d + 1, acc);
}

/* The free indices d .. n_free, then the reduction at each point. */
static void free_loops(rt *R, int d) {
  const sh_kstmt *s = R->s;
  if (d < s->n_free) {
    int64_t n = extent(R, &s->idx[d]);
    for (R->ix[d] = 0; R->ix[d] < n && R->st == SHEAF_OK; R->ix[d]++) free_loops(R, d + 1);
    return;
  }
  const layout *L = &R->lay[s->lhs];
  if (!inside(L, R->ix)) {
    R->st = sh_fail(R->ctx, SHEAF_ERR_INTERNAL, "kernel '%s': line %d: '%s' written out of bounds",
                    R->k->name, s->line, R->k->tensors[s->lhs].name);
    return;
  }
  double *cell = &R->val[s->lhs][offset(L, R->ix)];
  double acc = s->red == SH_KRED_ASSIGN ? 0.0 : s->init ? sh_kred_identity(s->red) : *cell;
  reduce_loops(R, d, &acc);
  *cell = acc;
}

sheaf_status sh_kernel_ref_run(sheaf_ctx *ctx, const sh_kernel *k, const sh_kref_arg *in, int n_in,
                               const sh_kref_out *out, int n_out) {
  if (n_out != k->n_outputs)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "kernel '%s' has %d outputs, not %d", k->name,
                   k->n_outputs, n_out);
  rt R = {.ctx = ctx, .k = k};
  sh_arena_init(&R.arena, ctx, 0);
  sheaf_status st = prepare(&R, in, n_in, true);
  R.val = sh_arena_calloc(&R.arena, (size_t)k->n_tensors + 1, sizeof *R.val);
  R.i32 = sh_arena_calloc(&R.arena, (size_t)k->n_tensors + 1, sizeof *R.i32);
  int max_idx = SH_KERNEL_MAX_RANK;
  for (int i = 0; i < k->n_stmts; i++)
    if (k->stmts[i].n_idx > max_idx) max_idx = k->stmts[i].n_idx;
  R.ix = sh_arena_calloc(&R.arena, (size_t)max_idx, sizeof *R.ix);
  if (st == SHEAF_OK && (!R.val || !R.i32 || !R.ix)) st = SHEAF_ERR_NOMEM;
  for (int r = 0; r < n_out && st == SHEAF_OK; r++) {
    const sh_ktensor *t = &k->tensors[k->n_inputs + r];
    int64_t want = R.lay[k->n_inputs + r].numel;
    if ((int64_t)out[r].numel != want || (want && !out[r].data))
      st = sh_fail(ctx, SHEAF_ERR_SHAPE,
                   "kernel '%s': output '%s' has room for %zu elements, but needs %lld",
                   k->name, t->name, out[r].numel, (long long)want);
  }
  for (int i = 0; i < k->n_tensors && st == SHEAF_OK; i++) {
    size_t n = (size_t)R.lay[i].numel;
    if (!(R.val[i] = sh_arena_calloc(&R.arena, n + 1, sizeof *R.val[i]))) {
      st = SHEAF_ERR_NOMEM;
      break;
    }
    if (i >= k->n_inputs) continue;
    if (k->tensors[i].dtype == SH_KDTYPE_I32) {
      R.i32[i] = (const int32_t *)in[i].data;
      for (size_t x = 0; x < n; x++) R.val[i][x] = R.i32[i][x];
    } else {
      const float *f = (const float *)in[i].data;
      for (size_t x = 0; x < n; x++) R.val[i][x] = f[x];
    }
  }
  if (st == SHEAF_OK && sh_kernel_has_gather(k)) { /* gather indices in range, before anything runs */
    const void **in_data = sh_arena_calloc(&R.arena, (size_t)n_in + 1, sizeof *in_data);
    if (!in_data) st = SHEAF_ERR_NOMEM;
    for (int i = 0; i < n_in && st == SHEAF_OK; i++) in_data[i] = in[i].data;
    if (st == SHEAF_OK) st = sh_kernel_gather_check(ctx, k, R.sizes, (const void *const *)in_data);
  }
  for (int i = 0; i < k->n_stmts && st == SHEAF_OK; i++) {
    R.s = &k->stmts[i];
    R.st = SHEAF_OK;
    free_loops(&R, 0);
    st = R.st;
  }
  for (int r = 0; r < n_out && st == SHEAF_OK; r++) {
    const double *v = R.val[k->n_inputs + r];
    for (size_t x = 0; x < out[r].numel; x++) out[r].data[x] = (float)v[x];
  }
  sh_arena_destroy(&R.arena);
  return st;
}
