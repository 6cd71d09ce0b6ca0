/*
 * beam.h — beam search for the seq2seq decoder of decoder.h: per instance,
 * `width` hypotheses (at most SH_BEAM_MAX_WIDTH; 4 in the benchmark and the
 * tests), each a decoder state and the token it will be fed next.
 *
 * At step t every live hypothesis b runs one decoder step (all of them
 * built before the first value is read, so an instance's hypotheses, and in
 * a fiber run every instance's, compute in one batch) and the candidates
 * are scored on the host:
 *
 *   live b, token k:  score_b + logp_b[k] + [k == EOS] · eos_bonus · (t + 1)
 *   ended b:          score_b (kept as it is, not expanded)
 *
 * The `width` best candidates (higher score first; ties: the lower parent
 * hypothesis, then the lower token, an ended one before its parent's
 * expansions) form the next beam; a candidate whose token is EOS, or
 * which reaches sh_decoder_max_len(n) tokens, is ended. Scores are plain
 * sums (no length normalization: the EOS prior of decoder.h is what ends
 * hypotheses, so long ones are not favoured or penalized beyond it).
 * Decoding stops when every hypothesis of the beam has ended; the result is
 * the beam's best (the first in the order above). At step 0 only the
 * initial hypothesis is live (the beam starts with one, not `width` copies).
 */
#ifndef SH_MODELS_BEAM_H
#define SH_MODELS_BEAM_H

#include "models/decoder.h"

#define SH_BEAM_MAX_WIDTH 16

/* Beam search over src[0..n): out (room for sh_decoder_max_len(n)) gets
 * the best hypothesis' tokens, *len their count, *score its score (with
 * the EOS prior, as ranked). Reads width values per step (sheaf_value).
 * Returns the graph's status. */
sheaf_status sh_decoder_beam(sheaf_graph *g, const sh_decoder *p, const int32_t *src, int32_t n,
                             int width, int32_t *out, int32_t *len, float *score);

#endif
