/*
 * linear.h — Cortex's linearized mode for tree models written in the
 * language (docs/COMPILER.md, "Linearized mode"): which models linearize
 * (linear_check.c), the inspector (inspect.c), one generated kernel per
 * match arm (coarsen.c, coarsen_emit.c) and the executor (linear.c).
 *
 *   char why[512];
 *   sh_lin *L;
 *   if (sh_lin_create(m, model, &bind, &L, why, sizeof why)) ... why: the refusal, "FILE:L:C: ..."
 *   sh_lin_run(L, tb, first_tree, n_trees, ids);      // a batch of consecutive trees
 *   sh_lin_output(L, i, comp, &rows, &cols)          // main's result component comp of tree i
 *   sh_lin_free(L);
 *
 * Nothing in lang, runtime or codegen includes this module.
 */
#ifndef SH_COMPILE_LINEAR_H
#define SH_COMPILE_LINEAR_H

#include "io/treebank.h"
#include "io/words.h"
#include "lang/interp.h"

typedef struct sh_lin sh_lin;

/* Whether m (checked, with a main) linearizes, without compiling anything:
 * SHEAF_OK, or SHEAF_ERR_UNSUPPORTED with the reason in why ("FILE:L:C:
 * ...", cap bytes). Sizes come from bind (shapes are specialised). */
sheaf_status sh_lin_check(const sh_module *m, const sh_lang_bind *bind, char *why, size_t cap);

/* Why `--mode auto` runs a model that linearizes dynamic anyway, or NULL:
 * NULL for every model now (dependency trees, once refused here for their
 * kernel per child count, compile a leaves' arm and one ragged arm). */
const char *sh_lin_auto_refusal(const sh_module *m);

/* Checks m, translates each arm of each structural function to a kernel,
 * compiles them (JIT, on-disk cache). A model that does not linearize is
 * SHEAF_ERR_UNSUPPORTED with the reason in why (and the context's error);
 * other failures their own status. model and bind must outlive L. */
sheaf_status sh_lin_create(const sh_module *m, sheaf_model *model, const sh_lang_bind *bind, sh_lin **out,
                           char *why, size_t cap);
void sh_lin_free(sh_lin *L); /* NULL is fine */

/* The generated kernels' source, one after another, each preceded by a
 * comment naming its function and arm (for --emit-kernels). */
const char *sh_lin_kernel_source(const sh_lin *L);
/* Kernels compiled, and the seconds sh_lin_create spent compiling them. */
int sh_lin_n_kernels(const sh_lin *L);
double sh_lin_compile_seconds(const sh_lin *L);

/* Runs main on trees first .. first + n - 1 of tb (words numbered by ids,
 * as sh_interp_tree does). Outputs stay valid until the next run. */
sheaf_status sh_lin_run(sh_lin *L, const sh_treebank *tb, int32_t first, int32_t n, sh_word_ids ids);
/* Sequence models (main takes list[i32]): whether L takes sentences, and
 * the run over sentences first .. first + n - 1 (sentence s is words
 * sent_off[s] .. sent_off[s + 1] - 1 of sent_words, numbered by ids). */
bool sh_lin_takes_sequences(const sh_lin *L);
sheaf_status sh_lin_run_seq(sh_lin *L, const int32_t *sent_off, const int32_t *sent_words, int32_t first, int32_t n,
                            sh_word_ids ids);
/* Token records (main takes list[R], R a record of token fields:
 * chartagger.sf): the sentences as for sh_lin_run_seq (sent_words the word
 * ids) and, per token of sent_words, its other columns (NULL: not in the
 * data; a field main reads that the data lacks is an error naming it). */
typedef struct sh_lin_records {
  const int32_t *upos, *xpos, *deprel, *head; /* CoNLL-U columns (input.h) */
  const char *const *form;                    /* the word's text (chars: its UTF-8 bytes) */
  const size_t *form_len;
} sh_lin_records;
bool sh_lin_takes_records(const sh_lin *L);
sheaf_status sh_lin_run_rec(sh_lin *L, const int32_t *sent_off, const int32_t *sent_words, const sh_lin_records *rec,
                            int32_t first, int32_t n, sh_word_ids ids);
