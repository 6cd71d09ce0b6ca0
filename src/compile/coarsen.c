/*
 * coarsen.c — each arm of each structural function as one straight-line
 * DAG of per-row tensor operations (sh_lin_node), by evaluating the typed
 * AST symbolically: helpers are inlined, a call of a structural function on
 * a subtree the pattern binds becomes an executor input (the child's state
 * rows), a lookup `emb[w]` of a pattern field an executor input (the
 * table's rows), tree_lstm_cell is expanded to its definition (the runtime's
 * sheaf_tree_lstm_cell: z = x·W + b; c = σ(z_i)·tanh(z_u) + σ(z_fl)·c_l +
 * σ(z_fr)·c_r; h = σ(z_o)·tanh(c)). Whatever has no translation is refused
 * with its source position (sh_lin_refuse).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/linear_int.h"

/* Sequences add: LV_ZERO (zeros(...): a scan's initial state), LV_WORDS
 * (main's words; x = 1: reversed), LV_SEQ (a scan's states as a list: x the
 * step function, n = 1: reversed), LV_POS (a map's position over the words),
 * LV_LEN (len(words)). */
/* Dependency trees add: LV_KIDS (the node's children, a list of trees),
 * LV_LIST (a list of n per-child values: the leaves' arm, n = 0), and in
 * the ragged arm (any child count >= 1) LV_KLIST (the per-child list: items[0]
 * is one child's value, its tensors per-child nodes), LV_KVEC (softmax of
 * per-child scores: x a per-child f32[1]), LV_KSTACK (stack of a per-child
 * list: x), LV_KLEN (its length, >= 1); LV_BOOL (x: a comparison of
 * lengths, known when the arm is translated: an if on it picks a branch). */
typedef enum {
  LV_NONE, LV_T, LV_TUP, LV_TREE, LV_WORD, LV_INT, LV_ZERO, LV_WORDS, LV_SEQ, LV_POS, LV_LEN, LV_KIDS, LV_LIST,
  LV_KLIST, LV_KVEC, LV_KSTACK, LV_KLEN, LV_BOOL,
  LV_OUTER, /* seq_tokmap: a tensor of main's arm, not readable in a map's own arm */
  LV_COND,  /* sequences: whether the word at the map's position + x is inside the sentence (`i > 0`) */
  LV_SOFTMAX, LV_STACK, /* sequences: softmax of a map's scores, stack of a map's rows (fn x): only as
                          `softmax(...) @ stack(...)`, an attention over the sentence (seq_attend) */
  LV_REC,   /* token records: the map's token (bound by `let Tok(w, cs, ...) = t`) */
  LV_HINT,  /* token records: a per-token host integer (x: its expression in a->hx) */
  LV_CHARS, /* token records: the token's chars (x: the slot), read by mean/sum(for c in cs { table[c] }) */
  /* decoders (seq2seq.sf): LV_ESMAT the sentence's encoder matrix (x: the map over the encoder's states,
     its rows), LV_SCORES es @ q, LV_ATTW softmax of them, LV_CTX their @ es (x: the node of q) */
  LV_ESMAT, LV_SCORES, LV_ATTW, LV_CTX
} lv_kind;

typedef struct lv {
  lv_kind kind;
  int x;   /* T: node; TREE, WORD: slot (-1: the activation's node); INT: value */
  int n;   /* TUP */
  struct lv *items;
} lv;

#define LV_POOL 4096
#define MAX_INLINE 32

typedef struct cz {
  sh_lin *L;
  int fi;
  sh_lin_arm *a;
  lv pool[LV_POOL];
  int n_pool;
  int inline_depth;
  bool in_for;     /* sequences: inside main's per-token map */
  bool for_done;   /* the map was translated: its value is for_value */
  lv for_value;
  int for_start;   /* the first node made inside the map */
} cz;

static const lv none = {LV_NONE, 0, 0, NULL};

static const char *sym(const cz *z, sh_sym s) { return sh_sym_name(&z->L->m->syms, s); }

static bool failed(const cz *z) { return z->L->refused; }

/* ------------------------------------------------------------ sizes */

static bool size_value(const sh_lin *L, const sh_size *s, int64_t *out) {
  sh_size r;
  if (!sh_size_resolve(&L->m->sizes, s, true, &r)) return false;
  int64_t v = 0;
  for (int t = 0; t < r.n; t++) {
    int64_t p = r.t[t].coef;
    for (int k = 0; k < r.t[t].deg; k++) {
      uint32_t var = r.t[t].var[k];
      if (var == 0 || var > L->bind->n_sizes || L->bind->size_values[var] <= 0) return false;
      p *= L->bind->size_values[var];
    }
    v += p;
  }
  *out = v;
  return true;
}

/* The per-row shape of a tensor type (rank 1 or 2). */
static bool type_shape(const sh_lin *L, const sh_type *t, int *rank, int64_t d[2]) {
  if (!t || t->kind != SH_TY_TENSOR || t->n < 1 || t->n > 2) return false;
  *rank = t->n;
  d[1] = 1;
  for (int i = 0; i < t->n; i++)
    if (!size_value(L, &t->dims[i], &d[i]) || d[i] <= 0) return false;
  return true;
}

/* ------------------------------------------------------------ nodes */

static int new_node(cz *z, sh_span at, sh_lin_op op, int rank, int64_t d0, int64_t d1, bool batched) {
  sh_lin_arm *a = z->a;
  if (a->n_nodes == SH_LIN_MAX_NODES) {
    sh_lin_refuse(z->L, at, "the arm has more than %d tensor operations", SH_LIN_MAX_NODES);
    return -1;
  }
  sh_lin_node *n = &a->nodes[a->n_nodes];
  memset(n, 0, sizeof *n);
  n->op = op, n->rank = rank, n->d[0] = d0, n->d[1] = rank == 2 ? d1 : 1, n->batched = batched;
  n->a = n->b = -1;
  return a->n_nodes++;
}

static sh_lin_node *nd(cz *z, int i) { return &z->a->nodes[i]; }

static lv mk_t(int node) { return node < 0 ? none : (lv){LV_T, node, 0, NULL}; }

static lv *lv_alloc(cz *z, int n, sh_span at) {
  if (z->n_pool + n > LV_POOL) {
    sh_lin_refuse(z->L, at, "too many values in one arm");
    return NULL;
  }
  lv *p = &z->pool[z->n_pool];
  z->n_pool += n;
  return p;
}

/* The input node of one child component or one looked-up row. */
static int in_node(cz *z, sh_span at, sh_lin_seg s, int rank, const int64_t d[2]) {
  int k = new_node(z, at, SH_LIN_IN, rank, d[0], d[1], true);
  if (k < 0) return -1;
  nd(z, k)->n_segs = 1;
  nd(z, k)->segs[0] = s;
  return k;
}

static int param_node(cz *z, sh_span at, const sh_param_decl *p) {
  int rank;
  int64_t d[2];
  if (!type_shape(z->L, p->type, &rank, d)) {
    sh_lin_refuse(z->L, at, "parameter '%s': its shape is not known", sym(z, p->name));
    return -1;
  }
  for (int i = 0; i < z->a->n_nodes; i++)
    if (nd(z, i)->op == SH_LIN_PARAM && nd(z, i)->param == p->index) return i;
  int k = new_node(z, at, SH_LIN_PARAM, rank, d[0], d[1], false);
  if (k >= 0) nd(z, k)->param = p->index;
  return k;
}

static int const_node(cz *z, sh_span at, double c) {
  int k = new_node(z, at, SH_LIN_CONST, 1, 1, 1, false);
  if (k >= 0) nd(z, k)->c = c;
  return k;
}

static int un_node(cz *z, sh_span at, int fn, int x) {
  if (x < 0) return -1;
  if (z->L->seq && sh_lin_mat_builtin(z->L, z->a, at, fn, &x, 1) == -1) return -1; /* of a sentence's scores */
  if (nd(z, x)->op == SH_LIN_CAT) {
    sh_lin_refuse(z->L, at, "cat of computed values is translated only as the left operand of @");
    return -1;
  }
  int k = new_node(z, at, SH_LIN_UN, nd(z, x)->rank, nd(z, x)->d[0], nd(z, x)->d[1], nd(z, x)->batched);
  if (k >= 0) nd(z, k)->fn = fn, nd(z, k)->a = x, nd(z, k)->kid = nd(z, x)->kid;
  return k;
}

static bool is_one(const sh_lin_node *n) { return n->rank == 1 && n->d[0] == 1; }

static int bin_node(cz *z, sh_span at, int op, int x, int y) {
  if (x < 0 || y < 0) return -1;
  sh_lin_node *p = nd(z, x), *q = nd(z, y);
  if (p->op == SH_LIN_CAT || q->op == SH_LIN_CAT) {
    sh_lin_refuse(z->L, at, "cat of computed values is translated only as the left operand of @");
    return -1;
  }
  const sh_lin_node *big = is_one(p) ? q : p;
  if ((p->rank == 2 && p->batched && ((q->rank == 1 && q->batched) || (q->rank == 2 && !q->batched))) ||
      (q->rank == 2 && q->batched && ((p->rank == 1 && p->batched) || (p->rank == 2 && !p->batched)))) {
    sh_lin_refuse(z->L, at, "a per-row matrix with a per-row vector or a parameter matrix: not translated");
    return -1;
  }
  if ((p->rank == 2 && !p->batched && q->batched) || (q->rank == 2 && !q->batched && p->batched)) {
    /* the result would be a per-row matrix computed from no per-row matrix */
    sh_lin_refuse(z->L, at, "a per-row f32[1] with a parameter matrix: not translated");
    return -1;
  }
  if (!is_one(p) && !is_one(q) && (p->rank != q->rank || p->d[0] != q->d[0] || p->d[1] != q->d[1])) {
    sh_lin_refuse(z->L, at, "operands of different shapes");
    return -1;
  }
  int k = new_node(z, at, SH_LIN_BIN, big->rank, big->d[0], big->d[1], p->batched || q->batched);
  if (k >= 0) nd(z, k)->fn = op, nd(z, k)->a = x, nd(z, k)->b = y, nd(z, k)->kid = nd(z, x)->kid || nd(z, y)->kid;
  return k;
}

static int slice_node(cz *z, sh_span at, int x, int64_t lo, int64_t hi) {
  if (x < 0) return -1;
  if (nd(z, x)->rank != 1 || nd(z, x)->op == SH_LIN_CAT || lo < 0 || hi <= lo || hi > nd(z, x)->d[0]) {
    sh_lin_refuse(z->L, at, "a slice the linearized mode does not translate (vectors only)");
    return -1;
  }
  int k = new_node(z, at, SH_LIN_SLICE, 1, hi - lo, 1, nd(z, x)->batched);
  if (k >= 0) nd(z, k)->a = x, nd(z, k)->lo = lo, nd(z, k)->kid = nd(z, x)->kid;
  return k;
}

/* sum(x) (max(x): op SH_LIN_RMAX) of a per-row vector: f32[1] a row. */
static int rsum_op(cz *z, sh_span at, int x, sh_lin_op op) {
  if (x < 0) return -1;
  int k = new_node(z, at, op, 1, 1, 1, nd(z, x)->batched);
  if (k >= 0) nd(z, k)->a = x;
  return k;
}

static int mm_node(cz *z, sh_span at, int x, int y) {
  if (x < 0 || y < 0) return -1;
  sh_lin_node *p = nd(z, x), *q = nd(z, y);
  int64_t K = p->rank == 1 ? p->d[0] : p->d[1];
  if (q->op == SH_LIN_CAT || (p->op == SH_LIN_CAT && q->rank != 2) || q->d[0] != K || q->kid) {
    sh_lin_refuse(z->L, at, "a product the linearized mode does not translate");
    return -1;
  }
  /* a per-row matrix read against a batched vector (or a parameter vector)
   * is read as [N, R, C]: it must be an input (flat elsewhere) */
  sh_lin_node *three = p->rank == 2 && q->rank == 1 ? p : p->rank == 1 && q->rank == 2 && q->batched ? q : NULL;
  if ((p->rank == 2 && q->rank == 2 && p->batched && q->batched) || (three && three->op != SH_LIN_IN)) {
    sh_lin_refuse(z->L, at, "a product of per-row matrices is translated only for a looked-up or child's matrix "
                            "times a vector, or a matrix times a parameter");
    return -1;
  }
  if (p->rank == 2 && q->rank == 2 && !p->batched && q->batched) {
    sh_lin_refuse(z->L, at, "a parameter matrix times a per-row matrix: not translated (a per-row matrix times a "
                            "parameter is)");
    return -1;
  }
  if (three) three->twin = true;
  int rank;
  int64_t d0, d1 = 1;
  if (p->rank == 1 && q->rank == 2) rank = 1, d0 = q->d[1];
  else if (p->rank == 2 && q->rank == 1) rank = 1, d0 = p->d[0];
  else if (p->rank == 2 && q->rank == 2) rank = 2, d0 = p->d[0], d1 = q->d[1];
  else {
    sh_lin_refuse(z->L, at, "a product of two vectors");
    return -1;
  }
  int k = new_node(z, at, SH_LIN_MM, rank, d0, d1, p->batched || q->batched);
  if (k >= 0) nd(z, k)->a = x, nd(z, k)->b = y, nd(z, k)->kid = nd(z, x)->kid;
  return k;
}

/* cat(items): inputs side by side stay one input (the executor copies them
 * next to each other); otherwise a CAT that only @ may consume. */
