/*
 * linear.c — the linearized mode's executor: creates the model's kernels
 * (check, coarsen, emit, JIT-compile), then per batch runs the inspector
 * and, for each (height, function, arm) range in height order, copies the
 * range's children's state rows and looked-up table rows into dense inputs
 * and makes one prepared kernel call (one plan per row count; parameters
 * declared weights, packed once) that writes the function's state rows.
 * No graph, no buckets, no per-node runtime work. A function's rows that a
 * direct arm makes (its results are looked-up rows, a leaf's emb[w]) are
 * not copied: the rows' table addresses are kept (alias) and read where
 * the callers' inputs are filled. On a pool of T >= 2 threads a batch runs
 * as parts over consecutive instances, one a thread, each with its own
 * inspector output and states and serial kernel calls (the kernels are
 * shared); else the kernels split their loops over the context's pool.
 */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/pool.h"
#include "compile/linear_int.h"
#include "lang/kernel.h"

/* JIT-compiles arm a's kernel; its parameters declared weights (packed once). */
static sheaf_status compile_arm(sh_lin *L, sh_lin_arm *a) {
  if (a->has_mat) return sh_lin_mat_compile(L, a); /* matrices per sentence: stages (linear_mat.c) */
  sheaf_status st = sheaf_kernel_compile(L->ctx, a->src, a->src_len, a->name, &a->k);
  if (st)
    return sh_fail(L->ctx, st, "linearized mode: the kernel of %s does not compile: %s\n%s", a->name,
                   sheaf_ctx_last_error(L->ctx), a->src);
  for (int p = 0; p < a->n_params; p++) sheaf_kernel_set_weight_version(a->k, a->n_inputs + p, 1);
  return SHEAF_OK;
}

/* Every result of arm a is an input as it is (a leaf's emb[w], childsum's
 * main): the executor copies it to the state, with no kernel to compile. */
static bool arm_direct(const sh_lin_arm *a) {
  for (int j = 0; j < a->n_out; j++)
    if (a->nodes[a->out[j]].op != SH_LIN_IN) return false;
  return true;
}

static sheaf_status lin_new(const sh_module *m, sheaf_model *model, const sh_lang_bind *bind, char *why, size_t cap,
                            sh_lin **out) {
  *out = NULL;
  if (why && cap) why[0] = 0;
  if (!m || !bind) return SHEAF_ERR_INVALID_ARG;
  sh_lin *L = calloc(1, sizeof *L);
  if (!L) return sh_fail(m->ctx, SHEAF_ERR_NOMEM, "out of memory");
  L->ctx = m->ctx, L->m = m, L->bind = bind, L->model = model, L->why = why, L->why_cap = cap;
  L->dec_fn = -1, L->dec_est_fn = -1;
  const char *pl = getenv("SHEAF_LINEAR_PLANS"); /* 1: a prepared call per row count (measured: linear.h) */
  L->plans = pl && pl[0] == '1';
  const char *sl = getenv("SHEAF_LINEAR_SHARE_LEAVES"); /* 0: every leaf its own row (measured: COMPILER.md) */
  L->share_leaves = !(sl && sl[0] == '0');
  const char *sp = getenv("SHEAF_LINEAR_SPLIT"); /* 0: one part, kernels split over the pool (measured: linear.h) */
  L->split = !(sp && sp[0] == '0');
  sh_buf_init(&L->all_src, L->ctx);
  *out = L;
  sheaf_status st = sh_lin_check_program(L);
  if (!st) st = sh_lin_coarsen(L);
  if (st == SHEAF_ERR_UNSUPPORTED && why) sh_fail(L->ctx, st, "%s", why);
  return st;
}

/* The front end of sheaf_kernel_compile (parse and check, no C compiler)
 * on an arm's kernel: a kernel the translation got wrong is a refusal here,
 * not a "yes" that sh_lin_create then fails to compile. */
static sheaf_status check_kernel(sh_lin *L, const sh_lin_arm *a) {
  sh_module km;
  sheaf_status st = sh_kernel_source_compile(&km, L->ctx, "kernel", a->src, a->src_len);
  if (st && st != SHEAF_ERR_NOMEM)
    st = sh_lin_refuse(L, a->span, "the generated kernel %s does not check: %s", a->name, sheaf_ctx_last_error(L->ctx));
  sh_module_free(&km);
  return st;
}

sheaf_status sh_lin_check(const sh_module *m, const sh_lang_bind *bind, char *why, size_t cap) {
  sh_lin *L;
  sheaf_status st = lin_new(m, NULL, bind, why, cap, &L);
  for (int f = 0; L && !st && f < L->n_fns; f++)
    for (int a = 0; !st && a < L->fns[f].n_arms; a++)
      if (!(st = sh_lin_emit(L, &L->fns[f], L->fns[f].arms[a]))) st = check_kernel(L, L->fns[f].arms[a]);
  if (st == SHEAF_ERR_UNSUPPORTED && why) sh_fail(m->ctx, st, "%s", why);
  sh_lin_free(L);
  return st;
}

