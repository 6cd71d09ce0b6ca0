/*
 * dataset.h — a data set as the models read it (`sheaf run` for the
 * built-in models of src/models and for MODEL.sf, the tests and the
 * benchmarks): trees (binary or child-sum) or tagged sentences from a
 * file, with the embedding rows the models look up.
 *
 *   sh_dataset d;
 *   sh_dataset_load(ctx, "en_ewt-ud-test.conllu", SH_DATASET_BINARY, &d);  // or PTB trees
 *   for (int32_t t = 0; t < sh_dataset_count(&d); t++) ... d.tb (trees) or d.sent_* ...
 *   sh_dataset_free(&d);
 *
 * Vocabulary: a word's embedding row is its id in the data's own word
 * vocabulary (tb.words, or the CoNLL-U forms for sentences) and one more row,
 * the last (`ids.unk`), is <unk>: V = words + 1. Words map to rows through
 * sh_word_id(d->ids, w) (words.h); a --vocab file renumbers them
 * (sh_dataset_renumber). The MV-RNN's word matrices use a
 * capped vocabulary (mv_row): the `mv_cap` most frequent words (ties: first
 * seen first) get rows 0..mv_cap-1 in frequency order, every other word the
 * row mv_cap (<unk>): V' = min(words, mv_cap) + 1.
 *
 * Sentences (SH_DATASET_SENTS) carry UPOS tags mapped to the 17 universal tags
 * in the order of sh_upos_names (an unknown tag, e.g. "_", is -1 and is
 * never used as a target); token-line files (no tags) load with all tags -1.
 * From CoNLL-U they also carry XPOS, DEPREL and HEAD per word.
 */
#ifndef SH_IO_DATASET_H
#define SH_IO_DATASET_H

#include "io/treebank.h"
#include "io/words.h"

typedef enum sh_dataset_kind {
  SH_DATASET_BINARY = 0, /* binary trees: sh_binarize of CoNLL-U, or PTB trees */
  SH_DATASET_CHILDSUM,   /* dependency trees: sh_childsum of CoNLL-U, or PTB child-sum form */
  SH_DATASET_SENTS       /* sentences: CoNLL-U words + UPOS, or token lines */
} sh_dataset_kind;

#define SH_UPOS_COUNT 17
extern const char *const sh_upos_names[SH_UPOS_COUNT];
/* The 37 universal dependency relations (UD v2), in this order; a DEPREL's
 * subtype is dropped (nmod:poss is nmod) and any other relation is
 * SH_DEPREL_COUNT - 1 + 1 = 37 ("other"). */
#define SH_DEPREL_COUNT 37
extern const char *const sh_deprel_names[SH_DEPREL_COUNT];

#define SH_DATASET_MV_CAP_DEFAULT 2000

/* Token ids (token-line files read as ids) are rows of the models' word
 * tables, so the largest id sets a table's size (V = max id + 2 rows with
 * <unk>): ids at or beyond the limit are an error when read, naming the
 * file, line and column. Default limit: ids below 1,000,000 (a table of
 * 1,000,000 rows of 256 floats is 1 GiB); `sheaf run --max-vocab N` sets
 * another, and a run with weights takes the rows of their word table. */
#define SH_DATASET_MAX_VOCAB_DEFAULT 1000000

typedef struct sh_dataset_opts {
  int64_t max_vocab;        /* token ids must be below this; 0: SH_DATASET_MAX_VOCAB_DEFAULT */
  const char *max_vocab_what; /* where the limit comes from, for the message (NULL:
                                 "--max-vocab, default 1000000" or "--max-vocab") */
} sh_dataset_opts;

typedef struct sh_dataset {
  sheaf_ctx *ctx;
  sh_dataset_kind kind;
  /* trees (SH_DATASET_BINARY, SH_DATASET_CHILDSUM) */
  sh_treebank tb;
  /* sentences (SH_DATASET_SENTS): sentence s is tokens [sent_off[s], sent_off[s+1]) */
  int32_t n_sents;
  int32_t *sent_off;   /* n_sents + 1 */
  int32_t *sent_words; /* word ids (in `words`) */
  int32_t *sent_tags;  /* 0..16 or -1 */
  /* CoNLL-U sentences only (NULL otherwise), n_tokens each: XPOS ids (in
   * `xpos`, order of first appearance), DEPREL ids (sh_deprel_names; 37:
   * another relation), HEAD (1-based word index, 0 for the root) */
  int32_t *sent_xpos, *sent_deprel, *sent_head;
  size_t cols_bytes; /* their allocation (dropped when sh_dataset_add_sent adds a sentence) */
  sh_vocab xpos;
  int32_t n_tokens;
  size_t cap_sents, cap_words, cap_tags; /* capacities (entries) */
  sh_vocab words;      /* sentence vocabulary (trees use tb.words) */
  /* embedding rows */
  sh_word_ids ids;     /* word ids 0 .. ids.n_ids - 1 (the word types), every other word
                          ids.unk = ids.n_ids, the last row (sh_dataset_finish) */
  int32_t vocab;       /* V: ids.n_ids + 1 */
  int32_t mv_cap;      /* cap of the MV-RNN matrix vocabulary */
  int32_t mv_vocab;    /* V' */
  int32_t *mv_row;     /* word id -> capped row (ids.n_ids entries) */
  int64_t max_vocab;   /* token ids beyond the words must be below it (sh_dataset_finish) */
} sh_dataset;

