/*
 * gemm.h — Sheaf's own f32 GEMM, BLIS style:  C[M,N] (+)= A[M,K] · B[K,N].
 *
 *   - B (a weight) is packed once into panels of SH_GEMM_NR columns
 *     (sh_gemm_pack_b); an unpacked B (activations × activations) is packed
 *     per call into the workspace.
 *   - A is read through row pointers or base + lda, and may be split along K
 *     into several sources ([h_left ; h_right] without the concatenation);
 *     the packing step is where the gather happens, so it costs nothing extra.
 *   - C is written through row pointers or base + ldc, optionally accumulated.
 *   - Fused epilogues, each on a column range: bias, relu/sigmoid/tanh/GELU,
 *     elementwise add/mul with another operand; or a whole LSTM cell's
 *     pointwise tail (B packed gate-interleaved, see SH_GEMM_PACK_GATES).
 *   - Micro-kernels for AVX-512, AVX2+FMA and scalar C, picked by the `isa`
 *     argument (callers pass sheaf_cpu_isa(); tests pass each level).
 *   - Parallel over the context's persistent pool (split N, or M, into a
 *     few dynamically claimed tasks per thread); a row-completion hook
 *     reports rows of C as they become final.
 *
 * Zero allocation per call when the caller passes a workspace (sh_gemm_ws)
 * that has grown to the call's needs; without one the call allocates and
 * frees its own.
 */
#ifndef SH_KERNELS_GEMM_H
#define SH_KERNELS_GEMM_H

#include "base/base.h"

/* Inlining forced where the copies specialise the code (-O2 and up); at
 * -O0 (the debug and ThreadSanitizer builds) each inlined copy keeps its
 * own stack slots — the AVX2 epilogue's five specialised copies with the
 * vector math inlined in each took a 267 KB frame under TSan, more than a
 * fiber's 256 KB stack — so there it is a plain call. */
#ifdef __OPTIMIZE__
#define SH_GEMM_SPECIALISE inline __attribute__((always_inline))
#else
#define SH_GEMM_SPECIALISE __attribute__((noinline))
#endif

#define SH_GEMM_NR 32      /* columns per packed-B panel */
#define SH_GEMM_MAX_KSRC 4 /* K-split sources of A */
#define SH_GEMM_MAX_EP 8   /* epilogue ops per call */
#define SH_GEMM_LSTM_G 16  /* hidden units per gate in a gate group */
#define SH_GEMM_LSTM_W (4 * SH_GEMM_LSTM_G) /* columns of a gate group: two panels */

/* ------------------------------------------------------------ packed B */

enum {
  SH_GEMM_PACK_TRANS = 1, /* the source is B^T: element (k, n) at b[n*ldb + k]
                             (a PyTorch Linear weight [out, in]) */
  SH_GEMM_PACK_GATES = 2  /* n = 4*hidden gate columns [g0 | g1 | g2 | g3];
                             packed gate-interleaved so that a group of two
                             panels holds all four gates of SH_GEMM_LSTM_G
                             hidden units (panel 2q: gates 0, 1; panel
                             2q + 1: gates 2, 3; 16 columns each).
                             Only usable with an LSTM or GRU epilogue. */
};

typedef struct sh_gemm_packed_b {
  int64_t k, n;       /* logical shape of B */
  int64_t n_panels;   /* panels of SH_GEMM_NR columns (zero-padded) */
  int64_t hidden;     /* SH_GEMM_PACK_GATES: n / 4; else 0 */
  int flags;
  float *data;        /* n_panels × k × SH_GEMM_NR, 64-byte aligned */
  size_t bytes;
} sh_gemm_packed_b;

/* Packs B[K,N] (row-major, leading dimension ldb, or B^T with
 * SH_GEMM_PACK_TRANS). K and N may be 0. */
sheaf_status sh_gemm_pack_b(sheaf_ctx *ctx, const float *b, int64_t ldb, int64_t k, int64_t n,
                            int flags, sh_gemm_packed_b **out);
/* Packs B again into pb, in place (its shape and flags, no allocation):
 * for a weight whose values changed. false: pb is NULL or b does not fit. */
