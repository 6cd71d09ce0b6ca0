/*
 * test_safetensors.c — the safetensors reader and writer: bit-exact round
 * trips, the header layout of the writer, a file written by Python's
 * safetensors package (tests/data/st/python.safetensors), zero-copy views
 * outliving the file, the misaligned-copy path, every malformed input the
 * reader rejects (status and message), and allocation-failure injection.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "base/buf.h"
#include "harness.h"
#include "io/safetensors.h"

#define PY_FILE "tests/data/st/python.safetensors"

/* ---------------------------------------------------------------- helpers */

/* A contiguous tensor whose bytes are `bytes` (numel * dtype size of them). */
static sheaf_tensor *mk_tensor(sheaf_ctx *ctx, sheaf_dtype dt, int rank, const int64_t *shape,
                               const void *bytes) {
  sheaf_tensor *t = NULL;
  if (!CHECK_OK(ctx, sheaf_tensor_create(ctx, dt, rank, shape, &t))) return NULL;
  size_t n = (size_t)sheaf_tensor_numel(t) * sheaf_dtype_size(dt);
  if (n && bytes) memcpy(sheaf_tensor_data(t), bytes, n);
  return t;
}

/* A safetensors image: u64 header length, header, data. Returns its size. */
static size_t mk_file(unsigned char *buf, size_t cap, const char *hdr, const void *data,
                      size_t dn) {
  size_t hn = strlen(hdr);
  if (8 + hn + dn > cap) {
    th_fail(__FILE__, __LINE__, "mk_file: image too large");
    return 0;
  }
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hn >> (8 * i));
  memcpy(buf + 8, hdr, hn);
  if (dn) memcpy(buf + 8 + hn, data, dn);
  return 8 + hn + dn;
}

/* Opening the image, from memory and from a file, fails with `status` and a
 * message holding `needle` (prefixed by the name). */
static bool rejects_image(const unsigned char *img, size_t n, sheaf_status status,
                          const char *needle, int line) {
  sheaf_ctx *ctx = th_ctx();
  bool ok = true;
  for (int pass = 0; pass < 2; pass++) {
    sheaf_st_file *f = (sheaf_st_file *)(uintptr_t)1;
    sheaf_status st;
    const char *name;
    if (pass == 0) {
      name = "m.safetensors";
      st = sheaf_st_open_memory(ctx, img, n, name, &f);
    } else {
      name = th_write_tmp("bad.safetensors", img, n);
      if (!name) return false;
      st = sheaf_st_open(ctx, name, &f);
    }
    const char *msg = sheaf_ctx_last_error(ctx);
    if (st != status || f != NULL || strncmp(msg, name, strlen(name)) != 0 ||
        !strstr(msg, needle)) {
      th_fail(__FILE__, line, "%s: got %s \"%s\", expected %s with \"%s\"",
              pass ? "sheaf_st_open" : "sheaf_st_open_memory", sheaf_status_str(st), msg,
              sheaf_status_str(status), needle);
      ok = false;
    }
    if (st == SHEAF_OK) sheaf_st_close(f);
  }
  return ok;
}

static bool rejects_hdr(const char *hdr, const void *data, size_t dn, const char *needle,
                        int line) {
  static unsigned char img[1 << 16];
  size_t n = mk_file(img, sizeof img, hdr, data, dn);
  return n && rejects_image(img, n, SHEAF_ERR_FORMAT, needle, line);
}

#define REJECTS(hdr, data, dn, needle) rejects_hdr(hdr, data, dn, needle, __LINE__)

/* Opens an image from memory; NULL (with a check failure) if it fails. */
static sheaf_st_file *open_mem(const void *img, size_t n) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_st_file *f = NULL;
  if (!CHECK_OK(ctx, sheaf_st_open_memory(ctx, img, n, "m.safetensors", &f))) return NULL;
  return f;
}

static bool file_bytes(const char *path, unsigned char *buf, size_t cap, size_t *n) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return false;
  *n = fread(buf, 1, cap, fp);
  fclose(fp);
  return true;
}

/* ------------------------------------------------------------ round trips */

TEST(st_roundtrip_f32_special_values_bit_exact) {
  sheaf_ctx *ctx = th_ctx();
  const uint32_t bits[] = {
      0x7FC00000u, 0x7FC00001u, 0xFFC12345u, 0x7F800001u, /* quiet/signalling NaN payloads */
      0x80000000u, 0x00000000u,                           /* -0, +0 */
      0x00000001u, 0x807FFFFFu,                           /* denormals */
      0x7F800000u, 0xFF800000u, 0x7F7FFFFFu, 0x3F800000u  /* inf, -inf, max, 1 */
  };
  int64_t shape[2] = {3, 4};
  sheaf_tensor *t = mk_tensor(ctx, SHEAF_F32, 2, shape, bits);
  REQUIRE(t);
  const char *path = th_tmp_path("f32.safetensors");
  const char *names[] = {"w"};
  const sheaf_tensor *ts[] = {t};
  REQUIRE_OK(ctx, sheaf_st_write(ctx, path, 1, names, ts, 0, NULL));
  sheaf_tensor_free(t);

  sheaf_st_file *f;
  REQUIRE_OK(ctx, sheaf_st_open(ctx, path, &f));
  REQUIRE_EQ_INT(sheaf_st_count(f), 1);
  CHECK_EQ_STR(sheaf_st_name(f, 0), "w");
  CHECK_EQ_INT(sheaf_st_dtype(f, 0), SHEAF_F32);
  CHECK_EQ_INT(sheaf_st_rank(f, 0), 2);
  CHECK_EQ_INT(sheaf_st_shape(f, 0)[0], 3);
  CHECK_EQ_INT(sheaf_st_shape(f, 0)[1], 4);
  CHECK_EQ_SIZE(sheaf_st_nbytes(f, 0), sizeof bits);
  CHECK(memcmp(sheaf_st_bytes(f, 0), bits, sizeof bits) == 0);
  sheaf_tensor *r;
  REQUIRE_OK(ctx, sheaf_st_tensor(ctx, f, "w", &r));
  CHECK(memcmp(sheaf_tensor_data(r), bits, sizeof bits) == 0);
  CHECK(sheaf_tensor_data(r) == sheaf_st_bytes(f, 0)); /* zero-copy */
  CHECK_EQ_INT(sheaf_tensor_shape(r)[1], 4);
  sheaf_tensor_free(r);
  sheaf_st_close(f);
  /* The temporary file was renamed away. */
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  CHECK(access(tmp, F_OK) != 0);
}

