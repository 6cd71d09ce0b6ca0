/*
 * test_base.c — context, errors, allocator hook, arena, buffer, CPU
 * detection and the SHEAF_ISA override, thread pool, timer, files.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "base/arena.h"
#include "base/base.h"
#include "base/buf.h"
#include "base/cpu.h"
#include "base/file.h"
#include "base/pool.h"
#include "harness.h"

TEST(status_strings_are_distinct) {
  for (int a = SHEAF_OK; a <= SHEAF_ERR_INTERNAL; a++)
    for (int b = a + 1; b <= SHEAF_ERR_INTERNAL; b++)
      CHECK(strcmp(sheaf_status_str(a), sheaf_status_str(b)) != 0);
  CHECK_EQ_STR(sheaf_status_str(SHEAF_OK), "ok");
  CHECK_EQ_STR(sheaf_version(), SHEAF_VERSION_STRING);
}

typedef struct log_rec { int n; char last[256]; } log_rec;
static void rec_log(void *user, sheaf_log_level lvl, const char *msg) {
  log_rec *r = user;
  (void)lvl;
  r->n++;
  snprintf(r->last, sizeof r->last, "%s", msg);
}

TEST(ctx_last_error_and_log) {
  log_rec rec = {0};
  sheaf_ctx_options o = {.allocator = th_allocator(), .log = rec_log, .log_user = &rec,
                         .log_level = SHEAF_LOG_WARN, .threads = 1};
  sheaf_ctx *ctx = NULL;
  REQUIRE_OK(NULL, sheaf_ctx_create(&o, &ctx, NULL, 0));
  CHECK_EQ_STR(sheaf_ctx_last_error(ctx), "");
  CHECK_EQ_INT(sh_fail(ctx, SHEAF_ERR_SHAPE, "bad %d", 7), SHEAF_ERR_SHAPE);
  CHECK_EQ_STR(sheaf_ctx_last_error(ctx), "bad 7");
  CHECK_EQ_INT(sheaf_ctx_last_status(ctx), SHEAF_ERR_SHAPE);
  sh_fail_prefix(ctx, "while %s", "testing");
  CHECK_EQ_STR(sheaf_ctx_last_error(ctx), "while testing: bad 7");
  CHECK_EQ_INT(rec.n, 1);
  CHECK_EQ_STR(rec.last, "bad 7");
  sh_log(ctx, SHEAF_LOG_DEBUG, "dropped");
  CHECK_EQ_INT(rec.n, 1);
  sh_log(ctx, SHEAF_LOG_WARN, "kept %s", "w");
  CHECK_EQ_INT(rec.n, 2);
  CHECK_EQ_STR(rec.last, "kept w");
  sheaf_ctx_clear_error(ctx);
  CHECK_EQ_STR(sheaf_ctx_last_error(ctx), "");
  CHECK_EQ_INT(sheaf_ctx_threads(ctx), 1);
  sheaf_ctx_free(ctx);
}

TEST(ctx_create_rejects_bad_arguments) {
  char err[256];
  CHECK_EQ_INT(sheaf_ctx_create(NULL, NULL, err, sizeof err), SHEAF_ERR_INVALID_ARG);
  CHECK_CONTAINS(err, "out is NULL");
  sheaf_ctx *ctx = (sheaf_ctx *)&err;
  sheaf_ctx_options o = {.threads = -3};
  CHECK_EQ_INT(sheaf_ctx_create(&o, &ctx, err, sizeof err), SHEAF_ERR_INVALID_ARG);
  CHECK(ctx == NULL);
  CHECK_CONTAINS(err, "threads = -3");
  sheaf_allocator half = {0};
  o = (sheaf_ctx_options){.allocator = &half};
  CHECK_EQ_INT(sheaf_ctx_create(&o, &ctx, err, sizeof err), SHEAF_ERR_INVALID_ARG);
}

TEST(ctx_create_survives_every_allocation_failure) {
  /* Fail the 1st, 2nd, ... allocation of ctx creation: never a crash or leak. */
  for (long n = 1; n < 16; n++) {
    sheaf_ctx_options o = {.allocator = th_allocator(), .threads = 3};
    sheaf_ctx *ctx = NULL;
    th_fail_alloc_at(n);
    sheaf_status st = sheaf_ctx_create(&o, &ctx, NULL, 0);
    th_fail_alloc_at(0);
    if (st == SHEAF_OK) {
      sheaf_ctx_free(ctx);
      break;
    }
    CHECK_EQ_INT(st, SHEAF_ERR_NOMEM);
    CHECK(ctx == NULL);
  }
}

