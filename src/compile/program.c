/*
 * program.c — the C API for models written in the language
 * (include/sheaf_program.h): compile and bind once, then runs of main over
 * instances, either through a runner (an interpreter per runner thread, its
 * worker slot: the dynamic runtime) or through the linearized mode
 * (linear.h; sheaf_program_opts.mode), with each instance's output tensors
 * copied out as its batch finishes. It lives in compile, not lang, because
 * it drives both.
 */
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "compile/dyncoarse.h"
#include "compile/linear.h"
#include "compile/program_input.h"
#include "lang/interp.h"

typedef struct prog_out {
  size_t n;               /* tensors */
  sheaf_value_view *views;
  float *data;            /* their values, one block */
} prog_out;

struct sheaf_program {
  sheaf_ctx *ctx;
  char *src;
  size_t len;
  sh_module m;
  bool have_m;
  sheaf_model *model;
  sh_lang_bind bind;
  sheaf_runner *runner;
  sh_interp **ip; /* by worker slot (sheaf_runner_threads), created on first use */
  int nw;
  sh_interp_host host; /* opts->host */
  sh_lin *lin;         /* the linearized mode, or NULL: dynamic */
  sh_dyncoarse *dc;    /* the dynamic mode's coarsened regions (opts->coarsen), or NULL */
  char why[512];       /* AUTO ran dynamic: why ("" otherwise) */
  /* the run */
  int64_t n, batch;
  const char *fn;     /* the API function running (messages) */
  sh_prog_input in;   /* its instances */
  sh_value *res;
  prog_out *out;
};

static void outs_free(sheaf_program *p) {
  for (int64_t i = 0; p->out && i < p->n; i++) {
    free(p->out[i].views);
    free(p->out[i].data);
  }
  free(p->out);
  free(p->res);
  p->out = NULL;
  p->res = NULL;
  p->n = 0;
  sh_prog_input_free(&p->in);
}

void sheaf_program_free(sheaf_program *p) {
  if (!p) return;
  outs_free(p);
  sh_lin_free(p->lin);
  for (int k = 0; p->ip && k < p->nw; k++) sh_interp_free(p->ip[k]);
  free(p->ip);
  sh_dyncoarse_free(p->dc); /* after the interpreters */
  sheaf_runner_free(p->runner);
  sh_lang_bind_free(p->ctx, &p->bind);
  sheaf_model_free(p->model);
  if (p->have_m) sh_module_free(&p->m);
  if (p->src) sh_free(p->ctx, p->src, p->len + 1);
  free(p);
}

/* The linearized mode for mode AUTO or LINEAR: p->lin, or (AUTO) p->why
 * says why the runs are dynamic; LINEAR fails with the reason. */
static sheaf_status linear_open(sheaf_program *p, const sheaf_program_opts *opts) {
  bool need = opts->mode == SHEAF_PROGRAM_LINEAR;
  const char *no = NULL;
  if (opts->host != SH_HOST_VM)
    no = "host 1 (the AST walker) runs in the dynamic runtime";
  else if (opts->coarsen)
    no = "coarsen configures the dynamic runtime";
  else if (!need)
    no = sh_lin_auto_refusal(&p->m);
  if (no) {
    if (need) return sh_fail(p->ctx, SHEAF_ERR_UNSUPPORTED, "sheaf_program_load: mode linear: %s", no);
    snprintf(p->why, sizeof p->why, "%s", no);
    return SHEAF_OK;
  }
  sheaf_status st = sh_lin_create(&p->m, p->model, &p->bind, &p->lin, p->why, sizeof p->why);
  if (st == SHEAF_ERR_UNSUPPORTED && !need) return SHEAF_OK; /* AUTO: dynamic, p->why says why */
  if (st) return sh_fail(p->ctx, st, "sheaf_program_load: mode linear: %s", p->why[0] ? p->why : sheaf_ctx_last_error(p->ctx));
  p->why[0] = 0;
  return SHEAF_OK;
}

