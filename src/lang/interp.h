/*
 * interp.h — execution of a checked program (first cut).
 *
 * The typed AST that sh_check leaves is interpreted directly (no separate
 * IR yet: names are already resolved to local slots, `@` with a parameter
 * is marked as an affine, lookups and slice bounds are recorded, so a walk
 * over it is a switch per node). The host part of a program — i32/bool
 * scalars, tuples, lists, ADT values, let, if, match, for, recursion — runs
 * per instance; every tensor operation is issued to a sheaf_graph as the
 * corresponding builder (`x @ W + b` with parameters W, b is one
 * sheaf_affine with the bias folded in; `emb[w]` is sheaf_lookup; slices,
 * cat, activations and reductions map one to one). Calling main on N
 * instances and then flushing the graph batches them.
 *
 *   sh_check_main_input(m)->kind            // what main takes: which data to read
 *   sh_lang_bind(m, model, &opts, &bind);   // sizes + parameters on model
 *   sh_interp *ip;  sh_interp_create(m, &bind, &ip);
 *   for (each instance) { v = sh_interp_tree(ip, tb, root, ...); sh_interp_main(ip, g, v, &out[i]); }
 *   sheaf_graph_flush(g);   ... read the tensors in out[i] ...
 *   sh_interp_reset(ip);    // frees the host values of the batch
 */
#ifndef SH_LANG_INTERP_H
#define SH_LANG_INTERP_H

#include "io/treebank.h"
#include "io/words.h"
#include "lang/check.h"
#include "lang/input.h"

/* ------------------------------------------------------------- binding */

#define SH_BIND_MAX_OVERRIDES 16

typedef struct sh_lang_bind_opts {
  const char *weights;  /* safetensors file: sizes solved from its shapes, then loaded (one
                           open for both) */
  const sheaf_st_file *weights_file; /* or that file, opened by the caller (`weights` names
                                        it in messages): the binder opens nothing */
  uint64_t seed;        /* without weights: sheaf_model_seed(seed) */
  int64_t vocab;        /* > 0: the run's vocabulary, words + 1 (<unk> last): word ids are
                           0 .. vocab - 2, vocab - 1 is <unk>; also the first size of
                           looked-up tables when nothing else fixes it (V) */
  const int32_t *word_rank; /* vocab - 1 entries or NULL: the rank of each word (0 = most
                               frequent) for tables with fewer rows than vocab; NULL: ids are
                               ranks (a --vocab file's order) */
  int n_overrides;      /* --size NAME=VALUE */
  const char *override_name[SH_BIND_MAX_OVERRIDES];
  int64_t override_value[SH_BIND_MAX_OVERRIDES];
} sh_lang_bind_opts;

typedef struct sh_lang_bind {
  int64_t *size_values; /* by size variable id (1..m->sizes.n); 0 = unknown */
  uint32_t n_sizes;
  sheaf_param *params;  /* by sh_param_decl index */
  int64_t *table_rows;  /* by sh_param_decl index: rows of a looked-up table, 0 for the others */
  int n_params;
  int64_t vocab;        /* opts->vocab, or (0 there) the fewest rows of a looked-up table */
  int32_t *word_rank;   /* a copy of opts->word_rank (vocab - 1 entries) or NULL */
  char vocab_fp[96];    /* the weights file's "sheaf.vocab" metadata (the word numbering
                           they were saved with), or "" */
  sheaf_kernel **kernels; /* by kernel declaration index: compiled when a function calls it
                             (bind_kernels.c), else NULL */
  int n_kernels;
} sh_lang_bind;

/* Solves every global size (size declarations, overrides, the weights
 * file's shapes, opts->vocab), declares each `param` on model with its
 * shape, then loads the weights (one error listing every missing or
 * mis-shaped tensor) or seeds. Free with sh_lang_bind_free.
 *
 * Word lookups (emb[w] with w a word of the data, see sh_value.word): a
 * table of R rows maps word id w to row w when R >= vocab (ids past
 * R - 2 and <unk> to R - 1); a table with fewer rows (a capped table, the
 * MV-RNN's word matrices) holds the R - 1 words of lowest rank and <unk>:
 * row = rank(w) when rank(w) < R - 1, else R - 1. Any other index is a row
 * number and must lie in [0, R). */
sheaf_status sh_lang_bind_model(const sh_module *m, sheaf_model *model,
                                const sh_lang_bind_opts *opts, sh_lang_bind *out);
void sh_lang_bind_free(sheaf_ctx *ctx, sh_lang_bind *b);
/* Compiles (JIT, through the on-disk cache: sheaf_kernel_compile) every
 * kernel a function calls, once per bind; their calls then run as batched
 * runtime ops (sheaf_kernel_call). bind_kernels.c; called by
 * sh_lang_bind_model. */
sheaf_status sh_lang_bind_kernels(const sh_module *m, sh_lang_bind *b);
/* The source sheaf_kernel_compile gets for kernel kd of m: its declaration
 * at its place in the file and the file's valued size declarations (what
 * `sheaf tune` tunes, so records match what a run compiles). */
sheaf_status sh_lang_kernel_source(const sh_module *m, const sh_kernel_decl *kd, sh_buf *b);
void sh_lang_bind_kernels_free(sheaf_ctx *ctx, sh_lang_bind *b);

/* The row of table param p (rows R = b->table_rows[p]) that word id w
 * looks up (see above); w outside [0, vocab - 1) is <unk>
 * (sh_word_id(sh_word_ids_of_rows(b->vocab), w)). */