TEST(st_roundtrip_i32_and_metadata) {
  sheaf_ctx *ctx = th_ctx();
  int32_t v[6] = {INT32_MIN, -1, 0, 1, 123456789, INT32_MAX};
  int64_t shape[1] = {6};
  sheaf_tensor *t = mk_tensor(ctx, SHEAF_I32, 1, shape, v);
  REQUIRE(t);
  const char *names[] = {"ids"};
  const sheaf_tensor *ts[] = {t};
  const char *meta[] = {"format", "pt", "quote\"back\\slash", "tab\tnl\n\x01 é中"};
  const char *path = th_tmp_path("i32.safetensors");
  REQUIRE_OK(ctx, sheaf_st_write(ctx, path, 1, names, ts, 2, meta));
  sheaf_tensor_free(t);
  sheaf_st_file *f;
  REQUIRE_OK(ctx, sheaf_st_open(ctx, path, &f));
  CHECK_EQ_INT(sheaf_st_dtype(f, 0), SHEAF_I32);
  CHECK(memcmp(sheaf_st_bytes(f, 0), v, sizeof v) == 0);
  REQUIRE_EQ_INT(sheaf_st_metadata_count(f), 2);
  CHECK_EQ_STR(sheaf_st_metadata_key(f, 0), "format");
  CHECK_EQ_STR(sheaf_st_metadata_value(f, 0), "pt");
  CHECK_EQ_STR(sheaf_st_metadata_key(f, 1), meta[2]);
  CHECK_EQ_STR(sheaf_st_metadata_value(f, 1), meta[3]);
  CHECK(sheaf_st_metadata_key(f, 2) == NULL);
  sheaf_st_close(f);
}

TEST(st_roundtrip_scalar_and_zero_size) {
  sheaf_ctx *ctx = th_ctx();
  double pi = 3.141592653589793;
  sheaf_tensor *s = mk_tensor(ctx, SHEAF_F64, 0, NULL, &pi);
  int64_t z1[2] = {0, 3}, z2[3] = {4, 0, 2};
  sheaf_tensor *e1 = mk_tensor(ctx, SHEAF_F32, 2, z1, NULL);
  sheaf_tensor *e2 = mk_tensor(ctx, SHEAF_I64, 3, z2, NULL);
  uint8_t b = 7;
  sheaf_tensor *u = mk_tensor(ctx, SHEAF_U8, 0, NULL, &b);
  REQUIRE(s && e1 && e2 && u);
  const char *names[] = {"e1", "pi", "e2", "u"};
  const sheaf_tensor *ts[] = {e1, s, e2, u};
  const char *path = th_tmp_path("scalar.safetensors");
  REQUIRE_OK(ctx, sheaf_st_write(ctx, path, 4, names, ts, 0, NULL));
  for (int i = 0; i < 4; i++) sheaf_tensor_free((sheaf_tensor *)(uintptr_t)ts[i]);
  sheaf_st_file *f;
  REQUIRE_OK(ctx, sheaf_st_open(ctx, path, &f));
  REQUIRE_EQ_INT(sheaf_st_count(f), 4);
  /* offset order; zero-size ties keep header order */
  CHECK_EQ_STR(sheaf_st_name(f, 0), "e1");
  CHECK_EQ_STR(sheaf_st_name(f, 1), "pi");
  CHECK_EQ_STR(sheaf_st_name(f, 2), "e2");
  CHECK_EQ_STR(sheaf_st_name(f, 3), "u");
  long i = sheaf_st_find(f, "pi");
  REQUIRE(i >= 0);
  CHECK_EQ_INT(sheaf_st_rank(f, (size_t)i), 0);
  CHECK_EQ_SIZE(sheaf_st_nbytes(f, (size_t)i), 8);
  sheaf_tensor *r;
  REQUIRE_OK(ctx, sheaf_st_tensor(ctx, f, "pi", &r));
  CHECK_EQ_INT(sheaf_tensor_rank(r), 0);
  CHECK(*(double *)sheaf_tensor_data(r) == pi);
  sheaf_tensor_free(r);
  REQUIRE_OK(ctx, sheaf_st_tensor(ctx, f, "e2", &r));
  CHECK_EQ_INT(sheaf_tensor_numel(r), 0);
  CHECK_EQ_INT(sheaf_tensor_shape(r)[2], 2);
  sheaf_tensor_free(r);
  i = sheaf_st_find(f, "e1");
  CHECK_EQ_SIZE(sheaf_st_nbytes(f, (size_t)i), 0);
  REQUIRE_OK(ctx, sheaf_st_tensor(ctx, f, "u", &r));
  CHECK_EQ_INT(*(uint8_t *)sheaf_tensor_data(r), 7);
  sheaf_tensor_free(r);
  sheaf_st_close(f);
}

TEST(st_write_strided_views_row_major) {
  sheaf_ctx *ctx = th_ctx();
  int64_t shape[3] = {2, 3, 4};
  float v[24];
  for (int i = 0; i < 24; i++) v[i] = (float)i;
  sheaf_tensor *t = mk_tensor(ctx, SHEAF_F32, 3, shape, v);
  REQUIRE(t);
  int perm[3] = {2, 0, 1};
  sheaf_tensor *p, *sl, *sel;
  REQUIRE_OK(ctx, sheaf_tensor_permute(ctx, t, perm, &p));         /* [4,2,3] */
  REQUIRE_OK(ctx, sheaf_tensor_slice(ctx, t, 2, 1, 4, 2, &sl));    /* [2,3,2] step 2 */
  REQUIRE_OK(ctx, sheaf_tensor_select(ctx, t, 1, 1, &sel));        /* [2,4] */
  CHECK(!sheaf_tensor_is_contiguous(p));
  CHECK(!sheaf_tensor_is_contiguous(sl));
  const char *names[] = {"perm", "slice", "select"};
  const sheaf_tensor *ts[] = {p, sl, sel};
  const char *path = th_tmp_path("strided.safetensors");
  REQUIRE_OK(ctx, sheaf_st_write(ctx, path, 3, names, ts, 0, NULL));
  sheaf_st_file *f;
  REQUIRE_OK(ctx, sheaf_st_open(ctx, path, &f));
  for (int k = 0; k < 3; k++) {
    sheaf_tensor *c;
    REQUIRE_OK(ctx, sheaf_tensor_contiguous(ctx, ts[k], &c));
    long i = sheaf_st_find(f, names[k]);
    REQUIRE(i >= 0);
    size_t nb = (size_t)sheaf_tensor_numel(c) * 4;
    CHECK_EQ_SIZE(sheaf_st_nbytes(f, (size_t)i), nb);
    CHECK(memcmp(sheaf_st_bytes(f, (size_t)i), sheaf_tensor_data(c), nb) == 0);
    CHECK_EQ_INT(sheaf_st_rank(f, (size_t)i), sheaf_tensor_rank(c));
    for (int d = 0; d < sheaf_tensor_rank(c); d++)
      CHECK_EQ_INT(sheaf_st_shape(f, (size_t)i)[d], sheaf_tensor_shape(c)[d]);
    sheaf_tensor_free(c);
  }
  /* spot check: perm[j][a][b] = t[a][b][j] */
  long i = sheaf_st_find(f, "perm");
  const float *pd = sheaf_st_bytes(f, (size_t)i);
  CHECK_EQ_INT(pd[1 * 6 + 1 * 3 + 2], 1 * 12 + 2 * 4 + 1);
  sheaf_st_close(f);
  sheaf_tensor_free(p);
  sheaf_tensor_free(sl);
  sheaf_tensor_free(sel);
  sheaf_tensor_free(t);
}

