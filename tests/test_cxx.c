/*
 * test_cxx.c — the public headers and the README's API fragments
 * (tests/cxx/readme_api.c) compile as C11 and as C++17 with -pedantic
 * -Werror (SHEAF_NO_PARAM included). Skips a language whose compiler is
 * missing; .ci/run also links and runs the program. The standalone
 * example programs (the .c files of examples/, built by `make all` next to
 * the sheaf binary) compile with -pedantic on the public headers alone and
 * run.
 */
#include <string.h>

#include "harness.h"

TEST(cxx_headers_and_readme_compile_as_c_and_cxx) {
  static char out[1 << 14];
  static const char *const cmds[] = {
      "cc -std=c11 -pedantic -Wall -Wextra -Werror -Iinclude -fsyntax-only tests/cxx/readme_api.c 2>&1",
      "c++ -std=c++17 -pedantic -Wall -Wextra -Werror -Iinclude -fsyntax-only -x c++ tests/cxx/readme_api.c 2>&1"};
  static const char *const have[] = {"command -v cc >/dev/null 2>&1", "command -v c++ >/dev/null 2>&1"};
  for (int k = 0; k < 2; k++) {
    if (th_run(have[k], out, sizeof out) != 0) {
      fprintf(stderr, "  skipped: no %s compiler\n", k ? "C++" : "C");
      continue;
    }
    if (!CHECK_EQ_INT(th_run(cmds[k], out, sizeof out), 0)) fprintf(stderr, "%s\n%s", cmds[k], out);
  }
}

TEST(cxx_examples_compile_pedantic_and_run) {
  static char out[1 << 14];
  static const char *const examples[] = {"lstm_runner"};
  for (size_t k = 0; k < sizeof examples / sizeof examples[0]; k++) {
    char cmd[4096];
    if (th_run("command -v cc >/dev/null 2>&1", out, sizeof out) == 0) {
      snprintf(cmd, sizeof cmd,
               "cc -std=c11 -pedantic -Wall -Wextra -Werror -Iinclude -fsyntax-only examples/%s.c 2>&1",
               examples[k]);
      if (!CHECK_EQ_INT(th_run(cmd, out, sizeof out), 0)) fprintf(stderr, "%s\n%s", cmd, out);
    }
    const char *bin = th_sheaf_bin(); /* build/VARIANT/sheaf: the examples are in build/VARIANT/examples */
    const char *slash = bin ? strrchr(bin, '/') : NULL;
    if (!bin) continue;
    snprintf(cmd, sizeof cmd, "%.*sexamples/%s 2>&1", slash ? (int)(slash - bin + 1) : 0, bin, examples[k]);
    if (!CHECK_EQ_INT(th_run(cmd, out, sizeof out), 0)) fprintf(stderr, "%s\n%s", cmd, out);
    CHECK_CONTAINS(out, ": ok");
  }
}
