/*
 * test_linear.c — the linearized mode (src/compile/linear.h) against the
 * dynamic runtime (the interpreter issuing graph ops) on the bundled EWT
 * trees: treefc, treelstm, treegru, mvrnn and branches, seeded weights with
 * nonzero biases, batches of 1, 7 and 64 trees, on 1, 2 and 3 threads with
 * the batch split over instances (one part a thread) and not; every output
 * within 1e-5 (relative, per row), and each run's parts as linear.h says. Refusals and the inspector: test_linear_refuse.c.
 */
#include <stdio.h>
#include <stdlib.h>

#include "base/file.h"
#include "compile/linear.h"
#include "harness.h"
#include "io/dataset.h"
#include "models/models.h"
#include "test_linear_util.h"

#define EWT "data/ud_english_ewt/en_ewt-ud-test.conllu"
#define N_TREES 135

/* The dynamic runtime's outputs of trees 0 .. n-1 (all of main's tensors,
 * flattened), batches of 32. */
static bool dynamic_outputs(sheaf_ctx *ctx, tl_model *tm, const sh_dataset *d, int n, float *want, int64_t width) {
  return tl_dynamic_trees(ctx, tm, &d->tb, d->ids, n, want, width);
}

/* The linear mode on a context of `threads` threads (split on or off:
 * sh_lin_set_split) over trees 0 .. n-1 in batches of 1 (the first 20), 7
 * and 64 against want; each run's parts as linear.h says. */
static void check_linear(const char *path, const char *const *sizes, const sh_dataset *d, int n, const float *want,
                         int64_t width, int threads, bool split) {
  sheaf_ctx *ctx = tl_ctx_threads(threads);
  if (!ctx) return;
  tl_model tm;
  char why[512];
  sh_lin *L = NULL;
  float *got = calloc((size_t)(n * width), sizeof *got);
  if (!CHECK(got != NULL) || !tl_open(ctx, path, sizes, d, &tm)) {
    free(got);
    sheaf_ctx_free(ctx);
    return;
  }
  if (!CHECK_OK(ctx, sh_lin_create(&tm.m, tm.model, &tm.bind, &L, why, sizeof why))) {
    fprintf(stderr, "%s: %s\n", path, why);
    goto out;
  }
  sh_lin_set_split(L, split);
  static const int batches[] = {1, 7, 64};
  for (int bi = 0; bi < 3; bi++) {
    int b = batches[bi];
    int stop = b == 1 ? 20 : n; /* batch 1: the first 20 trees */
    memset(got, 0, (size_t)(n * width) * sizeof *got);
    for (int first = 0; first < stop; first += b) {
      int cnt = first + b <= stop ? b : stop - first;
      if (!CHECK_OK(ctx, sh_lin_run(L, &d->tb, first, cnt, d->ids))) goto out;
      if (!CHECK_EQ_INT(sh_lin_n_parts(L), tl_want_parts(threads, split, cnt))) goto out;
      for (int t = 0; t < cnt; t++) {
        int64_t off = 0;
        for (int c = 0; c < sh_lin_n_outputs(L); c++) {
          int rank;
          int64_t dims[2];
          sh_lin_output_shape(L, c, &rank, dims);
          int64_t w = rank == 2 ? dims[0] * dims[1] : dims[0];
          memcpy(got + (first + t) * width + off, sh_lin_output(L, t, c), (size_t)w * sizeof(float));
          off += w;
        }
      }
    }
    double worst = sh_max_rel_err(got, want, stop, width);
    if (!CHECK(worst <= 1e-5))
      fprintf(stderr, "%s batch %d, %d threads, split %d: max rel err %g\n", path, b, threads, split, worst);
  }
out:
  free(got);
  sh_lin_free(L);
  tl_close(ctx, &tm);
  sheaf_ctx_free(ctx);
}

