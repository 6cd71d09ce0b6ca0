/*
 * test_lang_models.c — every example model from source (examples/NAME.sf)
 * against its C-API twin (src/models/NAME.c) on the same weights (seeded, with
 * nonzero biases): the child-sum TreeLSTM, the BiLSTM tagger, the MV-RNN
 * (with a capped word-matrix table) and TreeFC, on EWT instances (the
 * first ones and the largest) plus edge cases: one-node trees, words
 * outside the vocabulary, a unary chain, a node with 40 children, one-word
 * sentences. Max rel err <= 1e-5. (The binary TreeLSTM: test_lang_run.c.)
 * Then the same through the CLI: `sheaf run MODEL --save-weights W` and
 * `sheaf run examples/MODEL.sf --weights W` print the same numbers.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "harness.h"
#include "io/dataset.h"
#include "lang/interp.h"
#include "models/models.h"
#include "models/treefc.h"

#define EWT "data/ud_english_ewt/en_ewt-ud-test.conllu"
#define N_FIRST 8   /* the first EWT instances */
#define MAX_INST 16 /* instances compared */
#define MAX_ROWS 4096

typedef enum { M_CHILDSUM, M_BILSTM, M_MVRNN, M_TREEFC } which;

typedef struct ref {
  which w;
  sh_dataset d;
  sh_net net;         /* the registry models */
  sheaf_model *fc_m;  /* TreeFC */
  sh_treefc fc;
  sheaf_model *model; /* the C model in use */
  int32_t inst[MAX_INST];
  int n_inst;
  int64_t dim;
  int32_t rows[MAX_INST], off[MAX_INST + 1];
  float *want;
} ref;

/* Appends the edge cases to d (before sh_dataset_finish). */
static bool add_edge_cases(sheaf_ctx *ctx, sh_dataset *d) {
  if (d->kind == SH_DATASET_SENTS) {
    int32_t one[1] = {3}, unk1[1] = {-1}, mixed[4] = {0, -1, 2, 0};
    return CHECK_OK(ctx, sh_dataset_add_sent(d, one, NULL, 1)) &&
           CHECK_OK(ctx, sh_dataset_add_sent(d, unk1, NULL, 1)) &&
           CHECK_OK(ctx, sh_dataset_add_sent(d, mixed, NULL, 4));
  }
  sh_treebank *tb = &d->tb;
  int32_t label = 0, n = 0, a = 0, u = 0, b = 0, kids[40];
  if (sh_vocab_size(&tb->labels) == 0 && !CHECK_OK(ctx, sh_vocab_intern(&tb->labels, "x", 1, &label)))
    return false;
  bool ok = true;
  /* one node with a known word; one without a word (<unk>) */
  for (int k = 0; k < 2 && ok; k++)
    ok = CHECK_OK(ctx, sh_tb_begin_tree(tb)) && CHECK_OK(ctx, sh_tb_add_node(tb, k ? -1 : 5, label, NULL, 0, &n)) &&
         CHECK_OK(ctx, sh_tb_end_tree(tb));
  if (!ok) return false;
  if (d->kind == SH_DATASET_BINARY) { /* Node(Unary(Leaf 7), Leaf 8): the unary node passes through */
    int32_t ub[2];
    ok = CHECK_OK(ctx, sh_tb_begin_tree(tb)) && CHECK_OK(ctx, sh_tb_add_node(tb, 7, label, NULL, 0, &a)) &&
         CHECK_OK(ctx, sh_tb_add_node(tb, -1, label, &a, 1, &u)) &&
         CHECK_OK(ctx, sh_tb_add_node(tb, 8, label, NULL, 0, &b));
    ub[0] = u, ub[1] = b;
    return ok && CHECK_OK(ctx, sh_tb_add_node(tb, -1, label, ub, 2, &n)) && CHECK_OK(ctx, sh_tb_end_tree(tb));
  }
  /* a word with 40 dependents (more than the C version keeps on its stack) */
  ok = CHECK_OK(ctx, sh_tb_begin_tree(tb));
  for (int k = 0; k < 40 && ok; k++) ok = CHECK_OK(ctx, sh_tb_add_node(tb, k % 7 ? k : -1, label, NULL, 0, &kids[k]));
  return ok && CHECK_OK(ctx, sh_tb_add_node(tb, 1, label, kids, 40, &n)) && CHECK_OK(ctx, sh_tb_end_tree(tb));
}

