/*
 * test_fiber.c — the context switch (src/base/fiber.h): ping-pong between
 * two fibers, callee-saved registers and the FP control state kept across
 * switches, 10,000 fibers alive at once, stacks reused from the pool, the
 * stack room measured on a fiber, a recursion stopped by it and a true
 * overflow faulting on the guard page (in a child). The names start with
 * "fiber" (TEST_ARGS=fiber).
 */
#include <fcntl.h>
#include <fenv.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/fiber.h"
#include "harness.h"

#define SKIP_UNSUPPORTED()                                                 \
  do {                                                                     \
    if (!sh_fiber_supported()) {                                           \
      sh_fiber_stacks p_;                                                  \
      sh_fiber_stacks_init(&p_, 0);                                        \
      sh_fiber f_;                                                         \
      CHECK(!sh_fiber_init(&f_, &p_, NULL, NULL)); /* refused cleanly */   \
      return;                                                              \
    }                                                                      \
  } while (0)

typedef struct pingpong {
  int id, rounds;
  int *log, *n_log;
} pingpong;

static void pingpong_fn(void *arg) {
  pingpong *p = arg;
  for (int k = 0; k < p->rounds; k++) {
    p->log[(*p->n_log)++] = p->id * 1000 + k;
    sh_fiber_yield();
  }
}

TEST(fiber_pingpong) {
  SKIP_UNSUPPORTED();
  sh_fiber_stacks pool;
  sh_fiber_stacks_init(&pool, 0);
  int log[64], n_log = 0;
  pingpong a = {1, 10, log, &n_log}, b = {2, 10, log, &n_log};
  sh_fiber fa, fb;
  REQUIRE(sh_fiber_init(&fa, &pool, pingpong_fn, &a));
  REQUIRE(sh_fiber_init(&fb, &pool, pingpong_fn, &b));
  CHECK(sh_fiber_current() == NULL);
  while (!fa.done || !fb.done) {
    if (!fa.done) sh_fiber_resume(&fa);
    if (!fb.done) sh_fiber_resume(&fb);
  }
  CHECK(sh_fiber_current() == NULL);
  CHECK_EQ_INT(n_log, 20);
  for (int k = 0; k < 10; k++) {
    CHECK_EQ_INT(log[2 * k], 1000 + k);
    CHECK_EQ_INT(log[2 * k + 1], 2000 + k);
  }
  sh_fiber_release(&fa, &pool);
  sh_fiber_release(&fb, &pool);
  CHECK_EQ_SIZE(pool.n_free, 2); /* pooled, reused below */
  sh_fiber fc;
  pingpong c = {3, 1, log, &n_log};
  CHECK(sh_fiber_init(&fc, &pool, pingpong_fn, &c));
  CHECK_EQ_SIZE(pool.n_free, 1);
  while (!fc.done) sh_fiber_resume(&fc);
  sh_fiber_release(&fc, &pool);
  sh_fiber_stacks_free(&pool);
}

/* Values the compiler cannot fold: many live across each switch, so they sit
 * in callee-saved registers (or are spilled to the fiber's own stack). */
__attribute__((noinline)) static long opaque(long x) { return x * 2654435761L + 12345; }
__attribute__((noinline)) static double opaque_d(double x) { return x * 1.5 + 0.25; }

typedef struct regs_arg {
  long sum;
  double dsum;
  int yields;
} regs_arg;

static void regs_fn(void *arg) {
  regs_arg *r = arg;
  long a = opaque(1), b = opaque(2), c = opaque(3), d = opaque(4), e = opaque(5), f = opaque(6);
  long g = opaque(7), h = opaque(8), i = opaque(9), j = opaque(10);
  double x = opaque_d(1), y = opaque_d(2), z = opaque_d(3), w = opaque_d(4), u = opaque_d(5);
  double v = opaque_d(6), s = opaque_d(7), t = opaque_d(8);
  for (int k = 0; k < r->yields; k++) {
    sh_fiber_yield();
    a += 1, b += 2, c += 3, d += 4, e += 5, f += 6, g += 7, h += 8, i += 9, j += 10;
    x += 1, y += 2, z += 3, w += 4, u += 5, v += 6, s += 7, t += 8;
  }
  r->sum = a ^ b ^ c ^ d ^ e ^ f ^ g ^ h ^ i ^ j;
  r->sum += a + b + c + d + e + f + g + h + i + j;
  r->dsum = x + 2 * y + 3 * z + 4 * w + 5 * u + 6 * v + 7 * s + 8 * t;
}

