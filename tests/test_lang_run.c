/*
 * test_lang_run.c — executing checked programs (src/lang/interp.h): the
 * binary TreeLSTM of examples/treelstm.sf against the C-API version
 * (src/models/treelstm.c) on the same weights; weights handed over open.
 */
#include <stdlib.h>

#include "base/file.h"
#include "harness.h"
#include "io/dataset.h"
#include "lang/interp.h"
#include "models/models.h"
#include "models/treelstm.h"

#define EWT "data/ud_english_ewt/en_ewt-ud-test.conllu"

static bool compile_file(sheaf_ctx *ctx, const char *path, sh_module *m, char **src, size_t *len) {
  if (!CHECK_OK(ctx, sh_file_read(ctx, path, src, len))) return false;
  return CHECK_OK(ctx, sh_lang_compile(m, ctx, path, *src, *len));
}

TEST(lang_run_treelstm_matches_c_api) {
  sheaf_ctx *ctx = th_ctx();
  sh_dataset d;
  if (!CHECK_OK(ctx, sh_dataset_load(ctx, EWT, SH_DATASET_BINARY, &d))) return;
  sh_net net;
  const int H = 24, E = 20, N = 12;
  if (!CHECK_OK(ctx, sh_net_create(ctx, SH_NET_TREELSTM, &d, H, E, &net))) {
    sh_dataset_free(&d);
    return;
  }
  CHECK_OK(ctx, sh_net_seed(&net, 3));
  /* nonzero biases, so the bias folding is exercised */
  const char *biases[] = {"b_leaf", "b_node", "b_out"};
  for (int i = 0; i < 3; i++) {
    sheaf_param p;
    int rank;
    const int64_t *shape;
    if (sheaf_model_find(net.model, biases[i], &p) != SHEAF_OK) continue;
    float *v = sheaf_model_param_data(net.model, p, &rank, &shape);
    for (int64_t j = 0; j < shape[0]; j++) v[j] = 0.05f * (float)((j * 7 + i) % 11) - 0.25f;
  }
  const char *wpath = th_tmp_path("treelstm_lang.safetensors");
  CHECK_OK(ctx, sheaf_model_save(net.model, wpath));

  /* the C-API outputs */
  sheaf_graph *g = NULL;
  float *want = calloc((size_t)N * SH_TREELSTM_CLASSES, sizeof(float));
  CHECK_OK(ctx, sheaf_graph_create(net.model, NULL, &g));
  sheaf_expr outs[12];
  for (int t = 0; t < N; t++) outs[t] = sh_treelstm_build(g, &net.tl, &d.tb, t, NULL);
  CHECK_OK(ctx, sheaf_graph_flush(g));
  for (int t = 0; t < N; t++) {
    sheaf_value_view v;
    if (CHECK_OK(ctx, sheaf_value(g, outs[t], &v)))
      memcpy(want + t * SH_TREELSTM_CLASSES, v.data, SH_TREELSTM_CLASSES * sizeof(float));
  }
  sheaf_graph_free(g);
  g = NULL;

  /* the same model from source */
  sh_module m;
  char *src = NULL;
  size_t len = 0;
  sheaf_model *model = NULL;
  sh_interp *ip = NULL;
  sh_lang_bind bind = {0};
  if (!compile_file(ctx, "examples/treelstm.sf", &m, &src, &len)) goto out;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &model));
  sh_lang_bind_opts bo = {.weights = wpath, .vocab = d.vocab};
  if (!CHECK_OK(ctx, sh_lang_bind_model(&m, model, &bo, &bind))) goto out;
  CHECK_EQ_INT(bind.vocab, d.vocab);
  if (!CHECK_OK(ctx, sh_interp_create(&m, &bind, &ip))) goto out;
  CHECK_EQ_INT(sh_check_main_input(&m)->kind, SH_INPUT_BINARY_TREE);
  /* two batches: 5 then 7 trees, reusing the graph and the interpreter */
  CHECK_OK(ctx, sheaf_graph_create(model, NULL, &g));
  double worst = 0;
  for (int first = 0; first < N; first = first < 5 ? 5 : N) {
    int last = first == 0 ? 5 : N;
    sh_value res[12];
    for (int t = first; t < last; t++) {
      sh_value in;
      if (!CHECK_OK(ctx, sh_interp_tree(ip, &d.tb, d.tb.tree_root[t], d.ids, &in))) goto out;
      if (!CHECK_OK(ctx, sh_interp_main(ip, g, in, &res[t]))) goto out;
    }
    CHECK_OK(ctx, sheaf_graph_flush(g));
    for (int t = first; t < last; t++) {
      sheaf_value_view v;
      REQUIRE(res[t].kind == SH_V_TENSOR);
      if (!CHECK_OK(ctx, sheaf_value(g, res[t].t, &v))) goto out;
      CHECK_EQ_INT(v.shape[v.rank - 1], SH_TREELSTM_CLASSES);
      double e = sh_max_rel_err(v.data, want + t * SH_TREELSTM_CLASSES, 1, SH_TREELSTM_CLASSES);
      if (e > worst) worst = e;
    }
    CHECK_OK(ctx, sheaf_graph_reset(g));
    sh_interp_reset(ip);
  }
  CHECK(worst <= 1e-5);
  if (worst > 1e-5) fprintf(stderr, "max rel err %g\n", worst);
