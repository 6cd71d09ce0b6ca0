/*
 * test_models.c — the built-in models (src/models/) on the auto-batching
 * runtime: for every model and every policy, batched outputs equal the
 * unbatched per-instance outputs (policy none, one instance per graph; max
 * relative error <= 1e-5) on EWT trees and sentences and on edge cases (a
 * single node, a chain 200 levels deep, 1000 instances); a scalar double
 * reference of the binary TreeLSTM equations; weights save/load and seeds;
 * `sheaf run` / `sheaf bench` through the executable (outputs, errors).
 */
#include <stdlib.h>

#include "harness.h"
#include "models/models.h"

#define EWT_TEST "data/ud_english_ewt/en_ewt-ud-test.conllu"
#define MAX_REL 1e-5 /* per output vector: ||got - ref||_inf / ||ref||_inf */

static const sheaf_policy all_policies[] = {SHEAF_POLICY_SHEAF, SHEAF_POLICY_NONE,
                                            SHEAF_POLICY_DEPTH, SHEAF_POLICY_AGENDA};

/* ------------------------------------------------------------- helpers */

/* Runs instances [first, first + count) of net with `policy` in batches of
 * `batch` into *out (initialized here). */
static bool run_net(const sh_net *net, sheaf_policy policy, int32_t batch, int32_t first,
                    int32_t count, sh_net_outputs *out) {
  return CHECK_OK(th_ctx(), sh_net_run_fresh(net, policy, 0, first, count, batch, out));
}

static bool all_finite(const sh_net_outputs *o) {
  for (int64_t i = 0; i < o->rows * o->dim; i++)
    if (!isfinite(o->values[i])) return false;
  return true;
}

/* Every batching policy at batch sizes `batch` and "everything at once"
 * against the reference: policy none (eager, unbatched), one instance per
 * graph. (none itself is checked once, all instances in one graph.) */
static void check_policies(const sh_net *net, int32_t first, int32_t count, int32_t batch) {
  sh_net_outputs ref;
  if (!run_net(net, SHEAF_POLICY_NONE, 1, first, count, &ref)) return;
  CHECK(all_finite(&ref));
  for (size_t p = 0; p < SH_ARRAY_LEN(all_policies); p++) {
    int32_t batches[2] = {batch, count};
    for (int b = all_policies[p] == SHEAF_POLICY_NONE ? 1 : 0; b < 2; b++) {
      sh_net_outputs got;
      if (!run_net(net, all_policies[p], batches[b], first, count, &got)) continue;
      double err = sh_max_rel_err(got.values, ref.values, ref.rows, ref.dim);
      if (!(err <= MAX_REL))
        th_fail(__FILE__, __LINE__, "%s, policy %s, batch %d: max relative error %.3g > %g",
                sh_net_kind_name(net->kind), sheaf_policy_name(all_policies[p]), (int)batches[b],
                err, MAX_REL);
      sh_net_outputs_free(&got);
    }
  }
  sh_net_outputs_free(&ref);
}

static bool load_ewt(sh_dataset_kind kind, sh_dataset *d) {
  return CHECK_OK(th_ctx(), sh_dataset_load(th_ctx(), EWT_TEST, kind, d));
}

/* Gives every bias small nonzero values (seeded init makes them zero), so
 * the bias paths are exercised. */
static void randomize_biases(sh_net *net) {
  static const char *const names[] = {"b_leaf", "b_node", "b_out", "b_iou", "b_f",
                                      "b_fwd",  "b_bwd",  "b_tag", "bias"};
  uint64_t s = 12345;
  for (size_t i = 0; i < SH_ARRAY_LEN(names); i++) {
    sheaf_param p;
    if (sheaf_model_find(net->model, names[i], &p) != SHEAF_OK) continue;
    int rank;
    const int64_t *shape;
    float *v = sheaf_model_param_data(net->model, p, &rank, &shape);
    int64_t n = rank == 2 ? shape[0] * shape[1] : shape[0];
    for (int64_t k = 0; k < n; k++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      v[k] = (float)((double)(s >> 40) / (double)(1ull << 24) - 0.5) * 0.5f;
    }
  }
  sheaf_ctx_clear_error(th_ctx()); /* the misses above */
}

/* ------------------------------------------- EWT: batched == unbatched */

