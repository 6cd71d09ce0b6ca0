/*
 * main.c — the `sheaf` executable: global flags and subcommand dispatch.
 * Each subcommand lives in its own file (data.c, ...); this file only routes.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/stack.h"

#include "cli.h"
#include "run_lang.h"
#include "run.h"
#include "train.h"

static const char usage[] =
    "usage: sheaf [--help] [--version] <command> [args]\n"
    "\n"
    "Sheaf runs dynamic deep-learning models (trees, sequences, ragged batches)\n"
    "batched across many instances.\n"
    "\n"
    "commands:\n"
    "  data     look at and convert inputs:\n"
    "             sheaf data stats FILE          statistics of a .conllu treebank, PTB trees,\n"
    "                                            token lines, or a .safetensors weights file\n"
    "             sheaf data binarize FILE.conllu [-o OUT] [--child-sum]\n"
    "                                            dependency trees -> binary (or child-sum)\n"
    "                                            PTB s-expressions, one tree per line\n"
    "  run      run a built-in model over a data file, batched:\n"
    "             sheaf run treelstm|childsum|bilstm|mvrnn --data FILE [--hidden H]\n"
    "                 [--batch N] [--threads T] [--policy sheaf|none|depth|agenda]\n"
    "                 [--seed S | --weights W] [--out FILE] [--trace FILE] [--stats]\n"
    "           or a model from source (see 'sheaf run MODEL.sf --help'):\n"
    "             sheaf run MODEL.sf --data FILE [--batch N] [--threads T] ...\n"
    "           --trace FILE writes the timeline of batches as Chrome-trace JSON\n"
    "           (open it in ui.perfetto.dev or chrome://tracing)\n"
    "  train    train a built-in model on labelled data, checkpointing its weights:\n"
    "             sheaf train bilstm|treelstm --data TRAIN [--dev DEV] --out W.safetensors\n"
    "                 [--epochs N] [--time-limit S] [--optimizer adam|sgd|adagrad] [--lr X]\n"
    "                 [--batch N] [--threads T] [--seed S] [--resume W.safetensors]\n"
    "  check    type-check model sources: errors, or a summary of sizes, types,\n"
    "           parameters and functions:  sheaf check MODEL.sf...\n"
    "  compile  generate C for the kernels of a source (ahead-of-time use):\n"
    "             sheaf compile FILE.sf --emit-c DIR    one .c per kernel + its ABI header\n"
    "             sheaf compile FILE.sf --emit-ir       the scheduled loop IR\n"
    "  tune     search the schedules of a source's kernels by measuring them:\n"
    "             sheaf tune FILE.sf [--size N=V,...] [--data FILE] [--budget S] [--out FILE]\n"
    "  bench    throughput of a built-in model per batching policy:\n"
    "             sheaf bench MODEL --data FILE [--policy LIST] [--repeat R] ...\n"
    "\n"
    "environment:\n"
    "  SHEAF_ISA=scalar|avx2|avx512   lower the instruction set the kernels use\n"
    "  SHEAF_SPIN_US=N                microseconds idle pool threads spin before sleeping\n"
    "  SHEAF_MEMORY_LIMIT=SIZE        memory budget, e.g. 8G (default: physical memory)\n"
    "  SHEAF_MAX_INPUT=SIZE           largest text input or stream read (default 1G)\n"
    "\n"
    "Run 'sheaf <command> --help' for a command's options.\n";

static int version(void) {
  sheaf_ctx *ctx = cli_ctx(0);
  if (!ctx) return CLI_USAGE;
  printf("sheaf %s\n", sheaf_version());
  printf("isa: %s (host supports %s)\n", sheaf_isa_name(sheaf_cpu_isa()),
         sheaf_isa_name(sheaf_cpu_isa_host()));
  printf("threads: %d\n", sheaf_ctx_threads(ctx));
  sheaf_ctx_free(ctx);
  return CLI_OK;
}

static int dispatch(int argc, char **argv) {
  if (argc < 2) {
    fputs(usage, stderr);
    return CLI_USAGE;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
    fputs(usage, stdout);
    return CLI_OK;
  }
  if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V")) return version();
  if (!strcmp(cmd, "data")) return cli_data(argc - 1, argv + 1);
  if (!strcmp(cmd, "run")) {
    /* `sheaf run MODEL.sf ...` runs a model from source; otherwise a built-in example. */
    for (int i = 2; i < argc; i++) {
      size_t n = strlen(argv[i]);
      if (argv[i][0] != '-' && n > 3 && !strcmp(argv[i] + n - 3, ".sf")) return cli_run_lang(argc - 1, argv + 1);
      if (argv[i][0] != '-') break;
    }
    return cli_run(argc - 1, argv + 1);
  }
  if (!strcmp(cmd, "train")) return cli_train(argc - 1, argv + 1);
  if (!strcmp(cmd, "check")) return cli_check(argc - 1, argv + 1);
  if (!strcmp(cmd, "compile")) return cli_compile(argc - 1, argv + 1);
  if (!strcmp(cmd, "tune")) return cli_tune(argc - 1, argv + 1);
  if (!strcmp(cmd, "bench")) return cli_bench(argc - 1, argv + 1);
  if (!strcmp(cmd, "trace")) {
    cli_error("there is no 'trace' command: pass --trace FILE to 'sheaf run' or 'sheaf bench'");
    return CLI_USAGE;
  }
  cli_error("unknown command '%s' (see 'sheaf --help')", cmd);
  return CLI_USAGE;
}

typedef struct main_args {
  int argc;
  char **argv;
  int rc;
} main_args;

static void *main_thread(void *arg) {
  main_args *a = arg;
  a->rc = dispatch(a->argc, a->argv);
  return NULL;
}

/* Standard output must have taken everything the command wrote (a full
 * disk, /dev/full, a closed pipe): checked for every command at exit; a
 * failure is exit 1 (a usage error keeps its 2). A standard output that was
 * closed before the start (>&-) and never written is fine. */
static int finish_stdout(int rc) {
  errno = 0;
  int e = 0;
  if (fflush(stdout) != 0 || ferror(stdout)) e = errno ? errno : EIO;
  errno = 0;
  if (fclose(stdout) != 0 && !e && errno != EBADF) e = errno ? errno : EIO;
  if (e) {
    fprintf(stderr, "sheaf: error: writing to standard output failed: %s\n", strerror(e));
    if (rc == CLI_OK) rc = CLI_FAIL;
  }
  return rc;
}

/* The commands run on a thread with a big stack (base/stack.h): models in
 * the language recurse as deep as their inputs. */
int main(int argc, char **argv) {
  /* Not a terminal: one 64 KiB buffer, so that what a command prints up to
   * that size (help texts, summaries) meets a write error at the final
   * flush, which still knows its errno (ENOSPC, EPIPE); glibc's default
   * 4 KiB buffer fails inside a printf, whose errno is gone by the time
   * finish_stdout looks (it then can only say EIO). */
  static char stdout_buf[1 << 16];
  if (!isatty(STDOUT_FILENO)) setvbuf(stdout, stdout_buf, _IOFBF, sizeof stdout_buf);
  main_args a = {argc, argv, CLI_FAIL};
  pthread_t t;
  sh_stack st;
  if (sh_thread_start(&t, &st, SH_BIG_STACK, main_thread, &a) != 0) {
    a.rc = dispatch(argc, argv);
  } else {
    pthread_join(t, NULL);
    sh_stack_free(&st);
  }
  sh_file_release_all(); /* the inputs held in memory (cli_hold_input) */
  return finish_stdout(a.rc);
}
