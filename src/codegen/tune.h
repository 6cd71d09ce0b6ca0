/*
 * tune.h — the tuner (docs/CODEGEN.md, "Tuner"): schedule records per shape
 * class and the search that makes them.
 *
 * A record maps (kernel hash, ISA, compiler identity, shape class) to the
 * default schedule's knobs (sh_sched_opts). A shape class buckets every
 * size of the kernel: 0 alone, else the power of two at or below it (64
 * covers 64 .. 127), so a family of shapes shares one record and one
 * compiled variant (DietCode). Records are one line of text each
 * (tune_record.c); the search (tune_search.c) measures candidates of the
 * knob list below against the default schedule — dense or ragged kernels,
 * inputs synthesized from the shape — and keeps the fastest whose output
 * agrees with it; the context counts which records chose a run's schedule
 * (tune_use.c, sheaf_kernel_tuning_stats).
 */
#ifndef SH_CODEGEN_TUNE_H
#define SH_CODEGEN_TUNE_H

#include "base/buf.h"
#include "codegen/lir_sched.h"
#include "codegen/lower.h"
#include "lang/kernel.h"

#define SH_TUNE_MAX_SIZES 16
#define SH_TUNE_NAME_MAX 64

typedef struct sh_tune_rec {
  char kernel[SH_TUNE_NAME_MAX];
  char ir[33];  /* sh_tune_kernel_hash */
  char isa[16]; /* sheaf_isa_name */
  char cc[33];  /* sh_tune_compiler_id */
  int n_sizes;  /* the kernel's sizes, in declaration order */
  char size_names[SH_TUNE_MAX_SIZES][SH_TUNE_NAME_MAX];
  int64_t cls[SH_TUNE_MAX_SIZES];   /* each size's bucket (sh_tune_bucket) */
  int64_t sizes[SH_TUNE_MAX_SIZES]; /* the sizes it was measured at (0: unknown) */
  sh_sched_opts opts;               /* 0 fields: the ISA's default */
  double ns, default_ns;            /* measured times (0: unknown) */
  char origin[160];                 /* "FILE:LINE" it was parsed from ("" when made here) */
  struct sh_tune_use *use;          /* its tally in the context (sh_tune_select), or NULL */
} sh_tune_rec;

/* How often a record chose the schedule of a kernel's run, per context
 * (sheaf_kernel_tuning_stats): entries are never freed or moved before the
 * context is, so a compiled kernel's records point at theirs. */
typedef struct sh_tune_use {
  char kernel[SH_TUNE_NAME_MAX];
  char origin[160];
  char cls[256];   /* "M:64,K:256" */
  char knobs[256]; /* "mr=3 nr=32" (the knobs not 0), or "default" */
  uint64_t runs;   /* atomic */
} sh_tune_use;

typedef struct sh_tune_set {
  sheaf_ctx *ctx;
  sh_tune_rec *r;
  int n, cap;
  struct sh_tune_uses *uses; /* the context's set only: sh_tune_use_of */
} sh_tune_set;

/* The knobs the search and the records know, one line each in tune_record.c:
 * a field of sh_sched_opts by name, and the values the search tries beyond
 * the default (mr and nr are searched together, as the ISA's tiles). */
typedef struct sh_tune_field {
  const char *name;
  size_t off;
  int n_vals;
  int vals[8];
} sh_tune_field;
const sh_tune_field *sh_tune_fields(int *n);
int sh_tune_field_get(const sh_sched_opts *o, const sh_tune_field *f);
void sh_tune_field_set(sh_sched_opts *o, const sh_tune_field *f, int v);
/* The register tiles (mr, nr) the search tries for vector width w. */
int sh_tune_tiles(int w, const int (**tiles)[2]);
/* "mr=6 nr=16 ..." for every field (0: default). */
void sh_tune_opts_print(const sh_sched_opts *o, sh_buf *out);
bool sh_tune_opts_is_default(const sh_sched_opts *o);
/* "mr=3 nr=32": the fields that are not 0 only. */
void sh_tune_opts_print_set(const sh_sched_opts *o, sh_buf *out);

/* 0 for v <= 0, else the largest power of two <= v. */
int64_t sh_tune_bucket(int64_t v);
/* Whether record r applies to the bound sizes of k (same count, same buckets). */
bool sh_tune_matches(const sh_tune_rec *r, const int64_t *sizes, int n);
/* "M:64,K:256" (names with their buckets, or with `vals` when not NULL). */
void sh_tune_class_print(const sh_tune_rec *r, const int64_t *vals, sh_buf *out);

/* The kernel's identity: SipHash-128 of its checked form (sh_kernel_print). */
sheaf_status sh_tune_kernel_hash(sheaf_ctx *ctx, const sh_kernel *k, char hex[33]);
/* The compiler's identity: a hash of its realpath, size and mtime ("" and
 * an error when cc cannot be stat'ed). */
sheaf_status sh_tune_compiler_id(sheaf_ctx *ctx, const char *cc, char hex[33]);

void sh_tune_set_init(sh_tune_set *s, sheaf_ctx *ctx);
void sh_tune_set_free(sh_tune_set *s);
/* Adds r, replacing a record with the same key (kernel, ir, isa, cc, class). */
sheaf_status sh_tune_set_add(sh_tune_set *s, const sh_tune_rec *r);
/* Parses records (`file` names them in errors: "FILE:LINE: ..."):
 * SHEAF_ERR_PARSE for a malformed line (nothing is added then). A record
 * with a field this build does not know is skipped with a warning. */
