/*
 * fuzz_graph.c — libFuzzer target for the batching runtime: the input's
 * bytes choose a random program over every graph builder (tests/graph_fuzz.h),
 * which runs for several instances under every policy with 1 and 2 threads;
 * any value that differs from policy none beyond 1e-5, and any error,
 * traps (the program is printed first). ASan/UBSan catch everything else.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../tests/graph_fuzz.h"
#include "sheaf.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static sheaf_ctx *ctx;
  static gf_world *w;
  if (!ctx && sheaf_ctx_create(&(sheaf_ctx_options){.threads = 2}, &ctx, NULL, 0) != SHEAF_OK) abort();
  if (!w && gf_world_create(ctx, &w) != SHEAF_OK) abort();
  gf_src src = {data, size, 0, 0};
  gf_result r;
  gf_run(w, &src, &r);
  if (!r.ok) {
    fprintf(stderr, "graph fuzz: %s\n", r.msg);
    gf_dump(w, stderr);
  }
  REQUIRE(r.ok);
  return 0;
}
