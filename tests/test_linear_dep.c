/*
 * test_linear_dep.c — the linearized mode on dependency trees (main takes
 * Dep(i32, list[T])): childsum.sf against the dynamic runtime on the
 * bundled EWT dependency trees, seeded weights with nonzero biases,
 * batches of 1, 7 and 64 (every output within 1e-5, relative per row); the
 * inspector's arrays on a hand-built batch (a node with 5 leaf children,
 * and a lone leaf: the ragged arm's child counts, 0 for the leaves, and
 * the children's rows) with its outputs against the dynamic runtime.
 * test_linear_dep_trees.c has treeattn.sf, threads and hand-built shapes.
 */
#include <stdlib.h>

#include "compile/linear.h"
#include "harness.h"
#include "io/dataset.h"
#include "models/models.h"
#include "test_linear_util.h"

#define EWT "data/ud_english_ewt/en_ewt-ud-test.conllu"
#define N_TREES 135

/* main's outputs (one f32[H] each) of trees 0 .. n-1 of tb by the dynamic runtime. */
static bool dynamic_dep(sheaf_ctx *ctx, tl_model *tm, const sh_treebank *tb, sh_word_ids ids, int n, float *want,
                        int64_t width) {
  sh_interp *ip = NULL;
  sheaf_graph *g = NULL;
  bool ok = CHECK_OK(ctx, sh_interp_create(&tm->m, &tm->bind, &ip)) &&
            CHECK_OK(ctx, sheaf_graph_create(tm->model, NULL, &g));
  sh_value *res = calloc((size_t)n, sizeof *res);
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
           CHECK_EQ_INT(v.shape[0], width);
      if (ok) memcpy(want + t * width, v.data, (size_t)width * sizeof(float));
    }
    ok = ok && CHECK_OK(ctx, sheaf_graph_reset(g));
    sh_interp_reset(ip);
  }
  free(res);
  sheaf_graph_free(g);
  sh_interp_free(ip);
  return ok;
}

TEST(linear_dep_childsum_matches_dynamic) {
  sheaf_ctx *ctx = th_ctx();
  if (!th_have_jit_cc("linear_dep_childsum_matches_dynamic")) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  sh_dataset d;
  REQUIRE_OK(ctx, sh_dataset_load(ctx, EWT, SH_DATASET_CHILDSUM, &d));
  tl_model tm;
  if (!tl_open(ctx, "examples/childsum.sf", (const char *[]){"H=8", "E=6", NULL}, &d, &tm)) {
    sh_dataset_free(&d);
    return;
  }
  char why[512];
  sh_lin *L = NULL;
  int n = N_TREES < sh_dataset_count(&d) ? N_TREES : sh_dataset_count(&d);
  const int64_t width = 8;
  float *want = calloc((size_t)n * width, sizeof *want), *got = calloc((size_t)n * width, sizeof *got);
  if (!CHECK(want && got) || !CHECK_OK(ctx, sh_lin_create(&tm.m, tm.model, &tm.bind, &L, why, sizeof why))) {
    fprintf(stderr, "childsum: %s\n", why);
    goto out;
  }
  if (!dynamic_dep(ctx, &tm, &d.tb, d.ids, n, want, width)) goto out;
  static const int batches[] = {1, 7, 64};
  for (int bi = 0; bi < 3; bi++) {
    int b = batches[bi], stop = b == 1 ? 20 : n;
    memset(got, 0, (size_t)n * width * sizeof *got);
    for (int first = 0; first < stop; first += b) {
      int cnt = first + b <= stop ? b : stop - first;
      if (!CHECK_OK(ctx, sh_lin_run(L, &d.tb, first, cnt, d.ids))) goto out;
      for (int t = 0; t < cnt; t++) memcpy(got + (first + t) * width, sh_lin_output(L, t, 0), width * sizeof(float));
    }
    double worst = sh_max_rel_err(got, want, stop, width);
    if (!CHECK(worst <= 1e-5)) fprintf(stderr, "childsum batch %d: max rel err %g\n", b, worst);
  }
out:
  free(want), free(got);
  sh_lin_free(L);
  tl_close(ctx, &tm);
  sh_dataset_free(&d);
}

