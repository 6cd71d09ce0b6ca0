/*
 * program_input.c — sheaf_program's instances from the C caller's sentences
 * (program_input.h): the arrays checked (lengths, NULL columns main reads,
 * a tree's heads as the CoNLL-U reader checks them: io/conllu.c's
 * sh_dep_check), then the words and columns flattened, or the trees built
 * by the same conversions as `sheaf run` (io/binarize.c) with the caller's
 * word ids at the nodes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/program_input.h"
#include "io/binarize.h"

void sh_prog_input_free(sh_prog_input *in) {
  free(in->off);
  free(in->words);
  free(in->upos);
  free(in->xpos);
  free(in->deprel);
  free(in->head);
  free((void *)in->form);
  free(in->form_len);
  if (in->have_tb) sh_tb_free(&in->tb);
  memset(in, 0, sizeof *in);
}

/* The columns main reads: bit f for token field f (SH_TF_*). */
static uint32_t fields_read(const sh_input_shape *shape) {
  if (shape->kind == SH_INPUT_RECORDS) return shape->uses | 1u << SH_TF_WORD;
  if (shape->kind == SH_INPUT_TOKENS) return 1u << SH_TF_WORD;
  return 1u << SH_TF_WORD | 1u << SH_TF_HEAD; /* trees */
}

static const int32_t *column(const sheaf_sentence *s, sh_tok_field f) {
  switch (f) {
  case SH_TF_WORD: return s->words;
  case SH_TF_UPOS: return s->upos;
  case SH_TF_XPOS: return s->xpos;
  case SH_TF_DEPREL: return s->deprel;
  case SH_TF_HEAD: return s->heads;
  default: return NULL;
  }
}

static const char *column_name(sh_tok_field f) {
  switch (f) {
  case SH_TF_WORD: return "words";
  case SH_TF_HEAD: return "heads";
  case SH_TF_CHARS: return "forms";
  default: return sh_tok_field_name(f);
  }
}

/* The lengths and the columns main reads, present. */
static sheaf_status check_arrays(sheaf_ctx *ctx, const sh_input_shape *shape, const char *fn, int64_t n,
                                 const sheaf_sentence *s, int64_t *total) {
  bool tree = shape->kind == SH_INPUT_BINARY_TREE || shape->kind == SH_INPUT_DEP_TREE;
  uint32_t need = fields_read(shape);
  *total = 0;
  for (int64_t i = 0; i < n; i++) {
    if (s[i].len < (tree ? 1 : 0) || s[i].len > INT32_MAX)
      return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: sentence %lld: len %lld (%s)", fn, (long long)i,
                     (long long)s[i].len, tree ? "a tree has 1 word or more" : "0 or more");
    for (int f = 0; f < SH_TF_COUNT && s[i].len > 0; f++) {
      if (!(need >> f & 1) || f == SH_TF_INDEX) continue;
      bool have = f == SH_TF_CHARS ? s[i].forms != NULL : column(&s[i], (sh_tok_field)f) != NULL;
      if (!have)
        return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: sentence %lld: %s is NULL, and main reads %s", fn,
                       (long long)i, column_name((sh_tok_field)f),
                       tree ? "a tree (words and heads)" : f == SH_TF_WORD ? "the words" : "that field");
    }
    for (int64_t k = 0; (need >> SH_TF_CHARS & 1) && k < s[i].len; k++)
      if (!s[i].forms[k])
        return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: sentence %lld: forms[%lld] is NULL", fn, (long long)i,
                       (long long)k);
    *total += s[i].len;
  }
  if (n > INT32_MAX || *total > INT32_MAX)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: %lld sentences, %lld words (at most 2^31 - 1 of each)", fn,
                   (long long)n, (long long)*total);
  return SHEAF_OK;
}

/* Copies column f of every sentence into one array (NULL where main does
 * not read it). */
