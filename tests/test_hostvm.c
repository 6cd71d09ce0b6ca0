/*
 * test_hostvm.c — the compiled host program (src/lang/hostprog.h) against
 * the AST walker it replaces: every example model through `sheaf run
 * --host vm` and `--host ast` on the bundled EWT data under every policy
 * on 1 and 2 threads, outputs byte for byte the same (npy: the f32 bits;
 * the models that return tuples or i32s through jsonl, and their tensors
 * bit for bit through sheaf_program with opts.host); a program using every
 * construct the compiler lowers (sums of every form, matches on tags,
 * integers and nested constructors, for loops, generic sizes, phases,
 * while, map / fold / scan, list builtins, and a part it leaves to the
 * walker: a size bound at run time) run in process: the same tensors, bits and graph
 * node counts; run-time errors: the same message at the same FILE:LINE:COL.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "io/dataset.h"
#include "lang/interp.h"

#define EWT "data/ud_english_ewt/en_ewt-ud-test.conllu"
#define LIMIT "70" /* a full batch of 64 and a short one */

typedef struct hv_example {
  const char *name, *sizes;
  bool npy; /* main returns tensors (else jsonl) */
} hv_example;

static const hv_example k_examples[] = {
    {"attnpool", "--size E=24 --size H=20 --size C=5", true},
    {"beam", "--size E=24 --size H=20", false},
    {"bilstm", "--size E=24 --size H=20 --size T=17", true},
    {"branches", "--size E=24 --size H=20 --size C=5", true},
    {"chartagger", "--size E=12 --size H=16 --size T=17", true},
    {"childsum", "--size E=24 --size H=20", true},
    {"cnn", "--size E=24 --size F=40 --size C=5", true},
    {"decoder", "--size E=24 --size H=20 --size C=30", false},
    {"early_exit", "--size H=20 --size C=5", false},
    {"gru", "--size E=24 --size H=20 --size C=5", true},
    {"handnorm", "--size H=20", false},
    {"mvrnn", "--size H=8", true},
    {"parser", "--size H=20", false},
    {"seq2seq", "--size E=24 --size H=20 --size C=30", true},
    {"tagger2", "--size E=24 --size H=20 --size T=17", true},
    {"transformer", "--size DK=8 --size F=64", true},
    {"treeattn", "--size E=24 --size H=20 --size C=5", true},
    {"treefc", "--size H=20", true},
    {"treegru", "--size E=24 --size H=20 --size C=5", true},
    {"treelstm", "--size E=24 --size H=20 --size C=5", true},
};

/* The bytes of path (malloc'd), or NULL. */
static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)sz + 1);
  *n = b && sz >= 0 && fread(b, 1, (size_t)sz, f) == (size_t)sz ? (size_t)sz : 0;
  fclose(f);
  return b;
}

static bool same_file(const char *a, const char *b) {
  size_t na = 0, nb = 0;
  char *x = slurp(a, &na), *y = slurp(b, &nb);
  bool same = x && y && na == nb && na > 0 && !memcmp(x, y, na);
  free(x);
  free(y);
  return same;
}

TEST(hostvm_examples_bit_identical_every_policy) {
  if (!th_sheaf_bin()) return;
  const char *data = th_ewt_head(70); /* --limit 70 of a file of 70 sentences: no 1.8 MB parse a run */
  if (!data) return;
  static const char *const pols[] = {"none", "sheaf", "depth", "agenda"};
  static char out[1 << 14];
  char cmd[2048], path[2][512], name[128];
  static const char *const hosts[2] = {"vm", "ast"};
  for (size_t k = 0; k < sizeof k_examples / sizeof *k_examples; k++) {
    const hv_example *x = &k_examples[k];
    for (int p = 0; p < 4; p++)
      for (int t = 1; t <= 2; t++) {
        bool ran = true;
        for (int h = 0; h < 2; h++) {
          snprintf(name, sizeof name, "hv_%s_%s_%d_%s.%s", x->name, pols[p], t, hosts[h], x->npy ? "npy" : "jsonl");
          snprintf(path[h], sizeof path[h], "%s", th_tmp_path(name));
          snprintf(cmd, sizeof cmd,
                   "%s run examples/%s.sf --data %s --limit " LIMIT " --seed 5 --mode dynamic %s --policy %s --threads %d "
                   "--batch 64 --format %s --host %s --out %s",
                   th_sheaf_bin(), x->name, data, x->sizes, pols[p], t, x->npy ? "npy" : "jsonl", hosts[h], path[h]);
          if (!CHECK_EQ_INT(th_run(cmd, out, sizeof out), 0)) {
            fprintf(stderr, "%s\n%s", cmd, out);
            ran = false;
          }
        }
        if (!ran) continue;
        if (!CHECK(same_file(path[0], path[1])))
          fprintf(stderr, "%s, policy %s, %d threads: vm and ast outputs differ (%s, %s)\n", x->name, pols[p], t,
                  path[0], path[1]);
        if (x->npy) { /* which rows are whose, when instances have several */
          char oa[600], ob[600];
          snprintf(oa, sizeof oa, "%s.offsets.npy", path[0]);
          snprintf(ob, sizeof ob, "%s.offsets.npy", path[1]);
          FILE *f = fopen(oa, "rb");
          if (f) {
            fclose(f);
            CHECK(same_file(oa, ob));
          }
        }
      }
  }
}

