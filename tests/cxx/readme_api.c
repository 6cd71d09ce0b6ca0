/*
 * readme_api.c — the README's API fragments as one complete program,
 * written in the common subset of C and C++: tests/test_cxx.c compiles it
 * as C11 and as C++17 with -pedantic -Werror and runs it (a TreeNN over
 * two small trees on a graph and through a runner). Keep it in step with
 * README.md, "Using the library".
 */
#include <sheaf.h>
#include <stdio.h>
#include <string.h>

typedef struct tree {
  int leaf, word;
  const struct tree *left, *right;
} tree;

enum { V = 10, N = 2 };
static sheaf_param emb, W, b;
static const tree leaf0 = {1, 3, NULL, NULL}, leaf1 = {1, 7, NULL, NULL};
static const tree node0 = {0, 0, &leaf0, &leaf1};
static const tree trees[N] = {{0, 0, &leaf0, &leaf1}, {0, 0, &node0, &leaf1}};
static sheaf_expr root[N];
static float out[N][256];

static sheaf_expr encode(sheaf_graph *g, const tree *t) { /* one instance */
  if (t->leaf) return sheaf_lookup(g, emb, t->word);
  sheaf_expr kids[2] = {encode(g, t->left), encode(g, t->right)};
  return sheaf_tanh(g, sheaf_affine(g, W, sheaf_concat(g, 2, kids), b));
}

static sheaf_status build(sheaf_graph *g, int64_t i, int worker, void *u) { /* per instance */
  (void)worker, (void)u;
  root[i] = encode(g, &trees[i]);
  return sheaf_graph_status(g);
}

static sheaf_status read(sheaf_graph *g, int64_t i, int worker, void *u) { /* after the flush */
  (void)worker, (void)u;
  sheaf_value_view v;
  sheaf_status st = sheaf_value(g, root[i], &v);
  if (!st) memcpy(out[i], v.data, 256 * sizeof(float));
  return st;
}

int main(void) {
  sheaf_ctx *ctx;
  char err[256];
  if (sheaf_ctx_create(NULL, &ctx, err, sizeof err) != SHEAF_OK) {
    puts(err);
    return 1;
  }
  sheaf_model *m;
  int64_t emb_shape[2] = {V, 256}, W_shape[2] = {512, 256}, b_shape[1] = {256};
  sheaf_model_create(ctx, &m);
  sheaf_model_param(m, "emb", 2, emb_shape, SHEAF_INIT_NORMAL, &emb);
  sheaf_model_param(m, "W", 2, W_shape, SHEAF_INIT_GLOROT, &W);
  sheaf_model_param(m, "b", 1, b_shape, SHEAF_INIT_ZERO, &b);

  sheaf_graph *g;
  sheaf_graph_create(m, NULL, &g); /* policy "sheaf", all threads */
  for (int i = 0; i < N; i++) root[i] = encode(g, &trees[i]);
  sheaf_graph_flush(g); /* one GEMM per level, all trees */
  sheaf_value_view v;
  sheaf_status st = sheaf_value(g, root[0], &v); /* v.data, v.shape */
  float first = st == SHEAF_OK ? v.data[0] : 0.0f;
  sheaf_expr none_bias = sheaf_affine(g, W, sheaf_concat(g, 2, root), SHEAF_NO_PARAM);
  if (st == SHEAF_OK) st = sheaf_graph_status(g);
  (void)none_bias;

  sheaf_runner *r;
  if (st == SHEAF_OK) st = sheaf_runner_create(m, NULL, &r); /* 64 per batch, all threads */
  if (st == SHEAF_OK) {
    st = sheaf_runner_run(r, 0, N, build, read, NULL);
    sheaf_runner_free(r);
  }
  if (st != SHEAF_OK) fprintf(stderr, "%s\n", sheaf_ctx_last_error(ctx));
  int ok = st == SHEAF_OK && out[0][0] == first;
  printf("readme_api: %s\n", ok ? "ok" : "FAILED");
  sheaf_graph_free(g);
  sheaf_model_free(m);
  sheaf_ctx_free(ctx);
  return ok ? 0 : 1;
}
