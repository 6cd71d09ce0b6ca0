/*
 * lstm_runner.c — a standalone program on the public C API (sheaf.h only,
 * as a program built against an installed Sheaf: `make examples` builds it
 * to build/<variant>/examples/lstm_runner, `make all` too). An LSTM
 * encodes sentences of different lengths; a runner batches them and, on
 * several threads, runs whole batches in parallel. Each thread tokenizes
 * its sentence into a scratch buffer of its own, indexed by the callbacks'
 * worker slot (no lock). The encodings are computed twice, on one thread
 * and on all, and must agree.
 *
 *   x_t = emb[w_t]     (h_t, c_t) = LSTM([x_t ; h_{t-1}], c_{t-1})     output h_n
 */
#include <sheaf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { V = 64, E = 32, H = 48, N = 200 };

typedef struct scratch {
  int32_t *ids;
  int cap;
} scratch;

typedef struct encoder {
  sheaf_param emb, W, b;
  const char *sentences[N];
  scratch *per_worker; /* sheaf_runner_threads entries */
  sheaf_expr h[N];     /* each sentence's encoding until its batch is read */
  float out[N][H];
} encoder;

/* Word ids of a sentence: a hash of each space-separated word, mod V. */
static int tokenize(const char *s, scratch *sc) {
  int n = 0;
  for (const char *p = s; *p;) {
    while (*p == ' ') p++;
    if (!*p) break;
    uint32_t h = 2166136261u;
    while (*p && *p != ' ') h = (h ^ (unsigned char)*p++) * 16777619u;
    if (n == sc->cap) {
      int cap = sc->cap ? 2 * sc->cap : 16;
      int32_t *ids = realloc(sc->ids, (size_t)cap * sizeof *ids);
      if (!ids) return -1;
      sc->ids = ids, sc->cap = cap;
    }
    sc->ids[n++] = (int32_t)(h % V);
  }
  return n;
}

static sheaf_status build(sheaf_graph *g, int64_t i, int worker, void *user) {
  encoder *e = user;
  int n = tokenize(e->sentences[i], &e->per_worker[worker]);
  if (n < 0) return sheaf_graph_fail(g, SHEAF_ERR_NOMEM, "sentence %d: out of memory", (int)i);
  const int64_t shape[1] = {H};
  sheaf_expr h = sheaf_zeros(g, 1, shape), c = {0};
  for (int t = 0; t < n; t++) {
    sheaf_expr xh[2] = {sheaf_lookup(g, e->emb, e->per_worker[worker].ids[t]), h};
    sheaf_lstm_cell(g, e->W, e->b, sheaf_concat(g, 2, xh), c, &h, &c);
  }
  e->h[i] = h;
  return sheaf_graph_status(g);
}

static sheaf_status read(sheaf_graph *g, int64_t i, int worker, void *user) {
  encoder *e = user;
  (void)worker;
  sheaf_value_view v;
  sheaf_status st = sheaf_value(g, e->h[i], &v);
  if (st == SHEAF_OK) memcpy(e->out[i], v.data, sizeof e->out[i]);
  return st;
}

/* Encodes every sentence through a runner on `threads` threads. */
static sheaf_status encode_all(sheaf_model *m, encoder *e, int threads) {
  sheaf_runner_opts ro = {16, threads, SHEAF_POLICY_SHEAF, SHEAF_PARALLEL_AUTO, NULL};
  sheaf_runner *r;
  sheaf_status st = sheaf_runner_create(m, &ro, &r);
  if (st != SHEAF_OK) return st;
  int workers = sheaf_runner_threads(r);
  e->per_worker = calloc((size_t)workers, sizeof *e->per_worker);
  st = e->per_worker ? sheaf_runner_run(r, 0, N, build, read, e) : SHEAF_ERR_NOMEM;
  for (int k = 0; e->per_worker && k < workers; k++) free(e->per_worker[k].ids);
  free(e->per_worker);
  e->per_worker = NULL;
  sheaf_runner_free(r);
  return st;
}

int main(void) {
  static const char *const words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "far"};
  static char text[N][128];
  static encoder one, all;
  for (int i = 0; i < N; i++) { /* sentences of 1 to 20 words */
    size_t at = 0;
    for (int k = 0; k <= (i * 7) % 20; k++)
      at += (size_t)snprintf(text[i] + at, sizeof text[i] - at, "%s%s", k ? " " : "",
                             words[(i + 3 * k) % 10]);
    one.sentences[i] = all.sentences[i] = text[i];
  }
  sheaf_ctx *ctx;
  char err[256];
  if (sheaf_ctx_create(NULL, &ctx, err, sizeof err) != SHEAF_OK) {
    fprintf(stderr, "lstm_runner: %s\n", err);
    return 1;
  }
  sheaf_model *m = NULL;
  const int64_t s_emb[2] = {V, E}, s_W[2] = {E + H, 4 * H}, s_b[1] = {4 * H};
  sheaf_status st = sheaf_model_create(ctx, &m);
  if (st == SHEAF_OK) st = sheaf_model_param(m, "emb", 2, s_emb, SHEAF_INIT_NORMAL, &one.emb);
  if (st == SHEAF_OK) st = sheaf_model_param(m, "W", 2, s_W, SHEAF_INIT_GLOROT, &one.W);
  if (st == SHEAF_OK) st = sheaf_model_param(m, "b", 1, s_b, SHEAF_INIT_ZERO, &one.b);
  all.emb = one.emb, all.W = one.W, all.b = one.b;
  if (st == SHEAF_OK) st = encode_all(m, &one, 1);
  if (st == SHEAF_OK) st = encode_all(m, &all, 0); /* every thread of the context */
  int ok = st == SHEAF_OK;
  if (!ok) fprintf(stderr, "lstm_runner: %s\n", sheaf_ctx_last_error(ctx));
  float worst = 0;
  for (int i = 0; ok && i < N; i++)
    for (int j = 0; j < H; j++) {
      float d = one.out[i][j] - all.out[i][j];
      if (d < 0) d = -d;
      if (d > worst) worst = d;
    }
  if (ok) {
    printf("lstm_runner: %d sentences on %d threads, h[0][0..3] = %.5f %.5f %.5f %.5f\n", N,
           sheaf_ctx_threads(ctx), (double)all.out[0][0], (double)all.out[0][1], (double)all.out[0][2],
           (double)all.out[0][3]);
    ok = worst <= 1e-5f;
    printf("lstm_runner: 1 thread vs %d: max |difference| %.2g: %s\n", sheaf_ctx_threads(ctx), (double)worst,
           ok ? "ok" : "FAILED");
  }
  sheaf_model_free(m);
  sheaf_ctx_free(ctx);
  return ok ? 0 : 1;
}
