/*
 * dataset.c — loaders for the models' inputs (see dataset.h): CoNLL-U
 * treebanks binarized or as child-sum trees, PTB trees, tagged sentences and
 * token lines; the embedding vocabulary and the MV-RNN's capped one.
 */
#include "dataset.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/binarize.h"
#include "io/conllu.h"
#include "io/ptb.h"
#include "io/seqs.h"

const char *const sh_upos_names[SH_UPOS_COUNT] = {
    "ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM",
    "PART", "PRON", "PROPN", "PUNCT", "SCONJ", "SYM", "VERB", "X"};

const char *const sh_deprel_names[SH_DEPREL_COUNT] = {
    "acl",   "advcl",     "advmod", "amod",     "appos",      "aux",   "case",  "cc",
    "ccomp", "clf",       "compound", "conj",   "cop",        "csubj", "dep",   "det",
    "discourse", "dislocated", "expl", "fixed", "flat",       "goeswith", "iobj", "list",
    "mark",  "nmod",      "nsubj",  "nummod",   "obj",        "obl",   "orphan", "parataxis",
    "punct", "reparandum", "root",  "vocative", "xcomp"};

static int32_t deprel_index(const char *s) {
  size_t n = strcspn(s, ":");
  for (int32_t i = 0; i < SH_DEPREL_COUNT; i++)
    if (strlen(sh_deprel_names[i]) == n && !strncmp(s, sh_deprel_names[i], n)) return i;
  return SH_DEPREL_COUNT; /* another relation */
}

void sh_dataset_init(sh_dataset *d, sheaf_ctx *ctx, sh_dataset_kind kind) {
  memset(d, 0, sizeof *d);
  d->ctx = ctx;
  d->kind = kind;
  sh_tb_init(&d->tb, ctx);
  sh_vocab_init(&d->words, ctx);
  sh_vocab_init(&d->xpos, ctx);
  d->max_vocab = SH_DATASET_MAX_VOCAB_DEFAULT;
}

/* Frees the CoNLL-U columns (XPOS, DEPREL, HEAD). */
static void drop_columns(sh_dataset *d) {
  sh_free(d->ctx, d->sent_xpos, d->cols_bytes);
  sh_free(d->ctx, d->sent_deprel, d->cols_bytes);
  sh_free(d->ctx, d->sent_head, d->cols_bytes);
  d->sent_xpos = d->sent_deprel = d->sent_head = NULL;
  d->cols_bytes = 0;
}

void sh_dataset_free(sh_dataset *d) {
  sheaf_ctx *ctx = d->ctx;
  if (!ctx) return;
  sh_tb_free(&d->tb);
  sh_vocab_free(&d->words);
  sh_free(ctx, d->sent_off, d->cap_sents * sizeof(int32_t));
  sh_free(ctx, d->sent_words, d->cap_words * sizeof(int32_t));
  sh_free(ctx, d->sent_tags, d->cap_tags * sizeof(int32_t));
  drop_columns(d);
  sh_vocab_free(&d->xpos);
  sh_free(ctx, d->mv_row, (size_t)d->ids.n_ids * sizeof(int32_t));
  sh_dataset_kind kind = d->kind;
  int64_t max_vocab = d->max_vocab;
  sh_dataset_init(d, ctx, kind);
  d->max_vocab = max_vocab;
}

/* Room for n_sents + 1 offsets and n_tokens words and tags. */
static sheaf_status reserve_sents(sh_dataset *d, size_t n_sents, size_t n_tokens) {
  sheaf_ctx *ctx = d->ctx;
  int32_t *p;
  if (n_sents + 1 > d->cap_sents) {
    if (!(p = sh_io_grow(ctx, d->sent_off, &d->cap_sents, n_sents + 1, sizeof(int32_t))))
      return SHEAF_ERR_NOMEM;
    d->sent_off = p;
  }
  if (n_tokens > d->cap_words) {
    if (!(p = sh_io_grow(ctx, d->sent_words, &d->cap_words, n_tokens, sizeof(int32_t))))
      return SHEAF_ERR_NOMEM;
    d->sent_words = p;
  }
  if (n_tokens > d->cap_tags) {
    if (!(p = sh_io_grow(ctx, d->sent_tags, &d->cap_tags, n_tokens, sizeof(int32_t))))
      return SHEAF_ERR_NOMEM;
    d->sent_tags = p;
  }
  if (d->n_sents == 0) d->sent_off[0] = 0;
  return SHEAF_OK;
}

