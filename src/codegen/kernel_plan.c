/*
 * kernel_plan.c — prepared calls of a compiled kernel (sheaf_kernel_plan_*,
 * include/sheaf_kernel.h; docs/CODEGEN.md, "Repeated calls").
 *
 * Make: every check of sheaf_kernel_run on the planned arguments (through
 * kernel_api.c: sh_kernel_plan_bind), the sizes bound, the tuned variant
 * picked; then what a run needs besides its arguments, allocated once and
 * owned by the plan: the argument table, the scratch of ragged
 * temporaries, the offsets of ragged tensors (their lengths copied: they
 * are part of the shape) and the blocks the generated code's temporaries
 * come from (sk_abi.alloc, called on the running thread only: no lock, a
 * plan runs on one thread at a time). Packed weights are the kernel's
 * (sh_kernel_plan_weight: a few kept copies keyed on input, pointer, shape
 * and version, reference-counted under the kernel's mutex), so plans of one
 * kernel at any row count share one copy of each weight; a plan's own
 * buffer (allocated on first need, kept) serves version 0 and the case
 * where every kept copy is being read.
 *
 * Run: the count and NULL pointers; for a kernel with lengths or packed
 * weights, the lengths' values against the plan's and each weight's
 * kept copy taken (the kernel's versions are re-read only when its version
 * counter moved: one atomic load per run); then the entry, then the copies
 * released.
 */
#include <string.h>

#include "codegen/kernel_api.h"
#include "codegen/tune.h"

#define P_BLOCKS 8

/* A weight the kernel reads packed: the kernel's kept copy this run holds
 * (slot), else the plan's own buffer (allocated on first need). */
typedef struct pweight {
  int input;
  int64_t d0, ld;    /* the weight's shape: rows, and its row stride (dimension 1) */
  float *own;        /* NULL until needed */
  size_t bytes;
  int slot;          /* the kernel's copy held by the run in progress, or -1 */
  long packs;        /* packs this plan's runs did */
} pweight;

/* A lengths input: its values when the plan was made. */
typedef struct plength {
  int input;
  int32_t *vals;
  size_t n;
} plength;

/* A temporary's storage kept across runs. */
typedef struct pblock {
  void *p;
  size_t bytes;
  bool used;
} pblock;

struct sheaf_kernel_plan {
  sheaf_kernel *K;     /* the kernel the plan was made on (weight versions) */
  sheaf_kernel *V;     /* the one that runs: K or a tuned variant */
  sheaf_ctx *ctx;
  const sh_kernel *k;
  sk_entry_fn fn;
  sh_tune_rec *rec;    /* the record that chose V (counted per run), or NULL */
  int n_args, n_in, n_ir;
  bool prep;           /* lengths or weights to look at per run */
  bool counted;        /* in K's count of live plans */
  unsigned char *need; /* n_args: 1 where the element count is not 0 (data must be given) */
  sk_arg *ir;          /* n_ir: arguments, scratch, offsets */
  int64_t sizes[64];
  void **extra;        /* scratch and offsets buffers (n_extra) */
  size_t *extra_bytes;
  int n_extra;
  pweight *w;
  int n_w;
  uint64_t epoch;      /* K's weight-version counter when ver was read */
  uint64_t *ver;       /* n_in: K's weight versions */
  plength *len;
  int n_len;
  pblock blocks[P_BLOCKS];
  sk_abi abi;
};

/* sk_abi.alloc / .free over the plan's blocks (the running thread only). */
static void *plan_alloc(void *user, size_t bytes) {
  sheaf_kernel_plan *P = user;
  pblock *best = NULL;
  for (int i = 0; i < P_BLOCKS; i++) {
    pblock *b = &P->blocks[i];
    if (b->p && !b->used && b->bytes >= bytes && (!best || b->bytes < best->bytes)) best = b;
  }
  if (best) {
    best->used = true;
    return best->p;
  }
  return sh_alloc(P->ctx, bytes ? bytes : 1, 64);
}

static void plan_free_block(void *user, void *p, size_t bytes) {
  sheaf_kernel_plan *P = user;
  if (!p) return;
  if (!bytes) bytes = 1;
  for (int i = 0; i < P_BLOCKS; i++)
    if (P->blocks[i].p == p) {
      P->blocks[i].used = false;
      return;
    }
  /* keep it: in an empty slot, else in place of the smallest free block smaller than it */
  pblock *slot = NULL;
  for (int i = 0; i < P_BLOCKS && !slot; i++)
    if (!P->blocks[i].p) slot = &P->blocks[i];
  for (int i = 0; i < P_BLOCKS && !slot; i++) {
    pblock *b = &P->blocks[i];
    if (!b->used && b->bytes < bytes && (!slot || b->bytes < slot->bytes)) slot = b;
  }
  if (slot) {
    void *drop = slot->p;
    size_t drop_bytes = slot->bytes;
    *slot = (pblock){p, bytes, false};
    p = drop, bytes = drop_bytes;
  }
  if (p) sh_free(P->ctx, p, bytes);
}

