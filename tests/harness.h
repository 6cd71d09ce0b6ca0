/*
 * harness.h — Sheaf's in-tree test harness (no framework dependency).
 *
 *   TEST(arena_alignment) { ... CHECK_EQ_INT(x, 3); ... }
 *
 * Tests register themselves at load time; the runner (main.c) runs each in a
 * forked child (a crash or a hang fails that test only), prints every failed
 * check as `file:line: CHECK_...(a, b) failed: <values>` and ends with the
 * line `N passed, N failed`. CHECK_* continue after a failure; REQUIRE_*
 * return from the test.
 */
#ifndef SHEAF_TEST_HARNESS_H
#define SHEAF_TEST_HARNESS_H

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "sheaf.h"

typedef void (*th_test_fn)(void);
void th_register(const char *name, const char *file, th_test_fn fn);

#define TEST(name)                                                                 \
  static void test_##name(void);                                                   \
  __attribute__((constructor)) static void register_##name(void) {                 \
    th_register(#name, __FILE__, test_##name);                                     \
  }                                                                                \
  static void test_##name(void)

/* Records a failure of the running test; returns false. */
bool th_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Uniform floats in [-1, 1) from a xorshift64 stream; *state is its seed
 * and is advanced. th_frand_fill: n of them, malloc'd (at least one). */
float th_frand(uint64_t *state);
float *th_frand_fill(uint64_t *state, int64_t n);

/* The value of expression e equals want[0..n) within 1e-5 * max(1, |want|)
 * per element; a failure names what[inst] and the caller's line. */
bool th_value_close_at(const char *file, int line, sheaf_graph *g, sheaf_expr e,
                       const double *want, int64_t n, const char *what, int inst);
#define TH_VALUE_CLOSE(g, e, want, n, what, inst) \
  th_value_close_at(__FILE__, __LINE__, g, e, want, n, what, inst)