/* Two trees: word 1 with five leaf children (words 2 .. 6), and a lone word 7. */
TEST(linear_dep_inspector_arrays) {
  sheaf_ctx *ctx = th_ctx();
  if (!th_have_jit_cc("linear_dep_inspector_arrays")) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  sh_treebank tb;
  sh_tb_init(&tb, ctx);
  int32_t kids[5], root, l7, lab = 0;
  REQUIRE_OK(ctx, sh_vocab_intern(&tb.labels, "x", 1, &lab));
  for (int w = 0; w < 10; w++) { /* words 0 .. 9 */
    char s[3] = {'w', (char)('0' + w), 0};
    int32_t id;
    REQUIRE_OK(ctx, sh_vocab_intern(&tb.words, s, 2, &id));
    if (!CHECK_EQ_INT(id, w)) {
      sh_tb_free(&tb);
      return;
    }
  }
  REQUIRE_OK(ctx, sh_tb_begin_tree(&tb));
  for (int i = 0; i < 5; i++) REQUIRE_OK(ctx, sh_tb_add_node(&tb, 2 + i, lab, NULL, 0, &kids[i]));
  REQUIRE_OK(ctx, sh_tb_add_node(&tb, 1, lab, kids, 5, &root));
  REQUIRE_OK(ctx, sh_tb_end_tree(&tb));
  REQUIRE_OK(ctx, sh_tb_begin_tree(&tb));
  REQUIRE_OK(ctx, sh_tb_add_node(&tb, 7, lab, NULL, 0, &l7));
  REQUIRE_OK(ctx, sh_tb_end_tree(&tb));
  tl_model tm;
  sh_lin *L = NULL;
  char why[512];
  sh_word_ids ids = sh_word_ids_of_rows(100);
  if (!tl_open(ctx, "examples/childsum.sf", (const char *[]){"H=8", "E=6", NULL}, NULL, &tm)) {
    sh_tb_free(&tb);
    return;
  }
  if (!CHECK_OK(ctx, sh_lin_create(&tm.m, tm.model, &tm.bind, &L, why, sizeof why))) goto out;
  if (!CHECK_OK(ctx, sh_lin_run(L, &tb, 0, 2, ids))) goto out;
  /* fns: 0 main (calls node on its own tree), 1 node (one ragged arm, leaves too: one call site on every child,
   * nk rows; no arm of its own for leaves, as nothing in node needs a child) */
  static const struct { int h, fn, arm, start, count, nf, nc, nk, f0[6], c[5]; } want[] = {
      {0, 1, 0, 0, 6, 1, 1, 0, {2, 3, 4, 5, 6, 7}, {0}}, /* the six leaves: node rows 0 .. 5, no children */
      {1, 0, 0, 0, 1, 0, 1, 0, {0}, {5}},                /* main(7): node row 5 */
      {1, 1, 0, 6, 1, 1, 1, 5, {1}, {0, 1, 2, 3, 4}},    /* node(word 1): its five children's rows */
      {2, 0, 0, 1, 1, 0, 1, 0, {0}, {6}},                /* main(root) */
  };
  if (!CHECK_EQ_INT(sh_lin_n_groups(L), 4)) goto out;
  for (int g = 0; g < 4; g++) {
    sh_lin_group_view v;
    if (!CHECK(sh_lin_group(L, g, &v))) goto out;
    CHECK_EQ_INT(v.height, want[g].h);
    CHECK_EQ_INT(v.fn, want[g].fn);
    CHECK_EQ_INT(v.arm, want[g].arm);
    CHECK_EQ_INT(v.start, want[g].start);
    if (!CHECK_EQ_INT(v.count, want[g].count) || !CHECK_EQ_INT(v.n_fields, want[g].nf) ||
        !CHECK_EQ_INT(v.n_calls, want[g].nc))
      continue;
    for (int i = 0; i < v.count && v.n_fields; i++) CHECK_EQ_INT(v.fields[0][i], want[g].f0[i]);
    if (!CHECK_EQ_INT(v.n_kid_rows, want[g].nk)) continue;
    if (g == 0 && CHECK(v.n_kids != NULL)) /* the leaves, in the ragged arm: K = 0 */
      for (int i = 0; i < v.count; i++) CHECK_EQ_INT(v.n_kids[i], 0);
    if (want[g].nk) { /* the ragged arm: K = 5, the children's rows in order */
      if (CHECK(v.n_kids != NULL)) CHECK_EQ_INT(v.n_kids[0], 5);
      for (int j = 0; j < want[g].nk; j++) CHECK_EQ_INT(v.calls[0][j], want[g].c[j]);
      CHECK_EQ_INT(v.call_fn[0], 1);
    } else if (v.count == 1)
      for (int c = 0; c < v.n_calls; c++) {
        CHECK_EQ_INT(v.calls[c][0], want[g].c[c]);
        CHECK_EQ_INT(v.call_fn[c], 1);
      }
  }
  CHECK_EQ_INT(sh_lin_root_row(L, 0), 1);
  CHECK_EQ_INT(sh_lin_root_row(L, 1), 0);
  {
    float want_o[16], got_o[16];
    if (dynamic_dep(ctx, &tm, &tb, ids, 2, want_o, 8)) {
      memcpy(got_o, sh_lin_output(L, 0, 0), 8 * sizeof(float));
      memcpy(got_o + 8, sh_lin_output(L, 1, 0), 8 * sizeof(float));
      CHECK(sh_max_rel_err(got_o, want_o, 2, 8) <= 1e-5);
    }
  }
out:
  sh_lin_free(L);
  tl_close(ctx, &tm);
  sh_tb_free(&tb);
}
