/*
 * lower.c — checked kernels to the loop IR (lower.h), and the generation
 * pipeline: lower, default schedule, emit C.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "codegen/lir_emit.h"
#include "codegen/lir_sched.h"
#include "codegen/lower.h"

int64_t sh_lower_aff(const sh_kaff *a, const int64_t *sizes) {
  int64_t v = a->c;
  for (int i = 0; i < a->n; i++) v += a->t[i].coef * sizes[a->t[i].size];
  return v;
}

static sh_lir_expr aff_expr(sh_lir_kernel *L, const sh_kaff *a, const sh_lir_sym *syms) {
  sh_lir_expr e = sh_lir_int(L, a->c);
  for (int i = 0; i < a->n; i++)
    e = sh_lir_add(L, e, sh_lir_mul(L, sh_lir_int(L, a->t[i].coef), sh_lir_sz(L, syms[a->t[i].size])));
  return e;
}

/* The length tensor every ragged dimension of t reads, -1 when t is dense;
 * fails for layouts the IR cannot express. */
static sheaf_status ragged_len(sheaf_ctx *ctx, const sh_kernel *k, const sh_ktensor *t, int *len) {
  *len = -1;
  if (t->ragged_outer < 0) return SHEAF_OK;
  if (t->ragged_outer != 0)
    return sh_fail(ctx, SHEAF_ERR_UNSUPPORTED,
                   "kernel '%s': tensor '%s' has ragged dimensions depending on its dimension %d; "
                   "the code generator supports ragged dimensions of dimension 0 only",
                   k->name, t->name, t->ragged_outer);
  for (int d = 1; d < t->rank; d++) {
    if (t->dims[d].kind != SH_KEXT_RAGGED) continue;
    if (*len >= 0 && *len != t->dims[d].len)
      return sh_fail(ctx, SHEAF_ERR_UNSUPPORTED,
                     "kernel '%s': tensor '%s' has ragged dimensions of two length tensors; the code "
                     "generator supports one",
                     k->name, t->name);
    *len = t->dims[d].len;
  }
  return SHEAF_OK;
}

typedef struct lower_ctx {
  sheaf_ctx *ctx;
  const sh_kernel *k;
  sh_lir_kernel *L;
  sh_lir_sym *syms;    /* per size */
  sh_lir_buf *bufs;    /* per tensor */
  sh_lir_stmt *loops;  /* per index of the current statement */
  sh_lir_stmt group;   /* the shared row loop of the current group */
} lower_ctx;

static sh_lir_expr ext_expr(lower_ctx *c, const sh_kext *e) {
  if (e->kind == SH_KEXT_AFFINE) return aff_expr(c->L, &e->aff, c->syms);
  return sh_lir_load1(c->L, c->bufs[e->len], sh_lir_lv(c->L, c->loops[e->outer]));
}

static sh_lir_expr expr(lower_ctx *c, const sh_kexpr *e);

static sh_lir_expr idx_expr(lower_ctx *c, const sh_kidx *x) {
  if (x->gather) return expr(c, x->gather); /* an i32 load: an integer index */
  sh_lir_expr o = sh_lir_int(c->L, x->off);
  if (x->var < 0) return o;
  return sh_lir_add(c->L, sh_lir_lv(c->L, c->loops[x->var]), o);
}

