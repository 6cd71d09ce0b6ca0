/*
 * kernel_api.c — the public kernel API (include/sheaf_kernel.h): check the
 * source, lower + default schedule + emit (lower.c), compile and load
 * through the JIT cache (jit.c), bind and check arguments, call.
 *
 * The JIT request is lazy (jit.h): its key is a spec — the kernel's
 * source, its name, the ISA, the flags and the generator's identity (the
 * file holding this code: path, size, mtime, inode) — and the C is emitted
 * only on a miss, so a cache hit costs parse, check, lowering (for the
 * argument layout) and the JIT's verified load, not the schedule and the
 * emission.
 *
 * Weights (docs/CODEGEN.md, "Weights"): an input the default schedule packs
 * in panels (the generated NAME_pack_X exists) is packed by the run path,
 * into a buffer the kernel keeps, keyed on (pointer, shape, version): a
 * run with the same nonzero version (sheaf_kernel_set_weight_version) reuses
 * it; version 0 packs on every run.
 *
 * Temporaries (the generated code's, through sk_abi.alloc, and the ragged
 * scratch and offsets of the run path) come from blocks the kernel keeps
 * from earlier runs (up to K_BLOCKS, the largest kept), so a repeated run
 * allocates nothing and touches no fresh pages.
 *
 * Repeated calls (docs/CODEGEN.md, "Row kernels"): a dense kernel keeps
 * the argument signature of its last call that passed every check (each
 * argument's dtype, element count and, for inputs, rank and shape), the
 * sizes it bound and the variant it ran, behind a sequence lock. A call
 * whose signature equals it runs the kernel at once: the checks it skips
 * depend on the signature alone, so they would pass again. Kernels whose
 * run binds more than the arguments (packed weights, scratch, ragged
 * offsets) always take the full path.
 *
 * Tuning (docs/CODEGEN.md, "Tuner"; tune.h): a compile collects the tuning
 * records that apply to the kernel (the context's sheaf_kernel_load_tuning
 * and the cache directory's file); a run whose sizes fall in a record's
 * shape class runs the variant compiled with that record's knobs — one
 * per distinct knobs, compiled on first use and kept, so a new size in a
 * class already seen compiles nothing.
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "codegen/kernel_api.h"
#include "codegen/lir_emit.h"
#include "codegen/lower.h"
#include "codegen/lower_batch.h"
#include "codegen/tune.h"
#include "lang/kernel_ref.h"
#include "lang/parser.h"

/* The packed copy of one weight input (guarded by sheaf_kernel.mu). */
typedef struct kweight {
  sh_pack_size_fn size; /* NULL: the input is read as given */
  sh_pack_fn pack;
  const void *ptr;   /* the key of the packed contents (valid) */
  uint64_t version;
  uint64_t user_version; /* sheaf_kernel_set_weight_version's */
  int64_t d0, d1;
  bool valid;
  int refs;          /* runs reading buf now */
  long packs;        /* times packed (tests) */
  float *buf;
  size_t bytes;
} kweight;

/* A temporary's storage kept across runs (guarded by sheaf_kernel.mu). */
typedef struct kblock {
  void *p;
  size_t bytes;
  bool used;
} kblock;
#define K_BLOCKS 8

/* The batched call path's and plans' kept packed weights (kernel_call.c,
 * kernel_plan.c: plans of any row count share them), apart from the run
 * path's one copy per input: a few per kernel, any input, keyed on
 * (input, pointer, shape, version) and reused least recently used first, so
 * a kernel that layers call with their own weights, or that graphs and
 * sheaf_kernel_run both use, keeps each packed copy instead of repacking it
 * on every switch. An empty slot has bytes 0. */
#define K_CALL_SLOTS 8
typedef struct kcslot {
  int input;
  const void *ptr;
  int64_t d0, d1;
  uint64_t version;
  bool valid;
  int refs;      /* batches reading buf now */
  uint64_t used; /* stamp of the last batch that took it */
  float *buf;
  size_t bytes;
} kcslot;
#define K_VARIANTS 16

/* The last checked call's signature (the fast path of repeated calls).
 * A call that passed every check has each argument's dtype and each
 * input's rank as declared (dtype[], rank[]: constants of the kernel), so
 * the kept signature holds the rest: every argument's element count and
 * every input's dimensions (at a fixed stride), and the sizes bound from
 * them. Written under sheaf_kernel.mu (trylock: a busy kernel skips the
 * update), read lock-free: seq is odd while written. */
#define KF_ARGS 8
#define KF_RANK 4
#define KF_SIZES 8
typedef struct kfast {
  bool able;          /* dense, at most KF_ARGS arguments, KF_RANK dims, KF_SIZES sizes */
  bool body_only;     /* this kernel's run binds nothing but its arguments */
  int n_args, n_in;   /* the kernel's arguments and inputs */
  int n_sizes;
  int32_t dtype[KF_ARGS], rank[KF_ARGS]; /* declared (outputs: f32; their rank is not read) */
  atomic_uint seq;
  _Atomic(struct sheaf_kernel *) var; /* the kernel that ran (a tuned variant); NULL: none */
  _Atomic(struct sh_tune_rec *) rec;  /* the record that chose it (counted per run); NULL: none */
  atomic_ullong numel[KF_ARGS];
  atomic_ullong dims[KF_ARGS * KF_RANK]; /* input i's at i * KF_RANK */
  atomic_ullong sizes[KF_SIZES];
  sk_abi abi;         /* the run's services (the context's pool is fixed) */
} kfast;

struct sheaf_kernel {
  sheaf_ctx *ctx;
  char *src;
  size_t len;
  sh_module m;
  const sh_kernel *k;
  sh_lower_info info;
  sh_jit *jit;
  sk_entry_fn fn;
  sk_batch_fn bfn;   /* the batched entry (lower_batch.h) */
  sh_kcall_desc call; /* what the runtime's kernel-call nodes point to (kernel_call.c) */
  kweight *w; /* one per input */
  pthread_mutex_t mu;
  bool mu_init;
  bool dense; /* no ragged tensor: element counts are products of sizes */
  uint64_t lengths; /* bit i: input i (< 64) is the lengths of a ragged dimension */
  atomic_uint_fast64_t wepoch; /* bumped by every sheaf_kernel_set_weight_version (plans) */
  atomic_int plans;            /* live plans made on it (kernel_plan.c) */
  kblock blocks[K_BLOCKS]; /* the temporaries of earlier runs, reused */
  kcslot cslots[K_CALL_SLOTS]; /* the batched calls' packed weights (under mu) */
  uint64_t cstamp;
  /* tuning: the records that apply, and the variants compiled for them */
  sh_tune_rec *tuned;
  int n_tuned;
  sheaf_kernel *var[K_VARIANTS];
  sh_sched_opts var_opts[K_VARIANTS];
  int n_var;
  pthread_mutex_t vmu; /* var, n_var */
  bool vmu_init;
  sh_kernel_opts vopts; /* how variants compile: the kernel's own options */
  int few_rows;         /* the row size of a kernel that reads a weight packed (its GEMM's M):
                           a call binding it to a few rows runs the few-rows variant
                           (kernel_fewrows.c); -1: none */
  char *cache_dir, *cc; /* copies of vopts' strings */
  kfast fast;
};

static void fast_forget(sheaf_kernel *K);
static void *k_alloc(void *user, size_t bytes);
static void k_free(void *user, void *p, size_t bytes);

static const char *const isa_flags_avx2[] = {"-mavx2", "-mfma"};
static const char *const isa_flags_avx512[] = {"-mavx2", "-mfma", "-mavx512f", "-mavx512vl", "-mavx512bw",
                                               "-mavx512dq"};

/* The generator's identity: what `stat` tells of the file that holds the
 * lowering, schedule and emitter (libsheaf.so or the executable linking
 * libsheaf.a), so that a rebuilt library never takes another build's
 * kernels from the cache. "" when unknown: then the C is emitted on every
 * compile and the key is the C itself. */
