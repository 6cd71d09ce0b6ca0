/*
 * test_train_packed.c — the packed forms of the weights across training
 * steps: sh_gemm_repack_b (in place, bitwise equal to a fresh pack, plain,
 * transposed and gate-interleaved, whole and ragged panels), the model's
 * W^T (sh_model_packed_t, shared by the graphs of data-parallel shards)
 * and sh_model_refresh_packed after each optimizer step: every form
 * current, in place, equal to a fresh pack of the new values, and a
 * backward after the steps bitwise equal to one on a fresh model holding
 * the same weights; on 1 and 2 threads, and through 2 shards.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/gemm.h"
#include "runtime/runtime.h"
#include "sheaf_train.h"
#include "tiny_bilstm.h"

/* B [k, n] (or B^T with SH_GEMM_PACK_TRANS) packed, then changed and
 * packed again in place: the same bytes as a fresh pack, the same buffer. */
static void tp_repack_case(sheaf_ctx *ctx, int64_t k, int64_t n, int flags) {
  uint64_t s = 0x9e3779b9u + (uint64_t)(k * 131 + n * 7 + flags);
  int64_t ldb = (flags & SH_GEMM_PACK_TRANS ? k : n) + 3; /* a padded leading dimension */
  int64_t rows = flags & SH_GEMM_PACK_TRANS ? n : k;
  float *b = th_frand_fill(&s, rows * ldb);
  sh_gemm_packed_b *pb = NULL, *fresh = NULL;
  REQUIRE(b);
  if (CHECK_OK(ctx, sh_gemm_pack_b(ctx, b, ldb, k, n, flags, &pb))) {
    float *data = pb->data;
    for (int64_t i = 0; i < rows * ldb; i++) b[i] = 2.0f * b[i] - 0.25f;
    CHECK(sh_gemm_repack_b(ctx, b, ldb, pb));
    CHECK(pb->data == data);
    if (CHECK_OK(ctx, sh_gemm_pack_b(ctx, b, ldb, k, n, flags, &fresh)) && CHECK_EQ_SIZE(pb->bytes, fresh->bytes))
      CHECK(memcmp(pb->data, fresh->data, fresh->bytes) == 0);
    CHECK(!sh_gemm_repack_b(ctx, b, (flags & SH_GEMM_PACK_TRANS ? k : n) - 1, pb)); /* ldb too small */
  }
  sh_gemm_packed_b_free(ctx, pb);
  sh_gemm_packed_b_free(ctx, fresh);
  free(b);
}

TEST(gemm_repack_in_place_equals_a_fresh_pack) {
  sheaf_ctx *ctx = th_ctx();
  static const int64_t shapes[][2] = {{7, 5}, {64, 96}, {37, 70}, {256, 640}, {640, 256}, {1, 33}, {65, 64}};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
    tp_repack_case(ctx, shapes[i][0], shapes[i][1], 0);
    tp_repack_case(ctx, shapes[i][0], shapes[i][1], SH_GEMM_PACK_TRANS);
    if (shapes[i][1] % 4 == 0) tp_repack_case(ctx, shapes[i][0], shapes[i][1], SH_GEMM_PACK_GATES);
  }
  CHECK(!sh_gemm_repack_b(ctx, NULL, 8, NULL));
}

enum { TV = 41, TE = 8, TH = 16, TC = 5, TN = 12, TMAXN = 8 };

typedef struct tp_data {
  int len[TN], word[TN][TMAXN], tag[TN][TMAXN];
} tp_data;

static void tp_data_make(tp_data *d) {
  uint64_t s = 0x7a3b11u;
  for (int i = 0; i < TN; i++) {
    d->len[i] = 2 + (int)((th_frand(&s) + 1.0f) * 0.5f * (TMAXN - 2)) % (TMAXN - 1);
    for (int t = 0; t < d->len[i]; t++) {
      d->word[i][t] = (int)((th_frand(&s) + 1.0f) * 0.5f * TV) % TV;
      d->tag[i][t] = (int)((th_frand(&s) + 1.0f) * 0.5f * TC) % TC;
    }
  }
}

typedef struct tp_run {
  const tb_model *md;
  const tp_data *d;
  sheaf_graph *g[2];
  sheaf_expr loss[2][TN * TMAXN];
  int k[2];
} tp_run;

/* Shard s of n: its sentences built and differentiated (each loss 1/64). */
static sheaf_status tp_shard(int s, int n, void *user) {
  tp_run *r = user;
  r->k[s] = 0;
  sheaf_status st = sheaf_graph_reset(r->g[s]);
  for (int i = TN * s / n; i < TN * (s + 1) / n && !st; i++)
    st = tb_sentence(r->g[s], r->md, r->d->len[i], r->d->word[i], r->d->tag[i], r->loss[s], &r->k[s]);
  sheaf_backward_opts bo = {1.0f / 64.0f, 0, NULL, NULL};
  return st ? st : sheaf_backward(r->g[s], r->k[s], r->loss[s], &bo);
}

/* One backward over the batch: `shards` graphs (0: one). */
static bool tp_backward(sheaf_ctx *ctx, tp_run *r, int shards) {
  if (!CHECK_OK(ctx, sheaf_model_zero_grad(r->md->m))) return false;
  if (!shards) return CHECK_OK(ctx, tp_shard(0, 1, r));
  return CHECK_OK(ctx, sheaf_run_shards(ctx, shards, tp_shard, r)) && CHECK_OK(ctx, sheaf_model_reduce_grads(r->md->m));
}

/* Every packed form of m's weights: current and equal to a fresh pack of
 * the values; data[3 * i + kind]: its buffer, which must not move once
 * set. Returns the forms seen. */
