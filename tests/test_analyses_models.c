/*
 * test_analyses_models.c — small hand-written models where each static
 * analysis (src/compile/analyze*.c) has a known answer, checked on the
 * result structures: a param-only `W1 + W2` (hoistable) and `emb[0]` beside
 * a per-instance `emb[w] @ M`, one in a generic function (not hoistable); an if whose arms end at depths 1 and 3 (2
 * ghost ops on the short one); a recursive function's leaf arm at constant
 * depths 0..2; a while loop and an if on values read from tensors (control
 * points); host-only counts; a straight-line helper inlined into its
 * caller's region with its inputs and outputs.
 */
#include <stdlib.h>

#include "base/buf.h"
#include "compile/analyze.h"
#include "harness.h"

typedef struct model {
  sh_module m;
  sh_analyses a;
  const char *src;
  bool ok;
} model;

static void model_load(model *x, const char *src) {
  memset(x, 0, sizeof *x);
  x->src = src;
  sheaf_ctx *ctx = th_ctx();
  sheaf_status st = sh_lang_compile(&x->m, ctx, "t.sf", src, strlen(src));
  if (!CHECK_EQ_INT(st, SHEAF_OK)) {
    sh_buf b;
    sh_buf_init(&b, ctx);
    sh_diags_render(&x->m.diags, &b);
    fprintf(stderr, "%s\n", sh_buf_cstr(&b));
    sh_buf_free(&b);
    return;
  }
  x->ok = CHECK_EQ_INT(sh_analyze(&x->m, &x->a), SHEAF_OK);
}

static void model_free(model *x) {
  sh_analyses_free(&x->a);
  sh_module_free(&x->m);
}

/* The source text of node id equals s. */
static bool is_text(const model *x, int32_t id, const char *s) {
  const sh_ast *e = x->a.nodes[id].e;
  return e->span.len == strlen(s) && !memcmp(x->src + e->span.off, s, e->span.len);
}

/* The node whose text is s (the first in pre-order); -1 if none. */
static int32_t find(const model *x, const char *s) {
  for (int32_t i = 0; i < x->a.n_nodes; i++)
    if (is_text(x, i, s)) return i;
  return -1;
}

static char *report(const model *x) {
  sh_buf b;
  sh_buf_init(&b, th_ctx());
  CHECK_EQ_INT(sh_analyses_report(&x->a, &b, true), SHEAF_OK);
  char *r = strdup(sh_buf_cstr(&b));
  sh_buf_free(&b);
  return r;
}

TEST(analyses_taint_param_only_sum) {
  model x;
  model_load(&x,
             "param emb : f32[V, H]\nparam W1 : f32[H, H]\nparam W2 : f32[H, H]\nparam b : f32[H]\n"
             "fn main(ws: list[i32]) -> f32[H] {\n"
             "  let M = W1 + W2;\n"
             "  let hs = for w in ws { tanh(emb[w] @ M + b) };\n"
             "  sum(hs) + emb[0] + (emb[1] @ W1)\n"
             "}\n");
  REQUIRE(x.ok);
  /* exactly the maximal param-only ops: W1 + W2, emb[0] and emb[1] @ W1 */
  REQUIRE_EQ_INT(x.a.n_hoist, 3);
  CHECK(is_text(&x, x.a.hoist[0].node, "W1 + W2"));
  CHECK(is_text(&x, x.a.hoist[1].node, "emb[0]"));
  CHECK(is_text(&x, x.a.hoist[2].node, "emb[1] @ W1"));
  for (int i = 0; i < 3; i++) CHECK(x.a.hoist[i].hoistable);
  /* per instance: emb[w] and the products with it */
  int32_t ew = find(&x, "emb[w]"), prod = find(&x, "emb[w] @ M");
  REQUIRE(ew >= 0 && prod >= 0);
  CHECK(!sh_an_tainted(x.a.nodes[ew].taint));
  CHECK(x.a.nodes[ew].taint & SH_AN_T_DATA);
  /* the @ with M: its right operand param-only, not a parameter by name */
  REQUIRE_EQ_INT(x.a.n_matmul, 2);
  CHECK_EQ_INT(x.a.matmul[0].node, prod);
  CHECK(!x.a.matmul[0].rhs_param && x.a.matmul[0].rhs_tainted);
  CHECK(x.a.matmul[1].rhs_param && !x.a.matmul[1].rhs_tainted);
  char *r = report(&x);
  CHECK_CONTAINS(r, "t.sf:6:11: W1 + W2 (fn main): hoistable, computed once per batch\n");
  CHECK_CONTAINS(r, "emb[w] @ M: right operand param-only, packable once per batch\n");
  free(r);
  model_free(&x);
}

