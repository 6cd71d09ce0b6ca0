/*
 * test_linear_eager.c — eager children's products in the linearized mode
 * (src/compile/linear_eager.c): treelstm, treegru and treefc (whose leaves
 * are aliased table rows) with SHEAF_LINEAR_EAGER=1 (every run), 0 (none)
 * and unset (auto) against the dynamic runtime, every output within 1e-5
 * (relative per row): hand-built trees (a leaf alone, left- and
 * right-branching chains, 40 deep, a balanced tree of 16 leaves, a mixed
 * one) one by one and in one batch, and the bundled EWT trees in batches of
 * 1, 7 and 64 on 1 and 2 threads; whether each run took the eager form as
 * the setting says, and that a model without such a product has none.
 */
#include <math.h>
#include <stdlib.h>

#include "compile/linear.h"
#include "harness.h"
#include "io/dataset.h"
#include "models/models.h"
#include "test_linear_util.h"

#define EWT "data/ud_english_ewt/en_ewt-ud-test.conllu"
#define N_TREES 135

static const char *const LSTM[] = {"H=16", "E=12", "C=5", NULL};
static const char *const GRU[] = {"H=16", "E=12", "C=5", NULL};
static const char *const FC[] = {"H=16", NULL};

/* The model linearized with SHEAF_LINEAR_EAGER = mode ("1", "0" or NULL:
 * unset) on trees 0 .. n-1 of tb in batches of each of batches[] (0 ends)
 * against the dynamic runtime, on a context of `threads`. */
static void compare(int threads, const char *path, const char *const *sizes, const sh_treebank *tb, sh_word_ids ids,
                    int64_t vocab, int n, const int *batches, const char *mode, const char *what) {
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
  if (mode) setenv("SHEAF_LINEAR_EAGER", mode, 1);
  else unsetenv("SHEAF_LINEAR_EAGER");
  sheaf_status cst = sh_lin_create(&tm.m, tm.model, &tm.bind, &L, why, sizeof why);
  unsetenv("SHEAF_LINEAR_EAGER");
  if (!CHECK_OK(ctx, cst)) {
    fprintf(stderr, "%s: %s\n", path, why);
    goto out;
  }
  /* each model's node product is cat(two children's h) @ W: two parts (none when turned off) */
  if (!CHECK_EQ_INT(sh_lin_eager_parts(L), mode && mode[0] == '0' ? 0 : 2)) goto out;
  /* their kernels are the model's: counted, and printed by --emit-kernels (sh_lin_kernel_source) */
  bool on = !(mode && mode[0] == '0');
  CHECK_EQ_INT(sh_lin_eager_kernels(L), on ? 3 : 0); /* the node's eager form, a product per part */
  CHECK_EQ_INT(strstr(sh_lin_kernel_source(L), "_eager(") != NULL, on);
  CHECK_EQ_INT(strstr(sh_lin_kernel_source(L), "# a child's part of a product") != NULL, on);
  int64_t width = 0;
  for (int c = 0; c < sh_lin_n_outputs(L); c++) {
    int rank;
    int64_t dims[2];
    sh_lin_output_shape(L, c, &rank, dims);
    width += rank == 2 ? dims[0] * dims[1] : dims[0];
  }
  want = calloc((size_t)n * (size_t)width, sizeof *want), got = calloc((size_t)n * (size_t)width, sizeof *got);
  if (!CHECK(want && got) || !tl_dynamic_trees(ctx, &tm, tb, ids, n, want, width)) goto out;
  for (int bi = 0; batches[bi]; bi++) {
    int b = batches[bi];
    for (int64_t i = 0; i < (int64_t)n * width; i++) got[i] = NAN;
    for (int first = 0; first < n; first += b) {
      int cnt = first + b <= n ? b : n - first;
      if (!CHECK_OK(ctx, sh_lin_run(L, tb, first, cnt, ids))) goto out;
      /* 1: every run with a node; 0: none; unset: a tree alone takes it (its
       * levels have 1-3 rows), 64 EWT trees do not (about 90 rows a level);
       * between, as the rows a level say */
      bool has_node = false;
      for (int t = first; t < first + cnt; t++) has_node |= tb->tree_size[t] > 1;
      int want_eager = mode ? mode[0] == '1' && has_node : b == 1 ? has_node : cnt == 64 ? 0 : -1;
      if (want_eager >= 0 && !CHECK_EQ_INT(sh_lin_eager_ran(L), want_eager))
        fprintf(stderr, "%s %s, mode %s, batch %d from %d: eager ran %d\n", path, what, mode ? mode : "auto", b, first,
                sh_lin_eager_ran(L));
      for (int t = 0; t < cnt; t++) {
        int64_t off = 0;
        for (int c = 0; c < sh_lin_n_outputs(L); c++) {
          int rank;
          int64_t dims[2];
          sh_lin_output_shape(L, c, &rank, dims);
          int64_t w = rank == 2 ? dims[0] * dims[1] : dims[0];
          memcpy(got + (size_t)(first + t) * (size_t)width + off, sh_lin_output(L, t, c), (size_t)w * sizeof(float));
          off += w;
        }
      }
    }
    double worst = sh_max_rel_err(got, want, n, width);
    if (!CHECK(worst <= 1e-5))
      fprintf(stderr, "%s %s, mode %s, %d thread(s), batch %d: max rel err %g\n", path, what, mode ? mode : "auto",
              threads, b, worst);
  }
out:
  free(want), free(got);
  sh_lin_free(L);
  tl_close(ctx, &tm);
  sheaf_ctx_free(ctx);
}

