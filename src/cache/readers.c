/*
 * This process's open shard readers: at most max_open_shards, each in its
 * shard's slot (slots.h), trimmed by a CLOCK hand.
 *
 * A hit takes no lock and no atomic read-modify-write: find the slot, set
 * the thread's hazard on it, check it is open, read, clear the hazard
 * (slots.h); a thread already inside a read (whose hazard is busy) pins
 * instead.  The hit is counted in the thread's record, marks the slot
 * referenced (the CLOCK hand's second chance) and, at most once a second
 * per shard, bumps the shared access clock in LMDB (LRU eviction works at
 * shard granularity).  The time is read once every 16 hits of a thread (a
 * clock read costs as much as the rest of a hit), so a bump may come up to
 * 16 of its reads late.
 *
 * The readers' lock (readers.h) guards the open list, the CLOCK hand,
 * installs and the growth of the slot table: an open takes it once, a hit never.  A reader
 * is closed when it has been dropped (trimmed, or its shard evicted) and
 * its last user is done, by whoever finishes last: a reader in use is
 * never closed.
 *
 * Readers of evicted shards are dropped: at once for shards this process
 * evicted; for shards other processes evicted, about a second after (the
 * access-clock bump of a hit finds the shard gone, within 16 reads of the
 * thread) or when this process next opens a shard (idle readers are
 * checked then).
 *
 * A miss obtains the shard (fill / wait / take over, fill.c) with no lock
 * held, opens it, and checks it against its recorded size and record count;
 * a missing file (evicted by another process meanwhile) is obtained again,
 * a damaged one is forgotten and refilled, or reported without a source.
 * If the slot still holds an older reader that is dropped but in use, the
 * new one serves this read alone and is closed after it.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "bag/internal.h"
#include "cache/internal.h"

#define TOUCH_INTERVAL_MS 1000 /* between access-clock bumps per shard */
#define CLOCK_EVERY 16         /* hits of a thread per clock read */
#define TRIM_BATCH 16          /* readers closed per trim, at most */

/* ---- the open list and its CLOCK hand (readers' lock held) ------------- */

static int open_list_add(bc_cache *c, bc__slot *s) {
  if (c->readers.nopen == c->readers.open_cap) {
    size_t cap = c->readers.open_cap ? 2 * c->readers.open_cap : 64;
    bc__slot **grown = realloc(c->readers.open, cap * sizeof *grown);
    if (grown == NULL) return BC_ENOMEM;
    c->readers.open = grown;
    c->readers.open_cap = cap;
  }
  s->open_index = c->readers.nopen;
  c->readers.open[c->readers.nopen++] = s;
  return 0;
}

static void open_list_remove(bc_cache *c, bc__slot *s) {
  size_t i = s->open_index;
  if (i == SIZE_MAX) return;
  c->readers.open[i] = c->readers.open[--c->readers.nopen];
  c->readers.open[i]->open_index = i;
  s->open_index = SIZE_MAX;
  if (c->readers.hand >= c->readers.nopen) c->readers.hand = 0;
}

/* Drops slot s from the open list: no new pins; closed by its last user,
 * or by the caller's bc__slot_try_close after unlocking. */
static void drop_slot(bc_cache *c, bc__slot *s) {
  open_list_remove(c, s);
  bc__slot_drop(s);
}

/* drop_slot for a caller without the lock, if nobody dropped it yet. */
static void drop_if_open(bc_cache *c, bc__slot *s) {
  pthread_mutex_lock(&c->readers.lock);
  if (s->open_index != SIZE_MAX) drop_slot(c, s);
  pthread_mutex_unlock(&c->readers.lock);
}

/* Drops unused readers beyond max_open_shards, least recently used first
 * by the CLOCK hand: a referenced slot loses its mark and is passed over
 * once.  Pinned slots are skipped; a slot read through a hazard may be
 * dropped (its reader closes it when done).  Stores up to TRIM_BATCH dropped slots
 * in out[] (to try_close after unlocking) and returns how many. */
