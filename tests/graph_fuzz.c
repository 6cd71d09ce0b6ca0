/*
 * graph_fuzz.c — the differential graph fuzzer (see graph_fuzz.h): program
 * generation with shape and magnitude bookkeeping, per-instance building on
 * a graph, and the comparison of every value against policy none.
 */
#include "graph_fuzz.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- choices */

static unsigned src_byte(gf_src *s) {
  if (!s->data) {
    uint64_t x = s->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s->rng = x;
    return (unsigned)(x >> 56);
  }
  return s->pos < s->size ? s->data[s->pos++] : 0;
}

static bool src_done(const gf_src *s) { return s->data && s->pos >= s->size; }

/* A choice in [0, n), n <= 65536. */
static unsigned pick(gf_src *s, unsigned n) {
  if (n <= 1) return 0;
  unsigned v = src_byte(s);
  if (n > 256) v = v << 8 | src_byte(s);
  return v % n;
}

/* --------------------------------------------------------------- shapes */

static const int k_widths[] = {1, 2, 3, 4, 5, 8, 16, 17, 33};
enum { NW = sizeof k_widths / sizeof k_widths[0] };
static const int k_hidden[] = {1, 3, 8, 16};
enum { NH = sizeof k_hidden / sizeof k_hidden[0] };
static const int k_rows[] = {1, 2, 3, 5};
static const float k_scales[] = {-1.5f, -1.0f, -0.5f, 0.25f, 0.5f, 2.0f, 3.0f};

enum {
  GF_MAX_STEPS = 64,
  GF_MAX_VALS = 160,
  GF_MAX_IN = 20,
  GF_MAX_INST = 6,
  GF_MAX_COLS = 80,
  GF_TABLE_ROWS = 5,
};
#define GF_MAG_CAP 16.0f /* no value larger than this in magnitude */
/* No value whose configurations may differ by more than this (err, below):
 * a step that would make one (a cancelling sum, then scaled) is not taken,
 * so any difference beyond the 1e-5 check is a bug, never rounding. */
#define GF_ERR_CAP 2e-6f
#define GF_EPS 6e-8f /* half an ulp at 1 */

static int width_index(int c) {
  for (int i = 0; i < NW; i++)
    if (k_widths[i] == c) return i;
  return -1;
}

/* ----------------------------------------------------------------- ops */

typedef enum gf_op {
  GF_INPUT, GF_ZEROS, GF_PARAM, GF_LOOKUP, GF_AFFINE, GF_MATMUL, GF_ADD, GF_SUB, GF_MUL,
  GF_DIV, GF_SUM_N, GF_SCALE, GF_TANH, GF_SIGMOID, GF_RELU, GF_GELU, GF_EXP, GF_LN,
  GF_CONCAT, GF_SLICE, GF_RESHAPE, GF_SUM, GF_MEAN, GF_MAX, GF_SOFTMAX, GF_LOG_SOFTMAX,
  GF_PICK, GF_LSTM, GF_READ, GF_PHASE, GF_SQRT, GF_RSQRT, GF_ABS, GF_SOFTPLUS, GF_ERF,
  GF_SILU, GF_POW, GF_MINIMUM, GF_MAXIMUM, GF_STACK, GF_TRANSPOSE, GF_LAYER_NORM, GF_ROW, GF_GT, GF_GE,
  GF_EQ, GF_NE, GF_WHERE, GF_NOPS
} gf_op;

static const char *const k_op_names[GF_NOPS] = {
    "input", "zeros", "parameter", "lookup", "affine", "matmul", "add", "sub", "mul", "div",
    "sum_n", "scale", "tanh", "sigmoid", "relu", "gelu", "exp", "ln", "concat", "slice",
    "reshape", "sum", "mean", "max", "softmax", "log_softmax", "pick", "lstm_cell", "value",
    "phase", "sqrt", "rsqrt", "abs", "softplus", "erf", "silu", "pow", "minimum", "maximum", "stack", "transpose", "layer_norm", "row", "gt", "ge", "eq", "ne", "where"};

static bool exact_op(int op) {
  switch (op) {
  case GF_INPUT: case GF_ZEROS: case GF_PARAM: case GF_LOOKUP: case GF_ADD: case GF_SUB: case GF_MUL:
  case GF_DIV: case GF_SCALE: case GF_RELU: case GF_ABS: case GF_MINIMUM: case GF_MAXIMUM: case GF_CONCAT:
  case GF_SLICE: case GF_RESHAPE: case GF_STACK: case GF_TRANSPOSE: case GF_ROW: case GF_PICK:
  case GF_GT: case GF_GE: case GF_EQ: case GF_NE: case GF_WHERE:
    return true;
  default:
    return false;
  }
}

/* A value's shape and bounds: |v| <= mag, and v >= lo when lo > 0; exact:
 * computed bit for bit alike by every configuration (data, parameters,
 * views, and IEEE arithmetic of exact values: no GEMM, no vector math), so
 * a comparison of it cannot flip on a last-bit difference. */
typedef struct gf_val {
  uint8_t rank;
  int16_t rows, cols;
  float mag, lo;
  bool exact;
  float err; /* bound on how far two configurations' values may lie apart: rounding in a
                different order (a batched GEMM, another vector tanh) propagated */
} gf_val;

static bool exact_op(int op);

typedef struct gf_step {
  uint8_t op, n_in, mod, rem; /* runs for instances i with i % mod == rem (mod 0: all) */
  uint16_t in[GF_MAX_IN];
  uint16_t out, alt;          /* the value slot it writes (lstm: out, out + 1); when
                                 skipped, the slot(s) take value alt */
  int16_t a, b, c, d;         /* integer arguments (see exec_step) */
  float f;
} gf_step;

typedef struct gf_prog {
  gf_step steps[GF_MAX_STEPS];
  gf_val vals[GF_MAX_VALS];
  unsigned n_steps, n_vals, n_inst;
  bool step_major;  /* build step by step across instances (else instance by instance) */
  bool read_back;   /* compare values last to first */
  uint64_t seed;    /* input data */
} gf_prog;

/* ---------------------------------------------------------------- world */

typedef struct gf_config {
  sheaf_policy policy;
  int threads;
} gf_config;

/* The reference first. */
static const gf_config k_configs[] = {
    {SHEAF_POLICY_NONE, 1},   {SHEAF_POLICY_SHEAF, 1}, {SHEAF_POLICY_SHEAF, 2},
    {SHEAF_POLICY_DEPTH, 1},  {SHEAF_POLICY_DEPTH, 2}, {SHEAF_POLICY_AGENDA, 1},
    {SHEAF_POLICY_AGENDA, 2}, {SHEAF_POLICY_NONE, 2},
};
enum { NCONF = sizeof k_configs / sizeof k_configs[0] };

struct gf_world {
  sheaf_ctx *ctx;
  sheaf_model *m;
  sheaf_param W[NW][NW], bias[NW], table[NW], lstm_W[NW][NH], lstm_b[NH];
  float W_mag[NW][NW], bias_mag[NW], table_mag[NW], lstm_mag[NW][NH];
  sheaf_graph *g[NCONF];
  sheaf_expr v[NCONF][GF_MAX_INST][GF_MAX_VALS];
  gf_prog prog;
};