bool sh_gemm_repack_b(sheaf_ctx *ctx, const float *b, int64_t ldb, sh_gemm_packed_b *pb);
/* Panel p of that (p < pb->n_panels, b fitting pb as above): for a caller
 * that spreads the panels of several weights over one pool run. */
void sh_gemm_repack_b_panel(const float *b, int64_t ldb, sh_gemm_packed_b *pb, int64_t p);
void sh_gemm_packed_b_free(sheaf_ctx *ctx, sh_gemm_packed_b *pb);

/* -------------------------------------------------------------- operands */

/* A read-only matrix of M rows: rows[m] when rows != NULL, else base + m*ld. */
typedef struct sh_gemm_in {
  const float *const *rows;
  const float *base;
  int64_t ld;
} sh_gemm_in;

/* A writable matrix of M rows, same convention. */
typedef struct sh_gemm_out {
  float *const *rows;
  float *base;
  int64_t ld;
} sh_gemm_out;

/* One K-source of A: columns [k0, k0 + k) of A come from `in`. */
typedef struct sh_gemm_src {
  int64_t k;
  sh_gemm_in in;
} sh_gemm_src;

/* ------------------------------------------------------------- epilogue */

typedef enum sh_gemm_ep_kind {
  SH_GEMM_EP_BIAS = 0, /* x += vec[n] */
  SH_GEMM_EP_ACT,      /* x = act(x) */
  SH_GEMM_EP_ADD,      /* x += other[m][n] */
  SH_GEMM_EP_MUL       /* x *= other[m][n] */
} sh_gemm_ep_kind;

typedef enum sh_gemm_act {
  SH_GEMM_ACT_RELU = 0,
  SH_GEMM_ACT_SIGMOID,
  SH_GEMM_ACT_TANH,
  SH_GEMM_ACT_GELU_TANH, /* 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))) */
  SH_GEMM_ACT_GELU_ERF   /* 0.5x(1 + erf(x / sqrt(2))), PyTorch's default GELU */
} sh_gemm_act;

/* One epilogue op on columns [n0, n1) of C (n1 <= 0: up to N). Ops run in
 * list order on the accumulated value, before it is stored. Column indices
 * of vec/other are absolute (column n reads vec[n], other row m column n). */
typedef struct sh_gemm_ep {
  sh_gemm_ep_kind kind;
  int64_t n0, n1;
  sh_gemm_act act;  /* EP_ACT */
  const float *vec; /* EP_BIAS: N floats */
  sh_gemm_in other; /* EP_ADD / EP_MUL */
} sh_gemm_ep;

/* The pointwise tail of an LSTM cell, fused into the GEMM's store. B must be
 * packed with SH_GEMM_PACK_GATES (n = 4*hidden); gate block g of B's columns
 * is gate `gate_i`/`gate_f`/`gate_o`/`gate_u` (the candidate). With
 * pre-activations z = A·B + bias:
 *   c = sigmoid(z_f) * c_prev + sigmoid(z_i) * tanh(z_u)
 *   h = sigmoid(z_o) * tanh(c)
 * c_prev may have no rows (NULL rows and base: zeros). C itself is not
 * written, and `accumulate` must be false. */
typedef struct sh_gemm_lstm {
  int gate_i, gate_f, gate_o, gate_u; /* a permutation of 0..3 */
  const float *bias;                  /* 4*hidden (logical order) or NULL */
  sh_gemm_in c_prev;
  sh_gemm_out c_out, h_out;
} sh_gemm_lstm;

/* The pointwise tail of a GRU cell (PyTorch's equations). B is packed with
 * SH_GEMM_PACK_GATES from four gate blocks over A = [x ; h_prev]:
 *   gate_r, gate_z: [W_r ; U_r], [W_z ; U_z]   (x and h parts summed)
 *   gate_nx: [W_n ; 0]    gate_nh: [0 ; U_n]   (kept apart: r scales U_n h)
 * With z = A·B + bias (bias per block: b_ir+b_hr, b_iz+b_hz, b_in, b_hn):
 *   r = sigmoid(z_r), u = sigmoid(z_z), n = tanh(z_nx + r * z_nh)
 *   h = (1 - u) * n + u * h_prev
 * h_prev may have no rows (zeros). C is not written. */