TEST(arena_alignment_and_growth) {
  sheaf_ctx *ctx = th_ctx();
  sh_arena a;
  sh_arena_init(&a, ctx, 256);
  void *prev = NULL;
  for (int i = 0; i < 100; i++) {
    size_t sz = (size_t)(i * 37 % 300);
    unsigned char *p = sh_arena_alloc(&a, sz);
    REQUIRE(p != NULL);
    CHECK_EQ_INT((uintptr_t)p % 64, 0);
    CHECK(p != prev);
    memset(p, 0xab, sz); /* ASan catches overruns into neighbours */
    prev = p;
  }
  void *big = sh_arena_alloc(&a, 1 << 20); /* larger than a chunk */
  CHECK(big != NULL);
  CHECK_EQ_INT((uintptr_t)big % 64, 0);
  int *z = sh_arena_calloc(&a, 1000, sizeof(int));
  REQUIRE(z != NULL);
  int sum = 0;
  for (int i = 0; i < 1000; i++) sum += z[i];
  CHECK_EQ_INT(sum, 0);
  CHECK_EQ_STR(sh_arena_strndup(&a, "hello world", 5), "hello");
  sh_arena_destroy(&a);
}

TEST(arena_reset_keeps_one_chunk_and_rewind) {
  sheaf_ctx *ctx = th_ctx();
  sh_arena a;
  sh_arena_init(&a, ctx, 1024);
  for (int i = 0; i < 50; i++) REQUIRE(sh_arena_alloc(&a, 200));
  CHECK(sh_arena_reserved(&a) >= 50 * 256);
  sh_arena_reset(&a);
  CHECK_EQ_SIZE(a.used_total, 0);
  size_t kept = sh_arena_reserved(&a);
  CHECK(kept >= 1024);
  CHECK(kept < 50 * 256);
  void *p1 = sh_arena_alloc(&a, 10);
  sh_arena_mark m = sh_arena_get_mark(&a);
  for (int i = 0; i < 100; i++) REQUIRE(sh_arena_alloc(&a, 500));
  sh_arena_rewind(&a, m);
  void *p2 = sh_arena_alloc(&a, 10);
  CHECK((char *)p2 == (char *)p1 + 64);
  sh_arena_destroy(&a);
  CHECK_EQ_SIZE(sh_arena_reserved(&a), 0);
}

TEST(arena_out_of_memory_is_reported) {
  sheaf_ctx *ctx = th_ctx();
  sh_arena a;
  sh_arena_init(&a, ctx, 0);
  th_fail_alloc_at(1);
  CHECK(sh_arena_alloc(&a, 16) == NULL);
  CHECK_EQ_INT(sheaf_ctx_last_status(ctx), SHEAF_ERR_NOMEM);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "out of memory");
  CHECK(sh_arena_alloc(&a, SIZE_MAX - 8) == NULL);
  CHECK(sh_arena_calloc(&a, SIZE_MAX / 2, 4) == NULL);
  CHECK(sh_arena_alloc(&a, 16) != NULL);
  sh_arena_destroy(&a);
}

TEST(buf_appends_and_sticky_error) {
  sheaf_ctx *ctx = th_ctx();
  sh_buf b;
  sh_buf_init(&b, ctx);
  CHECK_EQ_STR(sh_buf_cstr(&b), "");
  for (int i = 0; i < 1000; i++) sh_buf_printf(&b, "%d,", i);
  CHECK_OK(ctx, sh_buf_status(&b));
  CHECK(strncmp(sh_buf_cstr(&b), "0,1,2,", 6) == 0);
  CHECK_EQ_SIZE(b.len, strlen(sh_buf_cstr(&b)));
  char longs[1000];
  memset(longs, 'x', sizeof longs - 1);
  longs[999] = 0;
  sh_buf_clear(&b);
  sh_buf_printf(&b, "<%s>", longs); /* longer than the printf fast path */
  CHECK_EQ_SIZE(b.len, 1001);
  sh_buf_clear(&b);
  sh_buf_put_u64le(&b, 0x0102030405060708ull);
  sh_buf_put_u32le(&b, 0xa0b0c0d0u);
  CHECK_EQ_INT(b.data[0], 8);
  CHECK_EQ_INT(b.data[7], 1);
  CHECK_EQ_INT(b.data[8], 0xd0);
  sh_buf_free(&b);

  sh_buf_init(&b, ctx);
  th_fail_alloc_at(1);
  sh_buf_puts(&b, "abc");
  sh_buf_puts(&b, "def"); /* ignored: buffer has failed */
  CHECK_EQ_INT(sh_buf_status(&b), SHEAF_ERR_NOMEM);
  CHECK_EQ_SIZE(b.len, 0);
  sh_buf_free(&b);
}

