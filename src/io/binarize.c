/*
 * binarize.c — dependency trees to binary trees and to child-sum trees (see
 * binarize.h). Both walk each sentence with an explicit stack of frames (a
 * 10,000-word chain is as safe as a 10-word sentence) and emit nodes in
 * post-order straight into the treebank. A sentence whose tree would be
 * deeper than SH_TB_MAX_DEPTH is refused before anything is built (its
 * binary tree can be far deeper than its dependency tree: a head with
 * 99,999 dependents binarizes 100,000 levels deep), so nothing is written
 * that the readers would refuse.
 */
#include "binarize.h"

#include <string.h>

typedef struct frame {
  int32_t h;     /* the head word (1-based) */
  int32_t idx;   /* next dependent to visit, an index into kids */
  int32_t split; /* first right dependent in kids */
  int32_t end;   /* one past its last dependent */
  int32_t cur;   /* node built so far for h (binary), -1 before its leaf */
  bool wait;     /* binary: a right dependent's subtree was just finished */
} frame;

/* Per call: work arrays, the frame stack, and id maps from the bank's
 * vocabularies to the treebank's (-1 = not interned yet). */
typedef struct conv {
  const sh_depbank *db;
  sh_treebank *tb;
  sheaf_ctx *ctx;
  sh_dep_work w;
  frame *frames;
  size_t cap_frames;
  int32_t *map; /* forms, then upos, then deprels */
  size_t map_len;
} conv;

static sheaf_status conv_init(conv *c, const sh_depbank *db, sh_treebank *tb) {
  memset(c, 0, sizeof *c);
  c->db = db;
  c->tb = tb;
  c->ctx = tb->ctx;
  sh_dep_work_init(&c->w, c->ctx);
  c->map_len = (size_t)db->forms.count + (size_t)db->upos.count + (size_t)db->deprels.count;
  c->map = sh_malloc(c->ctx, (c->map_len ? c->map_len : 1) * sizeof *c->map);
  if (!c->map) return SHEAF_ERR_NOMEM;
  memset(c->map, 0xff, c->map_len * sizeof *c->map);
  return SHEAF_OK;
}

static void conv_free(conv *c) {
  sh_dep_work_free(&c->w);
  sh_free(c->ctx, c->frames, c->cap_frames * sizeof *c->frames);
  sh_free(c->ctx, c->map, (c->map_len ? c->map_len : 1) * sizeof *c->map);
}

/* The treebank id of string `id` of bank vocabulary `src` (kind 0 forms,
 * 1 upos, 2 deprels), interned into dst on first use. */
static sheaf_status map_id(conv *c, int kind, int32_t id, int32_t *out) {
  const sh_depbank *db = c->db;
  const sh_vocab *src = kind == 0 ? &db->forms : kind == 1 ? &db->upos : &db->deprels;
  sh_vocab *dst = kind == 0 ? &c->tb->words : &c->tb->labels;
  size_t base = kind == 0 ? 0 : kind == 1 ? (size_t)db->forms.count
                                          : (size_t)db->forms.count + (size_t)db->upos.count;
  int32_t *slot = &c->map[base + (size_t)id];
  if (*slot < 0) {
    sheaf_status st = sh_vocab_intern(dst, sh_vocab_str(src, id), sh_vocab_len(src, id), slot);
    if (st != SHEAF_OK) return st;
  }
  *out = *slot;
  return SHEAF_OK;
}

/* Prepares the work arrays and frame stack for sentence s. */
static sheaf_status prepare(conv *c, int32_t s, const sh_dep_token **tok_out) {
  const sh_dep_sentence *sent = &c->db->sents[s];
  const sh_dep_token *tok = c->db->tokens + sent->first;
  sheaf_status st = sh_dep_work_build(&c->w, tok, sent->len);
  if (st != SHEAF_OK) return st;
  if (c->w.reached != sent->len || c->w.kid_off[1] != 1)
    return sh_fail(c->ctx, SHEAF_ERR_INTERNAL, "sentence %d is not a tree", s);
  if ((size_t)sent->len > c->cap_frames) {
    frame *f = sh_io_grow(c->ctx, c->frames, &c->cap_frames, (size_t)sent->len, sizeof *f);
    if (!f) return SHEAF_ERR_NOMEM;
    c->frames = f;
  }
  *tok_out = tok;
  return SHEAF_OK;
}

