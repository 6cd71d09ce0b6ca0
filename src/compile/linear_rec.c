/*
 * linear_rec.c — the linearized mode's token records (main takes list[R], R a
 * record of CoNLL-U token fields: chartagger.sf): a row's field values (the
 * inspector's columns: the word id, deprel, head, the 0-based index, or the
 * token's index in the run's columns for its chars), its host integer
 * expressions (`if head == 0 { 0 } else { head - 1 - i }`, evaluated per row
 * into an f32[1] input), and the mean (or sum) of a table's rows over the
 * token's chars (its UTF-8 bytes), in the dynamic runtime's order (the sum,
 * then times 1 / n).
 */
#include <string.h>

#include "compile/linear_int.h"

int32_t sh_lin_rec_field(const sh_lin *L, const sh_lin_slot *sl, int32_t tok, int32_t q, sh_word_ids ids) {
  const sh_lin_records *R = L->rec;
  switch (sl->tf) {
  case SH_TF_UPOS: return R->upos[tok];
  case SH_TF_XPOS: return R->xpos[tok];
  case SH_TF_DEPREL: return R->deprel[tok];
  case SH_TF_HEAD: return R->head[tok];
  case SH_TF_INDEX: return q;
  case SH_TF_CHARS: return tok;
  default: return sh_word_id(ids, tok); /* (not reached: words are read by the inspector) */
  }
}

sheaf_status sh_lin_rec_check(sh_lin *L, const sh_lin_records *rec) {
  if (!rec) return sh_fail(L->ctx, SHEAF_ERR_INVALID_ARG, "linear run: main takes token records: rec is NULL");
  const int32_t *col[SH_TF_COUNT] = {NULL, rec->upos, rec->xpos, rec->deprel, rec->head, NULL, NULL};
  for (int tf = 0; tf < SH_TF_COUNT; tf++) /* in the fields' order, as the dynamic run names the first */
  for (int f = 0; f < L->n_fns; f++)
    for (int k = 0; k < L->fns[f].n_arms; k++) {
      const sh_lin_arm *a = L->fns[f].arms[k];
      for (int i = 0; i < a->n_fields; i++) {
        if (a->slots[a->field_slot[i]].tf != tf) continue;
        bool missing = tf == SH_TF_CHARS ? !rec->form || !rec->form_len
                                         : tf != SH_TF_WORD && tf != SH_TF_INDEX && !col[tf];
        if (missing)
          return sh_fail(L->ctx, SHEAF_ERR_INVALID_ARG,
                         "linear run: main reads the token field '%s', which the data does not have (%s)",
                         sh_tok_field_name((sh_tok_field)tf),
                         tf == SH_TF_CHARS ? "word texts: token ids have none" : "it comes from CoNLL-U");
      }
    }
  return SHEAF_OK;
}

/* The i32 result r of a host operation at h (its operands exact in int64);
 * out of range, the interpreter's error at the same position, word for word
 * (sh_interp_int_result): i32 arithmetic never wraps silently in either mode. */
static bool hx_fits(sh_lin *L, const sh_lin_hx *h, int64_t x, int64_t y, int64_t r) {
  if (r >= INT32_MIN && r <= INT32_MAX) return true;
  const char *file = L->m->diags.file ? L->m->diags.file : "model";
  if (h->op == SH_HX_NEG)
    sh_fail(L->ctx, SHEAF_ERR_INVALID_ARG, "%s:%u:%u: error: i32 overflow: -(%lld) is outside -2147483648..2147483647",
            file, (unsigned)h->at.line, (unsigned)h->at.col, (long long)x);
  else
    sh_fail(L->ctx, SHEAF_ERR_INVALID_ARG,
            "%s:%u:%u: error: i32 overflow: %lld %s %lld = %lld is outside -2147483648..2147483647", file,
            (unsigned)h->at.line, (unsigned)h->at.col, (long long)x,
            h->op == SH_HX_ADD ? "+" : h->op == SH_HX_SUB ? "-" : "*", (long long)y, (long long)r);
  return false;
}

/* Host expression k of arm a for row r of group g into *out, with the
 * interpreter's i32 semantics: every operation's result checked (false: the
 * error is set). */
