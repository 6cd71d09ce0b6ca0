/*
 * input.h — what `main` may take, decided once from its parameter type and
 * shared by the checker (which reports anything `sheaf run` cannot feed, at
 * the parameter's type) and the interpreter (which builds each instance's
 * value from it):
 *
 *   list[i32]                          a sentence's word ids
 *   list[R]                            a sentence of token records: R has one
 *                                      constructor whose fields are named token
 *                                      fields (below), in any order and subset
 *   Leaf(i32) | Node(T, T) [| Unary(T)] a binary tree (words at the leaves)
 *   Dep(i32, list[T])                  a dependency tree (a word per node)
 *
 * Token fields (CoNLL-U columns): word (i32: a word of the data, looked up
 * like any word), upos (0..16, the universal tags in the order of
 * sh_upos_names), xpos (the treebank's tags numbered by first appearance),
 * deprel (0..36, the universal relations; 37 another), head (CoNLL-U HEAD:
 * the head's 1-based position, 0 for the root), index (the word's 0-based
 * position) and chars (list[i32]: the UTF-8 bytes of the word form).
 */
#ifndef SH_LANG_INPUT_H
#define SH_LANG_INPUT_H

#include "lang/ast.h"

typedef enum sh_input_kind {
  SH_INPUT_UNSUPPORTED = 0,
  SH_INPUT_BINARY_TREE, /* ADT: Leaf(i32) | Node(T, T) (| Unary(T)) */
  SH_INPUT_DEP_TREE,    /* ADT: Dep(i32, list[T]) */
  SH_INPUT_TOKENS,      /* list[i32] */
  SH_INPUT_RECORDS      /* list[R], R a record of token fields */
} sh_input_kind;

typedef enum sh_tok_field {
  SH_TF_WORD = 0, SH_TF_UPOS, SH_TF_XPOS, SH_TF_DEPREL, SH_TF_HEAD, SH_TF_INDEX, SH_TF_CHARS,
  SH_TF_COUNT
} sh_tok_field;

#define SH_INPUT_MAX_FIELDS 16

typedef struct sh_input_shape {
  sh_input_kind kind;
  const sh_adt *adt;
  int ctor_leaf, ctor_node, ctor_unary, ctor_dep, leaf_word, dep_kids; /* trees (-1: none) */
  int ctor_rec, n_rec_fields;                  /* RECORDS: the record's constructor */
  uint8_t rec_field[SH_INPUT_MAX_FIELDS];      /* its field i is token field rec_field[i] */
  uint32_t uses;                               /* RECORDS: bit f set when field f is read */
} sh_input_shape;

/* The name of a token field ("upos"). */
const char *sh_tok_field_name(sh_tok_field f);

/* Classifies main's parameter type t. On SH_INPUT_UNSUPPORTED, why (cap
 * bytes) says what sheaf run can feed instead, naming the offending part. */
void sh_input_classify(const sh_type *t, const sh_symtab *syms, sh_input_shape *out, char *why,
                       size_t cap);

#endif
