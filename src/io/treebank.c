/*
 * treebank.c — the flat tree collection (see treebank.h): storage growth,
 * the bottom-up builder with its checks, rollback, heights and depths.
 */
#include "treebank.h"

#include <string.h>

void sh_tb_init(sh_treebank *tb, sheaf_ctx *ctx) {
  memset(tb, 0, sizeof *tb);
  tb->ctx = ctx;
  tb->open_first = -1;
  sh_vocab_init(&tb->words, ctx);
  sh_vocab_init(&tb->labels, ctx);
}

void sh_tb_free(sh_treebank *tb) {
  sheaf_ctx *ctx = tb->ctx;
  if (!ctx) return;
  sh_free(ctx, tb->word, tb->cap_nodes * 5 * sizeof(int32_t));
  sh_free(ctx, tb->children, tb->cap_children * sizeof(int32_t));
  sh_free(ctx, tb->tree_root, tb->cap_trees * 3 * sizeof(int32_t));
  sh_free(ctx, tb->label_value, tb->cap_label_values * sizeof(int32_t));
  sh_vocab_free(&tb->words);
  sh_vocab_free(&tb->labels);
  sh_tb_init(tb, ctx);
}

/* Grows a block holding `k` int32 arrays of *cap entries each, of which
 * `used` are live, to room for `need`; re-carves the array pointers. */
static sheaf_status grow_soa(sheaf_ctx *ctx, int32_t **arrays[], int k, size_t *cap,
                             size_t used, size_t need) {
  if (need <= *cap) return SHEAF_OK;
  if (need > (size_t)INT32_MAX)
    return sh_fail(ctx, SHEAF_ERR_UNSUPPORTED, "treebank: more than %d nodes or trees",
                   INT32_MAX);
  size_t n = *cap ? *cap * 2 : 256;
  if (n < need) n = need;
  if (n > (size_t)INT32_MAX) n = (size_t)INT32_MAX;
  int32_t *block = sh_malloc(ctx, n * (size_t)k * sizeof(int32_t));
  if (!block) return SHEAF_ERR_NOMEM;
  int32_t *old = *arrays[0];
  for (int i = 0; i < k; i++) {
    if (used) memcpy(block + (size_t)i * n, *arrays[i], used * sizeof(int32_t));
    *arrays[i] = block + (size_t)i * n;
  }
  sh_free(ctx, old, *cap * (size_t)k * sizeof(int32_t));
  *cap = n;
  return SHEAF_OK;
}

/* Parses a decimal integer label ("-?[0-9]+" within int32). */
static int32_t label_number(const char *s, size_t n) {
  size_t i = 0;
  bool neg = n > 0 && s[0] == '-';
  if (neg) i = 1;
  if (i == n) return SH_TB_NO_VALUE;
  int64_t v = 0;
  for (; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return SH_TB_NO_VALUE;
    v = v * 10 + (s[i] - '0');
    if (v > (int64_t)INT32_MAX + 1) return SH_TB_NO_VALUE;
  }
  if (neg) v = -v;
  if (v <= INT32_MIN || v > INT32_MAX) return SH_TB_NO_VALUE; /* INT32_MIN is the marker */
  return (int32_t)v;
}

static sheaf_status sync_label_values(sh_treebank *tb) {
  int32_t n = sh_vocab_size(&tb->labels);
  if (tb->n_label_values == n) return SHEAF_OK;
  int32_t *p = sh_io_grow(tb->ctx, tb->label_value, &tb->cap_label_values, (size_t)n,
                          sizeof *p);
  if (!p) return SHEAF_ERR_NOMEM;
  tb->label_value = p;
  for (int32_t id = tb->n_label_values; id < n; id++)
    p[id] = label_number(sh_vocab_str(&tb->labels, id), sh_vocab_len(&tb->labels, id));
  tb->n_label_values = n;
  return SHEAF_OK;
}

sheaf_status sh_tb_begin_tree(sh_treebank *tb) {
  if (tb->open_first >= 0)
    return sh_fail(tb->ctx, SHEAF_ERR_INTERNAL, "treebank: a tree is already open");
  tb->open_first = tb->n_nodes;
  tb->open_child_refs = tb->n_child_refs;
  return SHEAF_OK;
}

