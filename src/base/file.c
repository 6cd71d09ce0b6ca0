/*
 * file.c — inputs (mapped or read once, bounded by the input limit; held
 * inputs for the CLI) and outputs (sh_out: temporary file + rename for
 * regular files, direct writes for everything else). See file.h.
 */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------- limit */

sheaf_status sh_file_input_limit(sheaf_ctx *ctx, size_t *out) {
  *out = SH_FILE_MAX_INPUT_DEFAULT;
  const char *v = getenv("SHEAF_MAX_INPUT");
  if (!v || !*v) return SHEAF_OK;
  uint64_t x;
  if (!sh_parse_bytes(v, &x) || x > (SIZE_MAX >> 1))
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                   "SHEAF_MAX_INPUT='%s': expected a positive number of bytes, optionally with a "
                   "K, M, G or T suffix (e.g. 4G)",
                   v);
  *out = (size_t)x;
  return SHEAF_OK;
}

static sheaf_status too_large(sheaf_ctx *ctx, const char *path, size_t limit, bool stream) {
  return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                 "%s: %s the input limit of %zu bytes (%.1f MiB; set SHEAF_MAX_INPUT, e.g. "
                 "SHEAF_MAX_INPUT=4G, to raise it)",
                 path, stream ? "reading stopped: more than" : "larger than", limit,
                 (double)limit / (1024.0 * 1024.0));
}

/* ----------------------------------------------------- heap (ctx or libc) */

/* Held inputs outlive the context that read them: ctx NULL is libc. */
static void *heap_alloc(sheaf_ctx *ctx, size_t n) { return ctx ? sh_malloc(ctx, n) : malloc(n); }
static void heap_free(sheaf_ctx *ctx, void *p, size_t n) {
  if (ctx) sh_free(ctx, p, n);
  else free(p);
}
static void *heap_realloc(sheaf_ctx *ctx, void *p, size_t old, size_t n) {
  return ctx ? sh_realloc(ctx, p, old, n) : realloc(p, n);
}

/* ------------------------------------------------------------ reading */

/* Reads fd to its end into a NUL-terminated buffer of exactly size + 1
 * bytes (allocated in `heap`, a ctx or NULL for libc); more than `limit`
 * bytes is an error. Errors go to ctx (which may differ from heap). */
static sheaf_status read_stream(sheaf_ctx *ctx, sheaf_ctx *heap, const char *path, int fd,
                                size_t limit, unsigned char **data, size_t *size) {
  size_t cap = 1 << 16, len = 0;
  unsigned char *buf = heap_alloc(heap, cap);
  if (!buf) return sh_fail(ctx, SHEAF_ERR_NOMEM, "%s: out of memory reading it", path);
  for (;;) {
    if (cap - len < 2) {
      size_t ncap = cap * 2;
      if (ncap > limit + 2) ncap = limit + 2;
      if (ncap <= cap) {
        heap_free(heap, buf, cap);
        return too_large(ctx, path, limit, true);
      }
      unsigned char *nb = heap_realloc(heap, buf, cap, ncap);
      if (!nb) {
        heap_free(heap, buf, cap);
        return sh_fail(ctx, SHEAF_ERR_NOMEM, "%s: out of memory reading it (%zu bytes so far)",
                       path, len);
      }
      buf = nb;
      cap = ncap;
    }
    ssize_t r = read(fd, buf + len, cap - len - 1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      heap_free(heap, buf, cap);
      return sh_fail(ctx, SHEAF_ERR_IO, "%s: read failed: %s", path, strerror(e));
    }
    if (r == 0) break;
    len += (size_t)r;
    if (len > limit) {
      heap_free(heap, buf, cap);
      return too_large(ctx, path, limit, true);
    }
  }
  /* shrink to exactly len + 1 so the caller frees with size + 1 */
  unsigned char *out = heap_realloc(heap, buf, cap, len + 1);
  if (!out) {
    heap_free(heap, buf, cap);
    return sh_fail(ctx, SHEAF_ERR_NOMEM, "%s: out of memory reading it", path);
  }
  out[len] = '\0';
  *data = out;
  *size = len;
  return SHEAF_OK;
}

/* n bytes of a regular file from offset off (pread: the fd's position is
 * left alone) into a NUL-terminated ctx buffer. */
