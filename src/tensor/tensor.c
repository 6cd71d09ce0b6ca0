/*
 * tensor.c — dense tensor creation, wrapping, views (slice, select, permute,
 * reshape) and contiguous copies. See tensor.h for the storage/layout split.
 */
#include "tensor.h"

#include <stdio.h>
#include <string.h>

size_t sheaf_dtype_size(sheaf_dtype d) {
  switch (d) {
  case SHEAF_F64: case SHEAF_I64: case SHEAF_U64: return 8;
  case SHEAF_F32: case SHEAF_I32: case SHEAF_U32: return 4;
  case SHEAF_BF16: case SHEAF_F16: case SHEAF_I16: case SHEAF_U16: return 2;
  case SHEAF_I8: case SHEAF_U8: case SHEAF_BOOL: case SHEAF_F8_E4M3: case SHEAF_F8_E5M2:
    return 1;
  case SHEAF_DTYPE_COUNT: break;
  }
  return 0;
}

const char *sheaf_dtype_name(sheaf_dtype d) {
  static const char *const names[SHEAF_DTYPE_COUNT] = {
      [SHEAF_F32] = "F32",   [SHEAF_I32] = "I32",         [SHEAF_BF16] = "BF16",
      [SHEAF_F16] = "F16",   [SHEAF_F64] = "F64",         [SHEAF_I64] = "I64",
      [SHEAF_I16] = "I16",   [SHEAF_I8] = "I8",           [SHEAF_U8] = "U8",
      [SHEAF_U16] = "U16",   [SHEAF_U32] = "U32",         [SHEAF_U64] = "U64",
      [SHEAF_BOOL] = "BOOL", [SHEAF_F8_E4M3] = "F8_E4M3", [SHEAF_F8_E5M2] = "F8_E5M2"};
  return (unsigned)d < SHEAF_DTYPE_COUNT ? names[d] : "?";
}

bool sh_shape_numel(int rank, const int64_t *shape, int64_t *numel) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) {
    if (shape[i] < 0 || __builtin_mul_overflow(n, shape[i], &n)) return false;
  }
  *numel = n;
  return true;
}

const char *sh_shape_str(int rank, const int64_t *shape, char *buf, size_t size) {
  size_t at = 0;
  int w = snprintf(buf, size, "[");
  at = w > 0 ? (size_t)w : 0;
  for (int i = 0; i < rank && at < size; i++) {
    w = snprintf(buf + at, size - at, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (w < 0) break;
    at += (size_t)w;
  }
  if (at < size) snprintf(buf + at, size - at, "]");
  return buf;
}

void sh_contiguous_strides(int rank, const int64_t *shape, int64_t *strides) {
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    strides[i] = s;
    /* only an empty tensor's extents can overflow (numel is checked at
     * creation): it addresses no element, so its outer strides may be 0 */
    if (__builtin_mul_overflow(s, shape[i] > 0 ? shape[i] : 1, &s)) s = 0;
  }
}

static size_t tensor_size(int rank) {
  return sizeof(sheaf_tensor) + 2 * (size_t)rank * sizeof(int64_t);
}

static void storage_unref(sh_storage *s) {
  if (!s || atomic_fetch_sub(&s->refs, 1) != 1) return;
  sheaf_ctx *ctx = s->ctx;
  if (s->owned) sh_free(ctx, s->data, s->bytes ? s->bytes : 1);
  else if (s->release) s->release(s->release_user, s->data);
  sh_free(ctx, s, sizeof *s);
}

/* Allocates the layout header, which takes over one storage reference; on
 * failure the reference stays with the caller. */
