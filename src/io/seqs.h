/*
 * seqs.h — token sequences (for the LSTM and BiLSTM models): plain text, one
 * sequence per line, tokens separated by spaces and/or TABs (a trailing '\r'
 * is dropped). Lines with no token are skipped and counted (n_empty_lines);
 * each sequence keeps its line number, so results map back to the file.
 *
 * Tokens are either token ids or words:
 *   - ids: non-negative decimal integers within int32. A negative or
 *     overflowing id is an error, so is an id >= the vocabulary size when a
 *     vocabulary is given or >= id_limit when that is set, and so is a word
 *     in a file read as ids ("mixing").
 *   - words: mapped through a given vocabulary (sh_vocab_load: one token per
 *     line, id = line index). An unknown word maps to "<unk>" when the
 *     vocabulary has it (counted in n_unk), else it is an error. Without a
 *     vocabulary, one is built from the data (ids in order of appearance).
 * SH_SEQS_AUTO decides from the first token of the file: ids when it is all
 * digits, words otherwise (a later word in an ids file is then reported as
 * mixing, never silently read as something else).
 * Errors are SHEAF_ERR_PARSE "NAME:LINE:COL: error: ..." (columns in bytes);
 * a failed read leaves the sequences as they were.
 */
#ifndef SH_IO_SEQS_H
#define SH_IO_SEQS_H

#include "io/vocab.h"

typedef enum sh_seqs_mode { SH_SEQS_AUTO = 0, SH_SEQS_IDS, SH_SEQS_WORDS } sh_seqs_mode;

typedef struct sh_seqs_options {
  sh_seqs_mode mode;
  const sh_vocab *vocab; /* NULL: ids unbounded; words build seqs->vocab */
  /* > 0: ids must be below id_limit (the rows a model has for them), checked
   * as each id is read; id_limit_what says where the limit comes from, for
   * the message (e.g. "--max-vocab"). 0: no limit beyond int32. */
  int64_t id_limit;
  const char *id_limit_what;
} sh_seqs_options;

typedef struct sh_seq {
  int64_t start; /* first token in tokens */
  int64_t line;  /* source line */
  int32_t len;
} sh_seq;

typedef struct sh_seqs {
  sheaf_ctx *ctx;
  int32_t *tokens;
  size_t n_tokens, cap_tokens;
  sh_seq *seqs;
  size_t n_seqs, cap_seqs;
  size_t n_empty_lines;
  size_t n_unk;         /* words mapped to <unk> */
  sh_seqs_mode mode;    /* IDS or WORDS once something was read */
  int32_t max_id;       /* largest token id seen, -1 when none */
  sh_vocab vocab;       /* built from the data (words mode without a vocab) */
} sh_seqs;

void sh_seqs_init(sh_seqs *s, sheaf_ctx *ctx);
void sh_seqs_free(sh_seqs *s);

/* Appends the sequences of data[0..size). opt may be NULL (auto, no
 * vocabulary). A second read keeps the mode of the first. */
sheaf_status sh_seqs_read(sh_seqs *s, const char *data, size_t size, const char *name,
                          const sh_seqs_options *opt);
sheaf_status sh_seqs_read_file(sh_seqs *s, const char *path, const sh_seqs_options *opt);

#endif
