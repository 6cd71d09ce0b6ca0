/*
 * check_kcall.c — calls of `kernel` declarations from functions
 * (`y = ffn(x, W, b)`, docs/LANGUAGE.md "Calling kernels"): the kernel is
 * checked first (c_check_kernels), so its parameters are typed like a
 * generic function's: each kernel size becomes a fresh FLEX size bound by
 * unifying the parameter types with the arguments', and the result type is
 * the kernel's output shape under those bindings. A kernel a model can
 * call has f32 parameters of rank 1 or 2 (vectors and matrices, the
 * runtime's values), nothing ragged, and one result of rank 1 or 2.
 */
#include <stdio.h>
#include <string.h>

#include "lang/check_int.h"
#include "lang/kernel.h"

static const char *knm(checker *c, sh_sym s) { return sh_sym_name(c->syms, s); }

/* dims of kernel tensor t as a type over the fresh size variables. */
static sh_type *ktype(checker *c, const sh_ktensor *t, const uint32_t *vars) {
  sh_size dims[SH_MAX_RANK];
  for (int d = 0; d < t->rank; d++) {
    const sh_kaff *a = &t->dims[d].aff;
    sh_size_const(&dims[d], a->c);
    for (int i = 0; i < a->n; i++) {
      sh_size v, k, p;
      sh_size_var(&v, vars[a->t[i].size]);
      sh_size_const(&k, a->t[i].coef);
      if (!sh_size_mul(&p, &k, &v) || !sh_size_add(&dims[d], &dims[d], &p)) return &sh_type_error;
    }
  }
  sh_type *ty = sh_type_tensor(c->pool, t->rank, dims);
  if (!ty) c->nomem = true;
  return ty ? ty : &sh_type_error;
}

/* Why kernel k cannot be called from a function, or NULL. */
static const char *not_callable(const sh_kernel *k, char *buf, size_t cap) {
  for (int i = 0; i < k->n_inputs; i++) {
    const sh_ktensor *t = &k->tensors[i];
    if (t->dtype != SH_KDTYPE_F32 || t->rank < 1 || t->rank > 2 || t->ragged_outer >= 0) {
      snprintf(buf, cap, "its parameter '%s' is %s (a function passes f32 vectors and matrices)", t->name,
               t->dtype == SH_KDTYPE_I32 ? "i32" : t->ragged_outer >= 0 ? "ragged" : t->rank ? "of rank above 2" : "f32[]");
      return buf;
    }
  }
  if (k->n_outputs != 1) return snprintf(buf, cap, "it has %d results (a call gives one tensor)", k->n_outputs), buf;
  const sh_ktensor *o = &k->tensors[k->n_inputs];
  if (o->rank < 1 || o->rank > 2 || o->ragged_outer >= 0)
    return snprintf(buf, cap, "its result '%s' is not a vector or a matrix", o->name), buf;
  return NULL;
}

sh_type *c_call_kernel(checker *c, sh_ast *e, sh_kernel_decl *kd, sh_type **types) {
  const sh_kernel *k = kd->checked;
  if (!k) return &sh_type_error; /* the kernel's own errors are reported */
  char why[200];
  if (not_callable(k, why, sizeof why)) {
    c_error(c, e->name_span, "kernel '%s' cannot be called from a function: %s", knm(c, kd->name), why);
    return &sh_type_error;
  }
  if (e->n != k->n_inputs) {
    c_error(c, e->span, "wrong number of arguments: kernel '%s' takes %d but got %d", knm(c, kd->name),
            k->n_inputs, e->n);
    return &sh_type_error;
  }
  uint32_t vars[64];
  if (k->n_sizes > 64) {
    c_error(c, e->name_span, "kernel '%s' has over 64 sizes", knm(c, kd->name));
    return &sh_type_error;
  }
  for (int s = 0; s < k->n_sizes; s++) {
    sh_sym name = sh_symtab_find(c->syms, k->sizes[s].name, strlen(k->sizes[s].name));
    if (!(vars[s] = sh_sizevar_new(c->sv, name, SH_SV_FLEX, e->span))) {
      c->nomem = true;
      return &sh_type_error;
    }
  }
  bool ok = true;
  for (int i = 0; i < e->n; i++) {
    sh_type *pt = ktype(c, &k->tensors[i], vars);
    char ctx[160];
    snprintf(ctx, sizeof ctx, "argument %d of kernel '%s'", i + 1, knm(c, kd->name));
    ok = !c_is_err(pt) && c_expect(c, e->items[i]->span, pt, types[i], ctx) && ok;
  }
  if (!ok) return &sh_type_error;
  sh_type *rt = ktype(c, &k->tensors[k->n_inputs], vars);
  if (c_is_err(rt)) return rt;
  rt = sh_type_resolve(c->pool, c->sv, rt);
  if (!rt) c->nomem = true;
  e->call = SH_CALL_KERNEL;
  e->ref.kernel = kd;
  kd->called = true;
  return rt ? rt : &sh_type_error;
}
