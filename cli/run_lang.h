/*
 * run_lang.h — `sheaf run MODEL.sf ...`: runs a model written in the model
 * language (cli/run_lang.c).
 */
#ifndef SHEAF_CLI_RUN_LANG_H
#define SHEAF_CLI_RUN_LANG_H

/* argv[0] is "run", argv[1] the .sf file. Exit codes as in cli.h. */
int cli_run_lang(int argc, char **argv);

#endif