TEST(st_write_header_layout_and_escaping) {
  sheaf_ctx *ctx = th_ctx();
  int64_t s2[1] = {2};
  uint16_t h[2] = {0x3C00, 0xC000};
  int8_t c[2] = {-1, 5};
  sheaf_tensor *a = mk_tensor(ctx, SHEAF_F16, 1, s2, h);
  sheaf_tensor *b = mk_tensor(ctx, SHEAF_I8, 1, s2, c);
  REQUIRE(a && b);
  const char *names[] = {"z\"q\\b\n\x1f é", "a"};
  const sheaf_tensor *ts[] = {a, b};
  const char *meta[] = {"k", "v"};
  sh_buf out;
  sh_buf_init(&out, ctx);
  REQUIRE_OK(ctx, sh_st_write_buf(ctx, "mem", 2, names, ts, 1, meta, &out));
  const char *expect =
      "{\"__metadata__\":{\"k\":\"v\"},"
      "\"z\\\"q\\\\b\\n\\u001f é\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]},"
      "\"a\":{\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":[4,6]}}";
  size_t el = strlen(expect), padded = (el + 7) / 8 * 8;
  REQUIRE(out.len == 8 + padded + 6);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | out.data[i];
  CHECK_EQ_SIZE(n, padded);
  CHECK(memcmp(out.data + 8, expect, el) == 0);
  for (size_t i = el; i < padded; i++) CHECK_EQ_INT(out.data[8 + i], ' ');
  CHECK(memcmp(out.data + 8 + padded, h, 4) == 0);
  CHECK(memcmp(out.data + 8 + padded + 4, c, 2) == 0);
  /* and it reads back, names unescaped */
  sheaf_st_file *f = open_mem(out.data, out.len);
  if (f) {
    CHECK_EQ_STR(sheaf_st_name(f, 0), names[0]);
    CHECK(sheaf_st_find(f, names[0]) == 0);
    CHECK(sheaf_st_find(f, "a") == 1);
    sheaf_st_close(f);
  }
  /* No tensors, no metadata: "{}" padded to 8. */
  sh_buf_clear(&out);
  REQUIRE_OK(ctx, sh_st_write_buf(ctx, "mem", 0, NULL, NULL, 0, NULL, &out));
  CHECK_EQ_SIZE(out.len, 16);
  CHECK(memcmp(out.data + 8, "{}      ", 8) == 0);
  sh_buf_free(&out);
  sheaf_tensor_free(a);
  sheaf_tensor_free(b);
}

TEST(st_write_rejects_bad_arguments) {
  sheaf_ctx *ctx = th_ctx();
  int64_t s1[1] = {1};
  float x = 1;
  sheaf_tensor *t = mk_tensor(ctx, SHEAF_F32, 1, s1, &x);
  REQUIRE(t);
  const char *path = th_tmp_path("bad.safetensors");
  const sheaf_tensor *ts[] = {t, t};
  const sheaf_tensor *tnull[] = {t, NULL};
  const char *dup[] = {"a", "a"};
  const char *nul[] = {"a", NULL};
  const char *empty[] = {"a", ""};
  const char *meta_name[] = {"a", "__metadata__"};
  const char *bad_utf8[] = {"a", "\xC3\x28"};
  const char *ok[] = {"a", "b"};
  struct {
    size_t n;
    const char *const *names;
    const sheaf_tensor *const *ts;
    size_t nm;
    const char *const *meta;
    const char *needle;
  } cases[] = {
      {2, NULL, ts, 0, NULL, "names is NULL"},
      {2, ok, NULL, 0, NULL, "tensors is NULL"},
      {2, dup, ts, 0, NULL, "duplicate tensor name 'a'"},
      {2, nul, ts, 0, NULL, "names[1] is NULL"},
      {2, empty, ts, 0, NULL, "names[1] is empty"},
      {2, meta_name, ts, 0, NULL, "'__metadata__' is reserved"},
      {2, bad_utf8, ts, 0, NULL, "names[1] is not valid UTF-8"},
      {2, ok, tnull, 0, NULL, "tensors[1] ('b') is NULL"},
      {2, ok, ts, 1, NULL, "meta_kv is NULL"},
      {2, ok, ts, 2, (const char *const[]){"k", "v", "k", "w"}, "duplicate metadata key 'k'"},
      {2, ok, ts, 1, (const char *const[]){"k", NULL}, "meta_kv[1] is NULL"},
  };
  for (size_t i = 0; i < SH_ARRAY_LEN(cases); i++) {
    sheaf_status st =
        sheaf_st_write(ctx, path, cases[i].n, cases[i].names, cases[i].ts, cases[i].nm,
                       cases[i].meta);
    if (!CHECK_EQ_INT(st, SHEAF_ERR_INVALID_ARG)) continue;
    CHECK_CONTAINS(sheaf_ctx_last_error(ctx), cases[i].needle);
    CHECK(strncmp(sheaf_ctx_last_error(ctx), path, strlen(path)) == 0);
  }
  CHECK(access(path, F_OK) != 0); /* nothing was created */
  CHECK_STATUS(ctx, sheaf_st_write(ctx, NULL, 0, NULL, NULL, 0, NULL), SHEAF_ERR_INVALID_ARG);
  /* Unwritable destination: an I/O error naming the path; no file left. */
  const char *nodir = th_tmp_path("no/such/dir/w.safetensors");
  CHECK_STATUS(ctx, sheaf_st_write(ctx, nodir, 2, ok, ts, 0, NULL), SHEAF_ERR_IO);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "no/such/dir/w.safetensors");
  sheaf_tensor_free(t);
}

/* ------------------------------------------------------------- real files */

