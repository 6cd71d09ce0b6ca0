/*
 * test_kernel_api.c — the cache behaviour of sheaf_kernel_compile
 * (src/codegen/kernel_api.c): the JIT request is keyed on the kernel's
 * source, name, ISA and the generator's identity, and the C is emitted on a
 * miss only. A second compile in a new sheaf_kernel is a verified hit that
 * neither emits nor compiles and computes the same results; the entry keeps
 * the spec and the C; a tampered spec is rejected and rebuilt; a different
 * kernel, name or ISA is another entry; the eager mode (C emitted every
 * time, keyed on it) agrees; two processes compiling the same kernel at
 * once compile it once. Results against a scalar matmul + GELU.
 * Skipped with a note when no C compiler exists.
 */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/file.h"
#include "codegen/jit.h"
#include "codegen/jit_int.h"
#include "codegen/kernel_api.h"
#include "harness.h"

static const char FFN[] = "kernel ffn(x: f32[N, D], W: f32[D, F], b: f32[F]) -> f32[N, F] {\n"
                          "  y(n, f) +=! x(n, d) * W(d, f)\n  out(n, f) = gelu(y(n, f) + b(f))\n}\n"
                          "kernel mm(A: f32[M, K], B: f32[K, N]) -> f32[M, N] { C(m, n) +=! A(m, k) * B(k, n) }\n";

enum { N = 13, D = 17, F = 19 };

/* Runs the ffn kernel on fixed inputs; the largest relative error against
 * the double reference. */
static double run_ffn(sheaf_ctx *ctx, sheaf_kernel *k) {
  static float x[N * D], W[D * F], b[F], out[N * F];
  for (int i = 0; i < N * D; i++) x[i] = (float)((i * 7 % 23) - 11) / 11.0f;
  for (int i = 0; i < D * F; i++) W[i] = (float)((i * 5 % 19) - 9) / 19.0f;
  for (int i = 0; i < F; i++) b[i] = (float)(i % 5) / 5.0f - 0.4f;
  int64_t sx[] = {N, D}, sw[] = {D, F}, sb[] = {F};
  sheaf_kernel_arg a[] = {{SHEAF_KERNEL_F32, x, N * D, 2, sx},
                          {SHEAF_KERNEL_F32, W, D * F, 2, sw},
                          {SHEAF_KERNEL_F32, b, F, 1, sb},
                          {SHEAF_KERNEL_F32, out, N * F, 0, NULL}};
  memset(out, 0xff, sizeof out);
  if (!CHECK_OK(ctx, sheaf_kernel_run(k, a, 4))) return 1e30;
  double worst = 0;
  for (int n = 0; n < N; n++)
    for (int f = 0; f < F; f++) {
      double y = b[f];
      for (int d = 0; d < D; d++) y += (double)x[n * D + d] * W[d * F + f];
      double ref = 0.5 * y * erfc(-y / sqrt(2.0));
      double e = fabs(out[n * F + f] - ref) / fmax(1.0, fabs(ref));
      if (!(e <= worst)) worst = e;
    }
  return worst;
}

static sheaf_kernel *compile(sheaf_ctx *ctx, const char *name, const sh_kernel_opts *o, sh_jit_stats *s) {
  sheaf_kernel *k = NULL;
  if (!CHECK_OK(ctx, sh_kernel_compile_opts(ctx, FFN, strlen(FFN), name, o, &k))) return NULL;
  sh_kernel_jit_stats(k, s);
  return k;
}

