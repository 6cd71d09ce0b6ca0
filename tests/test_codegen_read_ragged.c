/*
 * test_codegen_read_ragged.c — cache_read of a ragged input
 * (sh_sched_cache_read_ragged, src/codegen/sched_read_ragged.c) and the
 * scoped temporaries it copies into (sh_lir_buffer_scoped): the primitive
 * on the lowered multi-head attention (k per (sequence, head), v per
 * sequence inside a parallel loop, q per query row), its IR, the
 * interpreter's results before and after (equal: a copy changes no
 * arithmetic), its emitted C run on the pool, its refusals leaving the
 * kernel unchanged; and the default schedule's use of it (q, k, v packed
 * per (sequence, head)) through sheaf_kernel_run, against a double
 * reference, at lengths 0, 1, below, at and above the tiles (3 query rows
 * x 4 keys, 4 vectors of d) and the WikiText-2 test set's first lengths.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>

#include "codegen/kernel_api.h"
#include "codegen/lir_emit.h"
#include "codegen/lir_int.h"
#include "codegen/lir_sched.h"
#include "codegen/lower.h"
#include "attn_ref.h"
#include "harness.h"
#include "lang/kernel.h"
#include "lang/parser.h"
#include "lir_cc.h"

static const char MHA[] =
    "kernel mha(L: i32[B], q: f32[B, L(b), H, D], k: f32[B, L(b), H, D], v: f32[B, L(b), H, D])\n"
    "    -> f32[B, L(b), H, D] {\n"
    "  s(b, h, i, j) +=! q(b, i, h, d) * k(b, j, h, d) / sqrt(D)\n"
    "  m(b, h, i) max=! s(b, h, i, j)\n  e(b, h, i, j) = exp(s(b, h, i, j) - m(b, h, i))\n"
    "  z(b, h, i) +=! e(b, h, i, j)\n  o(b, h, i, d) +=! e(b, h, i, j) * v(b, j, h, d)\n"
    "  out(b, i, h, d) = o(b, h, i, d) / z(b, h, i)\n}\n";

/* 0, 1, below / at / above the score tile (3 x 4) and 8, 12, 32 */
static const int32_t EDGE[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 11, 12, 13, 31, 32, 33};

static char *text(sheaf_ctx *ctx, const sh_lir_kernel *k) {
  sh_buf b;
  sh_buf_init(&b, ctx);
  sh_lir_print(k, &b);
  char *t = strdup(sh_buf_cstr(&b));
  sh_buf_free(&b);
  return t;
}

/* The first WikiText-2 test lengths (n of them); false when unreadable. */
static bool wiki_lengths(int32_t *L, int n) {
  FILE *f = fopen("data/wikitext2_lengths/wiki.test.lengths", "r");
  int got = 0;
  long v;
  while (f && got < n && fscanf(f, "%ld", &v) == 1) L[got++] = (int32_t)v;
  if (f) fclose(f);
  return got == n;
}

/* The lowered (unscheduled) kernel and what its arguments need. */
typedef struct lowered {
  sh_module m;
  const sh_kernel *kern;
  sh_lower_info info;
} lowered;

static sh_lir_kernel *lower(sheaf_ctx *ctx, lowered *lw, const char *name) {
  memset(lw, 0, sizeof *lw);
  if (!CHECK_OK(ctx, sh_kernel_source_compile(&lw->m, ctx, "mha.sf", MHA, strlen(MHA)))) return NULL;
  const sh_kernel *const *ks;
  if (sh_module_kernels(&lw->m, &ks) != 1) return NULL;
  lw->kern = ks[0];
  sh_lir_kernel *k = NULL;
  if (!CHECK_OK(ctx, sh_lower_kernel(ctx, lw->kern, name, &k, &lw->info))) return NULL;
  return k;
}

static void lowered_free(sheaf_ctx *ctx, lowered *lw) {
  sh_lower_info_free(ctx, &lw->info);
  sh_module_free(&lw->m);
}

/* One problem: lengths, H heads of D, inputs, and the IR arguments. */
typedef struct problem {
  int nb;
  int64_t sizes[3], n; /* B, H, D (the kernel's symbols by name); T·H·D */
  float *q, *k, *v, *out, *want;
  sh_lir_arg args[32];
  void *extra[32];
  int n_args, n_extra;
} problem;

