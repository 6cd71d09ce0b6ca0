/*
 * lir.h — the loop IR of generated kernels (docs/CODEGEN.md).
 *
 * A kernel is a list of buffers and one statement tree. Everything lives in
 * pools owned by the kernel and is named by a 32-bit id (no pointers between
 * nodes): expressions (integer and float, immutable and shared), statements
 * (loop, store, if, local allocation, block, prefetch hint; mutable, linked through
 * parent / next / body), buffers, loop variables and size symbols.
 *
 *   k = sh_lir_create(ctx, "matmul")
 *   M = sh_lir_size(k, "M") ...
 *   A = sh_lir_buffer(k, "A", SH_LIR_F32, SH_LIR_IN, 2, (sh_lir_expr[]){sh_lir_sz(k, M), ...})
 *   i = sh_lir_loop(k, sh_lir_root(k), "i", sh_lir_sz(k, M))
 *   ... sh_lir_store(k, j, C, 2, idx, value, SH_LIR_COMBINE_ADD)
 *
 * Builders never fail one by one: a misuse (wrong dtype, rank, unknown id)
 * records the error in the kernel and in ctx's last error, and every later
 * builder returns SH_LIR_NONE; sh_lir_status(k) reports it once at the end
 * (the sticky-error style of sh_buf). Schedule primitives (lir_sched.h)
 * rewrite the tree; emission (lir_emit.h) turns it into C.
 *
 * Semantics: loops run 0..extent-1 in order (a parallel or vector loop
 * asserts its iterations are independent); integers are int64 with floor
 * division and modulo; stores with a combine read-modify-write
 * (C[i] += v is C[i] = C[i] + v); float math is f32. Buffers are f32 or i32
 * (i32 ones hold ragged lengths and offsets, read by integer expressions).
 */
#ifndef SH_CODEGEN_LIR_H
#define SH_CODEGEN_LIR_H

#include "base/arena.h"
#include "base/base.h"
#include "base/buf.h"

#define SH_LIR_NONE (-1)
#define SH_LIR_MAX_RANK 8

typedef int32_t sh_lir_expr; /* expression id */
typedef int32_t sh_lir_stmt; /* statement id */
typedef int32_t sh_lir_buf;  /* buffer id */
typedef int32_t sh_lir_var;  /* loop variable id */
typedef int32_t sh_lir_sym;  /* size symbol id (a kernel argument) */

typedef enum sh_lir_dtype { SH_LIR_F32 = 0, SH_LIR_I32 } sh_lir_dtype;

typedef enum sh_lir_role {
  SH_LIR_IN = 0, /* argument, read only */
  SH_LIR_OUT,    /* argument, written (and may be read) */
  SH_LIR_TEMP,   /* allocated by the kernel for the whole call */
  SH_LIR_LOCAL   /* registers / a stack array inside an alloc statement; constant dims */
} sh_lir_role;

typedef enum sh_lir_layout {
  SH_LIR_LAYOUT_DENSE = 0, /* row-major; a dimension's storage extent may be padded to a tile */
  SH_LIR_LAYOUT_RAGGED,    /* CoRa: per outer index i0 a dense block at offsets[i0]; the
                              dimensions in ragged_mask have extent lengths[i0] */
  SH_LIR_LAYOUT_PANELS     /* rank 2 [K, N] input packed in panels of `panel` columns:
                              (k, n) at (n / panel)·K·panel + k·panel + n % panel, N
                              zero-padded to whole panels (a packed weight) */
} sh_lir_layout;

typedef enum sh_lir_access {
  SH_LIR_ACCESS_DENSE = 0, /* base pointer, every stride derived from the dims */
  SH_LIR_ACCESS_LD,        /* base pointer, dimension 0's stride passed in (arg.ld) */
  SH_LIR_ACCESS_ROWS       /* one pointer per index of dimension 0 (arg.rows): gathered rows */
} sh_lir_access;

