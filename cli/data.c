/* STUB — being replaced by the text-readers work: `sheaf data stats|binarize`. */
#include "cli.h"
int cli_data(int argc, char **argv) {
  (void)argc;
  (void)argv;
  cli_error("data: not implemented yet");
  return CLI_FAIL;
}
