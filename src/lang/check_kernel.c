/*
 * check_kernel.c — the kernel checker: `kernel` declarations (syntax in
 * ast.h) to checked kernels (kernel.h). Per kernel: the parameters' and
 * results' types (sizes are the kernel's own unless the module fixes them;
 * ragged extents L(b) find the dimension they depend on), then each
 * statement in order: its left-hand side (defining or accumulating), its
 * index variables and their ranges (range inference: where clauses, else
 * the dimensions each index indexes, which must agree; every access in
 * bounds), the scope of ragged indices, and the types of its expression.
 * docs/LANGUAGE.md "Kernels" states the rules these checks implement.
 */
#include <stdio.h>
#include <string.h>

#include "lang/check_int.h"
#include "lang/kernel.h"

/* An extent while checking: an affine size of the module's size variables,
 * or a ragged length. */
typedef struct kext {
  bool ragged;
  sh_size sz;   /* affine */
  int len;      /* ragged: the length tensor */
  int outer;    /* ragged: a dimension (tensor dims) or a variable (ranges) */
  sh_sym label; /* ragged: the outer index's name, for messages */
} kext;

typedef struct ktens {
  sh_sym name;
  sh_span span;
  sh_ktensor_kind kind;
  bool i32;
  bool shaped; /* dims known: inputs, outputs, defined temporaries */
  bool bad;    /* an error was reported about it: no follow-up errors */
  int rank;
  kext *dims;
  int ragged_outer;
  int defined_by; /* statement, -1 */
  const sh_ksyn_type *tx; /* its declared type (inputs, outputs) */
} ktens;

typedef struct kvar {
  sh_sym name;
  sh_span span;   /* first occurrence */
  int lhs_pos;    /* -1: a reduction index */
  int where;      /* its where clause, -1 */
  bool used;      /* an index argument of the left-hand side or of an access */
  bool ranged, bad;
  kext range;
  sh_span range_at; /* where the range came from */
  int range_tensor, range_dim; /* -1: a where clause */
  int order;        /* position in the statement's loop order */
} kvar;

/* An index argument: var >= 0 (plus off), -1 the constant off, -2 invalid,
 * KV_GATHER a value read from an i32 input (not bounded by the checker). */
#define KV_GATHER (-3)
typedef struct kuse {
  int var;
  int64_t off;
  sh_span span;
  int tensor, dim;
  int access; /* the use of this access's first argument */
  bool lhs;
} kuse;

/* A size of the kernel: its variable and first mention. */
typedef struct ksz {
  uint32_t var;
  sh_span at;
} ksz;

typedef struct kc {
  checker *c;
  sh_kernel_decl *kd;
  int *tmap, *smap, *vmap, *defmap; /* by symbol: tensor, size, variable (+ 1); defining statement + 1 */
  ktens *t;
  int n_t, cap_t;
  ksz *sizes;
  int n_sizes, cap_sizes;
  kvar *v;
  int n_v, cap_v;
  kuse *u;
  int n_u, cap_u;
  int lhs_t;       /* the statement's tensor */
  bool bad;        /* the statement (or kernel) has errors */
  bool kernel_bad;
  sh_kstmt *stmts; /* built as statements check */
} kc;

static const char *nm(const kc *K, sh_sym s) { return sh_sym_name(K->c->syms, s); }