typedef struct sh_lir_bufinfo {
  const char *name;
  uint8_t dtype, role, layout, access;
  bool weight;  /* an input passed once per weight version: may be packed */
  bool inlined; /* a temporary removed by compute_inline: never allocated */
  bool per_task; /* a temporary with one copy per pool thread (sh_sched_shrink): a parallel
                    loop's task uses its thread's copy */
  bool scratch; /* an OUT that is the caller's scratch (a ragged temporary of the notation): its
                   values are not read after the call */
  bool scoped;  /* a temporary allocated by its alloc statement (sized when that runs) instead
                   of for the whole call */
  int rank;
  sh_lir_expr dims[SH_LIR_MAX_RANK]; /* SH_LIR_NONE for ragged dims */
  int64_t pad[SH_LIR_MAX_RANK];      /* storage extent rounded up to a multiple (1: none) */
  uint32_t ragged_mask;              /* RAGGED: bit d set when dim d has extent lengths[i0] */
  sh_lir_buf lengths, offsets;       /* RAGGED: i32 buffers [dims[0]] */
  int64_t panel;                     /* PANELS: columns per panel */
} sh_lir_bufinfo;

typedef enum sh_lir_ekind {
  SH_LIR_E_INT = 0, /* i */
  SH_LIR_E_FLT,     /* f */
  SH_LIR_E_SYM,     /* a: symbol */
  SH_LIR_E_VAR,     /* a: loop variable */
  SH_LIR_E_BIN,     /* op, a, b */
  SH_LIR_E_UN,      /* op (sh_lir_fn), a */
  SH_LIR_E_LOAD,    /* a: buffer, b: first index in the list pool, n indices */
  SH_LIR_E_SELECT,  /* a ? b : c, a a float (nonzero: true) */
  SH_LIR_E_CAST,    /* (float) a, a an integer */
  SH_LIR_E_LD       /* a: buffer; dimension 0's stride of an LD-access argument (emission) */
} sh_lir_ekind;

typedef enum sh_lir_op {
  SH_LIR_OP_ADD = 0,
  SH_LIR_OP_SUB,
  SH_LIR_OP_MUL,
  SH_LIR_OP_DIV, /* integers: floor division */
  SH_LIR_OP_MOD, /* integers: floor modulo (sign of the divisor) */
  SH_LIR_OP_MIN,
  SH_LIR_OP_MAX,
  SH_LIR_OP_POW, /* floats only */
  SH_LIR_OP_LT,  /* comparisons: 1 / 0 in the operands' type */
  SH_LIR_OP_LE,
  SH_LIR_OP_GT,
  SH_LIR_OP_GE,
  SH_LIR_OP_EQ,
  SH_LIR_OP_NE,
  SH_LIR_OP_AND, /* integers only: short-circuit, for conditions */
  SH_LIR_OP_OR
} sh_lir_op;

typedef enum sh_lir_fn {
  SH_LIR_FN_NEG = 0,
  SH_LIR_FN_EXP,
  SH_LIR_FN_LOG,
  SH_LIR_FN_TANH,
  SH_LIR_FN_SIGMOID,
  SH_LIR_FN_GELU, /* erf form: x·Φ(x) */
  SH_LIR_FN_RELU,
  SH_LIR_FN_SQRT,
  SH_LIR_FN_RSQRT,
  SH_LIR_FN_ABS,
  SH_LIR_FN_SOFTPLUS,
  SH_LIR_FN_ERF,
  SH_LIR_FN_EXP_NONPOS /* exp of an argument proven <= 0 (or NaN): set by the schedule
                          (sh_sched_exp_ranges); 0 below -87.3 where exp is subnormal */
} sh_lir_fn;

typedef enum sh_lir_combine {
  SH_LIR_COMBINE_NONE = 0, /* plain store */
  SH_LIR_COMBINE_ADD,
  SH_LIR_COMBINE_MUL,
  SH_LIR_COMBINE_MAX,
  SH_LIR_COMBINE_MIN
} sh_lir_combine;

typedef struct sh_lir_enode {
  uint8_t kind, op, dtype, n;
  int32_t a, b, c;
  int64_t i;
  float f;
} sh_lir_enode;