static char gen_id[PATH_MAX + 128];
static pthread_once_t gen_once = PTHREAD_ONCE_INIT;

static void gen_id_init(void) {
  Dl_info di;
  struct stat sb;
  /* dladdr takes a data pointer: the function's address, through an integer */
  const void *fn = (const void *)(uintptr_t)&sh_lower_generate;
  if (!dladdr(fn, &di) || !di.dli_fname || !di.dli_fname[0] || stat(di.dli_fname, &sb) != 0) return;
  char real[PATH_MAX]; /* realpath writes up to PATH_MAX bytes */
  if (!realpath(di.dli_fname, real)) snprintf(real, sizeof real, "%s", di.dli_fname);
  int n = snprintf(gen_id, sizeof gen_id, "%s %lld %lld.%09ld %llu:%llu", real, (long long)sb.st_size,
                   (long long)sb.st_mtim.tv_sec, (long)sb.st_mtim.tv_nsec, (unsigned long long)sb.st_dev,
                   (unsigned long long)sb.st_ino);
  if (n < 0 || (size_t)n >= sizeof gen_id) gen_id[0] = '\0';
}

typedef struct gen_ctx {
  sheaf_ctx *ctx;
  const sh_kernel *k;
  sheaf_isa isa;
  int n_args;
  const sh_sched_opts *sched; /* NULL: the ISA's default knobs */
} gen_ctx;

/* The JIT's lazy source: lower, default schedule, emit (on a miss only),
 * then the batched entry point. */
static sheaf_status gen_c(void *user, sh_buf *c) {
  gen_ctx *g = user;
  sheaf_status st = g->sched ? sh_tune_generate(g->ctx, g->k, g->isa, g->sched, c, NULL)
                             : sh_lower_generate(g->ctx, g->k, g->isa, c, NULL, NULL);
  return st ? st : sh_lower_emit_batch(g->k, g->n_args, c);
}

/* The generated packing functions of K's inputs (weights the schedule packed). */
static sheaf_status find_weights(sheaf_kernel *K, sh_jit_lib *lib, const char *entry) {
  int n_in = K->k->n_inputs;
  K->dense = true;
  for (int t = 0; t < K->k->n_tensors; t++) {
    const sh_ktensor *T = &K->k->tensors[t];
    if (T->ragged_outer >= 0) K->dense = false;
    for (int d = 0; d < T->rank; d++)
      if (T->dims[d].kind == SH_KEXT_RAGGED && T->dims[d].len < 64) K->lengths |= 1ull << T->dims[d].len;
  }
  for (int i = 0; i < K->k->n_stmts; i++)
    for (int j = 0; j < K->k->stmts[i].n_idx; j++) {
      const sh_kext *x = &K->k->stmts[i].idx[j].range;
      if (x->kind == SH_KEXT_RAGGED && x->len < 64) K->lengths |= 1ull << x->len;
    }
  K->w = sh_calloc(K->ctx, (size_t)n_in + 1, sizeof(kweight));
  if (!K->w) return SHEAF_ERR_NOMEM;
  if (pthread_mutex_init(&K->mu, NULL) != 0) return sh_fail(K->ctx, SHEAF_ERR_INTERNAL, "kernel: mutex");
  K->mu_init = true;
  for (int i = 0; i < n_in; i++) {
    char sym[600];
    snprintf(sym, sizeof sym, "%s_packed_size_%s", entry, K->k->tensors[i].name);
    void *sz = sh_jit_sym(lib, sym);
    snprintf(sym, sizeof sym, "%s_pack_%s", entry, K->k->tensors[i].name);
    void *pk = sh_jit_sym(lib, sym);
    if (!sz || !pk) continue;
    *(void **)&K->w[i].size = sz; /* dlsym's object pointer to a function pointer (POSIX) */
    *(void **)&K->w[i].pack = pk;
  }
  return SHEAF_OK;
}

static char *dup_str(sheaf_ctx *ctx, const char *s) {
  size_t n = strlen(s) + 1;
  char *p = sh_malloc(ctx, n);
  if (p) memcpy(p, s, n);
  return p;
}

static void free_str(sheaf_ctx *ctx, char *s) {
  if (s) sh_free(ctx, s, strlen(s) + 1);
}

/* The tuning records that apply to K (tune.h: the context's loaded ones and
 * the cache directory's), and what its variants need to compile. A record
 * set that cannot be read costs the tuning, not the compile (a warning). */
static sheaf_status variants_init(sheaf_kernel *K, const sh_kernel_opts *o, sheaf_isa isa);

static sheaf_status attach_tuning(sheaf_kernel *K, const sh_kernel_opts *o, sheaf_isa isa) {
  sheaf_ctx *ctx = K->ctx;
  const char *cc = sh_jit_compiler(K->jit);
  char ir[33], ccid[33];
  sheaf_status st = cc ? sh_tune_kernel_hash(ctx, K->k, ir) : SHEAF_ERR_NOT_FOUND;
  if (!st) st = sh_tune_compiler_id(ctx, cc, ccid);
  if (!st)
    st = sh_tune_select(ctx, K->k, ir, sheaf_isa_name(isa), ccid, ctx->tuning, sh_jit_cache_dir(K->jit), &K->tuned,
                        &K->n_tuned);
  if (st == SHEAF_ERR_NOMEM) return st;
  if (st) {
    sh_log(ctx, SHEAF_LOG_WARN, "kernel '%s': tuning records not used: %s", K->k->name, sheaf_ctx_last_error(ctx));
    return SHEAF_OK;
  }
  return K->n_tuned ? variants_init(K, o, isa) : SHEAF_OK;
}

/* What K's variants need to compile (tuned records, few rows): its own
 * options, no tuning records of their own; once. */
static sheaf_status variants_init(sheaf_kernel *K, const sh_kernel_opts *o, sheaf_isa isa) {
  sheaf_ctx *ctx = K->ctx;
  if (K->vmu_init) return SHEAF_OK;
  if (pthread_mutex_init(&K->vmu, NULL) != 0) return sh_fail(ctx, SHEAF_ERR_INTERNAL, "kernel: mutex");
  K->vmu_init = true;
  K->vopts = *o;
  K->vopts.isa_set = true, K->vopts.isa = isa, K->vopts.no_tuning = true, K->vopts.file = NULL;
  K->cache_dir = dup_str(ctx, sh_jit_cache_dir(K->jit));
  K->cc = o->cc ? dup_str(ctx, o->cc) : NULL;
  if (!K->cache_dir || (o->cc && !K->cc)) return SHEAF_ERR_NOMEM;
  K->vopts.cache_dir = K->cache_dir, K->vopts.cc = K->cc;
  return SHEAF_OK;
}

/* K's few-rows variants (kernel_fewrows.c): when K reads a weight packed
 * (a GEMM) and has a row size (kernel_rows.c: its GEMM's M). */
static sheaf_status few_rows_init(sheaf_kernel *K, const sh_kernel_opts *o, sheaf_isa isa) {
  bool packed = false;
  for (int i = 0; i < K->k->n_inputs; i++) packed |= K->w[i].size != NULL;
  int rs = packed ? sh_kernel_row_size(K->k) : -1;
  if (rs < 0) return SHEAF_OK;
  sheaf_status st = variants_init(K, o, isa);
  if (!st) K->few_rows = rs;
  return st;
}

/* The variant of K compiled with knobs o (compiled on first use, kept);
 * *out NULL when K holds K_VARIANTS already (the default schedule runs). */
