/*
 * inspect_seq.c — the linearized mode's inspector for sequence models (main
 * takes list[i32]): a batch's sentences sorted by length (longest first, a
 * stable counting sort), then per step function (a scan's or fold's step)
 * one group per step index j (levels = positions): the sentences still
 * running at j, i.e. a prefix of the sorted order, each at word position j
 * (forward) or len - 1 - j (over rev(words)); row 0 of every step's state is
 * the zero initial state. Then main: one group over the batch's tokens in
 * sentence order (a per-token map: instance i's outputs are consecutive
 * rows) or over the sentences. A map bound in main (tagger2.sf's x2) is one
 * group over the batch's tokens in sentence order (rows 1 .. T). Steps and
 * maps run in stages: a function after those it reads (a second layer's
 * scan after the map of the first layer's states, after the first layer). Each group's arrays are its rows' words
 * (every field of a sequence arm is the word at the activation's position)
 * and callee rows (sh_lin_sel).
 */
#include <stdlib.h>
#include <string.h>

#include "compile/linear_int.h"

typedef struct seqb {
  const int32_t *off; /* n + 1 */
  int32_t n, T, max_len;
  int32_t *pos_row;   /* [step fn][token]: its row in the step's state (token = off[s] - off[0] + p) */
  int step_of[SH_LIN_MAX_FNS];
} seqb;

/* The callee row of call c for sentence s at position p. */
static int32_t resolve(const sh_lin *L, const seqb *B, const sh_lin_call *c, int32_t s, int32_t p) {
  int32_t len = B->off[s + 1] - B->off[s], tok0 = B->off[s] - B->off[0];
  const int32_t *rows = B->pos_row + (size_t)B->step_of[c->fn] * (size_t)B->T;
  bool fwd = L->fns[c->fn].step > 0;
  int32_t q;
  if (c->sel == SH_LIN_SEL_FIRST || c->sel == SH_LIN_SEL_END) /* a map's rows: 1 + the token's index */
    return 1 + tok0 + (c->sel == SH_LIN_SEL_END ? len : 0);
  switch (c->sel) {
  case SH_LIN_SEL_PREV: q = fwd ? p - 1 : p + 1; break;
  case SH_LIN_SEL_LAST: q = fwd ? len - 1 : 0; break;
  case SH_LIN_SEL_POS: q = p; break;
  default: q = len - 1 - p; break;
  }
  return q >= 0 && q < len ? rows[tok0 + q] : 0;
}

static sheaf_status fill(sh_lin *L, const seqb *B, sh_lin_grp *g, const int32_t *sent, const int32_t *pos,
                         const int32_t *words, sh_word_ids ids, int32_t **buf) {
  const sh_lin_arm *a = L->fns[g->fn].arms[g->arm];
  for (int f = 0; f < a->n_fields; f++, *buf += g->count) {
    g->fields[f] = *buf;
    const sh_lin_slot *sl = &a->slots[a->field_slot[f]]; /* a neighbour or a fixed place: -1 outside the sentence */
    for (int32_t r = 0; r < g->count; r++) {
      int32_t len = B->off[sent[r] + 1] - B->off[sent[r]];
      int32_t q = (sl->anchor == 0 ? pos[r] : sl->anchor == 1 ? 0 : len) + sl->shift;
      g->fields[f][r] = q < 0 || q >= len ? -1
                        : sl->tf ? sh_lin_rec_field(L, sl, B->off[sent[r]] + q, q, ids) /* a record's (linear_rec.c) */
                                 : sh_word_id(ids, words[B->off[sent[r]] + q]);
    }
  }
  for (int c = 0; c < a->n_calls; c++, *buf += g->count) {
    g->calls[c] = *buf;
    for (int32_t r = 0; r < g->count; r++) g->calls[c][r] = resolve(L, B, &a->calls[c], sent[r], pos[r]);
  }
  return SHEAF_OK;
}