/* The models returning tuples: their tensors bit for bit through
 * sheaf_program, host 0 (the VM) against host 1 (the walker), every
 * policy, 1 and 2 threads, on fibers where they wait for values. */
TEST(hostvm_program_api_tensors_bit_identical) {
  sheaf_ctx *ctx = th_ctx();
  static const struct {
    const char *path;
    int n;
    const char *names[3];
    int64_t values[3];
  } models[] = {
      {"examples/beam.sf", 2, {"E", "H"}, {12, 10}},
      {"examples/decoder.sf", 3, {"E", "H", "C"}, {12, 10, 30}},
      {"examples/early_exit.sf", 2, {"H", "C"}, {10, 5}},
      {"examples/handnorm.sf", 1, {"H"}, {20}},
      {"examples/parser.sf", 1, {"H"}, {10}},
  };
  enum { N = 70 };
  static int32_t words[N][24];
  static const int32_t *ptrs[N];
  static int64_t lens[N];
  uint64_t rng = 12345;
  for (int i = 0; i < N; i++) {
    lens[i] = 1 + i % 17;
    for (int k = 0; k < lens[i]; k++) {
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      words[i][k] = (int32_t)((rng >> 33) % 60);
    }
    ptrs[i] = words[i];
  }
  static const sheaf_policy pols[] = {SHEAF_POLICY_NONE, SHEAF_POLICY_SHEAF, SHEAF_POLICY_DEPTH, SHEAF_POLICY_AGENDA};
  for (size_t m = 0; m < SH_ARRAY_LEN(models); m++)
    for (int p = 0; p < 4; p++)
      for (int t = 1; t <= 2; t++) {
        sheaf_program *pr[2] = {NULL, NULL};
        bool ok = true;
        for (int h = 0; h < 2 && ok; h++) {
          sheaf_program_opts o;
          memset(&o, 0, sizeof o);
          o.seed = 3;
          o.vocab = 61;
          o.n_sizes = models[m].n;
          o.size_names = models[m].names;
          o.size_values = models[m].values;
          o.runner.policy = pols[p];
          o.runner.threads = t;
          o.runner.batch = 32;
          o.host = h;
          ok = CHECK_OK(ctx, sheaf_program_load(ctx, models[m].path, &o, &pr[h])) &&
               CHECK_OK(ctx, sheaf_program_run_words(pr[h], N, ptrs, lens));
        }
        for (int i = 0; i < N && ok; i++) {
          sheaf_value_view a[8], b[8];
          size_t na = sheaf_program_outputs(pr[0], i, 8, a), nb = sheaf_program_outputs(pr[1], i, 8, b);
          ok = CHECK_EQ_SIZE(na, nb);
          for (size_t k = 0; k < na && k < 8 && ok; k++) {
            int64_t n = a[k].rank == 2 ? a[k].shape[0] * a[k].shape[1] : a[k].shape[0];
            ok = CHECK_EQ_INT(a[k].rank, b[k].rank) && CHECK_EQ_INT(a[k].shape[0], b[k].shape[0]) &&
                 CHECK(!memcmp(a[k].data, b[k].data, (size_t)n * sizeof(float)));
          }
          if (!ok) fprintf(stderr, "%s, policy %d, %d threads, sentence %d: vm and ast differ\n", models[m].path, p, t, i);
        }
        sheaf_program_free(pr[0]);
        sheaf_program_free(pr[1]);
      }
  /* a host the API does not know is refused, naming it */
  sheaf_program_opts o;
  memset(&o, 0, sizeof o);
  o.host = 7;
  sheaf_program *pr = NULL;
  CHECK(sheaf_program_load(ctx, "examples/handnorm.sf", &o, &pr) == SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "host 7");
  CHECK(pr == NULL);
}

