/*
 * test_analyses.c — the static analyses' report (`sheaf check --analyses`,
 * src/compile/analyze*.c) on example models against golden copies in
 * tests/data/analyses/ (SHEAF_UPDATE_GOLDEN=1 rewrites them; review with
 * git diff), and robustness: every example, every tests/bad/ model that
 * checks and random byte mutations of the examples that still check are
 * analyzed and reported without a crash, with every node reached.
 */
#include <dirent.h>
#include <stdlib.h>

#include "base/buf.h"
#include "base/file.h"
#include "compile/analyze.h"
#include "harness.h"

/* Compiles src; on a module that checks, the report (malloc'd); else NULL. */
static char *report_of(sheaf_ctx *ctx, const char *name, const char *src, size_t len, bool verbose,
                       bool *checked) {
  sh_module m;
  sheaf_status st = sh_lang_compile(&m, ctx, name, src, len);
  char *r = NULL;
  *checked = st == SHEAF_OK;
  if (st == SHEAF_OK) {
    sh_analyses a;
    sheaf_status ast = sh_analyze(&m, &a);
    if (CHECK_EQ_INT(ast, SHEAF_OK)) {
      sh_buf b;
      sh_buf_init(&b, ctx);
      CHECK_EQ_INT(sh_analyses_report(&a, &b, verbose), SHEAF_OK);
      r = strdup(sh_buf_cstr(&b));
      sh_buf_free(&b);
      /* every function body is walked: each node of a checked module is reached */
      for (int i = 0; i < a.n_nodes; i++)
        if (!a.nodes[i].seen) {
          th_fail(__FILE__, __LINE__, "%s: node %d (%u:%u) not reached by the flow pass", name, i,
                  (unsigned)a.nodes[i].e->span.line, (unsigned)a.nodes[i].e->span.col);
          break;
        }
    }
    sh_analyses_free(&a);
  } else if (st == SHEAF_ERR_PARSE) { /* refused with a clear status, never analyzed half-checked */
    sh_analyses a;
    CHECK_EQ_INT(sh_analyze(&m, &a), SHEAF_ERR_INVALID_ARG);
    sh_analyses_free(&a);
  }
  sh_module_free(&m);
  return r;
}

static char *report_file(sheaf_ctx *ctx, const char *path, bool *checked) {
  char *src = NULL;
  size_t len = 0;
  *checked = false;
  if (sh_file_read(ctx, path, &src, &len) != SHEAF_OK) return NULL;
  char *r = report_of(ctx, path, src, len, false, checked);
  sh_free(ctx, src, len + 1);
  return r;
}

static int first_diff_line(const char *a, const char *b) {
  int line = 1;
  for (; *a && *a == *b; a++, b++) line += *a == '\n';
  return line;
}

TEST(analyses_golden_reports) {
  static const char *const names[] = {"treelstm", "treegru", "mvrnn", "branches", "childsum", "treeattn",
                                      "bilstm", "early_exit", "parser", "beam", "seq2seq"};
  sheaf_ctx *ctx = th_ctx();
  bool update = getenv("SHEAF_UPDATE_GOLDEN") && !strcmp(getenv("SHEAF_UPDATE_GOLDEN"), "1");
  for (size_t i = 0; i < SH_ARRAY_LEN(names); i++) {
    char sf[256], gold[256];
    snprintf(sf, sizeof sf, "examples/%s.sf", names[i]);
    snprintf(gold, sizeof gold, "tests/data/analyses/%s.txt", names[i]);
    bool ok;
    char *got = report_file(ctx, sf, &ok);
    if (!CHECK(ok && got)) {
      free(got);
      continue;
    }
    if (update) {
      FILE *f = fopen(gold, "wb");
      if (!f || fwrite(got, 1, strlen(got), f) != strlen(got)) th_fail(__FILE__, __LINE__, "cannot write %s", gold);
      if (f) fclose(f);
    } else {
      const char *want = th_read_file(gold, NULL);
      if (!CHECK(want != NULL)) fprintf(stderr, "  no golden %s (SHEAF_UPDATE_GOLDEN=1 writes it)\n", gold);
      else if (!CHECK(!strcmp(got, want)))
        fprintf(stderr, "  %s: report differs from %s at line %d:\n%s\n", sf, gold, first_diff_line(got, want), got);
    }
    free(got);
  }
}