sheaf_status sheaf_program_load(sheaf_ctx *ctx, const char *path, const sheaf_program_opts *opts,
                                sheaf_program **out) {
  if (!out) return ctx ? sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_program_load: out is NULL") : SHEAF_ERR_INVALID_ARG;
  *out = NULL;
  if (!ctx) return SHEAF_ERR_INVALID_ARG;
  if (!path) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_program_load: path is NULL");
  sheaf_program_opts none;
  memset(&none, 0, sizeof none);
  if (!opts) opts = &none;
  if (opts->n_sizes < 0 || opts->n_sizes > SH_BIND_MAX_OVERRIDES ||
      (opts->n_sizes && (!opts->size_names || !opts->size_values)))
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_program_load: %d sizes (0..%d, with names and values)",
                   opts->n_sizes, SH_BIND_MAX_OVERRIDES);
  if (opts->host != SH_HOST_VM && opts->host != SH_HOST_AST)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_program_load: host %d (0: the host program, 1: the AST walker)",
                   opts->host);
  if (opts->mode != SHEAF_PROGRAM_DYNAMIC && opts->mode != SHEAF_PROGRAM_AUTO && opts->mode != SHEAF_PROGRAM_LINEAR)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_program_load: mode %d (0 dynamic, 1 auto, 2 linear)",
                   (int)opts->mode);
  if (opts->coarsen && opts->host != SH_HOST_VM)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                   "sheaf_program_load: coarsen runs generated kernels from the host program (host 0), not the AST "
                   "walker (host %d)", opts->host);
  if (opts->coarsen && opts->mode == SHEAF_PROGRAM_LINEAR)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                   "sheaf_program_load: coarsen configures the dynamic runtime; mode linear runs its own generated "
                   "kernels (use mode dynamic or auto)");
  if (opts->mode == SHEAF_PROGRAM_LINEAR && opts->host != SH_HOST_VM)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                   "sheaf_program_load: host %d picks what runs the model's functions in the dynamic runtime; mode "
                   "linear runs generated kernels, no host program (use mode dynamic or auto)", opts->host);
  sheaf_program *p = calloc(1, sizeof *p);
  if (!p) return sh_fail(ctx, SHEAF_ERR_NOMEM, "sheaf_program_load: out of memory");
  p->ctx = ctx;
  p->host = (sh_interp_host)opts->host;
  sheaf_status st = sh_file_read(ctx, path, &p->src, &p->len);
  if (!st) p->have_m = true;
  if (!st && ((st = sh_lang_compile(&p->m, ctx, path, p->src, p->len)) != SHEAF_OK ||
              (st = sh_module_require_main(&p->m)) != SHEAF_OK)) {
    sh_buf b; /* the diagnostics, as sheaf check prints them */
    sh_buf_init(&b, ctx);
    sh_diags_render(&p->m.diags, &b);
    st = sh_fail(ctx, SHEAF_ERR_PARSE, "%.*s", b.data ? (int)b.len : 0, b.data ? (const char *)b.data : "");
    sh_buf_free(&b);
  }
  sh_lang_bind_opts bo;
  memset(&bo, 0, sizeof bo);
  bo.weights = opts->weights;
  bo.seed = opts->seed;
  bo.vocab = opts->vocab;
  bo.n_overrides = opts->n_sizes;
  for (int i = 0; i < opts->n_sizes; i++) {
    bo.override_name[i] = opts->size_names[i];
    bo.override_value[i] = opts->size_values[i];
  }
  if (!st) st = sheaf_model_create(ctx, &p->model);
  if (!st) st = sheaf_model_allow_nonfinite(p->model, opts->allow_nonfinite);
  if (!st) st = sh_lang_bind_model(&p->m, p->model, &bo, &p->bind);
  if (!st) st = sheaf_runner_create(p->model, &opts->runner, &p->runner);
  if (!st && p->m.n_waits) st = sheaf_runner_set_fiber_stack(p->runner, SH_INTERP_FIBER_STACK);
  if (!st && !(p->ip = calloc((size_t)(p->nw = sheaf_runner_threads(p->runner)), sizeof *p->ip)))
    st = sh_fail(ctx, SHEAF_ERR_NOMEM, "sheaf_program_load: out of memory");
  if (!st && opts->mode != SHEAF_PROGRAM_DYNAMIC) st = linear_open(p, opts);
  if (!st && !p->lin && opts->coarsen) st = sh_dyncoarse_create(&p->m, &p->bind, &p->dc);
  if (st) {
    sheaf_program_free(p);
    return st;
  }
  p->batch = opts->runner.batch > 0 ? opts->runner.batch : 64;
  *out = p;
  return SHEAF_OK;
}