/* Height of every word's binary subtree (a leaf is 1) into height[0..n],
 * dependents before heads (reverse BFS order: no recursion):
 * cur = 1; per absorbed dependent d: cur = max(cur, height(d)) + 1.
 * Returns the root's. */
static int32_t bin_heights(const sh_dep_work *w, int32_t n, int32_t *height) {
  for (int32_t i = n; i >= 1; i--) {
    int32_t h = w->order[i], b = w->kid_off[h], e = w->kid_off[h + 1], split = b, cur = 1;
    while (split < e && w->kids[split] < h) split++;
    for (int32_t k = split; k < e; k++)
      cur = (height[w->kids[k]] > cur ? height[w->kids[k]] : cur) + 1;
    for (int32_t k = split - 1; k >= b; k--)
      cur = (height[w->kids[k]] > cur ? height[w->kids[k]] : cur) + 1;
    height[h] = cur;
  }
  return height[w->kids[0]];
}

/* SHEAF_ERR_PARSE at sentence s's first line when its tree (binary or
 * child-sum) would be deeper than SH_TB_MAX_DEPTH. */
static sheaf_status check_depth(conv *c, int32_t s, bool binary) {
  const sh_dep_sentence *sent = &c->db->sents[s];
  int32_t depth = binary ? bin_heights(&c->w, sent->len, c->w.c) : sent->depth;
  if (depth <= SH_TB_MAX_DEPTH) return SHEAF_OK;
  const sh_vocab *files = &c->db->files;
  const char *name = sent->file >= 0 && sent->file < sh_vocab_size(files)
                         ? sh_vocab_str(files, sent->file)
                         : "(input)";
  if (!binary)
    return sh_io_parse_error(c->ctx, name, (long)sent->line, 1,
                             "this sentence's tree is %d levels deep; trees deeper than %d "
                             "levels are refused in every format",
                             depth, SH_TB_MAX_DEPTH);
  return sh_io_parse_error(c->ctx, name, (long)sent->line, 1,
                           "binarized, this sentence (%d words, dependency depth %d) would be "
                           "a tree %d levels deep (each dependent a head absorbs adds a "
                           "level); trees deeper than %d levels are refused in every format "
                           "(the child-sum form keeps its dependency depth)",
                           sent->len, sent->depth, depth, SH_TB_MAX_DEPTH);
}

static frame new_frame(const sh_dep_work *w, int32_t h) {
  int32_t b = w->kid_off[h], e = w->kid_off[h + 1], split = b;
  while (split < e && w->kids[split] < h) split++;
  return (frame){h, b, split, e, -1, false};
}

/* One binary tree, post-order: bin(l_far) .. bin(l_near), leaf h,
 * [bin(r_i), absorb r_i] for r nearest first, then absorb l nearest first. */
static sheaf_status binarize_one(conv *c, const sh_dep_token *tok) {
  sh_dep_work *w = &c->w;
  sh_treebank *tb = c->tb;
  int32_t *top = w->b; /* top[word] = root node of its binary subtree */
  frame *fr = c->frames;
  int32_t sp = 0;
  sheaf_status st = sh_tb_begin_tree(tb);
  if (st != SHEAF_OK) return st;
  fr[sp++] = new_frame(w, w->kids[0]);
  while (sp > 0 && st == SHEAF_OK) {
    frame *f = &fr[sp - 1];
    if (f->idx < f->split) { /* left dependents, farthest first */
      fr[sp++] = new_frame(w, w->kids[f->idx++]);
      continue;
    }
    const sh_dep_token *t = &tok[f->h - 1];
    int32_t word, label, kid[2];
    if (f->cur < 0) {
      if ((st = map_id(c, 0, t->form, &word)) != SHEAF_OK) break;
      if ((st = map_id(c, 1, t->upos, &label)) != SHEAF_OK) break;
      if ((st = sh_tb_add_node(tb, word, label, NULL, 0, &f->cur)) != SHEAF_OK) break;
    }
    if (f->wait) { /* absorb the right dependent just finished */
      int32_t d = w->kids[f->idx - 1];
      kid[0] = f->cur;
      kid[1] = top[d];
      if ((st = map_id(c, 2, tok[d - 1].deprel, &label)) != SHEAF_OK) break;
      if ((st = sh_tb_add_node(tb, -1, label, kid, 2, &f->cur)) != SHEAF_OK) break;
      f->wait = false;
    }
    if (f->idx < f->end) { /* next right dependent, nearest first */
      f->wait = true;
      fr[sp++] = new_frame(w, w->kids[f->idx++]);
      continue;
    }
    for (int32_t k = f->split - 1; k >= w->kid_off[f->h] && st == SHEAF_OK; k--) {
      int32_t d = w->kids[k]; /* left dependents, nearest first */
      kid[0] = top[d];
      kid[1] = f->cur;
      st = map_id(c, 2, tok[d - 1].deprel, &label);
      if (st == SHEAF_OK) st = sh_tb_add_node(tb, -1, label, kid, 2, &f->cur);
    }
    top[f->h] = f->cur;
    sp--;
  }
  if (st != SHEAF_OK) {
    sh_tb_abort_tree(tb);
    return st;
  }
  return sh_tb_end_tree(tb);
}

