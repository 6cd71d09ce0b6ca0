/*
 * bench_util.h — what the model benchmarks (bench/bench_treelstm.c,
 * bench_bilstm.c, bench_lang.c) share: their common flags and setup,
 * time-bounded throughput of a model on the runtime (every policy), the
 * GEMM ceiling (Sheaf's own sh_gemm on a model's shape), running a PyTorch
 * peer script at a thread count and reading its JSON lines and check
 * outputs, the runtime-overhead table, temporary files, the JSON records
 * file. (The Makefile links it into every benchmark.)
 */
#ifndef SHEAF_BENCH_UTIL_H
#define SHEAF_BENCH_UTIL_H

#include <stdio.h>

#include "kernels/gemm.h"
#include "models/models.h"

#define EXB_MAXL 8 /* entries of a --hidden / --batch / --threads list */

/* The flags of the model benchmarks against PyTorch. */
typedef struct exb_opts {
  bool quick, no_torch, no_dynet;
  const char *json, *data, *python;
  const char *dynet_dir; /* --dynet-dir (default build/peers/dynet): bin/ holds the peers */
  int hidden[EXB_MAXL], nh, batch[EXB_MAXL], nb, threads[EXB_MAXL], nt;
  long count; /* count_flag N (--trees, --sents); 0: all */
} exb_opts;


/* What a model benchmark sets up from its flags. */
typedef struct exb_env {
  const char *prog;   /* "bench_treelstm": prefixes error messages */
  sheaf_ctx *ctx;     /* threads: the largest of --threads */
  sh_dataset d;
  int32_t n;          /* instances timed: all, at most quick_n with --quick, --count */
  double min_s;       /* window length (1 s; --quick 0.2 s) */
  int rounds;         /* windows per figure (3; --quick 1) */
  bool torch;         /* the PyTorch peers run */
  const char *data_file; /* exb_start: the n instances written for the peer */
} exb_env;

/* The context exb_setup creates gets at least this many threads (default
 * 1: the largest of --threads decides; bench_treelstm --paired sets 2). */
extern int exb_ctx_min_threads;
/* The clock of the throughput windows and the GEMM ceilings: false (the
 * default) the monotonic wall clock, true the calling thread's CPU clock
 * (exb_now_s; bench_treelstm --cpu-time: 1-thread figures only, as other
 * threads' time is not counted). */
extern bool exb_cpu_time;

/* Context, data (kind), counts, windows, PyTorch detection, the --json
 * file. Prints the error and returns false on failure. */
bool exb_setup(const char *prog, const exb_opts *o, sh_dataset_kind kind, int32_t quick_n,
               exb_env *e);
/* Parses --quick --no-torch --json F --data F --python PY --hidden L
 * --batch L --threads L and `count_flag` N into *o (defaults: hidden
 * 256,512, batch 1,10,64, threads 1,2, the bundled EWT test file, python3;
 * prints `usage` and exits 2 on anything else), then exb_setup, then
 * write(&e->d, e->n, path) of the temporary file `file` (e->data_file). */
bool exb_start(int argc, char **argv, const char *prog, const char *count_flag,
               const char *usage, sh_dataset_kind kind, int32_t quick_n, const char *file,
               bool (*write)(const sh_dataset *d, int32_t n, const char *path), exb_opts *o,
               exb_env *e);
/* "note: PyTorch peers skipped: ..." when they do not run. */
void exb_note_torch(const exb_opts *o, const exb_env *e);
/* Closes the JSON file, removes the temporary files, frees data and context. */
void exb_finish(exb_env *e);

/* The model at hidden H (embed E) seeded 1, its weights saved to a
 * temporary file (*wpath), and its outputs for the first min(n, check)
 * instances at batch 64 in *ref. Prints the error and returns false. */
bool exb_net_open(exb_env *e, sh_net_kind kind, int H, int E, int32_t check, sh_net *net,
                  sh_net_outputs *ref, const char **wpath);

