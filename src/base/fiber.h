/*
 * fiber.h — fibers: functions that run on stacks of their own and switch
 * with their resumer without a system call (callee-saved registers, the
 * stack pointer and the floating-point control state are saved and
 * restored by a few instructions; see fiber.c for x86-64 and AArch64).
 * Other architectures compile, and sh_fiber_supported() is false there:
 * sh_fiber_init then fails and callers report "fibers unsupported".
 *
 * Asymmetric: a thread resumes a fiber (sh_fiber_resume), which runs until
 * it yields (sh_fiber_yield) or its function returns; then the resume
 * returns. A fiber never moves to another thread and never resumes another
 * fiber. Stacks are mmap'd (pages committed as touched, MAP_NORESERVE) with
 * a PROT_NONE guard page below, kept in an sh_fiber_stacks pool for reuse;
 * sh_stack_room (stack.h) measures the running fiber's stack. Overflowing
 * a fiber's stack past sh_stack_room's warning faults on the guard page
 * (SIGSEGV): the process stops there, it never corrupts memory.
 *
 * Built with -fsanitize=address or thread, the switches are annotated
 * (__sanitizer_start/finish_switch_fiber, __tsan_*_fiber), so ASan and TSan
 * follow them.
 */
#ifndef SH_BASE_FIBER_H
#define SH_BASE_FIBER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/stack.h"

/* Default bytes of a fiber's stack (address space; pages committed as
 * touched) and the least accepted. */
#define SH_FIBER_STACK ((size_t)256 << 10)
#define SH_FIBER_STACK_MIN ((size_t)16 << 10)

typedef void (*sh_fiber_fn)(void *arg);

typedef struct sh_fiber {
  void *sp;        /* the fiber's saved stack pointer while it is not running */
  void *caller_sp; /* the resumer's while the fiber runs */
  sh_stack stack;  /* its mapping (guard page first) */
  sh_fiber_fn fn;
  void *arg;
  bool done;       /* fn returned */
  uint64_t t_sw;   /* switch timing (sh_fiber_timing): the stamp taken before a swap */
  /* sanitizers' state (unused otherwise) */
  void *asan_fake, *asan_caller_fake;
  const void *caller_bottom;
  size_t caller_size;
  void *tsan_fiber, *tsan_caller;
} sh_fiber;

/* A pool of fiber stacks of one size (for reuse: mapping a stack is two
 * system calls, taking one from the pool none). */
typedef struct sh_fiber_stacks {
  size_t size; /* usable bytes of each (rounded to pages) */
  sh_stack *free;
  size_t n_free, cap;
} sh_fiber_stacks;

/* Whether this architecture has a context switch (x86-64, AArch64). */
bool sh_fiber_supported(void);

/* size 0: SH_FIBER_STACK; less than SH_FIBER_STACK_MIN: that. */
void sh_fiber_stacks_init(sh_fiber_stacks *p, size_t size);
void sh_fiber_stacks_free(sh_fiber_stacks *p); /* unmaps the pooled stacks */

/* Prepares f to run fn(arg) on a stack from p (mapped when the pool is
 * empty). Returns false when the stack cannot be mapped or fibers are
 * unsupported here; f is then untouched beyond being zeroed. */
bool sh_fiber_init(sh_fiber *f, sh_fiber_stacks *p, sh_fiber_fn fn, void *arg);

/* Gives a fiber's stack back to p (a finished fiber's, or one never
 * resumed; a suspended fiber's frames are abandoned, nothing on them runs). */
void sh_fiber_release(sh_fiber *f, sh_fiber_stacks *p);

/* Runs f (not done, not running) until it yields or returns. */
void sh_fiber_resume(sh_fiber *f);

/* From inside a fiber: back to its resumer; returns when resumed again. */
void sh_fiber_yield(void);

/* The fiber running on this thread, or NULL on a thread's own stack. */
sh_fiber *sh_fiber_current(void);

/* Hints that f is resumed soon: prefetches its saved registers and the few
 * stack lines above them that the resume and the return into the fiber's
 * frames touch (after a flush that ran large kernels they are cold). No
 * effect on a done fiber; a hint only (a no-op where the compiler has none). */
static inline void sh_fiber_prefetch(const sh_fiber *f) {
  const char *sp = (const char *)f->sp;
  __builtin_prefetch(sp, 1, 3);
  __builtin_prefetch(sp + 64, 1, 3);
  __builtin_prefetch(sp + 128, 1, 3);
  __builtin_prefetch(sp + 192, 1, 3);
}

/* In-situ switch timing, opt-in (off: each switch tests one relaxed flag).
 * While on, every resume and yield on any thread is timed from the call's
 * entry to the moment the other side runs again, just after the swap
 * returns there: the state saved, the resumed stack's saved registers
 * popped (its first touches) and the bookkeeping of resume and yield
 * (thread-local current fiber, stack bound). Ticks are the x86-64 TSC or
 * the AArch64 virtual counter (clock_gettime elsewhere); each timing's own
 * cost (two stamps back to back) is subtracted. A timed switch longer than
 * SH_FIBER_TIMING_CAP_NS (the thread was preempted inside it) is not added
 * but counted apart. */
#define SH_FIBER_TIMING_CAP_NS 100000.0
typedef struct sh_fiber_timing {
  uint64_t switches; /* timed switches (a resume and a yield are one each) */
  double ns;         /* their total, stamp overhead subtracted */
  uint64_t capped;   /* switches left out: longer than the cap */
} sh_fiber_timing;

void sh_fiber_timing_enable(bool on); /* also zeroes the totals when turning on */
void sh_fiber_timing_get(sh_fiber_timing *out);

#endif
