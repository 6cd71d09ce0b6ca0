/*
 * run.h — `sheaf run` and `sheaf bench` for the built-in models
 * (cli/run.c). argv[0] is "run" / "bench"; returns a CLI exit code.
 */
#ifndef SHEAF_CLI_RUN_H
#define SHEAF_CLI_RUN_H

int cli_run(int argc, char **argv);
int cli_bench(int argc, char **argv);

#endif
