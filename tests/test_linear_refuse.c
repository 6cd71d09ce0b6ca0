/*
 * test_linear_refuse.c — what the linearized mode refuses, with the reason
 * and the source position (early_exit's while on a tensor value, an if on
 * a dependency node's child count other than == 0, beam's while, an
 * if on item(), an unsupported builtin, a call on a tree the pattern does not bind), that no example
 * model crashes it, and the inspector's arrays on a hand-built batch.
 */
#include <math.h>
#include <stdlib.h>

#include "compile/linear.h"
#include "harness.h"
#include "models/models.h"
#include "test_linear_util.h"

TEST(linear_refuses_with_reasons) {
  char why[512];
  if (tl_refusal("examples/early_exit.sf", NULL, (const char *[]){"H=8", "C=3", NULL}, why, sizeof why)) {
    CHECK_CONTAINS(why, "examples/early_exit.sf:");
    CHECK_CONTAINS(why, "while depends on a tensor value");
    CHECK_CONTAINS(why, "depends only on the input's structure");
  }
  /* childsum.sf and treeattn.sf (its if on len(hs) == 0: a leaves' arm) linearize now
   * (test_linear_dep*.c); an if on another child count does not */
  static const char count_if[] =
      "type Dep = Dep(word: i32, kids: list[Dep])\n"
      "param emb : f32[V, H]\n"
      "fn node(t: Dep) -> f32[H] {\n"
      "  let Dep(w, kids) = t;\n"
      "  let hs = map(node, kids);\n"
      "  if len(hs) == 2 { emb[w] } else { tanh(emb[w] + sum(hs)) }\n"
      "}\n"
      "fn main(t: Dep) -> f32[H] = node(t)\n";
  if (tl_refusal("count_if.sf", count_if, (const char *[]){"H=8", NULL}, why, sizeof why)) {
    CHECK_CONTAINS(why, "count_if.sf:6:6: a condition on the child count other than len(...) == 0 (or > 0)");
  }
  /* bilstm.sf, chartagger.sf (token records) and seq2seq.sf (a decoder) linearize now (test_linear_seq.c,
   * test_linear_rec.c, test_linear_dec.c) */
  if (tl_refusal("examples/beam.sf", NULL, (const char *[]){"H=8", "E=6", NULL}, why, sizeof why)) {
    CHECK_CONTAINS(why, "examples/beam.sf:");
    CHECK_CONTAINS(why, "while loop: its trip count is not the input's structure");
  }
  static const char tensor_if[] =
      "type Tree = Leaf(word: i32) | Node(left: Tree, right: Tree)\n"
      "param emb : f32[V, H]\n"
      "param W : f32[2*H, H]\n"
      "fn f(t: Tree) -> f32[H] =\n"
      "  match t {\n"
      "    Leaf(w) => emb[w],\n"
      "    Node(l, r) => {\n"
      "      let h = cat(f(l), f(r)) @ W;\n"
      "      if item(max(h)) > 0.5 { h } else { f(l) }\n"
      "    },\n"
      "  }\n"
      "fn main(t: Tree) -> f32[H] = f(t)\n";
  if (tl_refusal("tensor_if.sf", tensor_if, (const char *[]){"H=8", NULL}, why, sizeof why)) {
    CHECK_CONTAINS(why, "tensor_if.sf:9:7: if depends on a tensor value");
  }
  static const char builtin[] =
      "type Tree = Leaf(word: i32) | Node(left: Tree, right: Tree)\n"
      "param emb : f32[V, H]\n"
      "fn f(t: Tree) -> f32[H] =\n"
      "  match t {\n"
      "    Leaf(w) => emb[w],\n"
      "    Node(l, r) => softmax(f(l) + f(r)),\n"
      "  }\n"
      "fn main(t: Tree) -> f32[H] = f(t)\n";
  if (tl_refusal("builtin.sf", builtin, (const char *[]){"H=8", NULL}, why, sizeof why)) {
    CHECK_CONTAINS(why, "builtin.sf:6:19: builtin 'softmax' is not supported");
  }
  static const char not_sub[] =
      "type Tree = Leaf(word: i32) | Node(left: Tree, right: Tree)\n"
      "param emb : f32[V, H]\n"
      "fn f(t: Tree) -> f32[H] =\n"
      "  match t {\n"
      "    Leaf(w) => emb[w],\n"
      "    Node(l, r) => f(l) + f(r),\n"
      "  }\n"
      "fn g(a: Tree, x: f32[H]) -> f32[H] = x + f(a)\n"
      "fn main(t: Tree) -> f32[H] = g(t, emb[0])\n";
  if (tl_refusal("not_sub.sf", not_sub, (const char *[]){"H=8", NULL}, why, sizeof why)) {
    CHECK_CONTAINS(why, "not_sub.sf:8:4: 'g' takes a tree with other arguments");
  }
}

