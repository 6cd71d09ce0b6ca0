/*
 * test_harness_filter.c — the test runner's name filters (tests/main.c,
 * th_filter_matches): a plain FILTER matches anywhere in a name, "^P" only
 * at its start, "S$" only at its end, "^N$" only the whole name. .ci/run's
 * lists of tests depend on these forms to say which tests they mean.
 */
#include "harness.h"

TEST(harness_filter_substring_prefix_suffix_exact) {
  /* a substring matches anywhere: the accidental matches the forms avoid */
  CHECK(th_filter_matches("kernel_plan_rows_every_shape", "kernel"));
  CHECK(th_filter_matches("codegen_lower_kernels_avx2", "kernel"));
  CHECK(th_filter_matches("hostvm_program_api_tensors_bit_identical", "tensor"));
  CHECK(!th_filter_matches("gemm_small_m", "rows"));
  /* ^: the start only */
  CHECK(th_filter_matches("kernel_plan_rows_every_shape", "^kernel"));
  CHECK(th_filter_matches("kernel_plan_rows_every_shape", "^kernel_plan_rows_every_shape"));
  CHECK(!th_filter_matches("codegen_lower_kernels_avx2", "^kernel"));
  CHECK(!th_filter_matches("hostvm_program_api_tensors_bit_identical", "^tensor"));
  CHECK(!th_filter_matches("ker", "^kernel")); /* longer than the name */
  /* $: the end only */
  CHECK(th_filter_matches("codegen_lower_kernels_avx2", "avx2$"));
  CHECK(!th_filter_matches("codegen_emit_matmul_tile_loop_avx2_x", "avx2$"));
  CHECK(!th_filter_matches("vx2", "avx2$"));
  /* both: the exact name */
  CHECK(th_filter_matches("gemm_small_m", "^gemm_small_m$"));
  CHECK(!th_filter_matches("gemm_small_m_narrow_n", "^gemm_small_m$"));
  CHECK(!th_filter_matches("xgemm_small_m", "^gemm_small_m$"));
  CHECK(!th_filter_matches("gemm_small", "^gemm_small_m$"));
  /* the characters are literal elsewhere in a filter */
  CHECK(!th_filter_matches("kernel_plan", "ker^nel"));
  CHECK(!th_filter_matches("kernel_plan", "kernel$_plan"));
}