sheaf_status sh_lin_create(const sh_module *m, sheaf_model *model, const sh_lang_bind *bind, sh_lin **out,
                           char *why, size_t cap) {
  sh_lin *L;
  *out = NULL;
  if (!model) return SHEAF_ERR_INVALID_ARG;
  sheaf_status st = lin_new(m, model, bind, why, cap, &L);
  uint64_t t0 = sheaf_time_ns();
  for (int f = 0; L && !st && f < L->n_fns; f++)
    for (int ai = 0; !st && ai < L->fns[f].n_arms; ai++) {
      sh_lin_arm *a = L->fns[f].arms[ai];
      if ((st = sh_lin_emit(L, &L->fns[f], a))) break;
      sh_buf_printf(&L->all_src, "# %s, arm %d (%s:%u)\n%s\n", sh_sym_name(&m->syms, L->fns[f].fn->name), ai,
                    m->diags.file ? m->diags.file : "model", (unsigned)a->span.line, a->src);
      if (!arm_direct(a) && (st = compile_arm(L, a))) break;
    }
  if (L && !st) st = sh_lin_eager_prepare(L); /* eager children's products (linear_eager.c) */
  if (L) L->compile_s = (double)(sheaf_time_ns() - t0) * 1e-9;
  if (!st && sh_buf_status(&L->all_src)) st = sh_fail(m->ctx, SHEAF_ERR_NOMEM, "out of memory");
  if (st == SHEAF_ERR_UNSUPPORTED && why && why[0]) sh_fail(m->ctx, st, "%s", why);
  if (st) {
    sh_lin_free(L);
    return st;
  }
  *out = L;
  return SHEAF_OK;
}

/* What a run leaves in L (its own in a part; a part borrows the rest). */
static void free_run_state(sh_lin *L) {
  for (int f = 0; f < L->n_fns; f++)
    for (int c = 0; c < SH_LIN_MAX_COMPS; c++) {
      free(L->state[f][c]);
      free(L->alias[f][c]);
      L->state[f][c] = NULL, L->alias[f][c] = NULL;
    }
  free(L->groups);
  free(L->group_buf);
  free(L->root_row);
  free(L->out_rows);
  free(L->scratch);
  free(L->mat_mem);
  free(L->dec_ctx);
  free(L->dec_done);
  free(L->dec_est);
  free(L->dec_est_done);
  free(L->dec_tmp);
  sh_lin_scan_free(L);
  sh_lin_eager_free_run(L);
  for (int p = 0; p < SH_LIN_MAX_PARTS; p++)
    if (L->parts[p]) {
      free_run_state(L->parts[p]);
      sh_free(L->ctx, L->parts[p], sizeof *L->parts[p]);
      L->parts[p] = NULL;
    }
}

void sh_lin_free(sh_lin *L) {
  if (!L) return;
  free_run_state(L);
  sh_lin_eager_free(L);
  for (int f = 0; f < L->n_fns; f++) {
    for (int ai = 0; ai < L->fns[f].n_arms; ai++) {
      sh_lin_arm *a = L->fns[f].arms[ai];
      for (int32_t c = 0; c < a->cap_plans; c++) sheaf_kernel_plan_free(a->plans[c]);
      free(a->plans);
      sheaf_kernel_free(a->k);
      sh_lin_mat_free(a);
      free(a->src);
      free(a);
    }
  }
  sh_buf_free(&L->all_src);
  free(L);
}

const char *sh_lin_kernel_source(const sh_lin *L) { return L ? sh_buf_cstr(&L->all_src) : ""; }
double sh_lin_compile_seconds(const sh_lin *L) { return L ? L->compile_s : 0; }
int sh_lin_n_kernels(const sh_lin *L) {
  int n = 0;
  for (int f = 0; L && f < L->n_fns; f++) n += L->fns[f].n_arms;
  for (int f = 0; L && f < L->n_fns; f++) /* an arm with matrices per sentence: a kernel per stage */
    for (int ai = 0; ai < L->fns[f].n_arms; ai++) n += sh_lin_mat_n_kernels(L->fns[f].arms[ai]) - !!L->fns[f].arms[ai]->mat;
  return n + sh_lin_eager_kernels(L);
}

int sh_lin_n_outputs(const sh_lin *L) { return L && L->n_fns ? L->fns[0].n_comp : 0; }
void sh_lin_output_shape(const sh_lin *L, int comp, int *rank, int64_t dims[2]) {
  *rank = L->fns[0].comp_rank[comp];
  dims[0] = L->fns[0].comp_d[comp][0];
  dims[1] = L->fns[0].comp_d[comp][1];
}
/* The part that ran instance *i of the last run (*i made relative to it). */
static const sh_lin *part_of(const sh_lin *L, int32_t *i) {
  if (!L || !L->n_parts || *i < 0 || *i >= L->n_inst) return L;
  int p = 0;
  while (p + 1 < L->n_parts && *i >= L->part_first[p + 1]) p++;
  *i -= L->part_first[p];
  return L->parts[p];
}

