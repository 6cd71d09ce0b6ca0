/*
 * test_dyncoarse.c — coarsening in the dynamic mode (src/compile/dyncoarse.c,
 * `sheaf run --coarsen on|off`): every example that runs dynamic (the
 * wait-point models on fibers, the tree models with --mode dynamic) run
 * coarsened and not on the bundled EWT data under every policy on 1 and 2
 * threads, every number of the outputs within 1e-5; the regions taken
 * (fewer graph ops) and the functions refused named with the reason under
 * --stats, their calls still issued op by op.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define EWT "data/ud_english_ewt/en_ewt-ud-test.conllu"
#define LIMIT "70" /* a full batch of 64 and a short one */

typedef struct dc_example {
  const char *name, *sizes;
  const char *stats; /* a line --stats must print */
} dc_example;

static const dc_example k_examples[] = {
    {"treegru", "--size E=24 --size H=20 --size C=5", "coarsening: node (examples/treegru.sf:17): one kernel of 16 ops"},
    {"parser", "--size H=20", "coarsening: compose (examples/parser.sf:26): one kernel of 3 ops"},
    {"early_exit", "--size H=20 --size C=5", "coarsening: step (examples/early_exit.sf:20) stays separate: "},
    {"mvrnn", "--size H=8", "coarsening: compose (examples/mvrnn.sf:23) stays separate: "},
    {"handnorm", "--size H=20", "coarsening: my_softmax (examples/handnorm.sf:11) stays separate: generic"},
    {"beam", "--size E=24 --size H=20", NULL},
    {"decoder", "--size E=24 --size H=20 --size C=30", NULL},
    {"seq2seq", "--size E=24 --size H=20 --size C=30", NULL},
};

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = sz >= 0 ? malloc((size_t)sz + 1) : NULL;
  if (b && fread(b, 1, (size_t)sz, f) == (size_t)sz) b[sz] = 0;
  else free(b), b = NULL;
  fclose(f);
  return b;
}

/* The numbers of a jsonl file outside strings (n at most cap); -1 when unreadable. */
static long numbers(const char *path, double *v, long cap) {
  char *s = slurp(path);
  if (!s) return -1;
  long n = 0;
  for (char *p = s; *p;) {
    if (*p == '"') { /* a string: tokens may hold digits */
      for (p++; *p && *p != '"'; p++)
        if (*p == '\\' && p[1]) p++;
      if (*p) p++;
    } else if ((*p >= '0' && *p <= '9') || *p == '-') {
      char *e;
      double x = strtod(p, &e);
      if (e == p) {
        p++;
        continue;
      }
      if (n < cap) v[n] = x;
      n++;
      p = e;
    } else {
      p++;
    }
  }
  free(s);
  return n;
}

static long graph_ops(const char *out) {
  const char *g = strstr(out, "graph: ");
  return g ? strtol(g + 7, NULL, 10) : -1;
}

