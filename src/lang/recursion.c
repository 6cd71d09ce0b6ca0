/*
 * recursion.c — the structural-recursion rule: the call graph's strongly
 * connected components (Tarjan; recursion depth bounded by the function
 * count, which the checker caps), then every call inside a component must
 * pass a strict part of one of the caller's parameters (c_is_subterm).
 */
#include "lang/check_int.h"

static const char *name_of(const checker *c, sh_sym s) { return sh_sym_name(c->syms, s); }

typedef struct tarjan {
  checker *c;
  int *index, *low, *comp, *stack;
  bool *on;
  int next, sp, n_comp;
} tarjan;

static void strongconnect(tarjan *t, int v) {
  sh_module *m = t->c->m;
  t->index[v] = t->low[v] = t->next++;
  t->stack[t->sp++] = v;
  t->on[v] = true;
  for (int e = 0; e < t->c->n_edges; e++) {
    if (t->c->edges[e].from->index != v) continue;
    int w = t->c->edges[e].to->index;
    if (t->index[w] < 0) {
      strongconnect(t, w);
      if (t->low[w] < t->low[v]) t->low[v] = t->low[w];
    } else if (t->on[w] && t->index[w] < t->low[v]) {
      t->low[v] = t->index[w];
    }
  }
  if (t->low[v] == t->index[v]) {
    int w;
    do {
      w = t->stack[--t->sp];
      t->on[w] = false;
      t->comp[w] = t->n_comp;
    } while (w != v);
    t->n_comp++;
  }
  (void)m;
}

static bool has_inductive_param(const sh_fn *f) {
  for (int i = 0; i < f->n_params; i++) {
    const sh_type *t = f->param_types[i];
    if (t->kind == SH_TY_ADT || t->kind == SH_TY_LIST) return true;
  }
  return false;
}

void c_check_recursion(checker *c) {
  sh_module *m = c->m;
  int n = m->n_fns;
  if (n == 0 || c->n_edges == 0) return;
  tarjan t = {.c = c};
  t.index = c_alloc(c, (size_t)n * sizeof(int));
  t.low = c_alloc(c, (size_t)n * sizeof(int));
  t.comp = c_alloc(c, (size_t)n * sizeof(int));
  t.stack = c_alloc(c, (size_t)n * sizeof(int));
  t.on = c_alloc(c, (size_t)n);
  if (!t.on) return;
  for (int i = 0; i < n; i++) t.index[i] = -1;
  for (int i = 0; i < n; i++)
    if (t.index[i] < 0) strongconnect(&t, i);
  for (int e = 0; e < c->n_edges; e++) {
    call_edge *ed = &c->edges[e];
    if (t.comp[ed->from->index] != t.comp[ed->to->index]) continue;
    ed->from->recursive = ed->to->recursive = true;
    if (ed->structural) continue;
    if (!has_inductive_param(ed->from))
      c_error(c, ed->at,
              "recursion on a non-ADT value: '%s' calls %s%s%s but has no tree or list parameter "
              "to recurse on",
              name_of(c, ed->from->name), ed->from == ed->to ? "itself" : "'",
              ed->from == ed->to ? "" : name_of(c, ed->to->name),
              ed->from == ed->to ? "" : "' which calls it back");
    else
      c_error(c, ed->at,
              "recursive call to '%s' must pass a part of a parameter taken apart by 'match' "
              "(or an element of a list parameter), so that recursion follows the input's structure",
              name_of(c, ed->to->name));
  }
}

