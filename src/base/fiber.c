/*
 * fiber.c — the context switch (see fiber.h).
 *
 * sh_fiber_swap(save, to) pushes the callee-saved state on the current
 * stack, stores the stack pointer in *save, loads `to` and pops the state
 * saved there, returning into the other context. Saved (System V x86-64):
 * rbp rbx r12-r15, MXCSR and the x87 control word; (AAPCS64): x19-x30,
 * d8-d15 and FPCR. Everything else is caller-saved, so the C caller has
 * already spilled it. A new fiber's stack is laid out as if it had called
 * sh_fiber_swap: popping it "returns" into a small trampoline that calls
 * entry(fiber) from two of the restored registers.
 */
#include "base/fiber.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------ sanitizers */

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SH_FIBER_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define SH_FIBER_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(SH_FIBER_ASAN)
#define SH_FIBER_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__) && !defined(SH_FIBER_TSAN)
#define SH_FIBER_TSAN 1
#endif

#ifdef SH_FIBER_ASAN
void __sanitizer_start_switch_fiber(void **fake_stack_save, const void *bottom, size_t size);
void __sanitizer_finish_switch_fiber(void *fake_stack_save, const void **bottom_old, size_t *size_old);
void __asan_unpoison_memory_region(void const volatile *addr, size_t size);
#endif
#ifdef SH_FIBER_TSAN
void *__tsan_get_current_fiber(void);
void *__tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void *fiber);
void __tsan_switch_to_fiber(void *fiber, unsigned flags);
#endif

/* ------------------------------------------------------------ the switch */

#if defined(SH_FIBER_NO_ASM) /* the portable fallback, for checking it builds */
#elif defined(__x86_64__)
#define SH_FIBER_ARCH 1
/* The frame sh_fiber_swap leaves, from the saved stack pointer up: MXCSR
 * (4 bytes) and x87 control word (2, padded), r15 r14 r13 r12 rbx rbp, the
 * return address. */
__asm__(".text\n"
        ".p2align 4\n"
        ".globl sh_fiber_swap\n"
        ".hidden sh_fiber_swap\n"
        ".type sh_fiber_swap,@function\n"
        "sh_fiber_swap:\n" /* rdi: void **save, rsi: void *to */
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  subq $8, %rsp\n"
        "  stmxcsr (%rsp)\n"
        "  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n"
        "  fldcw 4(%rsp)\n"
        "  addq $8, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n"
        ".size sh_fiber_swap, .-sh_fiber_swap\n"
        ".p2align 4\n"
        ".globl sh_fiber_trampoline\n"
        ".hidden sh_fiber_trampoline\n"
        ".type sh_fiber_trampoline,@function\n"
        "sh_fiber_trampoline:\n" /* r12: the fiber, r13: entry; rsp 16-aligned */
        "  movq %r12, %rdi\n"
        "  callq *%r13\n"
        "  ud2\n"
        ".size sh_fiber_trampoline, .-sh_fiber_trampoline\n"
        ".section .note.GNU-stack,\"\",@progbits\n"
        ".text\n");
#define SH_FIBER_FRAME 64 /* bytes of the frame above */
#elif defined(__aarch64__)
#define SH_FIBER_ARCH 1
/* The frame, from the saved sp up: x19..x30 (96 bytes), d8..d15 (64), FPCR
 * (8, padded to 16). */
