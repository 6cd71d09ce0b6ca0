/*
 * test_deep_inputs.c — generated extreme inputs through every command and
 * every model: a chain as deep as the data limit (10,000 levels) must run
 * through every model that takes its kind of input; a chain deeper than the
 * limit and a node with a very wide fan-out, in CoNLL-U and PTB, must give
 * a clear error or a result through `sheaf data stats`, `data binarize`
 * (plain and --child-sum), and `sheaf run` with each built-in model and
 * each examples/ model (.sf) — never a signal.
 *
 * Sizes: SHEAF_DEEP_N (default 12,000) is the over-limit depth and the
 * width; every run has a memory budget of 256 MB (SHEAF_MEMORY_LIMIT). `SHEAF_DEEP_N=1000000 make test TEST_ARGS=deep_inputs` is the
 * full acceptance run of docs/DATA.md ("Limits"): a 1,000,000-word
 * sentence through a BiLSTM takes ~20 s, so it is not the default.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static char out[1 << 16];

/* One generated input file: NAME in the test's temporary directory. */
typedef enum shape { CHAIN, WIDE } shape;

static const char *gen_conllu(const char *name, shape s, int n) {
  const char *p = th_tmp_path(name);
  FILE *f = p ? fopen(p, "w") : NULL;
  if (!f) return NULL;
  for (int i = 1; i <= n; i++) {
    int head = i == 1 ? 0 : s == CHAIN ? i - 1 : 1;
    fprintf(f, "%d\tw%d\tw\tNOUN\tNN\t_\t%d\t%s\t_\t_\n", i, i % 50, head, head ? "dep" : "root");
  }
  fputc('\n', f);
  return fclose(f) == 0 ? p : NULL;
}

/* PTB: CHAIN is a binary tree n levels deep (a leaf and the rest at each
 * level); WIDE a root with n leaves. */
static const char *gen_ptb(const char *name, shape s, int n) {
  const char *p = th_tmp_path(name);
  FILE *f = p ? fopen(p, "w") : NULL;
  if (!f) return NULL;
  if (s == CHAIN) {
    for (int i = 0; i < n - 1; i++) fprintf(f, "(1 (2 w%d) ", i % 50);
    fputs("(2 end)", f);
    for (int i = 0; i < n - 1; i++) fputc(')', f);
  } else {
    fputs("(1", f);
    for (int i = 0; i < n; i++) fprintf(f, " (2 w%d)", i % 50);
    fputc(')', f);
  }
  fputc('\n', f);
  return fclose(f) == 0 ? p : NULL;
}

typedef enum takes { TREE, DEP, SENT, TOKS } takes;

static const struct model {
  const char *name; /* built-in, or examples/NAME.sf */
  const char *args;
  takes in;
  bool quadratic; /* attention of every word over every word: a 10,000-word
                     sentence is over the tests' memory budget */
} k_models[] = {
    {"treelstm", "--hidden 4 --embed 4", TREE, false},
    {"childsum", "--hidden 4 --embed 4", DEP, false},
    {"mvrnn", "--hidden 4", TREE, false},
    {"bilstm", "--hidden 4 --embed 4", SENT, false},
    {"examples/treelstm.sf", "--size E=4 --size H=4 --size C=3", TREE, false},
    {"examples/childsum.sf", "--size E=4 --size H=4", DEP, false},
    {"examples/treefc.sf", "--size H=4", TREE, false},
    {"examples/mvrnn.sf", "--size H=4", TREE, false},
    {"examples/treegru.sf", "--size E=4 --size H=4 --size C=3", TREE, false},
    {"examples/branches.sf", "--size E=4 --size H=4 --size C=3", TREE, false},
    {"examples/treeattn.sf", "--size E=4 --size H=4 --size C=3", DEP, false},
    {"examples/bilstm.sf", "--size E=4 --size H=4 --size T=3", SENT, false},
    {"examples/gru.sf", "--size E=4 --size H=4 --size C=3", SENT, false},
    {"examples/tagger2.sf", "--size E=4 --size H=4 --size T=3", SENT, false},
    {"examples/attnpool.sf", "--size E=4 --size H=4 --size C=3", SENT, false},
    {"examples/cnn.sf", "--size E=4 --size F=4 --size C=3", SENT, false},
    {"examples/seq2seq.sf", "--size E=4 --size H=4 --size C=5", SENT, true},
    {"examples/transformer.sf", "--size DK=2 --size F=8", SENT, true},
    {"examples/handnorm.sf", "--size H=4", SENT, false},
    {"examples/chartagger.sf", "--size E=4 --size H=4 --size T=3", TOKS, false},
};