TEST(fiber_callee_saved_registers) {
  SKIP_UNSUPPORTED();
  regs_arg want = {0, 0, 5};
  /* the same computation without fibers: yields do nothing off a fiber */
  regs_fn(&want);
  sh_fiber_stacks pool;
  sh_fiber_stacks_init(&pool, 0);
  sh_fiber f[3];
  regs_arg got[3];
  for (int n = 0; n < 3; n++) {
    got[n] = (regs_arg){0, 0, 5};
    REQUIRE(sh_fiber_init(&f[n], &pool, regs_fn, &got[n]));
  }
  /* the resumer holds many values across its switches too */
  long a = opaque(11), b = opaque(12), c = opaque(13), d = opaque(14), e = opaque(15), g = opaque(16);
  double x = opaque_d(11), y = opaque_d(12), z = opaque_d(13), w = opaque_d(14);
  for (int round = 0; round < 6; round++)
    for (int n = 0; n < 3; n++)
      if (!f[n].done) {
        sh_fiber_resume(&f[n]);
        a += 1, b += 1, c += 1, d += 1, e += 1, g += 1;
        x += 1, y += 1, z += 1, w += 1;
      }
  for (int n = 0; n < 3; n++) {
    CHECK(f[n].done);
    CHECK_EQ_INT(got[n].sum, want.sum);
    CHECK(got[n].dsum == want.dsum);
    sh_fiber_release(&f[n], &pool);
  }
  CHECK_EQ_INT(a, opaque(11) + 18);
  CHECK_EQ_INT(b, opaque(12) + 18);
  CHECK_EQ_INT(c, opaque(13) + 18);
  CHECK_EQ_INT(d, opaque(14) + 18);
  CHECK_EQ_INT(e, opaque(15) + 18);
  CHECK_EQ_INT(g, opaque(16) + 18);
  CHECK(x == opaque_d(11) + 18 && y == opaque_d(12) + 18);
  CHECK(z == opaque_d(13) + 18 && w == opaque_d(14) + 18);
  sh_fiber_stacks_free(&pool);
}

typedef struct round_arg {
  int seen_inside[2];
} round_arg;

static void round_fn(void *arg) {
  round_arg *r = arg;
  fesetround(FE_UPWARD);
  sh_fiber_yield();
  r->seen_inside[0] = fegetround(); /* still upward after the resumer's switch */
  fesetround(FE_TOWARDZERO);
  sh_fiber_yield();
  r->seen_inside[1] = fegetround();
}

TEST(fiber_fp_control_word) {
  SKIP_UNSUPPORTED();
  sh_fiber_stacks pool;
  sh_fiber_stacks_init(&pool, 0);
  int before = fegetround();
  round_arg r = {{-1, -1}};
  sh_fiber f;
  REQUIRE(sh_fiber_init(&f, &pool, round_fn, &r));
  sh_fiber_resume(&f);
  CHECK_EQ_INT(fegetround(), before); /* the fiber's mode did not leak out */
  fesetround(FE_DOWNWARD);
  sh_fiber_resume(&f);
  CHECK_EQ_INT(fegetround(), FE_DOWNWARD);
  sh_fiber_resume(&f);
  CHECK(f.done);
  CHECK_EQ_INT(r.seen_inside[0], FE_UPWARD);
  CHECK_EQ_INT(r.seen_inside[1], FE_TOWARDZERO);
  fesetround(before);
  sh_fiber_release(&f, &pool);
  sh_fiber_stacks_free(&pool);
}

typedef struct many_arg {
  int64_t id;
  int64_t out;
  size_t room;
} many_arg;

