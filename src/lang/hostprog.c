/*
 * hostprog.c — compiles a checked module's functions to the host program's
 * register bytecode (hostprog.h): one pass over each body, mirroring the
 * walker's evaluation order (interp.c eval) node by node, so the VM
 * (hostvm.c) issues the same builders in the same order. Where the walker
 * checks the graph after a node (its built(): binary, unary, call, index,
 * slice), the node's last instruction carries chk (or a CHECK follows).
 */
#include "lang/hostprog.h"

#include <stdio.h>
#include <string.h>

#define HP_MAX_REGS 60000
#define HP_MAX_FAILS 64 /* refutable parts of one pattern */

typedef struct cc {
  sh_interp *ip;
  const sh_module *m;
  sh_hostprog *hp;
  sh_hp_fn *hf;
  sh_hp_ins *code;
  int n, cap;
  int top, max; /* temporaries in use; the most at once */
  int label;    /* the last pc a jump targets */
  bool fail;    /* out of memory, or too many registers: the walker runs the function */
} cc;

static void *grow(cc *c, void *p, int *cap, int need, size_t sz) {
  if (need <= *cap) return p;
  int nc = *cap ? *cap * 2 : 64;
  while (nc < need) nc *= 2;
  void *q = sh_realloc(c->m->ctx, p, (size_t)*cap * sz, (size_t)nc * sz);
  if (!q) {
    c->fail = true;
    return p;
  }
  *cap = nc;
  return q;
}

static int emit(cc *c, sh_hp_ins in) {
  c->code = grow(c, c->code, &c->cap, c->n + 1, sizeof *c->code);
  if (c->fail) return 0;
  c->code[c->n] = in;
  return c->n++;
}

static int tmp(cc *c) {
  int r = c->top++;
  if (c->top > c->max) c->max = c->top;
  if (c->top >= HP_MAX_REGS) c->fail = true, c->top = HP_MAX_REGS - 1;
  return r;
}

/* The jump at pc goes here. */
static void patch(cc *c, int pc) {
  if (c->fail) return;
  c->code[pc].imm = c->n;
  c->label = c->n;
}

static int op3(cc *c, sh_hp_op op, int dst, int a, int b, const sh_ast *e) {
  return emit(c, (sh_hp_ins){.op = (uint8_t)op, .dst = (uint16_t)dst, .a = (uint16_t)a, .b = (uint16_t)b, .e = e});
}

/* The walker checks the graph after e (a node its eval wraps in built()). */
static void wrap_end(cc *c, const sh_ast *e) {
  if (c->fail) return;
  if (c->n > 0 && c->code[c->n - 1].e == e && c->label != c->n) {
    c->code[c->n - 1].chk = 1;
    return;
  }
  emit(c, (sh_hp_ins){.op = HP_CHECK, .chk = 1, .e = e});
}

/* e, evaluated by the walker on the frame. */
static int walked(cc *c, const sh_ast *e, const char *why) {
  if (!c->hf->walked) c->hf->walked = e, c->hf->why = why;
  c->hf->n_walked++;
  int d = tmp(c);
  op3(c, HP_EVAL, d, 0, 0, e);
  return d;
}

/* ------------------------------------------------------------- sizes, constants */

/* The kind of e's value: the checker's type; an i32 for the parts of a
 * size expression it leaves untyped (zeros(2*H): the literal 2). */
static sh_type_kind tk(const sh_ast *e) { return e->type ? e->type->kind : SH_TY_I32; }

static bool size_static(const cc *c, const sh_size *s, int depth) {
  for (int i = 0; i < s->n; i++)
    for (int k = 0; k < s->t[i].deg; k++) {
      const sh_sizevar *v = &c->m->sizes.v[s->t[i].var[k]];
      if (v->kind == SH_SV_GLOBAL) continue;
      if (v->kind == SH_SV_FLEX && v->bound && depth < 16 && size_static(c, &v->binding, depth + 1)) continue;
      return false;
    }
  return true;
}

/* The value of a static size (0 when compiling for a report only: no
 * interpreter, nothing runs). */
static int64_t size_value(const cc *c, const sh_size *s) { return c->ip ? sh_interp_size(c->ip, s) : 0; }

/* An i32 or bool expression whose value is known now: literals, valued
 * sizes, and operators on them that do not fail. */
