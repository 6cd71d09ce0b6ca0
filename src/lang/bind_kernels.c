/*
 * bind_kernels.c — the kernels a program's functions call, compiled once
 * per bind (sh_lang_bind_kernels, interp.h). Each goes through the public
 * kernel API (sheaf_kernel_compile: the JIT and its on-disk cache, so a
 * second run does not invoke the compiler) with a source of its own: the
 * kernel's declaration at its place in the file (padded with line breaks
 * and spaces, so positions are the file's) and the file's `size NAME =
 * VALUE` declarations after it. The interpreter calls them with
 * sheaf_kernel_call, which the runtime batches across instances.
 */
#include <string.h>

#include "lang/interp.h"

/* The token index of the first token at byte offset off, or -1. */
static long tok_at(const sh_tokens *t, uint32_t off) {
  size_t lo = 0, hi = t->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (t->v[mid].span.off < off) lo = mid + 1;
    else hi = mid;
  }
  return lo < t->n && t->v[lo].span.off == off ? (long)lo : -1;
}

/* The kernel's own source (see above) into b (interp.h). */
sheaf_status sh_lang_kernel_source(const sh_module *m, const sh_kernel_decl *kd, sh_buf *b) {
  const sh_tokens *t = &m->toks;
  long i = tok_at(t, kd->span.off); /* the name; `kernel` is the token before */
  if (i < 1) return sh_fail(m->ctx, SHEAF_ERR_INTERNAL, "kernel '%s': no tokens", sh_sym_name(&m->syms, kd->name));
  long j = i;
  while ((size_t)j < t->n && t->v[j].kind != SH_TK_LBRACE) j++;
  for (int depth = 0; (size_t)j < t->n; j++) {
    depth += t->v[j].kind == SH_TK_LBRACE ? 1 : t->v[j].kind == SH_TK_RBRACE ? -1 : 0;
    if (depth == 0) break;
  }
  if ((size_t)j >= t->n)
    return sh_fail(m->ctx, SHEAF_ERR_INTERNAL, "kernel '%s': no closing brace", sh_sym_name(&m->syms, kd->name));
  const sh_span *first = &t->v[i - 1].span, *last = &t->v[j].span;
  for (uint32_t l = 1; l < first->line; l++) sh_buf_put(b, "\n", 1);
  for (uint32_t c = 1; c < first->col; c++) sh_buf_put(b, " ", 1);
  sh_buf_put(b, m->diags.src + first->off, last->off + last->len - first->off);
  sh_buf_put(b, "\n", 1);
  for (int s = 0; s < m->n_sizes; s++)
    if (m->size_decls[s]->has_value)
      sh_buf_printf(b, "size %s = %lld\n", sh_sym_name(&m->syms, m->size_decls[s]->name),
                    (long long)m->size_decls[s]->value);
  return sh_buf_status(b);
}

sheaf_status sh_lang_bind_kernels(const sh_module *m, sh_lang_bind *b) {
  sheaf_ctx *ctx = m->ctx;
  int n = 0;
  for (int i = 0; i < m->n_kernels; i++) n += m->kernels[i]->called;
  if (!n) return SHEAF_OK;
  b->kernels = sh_calloc(ctx, (size_t)m->n_kernels, sizeof *b->kernels);
  if (!b->kernels) return SHEAF_ERR_NOMEM;
  b->n_kernels = m->n_kernels;
  sheaf_status st = SHEAF_OK;
  for (int i = 0; i < m->n_kernels && !st; i++) {
    const sh_kernel_decl *kd = m->kernels[i];
    if (!kd->called) continue;
    sh_buf src;
    sh_buf_init(&src, ctx);
    st = sh_lang_kernel_source(m, kd, &src);
    const char *name = sh_sym_name(&m->syms, kd->name);
    if (!st) st = sheaf_kernel_compile(ctx, sh_buf_cstr(&src), src.len, name, &b->kernels[i]);
    if (st) st = sh_fail_prefix(ctx, "%s: kernel '%s'", m->diags.file, name);
    sh_buf_free(&src);
  }
  return st;
}

void sh_lang_bind_kernels_free(sheaf_ctx *ctx, sh_lang_bind *b) {
  for (int i = 0; i < b->n_kernels; i++) sheaf_kernel_free(b->kernels[i]);
  if (b->kernels) sh_free(ctx, b->kernels, (size_t)b->n_kernels * sizeof *b->kernels);
  b->kernels = NULL;
  b->n_kernels = 0;
}