static bool hx_eval(sh_lin *L, const sh_lin_arm *a, const sh_lin_grp *g, int k, int32_t r, int depth, int64_t *out) {
  const sh_lin_hx *h = &a->hx[k];
  if (depth > SH_LIN_MAX_HX) { /* (expressions are trees of at most SH_LIN_MAX_HX nodes) */
    sh_fail(L->ctx, SHEAF_ERR_INTERNAL, "linear run: a host integer expression deeper than %d", SH_LIN_MAX_HX);
    return false;
  }
  int64_t x = 0, y = 0;
  switch (h->op) {
  case SH_HX_CONST: return *out = h->v, true;
  case SH_HX_FIELD: return *out = g->fields[h->v][r], true;
  default: break;
  }
  if (!hx_eval(L, a, g, h->a, r, depth + 1, &x)) return false;
  if (h->op == SH_HX_NEG) return *out = -x, hx_fits(L, h, x, 0, -x);
  if (h->op == SH_HX_IF) return hx_eval(L, a, g, x ? h->b : h->c, r, depth + 1, out);
  if (!hx_eval(L, a, g, h->b, r, depth + 1, &y)) return false;
  switch (h->op) { /* x and y are i32 values: their sum, difference and product are exact in int64 */
  case SH_HX_ADD: return *out = x + y, hx_fits(L, h, x, y, x + y);
  case SH_HX_SUB: return *out = x - y, hx_fits(L, h, x, y, x - y);
  case SH_HX_MUL: return *out = x * y, hx_fits(L, h, x, y, x * y);
  case SH_HX_EQ: return *out = x == y, true;
  case SH_HX_NE: return *out = x != y, true;
  case SH_HX_LT: return *out = x < y, true;
  case SH_HX_LE: return *out = x <= y, true;
  case SH_HX_GT: return *out = x > y, true;
  default: return *out = x >= y, true;
  }
}

sheaf_status sh_lin_rec_hx(sh_lin *L, const sh_lin_arm *a, const sh_lin_grp *g, int root, int32_t r, float *dst) {
  int64_t v;
  if (!hx_eval(L, a, g, root, r, 0, &v)) return sheaf_ctx_last_status(L->ctx);
  dst[0] = (float)(int32_t)v; /* float(...) of the i32 */
  return SHEAF_OK;
}

sheaf_status sh_lin_rec_chars(sh_lin *L, const sh_lin_grp *g, const sh_lin_seg *sg, int32_t r, float *dst) {
  int32_t tok = g->fields[sg->field][r];
  size_t n = L->rec->form_len[tok], w = (size_t)sg->width;
  const unsigned char *s = (const unsigned char *)L->rec->form[tok];
  int rank;
  const int64_t *shape;
  const float *tab = sheaf_model_param_values(L->model, L->bind->params[sg->param], &rank, &shape);
  if (n == 0 && sg->reduce == SH_BI_SUM) { /* the sum of no rows: zeros, as the dynamic runtime's */
    memset(dst, 0, (size_t)sg->width * sizeof(float));
    return SHEAF_OK;
  }
  if (n == 0)
    return sh_fail(L->ctx, SHEAF_ERR_INVALID_ARG, "linear run: %s of an empty list (a token of no chars)",
                   sh_builtin_name(sg->reduce));
  if (!tab) return sh_fail(L->ctx, SHEAF_ERR_INVALID_ARG, "linear run: a chars table without values");
  for (size_t k = 0; k < n; k++) {
    if ((int64_t)s[k] >= shape[0])
      return sh_fail(L->ctx, SHEAF_ERR_INVALID_ARG, "linear run: char %d outside its table of %lld rows", (int)s[k],
                     (long long)shape[0]);
    const float *x = tab + (size_t)s[k] * w;
    if (k == 0) memcpy(dst, x, w * sizeof(float));
    for (size_t j = 0; k > 0 && j < w; j++) dst[j] += x[j];
  }
  if (sg->reduce == SH_BI_MEAN) {
    float sc = 1.0f / (float)n;
    for (size_t j = 0; j < w; j++) dst[j] *= sc;
  }
  return SHEAF_OK;
}
