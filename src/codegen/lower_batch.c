/*
 * lower_batch.c — emission of a generated kernel's batched entry point
 * (lower_batch.h): the runtime runs a bucket of calls of one kernel with
 * one call of ENTRY_batch, which loops over the instances and calls the
 * instance-level entry with each instance's sizes and argument pointers
 * (each argument in one of the runtime's modes: passed once, a row-pointer
 * array, contiguous rows; sk_barg).
 */
#include "codegen/lower_batch.h"

#include <stdio.h>

void sh_lower_batch_name(const sh_kernel *k, char *out, size_t cap) {
  char e[300];
  sh_lower_entry_name(k, e, sizeof e);
  snprintf(out, cap, "%s_batch", e);
}

sheaf_status sh_lower_emit_batch(const sh_kernel *k, int n_args, sh_buf *c) {
  char e[300];
  sh_lower_entry_name(k, e, sizeof e);
  int na = n_args > 0 ? n_args : 1;
  sh_buf_printf(c,
                "\n/* The batched entry point (docs/CODEGEN.md, \"Batched use\"). */\n"
                "typedef struct %s_bt {\n"
                "  const sk_abi *abi;\n"
                "  const int64_t *sizes;\n"
                "  const sk_barg *args;\n"
                "  int64_t n, per;\n"
                "  int err;\n"
                "} %s_bt;\n\n",
                e, e);
  sh_buf_printf(c,
                "static int %s_inst(const sk_abi *abi, const int64_t *sizes, const sk_barg *args, int64_t i) {\n"
                "  sk_arg a[%d];\n"
                "  for (int j = 0; j < %d; j++) {\n"
                "    a[j].data = args[j].rows ? args[j].rows[i] : (void *)(args[j].data + i * args[j].stride);\n"
                "    a[j].rows = 0;\n"
                "    a[j].ld = 0;\n"
                "  }\n"
                "  return %s(abi, sizes + i * %d, a);\n"
                "}\n\n",
                e, na, n_args, e, k->n_sizes);
  sh_buf_printf(c,
                "static void %s_btask(void *arg_, int64_t t, int tid) {\n"
                "  %s_bt *b = (%s_bt *)arg_;\n"
                "  (void)tid;\n"
                "  sk_abi one = *b->abi;\n"
                "  one.threads = 1;\n"
                "  int64_t i1 = (t + 1) * b->per < b->n ? (t + 1) * b->per : b->n;\n"
                "  for (int64_t i = t * b->per; i < i1; i++)\n"
                "    if (%s_inst(&one, b->sizes, b->args, i)) __atomic_store_n(&b->err, 1, __ATOMIC_RELAXED);\n"
                "}\n\n",
                e, e, e, e);
  sh_buf_printf(c,
                "int %s_batch(const sk_abi *abi, int64_t n, const int64_t *sizes, const sk_barg *args) {\n"
                "  if (abi->threads > 1 && abi->parallel && n >= 2 * (int64_t)abi->threads) {\n"
                "    int64_t tasks = 4 * (int64_t)abi->threads < n ? 4 * (int64_t)abi->threads : n;\n"
                "    %s_bt b = {abi, sizes, args, n, (n + tasks - 1) / tasks, 0};\n"
                "    abi->parallel(abi->pool, (n + b.per - 1) / b.per, %s_btask, &b, abi->threads);\n"
                "    return b.err;\n"
                "  }\n"
                "  for (int64_t i = 0; i < n; i++)\n"
                "    if (%s_inst(abi, sizes, args, i)) return 1;\n"
                "  return 0;\n"
                "}\n",
                e, e, e, e);
  return sh_buf_status(c);
}