static void check_model(const char *path, const char *const *sizes) {
  sheaf_ctx *ctx = th_ctx();
  if (!th_have_jit_cc(path)) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  sh_dataset d;
  REQUIRE_OK(ctx, sh_dataset_load(ctx, EWT, SH_DATASET_BINARY, &d));
  tl_model tm;
  if (!tl_open(ctx, path, sizes, &d, &tm)) {
    sh_dataset_free(&d);
    return;
  }
  char why[512];
  sh_lin *L = NULL;
  int n = N_TREES < sh_dataset_count(&d) ? N_TREES : sh_dataset_count(&d);
  int64_t width = 0;
  float *want = NULL;
  if (!CHECK_OK(ctx, sh_lin_create(&tm.m, tm.model, &tm.bind, &L, why, sizeof why))) {
    fprintf(stderr, "%s: %s\n", path, why);
    goto out;
  }
  for (int c = 0; c < sh_lin_n_outputs(L); c++) {
    int rank;
    int64_t dims[2];
    sh_lin_output_shape(L, c, &rank, dims);
    width += rank == 2 ? dims[0] * dims[1] : dims[0];
  }
  want = calloc((size_t)(n * width), sizeof *want);
  if (!CHECK(want != NULL) || !dynamic_outputs(ctx, &tm, &d, n, want, width)) goto out;
  /* 1, 2 and 3 threads; split over instances (the default) and not */
  for (int threads = 1; threads <= 3; threads++)
    for (int split = 1; split >= (threads > 1 ? 0 : 1); split--)
      check_linear(path, sizes, &d, n, want, width, threads, split);
out:
  free(want);
  sh_lin_free(L);
  tl_close(ctx, &tm);
  sh_dataset_free(&d);
}

TEST(linear_treefc_matches_dynamic) { check_model("examples/treefc.sf", (const char *[]){"H=16", NULL}); }
TEST(linear_treelstm_matches_dynamic) {
  check_model("examples/treelstm.sf", (const char *[]){"H=16", "E=12", "C=5", NULL});
}
TEST(linear_treegru_matches_dynamic) {
  check_model("examples/treegru.sf", (const char *[]){"H=16", "E=12", "C=5", NULL});
}
TEST(linear_mvrnn_matches_dynamic) { check_model("examples/mvrnn.sf", (const char *[]){"H=8", "Vm=50", NULL}); }
TEST(linear_branches_matches_dynamic) {
  check_model("examples/branches.sf", (const char *[]){"H=16", "E=12", "C=5", NULL});
}

/* Sums of two products with parameters (A @ W_1 + B @ W_2) accumulate into
 * one name (coarsen_emit.c's fold): the leaves' vector products of one
 * input, the nodes' with a cat split by rows, and a product read twice
 * (kept: not folded); the kernels' text shows which, the outputs match the
 * dynamic runtime (batches 1, 7, 64; leaves and nodes as children; 1-3
 * threads). */
static const char FOLD_SF[] =
    "type Tree = Leaf(word: i32) | Node(left: Tree, right: Tree)\n"
    "param emb : f32[V, H]\n"
    "param W1 : f32[H, H]\n"
    "param W2 : f32[H, H]\n"
    "param U : f32[2*H, H]\n"
    "param b : f32[H]\n"
    "fn f(t: Tree) -> f32[H] =\n"
    "  match t {\n"
    "    Leaf(w) => tanh(emb[w] @ W1 + emb[w] @ W2 + b),\n"
    "    Node(l, r) => {\n"
    "      let x = f(l);\n"
    "      let y = f(r);\n"
    "      let p = y @ W2;\n"
    "      tanh(x @ W1 + cat(x, y) @ U + b) * sigmoid(p + x @ W1 + p)\n"
    "    }\n"
    "  }\n"
    "fn main(t: Tree) -> f32[H] = f(t)\n";

TEST(linear_fold_sum_of_products) {
  sheaf_ctx *ctx = th_ctx();
  if (!th_have_jit_cc("linear_fold_sum_of_products")) return;
  const char *path = th_tmp_path("fold.sf");
  FILE *fp = fopen(path, "w");
  REQUIRE(fp != NULL);
  fputs(FOLD_SF, fp);
  fclose(fp);
  const char *const sizes[] = {"H=13", NULL}; /* odd widths: column tails */
  tl_model tm;
  REQUIRE(tl_open_src(ctx, path, FOLD_SF, sizes, NULL, &tm));
  char why[512];
  sh_lin *L = NULL;
  if (CHECK_OK(ctx, sh_lin_create(&tm.m, tm.model, &tm.bind, &L, why, sizeof why))) {
    const char *src = sh_lin_kernel_source(L), *node = strstr(src, "kernel f_arm1(");
    const char *leaf = strstr(src, "kernel f_arm0(");
    REQUIRE(leaf && node && leaf < node);
    char leaf_src[2048];
    snprintf(leaf_src, sizeof leaf_src, "%.*s", (int)(node - leaf), leaf);
    /* the leaf: emb[w] @ W1, then += emb[w] @ W2 into the same name (no add of two products) */
    CHECK_CONTAINS(leaf_src, "  t6(n, i) +=! x0(n, r) * p1(r, i) where i in 0..13, r in 0..13\n"
                             "  t6(n, i) += x1(n, r) * p2(r, i) where i in 0..13, r in 0..13\n"
                             "  t8(n, i) = t6(n, i) + p4(i)");
    /* the node: x @ W1, then cat(x, y) @ U (the children side by side) into the same name */
    CHECK_CONTAINS(node, "  t9(n, i) +=! x0(n, r) * p1(r, i) where i in 0..13, r in 0..13\n"
                         "  t9(n, i) += x2(n, r) * p3(r, i) where i in 0..13, r in 0..26\n"
                         "  t11(n, i) = t9(n, i) + p4(i)");
    /* p read twice: its product keeps its own statement, the sums stay adds */
    CHECK_CONTAINS(node, "  t3(n, i) +=! x1(n, r) * p2(r, i) where i in 0..13, r in 0..13\n");
    CHECK_CONTAINS(node, "  t13(n, i) +=! x0(n, r) * p1(r, i) where i in 0..13, r in 0..13\n"
                         "  t14(n, i) = t3(n, i) + t13(n, i)");
  } else {
    fprintf(stderr, "fold.sf: %s\n", why);
  }
  sh_lin_free(L);
  tl_close(ctx, &tm);
  check_model(path, sizes);
}