static int cat_node(cz *z, sh_span at, const int *items, int n) {
  bool all_in = true, kid = false;
  int n_segs = 0, n_parts = 0;
  int64_t width = 0;
  for (int i = 0; i < n; i++) {
    if (items[i] < 0) return -1;
    sh_lin_node *p = nd(z, items[i]);
    if (p->rank != 1) {
      sh_lin_refuse(z->L, at, "cat of matrices");
      return -1;
    }
    all_in = all_in && p->op == SH_LIN_IN && p->kid == nd(z, items[0])->kid;
    kid = kid || p->kid;
    n_segs += p->op == SH_LIN_IN ? p->n_segs : 0;
    n_parts += p->op == SH_LIN_CAT ? p->n_items : 1;
    width += p->d[0];
  }
  if (all_in && n_segs <= SH_LIN_MAX_SEGS) {
    int k = new_node(z, at, SH_LIN_IN, 1, width, 1, true);
    if (k < 0) return -1;
    nd(z, k)->kid = kid;
    for (int i = 0; i < n; i++)
      for (int s = 0; s < nd(z, items[i])->n_segs; s++) nd(z, k)->segs[nd(z, k)->n_segs++] = nd(z, items[i])->segs[s];
    return k;
  }
  if (n_parts > SH_LIN_MAX_SEGS) {
    sh_lin_refuse(z->L, at, "cat of more than %d parts", SH_LIN_MAX_SEGS);
    return -1;
  }
  bool batched = false; /* cat(b, c) of parameters is not per-row */
  for (int i = 0; i < n; i++) batched = batched || nd(z, items[i])->batched;
  int k = new_node(z, at, SH_LIN_CAT, 1, width, 1, batched);
  if (k < 0) return -1;
  nd(z, k)->kid = kid;
  for (int i = 0; i < n; i++) {
    sh_lin_node *p = nd(z, items[i]);
    if (p->op == SH_LIN_CAT)
      for (int j = 0; j < p->n_items; j++) nd(z, k)->items[nd(z, k)->n_items++] = p->items[j];
    else
      nd(z, k)->items[nd(z, k)->n_items++] = items[i];
  }
  return k;
}

/* ------------------------------------------------------------ functions */

static bool is_tree_fn(const sh_lin *L, const sh_fn *f) {
  if (L->records) return false; /* a record is a token's fields, not a tree: helpers taking it are inlined */
  for (int i = 0; i < f->n_params; i++)
    if (f->param_types[i] && f->param_types[i]->kind == SH_TY_ADT) return true;
  (void)L;
  return false;
}

/* Flattens a result type into components. */
static bool flatten_ret(const sh_lin *L, const sh_type *t, sh_lin_fn *f) {
  if (t && t->kind == SH_TY_TUPLE) {
    for (int i = 0; i < t->n; i++)
      if (!flatten_ret(L, t->elems[i], f)) return false;
    return true;
  }
  if (f->n_comp == SH_LIN_MAX_COMPS) return false;
  int k = f->n_comp;
  if (!type_shape(L, t, &f->comp_rank[k], f->comp_d[k])) return false;
  f->comp_width[k] = f->comp_d[k][0] * (f->comp_rank[k] == 2 ? f->comp_d[k][1] : 1);
  f->n_comp++;
  return true;
}

/* The index of structural function fn, registered on first use. */
static int fn_id(sh_lin *L, const sh_fn *fn, sh_span at) {
  for (int i = 0; i < L->n_fns; i++)
    if (L->fns[i].fn == fn) return i;
  const char *name = sh_sym_name(&L->m->syms, fn->name);
  if (L->n_fns == SH_LIN_MAX_FNS) {
    sh_lin_refuse(L, at, "more than %d structural functions", SH_LIN_MAX_FNS);
    return -1;
  }
  if (fn->n_params != 1 || !fn->param_types[0] || fn->param_types[0]->kind != SH_TY_ADT ||
      fn->param_types[0]->adt != L->in->adt) {
    sh_lin_refuse(L, fn->span, "'%s' takes a tree with other arguments: a structural function takes exactly one "
                               "tree parameter", name);
    return -1;
  }
  sh_lin_fn *f = &L->fns[L->n_fns];
  memset(f, 0, sizeof *f);
  f->fn = fn;
  if (!flatten_ret(L, fn->ret_type, f)) {
    sh_lin_refuse(L, fn->span, "'%s' must return tensors (or a tuple of them) of known sizes", name);
    return -1;
  }
  return L->n_fns++;
}

/* The step function of a scan or fold over the words (dir +1) or over
 * rev(words) (dir -1), registered on first use: (state, w: i32) -> state;
 * over a map's or a scan's list (src > 0): (state, x) -> state, x its
 * element at the step's position. */
static int step_id(sh_lin *L, const sh_fn *fn, int dir, int src, sh_span at) {
  for (int i = 0; i < L->n_fns; i++)
    if (L->fns[i].fn == fn && L->fns[i].step == dir && L->fns[i].src == src) return i;
  const char *name = sh_sym_name(&L->m->syms, fn->name);
  if (L->n_fns == SH_LIN_MAX_FNS) {
    sh_lin_refuse(L, at, "more than %d structural functions", SH_LIN_MAX_FNS);
    return -1;
  }
  if (fn->n_params != 2 || !fn->param_types[1] || (src == 0 && fn->param_types[1]->kind != SH_TY_I32)) {
    sh_lin_refuse(L, at, "'%s' is scanned over the words: the linearized mode takes a step (state, w: i32) -> state",
                  name);
    return -1;
  }
  sh_lin_fn *f = &L->fns[L->n_fns];
  memset(f, 0, sizeof *f);
  f->fn = fn;
  f->step = dir;
  f->src = src;
  if (!flatten_ret(L, fn->ret_type, f)) {
    sh_lin_refuse(L, fn->span, "'%s' must return tensors (or a tuple of them) of known sizes", name);
    return -1;
  }
  return L->n_fns++;
}

/* ------------------------------------------------------------ patterns */

static int new_slot(cz *z, sh_span at, bool word, const int8_t *path, int depth) {
  sh_lin_arm *a = z->a;
  if (a->n_slots == SH_LIN_MAX_SLOTS || depth > 8) {
    sh_lin_refuse(z->L, at, "the pattern binds too many variables or nests too deeply");
    return -1;
  }
  sh_lin_slot *s = &a->slots[a->n_slots];
  s->word = word, s->depth = depth;
  memcpy(s->path, path, (size_t)depth);
  return a->n_slots++;
}

/* Binds the variables of an arm's pattern (on the tree at path). */
static bool bind_pat(cz *z, const sh_pat *p, lv *env, int8_t *path, int depth, bool word) {
  switch (p->kind) {
  case SH_PAT_WILD: return true;
  case SH_PAT_VAR: {
    int s = -1;
    if (word || depth > 0) s = new_slot(z, p->span, word, path, depth);
    if (failed(z)) return false;
    env[p->local->index] = (lv){word ? LV_WORD : LV_TREE, s, 0, NULL};
    return true;
  }
  case SH_PAT_CTOR: {
    if (word || !p->ctor || depth >= 8) break;
    const sh_input_shape *in = z->L->in;
    if (p->ctor->index == in->ctor_leaf) return p->n < 1 || bind_pat(z, p->items[0], env, path, depth, true);
    for (int i = 0; i < p->n; i++) {
      path[depth] = (int8_t)i;
      if (!bind_pat(z, p->items[i], env, path, depth + 1, false)) return false;
    }
    return true;
  }
  default: break;
  }
  sh_lin_refuse(z->L, p->span, "a pattern the linearized mode does not translate (constructors, variables and _ only)");
  return false;
}

/* ------------------------------------------------------------ expressions */

static lv eval(cz *z, const sh_ast *e, lv *env, int depth);

static const char *const sentence_matrix =
    "a sentence's matrix (stack of a map) or softmax of a list: the linearized mode translates them only as "
    "softmax(scores) @ stack(hs), an attention over the sentence";

static int eval_t(cz *z, const sh_ast *e, lv *env, int depth) {
  lv v = eval(z, e, env, depth);
  if (failed(z)) return -1;
  if (v.kind == LV_SOFTMAX || v.kind == LV_STACK) {
    sh_lin_refuse(z->L, e->span, "%s", sentence_matrix);
    return -1;
  }
  if (v.kind != LV_T) {
    sh_lin_refuse(z->L, e->span, v.kind == LV_ZERO ? "zeros(...) is translated by the linearized mode only as a "
                  "scan's or fold's initial state" : "expected a tensor here");
    return -1;
  }
  return v.x;
}

static bool eval_int(cz *z, const sh_ast *e, lv *env, int depth, int64_t *out) {
  lv v = eval(z, e, env, depth);
  if (failed(z)) return false;
  if (v.kind != LV_INT) {
    sh_lin_refuse(z->L, e->span, "expected a size here");
    return false;
  }
  *out = v.x;
  return true;
}

/* The value of a structural call's result: its components as inputs. */
static lv call_result(cz *z, sh_span at, const sh_type *t, int call, const sh_lin_fn *g, int *comp) {
  if (t && t->kind == SH_TY_TUPLE) {
    lv *items = lv_alloc(z, t->n, at);
    if (!items) return none;
    for (int i = 0; i < t->n; i++) {
      if (g->es_fn && t == g->fn->ret_type && i == g->es_item) { /* a decoder's matrix: no component */
        items[i] = (lv){LV_ESMAT, g->es_fn, 0, NULL};
        continue;
      }
      items[i] = call_result(z, at, t->elems[i], call, g, comp);
      if (failed(z)) return none;
    }
    return (lv){LV_TUP, 0, t->n, items};
  }
  int k = *comp;
  (*comp)++;
  sh_lin_seg s = {.lookup = false, .call = call, .comp = k, .width = g->comp_width[k]};
  return mk_t(in_node(z, at, s, g->comp_rank[k], g->comp_d[k]));
}

static bool bind_let(cz *z, const sh_pat *p, lv v, lv *env);

/* A call site of a sequence arm: step g's activation chosen by sel. */
static lv seq_call(cz *z, sh_span at, int g, int sel) {
  sh_lin_arm *a = z->a;
  int c = 0;
  while (c < a->n_calls && !(a->calls[c].fn == g && a->calls[c].sel == sel)) c++;
  if (c == a->n_calls) {
    if (c == SH_LIN_MAX_CALLS) return sh_lin_refuse(z->L, at, "too many calls in one arm"), none;
    a->calls[a->n_calls++] = (sh_lin_call){g, -1, sel};
  }
  int comp = 0;
  const sh_lin_fn *gf = &z->L->fns[g];
  return call_result(z, at, gf->elem ? gf->elem : gf->fn->ret_type, c, gf, &comp);
}

static bool all_zero(lv v) {
  if (v.kind == LV_ZERO) return true;
  if (v.kind != LV_TUP) return false;
  for (int i = 0; i < v.n; i++)
    if (!all_zero(v.items[i])) return false;
  return true;
}

/* Whether v holds a row of a sentence's matrix (stack over the words; coarsen_mat.c). */
static bool carries_rows(const cz *z, lv v) {
  if (v.kind == LV_T) return z->a->nodes[v.x].tok;
  for (int i = 0; v.kind == LV_TUP && i < v.n; i++)
    if (carries_rows(z, v.items[i])) return true;
  return false;
}

/* ------------------------------------------------------------ decoders */

/* A scan whose initial state carries a sentence's matrix (seq2seq.sf:
 * `let es = stack(for (h, _) in enc { h })`, then `scan(dec_step, (h0, c0,
 * zeros(H), es), ws)`): the matrix is a map over the encoder's states (its
 * rows of a sentence contiguous), not a component of the step's state; the
 * step's `softmax(es @ q) @ es` is its query q as a component, read as the
 * attention by the executor (linear_dec.c); the initial state's components
 * are zeros or the encoder's last state, per sentence. */

static lv seq_tokmap(cz *z, const sh_ast *e, lv *env, int depth);

static bool dec_state(lv s0) {
  for (int i = 0; s0.kind == LV_TUP && i < s0.n; i++)
    if (s0.items[i].kind == LV_ESMAT) return true;
  return false;
}

static bool mentions(const sh_ast *x, const sh_local *local) {
  if (!x) return false;
  if (x->kind == SH_EX_NAME) return x->res == SH_RES_LOCAL && x->ref.local == local;
  for (int i = 0; x->kind == SH_EX_TUPLE && i < x->n; i++)
    if (mentions(x->items[i], local)) return true;
  return false;
}

/* Whether let i of block e binds a stack(for ...) that a later scan or fold takes in its initial state. */
static bool dec_matrix(const sh_ast *e, int i) {
  const sh_ast *x = e->lets[i].value;
  const sh_pat *p = e->lets[i].pat;
  if (!x || !p || p->kind != SH_PAT_VAR || x->kind != SH_EX_CALL || x->call != SH_CALL_BUILTIN ||
      x->builtin != SH_BI_STACK || x->n != 1 || !x->items[0] || x->items[0]->kind != SH_EX_FOR)
    return false;
  for (int j = i + 1; j <= e->n; j++) {
    const sh_ast *y = j < e->n ? e->lets[j].value : e->a;
    if (y && y->kind == SH_EX_CALL && y->call == SH_CALL_BUILTIN &&
        (y->builtin == SH_BI_SCAN || y->builtin == SH_BI_FOLD) && y->n == 3 && mentions(y->items[1], p->local))
      return true;
  }
  return false;
}

static lv dec_stack(cz *z, const sh_ast *x, lv *env, int depth) {
  lv v = seq_tokmap(z, x->items[0], env, depth);
  if (failed(z)) return none;
  const sh_lin_fn *g = &z->L->fns[v.x];
  if (v.kind != LV_SEQ || g->n_comp != 1 || g->comp_rank[0] != 1)
    return sh_lin_refuse(z->L, x->span, "a decoder's matrix: a stack of vectors over the words is translated"), none;
  return (lv){LV_ESMAT, v.x, 0, NULL};
}

/* The decoder's step, registered on first use: its components (the state's
 * items but the matrix) and their initial values. */