const float *sh_lin_output(const sh_lin *L, int32_t i, int comp) {
  if (!L || i < 0 || i >= L->n_inst || comp < 0 || comp >= L->fns[0].n_comp) return NULL;
  L = part_of(L, &i);
  return L->state[0][comp] + (size_t)L->root_row[i] * (size_t)L->fns[0].comp_width[comp];
}
int32_t sh_lin_root_row(const sh_lin *L, int32_t i) {
  return L && !L->n_parts && i >= 0 && i < L->n_inst ? L->root_row[i] : -1;
}

int sh_lin_n_groups(const sh_lin *L) { return L ? L->n_groups : 0; }
bool sh_lin_group(const sh_lin *L, int gi, sh_lin_group_view *out) {
  if (!L || gi < 0 || gi >= L->n_groups) return false;
  const sh_lin_grp *g = &L->groups[gi];
  const sh_lin_arm *a = L->fns[g->fn].arms[g->arm];
  static _Thread_local int call_fn[SH_LIN_MAX_CALLS];
  for (int c = 0; c < a->n_calls; c++) call_fn[c] = a->calls[c].fn;
  *out = (sh_lin_group_view){g->fn, g->arm, g->height, g->start, g->count, a->n_fields, a->n_calls,
                             (const int32_t *const *)g->fields, (const int32_t *const *)g->calls, call_fn,
                             g->n_kids, g->n_kid_rows};
  return true;
}

static int group_args(const sh_lin_arm *a, int32_t count, void *const *data, sheaf_kernel_arg *args,
                      int64_t (*shapes)[3]);
static int ragged_args(const sh_lin_arm *a, const sh_lin_grp *g, void *const *data, sheaf_kernel_arg *args,
                       int64_t (*shapes)[3]);

/* The plan of arm a for count rows (made on first use). */
static sheaf_status plan_for(sh_lin *L, sh_lin_arm *a, int32_t count, sheaf_kernel_plan **out) {
  if (count >= a->cap_plans) {
    int32_t cap = count + 1 > 2 * a->cap_plans ? count + 1 : 2 * a->cap_plans;
    sheaf_kernel_plan **p = realloc(a->plans, (size_t)cap * sizeof *p);
    if (!p) return sh_fail(L->ctx, SHEAF_ERR_NOMEM, "out of memory");
    memset(p + a->cap_plans, 0, (size_t)(cap - a->cap_plans) * sizeof *p);
    a->plans = p, a->cap_plans = cap;
  }
  if (!a->plans[count]) {
    sheaf_kernel_arg args[SH_LIN_MAX_NODES + 80];
    int64_t shapes[SH_LIN_MAX_NODES + 80][3];
    int n_args = group_args(a, count, NULL, args, shapes);
    sheaf_status st = sheaf_kernel_plan_make(a->k, args, n_args, &a->plans[count]);
    if (st) return st;
  }
  *out = a->plans[count];
  return SHEAF_OK;
}

/* The kernel's arguments for count rows (data: NULL or the pointers). */
static int group_args(const sh_lin_arm *a, int32_t count, void *const *data, sheaf_kernel_arg *args,
                      int64_t (*shapes)[3]) {
  {
    int k = 0;
    for (int i = 0; i < a->n_inputs; i++, k++) {
      const sh_lin_node *n = &a->nodes[a->inputs[i]];
      shapes[k][0] = count, shapes[k][1] = n->d[0], shapes[k][2] = n->d[1];
      int rank = 1 + n->rank;
      if (n->rank == 2 && !a->input_3d[i]) /* flat: [count·R, C] */
        shapes[k][0] = count * n->d[0], shapes[k][1] = n->d[1], rank = 2;
      args[k] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, NULL, (size_t)count * (size_t)(n->d[0] * n->d[1]), rank,
                                   shapes[k]};
    }
    for (int i = 0; i < a->n_params; i++, k++) {
      const sh_lin_node *n = &a->nodes[a->params[i]];
      shapes[k][0] = n->d[0], shapes[k][1] = n->d[1];
      args[k] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, NULL, (size_t)(n->d[0] * n->d[1]), n->rank, shapes[k]};
    }
    for (int j = 0; j < a->n_out; j++, k++) {
      const sh_lin_node *n = &a->nodes[a->out[j]];
      shapes[k][0] = n->rank == 2 ? count * n->d[0] : count, shapes[k][1] = n->rank == 2 ? n->d[1] : n->d[0];
      args[k] = (sheaf_kernel_arg){SHEAF_KERNEL_F32, NULL, (size_t)count * (size_t)(n->d[0] * n->d[1]), 2,
                                   shapes[k]};
    }
    for (int i = 0; data && i < k; i++) args[i].data = data[i];
    return k;
  }
}

/* A ragged arm's arguments (dependency trees): K (the child counts), the
 * inputs (per-child ones packed: the group's n_kid_rows rows), parameters,
 * outputs; data[0] is K. */
