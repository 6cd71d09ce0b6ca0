/*
 * test_lang.c — the model language's front end: tokens, the parser's trees
 * (precedence, sugar, recovery), canonical symbolic sizes and their
 * unification, the checker on the examples and on the features one by one
 * (generic sizes, broadcasting, lists, patterns), the typed-AST annotations
 * lowering relies on, every ```sheaf block of docs/LANGUAGE.md (checked,
 * then run on EWT instances), allocation failure at every point, and
 * random mutations of the examples.
 */
#include <math.h>
#include <stdlib.h>

#include "base/buf.h"
#include "base/file.h"
#include "harness.h"
#include "io/dataset.h"
#include "lang/check.h"
#include "lang/interp.h"

/* Compiles text; returns the status and (in out) rendered diagnostics. */
static sheaf_status compile(sheaf_ctx *ctx, const char *src, char *out, size_t cap) {
  sh_module m;
  sheaf_status st = sh_lang_compile(&m, ctx, "t.sf", src, strlen(src));
  sh_buf b;
  sh_buf_init(&b, ctx);
  sh_diags_render(&m.diags, &b);
  if (out) snprintf(out, cap, "%s", sh_buf_cstr(&b));
  sh_buf_free(&b);
  sh_module_free(&m);
  return st;
}

#define CHECK_COMPILES(ctx, src)                                                      \
  do {                                                                                \
    char d_[4096];                                                                    \
    if (compile(ctx, src, d_, sizeof d_) != SHEAF_OK)                                 \
      th_fail(__FILE__, __LINE__, "does not compile:\n%s\n%s", src, d_);             \
  } while (0)

#define CHECK_ERROR(ctx, src, msg)                                                    \
  do {                                                                                \
    char d_[4096];                                                                    \
    CHECK_EQ_INT(compile(ctx, src, d_, sizeof d_), SHEAF_ERR_PARSE);                  \
    CHECK_CONTAINS(d_, msg);                                                          \
  } while (0)

/* Parses only; dumps the syntax tree. */
static void dump(sheaf_ctx *ctx, const char *src, char *out, size_t cap) {
  sh_module m;
  sh_module_init(&m, ctx, "t.sf", src, strlen(src));
  sh_buf b;
  sh_buf_init(&b, ctx);
  if (sh_parse(&m) == SHEAF_OK) sh_ast_dump(&b, &m);
  else sh_diags_render(&m.diags, &b);
  snprintf(out, cap, "%s", sh_buf_cstr(&b));
  sh_buf_free(&b);
  sh_module_free(&m);
}

/* ---------------------------------------------------------------- lexer */

TEST(lang_lexer_tokens) {
  sheaf_ctx *ctx = th_ctx();
  sh_lang_pool pool;
  sh_lang_pool_init(&pool, ctx);
  sh_symtab syms;
  sh_symtab_init(&syms, ctx, &pool);
  const char *src = "fn f(x) -> 0..n # comment\n x[a:b] @ W => 2.5e-1 1e3 == != <= && || _ _a";
  sh_diags d;
  sh_diags_init(&d, "t.sf", src, strlen(src));
  sh_tokens t;
  REQUIRE_OK(ctx, sh_lex(src, strlen(src), &syms, &pool, &d, &t));
  const sh_tok_kind want[] = {
      SH_TK_FN,     SH_TK_IDENT, SH_TK_LPAREN,   SH_TK_IDENT,    SH_TK_RPAREN, SH_TK_ARROW,
      SH_TK_INT,    SH_TK_DOTDOT, SH_TK_IDENT,   SH_TK_IDENT,    SH_TK_LBRACKET, SH_TK_IDENT,
      SH_TK_COLON,  SH_TK_IDENT, SH_TK_RBRACKET, SH_TK_AT,       SH_TK_IDENT,  SH_TK_FATARROW,
      SH_TK_FLOAT,  SH_TK_FLOAT, SH_TK_EQ,       SH_TK_NE,       SH_TK_LE,     SH_TK_ANDAND,
      SH_TK_OROR,   SH_TK_UNDERSCORE, SH_TK_IDENT, SH_TK_EOF};
  REQUIRE_EQ_INT(t.n, SH_ARRAY_LEN(want));
  for (size_t i = 0; i < t.n; i++) CHECK_EQ_INT(t.v[i].kind, want[i]);
  CHECK_EQ_INT(t.v[6].v.ival, 0);
  CHECK_NEAR(t.v[18].v.fval, 0.25, 1e-12);
  CHECK_NEAR(t.v[19].v.fval, 1000.0, 1e-9);
  CHECK_EQ_INT(t.v[9].span.line, 2); /* x after the comment */
  CHECK_EQ_INT(t.v[9].span.col, 2);
  CHECK_EQ_INT(t.v[1].v.sym, t.v[1].v.sym);
  CHECK_EQ_STR(sh_sym_name(&syms, t.v[3].v.sym), "x");
  CHECK(t.v[3].v.sym == t.v[9].v.sym); /* interned */
  CHECK_EQ_INT(d.n_errors, 0);
  sh_symtab_free(&syms);
  sh_lang_pool_destroy(&pool);
}