static size_t trim(bc_cache *c, bc__slot **out) {
  size_t max = c->opts.max_open_shards ? (size_t)c->opts.max_open_shards : 128;
  size_t n = 0;
  for (size_t steps = 2 * c->readers.nopen + 1;
       c->readers.nopen > max && n < TRIM_BATCH && steps > 0; steps--) {
    if (c->readers.hand >= c->readers.nopen) c->readers.hand = 0;
    bc__slot *s = c->readers.open[c->readers.hand];
    if (bc__slot_pins(s) > 0) {
      c->readers.hand++;
    } else if (atomic_exchange_explicit(&s->referenced, false,
                                        memory_order_relaxed)) {
      c->readers.hand++;
    } else {
      drop_slot(c, s); /* the last slot moves into the hand's place */
      out[n++] = s;
    }
  }
  return n;
}

static void close_dropped(bc_cache *c, bc__slot **slots, size_t n) {
  for (size_t i = 0; i < n; i++) bc__slot_try_close(&c->readers.slots, slots[i]);
}

/* The coarse time in milliseconds for the hit path, read from the clock
 * once every CLOCK_EVERY hits of a thread: under random access a clock
 * read costs more than the rest of a hit (its vDSO pages drop out of the
 * TLB), and so does the TSC in a virtual machine. */
static int64_t coarse_ms(void) { return (int64_t)(bc__coarse_now() * 1000.0); }

static int64_t hit_time_ms(bc__treg *g) {
  if (g->countdown == 0) {
    g->countdown = CLOCK_EVERY;
    g->ms = coarse_ms();
  }
  g->countdown--;
  return g->ms;
}

/* The calling thread's record in c: a small per-thread cache of the last
 * few caches used (keyed by serial number, which is never reused, so an
 * entry of a destroyed cache is never followed), else the table's list. */
static bc__treg *my_reg(bc_cache *c) {
  static _Thread_local struct {
    uint64_t serial;
    bc__treg *reg;
  } recent[4];
  static _Thread_local unsigned next_victim;
  for (int i = 0; i < 4; i++)
    if (recent[i].serial == c->serial) return recent[i].reg;
  pthread_mutex_lock(&c->readers.lock);
  bc__treg *g = bc__treg_get(&c->readers.slots);
  pthread_mutex_unlock(&c->readers.lock);
  if (g != NULL) {
    unsigned i = next_victim++ % 4;
    recent[i].serial = c->serial;
    recent[i].reg = g;
  }
  return g;
}

/* True when `rec` is a claim of this process: a shard read from its
 * scratch file while its publish is queued (publish-behind) is not gone. */
static bool queued_here(const bc_cache *c, const bc__shard_rec *rec) {
  return rec->state == SHARD_FILLING && rec->owner.pid == c->self.pid &&
         rec->owner.start_time == c->self.start_time;
}

/* Bumps the shard's access clock in the shared state, with the pending
 * bumps of opens (access.c) first.  Returns false when the shard is no
 * longer PRESENT (evicted by someone). */
static bool touch(bc_cache *c, uint64_t shard) {
  const bc__store *st = &c->store;
  bc__store_txn *t;
  if (st->ops->begin(st->impl, true, &t) != 0) return true;
  bc__shard_rec rec;
  bool found = false;
  uint64_t clock = 0;
  bool cf;
  if (st->ops->get(t, shard, &rec, &found) == 0 && found &&
      rec.state == SHARD_PRESENT &&
      st->ops->u64_get(t, BC__KEY_CLOCK, &clock, &cf) == 0 &&
      bc__access_apply(c, t, &clock) == 0) {
    rec.last_access = ++clock;
    if (st->ops->put(t, shard, &rec) == 0 &&
        st->ops->u64_put(t, BC__KEY_CLOCK, clock) == 0) {
      st->ops->commit(t);
      return true;
    }
  }
  bool present = found && (rec.state == SHARD_PRESENT || queued_here(c, &rec));
  st->ops->abort(t);
  return present;
}

/* Opens the shard file `path`; *id: the file's identity, taken before the
 * open, so that an open that fails names the file it failed on (or {0, 0}:
 * there was none), whatever a publish puts at `path` afterwards. */