static void set_biases(sheaf_model *m, const char *const *names) {
  for (int i = 0; names[i]; i++) {
    sheaf_param p;
    int rank;
    const int64_t *shape;
    if (!CHECK(sheaf_model_find(m, names[i], &p) == SHEAF_OK)) continue;
    float *v = sheaf_model_param_data(m, p, &rank, &shape);
    for (int64_t j = 0; j < shape[0]; j++) v[j] = 0.05f * (float)((j * 7 + i) % 11) - 0.25f;
  }
}

/* Loads the data, builds and seeds the C model, computes its outputs. */
static bool ref_open(sheaf_ctx *ctx, which w, ref *r) {
  memset(r, 0, sizeof *r);
  r->w = w;
  sh_dataset_kind dk = w == M_CHILDSUM ? SH_DATASET_CHILDSUM : w == M_BILSTM ? SH_DATASET_SENTS : SH_DATASET_BINARY;
  if (!CHECK_OK(ctx, sh_dataset_load(ctx, EWT, dk, &r->d))) return false;
  int32_t n_ewt = sh_dataset_count(&r->d);
  if (!add_edge_cases(ctx, &r->d)) return false;
  /* the MV-RNN's word matrices: only the 50 most frequent words, then <unk> */
  if (!CHECK_OK(ctx, sh_dataset_finish(&r->d, w == M_MVRNN ? 50 : 0))) return false;
  int32_t biggest = 0;
  for (int32_t i = 0; i < n_ewt; i++)
    if (sh_dataset_size(&r->d, i) > sh_dataset_size(&r->d, biggest)) biggest = i;
  for (int i = 0; i < N_FIRST; i++) r->inst[r->n_inst++] = i;
  r->inst[r->n_inst++] = biggest;
  for (int32_t i = n_ewt; i < sh_dataset_count(&r->d) && r->n_inst < MAX_INST; i++) r->inst[r->n_inst++] = i;

  const int64_t H = w == M_MVRNN ? 8 : 12, E = 10;
  static const char *const b_cs[] = {"b_iou", "b_f", NULL}, *const b_bl[] = {"b_fwd", "b_bwd", "b_tag", NULL},
                           *const b_mv[] = {"bias", NULL}, *const b_fc[] = {"b", NULL};
  if (w == M_TREEFC) {
    if (!CHECK_OK(ctx, sheaf_model_create(ctx, &r->fc_m)) ||
        !CHECK_OK(ctx, sh_treefc_declare(r->fc_m, H, r->d.vocab, &r->fc)))
      return false;
    r->model = r->fc_m;
    r->dim = H;
  } else {
    sh_net_kind k = w == M_CHILDSUM ? SH_NET_CHILDSUM : w == M_BILSTM ? SH_NET_BILSTM : SH_NET_MVRNN;
    if (!CHECK_OK(ctx, sh_net_create(ctx, k, &r->d, H, E, &r->net))) return false;
    r->model = r->net.model;
    r->dim = sh_net_out_dim(&r->net);
  }
  if (!CHECK_OK(ctx, w == M_TREEFC ? sheaf_model_seed(r->model, 5) : sh_net_seed(&r->net, 5))) return false;
  set_biases(r->model, w == M_CHILDSUM ? b_cs : w == M_BILSTM ? b_bl : w == M_MVRNN ? b_mv : b_fc);

  sheaf_graph *g = NULL;
  sheaf_expr *ex = calloc(MAX_ROWS, sizeof *ex);
  bool ok = ex && CHECK_OK(ctx, sheaf_graph_create(r->model, NULL, &g));
  for (int k = 0; k < r->n_inst && ok; k++) {
    int32_t i = r->inst[k];
    r->rows[k] = w == M_BILSTM ? sh_dataset_size(&r->d, i) : 1;
    r->off[k + 1] = r->off[k] + r->rows[k];
    ok = CHECK(r->off[k + 1] <= MAX_ROWS);
    if (!ok) break;
    if (w == M_TREEFC) ex[r->off[k]] = sh_treefc_build(g, &r->fc, &r->d.tb, i);
    else ok = CHECK_OK(ctx, sh_net_build(&r->net, g, i, ex + r->off[k]));
  }
  ok = ok && CHECK_OK(ctx, sheaf_graph_flush(g));
  if (ok) ok = CHECK((r->want = calloc((size_t)(r->off[r->n_inst] * r->dim), sizeof(float))) != NULL);
  for (int32_t row = 0; ok && row < r->off[r->n_inst]; row++) {
    sheaf_value_view v;
    ok = CHECK_OK(ctx, sheaf_value(g, ex[row], &v)) && CHECK_EQ_INT(v.shape[v.rank - 1], r->dim);
    if (ok) memcpy(r->want + row * r->dim, v.data, (size_t)r->dim * sizeof(float));
  }
  sheaf_graph_free(g);
  free(ex);
  return ok;
}