static void kerr(kc *K, sh_span at, const char *fmt, ...) SH_PRINTF(3, 4);
static void kerr(kc *K, sh_span at, const char *fmt, ...) {
  char msg[SH_DIAG_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  sh_diag_error(K->c->d, at, "%s", msg);
  K->bad = K->kernel_bad = true;
}

static void *kgrow(kc *K, void *v, int n, int *cap, size_t item) {
  if (n < *cap) return v;
  int nc = *cap ? 2 * *cap : 8;
  void *nv = c_alloc(K->c, (size_t)nc * item);
  if (!nv) return NULL;
  if (n) memcpy(nv, v, (size_t)n * item);
  *cap = nc;
  return nv;
}

/* ------------------------------------------------------------ functions */

static const struct { const char *name; sh_kop op; } kfns[] = {
    {"exp", SH_KOP_EXP},         {"log", SH_KOP_LOG},     {"tanh", SH_KOP_TANH},
    {"sigmoid", SH_KOP_SIGMOID}, {"gelu", SH_KOP_GELU},   {"relu", SH_KOP_RELU},
    {"sqrt", SH_KOP_SQRT},       {"rsqrt", SH_KOP_RSQRT}, {"abs", SH_KOP_ABS},
    {"softplus", SH_KOP_SOFTPLUS}, {"erf", SH_KOP_ERF},   {"float", SH_KOP_FLOAT},
    {"min", SH_KOP_MIN},         {"max", SH_KOP_MAX},     {"pow", SH_KOP_POW},
    {"where", SH_KOP_SELECT},    {"select", SH_KOP_SELECT},
};

/* The pointwise function a name calls, or -1. */
static int kfn_find(const kc *K, sh_sym s) {
  const char *name = nm(K, s);
  for (size_t i = 0; i < SH_ARRAY_LEN(kfns); i++)
    if (!strcmp(kfns[i].name, name)) return (int)kfns[i].op;
  return -1;
}

/* ---------------------------------------------------------------- sizes */

static bool is_global_size(const kc *K, sh_sym s) {
  return s <= K->c->n_syms && K->c->globals[s].kind == G_SIZE;
}

static bool fixed_global(const kc *K, sh_sym s) {
  return is_global_size(K, s) && K->c->sv->v[K->c->globals[s].u.size_var].has_value;
}

static uint32_t add_size(kc *K, uint32_t var, sh_sym name, sh_span at) {
  ksz *v = kgrow(K, K->sizes, K->n_sizes, &K->cap_sizes, sizeof *v);
  if (!v) return 0;
  K->sizes = v;
  K->sizes[K->n_sizes] = (ksz){var, at};
  K->smap[name] = ++K->n_sizes;
  return var;
}

/* The size variable of a name in a kernel's types: a fixed size of the
 * module, a size of this kernel, or (declare: in a parameter's type) a new
 * one. 0 after an error. */
static uint32_t size_name(kc *K, sh_sym name, sh_span at, bool declare) {
  checker *c = K->c;
  if (K->smap[name]) return K->sizes[K->smap[name] - 1].var;
  if (is_global_size(K, name)) {
    uint32_t v = c->globals[name].u.size_var;
    if (c->sv->v[v].has_value) return v;
    if (declare) return add_size(K, v, name, at);
  } else if (declare) {
    uint32_t v = sh_sizevar_new(c->sv, name, SH_SV_LOCAL, at);
    if (!v) {
      c->nomem = true;
      return 0;
    }
    return add_size(K, v, name, at);
  }
  if (K->vmap[name])
    kerr(K, at, "'%s' is an index, not a size: ranges and shapes are built from sizes", nm(K, name));
  else if (is_global_size(K, name))
    kerr(K, at, "size '%s' does not appear in the parameters of kernel '%s', so its value is unknown",
         nm(K, name), nm(K, K->kd->name));
  else
    kerr(K, at, "unknown size '%s' (the sizes of kernel '%s' are those of its parameters)", nm(K, name),
         nm(K, K->kd->name));
  return 0;
}

/* A size expression (INT, NAME, + - *); false after an error. */
static bool size_of(kc *K, sh_ast *e, bool declare, sh_size *out) {
  sh_size_const(out, 0);
  switch (e->kind) {
  case SH_EX_INT: sh_size_const(out, e->ival); return true;
  case SH_EX_NAME: {
    uint32_t v = size_name(K, e->name, e->span, declare);
    if (v) sh_size_var(out, v);
    return v != 0;
  }
  case SH_EX_BINARY:
    if (e->op == SH_TK_PLUS || e->op == SH_TK_MINUS || e->op == SH_TK_STAR) {
      sh_size a, b;
      if (!size_of(K, e->a, declare, &a) || !size_of(K, e->b, declare, &b)) return false;
      bool ok = e->op == SH_TK_PLUS ? sh_size_add(out, &a, &b)
                : e->op == SH_TK_MINUS ? sh_size_sub(out, &a, &b) : sh_size_mul(out, &a, &b);
      if (!ok) kerr(K, e->span, "size expression is too large or too complex");
      return ok;
    }
    break;
  case SH_EX_ERROR: return false;
  default: break;
  }
  kerr(K, e->span, "a size must be built from numbers, size names, +, - and *");
  return false;
}

/* Sizes of kernels are linear in the size names (no H*H). */
static bool size_linear(kc *K, const sh_size *s, sh_span at) {
  sh_size r;
  if (!sh_size_resolve(K->c->sv, s, true, &r)) {
    kerr(K, at, "size expression is too large or too complex");
    return false;
  }
  for (int i = 0; i < r.n; i++)
    if (r.t[i].deg > 1) {
      kerr(K, at, "kernel sizes are linear in the size names: this one multiplies sizes");
      return false;
    }
  return true;
}

/* ------------------------------------------------------------ extents */

static bool kext_equal(const checker *c, const kext *a, const kext *b) {
  if (a->ragged != b->ragged) return false;
  if (a->ragged) return a->len == b->len && a->outer == b->outer;
  sh_size x, y;
  return sh_size_resolve(c->sv, &a->sz, true, &x) && sh_size_resolve(c->sv, &b->sz, true, &y) &&
         sh_size_equal(&x, &y);
}

/* Whether i + off stays below dim for every i in 0..range: 1 yes, -1 it
 * certainly does not, 0 the checker cannot tell. */
static int kext_fits(const checker *c, const kext *range, int64_t off, const kext *dim) {
  if (range->ragged || dim->ragged) {
    if (range->ragged && dim->ragged && range->len == dim->len && range->outer == dim->outer)
      return off == 0 ? 1 : -1;
    return 0;
  }
  sh_size d, k;
  sh_size_const(&k, off);
  if (!sh_size_sub(&d, &dim->sz, &range->sz) || !sh_size_sub(&d, &d, &k)) return 0;
  sh_size r;
  if (!sh_size_resolve(c->sv, &d, true, &r)) return 0;
  return sh_size_sign(&r);
}

/* An extent as text for messages (a few rotating buffers). */
static const char *kx(kc *K, const kext *e) {
  static _Thread_local char bufs[4][160];
  static _Thread_local int slot;
  slot = (slot + 1) % 4;
  char *buf = bufs[slot];
  if (e->ragged) {
    snprintf(buf, sizeof bufs[0], "%s(%s)", nm(K, K->t[e->len].name), nm(K, e->label));
    return buf;
  }
  sh_buf b;
  sh_buf_init(&b, K->c->sv->ctx);
  sh_size_print(&b, K->c->sv, &e->sz);
  snprintf(buf, sizeof bufs[0], "%s", sh_buf_status(&b) == SHEAF_OK ? sh_buf_cstr(&b) : "?");
  sh_buf_free(&b);
  return buf;
}

/* `i + 1`, `i`, `3`: an index argument as text. */
static const char *kidx_str(kc *K, const kuse *u, char *buf, size_t cap) {
  if (u->var < 0) snprintf(buf, cap, "%lld", (long long)u->off);
  else if (u->off == 0) snprintf(buf, cap, "%s", nm(K, K->v[u->var].name));
  else snprintf(buf, cap, "%s %c %lld", nm(K, K->v[u->var].name), u->off > 0 ? '+' : '-',
                (long long)(u->off > 0 ? u->off : -u->off));
  return buf;
}

/* -------------------------------------------------------------- tensors */

static int find_tensor(const kc *K, sh_sym s) { return s ? K->tmap[s] - 1 : -1; }

static int new_tensor(kc *K, sh_sym name, sh_span span, sh_ktensor_kind kind) {
  ktens *v = kgrow(K, K->t, K->n_t, &K->cap_t, sizeof *v);
  if (!v) return -1;
  K->t = v;
  ktens *t = &K->t[K->n_t];
  memset(t, 0, sizeof *t);
  t->name = name;
  t->span = span;
  t->kind = kind;
  t->ragged_outer = -1;
  t->defined_by = -1;
  if (name && !K->tmap[name]) K->tmap[name] = K->n_t + 1;
  return K->n_t++;
}

/* A tensor's name must not be a function, a size or another tensor. */
static bool check_tensor_name(kc *K, sh_sym name, sh_span at, int self) {
  int other = find_tensor(K, name);
  if (kfn_find(K, name) >= 0) {
    kerr(K, at, "'%s' is a kernel function and cannot name a tensor", nm(K, name));
    return false;
  }
  if (K->smap[name] || is_global_size(K, name)) {
    kerr(K, at, "'%s' is a size; a tensor needs another name", nm(K, name));
    return false;
  }
  if (other >= 0 && other != self) {
    kerr(K, at, "tensor '%s' is already defined in kernel '%s'", nm(K, name), nm(K, K->kd->name));
    sh_diag_note(K->c->d, K->t[other].span, "'%s' was first defined here", nm(K, name));
    return false;
  }
  return true;
}

/* A type's affine dimensions (ragged ones: resolve_ragged). */
static void resolve_dims(kc *K, int ti, const sh_ksyn_type *tx, bool declare) {
  ktens *t = &K->t[ti];
  if (!tx) {
    t->bad = true;
    return;
  }
  t->i32 = tx->i32;
  bool ok = tx->n <= SH_KERNEL_MAX_RANK;
  if (!ok) /* reported; its sizes are still declared */
    kerr(K, tx->span, "kernel tensors have at most %d dimensions; this one has %d", SH_KERNEL_MAX_RANK,
         tx->n);
  t->rank = tx->n;
  t->dims = c_alloc(K->c, (size_t)tx->n * sizeof *t->dims + 1);
  if (!t->dims) return;
  for (int i = 0; i < tx->n; i++) {
    sh_ast *d = tx->dims[i];
    if (d->kind == SH_EX_CALL) continue; /* ragged: resolve_ragged */
    if (!size_of(K, d, declare, &t->dims[i].sz) || !size_linear(K, &t->dims[i].sz, d->span)) {
      ok = false;
      continue;
    }
    sh_size r;
    int64_t k;
    sh_size_resolve(K->c->sv, &t->dims[i].sz, true, &r);
    if (sh_size_is_const(&r, &k) ? k <= 0 : sh_size_sign(&r) < 0) {
      kerr(K, d->span, "a dimension must be positive, but this one is %s",
           sh_size_is_const(&r, &k) ? (k == 0 ? "0" : "negative") : "always negative");
      ok = false;
    }
  }
  t->shaped = ok;
  t->bad = !ok;
}

/* The ragged dimensions L(b) of a type: L an i32 vector parameter, the
 * dimension they depend on the first earlier one of L's extent. */
static void resolve_ragged(kc *K, int ti, const sh_ksyn_type *tx) {
  ktens *t = &K->t[ti];
  if (!tx || !t->dims || tx->n > SH_KERNEL_MAX_RANK) return;
  for (int i = 0; i < tx->n; i++) {
    sh_ast *d = tx->dims[i];
    if (d->kind != SH_EX_CALL) continue;
    sh_sym label = d->n == 1 ? d->items[0]->name : 0;
    int li = find_tensor(K, d->name);
    if (li < 0 || K->t[li].kind != SH_KTENSOR_INPUT) {
      kerr(K, d->name_span,
           "'%s' is not a parameter of kernel '%s': a ragged extent %s(%s) takes its lengths from an "
           "i32 vector parameter",
           nm(K, d->name), nm(K, K->kd->name), nm(K, d->name), label ? nm(K, label) : "b");
      t->shaped = false, t->bad = true;
      continue;
    }
    ktens *L = &K->t[li];
    if (L->bad || !label) {
      t->shaped = false, t->bad = true;
      continue;
    }
    if (!L->i32 || L->rank != 1 || L->dims[0].ragged) {
      kerr(K, d->name_span, "the lengths '%s' of a ragged extent must be an i32 vector (i32[B])",
           nm(K, d->name));
      t->shaped = false, t->bad = true;
      continue;
    }
    int outer = -1;
    for (int j = 0; j < i && outer < 0; j++)
      if (tx->dims[j]->kind != SH_EX_CALL && kext_equal(K->c, &t->dims[j], &L->dims[0])) outer = j;
    if (outer < 0) {
      kerr(K, d->span,
           "ragged extent %s(%s) needs an earlier dimension of extent %s (the length of '%s') in the "
           "same tensor",
           nm(K, d->name), nm(K, label), kx(K, &L->dims[0]), nm(K, d->name));
      t->shaped = false, t->bad = true;
      continue;
    }
    if (t->ragged_outer >= 0 && t->ragged_outer != outer) {
      kerr(K, d->span, "the ragged dimensions of '%s' must all depend on the same dimension",
           nm(K, t->name));
      t->shaped = false, t->bad = true;
      continue;
    }
    t->ragged_outer = outer;
    t->dims[i] = (kext){.ragged = true, .len = li, .outer = outer, .label = label};
  }
}

/* ----------------------------------------------------------- statements */

static bool valid_index_name(kc *K, sh_sym s, sh_span at) {
  if (find_tensor(K, s) >= 0) {
    kerr(K, at, "'%s' is a tensor, not an index", nm(K, s));
    return false;
  }
  if (K->smap[s] || is_global_size(K, s)) {
    kerr(K, at, "'%s' is a size, not an index: indices are loop variables, as in x(i, j)", nm(K, s));
    return false;
  }
  if (kfn_find(K, s) >= 0) {
    kerr(K, at, "'%s' is a kernel function; an index needs another name", nm(K, s));
    return false;
  }
  return true;
}

/* The variable of an index name (created on first sight); -1 if invalid. */
static int var_of(kc *K, sh_sym s, sh_span at) {
  if (K->vmap[s]) return K->vmap[s] - 1;
  if (!valid_index_name(K, s, at)) return -1;
  kvar *v = kgrow(K, K->v, K->n_v, &K->cap_v, sizeof *v);
  if (!v) return -1;
  K->v = v;
  kvar *x = &K->v[K->n_v];
  memset(x, 0, sizeof *x);
  x->name = s;
  x->span = at;
  x->lhs_pos = -1;
  x->where = -1;
  x->range_tensor = -1;
  K->vmap[s] = K->n_v + 1;
  return K->n_v++;
}

static void add_use(kc *K, int var, int64_t off, sh_span span, int tensor, int dim, int access,
                    bool lhs) {
  kuse *u = kgrow(K, K->u, K->n_u, &K->cap_u, sizeof *u);
  if (!u) return;
  K->u = u;
  K->u[K->n_u++] = (kuse){var, off, span, tensor, dim, access, lhs};
  if (var >= 0) K->v[var].used = true;
}

/* An index argument: i, i + c, i - c or c. */
static void index_arg(kc *K, sh_ast *a, int tensor, int dim, int access) {
  if (a->kind == SH_EX_NAME) {
    add_use(K, var_of(K, a->name, a->span), 0, a->span, tensor, dim, access, false);
    return;
  }
  if (a->kind == SH_EX_INT || (a->kind == SH_EX_UNARY && a->op == SH_TK_MINUS && a->a->kind == SH_EX_INT)) {
    add_use(K, -1, a->kind == SH_EX_INT ? a->ival : -a->a->ival, a->span, tensor, dim, access, false);
    return;
  }
  if (a->kind == SH_EX_BINARY && (a->op == SH_TK_PLUS || a->op == SH_TK_MINUS) &&
      a->a->kind == SH_EX_NAME && a->b->kind == SH_EX_INT) {
    int64_t off = a->op == SH_TK_PLUS ? a->b->ival : -a->b->ival;
    add_use(K, var_of(K, a->a->name, a->a->span), off, a->span, tensor, dim, access, false);
    return;
  }
  if (a->kind != SH_EX_ERROR)
    kerr(K, a->span,
         "an index is an index name, a name plus or minus a number, a number, or a value read from "
         "an i32 input (i, i + 1, 0, ids(n))");
  add_use(K, -2, 0, a->span, tensor, dim, access, false);
}

static const char *syntax_desc(const sh_ast *e);

/* The kernel operator of a binary token, or SH_KOP_COUNT_. */
static sh_kop kbinop(int tok) {
  switch (tok) {
  case SH_TK_PLUS: return SH_KOP_ADD;
  case SH_TK_MINUS: return SH_KOP_SUB;
  case SH_TK_STAR: return SH_KOP_MUL;
  case SH_TK_SLASH: return SH_KOP_DIV;
  case SH_TK_LT: return SH_KOP_LT;
  case SH_TK_LE: return SH_KOP_LE;
  case SH_TK_GT: return SH_KOP_GT;
  case SH_TK_GE: return SH_KOP_GE;
  case SH_TK_EQ: return SH_KOP_EQ;
  case SH_TK_NE: return SH_KOP_NE;
  default: return SH_KOP_COUNT_;
  }
}

/* Whether index argument a reads its value from a tensor (`ids(n)`). */
static bool is_gather(const kc *K, const sh_ast *a) {
  return a->kind == SH_EX_CALL && kfn_find(K, a->name) < 0;
}

/* A gather index `ids(n)` of dimension dim of tensor ti: ids a dense i32
 * input indexed by plain index arguments (one level). The value's bounds
 * are checked when the kernel runs; the names inside get their ranges from
 * ids's shape like any other use. */
static void gather_arg(kc *K, sh_ast *a, int ti, int dim) {
  int gi = find_tensor(K, a->name);
  if (gi < 0) {
    kerr(K, a->name_span, "unknown tensor '%s' in an index (an index read from a tensor needs an i32 input)",
         nm(K, a->name));
    return;
  }
  ktens *g = &K->t[gi];
  if (g->bad) {
    K->bad = true;
    return;
  }
  if (!g->i32 || g->kind != SH_KTENSOR_INPUT) {
    kerr(K, a->name_span,
         "'%s' is an f32 tensor: an index read from a tensor (a gather, as in emb(ids(n), e)) must "
         "come from an i32 input",
         nm(K, a->name));
    return;
  }
  const ktens *t = &K->t[ti];
  if (t->shaped && dim < t->rank && t->dims[dim].ragged) {
    kerr(K, a->span, "dimension %d of '%s' is ragged: it cannot be indexed by a value read from '%s'",
         dim, nm(K, t->name), nm(K, a->name));
    return;
  }
  if (g->ragged_outer >= 0) {
    kerr(K, a->name_span, "'%s' has ragged dimensions: the index tensor of a gather must be dense",
         nm(K, a->name));
    return;
  }
  if (g->shaped && a->n != g->rank) {
    kerr(K, a->span, "'%s' has %d dimension%s but is indexed with %d", nm(K, g->name), g->rank,
         g->rank == 1 ? "" : "s", a->n);
    return;
  }
  int access = K->n_u;
  for (int j = 0; j < a->n; j++) {
    sh_ast *b = a->items[j];
    if (is_gather(K, b)) {
      kerr(K, b->span,
           "gathers nest one level: '%s' is indexed by a value read from '%s'; index '%s' with index "
           "names, numbers or name plus number",
           nm(K, a->name), nm(K, b->name), nm(K, a->name));
      add_use(K, -2, 0, b->span, gi, j, access, false);
      continue;
    }
    index_arg(K, b, gi, j, access);
  }
}

/* Pass 1 over a right-hand side: its syntax, the tensors it reads and
 * their index arguments (value positions are typed by conv). */
static void collect(kc *K, sh_ast *e, int si, bool defining) {
  if (!e) return;
  switch (e->kind) {
  case SH_EX_NAME: /* an index's value (`+=! x(i) * j where j in 0..N`) uses it */
    if (K->vmap[e->name]) K->v[K->vmap[e->name] - 1].used = true;
    return;
  case SH_EX_INT: case SH_EX_FLOAT: case SH_EX_ERROR: return;
  case SH_EX_UNARY:
    if (e->op != SH_TK_MINUS) {
      kerr(K, e->span, "'!' is not a kernel operator (comparisons give 1 or 0: write 1 - c)");
      return;
    }
    collect(K, e->a, si, defining);
    return;
  case SH_EX_BINARY:
    if (kbinop(e->op) == SH_KOP_COUNT_) {
      kerr(K, e->span, "%s is not a kernel operator (kernels have + - * / and comparisons)",
           sh_tok_desc((sh_tok_kind)e->op));
      return;
    }
    collect(K, e->a, si, defining);
    collect(K, e->b, si, defining);
    return;
  case SH_EX_CALL: break;
  default:
    kerr(K, e->span,
         "%s is not part of kernel expressions (numbers, sizes, indices, accesses x(i, j), + - * /, "
         "comparisons and pointwise functions)",
         syntax_desc(e));
    return;
  }
  if (kfn_find(K, e->name) >= 0) {
    for (int i = 0; i < e->n; i++) collect(K, e->items[i], si, defining);
    return;
  }
  int ti = find_tensor(K, e->name);
  if (ti < 0) {
    int def = K->defmap[e->name];
    if (def > si + 1)
      kerr(K, e->name_span, "'%s' is read before it is defined (at line %u)", nm(K, e->name),
           K->kd->stmts[def - 1].span.line);
    else
      kerr(K, e->name_span, "unknown tensor or function '%s'", nm(K, e->name));
    return;
  }
  ktens *t = &K->t[ti];
  if (t->bad && ti != K->lhs_t) { /* reported already: stop this statement quietly */
    K->bad = true;
    return;
  }
  if (ti == K->lhs_t && defining) {
    kerr(K, e->span, "'%s' is read on the right of the statement that defines it", nm(K, t->name));
  } else if (ti != K->lhs_t && t->kind != SH_KTENSOR_INPUT && t->defined_by < 0 && !t->bad) {
    int def = K->defmap[e->name];
    if (def > si + 1)
      kerr(K, e->name_span, "'%s' is read before it is defined (at line %u)", nm(K, e->name),
           K->kd->stmts[def - 1].span.line);
    else
      kerr(K, e->name_span, "'%s' is read but never defined", nm(K, e->name));
  }
  if (t->shaped && e->n != t->rank) {
    kerr(K, e->span, "'%s' has %d dimension%s but is indexed with %d", nm(K, t->name), t->rank,
         t->rank == 1 ? "" : "s", e->n);
    return;
  }
  int access = K->n_u; /* the access's own uses first, contiguous (use_extent) */
  for (int i = 0; i < e->n; i++) {
    if (is_gather(K, e->items[i])) add_use(K, KV_GATHER, 0, e->items[i]->span, ti, i, access, false);
    else index_arg(K, e->items[i], ti, i, access);
  }
  for (int i = 0; i < e->n; i++)
    if (is_gather(K, e->items[i])) gather_arg(K, e->items[i], ti, i);
}

/* The extent that use u's argument must stay within (its tensor's dim);
 * false when unknown (a shape still being inferred, an error). */
static bool use_extent(kc *K, const kuse *u, kext *out) {
  const ktens *t = &K->t[u->tensor];
  if (!t->shaped || t->bad || u->dim >= t->rank) return false;
  const kext *d = &t->dims[u->dim];
  if (!d->ragged) {
    *out = *d;
    return true;
  }
  const kuse *o = &K->u[u->access + d->outer];
  if (o->var < 0 || o->off != 0) {
    if (o->var != -2)
      kerr(K, o->span,
           "dimension %d of '%s' selects the lengths of its ragged dimension %d: index it with an "
           "index name, not %s",
           d->outer, nm(K, t->name), u->dim,
           o->var == KV_GATHER ? "a value read from a tensor" : o->var < 0 ? "a number" : "an offset");
    return false;
  }
  *out = (kext){.ragged = true, .len = d->len, .outer = o->var, .label = K->v[o->var].name};
  return true;
}

static const char *tensor_dim_desc(kc *K, int tensor, int dim, char *buf, size_t cap) {
  if (tensor < 0) snprintf(buf, cap, "its where clause");
  else snprintf(buf, cap, "dimension %d of '%s'", dim, nm(K, K->t[tensor].name));
  return buf;
}

/* Range inference for every variable of the statement. */
static void infer_ranges(kc *K) {
  checker *c = K->c;
  /* plain uses (i): all must agree */
  for (int pass = 0; pass < 2; pass++)
    for (int k = 0; k < K->n_u; k++) {
      kuse *u = &K->u[k];
      if (u->var < 0) continue;
      kvar *x = &K->v[u->var];
      if (x->where >= 0 || x->bad || (pass == 0) != (u->off == 0)) continue;
      if (pass == 1 && x->ranged) continue; /* offsets only range an otherwise unranged index */
      kext e;
      if (!use_extent(K, u, &e)) continue;
      if (pass == 1) {
        if (u->off < 0) continue; /* reported by check_bounds */
        if (e.ragged) {
          kerr(K, u->span, "a ragged dimension cannot be indexed with an offset");
          x->bad = true;
          continue;
        }
        sh_size k2;
        sh_size_const(&k2, u->off);
        if (!sh_size_sub(&e.sz, &e.sz, &k2)) continue;
      }
      if (!x->ranged) {
        x->ranged = true;
        x->range = e;
        x->range_at = u->span;
        x->range_tensor = u->tensor;
        x->range_dim = u->dim;
      } else if (!kext_equal(c, &x->range, &e)) {
        char d1[200], d2[200];
        kerr(K, u->span, "index '%s' has range 0..%s here (%s) but 0..%s where it was first used (%s)",
             nm(K, x->name), kx(K, &e), tensor_dim_desc(K, u->tensor, u->dim, d1, sizeof d1),
             kx(K, &x->range), tensor_dim_desc(K, x->range_tensor, x->range_dim, d2, sizeof d2));
        sh_diag_note(c->d, x->range_at, "'%s' gets its range 0..%s here", nm(K, x->name),
                     kx(K, &x->range));
        x->bad = true;
      }
    }
  for (int i = 0; i < K->n_v; i++) {
    kvar *x = &K->v[i];
    if (!x->ranged && !x->bad && !K->bad)
      kerr(K, x->span,
           "index '%s' has no range: it indexes no tensor of known shape; give it one with "
           "'where %s in 0..N'",
           nm(K, x->name), nm(K, x->name));
    if (!x->ranged) x->bad = true;
  }
}

/* Every argument stays in bounds; the left-hand side covers its tensor. */
static void check_bounds(kc *K) {
  for (int k = 0; k < K->n_u; k++) {
    kuse *u = &K->u[k];
    if (u->var == -2 || u->var == KV_GATHER || (u->var >= 0 && K->v[u->var].bad)) continue;
    kext e;
    if (!use_extent(K, u, &e)) continue;
    char a[120], d[200];
    kidx_str(K, u, a, sizeof a);
    tensor_dim_desc(K, u->tensor, u->dim, d, sizeof d);
    const char *tn = nm(K, K->t[u->tensor].name);
    if (u->off < 0) {
      if (u->var >= 0)
        kerr(K, u->span, "'%s' is read at %s, which is negative when %s is 0 (indices start at 0)",
             tn, a, nm(K, K->v[u->var].name));
      else
        kerr(K, u->span, "'%s' is read at %s: indices start at 0", tn, a);
      continue;
    }
    kext one = {.ragged = false}; /* a constant c: the range 0..1 shifted by c */
    sh_size_const(&one.sz, 1);
    const kext *r = u->var >= 0 ? &K->v[u->var].range : &one;
    int64_t off = u->off;
    if (u->lhs) {
      if (!kext_equal(K->c, r, &e))
        kerr(K, u->span,
             "the left-hand side does not cover '%s': index '%s' ranges over 0..%s but %s has "
             "extent %s",
             tn, a, kx(K, r), d, kx(K, &e));
      continue;
    }
    int fits = kext_fits(K->c, r, off, &e);
    if (fits > 0) continue;
    char what[300];
    if (u->var < 0) snprintf(what, sizeof what, "index %s", a);
    else if (u->off == 0) snprintf(what, sizeof what, "%s in 0..%s", a, kx(K, r));
    else snprintf(what, sizeof what, "%s with %s in 0..%s", a, nm(K, K->v[u->var].name), kx(K, r));
    if (fits < 0)
      kerr(K, u->span, "'%s' is read out of bounds: %s passes the end of %s (extent %s)", tn, what, d,
           kx(K, &e));
    else
      kerr(K, u->span, "cannot show that '%s' is read in bounds: %s, but %s has extent %s", tn, what, d,
           kx(K, &e));
  }
}

/* ragged indices inside the scope of their outer index; the loop order */
static void order_vars(kc *K, const sh_ksyn_stmt *s) {
  int n = 0;
  for (int p = 0; p < s->n_idx; p++)
    for (int i = 0; i < K->n_v; i++)
      if (K->v[i].lhs_pos == p) K->v[i].order = n++;
  for (int i = 0; i < K->n_v; i++) {
    kvar *x = &K->v[i];
    if (!x->ranged || !x->range.ragged) continue;
    kvar *o = &K->v[x->range.outer];
    if (x->lhs_pos >= 0 && o->lhs_pos < 0)
      kerr(K, x->span,
           "index '%s' ranges over 0..%s, but '%s' is a reduction index here: '%s' is on the left, "
           "outside the scope of '%s'",
           nm(K, x->name), kx(K, &x->range), nm(K, o->name), nm(K, x->name), nm(K, o->name));
    else if (x->lhs_pos >= 0 && o->lhs_pos > x->lhs_pos)
      kerr(K, x->span, "index '%s' ranges over 0..%s, so '%s' must come before it on the left",
           nm(K, x->name), kx(K, &x->range), nm(K, o->name));
  }
  /* reductions: those not depending on another reduction first, then the rest */
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < K->n_v; i++) {
      kvar *x = &K->v[i];
      if (x->lhs_pos >= 0) continue;
      bool dep = x->ranged && x->range.ragged && K->v[x->range.outer].lhs_pos < 0;
      if (dep == (pass == 1)) x->order = n++;
    }
}