static void many_fn(void *arg) {
  many_arg *m = arg;
  volatile char buf[512]; /* touches the stack */
  buf[0] = (char)m->id;
  m->room = sh_stack_room();
  sh_fiber_yield();
  m->out = m->id * 3 + buf[0] - (char)m->id;
}

/* TSan keeps a thread state per fiber (__tsan_create_fiber) whose mappings
 * run out past a few thousand: 1,000 there, 10,000 everywhere else. */
#if defined(__SANITIZE_THREAD__)
#define MANY_FIBERS 1000
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MANY_FIBERS 1000
#endif
#endif
#ifndef MANY_FIBERS
#define MANY_FIBERS 10000
#endif

TEST(fiber_ten_thousand_alive) {
  SKIP_UNSUPPORTED();
  enum { N = MANY_FIBERS };
  sh_fiber_stacks pool;
  sh_fiber_stacks_init(&pool, 64 << 10);
  sh_fiber *f = calloc(N, sizeof *f);
  many_arg *m = calloc(N, sizeof *m);
  REQUIRE(f && m);
  int started = 0;
  for (int i = 0; i < N; i++) {
    m[i].id = i;
    if (!sh_fiber_init(&f[i], &pool, many_fn, &m[i])) break;
    sh_fiber_resume(&f[i]); /* each waits at its yield: all alive at once */
    started++;
  }
  CHECK_EQ_INT(started, N);
  for (int i = 0; i < started; i++) {
    CHECK(!f[i].done);
    CHECK(m[i].room > (48 << 10) && m[i].room < (64 << 10));
    if (i % 1000 == 0) CHECK(sh_fiber_current() == NULL);
  }
  for (int i = started - 1; i >= 0; i--) sh_fiber_resume(&f[i]);
  int bad = 0;
  for (int i = 0; i < started; i++) {
    bad += !f[i].done || m[i].out != 3 * (int64_t)i;
    sh_fiber_release(&f[i], &pool);
  }
  CHECK_EQ_INT(bad, 0);
  CHECK_EQ_SIZE(pool.n_free, (size_t)started);
  free(f);
  free(m);
  sh_fiber_stacks_free(&pool);
}

/* Recursion that follows the input, as the interpreter's: it checks the
 * room before each level and stops with an error well before the guard. */
typedef struct deep_arg {
  int depth, max_depth;
  bool stopped;
  size_t least_room;
} deep_arg;

__attribute__((noinline)) static int deep(deep_arg *d, int level) {
  volatile char frame[1024];
  size_t room = sh_stack_room();
  if (room < d->least_room) d->least_room = room;
  if (room < (16 << 10)) {
    d->stopped = true;
    return level;
  }
  if (level > d->depth) d->depth = level;
  frame[0] = (char)level;
  if (level >= d->max_depth) return level;
  return deep(d, level + 1) + frame[0] - (char)level;
}

static void deep_fn(void *arg) {
  deep_arg *d = arg;
  deep(d, 0);
}

TEST(fiber_stack_room_stops_recursion) {
  SKIP_UNSUPPORTED();
  sh_fiber_stacks pool;
  sh_fiber_stacks_init(&pool, 128 << 10);
  deep_arg d = {0, 1000000, false, SIZE_MAX};
  sh_fiber f;
  REQUIRE(sh_fiber_init(&f, &pool, deep_fn, &d));
  sh_fiber_resume(&f);
  CHECK(f.done);
  CHECK(d.stopped); /* an error, not a fault */
  CHECK(d.depth > 10);
  CHECK(d.least_room < (16 << 10));
  /* the thread's own stack is measured again off the fiber */
  CHECK(sh_stack_room() > (128 << 10) || sh_stack_room() == SIZE_MAX);
  sh_fiber_release(&f, &pool);
  sh_fiber_stacks_free(&pool);
}

static volatile int unchecked_limit = 1 << 30; /* never reached: the guard page is */

__attribute__((noinline)) static int unchecked(int level) {
  volatile char frame[1024];
  frame[0] = (char)level;
  if (level > unchecked_limit) return 0;
  return unchecked(level + 1) + frame[0];
}