static float max_abs(sheaf_model *m, sheaf_param p) {
  int64_t n = 1;
  int rank;
  const int64_t *shape;
  const float *d = sheaf_model_param_data(m, p, &rank, &shape);
  for (int i = 0; i < rank; i++) n *= shape[i];
  float mx = 0;
  for (int64_t i = 0; d && i < n; i++) mx = fabsf(d[i]) > mx ? fabsf(d[i]) : mx;
  return mx;
}

sheaf_status gf_world_create(sheaf_ctx *ctx, gf_world **out) {
  *out = NULL;
  gf_world *w = calloc(1, sizeof *w);
  if (!w) return SHEAF_ERR_NOMEM;
  w->ctx = ctx;
  sheaf_status st = sheaf_model_create(ctx, &w->m);
  char name[64];
  for (int i = 0; !st && i < NW; i++) {
    for (int j = 0; !st && j < NW; j++) {
      snprintf(name, sizeof name, "W%dx%d", k_widths[i], k_widths[j]);
      st = sheaf_model_param(w->m, name, 2, (int64_t[]){k_widths[i], k_widths[j]},
                             SHEAF_INIT_GLOROT, &w->W[i][j]);
      if (!st) w->W_mag[i][j] = max_abs(w->m, w->W[i][j]);
    }
    for (int h = 0; !st && h < NH; h++) {
      snprintf(name, sizeof name, "lstm%dx%d", k_widths[i], k_hidden[h]);
      st = sheaf_model_param(w->m, name, 2, (int64_t[]){k_widths[i], 4 * k_hidden[h]},
                             SHEAF_INIT_GLOROT, &w->lstm_W[i][h]);
      if (!st) w->lstm_mag[i][h] = max_abs(w->m, w->lstm_W[i][h]);
    }
    snprintf(name, sizeof name, "b%d", k_widths[i]);
    if (!st) st = sheaf_model_param(w->m, name, 1, (int64_t[]){k_widths[i]}, SHEAF_INIT_GLOROT, &w->bias[i]);
    if (!st) w->bias_mag[i] = max_abs(w->m, w->bias[i]);
    snprintf(name, sizeof name, "emb%d", k_widths[i]);
    if (!st)
      st = sheaf_model_param(w->m, name, 2, (int64_t[]){GF_TABLE_ROWS, k_widths[i]}, SHEAF_INIT_GLOROT,
                             &w->table[i]);
    if (!st) w->table_mag[i] = max_abs(w->m, w->table[i]);
  }
  for (int h = 0; !st && h < NH; h++) {
    snprintf(name, sizeof name, "lstm_b%d", k_hidden[h]);
    st = sheaf_model_param(w->m, name, 1, (int64_t[]){4 * k_hidden[h]}, SHEAF_INIT_GLOROT, &w->lstm_b[h]);
  }
  for (int c = 0; !st && c < NCONF; c++) {
    sheaf_graph_opts o = {k_configs[c].policy, k_configs[c].threads, NULL};
    st = sheaf_graph_create(w->m, &o, &w->g[c]);
  }
  if (st) {
    gf_world_free(w);
    return st;
  }
  *out = w;
  return SHEAF_OK;
}

void gf_world_free(gf_world *w) {
  if (!w) return;
  for (int c = 0; c < NCONF; c++) sheaf_graph_free(w->g[c]);
  sheaf_model_free(w->m);
  free(w);
}

/* ----------------------------------------------------------- generation */

typedef struct gen {
  gf_prog *p;
  gf_src *src;
  gf_world *w;
} gen;

typedef struct want {
  int rank, rows, cols;   /* 0: any */
  bool widths;            /* cols must be one of k_widths */
  float min_lo, max_mag;  /* 0: no bound */
  bool exact;             /* an exact value */
} want;

static bool matches(const gf_val *v, const want *q) {
  return (!q->rank || v->rank == q->rank) && (!q->rows || v->rows == q->rows) &&
         (!q->cols || v->cols == q->cols) && (!q->widths || width_index(v->cols) >= 0) &&
         (q->min_lo <= 0 || v->lo >= q->min_lo) && (q->max_mag <= 0 || v->mag <= q->max_mag) &&
         (!q->exact || v->exact);
}

/* A value matching q, most often a recent one; -1 if none. */
static int find(gen *G, const want *q) {
  int cand[GF_MAX_VALS], n = 0;
  for (unsigned i = 0; i < G->p->n_vals; i++)
    if (matches(&G->p->vals[i], q)) cand[n++] = (int)i;
  if (!n) return -1;
  unsigned r = pick(G->src, 4);
  if (r == 0) return cand[pick(G->src, (unsigned)n)];
  int back = (int)pick(G->src, r == 1 ? 8 : 3);
  return cand[n - 1 - (back < n ? back : n - 1)];
}

static gf_step *new_step(gen *G, int op) {
  gf_step *s = &G->p->steps[G->p->n_steps++];
  memset(s, 0, sizeof *s);
  s->op = (uint8_t)op;
  return s;
}

static int new_val(gen *G, gf_step *s, int rank, int rows, int cols, float mag, float lo) {
  unsigned k = G->p->n_vals++;
  bool exact = exact_op(s->op);
  for (unsigned i = 0; i < s->n_in; i++) exact = exact && G->p->vals[s->in[i]].exact;
  G->p->vals[k] = (gf_val){(uint8_t)rank, (int16_t)(rank == 2 ? rows : 1), (int16_t)cols, mag, lo, exact, 0};
  s->out = (uint16_t)k;
  return (int)k;
}

static bool room(const gen *G, unsigned steps, unsigned vals) {
  return G->p->n_steps + steps <= GF_MAX_STEPS && G->p->n_vals + vals <= GF_MAX_VALS;
}

static int make_input(gen *G, int rank, int rows, int cols, bool positive) {
  gf_step *s = new_step(G, GF_INPUT);
  s->a = positive;
  return new_val(G, s, rank, rows, cols, positive ? 1.5f : 1.0f, positive ? 0.5f : 0.0f);
}

/* A value matching q (which must fix rank and cols; rows for rank 2), or a
 * new input of that shape. */
static int find_or_make(gen *G, const want *q) {
  int v = pick(G->src, 5) ? find(G, q) : -1;
  if (v >= 0) return v;
  return make_input(G, q->rank, q->rank == 2 ? q->rows : 1, q->cols, q->min_lo > 0);
}

/* v itself when |v| <= cap, else tanh(v) or a scaled v. */
static int bounded(gen *G, int v, float cap) {
  const gf_val x = G->p->vals[v];
  if (x.mag <= cap) return v;
  bool sc = pick(G->src, 2);
  gf_step *s = new_step(G, sc ? GF_SCALE : GF_TANH);
  s->n_in = 1;
  s->in[0] = (uint16_t)v;
  s->f = sc ? cap / x.mag : 0.0f;
  return sc ? new_val(G, s, x.rank, x.rows, x.cols, cap, x.lo * s->f)
            : new_val(G, s, x.rank, x.rows, x.cols, fminf(x.mag, 1.0f), x.lo > 0 ? tanhf(x.lo) : 0);
}

/* A step reading values xs[0..n) side by side (concat, stack): their
 * largest magnitude and smallest lower bound. */
