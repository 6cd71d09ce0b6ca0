/*
 * jit_cache.c — the cache's files: folders, atomic writes (a unique
 * temporary file renamed into place), byte comparison and checksums without
 * allocation, the content-addressed support headers, and the verification
 * of an entry before it may be loaded.
 */
#include "jit_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHUNK 16384
#define META_MAX ((size_t)1 << 20)

static sheaf_status dir_fail(sh_jit *jit, const char *path, const char *why) {
  return sh_fail(jit->ctx, SHEAF_ERR_IO,
                 "JIT cache: cannot create the folder %s: %s (the cache directory is %s, from %s; "
                 "set SHEAF_CACHE_DIR to a writable directory)",
                 path, why, jit->dir, jit->dir_from);
}

sheaf_status sh_jit_mkdirs(sh_jit *jit, const char *path) {
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return SHEAF_OK;
  char p[SH_JIT_PATH];
  size_t n = strlen(path);
  if (n >= sizeof p) return dir_fail(jit, path, "the path is too long");
  memcpy(p, path, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (p[i] != '/' && p[i] != '\0') continue;
    char c = p[i];
    p[i] = '\0';
    if (mkdir(p, 0700) != 0) {
      int e = errno;
      if (stat(p, &st) != 0) return dir_fail(jit, p, strerror(e));
      if (!S_ISDIR(st.st_mode)) return dir_fail(jit, p, "it exists and is not a directory");
    }
    p[i] = c;
  }
  return SHEAF_OK;
}

void sh_jit_tmp_name(char *out, size_t cap, const char *base, const char *suffix) {
  static atomic_uint counter;
  snprintf(out, cap, "%s.%ld.%u.tmp%s", base, (long)getpid(), atomic_fetch_add(&counter, 1),
           suffix);
}

void sh_jit_fmt(char *out, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out, cap, fmt, ap);
  va_end(ap);
}

bool sh_jit_join(sh_jit *jit, char *out, const char *dir, const char *name) {
  if ((size_t)snprintf(out, SH_JIT_PATH, "%s/%s", dir, name) < SH_JIT_PATH) return true;
  sh_fail(jit->ctx, SHEAF_ERR_INVALID_ARG, "JIT cache: path %s/%s is too long", dir, name);
  return false;
}

sheaf_status sh_jit_write_atomic(sh_jit *jit, const char *path, const void *data, size_t n) {
  char tmp[SH_JIT_PATH];
  sh_jit_tmp_name(tmp, sizeof tmp, path, "");
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return sh_fail(jit->ctx, SHEAF_ERR_IO, "JIT cache: cannot create %s: %s (cache directory %s, from %s)",
                   tmp, strerror(errno), jit->dir, jit->dir_from);
  const char *p = data;
  size_t done = 0;
  int e = 0;
  while (done < n) {
    ssize_t w = write(fd, p + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      e = w < 0 ? errno : EIO;
      break;
    }
    done += (size_t)w;
  }
  if (close(fd) != 0 && !e) e = errno;
  if (!e && rename(tmp, path) != 0) e = errno;
  if (!e) return SHEAF_OK;
  unlink(tmp);
  return sh_fail(jit->ctx, SHEAF_ERR_IO, "JIT cache: cannot write %s: %s", path, strerror(e));
}

/* read() that retries on EINTR and fills as much of buf as the file has. */
static ssize_t read_full(int fd, unsigned char *buf, size_t cap) {
  size_t got = 0;
  while (got < cap) {
    ssize_t r = read(fd, buf + got, cap - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    got += (size_t)r;
  }
  return (ssize_t)got;
}

bool sh_jit_file_equals(const char *path, const void *data, size_t n) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  bool same = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size == n;
  unsigned char buf[CHUNK];
  const unsigned char *want = data;
  size_t at = 0;
  while (same) {
    ssize_t r = read_full(fd, buf, sizeof buf);
    if (r < 0 || (size_t)r > n - at) same = false;
    else if (r == 0) break;
    else {
      same = memcmp(buf, want + at, (size_t)r) == 0;
      at += (size_t)r;
    }
  }
  close(fd);
  return same && at == n;
}

bool sh_jit_file_sum(const char *path, uint64_t *size, char hex[33]) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return false;
  }
  sh_jit_hash h;
  sh_jit_hash_begin(&h);
  unsigned char buf[CHUNK];
  uint64_t total = 0;
  ssize_t r;
  while ((r = read_full(fd, buf, sizeof buf)) > 0) {
    sh_jit_hash_update(&h, buf, (size_t)r);
    total += (uint64_t)r;
  }
  close(fd);
  if (r < 0) return false;
  uint8_t tag[16];
  sh_jit_hash_final(&h, tag);
  sh_jit_hex(tag, 16, hex);
  *size = total;
  return true;
}

sheaf_status sh_jit_headers_put(sh_jit *jit, const sh_jit_request *req, const char *hhex,
                                char *inc_dir) {
  char inc[SH_JIT_PATH];
  if (!sh_jit_join(jit, inc, jit->vdir, "inc") || !sh_jit_join(jit, inc_dir, inc, hhex))
    return sheaf_ctx_last_status(jit->ctx);
  sheaf_status st = sh_jit_mkdirs(jit, inc_dir);
  for (size_t i = 0; st == SHEAF_OK && i < req->n_headers; i++) {
    const sh_jit_header *h = &req->headers[i];
    char path[SH_JIT_PATH];
    if (!sh_jit_join(jit, path, inc_dir, h->name)) return sheaf_ctx_last_status(jit->ctx);
    if (!sh_jit_file_equals(path, h->text, h->size))
      st = sh_jit_write_atomic(jit, path, h->text, h->size);
  }
  return st;
}

