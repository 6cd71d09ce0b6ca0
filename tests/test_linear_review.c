/*
 * test_linear_review.c — models the linearized mode's check once accepted
 * but whose generated kernels did not compile (issue 15 review): a unary
 * function of a cat of computed vectors, a parameter matrix times a
 * per-row matrix, a parameter matrix as a result, a per-row f32[1] times a
 * parameter matrix. sh_lin_check (the verdict `sheaf check --analyses`
 * prints and `--mode auto` trusts) must refuse each with its position.
 * And models the linearized mode takes, run against the dynamic runtime
 * (diff_model: every output within 1e-5, batches of 1, 5 and 64 trees).
 */
#include <stdlib.h>

#include "compile/linear.h"
#include "harness.h"
#include "io/dataset.h"
#include "models/models.h"
#include "test_linear_util.h"

#define EWT "data/ud_english_ewt/en_ewt-ud-test.conllu"

static void check_refused(const char *name, const char *body, const char *ret, const char *want) {
  sheaf_ctx *ctx = th_ctx();
  char text[2048], why[512] = "";
  snprintf(text, sizeof text,
           "type Tree = Leaf(word: i32) | Node(left: Tree, right: Tree)\n"
           "param emb : f32[V, H]\n"
           "param embm : f32[V, H*H]\n"
           "param A : f32[H, H]\n"
           "param W : f32[H, H]\n"
           "fn f(t: Tree) -> %s =\n"
           "  match t {\n"
           "%s"
           "  }\n"
           "fn main(t: Tree) -> %s = f(t)\n",
           ret, body, ret);
  tl_model tm;
  if (!tl_open_src(ctx, name, text, (const char *[]){"H=3", NULL}, NULL, &tm)) return;
  sheaf_status st = sh_lin_check(&tm.m, &tm.bind, why, sizeof why);
  if (!CHECK_EQ_INT(st, SHEAF_ERR_UNSUPPORTED)) fprintf(stderr, "%s: accepted\n", name);
  else CHECK_CONTAINS(why, want);
  tl_close(ctx, &tm);
}

TEST(linear_review_refuses_untranslatable) {
  check_refused("uncat.sf",
                "    Leaf(w) => emb[w],\n"
                "    Node(l, r) => tanh(cat(f(l) @ W, f(r) @ W))[0:H],\n",
                "f32[H]", "uncat.sf:9:19: cat of computed values");
  check_refused("param_at_rows.sf",
                "    Leaf(w) => reshape(embm[w], H, H),\n"
                "    Node(l, r) => tanh(W @ f(l) + f(r)),\n",
                "f32[H, H]", "param_at_rows.sf:9:24: a parameter matrix times a per-row matrix");
  check_refused("param_result.sf",
                "    Leaf(w) => (emb[w], A),\n"
                "    Node(l, r) => { let (x, X) = f(l); let (y, Y) = f(r); (tanh(x + y), X) },\n",
                "(f32[H], f32[H, H])", "param_result.sf:8:16: a parameter matrix as a result");
  check_refused("row_scalar.sf",
                "    Leaf(w) => (emb[w], A * emb[w][0:1]),\n"
                "    Node(l, r) => { let (x, X) = f(l); let (y, Y) = f(r); (tanh(x + y), X) },\n",
                "(f32[H], f32[H, H])", "row_scalar.sf:8:25: a per-row f32[1] with a parameter matrix");
}

/* main's outputs of trees 0 .. n-1 by the dynamic runtime (flattened),
 * and by the linearized mode in batches of b; the largest relative error. */
static bool dyn_outputs(sheaf_ctx *ctx, tl_model *tm, const sh_dataset *d, int n, float *want, int64_t width) {
  sh_interp *ip = NULL;
  sheaf_graph *g = NULL;
  bool ok = CHECK_OK(ctx, sh_interp_create(&tm->m, &tm->bind, &ip)) &&
            CHECK_OK(ctx, sheaf_graph_create(tm->model, NULL, &g));
  sh_value *res = calloc((size_t)n, sizeof *res);
  ok = ok && CHECK(res != NULL);
  for (int t = 0; ok && t < n; t++) {
    sh_value in;
    ok = CHECK_OK(ctx, sh_interp_tree(ip, &d->tb, d->tb.tree_root[t], d->ids, &in)) &&
         CHECK_OK(ctx, sh_interp_main(ip, g, in, &res[t]));
  }
  ok = ok && CHECK_OK(ctx, sheaf_graph_flush(g));
  for (int t = 0; ok && t < n; t++) {
    sheaf_expr ts[8];
    size_t nt = sh_value_tensors(res[t], ts, 8);
    int64_t off = 0;
    for (size_t k = 0; ok && k < nt && k < 8; k++) {
      sheaf_value_view v;
      ok = CHECK_OK(ctx, sheaf_value(g, ts[k], &v));
      int64_t numel = v.rank == 2 ? v.shape[0] * v.shape[1] : v.shape[0];
      ok = ok && CHECK(off + numel <= width);
      if (ok) memcpy(want + t * width + off, v.data, (size_t)numel * sizeof(float));
      off += numel;
    }
    ok = ok && CHECK_EQ_INT(off, width);
  }
  free(res);
  sheaf_graph_free(g);
  sh_interp_free(ip);
  return ok;
}

