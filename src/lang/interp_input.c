/*
 * interp_input.c — a data instance to the value main takes: a tree of the
 * treebank (binary or dependency; built without recursion, so an input's
 * depth costs no C stack), a list of word ids, or a sentence's token
 * records.
 */
#include "lang/interp_int.h"

/* A node of the tree being converted whose children are not all done. */
typedef struct tree_frame {
  int32_t n, next; /* the node; its next child to convert */
  sh_agg *a;       /* its children's values (a dependency tree's list) or NULL (a leaf) */
} tree_frame;

/* The value of node n once its children's values are in f->a. */
static sh_value tree_node_value(sh_interp *ip, const sh_treebank *tb, const tree_frame *f,
                                sh_word_ids ids) {
  const sh_input_shape *in = ip->in;
  int32_t row = sh_word_id(ids, tb->word[f->n]);
  if (in->kind == SH_INPUT_DEP_TREE) {
    sh_agg *a = agg_new(ip, in->ctor_dep, in->adt->ctors[in->ctor_dep].n_fields);
    if (!a) return v_none;
    a->items[in->leaf_word] = mk_word(row);
    a->items[in->dep_kids] = mk_agg(SH_V_LIST, f->a);
    return mk_agg(SH_V_ADT, a);
  }
  if (f->a) return mk_agg(SH_V_ADT, f->a); /* a node: its constructor holds the children */
  sh_agg *a = agg_new(ip, in->ctor_leaf, 1);
  if (!a) return v_none;
  a->items[0] = mk_word(row);
  return mk_agg(SH_V_ADT, a);
}

/* The value of the subtree at node `root`, built without recursion (an
 * explicit stack of the nodes whose children are pending), so the depth of
 * an input costs no C stack. A unary node of a binary tree passes its child
 * through unless the tree type has a unary constructor. */
static sh_value tree_value(sh_interp *ip, const sh_treebank *tb, int32_t root, sh_word_ids ids) {
  const sh_input_shape *in = ip->in;
  bool dep = in->kind == SH_INPUT_DEP_TREE;
  size_t cap = 64, depth = 0;
  tree_frame *st = sh_alloc(ip->ctx, cap * sizeof *st, 16);
  if (!st) return ip->err = SHEAF_ERR_NOMEM, v_none;
  sh_value out = v_none;
  int32_t n = root; /* the node to enter next, or -1 */
  while (!ip->err) {
    if (n >= 0) { /* enter n: a frame for its children's values */
      int32_t nc = tb->n_children[n];
      if (!dep && nc == 1 && in->ctor_unary < 0) { /* passed through */
        n = sh_tb_child(tb, n, 0);
        continue;
      }
      if (!dep && nc > 2) {
        sh_interp_failf(ip, "tree node with %d children: the model takes binary trees", (int)nc);
        break;
      }
      if (depth == cap) {
        tree_frame *bigger = sh_realloc(ip->ctx, st, cap * sizeof *st, 2 * cap * sizeof *st);
        if (!bigger) {
          ip->err = SHEAF_ERR_NOMEM;
          break;
        }
        st = bigger;
        cap *= 2;
      }
      tree_frame *f = &st[depth++];
      f->n = n;
      f->next = 0;
      f->a = dep ? agg_new(ip, -1, nc)
                 : nc ? agg_new(ip, nc == 1 ? in->ctor_unary : in->ctor_node, nc) : NULL;
      if ((dep || nc) && !f->a) break;
      n = -1;
    }
    tree_frame *f = &st[depth - 1];
    if (f->next < tb->n_children[f->n]) { /* its next child */
      n = sh_tb_child(tb, f->n, f->next);
      continue;
    }
    sh_value v = tree_node_value(ip, tb, f, ids); /* all children done */
    if (ip->err) break;
    if (--depth == 0) {
      out = v;
      break;
    }
    tree_frame *parent = &st[depth - 1];
    parent->a->items[parent->next++] = v;
  }
  sh_free(ip->ctx, st, cap * sizeof *st);
  return ip->err ? v_none : out;
}

sheaf_status sh_interp_tree(sh_interp *ip, const sh_treebank *tb, int32_t node, sh_word_ids ids,
                            sh_value *out) {
  if (ip->in->kind != SH_INPUT_BINARY_TREE && ip->in->kind != SH_INPUT_DEP_TREE)
    return sh_fail(ip->ctx, SHEAF_ERR_INVALID_ARG, "main does not take a tree");
  ip->err = SHEAF_OK;
  ip->cur = &ip->pool; /* the batch's (another instance may be inside a loop) */
  ip->cur_gen = 0;
  *out = tree_value(ip, tb, node, ids);
  return ip->err;
}

sheaf_status sh_interp_ints(sh_interp *ip, const int32_t *v, int32_t n, sh_value *out) {
  ip->err = SHEAF_OK;
  ip->cur = &ip->pool; /* the batch's (another instance may be inside a loop) */
  ip->cur_gen = 0;
  sh_agg *a = agg_new(ip, -1, n);
  if (!a) return ip->err;
  for (int32_t i = 0; i < n; i++) a->items[i] = mk_word(v[i]);
  *out = mk_agg(SH_V_LIST, a);
  return SHEAF_OK;
}

sheaf_status sh_interp_records(sh_interp *ip, const sh_token_cols *t, sh_value *out) {
  ip->err = SHEAF_OK;
  ip->cur = &ip->pool; /* the batch's (another instance may be inside a loop) */
  ip->cur_gen = 0;
  const sh_input_shape *in = ip->in;
  if (in->kind != SH_INPUT_RECORDS)
    return sh_fail(ip->ctx, SHEAF_ERR_INVALID_ARG, "main does not take token records");
  const int32_t *col[SH_TF_COUNT] = {t->word, t->upos, t->xpos, t->deprel, t->head, NULL, NULL};
  for (int f = 0; f < SH_TF_COUNT; f++)
    if (in->uses >> f & 1 && f != SH_TF_INDEX && (f == SH_TF_CHARS ? !t->form : !col[f]))
      return sh_fail(ip->ctx, SHEAF_ERR_INVALID_ARG,
                     "main reads the token field '%s', which the data does not have (%s)",
                     sh_tok_field_name((sh_tok_field)f),
                     f == SH_TF_CHARS ? "word texts: token ids have none" : "it comes from CoNLL-U");
  sh_agg *l = agg_new(ip, -1, t->n);
  if (!l) return ip->err;
  for (int32_t i = 0; i < t->n; i++) {
    sh_agg *r = agg_new(ip, in->ctor_rec, in->n_rec_fields);
    if (!r) return ip->err;
    for (int k = 0; k < in->n_rec_fields; k++) {
      int f = in->rec_field[k];
      if (f == SH_TF_WORD) {
        r->items[k] = mk_word(t->word[i]);
      } else if (f == SH_TF_INDEX) {
        r->items[k] = mk_int(i);
      } else if (f == SH_TF_CHARS) {
        size_t n = t->form_len[i];
        sh_agg *c = agg_new(ip, -1, (int32_t)n);
        if (!c) return ip->err;
        for (size_t b = 0; b < n; b++) c->items[b] = mk_int((unsigned char)t->form[i][b]);
        r->items[k] = mk_agg(SH_V_LIST, c);
      } else {
        r->items[k] = mk_int(col[f][i]);
      }
    }
    l->items[i] = mk_agg(SH_V_ADT, r);
  }
  *out = mk_agg(SH_V_LIST, l);
  return SHEAF_OK;
}
