/*
 * lir_print.c — the IR as readable text (tests compare it against golden
 * strings; `--emit` debugging prints it). Deterministic: names, not ids.
 *
 *   kernel matmul(M, N, K)
 *   buffer A f32[M, K] in
 *   buffer B f32[K, N] in weight panels(16)
 *   for i in 0..M parallel:
 *     for j in 0..N:
 *       C[i, j] = 0.0
 *       for k in 0..K:
 *         C[i, j] += A[i, k] * B[k, j]
 */
#include "codegen/lir_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int prec_of(const sh_lir_enode *x) {
  if (x->kind != SH_LIR_E_BIN) return 9;
  switch ((sh_lir_op)x->op) {
  case SH_LIR_OP_OR: return 1;
  case SH_LIR_OP_AND: return 2;
  case SH_LIR_OP_LT:
  case SH_LIR_OP_LE:
  case SH_LIR_OP_GT:
  case SH_LIR_OP_GE:
  case SH_LIR_OP_EQ:
  case SH_LIR_OP_NE: return 3;
  case SH_LIR_OP_ADD:
  case SH_LIR_OP_SUB: return 4;
  case SH_LIR_OP_MUL:
  case SH_LIR_OP_DIV:
  case SH_LIR_OP_MOD: return 5;
  default: return 9; /* min(a, b), max, pow: calls */
  }
}

static const char *infix(sh_lir_op op) {
  static const char *n[] = {" + ", " - ", " * ", " / ", " % ", "min", "max", "pow",
                            " < ", " <= ", " > ", " >= ", " == ", " != ", " && ", " || "};
  return n[op];
}

static void put_float(sh_buf *out, float f) {
  if (isnan(f)) {
    sh_buf_puts(out, "nan");
    return;
  }
  if (isinf(f)) {
    sh_buf_puts(out, f < 0 ? "-inf" : "inf");
    return;
  }
  char t[40];
  snprintf(t, sizeof t, "%.9g", (double)f);
  sh_buf_puts(out, t);
  if (!strpbrk(t, ".e")) sh_buf_puts(out, ".0");
}

static void pexpr(const sh_lir_kernel *k, sh_lir_expr e, int ctx_prec, sh_buf *out) {
  if (e < 0 || e >= k->n_ex) {
    sh_buf_puts(out, "<none>");
    return;
  }
  const sh_lir_enode *x = &k->ex[e];
  switch ((sh_lir_ekind)x->kind) {
  case SH_LIR_E_INT: sh_buf_printf(out, "%lld", (long long)x->i); return;
  case SH_LIR_E_FLT: put_float(out, x->f); return;
  case SH_LIR_E_SYM: sh_buf_puts(out, k->syms[x->a]); return;
  case SH_LIR_E_VAR: sh_buf_puts(out, k->vars[x->a].name); return;
  case SH_LIR_E_LD: sh_buf_printf(out, "ld(%s)", k->bufs[x->a].name); return;
  case SH_LIR_E_UN:
    sh_buf_printf(out, "%s(", sh_lir_fn_name((sh_lir_fn)x->op));
    pexpr(k, x->a, 0, out);
    sh_buf_putc(out, ')');
    return;
  case SH_LIR_E_CAST:
    sh_buf_puts(out, "float(");
    pexpr(k, x->a, 0, out);
    sh_buf_putc(out, ')');
    return;
  case SH_LIR_E_SELECT:
    sh_buf_puts(out, "select(");
    pexpr(k, x->a, 0, out);
    sh_buf_puts(out, ", ");
    pexpr(k, x->b, 0, out);
    sh_buf_puts(out, ", ");
    pexpr(k, x->c, 0, out);
    sh_buf_putc(out, ')');
    return;
  case SH_LIR_E_LOAD:
    sh_buf_printf(out, "%s[", k->bufs[x->a].name);
    for (int i = 0; i < x->n; i++) {
      if (i) sh_buf_puts(out, ", ");
      pexpr(k, k->list[x->b + i], 0, out);
    }
    sh_buf_putc(out, ']');
    return;
  case SH_LIR_E_BIN: {
    sh_lir_op op = (sh_lir_op)x->op;
    int p = prec_of(x);
    if (p == 9) {
      sh_buf_printf(out, "%s(", infix(op));
      pexpr(k, x->a, 0, out);
      sh_buf_puts(out, ", ");
      pexpr(k, x->b, 0, out);
      sh_buf_putc(out, ')');
      return;
    }
    bool paren = p < ctx_prec;
    if (paren) sh_buf_putc(out, '(');
    pexpr(k, x->a, p, out);
    sh_buf_puts(out, infix(op));
    pexpr(k, x->b, p + 1, out); /* left-associative: a - (b - c) keeps its parentheses */
    if (paren) sh_buf_putc(out, ')');
    return;
  }
  }
}

void sh_lir_print_expr(const sh_lir_kernel *k, sh_lir_expr e, sh_buf *out) {
  pexpr(k, e, 0, out);
}

