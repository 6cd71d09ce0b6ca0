/*
 * lir_sched.h — schedule primitives on the loop IR, and the default
 * schedule (docs/CODEGEN.md). Each primitive checks that it applies
 * and otherwise fails with SHEAF_ERR_INVALID_ARG and a message naming the
 * kernel, the primitive and the statement, leaving the kernel unchanged.
 * None changes what the kernel computes (the interpreter, sh_lir_run,
 * gives the same results before and after, up to float reassociation in
 * cache_write / rfactor).
 *
 * Loops are named by their statement ids (sh_lir_find_loop finds one by
 * its variable's name). A split loop i becomes i_o (outer) and i_i (inner).
 */
#ifndef SH_CODEGEN_LIR_SCHED_H
#define SH_CODEGEN_LIR_SCHED_H

#include "codegen/lir.h"

#define SH_SCHED_MAX_BAND 8

typedef enum sh_sched_tail {
  SH_SCHED_TAIL_GUARD = 0, /* ceil(E/f) tiles; the body guarded by i_o·f + i_i < E (pushed down to
                              the stores, so bands stay perfectly nested) */
  SH_SCHED_TAIL_PEEL,      /* floor(E/f) whole tiles, then a tail loop i_t over the E mod f rest */
  SH_SCHED_TAIL_PAD,       /* ceil(E/f) tiles, no guard: every access by i indexes a dimension
                              whose storage is padded to a multiple of f (CoRa loop padding;
                              spatial loops only) */
  SH_SCHED_TAIL_GUARD_TOP  /* as GUARD, with one if around the inner loop's whole body (fewer
                              tests; the body is then no perfect band for later primitives) */
} sh_sched_tail;

/* loop -> outer (extent ceil(E/f) or floor(E/f)) and inner (extent f).
 * Out-parameters may be NULL; *tail is SH_LIR_NONE unless PEEL left one. */
sheaf_status sh_sched_split(sh_lir_kernel *k, sh_lir_stmt loop, int64_t factor, sh_sched_tail tail,
                            sh_lir_stmt *outer, sh_lir_stmt *inner, sh_lir_stmt *tail_loop);
/* order: n loops of one perfectly nested band, in their new order
 * (outermost first). */
sheaf_status sh_sched_reorder(sh_lir_kernel *k, int n, const sh_lir_stmt *order);
/* Two perfectly nested loops into one of extent Eo·Ei. */
sheaf_status sh_sched_fuse(sh_lir_kernel *k, sh_lir_stmt outer, sh_lir_stmt inner,
                           sh_lir_stmt *fused);
/* Constant extent up to 256. */
sheaf_status sh_sched_unroll(sh_lir_kernel *k, sh_lir_stmt loop);
/* An innermost loop of extent `width` (8 or 16; 1 leaves it as it is)
 * whose stores are stride-1 in its variable (or reductions over it). */
sheaf_status sh_sched_vectorize(sh_lir_kernel *k, sh_lir_stmt loop, int width);
/* Iterations over the pool: each store inside indexes by the loop's
 * variable or goes to a local allocated inside. */
sheaf_status sh_sched_parallel(sh_lir_kernel *k, sh_lir_stmt loop);

/* Result of cache_write / rfactor: the local, its alloc, and the loops of
 * the copies of the band (init: identity or initial value; the band
 * itself, now accumulating into the local; the final store). */
typedef struct sh_sched_cache {
  sh_lir_buf local;
  sh_lir_stmt alloc;
  int n;                                   /* loops in the band */
  sh_lir_stmt init[SH_SCHED_MAX_BAND];
  sh_lir_stmt band[SH_SCHED_MAX_BAND];
  sh_lir_stmt final[SH_SCHED_MAX_BAND];
} sh_sched_cache;

/* Register tiling of a reduction (the GEMM micro-kernel shape): band_root
 * heads a perfect band of constant-extent spatial loops whose innermost
 * body is [optional init C[idx] = v0, reduction nest ... C[idx] op= v].
 * The tile C[band] lives in a local across the reduction loops, which move
 * outside the band; it is initialised once and stored once. */
sheaf_status sh_sched_cache_write(sh_lir_kernel *k, sh_lir_stmt band_root, sh_sched_cache *out);
/* A vector accumulator for a reduction: band_root heads a perfect band of
 * constant-extent loops that are reduction loops of `store` (NONE: the one
 * reduction store in the band); the partial results live in a local over
 * the enclosing reduction loops and are combined into the store's target
 * once after them (the horizontal reduction). */
sheaf_status sh_sched_rfactor(sh_lir_kernel *k, sh_lir_stmt band_root, sh_lir_stmt store,
                              sh_sched_cache *out);