/* ------------------------------------------------------------ in process */

typedef struct hv_run {
  sh_module m;
  sheaf_model *model;
  sh_lang_bind bind;
  sh_interp *ip[2]; /* vm, ast */
  sheaf_graph *g[2];
} hv_run;

static bool hv_open(sheaf_ctx *ctx, hv_run *r, const char *file, const char *src, int64_t vocab, const char *size,
                    int64_t value) {
  memset(r, 0, sizeof *r);
  if (!CHECK_OK(ctx, sh_lang_compile(&r->m, ctx, file, src, strlen(src)))) return false;
  sh_lang_bind_opts bo = {.vocab = vocab, .seed = 9, .n_overrides = size ? 1 : 0, .override_name = {size},
                          .override_value = {value}};
  if (!CHECK_OK(ctx, sheaf_model_create(ctx, &r->model)) ||
      !CHECK_OK(ctx, sh_lang_bind_model(&r->m, r->model, &bo, &r->bind)))
    return false;
  for (int h = 0; h < 2; h++)
    if (!CHECK_OK(ctx, sh_interp_create(&r->m, &r->bind, &r->ip[h])) ||
        !CHECK_OK(ctx, sh_interp_set_host(r->ip[h], h ? SH_HOST_AST : SH_HOST_VM)) ||
        !CHECK_OK(ctx, sheaf_graph_create(r->model, NULL, &r->g[h])))
      return false;
  return true;
}

static void hv_close(sheaf_ctx *ctx, hv_run *r) {
  for (int h = 0; h < 2; h++) {
    sheaf_graph_free(r->g[h]);
    sh_interp_free(r->ip[h]);
  }
  sh_lang_bind_free(ctx, &r->bind);
  sheaf_model_free(r->model);
  sh_module_free(&r->m);
}

/* Host values equal, tensors bit for bit (after the flush). */
static bool same_value(sheaf_ctx *ctx, const hv_run *r, sh_value a, sh_value b) {
  if (a.kind != b.kind) return CHECK_EQ_INT(a.kind, b.kind);
  switch (a.kind) {
  case SH_V_INT: case SH_V_BOOL: return CHECK_EQ_INT(a.i, b.i);
  case SH_V_F32: return CHECK(a.f == b.f || (a.f != a.f && b.f != b.f));
  case SH_V_TENSOR: {
    sheaf_value_view x, y;
    if (!CHECK_OK(ctx, sheaf_value(r->g[0], a.t, &x)) || !CHECK_OK(ctx, sheaf_value(r->g[1], b.t, &y))) return false;
    int64_t n = x.rank == 2 ? x.shape[0] * x.shape[1] : x.shape[0];
    return CHECK_EQ_INT(x.rank, y.rank) && CHECK_EQ_INT(x.shape[0], y.shape[0]) &&
           CHECK(!memcmp(x.data, y.data, (size_t)n * sizeof(float)));
  }
  case SH_V_TUPLE: case SH_V_LIST: case SH_V_ADT:
    if (!CHECK_EQ_INT(a.agg->n, b.agg->n) || !CHECK_EQ_INT(a.agg->tag, b.agg->tag)) return false;
    for (int32_t i = 0; i < a.agg->n; i++)
      if (!same_value(ctx, r, a.agg->items[i], b.agg->items[i])) return false;
    return true;
  default: return true;
  }
}