TEST(analyses_taint_in_a_helper) {
  model x;
  model_load(&x,
             "param W1 : f32[H, H]\nparam W2 : f32[H, H]\nparam emb : f32[V, H]\n"
             "fn scale(v: f32[H]) -> f32[H] { v * (W1[0] + W2[0]) + v }\n"
             "fn main(ws: list[i32]) -> f32[H] { scale(emb[ws[0]]) }\n");
  REQUIRE(x.ok);
  /* W1[0] + W2[0] is param-only inside the helper (its operand v is not) */
  REQUIRE_EQ_INT(x.a.n_hoist, 1);
  CHECK(is_text(&x, x.a.hoist[0].node, "W1[0] + W2[0]"));
  CHECK(x.a.hoist[0].hoistable);
  CHECK_EQ_INT(x.a.nodes[x.a.hoist[0].node].fn, 0);
  int32_t prod = find(&x, "v * (W1[0] + W2[0]) + v");
  REQUIRE(prod >= 0);
  CHECK(!sh_an_tainted(x.a.nodes[prod].taint));
  model_free(&x);
}

TEST(analyses_taint_generic_size_not_hoistable) {
  model x;
  model_load(&x,
             "param emb : f32[V, H]\nparam b : f32[H]\n"
             "fn f(v: f32[N]) -> f32[N] { v + zeros(N) * max(b) }\n"
             "fn main(ws: list[i32]) -> f32[H] { f(emb[ws[0]]) + max(b) * b }\n");
  REQUIRE(x.ok);
  /* zeros(N) * max(b): param-only, but f32[N] differs per call site; max(b) * b: hoistable */
  REQUIRE_EQ_INT(x.a.n_hoist, 2);
  CHECK(is_text(&x, x.a.hoist[0].node, "zeros(N) * max(b)"));
  CHECK(!x.a.hoist[0].hoistable);
  CHECK(is_text(&x, x.a.hoist[1].node, "max(b) * b"));
  CHECK(x.a.hoist[1].hoistable);
  char *r = report(&x);
  CHECK_CONTAINS(r, "t.sf:3:33: zeros(N) * max(b) (fn f): not hoistable: its shape uses a generic size of the function\n");
  free(r);
  model_free(&x);
}

TEST(analyses_ghost_ops_if_depth_1_and_3) {
  model x;
  model_load(&x,
             "param emb : f32[V, H]\n"
             "fn main(ws: list[i32]) -> f32[H] {\n"
             "  let x = emb[ws[0]];\n"
             "  if len(ws) > 2 { tanh(x) } else { tanh(sigmoid(tanh(x))) }\n"
             "}\n");
  REQUIRE(x.ok);
  REQUIRE_EQ_INT(x.a.n_ghost, 1);
  const sh_an_ghost *g = &x.a.ghost[0];
  REQUIRE_EQ_INT(g->n_arms, 2);
  CHECK(g->aligned_statically);
  CHECK_EQ_INT(x.a.nodes[g->arm_node[0]].depth.c, 1); /* emb[...] at 0, tanh at 1 */
  CHECK_EQ_INT(x.a.nodes[g->arm_node[1]].depth.c, 3);
  CHECK_EQ_INT(g->pad[0], 2);
  CHECK_EQ_INT(g->pad[1], 0);
  char *r = report(&x);
  CHECK_CONTAINS(r, "t.sf:4:3: if (fn main): then at 1 +2 ghost ops, else at 3\n");
  CHECK_CONTAINS(r, "ghost ops: 1 branch producing tensors, 1 arm to pad\n");
  free(r);
  model_free(&x);
}