static void pbuf_decl(const sh_lir_kernel *k, sh_lir_buf b, sh_buf *out) {
  static const char *roles[] = {"in", "out", "temp", "local"};
  const sh_lir_bufinfo *bi = &k->bufs[b];
  sh_buf_printf(out, "buffer %s %s[", bi->name, bi->dtype == SH_LIR_F32 ? "f32" : "i32");
  for (int d = 0; d < bi->rank; d++) {
    if (d) sh_buf_puts(out, ", ");
    if (bi->dims[d] < 0) sh_buf_puts(out, "*");
    else pexpr(k, bi->dims[d], 0, out);
  }
  sh_buf_printf(out, "] %s", roles[bi->role]);
  if (bi->weight) sh_buf_puts(out, " weight");
  if (bi->access == SH_LIR_ACCESS_LD) sh_buf_puts(out, " ld");
  if (bi->access == SH_LIR_ACCESS_ROWS) sh_buf_puts(out, " rows");
  if (bi->layout == SH_LIR_LAYOUT_RAGGED)
    sh_buf_printf(out, " ragged(%s, %s)", k->bufs[bi->lengths].name, k->bufs[bi->offsets].name);
  if (bi->layout == SH_LIR_LAYOUT_PANELS) sh_buf_printf(out, " panels(%lld)", (long long)bi->panel);
  bool padded = false;
  for (int d = 0; d < bi->rank; d++) padded = padded || bi->pad[d] > 1;
  if (padded) {
    sh_buf_puts(out, " pad(");
    for (int d = 0; d < bi->rank; d++) sh_buf_printf(out, "%s%lld", d ? ", " : "", (long long)bi->pad[d]);
    sh_buf_putc(out, ')');
  }
  if (bi->inlined) sh_buf_puts(out, " inlined");
  if (bi->per_task) sh_buf_puts(out, " per-task");
  if (bi->scoped) sh_buf_puts(out, " scoped");
  sh_buf_putc(out, '\n');
}

static void pstmts(const sh_lir_kernel *k, sh_lir_stmt s, int indent, sh_buf *out) {
  if (s < 0) {
    sh_buf_printf(out, "%*s(empty)\n", indent, "");
    return;
  }
  for (; s >= 0; s = k->st[s].next) sh_lir_print_stmt(k, s, indent, out);
}

void sh_lir_print_stmt(const sh_lir_kernel *k, sh_lir_stmt s, int indent, sh_buf *out) {
  static const char *comb[] = {" = ", " += ", " *= ", " max= ", " min= "};
  const sh_lir_snode *n = &k->st[s];
  switch ((sh_lir_skind)n->kind) {
  case SH_LIR_S_BLOCK:
    sh_buf_printf(out, "%*sblock:\n", indent, "");
    pstmts(k, n->body, indent + 2, out);
    return;
  case SH_LIR_S_LOOP:
    sh_buf_printf(out, "%*sfor %s in 0..", indent, "", k->vars[n->var].name);
    pexpr(k, n->ext, 0, out);
    if (n->annot == SH_LIR_PARALLEL) sh_buf_puts(out, " parallel");
    if (n->annot == SH_LIR_VECTOR) sh_buf_printf(out, " vector(%d)", (int)n->width);
    if (n->annot == SH_LIR_UNROLL) sh_buf_puts(out, " unroll");
    sh_buf_puts(out, ":\n");
    pstmts(k, n->body, indent + 2, out);
    return;
  case SH_LIR_S_STORE:
    sh_buf_printf(out, "%*s%s[", indent, "", k->bufs[n->buf].name);
    for (int i = 0; i < n->nidx; i++) {
      if (i) sh_buf_puts(out, ", ");
      pexpr(k, k->list[n->idx + i], 0, out);
    }
    sh_buf_printf(out, "]%s", comb[n->combine]);
    pexpr(k, n->val, 0, out);
    sh_buf_putc(out, '\n');
    return;
  case SH_LIR_S_PREFETCH:
    sh_buf_printf(out, "%*sprefetch %s[", indent, "", k->bufs[n->buf].name);
    for (int i = 0; i < n->nidx; i++) {
      if (i) sh_buf_puts(out, ", ");
      pexpr(k, k->list[n->idx + i], 0, out);
    }
    sh_buf_puts(out, "]\n");
    return;
  case SH_LIR_S_IF:
    sh_buf_printf(out, "%*sif ", indent, "");
    pexpr(k, n->cond, 0, out);
    sh_buf_puts(out, ":\n");
    pstmts(k, n->body, indent + 2, out);
    if (n->els >= 0) {
      sh_buf_printf(out, "%*selse:\n", indent, "");
      pstmts(k, k->st[n->els].body, indent + 2, out);
    }
    return;
  case SH_LIR_S_ALLOC: {
    const sh_lir_bufinfo *bi = &k->bufs[n->buf];
    sh_buf_printf(out, "%*salloc %s[", indent, "", bi->name);
    for (int d = 0; d < bi->rank; d++) {
      if (d) sh_buf_puts(out, ", ");
      pexpr(k, bi->dims[d], 0, out);
    }
    sh_buf_puts(out, "]:\n");
    pstmts(k, n->body, indent + 2, out);
    return;
  }
  }
}

void sh_lir_print(const sh_lir_kernel *k, sh_buf *out) {
  sh_buf_printf(out, "kernel %s(", k->name);
  for (int32_t i = 0; i < k->n_syms; i++) sh_buf_printf(out, "%s%s", i ? ", " : "", k->syms[i]);
  sh_buf_puts(out, ")\n");
  for (int32_t b = 0; b < k->n_bufs; b++) pbuf_decl(k, b, out);
  for (sh_lir_stmt s = k->st[k->root].body; s >= 0; s = k->st[s].next)
    sh_lir_print_stmt(k, s, 0, out);
}
