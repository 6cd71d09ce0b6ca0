/*
 * hostprog.h — the host program: a checked module's functions compiled to
 * a compact register bytecode (hostprog.c) and run by a small VM
 * (hostvm.c) in place of the AST walker (interp.c).
 *
 * Every local of a function is a register (its checker slot, so the
 * walker can run any part of a function on the same frame); temporaries
 * follow. Names, calls and constructors are resolved, the sums the walker
 * recognises at run time (`x @ W + h @ U + b`: one affine, interp.c
 * tensor_sum) are decided at compile time, i32 arithmetic on constants and
 * valued sizes is folded, and a match on an ADT dispatches on the
 * constructor's tag through a table. The VM issues exactly the builders
 * the walker issues, in the same order, with the same run-time errors at
 * the same FILE:LINE:COL.
 *
 * Builtins that take lists, functions or wait for values call the
 * walker's code for them (interp_builtin.c) with the arguments the VM
 * evaluated; a while loop runs the walker's loop (its regions) with the
 * VM's code for its condition and body. What the compiler does not lower
 * (nothing in the examples) is one EVAL instruction: the walker evaluates
 * that expression on the VM's frame (its calls come back to the VM);
 * sh_hostprog_describe names those places ("a name at f.sf:12:5").
 */
#ifndef SH_LANG_HOSTPROG_H
#define SH_LANG_HOSTPROG_H

#include "lang/interp_int.h"

typedef enum sh_hp_op {
  HP_MOV,    /* dst = a */
  HP_KINT,   /* dst = i32 imm */
  HP_KBOOL,  /* dst = bool imm */
  HP_KF32,   /* dst = host float e->fval */
  HP_KTEN,   /* dst = f32[1] tensor e->fval (sheaf_input_vector) */
  HP_PARAM,  /* dst = sheaf_parameter(param imm) */
  HP_CTOR0,  /* dst = constructor imm without fields */
  HP_EVAL,   /* dst = the walker's value of e */
  HP_JMP,    /* pc = imm */
  HP_JZ,     /* if !a.i: pc = imm */
  HP_JNZ,    /* if a.i: pc = imm */
  HP_TBIN,   /* dst = fn2(a, b) (a tensor builder) */
  HP_T1,     /* dst = fn1(a) */
  HP_TNEG,   /* dst = -a (sheaf_scale by -1) */
  HP_IBIN,   /* dst = a op(imm) b, i32 (overflow, division: errors at e) */
  HP_INEG,   /* dst = -a, i32 */
  HP_NOT,    /* dst = !a */
  HP_FBIN,   /* dst = a op(imm) b, host floats */
  HP_FNEG,   /* dst = -a, host float */
  HP_AFFINE, /* dst = sheaf_affine(param imm, a, bias param k or -1) */
  HP_SUM,    /* dst = the sum described by sums[imm] */
  HP_LOOKUP, /* dst = row a (an i32) of table param imm (errors at e) */
  HP_INDEX,  /* dst = a[b]: a list's element, a matrix's row, a vector's element */
  HP_SLICE,  /* dst = a[k : imm] */
  HP_SLICEX, /* dst = a[lo : hi] with e's sizes evaluated now */
  HP_AGG,    /* dst = aggregate kind c (SH_V_*), tag imm, of n registers from a */
  HP_FIELD,  /* dst = a.items[imm] */
  HP_TAGSW,  /* pc = table[a.tag] (tables at imm) */
  HP_TTAG,   /* if a.tag != n: pc = imm */
  HP_TINT,   /* if a.i != k: pc = imm */
  HP_CALL,   /* dst = fn p (n arguments from a), call site e */
  HP_KCALL,  /* dst = kernel imm of n tensors from a */
  HP_REGION, /* dst = region p (sh_lang_region) on n vectors from a: one sheaf_kernel_call */
  HP_BI,     /* dst = builtin e of n values from a (c: map / fold / scan, a unused) */
  HP_BL,     /* dst = list builtin, wait point or push e of n values from a */
  HP_LSTM,   /* dst = lstm_cell(e's W, b, a, a+1) */
  HP_TLSTM,  /* dst = tree_lstm_cell(e's W, b, a, a+1, a+2) */
  HP_CAT,    /* dst = sheaf_concat of n tensors from a */
  HP_PHASE,  /* dst.i = the phase now; phase imm */
  HP_PHASE_END, /* phase a.i */
  HP_FOR,    /* a for loop's start (see hostvm.c) */
  HP_FORNEXT,
  HP_FORSTORE,
  HP_FAIL,   /* the error p (a message) */
  HP_CHECK,  /* nothing: chk */
  HP_WHILE,  /* dst = a while loop e of bound a, initial state b (see hostvm.c) */
  HP_YIELD,  /* the end of a while loop's condition or body: its value a */
  HP_RET     /* return a */
} sh_hp_op;

typedef struct sh_hp_ins {
  uint8_t op;
  uint8_t chk;     /* then: a builder that failed gets e's position (the walker's built()) */
  uint16_t n;
  uint16_t dst, a, b, c;
  int32_t imm;
  int64_t k;
  union {
    const void *p; /* a callee (sh_fn), a message */
    sh_builder1 f1;
    sh_builder2 f2;
  };
  const sh_ast *e; /* the source node: errors, EVAL */
} sh_hp_ins;

/* One sum of parameter products and other terms (interp.c tensor_sum). */
typedef struct sh_hp_sum {
  int np, at, n_mm; /* pieces; the affine's place among them; products */
  int w[4];         /* the products' weight params */
  int bias;         /* param index or -1 */
  uint16_t xs[4];   /* the products' left operands */
  uint16_t pieces[8]; /* the other terms (pieces[at] is the affine's) */
} sh_hp_sum;

typedef struct sh_hp_fn {
  sh_hp_ins *code; /* NULL: the walker runs this function */
  int n_code;
  int n_regs;      /* locals, then temporaries */
  const sh_ast *walked;  /* the first expression the walker evaluates, or NULL */
  const char *why;       /* what that is ("while") or why nothing was compiled */
  int n_walked;
} sh_hp_fn;

typedef struct sh_hostprog {
  sheaf_ctx *ctx;
  int n_fns;
  sh_hp_fn *fns;       /* by sh_fn index */
  sh_hp_sum *sums;
  int n_sums, cap_sums;
  int32_t *tables;     /* jump tables of TAGSW */
  int n_tables, cap_tables;
} sh_hostprog;

/* Compiles every function of ip's module (ip: its sizes, to fold the
 * valued ones). */
sheaf_status sh_hostprog_compile(sh_interp *ip, sh_hostprog **out);
/* The same for module m with ip NULL: sizes are not known, so nothing is
 * folded; for a report (sh_hostprog_describe_module), never run. */
sheaf_status sh_hostprog_compile_m(const sh_module *m, sh_interp *ip, sh_hostprog **out);
/* sh_hostprog_describe of m's host program (what `sheaf check` prints). */
sheaf_status sh_hostprog_describe_module(const sh_module *m, char *buf, size_t cap);
void sh_hostprog_free(sh_hostprog *hp);
/* "host program: 5 functions compiled, 1 with parts interpreted (while at
 * f.sf:12:5)". */
void sh_hostprog_describe(const sh_hostprog *hp, const sh_module *m, char *buf, size_t cap);

/* hostvm.c: f's body on frame fr (parameters bound, hp->fns[f].n_regs slots). */
sh_value sh_hostvm_run(sh_interp *ip, const sh_hp_fn *hf, sh_value *fr);

#endif