static int ragged_args(const sh_lin_arm *a, const sh_lin_grp *g, void *const *data, sheaf_kernel_arg *args,
                       int64_t (*shapes)[3]) {
  shapes[0][0] = g->count;
  args[0] = (sheaf_kernel_arg){SHEAF_KERNEL_I32, data[0], (size_t)g->count, 1, shapes[0]};
  int k = 1 + group_args(a, g->count, data + 1, args + 1, shapes + 1);
  for (int i = 0; i < a->n_inputs; i++) {
    const sh_lin_node *n = &a->nodes[a->inputs[i]];
    if (!n->kid) continue;
    shapes[1 + i][0] = g->count, shapes[1 + i][1] = 0, shapes[1 + i][2] = n->d[0];
    args[1 + i].rank = 3, args[1 + i].numel = (size_t)g->n_kid_rows * (size_t)n->d[0];
  }
  return k;
}

/* Whether arm a's results are single segments read as they are (a
 * looked-up row, a child's row): its rows can be aliases. */
static bool arm_aliases(const sh_lin_arm *a) {
  for (int j = 0; j < a->n_out; j++) {
    const sh_lin_node *n = &a->nodes[a->out[j]];
    if (n->op != SH_LIN_IN || n->n_segs != 1 || n->segs[0].zero) return false;
  }
  return a->n_out > 0;
}

static sheaf_status ensure_states(sh_lin *L) {
  for (int f = 0; f < L->n_fns; f++) {
    size_t rows = (size_t)L->n_rows[f];
    if (rows <= L->state_cap[f]) continue;
    size_t cap = rows > 2 * L->state_cap[f] ? rows : 2 * L->state_cap[f];
    L->state_cap[f] = 0; /* until every array is there */
    L->has_alias[f] = false;
    /* binary trees only: the sequence and dependency-tree paths (linear_reduce.c, linear_mat.c, the ragged
     * arms) read L->state directly */
    for (int a = 0; f > 0 && !L->seq && !L->dep && a < L->fns[f].n_arms; a++)
      L->has_alias[f] |= arm_aliases(L->fns[f].arms[a]);
    for (int c = 0; c < L->fns[f].n_comp; c++) {
      free(L->state[f][c]);
      free(L->alias[f][c]);
      L->alias[f][c] = NULL;
      size_t bytes = (cap * (size_t)L->fns[f].comp_width[c] * sizeof(float) + 63) & ~(size_t)63;
      if (!(L->state[f][c] = aligned_alloc(64, bytes))) return sh_fail(L->ctx, SHEAF_ERR_NOMEM, "out of memory: states");
      if (L->has_alias[f] && !(L->alias[f][c] = calloc(cap, sizeof *L->alias[f][c])))
        return sh_fail(L->ctx, SHEAF_ERR_NOMEM, "out of memory: states");
    }
    L->state_cap[f] = cap;
  }
  return SHEAF_OK;
}

/* Where segment sg of an input of group g's row r is: a table's row or a
 * callee's row (its alias, or its state row). */
static sheaf_status seg_src(sh_lin *L, const sh_lin_arm *a, const sh_lin_grp *g, const sh_lin_seg *sg, int32_t r,
                            const float **src) {
  if (sg->lookup) {
    int rank;
    const int64_t *shape;
    const float *tab = sheaf_model_param_values(L->model, L->bind->params[sg->param], &rank, &shape);
    if (g->fields[sg->field][r] < 0) /* ws[i - 1] at i = 0 without the if that guards it */
      return sh_fail(L->ctx, SHEAF_ERR_INVALID_ARG, "linear run: a word index outside its sentence");
    int64_t row = sg->raw ? g->fields[sg->field][r] : sh_lang_word_row(L->bind, sg->param, g->fields[sg->field][r]);
    if (!tab || row < 0 || row >= shape[0])
      return sh_fail(L->ctx, SHEAF_ERR_INVALID_ARG, "linear run: word row %lld outside its table", (long long)row);
    *src = tab + (size_t)row * (size_t)sg->width;
    return SHEAF_OK;
  }
  const sh_lin_call *c = &a->calls[sg->call];
  int32_t row = g->calls[sg->call][r];
  const float *const *al = L->alias[c->fn][sg->comp];
  *src = al && al[row] ? al[row] : L->state[c->fn][sg->comp] + (size_t)row * (size_t)sg->width;
  return SHEAF_OK;
}