static int dec_step_id(cz *z, const sh_fn *fn, int dir, int src, lv s0, sh_span at) {
  sh_lin *L = z->L;
  for (int i = 0; i < L->n_fns; i++)
    if (L->fns[i].fn == fn && L->fns[i].step == dir && L->fns[i].src == src)
      return sh_lin_refuse(L, at, "a decoder's step scanned twice: not translated by the linearized mode"), -1;
  const char *name = sh_sym_name(&L->m->syms, fn->name);
  const sh_type *t = fn->ret_type;
  if (L->n_fns == SH_LIN_MAX_FNS) return sh_lin_refuse(L, at, "more than %d structural functions", SH_LIN_MAX_FNS), -1;
  if (fn->n_params != 2 || !fn->param_types[1] || (src == 0 && fn->param_types[1]->kind != SH_TY_I32) || !t ||
      t->kind != SH_TY_TUPLE || t->n != s0.n)
    return sh_lin_refuse(L, at, "'%s' is scanned over the words with a sentence's matrix in its state: the "
                         "linearized mode takes a step (state, w: i32) -> state, the state a flat tuple", name), -1;
  sh_lin_fn *f = &L->fns[L->n_fns];
  memset(f, 0, sizeof *f);
  f->fn = fn, f->step = dir, f->src = src;
  for (int i = 0; i < s0.n; i++) {
    lv v = s0.items[i];
    if (v.kind == LV_ESMAT) {
      if (f->es_fn) return sh_lin_refuse(L, at, "a decoder's state with two sentence matrices"), -1;
      f->es_fn = v.x, f->es_item = i;
      continue;
    }
    int k = f->n_comp;
    if (!flatten_ret(L, t->elems[i], f) || f->n_comp != k + 1)
      return sh_lin_refuse(L, fn->span, "'%s' must return tensors of known sizes besides the matrix", name), -1;
    if (v.kind == LV_ZERO) continue;
    const sh_lin_node *n = v.kind == LV_T ? nd(z, v.x) : NULL;
    const sh_lin_seg *sg = n && n->op == SH_LIN_IN && n->n_segs == 1 ? &n->segs[0] : NULL;
    const sh_lin_call *c = sg && !sg->lookup && !sg->zero && !sg->reduce && !sg->hx && !sg->chars
                               ? &z->a->calls[sg->call] : NULL;
    if (!c || c->sel != SH_LIN_SEL_LAST || sg->width != f->comp_width[k])
      return sh_lin_refuse(L, at, "a decoder's initial state: item %d is not zeros(...), an encoder scan's last state "
                           "(xs[len(words) - 1]) or the sentence's matrix", i), -1;
    f->init_fn[k] = c->fn, f->init_comp[k] = sg->comp;
    for (int m = 0; m < z->a->n_nodes; m++) { /* the encoder's last state: read by the decoder's first step, not
                                                 main's kernel (every component of that call) */
      sh_lin_node *u = nd(z, m);
      const sh_lin_seg *us = &u->segs[0];
      if (u->op == SH_LIN_IN && u->n_segs == 1 && !us->lookup && !us->zero && !us->reduce && !us->hx && !us->chars &&
          us->call == sg->call)
        u->init_only = true;
    }
  }
  return L->n_fns++;
}

static lv dec_apply(cz *z, const sh_ast *e, lv s0, lv xs) {
  const char *what = e->builtin == SH_BI_FOLD ? "fold" : "scan";
  if (xs.kind != LV_WORDS && xs.kind != LV_SEQ)
    return sh_lin_refuse(z->L, e->items[2]->span, "%s over a list other than main's words, a map over them or a "
                         "scan (or rev of these): not translated by the linearized mode", what), none;
  if (z->in_for || z->fi != 0) return sh_lin_refuse(z->L, e->span, "a decoder's %s outside main", what), none;
  bool back = xs.kind == LV_WORDS ? xs.x != 0 : xs.n != 0;
  int g = dec_step_id(z, e->fn_arg, back ? -1 : 1, xs.kind == LV_SEQ ? xs.x : 0, s0, e->items[1]->span);
  if (g < 0) return none;
  if (e->builtin == SH_BI_FOLD) return seq_call(z, e->span, g, SH_LIN_SEL_LAST);
  return (lv){LV_SEQ, g, back, NULL};
}

/* es @ q, then softmax(...) @ es: the attention over the sentence's rows. */
static lv dec_binary(cz *z, const sh_ast *e, lv x, lv y) {
  if (e->op == SH_TK_AT && x.kind == LV_ESMAT && y.kind == LV_T) {
    const sh_lin_node *q = nd(z, y.x);
    if (q->rank == 1 && q->batched && q->op != SH_LIN_CAT && !q->kid && q->d[0] == z->L->fns[x.x].comp_d[0][0])
      return (lv){LV_SCORES, y.x, 0, NULL};
  }
  if (e->op == SH_TK_AT && x.kind == LV_ATTW && y.kind == LV_ESMAT) return (lv){LV_CTX, x.x, 0, NULL};
  return sh_lin_refuse(z->L, e->span, "a sentence's matrix in a decoder's step: translated only as softmax(es @ q) @ "
                       "es (q a computed vector of the matrix's width), an attention over the sentence's rows"), none;
}

static bool dec_scores_arg(const sh_ast *e, const lv *env) {
  const sh_ast *x = e->n == 1 ? e->items[0] : NULL;
  return x && x->kind == SH_EX_BINARY && x->op == SH_TK_AT && x->a && x->a->kind == SH_EX_NAME &&
         x->a->res == SH_RES_LOCAL && x->a->ref.local && env[x->a->ref.local->index].kind == LV_ESMAT;
}

/* fold(step, s0, words) and scan(step, s0, words): the step a function of
 * its own, one activation per word position. */
static lv seq_apply(cz *z, const sh_ast *e, lv *env, int depth) {
  sh_span at = e->span;
  const char *what = e->builtin == SH_BI_FOLD ? "fold" : "scan";
  if (!e->fn_arg || e->n != 3) return sh_lin_refuse(z->L, at, "%s: a step function, a state, a list", what), none;
  if (z->L->fns[z->fi].step)
    return sh_lin_refuse(z->L, at, "%s inside a step function: the linearized mode scans main's words only",
                         what), none;
  lv s0 = eval(z, e->items[1], env, depth), xs = eval(z, e->items[2], env, depth);
  if (failed(z)) return none;
  if (dec_state(s0)) return dec_apply(z, e, s0, xs);
  if (carries_rows(z, s0))
    return sh_lin_refuse(z->L, e->items[1]->span, "%s's state carries a sentence's matrix (stack over the words): a "
                         "step that reads all of the sentence's rows (attention in a decoder) is not translated by "
                         "the linearized mode yet", what), none;
  if (!all_zero(s0))
    return sh_lin_refuse(z->L, e->items[1]->span, "%s's initial state: the linearized mode takes zeros(...) (or a "
                         "tuple of them) only for now", what), none;
  if (xs.kind != LV_WORDS && xs.kind != LV_SEQ)
    return sh_lin_refuse(z->L, e->items[2]->span, "%s over a list other than main's words, a map over them or a "
                         "scan (or rev of these): not translated by the linearized mode", what), none;
  if (z->in_for) return sh_lin_refuse(z->L, at, "%s inside a map over the words", what), none;
  bool back = xs.kind == LV_WORDS ? xs.x != 0 : xs.n != 0; /* element j at position len - 1 - j */
  int g = step_id(z->L, e->fn_arg, back ? -1 : 1, xs.kind == LV_SEQ ? xs.x : 0, at);
  if (g < 0) return none;
  if (e->builtin == SH_BI_FOLD) return seq_call(z, at, g, SH_LIN_SEL_LAST);
  return (lv){LV_SEQ, g, back, NULL};
}

/* for x in words / for i in 0..len(words) / for s in scan(...): main's
 * per-token map (its result, one activation per token). */
static lv seq_item(cz *z, const sh_ast *e, lv *env, int depth);
static bool set_outputs(cz *z, sh_span at, lv v, sh_lin_fn *f);
static lv seq_tokmap(cz *z, const sh_ast *e, lv *env, int depth);
static int raw_call(cz *z, sh_span at, int g, int sel);

static lv seq_for(cz *z, const sh_ast *e, lv *env, int depth) {
  sh_span at = e->span;
  sh_lin *L = z->L;
  if (L->fns[z->fi].step || z->fi != 0 || z->in_for || z->for_done)
    return sh_lin_refuse(L, at, "a loop other than main's one map over its words: not translated by the linearized "
                         "mode"), none;
  if (!sh_lin_mat_rows_ok(z->a, z->a->n_nodes)) /* rows of a sentence's matrix (stack) are per token */
    return sh_lin_refuse(L, at, "per-sentence tensors before main's per-token map: not translated by the "
                         "linearized mode"), none;
  z->for_start = z->a->n_nodes;
  lv item = seq_item(z, e, env, depth); /* (a scan's or a map's row: per token, inside the map) */
  if (failed(z)) return none;
  z->in_for = true;
  if (!bind_let(z, e->pat, item, env)) return none;
  lv v = eval(z, e->c, env, depth);
  z->in_for = false;
  z->for_done = true;
  z->for_value = v;
  return v;
}

/* The ragged arm's map(f, kids): one call site on every child (SH_LIN_SEL_KIDS),
 * its result's components per-child inputs [N, K(n), width]. */
static lv kid_map(cz *z, sh_span at, int g, const sh_fn *fn) {
  sh_lin_arm *a = z->a;
  int c = 0;
  while (c < a->n_calls && !(a->calls[c].fn == g && a->calls[c].sel == SH_LIN_SEL_KIDS)) c++;
  if (c == a->n_calls) {
    if (c == SH_LIN_MAX_CALLS) return sh_lin_refuse(z->L, at, "too many calls in one arm"), none;
    a->calls[a->n_calls++] = (sh_lin_call){g, -1, SH_LIN_SEL_KIDS};
  }
  int first = a->n_nodes, comp = 0;
  lv *items = lv_alloc(z, 1, at);
  if (!items) return none;
  items[0] = call_result(z, at, fn->ret_type, c, &z->L->fns[g], &comp);
  if (failed(z)) return none;
  for (int k = first; k < a->n_nodes; k++) {
    if (nd(z, k)->rank != 1)
      return sh_lin_refuse(z->L, at, "a child's state of other than vectors: the linearized mode's children are "
                           "vectors"), none;
    nd(z, k)->kid = true;
  }
  return (lv){LV_KLIST, 0, 1, items};
}

/* The element of a map over the words at the activation's position: the
 * position (0..len(words)), the word, or a scan's or a map's element. */
static lv seq_item(cz *z, const sh_ast *e, lv *env, int depth) {
  sh_span at = e->span;
  sh_lin *L = z->L;
  lv xs = eval(z, e->a, env, depth), hi = e->b ? eval(z, e->b, env, depth) : none;
  if (failed(z)) return none;
  lv item;
  if (e->b) {
    if (xs.kind != LV_INT || xs.x != 0 || hi.kind != LV_LEN || hi.x != 0)
      return sh_lin_refuse(L, at, "a range other than 0..len(words): the linearized mode maps over the words' "
                           "positions"), none;
    item = (lv){LV_POS, 0, 0, NULL};
  } else if (xs.kind == LV_WORDS && !xs.x && L->records) {
    item = (lv){LV_REC, 0, 0, NULL};
  } else if (xs.kind == LV_WORDS && !xs.x) {
    int8_t path[8] = {0};
    item = (lv){LV_WORD, new_slot(z, at, true, path, 0), 0, NULL};
  } else if (xs.kind == LV_SEQ) {
    item = seq_call(z, at, xs.x, xs.n ? SH_LIN_SEL_MIRROR : SH_LIN_SEL_POS);
  } else {
    return sh_lin_refuse(L, e->a->span, "a loop over a list other than main's words, their positions or a scan of "
                         "them"), none;
  }
  return item;
}

/* let xs = for ... { body } in main (a map whose list is not main's result,
 * tagger2.sf's x2): a function of its own with one activation per token,
 * its body translated now (it reads main's scans and maps by position). */
static lv seq_tokmap(cz *z, const sh_ast *e, lv *env, int depth) {
  sh_lin *L = z->L;
  sh_span at = e->span;
  if (z->fi != 0 || z->in_for || z->for_done)
    return sh_lin_refuse(L, at, "a map over the words inside a map or a step: not translated by the linearized "
                         "mode"), none;
  if (L->n_fns == SH_LIN_MAX_FNS)
    return sh_lin_refuse(L, at, "more than %d structural functions", SH_LIN_MAX_FNS), none;
  const sh_type *t = e->type && e->type->kind == SH_TY_LIST ? e->type->elems[0] : NULL;
  int g = L->n_fns;
  sh_lin_fn *f = &L->fns[g];
  memset(f, 0, sizeof *f);
  f->fn = L->fns[0].fn, f->tokmap = true, f->elem = t;
  if (!flatten_ret(L, t, f))
    return sh_lin_refuse(L, at, "a map over the words whose elements are not tensors (or tuples of them) of known "
                         "sizes"), none;
  L->n_fns++;
  sh_lin_arm *a = calloc(1, sizeof *a);
  cz *z2 = calloc(1, sizeof *z2);
  if (!a || !z2) {
    free(a), free(z2);
    return sh_lin_refuse(L, at, "out of memory"), none;
  }
  f->arms[f->n_arms++] = a;
  a->span = at;
  snprintf(a->name, sizeof a->name, "%.40s_map%d", sh_sym_name(&L->m->syms, f->fn->name), g);
  z2->L = L, z2->fi = g, z2->a = a;
  int n_env = L->fns[0].fn->n_locals + 1;
  lv *env2 = malloc((size_t)n_env * sizeof *env2);
  if (!env2) {
    free(z2);
    return sh_lin_refuse(L, at, "out of memory"), none;
  }
  for (int i = 0; i < n_env; i++) { /* main's tensors are rows of main's arm, not of this one */
    bool outer = env[i].kind == LV_T;
    for (int k = 0; env[i].kind == LV_TUP && k < env[i].n; k++) outer = outer || env[i].items[k].kind == LV_T;
    env2[i] = outer ? (lv){LV_OUTER, 0, 0, NULL} : env[i];
  }
  env = env2;
  lv item = seq_item(z2, e, env, depth);
  z2->in_for = true;
  if (!failed(z2) && bind_let(z2, e->pat, item, env)) {
    lv v = eval(z2, e->c, env, depth);
    if (!failed(z2)) set_outputs(z2, e->c->span, v, f);
    if (!failed(z2) && a->n_out != f->n_comp) sh_lin_refuse(L, e->c->span, "the map's element is not its type's");
  }
  free(z2), free(env2);
  return failed(z) ? none : (lv){LV_SEQ, g, 0, NULL};
}

