/*
 * attn_ref.h — the double-precision reference of ragged multi-head
 * attention shared by the generated-attention tests (test_codegen_attn.c,
 * test_codegen_read_ragged*.c), and their float comparison.
 */
#ifndef SHEAF_TESTS_ATTN_REF_H
#define SHEAF_TESTS_ATTN_REF_H

#include <stdbool.h>
#include <stdint.h>

/* softmax(q·kᵀ / sqrt(D))·v per sequence and head: tokens [T, H, D] of
 * sequences lens[0 .. nb) packed one after another (heads interleaved in
 * a token's row); out gets the same layout. */
void ar_mha(const int32_t *lens, int nb, int64_t H, int64_t D, const float *q, const float *k, const float *v,
            float *out);
/* Every got[i] within 2e-5 of want[i] relative to max(1, |want[i]|); else
 * a test failure naming `what` and the first element off. */
bool ar_close(const float *got, const float *want, int64_t n, const char *what);

#endif