TEST(cpu_isa_parse_and_detection) {
  sheaf_isa isa;
  CHECK(sh_cpu_parse_isa(NULL, SHEAF_ISA_AVX512, &isa));
  CHECK_EQ_INT(isa, SHEAF_ISA_AVX512);
  CHECK(sh_cpu_parse_isa("avx2", SHEAF_ISA_AVX512, &isa));
  CHECK_EQ_INT(isa, SHEAF_ISA_AVX2);
  CHECK(sh_cpu_parse_isa("scalar", SHEAF_ISA_AVX2, &isa));
  CHECK_EQ_INT(isa, SHEAF_ISA_SCALAR);
  CHECK(sh_cpu_parse_isa("avx512", SHEAF_ISA_AVX2, &isa)); /* never above host */
  CHECK_EQ_INT(isa, SHEAF_ISA_AVX2);
  CHECK(!sh_cpu_parse_isa("sse9", SHEAF_ISA_AVX2, &isa));
  CHECK(sheaf_cpu_isa() <= sheaf_cpu_isa_host());
  const sh_cpu_features *f = sh_cpu_features_get();
  if (sheaf_cpu_isa_host() == SHEAF_ISA_AVX512) CHECK(f->avx512f && f->avx512bw && f->os_avx512);
  if (sheaf_cpu_isa_host() >= SHEAF_ISA_AVX2) CHECK(f->avx2 && f->fma && f->os_avx);
  CHECK_EQ_STR(sheaf_isa_name(SHEAF_ISA_AVX2), "avx2");
  CHECK(sh_cpu_count() >= 1);
}

TEST(cpu_isa_env_is_honoured_and_validated) {
  /* Run the CLI with SHEAF_ISA set: lowered, and rejected when unknown. */
  const char *bin = th_sheaf_bin();
  if (!bin) return; /* runner started without SHEAF_BIN: nothing to run */
  char cmd[1024], out[4096];
  snprintf(cmd, sizeof cmd, "SHEAF_ISA=scalar %s --version", bin);
  CHECK_EQ_INT(th_run(cmd, out, sizeof out), 0);
  CHECK_CONTAINS(out, "isa: scalar");
  snprintf(cmd, sizeof cmd, "SHEAF_ISA=bogus %s --version", bin);
  CHECK_EQ_INT(th_run(cmd, out, sizeof out), 2);
  CHECK_CONTAINS(out, "SHEAF_ISA=bogus: unknown ISA");
}

typedef struct sum_job { atomic_long sum; atomic_int hits[1000]; atomic_int tids_seen; } sum_job;
static void sum_task(void *arg, int64_t t, int tid) {
  sum_job *j = arg;
  atomic_fetch_add(&j->sum, (long)t);
  atomic_fetch_add(&j->hits[t], 1);
  atomic_fetch_or(&j->tids_seen, 1 << tid);
}

TEST(pool_runs_every_task_once) {
  sheaf_ctx *ctx = th_ctx();
  for (int rep = 0; rep < 200; rep++) {
    static sum_job j;
    memset(&j, 0, sizeof j);
    int64_t n = 1 + rep * 5 % 1000;
    sh_pool_run(ctx->pool, n, sum_task, &j, 0);
    REQUIRE_EQ_INT(atomic_load(&j.sum), n * (n - 1) / 2);
    for (int64_t t = 0; t < n; t++) REQUIRE_EQ_INT(atomic_load(&j.hits[t]), 1);
  }
}

TEST(pool_respects_max_threads_and_single_thread) {
  sheaf_ctx *ctx = th_ctx();
  static sum_job j;
  memset(&j, 0, sizeof j);
  sh_pool_run(ctx->pool, 1000, sum_task, &j, 1);
  CHECK_EQ_INT(atomic_load(&j.tids_seen), 1); /* only the caller */
  sh_pool *p1;
  REQUIRE_OK(ctx, sh_pool_create(ctx, 1, &p1));
  memset(&j, 0, sizeof j);
  sh_pool_run(p1, 500, sum_task, &j, 0);
  CHECK_EQ_INT(atomic_load(&j.sum), 500 * 499 / 2);
  sh_pool_run(p1, 0, sum_task, &j, 0); /* no tasks: no call */
  CHECK_EQ_INT(atomic_load(&j.sum), 500 * 499 / 2);
  sh_pool_free(p1);
}

typedef struct nest_job { sh_pool *pool; atomic_long sum; } nest_job;
static void inner_task(void *arg, int64_t t, int tid) {
  (void)tid;
  atomic_fetch_add(&((nest_job *)arg)->sum, (long)t);
}
static void outer_task(void *arg, int64_t t, int tid) {
  (void)t;
  (void)tid;
  nest_job *j = arg;
  sh_pool_run(j->pool, 10, inner_task, j, 0); /* runs serially, no deadlock */
}