static void ewt_policies(sh_net_kind kind, int64_t hidden, int64_t embed, int32_t count,
                         int32_t batch) {
  sheaf_ctx *ctx = th_ctx();
  sh_dataset d;
  if (!load_ewt(sh_net_data_kind(kind), &d)) return;
  sh_net net;
  if (CHECK_OK(ctx, sh_net_create(ctx, kind, &d, hidden, embed, &net))) {
    randomize_biases(&net);
    check_policies(&net, 0, count, batch);
    /* a range not starting at 0 (batches straddle different trees) */
    check_policies(&net, 1000, count / 2, batch / 2 + 1);
    sh_net_free(&net);
  }
  sh_dataset_free(&d);
}

TEST(models_treelstm_ewt_batched_equals_unbatched) { ewt_policies(SH_NET_TREELSTM, 16, 12, 96, 40); }
TEST(models_childsum_ewt_batched_equals_unbatched) { ewt_policies(SH_NET_CHILDSUM, 16, 12, 96, 40); }
TEST(models_bilstm_ewt_batched_equals_unbatched) { ewt_policies(SH_NET_BILSTM, 16, 12, 96, 40); }
TEST(models_mvrnn_ewt_batched_equals_unbatched) { ewt_policies(SH_NET_MVRNN, 8, 8, 64, 24); }

/* ------------------------------------------------------ synthetic edges */

static uint64_t g_rng = 88172645463325252ull;
static uint32_t rnd(uint32_t n) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (uint32_t)(g_rng % n);
}

/* Adds a random binary tree of `leaves` leaves with words 0..9 (post-order). */
static bool add_random_binary(sh_treebank *tb, int leaves) {
  sheaf_ctx *ctx = th_ctx();
  int32_t stack[64];
  int sp = 0, made = 0;
  if (!CHECK_OK(ctx, sh_tb_begin_tree(tb))) return false;
  while (made < leaves || sp > 1) {
    int32_t id;
    if (made < leaves && (sp < 2 || rnd(2))) {
      if (!CHECK_OK(ctx, sh_tb_add_node(tb, (int32_t)rnd(10), 0, NULL, 0, &id))) return false;
      made++;
    } else {
      int32_t kids[2] = {stack[sp - 2], stack[sp - 1]};
      sp -= 2;
      if (!CHECK_OK(ctx, sh_tb_add_node(tb, -1, 0, kids, 2, &id))) return false;
    }
    stack[sp++] = id;
  }
  return CHECK_OK(ctx, sh_tb_end_tree(tb));
}

/* A random child-sum tree of n nodes: node k's parent is a random earlier
 * node, built bottom-up. */
static bool add_random_childsum(sh_treebank *tb, int n) {
  sheaf_ctx *ctx = th_ctx();
  int parent[40];
  int32_t id[40];
  for (int k = 1; k < n; k++) parent[k] = (int)rnd((uint32_t)k);
  if (!CHECK_OK(ctx, sh_tb_begin_tree(tb))) return false;
  for (int k = n - 1; k >= 0; k--) { /* children have larger indices */
    int32_t kids[40];
    int nk = 0;
    for (int c = k + 1; c < n; c++)
      if (parent[c] == k) kids[nk++] = id[c];
    if (!CHECK_OK(ctx, sh_tb_add_node(tb, (int32_t)rnd(10), 0, kids, nk, &id[k]))) return false;
  }
  return CHECK_OK(ctx, sh_tb_end_tree(tb));
}

/* One tree: a single leaf. One tree: a chain 200 levels deep. Then 1000
 * random small trees. */
static bool synthetic_trees(sh_dataset_kind kind, sh_dataset *d) {
  sheaf_ctx *ctx = th_ctx();
  sh_dataset_init(d, ctx, kind);
  sh_treebank *tb = &d->tb;
  int32_t label;
  if (!CHECK_OK(ctx, sh_vocab_intern(&tb->labels, "x", 1, &label))) return false;
  for (int w = 0; w < 10; w++) {
    char word[16];
    int32_t id;
    snprintf(word, sizeof word, "w%d", w);
    if (!CHECK_OK(ctx, sh_vocab_intern(&tb->words, word, strlen(word), &id))) return false;
  }
  int32_t id, prev;
  /* single node */
  if (!CHECK_OK(ctx, sh_tb_begin_tree(tb)) ||
      !CHECK_OK(ctx, sh_tb_add_node(tb, 3, 0, NULL, 0, &id)) || !CHECK_OK(ctx, sh_tb_end_tree(tb)))
    return false;
  /* chain of 200 levels */
  if (!CHECK_OK(ctx, sh_tb_begin_tree(tb))) return false;
  if (!CHECK_OK(ctx, sh_tb_add_node(tb, 0, 0, NULL, 0, &prev))) return false;
  for (int level = 1; level < 200; level++) {
    if (kind == SH_DATASET_BINARY) {
      int32_t leaf;
      if (!CHECK_OK(ctx, sh_tb_add_node(tb, level % 10, 0, NULL, 0, &leaf))) return false;
      int32_t kids[2] = {prev, leaf};
      if (!CHECK_OK(ctx, sh_tb_add_node(tb, -1, 0, kids, 2, &prev))) return false;
    } else {
      if (!CHECK_OK(ctx, sh_tb_add_node(tb, level % 10, 0, &prev, 1, &prev))) return false;
    }
  }
  if (!CHECK_OK(ctx, sh_tb_end_tree(tb))) return false;
  /* 1000 small trees */
  for (int t = 0; t < 1000; t++) {
    bool ok = kind == SH_DATASET_BINARY ? add_random_binary(tb, 1 + (int)rnd(12))
                                     : add_random_childsum(tb, 1 + (int)rnd(20));
    if (!ok) return false;
  }
  return CHECK_OK(ctx, sh_dataset_finish(d, 6)); /* mvrnn: 6 words with matrices + <unk> */
}

