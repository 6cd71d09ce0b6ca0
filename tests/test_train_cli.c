/*
 * test_train_cli.c — `sheaf train bilstm` through the built executable on
 * tests/data/small.conllu: the loss falls over the epochs, the checkpoint
 * loads in `sheaf run --weights` (with --vocab or the vocabulary in its
 * metadata) and scores the accuracy the trainer reported, resuming continues the run (plain SGD: 1 + 1 epochs
 * give the bytes of 2), same seed and threads give the same bytes, the time
 * limit stops early, and bad flags and bad files are clear errors.
 */
#include <stdarg.h>
#include <stdlib.h>

#include "harness.h"

#define SMALL "tests/data/small.conllu"
#define SMALL_ARGS "train bilstm --data " SMALL " --hidden 8 --embed 8 --min-count 1 --threads 1"

static char g_out[1 << 16];

#define sheaf(...) th_sheaf(g_out, sizeof g_out, __VA_ARGS__)

#define NEED_BIN() \
  do {             \
    if (!th_sheaf_bin()) return; \
  } while (0)

/* The number after `key` in the line of g_out that starts with `line`. */
static double field(const char *line, const char *key) {
  const char *l = strstr(g_out, line);
  if (!l) return -1;
  const char *e = strchr(l, '\n');
  const char *k = strstr(l, key);
  if (!k || (e && k > e)) return -1;
  return strtod(k + strlen(key), NULL);
}

static bool same_file(const char *a, const char *b) {
  char cmd[2048], out[256];
  snprintf(cmd, sizeof cmd, "cmp %s %s && echo same", a, b);
  return th_run(cmd, out, sizeof out) == 0 && !strcmp(out, "same\n");
}

TEST(train_cli_loss_falls_and_the_checkpoint_scores_the_same) {
  NEED_BIN();
  const char *w = th_tmp_path("small-a.safetensors");
  CHECK_EQ_INT(sheaf(SMALL_ARGS " --dev " SMALL " --epochs 3 --batch 1 --lr 0.02 --out %s", w), 0);
  double l1 = field("epoch 1:", "loss "), l2 = field("epoch 2:", "loss "),
         l3 = field("epoch 3:", "loss ");
  CHECK(l1 > 0 && l2 > 0 && l3 > 0);
  CHECK(l2 < l1);
  CHECK(l3 < l2);
  double dev = field("epoch 3:", "dev accuracy ");
  CHECK(dev >= 0);
  CHECK_CONTAINS(g_out, "weights: ");
  /* the vocabulary beside the weights: the 15 word types of small.conllu */
  char vocab[1024];
  snprintf(vocab, sizeof vocab, "%s", w);
  strcpy(strstr(vocab, ".safetensors"), ".vocab");
  CHECK_EQ_INT(sheaf("data stats %s", w), 0);
  CHECK_CONTAINS(g_out, "sheaf.train.epochs");
  CHECK_EQ_INT(sheaf("run bilstm --weights %s --vocab %s --data " SMALL
                     " --hidden 8 --embed 8 --threads 1",
                     w, vocab),
               0);
  CHECK_CONTAINS(g_out, " of 16 tagged words");
  CHECK_NEAR(field("  accuracy:", "accuracy: "), dev, 1e-9);
  /* the weights alone: sizes from their tensors, the vocabulary from their
   * metadata (sheaf.words) */
  CHECK_EQ_INT(sheaf("run bilstm --weights %s --data " SMALL " --threads 1", w), 0);
  CHECK_CONTAINS(g_out, "hidden 8, embed 8, vocab 16,");
  CHECK_NEAR(field("  accuracy:", "accuracy: "), dev, 1e-9);
}