TEST(lang_lexer_errors_are_diagnostics) {
  sheaf_ctx *ctx = th_ctx();
  CHECK_ERROR(ctx, "fn main(x: list[i32]) -> i32 { 2147483648 }",
              "t.sf:1:32: error: integer literal 2147483648 does not fit in i32");
  CHECK_COMPILES(ctx, "fn main(x: list[i32]) -> i32 { 2147483647 }");
  CHECK_ERROR(ctx, "fn main(x: list[i32]) -> i32 { 12ab }", "invalid number '12ab'");
  CHECK_ERROR(ctx, "fn main(x: list[i32]) -> i32 { \xC3\xA9 }", "unexpected byte 0xC3");
}

/* --------------------------------------------------------------- parser */

TEST(lang_parser_precedence_and_sugar) {
  sheaf_ctx *ctx = th_ctx();
  char out[4096];
  dump(ctx, "fn f(a: i32) -> i32 = a + b * c @ W - -d[1:H] || !e && x < 2", out, sizeof out);
  CHECK_EQ_STR(out, "(fn f ((a i32)) i32 (|| (- (+ a (@ (* b c) W)) (- (slice d 1 H))) "
                    "(&& (! e) (< x 2))))\n");
  dump(ctx, "fn f(t: T) -> (f32[2*H+1], list[i32]) { let (a, _): i32 = g(t,); "
            "if a { 1 } else if b { 2 } else { (x[:H], x[H:], [1, 2]) } }",
       out, sizeof out);
  CHECK_EQ_STR(out, "(fn f ((t T)) (tuple (f32 (+ (* 2 H) 1)) (list i32)) (block (let (tuple a _) : "
                    "i32 (g t)) (if a (block 1) (if b (block 2) (block (tuple (slice x _ H) "
                    "(slice x H _) (list 1 2)))))))\n");
  dump(ctx, "type T = | A | B(x: i32, T)\nsize H = 4\nsize K\nparam W: f32[H, K]\n"
            "fn g(t: T) -> i32 = match t { A => 0, B(n, _) => { n } C(0) => 1 }",
       out, sizeof out);
  CHECK_EQ_STR(out, "(type T (A) (B x:i32 T))\n(size H 4)\n(size K)\n(param W (f32 H K))\n"
                    "(fn g ((t T)) i32 (match t (A => 0) ((B n _) => (block n)) ((C 0) => 1)))\n");
  dump(ctx, "fn f(xs: list[i32]) -> i32 = phase 2 { for (i, j) in 0..len(xs) { i } }", out, sizeof out);
  CHECK_EQ_STR(out, "(fn f ((xs (list i32))) i32 (phase 2 (block (for (tuple i j) 0 .. (len xs) (block i)))))\n");
}

TEST(lang_parser_recovers_and_reports_several_errors) {
  sheaf_ctx *ctx = th_ctx();
  char out[8192];
  dump(ctx, "fn a() -> i32 { let x = ; x }\nfn b() -> i32 { let y = (1; y }\nparam p f32[2]\n"
            "fn c() -> i32 { 1 }",
       out, sizeof out);
  CHECK_CONTAINS(out, "t.sf:1:25: error: expected an expression but found ';'");
  CHECK_CONTAINS(out, "t.sf:2:27: error: expected ')' but found ';'");
  CHECK_CONTAINS(out, "t.sf:3:9: error: expected ':' but found 'f32'");
  /* `size` is a keyword only at the start of a declaration */
  CHECK_COMPILES(ctx, "size H = 3\nfn size(xs: list[i32]) -> i32 { let size = len(xs); size }\n"
                      "fn main(xs: list[i32]) -> i32 { size(xs) + H }");
}

