/*
 * test_train_tree.c — the TreeLSTM's training task: the class of each tree
 * (src/io/tree_labels.h) from PTB root labels and from the CoNLL-U root
 * word's UPOS (against a reference read here with a parser of its own),
 * bad labels and mismatched files as positioned errors, a fuzz-style run
 * of mutated SST text through the PTB reader and the labels; and `sheaf
 * train treelstm` through the executable: the loss falls, the dev accuracy
 * beats the majority class, the checkpoint scores the same in `sheaf run
 * treelstm --weights`, resume continues the run.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "io/tree_labels.h"

#define TINY "tests/data/sst_tiny.ptb"
#define EWT_DEV "data/ud_english_ewt/en_ewt-ud-dev.min.conllu"
#define EWT_TEST "data/ud_english_ewt/en_ewt-ud-test.conllu"

TEST(tree_labels_from_ptb_roots) {
  sheaf_ctx *ctx = th_ctx();
  sh_dataset d;
  REQUIRE(CHECK_OK(ctx, sh_dataset_load(ctx, TINY, SH_DATASET_BINARY, &d)));
  static const int32_t want[16] = {4, 0, 3, 1, 4, 0, 3, 1, 2, 4, 0, 2, 3, 1, 4, 0};
  int32_t got[16];
  REQUIRE(CHECK_EQ_INT(sh_dataset_count(&d), 16));
  if (CHECK_OK(ctx, sh_tree_labels_load(ctx, TINY, &d, got)))
    for (int i = 0; i < 16; i++) CHECK_EQ_INT(got[i], want[i]);
  CHECK_EQ_INT(sh_tree_task_of(TINY), SH_TREE_TASK_PTB_ROOT);
  CHECK_EQ_STR(sh_tree_class_name(SH_TREE_TASK_PTB_ROOT, 3), "3");
  sh_dataset_free(&d);
}

/* The reference: the UPOS class of each sentence's HEAD-0 word, read line
 * by line with sscanf (ID FORM LEMMA UPOS XPOS FEATS HEAD ...). */
static int32_t ref_root_classes(const char *path, int32_t *out, int32_t cap) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[8192];
  int32_t n = 0;
  bool in_sent = false;
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#') continue;
    if (line[0] == '\n' || line[0] == '\r') {
      if (in_sent) n++;
      in_sent = false;
      continue;
    }
    char id[64], form[1024], lemma[1024], upos[64], xpos[256], feats[4096], head[64];
    if (sscanf(line, "%63[^\t]\t%1023[^\t]\t%1023[^\t]\t%63[^\t]\t%255[^\t]\t%4095[^\t]\t%63[^\t]",
               id, form, lemma, upos, xpos, feats, head) != 7)
      continue;
    if (strchr(id, '-') || strchr(id, '.')) continue;
    in_sent = true;
    if (strcmp(head, "0") || n >= cap) continue;
    out[n] = !strcmp(upos, "VERB") ? 0 : !strcmp(upos, "NOUN") ? 1 : !strcmp(upos, "PROPN") ? 2
           : !strcmp(upos, "ADJ") ? 3 : 4;
  }
  if (in_sent) n++;
  fclose(f);
  return n;
}

TEST(tree_labels_from_conllu_root_upos_match_a_reference) {
  sheaf_ctx *ctx = th_ctx();
  sh_dataset d;
  REQUIRE(CHECK_OK(ctx, sh_dataset_load(ctx, EWT_DEV, SH_DATASET_BINARY, &d)));
  int32_t n = sh_dataset_count(&d);
  int32_t *got = malloc((size_t)n * sizeof *got), *want = malloc((size_t)n * sizeof *want);
  REQUIRE(got && want);
  CHECK_EQ_INT(ref_root_classes(EWT_DEV, want, n), n);
  int64_t count[5] = {0};
  if (CHECK_OK(ctx, sh_tree_labels_load(ctx, EWT_DEV, &d, got)))
    for (int32_t i = 0; i < n; i++) {
      if (got[i] != want[i]) {
        CHECK_EQ_INT(got[i], want[i]);
        break;
      }
      count[got[i]]++;
    }
  /* the task is not trivial: the majority class (VERB) is half the trees */
  CHECK_EQ_INT(count[0], 1000);
  CHECK_EQ_INT(n, 2001);
  CHECK_EQ_STR(sh_tree_class_name(SH_TREE_TASK_ROOT_UPOS, 4), "other");
  free(got);
  free(want);
  sh_dataset_free(&d);
}

