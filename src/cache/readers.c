/*
 * The per-process LRU of open shard readers (at most max_open_shards).
 *
 * A hit costs one lock/unlock (lookup, users++, move to front); release is
 * one more.  A reader is closed only when it is unused (users == 0), under
 * the lock, so a reader in use is never closed.  The shared access clock in
 * LMDB is bumped when a shard is opened, and on hits at most once a second
 * per shard (LRU eviction works at shard granularity).
 *
 * Readers of evicted shards are dropped: at once for shards this process
 * evicted; for shards other processes evicted, within a second of use (the
 * access-clock bump finds the shard gone) or when this process next opens
 * a shard (idle readers are checked then).  A dropped reader still in use
 * is closed by its last user.
 *
 * A miss obtains the shard (fill / wait / take over, fill.c) with no lock
 * held, opens it, and checks it against its recorded size and record count;
 * a missing file (evicted by another process meanwhile) is obtained again,
 * a damaged one is forgotten and refilled, or reported without a source.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cache/internal.h"

#define TOUCH_INTERVAL 1.0 /* seconds between access-clock bumps per shard */

static size_t bucket_of(uint64_t shard) {
  return (size_t)(bc__mix_for_buckets(shard) & (BC__READER_BUCKETS - 1));
}

static bc__reader *lookup(bc_cache *c, uint64_t shard) {
  for (bc__reader *r = c->buckets[bucket_of(shard)]; r; r = r->hnext)
    if (r->shard == shard) return r;
  return NULL;
}

static void lru_unlink(bc_cache *c, bc__reader *r) {
  if (r->prev) r->prev->next = r->next; else c->lru_head = r->next;
  if (r->next) r->next->prev = r->prev; else c->lru_tail = r->prev;
  r->prev = r->next = NULL;
}

static void lru_push_front(bc_cache *c, bc__reader *r) {
  r->prev = NULL;
  r->next = c->lru_head;
  if (c->lru_head) c->lru_head->prev = r; else c->lru_tail = r;
  c->lru_head = r;
}

static void table_remove(bc_cache *c, bc__reader *r) {
  for (bc__reader **p = &c->buckets[bucket_of(r->shard)]; *p; p = &(*p)->hnext)
    if (*p == r) {
      *p = r->hnext;
      break;
    }
  lru_unlink(c, r);
  c->nreaders--;
}

/* Unlinks unused readers beyond the limit (lock held); returns them as a
 * list to close after unlocking. */
static bc__reader *trim(bc_cache *c) {
  size_t max = c->opts.max_open_shards ? (size_t)c->opts.max_open_shards : 128;
  bc__reader *closing = NULL;
  for (bc__reader *r = c->lru_tail; r && c->nreaders > max;) {
    bc__reader *prev = r->prev;
    if (r->users == 0) {
      table_remove(c, r);
      r->hnext = closing;
      closing = r;
    }
    r = prev;
  }
  return closing;
}

static void close_list(bc__reader *r) {
  while (r) {
    bc__reader *next = r->hnext;
    bc_bag_close(r->bag);
    free(r);
    r = next;
  }
}

/* Unlinks a reader from the table and LRU (lock held); an unused one is
 * returned for closing, one in use is left to its last user. */
static bc__reader *drop_reader(bc_cache *c, bc__reader *r) {
  table_remove(c, r);
  if (r->users > 0) {
    r->orphan = true;
    return NULL;
  }
  r->hnext = NULL;
  return r;
}

/* Bumps the shard's access clock in the shared state.  Returns false when
 * the shard is no longer PRESENT (evicted by someone). */
static bool touch(bc_cache *c, uint64_t shard) {
  MDB_txn *t;
  if (bc__txn_begin(c->env, true, &t) != 0) return true;
  bc__shard_rec rec;
  bool found;
  uint64_t clock = 0;
  bool cf;
  if (bc__rec_get(t, bc__dbi_shard(c->env), shard, &rec, &found) == 0 && found &&
      rec.state == SHARD_PRESENT &&
      bc__u64_get(t, bc__dbi_meta(c->env), "clock", &clock, &cf) == 0) {
    rec.last_access = ++clock;
    if (bc__rec_put(t, bc__dbi_shard(c->env), shard, &rec) == 0 &&
        bc__u64_put(t, bc__dbi_meta(c->env), "clock", clock) == 0) {
      bc__txn_commit(t);
      return true;
    }
  }
  bool present = found && rec.state == SHARD_PRESENT;
  mdb_txn_abort(t);
  return present;
}

/* Opens shard `shard` as described by `rec` and checks it. */
static int open_checked(bc_cache *c, uint64_t shard, const bc__shard_rec *rec,
                        bc_bag **out) {
  char path[4200];
  bc__cache_shard_file(c, shard, rec->records, rec->zstd, path, sizeof path);
  bc_reader_options o = BC_READER_OPTIONS_INIT;
  o.max_parallelism = 1;
  int rc = bc_bag_open(out, path, &o);
  if (rc != 0) return rc;
  bc_shard_info info;
  bc_bag_shard_info(*out, 0, &info);
  uint64_t records = bc_bag_len(*out);
  if (info.file_bytes != rec->bytes || records != rec->records) {
    bc_bag_close(*out);
    *out = NULL;
    return bc__error(BC_ECORRUPT,
                     "%s: damaged shard: %llu bytes and %llu records, expected "
                     "%llu bytes and %llu records", path,
                     (unsigned long long)info.file_bytes,
                     (unsigned long long)records,
                     (unsigned long long)rec->bytes,
                     (unsigned long long)rec->records);
  }
  return 0;
}

