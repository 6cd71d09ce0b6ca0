/*
 * run_lang_out.c — the output formats of `sheaf run MODEL.sf`: text, JSON
 * lines and .npy (run_lang_out.h).
 */
#include "run_lang_out.h"

#include <math.h>
#include <string.h>

static bool scalar(sh_value v) { return v.kind == SH_V_INT || v.kind == SH_V_BOOL || v.kind == SH_V_F32; }

static void put_scalar(FILE *f, sh_value v) {
  if (v.kind == SH_V_F32) fprintf(f, " %.7g", (double)v.f);
  else fprintf(f, " %d", (int)v.i);
}

int lang_out_text(FILE *f, sheaf_graph *g, const char *prefix, sh_value v) {
  switch (v.kind) {
  case SH_V_INT:
  case SH_V_BOOL:
  case SH_V_F32:
    fputs(prefix, f);
    put_scalar(f, v);
    fputc('\n', f);
    return 0;
  case SH_V_TENSOR: {
    sheaf_value_view vv;
    if (sheaf_value(g, v.t, &vv) != SHEAF_OK) return -1;
    int64_t rows = vv.rank == 2 ? vv.shape[0] : 1, cols = vv.shape[vv.rank - 1];
    for (int64_t r = 0; r < rows; r++) {
      fputs(prefix, f);
      for (int64_t j = 0; j < cols; j++) fprintf(f, " %.7g", (double)vv.data[r * cols + j]);
      fputc('\n', f);
    }
    return 0;
  }
  case SH_V_LIST:
  case SH_V_TUPLE:
  case SH_V_ADT: {
    bool all_scalar = v.agg->n > 0;
    for (int32_t i = 0; i < v.agg->n; i++) all_scalar &= scalar(v.agg->items[i]);
    if (all_scalar) {
      fputs(prefix, f);
      for (int32_t i = 0; i < v.agg->n; i++) put_scalar(f, v.agg->items[i]);
      fputc('\n', f);
      return 0;
    }
    for (int32_t i = 0; i < v.agg->n; i++) {
      char sub[64];
      if (v.kind == SH_V_LIST) snprintf(sub, sizeof sub, "%s %d", prefix, (int)i);
      if (lang_out_text(f, g, v.kind == SH_V_LIST ? sub : prefix, v.agg->items[i]) != 0) return -1;
    }
    return 0;
  }
  default: return 0;
  }
}

/* ------------------------------------------------------------- JSON */

