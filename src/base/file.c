/*
 * file.c — whole-file reads, read-only mappings and atomic writes.
 */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static sheaf_status open_regular(sheaf_ctx *ctx, const char *path, int *fd_out,
                                 size_t *size_out) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return sh_fail(ctx, SHEAF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return sh_fail(ctx, SHEAF_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
  }
  if (S_ISDIR(st.st_mode)) {
    close(fd);
    return sh_fail(ctx, SHEAF_ERR_IO, "%s: is a directory", path);
  }
  *fd_out = fd;
  *size_out = S_ISREG(st.st_mode) ? (size_t)st.st_size : 0;
  return SHEAF_OK;
}

/* Reads a stream of unknown size (pipe, /dev/stdin) into a heap buffer. */
static sheaf_status read_stream(sheaf_ctx *ctx, const char *path, int fd, char **data,
                                size_t *size) {
  size_t cap = 1 << 16, len = 0;
  char *buf = sh_malloc(ctx, cap);
  if (!buf) return SHEAF_ERR_NOMEM;
  for (;;) {
    if (cap - len < 2) {
      char *nb = sh_realloc(ctx, buf, cap, cap * 2);
      if (!nb) {
        sh_free(ctx, buf, cap);
        return SHEAF_ERR_NOMEM;
      }
      buf = nb;
      cap *= 2;
    }
    ssize_t r = read(fd, buf + len, cap - len - 1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      sh_free(ctx, buf, cap);
      return sh_fail(ctx, SHEAF_ERR_IO, "%s: read failed: %s", path, strerror(e));
    }
    if (r == 0) break;
    len += (size_t)r;
  }
  /* shrink to exactly len + 1 so the caller frees with size + 1 */
  char *out = sh_realloc(ctx, buf, cap, len + 1);
  if (!out) {
    sh_free(ctx, buf, cap);
    return SHEAF_ERR_NOMEM;
  }
  out[len] = '\0';
  *data = out;
  *size = len;
  return SHEAF_OK;
}

sheaf_status sh_file_read(sheaf_ctx *ctx, const char *path, char **data, size_t *size) {
  int fd = -1;
  size_t n = 0;
  sheaf_status st = open_regular(ctx, path, &fd, &n);
  if (st != SHEAF_OK) return st;
  if (n == 0) { /* maybe a pipe or an empty file */
    st = read_stream(ctx, path, fd, data, size);
    close(fd);
    return st;
  }
  char *buf = sh_malloc(ctx, n + 1);
  if (!buf) {
    close(fd);
    return SHEAF_ERR_NOMEM;
  }
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      int e = r < 0 ? errno : 0;
      close(fd);
      sh_free(ctx, buf, n + 1);
      return sh_fail(ctx, SHEAF_ERR_IO, "%s: read failed: %s", path,
                     e ? strerror(e) : "file shrank while reading");
    }
    got += (size_t)r;
  }
  close(fd);
  buf[n] = '\0';
  *data = buf;
  *size = n;
  return SHEAF_OK;
}

sheaf_status sh_file_map(sheaf_ctx *ctx, const char *path, sh_mapping *out) {
  memset(out, 0, sizeof *out);
  out->ctx = ctx;
  int fd = -1;
  size_t n = 0;
  sheaf_status st = open_regular(ctx, path, &fd, &n);
  if (st != SHEAF_OK) return st;
  if (n > 0) {
    /* copy-on-write: a caller may write through a zero-copy view (the file
     * never changes) */
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (p != MAP_FAILED) {
      close(fd);
      out->data = p;
      out->size = n;
      out->map_base = p;
      out->map_size = n;
      return SHEAF_OK;
    }
  }
  char *data;
  size_t size;
  close(fd);
  st = sh_file_read(ctx, path, &data, &size);
  if (st != SHEAF_OK) return st;
  out->data = (const unsigned char *)data;
  out->size = size;
  out->heap = data;
  return SHEAF_OK;
}

void sh_file_unmap(sh_mapping *m) {
  if (m->map_base) munmap(m->map_base, m->map_size);
  if (m->heap) sh_free(m->ctx, m->heap, m->size + 1);
  memset(m, 0, sizeof *m);
}

sheaf_status sh_file_write_atomic(sheaf_ctx *ctx, const char *path, const void *data,
                                  size_t size) {
  char tmp[4096];
  int n = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  if (n < 0 || (size_t)n >= sizeof tmp)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: path too long", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return sh_fail(ctx, SHEAF_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
  const unsigned char *p = data;
  size_t left = size;
  while (left) {
    ssize_t w = write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      int e = errno;
      close(fd);
      unlink(tmp);
      return sh_fail(ctx, SHEAF_ERR_IO, "%s: write failed: %s", path, strerror(e));
    }
    p += w;
    left -= (size_t)w;
  }
  if (close(fd) != 0) {
    int e = errno;
    unlink(tmp);
    return sh_fail(ctx, SHEAF_ERR_IO, "%s: write failed: %s", path, strerror(e));
  }
  if (rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    return sh_fail(ctx, SHEAF_ERR_IO, "%s: cannot rename from %s: %s", path, tmp, strerror(e));
  }
  return SHEAF_OK;
}