TEST(st_reads_python_file) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_st_file *f;
  REQUIRE_OK(ctx, sheaf_st_open(ctx, PY_FILE, &f));
  CHECK_EQ_SIZE(sheaf_st_count(f), 9);
  /* metadata (order is the writer's hash order: look both up) */
  REQUIRE_EQ_INT(sheaf_st_metadata_count(f), 2);
  for (size_t i = 0; i < 2; i++) {
    const char *k = sheaf_st_metadata_key(f, i), *v = sheaf_st_metadata_value(f, i);
    if (strcmp(k, "format") == 0) CHECK_EQ_STR(v, "np");
    else if (CHECK_EQ_STR(k, "note")) CHECK_EQ_STR(v, "line1\nline2 \"q\" é");
  }
  /* offsets are increasing */
  for (size_t i = 1; i < sheaf_st_count(f); i++)
    CHECK((const char *)sheaf_st_bytes(f, i) >= (const char *)sheaf_st_bytes(f, i - 1) +
                                                     sheaf_st_nbytes(f, i - 1));
  sheaf_tensor *t;
  REQUIRE_OK(ctx, sheaf_st_tensor(ctx, f, "f32", &t));
  CHECK_EQ_INT(sheaf_tensor_dtype(t), SHEAF_F32);
  CHECK_EQ_INT(sheaf_tensor_shape(t)[0], 2);
  CHECK_EQ_INT(sheaf_tensor_shape(t)[1], 3);
  for (int i = 0; i < 6; i++) CHECK(((float *)sheaf_tensor_data(t))[i] == i * 0.5f - 1.0f);
  sheaf_tensor_free(t);
  REQUIRE_OK(ctx, sheaf_st_tensor(ctx, f, "bf16", &t));
  CHECK_EQ_INT(sheaf_tensor_dtype(t), SHEAF_BF16);
  for (int i = 0; i < 8; i++) {
    uint32_t u = (uint32_t)((uint16_t *)sheaf_tensor_data(t))[i] << 16;
    float x;
    memcpy(&x, &u, 4);
    CHECK(x == i * 0.25f);
  }
  sheaf_tensor_free(t);
  REQUIRE_OK(ctx, sheaf_st_tensor(ctx, f, "f16", &t));
  const uint16_t f16[5] = {0xC000, 0xBC00, 0x0000, 0x3C00, 0x4000}; /* -2 -1 0 1 2 */
  CHECK(memcmp(sheaf_tensor_data(t), f16, 10) == 0);
  sheaf_tensor_free(t);
  REQUIRE_OK(ctx, sheaf_st_tensor(ctx, f, "i64", &t));
  for (int i = 0; i < 4; i++)
    CHECK_EQ_INT(((int64_t *)sheaf_tensor_data(t))[i], i * -3 + ((int64_t)1 << 40));
  sheaf_tensor_free(t);
  REQUIRE_OK(ctx, sheaf_st_tensor(ctx, f, "u8", &t));
  for (int i = 0; i < 7; i++) CHECK_EQ_INT(((uint8_t *)sheaf_tensor_data(t))[i], i * 37 % 256);
  sheaf_tensor_free(t);
  REQUIRE_OK(ctx, sheaf_st_tensor(ctx, f, "flags", &t));
  CHECK_EQ_INT(sheaf_tensor_dtype(t), SHEAF_BOOL);
  CHECK(memcmp(sheaf_tensor_data(t), "\1\0\1", 3) == 0);
  sheaf_tensor_free(t);
  REQUIRE_OK(ctx, sheaf_st_tensor(ctx, f, "scalar", &t));
  CHECK_EQ_INT(sheaf_tensor_rank(t), 0);
  CHECK(*(double *)sheaf_tensor_data(t) == 3.25);
  sheaf_tensor_free(t);
  REQUIRE_OK(ctx, sheaf_st_tensor(ctx, f, "empty", &t));
  CHECK_EQ_INT(sheaf_tensor_numel(t), 0);
  sheaf_tensor_free(t);
  REQUIRE_OK(ctx, sheaf_st_tensor(ctx, f, "odd.\"quoted\"\\path\n\té中", &t));
  CHECK(((float *)sheaf_tensor_data(t))[1] == -2.5f);
  sheaf_tensor_free(t);
  sheaf_st_close(f);
}

TEST(st_reads_hand_built_header) {
  /* whitespace everywhere, escapes incl. a surrogate pair, fields in another
   * order, trailing spaces, a U8 tensor that leaves the F32 misaligned */
  const char *hdr =
      " {\r\n \"__metadata__\" : { \"who\" : \"\\u00e9\\ud83d\\ude00\\/\\b\\f\" } ,\n"
      "\t\"b\\u0020\\\"x\\\"\": {\"shape\": [ 1 ], \"data_offsets\": [0, 1], \"dtype\": \"U8\"},"
      "\"c\":{\"data_offsets\":[1,9],\"dtype\":\"F32\",\"shape\":[2]} }   ";
  unsigned char data[9] = {42};
  float fv[2] = {1.25f, -8.0f};
  memcpy(data + 1, fv, 8);
  static unsigned char img[1024];
  size_t n = mk_file(img, sizeof img, hdr, data, sizeof data);
  sheaf_st_file *f = open_mem(img, n);
  REQUIRE(f);
  CHECK_EQ_SIZE(sheaf_st_count(f), 2);
  CHECK_EQ_STR(sheaf_st_name(f, 0), "b \"x\"");
  CHECK_EQ_STR(sheaf_st_name(f, 1), "c");
  CHECK_EQ_STR(sheaf_st_metadata_value(f, 0), "é\xF0\x9F\x98\x80/\b\f");
  CHECK_EQ_INT(sheaf_st_dtype(f, 1), SHEAF_F32);
  sheaf_ctx *ctx = th_ctx();
  sheaf_tensor *t;
  REQUIRE_OK(ctx, sheaf_st_tensor(ctx, f, "c", &t));
  CHECK(((float *)sheaf_tensor_data(t))[1] == -8.0f);
  sheaf_tensor_free(t);
  sheaf_st_close(f);
}

TEST(st_empty_header_is_valid) {
  static unsigned char img[64];
  const char *hdrs[] = {"{}", "{}      ", "{\"__metadata__\":{}}", "{\"__metadata__\":null}"};
  for (size_t i = 0; i < SH_ARRAY_LEN(hdrs); i++) {
    size_t n = mk_file(img, sizeof img, hdrs[i], NULL, 0);
    sheaf_st_file *f = open_mem(img, n);
    if (!f) continue;
    CHECK_EQ_SIZE(sheaf_st_count(f), 0);
    CHECK_EQ_SIZE(sheaf_st_metadata_count(f), 0);
    CHECK_EQ_INT(sheaf_st_find(f, "x"), -1);
    CHECK(sheaf_st_name(f, 0) == NULL);
    sheaf_st_close(f);
  }
}