TEST(lang_parser_depth_limits) {
  sheaf_ctx *ctx = th_ctx();
  char *src = malloc(200000);
  REQUIRE(src);
  /* 100k nested parentheses, brackets, unary minus: errors, no overflow */
  const char *pre[] = {"(", "[", "-", "f(", "{"};
  for (size_t k = 0; k < SH_ARRAY_LEN(pre); k++) {
    size_t n = strlen(strcpy(src, "fn main(x: list[i32]) -> i32 = "));
    for (int i = 0; i < 50000; i++) n += strlen(strcpy(src + n, pre[k]));
    strcpy(src + n, "1");
    CHECK_ERROR(ctx, src, "nesting is too deep (more than 256 levels)");
  }
  /* a long flat chain is fine up to the tree-depth limit, then an error */
  size_t n = strlen(strcpy(src, "fn main(x: list[i32]) -> i32 = 1"));
  for (int i = 0; i < 1000; i++) n += strlen(strcpy(src + n, " + 1"));
  CHECK_COMPILES(ctx, src);
  for (int i = 0; i < 30000; i++) n += strlen(strcpy(src + n, " + 1"));
  CHECK_ERROR(ctx, src, "expression is nested too deeply");
  free(src);
}

/* ---------------------------------------------------------------- sizes */

TEST(lang_sizes_canonical_forms_and_unification) {
  sheaf_ctx *ctx = th_ctx();
  sh_lang_pool pool;
  sh_lang_pool_init(&pool, ctx);
  sh_symtab syms;
  sh_symtab_init(&syms, ctx, &pool);
  sh_sizevars sv;
  sh_sizevars_init(&sv, ctx, &syms);
  sh_span at = {0, 0, 1, 1};
  uint32_t H = sh_sizevar_new(&sv, sh_symtab_intern(&syms, "H", 1), SH_SV_GLOBAL, at);
  uint32_t E = sh_sizevar_new(&sv, sh_symtab_intern(&syms, "E", 1), SH_SV_GLOBAL, at);
  uint32_t N = sh_sizevar_new(&sv, sh_symtab_intern(&syms, "N", 1), SH_SV_FLEX, at);
  sh_size h, e, n, one, two, a, b, c;
  sh_size_var(&h, H);
  sh_size_var(&e, E);
  sh_size_var(&n, N);
  sh_size_const(&one, 1);
  sh_size_const(&two, 2);
  sh_buf buf;
  sh_buf_init(&buf, ctx);
#define PRINTS(s, text)                          \
  do {                                           \
    sh_buf_clear(&buf);                          \
    sh_size_print(&buf, &sv, &(s));              \
    CHECK_EQ_STR(sh_buf_cstr(&buf), text);       \
  } while (0)
  CHECK(sh_size_add(&a, &h, &h) && sh_size_mul(&b, &two, &h) && sh_size_equal(&a, &b));
  PRINTS(a, "2*H");
  CHECK(sh_size_add(&a, &h, &one) && sh_size_sub(&b, &h, &one) && sh_size_mul(&c, &a, &b));
  PRINTS(c, "H*H - 1"); /* (H+1)(H-1) */
  CHECK(sh_size_add(&a, &e, &b));
  PRINTS(a, "H + E - 1");
  CHECK(sh_size_sub(&a, &h, &h));
  PRINTS(a, "0");
  CHECK_EQ_INT(sh_size_sign(&c), 1);   /* H*H - 1 >= 0 for H >= 1 */
  CHECK(sh_size_sub(&a, &one, &h) && sh_size_sub(&a, &a, &one));
  CHECK_EQ_INT(sh_size_sign(&a), -1);  /* -H < 0 */
  CHECK(sh_size_sub(&a, &h, &e));
  CHECK_EQ_INT(sh_size_sign(&a), 0);   /* H - E: unknown */
  /* unification binds a flexible size: 2*N = 4*H gives N = 2*H */
  sh_size four_h, two_n;
  CHECK(sh_size_mul(&two_n, &two, &n) && sh_size_add(&four_h, &h, &h) && sh_size_add(&four_h, &four_h, &four_h));
  CHECK(!sh_size_unify(&sv, &two_n, &h)); /* 2*N = H has no solution in general */
  CHECK(sh_size_unify(&sv, &two_n, &four_h));
  PRINTS(n, "2*H");
  CHECK(sv.v[N].bound);
  CHECK(sh_size_unify(&sv, &n, &b) == false); /* N is now 2*H, not H - 1 */
  /* values of `size H = 3` are used when comparing, not when printing */
  sv.v[H].has_value = true;
  sv.v[H].value = 3;
  sh_size six;
  sh_size_const(&six, 6);
  CHECK(sh_size_unify(&sv, &n, &six));
  PRINTS(n, "2*H");
  /* overflow and complexity are failures, not wrong answers */
  sh_size big;
  sh_size_const(&big, INT64_MAX);
  CHECK(!sh_size_add(&a, &big, &one));
  CHECK(sh_size_mul(&a, &h, &h) && sh_size_mul(&a, &a, &h));
  CHECK(!sh_size_mul(&a, &a, &h)); /* degree 4 */
#undef PRINTS
  sh_buf_free(&buf);
  sh_sizevars_free(&sv);
  sh_symtab_free(&syms);
  sh_lang_pool_destroy(&pool);
}