/* ---------------------------------------------------------- expressions */

static sh_kexpr *knode(kc *K, sh_kexpr_kind kind, const sh_ast *e) {
  sh_kexpr *x = c_alloc(K->c, sizeof *x);
  if (!x) return NULL;
  x->kind = kind;
  x->line = (int)e->span.line;
  x->col = (int)e->span.col;
  return x;
}

static const char *syntax_desc(const sh_ast *e) {
  switch (e->kind) {
  case SH_EX_BOOL: return "true and false";
  case SH_EX_TUPLE: return "a tuple";
  case SH_EX_LIST: return "a list";
  case SH_EX_INDEX: return "indexing with [ ]";
  case SH_EX_SLICE: return "a slice";
  case SH_EX_BLOCK: return "a block";
  case SH_EX_IF: return "'if'";
  case SH_EX_MATCH: return "'match'";
  case SH_EX_FOR: return "'for'";
  case SH_EX_PHASE: return "'phase'";
  default: return "this";
  }
}

static bool need_f32(kc *K, const sh_kexpr *x, const sh_ast *e) {
  if (!x || x->dtype == SH_KDTYPE_F32) return x != NULL;
  kerr(K, e->span, "'%s' is an i32 value: convert it with float(...) to use it in float math",
       e->kind == SH_EX_CALL ? nm(K, e->name) : "this");
  return false;
}