static sheaf_status flatten(sheaf_ctx *ctx, const char *fn, int64_t n, const sheaf_sentence *s, int64_t total,
                            uint32_t need, sh_tok_field f, int32_t **out) {
  *out = NULL;
  if (!(need >> f & 1)) return SHEAF_OK;
  int32_t *a = malloc(((size_t)total + 1) * sizeof *a);
  if (!a) return sh_fail(ctx, SHEAF_ERR_NOMEM, "%s: out of memory (%lld words)", fn, (long long)total);
  for (int64_t i = 0, at = 0; i < n; i++)
    if (s[i].len) memcpy(a + at, column(&s[i], f), (size_t)s[i].len * sizeof *a), at += s[i].len;
  *out = a;
  return SHEAF_OK;
}

/* The message of a sentence whose heads are not a tree. */
static sheaf_status head_fault(sheaf_ctx *ctx, const char *fn, int64_t i, const sheaf_sentence *s,
                               const sh_dep_fault *f) {
  char pre[160];
  snprintf(pre, sizeof pre, "%s: sentence %lld: word %d: ", fn, (long long)i, f->word);
  switch (f->kind) {
  case SH_DEP_HEAD_RANGE:
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%shead %d is out of range: the sentence has %lld word%s", pre,
                   s->heads[f->word - 1], (long long)s->len, s->len == 1 ? "" : "s");
  case SH_DEP_SECOND_ROOT:
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%sa second root: its head is 0 but word %d is the root already", pre,
                   f->root);
  case SH_DEP_NO_ROOT:
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: sentence %lld: no root: no word has head 0", fn, (long long)i);
  case SH_DEP_CYCLE:
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                   "%sthe heads form a cycle: %s (words are numbered from 1; each word's head must lead to the root)",
                   pre, f->cycle);
  case SH_DEP_TOO_DEEP:
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                   "%s: sentence %lld: its dependency tree is %d levels deep (root = 1), over the limit of %d levels "
                   "(word %d is the first at level %d)",
                   fn, (long long)i, f->depth, SH_TB_MAX_DEPTH, f->word, SH_TB_MAX_DEPTH + 1);
  default: return SHEAF_OK;
  }
}

/* The trees: a dependency bank of the sentences (words interned as their
 * decimal ids, so the treebank's word strings give them back), converted as
 * `sheaf run` converts a CoNLL-U file, then each node's word put back to the
 * caller's id. */
static sheaf_status make_trees(sheaf_ctx *ctx, const sh_input_shape *shape, const char *fn, int64_t n,
                               const sheaf_sentence *s, sh_prog_input *in) {
  bool binary = shape->kind == SH_INPUT_BINARY_TREE;
  sh_depbank db;
  sh_depbank_init(&db, ctx);
  sh_dep_work w;
  sh_dep_work_init(&w, ctx);
  sh_dep_token *tok = NULL;
  size_t cap = 0;
  int32_t none = 0;
  sheaf_status st = sh_vocab_intern(&db.upos, "_", 1, &none);
  if (!st) st = sh_vocab_intern(&db.deprels, "_", 1, &none);
  for (int64_t i = 0; !st && i < n; i++) {
    int32_t len = (int32_t)s[i].len;
    if ((size_t)len > cap) {
      free(tok);
      cap = (size_t)len * 2;
      if (!(tok = malloc(cap * sizeof *tok))) st = SHEAF_ERR_NOMEM;
    }
    for (int32_t k = 0; !st && k < len; k++) {
      char num[16];
      int nl = snprintf(num, sizeof num, "%d", (int)s[i].words[k]);
      tok[k] = (sh_dep_token){.upos = none, .xpos = none, .deprel = none, .head = s[i].heads[k]};
      st = sh_vocab_intern(&db.forms, num, (size_t)nl, &tok[k].form);
    }
    sh_dep_fault f;
    if (!st) st = sh_dep_check(&w, tok, len, &f);
    if (!st && f.kind != SH_DEP_FINE) st = head_fault(ctx, fn, i, &s[i], &f);
    int32_t first = db.n_tokens, height = 0;
    if (!st) st = sh_depbank_add_tokens(&db, tok, len);
    if (!st) st = sh_depbank_end_sentence(&db, first, i, -1, &f);
    if (!st && binary) st = sh_binarized_height(&db, db.n_sents - 1, &w, &height);
    if (!st && height > SH_TB_MAX_DEPTH)
      st = sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                   "%s: sentence %lld: binarized, its tree (%d words, dependency depth %d) would be %d levels deep, "
                   "over the limit of %d levels (a head absorbs its dependents one at a time)",
                   fn, (long long)i, len, f.depth, height, SH_TB_MAX_DEPTH);
  }
  free(tok);
  sh_dep_work_free(&w);
  if (!st) {
    sh_tb_init(&in->tb, ctx);
    in->have_tb = true;
    st = binary ? sh_binarize(&db, &in->tb) : sh_childsum(&db, &in->tb);
  }
  for (int32_t v = 0; !st && v < in->tb.n_nodes; v++)
    if (in->tb.word[v] >= 0) in->tb.word[v] = (int32_t)strtol(sh_vocab_str(&in->tb.words, in->tb.word[v]), NULL, 10);
  sh_depbank_free(&db);
  if (st == SHEAF_ERR_NOMEM) st = sh_fail(ctx, st, "%s: out of memory (the trees of %lld sentences)", fn, (long long)n);
  return st;
}