TEST(tree_labels_errors_are_positioned) {
  sheaf_ctx *ctx = th_ctx();
  const char *text = "(3 (2 a) (2 b))\n\n  (  pos (2 c) (2 d))\n";
  sh_dataset d;
  REQUIRE(CHECK_OK(ctx, sh_dataset_load_mem(ctx, text, strlen(text), "bad.ptb", SH_DATASET_BINARY,
                                            NULL, &d)));
  int32_t labels[2];
  CHECK_STATUS(ctx, sh_tree_labels_mem(ctx, text, strlen(text), "bad.ptb", &d, labels),
               SHEAF_ERR_PARSE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "bad.ptb:3:6: error: tree 2: the root's label 'pos'");
  /* 5 is beyond the classes */
  const char *five = "(3 (2 a) (2 b))\n(5 (2 c) (2 d))\n";
  CHECK_STATUS(ctx, sh_tree_labels_mem(ctx, five, strlen(five), "five.ptb", &d, labels),
               SHEAF_ERR_PARSE);
  /* the trees are d's, so the labels read from them: "5" is checked too
   * when d itself has it */
  sh_dataset d5;
  REQUIRE(CHECK_OK(ctx, sh_dataset_load_mem(ctx, five, strlen(five), "five.ptb", SH_DATASET_BINARY,
                                            NULL, &d5)));
  CHECK_STATUS(ctx, sh_tree_labels_mem(ctx, five, strlen(five), "five.ptb", &d5, labels),
               SHEAF_ERR_PARSE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "five.ptb:2:2: error: tree 2: the root's label '5'");
  /* a file with other trees than the data set's */
  const char *two = "(1 (2 a) (2 b))\n(0 (2 c) (2 d))\n";
  sh_dataset d2;
  REQUIRE(CHECK_OK(ctx, sh_dataset_load_mem(ctx, two, strlen(two), "two.ptb", SH_DATASET_BINARY,
                                            NULL, &d2)));
  CHECK_OK(ctx, sh_tree_labels_mem(ctx, two, strlen(two), "two.ptb", &d2, labels));
  CHECK_EQ_INT(labels[0], 1);
  CHECK_EQ_INT(labels[1], 0);
  const char *three = "(1 (2 a) (2 b))\n(1 x)\n(0 y)\n";
  CHECK_STATUS(ctx, sh_tree_labels_mem(ctx, three, strlen(three), "three.ptb", &d2, labels),
               SHEAF_ERR_PARSE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "three.ptb: 3 trees, but the data set has 2");
  CHECK_STATUS(ctx, sh_tree_labels_load(ctx, EWT_DEV, &d2, labels), SHEAF_ERR_PARSE);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "2001 trees, but the data set has 2");
  sh_dataset_free(&d2);
  sh_dataset_free(&d5);
  sh_dataset_free(&d);
}

/* "NAME:LINE:COL: error: " at the start of msg, with LINE, COL >= 1. */
static bool positioned(const char *msg, const char *name) {
  size_t n = strlen(name);
  if (strncmp(msg, name, n) || msg[n] != ':') return false;
  char *e;
  long line = strtol(msg + n + 1, &e, 10);
  if (line < 1 || *e != ':') return false;
  long col = strtol(e + 1, &e, 10);
  return col >= 1 && !strncmp(e, ": error: ", 9);
}

/* A uniform pick in [0, n) (th_frand is uniform in [-1, 1)). */
static unsigned below(uint64_t *rng, unsigned n) {
  return (unsigned)((th_frand(rng) + 1.0f) * 0.5f * (float)n) % n;
}