sheaf_model *sheaf_program_model(sheaf_program *p) { return p ? p->model : NULL; }

sheaf_program_mode sheaf_program_mode_used(const sheaf_program *p, const char **why) {
  if (why) *why = p && p->why[0] ? p->why : NULL;
  return p && p->lin ? SHEAF_PROGRAM_LINEAR : SHEAF_PROGRAM_DYNAMIC;
}

/* The interpreter of worker slot `worker` (no lock: the runner never runs
 * two callbacks with one slot at once); NULL when out of memory. */
static sh_interp *interp_of(sheaf_program *p, int worker) {
  if (p->ip[worker]) return p->ip[worker];
  sh_interp *ip = NULL;
  if (sh_interp_create(&p->m, &p->bind, &ip) != SHEAF_OK || sh_interp_set_host(ip, p->host) != SHEAF_OK ||
      (p->dc && sh_interp_set_regions(ip, sh_dyncoarse_n_regions(p->dc), sh_dyncoarse_regions(p->dc)) != SHEAF_OK)) {
    sh_interp_free(ip);
    return NULL;
  }
  return p->ip[worker] = ip;
}

static sheaf_status build(sheaf_graph *g, int64_t i, int worker, void *user) {
  sheaf_program *p = user;
  sh_interp *ip = interp_of(p, worker);
  if (!ip) return sheaf_graph_fail(g, SHEAF_ERR_NOMEM, "out of memory: an interpreter");
  const sh_prog_input *in = &p->in;
  sh_word_ids words = sh_word_ids_of_rows(p->bind.vocab); /* the tables': <unk> last */
  sh_value v;
  sheaf_status st;
  if (in->have_tb) {
    st = sh_interp_tree(ip, &in->tb, in->tb.tree_root[i], words, &v);
  } else {
    int32_t o = in->off[i], n = in->off[i + 1] - o;
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    if (!ids) return sheaf_graph_fail(g, SHEAF_ERR_NOMEM, "out of memory: sentence %lld", (long long)i);
    for (int32_t k = 0; k < n; k++) ids[k] = sh_word_id(words, in->words[o + k]);
    if (sh_check_main_input(&p->m)->kind == SH_INPUT_RECORDS) {
      sh_token_cols t = {n, ids, in->upos ? in->upos + o : NULL, in->xpos ? in->xpos + o : NULL,
                         in->deprel ? in->deprel + o : NULL, in->head ? in->head + o : NULL,
                         in->form ? in->form + o : NULL, in->form_len ? in->form_len + o : NULL};
      st = sh_interp_records(ip, &t, &v);
    } else {
      st = sh_interp_ints(ip, ids, n, &v);
    }
    free(ids);
  }
  if (!st) st = sh_interp_main(ip, g, v, &p->res[i]);
  return st;
}

