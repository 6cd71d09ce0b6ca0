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
      sh_analyses_report(&a, &b, verbose);
      CHECK_EQ_INT(sh_buf_status(&b), SHEAF_OK);
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
  static const char *const names[] = {"treelstm", "treegru", "mvrnn", "branches", "childsum",
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
        if (CHECK(r != NULL)) CHECK(strstr(r, "linearized: (see --mode)\n") != NULL);
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
