/*
 * optim.c — the optimizers (sheaf_optimizer_*: SGD with momentum, AdaGrad, Adam/AdamW),
 * with clipping by the global gradient norm. An update is elementwise, in
 * float; the norm is summed in double over fixed chunks of OPT_CHUNK
 * elements (in declaration order, each chunk's partial sums added in chunk
 * order). Both run on the context's pool, a chunk per task: the chunks and
 * the order of the sums do not depend on the threads, so the same
 * gradients give bit-identical weights on any thread count. A table
 * whose gradient came from lookups only (sh_param.grad_rows, marked by the
 * backward) has its norm summed over the marked rows (the same bits: the
 * rest is zero) and, with lazy_rows, only those rows updated.
 */
#include <math.h>
#include <string.h>
#ifdef __AVX__
#include <immintrin.h>
#endif

#include "base/pool.h"
#include "train/optim_int.h"

enum { OPT_CHUNK = 16384 }; /* elements of a task (norm and update) */

/* -------------------------------------------------------------- optimizers */

sheaf_status sheaf_optimizer_create(sheaf_model *m, const sheaf_optimizer_opts *opts,
                                    sheaf_optimizer **out) {
  if (!out) return m ? sh_fail(m->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_optimizer_create: out is NULL")
                     : SHEAF_ERR_INVALID_ARG;
  *out = NULL;
  if (!m) return SHEAF_ERR_INVALID_ARG;
  if (!opts) return sh_fail(m->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_optimizer_create: opts is NULL");
  sheaf_optimizer_opts o = *opts;
  if ((unsigned)o.kind > SHEAF_OPTIM_ADAM)
    return sh_fail(m->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_optimizer_create: unknown kind %d", (int)o.kind);
  if (!(o.lr > 0.0f) || !isfinite(o.lr))
    return sh_fail(m->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_optimizer_create: lr %g must be positive", (double)o.lr);
  if (o.beta1 == 0.0f) o.beta1 = 0.9f;
  if (o.beta2 == 0.0f) o.beta2 = 0.999f;
  if (o.eps == 0.0f) o.eps = 1e-8f;
  if (!(o.momentum >= 0.0f && o.momentum < 1.0f) || !(o.beta1 > 0.0f && o.beta1 < 1.0f) ||
      !(o.beta2 > 0.0f && o.beta2 < 1.0f) || !(o.eps > 0.0f) || !(o.weight_decay >= 0.0f) ||
      !(o.clip_norm >= 0.0f))
    return sh_fail(m->ctx, SHEAF_ERR_INVALID_ARG,
                   "sheaf_optimizer_create: momentum, beta1, beta2 must be in [0, 1), eps positive, "
                   "weight_decay and clip_norm non-negative");
  sheaf_optimizer *p = sh_calloc(m->ctx, 1, sizeof *p);
  if (!p) return SHEAF_ERR_NOMEM;
  p->m = m;
  p->o = o;
  *out = p;
  return SHEAF_OK;
}

void sheaf_optimizer_free(sheaf_optimizer *o) {
  if (!o) return;
  sheaf_ctx *ctx = o->m->ctx;
  for (uint32_t i = 0; i < o->n_st; i++) {
    sh_free(ctx, o->st[i].s1, o->st[i].numel * sizeof(float));
    sh_free(ctx, o->st[i].s2, o->st[i].numel * sizeof(float));
  }
  sh_free(ctx, o->st, (size_t)o->n_st * sizeof *o->st);
  sh_free(ctx, o->part, o->n_part * sizeof *o->part);
  sh_free(ctx, o, sizeof *o);
}

int64_t sheaf_optimizer_steps(const sheaf_optimizer *o) { return o ? o->steps : 0; }

sheaf_status sheaf_optimizer_lazy_rows(sheaf_optimizer *o, int on) {
  if (!o) return SHEAF_ERR_INVALID_ARG;
  o->lazy_rows = on != 0;
  return SHEAF_OK;
}

static float *zeroed(sheaf_ctx *ctx, size_t n) {
  float *p = sh_alloc(ctx, (n ? n : 1) * sizeof(float), 64);
  if (p) memset(p, 0, n * sizeof(float));
  return p;
}

/* State for every parameter declared so far (parameters may come later). */
static sheaf_status grow_state(sheaf_optimizer *o) {
  sheaf_model *m = o->m;
  if (o->n_st >= m->n_params) return SHEAF_OK;
  opt_state *s = sh_realloc(m->ctx, o->st, (size_t)o->n_st * sizeof *s, (size_t)m->n_params * sizeof *s);
  if (!s) return sh_fail(m->ctx, SHEAF_ERR_NOMEM, "sheaf_optimizer_step: out of memory");
  memset(s + o->n_st, 0, (size_t)(m->n_params - o->n_st) * sizeof *s);
  o->st = s;
  o->n_st = m->n_params;
  return SHEAF_OK;
}

/* One step's work, a chunk per task: chunk c is elements [c0, c0 + n) of
 * parameter ch[c].p. */
typedef struct opt_chunk {
  uint32_t p;
  size_t c0, n;
} opt_chunk;

typedef struct opt_job {
  sheaf_optimizer *o;
  const opt_chunk *ch;
  float clip, ic1, ic2; /* Adam: 1 / (1 - b1^t), 1 / sqrt(1 - b2^t) */
} opt_job;

/* The marked rows of a table's gradient (sh_param.grad_rows) within
 * elements [c0, c0 + n): calls f(j, a, len) for each run of marked
 * elements, in order. A parameter whose gradient was written whole has no
 * marks (grad_whole): not a table here. */
typedef struct row_span {
  size_t a, n;
} row_span;
static size_t marked_spans(const sh_param *p, size_t c0, size_t n, row_span *out, size_t max) {
  size_t w = (size_t)p->shape[1], r = c0 / w, end = c0 + n, k = 0;
  for (; r * w < end && k < max; r++) {
    if (!p->grad_rows[r]) continue;
    size_t a = r * w < c0 ? c0 : r * w, e = (r + 1) * w < end ? (r + 1) * w : end;
    if (k && out[k - 1].a + out[k - 1].n == a) out[k - 1].n += e - a; /* adjacent rows: one span */
    else out[k++] = (row_span){a, e - a};
  }
  return k;
}

/* Whether parameter p's gradient is known zero outside its marked rows
 * (a table reached only by lookups since the last zeroing: grad_rows, or
 * no gradient at all since then: no marks and not whole). */
static bool rows_only(const sh_param *p) { return !p->grad_whole && p->rank == 2 && p->shape[1] > 0; }

/* Σ g² of a chunk in double: four running sums (vectorizable; element i
 * of the chunk in sum i mod 4), added in a fixed order. A table reached
 * only by lookups sums its marked rows only: the other elements are zero,
 * and adding zeros changes no sum, so the norm is the same bits. */
static void norm_task(void *arg, int64_t task, int tid) {
  (void)tid;
  opt_job *j = arg;
  const opt_chunk *c = &j->ch[task];
  const sh_param *p = &j->o->m->params[c->p];
  double s[4] = {0, 0, 0, 0};
  if (rows_only(p)) {
    row_span sp[64];
    size_t from = c->c0, end = c->c0 + c->n;
    while (p->grad_rows && from < end) {
      size_t k = marked_spans(p, from, end - from, sp, 64);
      for (size_t q = 0; q < k; q++)
        for (size_t i = sp[q].a; i < sp[q].a + sp[q].n; i++) {
          double g = p->grad[i];
          s[(i - c->c0) & 3] += g * g;
        }
      if (k < 64) break;
      from = sp[k - 1].a + sp[k - 1].n;
    }
  } else {
    const float *gr = p->grad + c->c0;
    size_t i = 0;
    for (; i + 4 <= c->n; i += 4)
      for (int k = 0; k < 4; k++) s[k] += (double)gr[i + k] * gr[i + k];
    for (; i < c->n; i++) s[0] += (double)gr[i] * gr[i];
  }
  j->o->part[task] = (s[0] + s[1]) + (s[2] + s[3]);
}

/* The updates of n elements (restrict parameters: vectorized by the
 * compiler, except where sqrtf is: its errno path keeps a libm call per
 * element, so Adam's body is written with AVX where the build has it). */

static void sgd_run(size_t n, float *restrict w, const float *restrict gr, float clip, float lr, float wd) {
  for (size_t i = 0; i < n; i++) w[i] -= lr * (gr[i] * clip + wd * w[i]);
}

static void momentum_run(size_t n, float *restrict w, const float *restrict gr, float *restrict s1, float clip,
                         float lr, float wd, float mom) {
  for (size_t i = 0; i < n; i++) {
    float gj = gr[i] * clip + wd * w[i];
    gj = s1[i] = mom * s1[i] + gj;
    w[i] -= lr * gj;
  }
}

static void adagrad_run(size_t n, float *restrict w, const float *restrict gr, float *restrict s2, float clip,
                        float lr, float wd, float eps) {
  for (size_t i = 0; i < n; i++) {
    float gj = gr[i] * clip + wd * w[i];
    s2[i] += gj * gj;
    w[i] -= lr * gj / (sqrtf(s2[i]) + eps);
  }
}

static void adam_run(size_t n, float *restrict w, const float *restrict gr, float *restrict s1,
                     float *restrict s2, float clip, float lr, float wd, float eps, float b1, float b2,
                     float ic1, float ic2) {
  size_t i = 0;
#ifdef __AVX__
  const __m256 vclip = _mm256_set1_ps(clip), vb1 = _mm256_set1_ps(b1), vb2 = _mm256_set1_ps(b2);
  const __m256 va1 = _mm256_set1_ps(1.0f - b1), va2 = _mm256_set1_ps(1.0f - b2);
  const __m256 vic1 = _mm256_set1_ps(ic1), vic2 = _mm256_set1_ps(ic2), veps = _mm256_set1_ps(eps);
  const __m256 vlr = _mm256_set1_ps(lr), vwd = _mm256_set1_ps(wd);
  for (; i + 8 <= n; i += 8) {
    __m256 gj = _mm256_mul_ps(_mm256_loadu_ps(gr + i), vclip);
    __m256 m1 = _mm256_add_ps(_mm256_mul_ps(vb1, _mm256_loadu_ps(s1 + i)), _mm256_mul_ps(va1, gj));
    __m256 m2 = _mm256_add_ps(_mm256_mul_ps(vb2, _mm256_loadu_ps(s2 + i)), _mm256_mul_ps(_mm256_mul_ps(va2, gj), gj));
    _mm256_storeu_ps(s1 + i, m1);
    _mm256_storeu_ps(s2 + i, m2);
    __m256 mh = _mm256_mul_ps(m1, vic1), sv = _mm256_mul_ps(_mm256_sqrt_ps(m2), vic2), wv = _mm256_loadu_ps(w + i);
    __m256 u = _mm256_add_ps(_mm256_div_ps(mh, _mm256_add_ps(sv, veps)), _mm256_mul_ps(vwd, wv));
    _mm256_storeu_ps(w + i, _mm256_sub_ps(wv, _mm256_mul_ps(vlr, u)));
  }
#endif
  for (; i < n; i++) {
    float gj = gr[i] * clip;
    s1[i] = b1 * s1[i] + (1.0f - b1) * gj;
    s2[i] = b2 * s2[i] + (1.0f - b2) * gj * gj;
    float mh = s1[i] * ic1, sv = sqrtf(s2[i]) * ic2;
    w[i] -= lr * (mh / (sv + eps) + wd * w[i]);
  }
}

/* A chunk's worth of zeros: the gradient of a table's rows no lookup
 * reached (they are zero: sh_param.grad_rows), read from here rather than
 * from the table's gradient (a dense step over a large table is bound by
 * memory traffic: the same values, a seventh fewer bytes for Adam). */
static const float opt_zeros[OPT_CHUNK];

/* The update of elements [a, a + n) of parameter pi (zero: with a zero
 * gradient, n <= OPT_CHUNK). */
static void update_span_g(const opt_job *j, uint32_t pi, size_t a, size_t n, bool zero) {
  const sheaf_optimizer_opts *op = &j->o->o;
  sh_param *p = &j->o->m->params[pi];
  opt_state *st = &j->o->st[pi];
  float *w = p->data + a;
  const float *gr = zero ? opt_zeros : p->grad + a;
  float *s1 = st->s1 ? st->s1 + a : NULL, *s2 = st->s2 ? st->s2 + a : NULL;
  switch (op->kind) {
  case SHEAF_OPTIM_SGD:
    if (s1) momentum_run(n, w, gr, s1, j->clip, op->lr, op->weight_decay, op->momentum);
    else sgd_run(n, w, gr, j->clip, op->lr, op->weight_decay);
    break;
  case SHEAF_OPTIM_ADAGRAD: adagrad_run(n, w, gr, s2, j->clip, op->lr, op->weight_decay, op->eps); break;
  case SHEAF_OPTIM_ADAM:
    adam_run(n, w, gr, s1, s2, j->clip, op->lr, op->weight_decay, op->eps, op->beta1, op->beta2, j->ic1, j->ic2);
    break;
  }
}

static void update_span(const opt_job *j, uint32_t pi, size_t a, size_t n) { update_span_g(j, pi, a, n, false); }

/* A chunk's update; with lazy_rows, a table reached only by lookups
 * updates its marked rows only (the others, and their state, stay);
 * without, its other rows are updated with a zero gradient read from
 * opt_zeros (the same values). */
static void update_task(void *arg, int64_t task, int tid) {
  (void)tid;
  opt_job *j = arg;
  const opt_chunk *c = &j->ch[task];
  const sh_param *p = &j->o->m->params[c->p];
  if (!rows_only(p) || (!j->o->lazy_rows && !p->grad_rows)) {
    update_span(j, c->p, c->c0, c->n);
    return;
  }
  row_span sp[64];
  size_t from = c->c0, end = c->c0 + c->n;
  while (p->grad_rows && from < end) {
    size_t k = marked_spans(p, from, end - from, sp, 64);
    for (size_t q = 0; q < k; q++) {
      if (!j->o->lazy_rows && sp[q].a > from) update_span_g(j, c->p, from, sp[q].a - from, true);
      update_span(j, c->p, sp[q].a, sp[q].n);
      from = sp[q].a + sp[q].n;
    }
    if (k < 64) break;
  }
  if (!j->o->lazy_rows && from < end) update_span_g(j, c->p, from, end - from, true);
}

sheaf_status sheaf_optimizer_step(sheaf_optimizer *o, double *norm) {
  if (norm) *norm = 0.0;
  if (!o) return SHEAF_ERR_INVALID_ARG;
  sheaf_model *m = o->m;
  sheaf_status st = grow_state(o);
  if (st) return st;
  const sheaf_optimizer_opts *op = &o->o;
  bool need1 = op->kind == SHEAF_OPTIM_ADAM || (op->kind == SHEAF_OPTIM_SGD && op->momentum > 0.0f);
  bool need2 = op->kind != SHEAF_OPTIM_SGD;
  size_t n_ch = 0;
  for (uint32_t i = 0; i < m->n_params; i++) {
    sh_param *p = &m->params[i];
    if (!p->grad) continue;
    opt_state *s = &o->st[i];
    if ((need1 && !s->s1 && !(s->s1 = zeroed(m->ctx, p->numel))) ||
        (need2 && !s->s2 && !(s->s2 = zeroed(m->ctx, p->numel))))
      return sh_fail(m->ctx, SHEAF_ERR_NOMEM, "sheaf_optimizer_step: out of memory");
    s->numel = p->numel;
    n_ch += (p->numel + OPT_CHUNK - 1) / OPT_CHUNK;
  }
  if (n_ch > o->n_part) {
    double *np = sh_alloc(m->ctx, n_ch * sizeof *np, 64);
    if (!np) return sh_fail(m->ctx, SHEAF_ERR_NOMEM, "sheaf_optimizer_step: out of memory");
    sh_free(m->ctx, o->part, o->n_part * sizeof *o->part);
    o->part = np;
    o->n_part = n_ch;
  }
  opt_chunk *ch = sh_alloc(m->ctx, (n_ch ? n_ch : 1) * sizeof *ch, 64);
  if (!ch) return sh_fail(m->ctx, SHEAF_ERR_NOMEM, "sheaf_optimizer_step: out of memory");
  size_t k = 0;
  for (uint32_t i = 0; i < m->n_params; i++)
    for (size_t c0 = 0; m->params[i].grad && c0 < m->params[i].numel; c0 += OPT_CHUNK) {
      size_t left = m->params[i].numel - c0;
      ch[k++] = (opt_chunk){i, c0, left < OPT_CHUNK ? left : OPT_CHUNK};
    }
  opt_job j = {o, ch, 1.0f, 1.0f, 1.0f};
  sh_pool_run(m->ctx->pool, (int64_t)n_ch, norm_task, &j, 0);
  double sq = 0.0;
  for (size_t c = 0; c < n_ch; c++) sq += o->part[c];
  double gn = sqrt(sq);
  if (norm) *norm = gn;
  if (!isfinite(gn)) {
    sh_free(m->ctx, ch, (n_ch ? n_ch : 1) * sizeof *ch);
    return sh_fail(m->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_optimizer_step: the gradient is not finite (norm %g)", gn);
  }
  j.clip = op->clip_norm > 0.0f && gn > op->clip_norm ? (float)(op->clip_norm / gn) : 1.0f;
  o->steps++;
  if (op->kind == SHEAF_OPTIM_ADAM) {
    j.ic1 = (float)(1.0 / (1.0 - pow((double)op->beta1, (double)o->steps)));
    j.ic2 = (float)(1.0 / sqrt(1.0 - pow((double)op->beta2, (double)o->steps)));
  }
  sh_pool_run(m->ctx->pool, (int64_t)n_ch, update_task, &j, 0);
  sh_free(m->ctx, ch, (n_ch ? n_ch : 1) * sizeof *ch);
  for (uint32_t i = 0; i < m->n_params; i++) {
    if (!m->params[i].grad) continue;
    sheaf_param h = {i + 1, m->tag};
    if ((st = sheaf_model_param_update(m, h))) return st;
  }
  sh_model_refresh_packed(m); /* its packed forms, on the pool now rather than in the next pass */
  return SHEAF_OK;
}
