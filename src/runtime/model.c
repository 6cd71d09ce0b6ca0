/*
 * model.c — a model's parameters: declaration, seeded initialization (one
 * splitmix64 stream per parameter, keyed by the hash of its name and the
 * seed, so values do not depend on declaration order or platform), load and
 * save through safetensors (one error lists every missing tensor and every
 * shape mismatch), identity initializers (blocks, or one n x n identity per
 * row of a table of matrices), and the packed GEMM forms of weights (plain,
 * gate-interleaved for LSTM cells, and stacked [W_1; W_2; ...] for affine_n),
 * built on first use and rebuilt when a parameter's values may have changed.
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "io/finite.h"
#include "io/safetensors.h"
#include "base/pool.h"
#include "runtime/runtime.h"
#include "tensor/tensor.h"

static atomic_uint g_model_tags = 0;

/* ------------------------------------------------------------------ PRNG */

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t fnv1a64(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h;
}

/* 24 random bits as an integer (exact in float and double). */
static inline uint32_t rand24(uint64_t *s) { return (uint32_t)(splitmix64(s) >> 40); }

/* floor(sqrt(v)) for 0 <= v < 2^52 */
static int64_t isqrt(int64_t v) {
  int64_t k = (int64_t)sqrt((double)v);
  while (k * k > v) k--;
  while ((k + 1) * (k + 1) <= v) k++;
  return k;
}

/* A parameter's new version, from one counter for the process: a version
 * names one state of one parameter's values, so a packed copy a kernel keeps
 * under (data pointer, version) is never taken for a later parameter's whose
 * data reuses the freed memory (a per-parameter count restarts at the same
 * value in every model). */
static atomic_uint_fast64_t g_param_version;
static void new_version(sh_param *p) { p->version = (uint64_t)atomic_fetch_add(&g_param_version, 1) + 1; }

static void param_init(sh_param *p, uint64_t seed) {
  uint64_t s = fnv1a64(p->name) ^ (seed * 0xd1342543de82ef95ull);
  splitmix64(&s);
  size_t n = p->numel;
  switch (p->init) {
  case SHEAF_INIT_ZERO: memset(p->data, 0, n * sizeof(float)); break;
  case SHEAF_INIT_ONE:
    for (size_t i = 0; i < n; i++) p->data[i] = 1.0f;
    break;
  case SHEAF_INIT_IDENTITY: { /* (i % k == j % k), k = min(rows, cols) */
    int64_t r = p->shape[0], c = p->shape[1], k = r < c ? r : c;
    for (int64_t i = 0; i < r; i++)
      for (int64_t j = 0; j < c; j++) p->data[i * c + j] = i % k == j % k ? 1.0f : 0.0f;
    break;
  }
  case SHEAF_INIT_IDENTITY_ROWS: { /* every row an n x n identity */
    int64_t r = p->shape[0], c = p->shape[1], k = isqrt(c);
    memset(p->data, 0, n * sizeof(float));
    for (int64_t i = 0; i < r; i++)
      for (int64_t d = 0; d < k; d++) p->data[i * c + d * (k + 1)] = 1.0f;
    break;
  }
  case SHEAF_INIT_NORMAL:
    /* Irwin-Hall: the sum of 12 uniforms minus 6 (integer arithmetic, so the
     * same bits everywhere), std 0.02 */
    for (size_t i = 0; i < n; i++) {
      int64_t acc = 0;
      for (int j = 0; j < 12; j++) acc += rand24(&s);
      double z = (double)(acc - 6 * (int64_t)(1 << 24)) / (double)(1 << 24);
      p->data[i] = (float)(0.02 * z);
    }
    break;
  case SHEAF_INIT_GLOROT:
  default: {
    double lim = p->rank == 2 ? sqrt(6.0 / (double)(p->shape[0] + p->shape[1]))
                              : sqrt(3.0 / (double)(p->shape[0] > 0 ? p->shape[0] : 1));
    for (size_t i = 0; i < n; i++) {
      double u = (double)rand24(&s) / (double)(1 << 24); /* [0, 1) */
      p->data[i] = (float)((2.0 * u - 1.0) * lim);
    }
    break;
  }
  }
  new_version(p);
}