/* -------------------------------------------------------------- checker */

static const char *const examples[] = {"examples/treelstm.sf", "examples/childsum.sf",
                                       "examples/treefc.sf", "examples/mvrnn.sf",
                                       "examples/bilstm.sf"};

TEST(lang_examples_check) {
  sheaf_ctx *ctx = th_ctx();
  for (size_t i = 0; i < SH_ARRAY_LEN(examples); i++) {
    char *src;
    size_t len;
    REQUIRE_OK(ctx, sh_file_read(ctx, examples[i], &src, &len));
    sh_module m;
    sheaf_status st = sh_lang_compile(&m, ctx, examples[i], src, len);
    if (st != SHEAF_OK) {
      sh_buf b;
      sh_buf_init(&b, ctx);
      sh_diags_render(&m.diags, &b);
      th_fail(__FILE__, __LINE__, "%s:\n%s", examples[i], sh_buf_cstr(&b));
      sh_buf_free(&b);
    } else {
      CHECK(m.main != NULL);
    }
    sh_module_free(&m);
    sh_free(ctx, src, len + 1);
  }
}

TEST(lang_examples_via_cli) {
  if (!th_sheaf_bin()) return;
  static char out[1 << 16];
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s check examples/treelstm.sf examples/childsum.sf examples/treefc.sf "
                            "examples/mvrnn.sf examples/bilstm.sf", th_sheaf_bin());
  CHECK_EQ_INT(th_run(cmd, out, sizeof out), 0);
  CHECK_CONTAINS(out, "examples/treelstm.sf: ok\nsizes: V E H C");
  CHECK_CONTAINS(out, "param W_node: f32[2*H, 5*H]\n");
  CHECK_CONTAINS(out, "fn main(t: Tree) -> f32[C]  [entry]\n");
  CHECK_CONTAINS(out, "fn tree(t: Tree) -> (f32[H], f32[H])  [recursive]\n");
  CHECK_CONTAINS(out, "type Dep = Dep(word: i32, kids: list[Dep])\n");
  CHECK_CONTAINS(out, "param emb_mat: f32[Vm, H*H] = normal + identity_rows\n");
  CHECK_CONTAINS(out, "param W_fwd: f32[E + H, 4*H]\n");
  CHECK_CONTAINS(out, "fn main(words: list[i32]) -> list[f32[T]]  [entry]\n");
  snprintf(cmd, sizeof cmd, "%s check", th_sheaf_bin());
  CHECK_EQ_INT(th_run(cmd, out, sizeof out), 2);
  snprintf(cmd, sizeof cmd, "%s check /nonexistent.sf", th_sheaf_bin());
  CHECK_EQ_INT(th_run(cmd, out, sizeof out), 1);
  CHECK_CONTAINS(out, "/nonexistent.sf");
}