static void ref_close(ref *r) {
  if (r->w == M_TREEFC) sheaf_model_free(r->fc_m);
  else sh_net_free(&r->net);
  free(r->want);
  sh_dataset_free(&r->d);
}

/* Runs `sf` on r's instances (two batches) with r's weights and compares. */
static void compare_source(sheaf_ctx *ctx, ref *r, const char *sf, const char *tmp_name, sh_input_kind want_kind) {
  const char *wpath = th_tmp_path(tmp_name);
  if (!CHECK_OK(ctx, sheaf_model_save(r->model, wpath))) return;
  /* the run numbers words as the CLI does: every word ranked by frequency */
  REQUIRE_OK(ctx, sh_dataset_finish(&r->d, INT32_MAX));
  char *src = NULL;
  size_t len = 0;
  sh_module m;
  sheaf_model *model = NULL;
  sh_lang_bind bind = {0};
  sh_interp *ip = NULL;
  sheaf_graph *g = NULL;
  REQUIRE_OK(ctx, sh_file_read(ctx, sf, &src, &len));
  if (!CHECK_OK(ctx, sh_lang_compile(&m, ctx, sf, src, len))) goto out;
  if (!CHECK_OK(ctx, sheaf_model_create(ctx, &model))) goto out;
  sh_lang_bind_opts bo = {.weights = wpath, .vocab = r->d.vocab, .word_rank = r->d.mv_row};
  if (!CHECK_OK(ctx, sh_lang_bind_model(&m, model, &bo, &bind))) goto out;
  if (!CHECK_OK(ctx, sh_interp_create(&m, &bind, &ip))) goto out;
  CHECK_EQ_INT(sh_check_main_input(&m)->kind, want_kind);
  if (!CHECK_OK(ctx, sheaf_graph_create(model, NULL, &g))) goto out;
  double worst = 0;
  int split = r->n_inst / 2;
  for (int first = 0; first < r->n_inst; first = first ? r->n_inst : split) {
    int last = first ? r->n_inst : split;
    sh_value res[MAX_INST];
    for (int k = first; k < last; k++) {
      int32_t i = r->inst[k];
      sh_value in;
      sheaf_status st;
      if (r->d.kind == SH_DATASET_SENTS) {
        int32_t n = r->d.sent_off[i + 1] - r->d.sent_off[i], ws[MAX_ROWS];
        for (int32_t j = 0; j < n && j < MAX_ROWS; j++) ws[j] = sh_word_id(r->d.ids, r->d.sent_words[r->d.sent_off[i] + j]);
        st = sh_interp_ints(ip, ws, n, &in);
      } else {
        st = sh_interp_tree(ip, &r->d.tb, r->d.tb.tree_root[i], r->d.ids, &in);
      }
      if (!CHECK_OK(ctx, st) || !CHECK_OK(ctx, sh_interp_main(ip, g, in, &res[k]))) goto out;
    }
    if (!CHECK_OK(ctx, sheaf_graph_flush(g))) goto out;
    for (int k = first; k < last; k++) {
      sheaf_expr ts[MAX_ROWS];
      size_t nt = sh_value_tensors(res[k], ts, MAX_ROWS);
      if (!CHECK_EQ_INT(nt, r->rows[k])) continue;
      for (size_t row = 0; row < nt; row++) {
        sheaf_value_view v;
        if (!CHECK_OK(ctx, sheaf_value(g, ts[row], &v)) || !CHECK_EQ_INT(v.shape[v.rank - 1], r->dim)) goto out;
        double e = sh_max_rel_err(v.data, r->want + (r->off[k] + (int64_t)row) * r->dim, 1, r->dim);
        if (!(e <= worst)) worst = e;
        if (!(e <= 1e-5)) fprintf(stderr, "%s: instance %d row %d: rel err %g\n", sf, (int)r->inst[k], (int)row, e);
      }
    }
    CHECK_OK(ctx, sheaf_graph_reset(g));
    sh_interp_reset(ip);
  }
  CHECK(worst <= 1e-5);
out:
  sheaf_graph_free(g);
  sh_interp_free(ip);
  sh_lang_bind_free(ctx, &bind);
  sheaf_model_free(model);
  if (src) {
    sh_module_free(&m);
    sh_free(ctx, src, len + 1);
  }
}