static gf_step *gather_step(gen *G, int op, const int *xs, int n, float *mag, float *lo) {
  gf_step *s = new_step(G, op);
  s->n_in = (uint8_t)n;
  *mag = 0, *lo = INFINITY;
  for (int i = 0; i < n; i++) {
    s->in[i] = (uint16_t)xs[i];
    *mag = fmaxf(*mag, G->p->vals[xs[i]].mag);
    *lo = fminf(*lo, G->p->vals[xs[i]].lo);
  }
  return s;
}

static want shape_of(const gf_val *v) { return (want){v->rank, v->rank == 2 ? v->rows : 0, v->cols, false, 0, 0, false}; }

static int any_value(gen *G) {
  want q = {0};
  int v = find(G, &q);
  return v >= 0 ? v : make_input(G, 1, 1, k_widths[pick(G->src, NW)], false);
}

/* The err of step s's output (see gf_val): the inputs' errors through the
 * op's slope, plus the op's own rounding (a few ulps of its largest terms). */
static float step_err(const gf_world *w, const gf_prog *p, const gf_step *s, const gf_val *o) {
  const gf_val *x = s->n_in ? &p->vals[s->in[0]] : NULL, *y = s->n_in > 1 ? &p->vals[s->in[1]] : NULL;
  float e = 0, m = o->mag, r = 4 * GF_EPS * m; /* own rounding of a vector-math op */
  for (unsigned i = 0; i < s->n_in; i++) e = fmaxf(e, p->vals[s->in[i]].err);
  switch ((gf_op)s->op) {
  case GF_INPUT: case GF_ZEROS: case GF_PARAM: case GF_LOOKUP: return 0;
  case GF_CONCAT: case GF_SLICE: case GF_RESHAPE: case GF_STACK: case GF_TRANSPOSE: case GF_ROW:
  case GF_PICK: case GF_MINIMUM: case GF_MAXIMUM: case GF_WHERE: case GF_RELU: case GF_ABS: case GF_MAX:
    return e;
  case GF_GT: case GF_GE: case GF_EQ: case GF_NE: return 0; /* of exact values */
  case GF_ADD: case GF_SUB: return x->err + y->err + GF_EPS * m;
  case GF_MUL: return x->err * y->mag + y->err * x->mag + GF_EPS * m;
  case GF_DIV: return (x->err + m * y->err) / y->lo + GF_EPS * m;
  case GF_POW: {
    float l = fmaxf(fabsf(logf(x->lo)), fabsf(logf(x->mag)));
    return x->err * y->mag * m / x->lo + y->err * l * m + r;
  }
  case GF_SUM_N: {
    float t = 0;
    for (unsigned i = 0; i < s->n_in; i++) t += p->vals[s->in[i]].err;
    return t + (float)s->n_in * GF_EPS * m;
  }
  case GF_SCALE: return fabsf(s->f) * e + GF_EPS * m;
  case GF_TANH: case GF_SOFTPLUS: return e + r;
  case GF_SIGMOID: return 0.25f * e + r;
  case GF_GELU: case GF_ERF: case GF_SILU: return 1.13f * e + r;
  case GF_EXP: return m * e + r;
  case GF_LN: return e / x->lo + r;
  case GF_SQRT: return 0.5f * e / sqrtf(x->lo) + r;
  case GF_RSQRT: return 0.5f * e / (x->lo * sqrtf(x->lo)) + r;
  case GF_SUM: return (float)x->cols * (e + 3 * GF_EPS * x->mag);
  case GF_MEAN: return e + 3 * GF_EPS * x->mag;
  case GF_SOFTMAX: return 2 * e + r;
  case GF_LOG_SOFTMAX: return 2 * e + 4 * GF_EPS * x->mag + r;
  case GF_LAYER_NORM: {
    const gf_val *g = &p->vals[s->in[1]];
    return 2 * (x->err + GF_EPS * x->mag * (float)x->cols) / sqrtf(s->f) * g->mag + e + r;
  }
  case GF_AFFINE: case GF_MATMUL: case GF_LSTM: {
    /* a dot product in another order: a few ulps of the sum of |terms| */
    float terms = 0, prop = 0;
    for (unsigned i = 0; i < s->n_in && (s->op != GF_LSTM || i == 0); i++) {
      const gf_val *v = &p->vals[s->in[i]];
      int wi = width_index(v->cols);
      float wm = s->op == GF_LSTM ? w->lstm_mag[s->a][s->b] : wi >= 0 ? w->W_mag[wi][s->a] : 1.25f;
      terms += (float)v->cols * v->mag * wm;
      prop += (float)v->cols * v->err * wm;
    }
    if (s->op == GF_MATMUL) terms = (float)x->cols * x->mag * y->mag, prop = (float)x->cols * (x->err * y->mag + y->err * x->mag);
    float d = prop + 2 * GF_EPS * terms;
    if (s->op == GF_LSTM) return 2 * d + (s->n_in > 1 ? y->err : 0) + r;
    return d + GF_EPS * m;
  }
  default: return e;
  }
}

