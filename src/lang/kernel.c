/*
 * kernel.c — the checked kernels' small services (kernel.h): operator and
 * reduction names, printing, lookup in a module, and compiling a source of
 * kernels only.
 */
#include <math.h>
#include <string.h>

#include "lang/check.h"
#include "lang/kernel.h"

static const struct {
  const char *name;
  int arity;
} kops[SH_KOP_COUNT_] = {
#define SH_KOP_ROW_(id, name, arity) [SH_KOP_##id] = {name, arity},
    SH_KOP_LIST(SH_KOP_ROW_)
#undef SH_KOP_ROW_
};

const char *sh_kop_name(sh_kop op) { return (unsigned)op < SH_KOP_COUNT_ ? kops[op].name : "?"; }
int sh_kop_arity(sh_kop op) { return (unsigned)op < SH_KOP_COUNT_ ? kops[op].arity : 0; }

double sh_kred_identity(sh_kred r) {
  switch (r) {
  case SH_KRED_MUL: return 1.0;
  case SH_KRED_MAX: return -INFINITY;
  case SH_KRED_MIN: return INFINITY;
  default: return 0.0;
  }
}

const char *sh_kred_name(sh_kred r, bool init) {
  static const char *const names[][2] = {
      [SH_KRED_ASSIGN] = {"=", "="},    [SH_KRED_ADD] = {"+=", "+=!"}, [SH_KRED_MUL] = {"*=", "*=!"},
      [SH_KRED_MAX] = {"max=", "max=!"}, [SH_KRED_MIN] = {"min=", "min=!"},
  };
  return (unsigned)r <= SH_KRED_MIN ? names[r][init] : "?";
}

/* ------------------------------------------------------------- printing */

void sh_kext_print(sh_buf *out, const sh_kernel *k, const sh_kext *e) {
  if (e->kind == SH_KEXT_RAGGED) {
    sh_buf_printf(out, "%s(%s)", k->tensors[e->len].name, e->outer_name ? e->outer_name : "?");
    return;
  }
  const sh_kaff *a = &e->aff;
  for (int i = 0; i < a->n; i++) {
    int64_t c = a->t[i].coef;
    uint64_t mag = c < 0 ? 0 - (uint64_t)c : (uint64_t)c;
    sh_buf_puts(out, i == 0 ? (c < 0 ? "-" : "") : (c < 0 ? " - " : " + "));
    if (mag != 1) sh_buf_printf(out, "%llu*", (unsigned long long)mag);
    sh_buf_puts(out, k->sizes[a->t[i].size].name);
  }
  if (a->n == 0) sh_buf_printf(out, "%lld", (long long)a->c);
  else if (a->c)
    sh_buf_printf(out, " %c %llu", a->c < 0 ? '-' : '+',
                  (unsigned long long)(a->c < 0 ? 0 - (uint64_t)a->c : (uint64_t)a->c));
}

static void print_type(sh_buf *out, const sh_kernel *k, const sh_ktensor *t) {
  sh_buf_printf(out, "%s[", t->dtype == SH_KDTYPE_I32 ? "i32" : "f32");
  for (int d = 0; d < t->rank; d++) {
    if (d) sh_buf_puts(out, ", ");
    sh_kext_print(out, k, &t->dims[d]);
  }
  sh_buf_putc(out, ']');
}

/* binding strength of an expression (parentheses where a child binds looser) */
static int prec(const sh_kexpr *x) {
  if (x->kind != SH_KEXPR_OP) return 5;
  switch (x->op) {
  case SH_KOP_LT: case SH_KOP_LE: case SH_KOP_GT: case SH_KOP_GE: case SH_KOP_EQ: case SH_KOP_NE:
    return 1;
  case SH_KOP_ADD: case SH_KOP_SUB: return 2;
  case SH_KOP_MUL: case SH_KOP_DIV: return 3;
  case SH_KOP_NEG: return 4;
  default: return 5;
  }
}

static void print_expr(sh_buf *out, const sh_kernel *k, const sh_kstmt *s, const sh_kexpr *x);

static void print_operand(sh_buf *out, const sh_kernel *k, const sh_kstmt *s, const sh_kexpr *x,
                          int min_prec) {
  bool paren = prec(x) < min_prec;
  if (paren) sh_buf_putc(out, '(');
  print_expr(out, k, s, x);
  if (paren) sh_buf_putc(out, ')');
}

