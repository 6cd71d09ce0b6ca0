/*
 * finite.h — counting the non-finite values (NaN, +Inf, -Inf) of a block of
 * floating-point data in any of the safetensors float dtypes, straight from
 * the stored bytes (any alignment). Used where weights are loaded
 * (sheaf_model_load refuses them) and listed (`sheaf data stats`).
 */
#ifndef SH_IO_FINITE_H
#define SH_IO_FINITE_H

#include "base/base.h"

/* The number of non-finite values among the n elements of dtype dt at
 * bytes; *first (may be NULL) gets the index of the first one, n when there
 * is none. With as_f32, F64 values beyond float's range (they become ±Inf
 * when converted to F32) count as well. Integer and BOOL dtypes have none;
 * F8_E4M3 has NaN but no infinity. One pass of branch-free loops (the
 * compiler vectorizes them); the first index costs one more pass over at
 * most a block. */
uint64_t sh_count_nonfinite(sheaf_dtype dt, const void *bytes, size_t n, bool as_f32,
                            size_t *first);

/* Whether dt is a floating-point dtype (one that can hold non-finite values). */
bool sh_dtype_is_float(sheaf_dtype dt);

#endif