/* Every example model: linearizes or is refused with a reason; never a crash. */
TEST(linear_every_example_checked) {
  static const char *const ex[] = {"attnpool", "beam", "bilstm", "branches", "chartagger", "childsum", "cnn",
                                   "decoder", "early_exit", "gru", "handnorm", "mvrnn", "parser", "seq2seq",
                                   "tagger2", "transformer", "treeattn", "treefc", "treegru", "treelstm"};
  sheaf_ctx *ctx = th_ctx();
  int linear = 0;
  for (size_t i = 0; i < sizeof ex / sizeof ex[0]; i++) {
    char path[64], why[512];
    snprintf(path, sizeof path, "examples/%s.sf", ex[i]);
    tl_model tm;
    memset(&tm, 0, sizeof tm);
    tm.have_m = true;
    if (!CHECK_OK(ctx, sh_file_read(ctx, path, &tm.src, &tm.len))) continue;
    if (!CHECK_OK(ctx, sh_lang_compile(&tm.m, ctx, path, tm.src, tm.len))) {
      tl_close(ctx, &tm);
      continue;
    }
    sh_lang_bind none = {0}; /* no sizes: a refusal that needs them says so */
    sheaf_status st = sh_lin_check(&tm.m, &none, why, sizeof why);
    CHECK(st == SHEAF_OK || st == SHEAF_ERR_UNSUPPORTED);
    if (st == SHEAF_ERR_UNSUPPORTED) CHECK_CONTAINS(why, path);
    linear += st == SHEAF_OK;
    tl_close(ctx, &tm);
  }
  CHECK_EQ_INT(linear, 0); /* without sizes no shape is known: every one is refused, by a reason */
}