static sheaf_status read_regular(sheaf_ctx *ctx, const char *path, int fd, off_t off, size_t n,
                                 unsigned char **data) {
  unsigned char *buf = sh_malloc(ctx, n + 1);
  if (!buf) return sh_fail(ctx, SHEAF_ERR_NOMEM, "%s: out of memory: %zu bytes", path, n + 1);
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, buf + got, n - got, off + (off_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      int e = r < 0 ? errno : 0;
      sh_free(ctx, buf, n + 1);
      return sh_fail(ctx, SHEAF_ERR_IO, "%s: read failed: %s", path,
                     e ? strerror(e) : "file shrank while reading");
    }
    got += (size_t)r;
  }
  buf[n] = '\0';
  *data = buf;
  return SHEAF_OK;
}

/* ---------------------------------------------------------- held inputs */

typedef struct held {
  struct held *next;
  char *name;
  int fd;              /* >= 0: a regular file kept open (standard input redirected from it) */
  off_t off;           /* ... read from this offset (where standard input stood) */
  unsigned char *data; /* else the bytes, size + 1 with a NUL (malloc) */
  size_t size;
} held;

static pthread_mutex_t g_held_mu = PTHREAD_MUTEX_INITIALIZER;
static held *g_held;

/* Entries are removed only by sh_file_release_all: the pointer stays valid. */
static const held *find_held(const char *name) {
  pthread_mutex_lock(&g_held_mu);
  const held *h = g_held;
  while (h && strcmp(h->name, name) != 0) h = h->next;
  pthread_mutex_unlock(&g_held_mu);
  return h;
}

sheaf_status sh_file_hold(sheaf_ctx *ctx, const char *path, const char *name, bool *was_held) {
  if (was_held) *was_held = false;
  if (!name) name = path;
  if (find_held(name)) {
    if (was_held) *was_held = true;
    return SHEAF_OK;
  }
  bool dash = !strcmp(path, "-");
  const char *shown = dash ? name : path; /* in messages */
  struct stat st;
  int fd = -1;
  if (dash) {
    if (fstat(STDIN_FILENO, &st) != 0)
      return sh_fail(ctx, SHEAF_ERR_IO, "%s (standard input): %s", shown, strerror(errno));
    if (S_ISDIR(st.st_mode))
      return sh_fail(ctx, SHEAF_ERR_IO, "%s (standard input): is a directory", shown);
    fd = STDIN_FILENO;
  } else {
    /* stat, not open: opening a FIFO waits for a writer */
    if (stat(path, &st) != 0 || S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))
      return SHEAF_OK; /* opened (and any error reported) where it is read */
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return sh_fail(ctx, SHEAF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0 || S_ISREG(st.st_mode)) { /* replaced meanwhile: read it normally */
      close(fd);
      return SHEAF_OK;
    }
  }
  held *h = calloc(1, sizeof *h);
  if (h) h->name = strdup(name);
  if (!h || !h->name) {
    free(h);
    if (!dash) close(fd);
    return sh_fail(ctx, SHEAF_ERR_NOMEM, "%s: out of memory", shown);
  }
  h->fd = -1;
  sheaf_status s = SHEAF_OK;
  if (S_ISREG(st.st_mode)) { /* standard input from a regular file: map it from where it stands */
    off_t at = lseek(STDIN_FILENO, 0, SEEK_CUR);
    h->fd = fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 0);
    h->off = at > 0 ? at : 0;
    if (h->fd < 0) s = sh_fail(ctx, SHEAF_ERR_IO, "%s (standard input): %s", shown, strerror(errno));
  } else {
    size_t limit;
    s = sh_file_input_limit(ctx, &limit);
    if (s == SHEAF_OK) s = read_stream(ctx, NULL, shown, fd, limit, &h->data, &h->size);
  }
  if (!dash) close(fd);
  if (s != SHEAF_OK) {
    free(h->name);
    free(h);
    return s;
  }
  pthread_mutex_lock(&g_held_mu);
  h->next = g_held;
  g_held = h;
  pthread_mutex_unlock(&g_held_mu);
  if (was_held) *was_held = true;
  return SHEAF_OK;
}

void sh_file_peek(const char *path, void *buf, size_t cap, size_t *n) {
  *n = 0;
  const held *h = find_held(path);
  if (h && !h->data) {
    ssize_t r = pread(h->fd, buf, cap, h->off);
    *n = r > 0 ? (size_t)r : 0;
    return;
  }
  if (h) {
    *n = h->size < cap ? h->size : cap;
    memcpy(buf, h->data, *n);
    return;
  }
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t r = pread(fd, buf, cap, 0);
  *n = r > 0 ? (size_t)r : 0;
  close(fd);
}

