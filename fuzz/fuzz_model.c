/*
 * fuzz_model.c — libFuzzer target: a small model run end to end on fuzzed
 * data. The first byte picks the input (CoNLL-U, PTB or token-line text as
 * given, or a tree generated from a compact spec to reach depths and widths
 * around the limit that short text cannot), the model (binary TreeLSTM,
 * MV-RNN, child-sum TreeLSTM, BiLSTM; hidden 4) and the batching policy. The
 * data is read as `sheaf run` reads it (sh_dataset_load_mem: the readers, the
 * depth limit, binarization, the token-id limit); then either the load fails
 * with a clear message naming the input, or every tree is within
 * SH_TB_MAX_DEPTH and the model runs to finite outputs (or a clear error).
 * Any mismatch traps; ASan/UBSan catch everything else.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "io/treebank.h"
#include "models/models.h"
#include "sheaf.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_INSTANCES 4      /* per input: keeps an execution short */
#define MAX_NODES 1000       /* larger instances are read and checked but not run: a
                                10,000-deep tree takes ~0.5 s (its levels run one after
                                another); tests/test_lang_deep.c and
                                tests/test_data_reliability.c run trees at the limit */
#define ID_LIMIT 5000        /* --max-vocab for the fuzzed token ids */

/* A bytes-driven stream of choices (zeros once the bytes run out). */
typedef struct spec {
  const uint8_t *p;
  size_t n, at;
} spec;

static unsigned next(spec *s) { return s->at < s->n ? s->p[s->at++] : 0; }

/* One CoNLL-U sentence (or PTB tree) generated from the spec: n words whose
 * heads follow a shape: 0 chain (depth n), 1 star (one head with n - 1
 * dependents: binarized depth n), 2 heads drawn from the spec (any tree:
 * word i's head comes before it), 3 a comb (chain with a leaf on each
 * level). Sizes are small, or (6 values in 256) around the limit, 10,000. */
static void gen_tree(spec *s, sh_buf *b, bool ptb) {
  unsigned shape = next(s) % 4, sz = next(s);
  int n = (int)(sz < 250 ? sz % 64 + 1 : 9990 + (int)(next(s) % 24)); /* around the limit */
  if (ptb) {
    if (shape == 1) { /* wide: (R (X w) ...) */
      sh_buf_puts(b, "(R");
      for (int i = 0; i < n; i++) sh_buf_printf(b, " (X w%d)", i % 7);
      sh_buf_puts(b, ")\n");
    } else { /* deep: binary comb, depth n */
      for (int i = 1; i < n; i++) sh_buf_printf(b, "(N (L w%d) ", i % 5);
      sh_buf_puts(b, "(L end)");
      for (int i = 1; i < n; i++) sh_buf_putc(b, ')');
      sh_buf_putc(b, '\n');
    }
    return;
  }
  for (int i = 1; i <= n; i++) {
    int head;
    if (i == 1) head = 0;
    else if (shape == 0) head = i - 1;
    else if (shape == 1) head = 1;
    else if (shape == 2) head = 1 + (int)(next(s) * 7u % (unsigned)(i - 1));
    else head = i % 2 ? i - 2 > 0 ? i - 2 : 1 : i - 1;
    sh_buf_printf(b, "%d\tw%d\t_\t%s\t_\t_\t%d\t%s\t_\t_\n", i, i % 11, i % 3 ? "NOUN" : "VERB",
                  head, head == 0 ? "root" : i % 2 ? "nsubj" : "obj");
  }
  sh_buf_putc(b, '\n');
}

/* Generated token ids: lines of ids from the spec, some near the limits. */
static void gen_ids(spec *s, sh_buf *b) {
  int lines = (int)(next(s) % 6) + 1;
  for (int l = 0; l < lines; l++) {
    int len = (int)(next(s) % 12) + 1;
    for (int i = 0; i < len; i++) {
      unsigned c = next(s);
      long long id = c < 200 ? c : c < 250 ? ID_LIMIT - 3 + (c - 200) % 6
                                : c == 250 ? 2147483647LL : c == 251 ? 2147483648LL
                                : 2000000000LL + c;
      sh_buf_printf(b, "%s%lld", i ? " " : "", id);
    }
    sh_buf_putc(b, '\n');
  }
}

static bool finite_outputs(const sh_net_outputs *o) {
  for (int64_t i = 0; i < o->rows * o->dim; i++)
    if (!isfinite(o->values[i])) return false;
  return true;
}

/* The MV-RNN composes word matrices linearly (A' = W_M [A; B]): each level
 * can double them, so on trees deeper than this its outputs may overflow to
 * inf/nan, a property of the model, not of the data path. */