__asm__(".text\n"
        ".p2align 4\n"
        ".globl sh_fiber_swap\n"
        ".hidden sh_fiber_swap\n"
        ".type sh_fiber_swap,%function\n"
        "sh_fiber_swap:\n" /* x0: void **save, x1: void *to */
        "  sub sp, sp, #176\n"
        "  stp x19, x20, [sp, #0]\n"
        "  stp x21, x22, [sp, #16]\n"
        "  stp x23, x24, [sp, #32]\n"
        "  stp x25, x26, [sp, #48]\n"
        "  stp x27, x28, [sp, #64]\n"
        "  stp x29, x30, [sp, #80]\n"
        "  stp d8, d9, [sp, #96]\n"
        "  stp d10, d11, [sp, #112]\n"
        "  stp d12, d13, [sp, #128]\n"
        "  stp d14, d15, [sp, #144]\n"
        "  mrs x2, fpcr\n"
        "  str x2, [sp, #160]\n"
        "  mov x2, sp\n"
        "  str x2, [x0]\n"
        "  mov sp, x1\n"
        "  ldp x19, x20, [sp, #0]\n"
        "  ldp x21, x22, [sp, #16]\n"
        "  ldp x23, x24, [sp, #32]\n"
        "  ldp x25, x26, [sp, #48]\n"
        "  ldp x27, x28, [sp, #64]\n"
        "  ldp x29, x30, [sp, #80]\n"
        "  ldp d8, d9, [sp, #96]\n"
        "  ldp d10, d11, [sp, #112]\n"
        "  ldp d12, d13, [sp, #128]\n"
        "  ldp d14, d15, [sp, #144]\n"
        "  ldr x2, [sp, #160]\n"
        "  msr fpcr, x2\n"
        "  add sp, sp, #176\n"
        "  ret\n"
        ".size sh_fiber_swap, .-sh_fiber_swap\n"
        ".p2align 4\n"
        ".globl sh_fiber_trampoline\n"
        ".hidden sh_fiber_trampoline\n"
        ".type sh_fiber_trampoline,%function\n"
        "sh_fiber_trampoline:\n" /* x19: the fiber, x20: entry */
        "  mov x0, x19\n"
        "  blr x20\n"
        "  brk #0\n"
        ".size sh_fiber_trampoline, .-sh_fiber_trampoline\n"
        ".section .note.GNU-stack,\"\",%progbits\n"
        ".text\n");
#define SH_FIBER_FRAME 176
#endif

#ifdef SH_FIBER_ARCH
#define SH_FIBER_MAYBE_UNUSED
void sh_fiber_swap(void **save, void *to);
void sh_fiber_trampoline(void);
#else
#define SH_FIBER_MAYBE_UNUSED __attribute__((unused)) /* the fallback maps no stack */
#endif

bool sh_fiber_supported(void) {
#ifdef SH_FIBER_ARCH
  return true;
#else
  return false;
#endif
}

/* ---------------------------------------------------------------- stacks */

static size_t page_size(void) {
  static size_t page;
  if (!page) page = (size_t)sysconf(_SC_PAGESIZE);
  return page;
}

void sh_fiber_stacks_init(sh_fiber_stacks *p, size_t size) {
  memset(p, 0, sizeof *p);
  if (size == 0) size = SH_FIBER_STACK;
  if (size < SH_FIBER_STACK_MIN) size = SH_FIBER_STACK_MIN;
  size_t page = page_size();
  p->size = (size + page - 1) / page * page;
}

void sh_fiber_stacks_free(sh_fiber_stacks *p) {
  for (size_t i = 0; i < p->n_free; i++) sh_stack_free(&p->free[i]);
  free(p->free);
  p->free = NULL;
  p->n_free = p->cap = 0;
}

