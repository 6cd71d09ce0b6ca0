/*
 * linear_mat.c — the linearized mode's kernels and executor for an arm with
 * matrices per sentence (coarsen_mat.c; transformer.sf's main). The arm's
 * DAG is cut into stages at the ops that mix a sentence's rows: stage phase
 * p's per-token code is one dense kernel over all the batch's tokens
 * (`[N, ...]` rows, sizes specialised: the GEMMs, biases, layer norms), and
 * the attention heads of phase p (softmax(q @ transpose(k) * c) @ v) one
 * ragged kernel over the batch's sentences (`f32[B, L(b), D]`, L the
 * sentence lengths: no padding), in the order dense 0, ragged 1, dense 1,
 * ... A value read by another stage is a buffer of one row per token
 * (sentence b's rows at its offset: the ragged layout), so the same memory
 * is a dense [T, D] input of one kernel and a ragged one of the next.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "compile/linear_int.h"
#include "lang/kernel.h"

#define MAX_STAGES 16
#define MAX_BUFS 128

typedef struct mat_stage {
  bool ragged;
  sh_lin_arm *arm; /* dense: a per-token arm printed by sh_lin_emit, its inputs buffers */
  int in_buf[SH_LIN_MAX_NODES]; /* dense: the buffer of each of arm's nodes (-1: none) */
  int n_in, in[MAX_BUFS];       /* ragged: buffers read */
  int in_h[MAX_BUFS];           /* ragged: each read as H heads [B, L(b), H, w / H] */
  int out_h[MAX_BUFS];          /* ragged: each written as H heads (a fused cat of heads) */
  int n_out, out[MAX_BUFS];     /* buffers written (dense: in arm->out order) */
  char name[80];
  char *src;
  sheaf_kernel *k;
} mat_stage;

struct sh_lin_mat {
  int n_bufs;
  int buf_node[MAX_BUFS]; /* the main arm's node held by each buffer */
  int64_t buf_w[MAX_BUFS];
  int node_buf[SH_LIN_MAX_NODES];
  int n_stages;
  mat_stage st[MAX_STAGES];
};

static bool ragged_op(const sh_lin_node *n) {
  return n->op == SH_LIN_TRANS || n->op == SH_LIN_SCORE || n->op == SH_LIN_SMAX || n->op == SH_LIN_ATT;
}

static int n_operands(const sh_lin_node *n, int *ops) {
  int m = 0;
  if (n->a >= 0) ops[m++] = n->a;
  if (n->b >= 0) ops[m++] = n->b;
  for (int i = 0; (n->op == SH_LIN_CAT || n->op == SH_LIN_LN) && i < n->n_items; i++) ops[m++] = n->items[i];
  return m;
}

static void mark(const sh_lin_arm *a, int k, bool *live) {
  if (k < 0 || live[k]) return;
  live[k] = true;
  int ops[2 + SH_LIN_MAX_SEGS];
  int m = n_operands(&a->nodes[k], ops);
  for (int i = 0; i < m; i++) mark(a, ops[i], live);
}

void sh_lin_mat_free(sh_lin_arm *a) {
  if (!a || !a->mat) return;
  for (int s = 0; s < a->mat->n_stages; s++) {
    mat_stage *st = &a->mat->st[s];
    if (st->arm) free(st->arm->src), free(st->arm);
    free(st->src);
    sheaf_kernel_free(st->k);
  }
  free(a->mat);
  a->mat = NULL;
}

int sh_lin_mat_n_kernels(const sh_lin_arm *a) { return a && a->mat ? a->mat->n_stages : 0; }

/* ------------------------------------------------------------ stages */

typedef struct cut {
  sh_lin *L;
  sh_lin_arm *a;
  struct sh_lin_mat *M;
  bool live[SH_LIN_MAX_NODES];
  bool fused[SH_LIN_MAX_NODES]; /* a cat of H heads computed as one [B, L(b), H, w] result, and its heads */
  int phase[SH_LIN_MAX_NODES];
  int stage[SH_LIN_MAX_NODES]; /* dense phase p: 2p; ragged phase p: 2p - 1; -1 free (parameters, constants) */
} cut;