sheaf_status sh_tune_set_parse(sh_tune_set *s, const char *file, const char *text, size_t n);
/* sh_tune_set_parse of a file; missing_ok: a missing file adds nothing. */
sheaf_status sh_tune_set_load(sh_tune_set *s, const char *path, bool missing_ok);
void sh_tune_set_write(const sh_tune_set *s, sh_buf *out);
/* Writes the set to path (whole or not at all). */
sheaf_status sh_tune_set_save(const sh_tune_set *s, const char *path);

/* The records file of a kernel hash in a cache directory:
 * DIR/tune/HASH.tune (out >= 4096 bytes). */
void sh_tune_cache_path(const char *cache_dir, const char *ir, char *out, size_t cap);

/* The context's tally of record r (found or added; NULL when the context
 * holds SH_TUNE_MAX_USES of them already, or out of memory). Thread-safe. */
#define SH_TUNE_MAX_USES 64
sh_tune_use *sh_tune_use_of(sheaf_ctx *ctx, const sh_tune_rec *r);
/* One more run chose r's schedule (a relaxed atomic increment). */
void sh_tune_count(sh_tune_rec *r);
/* The context's record set (sheaf_kernel_load_tuning's), created empty on
 * first use (thread-safe); NULL when out of memory. */
sh_tune_set *sh_tune_ctx_set(sheaf_ctx *ctx);

/* The records that apply to kernel k (hash ir) on (isa, cc): from `loaded`
 * (may be NULL) and from the cache directory's file, into *out (n_out of
 * them; free with sh_free(ctx, *out, n * sizeof)). Records of k's name with
 * another hash or compiler are stale: skipped with a warning through the
 * context's log callback. Each record's `use` is its tally in the context. */
sheaf_status sh_tune_select(sheaf_ctx *ctx, const sh_kernel *k, const char *ir, const char *isa,
                            const char *cc, const sh_tune_set *loaded, const char *cache_dir,
                            sh_tune_rec **out, int *n_out);

/* Lower + default schedule with opts + emit (sh_lower_generate's pipeline
 * with the knobs set). */
sheaf_status sh_tune_generate(sheaf_ctx *ctx, const sh_kernel *k, sheaf_isa isa, const sh_sched_opts *opts,
                              sh_buf *c, sh_lower_info *info);

/* ---------------------------------------------------------- the search */

typedef struct sh_tune_request {
  const char *source; /* kernel declarations */
  size_t len;
  const char *kernel; /* the kernel to tune */
  bool isa_set;       /* false: sheaf_cpu_isa() */
  sheaf_isa isa;
  const char *cache_dir, *cc; /* NULL: the JIT's defaults */
  const int64_t *sizes;       /* a value for each of the kernel's sizes, in order */
  int n_sizes;
  /* lengths of ragged extents (the values of an i32 length input), drawn
   * in order, cycling; NULL: pseudo-random in 1 .. 48 from a fixed seed
   * (WikiText-2's sentences average 25 tokens) */
  const int64_t *lengths;
  size_t n_lengths;
  double budget_s;            /* wall-clock time for the search (> 0) */
  int max_candidates;         /* 0: no limit besides the budget */
  void (*progress)(void *user, const char *line); /* may be NULL */
  void *user;
  struct sh_tune_stats *stats; /* may be NULL: how the search went */
} sh_tune_request;

typedef struct sh_tune_stats {
  int passes;   /* coordinate-descent passes over the knobs (the last found nothing, or the budget ended it) */
  int compiled; /* candidates compiled and measured */
  int joint;    /* of them, tile x kc pairs of the joint phase */
  bool budget_stop;
  double seconds;
} sh_tune_stats;

/* Whether input i of k gives the lengths of a ragged dimension. */
bool sh_tune_is_lengths(const sh_kernel *k, int i);

/* Searches the knobs for one kernel at one shape: the default schedule
 * first, then coordinate descent — one knob at a time (the tiles, then each
 * field of sh_tune_fields, keeping the best so far), repeated while a pass
 * improves — and the two fastest tiles jointly with each kc value; each
 * candidate compiled through
 * the JIT cache, checked against the default's output (a wrong one is
 * discarded) and timed on the thread's CPU clock (min of several runs).
 * *out: the record (the default's opts when nothing beat it by 2 % in the
 * search, or the winner was not confirmed: sh_tune_confirm_wins).
 * Inputs are pseudo-random: f32 in [-1, 1), lengths as the request says,
 * other i32 in 0 .. 7. */
sheaf_status sh_tune_kernel(sheaf_ctx *ctx, const sh_tune_request *r, sh_tune_rec *out);

/* The confirmation of a search's winner: rounds of the default D and the
 * candidate C timed in turn (the first one alternating; each side >= 4 ms
 * of calls), ratios[r] = t(D) / t(C) of round r (above 1: C faster);
 * *d_ns, *c_ns (may be NULL) the best round's ns per call. */
#define SH_TUNE_CONFIRM_ROUNDS 21
sheaf_status sh_tune_confirm_pair(sheaf_ctx *ctx, sheaf_kernel *D, sheaf_kernel *C, const sheaf_kernel_arg *args,
                                  int n_args, int rounds, double *ratios, double *d_ns, double *c_ns);
/* Whether the candidate wins clearly: at least 8 rounds, the median ratio
 * >= 1.03 and the lower quartile > 1.02 (the candidate 2 % faster in three
 * quarters of the rounds: a load swing on a shared machine moves single
 * rounds, not three quarters of them). *median may be NULL. */
bool sh_tune_confirm_wins(const double *ratios, int n, double *median);

#endif