sheaf_status sh_dataset_add_sent(sh_dataset *d, const int32_t *words, const int32_t *tags, int32_t n) {
  if (n < 0 || (int64_t)d->n_tokens + n > INT32_MAX || d->n_sents == INT32_MAX - 1)
    return sh_fail(d->ctx, SHEAF_ERR_INVALID_ARG, "sh_dataset_add_sent: bad length %d", (int)n);
  sheaf_status st = reserve_sents(d, (size_t)d->n_sents + 1, (size_t)d->n_tokens + (size_t)n);
  if (st != SHEAF_OK) return st;
  drop_columns(d); /* they do not cover the new words */
  for (int32_t i = 0; i < n; i++) {
    d->sent_words[d->n_tokens + i] = words[i];
    d->sent_tags[d->n_tokens + i] = tags ? tags[i] : -1;
  }
  d->n_tokens += n;
  d->n_sents++;
  d->sent_off[d->n_sents] = d->n_tokens;
  return SHEAF_OK;
}

/* Bulk version for loaders: all sentences at once (words and tags to be
 * filled by the caller). */
static sheaf_status set_sents(sh_dataset *d, int32_t n_sents, const int32_t *lens,
                              int32_t n_tokens) {
  sheaf_status st = reserve_sents(d, (size_t)n_sents, (size_t)n_tokens);
  if (st != SHEAF_OK) return st;
  d->n_sents = n_sents;
  d->n_tokens = n_tokens;
  d->sent_off[0] = 0;
  for (int32_t s = 0; s < n_sents; s++) d->sent_off[s + 1] = d->sent_off[s] + lens[s];
  return SHEAF_OK;
}

static int32_t upos_index(const char *s) {
  for (int i = 0; i < SH_UPOS_COUNT; i++)
    if (!strcmp(s, sh_upos_names[i])) return i;
  return -1;
}

static sheaf_status load_conllu_sents(sh_dataset *d, sh_depbank *db) {
  sheaf_ctx *ctx = d->ctx;
  int32_t *lens = sh_malloc(ctx, ((size_t)db->n_sents + 1) * sizeof(int32_t));
  int32_t n_upos = sh_vocab_size(&db->upos);
  int32_t *umap = sh_malloc(ctx, ((size_t)n_upos + 1) * sizeof(int32_t));
  sheaf_status st = (lens && umap) ? SHEAF_OK : SHEAF_ERR_NOMEM;
  if (st == SHEAF_OK) {
    for (int32_t s = 0; s < db->n_sents; s++) lens[s] = db->sents[s].len;
    for (int32_t u = 0; u < n_upos; u++) umap[u] = upos_index(sh_vocab_str(&db->upos, u));
    st = set_sents(d, db->n_sents, lens, db->n_tokens);
  }
  int32_t n_rel = sh_vocab_size(&db->deprels);
  int32_t *rmap = st == SHEAF_OK ? sh_malloc(ctx, ((size_t)n_rel + 1) * sizeof(int32_t)) : NULL;
  size_t tok_bytes = (size_t)db->n_tokens * sizeof(int32_t) + 1;
  if (st == SHEAF_OK) {
    d->cols_bytes = tok_bytes;
    if (!rmap || !(d->sent_xpos = sh_malloc(ctx, tok_bytes)) || !(d->sent_deprel = sh_malloc(ctx, tok_bytes)) ||
        !(d->sent_head = sh_malloc(ctx, tok_bytes)))
      st = SHEAF_ERR_NOMEM;
  }
  if (st == SHEAF_OK) {
    for (int32_t r = 0; r < n_rel; r++) rmap[r] = deprel_index(sh_vocab_str(&db->deprels, r));
    for (int32_t s = 0; s < db->n_sents; s++) {
      const sh_dep_sentence *se = &db->sents[s];
      for (int32_t i = 0; i < se->len; i++) {
        const sh_dep_token *tk = &db->tokens[se->first + i];
        int32_t at = d->sent_off[s] + i;
        d->sent_words[at] = tk->form;
        d->sent_tags[at] = umap[tk->upos];
        d->sent_xpos[at] = tk->xpos;
        d->sent_deprel[at] = rmap[tk->deprel];
        d->sent_head[at] = tk->head;
      }
    }
    sh_vocab_free(&d->xpos);
    d->xpos = db->xpos;
    sh_vocab_init(&db->xpos, ctx);
    /* the forms vocabulary moves over to d->words */
    sh_vocab_free(&d->words);
    d->words = db->forms;
    sh_vocab_init(&db->forms, ctx);
  }
  sh_free(ctx, lens, ((size_t)db->n_sents + 1) * sizeof(int32_t));
  sh_free(ctx, umap, ((size_t)n_upos + 1) * sizeof(int32_t));
  if (rmap) sh_free(ctx, rmap, ((size_t)n_rel + 1) * sizeof(int32_t));
  return st;
}

