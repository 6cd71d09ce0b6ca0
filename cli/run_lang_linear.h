/*
 * run_lang_linear.h — `sheaf run --mode linear`'s loop (run_lang_linear.c).
 */
#ifndef SHEAF_CLI_RUN_LANG_LINEAR_H
#define SHEAF_CLI_RUN_LANG_LINEAR_H

#include "compile/linear.h"
#include "io/dataset.h"
#include "run_lang_out.h"

/* Runs trees 0 .. n-1 of d through L, batch trees a run, and writes each
 * instance's outputs to out in format (npy: also each instance's rows in
 * npy_rows[i], the width in *npy_cols, a mismatch in npy_why). On failure
 * *failed_at is the instance. */
sheaf_status lang_run_linear(sh_lin *L, sheaf_model *model, const sh_module *m, const sh_dataset *d,
                             sh_word_ids ids, int32_t n, int32_t batch, lang_format format, FILE *out,
                             int64_t *npy_rows, int64_t *npy_cols, char *npy_why, size_t why_cap,
                             int32_t *failed_at);

#endif