typedef struct sh_gemm_gru {
  int gate_r, gate_z, gate_nx, gate_nh; /* a permutation of 0..3 */
  const float *bias;                    /* 4*hidden (logical order) or NULL */
  sh_gemm_in h_prev;
  sh_gemm_out h_out;
} sh_gemm_gru;

/* ------------------------------------------------------------ workspace */

/* Per-thread packing buffers, grown on demand and reused across calls. A
 * workspace serves one sh_gemm call at a time: concurrent callers (e.g.
 * GEMMs issued from inside pool tasks) each need their own. */
typedef struct sh_gemm_ws sh_gemm_ws;
sheaf_status sh_gemm_ws_create(sheaf_ctx *ctx, sh_gemm_ws **out);
void sh_gemm_ws_free(sheaf_ctx *ctx, sh_gemm_ws *ws);
size_t sh_gemm_ws_bytes(const sh_gemm_ws *ws);

/* ---------------------------------------------------------------- call */

typedef struct sh_gemm_args {
  int64_t m;
  int n_src;                            /* >= 1 */
  sh_gemm_src src[SH_GEMM_MAX_KSRC];    /* K = sum of src[i].k */
  const sh_gemm_packed_b *b_packed;     /* either a packed B ... */
  sh_gemm_in b;                         /* ... or an unpacked B[K,N] (rows: K) */
  bool b_trans;                         /* unpacked B given as B^T[N,K] (rows: N), e.g.
                                           the keys in attention scores Q·K^T */
  int64_t n;                            /* N for an unpacked B */
  sh_gemm_out c;
  bool accumulate;                      /* C += A·B (before the epilogue) */
  int n_ep;
  sh_gemm_ep ep[SH_GEMM_MAX_EP];
  const sh_gemm_lstm *lstm;             /* replaces C and ep */
  sh_gemm_out lstm_gates;               /* with lstm, optional (no rows, no base: not
                                           written), for a backward pass: per row 5*hidden
                                           floats, blocks of `hidden`: sigmoid(z_i),
                                           sigmoid(z_f), tanh(z_u), sigmoid(z_o), tanh(c) */
  const sh_gemm_gru *gru;               /* replaces C and ep */
  sh_gemm_ws *ws;                       /* NULL: allocate for this call */
  /* Row-completion hook (NULL: none, and no cost). Called once for every
   * row of C over the whole call, in blocks [m0, m0 + rows), after those
   * rows are final: every column, the whole K sum, accumulate and epilogue
   * applied and stored (LSTM / GRU: c_out / h_out written). Blocks come in
   * no particular order and possibly concurrently from several pool
   * threads; tid (0 .. threads-1) is the pool thread calling, for per-thread
   * scratch. Meant for follow-up pointwise work on rows still hot in cache:
   * when a task owns whole rows (one K pass, every N panel; 1 thread, or M
   * split over threads) it is called from inside the loop as each row block
   * (or micro-panel) is finished; otherwise (N split over threads) after
   * the whole product, in blocks of at most 64 rows spread over the same
   * threads (up to 4 blocks per thread). Not called when the call fails or M or N is
   * 0. The callee must not call sh_gemm with the same workspace. */
  void (*rows_done)(void *arg, int64_t m0, int64_t rows, int tid);
  void *rows_done_arg;
} sh_gemm_args;

/* Runs the GEMM with the micro-kernels of `isa` (lowered to what the host
 * supports) on up to `threads` threads of ctx's pool (<= 0: all). */
sheaf_status sh_gemm(sheaf_ctx *ctx, sheaf_isa isa, int threads, const sh_gemm_args *args);

/* Per-node small products (gemm_small.c; the runtime's matmul nodes, e.g.
 * an attention's scores and context): y[i] = a[i, :]·x for i < r (a with
 * row stride lda, x of k), and y[i, :] = a[i, :]·b (b [k, c], row stride
 * ldb; y [r, c] contiguous). AVX2+FMA when `isa` and the host allow it,
 * else the scalar loops; neither reads past a row's last element. */
void sh_f32_small_mv(sheaf_isa isa, int64_t r, int64_t k, const float *a, int64_t lda, const float *x,
                     float *y);
void sh_f32_small_mm(sheaf_isa isa, int64_t r, int64_t k, int64_t c, const float *a, int64_t lda,
                     const float *b, int64_t ldb, float *y);

