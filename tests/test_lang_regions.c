/*
 * test_lang_regions.c — a while loop frees each iteration's dead host
 * values (interp.c: per-iteration regions, the live state copied forward).
 * The program's states share parts (a tree doubled 40 times: a copy that
 * did not keep the sharing would need 2^40 nodes), nest loops, keep values
 * made before the loop (the input list) and wait inside the loop (argmax),
 * so on fibers at batch 64 many instances are inside their loops at once,
 * and make enough garbage per iteration that the state is copied out
 * mid-loop (SH_WHILE_COLLECT);
 * the outputs must equal those computed here from the data, at batch 64
 * and at one instance per batch, under 1 and 2 threads.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static const char k_src[] =
    "type T = Leaf(w: i32) | Node(l: T, r: T)\n"
    "param v: f32[H] = ones\n"
    "fn left(t: T) -> T { match t { Leaf(w) => Leaf(w + 1), Node(l, _) => l } }\n"
    "fn is_leaf(t: T) -> bool { match t { Leaf(_) => true, Node(_, _) => false } }\n"
    "fn word(t: T) -> i32 { match t { Leaf(w) => w, Node(_, _) => -1 } }\n"
    "fn main(ws: list[i32]) -> (list[i32], i32, i32, list[i32]) {\n"
    "  let n = len(ws);\n"
    "  let (t, _) = while (t, k) = (Leaf(ws[0]), 0); k < 40 max 40 {\n"
    "    let junk = for i in 0..10000 { i };\n"
    "    (Node(t, t), k + 1 + len(junk) - 10000)\n"
    "  };\n"
    "  let (leaf, d) = while (u, d) = (t, 0); !is_leaf(u) max 64 { (left(u), d + 1) };\n"
    "  let none: list[i32] = [];\n"
    "  let (xs, ys, _) = while (xs, ys, k) = (none, ws, 0); k < n max n {\n"
    "    let (acc, _) = while (acc, j) = (none, 0); j <= k max n { (push(acc, j), j + 1) };\n"
    "    let g = argmax(cat(v, v * 2.0)) - 4;\n"
    "    let big = for i in 0..20000 { i + g };\n"
    "    (push(xs, len(acc) + big[19999] - 19999), set(ys, k, ys[k] * 2 + g), k + 1)\n"
    "  };\n"
    "  (xs, d, word(leaf) - ws[0], ys)\n"
    "}\n";

TEST(lang_while_regions_keep_shared_nested_and_waiting_state) {
  if (!th_sheaf_bin()) return;
  const char *sf = th_write_tmp("regions.sf", k_src, sizeof k_src - 1);
  /* the expected outputs of the first 8 instances, from the data */
  static char want[1 << 15];
  size_t at = 0;
  FILE *d = fopen("tests/data/tokens_ids.txt", "r");
  REQUIRE(d);
  char line[4096];
  for (int i = 0; i < 8 && fgets(line, sizeof line, d);) {
    int w[512], n = 0;
    for (char *p = strtok(line, " \t\n"); p && n < 512; p = strtok(NULL, " \t\n")) w[n++] = atoi(p);
    if (!n) continue;
    at += (size_t)snprintf(want + at, sizeof want - at, "%d", i);
    for (int k = 0; k < n; k++) at += (size_t)snprintf(want + at, sizeof want - at, " %d", k + 1);
    at += (size_t)snprintf(want + at, sizeof want - at, "\n%d 40\n%d 0\n%d", i, i, i);
    for (int k = 0; k < n; k++) at += (size_t)snprintf(want + at, sizeof want - at, " %d", 2 * w[k]);
    at += (size_t)snprintf(want + at, sizeof want - at, "\n");
    i++;
  }
  fclose(d);
  static const int batches[] = {64, 1};
  for (int b = 0; b < 2; b++)
    for (int threads = 1; threads <= 2; threads++) {
      char cmd[2048], out_path[512];
      static char sum[1 << 14];
      snprintf(out_path, sizeof out_path, "%s", th_tmp_path("regions.txt"));
      snprintf(cmd, sizeof cmd, "%s run %s --data tests/data/tokens_ids.txt --size H=4 --limit 8 "
               "--batch %d --threads %d --out %s", th_sheaf_bin(), sf, batches[b], threads, out_path);
      REQUIRE(CHECK_EQ_INT(th_run(cmd, sum, sizeof sum), 0));
      const char *got = th_read_file(out_path, NULL);
      REQUIRE(got);
      CHECK_EQ_STR(got, want);
    }
}