static int open_shard_file(bc_cache *c, const char *path, bc_bag **out,
                           bc__file_id *id) {
  struct stat st;
  *id = stat(path, &st) == 0 ? (bc__file_id){(uint64_t)st.st_dev, (uint64_t)st.st_ino}
                             : (bc__file_id){0, 0};
  return bc__cache_open_shard(c, path, out);
}

/* Opens shard `shard` as described by `rec` and checks it: its file in
 * shards/ (*id: which file, for bc__forget_shard when it is bad), or
 * `scratch` when not NULL (publish-behind). */
static int open_checked(bc_cache *c, uint64_t shard, const bc__shard_rec *rec,
                        const char *scratch, bc_bag **out, bc__file_id *id) {
  char *path = scratch ? strdup(scratch)
                       : bc__cache_shard_path(c, shard, rec->records, rec->zstd);
  *id = (bc__file_id){0, 0};
  if (path == NULL) return bc__error(BC_ENOMEM, "out of memory");
  int rc = scratch ? bc__cache_open_scratch(c, path, out)
                   : open_shard_file(c, path, out, id);
  if (scratch && rc == BC_ENOTFOUND) {
    /* Renamed into shards/ by its publish meanwhile (the same file, its
     * records complete, its commit maybe still to come). */
    free(path);
    path = bc__cache_shard_path(c, shard, rec->records, rec->zstd);
    rc = path ? open_shard_file(c, path, out, id)
              : bc__error(BC_ENOMEM, "out of memory");
  }
  if (rc != 0) goto cleanup;
  bc_shard_info info;
  bc_bag_shard_info(*out, 0, &info);
  uint64_t records = bc_bag_len(*out);
  if (info.file_bytes != rec->bytes || records != rec->records) {
    bc_bag_close(*out);
    *out = NULL;
    rc = bc__error(BC_ECORRUPT,
                   "%s: damaged shard: %llu bytes and %llu records, expected "
                   "%llu bytes and %llu records", path,
                   (unsigned long long)info.file_bytes,
                   (unsigned long long)records,
                   (unsigned long long)rec->bytes,
                   (unsigned long long)rec->records);
  }
cleanup:
  free(path);
  return rc;
}

/* Drops idle readers of shards that are no longer PRESENT (evicted by
 * another process), so their unlinked files are closed and their space
 * freed.  Runs when this process opens a shard: at most max_open_shards
 * lookups in one read transaction, next to a file open. */
static void sweep_evicted(bc_cache *c) {
  uint64_t idle[128];
  size_t n = 0;
  pthread_mutex_lock(&c->readers.lock);
  for (size_t i = 0; i < c->readers.nopen && n < 128; i++)
    if (bc__slot_pins(c->readers.open[i]) == 0) idle[n++] = c->readers.open[i]->shard;
  pthread_mutex_unlock(&c->readers.lock);
  if (n == 0) return;
  uint64_t gone[128];
  size_t ngone = 0;
  /* Through the store: a claim of ours is in the lease state. */
  const bc__store *st = &c->store;
  bc__store_txn *t;
  if (st->ops->begin(st->impl, false, &t) != 0) return;
  for (size_t i = 0; i < n; i++) {
    bc__shard_rec rec;
    bool found = false;
    if (st->ops->get(t, idle[i], &rec, &found) == 0 &&
        !(found && (rec.state == SHARD_PRESENT || queued_here(c, &rec))))
      gone[ngone++] = idle[i];
  }
  st->ops->abort(t);
  if (ngone > 0) bc__readers_forget(c, gone, ngone);
}

/* The hit path's bookkeeping: count it, mark the slot referenced, and
 * bump the shared access clock if the last bump is a second old. */
