/*
 * lir_eval.c — the reference interpreter of the loop IR: runs a kernel
 * statement by statement in f32 (libm for the transcendental functions,
 * like the emitted scalar level), checking every index against its
 * buffer's storage. Tests run it before and after each schedule primitive:
 * a primitive must not change what the kernel computes. Temporaries and
 * locals start as NaN, so reading one before writing it shows.
 */
#include "codegen/lir_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kernels/vmath.h"

typedef struct run {
  sh_lir_kernel *k;
  const int64_t *sizes;
  int64_t *vals;     /* per variable */
  void **base;       /* per buffer: data */
  void *const **rows; /* per buffer: ROWS access */
  int64_t *ld;       /* per buffer: LD access */
  size_t *bytes;     /* per buffer: owned allocation (temps, locals), else 0 */
  bool failed;
} run;

static sheaf_status rfail(run *r, const char *fmt, ...) SH_PRINTF(2, 3);
static sheaf_status rfail(run *r, const char *fmt, ...) {
  if (!r->failed) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sh_fail(r->k->ctx, SHEAF_ERR_INVALID_ARG, "kernel %s: %s", r->k->name, msg);
  }
  r->failed = true;
  return SHEAF_ERR_INVALID_ARG;
}

static int64_t ieval(run *r, sh_lir_expr e);

static int64_t floordiv_i64(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
  return q;
}

/* Storage extent of dimension d at outer index i0. */
static int64_t dim_ext(run *r, sh_lir_buf b, int d, int64_t i0) {
  const sh_lir_bufinfo *bi = &r->k->bufs[b];
  int64_t e, p = bi->pad[d];
  if (bi->layout == SH_LIR_LAYOUT_RAGGED && (bi->ragged_mask & (1u << d))) {
    e = ((const int32_t *)r->base[bi->lengths])[i0];
  } else {
    e = ieval(r, bi->dims[d]);
  }
  if (p > 1 && e % p) e += p - e % p;
  return e;
}

/* Element index of buf[idx] from its base (ROWS: within the row); -1 when
 * out of bounds (and the run failed). */
static int64_t elem(run *r, sh_lir_buf b, const int64_t *ix, int64_t *row) {
  const sh_lir_bufinfo *bi = &r->k->bufs[b];
  *row = -1;
  int64_t d0 = dim_ext(r, b, 0, 0);
  if (ix[0] < 0 || ix[0] >= d0) {
    rfail(r, "index %lld of %s's dimension 0 is outside 0..%lld", (long long)ix[0], bi->name,
          (long long)(d0 - 1));
    return -1;
  }
  if (bi->layout == SH_LIR_LAYOUT_RAGGED) {
    const int32_t *L = r->base[bi->lengths];
    if (L[ix[0]] < 0) {
      rfail(r, "%s: negative length %d at %lld", bi->name, (int)L[ix[0]], (long long)ix[0]);
      return -1;
    }
  }
  if (bi->layout == SH_LIR_LAYOUT_PANELS) {
    int64_t K = dim_ext(r, b, 0, 0), N = ieval(r, bi->dims[1]), P = bi->panel;
    int64_t np = (N + P - 1) / P;
    if (ix[1] < 0 || ix[1] >= np * P) {
      rfail(r, "index %lld of %s's panel columns is outside 0..%lld", (long long)ix[1], bi->name,
            (long long)(np * P - 1));
      return -1;
    }
    return (ix[1] / P) * K * P + ix[0] * P + ix[1] % P;
  }
  int64_t off = 0, stride = 1;
  int first = bi->access == SH_LIR_ACCESS_ROWS || bi->layout == SH_LIR_LAYOUT_RAGGED ? 1 : 0;
  for (int d = bi->rank - 1; d >= first; d--) {
    int64_t ext = dim_ext(r, b, d, ix[0]);
    if (d > 0 && (ix[d] < 0 || ix[d] >= ext)) {
      rfail(r, "index %lld of %s's dimension %d is outside 0..%lld", (long long)ix[d], bi->name, d,
            (long long)(ext - 1));
      return -1;
    }
    if (d == 0 && bi->access == SH_LIR_ACCESS_LD) stride = r->ld[b];
    off += ix[d] * stride;
    stride *= ext;
  }
  if (bi->layout == SH_LIR_LAYOUT_RAGGED) off += ((const int32_t *)r->base[bi->offsets])[ix[0]];
  if (bi->access == SH_LIR_ACCESS_ROWS) *row = ix[0];
  return off;
}