/* A leaf of word w, or a node over l and r; returns its id. */
static int32_t leaf(sheaf_ctx *ctx, sh_treebank *tb, int32_t w) {
  int32_t id = -1;
  CHECK_OK(ctx, sh_tb_add_node(tb, w % 10, 0, NULL, 0, &id));
  return id;
}
static int32_t node(sheaf_ctx *ctx, sh_treebank *tb, int32_t l, int32_t r) {
  int32_t id = -1, kids[2] = {l, r};
  CHECK_OK(ctx, sh_tb_add_node(tb, -1, 0, kids, 2, &id));
  return id;
}
/* A balanced tree of 2^d leaves from word w. */
static int32_t balanced(sheaf_ctx *ctx, sh_treebank *tb, int d, int32_t w) {
  if (!d) return leaf(ctx, tb, w);
  int32_t l = balanced(ctx, tb, d - 1, w);
  return node(ctx, tb, l, balanced(ctx, tb, d - 1, w + (1 << (d - 1))));
}

TEST(linear_eager_hand_built) {
  if (!th_have_jit_cc("linear_eager_hand_built")) return;
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
  /* 0: a leaf alone; 1: a left-branching chain (each node's left child the
   * chain, its right a leaf), 40 deep; 2: right-branching; 3: balanced, 16
   * leaves; 4: a chain whose side alternates, with a balanced subtree of 4
   * leaves at its foot and as one side child; 5: a node of two leaves */
  REQUIRE_OK(ctx, sh_tb_begin_tree(&tb));
  leaf(ctx, &tb, 3);
  REQUIRE_OK(ctx, sh_tb_end_tree(&tb));
  for (int side = 0; side < 2; side++) {
    REQUIRE_OK(ctx, sh_tb_begin_tree(&tb));
    int32_t top = leaf(ctx, &tb, 1);
    for (int d = 1; d <= 40; d++) {
      int32_t x = leaf(ctx, &tb, d);
      top = side ? node(ctx, &tb, x, top) : node(ctx, &tb, top, x);
    }
    REQUIRE_OK(ctx, sh_tb_end_tree(&tb));
  }
  REQUIRE_OK(ctx, sh_tb_begin_tree(&tb));
  balanced(ctx, &tb, 4, 0);
  REQUIRE_OK(ctx, sh_tb_end_tree(&tb));
  REQUIRE_OK(ctx, sh_tb_begin_tree(&tb));
  int32_t top = balanced(ctx, &tb, 2, 5);
  for (int d = 1; d <= 9; d++) {
    int32_t x = d == 5 ? balanced(ctx, &tb, 2, d) : leaf(ctx, &tb, d);
    top = d % 2 ? node(ctx, &tb, top, x) : node(ctx, &tb, x, top);
  }
  REQUIRE_OK(ctx, sh_tb_end_tree(&tb));
  REQUIRE_OK(ctx, sh_tb_begin_tree(&tb));
  int32_t a = leaf(ctx, &tb, 2);
  node(ctx, &tb, a, leaf(ctx, &tb, 8));
  REQUIRE_OK(ctx, sh_tb_end_tree(&tb));
  sh_word_ids ids = sh_word_ids_of_rows(100);
  static const int batches[] = {1, 6, 0};
  static const char *const modes[] = {"1", "0", NULL};
  for (int m = 0; m < 3; m++) {
    compare(1, "examples/treelstm.sf", LSTM, &tb, ids, 100, 6, batches, modes[m], "hand-built");
    compare(1, "examples/treegru.sf", GRU, &tb, ids, 100, 6, batches, modes[m], "hand-built");
    compare(1, "examples/treefc.sf", FC, &tb, ids, 100, 6, batches, modes[m], "hand-built");
  }
  compare(2, "examples/treelstm.sf", LSTM, &tb, ids, 100, 6, batches, "1", "hand-built");
  sh_tb_free(&tb);
}

TEST(linear_eager_ewt) {
  if (!th_have_jit_cc("linear_eager_ewt")) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  sheaf_ctx *ctx = th_ctx();
  sh_dataset d;
  REQUIRE_OK(ctx, sh_dataset_load(ctx, EWT, SH_DATASET_BINARY, &d));
  int n = N_TREES < sh_dataset_count(&d) ? N_TREES : sh_dataset_count(&d);
  static const int batches[] = {1, 7, 64, 0};
  for (int threads = 1; threads <= 2; threads++) {
    compare(threads, "examples/treelstm.sf", LSTM, &d.tb, d.ids, d.vocab, n, batches, "1", "EWT");
    compare(threads, "examples/treefc.sf", FC, &d.tb, d.ids, d.vocab, n, batches, "1", "EWT");
  }
  compare(1, "examples/treelstm.sf", LSTM, &d.tb, d.ids, d.vocab, n, batches, NULL, "EWT");
  sh_dataset_free(&d);
}

/* A model whose products read no cat of children (main's h @ W_out, a
 * leaf's emb[w] @ W): no eager part. mvrnn: its children's matrices are
 * products of per-row matrices, not a cat of vectors. */
TEST(linear_eager_none) {
  if (!th_have_jit_cc("linear_eager_none")) return;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  sheaf_ctx *ctx = th_ctx();
  tl_model tm;
  if (!tl_open(ctx, "examples/mvrnn.sf", (const char *[]){"H=8", "Vm=50", NULL}, NULL, &tm)) return;
  char why[512] = "";
  sh_lin *L = NULL;
  setenv("SHEAF_LINEAR_EAGER", "1", 1);
  sheaf_status st = sh_lin_create(&tm.m, tm.model, &tm.bind, &L, why, sizeof why);
  unsetenv("SHEAF_LINEAR_EAGER");
  if (CHECK_OK(ctx, st)) CHECK_EQ_INT(sh_lin_eager_parts(L), 0);
  sh_lin_free(L);
  tl_close(ctx, &tm);
}