static bool const_int(const cc *c, const sh_ast *e, int64_t *v) {
  int64_t a, b;
  switch (e->kind) {
  case SH_EX_INT: case SH_EX_BOOL: *v = e->ival; return true;
  case SH_EX_NAME: {
    if (e->res != SH_RES_SIZE) return false;
    sh_size s;
    sh_size_var(&s, e->ref.size_var);
    if (!size_static(c, &s, 0)) return false;
    *v = (int32_t)size_value(c, &s);
    return true;
  }
  case SH_EX_UNARY:
    if (tk(e->a) != SH_TY_I32 && tk(e->a) != SH_TY_BOOL) return false;
    if (!const_int(c, e->a, &a)) return false;
    if (e->op == SH_TK_BANG) return *v = !a, true;
    if (-a < INT32_MIN || -a > INT32_MAX) return false;
    return *v = -a, true;
  case SH_EX_BINARY:
    if (tk(e->a) != SH_TY_I32 && tk(e->a) != SH_TY_BOOL) return false;
    if (e->op == SH_TK_ANDAND || e->op == SH_TK_OROR) return false;
    if (!const_int(c, e->a, &a) || !const_int(c, e->b, &b)) return false;
    switch (e->op) {
    case SH_TK_PLUS: *v = a + b; break;
    case SH_TK_MINUS: *v = a - b; break;
    case SH_TK_STAR: *v = a * b; break;
    case SH_TK_SLASH: if (!b) return false; *v = a / b; break;
    case SH_TK_PERCENT: if (!b) return false; *v = (int32_t)(a % b); break;
    case SH_TK_EQ: *v = a == b; break;
    case SH_TK_NE: *v = a != b; break;
    case SH_TK_LT: *v = a < b; break;
    case SH_TK_LE: *v = a <= b; break;
    case SH_TK_GT: *v = a > b; break;
    case SH_TK_GE: *v = a >= b; break;
    default: return false;
    }
    return *v >= INT32_MIN && *v <= INT32_MAX;
  default: return false;
  }
}

/* ------------------------------------------------------------- patterns */

typedef struct fails {
  int pc[HP_MAX_FAILS];
  int n;
} fails;

static void fail_jump(cc *c, fails *f, int pc) {
  if (f->n == HP_MAX_FAILS) c->fail = true;
  else f->pc[f->n++] = pc;
}

static bool irrefutable(const sh_pat *p) {
  if (p->kind == SH_PAT_WILD || p->kind == SH_PAT_VAR) return true;
  if (p->kind != SH_PAT_TUPLE) return false;
  for (int i = 0; i < p->n; i++)
    if (!irrefutable(p->items[i])) return false;
  return true;
}

/* Binds p to register r as pat_bind does (depth first, left to right);
 * a mismatch jumps to one of f (which may be NULL for an irrefutable p). */
static void pat(cc *c, const sh_pat *p, int r, fails *f) {
  switch (p->kind) {
  case SH_PAT_WILD: return;
  case SH_PAT_VAR:
    if (p->local->index != r) op3(c, HP_MOV, p->local->index, r, 0, NULL);
    return;
  case SH_PAT_INT: case SH_PAT_BOOL:
    fail_jump(c, f, emit(c, (sh_hp_ins){.op = HP_TINT, .a = (uint16_t)r, .k = p->ival}));
    return;
  case SH_PAT_CTOR:
    fail_jump(c, f, emit(c, (sh_hp_ins){.op = HP_TTAG, .a = (uint16_t)r, .n = (uint16_t)p->ctor->index}));
    /* fall through */
  case SH_PAT_TUPLE:
    for (int i = 0; i < p->n; i++) {
      const sh_pat *q = p->items[i];
      if (q->kind == SH_PAT_WILD) continue;
      if (q->kind == SH_PAT_VAR) {
        emit(c, (sh_hp_ins){.op = HP_FIELD, .dst = (uint16_t)q->local->index, .a = (uint16_t)r, .imm = i});
        continue;
      }
      int save = c->top, t = tmp(c);
      emit(c, (sh_hp_ins){.op = HP_FIELD, .dst = (uint16_t)t, .a = (uint16_t)r, .imm = i});
      pat(c, q, t, f);
      c->top = save;
    }
    return;
  default: c->fail = true; return;
  }
}

/* p bound to r, or the error msg. */
static void pat_or_fail(cc *c, const sh_pat *p, int r, const char *msg) {
  fails f = {.n = 0};
  pat(c, p, r, &f);
  if (!f.n) return;
  int over = emit(c, (sh_hp_ins){.op = HP_JMP});
  for (int i = 0; i < f.n; i++) patch(c, f.pc[i]);
  emit(c, (sh_hp_ins){.op = HP_FAIL, .p = msg});
  patch(c, over);
}

/* ------------------------------------------------------------- expressions */

static int cx(cc *c, const sh_ast *e);

/* Registers base .. base + n - 1 hold items[0..n) (evaluated in order). */
static int args(cc *c, sh_ast *const *items, int from, int n) {
  int base = c->top;
  for (int i = 0; i < n; i++) tmp(c);
  for (int i = from; i < n; i++) {
    int save = c->top, r = cx(c, items[i]);
    if (r != base + i) op3(c, HP_MOV, base + i, r, 0, NULL);
    c->top = save;
  }
  return base;
}

