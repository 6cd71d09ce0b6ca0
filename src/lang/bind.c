/*
 * bind.c — the parameters of a checked program on a sheaf_model (see
 * interp.h): global sizes solved from `size` declarations, --size
 * overrides, the weights file's shapes and the vocabulary, then every
 * `param` declared and loaded (or seeded) from that one open of the
 * weights (or the open file the caller gives: weights_file); the rows of the looked-up tables
 * and the rule that maps a word of the data to a row (sh_lang_word_row:
 * full tables by id, capped tables by frequency rank, <unk> last).
 */
#include <stdio.h>
#include <string.h>

#include "base/buf.h"
#include "io/safetensors.h"
#include "lang/interp.h"

/* Marks the parameters used as lookup tables (emb[w]). */
static void find_lookups(const sh_ast *e, bool *is_table, int depth) {
  if (!e || depth > SH_LANG_MAX_DEPTH + 8) return;
  if (e->kind == SH_EX_INDEX && e->lookup && e->a && e->a->res == SH_RES_PARAM)
    is_table[e->a->ref.param->index] = true;
  find_lookups(e->a, is_table, depth + 1);
  find_lookups(e->b, is_table, depth + 1);
  find_lookups(e->c, is_table, depth + 1);
  if (e->kind == SH_EX_TUPLE || e->kind == SH_EX_LIST || e->kind == SH_EX_CALL)
    for (int i = 0; i < e->n; i++) find_lookups(e->items[i], is_table, depth + 1);
  if (e->kind == SH_EX_BLOCK || e->kind == SH_EX_WHILE) /* lets; a while's state */
    for (int i = 0; i < e->n; i++) find_lookups(e->lets[i].value, is_table, depth + 1);
  if (e->kind == SH_EX_MATCH)
    for (int i = 0; i < e->n; i++) find_lookups(e->arms[i].body, is_table, depth + 1);
}

/* Value of s, or -1 when a variable is unknown; INT64_MAX when it
 * overflows. */
static int64_t eval_known(const sh_size *s, const int64_t *val) {
  int64_t r = 0;
  for (int i = 0; i < s->n; i++) {
    int64_t t = s->t[i].coef;
    for (int k = 0; k < s->t[i].deg; k++) {
      int64_t v = val[s->t[i].var[k]];
      if (v <= 0) return -1;
      if (__builtin_mul_overflow(t, v, &t)) return INT64_MAX;
    }
    if (__builtin_add_overflow(r, t, &r)) return INT64_MAX;
  }
  return r;
}

/* Every variable of s has a value. */
static bool all_known(const sh_size *s, const int64_t *val) {
  for (int i = 0; i < s->n; i++)
    for (int k = 0; k < s->t[i].deg; k++)
      if (val[s->t[i].var[k]] <= 0) return false;
  return true;
}

/* Fails for dimension d of parameter pp: "FILE:L:C: parameter 'W': its
 * size N - 8 <why> (N = 4)". */
static sheaf_status bad_dim(const sh_module *m, const sh_param_decl *pp, int d, const int64_t *val,
                            const char *why) {
  sh_buf b;
  sh_buf_init(&b, m->ctx);
  sh_size_print(&b, &m->sizes, &pp->type->dims[d]);
  sh_buf_printf(&b, " %s", why);
  const char *sep = " (";
  const sh_size *s = &pp->type->dims[d];
  for (int i = 0; i < s->n; i++)
    for (int k = 0; k < s->t[i].deg; k++) {
      uint32_t v = s->t[i].var[k];
      sh_buf_printf(&b, "%s%s = %lld", sep, sh_sym_name(&m->syms, m->sizes.v[v].name),
                    (long long)val[v]);
      sep = ", ";
    }
  if (*sep == ',') sh_buf_printf(&b, ")");
  sheaf_status st = sh_fail(m->ctx, SHEAF_ERR_SHAPE, "%s:%u:%u: parameter '%s': dimension %d, %s",
                            m->diags.file, (unsigned)pp->span.line, (unsigned)pp->span.col,
                            sh_sym_name(&m->syms, pp->name), d + 1,
                            b.data ? (const char *)b.data : "?");
  sh_buf_free(&b);
  return st;
}

/* Solves `s = n` when s has exactly one unknown variable, in a term of
 * degree 1: returns true when it set a value. */
static bool solve(const sh_size *s, int64_t n, int64_t *val) {
  int unknown_term = -1;
  uint32_t x = 0;
  int64_t rest = 0;
  for (int i = 0; i < s->n; i++) {
    int64_t t = s->t[i].coef;
    bool known = true;
    for (int k = 0; k < s->t[i].deg; k++) {
      int64_t v = val[s->t[i].var[k]];
      if (v <= 0) known = false;
      else if (__builtin_mul_overflow(t, v, &t)) return false;
    }
    if (known) {
      if (__builtin_add_overflow(rest, t, &rest)) return false;
      continue;
    }
    if (unknown_term >= 0 || s->t[i].deg != 1) return false;
    unknown_term = i;
    x = s->t[i].var[0];
  }
  if (unknown_term < 0) return false;
  int64_t c = s->t[unknown_term].coef, d = n - rest;
  if (c == 0 || d % c != 0 || d / c <= 0) return false;
  val[x] = d / c;
  return true;
}