/* Inlines the pointwise producer `store` (T[i, j, ...] = f, T a temporary
 * written only there) into every load of T; its nest disappears. */
sheaf_status sh_sched_compute_inline(sh_lir_kernel *k, sh_lir_stmt store);
/* Inlines the pointwise consumer `store` (O[i, ...] = g(T[i, ...]), T a
 * temporary read only there and written by one plain store) into T's
 * writer: a fused epilogue. */
sheaf_status sh_sched_reverse_inline(sh_lir_kernel *k, sh_lir_stmt store);
/* The same for the temporary `of` among those the consumer reads
 * (SH_LIR_NONE: the first temporary it reads, as above): the gated unit's
 * out = f(g, h) fuses into h's writer, g being written before it. */
sheaf_status sh_sched_reverse_inline_of(sh_lir_kernel *k, sh_lir_stmt store, sh_lir_buf of);
/* Loop-invariant code motion under s (the root: everywhere): a maximal
 * subexpression of a store's value that holds a costly operation (exp,
 * log, sqrt, rsqrt, tanh, sigmoid, gelu, softplus, erf, division, pow) and
 * is invariant in the innermost loops around the store goes into a scalar
 * local computed before the outermost of them; `a / b` with b invariant
 * becomes a * (1 / b) with the reciprocal hoisted; an invariant load is
 * hoisted when it crosses a serial loop (mu[n] in x - mu[n]). Never crosses a
 * parallel loop or an if, nor a loop that stores what the value reads.
 * *n_hoisted (may be NULL) counts the values moved. */
sheaf_status sh_sched_hoist(sh_lir_kernel *k, sh_lir_stmt s, int *n_hoisted);
/* Storage reuse: temporary T lives in O's storage (T is then never
 * allocated). O (same dims) must be written once, by a plain store
 * O[r, i..] = f(T[r, i..], ...) inside a row loop r, indexed by r and every
 * loop between; every access to T is inside r at row r and before that
 * store's statement (T's last reader), and O is accessed nowhere else. */
sheaf_status sh_sched_share(sh_lir_kernel *k, sh_lir_buf T, sh_lir_buf O);
/* Loop distribution: loop's body S1..Sn becomes n loops of loop's extent,
 * one statement each, in order (loops[0] is `loop`, holding S1; at most
 * cap written, *n_out = n). Every buffer written in the body must be
 * accessed in it at one index list that depends on loop's variable. */
sheaf_status sh_sched_distribute(sh_lir_kernel *k, sh_lir_stmt loop, sh_lir_stmt *loops, int cap, int *n_out);
/* exp(A - b[J]) where b is a finished max-reduction of A's expression
 * (b[I] = -inf; b[I] max= E over one reduction loop, before the exp; A =
 * E at a loop of the reduction's extent) becomes exp_nonpos (its argument
 * is <= 0): softmax's exp(x - max x). *n_marked (may be NULL) counts them. */
sheaf_status sh_sched_exp_ranges(sh_lir_kernel *k, int *n_marked);
/* A sum over reduction loops of a · c or a / c, c invariant in them,
 * whose element is set to 0 just before them (C = 0; for r: C += a·c)
 * becomes C = 0; for r: C += a; C = C · c (one multiply or divide per
 * element, not per term; float rounding differs). *n_factored may be NULL. */
sheaf_status sh_sched_factor(sh_lir_kernel *k, int *n_factored);
/* Storage contraction: a rank-1 temporary T accessed only as T[r] inside
 * the loop r (a per-row scalar: softmax's max and sum, layernorm's mean)
 * becomes a scalar local allocated in r's body (a register, no memory). */
sheaf_status sh_sched_contract(sh_lir_kernel *k, sh_lir_buf T);
/* Loop fusion of siblings: loop b, directly after loop a and of the same
 * extent, is merged into a (its body appended to a's, b's variable read as
 * a's). Legal when every buffer one body writes and the other accesses is
 * indexed, at every access, at one dimension by the same c·v + (terms of
 * outer loops), c != 0 (iteration v of b touches only iteration v's). */
sheaf_status sh_sched_fuse_siblings(sh_lir_kernel *k, sh_lir_stmt a, sh_lir_stmt b);
/* Storage padding: dimension dim of b is allocated rounded up to a
 * multiple of tile (CoRa; the caller's buffers must follow). */
sheaf_status sh_sched_pad(sh_lir_kernel *k, sh_lir_buf b, int dim, int64_t tile);
/* Packs input b [K, N] into panels of `panel` columns (sh_lir_layout
 * PANELS): the caller passes it packed by the emitted NAME_pack_b. */
