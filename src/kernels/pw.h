/*
 * pw.h — pointwise programs and the kernel that runs them: the program type
 * (a small stack machine over the elementwise ops of ops.def, built and
 * interned by the runtime, src/runtime/pointwise.c), a job (a program's
 * leaves, output and side outputs over m rows, in the GEMM's operand
 * convention, gemm.h) and the per-ISA row interpreters, chosen like the
 * other kernels from a sheaf_isa (sh_pw_kernels_get, lowered to what the
 * host supports). The runtime builds jobs from batches of graph nodes and
 * splits their rows over the pool (src/runtime/pw_exec.c).
 *
 * The interpreters (pw_scalar.c, pw_avx2.c, pw_avx512.c) are one template,
 * pw_interp.h, over the ops' bodies in pw_ops.h: the scalar reference and
 * the AVX2 and AVX-512 bodies of each op side by side. Every level runs a
 * row in chunks of 128 floats, each stack slot one chunk; the vector levels
 * prefetch the next row (scattered rows defeat the hardware prefetchers).
 */
#ifndef SH_KERNELS_PW_H
#define SH_KERNELS_PW_H

#include "kernels/gemm.h"

/* Opcodes: LOAD pushes leaf arg; STORE writes the top to side output arg
 * (not popped); then one opcode per op of ops.def, in its order, so that
 * SH_PW_<ID> = SH_PW_OPS + SH_OP_<ID> (runtime.h numbers the ops from the
 * same table and checks it). The elementwise ones are used: binary pops b,
 * pops a, pushes a op b; unary replaces the top; SH_PW_SCALE: top *= k[arg]. */
typedef enum sh_pw_opc {
  SH_PW_LOAD = 0,
  SH_PW_STORE,
#define SH_OP(ID, name, cls, arity, form, act) SH_PW_##ID,
#include "kernels/ops.def"
  SH_PW_COUNT,
  SH_PW_OPS = SH_PW_STORE + 1 /* the first op's opcode */
} sh_pw_opc;
_Static_assert(SH_PW_COUNT <= 256, "opcodes are bytes");

#define SH_PW_MAX_CODE 48
#define SH_PW_MAX_LEAVES 16
#define SH_PW_MAX_STACK 8
#define SH_PW_MAX_CONST 4
#define SH_PW_MAX_SIDE 4

/* A pointwise program: a stack machine over `n_leaves` input rows (each
 * [cols] or a broadcast scalar), run in chunks of a row. Leaf k reads
 * columns [off[k], off[k] + cols) of value slot[k] (a slice is read through
 * its source: slices of one value share a slot). Built at flush from a root
 * node and the chain of pointwise producers it absorbed; interned per graph
 * (its id is the FUSED signature's p0), so identical cells batch. */
typedef struct sh_pw_prog {
  uint8_t n_code, n_leaves, n_slots, n_const, n_side, stack, pad[2];
  uint8_t op[SH_PW_MAX_CODE], arg[SH_PW_MAX_CODE];
  uint8_t slot[SH_PW_MAX_LEAVES];
  int32_t off[SH_PW_MAX_LEAVES];
  float k[SH_PW_MAX_CONST];
} sh_pw_prog;

/* A leaf's rows: row r is in's row r (row 0 for every r when row_bc) from
 * column off; col_bc: its first float stands for every column. */
typedef struct sh_pw_leaf {
  sh_gemm_in in;
  int64_t off;
  bool row_bc;
  bool col_bc;
} sh_pw_leaf;

/* Program p over m rows of n columns: leaf k is a[k], the result goes to y,
 * side output i to s[i]. Outputs must not overlap the leaves. */
typedef struct sh_pw_job {
  const sh_pw_prog *p;
  int64_t m, n;
  sh_pw_leaf a[SH_PW_MAX_LEAVES];
  sh_gemm_out y, s[SH_PW_MAX_SIDE];
} sh_pw_job;

/* Runs rows [r0, r1) of a job (single-threaded: callers split rows). */
typedef void (*sh_pw_rows_fn)(const sh_pw_job *j, int64_t r0, int64_t r1);

typedef struct sh_pw_kernels {
  const char *name;
  sh_pw_rows_fn rows;
} sh_pw_kernels;

/* The interpreters of `isa` (lowered to what the host supports). */
const sh_pw_kernels *sh_pw_kernels_get(sheaf_isa isa);

void sh_f32_pw_ukernel__scalar(const sh_pw_job *j, int64_t r0, int64_t r1);
void sh_f32_pw_ukernel__avx2(const sh_pw_job *j, int64_t r0, int64_t r1);
void sh_f32_pw_ukernel__avx512(const sh_pw_job *j, int64_t r0, int64_t r1);

#endif