TEST(lang_checker_features) {
  sheaf_ctx *ctx = th_ctx();
  /* generic sizes: one function used at two sizes; N+1 binds N = H - 1 */
  CHECK_COMPILES(ctx, "param emb: f32[V, H]\n"
                      "fn add(a: f32[N], b: f32[N]) -> f32[N] { a + b }\n"
                      "fn drop1(x: f32[N + 1]) -> f32[N] { x[1:N + 1] }\n"
                      "fn main(xs: list[i32]) -> f32[2*H - 1] {\n"
                      "  let x = emb[xs[0]];\n"
                      "  let y: f32[2*H] = add(cat(x, x), cat(x, x));\n"
                      "  let z: f32[H] = add(x, x);\n"
                      "  drop1(y) * 0.5\n"
                      "}");
  CHECK_ERROR(ctx, "fn add(a: f32[N], b: f32[N]) -> f32[N] { a + b }\n"
                   "param emb: f32[V, H]\nfn main(xs: list[i32]) -> f32[H] { add(emb[0], cat(emb[0], emb[1])) }",
              "argument 2 of 'add': expected f32[H] but got f32[2*H]");
  /* a generic body cannot assume its size */
  CHECK_ERROR(ctx, "fn f(a: f32[N]) -> f32[N] { a + zeros(3) }\nfn main(x: list[i32]) -> i32 { 1 }",
              "mismatched shapes for '+': f32[N] and f32[3]");
  /* size declarations fix values: f32[H] and f32[4] agree when H = 4 */
  CHECK_COMPILES(ctx, "size H = 4\nparam b: f32[4]\nfn main(x: list[i32]) -> f32[H] { b }");
  CHECK_ERROR(ctx, "size H = 4\nparam b: f32[5]\nfn main(x: list[i32]) -> f32[H] { b }",
              "expected f32[H] but got f32[5]");
  /* scalars, comparisons, lists, for, fold, scan, rev, nested patterns */
  CHECK_COMPILES(ctx, "type T = L(i32) | N(T, T)\n"
                      "fn inc(acc: i32, x: i32) -> i32 { acc + x % 3 }\n"
                      "fn leaves(t: T) -> i32 = match t { L(_) => 1, N(L(_), r) => 1 + leaves(r), N(l, r) => leaves(l) + leaves(r) }\n"
                      "fn main(t: T) -> (i32, list[bool], list[i32]) {\n"
                      "  let n = leaves(t);\n"
                      "  let bs = for i in 0..n { i >= 2 && !(i == 5) || false };\n"
                      "  let s = scan(inc, 0, rev([n, 2 * n, -n]));\n"
                      "  (fold(inc, 0, s) / 2, bs, s)\n"
                      "}");
  /* broadcasting with f32[1]; reductions; matrices */
  CHECK_COMPILES(ctx, "param M: f32[H, H]\nparam v: f32[H]\n"
                      "fn main(x: list[i32]) -> f32[1] {\n"
                      "  let a = reshape(v, 1, H) @ M;\n"
                      "  let s = sum(v) * v - 1.5;\n"
                      "  let r: f32[1] = max(a);\n"
                      "  mean(softmax(s)) + r + sum(s * v) + v[0] + exp(log(relu(gelu(-r))))\n"
                      "}");
  /* recursion through map over a list of subtrees, and mutual recursion */
  CHECK_COMPILES(ctx, "type R = R(i32, list[R])\n"
                      "fn size(t: R) -> i32 { let R(_, kids) = t; 1 + fold(plus, 0, map(size, kids)) }\n"
                      "fn plus(a: i32, b: i32) -> i32 { a + b }\n"
                      "fn even(t: R) -> bool = match t { R(_, ks) => if len(ks) == 0 { true } else { odd(ks[0]) } }\n"
                      "fn odd(t: R) -> bool = match t { R(_, ks) => if len(ks) == 0 { false } else { even(ks[0]) } }\n"
                      "fn main(t: R) -> bool { even(t) && size(t) > 1 }");
  CHECK_ERROR(ctx, "type R = R(i32, list[R])\nfn f(t: R) -> i32 = g(t)\nfn g(t: R) -> i32 = f(t)\n"
                   "fn main(t: R) -> i32 = f(t)",
              "recursive call to 'g' must pass a part of a parameter");
  /* another name for a parameter is that parameter: taking it apart gives
   * strict parts (a tuple of names is not another name: 'g' fails below) */
  CHECK_COMPILES(ctx, "type T = L(i32) | N(T, T)\n"
                      "fn f(t: T) -> i32 { let u = t; let v: T = u; match v { L(w) => w, N(l, r) => f(l) + f(r) } }\n"
                      "fn main(t: T) -> i32 = f(t)");
  CHECK_COMPILES(ctx, "type R = R(i32, list[R])\n"
                      "fn size(t: R) -> i32 { let u = t; let R(_, kids) = u; let ks = kids; 1 + fold(plus, 0, map(size, ks)) }\n"
                      "fn plus(a: i32, b: i32) -> i32 { a + b }\n"
                      "fn main(t: R) -> i32 { size(t) }");
  /* ... but it is not smaller than the parameter */
  CHECK_ERROR(ctx, "type T = L(i32) | N(T, T)\n"
                   "fn g(t: T, k: i32) -> i32 { let (u, j) = (t, k); match u { L(w) => w + j, N(l, _) => g(l, j) } }\n"
                   "fn main(t: T) -> i32 = g(t, 1)",
              "recursive call to 'g' must pass a part of a parameter");
  CHECK_ERROR(ctx, "type T = L(i32) | N(T, T)\nfn f(t: T) -> i32 { let u = t; f(u) }\nfn main(t: T) -> i32 = f(t)",
              "recursive call to 'f' must pass a part of a parameter");
  CHECK_ERROR(ctx, "type T = L(i32) | N(T, T)\nfn f(t: T, s: T) -> i32 { let u = s; match u { L(w) => w, N(l, _) => f(t, N(l, l)) } }\n"
                   "fn main(t: T) -> i32 = f(t, t)",
              "recursive call to 'f' must pass a part of a parameter");
  /* shadowing and scopes */
  CHECK_COMPILES(ctx, "fn main(x: list[i32]) -> i32 { let a = 1; let a = a + 1; let b = { let a = 5; a }; a + b }");
  CHECK_ERROR(ctx, "fn main(x: list[i32]) -> i32 { let b = { let a = 5; a }; a }", "unknown name 'a'");
  /* a nullary constructor is a value and a pattern */
  CHECK_COMPILES(ctx, "type B = Yes | No\nfn main(x: list[i32]) -> i32 = match (Yes, len(x) > 0) { (Yes, true) => 1, (No, _) => 2, (_, false) => 3 }");
  CHECK_ERROR(ctx, "type B = Yes | No\nfn main(x: list[i32]) -> i32 = match (Yes, len(x) > 0) { (Yes, true) => 1, (No, _) => 2 }",
              "non-exhaustive match: (Yes, false) is not covered");
}

