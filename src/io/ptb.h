/*
 * ptb.h — PTB s-expression trees (the Stanford Sentiment Treebank format):
 *
 *   (3 (2 It) (4 (2 's) (3 (2 a) (2 gift))))
 *
 * Reading. Trees follow each other separated by any whitespace: one per line
 * or spread over lines, several per line. Grammar:
 *
 *   file -> tree*
 *   tree -> '(' label word? tree* ')'      with a word or at least one tree
 *
 * so a leaf is (LABEL word) and an internal node (LABEL tree+). Every node
 * needs a label: an unlabelled leaf "(word)" or the WSJ wrapper "( (S ..) )"
 * is an error, as is a bare word where a subtree belongs. A node with a word
 * and subtrees, (LABEL word tree+), is the child-sum form written by
 * `sheaf data binarize --child-sum` (a head word with its dependents).
 * Tokens are maximal runs of bytes other than '(', ')' and ASCII whitespace.
 * In words and labels every "-LRB-" becomes '(' and every "-RRB-" ')' (the
 * PTB escapes), so "(2 -LRB-)" is the word "(". Nesting deeper than
 * SH_TB_MAX_DEPTH (treebank.h) is an error (the parser itself uses an explicit stack).
 * Errors are SHEAF_ERR_PARSE "NAME:LINE:COL: error: ..." (1-based, columns in
 * bytes); on error the treebank keeps the trees it had before the call.
 *
 * Writing. One tree per line, single spaces: "(LABEL word)" for a leaf,
 * "(LABEL word? child child ...)" otherwise. In words and labels '(' is
 * written -LRB-, ')' -RRB-, and each ASCII whitespace byte (space, TAB, LF,
 * CR, VT, FF) as U+00A0 NO-BREAK SPACE (bytes C2 A0, as Stanford CoreNLP
 * does), which reads back as part of the token. An empty word or label
 * cannot be written (SHEAF_ERR_INVALID_ARG). Reading what was written gives
 * the same trees, except that whitespace stays U+00A0 and a word that held
 * "-LRB-"/"-RRB-" literally comes back as a parenthesis.
 */
#ifndef SH_IO_PTB_H
#define SH_IO_PTB_H

#include "base/buf.h"
#include "io/treebank.h"

/* The PTB reader's nesting limit: the limit of every format (treebank.h). */
#define SH_PTB_MAX_DEPTH SH_TB_MAX_DEPTH

/* Appends the trees of data[0..size) to tb; name is used in messages. */
sheaf_status sh_ptb_read(sh_treebank *tb, const char *data, size_t size, const char *name);
sheaf_status sh_ptb_read_file(sh_treebank *tb, const char *path);

/* Appends tree t (no newline) / every tree, one per line, to out. */
sheaf_status sh_ptb_write_tree(const sh_treebank *tb, int32_t t, sh_buf *out);
sheaf_status sh_ptb_write(const sh_treebank *tb, sh_buf *out);

#endif