sheaf_status sh_lin_inspect_seq(sh_lin *L, const int32_t *off, const int32_t *words, int32_t n, sh_word_ids ids) {
  if (n <= 0 || !off || !words) return sh_fail(L->ctx, SHEAF_ERR_INVALID_ARG, "linear run: %d sentences", (int)n);
  sh_lin_dec_reset(L);
  seqb B = {.off = off, .n = n};
  int n_steps = 0;
  int n_maps = 0, stage[SH_LIN_MAX_FNS] = {0}, n_stages = 1;
  for (int f = 0; f < L->n_fns; f++) B.step_of[f] = L->fns[f].step || L->fns[f].tokmap ? n_steps++ : -1;
  for (int f = 1; f < L->n_fns; f++) n_maps += L->fns[f].tokmap;
  n_steps -= n_maps;
  for (int it = 0; it < L->n_fns; it++) /* stage: 1 + the highest stage a function reads (another's) */
    for (int f = 1; f < L->n_fns; f++)
      for (int c = 0; c < L->fns[f].arms[0]->n_calls; c++) {
        int g = L->fns[f].arms[0]->calls[c].fn;
        if (g != f && g > 0 && stage[g] + 1 > stage[f]) stage[f] = stage[g] + 1;
        if (stage[f] + 1 > n_stages) n_stages = stage[f] + 1;
      }
  for (int32_t s = 0; s < n; s++) {
    int32_t len = off[s + 1] - off[s];
    if (len < 0) return sh_fail(L->ctx, SHEAF_ERR_INVALID_ARG, "linear run: sentence %d has a negative length", (int)s);
    B.max_len = len > B.max_len ? len : B.max_len;
  }
  B.T = off[n] - off[0];
  const sh_lin_fn *mf = &L->fns[0];
  int32_t main_rows = mf->per_token ? B.T : n;
  size_t ints = 0; /* the groups' arrays */
  for (int f = 0; f < L->n_fns; f++) {
    const sh_lin_arm *a = L->fns[f].arms[0];
    ints += (size_t)(a->n_fields + a->n_calls) * (size_t)(f == 0 ? main_rows : B.T);
  }
  int n_groups = n_steps * B.max_len + n_maps + 1;
  int32_t *order = malloc(((size_t)n + 1) * sizeof *order), *cnt = calloc((size_t)B.max_len + 2, sizeof *cnt);
  int32_t *sent = malloc(((size_t)(B.T > n ? B.T : n) + 1) * sizeof *sent);
  int32_t *pos = malloc(((size_t)(B.T > n ? B.T : n) + 1) * sizeof *pos);
  B.pos_row = malloc(((size_t)(n_steps + n_maps) * (size_t)B.T + 1) * sizeof *B.pos_row);
  sheaf_status st = SHEAF_OK;
  if (!order || !cnt || !sent || !pos || !B.pos_row) goto nomem;
  if (n_groups > L->cap_groups) {
    sh_lin_grp *g = realloc(L->groups, (size_t)n_groups * sizeof *g);
    if (!g) goto nomem;
    L->groups = g, L->cap_groups = n_groups;
  }
  if (ints > L->group_buf_cap) {
    int32_t *b = realloc(L->group_buf, (ints + 1) * sizeof *b);
    if (!b) goto nomem;
    L->group_buf = b, L->group_buf_cap = ints;
  }
  if (n > L->cap_inst) {
    int32_t *r = realloc(L->root_row, (size_t)n * sizeof *r), *o = r ? realloc(L->out_rows, (size_t)n * sizeof *o) : NULL;
    if (r) L->root_row = r;
    if (!o) goto nomem;
    L->out_rows = o, L->cap_inst = n;
  }
  /* sentences by length, longest first (stable) */
  for (int32_t s = 0; s < n; s++) cnt[B.max_len - (off[s + 1] - off[s]) + 1]++;
  for (int32_t k = 0; k <= B.max_len; k++) cnt[k + 1] += cnt[k];
  for (int32_t s = 0; s < n; s++) order[cnt[B.max_len - (off[s + 1] - off[s])]++] = s;
  L->n_groups = 0;
  memset(L->n_rows, 0, sizeof L->n_rows);
  int32_t *buf = L->group_buf;
  int height = 0;
  for (int sg = 0; sg < n_stages; sg++) {
  int32_t running = n; /* the sentences longer than j: a prefix of order */
  for (int32_t j = 0; j < B.max_len; j++) {
    while (running > 0 && off[order[running - 1] + 1] - off[order[running - 1]] <= j) running--;
    bool stepped = false;
    for (int f = 1; f < L->n_fns; f++) {
      if (!L->fns[f].step || stage[f] != sg) continue;
      height += !stepped, stepped = true;
      if (L->n_rows[f] == 0) L->n_rows[f] = 1; /* row 0: zeros */
      int32_t *rows = B.pos_row + (size_t)B.step_of[f] * (size_t)B.T;
      for (int32_t r = 0; r < running; r++) {
        int32_t s = order[r], len = off[s + 1] - off[s];
        sent[r] = s, pos[r] = L->fns[f].step > 0 ? j : len - 1 - j;
        rows[off[s] - off[0] + pos[r]] = L->n_rows[f] + r;
      }
      sh_lin_grp *g = &L->groups[L->n_groups++];
      memset(g, 0, sizeof *g);
      g->height = height, g->fn = f, g->arm = 0, g->start = L->n_rows[f], g->count = running;
      L->n_rows[f] += running;
      if ((st = fill(L, &B, g, sent, pos, words, ids, &buf))) goto done;
    }
  }
  bool bumped = false;
  for (int f = 1; f < L->n_fns; f++) { /* the maps of this stage: one group over the tokens, rows 1 .. T */
    if (!L->fns[f].tokmap || stage[f] != sg) continue;
    height += !bumped, bumped = true;
    int32_t *rows = B.pos_row + (size_t)B.step_of[f] * (size_t)B.T, r = 0;
    for (int32_t s = 0; s < n; s++)
      for (int32_t p = 0; p < off[s + 1] - off[s]; p++, r++) sent[r] = s, pos[r] = p, rows[r] = 1 + r;
    L->n_rows[f] = 1 + B.T;
    if (B.T == 0) continue;
    sh_lin_grp *g = &L->groups[L->n_groups++];
    memset(g, 0, sizeof *g);
    g->height = height, g->fn = f, g->arm = 0, g->start = 1, g->count = B.T;
    if ((st = fill(L, &B, g, sent, pos, words, ids, &buf))) goto done;
  }
  }
  for (int f = 1; f < L->n_fns; f++)
    if ((L->fns[f].step || L->fns[f].tokmap) && L->n_rows[f] == 0) L->n_rows[f] = 1;
  int32_t r = 0;
  for (int32_t s = 0; s < n; s++) {
    int32_t len = off[s + 1] - off[s];
    L->root_row[s] = r;
    L->out_rows[s] = mf->per_token ? len : 1;
    if (!mf->per_token) sent[r] = s, pos[r++] = 0;
    for (int32_t p = 0; mf->per_token && p < len; p++) sent[r] = s, pos[r++] = p;
  }
  L->n_inst = n;
  L->n_rows[0] = main_rows;
  if (main_rows > 0) {
    sh_lin_grp *g = &L->groups[L->n_groups++];
    memset(g, 0, sizeof *g);
    g->height = height + 1, g->fn = 0, g->arm = 0, g->start = 0, g->count = main_rows;
    st = fill(L, &B, g, sent, pos, words, ids, &buf);
  }
  goto done;
nomem:
  st = sh_fail(L->ctx, SHEAF_ERR_NOMEM, "out of memory: the inspector's arrays");
done:
  free(order), free(cnt), free(sent), free(pos), free(B.pos_row);
  return st;
}