/* map(f, kids): the children's states, f a structural function; the arm
 * has L->dep_k children (0: the leaves' arm), or any count >= 1 (-1: the
 * ragged arm, kid_map). */
static lv dep_map(cz *z, const sh_ast *e, lv *env, int depth) {
  sh_lin *L = z->L;
  sh_span at = e->span;
  lv xs = e->n == 2 ? eval(z, e->items[1], env, depth) : none;
  if (failed(z)) return none;
  if (xs.kind != LV_KIDS || !e->fn_arg)
    return sh_lin_refuse(L, at, "map over a list other than the node's children: not translated"), none;
  int g = fn_id(L, e->fn_arg, at);
  if (g < 0) return none;
  L->dep_used = true;
  if (L->dep_k < 0) return kid_map(z, at, g, e->fn_arg);
  int k = L->dep_k;
  lv *items = k ? lv_alloc(z, k, at) : NULL;
  if (k && !items) return none;
  for (int c = 0; c < k; c++) {
    int8_t path[8] = {(int8_t)c};
    int slot = new_slot(z, at, false, path, 1);
    if (slot < 0) return none;
    sh_lin_arm *a = z->a;
    if (a->n_calls == SH_LIN_MAX_CALLS) return sh_lin_refuse(L, at, "too many calls in one arm"), none;
    int call = a->n_calls;
    a->calls[a->n_calls++] = (sh_lin_call){g, slot, SH_LIN_SEL_TREE};
    int comp = 0;
    items[c] = call_result(z, at, e->fn_arg->ret_type, call, &L->fns[g], &comp);
    if (failed(z)) return none;
  }
  return (lv){LV_LIST, 0, k, items};
}

/* for pat in xs { body } over a per-child list: the body once per child
 * (the ragged arm: once, on per-child values). */
static lv dep_for(cz *z, const sh_ast *e, lv xs, lv *env, int depth) {
  if (xs.kind == LV_KLIST) {
    lv *it = lv_alloc(z, 1, e->span);
    if (!it || !bind_let(z, e->pat, xs.items[0], env)) return none;
    it[0] = eval(z, e->c, env, depth);
    if (failed(z)) return none;
    if (it[0].kind != LV_T || !nd(z, it[0].x)->kid)
      return sh_lin_refuse(z->L, e->c->span, "a loop over the children whose body is not a tensor read from the "
                           "child: not translated by the linearized mode"), none;
    return (lv){LV_KLIST, 0, 1, it};
  }
  lv *items = xs.n ? lv_alloc(z, xs.n, e->span) : NULL;
  if (xs.n && !items) return none;
  for (int c = 0; c < xs.n; c++) {
    if (!bind_let(z, e->pat, xs.items[c], env)) return none;
    items[c] = eval(z, e->c, env, depth);
    if (failed(z)) return none;
  }
  return (lv){LV_LIST, 0, xs.n, items};
}

/* A zero vector of type t's shape (the sum of no children): an input the
 * executor fills with zeros. */
static int zero_node(cz *z, sh_span at, const sh_type *t) {
  int rank;
  int64_t d[2];
  if (!type_shape(z->L, t, &rank, d) || rank != 1) {
    sh_lin_refuse(z->L, at, "a sum of a list of other than vectors of known size");
    return -1;
  }
  sh_lin_seg s = {.zero = true, .width = d[0]};
  return in_node(z, at, s, 1, d);
}

/* xs[i]: a scan's state or a word at a map's position. */
static lv seq_index(cz *z, const sh_ast *e, lv xs, lv i) {
  if ((i.kind == LV_INT || i.kind == LV_LEN) && xs.kind == LV_WORDS && !xs.x && i.x >= -100 && i.x <= 100 &&
      (i.kind == LV_LEN ? i.x < 0 : i.x >= 0)) { /* ws[c], ws[len(ws) - c]: a run error past the sentence */
    int8_t path[8] = {0};
    int s = new_slot(z, e->span, true, path, 0);
    if (s < 0) return none;
    z->a->slots[s].shift = (int8_t)i.x, z->a->slots[s].anchor = i.kind == LV_LEN ? 2 : 1;
    return (lv){LV_WORD, s, 0, NULL};
  }
  if (i.kind == LV_INT || i.kind == LV_LEN)
    return sh_lin_refuse(z->L, e->b->span, "an index at a fixed place of the sentence (ws[0], xs[len(ws) - 1]): the "
                         "linearized mode reads a list at a map's position (or a neighbour of it) only"), none;
  if (i.kind != LV_POS)
    return sh_lin_refuse(z->L, e->b->span, "an index other than the map's position over the words"), none;
  if (i.x != 0 && xs.kind == LV_WORDS && !xs.x) { /* a neighbour ws[i + k]: -1 outside the sentence */
    int8_t path[8] = {0};
    int s = i.x >= -100 && i.x <= 100 ? new_slot(z, e->span, true, path, 0) : -1;
    if (s < 0) return sh_lin_refuse(z->L, e->b->span, "a neighbour index too far from the map's position"), none;
    z->a->slots[s].shift = (int8_t)i.x;
    return (lv){LV_WORD, s, 0, NULL};
  }
  if (i.x != 0)
    return sh_lin_refuse(z->L, e->b->span, "a neighbour index into a list other than main's words: not translated "
                         "by the linearized mode"), none;
  if (xs.kind == LV_T && e->a->type && e->a->type->kind == SH_TY_TENSOR && e->a->type->n == 2 &&
      nd(z, xs.x)->rank == 1 && nd(z, xs.x)->batched)
    return xs; /* row i of a sentence's matrix (coarsen_mat.c): the token's own row */
  if (xs.kind == LV_SEQ) return seq_call(z, e->span, xs.x, xs.n ? SH_LIN_SEL_MIRROR : SH_LIN_SEL_POS);
  if (xs.kind == LV_WORDS && !xs.x) {
    int8_t path[8] = {0};
    return (lv){LV_WORD, new_slot(z, e->span, true, path, 0), 0, NULL};
  }
  return sh_lin_refuse(z->L, e->span, "indexing a list other than main's words or a scan of them"), none;
}

/* Arithmetic on the map's position and len(words): i + k, i - k, len(ws) - k
 * (LV_POS, LV_LEN with x the offset), and the comparisons that ask whether
 * a neighbour exists: i > c, i >= c (the word at i + k, k <= 0) and
 * i + k < len(ws), i + k <= len(ws) - c (k >= 0), as LV_COND. */
static lv seq_pos_arith(cz *z, const sh_ast *e, lv x, lv y) {
  int op = e->op;
  if ((op == SH_TK_PLUS || op == SH_TK_MINUS) && (x.kind == LV_POS || x.kind == LV_LEN) && y.kind == LV_INT)
    return (lv){x.kind, op == SH_TK_PLUS ? x.x + y.x : x.x - y.x, 0, NULL};
  if (op == SH_TK_PLUS && x.kind == LV_INT && (y.kind == LV_POS || y.kind == LV_LEN))
    return (lv){y.kind, x.x + y.x, 0, NULL};
  if (x.kind != LV_POS && y.kind == LV_POS) { /* c < i: i > c */
    lv t = x;
    x = y, y = t;
    op = op == SH_TK_LT ? SH_TK_GT : op == SH_TK_LE ? SH_TK_GE : op == SH_TK_GT ? SH_TK_LT
       : op == SH_TK_GE ? SH_TK_LE : op;
  }
  int k;
  if (x.kind == LV_POS && y.kind == LV_INT && (op == SH_TK_GT || op == SH_TK_GE)) { /* p + a > c: p + a - c - 1 >= 0 */
    k = x.x - y.x - (op == SH_TK_GT);
    if (k <= 0 && k >= -100) return (lv){LV_COND, k, 0, NULL}; /* the word at p + k exists (p + k < len holds) */
  } else if (x.kind == LV_POS && y.kind == LV_LEN && (op == SH_TK_LT || op == SH_TK_LE)) { /* p + a < len + d */
    k = x.x - y.x - (op == SH_TK_LE);
    if (k >= 0 && k <= 100) return (lv){LV_COND, k, 0, NULL}; /* the word at p + k exists (p + k >= 0 holds) */
  }
  return sh_lin_refuse(z->L, e->span, "arithmetic on the map's position other than i + k, i - k and the tests "
                       "whether a neighbour exists (i > 0, i + 1 < len(ws)): not translated by the linearized "
                       "mode"), none;
}

/* if <a neighbour exists> { lookups of that neighbour } else { zeros(...) }:
 * the lookups, read as zeros where the neighbour is outside the sentence. */
static lv seq_if(cz *z, const sh_ast *e, lv *env, int depth) {
  lv c = eval(z, e->a, env, depth);
  if (failed(z)) return none;
  if (c.kind != LV_COND)
    return sh_lin_refuse(z->L, e->span, "an if other than on whether a neighbour ws[i + k] exists: the linearized "
                         "mode needs straight-line code"), none;
  lv t = eval(z, e->b, env, depth), f = eval(z, e->c, env, depth);
  if (failed(z)) return none;
  if (c.x == 0) return t; /* the word at the map's position: always there */
  const sh_lin_node *n = t.kind == LV_T ? nd(z, t.x) : NULL;
  bool ok = n && n->op == SH_LIN_IN && f.kind == LV_ZERO;
  for (int i = 0; ok && i < n->n_segs; i++)
    ok = n->segs[i].lookup && z->a->slots[z->a->field_slot[n->segs[i].field]].shift == c.x;
  if (!ok)
    return sh_lin_refuse(z->L, e->span, "an if on a neighbour's existence is translated as `if ... { emb[ws[i + k]] "
                         "} else { zeros(...) }` only"), none;
  int k = new_node(z, e->span, SH_LIN_IN, n->rank, n->d[0], n->d[1], true);
  if (k < 0) return none;
  sh_lin_node *m = nd(z, k);
  n = nd(z, t.x);
  m->n_segs = n->n_segs;
  memcpy(m->segs, n->segs, sizeof n->segs);
  for (int i = 0; i < m->n_segs; i++) m->segs[i].edge = true;
  return mk_t(k);
}

/* A call of g by selector sel in arm a (one per pair). */
static int raw_call(cz *z, sh_span at, int g, int sel) {
  sh_lin_arm *a = z->a;
  int c = 0;
  while (c < a->n_calls && !(a->calls[c].fn == g && a->calls[c].sel == sel)) c++;
  if (c == a->n_calls) {
    if (c == SH_LIN_MAX_CALLS) return sh_lin_refuse(z->L, at, "too many calls in one arm"), -1;
    a->calls[a->n_calls++] = (sh_lin_call){g, -1, sel};
  }
  return c;
}

/* max(xs), mean(xs), sum(xs) in main over a map bound in main (its rows of
 * the sentence: contiguous): an input the executor reduces (linear_reduce.c). */
static lv seq_reduce(cz *z, const sh_ast *e, lv *env, int depth) {
  sh_span at = e->span;
  const char *what = sh_builtin_name(e->builtin);
  lv xs = eval(z, e->items[0], env, depth);
  if (failed(z)) return none;
  if (z->fi != 0 || z->in_for)
    return sh_lin_refuse(z->L, at, "%s over a list inside a map or a step: not translated by the linearized mode",
                         what), none;
  if (xs.kind != LV_SEQ || !z->L->fns[xs.x].tokmap)
    return sh_lin_refuse(z->L, e->items[0]->span, "%s over a list other than a map over the words bound by a let: "
                         "not translated by the linearized mode", what), none;
  const sh_lin_fn *g = &z->L->fns[xs.x];
  if (g->n_comp != 1 || g->comp_rank[0] != 1)
    return sh_lin_refuse(z->L, at, "%s over a list of other than vectors: not translated by the linearized mode",
                         what), none;
  int cf = raw_call(z, at, xs.x, SH_LIN_SEL_FIRST), ce = cf < 0 ? -1 : raw_call(z, at, xs.x, SH_LIN_SEL_END);
  if (ce < 0) return none;
  sh_lin_seg s = {.call = cf, .call_end = ce, .comp = 0, .reduce = e->builtin, .width = g->comp_width[0]};
  return mk_t(in_node(z, at, s, 1, g->comp_d[0]));
}

/* softmax(for ... { score }) or softmax(scores), stack(hs): a map bound in
 * main (the for translated as one, seq_tokmap), kept for seq_attend. */
static lv seq_list_value(cz *z, const sh_ast *e, lv *env, int depth) {
  const sh_ast *x = e->items[0];
  const char *what = sh_builtin_name(e->builtin);
  lv xs = x->kind == SH_EX_FOR ? seq_tokmap(z, x, env, depth) : eval(z, x, env, depth);
  if (failed(z)) return none;
  if (z->fi != 0 || z->in_for)
    return sh_lin_refuse(z->L, e->span, "%s of a list inside a map or a step: not translated by the linearized mode",
                         what), none;
  if (xs.kind != LV_SEQ || !z->L->fns[xs.x].tokmap || xs.n)
    return sh_lin_refuse(z->L, x->span, "%s over a list other than a map over the words: not translated by the "
                         "linearized mode", what), none;
  const sh_lin_fn *g = &z->L->fns[xs.x];
  if (g->n_comp != 1 || g->comp_rank[0] != 1 || (e->builtin == SH_BI_SOFTMAX && g->comp_d[0][0] != 1))
    return sh_lin_refuse(z->L, x->span, "%s over a list of other than %s: not translated by the linearized mode",
                         what, e->builtin == SH_BI_SOFTMAX ? "scores f32[1]" : "vectors"), none;
  return (lv){e->builtin == SH_BI_SOFTMAX ? LV_SOFTMAX : LV_STACK, xs.x, 0, NULL};
}