static int buf_of(cut *c, int k) {
  struct sh_lin_mat *M = c->M;
  if (M->node_buf[k] >= 0) return M->node_buf[k];
  if (M->n_bufs == MAX_BUFS) return sh_lin_refuse(c->L, c->a->span, "more than %d values cross stages", MAX_BUFS), -1;
  const sh_lin_node *n = &c->a->nodes[k];
  M->buf_node[M->n_bufs] = k, M->buf_w[M->n_bufs] = n->d[0] * n->d[1];
  return M->node_buf[k] = M->n_bufs++;
}

/* Copies node k (and the free nodes it reads) into the dense stage arm s; map: old -> new. */
static int copy_node(cut *c, mat_stage *s, int *map, int k, int si) {
  if (map[k] >= 0) return map[k];
  const sh_lin_node *n = &c->a->nodes[k];
  sh_lin_arm *d = s->arm;
  if ((c->stage[k] != si && c->stage[k] != -1) || n->op == SH_LIN_IN) { /* a buffer: an input of this stage */
    int b = buf_of(c, k);
    if (b < 0) return -1;
    int j = sh_lin_mat_node(c->L, d, c->a->span, SH_LIN_IN, 1, n->d[0] * n->d[1], 1, true);
    if (j < 0) return -1;
    d->nodes[j].n_segs = 1;
    d->nodes[j].segs[0] = (sh_lin_seg){.width = n->d[0] * n->d[1]};
    s->in_buf[j] = b;
    return map[k] = j;
  }
  int ops[2 + SH_LIN_MAX_SEGS], m = n_operands(n, ops), nops[2 + SH_LIN_MAX_SEGS];
  for (int i = 0; i < m; i++)
    if ((nops[i] = copy_node(c, s, map, ops[i], si)) < 0) return -1;
  if (d->n_nodes == SH_LIN_MAX_NODES) return sh_lin_refuse(c->L, c->a->span, "a stage with too many operations"), -1;
  int j = d->n_nodes++;
  d->nodes[j] = *n;
  int t = 0;
  if (n->a >= 0) d->nodes[j].a = nops[t++];
  if (n->b >= 0) d->nodes[j].b = nops[t++];
  for (int i = 0; (n->op == SH_LIN_CAT || n->op == SH_LIN_LN) && i < n->n_items; i++) d->nodes[j].items[i] = nops[t++];
  s->in_buf[j] = -1;
  return map[k] = j;
}

static bool pow2(double c) {
  int e;
  return c > 0 && frexp(c, &e) == 0.5;
}

static void put_const(sh_buf *b, double c) {
  if (fabs(c) >= 1e-3 && fabs(c) < 1e7) sh_buf_printf(b, "(%.9f)", c);
  else sh_buf_printf(b, "(%.9e)", c);
}

/* What a ragged kernel reads for node k: a column slice of a dense value at
 * a multiple of its width is head h of H of that value's buffer (read as
 * [B, L(b), H, w]); anything else its own buffer (H = 1). */
static int resolve(const cut *c, int k, int *H, int *h) {
  const sh_lin_node *n = &c->a->nodes[k];
  *H = 1, *h = 0;
  if (n->op == SH_LIN_SLICE && n->rank == 1) {
    const sh_lin_node *x = &c->a->nodes[n->a];
    if (x->rank == 1 && x->batched && n->lo % n->d[0] == 0 && x->d[0] % n->d[0] == 0 && !ragged_op(x)) {
      *H = (int)(x->d[0] / n->d[0]), *h = (int)(n->lo / n->d[0]);
      return n->a;
    }
  }
  return k;
}