static const char k_every_construct[] =
    "type T = A(x: i32) | B(l: T, r: T) | C\n"
    "param emb: f32[V, H]\n"
    "param W: f32[H, H]\n"
    "param U: f32[H, H]\n"
    "param b: f32[H]\n"
    "param M: f32[H, 2]\n"
    "fn grow(w: i32, d: i32) -> T =\n"
    "  if d <= 0 || w % 3 == 0 { A(w) } else if w % 3 == 1 && d > 1 { B(B(A(w + 1), C), C) }\n"
    "  else { B(A(w), B(A(w * 2), B(C, A(0)))) }\n"
    "fn enc(t: T) -> f32[H] = match t {\n"
    "  A(0) => emb[0],\n"
    "  A(w) => emb[w % V] @ W + b,\n"
    "  B(A(w), r) => tanh(emb[w % V] @ W + enc(r) @ U + b),\n"
    "  B(l, C) => sigmoid(enc(l) @ W) * 0.5 - enc(l),\n"
    "  B(l, r) => enc(l) + enc(r) + b + emb[1],\n"
    "  C => zeros(H),\n"
    "}\n"
    "fn first(xs: f32[N]) -> f32[1] = xs[0:1]\n"
    "fn width(xs: f32[N]) -> i32 = N * 2 + 1\n"
    "fn step(acc: f32[H], w: i32) -> f32[H] = relu(acc @ W + emb[w] @ U)\n"
    "fn kind(n: i32, flag: bool) -> i32 = match (n % 4, flag) { (0, true) => 10, (0, false) => 11, (k, _) => k * 100 + 7 * 3 }\n"
    "fn main(ws: list[i32]) -> (f32[H], list[f32[H]], f32[1], i32, f32[1], list[f32[H]], f32[H], i32, f32[2]) {\n"
    "  let n = len(ws);\n"
    "  let t = grow(ws[0] + n, 3);\n"
    "  let h = enc(t);\n"
    "  let hs = for (i, w) in [(0, ws[0]), (1, ws[n - 1])] { emb[w] * float(i + 1) + h };\n"
    "  let rs = for i in 1..n { -emb[ws[i]] };\n"
    "  let s = scan(step, h, ws);\n"
    "  let f = fold(step, zeros(H), rev(ws));\n"
    "  let (cnt, acc) = while (c, a) = (0, 0) ; c < n max 100 { (c + 1, a + ws[c] * 2 - 1) };\n"
    "  let x = 2.5 * 2.0 + float(acc) - 0.25;\n"
    "  let big = !(n > 3) && true;\n"
    "  phase 1 {\n"
    "    (h, hs, first(h - emb[2]), kind(n, big) + cnt + (6 * 7 - 40) / 2 + width(cat(h, h)), x,\n"
    "     map(enc, [t, A(n), C]), f + sum(rs) + mean(s), acc, h @ M)\n"
    "  }\n"
    "}\n";

TEST(hostvm_every_construct_bit_identical) {
  sheaf_ctx *ctx = th_ctx();
  hv_run r;
  if (!hv_open(ctx, &r, "every.sf", k_every_construct, 12, "H", 6)) goto out;
  char host[512];
  sh_interp_host_describe(r.ip[0], host, sizeof host);
  CHECK_EQ_STR(host, "host program: 7 functions compiled, 1 with parts interpreted (a size bound at run time at "
                     "every.sf:19:31)");
  sh_interp_host_describe(r.ip[1], host, sizeof host);
  CHECK_CONTAINS(host, "not used");
  sh_value res[2][24];
  uint64_t rng = 77;
  int32_t ws[24][9];
  for (int i = 0; i < 24; i++)
    for (int k = 0; k < 9; k++) {
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      ws[i][k] = (int32_t)((rng >> 33) % 11);
    }
  for (int h = 0; h < 2; h++) {
    for (int i = 0; i < 24; i++) {
      sh_value in;
      if (!CHECK_OK(ctx, sh_interp_ints(r.ip[h], ws[i], 1 + i % 9, &in)) ||
          !CHECK_OK(ctx, sh_interp_main(r.ip[h], r.g[h], in, &res[h][i])))
        goto out;
    }
    if (!CHECK_OK(ctx, sheaf_graph_flush(r.g[h]))) goto out;
  }
  sheaf_graph_stats st[2];
  for (int h = 0; h < 2; h++) sheaf_graph_get_stats(r.g[h], &st[h]);
  CHECK(st[0].nodes > 24 * 20);
  CHECK_EQ_INT(st[0].nodes, st[1].nodes);
  CHECK_EQ_INT(st[0].batches, st[1].batches);
  for (int i = 0; i < 24; i++)
    if (!same_value(ctx, &r, res[0][i], res[1][i])) {
      fprintf(stderr, "instance %d: vm and ast differ\n", i);
      break;
    }
out:
  hv_close(ctx, &r);
}

