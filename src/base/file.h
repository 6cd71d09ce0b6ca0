/*
 * file.h — every file Sheaf reads or writes goes through here, with errors
 * that name the path.
 *
 * Inputs: each is opened once; a regular file is mapped, anything else (a
 * pipe, a FIFO, a device, standard input) is read into memory. Text inputs
 * (data, vocabularies, model sources) and anything read from a stream stop
 * at the input limit (sh_file_input_limit), so an endless stream
 * (/dev/zero) is an error, not an out-of-memory.
 *
 * Outputs (sh_out): a regular file or a new path is written to a temporary
 * file next to it and renamed over it only when complete (a failure leaves
 * the old file as it was); anything else (a device, a FIFO, /dev/stdout)
 * is written directly and never replaced. Every write, the flush and the
 * close are checked.
 */
#ifndef SH_FILE_H
#define SH_FILE_H

#include <stdio.h>

#include "base.h"

/* ------------------------------------------------------------- inputs */

/* The input limit: SHEAF_MAX_INPUT (bytes, or with a K, M, G or T suffix
 * for KiB ... TiB: sh_parse_bytes) or this default. An invalid SHEAF_MAX_INPUT is an error. */
#define SH_FILE_MAX_INPUT_DEFAULT ((size_t)1 << 30)
sheaf_status sh_file_input_limit(sheaf_ctx *ctx, size_t *out);

/* A view of a file's bytes: mmap'd copy-on-write when possible (writes stay
 * private, the file never changes), else read into memory. */
typedef struct sh_mapping {
  const unsigned char *data;
  size_t size;
  void *map_base;  /* munmap target, or NULL */
  size_t map_size;
  void *heap;      /* allocated copy, or NULL */
  sheaf_ctx *ctx;
} sh_mapping;

/* A text input: at most the input limit, whatever the kind of file. */
sheaf_status sh_file_map(sheaf_ctx *ctx, const char *path, sh_mapping *out);
/* A binary input (weights): a regular file is mapped whatever its size;
 * a stream is read up to the input limit. */
sheaf_status sh_file_map_binary(sheaf_ctx *ctx, const char *path, sh_mapping *out);
void sh_file_unmap(sh_mapping *m);

/* Reads a whole text input into a NUL-terminated heap buffer (size excludes
 * the NUL; at most the input limit); free with sh_free(ctx, data, size + 1). */
sheaf_status sh_file_read(sheaf_ctx *ctx, const char *path, char **data, size_t *size);

/* Held inputs, for a program (the CLI) whose inputs are opened by name more
 * than once by the layers below it (the weights are opened to solve sizes,
 * then to load): a stream can be read only once, and a FIFO's second open
 * waits for a writer that never comes. sh_file_hold reads `path` ("-" is
 * standard input) once, when it is not a regular file or a directory, and
 * keeps it under `name` (NULL: path): until sh_file_release_all, every
 * sh_file_map / sh_file_read of `name` returns those bytes without opening
 * anything. Standard input redirected from a regular file is kept open and
 * mapped. *held (may be NULL) says whether it was held; a regular file is
 * not (it can be opened again). Not for libraries: the registry is global. */
sheaf_status sh_file_hold(sheaf_ctx *ctx, const char *path, const char *name, bool *held);
/* The first bytes of a held input (or, for a path that is not held, of the
 * regular file there; nothing for other files): up to cap into buf, *n the
 * count. For sniffing the format of an input without an extension. */
void sh_file_peek(const char *path, void *buf, size_t cap, size_t *n);
/* The bytes of a held input that was read into memory (read-only, valid
 * until sh_file_release_all), or NULL: `name` is not held, or is standard
 * input kept open as a regular file (map it as any file). For a caller that
 * reads the input once and needs no private copy of it (the CLI's weights,
 * parsed in place by sheaf_st_open_memory); sh_file_map copies. */
const void *sh_file_held_data(const char *name, size_t *size);
/* Gives a held input another name (an extension that says its format);
 * false when name is not held or new_name already is. */
bool sh_file_rename_held(const char *name, const char *new_name);
void sh_file_release_all(void);

/* ------------------------------------------------------------ outputs */

enum {
  /* "-" is standard output (flushed and checked at commit, never closed) */
  SH_OUT_DASH_STDOUT = 1,
  /* always write a temporary file (o->tmp, for writers that take a path,
   * such as the runtime's trace), renamed over a regular target or copied
   * into any other at commit: nothing reaches the target before commit */
  SH_OUT_STAGE = 2
};

typedef struct sh_out {
  FILE *f;          /* write here; errors are checked at commit */
  sheaf_ctx *ctx;   /* may be NULL: errors only in err */
  char *target;     /* the file committed to (symbolic links followed) */
  char *tmp;        /* the temporary file, or NULL: f writes the target */
  bool is_stdout;   /* f is stdout */
  bool copy;        /* commit copies tmp into the target (a device, a FIFO) */
  int fd;           /* >= 0: the descriptor a path like /dev/stdout names, for copy */
  char err[512];    /* the last failure, "PATH: reason" (also the ctx's error) */
} sh_out;

/* Opens `path` for writing as described above. A path that names one of
 * the process's descriptors (/dev/stdout, /dev/stderr, /dev/fd/N,
 * /proc/self/fd/N) is written through that descriptor, whatever it is open
 * on (never renamed over: `--out /dev/stdout >> log` appends to log). A
 * directory, a missing folder or a file that cannot be created is an error
 * (SHEAF_ERR_IO); nothing is changed then. */
sheaf_status sh_out_open(sheaf_ctx *ctx, const char *path, int flags, sh_out *o);
/* Finishes: flush, check, close, then rename (or copy) the temporary file
 * over the target. On failure the temporary file is removed and the target
 * is as it was (a direct target keeps what was written). */
sheaf_status sh_out_commit(sh_out *o);
/* Gives up: closes and removes the temporary file; the target is as it was.
 * Safe after a failed open or commit, and twice. */
void sh_out_abort(sh_out *o);
/* True when the target is not a regular file (commit writes into it rather
 * than renaming): such commits can fail late (a full device). */
bool sh_out_is_direct(const sh_out *o);

/* Writes bytes to path through sh_out: whole or not at all. */
sheaf_status sh_file_write_atomic(sheaf_ctx *ctx, const char *path, const void *data,
                                  size_t size);

/* ---------------------------------------------------------- identity */

/* The identity of an existing file (st_dev, st_ino of stat(path); "-" is
 * standard input or, with `output`, standard output): false when it does
 * not exist. *regular says whether it is a regular file. */
bool sh_file_identity(const char *path, bool output, uint64_t *dev, uint64_t *ino, bool *regular);

#endif
