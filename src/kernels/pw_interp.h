/*
 * pw_interp.h — the row interpreter of pointwise programs (pw.h), written
 * once and instantiated per ISA level: pw_scalar.c, pw_avx2.c and
 * pw_avx512.c each define these macros and include this file once.
 *
 *   PW_FN        the function (sh_f32_pw_ukernel__<level>)
 *   PW_ATTR      its target attribute (empty for scalar)
 *   PW_V         floats per vector (1: scalar)
 *   PW_VEC       the vector type; PW_LOADU, PW_STOREU, PW_STORE (aligned)
 *                and PW_SET1 (broadcast) its operations
 *   PW_BODY(scalar, avx2, avx512)   this level's column of pw_ops.h
 *   PW_PREFETCH  1: prefetch the next row's leaves and outputs
 *
 * Each stack slot holds a chunk of PW_CH floats of the row; a leaf chunk is
 * read in place (copied, zero-padded, only for the row's last partial
 * vector); slot 0 is the output row itself when the chunk is whole vectors.
 */
#include <string.h>

#include "kernels/pw.h"
#include "kernels/pw_ops.h"

#define PW_CH 128 /* floats per chunk of a row */

static inline const float *pw_leaf_row(const sh_pw_leaf *a, int64_t r) {
  if (a->row_bc) r = 0;
  return (a->in.rows ? a->in.rows[r] : a->in.base + r * a->in.ld) + a->off;
}
static inline float *pw_out_row(const sh_gemm_out *o, int64_t r) {
  return o->rows ? o->rows[r] : o->base + r * o->ld;
}

/* Operands each opcode pops (sum_n and scale: see pointwise.c). */
static const uint8_t pw_arity[SH_PW_COUNT] = {
#define SH_OP(ID, name, cls, arity, form, act) [SH_PW_##ID] = arity == 0 ? 1 : arity,
#include "kernels/ops.def"
};