int64_t sh_lang_word_row(const sh_lang_bind *b, int p, int64_t w);

/* -------------------------------------------------------------- values */

typedef struct sh_agg sh_agg;

typedef enum sh_value_kind {
  SH_V_NONE = 0, SH_V_INT, SH_V_BOOL, SH_V_TENSOR, SH_V_TUPLE, SH_V_LIST, SH_V_ADT,
  SH_V_F32 /* a host float (item) */
} sh_value_kind;

typedef struct sh_value {
  uint8_t kind;
  uint8_t word; /* INT: a word id as read from the data (a tree's word, a sentence's
                   element), not computed: a lookup maps it to the table's row */
  int32_t i;    /* INT, BOOL */
  sheaf_expr t; /* TENSOR */
  union {
    sh_agg *agg; /* TUPLE, LIST, ADT */
    double f;    /* F32: a host float, computed in double precision */
  };
} sh_value;     /* 32 bytes */

struct sh_agg {
  int32_t tag;  /* ADT: constructor index */
  int32_t n;
  uint64_t gen; /* the interpreter's region it lives in (interp.c: a while loop's
                   iterations free their dead values; 0: the batch's) */
  sh_value items[];
};

/* ------------------------------------------------------------- the interpreter */

typedef struct sh_interp sh_interp;

/* Also compiles the host program (hostprog.h), which then runs main. */
sheaf_status sh_interp_create(const sh_module *m, const sh_lang_bind *bind, sh_interp **out);

/* What runs the functions: the compiled host program (the default) or the
 * AST walker (for comparison: `sheaf run --host ast`). Same builders in the
 * same order, same outputs, same errors. */
typedef enum sh_interp_host { SH_HOST_VM = 0, SH_HOST_AST = 1 } sh_interp_host;
sheaf_status sh_interp_set_host(sh_interp *ip, sh_interp_host h);
/* "host program: 5 functions compiled, 1 with parts interpreted (while at
 * f.sf:12:5)", or that the walker runs everything. */
void sh_interp_host_describe(const sh_interp *ip, char *buf, size_t cap);
/* A coarsened region of the dynamic mode (compile/dyncoarse.h decides
 * and compiles them; lang sees only this): the body of the straight-line
 * function fn as one generated kernel k. Each call of fn is then one
 * sheaf_kernel_call (batched across instances by the runtime) taking its
 * row inputs (fn's vector arguments, or several side by side) as [1, d], then the model parameters params[]
 * (sh_param_decl indices); its [1, out_d] result is fn's f32[out_d]. */
typedef struct sh_lang_region {
  const sh_fn *fn;
  sheaf_kernel *k;
  int n_inputs;      /* the kernel's row inputs: input i is fn's arguments */
  int n_segs[16];    /* seg[i][0 .. n_segs[i]) side by side (a cat of them) */
  int8_t seg[16][8];
  int n_params;
  int params[64];
  int64_t out_d;
} sh_lang_region;
/* Installs n regions (0: none, every op issued on its own) and compiles
 * the host program again so each call of a region's function is one
 * instruction (HP_REGION). The walker (--host ast) ignores them. r must
 * outlive ip. */
sheaf_status sh_interp_set_regions(sh_interp *ip, int n, const sh_lang_region *r);
void sh_interp_free(sh_interp *ip);
/* Frees every host value built since the last reset. */
void sh_interp_reset(sh_interp *ip);

/* The ADT value of the subtree of tb at node (word w becomes
 * sh_word_id(ids, w): the run's word numbering; marked as words). */
sheaf_status sh_interp_tree(sh_interp *ip, const sh_treebank *tb, int32_t node, sh_word_ids ids,
                            sh_value *out);
/* A list[i32] value of word ids (marked as words). */
sheaf_status sh_interp_ints(sh_interp *ip, const int32_t *v, int32_t n, sh_value *out);

/* One sentence's token columns (n words each; a NULL column is not in the
 * data): word ids (as for sh_interp_ints) and the CoNLL-U fields of
 * input.h; form[i] / form_len[i]: the word's text (for chars). */
typedef struct sh_token_cols {
  int32_t n;
  const int32_t *word, *upos, *xpos, *deprel, *head;
  const char *const *form;
  const size_t *form_len;
} sh_token_cols;
/* A list of main's token records (SH_INPUT_RECORDS). A field the data
 * lacks is an error naming it. */
sheaf_status sh_interp_records(sh_interp *ip, const sh_token_cols *t, sh_value *out);

/* Bytes of each fiber stack for programs with wait points (address space,
 * touched as used; the interpreter checks the room left before each call). */
#define SH_INTERP_FIBER_STACK ((size_t)64 << 20)

/* Runs main on one input, issuing its tensor operations to g. A program
 * with wait points (argmax, item: sh_module.n_waits) reads values with
 * sheaf_value: run on a fiber (sheaf_runner_run_fibers), the instance is
 * suspended there until its batch's graph is flushed, batched with the
 * other instances; elsewhere the read flushes the graph. Several instances
 * may then be in progress at once on one interpreter (each on its own
 * fiber): the interpreter keeps its per-call state across the wait. */
sheaf_status sh_interp_main(sh_interp *ip, sheaf_graph *g, sh_value input, sh_value *out);

/* Appends the tensors of a value (depth first) to out[0..cap): returns how
 * many there are (which may exceed cap). */
size_t sh_value_tensors(sh_value v, sheaf_expr *out, size_t cap);

#endif