static bool synthetic_sents(sh_dataset *d) {
  sheaf_ctx *ctx = th_ctx();
  sh_dataset_init(d, ctx, SH_DATASET_SENTS);
  for (int w = 0; w < 10; w++) {
    char word[16];
    int32_t id;
    snprintf(word, sizeof word, "w%d", w);
    if (!CHECK_OK(ctx, sh_vocab_intern(&d->words, word, strlen(word), &id))) return false;
  }
  int32_t words[200], tags[200];
  for (int i = 0; i < 200; i++) {
    words[i] = (int32_t)rnd(11) - 1; /* -1: an unknown word */
    tags[i] = (int32_t)rnd(SH_UPOS_COUNT);
  }
  if (!CHECK_OK(ctx, sh_dataset_add_sent(d, words, tags, 1))) return false;
  if (!CHECK_OK(ctx, sh_dataset_add_sent(d, words, tags, 200))) return false;
  for (int s = 0; s < 1000; s++)
    if (!CHECK_OK(ctx, sh_dataset_add_sent(d, words + rnd(150), tags, 1 + (int32_t)rnd(25))))
      return false;
  return CHECK_OK(ctx, sh_dataset_finish(d, 0));
}

static void edge_policies(sh_net_kind kind, int64_t hidden) {
  sheaf_ctx *ctx = th_ctx();
  sh_dataset d;
  bool ok = sh_net_data_kind(kind) == SH_DATASET_SENTS
                ? synthetic_sents(&d)
                : synthetic_trees(sh_net_data_kind(kind), &d);
  sh_net net;
  if (ok && CHECK_OK(ctx, sh_net_create(ctx, kind, &d, hidden, 8, &net))) {
    randomize_biases(&net);
    REQUIRE_EQ_INT(sh_dataset_count(&d), 1002);
    check_policies(&net, 0, 1, 1);     /* the single node alone */
    check_policies(&net, 1, 1, 1);     /* the chain alone */
    check_policies(&net, 0, 1002, 64); /* all of them; and 1002 in one batch */
    sh_net_free(&net);
  }
  sh_dataset_free(&d);
}

TEST(models_treelstm_edges_single_chain200_1000) { edge_policies(SH_NET_TREELSTM, 8); }
TEST(models_childsum_edges_single_chain200_1000) { edge_policies(SH_NET_CHILDSUM, 8); }
TEST(models_bilstm_edges_single_len200_1000) { edge_policies(SH_NET_BILSTM, 8); }
TEST(models_mvrnn_edges_single_chain200_1000) { edge_policies(SH_NET_MVRNN, 4); }

/* ------------------------------------ scalar reference: binary TreeLSTM */

typedef struct ref_params {
  const float *emb, *W_leaf, *b_leaf, *W_node, *b_node, *W_out, *b_out;
} ref_params;

static double sig(double x) { return 1.0 / (1.0 + exp(-x)); }