TEST(st_find_thousands_of_tensors) {
  sheaf_ctx *ctx = th_ctx();
  enum { N = 3000 };
  static char namebuf[N][24];
  static const char *names[N];
  static const sheaf_tensor *ts[N];
  int64_t s1[1] = {1};
  for (int i = 0; i < N; i++) {
    /* names in an order unrelated to their position */
    snprintf(namebuf[i], sizeof namebuf[i], "layer.%d.w", (i * 7919) % N);
    names[i] = namebuf[i];
    int32_t v = i;
    sheaf_tensor *t = mk_tensor(ctx, SHEAF_I32, 1, s1, &v);
    REQUIRE(t);
    ts[i] = t;
  }
  const char *path = th_tmp_path("many.safetensors");
  sheaf_status st = sheaf_st_write(ctx, path, N, names, ts, 0, NULL);
  for (int i = 0; i < N; i++) sheaf_tensor_free((sheaf_tensor *)(uintptr_t)ts[i]);
  REQUIRE_OK(ctx, st);
  sheaf_st_file *f;
  REQUIRE_OK(ctx, sheaf_st_open(ctx, path, &f));
  REQUIRE_EQ_INT(sheaf_st_count(f), N);
  for (int i = 0; i < N; i++) {
    CHECK_EQ_STR(sheaf_st_name(f, (size_t)i), names[i]); /* offset order = write order */
    long k = sheaf_st_find(f, names[i]);
    CHECK_EQ_INT(k, i);
    CHECK_EQ_INT(*(const int32_t *)sheaf_st_bytes(f, (size_t)k), i);
  }
  CHECK_EQ_INT(sheaf_st_find(f, "layer.3000.w"), -1);
  CHECK_EQ_INT(sheaf_st_find(f, ""), -1);
  sheaf_tensor *t = (sheaf_tensor *)(uintptr_t)1;
  CHECK_STATUS(ctx, sheaf_st_tensor(ctx, f, "nope", &t), SHEAF_ERR_NOT_FOUND);
  CHECK(t == NULL);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "many.safetensors: no tensor named 'nope'");
  sheaf_st_close(f);
}

/* ------------------------------------------------------------- lifetimes */

TEST(st_views_outlive_close) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_st_file *f;
  REQUIRE_OK(ctx, sheaf_st_open(ctx, PY_FILE, &f));
  sheaf_tensor *a, *b, *c;
  REQUIRE_OK(ctx, sheaf_st_tensor(ctx, f, "f32", &a));
  REQUIRE_OK(ctx, sheaf_st_tensor(ctx, f, "i64", &b));
  REQUIRE_OK(ctx, sheaf_st_tensor(ctx, f, "f32", &c));
  sheaf_tensor *view;
  REQUIRE_OK(ctx, sheaf_tensor_slice(ctx, a, 1, 1, 3, 1, &view));
  sheaf_st_close(f);
  sheaf_tensor_free(a);
  /* the mapping is still there for b, c and the slice of a */
  CHECK_EQ_INT(((int64_t *)sheaf_tensor_data(b))[3], 3 * -3 + ((int64_t)1 << 40));
  CHECK(((float *)sheaf_tensor_data(c))[5] == 1.5f);
  CHECK(((float *)sheaf_tensor_data(view))[0] == -0.5f);
  sheaf_tensor_free(c);
  sheaf_tensor_free(b);
  CHECK(((float *)sheaf_tensor_data(view))[1] == 0.0f);
  sheaf_tensor_free(view); /* the last reference: unmaps (the leak check sees the rest) */
}

TEST(st_misaligned_data_is_copied) {
  sheaf_ctx *ctx = th_ctx();
  /* A 3-byte U8 tensor pushes the F32 and I64 tensors off alignment. */
  const char *hdr = "{\"p\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]},"
                    "\"f\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[3,11]},"
                    "\"q\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[11,19]}}";
  unsigned char data[19] = {1, 2, 3};
  float fv[2] = {0.5f, -3.0f};
  int64_t qv = -123456789012345;
  memcpy(data + 3, fv, 8);
  memcpy(data + 11, &qv, 8);
  static unsigned char img[1024];
  /* The header length makes data start at a multiple of 8 from img. */
  char padded[512];
  snprintf(padded, sizeof padded, "%s", hdr);
  while (strlen(padded) % 8) strcat(padded, " ");
  size_t n = mk_file(img, sizeof img, padded, data, sizeof data);
  const char *path = th_write_tmp("mis.safetensors", img, n);
  REQUIRE(path);
  sheaf_st_file *f;
  REQUIRE_OK(ctx, sheaf_st_open(ctx, path, &f));
  sheaf_tensor *t, *q, *p;
  REQUIRE_OK(ctx, sheaf_st_tensor(ctx, f, "f", &t));
  REQUIRE_OK(ctx, sheaf_st_tensor(ctx, f, "q", &q));
  REQUIRE_OK(ctx, sheaf_st_tensor(ctx, f, "p", &p));
  long i = sheaf_st_find(f, "f");
  CHECK((uintptr_t)sheaf_st_bytes(f, (size_t)i) % 4 != 0);
  CHECK(sheaf_tensor_data(t) != sheaf_st_bytes(f, (size_t)i)); /* a copy */
  CHECK_EQ_INT((uintptr_t)sheaf_tensor_data(t) % 4, 0);
  CHECK_EQ_INT((uintptr_t)sheaf_tensor_data(q) % 8, 0);
  CHECK(memcmp(sheaf_tensor_data(t), fv, 8) == 0);
  CHECK_EQ_INT(*(int64_t *)sheaf_tensor_data(q), qv);
  CHECK(sheaf_tensor_data(p) == sheaf_st_bytes(f, 0)); /* U8 is always aligned */
  sheaf_st_close(f);
  CHECK(((float *)sheaf_tensor_data(t))[1] == -3.0f);
  sheaf_tensor_free(t);
  sheaf_tensor_free(q);
  sheaf_tensor_free(p);
}

TEST(st_open_memory_shares_caller_buffer) {
  sheaf_ctx *ctx = th_ctx();
  static _Alignas(16) unsigned char buf[2048];
  size_t n = 0;
  REQUIRE(file_bytes(PY_FILE, buf + 1, sizeof buf - 1, &n)); /* deliberately odd address */
  sheaf_st_file *f;
  REQUIRE_OK(ctx, sheaf_st_open_memory(ctx, buf + 1, n, NULL, &f));
  long i = sheaf_st_find(f, "u8");
  REQUIRE(i >= 0);
  CHECK((const unsigned char *)sheaf_st_bytes(f, (size_t)i) > buf &&
        (const unsigned char *)sheaf_st_bytes(f, (size_t)i) < buf + sizeof buf);
  sheaf_tensor *u, *w;
  REQUIRE_OK(ctx, sheaf_st_tensor(ctx, f, "u8", &u));
  REQUIRE_OK(ctx, sheaf_st_tensor(ctx, f, "f32", &w)); /* misaligned now: copied */
  CHECK(sheaf_tensor_data(u) == sheaf_st_bytes(f, (size_t)i));
  sheaf_st_close(f);
  CHECK_EQ_INT(((uint8_t *)sheaf_tensor_data(u))[2], 74);
  CHECK(((float *)sheaf_tensor_data(w))[2] == 0.0f);
  sheaf_tensor_free(u);
  sheaf_tensor_free(w);
  /* a NULL buffer is an argument error; a NULL name becomes "<memory>" */
  CHECK_STATUS(ctx, sheaf_st_open_memory(ctx, NULL, 10, "x", &f), SHEAF_ERR_INVALID_ARG);
  CHECK_STATUS(ctx, sheaf_st_open_memory(ctx, buf, 3, NULL, &f), SHEAF_ERR_FORMAT);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "<memory>: file is 3 bytes");
}