TEST(analyses_ghost_ops_symbolic_arms) {
  model x;
  model_load(&x,
             "type Tree = Leaf(word: i32) | Node(left: Tree, right: Tree)\n"
             "param emb : f32[V, H]\n"
             "fn enc(t: Tree) -> f32[H] = match t {\n"
             "  Leaf(w) => emb[w],\n"
             "  Node(l, r) => if len([1]) > 0 { tanh(enc(l)) } else { sigmoid(tanh(tanh(enc(l)))) },\n"
             "}\n"
             "fn main(t: Tree) -> f32[H] { enc(t) }\n");
  REQUIRE(x.ok);
  /* the match: a leaf at 0 against R+k: not static; the if: R1+1 against R2+3: not one symbol */
  REQUIRE_EQ_INT(x.a.n_ghost, 2);
  CHECK(!x.a.ghost[0].aligned_statically);
  CHECK_EQ_INT(x.a.ghost[0].pad[0], -1);
  CHECK(!x.a.ghost[1].aligned_statically);
  model_free(&x);
}

TEST(analyses_leaf_arm_constant_depth) {
  model x;
  model_load(&x,
             "type Tree = Leaf(word: i32) | Node(left: Tree, right: Tree)\n"
             "param emb : f32[V, H]\nparam W : f32[H, H]\n"
             "fn enc(t: Tree) -> f32[H] = match t {\n"
             "  Leaf(w) => tanh(emb[w] @ W),\n"
             "  Node(l, r) => enc(l) + enc(r),\n"
             "}\n"
             "fn main(t: Tree) -> f32[H] { enc(t) }\n");
  REQUIRE(x.ok);
  int32_t leaf = find(&x, "tanh(emb[w] @ W)"), node = find(&x, "enc(l) + enc(r)");
  REQUIRE(leaf >= 0 && node >= 0);
  const sh_an_depth *d = &x.a.nodes[leaf].depth;
  CHECK_EQ_INT(d->c, 2);
  CHECK(!d->dyn);
  for (int k = 0; k < SH_AN_MAX_SYM; k++) CHECK_EQ_INT(d->off[k], -1);
  /* the node arm: R1 + 1 and R2 + 1 */
  d = &x.a.nodes[node].depth;
  CHECK_EQ_INT(d->off[0], 1);
  CHECK_EQ_INT(d->off[1], 1);
  CHECK_EQ_INT(x.a.fns[0].n_sym, 2);
  CHECK_EQ_INT(x.a.fns[0].n_ops, 4);
  char *r = report(&x);
  CHECK_CONTAINS(r, "    arm Leaf(w): 3 ops at depths 0..2 from the leaf: all leaves' work batches together\n");
  CHECK_CONTAINS(r, "    arm Node(l, r): 1 op at depths max(R1+1, R2+1) (after recursive calls)\n");
  CHECK_CONTAINS(r, "    R1 = enc(l) at t.sf:6:17\n");
  free(r);
  model_free(&x);
}