/* softmax(scores) @ stack(hs): the attention-weighted sum of the sentence's
 * rows of hs, an input the executor reduces (linear_reduce.c). */
static lv seq_attend(cz *z, const sh_ast *e, lv w, lv xs) {
  sh_span at = e->span;
  const sh_lin_fn *g = &z->L->fns[xs.x];
  int cf = raw_call(z, at, xs.x, SH_LIN_SEL_FIRST), ce = cf < 0 ? -1 : raw_call(z, at, xs.x, SH_LIN_SEL_END);
  int cw = ce < 0 ? -1 : raw_call(z, at, w.x, SH_LIN_SEL_FIRST);
  if (cw < 0) return none;
  sh_lin_seg s = {.call = cf, .call_end = ce, .weights = cw, .comp = 0, .reduce = SH_BI_SOFTMAX,
                  .width = g->comp_width[0]};
  return mk_t(in_node(z, at, s, 1, g->comp_d[0]));
}

/* ------------------------------------------------------------ token records */

/* main takes a list of token records (chartagger.sf): the map's token binds
 * its fields by `let Tok(w, cs, rel, head, i) = t`. An integer field is a
 * pattern field of the row (the inspector's column); a lookup by it reads
 * the table's row (a word's by sh_lang_word_row, another's by its value);
 * integer code over the fields (`if head == 0 { 0 } else { head - 1 - i }`)
 * is a per-token host expression the executor evaluates, read as a tensor
 * through float(...); `mean(for c in cs { cemb[c] })` (or sum) over the
 * token's chars an input the executor reduces (linear_rec.c). */

static bool rec_int(const cz *z, lv v) {
  if (v.kind == LV_HINT) return true;
  return v.kind == LV_WORD && v.x >= 0 && z->a->slots[v.x].tf != SH_TF_WORD && z->a->slots[v.x].tf != SH_TF_CHARS;
}

static int rec_field_of(cz *z, int slot) {
  sh_lin_arm *a = z->a;
  int f = 0;
  while (f < a->n_fields && a->field_slot[f] != slot) f++;
  if (f == a->n_fields) a->field_slot[a->n_fields++] = slot;
  return f;
}

static int hx_new(cz *z, sh_span at, int op, int x, int y, int c, int32_t v) {
  sh_lin_arm *a = z->a;
  if (failed(z)) return -1;
  if (a->n_hx == SH_LIN_MAX_HX) {
    sh_lin_refuse(z->L, at, "a token's integer code of more than %d operations: not translated by the linearized mode",
                  SH_LIN_MAX_HX);
    return -1;
  }
  a->hx[a->n_hx] = (sh_lin_hx){(int8_t)op, x, y, c, v, at};
  return a->n_hx++;
}

/* The host expression of an integer value (a literal, a field, an expression), -1 refused. */
static int rec_hx_of(cz *z, sh_span at, lv v) {
  if (failed(z)) return -1;
  if (v.kind == LV_HINT) return v.x;
  if (v.kind == LV_INT) return hx_new(z, at, SH_HX_CONST, -1, -1, -1, v.x);
  if (rec_int(z, v)) return hx_new(z, at, SH_HX_FIELD, -1, -1, -1, rec_field_of(z, v.x));
  sh_lin_refuse(z->L, at, "a token's integer code over other than its integer fields and integer literals: not "
                "translated by the linearized mode");
  return -1;
}

static lv rec_hx(cz *z, sh_span at, int op, int x, int y, int c, int32_t v) {
  if (x < 0 || (op != SH_HX_NEG && y < 0)) return none;
  int k = hx_new(z, at, op, x, y, c, v);
  return k < 0 ? none : (lv){LV_HINT, k, 0, NULL};
}

static lv rec_arith(cz *z, const sh_ast *e, lv x, lv y) {
  int op;
  switch (e->op) {
  case SH_TK_PLUS: op = SH_HX_ADD; break;
  case SH_TK_MINUS: op = SH_HX_SUB; break;
  case SH_TK_STAR: op = SH_HX_MUL; break;
  case SH_TK_EQ: op = SH_HX_EQ; break;
  case SH_TK_NE: op = SH_HX_NE; break;
  case SH_TK_LT: op = SH_HX_LT; break;
  case SH_TK_LE: op = SH_HX_LE; break;
  case SH_TK_GT: op = SH_HX_GT; break;
  case SH_TK_GE: op = SH_HX_GE; break;
  default:
    return sh_lin_refuse(z->L, e->span, "a token's integer code with other than + - * and comparisons: not "
                         "translated by the linearized mode"), none;
  }
  int a = rec_hx_of(z, e->a->span, x), b = a < 0 ? -1 : rec_hx_of(z, e->b->span, y);
  return rec_hx(z, e->span, op, a, b, -1, 0);
}

/* if on a token's integer fields, with integer branches: a host expression. */
static lv rec_if(cz *z, const sh_ast *e, lv *env, int depth) {
  lv c = eval(z, e->a, env, depth);
  if (failed(z)) return none;
  if (c.kind != LV_HINT) return seq_if(z, e, env, depth); /* a neighbour's existence (sequences) */
  lv t = e->b ? eval(z, e->b, env, depth) : none, f = e->c ? eval(z, e->c, env, depth) : none;
  if (failed(z)) return none;
  if (!(t.kind == LV_INT || rec_int(z, t)) || !(f.kind == LV_INT || rec_int(z, f)))
    return sh_lin_refuse(z->L, e->span, "an if on a token's integer fields whose branches are not integers: the "
                         "linearized mode evaluates such code per token on the host (a tensor reads it through "
                         "float(...))"), none;
  int tb = rec_hx_of(z, e->b->span, t), fb = tb < 0 ? -1 : rec_hx_of(z, e->c->span, f);
  if (fb < 0) return none;
  return rec_hx(z, e->span, SH_HX_IF, c.x, tb, fb, 0);
}

/* float(x) of a token's integer code: an f32[1] input, its value per row. */
static lv rec_float(cz *z, const sh_ast *e, lv *env, int depth) {
  lv v = eval(z, e->items[0], env, depth);
  if (failed(z)) return none;
  if (v.kind == LV_INT) return mk_t(const_node(z, e->span, (double)v.x));
  int k = rec_hx_of(z, e->items[0]->span, v);
  if (k < 0) return none;
  sh_lin_seg s = {.hx = 1 + k, .width = 1};
  return mk_t(in_node(z, e->span, s, 1, (int64_t[]){1, 1}));
}

/* Whether builtin e's argument is a loop over a token's chars. */
static bool rec_chars_loop(const sh_ast *e, const lv *env) {
  const sh_ast *f = e->n == 1 ? e->items[0] : NULL;
  return f && f->kind == SH_EX_FOR && !f->b && f->a && f->a->kind == SH_EX_NAME && f->a->res == SH_RES_LOCAL &&
         f->a->ref.local && env[f->a->ref.local->index].kind == LV_CHARS;
}

/* mean(for c in cs { table[c] }) or sum(...) over the token's chars. */
static lv rec_chars(cz *z, const sh_ast *e, lv *env) {
  const sh_ast *f = e->items[0], *b = f->c;
  while (b && b->kind == SH_EX_BLOCK && b->n == 0) b = b->a; /* { table[c] } */
  lv cs = env[f->a->ref.local->index];
  if (!f->pat || f->pat->kind != SH_PAT_VAR || !b || b->kind != SH_EX_INDEX || !b->lookup || !b->a ||
      b->a->kind != SH_EX_NAME || b->a->res != SH_RES_PARAM || !b->b || b->b->kind != SH_EX_NAME ||
      b->b->res != SH_RES_LOCAL || b->b->ref.local != f->pat->local)
    return sh_lin_refuse(z->L, f->span, "a loop over a token's chars: the linearized mode translates it only as "
                         "%s(for c in cs { table[c] })", sh_builtin_name(e->builtin)), none;
  const sh_param_decl *p = b->a->ref.param;
  int rank;
  int64_t d[2];
  if (!type_shape(z->L, p->type, &rank, d) || rank != 2)
    return sh_lin_refuse(z->L, b->span, "lookup in '%s': not a table of known size", sym(z, p->name)), none;
  sh_lin_seg s = {.chars = true, .reduce = e->builtin, .param = p->index, .field = rec_field_of(z, cs.x),
                  .width = d[1]};
  return mk_t(in_node(z, e->span, s, 1, (int64_t[]){d[1], 1}));
}

/* let Tok(w, cs, ...) = t: the token's fields. */
static bool rec_bind(cz *z, const sh_pat *p, lv *env) {
  const sh_input_shape *in = z->L->in;
  if (!p->ctor || p->ctor->index != in->ctor_rec || p->n != in->n_rec_fields) {
    sh_lin_refuse(z->L, p->span, "a pattern on a token record other than its constructor");
    return false;
  }
  for (int i = 0; i < p->n; i++) {
    const sh_pat *q = p->items[i];
    if (q->kind == SH_PAT_WILD) continue;
    if (q->kind != SH_PAT_VAR) {
      sh_lin_refuse(z->L, q->span, "a token record's field bound by other than a variable or _: not translated by "
                    "the linearized mode");
      return false;
    }
    int8_t path[8] = {0};
    int s = new_slot(z, q->span, true, path, 0);
    if (s < 0) return false;
    z->a->slots[s].tf = (int8_t)in->rec_field[i];
    env[q->local->index] = (lv){in->rec_field[i] == SH_TF_CHARS ? LV_CHARS : LV_WORD, s, 0, NULL};
  }
  return true;
}

static lv structural_call(cz *z, const sh_ast *e, lv *env, int depth) {
  int g = fn_id(z->L, e->ref.fn, e->span);
  if (g < 0) return none;
  if (e->n != 1) return sh_lin_refuse(z->L, e->span, "a structural call takes one tree"), none;
  lv t = eval(z, e->items[0], env, depth);
  if (failed(z)) return none;
  if (t.kind != LV_TREE)
    return sh_lin_refuse(z->L, e->items[0]->span, "'%s' is called on a tree the pattern does not bind: the "
                         "linearized mode calls structural functions on subtrees of the node", sym(z, e->name)), none;
  sh_lin_arm *a = z->a;
  int c = 0;
  while (c < a->n_calls && !(a->calls[c].fn == g && a->calls[c].slot == t.x)) c++;
  if (c == a->n_calls) {
    if (c == SH_LIN_MAX_CALLS) return sh_lin_refuse(z->L, e->span, "too many calls in one arm"), none;
    a->calls[a->n_calls++] = (sh_lin_call){g, t.x, SH_LIN_SEL_TREE};
  }
  int comp = 0;
  return call_result(z, e->span, e->ref.fn->ret_type, c, &z->L->fns[g], &comp);
}

static bool bind_let(cz *z, const sh_pat *p, lv v, lv *env) {
  switch (p->kind) {
  case SH_PAT_WILD: return true;
  case SH_PAT_VAR: env[p->local->index] = v; return true;
  case SH_PAT_CTOR: /* let Dep(w, kids) = t: the node's word and children */
    if (v.kind == LV_REC) return rec_bind(z, p, env);
    if (!z->L->dep || v.kind != LV_TREE || v.x >= 0 || !p->ctor || p->ctor->index != z->L->in->ctor_dep ||
        p->n != 2)
      break;
    for (int i = 0; i < 2; i++) {
      const sh_pat *q = p->items[i];
      if (q->kind == SH_PAT_WILD) continue;
      if (q->kind != SH_PAT_VAR) break;
      if (i == z->L->in->dep_kids) {
        env[q->local->index] = (lv){LV_KIDS, 0, 0, NULL};
      } else {
        int8_t path[8] = {0};
        env[q->local->index] = (lv){LV_WORD, new_slot(z, q->span, true, path, 0), 0, NULL};
      }
    }
    if (failed(z)) return false;
    return true;
  case SH_PAT_TUPLE:
    if (v.kind != LV_TUP || v.n != p->n) break;
    for (int i = 0; i < p->n; i++)
      if (!bind_let(z, p->items[i], v.items[i], env)) return false;
    return true;
  default: break;
  }
  sh_lin_refuse(z->L, p->span, "a let pattern the linearized mode does not translate");
  return false;
}

static lv inline_call(cz *z, const sh_ast *e, lv *env, int depth) {
  const sh_fn *f = e->ref.fn;
  if (z->inline_depth >= MAX_INLINE) return sh_lin_refuse(z->L, e->span, "helpers nested too deeply"), none;
  if (f->n_params != e->n || f->n_locals < f->n_params) return sh_lin_refuse(z->L, e->span, "bad call"), none;
  lv *env2 = calloc((size_t)f->n_locals + 1, sizeof *env2);
  if (!env2) return sh_lin_refuse(z->L, e->span, "out of memory"), none;
  for (int i = 0; i < e->n && !failed(z); i++) env2[f->params[i]->index] = eval(z, e->items[i], env, depth + 1);
  lv r = none;
  if (!failed(z)) {
    z->inline_depth++;
    r = eval(z, f->body, env2, depth + 1);
    z->inline_depth--;
  }
  free(env2);
  return r;
}