/* One child-sum tree, post-order: dependents' subtrees in sentence order,
 * then the head's node. */
static sheaf_status childsum_one(conv *c, const sh_dep_token *tok) {
  sh_dep_work *w = &c->w;
  sh_treebank *tb = c->tb;
  int32_t *top = w->b, *buf = w->c;
  frame *fr = c->frames;
  int32_t sp = 0;
  sheaf_status st = sh_tb_begin_tree(tb);
  if (st != SHEAF_OK) return st;
  fr[sp++] = new_frame(w, w->kids[0]);
  while (sp > 0 && st == SHEAF_OK) {
    frame *f = &fr[sp - 1];
    if (f->idx < f->end) {
      fr[sp++] = new_frame(w, w->kids[f->idx++]);
      continue;
    }
    int32_t b = w->kid_off[f->h], word, label;
    for (int32_t k = b; k < f->end; k++) buf[k - b] = top[w->kids[k]];
    const sh_dep_token *t = &tok[f->h - 1];
    st = map_id(c, 0, t->form, &word);
    if (st == SHEAF_OK) st = map_id(c, 2, t->deprel, &label);
    if (st == SHEAF_OK) st = sh_tb_add_node(tb, word, label, buf, f->end - b, &top[f->h]);
    sp--;
  }
  if (st != SHEAF_OK) {
    sh_tb_abort_tree(tb);
    return st;
  }
  return sh_tb_end_tree(tb);
}

static sheaf_status convert(const sh_depbank *db, sh_treebank *tb, bool binary) {
  conv c;
  sh_tb_mark mark = sh_tb_get_mark(tb);
  sheaf_status st = conv_init(&c, db, tb);
  for (int32_t s = 0; s < db->n_sents && st == SHEAF_OK; s++) {
    const sh_dep_token *tok = NULL;
    st = prepare(&c, s, &tok);
    if (st == SHEAF_OK) st = check_depth(&c, s, binary);
    if (st == SHEAF_OK) st = binary ? binarize_one(&c, tok) : childsum_one(&c, tok);
  }
  if (st != SHEAF_OK) sh_tb_rollback(tb, mark);
  conv_free(&c);
  return st;
}

sheaf_status sh_binarize(const sh_depbank *db, sh_treebank *out) {
  return convert(db, out, true);
}

sheaf_status sh_childsum(const sh_depbank *db, sh_treebank *out) {
  return convert(db, out, false);
}

sheaf_status sh_binarized_height(const sh_depbank *db, int32_t s, sh_dep_work *w,
                                 int32_t *out) {
  const sh_dep_sentence *sent = &db->sents[s];
  const sh_dep_token *tok = db->tokens + sent->first;
  sheaf_status st = sh_dep_work_build(w, tok, sent->len);
  if (st != SHEAF_OK) return st;
  if (w->reached != sent->len)
    return sh_fail(w->ctx, SHEAF_ERR_INTERNAL, "sentence %d is not a tree", s);
  *out = bin_heights(w, sent->len, w->b);
  return SHEAF_OK;
}
