/* A fast 64-bit hash for in-memory indexes: 8-byte lanes mixed by
 * multiplication and rotation, with a strong final avalanche.  Not
 * cryptographic.  Also the record hash of the shard checksums the cache keeps
 * in its LMDB state (src/cache/internal.h, bc__sum_add): those are computed
 * in host byte order, like everything else in that file, which LMDB itself
 * ties to the host's byte order and word size. */
#include "config.h"

#include <string.h>

#include "common/internal.h"

static const uint64_t K1 = 0x9e3779b97f4a7c15ULL; /* 2^64 / golden ratio */
static const uint64_t K2 = 0xc2b2ae3d27d4eb4fULL;
static const uint64_t K3 = 0x165667b19e3779f9ULL;

static inline uint64_t rotl(uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}

static inline uint64_t load64(const unsigned char *p) {
  uint64_t v;
  memcpy(&v, p, 8); /* host order: see the header */
  return v;
}

/* Final mix: every input bit affects every output bit. */
static inline uint64_t avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

uint64_t bc__hash64(const void *data, size_t size, uint64_t seed) {
  const unsigned char *p = data;
  uint64_t a = seed ^ K1, b = seed + K2, c = seed ^ K3, d = seed - K1;
  size_t n = size;
  /* Four independent lanes keep the multiplier pipeline busy. */
  while (n >= 32) {
    a = rotl(a ^ (load64(p) * K2), 31) * K1;
    b = rotl(b ^ (load64(p + 8) * K2), 29) * K1;
    c = rotl(c ^ (load64(p + 16) * K2), 27) * K1;
    d = rotl(d ^ (load64(p + 24) * K2), 25) * K1;
    p += 32;
    n -= 32;
  }
  uint64_t h = rotl(a, 1) + rotl(b, 7) + rotl(c, 12) + rotl(d, 18);
  while (n >= 8) {
    h = rotl(h ^ (load64(p) * K2), 27) * K1 + K3;
    p += 8;
    n -= 8;
  }
  uint64_t tail = 0;
  for (size_t i = 0; i < n; i++) tail |= (uint64_t)p[i] << (8 * i);
  h = rotl(h ^ (tail * K3), 23) * K2;
  return avalanche(h ^ (uint64_t)size);
}