/* -------------------------------------------------------- malformed input */

TEST(st_rejects_unreadable_files) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_st_file *f = (sheaf_st_file *)(uintptr_t)1;
  const char *missing = th_tmp_path("missing.safetensors");
  CHECK_STATUS(ctx, sheaf_st_open(ctx, missing, &f), SHEAF_ERR_IO);
  CHECK(f == NULL);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "missing.safetensors: cannot open");
  const char *dir = th_tmp_path("");
  CHECK_STATUS(ctx, sheaf_st_open(ctx, dir, &f), SHEAF_ERR_IO);
  CHECK_STATUS(ctx, sheaf_st_open(ctx, NULL, &f), SHEAF_ERR_INVALID_ARG);
  CHECK_STATUS(ctx, sheaf_st_open(ctx, PY_FILE, NULL), SHEAF_ERR_INVALID_ARG);
}

TEST(st_rejects_truncated_files) {
  unsigned char img[256] = {0};
  CHECK(rejects_image(img, 0, SHEAF_ERR_FORMAT, ": file is 0 bytes, too short", __LINE__));
  memset(img, 0, 5);
  CHECK(rejects_image(img, 5, SHEAF_ERR_FORMAT, ": file is 5 bytes, too short", __LINE__));
  /* header cut: N says 40 but only 10 bytes follow */
  size_t n = mk_file(img, sizeof img, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],", NULL, 0);
  img[0] = 40;
  CHECK(rejects_image(img, 18, SHEAF_ERR_FORMAT,
                      ": header length 40 exceeds the file (18 bytes)", __LINE__));
  memset(img, 0xFF, 8);
  CHECK(rejects_image(img, n, SHEAF_ERR_FORMAT,
                      ": header length 18446744073709551615 exceeds the file", __LINE__));
  /* header length 0 */
  memset(img, 0, 8);
  CHECK(rejects_image(img, 12, SHEAF_ERR_FORMAT, ": header length is 0", __LINE__));
  /* data cut */
  CHECK(REJECTS("{\"emb\":{\"dtype\":\"F32\",\"shape\":[2,512],\"data_offsets\":[0,4096]}}",
                img, 100, ": tensor 'emb': data_offsets [0, 4096) exceed the data region (100 bytes)"));
  /* a header cut in the middle of the JSON */
  CHECK(REJECTS("{\"a\":{\"dtype\":\"U8\",\"sha", NULL, 0, "header is not valid JSON"));
}

TEST(st_rejects_header_too_large) {
  sheaf_ctx *ctx = th_ctx();
  /* A sparse file just large enough that only the 100 MB limit applies. */
  const char *path = th_tmp_path("huge.safetensors");
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(fd >= 0);
  unsigned char len8[8];
  uint64_t hn = 100000001;
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(hn >> (8 * i));
  CHECK(write(fd, len8, 8) == 8);
  CHECK(ftruncate(fd, (off_t)(hn + 8)) == 0);
  close(fd);
  sheaf_st_file *f;
  CHECK_STATUS(ctx, sheaf_st_open(ctx, path, &f), SHEAF_ERR_FORMAT);
  CHECK_CONTAINS(sheaf_ctx_last_error(ctx),
                 "huge.safetensors: header length 100000001 exceeds the limit of 100000000 bytes");
  unlink(path);
}

TEST(st_rejects_invalid_json) {
  static const struct {
    const char *hdr, *needle;
  } cases[] = {
      {"{\"a\":}", "expected a value, found '}'"},
      {"{\"a\":1,}", "expected a string key in object, found '}'"},
      {"{\"a\" 1}", "expected ':' after object key"},
      {"{\"a\":[1 2]}", "expected ',' or ']' in array"},
      {"{} x", "unexpected 'x' after the JSON value"},
      {"{}\0", "unexpected byte 0x00 after the JSON value"},
      {"{\"a\":tru}", "expected a value"},
      {"{\"a\":01}", "leading zero"},
      {"{\"a\":-}", "expected a digit"},
      {"{\"a\":1.}", "expected a digit after '.'"},
      {"{\"a\":1e}", "expected a digit in the exponent"},
      {"{\"a\x01\":1}", "control character 0x01 in string"},
      {"{\"a\tb\":1}", "control character 0x09 in string"},
      {"{\"\\q\":1}", "invalid escape '\\' followed by 'q'"},
      {"{\"\\u12G4\":1}", "invalid \\u escape"},
      {"{\"\\ud800\":1}", "lone high surrogate \\uD800"},
      {"{\"\\ud800\\u0041\":1}", "lone high surrogate"},
      {"{\"\\udc00\":1}", "lone low surrogate \\uDC00"},
      {"{\"\xC3\x28\":1}", "invalid UTF-8 (byte 0xC3)"},
      {"{\"\xC0\xAF\":1}", "invalid UTF-8 (byte 0xC0)"},          /* overlong */
      {"{\"\xED\xA0\x80\":1}", "invalid UTF-8 (byte 0xED)"},      /* encoded surrogate */
      {"{\"\xF4\x90\x80\x80\":1}", "invalid UTF-8 (byte 0xF4)"},  /* > U+10FFFF */
      {"{\xC3\xA9:1}", "expected a string key in object, found byte 0xC3"},
      {"{\"abc", "unterminated string"},
      {"{\"a\":[[[[[[[[[[1]]]]]]]]]]}", "nesting deeper than 8 levels"},
  };
  for (size_t i = 0; i < SH_ARRAY_LEN(cases); i++) {
    const char *h = cases[i].hdr;
    static unsigned char img[256];
    /* the NUL case needs its length spelled out */
    size_t hl = strcmp(h, "{}") == 0 ? 3 : strlen(h);
    for (int k = 0; k < 8; k++) img[k] = (unsigned char)((uint64_t)hl >> (8 * k));
    memcpy(img + 8, h, hl);
    if (!rejects_image(img, 8 + hl, SHEAF_ERR_FORMAT, cases[i].needle, __LINE__))
      th_fail(__FILE__, __LINE__, "case %zu: %s", i, h);
    else
      CHECK_CONTAINS(sheaf_ctx_last_error(th_ctx()), "header is not valid JSON");
  }
}

