/*
 * summary.c — the text `sheaf check` prints for a model that checks: its
 * global sizes (with values where declared), types, parameters with their
 * shapes, function signatures (recursive ones and the entry marked), the
 * wait points (argmax / item: where an instance waits for a value, so the
 * program runs on fibers) and kernels (signature, inferred temporaries,
 * statements with index ranges).
 */
#include "lang/check.h"
#include "lang/kernel.h"

void sh_check_summary(const sh_module *m, sh_buf *out) {
  const sh_symtab *syms = &m->syms;
  const sh_sizevars *sv = &m->sizes;
  sh_buf_printf(out, "%s: ok\n", m->diags.file);
  int n_global = 0;
  for (uint32_t v = 1; v <= sv->n; v++) n_global += sv->v[v].kind == SH_SV_GLOBAL;
  sh_buf_puts(out, "sizes:");
  for (uint32_t v = 1; v <= sv->n; v++) {
    if (sv->v[v].kind != SH_SV_GLOBAL) continue;
    sh_buf_printf(out, " %s", sh_sym_name(syms, sv->v[v].name));
    if (sv->v[v].has_value) sh_buf_printf(out, "=%lld", (long long)sv->v[v].value);
  }
  sh_buf_puts(out, n_global ? "  (unset sizes come from the weights file)\n" : " none\n");
  for (int i = 0; i < m->n_adts; i++) {
    const sh_adt *a = m->adts[i];
    sh_buf_printf(out, "type %s =", sh_sym_name(syms, a->name));
    for (int k = 0; k < a->n_ctors; k++) {
      const sh_ctor *ct = &a->ctors[k];
      sh_buf_printf(out, "%s %s", k ? " |" : "", sh_sym_name(syms, ct->name));
      if (ct->n_fields) sh_buf_putc(out, '(');
      for (int f = 0; f < ct->n_fields; f++) {
        if (f) sh_buf_puts(out, ", ");
        if (ct->field_names[f]) sh_buf_printf(out, "%s: ", sh_sym_name(syms, ct->field_names[f]));
        sh_type_print(out, sv, syms, ct->field_types[f]);
      }
      if (ct->n_fields) sh_buf_putc(out, ')');
    }
    sh_buf_putc(out, '\n');
  }
  for (int i = 0; i < m->n_params; i++) {
    sh_buf_printf(out, "param %s: ", sh_sym_name(syms, m->params[i]->name));
    sh_type_print(out, sv, syms, m->params[i]->type);
    if (m->params[i]->init) sh_buf_printf(out, " = %s", sh_param_init_name(m->params[i]->init));
    if (m->params[i]->plus) sh_buf_printf(out, " + %s", sh_param_init_name(m->params[i]->plus));
    sh_buf_putc(out, '\n');
  }
  for (int i = 0; i < m->n_fns; i++) {
    const sh_fn *f = m->fns[i];
    sh_buf_printf(out, "fn %s(", sh_sym_name(syms, f->name));
    for (int k = 0; k < f->n_params; k++) {
      sh_buf_printf(out, "%s%s: ", k ? ", " : "", sh_sym_name(syms, f->params[k]->name));
      sh_type_print(out, sv, syms, f->param_types[k]);
    }
    sh_buf_puts(out, ") -> ");
    sh_type_print(out, sv, syms, f->ret_type);
    if (f->recursive) sh_buf_puts(out, "  [recursive]");
    if (f == m->main) sh_buf_puts(out, "  [entry]");
    sh_buf_putc(out, '\n');
  }
  if (m->n_waits) {
    sh_buf_printf(out, "waits: %d point%s where an instance waits for a value (it runs on a fiber; one "
                  "flush serves every waiting instance):\n", m->n_waits, m->n_waits == 1 ? "" : "s");
    for (int i = 0; i < m->n_waits; i++)
      sh_buf_printf(out, "  %s:%u:%u: %s\n", m->diags.file, (unsigned)m->waits[i]->span.line,
                    (unsigned)m->waits[i]->span.col, sh_builtin_name(m->waits[i]->builtin));
  }
  const sh_kernel *const *k;
  int n = sh_module_kernels(m, &k);
  for (int i = 0; i < n; i++) sh_kernel_print(out, k[i]);
}