const void *sh_file_held_data(const char *name, size_t *size) {
  const held *h = find_held(name);
  *size = h && h->data ? h->size : 0;
  return h ? h->data : NULL;
}

bool sh_file_rename_held(const char *name, const char *new_name) {
  char *copy = strdup(new_name);
  if (!copy) return false;
  pthread_mutex_lock(&g_held_mu);
  held *h = NULL;
  bool taken = false;
  for (held *k = g_held; k; k = k->next) {
    if (!strcmp(k->name, name)) h = k;
    if (!strcmp(k->name, new_name)) taken = true;
  }
  if (h && !taken) {
    free(h->name);
    h->name = copy;
    copy = NULL;
  }
  pthread_mutex_unlock(&g_held_mu);
  free(copy);
  return h && !taken;
}

void sh_file_release_all(void) {
  pthread_mutex_lock(&g_held_mu);
  held *h = g_held;
  g_held = NULL;
  pthread_mutex_unlock(&g_held_mu);
  while (h) {
    held *next = h->next;
    if (h->fd >= 0) close(h->fd);
    free(h->data);
    free(h->name);
    free(h);
    h = next;
  }
}

/* ------------------------------------------------------- mapping, reading */

/* One open of path (or the held entry): fd, its stat, and the offset the
 * bytes start at. *fd_out < 0 with *h set: held bytes. */
static sheaf_status open_input(sheaf_ctx *ctx, const char *path, int *fd_out, struct stat *st,
                               off_t *off, const held **h) {
  *fd_out = -1;
  *off = 0;
  *h = find_held(path);
  if (*h && (*h)->data) return SHEAF_OK;
  int fd = *h ? (*h)->fd : open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return sh_fail(ctx, SHEAF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  if (fstat(fd, st) != 0) {
    int e = errno;
    if (!*h) close(fd);
    return sh_fail(ctx, SHEAF_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
  }
  if (S_ISDIR(st->st_mode)) {
    if (!*h) close(fd);
    return sh_fail(ctx, SHEAF_ERR_IO, "%s: is a directory", path);
  }
  if (*h) *off = (*h)->off;
  *fd_out = fd;
  return SHEAF_OK;
}

/* The bytes of an input, opened once: a regular file mapped (when map) or
 * read, anything else read into the heap. text: the input limit applies to
 * regular files too (streams always have it). */
static sheaf_status map_input(sheaf_ctx *ctx, const char *path, bool text, bool map,
                              sh_mapping *out) {
  memset(out, 0, sizeof *out);
  out->ctx = ctx;
  size_t limit;
  sheaf_status st = sh_file_input_limit(ctx, &limit);
  if (st != SHEAF_OK) return st;
  int fd;
  struct stat sb;
  off_t off;
  const held *h;
  if ((st = open_input(ctx, path, &fd, &sb, &off, &h)) != SHEAF_OK) return st;
  unsigned char *data = NULL;
  size_t size = 0;
  if (fd < 0) { /* held bytes: a private copy, as a mapping would be */
    if (text && h->size > limit) return too_large(ctx, path, limit, false);
    if (!(data = sh_malloc(ctx, h->size + 1)))
      return sh_fail(ctx, SHEAF_ERR_NOMEM, "%s: out of memory: %zu bytes", path, h->size + 1);
    memcpy(data, h->data, h->size + 1);
    size = h->size;
  } else if (S_ISREG(sb.st_mode) && sb.st_size > off) {
    size_t n = (size_t)(sb.st_size - off);
    if (text && n > limit) {
      if (!h) close(fd);
      return too_large(ctx, path, limit, false);
    }
    /* copy-on-write: a caller may write through a zero-copy view (the file
     * never changes); mapped from 0 (offsets must be page-aligned) */
    void *p = map ? mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0)
                  : MAP_FAILED;
    if (p != MAP_FAILED) {
      if (!h) close(fd);
      out->data = (const unsigned char *)p + off;
      out->size = n;
      out->map_base = p;
      out->map_size = (size_t)sb.st_size;
      return SHEAF_OK;
    }
    st = read_regular(ctx, path, fd, off, n, &data);
    size = n;
  } else { /* a pipe, a FIFO, a device, or a regular file that says 0 bytes (/proc) */
    st = read_stream(ctx, ctx, path, fd, limit, &data, &size);
  }
  if (fd >= 0 && !h) close(fd);
  if (st != SHEAF_OK) return st;
  out->data = data;
  out->size = size;
  out->heap = data;
  return SHEAF_OK;
}

sheaf_status sh_file_map(sheaf_ctx *ctx, const char *path, sh_mapping *out) {
  return map_input(ctx, path, true, true, out);
}

sheaf_status sh_file_map_binary(sheaf_ctx *ctx, const char *path, sh_mapping *out) {
  return map_input(ctx, path, false, true, out);
}

void sh_file_unmap(sh_mapping *m) {
  if (m->map_base) munmap(m->map_base, m->map_size);
  if (m->heap) sh_free(m->ctx, m->heap, m->size + 1);
  memset(m, 0, sizeof *m);
}

sheaf_status sh_file_read(sheaf_ctx *ctx, const char *path, char **data, size_t *size) {
  sh_mapping m;
  sheaf_status st = map_input(ctx, path, true, false, &m); /* never mapped: m.heap holds it */
  if (st != SHEAF_OK) return st;
  *data = (char *)m.heap;
  *size = m.size;
  return SHEAF_OK;
}

/* ------------------------------------------------------------ outputs */

static sheaf_status out_fail(sh_out *o, sheaf_status st, const char *fmt, ...) SH_PRINTF(3, 4);
static sheaf_status out_fail(sh_out *o, sheaf_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(o->err, sizeof o->err, fmt, ap);
  va_end(ap);
  return sh_fail(o->ctx, st, "%s", o->err);
}

static void out_release(sh_out *o) {
  if (o->fd >= 0) close(o->fd);
  o->fd = -1;
  free(o->target);
  free(o->tmp);
  o->target = o->tmp = NULL;
  o->f = NULL;
}

/* A new temporary file "TARGET.tmp.PID" (or, when taken, "TARGET.tmp.PID.K")
 * next to the target (same file system: the rename is atomic), created
 * exclusively. */
static int create_tmp_next_to(const char *target, char **tmp_out) {
  static atomic_uint counter;
  size_t cap = strlen(target) + 64;
  char *tmp = malloc(cap);
  if (!tmp) {
    errno = ENOMEM;
    return -1;
  }
  for (int tries = 0; tries < 100; tries++) {
    if (tries == 0) snprintf(tmp, cap, "%s.tmp.%ld", target, (long)getpid());
    else snprintf(tmp, cap, "%s.tmp.%ld.%u", target, (long)getpid(), atomic_fetch_add(&counter, 1));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      *tmp_out = tmp;
      return fd;
    }
    if (errno != EEXIST) break;
  }
  int e = errno;
  free(tmp);
  errno = e;
  return -1;
}

