/*
 * Keyed bijections of [0, n): a 4-round balanced Feistel network over
 * 2^(2h) >= n values (h = half_bits), restricted to [0, n) by cycle walking:
 * apply the network until the value lands below n.  Because the network is
 * a permutation of its domain, the walk always ends, and the restriction is
 * a permutation of [0, n).  The domain is below 4n, so the expected walk is
 * under 4 steps.  Nothing is stored per element.
 */
#include "config.h"

#include "seq/internal.h"

void bc__perm_init(bc__perm *p, uint64_t n, uint64_t key) {
  unsigned bits = 0;
  while (bits < 64 && (n - 1) >> bits != 0) bits++; /* bits for n - 1 */
  if (bits < 2) bits = 2;
  bits += bits & 1; /* even, so both halves have the same width */
  p->n = n;
  p->half_bits = bits / 2;
  p->half_mask = ((uint64_t)1 << p->half_bits) - 1;
  for (int r = 0; r < 4; r++)
    p->keys[r] = bc__mix64(key + 0x9e3779b97f4a7c15ULL * (uint64_t)(r + 1));
}

static inline uint64_t feistel(const bc__perm *p, uint64_t x) {
  uint64_t left = x >> p->half_bits, right = x & p->half_mask;
  for (int r = 0; r < 4; r++) {
    uint64_t next = left ^ (bc__mix64(right ^ p->keys[r]) & p->half_mask);
    left = right;
    right = next;
  }
  return (left << p->half_bits) | right;
}

uint64_t bc__perm_apply(const bc__perm *p, uint64_t x) {
  if (p->n <= 1) return x;
  do {
    x = feistel(p, x);
  } while (x >= p->n);
  return x;
}