/* Runs model `text` both ways on the first n EWT trees. Returns 1 when it
 * linearized and matched, 0 when the linearized mode refused it (why), -1
 * on a failure (already reported). */
static int diff_model(const char *name, const char *text, const char *const *sizes, const sh_dataset *d, int n,
                      char *why, size_t cap) {
  sheaf_ctx *ctx = th_ctx();
  tl_model tm;
  why[0] = 0;
  if (!tl_open_src(ctx, name, text, sizes, d, &tm)) return -1;
  sh_lin *L = NULL;
  int rc = -1;
  float *want = NULL, *got = NULL;
  sheaf_status st = sh_lin_create(&tm.m, tm.model, &tm.bind, &L, why, cap);
  if (st == SHEAF_ERR_UNSUPPORTED) {
    rc = 0;
    goto out;
  }
  if (!CHECK_OK(ctx, st)) {
    fprintf(stderr, "%s:\n%s", name, text);
    goto out;
  }
  int64_t width = 0;
  for (int c = 0; c < sh_lin_n_outputs(L); c++) {
    int rank;
    int64_t dims[2];
    sh_lin_output_shape(L, c, &rank, dims);
    width += rank == 2 ? dims[0] * dims[1] : dims[0];
  }
  want = calloc((size_t)(n * width), sizeof *want);
  got = calloc((size_t)(n * width), sizeof *got);
  if (!CHECK(want && got) || !dyn_outputs(ctx, &tm, d, n, want, width)) goto out;
  static const int batches[] = {1, 5, 64};
  rc = 1;
  for (int bi = 0; bi < 3 && rc == 1; bi++) {
    int b = batches[bi], stop = b == 1 ? (n < 12 ? n : 12) : n;
    memset(got, 0xff, (size_t)(n * width) * sizeof *got); /* NaN: a row never written fails */
    for (int first = 0; first < stop && rc == 1; first += b) {
      int cnt = first + b <= stop ? b : stop - first;
      if (!CHECK_OK(ctx, sh_lin_run(L, &d->tb, first, cnt, d->ids))) rc = -1;
      for (int t = 0; rc == 1 && t < cnt; t++) {
        int64_t off = 0;
        for (int c = 0; c < sh_lin_n_outputs(L); c++) {
          int rank;
          int64_t dims[2];
          sh_lin_output_shape(L, c, &rank, dims);
          int64_t w = rank == 2 ? dims[0] * dims[1] : dims[0];
          memcpy(got + (first + t) * width + off, sh_lin_output(L, t, c), (size_t)w * sizeof(float));
          off += w;
        }
      }
    }
    double worst = rc == 1 ? sh_max_rel_err(got, want, stop, width) : 0;
    if (rc == 1 && !CHECK(worst <= 1e-5)) {
      fprintf(stderr, "%s batch %d: max rel err %g\n%s", name, b, worst, text);
      rc = -1;
    }
  }
out:
  free(want);
  free(got);
  sh_lin_free(L);
  tl_close(ctx, &tm);
  return rc;
}

static bool open_ewt(sh_dataset *d) {
  if (!th_have_jit_cc("linear_review")) return false;
  setenv("SHEAF_CACHE_DIR", th_cache_dir("linear"), 0);
  return CHECK_OK(th_ctx(), sh_dataset_load(th_ctx(), EWT, SH_DATASET_BINARY, d));
}

/* A cat whose parts are not all per-row (a parameter first, or only
 * parameters) as the left operand of @: the product is per-row, its first
 * part's statement once had no range for n. */