/* interp.c tensor_sum, decided now: -1 not a sum (the caller adds two
 * operands), -2 a sum whose form depends on sizes known only at run time
 * (the walker evaluates it), else the result's register. */
static int tensor_sum(cc *c, const sh_ast *e) {
  const sh_ast *t[SH_INTERP_SUM_MAX];
  int n = sh_interp_sum_terms(e, t, 0, SH_INTERP_SUM_MAX), n_mm = 0, bias = -1;
  if (n < 2) return -1;
  bool uniform = true;
  uint8_t cls[SH_INTERP_SUM_MAX];
  for (int i = 0; i < n; i++) {
    cls[i] = 0;
    if (!sh_interp_same_type(t[i]->type, e->type)) uniform = false;
    if (t[i]->kind == SH_EX_BINARY && t[i]->op == SH_TK_AT && t[i]->param_rhs && tk(t[i]) == SH_TY_TENSOR &&
        n_mm < 4)
      cls[i] = 1, n_mm++;
    else if (t[i]->kind == SH_EX_NAME && t[i]->res == SH_RES_PARAM && t[i]->ref.param->type->n == 1 && bias < 0)
      bias = i;
  }
  if (!uniform) {
    if (n_mm != n - (bias >= 0)) return -1;
    if (bias >= 0) {
      const sh_type *mt = e->type, *bt = t[bias]->ref.param->type;
      if (!size_static(c, &bt->dims[0], 0) || !size_static(c, &mt->dims[mt->n - 1], 0)) return -2;
      if (c->ip && size_value(c, &bt->dims[0]) != size_value(c, &mt->dims[mt->n - 1])) return -1;
    }
  }
  if (n_mm == 0 && n == 2) return -1;
  if (n_mm > 0 && bias >= 0) cls[bias] = 2;
  sh_hp_sum s = {.at = -1, .n_mm = n_mm, .bias = n_mm && bias >= 0 ? t[bias]->ref.param->index : -1};
  int save = c->top, k = 0;
  for (int i = 0; i < n; i++) {
    if (cls[i] == 2) continue;
    int r = cx(c, cls[i] == 1 ? t[i]->a : t[i]);
    if (r >= c->top) c->top = r + 1; /* keep it */
    if (cls[i] == 1) {
      s.xs[k] = (uint16_t)r;
      s.w[k++] = t[i]->b->ref.param->index;
      if (s.at < 0) s.at = s.np++;
    } else {
      s.pieces[s.np++] = (uint16_t)r;
    }
  }
  c->hp->sums = grow(c, c->hp->sums, &c->hp->cap_sums, c->hp->n_sums + 1, sizeof *c->hp->sums);
  if (c->fail) return 0;
  c->hp->sums[c->hp->n_sums] = s;
  c->top = save;
  int d = tmp(c);
  emit(c, (sh_hp_ins){.op = HP_SUM, .dst = (uint16_t)d, .imm = c->hp->n_sums++, .e = e});
  return d;
}

static int binary(cc *c, const sh_ast *e) {
  int op = e->op, save = c->top;
  if (op == SH_TK_ANDAND || op == SH_TK_OROR) {
    int d = tmp(c), r = cx(c, e->a);
    if (r != d) op3(c, HP_MOV, d, r, 0, NULL);
    c->top = d + 1;
    int j = emit(c, (sh_hp_ins){.op = op == SH_TK_ANDAND ? HP_JZ : HP_JNZ, .a = (uint16_t)d});
    r = cx(c, e->b);
    if (r != d) op3(c, HP_MOV, d, r, 0, NULL);
    c->top = d + 1;
    patch(c, j);
    return d;
  }
  if (op == SH_TK_PLUS && tk(e) == SH_TY_TENSOR) {
    int r = tensor_sum(c, e);
    if (r == -2) return walked(c, e, "a sum sized at run time");
    if (r >= 0) return r;
  }
  if (op == SH_TK_AT && e->param_rhs) {
    int x = cx(c, e->a);
    c->top = save;
    int d = tmp(c);
    emit(c, (sh_hp_ins){.op = HP_AFFINE, .dst = (uint16_t)d, .a = (uint16_t)x, .imm = e->b->ref.param->index,
                        .k = -1, .e = e});
    return d;
  }
  int kind = tk(e->a);
  int64_t v;
  if ((kind == SH_TY_I32 || kind == SH_TY_BOOL) && const_int(c, e, &v)) {
    int d = tmp(c);
    emit(c, (sh_hp_ins){.op = tk(e) == SH_TY_BOOL ? HP_KBOOL : HP_KINT, .dst = (uint16_t)d, .imm = (int32_t)v});
    return d;
  }
  int x = cx(c, e->a);
  if (x >= c->top) c->top = x + 1;
  int y = cx(c, e->b);
  c->top = save;
  int d = tmp(c);
  if (kind == SH_TY_TENSOR) {
    sh_builder2 f = NULL;
    bool swap = false;
    switch (op) {
    case SH_TK_PLUS: f = sheaf_add; break;
    case SH_TK_MINUS: f = sheaf_sub; break;
    case SH_TK_STAR: f = sheaf_mul; break;
    case SH_TK_SLASH: f = sheaf_div; break;
    case SH_TK_AT: f = sheaf_matmul; break;
    case SH_TK_GT: f = sheaf_gt; break;
    case SH_TK_GE: f = sheaf_ge; break;
    case SH_TK_LT: f = sheaf_gt, swap = true; break;
    case SH_TK_LE: f = sheaf_ge, swap = true; break;
    case SH_TK_EQ: f = sheaf_eq; break;
    case SH_TK_NE: f = sheaf_ne; break;
    default: c->top = save; return walked(c, e, "a tensor operator");
    }
    emit(c, (sh_hp_ins){.op = HP_TBIN, .dst = (uint16_t)d, .a = (uint16_t)(swap ? y : x),
                        .b = (uint16_t)(swap ? x : y), .f2 = f, .e = e});
    return d;
  }
  emit(c, (sh_hp_ins){.op = kind == SH_TY_F32 ? HP_FBIN : HP_IBIN, .dst = (uint16_t)d, .a = (uint16_t)x,
                      .b = (uint16_t)y, .imm = op, .e = e});
  return d;
}