static sh_lir_expr expr(lower_ctx *c, const sh_kexpr *e) {
  sh_lir_kernel *L = c->L;
  switch (e->kind) {
  case SH_KEXPR_CONST: return sh_lir_flt(L, (float)e->value);
  case SH_KEXPR_SIZE: return sh_lir_cast(L, sh_lir_sz(L, c->syms[e->size]));
  case SH_KEXPR_INDEX: return sh_lir_cast(L, sh_lir_lv(L, c->loops[e->var]));
  case SH_KEXPR_ACCESS: {
    const sh_ktensor *t = &c->k->tensors[e->tensor];
    sh_lir_expr idx[SH_LIR_MAX_RANK];
    for (int d = 0; d < t->rank; d++) {
      idx[d] = idx_expr(c, &e->idx[d]);
      if (e->idx[d].gather) /* its values in range: checked once per call, before the loops */
        sh_lir_index_check(L, c->bufs[e->idx[d].gather->tensor], ext_expr(c, &t->dims[d]), t->name, d);
    }
    if (t->rank == 0) idx[0] = sh_lir_int(L, 0);
    return sh_lir_load(L, c->bufs[e->tensor], t->rank ? t->rank : 1, idx);
  }
  case SH_KEXPR_OP: break;
  }
  sh_lir_expr a = expr(c, e->a);
  sh_lir_expr b = e->b ? expr(c, e->b) : SH_LIR_NONE;
  switch (e->op) {
  case SH_KOP_NEG: return sh_lir_un(L, SH_LIR_FN_NEG, a);
  case SH_KOP_EXP: return sh_lir_un(L, SH_LIR_FN_EXP, a);
  case SH_KOP_LOG: return sh_lir_un(L, SH_LIR_FN_LOG, a);
  case SH_KOP_TANH: return sh_lir_un(L, SH_LIR_FN_TANH, a);
  case SH_KOP_SIGMOID: return sh_lir_un(L, SH_LIR_FN_SIGMOID, a);
  case SH_KOP_GELU: return sh_lir_un(L, SH_LIR_FN_GELU, a);
  case SH_KOP_RELU: return sh_lir_un(L, SH_LIR_FN_RELU, a);
  case SH_KOP_SQRT: return sh_lir_un(L, SH_LIR_FN_SQRT, a);
  case SH_KOP_RSQRT: return sh_lir_un(L, SH_LIR_FN_RSQRT, a);
  case SH_KOP_ABS: return sh_lir_un(L, SH_LIR_FN_ABS, a);
  case SH_KOP_SOFTPLUS: return sh_lir_un(L, SH_LIR_FN_SOFTPLUS, a);
  case SH_KOP_ERF: return sh_lir_un(L, SH_LIR_FN_ERF, a);
  case SH_KOP_FLOAT: return e->a->dtype == SH_KDTYPE_I32 ? sh_lir_cast(L, a) : a;
  case SH_KOP_ADD: return sh_lir_bin(L, SH_LIR_OP_ADD, a, b);
  case SH_KOP_SUB: return sh_lir_bin(L, SH_LIR_OP_SUB, a, b);
  case SH_KOP_MUL: return sh_lir_bin(L, SH_LIR_OP_MUL, a, b);
  case SH_KOP_DIV: return sh_lir_bin(L, SH_LIR_OP_DIV, a, b);
  case SH_KOP_MIN: return sh_lir_bin(L, SH_LIR_OP_MIN, a, b);
  case SH_KOP_MAX: return sh_lir_bin(L, SH_LIR_OP_MAX, a, b);
  case SH_KOP_POW: return sh_lir_bin(L, SH_LIR_OP_POW, a, b);
  case SH_KOP_LT: return sh_lir_bin(L, SH_LIR_OP_LT, a, b);
  case SH_KOP_LE: return sh_lir_bin(L, SH_LIR_OP_LE, a, b);
  case SH_KOP_GT: return sh_lir_bin(L, SH_LIR_OP_GT, a, b);
  case SH_KOP_GE: return sh_lir_bin(L, SH_LIR_OP_GE, a, b);
  case SH_KOP_EQ: return sh_lir_bin(L, SH_LIR_OP_EQ, a, b);
  case SH_KOP_NE: return sh_lir_bin(L, SH_LIR_OP_NE, a, b);
  case SH_KOP_SELECT: return sh_lir_select(L, a, b, expr(c, e->c));
  case SH_KOP_COUNT_: break;
  }
  sh_lir_fail(L, SHEAF_ERR_INTERNAL, "kernel %s: operator %d has no lowering", c->k->name, (int)e->op);
  return SH_LIR_NONE;
}

static sh_lir_combine combine_of(sh_kred r) {
  switch (r) {
  case SH_KRED_ADD: return SH_LIR_COMBINE_ADD;
  case SH_KRED_MUL: return SH_LIR_COMBINE_MUL;
  case SH_KRED_MAX: return SH_LIR_COMBINE_MAX;
  case SH_KRED_MIN: return SH_LIR_COMBINE_MIN;
  case SH_KRED_ASSIGN: break;
  }
  return SH_LIR_COMBINE_NONE;
}

