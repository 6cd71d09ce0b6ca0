/*
 * test_program_trees.c — sheaf_program_run_sentences: trees and token
 * records from C. Binary and child-sum trees of hand-made sentences (a
 * lone word, left and right chains, a non-projective one, ids outside the
 * table) against a C reference that binarizes by the documented rule
 * (io/binarize.h) and evaluates the model with the model's own weights,
 * in the dynamic and the linearized mode; the bundled EWT sentences
 * through treelstm.sf, childsum.sf and chartagger.sf, linearized against
 * dynamic (1e-5); bad heads and missing columns named by sentence and word.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "io/dataset.h"

enum { E = 6, V = 20 };

static const char bin_src[] =
    "type Tree = Leaf(word: i32) | Node(left: Tree, right: Tree)\n"
    "param emb : f32[V, E]\n"
    "fn tree(t: Tree) -> f32[E] {\n"
    "  match t { Leaf(w) => emb[w], Node(l, r) => tanh(tree(l) - tree(r) * 0.5) }\n"
    "}\n"
    "fn main(t: Tree) -> f32[E] { tree(t) }\n";

static const char dep_src[] =
    "type Dep = Dep(word: i32, kids: list[Dep])\n"
    "param emb : f32[V, E]\n"
    "fn node(t: Dep) -> f32[E] {\n"
    "  let Dep(w, kids) = t;\n"
    "  let hs = map(node, kids);\n"
    "  tanh(emb[w] + sum(for h in hs { h }) * 0.5)\n"
    "}\n"
    "fn main(t: Dep) -> f32[E] { node(t) }\n";

static sheaf_program *load_src(sheaf_ctx *ctx, const char *name, const char *src, sheaf_program_mode mode,
                               int64_t vocab, int n, const char *const *names, const int64_t *values) {
  const char *path = th_write_tmp(name, src, strlen(src));
  if (!path) return NULL;
  sheaf_program_opts o;
  memset(&o, 0, sizeof o);
  o.seed = 7, o.vocab = vocab, o.mode = mode, o.runner.batch = 3;
  o.n_sizes = n, o.size_names = names, o.size_values = values;
  sheaf_program *p = NULL;
  CHECK_OK(ctx, sheaf_program_load(ctx, path, &o, &p));
  return p;
}

/* ---- the C reference: sentence words w[0..n), heads h (1-based, 0 root) */

static const float *g_emb;

static int32_t row_of(int32_t w) { return w >= 0 && w < V - 1 ? w : V - 1; } /* <unk>: the last row */

/* The binarized tree of word v (1-based) into out[E], by io/binarize.h's rule. */
static void bin_eval(const int32_t *w, const int32_t *h, int n, int v, double *out) {
  for (int j = 0; j < E; j++) out[j] = g_emb[row_of(w[v - 1]) * E + j];
  double kid[E], l[E], r[E];
  for (int pass = 0; pass < 2; pass++) /* rights nearest first, then lefts nearest first */
    for (int d = 1; d <= n; d++) {
      int u = pass == 0 ? v + d : v - d;
      if (u < 1 || u > n || h[u - 1] != v) continue;
      bin_eval(w, h, n, u, kid);
      for (int j = 0; j < E; j++) l[j] = pass == 0 ? out[j] : kid[j], r[j] = pass == 0 ? kid[j] : out[j];
      for (int j = 0; j < E; j++) out[j] = tanh(l[j] - r[j] * 0.5);
    }
}

static void dep_eval(const int32_t *w, const int32_t *h, int n, int v, double *out) {
  double sum[E] = {0}, kid[E];
  for (int u = 1; u <= n; u++)
    if (h[u - 1] == v) {
      dep_eval(w, h, n, u, kid);
      for (int j = 0; j < E; j++) sum[j] += kid[j];
    }
  for (int j = 0; j < E; j++) out[j] = tanh(g_emb[row_of(w[v - 1]) * E + j] + sum[j] * 0.5);
}

/* Hand-made sentences: a lone word, a right chain, a left chain, a head
 * with dependents both sides, a non-projective tree, ids off the table. */
