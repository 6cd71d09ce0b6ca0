/*
 * compile.c — `sheaf compile FILE.sf --emit-c DIR | --emit-ir`: the kernels
 * of a source through the code generator (docs/CODEGEN.md): lowered, given
 * the default schedule, and written as one self-contained C file per kernel
 * plus sheaf_kernel_abi.h (ahead-of-time use in a user's build), or printed
 * as scheduled loop IR. With --tuning FILE (records of `sheaf tune`),
 * --emit-c also writes each kernel's tuned variants, one file per record.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/buf.h"
#include "base/file.h"
#include "cli.h"
#include "source.h"
#include "codegen/lir_emit.h"
#include "codegen/lower.h"
#include "codegen/tune.h"
#include "lang/kernel.h"

static const char usage_compile[] =
    "usage: sheaf compile FILE.sf (--emit-c DIR | --emit-ir) [--isa scalar|avx2|avx512]\n"
    "                     [--tuning FILE]\n"
    "\n"
    "Generates code for the kernels of FILE.sf (kernel declarations, see\n"
    "docs/LANGUAGE.md \"Kernels\"): each is lowered to the loop IR and given the\n"
    "default schedule for the instruction set (default: this CPU's, after\n"
    "SHEAF_ISA).\n"
    "\n"
    "options:\n";

typedef struct compile_opts {
  const char *dir, *tuning;
  bool ir;
  int isa; /* sheaf_isa */
} compile_opts;

#define AT(field) .at = offsetof(compile_opts, field)
static const cli_flag f_emit_c = {"--emit-c", CLI_FLAG_STRING, AT(dir), .arg = "DIR",
                                  .help = "write DIR/NAME.c per kernel and DIR/sheaf_kernel_abi.h, the one\n"
                                          "header they include (created if missing); build them with e.g.\n"
                                          "cc -O3 -mavx2 -mfma -c NAME.c. The entry point is\n"
                                          "int sheafk_NAME(const sk_abi *, const int64_t *sizes, const sk_arg *)"};
static const cli_flag f_emit_ir = {"--emit-ir", CLI_FLAG_BOOL, AT(ir),
                                   .help = "print each kernel's scheduled loop IR to stdout"};
static const cli_flag f_isa = CLI_FLAG_ISA(compile_opts, isa, "the instruction set to schedule for");
static const cli_flag f_tuning = {"--tuning", CLI_FLAG_IN, AT(tuning), .arg = "FILE",
                                  .help = "records of 'sheaf tune --out FILE': with --emit-c, also write\n"
                                          "DIR/NAME.CLASS.c per record of a kernel (CLASS as M64-K256-N1024:\n"
                                          "the shape class it was tuned for; the same entry point); records\n"
                                          "for another version of a kernel are skipped with a warning"};
#undef AT
static const cli_flag *const compile_flags[] = {&f_emit_c, &f_emit_ir, &f_isa, &f_tuning};
static const cli_flags compile_spec = {.cmd = "compile", CLI_FLAGS_LIST(compile_flags), .pos_noun = "source",
                                       .usage = usage_compile, .missing = ""};

static int write_file(sheaf_ctx *ctx, const char *dir, const char *name, const char *text, size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f) {
    cli_error("cannot write %s: %s", path, strerror(errno));
    return CLI_FAIL;
  }
  bool ok = fwrite(text, 1, n, f) == n;
  if (fclose(f) != 0 || !ok) {
    cli_error("cannot write %s", path);
    return CLI_FAIL;
  }
  printf("%s\n", path);
  (void)ctx;
  return CLI_OK;
}

/* The variants of kernel k that records of ts chose (for k's hash and the
 * ISA): DIR/NAME.CLASS.c each. */
