/*
 * linear_check.c — which models the linearized mode takes, before any
 * translation: no control flow on tensor values anywhere main reaches
 * (`while`, an `if` reading item/argmax/values, a wait point), and main
 * taking a binary tree, a dependency tree, a sequence of word ids or a list
 * of token records.
 * The structural rules proper (one tree parameter, calls on subtrees bound
 * by the pattern, results used as tensors) are checked while translating
 * (coarsen.c), each refusal naming its source position.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/linear_int.h"

sheaf_status sh_lin_refuse(sh_lin *L, sh_span at, const char *fmt, ...) {
  if (L->refused) return SHEAF_ERR_UNSUPPORTED; /* the first reason stays */
  L->refused = true;
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (L->why && L->why_cap)
    snprintf(L->why, L->why_cap, "%s:%u:%u: %s", L->m->diags.file ? L->m->diags.file : "model",
             (unsigned)at.line, (unsigned)at.col, msg);
  return SHEAF_ERR_UNSUPPORTED;
}

/* Whether e reads a tensor's value on the host (item, argmax, values). */
static bool reads_tensor(const sh_ast *e, int depth) {
  if (!e || depth > SH_LANG_MAX_DEPTH) return false;
  if (e->kind == SH_EX_CALL && e->call == SH_CALL_BUILTIN &&
      (e->builtin == SH_BI_ITEM || e->builtin == SH_BI_ARGMAX || e->builtin == SH_BI_VALUES))
    return true;
  if (reads_tensor(e->a, depth + 1) || reads_tensor(e->b, depth + 1) || reads_tensor(e->c, depth + 1))
    return true;
  for (int i = 0; e->items && i < e->n && e->kind != SH_EX_BLOCK && e->kind != SH_EX_MATCH; i++)
    if (reads_tensor(e->items[i], depth + 1)) return true;
  if (e->kind == SH_EX_BLOCK || e->kind == SH_EX_WHILE)
    for (int i = 0; e->lets && i < (e->kind == SH_EX_BLOCK ? e->n : 1); i++)
      if (reads_tensor(e->lets[i].value, depth + 1)) return true;
  if (e->kind == SH_EX_MATCH)
    for (int i = 0; e->arms && i < e->n; i++)
      if (reads_tensor(e->arms[i].body, depth + 1)) return true;
  return false;
}

static const char *const structure_only =
    "the linearized mode needs control flow that depends only on the input's structure";

typedef struct walk {
  sh_lin *L;
  bool seen[4096];
} walk;

static sheaf_status check_fn(walk *w, const sh_fn *f);

/* Control flow on tensor values in e, and the functions it calls. */
static sheaf_status check_expr(walk *w, const sh_ast *e, int depth) {
  if (!e) return SHEAF_OK;
  if (depth > SH_LANG_MAX_DEPTH) return sh_lin_refuse(w->L, e->span, "expression nested too deeply");
  sheaf_status st;
  switch (e->kind) {
  case SH_EX_WHILE:
    if (reads_tensor(e->a, 0)) return sh_lin_refuse(w->L, e->span, "while depends on a tensor value: %s", structure_only);
    return sh_lin_refuse(w->L, e->span, "while loop: its trip count is not the input's structure (the linearized "
                         "mode walks a tree by recursion and a sequence by scan, fold, map or for)");
  case SH_EX_IF:
    if (reads_tensor(e->a, 0)) return sh_lin_refuse(w->L, e->span, "if depends on a tensor value: %s", structure_only);
    break;
  case SH_EX_CALL:
    if (e->call == SH_CALL_BUILTIN &&
        (e->builtin == SH_BI_ITEM || e->builtin == SH_BI_ARGMAX || e->builtin == SH_BI_VALUES))
      return sh_lin_refuse(w->L, e->span, "%s reads a tensor value on the host: %s", sh_builtin_name(e->builtin),
                           structure_only);
    if (e->call == SH_CALL_FN && e->ref.fn && (st = check_fn(w, e->ref.fn))) return st;
    if (e->fn_arg && (st = check_fn(w, e->fn_arg))) return st;
    break;
  default: break;
  }
  if (e->kind == SH_EX_BLOCK) /* in source order: the lets, then the value */
    for (int i = 0; e->lets && i < e->n; i++)
      if ((st = check_expr(w, e->lets[i].value, depth + 1))) return st;
  if ((st = check_expr(w, e->a, depth + 1)) || (st = check_expr(w, e->b, depth + 1)) ||
      (st = check_expr(w, e->c, depth + 1)))
    return st;
  if (e->kind == SH_EX_BLOCK) {
  } else if (e->kind == SH_EX_MATCH) {
    for (int i = 0; e->arms && i < e->n; i++)
      if ((st = check_expr(w, e->arms[i].body, depth + 1))) return st;
  } else {
    for (int i = 0; e->items && i < e->n; i++)
      if ((st = check_expr(w, e->items[i], depth + 1))) return st;
  }
  return SHEAF_OK;
}

static sheaf_status check_fn(walk *w, const sh_fn *f) {
  if (f->index < 0 || f->index >= (int)(sizeof w->seen / sizeof w->seen[0]))
    return sh_lin_refuse(w->L, f->span, "too many functions");
  if (w->seen[f->index]) return SHEAF_OK;
  w->seen[f->index] = true;
  return check_expr(w, f->body, 0);
}

sheaf_status sh_lin_check_program(sh_lin *L) {
  const sh_module *m = L->m;
  if (!m->main) return sh_lin_refuse(L, (sh_span){0}, "the model has no main");
  walk *w = calloc(1, sizeof *w);
  if (!w) return sh_fail(L->ctx, SHEAF_ERR_NOMEM, "out of memory");
  w->L = L;
  sheaf_status st = check_fn(w, m->main);
  free(w);
  if (st) return st;
  L->in = sh_check_main_input(m);
  sh_span at = m->main->n_params ? m->main->params[0]->span : m->main->span;
  switch (L->in ? L->in->kind : SH_INPUT_UNSUPPORTED) {
  case SH_INPUT_BINARY_TREE: break;
  case SH_INPUT_TOKENS: /* list[i32]: scans, folds and maps over the words (coarsen.c) */
    L->seq = true;
    return SHEAF_OK;
  case SH_INPUT_DEP_TREE: /* Dep(i32, list[T]): leaves' arm and a ragged arm (coarsen.c) */
    L->dep = true;
    return SHEAF_OK;
  case SH_INPUT_RECORDS: /* list[R]: a sequence whose token fields are the inspector's columns (coarsen.c) */
    L->seq = L->records = true;
    return SHEAF_OK;
  default: return sh_lin_refuse(L, at, "main does not take a tree or a sequence");
  }
  if (L->in->ctor_unary >= 0)
    return sh_lin_refuse(L, L->in->adt->span, "the tree type has a unary constructor: the linearized mode takes "
                                              "Leaf(i32) | Node(T, T) only for now");
  return SHEAF_OK;
}

/* No model is run dynamic by --mode auto when it linearizes: dependency trees,
 * once refused here (a kernel per child count, a cold compile of up to a
 * minute), now compile a leaves' arm and one ragged arm (coarsen.c). */
const char *sh_lin_auto_refusal(const sh_module *m) {
  (void)m;
  return NULL;
}