/* Lowers statement s; outer (SH_LIR_NONE: none) is the loop of an earlier
 * statement that s shares as its index 0 (row fusion, below). */
static sh_lir_stmt stmt(lower_ctx *c, const sh_kstmt *s, sh_lir_stmt outer) {
  sh_lir_kernel *L = c->L;
  const sh_ktensor *t = &c->k->tensors[s->lhs];
  sh_lir_stmt parent = sh_lir_root(L);
  for (int i = 0; i < s->n_free; i++)
    parent = c->loops[i] = i == 0 && outer >= 0
                               ? outer
                               : sh_lir_loop(L, parent, s->idx[i].name, ext_expr(c, &s->idx[i].range));
  sh_lir_expr lhs[SH_LIR_MAX_RANK];
  for (int i = 0; i < s->n_free; i++) lhs[i] = sh_lir_lv(L, c->loops[i]);
  int n = t->rank;
  if (n == 0) lhs[0] = sh_lir_int(L, 0), n = 1;
  sh_lir_buf B = c->bufs[s->lhs];
  if (s->init) {
    double id = sh_kred_identity(s->red);
    sh_lir_store(L, parent, B, n, lhs, sh_lir_flt(L, (float)id), SH_LIR_COMBINE_NONE);
  }
  for (int i = s->n_free; i < s->n_idx; i++)
    parent = c->loops[i] = sh_lir_loop(L, parent, s->idx[i].name, ext_expr(c, &s->idx[i].range));
  sh_lir_store(L, parent, B, n, lhs, expr(c, s->rhs), combine_of(s->red));
  return s->n_free > 0 ? c->loops[0] : SH_LIR_NONE;
}

/* Row fusion: consecutive statements over the same first free index (a
 * softmax's max, sum and output per row) share one outer loop, so a row is
 * read while it is in cache and the default schedule sees one nest per row
 * (the hand-built kernels' shape). Legal when every access, in the group,
 * to a tensor the group writes reads it at that same row (dimension 0 =
 * index 0, no offset). GEMM-like statements (two free indices and a
 * reduction) stay alone: the default schedule register-tiles them. */
static bool gemm_like(const sh_kstmt *s) { return s->n_free >= 2 && s->n_idx > s->n_free; }

static bool same_row(const sh_kexpr *e, const int *written, int n_written) {
  if (!e) return true;
  if (e->kind == SH_KEXPR_ACCESS)
    for (int w = 0; w < n_written; w++)
      if (written[w] == e->tensor && (e->idx[0].var != 0 || e->idx[0].off != 0)) return false;
  return same_row(e->a, written, n_written) && same_row(e->b, written, n_written) &&
         same_row(e->c, written, n_written);
}

static bool same_ext(const sh_kext *a, const sh_kext *b) {
  if (a->kind != SH_KEXT_AFFINE || b->kind != SH_KEXT_AFFINE || a->aff.c != b->aff.c || a->aff.n != b->aff.n)
    return false;
  for (int i = 0; i < a->aff.n; i++)
    if (a->aff.t[i].coef != b->aff.t[i].coef || a->aff.t[i].size != b->aff.t[i].size) return false;
  return true;
}

/* Whether statement j joins the group first .. j-1 (which share a loop). */
static bool joins(const sh_kernel *k, int first, int j) {
  const sh_kstmt *s = &k->stmts[j], *f = &k->stmts[first];
  if (s->n_free < 1 || f->n_free < 1 || gemm_like(s) || !same_ext(&s->idx[0].range, &f->idx[0].range)) return false;
  int written[64], n = 0;
  for (int i = first; i <= j && n < 64; i++) written[n++] = k->stmts[i].lhs;
  if (n < j - first + 1) return false;
  for (int i = first; i <= j; i++)
    if (!same_row(k->stmts[i].rhs, written, n)) return false;
  return true;
}