/* Generates one step (and the inputs it needs); false when out of room. */
static bool gen_step(gen *G) {
  if (!room(G, 8, 12)) return false;
  gf_prog *p = G->p;
  static const uint8_t weights[GF_NOPS] = {
      [GF_INPUT] = 4, [GF_ZEROS] = 1, [GF_PARAM] = 1, [GF_LOOKUP] = 2, [GF_AFFINE] = 6,
      [GF_MATMUL] = 2, [GF_ADD] = 5, [GF_SUB] = 3, [GF_MUL] = 5, [GF_DIV] = 3, [GF_SUM_N] = 3,
      [GF_SCALE] = 2, [GF_TANH] = 4, [GF_SIGMOID] = 3, [GF_RELU] = 2, [GF_GELU] = 2, [GF_EXP] = 3,
      [GF_LN] = 2, [GF_CONCAT] = 3, [GF_SLICE] = 3, [GF_RESHAPE] = 1, [GF_SUM] = 2, [GF_MEAN] = 1,
      [GF_MAX] = 1, [GF_SOFTMAX] = 2, [GF_LOG_SOFTMAX] = 1, [GF_PICK] = 1, [GF_LSTM] = 3,
      [GF_READ] = 1, [GF_PHASE] = 1, [GF_SQRT] = 1, [GF_RSQRT] = 1, [GF_ABS] = 1,
      [GF_SOFTPLUS] = 1, [GF_ERF] = 1, [GF_SILU] = 1, [GF_POW] = 1, [GF_MINIMUM] = 2, [GF_MAXIMUM] = 2,
      [GF_STACK] = 2, [GF_TRANSPOSE] = 1, [GF_LAYER_NORM] = 2, [GF_ROW] = 2,
      [GF_GT] = 1, [GF_GE] = 1, [GF_EQ] = 1, [GF_NE] = 1, [GF_WHERE] = 2};
  unsigned total = 0;
  for (int i = 0; i < GF_NOPS; i++) total += weights[i];
  unsigned r = pick(G->src, total);
  int op = 0;
  while (r >= weights[op]) r -= weights[op++];

  unsigned first_step = p->n_steps, first_val = p->n_vals;
  gf_step *s = NULL;
  int out = -1;
  switch (op) {
  case GF_INPUT: {
    bool two = pick(G->src, 4) == 0;
    out = make_input(G, two ? 2 : 1, k_rows[pick(G->src, 4)], pick(G->src, 6) ? k_widths[pick(G->src, NW)] : 1,
                     pick(G->src, 4) == 0);
    s = &p->steps[p->n_steps - 1];
    break;
  }
  case GF_ZEROS: {
    s = new_step(G, GF_ZEROS);
    bool two = pick(G->src, 3) == 0;
    out = new_val(G, s, two ? 2 : 1, k_rows[pick(G->src, 4)], k_widths[pick(G->src, NW)], 0, 0);
    break;
  }
  case GF_PARAM: {
    s = new_step(G, GF_PARAM);
    s->a = (int16_t)pick(G->src, NW);
    s->b = (int16_t)pick(G->src, NW + 1); /* NW: the bias of width a */
    if (s->b == NW)
      out = new_val(G, s, 1, 1, k_widths[s->a], G->w->bias_mag[s->a], 0);
    else
      out = new_val(G, s, 2, k_widths[s->a], k_widths[s->b], G->w->W_mag[s->a][s->b], 0);
    break;
  }
  case GF_LOOKUP: {
    s = new_step(G, GF_LOOKUP);
    s->a = (int16_t)pick(G->src, NW);
    s->b = (int16_t)pick(G->src, GF_TABLE_ROWS);
    out = new_val(G, s, 1, 1, k_widths[s->a], G->w->table_mag[s->a], 0);
    break;
  }
  case GF_AFFINE: {
    want q = {0, 0, 0, true, 0, 0, false};
    int x0 = find(G, &q);
    if (x0 < 0) x0 = make_input(G, 1, 1, k_widths[pick(G->src, NW)], false);
    int nx = pick(G->src, 4) == 0 ? 2 + (int)pick(G->src, 3) : 1;
    int xs[4] = {x0};
    for (int i = 1; i < nx; i++) {
      const gf_val *v0 = &p->vals[x0];
      want qi = {v0->rank, v0->rank == 2 ? v0->rows : 0, 0, true, 0, 0, false};
      int v = pick(G->src, 3) ? find(G, &qi) : -1;
      xs[i] = v >= 0 ? v : make_input(G, v0->rank, v0->rows, k_widths[pick(G->src, NW)], false);
    }
    int o = (int)pick(G->src, NW);
    float mag = 0;
    for (int i = 0; i < nx; i++) {
      float in = (float)p->vals[xs[i]].cols, wm = G->w->W_mag[width_index(p->vals[xs[i]].cols)][o];
      xs[i] = bounded(G, xs[i], GF_MAG_CAP / (4 * in * wm + 1e-3f));
      mag += in * p->vals[xs[i]].mag * wm;
    }
    if (!room(G, 1, 1)) return false;
    s = new_step(G, GF_AFFINE);
    s->n_in = (uint8_t)nx;
    for (int i = 0; i < nx; i++) s->in[i] = (uint16_t)xs[i];
    s->a = (int16_t)o;
    s->b = (int16_t)pick(G->src, 2); /* with a bias */
    if (s->b) mag += G->w->bias_mag[o];
    const gf_val *v0 = &p->vals[xs[0]];
    out = new_val(G, s, v0->rank, v0->rows, k_widths[o], mag, 0);
    break;
  }
  case GF_MATMUL: {
    int a = bounded(G, any_value(G), 2.0f);
    gf_val av = p->vals[a];
    int form = (int)pick(G->src, 3); /* 0: [.., k]·[k]; else [.., k]·[k, c] */
    int b;
    if (form == 0) {
      want q = {1, 0, av.cols, false, 0, 2.0f, false};
      b = find_or_make(G, &q);
    } else {
      want q = {2, av.cols, 0, false, 0, 2.0f, false};
      b = pick(G->src, 2) ? find(G, &q) : -1;
      if (b < 0) b = make_input(G, 2, av.cols, k_widths[pick(G->src, NW)], false);
    }
    gf_val bv = p->vals[b];
    s = new_step(G, GF_MATMUL);
    s->n_in = 2;
    s->in[0] = (uint16_t)a;
    s->in[1] = (uint16_t)b;
    float mag = (float)av.cols * av.mag * bv.mag;
    if (form == 0)
      out = new_val(G, s, 1, 1, av.rank == 2 ? av.rows : 1, mag, 0);
    else
      out = new_val(G, s, av.rank, av.rows, bv.cols, mag, 0);
    break;
  }
  case GF_ADD: case GF_SUB: case GF_MUL: case GF_DIV: case GF_POW: case GF_MINIMUM: case GF_MAXIMUM: {
    float cap = op == GF_MUL || op == GF_POW ? 4.0f : GF_MAG_CAP / 2;
    int a;
    if (op == GF_POW) { /* a positive base */
      want qp = {0, 0, 0, false, 0.25f, cap, false};
      a = find(G, &qp);
      if (a < 0) a = make_input(G, 1, 1, k_widths[pick(G->src, NW)], true);
    } else {
      a = bounded(G, any_value(G), cap);
    }
    gf_val av = p->vals[a];
    unsigned how = pick(G->src, 8); /* 0: b = a; 1, 2: a scalar; else the same shape */
    int b;
    want q = shape_of(&av);
    q.max_mag = cap;
    if (op == GF_DIV) q.min_lo = 0.25f;
    if (op == GF_POW) q.max_mag = cap = 2.0f; /* the exponent */
    if (how == 0 && (op != GF_DIV || av.lo >= 0.25f) && av.mag <= cap) {
      b = a;
    } else if (how <= 2) {
      want qs = {1, 0, 1, false, q.min_lo, cap, false};
      b = find_or_make(G, &qs);
    } else if (how == 3 && av.rank == 2 && av.cols > 1) { /* a row repeated over a's rows */
      want qr = {1, 0, av.cols, false, q.min_lo, cap, false};
      b = find_or_make(G, &qr);
    } else {
      b = find_or_make(G, &q);
    }
    b = bounded(G, b, cap);
    if (!room(G, 1, 1)) return false;
    s = new_step(G, op);
    s->n_in = 2;
    bool swap = op != GF_DIV && op != GF_POW && p->vals[b].rows == 1 && pick(G->src, 2);
    s->in[0] = (uint16_t)(swap ? b : a);
    s->in[1] = (uint16_t)(swap ? a : b);
    gf_val x = p->vals[s->in[0]], y = p->vals[s->in[1]];
    const gf_val *big = x.rows * x.cols >= y.rows * y.cols ? &x : &y;
    if (x.rows * x.cols == y.rows * y.cols) big = &x;
    if (x.cols > 1 && x.cols == y.cols && x.rank != y.rank && x.rows == 1 && y.rows == 1)
      big = x.rank == 2 ? &x : &y; /* [c] against [1, c] */
    float mag, lo = 0;
    switch (op) {
    case GF_ADD: mag = x.mag + y.mag; lo = x.lo > 0 && y.lo > 0 ? x.lo + y.lo : 0; break;
    case GF_SUB: mag = x.mag + y.mag; break;
    case GF_MUL: mag = x.mag * y.mag; lo = x.lo * y.lo; break;
    case GF_DIV: mag = x.mag / y.lo; lo = x.lo > 0 ? x.lo / y.mag : 0; break;
    case GF_POW: {
      float hi = fmaxf(x.mag, 1 / x.lo), low = fminf(x.lo, 1 / x.mag);
      mag = powf(hi, y.mag), lo = powf(low, y.mag);
      break;
    }
    case GF_MINIMUM: mag = fmaxf(x.mag, y.mag); lo = fminf(x.lo, y.lo); break;
    default: mag = fmaxf(x.mag, y.mag); lo = fmaxf(x.lo, y.lo); break;
    }
    out = new_val(G, s, big->rank, big->rows, big->cols, mag, lo);
    break;
  }
  case GF_SUM_N: {
    int n = pick(G->src, 6) == 0 ? 10 + (int)pick(G->src, GF_MAX_IN - 9) : 1 + (int)pick(G->src, 6);
    float cap = GF_MAG_CAP / (float)n;
    int a = bounded(G, any_value(G), cap);
    gf_val av = p->vals[a];
    int xs[GF_MAX_IN] = {a};
    want q = shape_of(&av);
    q.max_mag = cap;
    for (int i = 1; i < n; i++) {
      if (!room(G, 3, 3)) { n = i; break; }
      xs[i] = pick(G->src, 4) == 0 ? xs[pick(G->src, (unsigned)i)] : find_or_make(G, &q);
    }
    s = new_step(G, GF_SUM_N);
    s->n_in = (uint8_t)n;
    float mag = 0, lo = 0;
    bool pos = true;
    for (int i = 0; i < n; i++) {
      s->in[i] = (uint16_t)xs[i];
      mag += p->vals[xs[i]].mag;
      lo += p->vals[xs[i]].lo;
      pos = pos && p->vals[xs[i]].lo > 0;
    }
    out = new_val(G, s, av.rank, av.rows, av.cols, mag, pos ? lo : 0);
    break;
  }
  case GF_SCALE: case GF_TANH: case GF_SIGMOID: case GF_RELU: case GF_GELU: case GF_EXP:
  case GF_ABS: case GF_SOFTPLUS: case GF_ERF: case GF_SILU: {
    float f = k_scales[pick(G->src, sizeof k_scales / sizeof k_scales[0])];
    float cap = op == GF_EXP ? 2.5f : op == GF_SCALE ? GF_MAG_CAP / fabsf(f) : GF_MAG_CAP;
    int a = bounded(G, any_value(G), cap);
    gf_val x = p->vals[a];
    s = new_step(G, op);
    s->n_in = 1;
    s->in[0] = (uint16_t)a;
    s->f = f;
    float mag = x.mag, lo = 0;
    switch (op) {
    case GF_SCALE: mag = fabsf(f) * x.mag, lo = f > 0 ? f * x.lo : 0; break;
    case GF_TANH: mag = fminf(x.mag, 1.0f), lo = x.lo > 0 ? tanhf(x.lo) : 0; break;
    case GF_SIGMOID: mag = 1.0f, lo = 1.0f / (1.0f + expf(x.mag)); break;
    case GF_RELU: lo = x.lo; break;
    case GF_GELU: lo = x.lo / 2; break;
    case GF_ABS: lo = x.lo; break;
    case GF_SOFTPLUS: mag = x.mag + 0.7f, lo = log1pf(expf(-x.mag)); break;
    case GF_ERF: mag = fminf(x.mag * 1.2f, 1.0f), lo = x.lo > 0 ? erff(x.lo) : 0; break;
    case GF_SILU: lo = x.lo > 0 ? x.lo / (1.0f + expf(-x.lo)) : 0; break; /* |silu x| <= |x| */
    default: mag = expf(x.mag), lo = expf(-x.mag); break;
    }
    out = new_val(G, s, x.rank, x.rows, x.cols, mag, lo);
    break;
  }
  case GF_LN: case GF_SQRT: case GF_RSQRT: { /* of values bounded away from 0 */
    want q = {0, 0, 0, false, 0.25f, GF_MAG_CAP, false};
    int a = find(G, &q);
    if (a < 0) a = make_input(G, 1, 1, k_widths[pick(G->src, NW)], true);
    gf_val x = p->vals[a];
    s = new_step(G, op);
    s->n_in = 1;
    s->in[0] = (uint16_t)a;
    if (op == GF_LN)
      out = new_val(G, s, x.rank, x.rows, x.cols, fmaxf(fabsf(logf(x.lo)), fabsf(logf(x.mag))),
                    x.lo > 1.25f ? logf(x.lo) : 0);
    else if (op == GF_SQRT)
      out = new_val(G, s, x.rank, x.rows, x.cols, sqrtf(x.mag), sqrtf(x.lo));
    else
      out = new_val(G, s, x.rank, x.rows, x.cols, 1 / sqrtf(x.lo), 1 / sqrtf(x.mag));
    break;
  }
  case GF_CONCAT: {
    int a = any_value(G);
    gf_val av = p->vals[a];
    int n = 2 + (int)pick(G->src, 3), xs[4] = {a}, cols = av.cols;
    want q = {av.rank, av.rank == 2 ? av.rows : 0, 0, false, 0, 0, false};
    for (int i = 1; i < n; i++) {
      int v = pick(G->src, 4) ? find(G, &q) : -1;
      if (v < 0) v = make_input(G, av.rank, av.rows, k_widths[pick(G->src, NW)], false);
      if (cols + p->vals[v].cols > GF_MAX_COLS) { n = i; break; }
      xs[i] = v;
      cols += p->vals[v].cols;
    }
    float mag, lo;
    s = gather_step(G, GF_CONCAT, xs, n, &mag, &lo);
    out = new_val(G, s, av.rank, av.rows, cols, mag, lo);
    break;
  }
  case GF_SLICE: {
    int a = any_value(G);
    gf_val x = p->vals[a];
    s = new_step(G, GF_SLICE);
    s->n_in = 1;
    s->in[0] = (uint16_t)a;
    s->a = (int16_t)pick(G->src, (unsigned)x.cols);
    s->b = (int16_t)(s->a + 1 + (int)pick(G->src, (unsigned)(x.cols - s->a)));
    out = new_val(G, s, x.rank, x.rows, s->b - s->a, x.mag, x.lo);
    break;
  }
  case GF_RESHAPE: {
    int a = any_value(G);
    gf_val x = p->vals[a];
    int n = x.rows * x.cols, divs[16], nd = 0;
    if (n > 1024) return true; /* shapes stay small (and within int16) */
    for (int d = 1; d <= n && nd < 16; d++)
      if (n % d == 0) divs[nd++] = d;
    s = new_step(G, GF_RESHAPE);
    s->n_in = 1;
    s->in[0] = (uint16_t)a;
    int rank = pick(G->src, 2) ? 2 : 1, rows = rank == 2 ? divs[pick(G->src, (unsigned)nd)] : 1;
    s->a = (int16_t)rank;
    s->b = (int16_t)rows;
    out = new_val(G, s, rank, rows, n / rows, x.mag, x.lo);
    break;
  }
  case GF_SUM: case GF_MEAN: case GF_MAX: case GF_SOFTMAX: case GF_LOG_SOFTMAX: case GF_PICK: {
    int a = any_value(G);
    gf_val x = p->vals[a];
    if (op == GF_SUM) x = p->vals[a = bounded(G, a, GF_MAG_CAP / (float)x.cols)];
    if (op == GF_SOFTMAX || op == GF_LOG_SOFTMAX) x = p->vals[a = bounded(G, a, 4.0f)];
    if (!room(G, 1, 1)) return false;
    s = new_step(G, op);
    s->n_in = 1;
    s->in[0] = (uint16_t)a;
    s->a = (int16_t)pick(G->src, (unsigned)x.cols); /* pick's index */
    int red_cols = x.rank == 2 ? x.rows : 1;
    switch (op) {
    case GF_SUM: out = new_val(G, s, 1, 1, red_cols, (float)x.cols * x.mag, (float)x.cols * x.lo); break;
    case GF_MEAN: case GF_MAX: case GF_PICK: out = new_val(G, s, 1, 1, red_cols, x.mag, x.lo); break;
    case GF_SOFTMAX:
      out = new_val(G, s, x.rank, x.rows, x.cols, 1.0f, expf(-2 * x.mag) / (float)x.cols);
      break;
    default: out = new_val(G, s, x.rank, x.rows, x.cols, 2 * x.mag + logf((float)x.cols), 0); break;
    }
    break;
  }
  case GF_LSTM: {
    want q = {0, 0, 0, true, 0, 0, false};
    int x = find(G, &q);
    if (x < 0) x = make_input(G, 1, 1, k_widths[pick(G->src, NW)], false);
    x = bounded(G, x, 4.0f);
    gf_val xv = p->vals[x];
    int h = (int)pick(G->src, NH), c = -1;
    if (pick(G->src, 3)) {
      want qc = {xv.rank, xv.rank == 2 ? xv.rows : 0, k_hidden[h], false, 0, 0, false};
      c = bounded(G, find_or_make(G, &qc), 4.0f);
    }
    if (!room(G, 1, 2)) return false;
    s = new_step(G, GF_LSTM);
    s->n_in = c >= 0 ? 2 : 1;
    s->in[0] = (uint16_t)x;
    s->in[1] = (uint16_t)(c >= 0 ? c : 0);
    s->a = (int16_t)width_index(xv.cols);
    s->b = (int16_t)h;
    out = new_val(G, s, xv.rank, xv.rows, k_hidden[h], 1.0f, 0);
    new_val(G, s, xv.rank, xv.rows, k_hidden[h], (c >= 0 ? p->vals[c].mag : 0) + 1.0f, 0);
    s->out = (uint16_t)out;
    break;
  }
  case GF_STACK: {
    want q1 = {0, 1, 0, false, 0, 0, false}; /* one-row values */
    int a = find(G, &q1);
    if (a < 0) a = make_input(G, 1, 1, k_widths[pick(G->src, NW)], false);
    gf_val av = p->vals[a];
    int n = 1 + (int)pick(G->src, 6), xs[6] = {a};
    want q = {0, 1, av.cols, false, 0, 0, false};
    for (int i = 1; i < n; i++) {
      int v = pick(G->src, 3) ? find(G, &q) : -1;
      xs[i] = v >= 0 ? v : make_input(G, 1, 1, av.cols, false);
    }
    float mag, lo;
    s = gather_step(G, GF_STACK, xs, n, &mag, &lo);
    out = new_val(G, s, 2, n, av.cols, mag, lo);
    break;
  }
  case GF_TRANSPOSE: case GF_ROW: {
    want q = {2, 0, 0, false, 0, 0, false};
    int a = find(G, &q);
    if (a < 0) a = make_input(G, 2, k_rows[pick(G->src, 4)], k_widths[pick(G->src, NW)], false);
    gf_val x = p->vals[a];
    s = new_step(G, op);
    s->n_in = 1;
    s->in[0] = (uint16_t)a;
    s->a = (int16_t)pick(G->src, (unsigned)x.rows);
    out = op == GF_ROW ? new_val(G, s, 1, 1, x.cols, x.mag, x.lo)
                       : new_val(G, s, 2, x.cols, x.rows, x.mag, x.lo);
    break;
  }
  case GF_LAYER_NORM: {
    int a = any_value(G);
    gf_val x = p->vals[a];
    want q = {1, 0, x.cols, false, 0, 2.0f, false}; /* gamma, beta: vectors (or bias parameters) */
    int ga = find_or_make(G, &q), be = find_or_make(G, &q);
    if (!room(G, 1, 1)) return false;
    s = new_step(G, GF_LAYER_NORM);
    s->n_in = 3;
    s->in[0] = (uint16_t)a;
    s->in[1] = (uint16_t)ga;
    s->in[2] = (uint16_t)be;
    s->f = pick(G->src, 2) ? 0.1f : 1.0f; /* eps: well conditioned on nearly constant rows */
    out = new_val(G, s, x.rank, x.rows, x.cols,
                  sqrtf((float)x.cols) * p->vals[ga].mag + p->vals[be].mag, 0);
    break;
  }
  case GF_GT: case GF_GE: case GF_EQ: case GF_NE: { /* of exact values (see gf_val) */
    want qa = {0, 0, 0, false, 0, 0, true};
    int a = find(G, &qa);
    if (a < 0) a = make_input(G, 1, 1, k_widths[pick(G->src, NW)], false);
    gf_val av = p->vals[a];
    want qb = shape_of(&av);
    qb.exact = true;
    int b = pick(G->src, 4) == 0 ? a : pick(G->src, 5) == 0 ? make_input(G, 1, 1, 1, false) : find_or_make(G, &qb);
    s = new_step(G, op);
    s->n_in = 2;
    bool swap = pick(G->src, 2);
    s->in[0] = (uint16_t)(swap ? b : a);
    s->in[1] = (uint16_t)(swap ? a : b);
    const gf_val *x = &p->vals[s->in[0]], *y = &p->vals[s->in[1]];
    const gf_val *big = x->rows * x->cols >= y->rows * y->cols ? x : y;
    out = new_val(G, s, big->rank, big->rows, big->cols, 1.0f, 0);
    break;
  }
  case GF_WHERE: {
    want qc = {0, 0, 0, false, 0, 0, true};
    int c = find(G, &qc);
    if (c < 0) c = make_input(G, 1, 1, k_widths[pick(G->src, NW)], false);
    gf_val cv = p->vals[c];
    want q = shape_of(&cv);
    q.max_mag = GF_MAG_CAP;
    int a = find_or_make(G, &q), b = pick(G->src, 4) ? find_or_make(G, &q) : make_input(G, 1, 1, 1, false);
    s = new_step(G, GF_WHERE);
    s->n_in = 3;
    s->in[0] = (uint16_t)c;
    s->in[1] = (uint16_t)a;
    s->in[2] = (uint16_t)b;
    out = new_val(G, s, cv.rank, cv.rows, cv.cols, fmaxf(p->vals[a].mag, p->vals[b].mag),
                  fminf(p->vals[a].lo, p->vals[b].lo));
    break;
  }
  case GF_READ:
    s = new_step(G, GF_READ);
    s->n_in = 1;
    s->in[0] = (uint16_t)any_value(G);
    break;
  default:
    s = new_step(G, GF_PHASE);
    s->a = (int16_t)pick(G->src, 3);
    break;
  }
  /* every value this step made (its inputs too) within the error cap, else undone */
  for (unsigned si = first_step; si < p->n_steps; si++) {
    const gf_step *t = &p->steps[si];
    if (t->op == GF_READ || t->op == GF_PHASE) continue;
    int n_out = t->op == GF_LSTM ? 2 : 1;
    for (int k = 0; k < n_out; k++) {
      gf_val *v = &p->vals[t->out + k];
      v->err = step_err(G->w, p, t, v);
      if (!(v->err <= GF_ERR_CAP)) {
        p->n_steps = first_step;
        p->n_vals = first_val;
        return true;
      }
    }
  }
  /* sometimes only for some instances: the others take an earlier value of the same shape */
  if (out >= 0 && p->n_inst > 1 && pick(G->src, 5) == 0) {
    const gf_val *o = &p->vals[out];
    want q = shape_of(o);
    int alt = -1;
    for (int i = out - 1; i >= 0 && alt < 0; i--)
      if (matches(&p->vals[i], &q)) alt = i;
    if (alt >= 0) {
      s->mod = (uint8_t)(2 + pick(G->src, 2));
      s->rem = (uint8_t)pick(G->src, s->mod);
      s->alt = (uint16_t)alt;
      int n_out = s->op == GF_LSTM ? 2 : 1;
      for (int k = 0; k < n_out; k++) { /* the slot holds either */
        gf_val *v = &p->vals[out + k];
        v->mag = fmaxf(v->mag, p->vals[alt].mag);
        v->lo = fminf(v->lo, p->vals[alt].lo);
        v->exact = v->exact && p->vals[alt].exact;
        v->err = fmaxf(v->err, p->vals[alt].err);
      }
    }
  }
  return true;
}