/* --------------------------------------------------------------- model */

sheaf_ctx *sheaf_model_ctx(const sheaf_model *m) { return m ? m->ctx : NULL; }

sheaf_status sheaf_model_create(sheaf_ctx *ctx, sheaf_model **out) {
  if (!out) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_model_create: out is NULL");
  *out = NULL;
  if (!ctx) return SHEAF_ERR_INVALID_ARG;
  sheaf_model *m = sh_calloc(ctx, 1, sizeof *m);
  if (!m) return SHEAF_ERR_NOMEM;
  m->ctx = ctx;
  pthread_mutex_init(&m->mu, NULL);
  unsigned t;
  do t = atomic_fetch_add(&g_model_tags, 1) + 1;
  while (t == 0);
  m->tag = t;
  *out = m;
  return SHEAF_OK;
}

void sheaf_model_free(sheaf_model *m) {
  if (!m) return;
  sheaf_ctx *ctx = m->ctx;
  for (uint32_t i = 0; i < m->n_params; i++) {
    sh_param *p = &m->params[i];
    sh_strfree(ctx, p->name);
    sh_free(ctx, p->data, p->numel * sizeof(float));
    sh_free(ctx, p->grad, p->numel * sizeof(float)); /* src/train's gradient */
    sh_free(ctx, p->grad_rows, p->rank == 2 && p->shape[0] > 0 ? (size_t)p->shape[0] : 1);
    sh_gemm_packed_b_free(ctx, p->packed);
    sh_gemm_packed_b_free(ctx, p->gates);
    sh_gemm_packed_b_free(ctx, p->packed_t);
  }
  for (int k = 0; k < SH_GRAD_SHARDS - 1; k++) { /* src/train's gradient shards */
    for (uint32_t i = 0; i < m->cap_shard[k] && i < m->n_params; i++) {
      const sh_param *p = &m->params[i];
      sh_free(ctx, m->shard[k][i].grad, p->numel * sizeof(float));
      sh_free(ctx, m->shard[k][i].grad_rows, p->rank == 2 && p->shape[0] > 0 ? (size_t)p->shape[0] : 1);
    }
    sh_free(ctx, m->shard[k], (size_t)m->cap_shard[k] * sizeof *m->shard[k]);
  }
  for (uint32_t i = 0; i < m->n_stacks; i++) sh_gemm_packed_b_free(ctx, m->stacks[i].packed);
  sh_free(ctx, m->params, m->cap_params * sizeof *m->params);
  sh_free(ctx, m->stacks, m->cap_stacks * sizeof *m->stacks);
  pthread_mutex_destroy(&m->mu);
  sh_free(ctx, m, sizeof *m);
}

static const char *shape_str(int rank, const int64_t *shape, char *buf, size_t size) {
  return sh_shape_str(rank, shape, buf, size);
}

/* The shapes the identity initializers have a meaning for (valid shape). */
static sheaf_status identity_check(sheaf_ctx *ctx, const char *name, int rank,
                                   const int64_t *shape, sheaf_init init) {
  if (init != SHEAF_INIT_IDENTITY && init != SHEAF_INIT_IDENTITY_ROWS) return SHEAF_OK;
  const char *what =
      init == SHEAF_INIT_IDENTITY ? "SHEAF_INIT_IDENTITY" : "SHEAF_INIT_IDENTITY_ROWS";
  char b[64];
  shape_str(rank, shape, b, sizeof b);
  if (rank != 2)
    return sh_fail(ctx, SHEAF_ERR_SHAPE, "sheaf_model_param: '%s': %s needs a matrix, not shape %s",
                   name, what, b);
  int64_t r = shape[0], c = shape[1], k = isqrt(c);
  if (init == SHEAF_INIT_IDENTITY && r % c != 0 && c % r != 0)
    return sh_fail(ctx, SHEAF_ERR_SHAPE,
                   "sheaf_model_param: '%s': %s of shape %s: neither side is a multiple of the "
                   "other, so it is not made of identity blocks",
                   name, what, b);
  if (init == SHEAF_INIT_IDENTITY_ROWS && k * k != c)
    return sh_fail(ctx, SHEAF_ERR_SHAPE,
                   "sheaf_model_param: '%s': %s of shape %s: a row of %lld floats is not an n x n "
                   "matrix",
                   name, what, b, (long long)c);
  return SHEAF_OK;
}