/* The descriptor a path names (/dev/stdout, /dev/stderr, /dev/fd/N,
 * /proc/self/fd/N), or -1. */
static int named_fd(const char *path) {
  if (!strcmp(path, "/dev/stdout")) return STDOUT_FILENO;
  if (!strcmp(path, "/dev/stderr")) return STDERR_FILENO;
  const char *p = !strncmp(path, "/dev/fd/", 8) ? path + 8
                  : !strncmp(path, "/proc/self/fd/", 14) ? path + 14 : NULL;
  if (!p || *p < '0' || *p > '9') return -1;
  char *end;
  errno = 0;
  long n = strtol(p, &end, 10);
  return *end || errno || n > INT_MAX ? -1 : (int)n;
}

/* A temporary file under $TMPDIR for a target that is not a regular file
 * (SH_OUT_STAGE): copied into it at commit. */
static sheaf_status stage_elsewhere(sh_out *o, const char *path) {
  const char *dir = getenv("TMPDIR");
  size_t cap = (dir && *dir ? strlen(dir) : 4) + 32;
  if (!(o->tmp = malloc(cap))) {
    out_release(o);
    return out_fail(o, SHEAF_ERR_NOMEM, "out of memory");
  }
  snprintf(o->tmp, cap, "%s/sheaf-out-XXXXXX", dir && *dir ? dir : "/tmp");
  int fd = mkostemp(o->tmp, O_CLOEXEC);
  if (fd < 0 || !(o->f = fdopen(fd, "w"))) {
    int e = errno;
    if (fd >= 0) close(fd), unlink(o->tmp);
    out_fail(o, SHEAF_ERR_IO, "%s: cannot create a temporary file for it (%s): %s", path, o->tmp,
             strerror(e));
    out_release(o);
    return SHEAF_ERR_IO;
  }
  o->copy = true;
  return SHEAF_OK;
}