/* An empty set of `kind` (trees or sentences to be added by the caller, as
 * the tests do); call sh_dataset_finish when done adding. */
void sh_dataset_init(sh_dataset *d, sheaf_ctx *ctx, sh_dataset_kind kind);
void sh_dataset_free(sh_dataset *d); /* NULL-safe fields; the struct itself is the caller's */

/* Reads `path`: .conllu (binarized, child-sum or sentences per kind), else
 * PTB trees for the tree kinds and token lines for sentences. On failure
 * the context's last error names the file (line and column for bad input)
 * and d is left freed. */
sheaf_status sh_dataset_load(sheaf_ctx *ctx, const char *path, sh_dataset_kind kind, sh_dataset *d);
/* The same with limits (opts may be NULL: the defaults). */
sheaf_status sh_dataset_load_opts(sheaf_ctx *ctx, const char *path, sh_dataset_kind kind,
                                  const sh_dataset_opts *opts, sh_dataset *d);
/* From memory: data[0..size) read as the file `name` would be (its
 * extension picks the format; messages use it). */
sheaf_status sh_dataset_load_mem(sheaf_ctx *ctx, const char *data, size_t size, const char *name,
                                 sh_dataset_kind kind, const sh_dataset_opts *opts, sh_dataset *d);

/* Reads the token-line file `path` again with ids limited to [0, limit)
 * and returns the reader's positioned error for the first id beyond it
 * ("PATH:LINE:COL: error: token id ... (what)"), SHEAF_OK when none is. For
 * a limit learnt after loading (a model's table rows). */
sheaf_status sh_dataset_check_ids(sheaf_ctx *ctx, const char *path, int64_t limit, const char *what);

/* Appends a sentence (word ids must be interned in d->words). */
sheaf_status sh_dataset_add_sent(sh_dataset *d, const int32_t *words, const int32_t *tags, int32_t n);

/* Computes ids, vocab and the MV-RNN rows (cap <= 0: SH_DATASET_MV_CAP_DEFAULT). Call
 * after the last tree or sentence was added (sh_dataset_load does). Word ids
 * beyond the data's word vocabulary (token ids) must be below d->max_vocab
 * (SH_DATASET_MAX_VOCAB_DEFAULT unless loaded with another). */
sheaf_status sh_dataset_finish(sh_dataset *d, int32_t mv_cap);

/* The word numbering as text, "WORDS words, fnv1a64 HEX" over the words
 * in id order: written as weights' "sheaf.vocab" metadata so a later run
 * can tell whether its data numbers words the same way. */
void sh_dataset_vocab_fingerprint(const sh_dataset *d, char *out, size_t cap);

/* Instances: trees or sentences. */
int32_t sh_dataset_count(const sh_dataset *d);
/* Nodes of tree i / tokens of sentence i. */
int32_t sh_dataset_size(const sh_dataset *d, int32_t i);
/* Sum of sh_dataset_size over [first, first + count). */
int64_t sh_dataset_size_range(const sh_dataset *d, int32_t first, int32_t count);

/* The MV-RNN matrix row of word id w: its capped row, <unk> (the last)
 * for every id that is not a word. */
static inline int32_t sh_dataset_mv_row(const sh_dataset *d, int32_t w) {
  int32_t id = sh_word_id(d->ids, w);
  return id < d->ids.n_ids && d->mv_row ? d->mv_row[id] : d->mv_vocab - 1;
}

/* Renumbers the words of d (loaded, or finished) by the vocabulary v of a
 * file (line i is word i): every word of the data gets its id in v, a word
 * v lacks v's '<unk>' line or the id after v's words (sh_word_lookup), and
 * d->ids and d->vocab become v's (sh_word_ids_of_vocab; the MV-RNN rows
 * are dropped: every word is their <unk>). The words of the data are
 * strings (d->words or tb.words): a set of token ids has none to look up.
 * *n_words (may be NULL) gets the words of the data (tree nodes without a
 * word aside), *n_unknown (may be NULL) those v lacks. */
sheaf_status sh_dataset_renumber(sh_dataset *d, const sh_vocab *v, int64_t *n_words,
                                 int64_t *n_unknown);

#endif
