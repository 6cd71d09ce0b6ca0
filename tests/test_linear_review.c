/*
 * test_linear_review.c — models the linearized mode's check once accepted
 * but whose generated kernels did not compile (issue 15 review): a unary
 * function of a cat of computed vectors, a parameter matrix times a
 * per-row matrix, a parameter matrix as a result, a per-row f32[1] times a
 * parameter matrix. sh_lin_check (the verdict `sheaf check --analyses`
 * prints and `--mode auto` trusts) must refuse each with its position.
 */
#include "compile/linear.h"
#include "harness.h"
#include "test_linear_util.h"

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