/* Pass 2 over a right-hand side: its typed tree (NULL after an error). */
static sh_kexpr *conv(kc *K, sh_ast *e) {
  sh_kexpr *x;
  switch (e->kind) {
  case SH_EX_INT:
  case SH_EX_FLOAT:
    if (!(x = knode(K, SH_KEXPR_CONST, e))) return NULL;
    x->value = e->kind == SH_EX_INT ? (double)e->ival : e->fval;
    return x;
  case SH_EX_NAME: {
    if (K->vmap[e->name]) {
      if (!(x = knode(K, SH_KEXPR_INDEX, e))) return NULL;
      x->var = K->v[K->vmap[e->name] - 1].order;
      return x;
    }
    if (find_tensor(K, e->name) >= 0) {
      kerr(K, e->span, "'%s' is a tensor: index it, as in %s(i)", nm(K, e->name), nm(K, e->name));
      return NULL;
    }
    if (kfn_find(K, e->name) >= 0) {
      kerr(K, e->span, "'%s' is a function: call it, as in %s(x)", nm(K, e->name), nm(K, e->name));
      return NULL;
    }
    if (fixed_global(K, e->name)) {
      if (!(x = knode(K, SH_KEXPR_CONST, e))) return NULL;
      x->value = (double)K->c->sv->v[K->c->globals[e->name].u.size_var].value;
      return x;
    }
    if (K->smap[e->name]) {
      if (!(x = knode(K, SH_KEXPR_SIZE, e))) return NULL;
      x->size = K->smap[e->name] - 1;
      return x;
    }
    if (is_global_size(K, e->name)) size_name(K, e->name, e->span, false);
    else kerr(K, e->span, "unknown name '%s' (not an index, a size or a tensor of kernel '%s')",
              nm(K, e->name), nm(K, K->kd->name));
    return NULL;
  }
  case SH_EX_UNARY: {
    if (e->op != SH_TK_MINUS) {
      kerr(K, e->span, "'!' is not a kernel operator (comparisons give 1 or 0: write 1 - c)");
      return NULL;
    }
    sh_kexpr *a = conv(K, e->a);
    if (!need_f32(K, a, e->a) || !(x = knode(K, SH_KEXPR_OP, e))) return NULL;
    x->op = SH_KOP_NEG;
    x->a = a;
    return x;
  }
  case SH_EX_BINARY: {
    sh_kop op = kbinop(e->op);
    if (op == SH_KOP_COUNT_) {
      kerr(K, e->span, "%s is not a kernel operator (kernels have + - * / and comparisons)",
           sh_tok_desc((sh_tok_kind)e->op));
      return NULL;
    }
    sh_kexpr *a = conv(K, e->a), *b = conv(K, e->b);
    bool ok = need_f32(K, a, e->a);
    ok = need_f32(K, b, e->b) && ok;
    if (!ok || !(x = knode(K, SH_KEXPR_OP, e))) return NULL;
    x->op = op;
    x->a = a;
    x->b = b;
    return x;
  }
  case SH_EX_CALL: {
    int op = kfn_find(K, e->name);
    if (op >= 0) {
      int arity = sh_kop_arity((sh_kop)op);
      if (e->n != arity) {
        kerr(K, e->span, "'%s' takes %d argument%s but got %d", nm(K, e->name), arity,
             arity == 1 ? "" : "s", e->n);
        return NULL;
      }
      sh_kexpr *arg[3] = {NULL, NULL, NULL};
      bool ok = true;
      for (int i = 0; i < arity; i++) {
        arg[i] = conv(K, e->items[i]);
        ok = (op == SH_KOP_FLOAT ? arg[i] != NULL : need_f32(K, arg[i], e->items[i])) && ok;
      }
      if (!ok || !(x = knode(K, SH_KEXPR_OP, e))) return NULL;
      x->op = (sh_kop)op;
      x->a = arg[0];
      x->b = arg[1];
      x->c = arg[2];
      return x;
    }
    int ti = find_tensor(K, e->name);
    if (ti < 0 || !(x = knode(K, SH_KEXPR_ACCESS, e))) return NULL; /* reported by collect */
    x->tensor = ti;
    x->dtype = K->t[ti].i32 ? SH_KDTYPE_I32 : SH_KDTYPE_F32;
    x->idx = c_alloc(K->c, (size_t)e->n * sizeof *x->idx + 1);
    if (!x->idx) return NULL;
    for (int i = 0; i < e->n; i++) {
      sh_ast *a = e->items[i];
      sh_ast *v = a->kind == SH_EX_BINARY ? a->a : a;
      x->idx[i].gather = NULL;
      if (is_gather(K, a)) { /* an i32 access (checked by gather_arg) */
        x->idx[i].var = -1;
        x->idx[i].off = 0;
        if (!(x->idx[i].gather = conv(K, a))) return NULL;
        continue;
      }
      if (a->kind == SH_EX_INT || a->kind == SH_EX_UNARY) { /* c, -c */
        x->idx[i].var = -1;
        x->idx[i].off = a->kind == SH_EX_INT ? a->ival : -a->a->ival;
        continue;
      }
      x->idx[i].var = K->v[K->vmap[v->name] - 1].order;
      x->idx[i].off = a->kind == SH_EX_BINARY ? (a->op == SH_TK_PLUS ? a->b->ival : -a->b->ival) : 0;
    }
    return x;
  }
  case SH_EX_ERROR: return NULL;
  default:
    kerr(K, e->span,
         "%s is not part of kernel expressions (numbers, sizes, indices, accesses x(i, j), + - * /, "
         "comparisons and pointwise functions)",
         syntax_desc(e));
    return NULL;
  }
}

