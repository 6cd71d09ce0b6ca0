/*
 * test_lang_bad.c — golden diagnostics: every tests/bad/NAME.sf is a
 * malformed model whose rendered diagnostics must equal
 * tests/bad/NAME.expected exactly (file:line:col, message, source line,
 * caret). At least 30 programs; each must fail. `sheaf check` prints the
 * same text and exits 1.
 *
 * Regenerate after an intended change of messages, then review every diff:
 *   SHEAF_UPDATE_GOLDEN=1 make test TEST_ARGS=lang_bad
 */
#include <dirent.h>
#include <stdlib.h>

#include "base/buf.h"
#include "base/file.h"
#include "harness.h"
#include "lang/check.h"

#define BAD_DIR "tests/bad"

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The sorted NAMEs of tests/bad/NAME.sf (malloc'd; caller frees). */
static int list_bad(char ***out) {
  DIR *d = opendir(BAD_DIR);
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
    v[n++] = strndup(e->d_name, len - 3);
  }
  closedir(d);
  qsort(v, (size_t)n, sizeof *v, cmp_str);
  *out = v;
  return n;
}

/* Compiles path; returns the rendered diagnostics (malloc'd) and status. */
static char *diagnose(sheaf_ctx *ctx, const char *path, sheaf_status *st) {
  char *src = NULL;
  size_t len = 0;
  if (sh_file_read(ctx, path, &src, &len) != SHEAF_OK) return NULL;
  sh_module m;
  *st = sh_lang_compile(&m, ctx, path, src, len);
  sh_buf b;
  sh_buf_init(&b, ctx);
  sh_diags_render(&m.diags, &b);
  char *r = strdup(sh_buf_cstr(&b));
  sh_buf_free(&b);
  sh_module_free(&m);
  sh_free(ctx, src, len + 1);
  return r;
}

/* The first differing line of two texts, for the failure message. */
static void first_diff(const char *a, const char *b, char *out, size_t cap) {
  int line = 1;
  const char *la = a, *lb = b;
  while (*a && *a == *b) {
    if (*a == '\n') {
      line++;
      la = a + 1;
      lb = b + 1;
    }
    a++;
    b++;
  }
  snprintf(out, cap, "line %d: got \"%.*s\" want \"%.*s\"", line, (int)strcspn(la, "\n"), la,
           (int)strcspn(lb, "\n"), lb);
}

TEST(lang_bad_golden_diagnostics) {
  sheaf_ctx *ctx = th_ctx();
  char **names = NULL;
  int n = list_bad(&names);
  REQUIRE(n >= 30);
  bool update = getenv("SHEAF_UPDATE_GOLDEN") && !strcmp(getenv("SHEAF_UPDATE_GOLDEN"), "1");
  for (int i = 0; i < n; i++) {
    char sf[512], exp[512];
    snprintf(sf, sizeof sf, BAD_DIR "/%s.sf", names[i]);
    snprintf(exp, sizeof exp, BAD_DIR "/%s.expected", names[i]);
    sheaf_status st = SHEAF_OK;
    char *got = diagnose(ctx, sf, &st);
    if (!CHECK(got != NULL)) continue;
    if (st != SHEAF_ERR_PARSE || !strstr(got, ": error: "))
      th_fail(__FILE__, __LINE__, "%s: expected errors, got status %s", sf, sheaf_status_str(st));
    if (update) {
      FILE *f = fopen(exp, "wb");
      if (!f || fwrite(got, 1, strlen(got), f) != strlen(got)) th_fail(__FILE__, __LINE__, "cannot write %s", exp);
      if (f) fclose(f);
    } else {
      char *want = NULL;
      size_t wlen = 0;
      if (sh_file_read(ctx, exp, &want, &wlen) != SHEAF_OK) {
        th_fail(__FILE__, __LINE__, "%s: missing (SHEAF_UPDATE_GOLDEN=1 writes it)", exp);
      } else {
        if (strcmp(got, want) != 0) {
          char diff[600];
          first_diff(got, want, diff, sizeof diff);
          th_fail(__FILE__, __LINE__, "%s: diagnostics differ from %s: %s", sf, exp, diff);
        }
        sh_free(ctx, want, wlen + 1);
      }
    }
    free(got);
  }
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
}

TEST(lang_bad_cli_prints_the_same_and_exits_1) {
  if (!th_sheaf_bin()) return;
  static char out[1 << 16];
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s check " BAD_DIR "/shape_argument.sf 2>&1 >/dev/null", th_sheaf_bin());
  CHECK_EQ_INT(th_run(cmd, out, sizeof out), 1);
  sheaf_ctx *ctx = th_ctx();
  char *want = NULL;
  size_t wlen = 0;
  REQUIRE_OK(ctx, sh_file_read(ctx, BAD_DIR "/shape_argument.expected", &want, &wlen));
  CHECK_EQ_STR(out, want);
  CHECK_CONTAINS(out, "error: argument 1 of 'cell': expected f32[5*H] but got f32[4*H]\n");
  sh_free(ctx, want, wlen + 1);
}