void sh_lower_info_free(sheaf_ctx *ctx, sh_lower_info *info) {
  if (!info) return;
  sh_free(ctx, info->scratch, sizeof(int) * (size_t)info->cap);
  sh_free(ctx, info->ragged, sizeof(int) * (size_t)info->cap);
  memset(info, 0, sizeof *info);
}

static bool reads(const sh_kexpr *e, int t) {
  if (!e) return false;
  if (e->kind == SH_KEXPR_ACCESS && e->tensor == t) return true;
  return reads(e->a, t) || reads(e->b, t) || reads(e->c, t);
}

/* Does e access tensor t other than as t(r, f), r a reduction index and f
 * a free index of statement s? */
static bool non_weight_use(const sh_kstmt *s, const sh_kexpr *e, int t) {
  if (!e) return false;
  if (e->kind == SH_KEXPR_ACCESS && e->tensor == t) {
    const sh_kidx *x = e->idx;
    if (x[0].var < 0 || x[1].var < 0 || x[0].off || x[1].off) return true;
    return !s->idx[x[0].var].reduction || s->idx[x[1].var].reduction;
  }
  return non_weight_use(s, e->a, t) || non_weight_use(s, e->b, t) || non_weight_use(s, e->c, t);
}

/* Weight inference (docs/CODEGEN.md, "Weights"): a dense f32 input of rank
 * 2 read only as W(r, f) — rows by a reduction index, columns by an output
 * index, as the B of x·W — in GEMM-like statements. The default schedule
 * may pack it in panels; the kernel API packs it once per weight version. */
static bool infer_weight(const sh_kernel *k, int t) {
  const sh_ktensor *T = &k->tensors[t];
  if (T->kind != SH_KTENSOR_INPUT || T->dtype != SH_KDTYPE_F32 || T->rank != 2 || T->ragged_outer >= 0)
    return false;
  bool used = false;
  for (int s = 0; s < k->n_stmts; s++) {
    const sh_kstmt *st = &k->stmts[s];
    if (non_weight_use(st, st->rhs, t)) return false;
    if (reads(st->rhs, t)) {
      if (!gemm_like(st)) return false;
      used = true;
    }
  }
  return used;
}

static sh_lir_buf make_buf(lower_ctx *c, const sh_ktensor *t, const char *name, sh_lir_role role) {
  sh_lir_expr dims[SH_LIR_MAX_RANK];
  for (int d = 0; d < t->rank; d++)
    dims[d] = t->dims[d].kind == SH_KEXT_AFFINE ? aff_expr(c->L, &t->dims[d].aff, c->syms)
                                                 : sh_lir_int(c->L, 1);
  if (t->rank == 0) dims[0] = sh_lir_int(c->L, 1);
  return sh_lir_buffer(c->L, name, t->dtype == SH_KDTYPE_I32 ? SH_LIR_I32 : SH_LIR_F32, role,
                       t->rank ? t->rank : 1, dims);
}

