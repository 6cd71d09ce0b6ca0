/*
 * test_export_torch.c — PyTorch models exported with scripts/export_torch.py
 * run in Sheaf's language and give PyTorch's outputs: a BiLSTM tagger
 * (examples/bilstm.sf: the same tag predictions for every word), a GRU
 * classifier (examples/gru.sf) and an nn.TransformerEncoderLayer
 * (examples/transformer.sf), seeded random weights, nothing trained, on the
 * first EWT sentences with the exported vocabulary (tests/torch_roundtrip.py
 * is the PyTorch side). Outputs within 1e-4 relative (floor 1) and equal
 * argmax per line. Skips (and passes) when `python3 -c 'import torch,
 * numpy'` fails; scripts/install_torch.sh installs both.
 */
#include <math.h>
#include <stdlib.h>

#include "harness.h"

#define EWT "data/ud_english_ewt/en_ewt-ud-test.conllu"
#define N_SENT "60"


TEST(export_torch_models_match_pytorch) {
  static char out[1 << 14];
  if (!th_sheaf_bin()) return;
  char dir[512], cmd[2048];
  snprintf(dir, sizeof dir, "%s", th_tmp_path("torch_rt"));
  snprintf(cmd, sizeof cmd, "mkdir -p %s && python3 tests/torch_roundtrip.py " EWT " " N_SENT " %s 2>&1", dir, dir);
  int rc = th_run_torch(cmd, out, sizeof out); /* skips when torch or numpy is missing */
  if (rc == TH_SKIP) return;
  if (!CHECK_EQ_INT(rc, 0)) {
    fprintf(stderr, "%s\n%s", cmd, out);
    return;
  }
  static const struct { const char *name; int keys; long lines; } models[] = {
      {"bilstm", 2, 0}, {"gru", 1, 60}, {"transformer", 2, 0}};
  for (int k = 0; k < 3; k++) {
    snprintf(cmd, sizeof cmd,
             "%s run examples/%s.sf --data " EWT " --weights %s/%s.safetensors --vocab %s/vocab.txt "
             "--limit " N_SENT " --out %s/%s.got 2>&1",
             th_sheaf_bin(), models[k].name, dir, models[k].name, dir, dir, models[k].name);
    if (!CHECK_EQ_INT(th_run(cmd, out, sizeof out), 0)) {
      fprintf(stderr, "%s\n%s", cmd, out);
      continue;
    }
    CHECK(!strstr(out, "warning")); /* the exported vocabulary: no numbering warning */
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/%s.expected", dir, models[k].name);
    snprintf(b, sizeof b, "%s/%s.got", dir, models[k].name);
    long lines, agree;
    double e = th_compare_outputs(a, b, models[k].keys, &lines, &agree);
    if (!CHECK(e >= 0 && e <= 1e-4) || !CHECK(lines > 0 && agree == lines) ||
        !CHECK(models[k].lines == 0 || lines == models[k].lines))
      fprintf(stderr, "%s: max rel err %g, %ld of %ld lines with the same argmax\n", models[k].name, e, agree,
              lines);
  }
}