/* ------------------------------------------------------ one statement */

static sh_kext to_kext(kc *K, const kext *e);

static const sh_kred red_of[] = {
    [SH_KSYN_ASSIGN] = SH_KRED_ASSIGN, [SH_KSYN_ADD] = SH_KRED_ADD, [SH_KSYN_MUL] = SH_KRED_MUL,
    [SH_KSYN_MAX] = SH_KRED_MAX,       [SH_KSYN_MIN] = SH_KRED_MIN,
};

/* The where clauses of a statement (before its other indices are seen). */
static void where_clauses(kc *K, sh_ksyn_stmt *s) {
  for (int w = 0; w < s->n_where; w++) {
    sh_ksyn_range *r = &s->where[w];
    if (!r->var || !r->lo || !r->hi) continue;
    int vi = var_of(K, r->var, r->span);
    if (vi < 0) continue;
    kvar *x = &K->v[vi];
    if (x->where >= 0) {
      kerr(K, r->span, "index '%s' has two where clauses", nm(K, r->var));
      continue;
    }
    x->where = w;
    int64_t lo = -1;
    if (r->lo->kind == SH_EX_INT) lo = r->lo->ival;
    if (lo != 0) {
      kerr(K, r->lo->span, "index ranges start at 0: write %s in 0..N", nm(K, r->var));
      x->bad = true;
      continue;
    }
    kext e = {.ragged = false};
    if (r->hi->kind == SH_EX_CALL) {
      int li = find_tensor(K, r->hi->name);
      sh_ast *b = r->hi->n == 1 ? r->hi->items[0] : NULL;
      if (li < 0 || K->t[li].kind != SH_KTENSOR_INPUT || !K->t[li].i32 || K->t[li].rank != 1 ||
          !K->t[li].shaped) {
        if (li < 0 || !K->t[li].bad)
          kerr(K, r->hi->name_span,
               "'%s' is not an i32 vector parameter: a ragged range is 0..L(b) with L: i32[B]",
               nm(K, r->hi->name));
        K->v[vi].bad = true;
        continue;
      }
      int bi = b ? var_of(K, b->name, b->span) : -1;
      if (bi < 0) {
        K->v[vi].bad = true;
        continue;
      }
      bool used = K->v[bi].used;
      add_use(K, bi, 0, b->span, li, 0, K->n_u, false);
      K->v[bi].used = used; /* b must still be used by the statement itself */
      e = (kext){.ragged = true, .len = li, .outer = bi, .label = b->name};
    } else {
      if (!size_of(K, r->hi, false, &e.sz) || !size_linear(K, &e.sz, r->hi->span)) {
        K->v[vi].bad = true;
        continue;
      }
      sh_size res;
      sh_size_resolve(K->c->sv, &e.sz, true, &res);
      if (sh_size_sign(&res) < 0) {
        kerr(K, r->hi->span, "the range 0..%s of '%s' is negative", kx(K, &e), nm(K, r->var));
        K->v[vi].bad = true;
        continue;
      }
    }
    x = &K->v[vi];
    x->ranged = true;
    x->range = e;
    x->range_at = r->span;
  }
}