sheaf_status sh_lower_kernel(sheaf_ctx *ctx, const sh_kernel *k, const char *name, sh_lir_kernel **out,
                             sh_lower_info *info) {
  *out = NULL;
  sh_lower_info own;
  sh_lower_info *keep = info;
  if (!info) info = &own;
  memset(info, 0, sizeof *info);
  if (k->n_tensors > 4096 || k->n_sizes > 4096)
    return sh_fail(ctx, SHEAF_ERR_UNSUPPORTED, "kernel '%s': too many tensors", k->name);
  for (int i = 0; i < k->n_tensors; i++) {
    int len;
    sheaf_status st = ragged_len(ctx, k, &k->tensors[i], &len);
    if (st) return st;
    if (k->tensors[i].rank > SH_LIR_MAX_RANK)
      return sh_fail(ctx, SHEAF_ERR_UNSUPPORTED, "kernel '%s': tensor '%s' has rank above %d", k->name,
                     k->tensors[i].name, SH_LIR_MAX_RANK);
  }
  for (int s = 0; s < k->n_stmts; s++)
    if (k->stmts[s].n_idx > 64)
      return sh_fail(ctx, SHEAF_ERR_UNSUPPORTED, "kernel '%s': a statement with over 64 indices", k->name);
  sh_lir_kernel *L;
  sheaf_status st = sh_lir_create(ctx, name, &L);
  if (st) return st;
  lower_ctx c = {.ctx = ctx, .k = k, .L = L, .group = SH_LIR_NONE};
  size_t nsz = (size_t)k->n_sizes + 1, nt = (size_t)k->n_tensors + 1;
  c.syms = sh_calloc(ctx, nsz, sizeof(sh_lir_sym));
  c.bufs = sh_calloc(ctx, nt, sizeof(sh_lir_buf));
  c.loops = sh_calloc(ctx, 64, sizeof(sh_lir_stmt));
  int *scratch = sh_calloc(ctx, nt, sizeof(int)), *ragged = sh_calloc(ctx, nt, sizeof(int));
  int n_scratch = 0, n_ragged = 0;
  if (!c.syms || !c.bufs || !c.loops || !scratch || !ragged) {
    st = SHEAF_ERR_NOMEM;
    goto done;
  }
  for (int i = 0; i < k->n_sizes; i++) c.syms[i] = sh_lir_size(L, k->sizes[i].name);
  /* 1, 2: inputs and outputs */
  for (int i = 0; i < k->n_inputs + k->n_outputs; i++) {
    const sh_ktensor *t = &k->tensors[i];
    c.bufs[i] = make_buf(&c, t, t->name, t->kind == SH_KTENSOR_INPUT ? SH_LIR_IN : SH_LIR_OUT);
    if (t->ragged_outer >= 0) ragged[n_ragged++] = i;
    if (i < k->n_inputs && infer_weight(k, i)) sh_lir_buffer_weight(L, c.bufs[i]);
  }
  /* 3: ragged temporaries, allocated by the caller */
  for (int i = k->n_inputs + k->n_outputs; i < k->n_tensors; i++) {
    const sh_ktensor *t = &k->tensors[i];
    if (t->ragged_outer < 0) continue;
    c.bufs[i] = make_buf(&c, t, t->name, SH_LIR_OUT);
    if (c.bufs[i] >= 0) L->bufs[c.bufs[i]].scratch = true;
    scratch[n_scratch++] = i;
    ragged[n_ragged++] = i;
  }
  /* 4: offsets */
  for (int r = 0; r < n_ragged; r++) {
    const sh_ktensor *t = &k->tensors[ragged[r]];
    char oname[256];
    snprintf(oname, sizeof oname, "%s_off", t->name);
    sh_lir_expr d0 = aff_expr(L, &t->dims[0].aff, c.syms);
    sh_lir_buf off = sh_lir_buffer(L, oname, SH_LIR_I32, SH_LIR_IN, 1, &d0);
    int len;
    ragged_len(ctx, k, t, &len);
    uint32_t mask = 0;
    for (int d = 1; d < t->rank; d++)
      if (t->dims[d].kind == SH_KEXT_RAGGED) mask |= 1u << d;
    sh_lir_buffer_ragged(L, c.bufs[ragged[r]], mask, c.bufs[len], off);
  }
  /* dense temporaries */
  for (int i = k->n_inputs + k->n_outputs; i < k->n_tensors; i++)
    if (k->tensors[i].ragged_outer < 0) c.bufs[i] = make_buf(&c, &k->tensors[i], k->tensors[i].name, SH_LIR_TEMP);
  for (int s = 0, first = 0; s < k->n_stmts; s++) {
    const sh_kstmt *ks = &k->stmts[s];
    bool fuse = s > first && c.group >= 0 && !gemm_like(&k->stmts[first]) && joins(k, first, s);
    sh_lir_stmt loop = stmt(&c, ks, fuse ? c.group : SH_LIR_NONE);
    if (!fuse) first = s;
    c.group = loop;
  }
  st = sh_lir_status(L);
  if (st == SHEAF_OK) st = sh_lir_verify(L);
done:
  sh_free(ctx, c.syms, nsz * sizeof(sh_lir_sym));
  sh_free(ctx, c.bufs, nt * sizeof(sh_lir_buf));
  sh_free(ctx, c.loops, 64 * sizeof(sh_lir_stmt));
  if (st == SHEAF_OK) {
    info->n_scratch = n_scratch, info->scratch = scratch;
    info->n_ragged = n_ragged, info->ragged = ragged;
    info->n_args = k->n_inputs + k->n_outputs + n_scratch + n_ragged;
    info->cap = (int)nt;
  } else {
    sh_free(ctx, scratch, nt * sizeof(int));
    sh_free(ctx, ragged, nt * sizeof(int));
  }
  if (st) {
    sh_lir_free(L);
    return st;
  }
  if (!keep) sh_lower_info_free(ctx, info);
  *out = L;
  return SHEAF_OK;
}