/* h, c of node n (double, straight from the equations in treelstm.h). */
static void ref_node(const ref_params *p, const sh_treebank *tb, int32_t n, int H, int E,
                     int32_t unk, double *h, double *c) {
  if (tb->n_children[n] == 0) {
    int32_t w = tb->word[n] >= 0 ? tb->word[n] : unk;
    const float *x = p->emb + (size_t)w * E;
    for (int j = 0; j < H; j++) {
      double z[3];
      for (int g = 0; g < 3; g++) {
        double s = p->b_leaf[g * H + j];
        for (int k = 0; k < E; k++) s += (double)x[k] * p->W_leaf[(size_t)k * 3 * H + g * H + j];
        z[g] = s;
      }
      c[j] = sig(z[0]) * tanh(z[2]);
      h[j] = sig(z[1]) * tanh(c[j]);
    }
    return;
  }
  double *hl = malloc(4 * (size_t)H * sizeof(double)), *cl = hl + H, *hr = cl + H, *cr = hr + H;
  ref_node(p, tb, sh_tb_child(tb, n, 0), H, E, unk, hl, cl);
  ref_node(p, tb, sh_tb_child(tb, n, 1), H, E, unk, hr, cr);
  for (int j = 0; j < H; j++) {
    double z[5];
    for (int g = 0; g < 5; g++) {
      double s = p->b_node[g * H + j];
      for (int k = 0; k < H; k++) s += hl[k] * p->W_node[(size_t)k * 5 * H + g * H + j];
      for (int k = 0; k < H; k++) s += hr[k] * p->W_node[(size_t)(H + k) * 5 * H + g * H + j];
      z[g] = s;
    }
    c[j] = sig(z[0]) * tanh(z[4]) + sig(z[1]) * cl[j] + sig(z[2]) * cr[j];
    h[j] = sig(z[3]) * tanh(c[j]);
  }
  free(hl);
}

static const float *param(sheaf_model *m, sheaf_param p) {
  int rank;
  const int64_t *shape;
  return sheaf_model_param_data(m, p, &rank, &shape);
}

TEST(models_treelstm_matches_scalar_reference) {
  sheaf_ctx *ctx = th_ctx();
  sh_dataset d;
  if (!load_ewt(SH_DATASET_BINARY, &d)) return;
  sh_net net;
  const int H = 24, E = 20;
  if (!CHECK_OK(ctx, sh_net_create(ctx, SH_NET_TREELSTM, &d, H, E, &net))) {
    sh_dataset_free(&d);
    return;
  }
  CHECK_OK(ctx, sh_net_seed(&net, 7));
  randomize_biases(&net);
  ref_params p = {param(net.model, net.tl.emb),    param(net.model, net.tl.W_leaf),
                  param(net.model, net.tl.b_leaf), param(net.model, net.tl.W_node),
                  param(net.model, net.tl.b_node), param(net.model, net.tl.W_out),
                  param(net.model, net.tl.b_out)};
  /* trees 1 (7 words) and 3, batched together with others */
  sheaf_graph *g = NULL;
  REQUIRE_OK(ctx, sheaf_graph_create(net.model, NULL, &g));
  sheaf_expr logp[6], root_h[6];
  for (int32_t t = 0; t < 6; t++)
    logp[t] = sh_treelstm_build(g, &net.tl, &d.tb, t, &root_h[t]);
  CHECK_OK(ctx, sheaf_graph_flush(g));
  for (int32_t t = 1; t <= 3; t += 2) {
    double h[64], c[64], z[SH_TREELSTM_CLASSES], lse = 0, zmax = -1e300;
    ref_node(&p, &d.tb, d.tb.tree_root[t], H, E, d.ids.unk, h, c);
    for (int k = 0; k < SH_TREELSTM_CLASSES; k++) {
      z[k] = p.b_out[k];
      for (int j = 0; j < H; j++) z[k] += h[j] * p.W_out[j * SH_TREELSTM_CLASSES + k];
      if (z[k] > zmax) zmax = z[k];
    }
    for (int k = 0; k < SH_TREELSTM_CLASSES; k++) lse += exp(z[k] - zmax);
    lse = zmax + log(lse);
    sheaf_value_view vh, vl;
    if (!CHECK_OK(ctx, sheaf_value(g, root_h[t], &vh)) || !CHECK_OK(ctx, sheaf_value(g, logp[t], &vl)))
      break;
    CHECK_EQ_INT(vh.shape[vh.rank - 1], H);
    CHECK_EQ_INT(vl.shape[vl.rank - 1], SH_TREELSTM_CLASSES);
    for (int j = 0; j < H; j++) CHECK_NEAR(vh.data[j], h[j], 2e-6 + 1e-5 * fabs(h[j]));
    for (int k = 0; k < SH_TREELSTM_CLASSES; k++)
      CHECK_NEAR(vl.data[k], z[k] - lse, 2e-6 + 1e-5 * fabs(z[k] - lse));
  }
  sheaf_graph_free(g);
  sh_net_free(&net);
  sh_dataset_free(&d);
}