typedef enum sh_lir_skind {
  SH_LIR_S_BLOCK = 0, /* body */
  SH_LIR_S_LOOP,      /* for var in 0..ext: body */
  SH_LIR_S_STORE,     /* buf[idx] (combine)= val */
  SH_LIR_S_IF,        /* if cond: body, else: els (a BLOCK or NONE) */
  SH_LIR_S_ALLOC,     /* local buffer buf lives in body */
  SH_LIR_S_PREFETCH   /* a hint: the cache line of buf[idx] will be read (an input) or
                         written (an output) soon; no effect on
                         what the kernel computes, and idx may lie past the storage (read
                         nothing there: the emitted __builtin_prefetch does not fault) */
} sh_lir_skind;

typedef enum sh_lir_annot {
  SH_LIR_SERIAL = 0,
  SH_LIR_PARALLEL, /* over the runtime's pool (the ABI's parallel function) */
  SH_LIR_VECTOR,   /* lanes of one vector of `width` */
  SH_LIR_UNROLL    /* replicated by emission (constant extent) */
} sh_lir_annot;

typedef struct sh_lir_snode {
  uint8_t kind, annot, combine;
  int32_t width; /* VECTOR: lanes */
  sh_lir_stmt parent, next, body;
  sh_lir_var var; /* LOOP */
  sh_lir_expr ext;
  sh_lir_expr cond; /* IF */
  sh_lir_stmt els;
  sh_lir_buf buf; /* STORE, ALLOC */
  int32_t idx;    /* STORE: first index in the list pool */
  int32_t nidx;
  sh_lir_expr val;
} sh_lir_snode;

typedef struct sh_lir_varinfo {
  const char *name;
  sh_lir_stmt loop; /* the loop binding it (SH_LIR_NONE once the loop is gone) */
} sh_lir_varinfo;

/* An index check (a gather's index tensor, docs/CODEGEN.md "Gathers"):
 * every element of the dense i32 IN buffer buf lies in 0 .. ext-1, ext an
 * expression of the sizes; checked once per call before anything runs. A
 * failure: the emitted entry returns 2, the interpreter fails with
 * SHEAF_ERR_INVALID_ARG naming the element ("lab[3] = 300 is outside 0 ..
 * 255 (the extent of z's dimension 1)"; target and dim name what is indexed). */
typedef struct sh_lir_check {
  sh_lir_buf buf;
  sh_lir_expr ext;
  const char *target;
  int dim;
} sh_lir_check;

typedef struct sh_lir_kernel {
  sheaf_ctx *ctx;
  sh_arena arena; /* names */
  const char *name;
  sh_lir_enode *ex;
  int32_t n_ex, cap_ex;
  int32_t *list; /* index lists of loads and stores */
  int32_t n_list, cap_list;
  sh_lir_snode *st;
  int32_t n_st, cap_st;
  sh_lir_bufinfo *bufs;
  int32_t n_bufs, cap_bufs;
  sh_lir_varinfo *vars;
  int32_t n_vars, cap_vars;
  const char **syms;
  int32_t n_syms, cap_syms;
  sh_lir_stmt root; /* a BLOCK */
  sheaf_status err; /* sticky builder error */
  sh_lir_check *checks; /* index checks, run before the statements */
  int32_t n_checks, cap_checks;
} sh_lir_kernel;

/* ------------------------------------------------------------- kernel */

/* name: a C identifier (it names the emitted entry point). */
sheaf_status sh_lir_create(sheaf_ctx *ctx, const char *name, sh_lir_kernel **out);
void sh_lir_free(sh_lir_kernel *k);
/* SHEAF_OK, or the first builder error (its message is ctx's last error). */
sheaf_status sh_lir_status(const sh_lir_kernel *k);
static inline sh_lir_stmt sh_lir_root(const sh_lir_kernel *k) { return k->root; }
/* Records a builder error (first one wins) and returns it. */
sheaf_status sh_lir_fail(sh_lir_kernel *k, sheaf_status s, const char *fmt, ...) SH_PRINTF(3, 4);

/* A size symbol (kernel argument sizes[id], in creation order). */
sh_lir_sym sh_lir_size(sh_lir_kernel *k, const char *name);

/* A buffer. Arguments (IN / OUT) are passed in creation order. dims: rank
 * integer expressions (LOCAL: constants). */
