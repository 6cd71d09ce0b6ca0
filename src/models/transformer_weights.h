/*
 * transformer_weights.h — seeded random weights for examples/transformer.sf
 * written twice: under PyTorch's nn.TransformerEncoderLayer names and layout
 * (what sheaf_encoder loads: src/ragged) and under the model's own names,
 * transposed (x @ W), so the two run the same layer (the test and the
 * benchmark that compare them: tests/test_lang_transformer.c,
 * bench/bench_transformer_sf.c).
 */
#ifndef SH_MODELS_TRANSFORMER_WEIGHTS_H
#define SH_MODELS_TRANSFORMER_WEIGHTS_H

#include "sheaf.h"

/* d_model D (4 heads of D / 4), FFN F, ReLU, eps 1e-5, a table emb [V, D]
 * (returned in *emb, malloc'd: the encoder's inputs are its rows). */
sheaf_status sh_transformer_weights(sheaf_ctx *ctx, int64_t V, int D, int F, uint64_t seed,
                                    const char *enc_path, const char *sf_path, float **emb);

#endif