/* Fuzz-style: 3000 mutations of the SST sample (bytes replaced by one of
 * "() 0129x\n", deleted or duplicated, 1-4 per input, seeded). Each input
 * either fails to read with a positioned error, or reads into binary trees
 * whose labels are classes 0..4 or fail with a positioned error naming a
 * tree's root label. */
TEST(tree_labels_survive_mutated_input) {
  sheaf_ctx *ctx = th_ctx();
  FILE *f = fopen(TINY, "rb");
  REQUIRE(f);
  char base[4096];
  size_t nb = fread(base, 1, sizeof base, f);
  fclose(f);
  static const char alphabet[] = "() 0129x\n";
  uint64_t rng = 12345;
  int read_ok = 0, labels_ok = 0, labels_bad = 0;
  char buf[8192];
  for (int it = 0; it < 3000; it++) {
    size_t n = nb;
    memcpy(buf, base, nb);
    int muts = 1 + (int)(th_frand(&rng) * 4);
    for (int k = 0; k < muts && n > 1; k++) {
      size_t at = below(&rng, (unsigned)(n - 1));
      int op = (int)below(&rng, 3);
      if (op == 0) buf[at] = alphabet[below(&rng, 9)];
      else if (op == 1) memmove(buf + at, buf + at + 1, n - at - 1), n--;
      else if (n + 1 < sizeof buf) memmove(buf + at + 1, buf + at, n - at), n++;
    }
    sh_dataset d;
    if (sh_dataset_load_mem(ctx, buf, n, "fuzz.ptb", SH_DATASET_BINARY, NULL, &d) != SHEAF_OK) {
      const char *msg = sheaf_ctx_last_error(ctx);
      if (!CHECK(positioned(msg, "fuzz.ptb") || strstr(msg, "fuzz.ptb: "))) break;
      continue;
    }
    read_ok++;
    int32_t labels[64];
    int32_t nt = sh_dataset_count(&d);
    if (nt <= 64) {
      sheaf_status st = sh_tree_labels_mem(ctx, buf, n, "fuzz.ptb", &d, labels);
      if (st == SHEAF_OK) {
        labels_ok++;
        for (int32_t t = 0; t < nt; t++) CHECK(labels[t] >= 0 && labels[t] < SH_TREE_CLASSES);
      } else {
        labels_bad++;
        CHECK(positioned(sheaf_ctx_last_error(ctx), "fuzz.ptb"));
        CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "the root's label");
      }
    }
    sh_dataset_free(&d);
  }
  CHECK(read_ok > 100);
  CHECK(labels_ok > 50);
  CHECK(labels_bad >= 5);
}

/* ------------------------------------------------ sheaf train treelstm */

static char g_out[1 << 16];

#define sheaf(...) th_sheaf(g_out, sizeof g_out, __VA_ARGS__)

static double field(const char *line, const char *key) {
  const char *l = strstr(g_out, line);
  if (!l) return -1;
  const char *e = strchr(l + 1, '\n'); /* line may start with its newline */
  const char *k = strstr(l, key);
  if (!k || (e && k > e)) return -1;
  return strtod(k + strlen(key), NULL);
}

static bool same_file(const char *a, const char *b) {
  char cmd[2048], out[256];
  snprintf(cmd, sizeof cmd, "cmp %s %s && echo same", a, b);
  return th_run(cmd, out, sizeof out) == 0 && !strcmp(out, "same\n");
}

/* The acceptance of issue 16 for the TreeLSTM on a small budget: trained on
 * EWT's dev split (2001 trees) for 3 epochs, scored on the test split. */
