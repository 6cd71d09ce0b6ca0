/*
 * test_lang_examples.c — the example models written only in the language
 * (the examples/ models without a C twin: GRU, tree-GRU, tree attention, stacked
 * BiLSTM tagger, attention pooling, trigram CNN, structure branches,
 * seq2seq with attention, a post-LN transformer layer, hand-written
 * softmax and layer norm, a tagger over CoNLL-U token records): each runs through `sheaf run` on the first EWT
 * instances with seeded weights under every policy on 1 and 2 threads,
 * and every output equals policy none on one thread within 1e-5 relative
 * (floor 1); the hand-written softmax and layer norm equal the builtins.
 */
#include <math.h>
#include <stdlib.h>

#include "harness.h"

#define EWT "data/ud_english_ewt/en_ewt-ud-test.conllu"
#define LIMIT "300"

typedef struct example {
  const char *name, *sizes;
  int keys; /* leading integers of an output line (instance, list element) */
} example;

static const example k_examples[] = {
    {"gru", "--size E=24 --size H=20 --size C=5", 1},
    {"treegru", "--size E=24 --size H=20 --size C=5", 1},
    {"treeattn", "--size E=24 --size H=20 --size C=5", 1},
    {"tagger2", "--size E=24 --size H=20 --size T=17", 2},
    {"attnpool", "--size E=24 --size H=20 --size C=5", 1},
    {"cnn", "--size E=24 --size F=40 --size C=5", 1},
    {"branches", "--size E=24 --size H=20 --size C=5", 1},
    {"seq2seq", "--size E=24 --size H=20 --size C=30", 2},
    {"transformer", "--size DK=8 --size F=64", 2},
    {"handnorm", "--size H=20", 1},
    {"chartagger", "--size E=12 --size H=16 --size T=17", 2},
};


TEST(lang_examples_every_policy_same_outputs) {
  if (!th_sheaf_bin()) return;
  const char *data = th_ewt_head(300); /* --limit 300 of a file of 300 sentences: no 1.8 MB parse a run */
  if (!data) return;
  static const char *const pols[] = {"none", "sheaf", "depth", "agenda"};
  static char out[1 << 14];
  char cmd[2048], ref[512], got[512];
  for (size_t k = 0; k < sizeof k_examples / sizeof *k_examples; k++) {
    const example *x = &k_examples[k];
    char name[96];
    snprintf(name, sizeof name, "ex_%s_none_1.txt", x->name);
    snprintf(ref, sizeof ref, "%s", th_tmp_path(name));
    for (int p = 0; p < 4; p++)
      for (int t = 1; t <= 2; t++) {
        snprintf(name, sizeof name, "ex_%s_%s_%d.txt", x->name, pols[p], t);
        snprintf(got, sizeof got, "%s", th_tmp_path(name));
        snprintf(cmd, sizeof cmd,
                 "%s run examples/%s.sf --data %s --limit " LIMIT " --seed 5 --mode dynamic %s --policy %s "
                 "--threads %d --batch 64 --out %s",
                 th_sheaf_bin(), x->name, data, x->sizes, pols[p], t, got);
        if (!CHECK_EQ_INT(th_run(cmd, out, sizeof out), 0)) {
          fprintf(stderr, "%s\n%s", cmd, out);
          continue;
        }
        long lines;
        double e = th_compare_outputs(ref, got, x->keys, &lines, NULL);
        if (!CHECK(e >= 0 && e <= 1e-5) || !CHECK(lines >= 300))
          fprintf(stderr, "%s, policy %s, %d threads: max rel err %g over %ld lines\n", x->name, pols[p],
                  t, e, lines);
      }
  }
}

/* handnorm.sf prints (softmax of two by hand, my_softmax - softmax,
 * my_layer_norm - layer_norm) per sentence: the differences are zero up to
 * rounding. */
TEST(lang_examples_hand_written_softmax_and_layer_norm) {
  if (!th_sheaf_bin()) return;
  static char out[1 << 14];
  char cmd[1024], path[512];
  snprintf(path, sizeof path, "%s", th_tmp_path("handnorm.txt"));
  snprintf(cmd, sizeof cmd, "%s run examples/handnorm.sf --data " EWT " --limit " LIMIT " --seed 2 --size H=33 --out %s",
           th_sheaf_bin(), path);
  REQUIRE(CHECK_EQ_INT(th_run(cmd, out, sizeof out), 0));
  FILE *f = fopen(path, "r");
  REQUIRE(f);
  static char line[1 << 14];
  long n = 0;
  double worst = 0;
  while (fgets(line, sizeof line, f)) {
    char *p = line, *e;
    strtol(p, &p, 10);
    for (double v; (v = strtod(p, &e)), e != p; p = e)
      if (n % 3 != 0 && !(fabs(v) <= worst)) worst = fabs(v);
    n++;
  }
  fclose(f);
  CHECK_EQ_INT(n, 3 * 300);
  CHECK(worst <= 1e-5);
}