/* The runtime's initializer for parameter pp (the binder's default: tables
 * normal, matrices Glorot, vectors zero). */
static sheaf_init param_init(const sh_param_decl *pp, bool is_table) {
  switch (pp->init) {
  case SH_PINIT_GLOROT: return SHEAF_INIT_GLOROT;
  case SH_PINIT_NORMAL: return SHEAF_INIT_NORMAL;
  case SH_PINIT_ZEROS: return SHEAF_INIT_ZERO;
  case SH_PINIT_ONES: return SHEAF_INIT_ONE;
  case SH_PINIT_IDENTITY: return SHEAF_INIT_IDENTITY;
  case SH_PINIT_IDENTITY_ROWS: return SHEAF_INIT_IDENTITY_ROWS;
  default: return pp->type->n == 1 ? SHEAF_INIT_ZERO : is_table ? SHEAF_INIT_NORMAL : SHEAF_INIT_GLOROT;
  }
}

/* `= normal + identity` (or identity_rows): the identity's shape rule (as
 * the runtime's SHEAF_INIT_IDENTITY / _ROWS), checked when declaring; with
 * add, the identity is added to the seeded values. */
static sheaf_status plus_identity(const sh_module *m, sheaf_model *model, const sh_param_decl *pp,
                                  sheaf_param h, const int64_t *shape, bool add) {
  int64_t r = shape[0], c = shape[1], k = 1;
  const char *name = sh_sym_name(&m->syms, pp->name);
  if (pp->plus == SH_PINIT_IDENTITY) {
    if (r % c != 0 && c % r != 0)
      return sh_fail(m->ctx, SHEAF_ERR_SHAPE,
                     "parameter '%s': identity of shape [%lld, %lld]: neither side is a multiple of the other",
                     name, (long long)r, (long long)c);
  } else {
    while (k * k < c) k++;
    if (k * k != c)
      return sh_fail(m->ctx, SHEAF_ERR_SHAPE,
                     "parameter '%s': identity_rows of shape [%lld, %lld]: %lld is not a square", name,
                     (long long)r, (long long)c, (long long)c);
  }
  if (!add) return SHEAF_OK;
  int rank;
  const int64_t *sh;
  float *d = sheaf_model_param_data(model, h, &rank, &sh);
  if (!d) return sh_fail(m->ctx, SHEAF_ERR_INTERNAL, "parameter '%s' has no data", name);
  if (pp->plus == SH_PINIT_IDENTITY) {
    int64_t n = r < c ? r : c;
    for (int64_t i = 0; i < r; i++)
      for (int64_t j = i % n; j < c; j += n) d[i * c + j] += 1.0f;
  } else {
    for (int64_t row = 0; row < r; row++)
      for (int64_t i = 0; i < k; i++) d[row * c + i * k + i] += 1.0f;
  }
  return SHEAF_OK;
}

static size_t rank_bytes(int64_t vocab) { return (size_t)(vocab > 1 ? vocab - 1 : 1) * sizeof(int32_t); }

void sh_lang_bind_free(sheaf_ctx *ctx, sh_lang_bind *b) {
  size_t np = (size_t)(b->n_params ? b->n_params : 1);
  if (b->size_values) sh_free(ctx, b->size_values, (b->n_sizes + 1) * sizeof(int64_t));
  if (b->params) sh_free(ctx, b->params, np * sizeof(sheaf_param));
  if (b->table_rows) sh_free(ctx, b->table_rows, np * sizeof(int64_t));
  if (b->word_rank) sh_free(ctx, b->word_rank, rank_bytes(b->vocab));
  sh_lang_bind_kernels_free(ctx, b);
  memset(b, 0, sizeof *b);
}

int64_t sh_lang_word_row(const sh_lang_bind *b, int p, int64_t w) {
  sh_word_ids words = sh_word_ids_of_rows(b->vocab);
  int64_t rows = b->table_rows[p], id = sh_word_id(words, w);
  if (id >= words.n_ids) return rows - 1; /* <unk> */
  if (rows > words.n_ids) return id < rows - 1 ? id : rows - 1;
  int64_t r = b->word_rank ? b->word_rank[id] : id; /* a capped table */
  return r < rows - 1 ? r : rows - 1;
}

