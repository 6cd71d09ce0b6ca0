/*
 * fuzz_lang.c — libFuzzer target for the model language's front end: any
 * input is lexed, parsed and (when it parses) checked. It either checks,
 * or fails with diagnostics whose first one is the context's last error
 * ("fuzz.sf:LINE:COL: error: ...") and which render with a source line and
 * a caret; or it runs out of memory. A checked module satisfies the typed
 * AST's promises (a main, a type on every function). Never a crash, a hang
 * or a leak; any broken promise traps.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "lang/check.h"
#include "sheaf.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sheaf_ctx *ctx = fuzz_ctx();
  sh_module m;
  sheaf_status st = sh_lang_compile(&m, ctx, "fuzz.sf", (const char *)data, size);
  sh_buf out;
  sh_buf_init(&out, ctx);
  if (st == SHEAF_OK) {
    REQUIRE(m.diags.n_errors == 0 && m.main != NULL);
    for (int i = 0; i < m.n_fns; i++) REQUIRE(m.fns[i]->ret_type && m.fns[i]->checked);
    sh_check_summary(&m, &out);
    sh_ast_dump(&out, &m);
  } else if (st != SHEAF_ERR_NOMEM) {
    fuzz_check_parse_error(ctx, st, "fuzz.sf");
    REQUIRE(m.diags.n_errors > 0 && m.diags.n > 0 && m.diags.v[0].kind == SH_DIAG_ERROR);
    sh_diags_render(&m.diags, &out);
    REQUIRE(sh_buf_status(&out) != SHEAF_OK || strstr(sh_buf_cstr(&out), ": error: "));
  }
  sh_buf_free(&out);
  sh_module_free(&m);
  return 0;
}
