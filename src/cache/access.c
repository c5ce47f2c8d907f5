/*
 * The access-clock bumps of shard opens, committed in batches.
 *
 * A shard this process opens must look recently used to every process's
 * LRU eviction (fill.c's publish picks the PRESENT shard with the smallest
 * access clock value).  A bump is an LMDB write transaction, and its commit
 * syncs the disk: 0.2 to 2.5 ms here, against about 10 us for the rest of
 * an open, so an open does not commit its bump.  It notes the shard in the
 * cache's pending list, and the list is applied, in the order of the opens,
 *
 *   - by the open that finds its oldest entry ACCESS_DELAY_MS old or the
 *     list full: one write transaction for all of them;
 *   - inside the write transactions this process makes anyway that read
 *     the clock: a hit's once-a-second bump (readers.c) and a publish under
 *     a disk limit, before it picks victims (fill.c), so this process's own
 *     evictions always see its opens;
 *   - before bc_cache_shards lists the state, and when the cache is
 *     destroyed.
 *
 * So other processes see an open's bump about a second late at most while
 * this process keeps opening shards (a hit's bump is that late already),
 * and at the latest when the cache closes.  A bump is a hint for LRU
 * eviction, not state anyone depends on: a pending list lost with a failed
 * publish (or a killed process) only makes those shards look older.
 *
 * Lock order: the access log's lock guards the list and is taken alone,
 * briefly, also inside write transactions (allowed: it is never held while
 * waiting for LMDB, see internal.h).
 */
#include "config.h"

#include <string.h>

#include "cache/internal.h"

#define ACCESS_DELAY_MS 1000 /* the longest an open's bump waits */

static int64_t coarse_ms(void) { return (int64_t)(bc__coarse_now() * 1000.0); }

/* Moves the pending list into out[] (takes its lock); returns its length. */
static size_t take_pending(bc_cache *c, uint64_t *out) {
  pthread_mutex_lock(&c->access.lock);
  size_t n = c->access.n;
  memcpy(out, c->access.pending, n * sizeof *out);
  c->access.n = 0;
  pthread_mutex_unlock(&c->access.lock);
  return n;
}

/* Bumps shards[0..n) that are still PRESENT, in order, in transaction t. */
static int bump(const bc__store *s, bc__store_txn *t, const uint64_t *shards,
                size_t n, uint64_t *clock) {
  for (size_t i = 0; i < n; i++) {
    bc__shard_rec rec;
    bool found = false;
    int rc = s->ops->get(t, shards[i], &rec, &found);
    if (rc == 0 && found && rec.state == SHARD_PRESENT) {
      rec.last_access = ++*clock;
      rc = s->ops->put(t, shards[i], &rec);
    }
    if (rc != 0) return rc;
  }
  return 0;
}

int bc__access_apply(bc_cache *c, bc__store_txn *t, uint64_t *clock) {
  uint64_t shards[BC__ACCESS_PENDING];
  size_t n = take_pending(c, shards);
  return bump(&c->store, t, shards, n, clock);
}

void bc__access_flush(bc_cache *c) {
  uint64_t shards[BC__ACCESS_PENDING];
  size_t n = take_pending(c, shards);
  if (n == 0) return;
  const bc__store *s = &c->store;
  bc__store_txn *t;
  if (s->ops->begin(s->impl, true, &t) != 0) return; /* a hint: dropped */
  uint64_t clock = 0;
  bool found;
  if (s->ops->u64_get(t, BC__KEY_CLOCK, &clock, &found) == 0 &&
      bump(s, t, shards, n, &clock) == 0 &&
      s->ops->u64_put(t, BC__KEY_CLOCK, clock) == 0) {
    s->ops->commit(t);
    return;
  }
  s->ops->abort(t);
}

void bc__access_note(bc_cache *c, uint64_t shard) {
  int64_t now = coarse_ms();
  bool due = false;
  pthread_mutex_lock(&c->access.lock);
  size_t i = 0;
  while (i < c->access.n && c->access.pending[i] != shard) i++;
  if (i < c->access.n) {
    /* Already noted: it moves to the end (the most recent open). */
    memmove(&c->access.pending[i], &c->access.pending[i + 1],
            (c->access.n - i - 1) * sizeof c->access.pending[0]);
    c->access.pending[c->access.n - 1] = shard;
  } else {
    if (c->access.n == 0) c->access.since_ms = now;
    c->access.pending[c->access.n++] = shard;
  }
  due = c->access.n == BC__ACCESS_PENDING ||
        now - c->access.since_ms >= ACCESS_DELAY_MS;
  pthread_mutex_unlock(&c->access.lock);
  if (due) bc__access_flush(c);
}