/* ---------------------------------------------------- weights and seeds */

TEST(models_weights_roundtrip_and_seeds) {
  sheaf_ctx *ctx = th_ctx();
  sh_dataset d;
  if (!load_ewt(SH_DATASET_BINARY, &d)) return;
  sh_net a, b;
  REQUIRE_OK(ctx, sh_net_create(ctx, SH_NET_MVRNN, &d, 6, 6, &a));
  if (CHECK_OK(ctx, sh_net_create(ctx, SH_NET_MVRNN, &d, 6, 6, &b))) {
    const char *path = th_tmp_path("mvrnn.safetensors");
    CHECK_OK(ctx, sh_net_seed(&a, 11));
    CHECK_OK(ctx, sheaf_model_save(a.model, path));
    CHECK_OK(ctx, sh_net_load(&b, path));
    sh_net_outputs oa, ob;
    if (run_net(&a, SHEAF_POLICY_SHEAF, 16, 0, 32, &oa)) {
      if (run_net(&b, SHEAF_POLICY_SHEAF, 16, 0, 32, &ob)) {
        CHECK(memcmp(oa.values, ob.values, (size_t)(oa.rows * oa.dim) * sizeof(float)) == 0);
        sh_net_outputs_free(&ob);
      }
      /* another seed gives other outputs; the same seed the same */
      CHECK_OK(ctx, sh_net_seed(&b, 12));
      if (run_net(&b, SHEAF_POLICY_SHEAF, 16, 0, 32, &ob)) {
        CHECK(memcmp(oa.values, ob.values, (size_t)(oa.rows * oa.dim) * sizeof(float)) != 0);
        sh_net_outputs_free(&ob);
      }
      CHECK_OK(ctx, sh_net_seed(&b, 11));
      if (run_net(&b, SHEAF_POLICY_SHEAF, 16, 0, 32, &ob)) {
        CHECK(memcmp(oa.values, ob.values, (size_t)(oa.rows * oa.dim) * sizeof(float)) == 0);
        sh_net_outputs_free(&ob);
      }
      sh_net_outputs_free(&oa);
    }
    sh_net_free(&b);
  }
  sh_net_free(&a);
  sh_dataset_free(&d);
}

TEST(models_data_vocab_and_sentences) {
  sheaf_ctx *ctx = th_ctx();
  sh_dataset d;
  if (!load_ewt(SH_DATASET_SENTS, &d)) return;
  CHECK_EQ_INT(sh_dataset_count(&d), 2077);
  CHECK_EQ_INT(d.n_tokens, 25094);
  CHECK_EQ_INT(d.vocab, d.ids.n_ids + 1);
  CHECK_EQ_INT(d.mv_vocab, SH_DATASET_MV_CAP_DEFAULT + 1);
  int tagged = 0;
  for (int32_t i = 0; i < d.n_tokens; i++) tagged += d.sent_tags[i] >= 0;
  CHECK_EQ_INT(tagged, d.n_tokens); /* every EWT word has one of the 17 tags */
  /* the most frequent word gets matrix row 0 */
  int32_t best = 0;
  int64_t *cnt = calloc((size_t)d.ids.n_ids, sizeof *cnt);
  for (int32_t i = 0; i < d.n_tokens; i++) cnt[d.sent_words[i]]++;
  for (int32_t w = 1; w < d.ids.n_ids; w++)
    if (cnt[w] > cnt[best]) best = w;
  CHECK_EQ_INT(sh_dataset_mv_row(&d, best), 0);
  free(cnt);
  sh_dataset_free(&d);
  /* binarized trees: 2077 trees, 48111 nodes (as `sheaf data stats` says) */
  if (!load_ewt(SH_DATASET_BINARY, &d)) return;
  CHECK_EQ_INT(d.tb.n_trees, 2077);
  CHECK_EQ_INT(d.tb.n_nodes, 48111);
  sh_dataset_free(&d);
  /* a model on the wrong kind of data */
  if (!load_ewt(SH_DATASET_CHILDSUM, &d)) return;
  CHECK_EQ_INT(d.tb.n_nodes, 25094);
  sh_net net;
  CHECK_STATUS(ctx, sh_net_create(ctx, SH_NET_TREELSTM, &d, 8, 8, &net), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "treelstm needs tree data");
  sh_dataset_free(&d);
}

/* ------------------------------------------------------------------ CLI */

static char g_out[1 << 16];

static int sheaf(const char *args) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "%s %s", th_sheaf_bin(), args);
  return th_run(cmd, g_out, sizeof g_out);
}