/* The ragged kernel of phase p: each ATT node of the phase, softmax(q @ transpose(k) * c) @ v per sentence. */
static sheaf_status emit_ragged(cut *c, mat_stage *s, int p) {
  sh_lin_arm *a = c->a;
  sh_buf b;
  sh_buf_init(&b, c->L->ctx);
  sh_buf body;
  sh_buf_init(&body, c->L->ctx);
  snprintf(s->name, sizeof s->name, "%.40s_r%d", a->name, p);
  for (int k = 0; k < a->n_nodes; k++) {
    const sh_lin_node *n = &a->nodes[k];
    bool cat = n->op == SH_LIN_CAT && c->fused[k];
    if (!c->live[k] || c->phase[k] != p || !(cat || (n->op == SH_LIN_ATT && !c->fused[k]))) continue;
    int nh = cat ? n->n_items : 1;
    if (cat) n = &a->nodes[n->items[0]]; /* head 0 stands for all: the same buffers, h the head index */
    const sh_lin_node *sm = &a->nodes[n->a], *sc = &a->nodes[sm->a];
    int r[3] = {sc->a, sc->b, n->b}, x[3];
    char rd[3][2][48]; /* operand i read at row i / j */
    for (int i = 0; i < 3; i++) {
      int H, h, bf = buf_of(c, resolve(c, r[i], &H, &h));
      if (bf < 0) goto fail;
      x[i] = 0;
      while (x[i] < s->n_in && !(s->in[x[i]] == bf && s->in_h[x[i]] == H)) x[i]++;
      if (x[i] == s->n_in) s->in_h[s->n_in] = H, s->in[s->n_in++] = bf;
      for (int t = 0; t < 2; t++)
        if (cat) snprintf(rd[i][t], sizeof rd[i][t], "x%d(b, %s, h, d)", x[i], t ? "j" : "i");
        else if (H > 1) snprintf(rd[i][t], sizeof rd[i][t], "x%d(b, %s, %d, d)", x[i], t ? "j" : "i", h);
        else snprintf(rd[i][t], sizeof rd[i][t], "x%d(b, %s, d)", x[i], t ? "j" : "i");
    }
    if (cat) { /* the mha form: the heads as an index */
      int o = s->n_out, ob = buf_of(c, k);
      if (ob < 0) goto fail;
      s->out_h[s->n_out] = nh, s->out[s->n_out++] = ob;
      sh_buf_printf(&body, "  s%d(b, h, i, j) +=! %s * %s", o, rd[0][0], rd[1][1]);
      if (sc->c != 1.0 && pow2(sc->c)) sh_buf_puts(&body, " * "), put_const(&body, sc->c);
      const char *sv = "s";
      if (sc->c != 1.0 && !pow2(sc->c)) { /* scaled after the sum, as the dynamic runtime does */
        sh_buf_printf(&body, "\n  u%d(b, h, i, j) = s%d(b, h, i, j) * ", o, o);
        put_const(&body, sc->c);
        sv = "u";
      }
      sh_buf_printf(&body, "\n  m%d(b, h, i) max=! %s%d(b, h, i, j)\n", o, sv, o);
      sh_buf_printf(&body, "  e%d(b, h, i, j) = exp(%s%d(b, h, i, j) - m%d(b, h, i))\n", o, sv, o, o);
      sh_buf_printf(&body, "  z%d(b, h, i) +=! e%d(b, h, i, j)\n", o, o);
      sh_buf_printf(&body, "  w%d(b, h, i, d) +=! e%d(b, h, i, j) * %s\n", o, o, rd[2][1]);
      sh_buf_printf(&body, "  o%d(b, i, h, d) = w%d(b, h, i, d) / z%d(b, h, i)\n", o, o, o);
      continue;
    }
    int o = s->n_out, ob = buf_of(c, k);
    if (ob < 0) goto fail;
    s->out_h[s->n_out] = 1, s->out[s->n_out++] = ob;
    double sc_c = sc->c;
    sh_buf_printf(&body, "  s%d(b, i, j) +=! %s * %s", o, rd[0][0], rd[1][1]);
    if (sc_c != 1.0 && pow2(sc_c)) sh_buf_puts(&body, " * "), put_const(&body, sc_c);
    sh_buf_puts(&body, "\n");
    const char *sv = "s";
    if (sc_c != 1.0 && !pow2(sc_c)) {
      sh_buf_printf(&body, "  u%d(b, i, j) = s%d(b, i, j) * ", o, o);
      put_const(&body, sc_c);
      sh_buf_puts(&body, "\n");
      sv = "u";
    }
    sh_buf_printf(&body, "  m%d(b, i) max=! %s%d(b, i, j)\n", o, sv, o);
    sh_buf_printf(&body, "  e%d(b, i, j) = exp(%s%d(b, i, j) - m%d(b, i))\n", o, sv, o, o);
    sh_buf_printf(&body, "  z%d(b, i) +=! e%d(b, i, j)\n", o, o);
    sh_buf_printf(&body, "  w%d(b, i, d) +=! e%d(b, i, j) * %s\n", o, o, rd[2][1]);
    sh_buf_printf(&body, "  o%d(b, i, d) = w%d(b, i, d) / z%d(b, i)\n", o, o, o);
  }
  sh_buf_printf(&b, "kernel %s(L: i32[B]", s->name);
  for (int i = 0; i < s->n_in; i++) {
    int64_t w = c->M->buf_w[s->in[i]];
    if (s->in_h[i] > 1) sh_buf_printf(&b, ", x%d: f32[B, L(b), %d, %lld]", i, s->in_h[i], (long long)(w / s->in_h[i]));
    else sh_buf_printf(&b, ", x%d: f32[B, L(b), %lld]", i, (long long)w);
  }
  sh_buf_puts(&b, ")\n    -> (");
  for (int i = 0; i < s->n_out; i++) {
    int64_t w = c->M->buf_w[s->out[i]];
    if (s->out_h[i] > 1) sh_buf_printf(&b, "%so%d: f32[B, L(b), %d, %lld]", i ? ", " : "", i, s->out_h[i], (long long)(w / s->out_h[i]));
    else sh_buf_printf(&b, "%so%d: f32[B, L(b), %lld]", i ? ", " : "", i, (long long)w);
  }
  sh_buf_printf(&b, ") {\n%s}\n", sh_buf_cstr(&body));
  if (sh_buf_status(&b) || sh_buf_status(&body)) goto fail;
  s->src = strdup(sh_buf_cstr(&b));
  sh_buf_free(&b), sh_buf_free(&body);
  return s->src ? SHEAF_OK : sh_fail(c->L->ctx, SHEAF_ERR_NOMEM, "out of memory");
fail:
  sh_buf_free(&b), sh_buf_free(&body);
  return c->L->refused ? SHEAF_ERR_UNSUPPORTED : sh_fail(c->L->ctx, SHEAF_ERR_NOMEM, "out of memory");
}

