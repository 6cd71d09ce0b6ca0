/*
 * pw_scalar.c — reference level of the pointwise interpreter (pw.h): the
 * template pw_interp.h over floats, with the scalar column of pw_ops.h
 * (libm, vmath.h's references). Compiled on every architecture.
 */
#define PW_FN sh_f32_pw_ukernel__scalar
#define PW_ATTR
#define PW_V 1
#define PW_VEC float
#define PW_LOADU(p) (*(p))
#define PW_STOREU(p, v) (*(p) = (v))
#define PW_STORE(p, v) (*(p) = (v))
#define PW_SET1(f) (f)
#define PW_BODY(scalar, avx2, avx512) (scalar)
#define PW_PREFETCH 0
#include "kernels/pw_interp.h"
