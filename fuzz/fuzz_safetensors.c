/*
 * fuzz_safetensors.c — libFuzzer target for the safetensors reader (and, by
 * way of the header, the JSON reader): any input either fails with a
 * message naming the file, or opens into a file whose every name, shape,
 * byte and metadata entry is readable, whose tensors all load (zero-copy
 * or copied), and which writes back (in memory) to a file that reads back
 * identical. Any mismatch traps; ASan/UBSan catch everything else.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "io/safetensors.h"
#include "sheaf.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


static void same_files(const sheaf_st_file *a, const sheaf_st_file *b) {
  REQUIRE(sheaf_st_count(a) == sheaf_st_count(b));
  for (size_t i = 0; i < sheaf_st_count(a); i++) {
    REQUIRE(strcmp(sheaf_st_name(a, i), sheaf_st_name(b, i)) == 0);
    REQUIRE(sheaf_st_dtype(a, i) == sheaf_st_dtype(b, i));
    int r = sheaf_st_rank(a, i);
    REQUIRE(r == sheaf_st_rank(b, i));
    if (r) REQUIRE(memcmp(sheaf_st_shape(a, i), sheaf_st_shape(b, i), (size_t)r * 8) == 0);
    size_t n = sheaf_st_nbytes(a, i);
    REQUIRE(n == sheaf_st_nbytes(b, i));
    if (n) REQUIRE(memcmp(sheaf_st_bytes(a, i), sheaf_st_bytes(b, i), n) == 0);
  }
  REQUIRE(sheaf_st_metadata_count(a) == sheaf_st_metadata_count(b));
  for (size_t i = 0; i < sheaf_st_metadata_count(a); i++) {
    REQUIRE(strcmp(sheaf_st_metadata_key(a, i), sheaf_st_metadata_key(b, i)) == 0);
    REQUIRE(strcmp(sheaf_st_metadata_value(a, i), sheaf_st_metadata_value(b, i)) == 0);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sheaf_ctx *ctx = fuzz_ctx();
  sheaf_st_file *f = NULL;
  sheaf_status st = sheaf_st_open_memory(ctx, data, size, "fuzz", &f);
  if (st != SHEAF_OK) {
    REQUIRE(f == NULL);
    REQUIRE(st == SHEAF_ERR_FORMAT || st == SHEAF_ERR_NOMEM);
    REQUIRE(strncmp(sheaf_ctx_last_error(ctx), "fuzz: ", 6) == 0);
    return 0;
  }

  /* Touch everything. */
  size_t n = sheaf_st_count(f), nm = sheaf_st_metadata_count(f);
  unsigned sum = 0;
  bool empty_name = false;
  const char **names = calloc(n + 1, sizeof *names);
  sheaf_tensor **ts = calloc(n + 1, sizeof *ts);
  const char **meta = calloc(2 * nm + 1, sizeof *meta);
  REQUIRE(names && ts && meta);
  const unsigned char *prev_end = NULL;
  for (size_t i = 0; i < n; i++) {
    names[i] = sheaf_st_name(f, i);
    empty_name |= names[i][0] == '\0';
    REQUIRE(sheaf_st_find(f, names[i]) == (long)i);
    REQUIRE((unsigned)sheaf_st_dtype(f, i) < SHEAF_DTYPE_COUNT);
    int r = sheaf_st_rank(f, i);
    REQUIRE(r >= 0);
    uint64_t numel = 1;
    for (int d = 0; d < r; d++) {
      REQUIRE(sheaf_st_shape(f, i)[d] >= 0);
      numel *= (uint64_t)sheaf_st_shape(f, i)[d];
    }
    size_t nb = sheaf_st_nbytes(f, i);
    REQUIRE(nb == numel * sheaf_dtype_size(sheaf_st_dtype(f, i)));
    const unsigned char *b = sheaf_st_bytes(f, i);
    REQUIRE(b >= data && b + nb <= data + size);
    if (prev_end) REQUIRE(b == prev_end);
    prev_end = b + nb;
    for (size_t k = 0; k < nb; k++) sum += b[k];
    REQUIRE(sheaf_st_tensor(ctx, f, names[i], &ts[i]) == SHEAF_OK);
    if (nb) REQUIRE(memcmp(sheaf_tensor_data(ts[i]), b, nb) == 0);
  }
  if (n) REQUIRE(prev_end == data + size);
  for (size_t i = 0; i < nm; i++) {
    meta[2 * i] = sheaf_st_metadata_key(f, i);
    meta[2 * i + 1] = sheaf_st_metadata_value(f, i);
    sum += (unsigned)strlen(meta[2 * i]) + (unsigned)strlen(meta[2 * i + 1]);
  }
  __asm__ volatile("" : : "r"(sum));

  /* Write it back in memory (views outlive the file) and read that back. */
  sh_buf out;
  sh_buf_init(&out, ctx);
  st = sh_st_write_buf(ctx, "rt", n, names, (const sheaf_tensor *const *)ts, nm, meta, &out);
  if (empty_name) {
    REQUIRE(st == SHEAF_ERR_INVALID_ARG); /* the writer refuses empty names */
  } else {
    REQUIRE(st == SHEAF_OK);
    REQUIRE(out.len >= 16 && out.data[0] % 8 == 0); /* header padded to 8 */
    sheaf_st_file *g = NULL;
    REQUIRE(sheaf_st_open_memory(ctx, out.data, out.len, "rt", &g) == SHEAF_OK);
    same_files(f, g);
    sheaf_st_close(g);
  }
  sh_buf_free(&out);
  sheaf_st_close(f);
  for (size_t i = 0; i < n; i++) sheaf_tensor_free(ts[i]);
  free(names);
  free(ts);
  free(meta);
  return 0;
}