static int unary(cc *c, const sh_ast *e) {
  int save = c->top;
  int64_t v;
  if ((tk(e) == SH_TY_I32 || tk(e) == SH_TY_BOOL) && const_int(c, e, &v)) {
    int d = tmp(c);
    emit(c, (sh_hp_ins){.op = tk(e) == SH_TY_BOOL ? HP_KBOOL : HP_KINT, .dst = (uint16_t)d, .imm = (int32_t)v});
    return d;
  }
  int x = cx(c, e->a);
  c->top = save;
  int d = tmp(c);
  sh_hp_op op = e->op == SH_TK_BANG ? HP_NOT
                : tk(e->a) == SH_TY_TENSOR ? HP_TNEG
                : tk(e->a) == SH_TY_F32    ? HP_FNEG
                                                    : HP_INEG;
  op3(c, op, d, x, 0, e);
  return d;
}

static int builtin(cc *c, const sh_ast *e) {
  int save = c->top, d;
  sh_builtin b = e->builtin;
  sh_builder1 f1 = sh_interp_builder1(b);
  if (f1 && tk(e->items[0]) == SH_TY_TENSOR) {
    int x = cx(c, e->items[0]);
    c->top = save;
    d = tmp(c);
    emit(c, (sh_hp_ins){.op = HP_T1, .dst = (uint16_t)d, .a = (uint16_t)x, .f1 = f1, .e = e});
    return d;
  }
  if (b == SH_BI_LSTM_CELL || b == SH_BI_TREE_LSTM_CELL) {
    if (e->items[0]->res != SH_RES_PARAM || e->items[1]->res != SH_RES_PARAM) return walked(c, e, "a cell's weights");
    int base = args(c, e->items + 2, 0, e->n - 2);
    c->top = save;
    d = tmp(c);
    op3(c, b == SH_BI_LSTM_CELL ? HP_LSTM : HP_TLSTM, d, base, 0, e);
    return d;
  }
  bool to_host = b == SH_BI_ARGMAX || b == SH_BI_ITEM || b == SH_BI_VALUES;
  if (b == SH_BI_SET || b == SH_BI_POP || b == SH_BI_TOPK || (b == SH_BI_CAT && tk(e) == SH_TY_LIST) ||
      b == SH_BI_PUSH || to_host) {
    int n = to_host ? 1 : b == SH_BI_PUSH ? 2 : e->n;
    if (n > 64) return walked(c, e, sh_builtin_name(b));
    int base = args(c, e->items, 0, n);
    c->top = save;
    d = tmp(c);
    emit(c, (sh_hp_ins){.op = HP_BL, .dst = (uint16_t)d, .a = (uint16_t)base, .n = (uint16_t)n, .e = e});
    return d;
  }
  if (b == SH_BI_CAT) {
    if (e->n > 65535) return walked(c, e, "cat");
    int base = args(c, e->items, 0, e->n);
    c->top = save;
    d = tmp(c);
    emit(c, (sh_hp_ins){.op = HP_CAT, .dst = (uint16_t)d, .a = (uint16_t)base, .n = (uint16_t)e->n, .e = e});
    return d;
  }
  bool applies = b == SH_BI_MAP || b == SH_BI_FOLD || b == SH_BI_SCAN;
  int n = e->n < 4 ? e->n : 4;
  int base = args(c, e->items, applies ? 1 : 0, n);
  for (int i = n; i < 4; i++) tmp(c);
  c->top = save;
  d = tmp(c);
  emit(c, (sh_hp_ins){.op = HP_BI, .dst = (uint16_t)d, .a = (uint16_t)base, .n = (uint16_t)n,
                      .c = applies, .e = e});
  return d;
}

