/*
 * fuzz_lang.c — libFuzzer target for the model language's front end: any
 * input is lexed, parsed and (when it parses) checked. It either checks,
 * or fails with diagnostics whose first one is the context's last error
 * ("fuzz.sf:LINE:COL: error: ...") and which render with a source line and
 * a caret; or it runs out of memory. A checked module satisfies the typed
 * AST's promises (a main, a type on every function). Its checked kernels
 * satisfy kernel.h's promises: every reference is valid, ragged ranges
 * depend on earlier indices, and the reference evaluator, run at small
 * sizes (every size 3, lengths 0..3), never reads or writes out of bounds
 * (it checks every access: SHEAF_ERR_INTERNAL otherwise); a gather's index
 * values (x % 4) may be out of range: SHEAF_ERR_INVALID_ARG, then. Never a crash, a
 * hang or a leak; any broken promise traps.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "lang/check.h"
#include "lang/kernel_ref.h"
#include "sheaf.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_SIZE 3     /* the value of every size */
#define FUZZ_MAX_EXT 64 /* larger extents: not evaluated (time) */

static int64_t ext_at(const sh_kext *e) {
  if (e->kind == SH_KEXT_RAGGED) return FUZZ_SIZE;
  if (e->aff.c > 1000 || e->aff.c < -1000) return -1;
  int64_t v = e->aff.c;
  for (int i = 0; i < e->aff.n; i++) {
    if (e->aff.t[i].coef > FUZZ_MAX_EXT || e->aff.t[i].coef < -FUZZ_MAX_EXT) return -1;
    v += e->aff.t[i].coef * FUZZ_SIZE;
  }
  return v < -FUZZ_MAX_EXT || v > FUZZ_MAX_EXT ? -1 : v;
}

static void check_expr(const sh_kernel *k, const sh_kstmt *s, const sh_kexpr *x) {
  REQUIRE(x);
  switch (x->kind) {
  case SH_KEXPR_CONST: break;
  case SH_KEXPR_SIZE: REQUIRE(x->size >= 0 && x->size < k->n_sizes); break;
  case SH_KEXPR_INDEX: REQUIRE(x->var >= 0 && x->var < s->n_idx); break;
  case SH_KEXPR_ACCESS:
    REQUIRE(x->tensor >= 0 && x->tensor < k->n_tensors);
    for (int d = 0; d < k->tensors[x->tensor].rank; d++) {
      REQUIRE(x->idx[d].var >= -1 && x->idx[d].var < s->n_idx);
      const sh_kexpr *g = x->idx[d].gather;
      if (!g) continue; /* a gather: an i32 input read at plain indices, one level */
      REQUIRE(x->idx[d].var == -1 && x->idx[d].off == 0 && g->kind == SH_KEXPR_ACCESS);
      REQUIRE(g->tensor >= 0 && g->tensor < k->n_inputs && g->dtype == SH_KDTYPE_I32);
      REQUIRE(k->tensors[x->tensor].dims[d].kind == SH_KEXT_AFFINE && k->tensors[g->tensor].ragged_outer < 0);
      for (int j = 0; j < k->tensors[g->tensor].rank; j++) REQUIRE(!g->idx[j].gather);
      check_expr(k, s, g);
    }
    REQUIRE((x->dtype == SH_KDTYPE_I32) == (k->tensors[x->tensor].dtype == SH_KDTYPE_I32));
    break;
  case SH_KEXPR_OP: {
    int n = sh_kop_arity(x->op);
    REQUIRE(n >= 1 && n <= 3 && x->dtype == SH_KDTYPE_F32);
    check_expr(k, s, x->a);
    if (n > 1) check_expr(k, s, x->b);
    if (n > 2) check_expr(k, s, x->c);
    REQUIRE(x->op == SH_KOP_FLOAT || x->a->dtype == SH_KDTYPE_F32);
    break;
  }
  }
}