static sheaf_status variant(sheaf_kernel *K, const sh_sched_opts *o, sheaf_kernel **out) {
  sheaf_status st = SHEAF_OK;
  *out = NULL;
  pthread_mutex_lock(&K->vmu);
  for (int i = 0; i < K->n_var && !*out; i++)
    if (!memcmp(&K->var_opts[i], o, sizeof *o)) *out = K->var[i];
  if (!*out && K->n_var < K_VARIANTS) {
    sh_kernel_opts vo = K->vopts;
    vo.sched = o;
    sheaf_kernel *V;
    st = sh_kernel_compile_opts(K->ctx, K->src, K->len, K->k->name, &vo, &V);
    if (st) {
      st = sh_fail_prefix(K->ctx, "kernel '%s': the tuned variant", K->k->name);
    } else {
      pthread_mutex_lock(&K->mu);
      for (int i = 0; i < K->k->n_inputs; i++) V->w[i].user_version = K->w[i].user_version;
      pthread_mutex_unlock(&K->mu);
      K->var_opts[K->n_var] = *o;
      K->var[K->n_var++] = V;
      *out = V;
    }
  }
  pthread_mutex_unlock(&K->vmu);
  return st;
}

/* Whether K's calls may take the fast path (kfast). */
static void fast_init(sheaf_kernel *K) {
  const sh_kernel *k = K->k;
  int n = k->n_inputs + k->n_outputs;
  kfast *f = &K->fast;
  f->n_args = n, f->n_in = k->n_inputs;
  f->able = K->dense && n <= KF_ARGS && k->n_sizes <= KF_SIZES;
  for (int t = 0; t < n; t++)
    if (k->tensors[t].rank > KF_RANK) f->able = false;
  f->body_only = K->info.n_args == n && K->info.n_scratch == 0 && K->info.n_ragged == 0;
  for (int i = 0; i < k->n_inputs; i++)
    if (K->w[i].size) f->body_only = false;
  f->n_sizes = k->n_sizes;
  for (int t = 0; f->able && t < n; t++) {
    const sh_ktensor *T = &k->tensors[t];
    f->dtype[t] = t < k->n_inputs && T->dtype == SH_KDTYPE_I32 ? SHEAF_KERNEL_I32 : SHEAF_KERNEL_F32;
    f->rank[t] = T->rank;
  }
  atomic_init(&f->seq, 0);
  atomic_init(&f->var, NULL);
  atomic_init(&f->rec, NULL);
  for (int i = 0; i < KF_ARGS; i++) atomic_init(&f->numel[i], 0);
  for (int i = 0; i < KF_ARGS * KF_RANK; i++) atomic_init(&f->dims[i], 0);
  for (int i = 0; i < KF_SIZES; i++) atomic_init(&f->sizes[i], 0);
  atomic_init(&K->wepoch, 0);
  atomic_init(&K->plans, 0);
  sh_lir_abi_init(K->ctx, 0, &f->abi);
  f->abi.alloc = k_alloc, f->abi.free = k_free, f->abi.alloc_user = K;
}

sheaf_status sh_kernel_compile_opts(sheaf_ctx *ctx, const char *source, size_t len, const char *name,
                                    const sh_kernel_opts *opts, sheaf_kernel **out) {
  if (!ctx) return SHEAF_ERR_INVALID_ARG;
  if (!out) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_kernel_compile: out is NULL");
  *out = NULL;
  if (!source) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_kernel_compile: source is NULL");
  sh_kernel_opts o = opts ? *opts : (sh_kernel_opts){0};
  sheaf_isa isa = o.isa_set ? o.isa : sheaf_cpu_isa();
  sheaf_kernel *K = sh_calloc(ctx, 1, sizeof *K);
  if (!K) return SHEAF_ERR_NOMEM;
  K->ctx = ctx;
  K->few_rows = -1;
  K->src = sh_malloc(ctx, len + 1);
  if (!K->src) {
    sh_free(ctx, K, sizeof *K);
    return SHEAF_ERR_NOMEM;
  }
  memcpy(K->src, source, len);
  K->src[len] = '\0';
  K->len = len;
  pthread_once(&gen_once, gen_id_init);
  bool lazy = gen_id[0] && !o.eager;
  sheaf_status st = sh_kernel_source_compile(&K->m, ctx, o.file ? o.file : "kernel", K->src, len);
  sh_buf c;
  sh_buf_init(&c, ctx);
  if (st == SHEAF_OK) {
    const sh_kernel *const *ks;
    int n = sh_module_kernels(&K->m, &ks);
    K->k = name ? sh_module_kernel(&K->m, name) : n > 0 ? ks[0] : NULL;
    if (!K->k)
      st = name ? sh_fail(ctx, SHEAF_ERR_NOT_FOUND, "sheaf_kernel_compile: the source has no kernel '%s'", name)
                : sh_fail(ctx, SHEAF_ERR_NOT_FOUND, "sheaf_kernel_compile: the source has no kernel");
  }
  const char *flags[16];
  size_t nf = 0;
  flags[nf++] = "-O3";
  flags[nf++] = "-Wno-psabi";
  if (isa == SHEAF_ISA_AVX2)
    for (size_t i = 0; i < SH_ARRAY_LEN(isa_flags_avx2); i++) flags[nf++] = isa_flags_avx2[i];
  if (isa == SHEAF_ISA_AVX512)
    for (size_t i = 0; i < SH_ARRAY_LEN(isa_flags_avx512); i++) flags[nf++] = isa_flags_avx512[i];
  if (st == SHEAF_OK && lazy) {
    /* the argument layout (lowering only), then the spec the key covers:
     * everything the C depends on. Flags and ISA are in the JIT's key. */
    sh_lir_kernel *L = NULL;
    char ename[300];
    sh_lower_entry_name(K->k, ename, sizeof ename);
    st = sh_lower_kernel(ctx, K->k, ename, &L, &K->info);
    if (st) st = sh_fail_prefix(ctx, "kernel '%s': lowering", K->k->name);
    sh_lir_free(L);
    sh_buf_printf(&c, "sheaf-kernel-spec 1\ngenerator %s\nisa %s\nkernel %s\nbatch 1\n", gen_id,
                  sheaf_isa_name(isa), K->k->name);
    if (o.sched) { /* the tuner's knobs (absent: the default schedule, as before) */
      sh_buf_puts(&c, "sched ");
      sh_tune_opts_print(o.sched, &c);
      sh_buf_putc(&c, '\n');
    }
    sh_buf_printf(&c, "source %zu\n", len);
    sh_buf_put(&c, source, len);
    if (st == SHEAF_OK) st = sh_buf_status(&c);
  } else if (st == SHEAF_OK) {
    st = o.sched ? sh_tune_generate(ctx, K->k, isa, o.sched, &c, &K->info)
                 : sh_lower_generate(ctx, K->k, isa, &c, NULL, &K->info);
    if (st == SHEAF_OK) st = sh_lower_emit_batch(K->k, K->info.n_args, &c);
  }
  if (st == SHEAF_OK) st = sh_jit_create(ctx, &(sh_jit_options){.cache_dir = o.cache_dir, .cc = o.cc}, &K->jit);
  if (st == SHEAF_OK) {
    size_t hn;
    const char *ht = sh_lir_abi_header(&hn);
    sh_jit_header h = {.name = "sheaf_kernel_abi.h", .text = ht, .size = hn};
    char what[300], entry[300];
    snprintf(what, sizeof what, "kernel %s", K->k->name);
    sh_lower_entry_name(K->k, entry, sizeof entry);
    gen_ctx g = {ctx, K->k, isa, K->info.n_args, o.sched};
    sh_jit_request r = {.name = what, .source = sh_buf_cstr(&c), .source_size = c.len,
                        .flags = flags, .n_flags = nf, .headers = &h, .n_headers = 1,
                        .isa = sheaf_isa_name(isa), .gen = lazy ? gen_c : NULL, .gen_user = &g};
    sh_jit_lib *lib;
    st = sh_jit_load(K->jit, &r, &lib, NULL);
    if (st == SHEAF_OK) {
      K->fn = (sk_entry_fn)sh_jit_sym(lib, entry);
      char bentry[320];
      sh_lower_batch_name(K->k, bentry, sizeof bentry);
      K->bfn = (sk_batch_fn)sh_jit_sym(lib, bentry);
      if (!K->fn || !K->bfn)
        st = sh_fail(ctx, SHEAF_ERR_INTERNAL, "kernel '%s': no symbol %s in %s", K->k->name,
                     K->fn ? bentry : entry, sh_jit_lib_path(lib));
      K->call = (sh_kcall_desc){.name = K->k->name, .run = sh_kcall_run, .user = K};
    }
    if (st == SHEAF_OK) st = find_weights(K, lib, entry);
    if (st == SHEAF_OK) fast_init(K);
  }
  if (st == SHEAF_OK && !o.no_tuning && !o.sched) st = attach_tuning(K, &o, isa);
  if (st == SHEAF_OK && !o.no_tuning && !o.sched && !o.no_few_rows) st = few_rows_init(K, &o, isa);
  sh_buf_free(&c);
  if (st) {
    sheaf_kernel_free(K);
    return st;
  }
  *out = K;
  return SHEAF_OK;
}

