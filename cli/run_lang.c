/*
 * run_lang.c — `sheaf run MODEL.sf [--weights W.safetensors | --seed N]
 * --data FILE [--batch N] [--threads T] [--policy P] [--out FILE]
 * [--size NAME=VALUE]...`: compiles the model, binds its parameters, reads
 * the data according to main's argument type (a tree ADT: binarized or
 * dependency trees from CoNLL-U / PTB; list[i32]: sentences), runs main on
 * each instance, `--batch` instances per flush, and prints every output
 * tensor's rows as "INSTANCE v0 v1 ...".
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "cli.h"
#include "data.h"
#include "lang/interp.h"
#include "run_lang.h"

static const char usage[] =
    "usage: sheaf run MODEL.sf --data FILE [--weights W.safetensors | --seed N]\n"
    "                 [--batch N] [--threads T] [--policy P] [--out FILE] [--size NAME=VALUE]...\n";

static int write_value(FILE *f, sheaf_graph *g, int32_t inst, sh_value v) {
  sheaf_expr ts[64];
  size_t n = sh_value_tensors(v, ts, 64);
  if (n > 64) n = 64;
  if (v.kind == SH_V_INT || v.kind == SH_V_BOOL) fprintf(f, "%d %d\n", (int)inst, (int)v.i);
  for (size_t k = 0; k < n; k++) {
    sheaf_value_view vv;
    if (sheaf_value(g, ts[k], &vv) != SHEAF_OK) return -1;
    int64_t rows = vv.rank == 2 ? vv.shape[0] : 1, cols = vv.shape[vv.rank - 1];
    for (int64_t r = 0; r < rows; r++) {
      fprintf(f, "%d", (int)inst);
      for (int64_t j = 0; j < cols; j++) fprintf(f, " %.7g", (double)vv.data[r * cols + j]);
      fputc('\n', f);
    }
  }
  return 0;
}

int cli_run_lang(int argc, char **argv) {
  const char *file = NULL, *data = NULL, *out_path = "-", *policy = NULL;
  sh_lang_bind_opts bo = {0};
  long batch = 64, threads = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define TAKE(name) (!strcmp(a, name) && v && (i++, 1))
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(usage, stdout);
      return CLI_OK;
    } else if (TAKE("--weights")) bo.weights = v;
    else if (TAKE("--seed")) bo.seed = strtoull(v, NULL, 10);
    else if (TAKE("--data")) data = v;
    else if (TAKE("--out")) out_path = v;
    else if (TAKE("--policy")) policy = v;
    else if (TAKE("--batch")) batch = strtol(v, NULL, 10);
    else if (TAKE("--threads")) threads = strtol(v, NULL, 10);
    else if (TAKE("--size")) {
      const char *eq = strchr(v, '=');
      if (!eq || bo.n_overrides == SH_BIND_MAX_OVERRIDES) {
        cli_error("--size %s: expected NAME=VALUE", v);
        return CLI_USAGE;
      }
      static char names[SH_BIND_MAX_OVERRIDES][64];
      snprintf(names[bo.n_overrides], sizeof names[0], "%.*s", (int)(eq - v), v);
      bo.override_name[bo.n_overrides] = names[bo.n_overrides];
      bo.override_value[bo.n_overrides++] = strtoll(eq + 1, NULL, 10);
    } else if (a[0] != '-' && !file) file = a;
    else {
      cli_error("run: unknown or incomplete option '%s'\n%s", a, usage);
      return CLI_USAGE;
    }
#undef TAKE
  }
  if (!file || !data || batch < 1) {
    cli_error("run: need MODEL.sf and --data FILE (batch >= 1)\n%s", usage);
    return CLI_USAGE;
  }
  sheaf_ctx *ctx = cli_ctx((int)threads);
  if (!ctx) return CLI_FAIL;
  int rc = CLI_FAIL;
  char *src = NULL;
  size_t len = 0;
  sh_module m;
  bool have_m = false, have_d = false;
  ex_data d;
  sheaf_model *model = NULL;
  sh_lang_bind bind = {0};
  sh_interp *ip = NULL;
  sheaf_graph *g = NULL;
  FILE *out = NULL;
  sheaf_graph_opts go = {.policy = SHEAF_POLICY_SHEAF, .threads = (int)threads};
  if (policy && sheaf_policy_parse(ctx, policy, &go.policy) != SHEAF_OK) goto fail;
  if (sh_file_read(ctx, file, &src, &len) != SHEAF_OK) goto fail;
  have_m = true;
  if (sh_lang_compile(&m, ctx, file, src, len) != SHEAF_OK) {
    sh_buf b;
    sh_buf_init(&b, ctx);
    sh_diags_render(&m.diags, &b);
    if (b.data) fputs((const char *)b.data, stderr);
    sh_buf_free(&b);
    goto fail;
  }
  /* what main takes decides how the data is read */
  if (sheaf_model_create(ctx, &model) != SHEAF_OK) goto fail;
  {
    sh_lang_bind pre = {0};
    sh_interp *probe = NULL;
    if (sh_interp_create(&m, &pre, &probe) != SHEAF_OK) goto fail;
    sh_input_kind k = sh_interp_input_kind(probe);
    sh_interp_free(probe);
    if (k == SH_INPUT_UNSUPPORTED) {
      sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "main's argument must be a tree type (Leaf(i32) | "
                                           "Node(T, T), or Dep(i32, list[T])) or list[i32]");
      goto fail;
    }
    ex_data_kind dk = k == SH_INPUT_TOKENS ? EX_DATA_SENTS
                      : k == SH_INPUT_DEP_TREE ? EX_DATA_CHILDSUM : EX_DATA_BINARY;
    if (ex_data_load(ctx, data, dk, &d) != SHEAF_OK) goto fail;
    have_d = true;
  }
  bo.vocab = d.vocab;
  if (sh_lang_bind_model(&m, model, &bo, &bind) != SHEAF_OK) goto fail;
  if (sh_interp_create(&m, &bind, &ip) != SHEAF_OK) goto fail;
  if (sheaf_graph_create(model, &go, &g) != SHEAF_OK) goto fail;
  out = strcmp(out_path, "-") ? fopen(out_path, "w") : stdout;
  if (!out) {
    cli_error("%s: %s", out_path, strerror(errno));
    goto fail_quiet;
  }
  int32_t n = ex_data_count(&d);
  sh_value *res = calloc((size_t)batch, sizeof *res);
  int32_t *words = NULL;
  if (!res) goto fail;
  bool ok = true;
  for (int32_t first = 0; first < n && ok; first += (int32_t)batch) {
    int32_t last = first + (int32_t)batch < n ? first + (int32_t)batch : n;
    for (int32_t i = first; i < last && ok; i++) {
      sh_value in;
      sheaf_status st;
      if (d.kind == EX_DATA_SENTS) {
        int32_t len_i = d.sent_off[i + 1] - d.sent_off[i];
        free(words);
        words = malloc(((size_t)len_i + 1) * sizeof *words);
        if (!words) { ok = false; break; }
        for (int32_t j = 0; j < len_i; j++) words[j] = ex_data_row(&d, d.sent_words[d.sent_off[i] + j]);
        st = sh_interp_ints(ip, words, len_i, &in);
      } else {
        st = sh_interp_tree(ip, &d.tb, d.tb.tree_root[i], d.vocab, d.unk, &in);
      }
      if (st == SHEAF_OK) st = sh_interp_main(ip, g, in, &res[i - first]);
      ok = st == SHEAF_OK;
    }
    if (ok) ok = sheaf_graph_flush(g) == SHEAF_OK;
    for (int32_t i = first; i < last && ok; i++) ok = write_value(out, g, i, res[i - first]) == 0;
    if (ok) ok = sheaf_graph_reset(g) == SHEAF_OK;
    sh_interp_reset(ip);
  }
  free(words);
  free(res);
  if (!ok) goto fail;
  if (fflush(out) != 0) {
    cli_error("%s: write failed", out_path);
    goto fail_quiet;
  }
  rc = CLI_OK;
  goto done;
fail:
  cli_error("%s", sheaf_ctx_last_error(ctx));
fail_quiet:
done:
  if (out && out != stdout) fclose(out);
  sheaf_graph_free(g);
  sh_interp_free(ip);
  sh_lang_bind_free(ctx, &bind);
  sheaf_model_free(model);
  if (have_d) ex_data_free(&d);
  if (have_m) sh_module_free(&m);
  if (src) sh_free(ctx, src, len + 1);
  sheaf_ctx_free(ctx);
  return rc;
}
