/*
 * trace.c — a graph's instruments: the counters (sheaf_graph_get_stats),
 * per-kernel batch counts (sheaf_graph_kernel_stats), and the timeline of
 * batches written as Chrome-trace / Perfetto JSON ("traceEvents", one
 * complete "X" event per batch: name = kernel, args = batch size, depth,
 * phase) when the graph is freed.
 */
#include <stdio.h>
#include <string.h>

#include "runtime/runtime.h"

#define SH_TRACE_MAX_EVENTS (1u << 22)

void sheaf_graph_get_stats(const sheaf_graph *g, sheaf_graph_stats *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (!g) return;
  *out = g->stats;
  if (g->build_t0) /* construction in progress */
    out->ns_build += sheaf_time_ns() - g->build_t0 - g->ns_kernels_build;
}

size_t sheaf_graph_kernel_stats(const sheaf_graph *g, size_t max, const char **names,
                                uint64_t *batches, uint64_t *nodes) {
  if (!g) return 0;
  size_t k = 0;
  for (uint32_t i = 0; i < g->n_sigs; i++) {
    const sh_sig *s = &g->sigs[i];
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

void sh_trace_record(sheaf_graph *g, uint32_t sig, uint32_t n, uint32_t depth, uint32_t phase,
                     uint64_t t0, uint64_t t1) {
  if (g->n_ev == g->cap_ev) {
    if (g->cap_ev >= SH_TRACE_MAX_EVENTS) return; /* the timeline is full: drop */
    sheaf_status st = sh_grow(g->ctx, (void **)&g->ev, &g->cap_ev, g->n_ev + 1, sizeof *g->ev);
    if (st) return; /* tracing never fails a run */
  }
  g->ev[g->n_ev++] = (sh_trace_ev){t0, t1 - t0, sig, n, depth, phase};
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

void sh_trace_write(sheaf_graph *g) {
  FILE *f = fopen(g->trace_path, "w");
  if (!f) {
    sh_log(g->ctx, SHEAF_LOG_WARN, "%s: cannot write the trace", g->trace_path);
    return;
  }
  uint64_t origin = g->n_ev ? g->ev[0].t0 : 0;
  fprintf(f, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
  fprintf(
      f,
      "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"args\":{\"name\":\"sheaf graph (%s)\"}}",
      sheaf_policy_name(g->policy));
  for (uint32_t i = 0; i < g->n_ev; i++) {
    const sh_trace_ev *e = &g->ev[i];
    fprintf(f, ",\n{\"name\":");
    json_str(f, g->sigs[e->sig].name);
    fprintf(f,
            ",\"cat\":\"batch\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":%.3f,\"dur\":%.3f,"
            "\"args\":{\"batch\":%u,\"depth\":%u,\"phase\":%u}}",
            (double)(e->t0 - origin) / 1000.0, (double)e->dur / 1000.0, e->n, e->depth, e->phase);
  }
  fprintf(f, "\n]}\n");
  if (fclose(f) != 0) sh_log(g->ctx, SHEAF_LOG_WARN, "%s: error writing the trace", g->trace_path);
}