TEST(train_cli_same_seed_same_bytes_and_resume_continues) {
  NEED_BIN();
  const char *a = th_tmp_path("det-a.safetensors"), *b = th_tmp_path("det-b.safetensors");
  const char *c = th_tmp_path("det-c.safetensors"), *d = th_tmp_path("det-d.safetensors");
  CHECK_EQ_INT(sheaf(SMALL_ARGS " --epochs 2 --batch 2 --seed 7 --optimizer sgd --out %s", a), 0);
  CHECK_EQ_INT(sheaf(SMALL_ARGS " --epochs 2 --batch 2 --seed 7 --optimizer sgd --out %s", b), 0);
  CHECK(same_file(a, b));
  CHECK_EQ_INT(sheaf(SMALL_ARGS " --epochs 2 --batch 2 --seed 8 --optimizer sgd --out %s", c), 0);
  CHECK(!same_file(a, c));
  /* 1 epoch, then 1 more resumed: plain SGD keeps no state, the shuffle
   * goes on from the checkpoint's epoch: the bytes of 2 epochs in one run */
  CHECK_EQ_INT(sheaf(SMALL_ARGS " --epochs 1 --batch 2 --seed 7 --optimizer sgd --out %s", c), 0);
  CHECK(!same_file(a, c));
  CHECK_EQ_INT(sheaf(SMALL_ARGS " --epochs 1 --batch 2 --seed 7 --optimizer sgd --resume %s --out %s",
                     c, d),
               0);
  CHECK_CONTAINS(g_out, "resumed from ");
  CHECK_CONTAINS(g_out, "epoch 2: loss ");
  CHECK(same_file(a, d));
  /* two threads: the same bytes again run to run */
  CHECK_EQ_INT(sheaf(SMALL_ARGS " --epochs 2 --seed 3 --threads 2 --out %s", a), 0);
  CHECK_EQ_INT(sheaf(SMALL_ARGS " --epochs 2 --seed 3 --threads 2 --out %s", b), 0);
  CHECK(same_file(a, b));
}

TEST(train_cli_keep_best_saves_only_improvements) {
  NEED_BIN();
  const char *w = th_tmp_path("best.safetensors");
  CHECK_EQ_INT(sheaf(SMALL_ARGS " --dev " SMALL " --epochs 8 --batch 1 --lr 0.05 --keep-best --out %s", w), 0);
  /* the checkpoint is the epoch of the best dev accuracy: the number of
   * whole epochs in its metadata is that epoch, and it scores that accuracy */
  double best = -1;
  int best_ep = 0;
  for (int ep = 1; ep <= 8; ep++) {
    char key[32];
    snprintf(key, sizeof key, "epoch %d:", ep);
    double a = field(key, "dev accuracy ");
    CHECK(a >= 0);
    if (a > best) best = a, best_ep = ep;
  }
  CHECK_EQ_INT(sheaf("run bilstm --weights %s --data " SMALL " --threads 1", w), 0);
  CHECK_NEAR(field("  accuracy:", "accuracy: "), best, 1e-9);
  char want[64];
  snprintf(want, sizeof want, "sheaf.train.epochs: %d\n", best_ep);
  CHECK_EQ_INT(sheaf("data stats %s", w), 0);
  CHECK_CONTAINS(g_out, want);
  CHECK_EQ_INT(sheaf(SMALL_ARGS " --keep-best --out %s", w), 2);
  CHECK_CONTAINS(g_out, "--keep-best: needs --dev");
}

TEST(train_cli_time_limit_stops_early) {
  NEED_BIN();
  const char *w = th_tmp_path("tl.safetensors");
  CHECK_EQ_INT(sheaf(SMALL_ARGS " --epochs 1000 --batch 1 --time-limit 0.000000001 --out %s", w), 0);
  CHECK_CONTAINS(g_out, "epoch 1: loss ");
  CHECK_CONTAINS(g_out, "(time limit: epoch cut short)");
  CHECK(!strstr(g_out, "epoch 2:"));
  CHECK_CONTAINS(g_out, ", 1 updates in ");
  CHECK_EQ_INT(sheaf("data stats %s", w), 0); /* a whole file */
}