/* The limit on token ids and how a message names it. */
static sh_seqs_options ids_options(int64_t limit, const char *what, char *buf, size_t cap) {
  if (!what) {
    if (limit == SH_DATASET_MAX_VOCAB_DEFAULT)
      snprintf(buf, cap, "--max-vocab, default %d", SH_DATASET_MAX_VOCAB_DEFAULT);
    else
      snprintf(buf, cap, "--max-vocab %lld", (long long)limit);
    what = buf;
  }
  return (sh_seqs_options){.mode = SH_SEQS_AUTO, .id_limit = limit, .id_limit_what = what};
}

/* Token lines from a file (data NULL) or memory. */
static sheaf_status load_token_lines(sh_dataset *d, const char *path, const char *data,
                                     size_t size, const char *what) {
  sheaf_ctx *ctx = d->ctx;
  sh_seqs seqs;
  sh_seqs_init(&seqs, ctx);
  char buf[64];
  sh_seqs_options so = ids_options(d->max_vocab, what, buf, sizeof buf);
  sheaf_status st = data ? sh_seqs_read(&seqs, data, size, path, &so)
                         : sh_seqs_read_file(&seqs, path, &so);
  int32_t *lens = NULL;
  size_t n = seqs.n_seqs;
  if (st == SHEAF_OK && (n > INT32_MAX - 1 || seqs.n_tokens > INT32_MAX))
    st = sh_fail(ctx, SHEAF_ERR_UNSUPPORTED, "%s: too many sequences or tokens", path);
  if (st == SHEAF_OK) {
    lens = sh_malloc(ctx, (n + 1) * sizeof(int32_t));
    if (!lens) st = SHEAF_ERR_NOMEM;
  }
  if (st == SHEAF_OK) {
    for (size_t s = 0; s < n; s++) lens[s] = seqs.seqs[s].len;
    st = set_sents(d, (int32_t)n, lens, (int32_t)seqs.n_tokens);
  }
  if (st == SHEAF_OK) {
    for (size_t s = 0; s < n; s++)
      for (int32_t i = 0; i < seqs.seqs[s].len; i++) {
        d->sent_words[d->sent_off[s] + i] = seqs.tokens[seqs.seqs[s].start + i];
        d->sent_tags[d->sent_off[s] + i] = -1;
      }
    if (seqs.mode == SH_SEQS_WORDS) {
      sh_vocab_free(&d->words);
      d->words = seqs.vocab;
      sh_vocab_init(&seqs.vocab, ctx);
    }
  }
  sh_free(ctx, lens, (n + 1) * sizeof(int32_t));
  sh_seqs_free(&seqs);
  return st;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* sh_dataset_load_opts and sh_dataset_load_mem: path is the file's name, data
 * its bytes or NULL to read the file. */
static sheaf_status load(sheaf_ctx *ctx, const char *path, const char *data, size_t size,
                         sh_dataset_kind kind, const sh_dataset_opts *opts, sh_dataset *d) {
  sh_dataset_init(d, ctx, kind);
  if (opts && opts->max_vocab < 0)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sh_dataset_load: max_vocab %lld is negative",
                   (long long)opts->max_vocab);
  if (opts && opts->max_vocab > 0) d->max_vocab = opts->max_vocab;
  if (d->max_vocab > INT32_MAX - 2) d->max_vocab = INT32_MAX - 2; /* V = types + 1 fits */
  const char *what = opts ? opts->max_vocab_what : NULL;
  sheaf_status st;
  if (ends_with(path, ".conllu")) {
    sh_depbank db;
    sh_depbank_init(&db, ctx);
    st = data ? sh_conllu_read(&db, data, size, path) : sh_conllu_read_file(&db, path);
    if (st == SHEAF_OK) {
      if (kind == SH_DATASET_BINARY) st = sh_binarize(&db, &d->tb);
      else if (kind == SH_DATASET_CHILDSUM) st = sh_childsum(&db, &d->tb);
      else st = load_conllu_sents(d, &db);
    }
    sh_depbank_free(&db);
  } else if (kind == SH_DATASET_SENTS) {
    st = load_token_lines(d, path, data, size, what);
  } else {
    st = data ? sh_ptb_read(&d->tb, data, size, path) : sh_ptb_read_file(&d->tb, path);
    if (st == SHEAF_OK && kind == SH_DATASET_BINARY) {
      const sh_treebank *tb = &d->tb;
      for (int32_t t = 0; t < tb->n_trees && st == SHEAF_OK; t++)
        for (int32_t n = tb->tree_first[t]; n < tb->tree_first[t] + tb->tree_size[t]; n++)
          if (tb->n_children[n] > 2 || (tb->n_children[n] > 0 && tb->word[n] >= 0)) {
            st = sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                         "%s: tree %d is not binary (a node with %d children%s); binary "
                         "models need binarized trees (sheaf data binarize)",
                         path, (int)t + 1, (int)tb->n_children[n],
                         tb->word[n] >= 0 ? " and a word" : "");
            break;
          }
    }
  }
  if (st == SHEAF_OK && sh_dataset_count(d) == 0)
    st = sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: no %s", path,
                 kind == SH_DATASET_SENTS ? "sentences" : "trees");
  if (st == SHEAF_OK) st = sh_dataset_finish(d, 0);
  if (st != SHEAF_OK) sh_dataset_free(d);
  return st;
}

