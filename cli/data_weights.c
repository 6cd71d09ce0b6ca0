/* STUB — being replaced by the safetensors work: `sheaf data stats W.safetensors`. */
#include "cli.h"
int cli_data_stats_weights(sheaf_ctx *ctx, const char *path, FILE *out) {
  (void)ctx;
  (void)out;
  cli_error("%s: safetensors listing not implemented yet", path);
  return CLI_FAIL;
}