/* ------------------------------------------------ internal kernel table */

/* Micro-kernel: rows × cols block of C from a packed A micro-panel (kc × mr,
 * stride mr) and a B slice (kc rows, stride ldb). Writes (or, accumulate,
 * adds to) c[r][0..cols). cols <= SH_GEMM_NR; rows <= the kernel's max MR. */
typedef void (*sh_gemm_ukernel_fn)(int64_t rows, int64_t cols, int64_t kc, const float *a,
                                   const float *b, int64_t ldb, float *const *c,
                                   bool accumulate);

/* Packs an A micro-panel segment: dst[k*rows + r] = src[r][k], k < len. */
typedef void (*sh_gemm_pack_a_fn)(int64_t rows, int64_t len, const float *const *src, float *dst);

typedef struct sh_gemm_kernel {
  const char *name;
  int mr;                     /* max rows per micro-tile */
  sh_gemm_ukernel_fn ukernel; /* handles rows 1..mr, cols 1..SH_GEMM_NR */
  sh_gemm_pack_a_fn pack_a;   /* rows <= mr */
  int pad_from;               /* a micro-panel of this many rows (< mr) runs as one
                                 more, a zero row of A whose C row is discarded:
                                 the kernel is faster that way (0: never) */
} sh_gemm_kernel;

const sh_gemm_kernel *sh_gemm_kernel_get(sheaf_isa isa);

/* Cache blocking: K block (elements), rows of A packed per block, B panels
 * per L2 block, and the rows per thread from which a packed-B call splits M
 * rather than N. Process-wide; for tests and tuning only (values <= 0 keep
 * the current one). sh_gemm_get_blocking reads them back. */
void sh_gemm_set_blocking(int64_t kc, int64_t mc, int64_t nc_panels, int64_t split_m_rows);
void sh_gemm_get_blocking(int64_t *kc, int64_t *mc, int64_t *nc_panels, int64_t *split_m_rows);

/* Per-ISA kernels (gemm_scalar.c, gemm_avx2.c, gemm_avx512.c). */
void sh_f32_gemm_ukernel_4x32__scalar(int64_t rows, int64_t cols, int64_t kc, const float *a,
                                      const float *b, int64_t ldb, float *const *c,
                                      bool accumulate);
void sh_f32_gemm_ukernel_6x16x2__avx2(int64_t rows, int64_t cols, int64_t kc, const float *a,
                                      const float *b, int64_t ldb, float *const *c,
                                      bool accumulate);
void sh_f32_gemm_ukernel_14x32__avx512(int64_t rows, int64_t cols, int64_t kc, const float *a,
                                       const float *b, int64_t ldb, float *const *c,
                                       bool accumulate);

void sh_f32_gemm_pack_a__scalar(int64_t rows, int64_t len, const float *const *src, float *dst);
void sh_f32_gemm_pack_a__avx2(int64_t rows, int64_t len, const float *const *src, float *dst);
void sh_f32_gemm_pack_a__avx512(int64_t rows, int64_t len, const float *const *src, float *dst);

/* Epilogue over a micro-tile t[rows][SH_GEMM_NR] (stride SH_GEMM_NR) whose
 * first column is packed column `col0` of panel col0/NR, rows m0.. of C.
 * LSTM / GRU tails: t[rows][SH_GEMM_LSTM_W] (stride SH_GEMM_LSTM_W), the
 * two panels of gate group col0 / SH_GEMM_LSTM_W. */
typedef struct sh_gemm_ep_ctx {
  const sh_gemm_args *args;
  int64_t n;        /* N (logical) */
  int64_t hidden;   /* LSTM */
} sh_gemm_ep_ctx;
void sh_gemm_epilogue__scalar(const sh_gemm_ep_ctx *e, float *t, int64_t m0, int64_t rows,
                              int64_t col0, int64_t cols);
void sh_gemm_epilogue__avx2(const sh_gemm_ep_ctx *e, float *t, int64_t m0, int64_t rows,
                            int64_t col0, int64_t cols);
void sh_gemm_epilogue__avx512(const sh_gemm_ep_ctx *e, float *t, int64_t m0, int64_t rows,
                              int64_t col0, int64_t cols);

#endif