/* ------------------------------------------------------- verification */

#define BAD(...) (snprintf(why, why_cap, __VA_ARGS__), SH_JIT_ENTRY_BAD)

/* The metadata's lines after the key: informational ones, the `so SIZE SUM`
 * line, and `end` as the last line. */
static int meta_tail(const char *p, const char *end, uint64_t *so_size, char *so_sum,
                     char *why, size_t why_cap) {
  bool have_so = false;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl) return BAD("metadata is truncated (its last line has no newline)");
    size_t len = (size_t)(nl - p);
    if (len == 3 && !memcmp(p, "end", 3)) {
      if (nl + 1 != end) return BAD("metadata has lines after 'end'");
      if (!have_so) return BAD("metadata lacks the 'so SIZE CHECKSUM' line");
      return SH_JIT_ENTRY_OK;
    }
    if (len > 3 && !memcmp(p, "so ", 3)) {
      char line[96];
      if (len >= sizeof line) return BAD("metadata's 'so' line is malformed");
      memcpy(line, p, len);
      line[len] = '\0';
      unsigned long long size;
      char sum[40];
      int used = 0;
      if (sscanf(line, "so %llu %39s%n", &size, sum, &used) != 2 || (size_t)used != len ||
          strlen(sum) != 32 || strspn(sum, "0123456789abcdef") != 32)
        return BAD("metadata's 'so' line is malformed");
      *so_size = size;
      memcpy(so_sum, sum, 33);
      have_so = true;
    }
    p = nl + 1;
  }
  return BAD("metadata is truncated (no final 'end' line)");
}

int sh_jit_entry_check(sh_jit *jit, const char *key, const sh_buf *material, const char *source,
                       size_t source_size, bool spec, char *why, size_t why_cap) {
  char path[SH_JIT_PATH];
  if ((size_t)snprintf(path, sizeof path, "%s/%s.meta", jit->vdir, key) >= sizeof path)
    return BAD("path too long");
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? SH_JIT_ENTRY_ABSENT : BAD("cannot open %s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return BAD("metadata is not a regular file");
  }
  if ((uint64_t)st.st_size > META_MAX) {
    close(fd);
    return BAD("metadata is larger than %zu bytes", META_MAX);
  }
  size_t cap = (size_t)st.st_size + 1;
  char *meta = sh_malloc(jit->ctx, cap);
  if (!meta) {
    close(fd);
    return SH_JIT_ENTRY_ERR;
  }
  ssize_t got = read_full(fd, (unsigned char *)meta, cap - 1);
  close(fd);
  int v = SH_JIT_ENTRY_OK;
  uint64_t so_size = 0;
  char so_sum[33] = "";
  size_t head = strlen(SH_JIT_FORMAT);
  char key_line[64];
  int kl = snprintf(key_line, sizeof key_line, "key %s\n", key);
  const char *end = meta + (got > 0 ? got : 0);
  const char *p = meta;
  if (got < 0) v = BAD("cannot read the metadata: %s", strerror(errno));
  else if ((size_t)(end - p) < head + 1 || memcmp(p, SH_JIT_FORMAT "\n", head + 1) != 0)
    v = BAD("metadata does not start with '%s'", SH_JIT_FORMAT);
  else if ((p += head + 1, (size_t)(end - p) < material->len) ||
           memcmp(p, material->data, material->len) != 0)
    v = BAD("metadata's key material (flags, ISA, compiler, headers, source hash) differs from "
            "the request's");
  else if ((p += material->len, end - p < kl) || memcmp(p, key_line, (size_t)kl) != 0)
    v = BAD("metadata's key line differs");
  else v = meta_tail(p + kl, end, &so_size, so_sum, why, why_cap);
  sh_free(jit->ctx, meta, cap);
  if (v != SH_JIT_ENTRY_OK) return v;

  if ((size_t)snprintf(path, sizeof path, "%s/%s.%s", jit->vdir, key, spec ? "spec" : "c") >= sizeof path)
    return BAD("path too long");
  if (!sh_jit_file_equals(path, source, source_size))
    return BAD("the stored %s %s differs from the requested %s (or is missing)", spec ? "spec" : "source",
               path, spec ? "spec" : "source");

  if ((size_t)snprintf(path, sizeof path, "%s/%s.so", jit->vdir, key) >= sizeof path)
    return BAD("path too long");
  uint64_t size;
  char sum[33];
  if (!sh_jit_file_sum(path, &size, sum)) return BAD("%s is missing or unreadable", path);
  if (size != so_size)
    return BAD("%s has %llu bytes, the metadata says %llu (truncated?)", path,
               (unsigned long long)size, (unsigned long long)so_size);
  if (strcmp(sum, so_sum) != 0)
    return BAD("%s: checksum %s, the metadata says %s (corrupt)", path, sum, so_sum);
  return SH_JIT_ENTRY_OK;
}
