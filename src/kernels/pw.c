/*
 * pw.c — the pointwise interpreters' ISA dispatch (pw.h), and the check
 * that every elementwise op of ops.def has a body in pw_ops.h.
 */
#include "kernels/pw.h"

#include "kernels/pw_ops.h"

/* An elementwise op without a body fails here: "'pw_body_<ID>' undeclared"
 * (add its line to pw_ops.h); a body without an op fails in the
 * interpreters (SH_PW_<ID> undeclared). */
enum {
#define PW_OP1(ID, s, v8, v16) pw_body_##ID = SH_PW_##ID,
#define PW_OP2(ID, s, v8, v16) pw_body_##ID = SH_PW_##ID,
#define PW_OP3(ID, s, v8, v16) pw_body_##ID = SH_PW_##ID,
#define PW_OP1K(ID, s, v8, v16) pw_body_##ID = SH_PW_##ID,
#define PW_LANES1(ID, s) pw_body_##ID = SH_PW_##ID,
#define PW_LANES2(ID, s) pw_body_##ID = SH_PW_##ID,
#define PW_LOWERED(ID) pw_body_##ID = SH_PW_##ID,
#include "kernels/pw_ops.h"
};
#define PW_NEEDS_BODY_VIEW(ID)
#define PW_NEEDS_BODY_GEMM(ID)
#define PW_NEEDS_BODY_ROW(ID)
#define PW_NEEDS_BODY_EW(ID) _Static_assert((int)pw_body_##ID == (int)SH_PW_##ID, #ID);
#define SH_OP(ID, name, cls, arity, form, act) PW_NEEDS_BODY_##cls(ID)
#include "kernels/ops.def"

static const sh_pw_kernels k_scalar = {"scalar", sh_f32_pw_ukernel__scalar};
#if defined(__x86_64__)
static const sh_pw_kernels k_avx2 = {"avx2", sh_f32_pw_ukernel__avx2};
static const sh_pw_kernels k_avx512 = {"avx512", sh_f32_pw_ukernel__avx512};
#endif

const sh_pw_kernels *sh_pw_kernels_get(sheaf_isa isa) {
  sheaf_isa host = sheaf_cpu_isa_host();
  if ((int)isa > (int)host) isa = host;
#if defined(__x86_64__)
  if (isa == SHEAF_ISA_AVX512) return &k_avx512;
  if (isa == SHEAF_ISA_AVX2) return &k_avx2;
#endif
  return &k_scalar;
}