/* Allocation failures in a run on 2 threads, split into parts (the
 * inspector's kept arrays, the parts, the kernels' temporaries): the n-th
 * allocation of a fresh sh_lin's first run failing is SHEAF_ERR_NOMEM, the
 * next run gives the unfailed run's outputs, and freeing leaks nothing. */
TEST(linear_run_allocation_failures) {
  sheaf_ctx *ctx = th_ctx();
  if (!th_have_jit_cc("linear_run_allocation_failures")) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  sh_dataset d;
  REQUIRE_OK(ctx, sh_dataset_load(ctx, EWT, SH_DATASET_BINARY, &d));
  tl_model tm;
  if (!tl_open(ctx, "examples/treelstm.sf", (const char *[]){"H=8", "E=6", "C=3", NULL}, &d, &tm)) {
    sh_dataset_free(&d);
    return;
  }
  char why[512];
  enum { B = 16, W = 3 }; /* 16 trees; main's result: C = 3 floats */
  float want[B * W], got[B * W];
  sh_lin *L = NULL;
  if (!CHECK_OK(ctx, sh_lin_create(&tm.m, tm.model, &tm.bind, &L, why, sizeof why))) goto out;
  if (!CHECK_OK(ctx, sh_lin_run(L, &d.tb, 0, B, d.ids)) || !CHECK_EQ_INT(sh_lin_n_parts(L), 2)) goto out;
  for (int t = 0; t < B; t++) memcpy(want + t * W, sh_lin_output(L, t, 0), W * sizeof(float));
  sh_lin_free(L);
  L = NULL;
  int n_nomem = 0;
  bool done = false;
  for (long k = 1; k < 500 && !done; k++) {
    long live = th_live_blocks();
    if (!CHECK_OK(ctx, sh_lin_create(&tm.m, tm.model, &tm.bind, &L, why, sizeof why))) goto out;
    th_fail_alloc_at(k);
    sheaf_status st = sh_lin_run(L, &d.tb, 0, B, d.ids);
    th_fail_alloc_at(0);
    if (st == SHEAF_OK) {
      done = true; /* the armed failure was past the run's allocations */
    } else {
      if (!CHECK_EQ_INT(st, SHEAF_ERR_NOMEM)) fprintf(stderr, "  k=%ld: %s\n", k, sheaf_ctx_last_error(ctx));
      n_nomem++;
      if (!CHECK_OK(ctx, sh_lin_run(L, &d.tb, 0, B, d.ids))) goto out;
    }
    CHECK_EQ_INT(sh_lin_n_parts(L), 2);
    for (int t = 0; t < B; t++) memcpy(got + t * W, sh_lin_output(L, t, 0), W * sizeof(float));
    if (!CHECK(sh_max_rel_err(got, want, B, W) <= 1e-6)) fprintf(stderr, "  k=%ld: outputs differ\n", k);
    sh_lin_free(L);
    L = NULL;
    CHECK_EQ_INT(th_live_blocks(), live); /* every block of the create and the runs freed with L */
  }
  CHECK(done);
  CHECK(n_nomem >= 5); /* the inspector's arrays and the parts of both parts at least */
out:
  sh_lin_free(L);
  tl_close(ctx, &tm);
  sh_dataset_free(&d);
}

