/*
 * check.h — the type and shape checker of the model language, and the
 * one-call compile entry point.
 *
 * sh_check resolves every name, gives every expression a type (tensor
 * shapes are symbolic sizes, unified as types.h describes), checks that
 * matches are exhaustive, that recursion is structural (each recursive call
 * passes a part of an ADT value taken apart by `match`, so every run
 * terminates and recursion depth follows the input's structure), that
 * parameters are f32 vectors or matrices, and that `main` takes one input.
 * After an error the offending expression gets the error type, which
 * silences errors that would only follow from the first one.
 */
#ifndef SH_LANG_CHECK_H
#define SH_LANG_CHECK_H

#include "lang/input.h"
#include "lang/parser.h"

/* Checks a module that parsed without errors. SHEAF_OK, SHEAF_ERR_PARSE
 * (diagnostics in m->diags; the context's last error holds the first), or
 * SHEAF_ERR_NOMEM. */
sheaf_status sh_check(sh_module *m);

/* sh_module_init + sh_parse + sh_check (when parsing succeeded). The module
 * must be freed with sh_module_free whatever the result. */
sheaf_status sh_lang_compile(sh_module *m, sheaf_ctx *ctx, const char *file, const char *src,
                             size_t len);

/* What main of a checked module takes (input.h): its kind (a binary or
 * dependency tree, word ids, token records) and, for records, the token
 * fields it reads (uses). Decided once, by the checker; for a module that
 * did not check, kind SH_INPUT_UNSUPPORTED. Never NULL. */
const sh_input_shape *sh_check_main_input(const sh_module *m);

/* SHEAF_OK when a checked module has a main; else (a kernel library: a
 * source of kernels without any fn checks without one) a diagnostic at
 * 1:1 and SHEAF_ERR_PARSE, for what runs main (`sheaf run`, sheaf_program). */
sheaf_status sh_module_require_main(sh_module *m);

/* The summary `sheaf check` prints for a checked module: sizes, types,
 * parameters (with shapes) and function signatures. */
void sh_check_summary(const sh_module *m, sh_buf *out);

/* The name of a builtin ("tanh"), and the builtin a name denotes (SH_BI_NONE
 * if none). */
const char *sh_builtin_name(sh_builtin b);
sh_builtin sh_builtin_find(const char *name);
/* Tensor inputs of a builtin that is one runtime op (1 or 2); 0 otherwise. */
int sh_builtin_op_arity(sh_builtin b);

#endif