static lv tree_lstm_cell(cz *z, const sh_ast *e, lv *env, int depth) {
  int W = eval_t(z, e->items[0], env, depth), b = eval_t(z, e->items[1], env, depth);
  int x = eval_t(z, e->items[2], env, depth), cl = eval_t(z, e->items[3], env, depth);
  int cr = eval_t(z, e->items[4], env, depth);
  if (failed(z)) return none;
  sh_span at = e->span;
  int64_t H = nd(z, cl)->d[0];
  int zz = bin_node(z, at, SH_TK_PLUS, mm_node(z, at, x, W), b);
  int gi = un_node(z, at, SH_BI_SIGMOID, slice_node(z, at, zz, 0, H));
  int gfl = un_node(z, at, SH_BI_SIGMOID, slice_node(z, at, zz, H, 2 * H));
  int gfr = un_node(z, at, SH_BI_SIGMOID, slice_node(z, at, zz, 2 * H, 3 * H));
  int go = un_node(z, at, SH_BI_SIGMOID, slice_node(z, at, zz, 3 * H, 4 * H));
  int gu = un_node(z, at, SH_BI_TANH, slice_node(z, at, zz, 4 * H, 5 * H));
  int c = bin_node(z, at, SH_TK_PLUS,
                   bin_node(z, at, SH_TK_PLUS, bin_node(z, at, SH_TK_STAR, gi, gu), bin_node(z, at, SH_TK_STAR, gfl, cl)),
                   bin_node(z, at, SH_TK_STAR, gfr, cr));
  int h = bin_node(z, at, SH_TK_STAR, go, un_node(z, at, SH_BI_TANH, c));
  if (failed(z) || h < 0 || c < 0) return none;
  lv *items = lv_alloc(z, 2, at);
  if (!items) return none;
  items[0] = mk_t(h), items[1] = mk_t(c);
  return (lv){LV_TUP, 0, 2, items};
}

/* lstm_cell(W, b, x, c_prev), the runtime's sheaf_lstm_cell (PyTorch gate
 * order i, f, g, o): z = x·W + b; c = σ(z_f)·c_prev + σ(z_i)·tanh(z_g);
 * h = σ(z_o)·tanh(c). */
static lv lstm_cell(cz *z, const sh_ast *e, lv *env, int depth) {
  int W = eval_t(z, e->items[0], env, depth), b = eval_t(z, e->items[1], env, depth);
  int x = eval_t(z, e->items[2], env, depth), cp = eval_t(z, e->items[3], env, depth);
  if (failed(z)) return none;
  sh_span at = e->span;
  int64_t H = nd(z, cp)->d[0];
  int zz = bin_node(z, at, SH_TK_PLUS, mm_node(z, at, x, W), b);
  int gi = un_node(z, at, SH_BI_SIGMOID, slice_node(z, at, zz, 0, H));
  int gf = un_node(z, at, SH_BI_SIGMOID, slice_node(z, at, zz, H, 2 * H));
  int gg = un_node(z, at, SH_BI_TANH, slice_node(z, at, zz, 2 * H, 3 * H));
  int go = un_node(z, at, SH_BI_SIGMOID, slice_node(z, at, zz, 3 * H, 4 * H));
  int c = bin_node(z, at, SH_TK_PLUS, bin_node(z, at, SH_TK_STAR, gf, cp), bin_node(z, at, SH_TK_STAR, gi, gg));
  int h = bin_node(z, at, SH_TK_STAR, go, un_node(z, at, SH_BI_TANH, c));
  if (failed(z) || h < 0 || c < 0) return none;
  lv *items = lv_alloc(z, 2, at);
  if (!items) return none;
  items[0] = mk_t(h), items[1] = mk_t(c);
  return (lv){LV_TUP, 0, 2, items};
}

/* A reduction node over node x: RSUM (its elements, an f32[1] of x's
 * domain), KSUM (over the children: per-child x to a per-row value of x's
 * shape), KSOFTMAX (per-child f32[1] scores to per-child weights). */
static int reduce_node(cz *z, sh_span at, sh_lin_op op, int x) {
  if (x < 0) return -1;
  sh_lin_node *p = nd(z, x);
  if (p->rank != 1 || p->op == SH_LIN_CAT || (op != SH_LIN_RSUM && !p->kid) || (op == SH_LIN_KSOFTMAX && p->d[0] != 1))
    return sh_lin_refuse(z->L, at, op == SH_LIN_RSUM ? "sum of other than a vector: not translated" :
                         "a reduction over the children of other than per-child vectors"), -1;
  int k = new_node(z, at, op, 1, op == SH_LIN_RSUM ? 1 : p->d[0], 1, p->batched);
  if (k >= 0) nd(z, k)->a = x, nd(z, k)->kid = op != SH_LIN_KSUM && p->kid;
  return k;
}

/* sum / softmax / stack / len of a per-child list (the ragged arm), and
 * sum of a vector; none (not failed) when the argument is none of these. */
static lv kid_builtin(cz *z, const sh_ast *e, lv *env, int depth, bool *done) {
  sh_span at = e->span;
  *done = false;
  if (e->n != 1 || (e->builtin != SH_BI_SUM && e->builtin != SH_BI_SOFTMAX && e->builtin != SH_BI_STACK &&
                    e->builtin != SH_BI_LEN))
    return none;
  if (e->builtin == SH_BI_SUM && e->items[0]->type && e->items[0]->type->kind == SH_TY_LIST &&
      e->items[0]->type->elems[0]->kind != SH_TY_TENSOR)
    return none;
  if (!z->L->dep && (e->builtin != SH_BI_SUM || !e->items[0]->type || e->items[0]->type->kind != SH_TY_TENSOR))
    return none;
  if (z->L->dep && e->builtin == SH_BI_SUM && e->items[0]->type && e->items[0]->type->kind == SH_TY_LIST)
    return none; /* a list: the case below */
  lv v = eval(z, e->items[0], env, depth);
  *done = true;
  if (failed(z)) return none;
  if (v.kind == LV_KLIST && e->builtin == SH_BI_LEN) return (lv){LV_KLEN, 0, 0, NULL};
  if (v.kind == LV_KVEC && e->builtin == SH_BI_SUM) return mk_t(reduce_node(z, at, SH_LIN_KSUM, v.x));
  if (v.kind == LV_T && e->builtin == SH_BI_SUM) return mk_t(reduce_node(z, at, SH_LIN_RSUM, v.x));
  if (v.kind == LV_KLIST && (e->builtin == SH_BI_SOFTMAX || e->builtin == SH_BI_STACK))
    z->L->dep_kids_needed = true; /* of no children: an error in the dynamic runtime; leaves keep their arm */
  if (v.kind == LV_KLIST && v.items[0].kind == LV_T && e->builtin == SH_BI_SOFTMAX)
    return (lv){LV_KVEC, reduce_node(z, at, SH_LIN_KSOFTMAX, v.items[0].x), 0, NULL};
  if (v.kind == LV_KLIST && v.items[0].kind == LV_T && e->builtin == SH_BI_STACK)
    return (lv){LV_KSTACK, v.items[0].x, 0, NULL};
  if (v.kind == LV_LIST && v.n == 0 && e->builtin != SH_BI_LEN)
    return sh_lin_refuse(z->L, at, "%s of no children (a leaf): branch on len(...) == 0 first",
                         sh_builtin_name(e->builtin)), none;
  if (v.kind == LV_LIST && e->builtin == SH_BI_LEN) return (lv){LV_INT, v.n, 0, NULL};
  return sh_lin_refuse(z->L, at, "builtin '%s' of this value is not supported by the linearized mode yet",
                       sh_builtin_name(e->builtin)), none;
}

/* stack(for w in words { ... }) (or over 0..len(words), or a scan's states):
 * a sentence's matrix whose row p is the body at position p, so per token
 * of main's per-token activations, a row (coarsen_mat.c). */
static lv mat_stack(cz *z, const sh_ast *e, lv *env, int depth) {
  sh_span at = e->span;
  const sh_ast *f = e->n == 1 ? e->items[0] : NULL;
  if (!f || f->kind != SH_EX_FOR)
    return sh_lin_refuse(z->L, at, "stack of other than a for over main's words: the linearized mode stacks one row "
                         "per word"), none;
  if (z->fi != 0 || z->L->fns[0].step || z->in_for)
    return sh_lin_refuse(z->L, at, "stack inside a step or a map: the linearized mode builds a sentence's matrix "
                         "in main, before its per-token map"), none;
  lv xs = eval(z, f->a, env, depth), hi = f->b ? eval(z, f->b, env, depth) : none, item = none;
  if (failed(z)) return none;
  int8_t path[8] = {0};
  if (f->b && xs.kind == LV_INT && xs.x == 0 && hi.kind == LV_LEN) item = (lv){LV_POS, 0, 0, NULL};
  else if (!f->b && xs.kind == LV_WORDS && !xs.x) item = (lv){LV_WORD, new_slot(z, at, true, path, 0), 0, NULL};
  else if (!f->b && xs.kind == LV_SEQ) item = seq_call(z, at, xs.x, xs.n ? SH_LIN_SEL_MIRROR : SH_LIN_SEL_POS);
  else
    return sh_lin_refuse(z->L, f->a->span, "stack over a list other than main's words, their positions or a scan "
                         "of them: a sentence's matrix has one row per word"), none;
  if (failed(z) || !bind_let(z, f->pat, item, env)) return none;
  int k = eval_t(z, f->c, env, depth);
  if (k < 0) return none;
  if (nd(z, k)->rank != 1 || !nd(z, k)->batched || nd(z, k)->op == SH_LIN_CAT)
    return sh_lin_refuse(z->L, f->c->span, "a stacked row that is not a vector computed from the word or its "
                         "position"), none;
  nd(z, k)->tok = true;
  return mk_t(k);
}

/* Builtins of sentence matrices (coarsen_mat.c): stack, transpose, softmax
 * of a matrix's rows, layer_norm, float(size); false when e is none of them. */
static bool mat_builtin(cz *z, const sh_ast *e, lv *env, int depth, lv *out) {
  sh_span at = e->span;
  const sh_type *t = e->n >= 1 && e->items[0] ? e->items[0]->type : NULL;
  *out = none;
  switch (e->builtin) {
  case SH_BI_STACK: /* of a for over the words; stack of a map bound in main is an attention's (seq_list_value) */
    if (e->n != 1 || !e->items[0] || e->items[0]->kind != SH_EX_FOR) return false;
    *out = mat_stack(z, e, env, depth);
    return true;
  case SH_BI_FLOAT: {
    int64_t v;
    if (e->n != 1 || !t || t->kind != SH_TY_I32) return false;
    if (z->L->records) return *out = rec_float(z, e, env, depth), true;
    if (eval_int(z, e->items[0], env, depth, &v)) *out = mk_t(const_node(z, at, (double)v));
    return true;
  }
  case SH_BI_SOFTMAX:
    if (!t || t->kind != SH_TY_TENSOR || t->n != 2) return false;
    break;
  case SH_BI_TRANSPOSE: case SH_BI_LAYER_NORM: break;
  default: return false;
  }
  int args[3];
  if (e->n < 1 || e->n > 3) return false;
  for (int i = 0; i < e->n; i++)
    if ((args[i] = eval_t(z, e->items[i], env, depth)) < 0) return true;
  int k = sh_lin_mat_builtin(z->L, z->a, at, e->builtin, args, e->n);
  if (k == -2)
    return sh_lin_refuse(z->L, at, "builtin '%s' is not supported by the linearized mode yet",
                         sh_builtin_name(e->builtin)), true;
  *out = mk_t(k);
  return true;
}