TEST(train_cli_bad_flags_and_files) {
  NEED_BIN();
  const char *w = th_tmp_path("bad.safetensors");
  CHECK_EQ_INT(sheaf(SMALL_ARGS " --epochs 0 --out %s", w), 2);
  CHECK_CONTAINS(g_out, "--epochs: expected an integer in 1..");
  CHECK_EQ_INT(sheaf(SMALL_ARGS " --optimizer rmsprop --out %s", w), 2);
  CHECK_CONTAINS(g_out, "--optimizer: unknown optimizer 'rmsprop'");
  CHECK_EQ_INT(sheaf(SMALL_ARGS " --lr -1 --out %s", w), 2);
  CHECK_CONTAINS(g_out, "--lr: expected a number");
  CHECK_EQ_INT(sheaf(SMALL_ARGS " --out %s --frobnicate", w), 2);
  CHECK_CONTAINS(g_out, "unknown option '--frobnicate'");
  CHECK_EQ_INT(sheaf(SMALL_ARGS), 2);
  CHECK_CONTAINS(g_out, "missing --out");
  CHECK_EQ_INT(sheaf("train mvrnn --data " SMALL " --out %s", w), 2);
  CHECK_CONTAINS(g_out, "unknown model 'mvrnn'");
  CHECK_EQ_INT(sheaf(SMALL_ARGS " --out " SMALL), 2); /* an output that is an input */
  CHECK_CONTAINS(g_out, SMALL);
  /* a missing file, a malformed line, a file without tags */
  CHECK_EQ_INT(sheaf("train bilstm --data tests/data/no-such.conllu --out %s", w), 1);
  CHECK_CONTAINS(g_out, "tests/data/no-such.conllu");
  static const char bad[] = "1\tThe\t_\tDET\t_\t_\t2\tdet\t_\t_\n2\tcat\t_\tNOUN\t_\n\n";
  const char *bp = th_write_tmp("bad-line.conllu", bad, sizeof bad - 1);
  CHECK_EQ_INT(sheaf("train bilstm --data %s --out %s", bp, w), 1);
  CHECK_CONTAINS(g_out, "bad-line.conllu:2:");
  static const char untagged[] = "1\tThe\t_\t_\t_\t_\t0\troot\t_\t_\n\n";
  const char *up = th_write_tmp("untagged.conllu", untagged, sizeof untagged - 1);
  CHECK_EQ_INT(sheaf("train bilstm --data " SMALL " --dev %s --out %s", up, w), 1);
  CHECK_CONTAINS(g_out, "--dev ");
  CHECK_CONTAINS(g_out, "no word has a UPOS tag");
  /* an output that cannot be created: before any training */
  CHECK_EQ_INT(sheaf(SMALL_ARGS " --out %s/no-such-dir/w.safetensors", th_tmp_path("x")), 1);
  CHECK_CONTAINS(g_out, "no-such-dir/w.safetensors: cannot create");
  CHECK(!strstr(g_out, "epoch 1"));
  /* nothing was written by the failed runs */
  CHECK_EQ_INT(sheaf("data stats %s", w), 1);
  /* --resume: not a weights file; weights of other sizes */
  CHECK_EQ_INT(sheaf(SMALL_ARGS " --resume " SMALL " --out %s", w), 1);
  CHECK_CONTAINS(g_out, "--resume: " SMALL);
  CHECK_EQ_INT(sheaf(SMALL_ARGS " --epochs 1 --out %s", w), 0);
  const char *w2 = th_tmp_path("bad2.safetensors");
  CHECK_EQ_INT(sheaf("train bilstm --data " SMALL " --hidden 16 --resume %s --out %s", w, w2), 2);
  CHECK_CONTAINS(g_out, "--resume ");
  CHECK_CONTAINS(g_out, "--hidden 8 --embed 8");
  /* another vocabulary (min-count 2 keeps fewer words): the word table's rows differ */
  CHECK_EQ_INT(sheaf("train bilstm --data " SMALL " --min-count 2 --resume %s --out %s", w, w2), 1);
  CHECK_CONTAINS(g_out, "--resume ");
}
