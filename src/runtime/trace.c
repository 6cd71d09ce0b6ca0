/*
 * trace.c — a graph's instruments: the counters (sheaf_graph_get_stats),
 * per-kernel batch counts (sheaf_graph_kernel_stats), both zeroed by
 * sheaf_graph_stats_reset, and the timeline of batches (collected when the
 * graph has a trace_path) written as Chrome-trace / Perfetto JSON
 * ("traceEvents", one complete "X" event per batch: name = kernel, args =
 * batch size, depth, phase) by sheaf_graph_write_trace and when the graph
 * is freed; and the check at creation that a trace path can be written.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/file.h"
#include "io/json.h"
#include "runtime/runtime.h"

#define SH_TRACE_MAX_EVENTS (1u << 22)

void sheaf_graph_get_stats(const sheaf_graph *g, sheaf_graph_stats *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (!g) return;
  *out = g->instr.stats;
  if (g->instr.build_t0) /* construction in progress */
    out->ns_build += sheaf_time_ns() - g->instr.build_t0 - g->instr.ns_kernels_build;
}

size_t sheaf_graph_kernel_stats(const sheaf_graph *g, size_t max, const char **names,
                                uint64_t *batches, uint64_t *nodes) {
  if (!g) return 0;
  size_t k = 0;
  for (uint32_t i = 0; i < g->sigs.n; i++) {
    const sh_sig *s = &g->sigs.at[i];
    if (!s->batches) continue;
    if (k < max) {
      if (names) names[k] = s->name;
      if (batches) batches[k] = s->batches;
      if (nodes) nodes[k] = s->nodes;
    }
    k++;
  }
  return k;
}

sheaf_status sheaf_graph_stats_reset(sheaf_graph *g) {
  if (!g) return SHEAF_ERR_INVALID_ARG;
  memset(&g->instr.stats, 0, sizeof g->instr.stats);
  if (g->instr.build_t0) { /* construction in progress: count from now */
    g->instr.build_t0 = sheaf_time_ns();
    g->instr.ns_kernels_build = 0;
  }
  for (uint32_t i = 0; i < g->sigs.n; i++) g->sigs.at[i].batches = g->sigs.at[i].nodes = 0;
  g->instr.n_ev = 0;
  return SHEAF_OK;
}

void sh_trace_record(sheaf_graph *g, uint32_t sig, uint32_t n, uint32_t depth, uint32_t phase,
                     uint64_t t0, uint64_t t1) {
  if (g->instr.n_ev == g->instr.cap_ev) {
    if (g->instr.cap_ev >= SH_TRACE_MAX_EVENTS) return; /* the timeline is full: drop */
    sheaf_status st = sh_grow(g->ctx, (void **)&g->instr.ev, &g->instr.cap_ev, g->instr.n_ev + 1,
                              sizeof *g->instr.ev);
    if (st) return; /* tracing never fails a run */
  }
  g->instr.ev[g->instr.n_ev++] = (sh_trace_ev){t0, t1 - t0, sig, n, depth, phase};
}

/* The timeline as JSON to path (through sh_out: a regular file is replaced
 * only when complete, a device or FIFO is written into); false on failure,
 * with the reason in msg. The context's last error is left alone (this
 * runs when a graph is freed). */
