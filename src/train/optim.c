/*
 * optim.c — the optimizers (sheaf_optimizer_*: SGD with momentum, AdaGrad, Adam/AdamW),
 * with clipping by the global gradient norm. An update walks the
 * parameters in declaration order, each element in order, in float (the
 * norm summed in double): the same gradients give bit-identical weights.
 */
#include <math.h>
#include <string.h>

#include "train/optim_int.h"

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
  sh_free(ctx, o, sizeof *o);
}

int64_t sheaf_optimizer_steps(const sheaf_optimizer *o) { return o ? o->steps : 0; }

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

sheaf_status sheaf_optimizer_step(sheaf_optimizer *o, double *norm) {
  if (norm) *norm = 0.0;
  if (!o) return SHEAF_ERR_INVALID_ARG;
  sheaf_model *m = o->m;
  sheaf_status st = grow_state(o);
  if (st) return st;
  double sq = 0.0;
  for (uint32_t i = 0; i < m->n_params; i++) {
    const sh_param *p = &m->params[i];
    if (!p->grad) continue;
    for (size_t j = 0; j < p->numel; j++) sq += (double)p->grad[j] * p->grad[j];
  }
  double gn = sqrt(sq);
  if (norm) *norm = gn;
  if (!isfinite(gn))
    return sh_fail(m->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_optimizer_step: the gradient is not finite (norm %g)", gn);
  float clip = o->o.clip_norm > 0.0f && gn > o->o.clip_norm ? (float)(o->o.clip_norm / gn) : 1.0f;
  o->steps++;
  const sheaf_optimizer_opts *op = &o->o;
  float lr = op->lr, wd = op->weight_decay;
  float bc1 = 1.0f, bc2 = 1.0f;
  if (op->kind == SHEAF_OPTIM_ADAM) {
    bc1 = (float)(1.0 - pow((double)op->beta1, (double)o->steps));
    bc2 = (float)(1.0 - pow((double)op->beta2, (double)o->steps));
  }
  for (uint32_t i = 0; i < m->n_params; i++) {
    sh_param *p = &m->params[i];
    if (!p->grad) continue;
    opt_state *s = &o->st[i];
    bool need1 = op->kind == SHEAF_OPTIM_ADAM || (op->kind == SHEAF_OPTIM_SGD && op->momentum > 0.0f);
    bool need2 = op->kind != SHEAF_OPTIM_SGD;
    if ((need1 && !s->s1 && !(s->s1 = zeroed(m->ctx, p->numel))) ||
        (need2 && !s->s2 && !(s->s2 = zeroed(m->ctx, p->numel))))
      return sh_fail(m->ctx, SHEAF_ERR_NOMEM, "sheaf_optimizer_step: out of memory");
    s->numel = p->numel;
    float *w = p->data;
    const float *gr = p->grad;
    for (size_t j = 0; j < p->numel; j++) {
      float gj = gr[j] * clip;
      switch (op->kind) {
      case SHEAF_OPTIM_SGD:
        gj += wd * w[j];
        if (s->s1) gj = s->s1[j] = op->momentum * s->s1[j] + gj;
        w[j] -= lr * gj;
        break;
      case SHEAF_OPTIM_ADAGRAD:
        gj += wd * w[j];
        s->s2[j] += gj * gj;
        w[j] -= lr * gj / (sqrtf(s->s2[j]) + op->eps);
        break;
      case SHEAF_OPTIM_ADAM: {
        s->s1[j] = op->beta1 * s->s1[j] + (1.0f - op->beta1) * gj;
        s->s2[j] = op->beta2 * s->s2[j] + (1.0f - op->beta2) * gj * gj;
        float mh = s->s1[j] / bc1, vh = s->s2[j] / bc2;
        w[j] -= lr * (mh / (sqrtf(vh) + op->eps) + wd * w[j]);
        break;
      }
      }
    }
    sheaf_param h = {i + 1, m->tag};
    if ((st = sheaf_model_param_update(m, h))) return st; /* graphs repack it */
  }
  return SHEAF_OK;
}