#define NEED_BIN()                   \
  do {                               \
    if (!th_sheaf_bin()) return;     \
  } while (0)

static long count_lines(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long n = 0;
  int c;
  while ((c = fgetc(f)) != EOF) n += c == '\n';
  fclose(f);
  return n;
}

TEST(models_cli_run_treelstm_ewt) {
  NEED_BIN();
  const char *out = th_tmp_path("treelstm.txt");
  char args[1024];
  snprintf(args, sizeof args,
           "run treelstm --data " EWT_TEST " --hidden 16 --embed 16 --batch 64 --out %s", out);
  CHECK_EQ_INT(sheaf(args), 0);
  CHECK_CONTAINS(g_out, "treelstm: 2077 trees, 48111 nodes from " EWT_TEST "\n");
  CHECK_CONTAINS(g_out, "policy sheaf, batch 64");
  CHECK_CONTAINS(g_out, " trees/s (");
  CHECK_CONTAINS(g_out, "average batch");
  CHECK_EQ_INT(count_lines(out), 2077);
  FILE *f = fopen(out, "r");
  if (CHECK(f != NULL)) {
    int idx;
    double v[5], sum = 0;
    CHECK_EQ_INT(fscanf(f, "%d %lf %lf %lf %lf %lf", &idx, &v[0], &v[1], &v[2], &v[3], &v[4]), 6);
    CHECK_EQ_INT(idx, 0);
    for (int k = 0; k < 5; k++) sum += exp(v[k]);
    CHECK_NEAR(sum, 1.0, 1e-5); /* log-probabilities */
    fclose(f);
  }
}

TEST(models_cli_run_weights_equal_seed_and_policies_agree) {
  NEED_BIN();
  const char *w = th_tmp_path("cs.safetensors"), *a = th_tmp_path("cs-a.txt"),
             *b = th_tmp_path("cs-b.txt");
  char args[2048];
  snprintf(args, sizeof args,
           "run childsum --data tests/data/small.conllu --hidden 8 --embed 8 --seed 3 "
           "--save-weights %s --out %s",
           w, a);
  CHECK_EQ_INT(sheaf(args), 0);
  CHECK_EQ_INT(count_lines(a), 3);
  snprintf(args, sizeof args,
           "run childsum --data tests/data/small.conllu --hidden 8 --embed 8 --weights %s "
           "--policy agenda --batch 1 --out %s --stats",
           w, b);
  CHECK_EQ_INT(sheaf(args), 0);
  CHECK_CONTAINS(g_out, "weights ");
  CHECK_CONTAINS(g_out, "avg batch");
  /* same weights, other policy and batch: same numbers up to rounding in
   * the last printed digit */
  FILE *fa = fopen(a, "r"), *fb = fopen(b, "r");
  if (CHECK(fa && fb)) {
    double x, y;
    int n = 0;
    while (fscanf(fa, "%lf", &x) == 1 && fscanf(fb, "%lf", &y) == 1) {
      CHECK_NEAR(x, y, 1e-5 * (fabs(y) > 1e-2 ? fabs(y) : 1e-2));
      n++;
    }
    CHECK_EQ_INT(n, 3 * 9);
  }
  if (fa) fclose(fa);
  if (fb) fclose(fb);
}

TEST(models_cli_run_bilstm_stdout_and_mvrnn) {
  NEED_BIN();
  CHECK_EQ_INT(sheaf("run bilstm --data tests/data/small.conllu --hidden 8 --embed 8 --out - "
                     "2>&1 | grep -c '^[0-9][0-9]* [0-9][0-9]* '"),
               0);
  CHECK_EQ_STR(g_out, "16\n"); /* 4 + 4 + 8 words (multiword and empty nodes skipped) */
  CHECK_EQ_INT(sheaf("run mvrnn --data tests/data/small.conllu --hidden 4 --mv-vocab 3 --limit 2"),
               0);
  CHECK_CONTAINS(g_out, "mvrnn: 2 trees, 14 nodes");
  CHECK_CONTAINS(g_out, "(matrices 4)");
  /* the same trees as PTB s-expressions give the same outputs */
  const char *ptb = th_tmp_path("small.ptb"), *a = th_tmp_path("small-a.txt"),
             *b = th_tmp_path("small-b.txt");
  char args[2048];
  snprintf(args, sizeof args,
           "data binarize tests/data/small.conllu -o %s && %s run treelstm --data %s --hidden 8 "
           "--embed 8 --out %s && %s run treelstm --data tests/data/small.conllu --hidden 8 "
           "--embed 8 --out %s && cmp %s %s && echo same",
           ptb, th_sheaf_bin(), ptb, a, th_sheaf_bin(), b, a, b);
  CHECK_EQ_INT(sheaf(args), 0);
  CHECK_CONTAINS(g_out, "trees/s");
  CHECK_CONTAINS(g_out, "\nsame\n");
}