TEST(pool_nested_run_is_serial_not_deadlock) {
  sheaf_ctx *ctx = th_ctx();
  nest_job j = {.pool = ctx->pool};
  atomic_init(&j.sum, 0);
  sh_pool_run(ctx->pool, 20, outer_task, &j, 0);
  CHECK_EQ_INT(atomic_load(&j.sum), 20 * 45);
}

TEST(pool_wakes_sleeping_workers) {
  sheaf_ctx *ctx = th_ctx();
  sh_pool *p;
  REQUIRE_OK(ctx, sh_pool_create(ctx, 3, &p));
  sh_pool_set_spin_us(p, 0); /* workers go straight to sleep */
  for (int rep = 0; rep < 50; rep++) {
    static sum_job j;
    memset(&j, 0, sizeof j);
    sh_pool_run(p, 300, sum_task, &j, 0);
    REQUIRE_EQ_INT(atomic_load(&j.sum), 300 * 299 / 2);
    if (rep % 10 == 0) {
      struct timespec ts = {0, 2000000};
      nanosleep(&ts, NULL);
    }
  }
  sh_pool_free(p);
}

TEST(timer_is_monotonic) {
  uint64_t a = sheaf_time_ns(), b = sheaf_time_ns();
  CHECK(b >= a);
  struct timespec ts = {0, 1000000};
  nanosleep(&ts, NULL);
  CHECK(sheaf_time_ns() - a >= 1000000);
}

TEST(file_read_map_and_atomic_write) {
  sheaf_ctx *ctx = th_ctx();
  const char *path = th_tmp_path("f.bin");
  REQUIRE_OK(ctx, sh_file_write_atomic(ctx, path, "hello\n", 6));
  char *data;
  size_t size;
  REQUIRE_OK(ctx, sh_file_read(ctx, path, &data, &size));
  CHECK_EQ_SIZE(size, 6);
  CHECK_EQ_STR(data, "hello\n");
  sh_free(ctx, data, size + 1);
  sh_mapping m;
  REQUIRE_OK(ctx, sh_file_map(ctx, path, &m));
  CHECK_EQ_SIZE(m.size, 6);
  CHECK(memcmp(m.data, "hello\n", 6) == 0);
  sh_file_unmap(&m);
  const char *empty = th_write_tmp("empty", "", 0);
  REQUIRE_OK(ctx, sh_file_map(ctx, empty, &m));
  CHECK_EQ_SIZE(m.size, 0);
  sh_file_unmap(&m);

  CHECK_EQ_INT(sh_file_read(ctx, "/nonexistent/x", &data, &size), SHEAF_ERR_IO);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "/nonexistent/x: cannot open");
  CHECK_EQ_INT(sh_file_map(ctx, "/tmp", &m), SHEAF_ERR_IO);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "is a directory");
  CHECK_EQ_INT(sh_file_write_atomic(ctx, "/nonexistent/dir/f", "x", 1), SHEAF_ERR_IO);
}

typedef struct tagged_job { int tag; atomic_int hits[64]; atomic_int wrong; } tagged_job;
static void tagged_task_a(void *arg, int64_t t, int tid) {
  (void)tid;
  tagged_job *j = arg;
  if (j->tag != 1) atomic_fetch_add(&j->wrong, 1);
  atomic_fetch_add(&j->hits[t], 1);
}
static void tagged_task_b(void *arg, int64_t t, int tid) {
  (void)tid;
  tagged_job *j = arg;
  if (j->tag != 2) atomic_fetch_add(&j->wrong, 1);
  atomic_fetch_add(&j->hits[t], 1);
}

TEST(pool_late_workers_never_run_a_stale_job) {
  /* Alternate two jobs back to back while workers fall asleep and wake at
   * random points: every task of every job runs exactly once, with its own
   * function and argument. */
  sheaf_ctx *ctx = th_ctx();
  sh_pool *p;
  REQUIRE_OK(ctx, sh_pool_create(ctx, 4, &p));
  static tagged_job a, b;
  for (int spin = 0; spin <= 1; spin++) {
    sh_pool_set_spin_us(p, spin ? 20 : 0);
    for (int rep = 0; rep < 3000; rep++) {
      tagged_job *j = rep % 2 ? &b : &a;
      memset(j, 0, sizeof *j);
      j->tag = rep % 2 ? 2 : 1;
      int64_t n = 1 + rep % 64;
      sh_pool_run(p, n, rep % 2 ? tagged_task_b : tagged_task_a, j, 0);
      REQUIRE_EQ_INT(atomic_load(&j->wrong), 0);
      for (int64_t t = 0; t < n; t++) REQUIRE_EQ_INT(atomic_load(&j->hits[t]), 1);
      for (int64_t t = n; t < 64; t++) REQUIRE_EQ_INT(atomic_load(&j->hits[t]), 0);
    }
  }
  sh_pool_free(p);
}