static bool problem_make(sheaf_ctx *ctx, const lowered *lw, const sh_lir_kernel *ir, const int32_t *lens, int nb,
                         int64_t H, int64_t D, uint64_t seed, problem *p) {
  memset(p, 0, sizeof *p);
  p->nb = nb;
  int64_t T = 0;
  for (int b = 0; b < nb; b++) T += lens[b];
  p->n = T * H * D;
  for (int i = 0; i < ir->n_syms; i++)
    p->sizes[i] = !strcmp(ir->syms[i], "B") ? nb : !strcmp(ir->syms[i], "H") ? H : D;
  int32_t *L = malloc(sizeof(int32_t) * (size_t)(nb + 1));
  memcpy(L, lens, sizeof(int32_t) * (size_t)nb);
  p->q = th_frand_fill(&seed, p->n), p->k = th_frand_fill(&seed, p->n), p->v = th_frand_fill(&seed, p->n);
  p->out = calloc((size_t)p->n + 1, sizeof(float)), p->want = calloc((size_t)p->n + 1, sizeof(float));
  ar_mha(lens, nb, H, D, p->q, p->k, p->v, p->want);
  p->extra[p->n_extra++] = L;
  void *data[] = {L, p->q, p->k, p->v, p->out};
  for (int i = 0; i < 5; i++) p->args[p->n_args++].data = data[i];
  const void *in_data[] = {L, p->q, p->k, p->v};
  bool ok = true;
  for (int s = 0; ok && s < lw->info.n_scratch; s++) {
    size_t n = 0;
    ok = CHECK_OK(ctx, sh_lower_numel(ctx, lw->kern, lw->info.scratch[s], p->sizes, in_data, &n));
    p->args[p->n_args++].data = p->extra[p->n_extra++] = calloc(n + 1, sizeof(float));
  }
  for (int r = 0; ok && r < lw->info.n_ragged; r++) {
    int32_t *off = calloc((size_t)nb + 1, sizeof(int32_t));
    ok = CHECK_OK(ctx, sh_lower_offsets(ctx, lw->kern, lw->info.ragged[r], p->sizes, in_data, off));
    p->args[p->n_args++].data = p->extra[p->n_extra++] = off;
  }
  return ok && CHECK_EQ_INT(p->n_args, lw->info.n_args);
}

static void problem_free(problem *p) {
  for (int i = 0; i < p->n_extra; i++) free(p->extra[i]);
  free(p->q), free(p->k), free(p->v), free(p->out), free(p->want);
}

/* The kernel on the interpreter against the reference; out kept in *got. */
static bool interp_ok(sheaf_ctx *ctx, const lowered *lw, sh_lir_kernel *ir, const int32_t *lens, int nb, int64_t H,
                      int64_t D, float **got, const char *what) {
  problem p;
  bool ok = problem_make(ctx, lw, ir, lens, nb, H, D, (uint64_t)(nb * 131 + H * 7 + D), &p) &&
            CHECK_OK(ctx, sh_lir_run(ir, p.sizes, p.args)) && ar_close(p.out, p.want, p.n, what);
  if (ok && got) {
    *got = malloc(sizeof(float) * (size_t)(p.n + 1));
    memcpy(*got, p.out, sizeof(float) * (size_t)p.n);
  }
  problem_free(&p);
  return ok;
}

/* The lowered kernel: k packed per (sequence, head) at the scores' h loop,
 * v per sequence at the products' b loop (over the pool: each task its
 * own copy, sized by its sequence's length), q per query row at the
 * scores' i loop (its d only: a copy of D floats). */
static sh_lir_kernel *packed(sheaf_ctx *ctx, lowered *lw, const char *name, sh_sched_read *rk) {
  sh_lir_kernel *k = lower(ctx, lw, name);
  if (!k) return NULL;
  sh_lir_buf K = sh_lir_find_buffer(k, "k"), V = sh_lir_find_buffer(k, "v"), Q = sh_lir_find_buffer(k, "q");
  sh_lir_stmt sv = sh_lir_find_store(k, sh_lir_find_buffer(k, "o"), 0);
  sh_lir_stmt bo = sv;
  while (bo >= 0 && k->st[bo].parent != k->root) bo = k->st[bo].parent;
  sh_sched_read rv, rq;
  if (!CHECK_OK(ctx, sh_sched_cache_read_ragged(k, K, sh_lir_find_loop(k, "h"), rk)) ||
      !CHECK_OK(ctx, sh_sched_parallel(k, bo)) || !CHECK_OK(ctx, sh_sched_cache_read_ragged(k, V, bo, &rv)) ||
      !CHECK_OK(ctx, sh_sched_cache_read_ragged(k, Q, sh_lir_find_loop(k, "i"), &rq)) ||
      !CHECK_OK(ctx, sh_lir_verify(k))) {
    sh_lir_free(k);
    lowered_free(ctx, lw);
    return NULL;
  }
  CHECK_EQ_INT(rv.n, 3); /* j, h, d of v */
  CHECK_EQ_INT(rq.n, 1); /* d of q */
  return k;
}

