/*
 * test_lang_deep.c — inputs as deep as the data limit through the
 * interpreter: the conversion of a tree to a value is iterative, a model's
 * recursion runs on the big stacks of base/stack.h and matches the C model
 * (itself one pass over the nodes), and a thread whose stack is too small
 * gets an error naming the call in the source, never a crash.
 */
#include <pthread.h>
#include <stdlib.h>

#include "base/file.h"
#include "base/stack.h"
#include "harness.h"
#include "io/dataset.h"
#include "lang/interp.h"
#include "models/models.h"
#include "models/treelstm.h"

/* A binary tree of the given depth in PTB form: each node a leaf on the
 * left and the rest of the tree on the right. */
static const char *deep_ptb(int depth) {
  size_t cap = (size_t)depth * 16 + 64, n = 0;
  char *s = malloc(cap);
  if (!s) return NULL;
  for (int i = 0; i < depth - 1; i++) n += (size_t)snprintf(s + n, cap - n, "(1 (2 w%d) ", i % 7);
  n += (size_t)snprintf(s + n, cap - n, "(2 end)");
  for (int i = 0; i < depth - 1; i++) s[n++] = ')';
  s[n++] = '\n';
  const char *p = th_write_tmp("deep.ptb", s, n);
  free(s);
  return p;
}

typedef struct deep_run {
  sheaf_ctx *ctx;
  const sh_dataset *d;
  const char *weights;
  float out[SH_TREELSTM_CLASSES];
  sheaf_status st;
  char err[512];
} deep_run;

/* examples/treelstm.sf on tree 0 of r->d, on the calling thread. */
static void *run_sf(void *arg) {
  deep_run *r = arg;
  sheaf_ctx *ctx = r->ctx;
  sh_module m;
  char *src = NULL;
  size_t len = 0;
  sheaf_model *model = NULL;
  sh_interp *ip = NULL;
  sheaf_graph *g = NULL;
  sh_lang_bind bind = {0};
  r->st = sh_file_read(ctx, "examples/treelstm.sf", &src, &len);
  if (!r->st) r->st = sh_lang_compile(&m, ctx, "examples/treelstm.sf", src, len);
  if (r->st) goto out_src;
  r->st = sheaf_model_create(ctx, &model);
  sh_lang_bind_opts bo = {.weights = r->weights, .vocab = r->d->vocab};
  if (!r->st) r->st = sh_lang_bind_model(&m, model, &bo, &bind);
  if (!r->st) r->st = sh_interp_create(&m, &bind, &ip);
  if (!r->st) r->st = sheaf_graph_create(model, NULL, &g);
  sh_value in, res;
  if (!r->st) r->st = sh_interp_tree(ip, &r->d->tb, r->d->tb.tree_root[0], r->d->ids, &in);
  if (!r->st) r->st = sh_interp_main(ip, g, in, &res);
  if (!r->st) r->st = sheaf_graph_flush(g);
  sheaf_value_view v;
  if (!r->st) r->st = sheaf_value(g, res.t, &v);
  if (!r->st) memcpy(r->out, v.data, sizeof r->out);
  snprintf(r->err, sizeof r->err, "%s", sheaf_ctx_last_error(ctx));
  sh_interp_free(ip);
  sheaf_graph_free(g);
  sh_lang_bind_free(ctx, &bind);
  sheaf_model_free(model);
  sh_module_free(&m);
out_src:
  if (src) sh_free(ctx, src, len + 1);
  return NULL;
}

TEST(lang_deep_tree_on_big_stack_matches_c_api) {
  sheaf_ctx *ctx = th_ctx();
  const int depth = 9000; /* under the data limit of 10,000 levels */
  const char *path = deep_ptb(depth);
  REQUIRE(path);
  sh_dataset d;
  REQUIRE_OK(ctx, sh_dataset_load(ctx, path, SH_DATASET_BINARY, &d));
  sh_net net;
  if (!CHECK_OK(ctx, sh_net_create(ctx, SH_NET_TREELSTM, &d, 8, 8, &net))) {
    sh_dataset_free(&d);
    return;
  }
  CHECK_OK(ctx, sh_net_seed(&net, 5));
  const char *wpath = th_tmp_path("deep.safetensors");
  CHECK_OK(ctx, sheaf_model_save(net.model, wpath));

  sheaf_graph *g = NULL;
  float want[SH_TREELSTM_CLASSES] = {0};
  CHECK_OK(ctx, sheaf_graph_create(net.model, NULL, &g));
  sheaf_expr o = sh_treelstm_build(g, &net.tl, &d.tb, 0, NULL);
  CHECK_OK(ctx, sheaf_graph_flush(g));
  sheaf_value_view v;
  if (CHECK_OK(ctx, sheaf_value(g, o, &v))) memcpy(want, v.data, sizeof want);
  sheaf_graph_free(g);

  /* on a big stack: runs, and equals the C model */
  deep_run r = {.ctx = ctx, .d = &d, .weights = wpath};
  pthread_t t;
  sh_stack st;
  REQUIRE_EQ_INT(sh_thread_start(&t, &st, SH_BIG_STACK, run_sf, &r), 0);
  pthread_join(t, NULL);
  sh_stack_free(&st);
  if (CHECK_OK(ctx, r.st))
    CHECK(sh_max_rel_err(r.out, want, 1, SH_TREELSTM_CLASSES) <= 1e-5);
  else
    fprintf(stderr, "  %s\n", r.err);

  /* on a 2 MiB stack: an error at the recursive call, not a crash */
  deep_run small = {.ctx = ctx, .d = &d, .weights = wpath};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, (size_t)2 << 20);
  REQUIRE_EQ_INT(pthread_create(&t, &attr, run_sf, &small), 0);
  pthread_join(t, NULL);
  pthread_attr_destroy(&attr);
  CHECK_EQ_INT(small.st, SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(small.err, "examples/treelstm.sf:");
  CHECK_CONTAINS(small.err, "leave too little of this thread's stack for 'tree'");
  sh_net_free(&net);
  sh_dataset_free(&d);
}

/* Room on the stack shrinks as frames are pushed, and a big stack has
 * about the room it was given. */
static void *room_of_big(void *arg) {
  *(size_t *)arg = sh_stack_room();
  return NULL;
}

TEST(lang_deep_stack_room) {
  size_t room = 0;
  pthread_t t;
  sh_stack st;
  REQUIRE_EQ_INT(sh_thread_start(&t, &st, SH_BIG_STACK, room_of_big, &room), 0);
  pthread_join(t, NULL);
  CHECK(st.base != NULL);
  sh_stack_free(&st);
  CHECK(room > SH_BIG_STACK - ((size_t)1 << 20) && room <= SH_BIG_STACK);
}