/* Run-time errors: the VM's message is the walker's, at the same place. */
TEST(hostvm_errors_same_message_and_position) {
  sheaf_ctx *ctx = th_ctx();
  static const char prog[] =
      "param emb: f32[V, H]\n"
      "fn pick(ws: list[i32], k: i32) -> f32[1] { emb[ws[0]][k] }\n"
      "fn big(n: i32) -> i32 = 2147483600 + n * 10\n"
      "fn main(ws: list[i32]) -> f32[1] {\n"
      "  let n = len(ws);\n"
      "  if n == 1 { emb[-1][0] } else if n == 2 { pick(ws, 7) }\n"
      "  else if n == 3 { emb[ws[5]][0] } else if n == 4 { emb[0][n / (n - 4)] }\n"
      "  else if n == 5 { emb[big(n) % 3][0:1] } else if n == 6 { reshape(emb[0], 1, H)[n][0:1] }\n"
      "  else if n == 7 { let s = stack(for i in 0..70000 { zeros(1) }); s[0] }\n"
      "  else if n == 8 { let c = while k = 0; k < n max 3 { k + 1 }; emb[c][0:1] }\n"
      "  else if n == 9 { emb[len(pop(pop([1])))][0:1] }\n"
      "  else if n == 10 { emb[n % (n - 10)][0:1] }\n"
      "  else { emb[ws[0]][0] + emb[ws[1] + 0][0] }\n"
      "}\n";
  hv_run r;
  if (!hv_open(ctx, &r, "e.sf", prog, 6, "H", 3)) goto out;
  int32_t words[12] = {1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2};
  static const char *const want[] = {
      NULL, "e.sf:6:15: error: emb[-1]: row -1 is out of range", "e.sf:2:44: error: index 7 is out of range",
      "e.sf:7:24: error: index 5 is out of range", "e.sf:7:60: error: division by zero",
      "e.sf:3:25: error: i32 overflow", "e.sf:8:60: error: row 6 is out of range for a matrix of 1 row",
      "e.sf:9:28: error: sheaf_stack: 70000 inputs", "e.sf:10:28: error: 'while' reached its bound (max 3)",
      "e.sf:11:32: error: pop of an empty list", "e.sf:12:25: error: division by zero"};
  for (int n = 1; n <= 11; n++) {
    char msg[2][700];
    for (int h = 0; h < 2; h++) {
      sh_value in, res;
      REQUIRE_OK(ctx, sh_interp_ints(r.ip[h], words, n, &in));
      sheaf_status st = sh_interp_main(r.ip[h], r.g[h], in, &res);
      if (n == 11) {
        CHECK_OK(ctx, st);
        msg[h][0] = 0;
      } else {
        CHECK(st != SHEAF_OK);
        snprintf(msg[h], sizeof msg[h], "%s", sheaf_ctx_last_error(ctx));
      }
      CHECK_OK(ctx, sheaf_graph_reset(r.g[h]));
      sh_interp_reset(r.ip[h]);
    }
    CHECK_EQ_STR(msg[0], msg[1]);
    if (n < 11) CHECK_CONTAINS(msg[0], want[n]);
  }
out:
  hv_close(ctx, &r);
}

/* ------------------------------------------------------------ mutants */

/* One instance of a checked mutant through both hosts: both fail with the
 * same message, or both give the same values. */
static void mutant_instance(sheaf_ctx *ctx, hv_run *r, const sh_dataset *d, int i, long *ran) {
  sh_value res[2];
  sheaf_status st[2];
  char msg[2][700];
  for (int h = 0; h < 2; h++) {
    sh_value in;
    const sh_input_shape *is = sh_check_main_input(&r->m);
    if (is->kind == SH_INPUT_TOKENS) {
      int32_t ws[12];
      int32_t n = 1 + i % 12;
      for (int32_t k = 0; k < n; k++) ws[k] = (int32_t)((i * 7 + k * 3) % 9);
      st[h] = sh_interp_ints(r->ip[h], ws, n, &in);
    } else {
      st[h] = sh_interp_tree(r->ip[h], &d->tb, d->tb.tree_root[i], d->ids, &in);
    }
    if (!st[h]) st[h] = sh_interp_main(r->ip[h], r->g[h], in, &res[h]);
    if (!st[h]) st[h] = sheaf_graph_flush(r->g[h]);
    snprintf(msg[h], sizeof msg[h], "%s", st[h] ? sheaf_ctx_last_error(ctx) : "");
  }
  CHECK_EQ_INT(st[0], st[1]);
  CHECK_EQ_STR(msg[0], msg[1]);
  if (!st[0] && !st[1] && !same_value(ctx, r, res[0], res[1])) fprintf(stderr, "mutant: instance %d differs\n", i);
  for (int h = 0; h < 2; h++) {
    sheaf_graph_reset(r->g[h]);
    sh_interp_reset(r->ip[h]);
  }
  (*ran)++;
}

