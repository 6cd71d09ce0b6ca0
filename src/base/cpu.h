/*
 * cpu.h — CPU feature detection, done once per process, and the SHEAF_ISA
 * override that lowers the ISA level so every kernel path can be tested on
 * one machine.
 */
#ifndef SH_CPU_H
#define SH_CPU_H

#include "base.h"

typedef struct sh_cpu_features {
  bool avx2, fma, avx512f, avx512bw, avx512vl, avx512dq;
  bool os_avx, os_avx512; /* the OS saves the wider registers (XCR0) */
} sh_cpu_features;

const sh_cpu_features *sh_cpu_features_get(void);
/* Message for an invalid SHEAF_ISA value, or NULL. */
const char *sh_cpu_env_error(void);
/* Parses a SHEAF_ISA value against the host level; NULL/"" keeps host.
 * Returns false (and leaves *out) on an unknown name. A name above the host
 * level yields the host level. */
bool sh_cpu_parse_isa(const char *value, sheaf_isa host, sheaf_isa *out);
/* Online CPUs (at least 1). */
int sh_cpu_count(void);

#endif