/* Whole batches in parallel (2 threads, 60 batches of 5) give the outputs,
 * in order, of one batch at a time. */
TEST(models_cli_runner_parallel_batches_equal_kernels) {
  NEED_BIN();
  const char *a = th_tmp_path("par-a.txt"), *b = th_tmp_path("par-b.txt");
  char args[2048];
  snprintf(args, sizeof args,
           "run treelstm --data " EWT_TEST " --limit 300 --hidden 8 --embed 8 --batch 5 "
           "--threads 2 --parallel batches --out %s",
           a);
  CHECK_EQ_INT(sheaf(args), 0);
  CHECK_CONTAINS(g_out, "parallel: batches");
  CHECK_CONTAINS(g_out, "(summed over the threads)");
  snprintf(args, sizeof args,
           "run treelstm --data " EWT_TEST " --limit 300 --hidden 8 --embed 8 --batch 5 "
           "--threads 2 --parallel kernels --out %s && cmp %s %s && echo same",
           b, a, b);
  CHECK_EQ_INT(sheaf(args), 0);
  CHECK_CONTAINS(g_out, "parallel: kernels");
  CHECK_CONTAINS(g_out, "\nsame\n");
  CHECK_EQ_INT(count_lines(a), 300);
  /* auto: batches with >= 2 per thread, kernels with --stats */
  CHECK_EQ_INT(sheaf("run treelstm --data " EWT_TEST " --limit 40 --hidden 8 --embed 8 --batch 10 --threads 2"), 0);
  CHECK_CONTAINS(g_out, "parallel: batches");
  CHECK_EQ_INT(sheaf("run treelstm --data " EWT_TEST " --limit 30 --hidden 8 --embed 8 --batch 10 --threads 2"), 0);
  CHECK_CONTAINS(g_out, "parallel: kernels");
  CHECK_EQ_INT(sheaf("run treelstm --data " EWT_TEST " --limit 40 --hidden 8 --embed 8 --batch 10 --threads 2 --stats"), 0);
  CHECK_CONTAINS(g_out, "parallel: kernels");
  CHECK_CONTAINS(g_out, "avg batch");
  CHECK_EQ_INT(sheaf("bench treelstm --data tests/data/small.conllu --hidden 8 --embed 8 --repeat 1 "
                     "--threads 2 --batch 1 --parallel batches --policy sheaf"),
               0);
  CHECK_CONTAINS(g_out, "parallel: batches");
  CHECK_CONTAINS(g_out, "\nsheaf ");
  /* errors */
  CHECK_EQ_INT(sheaf("run treelstm --data " EWT_TEST " --parallel fast"), 2);
  CHECK_CONTAINS(g_out, "--parallel: unknown mode 'fast' (expected auto, batches or kernels)");
  CHECK_EQ_INT(sheaf("run treelstm --data " EWT_TEST " --parallel batches --trace t.json"), 2);
  CHECK_CONTAINS(g_out, "--trace reads one graph: use --parallel kernels");
  CHECK_EQ_INT(sheaf("run treelstm --data " EWT_TEST " --stats --parallel batches"), 2);
  CHECK_CONTAINS(g_out, "--stats reads one graph");
}

TEST(models_cli_bench_table) {
  NEED_BIN();
  CHECK_EQ_INT(sheaf("bench treelstm --data tests/data/small.conllu --hidden 8 --embed 8 "
                     "--repeat 1"),
               0);
  CHECK_CONTAINS(g_out, "\nsheaf ");
  CHECK_CONTAINS(g_out, "\nnone ");
  CHECK_CONTAINS(g_out, "\ndepth ");
  CHECK_CONTAINS(g_out, "\nagenda ");
  CHECK_CONTAINS(g_out, "vs sheaf");
  CHECK_EQ_INT(sheaf("bench bilstm --data tests/data/small.conllu --hidden 8 --embed 8 "
                     "--repeat 1 --policy none,sheaf"),
               0);
  CHECK_CONTAINS(g_out, "\nnone ");
  CHECK(strstr(g_out, "\nagenda ") == NULL);
}