static lv builtin(cz *z, const sh_ast *e, lv *env, int depth) {
  sh_span at = e->span;
  if (z->L->seq && e->builtin == SH_BI_SOFTMAX && dec_scores_arg(e, env)) { /* softmax(es @ q) in a decoder */
    lv v = eval(z, e->items[0], env, depth);
    return v.kind == LV_SCORES ? (lv){LV_ATTW, v.x, 0, NULL} : none;
  }
  bool done;
  lv kv = kid_builtin(z, e, env, depth, &done);
  if (done || failed(z)) return kv;
  lv mv;
  if (z->L->seq && mat_builtin(z, e, env, depth, &mv)) return mv;
  switch (e->builtin) {
  case SH_BI_ZEROS: return (lv){LV_ZERO, 0, 0, NULL};
  case SH_BI_FOLD: case SH_BI_SCAN:
    if (z->L->seq) return seq_apply(z, e, env, depth);
    break;
  case SH_BI_MAP:
    if (z->L->dep) return dep_map(z, e, env, depth);
    break;
  case SH_BI_MAX: case SH_BI_MEAN:
    if (z->L->records && e->builtin == SH_BI_MEAN && rec_chars_loop(e, env)) return rec_chars(z, e, env);
    if (z->L->seq && e->n == 1 && e->items[0]->type && e->items[0]->type->kind == SH_TY_LIST)
      return seq_reduce(z, e, env, depth);
    if (z->L->seq && e->n == 1 && e->items[0]->type && e->items[0]->type->kind == SH_TY_TENSOR) { /* of a vector */
      int x = eval_t(z, e->items[0], env, depth);
      if (x < 0) return none;
      if (nd(z, x)->rank != 1 || nd(z, x)->op == SH_LIN_CAT) break;
      if (e->builtin == SH_BI_MAX) return mk_t(rsum_op(z, at, x, SH_LIN_RMAX));
      int inv = const_node(z, at, 1.0 / (double)nd(z, x)->d[0]);
      return mk_t(bin_node(z, at, SH_TK_STAR, rsum_op(z, at, x, SH_LIN_RSUM), inv));
    }
    break;
  case SH_BI_SOFTMAX: case SH_BI_STACK:
    if (z->L->seq && e->n == 1 && e->items[0]->type && e->items[0]->type->kind == SH_TY_LIST)
      return seq_list_value(z, e, env, depth);
    if (z->L->seq && e->builtin == SH_BI_SOFTMAX && e->n == 1 && e->items[0]->type &&
        e->items[0]->type->kind == SH_TY_TENSOR) {
      int x = eval_t(z, e->items[0], env, depth); /* of a vector: exp(x - max x) / sum */
      if (x < 0) return none;
      if (nd(z, x)->rank != 1 || nd(z, x)->op == SH_LIN_CAT) break;
      int ex = un_node(z, at, SH_BI_EXP, bin_node(z, at, SH_TK_MINUS, x, rsum_op(z, at, x, SH_LIN_RMAX)));
      return mk_t(bin_node(z, at, SH_TK_SLASH, ex, rsum_op(z, at, ex, SH_LIN_RSUM)));
    }
    break;
  case SH_BI_SUM: {
    if (z->L->records && rec_chars_loop(e, env)) return rec_chars(z, e, env);
    if (z->L->seq && e->n == 1 && e->items[0]->type && e->items[0]->type->kind == SH_TY_LIST)
      return seq_reduce(z, e, env, depth);
    /* sum of a vector: kid_builtin (RSUM) */
    if (!z->L->dep || e->n != 1 || !e->items[0]->type || e->items[0]->type->kind != SH_TY_LIST) break;
    lv v = eval(z, e->items[0], env, depth);
    if (failed(z)) return none;
    if (v.kind == LV_KLIST && v.items[0].kind == LV_T) return mk_t(reduce_node(z, at, SH_LIN_KSUM, v.items[0].x));
    if (v.kind == LV_KLIST) return sh_lin_refuse(z->L, at, "sum of a list of other than tensors"), none;
    if (v.kind != LV_LIST) break;
    if (v.n == 0) return mk_t(zero_node(z, at, e->type));
    int acc = -1;
    for (int i = 0; i < v.n; i++) {
      if (v.items[i].kind != LV_T) return sh_lin_refuse(z->L, at, "sum of a list of other than tensors"), none;
      acc = i == 0 ? v.items[0].x : bin_node(z, at, SH_TK_PLUS, acc, v.items[i].x);
      if (acc < 0) return none;
    }
    return mk_t(acc);
  }
  case SH_BI_REV: case SH_BI_LEN: {
    if (e->n != 1) break;
    lv v = eval(z, e->items[0], env, depth);
    if (failed(z)) return none;
    if (v.kind == LV_LIST && e->builtin == SH_BI_LEN) return (lv){LV_INT, v.n, 0, NULL};
    if (v.kind != LV_WORDS && v.kind != LV_SEQ) break;
    if (e->builtin == SH_BI_LEN) return (lv){LV_LEN, 0, 0, NULL};
    if (v.kind == LV_WORDS) v.x = !v.x;
    else v.n = !v.n;
    return v;
  }
  case SH_BI_LSTM_CELL:
    if (e->n == 4) return lstm_cell(z, e, env, depth);
    break;
  case SH_BI_TANH: case SH_BI_SIGMOID: case SH_BI_RELU: case SH_BI_EXP: case SH_BI_LN: case SH_BI_SQRT:
  case SH_BI_RSQRT: case SH_BI_ABS:
    if (e->n == 1 && e->items[0]->type && e->items[0]->type->kind == SH_TY_TENSOR)
      return mk_t(un_node(z, at, e->builtin, eval_t(z, e->items[0], env, depth)));
    break;
  case SH_BI_LOG_SOFTMAX: {
    int x = eval_t(z, e->items[0], env, depth);
    if (x < 0) return none;
    if (nd(z, x)->rank != 1 || nd(z, x)->op == SH_LIN_CAT || nd(z, x)->kid) break;
    int k = new_node(z, at, SH_LIN_LSM, 1, nd(z, x)->d[0], 1, nd(z, x)->batched);
    if (k >= 0) nd(z, k)->a = x;
    return mk_t(k);
  }
  case SH_BI_CAT: {
    if (e->n > SH_LIN_MAX_SEGS || (e->type && e->type->kind != SH_TY_TENSOR)) break;
    int items[SH_LIN_MAX_SEGS];
    for (int i = 0; i < e->n; i++)
      if ((items[i] = eval_t(z, e->items[i], env, depth)) < 0) return none;
    return mk_t(cat_node(z, at, items, e->n));
  }
  case SH_BI_RESHAPE: {
    int x = eval_t(z, e->items[0], env, depth);
    int64_t r = 0, c = 1;
    if (x < 0 || !eval_int(z, e->items[1], env, depth, &r) || (e->n > 2 && !eval_int(z, e->items[2], env, depth, &c)))
      return none;
    sh_lin_node *p = nd(z, x);
    if (p->op != SH_LIN_IN || p->rank != 1 || r * c != p->d[0])
      return sh_lin_refuse(z->L, at, "reshape is translated only for looked-up rows and children's states"), none;
    int k = new_node(z, at, SH_LIN_IN, e->n > 2 ? 2 : 1, r, c, true);
    if (k < 0) return none;
    nd(z, k)->n_segs = p->n_segs;
    memcpy(nd(z, k)->segs, p->segs, sizeof p->segs);
    return mk_t(k);
  }
  case SH_BI_TREE_LSTM_CELL:
    if (e->n == 5) return tree_lstm_cell(z, e, env, depth);
    break;
  default: break;
  }
  if (failed(z)) return none;
  return sh_lin_refuse(z->L, at, "builtin '%s' is not supported by the linearized mode yet",
                       sh_builtin_name(e->builtin)), none;
}

/* x op y on the child count: an int (the leaves' arm, or a number) or
 * LV_KLEN (any count >= 1, the ragged arm), known only when it is the same
 * for every count >= 1 (len(hs) == 0, > 0, >= 1, != 0 ...). */
static bool cmp_int(int op, int64_t x, int64_t y) {
  switch (op) {
  case SH_TK_EQ: return x == y;
  case SH_TK_NE: return x != y;
  case SH_TK_LT: return x < y;
  case SH_TK_LE: return x <= y;
  case SH_TK_GT: return x > y;
  default: return x >= y;
  }
}

static lv compare(cz *z, const sh_ast *e, lv x, lv y) {
  if ((x.kind != LV_INT && x.kind != LV_KLEN) || (y.kind != LV_INT && y.kind != LV_KLEN) ||
      (x.kind == LV_KLEN && y.kind == LV_KLEN))
    return none;
  if (x.kind == LV_INT && y.kind == LV_INT) return (lv){LV_BOOL, cmp_int(e->op, x.x, y.x), 0, NULL};
  int64_t c = x.kind == LV_INT ? x.x : y.x;
  z->L->dep_kids_needed = true;
  bool r1 = x.kind == LV_KLEN ? cmp_int(e->op, 1, c) : cmp_int(e->op, c, 1);
  bool r2 = x.kind == LV_KLEN ? cmp_int(e->op, 2, c) : cmp_int(e->op, c, 2);
  if (c > 1 || r1 != r2)
    return sh_lin_refuse(z->L, e->span, "a condition on the child count other than len(...) == 0 (or > 0): the "
                         "linearized mode has an arm for leaves and one for every other count"), none;
  return (lv){LV_BOOL, r1, 0, NULL};
}

static lv eval(cz *z, const sh_ast *e, lv *env, int depth) {
  if (failed(z)) return none;
  if (!e || depth > SH_LANG_MAX_DEPTH) return sh_lin_refuse(z->L, e ? e->span : (sh_span){0}, "expression too deep"), none;
  sh_span at = e->span;
  switch (e->kind) {
  case SH_EX_INT: return (lv){LV_INT, (int)e->ival, 0, NULL};
  case SH_EX_FLOAT: return mk_t(const_node(z, at, e->fval));
  case SH_EX_NAME:
    if (e->res == SH_RES_LOCAL && e->ref.local && env[e->ref.local->index].kind == LV_OUTER)
      return sh_lin_refuse(z->L, at, "'%s': a per-sentence tensor of main read inside a map over the words: not "
                           "translated by the linearized mode", sym(z, e->name)), none;
    if (e->res == SH_RES_LOCAL && e->ref.local) return env[e->ref.local->index];
    if (e->res == SH_RES_PARAM) return mk_t(param_node(z, at, e->ref.param));
    if (e->res == SH_RES_SIZE) {
      uint32_t v = e->ref.size_var;
      if (v > 0 && v <= z->L->bind->n_sizes && z->L->bind->size_values[v] > 0)
        return (lv){LV_INT, (int)z->L->bind->size_values[v], 0, NULL};
    }
    break;
  case SH_EX_TUPLE: {
    lv *items = lv_alloc(z, e->n, at);
    if (!items) return none;
    for (int i = 0; i < e->n; i++) items[i] = eval(z, e->items[i], env, depth + 1);
    return (lv){LV_TUP, 0, e->n, items};
  }
  case SH_EX_UNARY:
    if (e->op == SH_TK_MINUS) {
      lv v = eval(z, e->a, env, depth + 1);
      if (v.kind == LV_INT) return (lv){LV_INT, -v.x, 0, NULL};
      if (z->L->records && rec_int(z, v)) return rec_hx(z, at, SH_HX_NEG, rec_hx_of(z, at, v), -1, -1, 0);
      if (v.kind == LV_T) return mk_t(un_node(z, at, SH_BI_NONE, v.x));
    }
    break;
  case SH_EX_BINARY: {
    bool cmp = e->op == SH_TK_EQ || e->op == SH_TK_NE || e->op == SH_TK_LT || e->op == SH_TK_LE ||
               e->op == SH_TK_GT || e->op == SH_TK_GE;
    if (e->op != SH_TK_PLUS && e->op != SH_TK_MINUS && e->op != SH_TK_STAR && e->op != SH_TK_SLASH &&
        e->op != SH_TK_AT && !cmp)
      break;
    lv x = eval(z, e->a, env, depth + 1), y = eval(z, e->b, env, depth + 1);
    if (failed(z)) return none;
    if (z->L->seq && (x.kind == LV_POS || x.kind == LV_LEN || y.kind == LV_POS || y.kind == LV_LEN))
      return seq_pos_arith(z, e, x, y);
    if (z->L->records && (rec_int(z, x) || rec_int(z, y) || x.kind == LV_WORD || y.kind == LV_WORD))
      return rec_arith(z, e, x, y); /* a token's integer code (a word's: refused there) */
    if (cmp) {
      lv r = compare(z, e, x, y);
      if (r.kind == LV_BOOL || failed(z)) return r;
      break;
    }
    if (e->op == SH_TK_AT && x.kind == LV_KVEC && y.kind == LV_KSTACK) /* weights @ stack(children's vectors) */
      return mk_t(reduce_node(z, at, SH_LIN_KSUM, bin_node(z, at, SH_TK_STAR, x.x, y.x)));
    if (x.kind == LV_INT && y.kind == LV_INT && e->op != SH_TK_AT && e->op != SH_TK_SLASH) {
      int64_t r = e->op == SH_TK_PLUS ? (int64_t)x.x + y.x : e->op == SH_TK_MINUS ? (int64_t)x.x - y.x
                                                                               : (int64_t)x.x * y.x;
      return (lv){LV_INT, (int)r, 0, NULL};
    }
    if (x.kind == LV_ZERO || y.kind == LV_ZERO)
      return sh_lin_refuse(z->L, at, "zeros(...) is translated by the linearized mode only as a scan's or fold's "
                           "initial state"), none;
    if (x.kind == LV_SOFTMAX && y.kind == LV_STACK && e->op == SH_TK_AT) return seq_attend(z, e, x, y);
    if (x.kind >= LV_ESMAT || y.kind >= LV_ESMAT) return dec_binary(z, e, x, y);
    if (x.kind == LV_SOFTMAX || x.kind == LV_STACK || y.kind == LV_SOFTMAX || y.kind == LV_STACK)
      return sh_lin_refuse(z->L, at, "%s", sentence_matrix), none;
    if (x.kind != LV_T || y.kind != LV_T) break;
    if (z->L->seq) { /* a sentence's scores (coarsen_mat.c) */
      int k = sh_lin_mat_binary(z->L, z->a, at, e->op, x.x, y.x);
      if (k != -2) return mk_t(k);
    }
    if (e->op == SH_TK_AT) return mk_t(mm_node(z, at, x.x, y.x));
    return mk_t(bin_node(z, at, e->op, x.x, y.x));
  }
  case SH_EX_CALL:
    if (e->call == SH_CALL_BUILTIN) return builtin(z, e, env, depth + 1);
    if (e->call == SH_CALL_FN && e->ref.fn) {
      if (is_tree_fn(z->L, e->ref.fn)) return structural_call(z, e, env, depth + 1);
      return inline_call(z, e, env, depth + 1);
    }
    if (e->call == SH_CALL_KERNEL)
      return sh_lin_refuse(z->L, at, "kernel calls are not translated by the linearized mode yet"), none;
    return sh_lin_refuse(z->L, at, "building a tree value: the linearized mode reads trees, it does not build them"), none;
  case SH_EX_INDEX:
    if (z->L->seq && !e->lookup) {
      const sh_ast *ix = e->b; /* xs[len(words) - 1] of a forward scan: its last state (fold's) */
      if (ix && ix->kind == SH_EX_BINARY && ix->op == SH_TK_MINUS && ix->b->kind == SH_EX_INT && ix->b->ival == 1 &&
          ix->a->kind == SH_EX_CALL && ix->a->call == SH_CALL_BUILTIN && ix->a->builtin == SH_BI_LEN) {
        lv xs = eval(z, e->a, env, depth + 1), n = eval(z, ix->a, env, depth + 1);
        if (failed(z)) return none;
        if (xs.kind == LV_SEQ && !xs.n && n.kind == LV_LEN) return seq_call(z, at, xs.x, SH_LIN_SEL_LAST);
      }
      lv xs = eval(z, e->a, env, depth + 1), i = eval(z, e->b, env, depth + 1);
      if (failed(z)) return none;
      return seq_index(z, e, xs, i);
    }
    if (e->lookup && e->a->kind == SH_EX_NAME && e->a->res == SH_RES_PARAM) {
      lv w = eval(z, e->b, env, depth + 1);
      if (failed(z)) return none;
      if (w.kind != LV_WORD || w.x < 0)
        return sh_lin_refuse(z->L, e->b->span, "a lookup whose row is not a word of the node's pattern"), none;
      const sh_param_decl *p = e->a->ref.param;
      int rank;
      int64_t d[2];
      if (!type_shape(z->L, p->type, &rank, d) || rank != 2)
        return sh_lin_refuse(z->L, at, "lookup in '%s': not a table of known size", sym(z, p->name)), none;
      sh_lin_arm *a = z->a;
      int f = 0;
      while (f < a->n_fields && a->field_slot[f] != w.x) f++;
      if (f == a->n_fields) a->field_slot[a->n_fields++] = w.x;
      sh_lin_seg s = {.lookup = true, .param = p->index, .field = f, .width = d[1],
                      .raw = a->slots[w.x].tf != SH_TF_WORD};
      return mk_t(in_node(z, at, s, 1, (int64_t[]){d[1], 1}));
    }
    return sh_lin_refuse(z->L, at, "indexing other than a table lookup emb[w]"), none;
  case SH_EX_SLICE: {
    int x = eval_t(z, e->a, env, depth + 1);
    int64_t lo, hi;
    if (x < 0) return none;
    if (!e->lo || !e->hi || !size_value(z->L, e->lo, &lo) || !size_value(z->L, e->hi, &hi))
      return sh_lin_refuse(z->L, at, "a slice whose bounds are not known sizes"), none;
    return mk_t(slice_node(z, at, x, lo, hi));
  }
  case SH_EX_BLOCK:
    for (int i = 0; i < e->n; i++) {
      const sh_ast *x = e->lets[i].value;
      lv v = z->L->seq && x && x->kind == SH_EX_FOR ? seq_tokmap(z, x, env, depth + 1)
           : z->L->seq && dec_matrix(e, i) ? dec_stack(z, x, env, depth + 1) : eval(z, x, env, depth + 1);
      if (failed(z) || !bind_let(z, e->lets[i].pat, v, env)) return none;
    }
    return eval(z, e->a, env, depth + 1);
  case SH_EX_PHASE: return eval(z, e->a, env, depth + 1);
  case SH_EX_IF: {
    if (z->L->records) return rec_if(z, e, env, depth + 1);
    if (z->L->seq) return seq_if(z, e, env, depth + 1);
    if (z->L->dep) { /* a condition on the child count: known per arm (leaves, the ragged arm) */
      lv c = eval(z, e->a, env, depth + 1);
      if (failed(z)) return none;
      if (c.kind == LV_BOOL) return eval(z, c.x ? e->b : e->c, env, depth + 1);
    }
    return sh_lin_refuse(z->L, at, "if inside an arm: the linearized mode needs straight-line arms (branch on the "
                         "tree's structure with match%s)", z->L->dep ? ", or on len(children) == 0" : ""), none;
  }
  case SH_EX_MATCH: return sh_lin_refuse(z->L, at, "a match inside an arm: the linearized mode takes one match per "
                                                   "function, on its tree parameter"), none;
  case SH_EX_FOR:
    if (z->L->seq) return seq_for(z, e, env, depth + 1);
    if (z->L->dep && !e->b) {
      lv xs = eval(z, e->a, env, depth + 1);
      if (failed(z)) return none;
      if (xs.kind == LV_LIST || xs.kind == LV_KLIST) return dep_for(z, e, xs, env, depth + 1);
      return sh_lin_refuse(z->L, e->a->span, "a loop over a list other than the node's children's states"), none;
    }
    return sh_lin_refuse(z->L, at, "loops and lists are not translated by the linearized mode"), none;
  case SH_EX_LIST: case SH_EX_WHILE:
    return sh_lin_refuse(z->L, at, "loops and lists are not translated by the linearized mode"), none;
  default: break;
  }
  if (failed(z)) return none;
  return sh_lin_refuse(z->L, at, "an expression the linearized mode does not translate"), none;
}