/* Copies the segments of input node n for row r of group g to dst. */
static sheaf_status fill_row(sh_lin *L, const sh_lin_arm *a, const sh_lin_grp *g, const sh_lin_node *n, int32_t r,
                             float *dst) {
  for (int q = 0; q < n->n_segs; q++) {
    const sh_lin_seg *sg = &n->segs[q];
    const float *src = NULL;
    if (sg->chars || sg->hx) { /* token records: a token's chars, its host integer code (linear_rec.c) */
      sheaf_status st = sg->chars ? sh_lin_rec_chars(L, g, sg, r, dst) : sh_lin_rec_hx(L, a, g, sg->hx - 1, r, dst);
      if (st) return st;
      dst += sg->width;
      continue;
    }
    if (!sg->lookup && (sg->init_zero || sg->init_call || sg->att)) { /* a decoder's (linear_dec.c) */
      sheaf_status st = sh_lin_dec_fill(L, a, g, sg, r, dst);
      if (st) return st;
      dst += sg->width;
      continue;
    }
    if (sg->reduce) { /* a sentence's max / mean / sum over a map's rows (linear_reduce.c) */
      sheaf_status st = sh_lin_reduce_rows(L, a, g, sg, r, dst);
      if (st) return st;
      dst += sg->width;
      continue;
    }
    if (sg->zero || (sg->edge && g->fields[sg->field][r] < 0)) {
      memset(dst, 0, (size_t)sg->width * sizeof(float));
      dst += sg->width;
      continue;
    }
    sheaf_status st = seg_src(L, a, g, sg, r, &src);
    if (st) return st;
    memcpy(dst, src, (size_t)sg->width * sizeof(float));
    dst += sg->width;
  }
  return SHEAF_OK;
}

sheaf_status sh_lin_fill_input(sh_lin *L, const sh_lin_arm *a, const sh_lin_grp *g, const sh_lin_node *n, int32_t r,
                               float *dst) {
  return fill_row(L, a, g, n, r, dst);
}

/* A segment read as it is, a table's row by a word or a callee's row (no
 * zeros, edge, reduction, record or decoder code): fill_rows resolves its
 * source once a group, not once a row. */
static bool seg_plain(const sh_lin_seg *sg) {
  return !sg->chars && !sg->hx && !sg->reduce && !sg->zero && !sg->edge &&
         (sg->lookup || !(sg->init_zero || sg->init_call || sg->att));
}

/* Where a plain segment's rows are: a table (tab, tab_rows) or a callee's
 * state and aliases. */
typedef struct seg_base {
  const float *tab, *state;
  int64_t tab_rows;
  const float *const *al;
  const int32_t *idx; /* the group's word fields or callee rows */
} seg_base;

static sheaf_status seg_base_of(sh_lin *L, const sh_lin_arm *a, const sh_lin_grp *g, const sh_lin_seg *sg,
                                seg_base *b) {
  memset(b, 0, sizeof *b);
  if (sg->lookup) {
    int rank;
    const int64_t *shape;
    b->tab = sheaf_model_param_values(L->model, L->bind->params[sg->param], &rank, &shape);
    if (!b->tab) return sh_fail(L->ctx, SHEAF_ERR_INVALID_ARG, "linear run: a table without values");
    b->tab_rows = shape[0], b->idx = g->fields[sg->field];
    return SHEAF_OK;
  }
  const sh_lin_call *c = &a->calls[sg->call];
  b->state = L->state[c->fn][sg->comp], b->al = L->alias[c->fn][sg->comp], b->idx = g->calls[sg->call];
  return SHEAF_OK;
}

/* Row r's source of a plain segment (seg_src's, from its base), or NULL
 * where seg_src fails (a word outside its sentence or its table). */
static inline const float *seg_addr(const sh_lin *L, const seg_base *b, const sh_lin_seg *sg, int32_t r) {
  if (!b->tab) {
    int32_t row = b->idx[r];
    return b->al && b->al[row] ? b->al[row] : b->state + (size_t)row * (size_t)sg->width;
  }
  int32_t w = b->idx[r];
  if (w < 0) return NULL;
  int64_t row = sg->raw ? w : sh_lang_word_row(L->bind, sg->param, w);
  return row >= 0 && row < b->tab_rows ? b->tab + (size_t)row * (size_t)sg->width : NULL;
}

/* Rows 0 .. rows - 1 of input node n of group g into dst (w floats a row):
 * fill_row's copies, with the sources of plain segments resolved once a
 * group (prefetching the rows 4 ahead measured no gain: COMPILER.md). */
static sheaf_status fill_rows(sh_lin *L, const sh_lin_arm *a, const sh_lin_grp *g, const sh_lin_node *n,
                              int32_t rows, float *dst, size_t w) {
  seg_base base[SH_LIN_MAX_SEGS];
  bool plain = n->n_segs <= SH_LIN_MAX_SEGS;
  for (int q = 0; plain && q < n->n_segs; q++) plain = seg_plain(&n->segs[q]);
  for (int q = 0; plain && q < n->n_segs; q++) {
    sheaf_status st = seg_base_of(L, a, g, &n->segs[q], &base[q]);
    if (st) return st;
  }
  if (!plain) {
    for (int32_t r = 0; r < rows; r++) {
      sheaf_status st = fill_row(L, a, g, n, r, dst + (size_t)r * w);
      if (st) return st;
    }
    return SHEAF_OK;
  }
  for (int32_t r = 0; r < rows; r++) {
    float *d = dst + (size_t)r * w;
    for (int q = 0; q < n->n_segs; q++) {
      const sh_lin_seg *sg = &n->segs[q];
      const float *src;
      if (!(src = seg_addr(L, &base[q], sg, r))) return seg_src(L, a, g, sg, r, &src); /* names the row */
      memcpy(d, src, (size_t)sg->width * sizeof(float));
      d += sg->width;
    }
  }
  return SHEAF_OK;
}