TEST(codegen_read_ragged_primitive) {
  sheaf_ctx *ctx = th_ctx();
  lowered l0, l1;
  sh_lir_kernel *k0 = lower(ctx, &l0, "mha0");
  REQUIRE(k0);
  sh_sched_read rk;
  sh_lir_kernel *k1 = packed(ctx, &l1, "mha1", &rk);
  if (!k1) {
    sh_lir_free(k0);
    lowered_free(ctx, &l0);
    return;
  }
  char *t = text(ctx, k1);
  CHECK_CONTAINS(t, "buffer k_rr f32[L[b], D] temp scoped\n");
  CHECK_CONTAINS(t, "buffer v_rr f32[L[b5], H, D] temp scoped\n");
  CHECK_CONTAINS(t, "buffer q_rr f32[D] temp scoped\n");
  CHECK_CONTAINS(t, "  alloc k_rr[L[b], D]:\n    for h in 0..H:\n      for k_d1_rr in 0..L[b]:\n"
                    "        for k_d3_rr in 0..D:\n          k_rr[k_d1_rr, k_d3_rr] = k[b, k_d1_rr, h, k_d3_rr]\n");
  CHECK_CONTAINS(t, "* k_rr[j, d]");
  CHECK_CONTAINS(t, "for b5 in 0..B parallel:\n  alloc v_rr[L[b5], H, D]:\n");
  CHECK_CONTAINS(t, "* v_rr[j");
  CHECK(!strstr(t, "* k[") && !strstr(t, "* v["));
  CHECK_EQ_INT(k1->st[rk.copy].kind, SH_LIR_S_LOOP);
  CHECK_EQ_INT(rk.n, 2);
  free(t);
  /* the interpreter: both against the reference, and equal to each other */
  static const int32_t mixed[] = {0, 1, 3, 4, 5, 12, 13, 33, 0, 2};
  float *a = NULL, *b = NULL;
  if (interp_ok(ctx, &l0, k0, mixed, 10, 3, 13, &a, "before") && interp_ok(ctx, &l1, k1, mixed, 10, 3, 13, &b, "after")) {
    int64_t n = 0;
    for (int i = 0; i < 10; i++) n += mixed[i] * 3 * 13;
    CHECK(memcmp(a, b, sizeof(float) * (size_t)n) == 0);
  }
  free(a), free(b);
  interp_ok(ctx, &l1, k1, EDGE, (int)SH_ARRAY_LEN(EDGE), 2, 9, NULL, "after, edge lengths");
  static const int32_t none[] = {0, 0, 0};
  interp_ok(ctx, &l1, k1, none, 3, 2, 8, NULL, "after, every sequence empty");
  interp_ok(ctx, &l1, k1, none, 0, 2, 8, NULL, "after, no sequence");
  sh_lir_free(k0), sh_lir_free(k1);
  lowered_free(ctx, &l0), lowered_free(ctx, &l1);
}

