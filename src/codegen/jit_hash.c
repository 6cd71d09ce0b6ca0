/*
 * jit_hash.c — SipHash-2-4 with 64- or 128-bit tags (the reference
 * algorithm of Aumasson and Bernstein, streaming): the JIT cache's keys and
 * checksums. Checked against the reference vectors in tests/test_jit.c.
 */
#include "jit_int.h"

#include <string.h>

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

static inline void sip_round(sh_jit_hash *h) {
  h->v0 += h->v1;
  h->v1 = ROTL(h->v1, 13);
  h->v1 ^= h->v0;
  h->v0 = ROTL(h->v0, 32);
  h->v2 += h->v3;
  h->v3 = ROTL(h->v3, 16);
  h->v3 ^= h->v2;
  h->v0 += h->v3;
  h->v3 = ROTL(h->v3, 21);
  h->v3 ^= h->v0;
  h->v2 += h->v1;
  h->v1 = ROTL(h->v1, 17);
  h->v1 ^= h->v2;
  h->v2 = ROTL(h->v2, 32);
}

static inline uint64_t load_le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static inline void compress(sh_jit_hash *h, uint64_t m) {
  h->v3 ^= m;
  sip_round(h);
  sip_round(h);
  h->v0 ^= m;
}

void sh_jit_hash_init(sh_jit_hash *h, const uint8_t key[16], int out_len) {
  uint64_t k0 = load_le64(key), k1 = load_le64(key + 8);
  h->v0 = 0x736f6d6570736575ull ^ k0;
  h->v1 = 0x646f72616e646f6dull ^ k1;
  h->v2 = 0x6c7967656e657261ull ^ k0;
  h->v3 = 0x7465646279746573ull ^ k1;
  if (out_len == 16) h->v1 ^= 0xee;
  h->tail = 0;
  h->len = 0;
  h->out_len = out_len;
}

void sh_jit_hash_update(sh_jit_hash *h, const void *data, size_t n) {
  const unsigned char *p = data;
  /* finish a pending word byte by byte, then whole words */
  while (n && (h->len & 7)) {
    h->tail |= (uint64_t)*p++ << (8 * (h->len & 7));
    h->len++;
    n--;
    if (!(h->len & 7)) {
      compress(h, h->tail);
      h->tail = 0;
    }
  }
  for (; n >= 8; n -= 8, p += 8, h->len += 8) compress(h, load_le64(p));
  for (; n; n--, h->len++) h->tail |= (uint64_t)*p++ << (8 * (h->len & 7));
}

static void store_le64(uint8_t *out, uint64_t v) {
  for (int i = 0; i < 8; i++) out[i] = (uint8_t)(v >> (8 * i));
}

void sh_jit_hash_final(sh_jit_hash *h, uint8_t *out) {
  compress(h, h->tail | (h->len << 56));
  h->v2 ^= h->out_len == 16 ? 0xee : 0xff;
  for (int i = 0; i < 4; i++) sip_round(h);
  store_le64(out, h->v0 ^ h->v1 ^ h->v2 ^ h->v3);
  if (h->out_len != 16) return;
  h->v1 ^= 0xdd;
  for (int i = 0; i < 4; i++) sip_round(h);
  store_le64(out + 8, h->v0 ^ h->v1 ^ h->v2 ^ h->v3);
}

void sh_jit_hex(const uint8_t *bytes, size_t n, char *hex) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    hex[2 * i] = digits[bytes[i] >> 4];
    hex[2 * i + 1] = digits[bytes[i] & 15];
  }
  hex[2 * n] = '\0';
}

/* The cache's key: any fixed value ("sheaf jit cache!"); changing it
 * changes every key (bump the entry format instead). */
static const uint8_t cache_key[16] = {'s', 'h', 'e', 'a', 'f', ' ', 'j', 'i',
                                      't', ' ', 'c', 'a', 'c', 'h', 'e', '!'};

void sh_jit_hash_hex(const void *data, size_t n, char hex[33]) {
  sh_jit_hash h;
  uint8_t tag[16];
  sh_jit_hash_init(&h, cache_key, 16);
  sh_jit_hash_update(&h, data, n);
  sh_jit_hash_final(&h, tag);
  sh_jit_hex(tag, 16, hex);
}

void sh_jit_hash_begin(sh_jit_hash *h) { sh_jit_hash_init(h, cache_key, 16); }