TEST(lang_typed_ast_annotations) {
  sheaf_ctx *ctx = th_ctx();
  const char *src = "param emb: f32[V, E]\nparam W: f32[E, 3*H]\n"
                    "fn main(xs: list[i32]) -> f32[H] { let x = emb[xs[0]] @ W; x[H:2*H] }";
  sh_module m;
  REQUIRE_OK(ctx, sh_lang_compile(&m, ctx, "t.sf", src, strlen(src)));
  sh_fn *f = m.main;
  CHECK_EQ_INT(f->n_locals, 2); /* xs, x */
  CHECK_EQ_INT(f->locals[1]->index, 1);
  sh_ast *body = f->body;
  REQUIRE_EQ_INT(body->kind, SH_EX_BLOCK);
  sh_ast *mm = body->lets[0].value;
  CHECK_EQ_INT(mm->kind, SH_EX_BINARY);
  CHECK(mm->param_rhs);
  CHECK(mm->a->lookup);
  CHECK_EQ_INT(mm->a->a->res, SH_RES_PARAM);
  CHECK_EQ_INT(mm->b->ref.param->index, 1);
  sh_ast *sl = body->a;
  REQUIRE_EQ_INT(sl->kind, SH_EX_SLICE);
  char buf[128];
  CHECK_EQ_STR(sh_type_str(buf, sizeof buf, &m.sizes, &m.syms, sl->type), "f32[H]");
  CHECK_EQ_STR(sh_type_str(buf, sizeof buf, &m.sizes, &m.syms, mm->type), "f32[3*H]");
  CHECK_EQ_INT(sl->lo->n, 1);
  CHECK_EQ_INT(sl->hi->t[0].coef, 2);
  CHECK_EQ_INT(sl->a->res, SH_RES_LOCAL);
  sh_module_free(&m);
}

#define EWT "data/ud_english_ewt/en_ewt-ud-test.conllu"

/* Runs a checked docs block on the first EWT instances of the kind its main
 * takes (seeded weights; sizes other than V and those the block fixes are 4)
 * and checks that every output tensor is finite. Returns false after
 * reporting a failure. */