/* The memory budget of every run here: quadratic models on long sentences
 * fail fast with a message instead of filling the machine. */
#define BUDGET "SHEAF_MEMORY_LIMIT=256M"

/* `sheaf ARGS`: 0 or 1, never a signal or a usage error; a failure says
 * "error". Returns the exit status. */
static int sheaf_ok_or_error(const char *args) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, BUDGET " %s %s", th_sheaf_bin(), args);
  int rc = th_run(cmd, out, sizeof out);
  if (rc != 0 && rc != 1) th_fail(__FILE__, __LINE__, "exit %d from: sheaf %s\n%s", rc, args, out);
  if (rc == 1 && !strstr(out, "error"))
    th_fail(__FILE__, __LINE__, "exit 1 without an error message from: sheaf %s\n%s", args, out);
  return rc;
}

static void every_command(const char *data, bool conllu) {
  char args[2048];
  const char *o = th_tmp_path("deep_out.txt");
  snprintf(args, sizeof args, "data stats %s", data);
  sheaf_ok_or_error(args);
  if (conllu) {
    snprintf(args, sizeof args, "data binarize %s -o %s", data, o);
    sheaf_ok_or_error(args);
    snprintf(args, sizeof args, "data binarize --child-sum %s -o %s", data, o);
    sheaf_ok_or_error(args);
  }
  for (size_t k = 0; k < sizeof k_models / sizeof *k_models; k++) {
    snprintf(args, sizeof args, "run %s --data %s %s --threads 2 --out %s", k_models[k].name, data,
             k_models[k].args, o);
    sheaf_ok_or_error(args);
  }
}

static int deep_n(void) {
  const char *e = getenv("SHEAF_DEEP_N");
  int n = e && *e ? atoi(e) : 12000;
  return n >= 10001 ? n : 12000;
}

TEST(deep_inputs_over_the_limit_every_command_and_model) {
  REQUIRE(th_sheaf_bin());
  int n = deep_n();
  const char *chain = gen_conllu("deep_chain.conllu", CHAIN, n);
  const char *wide = gen_conllu("deep_wide.conllu", WIDE, n);
  const char *pchain = gen_ptb("deep_chain.ptb", CHAIN, n);
  const char *pwide = gen_ptb("deep_wide.ptb", WIDE, n);
  REQUIRE(chain && wide && pchain && pwide);
  every_command(chain, true);
  every_command(wide, true);
  every_command(pchain, false);
  every_command(pwide, false);
  /* deeper than the limit is refused when read, naming the depth */
  char args[1024];
  snprintf(args, sizeof args, "data stats %s", pchain);
  CHECK_EQ_INT(sheaf_ok_or_error(args), 1);
  CHECK_CONTAINS(out, "10000");
  snprintf(args, sizeof args, "run childsum --data %s --hidden 4 --embed 4", chain);
  CHECK_EQ_INT(sheaf_ok_or_error(args), 1);
  CHECK_CONTAINS(out, "10000");
}

/* At the limit every model runs: the binary-tree models on a 10,000-deep
 * PTB chain, the dependency-tree models on a 10,000-deep CoNLL-U chain,
 * the sequence models on its 10,000 words (the quadratic ones stop at the
 * memory budget, saying so). */
TEST(deep_inputs_at_the_limit_every_model_runs) {
  REQUIRE(th_sheaf_bin());
  const char *chain = gen_conllu("limit_chain.conllu", CHAIN, 10000);
  const char *pchain = gen_ptb("limit_chain.ptb", CHAIN, 10000);
  REQUIRE(chain && pchain);
  const char *o = th_tmp_path("limit_out.txt");
  for (size_t k = 0; k < sizeof k_models / sizeof *k_models; k++) {
    const struct model *m = &k_models[k];
    char args[2048];
    snprintf(args, sizeof args, "run %s --data %s %s --threads 2 --out %s", m->name,
             m->in == TREE ? pchain : chain, m->args, o);
    int rc = sheaf_ok_or_error(args);
    if (m->quadratic && rc == 1) CHECK_CONTAINS(out, "more than the memory budget of 256.0 MB");
    else if (rc != 0) th_fail(__FILE__, __LINE__, "sheaf %s\n%s", args, out);
  }
}