static void generate(gf_world *w, gf_src *src) {
  gf_prog *p = &w->prog;
  memset(p, 0, sizeof *p);
  gen G = {p, src, w};
  p->n_inst = 1 + pick(src, GF_MAX_INST);
  p->step_major = pick(src, 4) == 0;
  p->read_back = pick(src, 2);
  for (int i = 0; i < 4; i++) p->seed = p->seed << 8 | src_byte(src);
  p->seed |= 1;
  unsigned target = 2 + pick(src, GF_MAX_STEPS - 8);
  make_input(&G, 1, 1, k_widths[pick(src, NW)], false);
  while (p->n_steps < target && !src_done(src) && gen_step(&G)) {
  }
}

/* ------------------------------------------------------------ execution */

static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ x >> 33;
}

static void exec_step(gf_world *w, sheaf_graph *g, const gf_prog *p, unsigned si, unsigned inst,
                      sheaf_expr *v) {
  const gf_step *s = &p->steps[si];
  if (s->mod && inst % s->mod != s->rem) {
    v[s->out] = v[s->alt];
    if (s->op == GF_LSTM) v[s->out + 1] = v[s->alt];
    return;
  }
  const gf_val *o = &p->vals[s->out];
  sheaf_expr x[GF_MAX_IN];
  for (unsigned i = 0; i < s->n_in; i++) x[i] = v[s->in[i]];
  int64_t shape[2] = {o->rows, o->cols};
  const int64_t *sh = o->rank == 2 ? shape : shape + 1;
  sheaf_expr r = {0, 0, 0};
  switch ((gf_op)s->op) {
  case GF_INPUT: {
    float *buf = malloc((size_t)o->rows * (size_t)o->cols * sizeof *buf);
    if (!buf) {
      sheaf_graph_fail(g, SHEAF_ERR_NOMEM, "graph fuzz: out of memory");
      return;
    }
    uint64_t st = mix(p->seed ^ mix(si * 0x9e3779b97f4a7c15ull + inst + 1));
    for (int i = 0; i < o->rows * o->cols; i++) {
      st = mix(st + 0x632be59bd9b4e019ull);
      float u = (float)((double)(st >> 40) / (double)(1ull << 24)); /* [0, 1) */
      buf[i] = s->a ? 0.5f + u : 2 * u - 1;
    }
    r = sheaf_input(g, o->rank, sh, buf);
    free(buf);
    break;
  }
  case GF_ZEROS: r = sheaf_zeros(g, o->rank, sh); break;
  case GF_PARAM: r = sheaf_parameter(g, s->b == NW ? w->bias[s->a] : w->W[s->a][s->b]); break;
  case GF_LOOKUP: r = sheaf_lookup(g, w->table[s->a], s->b); break;
  case GF_AFFINE: {
    sheaf_param W[4];
    for (unsigned i = 0; i < s->n_in; i++) W[i] = w->W[width_index(p->vals[s->in[i]].cols)][s->a];
    r = sheaf_affine_n(g, s->n_in, W, x, s->b ? w->bias[s->a] : SHEAF_NO_PARAM);
    break;
  }
  case GF_MATMUL: r = sheaf_matmul(g, x[0], x[1]); break;
  case GF_ADD: r = sheaf_add(g, x[0], x[1]); break;
  case GF_SUB: r = sheaf_sub(g, x[0], x[1]); break;
  case GF_MUL: r = sheaf_mul(g, x[0], x[1]); break;
  case GF_DIV: r = sheaf_div(g, x[0], x[1]); break;
  case GF_SUM_N: r = sheaf_sum_n(g, s->n_in, x); break;
  case GF_SCALE: r = sheaf_scale(g, x[0], s->f); break;
  case GF_TANH: r = sheaf_tanh(g, x[0]); break;
  case GF_SIGMOID: r = sheaf_sigmoid(g, x[0]); break;
  case GF_RELU: r = sheaf_relu(g, x[0]); break;
  case GF_GELU: r = sheaf_gelu(g, x[0]); break;
  case GF_EXP: r = sheaf_exp(g, x[0]); break;
  case GF_LN: r = sheaf_ln(g, x[0]); break;
  case GF_SQRT: r = sheaf_sqrt(g, x[0]); break;
  case GF_RSQRT: r = sheaf_rsqrt(g, x[0]); break;
  case GF_ABS: r = sheaf_abs(g, x[0]); break;
  case GF_SOFTPLUS: r = sheaf_softplus(g, x[0]); break;
  case GF_ERF: r = sheaf_erf(g, x[0]); break;
  case GF_SILU: r = sheaf_silu(g, x[0]); break;
  case GF_POW: r = sheaf_pow(g, x[0], x[1]); break;
  case GF_MINIMUM: r = sheaf_minimum(g, x[0], x[1]); break;
  case GF_MAXIMUM: r = sheaf_maximum(g, x[0], x[1]); break;
  case GF_STACK: r = sheaf_stack(g, s->n_in, x); break;
  case GF_TRANSPOSE: r = sheaf_transpose(g, x[0]); break;
  case GF_ROW: r = sheaf_row(g, x[0], s->a); break;
  case GF_GT: r = sheaf_gt(g, x[0], x[1]); break;
  case GF_GE: r = sheaf_ge(g, x[0], x[1]); break;
  case GF_EQ: r = sheaf_eq(g, x[0], x[1]); break;
  case GF_NE: r = sheaf_ne(g, x[0], x[1]); break;
  case GF_WHERE: r = sheaf_where(g, x[0], x[1], x[2]); break;
  case GF_LAYER_NORM: r = sheaf_layer_norm(g, x[0], x[1], x[2], s->f); break;
  case GF_CONCAT: r = sheaf_concat(g, s->n_in, x); break;
  case GF_SLICE: r = sheaf_slice(g, x[0], s->a, s->b); break;
  case GF_RESHAPE: {
    int64_t rs[2] = {s->b, o->cols};
    r = sheaf_reshape(g, x[0], s->a, s->a == 2 ? rs : rs + 1);
    break;
  }
  case GF_SUM: r = sheaf_sum(g, x[0]); break;
  case GF_MEAN: r = sheaf_mean(g, x[0]); break;
  case GF_MAX: r = sheaf_max(g, x[0]); break;
  case GF_SOFTMAX: r = sheaf_softmax(g, x[0]); break;
  case GF_LOG_SOFTMAX: r = sheaf_log_softmax(g, x[0]); break;
  case GF_PICK: r = sheaf_pick(g, x[0], s->a); break;
  case GF_LSTM: {
    sheaf_expr h, c, none = {0, 0, 0};
    sheaf_lstm_cell(g, w->lstm_W[s->a][s->b], w->lstm_b[s->b], x[0], s->n_in > 1 ? x[1] : none, &h, &c);
    v[s->out] = h;
    v[s->out + 1] = c;
    return;
  }
  case GF_READ: {
    sheaf_value_view vv;
    sheaf_value(g, x[0], &vv); /* a mid-build read: flushes what is pending (errors stay on g) */
    return;
  }
  case GF_PHASE: sheaf_graph_phase(g, s->a); return;
  default: return;
  }
  v[s->out] = r;
}