SHEAF_API void sheaf_kernel_plan_free(sheaf_kernel_plan *P) {
  if (!P) return;
  sheaf_ctx *ctx = P->ctx;
  if (P->counted) sh_kernel_plan_count(P->K, -1);
  for (int i = 0; P->extra && i < P->n_extra; i++)
    if (P->extra[i]) sh_free(ctx, P->extra[i], P->extra_bytes[i]);
  for (int i = 0; P->w && i < P->n_w; i++)
    if (P->w[i].own) sh_free(ctx, P->w[i].own, P->w[i].bytes);
  for (int i = 0; P->len && i < P->n_len; i++)
    if (P->len[i].vals) sh_free(ctx, P->len[i].vals, (P->len[i].n ? P->len[i].n : 1) * sizeof(int32_t));
  for (int i = 0; i < P_BLOCKS; i++)
    if (P->blocks[i].p) sh_free(ctx, P->blocks[i].p, P->blocks[i].bytes);
  int n_in = P->n_in ? P->n_in : 1;
  if (P->extra) sh_free(ctx, P->extra, sizeof(void *) * (size_t)(P->n_extra + 1));
  if (P->extra_bytes) sh_free(ctx, P->extra_bytes, sizeof(size_t) * (size_t)(P->n_extra + 1));
  if (P->w) sh_free(ctx, P->w, sizeof(pweight) * (size_t)n_in);
  if (P->len) sh_free(ctx, P->len, sizeof(plength) * (size_t)n_in);
  if (P->ver) sh_free(ctx, P->ver, sizeof(uint64_t) * (size_t)n_in);
  if (P->need) sh_free(ctx, P->need, (size_t)(P->n_args ? P->n_args : 1));
  if (P->ir) sh_free(ctx, P->ir, sizeof(sk_arg) * (size_t)(P->n_ir ? P->n_ir : 1));
  sh_free(ctx, P, sizeof *P);
}

/* The plan's buffers besides the arguments: lengths copied, scratch and
 * offsets computed, weight buffers allocated (args: the planned ones). */
static sheaf_status plan_prepare(sheaf_kernel_plan *P, const sheaf_kernel_arg *args) {
  sheaf_ctx *ctx = P->ctx;
  const sh_kernel *k = P->k;
  const sh_lower_info *info = sh_kernel_info(P->V);
  int n_in = P->n_in, n_extra = info->n_scratch + info->n_ragged;
  P->n_extra = n_extra;
  P->w = sh_calloc(ctx, (size_t)(n_in ? n_in : 1), sizeof(pweight));
  P->len = sh_calloc(ctx, (size_t)(n_in ? n_in : 1), sizeof(plength));
  P->ver = sh_calloc(ctx, (size_t)(n_in ? n_in : 1), sizeof(uint64_t));
  P->extra = sh_calloc(ctx, (size_t)n_extra + 1, sizeof(void *));
  P->extra_bytes = sh_calloc(ctx, (size_t)n_extra + 1, sizeof(size_t));
  if (!P->w || !P->len || !P->ver || !P->extra || !P->extra_bytes) return SHEAF_ERR_NOMEM;
  const void *in_data[64] = {0}; /* the lengths' values (all that the sizes of scratch and offsets read) */
  for (int i = 0; i < n_in; i++) {
    if (!sh_kernel_input_is_length(P->V, i)) continue;
    plength *L = &P->len[P->n_len++];
    L->input = i, L->n = args[i].numel;
    if (!(L->vals = sh_malloc(ctx, (L->n ? L->n : 1) * sizeof(int32_t)))) return SHEAF_ERR_NOMEM;
    if (L->n) memcpy(L->vals, args[i].data, L->n * sizeof(int32_t));
    in_data[i] = L->vals;
  }
  int slot = P->n_args, ne = 0;
  sheaf_status st = SHEAF_OK;
  for (int s = 0; !st && s < info->n_scratch; s++, ne++) {
    size_t n;
    if ((st = sh_lower_numel(ctx, k, info->scratch[s], P->sizes, in_data, &n))) break;
    P->extra_bytes[ne] = (n ? n : 1) * sizeof(float);
    if (!(P->extra[ne] = sh_alloc(ctx, P->extra_bytes[ne], 64))) st = SHEAF_ERR_NOMEM;
    else P->ir[slot++].data = P->extra[ne];
  }
  for (int r = 0; !st && r < info->n_ragged; r++, ne++) {
    const sh_ktensor *t = &k->tensors[info->ragged[r]];
    int64_t E = sh_lower_aff(&t->dims[0].aff, P->sizes);
    P->extra_bytes[ne] = (size_t)(E > 0 ? E : 1) * sizeof(int32_t);
    if (!(P->extra[ne] = sh_alloc(ctx, P->extra_bytes[ne], 64))) st = SHEAF_ERR_NOMEM;
    else if (!(st = sh_lower_offsets(ctx, k, info->ragged[r], P->sizes, in_data, P->extra[ne])))
      P->ir[slot++].data = P->extra[ne];
  }
  for (int i = 0; !st && i < n_in; i++) {
    sh_pack_size_fn size;
    sh_pack_fn pack;
    if (!sh_kernel_weight_fns(P->V, i, &size, &pack)) continue;
    pweight *w = &P->w[P->n_w++];
    w->input = i, w->d0 = args[i].shape[0], w->ld = args[i].shape[1], w->slot = -1;
    int64_t n = size(P->sizes);
    w->bytes = (size_t)(n > 0 ? n : 1) * sizeof(float);
    (void)pack;
  }
  if (!st && P->n_w) P->epoch = sh_kernel_weight_versions(P->K, P->ver);
  P->prep = P->n_len || P->n_w;
  return st;
}

