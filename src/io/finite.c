/*
 * finite.c — non-finite value counts over stored float data (see finite.h):
 * per dtype a branch-free count over the exponent bits, block by block so
 * that the first bad index is found by rescanning a single block.
 */
#include "finite.h"

#include <math.h>
#include <string.h>

bool sh_dtype_is_float(sheaf_dtype dt) {
  return dt == SHEAF_F32 || dt == SHEAF_F64 || dt == SHEAF_F16 || dt == SHEAF_BF16 ||
         dt == SHEAF_F8_E4M3 || dt == SHEAF_F8_E5M2;
}

/* Non-finite values among p[0..n) (n elements of dtype dt). */
static size_t count_block(sheaf_dtype dt, const unsigned char *p, size_t n, bool as_f32) {
  size_t c = 0;
  switch (dt) {
  case SHEAF_F32:
    for (size_t i = 0; i < n; i++) {
      uint32_t w;
      memcpy(&w, p + 4 * i, 4);
      c += (w & 0x7f800000u) == 0x7f800000u;
    }
    break;
  case SHEAF_F64:
    if (as_f32) {
      for (size_t i = 0; i < n; i++) {
        double d;
        memcpy(&d, p + 8 * i, 8);
        float f = (float)d; /* NaN stays NaN; beyond float's range becomes ±Inf */
        c += !isfinite(f);
      }
    } else {
      for (size_t i = 0; i < n; i++) {
        uint64_t w;
        memcpy(&w, p + 8 * i, 8);
        c += (w & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
      }
    }
    break;
  case SHEAF_F16:
    for (size_t i = 0; i < n; i++) {
      uint16_t h;
      memcpy(&h, p + 2 * i, 2);
      c += (h & 0x7c00u) == 0x7c00u;
    }
    break;
  case SHEAF_BF16:
    for (size_t i = 0; i < n; i++) {
      uint16_t h;
      memcpy(&h, p + 2 * i, 2);
      c += (h & 0x7f80u) == 0x7f80u;
    }
    break;
  case SHEAF_F8_E4M3: /* S.1111.111 is NaN; no infinities */
    for (size_t i = 0; i < n; i++) c += (p[i] & 0x7fu) == 0x7fu;
    break;
  case SHEAF_F8_E5M2:
    for (size_t i = 0; i < n; i++) c += (p[i] & 0x7cu) == 0x7cu;
    break;
  default: break;
  }
  return c;
}

#define BLOCK ((size_t)4096)

uint64_t sh_count_nonfinite(sheaf_dtype dt, const void *bytes, size_t n, bool as_f32,
                            size_t *first) {
  if (first) *first = n;
  if (!sh_dtype_is_float(dt) || !bytes || n == 0) return 0;
  const unsigned char *p = bytes;
  size_t es = sheaf_dtype_size(dt);
  uint64_t total = 0;
  for (size_t b = 0; b < n; b += BLOCK) {
    size_t m = n - b < BLOCK ? n - b : BLOCK;
    size_t c = count_block(dt, p + b * es, m, as_f32);
    if (c && first && *first == n)
      for (size_t i = 0; i < m; i++)
        if (count_block(dt, p + (b + i) * es, 1, as_f32)) {
          *first = b + i;
          break;
        }
    total += c;
  }
  return total;
}