static void *addr(run *r, sh_lir_buf b, int n, int32_t list) {
  int64_t ix[SH_LIR_MAX_RANK], row;
  for (int i = 0; i < n; i++) ix[i] = ieval(r, r->k->list[list + i]);
  if (r->failed) return NULL;
  int64_t off = elem(r, b, ix, &row);
  if (off < 0 || r->failed) return NULL;
  size_t esz = 4;
  char *base = row >= 0 ? (char *)r->rows[b][row] : (char *)r->base[b];
  if (!base) {
    rfail(r, "buffer %s has no storage", r->k->bufs[b].name);
    return NULL;
  }
  if (r->bytes[b] && (size_t)(off + 1) * esz > r->bytes[b]) {
    rfail(r, "element %lld of %s is past its storage (%zu bytes)", (long long)off,
          r->k->bufs[b].name, r->bytes[b]);
    return NULL;
  }
  return base + off * (int64_t)esz;
}

static int64_t ieval(run *r, sh_lir_expr e) {
  if (r->failed) return 0;
  const sh_lir_enode *x = &r->k->ex[e];
  switch ((sh_lir_ekind)x->kind) {
  case SH_LIR_E_INT: return x->i;
  case SH_LIR_E_SYM: return r->sizes[x->a];
  case SH_LIR_E_VAR: return r->vals[x->a];
  case SH_LIR_E_LD: return r->ld[x->a];
  case SH_LIR_E_LOAD: {
    const int32_t *p = addr(r, x->a, x->n, x->b);
    return p ? *p : 0;
  }
  case SH_LIR_E_BIN: {
    sh_lir_op op = (sh_lir_op)x->op;
    int64_t a = ieval(r, x->a);
    if (op == SH_LIR_OP_AND && !a) return 0;
    if (op == SH_LIR_OP_OR && a) return 1;
    int64_t b = ieval(r, x->b);
    switch (op) {
    case SH_LIR_OP_ADD: return (int64_t)((uint64_t)a + (uint64_t)b);
    case SH_LIR_OP_SUB: return (int64_t)((uint64_t)a - (uint64_t)b);
    case SH_LIR_OP_MUL: return (int64_t)((uint64_t)a * (uint64_t)b);
    case SH_LIR_OP_DIV:
    case SH_LIR_OP_MOD:
      if (b == 0) {
        rfail(r, "%s by zero", op == SH_LIR_OP_DIV ? "division" : "modulo");
        return 0;
      }
      return op == SH_LIR_OP_DIV ? floordiv_i64(a, b) : a - floordiv_i64(a, b) * b;
    case SH_LIR_OP_MIN: return a < b ? a : b;
    case SH_LIR_OP_MAX: return a > b ? a : b;
    case SH_LIR_OP_LT: return a < b;
    case SH_LIR_OP_LE: return a <= b;
    case SH_LIR_OP_GT: return a > b;
    case SH_LIR_OP_GE: return a >= b;
    case SH_LIR_OP_EQ: return a == b;
    case SH_LIR_OP_NE: return a != b;
    case SH_LIR_OP_AND:
    case SH_LIR_OP_OR: return b != 0;
    case SH_LIR_OP_POW: return 0;
    }
    return 0;
  }
  default: return 0;
  }
}

static float fmax_nan(float a, float b) { return (a > b || a != a) ? a : b; }
static float fmin_nan(float a, float b) { return (a < b || a != a) ? a : b; }

static float apply_fn(sh_lir_fn fn, float a) {
  switch (fn) {
  case SH_LIR_FN_NEG: return -a;
  case SH_LIR_FN_EXP: return expf(a);
  case SH_LIR_FN_LOG: return logf(a);
  case SH_LIR_FN_TANH: return tanhf(a);
  case SH_LIR_FN_SIGMOID: return sh_sigmoid_ref(a);
  case SH_LIR_FN_GELU: return sh_gelu_erf_ref(a);
  case SH_LIR_FN_RELU: return a > 0 ? a : (a != a ? a : 0.0f);
  case SH_LIR_FN_SQRT: return sqrtf(a);
  case SH_LIR_FN_RSQRT: return 1.0f / sqrtf(a);
  case SH_LIR_FN_ABS: return fabsf(a);
  case SH_LIR_FN_SOFTPLUS: return (float)(fmax((double)a, 0.0) + log1p(exp(-fabs((double)a))));
  case SH_LIR_FN_ERF: return erff(a);
  case SH_LIR_FN_EXP_NONPOS: return expf(a);
  }
  return a;
}