/* The inspector's two passes over a batch in post-order (inspect.c,
 * walk_post) order the functions on one node so that a caller on the same
 * node comes first going down: here g (the third function found) calls f
 * (the second) on its own node and main calls both, so the order is main,
 * g, f, not the functions' numbering. Outputs against the dynamic runtime
 * (batches 1, 7, 64; 1-3 threads). */
static const char SAME_NODE_SF[] =
    "type Tree = Leaf(word: i32) | Node(left: Tree, right: Tree)\n"
    "param emb : f32[V, H]\n"
    "param W : f32[2*H, H]\n"
    "param U : f32[H, H]\n"
    "param b : f32[H]\n"
    "fn f(t: Tree) -> f32[H] =\n"
    "  match t {\n"
    "    Leaf(w) => emb[w],\n"
    "    Node(l, r) => tanh(cat(f(l), f(r)) @ W + b),\n"
    "  }\n"
    "fn g(t: Tree) -> f32[H] = tanh(f(t) @ U + b)\n"
    "fn main(t: Tree) -> f32[H] = f(t) + g(t)\n";

TEST(linear_same_node_callers) {
  if (!th_have_jit_cc("linear_same_node_callers")) return;
  const char *path = th_tmp_path("same_node.sf");
  FILE *fp = fopen(path, "w");
  REQUIRE(fp != NULL);
  fputs(SAME_NODE_SF, fp);
  fclose(fp);
  check_model(path, (const char *[]){"H=11", NULL}); /* odd width: column tails */
}

/* A node of three children in a batch for a binary-tree model: the
 * post-order walk leaves it to the depth-first one, which names it; the
 * next batch (binary) runs. */
TEST(linear_walk_names_a_bad_node) {
  sheaf_ctx *ctx = th_ctx();
  if (!th_have_jit_cc("linear_walk_names_a_bad_node")) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  sh_treebank tb;
  sh_tb_init(&tb, ctx);
  int32_t n[4], root, lab = 0, kids[3];
  bool ok = CHECK_OK(ctx, sh_vocab_intern(&tb.labels, "x", 1, &lab));
  for (int w = 0; ok && w < 3; w++) { /* words 0 .. 2 */
    char s[3] = {'w', (char)('0' + w), 0};
    int32_t id;
    ok = CHECK_OK(ctx, sh_vocab_intern(&tb.words, s, 2, &id)) && CHECK_EQ_INT(id, w);
  }
  if (!ok) {
    sh_tb_free(&tb);
    return;
  }
  REQUIRE_OK(ctx, sh_tb_begin_tree(&tb));
  for (int i = 0; i < 3; i++) REQUIRE_OK(ctx, sh_tb_add_node(&tb, i, lab, NULL, 0, &n[i]));
  kids[0] = n[0], kids[1] = n[1], kids[2] = n[2];
  REQUIRE_OK(ctx, sh_tb_add_node(&tb, -1, lab, kids, 3, &root));
  REQUIRE_OK(ctx, sh_tb_end_tree(&tb));
  REQUIRE_OK(ctx, sh_tb_begin_tree(&tb));
  REQUIRE_OK(ctx, sh_tb_add_node(&tb, 1, lab, NULL, 0, &n[0]));
  REQUIRE_OK(ctx, sh_tb_add_node(&tb, 2, lab, NULL, 0, &n[1]));
  kids[0] = n[0], kids[1] = n[1];
  REQUIRE_OK(ctx, sh_tb_add_node(&tb, -1, lab, kids, 2, &root));
  REQUIRE_OK(ctx, sh_tb_end_tree(&tb));
  tl_model tm;
  if (!tl_open(ctx, "examples/treefc.sf", (const char *[]){"H=8", NULL}, NULL, &tm)) {
    sh_tb_free(&tb);
    return;
  }
  sh_lin *L = NULL;
  char why[512];
  if (CHECK_OK(ctx, sh_lin_create(&tm.m, tm.model, &tm.bind, &L, why, sizeof why))) {
    CHECK_EQ_INT(sh_lin_run(L, &tb, 0, 2, sh_word_ids_of_rows(100)), SHEAF_ERR_INVALID_ARG);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "tree node with 3 children");
    CHECK_OK(ctx, sh_lin_run(L, &tb, 1, 1, sh_word_ids_of_rows(100)));
    CHECK_EQ_INT(sh_lin_n_groups(L), 3); /* the two leaves, the node, main */
  }
  sh_lin_free(L);
  tl_close(ctx, &tm);
  sh_tb_free(&tb);
}