TEST(lang_models_childsum_matches_c_api) {
  sheaf_ctx *ctx = th_ctx();
  ref r;
  if (ref_open(ctx, M_CHILDSUM, &r)) compare_source(ctx, &r, "examples/childsum.sf", "cs.safetensors", SH_INPUT_DEP_TREE);
  ref_close(&r);
}

TEST(lang_models_bilstm_matches_c_api) {
  sheaf_ctx *ctx = th_ctx();
  ref r;
  if (ref_open(ctx, M_BILSTM, &r)) compare_source(ctx, &r, "examples/bilstm.sf", "bl.safetensors", SH_INPUT_TOKENS);
  ref_close(&r);
}

TEST(lang_models_mvrnn_matches_c_api) {
  sheaf_ctx *ctx = th_ctx();
  ref r;
  if (ref_open(ctx, M_MVRNN, &r)) {
    CHECK_EQ_INT(r.d.mv_vocab, 51); /* the capped table is in play */
    compare_source(ctx, &r, "examples/mvrnn.sf", "mv.safetensors", SH_INPUT_BINARY_TREE);
  }
  ref_close(&r);
}

/* Seeded without a weights file, examples/mvrnn.sf draws the C model's
 * weights exactly: `emb_mat ... = normal + identity_rows` is
 * sh_mvrnn_init_identity's identity plus noise. */
TEST(lang_models_mvrnn_seeded_weights_match_c_api) {
  sheaf_ctx *ctx = th_ctx();
  ref r;
  char *src = NULL;
  size_t len = 0;
  sh_module m;
  sheaf_model *model = NULL;
  sh_lang_bind bind = {0};
  if (!ref_open(ctx, M_MVRNN, &r)) goto out;
  REQUIRE_OK(ctx, sh_file_read(ctx, "examples/mvrnn.sf", &src, &len));
  if (!CHECK_OK(ctx, sh_lang_compile(&m, ctx, "examples/mvrnn.sf", src, len))) goto out;
  if (!CHECK_OK(ctx, sheaf_model_create(ctx, &model))) goto out;
  sh_lang_bind_opts bo = {.seed = 5, .vocab = r.d.vocab, .word_rank = r.d.mv_row, .n_overrides = 2,
                          .override_name = {"H", "Vm"}, .override_value = {8, r.d.mv_vocab}};
  if (!CHECK_OK(ctx, sh_lang_bind_model(&m, model, &bo, &bind))) goto out;
  CHECK_EQ_INT(m.n_params, 6);
  for (int p = 0; p < m.n_params; p++) {
    const char *name = sh_sym_name(&m.syms, m.params[p]->name);
    if (!strcmp(name, "bias")) continue; /* set by ref_open */
    sheaf_param cp;
    int ra, rb;
    const int64_t *sa, *sb;
    if (!CHECK_OK(ctx, sheaf_model_find(r.model, name, &cp))) continue;
    const float *a = sheaf_model_param_data(model, bind.params[p], &ra, &sa);
    const float *b = sheaf_model_param_data(r.model, cp, &rb, &sb);
    if (!CHECK(a && b) || !CHECK_EQ_INT(ra, rb) || !CHECK_EQ_INT(sa[0], sb[0]) ||
        (ra == 2 && !CHECK_EQ_INT(sa[1], sb[1])))
      continue;
    size_t n = (size_t)sa[0] * (size_t)(ra == 2 ? sa[1] : 1);
    if (!CHECK(memcmp(a, b, n * sizeof *a) == 0)) fprintf(stderr, "mvrnn.sf: %s differs\n", name);
  }
out:
  sh_lang_bind_free(ctx, &bind);
  sheaf_model_free(model);
  if (src) {
    sh_module_free(&m);
    sh_free(ctx, src, len + 1);
  }
  ref_close(&r);
}