static bool trace_write(const sheaf_graph *g, const char *path, char *msg, size_t cap) {
  sh_out o;
  size_t np = strlen(path); /* sh_out's messages start "PATH: " */
  if (sh_out_open(NULL, path, 0, &o) != SHEAF_OK) {
    snprintf(msg, cap, "cannot write the trace to '%.240s': %.240s", path,
             strncmp(o.err, path, np) || strncmp(o.err + np, ": ", 2) ? o.err : o.err + np + 2);
    return false;
  }
  FILE *f = o.f;
  uint64_t origin = g->instr.n_ev ? g->instr.ev[0].t0 : 0;
  fprintf(f, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
  fprintf(
      f,
      "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"args\":{\"name\":\"sheaf graph (%s)\"}}",
      sheaf_policy_name(g->policy));
  sh_buf name; /* each kernel's name as a JSON string (io/json.h's escaping) */
  sh_buf_init(&name, g->ctx);
  for (uint32_t i = 0; i < g->instr.n_ev; i++) {
    const sh_trace_ev *e = &g->instr.ev[i];
    fprintf(f, ",\n{\"name\":");
    sh_buf_clear(&name);
    sh_json_put_string(&name, g->sigs.at[e->sig].name, strlen(g->sigs.at[e->sig].name));
    if (sh_buf_status(&name) != SHEAF_OK) break;
    fwrite(name.data, 1, name.len, f);
    fprintf(f,
            ",\"cat\":\"batch\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":%.3f,\"dur\":%.3f,"
            "\"args\":{\"batch\":%u,\"depth\":%u,\"phase\":%u}}",
            (double)(e->t0 - origin) / 1000.0, (double)e->dur / 1000.0, e->n, e->depth, e->phase);
  }
  fprintf(f, "\n]}\n");
  sheaf_status names = sh_buf_status(&name);
  sh_buf_free(&name);
  if (names != SHEAF_OK) {
    sh_out_abort(&o);
    snprintf(msg, cap, "cannot write the trace to '%.240s': out of memory", path);
    return false;
  }
  if (sh_out_commit(&o) != SHEAF_OK) {
    snprintf(msg, cap, "error writing the trace to '%.240s': %.240s", path,
             strncmp(o.err, path, np) || strncmp(o.err + np, ": ", 2) ? o.err : o.err + np + 2);
    return false;
  }
  return true;
}

sheaf_status sheaf_graph_write_trace(const sheaf_graph *g, const char *path) {
  if (!g) return SHEAF_ERR_INVALID_ARG;
  if (!path || !*path)
    return sh_fail(g->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_graph_write_trace: path is %s",
                   path ? "empty" : "NULL");
  if (!g->instr.trace_path)
    return sh_fail(g->ctx, SHEAF_ERR_INVALID_ARG,
                   "sheaf_graph_write_trace: the graph collects no timeline (create it with "
                   "sheaf_graph_opts.trace_path)");
  char msg[512];
  if (!trace_write(g, path, msg, sizeof msg))
    return sh_fail(g->ctx, SHEAF_ERR_IO, "sheaf_graph_write_trace: %s", msg);
  return SHEAF_OK;
}

sheaf_status sh_trace_path_check(sheaf_ctx *ctx, const char *fn, const char *path) {
  if (!*path) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: trace_path is empty", fn);
  size_t len = strlen(path);
  struct stat sb;
  if (stat(path, &sb) == 0) {
    if (S_ISDIR(sb.st_mode))
      return sh_fail(ctx, SHEAF_ERR_IO, "%s: cannot write the trace to '%s': %s", fn, path,
                     strerror(EISDIR));
    if (access(path, W_OK) != 0)
      return sh_fail(ctx, SHEAF_ERR_IO, "%s: cannot write the trace to '%s': %s", fn, path,
                     strerror(errno));
    return SHEAF_OK;
  }
  if (errno != ENOENT || path[len - 1] == '/')
    return sh_fail(ctx, SHEAF_ERR_IO, "%s: cannot write the trace to '%s': %s", fn, path,
                   strerror(errno != ENOENT ? errno : EISDIR));
  /* a new file: its directory must exist and take new files */
  const char *slash = strrchr(path, '/');
  char dir[4096];
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == path) snprintf(dir, sizeof dir, "/");
  else if ((size_t)(slash - path) < sizeof dir) snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  else return sh_fail(ctx, SHEAF_ERR_IO, "%s: cannot write the trace to '%s': %s", fn, path,
                      strerror(ENAMETOOLONG));
  int e = 0;
  if (stat(dir, &sb) != 0) e = errno;
  else if (!S_ISDIR(sb.st_mode)) e = ENOTDIR;
  else if (access(dir, W_OK | X_OK) != 0) e = errno;
  if (e)
    return sh_fail(ctx, SHEAF_ERR_IO, "%s: cannot write the trace to '%s': %s (directory '%s')",
                   fn, path, strerror(e), dir);
  return SHEAF_OK;
}

void sh_trace_write(sheaf_graph *g) {
  char msg[512];
  if (!trace_write(g, g->instr.trace_path, msg, sizeof msg)) /* free cannot fail: a warning */
    sh_log(g->ctx, SHEAF_LOG_WARN, "sheaf_graph_free: %s", msg);
}