static void note_hit(bc_cache *c, bc__treg *g, bc__slot *s) {
  atomic_store_explicit(&g->hits,
                        atomic_load_explicit(&g->hits, memory_order_relaxed) + 1,
                        memory_order_relaxed); /* the owner alone writes */
  if (!atomic_load_explicit(&s->referenced, memory_order_relaxed))
    atomic_store_explicit(&s->referenced, true, memory_order_relaxed);
  int64_t now = hit_time_ms(g);
  int64_t last = atomic_load_explicit(&s->touched_ms, memory_order_relaxed);
  if (now - last < TOUCH_INTERVAL_MS ||
      !atomic_compare_exchange_strong_explicit(&s->touched_ms, &last, now,
                                               memory_order_relaxed,
                                               memory_order_relaxed))
    return;
  if (!touch(c, s->shard)) {
    /* Evicted elsewhere: finish this read from the old mapping (same
     * bytes; our hazard or pin keeps it), but let the next one find the
     * shard anew. */
    drop_if_open(c, s);
  }
}

void bc__reader_count_hits(bc_cache *c, uint64_t n) {
  bc__treg *g = my_reg(c);
  if (g == NULL || n == 0) return;
  atomic_store_explicit(&g->hits,
                        atomic_load_explicit(&g->hits, memory_order_relaxed) + n,
                        memory_order_relaxed); /* the owner alone writes */
}

int bc__reader_acquire(bc_cache *c, uint64_t shard, bc__wait_mode mode,
                       bc__reader *out) {
  bc__treg *g = my_reg(c);
  bc__slot *s = bc__slots_find(&c->readers.slots, shard);
  if (s != NULL && g != NULL) {
    /* One hazard per thread: a thread already inside a read (a nested
     * one) pins instead. */
    bool busy = atomic_load_explicit(&g->hazard, memory_order_relaxed) != NULL;
    if (busy ? bc__slot_pin(s) : bc__slot_enter(g, s)) {
      note_hit(c, g, s);
      *out = (bc__reader){atomic_load_explicit(&s->bag, memory_order_relaxed),
                          shard * c->R, s, busy ? NULL : g};
      return 0;
    }
    if (busy) bc__slot_unpin(&c->readers.slots, s);
  }

  bc_bag *bag = NULL;
  int rc = 0;
  double t0 = bc__now(); /* the time a miss waits (stats' miss_ns) */
  int behind_misses = 0;
  for (int attempt = 0;; attempt++) {
    bc__shard_rec rec;
    char *scratch = NULL;
    if ((rc = bc__obtain_scratch(c, shard, mode, &rec, &scratch, &bag)) != 0)
      return rc;
    if (bag != NULL) break; /* filled here: its scratch file, open */
    bc__file_id id;
    rc = open_checked(c, shard, &rec, scratch, &bag, &id);
    bool behind = scratch != NULL;
    free(scratch);
    if (rc == 0) break;
    /* Between the renames of its publish (the sidecar goes first), or its
     * publish failed meanwhile: look again (obtain returns the failure),
     * for a while. */
    if (behind && rc == BC_ENOTFOUND && behind_misses++ < 2000) {
      attempt--;
      struct timespec ts = {0, 500000};
      nanosleep(&ts, NULL);
      continue;
    }
    if (attempt >= 8 || behind) return rc;
    if (rc == BC_ENOTFOUND) {
      /* Evicted by another process meanwhile (its state is gone: obtain
       * refills), or lost (its state remains: drop it, then refill). */
      if ((rc = bc__forget_shard(c, shard, &id)) != 0) return rc;
      continue;
    }
    if (rc == BC_EPERM && c->has_source) {
      /* Unreadable (its permissions were changed): as good as missing, so
       * made anew.  Replacing it needs only the directory's permission;
       * without that the refill fails with BC_EPERM itself. */
      bc__notice("%s; regenerating it", bc_errmsg());
      if ((rc = bc__forget_shard(c, shard, &id)) != 0) return rc;
      continue;
    }
    if (rc != BC_ECORRUPT) return rc;
    if (!c->has_source)
      return bc__error_wrap(BC_ECORRUPT, "%s (and the cache has no source to "
                            "regenerate it)", bc_errmsg());
    bc__notice("%s; regenerating it", bc_errmsg());
    if ((rc = bc__forget_shard(c, shard, &id)) != 0) return rc;
  }
  atomic_fetch_add(&c->stats.shard_opens, 1);
  atomic_fetch_add(&c->stats.miss_ns, (uint64_t)((bc__now() - t0) * 1e9));
  bc__access_note(c, shard); /* no disk sync here: committed in a batch */

  bc__slot *closing[TRIM_BATCH];
  size_t nclosing = 0;
  *out = (bc__reader){bag, shard * c->R, NULL, NULL}; /* alone unless
                                                          installed */
  pthread_mutex_lock(&c->readers.lock);
  s = bc__slots_get(&c->readers.slots, shard);
  if (s != NULL && bc__slot_pin(s)) {
    /* Another thread opened it meanwhile (an open slot is only dropped
     * under the lock we hold): use that one. */
    pthread_mutex_unlock(&c->readers.lock);
    bc_bag_close(bag);
    sweep_evicted(c);
    *out = (bc__reader){atomic_load_explicit(&s->bag, memory_order_relaxed),
                        shard * c->R, s, NULL};
    return 0;
  }
  if (s != NULL) {
    bc__slot_unpin(&c->readers.slots, s); /* the failed pin above; may close an old
                                     reader */
    if (bc__slot_install(s, bag)) {
      if (open_list_add(c, s) != 0) {
        bc__slot_drop(s); /* no room in the list: serve this read alone */
      } else {
        atomic_store_explicit(&s->touched_ms, coarse_ms(), memory_order_relaxed);
        atomic_store_explicit(&s->referenced, true, memory_order_relaxed);
        nclosing = trim(c, closing);
      }
      out->slot = s;
    }
  }
  pthread_mutex_unlock(&c->readers.lock);
  close_dropped(c, closing, nclosing);
  /* After the trim: readers it just closed need no lookup (with one open
   * shard allowed, none is left to check, and no transaction is begun). */
  sweep_evicted(c);
  bc__prefetch_after(c, shard * c->R);
  return 0;
}