static sheaf_status run_group(sh_lin *L, const sh_lin_grp *g) {
  sh_lin_fn *f = &L->fns[g->fn];
  sh_lin_arm *a = f->arms[g->arm];
  if (L->eager_on && a->eager) a = a->eager; /* its children's products computed earlier (linear_eager.c) */
  if (a->has_mat) return sh_lin_mat_run(L, g); /* matrices per sentence: stages (linear_mat.c) */
  int32_t count = g->count;
  bool direct = arm_direct(a); /* every result is an input as it is (a leaf's emb[w]): copied to the state */
  if (direct && L->has_alias[g->fn] && arm_aliases(a)) { /* not copied: where each row is */
    for (int j = 0; j < a->n_out; j++) {
      const sh_lin_seg *sg = &a->nodes[a->out[j]].segs[0];
      const float **al = &L->alias[g->fn][j][g->start];
      seg_base b;
      sheaf_status st = seg_plain(sg) ? seg_base_of(L, a, g, sg, &b) : SHEAF_OK;
      for (int32_t r = 0; !st && r < count; r++)
        if (!seg_plain(sg) || !(al[r] = seg_addr(L, &b, sg, r))) st = seg_src(L, a, g, sg, r, &al[r]);
      if (st) return st;
    }
    return SHEAF_OK;
  }
  for (int j = 0; L->has_alias[g->fn] && j < a->n_out; j++) /* rows in the state */
    memset(L->alias[g->fn][j] + g->start, 0, (size_t)count * sizeof *L->alias[g->fn][j]);
  for (int j = 0; direct && j < a->n_out; j++) {
    size_t w = (size_t)f->comp_width[j];
    sheaf_status st = fill_rows(L, a, g, &a->nodes[a->out[j]], count, L->state[g->fn][j] + (size_t)g->start * w, w);
    if (st) return st;
  }
  if (direct) return SHEAF_OK;
  if (!a->k) { /* a dependency arm for a child count first seen now */
    uint64_t t0 = sheaf_time_ns();
    sheaf_status st = compile_arm(L, a);
    L->compile_s += (double)(sheaf_time_ns() - t0) * 1e-9;
    if (st) return st;
  }
  size_t need = 0;
  for (int i = 0; i < a->n_inputs; i++) {
    const sh_lin_node *n = &a->nodes[a->inputs[i]];
    size_t rows = n->kid ? (size_t)g->n_kid_rows : (size_t)count;
    if (!a->input_3d[i]) need += (rows * (size_t)(n->d[0] * n->d[1]) + 15) & ~(size_t)15;
  }
  if (need > L->scratch_cap) {
    free(L->scratch);
    size_t cap = need > 2 * L->scratch_cap ? need : 2 * L->scratch_cap;
    if (!(L->scratch = aligned_alloc(64, cap * sizeof(float)))) {
      L->scratch_cap = 0;
      return sh_fail(L->ctx, SHEAF_ERR_NOMEM, "out of memory: the kernels' inputs");
    }
    L->scratch_cap = cap;
  }
  void *data_all[SH_LIN_MAX_NODES + 81];
  void **data = data_all + 1; /* data_all[0]: a ragged arm's K */
  data_all[0] = g->n_kids;
  int k = 0;
  float *s = L->scratch;
  for (int i = 0; i < a->n_inputs; i++, k++) {
    const sh_lin_node *n = &a->nodes[a->inputs[i]];
    size_t w = (size_t)(n->d[0] * n->d[1]);
    if (a->input_3d[i]) { /* the same rows read as [N, R, C]: read-only, so they share the copy */
      data[k] = data[k - 1];
      continue;
    }
    if (n->n_segs == 1 && n->segs[0].partial) { /* an eager product's rows, in place */
      data[k] = sh_lin_eager_rows(L, &n->segs[0], g->start);
      continue;
    }
    data[k] = s;
    int32_t rows = n->kid ? g->n_kid_rows : count; /* per-child: row r is the r-th child of the group's nodes */
    sheaf_status st = fill_rows(L, a, g, n, rows, s, w);
    if (st) return st;
    s += ((size_t)rows * w + 15) & ~(size_t)15;
  }
  for (int i = 0; i < a->n_params; i++, k++) {
    int rank;
    const int64_t *shape;
    union { const float *c; void *v; } u = {sheaf_model_param_values(L->model, L->bind->params[a->nodes[a->params[i]].param], &rank, &shape)};
    data[k] = u.v;
  }
  for (int j = 0; j < a->n_out; j++, k++)
    data[k] = L->state[g->fn][j] + (size_t)g->start * (size_t)f->comp_width[j];
  if (a->ragged) { /* its shapes depend on the child counts: no plan per row count */
    sheaf_kernel_arg args[SH_LIN_MAX_NODES + 81];
    int64_t shapes[SH_LIN_MAX_NODES + 81][3];
    int n_args = ragged_args(a, g, data_all, args, shapes);
    return sheaf_kernel_run(a->k, args, n_args);
  }
  if (!L->plans) { /* the default: measured as fast as plans (which share the kernel's packed weights) */
    sheaf_kernel_arg args[SH_LIN_MAX_NODES + 80];
    int64_t shapes[SH_LIN_MAX_NODES + 80][3];
    int n_args = group_args(a, count, data, args, shapes);
    return sheaf_kernel_run(a->k, args, n_args);
  }
  sheaf_kernel_plan *p = NULL;
  sheaf_status st = plan_for(L, a, count, &p);
  if (!st) st = sheaf_kernel_plan_run(p, data, k);
  return st;
}

