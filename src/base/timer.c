/*
 * timer.c — the monotonic clock used by benchmarks, traces and counters.
 */
#include <time.h>

#include "base.h"

uint64_t sheaf_time_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