static void check_stmt(kc *K, int si) {
  sh_ksyn_stmt *s = &K->kd->stmts[si];
  K->bad = false;
  K->n_v = K->n_u = 0;
  K->lhs_t = -1;
  if (!s->lhs || !s->rhs) {
    K->kernel_bad = true;
    return;
  }
  bool defining = s->op == SH_KSYN_ASSIGN || s->init;
  /* the tensor written */
  int ti = find_tensor(K, s->lhs);
  if (kfn_find(K, s->lhs) >= 0) {
    kerr(K, s->lhs_span, "'%s' is a kernel function and cannot name a tensor", nm(K, s->lhs));
    return;
  }
  if (ti >= 0 && K->t[ti].kind == SH_KTENSOR_INPUT) {
    kerr(K, s->lhs_span, "cannot write to '%s': it is an input of kernel '%s'", nm(K, s->lhs),
         nm(K, K->kd->name));
    return;
  }
  if (ti < 0) {
    if (!check_tensor_name(K, s->lhs, s->lhs_span, -1)) return;
    if ((ti = new_tensor(K, s->lhs, s->lhs_span, SH_KTENSOR_TEMP)) < 0) return;
  }
  K->lhs_t = ti;
  ktens *t = &K->t[ti];
  if (defining && t->defined_by >= 0) {
    kerr(K, s->lhs_span, "'%s' is already defined; accumulate into it with '%s' (no '!')",
         nm(K, s->lhs), s->op == SH_KSYN_ASSIGN ? "+=" : sh_kred_name(red_of[s->op], false));
    sh_diag_note(K->c->d, K->kd->stmts[t->defined_by].lhs_span, "'%s' is defined here",
                 nm(K, s->lhs));
    t->bad = true;
  } else if (!defining && t->defined_by < 0 && !t->bad) {
    kerr(K, s->op_span,
         "'%s' is accumulated into before it is defined: define it first with '=' or '%s!'",
         nm(K, s->lhs), sh_kred_name(red_of[s->op], false));
    t->bad = true;
  }
  if (t->shaped && s->n_idx != t->rank) {
    kerr(K, s->lhs_span, "'%s' has %d dimension%s but is written with %d ind%s", nm(K, s->lhs),
         t->rank, t->rank == 1 ? "" : "s", s->n_idx, s->n_idx == 1 ? "ex" : "ices");
    t->bad = true;
    return;
  }
  if (s->n_idx > SH_KERNEL_MAX_RANK) {
    kerr(K, s->lhs_span, "kernel tensors have at most %d dimensions; '%s' is written with %d indices",
         SH_KERNEL_MAX_RANK, nm(K, s->lhs), s->n_idx);
    t->bad = true;
    return;
  }
  /* left-hand indices: distinct names */
  for (int i = 0; i < s->n_idx; i++) {
    sh_ast *a = s->idx[i];
    if (a->kind != SH_EX_NAME) {
      if (is_gather(K, a) && !defining)
        kerr(K, a->span,
             "the target of an accumulation cannot be indexed by a value read from '%s' (that would "
             "scatter into '%s'): index it with index names",
             nm(K, a->name), nm(K, s->lhs));
      else if (is_gather(K, a) && s->op != SH_KSYN_ASSIGN)
        kerr(K, a->span,
             "the target of a reduction cannot be indexed by a value read from '%s' (that would "
             "scatter into '%s'): index it with index names",
             nm(K, a->name), nm(K, s->lhs));
      else if (is_gather(K, a))
        kerr(K, a->span,
             "'%s' cannot be written at an index read from '%s': gathers read, a left-hand side is "
             "indexed by distinct index names",
             nm(K, s->lhs), nm(K, a->name));
      else if (a->kind != SH_EX_ERROR)
        kerr(K, a->span, "the indices of a left-hand side are distinct index names, as in y(i, j)");
      add_use(K, -2, 0, a->span, ti, i, 0, true);
      continue;
    }
    int vi = var_of(K, a->name, a->span);
    if (vi >= 0 && K->v[vi].lhs_pos >= 0) {
      kerr(K, a->span, "index '%s' appears twice on the left-hand side", nm(K, a->name));
      vi = -2;
    } else if (vi >= 0) {
      K->v[vi].lhs_pos = i;
    }
    add_use(K, vi < 0 ? -2 : vi, 0, a->span, ti, i, 0, true);
  }
  if (K->bad) {
    t->bad = true;
    if (t->defined_by < 0 && defining) t->defined_by = si;
    return;
  }
  where_clauses(K, s);
  collect(K, s->rhs, si, defining);
  for (int i = 0; i < K->n_v; i++)
    if (K->v[i].where >= 0 && !K->v[i].used && !K->v[i].bad)
      kerr(K, s->where[K->v[i].where].span, "index '%s' of the where clause is not used in the statement",
           nm(K, K->v[i].name));
  if (!K->bad) {
    infer_ranges(K);
    if (!K->bad) check_bounds(K);
  }
  if (!K->bad) {
    for (int i = 0; i < K->n_v; i++)
      if (K->v[i].lhs_pos < 0 && s->op == SH_KSYN_ASSIGN) {
        kerr(K, K->v[i].span,
             "index '%s' appears only on the right: a reduction over it needs '+=!' (or '*=!', "
             "'max=!', 'min=!'), not '='",
             nm(K, K->v[i].name));
        break;
      }
  }
  if (!K->bad && !defining) { /* an accumulation reads its own tensor only pointwise */
    bool has_red = false;
    for (int i = 0; i < K->n_v; i++) has_red |= K->v[i].lhs_pos < 0;
    for (int k = 0; k < K->n_u; k++) {
      kuse *u = &K->u[k];
      if (u->lhs || u->tensor != ti || u->access != k) continue;
      bool same = !has_red;
      for (int d = 0; d < s->n_idx && same; d++)
        same = K->u[k + d].var >= 0 && K->v[K->u[k + d].var].lhs_pos == d && K->u[k + d].off == 0;
      if (!same) {
        kerr(K, u->span,
             "the accumulation into '%s' reads '%s' %s: only %s at its own left-hand indices, "
             "without a reduction, is allowed",
             nm(K, s->lhs), nm(K, s->lhs), has_red ? "inside a reduction" : "at other indices",
             nm(K, s->lhs));
        break;
      }
    }
  }
  if (!K->bad) order_vars(K, s);
  sh_kexpr *rhs = K->bad ? NULL : conv(K, s->rhs);
  if (rhs && rhs->dtype != SH_KDTYPE_F32) need_f32(K, rhs, s->rhs);
  if (K->bad || !rhs) {
    t->bad = true;
    if (t->defined_by < 0 && defining) t->defined_by = si;
    return;
  }
  if (!t->shaped && t->kind != SH_KTENSOR_TEMP) { /* its type had errors */
    K->kernel_bad = true;
    return;
  }
  /* a temporary's shape: the ranges of its left-hand indices */
  if (defining && !t->shaped) {
    t->rank = s->n_idx;
    t->dims = c_alloc(K->c, (size_t)t->rank * sizeof *t->dims + 1);
    if (!t->dims) return;
    for (int d = 0; d < t->rank; d++) {
      kvar *x = &K->v[K->vmap[s->idx[d]->name] - 1];
      t->dims[d] = x->range;
      if (!x->range.ragged) continue;
      int outer = K->v[x->range.outer].lhs_pos;
      if (t->ragged_outer >= 0 && t->ragged_outer != outer) {
        kerr(K, s->idx[d]->span,
             "the ragged dimensions of '%s' depend on different indices; a tensor's ragged "
             "dimensions must all depend on one",
             nm(K, s->lhs));
        t->bad = true;
        t->defined_by = si;
        return;
      }
      t->ragged_outer = outer;
      t->dims[d].outer = outer;
    }
    t->shaped = true;
  }
  if (defining) t->defined_by = si;
  /* the checked statement */
  sh_kstmt *st = &K->stmts[si];
  st->lhs = ti;
  st->red = red_of[s->op];
  st->init = s->init;
  st->n_idx = K->n_v;
  st->idx = c_alloc(K->c, (size_t)K->n_v * sizeof *st->idx + 1);
  if (!st->idx) return;
  for (int i = 0; i < K->n_v; i++) {
    kvar *x = &K->v[i];
    sh_kindex *ix = &st->idx[x->order];
    ix->name = nm(K, x->name);
    ix->reduction = x->lhs_pos < 0;
    st->n_free += x->lhs_pos >= 0;
    kext r = x->range;
    if (r.ragged) r.outer = K->v[r.outer].order;
    ix->range = to_kext(K, &r);
  }
  st->rhs = rhs;
  st->line = (int)s->span.line;
  st->col = (int)s->span.col;
}

