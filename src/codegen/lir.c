/*
 * lir.c — the loop IR: pools, builders (with constant folding), tree
 * surgery, substitution and cloning, and the verifier. The printer is in
 * lir_print.c, integer analysis in lir_simplify.c, the interpreter in
 * lir_eval.c.
 */
#include "codegen/lir_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------ kernel */

bool sh_lir_grow(sh_lir_kernel *k, void **p, int32_t *cap, size_t size, int32_t need) {
  if (need <= *cap) return true;
  if (k->err) return false;
  int64_t nc = *cap ? (int64_t)*cap * 2 : 64;
  while (nc < need) nc *= 2;
  if (nc > INT32_MAX / 2) {
    sh_lir_fail(k, SHEAF_ERR_NOMEM, "kernel %s: too many IR nodes", k->name);
    return false;
  }
  void *q = sh_realloc(k->ctx, *p, (size_t)*cap * size, (size_t)nc * size);
  if (!q) {
    k->err = SHEAF_ERR_NOMEM;
    return false;
  }
  *p = q;
  *cap = (int32_t)nc;
  return true;
}

sheaf_status sh_lir_fail(sh_lir_kernel *k, sheaf_status s, const char *fmt, ...) {
  if (k->err) return k->err;
  va_list ap;
  va_start(ap, fmt);
  sh_failv(k->ctx, s, fmt, ap);
  va_end(ap);
  k->err = s;
  return s;
}