sheaf_status sh_lang_bind_model(const sh_module *m, sheaf_model *model,
                                const sh_lang_bind_opts *opts, sh_lang_bind *out) {
  sheaf_ctx *ctx = m->ctx;
  memset(out, 0, sizeof *out);
  uint32_t nv = m->sizes.n;
  out->n_sizes = nv;
  out->n_params = m->n_params;
  out->size_values = sh_alloc(ctx, (nv + 1) * sizeof(int64_t), 16);
  out->params = sh_alloc(ctx, (size_t)(m->n_params ? m->n_params : 1) * sizeof(sheaf_param), 16);
  out->table_rows = sh_alloc(ctx, (size_t)(m->n_params ? m->n_params : 1) * sizeof(int64_t), 16);
  bool *is_table = sh_alloc(ctx, (size_t)m->n_params + 1, 16);
  const sheaf_st_file *wf = opts->weights_file;
  sheaf_st_file *opened = NULL; /* wf when the binder opened it */
  sh_buf msg;
  sh_buf_init(&msg, ctx);
  sheaf_status st = SHEAF_OK;
  if (!out->size_values || !out->params || !out->table_rows || !is_table) {
    st = SHEAF_ERR_NOMEM;
    goto done;
  }
  int64_t *val = out->size_values;
  memset(val, 0, (nv + 1) * sizeof(int64_t));
  memset(is_table, 0, (size_t)m->n_params + 1);
  memset(out->table_rows, 0, (size_t)(m->n_params ? m->n_params : 1) * sizeof(int64_t));
  for (uint32_t v = 1; v <= nv; v++)
    if (m->sizes.v[v].kind == SH_SV_GLOBAL && m->sizes.v[v].has_value) val[v] = m->sizes.v[v].value;
  for (int i = 0; i < opts->n_overrides; i++) {
    bool found = false;
    for (uint32_t v = 1; v <= nv; v++) {
      if (m->sizes.v[v].kind != SH_SV_GLOBAL) continue;
      if (strcmp(sh_sym_name(&m->syms, m->sizes.v[v].name), opts->override_name[i])) continue;
      const sh_sizevar *sv = &m->sizes.v[v];
      if (sv->has_value && sv->value != opts->override_value[i]) {
        st = sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                     "--size %s=%lld: %s:%u:%u fixes %s = %lld (change that declaration instead)",
                     opts->override_name[i], (long long)opts->override_value[i], m->diags.file,
                     (unsigned)sv->span.line, (unsigned)sv->span.col, opts->override_name[i],
                     (long long)sv->value);
        goto done;
      }
      val[v] = opts->override_value[i];
      found = true;
    }
    if (!found) {
      st = sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "--size %s: the model has no size '%s'",
                   opts->override_name[i], opts->override_name[i]);
      goto done;
    }
  }
  for (int f = 0; f < m->n_fns; f++) find_lookups(m->fns[f]->body, is_table, 0);
  if (opts->weights && !wf) {
    st = sheaf_st_open(ctx, opts->weights, &opened);
    if (st != SHEAF_OK) goto done;
    wf = opened;
  }
  if (wf) {
    for (size_t i = 0; i < sheaf_st_metadata_count(wf); i++)
      if (!strcmp(sheaf_st_metadata_key(wf, i), "sheaf.vocab"))
        snprintf(out->vocab_fp, sizeof out->vocab_fp, "%s", sheaf_st_metadata_value(wf, i));
  }
  /* solve sizes from shapes until nothing changes */
  for (bool progress = true; progress;) {
    progress = false;
    for (int p = 0; p < m->n_params; p++) {
      const sh_param_decl *pp = m->params[p];
      const sh_type *t = pp->type;
      if (wf) {
        long k = sheaf_st_find(wf, sh_sym_name(&m->syms, pp->name));
        if (k >= 0 && sheaf_st_rank(wf, (size_t)k) == t->n) {
          const int64_t *sh = sheaf_st_shape(wf, (size_t)k);
          for (int d = 0; d < t->n; d++)
            if (eval_known(&t->dims[d], val) < 0 && solve(&t->dims[d], sh[d], val)) progress = true;
        }
      }
      if (is_table[p] && opts->vocab > 0 && eval_known(&t->dims[0], val) < 0 &&
          solve(&t->dims[0], opts->vocab, val))
        progress = true;
    }
  }
  /* declare */
  bool missing = false;
  for (int p = 0; p < m->n_params; p++) {
    const sh_param_decl *pp = m->params[p];
    const sh_type *t = pp->type;
    int64_t shape[2] = {0, 0};
    for (int d = 0; d < t->n; d++) {
      shape[d] = eval_known(&t->dims[d], val);
      if (shape[d] <= 0 && all_known(&t->dims[d], val)) { /* e.g. N - 8 with N = 4 */
        char why[64];
        snprintf(why, sizeof why, "is %lld, not a positive size", (long long)shape[d]);
        st = bad_dim(m, pp, d, val, why);
        goto done;
      }
      if (shape[d] > INT32_MAX) {
        st = bad_dim(m, pp, d, val, "is more than a tensor dimension can hold (2147483647)");
        goto done;
      }
      if (shape[d] <= 0) {
        for (int k = 0; k < t->dims[d].n; k++)
          for (int j = 0; j < t->dims[d].t[k].deg; j++) {
            uint32_t v = t->dims[d].t[k].var[j];
            if (val[v] != 0) continue;
            sh_buf_printf(&msg, "%s%s", missing ? ", " : "", sh_sym_name(&m->syms, m->sizes.v[v].name));
            missing = true;
            val[v] = -1; /* listed once */
          }
      }
    }
    if (missing) continue;
    double bytes = sizeof(float) * (double)shape[0] * (double)(t->n == 2 ? shape[1] : 1);
    st = sh_check_budget(ctx, bytes, "%s:%u:%u: parameter '%s' of shape [%lld%s%.0lld]",
                         m->diags.file, (unsigned)pp->span.line, (unsigned)pp->span.col,
                         sh_sym_name(&m->syms, pp->name), (long long)shape[0], t->n == 2 ? ", " : "",
                         (long long)(t->n == 2 ? shape[1] : 0));
    if (st != SHEAF_OK) goto done;
    st = sheaf_model_param(model, sh_sym_name(&m->syms, pp->name), t->n, shape, param_init(pp, is_table[p]),
                           &out->params[p]);
    if (st == SHEAF_OK && pp->plus) st = plus_identity(m, model, pp, out->params[p], shape, false);
    if (st != SHEAF_OK) goto done;
  }
  if (missing && wf) { /* say where the weights file should have had them */
    const char *wname = opts->weights ? opts->weights : sh_st_file_name(wf);
    sh_buf why;
    sh_buf_init(&why, ctx);
    int said = 0;
    for (int p = 0; p < m->n_params && said < 4; p++) {
      const sh_param_decl *pp = m->params[p];
      bool unknown = false;
      for (int d = 0; d < pp->type->n; d++) unknown |= eval_known(&pp->type->dims[d], val) < 0;
      if (!unknown) continue;
      const char *name = sh_sym_name(&m->syms, pp->name);
      long k = sheaf_st_find(wf, name);
      sh_buf_printf(&why, "%s%s:%u:%u: parameter '%s' ", said ? "; " : "", m->diags.file,
                    (unsigned)pp->span.line, (unsigned)pp->span.col, name);
      sh_type_print(&why, &m->sizes, &m->syms, pp->type);
      if (k < 0)
        sh_buf_printf(&why, " is not in %s", wname);
      else
        sh_buf_printf(&why, " has rank %d in %s", (int)sheaf_st_rank(wf, (size_t)k), wname);
      said++;
    }
    st = sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                 "unknown sizes: %s, which the weights file would fix: %s (or give a 'size' "
                 "declaration or --size NAME=VALUE)",
                 msg.data ? (const char *)msg.data : "", why.data ? (const char *)why.data : "");
    sh_buf_free(&why);
    goto done;
  }
  if (missing) {
    st = sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                 "unknown sizes: %s (give a weights file, a 'size' declaration or --size NAME=VALUE)",
                 msg.data ? (const char *)msg.data : "");
    goto done;
  }
  for (int p = 0; p < m->n_params; p++)
    if (is_table[p]) {
      int64_t rows = out->table_rows[p] = eval_known(&m->params[p]->type->dims[0], val);
      if (opts->vocab <= 0 && (out->vocab == 0 || rows < out->vocab)) out->vocab = rows;
    }
  if (opts->vocab > 0) out->vocab = opts->vocab;
  if (opts->word_rank && out->vocab > 1) {
    out->word_rank = sh_alloc(ctx, rank_bytes(out->vocab), 16);
    if (!out->word_rank) {
      st = SHEAF_ERR_NOMEM;
      goto done;
    }
    memcpy(out->word_rank, opts->word_rank, rank_bytes(out->vocab));
  }
  if (wf) st = sheaf_model_load_st(model, wf);
  else st = sheaf_model_seed(model, opts->seed);
  for (int p = 0; p < m->n_params && st == SHEAF_OK && !wf; p++)
    if (m->params[p]->plus) {
      int rank;
      const int64_t *shape;
      if (sheaf_model_param_data(model, out->params[p], &rank, &shape))
        st = plus_identity(m, model, m->params[p], out->params[p], shape, true);
    }
  if (st == SHEAF_OK) st = sh_lang_bind_kernels(m, out);
done:
  sheaf_st_close(opened);
  sh_buf_free(&msg);
  if (is_table) sh_free(ctx, is_table, (size_t)m->n_params + 1);
  if (st != SHEAF_OK) sh_lang_bind_free(ctx, out);
  return st;
}
