/*
 * jit.h — compiling generated C to a shared library, loading it, and caching
 * the result on disk so that a second run never invokes the compiler
 * (docs/CODEGEN.md, "JIT and cache").
 *
 *   sh_jit *jit;  sh_jit_create(ctx, NULL, &jit);
 *   sh_jit_request r = {.name = "kernel ffn", .source = c, .source_size = n,
 *                       .flags = flags, .n_flags = 2, .isa = "avx512"};
 *   sh_jit_lib *lib;  bool hit;
 *   sh_jit_load(jit, &r, &lib, &hit);
 *   void (*fn)(...) = (void (*)(...))sh_jit_sym(lib, "ffn");
 *   ...
 *   sh_jit_free(jit);            closes every library it loaded
 *
 * One sh_jit belongs to one context and, like the context, is used by one
 * thread at a time. Any number of sh_jits, in one process or in many, may
 * share a cache directory: entries are published atomically and a per-key
 * lock makes concurrent misses of the same key compile once.
 *
 * The cache directory: sh_jit_options.cache_dir, else SHEAF_CACHE_DIR, else
 * $XDG_CACHE_HOME/sheaf, else $HOME/.cache/sheaf (made absolute, created
 * 0700 on first use). The compiler: sh_jit_options.cc, else SHEAF_CC, else
 * `cc`; a value without '/' is searched on PATH (by stat; no shell). It is
 * one program, run without a shell: flags go in the request.
 *
 * The key of an entry is a 128-bit SipHash over the source, the flags, the
 * support headers (names and contents), the ISA string and the compiler's
 * identity (its path, realpath, size and mtime: stat only, so a hit runs
 * nothing). An entry is verified before it is loaded (metadata, source byte
 * for byte, checksum of the .so); one that fails is rebuilt, never loaded.
 */
#ifndef SH_JIT_H
#define SH_JIT_H

#include "base/base.h"
#include "base/buf.h"

typedef struct sh_jit sh_jit;
typedef struct sh_jit_lib sh_jit_lib;

typedef struct sh_jit_options {
  const char *cache_dir; /* NULL: SHEAF_CACHE_DIR, $XDG_CACHE_HOME/sheaf, $HOME/.cache/sheaf */
  const char *cc;        /* NULL: SHEAF_CC, else cc (a name is searched on PATH) */
} sh_jit_options;

/* A support header the source includes ("#include \"name\""): materialized
 * under the cache's content-addressed include directory, passed with -I.
 * name: letters, digits, '_', '-' and '.', not starting with '.'. */
typedef struct sh_jit_header {
  const char *name;
  const char *text;
  size_t size;
} sh_jit_header;

typedef struct sh_jit_request {
  const char *name;               /* for messages ("kernel ffn"); NULL: "generated C" */
  const char *source;             /* the C translation unit (need not be NUL-terminated) */
  size_t source_size;
  const char *const *flags;       /* compiler flags ("-O3", "-march=native"), may be NULL */
  size_t n_flags;
  const sh_jit_header *headers;   /* may be NULL */
  size_t n_headers;
  const char *isa;                /* the target the code is for ("avx512"); with
                                     -march=native it must also name the host CPU,
                                     since the key cannot see it. NULL: "" */
  /* Lazy C (optional). When gen is set, `source` is not C but a spec: the
   * text that determines the C (a kernel's notation, its options, the
   * generator's identity). The key covers the spec, the entry keeps it as
   * KEY.spec and verification compares it byte for byte, so a hit never
   * produces the C; gen appends the C translation unit to c on a miss
   * only (kept as KEY.c for inspection). gen's failure fails the load with
   * its status and message. */
  sheaf_status (*gen)(void *user, sh_buf *c);
  void *gen_user;
} sh_jit_request;

typedef struct sh_jit_stats {
  uint64_t loads;        /* sh_jit_load calls that succeeded */
  uint64_t memo_hits;    /* ... answered by a library this sh_jit already held */
  uint64_t disk_hits;    /* ... answered by a verified cache entry (no compile) */
  uint64_t compiles;     /* compiler runs for entries (successful or not) */
  uint64_t rejected;     /* cache entries found corrupt or mismatched (then rebuilt) */
  uint64_t compile_ns;   /* total time of compiles: write, compile, publish */
  uint64_t hit_ns;       /* total time of disk hits: key, verify, dlopen */
  uint64_t last_load_ns; /* the last successful sh_jit_load, all included */
  char last_reject[256]; /* why the last rejected entry was rejected */
} sh_jit_stats;

/* Resolves the cache directory's path and the compiler's name (nothing is
 * created, nothing is run). Fails (SHEAF_ERR_INVALID_ARG) when no cache
 * directory can be named (no SHEAF_CACHE_DIR, XDG_CACHE_HOME or HOME) or a
 * path is too long. */
sheaf_status sh_jit_create(sheaf_ctx *ctx, const sh_jit_options *opts, sh_jit **out);
/* Closes every library loaded through jit (their symbols become invalid). */
void sh_jit_free(sh_jit *jit);

/* The library for req: from this sh_jit's libraries, else from a verified
 * cache entry, else compiled (cc FLAGS -I<headers> -shared -fPIC -o X.so
 * X.c), published to the cache and loaded. *hit (may be NULL) says whether
 * the compiler was not run by this call. The library lives until
 * sh_jit_free. Errors: SHEAF_ERR_NOT_FOUND (no compiler), SHEAF_ERR_PARSE
 * (the compiler rejected the source: its first diagnostics, file:line:col,
 * and where the source and full output were kept), SHEAF_ERR_IO (cache
 * directory, spawning, files), SHEAF_ERR_FORMAT (dlopen failed),
 * SHEAF_ERR_INVALID_ARG, SHEAF_ERR_NOMEM. */
sheaf_status sh_jit_load(sh_jit *jit, const sh_jit_request *req, sh_jit_lib **out, bool *hit);

/* A symbol of a loaded library, or NULL. */
void *sh_jit_sym(const sh_jit_lib *lib, const char *name);
/* The cache entry's .so the library was loaded from. */
const char *sh_jit_lib_path(const sh_jit_lib *lib);
/* The 32 hex digits of the library's key. */
const char *sh_jit_lib_key(const sh_jit_lib *lib);
/* Nanoseconds this library took: compile (0 on a hit) and load (verify + dlopen). */
uint64_t sh_jit_lib_compile_ns(const sh_jit_lib *lib);
uint64_t sh_jit_lib_load_ns(const sh_jit_lib *lib);

/* The cache directory (absolute). */
const char *sh_jit_cache_dir(const sh_jit *jit);
/* The compiler that runs (resolved on PATH), or NULL with the context's
 * last error set (SHEAF_ERR_NOT_FOUND) when there is none. */
const char *sh_jit_compiler(sh_jit *jit);
void sh_jit_get_stats(const sh_jit *jit, sh_jit_stats *out);

#endif