/* The dense kernel of phase p: every live per-token node of the phase; its
 * results the buffers other stages (or main's result) read. */
static sheaf_status emit_dense(cut *c, mat_stage *s, int p, const bool *read_elsewhere) {
  sh_lin_arm *a = c->a;
  int si = 2 * p;
  if (!(s->arm = calloc(1, sizeof *s->arm))) return sh_fail(c->L->ctx, SHEAF_ERR_NOMEM, "out of memory");
  snprintf(s->arm->name, sizeof s->arm->name, "%.40s_d%d", a->name, p);
  snprintf(s->name, sizeof s->name, "%s", s->arm->name);
  s->arm->span = a->span;
  int map[SH_LIN_MAX_NODES];
  for (int k = 0; k < SH_LIN_MAX_NODES; k++) map[k] = -1, s->in_buf[k] = -1;
  for (int k = 0; k < a->n_nodes; k++) {
    if (!c->live[k] || c->stage[k] != si || !read_elsewhere[k]) continue;
    int j = copy_node(c, s, map, k, si);
    int bf = j < 0 ? -1 : buf_of(c, k);
    if (bf < 0) return SHEAF_ERR_UNSUPPORTED;
    if (s->arm->n_out == SH_LIN_MAX_COMPS) return sh_lin_refuse(c->L, a->span, "a stage with too many results");
    s->arm->out[s->arm->n_out++] = j;
    s->out[s->n_out++] = bf;
  }
  sh_lin_fn f = {0};
  sheaf_status st = sh_lin_emit(c->L, &f, s->arm);
  if (st) return st;
  s->src = strdup(s->arm->src);
  return s->src ? SHEAF_OK : sh_fail(c->L->ctx, SHEAF_ERR_NOMEM, "out of memory");
}