static int tp_check_forms(sheaf_ctx *ctx, sheaf_model *m, float **data) {
  int seen = 0;
  for (uint32_t i = 0; i < m->n_params; i++) {
    const sh_param *p = &m->params[i];
    const sh_gemm_packed_b *form[3] = {p->packed, p->gates, p->packed_t};
    const uint64_t ver[3] = {p->packed_ver, p->gates_ver, p->packed_t_ver};
    for (int kind = 0; kind < 3; kind++) {
      if (!form[kind]) continue;
      seen++;
      CHECK(ver[kind] == p->version);
      bool t = kind == 2;
      sh_gemm_packed_b *fresh = NULL;
      if (CHECK_OK(ctx, sh_gemm_pack_b(ctx, p->data, p->shape[1], t ? p->shape[1] : p->shape[0],
                                       t ? p->shape[0] : p->shape[1], form[kind]->flags, &fresh)) &&
          CHECK_EQ_SIZE(form[kind]->bytes, fresh->bytes))
        CHECK(memcmp(form[kind]->data, fresh->data, fresh->bytes) == 0);
      sh_gemm_packed_b_free(ctx, fresh);
      float **d = &data[3 * i + (uint32_t)kind];
      if (*d) CHECK(*d == form[kind]->data); /* packed again in place */
      *d = form[kind]->data;
    }
  }
  return seen;
}

/* Three Adam steps on `threads` (through `shards` shards, 0: one graph),
 * each followed by the forms' check; then one more backward, whose
 * gradients must equal bitwise those of a fresh model set to the same
 * weights (its forms packed on first use). */
static void tp_steps(int threads, int shards) {
  sheaf_ctx_options co = {0};
  co.threads = threads;
  sheaf_ctx *ctx = NULL;
  REQUIRE(sheaf_ctx_create(&co, &ctx, NULL, 0) == SHEAF_OK);
  static tp_data d;
  tp_data_make(&d);
  tb_model md = {0}, md2 = {0};
  sheaf_optimizer *opt = NULL;
  float *data[3 * 16] = {0}, *g1 = NULL, *g2 = NULL;
  static tp_run r, r2;
  memset(&r, 0, sizeof r);
  memset(&r2, 0, sizeof r2);
  sheaf_optimizer_opts oo = {SHEAF_OPTIM_ADAM, 1e-2f, 0, 0, 0, 0, 0, 0};
  if (!tb_create(ctx, &md, TV, TE, TH, TC, 5) || !tb_create(ctx, &md2, TV, TE, TH, TC, 9) ||
      !CHECK_OK(ctx, sheaf_optimizer_create(md.m, &oo, &opt)))
    goto done;
  if (!CHECK(md.m->n_params <= 16)) goto done;
  r.md = &md, r.d = &d, r2.md = &md2, r2.d = &d;
  for (int s = 0; s < (shards ? shards : 1); s++) {
    sheaf_graph_opts go = {SHEAF_POLICY_SHEAF, shards ? 1 : 0, NULL};
    if (!CHECK_OK(ctx, sheaf_graph_create(md.m, &go, &r.g[s])) || !CHECK_OK(ctx, sheaf_graph_grad_shard(r.g[s], s)))
      goto done;
  }
  if (!CHECK_OK(ctx, sheaf_graph_create(md2.m, NULL, &r2.g[0]))) goto done;
  for (int step = 0; step < 3; step++) {
    if (!tp_backward(ctx, &r, shards) || !CHECK_OK(ctx, sheaf_optimizer_step(opt, NULL))) goto done;
    CHECK(tp_check_forms(ctx, md.m, data) >= 4); /* W_fwd, W_bwd (gates, W^T), W_tag (plain, W^T) at least */
  }
  for (int i = 0; i < 7; i++) { /* the fresh model: the same weights */
    size_t n = tb_numel(md.m, md.p[i]);
    const float *v = sheaf_model_param_values(md.m, md.p[i], NULL, NULL);
    if (!CHECK(v) || !CHECK_OK(ctx, sheaf_model_param_set(md2.m, md2.p[i], v, (int64_t)n))) goto done;
  }
  size_t n1 = 0, n2 = 0;
  if (!tp_backward(ctx, &r, shards) || !tp_backward(ctx, &r2, 0)) goto done;
  g1 = tb_collect(&md, TB_GRAD_BUFFERS, &n1);
  g2 = tb_collect(&md2, TB_GRAD_BUFFERS, &n2);
  if (CHECK(g1 && g2) && CHECK_EQ_SIZE(n1, n2) && !shards) /* shards: other sums (checked in test_train_shards) */
    CHECK(memcmp(g1, g2, n1 * sizeof *g1) == 0);
  if (g1 && g2 && shards) { /* the shards' gradients against one graph's: within rounding */
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n1; i++) {
      double a = g1[i], b = g2[i];
      scale = scale > (b < 0 ? -b : b) ? scale : (b < 0 ? -b : b);
      worst = worst > (a - b < 0 ? b - a : a - b) ? worst : (a - b < 0 ? b - a : a - b);
    }
    CHECK(scale > 0 && worst <= 1e-5 * scale);
  }
done:
  free(g1);
  free(g2);
  sheaf_optimizer_free(opt);
  for (int s = 0; s < 2; s++) sheaf_graph_free(r.g[s]);
  sheaf_graph_free(r2.g[0]);
  sheaf_model_free(md.m);
  sheaf_model_free(md2.m);
  sheaf_ctx_free(ctx);
}

TEST(optimizer_step_repacks_weights_in_place_one_thread) { tp_steps(1, 0); }
TEST(optimizer_step_repacks_weights_in_place_two_threads) { tp_steps(2, 0); }
TEST(optimizer_step_repacks_weights_in_place_two_shards) { tp_steps(2, 2); }
