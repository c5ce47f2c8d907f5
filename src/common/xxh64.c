/*
 * XXH64 (xxHash, 64-bit; Yann Collet's specification, seed and input
 * little-endian): the hash whose low 32 bits a zstd frame carries as its
 * content checksum.  Used to add that checksum to frames compressed
 * exactly as bagz compresses them (codec.c), which zstd's own API cannot
 * do without changing the compression parameters.
 */
#include "config.h"

#include <string.h>

#include "common/internal.h"

static const uint64_t P1 = 0x9E3779B185EBCA87ULL, P2 = 0xC2B2AE3D27D4EB4FULL,
                      P3 = 0x165667B19E3779F9ULL, P4 = 0x85EBCA77C2B2AE63ULL,
                      P5 = 0x27D4EB2F165667C5ULL;

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint32_t load32le(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

static inline uint64_t round64(uint64_t acc, uint64_t input) {
  acc += input * P2;
  acc = rotl64(acc, 31);
  return acc * P1;
}

static inline uint64_t merge64(uint64_t acc, uint64_t v) {
  acc ^= round64(0, v);
  return acc * P1 + P4;
}

uint64_t bc__xxh64(const void *data, size_t size, uint64_t seed) {
  const unsigned char *p = data, *end = p + size;
  uint64_t h;
  if (size >= 32) {
    uint64_t v1 = seed + P1 + P2, v2 = seed + P2, v3 = seed, v4 = seed - P1;
    do {
      v1 = round64(v1, bc__load_u64le(p));
      v2 = round64(v2, bc__load_u64le(p + 8));
      v3 = round64(v3, bc__load_u64le(p + 16));
      v4 = round64(v4, bc__load_u64le(p + 24));
      p += 32;
    } while (end - p >= 32);
    h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
    h = merge64(h, v1);
    h = merge64(h, v2);
    h = merge64(h, v3);
    h = merge64(h, v4);
  } else {
    h = seed + P5;
  }
  h += (uint64_t)size;
  while (end - p >= 8) {
    h ^= round64(0, bc__load_u64le(p));
    h = rotl64(h, 27) * P1 + P4;
    p += 8;
  }
  if (end - p >= 4) {
    h ^= (uint64_t)load32le(p) * P1;
    h = rotl64(h, 23) * P2 + P3;
    p += 4;
  }
  while (p < end) {
    h ^= (uint64_t)(*p++) * P5;
    h = rotl64(h, 11) * P1;
  }
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  h ^= h >> 32;
  return h;
}