static const char *const sentence_what =
    "a sentence's N x N scores (q @ transpose(k)) are translated only scaled by a constant, through softmax of "
    "their rows, and times the sentence's rows (softmax(...) @ v)";

/* cat(head_0, ..., head_{H-1}) where head t is softmax(q_t @ transpose(k_t) * c) @ v_t, q_t column block t of
 * one value q (k, v alike), the same c, each head read by the cat only: one ragged computation over (b, h, i,
 * j) whose [B, L(b), H, w] result is the cat (multi-head attention: the per-head products of the next stage's
 * W_o become one GEMM). */
static void fuse_heads(cut *c) {
  sh_lin_arm *a = c->a;
  int uses[SH_LIN_MAX_NODES] = {0};
  for (int k = 0; k < a->n_nodes; k++) {
    if (!c->live[k]) continue;
    int ops[2 + SH_LIN_MAX_SEGS], m = n_operands(&a->nodes[k], ops);
    for (int i = 0; i < m; i++) uses[ops[i]]++;
  }
  for (int j = 0; j < a->n_out; j++) uses[a->out[j]]++;
  for (int k = 0; k < a->n_nodes; k++) {
    const sh_lin_node *n = &a->nodes[k];
    if (!c->live[k] || n->op != SH_LIN_CAT || n->n_items < 2) continue;
    bool ok = true;
    int base[3] = {-1, -1, -1};
    double scale = 0;
    for (int t = 0; t < n->n_items && ok; t++) {
      const sh_lin_node *h = &a->nodes[n->items[t]];
      ok = h->op == SH_LIN_ATT && uses[n->items[t]] == 1 && c->phase[n->items[t]] == c->phase[n->items[0]];
      if (!ok) break;
      const sh_lin_node *sc = &a->nodes[a->nodes[h->a].a];
      int r[3] = {sc->a, sc->b, h->b};
      for (int i = 0; i < 3 && ok; i++) {
        int H, hh, b = resolve(c, r[i], &H, &hh);
        ok = H == n->n_items && hh == t && (t == 0 || b == base[i]) && a->nodes[r[i]].d[0] == a->nodes[r[0]].d[0];
        base[i] = b;
      }
      ok = ok && (t == 0 || sc->c == scale);
      scale = sc->c;
    }
    if (!ok) continue;
    c->fused[k] = true;
    c->stage[k] = 2 * c->phase[k] - 1;
    for (int t = 0; t < n->n_items; t++) c->fused[n->items[t]] = true;
  }
}