TEST(analyses_control_points_while_on_tensor) {
  model x;
  model_load(&x,
             "param emb : f32[V, H]\n"
             "fn main(ws: list[i32]) -> f32[H] {\n"
             "  let (h, k) = while (h, k) = (emb[ws[0]], 0); item(sum(h)) < 1.0 max 5 { (tanh(h), k + 1) };\n"
             "  let n = if k > 2 { 1 } else { 2 };\n"
             "  if item(sum(h)) > 0.5 { h } else { -h }\n"
             "}\n");
  REQUIRE(x.ok);
  /* two waits (item), the while and the last if; not the if on k (a host counter, but
     it flows from the loop whose condition reads a tensor: it does read one) */
  int waits = 0, whiles = 0, ifs = 0;
  for (int i = 0; i < x.a.n_ctl; i++) {
    const sh_ast *e = x.a.nodes[x.a.ctl[i].node].e;
    waits += x.a.ctl[i].wait;
    whiles += e->kind == SH_EX_WHILE;
    ifs += e->kind == SH_EX_IF;
  }
  CHECK_EQ_INT(waits, 2);
  CHECK_EQ_INT(whiles, 1);
  CHECK_EQ_INT(ifs, 2);
  char *r = report(&x);
  CHECK_CONTAINS(r, "t.sf:3:16 (fn main): while on a value read from a tensor: item(sum(h)) < 1.0\n");
  CHECK_CONTAINS(r, "host f32 2");
  free(r);
  model_free(&x);
}

TEST(analyses_no_control_points_on_structure) {
  model x;
  model_load(&x,
             "param emb : f32[V, H]\n"
             "fn main(ws: list[i32]) -> f32[H] {\n"
             "  let k = len(ws);\n"
             "  if k > 2 { emb[ws[0]] } else { tanh(emb[ws[0]]) }\n"
             "}\n");
  REQUIRE(x.ok);
  CHECK_EQ_INT(x.a.n_ctl, 0);
  /* host: k > 2 (i32/bool), len(ws), ws[0] twice (lists) */
  CHECK_EQ_INT(x.a.fns[0].n_host[SH_AN_H_SCALAR], 1);
  CHECK_EQ_INT(x.a.fns[0].n_host[SH_AN_H_LIST], 3);
  char *r = report(&x);
  CHECK_CONTAINS(r, "control points: none");
  CHECK_CONTAINS(r, "    t.sf:4:6: i32/bool: k > 2\n"); /* --verbose positions */
  free(r);
  model_free(&x);
}

TEST(analyses_regions_inline_helper) {
  model x;
  model_load(&x,
             "type Tree = Leaf(word: i32) | Node(left: Tree, right: Tree)\n"
             "param emb : f32[V, H]\nparam W : f32[2*H, H]\nparam b : f32[H]\n"
             "fn cell(a: f32[H], c: f32[H]) -> f32[H] { tanh(cat(a, c) @ W + b) }\n"
             "fn enc(t: Tree) -> f32[H] = match t {\n"
             "  Leaf(w) => emb[w],\n"
             "  Node(l, r) => { let hl = enc(l); let hr = enc(r); let s = cell(hl, hr); s * s },\n"
             "}\n"
             "fn main(t: Tree) -> f32[H] { enc(t) }\n");
  REQUIRE(x.ok);
  /* cell alone; enc's leaf arm; enc's node arm with cell inlined (cat, affine, tanh, *) */
  REQUIRE_EQ_INT(x.a.n_regions, 3);
  const sh_an_region *r = &x.a.regions[2];
  CHECK(!strcmp(r->label, "fn enc arm Node(l, r)"));
  int ops = 0;
  for (int i = 0; i < r->n_ops; i++) ops += x.a.nodes[r->ops[i]].cls == SH_AN_OP && !x.a.nodes[r->ops[i]].fused;
  CHECK_EQ_INT(ops, 4);
  char *rep = report(&x);
  CHECK_CONTAINS(rep, "fn enc arm Node(l, r) [8:61]: 4 ops; recursive results hl hr; params W b; outputs result\n");
  CHECK_CONTAINS(rep, "fn enc arm Leaf(w) [7:14]: 1 op; inputs w; params emb; outputs result\n");
  free(rep);
  model_free(&x);
}