TEST(models_cli_errors) {
  NEED_BIN();
  CHECK_EQ_INT(sheaf("run"), 2);
  CHECK_CONTAINS(g_out, "sheaf: error: run: missing MODEL");
  CHECK_EQ_INT(sheaf("run lstm --data x"), 2);
  CHECK_CONTAINS(g_out, "unknown model 'lstm'");
  CHECK_EQ_INT(sheaf("run treelstm"), 2);
  CHECK_CONTAINS(g_out, "missing --data FILE");
  CHECK_EQ_INT(sheaf("run treelstm --data " EWT_TEST " --policy fast"), 2);
  CHECK_CONTAINS(g_out, "--policy: unknown policy 'fast'");
  CHECK_EQ_INT(sheaf("bench treelstm --data " EWT_TEST " --policy sheaf,slow"), 2);
  CHECK_CONTAINS(g_out, "--policy: unknown policy 'slow'");
  CHECK_EQ_INT(sheaf("run treelstm --data " EWT_TEST " --hidden 0"), 2);
  CHECK_CONTAINS(g_out, "--hidden: expected an integer in 1..65536, got '0'");
  CHECK_EQ_INT(sheaf("run treelstm --data " EWT_TEST " --batch=ten"), 2);
  CHECK_CONTAINS(g_out, "--batch: expected an integer in 1..");
  CHECK_CONTAINS(g_out, "got 'ten'");
  CHECK_EQ_INT(sheaf("run treelstm --data " EWT_TEST " --threads"), 2);
  CHECK_CONTAINS(g_out, "--threads needs a value");
  CHECK_EQ_INT(sheaf("run treelstm --data " EWT_TEST " --fast"), 2);
  CHECK_CONTAINS(g_out, "unknown option '--fast'");
  CHECK_EQ_INT(sheaf("run treelstm --data " EWT_TEST " --seed 1 --weights w.safetensors"), 2);
  CHECK_CONTAINS(g_out, "--seed and --weights exclude each other");
  CHECK_EQ_INT(sheaf("run mvrnn --data " EWT_TEST " --hidden 8 --embed 16"), 2);
  CHECK_CONTAINS(g_out, "--embed: mvrnn word vectors have the hidden size (8)");
  CHECK_EQ_INT(sheaf("bench treelstm --data " EWT_TEST " --out x"), 2);
  CHECK_CONTAINS(g_out, "unknown option '--out'");
  /* input errors: exit 1, naming the file */
  CHECK_EQ_INT(sheaf("run treelstm --data /nonexistent/trees.conllu"), 1);
  CHECK_CONTAINS(g_out, "/nonexistent/trees.conllu");
  CHECK_EQ_INT(sheaf("run treelstm --data tests/data/bad_head.conllu"), 1);
  CHECK_CONTAINS(g_out, "bad_head.conllu:");
  CHECK_EQ_INT(sheaf("run treelstm --data tests/data/small.conllu --weights /nonexistent/w.safetensors"), 1);
  CHECK_CONTAINS(g_out, "/nonexistent/w.safetensors");
  /* weights of another model: the error names the missing tensors */
  const char *w = th_tmp_path("bl.safetensors");
  char args[1024];
  snprintf(args, sizeof args, "run bilstm --data tests/data/small.conllu --hidden 4 --embed 4 --save-weights %s", w);
  CHECK_EQ_INT(sheaf(args), 0);
  snprintf(args, sizeof args, "run treelstm --data tests/data/small.conllu --hidden 4 --embed 4 --weights %s", w);
  CHECK_EQ_INT(sheaf(args), 1);
  CHECK_CONTAINS(g_out, "W_leaf");
  /* a child-sum PTB file is not binary */
  const char *cs = th_tmp_path("cs.ptb");
  snprintf(args, sizeof args, "data binarize --child-sum tests/data/small.conllu -o %s && %s run treelstm --data %s", cs, th_sheaf_bin(), cs);
  CHECK_EQ_INT(sheaf(args), 1);
  CHECK_CONTAINS(g_out, "is not binary");
  /* an output that cannot be written */
  CHECK_EQ_INT(sheaf("run treelstm --data tests/data/small.conllu --hidden 4 --embed 4 --out /nonexistent/o.txt"), 1);
  CHECK_CONTAINS(g_out, "/nonexistent/o.txt");
  CHECK_EQ_INT(sheaf("run --help"), 0);
  CHECK_CONTAINS(g_out, "usage: sheaf run MODEL --data FILE");
  CHECK_EQ_INT(sheaf("bench -h"), 0);
  CHECK_CONTAINS(g_out, "--repeat R");
}