static void check_ext(const sh_kernel *k, const sh_kext *e, int outer_limit) {
  if (e->kind == SH_KEXT_AFFINE) {
    for (int i = 0; i < e->aff.n; i++) REQUIRE(e->aff.t[i].size >= 0 && e->aff.t[i].size < k->n_sizes);
    return;
  }
  REQUIRE(e->len >= 0 && e->len < k->n_inputs);
  const sh_ktensor *L = &k->tensors[e->len];
  REQUIRE(L->dtype == SH_KDTYPE_I32 && L->rank == 1 && L->dims[0].kind == SH_KEXT_AFFINE);
  REQUIRE(e->outer >= 0 && e->outer < outer_limit);
}

/* kernel.h's promises about references; whether to evaluate (small enough). */
static bool check_kernel(const sh_kernel *k) {
  bool small = true;
  REQUIRE(k->n_inputs + k->n_outputs <= k->n_tensors && k->n_outputs >= 1);
  for (int s = 0; s < k->n_sizes; s++) {
    const sh_ksize *z = &k->sizes[s];
    REQUIRE(z->tensor >= 0 && z->tensor < k->n_inputs);
    REQUIRE(z->dim >= 0 && z->dim < k->tensors[z->tensor].rank);
    const sh_kext *e = &k->tensors[z->tensor].dims[z->dim];
    REQUIRE(e->kind == SH_KEXT_AFFINE && e->aff.n == 1 && e->aff.c == 0 && e->aff.t[0].size == s);
  }
  for (int i = 0; i < k->n_tensors; i++) {
    const sh_ktensor *t = &k->tensors[i];
    REQUIRE(t->rank >= 0 && t->rank <= SH_KERNEL_MAX_RANK);
    REQUIRE(i < k->n_inputs ? t->defined_by == -1 : t->defined_by >= 0 && t->defined_by < k->n_stmts);
    for (int d = 0; d < t->rank; d++) {
      check_ext(k, &t->dims[d], d);
      if (t->dims[d].kind == SH_KEXT_RAGGED) REQUIRE(t->dims[d].outer == t->ragged_outer);
      small &= ext_at(&t->dims[d]) >= 0;
    }
  }
  for (int i = 0; i < k->n_stmts; i++) {
    const sh_kstmt *s = &k->stmts[i];
    REQUIRE(s->lhs >= k->n_inputs && s->lhs < k->n_tensors);
    REQUIRE(s->n_free == k->tensors[s->lhs].rank && s->n_free <= s->n_idx);
    REQUIRE(s->red != SH_KRED_ASSIGN || (s->n_idx == s->n_free && !s->init));
    double work = 1;
    for (int d = 0; d < s->n_idx; d++) {
      check_ext(k, &s->idx[d].range, d);
      REQUIRE(s->idx[d].reduction == (d >= s->n_free));
      int64_t n = ext_at(&s->idx[d].range);
      small &= n >= 0;
      work *= n > 0 ? (double)n : 1;
    }
    small &= work <= 1e5;
    check_expr(k, s, s->rhs);
  }
  return small;
}

