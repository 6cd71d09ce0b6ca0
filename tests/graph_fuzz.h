/*
 * graph_fuzz.h — the differential graph fuzzer: random programs over every
 * builder of sheaf_graph.h (inputs, parameters, lookups, affine and
 * affine_n, matmul, the elementwise ops with scalar broadcast, sum_n,
 * activations, exp/log, sqrt/rsqrt, abs, softplus, erf, pow, minimum and
 * maximum, concat, slice, reshape, stack, transpose, reductions, softmax,
 * layer_norm, pick, row,
 * LSTM cells, phases, values read mid-build), run for several instances on
 * one graph under every policy and thread count, every value compared with
 * policy none on one thread (within 1e-5 relative, floor 1).
 *
 * A program is generated once from a source of choices (libFuzzer's bytes,
 * or a seeded stream) and then built per instance with per-instance data;
 * some steps run only for some instances (the others take an earlier value
 * of the same shape instead), so instances differ in depth and shape like
 * trees do. Values are kept well conditioned by construction (bounded
 * magnitudes, exp of small values, log and division of values bounded away
 * from zero), so a difference beyond the bound is a runtime bug.
 *
 * Users: tests/test_graph_fuzz.c (seeded, in `make test`) and
 * fuzz/fuzz_graph.c (libFuzzer).
 */
#ifndef SHEAF_TEST_GRAPH_FUZZ_H
#define SHEAF_TEST_GRAPH_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sheaf.h"

/* Where the generator's choices come from: `data` (zeros once used up) or,
 * when data is NULL, a xorshift stream seeded by `rng` (nonzero). */
typedef struct gf_src {
  const uint8_t *data;
  size_t size, pos;
  uint64_t rng;
} gf_src;

typedef struct gf_world gf_world;

/* A model with the parameters programs use and one graph per configuration
 * (kept across programs, reset after each). */
sheaf_status gf_world_create(sheaf_ctx *ctx, gf_world **out);
void gf_world_free(gf_world *w); /* NULL is fine */

typedef struct gf_result {
  bool ok;            /* every configuration built, ran and agreed with the reference */
  char msg[512];      /* else what went wrong: configuration, step, instance, element */
  unsigned steps, values, instances;
} gf_result;

/* Generates one program from src and runs it in every configuration. */
void gf_run(gf_world *w, gf_src *src, gf_result *res);

/* Writes the last generated program as a listing (for a failure report). */
void gf_dump(const gf_world *w, FILE *f);

#endif