sheaf_status sh_sched_pack(sh_lir_kernel *k, sh_lir_buf b, int64_t panel);
/* Loop unswitching of split tails: the guards inside s of the form
 * a < b, affine in s's constant-extent loops, are decided once for the
 * whole of s: s becomes if (every guard holds everywhere) s-without-guards
 * else if (some iteration can pass) s. */
sheaf_status sh_sched_unswitch(sh_lir_kernel *k, sh_lir_stmt s);
/* K blocking of a register tile c (from cache_write): its reduction loop
 * `kloop` (directly in the tile's alloc) runs in blocks of kc steps, the
 * block loop k_blk moved around `at` (an ancestor of the tile; it and the
 * loops below it down to the tile run over the target's elements, those
 * below it serially: `at` may be parallel, one pass per block). The
 * write-back target keeps the partial sums: every block starts the tile at
 * the reduction's identity (the tile must start there), blocks after the
 * first combine the target's old value into it at the write-back, blocks
 * but the last store it plainly, the last runs the write-back as it was
 * (a fused epilogue). A write-back that combines runs in every block. A
 * constant extent <= kc leaves the kernel unchanged. */
sheaf_status sh_sched_kblock(sh_lir_kernel *k, const sh_sched_cache *c, sh_lir_stmt kloop, sh_lir_stmt at,
                             int64_t kc);

/* cache_read: a packed copy of input b (dense, f32) made at the top of
 * each iteration of loop `at`, in the order of n loops inside it: a
 * temporary P[ext(at), ext(loops[0]), ...] filled by a copy nest over the
 * loops' ranges, P[v_at, c..] = b[idx(c..)] with each index clamped into
 * b's extent (the copy reads in bounds where the body's guards would not
 * read at all), and every load of b under `at` — all at one index list,
 * which may use only the named loops, `at` and loops around it — reads
 * P[v_at, loops..] instead. `at` may be parallel (one slot of P per
 * iteration), not inside a parallel loop; the loops' extents and at's
 * are of sizes only. out (may be NULL) gets P and the copy. */
typedef struct sh_sched_read {
  sh_lir_buf buf;   /* P */
  sh_lir_stmt copy; /* the copy nest's top statement (a loop, or an if when an extent may be 0) */
  int n;
  sh_lir_stmt loops[SH_SCHED_MAX_BAND]; /* the copy's loops, outermost first */
} sh_sched_read;
sheaf_status sh_sched_cache_read(sh_lir_kernel *k, sh_lir_buf b, sh_lir_stmt at, int n, const sh_lir_stmt *loops,
                                 sh_sched_read *out);
/* cache_read of a ragged input b (f32, dense access) at loop `at`
 * (sched_read_ragged.c): the dimensions that every load of b under `at`
 * indexes alike, by `at` and loops around it only, are fixed (dimension
 * 0, the sequence, must be one); the others are copied whole (a ragged
 * one up to the sequence's length) into a dense scoped temporary
 * P[copied dims..] at the top of each iteration of `at` (a ragged
 * dimension sized at the sequence's length; allocated around `at`, or
 * its body when `at` is parallel or the sizes use its variable: a copy
 * per task), and every load of b under `at` reads P. `at` is a serial or
 * parallel loop, not inside a vector or unrolled loop; a load at a fixed
 * index other than a variable or a constant is not under a condition on
 * the loops' variables alone (the copy runs on every iteration). out (may
 * be NULL) gets P, the copy nest and its loops (outermost first). */
sheaf_status sh_sched_cache_read_ragged(sh_lir_kernel *k, sh_lir_buf b, sh_lir_stmt at, sh_sched_read *out);
/* Storage contraction of a ragged scratch temporary T (an OUT the
 * lowering marked scratch: the caller's, not read after the call) to a
 * dense scoped temporary per run of loop `at` (sched_read_ragged.c):
 * every access of T is under `at`, indexed alike at its fixed dimensions
 * (as cache_read_ragged's), which hold the variables of `at` and of every
 * loop around it (each run owns its block); T[fixed, c..] becomes
 * P[c..], P sized by the other dimensions' extents (a ragged one: the
 * sequence's length) and allocated around `at` (or its body, when `at` is
 * parallel or the extents use its variable): the multi-head attention's
 * scores, exps, maxima and sums per (sequence, head), its products per
 * sequence, reused from one to the next instead of spread over the call. */
sheaf_status sh_sched_contract_ragged(sh_lir_kernel *k, sh_lir_buf T, sh_lir_stmt at);

