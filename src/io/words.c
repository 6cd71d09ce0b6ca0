/*
 * words.c — the numberings of words.h of a vocabulary file and of a data
 * set (with the limit on token ids).
 */
#include "words.h"

sh_word_ids sh_word_ids_of_vocab(const sh_vocab *v) {
  int32_t n = sh_vocab_size(v), unk = sh_vocab_find(v, "<unk>", 5);
  return (sh_word_ids){n, unk >= 0 ? unk : n};
}

sheaf_status sh_word_ids_of_data(sheaf_ctx *ctx, int32_t types, const int32_t *ids, int64_t n,
                                 int64_t max_vocab, sh_word_ids *out) {
  /* token-id files carry no vocabulary: ids past the words count as types
   * (in 64 bits: an id of INT32_MAX is one type more than int32 holds) */
  int64_t n_types = types, top = -1;
  for (int64_t i = 0; i < n; i++)
    if (ids[i] > top) top = ids[i];
  if (top >= n_types) {
    if (top >= max_vocab) /* the readers refuse these; ids added by hand */
      return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                     "token id %lld is beyond the vocabulary: ids must be below %lld "
                     "(--max-vocab)",
                     (long long)top, (long long)max_vocab);
    n_types = top + 1;
  }
  if (n_types >= INT32_MAX - 1)
    return sh_fail(ctx, SHEAF_ERR_UNSUPPORTED, "vocabulary of %lld words is too large",
                   (long long)n_types);
  *out = (sh_word_ids){(int32_t)n_types, (int32_t)n_types};
  return SHEAF_OK;
}
