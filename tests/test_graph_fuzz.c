/*
 * test_graph_fuzz.c — the differential graph fuzzer (graph_fuzz.h), seeded:
 * 10,000 random programs over every builder, each run for several
 * instances under every policy with 1 and 2 threads and compared value by
 * value with policy none. SHEAF_GRAPH_FUZZ_N overrides the count (and
 * SHEAF_GRAPH_FUZZ_SEED the first seed) to search longer; a failure prints
 * the seed and the program.
 */
#include <stdlib.h>

#include "graph_fuzz.h"
#include "harness.h"

static long env_long(const char *name, long dflt) {
  const char *s = getenv(name);
  char *end;
  long v = s ? strtol(s, &end, 10) : dflt;
  return s && *s && !*end && v > 0 ? v : dflt;
}

TEST(graph_fuzz_every_policy_matches_none) {
  sheaf_ctx *ctx = th_ctx();
  gf_world *w;
  REQUIRE_OK(ctx, gf_world_create(ctx, &w));
  long n = env_long("SHEAF_GRAPH_FUZZ_N", 10000), seed0 = env_long("SHEAF_GRAPH_FUZZ_SEED", 1);
  long failures = 0, values = 0;
  for (long i = 0; i < n && failures < 3; i++) {
    uint64_t seed = (uint64_t)(seed0 + i);
    gf_src src = {NULL, 0, 0, 0x9e3779b97f4a7c15ull * seed + 1};
    gf_result r;
    gf_run(w, &src, &r);
    values += (long)(r.values * r.instances);
    if (!r.ok) {
      failures++;
      th_fail(__FILE__, __LINE__, "seed %llu: %s", (unsigned long long)seed, r.msg);
      gf_dump(w, stderr);
    }
  }
  CHECK(failures || values > n); /* the programs are not empty */
  gf_world_free(w);
}