static int call(cc *c, const sh_ast *e) {
  int save = c->top, d, base;
  switch (e->call) {
  case SH_CALL_BUILTIN: return builtin(c, e);
  case SH_CALL_FN:
    base = args(c, e->items, 0, e->n);
    c->top = save;
    d = tmp(c);
    if (c->ip && c->ip->region_of && c->ip->region_of[e->ref.fn->index]) { /* one kernel call */
      emit(c, (sh_hp_ins){.op = HP_REGION, .dst = (uint16_t)d, .a = (uint16_t)base, .n = (uint16_t)e->n,
                          .p = c->ip->region_of[e->ref.fn->index], .e = e});
      return d;
    }
    emit(c, (sh_hp_ins){.op = HP_CALL, .dst = (uint16_t)d, .a = (uint16_t)base, .n = (uint16_t)e->n,
                        .p = e->ref.fn, .e = e});
    return d;
  case SH_CALL_CTOR:
    base = args(c, e->items, 0, e->n);
    c->top = save;
    d = tmp(c);
    emit(c, (sh_hp_ins){.op = HP_AGG, .dst = (uint16_t)d, .a = (uint16_t)base, .n = (uint16_t)e->n,
                        .c = SH_V_ADT, .imm = e->ref.ctor->index, .e = e});
    return d;
  case SH_CALL_KERNEL:
    if (e->n > 64) return walked(c, e, "a kernel call of over 64 arguments");
    base = args(c, e->items, 0, e->n);
    c->top = save;
    d = tmp(c);
    emit(c, (sh_hp_ins){.op = HP_KCALL, .dst = (uint16_t)d, .a = (uint16_t)base, .n = (uint16_t)e->n,
                        .imm = e->ref.kernel->index, .e = e});
    return d;
  default: return walked(c, e, "a call");
  }
}

static int name(cc *c, const sh_ast *e) {
  int d;
  int64_t v;
  switch (e->res) {
  case SH_RES_LOCAL: return e->ref.local->index;
  case SH_RES_PARAM:
    d = tmp(c);
    emit(c, (sh_hp_ins){.op = HP_PARAM, .dst = (uint16_t)d, .imm = e->ref.param->index, .e = e});
    return d;
  case SH_RES_SIZE:
    if (!const_int(c, e, &v)) return walked(c, e, "a size bound at run time");
    d = tmp(c);
    emit(c, (sh_hp_ins){.op = HP_KINT, .dst = (uint16_t)d, .imm = (int32_t)v});
    return d;
  case SH_RES_CTOR:
    d = tmp(c);
    emit(c, (sh_hp_ins){.op = HP_CTOR0, .dst = (uint16_t)d, .imm = e->ref.ctor->index, .e = e});
    return d;
  default: return walked(c, e, "a name");
  }
}

static int index_(cc *c, const sh_ast *e) {
  int save = c->top;
  int i = cx(c, e->b);
  if (i >= c->top) c->top = i + 1;
  int d;
  if (e->lookup) {
    c->top = save;
    d = tmp(c);
    emit(c, (sh_hp_ins){.op = HP_LOOKUP, .dst = (uint16_t)d, .a = (uint16_t)i, .imm = e->a->ref.param->index, .e = e});
    return d;
  }
  int x = cx(c, e->a);
  c->top = save;
  d = tmp(c);
  op3(c, HP_INDEX, d, x, i, e);
  return d;
}

static int slice(cc *c, const sh_ast *e) {
  int save = c->top, x = cx(c, e->a);
  c->top = save;
  int d = tmp(c);
  if (size_static(c, e->lo, 0) && size_static(c, e->hi, 0)) {
    int64_t lo = size_value(c, e->lo), hi = size_value(c, e->hi);
    if (hi >= INT32_MIN && hi <= INT32_MAX) {
      emit(c, (sh_hp_ins){.op = HP_SLICE, .dst = (uint16_t)d, .a = (uint16_t)x, .k = lo, .imm = (int32_t)hi, .e = e});
      return d;
    }
  }
  op3(c, HP_SLICEX, d, x, 0, e);
  return d;
}

static int block(cc *c, const sh_ast *e) {
  int save = c->top;
  for (int i = 0; i < e->n; i++) {
    int r = cx(c, e->lets[i].value);
    if (r >= c->top) c->top = r + 1;
    pat_or_fail(c, e->lets[i].pat, r, "let: pattern did not match");
    c->top = save;
  }
  return cx(c, e->a);
}

