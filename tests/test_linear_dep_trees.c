/*
 * test_linear_dep_trees.c — the linearized mode's ragged arm on dependency
 * trees (one kernel for any child count, coarsen.c): childsum.sf and
 * treeattn.sf (its `if len(hs) == 0` as a leaves' arm and a ragged arm, a
 * softmax over the children, `a @ stack(hs)`) against the dynamic runtime,
 * contexts of 1 and 2 threads: the bundled EWT trees in batches of 1, 7 and
 * 64, and hand-built trees (a leaf alone, nodes of 1, 5 and 40 children —
 * above the old 31 cap — a chain 300 deep, a mixed tree) in one batch and
 * one by one; every output within 1e-5 (relative per row). Then the
 * refusals with their reasons (a condition on the count other than == 0, a
 * softmax that a leaf reaches, a per-child result).
 */
#include <stdlib.h>

#include "compile/linear.h"
#include "harness.h"
#include "io/dataset.h"
#include "models/models.h"
#include "test_linear_util.h"

#define EWT "data/ud_english_ewt/en_ewt-ud-test.conllu"
#define N_TREES 135

static const char *const CHILDSUM[] = {"H=8", "E=6", NULL};
static const char *const TREEATTN[] = {"H=8", "E=6", "C=5", NULL};

/* main's outputs (width floats each) of trees 0 .. n-1 of tb by the dynamic runtime. */
static bool dynamic_out(sheaf_ctx *ctx, tl_model *tm, const sh_treebank *tb, sh_word_ids ids, int n, float *want,
                        int64_t width) {
  sh_interp *ip = NULL;
  sheaf_graph *g = NULL;
  bool ok = CHECK_OK(ctx, sh_interp_create(&tm->m, &tm->bind, &ip)) &&
            CHECK_OK(ctx, sheaf_graph_create(tm->model, NULL, &g));
  sh_value *res = calloc((size_t)n, sizeof *res);
  ok = ok && CHECK(res != NULL);
  for (int first = 0; ok && first < n; first += 32) {
    int last = first + 32 < n ? first + 32 : n;
    for (int t = first; ok && t < last; t++) {
      sh_value in;
      ok = CHECK_OK(ctx, sh_interp_tree(ip, tb, tb->tree_root[t], ids, &in)) &&
           CHECK_OK(ctx, sh_interp_main(ip, g, in, &res[t]));
    }
    ok = ok && CHECK_OK(ctx, sheaf_graph_flush(g));
    for (int t = first; ok && t < last; t++) {
      sheaf_expr ts[2];
      sheaf_value_view v;
      ok = CHECK_EQ_INT(sh_value_tensors(res[t], ts, 2), 1) && CHECK_OK(ctx, sheaf_value(g, ts[0], &v)) &&
           CHECK_EQ_INT(v.shape[v.rank - 1], width);
      if (ok) memcpy(want + (size_t)t * (size_t)width, v.data, (size_t)width * sizeof(float));
    }
    ok = ok && CHECK_OK(ctx, sheaf_graph_reset(g));
    sh_interp_reset(ip);
  }
  free(res);
  sheaf_graph_free(g);
  sh_interp_free(ip);
  return ok;
}

/* Model path on trees 0 .. n-1 of tb: linearized in batches of each of
 * batches[] (0 ends; batch 1 stops at stop1 trees) against the dynamic
 * runtime, on a context of `threads`. */