SHEAF_API sheaf_status sheaf_kernel_compile(sheaf_ctx *ctx, const char *source, size_t len, const char *name,
                                            sheaf_kernel **out) {
  return sh_kernel_compile_opts(ctx, source, len, name, NULL, out);
}

SHEAF_API void sheaf_kernel_free(sheaf_kernel *k) {
  if (!k) return;
  sheaf_ctx *ctx = k->ctx;
  int plans = k->fn ? atomic_load(&k->plans) : 0;
  if (plans > 0)
    sh_log(ctx, SHEAF_LOG_WARN, "sheaf_kernel_free: kernel '%s' still has %d plan%s: free them first (they are invalid now)",
           k->k->name, plans, plans == 1 ? "" : "s");
  for (int i = 0; i < k->n_var; i++) sheaf_kernel_free(k->var[i]);
  if (k->vmu_init) pthread_mutex_destroy(&k->vmu);
  if (k->tuned) sh_free(ctx, k->tuned, sizeof(sh_tune_rec) * (size_t)k->n_tuned);
  free_str(ctx, k->cache_dir);
  free_str(ctx, k->cc);
  if (k->w) {
    for (int i = 0; i < k->k->n_inputs; i++)
      if (k->w[i].buf) sh_free(ctx, k->w[i].buf, k->w[i].bytes);
    sh_free(ctx, k->w, sizeof(kweight) * ((size_t)k->k->n_inputs + 1));
  }
  for (int i = 0; i < K_BLOCKS; i++)
    if (k->blocks[i].p) sh_free(ctx, k->blocks[i].p, k->blocks[i].bytes);
  for (int i = 0; i < K_CALL_SLOTS; i++)
    if (k->cslots[i].buf) sh_free(ctx, k->cslots[i].buf, k->cslots[i].bytes);
  if (k->mu_init) pthread_mutex_destroy(&k->mu);
  sh_jit_free(k->jit);
  sh_lower_info_free(ctx, &k->info);
  sh_module_free(&k->m);
  sh_free(ctx, k->src, k->len + 1);
  sh_free(ctx, k, sizeof *k);
}

const sh_kernel *sh_kernel_of(const sheaf_kernel *k) { return k ? k->k : NULL; }
const sh_lower_info *sh_kernel_info(const sheaf_kernel *k) { return &k->info; }
sk_batch_fn sh_kernel_batch_fn(const sheaf_kernel *k) { return k->bfn; }
sk_entry_fn sh_kernel_entry_fn(const sheaf_kernel *k) { return k->fn; }
void sh_kernel_abi(sheaf_kernel *K, int threads, sk_abi *abi) {
  sh_lir_abi_init(K->ctx, threads, abi);
  abi->alloc = k_alloc, abi->free = k_free, abi->alloc_user = K;
}
const sh_kcall_desc *sh_kernel_call_desc(const sheaf_kernel *k) { return &k->call; }
sheaf_ctx *sh_kernel_ctx(const sheaf_kernel *k) { return k->ctx; }

void sh_kernel_jit_stats(const sheaf_kernel *k, sh_jit_stats *out) {
  memset(out, 0, sizeof *out);
  if (k && k->jit) sh_jit_get_stats(k->jit, out);
}

bool sh_kernel_input_packed(const sheaf_kernel *k, int i) {
  return k && k->w && i >= 0 && i < k->k->n_inputs && k->w[i].size;
}

/* Weight i packed for one run: the kernel's kept copy when it already holds
 * (data, d0, d1, version) with version != 0, else repacked into the kept
 * copy when no run reads it (it then holds them: *held, a reference to
 * release), else into the caller's memory: from `scratch`, or (NULL)
 * allocated into *own (own_bytes; the caller frees it). */
static sheaf_status weight_packed(sheaf_kernel *K, int i, const int64_t *sizes, const float *data, int64_t d0,
                                  int64_t d1, uint64_t version, sh_arena *scratch, float **own, size_t *own_bytes,
                                  const float **out, bool *held) {
  kweight *w = &K->w[i];
  size_t bytes = (size_t)w->size(sizes) * sizeof(float);
  if (bytes == 0) bytes = sizeof(float);
  *held = false;
  pthread_mutex_lock(&K->mu);
  if (version && w->valid && w->ptr == data && w->version == version && w->d0 == d0 && w->d1 == d1) {
    w->refs++, *held = true;
    *out = w->buf;
    pthread_mutex_unlock(&K->mu);
    return SHEAF_OK;
  }
  float *dst = NULL;
  if (w->refs == 0) { /* the kept copy: repacked for this weight */
    w->valid = false;
    if (w->bytes != bytes) {
      if (w->buf) sh_free(K->ctx, w->buf, w->bytes);
      w->bytes = 0;
      w->buf = sh_alloc(K->ctx, bytes, 64);
      if (w->buf) w->bytes = bytes;
    }
    if (w->buf) {
      dst = w->buf;
      w->refs++, *held = true;
      w->ptr = data, w->version = version, w->d0 = d0, w->d1 = d1;
    }
  }
  w->packs++;
  pthread_mutex_unlock(&K->mu);
  if (!dst && scratch) dst = sh_arena_alloc(scratch, bytes);
  else if (!dst && own && (dst = sh_alloc(K->ctx, bytes, 64))) *own = dst, *own_bytes = bytes;
  if (!dst) return SHEAF_ERR_NOMEM;
  w->pack(sizes, data, d1, 0, dst);
  if (*held && version) { /* valid once packed: a run that finds it reads it whole */
    pthread_mutex_lock(&K->mu);
    w->valid = true;
    pthread_mutex_unlock(&K->mu);
  }
  *out = dst;
  return SHEAF_OK;
}

sheaf_status sh_kernel_weight_get(sheaf_kernel *K, int i, const int64_t *sizes, const float *data,
                                  int64_t d0, int64_t d1, uint64_t version, sh_arena *scratch,
                                  const float **out, bool *held) {
  return weight_packed(K, i, sizes, data, d0, d1, version, scratch, NULL, NULL, out, held);
}

/* The kept copies of the batched calls and plans (K->cslots): a hit takes
 * a reference to one (*slot); a miss packs into a free slot (an empty one,
 * else the least recently used without readers), else into `scratch` or,
 * when NULL, `own` (the caller's buffer of the packed size). *packed: this
 * call packed. */