sheaf_status sheaf_model_param(sheaf_model *m, const char *name, int rank, const int64_t *shape,
                               sheaf_init init, sheaf_param *out) {
  if (out) *out = SHEAF_NO_PARAM;
  if (!m) return SHEAF_ERR_INVALID_ARG;
  sheaf_ctx *ctx = m->ctx;
  if (!name || !*name || !shape || !out)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_model_param: %s is NULL or empty",
                   !name || !*name ? "name"
                   : !shape        ? "shape"
                                   : "out");
  if (rank < 1 || rank > 2)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_model_param: '%s': rank %d (1 or 2)", name,
                   rank);
  if ((unsigned)init > SHEAF_INIT_IDENTITY_ROWS)
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_model_param: '%s': unknown init %d", name,
                   (int)init);
  double bytes = sizeof(float);
  for (int i = 0; i < rank; i++) {
    if (shape[i] < 1 || shape[i] > INT32_MAX) {
      char b[64];
      return sh_fail(ctx, SHEAF_ERR_SHAPE,
                     "sheaf_model_param: '%s': invalid shape %s (each size in 1..2147483647)", name,
                     shape_str(rank, shape, b, sizeof b));
    }
    bytes *= (double)shape[i];
  }
  char b[64];
  sheaf_status st = sh_check_budget(ctx, bytes, "sheaf_model_param: '%s' of shape %s", name,
                                    shape_str(rank, shape, b, sizeof b));
  if (st) return st;
  st = identity_check(ctx, name, rank, shape, init);
  if (st) return st;
  for (uint32_t i = 0; i < m->n_params; i++)
    if (strcmp(m->params[i].name, name) == 0)
      return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_model_param: '%s' is declared twice", name);
  if (m->n_params >= (1u << 24))
    return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_model_param: too many parameters");
  st = sh_grow(ctx, (void **)&m->params, &m->cap_params, m->n_params + 1, sizeof *m->params);
  if (st) return st;
  sh_param p = {0};
  p.name = sh_strdup(ctx, name);
  if (!p.name) return SHEAF_ERR_NOMEM;
  p.rank = rank;
  p.shape[0] = shape[0];
  p.shape[1] = rank == 2 ? shape[1] : 1;
  p.numel = (size_t)(bytes / sizeof(float)); /* exact below 2^53 bytes (the budget) */
  p.init = init;
  p.data = sh_alloc(ctx, p.numel * sizeof(float), 64);
  if (!p.data) {
    sh_strfree(ctx, p.name);
    return SHEAF_ERR_NOMEM;
  }
  param_init(&p, m->seed);
  m->params[m->n_params++] = p;
  *out = (sheaf_param){m->n_params, m->tag};
  return SHEAF_OK;
}

sheaf_status sheaf_model_seed(sheaf_model *m, uint64_t seed) {
  if (!m) return SHEAF_ERR_INVALID_ARG;
  m->seed = seed;
  for (uint32_t i = 0; i < m->n_params; i++) param_init(&m->params[i], seed);
  return SHEAF_OK;
}