TEST(linear_review_cat_with_parameter_parts) {
  sh_dataset d;
  if (!open_ewt(&d)) return;
  char why[512];
  static const char model[] =
      "type Tree = Leaf(word: i32) | Node(left: Tree, right: Tree)\n"
      "param emb : f32[V, H]\n"
      "param W2 : f32[2*H, H]\n"
      "param b : f32[H]\n"
      "param c : f32[H]\n"
      "fn f(t: Tree) -> f32[H] =\n"
      "  match t {\n"
      "    Leaf(w) => tanh(cat(b, emb[w]) @ W2),\n"
      "    Node(l, r) => tanh(cat(b, f(l)) @ W2 + cat(c, b) @ W2 + f(r)),\n"
      "  }\n"
      "fn main(t: Tree) -> f32[H] = f(t)\n";
  int rc = diff_model("cat_params.sf", model, (const char *[]){"H=6", NULL}, &d, 40, why, sizeof why);
  if (!CHECK_EQ_INT(rc, 1)) fprintf(stderr, "refused: %s\n", why);
  sh_dataset_free(&d);
}

/* ------------------------------------------------------------ random models */

/* A random binary-tree model in the language: one or two structural
 * functions (f, and g that f may call) with random arms (nested patterns in
 * random order, the first matching wins), each a random expression over the
 * pattern's words (two tables of different rows), the children's results
 * (a vector or an (h, c) pair) and a bias, built from the builtins the
 * linearized mode translates; a helper inlined. Products go through tanh
 * (no x * x chain doubling the relative error at every level: a 40-level
 * tree then differs from the dynamic runtime by rounding alone, amplified
 * past 1e-5; seen by hand). log_softmax is left out:
 * next to a GEMM on another input the default schedule fails to compile the
 * kernel (a code generator issue, reported, not the translation's). */
typedef struct rgen {
  uint64_t s;
  char *p;
  size_t left;
} rgen;

static uint32_t rg_next(rgen *g, uint32_t n) {
  g->s ^= g->s << 13, g->s ^= g->s >> 7, g->s ^= g->s << 17;
  return (uint32_t)(g->s >> 11) % n;
}

static void rg_put(rgen *g, const char *s) {
  size_t n = strlen(s);
  if (n >= g->left) n = g->left ? g->left - 1 : 0;
  memcpy(g->p, s, n);
  g->p += n, g->left -= n;
  if (g->left) *g->p = 0;
}

static void rg_expr(rgen *g, const char *const *atoms, int n_atoms, int depth) {
  if (depth <= 0 || rg_next(g, 4) == 0) {
    rg_put(g, atoms[rg_next(g, (uint32_t)n_atoms)]);
    return;
  }
  static const char *const forms[] = {"tanh(#)", "sigmoid(#)", "relu(#)", "-#", "(# + #)", "(tanh(#) * #)",
                                      "(# - 0.5 * #)", "tanh(# @ W1 + b)", "tanh(cat(#, #) @ W2)",
                                      "tanh(cat(#, #, #) @ W3)", "(# / (abs(#) + 1.0))", "(#[0:1] * #)",
                                      "mix(#, #)", "(#[H:2*H] + #)"};
  const char *f = forms[rg_next(g, sizeof forms / sizeof forms[0])];
  for (const char *c = f; *c; c++) {
    if (*c == '#' && !strncmp(c, "#[H:2*H]", 8)) { /* a slice of a cat of two inputs (rows or results) */
      rg_put(g, "cat(");
      rg_put(g, atoms[rg_next(g, (uint32_t)n_atoms)]);
      rg_put(g, ", ");
      rg_put(g, atoms[rg_next(g, (uint32_t)n_atoms)]);
      rg_put(g, ")[H:2*H]");
      c += 7;
    } else if (*c == '#') {
      rg_expr(g, atoms, n_atoms, depth - 1);
    } else {
      char s[2] = {*c, 0};
      rg_put(g, s);
    }
  }
}