static void json_str(FILE *f, const char *s, size_t n) {
  fputc('"', f);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

static void json_num(FILE *f, float x) {
  if (isfinite(x)) fprintf(f, "%.7g", (double)x);
  else fputs("null", f);
}

static int json_value(FILE *f, sheaf_graph *g, const sh_module *m, sh_value v, const sh_texpr *tx) {
  switch (v.kind) {
  case SH_V_INT: fprintf(f, "%d", (int)v.i); return 0;
  case SH_V_BOOL: fputs(v.i ? "true" : "false", f); return 0;
  case SH_V_F32: json_num(f, v.f); return 0;
  case SH_V_TENSOR: {
    sheaf_value_view vv;
    if (sheaf_value(g, v.t, &vv) != SHEAF_OK) return -1;
    int64_t cols = vv.shape[vv.rank - 1];
    if (vv.rank == 1) {
      fputc('[', f);
      for (int64_t j = 0; j < cols; j++) fputs(j ? ", " : "", f), json_num(f, vv.data[j]);
      fputc(']', f);
      return 0;
    }
    fputc('[', f);
    for (int64_t r = 0; r < vv.shape[0]; r++) {
      fputs(r ? ", [" : "[", f);
      for (int64_t j = 0; j < cols; j++) fputs(j ? ", " : "", f), json_num(f, vv.data[r * cols + j]);
      fputc(']', f);
    }
    fputc(']', f);
    return 0;
  }
  case SH_V_TUPLE: {
    bool named = tx && tx->kind == SH_TX_TUPLE && tx->elem_names && tx->n == v.agg->n;
    fputc(named ? '{' : '[', f);
    for (int32_t i = 0; i < v.agg->n; i++) {
      fputs(i ? ", " : "", f);
      if (named) {
        char key[32];
        const char *k = tx->elem_names[i] ? sh_sym_name(&m->syms, tx->elem_names[i]) : key;
        if (!tx->elem_names[i]) snprintf(key, sizeof key, "%d", (int)i);
        json_str(f, k, strlen(k));
        fputs(": ", f);
      }
      if (json_value(f, g, m, v.agg->items[i], named || (tx && tx->kind == SH_TX_TUPLE && tx->n == v.agg->n)
                                                          ? tx->elems[i] : NULL))
        return -1;
    }
    fputc(named ? '}' : ']', f);
    return 0;
  }
  case SH_V_LIST: {
    const sh_texpr *el = tx && tx->kind == SH_TX_LIST ? tx->elems[0] : NULL;
    fputc('[', f);
    for (int32_t i = 0; i < v.agg->n; i++) {
      fputs(i ? ", " : "", f);
      if (json_value(f, g, m, v.agg->items[i], el)) return -1;
    }
    fputc(']', f);
    return 0;
  }
  case SH_V_ADT: {
    fprintf(f, "{\"ctor\": %d, \"fields\": [", (int)v.agg->tag);
    for (int32_t i = 0; i < v.agg->n; i++) {
      fputs(i ? ", " : "", f);
      if (json_value(f, g, m, v.agg->items[i], NULL)) return -1;
    }
    fputs("]}", f);
    return 0;
  }
  default: fputs("null", f); return 0;
  }
}

int lang_out_json(FILE *f, sheaf_graph *g, const sh_module *m, int64_t instance, sh_value v,
                  const char *const *tokens, const size_t *token_len, int32_t n_tokens) {
  fprintf(f, "{\"instance\": %lld", (long long)instance);
  if (tokens) {
    fputs(", \"tokens\": [", f);
    for (int32_t i = 0; i < n_tokens; i++) fputs(i ? ", " : "", f), json_str(f, tokens[i], token_len[i]);
    fputc(']', f);
  }
  fputs(", \"output\": ", f);
  if (json_value(f, g, m, v, m->main ? m->main->ret_tx : NULL)) return -1;
  fputs("}\n", f);
  return 0;
}

/* ------------------------------------------------------------- npy */

int lang_out_npy_rows(FILE *f, sheaf_graph *g, sh_value v, int64_t *rows, int64_t *cols, char *why,
                      size_t cap) {
  if (v.kind == SH_V_LIST) {
    for (int32_t i = 0; i < v.agg->n; i++)
      if (lang_out_npy_rows(f, g, v.agg->items[i], rows, cols, why, cap)) return -1;
    return 0;
  }
  if (v.kind != SH_V_TENSOR) {
    snprintf(why, cap, "--format npy writes f32 rows: main must return a tensor or a list of them, "
                       "not a tuple or an i32 (use --format jsonl)");
    return -1;
  }
  sheaf_value_view vv;
  if (sheaf_value(g, v.t, &vv) != SHEAF_OK) {
    snprintf(why, cap, "reading an output");
    return -1;
  }
  int64_t c = vv.shape[vv.rank - 1], r = vv.rank == 2 ? vv.shape[0] : 1;
  if (*cols > 0 && c != *cols) {
    snprintf(why, cap, "--format npy writes one matrix: rows of %lld and %lld columns differ (use --format jsonl)",
             (long long)*cols, (long long)c);
    return -1;
  }
  *cols = c;
  *rows += r;
  if (fwrite(vv.data, sizeof(float), (size_t)(r * c), f) != (size_t)(r * c)) {
    snprintf(why, cap, "out of memory");
    return -1;
  }
  return 0;
}

int lang_npy_header(FILE *f, const char *dtype, int rank, const int64_t *shape) {
  char dict[LANG_NPY_HEADER_BYTES];
  int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", dtype);
  for (int i = 0; i < rank; i++)
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%lld%s", (long long)shape[i], rank == 1 ? "," : i + 1 < rank ? ", " : "");
  n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
  int hlen = LANG_NPY_HEADER_BYTES - 10; /* magic 6, version 2, length 2 */
  if (n + 1 > hlen) return -1;
  memset(dict + n, ' ', (size_t)(hlen - n - 1));
  dict[hlen - 1] = '\n';
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff), (unsigned char)(hlen >> 8)};
  return fwrite(pre, 1, 10, f) == 10 && fwrite(dict, 1, (size_t)hlen, f) == (size_t)hlen ? 0 : -1;
}