sheaf_status sheaf_model_find(const sheaf_model *m, const char *name, sheaf_param *out) {
  if (out) *out = SHEAF_NO_PARAM;
  if (!m || !name || !out)
    return m ? sh_fail(m->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_model_find: %s is NULL",
                       !name ? "name" : "out")
             : SHEAF_ERR_INVALID_ARG;
  for (uint32_t i = 0; i < m->n_params; i++)
    if (strcmp(m->params[i].name, name) == 0) {
      *out = (sheaf_param){i + 1, m->tag};
      return SHEAF_OK;
    }
  return sh_fail(m->ctx, SHEAF_ERR_NOT_FOUND, "sheaf_model_find: no parameter '%s'", name);
}

size_t sheaf_model_param_count(const sheaf_model *m) { return m ? m->n_params : 0; }

float *sheaf_model_param_data(sheaf_model *m, sheaf_param p, int *rank, const int64_t **shape) {
  sh_param *q = sh_model_param_get(m, p);
  if (!q) return NULL;
  if (rank) *rank = q->rank;
  if (shape) *shape = q->shape;
  new_version(q); /* the caller may write: repack before the next use */
  return q->data;
}

const float *sheaf_model_param_values(const sheaf_model *m, sheaf_param p, int *rank,
                                      const int64_t **shape) {
  const sh_param *q = m ? sh_model_param_get(m, p) : NULL;
  if (!q) return NULL;
  if (rank) *rank = q->rank;
  if (shape) *shape = q->shape;
  return q->data;
}

