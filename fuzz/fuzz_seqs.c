/*
 * fuzz_seqs.c — libFuzzer target for the token-sequence reader and the
 * vocabulary-file loader. The first byte picks the mode (auto, ids, words)
 * and whether the input starts with a vocabulary file (ended by the first
 * 0xFF byte). Any input either fails with "NAME:LINE:COL: error: ..." or
 * reads into sequences whose ids are all in range and whose statistics add
 * up. Any mismatch traps; ASan/UBSan catch everything else.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/seqs.h"
#include "io/stats.h"
#include "sheaf.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  sheaf_ctx *ctx = fuzz_ctx();
  sh_seqs_mode mode = (sh_seqs_mode)(data[0] % 3);
  bool with_vocab = data[0] & 4;
  const char *text = (const char *)data + 1;
  size_t len = size - 1;
  sh_vocab vocab;
  sh_vocab_init(&vocab, ctx);
  sh_seqs s;
  sh_seqs_init(&s, ctx);
  if (with_vocab) {
    const char *sep = memchr(text, 0xFF, len);
    size_t vlen = sep ? (size_t)(sep - text) : len;
    sheaf_status st = sh_vocab_load(&vocab, text, vlen, "fuzz.vocab");
    if (st != SHEAF_OK) {
      fuzz_check_parse_error(ctx, st, "fuzz.vocab");
      goto done;
    }
    text += sep ? vlen + 1 : vlen;
    len -= sep ? vlen + 1 : vlen;
  }
  sh_seqs_options opt = {.mode = mode, .vocab = with_vocab ? &vocab : NULL};
  sheaf_status st = sh_seqs_read(&s, text, len, "fuzz.txt", &opt);
  if (st != SHEAF_OK) {
    fuzz_check_parse_error(ctx, st, "fuzz.txt");
    REQUIRE(s.n_seqs == 0 && s.n_tokens == 0);
    goto done;
  }
  size_t total = 0;
  for (size_t i = 0; i < s.n_seqs; i++) {
    REQUIRE(s.seqs[i].len > 0 && (size_t)s.seqs[i].start == total);
    REQUIRE(i == 0 || s.seqs[i].line > s.seqs[i - 1].line);
    total += (size_t)s.seqs[i].len;
  }
  REQUIRE(total == s.n_tokens);
  int32_t bound = with_vocab ? sh_vocab_size(&vocab)
                  : s.mode == SH_SEQS_WORDS ? sh_vocab_size(&s.vocab)
                                            : INT32_MAX;
  for (size_t i = 0; i < s.n_tokens; i++) REQUIRE(s.tokens[i] >= 0 && s.tokens[i] < bound);
  REQUIRE(s.n_tokens == 0 || mode == SH_SEQS_AUTO || s.mode == mode);
  sh_seq_stats ss;
  if (sh_seq_stats_compute(&s, &ss) == SHEAF_OK) {
    REQUIRE(ss.length.total == (int64_t)s.n_tokens && ss.length.count == s.n_seqs);
    REQUIRE(ss.distinct <= ss.tokens);
    sh_seq_stats_free(ctx, &ss);
  }
done:
  sh_seqs_free(&s);
  sh_vocab_free(&vocab);
  return 0;
}
