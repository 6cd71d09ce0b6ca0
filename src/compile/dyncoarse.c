/*
 * dyncoarse.c — the dynamic mode's coarsened regions (dyncoarse.h): which
 * functions qualify (not main, not recursive, no generic sizes, vector
 * parameters only, a vector result, at least two tensor operations in the
 * translated body), their kernels (coarsen.c's translation, coarsen_emit.c's
 * printing with the batch index n: one instance is one row), and the
 * sh_lang_region each becomes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/dyncoarse.h"
#include "compile/linear_int.h"

struct sh_dyncoarse {
  sheaf_ctx *ctx;
  int n;
  sh_lang_region *regions; /* m->n_fns entries at most */
  sh_buf report, src;
};

static int count_ops(const sh_lin_arm *a) {
  int n = 0;
  for (int k = 0; k < a->n_nodes; k++) {
    sh_lin_op op = a->nodes[k].op;
    n += op == SH_LIN_UN || op == SH_LIN_BIN || op == SH_LIN_MM || op == SH_LIN_SLICE || op == SH_LIN_LSM;
  }
  return n;
}

static bool has_tensor_param(const sh_fn *f) {
  for (int i = 0; i < f->n_params; i++)
    if (f->param_types[i] && f->param_types[i]->kind == SH_TY_TENSOR) return true;
  return false;
}

/* One function: a region in D->regions[D->n], or a line saying why not. */
static sheaf_status one_fn(sh_dyncoarse *D, const sh_module *m, const sh_lang_bind *bind, const sh_fn *f) {
  const char *name = sh_sym_name(&m->syms, f->name);
  const char *file = m->diags.file ? m->diags.file : "model";
  char why[512] = "";
  if (f == m->main || !f->n_params || !has_tensor_param(f)) return SHEAF_OK; /* no candidate */
  sh_buf_printf(&D->report, "coarsening: %s (%s:%u)", name, file, (unsigned)f->span.line);
  if (f->recursive) {
    sh_buf_puts(&D->report, " stays separate: recursive\n");
    return SHEAF_OK;
  }
  if (f->n_size_params) {
    sh_buf_puts(&D->report, " stays separate: generic in its sizes\n");
    return SHEAF_OK;
  }
  sh_lin *L = calloc(1, sizeof *L);
  sh_lin_arm *a = calloc(1, sizeof *a);
  sh_lin_fn *lf = calloc(1, sizeof *lf);
  if (!L || !a || !lf) {
    free(L), free(a), free(lf);
    return sh_fail(D->ctx, SHEAF_ERR_NOMEM, "out of memory");
  }
  L->ctx = m->ctx, L->m = m, L->bind = bind, L->why = why, L->why_cap = sizeof why;
  sheaf_status st = sh_lin_translate_body(L, f, lf, a);
  if (!st && lf->n_comp != 1)
    st = sh_lin_refuse(L, f->span, "a result of %d tensors (one kernel output per region for now)", lf->n_comp);
  if (!st && (lf->comp_rank[0] != 1 || a->nodes[a->out[0]].rank != 1))
    st = sh_lin_refuse(L, f->span, "a matrix result");
  if (!st && count_ops(a) < 2) st = sh_lin_refuse(L, f->span, "fewer than two tensor operations: nothing to fuse");
  if (!st) st = sh_lin_emit(L, lf, a);
  if (!st && a->n_inputs > 16) st = sh_lin_refuse(L, f->span, "more than 16 row inputs");
  for (int i = 0; !st && i < a->n_inputs; i++) {
    const sh_lin_node *n = &a->nodes[a->inputs[i]];
    if (a->input_3d[i] || n->rank != 1) st = sh_lin_refuse(L, f->span, "an argument read as a matrix");
    for (int s = 0; !st && s < n->n_segs; s++)
      if (n->segs[s].lookup) st = sh_lin_refuse(L, f->span, "a table lookup inside the function");
  }
  if (!st && a->n_params > 64) st = sh_lin_refuse(L, f->span, "more than 64 model parameters");
  if (st == SHEAF_ERR_UNSUPPORTED) {
    sh_buf_printf(&D->report, " stays separate: %s\n", why);
    sheaf_ctx_clear_error(m->ctx);
    st = SHEAF_OK;
  } else if (!st) {
    sheaf_kernel *k = NULL;
    st = sheaf_kernel_compile(m->ctx, a->src, a->src_len, a->name, &k);
    if (st) {
      st = sh_fail(m->ctx, st, "coarsening: the kernel of %s does not compile: %s\n%s", name,
                   sheaf_ctx_last_error(m->ctx), a->src);
    } else {
      sh_lang_region *r = &D->regions[D->n++];
      r->fn = f, r->k = k, r->n_params = a->n_params, r->out_d = lf->comp_d[0][0];
      r->n_inputs = a->n_inputs;
      for (int i = 0; i < a->n_inputs; i++) {
        const sh_lin_node *n = &a->nodes[a->inputs[i]];
        r->n_segs[i] = n->n_segs;
        for (int s = 0; s < n->n_segs; s++) r->seg[i][s] = (int8_t)n->segs[s].call;
      }
      for (int p = 0; p < a->n_params; p++) r->params[p] = a->nodes[a->params[p]].param;
      sh_buf_printf(&D->report, ": one kernel of %d ops\n", count_ops(a));
      sh_buf_printf(&D->src, "# %s (%s:%u)\n%s\n", name, file, (unsigned)f->span.line, a->src);
    }
  }
  free(a->src);
  free(L), free(a), free(lf);
  return st;
}

sheaf_status sh_dyncoarse_create(const sh_module *m, const sh_lang_bind *bind, sh_dyncoarse **out) {
  if (!out) return SHEAF_ERR_INVALID_ARG;
  *out = NULL;
  if (!m || !bind) return SHEAF_ERR_INVALID_ARG;
  sh_dyncoarse *D = calloc(1, sizeof *D);
  if (!D || !(D->regions = calloc((size_t)(m->n_fns ? m->n_fns : 1), sizeof *D->regions))) {
    free(D);
    return sh_fail(m->ctx, SHEAF_ERR_NOMEM, "out of memory");
  }
  D->ctx = m->ctx;
  sh_buf_init(&D->report, m->ctx);
  sh_buf_init(&D->src, m->ctx);
  sheaf_status st = SHEAF_OK;
  for (int i = 0; !st && i < m->n_fns; i++) st = one_fn(D, m, bind, m->fns[i]);
  if (!st && (sh_buf_status(&D->report) || sh_buf_status(&D->src)))
    st = sh_fail(m->ctx, SHEAF_ERR_NOMEM, "out of memory");
  if (st) {
    sh_dyncoarse_free(D);
    return st;
  }
  *out = D;
  return SHEAF_OK;
}

int sh_dyncoarse_n_regions(const sh_dyncoarse *D) { return D ? D->n : 0; }
const sh_lang_region *sh_dyncoarse_regions(const sh_dyncoarse *D) { return D ? D->regions : NULL; }
const char *sh_dyncoarse_report(const sh_dyncoarse *D) { return D ? sh_buf_cstr(&D->report) : ""; }
const char *sh_dyncoarse_source(const sh_dyncoarse *D) { return D ? sh_buf_cstr(&D->src) : ""; }

void sh_dyncoarse_free(sh_dyncoarse *D) {
  if (!D) return;
  for (int i = 0; i < D->n; i++) sheaf_kernel_free(D->regions[i].k);
  free(D->regions);
  sh_buf_free(&D->report);
  sh_buf_free(&D->src);
  free(D);
}