/* --------------------------------------------------------- checked form */

static sh_kext to_kext(kc *K, const kext *e) {
  sh_kext r;
  memset(&r, 0, sizeof r);
  if (e->ragged) {
    r.kind = SH_KEXT_RAGGED;
    r.len = e->len;
    r.outer = e->outer;
    r.outer_name = nm(K, e->label);
    return r;
  }
  r.kind = SH_KEXT_AFFINE;
  sh_size s;
  sh_size_resolve(K->c->sv, &e->sz, true, &s);
  for (int i = 0; i < s.n; i++) {
    if (s.t[i].deg == 0) {
      r.aff.c = s.t[i].coef;
    } else if (r.aff.n < SH_KAFF_TERMS) {
      sh_sym name = K->c->sv->v[s.t[i].var[0]].name;
      r.aff.t[r.aff.n].coef = s.t[i].coef;
      r.aff.t[r.aff.n++].size = K->smap[name] - 1;
    }
  }
  return r;
}

static sh_kernel *build(kc *K) {
  sh_kernel *k = c_alloc(K->c, sizeof *k);
  if (!k) return NULL;
  sh_kernel_decl *kd = K->kd;
  k->name = nm(K, kd->name);
  k->line = (int)kd->span.line;
  k->col = (int)kd->span.col;
  k->n_sizes = K->n_sizes;
  k->sizes = c_alloc(K->c, (size_t)K->n_sizes * sizeof *k->sizes + 1);
  k->n_tensors = K->n_t;
  k->tensors = c_alloc(K->c, (size_t)K->n_t * sizeof *k->tensors + 1);
  if (!k->sizes || !k->tensors) return NULL;
  for (int i = 0; i < K->n_sizes; i++) {
    k->sizes[i].name = nm(K, K->c->sv->v[K->sizes[i].var].name);
    k->sizes[i].tensor = k->sizes[i].dim = -1;
  }
  for (int i = 0; i < K->n_t; i++) {
    ktens *t = &K->t[i];
    sh_ktensor *o = &k->tensors[i];
    o->name = nm(K, t->name);
    o->kind = t->kind;
    o->dtype = t->i32 ? SH_KDTYPE_I32 : SH_KDTYPE_F32;
    o->rank = t->rank;
    o->ragged_outer = t->ragged_outer;
    o->defined_by = t->defined_by;
    o->line = (int)t->span.line;
    o->col = (int)t->span.col;
    o->dims = c_alloc(K->c, (size_t)t->rank * sizeof *o->dims + 1);
    if (!o->dims) return NULL;
    for (int d = 0; d < t->rank; d++) {
      o->dims[d] = to_kext(K, &t->dims[d]);
      if (o->dims[d].kind == SH_KEXT_AFFINE && o->dims[d].aff.n == 1 && o->dims[d].aff.c == 0 &&
          o->dims[d].aff.t[0].coef == 1 && t->kind == SH_KTENSOR_INPUT &&
          k->sizes[o->dims[d].aff.t[0].size].tensor < 0) {
        k->sizes[o->dims[d].aff.t[0].size].tensor = i;
        k->sizes[o->dims[d].aff.t[0].size].dim = d;
      }
    }
    k->n_inputs += t->kind == SH_KTENSOR_INPUT;
    k->n_outputs += t->kind == SH_KTENSOR_OUTPUT;
  }
  k->n_stmts = kd->n_stmts;
  k->stmts = K->stmts;
  return k;
}