/* The four batching policies, in table order: sheaf, none, depth, agenda. */
extern const sheaf_policy exb_policies[4];

/* One JSON line of a peer: {"system": S, "batch": B, ..., KEY: RATE}. */
typedef struct exb_peer_rec {
  char system[40];
  int batch;
  double rate;
} exb_peer_rec;

/* Runs `python script args` at T threads (OMP/MKL/OpenBLAS thread counts
 * set); at T > 1 twice, with OMP_WAIT_POLICY=PASSIVE (needed by OpenBLAS
 * builds) and with the default (often better for MKL builds), and, when
 * args_procs is given, as T processes of one thread at once (the way to
 * use T cores that Sheaf's whole batches in parallel match; each record
 * then the sum of the T processes' rates). Collects the records of every
 * configuration (rate from `key`) into recs; returns how many. */
int exb_run_peer_threads(const char *python, const char *script, int T, const char *args,
                         const char *args_procs, const char *key, exb_peer_rec *recs, int max);
/* A PyTorch peer script of a model benchmark and its two systems. */
typedef struct exb_peer {
  const char *script;    /* "bench/treelstm_torch.py" */
  const char *data_flag; /* "--trees": the instances file (exb_env.data_file) */
  const char *slow_flag; /* "--naive-batches": the per-instance system, timed at the first
                            batch size only with --quick (its work does not depend on it) */
  const char *unit;      /* "tree": JSON key "trees_per_s" */
  const char *sys[2];    /* "pytorch-naive", "pytorch-level" */
  const char *dynet;     /* "treelstm_dynet": the DyNet peer in <dynet_dir>/bin (NULL: none) */
} exb_peer;

/* One row of a model benchmark's table. */
typedef struct exb_cell {
  double sheaf[4];      /* instances/s per policy (exb_policies) */
  double peer[2];       /* the peer's systems (exb_peer.sys); 0 = not measured */
  double dynet[3];      /* DyNet at --dynet-autobatch 0, 1, 2; 0 = not measured */
  double useful_gflops;
} exb_cell;

/* Runs the peer at T threads (exb_run_peer_threads) with the weights file,
 * the batch sizes and e's windows: cells[bi].peer[k] gets the best rate of
 * sys[k] at batch o->batch[bi]. With ref non-NULL the peer also writes its
 * outputs for ref's instances, compared here with ref ("check (first N
 * trees, same weights): max |sheaf - SYS| = ..."); returns the larger max
 * abs difference (0 without ref or outputs). */
double exb_peers(const exb_opts *o, const exb_env *e, const exb_peer *p, const char *weights,
                 int T, const sh_net_outputs *ref, exb_cell *cells);

/* The DyNet peer's path (<dynet_dir>/bin/<p->dynet>) into bin, or false
 * with why it is not available in `why` ("--no-dynet", the install
 * script's recorded failure, or "not built ..."). */
bool exb_dynet_bin(const exb_opts *o, const exb_peer *p, char *bin, size_t cap, char *why,
                   size_t why_cap);
/* "DyNet: not available (why)" when the DyNet peer does not run. */
void exb_note_dynet(const exb_opts *o, const exb_peer *p);
/* Runs the DyNet peer (1 thread) once per --dynet-autobatch 0, 1, 2 on
 * `data_file` (NULL: e->data_file) with the weights file at the batch sizes
 * `batches` (n of them), e's windows: cells[bi].dynet[K] gets its rate at
 * batches[bi]. With ref non-NULL each run also writes its outputs for
 * ref's instances, compared here ("check ... max |sheaf - dynet-abK|");
 * returns the largest max abs difference (0 without ref), or -1 when the
 * peer is not available (nothing measured). */
double exb_dynet(const exb_opts *o, const exb_env *e, const exb_peer *p, const char *weights,
                 const char *data_file, const int *batches, int n, const sh_net_outputs *ref,
                 exb_cell *cells);