static bool run_block(sheaf_ctx *ctx, const char *src, sh_dataset data[3]) {
  sh_module m;
  if (!CHECK_OK(ctx, sh_lang_compile(&m, ctx, "doc.sf", src, strlen(src)))) return false;
  bool ok = true;
  sheaf_model *model = NULL;
  sh_lang_bind bind = {0};
  sh_interp *ip = NULL;
  sheaf_graph *g = NULL;
  sh_lang_bind_opts bo = {.seed = 7};
  for (uint32_t v = 1; v <= m.sizes.n && bo.n_overrides < SH_BIND_MAX_OVERRIDES; v++) {
    const char *name = sh_sym_name(&m.syms, m.sizes.v[v].name);
    if (m.sizes.v[v].kind != SH_SV_GLOBAL || m.sizes.v[v].has_value || !strcmp(name, "V")) continue;
    bo.override_name[bo.n_overrides] = name;
    bo.override_value[bo.n_overrides++] = 4;
  }
  sh_input_kind k = sh_check_main_input(&m)->kind; /* what main takes decides the data */
  ok = CHECK(k != SH_INPUT_UNSUPPORTED);
  sh_dataset *d = &data[k == SH_INPUT_TOKENS || k == SH_INPUT_RECORDS ? 2 : k == SH_INPUT_DEP_TREE ? 1 : 0];
  bo.vocab = d->vocab;
  ok = ok && CHECK_OK(ctx, sheaf_model_create(ctx, &model)) && CHECK_OK(ctx, sh_lang_bind_model(&m, model, &bo, &bind)) &&
       CHECK_OK(ctx, sh_interp_create(&m, &bind, &ip)) && CHECK_OK(ctx, sheaf_graph_create(model, NULL, &g));
  sh_value res[5];
  for (int32_t i = 0; i < 5 && ok; i++) {
    sh_value in;
    bool sents = k == SH_INPUT_TOKENS || k == SH_INPUT_RECORDS;
    int32_t off = sents ? d->sent_off[i] : 0, len = sents ? d->sent_off[i + 1] - off : 0;
    if (k == SH_INPUT_TOKENS) {
      ok = CHECK_OK(ctx, sh_interp_ints(ip, d->sent_words + off, len, &in));
    } else if (k == SH_INPUT_RECORDS) {
      const char *form[256];
      size_t form_len[256];
      for (int32_t j = 0; j < len && j < 256; j++)
        form[j] = sh_vocab_str(&d->words, d->sent_words[off + j]), form_len[j] = sh_vocab_len(&d->words, d->sent_words[off + j]);
      sh_token_cols t = {len < 256 ? len : 256, d->sent_words + off, d->sent_tags + off, d->sent_xpos + off,
                         d->sent_deprel + off, d->sent_head + off, form, form_len};
      ok = CHECK_OK(ctx, sh_interp_records(ip, &t, &in));
    } else
      ok = CHECK_OK(ctx, sh_interp_tree(ip, &d->tb, d->tb.tree_root[i], d->ids, &in));
    ok = ok && CHECK_OK(ctx, sh_interp_main(ip, g, in, &res[i]));
  }
  ok = ok && CHECK_OK(ctx, sheaf_graph_flush(g));
  for (int32_t i = 0; i < 5 && ok; i++) {
    sheaf_expr ts[256];
    size_t n = sh_value_tensors(res[i], ts, 256);
    for (size_t t = 0; t < n && t < 256 && ok; t++) {
      sheaf_value_view v;
      ok = CHECK_OK(ctx, sheaf_value(g, ts[t], &v));
      int64_t numel = v.rank == 2 ? v.shape[0] * v.shape[1] : v.shape[0];
      for (int64_t j = 0; j < numel && ok; j++) ok = CHECK(isfinite(v.data[j]));
    }
  }
  sheaf_graph_free(g);
  sh_interp_free(ip);
  sh_lang_bind_free(ctx, &bind);
  sheaf_model_free(model);
  sh_module_free(&m);
  return ok;
}

/* Every ```sheaf block of docs/LANGUAGE.md compiles and runs (every block
 * is a complete model with a main); ```sheaf-error blocks must fail with
 * the message on their first line ("# error: ..."). */