sheaf_status sh_dataset_load(sheaf_ctx *ctx, const char *path, sh_dataset_kind kind, sh_dataset *d) {
  return load(ctx, path, NULL, 0, kind, NULL, d);
}

sheaf_status sh_dataset_load_opts(sheaf_ctx *ctx, const char *path, sh_dataset_kind kind,
                                  const sh_dataset_opts *opts, sh_dataset *d) {
  return load(ctx, path, NULL, 0, kind, opts, d);
}

sheaf_status sh_dataset_load_mem(sheaf_ctx *ctx, const char *data, size_t size, const char *name,
                                 sh_dataset_kind kind, const sh_dataset_opts *opts, sh_dataset *d) {
  return load(ctx, name, data ? data : "", size, kind, opts, d);
}

sheaf_status sh_dataset_check_ids(sheaf_ctx *ctx, const char *path, int64_t limit,
                                  const char *what) {
  if (limit <= 0)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: no token id fits below %lld (%s)", path,
                   (long long)limit, what ? what : "the id limit");
  sh_seqs seqs;
  sh_seqs_init(&seqs, ctx);
  char buf[64];
  sh_seqs_options so = ids_options(limit, what, buf, sizeof buf);
  sheaf_status st = sh_seqs_read_file(&seqs, path, &so);
  sh_seqs_free(&seqs);
  return st;
}

/* ------------------------------------------------------------ vocabulary */

static const int64_t *g_sort_counts; /* qsort has no user pointer */

static int by_count_desc(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  int64_t cx = g_sort_counts[x], cy = g_sort_counts[y];
  if (cx != cy) return cx > cy ? -1 : 1;
  return (x > y) - (x < y);
}

sheaf_status sh_dataset_finish(sh_dataset *d, int32_t mv_cap) {
  sheaf_ctx *ctx = d->ctx;
  if (mv_cap <= 0) mv_cap = SH_DATASET_MV_CAP_DEFAULT;
  const int32_t *ids;
  int64_t n_ids;
  int32_t types;
  if (d->kind == SH_DATASET_SENTS) {
    ids = d->sent_words;
    n_ids = d->n_tokens;
    types = sh_vocab_size(&d->words);
  } else {
    ids = d->tb.word;
    n_ids = d->tb.n_nodes;
    types = sh_vocab_size(&d->tb.words);
  }
  sh_word_ids numbering;
  sheaf_status st = sh_word_ids_of_data(ctx, types, ids, n_ids, d->max_vocab, &numbering);
  if (st != SHEAF_OK) return st;
  types = numbering.n_ids;
  sh_free(ctx, d->mv_row, (size_t)d->ids.n_ids * sizeof(int32_t));
  d->mv_row = NULL;
  d->ids = (sh_word_ids){0, 0};

  size_t nt = types ? (size_t)types : 1;
  int64_t *counts = sh_calloc(ctx, nt, sizeof(int64_t));
  int32_t *order = sh_malloc(ctx, nt * sizeof(int32_t));
  int32_t *row = sh_malloc(ctx, nt * sizeof(int32_t));
  if (!counts || !order || !row) {
    sh_free(ctx, counts, nt * sizeof(int64_t));
    sh_free(ctx, order, nt * sizeof(int32_t));
    sh_free(ctx, row, nt * sizeof(int32_t));
    return SHEAF_ERR_NOMEM;
  }
  for (int64_t i = 0; i < n_ids; i++)
    if (ids[i] >= 0) counts[ids[i]]++;
  for (int32_t w = 0; w < types; w++) order[w] = w;
  g_sort_counts = counts;
  qsort(order, (size_t)types, sizeof(int32_t), by_count_desc);
  g_sort_counts = NULL;
  int32_t kept = types < mv_cap ? types : mv_cap;
  for (int32_t r = 0; r < types; r++) row[order[r]] = r < kept ? r : kept;
  sh_free(ctx, counts, nt * sizeof(int64_t));
  sh_free(ctx, order, nt * sizeof(int32_t));
  if (types == 0) {
    sh_free(ctx, row, nt * sizeof(int32_t));
    row = NULL;
  }
  d->ids = numbering;
  d->mv_row = row;
  d->vocab = (int32_t)sh_word_rows(numbering);
  d->mv_cap = mv_cap;
  d->mv_vocab = kept + 1;
  return SHEAF_OK;
}