static const int32_t w0[] = {3}, h0[] = {0};
static const int32_t w1[] = {1, 2, 3, 4}, h1[] = {0, 1, 2, 3};
static const int32_t w2[] = {5, 6, 7, 8}, h2[] = {2, 3, 4, 0};
static const int32_t w3[] = {9, 10, 11, 12, 13}, h3[] = {3, 3, 0, 3, 3};
static const int32_t w4[] = {14, 15, 16, 17}, h4[] = {3, 4, 0, 3};
static const int32_t w5[] = {-4, 1000, 18, 19}, h5[] = {2, 0, 2, 3};
static const sheaf_sentence hand[] = {
    {1, w0, h0, NULL, NULL, NULL, NULL}, {4, w1, h1, NULL, NULL, NULL, NULL}, {4, w2, h2, NULL, NULL, NULL, NULL},
    {5, w3, h3, NULL, NULL, NULL, NULL}, {4, w4, h4, NULL, NULL, NULL, NULL}, {4, w5, h5, NULL, NULL, NULL, NULL},
};
enum { NH = sizeof hand / sizeof *hand };

static void check_by_hand(const char *name, const char *src, bool binary, sheaf_program_mode mode) {
  sheaf_ctx *ctx = th_ctx();
  static const char *const names[] = {"E"};
  static const int64_t values[] = {E};
  sheaf_program *p = load_src(ctx, name, src, mode, V, 1, names, values);
  if (!p) return;
  sheaf_param emb;
  int rank;
  const int64_t *shape;
  if (CHECK_OK(ctx, sheaf_model_find(sheaf_program_model(p), "emb", &emb)) &&
      CHECK((g_emb = sheaf_model_param_values(sheaf_program_model(p), emb, &rank, &shape)) != NULL) &&
      CHECK(rank == 2 && shape[0] == V && shape[1] == E) && CHECK_OK(ctx, sheaf_program_run_sentences(p, NH, hand)))
    for (int i = 0; i < NH; i++) {
      int root = 0;
      for (int k = 0; k < hand[i].len; k++)
        if (hand[i].heads[k] == 0) root = k + 1;
      double want[E];
      (binary ? bin_eval : dep_eval)(hand[i].words, hand[i].heads, (int)hand[i].len, root, want);
      sheaf_value_view v;
      if (!CHECK_EQ_INT(sheaf_program_outputs(p, i, 1, &v), 1) || !CHECK_EQ_INT(v.shape[0], E)) continue;
      for (int j = 0; j < E; j++)
        if (!CHECK(fabs(v.data[j] - want[j]) <= 1e-5 * fmax(1, fabs(want[j]))))
          fprintf(stderr, "%s, mode %d, sentence %d, [%d]: %g, reference %g\n", name, (int)mode, i, j, v.data[j],
                  want[j]);
    }
  sheaf_program_free(p);
}

TEST(program_trees_binary_by_hand) {
  check_by_hand("bin.sf", bin_src, true, SHEAF_PROGRAM_DYNAMIC);
  if (th_have_jit_cc("program_trees_binary_by_hand")) {
    setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
    check_by_hand("bin.sf", bin_src, true, SHEAF_PROGRAM_LINEAR);
  }
}

TEST(program_trees_childsum_by_hand) {
  check_by_hand("dep.sf", dep_src, false, SHEAF_PROGRAM_DYNAMIC);
  if (th_have_jit_cc("program_trees_childsum_by_hand")) {
    setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
    check_by_hand("dep.sf", dep_src, false, SHEAF_PROGRAM_LINEAR);
  }
}

/* ---- the EWT sentences through the examples: linearized against dynamic */

enum { NE = 150, MAXV = 4 };