static int if_(cc *c, const sh_ast *e) {
  int save = c->top, r = cx(c, e->a);
  c->top = save;
  int d = tmp(c);
  int jz = op3(c, HP_JZ, 0, r, 0, NULL);
  r = cx(c, e->b);
  if (r != d) op3(c, HP_MOV, d, r, 0, NULL);
  c->top = d + 1;
  int jmp = emit(c, (sh_hp_ins){.op = HP_JMP});
  patch(c, jz);
  r = cx(c, e->c);
  if (r != d) op3(c, HP_MOV, d, r, 0, NULL);
  c->top = d + 1;
  patch(c, jmp);
  return d;
}

/* An arm's body into d, then a jump to the end (appended to ends). */
static void arm_body(cc *c, const sh_ast *body, int d, fails *ends) {
  int r = cx(c, body);
  if (r != d) op3(c, HP_MOV, d, r, 0, NULL);
  c->top = d + 1;
  fail_jump(c, ends, emit(c, (sh_hp_ins){.op = HP_JMP}));
}

/* A match on an ADT whose arms are constructors with irrefutable fields or
 * catch-alls: one jump through a table by the tag. */
static bool tag_dispatch(const sh_ast *e) {
  if (tk(e->a) != SH_TY_ADT) return false;
  for (int i = 0; i < e->n; i++) {
    const sh_pat *p = e->arms[i].pat;
    if (irrefutable(p)) continue;
    if (p->kind != SH_PAT_CTOR) return false;
    for (int k = 0; k < p->n; k++)
      if (!irrefutable(p->items[k])) return false;
  }
  return true;
}

static int match(cc *c, const sh_ast *e) {
  int s = cx(c, e->a);
  if (s >= c->top) c->top = s + 1;
  int d = tmp(c);
  fails ends = {.n = 0};
  if (tag_dispatch(e)) {
    const sh_adt *adt = e->a->type->adt;
    int nt = adt->n_ctors, t0 = c->hp->n_tables;
    c->hp->tables = grow(c, c->hp->tables, &c->hp->cap_tables, t0 + nt, sizeof *c->hp->tables);
    if (c->fail) return d;
    c->hp->n_tables = t0 + nt;
    for (int k = 0; k < nt; k++) c->hp->tables[t0 + k] = -1;
    emit(c, (sh_hp_ins){.op = HP_TAGSW, .a = (uint16_t)s, .imm = t0, .e = e});
    for (int i = 0; i < e->n; i++) {
      const sh_pat *p = e->arms[i].pat;
      c->label = c->n;
      bool any = false;
      for (int k = 0; k < nt; k++)
        if (c->hp->tables[t0 + k] < 0 && (p->kind != SH_PAT_CTOR || p->ctor->index == k))
          c->hp->tables[t0 + k] = c->n, any = true;
      if (!any) continue; /* never reached */
      if (p->kind == SH_PAT_CTOR) {
        sh_pat q = *p;
        q.kind = SH_PAT_TUPLE; /* the tag is known */
        pat(c, &q, s, NULL);
      } else {
        pat(c, p, s, NULL);
      }
      arm_body(c, e->arms[i].body, d, &ends);
    }
    c->label = c->n;
    for (int k = 0; k < nt; k++)
      if (c->hp->tables[t0 + k] < 0) c->hp->tables[t0 + k] = c->n;
  } else {
    for (int i = 0; i < e->n; i++) {
      fails f = {.n = 0};
      pat(c, e->arms[i].pat, s, &f);
      arm_body(c, e->arms[i].body, d, &ends);
      for (int k = 0; k < f.n; k++) patch(c, f.pc[k]);
    }
  }
  emit(c, (sh_hp_ins){.op = HP_FAIL, .p = "match: no arm matched"});
  for (int k = 0; k < ends.n; k++) patch(c, ends.pc[k]);
  c->top = d + 1;
  return d;
}

/* for PAT in XS { BODY } / for PAT in LO..HI { BODY }: registers base
 * (the result), base+1 (the count so far), base+2 (lo), base+3 (n). */