/* Drops idle readers of shards that are no longer PRESENT (evicted by
 * another process), so their unlinked files are closed and their space
 * freed.  Runs when this process opens a shard: at most max_open_shards
 * lookups in one read transaction, next to a file open. */
static void sweep_evicted(bc_cache *c) {
  uint64_t idle[128];
  size_t n = 0;
  pthread_mutex_lock(&c->lock);
  for (bc__reader *r = c->lru_head; r && n < 128; r = r->next)
    if (r->users == 0) idle[n++] = r->shard;
  pthread_mutex_unlock(&c->lock);
  if (n == 0) return;
  uint64_t gone[128];
  size_t ngone = 0;
  MDB_txn *t;
  if (bc__txn_begin(c->env, false, &t) != 0) return;
  for (size_t i = 0; i < n; i++) {
    bc__shard_rec rec;
    bool found = false;
    if (bc__rec_get(t, bc__dbi_shard(c->env), idle[i], &rec, &found) == 0 &&
        !(found && rec.state == SHARD_PRESENT))
      gone[ngone++] = idle[i];
  }
  mdb_txn_abort(t);
  if (ngone > 0) bc__readers_forget(c, gone, ngone);
}

int bc__reader_acquire(bc_cache *c, uint64_t shard, bc__reader **out) {
  pthread_mutex_lock(&c->lock);
  bc__reader *r = lookup(c, shard);
  if (r != NULL) {
    r->users++;
    if (c->lru_head != r) {
      lru_unlink(c, r);
      lru_push_front(c, r);
    }
    double now = bc__coarse_now();
    bool bump = now - r->touched > TOUCH_INTERVAL;
    if (bump) r->touched = now;
    pthread_mutex_unlock(&c->lock);
    atomic_fetch_add_explicit(&c->stats.hits, 1, memory_order_relaxed);
    if (bump && !touch(c, shard)) {
      /* Evicted elsewhere: finish this read from the old mapping (same
       * bytes), but let the next one find the shard anew. */
      pthread_mutex_lock(&c->lock);
      if (!r->orphan) drop_reader(c, r); /* in use by us: not closed here */
      pthread_mutex_unlock(&c->lock);
    }
    *out = r;
    return 0;
  }
  pthread_mutex_unlock(&c->lock);

  bc_bag *bag = NULL;
  int rc = 0;
  for (int attempt = 0;; attempt++) {
    bc__shard_rec rec;
    if ((rc = bc__obtain(c, shard, false, &rec)) != 0) return rc;
    rc = open_checked(c, shard, &rec, &bag);
    if (rc == 0) break;
    if (attempt >= 8) return rc;
    if (rc == BC_ENOTFOUND) {
      /* Evicted by another process meanwhile (its state is gone: obtain
       * refills), or lost (its state remains: drop it, then refill). */
      if ((rc = bc__forget_shard(c, shard, &rec)) != 0) return rc;
      continue;
    }
    if (rc != BC_ECORRUPT) return rc;
    if (!c->has_source) {
      char detail[1024];
      snprintf(detail, sizeof detail, "%s", bc_errmsg());
      return bc__error(BC_ECORRUPT, "%s (and the cache has no source to "
                       "regenerate it)", detail);
    }
    bc__notice("%s; regenerating it", bc_errmsg());
    if ((rc = bc__forget_shard(c, shard, &rec)) != 0) return rc;
  }
  atomic_fetch_add(&c->stats.shard_opens, 1);
  touch(c, shard);
  sweep_evicted(c);

  r = calloc(1, sizeof *r);
  if (r == NULL) {
    bc_bag_close(bag);
    return bc__error(BC_ENOMEM, "out of memory");
  }
  r->shard = shard;
  r->start = shard * c->R;
  r->bag = bag;
  r->users = 1;
  r->touched = bc__coarse_now();
  pthread_mutex_lock(&c->lock);
  bc__reader *other = lookup(c, shard);
  if (other != NULL) { /* another thread opened it meanwhile: use that one */
    other->users++;
    pthread_mutex_unlock(&c->lock);
    close_list(r);
    *out = other;
    return 0;
  }
  r->hnext = c->buckets[bucket_of(shard)];
  c->buckets[bucket_of(shard)] = r;
  lru_push_front(c, r);
  c->nreaders++;
  bc__reader *closing = trim(c);
  pthread_mutex_unlock(&c->lock);
  close_list(closing);
  bc__prefetch_after(c, shard * c->R);
  *out = r;
  return 0;
}

void bc__reader_release(bc_cache *c, bc__reader *r) {
  pthread_mutex_lock(&c->lock);
  r->users--;
  bc__reader *closing = NULL;
  if (r->users == 0) {
    if (r->orphan) {
      r->hnext = NULL;
      closing = r;
    } else {
      closing = trim(c);
    }
  }
  pthread_mutex_unlock(&c->lock);
  close_list(closing);
}

void bc__readers_forget(bc_cache *c, const uint64_t *shards, size_t n) {
  bc__reader *closing = NULL;
  pthread_mutex_lock(&c->lock);
  for (size_t i = 0; i < n; i++) {
    bc__reader *r = lookup(c, shards[i]);
    if (r == NULL) continue;
    bc__reader *dropped = drop_reader(c, r);
    if (dropped) {
      dropped->hnext = closing;
      closing = dropped;
    }
  }
  pthread_mutex_unlock(&c->lock);
  close_list(closing);
}

void bc__readers_close_all(bc_cache *c) {
  bc__reader *r = c->lru_head;
  while (r) {
    bc__reader *next = r->next;
    bc_bag_close(r->bag);
    free(r);
    r = next;
  }
  c->lru_head = c->lru_tail = NULL;
  memset(c->buckets, 0, sizeof c->buckets);
  c->nreaders = 0;
}