static void rg_arms(rgen *g, const char *fname, const char *other, bool tup) {
  static const char *const pats[] = {"Node(Leaf(a), Leaf(c))", "Node(l, Leaf(c))", "Node(Leaf(a), r)",
                                     "Node(Node(p, q), r)", "Node(_, r)"};
  static const char *const pat_atoms[][3] = {{"emb[a]", "emb2[c]", "b"}, {"emb[c]"}, {"emb2[a]"}, {NULL}, {NULL}};
  static const char *const pat_trees[][3] = {{NULL}, {"l"}, {"r"}, {"p", "q", "r"}, {"r"}};
  int order[7], n = 0;
  int extra = (int)rg_next(g, 3), leaf_at = (int)rg_next(g, (uint32_t)extra + 1);
  bool used[5] = {0};
  for (int i = 0; i < extra; i++) {
    int k;
    do k = (int)rg_next(g, 5);
    while (used[k]);
    used[k] = true;
    if (i == leaf_at) order[n++] = -1;
    order[n++] = k;
  }
  if (leaf_at == extra) order[n++] = -1;
  order[n++] = 5; /* Node(l, r) last */
  for (int i = 0; i < n; i++) {
    const char *atoms[12];
    int na = 0;
    const char *const *trees = NULL;
    rg_put(g, "    ");
    if (order[i] == -1) {
      rg_put(g, "Leaf(w) => { ");
      atoms[na++] = "emb[w]", atoms[na++] = "emb2[w]";
    } else if (order[i] == 5) {
      static const char *const lr[] = {"l", "r", NULL};
      rg_put(g, "Node(l, r) => { ");
      atoms[na++] = "b";
      trees = lr;
    } else {
      rg_put(g, pats[order[i]]);
      rg_put(g, " => { ");
      for (int k = 0; k < 3 && pat_atoms[order[i]][k]; k++) atoms[na++] = pat_atoms[order[i]][k];
      trees = pat_trees[order[i]];
    }
    static const char *const hs[] = {"h0", "h1", "h2"}, *const cs[] = {"c0", "c1", "c2"};
    for (int k = 0; trees && k < 3 && trees[k]; k++) {
      const char *callee = other && rg_next(g, 10) < 3 ? other : fname;
      char s[80];
      if (tup) snprintf(s, sizeof s, "let (h%d, c%d) = %s(%s); ", k, k, callee, trees[k]);
      else snprintf(s, sizeof s, "let h%d = %s(%s); ", k, callee, trees[k]);
      rg_put(g, s);
      atoms[na++] = hs[k];
      if (tup) atoms[na++] = cs[k];
    }
    if (na == 0) atoms[na++] = "b";
    if (tup) rg_put(g, "(");
    rg_expr(g, atoms, na, 3);
    if (tup) {
      rg_put(g, ", ");
      rg_expr(g, atoms, na, 2);
      rg_put(g, ")");
    }
    rg_put(g, " },\n");
  }
}

static void random_model(uint64_t seed, char *out, size_t cap) {
  rgen g = {seed * 0x9E3779B97F4A7C15ull + 1, out, cap};
  for (int i = 0; i < 4; i++) rg_next(&g, 2);
  bool tup = rg_next(&g, 10) < 3, use_g = rg_next(&g, 2);
  const char *ret = tup ? "(f32[H], f32[H])" : "f32[H]";
  rg_put(&g, "type Tree = Leaf(word: i32) | Node(left: Tree, right: Tree)\n"
             "param emb : f32[V, H]\nparam emb2 : f32[V2, H]\nparam W1 : f32[H, H]\nparam W2 : f32[2*H, H]\n"
             "param W3 : f32[3*H, H]\nparam b : f32[H]\n"
             "fn mix(x: f32[H], y: f32[H]) -> f32[H] { let z = tanh(x @ W1 + y); 0.5 * (z + x) }\n");
  if (use_g) {
    rg_put(&g, "fn g(t: Tree) -> ");
    rg_put(&g, ret);
    rg_put(&g, " =\n  match t {\n");
    rg_arms(&g, "g", NULL, tup);
    rg_put(&g, "  }\n");
  }
  rg_put(&g, "fn f(t: Tree) -> ");
  rg_put(&g, ret);
  rg_put(&g, " =\n  match t {\n");
  rg_arms(&g, "f", use_g ? "g" : NULL, tup);
  rg_put(&g, "  }\n");
  switch (rg_next(&g, 3) + (use_g ? 0 : 3)) {
  case 0: case 3: rg_put(&g, "fn main(t: Tree) -> "), rg_put(&g, ret), rg_put(&g, " = f(t)\n"); break;
  case 1: /* main calls two functions on its own tree */
    rg_put(&g, tup ? "fn main(t: Tree) -> f32[H] { let (h, c) = f(t); let (u, v) = g(t); tanh(h + u) * c }\n"
                   : "fn main(t: Tree) -> f32[H] { let h = f(t); tanh(h + g(t)) }\n");
    break;
  default:
    rg_put(&g, tup ? "fn main(t: Tree) -> f32[H] { let (h, c) = f(t); tanh(h @ W1 + c) }\n"
                   : "fn main(t: Tree) -> f32[H] { let h = f(t); tanh(h @ W1 + b) }\n");
  }
}