static sheaf_status shared_weight(sheaf_kernel *K, int i, const int64_t *sizes, const float *data, int64_t d0,
                                  int64_t d1, uint64_t version, sh_arena *scratch, float *own, const float **out,
                                  int *slot, bool *packed) {
  kweight *w = &K->w[i];
  *packed = false;
  size_t bytes = (size_t)w->size(sizes) * sizeof(float);
  if (bytes == 0) bytes = sizeof(float);
  *slot = -1;
  kcslot *c = NULL;
  pthread_mutex_lock(&K->mu);
  if (version) {
    for (int s = 0; s < K_CALL_SLOTS; s++) {
      kcslot *q = &K->cslots[s];
      if (q->valid && q->input == i && q->ptr == data && q->version == version && q->d0 == d0 && q->d1 == d1) {
        q->refs++, q->used = ++K->cstamp, *slot = s;
        *out = q->buf;
        pthread_mutex_unlock(&K->mu);
        return SHEAF_OK;
      }
    }
    for (int s = 0; s < K_CALL_SLOTS; s++) { /* a free slot: an empty one, else the least recently used */
      kcslot *q = &K->cslots[s];
      if (q->refs) continue;
      if (!q->bytes) {
        c = q, *slot = s;
        break;
      }
      if (!c || q->used < c->used) c = q, *slot = s;
    }
  }
  if (c) {
    c->valid = false;
    if (c->bytes != bytes) {
      if (c->buf) sh_free(K->ctx, c->buf, c->bytes);
      c->bytes = 0;
      c->buf = sh_alloc(K->ctx, bytes, 64);
      if (c->buf) c->bytes = bytes;
    }
    if (c->buf) {
      *c = (kcslot){i, data, d0, d1, version, false, 1, ++K->cstamp, c->buf, c->bytes};
    } else {
      c = NULL, *slot = -1;
    }
  }
  w->packs++;
  pthread_mutex_unlock(&K->mu);
  float *dst = c ? c->buf : scratch ? sh_arena_alloc(scratch, bytes) : own;
  if (!dst) return SHEAF_ERR_NOMEM;
  *packed = true;
  w->pack(sizes, data, d1, 0, dst);
  if (c) { /* valid once packed: a batch that finds it reads it whole */
    pthread_mutex_lock(&K->mu);
    c->valid = true;
    pthread_mutex_unlock(&K->mu);
  }
  *out = dst;
  return SHEAF_OK;
}

sheaf_status sh_kernel_call_weight(sheaf_kernel *K, int i, const int64_t *sizes, const float *data, int64_t d0,
                                   int64_t d1, uint64_t version, sh_arena *scratch, const float **out, int *slot) {
  bool packed;
  return shared_weight(K, i, sizes, data, d0, d1, version, scratch, NULL, out, slot, &packed);
}

sheaf_status sh_kernel_plan_weight(sheaf_kernel *K, int i, const int64_t *sizes, const float *data, int64_t d0,
                                   int64_t d1, uint64_t version, float *own, const float **out, int *slot,
                                   bool *packed) {
  return shared_weight(K, i, sizes, data, d0, d1, version, NULL, own, out, slot, packed);
}

void sh_kernel_call_weight_put(sheaf_kernel *K, int slot) {
  pthread_mutex_lock(&K->mu);
  K->cslots[slot].refs--;
  pthread_mutex_unlock(&K->mu);
}

void sh_kernel_weight_put(sheaf_kernel *K, int i) {
  pthread_mutex_lock(&K->mu);
  K->w[i].refs--;
  pthread_mutex_unlock(&K->mu);
}

long sh_kernel_pack_count(const sheaf_kernel *K, int i) {
  if (!sh_kernel_input_packed(K, i)) return 0;
  sheaf_kernel *k = (sheaf_kernel *)(uintptr_t)K; /* the mutex only */
  pthread_mutex_lock(&k->mu);
  long n = k->w[i].packs;
  pthread_mutex_unlock(&k->mu);
  return n;
}

SHEAF_API int sheaf_kernel_n_inputs(const sheaf_kernel *k) { return k ? k->k->n_inputs : 0; }
SHEAF_API int sheaf_kernel_n_outputs(const sheaf_kernel *k) { return k ? k->k->n_outputs : 0; }

static const char *dtype_name(sheaf_kernel_dtype d) { return d == SHEAF_KERNEL_I32 ? "i32" : "f32"; }

/* Checks the inputs' dtypes and pointers (need_data: every one; else
 * those of lengths only: no other is read) and binds the sizes. */
static sheaf_status bind_inputs(sheaf_kernel *K, const sheaf_kernel_arg *args, int n_in, bool need_data,
                                sh_kref_arg *in, int64_t *sizes) {
  static const float unread[1]; /* stands for a data pointer not given yet (plans): never read */
  const sh_kernel *k = K->k;
  for (int i = 0; i < n_in; i++) {
    const sh_ktensor *t = &k->tensors[i];
    sheaf_kernel_dtype want = t->dtype == SH_KDTYPE_I32 ? SHEAF_KERNEL_I32 : SHEAF_KERNEL_F32;
    if (args[i].dtype != want)
      return sh_fail(K->ctx, SHEAF_ERR_INVALID_ARG, "kernel '%s': argument %d ('%s') is %s, but the kernel declares %s",
                     k->name, i, t->name, dtype_name(args[i].dtype), dtype_name(want));
    bool read = need_data || (i < 64 && (K->lengths >> i & 1));
    if ((read && !args[i].data && args[i].numel) || (args[i].rank > 0 && !args[i].shape))
      return sh_fail(K->ctx, SHEAF_ERR_INVALID_ARG, "kernel '%s': argument %d ('%s') has a NULL %s", k->name, i,
                     t->name, read && !args[i].data && args[i].numel ? "data pointer" : "shape");
    in[i] = (sh_kref_arg){.data = args[i].data ? args[i].data : read ? NULL : (void *)(uintptr_t)unread,
                          .numel = args[i].numel, .rank = args[i].rank, .shape = args[i].shape};
  }
  return sh_kernel_ref_bind(K->ctx, k, in, n_in, sizes);
}