sheaf_status sh_out_open(sheaf_ctx *ctx, const char *path, int flags, sh_out *o) {
  memset(o, 0, sizeof *o);
  o->ctx = ctx;
  o->fd = -1;
  if (!path || !*path) return out_fail(o, SHEAF_ERR_INVALID_ARG, "an output file name is empty");
  int nfd = named_fd(path);
  if (nfd >= 0) { /* written through the descriptor itself, whatever it is open on */
    int fl = fcntl(nfd, F_GETFL);
    if (fl < 0 || (fl & O_ACCMODE) == O_RDONLY)
      return out_fail(o, SHEAF_ERR_IO, "%s: cannot write: %s", path,
                      fl < 0 ? strerror(errno) : "the descriptor is open for reading only");
    if (!(o->target = strdup(path))) return out_fail(o, SHEAF_ERR_NOMEM, "out of memory");
    int fd = fcntl(nfd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
      int e = errno;
      out_release(o);
      return out_fail(o, SHEAF_ERR_IO, "%s: cannot write: %s", path, strerror(e));
    }
    if (flags & SH_OUT_STAGE) {
      o->fd = fd;
      return stage_elsewhere(o, path);
    }
    if (!(o->f = fdopen(fd, "w"))) {
      int e = errno;
      close(fd);
      out_release(o);
      return out_fail(o, SHEAF_ERR_IO, "%s: cannot write: %s", path, strerror(e));
    }
    return SHEAF_OK;
  }
  if ((flags & SH_OUT_DASH_STDOUT) && !strcmp(path, "-")) {
    o->is_stdout = true;
    o->f = stdout;
    if (!(o->target = strdup("standard output"))) return out_fail(o, SHEAF_ERR_NOMEM, "out of memory");
    return SHEAF_OK;
  }
  struct stat st;
  bool exists = stat(path, &st) == 0;
  if (!exists && errno != ENOENT)
    return out_fail(o, SHEAF_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
  if (exists && S_ISDIR(st.st_mode)) return out_fail(o, SHEAF_ERR_IO, "%s: is a directory", path);
  if (exists && !S_ISREG(st.st_mode)) {
    /* a device, a FIFO, a socket, /dev/stdout: written into, never replaced */
    if (!(o->target = strdup(path))) return out_fail(o, SHEAF_ERR_NOMEM, "out of memory");
    if (flags & SH_OUT_STAGE) return stage_elsewhere(o, path);
    int fd = open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC);
    if (fd < 0 || !(o->f = fdopen(fd, "w"))) {
      int e = errno;
      if (fd >= 0) close(fd);
      out_release(o);
      return out_fail(o, SHEAF_ERR_IO, "%s: cannot open for writing: %s", path, strerror(e));
    }
    return SHEAF_OK;
  }
  /* a regular file or a new path: written beside it, renamed over it at
   * commit; through a symbolic link, the file it points to is replaced */
  struct stat lst;
  char *target = NULL;
  if (exists && lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode)) target = realpath(path, NULL);
  if (!target) target = strdup(path);
  if (!target) return out_fail(o, SHEAF_ERR_NOMEM, "out of memory");
  o->target = target;
  if (exists && access(target, W_OK) != 0) {
    int e = errno;
    out_release(o);
    return out_fail(o, SHEAF_ERR_IO, "%s: cannot write: %s", path, strerror(e));
  }
  int fd = create_tmp_next_to(target, &o->tmp);
  if (fd < 0) {
    int e = errno;
    out_release(o);
    return out_fail(o, SHEAF_ERR_IO, "%s: cannot create: %s%s", path, strerror(e),
                    e == EACCES || e == EROFS ? " (a temporary file is written next to it, then "
                                                "renamed over it)"
                                              : "");
  }
  if (exists) (void)fchmod(fd, st.st_mode & 07777); /* keep the file's permissions */
  if (!(o->f = fdopen(fd, "w"))) {
    int e = errno;
    close(fd);
    unlink(o->tmp);
    out_release(o);
    return out_fail(o, SHEAF_ERR_IO, "%s: cannot write: %s", path, strerror(e));
  }
  return SHEAF_OK;
}