/* Random edits of the example models: every mutant that checks and binds
 * runs a few instances on both hosts with the same results (or the same
 * error), and never crashes. Numbers of four or more digits are skipped
 * (a loop of 10^8 iterations is slow, not wrong). */
TEST(hostvm_mutants_same_as_walker) {
  sheaf_ctx *ctx = th_ctx();
  static const char *const files[] = {"examples/treelstm.sf", "examples/treefc.sf", "examples/mvrnn.sf",
                                      "examples/treegru.sf", "examples/branches.sf", "examples/bilstm.sf",
                                      "examples/gru.sf", "examples/tagger2.sf", "examples/cnn.sf",
                                      "examples/attnpool.sf", "examples/early_exit.sf", "examples/parser.sf"};
  static const char alphabet[] = "(){}[],:;=<>+-*/%@!|._ \n0123456789abcHWfnletmatchiforphasewhile";
  sh_dataset d;
  REQUIRE_OK(ctx, sh_dataset_load(ctx, EWT, SH_DATASET_BINARY, &d));
  uint64_t rng = 0xC0FFEE123456789ull;
  long checked = 0, ran = 0;
  for (size_t f = 0; f < SH_ARRAY_LEN(files); f++) {
    size_t len;
    char *src = slurp(files[f], &len);
    REQUIRE(src);
    char *buf = malloc(len + 64);
    REQUIRE(buf);
    for (int iter = 0; iter < 150; iter++) {
      memcpy(buf, src, len);
      size_t n = len;
      for (int k = 0; k < 1 + iter % 3; k++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        size_t at = (size_t)(rng % n);
        int op = (int)((rng >> 32) % 3);
        if (op == 0) buf[at] = alphabet[(rng >> 40) % (sizeof alphabet - 1)];
        else if (op == 1 && n > 1) memmove(buf + at, buf + at + 1, n-- - at - 1);
        else if (n < len + 60) {
          memmove(buf + at + 1, buf + at, n++ - at);
          buf[at] = alphabet[(rng >> 40) % (sizeof alphabet - 1)];
        }
      }
      buf[n] = 0;
      bool long_number = false;
      for (size_t k = 0, run = 0; k < n; k++) {
        run = buf[k] >= '0' && buf[k] <= '9' ? run + 1 : 0;
        if (run >= 4) long_number = true;
      }
      if (long_number) continue;
      sh_module m;
      sheaf_status st = sh_lang_compile(&m, ctx, "m.sf", buf, n);
      if (st == SHEAF_OK) st = sh_module_require_main(&m);
      const sh_input_shape *is = st == SHEAF_OK ? sh_check_main_input(&m) : NULL;
      bool runnable = is && (is->kind == SH_INPUT_TOKENS || is->kind == SH_INPUT_BINARY_TREE);
      sh_module_free(&m);
      if (!runnable) continue;
      checked++;
      hv_run r;
      memset(&r, 0, sizeof r);
      bool ok = sh_lang_compile(&r.m, ctx, "m.sf", buf, n) == SHEAF_OK;
      static const char *const names[] = {"E", "H", "C", "T", "V", "Vm", "L"};
      static const int64_t values[] = {4, 3, 3, 3, 12, 6, 3};
      sh_lang_bind_opts bo = {.vocab = d.vocab, .seed = 4};
      for (int k = 0; k < 7; k++) {
        bool used = false;
        for (uint32_t v = 1; v <= r.m.sizes.n; v++)
          if (r.m.sizes.v[v].kind == SH_SV_GLOBAL && !r.m.sizes.v[v].has_value &&
              !strcmp(sh_sym_name(&r.m.syms, r.m.sizes.v[v].name), names[k]))
            used = true;
        if (used && strcmp(names[k], "V")) {
          bo.override_name[bo.n_overrides] = names[k];
          bo.override_value[bo.n_overrides++] = values[k];
        }
      }
      ok = ok && sheaf_model_create(ctx, &r.model) == SHEAF_OK &&
           sh_lang_bind_model(&r.m, r.model, &bo, &r.bind) == SHEAF_OK;
      for (int h = 0; h < 2 && ok; h++)
        ok = sh_interp_create(&r.m, &r.bind, &r.ip[h]) == SHEAF_OK &&
             sh_interp_set_host(r.ip[h], h ? SH_HOST_AST : SH_HOST_VM) == SHEAF_OK &&
             sheaf_graph_create(r.model, NULL, &r.g[h]) == SHEAF_OK;
      for (int i = 0; i < 4 && ok; i++) mutant_instance(ctx, &r, &d, i, &ran);
      hv_close(ctx, &r);
    }
    free(buf);
    free(src);
  }
  sh_dataset_free(&d);
  CHECK(checked > 20);
  CHECK(ran > 40);
  fprintf(stderr, "hostvm mutants: %ld checked, %ld instances run on both hosts\n", checked, ran);
}