/* Every size can be read from the shape of an input where it is a whole dimension. */
static void check_size_sources(kc *K) {
  for (int s = 0; s < K->n_sizes; s++) {
    bool found = false;
    for (int i = 0; i < K->n_t && !found; i++) {
      ktens *t = &K->t[i];
      if (t->kind != SH_KTENSOR_INPUT || !t->dims) continue;
      for (int d = 0; d < t->rank && !found; d++) {
        sh_size r;
        if (t->dims[d].ragged || !sh_size_resolve(K->c->sv, &t->dims[d].sz, true, &r)) continue;
        found = r.n == 1 && r.t[0].deg == 1 && r.t[0].coef == 1 && r.t[0].var[0] == K->sizes[s].var;
      }
    }
    if (!found)
      kerr(K, K->sizes[s].at,
           "size '%s' is not a whole dimension of any parameter of kernel '%s', so its value cannot "
           "be read from the arguments",
           nm(K, K->c->sv->v[K->sizes[s].var].name), nm(K, K->kd->name));
  }
}

/* ------------------------------------------------------------- a kernel */

static void check_kernel(kc *K, sh_kernel_decl *kd) {
  checker *c = K->c;
  K->kd = kd;
  K->n_t = K->n_sizes = 0;
  K->kernel_bad = false;
  K->bad = false;
  /* parameters, then results: types (sizes of parameters are declared) */
  for (int i = 0; i < kd->n_params; i++) {
    sh_ksyn_param *q = &kd->params[i];
    int ti = new_tensor(K, q->name, q->span, SH_KTENSOR_INPUT);
    if (ti < 0) return;
    K->t[ti].tx = q->tx;
    resolve_dims(K, ti, q->tx, true);
  }
  sh_sym out_name = 0;
  sh_span out_span = kd->span;
  if (!kd->named_results && kd->n_results == 1 && kd->n_stmts > 0) {
    out_name = kd->stmts[kd->n_stmts - 1].lhs;
    out_span = kd->results[0].tx ? kd->results[0].tx->span : kd->span;
  }
  int first_out = K->n_t;
  for (int i = 0; i < kd->n_results && !c->nomem; i++) {
    sh_ksyn_param *q = &kd->results[i];
    sh_sym name = kd->named_results ? q->name : out_name;
    if (!name || (!kd->named_results && (find_tensor(K, name) >= 0 || kfn_find(K, name) >= 0)))
      continue; /* reported at the statement */
    int ti = new_tensor(K, name, kd->named_results ? q->span : out_span, SH_KTENSOR_OUTPUT);
    if (ti < 0) return;
    K->t[ti].tx = q->tx;
    resolve_dims(K, ti, q->tx, false);
    if (q->tx && q->tx->i32) {
      kerr(K, q->tx->span, "kernel results are f32 tensors, not i32");
      K->t[ti].bad = true;
    }
  }
  for (int i = 0; i < K->n_t; i++) resolve_ragged(K, i, K->t[i].tx);
  /* names: after the types, so sizes are all known */
  for (int i = 0; i < K->n_t; i++) check_tensor_name(K, K->t[i].name, K->t[i].span, i);
  check_size_sources(K);
  /* statements */
  for (int i = 0; i < kd->n_stmts; i++) {
    sh_ksyn_stmt *s = &kd->stmts[i];
    if (s->lhs && (s->op == SH_KSYN_ASSIGN || s->init) && !K->defmap[s->lhs]) K->defmap[s->lhs] = i + 1;
  }
  K->stmts = c_alloc(c, (size_t)kd->n_stmts * sizeof *K->stmts + 1);
  if (!K->stmts) return;
  for (int i = 0; i < kd->n_stmts && !c->nomem && !sh_diags_full(c->d); i++) {
    check_stmt(K, i);
    for (int v = 0; v < K->n_v; v++) K->vmap[K->v[v].name] = 0;
  }
  K->n_v = 0;
  for (int i = first_out; i < K->n_t; i++)
    if (K->t[i].kind == SH_KTENSOR_OUTPUT && K->t[i].defined_by < 0 && !K->t[i].bad && !K->kernel_bad)
      kerr(K, K->t[i].span, "result '%s' of kernel '%s' is never written", nm(K, K->t[i].name),
           nm(K, kd->name));
  if (!K->kernel_bad && !c->nomem) kd->checked = build(K);
}

void c_check_kernels(checker *c) {
  sh_module *m = c->m;
  if (!m->n_kernels) return;
  kc K;
  memset(&K, 0, sizeof K);
  K.c = c;
  size_t n = c->n_syms + 1;
  K.tmap = c_alloc(c, n * sizeof *K.tmap);
  K.smap = c_alloc(c, n * sizeof *K.smap);
  K.vmap = c_alloc(c, n * sizeof *K.vmap);
  K.defmap = c_alloc(c, n * sizeof *K.defmap);
  m->kernels_checked = c_alloc(c, (size_t)m->n_kernels * sizeof *m->kernels_checked + 1);
  if (c->nomem) return;
  int ok = 0;
  for (int i = 0; i < m->n_kernels && !c->nomem && !sh_diags_full(c->d); i++) {
    sh_kernel_decl *kd = m->kernels[i];
    check_kernel(&K, kd);
    if (kd->checked) m->kernels_checked[ok++] = kd->checked;
    for (int t = 0; t < K.n_t; t++) K.tmap[K.t[t].name] = 0;
    for (int s = 0; s < K.n_sizes; s++) K.smap[c->sv->v[K.sizes[s].var].name] = 0;
    for (int s = 0; s < kd->n_stmts; s++) K.defmap[kd->stmts[s].lhs] = 0;
  }
}