TEST(st_rejects_non_object_header) {
  CHECK(REJECTS("[]", NULL, 0, ": header is a JSON array, expected an object"));
  CHECK(REJECTS("\"x\"", NULL, 0, ": header is a JSON string, expected an object"));
  CHECK(REJECTS("12", NULL, 0, ": header is a JSON number"));
  CHECK(REJECTS("null", NULL, 0, ": header is a JSON null"));
}

TEST(st_rejects_bad_dtype) {
  unsigned char d[8] = {0};
  CHECK(REJECTS("{\"x\":{\"dtype\":\"F99\",\"shape\":[1],\"data_offsets\":[0,4]}}", d, 4,
                ": tensor 'x': unknown dtype 'F99'"));
  CHECK(REJECTS("{\"x\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", d, 4,
                "unknown dtype 'f32'"));
  CHECK(REJECTS("{\"x\":{\"dtype\":\"F32\\u0000\",\"shape\":[1],\"data_offsets\":[0,4]}}", d, 4,
                "unknown dtype 'F32\\x00'"));
  CHECK(REJECTS("{\"x\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", d, 4,
                ": tensor 'x': dtype must be a string, found number"));
}

TEST(st_rejects_bad_shape) {
  unsigned char d[16] = {0};
  static const struct {
    const char *shape, *needle;
  } cases[] = {
      {"[-1]", "shape[0] = -1 is negative"},
      {"[-0]", "shape[0] = -0 is negative"},
      {"[2.0]", "shape[0] = 2.0 is not an integer"},
      {"[1e1]", "shape[0] = 1e1 is not an integer"},
      {"[\"4\"]", "shape[0] must be an integer, found string"},
      {"[[4]]", "shape[0] must be an integer, found array"},
      {"4", "shape must be an array, found number"},
      {"null", "shape must be an array, found null"},
      {"[18446744073709551616]", "shape[0] = 18446744073709551616 does not fit in 64 bits"},
      {"[9223372036854775808]", "shape[0] = 9223372036854775808 exceeds 2^63 - 1"},
      {"[4294967296,4294967296]", "shape [4294967296, 4294967296] overflows 64 bits"},
      {"[4294967296,4294967296,0]", "overflows 64 bits"}, /* like the reference */
      {"[4611686018427387904]", "overflows 64 bits"},      /* numel ok, bytes not */
      {"[2]", "data_offsets [0, 16) span 16 bytes but F32 [2] needs 8"},
  };
  for (size_t i = 0; i < SH_ARRAY_LEN(cases); i++) {
    char hdr[256];
    snprintf(hdr, sizeof hdr,
             "{\"x\":{\"dtype\":\"F32\",\"shape\":%s,\"data_offsets\":[0,16]}}", cases[i].shape);
    if (!REJECTS(hdr, d, 16, cases[i].needle)) th_fail(__FILE__, __LINE__, "case %zu", i);
  }
  /* a rank over the limit */
  static char big[16384];
  strcpy(big, "{\"x\":{\"dtype\":\"U8\",\"shape\":[1");
  for (int i = 0; i < 1100; i++) strcat(big, ",1");
  strcat(big, "],\"data_offsets\":[0,1]}}");
  CHECK(REJECTS(big, d, 1, "rank 1101 exceeds the limit"));
}

TEST(st_rejects_bad_offsets) {
  unsigned char d[16] = {0};
  static const struct {
    const char *offs, *needle;
  } cases[] = {
      {"[8,0]", "data_offsets [8, 0) are reversed (begin > end)"},
      {"[0]", "data_offsets has 1 entries, expected 2"},
      {"[0,8,8]", "data_offsets has 3 entries, expected 2"},
      {"[-1,8]", "data_offsets[0] = -1 is negative"},
      {"[0,8.5]", "data_offsets[1] = 8.5 is not an integer"},
      {"[0,99999999999999999999]", "data_offsets[1] = 99999999999999999999 does not fit in 64 bits"},
      {"[0,18446744073709551615]", "exceed the data region (8 bytes)"},
      {"{\"b\":0}", "data_offsets must be an array of 2 integers, found object"},
      {"[0,4]", "data_offsets [0, 4) span 4 bytes but F32 [2] needs 8"},
      {"[0,12]", "data_offsets [0, 12) exceed the data region (8 bytes)"},
  };
  for (size_t i = 0; i < SH_ARRAY_LEN(cases); i++) {
    char hdr[256];
    snprintf(hdr, sizeof hdr, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":%s}}",
             cases[i].offs);
    if (!REJECTS(hdr, d, 8, cases[i].needle)) th_fail(__FILE__, __LINE__, "case %zu", i);
  }
}

TEST(st_rejects_overlap_hole_and_trailing_bytes) {
  unsigned char d[32] = {0};
  CHECK(REJECTS("{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[4,12]}}",
                d, 12, ": tensor 'b': data_offsets [4, 12) overlap tensor 'a' [0, 8)"));
  CHECK(REJECTS("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}",
                d, 12, ": tensor 'b': data_offsets [8, 12) leave a hole of 4 bytes at offset 4"));
  CHECK(REJECTS("{\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}", d, 8,
                "leave a hole of 4 bytes at offset 0"));
  CHECK(REJECTS("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", d, 6,
                ": the data region has 6 bytes but the tensors cover 4 (2 trailing bytes"));
  CHECK(REJECTS("{}", d, 3, "the data region has 3 bytes but the tensors cover 0"));
  /* the same tensor twice at one place */
  CHECK(REJECTS("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
                d, 4, "tensor 'b': data_offsets [0, 4) overlap tensor 'a' [0, 4)"));
  /* a zero-size tensor inside another one */
  CHECK(REJECTS("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                "\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[2,2]}}",
                d, 4, "tensor 'z': data_offsets [2, 2) overlap tensor 'a'"));
}

TEST(st_rejects_duplicates_and_bad_fields) {
  unsigned char d[8] = {0};
  CHECK(REJECTS("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
                d, 2, ": duplicate tensor name 'a'"));
  CHECK(REJECTS("{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
                d, 1, ": tensor 'a': duplicate field 'dtype'"));
  CHECK(REJECTS("{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", d, 1,
                ": tensor 'a': missing field 'shape'"));
  CHECK(REJECTS("{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}", d, 1, "missing field 'dtype'"));
  CHECK(REJECTS("{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", d, 1, "missing field 'data_offsets'"));
  CHECK(REJECTS("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"offsets\":1}}", d,
                1, ": tensor 'a': unexpected field 'offsets'"));
  CHECK(REJECTS("{\"a\":[1]}", d, 1, ": tensor 'a': expected an object, found array"));
  CHECK(REJECTS("{\"__metadata__\":{},\"__metadata__\":{}}", d, 0,
                ": duplicate key '__metadata__'"));
  CHECK(REJECTS("{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", d, 1,
                ": tensor name 'a\\x00b' contains a NUL character"));
  /* a long name is cut in messages */
  char hdr[512];
  snprintf(hdr, sizeof hdr, "{\"%0200d\":{\"dtype\":\"X\",\"shape\":[],\"data_offsets\":[0,0]}}", 7);
  CHECK(REJECTS(hdr, d, 0, "0000...': unknown dtype 'X'"));
}

