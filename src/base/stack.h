/*
 * stack.h — thread stacks big enough for recursion that follows the input:
 * mmap'd stacks (address space reserved, pages committed only as touched)
 * with a guard page below, threads started on them, and how much room the
 * current thread's stack has left (the interpreter checks it before each
 * call, so a recursion too deep for its thread is an error, not a crash).
 *
 * Sheaf's pool workers and the `sheaf` tool's main thread run on stacks of
 * SH_BIG_STACK bytes; any other thread (a library user's) keeps its own
 * stack and gets the same check.
 */
#ifndef SH_BASE_STACK_H
#define SH_BASE_STACK_H

#include <pthread.h>
#include <stddef.h>

/* Address space per big stack: 1 GiB (only the pages a thread touches are
 * memory; a 10,000-deep tree through the interpreter touches ~30 MB, ~150 MB
 * under ASan). */
#define SH_BIG_STACK ((size_t)1 << 30)

typedef struct sh_stack {
  void *base; /* the mapping (guard page first), or NULL */
  size_t size;
} sh_stack;

/* Starts fn(arg) on a thread with a stack of `size` bytes mapped into *st
 * (free it with sh_stack_free after pthread_join). Where the mapping fails
 * (an address-space limit), the thread gets the system's default stack and
 * st->base is NULL. Returns pthread_create's result. */
int sh_thread_start(pthread_t *t, sh_stack *st, size_t size, void *(*fn)(void *), void *arg);
void sh_stack_free(sh_stack *st);

/* Bytes between the caller's frame and the end of its thread's stack
 * (SIZE_MAX when the system cannot tell). */
size_t sh_stack_room(void);

/* Where sh_stack_room measures on this thread: the lowest usable address
 * of the fiber now running on it (fiber.c sets it at each switch), or NULL
 * for the thread's own stack. */
void sh_stack_set_fiber(const void *lo);

#endif
