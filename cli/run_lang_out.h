/*
 * run_lang_out.h — the output formats of `sheaf run MODEL.sf` (--format):
 * text lines, JSON lines, and .npy (cli/run_lang_out.c). Each instance's
 * outputs are formatted on their own (into a memory stream: instances
 * finish out of order on several threads) and written in instance order.
 */
#ifndef SHEAF_CLI_RUN_LANG_OUT_H
#define SHEAF_CLI_RUN_LANG_OUT_H

#include <stdio.h>

#include "lang/interp.h"

typedef enum lang_format { LANG_FORMAT_TEXT = 0, LANG_FORMAT_JSONL, LANG_FORMAT_NPY } lang_format;

/* text: one line per row of every tensor of v, depth first, each prefixed
 * by the instance (and, inside lists, the element index); scalars on a
 * line of their own; a list of scalars on one line. 0, or -1 on an error. */
int lang_out_text(FILE *f, sheaf_graph *g, const char *prefix, sh_value v);

/* jsonl: {"instance": I, "tokens": [...], "output": V} on one line; tokens
 * (the sentence's words, when given) let per-token outputs be read with
 * their word. A tensor is an array (a matrix an array of rows), a tuple an
 * object keyed by the part names of main's result type (ret, a tuple type
 * expression with names) or an array, a list an array, an ADT value
 * {"ctor": TAG, "fields": [...]}; non-finite numbers are null. */
int lang_out_json(FILE *f, sheaf_graph *g, const sh_module *m, int64_t instance, sh_value v,
                  const char *const *tokens, const size_t *token_len, int32_t n_tokens);

/* npy: v's rows as raw little-endian f32 (a tensor [c] is one row, [r, c]
 * r rows, a list of them its rows in order); *rows gets their count and
 * *cols their width, which must equal *cols when it is already > 0.
 * -1 when v is not made of f32 rows of one width (why says what). */
int lang_out_npy_rows(FILE *f, sheaf_graph *g, sh_value v, int64_t *rows, int64_t *cols, char *why,
                      size_t cap);
/* A .npy header (version 1.0, 128 bytes in all) for `rank` dimensions of
 * dtype "<f4" or "<i8", at the start of f. */
int lang_npy_header(FILE *f, const char *dtype, int rank, const int64_t *shape);
#define LANG_NPY_HEADER_BYTES 128

#endif