/* Copies the file `from` into the existing non-regular target. */
static sheaf_status copy_into(sh_out *o) {
  int in = open(o->tmp, O_RDONLY | O_CLOEXEC);
  if (in < 0) return out_fail(o, SHEAF_ERR_IO, "%s: cannot read %s back: %s", o->target, o->tmp, strerror(errno));
  int out = o->fd >= 0 ? o->fd : open(o->target, O_WRONLY | O_NOCTTY | O_CLOEXEC);
  o->fd = -1; /* closed below */
  if (out < 0) {
    int e = errno;
    close(in);
    return out_fail(o, SHEAF_ERR_IO, "%s: cannot open for writing: %s", o->target, strerror(e));
  }
  static const size_t chunk = 1 << 16;
  unsigned char *buf = malloc(chunk);
  sheaf_status st = buf ? SHEAF_OK : out_fail(o, SHEAF_ERR_NOMEM, "out of memory");
  while (st == SHEAF_OK) {
    ssize_t r = read(in, buf, chunk);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      st = out_fail(o, SHEAF_ERR_IO, "%s: cannot read %s back: %s", o->target, o->tmp, strerror(errno));
      break;
    }
    if (r == 0) break;
    for (ssize_t done = 0; done < r && st == SHEAF_OK;) {
      ssize_t w = write(out, buf + done, (size_t)(r - done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) st = out_fail(o, SHEAF_ERR_IO, "%s: write failed: %s", o->target, strerror(errno));
      else done += w;
    }
  }
  free(buf);
  close(in);
  if (close(out) != 0 && st == SHEAF_OK)
    st = out_fail(o, SHEAF_ERR_IO, "%s: write failed: %s", o->target, strerror(errno));
  return st;
}

sheaf_status sh_out_commit(sh_out *o) {
  if (o->is_stdout) {
    errno = 0;
    sheaf_status st = SHEAF_OK;
    if (fflush(stdout) != 0 || ferror(stdout))
      st = out_fail(o, SHEAF_ERR_IO, "standard output: write failed: %s",
                    errno ? strerror(errno) : "I/O error");
    out_release(o); /* stdout stays open: checked again at exit */
    return st;
  }
  if (!o->f) return out_fail(o, SHEAF_ERR_INVALID_ARG, "%s: not open for writing", o->target ? o->target : "output");
  errno = 0;
  int e = fflush(o->f) != 0 ? errno : 0;
  if (!e && ferror(o->f)) e = errno ? errno : EIO;
  errno = 0;
  if (fclose(o->f) != 0 && !e) e = errno ? errno : EIO;
  o->f = NULL;
  sheaf_status st = SHEAF_OK;
  if (e) st = out_fail(o, SHEAF_ERR_IO, "%s: write failed: %s", o->target, strerror(e));
  else if (o->tmp && o->copy) st = copy_into(o);
  else if (o->tmp && rename(o->tmp, o->target) != 0)
    st = out_fail(o, SHEAF_ERR_IO, "%s: cannot rename %s over it: %s", o->target, o->tmp, strerror(errno));
  else if (o->tmp) { /* renamed: nothing to remove */
    free(o->tmp);
    o->tmp = NULL;
  }
  if (o->tmp) unlink(o->tmp);
  out_release(o);
  return st;
}

void sh_out_abort(sh_out *o) {
  if (o->f && !o->is_stdout) fclose(o->f);
  if (o->tmp) unlink(o->tmp);
  out_release(o);
}

bool sh_out_is_direct(const sh_out *o) { return o->is_stdout || !o->tmp || o->copy; }

sheaf_status sh_file_write_atomic(sheaf_ctx *ctx, const char *path, const void *data, size_t size) {
  sh_out o;
  sheaf_status st = sh_out_open(ctx, path, 0, &o);
  if (st != SHEAF_OK) return st;
  if (size && fwrite(data, 1, size, o.f) != size) {
    int e = errno;
    sh_out_abort(&o);
    return sh_fail(ctx, SHEAF_ERR_IO, "%s: write failed: %s", path, strerror(e));
  }
  return sh_out_commit(&o);
}

/* ---------------------------------------------------------- identity */

bool sh_file_identity(const char *path, bool output, uint64_t *dev, uint64_t *ino, bool *regular) {
  struct stat st;
  bool ok = !strcmp(path, "-") ? fstat(output ? STDOUT_FILENO : STDIN_FILENO, &st) == 0
                               : stat(path, &st) == 0;
  if (!ok) return false;
  *dev = (uint64_t)st.st_dev;
  *ino = (uint64_t)st.st_ino;
  if (regular) *regular = S_ISREG(st.st_mode);
  return true;
}