TEST(kernel_api_hit_skips_emission_and_compiler) {
  if (!th_have_jit_cc("kernel_api_hit_skips_emission_and_compiler")) return;
  sheaf_ctx *ctx = th_ctx();
  char dir[SH_JIT_PATH], vdir[SH_JIT_PATH + 8];
  snprintf(dir, sizeof dir, "%s", th_tmp_path("api-cache"));
  snprintf(vdir, sizeof vdir, "%s/v1", dir);
  sh_kernel_opts o = {.cache_dir = dir, .isa_set = true, .isa = SHEAF_ISA_SCALAR};
  sh_jit_stats s;

  /* miss: one compile; the entry holds the spec (the kernel's source) and the C */
  sheaf_kernel *a = compile(ctx, "ffn", &o, &s);
  REQUIRE(a != NULL);
  CHECK_EQ_INT((int)s.compiles, 1);
  CHECK(run_ffn(ctx, a) < 2e-5);
  CHECK_EQ_SIZE(th_count_suffix(vdir, ".spec"), 1);
  CHECK_EQ_SIZE(th_count_suffix(vdir, ".c"), 1);
  DIR *d = opendir(vdir);
  REQUIRE(d != NULL);
  struct dirent *e;
  char spec_path[SH_JIT_PATH + 300] = "", c_path[SH_JIT_PATH + 300] = "";
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (len > 5 && !strcmp(e->d_name + len - 5, ".spec")) {
      snprintf(spec_path, sizeof spec_path, "%s/%s", vdir, e->d_name);
      snprintf(c_path, sizeof c_path, "%s/%.*s.c", vdir, (int)(len - 5), e->d_name);
    }
  }
  closedir(d);
  char *spec = NULL, *c = NULL;
  size_t spec_n = 0, c_n = 0;
  REQUIRE_OK(ctx, sh_file_read(ctx, spec_path, &spec, &spec_n));
  REQUIRE_OK(ctx, sh_file_read(ctx, c_path, &c, &c_n));
  CHECK(strncmp(spec, "sheaf-kernel-spec 1\ngenerator /", 31) == 0);
  CHECK_CONTAINS(spec, "\nisa scalar\nkernel ffn\n");
  CHECK_CONTAINS(spec, FFN);
  CHECK_CONTAINS(c, "sheafk_ffn");
  sh_free(ctx, c, c_n + 1);

  /* a new sheaf_kernel (a new run): a hit, nothing compiled, same results */
  sheaf_kernel *b = compile(ctx, "ffn", &o, &s);
  REQUIRE(b != NULL);
  CHECK_EQ_INT((int)s.compiles, 0);
  CHECK_EQ_INT((int)s.disk_hits, 1);
  CHECK(run_ffn(ctx, b) < 2e-5);
  sheaf_kernel_free(b);

  /* another kernel of the same source, another ISA: other entries */
  sheaf_kernel *m = compile(ctx, "mm", &o, &s);
  CHECK_EQ_INT((int)s.compiles, 1);
  sheaf_kernel_free(m);
  if (sheaf_cpu_isa() >= SHEAF_ISA_AVX2) {
    sh_kernel_opts o2 = o;
    o2.isa = SHEAF_ISA_AVX2;
    sheaf_kernel *v = compile(ctx, "ffn", &o2, &s);
    CHECK_EQ_INT((int)s.compiles, 1);
    if (v) CHECK(run_ffn(ctx, v) < 2e-5);
    sheaf_kernel_free(v);
  }

  /* the eager mode (C emitted and keyed on) is another entry, same results */
  sh_kernel_opts oe = o;
  oe.eager = true;
  sheaf_kernel *ea = compile(ctx, "ffn", &oe, &s);
  REQUIRE(ea != NULL);
  CHECK_EQ_INT((int)s.compiles, 1);
  CHECK(run_ffn(ctx, ea) < 2e-5);
  sheaf_kernel_free(ea);
  ea = compile(ctx, "ffn", &oe, &s);
  CHECK_EQ_INT((int)s.compiles, 0);
  sheaf_kernel_free(ea);

  /* a tampered spec (the same length, one byte changed): rejected, rebuilt */
  char *p = strstr(spec, "gelu");
  REQUIRE(p != NULL);
  p[0] = 'G';
  FILE *f = fopen(spec_path, "wb");
  REQUIRE(f != NULL);
  fwrite(spec, 1, spec_n, f);
  fclose(f);
  sheaf_kernel *r = compile(ctx, "ffn", &o, &s);
  REQUIRE(r != NULL);
  CHECK_EQ_INT((int)s.compiles, 1);
  CHECK_EQ_INT((int)s.rejected, 1);
  CHECK_CONTAINS(s.last_reject, "differs from the requested spec");
  CHECK(run_ffn(ctx, r) < 2e-5);
  sheaf_kernel_free(r);
  sh_free(ctx, spec, spec_n + 1);
  sheaf_kernel_free(a);
}

TEST(kernel_api_two_processes_compile_the_same_kernel_at_once) {
  if (!th_have_jit_cc("kernel_api_two_processes_compile_the_same_kernel_at_once")) return;
  char dir[SH_JIT_PATH];
  snprintf(dir, sizeof dir, "%s", th_tmp_path("api-cache-2p"));
  sh_kernel_opts o = {.cache_dir = dir, .isa_set = true, .isa = SHEAF_ISA_SCALAR};
  int go[2];
  REQUIRE(pipe(go) == 0);
  pid_t kids[2];
  fflush(stdout);
  fflush(stderr);
  for (int i = 0; i < 2; i++) {
    kids[i] = fork();
    if (kids[i] == 0) {
      close(go[1]);
      char c;
      if (read(go[0], &c, 1) != 0) _exit(3); /* wait for the start: the pipe's close */
      sheaf_ctx *ctx = NULL;
      sheaf_kernel *k = NULL;
      int rc = 1;
      if (sheaf_ctx_create(&(sheaf_ctx_options){.threads = 1}, &ctx, NULL, 0) == SHEAF_OK &&
          sh_kernel_compile_opts(ctx, FFN, strlen(FFN), "ffn", &o, &k) == SHEAF_OK) {
        sh_jit_stats st;
        sh_kernel_jit_stats(k, &st);
        rc = run_ffn(ctx, k) < 2e-5 ? (st.compiles ? 10 : 0) : 2; /* 10: this one compiled */
      } else if (ctx) {
        fprintf(stderr, "child %d: %s\n", i, sheaf_ctx_last_error(ctx));
      }
      sheaf_kernel_free(k);
      sheaf_ctx_free(ctx);
      _exit(rc);
    }
    REQUIRE(kids[i] > 0);
  }
  close(go[0]);
  close(go[1]); /* both start now */
  int compiled = 0;
  for (int i = 0; i < 2; i++) {
    int status = 0;
    CHECK(waitpid(kids[i], &status, 0) == kids[i]);
    CHECK(WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 10));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 10) compiled++;
  }
  CHECK_EQ_INT(compiled, 1); /* the key's lock: one compile, the other waits and hits */
  char v1[SH_JIT_PATH + 8];
  snprintf(v1, sizeof v1, "%s/v1", dir);
  CHECK_EQ_SIZE(th_count_suffix(v1, ".meta"), 1);
  CHECK_EQ_SIZE(th_count_suffix(v1, ".spec"), 1);
  sheaf_ctx *ctx = th_ctx();
  sh_jit_stats s;
  sheaf_kernel *k = compile(ctx, "ffn", &o, &s);
  REQUIRE(k != NULL);
  CHECK_EQ_INT((int)s.compiles, 0);
  CHECK(run_ffn(ctx, k) < 2e-5);
  sheaf_kernel_free(k);
}