static void print_expr(sh_buf *out, const sh_kernel *k, const sh_kstmt *s, const sh_kexpr *x) {
  switch (x->kind) {
  case SH_KEXPR_CONST: sh_buf_printf(out, "%.9g", x->value); break;
  case SH_KEXPR_SIZE: sh_buf_puts(out, k->sizes[x->size].name); break;
  case SH_KEXPR_INDEX: sh_buf_puts(out, s->idx[x->var].name); break;
  case SH_KEXPR_ACCESS: {
    const sh_ktensor *t = &k->tensors[x->tensor];
    sh_buf_printf(out, "%s(", t->name);
    for (int d = 0; d < t->rank; d++) {
      const sh_kidx *ix = &x->idx[d];
      if (d) sh_buf_puts(out, ", ");
      if (ix->gather) print_expr(out, k, s, ix->gather);
      else if (ix->var < 0) sh_buf_printf(out, "%lld", (long long)ix->off);
      else if (ix->off == 0) sh_buf_puts(out, s->idx[ix->var].name);
      else sh_buf_printf(out, "%s %c %lld", s->idx[ix->var].name, ix->off < 0 ? '-' : '+',
                         (long long)(ix->off < 0 ? -ix->off : ix->off));
    }
    sh_buf_putc(out, ')');
    break;
  }
  case SH_KEXPR_OP: {
    int p = prec(x);
    if (p == 4) {
      sh_buf_putc(out, '-');
      print_operand(out, k, s, x->a, 4);
    } else if (p < 4) {
      print_operand(out, k, s, x->a, p == 1 ? 2 : p);
      sh_buf_printf(out, " %s ", sh_kop_name(x->op));
      print_operand(out, k, s, x->b, p + 1);
    } else {
      sh_buf_printf(out, "%s(", sh_kop_name(x->op));
      print_expr(out, k, s, x->a);
      if (x->b) sh_buf_puts(out, ", "), print_expr(out, k, s, x->b);
      if (x->c) sh_buf_puts(out, ", "), print_expr(out, k, s, x->c);
      sh_buf_putc(out, ')');
    }
    break;
  }
  }
}

void sh_kernel_print(sh_buf *out, const sh_kernel *k) {
  sh_buf_printf(out, "kernel %s(", k->name);
  for (int i = 0; i < k->n_inputs; i++) {
    sh_buf_printf(out, "%s%s: ", i ? ", " : "", k->tensors[i].name);
    print_type(out, k, &k->tensors[i]);
  }
  sh_buf_puts(out, ") -> (");
  for (int i = k->n_inputs; i < k->n_inputs + k->n_outputs; i++) {
    sh_buf_printf(out, "%s%s: ", i > k->n_inputs ? ", " : "", k->tensors[i].name);
    print_type(out, k, &k->tensors[i]);
  }
  sh_buf_puts(out, ")\n");
  for (int i = k->n_inputs + k->n_outputs; i < k->n_tensors; i++) {
    sh_buf_printf(out, "  temp %s: ", k->tensors[i].name);
    print_type(out, k, &k->tensors[i]);
    sh_buf_putc(out, '\n');
  }
  for (int i = 0; i < k->n_stmts; i++) {
    const sh_kstmt *s = &k->stmts[i];
    const sh_ktensor *t = &k->tensors[s->lhs];
    sh_buf_printf(out, "  %s(", t->name);
    for (int d = 0; d < s->n_free; d++) sh_buf_printf(out, "%s%s", d ? ", " : "", s->idx[d].name);
    sh_buf_printf(out, ") %s ", sh_kred_name(s->red, s->init));
    print_expr(out, k, s, s->rhs);
    for (int d = 0; d < s->n_idx; d++) {
      sh_buf_puts(out, d == 0 && s->n_free ? "  for " : d == s->n_free ? (d ? "; reduce " : "  reduce ")
                                                                    : ", ");
      sh_buf_printf(out, "%s in 0..", s->idx[d].name);
      sh_kext_print(out, k, &s->idx[d].range);
    }
    sh_buf_putc(out, '\n');
  }
}

/* -------------------------------------------------------------- modules */

int sh_module_kernels(const sh_module *m, const sh_kernel *const **out) {
  int n = 0;
  if (m->kernels_checked && !sh_diags_failed(&m->diags))
    while (n < m->n_kernels && m->kernels_checked[n]) n++;
  *out = (const sh_kernel *const *)m->kernels_checked;
  return n;
}

const sh_kernel *sh_module_kernel(const sh_module *m, const char *name) {
  const sh_kernel *const *v;
  int n = sh_module_kernels(m, &v);
  for (int i = 0; i < n; i++)
    if (!strcmp(v[i]->name, name)) return v[i];
  return NULL;
}

sheaf_status sh_module_require_main(sh_module *m) {
  if (m->main) return SHEAF_OK;
  sh_span at = {0, 0, 1, 1};
  sh_diag_error(&m->diags, at, "no 'main' function: this file holds kernels only (a kernel library); "
                               "running a model needs 'fn main(input: T) -> ...'");
  return sh_fail(m->ctx, SHEAF_ERR_PARSE, "%s:1:1: error: %s", m->diags.file, m->diags.v[m->diags.n - 1].msg);
}

sheaf_status sh_kernel_source_compile(sh_module *m, sheaf_ctx *ctx, const char *file, const char *src,
                                      size_t len) {
  sh_module_init(m, ctx, file, src, len);
  m->kernels_only = true;
  sheaf_status st = sh_parse(m);
  if (st != SHEAF_OK) return st;
  return sh_check(m);
}
