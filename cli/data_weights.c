/*
 * data_weights.c — `sheaf data stats W.safetensors`: one line per tensor
 * (name, dtype, shape, bytes, non-finite values) in file order, then totals
 * (with the non-finite values: NaN and infinities, which `sheaf run`
 * refuses unless --allow-nonfinite) and the __metadata__ entries. Names and metadata are printed with control
 * characters escaped (\n, \t, \xNN) so that every tensor stays on one line.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "io/finite.h"

#define NAME_COL_MAX 60

/* Writes s with control characters escaped; returns the columns used
 * (UTF-8 continuation bytes take none). */
static size_t put_escaped(FILE *out, const char *s) {
  size_t cols = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    unsigned c = *p;
    if (c == '\n') cols += (size_t)fprintf(out, "\\n");
    else if (c == '\t') cols += (size_t)fprintf(out, "\\t");
    else if (c == '\r') cols += (size_t)fprintf(out, "\\r");
    else if (c < 0x20 || c == 0x7F) cols += (size_t)fprintf(out, "\\x%02X", c);
    else {
      fputc((int)c, out);
      if ((c & 0xC0) != 0x80) cols++;
    }
  }
  return cols;
}

/* Columns put_escaped would use. */
static size_t escaped_width(const char *s) {
  size_t cols = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    unsigned c = *p;
    if (c == '\n' || c == '\t' || c == '\r') cols += 2;
    else if (c < 0x20 || c == 0x7F) cols += 4;
    else if ((c & 0xC0) != 0x80) cols++;
  }
  return cols;
}

static void shape_text(const sheaf_st_file *f, size_t i, char *buf, size_t cap) {
  int r = sheaf_st_rank(f, i);
  const int64_t *s = sheaf_st_shape(f, i);
  size_t at = (size_t)snprintf(buf, cap, "[");
  for (int d = 0; d < r && at < cap; d++)
    at += (size_t)snprintf(buf + at, cap - at, d ? ", %" PRId64 : "%" PRId64, s[d]);
  if (at < cap) snprintf(buf + at, cap - at, "]");
}

static void pad(FILE *out, size_t n) {
  while (n--) fputc(' ', out);
}

int cli_data_stats_weights(sheaf_ctx *ctx, const char *path, FILE *out) {
  sheaf_st_file *f = NULL;
  if (sheaf_st_open(ctx, path, &f) != SHEAF_OK) {
    cli_error("%s", sheaf_ctx_last_error(ctx));
    return CLI_FAIL;
  }
  size_t n = sheaf_st_count(f);
  size_t wname = 4, wshape = 5, wdtype = 5;
  char sb[256];
  for (size_t i = 0; i < n; i++) {
    size_t w = escaped_width(sheaf_st_name(f, i));
    if (w > wname) wname = w;
    shape_text(f, i, sb, sizeof sb);
    if (strlen(sb) > wshape) wshape = strlen(sb);
    size_t wd = strlen(sheaf_dtype_name(sheaf_st_dtype(f, i)));
    if (wd > wdtype) wdtype = wd;
  }
  if (wname > NAME_COL_MAX) wname = NAME_COL_MAX;

  fprintf(out, "%s\n", path);
  fprintf(out, "%-*s  %-*s  %-*s  %14s  %10s\n", (int)wname, "name", (int)wdtype, "dtype",
          (int)wshape, "shape", "bytes", "non-finite");
  uint64_t params = 0, bytes = 0, nonfinite = 0;
  size_t bad_tensors = 0, first_bad = 0, first_at = 0;
  size_t per_dtype[SHEAF_DTYPE_COUNT] = {0};
  uint64_t params_dtype[SHEAF_DTYPE_COUNT] = {0};
  for (size_t i = 0; i < n; i++) {
    size_t w = put_escaped(out, sheaf_st_name(f, i));
    pad(out, w < wname ? wname - w : 0);
    sheaf_dtype dt = sheaf_st_dtype(f, i);
    shape_text(f, i, sb, sizeof sb);
    size_t nb = sheaf_st_nbytes(f, i);
    uint64_t numel = nb / sheaf_dtype_size(dt);
    fprintf(out, "  %-*s  %-*s  %14zu", (int)wdtype, sheaf_dtype_name(dt), (int)wshape, sb, nb);
    if (sh_dtype_is_float(dt)) { /* NaN and infinities as stored */
      size_t at;
      uint64_t bad = sh_count_nonfinite(dt, sheaf_st_bytes(f, i), (size_t)numel, false, &at);
      fprintf(out, "  %10" PRIu64 "\n", bad);
      if (bad && !bad_tensors++) {
        first_bad = i;
        first_at = at;
      }
      nonfinite += bad;
    } else {
      fprintf(out, "  %10s\n", "-");
    }
    params += numel;
    bytes += nb;
    per_dtype[dt]++;
    params_dtype[dt] += numel;
  }
  fprintf(out, "total: %zu tensor%s, %" PRIu64 " parameters, %" PRIu64 " bytes (%.2f MiB)\n", n,
          n == 1 ? "" : "s", params, bytes, (double)bytes / (1024.0 * 1024.0));
  for (int d = 0; d < SHEAF_DTYPE_COUNT; d++)
    if (per_dtype[d])
      fprintf(out, "  %-7s %zu tensor%s, %" PRIu64 " parameter%s\n",
              sheaf_dtype_name((sheaf_dtype)d), per_dtype[d], per_dtype[d] == 1 ? "" : "s",
              params_dtype[d], params_dtype[d] == 1 ? "" : "s");
  if (!nonfinite) {
    fprintf(out, "non-finite values: none\n");
  } else {
    fprintf(out, "non-finite values: %" PRIu64 " (NaN or infinity) in %zu tensor%s, the first in '",
            nonfinite, bad_tensors, bad_tensors == 1 ? "" : "s");
    put_escaped(out, sheaf_st_name(f, first_bad));
    fprintf(out, "' at index %zu ('sheaf run' refuses them unless --allow-nonfinite)\n",
            first_at);
  }
  size_t nm = sheaf_st_metadata_count(f);
  if (nm) {
    fprintf(out, "metadata (%zu):\n", nm);
    for (size_t i = 0; i < nm; i++) {
      fputs("  ", out);
      put_escaped(out, sheaf_st_metadata_key(f, i));
      fputs(": ", out);
      put_escaped(out, sheaf_st_metadata_value(f, i));
      fputc('\n', out);
    }
  }
  sheaf_st_close(f);
  if (fflush(out) != 0 || ferror(out)) {
    cli_error("%s: cannot write the listing", path);
    return CLI_FAIL;
  }
  return CLI_OK;
}
