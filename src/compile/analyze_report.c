/*
 * analyze_report.c — the text `sheaf check --analyses` prints after the
 * summary: one block per analysis (taint, depth, ghost ops, host, control
 * points, regions) and the place of the linearized mode's verdict. Stable:
 * positions, names and counts only, in source order (golden-tested).
 */
#include "compile/analyze.h"
#include "compile/linear.h"

static const char *fn_name(const sh_analyses *a, int32_t fn) { return sh_sym_name(&a->m->syms, a->m->fns[fn]->name); }

/* file:line:col */
static void at(sh_buf *b, const sh_analyses *a, const sh_ast *e) {
  sh_buf_printf(b, "%s:%u:%u", a->m->diags.file, (unsigned)e->span.line, (unsigned)e->span.col);
}

/* The source text of an expression, on one line, at most 48 characters. */
static void text(sh_buf *b, const sh_analyses *a, const sh_ast *e) {
  const sh_diags *d = &a->m->diags;
  if (!d->src || e->span.off >= d->len) {
    sh_buf_puts(b, "<expr>");
    return;
  }
  size_t start = e->span.off, end = e->span.off + e->span.len, n = 0;
  if (end > d->len) end = d->len;
  int depth = 0; /* `(a * b) @ W` starts at a: take the parenthesis in */
  for (size_t i = start; i < end; i++) depth += (d->src[i] == '(') - (d->src[i] == ')');
  for (size_t i = start; depth < 0 && i > 0; i--)
    if (d->src[i - 1] == '(') depth++, start = i - 1;
  for (; depth > 0 && end < d->len; end++) /* `emb[w] @ (W1 + W2)` ends at W2: take the parenthesis in */
    depth -= d->src[end] == ')';
  bool space = false;
  for (size_t i = start; i < end; i++) {
    char ch = d->src[i];
    if (ch == '\n' || ch == '\t' || ch == ' ' || ch == '\r') {
      space = true;
      continue;
    }
    if (n >= 48) {
      sh_buf_puts(b, "...");
      return;
    }
    if (space && n) sh_buf_putc(b, ' '), n++;
    space = false;
    sh_buf_putc(b, ch), n++;
  }
}

static void report_taint(const sh_analyses *a, sh_buf *b) {
  const sh_module *m = a->m;
  sh_buf_printf(b, "taint: %d param-only expression%s (never batched: one value per batch)\n", a->n_hoist,
                a->n_hoist == 1 ? "" : "s");
  for (int i = 0; i < a->n_hoist; i++) {
    const sh_an_hoist *h = &a->hoist[i];
    const sh_ast *e = a->nodes[h->node].e;
    sh_buf_puts(b, "  ");
    at(b, a, e);
    sh_buf_puts(b, ": ");
    text(b, a, e);
    sh_buf_printf(b, " (fn %s): ", fn_name(a, a->nodes[h->node].fn));
    if (h->hoistable) sh_buf_puts(b, "hoistable, computed once per batch\n");
    else sh_buf_printf(b, "not hoistable: %s\n", h->why);
  }
  int packed = 0;
  for (int i = 0; i < a->n_matmul; i++) packed += a->matmul[i].rhs_param;
  sh_buf_printf(b, "  @: %d product%s, %d with a parameter on the right (weights packed once)\n", a->n_matmul,
                a->n_matmul == 1 ? "" : "s", packed);
  for (int i = 0; i < a->n_matmul; i++) {
    const sh_an_matmul *mm = &a->matmul[i];
    const sh_ast *e = a->nodes[mm->node].e;
    sh_buf_puts(b, "    ");
    at(b, a, e->b);
    sh_buf_puts(b, ": ");
    text(b, a, e);
    if (mm->rhs_param) sh_buf_printf(b, ": %s packed once", sh_sym_name(&m->syms, e->b->name));
    else if (mm->rhs_tainted) sh_buf_puts(b, ": right operand param-only, packable once per batch");
    else sh_buf_puts(b, ": both operands per instance");
    if (mm->lhs_param) sh_buf_printf(b, " (left operand the parameter %s)", sh_sym_name(&m->syms, e->a->name));
    sh_buf_putc(b, '\n');
  }
}

static bool d_const(const sh_an_depth *d) {
  if (d->dyn) return false;
  for (int k = 0; k < SH_AN_MAX_SYM; k++)
    if (d->off[k] >= 0) return false;
  return true;
}

static bool d_equal(const sh_an_depth *x, const sh_an_depth *y) {
  if (x->dyn != y->dyn || x->c != y->c) return false;
  for (int k = 0; k < SH_AN_MAX_SYM; k++)
    if (x->off[k] != y->off[k]) return false;
  return true;
}

