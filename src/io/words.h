/*
 * words.h — word ids: the one place that decides which id a word of the
 * data gets, and so which row of a word table it looks up. The data sets
 * (dataset.h), `sheaf run` (a --vocab file or the data's own numbering),
 * the built-in C models, the language's binder (lookups in its tables) and
 * its interpreter (the words of a tree) all map words through sh_word_id.
 *
 * A numbering has n_ids word ids, 0 .. n_ids - 1, and one id, unk, that
 * every other word gets: -1 (a tree node without a word), an id past the
 * words (a token id beyond the vocabulary, a word the table has no row
 * for), a word a vocabulary file does not hold. unk is n_ids (the row after
 * the words) unless a vocabulary file has its own '<unk>' line.
 */
#ifndef SH_IO_WORDS_H
#define SH_IO_WORDS_H

#include "io/vocab.h"

typedef struct sh_word_ids {
  int32_t n_ids; /* words have ids 0 .. n_ids - 1 */
  int32_t unk;   /* the id of every other word */
} sh_word_ids;

/* The rule: w itself when it is a word id (0 <= w < n_ids), else unk. */
static inline int32_t sh_word_id(sh_word_ids ids, int64_t w) {
  return w >= 0 && w < ids.n_ids ? (int32_t)w : ids.unk;
}

/* The id of the word s[0..n) in vocabulary v numbered by ids (v's line
 * numbers: sh_word_ids_of_vocab): its line, or unk when v lacks it. */
static inline int32_t sh_word_lookup(sh_word_ids ids, const sh_vocab *v, const char *s, size_t n) {
  return sh_word_id(ids, sh_vocab_find(v, s, n));
}

/* The table rows a numbering needs: a row per id and, unless unk is one of
 * them (a '<unk>' line), one more for <unk>, the last. */
static inline int64_t sh_word_rows(sh_word_ids ids) {
  return ids.unk >= 0 && ids.unk < ids.n_ids ? ids.n_ids : (int64_t)ids.n_ids + 1;
}

/* The numbering of a word table of `rows` rows whose last row is <unk>:
 * ids 0 .. rows - 2 are words, everything else is rows - 1 (no word at
 * all when rows < 2). */
static inline sh_word_ids sh_word_ids_of_rows(int64_t rows) {
  int32_t n = rows < 2 ? 0 : rows - 1 > INT32_MAX ? INT32_MAX : (int32_t)(rows - 1);
  return (sh_word_ids){n, n};
}

/* The numbering of a vocabulary file (line i is word i): unk is its
 * '<unk>' line when it has one, else the id after its words. */
sh_word_ids sh_word_ids_of_vocab(const sh_vocab *v);

/* The numbering of a data set: the `types` words of its vocabulary (in
 * order of first appearance) and, for token ids read as numbers, every id
 * up to the largest of ids[0..n) (-1 entries: no word); unk is the id after
 * them. A token id at or beyond max_vocab is SHEAF_ERR_INVALID_ARG ("token
 * id N is beyond the vocabulary: ids must be below M (--max-vocab)"), so is
 * a numbering too large for a table (SHEAF_ERR_UNSUPPORTED). */
sheaf_status sh_word_ids_of_data(sheaf_ctx *ctx, int32_t types, const int32_t *ids, int64_t n,
                                 int64_t max_vocab, sh_word_ids *out);

#endif