SHEAF_API sheaf_status sheaf_kernel_output_numel(sheaf_kernel *K, const sheaf_kernel_arg *inputs, int n_inputs,
                                                 int r, size_t *numel) {
  if (!K) return SHEAF_ERR_INVALID_ARG;
  const sh_kernel *k = K->k;
  if (!numel || (!inputs && n_inputs))
    return sh_fail(K->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_kernel_output_numel: NULL argument");
  if (n_inputs != k->n_inputs)
    return sh_fail(K->ctx, SHEAF_ERR_INVALID_ARG, "kernel '%s' takes %d inputs, not %d", k->name, k->n_inputs,
                   n_inputs);
  if (r < 0 || r >= k->n_outputs)
    return sh_fail(K->ctx, SHEAF_ERR_INVALID_ARG, "kernel '%s' has %d outputs: no output %d", k->name,
                   k->n_outputs, r);
  sh_kref_arg in[64];
  int64_t sizes[64];
  if (k->n_inputs > 64 || k->n_sizes > 64)
    return sh_fail(K->ctx, SHEAF_ERR_UNSUPPORTED, "kernel '%s': over 64 inputs or sizes", k->name);
  sheaf_status st = bind_inputs(K, inputs, n_inputs, true, in, sizes);
  if (st) return st;
  return sh_kernel_ref_numel(K->ctx, k, in, n_inputs, k->n_inputs + r, numel);
}

/* Points ir[i] at the packed form of every weight input i: the kernel's
 * copy when its key (pointer, shape, nonzero version) matches, else the
 * copy repacked (when no other run reads it), else a copy of this run's
 * own (own[i], freed by release_weights). held[i]: this run reads K->w[i]. */
static sheaf_status pack_weights(sheaf_kernel *K, const sheaf_kernel_arg *args, const int64_t *sizes, sk_arg *ir,
                                 float **own, size_t *own_bytes, bool *held) {
  sheaf_status st = SHEAF_OK;
  for (int i = 0; !st && i < K->k->n_inputs; i++) {
    if (!K->w[i].size) continue;
    const sheaf_kernel_arg *a = &args[i];
    const float *packed;
    st = weight_packed(K, i, sizes, a->data, a->shape[0], a->shape[1], K->w[i].user_version, NULL, &own[i],
                       &own_bytes[i], &packed, &held[i]);
    if (!st) ir[i].data = (void *)(uintptr_t)packed;
  }
  return st;
}

static void release_weights(sheaf_kernel *K, float **own, size_t *own_bytes, const bool *held) {
  bool locked = false;
  for (int i = 0; i < K->k->n_inputs; i++) {
    if (own[i]) sh_free(K->ctx, own[i], own_bytes[i]);
    if (!held[i]) continue;
    if (!locked) pthread_mutex_lock(&K->mu), locked = true;
    K->w[i].refs--;
  }
  if (locked) pthread_mutex_unlock(&K->mu);
}

/* sk_abi.alloc / .free over the kernel's kept blocks. */
static void *k_alloc(void *user, size_t bytes) {
  sheaf_kernel *K = user;
  pthread_mutex_lock(&K->mu);
  kblock *best = NULL;
  for (int i = 0; i < K_BLOCKS; i++) {
    kblock *b = &K->blocks[i];
    if (b->p && !b->used && b->bytes >= bytes && (!best || b->bytes < best->bytes)) best = b;
  }
  if (best) best->used = true;
  pthread_mutex_unlock(&K->mu);
  return best ? best->p : sh_alloc(K->ctx, bytes ? bytes : 1, 64);
}

static void k_free(void *user, void *p, size_t bytes) {
  sheaf_kernel *K = user;
  if (!p) return;
  if (!bytes) bytes = 1;
  pthread_mutex_lock(&K->mu);
  kblock *slot = NULL;
  for (int i = 0; i < K_BLOCKS; i++)
    if (K->blocks[i].p == p) {
      K->blocks[i].used = false;
      pthread_mutex_unlock(&K->mu);
      return;
    }
  /* keep it: in an empty slot, else in place of the smallest free block smaller than it */
  for (int i = 0; i < K_BLOCKS && !slot; i++)
    if (!K->blocks[i].p) slot = &K->blocks[i];
  for (int i = 0; i < K_BLOCKS && !slot; i++) {
    kblock *b = &K->blocks[i];
    if (!b->used && b->bytes < bytes && (!slot || b->bytes < slot->bytes)) slot = b;
  }
  void *drop = p;
  size_t drop_bytes = bytes;
  if (slot) {
    drop = slot->p, drop_bytes = slot->bytes;
    *slot = (kblock){p, bytes, false};
  }
  pthread_mutex_unlock(&K->mu);
  if (drop) sh_free(K->ctx, drop, drop_bytes);
}

/* The element count of dense tensor t for bound sizes; false on overflow
 * past the reference's limit (the caller asks the reference). */
static bool dense_numel(const sh_kernel *k, int t, const int64_t *sizes, size_t *n) {
  const sh_ktensor *T = &k->tensors[t];
  int64_t v = 1;
  for (int d = 0; d < T->rank; d++) {
    int64_t e = sh_lower_aff(&T->dims[d].aff, sizes);
    if (e < 0 || __builtin_mul_overflow(v, e, &v) || v > ((int64_t)1 << 40)) return false;
  }
  *n = (size_t)v;
  return true;
}

SHEAF_API sheaf_status sheaf_kernel_set_weight_version(sheaf_kernel *K, int input, uint64_t version) {
  if (!K) return SHEAF_ERR_INVALID_ARG;
  if (input < 0 || input >= K->k->n_inputs)
    return sh_fail(K->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_kernel_set_weight_version: kernel '%s' has %d inputs: no input %d",
                   K->k->name, K->k->n_inputs, input);
  pthread_mutex_lock(&K->mu);
  K->w[input].user_version = version;
  atomic_fetch_add_explicit(&K->wepoch, 1, memory_order_release);
  fast_forget(K);
  pthread_mutex_unlock(&K->mu);
  if (K->vmu_init) { /* the tuned variants read the same weights */
    pthread_mutex_lock(&K->vmu);
    for (int i = 0; i < K->n_var; i++) sheaf_kernel_set_weight_version(K->var[i], input, version);
    pthread_mutex_unlock(&K->vmu);
  }
  return SHEAF_OK;
}

static sheaf_status run_bound(sheaf_kernel *K, const sheaf_kernel_arg *args, const sh_kref_arg *in,
                              const int64_t *sizes);

/* Whether args (n_inputs + n_outputs of them) have the kept signature:
 * then *sizes are the sizes they bind, *V the kernel to run and *rec the
 * tuning record that chose it. (Inlined into sheaf_kernel_run. A NULL
 * data pointer takes the full path, which accepts it for 0 elements.) */
static inline bool fast_match(sheaf_kernel *K, const sheaf_kernel_arg *args, int64_t *sizes, sheaf_kernel **V,
                              sh_tune_rec **rec) {
  const kfast *f = &K->fast;
  unsigned s1 = atomic_load_explicit(&f->seq, memory_order_acquire);
  *V = atomic_load_explicit(&f->var, memory_order_relaxed); /* never set unless f->able */
  if ((s1 & 1) || !*V) return false;
  const sheaf_kernel_arg *a = args;
  int i = 0, n_in = f->n_in, n = f->n_args;
  for (; i < n_in; i++, a++) {
    int r = f->rank[i];
    if ((int)a->dtype != f->dtype[i] || a->rank != r || !a->data ||
        (unsigned long long)a->numel != atomic_load_explicit(&f->numel[i], memory_order_relaxed))
      return false;
    const int64_t *sh = a->shape;
    if (r && !sh) return false;
    const atomic_ullong *w = &f->dims[i * KF_RANK];
    for (int d = 0; d < r; d++)
      if ((unsigned long long)sh[d] != atomic_load_explicit(&w[d], memory_order_relaxed)) return false;
  }
  for (; i < n; i++, a++)
    if (a->dtype != SHEAF_KERNEL_F32 || !a->data ||
        (unsigned long long)a->numel != atomic_load_explicit(&f->numel[i], memory_order_relaxed))
      return false;
  for (int z = 0; z < f->n_sizes; z++) sizes[z] = (int64_t)atomic_load_explicit(&f->sizes[z], memory_order_relaxed);
  *rec = atomic_load_explicit(&f->rec, memory_order_relaxed);
  atomic_thread_fence(memory_order_acquire);
  return atomic_load_explicit(&f->seq, memory_order_relaxed) == s1;
}

/* Keeps the signature of args, a call that passed every check and ran V
 * (chosen by record rec, or NULL). */
static void fast_record(sheaf_kernel *K, const sheaf_kernel_arg *args, const int64_t *sizes, sheaf_kernel *V,
                        sh_tune_rec *rec) {
  kfast *f = &K->fast;
  if (pthread_mutex_trylock(&K->mu) != 0) return;
  unsigned s = atomic_load_explicit(&f->seq, memory_order_relaxed);
  atomic_store_explicit(&f->seq, s + 1, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
  const sh_kernel *k = K->k;
  int n_in = k->n_inputs, n = n_in + k->n_outputs;
  for (int i = 0; i < n; i++) {
    const sheaf_kernel_arg *a = &args[i];
    atomic_store_explicit(&f->numel[i], (unsigned long long)a->numel, memory_order_relaxed);
    for (int d = 0; i < n_in && d < a->rank; d++)
      atomic_store_explicit(&f->dims[i * KF_RANK + d], (unsigned long long)a->shape[d], memory_order_relaxed);
  }
  for (int z = 0; z < k->n_sizes; z++) atomic_store_explicit(&f->sizes[z], (unsigned long long)sizes[z], memory_order_relaxed);
  atomic_store_explicit(&f->var, V, memory_order_relaxed);
  atomic_store_explicit(&f->rec, rec, memory_order_relaxed);
  atomic_store_explicit(&f->seq, s + 2, memory_order_release);
  pthread_mutex_unlock(&K->mu);
}

/* Drops the kept signature (caller holds K->mu). */
static void fast_forget(sheaf_kernel *K) {
  kfast *f = &K->fast;
  unsigned s = atomic_load_explicit(&f->seq, memory_order_relaxed);
  atomic_store_explicit(&f->seq, s + 1, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
  atomic_store_explicit(&f->var, NULL, memory_order_relaxed);
  atomic_store_explicit(&f->seq, s + 2, memory_order_release);
}

/* The fast path's run: V binds nothing but the arguments (kfast.body_only). */
static sheaf_status run_body(sheaf_kernel *V, const sheaf_kernel_arg *args, const int64_t *sizes) {
  sk_arg ir[KF_ARGS]; /* a dense entry reads .data alone (as run_bound's table) */
  int n = V->fast.n_args;
  for (int i = 0; i < n; i++) ir[i].data = args[i].data;
  int rc = V->fn(&V->fast.abi, sizes, ir);
  if (rc == 2) return sh_kernel_index_error(V->ctx, V->k, sizes, (const void *const *)ir, sizeof *ir);
  if (rc != 0)
    return sh_fail(V->ctx, SHEAF_ERR_NOMEM, "kernel '%s': a temporary could not be allocated", V->k->name);
  return SHEAF_OK;
}

static sheaf_status run_checked(sheaf_kernel *K, const sheaf_kernel_arg *args, int n_args);

sheaf_status sh_kernel_index_error(sheaf_ctx *ctx, const sh_kernel *k, const int64_t *sizes,
                                   const void *const *data, size_t stride) {
  const void *in_data[64];
  int n = k->n_inputs;
  if (n > 64)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "kernel '%s': a gather index value is out of range", k->name);
  for (int i = 0; i < n; i++) in_data[i] = *(const void *const *)((const char *)data + (size_t)i * stride);
  sheaf_status st = sh_kernel_gather_check(ctx, k, sizes, in_data);
  if (st) return st;
  return sh_fail(ctx, SHEAF_ERR_INTERNAL, "kernel '%s': the generated code reported an index out of "
                 "range that the check does not find", k->name);
}

SHEAF_API sheaf_status sheaf_kernel_run(sheaf_kernel *K, const sheaf_kernel_arg *args, int n_args) {
  if (K && args && n_args == K->fast.n_args) { /* the kept signature: no checks, no binding */
    int64_t sizes[KF_SIZES];
    sheaf_kernel *V;
    sh_tune_rec *rec;
    if (fast_match(K, args, sizes, &V, &rec)) {
      if (rec) sh_tune_count(rec); /* sheaf_kernel_tuning_stats */
      return run_body(V, args, sizes);
    }
  }
  return run_checked(K, args, n_args);
}

/* The kernel to run at bound `sizes` (K or the variant of the record whose
 * shape class holds them, compiled on first use) and that record (NULL:
 * none). */
static sheaf_status pick(sheaf_kernel *K, const int64_t *sizes, sheaf_kernel **out, sh_tune_rec **rec) {
  *out = K, *rec = NULL;
  sh_sched_opts fo;
  if (K->few_rows >= 0 && !K->n_tuned && sh_kernel_few_rows_opts(K->vopts.isa, sizes[K->few_rows], &fo)) {
    sheaf_kernel *V; /* a tuning record, when there is one, decides instead */
    if (variant(K, &fo, &V) != SHEAF_OK) /* the kernel itself runs those rows: slower, the same values */
      sh_log(K->ctx, SHEAF_LOG_WARN, "kernel '%s': its few-rows variant did not compile: %s", K->k->name,
             sheaf_ctx_last_error(K->ctx));
    else if (V)
      *out = V;
    return SHEAF_OK;
  }
  for (int i = 0; i < K->n_tuned; i++)
    if (sh_tune_matches(&K->tuned[i], sizes, K->k->n_sizes)) {
      *rec = &K->tuned[i];
      if (sh_tune_opts_is_default(&K->tuned[i].opts)) break;
      sheaf_kernel *V;
      sheaf_status st = variant(K, &K->tuned[i].opts, &V);
      if (st) return st;
      if (V) *out = V;
      break;
    }
  return SHEAF_OK;
}

/* A call's checks up to its element counts: the argument count, the
 * inputs' dtypes, pointers (need_data: every one; else those of lengths
 * only), ranks and shapes, the sizes they bind (in, sizes: 64 entries);
 * then the kernel to run (*V) and its tuning record (*rec). who names the
 * API function in errors about args itself. */
static sheaf_status bind_call(sheaf_kernel *K, const sheaf_kernel_arg *args, int n_args, bool need_data,
                              const char *who, sh_kref_arg *in, int64_t *sizes, sheaf_kernel **V,
                              sh_tune_rec **rec) {
  const sh_kernel *k = K->k;
  sheaf_ctx *ctx = K->ctx;
  int n_in = k->n_inputs, n_out = k->n_outputs;
  if (!args && n_args) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: kernel '%s': args is NULL", who, k->name);
  if (n_args != n_in + n_out)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                   "kernel '%s' takes %d arguments (%d input%s, then %d output%s), not %d", k->name,
                   n_in + n_out, n_in, n_in == 1 ? "" : "s", n_out, n_out == 1 ? "" : "s", n_args);
  if (n_in > 64 || k->n_sizes > 64)
    return sh_fail(ctx, SHEAF_ERR_UNSUPPORTED, "kernel '%s': over 64 inputs or sizes", k->name);
  sheaf_status st = bind_inputs(K, args, n_in, need_data, in, sizes);
  if (st) return st;
  return pick(K, sizes, V, rec); /* a tuned shape class runs its variant */
}

/* sheaf_kernel_run's full path: every check, the binding, the run (out of
 * line: the fast path above stays small). */
__attribute__((noinline)) static sheaf_status run_checked(sheaf_kernel *K, const sheaf_kernel_arg *args,
                                                          int n_args) {
  if (!K) return SHEAF_ERR_INVALID_ARG;
  sh_kref_arg in[64];
  int64_t sizes[64];
  sheaf_kernel *V;
  sh_tune_rec *rec;
  sheaf_status st = bind_call(K, args, n_args, true, "sheaf_kernel_run", in, sizes, &V, &rec);
  if (st) return st;
  if (rec) sh_tune_count(rec); /* sheaf_kernel_tuning_stats */
  st = run_bound(V, args, in, sizes);
  if (st == SHEAF_OK && K->fast.able && V->fast.body_only) fast_record(K, args, sizes, V, rec);
  return st;
}

bool sh_kernel_fast_match(sheaf_kernel *K, const sheaf_kernel_arg *args, int n_args) {
  int64_t sizes[KF_SIZES];
  sheaf_kernel *V;
  sh_tune_rec *rec;
  return K && args && n_args == K->k->n_inputs + K->k->n_outputs && fast_match(K, args, sizes, &V, &rec);
}

sheaf_status sh_kernel_pick(sheaf_kernel *K, const int64_t *sizes, sheaf_kernel **out) {
  sh_tune_rec *rec;
  sheaf_status st = pick(K, sizes, out, &rec);
  if (!st && rec) sh_tune_count(rec); /* sheaf_kernel_tuning_stats */
  return st;
}

/* A call's element counts after the sizes are bound (inputs' and
 * outputs'), the outputs' dtypes and (need_data) their pointers. */
static sheaf_status check_counts(sheaf_kernel *K, const sheaf_kernel_arg *args, const sh_kref_arg *in,
                                 const int64_t *sizes, bool need_data) {
  const sh_kernel *k = K->k;
  sheaf_ctx *ctx = K->ctx;
  int n_in = k->n_inputs, n_out = k->n_outputs;
  sheaf_status st = SHEAF_OK;
  /* dense kernels: element counts from the sizes (the reference's layouts
   * otherwise, which build every tensor's layout per call) */
  size_t dense_want[64];
  bool dense = K->dense && n_out <= 64;
  for (int i = 0; dense && i < n_in + n_out; i++) {
    size_t n;
    if (!dense_numel(k, i, sizes, &n)) dense = false;
    else if (i >= n_in) dense_want[i - n_in] = n;
    else if (args[i].numel != n)
      return sh_fail(ctx, SHEAF_ERR_SHAPE, "kernel '%s': input '%s' has %zu elements, but its shape needs %lld",
                     k->name, k->tensors[i].name, args[i].numel, (long long)n);
  }
  /* ragged inputs: their element counts from the lengths (the reference's
   * binder checks the dense ones only) */
  for (int i = 0; !K->dense && i < n_in; i++) {
    size_t want;
    if (k->tensors[i].ragged_outer < 0) continue;
    if ((st = sh_kernel_ref_numel(ctx, k, in, n_in, i, &want))) return st;
    if (args[i].numel != want)
      return sh_fail(ctx, SHEAF_ERR_SHAPE, "kernel '%s': input '%s' has %zu elements, but its shape needs %zu",
                     k->name, k->tensors[i].name, args[i].numel, want);
  }
  for (int r = 0; r < n_out; r++) {
    const sheaf_kernel_arg *a = &args[n_in + r];
    const sh_ktensor *t = &k->tensors[n_in + r];
    size_t want;
    if (dense) want = dense_want[r];
    else if ((st = sh_kernel_ref_numel(ctx, k, in, n_in, n_in + r, &want))) return st;
    if (a->dtype != SHEAF_KERNEL_F32)
      return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "kernel '%s': output '%s' (argument %d) is %s, but outputs are f32",
                     k->name, t->name, n_in + r, dtype_name(a->dtype));
    if (a->numel != want)
      return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                     "kernel '%s': output '%s' (argument %d) has %zu elements, but these inputs make %zu",
                     k->name, t->name, n_in + r, a->numel, want);
    if (need_data && !a->data && want)
      return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "kernel '%s': output '%s' (argument %d) has a NULL data pointer",
                     k->name, t->name, n_in + r);
  }
  return SHEAF_OK;
}

