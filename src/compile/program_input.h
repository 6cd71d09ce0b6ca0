/*
 * program_input.h — what sheaf_program runs main on, made from the C
 * caller's sentences (sheaf_sentence, include/sheaf_program.h) for the
 * input main takes (lang/input.h): the sentences' words in one array
 * (list[i32]), their token columns (records), or their dependency trees as
 * a treebank, binarized or child-sum. The caller's arrays are checked first;
 * a fault names the function, the sentence and the word.
 */
#ifndef SH_COMPILE_PROGRAM_INPUT_H
#define SH_COMPILE_PROGRAM_INPUT_H

#include "io/treebank.h"
#include "lang/input.h"
#include "sheaf_program.h"

typedef struct sh_prog_input {
  int32_t n;      /* sentences */
  int32_t *off;   /* n + 1: sentence i's words are words[off[i] .. off[i + 1]) */
  int32_t *words; /* the caller's word ids, as given (mapped to table rows where they are used) */
  /* records: the columns main reads, one entry per word (the others NULL) */
  int32_t *upos, *xpos, *deprel, *head;
  const char **form;
  size_t *form_len;
  /* trees: one per sentence, its node words the caller's word ids */
  sh_treebank tb;
  bool have_tb;
} sh_prog_input;

/* Makes *in from sentences s[0 .. n) for main's input `shape`; fn names the
 * API function in messages. On failure *in holds nothing to free. */
sheaf_status sh_prog_input_make(sheaf_ctx *ctx, const sh_input_shape *shape, const char *fn, int64_t n,
                                const sheaf_sentence *s, sh_prog_input *in);
void sh_prog_input_free(sh_prog_input *in);

#endif