TEST(lang_models_treefc_matches_c_api) {
  sheaf_ctx *ctx = th_ctx();
  ref r;
  if (ref_open(ctx, M_TREEFC, &r)) compare_source(ctx, &r, "examples/treefc.sf", "fc.safetensors", SH_INPUT_BINARY_TREE);
  ref_close(&r);
}

/* ------------------------------------------------------------------ CLI */

/* Max rel err (per line, as sh_max_rel_err) between two output files whose
 * lines start with `keys` integers that must agree; -1 on a mismatch of
 * line count or keys. */
static double compare_files(const char *a, const char *b, int keys, long *lines) {
  FILE *fa = fopen(a, "r"), *fb = fopen(b, "r");
  double worst = fa && fb ? 0 : -1;
  static char la[1 << 16], lb[1 << 16];
  *lines = 0;
  while (worst >= 0) {
    char *ra = fa ? fgets(la, sizeof la, fa) : NULL, *rb = fb ? fgets(lb, sizeof lb, fb) : NULL;
    if (!ra || !rb) {
      if (ra || rb) worst = -1;
      break;
    }
    ++*lines;
    char *pa = la, *pb = lb;
    for (int k = 0; k < keys; k++)
      if (strtol(pa, &pa, 10) != strtol(pb, &pb, 10)) worst = -1;
    double diff = 0, mag = 0;
    for (;;) {
      char *ea, *eb;
      double x = strtod(pa, &ea), y = strtod(pb, &eb);
      if (ea == pa || eb == pb) {
        if ((ea == pa) != (eb == pb)) worst = -1;
        break;
      }
      pa = ea, pb = eb;
      if (!(fabs(x - y) <= diff)) diff = fabs(x - y);
      if (fabs(x) > mag) mag = fabs(x);
    }
    double rel = diff == 0 ? 0 : diff / mag;
    if (worst >= 0 && !(rel <= worst)) worst = rel;
  }
  if (fa) fclose(fa);
  if (fb) fclose(fb);
  return worst;
}

TEST(lang_models_cli_matches_builtin_models) {
  if (!th_sheaf_bin()) return;
  static const char *const models[] = {"treelstm", "childsum", "bilstm", "mvrnn"};
  static char out[1 << 14];
  char cmd[2048];
  for (size_t k = 0; k < SH_ARRAY_LEN(models); k++) {
    char wname[64], cname[64], sname[64];
    snprintf(wname, sizeof wname, "cli_%s.safetensors", models[k]);
    snprintf(cname, sizeof cname, "cli_%s_c.txt", models[k]);
    snprintf(sname, sizeof sname, "cli_%s_sf.txt", models[k]);
    char w[512], c[512], s[512];
    snprintf(w, sizeof w, "%s", th_tmp_path(wname));
    snprintf(c, sizeof c, "%s", th_tmp_path(cname));
    snprintf(s, sizeof s, "%s", th_tmp_path(sname));
    snprintf(cmd, sizeof cmd, "%s run %s --data " EWT " --seed 4 --hidden 8 %s --save-weights %s --out %s",
             th_sheaf_bin(), models[k], strcmp(models[k], "mvrnn") ? "--embed 6" : "", w, c);
    if (!CHECK_EQ_INT(th_run(cmd, out, sizeof out), 0)) {
      fprintf(stderr, "%s\n%s", cmd, out);
      continue;
    }
    snprintf(cmd, sizeof cmd, "%s run examples/%s.sf --data " EWT " --weights %s --batch 50 --out %s",
             th_sheaf_bin(), models[k], w, s);
    if (!CHECK_EQ_INT(th_run(cmd, out, sizeof out), 0)) {
      fprintf(stderr, "%s\n%s", cmd, out);
      continue;
    }
    CHECK_RUN_QUIET(out); /* the summary only: no progress bar, no notes in a pipe */
    long lines;
    double e = compare_files(c, s, strcmp(models[k], "bilstm") ? 1 : 2, &lines);
    CHECK(e >= 0 && e <= 1e-5);
    CHECK(lines >= 2077);
    if (!(e >= 0 && e <= 1e-5)) fprintf(stderr, "%s: rel err %g over %ld lines\n", models[k], e, lines);
  }
}