/* sheaf_kernel_run after the sizes are bound. */
static sheaf_status run_bound(sheaf_kernel *K, const sheaf_kernel_arg *args, const sh_kref_arg *in,
                              const int64_t *sizes) {
  const sh_kernel *k = K->k;
  sheaf_ctx *ctx = K->ctx;
  int n_in = k->n_inputs, n_out = k->n_outputs;
  sheaf_status st = check_counts(K, args, in, sizes, true);
  if (st) return st;
  const void *in_data[64];
  for (int i = 0; i < n_in; i++) in_data[i] = args[i].data;
  const sh_lower_info *info = &K->info;
  size_t n_args_ir = (size_t)info->n_args, n_extra = (size_t)(info->n_scratch + info->n_ragged);
  /* the argument table and the temporaries' list: on the stack unless large */
  sk_arg ir_stack[32];
  void *extra_stack[32];
  size_t extra_bytes_stack[32];
  bool heap = n_args_ir > 32 || n_extra > 32;
  sk_arg *ir = heap ? sh_calloc(ctx, n_args_ir ? n_args_ir : 1, sizeof(sk_arg)) : ir_stack;
  void **extra = heap ? sh_calloc(ctx, n_extra + 1, sizeof(void *)) : extra_stack;
  size_t *extra_bytes = heap ? sh_calloc(ctx, n_extra + 1, sizeof(size_t)) : extra_bytes_stack;
  if (!ir || !extra || !extra_bytes) st = SHEAF_ERR_NOMEM;
  for (int i = 0; !st && i < n_in + n_out; i++) ir[i].data = args[i].data;
  for (size_t i = n_in + n_out; !st && i < n_args_ir; i++) ir[i] = (sk_arg){0};
  /* weights the kernel reads packed */
  float *own[64] = {0};
  size_t own_bytes[64] = {0};
  bool held[64] = {0};
  if (!st) st = pack_weights(K, args, sizes, ir, own, own_bytes, held);
  int slot = n_in + n_out, ne = 0;
  for (int s = 0; !st && s < info->n_scratch; s++, ne++) {
    size_t n;
    st = sh_lower_numel(ctx, k, info->scratch[s], sizes, in_data, &n);
    if (st) break;
    extra_bytes[ne] = (n ? n : 1) * sizeof(float);
    if (!(extra[ne] = k_alloc(K, extra_bytes[ne]))) st = SHEAF_ERR_NOMEM;
    else ir[slot++].data = extra[ne];
  }
  for (int r = 0; !st && r < info->n_ragged; r++, ne++) {
    const sh_ktensor *t = &k->tensors[info->ragged[r]];
    int64_t E = sh_lower_aff(&t->dims[0].aff, sizes);
    extra_bytes[ne] = (size_t)(E > 0 ? E : 1) * sizeof(int32_t);
    if (!(extra[ne] = k_alloc(K, extra_bytes[ne]))) st = SHEAF_ERR_NOMEM;
    else {
      st = sh_lower_offsets(ctx, k, info->ragged[r], sizes, in_data, extra[ne]);
      ir[slot++].data = extra[ne];
    }
  }
  if (!st) {
    sk_abi abi;
    sh_lir_abi_init(ctx, 0, &abi);
    abi.alloc = k_alloc, abi.free = k_free, abi.alloc_user = K;
    int rc = K->fn(&abi, sizes, ir);
    if (rc == 2) st = sh_kernel_index_error(ctx, k, sizes, (const void *const *)ir, sizeof *ir);
    else if (rc != 0)
      st = sh_fail(ctx, SHEAF_ERR_NOMEM, "kernel '%s': a temporary could not be allocated", k->name);
  }
  release_weights(K, own, own_bytes, held);
  for (int i = 0; extra && i < ne; i++) k_free(K, extra[i], extra_bytes[i]);
  if (heap) {
    sh_free(ctx, extra, sizeof(void *) * (n_extra + 1));
    sh_free(ctx, extra_bytes, sizeof(size_t) * (n_extra + 1));
    sh_free(ctx, ir, sizeof(sk_arg) * (n_args_ir ? n_args_ir : 1));
  }
  return st;
}