static bool is_ident(const char *s) {
  if (!s || !*s || !((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_'))
    return false;
  for (const char *p = s; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          *p == '_'))
      return false;
  return strlen(s) <= 64;
}

sheaf_status sh_lir_create(sheaf_ctx *ctx, const char *name, sh_lir_kernel **out) {
  *out = NULL;
  if (!is_ident(name))
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                   "kernel name \"%s\": expected a C identifier of at most 64 characters",
                   name ? name : "(null)");
  sh_lir_kernel *k = sh_calloc(ctx, 1, sizeof *k);
  if (!k) return SHEAF_ERR_NOMEM;
  k->ctx = ctx;
  sh_arena_init(&k->arena, ctx, 4096);
  k->name = sh_arena_strndup(&k->arena, name, strlen(name));
  if (!k->name) {
    sh_lir_free(k);
    return SHEAF_ERR_NOMEM;
  }
  k->root = sh_lir_new_stmt(k, SH_LIR_S_BLOCK);
  if (k->err) {
    sh_lir_free(k);
    return SHEAF_ERR_NOMEM;
  }
  *out = k;
  return SHEAF_OK;
}

void sh_lir_free(sh_lir_kernel *k) {
  if (!k) return;
  sheaf_ctx *ctx = k->ctx;
  sh_free(ctx, k->ex, (size_t)k->cap_ex * sizeof *k->ex);
  sh_free(ctx, k->list, (size_t)k->cap_list * sizeof *k->list);
  sh_free(ctx, k->st, (size_t)k->cap_st * sizeof *k->st);
  sh_free(ctx, k->bufs, (size_t)k->cap_bufs * sizeof *k->bufs);
  sh_free(ctx, k->vars, (size_t)k->cap_vars * sizeof *k->vars);
  sh_free(ctx, k->syms, (size_t)k->cap_syms * sizeof *k->syms);
  sh_free(ctx, k->checks, (size_t)k->cap_checks * sizeof *k->checks);
  sh_arena_destroy(&k->arena);
  sh_free(ctx, k, sizeof *k);
}

sheaf_status sh_lir_status(const sh_lir_kernel *k) { return k->err; }

static const char *name_dup(sh_lir_kernel *k, const char *s) {
  char *d = sh_arena_strndup(&k->arena, s, strlen(s));
  if (!d) k->err = SHEAF_ERR_NOMEM;
  return d;
}

sheaf_status sh_lir_index_check(sh_lir_kernel *k, sh_lir_buf b, sh_lir_expr ext, const char *target,
                                int dim) {
  if (k->err) return k->err;
  if (b < 0 || b >= k->n_bufs || k->bufs[b].dtype != SH_LIR_I32 || k->bufs[b].role != SH_LIR_IN ||
      k->bufs[b].layout != SH_LIR_LAYOUT_DENSE || ext < 0 || ext >= k->n_ex)
    return sh_lir_fail(k, SHEAF_ERR_INVALID_ARG,
                       "kernel %s: an index check needs a dense i32 input buffer and an extent", k->name);
  for (int32_t i = 0; i < k->n_checks; i++) {
    const sh_lir_check *c = &k->checks[i];
    if (c->buf == b && c->dim == dim && !strcmp(c->target, target) && sh_lir_expr_eq(k, c->ext, ext))
      return SHEAF_OK;
  }
  if (k->n_checks == k->cap_checks) {
    int32_t nc = k->cap_checks ? 2 * k->cap_checks : 4;
    sh_lir_check *v = sh_realloc(k->ctx, k->checks, (size_t)k->cap_checks * sizeof *v, (size_t)nc * sizeof *v);
    if (!v) return sh_lir_fail(k, SHEAF_ERR_NOMEM, "kernel %s: out of memory", k->name);
    k->checks = v;
    k->cap_checks = nc;
  }
  const char *t = name_dup(k, target);
  if (!t) return k->err;
  k->checks[k->n_checks++] = (sh_lir_check){b, ext, t, dim};
  return SHEAF_OK;
}

sh_lir_sym sh_lir_size(sh_lir_kernel *k, const char *name) {
  if (k->err) return SH_LIR_NONE;
  if (!is_ident(name)) {
    sh_lir_fail(k, SHEAF_ERR_INVALID_ARG, "kernel %s: size name \"%s\" is not an identifier",
                k->name, name ? name : "(null)");
    return SH_LIR_NONE;
  }
  for (int32_t i = 0; i < k->n_syms; i++)
    if (strcmp(k->syms[i], name) == 0) return i;
  if (!sh_lir_grow(k, (void **)&k->syms, &k->cap_syms, sizeof *k->syms, k->n_syms + 1))
    return SH_LIR_NONE;
  const char *d = name_dup(k, name);
  if (!d) return SH_LIR_NONE;
  k->syms[k->n_syms] = d;
  return k->n_syms++;
}

/* ------------------------------------------------------------ buffers */

static bool buf_ok(sh_lir_kernel *k, sh_lir_buf b, const char *what) {
  if (k->err) return false;
  if (b < 0 || b >= k->n_bufs) {
    sh_lir_fail(k, SHEAF_ERR_INVALID_ARG, "kernel %s: %s: no buffer %d", k->name, what, (int)b);
    return false;
  }
  return true;
}

static bool ex_ok(sh_lir_kernel *k, sh_lir_expr e) { return !k->err && e >= 0 && e < k->n_ex; }

sh_lir_buf sh_lir_buffer(sh_lir_kernel *k, const char *name, sh_lir_dtype dtype, sh_lir_role role,
                         int rank, const sh_lir_expr *dims) {
  if (k->err) return SH_LIR_NONE;
  if (!is_ident(name)) {
    sh_lir_fail(k, SHEAF_ERR_INVALID_ARG, "kernel %s: buffer name \"%s\" is not an identifier",
                k->name, name ? name : "(null)");
    return SH_LIR_NONE;
  }
  for (int32_t i = 0; i < k->n_bufs; i++)
    if (strcmp(k->bufs[i].name, name) == 0) {
      sh_lir_fail(k, SHEAF_ERR_INVALID_ARG, "kernel %s: buffer %s declared twice", k->name, name);
      return SH_LIR_NONE;
    }
  if (rank < 1 || rank > SH_LIR_MAX_RANK || (unsigned)dtype > SH_LIR_I32 ||
      (unsigned)role > SH_LIR_LOCAL) {
    sh_lir_fail(k, SHEAF_ERR_INVALID_ARG,
                "kernel %s: buffer %s: rank %d (1..%d), dtype %d or role %d out of range", k->name,
                name, rank, SH_LIR_MAX_RANK, (int)dtype, (int)role);
    return SH_LIR_NONE;
  }
  for (int d = 0; d < rank; d++) {
    int64_t c;
    if (!ex_ok(k, dims[d]) || k->ex[dims[d]].dtype != SH_LIR_I32 ||
        (role == SH_LIR_LOCAL && (!sh_lir_is_const(k, dims[d], &c) || c < 1))) {
      sh_lir_fail(k, SHEAF_ERR_INVALID_ARG,
                  "kernel %s: buffer %s: dimension %d is not an integer expression%s", k->name,
                  name, d, role == SH_LIR_LOCAL ? " (a positive constant for a local)" : "");
      return SH_LIR_NONE;
    }
  }
  if (!sh_lir_grow(k, (void **)&k->bufs, &k->cap_bufs, sizeof *k->bufs, k->n_bufs + 1))
    return SH_LIR_NONE;
  sh_lir_bufinfo *bi = &k->bufs[k->n_bufs];
  memset(bi, 0, sizeof *bi);
  bi->name = name_dup(k, name);
  if (!bi->name) return SH_LIR_NONE;
  bi->dtype = (uint8_t)dtype;
  bi->role = (uint8_t)role;
  bi->rank = rank;
  for (int d = 0; d < SH_LIR_MAX_RANK; d++) {
    bi->dims[d] = d < rank ? dims[d] : SH_LIR_NONE;
    bi->pad[d] = 1;
  }
  bi->lengths = bi->offsets = SH_LIR_NONE;
  return k->n_bufs++;
}

sheaf_status sh_lir_buffer_ragged(sh_lir_kernel *k, sh_lir_buf b, uint32_t mask,
                                  sh_lir_buf lengths, sh_lir_buf offsets) {
  if (!buf_ok(k, b, "ragged") || !buf_ok(k, lengths, "ragged lengths") ||
      !buf_ok(k, offsets, "ragged offsets"))
    return k->err ? k->err : SHEAF_ERR_INVALID_ARG;
  sh_lir_bufinfo *bi = &k->bufs[b];
  const sh_lir_bufinfo *L = &k->bufs[lengths], *O = &k->bufs[offsets];
  if (bi->role == SH_LIR_LOCAL || bi->rank < 2 || mask == 0 || (mask & 1u) ||
      (mask >> bi->rank) != 0 || bi->layout != SH_LIR_LAYOUT_DENSE ||
      bi->access != SH_LIR_ACCESS_DENSE)
    return sh_lir_fail(k, SHEAF_ERR_INVALID_ARG,
                       "kernel %s: buffer %s cannot be ragged with mask 0x%x (rank >= 2, a dense "
                       "non-local buffer, ragged dimensions among 1..rank-1)",
                       k->name, bi->name, (unsigned)mask);
  if (L->dtype != SH_LIR_I32 || O->dtype != SH_LIR_I32 || L->rank != 1 || O->rank != 1 ||
      L->role != SH_LIR_IN || O->role != SH_LIR_IN)
    return sh_lir_fail(k, SHEAF_ERR_INVALID_ARG,
                       "kernel %s: buffer %s: lengths %s and offsets %s must be i32 inputs of "
                       "rank 1",
                       k->name, bi->name, L->name, O->name);
  bi->layout = SH_LIR_LAYOUT_RAGGED;
  bi->ragged_mask = mask;
  bi->lengths = lengths;
  bi->offsets = offsets;
  for (int d = 1; d < bi->rank; d++)
    if (mask & (1u << d)) bi->dims[d] = SH_LIR_NONE;
  return SHEAF_OK;
}

sheaf_status sh_lir_buffer_access(sh_lir_kernel *k, sh_lir_buf b, sh_lir_access access) {
  if (!buf_ok(k, b, "access")) return k->err ? k->err : SHEAF_ERR_INVALID_ARG;
  sh_lir_bufinfo *bi = &k->bufs[b];
  if ((unsigned)access > SH_LIR_ACCESS_ROWS ||
      (access != SH_LIR_ACCESS_DENSE &&
       (bi->role > SH_LIR_OUT || bi->layout != SH_LIR_LAYOUT_DENSE || bi->rank < 2)))
    return sh_lir_fail(k, SHEAF_ERR_INVALID_ARG,
                       "kernel %s: buffer %s: row-stride and row-pointer access need a dense "
                       "argument of rank >= 2",
                       k->name, bi->name);
  bi->access = (uint8_t)access;
  return SHEAF_OK;
}

sheaf_status sh_lir_buffer_weight(sh_lir_kernel *k, sh_lir_buf b) {
  if (!buf_ok(k, b, "weight")) return k->err ? k->err : SHEAF_ERR_INVALID_ARG;
  if (k->bufs[b].role != SH_LIR_IN || k->bufs[b].dtype != SH_LIR_F32)
    return sh_lir_fail(k, SHEAF_ERR_INVALID_ARG, "kernel %s: buffer %s: only f32 inputs are weights",
                       k->name, k->bufs[b].name);
  k->bufs[b].weight = true;
  return SHEAF_OK;
}

sheaf_status sh_lir_buffer_scoped(sh_lir_kernel *k, sh_lir_buf b) {
  if (!buf_ok(k, b, "scoped")) return k->err ? k->err : SHEAF_ERR_INVALID_ARG;
  if (k->bufs[b].role != SH_LIR_TEMP || k->bufs[b].layout != SH_LIR_LAYOUT_DENSE)
    return sh_lir_fail(k, SHEAF_ERR_INVALID_ARG, "kernel %s: buffer %s: only dense temporaries are scoped",
                       k->name, k->bufs[b].name);
  k->bufs[b].scoped = true;
  return SHEAF_OK;
}

/* -------------------------------------------------------- expressions */

static sh_lir_expr new_ex(sh_lir_kernel *k, sh_lir_ekind kind, uint8_t op, sh_lir_dtype dt,
                          int32_t a, int32_t b, int32_t c) {
  if (k->err) return SH_LIR_NONE;
  if (!sh_lir_grow(k, (void **)&k->ex, &k->cap_ex, sizeof *k->ex, k->n_ex + 1)) return SH_LIR_NONE;
  sh_lir_enode *n = &k->ex[k->n_ex];
  memset(n, 0, sizeof *n);
  n->kind = (uint8_t)kind;
  n->op = op;
  n->dtype = (uint8_t)dt;
  n->a = a;
  n->b = b;
  n->c = c;
  return k->n_ex++;
}

sh_lir_expr sh_lir_int(sh_lir_kernel *k, int64_t v) {
  sh_lir_expr e = new_ex(k, SH_LIR_E_INT, 0, SH_LIR_I32, 0, 0, 0);
  if (e >= 0) k->ex[e].i = v;
  return e;
}

sh_lir_expr sh_lir_flt(sh_lir_kernel *k, float v) {
  sh_lir_expr e = new_ex(k, SH_LIR_E_FLT, 0, SH_LIR_F32, 0, 0, 0);
  if (e >= 0) k->ex[e].f = v;
  return e;
}

sh_lir_expr sh_lir_sz(sh_lir_kernel *k, sh_lir_sym s) {
  if (k->err) return SH_LIR_NONE;
  if (s < 0 || s >= k->n_syms) {
    sh_lir_fail(k, SHEAF_ERR_INVALID_ARG, "kernel %s: no size symbol %d", k->name, (int)s);
    return SH_LIR_NONE;
  }
  return new_ex(k, SH_LIR_E_SYM, 0, SH_LIR_I32, s, 0, 0);
}

sh_lir_expr sh_lir_v(sh_lir_kernel *k, sh_lir_var v) {
  if (k->err) return SH_LIR_NONE;
  if (v < 0 || v >= k->n_vars) {
    sh_lir_fail(k, SHEAF_ERR_INVALID_ARG, "kernel %s: no loop variable %d", k->name, (int)v);
    return SH_LIR_NONE;
  }
  return new_ex(k, SH_LIR_E_VAR, 0, SH_LIR_I32, v, 0, 0);
}

sh_lir_expr sh_lir_lv(sh_lir_kernel *k, sh_lir_stmt loop) {
  return sh_lir_v(k, sh_lir_loop_var(k, loop));
}

sh_lir_expr sh_lir_ld_ref(sh_lir_kernel *k, sh_lir_buf b) {
  return new_ex(k, SH_LIR_E_LD, 0, SH_LIR_I32, b, 0, 0);
}

bool sh_lir_is_const(const sh_lir_kernel *k, sh_lir_expr e, int64_t *v) {
  if (e < 0 || e >= k->n_ex || k->ex[e].kind != SH_LIR_E_INT) return false;
  if (v) *v = k->ex[e].i;
  return true;
}

static int64_t floordiv64(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
  return q;
}

static bool fold_int(sh_lir_op op, int64_t a, int64_t b, int64_t *r) {
  switch (op) {
  case SH_LIR_OP_ADD: return !__builtin_add_overflow(a, b, r);
  case SH_LIR_OP_SUB: return !__builtin_sub_overflow(a, b, r);
  case SH_LIR_OP_MUL: return !__builtin_mul_overflow(a, b, r);
  case SH_LIR_OP_DIV:
    if (b == 0 || (a == INT64_MIN && b == -1)) return false;
    *r = floordiv64(a, b);
    return true;
  case SH_LIR_OP_MOD:
    if (b == 0 || (a == INT64_MIN && b == -1)) return false;
    *r = a - floordiv64(a, b) * b;
    return true;
  case SH_LIR_OP_MIN: *r = a < b ? a : b; return true;
  case SH_LIR_OP_MAX: *r = a > b ? a : b; return true;
  case SH_LIR_OP_LT: *r = a < b; return true;
  case SH_LIR_OP_LE: *r = a <= b; return true;
  case SH_LIR_OP_GT: *r = a > b; return true;
  case SH_LIR_OP_GE: *r = a >= b; return true;
  case SH_LIR_OP_EQ: *r = a == b; return true;
  case SH_LIR_OP_NE: *r = a != b; return true;
  case SH_LIR_OP_AND: *r = a && b; return true;
  case SH_LIR_OP_OR: *r = a || b; return true;
  case SH_LIR_OP_POW: return false;
  }
  return false;
}

static const char *op_name(sh_lir_op op) {
  static const char *n[] = {"+", "-", "*", "/", "%", "min", "max", "pow",
                            "<", "<=", ">", ">=", "==", "!=", "&&", "||"};
  return (unsigned)op < SH_ARRAY_LEN(n) ? n[op] : "?";
}

sh_lir_expr sh_lir_bin(sh_lir_kernel *k, sh_lir_op op, sh_lir_expr a, sh_lir_expr b) {
  if (!ex_ok(k, a) || !ex_ok(k, b)) {
    if (!k->err)
      sh_lir_fail(k, SHEAF_ERR_INVALID_ARG, "kernel %s: operand of '%s' is not an expression",
                  k->name, op_name(op));
    return SH_LIR_NONE;
  }
  sh_lir_dtype dt = (sh_lir_dtype)k->ex[a].dtype;
  if ((unsigned)op > SH_LIR_OP_OR || dt != k->ex[b].dtype ||
      (dt == SH_LIR_F32 && (op == SH_LIR_OP_MOD || op == SH_LIR_OP_AND || op == SH_LIR_OP_OR)) ||
      (dt == SH_LIR_I32 && op == SH_LIR_OP_POW)) {
    sh_lir_fail(k, SHEAF_ERR_INVALID_ARG,
                "kernel %s: '%s' on %s and %s operands (both integer or both float; %% && || "
                "integer only, pow float only)",
                k->name, op_name(op), k->ex[a].dtype == SH_LIR_F32 ? "float" : "integer",
                k->ex[b].dtype == SH_LIR_F32 ? "float" : "integer");
    return SH_LIR_NONE;
  }
  if (dt == SH_LIR_I32) {
    int64_t x = 0, y = 0, r;
    bool ca = sh_lir_is_const(k, a, &x), cb = sh_lir_is_const(k, b, &y);
    if (ca && cb && fold_int(op, x, y, &r)) return sh_lir_int(k, r);
    if (op == SH_LIR_OP_ADD && ca && x == 0) return b;
    if ((op == SH_LIR_OP_ADD || op == SH_LIR_OP_SUB) && cb && y == 0) return a;
    if (op == SH_LIR_OP_MUL && ((ca && x == 0) || (cb && y == 0))) return sh_lir_int(k, 0);
    if (op == SH_LIR_OP_MUL && ca && x == 1) return b;
    if ((op == SH_LIR_OP_MUL || op == SH_LIR_OP_DIV) && cb && y == 1) return a;
    if (op == SH_LIR_OP_MOD && cb && y == 1) return sh_lir_int(k, 0);
    if (op == SH_LIR_OP_AND && ca) return x ? b : sh_lir_int(k, 0);
    if (op == SH_LIR_OP_AND && cb && y) return a;
  }
  bool cmp = op >= SH_LIR_OP_LT && op <= SH_LIR_OP_NE;
  (void)cmp;
  return new_ex(k, SH_LIR_E_BIN, (uint8_t)op, dt, a, b, 0);
}

sh_lir_expr sh_lir_add(sh_lir_kernel *k, sh_lir_expr a, sh_lir_expr b) {
  return sh_lir_bin(k, SH_LIR_OP_ADD, a, b);
}
sh_lir_expr sh_lir_sub(sh_lir_kernel *k, sh_lir_expr a, sh_lir_expr b) {
  return sh_lir_bin(k, SH_LIR_OP_SUB, a, b);
}
sh_lir_expr sh_lir_mul(sh_lir_kernel *k, sh_lir_expr a, sh_lir_expr b) {
  return sh_lir_bin(k, SH_LIR_OP_MUL, a, b);
}

sh_lir_expr sh_lir_un(sh_lir_kernel *k, sh_lir_fn fn, sh_lir_expr a) {
  if (!ex_ok(k, a)) {
    if (!k->err) sh_lir_fail(k, SHEAF_ERR_INVALID_ARG, "kernel %s: bad operand", k->name);
    return SH_LIR_NONE;
  }
  if ((unsigned)fn > SH_LIR_FN_EXP_NONPOS || k->ex[a].dtype != SH_LIR_F32) {
    sh_lir_fail(k, SHEAF_ERR_INVALID_ARG, "kernel %s: %s takes a float operand", k->name,
                (unsigned)fn > SH_LIR_FN_EXP_NONPOS ? "unknown function" : sh_lir_fn_name(fn));
    return SH_LIR_NONE;
  }
  return new_ex(k, SH_LIR_E_UN, (uint8_t)fn, SH_LIR_F32, a, 0, 0);
}

sh_lir_expr sh_lir_select(sh_lir_kernel *k, sh_lir_expr cond, sh_lir_expr a, sh_lir_expr b) {
  if (!ex_ok(k, cond) || !ex_ok(k, a) || !ex_ok(k, b)) {
    if (!k->err) sh_lir_fail(k, SHEAF_ERR_INVALID_ARG, "kernel %s: bad select operand", k->name);
    return SH_LIR_NONE;
  }
  if (k->ex[cond].dtype != SH_LIR_F32 || k->ex[a].dtype != SH_LIR_F32 ||
      k->ex[b].dtype != SH_LIR_F32) {
    sh_lir_fail(k, SHEAF_ERR_INVALID_ARG,
                "kernel %s: select takes float operands (cast an integer condition)", k->name);
    return SH_LIR_NONE;
  }
  return new_ex(k, SH_LIR_E_SELECT, 0, SH_LIR_F32, cond, a, b);
}

sh_lir_expr sh_lir_cast(sh_lir_kernel *k, sh_lir_expr a) {
  if (!ex_ok(k, a) || k->ex[a].dtype != SH_LIR_I32) {
    if (!k->err)
      sh_lir_fail(k, SHEAF_ERR_INVALID_ARG, "kernel %s: cast takes an integer operand", k->name);
    return SH_LIR_NONE;
  }
  return new_ex(k, SH_LIR_E_CAST, 0, SH_LIR_F32, a, 0, 0);
}

int32_t sh_lir_new_list(sh_lir_kernel *k, int n, const sh_lir_expr *idx_in) {
  /* idx may point into the list pool itself, which may move */
  sh_lir_expr idx[SH_LIR_MAX_RANK];
  if (n < 0 || n > SH_LIR_MAX_RANK) {
    sh_lir_fail(k, SHEAF_ERR_INVALID_ARG, "kernel %s: %d indices (at most %d)", k->name, n,
                SH_LIR_MAX_RANK);
    return SH_LIR_NONE;
  }
  for (int i = 0; i < n; i++) idx[i] = idx_in[i];
  if (!sh_lir_grow(k, (void **)&k->list, &k->cap_list, sizeof *k->list, k->n_list + n + 1))
    return SH_LIR_NONE;
  int32_t start = k->n_list;
  for (int i = 0; i < n; i++) k->list[start + i] = idx[i];
  k->n_list += n;
  return start;
}

static bool check_idx(sh_lir_kernel *k, sh_lir_buf b, int n, const sh_lir_expr *idx,
                      const char *what) {
  if (!buf_ok(k, b, what)) return false;
  const sh_lir_bufinfo *bi = &k->bufs[b];
  if (n != bi->rank) {
    sh_lir_fail(k, SHEAF_ERR_INVALID_ARG, "kernel %s: %s %s: %d indices for rank %d", k->name,
                what, bi->name, n, bi->rank);
    return false;
  }
  for (int i = 0; i < n; i++)
    if (!ex_ok(k, idx[i]) || k->ex[idx[i]].dtype != SH_LIR_I32) {
      if (!k->err)
        sh_lir_fail(k, SHEAF_ERR_INVALID_ARG, "kernel %s: %s %s: index %d is not an integer",
                    k->name, what, bi->name, i);
      return false;
    }
  return true;
}

sh_lir_expr sh_lir_load(sh_lir_kernel *k, sh_lir_buf b, int n, const sh_lir_expr *idx) {
  if (!check_idx(k, b, n, idx, "load of")) return SH_LIR_NONE;
  int32_t l = sh_lir_new_list(k, n, idx);
  if (l < 0) return SH_LIR_NONE;
  sh_lir_expr e = new_ex(k, SH_LIR_E_LOAD, 0, (sh_lir_dtype)k->bufs[b].dtype, b, l, 0);
  if (e >= 0) k->ex[e].n = (uint8_t)n;
  return e;
}

sh_lir_expr sh_lir_load1(sh_lir_kernel *k, sh_lir_buf b, sh_lir_expr i0) {
  return sh_lir_load(k, b, 1, &i0);
}
sh_lir_expr sh_lir_load2(sh_lir_kernel *k, sh_lir_buf b, sh_lir_expr i0, sh_lir_expr i1) {
  sh_lir_expr idx[2] = {i0, i1};
  return sh_lir_load(k, b, 2, idx);
}
sh_lir_expr sh_lir_load3(sh_lir_kernel *k, sh_lir_buf b, sh_lir_expr i0, sh_lir_expr i1,
                         sh_lir_expr i2) {
  sh_lir_expr idx[3] = {i0, i1, i2};
  return sh_lir_load(k, b, 3, idx);
}

bool sh_lir_expr_eq(const sh_lir_kernel *k, sh_lir_expr a, sh_lir_expr b) {
  if (a == b) return true;
  if (a < 0 || b < 0) return false;
  const sh_lir_enode *x = &k->ex[a], *y = &k->ex[b];
  if (x->kind != y->kind || x->op != y->op || x->dtype != y->dtype) return false;
  switch ((sh_lir_ekind)x->kind) {
  case SH_LIR_E_INT: return x->i == y->i;
  case SH_LIR_E_FLT: return memcmp(&x->f, &y->f, sizeof x->f) == 0;
  case SH_LIR_E_SYM:
  case SH_LIR_E_VAR:
  case SH_LIR_E_LD: return x->a == y->a;
  case SH_LIR_E_BIN: return sh_lir_expr_eq(k, x->a, y->a) && sh_lir_expr_eq(k, x->b, y->b);
  case SH_LIR_E_UN:
  case SH_LIR_E_CAST: return sh_lir_expr_eq(k, x->a, y->a);
  case SH_LIR_E_SELECT:
    return sh_lir_expr_eq(k, x->a, y->a) && sh_lir_expr_eq(k, x->b, y->b) &&
           sh_lir_expr_eq(k, x->c, y->c);
  case SH_LIR_E_LOAD:
    if (x->a != y->a || x->n != y->n) return false;
    for (int i = 0; i < x->n; i++)
      if (!sh_lir_expr_eq(k, k->list[x->b + i], k->list[y->b + i])) return false;
    return true;
  }
  return false;
}

/* ------------------------------------------------------- statements */

sh_lir_stmt sh_lir_new_stmt(sh_lir_kernel *k, sh_lir_skind kind) {
  if (k->err) return SH_LIR_NONE;
  if (!sh_lir_grow(k, (void **)&k->st, &k->cap_st, sizeof *k->st, k->n_st + 1)) return SH_LIR_NONE;
  sh_lir_snode *s = &k->st[k->n_st];
  memset(s, 0, sizeof *s);
  s->kind = (uint8_t)kind;
  s->width = 1;
  s->parent = s->next = s->body = SH_LIR_NONE;
  s->var = s->ext = s->cond = s->els = s->buf = s->idx = s->val = SH_LIR_NONE;
  return k->n_st++;
}

sh_lir_var sh_lir_new_var(sh_lir_kernel *k, const char *base, sh_lir_stmt loop) {
  if (k->err) return SH_LIR_NONE;
  char name[80];
  snprintf(name, sizeof name, "%s", base);
  for (int n = 2;; n++) {
    bool clash = false;
    for (int32_t i = 0; i < k->n_vars && !clash; i++) clash = strcmp(k->vars[i].name, name) == 0;
    if (!clash) break;
    snprintf(name, sizeof name, "%s%d", base, n);
  }
  if (!sh_lir_grow(k, (void **)&k->vars, &k->cap_vars, sizeof *k->vars, k->n_vars + 1))
    return SH_LIR_NONE;
  const char *d = name_dup(k, name);
  if (!d) return SH_LIR_NONE;
  k->vars[k->n_vars].name = d;
  k->vars[k->n_vars].loop = loop;
  return k->n_vars++;
}

static bool parent_ok(sh_lir_kernel *k, sh_lir_stmt p) {
  if (k->err) return false;
  if (p < 0 || p >= k->n_st || k->st[p].kind == SH_LIR_S_STORE) {
    sh_lir_fail(k, SHEAF_ERR_INVALID_ARG,
                "kernel %s: statement %d cannot hold a body (not a block, loop, if or alloc)",
                k->name, (int)p);
    return false;
  }
  return true;
}

sh_lir_stmt sh_lir_loop(sh_lir_kernel *k, sh_lir_stmt parent, const char *var, sh_lir_expr extent) {
  if (!parent_ok(k, parent)) return SH_LIR_NONE;
  if (!is_ident(var) || strlen(var) > 48) {
    sh_lir_fail(k, SHEAF_ERR_INVALID_ARG, "kernel %s: loop variable \"%s\" is not an identifier",
                k->name, var ? var : "(null)");
    return SH_LIR_NONE;
  }
  if (!ex_ok(k, extent) || k->ex[extent].dtype != SH_LIR_I32) {
    if (!k->err)
      sh_lir_fail(k, SHEAF_ERR_INVALID_ARG, "kernel %s: loop %s: the extent is not an integer",
                  k->name, var);
    return SH_LIR_NONE;
  }
  sh_lir_stmt s = sh_lir_new_stmt(k, SH_LIR_S_LOOP);
  if (s < 0) return s;
  sh_lir_var v = sh_lir_new_var(k, var, s);
  if (v < 0) return SH_LIR_NONE;
  k->st[s].var = v;
  k->st[s].ext = extent;
  sh_lir_append(k, parent, s);
  return s;
}

sh_lir_stmt sh_lir_store(sh_lir_kernel *k, sh_lir_stmt parent, sh_lir_buf b, int n,
                         const sh_lir_expr *idx, sh_lir_expr value, sh_lir_combine combine) {
  if (!parent_ok(k, parent) || !check_idx(k, b, n, idx, "store to")) return SH_LIR_NONE;
  const sh_lir_bufinfo *bi = &k->bufs[b];
  if (!ex_ok(k, value) || k->ex[value].dtype != bi->dtype || (unsigned)combine > SH_LIR_COMBINE_MIN ||
      bi->role == SH_LIR_IN) {
    if (!k->err)
      sh_lir_fail(k, SHEAF_ERR_INVALID_ARG,
                  "kernel %s: store to %s: %s", k->name, bi->name,
                  bi->role == SH_LIR_IN ? "the buffer is an input"
                                        : "the value's type differs from the buffer's");
    return SH_LIR_NONE;
  }
  int32_t l = sh_lir_new_list(k, n, idx);
  sh_lir_stmt s = sh_lir_new_stmt(k, SH_LIR_S_STORE);
  if (l < 0 || s < 0) return SH_LIR_NONE;
  sh_lir_snode *sn = &k->st[s];
  sn->buf = b;
  sn->idx = l;
  sn->nidx = n;
  sn->val = value;
  sn->combine = (uint8_t)combine;
  sh_lir_append(k, parent, s);
  return s;
}

/* A prefetch names an input (read) or an output (written: emitted with
 * write intent), dense or panels layout, dense or row-stride access. */
static bool prefetchable(const sh_lir_bufinfo *bi) {
  return (bi->role == SH_LIR_IN || bi->role == SH_LIR_OUT) && bi->layout != SH_LIR_LAYOUT_RAGGED &&
         (bi->access == SH_LIR_ACCESS_DENSE || bi->access == SH_LIR_ACCESS_LD);
}

sh_lir_stmt sh_lir_prefetch(sh_lir_kernel *k, sh_lir_stmt parent, sh_lir_buf b, int n,
                            const sh_lir_expr *idx) {
  if (!parent_ok(k, parent) || !check_idx(k, b, n, idx, "prefetch of")) return SH_LIR_NONE;
  const sh_lir_bufinfo *bi = &k->bufs[b];
  if (!prefetchable(bi)) {
    if (!k->err)
      sh_lir_fail(k, SHEAF_ERR_INVALID_ARG, "kernel %s: prefetch of %s: not a dense input or output", k->name,
                  bi->name);
    return SH_LIR_NONE;
  }
  int32_t l = sh_lir_new_list(k, n, idx);
  sh_lir_stmt s = sh_lir_new_stmt(k, SH_LIR_S_PREFETCH);
  if (l < 0 || s < 0) return SH_LIR_NONE;
  k->st[s].buf = b;
  k->st[s].idx = l;
  k->st[s].nidx = n;
  sh_lir_append(k, parent, s);
  return s;
}

sh_lir_stmt sh_lir_store1(sh_lir_kernel *k, sh_lir_stmt parent, sh_lir_buf b, sh_lir_expr i0,
                          sh_lir_expr value, sh_lir_combine combine) {
  return sh_lir_store(k, parent, b, 1, &i0, value, combine);
}

sh_lir_stmt sh_lir_store2(sh_lir_kernel *k, sh_lir_stmt parent, sh_lir_buf b, sh_lir_expr i0,
                          sh_lir_expr i1, sh_lir_expr value, sh_lir_combine combine) {
  sh_lir_expr idx[2] = {i0, i1};
  return sh_lir_store(k, parent, b, 2, idx, value, combine);
}

sh_lir_stmt sh_lir_if(sh_lir_kernel *k, sh_lir_stmt parent, sh_lir_expr cond) {
  if (!parent_ok(k, parent)) return SH_LIR_NONE;
  if (!ex_ok(k, cond) || k->ex[cond].dtype != SH_LIR_I32) {
    if (!k->err)
      sh_lir_fail(k, SHEAF_ERR_INVALID_ARG, "kernel %s: if: the condition is not an integer",
                  k->name);
    return SH_LIR_NONE;
  }
  sh_lir_stmt s = sh_lir_new_stmt(k, SH_LIR_S_IF);
  if (s < 0) return s;
  k->st[s].cond = cond;
  sh_lir_append(k, parent, s);
  return s;
}

sh_lir_stmt sh_lir_else(sh_lir_kernel *k, sh_lir_stmt if_stmt) {
  if (k->err) return SH_LIR_NONE;
  if (if_stmt < 0 || if_stmt >= k->n_st || k->st[if_stmt].kind != SH_LIR_S_IF) {
    sh_lir_fail(k, SHEAF_ERR_INVALID_ARG, "kernel %s: else of a statement that is not an if",
                k->name);
    return SH_LIR_NONE;
  }
  if (k->st[if_stmt].els >= 0) return k->st[if_stmt].els;
  sh_lir_stmt b = sh_lir_new_stmt(k, SH_LIR_S_BLOCK);
  if (b < 0) return b;
  k->st[b].parent = if_stmt;
  k->st[if_stmt].els = b;
  return b;
}

sh_lir_stmt sh_lir_alloc(sh_lir_kernel *k, sh_lir_stmt parent, sh_lir_buf b) {
  if (!parent_ok(k, parent) || !buf_ok(k, b, "alloc")) return SH_LIR_NONE;
  if (k->bufs[b].role != SH_LIR_LOCAL && !k->bufs[b].scoped) {
    sh_lir_fail(k, SHEAF_ERR_INVALID_ARG, "kernel %s: alloc of %s, which is not a local buffer",
                k->name, k->bufs[b].name);
    return SH_LIR_NONE;
  }
  sh_lir_stmt s = sh_lir_new_stmt(k, SH_LIR_S_ALLOC);
  if (s < 0) return s;
  k->st[s].buf = b;
  sh_lir_append(k, parent, s);
  return s;
}

sh_lir_var sh_lir_loop_var(const sh_lir_kernel *k, sh_lir_stmt loop) {
  if (loop < 0 || loop >= k->n_st || k->st[loop].kind != SH_LIR_S_LOOP) return SH_LIR_NONE;
  return k->st[loop].var;
}

static sh_lir_stmt find_loop_in(const sh_lir_kernel *k, sh_lir_stmt s, const char *name) {
  for (; s >= 0; s = k->st[s].next) {
    const sh_lir_snode *n = &k->st[s];
    if (n->kind == SH_LIR_S_LOOP && strcmp(k->vars[n->var].name, name) == 0) return s;
    sh_lir_stmt r = find_loop_in(k, n->body, name);
    if (r >= 0) return r;
    if (n->kind == SH_LIR_S_IF && n->els >= 0 && (r = find_loop_in(k, n->els, name)) >= 0)
      return r;
  }
  return SH_LIR_NONE;
}

sh_lir_stmt sh_lir_find_loop(const sh_lir_kernel *k, const char *name) {
  return find_loop_in(k, k->root, name);
}

/* ------------------------------------------------------ tree surgery */

void sh_lir_detach(sh_lir_kernel *k, sh_lir_stmt s) {
  sh_lir_stmt p = k->st[s].parent;
  if (p < 0) return;
  sh_lir_stmt *link = &k->st[p].body;
  while (*link >= 0 && *link != s) link = &k->st[*link].next;
  if (*link == s) *link = k->st[s].next;
  k->st[s].parent = k->st[s].next = SH_LIR_NONE;
}

void sh_lir_append(sh_lir_kernel *k, sh_lir_stmt parent, sh_lir_stmt s) {
  sh_lir_stmt *link = &k->st[parent].body;
  while (*link >= 0) link = &k->st[*link].next;
  *link = s;
  k->st[s].parent = parent;
  k->st[s].next = SH_LIR_NONE;
}

void sh_lir_insert_before(sh_lir_kernel *k, sh_lir_stmt at, sh_lir_stmt s) {
  sh_lir_stmt p = k->st[at].parent;
  sh_lir_stmt *link = &k->st[p].body;
  while (*link != at) link = &k->st[*link].next;
  *link = s;
  k->st[s].next = at;
  k->st[s].parent = p;
}

void sh_lir_insert_after(sh_lir_kernel *k, sh_lir_stmt at, sh_lir_stmt s) {
  k->st[s].next = k->st[at].next;
  k->st[s].parent = k->st[at].parent;
  k->st[at].next = s;
}

void sh_lir_replace(sh_lir_kernel *k, sh_lir_stmt at, sh_lir_stmt s) {
  sh_lir_insert_before(k, at, s);
  sh_lir_detach(k, at);
}

int sh_lir_body_len(const sh_lir_kernel *k, sh_lir_stmt s) {
  int n = 0;
  for (sh_lir_stmt c = k->st[s].body; c >= 0; c = k->st[c].next) n++;
  return n;
}

bool sh_lir_within(const sh_lir_kernel *k, sh_lir_stmt s, sh_lir_stmt anc) {
  for (; s >= 0; s = k->st[s].parent)
    if (s == anc) return true;
  return false;
}

/* ------------------------------------------- substitution and cloning */

sh_lir_expr sh_lir_subst(sh_lir_kernel *k, sh_lir_expr e, int n, const sh_lir_var *vars,
                         const sh_lir_expr *repl) {
  if (e < 0 || k->err) return e;
  const sh_lir_enode x = k->ex[e];
  switch ((sh_lir_ekind)x.kind) {
  case SH_LIR_E_INT:
  case SH_LIR_E_FLT:
  case SH_LIR_E_SYM:
  case SH_LIR_E_LD: return e;
  case SH_LIR_E_VAR:
    for (int i = 0; i < n; i++)
      if (vars[i] == x.a) return repl[i];
    return e;
  case SH_LIR_E_BIN: {
    sh_lir_expr a = sh_lir_subst(k, x.a, n, vars, repl), b = sh_lir_subst(k, x.b, n, vars, repl);
    return a == x.a && b == x.b ? e : sh_lir_bin(k, (sh_lir_op)x.op, a, b);
  }
  case SH_LIR_E_UN: {
    sh_lir_expr a = sh_lir_subst(k, x.a, n, vars, repl);
    return a == x.a ? e : sh_lir_un(k, (sh_lir_fn)x.op, a);
  }
  case SH_LIR_E_CAST: {
    sh_lir_expr a = sh_lir_subst(k, x.a, n, vars, repl);
    return a == x.a ? e : sh_lir_cast(k, a);
  }
  case SH_LIR_E_SELECT: {
    sh_lir_expr a = sh_lir_subst(k, x.a, n, vars, repl), b = sh_lir_subst(k, x.b, n, vars, repl),
                c = sh_lir_subst(k, x.c, n, vars, repl);
    return a == x.a && b == x.b && c == x.c ? e : sh_lir_select(k, a, b, c);
  }
  case SH_LIR_E_LOAD: {
    sh_lir_expr idx[SH_LIR_MAX_RANK];
    bool same = true;
    for (int i = 0; i < x.n; i++) {
      idx[i] = sh_lir_subst(k, k->list[x.b + i], n, vars, repl);
      same = same && idx[i] == k->list[x.b + i];
    }
    return same ? e : sh_lir_load(k, x.a, x.n, idx);
  }
  }
  return e;
}

static void subst_list(sh_lir_kernel *k, sh_lir_stmt s, int n, const sh_lir_var *vars,
                       const sh_lir_expr *repl) {
  for (; s >= 0 && !k->err; s = k->st[s].next) sh_lir_subst_stmt(k, s, n, vars, repl);
}

void sh_lir_subst_stmt(sh_lir_kernel *k, sh_lir_stmt s, int n, const sh_lir_var *vars,
                       const sh_lir_expr *repl) {
  if (s < 0 || k->err) return;
  switch ((sh_lir_skind)k->st[s].kind) {
  case SH_LIR_S_LOOP: {
    sh_lir_expr e = sh_lir_subst(k, k->st[s].ext, n, vars, repl);
    k->st[s].ext = e;
    break;
  }
  case SH_LIR_S_IF: {
    sh_lir_expr e = sh_lir_subst(k, k->st[s].cond, n, vars, repl);
    k->st[s].cond = e;
    if (k->st[s].els >= 0) subst_list(k, k->st[k->st[s].els].body, n, vars, repl);
    break;
  }
  case SH_LIR_S_PREFETCH:
  case SH_LIR_S_STORE: {
    sh_lir_expr idx[SH_LIR_MAX_RANK];
    bool same = true;
    for (int i = 0; i < k->st[s].nidx; i++) {
      idx[i] = sh_lir_subst(k, k->list[k->st[s].idx + i], n, vars, repl);
      same = same && idx[i] == k->list[k->st[s].idx + i];
    }
    if (!same) {
      int32_t l = sh_lir_new_list(k, k->st[s].nidx, idx);
      if (l >= 0) k->st[s].idx = l;
    }
    if (k->st[s].kind == SH_LIR_S_PREFETCH) return;
    sh_lir_expr v = sh_lir_subst(k, k->st[s].val, n, vars, repl);
    k->st[s].val = v;
    return;
  }
  case SH_LIR_S_BLOCK:
  case SH_LIR_S_ALLOC: break;
  }
  subst_list(k, k->st[s].body, n, vars, repl);
}

/* Clones one statement (and its body); `map` grows with the fresh loop
 * variables of the copy. */
typedef struct clone_map {
  int n, cap;
  sh_lir_var vars[64];
  sh_lir_expr repl[64];
} clone_map;

static sh_lir_stmt clone_one(sh_lir_kernel *k, sh_lir_stmt s, clone_map *m, const char *suffix);

static void clone_body(sh_lir_kernel *k, sh_lir_stmt from, sh_lir_stmt to, clone_map *m,
                       const char *suffix) {
  for (sh_lir_stmt c = k->st[from].body; c >= 0 && !k->err; c = k->st[c].next) {
    sh_lir_stmt d = clone_one(k, c, m, suffix);
    if (d >= 0) sh_lir_append(k, to, d);
  }
}

static sh_lir_stmt clone_one(sh_lir_kernel *k, sh_lir_stmt s, clone_map *m, const char *suffix) {
  sh_lir_stmt d = sh_lir_new_stmt(k, (sh_lir_skind)k->st[s].kind);
  if (d < 0) return d;
  sh_lir_snode src = k->st[s];
  sh_lir_snode *dn = &k->st[d];
  dn->annot = src.annot;
  dn->width = src.width;
  dn->combine = src.combine;
  dn->buf = src.buf;
  dn->nidx = src.nidx;
  int saved = m->n;
  switch ((sh_lir_skind)src.kind) {
  case SH_LIR_S_LOOP: {
    sh_lir_expr ext = sh_lir_subst(k, src.ext, m->n, m->vars, m->repl);
    char name[80];
    snprintf(name, sizeof name, "%s%s", k->vars[src.var].name, suffix);
    sh_lir_var v = sh_lir_new_var(k, name, d);
    if (v < 0 || m->n >= (int)SH_ARRAY_LEN(m->vars)) {
      if (!k->err) sh_lir_fail(k, SHEAF_ERR_UNSUPPORTED, "kernel %s: loop nest too deep", k->name);
      return SH_LIR_NONE;
    }
    sh_lir_expr ve = sh_lir_v(k, v);
    k->st[d].ext = ext;
    k->st[d].var = v;
    m->vars[m->n] = src.var;
    m->repl[m->n++] = ve;
    break;
  }
  case SH_LIR_S_IF: {
    sh_lir_expr c = sh_lir_subst(k, src.cond, m->n, m->vars, m->repl);
    k->st[d].cond = c;
    if (src.els >= 0) {
      sh_lir_stmt eb = sh_lir_new_stmt(k, SH_LIR_S_BLOCK);
      if (eb < 0) return SH_LIR_NONE;
      k->st[eb].parent = d;
      k->st[d].els = eb;
      clone_body(k, src.els, eb, m, suffix);
    }
    break;
  }
  case SH_LIR_S_PREFETCH:
  case SH_LIR_S_STORE: {
    sh_lir_expr idx[SH_LIR_MAX_RANK];
    for (int i = 0; i < src.nidx; i++)
      idx[i] = sh_lir_subst(k, k->list[src.idx + i], m->n, m->vars, m->repl);
    int32_t l = sh_lir_new_list(k, src.nidx, idx);
    sh_lir_expr v = src.val >= 0 ? sh_lir_subst(k, src.val, m->n, m->vars, m->repl) : SH_LIR_NONE;
    k->st[d].idx = l;
    k->st[d].val = v;
    break;
  }
  case SH_LIR_S_BLOCK:
  case SH_LIR_S_ALLOC: break;
  }
  if (src.kind != SH_LIR_S_STORE && src.kind != SH_LIR_S_PREFETCH) clone_body(k, s, d, m, suffix);
  m->n = saved;
  return k->err ? SH_LIR_NONE : d;
}

sh_lir_stmt sh_lir_clone(sh_lir_kernel *k, sh_lir_stmt s, int n, const sh_lir_var *vars,
                         const sh_lir_expr *repl, const char *suffix) {
  clone_map m;
  if (n > (int)SH_ARRAY_LEN(m.vars)) {
    sh_lir_fail(k, SHEAF_ERR_UNSUPPORTED, "kernel %s: too many substitutions", k->name);
    return SH_LIR_NONE;
  }
  m.n = n;
  m.cap = (int)SH_ARRAY_LEN(m.vars);
  for (int i = 0; i < n; i++) {
    m.vars[i] = vars[i];
    m.repl[i] = repl[i];
  }
  return clone_one(k, s, &m, suffix);
}

bool sh_lir_uses_var(const sh_lir_kernel *k, sh_lir_expr e, sh_lir_var v) {
  if (e < 0) return false;
  const sh_lir_enode *x = &k->ex[e];
  switch ((sh_lir_ekind)x->kind) {
  case SH_LIR_E_VAR: return x->a == v;
  case SH_LIR_E_BIN: return sh_lir_uses_var(k, x->a, v) || sh_lir_uses_var(k, x->b, v);
  case SH_LIR_E_UN:
  case SH_LIR_E_CAST: return sh_lir_uses_var(k, x->a, v);
  case SH_LIR_E_SELECT:
    return sh_lir_uses_var(k, x->a, v) || sh_lir_uses_var(k, x->b, v) ||
           sh_lir_uses_var(k, x->c, v);
  case SH_LIR_E_LOAD:
    for (int i = 0; i < x->n; i++)
      if (sh_lir_uses_var(k, k->list[x->b + i], v)) return true;
    return false;
  default: return false;
  }
}

bool sh_lir_uses_buf(const sh_lir_kernel *k, sh_lir_expr e, sh_lir_buf b) {
  if (e < 0) return false;
  const sh_lir_enode *x = &k->ex[e];
  switch ((sh_lir_ekind)x->kind) {
  case SH_LIR_E_BIN: return sh_lir_uses_buf(k, x->a, b) || sh_lir_uses_buf(k, x->b, b);
  case SH_LIR_E_UN:
  case SH_LIR_E_CAST: return sh_lir_uses_buf(k, x->a, b);
  case SH_LIR_E_SELECT:
    return sh_lir_uses_buf(k, x->a, b) || sh_lir_uses_buf(k, x->b, b) ||
           sh_lir_uses_buf(k, x->c, b);
  case SH_LIR_E_LOAD:
    if (x->a == b) return true;
    for (int i = 0; i < x->n; i++)
      if (sh_lir_uses_buf(k, k->list[x->b + i], b)) return true;
    return false;
  default: return false;
  }
}

bool sh_lir_stmt_uses_var(const sh_lir_kernel *k, sh_lir_stmt s, sh_lir_var v) {
  const sh_lir_snode *n = &k->st[s];
  switch ((sh_lir_skind)n->kind) {
  case SH_LIR_S_LOOP:
    if (sh_lir_uses_var(k, n->ext, v)) return true;
    break;
  case SH_LIR_S_IF:
    if (sh_lir_uses_var(k, n->cond, v)) return true;
    if (n->els >= 0 && sh_lir_stmt_uses_var(k, n->els, v)) return true;
    break;
  case SH_LIR_S_PREFETCH:
  case SH_LIR_S_STORE:
    for (int i = 0; i < n->nidx; i++)
      if (sh_lir_uses_var(k, k->list[n->idx + i], v)) return true;
    return sh_lir_uses_var(k, n->val, v);
  default: break;
  }
  for (sh_lir_stmt c = n->body; c >= 0; c = k->st[c].next)
    if (sh_lir_stmt_uses_var(k, c, v)) return true;
  return false;
}

int sh_lir_conjuncts(const sh_lir_kernel *k, sh_lir_expr e, sh_lir_expr *out, int cap) {
  if (e < 0 || cap <= 0) return 0;
  const sh_lir_enode *x = &k->ex[e];
  if (x->kind == SH_LIR_E_BIN && x->op == SH_LIR_OP_AND) {
    int n = sh_lir_conjuncts(k, x->a, out, cap);
    return n + sh_lir_conjuncts(k, x->b, out + n, cap - n);
  }
  out[0] = e;
  return 1;
}

/* ------------------------------------------------------------ misc */

float sh_lir_combine_identity(sh_lir_combine c) {
  switch (c) {
  case SH_LIR_COMBINE_MUL: return 1.0f;
  case SH_LIR_COMBINE_MAX: return -INFINITY;
  case SH_LIR_COMBINE_MIN: return INFINITY;
  default: return 0.0f;
  }
}

const char *sh_lir_fn_name(sh_lir_fn fn) {
  static const char *n[] = {"neg",  "exp", "log",   "tanh", "sigmoid",  "gelu",
                            "relu", "sqrt", "rsqrt", "abs",  "softplus", "erf",
                            "exp_nonpos"};
  return (unsigned)fn < SH_ARRAY_LEN(n) ? n[fn] : "?";
}

const char *sh_lir_stmt_desc(const sh_lir_kernel *k, sh_lir_stmt s, char *buf, size_t cap) {
  if (s < 0 || s >= k->n_st) {
    snprintf(buf, cap, "statement %d (none)", (int)s);
    return buf;
  }
  const sh_lir_snode *n = &k->st[s];
  switch ((sh_lir_skind)n->kind) {
  case SH_LIR_S_LOOP: snprintf(buf, cap, "loop %s", k->vars[n->var].name); break;
  case SH_LIR_S_STORE: snprintf(buf, cap, "store to %s", k->bufs[n->buf].name); break;
  case SH_LIR_S_IF: snprintf(buf, cap, "if statement %d", (int)s); break;
  case SH_LIR_S_ALLOC: snprintf(buf, cap, "alloc of %s", k->bufs[n->buf].name); break;
  case SH_LIR_S_BLOCK: snprintf(buf, cap, "block %d", (int)s); break;
  case SH_LIR_S_PREFETCH: snprintf(buf, cap, "prefetch of %s", k->bufs[n->buf].name); break;
  }
  return buf;
}

/* ------------------------------------------------------------ verify */

typedef struct vctx {
  sh_lir_kernel *k;
  sh_lir_var bound[256];
  int n_bound;
  sh_lir_buf locals[64];
  int n_locals;
  sh_lir_buf scoped[64]; /* scoped temporaries in scope (visible inside parallel loops too) */
  int n_scoped;
  int in_vector, in_parallel;
  uint8_t *seen_var; /* each variable bound by one loop */
} vctx;

static sheaf_status vfail(vctx *v, sh_lir_stmt s, const char *msg, const char *name) {
  char d[96];
  return sh_lir_fail(v->k, SHEAF_ERR_INVALID_ARG, "kernel %s: %s: %s%s%s", v->k->name,
                     sh_lir_stmt_desc(v->k, s, d, sizeof d), msg, name ? " " : "",
                     name ? name : "");
}

static bool local_in_scope(const vctx *v, sh_lir_buf b) {
  for (int i = 0; i < v->n_locals; i++)
    if (v->locals[i] == b) return true;
  return false;
}

/* b is not a scoped temporary, or one whose alloc is around. */
static bool scoped_ok(const vctx *v, sh_lir_buf b) {
  if (!v->k->bufs[b].scoped) return true;
  for (int i = 0; i < v->n_scoped; i++)
    if (v->scoped[i] == b) return true;
  return false;
}

static sheaf_status vexpr(vctx *v, sh_lir_stmt s, sh_lir_expr e) {
  sh_lir_kernel *k = v->k;
  if (e < 0 || e >= k->n_ex) return vfail(v, s, "a missing expression", NULL);
  const sh_lir_enode *x = &k->ex[e];
  switch ((sh_lir_ekind)x->kind) {
  case SH_LIR_E_VAR: {
    for (int i = 0; i < v->n_bound; i++)
      if (v->bound[i] == x->a) return SHEAF_OK;
    return vfail(v, s, "uses a loop variable outside its loop:", k->vars[x->a].name);
  }
  case SH_LIR_E_BIN: {
    sheaf_status st = vexpr(v, s, x->a);
    return st ? st : vexpr(v, s, x->b);
  }
  case SH_LIR_E_UN:
  case SH_LIR_E_CAST: return vexpr(v, s, x->a);
  case SH_LIR_E_SELECT: {
    sheaf_status st = vexpr(v, s, x->a);
    if (!st) st = vexpr(v, s, x->b);
    return st ? st : vexpr(v, s, x->c);
  }
  case SH_LIR_E_LOAD: {
    const sh_lir_bufinfo *bi = &k->bufs[x->a];
    if (bi->inlined) return vfail(v, s, "reads inlined buffer", bi->name);
    if (bi->role == SH_LIR_LOCAL && !local_in_scope(v, x->a))
      return vfail(v, s, "reads a local outside its alloc:", bi->name);
    if (!scoped_ok(v, x->a)) return vfail(v, s, "reads a scoped temporary outside its alloc:", bi->name);
    if (x->n != bi->rank) return vfail(v, s, "wrong index count for", bi->name);
    for (int i = 0; i < x->n; i++) {
      sheaf_status st = vexpr(v, s, k->list[x->b + i]);
      if (st) return st;
    }
    return SHEAF_OK;
  }
  default: return SHEAF_OK;
  }
}

static sheaf_status vstmts(vctx *v, sh_lir_stmt s, sh_lir_stmt parent);

static sheaf_status vstmt(vctx *v, sh_lir_stmt s) {
  sh_lir_kernel *k = v->k;
  const sh_lir_snode *n = &k->st[s];
  sheaf_status st = SHEAF_OK;
  switch ((sh_lir_skind)n->kind) {
  case SH_LIR_S_BLOCK: return vstmts(v, n->body, s);
  case SH_LIR_S_LOOP: {
    if ((st = vexpr(v, s, n->ext))) return st;
    if (v->seen_var[n->var]) return vfail(v, s, "its variable is bound twice", NULL);
    if (k->vars[n->var].loop != s) return vfail(v, s, "variable bound to another loop", NULL);
    v->seen_var[n->var] = 1;
    int64_t c = 0;
    bool cst = sh_lir_is_const(k, n->ext, &c);
    if (n->annot == SH_LIR_VECTOR) {
      if (v->in_vector) return vfail(v, s, "a vector loop inside a vector loop", NULL);
      if (!cst || c != n->width || n->width < 1)
        return vfail(v, s, "a vector loop's extent must equal its width", NULL);
      for (sh_lir_stmt c2 = n->body; c2 >= 0; c2 = k->st[c2].next) {
        /* no loops inside (ifs and stores only) */
        sh_lir_stmt stack[64];
        int sp = 0;
        stack[sp++] = c2;
        while (sp) {
          sh_lir_stmt t = stack[--sp];
          if (k->st[t].kind == SH_LIR_S_LOOP || k->st[t].kind == SH_LIR_S_ALLOC)
            return vfail(v, s, "a vector loop may hold only stores and ifs", NULL);
          for (sh_lir_stmt u = k->st[t].body; u >= 0 && sp < 63; u = k->st[u].next) stack[sp++] = u;
          if (k->st[t].kind == SH_LIR_S_IF && k->st[t].els >= 0 && sp < 63)
            stack[sp++] = k->st[t].els;
        }
      }
    }
    if (n->annot == SH_LIR_UNROLL && (!cst || c < 0))
      return vfail(v, s, "an unrolled loop needs a constant extent", NULL);
    if (n->annot == SH_LIR_PARALLEL && (v->in_parallel || v->in_vector))
      return vfail(v, s, "a parallel loop inside a parallel or vector loop", NULL);
    if (v->n_bound >= (int)SH_ARRAY_LEN(v->bound)) return vfail(v, s, "nest too deep", NULL);
    v->bound[v->n_bound++] = n->var;
    v->in_vector += n->annot == SH_LIR_VECTOR;
    int saved_locals = v->n_locals;
    if (n->annot == SH_LIR_PARALLEL) {
      v->in_parallel++;
      v->n_locals = 0; /* locals outside are not visible to the outlined task */
    }
    st = vstmts(v, n->body, s);
    if (n->annot == SH_LIR_PARALLEL) {
      v->in_parallel--;
      v->n_locals = saved_locals;
    }
    v->in_vector -= n->annot == SH_LIR_VECTOR;
    v->n_bound--;
    return st;
  }
  case SH_LIR_S_IF:
    if ((st = vexpr(v, s, n->cond))) return st;
    if ((st = vstmts(v, n->body, s))) return st;
    if (n->els >= 0) {
      if (k->st[n->els].kind != SH_LIR_S_BLOCK || k->st[n->els].parent != s)
        return vfail(v, s, "malformed else block", NULL);
      return vstmts(v, k->st[n->els].body, n->els);
    }
    return SHEAF_OK;
  case SH_LIR_S_ALLOC: {
    if (k->bufs[n->buf].scoped) {
      if (v->in_vector) return vfail(v, s, "a scoped temporary inside a vector loop", NULL);
      if (v->n_scoped >= (int)SH_ARRAY_LEN(v->scoped)) return vfail(v, s, "too many scoped temporaries", NULL);
      for (int d = 0; d < k->bufs[n->buf].rank; d++)
        if ((st = vexpr(v, s, k->bufs[n->buf].dims[d]))) return st;
      v->scoped[v->n_scoped++] = n->buf;
      st = vstmts(v, n->body, s);
      v->n_scoped--;
      return st;
    }
    if (v->n_locals >= (int)SH_ARRAY_LEN(v->locals)) return vfail(v, s, "too many locals", NULL);
    if (k->bufs[n->buf].role != SH_LIR_LOCAL) return vfail(v, s, "not a local buffer", NULL);
    v->locals[v->n_locals++] = n->buf;
    st = vstmts(v, n->body, s);
    v->n_locals--;
    return st;
  }
  case SH_LIR_S_STORE: {
    const sh_lir_bufinfo *bi = &k->bufs[n->buf];
    if (bi->role == SH_LIR_IN) return vfail(v, s, "stores to an input", NULL);
    if (bi->inlined) return vfail(v, s, "stores to an inlined buffer", NULL);
    if (bi->role == SH_LIR_LOCAL && !local_in_scope(v, n->buf))
      return vfail(v, s, "stores to a local outside its alloc", NULL);
    if (!scoped_ok(v, n->buf)) return vfail(v, s, "stores to a scoped temporary outside its alloc", NULL);
    if (n->nidx != bi->rank) return vfail(v, s, "wrong index count", NULL);
    for (int i = 0; i < n->nidx; i++)
      if ((st = vexpr(v, s, k->list[n->idx + i]))) return st;
    if ((st = vexpr(v, s, n->val))) return st;
    if (k->ex[n->val].dtype != bi->dtype) return vfail(v, s, "value type differs", NULL);
    return SHEAF_OK;
  }
  case SH_LIR_S_PREFETCH: {
    const sh_lir_bufinfo *bi = &k->bufs[n->buf];
    if (!prefetchable(bi)) return vfail(v, s, "prefetches a buffer that is not a dense input or output", NULL);
    if (n->nidx != bi->rank) return vfail(v, s, "wrong index count", NULL);
    for (int i = 0; i < n->nidx; i++)
      if ((st = vexpr(v, s, k->list[n->idx + i]))) return st;
    return SHEAF_OK;
  }
  }
  return SHEAF_OK;
}

static sheaf_status vstmts(vctx *v, sh_lir_stmt s, sh_lir_stmt parent) {
  for (; s >= 0; s = v->k->st[s].next) {
    if (v->k->st[s].parent != parent) return vfail(v, s, "broken parent link", NULL);
    sheaf_status st = vstmt(v, s);
    if (st) return st;
  }
  return SHEAF_OK;
}

sheaf_status sh_lir_verify(sh_lir_kernel *k) {
  if (k->err) return k->err;
  vctx v;
  memset(&v, 0, sizeof v);
  v.k = k;
  v.seen_var = sh_calloc(k->ctx, (size_t)k->n_vars + 1, 1);
  if (!v.seen_var) return SHEAF_ERR_NOMEM;
  sheaf_status st = vstmt(&v, k->root);
  sh_free(k->ctx, v.seen_var, (size_t)k->n_vars + 1);
  if (st) {
    k->err = SHEAF_OK; /* a verify failure is reported, not sticky */
    return st;
  }
  return SHEAF_OK;
}