static void check_ewt(const char *path, int n, const char *const *names, const int64_t *values) {
  if (!th_have_jit_cc(path)) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  sheaf_ctx *ctx = th_ctx();
  sh_dataset d;
  REQUIRE_OK(ctx, sh_dataset_load(ctx, TH_EWT_TEST, SH_DATASET_SENTS, &d));
  static sheaf_sentence s[NE];
  static const char *forms[1 << 14];
  int at = 0;
  for (int i = 0; i < NE; i++) {
    int32_t o = d.sent_off[i], len = d.sent_off[i + 1] - o;
    s[i] = (sheaf_sentence){len, d.sent_words + o, d.sent_head + o, d.sent_tags + o, d.sent_xpos + o, d.sent_deprel + o,
                            forms + at};
    for (int32_t k = 0; k < len && at < (int)(sizeof forms / sizeof *forms); k++)
      forms[at++] = sh_vocab_str(&d.words, d.sent_words[o + k]);
  }
  REQUIRE(at < (int)(sizeof forms / sizeof *forms));
  sheaf_program *p[2] = {NULL, NULL};
  for (int m = 0; m < 2; m++) {
    sheaf_program_opts o;
    memset(&o, 0, sizeof o);
    o.seed = 3, o.vocab = d.vocab, o.mode = m ? SHEAF_PROGRAM_LINEAR : SHEAF_PROGRAM_DYNAMIC, o.runner.batch = 64;
    o.n_sizes = n, o.size_names = names, o.size_values = values;
    if (!CHECK_OK(ctx, sheaf_program_load(ctx, path, &o, &p[m])) || !CHECK_OK(ctx, sheaf_program_run_sentences(p[m], NE, s)))
      break;
  }
  for (int i = 0; p[0] && p[1] && i < NE; i++) {
    static sheaf_value_view a[MAXV], b[MAXV];
    size_t na = sheaf_program_outputs(p[0], i, MAXV, a), nb = sheaf_program_outputs(p[1], i, MAXV, b);
    if (!CHECK(na > 0 && na == nb)) break;
    for (size_t k = 0; k < na && k < MAXV; k++) {
      int64_t c = a[k].rank == 2 ? a[k].shape[0] * a[k].shape[1] : a[k].shape[0];
      int64_t cb = b[k].rank == 2 ? b[k].shape[0] * b[k].shape[1] : b[k].shape[0];
      if (!CHECK_EQ_INT(c, cb)) continue;
      for (int64_t j = 0; j < c; j++)
        if (!CHECK(fabs(a[k].data[j] - b[k].data[j]) <= 1e-5 * fmax(1, fabs(a[k].data[j])))) {
          fprintf(stderr, "%s: sentence %d, output %zu [%lld]: dynamic %g, linear %g\n", path, i, k, (long long)j,
                  a[k].data[j], b[k].data[j]);
          break;
        }
    }
  }
  sheaf_program_free(p[0]), sheaf_program_free(p[1]);
  sh_dataset_free(&d);
}

TEST(program_trees_ewt_treelstm_linear_equals_dynamic) {
  static const char *const names[] = {"E", "H", "C"};
  static const int64_t values[] = {12, 10, 5};
  check_ewt("examples/treelstm.sf", 3, names, values);
}

TEST(program_trees_ewt_childsum_linear_equals_dynamic) {
  static const char *const names[] = {"E", "H"};
  static const int64_t values[] = {12, 10};
  check_ewt("examples/childsum.sf", 2, names, values);
}

TEST(program_trees_ewt_records_linear_equals_dynamic) {
  static const char *const names[] = {"E", "H", "T"};
  static const int64_t values[] = {8, 10, 6};
  check_ewt("examples/chartagger.sf", 3, names, values);
}

/* ---- faults, named */

static void expect(sheaf_ctx *ctx, sheaf_program *p, int64_t n, const sheaf_sentence *s, const char *want) {
  CHECK_EQ_INT(sheaf_program_run_sentences(p, n, s), SHEAF_ERR_INVALID_ARG);
  if (!CHECK(strstr(sheaf_ctx_last_error(ctx), want) != NULL))
    fprintf(stderr, "wanted \"%s\" in: %s\n", want, sheaf_ctx_last_error(ctx));
  CHECK_EQ_INT(sheaf_program_outputs(p, 0, 0, NULL), 0);
}