/* Random models against the dynamic runtime: seeds 0 and 1 here (a few
 * seconds of C compiling), SHEAF_LINEAR_FUZZ=N for seeds 0 .. N-1 by hand.
 * A refusal is fine (with its reason); a model that linearizes must match. */
TEST(linear_review_random_models) {
  sh_dataset d;
  if (!open_ewt(&d)) return;
  const char *env = getenv("SHEAF_LINEAR_FUZZ");
  int n = env && atoi(env) > 0 ? atoi(env) : 2, matched = 0, refused = 0;
  for (int s = 0; s < n; s++) {
    char text[8192], name[32], why[512];
    random_model((uint64_t)s, text, sizeof text);
    snprintf(name, sizeof name, "random%d.sf", s);
    int rc = diff_model(name, text, (const char *[]){"H=4", "V2=7", NULL}, &d, 24, why, sizeof why);
    if (!CHECK(rc >= 0)) fprintf(stderr, "seed %d failed\n", s);
    matched += rc == 1, refused += rc == 0;
    if (rc == 0 && env) fprintf(stderr, "seed %d refused: %s\n", s, why);
  }
  if (env) fprintf(stderr, "random models: %d matched, %d refused of %d\n", matched, refused, n);
  CHECK(matched * 2 >= n); /* the generator makes models the mode takes, most of the time */
  sh_dataset_free(&d);
}

/* No C compiler (SHEAF_CC=/nonexistent, an empty cache): --mode linear
 * fails naming the reason and prints no output; --mode auto runs the
 * dynamic runtime, its outputs the same as --mode dynamic's, and the
 * summary says why in one line (not the kernel's source after it). */
TEST(linear_review_cli_no_compiler) {
  const char *bin = th_sheaf_bin();
  if (!bin) return;
  static const char trees[] = "(3 (2 a) (2 (1 b) (1 c)))\n(1 x)\n(2 (2 a) (2 b))\n";
  const char *data = th_write_tmp("nocc.ptb", trees, sizeof trees - 1);
  const char *cache = th_tmp_path("nocc_cache"); /* empty: every kernel must be compiled */
  char *out = malloc(1 << 16), cmd[2048], want_path[512], got_path[512];
  if (!CHECK(data && cache && out)) {
    free(out);
    return;
  }
  snprintf(want_path, sizeof want_path, "%s.dyn", data);
  snprintf(got_path, sizeof got_path, "%s.auto", data);
  const char *env = "SHEAF_CC=/nonexistent SHEAF_CACHE_DIR=";
  snprintf(cmd, sizeof cmd, "%s%s %s run examples/treefc.sf --data %s --size H=3 --mode linear", env, cache, bin,
           data);
  int rc = th_run(cmd, out, 1 << 16);
  CHECK(rc != 0);
  CHECK_CONTAINS(out, "--mode linear: ");
  CHECK_CONTAINS(out, "no C compiler");
  CHECK(strstr(out, "\n0 ") == NULL && strncmp(out, "0 ", 2) != 0); /* no instance's output */
  snprintf(cmd, sizeof cmd, "%s %s run examples/treefc.sf --data %s --size H=3 --mode dynamic --out %s", env, bin, data,
           want_path);
  CHECK_EQ_INT(th_run(cmd, out, 1 << 16), 0);
  snprintf(cmd, sizeof cmd, "%s%s %s run examples/treefc.sf --data %s --size H=3 --out %s", env, cache, bin, data,
           got_path);
  CHECK_EQ_INT(th_run(cmd, out, 1 << 16), 0);
  const char *why = strstr(out, "mode dynamic (--mode auto; not linear: ");
  if (CHECK(why != NULL)) {
    const char *nl = strchr(why, '\n');
    CHECK(nl && strstr(why, "no C compiler") && strstr(why, "no C compiler") < nl);
    CHECK(nl && nl[-1] == ')'); /* the reason in one line */
  }
  size_t nw = 0, ng = 0;
  char *want = NULL;
  const char *w = th_read_file(want_path, &nw);
  if (CHECK(w != NULL) && (want = malloc(nw + 1))) memcpy(want, w, nw + 1);
  const char *got = th_read_file(got_path, &ng);
  if (CHECK(want && got)) {
    CHECK(nw > 0 && nw == ng && memcmp(want, got, nw) == 0);
  }
  free(want);
  free(out);
}
