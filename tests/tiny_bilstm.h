/*
 * tiny_bilstm.h — a small BiLSTM tagger on the graph API, shared by the
 * training tests that need a real model (test_autodiff_threads.c,
 * test_train_shards.c): its seven parameters (emb, W_fwd, b_fwd, W_bwd,
 * b_bwd, W_tag, b_tag), one sentence's token losses, and every
 * parameter's values or gradients collected in order.
 */
#ifndef SHEAF_TESTS_TINY_BILSTM_H
#define SHEAF_TESTS_TINY_BILSTM_H

#include <stdbool.h>
#include <stddef.h>

#include "sheaf_train.h"

#define TB_MAX_TOKENS 64

typedef struct tb_model {
  sheaf_model *m;
  sheaf_param p[7]; /* emb, W_fwd, b_fwd, W_bwd, b_bwd, W_tag, b_tag */
  int64_t hidden;
} tb_model;

/* vocab words of `embed`, `hidden` each way, `tags` tags, seeded with
 * `seed`; checks every call (false: failed, the test already marked). */
bool tb_create(sheaf_ctx *ctx, tb_model *md, int64_t vocab, int64_t embed, int64_t hidden, int64_t tags,
               uint64_t seed);
/* One sentence (len <= TB_MAX_TOKENS) of words and gold tags: its token
 * losses appended to loss[*k ..]; the graph's status. */
sheaf_status tb_sentence(sheaf_graph *g, const tb_model *md, int len, const int *word, const int *tag,
                         sheaf_expr *loss, int *k);
/* Parameter p's element count. */
size_t tb_numel(sheaf_model *m, sheaf_param p);

/* What tb_collect copies: the values, the public gradient
 * (sheaf_param_grad: a parameter without one fails the collection), or
 * the gradient buffer itself (none: zeros). */
typedef enum tb_what { TB_VALUES, TB_GRADS, TB_GRAD_BUFFERS } tb_what;
/* Every parameter's values or gradients, in order (malloc'd; NULL when a
 * gradient is missing or memory runs out); *n their count. */
float *tb_collect(const tb_model *md, tb_what what, size_t *n);

#endif