void bc__reader_release(bc_cache *c, bc__reader *r) {
  if (r->reg != NULL)
    bc__slot_exit(&c->readers.slots, r->reg, r->slot);
  else if (r->slot != NULL)
    bc__slot_unpin(&c->readers.slots, r->slot);
  else
    bc_bag_close(r->bag);
}

void bc__reader_discard(bc_cache *c, bc__reader *r) {
  if (r->slot != NULL) drop_if_open(c, r->slot); /* no new reads from it */
  bc__reader_release(c, r); /* closes it when no other read is in it */
}

void bc__readers_forget(bc_cache *c, const uint64_t *shards, size_t n) {
  for (size_t i = 0; i < n; i++) {
    bc__slot *s = bc__slots_find(&c->readers.slots, shards[i]);
    if (s == NULL) continue;
    drop_if_open(c, s);
    bc__slot_try_close(&c->readers.slots, s);
  }
}

uint64_t bc__readers_hits(bc_cache *c) {
  uint64_t hits = 0;
  pthread_mutex_lock(&c->readers.lock);
  for (bc__treg *g = c->readers.slots.regs; g != NULL; g = g->next)
    hits += atomic_load_explicit(&g->hits, memory_order_relaxed);
  pthread_mutex_unlock(&c->readers.lock);
  return hits;
}

size_t bc__readers_open_count(bc_cache *c) {
  pthread_mutex_lock(&c->readers.lock);
  size_t n = c->readers.nopen;
  pthread_mutex_unlock(&c->readers.lock);
  return n;
}

void bc__readers_close_all(bc_cache *c) {
  for (bc__slot *s = c->readers.slots.all; s != NULL; s = s->next_all) {
    uint64_t v = atomic_load_explicit(&s->word, memory_order_relaxed);
    if (v & BC__SLOT_HASBAG)
      bc_bag_close(atomic_load_explicit(&s->bag, memory_order_relaxed));
  }
  bc__slots_free(&c->readers.slots);
  free(c->readers.open);
  c->readers.open = NULL;
  c->readers.nopen = c->readers.open_cap = c->readers.hand = 0;
}
