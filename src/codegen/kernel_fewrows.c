/*
 * kernel_fewrows.c — the few-rows variant of a kernel with a GEMM
 * (docs/CODEGEN.md, "Few rows"): which register tile a call binding the
 * kernel's row size (its GEMM's M) to a few rows runs instead of the
 * default mr x nr one. The default tile (AVX2 6 x 16) at 1 or 2 rows keeps
 * 2 or 4 accumulators, so each k waits on the FMA's latency; a wider tile
 * of the same rows (1 x 8 vectors, 2 x 4 vectors: 8 accumulators) keeps
 * both FMA pipes busy and streams each weight panel once, as the hand
 * GEMM's small-M path (src/kernels/gemm_small.c). The kernel compiles the
 * variant on first use (kernel_api.c, `variant`: its own packed copy of
 * the weight, in panels of the wider tile) and picks it per call by the
 * bound row count (plans: once, at make).
 */
#include <string.h>

#include "codegen/kernel_api.h"

#ifndef SH_FEW_ROWS_MAX /* row counts up to this run the few-rows variant */
#define SH_FEW_ROWS_MAX 2
#endif

bool sh_kernel_few_rows_opts(sheaf_isa isa, int64_t rows, sh_sched_opts *o) {
  if (rows < 1 || rows > SH_FEW_ROWS_MAX) return false;
  int w = isa == SHEAF_ISA_AVX512 ? 16 : isa == SHEAF_ISA_AVX2 ? 8 : 1;
  memset(o, 0, sizeof *o);
  o->mr = (int)rows;
  o->nr = 8 * w / (int)rows; /* 8 accumulators */
  o->rem_rows = -1;          /* the variant runs whole tiles at its row count */
  return true;
}