static sheaf_status layout_new(sheaf_ctx *ctx, sh_storage *s, sheaf_dtype dtype, int rank,
                               const int64_t *shape, const int64_t *strides, int64_t offset,
                               sheaf_tensor **out) {
  sheaf_tensor *t = sh_alloc(ctx, tensor_size(rank), 16);
  if (!t) return SHEAF_ERR_NOMEM;
  t->ctx = ctx;
  t->storage = s;
  t->dtype = dtype;
  t->rank = rank;
  t->offset = offset;
  t->shape = t->dims;
  t->strides = t->dims + rank;
  if (rank && shape) { /* shape NULL: the caller fills shape and strides */
    memcpy(t->shape, shape, (size_t)rank * sizeof *shape);
    if (strides) memcpy(t->strides, strides, (size_t)rank * sizeof *strides);
    else sh_contiguous_strides(rank, shape, t->strides);
  }
  *out = t;
  return SHEAF_OK;
}

static sheaf_status check_new_args(sheaf_ctx *ctx, const char *fn, sheaf_dtype dtype, int rank,
                                   const int64_t *shape, sheaf_tensor **out, int64_t *numel) {
  if (out) *out = NULL; /* also without a context */
  if (!ctx) return SHEAF_ERR_INVALID_ARG;
  if (!out) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: out is NULL", fn);
  *out = NULL;
  if ((unsigned)dtype >= SHEAF_DTYPE_COUNT)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: unknown dtype %d", fn, (int)dtype);
  if (rank < 0 || rank > SH_TENSOR_MAX_RANK)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: rank %d outside 0..%d", fn, rank, SH_TENSOR_MAX_RANK);
  if (rank > 0 && !shape) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: shape is NULL", fn);
  char sb[256];
  if (!sh_shape_numel(rank, shape, numel))
    return sh_fail(ctx, SHEAF_ERR_SHAPE, "%s: shape %s has a negative extent or overflows", fn,
                   sh_shape_str(rank, shape, sb, sizeof sb));
  return SHEAF_OK;
}

sheaf_status sheaf_tensor_create(sheaf_ctx *ctx, sheaf_dtype dtype, int rank,
                                 const int64_t *shape, sheaf_tensor **out) {
  int64_t numel = 0; /* check_new_args sets it when it succeeds (GCC cannot always tell) */
  sheaf_status st = check_new_args(ctx, "sheaf_tensor_create", dtype, rank, shape, out, &numel);
  if (st != SHEAF_OK) return st;
  size_t bytes;
  if (sh_mul_overflow((size_t)numel, sheaf_dtype_size(dtype), &bytes) ||
      bytes > (size_t)INT64_MAX) {
    char sb[256];
    return sh_fail(ctx, SHEAF_ERR_NOMEM, "sheaf_tensor_create: shape %s is too large",
                   sh_shape_str(rank, shape, sb, sizeof sb));
  }
  sh_storage *s = sh_alloc(ctx, sizeof *s, 16);
  if (!s) return SHEAF_ERR_NOMEM;
  memset(s, 0, sizeof *s);
  s->data = sh_alloc(ctx, bytes ? bytes : 1, 64);
  if (!s->data) {
    sh_free(ctx, s, sizeof *s);
    return SHEAF_ERR_NOMEM;
  }
  memset(s->data, 0, bytes);
  s->ctx = ctx;
  atomic_init(&s->refs, 1);
  s->bytes = bytes;
  s->owned = true;
  st = layout_new(ctx, s, dtype, rank, shape, NULL, 0, out);
  if (st != SHEAF_OK) storage_unref(s);
  return st;
}