SH_FIBER_MAYBE_UNUSED static bool stack_get(sh_fiber_stacks *p, sh_stack *out) {
  if (p->n_free) {
    *out = p->free[--p->n_free];
    return true;
  }
  size_t page = page_size();
  void *m = mmap(NULL, p->size + page, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (m == MAP_FAILED) return false;
  if (mprotect(m, page, PROT_NONE) != 0) {
    munmap(m, p->size + page);
    return false;
  }
  out->base = m;
  out->size = p->size + page;
  return true;
}

static void stack_put(sh_fiber_stacks *p, sh_stack *s) {
  if (!s->base) return;
  if (p->n_free == p->cap) {
    size_t cap = p->cap ? 2 * p->cap : 16;
    sh_stack *v = realloc(p->free, cap * sizeof *v);
    if (!v) { /* cannot pool it: unmap */
      sh_stack_free(s);
      return;
    }
    p->free = v;
    p->cap = cap;
  }
  p->free[p->n_free++] = *s;
  s->base = NULL;
  s->size = 0;
}

/* ---------------------------------------------------------- switch timing */

static int g_timing;                        /* sh_fiber_timing_enable */
static uint64_t g_t_ticks, g_t_switches, g_t_capped; /* totals (relaxed atomics) */
static uint64_t g_t_overhead, g_t_cap;      /* ticks: two stamps back to back; the cap */
static double g_t_ns_per_tick = 1;

static inline uint64_t stamp(void) {
#if defined(__x86_64__)
  uint32_t lo, hi;
  __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
  return (uint64_t)hi << 32 | lo;
#elif defined(__aarch64__)
  uint64_t v;
  __asm__ volatile("mrs %0, cntvct_el0" : "=r"(v));
  return v;
#else
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
#endif
}

static inline bool timing_on(void) { return __atomic_load_n(&g_timing, __ATOMIC_RELAXED) != 0; }

static double mono_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* Ticks per ns over ~5 ms, and the least cost of a stamp pair. */
static void timing_calibrate(void) {
  uint64_t best = UINT64_MAX;
  for (int i = 0; i < 1000; i++) {
    uint64_t a = stamp(), b = stamp();
    if (b - a < best) best = b - a;
  }
  double n0 = mono_ns();
  uint64_t s0 = stamp();
  double n1;
  do n1 = mono_ns();
  while (n1 - n0 < 5e6);
  uint64_t s1 = stamp();
  g_t_ns_per_tick = s1 > s0 ? (n1 - n0) / (double)(s1 - s0) : 1;
  g_t_overhead = best;
  g_t_cap = (uint64_t)(SH_FIBER_TIMING_CAP_NS / g_t_ns_per_tick);
}

void sh_fiber_timing_enable(bool on) {
  if (on) {
    timing_calibrate();
    __atomic_store_n(&g_t_ticks, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&g_t_switches, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&g_t_capped, 0, __ATOMIC_RELAXED);
  }
  __atomic_store_n(&g_timing, on ? 1 : 0, __ATOMIC_RELAXED);
}

void sh_fiber_timing_get(sh_fiber_timing *out) {
  out->switches = __atomic_load_n(&g_t_switches, __ATOMIC_RELAXED);
  out->ns = (double)__atomic_load_n(&g_t_ticks, __ATOMIC_RELAXED) * g_t_ns_per_tick;
  out->capped = __atomic_load_n(&g_t_capped, __ATOMIC_RELAXED);
}

/* The switch stamped in f->t_sw has arrived (0: it was not stamped). */
SH_FIBER_MAYBE_UNUSED static void timing_arrive(sh_fiber *f) {
  uint64_t now = stamp(), t0 = f->t_sw;
  if (!t0) return;
  f->t_sw = 0;
  uint64_t dt = now - t0;
  if (dt > g_t_cap) {
    __atomic_fetch_add(&g_t_capped, 1, __ATOMIC_RELAXED);
    return;
  }
  __atomic_fetch_add(&g_t_ticks, dt > g_t_overhead ? dt - g_t_overhead : 0, __ATOMIC_RELAXED);
  __atomic_fetch_add(&g_t_switches, 1, __ATOMIC_RELAXED);
}

/* ---------------------------------------------------------------- fibers */

static _Thread_local sh_fiber *tl_current;

sh_fiber *sh_fiber_current(void) { return tl_current; }

SH_FIBER_MAYBE_UNUSED static char *stack_lo(const sh_fiber *f) { return (char *)f->stack.base + page_size(); }

#ifdef SH_FIBER_ARCH
/* Runs on the fiber's stack, called by the trampoline; never returns. */
static void fiber_entry(sh_fiber *f) {
#ifdef SH_FIBER_ASAN
  __sanitizer_finish_switch_fiber(NULL, &f->caller_bottom, &f->caller_size);
#endif
  if (timing_on()) timing_arrive(f);
  f->fn(f->arg);
  f->done = true;
  tl_current = NULL;
  sh_stack_set_fiber(NULL);
#ifdef SH_FIBER_ASAN
  __sanitizer_start_switch_fiber(NULL, f->caller_bottom, f->caller_size); /* this stack dies */
#endif
#ifdef SH_FIBER_TSAN
  __tsan_switch_to_fiber(f->tsan_caller, 0);
#endif
  void *dead;
  if (timing_on()) f->t_sw = stamp();
  sh_fiber_swap(&dead, f->caller_sp);
  __builtin_unreachable();
}
#endif

bool sh_fiber_init(sh_fiber *f, sh_fiber_stacks *p, sh_fiber_fn fn, void *arg) {
  memset(f, 0, sizeof *f);
#ifdef SH_FIBER_ARCH
  if (!stack_get(p, &f->stack)) return false;
  f->fn = fn;
  f->arg = arg;
  char *lo = stack_lo(f), *top = lo + p->size; /* page-aligned, so 16-aligned */
#ifdef SH_FIBER_ASAN
  __asan_unpoison_memory_region(lo, p->size); /* a reused stack's dead frames */
#endif
  uintptr_t *w = (uintptr_t *)(void *)(top - SH_FIBER_FRAME);
  memset(w, 0, SH_FIBER_FRAME);
#if defined(__x86_64__)
  uint32_t mxcsr = 0; /* the creator's MXCSR and x87 control word */
  uint16_t fpcw = 0;
  __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
  __asm__ volatile("fnstcw %0" : "=m"(fpcw));
  memcpy((char *)w, &mxcsr, 4);
  memcpy((char *)w + 4, &fpcw, 2);
  w[3] = (uintptr_t)fiber_entry;         /* r13 */
  w[4] = (uintptr_t)f;                   /* r12 */
  w[6] = 0;                              /* rbp: the end of the frame chain */
  w[7] = (uintptr_t)sh_fiber_trampoline; /* the return address, at top - 8 */
#else /* AArch64 */
  w[0] = (uintptr_t)f;           /* x19 */
  w[1] = (uintptr_t)fiber_entry; /* x20 */
  w[10] = 0;                     /* x29: the end of the frame chain */
  w[11] = (uintptr_t)sh_fiber_trampoline; /* x30 */
  uint64_t fpcr;
  __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
  w[20] = (uintptr_t)fpcr;
#endif
  f->sp = w;
#ifdef SH_FIBER_TSAN
  f->tsan_fiber = __tsan_create_fiber(0);
#endif
  return true;
#else
  (void)p;
  (void)fn;
  (void)arg;
  return false;
#endif
}

void sh_fiber_release(sh_fiber *f, sh_fiber_stacks *p) {
#ifdef SH_FIBER_TSAN
  if (f->tsan_fiber) __tsan_destroy_fiber(f->tsan_fiber);
  f->tsan_fiber = NULL;
#endif
  stack_put(p, &f->stack);
}

void sh_fiber_resume(sh_fiber *f) {
#ifdef SH_FIBER_ARCH
  bool timed = timing_on();
  if (timed) f->t_sw = stamp();
  tl_current = f;
  sh_stack_set_fiber(stack_lo(f));
#ifdef SH_FIBER_TSAN
  f->tsan_caller = __tsan_get_current_fiber();
  __tsan_switch_to_fiber(f->tsan_fiber, 0);
#endif
#ifdef SH_FIBER_ASAN
  __sanitizer_start_switch_fiber(&f->asan_caller_fake, stack_lo(f), f->stack.size - page_size());
#endif
  sh_fiber_swap(&f->caller_sp, f->sp);
#ifdef SH_FIBER_ASAN
  __sanitizer_finish_switch_fiber(f->asan_caller_fake, NULL, NULL);
#endif
  if (timed) timing_arrive(f); /* the fiber yielded or returned */
#else
  (void)f;
#endif
}

void sh_fiber_yield(void) {
#ifdef SH_FIBER_ARCH
  sh_fiber *f = tl_current;
  if (!f) return;
  if (timing_on()) f->t_sw = stamp();
  tl_current = NULL;
  sh_stack_set_fiber(NULL);
#ifdef SH_FIBER_TSAN
  __tsan_switch_to_fiber(f->tsan_caller, 0);
#endif
#ifdef SH_FIBER_ASAN
  __sanitizer_start_switch_fiber(&f->asan_fake, f->caller_bottom, f->caller_size);
#endif
  sh_fiber_swap(&f->sp, f->caller_sp);
#ifdef SH_FIBER_ASAN
  __sanitizer_finish_switch_fiber(f->asan_fake, &f->caller_bottom, &f->caller_size);
#endif
  if (timing_on()) timing_arrive(f); /* resumed */
  /* resumed: sh_fiber_resume set tl_current and the stack bounds */
#endif
}