sheaf_status sheaf_model_param_update(sheaf_model *m, sheaf_param p) {
  if (!m) return SHEAF_ERR_INVALID_ARG;
  sh_param *q = sh_model_param_get(m, p);
  if (!q) return sh_fail(m->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_model_param_update: invalid parameter");
  new_version(q); /* repacked before the next use */
  return SHEAF_OK;
}

sheaf_status sheaf_model_param_set(sheaf_model *m, sheaf_param p, const float *values, int64_t n) {
  if (!m) return SHEAF_ERR_INVALID_ARG;
  sh_param *q = sh_model_param_get(m, p);
  if (!q) return sh_fail(m->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_model_param_set: invalid parameter");
  if (!values) return sh_fail(m->ctx, SHEAF_ERR_INVALID_ARG, "sheaf_model_param_set: values is NULL");
  if (n < 0 || (uint64_t)n != q->numel)
    return sh_fail(m->ctx, SHEAF_ERR_SHAPE,
                   "sheaf_model_param_set: '%s' has %zu values, got %lld", q->name, q->numel,
                   (long long)n);
  memcpy(q->data, values, q->numel * sizeof(float));
  new_version(q);
  return SHEAF_OK;
}

const char *sheaf_model_param_name(const sheaf_model *m, sheaf_param p) {
  sh_param *q = sh_model_param_get(m, p);
  return q ? q->name : NULL;
}

/* ---------------------------------------------------------- load / save */

static float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 31, man = h & 1023, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else { /* subnormal: renormalize */
      int e = -1;
      do {
        man <<= 1;
        e++;
      } while (!(man & 1024));
      bits = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 1023) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | man << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static void convert(sheaf_dtype dt, const unsigned char *src, size_t n, float *dst) {
  for (size_t i = 0; i < n; i++) {
    switch (dt) {
    case SHEAF_F32: memcpy(&dst[i], src + 4 * i, 4); break;
    case SHEAF_F64: {
      double d;
      memcpy(&d, src + 8 * i, 8);
      dst[i] = (float)d;
      break;
    }
    case SHEAF_F16: {
      uint16_t h;
      memcpy(&h, src + 2 * i, 2);
      dst[i] = f16_to_f32(h);
      break;
    }
    case SHEAF_BF16: {
      uint16_t h;
      memcpy(&h, src + 2 * i, 2);
      uint32_t b = (uint32_t)h << 16;
      memcpy(&dst[i], &b, 4);
      break;
    }
    default: dst[i] = 0; break;
    }
  }
}

/* Appends to a bounded message buffer. */
static void msg_add(char *buf, size_t cap, size_t *len, const char *fmt, ...) SH_PRINTF(4, 5);
static void msg_add(char *buf, size_t cap, size_t *len, const char *fmt, ...) {
  if (*len + 1 >= cap) return;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(buf + *len, cap - *len, fmt, ap);
  va_end(ap);
  if (w > 0) *len = *len + (size_t)w < cap ? *len + (size_t)w : cap - 1;
}

sheaf_status sheaf_model_allow_nonfinite(sheaf_model *m, int allow) {
  if (!m) return SHEAF_ERR_INVALID_ARG;
  m->allow_nonfinite = allow != 0;
  return SHEAF_OK;
}

/* "[i, j]" for element k of a parameter of this shape (row-major). */
static const char *index_str(int rank, const int64_t *shape, size_t k, char *buf, size_t cap) {
  if (rank == 2 && shape[1] > 0)
    snprintf(buf, cap, "%zu, i.e. [%lld, %lld]", k, (long long)(k / (size_t)shape[1]),
             (long long)(k % (size_t)shape[1]));
  else
    snprintf(buf, cap, "%zu", k);
  return buf;
}

sheaf_status sheaf_model_load(sheaf_model *m, const char *path) {
  if (!m) return SHEAF_ERR_INVALID_ARG;
  sheaf_ctx *ctx = m->ctx;
  if (!path) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_model_load: path is NULL");
  sheaf_st_file *f;
  sheaf_status st = sheaf_st_open(ctx, path, &f);
  if (st) return st;
  st = sheaf_model_load_st(m, f);
  sheaf_st_close(f);
  return st;
}

sheaf_status sheaf_model_load_st(sheaf_model *m, const sheaf_st_file *f) {
  if (!m) return SHEAF_ERR_INVALID_ARG;
  sheaf_ctx *ctx = m->ctx;
  if (!f) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_model_load_st: f is NULL");
  const char *path = sh_st_file_name(f);
  /* check everything first: a failed load changes nothing */
  char msg[SH_ERR_MAX - 64];
  size_t len = 0;
  int problems = 0, nonfinite = 0;
  sheaf_status kind = SHEAF_OK;
  for (uint32_t i = 0; i < m->n_params; i++) {
    sh_param *p = &m->params[i];
    char want[64], got[64];
    shape_str(p->rank, p->shape, want, sizeof want);
    long j = sheaf_st_find(f, p->name);
    if (j < 0) {
      msg_add(msg, sizeof msg, &len, "%s missing '%s' %s", problems ? ";" : "", p->name, want);
      problems++;
      if (!kind) kind = SHEAF_ERR_NOT_FOUND;
      continue;
    }
    int rank = sheaf_st_rank(f, (size_t)j);
    const int64_t *shape = sheaf_st_shape(f, (size_t)j);
    bool same = rank == p->rank;
    for (int a = 0; same && a < rank; a++) same = shape[a] == p->shape[a];
    if (!same) {
      msg_add(msg, sizeof msg, &len, "%s '%s' has shape %s but the model declares %s",
              problems ? ";" : "", p->name, shape_str(rank, shape, got, sizeof got), want);
      problems++;
      kind = SHEAF_ERR_SHAPE;
      continue;
    }
    sheaf_dtype dt = sheaf_st_dtype(f, (size_t)j);
    if (dt != SHEAF_F32 && dt != SHEAF_F16 && dt != SHEAF_BF16 && dt != SHEAF_F64) {
      msg_add(msg, sizeof msg, &len, "%s '%s' has dtype %s (F32, F16, BF16 or F64 expected)",
              problems ? ";" : "", p->name, sheaf_dtype_name(dt));
      problems++;
      if (!kind || kind == SHEAF_ERR_NOT_FOUND) kind = SHEAF_ERR_FORMAT;
      continue;
    }
    if (m->allow_nonfinite) continue;
    /* NaN or ±Inf (or an F64 beyond float's range) would silently turn every
     * output they reach into nan: refuse them, naming the first */
    size_t first;
    uint64_t bad = sh_count_nonfinite(dt, sheaf_st_bytes(f, (size_t)j), p->numel, true, &first);
    if (bad) {
      float v;
      convert(dt, (const unsigned char *)sheaf_st_bytes(f, (size_t)j) + first * sheaf_dtype_size(dt),
              1, &v);
      char at[64];
      msg_add(msg, sizeof msg, &len,
              "%s '%s' holds %llu non-finite value%s (NaN or infinity%s): the first, %s, at "
              "index %s",
              problems ? ";" : "", p->name, (unsigned long long)bad, bad == 1 ? "" : "s",
              dt == SHEAF_F64 ? ", or beyond float's range" : "",
              isnan(v) ? "nan" : v > 0 ? "inf" : "-inf",
              index_str(p->rank, p->shape, first, at, sizeof at));
      problems++;
      nonfinite++;
      if (!kind || kind == SHEAF_ERR_NOT_FOUND) kind = SHEAF_ERR_FORMAT;
    }
  }
  if (problems)
    return sh_fail(ctx, kind, "%s: %d problem%s:%s%s", path, problems, problems > 1 ? "s" : "",
                   msg,
                   nonfinite ? " (weights must be finite; to load them anyway: "
                               "sheaf_model_allow_nonfinite, or sheaf run --allow-nonfinite)"
                             : "");
  for (uint32_t i = 0; i < m->n_params; i++) {
    sh_param *p = &m->params[i];
    size_t j = (size_t)sheaf_st_find(f, p->name);
    convert(sheaf_st_dtype(f, j), sheaf_st_bytes(f, j), p->numel, p->data);
    new_version(p);
  }
  return SHEAF_OK;
}

sheaf_status sheaf_model_save(const sheaf_model *m, const char *path) {
  return sheaf_model_save_meta(m, path, 0, NULL);
}

sheaf_status sheaf_model_save_meta(const sheaf_model *m, const char *path, size_t n_meta,
                                   const char *const *meta_kv) {
  if (!m) return SHEAF_ERR_INVALID_ARG;
  sheaf_ctx *ctx = m->ctx;
  if (!path) return sh_fail(ctx, SHEAF_ERR_INVALID_ARG, "sheaf_model_save: path is NULL");
  size_t n = m->n_params;
  const char **names = sh_calloc(ctx, n ? n : 1, sizeof *names);
  sheaf_tensor **ts = sh_calloc(ctx, n ? n : 1, sizeof *ts);
  sheaf_status st = names && ts ? SHEAF_OK : SHEAF_ERR_NOMEM;
  for (size_t i = 0; st == SHEAF_OK && i < n; i++) {
    sh_param *p = &m->params[i];
    names[i] = p->name;
    st = sheaf_tensor_wrap(ctx, SHEAF_F32, p->rank, p->shape, NULL, p->data, NULL, NULL, &ts[i]);
  }
  if (st == SHEAF_OK)
    st = sheaf_st_write(ctx, path, n, names, (const sheaf_tensor *const *)ts, n_meta, meta_kv);
  for (size_t i = 0; ts && i < n; i++) sheaf_tensor_free(ts[i]);
  sh_free(ctx, names, (n ? n : 1) * sizeof *names);
  sh_free(ctx, ts, (n ? n : 1) * sizeof *ts);
  return st;
}

/* -------------------------------------------------------------- packing */

/* The packed forms are built on first use, possibly by several runner
 * threads at once: under the model's lock (uncontended: one lock per batch). */
enum { PACK_PLAIN, PACK_GATES, PACK_T }; /* p->packed, p->gates, p->packed_t */

/* The slot, version and B's shape (k x n) of p's packed form `kind`: B = W
 * [in, out], or B = W^T [out, in] (element (k, n) at W[n * out + k]). */
static sh_gemm_packed_b **pack_slot(sh_param *p, int kind, uint64_t **ver, int64_t *k, int64_t *n) {
  *ver = kind == PACK_GATES ? &p->gates_ver : kind == PACK_T ? &p->packed_t_ver : &p->packed_ver;
  *k = kind == PACK_T ? p->shape[1] : p->shape[0];
  *n = kind == PACK_T ? p->shape[0] : p->shape[1];
  return kind == PACK_GATES ? &p->gates : kind == PACK_T ? &p->packed_t : &p->packed;
}

/* A stale packed form is packed again in place (same shape: no allocation,
 * no fresh pages), else replaced. */
static sheaf_status packed_locked(sheaf_model *m, uint32_t id, int kind, const sh_gemm_packed_b **out) {
  sh_param *p = &m->params[id - 1];
  uint64_t *ver;
  int64_t k, n;
  sh_gemm_packed_b **slot = pack_slot(p, kind, &ver, &k, &n);
  if (!*slot || *ver != p->version) {
    if (!*slot || (*slot)->k != k || (*slot)->n != n || !sh_gemm_repack_b(m->ctx, p->data, p->shape[1], *slot)) {
      sh_gemm_packed_b *pb;
      int flags = kind == PACK_GATES ? SH_GEMM_PACK_GATES : kind == PACK_T ? SH_GEMM_PACK_TRANS : 0;
      sheaf_status st = sh_gemm_pack_b(m->ctx, p->data, p->shape[1], k, n, flags, &pb);
      if (st) return st;
      sh_gemm_packed_b_free(m->ctx, *slot);
      *slot = pb;
    }
    *ver = p->version;
  }
  *out = *slot;
  return SHEAF_OK;
}

sheaf_status sh_model_packed(sheaf_model *m, uint32_t id, bool gates,
                             const sh_gemm_packed_b **out) {
  pthread_mutex_lock(&m->mu);
  sheaf_status st = packed_locked(m, id, gates ? PACK_GATES : PACK_PLAIN, out);
  pthread_mutex_unlock(&m->mu);
  return st;
}

sheaf_status sh_model_packed_t(sheaf_model *m, uint32_t id, const sh_gemm_packed_b **out) {
  pthread_mutex_lock(&m->mu);
  sheaf_status st = packed_locked(m, id, PACK_T, out);
  pthread_mutex_unlock(&m->mu);
  return st;
}

/* Up to RF_MAX stale forms repacked by one pool run, a panel per task. */
#define RF_MAX 32
typedef struct rf_job {
  int n;
  sh_gemm_packed_b *pb[RF_MAX];
  const float *b[RF_MAX];
  int64_t ldb[RF_MAX], first[RF_MAX + 1]; /* form f: tasks first[f] .. first[f + 1] */
  int64_t floats;                         /* packed by the run */
} rf_job;

static void rf_task(void *arg, int64_t task, int tid) {
  (void)tid;
  const rf_job *j = arg;
  int f = 0;
  while (task >= j->first[f + 1]) f++;
  sh_gemm_repack_b_panel(j->b[f], j->ldb[f], j->pb[f], task - j->first[f]);
}

static void rf_run(sheaf_model *m, rf_job *j) {
  /* on the pool when large, as sh_gemm_pack_b */
  if (j->n) sh_pool_run(m->ctx->pool, j->first[j->n], rf_task, j, j->floats >= 32768 && j->first[j->n] > 1 ? 0 : 1);
  j->n = 0;
  j->floats = 0;
}

void sh_model_refresh_packed(sheaf_model *m) {
  pthread_mutex_lock(&m->mu);
  rf_job j;
  j.n = 0;
  j.first[0] = 0;
  j.floats = 0;
  for (uint32_t i = 0; i < m->n_params; i++) {
    sh_param *p = &m->params[i];
    for (int kind = PACK_PLAIN; kind <= PACK_T; kind++) {
      uint64_t *ver;
      int64_t k, n;
      sh_gemm_packed_b *pb = *pack_slot(p, kind, &ver, &k, &n);
      /* only a form of its own shape, packed in place (nothing to allocate:
       * cannot fail; any other is repacked on its next use) */
      if (!pb || *ver == p->version || pb->k != k || pb->n != n || p->shape[1] < (kind == PACK_T ? k : n)) continue;
      if (j.n == RF_MAX) rf_run(m, &j);
      j.pb[j.n] = pb, j.b[j.n] = p->data, j.ldb[j.n] = p->shape[1];
      j.first[j.n + 1] = j.first[j.n] + pb->n_panels;
      j.floats += pb->n_panels * pb->k * SH_GEMM_NR;
      j.n++;
      *ver = p->version;
    }
  }
  rf_run(m, &j);
  pthread_mutex_unlock(&m->mu);
}

static sheaf_status stack_id_locked(sheaf_model *m, int n, const uint32_t *ids, uint32_t *out) {
  for (uint32_t i = 0; i < m->n_stacks; i++) {
    sh_param_stack *s = &m->stacks[i];
    if (s->n == n && memcmp(s->ids, ids, (size_t)n * sizeof *ids) == 0) {
      *out = i + 1;
      return SHEAF_OK;
    }
  }
  sheaf_status st =
      sh_grow(m->ctx, (void **)&m->stacks, &m->cap_stacks, m->n_stacks + 1, sizeof *m->stacks);
  if (st) return st;
  sh_param_stack *s = &m->stacks[m->n_stacks++];
  memset(s, 0, sizeof *s);
  s->n = n;
  memcpy(s->ids, ids, (size_t)n * sizeof *ids);
  *out = m->n_stacks;
  return SHEAF_OK;
}

sheaf_status sh_model_stack_id(sheaf_model *m, int n, const uint32_t *ids, uint32_t *out) {
  pthread_mutex_lock(&m->mu);
  sheaf_status st = stack_id_locked(m, n, ids, out);
  pthread_mutex_unlock(&m->mu);
  return st;
}

static sheaf_status stack_packed_locked(sheaf_model *m, uint32_t stack, const sh_gemm_packed_b **out) {
  sh_param_stack *s = &m->stacks[stack - 1];
  uint64_t ver = 0;
  int64_t k = 0, ncols = m->params[s->ids[0] - 1].shape[1];
  for (int i = 0; i < s->n; i++) {
    ver += m->params[s->ids[i] - 1].version;
    k += m->params[s->ids[i] - 1].shape[0];
  }
  if (!s->packed || s->ver != ver) {
    size_t bytes = (size_t)(k * ncols) * sizeof(float);
    float *tmp = sh_alloc(m->ctx, bytes ? bytes : 64, 64);
    if (!tmp) return SHEAF_ERR_NOMEM;
    size_t off = 0;
    for (int i = 0; i < s->n; i++) {
      sh_param *p = &m->params[s->ids[i] - 1];
      memcpy(tmp + off, p->data, p->numel * sizeof(float));
      off += p->numel;
    }
    sh_gemm_packed_b *pb;
    sheaf_status st = sh_gemm_pack_b(m->ctx, tmp, ncols, k, ncols, 0, &pb);
    sh_free(m->ctx, tmp, bytes ? bytes : 64);
    if (st) return st;
    sh_gemm_packed_b_free(m->ctx, s->packed);
    s->packed = pb;
    s->ver = ver;
  }
  *out = s->packed;
  return SHEAF_OK;
}

sheaf_status sh_model_stack_packed(sheaf_model *m, uint32_t stack, const sh_gemm_packed_b **out) {
  pthread_mutex_lock(&m->mu);
  sheaf_status st = stack_packed_locked(m, stack, out);
  pthread_mutex_unlock(&m->mu);
  return st;
}