static float feval(run *r, sh_lir_expr e) {
  if (r->failed) return 0;
  const sh_lir_enode *x = &r->k->ex[e];
  switch ((sh_lir_ekind)x->kind) {
  case SH_LIR_E_FLT: return x->f;
  case SH_LIR_E_CAST: return (float)ieval(r, x->a);
  case SH_LIR_E_LOAD: {
    const float *p = addr(r, x->a, x->n, x->b);
    return p ? *p : 0;
  }
  case SH_LIR_E_UN: return apply_fn((sh_lir_fn)x->op, feval(r, x->a));
  case SH_LIR_E_SELECT: return feval(r, x->a) != 0 ? feval(r, x->b) : feval(r, x->c);
  case SH_LIR_E_BIN: {
    float a = feval(r, x->a), b = feval(r, x->b);
    switch ((sh_lir_op)x->op) {
    case SH_LIR_OP_ADD: return a + b;
    case SH_LIR_OP_SUB: return a - b;
    case SH_LIR_OP_MUL: return a * b;
    case SH_LIR_OP_DIV: return a / b;
    case SH_LIR_OP_MIN: return fmin_nan(a, b);
    case SH_LIR_OP_MAX: return fmax_nan(a, b);
    case SH_LIR_OP_POW: return powf(a, b);
    case SH_LIR_OP_LT: return a < b;
    case SH_LIR_OP_LE: return a <= b;
    case SH_LIR_OP_GT: return a > b;
    case SH_LIR_OP_GE: return a >= b;
    case SH_LIR_OP_EQ: return a == b;
    case SH_LIR_OP_NE: return a != b;
    default: return 0;
    }
  }
  default: return 0;
  }
}

static float combine_f(sh_lir_combine c, float old, float v) {
  switch (c) {
  case SH_LIR_COMBINE_ADD: return old + v;
  case SH_LIR_COMBINE_MUL: return old * v;
  case SH_LIR_COMBINE_MAX: return fmax_nan(old, v);
  case SH_LIR_COMBINE_MIN: return fmin_nan(old, v);
  default: return v;
  }
}

static int64_t combine_i(sh_lir_combine c, int64_t old, int64_t v) {
  switch (c) {
  case SH_LIR_COMBINE_ADD: return old + v;
  case SH_LIR_COMBINE_MUL: return old * v;
  case SH_LIR_COMBINE_MAX: return old > v ? old : v;
  case SH_LIR_COMBINE_MIN: return old < v ? old : v;
  default: return v;
  }
}

static sheaf_status own_alloc(run *r, sh_lir_buf b) {
  sh_lir_kernel *k = r->k;
  const sh_lir_bufinfo *bi = &k->bufs[b];
  if (bi->layout != SH_LIR_LAYOUT_DENSE)
    return rfail(r, "temporary %s must be dense", bi->name);
  double n = 1;
  for (int d = 0; d < bi->rank; d++) n *= (double)dim_ext(r, b, d, 0);
  if (r->failed) return SHEAF_ERR_INVALID_ARG;
  if (n > 2147483648.0) return rfail(r, "%s holds over 2^31 elements", bi->name);
  size_t bytes = (size_t)n * 4;
  r->base[b] = sh_malloc(k->ctx, bytes ? bytes : 4);
  if (!r->base[b]) {
    r->failed = true;
    return SHEAF_ERR_NOMEM;
  }
  r->bytes[b] = bytes ? bytes : 4;
  float nan = NAN;
  for (size_t i = 0; i < bytes / 4; i++) memcpy((char *)r->base[b] + 4 * i, &nan, 4);
  return SHEAF_OK;
}

static void own_free(run *r, sh_lir_buf b) {
  sh_free(r->k->ctx, r->base[b], r->bytes[b]);
  r->base[b] = NULL;
  r->bytes[b] = 0;
}

static void exec_list(run *r, sh_lir_stmt s);

static void exec(run *r, sh_lir_stmt s) {
  sh_lir_kernel *k = r->k;
  const sh_lir_snode *n = &k->st[s];
  switch ((sh_lir_skind)n->kind) {
  case SH_LIR_S_BLOCK: exec_list(r, n->body); return;
  case SH_LIR_S_LOOP: {
    int64_t e = ieval(r, n->ext);
    if (e > INT32_MAX) {
      rfail(r, "loop %s runs %lld times (over 2^31)", k->vars[n->var].name, (long long)e);
      return;
    }
    for (int64_t i = 0; i < e && !r->failed; i++) {
      r->vals[n->var] = i;
      exec_list(r, n->body);
    }
    return;
  }
  case SH_LIR_S_IF:
    if (ieval(r, n->cond)) exec_list(r, n->body);
    else if (n->els >= 0) exec_list(r, k->st[n->els].body);
    return;
  case SH_LIR_S_PREFETCH: return; /* a hint; its index may lie past the storage */
  case SH_LIR_S_ALLOC:
    if (own_alloc(r, n->buf)) return;
    exec_list(r, n->body);
    own_free(r, n->buf);
    return;
  case SH_LIR_S_STORE: {
    const sh_lir_bufinfo *bi = &k->bufs[n->buf];
    if (bi->dtype == SH_LIR_F32) {
      float v = feval(r, n->val);
      float *p = addr(r, n->buf, n->nidx, n->idx);
      if (p) *p = combine_f((sh_lir_combine)n->combine, n->combine ? *p : 0, v);
    } else {
      int64_t v = ieval(r, n->val);
      int32_t *p = addr(r, n->buf, n->nidx, n->idx);
      if (p) *p = (int32_t)combine_i((sh_lir_combine)n->combine, n->combine ? *p : 0, v);
    }
    return;
  }
  }
}