/* Instance i's result res (its tensors evaluated in g) copied into p->out[i]. */
static sheaf_status copy_out(sheaf_program *p, sheaf_graph *g, int64_t i, sh_value res) {
  size_t n = sh_value_tensors(res, NULL, 0), total = 0;
  sheaf_expr *ex = malloc((n + 1) * sizeof *ex);
  prog_out *o = &p->out[i];
  o->views = calloc(n + 1, sizeof *o->views);
  sheaf_status st = ex && o->views ? SHEAF_OK : SHEAF_ERR_NOMEM;
  if (!st) sh_value_tensors(res, ex, n);
  for (size_t k = 0; k < n && !st; k++) {
    st = sheaf_value(g, ex[k], &o->views[k]);
    total += (size_t)(o->views[k].rank == 2 ? o->views[k].shape[0] * o->views[k].shape[1] : o->views[k].shape[0]);
  }
  if (!st && !(o->data = malloc((total + 1) * sizeof *o->data))) st = SHEAF_ERR_NOMEM;
  for (size_t k = 0, at = 0; k < n && !st; k++) { /* copied: the graph is reset for the next batch */
    sheaf_value_view *v = &o->views[k];
    size_t c = (size_t)(v->rank == 2 ? v->shape[0] * v->shape[1] : v->shape[0]);
    memcpy(o->data + at, v->data, c * sizeof *o->data);
    v->data = o->data + at;
    at += c;
  }
  o->n = n;
  free(ex);
  return st;
}

static sheaf_status read(sheaf_graph *g, int64_t i, int worker, void *user) {
  sheaf_program *p = user;
  sh_interp *ip = interp_of(p, worker);
  if (!ip) return sheaf_graph_fail(g, SHEAF_ERR_NOMEM, "out of memory: an interpreter");
  sheaf_status st = copy_out(p, g, i, p->res[i]);
  if ((i + 1) % p->batch == 0 || i + 1 == p->n) sh_interp_reset(ip);
  if (st == SHEAF_ERR_NOMEM) return sheaf_graph_fail(g, st, "out of memory: the outputs of instance %lld", (long long)i);
  return st;
}


/* The linearized run: batch by batch through p->lin (words mapped as the
 * dynamic build maps them), each instance's result copied out through a
 * scratch graph's inputs. */
static sheaf_status run_linear(sheaf_program *p) {
  sheaf_ctx *ctx = p->ctx;
  const sh_prog_input *in = &p->in;
  sh_agg **aggs = calloc(SH_LIN_MAX_AGGS, sizeof *aggs);
  sheaf_graph *g = NULL;
  sheaf_status st = aggs ? sheaf_graph_create(p->model, NULL, &g) : sh_fail(ctx, SHEAF_ERR_NOMEM, "%s: out of memory", p->fn);
  sh_word_ids ids = sh_word_ids_of_rows(p->bind.vocab); /* as build() maps them */
  sh_lin_records rec = {in->upos, in->xpos, in->deprel, in->head, in->form, in->form_len};
  const char *what = in->have_tb ? "trees" : "sentences";
  for (int64_t first = 0; !st && first < p->n; first += p->batch) {
    int32_t cnt = (int32_t)(first + p->batch <= p->n ? p->batch : p->n - first);
    st = in->have_tb ? sh_lin_run(p->lin, &in->tb, (int32_t)first, cnt, ids)
         : sh_lin_takes_records(p->lin) ? sh_lin_run_rec(p->lin, in->off, in->words, &rec, (int32_t)first, cnt, ids)
                                        : sh_lin_run_seq(p->lin, in->off, in->words, (int32_t)first, cnt, ids);
    if (st) st = sh_fail(ctx, st, "%s: %s %lld..%lld: %s", p->fn, what, (long long)first,
                         (long long)(first + cnt - 1), sheaf_ctx_last_error(ctx));
    for (int32_t t = 0; !st && t < cnt; t++) {
      int n_aggs = 0;
      sh_value v;
      st = sh_lin_result(g, p->lin, t, p->m.main->ret_type, &v, aggs, &n_aggs);
      if (!st) st = copy_out(p, g, first + t, v);
      for (int k = 0; k < n_aggs; k++) free(aggs[k]);
      if (st) st = sh_fail(ctx, st, "%s: the outputs of instance %lld: %s", p->fn, (long long)(first + t),
                           st == SHEAF_ERR_NOMEM ? "out of memory" : sheaf_ctx_last_error(ctx));
    }
    if (!st) st = sheaf_graph_reset(g);
  }
  sheaf_graph_free(g);
  free(aggs);
  return st;
}

