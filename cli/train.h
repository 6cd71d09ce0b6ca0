/*
 * train.h — `sheaf train` (cli/train.c). argv[0] is "train"; returns a
 * CLI exit code.
 */
#ifndef SHEAF_CLI_TRAIN_H
#define SHEAF_CLI_TRAIN_H

int cli_train(int argc, char **argv);

#endif