/* The best of c->dynet (0 if none) and, in *ab, its autobatch setting. */
double exb_dynet_best(const exb_cell *c, int *ab);

/* One row of the table at threads T and batch B: the rate of every policy
 * (exb_policies) on instances [0, e->n) into c->sheaf, JSON records for
 * them and the peer's measured systems, and the peer columns as text: f[0]
 * peer[0] ("(above)": measured at the first batch size only, `first`), f[1]
 * peer[1], f[2] sheaf / peer[1], f[3] sheaf / peer[0], f[4..6] DyNet at
 * autobatch 0, 1, 2, f[7] sheaf / the best of them ("-": not measured).
 * False on error (printed). */
bool exb_row(const exb_env *e, const sh_net *net, const exb_peer *p, int T, int B, exb_cell *c,
             const exb_cell *first, char f[8][16]);

/* One (hidden, threads) block of a model benchmark's table: the peer at T
 * threads when it runs (exb_peers with the weights file, and ref when
 * non-NULL), the DyNet peer at T = 1 when it is built (exb_dynet, same
 * weights, data and ref), the header, then one row per
 * batch size of o (exb_row into cells[bi]; useful GFLOP/s from
 * flops_per_instance, and its percentage of `ceiling`). Returns the
 * check's max abs difference (0 without it), or < 0 on error (printed). */
double exb_table(const exb_opts *o, const exb_env *e, const sh_net *net, const exb_peer *p,
                 const char *weights, int T, const sh_net_outputs *ref, exb_cell *cells,
                 double flops_per_instance, double ceiling);

/* The runtime-overhead table: every policy at hidden 8, embed 8, batch 64,
 * 1 thread over e->n instances of `kind`, ns per graph op for build and
 * schedule; unit "tree" or "sent" (column and JSON key names). */
bool exb_overhead(const exb_env *e, sh_net_kind kind, const char *unit);

/* Binary trees [0, n) of d to path, the DyNet and PyTorch TreeLSTM peers'
 * format: "trees N", then per tree "size w l r ..." (post-order, child
 * indices local to the tree, -1 where none; w the word id, sh_word_id). */
bool exb_write_trees(const sh_dataset *d, int32_t n, const char *path);

/* "1,10,64" */
void exb_list_str(const int *v, int n, char *out, size_t cap);
/* v with `decimals` decimals, or "-" when not measured (v <= 0). */
void exb_fmt_num(char out[16], double v, int decimals);

/* One whole pass over instances [0, count) in batches of `batch` on g. */
typedef sheaf_status (*exb_pass_fn)(void *arg, sheaf_graph *g, int32_t count, int32_t batch);

/* Best instances/s of `pass` over `rounds` windows of at least min_s
 * seconds, each made of whole passes, on one graph of `model` (policy,
 * threads), after one warm-up pass over min(count, 2 batches). *delta
 * (optional) gets the graph counters of the timed passes; *passes their
 * number. Returns <= 0 on error (the context's last error says why). */
double exb_rate(sheaf_model *model, exb_pass_fn pass, void *arg, sheaf_policy policy,
                int threads, int32_t batch, int32_t count, double min_s, int rounds,
                sheaf_graph_stats *delta, long *passes);

/* Best instances/s of the example model through a runner (sh_net_run_runner,
 * outputs not read) with `par` over `rounds` windows as exb_rate (same
 * warm-up); *delta gets the runner's counters of the timed passes. An
 * error is printed. */
double exb_runner_rate(const sh_net *net, sheaf_policy policy, int threads, sheaf_parallel par,
                       int32_t batch, int32_t count, double min_s, int rounds,
                       sheaf_graph_stats *delta, long *passes);
/* exb_runner_rate with SHEAF_PARALLEL_AUTO: what `sheaf run` does (at 1
 * thread one graph; at T threads whole batches in parallel when there are
 * at least 2 per thread). */