static void compare(int threads, const char *path, const char *const *sizes, const sh_treebank *tb, sh_word_ids ids,
                    int64_t vocab, int n, const int *batches, int stop1, const char *what) {
  sheaf_ctx *ctx = NULL;
  sheaf_ctx_options o = {.allocator = th_allocator(), .log_level = SHEAF_LOG_WARN, .threads = threads};
  if (!CHECK_OK(NULL, sheaf_ctx_create(&o, &ctx, NULL, 0))) return;
  sh_dataset fake;
  memset(&fake, 0, sizeof fake);
  fake.vocab = vocab;
  tl_model tm;
  if (!tl_open(ctx, path, sizes, &fake, &tm)) {
    sheaf_ctx_free(ctx);
    return;
  }
  char why[512] = "";
  sh_lin *L = NULL;
  float *want = NULL, *got = NULL;
  if (!CHECK_OK(ctx, sh_lin_create(&tm.m, tm.model, &tm.bind, &L, why, sizeof why))) {
    fprintf(stderr, "%s: %s\n", path, why);
    goto out;
  }
  int rank;
  int64_t dims[2];
  sh_lin_output_shape(L, 0, &rank, dims);
  int64_t width = dims[0];
  want = calloc((size_t)n * (size_t)width, sizeof *want), got = calloc((size_t)n * (size_t)width, sizeof *got);
  if (!CHECK(want && got) || !dynamic_out(ctx, &tm, tb, ids, n, want, width)) goto out;
  for (int bi = 0; batches[bi]; bi++) {
    int b = batches[bi], stop = b == 1 && stop1 < n ? stop1 : n;
    for (int64_t i = 0; i < (int64_t)n * width; i++) got[i] = NAN;
    for (int first = 0; first < stop; first += b) {
      int cnt = first + b <= stop ? b : stop - first;
      if (!CHECK_OK(ctx, sh_lin_run(L, tb, first, cnt, ids))) goto out;
      for (int t = 0; t < cnt; t++)
        memcpy(got + (size_t)(first + t) * (size_t)width, sh_lin_output(L, t, 0), (size_t)width * sizeof(float));
    }
    double worst = sh_max_rel_err(got, want, stop, width);
    if (!CHECK(worst <= 1e-5))
      fprintf(stderr, "%s %s, %d thread(s), batch %d: max rel err %g\n", path, what, threads, b, worst);
  }
out:
  free(want), free(got);
  sh_lin_free(L);
  tl_close(ctx, &tm);
  sheaf_ctx_free(ctx);
}

TEST(linear_dep_trees_ewt_threads) {
  if (!th_have_jit_cc("linear_dep_trees_ewt_threads")) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  sheaf_ctx *ctx = th_ctx();
  sh_dataset d;
  REQUIRE_OK(ctx, sh_dataset_load(ctx, EWT, SH_DATASET_CHILDSUM, &d));
  int n = N_TREES < sh_dataset_count(&d) ? N_TREES : sh_dataset_count(&d);
  static const int batches[] = {1, 7, 64, 0};
  for (int threads = 1; threads <= 2; threads++) {
    compare(threads, "examples/childsum.sf", CHILDSUM, &d.tb, d.ids, d.vocab, n, batches, 20, "EWT");
    compare(threads, "examples/treeattn.sf", TREEATTN, &d.tb, d.ids, d.vocab, n, batches, 20, "EWT");
  }
  sh_dataset_free(&d);
}

/* A node of word w over kids (n of them); returns its id. */
static int32_t add(sheaf_ctx *ctx, sh_treebank *tb, int32_t w, const int32_t *kids, int32_t n) {
  int32_t id = -1;
  CHECK_OK(ctx, sh_tb_add_node(tb, w, 0, kids, n, &id));
  return id;
}

/* n leaves of words from w0 (mod 10) under a node of word w; returns it. */
static int32_t fan(sheaf_ctx *ctx, sh_treebank *tb, int32_t w, int32_t w0, int32_t n) {
  int32_t kids[64];
  for (int32_t i = 0; i < n; i++) kids[i] = add(ctx, tb, (w0 + i) % 10, NULL, 0);
  return add(ctx, tb, w, kids, n);
}