/* main's rows of instance i: its length when main returns a list (a
 * per-token map), else 1; and row k's component comp (NULL out of range). */
int32_t sh_lin_output_rows(const sh_lin *L, int32_t i);
const float *sh_lin_output_row(const sh_lin *L, int32_t i, int32_t k, int comp);

/* The number of main's result components (flattened tuple), and the shape
 * of component comp (rank 1: cols = 0 ... see below): rows x cols floats
 * (a vector f32[D] is 1 x D; a matrix f32[R, C] is R x C). */
int sh_lin_n_outputs(const sh_lin *L);
void sh_lin_output_shape(const sh_lin *L, int comp, int *rank, int64_t dims[2]);
/* Component comp of instance i (0-based within the last run). */
const float *sh_lin_output(const sh_lin *L, int32_t i, int comp);

/* main's result of instance i (0-based within the last run) as a value of
 * main's return type ret, its tensors inputs of g holding the outputs (as
 * the dynamic runtime's result reads): tuples and lists become aggregates,
 * appended to aggs (room for SH_LIN_MAX_AGGS; *n_aggs of them, the caller
 * frees each). SHEAF_ERR_NOMEM past SH_LIN_MAX_AGGS. */
#define SH_LIN_MAX_AGGS 4096
sheaf_status sh_lin_result(sheaf_graph *g, const sh_lin *L, int32_t i, const sh_type *ret, sh_value *out,
                           sh_agg **aggs, int *n_aggs);

/* Threads: on a context of T >= 2 threads a batch of n instances runs as
 * min(T, n / 2) parts of consecutive instances (about equal nodes or words
 * each), one a pool thread, each with its own inspector output and states
 * and its kernel calls serial on that thread (the default; SHEAF_LINEAR_SPLIT=0
 * at create turns it off); off, or for fewer instances, the batch is one
 * part whose kernels split their loops over the pool. Not with plans
 * (SHEAF_LINEAR_PLANS=1) nor for dependency trees. The outputs are the same
 * either way (each row's arithmetic does not depend on the others). */
void sh_lin_set_split(sh_lin *L, bool on);
/* Parts the last run ran as (0: one, the kernels split over the pool). */
int sh_lin_n_parts(const sh_lin *L);

/* Eager children's products (linear_eager.c): a product of a cat of
 * children's states with a parameter weight computed as each child's part,
 * at the level that finishes the child. The model's parts (0: none), and
 * whether the last run took them (SHEAF_LINEAR_EAGER at create: 1 every
 * run, 0 none; unset: runs whose consumer levels average few rows). */
int sh_lin_eager_parts(const sh_lin *L);
bool sh_lin_eager_ran(const sh_lin *L);
/* Their kernels (counted by sh_lin_n_kernels, printed by sh_lin_kernel_source):
 * an arm's eager form each, a product kernel per part. */
int sh_lin_eager_kernels(const sh_lin *L);

/* The inspector's view of the last run, for tests (an unsplit run's; a
 * split run shows no groups): activations of
 * structural function fn (in the order linear_check found them, main is
 * 0) at height h and arm a: their count and first state row; the word ids
 * of pattern field f and the callee state rows of call site c of those
 * activations (count entries each). -1 / NULL when out of range. */
typedef struct sh_lin_group_view {
  int fn, arm, height;
  int32_t start, count;
  int n_fields, n_calls;
  const int32_t *const *fields; /* fields[f][i] */
  const int32_t *const *calls;  /* calls[c][i]: a row of the callee's state */
  const int *call_fn;           /* call_fn[c]: the callee */
  const int32_t *n_kids;        /* dependency trees' ragged arm: each row's child count (NULL otherwise); its
                                   calls on every child have n_kid_rows entries, the children in order */
  int32_t n_kid_rows;
} sh_lin_group_view;
int sh_lin_n_groups(const sh_lin *L);
bool sh_lin_group(const sh_lin *L, int g, sh_lin_group_view *out);
/* Main's state row of instance i of the last run. */
int32_t sh_lin_root_row(const sh_lin *L, int32_t i);

#endif