/* Builds every instance on g and flushes it; the graph's status. */
static sheaf_status build_all(gf_world *w, int c) {
  const gf_prog *p = &w->prog;
  sheaf_graph *g = w->g[c];
  if (p->step_major) {
    for (unsigned si = 0; si < p->n_steps; si++)
      for (unsigned i = 0; i < p->n_inst; i++) exec_step(w, g, p, si, i, w->v[c][i]);
  } else {
    for (unsigned i = 0; i < p->n_inst; i++) {
      sheaf_graph_phase(g, 0);
      for (unsigned si = 0; si < p->n_steps; si++) exec_step(w, g, p, si, i, w->v[c][i]);
    }
  }
  sheaf_status st = sheaf_graph_status(g);
  return st ? st : sheaf_graph_flush(g);
}

static bool close_enough(float got, float ref) {
  if (isnan(ref) || isnan(got)) return isnan(ref) && isnan(got);
  if (isinf(ref) || isinf(got)) return got == ref;
  double d = fabs((double)got - ref), s = fabs((double)ref) > 1 ? fabs((double)ref) : 1;
  return d <= 1e-5 * s;
}

static const char *conf_name(int c, char *buf, size_t n) {
  snprintf(buf, n, "%s/%d thread%s", sheaf_policy_name(k_configs[c].policy), k_configs[c].threads,
           k_configs[c].threads > 1 ? "s" : "");
  return buf;
}