sh_lir_buf sh_lir_buffer(sh_lir_kernel *k, const char *name, sh_lir_dtype dtype, sh_lir_role role,
                         int rank, const sh_lir_expr *dims);
/* Makes b ragged: the dimensions in mask (not 0) have extent lengths[i0];
 * values of index i0 start at element offsets[i0]. lengths and offsets are
 * i32 IN buffers of rank 1. */
sheaf_status sh_lir_buffer_ragged(sh_lir_kernel *k, sh_lir_buf b, uint32_t mask,
                                  sh_lir_buf lengths, sh_lir_buf offsets);
sheaf_status sh_lir_buffer_access(sh_lir_kernel *k, sh_lir_buf b, sh_lir_access access);
/* Adds an index check (sh_lir_check; the same one twice is kept once). */
sheaf_status sh_lir_index_check(sh_lir_kernel *k, sh_lir_buf b, sh_lir_expr ext, const char *target,
                                int dim);
/* Marks an input as a weight (passed once per version: the default schedule may pack it). */
sheaf_status sh_lir_buffer_weight(sh_lir_kernel *k, sh_lir_buf b);
/* Marks a dense TEMP as scoped: it lives in an alloc statement (sh_lir_alloc),
 * which sizes it from its dims when it runs (they may read i32 buffers and
 * the variables of loops around it); not inside a vector loop. Inside a
 * parallel loop each task allocates its own (emitted: the C heap; a failed
 * allocation fails the call). */
sheaf_status sh_lir_buffer_scoped(sh_lir_kernel *k, sh_lir_buf b);

/* ------------------------------------------------------ expressions */

sh_lir_expr sh_lir_int(sh_lir_kernel *k, int64_t v);
sh_lir_expr sh_lir_flt(sh_lir_kernel *k, float v);
sh_lir_expr sh_lir_sz(sh_lir_kernel *k, sh_lir_sym s);
sh_lir_expr sh_lir_v(sh_lir_kernel *k, sh_lir_var v);
/* The variable of loop s, as an expression. */
sh_lir_expr sh_lir_lv(sh_lir_kernel *k, sh_lir_stmt loop);
/* Binary op; both operands of one dtype (constants are folded). */
sh_lir_expr sh_lir_bin(sh_lir_kernel *k, sh_lir_op op, sh_lir_expr a, sh_lir_expr b);
sh_lir_expr sh_lir_add(sh_lir_kernel *k, sh_lir_expr a, sh_lir_expr b);
sh_lir_expr sh_lir_sub(sh_lir_kernel *k, sh_lir_expr a, sh_lir_expr b);
sh_lir_expr sh_lir_mul(sh_lir_kernel *k, sh_lir_expr a, sh_lir_expr b);
sh_lir_expr sh_lir_un(sh_lir_kernel *k, sh_lir_fn fn, sh_lir_expr a);
sh_lir_expr sh_lir_select(sh_lir_kernel *k, sh_lir_expr cond, sh_lir_expr a, sh_lir_expr b);
sh_lir_expr sh_lir_cast(sh_lir_kernel *k, sh_lir_expr a);
sh_lir_expr sh_lir_load(sh_lir_kernel *k, sh_lir_buf b, int n, const sh_lir_expr *idx);
sh_lir_expr sh_lir_load1(sh_lir_kernel *k, sh_lir_buf b, sh_lir_expr i0);
sh_lir_expr sh_lir_load2(sh_lir_kernel *k, sh_lir_buf b, sh_lir_expr i0, sh_lir_expr i1);
sh_lir_expr sh_lir_load3(sh_lir_kernel *k, sh_lir_buf b, sh_lir_expr i0, sh_lir_expr i1,
                         sh_lir_expr i2);

static inline const sh_lir_enode *sh_lir_en(const sh_lir_kernel *k, sh_lir_expr e) {
  return &k->ex[e];
}
/* The integer value of a constant expression. */
bool sh_lir_is_const(const sh_lir_kernel *k, sh_lir_expr e, int64_t *v);
/* Structural equality. */
bool sh_lir_expr_eq(const sh_lir_kernel *k, sh_lir_expr a, sh_lir_expr b);