TEST(program_trees_bad_sentences_are_named) {
  sheaf_ctx *ctx = th_ctx();
  static const char *const names[] = {"E"};
  static const int64_t values[] = {E};
  sheaf_program *p = load_src(ctx, "bin.sf", bin_src, SHEAF_PROGRAM_DYNAMIC, V, 1, names, values);
  if (!p) return;
  static const int32_t w[] = {1, 2, 3};
  static const int32_t range[] = {0, 4, 1}, roots[] = {0, 1, 0}, noroot[] = {2, 3, 1}, cycle[] = {0, 3, 2};
  sheaf_sentence s[2] = {{3, w, h1, NULL, NULL, NULL, NULL}, {3, w, range, NULL, NULL, NULL, NULL}};
  expect(ctx, p, 2, s, "sheaf_program_run_sentences: sentence 1: word 2: head 4 is out of range: the sentence has 3 words");
  s[1].heads = roots;
  expect(ctx, p, 2, s, "sentence 1: word 3: a second root: its head is 0 but word 1 is the root already");
  s[1].heads = noroot;
  expect(ctx, p, 2, s, "sentence 1: no root: no word has head 0");
  s[1].heads = cycle;
  expect(ctx, p, 2, s, "sentence 1: word 2: the heads form a cycle: 2 -> 3 -> 2");
  s[1].heads = NULL;
  expect(ctx, p, 2, s, "sentence 1: heads is NULL, and main reads a tree (words and heads)");
  s[1] = (sheaf_sentence){0, w, h0, NULL, NULL, NULL, NULL};
  expect(ctx, p, 2, s, "sentence 1: len 0 (a tree has 1 word or more)");
  expect(ctx, p, 1, NULL, "1 sentences but the array is NULL");
  expect(ctx, p, -1, s, "-1 sentences");
  int32_t *deep = malloc(10002 * sizeof *deep), *dw = calloc(10002, sizeof *dw);
  if (CHECK(deep && dw)) { /* a chain of 10,002 words: 10,002 levels */
    for (int k = 0; k < 10002; k++) deep[k] = k; /* word 1 the root, each next word under the one before */
    s[1] = (sheaf_sentence){10002, dw, deep, NULL, NULL, NULL, NULL};
    expect(ctx, p, 2, s, "sentence 1: its dependency tree is 10002 levels deep (root = 1), over the limit of 10000");
  }
  free(deep), free(dw);
  /* a good run after the faults */
  s[1] = hand[3];
  if (CHECK_OK(ctx, sheaf_program_run_sentences(p, 2, s))) CHECK_EQ_INT(sheaf_program_outputs(p, 1, 0, NULL), 1);
  sheaf_program_free(p);
  /* records: a column main reads, missing */
  static const char *const rn[] = {"E", "H", "T"};
  static const int64_t rv[] = {8, 10, 6};
  sheaf_program_opts o;
  memset(&o, 0, sizeof o);
  o.vocab = V, o.n_sizes = 3, o.size_names = rn, o.size_values = rv;
  if (CHECK_OK(ctx, sheaf_program_load(ctx, "examples/chartagger.sf", &o, &p))) {
    static const int32_t up[] = {1, 2, 3}, xp[] = {0, 0, 0}, rel[] = {4, 0, 5};
    static const char *const fm[] = {"a", "bc", "d"};
    sheaf_sentence r = {3, w, h1, up, xp, NULL, fm};
    expect(ctx, p, 1, &r, "sentence 0: deprel is NULL, and main reads that field");
    r.deprel = rel, r.forms = NULL;
    expect(ctx, p, 1, &r, "sentence 0: forms is NULL, and main reads that field");
    static const char *const fm2[] = {"a", NULL, "d"};
    r.forms = fm2;
    expect(ctx, p, 1, &r, "sentence 0: forms[1] is NULL");
    r.forms = fm;
    if (CHECK_OK(ctx, sheaf_program_run_sentences(p, 1, &r))) CHECK_EQ_INT(sheaf_program_outputs(p, 0, 0, NULL), 3);
    sheaf_program_free(p);
  }
}