static void overflow_fn(void *arg) { *(int *)arg = unchecked(0); }

TEST(fiber_true_overflow_faults) {
  SKIP_UNSUPPORTED();
  /* without the check, the guard page stops it: the process faults there
   * (under ASan: its stack-overflow report and a failing exit) */
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, 2);
    sh_fiber_stacks pool;
    sh_fiber_stacks_init(&pool, 64 << 10);
    sh_fiber f;
    int out = 0;
    if (!sh_fiber_init(&f, &pool, overflow_fn, &out)) _exit(3);
    sh_fiber_resume(&f);
    _exit(0); /* not reached */
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == 0));
  CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == 3));
  CHECK(WIFSIGNALED(status) ? WTERMSIG(status) == SIGSEGV || WTERMSIG(status) == SIGBUS : 1);
}

static void never_fn(void *arg) { ++*(int *)arg; }

TEST(fiber_never_yields) {
  SKIP_UNSUPPORTED();
  sh_fiber_stacks pool;
  sh_fiber_stacks_init(&pool, 0);
  int n = 0;
  for (int k = 0; k < 100; k++) { /* one stack, reused each time */
    sh_fiber f;
    REQUIRE(sh_fiber_init(&f, &pool, never_fn, &n));
    sh_fiber_resume(&f);
    CHECK(f.done);
    sh_fiber_release(&f, &pool);
  }
  CHECK_EQ_INT(n, 100);
  CHECK_EQ_SIZE(pool.n_free, 1);
  sh_fiber_yield(); /* off a fiber: does nothing */
  sh_fiber_stacks_free(&pool);
}

/* sh_fiber_timing: every resume and yield is timed exactly once while on
 * (a fiber's last switch, its return, too), none while off; sh_fiber_prefetch
 * on suspended fibers changes nothing. */
TEST(fiber_switch_timing_counts) {
  SKIP_UNSUPPORTED();
  enum { NF = 3, ROUNDS = 50 };
  sh_fiber_stacks pool;
  sh_fiber_stacks_init(&pool, 0);
  int log[NF * ROUNDS], n_log = 0;
  pingpong pp[NF];
  sh_fiber f[NF];
  for (int i = 0; i < NF; i++) {
    pp[i] = (pingpong){i, ROUNDS, log, &n_log};
    REQUIRE(sh_fiber_init(&f[i], &pool, pingpong_fn, &pp[i]));
  }
  sh_fiber_timing_enable(true);
  for (int live = NF; live;) {
    live = 0;
    for (int i = 0; i < NF; i++) {
      if (f[i].done) continue;
      if (i + 1 < NF && !f[i + 1].done) sh_fiber_prefetch(&f[i + 1]);
      sh_fiber_resume(&f[i]);
      live += !f[i].done;
    }
  }
  sh_fiber_timing t;
  sh_fiber_timing_get(&t);
  sh_fiber_timing_enable(false);
  CHECK_EQ_INT((int)(t.switches + t.capped), NF * 2 * (ROUNDS + 1));
  CHECK(t.ns >= 0);
  CHECK(t.switches == 0 || t.ns / (double)t.switches < SH_FIBER_TIMING_CAP_NS);
  CHECK_EQ_INT(n_log, NF * ROUNDS);
  for (int k = 0; k < NF * ROUNDS; k++) CHECK_EQ_INT(log[k], (k % NF) * 1000 + k / NF);
  /* off: a further run adds nothing */
  for (int i = 0; i < NF; i++) sh_fiber_release(&f[i], &pool);
  n_log = 0;
  REQUIRE(sh_fiber_init(&f[0], &pool, pingpong_fn, &pp[0]));
  while (!f[0].done) sh_fiber_resume(&f[0]);
  sh_fiber_timing t2;
  sh_fiber_timing_get(&t2);
  CHECK(t2.switches == t.switches && t2.capped == t.capped);
  sh_fiber_release(&f[0], &pool);
  sh_fiber_stacks_free(&pool);
}