sheaf_status sh_lin_mat_emit(sh_lin *L, sh_lin_arm *a) {
  sh_lin_mat_free(a);
  cut *c = calloc(1, sizeof *c);
  struct sh_lin_mat *M = calloc(1, sizeof *M);
  if (!c || !M) return free(c), free(M), sh_fail(L->ctx, SHEAF_ERR_NOMEM, "out of memory");
  a->mat = M;
  c->L = L, c->a = a, c->M = M;
  for (int k = 0; k < SH_LIN_MAX_NODES; k++) M->node_buf[k] = -1;
  for (int j = 0; j < a->n_out; j++) mark(a, a->out[j], c->live);
  sheaf_status st = SHEAF_OK;
  int max_phase = 0;
  for (int k = 0; k < a->n_nodes && !st; k++) {
    const sh_lin_node *n = &a->nodes[k];
    if (!c->live[k]) continue;
    int ops[2 + SH_LIN_MAX_SEGS], m = n_operands(n, ops), ph = 0;
    for (int i = 0; i < m; i++) ph = c->phase[ops[i]] > ph ? c->phase[ops[i]] : ph;
    if (!n->batched || n->op == SH_LIN_PARAM || n->op == SH_LIN_CONST) {
      c->stage[k] = -1, c->phase[k] = 0;
      continue;
    }
    if (n->op == SH_LIN_IN) {
      if (n->rank != 1) st = sh_lin_refuse(L, a->span, "a per-row matrix input next to a sentence's matrix: not "
                                                        "translated by the linearized mode");
      c->phase[k] = 0, c->stage[k] = 0;
      continue;
    }
    switch (n->op) {
    case SH_LIN_SCORE: ph = (c->phase[n->a] > c->phase[n->b] ? c->phase[n->a] : c->phase[n->b]) + 1; break;
    case SH_LIN_SMAX:
      if (a->nodes[n->a].op != SH_LIN_SCORE) st = sh_lin_refuse(L, a->span, "%s", sentence_what);
      break;
    case SH_LIN_ATT:
      if (a->nodes[n->a].op != SH_LIN_SMAX) st = sh_lin_refuse(L, a->span, "%s", sentence_what);
      ph = c->phase[n->b] + 1 > c->phase[n->a] ? c->phase[n->b] + 1 : c->phase[n->a];
      break;
    case SH_LIN_TRANS: break;
    default:
      for (int i = 0; i < m; i++)
        if (ragged_op(&a->nodes[ops[i]]) && a->nodes[ops[i]].op != SH_LIN_ATT)
          st = sh_lin_refuse(L, a->span, "%s", sentence_what);
      if (n->rank != 1) st = sh_lin_refuse(L, a->span, "a per-row matrix next to a sentence's matrix: not "
                                                        "translated by the linearized mode");
    }
    c->phase[k] = ph;
    c->stage[k] = ragged_op(n) ? 2 * ph - 1 : 2 * ph;
    max_phase = ph > max_phase ? ph : max_phase;
  }
  if (!st) fuse_heads(c);
  for (int j = 0; j < a->n_out && !st; j++)
    if (a->nodes[a->out[j]].rank != 1 || !a->nodes[a->out[j]].batched)
      st = sh_lin_refuse(L, a->span, "main's per-token result is not a row of the sentence");
  if (max_phase >= MAX_STAGES / 2) st = sh_lin_refuse(L, a->span, "more than %d attention layers", MAX_STAGES / 2 - 1);
  /* which dense nodes another stage (or main's result) reads */
  bool read_elsewhere[SH_LIN_MAX_NODES] = {0};
  for (int k = 0; k < a->n_nodes && !st; k++) {
    if (!c->live[k] || c->stage[k] < 0) continue;
    const sh_lin_node *n = &a->nodes[k];
    int ops[2 + SH_LIN_MAX_SEGS], m = n_operands(n, ops);
    for (int i = 0; i < m; i++) {
      int H, h, o = ragged_op(n) ? resolve(c, ops[i], &H, &h) : ops[i];
      if (c->stage[o] >= 0 && c->stage[o] != c->stage[k] && a->nodes[o].op != SH_LIN_IN) read_elsewhere[o] = true;
    }
  }
  for (int j = 0; j < a->n_out && !st; j++)
    if (a->nodes[a->out[j]].op != SH_LIN_IN && a->nodes[a->out[j]].op != SH_LIN_ATT) read_elsewhere[a->out[j]] = true;
  /* the executor's inputs: buffers filled before the first stage */
  for (int k = 0; k < a->n_nodes && !st; k++)
    if (c->live[k] && c->stage[k] == 0 && a->nodes[k].op == SH_LIN_IN && buf_of(c, k) < 0) st = SHEAF_ERR_UNSUPPORTED;
  sh_buf all;
  sh_buf_init(&all, L->ctx);
  for (int p = 0; p <= max_phase && !st; p++)
    for (int r = p ? 0 : 1; r < 2 && !st; r++) { /* ragged p (p > 0), then dense p */
      bool any = false;
      for (int k = 0; k < a->n_nodes; k++)
        any = any || (c->live[k] && c->stage[k] == 2 * p - 1 + r && (r == 0 || read_elsewhere[k]));
      if (!any) continue;
      mat_stage *s = &M->st[M->n_stages++];
      s->ragged = r == 0;
      st = s->ragged ? emit_ragged(c, s, p) : emit_dense(c, s, p, read_elsewhere);
      if (!st) sh_buf_puts(&all, s->src);
    }
  if (!st && sh_buf_status(&all)) st = sh_fail(L->ctx, SHEAF_ERR_NOMEM, "out of memory");
  if (!st) {
    free(a->src);
    a->src = strdup(sh_buf_cstr(&all));
    a->src_len = a->src ? strlen(a->src) : 0;
    if (!a->src) st = sh_fail(L->ctx, SHEAF_ERR_NOMEM, "out of memory");
  }
  sh_buf_free(&all);
  free(c);
  return st;
}