sheaf_status sh_tb_add_node(sh_treebank *tb, int32_t word, int32_t label,
                            const int32_t *children, int32_t n_children, int32_t *out) {
  sheaf_ctx *ctx = tb->ctx;
  if (tb->open_first < 0)
    return sh_fail(ctx, SHEAF_ERR_INTERNAL, "treebank: add_node without begin_tree");
  if (word < -1 || word >= sh_vocab_size(&tb->words) || label < 0 ||
      label >= sh_vocab_size(&tb->labels) || n_children < 0)
    return sh_fail(ctx, SHEAF_ERR_INTERNAL,
                   "treebank: node with word %d, label %d, %d children is invalid", word,
                   label, n_children);
  for (int32_t i = 0; i < n_children; i++) {
    int32_t c = children[i];
    if (c < tb->open_first || c >= tb->n_nodes || tb->parent[c] != -1)
      return sh_fail(ctx, SHEAF_ERR_INTERNAL,
                     "treebank: child %d is not a parentless node of the open tree", c);
  }
  sheaf_status st = sync_label_values(tb);
  if (st != SHEAF_OK) return st;
  int32_t **node_arrays[] = {&tb->word, &tb->label, &tb->parent, &tb->n_children,
                             &tb->child_off};
  st = grow_soa(ctx, node_arrays, 5, &tb->cap_nodes, (size_t)tb->n_nodes,
                (size_t)tb->n_nodes + 1);
  if (st != SHEAF_OK) return st;
  size_t need = (size_t)tb->n_child_refs + (size_t)n_children;
  if (need > (size_t)INT32_MAX)
    return sh_fail(ctx, SHEAF_ERR_UNSUPPORTED, "treebank: more than %d children", INT32_MAX);
  if (need > tb->cap_children) {
    int32_t *p = sh_io_grow(ctx, tb->children, &tb->cap_children, need, sizeof *p);
    if (!p) return SHEAF_ERR_NOMEM;
    tb->children = p;
  }
  int32_t n = tb->n_nodes++;
  tb->word[n] = word;
  tb->label[n] = label;
  tb->parent[n] = -1;
  tb->n_children[n] = n_children;
  tb->child_off[n] = tb->n_child_refs;
  for (int32_t i = 0; i < n_children; i++) {
    tb->children[tb->n_child_refs++] = children[i];
    tb->parent[children[i]] = n;
  }
  *out = n;
  return SHEAF_OK;
}

sheaf_status sh_tb_end_tree(sh_treebank *tb) {
  sheaf_ctx *ctx = tb->ctx;
  int32_t first = tb->open_first;
  if (first < 0) return sh_fail(ctx, SHEAF_ERR_INTERNAL, "treebank: end_tree without begin");
  if (tb->n_nodes == first) {
    sh_tb_abort_tree(tb);
    return sh_fail(ctx, SHEAF_ERR_INTERNAL, "treebank: a tree needs at least one node");
  }
  int32_t root = tb->n_nodes - 1;
  for (int32_t n = first; n < root; n++)
    if (tb->parent[n] < 0) {
      sh_tb_abort_tree(tb);
      return sh_fail(ctx, SHEAF_ERR_INTERNAL,
                     "treebank: node %d has no parent but is not the root", n);
    }
  int32_t **tree_arrays[] = {&tb->tree_root, &tb->tree_first, &tb->tree_size};
  sheaf_status st = grow_soa(ctx, tree_arrays, 3, &tb->cap_trees, (size_t)tb->n_trees,
                             (size_t)tb->n_trees + 1);
  if (st != SHEAF_OK) {
    sh_tb_abort_tree(tb);
    return st;
  }
  int32_t t = tb->n_trees++;
  tb->tree_root[t] = root;
  tb->tree_first[t] = first;
  tb->tree_size[t] = tb->n_nodes - first;
  tb->open_first = -1;
  return SHEAF_OK;
}

void sh_tb_abort_tree(sh_treebank *tb) {
  if (tb->open_first < 0) return;
  tb->n_nodes = tb->open_first;
  tb->n_child_refs = tb->open_child_refs;
  tb->open_first = -1;
}

sh_tb_mark sh_tb_get_mark(const sh_treebank *tb) {
  sh_tb_mark m = {tb->n_trees, tb->n_nodes, tb->n_child_refs};
  return m;
}

void sh_tb_rollback(sh_treebank *tb, sh_tb_mark m) {
  tb->open_first = -1;
  tb->n_trees = m.n_trees;
  tb->n_nodes = m.n_nodes;
  tb->n_child_refs = m.n_child_refs;
}

void sh_tb_heights(const sh_treebank *tb, int32_t *out) {
  /* Children come before parents: one forward pass. */
  for (int32_t n = 0; n < tb->n_nodes; n++) {
    int32_t h = 0;
    for (int32_t i = 0; i < tb->n_children[n]; i++) {
      int32_t c = sh_tb_child(tb, n, i);
      if (out[c] > h) h = out[c];
    }
    out[n] = h + 1;
  }
}

void sh_tb_depths(const sh_treebank *tb, int32_t *out) {
  /* Parents come after children: one backward pass. */
  for (int32_t n = tb->n_nodes; n-- > 0;) {
    int32_t p = tb->parent[n];
    out[n] = p < 0 ? 1 : out[p] + 1;
  }
}

void sh_tb_tree_heights(const sh_treebank *tb, int32_t *scratch, int32_t *out) {
  sh_tb_heights(tb, scratch);
  for (int32_t t = 0; t < tb->n_trees; t++) out[t] = scratch[tb->tree_root[t]];
}

int32_t sh_tb_tree_words(const sh_treebank *tb, int32_t t) {
  int32_t n = 0, end = tb->tree_first[t] + tb->tree_size[t];
  for (int32_t i = tb->tree_first[t]; i < end; i++) n += tb->word[i] >= 0;
  return n;
}