/* Refusals name the buffer and the loop and leave the kernel unchanged. */
TEST(codegen_read_ragged_errors) {
  sheaf_ctx *ctx = th_ctx();
  lowered lw;
  sh_lir_kernel *k = lower(ctx, &lw, "mhae");
  REQUIRE(k);
  char *before = text(ctx, k);
  sh_lir_buf K = sh_lir_find_buffer(k, "k"), Q = sh_lir_find_buffer(k, "q"), L = sh_lir_find_buffer(k, "L");
  sh_lir_buf out = sh_lir_find_buffer(k, "out");
  sh_lir_stmt h = sh_lir_find_loop(k, "h"), j = sh_lir_find_loop(k, "j"), d = sh_lir_find_loop(k, "d");
  sh_lir_stmt s0 = sh_lir_find_store(k, sh_lir_find_buffer(k, "s"), 0);
  CHECK_STATUS(ctx, sh_sched_cache_read_ragged(k, L, h, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "cache_read_ragged of L: not a ragged f32 input");
  CHECK_STATUS(ctx, sh_sched_cache_read_ragged(k, out, h, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "cache_read_ragged of out: not a ragged f32 input");
  CHECK_STATUS(ctx, sh_sched_cache_read_ragged(k, 999, h, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "buffer 999 does not exist");
  CHECK_STATUS(ctx, sh_sched_cache_read_ragged(k, K, s0, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "the place is not a serial or parallel loop");
  (void)j;
  /* under d every index of q is fixed */
  CHECK_STATUS(ctx, sh_sched_cache_read_ragged(k, Q, d, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "cache_read_ragged of q at loop d: every index is fixed");
  /* the first nest (the scores) is the only reader of k: the max's loops have none */
  sh_lir_stmt mx = sh_lir_find_store(k, sh_lir_find_buffer(k, "m"), 0);
  while (mx >= 0 && k->st[mx].parent != k->root) mx = k->st[mx].parent;
  CHECK_STATUS(ctx, sh_sched_cache_read_ragged(k, K, mx, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "no load of it inside");
  char *now = text(ctx, k);
  CHECK_EQ_STR(now, before);
  free(now), free(before);
  sh_lir_free(k);
  lowered_free(ctx, &lw);

  /* the sequence index bound inside the place: for r: for b: for j: y[b] += x[b, j, 0] */
  REQUIRE_OK(ctx, sh_lir_create(ctx, "seqv", &k));
  sh_lir_expr B = sh_lir_sz(k, sh_lir_size(k, "B")), D = sh_lir_sz(k, sh_lir_size(k, "D"));
  sh_lir_buf Ls = sh_lir_buffer(k, "Ls", SH_LIR_I32, SH_LIR_IN, 1, &B);
  sh_lir_buf x = sh_lir_buffer(k, "x", SH_LIR_F32, SH_LIR_IN, 3, (sh_lir_expr[]){B, B, D});
  sh_lir_buf y = sh_lir_buffer(k, "y", SH_LIR_F32, SH_LIR_OUT, 1, &B);
  sh_lir_buf off = sh_lir_buffer(k, "x_off", SH_LIR_I32, SH_LIR_IN, 1, &B);
  REQUIRE_OK(ctx, sh_lir_buffer_ragged(k, x, 2u, Ls, off));
  sh_lir_stmt r = sh_lir_loop(k, sh_lir_root(k), "r", sh_lir_int(k, 2));
  sh_lir_stmt b = sh_lir_loop(k, r, "b", B);
  sh_lir_stmt jj = sh_lir_loop(k, b, "j", sh_lir_load1(k, Ls, sh_lir_lv(k, b)));
  sh_lir_store1(k, jj, y, sh_lir_lv(k, b), sh_lir_load3(k, x, sh_lir_lv(k, b), sh_lir_lv(k, jj), sh_lir_int(k, 0)),
                SH_LIR_COMBINE_ADD);
  REQUIRE_OK(ctx, sh_lir_status(k));
  before = text(ctx, k);
  CHECK_STATUS(ctx, sh_sched_cache_read_ragged(k, x, r, NULL), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "cache_read_ragged of x at loop r: its sequence index varies inside");
  now = text(ctx, k);
  CHECK_EQ_STR(now, before);
  free(now), free(before);
  /* at b it applies: x[b, j, 0] copied over j (the 0 is fixed) */
  REQUIRE_OK(ctx, sh_sched_cache_read_ragged(k, x, b, NULL));
  CHECK_CONTAINS((now = text(ctx, k)), "y[b] += x_rr[j]\n");
  free(now);
  CHECK_OK(ctx, sh_lir_verify(k));
  sh_lir_free(k);
}

typedef int (*entry_fn)(const sk_abi *, const int64_t *, const sk_arg *);

/* The packed kernel's emitted C (v's copy allocated per task, on 2
 * threads) against the reference. */
TEST(codegen_read_ragged_c) {
  sheaf_ctx *ctx = th_ctx();
  if (!lir_cc_path()) {
    fprintf(stderr, "  skipped: no C compiler (cc) to build generated kernels\n");
    return;
  }
  lowered lw;
  sh_sched_read rk;
  sh_lir_kernel *k = packed(ctx, &lw, "mha_rr_c", &rk);
  REQUIRE(k);
  sh_buf src;
  sh_buf_init(&src, ctx);
  void *h = NULL;
  char err[4096];
  if (CHECK_OK(ctx, sh_lir_emit_c(k, &src))) {
    const char *c = sh_buf_cstr(&src);
    CHECK_CONTAINS(c, "float *restrict b_v_rr = (float *)sk_alloc(NULL, n_v_rr);");
    CHECK_CONTAINS(c, "__atomic_store_n(cap_->fail_, 1, __ATOMIC_RELAXED); return; }");
    CHECK_CONTAINS(c, "float *restrict b_k_rr = (float *)sk_alloc(abi, n_k_rr);");
    if (lir_cc_build(th_tmp_path(""), "mha_rr_c", &c, 1, SHEAF_ISA_SCALAR, NULL, 1, &h, err,
                     sizeof err))
      th_fail(__FILE__, __LINE__, "build: %s", err);
  }
  entry_fn fn = h ? (entry_fn)dlsym(h, "mha_rr_c") : NULL;
  if (h) CHECK(fn != NULL);
  int32_t wiki[64];
  bool have_wiki = wiki_lengths(wiki, 64);
  CHECK(have_wiki);
  struct {
    const int32_t *lens;
    int nb;
    int64_t H, D;
  } cases[] = {{EDGE, (int)SH_ARRAY_LEN(EDGE), 4, 16}, {EDGE, (int)SH_ARRAY_LEN(EDGE), 3, 13}, {wiki, 64, 2, 64}};
  for (size_t c = 0; fn && c < SH_ARRAY_LEN(cases); c++) {
    if (cases[c].lens == wiki && !have_wiki) continue;
    problem p;
    if (problem_make(ctx, &lw, k, cases[c].lens, cases[c].nb, cases[c].H, cases[c].D, 40 + c, &p)) {
      sk_arg a[32];
      for (int i = 0; i < p.n_args; i++) a[i] = (sk_arg){.data = p.args[i].data};
      sk_abi abi;
      sh_lir_abi_init(ctx, 2, &abi);
      CHECK_EQ_INT(fn(&abi, p.sizes, a), 0);
      char what[64];
      snprintf(what, sizeof what, "emitted C, case %d", (int)c);
      ar_close(p.out, p.want, p.n, what);
    }
    problem_free(&p);
  }
  if (h) dlclose(h);
  sh_buf_free(&src);
  sh_lir_free(k);
  lowered_free(ctx, &lw);

  /* the default schedule with pack_rows (vectorized copies, the scratch
   * blocks) at AVX2, where the host runs it */
  if (sheaf_cpu_isa_host() < SHEAF_ISA_AVX2) return;
  k = lower(ctx, &lw, "mha_rr_pack");
  REQUIRE(k);
  sh_buf_init(&src, ctx);
  h = NULL;
  if (CHECK_OK(ctx, sh_sched_default_opts(k, SHEAF_ISA_AVX2, &(sh_sched_opts){.pack_rows = 1})) &&
      CHECK_OK(ctx, sh_lir_emit_c(k, &src))) {
    const char *c = sh_buf_cstr(&src);
    CHECK_CONTAINS(c, "float *restrict b_k_rr = (float *)sk_alloc(NULL, n_k_rr);");
    CHECK_CONTAINS(c, "float *restrict b_s_blk = (float *)sk_alloc(NULL, n_s_blk);");
    if (lir_cc_build(th_tmp_path(""), "mha_rr_pack", &c, 1, SHEAF_ISA_AVX2, NULL, 1, &h, err, sizeof err))
      th_fail(__FILE__, __LINE__, "build: %s", err);
  }
  fn = h ? (entry_fn)dlsym(h, "mha_rr_pack") : NULL;
  for (size_t c = 0; fn && c < SH_ARRAY_LEN(cases); c++) {
    if (cases[c].lens == wiki && !have_wiki) continue;
    problem p;
    if (problem_make(ctx, &lw, k, cases[c].lens, cases[c].nb, cases[c].H, cases[c].D, 60 + c, &p)) {
      sk_arg a[32];
      for (int i = 0; i < p.n_args; i++) a[i] = (sk_arg){.data = p.args[i].data};
      sk_abi abi;
      sh_lir_abi_init(ctx, 2, &abi);
      CHECK_EQ_INT(fn(&abi, p.sizes, a), 0);
      char what[64];
      snprintf(what, sizeof what, "pack_rows, AVX2, case %d", (int)c);
      ar_close(p.out, p.want, p.n, what);
    }
    problem_free(&p);
  }
  if (h) dlclose(h);
  sh_buf_free(&src);
  sh_lir_free(k);
  lowered_free(ctx, &lw);
}

/* The default schedule keeps the multi-head attention's scratch
 * temporaries in blocks per (sequence, head) (s, e, m) or per sequence (z,
 * o, read after the heads' loop), allocated per task; with pack_rows it
 * also copies q, k, v per (sequence, head). Both on the interpreter
 * against the reference; the default through sheaf_kernel_run at every
 * level the host runs, 2 threads. */
TEST(codegen_read_ragged_default) {
  if (!th_have_jit_cc("codegen_read_ragged_default")) return;
  sheaf_ctx *ctx = th_ctx();
  for (int pack = 0; pack < 2; pack++) {
    lowered lw;
    sh_lir_kernel *k = lower(ctx, &lw, "mhad");
    REQUIRE(k);
    if (CHECK_OK(ctx, sh_sched_default_opts(k, SHEAF_ISA_AVX2, &(sh_sched_opts){.pack_rows = pack}))) {
      char *t = text(ctx, k);
      CHECK_CONTAINS(t, "buffer s_blk f32[L[b], L[b]] temp scoped\n");
      CHECK_CONTAINS(t, "buffer e_blk f32[L[b], L[b]] temp scoped\n");
      CHECK_CONTAINS(t, "buffer m_blk f32[L[b]] temp scoped\n");
      CHECK_CONTAINS(t, "buffer z_blk f32[H, L[b]] temp scoped\n");
      CHECK_CONTAINS(t, "buffer o_blk f32[H, L[b], D] temp scoped\n");
      CHECK_CONTAINS(t, "for b in 0..B parallel:\n  alloc o_blk[H, L[b], D]:\n");
      CHECK(!strstr(t, "s[b") && !strstr(t, "e[b") && !strstr(t, "o[b"));
      if (pack) {
        CHECK_CONTAINS(t, "buffer k_rr f32[L[b], D] temp scoped\n");
        CHECK_CONTAINS(t, "buffer v_rr f32[L[b], D] temp scoped\n");
        CHECK_CONTAINS(t, "buffer q_rr f32[L[b], D] temp scoped\n");
      } else {
        CHECK(!strstr(t, "_rr"));
      }
      free(t);
      interp_ok(ctx, &lw, k, EDGE, (int)SH_ARRAY_LEN(EDGE), 3, 13, NULL, pack ? "default + pack_rows" : "default");
      static const int32_t none[] = {0, 0, 0};
      interp_ok(ctx, &lw, k, none, 3, 2, 8, NULL, "default, every sequence empty");
    }
    sh_lir_free(k);
    lowered_free(ctx, &lw);
  }
  /* the 1-head kernel: its blocks per sequence */
  static const char ATTN[] =
      "kernel attn(L: i32[B], q: f32[B, L(b), D], k: f32[B, L(b), D], v: f32[B, L(b), D])\n"
      "    -> f32[B, L(b), D] {\n"
      "  s(b, i, j) +=! q(b, i, d) * k(b, j, d) / sqrt(D)\n"
      "  m(b, i) max=! s(b, i, j)\n  e(b, i, j) = exp(s(b, i, j) - m(b, i))\n"
      "  z(b, i) +=! e(b, i, j)\n  o(b, i, d) +=! e(b, i, j) * v(b, j, d)\n"
      "  out(b, i, d) = o(b, i, d) / z(b, i)\n}\n";
  sh_module m1;
  if (CHECK_OK(ctx, sh_kernel_source_compile(&m1, ctx, "attn.sf", ATTN, strlen(ATTN)))) {
    const sh_kernel *const *ks;
    sh_lir_kernel *k = NULL;
    if (sh_module_kernels(&m1, &ks) == 1 && CHECK_OK(ctx, sh_lower_generate(ctx, ks[0], SHEAF_ISA_AVX2, NULL, &k, NULL))) {
      char *t = text(ctx, k);
      CHECK_CONTAINS(t, "for b in 0..B parallel:\n  alloc ");
      CHECK_CONTAINS(t, "buffer s_blk f32[L[b], L[b]] temp scoped\n");
      CHECK(!strstr(t, "_rr"));
      free(t);
    }
    sh_lir_free(k);
  }
  sh_module_free(&m1);
  int32_t wiki[64];
  bool have_wiki = wiki_lengths(wiki, 64);
  CHECK(have_wiki);
  static const sheaf_isa levels[] = {SHEAF_ISA_SCALAR, SHEAF_ISA_AVX2, SHEAF_ISA_AVX512};
  for (size_t l = 0; l < SH_ARRAY_LEN(levels); l++) {
    if (levels[l] > sheaf_cpu_isa_host()) continue;
    /* eager: th_cache_dir (harness.h) */
    sh_kernel_opts o = {.eager = true, .cache_dir = th_cache_dir("read-ragged-cache"), .isa_set = true,
                        .isa = levels[l]};
    sheaf_kernel *K = NULL;
    if (!CHECK_OK(ctx, sh_kernel_compile_opts(ctx, MHA, strlen(MHA), NULL, &o, &K))) return;
    struct {
      const int32_t *lens;
      int nb;
      int64_t H, D;
    } cases[] = {{EDGE, (int)SH_ARRAY_LEN(EDGE), 4, 64}, {EDGE, (int)SH_ARRAY_LEN(EDGE), 3, 13},
                 {EDGE, (int)SH_ARRAY_LEN(EDGE), 2, 33}, {wiki, 64, 4, 64}};
    for (size_t c = 0; c < SH_ARRAY_LEN(cases); c++) {
      if (cases[c].lens == wiki && !have_wiki) continue;
      int nb = cases[c].nb;
      int64_t H = cases[c].H, D = cases[c].D, T = 0;
      for (int b = 0; b < nb; b++) T += cases[c].lens[b];
      int64_t n = T * H * D;
      uint64_t seed = 90 + c;
      float *q = th_frand_fill(&seed, n), *kk = th_frand_fill(&seed, n), *v = th_frand_fill(&seed, n);
      float *got = calloc((size_t)n + 1, sizeof(float)), *want = calloc((size_t)n + 1, sizeof(float));
      int32_t *L = malloc(sizeof(int32_t) * (size_t)nb);
      memcpy(L, cases[c].lens, sizeof(int32_t) * (size_t)nb);
      int64_t sL[] = {nb}, s4[] = {nb, -1, H, D};
      sheaf_kernel_arg a[] = {{SHEAF_KERNEL_I32, L, (size_t)nb, 1, sL}, {SHEAF_KERNEL_F32, q, (size_t)n, 4, s4},
                              {SHEAF_KERNEL_F32, kk, (size_t)n, 4, s4}, {SHEAF_KERNEL_F32, v, (size_t)n, 4, s4},
                              {SHEAF_KERNEL_F32, got, (size_t)n, 0, NULL}};
      char what[96];
      snprintf(what, sizeof what, "mha %s, %d sequences, %lld x %lld", sheaf_isa_name(levels[l]), nb, (long long)H,
               (long long)D);
      if (CHECK_OK(ctx, sheaf_kernel_run(K, a, 5))) {
        ar_mha(cases[c].lens, nb, H, D, q, kk, v, want);
        ar_close(got, want, n, what);
      }
      free(q), free(kk), free(v), free(got), free(want), free(L);
    }
    sheaf_kernel_free(K);
  }
}

/* A scoped temporary: only dense temporaries; an access outside its
 * alloc fails verification. */
TEST(codegen_read_ragged_scoped_verify) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k;
  REQUIRE_OK(ctx, sh_lir_create(ctx, "scv", &k));
  sh_lir_expr N = sh_lir_sz(k, sh_lir_size(k, "N"));
  sh_lir_buf x = sh_lir_buffer(k, "x", SH_LIR_F32, SH_LIR_IN, 1, &N);
  sh_lir_buf y = sh_lir_buffer(k, "y", SH_LIR_F32, SH_LIR_OUT, 1, &N);
  sh_lir_buf t = sh_lir_buffer(k, "t", SH_LIR_F32, SH_LIR_TEMP, 1, &N);
  CHECK_STATUS(ctx, sh_lir_buffer_scoped(k, x), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "buffer x: only dense temporaries are scoped");
  k->err = SHEAF_OK;
  REQUIRE_OK(ctx, sh_lir_buffer_scoped(k, t));
  sh_lir_stmt a = sh_lir_alloc(k, sh_lir_root(k), t);
  sh_lir_stmt i = sh_lir_loop(k, a, "i", N);
  sh_lir_store1(k, i, t, sh_lir_lv(k, i), sh_lir_load1(k, x, sh_lir_lv(k, i)), SH_LIR_COMBINE_NONE);
  sh_lir_stmt i2 = sh_lir_loop(k, a, "i", N);
  sh_lir_store1(k, i2, y, sh_lir_lv(k, i2), sh_lir_un(k, SH_LIR_FN_EXP, sh_lir_load1(k, t, sh_lir_lv(k, i2))),
                SH_LIR_COMBINE_NONE);
  REQUIRE_OK(ctx, sh_lir_status(k));
  CHECK_OK(ctx, sh_lir_verify(k));
  float xs[5] = {0, 1, -1, 2, 0.5f}, ys[5] = {0};
  int64_t sizes[] = {5};
  sh_lir_arg args[] = {{.data = xs}, {.data = ys}};
  if (CHECK_OK(ctx, sh_lir_run(k, sizes, args)))
    for (int e = 0; e < 5; e++) CHECK(fabsf(ys[e] - expf(xs[e])) < 1e-6f);
  /* read after its alloc: refused */
  sh_lir_stmt i3 = sh_lir_loop(k, sh_lir_root(k), "i", N);
  sh_lir_store1(k, i3, y, sh_lir_lv(k, i3), sh_lir_load1(k, t, sh_lir_lv(k, i3)), SH_LIR_COMBINE_NONE);
  CHECK_STATUS(ctx, sh_lir_verify(k), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "reads a scoped temporary outside its alloc: t");
  sh_lir_free(k);
}

/* contract_ragged alone: a per-sequence scratch y (for b: for j: y[b, j] =
 * 2 x[b, j]; for j: out[b] += y[b, j]) into a block per b, the interpreter
 * equal before and after; refusals (an input, a buffer read outside the
 * place, a block shared by an outer loop's iterations) leave it unchanged. */
static sh_lir_kernel *scratch_kernel(sheaf_ctx *ctx, bool outer) {
  sh_lir_kernel *k;
  if (!CHECK_OK(ctx, sh_lir_create(ctx, outer ? "scro" : "scr", &k))) return NULL;
  sh_lir_expr B = sh_lir_sz(k, sh_lir_size(k, "B"));
  sh_lir_buf Ls = sh_lir_buffer(k, "Ls", SH_LIR_I32, SH_LIR_IN, 1, &B);
  sh_lir_buf x = sh_lir_buffer(k, "x", SH_LIR_F32, SH_LIR_IN, 2, (sh_lir_expr[]){B, B});
  sh_lir_buf out = sh_lir_buffer(k, "out", SH_LIR_F32, SH_LIR_OUT, 1, &B);
  sh_lir_buf y = sh_lir_buffer(k, "y", SH_LIR_F32, SH_LIR_OUT, 2, (sh_lir_expr[]){B, B});
  sh_lir_buf xo = sh_lir_buffer(k, "x_off", SH_LIR_I32, SH_LIR_IN, 1, &B);
  sh_lir_buf yo = sh_lir_buffer(k, "y_off", SH_LIR_I32, SH_LIR_IN, 1, &B);
  sh_lir_buffer_ragged(k, x, 2u, Ls, xo);
  sh_lir_buffer_ragged(k, y, 2u, Ls, yo);
  k->bufs[y].scratch = true;
  sh_lir_stmt top = sh_lir_root(k);
  if (outer) top = sh_lir_loop(k, top, "r", sh_lir_int(k, 2));
  sh_lir_stmt b = sh_lir_loop(k, top, "b", B);
  sh_lir_expr vb = sh_lir_lv(k, b), len = sh_lir_load1(k, Ls, vb);
  sh_lir_stmt j = sh_lir_loop(k, b, "j", len);
  sh_lir_store2(k, j, y, vb, sh_lir_lv(k, j), sh_lir_mul(k, sh_lir_flt(k, 2), sh_lir_load2(k, x, vb, sh_lir_lv(k, j))),
                SH_LIR_COMBINE_NONE);
  sh_lir_store1(k, b, out, vb, sh_lir_flt(k, 0), SH_LIR_COMBINE_NONE);
  sh_lir_stmt j2 = sh_lir_loop(k, b, "j", len);
  sh_lir_store1(k, j2, out, vb, sh_lir_load2(k, y, vb, sh_lir_lv(k, j2)), SH_LIR_COMBINE_ADD);
  if (!CHECK_OK(ctx, sh_lir_status(k))) {
    sh_lir_free(k);
    return NULL;
  }
  return k;
}

static bool scratch_run(sheaf_ctx *ctx, sh_lir_kernel *k, float *out) {
  int32_t L[] = {3, 0, 1, 5}, off[] = {0, 3, 3, 4};
  float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, y[9];
  for (int i = 0; i < 9; i++) y[i] = NAN;
  int64_t sizes[] = {4};
  sh_lir_arg args[] = {{.data = L}, {.data = x}, {.data = out}, {.data = y}, {.data = off}, {.data = off}};
  return CHECK_OK(ctx, sh_lir_run(k, sizes, args));
}

TEST(codegen_contract_ragged) {
  sheaf_ctx *ctx = th_ctx();
  sh_lir_kernel *k = scratch_kernel(ctx, false);
  REQUIRE(k);
  float before[4], after[4];
  static const float want[4] = {12, 0, 8, 70};
  if (scratch_run(ctx, k, before))
    for (int i = 0; i < 4; i++) CHECK(before[i] == want[i]);
  char *t0 = text(ctx, k);
  sh_lir_buf x = sh_lir_find_buffer(k, "x"), out = sh_lir_find_buffer(k, "out"), y = sh_lir_find_buffer(k, "y");
  sh_lir_stmt b = sh_lir_find_loop(k, "b"), j = sh_lir_find_loop(k, "j");
  CHECK_STATUS(ctx, sh_sched_contract_ragged(k, x, b), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "contract_ragged of x: not a ragged f32 scratch temporary");
  CHECK_STATUS(ctx, sh_sched_contract_ragged(k, out, b), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "contract_ragged of out: not a ragged f32 scratch temporary");
  CHECK_STATUS(ctx, sh_sched_contract_ragged(k, y, j), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "contract_ragged of y at loop j: accessed outside the loop");
  char *t1 = text(ctx, k);
  CHECK_EQ_STR(t1, t0);
  free(t1);
  REQUIRE_OK(ctx, sh_sched_contract_ragged(k, y, b));
  t1 = text(ctx, k);
  CHECK_CONTAINS(t1, "buffer y_blk f32[Ls[b]] temp scoped\n");
  CHECK_CONTAINS(t1, "for b in 0..B:\n  alloc y_blk[Ls[b]]:\n");
  CHECK_CONTAINS(t1, "y_blk[j] = 2.0 * x[b, j]\n");
  CHECK_CONTAINS(t1, "out[b] += y_blk[j");
  free(t1);
  CHECK_OK(ctx, sh_lir_verify(k));
  if (scratch_run(ctx, k, after)) CHECK(memcmp(before, after, sizeof before) == 0);
  free(t0);
  sh_lir_free(k);
  /* inside for r: y[b, ..] is rewritten by every r: the block is r's too */
  k = scratch_kernel(ctx, true);
  REQUIRE(k);
  t0 = text(ctx, k);
  CHECK_STATUS(ctx, sh_sched_contract_ragged(k, sh_lir_find_buffer(k, "y"), sh_lir_find_loop(k, "b")),
               SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "its block is shared by the iterations of loop r");
  t1 = text(ctx, k);
  CHECK_EQ_STR(t1, t0);
  free(t0), free(t1);
  sh_lir_free(k);
}