static int write_tuned(sheaf_ctx *ctx, const char *dir, const sh_kernel *k, sheaf_isa isa, const sh_tune_set *ts) {
  char ir[33];
  if (sh_tune_kernel_hash(ctx, k, ir) != SHEAF_OK) return CLI_FAIL;
  int rc = CLI_OK, stale = 0;
  for (int i = 0; rc == CLI_OK && i < ts->n; i++) {
    const sh_tune_rec *r = &ts->r[i];
    if (strcmp(r->kernel, k->name) || strcmp(r->isa, sheaf_isa_name(isa))) continue;
    if (strcmp(r->ir, ir)) {
      stale++;
      continue;
    }
    sh_buf c, name;
    sh_buf_init(&c, ctx);
    sh_buf_init(&name, ctx);
    sh_buf_printf(&name, "%s.", k->name);
    for (int s = 0; s < r->n_sizes; s++)
      sh_buf_printf(&name, "%s%s%lld", s ? "-" : "", r->size_names[s], (long long)r->cls[s]);
    sh_buf_puts(&name, ".c");
    if (sh_tune_generate(ctx, k, isa, &r->opts, &c, NULL) != SHEAF_OK) {
      cli_error("%s", sheaf_ctx_last_error(ctx));
      rc = CLI_FAIL;
    } else {
      rc = write_file(ctx, dir, sh_buf_cstr(&name), sh_buf_cstr(&c), c.len);
    }
    sh_buf_free(&c);
    sh_buf_free(&name);
  }
  if (stale)
    fprintf(stderr, "sheaf: warning: kernel '%s': %d tuning record%s skipped: made for another version of it\n",
            k->name, stale, stale == 1 ? "" : "s");
  return rc;
}

int cli_compile(int argc, char **argv) {
  compile_opts o = {.isa = sheaf_cpu_isa()};
  const char *file;
  int prc = cli_flags_parse(&compile_spec, argc, argv, &o, &file);
  if (prc) return prc < 0 ? CLI_OK : prc;
  const cli_path source = {"FILE.sf", file};
  if ((prc = cli_flags_check_files(&compile_spec, &o, &source, 1)) != CLI_OK) return prc;
  const char *dir = o.dir, *tuning = o.tuning;
  bool ir = o.ir;
  sheaf_isa isa = (sheaf_isa)o.isa;
  sheaf_ctx *ctx = cli_ctx(1);
  if (!ctx) return CLI_FAIL;
  sh_tune_set ts;
  sh_tune_set_init(&ts, ctx);
  cli_source src;
  int rc = cli_source_load(ctx, file, &src);
  file = src.name;
  if (rc == CLI_OK && tuning && sh_tune_set_load(&ts, tuning, false) != SHEAF_OK) {
    cli_error("%s", sheaf_ctx_last_error(ctx));
    rc = CLI_FAIL;
  }
  sh_buf out;
  sh_buf_init(&out, ctx);
  sheaf_status st;
  const sh_kernel *const *ks = NULL;
  int n = rc == CLI_OK ? sh_module_kernels(&src.m, &ks) : 0;
  if (rc == CLI_OK && n == 0) {
    cli_error("%s: no kernel declarations", file);
    rc = CLI_FAIL;
  }
  if (rc == CLI_OK && dir && mkdir(dir, 0777) != 0 && errno != EEXIST) {
    cli_error("cannot create %s: %s", dir, strerror(errno));
    rc = CLI_FAIL;
  }
  if (rc == CLI_OK && dir) {
    size_t hn;
    const char *h = sh_lir_abi_header(&hn);
    rc = write_file(ctx, dir, "sheaf_kernel_abi.h", h, hn);
  }
  for (int i = 0; rc == CLI_OK && i < n; i++) {
    sh_buf c;
    sh_buf_init(&c, ctx);
    sh_lir_kernel *L = NULL;
    st = sh_lower_generate(ctx, ks[i], isa, dir ? &c : NULL, &L, NULL);
    if (st) {
      cli_error("%s: %s", file, sheaf_ctx_last_error(ctx));
      rc = CLI_FAIL;
    } else {
      if (ir) {
        sh_buf_clear(&out);
        sh_lir_print(L, &out);
        fwrite(out.data ? (const char *)out.data : "", 1, out.len, stdout);
        if (i + 1 < n) putchar('\n');
      }
      if (dir) {
        char name[300];
        snprintf(name, sizeof name, "%s.c", ks[i]->name);
        rc = write_file(ctx, dir, name, sh_buf_cstr(&c), c.len);
      }
      if (dir && rc == CLI_OK && ts.n) rc = write_tuned(ctx, dir, ks[i], isa, &ts);
    }
    sh_lir_free(L);
    sh_buf_free(&c);
  }
  if (rc == CLI_OK && !dir && !ir) {
    cli_error("compile: nothing to do: give --emit-c DIR or --emit-ir (see 'sheaf compile --help')");
    rc = CLI_USAGE;
  }
  sh_tune_set_free(&ts);
  sh_buf_free(&out);
  cli_source_free(&src);
  sheaf_ctx_free(ctx);
  return rc;
}
