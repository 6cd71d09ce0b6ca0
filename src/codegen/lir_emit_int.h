/*
 * lir_emit_int.h — the C emitter's state, shared by emit_c.c (statements,
 * functions, passes) and emit_c_expr.c (expressions and buffer accesses).
 */
#ifndef SH_CODEGEN_LIR_EMIT_INT_H
#define SH_CODEGEN_LIR_EMIT_INT_H

#include "codegen/lir_emit.h"
#include "codegen/lir_int.h"

enum { EM_UNBOUND = 0, EM_CVAR, EM_CONST }; /* how a loop variable is bound */
enum { EM_LOCAL_REG = 0, EM_LOCAL_ARRAY };    /* how a local buffer is held */

#define EM_MAX_BIND 256

typedef struct em {
  sh_lir_kernel *k;
  sh_buf *out; /* statements go here (the entry point or the task being outlined) */
  sh_buf tasks;
  int indent;
  uint8_t *vb;   /* per variable: EM_* binding */
  int64_t *vc;   /* per variable: its constant */
  /* constant bindings in scope, for substitution */
  sh_lir_var cv[EM_MAX_BIND];
  sh_lir_expr ce[EM_MAX_BIND];
  int n_c;
  /* C-variable loop variables in scope (captured by outlined tasks) */
  sh_lir_var live[EM_MAX_BIND];
  int n_live;
  sh_lir_var lane; /* the vector loop's variable (EM_UNBOUND while vector code is emitted) */
  int width;
  uint8_t *lm;   /* per buffer: EM_LOCAL_* */
  int32_t *lw;   /* per buffer: vector width of a register local (0: scalar registers) */
  bool changed;  /* this pass demoted a local: emit again */
  bool in_task;
  bool ldp;      /* a register tile's k loop whose panel vectors fit in registers beside its
                    accumulators: a packed panel's loads are sk_ldp (emit_c.c, loop) */
  int cold;      /* depth of unswitched slow copies (an if's else) being emitted: their
                    vector math calls the out-of-line sk_*_coldW (emit_c_expr.c) */
  int n_task;
  int n_tmp;
} em;

/* Appends an indented line. */
void sh_em_line(em *E, const char *fmt, ...) SH_PRINTF(2, 3);

/* Binding of loop variables while emitting. */
void sh_em_bind_const(em *E, sh_lir_var v, int64_t c);
void sh_em_unbind_const(em *E, sh_lir_var v);
/* e with every constant-bound variable replaced, simplified. */
sh_lir_expr sh_em_subst(em *E, sh_lir_expr e);

/* An integer expression (variables bound in E) as C. */
void sh_em_int(em *E, sh_lir_expr e, sh_buf *o);
/* A float expression: as a scalar, or (vec, inside a vector loop) as a
 * vector of E->width lanes (uniform parts broadcast). */
void sh_em_flt(em *E, sh_lir_expr e, bool vec, sh_buf *o);
/* e depends on the vector lane being emitted. */
bool sh_em_varies(const em *E, sh_lir_expr e);

/* A buffer element reference. */
typedef struct em_ref {
  bool reg;    /* a register lvalue in `text` */
  bool vec;    /* covers the W lanes: a vector register, or memory at pointer `text` */
  bool gather; /* lanes are not contiguous: emit lane by lane */
  /* lane `v_LANE` (a C variable) of the vector register named in `text`:
   * read as sk_laneW(text, v_LANE), written with sk_setlaneW, never
   * subscripted (a variable subscript would keep the register in memory) */
  bool lane_reg;
  sh_buf text; /* scalar: an lvalue; vector memory: a pointer expression */
} em_ref;

/* Resolves buf[idx] (n indices from the expression array idx). want_vec:
 * the W lanes of the current vector loop. Call sh_em_ref_free after. */
void sh_em_ref(em *E, sh_lir_buf b, int n, const sh_lir_expr *idx, bool want_vec, em_ref *r);
void sh_em_ref_free(em_ref *r);

void sh_em_float_const(sh_buf *o, float f);

#endif