TEST(linear_dep_trees_hand_built) {
  if (!th_have_jit_cc("linear_dep_trees_hand_built")) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  sheaf_ctx *ctx = th_ctx();
  sh_treebank tb;
  sh_tb_init(&tb, ctx);
  int32_t lab = 0;
  REQUIRE_OK(ctx, sh_vocab_intern(&tb.labels, "x", 1, &lab));
  for (int w = 0; w < 10; w++) {
    char s[3] = {'w', (char)('0' + w), 0};
    int32_t id;
    REQUIRE_OK(ctx, sh_vocab_intern(&tb.words, s, 2, &id));
  }
  /* 0: a leaf alone; 1, 2, 3: a node of 1, 5, 40 leaves; 4: a chain 300 deep */
  REQUIRE_OK(ctx, sh_tb_begin_tree(&tb));
  add(ctx, &tb, 3, NULL, 0);
  REQUIRE_OK(ctx, sh_tb_end_tree(&tb));
  static const int32_t fans[] = {1, 5, 40};
  for (int i = 0; i < 3; i++) {
    REQUIRE_OK(ctx, sh_tb_begin_tree(&tb));
    fan(ctx, &tb, 1 + i, 2 + i, fans[i]);
    REQUIRE_OK(ctx, sh_tb_end_tree(&tb));
  }
  REQUIRE_OK(ctx, sh_tb_begin_tree(&tb));
  int32_t top = add(ctx, &tb, 9, NULL, 0);
  for (int d = 1; d < 300; d++) top = add(ctx, &tb, d % 10, &top, 1);
  REQUIRE_OK(ctx, sh_tb_end_tree(&tb));
  /* 5: mixed: a root over a leaf, a node of 3, a chain of 2 and a node of 33 */
  REQUIRE_OK(ctx, sh_tb_begin_tree(&tb));
  int32_t k[4];
  k[0] = add(ctx, &tb, 4, NULL, 0);
  k[1] = fan(ctx, &tb, 5, 6, 3);
  int32_t leaf = add(ctx, &tb, 7, NULL, 0);
  k[2] = add(ctx, &tb, 8, &leaf, 1);
  k[3] = fan(ctx, &tb, 0, 1, 33);
  add(ctx, &tb, 2, k, 4);
  REQUIRE_OK(ctx, sh_tb_end_tree(&tb));
  sh_word_ids ids = sh_word_ids_of_rows(100);
  static const int batches[] = {6, 1, 0};
  for (int threads = 1; threads <= 2; threads++) {
    compare(threads, "examples/childsum.sf", CHILDSUM, &tb, ids, 100, 6, batches, 6, "hand-built");
    compare(threads, "examples/treeattn.sf", TREEATTN, &tb, ids, 100, 6, batches, 6, "hand-built");
  }
  sh_tb_free(&tb);
}

/* Small dependency-tree models: the refusal's reason. */
TEST(linear_dep_trees_refusals) {
  sheaf_ctx *ctx = th_ctx();
  static const struct { const char *src, *why; } cases[] = {
      {"type Dep = Dep(word: i32, kids: list[Dep])\nparam emb : f32[V, H]\n"
       "fn node(t: Dep) -> f32[H] {\n  let Dep(w, kids) = t;\n  let hs = map(node, kids);\n"
       "  if len(hs) == 1 { emb[w] } else { emb[w] + sum(hs) }\n}\nfn main(t: Dep) -> f32[H] { node(t) }\n",
       "m.sf:6:6: a condition on the child count other than len(...) == 0 (or > 0)"},
      {"type Dep = Dep(word: i32, kids: list[Dep])\nparam emb : f32[V, H]\n"
       "fn node(t: Dep) -> f32[H] {\n  let Dep(w, kids) = t;\n  let hs = map(node, kids);\n"
       "  let a = softmax(for h in hs { sum(h * emb[w]) });\n  emb[w] + a @ stack(hs)\n}\n"
       "fn main(t: Dep) -> f32[H] { node(t) }\n",
       "m.sf:6:11: softmax of no children (a leaf): branch on len(...) == 0 first"},
      {"type Dep = Dep(word: i32, kids: list[Dep])\nparam emb : f32[V, H]\n"
       "fn node(t: Dep) -> f32[H] {\n  let Dep(w, kids) = t;\n  let hs = map(node, kids);\n"
       "  emb[w] + sum(for h in hs { emb[w] })\n}\nfn main(t: Dep) -> f32[H] { node(t) }\n",
       "m.sf:6:28: a loop over the children whose body is not a tensor read from the child"},
  };
  for (size_t i = 0; i < SH_ARRAY_LEN(cases); i++) {
    tl_model tm;
    if (!tl_open_src(ctx, "m.sf", cases[i].src, (const char *[]){"H=4", NULL}, NULL, &tm)) continue;
    char why[512] = "";
    CHECK_STATUS(ctx, sh_lin_check(&tm.m, &tm.bind, why, sizeof why), SHEAF_ERR_UNSUPPORTED);
    CHECK_CONTAINS(why, cases[i].why);
    tl_close(ctx, &tm);
  }
}