/* The inspector on two hand-built trees of treefc: Node(Node(3, 4), 5) and 7. */
TEST(linear_inspector_arrays) {
  sheaf_ctx *ctx = th_ctx();
  if (!th_have_jit_cc("linear_inspector_arrays")) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  sh_treebank tb;
  sh_tb_init(&tb, ctx);
  int32_t a, b, c, ab, root, l7, kids[2], lab = 0;
  bool ok = CHECK_OK(ctx, sh_vocab_intern(&tb.labels, "x", 1, &lab));
  for (int w = 0; ok && w < 10; w++) { /* words 0 .. 9 */
    char s[4] = {'w', (char)('0' + w), 0, 0};
    int32_t id;
    ok = CHECK_OK(ctx, sh_vocab_intern(&tb.words, s, 2, &id)) && CHECK_EQ_INT(id, w);
  }
  if (!ok) {
    sh_tb_free(&tb);
    return;
  }
  REQUIRE_OK(ctx, sh_tb_begin_tree(&tb));
  REQUIRE_OK(ctx, sh_tb_add_node(&tb, 3, lab, NULL, 0, &a));
  REQUIRE_OK(ctx, sh_tb_add_node(&tb, 4, lab, NULL, 0, &b));
  kids[0] = a, kids[1] = b;
  REQUIRE_OK(ctx, sh_tb_add_node(&tb, -1, lab, kids, 2, &ab));
  REQUIRE_OK(ctx, sh_tb_add_node(&tb, 5, lab, NULL, 0, &c));
  kids[0] = ab, kids[1] = c;
  REQUIRE_OK(ctx, sh_tb_add_node(&tb, -1, lab, kids, 2, &root));
  REQUIRE_OK(ctx, sh_tb_end_tree(&tb));
  REQUIRE_OK(ctx, sh_tb_begin_tree(&tb));
  REQUIRE_OK(ctx, sh_tb_add_node(&tb, 7, lab, NULL, 0, &l7));
  REQUIRE_OK(ctx, sh_tb_end_tree(&tb));
  tl_model tm;
  sh_lin *L = NULL;
  char why[512];
  if (!tl_open(ctx, "examples/treefc.sf", (const char *[]){"H=8", NULL}, NULL, &tm)) {
    sh_tb_free(&tb);
    return;
  }
  if (!CHECK_OK(ctx, sh_lin_create(&tm.m, tm.model, &tm.bind, &L, why, sizeof why))) goto out;
  if (!CHECK_OK(ctx, sh_lin_run(L, &tb, 0, 2, sh_word_ids_of_rows(100)))) goto out;
  /* fns: 0 main (one arm, calls fc on its own node), 1 fc (arm 0 Leaf, arm 1 Node) */
  static const struct { int h, fn, arm, start, count, f0[4], c0[4], c1[4]; } want[] = {
      {0, 1, 0, 0, 4, {3, 4, 5, 7}, {0}, {0}}, /* leaves a, b, c, 7: fc rows 0..3 */
      {1, 0, 0, 0, 1, {0}, {3}, {0}},          /* main(7) calls fc(7): row 3 */
      {1, 1, 1, 4, 1, {0}, {0}, {1}},          /* fc(Node(a, b)): rows of a, b */
      {2, 1, 1, 5, 1, {0}, {4}, {2}},          /* fc(root): Node(a, b), c */
      {3, 0, 0, 1, 1, {0}, {5}, {0}},          /* main(root) */
  };
  if (!CHECK_EQ_INT(sh_lin_n_groups(L), 5)) goto out;
  for (int g = 0; g < 5; g++) {
    sh_lin_group_view v;
    if (!CHECK(sh_lin_group(L, g, &v))) goto out;
    CHECK_EQ_INT(v.height, want[g].h);
    CHECK_EQ_INT(v.fn, want[g].fn);
    CHECK_EQ_INT(v.arm, want[g].arm);
    CHECK_EQ_INT(v.start, want[g].start);
    if (!CHECK_EQ_INT(v.count, want[g].count)) continue;
    CHECK_EQ_INT(v.n_fields, want[g].arm == 0 && want[g].fn == 1 ? 1 : 0);
    CHECK_EQ_INT(v.n_calls, want[g].fn == 0 ? 1 : want[g].arm == 1 ? 2 : 0);
    for (int i = 0; i < v.count; i++) {
      if (v.n_fields) CHECK_EQ_INT(v.fields[0][i], want[g].f0[i]);
      if (v.n_calls > 0) CHECK_EQ_INT(v.calls[0][i], want[g].c0[i]);
      if (v.n_calls > 1) CHECK_EQ_INT(v.calls[1][i], want[g].c1[i]);
      if (v.n_calls > 0) CHECK_EQ_INT(v.call_fn[0], 1);
    }
  }
  CHECK_EQ_INT(sh_lin_root_row(L, 0), 1);
  CHECK_EQ_INT(sh_lin_root_row(L, 1), 0);
  /* the root's output: tanh(cat(fc(ab), fc(c)) @ W + b), from the leaves' rows by hand */
  {
    int rank;
    const int64_t *sh;
    sheaf_param pe, pw, pb;
    REQUIRE_OK(ctx, sheaf_model_find(tm.model, "emb", &pe));
    REQUIRE_OK(ctx, sheaf_model_find(tm.model, "W", &pw));
    REQUIRE_OK(ctx, sheaf_model_find(tm.model, "b", &pb));
    const float *E = sheaf_model_param_values(tm.model, pe, &rank, &sh), *W = sheaf_model_param_values(tm.model, pw, &rank, &sh),
                *B = sheaf_model_param_values(tm.model, pb, &rank, &sh);
    float h_ab[8], h_root[8], x[16];
    for (int j = 0; j < 8; j++) x[j] = E[3 * 8 + j], x[8 + j] = E[4 * 8 + j];
    for (int k = 0; k < 8; k++) {
      double s = B[k];
      for (int j = 0; j < 16; j++) s += (double)x[j] * W[j * 8 + k];
      h_ab[k] = (float)tanh(s);
    }
    for (int j = 0; j < 8; j++) x[j] = h_ab[j], x[8 + j] = E[5 * 8 + j];
    for (int k = 0; k < 8; k++) {
      double s = B[k];
      for (int j = 0; j < 16; j++) s += (double)x[j] * W[j * 8 + k];
      h_root[k] = (float)tanh(s);
    }
    CHECK(sh_max_rel_err(sh_lin_output(L, 0, 0), h_root, 1, 8) <= 1e-5);
    CHECK(sh_max_rel_err(sh_lin_output(L, 1, 0), E + 7 * 8, 1, 8) <= 1e-6);
  }
out:
  sh_lin_free(L);
  tl_close(ctx, &tm);
  sh_tb_free(&tb);
}