/* ------------------------------------------------------- statements */

/* Each appends to the body of `parent` (a block, loop, if, alloc) and
 * returns the new statement. */
sh_lir_stmt sh_lir_loop(sh_lir_kernel *k, sh_lir_stmt parent, const char *var, sh_lir_expr extent);
sh_lir_stmt sh_lir_store(sh_lir_kernel *k, sh_lir_stmt parent, sh_lir_buf b, int n,
                         const sh_lir_expr *idx, sh_lir_expr value, sh_lir_combine combine);
sh_lir_stmt sh_lir_store1(sh_lir_kernel *k, sh_lir_stmt parent, sh_lir_buf b, sh_lir_expr i0,
                          sh_lir_expr value, sh_lir_combine combine);
sh_lir_stmt sh_lir_store2(sh_lir_kernel *k, sh_lir_stmt parent, sh_lir_buf b, sh_lir_expr i0,
                          sh_lir_expr i1, sh_lir_expr value, sh_lir_combine combine);
sh_lir_stmt sh_lir_if(sh_lir_kernel *k, sh_lir_stmt parent, sh_lir_expr cond);
/* A software prefetch of the line holding b[idx] (an IN buffer, or an OUT
 * one: fetched for writing; dense or panels layout, dense or row-stride
 * access): emitted as __builtin_prefetch of the
 * element's address, computed without dereferencing anything, so idx may
 * be past the end (the interpreter skips it). */
sh_lir_stmt sh_lir_prefetch(sh_lir_kernel *k, sh_lir_stmt parent, sh_lir_buf b, int n,
                            const sh_lir_expr *idx);
/* The else block of an if (created on first use). */
sh_lir_stmt sh_lir_else(sh_lir_kernel *k, sh_lir_stmt if_stmt);
/* A scope for the LOCAL (or scoped TEMP) buffer b. */
sh_lir_stmt sh_lir_alloc(sh_lir_kernel *k, sh_lir_stmt parent, sh_lir_buf b);

static inline const sh_lir_snode *sh_lir_sn(const sh_lir_kernel *k, sh_lir_stmt s) {
  return &k->st[s];
}
sh_lir_var sh_lir_loop_var(const sh_lir_kernel *k, sh_lir_stmt loop);
/* The loop whose variable is named `name`, or SH_LIR_NONE. */
sh_lir_stmt sh_lir_find_loop(const sh_lir_kernel *k, const char *name);

/* ---------------------------------------------------- checks, text, run */

/* Checks the whole kernel: variables used only inside their loops, index
 * counts against ranks, dtypes, stores only to OUT / TEMP / LOCAL buffers,
 * locals used only inside their alloc, vector loops well formed. Fails with
 * SHEAF_ERR_INVALID_ARG and a message naming the statement. */
sheaf_status sh_lir_verify(sh_lir_kernel *k);

/* Appends the kernel as readable text (deterministic). */
void sh_lir_print(const sh_lir_kernel *k, sh_buf *out);
/* One expression / statement subtree (indent in spaces). */
void sh_lir_print_expr(const sh_lir_kernel *k, sh_lir_expr e, sh_buf *out);
void sh_lir_print_stmt(const sh_lir_kernel *k, sh_lir_stmt s, int indent, sh_buf *out);

/* An argument of a kernel run (the same fields the emitted ABI passes). */
typedef struct sh_lir_arg {
  void *data;
  void *const *rows; /* ROWS access */
  int64_t ld;        /* LD access */
} sh_lir_arg;

/* Runs the kernel on the scalar reference interpreter (one thread, every
 * annotation ignored): sizes[sym], args[] one per IN / OUT buffer in
 * creation order. Float math as the emitted scalar level (libm; its
 * exp_nonpos is sk_expnpf, within 5 ulp of this expf). A loop or
 * a temporary over 2^31 elements, or an index outside a buffer's storage,
 * fails with SHEAF_ERR_INVALID_ARG (the interpreter checks every access). */
sheaf_status sh_lir_run(sh_lir_kernel *k, const int64_t *sizes, const sh_lir_arg *args);

#endif
