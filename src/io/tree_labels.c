/*
 * tree_labels.c — the class of each tree (see tree_labels.h): the root
 * word's UPOS class from CoNLL-U, the root's integer label from PTB trees,
 * located in the file for error messages by a scan of its parentheses.
 */
#include "io/tree_labels.h"

#include <string.h>

#include "base/file.h"
#include "io/conllu.h"

static const char *const upos_classes[SH_TREE_CLASSES] = {"VERB", "NOUN", "PROPN", "ADJ", "other"};
static const char *const ptb_classes[SH_TREE_CLASSES] = {"0", "1", "2", "3", "4"};

const char *sh_tree_class_name(sh_tree_task task, int32_t c) {
  if (c < 0 || c >= SH_TREE_CLASSES) return "?";
  return task == SH_TREE_TASK_ROOT_UPOS ? upos_classes[c] : ptb_classes[c];
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

sh_tree_task sh_tree_task_of(const char *name) {
  return ends_with(name, ".conllu") ? SH_TREE_TASK_ROOT_UPOS : SH_TREE_TASK_PTB_ROOT;
}

static sheaf_status count_mismatch(sheaf_ctx *ctx, const char *name, int64_t got, int32_t want) {
  return sh_fail(ctx, SHEAF_ERR_PARSE,
                 "%s: %lld trees, but the data set has %d: the labels must come from the file the "
                 "trees were read from", name, (long long)got, (int)want);
}

static sheaf_status conllu_labels(sheaf_ctx *ctx, const char *data, size_t size, const char *name,
                                  const sh_dataset *d, int32_t *labels) {
  sh_depbank db;
  sh_depbank_init(&db, ctx);
  sheaf_status st = sh_conllu_read(&db, data, size, name);
  if (st == SHEAF_OK && db.n_sents != sh_dataset_count(d))
    st = count_mismatch(ctx, name, db.n_sents, sh_dataset_count(d));
  for (int32_t s = 0; st == SHEAF_OK && s < db.n_sents; s++) {
    const sh_dep_sentence *se = &db.sents[s];
    int32_t c = SH_TREE_CLASSES - 1;
    for (int32_t w = 0; w < se->len; w++) {
      const sh_dep_token *tk = &db.tokens[se->first + w];
      if (tk->head != 0) continue;
      const char *u = sh_vocab_str(&db.upos, tk->upos);
      for (int32_t k = 0; k < SH_TREE_CLASSES - 1; k++)
        if (!strcmp(u, upos_classes[k])) c = k;
      break; /* the reader checked: exactly one root */
    }
    labels[s] = c;
  }
  sh_depbank_free(&db);
  return st;
}

static bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Trees are the top-level parenthesized groups (words and labels hold no
 * parenthesis and the reader accepted the file, so counting them is
 * exact); the root's label is the token after the group's '('. */
static sheaf_status ptb_labels(sheaf_ctx *ctx, const char *data, size_t size, const char *name,
                               const sh_dataset *d, int32_t *labels) {
  const sh_treebank *tb = &d->tb;
  long line = 1, depth = 0;
  const char *line_start = data, *end = data + size;
  int32_t t = 0;
  for (const char *p = data; p < end; p++) {
    if (*p == '\n') {
      line++;
      line_start = p + 1;
    } else if (*p == ')') {
      depth--;
    } else if (*p == '(' && depth++ == 0) {
      if (t >= tb->n_trees) break; /* counted below */
      const char *q = p + 1;
      long l = line;
      const char *ls = line_start;
      while (q < end && is_space(*q)) {
        if (*q == '\n') {
          l++;
          ls = q + 1;
        }
        q++;
      }
      int32_t v = sh_tb_value(tb, tb->tree_root[t]);
      if (v < 0 || v >= SH_TREE_CLASSES) {
        const char *lab = sh_vocab_str(&tb->labels, tb->label[tb->tree_root[t]]);
        return sh_fail(ctx, SHEAF_ERR_PARSE,
                       "%s:%ld:%ld: error: tree %d: the root's label '%.40s' is not a class (an "
                       "integer 0..%d, as SST's sentiment)",
                       name, l, (long)(q - ls) + 1, (int)t + 1, lab, SH_TREE_CLASSES - 1);
      }
      labels[t++] = v;
    }
  }
  if (t != tb->n_trees) return count_mismatch(ctx, name, t, tb->n_trees);
  /* more groups than trees: count them all for the message */
  long groups = 0;
  depth = 0;
  for (const char *p = data; p < end; p++)
    if (*p == '(' && depth++ == 0) groups++;
    else if (*p == ')') depth--;
  if (groups != tb->n_trees) return count_mismatch(ctx, name, groups, tb->n_trees);
  return SHEAF_OK;
}

sheaf_status sh_tree_labels_mem(sheaf_ctx *ctx, const char *data, size_t size, const char *name,
                                const sh_dataset *d, int32_t *labels) {
  if (d->kind != SH_DATASET_BINARY)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sh_tree_labels: d: binary trees are needed");
  if (sh_tree_task_of(name) == SH_TREE_TASK_ROOT_UPOS)
    return conllu_labels(ctx, data, size, name, d, labels);
  return ptb_labels(ctx, data, size, name, d, labels);
}

sheaf_status sh_tree_labels_load(sheaf_ctx *ctx, const char *path, const sh_dataset *d,
                                 int32_t *labels) {
  sh_mapping m;
  sheaf_status st = sh_file_map(ctx, path, &m);
  if (st != SHEAF_OK) return st;
  st = sh_tree_labels_mem(ctx, (const char *)m.data, m.size, path, d, labels);
  sh_file_unmap(&m);
  return st;
}
