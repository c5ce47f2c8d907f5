/*
 * train/order.c - bagcache.train.Sampler's order in plain C (order.h).
 *
 * bcpy_order_plan and bcpy_order_indices are Sampler._plan and
 * Sampler._indices (python/bagcache/train.py) line for line, in 64-bit
 * arithmetic: the Python sampler's positions are 64-bit too (they reach
 * this file's generators as unsigned 64-bit arguments), so both give the
 * same indices for every state either accepts.  tests/test_train_cloader.py
 * compares the two over every mode, drop_last, rank and world size.
 *
 * Thread safety: everything here is a pure function of its arguments but
 * the cache, which belongs to one thread.
 */
#include "train/order.h"

#include <stdlib.h>

/* splitmix64's finaliser: a bijection of 64-bit values that mixes well. */
static inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

uint64_t bcpy_epoch_seed(uint64_t seed, uint64_t epoch) {
  return mix64(seed + 0x9e3779b97f4a7c15ULL * (epoch + 1));
}

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
  uint64_t x = mix64(mix64(seed) ^ mix64(p + 0x9e3779b97f4a7c15ULL));
  uint64_t threshold = (0 - n) % n;
  for (;;) {
    uint64_t hi, lo;
    mul128(x, n, &hi, &lo);
    if (lo >= threshold) return hi;
    x = mix64(x + 0x9e3779b97f4a7c15ULL);
  }
}

void bcpy_iid_indices(uint64_t n, uint64_t seed, uint64_t start, uint64_t stride,
                      size_t count, int64_t *out) {
  for (size_t k = 0; k < count; k++) out[k] = (int64_t)iid_draw(n, seed, start + k * stride);
}

/* ---- EPOCH: the keyed bijection of bc_seq_shuffle ------------------------------------ */

/* A leaf of length n that is never read: the shuffle view over it is only
 * resolved, never fetched from. */
static int never_get(void *payload, uint64_t index, bc_buf *out) {
  (void)payload;
  (void)index;
  (void)out;
  return bc_set_errmsg(BC_EINVAL, "an index-only sequence has no records");
}

void bcpy_order_cache_free(bcpy_order_cache *c) {
  bc_seq_unref(c->shuffled);
  bc_seq_unref(c->leaf);
  c->shuffled = c->leaf = NULL;
}

/* Makes c hold shuffle(range(n), seed). */
static int cache_set(bcpy_order_cache *c, uint64_t n, uint64_t seed) {
  if (c->shuffled != NULL && c->n == n && c->seed == seed) return 0;
  bcpy_order_cache_free(c);
  bc_callback_seq_options o = BC_CALLBACK_SEQ_OPTIONS_INIT;
  o.fixed_length = (bc_len){BC_LEN_EXACT, n};
  o.get = never_get;
  o.thread_safe = true;
  int rc = bc_seq_new_callbacks(&c->leaf, &o);
  if (rc == 0) rc = bc_seq_shuffle(&c->shuffled, c->leaf, seed);
  if (rc != 0) {
    bcpy_order_cache_free(c);
    return rc;
  }
  c->n = n;
  c->seed = seed;
  return 0;
}

int bcpy_epoch_indices(uint64_t n, uint64_t seed, uint64_t start, uint64_t stride,
                       size_t count, bcpy_order_cache *cache, int64_t *out) {
  if (count == 0) return 0;
  bcpy_order_cache local = {0};
  bcpy_order_cache *c = cache != NULL ? cache : &local;
  int rc = cache_set(c, n, seed);
  for (size_t k = 0; k < count && rc == 0; k++) {
    bc_seq *l;
    uint64_t li;
    rc = bc_seq_resolve(c->shuffled, (int64_t)(start + k * stride), &l, &li);
    out[k] = (int64_t)li;
  }
  if (cache == NULL) bcpy_order_cache_free(&local);
  return rc;
}

/* ---- the steps --------------------------------------------------------------------- */

static int too_far(void) {
  return bc_set_errmsg(BC_ERANGE, "the sampler's position does not fit in 64 bits");
}

int bcpy_order_plan(const bcpy_order *o, uint64_t epoch, uint64_t consumed,
                    bcpy_step *out) {
  uint64_t n = o->length, g = o->world_size * o->batch_size; /* checked by the caller */
  bcpy_step s;
  if (o->mode == 2) {
    if (n == 0) return 0;
    if (consumed >= n || (o->drop_last && n - consumed < g)) {
      epoch++;
      consumed = 0;
    }
    if (o->finite && epoch >= o->num_epochs) return 0;
    uint64_t take = n - consumed < g ? n - consumed : g;
    if (o->drop_last && take < g) return 0; /* n < g: no full step in any epoch */
    s = (bcpy_step){consumed, take, epoch, epoch, consumed + take};
    if (s.consumed_after >= n || (o->drop_last && n - s.consumed_after < g)) {
      s.epoch_after = epoch + 1;
      s.consumed_after = 0;
    }
    *out = s;
    return 1;
  }
  if (n != 0 && epoch > (UINT64_MAX - consumed) / n) return too_far();
  uint64_t pos = epoch * n + consumed, take = g;
  if (o->finite) {
    /* take = min(g, num_epochs * n - pos); a total past 2**64 leaves g. */
    if (n == 0 || o->num_epochs <= UINT64_MAX / n) {
      uint64_t total = o->num_epochs * n;
      if (total <= pos) return 0;
      if (total - pos < g) take = total - pos;
    }
    if (o->drop_last && take < g) return 0;
  }
  if (take > UINT64_MAX - pos) return too_far();
  uint64_t end = pos + take;
  *out = (bcpy_step){pos, take, 0, end / n, end % n};
  return 1;
}

size_t bcpy_order_count(const bcpy_order *o, const bcpy_step *s) {
  /* max(0, min(batch_size, ceil((take - rank) / world_size))) */
  if (s->take <= o->rank) return 0;
  uint64_t c = (s->take - o->rank + o->world_size - 1) / o->world_size;
  return (size_t)(c < o->batch_size ? c : o->batch_size);
}

int bcpy_order_indices(const bcpy_order *o, const bcpy_step *s, bcpy_order_cache *c,
                       int64_t *out) {
  size_t count = bcpy_order_count(o, s);
  uint64_t first = s->start + o->rank, w = o->world_size;
  if (count == 0) return 0;
  if (o->mode == 2)
    return bcpy_epoch_indices(o->length, bcpy_epoch_seed(o->seed, s->epoch), first, w, count,
                              c, out);
  if (o->mode == 1) {
    bcpy_iid_indices(o->length, o->seed, first, w, count, out);
    return 0;
  }
  for (size_t k = 0; k < count; k++) out[k] = (int64_t)((first + k * w) % o->length);
  return 0;
}