/* Elements of sub-tensor t of dimension 0 (S(t) of kernel_ref.h). */
static int64_t sub_numel(const sh_kernel *k, const sh_ktensor *t, int64_t i0, const int64_t *sizes,
                         const void *const *in_data) {
  int64_t n = 1;
  for (int d = 1; d < t->rank; d++) {
    const sh_kext *e = &t->dims[d];
    n *= e->kind == SH_KEXT_AFFINE ? sh_lower_aff(&e->aff, sizes)
                                   : (int64_t)((const int32_t *)in_data[e->len])[i0];
  }
  (void)k;
  return n;
}

sheaf_status sh_lower_numel(sheaf_ctx *ctx, const sh_kernel *k, int ti, const int64_t *sizes,
                            const void *const *in_data, size_t *numel) {
  const sh_ktensor *t = &k->tensors[ti];
  double n = 1;
  if (t->ragged_outer < 0) {
    for (int d = 0; d < t->rank; d++) n *= (double)sh_lower_aff(&t->dims[d].aff, sizes);
  } else {
    int64_t E = sh_lower_aff(&t->dims[0].aff, sizes);
    n = 0;
    for (int64_t i = 0; i < E; i++) n += (double)sub_numel(k, t, i, sizes, in_data);
  }
  if (n < 0 || n > 9.0e15)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "kernel '%s': tensor '%s' would have %.0f elements",
                   k->name, t->name, n);
  *numel = (size_t)n;
  return SHEAF_OK;
}

sheaf_status sh_lower_offsets(sheaf_ctx *ctx, const sh_kernel *k, int ti, const int64_t *sizes,
                              const void *const *in_data, int32_t *offsets) {
  const sh_ktensor *t = &k->tensors[ti];
  int64_t E = sh_lower_aff(&t->dims[0].aff, sizes), p = 0;
  for (int64_t i = 0; i < E; i++) {
    offsets[i] = (int32_t)p;
    p += sub_numel(k, t, i, sizes, in_data);
    if (p > INT32_MAX)
      return sh_fail(ctx, SHEAF_ERR_UNSUPPORTED,
                     "kernel '%s': ragged tensor '%s' has over 2^31 elements (i32 offsets)", k->name,
                     t->name);
  }
  return SHEAF_OK;
}

void sh_lower_entry_name(const sh_kernel *k, char *out, size_t cap) {
  snprintf(out, cap, "sheafk_%s", k->name);
}

sheaf_status sh_lower_generate(sheaf_ctx *ctx, const sh_kernel *k, sheaf_isa isa, sh_buf *c,
                               sh_lir_kernel **lir, sh_lower_info *info) {
  char name[300];
  sh_lower_entry_name(k, name, sizeof name);
  if (lir) *lir = NULL;
  sh_lir_kernel *L;
  sheaf_status st = sh_lower_kernel(ctx, k, name, &L, info);
  if (st) return sh_fail_prefix(ctx, "kernel '%s': lowering", k->name);
  st = sh_sched_default(L, isa);
  if (st) st = sh_fail_prefix(ctx, "kernel '%s': default schedule", k->name);
  if (!st && c) {
    st = sh_lir_emit_c(L, c);
    if (!st) st = sh_buf_status(c);
    if (st) st = sh_fail_prefix(ctx, "kernel '%s': C emission", k->name);
  }
  if (st || !lir) {
    sh_lir_free(L);
    if (st && info) sh_lower_info_free(ctx, info);
    return st;
  }
  *lir = L;
  return SHEAF_OK;
}