sheaf_status sh_kernel_plan_bind(sheaf_kernel *K, const sheaf_kernel_arg *args, int n_args, int64_t *sizes,
                                 sheaf_kernel **V, sh_tune_rec **rec) {
  sh_kref_arg in[64];
  sheaf_status st = bind_call(K, args, n_args, false, "sheaf_kernel_plan_make", in, sizes, V, rec);
  return st ? st : check_counts(*V, args, in, sizes, false);
}

bool sh_kernel_weight_fns(const sheaf_kernel *k, int i, sh_pack_size_fn *size, sh_pack_fn *pack) {
  if (!sh_kernel_input_packed(k, i)) return false;
  *size = k->w[i].size, *pack = k->w[i].pack;
  return true;
}

uint64_t sh_kernel_weight_epoch(sheaf_kernel *k) {
  return atomic_load_explicit(&k->wepoch, memory_order_acquire);
}

uint64_t sh_kernel_weight_versions(sheaf_kernel *k, uint64_t *v) {
  pthread_mutex_lock(&k->mu);
  for (int i = 0; i < k->k->n_inputs; i++) v[i] = k->w[i].user_version;
  uint64_t e = atomic_load_explicit(&k->wepoch, memory_order_relaxed);
  pthread_mutex_unlock(&k->mu);
  return e;
}

void sh_kernel_plan_count(sheaf_kernel *k, int delta) { atomic_fetch_add(&k->plans, delta); }

bool sh_kernel_input_is_length(const sheaf_kernel *k, int i) { return i >= 0 && i < 64 && (k->lengths >> i & 1); }

int sh_kernel_n_tuned(const sheaf_kernel *k) { return k ? k->n_tuned : 0; }
int sh_kernel_n_variants(const sheaf_kernel *k) { return k ? k->n_var : 0; }
sheaf_kernel *sh_kernel_variant(const sheaf_kernel *k, int i) {
  return k && i >= 0 && i < k->n_var ? k->var[i] : NULL;
}

SHEAF_API sheaf_status sheaf_kernel_load_tuning(sheaf_ctx *ctx, const char *path) {
  if (!ctx) return SHEAF_ERR_INVALID_ARG;
  if (!path) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_kernel_load_tuning: path is NULL");
  sh_tune_set *s = sh_tune_ctx_set(ctx); /* tune_use.c: created on first use */
  if (!s) return SHEAF_ERR_NOMEM;
  sh_tune_set tmp; /* all of the file or nothing */
  sh_tune_set_init(&tmp, ctx);
  sheaf_status st = sh_tune_set_load(&tmp, path, false);
  for (int i = 0; !st && i < tmp.n; i++) st = sh_tune_set_add(s, &tmp.r[i]);
  sh_tune_set_free(&tmp);
  return st;
}