sheaf_status sheaf_tensor_wrap(sheaf_ctx *ctx, sheaf_dtype dtype, int rank,
                               const int64_t *shape, const int64_t *strides, void *data,
                               void (*release)(void *, void *), void *release_user,
                               sheaf_tensor **out) {
  int64_t numel = 0; /* check_new_args sets it when it succeeds (GCC cannot always tell) */
  sheaf_status st = check_new_args(ctx, "sheaf_tensor_wrap", dtype, rank, shape, out, &numel);
  if (st != SHEAF_OK) return st;
  if (!data && numel > 0)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_tensor_wrap: data is NULL");
  for (int i = 0; strides && i < rank; i++)
    if (strides[i] < 0)
      return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                     "sheaf_tensor_wrap: stride %lld of axis %d is negative",
                     (long long)strides[i], i);
  /* the last element's byte offset fits in int64: views and copies never
   * overflow computing an address */
  int64_t last = 0, end;
  bool over = false;
  for (int i = 0; strides && numel > 0 && i < rank; i++) {
    int64_t step;
    over |= __builtin_mul_overflow(shape[i] - 1, strides[i], &step);
    over |= __builtin_add_overflow(last, step, &last);
  }
  over |= __builtin_add_overflow(last, 1, &end);
  over |= __builtin_mul_overflow(end, (int64_t)sheaf_dtype_size(dtype), &end);
  if (over) {
    char sb[256];
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                   "sheaf_tensor_wrap: shape %s with these strides reaches past 2^63 bytes",
                   sh_shape_str(rank, shape, sb, sizeof sb));
  }
  sh_storage *s = sh_alloc(ctx, sizeof *s, 16);
  if (!s) return SHEAF_ERR_NOMEM;
  memset(s, 0, sizeof *s);
  s->ctx = ctx;
  atomic_init(&s->refs, 1);
  s->data = data;
  st = layout_new(ctx, s, dtype, rank, shape, strides, 0, out);
  if (st != SHEAF_OK) { /* the caller keeps its memory: no release call */
    sh_free(ctx, s, sizeof *s);
    return st;
  }
  s->release = release;
  s->release_user = release_user;
  return SHEAF_OK;
}

void sheaf_tensor_free(sheaf_tensor *t) {
  if (!t) return;
  sheaf_ctx *ctx = t->ctx;
  storage_unref(t->storage);
  sh_free(ctx, t, tensor_size(t->rank));
}

/* Queries: NULL gives 0, NULL or SHEAF_DTYPE_COUNT (sheaf.h's NULL rule). */
sheaf_dtype sheaf_tensor_dtype(const sheaf_tensor *t) { return t ? t->dtype : SHEAF_DTYPE_COUNT; }
int sheaf_tensor_rank(const sheaf_tensor *t) { return t ? t->rank : 0; }
const int64_t *sheaf_tensor_shape(const sheaf_tensor *t) { return t ? t->shape : NULL; }
const int64_t *sheaf_tensor_strides(const sheaf_tensor *t) { return t ? t->strides : NULL; }

int64_t sheaf_tensor_numel(const sheaf_tensor *t) {
  if (!t) return 0;
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) n *= t->shape[i]; /* checked at creation */
  return n;
}

void *sheaf_tensor_data(const sheaf_tensor *t) {
  if (!t) return NULL;
  return (char *)t->storage->data + t->offset * (int64_t)sheaf_dtype_size(t->dtype);
}

int sheaf_tensor_is_contiguous(const sheaf_tensor *t) {
  if (!t) return 0;
  int64_t expect = 1;
  for (int i = t->rank - 1; i >= 0; i--) {
    if (t->shape[i] == 0) return 1;
    if (t->shape[i] != 1 && t->strides[i] != expect) return 0;
    expect *= t->shape[i];
  }
  return 1;
}

sheaf_status sh_tensor_view(sheaf_ctx *ctx, const sheaf_tensor *t, int rank,
                            const int64_t *shape, const int64_t *strides, int64_t offset,
                            sheaf_tensor **out) {
  atomic_fetch_add(&t->storage->refs, 1);
  sheaf_status st = layout_new(ctx, t->storage, t->dtype, rank, shape, strides, offset, out);
  if (st != SHEAF_OK) storage_unref(t->storage);
  return st;
}

static sheaf_status check_view_args(sheaf_ctx *ctx, const char *fn, const sheaf_tensor *t,
                                    sheaf_tensor **out) {
  if (out) *out = NULL; /* also without a context */
  if (!ctx) return SHEAF_ERR_INVALID_ARG;
  if (!out) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: out is NULL", fn);
  *out = NULL;
  if (!t) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: tensor is NULL", fn);
  return SHEAF_OK;
}