/* Runs k at every size 3 with lengths 0, 1, 2, 3, 0, ...: never out of bounds. */
static void run_kernel(sheaf_ctx *ctx, const sh_kernel *k) {
  int n = k->n_inputs;
  sh_kref_arg *in = calloc((size_t)n + 1, sizeof *in);
  int64_t *shapes = calloc((size_t)n * SH_KERNEL_MAX_RANK + 1, sizeof *shapes);
  void **bufs = calloc((size_t)n + k->n_outputs + 1, sizeof *bufs);
  sh_kref_out *out = calloc((size_t)k->n_outputs + 1, sizeof *out);
  REQUIRE(in && shapes && bufs && out);
  bool ok = true;
  for (int i = 0; i < n && ok; i++) { /* shapes, and dense inputs */
    const sh_ktensor *t = &k->tensors[i];
    int64_t numel = 1;
    in[i].rank = t->rank;
    in[i].shape = shapes + i * SH_KERNEL_MAX_RANK;
    for (int d = 0; d < t->rank; d++) {
      shapes[i * SH_KERNEL_MAX_RANK + d] = t->dims[d].kind == SH_KEXT_RAGGED ? -1 : ext_at(&t->dims[d]);
      numel *= shapes[i * SH_KERNEL_MAX_RANK + d] < 0 ? 0 : shapes[i * SH_KERNEL_MAX_RANK + d];
      ok &= t->dims[d].kind == SH_KEXT_RAGGED || shapes[i * SH_KERNEL_MAX_RANK + d] >= 0;
    }
    if (t->ragged_outer >= 0) continue;
    bufs[i] = calloc((size_t)numel + 1, 4);
    REQUIRE(bufs[i]);
    for (int64_t x = 0; x < numel; x++) {
      if (t->dtype == SH_KDTYPE_I32) ((int32_t *)bufs[i])[x] = (int32_t)(x % 4);
      else ((float *)bufs[i])[x] = (float)(x % 7) * 0.25f - 0.5f;
    }
    in[i].data = bufs[i];
    in[i].numel = (size_t)numel;
  }
  for (int i = 0; i < n && ok; i++) { /* ragged inputs, sized from the lengths */
    if (k->tensors[i].ragged_outer < 0) continue;
    size_t numel = 0;
    sheaf_status st = sh_kernel_ref_numel(ctx, k, in, n, i, &numel);
    REQUIRE(st == SHEAF_OK || st == SHEAF_ERR_SHAPE || st == SHEAF_ERR_NOMEM);
    if (st != SHEAF_OK || numel > 1000000) {
      ok = false;
      break;
    }
    bufs[i] = calloc(numel + 1, 4);
    REQUIRE(bufs[i]);
    in[i].data = bufs[i];
    in[i].numel = numel;
  }
  for (int r = 0; r < k->n_outputs && ok; r++) {
    size_t numel = 0;
    sheaf_status st = sh_kernel_ref_numel(ctx, k, in, n, n + r, &numel);
    REQUIRE(st == SHEAF_OK || st == SHEAF_ERR_SHAPE || st == SHEAF_ERR_NOMEM);
    if (st != SHEAF_OK || numel > 1000000) {
      ok = false;
      break;
    }
    out[r].data = calloc(numel + 1, sizeof(float));
    REQUIRE(out[r].data);
    out[r].numel = numel;
    bufs[n + r] = out[r].data;
  }
  if (ok) {
    sheaf_status st = sh_kernel_ref_run(ctx, k, in, n, out, k->n_outputs);
    /* a gather's index values (x % 4) may pass its extent: refused, named */
    REQUIRE(st == SHEAF_OK || st == SHEAF_ERR_SHAPE || st == SHEAF_ERR_NOMEM ||
            (st == SHEAF_ERR_INVALID_ARG && sh_kernel_has_gather(k)));
  }
  for (int i = 0; i < n + k->n_outputs; i++) free(bufs[i]);
  free(in), free(shapes), free(bufs), free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sheaf_ctx *ctx = fuzz_ctx();
  sh_module m;
  sheaf_status st = sh_lang_compile(&m, ctx, "fuzz.sf", (const char *)data, size);
  sh_buf out;
  sh_buf_init(&out, ctx);
  if (st == SHEAF_OK) {
    REQUIRE(m.diags.n_errors == 0 && (m.main != NULL || (m.n_fns == 0 && m.n_kernels > 0)));
    for (int i = 0; i < m.n_fns; i++) REQUIRE(m.fns[i]->ret_type && m.fns[i]->checked);
    const sh_kernel *const *k;
    int n = sh_module_kernels(&m, &k);
    REQUIRE(n == m.n_kernels);
    for (int i = 0; i < n; i++)
      if (check_kernel(k[i])) run_kernel(ctx, k[i]);
    sh_check_summary(&m, &out);
    sh_ast_dump(&out, &m);
  } else if (st != SHEAF_ERR_NOMEM) {
    fuzz_check_parse_error(ctx, st, "fuzz.sf");
    REQUIRE(m.diags.n_errors > 0 && m.diags.n > 0 && m.diags.v[0].kind == SH_DIAG_ERROR);
    sh_diags_render(&m.diags, &out);
    REQUIRE(sh_buf_status(&out) != SHEAF_OK || strstr(sh_buf_cstr(&out), ": error: "));
  }
  sh_buf_free(&out);
  sh_module_free(&m);
  return 0;
}