/* ------------------------------------------------------------ arms */

static bool set_outputs(cz *z, sh_span at, lv v, sh_lin_fn *f) {
  if (v.kind == LV_TUP) {
    for (int i = 0; i < v.n; i++)
      if (!set_outputs(z, at, v.items[i], f)) return false;
    return true;
  }
  sh_lin_arm *a = z->a;
  if (f->es_fn && v.kind == LV_ESMAT && v.x == f->es_fn) return true; /* a decoder's matrix, passed on */
  if (f->es_fn && v.kind == LV_CTX && a->n_out < f->n_comp) { /* the attention context: its query q */
    f->ctx_comp[a->n_out] = true;
    v = mk_t(v.x);
  }
  if (v.kind != LV_T || a->n_out >= f->n_comp) return sh_lin_refuse(z->L, at, "the arm's result is not tensors"), false;
  const sh_lin_node *n = nd(z, v.x);
  int k = a->n_out;
  if (n->rank == 2 && !n->batched)
    return sh_lin_refuse(z->L, at, "a parameter matrix as a result: not translated"), false;
  if (n->kid) return sh_lin_refuse(z->L, at, "a per-child value as the result: sum it over the children"), false;
  if (n->op == SH_LIN_CAT || n->rank != f->comp_rank[k] || n->d[0] != f->comp_d[k][0] ||
      (n->rank == 2 && n->d[1] != f->comp_d[k][1]))
    return sh_lin_refuse(z->L, at, "the arm's result has another shape than the function's"), false;
  a->out[a->n_out++] = v.x;
  return true;
}

static sheaf_status translate_arm(sh_lin *L, int fi, const sh_pat *pat, const sh_ast *body, sh_span at) {
  sh_lin_fn *f = &L->fns[fi];
  if (f->n_arms == SH_LIN_MAX_ARMS) return sh_lin_refuse(L, at, "more than %d arms", SH_LIN_MAX_ARMS);
  sh_lin_arm *a = calloc(1, sizeof *a);
  cz *z = calloc(1, sizeof *z);
  lv *env = calloc((size_t)f->fn->n_locals + 1, sizeof *env);
  if (!a || !z || !env) {
    free(a), free(z), free(env);
    return sh_fail(L->ctx, SHEAF_ERR_NOMEM, "out of memory");
  }
  f->arms[f->n_arms++] = a;
  a->pat = pat;
  a->span = at;
  snprintf(a->name, sizeof a->name, "%.40s_arm%d", sh_sym_name(&L->m->syms, f->fn->name), f->n_arms - 1);
  z->L = L, z->fi = fi, z->a = a;
  int8_t path[8] = {0};
  if (L->seq && f->step) { /* the previous state (row 0: zeros before the first word) and the word */
    env[f->fn->params[0]->index] = seq_call(z, at, fi, SH_LIN_SEL_PREV);
    env[f->fn->params[1]->index] = f->src ? seq_call(z, at, f->src, SH_LIN_SEL_POS)
                                          : (lv){LV_WORD, new_slot(z, at, true, path, 0), 0, NULL};
  } else if (L->seq) {
    env[f->fn->params[0]->index] = (lv){LV_WORDS, 0, 0, NULL};
  } else {
    env[f->fn->params[0]->index] = (lv){LV_TREE, -1, 0, NULL};
  }
  if (!failed(z) && (!pat || bind_pat(z, pat, env, path, 0, false))) {
    lv v = eval(z, body, env, 0);
    bool list = L->seq && !f->step && f->fn->ret_type && f->fn->ret_type->kind == SH_TY_LIST;
    if (!failed(z) && list != z->for_done)
      sh_lin_refuse(L, body->span, list ? "main returns a list other than one map over its words: not translated by "
                    "the linearized mode" : "a map over the words whose list is not main's result");
    if (!failed(z) && z->for_done && (v.kind != z->for_value.kind || v.x != z->for_value.x ||
                                     v.items != z->for_value.items))
      sh_lin_refuse(L, body->span, "main's result is not its map over the words: not translated by the linearized "
                    "mode");
    f->per_token = z->for_done;
    if (!failed(z)) set_outputs(z, body->span, v, f);
    if (!failed(z) && a->n_out != f->n_comp) sh_lin_refuse(L, body->span, "the arm's result is not the function's");
  }
  free(z), free(env);
  return L->refused ? SHEAF_ERR_UNSUPPORTED : SHEAF_OK;
}

static sheaf_status translate_fn(sh_lin *L, int fi) {
  const sh_fn *fn = L->fns[fi].fn;
  if (L->fns[fi].tokmap) return SHEAF_OK; /* translated where main binds it (seq_tokmap) */
  if (L->seq) return translate_arm(L, fi, NULL, fn->body, fn->span);
  if (L->dep) { /* arm 0: leaves; arm 1, ragged: any other child count (only arm 0 when the body does not read
                   the children) */
    L->dep_k = 0, L->dep_used = false;
    sheaf_status st = translate_arm(L, fi, NULL, fn->body, fn->span);
    if (st || !L->dep_used) return st;
    L->dep_k = -1, L->dep_kids_needed = false;
    st = translate_arm(L, fi, NULL, fn->body, fn->span);
    if (st) return st;
    sh_lin_fn *f = &L->fns[fi];
    f->arms[1]->ragged = true;
    if (!L->dep_kids_needed) { /* the ragged arm is right for leaves too (K = 0: sums of nothing): one kernel */
      free(f->arms[0]);
      f->arms[0] = f->arms[1], f->arms[1] = NULL, f->n_arms = 1;
      snprintf(f->arms[0]->name, sizeof f->arms[0]->name, "%.40s_arm0", sh_sym_name(&L->m->syms, fn->name));
    }
    return SHEAF_OK;
  }
  const sh_ast *body = fn->body;
  while (body && body->kind == SH_EX_BLOCK && body->n == 0 && body->a) body = body->a;
  if (body && body->kind == SH_EX_MATCH && body->a && body->a->kind == SH_EX_NAME && body->a->res == SH_RES_LOCAL &&
      body->a->ref.local == fn->params[0]) {
    for (int i = 0; i < body->n; i++) {
      sheaf_status st = translate_arm(L, fi, body->arms[i].pat, body->arms[i].body, body->arms[i].pat->span);
      if (st) return st;
    }
    return SHEAF_OK;
  }
  return translate_arm(L, fi, NULL, fn->body, fn->span);
}

/* Calls on the activation's own node must not form a cycle. */
static bool same_tree_cycle(const sh_lin *L, int f, int *state) {
  if (state[f] == 1) return true;
  if (state[f] == 2) return false;
  state[f] = 1;
  for (int a = 0; a < L->fns[f].n_arms; a++)
    for (int c = 0; c < L->fns[f].arms[a]->n_calls; c++)
      if (L->fns[f].arms[a]->calls[c].slot < 0 && L->fns[f].arms[a]->calls[c].sel == SH_LIN_SEL_TREE &&
          same_tree_cycle(L, L->fns[f].arms[a]->calls[c].fn, state))
        return true;
  state[f] = 2;
  return false;
}

/* main of a sequence model: fn 0, its result components (a list's element's
 * for a per-token map). */
static sheaf_status seq_main(sh_lin *L) {
  const sh_fn *fn = L->m->main;
  sh_lin_fn *f = &L->fns[0];
  memset(f, 0, sizeof *f);
  f->fn = fn;
  const sh_type *t = fn->ret_type;
  if (t && t->kind == SH_TY_LIST) t = t->elems[0];
  if (!flatten_ret(L, t, f))
    return sh_lin_refuse(L, fn->span, "main must return tensors, a tuple of them or a list of them, of known sizes");
  L->n_fns = 1;
  return SHEAF_OK;
}

sheaf_status sh_lin_coarsen(sh_lin *L) {
  if (L->seq ? seq_main(L) != SHEAF_OK : fn_id(L, L->m->main, L->m->main->span) < 0) return SHEAF_ERR_UNSUPPORTED;
  for (int i = 0; i < L->n_fns; i++) {
    sheaf_status st = translate_fn(L, i);
    if (st) return st;
  }
  if (L->seq && sh_lin_dec_patch(L)) return SHEAF_ERR_UNSUPPORTED; /* decoders' readers (linear_dec.c) */
  int state[SH_LIN_MAX_FNS] = {0};
  for (int i = 0; i < L->n_fns; i++)
    if (same_tree_cycle(L, i, state))
      return sh_lin_refuse(L, L->fns[i].fn->span, "'%s' calls itself on the same tree: recursion must be on subtrees",
                           sh_sym_name(&L->m->syms, L->fns[i].fn->name));
  return SHEAF_OK;
}

/* ------------------------------------------------------------ the dynamic mode's regions */

/* The body of fn (a function of tensors) as arm a of lf: each parameter
 * one batched input (dyncoarse.c passes each instance's value as one row),
 * its result's components the outputs (lf's). */
sheaf_status sh_lin_translate_body(sh_lin *L, const sh_fn *fn, sh_lin_fn *lf, sh_lin_arm *a) {
  memset(lf, 0, sizeof *lf);
  lf->fn = fn;
  const char *name = sh_sym_name(&L->m->syms, fn->name);
  if (!flatten_ret(L, fn->ret_type, lf))
    return sh_lin_refuse(L, fn->span, "'%s' does not return tensors (or a tuple of them) of known sizes", name);
  cz *z = calloc(1, sizeof *z);
  lv *env = calloc((size_t)fn->n_locals + 1, sizeof *env);
  if (!z || !env) {
    free(z), free(env);
    return sh_fail(L->ctx, SHEAF_ERR_NOMEM, "out of memory");
  }
  a->span = fn->span;
  snprintf(a->name, sizeof a->name, "%.40s_region", name);
  z->L = L, z->fi = -1, z->a = a;
  for (int i = 0; i < fn->n_params && !failed(z); i++) {
    int rank;
    int64_t d[2];
    if (!type_shape(L, fn->param_types[i], &rank, d) || rank != 1)
      sh_lin_refuse(L, fn->span, "'%s': parameter %d is not a vector of known size", name, i + 1);
    else
      env[fn->params[i]->index] = mk_t(in_node(z, fn->span, (sh_lin_seg){.call = i, .width = d[0]}, rank, d));
  }
  if (!failed(z)) {
    lv v = eval(z, fn->body, env, 0);
    if (!failed(z)) set_outputs(z, fn->body->span, v, lf);
    if (!failed(z) && a->n_out != lf->n_comp) sh_lin_refuse(L, fn->body->span, "the result is not the function's");
  }
  free(z), free(env);
  return L->refused ? SHEAF_ERR_UNSUPPORTED : SHEAF_OK;
}