double exb_sheaf_rate(const sh_net *net, sheaf_policy policy, int threads, int32_t batch,
                      int32_t count, double min_s, int rounds, sheaf_graph_stats *delta,
                      long *passes);

/* GFLOP/s of sh_gemm C[m,n] = A[m,k]·B[k,n] with B packed (the batched
 * kernel's best case: A contiguous), best of 3 windows of min_s. */
double exb_gemm_gflops(sheaf_ctx *ctx, int threads, int64_t m, int64_t n, int64_t k, double min_s);

/* sh_gemm's arguments for C[m,n] = A[m,k]·B[k,n], A contiguous, B packed,
 * no epilogue (the hand-GEMM side of the codegen benches). */
sh_gemm_args exb_gemm_plain(const float *A, int64_t m, int64_t k, const sh_gemm_packed_b *b, float *C,
                            int64_t n, sh_gemm_ws *ws);

/* One GEMM shape C[m,n] = A[m,k]·B[k,n]. */
typedef struct exb_mnk {
  int64_t m, n, k;
} exb_mnk;

/* GFLOP/s of one whole pass of sh_gemm calls over a list of shapes (a
 * model's own batches: its levels' M, its weights' N and K), same setting
 * as exb_gemm_gflops: A contiguous, B packed once per (K, N), one
 * workspace; one warm-up pass, then the best of 3 windows of whole passes
 * of at least min_s. Returns <= 0 on error (or more than 8 weight shapes). */
double exb_gemm_list_gflops(sheaf_ctx *ctx, int threads, const exb_mnk *shapes, int count,
                            double min_s);

/* A temporary directory (created on first use) and paths in it; removed
 * with its files by exb_tmp_cleanup. */
const char *exb_tmp_path(const char *name);
void exb_tmp_cleanup(void);

/* Runs `cmd` (through the shell), echoes its "# " lines indented, collects
 * its JSON lines (rate from `key`). Returns the exit status (-1: could not
 * run). */
int exb_run_peer(const char *cmd, const char *key, exb_peer_rec *recs, int max, int *n);

/* Whether `python` can import torch (quietly). */
bool exb_have_torch(const char *python);

/* Seconds on the thread's CPU clock (cpu) or the monotonic clock. */
double exb_now_s(bool cpu);
/* Sorts v[0..n) ascending (for medians and quantiles of timings). */
void exb_sort_f64(double *v, size_t n);
/* ns per fiber context switch (a resume + yield round trip is two) over
 * `iters` round trips, best of `reps`, on exb_now_s(cpu); -1 when no fiber
 * could be made. */
double exb_fiber_switch_ns(long iters, int reps, bool cpu);
/* n uniform floats in [-1, 1) from the xorshift state *s (malloc'd, 16
 * floats of slack past n for vector tails). */
float *exb_frand_xs(int64_t n, uint64_t *s);

/* Reads a whole file of float32 values (malloc'd; NULL if missing). */
float *exb_read_f32(const char *path, size_t *n);

/* JSON records file: exb_json_open(path or NULL), exb_json_rec(fmt, ...)
 * appends one object (fmt gives its members), exb_json_close. */
bool exb_json_open(const char *path);
void exb_json_rec(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The record of a GEMM ceiling measured for `model`: system "gemm-ceiling". */
void exb_json_ceiling(const char *model, int hidden, int threads, int64_t m, int64_t n, int64_t k,
                      double gflops);
void exb_json_close(void);

/* Comma list of positive integers into out (at most max); false if bad. */
bool exb_parse_list(const char *s, int *out, int max, int *n);

/* The row-count benches' arguments, `BENCH [ROUNDS [M,M,...]]`: *rounds
 * from argv[1] (1..200, else 15); a comma list in argv[2] replaces ms[0 ..
 * *nm) (at most 32). A bad list is an error on stderr: false (exit 2). */
bool exb_rounds_rows(int argc, char **argv, int *rounds, int64_t *ms, int *nm);

#endif