sheaf_status sh_dataset_renumber(sh_dataset *d, const sh_vocab *v, int64_t *n_words,
                                 int64_t *n_unknown) {
  sheaf_ctx *ctx = d->ctx;
  bool sents = d->kind == SH_DATASET_SENTS;
  const sh_vocab *dw = sents ? &d->words : &d->tb.words;
  int32_t nd = sh_vocab_size(dw);
  int32_t *map = sh_malloc(ctx, ((size_t)nd + 1) * sizeof *map);
  if (!map) return SHEAF_ERR_NOMEM;
  sh_word_ids to = sh_word_ids_of_vocab(v), from = {nd, -1}; /* -1: not a word of the data */
  for (int32_t w = 0; w < nd; w++) map[w] = sh_word_lookup(to, v, sh_vocab_str(dw, w), sh_vocab_len(dw, w));
  int32_t *ids = sents ? d->sent_words : d->tb.word;
  int64_t n_ids = sents ? d->n_tokens : d->tb.n_nodes, words = 0, unknown = 0;
  for (int64_t i = 0; i < n_ids; i++) {
    if (!sents && ids[i] < 0) continue; /* a tree node without a word */
    int32_t w = sh_word_id(from, ids[i]);
    ids[i] = w >= 0 ? map[w] : to.unk;
    words++;
    if (ids[i] == to.unk) unknown++;
  }
  sh_free(ctx, map, ((size_t)nd + 1) * sizeof *map);
  sh_free(ctx, d->mv_row, (size_t)d->ids.n_ids * sizeof(int32_t));
  d->mv_row = NULL;
  d->mv_vocab = 1;
  d->ids = to;
  d->vocab = (int32_t)sh_word_rows(to);
  if (n_words) *n_words = words;
  if (n_unknown) *n_unknown = unknown;
  return SHEAF_OK;
}

/* ------------------------------------------------------------- instances */

int32_t sh_dataset_count(const sh_dataset *d) {
  return d->kind == SH_DATASET_SENTS ? d->n_sents : d->tb.n_trees;
}

int32_t sh_dataset_size(const sh_dataset *d, int32_t i) {
  if (d->kind == SH_DATASET_SENTS) return d->sent_off[i + 1] - d->sent_off[i];
  return d->tb.tree_size[i];
}

int64_t sh_dataset_size_range(const sh_dataset *d, int32_t first, int32_t count) {
  int64_t n = 0;
  for (int32_t i = first; i < first + count; i++) n += sh_dataset_size(d, i);
  return n;
}

void sh_dataset_vocab_fingerprint(const sh_dataset *d, char *out, size_t cap) {
  const sh_vocab *v = d->kind == SH_DATASET_SENTS ? &d->words : &d->tb.words;
  uint64_t h = 0xcbf29ce484222325ull;
  int32_t n = sh_vocab_size(v);
  for (int32_t w = 0; w < n; w++) {
    const unsigned char *s = (const unsigned char *)sh_vocab_str(v, w);
    for (size_t i = 0; i < sh_vocab_len(v, w); i++) h = (h ^ s[i]) * 0x100000001b3ull;
    h = (h ^ '\n') * 0x100000001b3ull;
  }
  snprintf(out, cap, "%d words, fnv1a64 %016llx", (int)n, (unsigned long long)h);
}
