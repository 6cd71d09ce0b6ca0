/*
 * stack.c — big thread stacks and the room left on the current one (see
 * stack.h).
 */
#include "base/stack.h"

#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

int sh_thread_start(pthread_t *t, sh_stack *st, size_t size, void *(*fn)(void *), void *arg) {
  st->base = NULL;
  st->size = 0;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  void *m = mmap(NULL, size + page, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  if (m != MAP_FAILED) {
    if (mprotect(m, page, PROT_NONE) == 0 &&
        pthread_attr_setstack(&attr, (char *)m + page, size) == 0) {
      st->base = m;
      st->size = size + page;
    } else {
      munmap(m, size + page);
    }
  }
  int rc = pthread_create(t, st->base ? &attr : NULL, fn, arg);
  pthread_attr_destroy(&attr);
  if (rc != 0) sh_stack_free(st);
  return rc;
}

void sh_stack_free(sh_stack *st) {
  if (st->base) munmap(st->base, st->size);
  st->base = NULL;
  st->size = 0;
}

/* The lowest usable address of this thread's stack, found once per thread. */
static _Thread_local const char *tl_stack_lo;
static _Thread_local int tl_stack_known; /* 0 not yet asked, 1 known, -1 unknown */

static _Thread_local const char *tl_fiber_lo; /* the running fiber's stack, or NULL */

void sh_stack_set_fiber(const void *lo) { tl_fiber_lo = lo; }

size_t sh_stack_room(void) {
  if (tl_fiber_lo) {
    const char *here = __builtin_frame_address(0);
    return here > tl_fiber_lo ? (size_t)(here - tl_fiber_lo) : 0;
  }
  if (!tl_stack_known) {
    pthread_attr_t attr;
    void *addr = NULL;
    size_t size = 0;
    tl_stack_known = -1;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      if (pthread_attr_getstack(&attr, &addr, &size) == 0 && addr) {
        tl_stack_lo = addr;
        tl_stack_known = 1;
      }
      pthread_attr_destroy(&attr);
    }
  }
  if (tl_stack_known < 0) return SIZE_MAX;
  const char *here = __builtin_frame_address(0);
  return here > tl_stack_lo ? (size_t)(here - tl_stack_lo) : 0;
}