sheaf_status sh_prog_input_make(sheaf_ctx *ctx, const sh_input_shape *shape, const char *fn, int64_t n,
                                const sheaf_sentence *s, sh_prog_input *in) {
  memset(in, 0, sizeof *in);
  if (n < 0 || (n > 0 && !s))
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: %lld sentences%s", fn, (long long)n,
                   n > 0 ? " but the array is NULL" : "");
  int64_t total;
  sheaf_status st = check_arrays(ctx, shape, fn, n, s, &total);
  if (st) return st;
  in->n = (int32_t)n;
  if (shape->kind == SH_INPUT_BINARY_TREE || shape->kind == SH_INPUT_DEP_TREE) {
    st = make_trees(ctx, shape, fn, n, s, in);
    if (st) sh_prog_input_free(in);
    return st;
  }
  uint32_t need = fields_read(shape);
  if (!(in->off = malloc(((size_t)n + 1) * sizeof *in->off))) st = SHEAF_ERR_NOMEM;
  for (int64_t i = 0, at = 0; !st && i <= n; i++) in->off[i] = (int32_t)at, at += i < n ? s[i].len : 0;
  if (!st) st = flatten(ctx, fn, n, s, total, need, SH_TF_WORD, &in->words);
  if (!st) st = flatten(ctx, fn, n, s, total, need, SH_TF_UPOS, &in->upos);
  if (!st) st = flatten(ctx, fn, n, s, total, need, SH_TF_XPOS, &in->xpos);
  if (!st) st = flatten(ctx, fn, n, s, total, need, SH_TF_DEPREL, &in->deprel);
  if (!st) st = flatten(ctx, fn, n, s, total, need, SH_TF_HEAD, &in->head);
  if (!st && (need >> SH_TF_CHARS & 1)) {
    in->form = malloc(((size_t)total + 1) * sizeof *in->form);
    in->form_len = malloc(((size_t)total + 1) * sizeof *in->form_len);
    if (!in->form || !in->form_len) st = SHEAF_ERR_NOMEM;
    for (int64_t i = 0, at = 0; !st && i < n; i++)
      for (int64_t k = 0; k < s[i].len; k++, at++) in->form[at] = s[i].forms[k], in->form_len[at] = strlen(s[i].forms[k]);
  }
  if (st == SHEAF_ERR_NOMEM) st = sh_fail(ctx, st, "%s: out of memory (%lld words)", fn, (long long)total);
  if (st) sh_prog_input_free(in);
  return st;
}