/* The linearized mode's verdict (sh_lin_check). Without weights the global
 * sizes a file leaves open are unknown; the kernels are specialised to
 * sizes, so each open one stands at 64 here (the verdict depends on the
 * program's structure, not on the sizes' values). */
static sheaf_status report_linear(const sh_analyses *a, sh_buf *out) {
  const sh_module *m = a->m;
  uint32_t n = m->sizes.n;
  int64_t *sv = sh_calloc(m->ctx, (size_t)n + 1, sizeof *sv);
  if (!sv) return SHEAF_ERR_NOMEM;
  for (uint32_t v = 1; v <= n; v++)
    if (m->sizes.v[v].kind == SH_SV_GLOBAL) sv[v] = m->sizes.v[v].has_value ? m->sizes.v[v].value : 64;
  sh_lang_bind bind = {.size_values = sv, .n_sizes = n};
  char why[512] = "";
  sheaf_status st = sh_lin_check(m, &bind, why, sizeof why);
  sh_free(m->ctx, sv, ((size_t)n + 1) * sizeof *sv);
  const char *auto_no = st == SHEAF_OK ? sh_lin_auto_refusal(m) : NULL;
  if (st == SHEAF_OK && auto_no) sh_buf_printf(out, "linearized: yes, with --mode linear (--mode auto runs it dynamic: %s)\n", auto_no);
  else if (st == SHEAF_OK) sh_buf_puts(out, "linearized: yes (sheaf run --mode auto runs it linearized)\n");
  else if (st == SHEAF_ERR_UNSUPPORTED) sh_buf_printf(out, "linearized: no: %s\n", why);
  else return st;
  sheaf_ctx_clear_error(m->ctx);
  return SHEAF_OK;
}

/* The ops of nodes lo..hi (a subtree) and their depths. */
static void ops_line(const sh_analyses *a, sh_buf *b, int lo, int hi, bool leaf_arm) {
  int n = 0, dmin = 1 << 30, dmax = -1, n_distinct = 0;
  bool cons = true, dyn = false;
  const sh_an_depth *distinct[4];
  for (int i = lo; i <= hi; i++) {
    const sh_an_node *x = &a->nodes[i];
    if (!x->seen || x->cls != SH_AN_OP || x->fused) continue;
    n++;
    if (x->depth.dyn) dyn = true;
    if (!d_const(&x->depth)) {
      cons = false;
      bool seen = false;
      for (int k = 0; k < n_distinct; k++) seen = seen || d_equal(distinct[k], &x->depth);
      if (!seen && n_distinct < 4) distinct[n_distinct++] = &x->depth;
      continue;
    }
    if (x->depth.c < dmin) dmin = x->depth.c;
    if (x->depth.c > dmax) dmax = x->depth.c;
  }
  sh_buf_printf(b, "%d op%s", n, n == 1 ? "" : "s");
  if (!n) return;
  if (dyn) {
    sh_buf_puts(b, " at dynamic depths (a loop)");
  } else if (cons) {
    if (dmin == dmax) sh_buf_printf(b, " at depth %d", dmin);
    else sh_buf_printf(b, " at depths %d..%d", dmin, dmax);
    sh_buf_puts(b, leaf_arm ? " from the leaf: all leaves' work batches together" : " from the inputs");
  } else {
    sh_buf_puts(b, " at depths ");
    if (dmax >= 0 && dmin == dmax) sh_buf_printf(b, "%d, ", dmin);
    else if (dmax >= 0) sh_buf_printf(b, "%d..%d, ", dmin, dmax);
    for (int k = 0; k < n_distinct; k++) {
      if (k) sh_buf_puts(b, ", ");
      sh_an_depth_print(b, distinct[k]);
    }
    sh_buf_puts(b, " (after recursive calls)");
  }
}

static bool has_rec_call(const sh_analyses *a, int lo, int hi) {
  for (int i = lo; i <= hi; i++) {
    const sh_ast *e = a->nodes[i].e;
    if (e->kind == SH_EX_CALL && ((e->call == SH_CALL_FN && e->ref.fn->recursive) || (e->fn_arg && e->fn_arg->recursive)))
      return true;
  }
  return false;
}

