/*
 * test_cxx.c — the public headers and the README's API fragments
 * (tests/cxx/readme_api.c) compile as C11 and as C++17 with -pedantic
 * -Werror (SHEAF_NO_PARAM included). Skips a language whose compiler is
 * missing; .ci/run also links and runs the program.
 */
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