static sheaf_status check_axis(sheaf_ctx *ctx, const char *fn, const sheaf_tensor *t, int *axis) {
  int a = *axis < 0 ? *axis + t->rank : *axis;
  if (a < 0 || a >= t->rank)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: axis %d out of range for rank %d", fn,
                   *axis, t->rank);
  *axis = a;
  return SHEAF_OK;
}

static int64_t clamp_index(int64_t i, int64_t n) {
  if (i < 0) i += n;
  if (i < 0) return 0;
  return i > n ? n : i;
}

sheaf_status sheaf_tensor_slice(sheaf_ctx *ctx, const sheaf_tensor *t, int axis, int64_t start,
                                int64_t stop, int64_t step, sheaf_tensor **out) {
  static const char fn[] = "sheaf_tensor_slice";
  sheaf_status st = check_view_args(ctx, fn, t, out);
  if (st == SHEAF_OK) st = check_axis(ctx, fn, t, &axis);
  if (st != SHEAF_OK) return st;
  if (step <= 0)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: step %lld must be positive", fn,
                   (long long)step);
  int64_t n = t->shape[axis];
  int64_t b = clamp_index(start, n), e = clamp_index(stop, n);
  int64_t len = e > b ? (e - b - 1) / step + 1 : 0; /* ceil((e - b) / step), any step */
  /* The first element's offset and the new stride stay within the tensor's
   * span (its elements are addressable) when the slice is not empty and
   * steps at least once; otherwise they are not needed. Checked anyway. */
  int64_t off = t->offset, stride = t->strides[axis];
  bool empty = len == 0 || sheaf_tensor_numel(t) == 0;
  if ((!empty && (__builtin_mul_overflow(b, t->strides[axis], &off) ||
                  __builtin_add_overflow(off, t->offset, &off))) ||
      (!empty && len > 1 && __builtin_mul_overflow(t->strides[axis], step, &stride)))
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                   "%s: [%lld:%lld:%lld] of axis %d (stride %lld) overflows an offset", fn,
                   (long long)start, (long long)stop, (long long)step, axis,
                   (long long)t->strides[axis]);
  if (empty) off = t->offset;
  sheaf_tensor *v;
  st = sh_tensor_view(ctx, t, t->rank, t->shape, t->strides, off, &v);
  if (st != SHEAF_OK) return st;
  v->shape[axis] = len;
  v->strides[axis] = stride;
  *out = v;
  return SHEAF_OK;
}

sheaf_status sheaf_tensor_select(sheaf_ctx *ctx, const sheaf_tensor *t, int axis, int64_t index,
                                 sheaf_tensor **out) {
  static const char fn[] = "sheaf_tensor_select";
  sheaf_status st = check_view_args(ctx, fn, t, out);
  if (st == SHEAF_OK) st = check_axis(ctx, fn, t, &axis);
  if (st != SHEAF_OK) return st;
  int64_t n = t->shape[axis], i = index < 0 ? index + n : index;
  if (i < 0 || i >= n)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: index %lld out of range for axis %d of extent %lld",
                   fn, (long long)index, axis, (long long)n);
  int64_t off = t->offset; /* within the span of an addressable tensor; an empty one: unmoved */
  if (sheaf_tensor_numel(t) > 0 && (__builtin_mul_overflow(i, t->strides[axis], &off) ||
                                    __builtin_add_overflow(off, t->offset, &off)))
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: index %lld of axis %d overflows an offset", fn,
                   (long long)index, axis);
  sheaf_tensor *v;
  st = sh_tensor_view(ctx, t, t->rank - 1, NULL, NULL, off, &v);
  if (st != SHEAF_OK) return st;
  for (int k = 0, j = 0; k < t->rank; k++) {
    if (k == axis) continue;
    v->shape[j] = t->shape[k];
    v->strides[j] = t->strides[k];
    j++;
  }
  *out = v;
  return SHEAF_OK;
}