/* One part's run (or the whole batch's): the inspector, the states, the groups. */
static sheaf_status run_trees(sh_lin *L, const sh_treebank *tb, int32_t first, int32_t n, sh_word_ids ids) {
  L->n_parts = 0;
  sheaf_status st = sh_lin_inspect(L, tb, first, n, ids);
  if (!st) st = ensure_states(L);
  if (!st) st = sh_lin_eager_plan(L);
  for (int g = 0; !st && g < L->n_groups; g++) {
    if (L->eager_on) st = sh_lin_eager_until(L, L->groups[g].height); /* the products due before its level */
    if (!st) st = run_group(L, &L->groups[g]);
  }
  return st;
}

static sheaf_status run_seqs(sh_lin *L, const int32_t *sent_off, const int32_t *sent_words, int32_t first, int32_t n,
                             sh_word_ids ids) {
  L->n_parts = 0;
  sheaf_status st = sh_lin_inspect_seq(L, sent_off + first, sent_words, n, ids);
  if (!st) st = ensure_states(L);
  for (int f = 1; !st && f < L->n_fns; f++) /* a step's row 0: the zero initial state */
    for (int c = 0; c < L->fns[f].n_comp; c++) memset(L->state[f][c], 0, (size_t)L->fns[f].comp_width[c] * sizeof(float));
  for (int g = 0; !st && g < L->n_groups; g++)
    if (L->groups[g].count > 0) st = run_group(L, &L->groups[g]);
  return st;
}

/* How many parts a batch of n instances runs as: 0 (one, L itself: the
 * kernels split their loops over the pool) or min(T, n / 2) for a pool of T
 * >= 2 threads. Not with plans (a plan runs on one thread at a time) nor
 * for dependency trees (arms compiled on first use). A part has its own
 * run state (states, scratch, the stages' buffers of matrices per
 * sentence); the arms and kernels are shared, read only. */
static int parts_for(const sh_lin *L, int32_t n) {
  if (!L->split || L->is_part || L->plans || L->dep || !L->ctx->pool) return 0;
  int T = sh_pool_threads(L->ctx->pool), p = T < n / 2 ? T : (int)(n / 2);
  p = p < SH_LIN_MAX_PARTS ? p : SH_LIN_MAX_PARTS;
  return p >= 2 ? p : 0;
}

/* Part p of L, made on first use: L's functions and kernels, its own run state. */
static sheaf_status part_get(sh_lin *L, int p) {
  if (L->parts[p]) return SHEAF_OK;
  sh_lin *P = sh_malloc(L->ctx, sizeof *P);
  if (!P) return SHEAF_ERR_NOMEM;
  memcpy(P, L, sizeof *P);
  P->n_groups = P->cap_groups = 0, P->groups = NULL, P->group_buf = NULL, P->group_buf_cap = 0;
  memset(P->n_rows, 0, sizeof P->n_rows), memset(P->state, 0, sizeof P->state);
  memset(P->state_cap, 0, sizeof P->state_cap), memset(P->alias, 0, sizeof P->alias);
  memset(P->has_alias, 0, sizeof P->has_alias);
  P->root_row = NULL, P->n_inst = P->cap_inst = 0, P->out_rows = NULL, P->scratch = NULL, P->scratch_cap = 0;
  P->mat_mem = NULL, P->mat_mem_cap = 0;
  P->dec_ctx = NULL, P->dec_done = NULL, P->dec_cap = 0, P->dec_fn = -1;
  P->dec_est = NULL, P->dec_est_done = NULL, P->dec_est_cap = 0, P->dec_est_fn = -1;
  P->dec_tmp = NULL, P->dec_tmp_cap = 0;
  P->scan = NULL, P->is_part = true, P->n_parts = 0, P->eager_run = NULL, P->eager_on = false;
  memset(P->parts, 0, sizeof P->parts);
  L->parts[p] = P;
  return SHEAF_OK;
}

typedef struct part_job {
  sh_lin *L;
  const sh_treebank *tb; /* trees, or sentences (off, words) */
  const int32_t *off, *words;
  const sh_lin_records *rec; /* token records (or NULL) */
  int32_t first;
  sh_word_ids ids;
  sheaf_status st[SH_LIN_MAX_PARTS];
} part_job;

static void part_task(void *arg, int64_t t, int tid) {
  (void)tid;
  part_job *J = arg;
  const sh_lin *L = J->L;
  int32_t a = J->first + L->part_first[t], n = L->part_first[t + 1] - L->part_first[t];
  L->parts[t]->rec = J->rec;
  J->st[t] = J->tb ? run_trees(L->parts[t], J->tb, a, n, J->ids) : run_seqs(L->parts[t], J->off, J->words, a, n, J->ids);
}

