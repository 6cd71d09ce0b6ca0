/*
 * bench_dynamic.h — the row type of `make bench-dynamic` (bench/bench_dynamic.c):
 * models whose control flow depends on computed values (a decoder that stops
 * at EOS, an early-exit classifier, a parser choosing actions by argmax),
 * each timed on the bundled EWT sentences, 64 instances, 1 thread:
 *
 *   Sheaf batched   sheaf_runner_run_fibers on a runner of batch 64: every
 *                   sheaf_value mid-build suspends the instance; one flush
 *                   per round, batched across the live instances
 *   Sheaf single    sheaf_runner_run on a runner of batch 1: each
 *                   sheaf_value is a flush of one instance's graph
 *   DyNet           the row's peer (<dynet-dir>/bin/<dynet_bin>) at
 *                   --dynet-autobatch 0, 1, 2, the best reported
 *
 * A row is a bench_dyn_model. bench_dynamic.c holds its own rows (the greedy
 * decoder and its beam search); more rows come from
 * bench_dyn_extra_models(), defined (weak) in bench_dynamic.c as "none" and
 * overridden by bench/bench_dynamic_models.c when that file exists (the
 * Makefile links it into bench_dynamic).
 */
#ifndef SHEAF_BENCH_DYNAMIC_H
#define SHEAF_BENCH_DYNAMIC_H

#include <stdbool.h>
#include <stddef.h>

#include "io/dataset.h"
#include "sheaf.h"

/* What every row gets from the benchmark. */
typedef struct bench_dyn_env {
  sheaf_ctx *ctx;          /* 1 thread */
  const sh_dataset *sents; /* the bundled EWT sentences (SH_DATASET_SENTS, CoNLL-U: tags,
                              heads and deprels present) */
  int32_t n;               /* instances per pass: sentences [0, n) (64) */
  int64_t hidden;          /* --hidden (default 256) */
  bool quick;              /* --quick: shorter windows */
  /* A path in the benchmark's temporary directory (removed at exit) for a
   * file `name` (weights, inputs, the peer's check output). */
  const char *(*tmp_path)(const char *name);
} bench_dyn_env;

/* One row. Every function gets the state setup returned. */
typedef struct bench_dyn_model {
  const char *name; /* row label, e.g. "decoder-greedy" */
  const char *unit; /* "sentences" */
  /* Declares and seeds the model on env->ctx, prepares the inputs of
   * instances [0, env->n), writes what the DyNet peer reads (weights via
   * sheaf_model_save, inputs) under env->tmp_path. NULL on error (printed). */
  void *(*setup)(const bench_dyn_env *env);
  /* The model the runners are created on. */
  sheaf_model *(*model)(void *state);
  /* One pass over instances [0, n): run_batched with
   * sheaf_runner_run_fibers on r (batch 64, 1 thread), run_single with
   * sheaf_runner_run on r (batch 1). Both record the instances' outputs in
   * the state (the last pass's). */
  sheaf_status (*run_batched)(void *state, sheaf_runner *r);
  sheaf_status (*run_single)(void *state, sheaf_runner *r);
  /* Instances whose outputs differ between the last run_batched and the
   * last run_single (discrete outputs exactly, scores beyond 1e-5). */
  long (*mismatches)(void *state);
  /* The DyNet peer: binary name in <dynet-dir>/bin (NULL: no peer), and its
   * arguments after the --dynet-* flags, e.g. "--weights W --data D": the
   * peer prints "# ..." lines and one JSON line per measurement with
   * "system", "batch" and the key "inst_per_s", and writes its outputs for
   * instances [0, n) to the file after --check (format: the row's own). */
  const char *dynet_bin;
  const char *(*dynet_args)(void *state);
  /* Instances whose outputs in the peer's --check file differ from the
   * last run_batched's (-1: the file is missing or unreadable). */
  long (*dynet_mismatches)(void *state, const char *check_path);
  /* A one-line summary of the outputs for the table's notes (e.g. "output
   * length mean 14.2, 7..48"), into out. May be NULL. */
  void (*describe)(void *state, char *out, size_t cap);
  void (*teardown)(void *state);
} bench_dyn_model;

/* Further rows (bench/bench_dynamic_models.c): *n of them, or NULL and
 * *n = 0. bench_dynamic.c has a weak definition returning none. */
const bench_dyn_model *bench_dyn_extra_models(int *n);

#endif