TEST(st_rejects_bad_metadata) {
  CHECK(REJECTS("{\"__metadata__\":[]}", NULL, 0,
                ": __metadata__ must be an object of strings, found array"));
  CHECK(REJECTS("{\"__metadata__\":\"x\"}", NULL, 0, "found string"));
  CHECK(REJECTS("{\"__metadata__\":{\"a\":1}}", NULL, 0,
                ": __metadata__ 'a': value must be a string, found number"));
  CHECK(REJECTS("{\"__metadata__\":{\"a\":{\"b\":\"c\"}}}", NULL, 0, "found object"));
  CHECK(REJECTS("{\"__metadata__\":{\"a\":\"x\\u0000\"}}", NULL, 0, "contains a NUL character"));
  CHECK(REJECTS("{\"__metadata__\":{\"a\":\"x\",\"a\":\"y\"}}", NULL, 0,
                ": __metadata__: duplicate key 'a'"));
}

/* -------------------------------------------------- allocation failures */

TEST(st_open_survives_allocation_failures) {
  sheaf_ctx *ctx = th_ctx();
  bool done = false;
  for (long n = 1; n < 200 && !done; n++) {
    sheaf_st_file *f = NULL;
    th_fail_alloc_at(n);
    sheaf_status st = sheaf_st_open(ctx, PY_FILE, &f);
    th_fail_alloc_at(0);
    if (st == SHEAF_OK) {
      CHECK_EQ_SIZE(sheaf_st_count(f), 9);
      sheaf_st_close(f);
      done = true;
    } else {
      CHECK_EQ_INT(st, SHEAF_ERR_NOMEM);
      CHECK(f == NULL);
      CHECK_CONTAINS(sheaf_ctx_last_error(ctx), "out of memory");
    }
  }
  CHECK(done);
}

TEST(st_tensor_and_write_survive_allocation_failures) {
  sheaf_ctx *ctx = th_ctx();
  sheaf_st_file *f, *g;
  REQUIRE_OK(ctx, sheaf_st_open(ctx, PY_FILE, &f));
  /* the same bytes at an odd address: multi-byte tensors take the copy path */
  static _Alignas(16) unsigned char buf[2048];
  size_t len = 0;
  REQUIRE(file_bytes(PY_FILE, buf + 1, sizeof buf - 1, &len));
  REQUIRE_OK(ctx, sheaf_st_open_memory(ctx, buf + 1, len, "odd", &g));
  for (int misaligned = 0; misaligned < 2; misaligned++) {
    bool done = false;
    for (long n = 1; n < 50 && !done; n++) {
      sheaf_tensor *t = NULL;
      th_fail_alloc_at(n);
      sheaf_status st = sheaf_st_tensor(ctx, misaligned ? g : f, "f32", &t);
      th_fail_alloc_at(0);
      if (st == SHEAF_OK) {
        CHECK(((float *)sheaf_tensor_data(t))[5] == 1.5f);
        CHECK((sheaf_tensor_data(t) == sheaf_st_bytes(misaligned ? g : f, 3)) == !misaligned);
        sheaf_tensor_free(t);
        done = true;
      } else {
        CHECK_EQ_INT(st, SHEAF_ERR_NOMEM);
        CHECK(t == NULL);
      }
    }
    CHECK(done);
  }
  sheaf_st_close(g);
  /* the writer, from every tensor of the file */
  size_t n = sheaf_st_count(f);
  sheaf_tensor *ts[16];
  const char *names[16];
  for (size_t i = 0; i < n; i++) {
    names[i] = sheaf_st_name(f, i);
    REQUIRE_OK(ctx, sheaf_st_tensor(ctx, f, names[i], &ts[i]));
  }
  const char *path = th_tmp_path("oom.safetensors");
  bool done = false;
  for (long k = 1; k < 100 && !done; k++) {
    th_fail_alloc_at(k);
    sheaf_status st = sheaf_st_write(ctx, path, n, names, (const sheaf_tensor *const *)ts, 0, NULL);
    th_fail_alloc_at(0);
    if (st == SHEAF_OK) done = true;
    else {
      CHECK_EQ_INT(st, SHEAF_ERR_NOMEM);
      CHECK(access(path, F_OK) != 0);
    }
  }
  CHECK(done);
  REQUIRE_OK(ctx, sheaf_st_open(ctx, path, &g));
  for (size_t i = 0; i < n; i++) {
    CHECK_EQ_STR(sheaf_st_name(g, i), sheaf_st_name(f, i));
    CHECK(memcmp(sheaf_st_bytes(g, i), sheaf_st_bytes(f, i), sheaf_st_nbytes(f, i)) == 0);
  }
  sheaf_st_close(g);
  for (size_t i = 0; i < n; i++) sheaf_tensor_free(ts[i]);
  sheaf_st_close(f);
}

/* ------------------------------------------------------------------- CLI */

TEST(st_cli_data_stats_lists_weights) {
  const char *bin = th_sheaf_bin();
  if (!bin) return; /* run through `make test` */
  char cmd[1024], out[8192];
  snprintf(cmd, sizeof cmd, "%s data stats %s", bin, PY_FILE);
  CHECK_EQ_INT(th_run(cmd, out, sizeof out), 0);
  CHECK_CONTAINS(out, "\nf32 ");
  CHECK_CONTAINS(out, "F32    [2, 3]");
  CHECK_CONTAINS(out, "odd.\"quoted\"\\path\\n\\té中"); /* escaped: one line per tensor */
  CHECK_CONTAINS(out, "total: 9 tensors, 36 parameters, 108 bytes");
  CHECK_CONTAINS(out, "metadata (2):");
  CHECK_CONTAINS(out, "  note: line1\\nline2 \"q\" é");
  /* a malformed file: exit 1 and the reader's message */
  static unsigned char img[256];
  size_t n = mk_file(img, sizeof img, "{\"x\":{\"dtype\":\"F99\",\"shape\":[],\"data_offsets\":[0,0]}}",
                     NULL, 0);
  const char *bad = th_write_tmp("bad.safetensors", img, n);
  REQUIRE(bad);
  snprintf(cmd, sizeof cmd, "%s data stats %s", bin, bad);
  CHECK_EQ_INT(th_run(cmd, out, sizeof out), 1);
  CHECK_CONTAINS(out, "sheaf: error: ");
  CHECK_CONTAINS(out, "bad.safetensors: tensor 'x': unknown dtype 'F99'");
}
