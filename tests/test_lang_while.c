/*
 * test_lang_while.c — tensor-dependent control flow in the language:
 * `while` loops, argmax / item (wait points), push and typed empty lists.
 * The greedy decoder (examples/decoder.sf: while + argmax + a list[i32]
 * output) and the early-exit classifier (examples/early_exit.sf: item in
 * the condition) run batched on fibers (64 instances per batch, every
 * policy, 1 and 2 threads) and must equal one instance per batch: the
 * decoder's tokens identical, the classifier's labels and layer counts
 * identical and its probabilities within 1e-5. Also: the batched run
 * flushes far less often than the per-instance one, host f32 and list
 * building give exact values, a loop past its bound stops with an error at
 * its line, sheaf check lists the wait points, and sheaf_program runs a
 * program with wait points on fibers.
 */
#include <math.h>
#include <stdlib.h>

#include "harness.h"

#define EWT "data/ud_english_ewt/en_ewt-ud-test.conllu"

static const char *const k_pols[] = {"none", "sheaf", "depth", "agenda"};

/* Runs `sheaf run examples/NAME.sf` on the first `limit` EWT sentences;
 * the output goes to tmp file `out`, the summary (stdout) to sum. */
static bool run_example(const char *name, const char *sizes, int limit, const char *pol, int threads,
                        int batch, const char *out, char *sum, size_t cap) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "%s run examples/%s.sf --data " EWT " --limit %d --seed 7 %s --policy %s --threads %d "
           "--batch %d --out %s",
           th_sheaf_bin(), name, limit, sizes, pol, threads, batch, out);
  int rc = th_run(cmd, sum, cap);
  if (!CHECK_EQ_INT(rc, 0)) {
    fprintf(stderr, "%s\n%s", cmd, sum);
    return false;
  }
  return true;
}

#define DEC_SIZES "--size E=24 --size H=20 --size C=8"

TEST(lang_while_decoder_batched_equals_per_instance) {
  if (!th_sheaf_bin()) return;
  static char sum[1 << 14], ref_text[1 << 20];
  char ref[512], got[512];
  snprintf(ref, sizeof ref, "%s", th_tmp_path("dec_ref.txt"));
  REQUIRE(run_example("decoder", DEC_SIZES, 200, "none", 1, 1, ref, sum, sizeof sum));
  long per_instance_flushes = th_flushes_of(sum);
  const char *t = th_read_file(ref, NULL);
  REQUIRE(t);
  snprintf(ref_text, sizeof ref_text, "%s", t);
  /* 200 sentences, each a line of tokens; some stop at EOS (2), some run to the bound */
  long lines = 0, eos = 0;
  for (const char *p = ref_text; *p; p++)
    if (*p == '\n') {
      lines++;
      eos += p >= ref_text + 2 && p[-1] == '2' && p[-2] == ' ';
    }
  CHECK_EQ_INT(lines, 200);
  CHECK(eos > 0 && eos < lines);
  for (int p = 0; p < 4; p++)
    for (int th = 1; th <= 2; th++) {
      char name[64];
      snprintf(name, sizeof name, "dec_%s_%d.txt", k_pols[p], th);
      snprintf(got, sizeof got, "%s", th_tmp_path(name));
      if (!run_example("decoder", DEC_SIZES, 200, k_pols[p], th, 64, got, sum, sizeof sum)) continue;
      const char *g = th_read_file(got, NULL);
      if (!CHECK(g && !strcmp(g, ref_text)))
        fprintf(stderr, "decoder, policy %s, %d threads: tokens differ from one instance per batch\n",
                k_pols[p], th);
      if (th == 1) { /* the decoding steps of a batch's sentences share flushes */
        long f = th_flushes_of(sum);
        if (!CHECK(f > 0 && f * 5 < per_instance_flushes))
          fprintf(stderr, "decoder, policy %s: %ld flushes batched, %ld one by one\n", k_pols[p], f,
                  per_instance_flushes);
      }
    }
}

#define EE_SIZES "--size H=24 --size C=5"

TEST(lang_while_early_exit_batched_equals_per_instance) {
  if (!th_sheaf_bin()) return;
  static char sum[1 << 14];
  char ref[512], got[512];
  snprintf(ref, sizeof ref, "%s", th_tmp_path("ee_ref.txt"));
  REQUIRE(run_example("early_exit", EE_SIZES, 300, "none", 1, 1, ref, sum, sizeof sum));
  /* per sentence: label, layers used, probabilities; the layers vary */
  FILE *f = fopen(ref, "r");
  REQUIRE(f);
  char line[4096];
  long n = 0, seen[9] = {0};
  while (fgets(line, sizeof line, f)) {
    if (n % 3 == 1) {
      long k = strtol(strchr(line, ' '), NULL, 10);
      if (CHECK(k >= 0 && k <= 8)) seen[k]++;
    }
    n++;
  }
  fclose(f);
  CHECK_EQ_INT(n, 3 * 300);
  CHECK(seen[0] > 0 && seen[8] > 0 && seen[0] + seen[8] < 300); /* exits at 0, 8 and between */
  for (int p = 0; p < 4; p++)
    for (int th = 1; th <= 2; th++) {
      char name[64];
      snprintf(name, sizeof name, "ee_%s_%d.txt", k_pols[p], th);
      snprintf(got, sizeof got, "%s", th_tmp_path(name));
      if (!run_example("early_exit", EE_SIZES, 300, k_pols[p], th, 64, got, sum, sizeof sum)) continue;
      long lines, agree;
      double e = th_compare_outputs(ref, got, 1, &lines, &agree);
      /* label and layer lines are integers: any difference there exceeds 1e-5 */
      if (!CHECK(e >= 0 && e <= 1e-5) || !CHECK_EQ_INT(lines, 900))
        fprintf(stderr, "early_exit, policy %s, %d threads: max rel err %g over %ld lines\n", k_pols[p],
                th, e, lines);
    }
}

