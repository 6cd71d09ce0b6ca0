/*
 * jit_cc.c — the system C compiler: found by stat over PATH (no shell),
 * identified by stat alone (path, realpath, size, mtime: what a cache hit
 * can afford), and run with posix_spawn, its output going to a log file.
 */
#include "jit_int.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static bool executable_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

static sheaf_status no_compiler(sh_jit *jit, const char *what) {
  const char *hint = strchr(jit->cc_want, ' ') ? " (it names one program; flags belong in the request)" : "";
  return sh_fail(jit->ctx, SHEAF_ERR_NOT_FOUND,
                 "no C compiler for the JIT: %s%s; set SHEAF_CC to a C compiler, or install one "
                 "(e.g. apt-get install -y gcc) so that cc is on PATH",
                 what, hint);
}

/* name searched over PATH's folders (an empty entry is the current one). */
static bool search_path(const char *name, char *found, size_t cap) {
  const char *path = getenv("PATH");
  if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
  for (const char *p = path;;) {
    const char *colon = strchr(p, ':');
    size_t len = colon ? (size_t)(colon - p) : strlen(p);
    int n = len ? snprintf(found, cap, "%.*s/%s", (int)len, p, name) : snprintf(found, cap, "./%s", name);
    if (n > 0 && (size_t)n < cap && executable_file(found)) return true;
    if (!colon) return false;
    p = colon + 1;
  }
}

sheaf_status sh_jit_cc_resolve(sh_jit *jit) {
  if (jit->cc_ok) return SHEAF_OK;
  char found[SH_JIT_PATH], what[SH_JIT_PATH + 128];
  const char *want = jit->cc_want;
  if (strchr(want, '/')) {
    struct stat st;
    if (stat(want, &st) != 0) {
      snprintf(what, sizeof what, "%s (from %s): %s", want, jit->cc_from, strerror(errno));
      return no_compiler(jit, what);
    }
    if (!S_ISREG(st.st_mode) || access(want, X_OK) != 0) {
      snprintf(what, sizeof what, "%s (from %s) is not an executable file", want, jit->cc_from);
      return no_compiler(jit, what);
    }
    snprintf(found, sizeof found, "%s", want);
  } else if (!search_path(want, found, sizeof found)) {
    const char *path = getenv("PATH");
    snprintf(what, sizeof what, "'%s' (%s) is not on PATH (%s)", want,
             jit->cc_from, path && *path ? path : "unset");
    return no_compiler(jit, what);
  }
  /* the path that runs: absolute, so a later chdir does not matter; a
   * multi-call program (ccache, clang) acts by the name it is run as */
  if (found[0] != '/') {
    char cwd[SH_JIT_PATH], rel[SH_JIT_PATH];
    memcpy(rel, found, sizeof rel);
    if (!getcwd(cwd, sizeof cwd) ||
        (size_t)snprintf(found, sizeof found, "%s/%s", cwd, rel) >= sizeof found)
      return sh_fail(jit->ctx, SHEAF_ERR_IO, "JIT: cannot make the compiler path %s absolute", rel);
  }
  char real[SH_JIT_PATH];
  struct stat st;
  if (!realpath(found, real) || stat(real, &st) != 0) {
    snprintf(what, sizeof what, "%s (from %s): %s", found, jit->cc_from, strerror(errno));
    return no_compiler(jit, what);
  }
  memcpy(jit->cc, found, sizeof jit->cc);
  snprintf(jit->cc_id, sizeof jit->cc_id, "%s => %s size %lld mtime %lld.%09ld", found, real,
           (long long)st.st_size, (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec);
  jit->cc_ok = true;
  return SHEAF_OK;
}

/* Runs argv to completion with its output in log_path. 0, or an errno
 * value with *waiting saying whether the wait (not the start) failed. */
static int spawn_wait(char *const *argv, const char *log_path, int *wait_status, bool *waiting) {
  *waiting = false;
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  int rc = posix_spawn_file_actions_init(&fa);
  if (rc) return rc;
  if ((rc = posix_spawnattr_init(&attr))) {
    posix_spawn_file_actions_destroy(&fa);
    return rc;
  }
  /* the compiler starts with no signal blocked and SIGPIPE/SIGCHLD at their
   * defaults, whatever the host program does with them */
  sigset_t none, dfl;
  sigemptyset(&none);
  sigemptyset(&dfl);
  sigaddset(&dfl, SIGPIPE);
  sigaddset(&dfl, SIGCHLD);
  rc = posix_spawnattr_setsigmask(&attr, &none);
  if (!rc) rc = posix_spawnattr_setsigdefault(&attr, &dfl);
  if (!rc) rc = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  if (!rc) rc = posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  if (!rc)
    rc = posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log_path,
                                          O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (!rc) rc = posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  if (!rc) rc = posix_spawn(&pid, argv[0], &fa, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc) return rc;
  pid_t r;
  while ((r = waitpid(pid, wait_status, 0)) < 0 && errno == EINTR) {}
  if (r < 0) {
    *waiting = true;
    return errno;
  }
  return 0;
}

sheaf_status sh_jit_cc_run(sh_jit *jit, char *const *argv, const char *log_path, int *wait_status) {
  bool waiting;
  int e = spawn_wait(argv, log_path, wait_status, &waiting);
  if (!e) return SHEAF_OK;
  if (waiting)
    return sh_fail(jit->ctx, SHEAF_ERR_IO, "JIT: waiting for the C compiler %s: %s%s", argv[0],
                   strerror(e), e == ECHILD ? " (does the program ignore SIGCHLD?)" : "");
  return sh_fail(jit->ctx, e == ENOMEM ? SHEAF_ERR_NOMEM : SHEAF_ERR_IO,
                 "JIT: cannot run the C compiler %s (output to %s): %s", argv[0], log_path,
                 strerror(e));
}

void sh_jit_cc_version(sh_jit *jit) {
  if (jit->version_ok) return;
  jit->version_ok = true;
  snprintf(jit->cc_version, sizeof jit->cc_version, "unknown (--version failed)");
  char base[SH_JIT_PATH], log[SH_JIT_PATH];
  if ((size_t)snprintf(base, sizeof base, "%s/build/version", jit->vdir) >= sizeof base) return;
  sh_jit_tmp_name(log, sizeof log, base, ".log");
  char *argv[] = {jit->cc, (char *)"--version", NULL};
  int ws = 0;
  bool waiting;
  if (!spawn_wait(argv, log, &ws, &waiting) && WIFEXITED(ws) && WEXITSTATUS(ws) == 0) {
    FILE *f = fopen(log, "r");
    char line[sizeof jit->cc_version];
    if (f && fgets(line, sizeof line, f)) {
      line[strcspn(line, "\r\n")] = '\0';
      if (line[0]) memcpy(jit->cc_version, line, sizeof line);
    }
    if (f) fclose(f);
  }
  unlink(log);
}