TEST(dyncoarse_outputs_within_1e5_every_policy) {
  if (!th_sheaf_bin()) return;
  const char *data = th_ewt_head(70); /* --limit 70 of a file of 70 sentences: no 1.8 MB parse a run */
  if (!data) return;
  static const char *const pols[] = {"none", "sheaf", "depth", "agenda"};
  static char out[2][1 << 15];
  enum { CAP = 1 << 20 };
  double *v[2] = {malloc(CAP * sizeof(double)), malloc(CAP * sizeof(double))};
  if (!CHECK(v[0] && v[1])) goto done;
  char cmd[2048], path[2][512], name[128];
  static const char *const modes[2] = {"on", "off"};
  for (size_t k = 0; k < sizeof k_examples / sizeof *k_examples; k++) {
    const dc_example *x = &k_examples[k];
    for (int p = 0; p < 4; p++)
      for (int t = 1; t <= 2; t++) {
        bool ran = true;
        for (int c = 0; c < 2; c++) {
          snprintf(name, sizeof name, "dc_%s_%s_%d_%s.jsonl", x->name, pols[p], t, modes[c]);
          snprintf(path[c], sizeof path[c], "%s", th_tmp_path(name));
          snprintf(cmd, sizeof cmd,
                   "%s run examples/%s.sf --data %s --limit " LIMIT " --seed 5 %s --policy %s --threads %d "
                   "--batch 64 --format jsonl --mode dynamic --coarsen %s --stats --out %s",
                   th_sheaf_bin(), x->name, data, x->sizes, pols[p], t, modes[c], path[c]);
          if (!CHECK_EQ_INT(th_run(cmd, out[c], sizeof out[c]), 0)) {
            fprintf(stderr, "%s\n%s", cmd, out[c]);
            ran = false;
          }
        }
        if (!ran) continue;
        if (x->stats && !CHECK(strstr(out[0], x->stats) != NULL))
          fprintf(stderr, "%s: --stats lacks \"%s\":\n%s", x->name, x->stats, out[0]);
        CHECK(strstr(out[1], "coarsening: off (--coarsen off, the default)") != NULL);
        long on = graph_ops(out[0]), off = graph_ops(out[1]);
        CHECK(on > 0 && off > 0);
        if (x->stats && strstr(x->stats, "one kernel")) { /* the region ran: its kernel's batches */
          char kn[64];
          snprintf(kn, sizeof kn, "kernel %.*s_region ", (int)strcspn(x->stats + 12, " "), x->stats + 12);
          if (!CHECK(strstr(out[0], kn) != NULL)) fprintf(stderr, "%s: no \"%s\" in:\n%s", x->name, kn, out[0]);
          CHECK(strstr(out[1], "_region ") == NULL);
          if (!strcmp(x->name, "treegru")) CHECK(on < off); /* 16 ops are one call (and its reshapes) */
        } else {
          CHECK_EQ_INT(on, off); /* nothing coarsened */
          CHECK(strstr(out[0], "_region ") == NULL);
        }
        long n0 = numbers(path[0], v[0], CAP), n1 = numbers(path[1], v[1], CAP);
        if (!CHECK(n0 > 0 && n0 == n1 && n0 <= CAP)) {
          fprintf(stderr, "%s, policy %s, %d threads: %ld vs %ld numbers\n", x->name, pols[p], t, n0, n1);
          continue;
        }
        double worst = 0;
        long at = -1;
        for (long i = 0; i < n0; i++) {
          double d = fabs(v[0][i] - v[1][i]) / fmax(1.0, fabs(v[1][i]));
          if (!(d <= worst)) worst = d, at = i;
        }
        if (!CHECK(worst <= 1e-5))
          fprintf(stderr, "%s, policy %s, %d threads: number %ld differs by %.3g (%s, %s)\n", x->name, pols[p], t,
                  at, worst, path[0], path[1]);
      }
  }
done:
  free(v[0]);
  free(v[1]);
}

/* A region whose translation is refused runs op by op, the reason named;
 * --host ast never coarsens. */
TEST(dyncoarse_refused_and_ast) {
  if (!th_sheaf_bin()) return;
  static char out[1 << 15];
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "%s run examples/treegru.sf --data " EWT " --limit 8 --size E=8 --size H=8 --size C=3 --mode dynamic "
           "--host ast --coarsen on --stats --out %s",
           th_sheaf_bin(), th_tmp_path("dc_ast.jsonl"));
  if (CHECK_EQ_INT(th_run(cmd, out, sizeof out), 0)) CHECK(strstr(out, "coarsening: off (--host ast)") != NULL);
  snprintf(cmd, sizeof cmd,
           "%s run examples/mvrnn.sf --data " EWT " --limit 8 --size H=8 --mode dynamic --coarsen on --stats --out %s",
           th_sheaf_bin(), th_tmp_path("dc_mv.jsonl"));
  if (CHECK_EQ_INT(th_run(cmd, out, sizeof out), 0))
    CHECK(strstr(out, "compose (examples/mvrnn.sf:23) stays separate: examples/mvrnn.sf:23:4: 'compose': "
                      "parameter 2 is not a vector of known size") != NULL);
  snprintf(cmd, sizeof cmd, "%s run examples/treegru.sf --data " EWT " --coarsen maybe --out -", th_sheaf_bin());
  CHECK(th_run(cmd, out, sizeof out) != 0);
  CHECK(strstr(out, "--coarsen") != NULL);
}