static void report_depth(const sh_analyses *a, sh_buf *b, const int32_t *end) {
  const sh_module *m = a->m;
  sh_buf_puts(b, "depth: each op at max(input depths) + 1 from its function's inputs; Rk = the depth of "
                 "recursive call k's result\n");
  for (int f = 0; f < m->n_fns; f++) {
    int32_t root = a->fn_root[f];
    if (root < 0) continue;
    const sh_an_fn *af = &a->fns[f];
    sh_buf_printf(b, "  fn %s: ", fn_name(a, f));
    ops_line(a, b, root, end[root], false);
    sh_buf_puts(b, "; result at ");
    sh_an_depth_print(b, &a->nodes[root].depth);
    sh_buf_putc(b, '\n');
    for (int k = 0; k < af->n_sym; k++) {
      const sh_ast *c = af->sym[k].node >= 0 ? a->nodes[af->sym[k].node].e : NULL;
      if (!c) continue;
      sh_buf_printf(b, "    R%d = ", k + 1);
      text(b, a, c);
      sh_buf_puts(b, " at ");
      at(b, a, c);
      sh_buf_putc(b, '\n');
    }
    for (int i = root; i <= end[root]; i++) {
      const sh_ast *e = a->nodes[i].e;
      if (e->kind != SH_EX_MATCH || !a->nodes[i].seen) continue;
      for (int k = 0; k < e->n; k++) {
        int32_t body = sh_an_id(a, e->arms[k].body);
        if (body < 0) continue;
        sh_buf_puts(b, "    arm ");
        sh_an_pat_print(b, m, e->arms[k].pat);
        sh_buf_puts(b, ": ");
        bool leaf = m->fns[f]->recursive && !has_rec_call(a, body, end[body]);
        ops_line(a, b, body, end[body], leaf);
        sh_buf_putc(b, '\n');
      }
    }
  }
}

static void report_ghost(const sh_analyses *a, sh_buf *b) {
  int need = 0;
  for (int i = 0; i < a->n_ghost; i++)
    for (int k = 0; k < a->ghost[i].n_arms; k++) need += a->ghost[i].pad[k] > 0;
  sh_buf_printf(b, "ghost ops: %d branch%s producing tensors, %d arm%s to pad\n", a->n_ghost,
                a->n_ghost == 1 ? "" : "es", need, need == 1 ? "" : "s");
  for (int i = 0; i < a->n_ghost; i++) {
    const sh_an_ghost *g = &a->ghost[i];
    const sh_ast *e = a->nodes[g->node].e;
    sh_buf_puts(b, "  ");
    at(b, a, e);
    sh_buf_printf(b, ": %s (fn %s):", e->kind == SH_EX_IF ? "if" : "match", fn_name(a, a->nodes[g->node].fn));
    for (int k = 0; k < g->n_arms; k++) {
      sh_buf_puts(b, k ? ", " : " ");
      if (e->kind == SH_EX_IF) sh_buf_puts(b, k ? "else" : "then");
      else sh_an_pat_print(b, a->m, e->arms[k].pat);
      sh_buf_puts(b, " at ");
      if (g->arm_node[k] >= 0) sh_an_depth_print(b, &a->nodes[g->arm_node[k]].depth);
      if (g->pad[k] > 0) sh_buf_printf(b, " +%d ghost op%s", g->pad[k], g->pad[k] == 1 ? "" : "s");
    }
    sh_buf_puts(b, g->aligned_statically ? "\n" : ": depths not comparable statically (no padding)\n");
  }
}

static const char *const host_kind_name[] = {"", "i32/bool", "host f32", "list", "ADT"};

static void report_host(const sh_analyses *a, sh_buf *b, bool verbose) {
  const sh_module *m = a->m;
  sh_buf_puts(b, "host: expressions run on the host, never in the graph\n");
  for (int f = 0; f < m->n_fns; f++) {
    const sh_an_fn *af = &a->fns[f];
    int n = 0;
    for (int k = 1; k < 5; k++) n += af->n_host[k];
    sh_buf_printf(b, "  fn %s: %d", fn_name(a, f), n);
    if (n) {
      sh_buf_puts(b, " (");
      bool first = true;
      for (int k = 1; k < 5; k++) {
        if (!af->n_host[k]) continue;
        sh_buf_printf(b, "%s%s %d", first ? "" : ", ", host_kind_name[k], af->n_host[k]);
        first = false;
      }
      sh_buf_putc(b, ')');
    }
    sh_buf_putc(b, '\n');
    if (!verbose) continue;
    for (int i = 0; i < a->n_nodes; i++) {
      const sh_an_node *x = &a->nodes[i];
      if (x->fn != f || !x->seen || x->host == SH_AN_H_NONE) continue;
      sh_buf_puts(b, "    ");
      at(b, a, x->e);
      sh_buf_printf(b, ": %s: ", host_kind_name[x->host]);
      text(b, a, x->e);
      sh_buf_putc(b, '\n');
    }
  }
}