TEST(train_treelstm_learns_the_root_upos_class) {
  if (!th_sheaf_bin()) return;
  const char *w = th_tmp_path("tl-ewt.safetensors");
  REQUIRE(CHECK_EQ_INT(sheaf("train treelstm --data " EWT_DEV " --dev " EWT_TEST
                             " --hidden 16 --embed 16 --min-count 1 --threads 1 --epochs 3 --out %s",
                             w),
                       0));
  double l1 = field("\nepoch 1:", "loss "), l2 = field("\nepoch 2:", "loss "),
         l3 = field("\nepoch 3:", "loss ");
  CHECK(l1 > 0 && l2 > 0 && l3 > 0);
  CHECK(l2 < l1);
  CHECK(l3 < l2);
  double major = field("  dev classes", "majority class VERB: "), dev = field("\nepoch 3:", "dev accuracy ");
  CHECK_NEAR(major, 48.48, 0.01);
  CHECK(dev > major + 5);
  /* the checkpoint: sizes from its tensors, words from its metadata */
  CHECK_EQ_INT(sheaf("run treelstm --weights %s --data " EWT_TEST " --threads 1", w), 0);
  CHECK_CONTAINS(g_out, "hidden 16, embed 16,");
  CHECK_NEAR(field("  accuracy:", "accuracy: "), dev, 1e-9);
  CHECK_CONTAINS(g_out, "of 2077 trees");
}

TEST(train_treelstm_on_sst_trees_and_resume) {
  if (!th_sheaf_bin()) return;
  const char *a = th_tmp_path("tl-a.safetensors"), *b = th_tmp_path("tl-b.safetensors"),
             *c = th_tmp_path("tl-c.safetensors");
#define TINY_ARGS "train treelstm --data " TINY " --hidden 8 --embed 8 --min-count 1 --threads 1 --batch 4"
  CHECK_EQ_INT(sheaf(TINY_ARGS " --dev " TINY " --epochs 8 --lr 0.02 --out %s", a), 0);
  double first = field("\nepoch 1:", "loss "), last = field("\nepoch 8:", "loss ");
  CHECK(first > 0 && last > 0 && last < 0.8 * first);
  double dev = field("\nepoch 8:", "dev accuracy ");
  CHECK(dev > 50);
  CHECK_EQ_INT(sheaf("run treelstm --weights %s --data " TINY " --threads 1", a), 0);
  CHECK_NEAR(field("  accuracy:", "accuracy: "), dev, 1e-9);
  CHECK_CONTAINS(g_out, "majority class 0: 25.00%");
  /* plain SGD: 1 epoch + 1 resumed = 2 epochs in one run, byte for byte */
  CHECK_EQ_INT(sheaf(TINY_ARGS " --optimizer sgd --epochs 2 --out %s", a), 0);
  CHECK_EQ_INT(sheaf(TINY_ARGS " --optimizer sgd --epochs 1 --out %s", b), 0);
  CHECK_EQ_INT(sheaf(TINY_ARGS " --optimizer sgd --epochs 1 --resume %s --out %s", b, c), 0);
  CHECK_CONTAINS(g_out, "epoch 2: loss ");
  CHECK(same_file(a, c));
#undef TINY_ARGS
}

TEST(train_treelstm_bad_labels_and_data) {
  if (!th_sheaf_bin()) return;
  const char *w = th_tmp_path("tl-bad.safetensors");
  const char *bad = th_write_tmp("tl-bad.ptb", "(1 (2 a) (2 b))\n(neg (2 c) (2 d))\n", 34);
  CHECK_EQ_INT(sheaf("train treelstm --data %s --out %s", bad, w), 1);
  CHECK_CONTAINS(g_out, ":2:2: error: tree 2: the root's label 'neg' is not a class");
  const char *tern = th_write_tmp("tl-tern.ptb", "(1 (2 a) (2 b) (2 c))\n", 22);
  CHECK_EQ_INT(sheaf("train treelstm --data %s --out %s", tern, w), 1);
  CHECK_CONTAINS(g_out, "is not binary");
  CHECK_EQ_INT(sheaf("train treelstm --data " TINY " --dev " EWT_TEST " --out %s", w), 2);
  CHECK_CONTAINS(g_out, "its classes are not those of --data");
  CHECK_EQ_INT(sheaf("train treelstm --data " TINY " --resume " EWT_TEST " --out %s", w), 1);
}