/* The step that writes value slot k. */
static unsigned step_of(const gf_prog *p, unsigned k) {
  for (unsigned si = 0; si < p->n_steps; si++) {
    const gf_step *s = &p->steps[si];
    if (s->op != GF_READ && s->op != GF_PHASE && (s->out == k || (s->op == GF_LSTM && s->out + 1u == k)))
      return si;
  }
  return 0;
}

static bool compare(gf_world *w, int c, gf_result *res) {
  const gf_prog *p = &w->prog;
  char cn[64];
  for (unsigned i = 0; i < p->n_inst; i++)
    for (unsigned j = 0; j < p->n_vals; j++) {
      unsigned k = p->read_back ? p->n_vals - 1 - j : j;
      sheaf_value_view a, b;
      sheaf_status sa = sheaf_value(w->g[0], w->v[0][i][k], &a);
      sheaf_status sb = sheaf_value(w->g[c], w->v[c][i][k], &b);
      if (sa || sb) {
        snprintf(res->msg, sizeof res->msg, "%s: reading value v%u (step %u) of instance %u: %s: %s",
                 conf_name(sa ? 0 : c, cn, sizeof cn), k, step_of(p, k), i,
                 sheaf_status_str(sa ? sa : sb), sheaf_ctx_last_error(w->ctx));
        return false;
      }
      int64_t na = a.rank == 2 ? a.shape[0] * a.shape[1] : a.shape[0];
      int64_t nb = b.rank == 2 ? b.shape[0] * b.shape[1] : b.shape[0];
      if (a.rank != b.rank || a.shape[0] != b.shape[0] || (a.rank == 2 && a.shape[1] != b.shape[1])) {
        snprintf(res->msg, sizeof res->msg, "%s: value v%u (step %u) of instance %u: shape differs",
                 conf_name(c, cn, sizeof cn), k, step_of(p, k), i);
        return false;
      }
      for (int64_t e = 0; e < na && e < nb; e++)
        if (!close_enough(b.data[e], a.data[e])) {
          snprintf(res->msg, sizeof res->msg,
                   "%s: value v%u (step %u, %s) of instance %u, element %lld: %.9g, policy none %.9g",
                   conf_name(c, cn, sizeof cn), k, step_of(p, k),
                   k_op_names[p->steps[step_of(p, k)].op], i, (long long)e, (double)b.data[e],
                   (double)a.data[e]);
          return false;
        }
    }
  return true;
}