/* The sorted .sf files of a directory (malloc'd paths). */
static int list_sf(const char *dir, char ***out) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  char **v = NULL;
  int n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (len < 4 || strcmp(e->d_name + len - 3, ".sf") != 0) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      v = realloc(v, (size_t)cap * sizeof *v);
      if (!v) abort();
    }
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    v[n++] = strdup(path);
  }
  closedir(d);
  *out = v;
  return n;
}

TEST(analyses_every_example_and_bad_model) {
  sheaf_ctx *ctx = th_ctx();
  static const char *const dirs[] = {"examples", "tests/bad"};
  int n_checked = 0, n_examples = 0;
  for (size_t k = 0; k < SH_ARRAY_LEN(dirs); k++) {
    char **v = NULL;
    int n = list_sf(dirs[k], &v);
    REQUIRE(n > 0);
    for (int i = 0; i < n; i++) {
      bool ok;
      char *r = report_file(ctx, v[i], &ok);
      if (ok) {
        n_checked++;
        if (CHECK(r != NULL)) /* the linearized mode's verdict, last */
          CHECK(strstr(r, "\nlinearized: yes (") != NULL || strstr(r, "\nlinearized: yes, with --mode linear (") != NULL ||
                strstr(r, "\nlinearized: no: ") != NULL);
      } else if (k == 0) {
        th_fail(__FILE__, __LINE__, "%s does not check", v[i]);
      }
      n_examples += k == 0;
      free(r);
      free(v[i]);
    }
    free(v);
  }
  CHECK(n_examples >= 20);
  CHECK(n_checked >= n_examples);
}

/* Random byte edits of the examples: whatever still checks is analyzed. */
TEST(analyses_mutated_examples) {
  sheaf_ctx *ctx = th_ctx();
  char **v = NULL;
  int n = list_sf("examples", &v);
  REQUIRE(n > 0);
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  static const char repl[] = "(){}[],;:+-*@=<>|_ 0123456789abcdefxyzHLNW\n";
  int n_checked = 0;
  for (int i = 0; i < n; i++) {
    char *src = NULL;
    size_t len = 0;
    if (!CHECK_EQ_INT(sh_file_read(ctx, v[i], &src, &len), SHEAF_OK)) continue;
    char *buf = malloc(len + 1);
    REQUIRE(buf != NULL);
    for (int t = 0; t < 60; t++) {
      memcpy(buf, src, len + 1);
      for (int e = 0; e < 1 + t % 3; e++) {
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        buf[seed % len] = repl[(seed >> 32) % (sizeof repl - 1)];
      }
      bool ok;
      char *r = report_of(ctx, v[i], buf, len, true, &ok);
      n_checked += ok;
      if (ok) CHECK(r != NULL);
      free(r);
    }
    free(buf);
    sh_free(ctx, src, len + 1);
    free(v[i]);
  }
  free(v);
  CHECK(n_checked > 0);
}

TEST(analyses_bad_arguments) {
  sh_analyses a;
  CHECK_EQ_INT(sh_analyze(NULL, &a), SHEAF_ERR_INVALID_ARG);
  sh_analyses_free(&a);
  /* a module that did not check is refused, not analyzed */
  sheaf_ctx *ctx = th_ctx();
  const char *src = "fn main(t: i32) -> f32[H] { nope(t) }";
  sh_module m;
  CHECK_EQ_INT(sh_lang_compile(&m, ctx, "t.sf", src, strlen(src)), SHEAF_ERR_PARSE);
  CHECK_EQ_INT(sh_analyze(&m, &a), SHEAF_ERR_INVALID_ARG);
  sh_analyses_free(&a);
  sh_module_free(&m);
}

/* Allocation failure at every point of the analyses and the report:
 * SHEAF_ERR_NOMEM or a full report, nothing leaked, never a crash. */