#define MVRNN_FINITE_DEPTH 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  sheaf_ctx *ctx = fuzz_ctx();
  unsigned sel = data[0];
  unsigned input = sel & 7, pol = sel >> 6;
  /* input: 0-2 text (CoNLL-U, PTB, tokens), 3-4 generated CoNLL-U (one or
   * several trees), 5 generated PTB, 6 generated ids, 7 CoNLL-U text again */
  static const sh_net_kind tree_models[3] = {SH_NET_TREELSTM, SH_NET_MVRNN,
                                               SH_NET_CHILDSUM};
  sh_net_kind model = tree_models[(sel >> 3) % 3];
  const char *name = "fuzz.conllu";
  if (input == 1 || input == 5) name = "fuzz.ptb";
  if (input == 2 || input == 6) {
    name = "fuzz.txt";
    model = SH_NET_BILSTM;
  } else if (((sel >> 3) & 7) == 7) {
    model = SH_NET_BILSTM; /* CoNLL-U sentences */
    if (input == 1 || input == 5) model = SH_NET_CHILDSUM;
  }
  sh_buf gen;
  sh_buf_init(&gen, ctx);
  const char *text = (const char *)data + 1;
  size_t len = size - 1;
  if (input >= 3 && input <= 6) {
    spec s = {data + 1, size - 1, 0};
    int trees = input == 4 ? (int)(next(&s) % 4) + 1 : 1;
    for (int t = 0; t < trees; t++) {
      if (input == 6) gen_ids(&s, &gen);
      else gen_tree(&s, &gen, input == 5);
    }
    REQUIRE(sh_buf_status(&gen) == SHEAF_OK);
    text = (const char *)gen.data;
    len = gen.len;
  }
  sh_dataset d;
  sh_dataset_opts lim = {.max_vocab = ID_LIMIT};
  sheaf_status st = sh_dataset_load_mem(ctx, text, len, name, sh_net_data_kind(model), &lim, &d);
  if (st != SHEAF_OK) {
    /* a clear error that names the input (or out of memory) */
    REQUIRE(st == SHEAF_ERR_PARSE || st == SHEAF_ERR_INVALID_ARG || st == SHEAF_ERR_NOMEM ||
            st == SHEAF_ERR_UNSUPPORTED);
    const char *e = sheaf_ctx_last_error(ctx);
    if (st == SHEAF_ERR_PARSE) fuzz_check_parse_error(ctx, st, name);
    else if (st != SHEAF_ERR_NOMEM) REQUIRE(strncmp(e, name, strlen(name)) == 0);
    sheaf_ctx_clear_error(ctx);
    sh_buf_free(&gen);
    return 0;
  }
  /* what was read is within the one depth limit */
  int32_t deepest = 0;
  if (d.kind != SH_DATASET_SENTS) {
    int32_t *h = malloc(sizeof(int32_t) * ((size_t)d.tb.n_nodes + 1));
    REQUIRE(h);
    sh_tb_heights(&d.tb, h);
    for (int32_t t = 0; t < d.tb.n_trees; t++) {
      REQUIRE(h[d.tb.tree_root[t]] <= SH_TB_MAX_DEPTH);
      if (h[d.tb.tree_root[t]] > deepest) deepest = h[d.tb.tree_root[t]];
    }
    free(h);
  } else {
    for (int32_t i = 0; i < d.n_tokens; i++) REQUIRE(d.sent_words[i] < d.vocab);
  }
  int32_t count = sh_dataset_count(&d);
  if (count > MAX_INSTANCES) count = MAX_INSTANCES;
  while (count > 1 && sh_dataset_size_range(&d, 0, count) > MAX_NODES) count /= 2;
  if (sh_dataset_size_range(&d, 0, count) > MAX_NODES) count = 0;
  sh_net net;
  st = count ? sh_net_create(ctx, model, &d, 4, 4, &net) : SHEAF_ERR_INVALID_ARG;
  if (!count) {
    sh_dataset_free(&d);
    sh_buf_free(&gen);
    return 0;
  }
  if (st == SHEAF_OK) {
    REQUIRE(sh_net_seed(&net, sel) == SHEAF_OK);
    static const sheaf_policy pols[4] = {SHEAF_POLICY_SHEAF, SHEAF_POLICY_NONE,
                                         SHEAF_POLICY_DEPTH, SHEAF_POLICY_AGENDA};
    sh_net_outputs out;
    st = sh_net_run_fresh(&net, pols[pol], 1, 0, count, 16, &out);
    if (st == SHEAF_OK) {
      /* hidden 4, seeded weights: never nan (but see MVRNN_FINITE_DEPTH) */
      REQUIRE(finite_outputs(&out) || (model == SH_NET_MVRNN && deepest > MVRNN_FINITE_DEPTH));
      sh_net_outputs_free(&out);
    } else {
      /* a clear error: a message, never a crash (e.g. a node wider than a
       * kernel takes) */
      REQUIRE(st != SHEAF_ERR_INTERNAL);
      REQUIRE(sheaf_ctx_last_error(ctx)[0] != '\0');
    }
    sh_net_free(&net);
  } else {
    REQUIRE(st != SHEAF_ERR_INTERNAL);
  }
  sheaf_ctx_clear_error(ctx);
  sh_dataset_free(&d);
  sh_buf_free(&gen);
  return 0;
}