sheaf_status sheaf_tensor_permute(sheaf_ctx *ctx, const sheaf_tensor *t, const int *perm,
                                  sheaf_tensor **out) {
  static const char fn[] = "sheaf_tensor_permute";
  sheaf_status st = check_view_args(ctx, fn, t, out);
  if (st != SHEAF_OK) return st;
  if (t->rank > 0 && !perm) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: perm is NULL", fn);
  uint64_t seen[SH_TENSOR_MAX_RANK / 64] = {0};
  for (int i = 0; i < t->rank; i++) {
    int p = perm[i];
    if (p < 0 || p >= t->rank || (seen[p / 64] >> (p % 64)) & 1)
      return sh_fail(ctx, SHEAF_ERR_INVALID_ARG,
                     "%s: perm[%d] = %d is out of range or repeated (rank %d)", fn, i, p, t->rank);
    seen[p / 64] |= 1ull << (p % 64);
  }
  sheaf_tensor *v;
  st = sh_tensor_view(ctx, t, t->rank, NULL, NULL, t->offset, &v);
  if (st != SHEAF_OK) return st;
  for (int i = 0; i < t->rank; i++) {
    v->shape[i] = t->shape[perm[i]];
    v->strides[i] = t->strides[perm[i]];
  }
  *out = v;
  return SHEAF_OK;
}

/* Strides for viewing (oshape, ostrides) as nshape without a copy (the
 * numpy "attempt_nocopy_reshape" rule): consecutive groups of old axes whose
 * products match groups of new axes must be contiguous among themselves.
 * Returns false when impossible. */
static bool nocopy_strides(int orank, const int64_t *oshape, const int64_t *ostrides, int nrank,
                           const int64_t *nshape, int64_t *nstrides) {
  int64_t os[SH_TENSOR_MAX_RANK], ost[SH_TENSOR_MAX_RANK];
  int on = 0;
  for (int i = 0; i < orank; i++) {
    if (oshape[i] != 1) {
      os[on] = oshape[i];
      ost[on] = ostrides[i];
      on++;
    }
  }
  int oi = 0, oj = 1, ni = 0, nj = 1;
  while (ni < nrank && oi < on) {
    int64_t np = nshape[ni], op = os[oi];
    while (np != op) {
      if (np < op) {
        if (nj >= nrank) return false;
        np *= nshape[nj++];
      } else {
        if (oj >= on) return false;
        op *= os[oj++];
      }
    }
    for (int k = oi; k < oj - 1; k++)
      if (ost[k] != os[k + 1] * ost[k + 1]) return false;
    nstrides[nj - 1] = ost[oj - 1];
    for (int k = nj - 1; k > ni; k--) nstrides[k - 1] = nstrides[k] * nshape[k];
    ni = nj++;
    oi = oj++;
  }
  /* trailing new axes of extent 1 */
  int64_t last = ni > 0 ? nstrides[ni - 1] : 1;
  for (int k = ni; k < nrank; k++) nstrides[k] = last;
  return oi >= on;
}