/* A run of main over n instances made from the caller's sentences (fn:
 * the API function, for messages). */
static sheaf_status run(sheaf_program *p, const char *fn, int64_t n, const sheaf_sentence *s) {
  outs_free(p);
  const sh_input_shape *shape = sh_check_main_input(&p->m);
  if (shape->kind == SH_INPUT_UNSUPPORTED)
    return sh_fail(p->ctx, SHEAF_ERR_INVALID_ARG, "%s: main takes no input sheaf_program can make", fn);
  sheaf_status st = sh_prog_input_make(p->ctx, shape, fn, n, s, &p->in);
  if (st) return st;
  p->res = calloc((size_t)n + 1, sizeof *p->res);
  p->out = calloc((size_t)n + 1, sizeof *p->out);
  if (!p->res || !p->out) {
    outs_free(p);
    return sh_fail(p->ctx, SHEAF_ERR_NOMEM, "%s: out of memory (%lld instances)", fn, (long long)n);
  }
  p->n = n;
  p->fn = fn;
  if (p->lin) return run_linear(p);
  if (p->m.n_waits) /* reads of values (argmax, item): each instance on a fiber */
    return sheaf_runner_run_fibers(p->runner, 0, n, build, read, p);
  return sheaf_runner_run(p->runner, 0, n, build, read, p);
}

sheaf_status sheaf_program_run_sentences(sheaf_program *p, int64_t n, const sheaf_sentence *sentences) {
  if (!p) return SHEAF_ERR_INVALID_ARG;
  return run(p, "sheaf_program_run_sentences", n, sentences);
}

sheaf_status sheaf_program_run_words(sheaf_program *p, int64_t n, const int32_t *const *words,
                                     const int64_t *lens) {
  if (!p) return SHEAF_ERR_INVALID_ARG;
  const char *fn = "sheaf_program_run_words";
  outs_free(p);
  if (n < 0 || (n > 0 && (!words || !lens)))
    return sh_fail(p->ctx, SHEAF_ERR_INVALID_ARG, "%s: %lld sentences%s", fn, (long long)n,
                   n > 0 ? " but words or lens is NULL" : "");
  if (sh_check_main_input(&p->m)->kind != SH_INPUT_TOKENS)
    return sh_fail(p->ctx, SHEAF_ERR_INVALID_ARG, "%s: main does not take list[i32] (sheaf_program_run_sentences "
                   "runs trees and token records)", fn);
  sheaf_sentence *s = calloc((size_t)n + 1, sizeof *s);
  if (!s) return sh_fail(p->ctx, SHEAF_ERR_NOMEM, "%s: out of memory (%lld sentences)", fn, (long long)n);
  for (int64_t i = 0; i < n; i++) {
    s[i].len = lens[i], s[i].words = words[i];
    if (lens[i] < 0 || lens[i] > INT32_MAX || (lens[i] > 0 && !words[i])) {
      free(s);
      return sh_fail(p->ctx, SHEAF_ERR_INVALID_ARG, "%s: sentence %lld: %lld words%s", fn, (long long)i,
                     (long long)lens[i], lens[i] > 0 && !words[i] ? " but no array" : "");
    }
  }
  sheaf_status st = run(p, fn, n, s);
  free(s);
  return st;
}

size_t sheaf_program_outputs(const sheaf_program *p, int64_t i, size_t max, sheaf_value_view *out) {
  if (!p || i < 0 || i >= p->n || !p->out) return 0;
  const prog_out *o = &p->out[i];
  for (size_t k = 0; k < o->n && k < max && out; k++) out[k] = o->views[k];
  return o->n;
}
