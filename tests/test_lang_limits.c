/*
 * test_lang_limits.c — a model's numbers and sizes at their limits, run
 * through `sheaf run MODEL.sf` and the C API: i32 arithmetic that would
 * wrap is an error at its FILE:LINE:COL; --size may not change a size the
 * source fixes; a parameter's size that is not positive or exceeds the
 * memory budget names the declaration; a builder that fails at run time
 * names the expression; `phase` outside 0..1023 is a check error; unknown
 * sizes with a weights file name the tensors that would have fixed them.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static char out[1 << 16];

/* Writes `src` to NAME and runs `sheaf run NAME --data <3 tokens> ARGS`
 * with env prefix ENV (may be ""). */
static int run_src(const char *name, const char *src, const char *env, const char *args) {
  const char *model = th_write_tmp(name, src, strlen(src));
  const char *data = th_write_tmp("limits_toks.txt", "1 2 3\n", 6);
  const char *o = th_tmp_path("limits_out.txt");
  if (!model || !data || !o) return -1;
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "%s %s run %s --data %s --out %s %s", env, th_sheaf_bin(), model, data,
           o, args);
  return th_run(cmd, out, sizeof out);
}

TEST(lang_limits_i32_overflow_is_an_error) {
  REQUIRE(th_sheaf_bin());
  static const struct {
    const char *src, *want;
  } cases[] = {
      {"fn main(ws: list[i32]) -> i32 { 2147483647 + len(ws) }\n",
       "ov.sf:1:33: error: i32 overflow: 2147483647 + 3 = 2147483650"},
      {"fn main(ws: list[i32]) -> i32 { 0 - 2147483647 - len(ws) }\n",
       "ov.sf:1:33: error: i32 overflow: -2147483647 - 3 = -2147483650"},
      {"fn main(ws: list[i32]) -> i32 { 1000000 * len(ws) * 1000 }\n",
       "ov.sf:1:33: error: i32 overflow: 3000000 * 1000 = 3000000000"},
      {"fn main(ws: list[i32]) -> i32 { -(len(ws) - 4 - 2147483647) }\n",
       "ov.sf:1:33: error: i32 overflow: -(-2147483648)"},
      {"fn main(ws: list[i32]) -> i32 { (len(ws) - 4 - 2147483647) / (0 - 1) }\n",
       "ov.sf:1:34: error: i32 overflow: -2147483648 / -1 = 2147483648"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    CHECK_EQ_INT(run_src("ov.sf", cases[i].src, "", ""), 1);
    CHECK_CONTAINS(out, cases[i].want);
  }
  /* in range: no error, and the same arithmetic as C */
  CHECK_EQ_INT(run_src("ok.sf", "fn main(ws: list[i32]) -> i32 { 2147483644 + len(ws) }\n", "", ""), 0);
}

TEST(lang_limits_size_override_of_a_fixed_size) {
  REQUIRE(th_sheaf_bin());
  const char *src = "size H = 4\nparam W: f32[H, H]\nfn main(ws: list[i32]) -> f32[H] { zeros(H) + zeros(4) }\n";
  CHECK_EQ_INT(run_src("fixed.sf", src, "", "--size H=8"), 1);
  CHECK_CONTAINS(out, "--size H=8: ");
  CHECK_CONTAINS(out, "fixed.sf:1:6 fixes H = 4");
  /* the same value is no change */
  CHECK_EQ_INT(run_src("fixed.sf", src, "", "--size H=4"), 0);
}

TEST(lang_limits_parameter_sizes) {
  REQUIRE(th_sheaf_bin());
  const char *neg = "size N\nparam W: f32[N - 8, N]\nfn main(ws: list[i32]) -> f32[N] { zeros(N) }\n";
  CHECK_EQ_INT(run_src("neg.sf", neg, "", "--size N=4"), 1);
  CHECK_CONTAINS(out, "neg.sf:2:7: parameter 'W': dimension 1, N - 8 is -4, not a positive size (N = 4)");
  const char *big = "size N\nsize M\nparam W: f32[N, M]\nfn main(ws: list[i32]) -> f32[N] { zeros(N) }\n";
  CHECK_EQ_INT(run_src("big.sf", big, "", "--size N=1000000 --size M=3000000"), 1);
  CHECK_CONTAINS(out, "big.sf:3:7: parameter 'W' of shape [1000000, 3000000]: needs 10.9 TB, more than "
                      "the memory budget of");
  /* the budget is the user's to set */
  CHECK_EQ_INT(run_src("big.sf", big, "SHEAF_MEMORY_LIMIT=1M", "--size N=1000 --size M=300"), 1);
  CHECK_CONTAINS(out, "parameter 'W' of shape [1000, 300]: needs 1.1 MB, more than the memory budget "
                      "of 1.0 MB (set SHEAF_MEMORY_LIMIT");
  CHECK_EQ_INT(run_src("big.sf", big, "SHEAF_MEMORY_LIMIT=64M", "--size N=1000 --size M=300"), 0);
  CHECK_EQ_INT(run_src("big.sf", big, "SHEAF_MEMORY_LIMIT=lots", "--size N=1000 --size M=300"), 1);
  CHECK_CONTAINS(out, "SHEAF_MEMORY_LIMIT: expected a positive size");
}

TEST(lang_limits_for_range_over_the_budget) {
  REQUIRE(th_sheaf_bin());
  const char *src = "fn main(ws: list[i32]) -> list[i32] { for i in 0..2147483647 { i } }\n";
  CHECK_EQ_INT(run_src("fr.sf", src, "SHEAF_MEMORY_LIMIT=1G", ""), 1);
  CHECK_CONTAINS(out, "fr.sf:1:39: error: for over 0..2147483647 (2147483647 iterations): needs 64.0 GB, "
                      "more than the memory budget of 1.0 GB");
}

TEST(lang_limits_builder_errors_name_the_expression) {
  REQUIRE(th_sheaf_bin());
  const char *src = "fn main(ws: list[i32]) -> f32[1] {\n"
                    "  let r = stack(for i in 0..70000 { zeros(1) });\n"
                    "  r[0]\n"
                    "}\n";
  CHECK_EQ_INT(run_src("st.sf", src, "", ""), 1);
  CHECK_CONTAINS(out, "st.sf:2:11: error: sheaf_stack: 70000 inputs");
}

TEST(lang_limits_phase_range_is_checked) {
  REQUIRE(th_sheaf_bin());
  const char *src = "fn main(ws: list[i32]) -> f32[1] { phase 2147483647 { zeros(1) } }\n";
  const char *model = th_write_tmp("ph.sf", src, strlen(src));
  REQUIRE(model);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s check %s", th_sheaf_bin(), model);
  CHECK_EQ_INT(th_run(cmd, out, sizeof out), 1);
  CHECK_CONTAINS(out, "ph.sf:1:36: error: phase 2147483647: phases are numbered 0..1023");
  const char *ok = "fn main(ws: list[i32]) -> f32[1] { phase 1023 { zeros(1) } }\n";
  CHECK_EQ_INT(run_src("ph_ok.sf", ok, "", ""), 0);
}

TEST(lang_limits_unknown_sizes_name_the_missing_tensors) {
  REQUIRE(th_sheaf_bin());
  /* weights for W only: C is fixed by no tensor of the file */
  const char *src = "param W: f32[H, H]\nparam V: f32[H, C]\nfn main(ws: list[i32]) -> f32[C] { zeros(C) }\n";
  const char *w = th_tmp_path("limits_w.safetensors");
  REQUIRE(w);
  sheaf_ctx *ctx = th_ctx();
  sheaf_model *m = NULL;
  REQUIRE_OK(ctx, sheaf_model_create(ctx, &m));
  sheaf_param p;
  int64_t shape[2] = {4, 4};
  CHECK_OK(ctx, sheaf_model_param(m, "W", 2, shape, SHEAF_INIT_GLOROT, &p));
  CHECK_OK(ctx, sheaf_model_save(m, w));
  sheaf_model_free(m);
  char args[600];
  snprintf(args, sizeof args, "--weights %s", w);
  CHECK_EQ_INT(run_src("unk.sf", src, "", args), 1);
  CHECK_CONTAINS(out, "unknown sizes: C, which the weights file would fix: ");
  CHECK_CONTAINS(out, "unk.sf:2:7: parameter 'V' f32[H, C] is not in ");
}

TEST(lang_limits_api_memory_limit) {
  sheaf_ctx_options o = {.threads = 1, .memory_limit = (uint64_t)1 << 20};
  sheaf_ctx *ctx = NULL;
  char err[256];
  REQUIRE_OK(NULL, sheaf_ctx_create(&o, &ctx, err, sizeof err));
  CHECK_EQ_INT(sheaf_ctx_memory_limit(ctx), 1 << 20);
  sheaf_model *m = NULL;
  if (CHECK_OK(ctx, sheaf_model_create(ctx, &m))) {
    sheaf_param p;
    /* one parameter over the budget: refused before allocating, with both sizes */
    int64_t big[2] = {512, 1024};
    CHECK_STATUS(ctx, sheaf_model_param(m, "big", 2, big, SHEAF_INIT_ZERO, &p), SHEAF_ERR_NOMEM);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx),
                   "sheaf_model_param: 'big' of shape [512, 1024]: needs 2.0 MB, more than the "
                   "memory budget of 1.0 MB");
    /* each fits, together they do not: the fourth 300 KB one is over */
    int64_t part[2] = {300, 256};
    const char *names[] = {"a", "b", "c", "d"};
    int ok = 0;
    for (int i = 0; i < 4; i++) ok += sheaf_model_param(m, names[i], 2, part, SHEAF_INIT_ZERO, &p) == SHEAF_OK;
    CHECK_EQ_INT(ok, 3);
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "out of memory budget: 300.0 KB more would make ");
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "more than the memory budget of 1.0 MB");
    sheaf_model_free(m);
  }
  /* freeing gives the budget back */
  if (CHECK_OK(ctx, sheaf_model_create(ctx, &m))) {
    sheaf_param p;
    int64_t part[2] = {300, 256};
    CHECK_OK(ctx, sheaf_model_param(m, "a", 2, part, SHEAF_INIT_ZERO, &p));
    sheaf_model_free(m);
  }
  sheaf_ctx_free(ctx);
}