#if PW_PREFETCH
/* The next row's leaves and outputs: scattered rows defeat the prefetchers. */
static inline void pw_prefetch_row(const sh_pw_job *j, int64_t r) {
  const sh_pw_prog *p = j->p;
  int64_t row_bytes = j->n * (int64_t)sizeof(float);
  for (int k = 0; k < p->n_leaves; k++) {
    if (j->a[k].col_bc || j->a[k].row_bc) continue;
    const char *q = (const char *)pw_leaf_row(&j->a[k], r);
    for (int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(q + b, 0, 3);
  }
  const char *q = (const char *)pw_out_row(&j->y, r);
  for (int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(q + b, 1, 3);
  for (int s = 0; s < p->n_side; s++) {
    q = (const char *)pw_out_row(&j->s[s], r);
    for (int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(q + b, 1, 3);
  }
}
#endif

PW_ATTR void PW_FN(const sh_pw_job *j, int64_t r0, int64_t r1) {
  const sh_pw_prog *p = j->p;
  float buf[SH_PW_MAX_STACK][PW_CH] __attribute__((aligned(64)));
  for (int64_t r = r0; r < r1; r++) {
    const float *lr[SH_PW_MAX_LEAVES];
    for (int k = 0; k < p->n_leaves; k++) lr[k] = pw_leaf_row(&j->a[k], r);
    float *yr = pw_out_row(&j->y, r);
#if PW_PREFETCH
    if (r + 1 < r1) pw_prefetch_row(j, r + 1); /* 2 or 4 rows ahead: no better */
#endif
    for (int64_t c0 = 0; c0 < j->n; c0 += PW_CH) {
      int64_t len = j->n - c0 < PW_CH ? j->n - c0 : PW_CH, nv = (len + PW_V - 1) / PW_V;
      bool whole = len % PW_V == 0;
      const float *rd[SH_PW_MAX_STACK];
      int sp = 0;
      for (int pc = 0; pc < p->n_code; pc++) {
        int op = p->op[pc], arg = p->arg[pc];
        if (op == SH_PW_LOAD) {
          if (j->a[arg].col_bc) {
            PW_VEC v = PW_SET1(lr[arg][0]);
            for (int64_t q = 0; q < nv; q++) PW_STORE(buf[sp] + PW_V * q, v);
            rd[sp] = buf[sp];
          } else if (whole) {
            rd[sp] = lr[arg] + c0;
          } else {
            memcpy(buf[sp], lr[arg] + c0, (size_t)len * sizeof(float));
            memset(buf[sp] + len, 0, (size_t)(nv * PW_V - len) * sizeof(float));
            rd[sp] = buf[sp];
          }
          sp++;
          continue;
        }
        if (op == SH_PW_STORE) {
          float *so = pw_out_row(&j->s[arg], r) + c0;
          const float *si = rd[sp - 1];
          if (whole)
            for (int64_t q = 0; q < nv; q++) PW_STOREU(so + PW_V * q, PW_LOADU(si + PW_V * q));
          else
            memcpy(so, si, (size_t)len * sizeof(float));
          continue;
        }
        int ar = pw_arity[op], t = sp - ar;
        float *d = t == 0 && whole ? yr + c0 : buf[t];
        const float *a = rd[t], *b = ar > 1 ? rd[t + 1] : NULL, *c = ar > 2 ? rd[t + 2] : NULL;
        (void)b, (void)c;
        switch (op) {
#define PW_OP1(ID, s, v8, v16)                                                      \
  case SH_PW_##ID:                                                                  \
    for (int64_t q = 0; q < nv; q++) {                                              \
      PW_VEC x = PW_LOADU(a + PW_V * q);                                            \
      PW_STOREU(d + PW_V * q, PW_BODY(s, v8, v16));                                 \
    }                                                                               \
    break;
#define PW_OP2(ID, s, v8, v16)                                                      \
  case SH_PW_##ID:                                                                  \
    for (int64_t q = 0; q < nv; q++) {                                              \
      PW_VEC x = PW_LOADU(a + PW_V * q), y = PW_LOADU(b + PW_V * q);                \
      PW_STOREU(d + PW_V * q, PW_BODY(s, v8, v16));                                 \
    }                                                                               \
    break;
#define PW_OP3(ID, s, v8, v16)                                                      \
  case SH_PW_##ID:                                                                  \
    for (int64_t q = 0; q < nv; q++) {                                              \
      PW_VEC x = PW_LOADU(a + PW_V * q), y = PW_LOADU(b + PW_V * q),                \
             z = PW_LOADU(c + PW_V * q);                                            \
      PW_STOREU(d + PW_V * q, PW_BODY(s, v8, v16));                                 \
    }                                                                               \
    break;
#define PW_OP1K(ID, s, v8, v16)                                                     \
  case SH_PW_##ID: {                                                                \
    PW_VEC k = PW_SET1(p->k[arg]);                                                  \
    for (int64_t q = 0; q < nv; q++) {                                              \
      PW_VEC x = PW_LOADU(a + PW_V * q);                                            \
      PW_STOREU(d + PW_V * q, PW_BODY(s, v8, v16));                                 \
    }                                                                               \
    break;                                                                          \
  }
/* every lane, the chunk's padding lanes included (zeros, never stored) */
#define PW_LANES1(ID, s)                                                            \
  case SH_PW_##ID:                                                                  \
    for (int64_t i = 0; i < nv * PW_V; i++) {                                       \
      float x = a[i];                                                               \
      d[i] = (s);                                                                   \
    }                                                                               \
    break;
#define PW_LANES2(ID, s)                                                            \
  case SH_PW_##ID:                                                                  \
    for (int64_t i = 0; i < nv * PW_V; i++) {                                       \
      float x = a[i], y = b[i];                                                     \
      d[i] = (s);                                                                   \
    }                                                                               \
    break;
#define PW_LOWERED(ID)
#include "kernels/pw_ops.h"
        default: break;
        }
        rd[t] = d;
        sp = t + 1;
      }
      if (rd[0] != yr + c0) memcpy(yr + c0, rd[0], (size_t)len * sizeof(float));
    }
  }
}