sheaf_status sheaf_tensor_reshape(sheaf_ctx *ctx, const sheaf_tensor *t, int rank,
                                  const int64_t *shape, sheaf_tensor **out) {
  static const char fn[] = "sheaf_tensor_reshape";
  sheaf_status st = check_view_args(ctx, fn, t, out);
  if (st != SHEAF_OK) return st;
  if (rank < 0 || rank > SH_TENSOR_MAX_RANK)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: rank %d outside 0..%d", fn, rank, SH_TENSOR_MAX_RANK);
  if (rank > 0 && !shape) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "%s: shape is NULL", fn);
  int64_t numel = sheaf_tensor_numel(t), known = 1;
  int infer = -1;
  char sa[256], sb[256];
  for (int i = 0; i < rank; i++) {
    if (shape[i] == -1 && infer < 0) infer = i;
    else if (shape[i] < 0)
      return sh_fail(ctx, SHEAF_ERR_SHAPE, "%s: bad target shape %s (one -1 at most, no other negatives)",
                     fn, sh_shape_str(rank, shape, sa, sizeof sa));
    else if (__builtin_mul_overflow(known, shape[i], &known))
      return sh_fail(ctx, SHEAF_ERR_SHAPE, "%s: target shape %s overflows", fn,
                     sh_shape_str(rank, shape, sa, sizeof sa));
  }
  int64_t nshape[SH_TENSOR_MAX_RANK];
  if (rank) memcpy(nshape, shape, (size_t)rank * sizeof *shape);
  if (infer >= 0) {
    if (known == 0 || numel % known != 0)
      return sh_fail(ctx, SHEAF_ERR_SHAPE, "%s: cannot infer -1 in %s from %lld elements", fn,
                     sh_shape_str(rank, shape, sa, sizeof sa), (long long)numel);
    nshape[infer] = numel / known;
    known = numel;
  }
  if (known != numel)
    return sh_fail(ctx, SHEAF_ERR_SHAPE, "%s: cannot view %s (%lld elements) as %s (%lld elements)",
                   fn, sh_shape_str(t->rank, t->shape, sa, sizeof sa), (long long)numel,
                   sh_shape_str(rank, shape, sb, sizeof sb), (long long)known);
  int64_t nstrides[SH_TENSOR_MAX_RANK];
  if (numel == 0 || sheaf_tensor_is_contiguous(t)) {
    sh_contiguous_strides(rank, nshape, nstrides);
  } else if (!nocopy_strides(t->rank, t->shape, t->strides, rank, nshape, nstrides)) {
    return sh_fail(ctx, SHEAF_ERR_SHAPE,
                   "%s: the strided layout of %s cannot be viewed as %s without a copy "
                   "(call sheaf_tensor_contiguous first)",
                   fn, sh_shape_str(t->rank, t->shape, sa, sizeof sa),
                   sh_shape_str(rank, nshape, sb, sizeof sb));
  }
  return sh_tensor_view(ctx, t, rank, nshape, nstrides, t->offset, out);
}

/* Copies the strided source into contiguous dst, innermost axis by memcpy
 * when it is unit-stride. */
static void copy_strided(const sheaf_tensor *t, unsigned char *dst) {
  size_t es = sheaf_dtype_size(t->dtype);
  int r = t->rank;
  const unsigned char *base = sheaf_tensor_data(t);
  if (r == 0) {
    memcpy(dst, base, es);
    return;
  }
  int64_t inner = t->shape[r - 1], istride = t->strides[r - 1];
  int64_t idx[SH_TENSOR_MAX_RANK] = {0};
  int64_t outer = 1;
  for (int i = 0; i < r - 1; i++) outer *= t->shape[i];
  for (int64_t o = 0; o < outer; o++) {
    int64_t off = 0;
    for (int i = 0; i < r - 1; i++) off += idx[i] * t->strides[i];
    const unsigned char *src = base + off * (int64_t)es;
    if (istride == 1) {
      memcpy(dst, src, (size_t)inner * es);
      dst += (size_t)inner * es;
    } else {
      for (int64_t k = 0; k < inner; k++, dst += es) memcpy(dst, src + k * istride * (int64_t)es, es);
    }
    for (int i = r - 2; i >= 0; i--) {
      if (++idx[i] < t->shape[i]) break;
      idx[i] = 0;
    }
  }
}

sheaf_status sheaf_tensor_contiguous(sheaf_ctx *ctx, const sheaf_tensor *t, sheaf_tensor **out) {
  sheaf_status st = check_view_args(ctx, "sheaf_tensor_contiguous", t, out);
  if (st != SHEAF_OK) return st;
  sheaf_tensor *c;
  st = sheaf_tensor_create(ctx, t->dtype, t->rank, t->shape, &c);
  if (st != SHEAF_OK) return st;
  if (sheaf_tensor_numel(t) > 0) copy_strided(t, sheaf_tensor_data(c));
  *out = c;
  return SHEAF_OK;
}