static int for_(cc *c, const sh_ast *e) {
  int xs = cx(c, e->a);
  if (xs >= c->top) c->top = xs + 1;
  int hi = 0xFFFF;
  if (e->b) {
    hi = cx(c, e->b);
    if (hi >= c->top) c->top = hi + 1;
  }
  int base = tmp(c);
  tmp(c), tmp(c), tmp(c);
  int v = tmp(c);
  emit(c, (sh_hp_ins){.op = HP_FOR, .dst = (uint16_t)base, .a = (uint16_t)xs, .b = (uint16_t)hi, .e = e});
  int loop = c->n;
  c->label = loop;
  int next = emit(c, (sh_hp_ins){.op = HP_FORNEXT, .dst = (uint16_t)v, .a = (uint16_t)base, .b = (uint16_t)xs,
                                 .c = e->b != NULL});
  pat_or_fail(c, e->pat, v, "for: pattern did not match");
  int r = cx(c, e->c);
  emit(c, (sh_hp_ins){.op = HP_FORSTORE, .a = (uint16_t)base, .b = (uint16_t)r, .imm = loop});
  patch(c, next);
  c->top = base + 1;
  return base;
}

/* while STATE = INIT; COND max N { BODY }: N, INIT, then HP_WHILE, which
 * runs the loop with the code after it: the state (register c) bound and
 * the condition (from k), the body (from imm), each ending in YIELD. */
static int while_(cc *c, const sh_ast *e) {
  int n = cx(c, e->b);
  if (n >= c->top) c->top = n + 1;
  int st = cx(c, e->lets[0].value);
  if (st >= c->top) c->top = st + 1;
  int d = tmp(c), s = tmp(c);
  int w = emit(c, (sh_hp_ins){.op = HP_WHILE, .dst = (uint16_t)d, .a = (uint16_t)n, .b = (uint16_t)st,
                              .c = (uint16_t)s, .e = e});
  int over = emit(c, (sh_hp_ins){.op = HP_JMP});
  if (c->fail) return d;
  c->code[w].k = c->n;
  c->label = c->n;
  pat_or_fail(c, e->lets[0].pat, s, "while: pattern did not match");
  int r = cx(c, e->a);
  op3(c, HP_YIELD, 0, r, 0, NULL);
  c->top = s + 1;
  if (c->fail) return d;
  c->code[w].imm = c->n;
  c->label = c->n;
  r = cx(c, e->c);
  op3(c, HP_YIELD, 0, r, 0, NULL);
  patch(c, over);
  c->top = d + 1;
  return d;
}

static int phase(cc *c, const sh_ast *e) {
  int s = tmp(c);
  emit(c, (sh_hp_ins){.op = HP_PHASE, .dst = (uint16_t)s, .imm = (int32_t)e->ival, .e = e});
  int r = cx(c, e->a);
  if (r >= c->top) c->top = r + 1;
  op3(c, HP_PHASE_END, 0, s, 0, e);
  return r;
}

static int cx(cc *c, const sh_ast *e) {
  if (c->fail) return 0;
  int d, r;
  switch (e->kind) {
  case SH_EX_NAME: return name(c, e);
  case SH_EX_BINARY: r = binary(c, e); break;
  case SH_EX_CALL: r = call(c, e); break;
  case SH_EX_SLICE: r = slice(c, e); break;
  case SH_EX_INDEX: r = index_(c, e); break;
  case SH_EX_UNARY: r = unary(c, e); break;
  case SH_EX_BLOCK: return block(c, e);
  case SH_EX_MATCH: return match(c, e);
  case SH_EX_IF: return if_(c, e);
  case SH_EX_INT: case SH_EX_BOOL:
    d = tmp(c);
    emit(c, (sh_hp_ins){.op = e->kind == SH_EX_INT ? HP_KINT : HP_KBOOL, .dst = (uint16_t)d,
                        .imm = e->kind == SH_EX_INT ? (int32_t)e->ival : e->ival != 0});
    return d;
  case SH_EX_FLOAT:
    d = tmp(c);
    op3(c, tk(e) == SH_TY_F32 ? HP_KF32 : HP_KTEN, d, 0, 0, e);
    return d;
  case SH_EX_TUPLE: case SH_EX_LIST: {
    int save = c->top, base = args(c, e->items, 0, e->n);
    c->top = save;
    d = tmp(c);
    emit(c, (sh_hp_ins){.op = HP_AGG, .dst = (uint16_t)d, .a = (uint16_t)base, .n = (uint16_t)e->n,
                        .c = e->kind == SH_EX_TUPLE ? SH_V_TUPLE : SH_V_LIST, .imm = -1, .e = e});
    return d;
  }
  case SH_EX_FOR: return for_(c, e);
  case SH_EX_PHASE: return phase(c, e);
  case SH_EX_WHILE: return while_(c, e);
  default: return walked(c, e, "an expression");
  }
  if (r >= c->top) c->top = r + 1;
  wrap_end(c, e);
  return r;
}

/* ------------------------------------------------------------- functions */