TEST(analyses_allocation_failure_at_every_point) {
  sheaf_ctx *ctx = th_ctx();
  static const char *const files[] = {"examples/treelstm.sf", "examples/early_exit.sf"};
  for (size_t f = 0; f < SH_ARRAY_LEN(files); f++) {
    char *src = NULL;
    size_t len = 0;
    REQUIRE_EQ_INT(sh_file_read(ctx, files[f], &src, &len), SHEAF_OK);
    sh_module m;
    REQUIRE_EQ_INT(sh_lang_compile(&m, ctx, files[f], src, len), SHEAF_OK);
    sh_analyses a;
    REQUIRE_EQ_INT(sh_analyze(&m, &a), SHEAF_OK);
    sh_buf want;
    sh_buf_init(&want, ctx);
    REQUIRE_EQ_INT(sh_analyses_report(&a, &want, true), SHEAF_OK);
    sh_analyses_free(&a);
    long live = th_live_blocks();
    bool done = false;
    int n_nomem = 0;
    for (long k = 1; k < 100000 && !done; k++) {
      th_fail_alloc_at(k);
      sheaf_status st = sh_analyze(&m, &a);
      sh_buf b;
      sh_buf_init(&b, ctx);
      sheaf_status bst = st == SHEAF_OK ? sh_analyses_report(&a, &b, true) : st;
      th_fail_alloc_at(0);
      if (st == SHEAF_OK && bst == SHEAF_OK) {
        /* the armed failure was past every allocation: the whole report */
        done = !strcmp(sh_buf_cstr(&b), sh_buf_cstr(&want));
        if (!CHECK(done)) fprintf(stderr, "  %s: report after k=%ld differs:\n%s\n", files[f], k, sh_buf_cstr(&b));
        done = true;
      } else {
        CHECK_EQ_INT(bst, SHEAF_ERR_NOMEM);
        n_nomem++;
      }
      sh_buf_free(&b);
      sh_analyses_free(&a);
      CHECK_EQ_INT(th_live_blocks(), live);
    }
    CHECK(done);
    CHECK(n_nomem > 0);
    sh_buf_free(&want);
    sh_module_free(&m);
    sh_free(ctx, src, len + 1);
  }
}

/* The CLI: `sheaf check --analyses` prints the summary then the report. */
TEST(analyses_cli_check_flag) {
  static char out[1 << 16];
  if (!th_sheaf_bin()) return;
  REQUIRE_EQ_INT(th_sheaf(out, sizeof out, "check --analyses examples/treelstm.sf"), 0);
  const char *want = th_read_file("tests/data/analyses/treelstm.txt", NULL);
  REQUIRE(want != NULL);
  const char *at = strstr(out, "analyses of examples/treelstm.sf:");
  REQUIRE(at != NULL);
  CHECK(!strcmp(at, want));
  CHECK(strstr(out, "fn tree(t: Tree) -> (f32[H], f32[H])  [recursive]\n") < at); /* the summary first */
  CHECK_EQ_INT(th_sheaf(out, sizeof out, "check --analyses tests/bad/arity_call.sf 2>&1"), 1);
  CHECK(strstr(out, "analyses of") == NULL);
  CHECK_CONTAINS(out, "error:");
}

/* An expression whose right operand is parenthesized (its span ends inside
 * the parenthesis) is printed whole: `emb[w] @ (W1 + W2)`, not `... W2`. */
TEST(analyses_report_closes_parentheses) {
  sheaf_ctx *ctx = th_ctx();
  static const char src[] = "param emb : f32[V, H]\n"
                            "param W1 : f32[H, H]\n"
                            "param W2 : f32[H, H]\n"
                            "fn main(ws: list[i32]) -> list[f32[H]] {\n"
                            "  for w in ws { tanh(emb[w] @ ((W1 + W2))) + (emb[w] @ W1) }\n"
                            "}\n";
  bool ok;
  char *r = report_of(ctx, "paren.sf", src, sizeof src - 1, true, &ok);
  REQUIRE(ok && r != NULL);
  CHECK_CONTAINS(r, "paren.sf:5:33: emb[w] @ ((W1 + W2)): right operand param-only");
  CHECK_CONTAINS(r, "paren.sf:5:56: emb[w] @ W1: W1 packed once");
  free(r);
}
