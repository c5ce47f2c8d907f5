/*
 * Epoch orders (seq.h, "epoch orders"): the index orders of training
 * loops as pure functions.  An epoch's shuffled order is the keyed
 * bijection of bc_seq_shuffle (perm.c) applied to positions directly,
 * without a sequence: bc_seq_shuffle(range(n), seed) resolves index p of
 * its one run through bc__perm_init(n, mix(seed) ^ mix(1)), and so does
 * bc_shuffle_indices, so the two agree for every n, seed and position.
 * The IID stream draws from splitmix64 words keyed by (seed, position).
 */
#include "config.h"

#include "seq/internal.h"

uint64_t bc_epoch_seed(uint64_t seed, uint64_t epoch) {
  return bc__mix64(seed + 0x9e3779b97f4a7c15ULL * (epoch + 1));
}

/* The key bc_seq_shuffle gives the permutation of its run 0
 * (shuffle.c: run + 1 = 1). */
static void shuffle_perm(bc__perm *p, uint64_t n, uint64_t seed) {
  bc__perm_init(p, n, bc__mix64(seed) ^ bc__mix64(1));
}

/* Whether start + (count - 1) * stride is below n (count > 0). */
static bool inside(uint64_t n, uint64_t start, uint64_t stride, size_t count) {
  if (start >= n) return false;
  if (count == 1) return true;
  return stride != 0 && (uint64_t)(count - 1) <= (n - 1 - start) / stride;
}

int bc_shuffle_indices(uint64_t n, uint64_t seed, uint64_t start,
                       uint64_t stride, size_t count, int64_t *out) {
  if (count == 0) return 0;
  if (out == NULL) return bc__error(BC_EINVAL, "bc_shuffle_indices: NULL out");
  if (!inside(n, start, stride, count))
    return bc__error(BC_ERANGE,
                     "%zu positions from %llu by %llu are not all inside an "
                     "order of %llu", count, (unsigned long long)start,
                     (unsigned long long)stride, (unsigned long long)n);
  bc__perm p;
  shuffle_perm(&p, n, seed);
  for (size_t k = 0; k < count; k++)
    out[k] = (int64_t)bc__perm_apply(&p, start + k * stride);
  return 0;
}

/* ---- IID draws ----------------------------------------------------------- */

/* The 128-bit product a * b as (high, low) words. */
static inline void mul128(uint64_t a, uint64_t b, uint64_t *hi, uint64_t *lo) {
#ifdef __SIZEOF_INT128__
  unsigned __int128 m = (unsigned __int128)a * b;
  *hi = (uint64_t)(m >> 64);
  *lo = (uint64_t)m;
#else
  uint64_t al = a & 0xffffffffu, ah = a >> 32, bl = b & 0xffffffffu, bh = b >> 32;
  uint64_t ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
  uint64_t mid = (ll >> 32) + (lh & 0xffffffffu) + (hl & 0xffffffffu);
  *lo = (mid << 32) | (ll & 0xffffffffu);
  *hi = hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
#endif
}

/* A uniform draw from [0, n) for stream position p: Lemire's multiply-shift
 * with rejection of the biased low products, re-mixing the word on each
 * rejection, so the result is exactly uniform given uniform words. */
static uint64_t iid_draw(uint64_t n, uint64_t seed, uint64_t p) {
  uint64_t x = bc__mix64(bc__mix64(seed) ^ bc__mix64(p + 0x9e3779b97f4a7c15ULL));
  uint64_t threshold = (0 - n) % n;
  for (;;) {
    uint64_t hi, lo;
    mul128(x, n, &hi, &lo);
    if (lo >= threshold) return hi;
    x = bc__mix64(x + 0x9e3779b97f4a7c15ULL);
  }
}

int bc_iid_indices(uint64_t n, uint64_t seed, uint64_t start, uint64_t stride,
                   size_t count, int64_t *out) {
  if (count == 0) return 0;
  if (out == NULL) return bc__error(BC_EINVAL, "bc_iid_indices: NULL out");
  if (n == 0)
    return bc__error(BC_EINVAL, "no indices can be drawn from an empty dataset");
  for (size_t k = 0; k < count; k++)
    out[k] = (int64_t)iid_draw(n, seed, start + k * stride);
  return 0;
}

/* ---- one rank's share of an epoch ---------------------------------------------- */

int bc_epoch_order_init(bc_epoch_order *o, unsigned version) {
  return BC__OPTIONS_INIT(bc_epoch_order, BC_EPOCH_ORDER, o, version);
}

int bc_epoch_order_count(const bc_epoch_order *o, uint64_t *count) {
  int rc = 0;
  if (o == NULL || count == NULL) {
    rc = bc__error(BC_EINVAL, "bc_epoch_order_count: NULL argument");
    goto cleanup;
  }
  if (o->version != BC_EPOCH_ORDER_VERSION) {
    rc = bc__options_version("bc_epoch_order", "BC_EPOCH_ORDER", o->version,
                             BC_EPOCH_ORDER_VERSION);
    goto cleanup;
  }
  if (o->world_size == 0 || o->rank >= o->world_size || o->start > o->length) {
    rc = bc__error(BC_EINVAL,
                   "epoch order: rank %llu of world size %llu from position "
                   "%llu of %llu (need rank < world_size, start <= length)",
                   (unsigned long long)o->rank, (unsigned long long)o->world_size,
                   (unsigned long long)o->start, (unsigned long long)o->length);
    goto cleanup;
  }
  uint64_t w = o->world_size, left = o->length - o->start;
  if (o->drop_last) left -= left % w;
  /* len(range(start + rank, start + left, w)) */
  *count = left > o->rank ? (left - o->rank - 1) / w + 1 : 0;
cleanup:
  return rc;
}

int bc_epoch_order_indices(const bc_epoch_order *o, uint64_t first,
                           size_t count, int64_t *out) {
  uint64_t have;
  int rc = bc_epoch_order_count(o, &have);
  if (rc != 0 || count == 0) goto cleanup;
  if (out == NULL) {
    rc = bc__error(BC_EINVAL, "bc_epoch_order_indices: NULL out");
    goto cleanup;
  }
  if (first > have || count > have - first) {
    rc = bc__error(BC_ERANGE,
                   "epoch order: indices %llu .. %llu of a rank that takes %llu",
                   (unsigned long long)first,
                   (unsigned long long)(first + count - 1),
                   (unsigned long long)have);
    goto cleanup;
  }
  /* Inside the epoch: start + rank + (first + count - 1) * w < length. */
  uint64_t w = o->world_size, pos = o->start + o->rank + first * w;
  if (o->shuffle) {
    bc__perm p;
    shuffle_perm(&p, o->length, bc_epoch_seed(o->seed, o->epoch));
    for (size_t k = 0; k < count; k++)
      out[k] = (int64_t)bc__perm_apply(&p, pos + k * w);
  } else {
    for (size_t k = 0; k < count; k++) out[k] = (int64_t)(pos + k * w);
  }
cleanup:
  return rc;
}