out:
  sh_interp_free(ip);
  sheaf_graph_free(g);
  sh_lang_bind_free(ctx, &bind);
  sheaf_model_free(model);
  sh_module_free(&m);
  if (src) sh_free(ctx, src, len + 1);
  free(want);
  sh_net_free(&net);
  sh_dataset_free(&d);
}

TEST(lang_run_missing_weights_listed_once) {
  sheaf_ctx *ctx = th_ctx();
  static const char prog[] =
      "type Tree = Leaf(word: i32) | Node(left: Tree, right: Tree)\n"
      "param emb: f32[V, E]\nparam W: f32[E, C]\n"
      "fn main(t: Tree) -> f32[C] { match t { Leaf(w) => emb[w] @ W, Node(_, _) => zeros(C) } }\n";
  sh_module m;
  REQUIRE_OK(ctx, sh_lang_compile(&m, ctx, "t.sf", prog, sizeof prog - 1));
  sheaf_model *model = NULL;
  sh_lang_bind bind = {0};
  if (CHECK_OK(ctx, sheaf_model_create(ctx, &model))) {
    sh_lang_bind_opts bo = {.vocab = 10};
    CHECK(sh_lang_bind_model(&m, model, &bo, &bind) != SHEAF_OK);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "unknown sizes: E, C");
  }
  sh_lang_bind_free(ctx, &bind);
  sheaf_model_free(model);
  sh_module_free(&m);
}

/* Weights handed to the binder open (weights_file: `sheaf run` reads a
 * pipe's bytes once and parses them in place) give the sizes and the
 * values; the path is then only their name in messages, never opened. */
TEST(lang_bind_takes_open_weights) {
  sheaf_ctx *ctx = th_ctx();
  static const char prog[] =
      "type Tree = Leaf(word: i32) | Node(left: Tree, right: Tree)\n"
      "param emb: f32[V, E]\nparam W: f32[E, C]\n"
      "fn main(t: Tree) -> f32[C] { match t { Leaf(w) => emb[w] @ W, Node(_, _) => zeros(C) } }\n";
  sh_module m;
  REQUIRE_OK(ctx, sh_lang_compile(&m, ctx, "t.sf", prog, sizeof prog - 1));
  sheaf_model *a = NULL, *b = NULL;
  sh_lang_bind ba = {0}, bb = {0};
  sh_mapping bytes = {0};
  sheaf_st_file *f = NULL;
  const char *wpath = th_tmp_path("open_weights.safetensors");
  sh_lang_bind_opts seeded = {.seed = 4, .vocab = 5, .n_overrides = 2, .override_name = {"E", "C"},
                              .override_value = {3, 2}};
  if (!CHECK_OK(ctx, sheaf_model_create(ctx, &a)) ||
      !CHECK_OK(ctx, sh_lang_bind_model(&m, a, &seeded, &ba)) ||
      !CHECK_OK(ctx, sheaf_model_save(a, wpath)) || !CHECK_OK(ctx, sh_file_map_binary(ctx, wpath, &bytes)) ||
      !CHECK_OK(ctx, sheaf_st_open_memory(ctx, bytes.data, bytes.size, "held-weights", &f)) ||
      !CHECK_OK(ctx, sheaf_model_create(ctx, &b)))
    goto out;
  sh_lang_bind_opts open = {.weights = "no/such/dir/w.safetensors", .weights_file = f, .vocab = 5};
  if (!CHECK_OK(ctx, sh_lang_bind_model(&m, b, &open, &bb))) goto out;
  for (int p = 0; p < 2; p++) { /* E and C from the shapes, every value from f */
    int ra, rb;
    const int64_t *sa, *sb;
    const float *va = sheaf_model_param_data(a, ba.params[p], &ra, &sa);
    const float *vb = sheaf_model_param_data(b, bb.params[p], &rb, &sb);
    if (!CHECK(va && vb)) goto out;
    CHECK_EQ_INT(rb, ra);
    CHECK_EQ_INT(sb[0], sa[0]);
    CHECK_EQ_INT(sb[1], sa[1]);
    for (int64_t k = 0; k < sa[0] * sa[1]; k++) CHECK(va[k] == vb[k]);
  }
  /* sheaf_model_load_st: the file stays open; argument errors */
  CHECK_OK(ctx, sheaf_model_load_st(b, f));
  CHECK_OK(ctx, sheaf_model_load_st(b, f));
  CHECK_EQ_INT(sheaf_model_load_st(NULL, f), SHEAF_ERR_INVALID_ARG);
  CHECK_STATUS(ctx, sheaf_model_load_st(b, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "sheaf_model_load_st: f is NULL");
  sheaf_ctx_clear_error(ctx);
out:
  sh_lang_bind_free(ctx, &ba);
  sh_lang_bind_free(ctx, &bb);
  sheaf_model_free(a);
  sheaf_model_free(b);
  sheaf_st_close(f);
  if (bytes.ctx) sh_file_unmap(&bytes);
  sh_module_free(&m);
}