/* Row-block fusion (sched_rowblock.c; TVM's compute_at). `nest`, a serial
 * loop over E rows, directly follows the statement holding the serial
 * row-block loop `at` (extent ceil(E / rows), not inside another loop or
 * a condition of that statement: nest would run once per iteration).
 * Every buffer that one of them writes and the other accesses is owned
 * per block at one dimension: indexed in at's nest only inside at, as
 * rows·v_at + e with e in [0, rows) from loops inside at, and in nest
 * exactly by nest's variable. nest moves to the end of
 * at's body as `for n_i in 0..rows: if v_at·rows + n_i < E: body` (*inner,
 * may be NULL, gets n_i): each block's rows are consumed right after they
 * are produced. */
sheaf_status sh_sched_compute_at(sh_lir_kernel *k, sh_lir_stmt nest, sh_lir_stmt at, int64_t rows,
                                 sh_lir_stmt *inner);
/* Storage shrink: temporary T, accessed only inside loop `at`'s body, at
 * one dimension always as R·v_at + e with e in [0, R) from loops inside at
 * (R > 0 the same everywhere), and for each loop around at at another one
 * exactly by its variable (each run of at owns its part), keeps R rows there, indexed by e: one
 * block's storage, reused by every iteration of at, one copy per pool
 * thread (per_task: at may then run over the pool; tasks use their
 * thread's copy). */
sheaf_status sh_sched_shrink(sh_lir_kernel *k, sh_lir_buf T, sh_lir_stmt at);

/* The default schedule for `isa` (vector width 16 / 8 / 1): pointwise
 * temporaries inlined; GEMM-like nests register-tiled (mr × nr tile in
 * registers over k, B packed when it is a weight, the consumer epilogue
 * fused into the tile's store, tails unswitched, tiles of row blocks over
 * the pool); innermost loops vectorized (reductions through vector
 * accumulators), outer loops parallel. */
sheaf_status sh_sched_default(sh_lir_kernel *k, sheaf_isa isa);

/* The default schedule's knobs (a tuner's search space); 0 keeps the
 * value the ISA picks. */
typedef struct sh_sched_opts {
  int mr, nr;    /* GEMM register tile: rows, columns (a multiple of the vector width) */
  int row_tiles; /* GEMM tiles per row block (16) */
  int no_pack;   /* 1: leave a weight B unpacked */
  int row_unroll; /* vectors per step of a row loop: U (4) */
  int par_block; /* iterations per parallel task of a row nest (4) */
  int no_pair;   /* 1: two GEMMs over the same A (the gated unit) get a tile each, not one tile
                    holding both (whose mr, by default, is half the single tile's) */
  int kc;        /* GEMM K block: reduction steps per block (sh_sched_kblock, the block loop
                    around the row block's tiles) when K may exceed it; <= 0: none, the
                    default (blocking measured no faster on the AVX2 host: docs/CODEGEN.md) */
  int prefetch;  /* GEMM: software prefetch of a packed B panel this many k rows ahead, at the
                    top of the tile's reduction loop; 0: the default (64 rows for one GEMM's
                    tile on a vector ISA; none at the scalar level and for two GEMMs sharing
                    a tile) */
  int no_prefetch; /* 1: no prefetch (whatever `prefetch` says) */
  int rem_rows;  /* GEMM: rows of the remainder tile (a copy of the partial tile with fewer row
                    loops' steps, taken when at most that many rows are left); 0: the default
                    (mr - mr / 3: AVX2 4 of 6), -1: none (a partial tile runs all mr rows) */
  int pack_a;    /* GEMM: 1: A's rows of each row block packed tile-major once per row block
                    (sh_sched_cache_read; the row blocks then run over the pool, not row
                    blocks x column panels), -1: not; 0: the default (not: a knob for the tuner) */
  int prefetch_c; /* GEMM: 1: each tile starts by prefetching the lines its write-back stores
                      (for writing), -1: not; 0: the default (not: a knob for the tuner) */
  int row_block; /* a GEMM whose product is read only by the row-wise nest after it (a row
                    reduction over its columns: log-softmax, layernorm): rows per row block,
                    the consumer run per block right after it (compute_at) and the product
                    kept for one block only (shrink); 0: the default (sched_default.c), -1:
                    not fused (the consumer after the whole GEMM) */
  int pack_rows;  /* ragged nests: 1: an input read per head, its rows strided by the other
                     heads, is copied dense per head (sh_sched_cache_read_ragged); 0, -1: not,
                     the default (measured no faster: docs/CODEGEN.md) */
} sh_sched_opts;
sheaf_status sh_sched_default_opts(sh_lir_kernel *k, sheaf_isa isa, const sh_sched_opts *opts);

/* The nth (from 0) store to b in program order, or SH_LIR_NONE. */
sh_lir_stmt sh_lir_find_store(const sh_lir_kernel *k, sh_lir_buf b, int nth);
/* A buffer by name, or SH_LIR_NONE. */
sh_lir_buf sh_lir_find_buffer(const sh_lir_kernel *k, const char *name);

#endif
