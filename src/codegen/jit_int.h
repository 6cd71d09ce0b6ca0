/*
 * jit_int.h — what the JIT's files share: the sh_jit and sh_jit_lib bodies,
 * the key hash (SipHash-2-4, 128-bit tag), the compiler (jit_cc.c) and the
 * cache's files (jit_cache.c). Not for other modules: they use jit.h.
 */
#ifndef SH_JIT_INT_H
#define SH_JIT_INT_H

#include <limits.h>

#include "base/buf.h"
#include "jit.h"

#define SH_JIT_PATH PATH_MAX
#define SH_JIT_FORMAT "sheaf-jit-entry 1"

/* --------------------------------------------------------------- hash */

/* SipHash-2-4 (Aumasson & Bernstein), streaming; out_len 8 or 16 (the
 * 128-bit variant). The cache uses a fixed key: it guards against
 * accidents, not adversaries (whoever can write the cache runs code). */
typedef struct sh_jit_hash {
  uint64_t v0, v1, v2, v3;
  uint64_t tail;   /* pending bytes, little-endian */
  uint64_t len;    /* bytes so far */
  int out_len;
} sh_jit_hash;

void sh_jit_hash_init(sh_jit_hash *h, const uint8_t key[16], int out_len);
void sh_jit_hash_update(sh_jit_hash *h, const void *data, size_t n);
void sh_jit_hash_final(sh_jit_hash *h, uint8_t *out);
/* A 128-bit hash under the cache's fixed key. */
void sh_jit_hash_begin(sh_jit_hash *h);
/* 128-bit tag of bytes under the cache's fixed key, as 32 hex digits. */
void sh_jit_hash_hex(const void *data, size_t n, char hex[33]);
void sh_jit_hex(const uint8_t *bytes, size_t n, char *hex);

/* --------------------------------------------------------------- state */

struct sh_jit_lib {
  sh_jit_lib *next;
  void *handle;
  char key[33];
  char *source; /* a copy: a memo hit compares it byte for byte */
  size_t source_size;
  uint64_t compile_ns, load_ns;
  char path[SH_JIT_PATH];
};

struct sh_jit {
  sheaf_ctx *ctx;
  char dir[SH_JIT_PATH];      /* the cache directory, absolute */
  char vdir[SH_JIT_PATH];     /* dir/v1: entries, build/, inc/ */
  const char *dir_from;       /* where dir came from, for messages */
  char cc_want[SH_JIT_PATH];  /* the compiler asked for ("cc", a path) */
  const char *cc_from;        /* "sh_jit_options.cc", "SHEAF_CC" or "the default" */
  char cc[SH_JIT_PATH];       /* the compiler run (found on PATH) */
  char cc_id[2 * SH_JIT_PATH + 96]; /* its identity: path, realpath, size, mtime */
  char cc_version[256];       /* first line of `cc --version` (after a compile) */
  bool cc_ok, dir_ok, version_ok;
  sh_jit_lib *libs;
  sh_jit_stats stats;
};

/* ------------------------------------------------------------ compiler */

/* Resolves jit->cc and jit->cc_id (once); SHEAF_ERR_NOT_FOUND with advice
 * when there is no compiler. */
sheaf_status sh_jit_cc_resolve(sh_jit *jit);
/* Fills jit->cc_version from `cc --version` (once; "unknown" on failure). */
void sh_jit_cc_version(sh_jit *jit);
/* Runs the compiler with argv (argv[0] is the compiler), stdin /dev/null,
 * stdout and stderr to log_path. *exit_status: the wait status. Fails
 * (SHEAF_ERR_IO) only when it cannot be started or waited for. */
sheaf_status sh_jit_cc_run(sh_jit *jit, char *const *argv, const char *log_path, int *wait_status);

/* ---------------------------------------------------------------- files */

/* mkdir -p (0700 for what it creates); SHEAF_ERR_IO naming what fails. */
sheaf_status sh_jit_mkdirs(sh_jit *jit, const char *path);
/* Writes bytes to path through a unique temporary file renamed over it. */
sheaf_status sh_jit_write_atomic(sh_jit *jit, const char *path, const void *data, size_t n);
/* A unique name "base.PID.N" + suffix for temporary files. */
void sh_jit_tmp_name(char *out, size_t cap, const char *base, const char *suffix);
/* snprintf that may truncate (paths sized in advance, messages). */
void sh_jit_fmt(char *out, size_t cap, const char *fmt, ...) SH_PRINTF(3, 4);
/* "path/name" into out; false (and an error) when it does not fit. */
bool sh_jit_join(sh_jit *jit, char *out, const char *dir, const char *name);

/* Does the file at path hold exactly data[0..n)? Read in chunks, no
 * allocation; false when missing or different. */
bool sh_jit_file_equals(const char *path, const void *data, size_t n);
/* Size and SipHash-128 hex of a file's bytes; false when it cannot be read. */
bool sh_jit_file_sum(const char *path, uint64_t *size, char hex[33]);

/* The support headers of req under vdir/inc/<hash>/ (written when missing
 * or different); the include directory into inc_dir. */
sheaf_status sh_jit_headers_put(sh_jit *jit, const sh_jit_request *req, const char *hhex,
                                char *inc_dir);

/* Entry verification: SH_JIT_ENTRY_OK (loadable), _ABSENT (no metadata:
 * a plain miss) or _BAD (why in `why`); < 0 is an error (NOMEM) already
 * recorded. material: the key-material block the metadata must repeat. */
enum { SH_JIT_ENTRY_OK = 0, SH_JIT_ENTRY_ABSENT = 1, SH_JIT_ENTRY_BAD = 2, SH_JIT_ENTRY_ERR = -1 };
int sh_jit_entry_check(sh_jit *jit, const char *key, const sh_buf *material, const char *source,
                       size_t source_size, bool spec, char *why, size_t why_cap);

#endif
