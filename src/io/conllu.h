/*
 * conllu.h — CoNLL-U reader (Universal Dependencies,
 * https://universaldependencies.org/format.html) into a dependency bank.
 *
 * A word line has 10 TAB-separated fields: ID FORM LEMMA UPOS XPOS FEATS
 * HEAD DEPREL DEPS MISC. Kept: FORM, UPOS, XPOS, HEAD, DEPREL. Lines starting
 * with '#' are comments (allowed anywhere); a sentence ends at a blank line
 * or at the end of the file (a missing final blank line is fine; further
 * blank lines are ignored). Multiword-token lines (ID "3-4") and empty nodes
 * (ID "5.1") are skipped but counted. A trailing '\r' (CRLF files) and a
 * UTF-8 byte-order mark are ignored.
 *
 * Checked, each a SHEAF_ERR_PARSE "NAME:LINE:COL: error: ..." with the
 * column (1-based, in bytes) where the line goes wrong: exactly 10 fields
 * (too few: the end of the line; too many: the 10th TAB), no empty field,
 * IDs 1, 2, 3, ... in each sentence, HEAD an integer in 0..n (n words in the
 * sentence), exactly one root (HEAD 0), no cycle, no sentence without words
 * (comments or multiword lines followed by a blank line), dependency depth
 * at most SH_TB_MAX_DEPTH (treebank.h; reported at the sentence's first
 * line with the depth reached). On error the bank keeps the sentences it
 * had before the call.
 */
#ifndef SH_IO_CONLLU_H
#define SH_IO_CONLLU_H

#include "io/treebank.h"

typedef struct sh_dep_token {
  int32_t form, upos, xpos, deprel; /* ids in the bank's vocabularies */
  int32_t head;               /* 1-based word index in the sentence; 0 = root */
} sh_dep_token;

typedef struct sh_dep_sentence {
  int64_t line;   /* line of its first word */
  int32_t first;  /* index of its first token in tokens */
  int32_t len;    /* words */
  int32_t depth;  /* dependency depth: longest root-to-word path, root = 1 */
  bool projective; /* every subtree spans a contiguous run of words */
  bool crossing;   /* two arcs between words cross (the root's arc aside) */
  int32_t file;    /* the name it was read from: an id in the bank's `files` */
} sh_dep_sentence;

typedef struct sh_depbank {
  sheaf_ctx *ctx;
  sh_dep_token *tokens; /* the words of all sentences, in order */
  int32_t n_tokens;
  size_t cap_tokens;
  sh_dep_sentence *sents;
  int32_t n_sents;
  size_t cap_sents;
  sh_vocab forms, upos, xpos, deprels;
  sh_vocab files;          /* names given to sh_conllu_read, for later messages */
  int64_t n_multiword;     /* skipped "3-4" lines */
  int64_t n_empty_nodes;   /* skipped "5.1" lines */
  /* Non-projective sentences: some subtree's words are not contiguous (the
   * usual definition, with the root's arc from a virtual word 0 counted).
   * Exactly these trees binarize to leaves out of sentence order. Of them,
   * n_crossing have two crossing arcs between words; the rest only have an
   * arc spanning the root word. */
  int32_t n_nonprojective;
  int32_t n_crossing;
} sh_depbank;

void sh_depbank_init(sh_depbank *db, sheaf_ctx *ctx);
void sh_depbank_free(sh_depbank *db);

/* Appends the sentences of data[0..size); name is used in messages. */
sheaf_status sh_conllu_read(sh_depbank *db, const char *data, size_t size, const char *name);
sheaf_status sh_conllu_read_file(sh_depbank *db, const char *path);

/* ---- analysis of one sentence (shared with binarize.c) ----
 * Children lists in CSR form over positions 0..n (0 = the virtual root):
 * the dependents of h are kids[kid_off[h] .. kid_off[h+1]), ascending; and
 * `order`, the positions in breadth-first order from the virtual root. */
typedef struct sh_dep_work {
  sheaf_ctx *ctx;
  int32_t *block;
  size_t cap;       /* sentence length the block is sized for */
  int32_t *kid_off; /* n + 2 */
  int32_t *kids;    /* n */
  int32_t *order;   /* n + 1, order[0] = 0 */
  int32_t *a, *b, *c; /* n + 1 each: scratch */
  int32_t reached;  /* words reached from the root (n when it is a tree) */
} sh_dep_work;

void sh_dep_work_init(sh_dep_work *w, sheaf_ctx *ctx);
void sh_dep_work_free(sh_dep_work *w);
/* Builds kid lists and the BFS order of the n tokens (heads must be in
 * 0..n). */
sheaf_status sh_dep_work_build(sh_dep_work *w, const sh_dep_token *tok, int32_t n);

/* What is wrong with a sentence's HEAD fields (sh_dep_check): the kind, the
 * word at fault (1-based: its HEAD out of 0..n, a second HEAD 0, a word on
 * the cycle, the first word past SH_TB_MAX_DEPTH; 1 for no root), the
 * first root (SECOND_ROOT), and of a fine one its measures. Callers word the
 * message with their own positions (a file's line and column, an API's
 * sentence and word). */
typedef enum sh_dep_fault_kind {
  SH_DEP_FINE,
  SH_DEP_HEAD_RANGE,
  SH_DEP_SECOND_ROOT,
  SH_DEP_NO_ROOT,
  SH_DEP_CYCLE,
  SH_DEP_TOO_DEEP
} sh_dep_fault_kind;
typedef struct sh_dep_fault {
  sh_dep_fault_kind kind;
  int32_t word, root;
  int32_t depth;           /* dependency depth, root = 1 (FINE, TOO_DEEP) */
  bool projective, crossing; /* FINE */
  char cycle[256];         /* CYCLE: "3 -> 5 -> 3" */
} sh_dep_fault;
/* Checks the n tokens' heads as the reader does (each in 0..n, exactly one
 * root, no cycle, depth at most SH_TB_MAX_DEPTH) into *f; an error status
 * only when out of memory. */
sheaf_status sh_dep_check(sh_dep_work *w, const sh_dep_token *tok, int32_t n, sh_dep_fault *f);
/* Appends tokens to the bank; then a sentence of the tokens from `first` to
 * the bank's last, checked (f from sh_dep_check, kind FINE), its first line
 * and file id for later messages (-1: none). */
sheaf_status sh_depbank_add_tokens(sh_depbank *db, const sh_dep_token *tok, int32_t n);
sheaf_status sh_depbank_end_sentence(sh_depbank *db, int32_t first, int64_t line, int32_t file, const sh_dep_fault *f);

#endif