sheaf_status sh_lin_mat_compile(sh_lin *L, sh_lin_arm *a) {
  if (!a->mat && a->has_mat) {
    sheaf_status st = sh_lin_mat_emit(L, a);
    if (st) return st;
  }
  for (int i = 0; i < a->mat->n_stages; i++) {
    mat_stage *s = &a->mat->st[i];
    if (s->k) continue;
    sheaf_status st = sheaf_kernel_compile(L->ctx, s->src, strlen(s->src), s->name, &s->k);
    if (st)
      return sh_fail(L->ctx, st, "linearized mode: the kernel %s does not compile: %s\n%s", s->name,
                     sheaf_ctx_last_error(L->ctx), s->src);
    if (!s->ragged)
      for (int p = 0; p < s->arm->n_params; p++) sheaf_kernel_set_weight_version(s->k, s->arm->n_inputs + p, 1);
  }
  return SHEAF_OK;
}

/* ------------------------------------------------------------ run */

sheaf_status sh_lin_mat_run(sh_lin *L, const sh_lin_grp *g) {
  sh_lin_arm *a = L->fns[g->fn].arms[g->arm];
  struct sh_lin_mat *M = a->mat;
  if (!M) return sh_fail(L->ctx, SHEAF_ERR_INVALID_ARG, "linear run: %s was not compiled", a->name);
  int32_t T = g->count, B = L->n_inst;
  int64_t tot = 0;
  for (int32_t s = 0; s < B; s++) tot += L->out_rows[s];
  if (g->fn != 0 || g->start != 0 || tot != T)
    return sh_fail(L->ctx, SHEAF_ERR_INVALID_ARG, "linear run: %s runs over main's tokens only", a->name);
  size_t need = 0, at[MAX_BUFS];
  for (int b = 0; b < M->n_bufs; b++) at[b] = need, need += ((size_t)T * (size_t)M->buf_w[b] + 15) & ~(size_t)15;
  if (need > L->mat_mem_cap) { /* L's (a part's own): the arm is shared by the parts */
    free(L->mat_mem);
    size_t cap = need > 2 * L->mat_mem_cap ? need : 2 * L->mat_mem_cap;
    if (!(L->mat_mem = aligned_alloc(64, cap * sizeof(float)))) {
      L->mat_mem_cap = 0;
      return sh_fail(L->ctx, SHEAF_ERR_NOMEM, "out of memory: the stages' buffers");
    }
    L->mat_mem_cap = cap;
  }
  float *buf[MAX_BUFS];
  for (int b = 0; b < M->n_bufs; b++) buf[b] = L->mat_mem + at[b];
  for (int b = 0; b < M->n_bufs; b++) { /* the executor's inputs: looked-up rows, scans' states */
    const sh_lin_node *n = &a->nodes[M->buf_node[b]];
    if (n->op != SH_LIN_IN) continue;
    for (int32_t r = 0; r < T; r++) {
      sheaf_status st = sh_lin_fill_input(L, a, g, n, r, buf[b] + (size_t)r * (size_t)M->buf_w[b]);
      if (st) return st;
    }
  }
  union { int32_t *p; void *v; } lens = {L->out_rows};
  for (int i = 0; i < M->n_stages; i++) {
    mat_stage *s = &M->st[i];
    sheaf_kernel_arg args[SH_LIN_MAX_NODES + 80];
    int64_t shapes[SH_LIN_MAX_NODES + 80][4];
    int k = 0;
    if (s->ragged) {
      shapes[k][0] = B;
      args[k] = (sheaf_kernel_arg){SHEAF_KERNEL_I32, lens.v, (size_t)B, 1, shapes[k]}, k++;
      for (int j = 0; j < s->n_in + s->n_out; j++, k++) {
        int bf = j < s->n_in ? s->in[j] : s->out[j - s->n_in];
        int H = j < s->n_in ? s->in_h[j] : 1;
        shapes[k][0] = B, shapes[k][1] = -1, shapes[k][2] = H > 1 ? H : M->buf_w[bf], shapes[k][3] = M->buf_w[bf] / H;
        args[k] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, buf[bf], (size_t)T * (size_t)M->buf_w[bf],
                                     j < s->n_in ? (H > 1 ? 4 : 3) : 0, j < s->n_in ? shapes[k] : NULL};
      }
    } else {
      const sh_lin_arm *d = s->arm;
      for (int j = 0; j < d->n_inputs; j++, k++) {
        int bf = s->in_buf[d->inputs[j]];
        shapes[k][0] = T, shapes[k][1] = M->buf_w[bf];
        args[k] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, buf[bf], (size_t)T * (size_t)M->buf_w[bf], 2, shapes[k]};
      }
      for (int j = 0; j < d->n_params; j++, k++) {
        const sh_lin_node *n = &d->nodes[d->params[j]];
        int rank;
        const int64_t *shape;
        union { const float *c; void *v; } u = {sheaf_model_param_values(L->model, L->bind->params[n->param], &rank,
                                                                         &shape)};
        shapes[k][0] = n->d[0], shapes[k][1] = n->d[1];
        args[k] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, u.v, (size_t)(n->d[0] * n->d[1]), n->rank, shapes[k]};
      }
      for (int j = 0; j < s->n_out; j++, k++) {
        shapes[k][0] = T, shapes[k][1] = M->buf_w[s->out[j]];
        args[k] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, buf[s->out[j]], (size_t)T * (size_t)M->buf_w[s->out[j]], 2,
                                     shapes[k]};
      }
    }
    sheaf_status st = sheaf_kernel_run(s->k, args, k);
    if (st) return st;
  }
  sh_lin_fn *f = &L->fns[g->fn];
  for (int j = 0; j < a->n_out; j++) {
    int bf = M->node_buf[a->out[j]];
    if (bf < 0) return sh_fail(L->ctx, SHEAF_ERR_INVALID_ARG, "linear run: %s result %d has no buffer", a->name, j);
    memcpy(L->state[g->fn][j], buf[bf], (size_t)T * (size_t)f->comp_width[j] * sizeof(float));
  }
  return SHEAF_OK;
}