void gf_run(gf_world *w, gf_src *src, gf_result *res) {
  memset(res, 0, sizeof *res);
  generate(w, src);
  const gf_prog *p = &w->prog;
  res->steps = p->n_steps;
  res->values = p->n_vals;
  res->instances = p->n_inst;
  res->ok = true;
  char cn[64];
  for (int c = 0; c < NCONF && res->ok; c++) {
    sheaf_status st = build_all(w, c);
    if (st) {
      snprintf(res->msg, sizeof res->msg, "%s: %s: %s", conf_name(c, cn, sizeof cn), sheaf_status_str(st),
               sheaf_ctx_last_error(w->ctx));
      res->ok = false;
    }
  }
  for (int c = 1; c < NCONF && res->ok; c++) res->ok = compare(w, c, res);
  for (int c = 0; c < NCONF; c++) sheaf_graph_reset(w->g[c]);
}

void gf_dump(const gf_world *w, FILE *f) {
  const gf_prog *p = &w->prog;
  fprintf(f, "program: %u instances, %s, data seed %llu\n", p->n_inst,
          p->step_major ? "step-major" : "instance-major", (unsigned long long)p->seed);
  for (unsigned si = 0; si < p->n_steps; si++) {
    const gf_step *s = &p->steps[si];
    fprintf(f, "  %2u: ", si);
    if (s->op != GF_READ && s->op != GF_PHASE) {
      const gf_val *o = &p->vals[s->out];
      if (o->rank == 2)
        fprintf(f, "v%u [%d, %d] = ", s->out, o->rows, o->cols);
      else
        fprintf(f, "v%u [%d] = ", s->out, o->cols);
    }
    fprintf(f, "%s(", k_op_names[s->op]);
    for (unsigned i = 0; i < s->n_in; i++) fprintf(f, "%sv%u", i ? ", " : "", s->in[i]);
    fprintf(f, ") a=%d b=%d f=%g", s->a, s->b, (double)s->f);
    if (s->mod) fprintf(f, "  [instances %% %u == %u, else v%u]", s->mod, s->rem, s->alt);
    fputc('\n', f);
  }
}