/* Leaves shared by word (inspect.c, linear.h's share_leaves): TreeLSTM's
 * leaf arm (computed from its word alone) runs once per distinct word of a
 * batch. Three trees over words 3, 3, 4, 3: one leaf row per word (2), the
 * node rows as before, and every output as with sharing off
 * (SHEAF_LINEAR_SHARE_LEAVES=0 at create); TreeFC's leaves (its rows are
 * the table's rows as they are) are not shared. */
TEST(linear_leaves_shared_by_word) {
  sheaf_ctx *ctx = th_ctx();
  if (!th_have_jit_cc("linear_leaves_shared_by_word")) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  sh_treebank tb;
  sh_tb_init(&tb, ctx);
  int32_t n[3], root, lab = 0, kids[2];
  bool ok = CHECK_OK(ctx, sh_vocab_intern(&tb.labels, "x", 1, &lab));
  for (int w = 0; ok && w < 5; w++) { /* words 0 .. 4 */
    char s[3] = {'w', (char)('0' + w), 0};
    int32_t id;
    ok = CHECK_OK(ctx, sh_vocab_intern(&tb.words, s, 2, &id)) && CHECK_EQ_INT(id, w);
  }
  if (!ok) {
    sh_tb_free(&tb);
    return;
  }
  REQUIRE_OK(ctx, sh_tb_begin_tree(&tb)); /* Node(Node(3, 3), 4) */
  REQUIRE_OK(ctx, sh_tb_add_node(&tb, 3, lab, NULL, 0, &n[0]));
  REQUIRE_OK(ctx, sh_tb_add_node(&tb, 3, lab, NULL, 0, &n[1]));
  kids[0] = n[0], kids[1] = n[1];
  REQUIRE_OK(ctx, sh_tb_add_node(&tb, -1, lab, kids, 2, &n[2]));
  REQUIRE_OK(ctx, sh_tb_add_node(&tb, 4, lab, NULL, 0, &n[0]));
  kids[0] = n[2], kids[1] = n[0];
  REQUIRE_OK(ctx, sh_tb_add_node(&tb, -1, lab, kids, 2, &root));
  REQUIRE_OK(ctx, sh_tb_end_tree(&tb));
  REQUIRE_OK(ctx, sh_tb_begin_tree(&tb)); /* a lone leaf 3 */
  REQUIRE_OK(ctx, sh_tb_add_node(&tb, 3, lab, NULL, 0, &n[0]));
  REQUIRE_OK(ctx, sh_tb_end_tree(&tb));
  const char *paths[2] = {"examples/treelstm.sf", "examples/treefc.sf"};
  const char *const sizes[2][4] = {{"H=8", "E=6", "C=5", NULL}, {"H=8", NULL}};
  const int want_leaf_rows[2] = {2, 4}; /* shared; TreeFC's leaves: one row each */
  for (int mi = 0; mi < 2; mi++) {
    tl_model tm;
    if (!tl_open(ctx, paths[mi], sizes[mi], NULL, &tm)) break;
    sh_lin *L[2] = {NULL, NULL}; /* sharing on, off */
    char why[512];
    float got[2][2][8];
    for (int s = 0; s < 2; s++) {
      if (s) setenv("SHEAF_LINEAR_SHARE_LEAVES", "0", 1);
      sheaf_status st = sh_lin_create(&tm.m, tm.model, &tm.bind, &L[s], why, sizeof why);
      unsetenv("SHEAF_LINEAR_SHARE_LEAVES");
      if (!CHECK_OK(ctx, st) || !CHECK_OK(ctx, sh_lin_run(L[s], &tb, 0, 2, sh_word_ids_of_rows(100)))) goto next;
      int leaf_rows = 0;
      for (int g = 0; g < sh_lin_n_groups(L[s]); g++) {
        sh_lin_group_view v;
        if (CHECK(sh_lin_group(L[s], g, &v)) && v.fn == 1 && v.arm == 0) leaf_rows += v.count;
      }
      CHECK_EQ_INT(leaf_rows, s ? 4 : want_leaf_rows[mi]);
      int rank;
      int64_t dims[2];
      sh_lin_output_shape(L[s], 0, &rank, dims);
      if (!CHECK(dims[0] <= 8)) goto next;
      for (int t = 0; t < 2; t++) memcpy(got[s][t], sh_lin_output(L[s], t, 0), (size_t)dims[0] * sizeof(float));
      if (s) CHECK(sh_max_rel_err(&got[0][0][0], &got[1][0][0], 2, 8) <= 1e-6);
    }
  next:
    sh_lin_free(L[0]);
    sh_lin_free(L[1]);
    tl_close(ctx, &tm);
  }
  sh_tb_free(&tb);
}