/* A small program through the CLI: exact values of host f32 arithmetic,
 * comparisons, push onto a typed '[]', and a while over i32 state. */
TEST(lang_while_host_values_and_lists) {
  if (!th_sheaf_bin()) return;
  static const char src[] =
      "param v: f32[H] = ones\n"
      "fn main(ws: list[i32]) -> (list[i32], f32, bool, i32) {\n"
      "  let none: list[i32] = [];\n"
      "  let (k, xs) = while (k, xs) = (0, none); k < len(ws) max len(ws) { (k + 1, push(xs, 2 * k)) };\n"
      "  let s = item(sum(v));\n"
      "  (xs, s * 0.5 - 1.0, item(v[0]) >= 1.0 && -s < 0.0, argmax(cat(v, v * 2.0, v)) + k)\n"
      "}\n";
  const char *sf = th_write_tmp("host.sf", src, sizeof src - 1);
  char cmd[2048], out_path[512];
  static char out[1 << 14];
  snprintf(out_path, sizeof out_path, "%s", th_tmp_path("host.txt"));
  snprintf(cmd, sizeof cmd, "%s run %s --data tests/data/tokens_ids.txt --size H=4 --limit 2 --out %s",
           th_sheaf_bin(), sf, out_path);
  REQUIRE(CHECK_EQ_INT(th_run(cmd, out, sizeof out), 0));
  const char *got = th_read_file(out_path, NULL);
  REQUIRE(got);
  /* instance 0: its words' count n gives 0 2 4 ..., 4 * 0.5 - 1 = 1, true, argmax 4 + n */
  char want[4096];
  size_t at = 0;
  FILE *d = fopen("tests/data/tokens_ids.txt", "r");
  REQUIRE(d);
  char line[4096];
  for (int i = 0; i < 2 && fgets(line, sizeof line, d);) {
    int n = 0;
    for (char *p = strtok(line, " \t\n"); p; p = strtok(NULL, " \t\n")) n++;
    if (!n) continue;
    at += (size_t)snprintf(want + at, sizeof want - at, "%d", i);
    for (int k = 0; k < n; k++) at += (size_t)snprintf(want + at, sizeof want - at, " %d", 2 * k);
    at += (size_t)snprintf(want + at, sizeof want - at, "\n%d 1\n%d 1\n%d %d\n", i, i, i, 4 + n);
    i++;
  }
  fclose(d);
  CHECK_EQ_STR(got, want);
}

/* A loop whose condition still holds at its bound stops the run with an
 * error at the loop's line, naming the instance. */
TEST(lang_while_bound_exceeded_is_an_error) {
  if (!th_sheaf_bin()) return;
  static const char src[] =
      "param emb: f32[V, H]\n"
      "fn main(ws: list[i32]) -> i32 {\n"
      "  while k = 0; item(sum(emb[ws[0]])) > -1000.0 max 3 { k + 1 }\n"
      "}\n";
  const char *sf = th_write_tmp("bound.sf", src, sizeof src - 1);
  char cmd[2048];
  static char out[1 << 14];
  snprintf(cmd, sizeof cmd, "%s run %s --data " EWT " --size H=4 --limit 5 --seed 1 2>&1", th_sheaf_bin(), sf);
  CHECK_EQ_INT(th_run(cmd, out, sizeof out), 1);
  CHECK_CONTAINS(out, "bound.sf:3:3: error: 'while' reached its bound (max 3) and its condition still holds");
  CHECK_CONTAINS(out, "note: while running sentence 0 of");
}

TEST(lang_while_check_lists_wait_points) {
  if (!th_sheaf_bin()) return;
  static char out[1 << 15];
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s check examples/decoder.sf examples/early_exit.sf examples/seq2seq.sf",
           th_sheaf_bin());
  REQUIRE(CHECK_EQ_INT(th_run(cmd, out, sizeof out), 0));
  CHECK_CONTAINS(out, "waits: 1 point where an instance waits for a value");
  CHECK_CONTAINS(out, ": argmax\n");
  CHECK_CONTAINS(out, "waits: 2 points where an instance waits for a value");
  CHECK_CONTAINS(out, ": item\n");
  const char *s2s = strstr(out, "examples/seq2seq.sf: ok");
  CHECK(s2s && !strstr(s2s, "waits:")); /* a program without wait points: none listed */
}