/* What the CLI says about the host program: `sheaf check`, `sheaf run
 * --stats` (and --host ast: not used), a --host it does not know. */
TEST(hostvm_cli_reports) {
  if (!th_sheaf_bin()) return;
  static char out[1 << 15];
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s check examples/treelstm.sf examples/decoder.sf", th_sheaf_bin());
  REQUIRE(CHECK_EQ_INT(th_run(cmd, out, sizeof out), 0));
  CHECK_CONTAINS(out, "fn main(t: Tree) -> f32[C]  [entry]\nhost program: 2 functions compiled\n");
  CHECK_CONTAINS(out, "host program: 3 functions compiled\n");
  static const char *const hosts[] = {"vm", "ast"};
  static const char *const want[] = {"  host program: 2 functions compiled\n", "  host program: not used (--host ast"};
  for (int h = 0; h < 2; h++) {
    snprintf(cmd, sizeof cmd,
             "%s run examples/treefc.sf --data " EWT " --limit 5 --size H=4 --mode dynamic --stats --host %s --out %s 2>&1",
             th_sheaf_bin(), hosts[h], th_tmp_path("hv_stats.txt"));
    CHECK_EQ_INT(th_run(cmd, out, sizeof out), 0);
    CHECK_CONTAINS(out, want[h]);
  }
  snprintf(cmd, sizeof cmd, "%s run examples/treefc.sf --data " EWT " --limit 5 --size H=4 --host bogus 2>&1",
           th_sheaf_bin());
  CHECK_EQ_INT(th_run(cmd, out, sizeof out), 2);
  CHECK_CONTAINS(out, "--host: expected vm or ast, got 'bogus'");
}

/* A function too large for the registers (a list of 60,001 literals) is
 * left to the walker whole, reported; both hosts give the same value. */
TEST(hostvm_too_large_function_runs_on_the_walker) {
  sheaf_ctx *ctx = th_ctx();
  enum { N = 60001 };
  static const char head[] = "fn main(ws: list[i32]) -> i32 {\n  len([";
  static const char tail[] = "]) + ws[0]\n}\n";
  char *src = malloc(sizeof head + 2 * N + sizeof tail);
  REQUIRE(src);
  size_t at = 0;
  memcpy(src, head, sizeof head - 1), at += sizeof head - 1;
  for (int i = 0; i < N; i++) src[at++] = '7', src[at++] = i + 1 < N ? ',' : ' ';
  memcpy(src + at, tail, sizeof tail);
  hv_run r;
  if (hv_open(ctx, &r, "big.sf", src, 4, NULL, 0)) {
    char host[512];
    sh_interp_host_describe(r.ip[0], host, sizeof host);
    CHECK_EQ_STR(host, "host program: 0 functions compiled, 1 interpreted (too large to compile at big.sf:1:31)");
    int32_t ws[1] = {5};
    for (int h = 0; h < 2; h++) {
      sh_value in, res;
      if (CHECK_OK(ctx, sh_interp_ints(r.ip[h], ws, 1, &in)) && CHECK_OK(ctx, sh_interp_main(r.ip[h], r.g[h], in, &res)))
        CHECK(res.kind == SH_V_INT && res.i == N + 5);
    }
  }
  hv_close(ctx, &r);
  free(src);
}