/* Instance i's weight in the split: its tree's nodes, its sentence's words + 1. */
static int64_t inst_weight(const part_job *J, int32_t i) {
  if (J->tb) return J->tb->tree_size[J->first + i];
  int64_t len = (int64_t)J->off[J->first + i + 1] - J->off[J->first + i];
  return (len > 0 ? len : 0) + 1;
}

/* Runs the batch as P parts of consecutive instances, about equal weights,
 * one a pool thread. */
static sheaf_status run_parts(sh_lin *L, part_job *J, int32_t n, int P) {
  L->n_parts = 0, L->n_inst = 0, L->n_groups = 0;
  for (int p = 0; p < P; p++) {
    sheaf_status st = part_get(L, p);
    if (st) return st;
  }
  int64_t W = 0, cum = 0;
  for (int32_t i = 0; i < n; i++) W += inst_weight(J, i);
  int32_t i = 0;
  L->part_first[0] = 0;
  for (int p = 1; p < P; p++) { /* each part one instance at least */
    cum += inst_weight(J, i++);
    while (i < n - (P - p) && cum + inst_weight(J, i) / 2 <= W * p / P) cum += inst_weight(J, i++);
    L->part_first[p] = i;
  }
  L->part_first[P] = n;
  sh_pool_run(L->ctx->pool, P, part_task, J, P);
  for (int p = 0; p < P; p++)
    if (J->st[p]) return J->st[p];
  L->n_parts = P, L->n_inst = n;
  return SHEAF_OK;
}

sheaf_status sh_lin_run(sh_lin *L, const sh_treebank *tb, int32_t first, int32_t n, sh_word_ids ids) {
  if (!L || !tb) return SHEAF_ERR_INVALID_ARG;
  if (L->seq) return sh_fail(L->ctx, SHEAF_ERR_INVALID_ARG, "linear run: the model takes sentences (sh_lin_run_seq)");
  int P = parts_for(L, n);
  if (!P || first < 0 || first + n > tb->n_trees) return run_trees(L, tb, first, n, ids); /* (which names a bad range) */
  part_job J = {.L = L, .tb = tb, .first = first, .ids = ids};
  return run_parts(L, &J, n, P);
}

bool sh_lin_takes_sequences(const sh_lin *L) { return L && L->seq; }
void sh_lin_set_split(sh_lin *L, bool on) {
  if (L) L->split = on;
}
int sh_lin_n_parts(const sh_lin *L) { return L ? L->n_parts : 0; }

sheaf_status sh_lin_run_seq(sh_lin *L, const int32_t *sent_off, const int32_t *sent_words, int32_t first, int32_t n,
                            sh_word_ids ids) {
  if (!L || !sent_off || !sent_words || first < 0) return SHEAF_ERR_INVALID_ARG;
  if (!L->seq) return sh_fail(L->ctx, SHEAF_ERR_INVALID_ARG, "linear run: the model takes trees (sh_lin_run)");
  if (L->records && !L->rec)
    return sh_fail(L->ctx, SHEAF_ERR_INVALID_ARG, "linear run: main takes token records (sh_lin_run_rec)");
  int P = parts_for(L, n);
  if (!P) return run_seqs(L, sent_off, sent_words, first, n, ids);
  part_job J = {.L = L, .off = sent_off, .words = sent_words, .rec = L->rec, .first = first, .ids = ids};
  return run_parts(L, &J, n, P);
}

bool sh_lin_takes_records(const sh_lin *L) { return L && L->records; }

sheaf_status sh_lin_run_rec(sh_lin *L, const int32_t *sent_off, const int32_t *sent_words, const sh_lin_records *rec,
                            int32_t first, int32_t n, sh_word_ids ids) {
  if (!L) return SHEAF_ERR_INVALID_ARG;
  if (!L->records)
    return sh_fail(L->ctx, SHEAF_ERR_INVALID_ARG, "linear run: main does not take token records (sh_lin_run_seq)");
  sheaf_status st = sh_lin_rec_check(L, rec);
  if (st) return st;
  L->rec = rec;
  st = sh_lin_run_seq(L, sent_off, sent_words, first, n, ids);
  L->rec = NULL;
  return st;
}

int32_t sh_lin_output_rows(const sh_lin *L, int32_t i) {
  if (!L || i < 0 || i >= L->n_inst) return 0;
  L = part_of(L, &i);
  return L->seq ? L->out_rows[i] : 1;
}

const float *sh_lin_output_row(const sh_lin *L, int32_t i, int32_t k, int comp) {
  if (!L || k < 0 || k >= sh_lin_output_rows(L, i) || comp < 0 || comp >= L->fns[0].n_comp) return NULL;
  L = part_of(L, &i);
  return L->state[0][comp] + ((size_t)L->root_row[i] + (size_t)k) * (size_t)L->fns[0].comp_width[comp];
}