/* sheaf_program runs a program with wait points on fibers: the
 * probabilities of 64 sentences per batch equal one per batch, under every
 * policy. */
TEST(lang_while_program_api_fibers) {
  sheaf_ctx *ctx = th_ctx();
  enum { N = 70 };
  static int32_t words[N][12];
  const int32_t *wp[N];
  int64_t lens[N];
  uint64_t rs = 99;
  for (int i = 0; i < N; i++) {
    lens[i] = 1 + i % 12;
    for (int k = 0; k < lens[i]; k++) words[i][k] = (int32_t)(th_frand(&rs) * 1000) % 49;
    wp[i] = words[i];
  }
  const char *names[2] = {"H", "C"};
  const int64_t values[2] = {16, 5};
  static const sheaf_policy pols[] = {SHEAF_POLICY_NONE, SHEAF_POLICY_SHEAF, SHEAF_POLICY_DEPTH,
                                      SHEAF_POLICY_AGENDA};
  sheaf_value_view v;
  static float ref_data[N][5];
  for (int run = 0; run < 5; run++) {
    sheaf_program_opts o = {0};
    o.seed = 3;
    o.vocab = 50;
    o.n_sizes = 2;
    o.size_names = names;
    o.size_values = values;
    o.runner.threads = 1;
    o.runner.batch = run == 0 ? 1 : 64;
    o.runner.policy = run == 0 ? SHEAF_POLICY_NONE : pols[run - 1];
    sheaf_program *p = NULL;
    REQUIRE_OK(ctx, sheaf_program_load(ctx, "examples/early_exit.sf", &o, &p));
    if (CHECK_OK(ctx, sheaf_program_run_words(p, N, wp, lens))) {
      double worst = 0;
      for (int i = 0; i < N; i++) {
        if (!CHECK_EQ_INT((int)sheaf_program_outputs(p, i, 1, &v), 1) || !CHECK_EQ_INT((int)v.shape[0], 5))
          break;
        for (int c = 0; c < 5; c++) {
          if (run == 0) ref_data[i][c] = v.data[c];
          double d = fabs((double)v.data[c] - ref_data[i][c]);
          if (d > worst) worst = d;
        }
      }
      if (!CHECK(worst <= 1e-5)) fprintf(stderr, "sheaf_program run %d: max abs err %g\n", run, worst);
    }
    sheaf_program_free(p);
  }
}

/* Waits deep in a recursion over trees, inside a phase: each instance's
 * call depth, phase and generic sizes survive the other instances running
 * on the same interpreter while it waits. Batched equals one per batch. */
TEST(lang_while_waits_in_tree_recursion_and_phase) {
  if (!th_sheaf_bin()) return;
  static const char src[] =
      "type Tree = Leaf(word: i32) | Node(left: Tree, right: Tree)\n"
      "param emb: f32[V, H]\n"
      "param W: f32[2*H, H]\n"
      "param u: f32[H]\n"
      "fn flip(x: f32[N]) -> f32[N] { if item(sum(x)) > 0.0 { x } else { -x } }\n"
      "fn tree(t: Tree) -> f32[H] {\n"
      "  match t {\n"
      "    Leaf(w) => emb[w],\n"
      "    Node(l, r) => {\n"
      "      let h = tanh(cat(tree(l), tree(r)) @ W);\n"
      "      if item(sum(h * u)) > 0.0 { flip(h) } else { -h }\n"
      "    }\n"
      "  }\n"
      "}\n"
      "fn main(t: Tree) -> f32[H] { phase 1 { tree(t) * 2.0 } }\n";
  const char *sf = th_write_tmp("treewait.sf", src, sizeof src - 1);
  static char out[1 << 14];
  char cmd[2048], ref[512], got[512];
  snprintf(ref, sizeof ref, "%s", th_tmp_path("treewait_ref.txt"));
  snprintf(cmd, sizeof cmd, "%s run %s --data " EWT " --size H=16 --limit 200 --seed 2 --batch 1 --policy none "
           "--threads 1 --out %s", th_sheaf_bin(), sf, ref);
  REQUIRE(CHECK_EQ_INT(th_run(cmd, out, sizeof out), 0));
  for (int p = 0; p < 4; p++) {
    snprintf(got, sizeof got, "%s", th_tmp_path("treewait_got.txt"));
    snprintf(cmd, sizeof cmd, "%s run %s --data " EWT " --size H=16 --limit 200 --seed 2 --batch 64 --policy %s "
             "--threads 2 --out %s", th_sheaf_bin(), sf, k_pols[p], got);
    if (!CHECK_EQ_INT(th_run(cmd, out, sizeof out), 0)) {
      fprintf(stderr, "%s\n%s", cmd, out);
      continue;
    }
    long lines;
    double e = th_compare_outputs(ref, got, 1, &lines, NULL);
    if (!CHECK(e >= 0 && e <= 1e-5) || !CHECK_EQ_INT(lines, 200))
      fprintf(stderr, "tree waits, policy %s: max rel err %g over %ld lines\n", k_pols[p], e, lines);
  }
}