static void compile_fn(cc *c, const sh_fn *f) {
  sh_hp_fn *hf = &c->hp->fns[f->index];
  memset(hf, 0, sizeof *hf);
  hf->n_regs = f->n_locals;
  c->hf = hf;
  c->code = NULL;
  c->n = c->cap = 0;
  c->top = c->max = f->n_locals;
  c->label = -1;
  c->fail = f->n_locals >= HP_MAX_REGS;
  /* tuples, lists and constructors of more than 65535 items and calls of as many
   * arguments do not fit an instruction's count: the walker runs them */
  int r = cx(c, f->body);
  emit(c, (sh_hp_ins){.op = HP_RET, .a = (uint16_t)r});
  if (c->fail) {
    sh_free(c->m->ctx, c->code, (size_t)c->cap * sizeof *c->code);
    hf->walked = f->body;
    hf->why = "too large to compile";
    hf->n_walked = 1;
    return;
  }
  hf->code = c->code;
  hf->n_code = c->cap; /* the allocation, for sh_hostprog_free */
  hf->n_regs = c->max;
}

sheaf_status sh_hostprog_compile(sh_interp *ip, sh_hostprog **out) { return sh_hostprog_compile_m(ip->m, ip, out); }

sheaf_status sh_hostprog_compile_m(const sh_module *m, sh_interp *ip, sh_hostprog **out) {
  *out = NULL;
  sh_hostprog *hp = sh_alloc(m->ctx, sizeof *hp, 16);
  if (!hp) return SHEAF_ERR_NOMEM;
  memset(hp, 0, sizeof *hp);
  hp->ctx = m->ctx;
  hp->n_fns = m->n_fns;
  hp->fns = sh_alloc(m->ctx, (size_t)(m->n_fns ? m->n_fns : 1) * sizeof *hp->fns, 16);
  if (!hp->fns) {
    sh_free(m->ctx, hp, sizeof *hp);
    return SHEAF_ERR_NOMEM;
  }
  memset(hp->fns, 0, (size_t)(m->n_fns ? m->n_fns : 1) * sizeof *hp->fns);
  cc c = {.ip = ip, .m = m, .hp = hp};
  for (int i = 0; i < m->n_fns; i++) {
    int nt = hp->n_tables, ns = hp->n_sums;
    compile_fn(&c, m->fns[i]);
    if (!hp->fns[i].code && c.fail) {
      hp->n_tables = nt; /* what it added is unused */
      hp->n_sums = ns;
    }
  }
  *out = hp;
  return SHEAF_OK;
}

void sh_hostprog_free(sh_hostprog *hp) {
  if (!hp) return;
  for (int i = 0; i < hp->n_fns; i++)
    if (hp->fns[i].code) sh_free(hp->ctx, hp->fns[i].code, (size_t)hp->fns[i].n_code * sizeof(sh_hp_ins));
  sh_free(hp->ctx, hp->fns, (size_t)(hp->n_fns ? hp->n_fns : 1) * sizeof *hp->fns);
  sh_free(hp->ctx, hp->sums, (size_t)hp->cap_sums * sizeof *hp->sums);
  sh_free(hp->ctx, hp->tables, (size_t)hp->cap_tables * sizeof *hp->tables);
  sh_free(hp->ctx, hp, sizeof *hp);
}

sheaf_status sh_hostprog_describe_module(const sh_module *m, char *buf, size_t cap) {
  sh_hostprog *hp;
  sheaf_status st = sh_hostprog_compile_m(m, NULL, &hp);
  if (st) return st;
  sh_hostprog_describe(hp, m, buf, cap);
  sh_hostprog_free(hp);
  return SHEAF_OK;
}

void sh_hostprog_describe(const sh_hostprog *hp, const sh_module *m, char *buf, size_t cap) {
  int compiled = 0, parts = 0;
  const sh_hp_fn *first = NULL, *whole = NULL; /* the first with walked parts; the first not compiled */
  for (int i = 0; i < hp->n_fns; i++) {
    compiled += hp->fns[i].code != NULL;
    if (!hp->fns[i].code && !whole) whole = &hp->fns[i];
    if (hp->fns[i].code && hp->fns[i].walked) {
      parts++;
      if (!first) first = &hp->fns[i];
    }
  }
  int w = snprintf(buf, cap, "host program: %d function%s compiled", compiled, compiled == 1 ? "" : "s");
  if (whole && w >= 0 && (size_t)w < cap)
    w += snprintf(buf + w, cap - (size_t)w, ", %d interpreted (%s at %s:%u:%u)", hp->n_fns - compiled, whole->why,
                  m->diags.file, (unsigned)whole->walked->span.line, (unsigned)whole->walked->span.col);
  if (parts && w >= 0 && (size_t)w < cap)
    snprintf(buf + w, cap - (size_t)w, ", %d with parts interpreted (%s at %s:%u:%u%s)", parts, first->why,
             m->diags.file, (unsigned)first->walked->span.line, (unsigned)first->walked->span.col,
             first->n_walked > 1 || parts > 1 ? ", ..." : "");
}