static void report_ctl(const sh_analyses *a, sh_buf *b) {
  if (!a->n_ctl) {
    sh_buf_puts(b, "control points: none: no value is read back from a tensor\n");
    return;
  }
  sh_buf_printf(b, "control points: %d (the instance waits for a tensor's value)\n", a->n_ctl);
  for (int i = 0; i < a->n_ctl; i++) {
    const sh_an_ctl *c = &a->ctl[i];
    const sh_ast *e = a->nodes[c->node].e;
    sh_buf_puts(b, "  ");
    at(b, a, e);
    sh_buf_printf(b, " (fn %s): ", fn_name(a, a->nodes[c->node].fn));
    if (c->wait) {
      sh_buf_printf(b, "%s: waits for the value\n", sh_builtin_name(e->builtin));
      continue;
    }
    const char *k = e->kind == SH_EX_IF ? "if" : e->kind == SH_EX_WHILE ? "while" : e->kind == SH_EX_FOR ? "for" : "match";
    sh_buf_printf(b, "%s on a value read from a tensor: ", k);
    text(b, a, e->kind == SH_EX_FOR && e->b ? e->b : e->a);
    sh_buf_putc(b, '\n');
  }
}

static void names(sh_buf *b, const sh_an_region *r, uint8_t kind) {
  for (int i = 0; i < r->n_in; i++)
    if (r->in[i].kind == kind) sh_buf_printf(b, " %s", r->in[i].name);
}

static void report_regions(const sh_analyses *a, sh_buf *b) {
  sh_buf_printf(b, "regions: %d straight-line run%s of ops (each a candidate fused kernel)\n", a->n_regions,
                a->n_regions == 1 ? "" : "s");
  for (int i = 0; i < a->n_regions; i++) {
    const sh_an_region *r = &a->regions[i];
    if (!r->n_ops) continue;
    int n = 0;
    for (int k = 0; k < r->n_ops; k++) n += a->nodes[r->ops[k]].cls == SH_AN_OP && !a->nodes[r->ops[k]].fused;
    const sh_ast *e0 = a->nodes[r->ops[0]].e; /* where it starts in its own function */
    for (int k = r->n_ops - 1; k >= 0; k--)
      if (a->nodes[r->ops[k]].fn == r->fn) e0 = a->nodes[r->ops[k]].e;
    sh_buf_printf(b, "  %s [%u:%u]: %d op%s", r->label, (unsigned)e0->span.line, (unsigned)e0->span.col, n,
                  n == 1 ? "" : "s");
    int cnt[3] = {0, 0, 0};
    for (int k = 0; k < r->n_in; k++) cnt[r->in[k].kind]++;
    if (cnt[SH_AN_IN_REC]) sh_buf_puts(b, "; recursive results"), names(b, r, SH_AN_IN_REC);
    if (cnt[SH_AN_IN_OTHER]) sh_buf_puts(b, "; inputs"), names(b, r, SH_AN_IN_OTHER);
    if (cnt[SH_AN_IN_PARAM]) sh_buf_puts(b, "; params"), names(b, r, SH_AN_IN_PARAM);
    sh_buf_puts(b, "; outputs");
    if (!r->n_out) sh_buf_puts(b, " none");
    for (int k = 0; k < r->n_out; k++) sh_buf_printf(b, "%s%s", k ? ", " : " ", r->out[k]);
    sh_buf_putc(b, '\n');
  }
}

sheaf_status sh_analyses_report(const sh_analyses *a, sh_buf *out, bool verbose) {
  if (!a->m || !a->nodes) return SHEAF_ERR_INVALID_ARG;
  int32_t *end = sh_calloc(a->m->ctx, (size_t)(a->n_nodes + 1), sizeof *end);
  if (!end) return SHEAF_ERR_NOMEM;
  for (int i = a->n_nodes - 1; i >= 0; i--) {
    if (end[i] < i) end[i] = i;
    int32_t p = a->nodes[i].parent;
    if (p >= 0 && end[p] < end[i]) end[p] = end[i];
  }
  sh_buf_printf(out, "analyses of %s:\n", a->m->diags.file);
  report_taint(a, out);
  report_depth(a, out, end);
  report_ghost(a, out);
  report_host(a, out, verbose);
  report_ctl(a, out);
  report_regions(a, out);
  sh_free(a->m->ctx, end, (size_t)(a->n_nodes + 1) * sizeof *end);
  sheaf_status st = report_linear(a, out);
  return st ? st : sh_buf_status(out);
}
