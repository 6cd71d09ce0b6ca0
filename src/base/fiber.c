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
#else
  (void)f;
#endif
}

void sh_fiber_yield(void) {
#ifdef SH_FIBER_ARCH
  sh_fiber *f = tl_current;
  if (!f) return;
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
  /* resumed: sh_fiber_resume set tl_current and the stack bounds */
#endif
}