TEST(lang_docs_examples_compile_and_run) {
  sheaf_ctx *ctx = th_ctx();
  char *doc;
  size_t len;
  sh_dataset data[3];
  REQUIRE_OK(ctx, sh_dataset_load(ctx, EWT, SH_DATASET_BINARY, &data[0]));
  REQUIRE_OK(ctx, sh_dataset_load(ctx, EWT, SH_DATASET_CHILDSUM, &data[1]));
  REQUIRE_OK(ctx, sh_dataset_load(ctx, EWT, SH_DATASET_SENTS, &data[2]));
  REQUIRE_OK(ctx, sh_file_read(ctx, "docs/LANGUAGE.md", &doc, &len));
  int n_ok = 0, n_err = 0, n_ran = 0;
  for (char *p = doc; (p = strstr(p, "```sheaf"));) {
    if (strncmp(p, "```sheaf-kernel", 15) == 0) { /* kernel sources: test_kernel_lang.c */
      p += 15;
      continue;
    }
    bool want_error = strncmp(p, "```sheaf-error", 14) == 0;
    char *start = strchr(p, '\n');
    if (!start) break;
    start++;
    char *end = strstr(start, "```");
    if (!end) break;
    *end = '\0';
    char diag[8192];
    sheaf_status st = compile(ctx, start, diag, sizeof diag);
    if (want_error) {
      n_err++;
      const char *tag = strstr(start, "# error: ");
      char msg[300] = "";
      if (tag) snprintf(msg, sizeof msg, "%.*s", (int)strcspn(tag + 9, "\n"), tag + 9);
      if (st != SHEAF_ERR_PARSE || !msg[0] || !strstr(diag, msg))
        th_fail(__FILE__, __LINE__, "docs example should fail with \"%s\":\n%s\ngot:\n%s", msg, start, diag);
    } else {
      n_ok++;
      if (st != SHEAF_OK) th_fail(__FILE__, __LINE__, "docs example does not compile:\n%s\n%s", start, diag);
      else if (!run_block(ctx, start, data)) th_fail(__FILE__, __LINE__, "docs example does not run:\n%s", start);
      else n_ran++;
    }
    p = end + 3;
  }
  CHECK(n_ok >= 10);
  CHECK(n_err >= 3);
  CHECK_EQ_INT(n_ran, n_ok);
  sh_free(ctx, doc, len + 1);
  for (int i = 0; i < 3; i++) sh_dataset_free(&data[i]);
}

/* --------------------------------------------------------- robustness */

TEST(lang_allocation_failure_everywhere) {
  sheaf_ctx *ctx = th_ctx();
  char *src;
  size_t len;
  REQUIRE_OK(ctx, sh_file_read(ctx, "examples/childsum.sf", &src, &len));
  long live = th_live_blocks();
  bool done = false;
  for (long k = 1; k < 100000 && !done; k++) {
    th_fail_alloc_at(k);
    sh_module m;
    sheaf_status st = sh_lang_compile(&m, ctx, "c.sf", src, len);
    sh_module_free(&m);
    th_fail_alloc_at(0);
    if (st == SHEAF_OK) done = true;
    else if (!CHECK_EQ_INT(st, SHEAF_ERR_NOMEM)) break;
    CHECK_EQ_INT(th_live_blocks(), live);
  }
  CHECK(done);
  sh_free(ctx, src, len + 1);
}

TEST(lang_random_mutations_never_crash) {
  sheaf_ctx *ctx = th_ctx();
  static const char alphabet[] = "(){}[],:;=<>+-*/%@!|._ \n#0123456789abcHWfnletmatchiforphase";
  uint64_t rng = 0x9E3779B97F4A7C15ull;
  for (size_t e = 0; e < SH_ARRAY_LEN(examples); e++) {
    char *src;
    size_t len;
    REQUIRE_OK(ctx, sh_file_read(ctx, examples[e], &src, &len));
    char *buf = malloc(len + 64);
    REQUIRE(buf);
    for (int iter = 0; iter < 300; iter++) {
      memcpy(buf, src, len + 1);
      size_t n = len;
      for (int k = 0; k < 1 + iter % 4; k++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        size_t at = (size_t)(rng % n);
        int op = (int)((rng >> 32) % 3);
        if (op == 0) buf[at] = alphabet[(rng >> 40) % (sizeof alphabet - 1)];
        else if (op == 1 && n > 1) memmove(buf + at, buf + at + 1, n-- - at);
        else if (n < len + 60) {
          memmove(buf + at + 1, buf + at, n++ - at + 1);
          buf[at] = alphabet[(rng >> 40) % (sizeof alphabet - 1)];
        }
      }
      sh_module m;
      sheaf_status st = sh_lang_compile(&m, ctx, "m.sf", buf, n);
      CHECK(st == SHEAF_OK || st == SHEAF_ERR_PARSE);
      if (st == SHEAF_ERR_PARSE) CHECK(m.diags.n > 0);
      sh_module_free(&m);
    }
    free(buf);
    sh_free(ctx, src, len + 1);
  }
}
