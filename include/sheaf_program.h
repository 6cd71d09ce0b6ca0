/*
 * sheaf_program.h — models written in the model language (docs/LANGUAGE.md),
 * loaded and run from C or C++ (included by sheaf.h; do not include it
 * alone). The program is compiled and checked when loaded (errors are
 * "FILE:LINE:COL: error: ..." in the context's last error), its parameters
 * are loaded from safetensors or drawn from a seed, and runs go through a
 * runner (whole batches in parallel on every thread), or in the
 * linearized mode (opts->mode):
 *
 *   sheaf_program_opts o = {0};
 *   o.weights = "tagger.safetensors";
 *   sheaf_program *p;
 *   if (sheaf_program_load(ctx, "examples/bilstm.sf", &o, &p)) ... sheaf_ctx_last_error(ctx)
 *   sheaf_program_run_words(p, n, words, lens);        // main(list[i32]) per sentence
 *   sheaf_value_view v[64];
 *   size_t k = sheaf_program_outputs(p, 0, 64, v);     // sentence 0's output tensors
 *   sheaf_program_free(p);
 */
#ifndef SHEAF_PROGRAM_H
#define SHEAF_PROGRAM_H

typedef struct sheaf_program sheaf_program;

/* How a program's runs execute (docs/COMPILER.md, "Linearized mode"):
 * DYNAMIC: the dynamic runtime (the host program issues graph ops per
 * instance; batched by the runner's policy); LINEAR: Cortex's linearized
 * mode (an inspector over the batch's sentences, then one generated kernel
 * per level or step: no graph), refused at load, with the reason, for a
 * model that does not linearize; AUTO: linear when the model linearizes
 * and neither opts->host nor opts->coarsen asks for the dynamic runtime,
 * else dynamic (sheaf_program_mode says which and
 * why). Both give the same outputs within 1e-5 (relative); DYNAMIC is 0 so
 * that options written before the linearized mode keep their bits. */
typedef enum sheaf_program_mode {
  SHEAF_PROGRAM_DYNAMIC = 0,
  SHEAF_PROGRAM_AUTO = 1,
  SHEAF_PROGRAM_LINEAR = 2
} sheaf_program_mode;

typedef struct sheaf_program_opts {
  const char *weights;            /* a safetensors file, or NULL: parameters drawn from seed */
  uint64_t seed;
  int64_t vocab;                  /* rows of the word tables: word ids 0..vocab-2, the last row
                                     <unk> (ids outside are <unk>); 0: from the weights */
  int n_sizes;                    /* sizes nothing else fixes: size_names[i] = size_values[i] */
  const char *const *size_names;
  const int64_t *size_values;
  sheaf_runner_opts runner;       /* batch, threads, policy, parallel (zeros: defaults) */
  int allow_nonfinite;            /* nonzero: load weights holding NaN or infinity (refused
                                     otherwise: sheaf_model_allow_nonfinite) */
  int host;                       /* what runs the functions: 0 the compiled host program
                                     (a register VM), 1 the AST walker (for comparison);
                                     the same outputs */
  sheaf_program_mode mode;        /* DYNAMIC (0), AUTO or LINEAR: see sheaf_program_mode */
  int coarsen;                    /* nonzero: the dynamic runtime runs each straight-line
                                     function of vectors as one generated kernel (host 0
                                     only; docs/COMPILER.md, "Coarsening in the dynamic
                                     mode"); a flag of the dynamic runtime: AUTO then runs
                                     dynamic, LINEAR refuses it */
} sheaf_program_opts;

/* opts may be NULL (seed 0, no sizes). */
SHEAF_API sheaf_status sheaf_program_load(sheaf_ctx *ctx, const char *path, const sheaf_program_opts *opts,
                                          sheaf_program **out);
SHEAF_API void sheaf_program_free(sheaf_program *p); /* NULL is fine */

/* The mode runs use: SHEAF_PROGRAM_DYNAMIC or SHEAF_PROGRAM_LINEAR (never
 * AUTO). *why (when why is not NULL): under AUTO, the reason the program
 * runs dynamic ("FILE:L:C: ..." for a model that does not linearize), else
 * NULL; valid until sheaf_program_free. */
SHEAF_API sheaf_program_mode sheaf_program_mode_used(const sheaf_program *p, const char **why);

/* The parameters (to save them, or to read them). */
SHEAF_API sheaf_model *sheaf_program_model(sheaf_program *p);

/* Runs main, which takes list[i32], on n sentences of word ids (sentence i:
 * words[i][0 .. lens[i])), batched. Outputs of an earlier run are dropped.
 * An error names the instance, as a runner does. A program that reads
 * values (argmax, item: docs/LANGUAGE.md, "while, argmax, item") runs each
 * sentence on a fiber (sheaf_runner_run_fibers), so its reads wait for one
 * flush batched across the sentences; elsewhere SHEAF_ERR_UNSUPPORTED.
 * In the linearized mode the sentences run batch by batch (the runner's
 * batch size, default 64) on the context's threads; an error names the
 * first sentence of the batch. */
SHEAF_API sheaf_status sheaf_program_run_words(sheaf_program *p, int64_t n, const int32_t *const *words,
                                               const int64_t *lens);

/* One sentence for sheaf_program_run_sentences: its words and the CoNLL-U
 * columns main needs (docs/LANGUAGE.md, "Running: instances, batching, data"):
 * - main(list[i32]): words;
 * - a tree (Leaf | Node binary, or Dep(i32, list[T])): words and heads,
 *   made into the tree `sheaf run` makes of a CoNLL-U sentence (binarized,
 *   or one node per word);
 * - token records: words and the columns of the fields main reads (upos
 *   0..16 in the universal order, xpos, deprel 0..36 the universal
 *   relations and 37 another, head, forms for chars); the others may be
 *   NULL. Word ids are rows of the model's tables (an id outside them reads
 *   the last row, <unk>), as for sheaf_program_run_words. */
typedef struct sheaf_sentence {
  int64_t len;                 /* words: 1 or more for a tree */
  const int32_t *words;        /* len word ids */
  const int32_t *heads;        /* len heads: 0 for the root, else the head's 1-based position */
  const int32_t *upos, *xpos, *deprel;
  const char *const *forms;    /* len NUL-terminated UTF-8 texts (chars) */
} sheaf_sentence;

/* Runs main on n sentences, whatever of the inputs above it takes, batched
 * as sheaf_program_run_words (which is this for list[i32]). A tree's heads
 * are checked as `sheaf run` checks a CoNLL-U file's (each in 0..len,
 * exactly one root, no cycle, at most 10,000 levels deep, binarized too): an
 * error names the sentence and the word. */
SHEAF_API sheaf_status sheaf_program_run_sentences(sheaf_program *p, int64_t n, const sheaf_sentence *sentences);

/* The output tensors of instance i of the last run, depth first (a tuple's
 * parts and a list's elements in order; i32, bool and f32 host values are
 * not tensors and are skipped): returns how many there are and
 * fills out[0 .. min(that, max)). The views stay valid until the next run
 * or sheaf_program_free. */
SHEAF_API size_t sheaf_program_outputs(const sheaf_program *p, int64_t i, size_t max, sheaf_value_view *out);

#endif /* SHEAF_PROGRAM_H */