SHEAF_API sheaf_status sheaf_kernel_plan_make(sheaf_kernel *K, const sheaf_kernel_arg *args, int n_args,
                                              sheaf_kernel_plan **out) {
  if (!K) return SHEAF_ERR_INVALID_ARG;
  sheaf_ctx *ctx = sh_kernel_ctx(K);
  if (!out) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_kernel_plan_make: out is NULL");
  *out = NULL;
  int64_t sizes[64];
  sheaf_kernel *V;
  sh_tune_rec *rec;
  sheaf_status st = sh_kernel_plan_bind(K, args, n_args, sizes, &V, &rec);
  if (st) return st;
  sheaf_kernel_plan *P = sh_calloc(ctx, 1, sizeof *P);
  if (!P) return SHEAF_ERR_NOMEM;
  const sh_kernel *k = sh_kernel_of(V);
  P->K = K, P->V = V, P->ctx = ctx, P->k = k, P->rec = rec, P->fn = sh_kernel_entry_fn(V);
  P->n_args = n_args, P->n_in = k->n_inputs, P->n_ir = sh_kernel_info(V)->n_args;
  memcpy(P->sizes, sizes, sizeof(int64_t) * (size_t)k->n_sizes);
  P->need = sh_calloc(ctx, (size_t)(n_args ? n_args : 1), 1);
  P->ir = sh_calloc(ctx, (size_t)(P->n_ir ? P->n_ir : 1), sizeof(sk_arg));
  if (!P->need || !P->ir) st = SHEAF_ERR_NOMEM;
  for (int i = 0; !st && i < n_args; i++) P->need[i] = args[i].numel != 0;
  if (!st) st = plan_prepare(P, args);
  if (st) {
    sheaf_kernel_plan_free(P);
    return st == SHEAF_ERR_NOMEM ? sh_fail(ctx, st, "sheaf_kernel_plan_make: kernel '%s': out of memory", k->name)
                                 : st;
  }
  sh_lir_abi_init(ctx, 0, &P->abi);
  P->abi.alloc = plan_alloc, P->abi.free = plan_free_block, P->abi.alloc_user = P;
  sh_kernel_plan_count(K, 1);
  P->counted = true;
  *out = P;
  return SHEAF_OK;
}