#define CHECK(cond) \
  ((cond) ? true : th_fail(__FILE__, __LINE__, "CHECK(%s) failed", #cond))

#define CHECK_EQ_INT(a, b)                                                            \
  __extension__({                                                                     \
    long long th_a_ = (long long)(a), th_b_ = (long long)(b);                         \
    th_a_ == th_b_ ? true                                                             \
                   : th_fail(__FILE__, __LINE__, "CHECK_EQ_INT(%s, %s) failed: %lld != %lld", \
                             #a, #b, th_a_, th_b_);                                   \
  })

#define CHECK_EQ_SIZE(a, b)                                                           \
  __extension__({                                                                     \
    unsigned long long th_a_ = (unsigned long long)(a), th_b_ = (unsigned long long)(b); \
    th_a_ == th_b_ ? true                                                             \
                   : th_fail(__FILE__, __LINE__, "CHECK_EQ_SIZE(%s, %s) failed: %llu != %llu", \
                             #a, #b, th_a_, th_b_);                                   \
  })

#define CHECK_NEAR(a, b, tol)                                                         \
  __extension__({                                                                     \
    double th_a_ = (double)(a), th_b_ = (double)(b), th_t_ = (double)(tol);           \
    fabs(th_a_ - th_b_) <= th_t_                                                      \
        ? true                                                                        \
        : th_fail(__FILE__, __LINE__, "CHECK_NEAR(%s, %s, %s) failed: %.9g vs %.9g (diff %.3g)", \
                  #a, #b, #tol, th_a_, th_b_, fabs(th_a_ - th_b_));                   \
  })

#define CHECK_EQ_STR(a, b)                                                            \
  __extension__({                                                                     \
    const char *th_a_ = (a), *th_b_ = (b);                                            \
    (th_a_ && th_b_ && strcmp(th_a_, th_b_) == 0)                                     \
        ? true                                                                        \
        : th_fail(__FILE__, __LINE__, "CHECK_EQ_STR(%s, %s) failed: \"%s\" != \"%s\"", #a, #b, \
                  th_a_ ? th_a_ : "(null)", th_b_ ? th_b_ : "(null)");                \
  })

/* haystack contains needle */
#define CHECK_CONTAINS(hay, needle)                                                   \
  __extension__({                                                                     \
    const char *th_h_ = (hay), *th_n_ = (needle);                                     \
    (th_h_ && th_n_ && strstr(th_h_, th_n_))                                          \
        ? true                                                                        \
        : th_fail(__FILE__, __LINE__, "CHECK_CONTAINS(%s, %s) failed: \"%s\" lacks \"%s\"", \
                  #hay, #needle, th_h_ ? th_h_ : "(null)", th_n_ ? th_n_ : "(null)"); \
  })

/* The output of a `sheaf run ... --out FILE` in a pipe: the end-of-run
 * summary (stdout) and nothing else: no note, warning or error (all start
 * "sheaf:") and no progress bar ('\r'). */
#define CHECK_RUN_QUIET(out)                                                             \
  __extension__({                                                                       \
    const char *th_o_ = (out);                                                          \
    (!strstr(th_o_, "sheaf:") && !strchr(th_o_, '\r') && strstr(th_o_, "  outputs: "))   \
        ? true                                                                          \
        : th_fail(__FILE__, __LINE__, "CHECK_RUN_QUIET(%s) failed: \"%s\"", #out, th_o_); \
  })

/* A call returned `expected`; on mismatch prints both statuses and the
 * context's last error. */
#define CHECK_STATUS(ctx, expr, expected)                                             \
  __extension__({                                                                     \
    sheaf_status th_s_ = (expr), th_e_ = (expected);                                  \
    th_s_ == th_e_ ? true                                                             \
                   : th_fail(__FILE__, __LINE__, "CHECK_STATUS(%s) failed: %s != %s (last error: %s)", \
                             #expr, sheaf_status_str(th_s_), sheaf_status_str(th_e_),  \
                             sheaf_ctx_last_error(ctx));                              \
  })
#define CHECK_OK(ctx, expr) CHECK_STATUS(ctx, expr, SHEAF_OK)

#define REQUIRE(cond) do { if (!CHECK(cond)) return; } while (0)
#define REQUIRE_OK(ctx, expr) do { if (!CHECK_OK(ctx, expr)) return; } while (0)
#define REQUIRE_EQ_INT(a, b) do { if (!CHECK_EQ_INT(a, b)) return; } while (0)

/* Two output files of `sheaf run` (lines of `keys` leading integers, then
 * numbers): the largest |a - b| / max(1, |a|) over every number; *lines
 * counts the lines, *agree (may be NULL) those whose largest number is at
 * the same place. -1 when the files differ in lines, keys or numbers. */
double th_compare_outputs(const char *a, const char *b, int keys, long *lines, long *agree);

/* A context for a test: 2 threads, the leak-checking allocator below. Freed
 * (and checked for leaks) when the test ends. */
sheaf_ctx *th_ctx(void);
/* Declares parameter `name` of rank 1 ([a]) or 2 ([a, b]) on m (Glorot),
 * checking the call; SHEAF_NO_PARAM when it fails. */
sheaf_param th_param(sheaf_ctx *ctx, sheaf_model *m, const char *name, int rank, int64_t a, int64_t b);
/* The leak-checking allocator: counts live blocks, checks that free gets the
 * size alloc got, and fails the n-th allocation when armed. */
const sheaf_allocator *th_allocator(void);
/* Arms fault injection: allocation number n (1-based, from now) fails and
 * every later one succeeds. 0 disarms. Returns allocations so far. */
long th_fail_alloc_at(long n);
long th_live_blocks(void);

/* Whether test `name` is selected by one command-line FILTER (tests/main.c):
 * "^P" names starting with P, "S$" names ending with S, "^N$" the name N,
 * anything else the names containing it. */
bool th_filter_matches(const char *name, const char *filter);

/* A path under a per-run temporary directory (created on demand). */
const char *th_tmp_path(const char *name);
/* The JIT cache directory for a test that only needs its kernels compiled,
 * not a cold cache: $SHEAF_CACHE_DIR when set (.ci/run shares one across its
 * builds' test runs: an entry's key covers the source, the flags, the ISA
 * and the compiler, so a hit is the same library), else th_tmp_path(name).
 * A test that checks what the compiler did (stats.compiles, cache files)
 * keeps a th_tmp_path directory of its own. The kernel compiles into it are
 * eager (sh_kernel_opts.eager): the key is the C this build's generator
 * emitted, not the kernel's spec and the generator binary's identity (which
 * differs in every build, so the portable, clang and ASan runs missed every
 * entry the release run made, and recompiled). Each build still lowers,
 * schedules and emits every kernel itself; a hit only skips the C compiler,
 * on the same C, flags and compiler. */
const char *th_cache_dir(const char *name);
/* Entries of directory `dir` whose names end in `suffix` ("": all, . and
 * .. included); 0 when it cannot be opened. */
size_t th_count_suffix(const char *dir, const char *suffix);
/* Whether the kernel JIT finds a C compiler (probed once); false prints
 * "note: TEST skipped: no C compiler" for the caller. */
bool th_have_jit_cc(const char *test);
/* Writes `size` bytes to a temporary file; returns its path. */
const char *th_write_tmp(const char *name, const void *data, size_t size);
/* The built sheaf executable (from SHEAF_BIN), or NULL. */
/* The whole of a file, NUL-terminated (its size in *n when n is given), or
 * NULL. The buffer is the harness's: valid until four more calls. */
const char *th_read_file(const char *path, size_t *n);
/* The bundled EWT test treebank, and a copy of its first n sentences
 * (a file under th_tmp_path, written on the first call for that n; NULL
 * after a th_fail when it cannot be written). For the CLI grids that run
 * `--limit n` many times: `sheaf run` reads and numbers the whole file
 * before it limits, and the 1.8 MB parse was most of each run under ASan.
 * The words are numbered from the copy, so use it where runs are compared
 * with each other, not with figures from the whole file. */
#define TH_EWT_TEST "data/ud_english_ewt/en_ewt-ud-test.conllu"
const char *th_ewt_head(int n);
/* The "N flushes" of a `sheaf run` summary (-1: not found). */
long th_flushes_of(const char *summary);
const char *th_sheaf_bin(void);
/* Runs a shell command, captures stdout+stderr (up to cap-1 bytes) into out;
 * returns the exit status (-1 if it could not run). */
int th_run(const char *cmd, char *out, size_t cap);
/* th_run of "SHEAF_BIN ARGS", ARGS formatted from fmt (a test file's
 * usual `#define sheaf(...) th_sheaf(g_out, sizeof g_out, __VA_ARGS__)`). */
int th_sheaf(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* th_run for a command that needs PyTorch and NumPy (a python3 script):
 * when it fails, `python3 -c 'import torch, numpy'` is tried and, if that
 * fails too, TH_SKIP is returned (the test prints why and passes). Importing
 * torch takes seconds: probing first would pay that twice on every run. */
#define TH_SKIP (-2)
int th_run_torch(const char *cmd, char *out, size_t cap);

#endif