static void exec_list(run *r, sh_lir_stmt s) {
  for (; s >= 0 && !r->failed; s = r->k->st[s].next) exec(r, s);
}

/* The index checks (sh_lir_check), before anything runs: the first bad
 * element of each checked buffer, as "lab[3] = 300". */
static void run_checks(run *r) {
  sh_lir_kernel *k = r->k;
  for (int32_t c = 0; c < k->n_checks && !r->failed; c++) {
    const sh_lir_check *ck = &k->checks[c];
    const sh_lir_bufinfo *bi = &k->bufs[ck->buf];
    int64_t ext = ieval(r, ck->ext), n = 1, dims[SH_LIR_MAX_RANK];
    for (int d = 0; d < bi->rank; d++) n *= dims[d] = ieval(r, bi->dims[d]);
    const int32_t *v = r->base[ck->buf];
    for (int64_t i = 0; i < n; i++) {
      if (v[i] >= 0 && v[i] < ext) continue;
      char pos[200];
      int64_t ix[SH_LIR_MAX_RANK], f = i;
      for (int d = bi->rank - 1; d >= 0; d--) ix[d] = dims[d] > 0 ? f % dims[d] : 0, f = dims[d] > 0 ? f / dims[d] : 0;
      size_t p = (size_t)snprintf(pos, sizeof pos, "%s[", bi->name);
      for (int d = 0; d < bi->rank && p < sizeof pos; d++)
        p += (size_t)snprintf(pos + p, sizeof pos - p, "%s%lld", d ? ", " : "", (long long)ix[d]);
      rfail(r, "%s] = %d is outside 0 .. %lld (the extent of %s's dimension %d)", pos, (int)v[i],
            (long long)(ext - 1), ck->target, ck->dim);
      return;
    }
  }
}

sheaf_status sh_lir_run(sh_lir_kernel *k, const int64_t *sizes, const sh_lir_arg *args) {
  if (k->err) return k->err;
  sheaf_status st = sh_lir_verify(k);
  if (st) return st;
  run r;
  memset(&r, 0, sizeof r);
  r.k = k;
  r.sizes = sizes;
  size_t nv = (size_t)k->n_vars + 1, nb = (size_t)k->n_bufs + 1;
  r.vals = sh_calloc(k->ctx, nv, sizeof *r.vals);
  r.base = sh_calloc(k->ctx, nb, sizeof *r.base);
  r.rows = sh_calloc(k->ctx, nb, sizeof *r.rows);
  r.ld = sh_calloc(k->ctx, nb, sizeof *r.ld);
  r.bytes = sh_calloc(k->ctx, nb, sizeof *r.bytes);
  if (!r.vals || !r.base || !r.rows || !r.ld || !r.bytes) {
    st = SHEAF_ERR_NOMEM;
    goto done;
  }
  for (int32_t s = 0; s < k->n_syms; s++)
    if (sizes[s] < 0) {
      st = sh_fail(k->ctx, SHEAF_ERR_INVALID_ARG, "kernel %s: size %s is negative (%lld)", k->name,
                   k->syms[s], (long long)sizes[s]);
      goto done;
    }
  int a = 0;
  for (int32_t b = 0; b < k->n_bufs; b++) {
    const sh_lir_bufinfo *bi = &k->bufs[b];
    if (bi->role > SH_LIR_OUT) continue;
    r.base[b] = args[a].data;
    r.rows[b] = args[a].rows;
    r.ld[b] = args[a].ld;
    a++;
  }
  run_checks(&r);
  for (int32_t b = 0; b < k->n_bufs && !r.failed; b++)
    if (k->bufs[b].role == SH_LIR_TEMP && !k->bufs[b].inlined && !k->bufs[b].scoped) own_alloc(&r, b);
  if (!r.failed) exec(&r, k->root);
  for (int32_t b = 0; b < k->n_bufs; b++)
    if (r.bytes[b]) own_free(&r, b);
  st = r.failed ? (k->ctx->last_status ? k->ctx->last_status : SHEAF_ERR_INVALID_ARG) : SHEAF_OK;
done:
  sh_free(k->ctx, r.vals, nv * sizeof *r.vals);
  sh_free(k->ctx, r.base, nb * sizeof *r.base);
  sh_free(k->ctx, r.rows, nb * sizeof *r.rows);
  sh_free(k->ctx, r.ld, nb * sizeof *r.ld);
  sh_free(k->ctx, r.bytes, nb * sizeof *r.bytes);
  return st;
}