/* The errors of a run, out of line. */
__attribute__((noinline, cold)) static sheaf_status plan_arg_error(sheaf_kernel_plan *P, void *const *data, int n) {
  const sh_kernel *k = P->k;
  if (!data)
    return sh_fail(P->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_kernel_plan_run: kernel '%s': data is NULL", k->name);
  if (n != P->n_args)
    return sh_fail(P->ctx, SHEAF_ERR_INVALID_ARG,
                   "sheaf_kernel_plan_run: kernel '%s' was planned with %d arguments (%d input%s, then %d output%s), "
                   "not %d",
                   k->name, P->n_args, P->n_in, P->n_in == 1 ? "" : "s", P->n_args - P->n_in,
                   P->n_args - P->n_in == 1 ? "" : "s", n);
  for (int i = 0; i < n; i++)
    if (!data[i] && P->need[i])
      return sh_fail(P->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_kernel_plan_run: kernel '%s': %s '%s' (argument %d) is NULL",
                     k->name, i < P->n_in ? "input" : "output", k->tensors[i].name, i);
  return sh_fail(P->ctx, SHEAF_ERR_INTERNAL, "sheaf_kernel_plan_run: kernel '%s': no error found", k->name);
}

/* The kernel's kept copies the run holds, released. */
static void plan_release(sheaf_kernel_plan *P) {
  for (int i = 0; i < P->n_w; i++)
    if (P->w[i].slot >= 0) {
      sh_kernel_call_weight_put(P->V, P->w[i].slot);
      P->w[i].slot = -1;
    }
}

/* A run's lengths against the plan's, and its packed weights. */
static sheaf_status plan_per_run(sheaf_kernel_plan *P, void *const *data) {
  for (int l = 0; l < P->n_len; l++) {
    const plength *L = &P->len[l];
    const int32_t *v = data[L->input];
    if (!L->n || !memcmp(v, L->vals, L->n * sizeof(int32_t))) continue;
    size_t j = 0;
    while (v[j] == L->vals[j]) j++;
    return sh_fail(P->ctx, SHEAF_ERR_SHAPE,
                   "sheaf_kernel_plan_run: kernel '%s': lengths input '%s' (argument %d) has %s[%zu] = %d, but the "
                   "plan was made with %d: other lengths are another shape (make a new plan)",
                   P->k->name, P->k->tensors[L->input].name, L->input, P->k->tensors[L->input].name, j, (int)v[j],
                   (int)L->vals[j]);
  }
  if (P->n_w && sh_kernel_weight_epoch(P->K) != P->epoch) P->epoch = sh_kernel_weight_versions(P->K, P->ver);
  for (int i = 0; i < P->n_w; i++) {
    pweight *w = &P->w[i];
    const float *d = data[w->input], *out = NULL;
    uint64_t v = P->ver[w->input];
    bool packed = false;
    sheaf_status st = sh_kernel_plan_weight(P->V, w->input, P->sizes, d, w->d0, w->ld, v, w->own, &out, &w->slot,
                                            &packed);
    if (st == SHEAF_ERR_NOMEM && !w->own) { /* no kept copy free (or version 0): the plan's own buffer */
      if (!(w->own = sh_alloc(P->ctx, w->bytes, 64))) {
        plan_release(P);
        return sh_fail(P->ctx, SHEAF_ERR_NOMEM, "sheaf_kernel_plan_run: kernel '%s': out of memory packing weight '%s'",
                       P->k->name, P->k->tensors[w->input].name);
      }
      st = sh_kernel_plan_weight(P->V, w->input, P->sizes, d, w->d0, w->ld, v, w->own, &out, &w->slot, &packed);
    }
    if (st) {
      plan_release(P);
      return sh_fail(P->ctx, st, "sheaf_kernel_plan_run: kernel '%s': weight '%s' could not be packed", P->k->name,
                     P->k->tensors[w->input].name);
    }
    w->packs += packed;
    P->ir[w->input].data = (void *)(uintptr_t)out;
  }
  return SHEAF_OK;
}

SHEAF_API sheaf_status sheaf_kernel_plan_run(sheaf_kernel_plan *P, void *const *data, int n_data) {
  if (!P) return SHEAF_ERR_INVALID_ARG;
  if (!data || n_data != P->n_args) return plan_arg_error(P, data, n_data);
  sk_arg *ir = P->ir;
  const unsigned char *need = P->need;
  for (int i = 0; i < n_data; i++) {
    if (!data[i] && need[i]) return plan_arg_error(P, data, n_data);
    ir[i].data = data[i];
  }
  if (P->prep) {
    sheaf_status st = plan_per_run(P, data);
    if (st) return st;
  }
  if (P->rec) sh_tune_count(P->rec); /* sheaf_kernel_tuning_stats */
  int rc = P->fn(&P->abi, P->sizes, ir);
  if (P->n_w) plan_release(P);
  if (rc == 2) return sh_kernel_index_error(P->ctx, P->k, P->sizes, (const void *const *)ir, sizeof *ir);
  if (rc != 0)
    return sh_fail(P->ctx, SHEAF_ERR_NOMEM, "kernel '%s': a temporary could not be allocated", P->k->name);
  return SHEAF_OK;
}

sheaf_kernel *sh_kernel_plan_kernel(const sheaf_kernel_plan *P) { return P ? P->V : NULL; }

long sh_kernel_plan_packs(const sheaf_kernel_plan *P, int i) {
  for (int j = 0; P && j < P->n_w; j++)
    if (P->w[j].input == i) return P->w[j].packs;
  return 0;
}
